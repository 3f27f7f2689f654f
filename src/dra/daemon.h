/* kdev DRA daemon: the wiring of kdev-dra-plugin behind its flags.
 *
 * kdev_dra_daemon_run() discovers the GPUs through NVML, publishes them as
 * the node's ResourceSlice pool (src/dra/slices.h), serves plugin
 * registration and the DRAPlugin services (src/dra/plugin.h), watches the
 * GPUs' health and runs until SIGTERM/SIGINT or kdev_dra_daemon_stop().
 *
 * API access never blocks the event loop: slice reconciles run on libuv's
 * thread pool with their own client and a snapshot of the desired devices,
 * one at a time (changes meanwhile coalesce into one follow-up; a stop
 * aborts a reconcile in flight); claim reads of NodePrepareResources run on
 * the thread pool with another client. NodePrepareResources refuses a
 * device currently withdrawn as unhealthy.
 *
 * Reconciles: at start, then every resync_ms; a failure is retried after
 * 1 s, doubled after each further failure up to 60 s; a success resets the
 * delay to 1 s. Health: NVIDIA's XID monitor (src/nvidia/health.h) over the
 * whole GPUs and each MIG device as physical devices (migStrategy mixed;
 * when the MIG capability nodes under the proc root cannot be read, logged,
 * the whole GPUs only, migStrategy none), so a critical XID that carries a
 * GPU instance and compute instance ID faults that MIG device only, one
 * without them the GPU with all its MIG devices; the daemon subscribes to
 * the monitor's physical events (model/model.h: GPU or MIG UUID, fault or
 * recovery, reason) and, on every batch that changes them, updates the
 * health stream kubelet watches (dra/health.h: every device the node has,
 * Unhealthy with the fault's reason, Healthy with the recovery's reason or
 * no message; resent every KDEV_DRA_HEALTH_RESEND_MS) and rebuilds and
 * reconciles the slices at once (an unhealthy device withdrawn).
 * DP_DISABLE_HEALTHCHECKS / DP_ENABLE_HEALTHCHECKS select the XIDs as for
 * kdev-plugin.
 *
 * On a stop the sockets are removed; the ResourceSlices and the prepared
 * claims are left in place (a restarted plugin reconciles them).
 *
 * Logs through common/log.h (the daemon is the one place that logs). */
#ifndef KDEV_DRA_DAEMON_H
#define KDEV_DRA_DAEMON_H

#include <stdbool.h>
#include <stdint.h>

#include <uv.h>

#include "common/err.h"
#include "dra/plugin.h"

#define KDEV_DRA_DEFAULT_REGISTRY "/var/lib/kubelet/plugins_registry"
#define KDEV_DRA_DEFAULT_PLUGINS "/var/lib/kubelet/plugins"
/* nvidia-container-toolkit's default nvidia-cdi-hook path (discover/hooks.go) */
#define KDEV_DRA_DEFAULT_CDI_HOOK "/usr/bin/nvidia-cdi-hook"
#define KDEV_DRA_BACKOFF_FIRST_MS 1000
#define KDEV_DRA_BACKOFF_MAX_MS 60000

struct kdev_dra_daemon;

/* What kdev-dra-plugin's flags say, validated by the caller (names are DNS
 * subdomains, paths non-empty). Strings are borrowed for the whole run. */
/* kdev-dra-plugin's default --share-root: apart from kdev-plugin's
 * (/var/lib/kdev/share), whose clean-up rule knows only its own regions. */
#define KDEV_DRA_DEFAULT_SHARE_ROOT "/var/lib/kdev/dra-share"

