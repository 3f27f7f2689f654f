/* Device plugin runtime: per-resource gRPC servers, registration with kubelet,
 * kubelet restart handling. See runtime.h for the contract. */
#include "plugin/runtime.h"

#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "common/dir.h"
#include "common/log.h"
#include "common/resource_name.h"
#include "deviceplugin/v1beta1/api.pb-c.h"
#include "model/model.h"
#include "plugin/service.h"
#include "rpc/rpc.h"

#define API_VERSION "v1beta1"
#define METHOD_REGISTER "/v1beta1.Registration/Register"
/* Events closer together than this are handled as one burst. */
#define COALESCE_MS KDEV_DP_COALESCE_MS
/* A socket or a held lock file found removed is created again after this
 * long (ms): when the removal is part of an rm -rf of the directory, the
 * directory is gone by then and nothing is created in it (which would make
 * the rm fail); a starting kubelet's removal is followed by kubelet.sock,
 * which registers at once. */
#define LOST_GRACE_MS 50
/* How long a waiting instance leaves a lock file that vanished to its
 * holder (which takes it again after LOST_GRACE_MS) before creating it. */
#define LOCK_GRACE_MS 200
/* How long a Register in flight when a new kubelet.sock appeared is given
 * to answer (it may have reached the new kubelet) before registering anew;
 * a kubelet that went away fails the call at once. */
#define RECHECK_MS 1000

enum reg_state {
        REG_WAIT_LOCK, /* another instance holds the lock */
        REG_IDLE,      /* serving, not registered, nothing in flight */
        REG_PENDING,   /* Register call in flight */
        REG_DONE,      /* registered */
        REG_BACKOFF,   /* waiting to retry Register */
        REG_WAIT_DIR,  /* the directory is gone */
};

struct dp_server {
        struct kdev_dp_runtime *rt;
        struct kdev_dp_service *svc; /* current server generation, NULL when none */
        char *socket_name;           /* file name inside the directory */
        char *socket_path;
        char *lock_path;
        int lock_fd;                 /* -1 until the lock is held */
        dev_t sock_dev;              /* identity of the socket this process created */
        ino_t sock_ino;
        bool sock_created;
        enum reg_state state;
        bool restart_wanted;    /* fresh server needed at the next flush */
        bool register_wanted;   /* Register needed at the next flush */
        struct kdev_rpc_client_call *reg_call;
        unsigned reg_kubelet;  /* rt->kubelet_gen of the kubelet.sock the last Register
                                  went to, 0 = none or not known */
        uint64_t backoff_ms;
        uv_timer_t retry_timer; /* backoff and lock polling */
        unsigned registrations;
        unsigned failures, attempts, generations, lock_waits; /* kdev_dp_runtime_state() */
        bool lost_while_pending; /* kubelet's new stream ended before Register returned */
        bool lock_wait_logged;
        bool lock_before_loss;   /* held the lock when the directory went */
        bool lock_seen;          /* waiting: the lock file was there at a try */
        uint64_t lock_missing_ms; /* waiting: loop time it was found gone, 0 = not */
        uint64_t lock_gone_ms;   /* loop time the held lock's file was found gone, 0 = not */
        uint64_t reg_sent_ms;    /* loop time the last Register was sent, 0 = none */
        bool sock_lost;          /* its socket was found removed: serve anew at the
                                    next flush unless a fresh one is there by then */
        bool recheck_kubelet;    /* a new kubelet.sock appeared while Register was in
                                    flight: which kubelet it reached is known at its end */
        uint64_t fast_ms;        /* next retry delay while a new kubelet.sock may not
                                    accept yet (1, 2, 4 ... ms), 0 = none */
        struct kdev_resource *res;
};

struct kdev_dp_runtime {
        uv_loop_t *loop;
        struct kdev_dp_options opts;
        char *dir;
        char *prefix;
        char *kubelet_path;
        const char *kubelet_name; /* file name of kubelet_path in dir */
        char *parent;             /* dir's parent directory */
        const char *dir_name;     /* dir's last component (in dir), "" for "/" */
        int dir_fd;               /* the directory served, held open so that its
                                     inode is not reused; -1 while it is gone */
        dev_t dir_dev;
        ino_t dir_ino;
        bool dir_lost;            /* removed or replaced: servers wait for it */
        bool watch_warned;        /* the one "cannot watch" warning was logged */
        struct kdev_rpc_client *kubelet;
        uv_fs_event_t watch;        /* inotify on dir */
        uv_fs_event_t parent_watch; /* inotify on dir's parent: dir removed, created */
        uv_timer_t check_timer;     /* the directory check: now after events, every check_ms */
        uv_timer_t debounce;
        /* Lines whose rate kubelet controls (a kubelet that accepts Register
         * and ends the stream at once makes the plugin re-register at its
         * pace): through this limiter, whose windows log_timer ends. */
        struct kdev_log_limiter *peer_log;
        uv_timer_t log_timer;
        struct dp_server **servers;
        size_t n_servers;
        /* identity of the kubelet.sock last seen (all 0 = none): device,
         * inode and change time, as file systems give a socket created anew
         * the inode number of the one just removed */
        dev_t kubelet_dev;
        ino_t kubelet_ino;
        struct timespec kubelet_ctime;
        unsigned kubelet_gen; /* kubelet.sock files seen so far: 1, 2, ... */
        unsigned dir_events; /* kdev_dp_runtime_state() */
        unsigned dir_losses, checks;
        bool started;
        bool stopping;
        unsigned pending_closes; /* uv handles and services still closing */
        void (*done)(void *arg);
        void *done_arg;
};

static void server_try_lock(struct dp_server *s);
static void server_register(struct dp_server *s);
static void schedule_check(struct kdev_dp_runtime *rt);

static void on_log_timer(uv_timer_t *t)
{
        struct kdev_dp_runtime *rt = t->data;
        uint64_t ms = kdev_log_limiter_flush(rt->peer_log, false);
        if (ms > 0 && !rt->stopping)
                uv_timer_start(&rt->log_timer, on_log_timer, ms, 0);
}

/* An info line kubelet can make the runtime repeat: through the limiter
 * (identical lines within KDEV_LOG_REPEAT_WINDOW_MS are counted and
 * reported once per window). */
#define PEER_LOG_INFO(rt, ...)                                                           \
        do {                                                                             \
                kdev_log_limited((rt)->peer_log, 1, KDEV_LOG_INFO, __VA_ARGS__, NULL);   \
                if (!(rt)->stopping && !uv_is_active((uv_handle_t *)&(rt)->log_timer))   \
                        uv_timer_start(&(rt)->log_timer, on_log_timer,                   \
                                       KDEV_LOG_REPEAT_WINDOW_MS, 0);                    \
        } while (0)

int kdev_dp_socket_name(const char *prefix, const char *name, char *buf, size_t size)
{
        int n = snprintf(buf, size, "%s%s.sock", prefix, name);
        if (n < 0 || (size_t)n >= size)
                return -ENAMETOOLONG;
        for (char *p = buf; *p; p++) {
                if (*p == '/')
                        *p = '_';
        }
        return n;
}

static char *path_join(const char *dir, const char *name)
{
        char *out = NULL;
        if (asprintf(&out, "%s/%s", dir, name) < 0)
                return NULL;
        return out;
}

