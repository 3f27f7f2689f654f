/* kdev device plugin daemon: the wiring of kdev-plugin behind its flags.
 *
 * kdev_dp_daemon_run() loads the configuration (src/generic: the YAML file
 * with NVIDIA's sections), discovers the devices (generic /dev globs, NVIDIA
 * GPUs through the NVIDIA backend), hands them to the device plugin runtime
 * (src/plugin/runtime.h: one socket per resource, registered with kubelet),
 * and wires what runs beside it: NVIDIA health and rediscovery (through the
 * backend), node labels for Node Feature Discovery (--nfd-features-file:
 * written at start, after a rediscovery, on a timer that retries failures,
 * and on SIGHUP), Prometheus metrics (--metrics-address) and the signals
 * (SIGHUP: read the configuration again and apply it live; SIGTERM, SIGINT,
 * SIGQUIT: stop cleanly). With per-node configs (--config-dir) it watches
 * its Node through the kube client and applies the config that the label
 * nvidia.com/device-plugin.config selects whenever the label changes.
 *
 * Live configuration (SIGHUP, a label change): the new configuration is read
 * and built in full (config file, generic discovery, NVML discovery, NVIDIA
 * resources, CDI spec) beside the one in force; if anything fails, the one
 * in force stays, untouched, and the error is logged ("cannot load the new
 * configuration, the current one stays in force", with file:line:column for
 * the file). Otherwise, resource by resource: the same definition (name,
 * device IDs, device nodes, NUMA nodes, NVIDIA's Allocate settings and
 * devinfo) keeps its server, registration and ListAndWatch streams; a
 * changed one gets a fresh server and registers again; a new one is served
 * and registered; one that is gone is stopped and its socket removed. Health
 * carries over by physical device. SIGHUP with nothing changed serves and
 * registers every resource again (the kubelet-restart recovery it always
 * was).
 *
 * Generic devices are live (src/generic/live.h): while a configuration is
 * served its globs are watched and rescanned, devices that appear are
 * advertised, vanished ones are Unhealthy and dropped after the grace
 * period, re-pointed symlinks change what Allocate answers; each change is
 * one kdev_dp_runtime_notify().
 *
 * It lives in its own module because it needs the generic backend, the
 * NVIDIA backend, the plugin runtime and the metrics together, and the
 * NVIDIA backend already depends on src/plugin (CMakeLists.txt: kdev_daemon).
 * Logs through common/log.h; --check prints to stdout. */
#ifndef KDEV_DAEMON_DP_DAEMON_H
#define KDEV_DAEMON_DP_DAEMON_H

#include <stdbool.h>

#include <uv.h>

#include "common/err.h"
#include "common/export.h"
#include "nvidia/config.h"
#include "plugin/runtime.h"

struct kdev_dp_daemon;

/* NVIDIA's label and fallback name. */
#define KDEV_NODE_CONFIG_LABEL "nvidia.com/device-plugin.config"
#define KDEV_NODE_CONFIG_FALLBACK_NAME "default"
#define KDEV_NODE_CONFIG_FALLBACKS "named,single"

/* Per-node configs (NVIDIA's config-manager, built in): where the named
 * configs are and how one is chosen; see src/daemon/node_config_internal.h
 * for the rules. Strings borrowed for the whole run. */
struct kdev_node_config_options {
        const char *dir;          /* the named configs */
        const char *default_name; /* NULL or "": none */
        const char *fallbacks;    /* comma-separated; NULL: KDEV_NODE_CONFIG_FALLBACKS */
        const char *label;        /* NULL: KDEV_NODE_CONFIG_LABEL */
        const char *node_name;    /* this node (NODE_NAME) */
        const char *kubeconfig;   /* NULL: in-cluster (kdev_kube_config_load) */
};


/* What kdev-plugin's flags and environment say. Strings are borrowed for
 * the whole run. */
