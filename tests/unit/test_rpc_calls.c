/* rpc: our client against our server, in process, on a Unix socket in a
 * temporary directory, one libuv loop (plus one server thread for the
 * blocking kdev_rpc_unary_sync). */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <dirent.h>
#include <unistd.h>

#include <cmocka.h>

#include "deviceplugin/v1beta1/api.pb-c.h"
#include "rpc/rpc.h"
#include "tmptree.h"

/* UTF-8, a percent sign and a newline: all need percent-encoding */
#define FAIL_MSG "bad thing: 100% \xc3\xbc" "n\xc3\xaf" "code\n"

/* ---------------------------------------------------------------------- */
/* harness                                                                 */
/* ---------------------------------------------------------------------- */

struct env {
        uv_loop_t loop;
        uv_timer_t tick; /* keeps UV_RUN_ONCE from blocking for long */
        char dir[64];
        char sock[128];
        struct kdev_rpc_server *srv;
        bool srv_closed;
        /* server side */
        int handled;
        int cancels;
        struct kdev_rpc_call *held;
        uint64_t held_deadline;
        uint64_t held_now;
        int send_big_rv;
        int reply_rv;
};

struct result {
        bool done;
        int status;
        char message[512];
        int nmsg;
        uint8_t last[4096];
        size_t last_len;
        uint8_t first[4096];
        size_t first_len;
};

static void tick_cb(uv_timer_t *t)
{
        (void)t;
}

/* Runs the loop until *flag is true or |ms| pass. Returns *flag. */
static bool run_until(struct env *e, const volatile bool *flag, uint64_t ms)
{
        uint64_t end = uv_hrtime() + ms * 1000000u;
        while (!*flag && uv_hrtime() < end)
                uv_run(&e->loop, UV_RUN_ONCE);
        return *flag;
}

static bool run_until_int(struct env *e, const int *v, int want, uint64_t ms)
{
        uint64_t end = uv_hrtime() + ms * 1000000u;
        while (*v != want && uv_hrtime() < end)
                uv_run(&e->loop, UV_RUN_ONCE);
        return *v == want;
}

static bool run_until_calls(struct env *e, size_t want, uint64_t ms)
{
        uint64_t end = uv_hrtime() + ms * 1000000u;
        while (kdev_rpc_server_open_calls(e->srv) != want && uv_hrtime() < end)
                uv_run(&e->loop, UV_RUN_ONCE);
        return kdev_rpc_server_open_calls(e->srv) == want;
}

static void on_held_cancel(struct kdev_rpc_call *call, void *ud)
{
        struct env *e = ud;
        assert_ptr_equal(call, e->held);
        e->held = NULL;
        e->cancels++;
}

static void h_echo(struct kdev_rpc_call *call, const uint8_t *req, size_t len, void *ud)
{
        struct env *e = ud;
        e->handled++;
        assert_string_equal(kdev_rpc_call_method(call), "/t.S/Echo");
        e->reply_rv = kdev_rpc_call_reply(call, req, len);
}

static void h_fail(struct kdev_rpc_call *call, const uint8_t *req, size_t len, void *ud)
{
        (void)req;
        (void)len;
        struct env *e = ud;
        e->handled++;
        kdev_rpc_call_finish(call, KDEV_RPC_INVALID_ARGUMENT, FAIL_MSG);
}

/* Status OK with no message: a fake server breaking unary cardinality. */
static void h_none(struct kdev_rpc_call *call, const uint8_t *req, size_t len, void *ud)
{
        (void)req;
        (void)len;
        struct env *e = ud;
        e->handled++;
        kdev_rpc_call_finish(call, KDEV_RPC_OK, NULL);
}

/* Two messages, then OK. */
static void h_two(struct kdev_rpc_call *call, const uint8_t *req, size_t len, void *ud)
{
        struct env *e = ud;
        e->handled++;
        kdev_rpc_call_send(call, req, len);
        kdev_rpc_call_send(call, req, len);
        kdev_rpc_call_finish(call, KDEV_RPC_OK, NULL);
}

static void h_hold(struct kdev_rpc_call *call, const uint8_t *req, size_t len, void *ud)
{
        (void)req;
        (void)len;
        struct env *e = ud;
        e->handled++;
        e->held = call;
        e->held_deadline = kdev_rpc_call_deadline(call);
        e->held_now = uv_now(&e->loop);
        kdev_rpc_call_on_cancel(call, on_held_cancel, e);
}

static void h_stream(struct kdev_rpc_call *call, const uint8_t *req, size_t len, void *ud)
{
        (void)req;
        (void)len;
        struct env *e = ud;
        e->handled++;
        for (int i = 0; i < 5; i++) {
                char m[8];
                snprintf(m, sizeof(m), "m%d", i);
                assert_int_equal(kdev_rpc_call_send(call, (const uint8_t *)m, strlen(m)), 0);
        }
        kdev_rpc_call_finish(call, KDEV_RPC_OK, NULL);
}

/* Replies with a message of the size given as decimal text in the request. */
static void h_big(struct kdev_rpc_call *call, const uint8_t *req, size_t len, void *ud)
{
        struct env *e = ud;
        e->handled++;
        char num[16] = { 0 };
        memcpy(num, req, len < 15 ? len : 15);
        size_t n = (size_t)atol(num);
        uint8_t *buf = calloc(1, n ? n : 1);
        e->reply_rv = kdev_rpc_call_reply(call, buf, n);
        free(buf);
}

/* Streaming: a too-large send is refused (call continues), then "ok". */
static void h_stream_big(struct kdev_rpc_call *call, const uint8_t *req, size_t len, void *ud)
{
        (void)req;
        (void)len;
        struct env *e = ud;
        e->handled++;
        uint8_t *buf = calloc(1, 500);
        e->send_big_rv = kdev_rpc_call_send(call, buf, 500);
        free(buf);
        assert_int_equal(kdev_rpc_call_send(call, (const uint8_t *)"ok", 2), 0);
        kdev_rpc_call_finish(call, KDEV_RPC_OK, "");
}

