/* Allocation failures in rpc: every allocation of the constructors and
 * registration (NULL or -ENOMEM as documented), of starting a client call
 * (NULL with -ENOMEM), of percent-encoding, and of a whole unary call between
 * our client and our server on a Unix socket (framing, header handling,
 * reply, response), failed one at a time and from there on: the documented
 * error, the call ends exactly once with a gRPC status, nothing leaks and
 * nothing hangs. */
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
#include <sys/socket.h>
#include <unistd.h>

#include <cmocka.h>

#include "oom_driver.h"
#include "rpc/rpc.h"
#include "rpc/rpc_internal.h"

#define METHOD "/kdev.test.Echo/Upper"

struct env {
        uv_loop_t loop;
        char dir[64];
        char sock[128];
};

static struct env *env_new(void)
{
        failalloc_off();
        struct env *e = calloc(1, sizeof(*e));
        assert_non_null(e);
        assert_int_equal(uv_loop_init(&e->loop), 0);
        snprintf(e->dir, sizeof(e->dir), "/tmp/kdev-rpc-oom.XXXXXX");
        assert_non_null(mkdtemp(e->dir));
        snprintf(e->sock, sizeof(e->sock), "%s/s.sock", e->dir);
        return e;
}

static void env_free(struct env *e)
{
        failalloc_off();
        uv_run(&e->loop, UV_RUN_DEFAULT);
        assert_int_equal(uv_loop_close(&e->loop), 0);
        unlink(e->sock);
        rmdir(e->dir);
        free(e);
}

static void srv_close(struct env *e, struct kdev_rpc_server *srv)
{
        failalloc_off();
        kdev_rpc_server_close(srv, NULL, NULL);
        uv_run(&e->loop, UV_RUN_DEFAULT);
}

static void cl_close(struct env *e, struct kdev_rpc_client *cl)
{
        failalloc_off();
        kdev_rpc_client_close(cl);
        uv_run(&e->loop, UV_RUN_DEFAULT);
}

static void upper(struct kdev_rpc_call *call, const uint8_t *req, size_t len, void *ud)
{
        int *reply_rv = ud;
        uint8_t out[64];
        assert_true(len <= sizeof(out));
        for (size_t i = 0; i < len; i++)
                out[i] = (uint8_t)(req[i] >= 'a' && req[i] <= 'z' ? req[i] - 32 : req[i]);
        *reply_rv = kdev_rpc_call_reply(call, out, len);
}

/* --- constructors and registration ------------------------------------- */

struct srv_ctx {
        struct env *e;
        struct kdev_rpc_server *srv;
};

static int srv_new_call(void *p, struct kdev_err *err)
{
        struct srv_ctx *c = p;
        c->srv = kdev_rpc_server_new(&c->e->loop, NULL);
        return c->srv ? 0 : kdev_err_set(err, ENOMEM, "kdev_rpc_server_new: NULL");
}

static void srv_new_ok(void *p)
{
        struct srv_ctx *c = p;
        assert_non_null(c->srv);
        assert_int_equal(kdev_rpc_server_open_calls(c->srv), 0);
        srv_close(c->e, c->srv);
        c->srv = NULL;
}

static void test_server_new(void **state)
{
        (void)state;
        struct srv_ctx c = { env_new(), NULL };
        struct oom_op op = { "kdev_rpc_server_new", srv_new_call, srv_new_ok, NULL, &c, 0 };
        oom_drive(&op, 1);
        env_free(c.e);
}

static int add_method_rv;

static int add_method_call(void *p, struct kdev_err *err)
{
        struct srv_ctx *c = p;
        int rv = kdev_rpc_server_add_method(c->srv, METHOD, false, upper, &add_method_rv);
        return rv < 0 ? kdev_err_set(err, -rv, "add_method") : 0;
}

static void add_method_ok(void *p)
{
        (void)p;
}