struct kdev_dp_runtime *kdev_dp_runtime_new(uv_loop_t *loop, const struct kdev_dp_options *opts,
                                            struct kdev_err *err)
{
        struct kdev_dp_runtime *rt = calloc(1, sizeof(*rt));
        if (!rt)
                goto oom;
        rt->loop = loop;
        if (opts)
                rt->opts = *opts;
        if (!rt->opts.register_timeout_ms)
                rt->opts.register_timeout_ms = 10000;
        if (!rt->opts.backoff_initial_ms)
                rt->opts.backoff_initial_ms = 100;
        if (!rt->opts.backoff_max_ms)
                rt->opts.backoff_max_ms = 5000;
        if (!rt->opts.lock_poll_ms)
                rt->opts.lock_poll_ms = 100;
        if (!rt->opts.check_ms)
                rt->opts.check_ms = KDEV_DP_DEFAULT_CHECK_MS;
        rt->dir_fd = -1;
        const char *dir = rt->opts.plugin_dir ? rt->opts.plugin_dir : KDEV_DP_DEFAULT_DIR;
        size_t dlen = strlen(dir);
        while (dlen > 1 && dir[dlen - 1] == '/')
                dlen--;
        rt->dir = strndup(dir, dlen);
        rt->prefix = strdup(rt->opts.socket_prefix ? rt->opts.socket_prefix
                                                     : KDEV_DP_DEFAULT_SOCKET_PREFIX);
        if (rt->opts.kubelet_socket)
                rt->kubelet_path = strdup(rt->opts.kubelet_socket);
        else
                rt->kubelet_path = rt->dir ? path_join(rt->dir, KDEV_DP_KUBELET_SOCKET) : NULL;
        if (!rt->dir || !rt->prefix || !rt->kubelet_path)
                goto oom;
        rt->opts.kubelet_socket = rt->kubelet_path;
        const char *slash = strrchr(rt->kubelet_path, '/');
        size_t klen = slash ? (size_t)(slash - rt->kubelet_path) : 0;
        if (!slash || !slash[1] || (klen ? klen : 1) != strlen(rt->dir) ||
            memcmp(rt->kubelet_path, rt->dir, klen ? klen : 1) != 0) {
                kdev_err_set(err, EINVAL, "kubelet socket %s is not in the device plugin "
                             "directory %s", rt->kubelet_path, rt->dir);
                free(rt->dir);
                free(rt->prefix);
                free(rt->kubelet_path);
                free(rt);
                return NULL;
        }
        rt->kubelet_name = slash + 1;
        const char *dslash = strrchr(rt->dir, '/');
        if (!dslash)
                rt->parent = strdup(".");
        else if (dslash == rt->dir)
                rt->parent = strdup("/");
        else
                rt->parent = strndup(rt->dir, (size_t)(dslash - rt->dir));
        rt->dir_name = dslash ? dslash + 1 : rt->dir;
        if (!rt->parent)
                goto oom;
        rt->opts.plugin_dir = rt->dir;
        rt->opts.socket_prefix = rt->prefix;
        /* Handles exist from here on, so that stop can always close them. */
        uv_timer_init(loop, &rt->debounce);
        rt->debounce.data = rt;
        uv_timer_init(loop, &rt->log_timer);
        rt->log_timer.data = rt;
        rt->peer_log = kdev_log_limiter_new(KDEV_LOG_REPEAT_WINDOW_MS); /* NULL: unlimited */
        uv_fs_event_init(loop, &rt->watch);
        rt->watch.data = rt;
        uv_fs_event_init(loop, &rt->parent_watch);
        rt->parent_watch.data = rt;
        uv_timer_init(loop, &rt->check_timer);
        rt->check_timer.data = rt;
        return rt;
oom:
        if (rt) {
                free(rt->parent);
                free(rt->dir);
                free(rt->prefix);
                free(rt->kubelet_path);
                free(rt);
        }
        kdev_err_set(err, ENOMEM, "out of memory");
        return NULL;
}

static struct dp_server *find_server(const struct kdev_dp_runtime *rt, const char *name)
{
        for (size_t i = 0; i < rt->n_servers; i++) {
                if (strcmp(rt->servers[i]->res->name, name) == 0)
                        return rt->servers[i];
        }
        return NULL;
}

static void server_free(struct dp_server *s)
{
        if (!s)
                return;
        free(s->socket_name);
        free(s->socket_path);
        free(s->lock_path);
        free(s);
}

/* -EMSGSIZE when the ListAndWatch message of |res| would exceed kubelet's
 * 4 MiB receive limit. */
static int check_list_size(const struct kdev_resource *res, struct kdev_err *err)
{
        size_t lw = kdev_dp_list_and_watch_size(res);
        if (lw > KDEV_RPC_DEFAULT_MAX_MESSAGE)
                return kdev_err_set(err, EMSGSIZE,
                                    "resource %s: its ListAndWatch message of %zu bytes (%zu devices) "
                                    "exceeds kubelet's 4 MiB receive limit",
                                    res->name, lw, res->n_devices);
        return 0;
}

int kdev_dp_runtime_add_resource(struct kdev_dp_runtime *rt, struct kdev_resource *res,
                                 struct kdev_err *err)
{
        int r = kdev_resource_name_check(res->name, err);
        if (r < 0)
                return r;
        if (find_server(rt, res->name))
                return kdev_err_set(err, EINVAL, "resource %s is configured twice", res->name);

        char name[256];
        if (kdev_dp_socket_name(rt->prefix, res->name, name, sizeof(name)) < 0)
                return kdev_err_set(err, ENAMETOOLONG, "socket name for resource %s is too long",
                                    res->name);
        struct sockaddr_un sun;
        size_t plen = strlen(rt->dir) + 1 + strlen(name);
        if (plen >= sizeof(sun.sun_path))
                return kdev_err_set(err, ENAMETOOLONG,
                                    "socket path %s/%s is %zu bytes, longer than the Unix socket "
                                    "limit of %zu bytes",
                                    rt->dir, name, plen, sizeof(sun.sun_path) - 1);
        if (strlen(rt->kubelet_path) >= sizeof(sun.sun_path))
                return kdev_err_set(err, ENAMETOOLONG, "kubelet socket path %s is too long",
                                    rt->kubelet_path);
        r = check_list_size(res, err);
        if (r < 0)
                return r;

        struct dp_server *s = calloc(1, sizeof(*s));
        struct dp_server **grown = realloc(rt->servers, (rt->n_servers + 1) * sizeof(*grown));
        if (grown)
                rt->servers = grown;
        if (!s || !grown)
                goto oom;
        s->rt = rt;
        s->res = res;
        s->lock_fd = -1;
        s->state = REG_WAIT_LOCK;
        s->backoff_ms = rt->opts.backoff_initial_ms;
        s->socket_name = strdup(name);
        s->socket_path = path_join(rt->dir, name);
        if (s->socket_path)
                s->lock_path = malloc(strlen(s->socket_path) + 6);
        if (!s->socket_name || !s->socket_path || !s->lock_path)
                goto oom;
        sprintf(s->lock_path, "%s.lock", s->socket_path);
        uv_timer_init(rt->loop, &s->retry_timer);
        s->retry_timer.data = s;
        rt->servers[rt->n_servers++] = s;
        if (rt->started && !rt->stopping && rt->dir_lost) {
                s->state = REG_WAIT_DIR; /* locked when the directory is back */
                s->lock_before_loss = true;
        } else if (rt->started && !rt->stopping) {
                server_try_lock(s); /* added while serving: as at start */
        }
        return 0;
oom:
        server_free(s);
        return kdev_err_set(err, ENOMEM, "out of memory");
}