static void h_options(struct kdev_rpc_call *call, const uint8_t *req, size_t len, void *ud)
{
        (void)req;
        (void)len;
        struct env *e = ud;
        e->handled++;
        V1beta1__DevicePluginOptions o = V1BETA1__DEVICE_PLUGIN_OPTIONS__INIT;
        o.pre_start_required = 1;
        o.get_preferred_allocation_available = 1;
        e->reply_rv = kdev_rpc_call_reply_pb(call, &o.base);
}

static void h_options_stream(struct kdev_rpc_call *call, const uint8_t *req, size_t len, void *ud)
{
        (void)req;
        (void)len;
        struct env *e = ud;
        e->handled++;
        V1beta1__DevicePluginOptions o = V1BETA1__DEVICE_PLUGIN_OPTIONS__INIT;
        o.get_preferred_allocation_available = 1;
        assert_int_equal(kdev_rpc_call_send_pb(call, &o.base), 0);
        kdev_rpc_call_finish(call, KDEV_RPC_OK, NULL);
}

/* Closes the whole server from inside a handler. */
static void h_quit(struct kdev_rpc_call *call, const uint8_t *req, size_t len, void *ud)
{
        (void)call;
        (void)req;
        (void)len;
        struct env *e = ud;
        e->handled++;
        e->srv_closed = false;
        kdev_rpc_server_close(e->srv, NULL, NULL);
        e->srv = NULL;
}

static void add_methods(struct env *e, struct kdev_rpc_server *srv)
{
        assert_int_equal(kdev_rpc_server_add_method(srv, "/t.S/Quit", false, h_quit, e), 0);
        assert_int_equal(kdev_rpc_server_add_method(srv, "/t.S/Echo", false, h_echo, e), 0);
        assert_int_equal(kdev_rpc_server_add_method(srv, "/t.S/Fail", false, h_fail, e), 0);
        assert_int_equal(kdev_rpc_server_add_method(srv, "/t.S/Hold", true, h_hold, e), 0);
        assert_int_equal(kdev_rpc_server_add_method(srv, "/t.S/Stream", true, h_stream, e), 0);
        assert_int_equal(kdev_rpc_server_add_method(srv, "/t.S/Big", false, h_big, e), 0);
        assert_int_equal(kdev_rpc_server_add_method(srv, "/t.S/StreamBig", true, h_stream_big, e),
                         0);
        assert_int_equal(kdev_rpc_server_add_method(srv, "/t.S/Options", false, h_options, e), 0);
        assert_int_equal(kdev_rpc_server_add_method(srv, "/t.S/None", false, h_none, e), 0);
        assert_int_equal(kdev_rpc_server_add_method(srv, "/t.S/Two", false, h_two, e), 0);
        assert_int_equal(
                kdev_rpc_server_add_method(srv, "/t.S/OptionsStream", true, h_options_stream, e),
                0);
}

static struct kdev_rpc_server *start_server(struct env *e,
                                            const struct kdev_rpc_server_options *opts)
{
        struct kdev_rpc_server *srv = kdev_rpc_server_new(&e->loop, opts);
        assert_non_null(srv);
        add_methods(e, srv);
        struct kdev_err err = { 0 };
        int rv = kdev_rpc_server_listen_unix(srv, e->sock, &err);
        if (rv != 0)
                fail_msg("listen: %d %s", rv, err.msg);
        return srv;
}

static int setup(void **state)
{
        signal(SIGPIPE, SIG_IGN);
        struct env *e = calloc(1, sizeof(*e));
        assert_non_null(e);
        assert_int_equal(uv_loop_init(&e->loop), 0);
        uv_timer_init(&e->loop, &e->tick);
        uv_timer_start(&e->tick, tick_cb, 5, 5);
        uv_unref((uv_handle_t *)&e->tick);
        strcpy(e->dir, "/tmp/kdev-rpc-XXXXXX");
        assert_non_null(mkdtemp(e->dir));
        snprintf(e->sock, sizeof(e->sock), "%s/s.sock", e->dir);
        *state = e;
        return 0;
}

static void srv_done(void *arg)
{
        struct env *e = arg;
        e->srv_closed = true;
}

static void close_server(struct env *e)
{
        if (!e->srv)
                return;
        e->srv_closed = false;
        kdev_rpc_server_close(e->srv, srv_done, e);
        e->srv = NULL;
        assert_true(run_until(e, &e->srv_closed, 5000));
}

static int teardown(void **state)
{
        struct env *e = *state;
        close_server(e);
        uv_close((uv_handle_t *)&e->tick, NULL);
        uv_run(&e->loop, UV_RUN_DEFAULT);
        int rv = uv_loop_close(&e->loop);
        tmptree_remove(e->dir);
        free(e);
        assert_int_equal(rv, 0); /* every handle was released */
        return 0;
}

static void on_msg(struct kdev_rpc_client_call *call, const uint8_t *msg, size_t len, void *ud)
{
        (void)call;
        struct result *r = ud;
        assert_true(len <= sizeof(r->last));
        if (r->nmsg == 0) {
                memcpy(r->first, msg, len);
                r->first_len = len;
        }
        memcpy(r->last, msg, len);
        r->last_len = len;
        r->nmsg++;
}

static void on_done(struct kdev_rpc_client_call *call, int status, const char *message, void *ud)
{
        (void)call;
        struct result *r = ud;
        assert_false(r->done); /* exactly once */
        assert_non_null(message);
        r->done = true;
        r->status = status;
        snprintf(r->message, sizeof(r->message), "%s", message);
}

static struct kdev_rpc_client_call *start_call(struct kdev_rpc_client *cl, const char *method,
                                               const char *req, uint64_t timeout_ms,
                                               struct result *r)
{
        struct kdev_err err = { 0 };
        struct kdev_rpc_client_call *c = kdev_rpc_client_call(
                cl, method, (const uint8_t *)req, req ? strlen(req) : 0, timeout_ms, on_msg,
                on_done, r, &err);
        if (!c)
                fail_msg("call %s: %s", method, err.msg);
        return c;
}