static void test_server_add_method(void **state)
{
        (void)state;
        struct srv_ctx c = { env_new(), NULL };
        c.srv = kdev_rpc_server_new(&c.e->loop, NULL);
        assert_non_null(c.srv);
        struct oom_op op = { "kdev_rpc_server_add_method", add_method_call, add_method_ok, NULL,
                             &c, 0 };
        oom_drive(&op, 3);
        srv_close(c.e, c.srv);
        env_free(c.e);
}

/* Listening and serving a connection: listen allocates nothing of ours
 * (libuv's and the kernel's only); adopting a connected socket allocates
 * the connection, and on failure returns -ENOMEM with the socket closed. */
struct adopt_ctx {
        struct env *e;
        struct kdev_rpc_server *srv;
        int fds[2];
};

static int adopt_call(void *p, struct kdev_err *err)
{
        struct adopt_ctx *c = p;
        assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, c->fds), 0);
        int rv = kdev_rpc__server_adopt_fd(c->srv, c->fds[0]);
        return rv < 0 ? kdev_err_set(err, -rv, "adopt_fd") : 0;
}

static void adopt_ok(void *p)
{
        struct adopt_ctx *c = p;
        assert_int_equal(kdev_rpc__server_connections(c->srv), 1);
        close(c->fds[1]); /* the peer leaves: the server drops the connection */
        while (kdev_rpc__server_connections(c->srv) > 0)
                uv_run(&c->e->loop, UV_RUN_ONCE);
}

static void adopt_failed(void *p)
{
        struct adopt_ctx *c = p;
        assert_int_equal(fcntl(c->fds[0], F_GETFD), -1); /* consumed: closed */
        assert_int_equal(errno, EBADF);
        close(c->fds[1]);
        uv_run(&c->e->loop, UV_RUN_NOWAIT);
        assert_int_equal(kdev_rpc__server_connections(c->srv), 0);
}

static void test_server_listen_adopt(void **state)
{
        (void)state;
        signal(SIGPIPE, SIG_IGN);
        struct adopt_ctx c = { env_new(), NULL, { -1, -1 } };
        c.srv = kdev_rpc_server_new(&c.e->loop, NULL);
        assert_non_null(c.srv);
        struct kdev_err err = { 0 };
        failalloc_fail_from(1);
        int rv = kdev_rpc_server_listen_unix(c.srv, c.e->sock, &err);
        unsigned long n = failalloc_count();
        failalloc_off();
        assert_int_equal(rv, 0);
        assert_int_equal(n, 0);
        struct oom_op op = { "kdev_rpc__server_adopt_fd", adopt_call, adopt_ok, adopt_failed, &c,
                             0 };
        oom_drive(&op, 1);
        srv_close(c.e, c.srv);
        env_free(c.e);
}

struct cl_ctx {
        struct env *e;
        struct kdev_rpc_client *cl;
};

static int cl_new_call(void *p, struct kdev_err *err)
{
        struct cl_ctx *c = p;
        c->cl = kdev_rpc_client_new(&c->e->loop, c->e->sock, NULL);
        return c->cl ? 0 : kdev_err_set(err, ENOMEM, "kdev_rpc_client_new: NULL");
}

static void cl_new_ok(void *p)
{
        struct cl_ctx *c = p;
        cl_close(c->e, c->cl);
        c->cl = NULL;
}

static void test_client_new(void **state)
{
        (void)state;
        struct cl_ctx c = { env_new(), NULL };
        struct oom_op op = { "kdev_rpc_client_new", cl_new_call, cl_new_ok, NULL, &c, 0 };
        oom_drive(&op, 2);
        env_free(c.e);
}

/* --- starting a client call ----------------------------------------------- */

struct done_rec {
        int ndone;
        int status;
        char message[256];
        int nmsg;
        char resp[64];
};

static void rec_msg(struct kdev_rpc_client_call *call, const uint8_t *msg, size_t len, void *ud)
{
        (void)call;
        struct done_rec *r = ud;
        r->nmsg++;
        snprintf(r->resp, sizeof(r->resp), "%.*s", (int)len, (const char *)msg);
}

