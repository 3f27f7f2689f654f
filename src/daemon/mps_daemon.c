/* kdev-plugin mps-control-daemon (see mps_daemon.h). */
#include "daemon/mps_daemon.h"

#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <uv.h>

#include "common/flags.h"
#include "common/log.h"
#include "config/config.h"
#include "generic/generic.h"
#include "nvidia/backend.h"
#include "nvidia/mps.h"

#define BACKOFF_MIN_MS 1000u
#define BACKOFF_MAX_MS 30000u

static volatile sig_atomic_t stop_signal;

static void on_signal(int sig)
{
        stop_signal = sig;
}

/* Env, file and finish, as kdev-plugin reads its configuration. */
static int load_config(const struct kdev_mps_daemon_options *o, struct kdev_err *err)
{
        static char *no_env[] = {NULL};
        int rc = kdev_nvidia_config_apply_env(o->nv, o->environ ? o->environ : no_env, err);
        bool have_file = false;
        if (rc == 0 && o->config) {
                struct kdev_config_root root;
                struct kdev_config_sections ext;
                struct kdev_generic_config *g = NULL;
                kdev_config_root_init(&root);
                kdev_nvidia_config_sections(o->nv, &ext);
                rc = kdev_generic_config_register(&root, o->config, &g, err);
                if (rc == 0)
                        rc = kdev_config_register(&root, &ext, err);
                if (rc == 0)
                        rc = kdev_config_load(&root, o->config, err);
                kdev_generic_config_free(g);
                have_file = rc == 0;
                if (rc == 1)
                        rc = 0;
        }
        return rc == 0 ? kdev_nvidia_config_finish(o->nv, have_file, err) : rc;
}

/* "nvidia-smi -i <uuid> -c <mode>" for each GPU of |d| (NVIDIA
 * setComputeMode). */
static int compute_mode(const struct kdev_nvidia_mps_daemon *d, const char *mode,
                        struct kdev_err *err)
{
        for (size_t i = 0; i < d->n_uuids; i++) {
                pid_t pid = fork();
                if (pid == 0) {
                        execlp("nvidia-smi", "nvidia-smi", "-i", d->uuids[i], "-c", mode,
                               (char *)NULL);
                        _exit(127);
                }
                int st = 0;
                if (pid < 0 || waitpid(pid, &st, 0) < 0 || !WIFEXITED(st) || WEXITSTATUS(st))
                        return kdev_err_set(err, EIO, "error setting compute mode %s: error "
                                                      "running nvidia-smi",
                                            mode);
        }
        return 0;
}

static void sleep_ms(unsigned ms)
{
        struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000L};
        while (!stop_signal && nanosleep(&ts, &ts) < 0 && errno == EINTR)
                ;
}

/* The daemon of |resource| is not started any more: its marker goes. */
static void remove_started(const char *root, const char *resource)
{
        char *p = kdev_nvidia_mps_path(root, resource, KDEV_NVIDIA_MPS_STARTED);
        if (p)
                unlink(p);
        free(p);
}

struct watched {
        unsigned backoff_ms; /* 0: answering */
        uint64_t retry_at;   /* kdev_log_now_ms() of the next start */
        unsigned long long restarts, failures;
};

