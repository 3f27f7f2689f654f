/* kdev-plugin mps-control-daemon: the MPS control daemons of a node, as
 * NVIDIA's mps-control-daemon (cmd/mps-control-daemon, v0.20.0) runs them in
 * its own DaemonSet container, plus a watch.
 *
 * Reads the same configuration as kdev-plugin (file, env, NVIDIA flags),
 * discovers the GPUs through NVML and builds the resources with their
 * sharing (nvidia/sharing.h); with a sharing strategy other than MPS it logs
 * so and waits for a signal (NVIDIA's null manager). For each MPS resource
 * (nvidia/mps.h kdev_nvidia_mps_plan) in order: optionally sets the compute
 * mode of its GPUs to EXCLUSIVE_PROCESS ("nvidia-smi -i <uuid> -c
 * EXCLUSIVE_PROCESS", only with set_compute_mode: off by default, it changes
 * the GPU's settings), then kdev_nvidia_mps_start: the pipe and log
 * directories under <root>/<resource>/, "nvidia-cuda-mps-control -d", the
 * pinned memory limits and the active thread percentage, the started marker.
 *
 * Beyond NVIDIA: every check_interval_ms each daemon gets NVIDIA's health
 * query; one that fails or does not answer within the interval (at least
 * 2 s) is logged ("MPS daemon not answering"), its started marker removed,
 * and started again after a backoff that
 * doubles from 1 s to 30 s (reset by an answer), each restart logged and
 * counted (kdev_mps_daemon_stats).
 *
 * SIGHUP: the configuration is read again (flags, env, file) and planned;
 * the same daemons with the same commands run on untouched; another plan
 * stops them all ("quit") and starts the new plan's, as NVIDIA's
 * mps-control-daemon restarts at SIGHUP (its config-manager sends it after a
 * node's config label changes); a daemon of the new plan that cannot be
 * started is retried with the backoff. A configuration that cannot be read
 * leaves the daemons running and is logged ("cannot load the new
 * configuration, the MPS daemons run on as they are", with
 * file:line:column).
 *
 * SIGTERM / SIGINT: each daemon is sent "quit", its started marker removed
 * (compute mode DEFAULT again when it was set), exit 0. */
#ifndef KDEV_DAEMON_MPS_DAEMON_H
#define KDEV_DAEMON_MPS_DAEMON_H

#include <stdbool.h>

#include "common/err.h"
#include "nvidia/config.h"

struct kdev_mps_daemon_options {
        const char *config;             /* config file, NULL: none */
        struct kdev_nvidia_config *nv;  /* flags applied; borrowed */
        /* the NVIDIA flags given, in order, applied again to a fresh
         * configuration at each SIGHUP; borrowed */
        const struct kdev_mps_nv_flag {
                const char *name;  /* without "--" */
                const char *value; /* NULL: a boolean given without a value */
        } *nv_flags;
        size_t n_nv_flags;
        char **environ;                 /* NVIDIA's env options (MPS_ROOT, ...) */
        /* where the MPS directories are made: the container's view of the
         * host's --mps-root; NULL: "/mps" (NVIDIA's container root) */
        const char *root;
        const char *control_bin;        /* NULL: nvidia-cuda-mps-control on PATH */
        bool set_compute_mode;          /* EXCLUSIVE_PROCESS, see above */
        unsigned check_interval_ms;     /* 0: 1000 */
};

/* Runs until SIGTERM / SIGINT (SIGHUP: see above). Returns 0 after a clean stop, or a negative
 * errno with |err| (config, NVML, a daemon that could not be started at
 * first: "error starting MPS daemon for <resource>: <why>"). */
KDEV_API int kdev_mps_daemon_run(const struct kdev_mps_daemon_options *o, struct kdev_err *err);

/* The command line "kdev-plugin mps-control-daemon ARGS" (or, with
 * |argv|[1] "mount-shm", "... mount-shm [--mps-dir DIR]":
 * kdev_nvidia_mps_mount_shm on DIR, KDEV_MPS_DIR or /mps; exit 0, 1 with its
 * error on stderr, 2 for a usage error). |argv|[0] is
 * "mps-control-daemon", then --config FILE (-c, --config-file; KDEV_CONFIG,
 * CONFIG_FILE), --mps-dir DIR (KDEV_MPS_DIR), --control-bin PATH
 * (KDEV_MPS_CONTROL_BIN), --set-compute-mode, --check-interval-ms MS
 * (1..600000), --log-level, --log-format, --help, --version and every NVIDIA
 * flag (into |nv|, borrowed, initialised). Runs kdev_mps_daemon_run. Returns
 * the exit status: 0 (stopped by a signal, --help, --version), 1 (failure,
 * logged), 2 (usage error, printed). */
KDEV_API int kdev_mps_daemon_main(int argc, char **argv, struct kdev_nvidia_config *nv);

#endif /* KDEV_DAEMON_MPS_DAEMON_H */