static void rec_done(struct kdev_rpc_client_call *call, int status, const char *message, void *ud)
{
        (void)call;
        struct done_rec *r = ud;
        r->ndone++;
        r->status = status;
        assert_non_null(message);
        snprintf(r->message, sizeof(r->message), "%s", message);
}

struct call_ctx {
        struct env *e;
        struct kdev_rpc_client *cl;
        struct kdev_rpc_client_call *call;
        uint64_t timeout_ms;
        struct done_rec rec;
};

static int call_call(void *p, struct kdev_err *err)
{
        struct call_ctx *c = p;
        memset(&c->rec, 0, sizeof(c->rec));
        c->call = kdev_rpc_client_unary(c->cl, METHOD, (const uint8_t *)"abc", 3, c->timeout_ms,
                                        rec_msg, rec_done, &c->rec, err);
        return c->call ? 0 : (err->code ? -err->code : -EIO);
}

/* A fresh client for the next run (a client keeps its connection). */
static void call_reset(struct call_ctx *c)
{
        cl_close(c->e, c->cl);
        c->cl = kdev_rpc_client_new(&c->e->loop, c->e->sock, NULL);
        assert_non_null(c->cl);
}

/* No server listens: the call ends UNAVAILABLE, once. */
static void call_ok(void *p)
{
        struct call_ctx *c = p;
        while (c->rec.ndone == 0)
                uv_run(&c->e->loop, UV_RUN_ONCE);
        assert_int_equal(c->rec.ndone, 1);
        assert_int_equal(c->rec.status, KDEV_RPC_UNAVAILABLE);
        call_reset(c);
}

static void call_failed(void *p)
{
        struct call_ctx *c = p;
        uv_run(&c->e->loop, UV_RUN_NOWAIT);
        assert_int_equal(c->rec.ndone, 0); /* no callback after a NULL return */
        call_reset(c);
}

static void test_client_call(void **state)
{
        (void)state;
        for (int with_timeout = 0; with_timeout <= 1; with_timeout++) {
                struct call_ctx c = { .e = env_new(), .timeout_ms = with_timeout ? 5000 : 0 };
                c.cl = kdev_rpc_client_new(&c.e->loop, c.e->sock, NULL);
                assert_non_null(c.cl);
                struct oom_op op = { with_timeout ? "kdev_rpc_client_unary with deadline"
                                                  : "kdev_rpc_client_unary",
                                     call_call, call_ok, call_failed, &c, 0 };
                oom_drive(&op, with_timeout ? 5 : 4);
                cl_close(c.e, c.cl);
                env_free(c.e);
        }
}

/* kdev_rpc_unary_sync to a socket nobody listens on: UNAVAILABLE when all
 * allocations succeed, -ENOMEM (never another errno) when one fails, also
 * without an error record. */
struct sync_ctx {
        char path[128];
        bool with_err;
};

static int sync_call(void *p, struct kdev_err *err)
{
        struct sync_ctx *c = p;
        uint8_t *resp = (uint8_t *)1;
        size_t len = 7;
        struct kdev_err own = { 0 };
        int rv = kdev_rpc_unary_sync(c->path, METHOD, (const uint8_t *)"abc", 3, 1000, &resp,
                                     &len, c->with_err ? &own : NULL);
        if (rv == KDEV_RPC_UNAVAILABLE) {
                assert_null(resp);
                assert_int_equal(len, 0);
                return 0;
        }
        assert_true(rv < 0);
        if (c->with_err)
                assert_int_equal(own.code, -rv);
        return kdev_err_set(err, -rv, "kdev_rpc_unary_sync: %d %s", rv, own.msg);
}

static void sync_ok(void *p)
{
        (void)p;
}

static void test_unary_sync(void **state)
{
        (void)state;
        struct env *e = env_new();
        for (int with_err = 1; with_err >= 0; with_err--) {
                struct sync_ctx c = { .with_err = with_err };
                snprintf(c.path, sizeof(c.path), "%s", e->sock);
                struct oom_op op = { with_err ? "kdev_rpc_unary_sync"
                                              : "kdev_rpc_unary_sync without error record",
                                     sync_call, sync_ok, NULL, &c, 0 };
                oom_drive(&op, 2 + 4 + 1);
        }
        env_free(e);
}