unsigned kdev_dp_runtime_registrations(const struct kdev_dp_runtime *rt, const char *name)
{
        const struct dp_server *s = find_server(rt, name);
        return s ? s->registrations : 0;
}

int kdev_dp_runtime_state(const struct kdev_dp_runtime *rt, const char *name,
                          struct kdev_dp_state *out)
{
        const struct dp_server *s = find_server(rt, name);
        if (!s)
                return -ENOENT;
        static const enum kdev_dp_reg_state states[] = {
                [REG_WAIT_LOCK] = KDEV_DP_WAIT_LOCK, [REG_IDLE] = KDEV_DP_IDLE,
                [REG_PENDING] = KDEV_DP_PENDING,     [REG_DONE] = KDEV_DP_REGISTERED,
                [REG_BACKOFF] = KDEV_DP_BACKOFF,     [REG_WAIT_DIR] = KDEV_DP_WAIT_DIR,
        };
        *out = (struct kdev_dp_state){
                .state = states[s->state],
                .registrations = s->registrations,
                .failures = s->failures,
                .attempts = s->attempts,
                .generations = s->generations,
                .lock_waits = s->lock_waits,
                .backoff_ms = s->backoff_ms,
                .lock_held = s->lock_fd >= 0,
                .flush_pending = uv_is_active((const uv_handle_t *)&rt->debounce) != 0,
                .streams = s->svc ? kdev_dp_service_streams(s->svc) : 0,
                .dir_events = rt->dir_events,
                .dir_losses = rt->dir_losses,
                .checks = rt->checks,
                .polling = rt->started && !rt->dir_lost &&
                           !uv_is_active((const uv_handle_t *)&rt->watch),
        };
        return 0;
}

static bool kubelet_socket_exists(const struct kdev_dp_runtime *rt)
{
        struct stat st;
        return stat(rt->kubelet_path, &st) == 0 && S_ISSOCK(st.st_mode);
}

/* Forgets the kubelet.sock seen last: whatever comes next is a new one. */
static void kubelet_forget(struct kdev_dp_runtime *rt)
{
        rt->kubelet_dev = 0;
        rt->kubelet_ino = 0;
        rt->kubelet_ctime = (struct timespec){0};
}

/* True when kubelet.sock exists and is not the file seen last time (kubelet
 * created it anew: another inode, or the same inode number with another
 * change time); remembers the current one (rt->kubelet_gen counts them).
 * Attribute changes (chmod, touch) come as UV_CHANGE events, which only
 * refresh the change time (kubelet_socket_touched). */
static bool kubelet_socket_changed(struct kdev_dp_runtime *rt)
{
        struct stat st;
        if (stat(rt->kubelet_path, &st) != 0 || !S_ISSOCK(st.st_mode)) {
                kubelet_forget(rt);
                return false;
        }
        bool changed = st.st_dev != rt->kubelet_dev || st.st_ino != rt->kubelet_ino ||
                       st.st_ctim.tv_sec != rt->kubelet_ctime.tv_sec ||
                       st.st_ctim.tv_nsec != rt->kubelet_ctime.tv_nsec;
        rt->kubelet_dev = st.st_dev;
        rt->kubelet_ino = st.st_ino;
        rt->kubelet_ctime = st.st_ctim;
        if (changed)
                rt->kubelet_gen++;
        return changed;
}

/* An attribute change of kubelet.sock (chmod, touch): the same file with a
 * new change time, not a restart. */
static void kubelet_socket_touched(struct kdev_dp_runtime *rt)
{
        struct stat st;
        if (stat(rt->kubelet_path, &st) == 0 && S_ISSOCK(st.st_mode) &&
            st.st_dev == rt->kubelet_dev && st.st_ino == rt->kubelet_ino)
                rt->kubelet_ctime = st.st_ctim;
}

/* rt->kubelet_gen when the kubelet.sock at the path now is the one seen
 * last, else 0 (a new one whose event is still to come). */
static unsigned kubelet_gen_now(const struct kdev_dp_runtime *rt)
{
        struct stat st;
        if (stat(rt->kubelet_path, &st) != 0 || !S_ISSOCK(st.st_mode))
                return 0;
        bool same = st.st_dev == rt->kubelet_dev && st.st_ino == rt->kubelet_ino &&
                    st.st_ctim.tv_sec == rt->kubelet_ctime.tv_sec &&
                    st.st_ctim.tv_nsec == rt->kubelet_ctime.tv_nsec;
        return same ? rt->kubelet_gen : 0;
}

/* True when the last Register of |s| went to the kubelet.sock seen last. */
static bool registered_with_current(const struct dp_server *s)
{
        return s->reg_kubelet && s->reg_kubelet == s->rt->kubelet_gen;
}

/* True when the socket file we created is still at its path. */
static bool own_socket_present(const struct dp_server *s)
{
        struct stat st;
        if (!s->sock_created || lstat(s->socket_path, &st) != 0)
                return false;
        return st.st_dev == s->sock_dev && st.st_ino == s->sock_ino;
}

/* True when something accepts connections on the Unix socket at |path|. */
static bool socket_is_live(const char *path)
{
        struct sockaddr_un sun = {.sun_family = AF_UNIX};
        if (strlen(path) >= sizeof(sun.sun_path))
                return false;
        strcpy(sun.sun_path, path);
        int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fd < 0)
                return false;
        bool live = connect(fd, (struct sockaddr *)&sun, sizeof(sun)) == 0;
        close(fd);
        return live;
}

static void unlink_own_socket(struct dp_server *s)
{
        if (own_socket_present(s))
                unlink(s->socket_path);
        s->sock_created = false;
}

/* ---- service generations ------------------------------------------------ */

static void on_service_closed(void *arg)
{
        struct kdev_dp_runtime *rt = arg;
        rt->pending_closes--;
        if (rt->stopping && rt->pending_closes == 0) {
                void (*done)(void *) = rt->done;
                void *done_arg = rt->done_arg;
                for (size_t i = 0; i < rt->n_servers; i++)
                        server_free(rt->servers[i]);
                free(rt->servers);
                free(rt->dir);
                free(rt->parent);
                free(rt->prefix);
                free(rt->kubelet_path);
                free(rt);
                if (done)
                        done(done_arg);
        }
}

static void server_close_service(struct dp_server *s)
{
        if (!s->svc)
                return;
        struct kdev_dp_service *svc = s->svc;
        s->svc = NULL;
        s->rt->pending_closes++;
        kdev_dp_service_close(svc, on_service_closed, s->rt);
}

static void cancel_register(struct dp_server *s)
{
        struct kdev_rpc_client_call *call = s->reg_call;
        if (call) {
                s->reg_call = NULL; /* its on_done sees a stale call and ignores it */
                kdev_rpc_client_call_cancel(call);
        }
}

static void on_stream_ended(void *arg, bool current);