static void do_call(struct env *e, struct kdev_rpc_client *cl, const char *method, const char *req,
                    uint64_t timeout_ms, struct result *r)
{
        memset(r, 0, sizeof(*r));
        start_call(cl, method, req, timeout_ms, r);
        assert_true(run_until(e, &r->done, 10000));
}

static void close_client(struct env *e, struct kdev_rpc_client *cl)
{
        kdev_rpc_client_close(cl);
        /* the client is freed once its handles are closed: a few turns */
        for (int i = 0; i < 5; i++)
                uv_run(&e->loop, UV_RUN_NOWAIT);
}

/* ---------------------------------------------------------------------- */
/* tests                                                                   */
/* ---------------------------------------------------------------------- */

static void test_unary_echo(void **state)
{
        struct env *e = *state;
        e->srv = start_server(e, NULL);
        struct kdev_rpc_client *cl = kdev_rpc_client_new(&e->loop, e->sock, NULL);
        struct result r;
        do_call(e, cl, "/t.S/Echo", "hello, world", 0, &r);
        assert_int_equal(r.status, KDEV_RPC_OK);
        assert_string_equal(r.message, "");
        assert_int_equal(r.nmsg, 1);
        assert_int_equal(r.last_len, 12);
        assert_memory_equal(r.last, "hello, world", 12);
        assert_int_equal(e->reply_rv, 0);
        /* the same connection serves a second call; an empty message too */
        do_call(e, cl, "/t.S/Echo", "", 0, &r);
        assert_int_equal(r.status, KDEV_RPC_OK);
        assert_int_equal(r.nmsg, 1);
        assert_int_equal(r.last_len, 0);
        assert_int_equal(e->handled, 2);
        assert_true(run_until_calls(e, 0, 5000));
        close_client(e, cl);
}

static void test_large_messages_within_limit(void **state)
{
        struct env *e = *state;
        e->srv = start_server(e, NULL);
        struct kdev_rpc_client *cl = kdev_rpc_client_new(&e->loop, e->sock, NULL);
        /* exactly the 4 MiB default limit, both ways: request 4 MiB echo */
        size_t n = KDEV_RPC_DEFAULT_MAX_MESSAGE;
        uint8_t *big = malloc(n);
        for (size_t i = 0; i < n; i++)
                big[i] = (uint8_t)(i * 7);
        struct result r = { 0 };
        struct kdev_err err = { 0 };
        assert_non_null(kdev_rpc_client_call(cl, "/t.S/Echo", big, n, 0, NULL, on_done, &r, &err));
        assert_true(run_until(e, &r.done, 20000));
        assert_int_equal(r.status, KDEV_RPC_OK);
        /* one byte more is refused by the server */
        memset(&r, 0, sizeof(r));
        struct kdev_rpc_client_options copts = { .max_send_message = n + 1 };
        struct kdev_rpc_client *cl2 = kdev_rpc_client_new(&e->loop, e->sock, &copts);
        assert_non_null(kdev_rpc_client_call(cl2, "/t.S/Echo", big, n + 0, 0, NULL, on_done, &r,
                                             &err));
        assert_true(run_until(e, &r.done, 20000));
        assert_int_equal(r.status, KDEV_RPC_OK);
        free(big);
        big = calloc(1, n + 1);
        memset(&r, 0, sizeof(r));
        assert_non_null(kdev_rpc_client_call(cl2, "/t.S/Echo", big, n + 1, 0, NULL, on_done, &r,
                                             &err));
        assert_true(run_until(e, &r.done, 20000));
        assert_int_equal(r.status, KDEV_RPC_RESOURCE_EXHAUSTED);
        assert_string_equal(r.message, "received message larger than max (4194305 vs. 4194304)");
        free(big);
        assert_int_equal(e->handled, 2);
        assert_true(run_until_calls(e, 0, 5000));
        close_client(e, cl);
        close_client(e, cl2);
}

static void test_error_status_percent_encoded(void **state)
{
        struct env *e = *state;
        e->srv = start_server(e, NULL);
        struct kdev_rpc_client *cl = kdev_rpc_client_new(&e->loop, e->sock, NULL);
        struct result r;
        do_call(e, cl, "/t.S/Fail", "x", 0, &r);
        assert_int_equal(r.status, KDEV_RPC_INVALID_ARGUMENT);
        assert_string_equal(r.message, FAIL_MSG);
        assert_int_equal(r.nmsg, 0);
        close_client(e, cl);
}

static void test_unknown_method(void **state)
{
        struct env *e = *state;
        e->srv = start_server(e, NULL);
        struct kdev_rpc_client *cl = kdev_rpc_client_new(&e->loop, e->sock, NULL);
        struct result r;
        do_call(e, cl, "/t.S/Nope", "x", 0, &r);
        assert_int_equal(r.status, KDEV_RPC_UNIMPLEMENTED);
        assert_string_equal(r.message, "unknown method /t.S/Nope");
        assert_int_equal(e->handled, 0);
        assert_true(run_until_calls(e, 0, 5000));
        close_client(e, cl);
}

static void test_server_streaming(void **state)
{
        struct env *e = *state;
        e->srv = start_server(e, NULL);
        struct kdev_rpc_client *cl = kdev_rpc_client_new(&e->loop, e->sock, NULL);
        struct result r;
        do_call(e, cl, "/t.S/Stream", "", 0, &r);
        assert_int_equal(r.status, KDEV_RPC_OK);
        /* a reader that keeps up gets every message, in order */
        assert_int_equal(r.nmsg, 5);
        assert_int_equal(r.first_len, 2);
        assert_memory_equal(r.first, "m0", 2);
        assert_memory_equal(r.last, "m4", 2);
        close_client(e, cl);
}

