/* The effective configuration of kdev-plugin as JSON, for its start-up line
 * (common/version.h kdev_log_running_with_config()).
 *
 * The NVIDIA part has the shape and field names of NVIDIA's device plugin
 * config as its plugin logs it after "Running with config:" (v0.20.0,
 * api/config/v1: config.go, flags.go, resources.go, sharing.go,
 * replicas.go, imex.go, marshalled by encoding/json):
 *
 *   {"version":"v1",
 *    "flags":{"migStrategy":"none","failOnInitError":true,"mpsRoot":"",
 *             "nvidiaDriverRoot":"/","nvidiaDevRoot":"/","gdrcopyEnabled":false,
 *             "gdsEnabled":false,"mofedEnabled":false,
 *             "deviceDiscoveryStrategy":"auto",
 *             "plugin":{"passDeviceSpecs":false,"deviceListStrategy":["envvar"],
 *                       "deviceIDStrategy":"uuid","cdiAnnotationPrefix":"cdi.k8s.io/",
 *                       "nvidiaCTKPath":"/usr/bin/nvidia-ctk",
 *                       "containerDriverRoot":"/driver-root",
 *                       "sharedDevicesAllocationPolicy":"distributed"}},
 *    "resources":{"gpus":[{"pattern":"*","name":"nvidia.com/gpu"}]},
 *    "sharing":{"timeSlicing":{}},
 *    "imex":{},
 *    ...kdev's own keys below}
 *
 * as NVIDIA fills it: omitempty fields left out when empty (mpsRoot is
 * always there, its flag's default "" being set), resources with the default
 * GPU resource (and, for migStrategy single, "mig":[{"pattern":"*","name":
 * "nvidia.com/gpu"}]), sharing.timeSlicing always an object,
 * sharing.timeSlicing/mps {renameByDefault (when true),
 * failRequestsGreaterThanOne (when given; mps: true when not given, as
 * NVIDIA's NewConfig), resources:[{name, rename (when given), devices ("all",
 * a count or the list), replicas}]}, sharing.mps only when configured, imex
 * {channelIDs (when any), required (when true)}. Differences: kdev leaves
 * out what it ignores (flags.useNodeFeatureAPI, flags.gfd, which NVIDIA's
 * plugin prints as null and drops), and under migStrategy mixed the per-
 * profile MIG resources that NVIDIA adds from NVML (kdev logs each served
 * resource on its own "resource" line after discovery). Sharing resources
 * keep the rename and devices kdev applies (NVIDIA's plugin clears them with
 * a warning). When the configuration does not want NVIDIA GPUs (a file with
 * only `generic`), the NVIDIA keys are left out.
 *
 * kdev's own keys: "health" {"probeInterval","quietPeriod"} (seconds, the
 * config file's `health` section), "usage" {"interval"} (seconds; only when
 * usage sampling is on), "generic" (the `generic` section as read:
 * {"devices":[{"name","groups":[{"paths":[{"path","mountPath" (when given),
 * "permissions","limit"}],"count"}]}]}; only with a config file that has
 * one, with at least one resource), "isolation" (only with an `isolation`
 * section: {"resources":[{"name","memory" (bytes, null: the GPU's memory /
 * replicas),"compute" (percent, null: 100 / replicas),"policy" (null: the
 * library's),"preload"}],"shareRoot","shareLibrary" (null: next to the
 * binary)}), and "kdev" {"configFile" (null: none), "devicePluginDir",
 * "kubeletSocket", "socketPrefix", "cdiDir", "procRoot", "root" (--root,
 * null: /), "metricsAddress" (null: off), "nfdFeaturesFile" (null: off)}. */
#ifndef KDEV_DAEMON_CONFIG_JSON_H
#define KDEV_DAEMON_CONFIG_JSON_H

#include "common/export.h"
#include "daemon/dp_daemon.h"
#include "generic/generic.h"
#include "nvidia/config.h"

/* The compact JSON text (one line, keys in the order above) of the merged
 * configuration: |nv| after kdev_nvidia_config_finish(), |generic| the
 * generic section read (NULL: none) and the daemon options |o| (paths as
 * given; NULL ones with their defaults). Returns a malloc'ed string (free
 * it), or NULL when out of memory. */
KDEV_API char *kdev_dp_config_json(const struct kdev_nvidia_config *nv,
                                   const struct kdev_generic_config *generic,
                                   const struct kdev_dp_daemon_options *o);

#endif /* KDEV_DAEMON_CONFIG_JSON_H */