static int run_daemons(const struct kdev_mps_daemon_options *o, struct kdev_nvidia_mps_daemon *d,
                       size_t n, struct kdev_err *err)
{
        const char *bin = o->control_bin ? o->control_bin : KDEV_NVIDIA_MPS_CONTROL_BIN;
        const char *root = o->root ? o->root : KDEV_NVIDIA_MPS_CONTAINER_ROOT;
        unsigned interval = o->check_interval_ms ? o->check_interval_ms : 1000;
        unsigned tmo = interval < 2000 ? 2000 : interval; /* one query or start step */
        struct watched *w = calloc(n ? n : 1, sizeof(*w));
        if (!w)
                return kdev_err_set(err, ENOMEM, "out of memory");
        int rc = 0;
        size_t started = 0;
        for (; rc == 0 && started < n; started++) {
                kdev_log_info("Starting MPS daemon", "resource", d[started].resource);
                if (o->set_compute_mode)
                        rc = compute_mode(&d[started], "EXCLUSIVE_PROCESS", err);
                if (rc == 0)
                        rc = kdev_nvidia_mps_start(bin, root, &d[started], tmo, err);
                if (rc < 0) {
                        char why[sizeof(err->msg)];
                        snprintf(why, sizeof(why), "%s", err->msg);
                        rc = kdev_err_set(err, -rc, "error starting MPS daemon for %s: %s",
                                          d[started].resource, why);
                }
        }
        if (rc < 0)
                started--;
        while (rc == 0 && !stop_signal) {
                sleep_ms(interval);
                for (size_t i = 0; i < n && !stop_signal; i++) {
                        struct kdev_err he = {0};
                        uint64_t now = kdev_log_now_ms();
                        if (w[i].backoff_ms && now < w[i].retry_at)
                                continue;
                        if (w[i].backoff_ms) {
                                w[i].restarts++;
                                kdev_log_warn("Restarting MPS daemon", "resource", d[i].resource,
                                              KDEV_LOG_UINT("restarts", w[i].restarts),
                                              KDEV_LOG_UINT("backoff_ms", w[i].backoff_ms));
                                if (kdev_nvidia_mps_start(bin, root, &d[i], tmo, &he) == 0) {
                                        kdev_log_info("MPS daemon answers again", "resource",
                                                      d[i].resource);
                                        w[i].backoff_ms = 0;
                                        continue;
                                }
                        } else if (kdev_nvidia_mps_health(bin, root, d[i].resource, tmo,
                                                          &he) == 0) {
                                continue;
                        }
                        w[i].failures++;
                        remove_started(root, d[i].resource);
                        kdev_log_warn("MPS daemon not answering", "resource", d[i].resource,
                                      "error", he.msg, KDEV_LOG_UINT("failures", w[i].failures));
                        w[i].backoff_ms = !w[i].backoff_ms          ? BACKOFF_MIN_MS
                                          : w[i].backoff_ms * 2 > BACKOFF_MAX_MS ? BACKOFF_MAX_MS
                                                                        : w[i].backoff_ms * 2;
                        w[i].retry_at = kdev_log_now_ms() + w[i].backoff_ms;
                }
        }
        for (size_t i = 0; i < started; i++) {
                struct kdev_err se = {0};
                if (kdev_nvidia_mps_stop(bin, root, d[i].resource, tmo, &se) < 0)
                        kdev_log_warn("stopping MPS daemon", "resource", d[i].resource, "error",
                                      se.msg);
                else
                        kdev_log_info("Shut down MPS", "resource", d[i].resource);
                if (o->set_compute_mode && compute_mode(&d[i], "DEFAULT", &se) < 0)
                        kdev_log_warn("stopping MPS daemon", "resource", d[i].resource, "error",
                                      se.msg);
        }
        free(w);
        return rc;
}

static void stopped(void *arg)
{
        (void)arg;
}

int kdev_mps_daemon_run(const struct kdev_mps_daemon_options *o, struct kdev_err *err)
{
        struct sigaction sa = {.sa_handler = on_signal};
        sigemptyset(&sa.sa_mask);
        sigaction(SIGTERM, &sa, NULL);
        sigaction(SIGINT, &sa, NULL);
        int rc = load_config(o, err);
        if (rc < 0)
                return rc;
        if (kdev_nvidia_sharing_strategy(o->nv) != KDEV_NVIDIA_SHARING_MPS) {
                kdev_log_info("Sharing strategy is not MPS; no MPS daemon", "strategy",
                              kdev_nvidia_sharing_strategy_name(kdev_nvidia_sharing_strategy(o->nv)));
                while (!stop_signal)
                        pause();
                return 0;
        }
        uv_loop_t loop;
        uv_loop_init(&loop);
        struct kdev_resource_set set = {0};
        struct kdev_nvidia_backend *b = NULL;
        struct kdev_nvidia_backend_options bo = {.loop = &loop, .cfg = o->nv, .set = &set,
                                                 .skip_cdi = true};
        rc = kdev_nvidia_backend_open(&bo, &b, err);
        struct kdev_nvidia_mps_daemon *d = NULL;
        size_t n = 0;
        if (rc == 0)
                rc = kdev_nvidia_mps_plan(&set, &d, &n, err);
        if (rc == 0) {
                kdev_log_info("MPS daemons", KDEV_LOG_UINT("resources", n));
                rc = run_daemons(o, d, n, err);
        }
        kdev_nvidia_mps_plan_free(d, n);
        kdev_nvidia_backend_stop(b, stopped, NULL);
        uv_run(&loop, UV_RUN_DEFAULT);
        uv_loop_close(&loop);
        kdev_resource_set_clear(&set);
        return rc;
}

/* --- the command line ------------------------------------------------------ */

#define MPS_PROG "kdev-plugin mps-control-daemon"

extern char **environ;

/* The first of the environment variables |a|, |b| (may be NULL) that is set
 * and not empty, or NULL. */
static const char *env2(const char *a, const char *b)
{
        const char *v = getenv(a);
        if ((!v || !*v) && b)
                v = getenv(b);
        return v && *v ? v : NULL;
}