struct kdev_dp_daemon_options {
        const char *config;          /* YAML config file; NULL: none (NVIDIA's defaults) */
        struct kdev_dp_options dp;   /* plugin_dir, socket_prefix; hooks set by the daemon */
        const char *generic_root;    /* --root: generic device nodes looked up under it */
        const char *metrics_address; /* HOST:PORT, validated; NULL or "": metrics off */
        const char *nfd_file;        /* node labels file; NULL or "": off */
        const char *machine_type_file; /* nvidia.com/gpu.machine source; NULL: DMI's */
        /* KDEV_NVIDIA_REDISCOVER_INTERVAL: seconds (0 < s <= 86400) between
         * NVIDIA rediscoveries; NULL or "": the backend's default (30 s) */
        const char *rediscover_interval;
        /* KDEV_NVIDIA_WITHDRAW_GRACE: seconds (0 <= s <= 86400) a GPU or MIG
         * device that left the node stays advertised Unhealthy (pods may
         * still hold it) before it is dropped; NULL or "": 300, kubelet's
         * endpointStopGracePeriod */
        const char *withdraw_grace;
        bool check;                  /* --check: discover, print the resources, return */
        /* --list-gpus (with check): print the GPUs found instead of the
         * resources, one line each in nvidia-smi's CSV form:
         *   <uuid>, <name>, <memory> MiB, <pci bus id>, <minor>, <MIG mode>
         * MIG mode Enabled, Disabled or [N/A] (not MIG capable), as
         * nvidia-smi --query-gpu=uuid,name,memory.total,pci.bus_id,
         * mig.mode.current --format=csv,noheader writes them (the minor
         * number is what nvidia-smi -q calls "Minor Number"). Read-only:
         * NVML queries only, as for --check. */
        bool list_gpus;
        /* NVIDIA configuration with the flags applied (kdev_nvidia_config_init
         * and _apply_flag); the daemon applies |environ| and the file to it.
         * Borrowed; the caller clears it after the run. */
        struct kdev_nvidia_config *nv;
        char **environ;              /* NVIDIA's environment variables; NULL: none */
        /* The NVIDIA flags applied to |nv|, in order (value NULL: a boolean
         * flag without a value), applied again to a fresh NVIDIA config at
         * each reload (kdev_nvidia_config_apply_flag). */
        const struct kdev_dp_nv_flag {
                const char *name;
                const char *value;
        } *nv_flags;
        size_t n_nv_flags;
        /* Per-node configs (--config-dir; node_config.dir NULL: off, then
         * |config| is the file): the node label selects one of the named
         * configs in the directory (daemon/node_config_internal.h). */
        struct kdev_node_config_options node_config;
        /* kubelet's PodResources socket, asked (List) at each usage sample
         * (with metrics on and the NVIDIA option usage.interval > 0) which
         * container holds which device: NULL: KDEV_PODRES_SOCKET
         * (podres/client.h); "": none (every use unattributed). */
        const char *podres_socket;
        /* kubelet's log directory, whose pods/ and containers/ entries give
         * the pod UIDs and container IDs behind PodResources' names
         * (usage/usage.h kdev_usage_logs_read); NULL: /var/log. */
        const char *pod_log_dir;
        /* called once on the loop thread when serving (not for --check);
         * may call kdev_dp_daemon_stop() or add handles to the loop */
        void (*on_started)(void *arg, struct kdev_dp_daemon *d);
        void *on_started_arg;
};

/* Runs the daemon until a stop (SIGTERM, SIGINT, SIGQUIT or
 * kdev_dp_daemon_stop()), or once for --check (the resources, or with
 * list_gpus the GPUs, printed to stdout). Returns 0 after a stop or a --check that succeeded, or a negative
 * errno with |err| (may be NULL) when the configuration, discovery or
 * serving failed; that error is logged as "cannot start" too. Everything it
 * opened is closed when it returns (the sockets removed, the labels file
 * kept). */
KDEV_API int kdev_dp_daemon_run(const struct kdev_dp_daemon_options *o, struct kdev_err *err);

/* Stops a running daemon as SIGTERM does, logging "stopping" with signal
 * |why|: NVIDIA health first, then the runtime (sockets removed), then the
 * timers and metrics; kdev_dp_daemon_run() returns once all have closed. A
 * second call does nothing. Loop thread only. */
KDEV_API void kdev_dp_daemon_stop(struct kdev_dp_daemon *d, const char *why);

/* As SIGHUP: reads the configuration again and applies it live (see
 * above; nothing changed: serves and registers every resource again),
 * rewrites the node labels. Loop thread only. */
KDEV_API void kdev_dp_daemon_restart(struct kdev_dp_daemon *d);

/* The daemon's event loop, for the caller's own handles. */
KDEV_API uv_loop_t *kdev_dp_daemon_loop(struct kdev_dp_daemon *d);

/* The device plugin runtime serving the resources; NULL once a stop has
 * reached it (after the NVIDIA backend stopped). */
KDEV_API struct kdev_dp_runtime *kdev_dp_daemon_runtime(struct kdev_dp_daemon *d);

#endif /* KDEV_DAEMON_DP_DAEMON_H */
