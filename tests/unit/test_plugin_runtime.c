/* The device plugin runtime's state machine (plugin/runtime.h), in process:
 * the runtime on a libuv loop against a fake kubelet served by kdev's own rpc
 * server on a Unix socket in a temporary directory. The fake kubelet accepts
 * Register as kubelet does (GetDevicePluginOptions inside Register, then
 * ListAndWatch on the same connection; k8s pkg/kubelet/cm/devicemanager),
 * or rejects it, or answers OK without a message, or ends the ListAndWatch
 * stream at its first message, or goes away and comes back as a new
 * kubelet.sock. Time: the runtime's backoff and lock-poll intervals are set
 * to a few milliseconds and every wait runs the loop until a predicate holds
 * (with a deadline); the backoff sequence is read from the runtime's retry
 * hook and the state from kdev_dp_runtime_state().
 *
 * KDEV_TEST_LOG=1 prints the runtime's log lines; KDEV_TEST_FILTER=NAME runs
 * only the matching cases (cmocka_set_test_filter). */
#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>
#include <uv.h>

#include "common/log.h"
#include "deviceplugin/v1beta1/api.pb-c.h"
#include "model/model.h"
#include "plugin/runtime.h"
#include "rpc/rpc.h"

#define RES "example.com/null"
#define SOCK "kdev-example.com_null.sock"
#define DEADLINE_MS 20000 /* generous: valgrind runs this 20-50x slower */
#define MAX_RETRIES 64

/* ---- inotify that fails ------------------------------------------------- */

/* libuv's uv_fs_event_start calls inotify_init1 and inotify_add_watch from
 * libc; these definitions in the executable come first. While
 * g_inotify_errno is set, both fail with it (the instance and watch limits:
 * EMFILE, ENOSPC), as the LD_PRELOAD shim of the integration tests does. */
static int g_inotify_errno;

int inotify_init1(int flags)
{
        if (g_inotify_errno) {
                errno = g_inotify_errno;
                return -1;
        }
        int (*real)(int) = (int (*)(int))dlsym(RTLD_NEXT, "inotify_init1");
        return real(flags);
}

int inotify_add_watch(int fd, const char *path, uint32_t mask)
{
        if (g_inotify_errno) {
                errno = g_inotify_errno;
                return -1;
        }
        int (*real)(int, const char *, uint32_t) =
                (int (*)(int, const char *, uint32_t))dlsym(RTLD_NEXT, "inotify_add_watch");
        return real(fd, path, mask);
}

/* ---- fake kubelet ------------------------------------------------------- */

struct kubelet {
        uv_loop_t *loop;
        char path[128];   /* <dir>/kubelet.sock */
        char dir[96];
        struct kdev_rpc_server *srv;
        struct kdev_rpc_client *plugin;   /* dial-back to the plugin's socket */
        struct kdev_rpc_call *reg_call;   /* Register waiting on GetDevicePluginOptions */
        struct kdev_rpc_client_call *lw;  /* current ListAndWatch */
        unsigned reject;       /* reject the next N Register calls (UNKNOWN) */
        unsigned no_message;   /* answer the next N Register calls OK without a message */
        unsigned close_streams; /* end the next N ListAndWatch streams at their first message */
        unsigned registers;    /* Register requests received */
        unsigned accepted;     /* Register calls answered OK with a message */
        unsigned options;      /* GetDevicePluginOptions answered OK */
        unsigned lw_messages;  /* ListAndWatch messages received */
        unsigned lw_devices;   /* devices in the last one */
        char version[16], endpoint[128], resource[128];
        bool preferred_available;
};

static void kubelet_lw_message(struct kdev_rpc_client_call *call, const uint8_t *msg, size_t len,
                               void *arg)
{
        struct kubelet *k = arg;
        V1beta1__ListAndWatchResponse *r = v1beta1__list_and_watch_response__unpack(NULL, len, msg);
        assert_non_null(r);
        k->lw_messages++;
        k->lw_devices = (unsigned)r->n_devices;
        v1beta1__list_and_watch_response__free_unpacked(r, NULL);
        if (k->close_streams > 0) {
                k->close_streams--;
                kdev_rpc_client_call_cancel(call);
        }
}

static void kubelet_lw_done(struct kdev_rpc_client_call *call, int status, const char *message,
                            void *arg)
{
        struct kubelet *k = arg;
        (void)status;
        (void)message;
        if (k->lw == call)
                k->lw = NULL;
}

static void kubelet_reg_cancelled(struct kdev_rpc_call *call, void *arg)
{
        struct kubelet *k = arg;
        if (k->reg_call == call)
                k->reg_call = NULL;
}

static void kubelet_options_done(struct kdev_rpc_client_call *call, int status, const char *message,
                                 void *arg)
{
        struct kubelet *k = arg;
        (void)call;
        (void)message;
        struct kdev_rpc_call *reg = k->reg_call;
        k->reg_call = NULL;
        if (!reg)
                return; /* the plugin gave up on this Register */
        if (status != KDEV_RPC_OK) {
                kdev_rpc_call_finish(reg, KDEV_RPC_UNKNOWN, "GetDevicePluginOptions failed");
                return;
        }
        k->options++;
        V1beta1__Empty empty = V1BETA1__EMPTY__INIT;
        assert_int_equal(kdev_rpc_call_reply_pb(reg, &empty.base), 0);
        k->accepted++;
        V1beta1__Empty req = V1BETA1__EMPTY__INIT;
        uint8_t buf[8];
        size_t len = v1beta1__empty__pack(&req, buf);
        struct kdev_err err = {0};
        k->lw = kdev_rpc_client_call(k->plugin, "/v1beta1.DevicePlugin/ListAndWatch", buf, len, 0,
                                     kubelet_lw_message, kubelet_lw_done, k, &err);
        assert_non_null(k->lw);
}

static void kubelet_options_message(struct kdev_rpc_client_call *call, const uint8_t *msg,
                                    size_t len, void *arg)
{
        struct kubelet *k = arg;
        (void)call;
        V1beta1__DevicePluginOptions *o = v1beta1__device_plugin_options__unpack(NULL, len, msg);
        assert_non_null(o);
        k->preferred_available = o->get_preferred_allocation_available;
        v1beta1__device_plugin_options__free_unpacked(o, NULL);
}