struct kdev_dra_daemon_options {
        const char *driver;        /* DRA driver name */
        const char *node;          /* node name = pool name */
        const char *registry;      /* kubelet's plugins registry directory */
        const char *plugin_dir;    /* dra.sock and checkpoint; NULL: PLUGINS/<driver> */
        const char *cdi_dir;       /* claim CDI specs */
        const char *kubeconfig;    /* NULL: in-cluster */
        const char *api_version;   /* resource.k8s.io version: "v1" or "v1beta1" */
        const char *driver_root;   /* NVIDIA driver root */
        const char *cdi_hook;      /* NULL or "": KDEV_DRA_DEFAULT_CDI_HOOK */
        const char *proc_root;     /* driver/nvidia-caps/mig-minors is read below it */
        /* bus/pci/devices/<bus id> is read below it (NUMA node, PCIe root,
         * DRM nodes); NULL: "/sys" */
        const char *sysfs_root;
        const char *probe_s;       /* --health-probe-interval (whole seconds) or NULL */
        const char *quiet_s;       /* --health-quiet-period (whole seconds) or NULL */
        uint64_t resync_ms;        /* between reconciles, > 0 */
        /* between GPU inventory checks (GPUs added or gone, MIG layouts
         * changed; KDEV_NVIDIA_REDISCOVER_INTERVAL); 0: 30000 */
        uint64_t rediscover_ms;
        /* serve metrics/dra_metrics.h's set on GET http://HOST:PORT/metrics
         * (metrics/http.h); NULL or "": off. A port in use is a start
         * failure. */
        const char *metrics_address;
        /* usage metering (nvidia/usage_loop.h, claims mode) every that many
         * seconds with metrics on; 0: off */
        unsigned usage_interval_s;
        /* kubelet's PodResources socket (NULL: the default; "": none) and
         * log directory (NULL: /var/log), for the usage metering */
        const char *podres_socket;
        const char *pod_log_dir;
        /* --shareable-gpus: whole GPUs published with allowMultipleAllocations
         * and memory / compute consumable capacity (dra/slices.h
         * kdev_dra_build_devices_opts), share claims prepared with the share
         * library (dra/plugin.h "Shares"); needs api_version "v1" */
        bool shareable_gpus;
        /* --dynamic-mig: GPUs in MIG mode published as partitionable
         * devices (dra/slices.h kdev_dra_build_partitionable), their MIG
         * devices made at prepare (dra/plugin.h "Dynamic MIG") */
        bool dynamic_mig;
        /* with shareable_gpus: the share root (NULL: KDEV_DRA_DEFAULT_SHARE_ROOT)
         * and the library installed there (NULL: next to the binary,
         * nvidia/share_host.h kdev_nvidia_share_library_default) */
        const char *share_root;
        const char *share_library;
        /* NVML library to load; NULL: libnvidia-ml.so.1 (under driver_root) */
        const char *nvml_library;
        /* claim source of NodePrepareResources; NULL: the API server's
         * (kdev_dra_kube_claim_source over its own client) */
        kdev_dra_get_claim_fn get_claim;
        void *get_claim_arg;
        /* called once on the loop thread when serving (NULL: none); may call
         * kdev_dra_daemon_stop() or start handles on kdev_dra_daemon_loop() */
        void (*on_started)(void *arg, struct kdev_dra_daemon *d);
        void *on_started_arg;
};

/* Runs the daemon: creates the plugin, checkpoint and registry directories
 * (modes of common/dir.h), discovers the GPUs, starts serving and returns
 * when stopped. Handles SIGTERM and SIGINT (a stop) while running. Returns 0
 * after a stop, or a negative errno with |err| when it could not start (the
 * error is logged as "cannot start" too). Everything it opened is closed
 * and freed when it returns. */
KDEV_API int kdev_dra_daemon_run(const struct kdev_dra_daemon_options *o, struct kdev_err *err);

/* Stops a running daemon as SIGTERM does, logging "stopping" with signal
 * |why| (e.g. "SIGTERM"): timers closed, a reconcile in flight and claim
 * reads aborted, the plugin's sockets removed; kdev_dra_daemon_run() returns
 * once everything has closed. A second call does nothing. Loop thread only. */
KDEV_API void kdev_dra_daemon_stop(struct kdev_dra_daemon *d, const char *why);

/* The daemon's event loop (for callers' own handles; close them before a
 * stop completes). */
KDEV_API uv_loop_t *kdev_dra_daemon_loop(struct kdev_dra_daemon *d);

/* Where the slice reconciles stand, for tests and diagnostics. */
struct kdev_dra_daemon_state {
        unsigned reconciles;  /* finished reconciles (succeeded or failed) */
        bool slices_ok;       /* the last one succeeded */
        long long generation; /* pool generation last published, -1 before */
        uint64_t backoff_ms;  /* delay before the retry of a failed one */
        bool reconciling;     /* one is in flight */
        bool stopping;
};

/* Fills *st from |d|. Loop thread only. */
KDEV_API void kdev_dra_daemon_state(const struct kdev_dra_daemon *d, struct kdev_dra_daemon_state *st);

#endif /* KDEV_DRA_DAEMON_H */
