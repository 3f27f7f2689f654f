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

static volatile sig_atomic_t stop_signal, reload_signal;

static void on_signal(int sig)
{
        if (sig == SIGHUP)
                reload_signal = 1;
        else
                stop_signal = sig;
}

/* Env, file and finish, as kdev-plugin reads its configuration. */
static int load_config(const struct kdev_mps_daemon_options *o, struct kdev_nvidia_config *nv,
                       struct kdev_err *err)
{
        static char *no_env[] = {NULL};
        int rc = kdev_nvidia_config_apply_env(nv, o->environ ? o->environ : no_env, err);
        bool have_file = false;
        if (rc == 0 && o->config) {
                struct kdev_config_root root;
                struct kdev_config_sections ext;
                struct kdev_generic_config *g = NULL;
                kdev_config_root_init(&root);
                kdev_nvidia_config_sections(nv, &ext);
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
        return rc == 0 ? kdev_nvidia_config_finish(nv, have_file, err) : rc;
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
        while (!stop_signal && !reload_signal && nanosleep(&ts, &ts) < 0 && errno == EINTR)
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

/* The daemons in force: the plan, its watch state, how many were started
 * (those get "quit" at the end). */
struct daemons {
        struct kdev_nvidia_mps_daemon *d;
        size_t n, started;
        struct watched *w;
        bool mps; /* the sharing strategy is MPS */
};

static void daemons_free(struct daemons *s)
{
        kdev_nvidia_mps_plan_free(s->d, s->n);
        free(s->w);
        *s = (struct daemons){0};
}

static void stopped(void *arg)
{
        (void)arg;
}

/* Loads the configuration into |nv| (initialised, flags applied) and, when
 * its sharing strategy is MPS, discovers the GPUs and plans the daemons into
 * |s| (nothing started). */
static int plan(const struct kdev_mps_daemon_options *o, struct kdev_nvidia_config *nv,
                struct daemons *s, struct kdev_err *err)
{
        *s = (struct daemons){0};
        int rc = load_config(o, nv, err);
        if (rc < 0)
                return rc;
        s->mps = kdev_nvidia_sharing_strategy(nv) == KDEV_NVIDIA_SHARING_MPS;
        if (!s->mps)
                return 0;
        uv_loop_t loop;
        uv_loop_init(&loop);
        struct kdev_resource_set set = {0};
        struct kdev_nvidia_backend *b = NULL;
        struct kdev_nvidia_backend_options bo = {.loop = &loop, .cfg = nv, .set = &set,
                                                 .skip_cdi = true};
        rc = kdev_nvidia_backend_open(&bo, &b, err);
        if (rc == 0)
                rc = kdev_nvidia_mps_plan(&set, &s->d, &s->n, err);
        if (rc == 0 && !(s->w = calloc(s->n ? s->n : 1, sizeof(*s->w))))
                rc = kdev_err_set(err, ENOMEM, "out of memory");
        kdev_nvidia_backend_stop(b, stopped, NULL);
        uv_run(&loop, UV_RUN_DEFAULT);
        uv_loop_close(&loop);
        kdev_resource_set_clear(&set);
        if (rc < 0)
                daemons_free(s);
        return rc;
}

static bool same_strings(char **a, size_t na, char **b, size_t nb)
{
        if (na != nb)
                return false;
        for (size_t i = 0; i < na; i++)
                if (strcmp(a[i], b[i]) != 0)
                        return false;
        return true;
}

/* Whether |a| and |b| start the same daemons with the same commands. */
static bool same_plan(const struct daemons *a, const struct daemons *b)
{
        if (a->mps != b->mps || a->n != b->n)
                return false;
        for (size_t i = 0; i < a->n; i++)
                if (strcmp(a->d[i].resource, b->d[i].resource) != 0 ||
                    !same_strings(a->d[i].commands, a->d[i].n_commands, b->d[i].commands,
                                  b->d[i].n_commands) ||
                    !same_strings(a->d[i].uuids, a->d[i].n_uuids, b->d[i].uuids,
                                  b->d[i].n_uuids))
                        return false;
        return true;
}

static void backoff(struct watched *w)
{
        w->backoff_ms = !w->backoff_ms               ? BACKOFF_MIN_MS
                        : w->backoff_ms * 2 > BACKOFF_MAX_MS ? BACKOFF_MAX_MS
                                                             : w->backoff_ms * 2;
        w->retry_at = kdev_log_now_ms() + w->backoff_ms;
}

/* Starts every daemon of |s| in order. |first|: the first start of the
 * program, where a failure stops those started and is returned (exit 1, as
 * NVIDIA's); else (after a reload) a daemon that cannot be started is
 * logged and started again by the watch, with its backoff. */
static int start_all(const struct kdev_mps_daemon_options *o, struct daemons *s, bool first,
                     struct kdev_err *err)
{
        const char *bin = o->control_bin ? o->control_bin : KDEV_NVIDIA_MPS_CONTROL_BIN;
        const char *root = o->root ? o->root : KDEV_NVIDIA_MPS_CONTAINER_ROOT;
        unsigned interval = o->check_interval_ms ? o->check_interval_ms : 1000;
        unsigned tmo = interval < 2000 ? 2000 : interval; /* one query or start step */
        kdev_log_info("MPS daemons", KDEV_LOG_UINT("resources", s->n));
        for (s->started = 0; s->started < s->n; s->started++) {
                struct kdev_nvidia_mps_daemon *d = &s->d[s->started];
                struct kdev_err se = {0};
                kdev_log_info("Starting MPS daemon", "resource", d->resource);
                int rc = o->set_compute_mode ? compute_mode(d, "EXCLUSIVE_PROCESS", &se) : 0;
                if (rc == 0)
                        rc = kdev_nvidia_mps_start(bin, root, d, tmo, &se);
                if (rc == 0)
                        continue;
                if (first)
                        return kdev_err_set(err, -rc, "error starting MPS daemon for %s: %s",
                                            d->resource, se.msg);
                s->w[s->started].failures++;
                kdev_log_error("error starting MPS daemon, will retry", "resource", d->resource,
                               "error", se.msg);
                backoff(&s->w[s->started]);
        }
        return 0;
}

static void stop_all(const struct kdev_mps_daemon_options *o, struct daemons *s)
{
        const char *bin = o->control_bin ? o->control_bin : KDEV_NVIDIA_MPS_CONTROL_BIN;
        const char *root = o->root ? o->root : KDEV_NVIDIA_MPS_CONTAINER_ROOT;
        unsigned interval = o->check_interval_ms ? o->check_interval_ms : 1000;
        unsigned tmo = interval < 2000 ? 2000 : interval;
        for (size_t i = 0; i < s->started; i++) {
                struct kdev_err se = {0};
                if (kdev_nvidia_mps_stop(bin, root, s->d[i].resource, tmo, &se) < 0)
                        kdev_log_warn("stopping MPS daemon", "resource", s->d[i].resource,
                                      "error", se.msg);
                else
                        kdev_log_info("Shut down MPS", "resource", s->d[i].resource);
                if (o->set_compute_mode && compute_mode(&s->d[i], "DEFAULT", &se) < 0)
                        kdev_log_warn("stopping MPS daemon", "resource", s->d[i].resource,
                                      "error", se.msg);
        }
        s->started = 0;
}

/* One round of the watch: the health query for each answering daemon, a
 * start for each whose backoff is over. */
static void watch(const struct kdev_mps_daemon_options *o, struct daemons *s)
{
        const char *bin = o->control_bin ? o->control_bin : KDEV_NVIDIA_MPS_CONTROL_BIN;
        const char *root = o->root ? o->root : KDEV_NVIDIA_MPS_CONTAINER_ROOT;
        unsigned interval = o->check_interval_ms ? o->check_interval_ms : 1000;
        unsigned tmo = interval < 2000 ? 2000 : interval;
        for (size_t i = 0; i < s->n && !stop_signal && !reload_signal; i++) {
                struct kdev_nvidia_mps_daemon *d = &s->d[i];
                struct watched *w = &s->w[i];
                struct kdev_err he = {0};
                uint64_t now = kdev_log_now_ms();
                if (w->backoff_ms && now < w->retry_at)
                        continue;
                if (w->backoff_ms) {
                        w->restarts++;
                        kdev_log_warn("Restarting MPS daemon", "resource", d->resource,
                                      KDEV_LOG_UINT("restarts", w->restarts),
                                      KDEV_LOG_UINT("backoff_ms", w->backoff_ms));
                        if ((!o->set_compute_mode ||
                             compute_mode(d, "EXCLUSIVE_PROCESS", &he) == 0) &&
                            kdev_nvidia_mps_start(bin, root, d, tmo, &he) == 0) {
                                kdev_log_info("MPS daemon answers again", "resource",
                                              d->resource);
                                w->backoff_ms = 0;
                                continue;
                        }
                } else if (kdev_nvidia_mps_health(bin, root, d->resource, tmo, &he) == 0) {
                        continue;
                }
                w->failures++;
                remove_started(root, d->resource);
                kdev_log_warn("MPS daemon not answering", "resource", d->resource, "error",
                              he.msg, KDEV_LOG_UINT("failures", w->failures));
                backoff(w);
        }
}

/* SIGHUP: the configuration read again, from the flags up. A configuration
 * that cannot be read or planned leaves the daemons running, and says why;
 * the same plan leaves them running; another stops them all and starts the
 * new plan's (NVIDIA's mps-control-daemon restarts at every SIGHUP). */
static void reload(const struct kdev_mps_daemon_options *o, struct daemons *s)
{
        kdev_log_info("SIGHUP: reading the configuration again");
        struct kdev_nvidia_config fresh;
        struct kdev_err err = {0};
        struct daemons next = {0};
        int rc = kdev_nvidia_config_init(&fresh, &err);
        for (size_t i = 0; rc == 0 && i < o->n_nv_flags; i++)
                rc = kdev_nvidia_config_apply_flag(&fresh, o->nv_flags[i].name,
                                                   o->nv_flags[i].value, &err);
        if (rc == 0)
                rc = plan(o, &fresh, &next, &err);
        if (rc < 0) {
                kdev_log_error("cannot load the new configuration, the MPS daemons run on as "
                               "they are",
                               "config", o->config ? o->config : "(none)", "error", err.msg);
                kdev_nvidia_config_clear(&fresh);
                return;
        }
        if (same_plan(s, &next)) {
                kdev_log_info("configuration unchanged: the MPS daemons run on",
                              KDEV_LOG_UINT("resources", s->n));
                daemons_free(&next);
                kdev_nvidia_config_clear(&fresh);
                return;
        }
        kdev_log_info("configuration changed: restarting the MPS daemons",
                      KDEV_LOG_UINT("resources", next.n));
        stop_all(o, s);
        daemons_free(s);
        *s = next; /* owns no part of |fresh| */
        if (s->mps)
                start_all(o, s, false, &err);
        else
                kdev_log_info("Sharing strategy is not MPS; no MPS daemon", "strategy",
                              kdev_nvidia_sharing_strategy_name(
                                      kdev_nvidia_sharing_strategy(&fresh)));
        kdev_nvidia_config_clear(&fresh);
}

int kdev_mps_daemon_run(const struct kdev_mps_daemon_options *o, struct kdev_err *err)
{
        struct sigaction sa = {.sa_handler = on_signal};
        sigemptyset(&sa.sa_mask);
        sigaction(SIGTERM, &sa, NULL);
        sigaction(SIGINT, &sa, NULL);
        sigaction(SIGHUP, &sa, NULL);
        struct daemons s;
        int rc = plan(o, o->nv, &s, err);
        if (rc < 0)
                return rc;
        if (s.mps)
                rc = start_all(o, &s, true, err);
        else
                kdev_log_info("Sharing strategy is not MPS; no MPS daemon", "strategy",
                              kdev_nvidia_sharing_strategy_name(kdev_nvidia_sharing_strategy(o->nv)));
        unsigned interval = o->check_interval_ms ? o->check_interval_ms : 1000;
        while (rc == 0 && !stop_signal) {
                sleep_ms(interval);
                if (reload_signal) {
                        reload_signal = 0;
                        reload(o, &s);
                        continue;
                }
                if (!stop_signal)
                        watch(o, &s);
        }
        stop_all(o, &s);
        daemons_free(&s);
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
                "       kdev-plugin mps-control-daemon mount-shm [--mps-dir DIR]\n"
                "\n"
                "Runs the MPS control daemons of the node (sharing.mps), as NVIDIA's\n"
                "mps-control-daemon does in its own DaemonSet container: per MPS resource,\n"
                "nvidia-cuda-mps-control -d with its pipe and log directories under\n"
                "DIR/<resource>/, the pinned memory limit (memory / replicas) of each GPU,\n"
                "the active thread percentage (100 / replicas), the started marker\n"
                "DIR/<resource>/.started. Each daemon is asked NVIDIA's health query every\n"
                "interval and started again, with a backoff of 1 s doubling to 30 s, when it\n"
                "does not answer. SIGHUP: the configuration read again; a changed plan\n"
                "restarts the daemons, an unchanged one or a bad file leaves them running.\n"
                "SIGTERM / SIGINT: quit sent to each, markers removed.\n"
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

/* The NVIDIA flags given, for the reload (kdev_mps_daemon_options.nv_flags). */
static struct kdev_mps_nv_flag nv_flags[256];

/* "mps-control-daemon mount-shm [--mps-dir DIR]". */
static int mount_shm_main(int argc, char **argv)
{
        static const struct option lo[] = {
                {"mps-dir", required_argument, NULL, 'd'},
                {"help", no_argument, NULL, 'h'},
                {0},
        };
        const char *root = env2("KDEV_MPS_DIR", NULL);
        int c;
        while ((c = getopt_long(argc, argv, "h", lo, NULL)) != -1) {
                if (c == 'd') {
                        root = optarg;
                } else if (c == 'h') {
                        printf("Usage: kdev-plugin mps-control-daemon mount-shm [--mps-dir DIR]\n"
                               "\n"
                               "Mounts the tmpfs DIR/shm (size " KDEV_NVIDIA_MPS_SHM_SIZE
                               ", nosuid, nodev, noexec) that the MPS\n"
                               "daemons and their clients use as /dev/shm, whatever was mounted\n"
                               "there unmounted first, as NVIDIA's mps-control-daemon mount-shm\n"
                               "does in its init container. DIR: --mps-dir, KDEV_MPS_DIR, /mps.\n");
                        return 0;
                } else {
                        return 2;
                }
        }
        if (optind < argc) {
                fprintf(stderr, MPS_PROG " mount-shm: unexpected argument \"%s\"\n", argv[optind]);
                return 2;
        }
        struct kdev_err err = {0};
        if (kdev_nvidia_mps_mount_shm(root ? root : KDEV_NVIDIA_MPS_CONTAINER_ROOT, &err) < 0) {
                fprintf(stderr, MPS_PROG " mount-shm: %s\n", err.msg);
                return 1;
        }
        return 0;
}

int kdev_mps_daemon_main(int argc, char **argv, struct kdev_nvidia_config *nv)
{
        if (argc > 1 && strcmp(argv[1], "mount-shm") == 0)
                return mount_shm_main(argc - 1, argv + 1);
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
                        if (c >= M_NVIDIA && o.n_nv_flags == sizeof(nv_flags) / sizeof(nv_flags[0])) {
                                fprintf(stderr, MPS_PROG ": too many NVIDIA flags\n");
                                status = 2;
                                break;
                        }
                        if (c >= M_NVIDIA &&
                            kdev_nvidia_config_apply_flag(nv, kdev_nvidia_flags[c - M_NVIDIA].name,
                                                          optarg, &err) == 0) {
                                nv_flags[o.n_nv_flags++] = (struct kdev_mps_nv_flag){
                                        kdev_nvidia_flags[c - M_NVIDIA].name, optarg};
                                o.nv_flags = nv_flags;
                                break;
                        }
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