static void kubelet_register(struct kdev_rpc_call *call, const uint8_t *req, size_t req_len,
                             void *arg)
{
        struct kubelet *k = arg;
        V1beta1__RegisterRequest *r = v1beta1__register_request__unpack(NULL, req_len, req);
        assert_non_null(r);
        k->registers++;
        snprintf(k->version, sizeof(k->version), "%s", r->version);
        snprintf(k->endpoint, sizeof(k->endpoint), "%s", r->endpoint);
        snprintf(k->resource, sizeof(k->resource), "%s", r->resource_name);
        v1beta1__register_request__free_unpacked(r, NULL);
        if (k->reject > 0) {
                k->reject--;
                kdev_rpc_call_finish(call, KDEV_RPC_UNKNOWN, "rejected by the fake kubelet");
                return;
        }
        if (k->no_message > 0) {
                k->no_message--;
                kdev_rpc_call_finish(call, KDEV_RPC_OK, NULL);
                return;
        }
        /* As kubelet: a fresh client for the endpoint, GetDevicePluginOptions
         * before answering Register, then ListAndWatch on that connection. */
        kdev_rpc_client_close(k->plugin);
        k->lw = NULL;
        char path[256];
        snprintf(path, sizeof(path), "%s/%s", k->dir, k->endpoint);
        k->plugin = kdev_rpc_client_new(k->loop, path, NULL);
        assert_non_null(k->plugin);
        k->reg_call = call;
        kdev_rpc_call_on_cancel(call, kubelet_reg_cancelled, k);
        V1beta1__Empty e = V1BETA1__EMPTY__INIT;
        uint8_t buf[8];
        size_t len = v1beta1__empty__pack(&e, buf);
        struct kdev_err err = {0};
        assert_non_null(kdev_rpc_client_unary(k->plugin, "/v1beta1.DevicePlugin/GetDevicePluginOptions",
                                              buf, len, 5000, kubelet_options_message,
                                              kubelet_options_done, k, &err));
}

/* Serves the fake kubelet's Register on a new socket file at |path|. */
static void kubelet_listen(struct kubelet *k, const char *path)
{
        assert_null(k->srv);
        k->srv = kdev_rpc_server_new(k->loop, NULL);
        assert_non_null(k->srv);
        assert_int_equal(kdev_rpc_server_add_method(k->srv, "/v1beta1.Registration/Register", false,
                                                    kubelet_register, k),
                         0);
        struct kdev_err err = {0};
        if (kdev_rpc_server_listen_unix(k->srv, path, &err) != 0)
                fail_msg("listen %s: %s", path, err.msg);
}

/* Serves a new kubelet.sock (a new file: a kubelet (re)start). */
static void kubelet_start(struct kubelet *k)
{
        kubelet_listen(k, k->path);
}

/* Kubelet goes away: its socket file first (as a stopping kubelet's is
 * gone before it comes back), then its connections. */
static void kubelet_stop(struct kubelet *k)
{
        unlink(k->path);
        if (k->reg_call) {
                kdev_rpc_call_finish(k->reg_call, KDEV_RPC_UNAVAILABLE, "kubelet stopping");
                k->reg_call = NULL;
        }
        kdev_rpc_server_close(k->srv, NULL, NULL);
        k->srv = NULL;
        kdev_rpc_client_close(k->plugin);
        k->plugin = NULL;
        k->lw = NULL;
}

/* ---- fixture ------------------------------------------------------------ */

struct fx {
        uv_loop_t loop;
        uv_timer_t tick; /* keeps uv_run(UV_RUN_ONCE) returning while waiting */
        char dir[96];
        char sock[160], lock[168];
        struct kubelet k;
        struct kdev_device devices[2];
        struct kdev_resource res;
        struct kdev_dp_hooks hooks;
        struct kdev_dp_options opts;
        struct kdev_dp_runtime *rt;
        uint64_t retries[MAX_RETRIES]; /* delays the retry hook reported, in order */
        size_t n_retries;
        unsigned hook_ok, hook_failed, hook_restarts;
        bool stopped;
};

static void on_retry(void *arg, const char *resource, uint64_t delay_ms)
{
        struct fx *f = arg;
        assert_string_equal(resource, RES);
        if (f->n_retries < MAX_RETRIES)
                f->retries[f->n_retries] = delay_ms;
        f->n_retries++;
}

static void on_registered(void *arg, const char *resource, bool ok)
{
        struct fx *f = arg;
        assert_string_equal(resource, RES);
        if (ok)
                f->hook_ok++;
        else
                f->hook_failed++;
}

static void on_kubelet_restart(void *arg)
{
        struct fx *f = arg;
        f->hook_restarts++;
}

static void on_tick(uv_timer_t *t)
{
        (void)t;
}

static struct kdev_dp_state state(struct fx *f)
{
        struct kdev_dp_state s;
        assert_int_equal(kdev_dp_runtime_state(f->rt, RES, &s), 0);
        return s;
}