static void test_protobuf_helpers(void **state)
{
        struct env *e = *state;
        e->srv = start_server(e, NULL);
        struct kdev_rpc_client *cl = kdev_rpc_client_new(&e->loop, e->sock, NULL);
        struct result r;
        do_call(e, cl, "/t.S/Options", "", 0, &r);
        assert_int_equal(r.status, KDEV_RPC_OK);
        assert_int_equal(r.last_len, 4);
        assert_memory_equal(r.last, "\x08\x01\x10\x01", 4);
        assert_int_equal(e->reply_rv, 0);
        do_call(e, cl, "/t.S/OptionsStream", "", 0, &r);
        assert_int_equal(r.status, KDEV_RPC_OK);
        assert_int_equal(r.nmsg, 1);
        assert_int_equal(r.last_len, 2);
        assert_memory_equal(r.last, "\x10\x01", 2);
        close_client(e, cl);
}

static void test_server_recv_limit(void **state)
{
        struct env *e = *state;
        struct kdev_rpc_server_options o = { .max_recv_message = 1024 };
        e->srv = start_server(e, &o);
        struct kdev_rpc_client *cl = kdev_rpc_client_new(&e->loop, e->sock, NULL);
        char *req = malloc(2001);
        memset(req, 'a', 2000);
        req[2000] = '\0';
        struct result r;
        do_call(e, cl, "/t.S/Echo", req, 0, &r);
        free(req);
        assert_int_equal(r.status, KDEV_RPC_RESOURCE_EXHAUSTED);
        assert_string_equal(r.message, "received message larger than max (2000 vs. 1024)");
        assert_int_equal(e->handled, 0);
        /* 1024 bytes exactly is fine */
        req = malloc(1025);
        memset(req, 'b', 1024);
        req[1024] = '\0';
        do_call(e, cl, "/t.S/Echo", req, 0, &r);
        free(req);
        assert_int_equal(r.status, KDEV_RPC_OK);
        assert_int_equal(r.last_len, 1024);
        assert_true(run_until_calls(e, 0, 5000));
        close_client(e, cl);
}

static void test_client_recv_limit(void **state)
{
        struct env *e = *state;
        e->srv = start_server(e, NULL);
        struct kdev_rpc_client_options o = { .max_recv_message = 100 };
        struct kdev_rpc_client *cl = kdev_rpc_client_new(&e->loop, e->sock, &o);
        struct result r;
        do_call(e, cl, "/t.S/Big", "500", 0, &r);
        assert_int_equal(r.status, KDEV_RPC_RESOURCE_EXHAUSTED);
        assert_string_equal(r.message, "received message larger than max (500 vs. 100)");
        assert_int_equal(r.nmsg, 0);
        do_call(e, cl, "/t.S/Big", "100", 0, &r);
        assert_int_equal(r.status, KDEV_RPC_OK);
        assert_int_equal(r.last_len, 100);
        assert_true(run_until_calls(e, 0, 5000));
        close_client(e, cl);
}

static void test_send_limits(void **state)
{
        struct env *e = *state;
        struct kdev_rpc_server_options so = { .max_send_message = 100 };
        e->srv = start_server(e, &so);
        struct kdev_rpc_client_options co = { .max_send_message = 10 };
        struct kdev_rpc_client *cl = kdev_rpc_client_new(&e->loop, e->sock, &co);
        /* client refuses to send 11 bytes; on_done runs later, not inside */
        struct result r = { 0 };
        start_call(cl, "/t.S/Echo", "0123456789A", 0, &r);
        assert_false(r.done);
        assert_true(run_until(e, &r.done, 5000));
        assert_int_equal(r.status, KDEV_RPC_RESOURCE_EXHAUSTED);
        assert_string_equal(r.message, "trying to send message larger than max (11 vs. 10)");
        assert_int_equal(e->handled, 0);
        /* server refuses to reply with 500 bytes */
        do_call(e, cl, "/t.S/Big", "500", 0, &r);
        assert_int_equal(r.status, KDEV_RPC_RESOURCE_EXHAUSTED);
        assert_string_equal(r.message, "trying to send message larger than max (500 vs. 100)");
        assert_int_equal(e->reply_rv, -EMSGSIZE);
        /* a streaming send over the limit is refused, the stream goes on */
        do_call(e, cl, "/t.S/StreamBig", "", 0, &r);
        assert_int_equal(e->send_big_rv, -EMSGSIZE);
        assert_int_equal(r.status, KDEV_RPC_OK);
        assert_int_equal(r.nmsg, 1);
        assert_memory_equal(r.last, "ok", 2);
        close_client(e, cl);
}

static void test_deadline_server_and_client(void **state)
{
        struct env *e = *state;
        e->srv = start_server(e, NULL);
        struct kdev_rpc_client *cl = kdev_rpc_client_new(&e->loop, e->sock, NULL);
        struct result r = { 0 };
        uint64_t t0 = uv_hrtime();
        start_call(cl, "/t.S/Hold", "", 300, &r);
        assert_true(run_until_int(e, &e->handled, 1, 5000));
        /* grpc-timeout reached the server: deadline = arrival + 300 ms */
        assert_true(e->held_deadline > e->held_now);
        assert_true(e->held_deadline - e->held_now <= 300);
        assert_true(e->held_deadline - e->held_now >= 100);
        assert_true(run_until(e, &r.done, 5000));
        uint64_t ms = (uv_hrtime() - t0) / 1000000u;
        assert_int_equal(r.status, KDEV_RPC_DEADLINE_EXCEEDED);
        assert_string_equal(r.message, "deadline exceeded");
        assert_true(ms >= 290);
        /* the server ended the call too and ran on_cancel */
        assert_true(run_until_int(e, &e->cancels, 1, 5000));
        assert_null(e->held);
        assert_true(run_until_calls(e, 0, 5000));
        close_client(e, cl);
}