/* Starts a fresh server generation on the socket path. */
static int server_start_service(struct dp_server *s)
{
        struct kdev_err err = {0};
        server_close_service(s);
        /* We hold the lock for this path, so a socket there is ours from an
         * older generation or a crashed instance's. Still, never take a socket
         * that a live process answers on (a lock file removed by hand lets two
         * instances hold "the" lock). */
        struct stat st;
        if (lstat(s->socket_path, &st) == 0 && S_ISSOCK(st.st_mode)) {
                if (!own_socket_present(s) && socket_is_live(s->socket_path)) {
                        kdev_log_error("another process serves the resource socket; not taking it",
                                       "resource", s->res->name, "socket", s->socket_path);
                        return -1;
                }
                unlink(s->socket_path);
        } else if (lstat(s->socket_path, &st) == 0) {
                kdev_log_error("cannot serve resource: a file that is not a socket is in the way",
                               "resource", s->res->name, "path", s->socket_path, "type",
                               S_ISLNK(st.st_mode) ? "symlink"
                               : S_ISDIR(st.st_mode) ? "directory"
                                                     : "file");
                return -1;
        }
        s->svc = kdev_dp_service_new(s->rt->loop, s->res, on_stream_ended, s, &err);
        if (s->svc)
                kdev_dp_service_set_hooks(s->svc, s->rt->opts.hooks);
        if (!s->svc || kdev_dp_service_listen(s->svc, s->socket_path, &err) < 0) {
                kdev_log_error("cannot serve resource", "resource", s->res->name, "socket",
                               s->socket_path, "error", err.msg);
                server_close_service(s);
                return -1;
        }
        if (lstat(s->socket_path, &st) == 0) {
                s->sock_dev = st.st_dev;
                s->sock_ino = st.st_ino;
                s->sock_created = true;
        }
        s->generations++;
        kdev_log_info("serving", "resource", s->res->name, "socket", s->socket_path);
        return 0;
}

/* ---- registration ------------------------------------------------------- */

static void schedule_flush(struct kdev_dp_runtime *rt, uint64_t delay_ms);

static void on_retry_timer(uv_timer_t *t)
{
        struct dp_server *s = t->data;
        if (s->rt->stopping)
                return;
        if (s->state == REG_WAIT_LOCK) {
                server_try_lock(s);
                return;
        }
        if (s->state == REG_BACKOFF) {
                s->state = REG_IDLE;
                if (s->svc)
                        server_register(s);
                else
                        server_try_lock(s); /* the server failed to start: try again */
        }
}

/* Tells the hooks how a registration attempt ended. */
static void note_register(struct dp_server *s, bool ok)
{
        const struct kdev_dp_hooks *hk = s->rt->opts.hooks;
        if (!ok)
                s->failures++;
        if (hk && hk->registered)
                hk->registered(hk->arg, s->res->name, ok);
}

static void register_failed(struct dp_server *s, const char *why)
{
        s->state = REG_BACKOFF;
        if (s->recheck_kubelet) {
                s->recheck_kubelet = false; /* the retry goes to the new kubelet */
                if (!s->fast_ms)
                        s->fast_ms = 1;
        }
        s->lost_while_pending = false; /* the retry registers anyway */
        if (s->fast_ms && s->fast_ms < s->backoff_ms) {
                /* A kubelet.sock is reported at bind(), a moment before
                 * kubelet listens on it: retry at once, a few times, before
                 * the backoff (grpc-go waits 1 s there). */
                kdev_log_debug("Register failed on a new kubelet socket, retrying", "resource",
                               s->res->name, "error", why,
                               KDEV_LOG_UINT("retry_in_ms", s->fast_ms));
                uv_timer_start(&s->retry_timer, on_retry_timer, s->fast_ms, 0);
                s->fast_ms *= 2;
                return;
        }
        s->fast_ms = 0;
        char delay[32];
        snprintf(delay, sizeof(delay), "%llums", (unsigned long long)s->backoff_ms);
        kdev_log_warn("Register failed, retrying", "resource", s->res->name, "kubelet",
                      s->rt->kubelet_path, "error", why, "retry_in", delay);
        uv_timer_start(&s->retry_timer, on_retry_timer, s->backoff_ms, 0);
        const struct kdev_dp_hooks *hk = s->rt->opts.hooks;
        if (hk && hk->retry)
                hk->retry(hk->arg, s->res->name, s->backoff_ms);
        s->backoff_ms *= 2;
        if (s->backoff_ms > s->rt->opts.backoff_max_ms)
                s->backoff_ms = s->rt->opts.backoff_max_ms;
}

static void on_register_done(struct kdev_rpc_client_call *call, int status, const char *message,
                             void *user_data)
{
        struct dp_server *s = user_data;
        if (call != s->reg_call)
                return; /* cancelled by a newer attempt */
        s->reg_call = NULL;
        note_register(s, status == KDEV_RPC_OK);
        if (status != KDEV_RPC_OK) {
                char why[1200];
                snprintf(why, sizeof(why), "%s: %s", kdev_rpc_status_name(status), message);
                register_failed(s, why);
                return;
        }
        s->state = REG_DONE;
        s->registrations++;
        s->fast_ms = 0;
        /* The call went to whatever kubelet.sock was at the path when it
         * connected; answered OK, that is the one there now (a kubelet
         * that answered and went away ends the stream: lost_while_pending). */
        s->reg_kubelet = kubelet_gen_now(s->rt);
        if (s->recheck_kubelet) {
                s->recheck_kubelet = false;
                if (!registered_with_current(s))
                        s->restart_wanted = true;
                if (s->restart_wanted || s->sock_lost || s->register_wanted)
                        schedule_flush(s->rt, 0); /* what waited for this answer */
        }
        if (s->lost_while_pending) {
                s->lost_while_pending = false;
                PEER_LOG_INFO(s->rt, "ListAndWatch stream ended during Register, registering again",
                              "resource", s->res->name);
                s->register_wanted = true;
                schedule_flush(s->rt, COALESCE_MS);
        }
        s->backoff_ms = s->rt->opts.backoff_initial_ms;
        PEER_LOG_INFO(s->rt, "registered with kubelet", "resource", s->res->name, "endpoint",
                      s->socket_name);
}