static void mps_usage(FILE *f)
{
        fprintf(f,
                "Usage: kdev-plugin mps-control-daemon [--config FILE] [OPTIONS]\n"
                "\n"
                "Runs the MPS control daemons of the node (sharing.mps), as NVIDIA's\n"
                "mps-control-daemon does in its own DaemonSet container: per MPS resource,\n"
                "nvidia-cuda-mps-control -d with its pipe and log directories under\n"
                "DIR/<resource>/, the pinned memory limit (memory / replicas) of each GPU,\n"
                "the active thread percentage (100 / replicas), the started marker\n"
                "DIR/<resource>/.started. Each daemon is asked NVIDIA's health query every\n"
                "interval and started again, with a backoff of 1 s doubling to 30 s, when it\n"
                "does not answer. SIGTERM / SIGINT: quit sent to each, markers removed.\n"
                "\n"
                "Options:\n"
                "  -c, --config FILE          the same configuration file as kdev-plugin\n"
                "      --mps-dir DIR          where the MPS directories are made (the host's\n"
                "                             --mps-root mounted here; default /mps)\n"
                "      --control-bin PATH     the control program (default\n"
                "                             nvidia-cuda-mps-control on PATH)\n"
                "      --set-compute-mode     set each GPU's compute mode to\n"
                "                             EXCLUSIVE_PROCESS with nvidia-smi while the\n"
                "                             daemon runs, DEFAULT at exit, as NVIDIA does\n"
                "                             (off by default: it changes the GPU's settings)\n"
                "      --check-interval-ms MS the health query interval (default 1000)\n"
                "      --log-level LEVEL, --log-format text|json, --help, --version\n"
                "  and every NVIDIA flag of kdev-plugin (--mps-root, --mig-strategy, ...).\n"
                "Environment: KDEV_CONFIG / CONFIG_FILE, KDEV_MPS_DIR, KDEV_MPS_CONTROL_BIN,\n"
                "and NVIDIA's (MPS_ROOT, ...).\n");
}

int kdev_mps_daemon_main(int argc, char **argv, struct kdev_nvidia_config *nv)
{
        enum { M_DIR = 256, M_BIN, M_MODE, M_INTERVAL, M_NVIDIA };
        static const struct option own[] = {
                {"config", required_argument, NULL, 'c'},
                {"config-file", required_argument, NULL, 'c'},
                {"mps-dir", required_argument, NULL, M_DIR},
                {"control-bin", required_argument, NULL, M_BIN},
                {"set-compute-mode", no_argument, NULL, M_MODE},
                {"check-interval-ms", required_argument, NULL, M_INTERVAL},
                {"log-level", required_argument, NULL, KDEV_FLAG_LOG_LEVEL},
                {"log-format", required_argument, NULL, KDEV_FLAG_LOG_FORMAT},
                {"help", no_argument, NULL, 'h'},
                {"version", no_argument, NULL, KDEV_FLAG_VERSION},
        };
        struct option *lo = kdev_nvidia_long_options(own, sizeof(own) / sizeof(own[0]), M_NVIDIA);
        if (!lo) {
                fprintf(stderr, MPS_PROG ": out of memory\n");
                return 1;
        }
        struct kdev_mps_daemon_options o = {.nv = nv, .environ = environ};
        o.config = env2("KDEV_CONFIG", "CONFIG_FILE");
        o.root = env2("KDEV_MPS_DIR", NULL);
        o.control_bin = env2("KDEV_MPS_CONTROL_BIN", NULL);
        struct kdev_flag_common common = {.level = KDEV_LOG_INFO};
        struct kdev_err err = {0};
        int c, status = -1;
        while (status < 0 && (c = getopt_long(argc, argv, "c:h", lo, NULL)) != -1) {
                char *end = NULL;
                switch (c) {
                case 'c': o.config = optarg; break;
                case M_DIR: o.root = optarg; break;
                case M_BIN: o.control_bin = optarg; break;
                case M_MODE: o.set_compute_mode = true; break;
                case M_INTERVAL:
                        o.check_interval_ms = (unsigned)strtoul(optarg, &end, 10);
                        if (!*optarg || *end || o.check_interval_ms == 0 ||
                            o.check_interval_ms > 600000) {
                                fprintf(stderr, MPS_PROG ": --check-interval-ms: want 1..600000, "
                                                "got \"%s\"\n", optarg);
                                status = 2;
                        }
                        break;
                default: {
                        int r = kdev_flag_common(MPS_PROG, c, optarg, &common, mps_usage);
                        if (r >= 0) {
                                if (r != 1)
                                        status = r;
                                break;
                        }
                        if (c >= M_NVIDIA &&
                            kdev_nvidia_config_apply_flag(nv, kdev_nvidia_flags[c - M_NVIDIA].name,
                                                          optarg, &err) == 0)
                                break;
                        if (c >= M_NVIDIA)
                                fprintf(stderr, MPS_PROG ": %s\n", err.msg);
                        status = 2;
                }
                }
        }
        free(lo);
        status = kdev_flag_no_operands(MPS_PROG, status, argc, argv, optind);
        status = kdev_flag_finish(MPS_PROG, status);
        if (status >= 0)
                return status;
        kdev_log_setup(common.level, common.json);
        if (kdev_mps_daemon_run(&o, &err) < 0) {
                kdev_log_error("mps-control-daemon failed", "error", err.msg);
                return 1;
        }
        return 0;
}