/* A connection reuses its stopped deadline timers, its spare call struct
 * and a read buffer shared with other connections: calls with a
 * grpc-timeout one after the other still each get their own deadline, a
 * :path longer than the in-call copy is named in full, and two connections
 * whose reads take turns each get their own bytes back. */
static void test_reused_call_state(void **state)
{
        struct env *e = *state;
        e->srv = start_server(e, NULL);
        struct kdev_rpc_client *cl = kdev_rpc_client_new(&e->loop, e->sock, NULL);
        struct kdev_rpc_client *cl2 = kdev_rpc_client_new(&e->loop, e->sock, NULL);
        struct result r, r2;
        for (int i = 0; i < 6; i++) { /* more calls than the spare timers */
                do_call(e, cl, "/t.S/Echo", "tick", 5000, &r);
                assert_int_equal(r.status, KDEV_RPC_OK);
                assert_memory_equal(r.last, "tick", 4);
        }
        /* a reused timer fires at this call's deadline, not a former one's */
        uint64_t t0 = uv_hrtime();
        memset(&r, 0, sizeof(r));
        start_call(cl, "/t.S/Hold", "", 200, &r);
        assert_true(run_until(e, &r.done, 5000));
        uint64_t ms = (uv_hrtime() - t0) / 1000000u;
        assert_int_equal(r.status, KDEV_RPC_DEADLINE_EXCEEDED);
        assert_string_equal(r.message, "deadline exceeded");
        assert_true(ms >= 190);
        assert_true(run_until_int(e, &e->cancels, 1, 5000));
        /* and the timer it leaves behind serves the next call */
        do_call(e, cl, "/t.S/Echo", "tock", 5000, &r);
        assert_int_equal(r.status, KDEV_RPC_OK);
        assert_memory_equal(r.last, "tock", 4);
        /* a 100-byte :path (past the 64 bytes kept in the call) */
        char path[101];
        memset(path, 'p', sizeof(path) - 1);
        memcpy(path, "/t.S/", 5);
        path[100] = '\0';
        char want[128];
        snprintf(want, sizeof(want), "unknown method %s", path);
        do_call(e, cl, path, "x", 0, &r);
        assert_int_equal(r.status, KDEV_RPC_UNIMPLEMENTED);
        assert_string_equal(r.message, want);
        /* two connections in flight at once, each its own answer */
        for (int i = 0; i < 4; i++) {
                memset(&r, 0, sizeof(r));
                memset(&r2, 0, sizeof(r2));
                start_call(cl, "/t.S/Echo", "first connection", 5000, &r);
                start_call(cl2, "/t.S/Echo", "second", 5000, &r2);
                assert_true(run_until(e, &r.done, 5000));
                assert_true(run_until(e, &r2.done, 5000));
                assert_int_equal(r.status, KDEV_RPC_OK);
                assert_int_equal(r2.status, KDEV_RPC_OK);
                assert_int_equal(r.last_len, 16);
                assert_memory_equal(r.last, "first connection", 16);
                assert_int_equal(r2.last_len, 6);
                assert_memory_equal(r2.last, "second", 6);
        }
        assert_true(run_until_calls(e, 0, 5000));
        close_client(e, cl2);
        close_client(e, cl);
}