/* --- codec ---------------------------------------------------------------- */

struct enc_ctx {
        char *out;
};

static int enc_call(void *p, struct kdev_err *err)
{
        struct enc_ctx *c = p;
        c->out = kdev_rpc_percent_encode("100% \xc3\xbc\n");
        return c->out ? 0 : kdev_err_set(err, ENOMEM, "percent_encode: NULL");
}

static void enc_ok(void *p)
{
        struct enc_ctx *c = p;
        assert_string_equal(c->out, "100%25 %C3%BC%0A");
        free(c->out);
}

static int dec_call(void *p, struct kdev_err *err)
{
        struct enc_ctx *c = p;
        static const char in[] = "100%25 %C3%BC%0A%zz";
        c->out = kdev_rpc_percent_decode(in, sizeof(in) - 1);
        return c->out ? 0 : kdev_err_set(err, ENOMEM, "percent_decode: NULL");
}

static void dec_ok(void *p)
{
        struct enc_ctx *c = p;
        assert_string_equal(c->out, "100% \xc3\xbc\n%zz");
        free(c->out);
}

static void test_codec(void **state)
{
        (void)state;
        struct enc_ctx c = { NULL };
        struct oom_op enc = { "kdev_rpc_percent_encode", enc_call, enc_ok, NULL, &c, 0 };
        struct oom_op dec = { "kdev_rpc_percent_decode", dec_call, dec_ok, NULL, &c, 0 };
        assert_int_equal(oom_drive(&enc, 1), 1);
        assert_int_equal(oom_drive(&dec, 1), 1);

        /* framing helpers allocate nothing */
        failalloc_fail_from(1);
        uint8_t pre[KDEV_RPC_PREFIX_LEN], in[KDEV_RPC_PREFIX_LEN + 1] = { 0 };
        kdev_rpc__put_prefix(pre, 0x01020304u);
        memcpy(in, pre, sizeof(pre));
        const uint8_t *d = in;
        size_t n = sizeof(in), got = 0;
        uint8_t flags = 9;
        uint32_t len = 0;
        bool whole = kdev_rpc__prefix_take(pre, &got, &d, &n, &flags, &len);
        uint64_t ms = 0;
        int trv = kdev_rpc__timeout_parse("1500u", 5, &ms);
        char tbuf[16];
        size_t tlen = kdev_rpc__timeout_format(1500, tbuf, sizeof(tbuf));
        unsigned long count = failalloc_count();
        failalloc_off();
        assert_int_equal(count, 0);
        assert_true(whole);
        assert_int_equal(flags, 0);
        assert_int_equal(len, 0x01020304u);
        assert_int_equal(n, 1);
        assert_int_equal(trv, 0);
        assert_int_equal(ms, 2);
        assert_int_equal(tlen, 5);
        assert_string_equal(tbuf, "1500m");
}

/* --- a whole unary call ---------------------------------------------------- */

/* Runs one unary call from a fresh client to a fresh server with
 * allocation |n| failing (and later ones too when |sticky|; n = 0: none)
 * from the call's start until it ends; returns the number of allocations.
 * Asserts: the start fails only with -ENOMEM (then no callback); otherwise
 * on_done runs exactly once, OK with the exact answer or a failure status
 * with a message; the handler's reply returns 0 or -ENOMEM; no leak. */