/* Runs the loop until |expr| holds; fails the test after DEADLINE_MS. */
#define WAIT_FOR(f, expr)                                                                  \
        do {                                                                               \
                uv_update_time(&(f)->loop);                                                \
                uint64_t dl_ = uv_now(&(f)->loop) + DEADLINE_MS;                           \
                uv_timer_start(&(f)->tick, on_tick, 1, 1);                                 \
                while (!(expr)) {                                                          \
                        if (uv_now(&(f)->loop) > dl_)                                      \
                                fail_msg("%s:%d: timed out waiting for %s", __FILE__,      \
                                         __LINE__, #expr);                                 \
                        uv_run(&(f)->loop, UV_RUN_ONCE);                                   \
                        uv_update_time(&(f)->loop);                                        \
                }                                                                          \
                uv_timer_stop(&(f)->tick);                                                 \
        } while (0)

static int setup(void **state_)
{
        struct fx *f = calloc(1, sizeof(*f));
        assert_non_null(f);
        assert_int_equal(uv_loop_init(&f->loop), 0);
        uv_timer_init(&f->loop, &f->tick);
        snprintf(f->dir, sizeof(f->dir), "/tmp/kdev-rt-XXXXXX");
        assert_non_null(mkdtemp(f->dir));
        snprintf(f->sock, sizeof(f->sock), "%s/%s", f->dir, SOCK);
        snprintf(f->lock, sizeof(f->lock), "%s.lock", f->sock);
        f->k.loop = &f->loop;
        snprintf(f->k.dir, sizeof(f->k.dir), "%s", f->dir);
        snprintf(f->k.path, sizeof(f->k.path), "%s/kubelet.sock", f->dir);
        f->devices[0] = (struct kdev_device){.id = "null0", .healthy = true, .numa_node = -1};
        f->devices[1] = (struct kdev_device){.id = "null1", .healthy = true, .numa_node = -1};
        f->res = (struct kdev_resource){.name = RES, .devices = f->devices, .n_devices = 2};
        f->hooks = (struct kdev_dp_hooks){.arg = f,
                                          .registered = on_registered,
                                          .kubelet_restart = on_kubelet_restart,
                                          .retry = on_retry};
        f->opts = (struct kdev_dp_options){.plugin_dir = f->dir,
                                           .register_timeout_ms = 5000,
                                           .backoff_initial_ms = 1,
                                           .backoff_max_ms = 8,
                                           .lock_poll_ms = 1,
                                           .hooks = &f->hooks};
        *state_ = f;
        return 0;
}

static void on_stopped(void *arg)
{
        struct fx *f = arg;
        f->stopped = true;
}

static void stop_runtime(struct fx *f)
{
        if (!f->rt)
                return;
        f->stopped = false;
        kdev_dp_runtime_stop(f->rt, on_stopped, f);
        f->rt = NULL;
        WAIT_FOR(f, f->stopped);
}

static int teardown(void **state_)
{
        struct fx *f = *state_;
        g_inotify_errno = 0;
        stop_runtime(f);
        if (f->k.srv)
                kubelet_stop(&f->k);
        uv_close((uv_handle_t *)&f->tick, NULL);
        uv_run(&f->loop, UV_RUN_DEFAULT);
        assert_int_equal(uv_loop_close(&f->loop), 0); /* every handle released */
        unlink(f->lock);
        unlink(f->sock);
        unlink(f->k.path);
        assert_int_equal(rmdir(f->dir), 0); /* nothing else left behind */
        free(f);
        return 0;
}

static void start_runtime(struct fx *f)
{
        struct kdev_err err = {0};
        f->rt = kdev_dp_runtime_new(&f->loop, &f->opts, &err);
        assert_non_null(f->rt);
        assert_int_equal(kdev_dp_runtime_add_resource(f->rt, &f->res, &err), 0);
        if (kdev_dp_runtime_start(f->rt, &err) != 0)
                fail_msg("start: %s", err.msg);
}

/* Starts the kubelet and the runtime and waits for the first registration
 * with kubelet's ListAndWatch stream open. */
static void start_registered(struct fx *f)
{
        kubelet_start(&f->k);
        start_runtime(f);
        WAIT_FOR(f, state(f).registrations == 1 && f->k.lw_messages == 1 && state(f).streams == 1);
}

static bool is_socket(const char *path)
{
        struct stat st;
        return lstat(path, &st) == 0 && S_ISSOCK(st.st_mode);
}

static bool exists(const char *path)
{
        struct stat st;
        return lstat(path, &st) == 0;
}

/* ---- cases -------------------------------------------------------------- */

/* Defaults of zero options, the state before start, unknown names. */
static void test_defaults_and_unknown_resource(void **state_)
{
        struct fx *f = *state_;
        struct kdev_dp_options o = {.plugin_dir = f->dir};
        struct kdev_err err = {0};
        f->rt = kdev_dp_runtime_new(&f->loop, &o, &err);
        assert_non_null(f->rt);
        assert_int_equal(kdev_dp_runtime_add_resource(f->rt, &f->res, &err), 0);
        struct kdev_dp_state s = state(f);
        assert_int_equal(s.state, KDEV_DP_WAIT_LOCK);
        assert_int_equal(s.backoff_ms, 100);
        assert_int_equal(s.registrations, 0);
        assert_int_equal(s.attempts, 0);
        assert_int_equal(s.generations, 0);
        assert_false(s.lock_held);
        assert_false(s.flush_pending);
        struct kdev_dp_state u = {.registrations = 7};
        assert_int_equal(kdev_dp_runtime_state(f->rt, "example.com/other", &u), -ENOENT);
        assert_int_equal(u.registrations, 7);
        assert_int_equal(kdev_dp_runtime_registrations(f->rt, "example.com/other"), 0);
}

/* One Register with kubelet's fields, one server, one stream; stop removes
 * the socket and the lock file, never kubelet's socket. */
static void test_registers_once_and_stop_removes_own_files(void **state_)
{
        struct fx *f = *state_;
        start_registered(f);
        struct kdev_dp_state s = state(f);
        assert_int_equal(s.state, KDEV_DP_REGISTERED);
        assert_int_equal(s.registrations, 1);
        assert_int_equal(s.attempts, 1);
        assert_int_equal(s.failures, 0);
        assert_int_equal(s.generations, 1);
        assert_int_equal(s.streams, 1);
        assert_true(s.lock_held);
        assert_int_equal(s.backoff_ms, 1);
        assert_int_equal(f->k.registers, 1);
        assert_int_equal(f->k.options, 1);
        assert_string_equal(f->k.version, "v1beta1");
        assert_string_equal(f->k.endpoint, SOCK);
        assert_string_equal(f->k.resource, RES);
        assert_true(f->k.preferred_available);
        assert_int_equal(f->k.lw_devices, 2);
        assert_int_equal(f->hook_ok, 1);
        assert_int_equal(f->hook_failed, 0);
        assert_int_equal(f->n_retries, 0);
        assert_int_equal(f->hook_restarts, 0);
        assert_int_equal(kdev_dp_runtime_registrations(f->rt, RES), 1);
        struct stat st;
        assert_int_equal(lstat(f->sock, &st), 0);
        assert_true(S_ISSOCK(st.st_mode));
        assert_int_equal(st.st_mode & 0777, 0600);
        assert_int_equal(lstat(f->lock, &st), 0);
        assert_int_equal(st.st_mode & 0777, 0600);

        stop_runtime(f);
        assert_false(exists(f->sock));
        assert_false(exists(f->lock));
        assert_true(is_socket(f->k.path));
        WAIT_FOR(f, f->k.lw == NULL); /* the stream ended with the server */
}

/* No kubelet: retries after 1, 2, 4, 8 ms, then 8 ms (the cap) each time;
 * no server restarts meanwhile. */
static void test_backoff_doubles_to_the_cap_without_kubelet(void **state_)
{
        struct fx *f = *state_;
        start_runtime(f);
        WAIT_FOR(f, f->n_retries >= 7);
        const uint64_t want[7] = {1, 2, 4, 8, 8, 8, 8};
        for (size_t i = 0; i < 7; i++)
                assert_int_equal(f->retries[i], want[i]);
        struct kdev_dp_state s = state(f);
        assert_int_equal(s.state, KDEV_DP_BACKOFF);
        assert_int_equal(s.failures, f->n_retries);
        assert_int_equal(s.attempts, f->n_retries);
        assert_int_equal(f->hook_failed, f->n_retries);
        assert_int_equal(s.registrations, 0);
        assert_int_equal(s.generations, 1);
        assert_int_equal(s.backoff_ms, 8);
        assert_true(is_socket(f->sock)); /* served while kubelet is away */
}

/* Kubelet rejects Register 3 times: retries after 1, 2, 4 ms, the 4th is
 * registered and the backoff starts from 1 ms again. */
static void test_rejected_register_backs_off_then_registers(void **state_)
{
        struct fx *f = *state_;
        f->k.reject = 3;
        kubelet_start(&f->k);
        start_runtime(f);
        WAIT_FOR(f, state(f).registrations == 1 && f->k.lw_messages == 1);
        assert_int_equal(f->n_retries, 3);
        assert_int_equal(f->retries[0], 1);
        assert_int_equal(f->retries[1], 2);
        assert_int_equal(f->retries[2], 4);
        struct kdev_dp_state s = state(f);
        assert_int_equal(s.state, KDEV_DP_REGISTERED);
        assert_int_equal(s.attempts, 4);
        assert_int_equal(s.failures, 3);
        assert_int_equal(s.generations, 1);
        assert_int_equal(s.backoff_ms, 1);
        assert_int_equal(f->k.registers, 4);
        assert_int_equal(f->k.accepted, 1);
        assert_int_equal(f->hook_failed, 3);
        assert_int_equal(f->hook_ok, 1);
}

/* Register answered OK without a message is a failure (a unary call needs
 * one message), retried once after 1 ms. */
static void test_ok_without_message_is_retried(void **state_)
{
        struct fx *f = *state_;
        f->k.no_message = 1;
        kubelet_start(&f->k);
        start_runtime(f);
        WAIT_FOR(f, state(f).registrations == 1 && f->k.lw_messages == 1);
        assert_int_equal(f->n_retries, 1);
        assert_int_equal(f->retries[0], 1);
        struct kdev_dp_state s = state(f);
        assert_int_equal(s.attempts, 2);
        assert_int_equal(s.failures, 1);
        assert_int_equal(f->k.registers, 2);
        assert_int_equal(f->k.accepted, 1);
}

/* Kubelet absent at start (a long backoff, so only the directory watch can
 * bring it on): kubelet.sock appearing starts a fresh server and registers. */
static void test_kubelet_appearing_registers_at_once(void **state_)
{
        struct fx *f = *state_;
        f->opts.backoff_initial_ms = 600000;
        f->opts.backoff_max_ms = 600000;
        start_runtime(f);
        WAIT_FOR(f, state(f).failures == 1);
        assert_int_equal(f->n_retries, 1);
        assert_int_equal(f->retries[0], 600000);
        assert_int_equal(state(f).state, KDEV_DP_BACKOFF);
        kubelet_start(&f->k);
        WAIT_FOR(f, state(f).registrations == 1 && f->k.lw_messages == 1);
        struct kdev_dp_state s = state(f);
        assert_int_equal(s.state, KDEV_DP_REGISTERED);
        assert_int_equal(s.attempts, 2);
        assert_int_equal(s.failures, 1);
        assert_int_equal(s.generations, 2);
        assert_int_equal(s.backoff_ms, 600000);
        assert_int_equal(f->k.registers, 1);
        assert_int_equal(f->hook_restarts, 1);
        assert_int_equal(f->n_retries, 1);
}

/* Kubelet ends the ListAndWatch stream at once, twice: the runtime registers
 * again each time on the same server, then stays registered. */
static void test_stream_end_registers_again(void **state_)
{
        struct fx *f = *state_;
        f->k.close_streams = 2;
        kubelet_start(&f->k);
        start_runtime(f);
        WAIT_FOR(f, state(f).registrations == 3 && f->k.lw_messages == 3 && state(f).streams == 1 &&
                            !state(f).flush_pending);
        struct kdev_dp_state s = state(f);
        assert_int_equal(s.state, KDEV_DP_REGISTERED);
        assert_int_equal(f->k.registers, 3);
        assert_int_equal(f->k.accepted, 3);
        assert_int_equal(f->k.close_streams, 0);
        assert_int_equal(s.attempts, 3);
        assert_int_equal(s.failures, 0);
        assert_int_equal(s.generations, 1);
        assert_int_equal(f->n_retries, 0);
}

/* Kubelet restarts: kubelet.sock goes (the stream ends, nothing is
 * registered while it is missing), then a new kubelet.sock: a fresh server
 * and one registration. */
static void test_kubelet_restart_registers_again(void **state_)
{
        struct fx *f = *state_;
        start_registered(f);
        unsigned events = state(f).dir_events;
        kubelet_stop(&f->k);
        WAIT_FOR(f, state(f).streams == 0 && state(f).dir_events > events);
        struct kdev_dp_state s = state(f);
        assert_int_equal(s.attempts, 1);
        assert_false(s.flush_pending);
        assert_int_equal(f->hook_restarts, 0);
        kubelet_start(&f->k);
        WAIT_FOR(f, state(f).registrations == 2 && f->k.lw_messages == 2 && state(f).streams == 1);
        s = state(f);
        assert_int_equal(s.state, KDEV_DP_REGISTERED);
        assert_int_equal(s.attempts, 2);
        assert_int_equal(s.failures, 0);
        assert_int_equal(s.generations, 2);
        assert_int_equal(f->k.registers, 2);
        assert_int_equal(f->hook_restarts, 1);
        assert_true(is_socket(f->sock));
}

/* A kubelet socket of another name in the directory (NVIDIA's
 * --kubelet-socket takes any path): registered with, and registered with
 * again when it is created anew. One outside the directory is refused. */
static void test_custom_kubelet_socket_name(void **state_)
{
        struct fx *f = *state_;
        snprintf(f->k.path, sizeof(f->k.path), "%s/custom-kubelet.sock", f->dir);
        f->opts.kubelet_socket = f->k.path;
        start_registered(f);
        assert_int_equal(f->k.registers, 1);
        kubelet_stop(&f->k);
        WAIT_FOR(f, state(f).streams == 0);
        kubelet_start(&f->k);
        WAIT_FOR(f, state(f).registrations == 2 && state(f).streams == 1);
        assert_int_equal(f->k.registers, 2);
        assert_int_equal(f->hook_restarts, 1);

        struct kdev_err err = {0};
        struct kdev_dp_options o = {.plugin_dir = "/run/a", .kubelet_socket = "/run/b/k.sock"};
        assert_null(kdev_dp_runtime_new(&f->loop, &o, &err));
        assert_int_equal(err.code, EINVAL);
        assert_string_equal(err.msg, "kubelet socket /run/b/k.sock is not in the device plugin "
                                     "directory /run/a");
        o = (struct kdev_dp_options){.plugin_dir = "/run/a/", .kubelet_socket = "/run/a"};
        assert_null(kdev_dp_runtime_new(&f->loop, &o, &err));
        assert_string_equal(err.msg, "kubelet socket /run/a is not in the device plugin "
                                     "directory /run/a");
}

/* kubelet.sock replaced at once by a new socket file (rename over it, so
 * it never goes missing): a new inode, so a fresh server and one
 * registration with the new kubelet. */
static void test_replaced_kubelet_socket_registers_again(void **state_)
{
        struct fx *f = *state_;
        start_registered(f);
        struct kdev_rpc_server *old = f->k.srv;
        f->k.srv = NULL;
        char tmp[160];
        snprintf(tmp, sizeof(tmp), "%s/kubelet.sock.new", f->dir);
        kubelet_listen(&f->k, tmp);
        struct stat before, after;
        assert_int_equal(stat(f->k.path, &before), 0);
        assert_int_equal(rename(tmp, f->k.path), 0);
        assert_int_equal(stat(f->k.path, &after), 0);
        assert_true(before.st_ino != after.st_ino);
        WAIT_FOR(f, state(f).registrations == 2 && f->k.lw_messages == 2 && state(f).streams == 1 &&
                            !state(f).flush_pending);
        kdev_rpc_server_close(old, NULL, NULL);
        struct kdev_dp_state s = state(f);
        assert_int_equal(s.state, KDEV_DP_REGISTERED);
        assert_int_equal(s.attempts, 2);
        assert_int_equal(s.failures, 0);
        assert_int_equal(s.generations, 2);
        assert_int_equal(f->k.registers, 2);
        assert_int_equal(f->hook_restarts, 1);
}

/* Touching kubelet.sock (same file, new times) is not a restart. */
static void test_touching_kubelet_socket_is_not_a_restart(void **state_)
{
        struct fx *f = *state_;
        start_registered(f);
        unsigned events = state(f).dir_events;
        assert_int_equal(utimensat(AT_FDCWD, f->k.path, NULL, 0), 0);
        WAIT_FOR(f, state(f).dir_events > events);
        assert_false(state(f).flush_pending);
        events = state(f).dir_events;
        assert_int_equal(chmod(f->k.path, 0644), 0);
        WAIT_FOR(f, state(f).dir_events > events);
        struct kdev_dp_state s = state(f);
        assert_false(s.flush_pending);
        assert_int_equal(s.state, KDEV_DP_REGISTERED);
        assert_int_equal(s.attempts, 1);
        assert_int_equal(s.generations, 1);
        assert_int_equal(f->hook_restarts, 0);
        assert_int_equal(f->k.registers, 1);
}

/* Another holder of the lock: the runtime polls it, serving and registering
 * nothing; once the lock is free it serves and registers. */
static void test_lock_held_by_another_waits(void **state_)
{
        struct fx *f = *state_;
        int fd = open(f->lock, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
        assert_true(fd >= 0);
        assert_int_equal(flock(fd, LOCK_EX | LOCK_NB), 0);
        kubelet_start(&f->k);
        start_runtime(f);
        WAIT_FOR(f, state(f).lock_waits >= 3);
        struct kdev_dp_state s = state(f);
        assert_int_equal(s.state, KDEV_DP_WAIT_LOCK);
        assert_false(s.lock_held);
        assert_int_equal(s.attempts, 0);
        assert_int_equal(s.generations, 0);
        assert_false(exists(f->sock));
        assert_int_equal(f->k.registers, 0);
        assert_int_equal(f->n_retries, 0);
        /* a kubelet restart while waiting changes nothing */
        kdev_dp_runtime_restart(f->rt);
        WAIT_FOR(f, !state(f).flush_pending);
        assert_int_equal(state(f).generations, 0);
        close(fd);
        WAIT_FOR(f, state(f).registrations == 1 && f->k.lw_messages == 1);
        s = state(f);
        assert_true(s.lock_held);
        assert_int_equal(s.attempts, 1);
        assert_int_equal(s.generations, 1);
        assert_int_equal(f->k.registers, 1);
}

/* A second runtime for the same resource in the same directory, started
 * and waiting for the first one's lock (polled at least twice). */
static struct kdev_dp_runtime *start_waiting_second(struct fx *f)
{
        struct kdev_err err = {0};
        struct kdev_dp_runtime *second = kdev_dp_runtime_new(&f->loop, &f->opts, &err);
        assert_non_null(second);
        assert_int_equal(kdev_dp_runtime_add_resource(second, &f->res, &err), 0);
        assert_int_equal(kdev_dp_runtime_start(second, &err), 0);
        struct kdev_dp_state s2;
        WAIT_FOR(f, kdev_dp_runtime_state(second, RES, &s2) == 0 && s2.lock_waits >= 2);
        return second;
}

/* Two instances in one process: the second waits for the first's lock and
 * takes over when the first stops (which removes its lock file). */
static void test_second_instance_takes_over(void **state_)
{
        struct fx *f = *state_;
        start_registered(f);
        struct kdev_dp_runtime *second = start_waiting_second(f);
        struct kdev_dp_state s2;
        assert_int_equal(kdev_dp_runtime_state(second, RES, &s2), 0);
        assert_int_equal(s2.state, KDEV_DP_WAIT_LOCK);
        assert_int_equal(s2.generations, 0);
        stop_runtime(f);
        f->rt = second;
        WAIT_FOR(f, state(f).registrations == 1 && f->k.lw_messages == 2);
        s2 = state(f);
        assert_true(s2.lock_held);
        assert_int_equal(s2.generations, 1);
        assert_int_equal(s2.attempts, 1);
        assert_int_equal(f->k.registers, 2);
        assert_true(is_socket(f->sock));
        assert_true(exists(f->lock));
}

/* The resource socket removed by someone: served again on a new socket file
 * and registered again. */
static void test_removed_socket_is_recreated(void **state_)
{
        struct fx *f = *state_;
        start_registered(f);
        assert_int_equal(unlink(f->sock), 0);
        WAIT_FOR(f, state(f).registrations == 2 && f->k.lw_messages == 2 && state(f).streams == 1);
        struct kdev_dp_state s = state(f);
        assert_int_equal(s.generations, 2);
        assert_int_equal(s.attempts, 2);
        assert_int_equal(s.failures, 0);
        assert_int_equal(f->k.registers, 2);
        assert_int_equal(f->hook_restarts, 0);
        assert_true(is_socket(f->sock));
        stop_runtime(f);
        assert_false(exists(f->sock));
        assert_false(exists(f->lock));
}

/* A burst of restarts (SIGHUP) is one fresh server and one registration. */
static void test_restart_burst_is_one_registration(void **state_)
{
        struct fx *f = *state_;
        start_registered(f);
        for (int i = 0; i < 5; i++)
                kdev_dp_runtime_restart(f->rt);
        assert_true(state(f).flush_pending);
        WAIT_FOR(f, state(f).registrations == 2 && f->k.lw_messages == 2 && !state(f).flush_pending);
        struct kdev_dp_state s = state(f);
        assert_int_equal(s.generations, 2);
        assert_int_equal(s.attempts, 2);
        assert_int_equal(f->k.registers, 2);
}

/* Removes every file in the directory, then the directory (rm -rf). */
static void rm_rf(const char *dir)
{
        DIR *d = opendir(dir);
        assert_non_null(d);
        struct dirent *e;
        while ((e = readdir(d))) {
                if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
                        continue;
                assert_int_equal(unlinkat(dirfd(d), e->d_name, 0), 0);
        }
        closedir(d);
        assert_int_equal(rmdir(dir), 0);
}

/* Kubelet starting as kubelet does: every socket in the directory removed
 * (pkg/kubelet/cm/devicemanager removeContents), then kubelet.sock served. */
static void kubelet_start_cleaning(struct fx *f)
{
        unlink(f->sock);
        unlink(f->k.path);
        kubelet_start(&f->k);
}

/* True when |path| is locked by someone (a LOCK_NB attempt fails). */
static bool locked_by_other(const char *path)
{
        int fd = open(path, O_RDWR | O_CLOEXEC);
        if (fd < 0)
                return false;
        bool held = flock(fd, LOCK_EX | LOCK_NB) != 0;
        close(fd);
        return held;
}

/* Runs the loop for |ms| milliseconds. */
static void run_for(struct fx *f, uint64_t ms)
{
        uv_update_time(&f->loop);
        uint64_t end = uv_now(&f->loop) + ms;
        WAIT_FOR(f, uv_now(&f->loop) >= end);
}

/* The reported case: kubelet stops, the directory is removed and created
 * again (rm -rf; mkdir), the runtime serves in the new directory (socket,
 * lock file locked), then a kubelet that removes the sockets it finds
 * starts: exactly one more registration, on a server in the new directory. */
static void test_directory_recreated_then_kubelet_returns(void **state_)
{
        struct fx *f = *state_;
        start_registered(f);
        kubelet_stop(&f->k);
        WAIT_FOR(f, state(f).streams == 0);
        rm_rf(f->dir);
        WAIT_FOR(f, state(f).state == KDEV_DP_WAIT_DIR);
        struct kdev_dp_state s = state(f);
        assert_int_equal(s.dir_losses, 1);
        assert_false(s.lock_held);
        assert_int_equal(s.generations, 1);
        assert_false(s.polling);
        assert_int_equal(mkdir(f->dir, 0750), 0);
        WAIT_FOR(f, is_socket(f->sock) && state(f).lock_held);
        assert_true(exists(f->lock));
        assert_true(locked_by_other(f->lock));
        assert_int_equal(state(f).generations, 2);
        assert_int_equal(f->k.registers, 1);
        kubelet_start_cleaning(f);
        WAIT_FOR(f, state(f).registrations == 2 && f->k.lw_messages == 2 && state(f).streams == 1);
        run_for(f, 3 * KDEV_DP_COALESCE_MS);
        s = state(f);
        assert_int_equal(s.state, KDEV_DP_REGISTERED);
        assert_int_equal(s.registrations, 2);
        assert_int_equal(f->k.registers, 2);
        assert_int_equal(s.dir_losses, 1);
        assert_true(is_socket(f->sock));
        assert_true(locked_by_other(f->lock));
        assert_false(s.flush_pending);
}

/* The directory removed and created again while kubelet runs on: kubelet
 * comes back (a new kubelet.sock) before the runtime saw the new directory,
 * or after: one registration in the new directory each time. */
static void test_directory_recreated_with_kubelet_back_first(void **state_)
{
        struct fx *f = *state_;
        start_registered(f);
        kubelet_stop(&f->k);
        rm_rf(f->dir);
        assert_int_equal(mkdir(f->dir, 0750), 0);
        kubelet_start(&f->k); /* before the runtime ran at all */
        WAIT_FOR(f, state(f).registrations == 2 && f->k.lw_messages == 2 && state(f).streams == 1);
        run_for(f, 3 * KDEV_DP_COALESCE_MS);
        struct kdev_dp_state s = state(f);
        assert_int_equal(s.state, KDEV_DP_REGISTERED);
        assert_int_equal(f->k.registers, 2);
        assert_int_equal(s.dir_losses, 1);
        assert_true(is_socket(f->sock));
        assert_true(locked_by_other(f->lock));
        /* again, the directory replaced by a rename (mv new DIR) */
        char other[sizeof(f->dir) + 8];
        snprintf(other, sizeof(other), "%s.new", f->dir);
        assert_int_equal(mkdir(other, 0750), 0);
        kubelet_stop(&f->k);
        rm_rf(f->dir);
        assert_int_equal(rename(other, f->dir), 0);
        kubelet_start(&f->k);
        WAIT_FOR(f, state(f).registrations == 3 && f->k.lw_messages == 3 && state(f).streams == 1);
        run_for(f, 3 * KDEV_DP_COALESCE_MS);
        assert_int_equal(f->k.registers, 3);
        assert_int_equal(state(f).dir_losses, 2);
        assert_true(locked_by_other(f->lock));
}

/* Two instances: the first serves, the second waits for the lock. The
 * directory removed and created again: the first takes the lock in the new
 * directory and serves, the second still waits; the lock file alone
 * removed: the first locks it again at once, the second still waits. */
static void test_directory_recreated_keeps_one_instance(void **state_)
{
        struct fx *f = *state_;
        f->opts.lock_poll_ms = 20;
        start_registered(f);
        struct kdev_dp_runtime *second = start_waiting_second(f);
        struct kdev_dp_state s2;
        assert_int_equal(kdev_dp_runtime_state(second, RES, &s2), 0);
        kubelet_stop(&f->k);
        rm_rf(f->dir);
        WAIT_FOR(f, state(f).state == KDEV_DP_WAIT_DIR &&
                            kdev_dp_runtime_state(second, RES, &s2) == 0 &&
                            s2.state == KDEV_DP_WAIT_DIR);
        assert_int_equal(mkdir(f->dir, 0750), 0);
        kubelet_start(&f->k);
        WAIT_FOR(f, state(f).registrations == 2 && state(f).streams == 1);
        run_for(f, 100);
        assert_int_equal(kdev_dp_runtime_state(second, RES, &s2), 0);
        assert_int_equal(s2.state, KDEV_DP_WAIT_LOCK);
        assert_false(s2.lock_held);
        assert_int_equal(s2.generations, 0);
        assert_int_equal(s2.attempts, 0);
        assert_true(state(f).lock_held);
        assert_int_equal(f->k.registers, 2);

        /* the lock file removed by hand */
        unsigned waits = s2.lock_waits;
        assert_int_equal(unlink(f->lock), 0);
        WAIT_FOR(f, exists(f->lock) && locked_by_other(f->lock));
        WAIT_FOR(f, kdev_dp_runtime_state(second, RES, &s2) == 0 && s2.lock_waits >= waits + 3);
        assert_int_equal(s2.state, KDEV_DP_WAIT_LOCK);
        assert_int_equal(s2.generations, 0);
        struct kdev_dp_state s = state(f);
        assert_true(s.lock_held);
        assert_int_equal(s.state, KDEV_DP_REGISTERED);
        assert_int_equal(f->k.registers, 2);

        /* the first stops: the second takes over in the new directory */
        stop_runtime(f);
        f->rt = second;
        WAIT_FOR(f, state(f).registrations == 1 && state(f).streams == 1);
        assert_int_equal(f->k.registers, 3);
}

/* A lock file replaced by one another process holds: the runtime stops
 * serving (its socket removed) and waits for the lock. */
static void test_lock_taken_by_another_stops_serving(void **state_)
{
        struct fx *f = *state_;
        start_registered(f);
        assert_int_equal(unlink(f->lock), 0);
        int fd = open(f->lock, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
        assert_true(fd >= 0);
        assert_int_equal(flock(fd, LOCK_EX | LOCK_NB), 0);
        WAIT_FOR(f, state(f).state == KDEV_DP_WAIT_LOCK);
        struct kdev_dp_state s = state(f);
        assert_false(s.lock_held);
        assert_false(exists(f->sock));
        WAIT_FOR(f, f->k.lw == NULL); /* the stream ended with the server */
        close(fd);
        WAIT_FOR(f, state(f).registrations == 2 && state(f).streams == 1);
        assert_true(state(f).lock_held);
}

/* A kubelet restart as kubelet does it (sockets removed, then kubelet.sock
 * created) is exactly one Register, sent at once on kubelet.sock's event
 * (not after a debounce), five times over. */
static void test_kubelet_restart_is_one_register_at_once(void **state_)
{
        struct fx *f = *state_;
        start_registered(f);
        for (unsigned i = 2; i <= 6; i++) {
                kubelet_stop(&f->k);
                WAIT_FOR(f, state(f).streams == 0);
                kubelet_start_cleaning(f);
                WAIT_FOR(f, f->k.registers == i);
                /* the Register left in the flush right after the event: no
                 * coalescing window had to pass first */
                WAIT_FOR(f, state(f).registrations == i && state(f).streams == 1);
                run_for(f, 3 * KDEV_DP_COALESCE_MS);
                assert_int_equal(f->k.registers, i);
                assert_int_equal(state(f).registrations, i);
                assert_false(state(f).flush_pending);
        }
        assert_int_equal(state(f).failures, 0);
}

/* Restarts (SIGHUP) asked again right after a registration: coalesced into
 * one more Register at the end of the window, not one each. */
static void test_restarts_after_register_coalesce(void **state_)
{
        struct fx *f = *state_;
        start_registered(f);
        kdev_dp_runtime_restart(f->rt);
        WAIT_FOR(f, f->k.registers == 2);
        for (int i = 0; i < 3; i++) {
                kdev_dp_runtime_restart(f->rt);
                uv_run(&f->loop, UV_RUN_NOWAIT);
        }
        WAIT_FOR(f, f->k.registers == 3 && state(f).streams == 1 && !state(f).flush_pending);
        run_for(f, 3 * KDEV_DP_COALESCE_MS);
        assert_int_equal(f->k.registers, 3);
        assert_int_equal(state(f).generations, 3);
}

/* inotify unusable (ENOSPC at the watch limit, EMFILE at the instance
 * limit): start succeeds, the runtime polls every check_ms, and a kubelet
 * restart, a removed socket and a re-created directory are still followed. */
static void inotify_fails(struct fx *f, int e)
{
        g_inotify_errno = e;
        f->opts.check_ms = 20;
        start_registered(f);
        struct kdev_dp_state s = state(f);
        assert_true(s.polling);
        assert_int_equal(s.dir_events, 0);
        kubelet_stop(&f->k);
        WAIT_FOR(f, state(f).streams == 0);
        kubelet_start_cleaning(f);
        WAIT_FOR(f, state(f).registrations == 2 && state(f).streams == 1);
        assert_int_equal(unlink(f->sock), 0);
        WAIT_FOR(f, state(f).registrations == 3 && state(f).streams == 1);
        kubelet_stop(&f->k);
        rm_rf(f->dir);
        WAIT_FOR(f, state(f).state == KDEV_DP_WAIT_DIR);
        assert_int_equal(mkdir(f->dir, 0750), 0);
        WAIT_FOR(f, state(f).lock_held && is_socket(f->sock));
        kubelet_start_cleaning(f);
        WAIT_FOR(f, state(f).registrations == 4 && state(f).streams == 1);
        s = state(f);
        assert_true(s.polling);
        assert_int_equal(s.dir_events, 0);
        assert_int_equal(s.dir_losses, 1);
        assert_int_equal(f->k.registers, 4);
        /* inotify usable again: the next check watches with it */
        g_inotify_errno = 0;
        WAIT_FOR(f, !state(f).polling);
}

static void test_no_inotify_enospc_polls(void **state_)
{
        inotify_fails(*state_, ENOSPC);
}

static void test_no_inotify_emfile_polls(void **state_)
{
        inotify_fails(*state_, EMFILE);
}

int main(void)
{
        signal(SIGPIPE, SIG_IGN);
        kdev_log_setup(getenv("KDEV_TEST_LOG") ? KDEV_LOG_DEBUG : KDEV_LOG_ERROR, false);
        if (getenv("KDEV_TEST_FILTER"))
                cmocka_set_test_filter(getenv("KDEV_TEST_FILTER"));
        const struct CMUnitTest tests[] = {
                cmocka_unit_test_setup_teardown(test_defaults_and_unknown_resource, setup, teardown),
                cmocka_unit_test_setup_teardown(test_custom_kubelet_socket_name, setup, teardown),
                cmocka_unit_test_setup_teardown(test_registers_once_and_stop_removes_own_files,
                                                setup, teardown),
                cmocka_unit_test_setup_teardown(test_backoff_doubles_to_the_cap_without_kubelet,
                                                setup, teardown),
                cmocka_unit_test_setup_teardown(test_rejected_register_backs_off_then_registers,
                                                setup, teardown),
                cmocka_unit_test_setup_teardown(test_ok_without_message_is_retried, setup, teardown),
                cmocka_unit_test_setup_teardown(test_kubelet_appearing_registers_at_once, setup,
                                                teardown),
                cmocka_unit_test_setup_teardown(test_stream_end_registers_again, setup, teardown),
                cmocka_unit_test_setup_teardown(test_kubelet_restart_registers_again, setup,
                                                teardown),
                cmocka_unit_test_setup_teardown(test_replaced_kubelet_socket_registers_again, setup,
                                                teardown),
                cmocka_unit_test_setup_teardown(test_touching_kubelet_socket_is_not_a_restart, setup,
                                                teardown),
                cmocka_unit_test_setup_teardown(test_lock_held_by_another_waits, setup, teardown),
                cmocka_unit_test_setup_teardown(test_second_instance_takes_over, setup, teardown),
                cmocka_unit_test_setup_teardown(test_removed_socket_is_recreated, setup, teardown),
                cmocka_unit_test_setup_teardown(test_restart_burst_is_one_registration, setup,
                                                teardown),
                cmocka_unit_test_setup_teardown(test_directory_recreated_then_kubelet_returns,
                                                setup, teardown),
                cmocka_unit_test_setup_teardown(test_directory_recreated_with_kubelet_back_first,
                                                setup, teardown),
                cmocka_unit_test_setup_teardown(test_directory_recreated_keeps_one_instance, setup,
                                                teardown),
                cmocka_unit_test_setup_teardown(test_lock_taken_by_another_stops_serving, setup,
                                                teardown),
                cmocka_unit_test_setup_teardown(test_kubelet_restart_is_one_register_at_once, setup,
                                                teardown),
                cmocka_unit_test_setup_teardown(test_restarts_after_register_coalesce, setup,
                                                teardown),
                cmocka_unit_test_setup_teardown(test_no_inotify_enospc_polls, setup, teardown),
                cmocka_unit_test_setup_teardown(test_no_inotify_emfile_polls, setup, teardown),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