static void server_register(struct dp_server *s)
{
        struct kdev_dp_runtime *rt = s->rt;
        if (rt->stopping || !s->svc)
                return;
        cancel_register(s);
        uv_timer_stop(&s->retry_timer);
        s->recheck_kubelet = false; /* this one goes to the kubelet there now */
        if (!own_socket_present(s)) {
                /* Removed (a starting kubelet removes the sockets it finds
                 * before it serves kubelet.sock): kubelet could not dial
                 * back. A fresh socket and this registration come with the
                 * flush (at once when kubelet.sock is created). */
                s->state = REG_IDLE;
                s->restart_wanted = true;
                schedule_flush(rt, LOST_GRACE_MS);
                return;
        }
        s->attempts++;
        if (!kubelet_socket_exists(rt)) {
                struct stat st;
                note_register(s, false);
                register_failed(s, lstat(rt->kubelet_path, &st) == 0
                                           ? "kubelet socket path exists but is not a socket"
                                           : "kubelet socket does not exist (is kubelet running?)");
                return;
        }
        V1beta1__DevicePluginOptions opts = V1BETA1__DEVICE_PLUGIN_OPTIONS__INIT;
        kdev_dp_fill_options(&opts);
        V1beta1__RegisterRequest req = V1BETA1__REGISTER_REQUEST__INIT;
        req.version = API_VERSION;
        req.endpoint = s->socket_name;
        req.resource_name = s->res->name;
        req.options = &opts;
        uint8_t buf[1024];
        size_t len = v1beta1__register_request__get_packed_size(&req);
        if (len > sizeof(buf)) {
                note_register(s, false);
                register_failed(s, "Register request too large");
                return;
        }
        v1beta1__register_request__pack(&req, buf);
        struct kdev_err err = {0};
        s->reg_kubelet = kubelet_gen_now(rt);
        s->state = REG_PENDING;
        s->lost_while_pending = false;
        s->reg_sent_ms = uv_now(rt->loop);
        if (!s->reg_sent_ms)
                s->reg_sent_ms = 1;
        kdev_dp_service_expect_kubelet(s->svc);
        s->reg_call = kdev_rpc_client_unary(rt->kubelet, METHOD_REGISTER, buf, len,
                                            rt->opts.register_timeout_ms, NULL, on_register_done,
                                            s, &err);
        if (!s->reg_call) {
                note_register(s, false);
                register_failed(s, err.msg);
        }
}

/* ---- locking ------------------------------------------------------------ */

/* Opens (creating it, 0600, when |create|) and locks the file at
 * s->lock_path without waiting. Returns the locked descriptor, -EWOULDBLOCK
 * when another process holds the lock, -EAGAIN when the file was replaced
 * between open and flock (try again), or another negative errno from
 * open/fchmod (-ENOENT: no file and |create| false, or no directory). */
static int lock_take(struct dp_server *s, bool create)
{
        int fd = open(s->lock_path, O_RDWR | O_CLOEXEC | O_NOFOLLOW | (create ? O_CREAT : 0), 0600);
        /* 0600 whatever the umask (open(2) applies it to a new file) */
        if (fd >= 0 && fchmod(fd, 0600) != 0) {
                int e = errno;
                close(fd);
                return -e;
        }
        if (fd < 0)
                return -errno;
        if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
                close(fd);
                return -EWOULDBLOCK;
        }
        struct stat held, at_path;
        if (fstat(fd, &held) != 0 || stat(s->lock_path, &at_path) != 0 ||
            held.st_dev != at_path.st_dev || held.st_ino != at_path.st_ino) {
                /* The file was replaced between open and flock: the lock
                 * must be on the file that is at the path now. */
                close(fd);
                return -EAGAIN;
        }
        return fd;
}

/* True when the lock this server holds is on the file at its path (not
 * removed, not replaced). */
static bool lock_current(const struct dp_server *s)
{
        struct stat held, at_path;
        return s->lock_fd >= 0 && fstat(s->lock_fd, &held) == 0 &&
               lstat(s->lock_path, &at_path) == 0 && held.st_dev == at_path.st_dev &&
               held.st_ino == at_path.st_ino;
}

/* True when the directory is not at its path (checked now). */
static bool dir_missing(const struct kdev_dp_runtime *rt)
{
        struct stat st;
        return stat(rt->dir, &st) != 0;
}

static void server_try_lock(struct dp_server *s)
{
        struct kdev_dp_runtime *rt = s->rt;
        if (rt->dir_lost || rt->stopping)
                return; /* taken again when the directory is back */
        if (s->lock_fd < 0) {
                /* A waiting instance that saw the lock file does not create
                 * it until it has been gone for LOCK_GRACE_MS: its holder
                 * may be taking it again (a lock file removed by hand, taken
                 * again after LOST_GRACE_MS) or the directory may be on its
                 * way out (rm -rf). */
                int fd = lock_take(s, false);
                if (fd == -ENOENT && !dir_missing(rt)) {
                        uint64_t now = uv_now(rt->loop);
                        if (s->lock_seen && !s->lock_missing_ms)
                                s->lock_missing_ms = now ? now : 1;
                        if (!s->lock_seen || now >= s->lock_missing_ms + LOCK_GRACE_MS)
                                fd = lock_take(s, true);
                        else
                                fd = -EAGAIN;
                } else if (fd != -ENOENT) {
                        s->lock_seen = true;
                        s->lock_missing_ms = 0;
                }
                if (fd == -ENOENT) {
                        /* the directory went: the check finds out */
                        schedule_check(rt);
                        uv_timer_start(&s->retry_timer, on_retry_timer, rt->opts.lock_poll_ms, 0);
                        return;
                }
                if (fd == -EWOULDBLOCK) {
                        s->lock_waits++;
                        if (!s->lock_wait_logged) {
                                kdev_log_warn("another instance holds the socket lock, waiting",
                                              "resource", s->res->name, "lock", s->lock_path);
                                s->lock_wait_logged = true;
                        }
                }
                if (fd == -EWOULDBLOCK || fd == -EAGAIN) {
                        uv_timer_start(&s->retry_timer, on_retry_timer, rt->opts.lock_poll_ms, 0);
                        return;
                }
                if (fd < 0) {
                        kdev_log_error("cannot open lock file", "resource", s->res->name, "path",
                                       s->lock_path, "error", strerror(-fd));
                        uv_timer_start(&s->retry_timer, on_retry_timer, rt->opts.lock_poll_ms * 10, 0);
                        return;
                }
                s->lock_fd = fd;
                s->lock_seen = false;
                s->lock_missing_ms = 0;
                if (s->lock_wait_logged)
                        kdev_log_info("acquired the socket lock", "resource", s->res->name);
        }
        s->state = REG_IDLE;
        if (server_start_service(s) == 0)
                server_register(s);
        else
                register_failed(s, "cannot serve the resource socket");
}

/* Stops serving |s| (another instance holds its lock now, or the directory
 * went): Register cancelled, server closed, its own socket removed. */
static void server_withdraw(struct dp_server *s)
{
        cancel_register(s);
        uv_timer_stop(&s->retry_timer);
        server_close_service(s);
        unlink_own_socket(s);
        s->restart_wanted = s->register_wanted = false;
        s->reg_kubelet = 0;
        s->reg_sent_ms = 0;
        s->recheck_kubelet = false;
        s->sock_lost = false;
}

/* The lock file of a serving resource was removed or replaced while the
 * directory stayed: take the lock on the file at the path again; when
 * another instance has it already, stop serving and wait for it. */
static void server_lock_lost(struct dp_server *s)
{
        close(s->lock_fd);
        s->lock_fd = -1;
        s->lock_gone_ms = 0;
        int fd = lock_take(s, true);
        if (fd >= 0) {
                s->lock_fd = fd;
                kdev_log_warn("socket lock file removed: locked again", "resource", s->res->name,
                              "lock", s->lock_path);
                return;
        }
        kdev_log_warn("socket lock file removed and locked by another instance: no longer serving",
                      "resource", s->res->name, "lock", s->lock_path);
        server_withdraw(s);
        s->state = REG_WAIT_LOCK;
        s->lock_wait_logged = true;
        uv_timer_start(&s->retry_timer, on_retry_timer, s->rt->opts.lock_poll_ms, 0);
}

/* ---- the directory -------------------------------------------------------- */