static unsigned long round_trip(unsigned long n, bool sticky, unsigned long *failures,
                                int *status)
{
        struct env *e = env_new();
        signal(SIGPIPE, SIG_IGN);
        struct kdev_rpc_server_options so = { .recv_stall_ms = 1000 };
        struct kdev_rpc_server *srv = kdev_rpc_server_new(&e->loop, &so);
        assert_non_null(srv);
        int reply_rv = 1; /* 1: the handler did not run */
        assert_int_equal(kdev_rpc_server_add_method(srv, METHOD, false, upper, &reply_rv), 0);
        struct kdev_err err = { 0 };
        assert_int_equal(kdev_rpc_server_listen_unix(srv, e->sock, &err), 0);
        struct kdev_rpc_client *cl = kdev_rpc_client_new(&e->loop, e->sock, NULL);
        assert_non_null(cl);

        struct done_rec rec = { 0 };
        if (sticky)
                failalloc_fail_from(n);
        else
                failalloc_fail_nth(n);
        struct kdev_rpc_client_call *call =
                kdev_rpc_client_unary(cl, METHOD, (const uint8_t *)"abc", 3, 3000, rec_msg,
                                      rec_done, &rec, &err);
        uint64_t start = uv_now(&e->loop);
        while (call && rec.ndone == 0 && uv_now(&e->loop) - start < 10000) {
                uv_run(&e->loop, UV_RUN_ONCE);
                uv_update_time(&e->loop);
        }
        unsigned long count = failalloc_count();
        *failures = failalloc_failures();
        failalloc_off();

        if (!call) {
                assert_int_equal(err.code, ENOMEM);
                assert_int_equal(rec.ndone, 0);
                *status = -1;
        } else {
                assert_int_equal(rec.ndone, 1);
                *status = rec.status;
                if (rec.status == KDEV_RPC_OK) {
                        assert_int_equal(rec.nmsg, 1);
                        assert_string_equal(rec.resp, "ABC");
                        assert_int_equal(reply_rv, 0);
                } else {
                        assert_true(rec.message[0] != '\0');
                        /* nothing waits for the deadline */
                        assert_int_not_equal(rec.status, KDEV_RPC_DEADLINE_EXCEEDED);
                }
                assert_true(reply_rv == 1 || reply_rv == 0 || reply_rv == -ENOMEM);
                /* the reply's frame failed: INTERNAL "out of memory", unless
                 * (failing from there on) the connection cannot carry it */
                if (reply_rv == -ENOMEM && !sticky) {
                        assert_int_equal(rec.status, KDEV_RPC_INTERNAL);
                        assert_string_equal(rec.message, "out of memory");
                }
        }
        kdev_rpc_client_close(cl);
        kdev_rpc_server_close(srv, NULL, NULL);
        env_free(e); /* runs the loop until both are freed */
        if (failalloc_have_leak_check())
                assert_int_equal(failalloc_leak_check(), 0);
        return count;
}

static void test_round_trip(void **state)
{
        (void)state;
        unsigned long failures;
        int status;
        unsigned long total = round_trip(0, false, &failures, &status);
        assert_int_equal(status, KDEV_RPC_OK);
        assert_int_equal(failures, 0);
        /* client call (4 + timer), request buffer, server call, path,
         * response frame, read buffers, write buffers */
        assert_true(total >= 10);
        for (int sticky = 0; sticky <= 1; sticky++) {
                unsigned long points = 0, ok = 0, start_failed = 0;
                for (unsigned long n = 1; n <= 4 * total; n++) {
                        round_trip(n, sticky, &failures, &status);
                        if (failures == 0)
                                break; /* the run made fewer than n allocations */
                        points++;
                        ok += status == KDEV_RPC_OK;
                        start_failed += status == -1;
                }
                print_message("unary round trip%s: %lu allocation failure points (%lu of %lu in "
                              "one run), %lu failed the start with -ENOMEM, %lu still ended OK, "
                              "the others ended with an error status; no leaks\n",
                              sticky ? " (failing from N on)" : "", points, total, total,
                              start_failed, ok);
                assert_true(points >= total);
                assert_true(start_failed >= 5);
        }
}

int main(void)
{
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_server_new),
                cmocka_unit_test(test_server_add_method),
                cmocka_unit_test(test_server_listen_adopt),
                cmocka_unit_test(test_client_new),
                cmocka_unit_test(test_client_call),
                cmocka_unit_test(test_unary_sync),
                cmocka_unit_test(test_codec),
                cmocka_unit_test(test_round_trip),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
