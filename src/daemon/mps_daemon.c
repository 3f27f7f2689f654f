/* kdev-plugin mps-control-daemon (see mps_daemon.h). */
#include "daemon/mps_daemon.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <uv.h>

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
                        rc = kdev_nvidia_mps_start(bin, root, &d[started], interval * 5, err);
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
                                if (kdev_nvidia_mps_start(bin, root, &d[i], interval, &he) == 0) {
                                        kdev_log_info("MPS daemon answers again", "resource",
                                                      d[i].resource);
                                        w[i].backoff_ms = 0;
                                        continue;
                                }
                        } else if (kdev_nvidia_mps_health(bin, root, d[i].resource, interval,
                                                          &he) == 0) {
                                continue;
                        }
                        w[i].failures++;
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
                if (kdev_nvidia_mps_stop(bin, root, d[i].resource, interval * 5, &se) < 0)
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