/* Logs the one warning of a runtime that polls instead of using inotify. */
static void watch_failed(struct kdev_dp_runtime *rt, const char *path, int uverr)
{
        if (rt->watch_warned)
                return;
        rt->watch_warned = true;
        char msg[128];
        snprintf(msg, sizeof(msg),
                 "cannot watch the device plugin directory with inotify, checking it every "
                 "%llums instead",
                 (unsigned long long)rt->opts.check_ms);
        kdev_log_warn(msg, "path", path, "error", uv_strerror(uverr));
}

static void on_dir_event(uv_fs_event_t *h, const char *filename, int events, int status);
static void on_parent_event(uv_fs_event_t *h, const char *filename, int events, int status);

/* (Re-)arms the inotify watches that are not active; failures leave the
 * check timer as the watch. Runs outside the watches' own callbacks. */
static void arm_watches(struct kdev_dp_runtime *rt)
{
        if (!rt->dir_lost && !uv_is_active((uv_handle_t *)&rt->watch)) {
                int r = uv_fs_event_start(&rt->watch, on_dir_event, rt->dir, 0);
                if (r < 0)
                        watch_failed(rt, rt->dir, r);
                else if (rt->watch_warned)
                        kdev_log_info("watching the device plugin directory with inotify again",
                                      "dir", rt->dir);
        }
        if (rt->dir_name[0] && !uv_is_active((uv_handle_t *)&rt->parent_watch)) {
                int r = uv_fs_event_start(&rt->parent_watch, on_parent_event, rt->parent, 0);
                if (r < 0 && r != UV_ENOENT)
                        watch_failed(rt, rt->parent, r);
        }
}