static void test_client_local_deadline(void **state)
{
        struct env *e = *state;
        /* a listener that never accepts: the client must time out alone */
        int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        struct sockaddr_un sa = { .sun_family = AF_UNIX };
        strcpy(sa.sun_path, e->sock);
        assert_int_equal(bind(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
        assert_int_equal(listen(fd, 8), 0);
        struct kdev_rpc_client *cl = kdev_rpc_client_new(&e->loop, e->sock, NULL);
        struct result r;
        uint64_t t0 = uv_hrtime();
        do_call(e, cl, "/t.S/Echo", "x", 150, &r);
        uint64_t ms = (uv_hrtime() - t0) / 1000000u;
        assert_int_equal(r.status, KDEV_RPC_DEADLINE_EXCEEDED);
        assert_string_equal(r.message, "deadline exceeded");
        assert_true(ms >= 140);
        close_client(e, cl);
        close(fd);
}

static void test_client_cancel(void **state)
{
        struct env *e = *state;
        e->srv = start_server(e, NULL);
        struct kdev_rpc_client *cl = kdev_rpc_client_new(&e->loop, e->sock, NULL);
        struct result r = { 0 };
        struct kdev_rpc_client_call *c = start_call(cl, "/t.S/Hold", "", 0, &r);
        assert_true(run_until_int(e, &e->handled, 1, 5000));
        assert_int_equal(kdev_rpc_server_open_calls(e->srv), 1);
        kdev_rpc_client_call_cancel(c);
        assert_true(r.done); /* synchronously */
        assert_int_equal(r.status, KDEV_RPC_CANCELLED);
        assert_string_equal(r.message, "cancelled");
        /* RST_STREAM reaches the server: on_cancel, call freed */
        assert_true(run_until_int(e, &e->cancels, 1, 5000));
        assert_true(run_until_calls(e, 0, 5000));
        /* cancelling before the connection is even up */
        memset(&r, 0, sizeof(r));
        struct kdev_rpc_client *cl2 = kdev_rpc_client_new(&e->loop, e->sock, NULL);
        c = start_call(cl2, "/t.S/Hold", "", 0, &r);
        kdev_rpc_client_call_cancel(c);
        assert_true(r.done);
        assert_int_equal(r.status, KDEV_RPC_CANCELLED);
        close_client(e, cl2);
        close_client(e, cl);
}

static void test_client_close_cancels(void **state)
{
        struct env *e = *state;
        e->srv = start_server(e, NULL);
        struct kdev_rpc_client *cl = kdev_rpc_client_new(&e->loop, e->sock, NULL);
        struct result r = { 0 };
        start_call(cl, "/t.S/Hold", "", 0, &r);
        assert_true(run_until_int(e, &e->handled, 1, 5000));
        kdev_rpc_client_close(cl);
        assert_true(r.done);
        assert_int_equal(r.status, KDEV_RPC_CANCELLED);
        assert_true(run_until_int(e, &e->cancels, 1, 5000));
        assert_true(run_until_calls(e, 0, 5000));
}

static void test_connect_failure(void **state)
{
        struct env *e = *state;
        struct kdev_rpc_client *cl = kdev_rpc_client_new(&e->loop, e->sock, NULL);
        struct result r;
        do_call(e, cl, "/t.S/Echo", "x", 0, &r);
        assert_int_equal(r.status, KDEV_RPC_UNAVAILABLE);
        char want[256];
        snprintf(want, sizeof(want), "connect unix:%s: No such file or directory", e->sock);
        assert_string_equal(r.message, want);
        close_client(e, cl);

        /* too long for sun_path */
        char lp[200];
        memset(lp, 'x', sizeof(lp) - 1);
        lp[sizeof(lp) - 1] = '\0';
        lp[0] = '/';
        cl = kdev_rpc_client_new(&e->loop, lp, NULL);
        do_call(e, cl, "/t.S/Echo", "x", 0, &r);
        assert_int_equal(r.status, KDEV_RPC_UNAVAILABLE);
        snprintf(want, sizeof(want), "connect unix:%s: File name too long", lp);
        assert_string_equal(r.message, want);
        close_client(e, cl);
}

static void test_listen_errors(void **state)
{
        struct env *e = *state;
        struct kdev_rpc_server *srv = kdev_rpc_server_new(&e->loop, NULL);
        struct kdev_err err = { 0 };
        /* 108 bytes incl. NUL is the limit: 107 chars fit, 108 do not */
        char p[200];
        int n = snprintf(p, sizeof(p), "%s/", e->dir);
        memset(p + n, 'a', 108 - (size_t)n);
        p[108] = '\0';
        assert_int_equal(strlen(p), 108);
        assert_int_equal(kdev_rpc_server_listen_unix(srv, p, &err), -ENAMETOOLONG);
        assert_int_equal(err.code, ENAMETOOLONG);
        assert_non_null(strstr(err.msg, "socket path is 108 bytes"));
        assert_non_null(strstr(err.msg, "at most 107 bytes"));
        assert_int_equal(access(p, F_OK), -1);
        p[107] = '\0';
        assert_int_equal(kdev_rpc_server_listen_unix(srv, p, &err), 0);
        assert_int_equal(access(p, F_OK), 0);
        e->srv = srv;
        close_server(e);
        /* the socket file survives close (the caller owns it) */
        assert_int_equal(access(p, F_OK), 0);
        unlink(p);

        /* an existing file is never removed */
        FILE *f = fopen(e->sock, "w");
        fputs("keep", f);
        fclose(f);
        srv = kdev_rpc_server_new(&e->loop, NULL);
        assert_int_equal(kdev_rpc_server_listen_unix(srv, e->sock, &err), -EADDRINUSE);
        char want[256];
        snprintf(want, sizeof(want), "listen unix:%s: bind: Address already in use", e->sock);
        assert_string_equal(err.msg, want);
        struct stat st;
        assert_int_equal(stat(e->sock, &st), 0);
        assert_true(S_ISREG(st.st_mode));
        assert_int_equal(st.st_size, 4);
        e->srv = srv;
        close_server(e);
        unlink(e->sock);
}

static void test_server_close_goaway(void **state)
{
        struct env *e = *state;
        e->srv = start_server(e, NULL);
        struct kdev_rpc_client *cl = kdev_rpc_client_new(&e->loop, e->sock, NULL);
        struct result r = { 0 };
        start_call(cl, "/t.S/Hold", "", 0, &r);
        assert_true(run_until_int(e, &e->handled, 1, 5000));
        e->srv_closed = false;
        kdev_rpc_server_close(e->srv, srv_done, e);
        e->srv = NULL;
        assert_int_equal(e->cancels, 1); /* on_cancel ran inside close */
        assert_true(run_until(e, &e->srv_closed, 5000));
        assert_true(run_until(e, &r.done, 5000));
        assert_int_equal(r.status, KDEV_RPC_UNAVAILABLE);
        char want[256];
        snprintf(want, sizeof(want), "connection to unix:%s closed by the peer", e->sock);
        assert_string_equal(r.message, want);
        /* socket file still there, nobody listening: refused */
        assert_int_equal(access(e->sock, F_OK), 0);
        do_call(e, cl, "/t.S/Echo", "x", 0, &r);
        assert_int_equal(r.status, KDEV_RPC_UNAVAILABLE);
        snprintf(want, sizeof(want), "connect unix:%s: Connection refused", e->sock);
        assert_string_equal(r.message, want);
        /* a new server on the same path: the client dials again */
        unlink(e->sock);
        e->srv = start_server(e, NULL);
        do_call(e, cl, "/t.S/Echo", "again", 0, &r);
        assert_int_equal(r.status, KDEV_RPC_OK);
        assert_memory_equal(r.last, "again", 5);
        close_client(e, cl);
}

static void test_redial_after_loss(void **state)
{
        struct env *e = *state;
        e->srv = start_server(e, NULL);
        struct kdev_rpc_client *cl = kdev_rpc_client_new(&e->loop, e->sock, NULL);
        struct result r;
        do_call(e, cl, "/t.S/Echo", "one", 0, &r);
        assert_int_equal(r.status, KDEV_RPC_OK);
        close_server(e);
        unlink(e->sock);
        e->srv = start_server(e, NULL);
        /* let the client notice the old connection's end */
        for (int i = 0; i < 10; i++)
                uv_run(&e->loop, UV_RUN_NOWAIT);
        do_call(e, cl, "/t.S/Echo", "two", 0, &r);
        assert_int_equal(r.status, KDEV_RPC_OK);
        assert_memory_equal(r.last, "two", 3);
        close_client(e, cl);
}

static void on_msg_cancel(struct kdev_rpc_client_call *call, const uint8_t *msg, size_t len,
                          void *ud)
{
        on_msg(call, msg, len, ud);
        kdev_rpc_client_call_cancel(call);
        kdev_rpc_client_call_cancel(call); /* twice: still one on_done */
}

static struct kdev_rpc_client *closing_client;

static void on_done_close(struct kdev_rpc_client_call *call, int status, const char *message,
                          void *ud)
{
        on_done(call, status, message, ud);
        kdev_rpc_client_close(closing_client);
}

static void test_reentrant_callbacks(void **state)
{
        struct env *e = *state;
        e->srv = start_server(e, NULL);
        struct kdev_rpc_client *cl = kdev_rpc_client_new(&e->loop, e->sock, NULL);
        struct kdev_err err = { 0 };
        /* cancel from inside on_message */
        struct result r = { 0 };
        assert_non_null(kdev_rpc_client_call(cl, "/t.S/Stream", NULL, 0, 0, on_msg_cancel, on_done,
                                             &r, &err));
        assert_true(run_until(e, &r.done, 5000));
        assert_int_equal(r.status, KDEV_RPC_CANCELLED);
        assert_int_equal(r.nmsg, 1);
        assert_memory_equal(r.last, "m0", 2);
        /* close the client from inside on_done, with another call open */
        struct result r2 = { 0 };
        memset(&r, 0, sizeof(r));
        closing_client = cl;
        assert_non_null(kdev_rpc_client_call(cl, "/t.S/Hold", NULL, 0, 0, NULL, on_done, &r2,
                                             &err));
        assert_non_null(kdev_rpc_client_call(cl, "/t.S/Echo", (const uint8_t *)"e", 1, 0, on_msg,
                                             on_done_close, &r, &err));
        assert_true(run_until(e, &r.done, 5000));
        assert_int_equal(r.status, KDEV_RPC_OK);
        assert_true(r2.done);
        assert_int_equal(r2.status, KDEV_RPC_CANCELLED);
        assert_true(run_until_calls(e, 0, 5000));
        /* the server closed from inside a handler */
        cl = kdev_rpc_client_new(&e->loop, e->sock, NULL);
        do_call(e, cl, "/t.S/Quit", "", 0, &r);
        assert_int_equal(r.status, KDEV_RPC_UNAVAILABLE);
        assert_null(e->srv);
        close_client(e, cl);
}

static int count_fds(void)
{
        DIR *d = opendir("/proc/self/fd");
        int n = 0;
        struct dirent *de;
        while ((de = readdir(d)))
                if (de->d_name[0] != '.')
                        n++;
        closedir(d);
        return n;
}

static void test_connect_disconnect_no_growth(void **state)
{
        struct env *e = *state;
        e->srv = start_server(e, NULL);
        /* warm up once so lazily allocated loop resources exist */
        struct kdev_rpc_client *cl = kdev_rpc_client_new(&e->loop, e->sock, NULL);
        struct result r;
        do_call(e, cl, "/t.S/Echo", "w", 0, &r);
        close_client(e, cl);
        assert_true(run_until_calls(e, 0, 5000));
        for (int i = 0; i < 20; i++)
                uv_run(&e->loop, UV_RUN_NOWAIT);
        int fd0 = count_fds();
        int cancels0 = e->cancels;
        for (int i = 0; i < 200; i++) {
                cl = kdev_rpc_client_new(&e->loop, e->sock, NULL);
                if (i % 2 == 0) {
                        do_call(e, cl, "/t.S/Echo", "x", 0, &r);
                        assert_int_equal(r.status, KDEV_RPC_OK);
                        close_client(e, cl);
                } else {
                        /* drop the connection under an open stream */
                        memset(&r, 0, sizeof(r));
                        int h = e->handled;
                        start_call(cl, "/t.S/Hold", "", 0, &r);
                        assert_true(run_until_int(e, &e->handled, h + 1, 5000));
                        close_client(e, cl);
                        assert_true(r.done);
                        assert_true(run_until_int(e, &e->cancels, cancels0 + i / 2 + 1, 5000));
                }
        }
        assert_true(run_until_calls(e, 0, 5000));
        assert_int_equal(e->cancels - cancels0, 100);
        uint64_t end = uv_hrtime() + 5000000000u;
        while (count_fds() != fd0 && uv_hrtime() < end)
                uv_run(&e->loop, UV_RUN_ONCE);
        assert_int_equal(count_fds(), fd0);
}

/* A unary call needs exactly one response message (grpc-go's client):
 * OK with none, or two, is INTERNAL; a streaming call takes either. */
static void test_unary_cardinality(void **state)
{
        struct env *e = *state;
        e->srv = start_server(e, NULL);
        struct kdev_rpc_client *cl = kdev_rpc_client_new(&e->loop, e->sock, NULL);
        struct kdev_err err = { 0 };
        struct result r;
        memset(&r, 0, sizeof(r));
        assert_non_null(kdev_rpc_client_unary(cl, "/t.S/None", (const uint8_t *)"x", 1, 0,
                                              on_msg, on_done, &r, &err));
        assert_true(run_until(e, &r.done, 10000));
        assert_int_equal(r.status, KDEV_RPC_INTERNAL);
        assert_string_equal(r.message, "unary call returned no message");
        assert_int_equal(r.nmsg, 0);
        memset(&r, 0, sizeof(r));
        assert_non_null(kdev_rpc_client_unary(cl, "/t.S/Two", (const uint8_t *)"x", 1, 0, on_msg,
                                              on_done, &r, &err));
        assert_true(run_until(e, &r.done, 10000));
        assert_int_equal(r.status, KDEV_RPC_INTERNAL);
        assert_string_equal(r.message, "unary call received more than one response message");
        assert_int_equal(r.nmsg, 1);
        memset(&r, 0, sizeof(r));
        assert_non_null(kdev_rpc_client_unary(cl, "/t.S/Echo", (const uint8_t *)"x", 1, 0,
                                              on_msg, on_done, &r, &err));
        assert_true(run_until(e, &r.done, 10000));
        assert_int_equal(r.status, KDEV_RPC_OK);
        assert_int_equal(r.nmsg, 1);
        /* the same servers' answers on a plain (streaming) call are fine */
        do_call(e, cl, "/t.S/None", "x", 0, &r);
        assert_int_equal(r.status, KDEV_RPC_OK);
        assert_int_equal(r.nmsg, 0);
        do_call(e, cl, "/t.S/Two", "x", 0, &r);
        assert_int_equal(r.status, KDEV_RPC_OK);
        assert_int_equal(r.nmsg, 2);
        assert_true(run_until_calls(e, 0, 5000));
        close_client(e, cl);
}

/* kdev_rpc_unary_sync runs its own loop: serve from a thread. */
struct sync_srv {
        struct env *e;
        uv_async_t stop;
        bool ready;
};

static void sync_stop_cb(uv_async_t *a)
{
        struct sync_srv *s = a->data;
        kdev_rpc_server_close(s->e->srv, NULL, NULL);
        s->e->srv = NULL;
        uv_close((uv_handle_t *)a, NULL);
}

static void *sync_thread(void *arg)
{
        struct sync_srv *s = arg;
        uv_run(&s->e->loop, UV_RUN_DEFAULT);
        return NULL;
}

static void test_unary_sync(void **state)
{
        struct env *e = *state;
        struct sync_srv s = { .e = e };
        e->srv = start_server(e, NULL);
        uv_async_init(&e->loop, &s.stop, sync_stop_cb);
        s.stop.data = &s;
        pthread_t th;
        assert_int_equal(pthread_create(&th, NULL, sync_thread, &s), 0);

        uint8_t *resp = NULL;
        size_t len = 0;
        struct kdev_err err = { 0 };
        int rv = kdev_rpc_unary_sync(e->sock, "/t.S/Echo", (const uint8_t *)"ping", 4, 5000, &resp,
                                     &len, &err);
        assert_int_equal(rv, KDEV_RPC_OK);
        assert_int_equal(len, 4);
        assert_memory_equal(resp, "ping", 4);
        free(resp);
        rv = kdev_rpc_unary_sync(e->sock, "/t.S/Fail", (const uint8_t *)"x", 1, 5000, &resp, &len,
                                 &err);
        assert_int_equal(rv, KDEV_RPC_INVALID_ARGUMENT);
        assert_null(resp);
        assert_string_equal(err.msg, FAIL_MSG);
        rv = kdev_rpc_unary_sync(e->sock, "/t.S/Nope", NULL, 0, 5000, &resp, &len, &err);
        assert_int_equal(rv, KDEV_RPC_UNIMPLEMENTED);
        assert_string_equal(err.msg, "unknown method /t.S/Nope");
        rv = kdev_rpc_unary_sync(e->sock, "/t.S/None", NULL, 0, 5000, &resp, &len, &err);
        assert_int_equal(rv, KDEV_RPC_INTERNAL);
        assert_null(resp);
        assert_string_equal(err.msg, "unary call returned no message");
        rv = kdev_rpc_unary_sync(e->sock, "/t.S/Two", (const uint8_t *)"x", 1, 5000, &resp, &len,
                                 &err);
        assert_int_equal(rv, KDEV_RPC_INTERNAL);
        assert_null(resp);
        assert_string_equal(err.msg, "unary call received more than one response message");

        uv_async_send(&s.stop);
        pthread_join(th, NULL);

        char missing[160];
        snprintf(missing, sizeof(missing), "%s/none.sock", e->dir);
        rv = kdev_rpc_unary_sync(missing, "/t.S/Echo", NULL, 0, 5000, &resp, &len, &err);
        assert_int_equal(rv, KDEV_RPC_UNAVAILABLE);
        char want[256];
        snprintf(want, sizeof(want), "connect unix:%s: No such file or directory", missing);
        assert_string_equal(err.msg, want);
}

int main(void)
{
        const struct CMUnitTest tests[] = {
                cmocka_unit_test_setup_teardown(test_unary_echo, setup, teardown),
                cmocka_unit_test_setup_teardown(test_large_messages_within_limit, setup, teardown),
                cmocka_unit_test_setup_teardown(test_error_status_percent_encoded, setup,
                                                teardown),
                cmocka_unit_test_setup_teardown(test_unknown_method, setup, teardown),
                cmocka_unit_test_setup_teardown(test_server_streaming, setup, teardown),
                cmocka_unit_test_setup_teardown(test_protobuf_helpers, setup, teardown),
                cmocka_unit_test_setup_teardown(test_server_recv_limit, setup, teardown),
                cmocka_unit_test_setup_teardown(test_client_recv_limit, setup, teardown),
                cmocka_unit_test_setup_teardown(test_send_limits, setup, teardown),
                cmocka_unit_test_setup_teardown(test_deadline_server_and_client, setup, teardown),
                cmocka_unit_test_setup_teardown(test_reused_call_state, setup, teardown),
                cmocka_unit_test_setup_teardown(test_client_local_deadline, setup, teardown),
                cmocka_unit_test_setup_teardown(test_client_cancel, setup, teardown),
                cmocka_unit_test_setup_teardown(test_client_close_cancels, setup, teardown),
                cmocka_unit_test_setup_teardown(test_connect_failure, setup, teardown),
                cmocka_unit_test_setup_teardown(test_listen_errors, setup, teardown),
                cmocka_unit_test_setup_teardown(test_server_close_goaway, setup, teardown),
                cmocka_unit_test_setup_teardown(test_redial_after_loss, setup, teardown),
                cmocka_unit_test_setup_teardown(test_connect_disconnect_no_growth, setup,
                                                teardown),
                cmocka_unit_test_setup_teardown(test_unary_cardinality, setup, teardown),
                cmocka_unit_test_setup_teardown(test_unary_sync, setup, teardown),
                cmocka_unit_test_setup_teardown(test_reentrant_callbacks, setup, teardown),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
