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
 * (SIGHUP: serve and register every resource again; SIGTERM, SIGINT,
 * SIGQUIT: stop cleanly).
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

/* As SIGHUP: serves and registers every resource again, rewrites the node
 * labels. Loop thread only. */
KDEV_API void kdev_dp_daemon_restart(struct kdev_dp_daemon *d);

/* The daemon's event loop, for the caller's own handles. */
KDEV_API uv_loop_t *kdev_dp_daemon_loop(struct kdev_dp_daemon *d);

/* The device plugin runtime serving the resources; NULL once a stop has
 * reached it (after the NVIDIA backend stopped). */
KDEV_API struct kdev_dp_runtime *kdev_dp_daemon_runtime(struct kdev_dp_daemon *d);

#endif /* KDEV_DAEMON_DP_DAEMON_H */