/* Opens the directory at rt->dir and remembers it. Returns 0 or -errno. */
static int dir_open(struct kdev_dp_runtime *rt)
{
        int fd = open(rt->dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        struct stat st;
        if (fd < 0)
                return -errno;
        if (fstat(fd, &st) != 0) {
                int e = errno;
                close(fd);
                return -e;
        }
        rt->dir_fd = fd;
        rt->dir_dev = st.st_dev;
        rt->dir_ino = st.st_ino;
        return 0;
}

/* The directory served is no longer at its path: nothing can be served or
 * locked in it. Every server is closed and every lock released (the files
 * went with it; a replaced directory's files are not ours to remove). */
static void dir_lost(struct kdev_dp_runtime *rt, bool replaced)
{
        rt->dir_lost = true;
        rt->dir_losses++;
        if (rt->dir_fd >= 0)
                close(rt->dir_fd);
        rt->dir_fd = -1;
        uv_fs_event_stop(&rt->watch);
        uv_fs_event_stop(&rt->parent_watch); /* re-armed: the parent may be new too */
        kubelet_forget(rt);
        kdev_log_warn(replaced ? "device plugin directory replaced, serving in the new one"
                               : "device plugin directory removed, waiting for it to be created "
                                 "again",
                      "dir", rt->dir);
        for (size_t i = 0; i < rt->n_servers; i++) {
                struct dp_server *s = rt->servers[i];
                s->lock_before_loss = s->lock_fd >= 0;
                server_withdraw(s);
                if (s->lock_fd >= 0)
                        close(s->lock_fd); /* its file is gone: nothing to unlink */
                s->lock_fd = -1;
                s->state = REG_WAIT_DIR;
        }
}

/* A directory is at the path again: watch it and, per resource, take the
 * lock in it, serve and register; the instance that held the lock before
 * goes first, one that was waiting tries after lock_poll_ms. */
static void dir_back(struct kdev_dp_runtime *rt)
{
        if (dir_open(rt) < 0)
                return; /* gone again: the next check or event retries */
        rt->dir_lost = false;
        kdev_log_info("device plugin directory is back, serving again", "dir", rt->dir);
        arm_watches(rt);
        kubelet_socket_changed(rt); /* the kubelet.sock we start with, if any */
        for (size_t i = 0; i < rt->n_servers; i++) {
                struct dp_server *s = rt->servers[i];
                s->state = REG_WAIT_LOCK;
                s->backoff_ms = rt->opts.backoff_initial_ms;
                if (s->lock_before_loss) {
                        s->lock_seen = false; /* create it: the new directory has none */
                        server_try_lock(s);
                } else {
                        uv_timer_start(&s->retry_timer, on_retry_timer, rt->opts.lock_poll_ms, 0);
                }
                s->lock_before_loss = false;
        }
}

/* Follows the directory itself: removed, replaced, created again. Returns
 * true when the directory served is in place. */
static bool dir_follow(struct kdev_dp_runtime *rt)
{
        struct stat st, held;
        bool present = stat(rt->dir, &st) == 0 && S_ISDIR(st.st_mode);
        if (!rt->dir_lost) {
                bool same = present && st.st_dev == rt->dir_dev && st.st_ino == rt->dir_ino &&
                            fstat(rt->dir_fd, &held) == 0 && held.st_nlink > 0;
                if (same)
                        return true;
                dir_lost(rt, present);
        }
        if (!present) {
                /* the parent's watch sees the directory come back; armed
                 * again each time, as the parent may be new too */
                uv_fs_event_stop(&rt->parent_watch);
                arm_watches(rt);
                return false;
        }
        dir_back(rt);
        return !rt->dir_lost;
}

static void kubelet_created(struct kdev_dp_runtime *rt);
static void schedule_flush(struct kdev_dp_runtime *rt, uint64_t delay_ms);

/* The check: the directory, kubelet.sock, each resource's lock and socket,
 * whatever the watches reported (after an event that may concern them, and
 * every check_ms). */
static void on_check(uv_timer_t *t)
{
        struct kdev_dp_runtime *rt = t->data;
        if (rt->stopping)
                return;
        rt->checks++;
        if (!dir_follow(rt))
                return;
        arm_watches(rt);
        if (kubelet_socket_changed(rt))
                kubelet_created(rt);
        for (size_t i = 0; i < rt->n_servers; i++) {
                struct dp_server *s = rt->servers[i];
                if (s->state == REG_WAIT_LOCK || s->state == REG_WAIT_DIR)
                        continue;
                if (s->lock_fd >= 0 && !lock_current(s)) {
                        /* Locked again once it has been gone for
                         * LOST_GRACE_MS: a removal that is part of rm -rf is
                         * then seen as the directory's, and no file is
                         * created in a directory on its way out. */
                        uint64_t now = uv_now(rt->loop);
                        if (!s->lock_gone_ms)
                                s->lock_gone_ms = now ? now : 1;
                        if (now < s->lock_gone_ms + LOST_GRACE_MS) {
                                uv_timer_start(&rt->check_timer, on_check,
                                               s->lock_gone_ms + LOST_GRACE_MS - now,
                                               rt->opts.check_ms);
                        } else {
                                server_lock_lost(s);
                                if (s->state == REG_WAIT_LOCK)
                                        continue;
                        }
                } else {
                        s->lock_gone_ms = 0;
                }
                if (s->svc && s->sock_created && !own_socket_present(s)) {
                        kdev_log_info("plugin socket removed, serving again", "resource",
                                      s->res->name, "socket", s->socket_path);
                        s->sock_created = false;
                        s->sock_lost = true;
                        schedule_flush(rt, LOST_GRACE_MS);
                }
        }
}

/* Runs the check on the next loop iteration (then every check_ms again). */
static void schedule_check(struct kdev_dp_runtime *rt)
{
        if (!rt->stopping && rt->started)
                uv_timer_start(&rt->check_timer, on_check, 0, rt->opts.check_ms);
}

/* ---- events ------------------------------------------------------------- */

static void on_debounce(uv_timer_t *t)
{
        struct kdev_dp_runtime *rt = t->data;
        if (rt->stopping)
                return;
        if (!dir_follow(rt))
                return; /* nothing to serve until the directory is back */
        uint64_t now = uv_now(rt->loop), next = 0;
        for (size_t i = 0; i < rt->n_servers; i++) {
                struct dp_server *s = rt->servers[i];
                if (s->state == REG_WAIT_LOCK || s->state == REG_WAIT_DIR) {
                        s->restart_wanted = s->register_wanted = s->sock_lost = false;
                        continue;
                }
                if (s->recheck_kubelet && s->state == REG_PENDING) {
                        if (now < s->reg_sent_ms + RECHECK_MS)
                                continue; /* its answer decides (on_register_done) */
                        s->recheck_kubelet = false; /* no answer yet: register anew */
                        s->restart_wanted = true;
                        s->fast_ms = 1;
                }
                if (s->sock_lost) {
                        s->sock_lost = false;
                        if (!own_socket_present(s))
                                s->restart_wanted = true; /* else served anew meanwhile */
                }
                if (!s->restart_wanted && !s->register_wanted)
                        continue;
                /* A Register sent to this same kubelet moments ago: what
                 * followed it is done once, at the end of the window. */
                if (s->reg_sent_ms && now < s->reg_sent_ms + COALESCE_MS &&
                    (s->state == REG_PENDING || s->state == REG_DONE) &&
                    registered_with_current(s)) {
                        uint64_t due = s->reg_sent_ms + COALESCE_MS - now;
                        if (!next || due < next)
                                next = due;
                        continue;
                }
                if (s->restart_wanted) {
                        cancel_register(s);
                        if (server_start_service(s) < 0) {
                                s->restart_wanted = s->register_wanted = s->sock_lost = false;
                                register_failed(s, "cannot serve the resource socket");
                                continue;
                        }
                        s->register_wanted = true;
                }
                if (s->register_wanted) {
                        s->backoff_ms = rt->opts.backoff_initial_ms;
                        server_register(s);
                }
                s->restart_wanted = s->register_wanted = false;
        }
        if (next)
                uv_timer_start(&rt->debounce, on_debounce, next, 0);
}

/* Runs the flush in |delay_ms| (0: on the next loop iteration, so that the
 * events of one read are one), or sooner when one is due sooner. */
static void schedule_flush(struct kdev_dp_runtime *rt, uint64_t delay_ms)
{
        if (rt->stopping)
                return;
        if (uv_is_active((uv_handle_t *)&rt->debounce) &&
            uv_timer_get_due_in(&rt->debounce) <= delay_ms)
                return;
        uv_timer_start(&rt->debounce, on_debounce, delay_ms, 0);
}

/* kubelet.sock was created anew (rt->kubelet_gen: the new one): a
 * fresh server and a registration for every resource not registered with
 * it yet, at once. */
static void kubelet_created(struct kdev_dp_runtime *rt)
{
        if (rt->opts.hooks && rt->opts.hooks->kubelet_restart)
                rt->opts.hooks->kubelet_restart(rt->opts.hooks->arg);
        bool any = false;
        for (size_t i = 0; i < rt->n_servers; i++) {
                struct dp_server *s = rt->servers[i];
                if (s->state == REG_WAIT_LOCK || s->state == REG_WAIT_DIR)
                        continue; /* not serving: nothing to redo */
                if ((s->state == REG_PENDING || s->state == REG_DONE) &&
                    registered_with_current(s))
                        continue; /* already registered with this kubelet */
                if (s->state == REG_PENDING && s->reg_sent_ms &&
                    uv_now(rt->loop) < s->reg_sent_ms + COALESCE_MS) {
                        /* Sent a moment ago, it may have reached this new
                         * kubelet: its answer tells (on_register_done), or
                         * RECHECK_MS without one. */
                        s->recheck_kubelet = true;
                        schedule_flush(rt, s->reg_sent_ms + RECHECK_MS - uv_now(rt->loop));
                        continue;
                }
                s->restart_wanted = true;
                s->fast_ms = 1;
                any = true;
        }
        if (any) {
                kdev_log_info("kubelet socket created, registering again", "kubelet",
                              rt->kubelet_path);
                schedule_flush(rt, 0);
        }
}

/* True when a file |name| exists in the directory. */
static bool dir_has(const struct kdev_dp_runtime *rt, const char *name)
{
        struct stat st;
        return rt->dir_fd >= 0 && fstatat(rt->dir_fd, name, &st, AT_SYMLINK_NOFOLLOW) == 0;
}

static void on_parent_event(uv_fs_event_t *h, const char *filename, int events, int status)
{
        struct kdev_dp_runtime *rt = h->data;
        (void)events;
        if (rt->stopping)
                return;
        if (status < 0 || !filename || strcmp(filename, rt->dir_name) == 0)
                schedule_check(rt); /* the directory removed, renamed or created */
}

static void on_dir_event(uv_fs_event_t *h, const char *filename, int events, int status)
{
        struct kdev_dp_runtime *rt = h->data;
        if (rt->stopping)
                return;
        rt->dir_events++;
        if (status < 0 || !filename) {
                /* Overflow or unknown: re-check everything. */
                schedule_check(rt);
                return;
        }
        if (strcmp(filename, rt->dir_name) == 0 && !dir_has(rt, filename)) {
                /* The directory itself (libuv names it so for IN_DELETE_SELF,
                 * IN_MOVE_SELF and IN_IGNORED). */
                schedule_check(rt);
                return;
        }
        if (strcmp(filename, rt->kubelet_name) == 0) {
                if (!(events & UV_RENAME)) {
                        kubelet_socket_touched(rt); /* chmod, touch: not a restart */
                        return;
                }
                if (!kubelet_socket_changed(rt)) {
                        if (rt->kubelet_dev == 0 && rt->kubelet_ino == 0) {
                                /* Removed: the kubelet.sock that comes back is a
                                 * new kubelet even when the file system gives it
                                 * the old inode number (ext4, tmpfs reuse them),
                                 * so no registration is with it yet. */
                                for (size_t i = 0; i < rt->n_servers; i++)
                                        rt->servers[i]->reg_kubelet = 0;
                        }
                        return; /* removed (wait for it to come back) */
                }
                kubelet_created(rt);
                return;
        }
        for (size_t i = 0; i < rt->n_servers; i++) {
                struct dp_server *s = rt->servers[i];
                if (s->lock_fd >= 0 && strcmp(filename, s->lock_path + strlen(rt->dir) + 1) == 0 &&
                    !lock_current(s)) {
                        schedule_check(rt); /* the lock file removed: lock again at once */
                        continue;
                }
                if (s->svc && s->sock_created && strcmp(filename, s->socket_name) == 0 &&
                    !own_socket_present(s)) {
                        kdev_log_info("plugin socket removed, serving again", "resource",
                                      s->res->name, "socket", s->socket_path);
                        s->sock_created = false;
                        s->sock_lost = true;
                        /* a restarting kubelet creates kubelet.sock next,
                         * which registers at once: wait for it a moment */
                        schedule_flush(rt, LOST_GRACE_MS);
                }
        }
}

/* Kubelet's ListAndWatch stream ended (kubelet closed it or the connection
 * broke). |current|: the stream of the latest registration. */
static void on_stream_ended(void *arg, bool current)
{
        struct dp_server *s = arg;
        struct kdev_dp_runtime *rt = s->rt;
        if (rt->stopping || !current || s->state == REG_WAIT_LOCK || s->state == REG_WAIT_DIR)
                return; /* an earlier registration's stream, dropped as kubelet re-registers */
        if (s->state == REG_PENDING) {
                /* The stream of the registration under way ended before its
                 * Register returned: register again once it has. */
                s->lost_while_pending = true;
                return;
        }
        if (kubelet_socket_exists(rt)) {
                PEER_LOG_INFO(rt, "ListAndWatch stream ended, registering again", "resource",
                              s->res->name);
                s->register_wanted = true;
                /* after COALESCE_MS: a kubelet that is restarting creates
                 * its new kubelet.sock meanwhile, which registers at once,
                 * and this becomes part of that one registration */
                schedule_flush(rt, COALESCE_MS);
        } else {
                /* Whatever kubelet.sock comes next is a new kubelet, even
                 * with the old inode number and unseen by a watch (polling). */
                kubelet_forget(rt);
                s->reg_kubelet = 0;
                kdev_log_info("ListAndWatch stream ended, waiting for kubelet", "resource",
                              s->res->name);
        }
}

int kdev_dp_runtime_start(struct kdev_dp_runtime *rt, struct kdev_err *err)
{
        struct stat st;
        if (stat(rt->dir, &st) != 0) {
                int r = kdev_dir_create(rt->dir, KDEV_DIR_MODE_PLUGIN, "device plugin directory",
                                        err);
                if (r < 0)
                        return r;
                kdev_log_info("created device plugin directory", "dir", rt->dir);
        } else if (!S_ISDIR(st.st_mode)) {
                return kdev_err_set(err, ENOTDIR, "device plugin path %s is not a directory", rt->dir);
        }
        int r = dir_open(rt);
        if (r < 0)
                return kdev_err_set(err, -r, "cannot open device plugin directory %s: %s", rt->dir,
                                    strerror(-r));
        rt->kubelet = kdev_rpc_client_new(rt->loop, rt->kubelet_path, NULL);
        if (!rt->kubelet)
                return kdev_err_set(err, ENOMEM, "out of memory");
        rt->started = true;
        arm_watches(rt);
        uv_timer_start(&rt->check_timer, on_check, rt->opts.check_ms, rt->opts.check_ms);
        kubelet_socket_changed(rt); /* remember the kubelet.sock we start with */
        for (size_t i = 0; i < rt->n_servers; i++)
                server_try_lock(rt->servers[i]);
        return 0;
}

void kdev_dp_runtime_restart(struct kdev_dp_runtime *rt)
{
        if (!rt || rt->stopping)
                return;
        for (size_t i = 0; i < rt->n_servers; i++)
                rt->servers[i]->restart_wanted = true;
        schedule_flush(rt, 0);
}

void kdev_dp_runtime_notify(struct kdev_dp_runtime *rt, const char *name)
{
        struct dp_server *s = find_server(rt, name);
        if (s && s->svc)
                kdev_dp_service_notify(s->svc);
}

static void on_removed_timer_closed(uv_handle_t *h)
{
        struct dp_server *s = h->data;
        struct kdev_dp_runtime *rt = s->rt;
        server_free(s);
        on_service_closed(rt);
}

/* Unlinks the lock file and releases the lock: an instance waiting on the
 * file notices it is no longer at the path (the identity check in
 * server_try_lock) and locks a new one; so no lock file is left behind. */
static void release_lock(struct dp_server *s)
{
        if (s->lock_fd >= 0) {
                unlink(s->lock_path);
                close(s->lock_fd);
                s->lock_fd = -1;
        }
}

int kdev_dp_runtime_remove_resource(struct kdev_dp_runtime *rt, const char *name)
{
        size_t i = 0;
        while (i < rt->n_servers && strcmp(rt->servers[i]->res->name, name) != 0)
                i++;
        if (i == rt->n_servers)
                return -ENOENT;
        struct dp_server *s = rt->servers[i];
        memmove(&rt->servers[i], &rt->servers[i + 1],
                (rt->n_servers - i - 1) * sizeof(rt->servers[0]));
        rt->n_servers--;
        cancel_register(s); /* its on_done runs now and finds no call of s */
        server_close_service(s);
        unlink_own_socket(s);
        release_lock(s);
        s->res = NULL;
        rt->pending_closes++;
        uv_close((uv_handle_t *)&s->retry_timer, on_removed_timer_closed);
        return 0;
}

int kdev_dp_runtime_update_resource(struct kdev_dp_runtime *rt, struct kdev_resource *res,
                                    bool restart, struct kdev_err *err)
{
        struct dp_server *s = find_server(rt, res->name);
        if (!s)
                return kdev_err_set(err, ENOENT, "resource %s is not served", res->name);
        int r = check_list_size(res, err);
        if (r < 0)
                return r;
        s->res = res;
        if (s->svc)
                kdev_dp_service_set_resource(s->svc, res);
        if (restart) {
                if (rt->started && !rt->stopping) {
                        s->restart_wanted = true;
                        schedule_flush(rt, 0);
                }
        } else if (s->svc) {
                kdev_dp_service_notify(s->svc);
        }
        return 0;
}

static void on_handle_closed(uv_handle_t *h)
{
        on_service_closed(h->data);
}

void kdev_dp_runtime_stop(struct kdev_dp_runtime *rt, void (*done)(void *arg), void *arg)
{
        if (!rt) {
                if (done)
                        done(arg);
                return;
        }
        rt->stopping = true;
        rt->done = done;
        rt->done_arg = arg;
        rt->pending_closes++; /* held until every close below is issued */
        for (size_t i = 0; i < rt->n_servers; i++) {
                struct dp_server *s = rt->servers[i];
                cancel_register(s);
                server_close_service(s);
                unlink_own_socket(s);
                release_lock(s);
                rt->pending_closes++;
                s->retry_timer.data = rt;
                uv_close((uv_handle_t *)&s->retry_timer, on_handle_closed);
        }
        rt->pending_closes += 5;
        rt->debounce.data = rt;
        rt->watch.data = rt;
        rt->parent_watch.data = rt;
        rt->check_timer.data = rt;
        if (rt->dir_fd >= 0)
                close(rt->dir_fd);
        rt->dir_fd = -1;
        kdev_log_limiter_free(rt->peer_log); /* the counts still pending */
        rt->peer_log = NULL;
        uv_close((uv_handle_t *)&rt->log_timer, on_handle_closed);
        uv_close((uv_handle_t *)&rt->debounce, on_handle_closed);
        uv_close((uv_handle_t *)&rt->watch, on_handle_closed);
        uv_close((uv_handle_t *)&rt->parent_watch, on_handle_closed);
        uv_close((uv_handle_t *)&rt->check_timer, on_handle_closed);
        kdev_rpc_client_close(rt->kubelet);
        rt->kubelet = NULL;
        on_service_closed(rt);
}
