/* rpc: the server's bytes on the wire, seen by a raw nghttp2 client that
 * controls its own flow-control window (and can stop reading): response
 * framing, trailers-only errors, percent-encoding, content types,
 * compression refusal, deadlines, GOAWAY, and coalescing backpressure. */
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cmocka.h>
#include <nghttp2/nghttp2.h>

#include "rpc/rpc.h"

#define FAIL_MSG "bad thing: 100% \xc3\xbc" "n\xc3\xaf" "code\n"

struct rstream {
        int32_t id;
        char hdrs[2048];     /* response header block, "name: value\n" each */
        char trailers[1024]; /* trailer block */
        bool headers_end_stream;
        uint8_t data[8192];
        size_t data_len;
        bool closed;
        uint32_t close_err;
        /* request body */
        const uint8_t *body;
        size_t body_len, body_off;
};

struct env {
        uv_loop_t loop;
        char dir[64];
        char sock[128];
        struct kdev_rpc_server *srv;
        bool srv_closed;
        int handled, cancels;
        struct kdev_rpc_call *held;
        /* raw client */
        int fd;
        nghttp2_session *s;
        bool reading;   /* false: leave bytes in the socket */
        bool consume;   /* manual window: consume what was read */
        bool goaway;
        uint32_t goaway_err;
        bool eof;
        bool ping_ack;
};

/* ---------------------------------------------------------------------- */
/* server side                                                             */
/* ---------------------------------------------------------------------- */

static void on_cancel(struct kdev_rpc_call *call, void *ud)
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
        kdev_rpc_call_reply(call, req, len);
}

static void h_fail(struct kdev_rpc_call *call, const uint8_t *req, size_t len, void *ud)
{
        (void)req;
        (void)len;
        struct env *e = ud;
        e->handled++;
        kdev_rpc_call_finish(call, KDEV_RPC_INVALID_ARGUMENT, FAIL_MSG);
}

static void h_hold(struct kdev_rpc_call *call, const uint8_t *req, size_t len, void *ud)
{
        (void)req;
        (void)len;
        struct env *e = ud;
        e->handled++;
        e->held = call;
        kdev_rpc_call_on_cancel(call, on_cancel, e);
}

/* ---------------------------------------------------------------------- */
/* raw client                                                              */
/* ---------------------------------------------------------------------- */

static void append(char *dst, size_t size, const uint8_t *name, size_t nl, const uint8_t *value,
                   size_t vl)
{
        size_t used = strlen(dst);
        snprintf(dst + used, size - used, "%.*s: %.*s\n", (int)nl, (const char *)name, (int)vl,
                 (const char *)value);
}

static int r_on_header(nghttp2_session *s, const nghttp2_frame *f, const uint8_t *name, size_t nl,
                       const uint8_t *value, size_t vl, uint8_t flags, void *ud)
{
        (void)flags;
        (void)ud;
        struct rstream *st = nghttp2_session_get_stream_user_data(s, f->hd.stream_id);
        if (!st || f->hd.type != NGHTTP2_HEADERS)
                return 0;
        if (f->headers.cat == NGHTTP2_HCAT_RESPONSE)
                append(st->hdrs, sizeof(st->hdrs), name, nl, value, vl);
        else
                append(st->trailers, sizeof(st->trailers), name, nl, value, vl);
        return 0;
}

static int r_on_frame_recv(nghttp2_session *s, const nghttp2_frame *f, void *ud)
{
        struct env *e = ud;
        if (f->hd.type == NGHTTP2_GOAWAY) {
                e->goaway = true;
                e->goaway_err = f->goaway.error_code;
        } else if (f->hd.type == NGHTTP2_PING && (f->hd.flags & NGHTTP2_FLAG_ACK)) {
                e->ping_ack = true;
        } else if (f->hd.type == NGHTTP2_HEADERS && f->headers.cat == NGHTTP2_HCAT_RESPONSE &&
                   (f->hd.flags & NGHTTP2_FLAG_END_STREAM)) {
                struct rstream *st = nghttp2_session_get_stream_user_data(s, f->hd.stream_id);
                if (st)
                        st->headers_end_stream = true;
        }
        return 0;
}

static int r_on_data(nghttp2_session *s, uint8_t flags, int32_t id, const uint8_t *d, size_t n,
                     void *ud)
{
        (void)flags;
        struct env *e = ud;
        struct rstream *st = nghttp2_session_get_stream_user_data(s, id);
        if (st) {
                assert_true(st->data_len + n <= sizeof(st->data));
                memcpy(st->data + st->data_len, d, n);
                st->data_len += n;
        }
        if (e->consume)
                nghttp2_session_consume(s, id, n);
        return 0;
}

static int r_on_close(nghttp2_session *s, int32_t id, uint32_t err, void *ud)
{
        (void)ud;
        struct rstream *st = nghttp2_session_get_stream_user_data(s, id);
        if (st) {
                st->closed = true;
                st->close_err = err;
        }
        return 0;
}

static ssize_t r_body(nghttp2_session *s, int32_t id, uint8_t *buf, size_t len, uint32_t *flags,
                      nghttp2_data_source *src, void *ud)
{
        (void)s;
        (void)id;
        (void)ud;
        struct rstream *st = src->ptr;
        size_t n = st->body_len - st->body_off;
        if (n > len)
                n = len;
        memcpy(buf, st->body + st->body_off, n);
        st->body_off += n;
        if (st->body_off == st->body_len)
                *flags |= NGHTTP2_DATA_FLAG_EOF;
        return (ssize_t)n;
}

/* One step: the server's loop, then the client's socket both ways. */
static void pump(struct env *e)
{
        uv_run(&e->loop, UV_RUN_NOWAIT);
        if (e->reading && !e->eof) {
                uint8_t buf[16384];
                for (;;) {
                        ssize_t n = recv(e->fd, buf, sizeof(buf), MSG_DONTWAIT);
                        if (n == 0) {
                                e->eof = true;
                                break;
                        }
                        if (n < 0)
                                break;
                        assert_int_equal(nghttp2_session_mem_recv(e->s, buf, (size_t)n), n);
                }
        }
        for (;;) {
                const uint8_t *d;
                ssize_t n = nghttp2_session_mem_send(e->s, &d);
                assert_true(n >= 0);
                if (n == 0)
                        break;
                if (e->eof)
                        continue;
                ssize_t w = send(e->fd, d, (size_t)n, MSG_NOSIGNAL);
                if (w < 0 && errno == EPIPE)
                        continue;
                assert_int_equal(w, n);
        }
        uv_run(&e->loop, UV_RUN_NOWAIT);
}

static bool pump_until(struct env *e, const bool *flag, int ms)
{
        uint64_t end = uv_hrtime() + (uint64_t)ms * 1000000u;
        while (!*flag && uv_hrtime() < end) {
                pump(e);
                usleep(200); /* the peer is in this thread: poll */
        }
        return *flag;
}

static bool pump_until_int(struct env *e, const int *v, int want, int ms)
{
        uint64_t end = uv_hrtime() + (uint64_t)ms * 1000000u;
        while (*v != want && uv_hrtime() < end) {
                pump(e);
                usleep(200);
        }
        return *v == want;
}

static void raw_connect(struct env *e, uint32_t window)
{
        e->fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        struct sockaddr_un sa = { .sun_family = AF_UNIX };
        strcpy(sa.sun_path, e->sock);
        assert_int_equal(connect(e->fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
        nghttp2_session_callbacks *cbs;
        nghttp2_session_callbacks_new(&cbs);
        nghttp2_session_callbacks_set_on_header_callback(cbs, r_on_header);
        nghttp2_session_callbacks_set_on_frame_recv_callback(cbs, r_on_frame_recv);
        nghttp2_session_callbacks_set_on_data_chunk_recv_callback(cbs, r_on_data);
        nghttp2_session_callbacks_set_on_stream_close_callback(cbs, r_on_close);
        nghttp2_option *opt;
        nghttp2_option_new(&opt);
        /* window updates only for what the test consumes; without a
         * |window| the client consumes at once, like a keen reader */
        nghttp2_option_set_no_auto_window_update(opt, 1);
        e->consume = window == 0;
        assert_int_equal(nghttp2_session_client_new2(&e->s, cbs, e, opt), 0);
        nghttp2_option_del(opt);
        nghttp2_session_callbacks_del(cbs);
        nghttp2_settings_entry iv[] = {
                { NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE, window ? window : 65535 },
        };
        nghttp2_submit_settings(e->s, NGHTTP2_FLAG_NONE, iv, 1);
        e->reading = true;
}

#define H(n, v) \
        { (uint8_t *)(n), (uint8_t *)(v), strlen(n), strlen(v), NGHTTP2_NV_FLAG_NONE }

/* Sends a request with |extra| headers (NULL-terminated name/value pairs)
 * and |body| (already framed). content-type defaults to application/grpc. */
static void raw_request(struct env *e, struct rstream *st, const char *path, const char *ctype,
                        const char *const *extra, const void *body, size_t body_len)
{
        memset(st, 0, sizeof(*st));
        nghttp2_nv nva[16] = {
                H(":method", "POST"),   H(":scheme", "http"), H(":path", path),
                H(":authority", "localhost"), H("te", "trailers"),
                H("content-type", ctype ? ctype : "application/grpc"),
        };
        size_t n = 6;
        for (size_t i = 0; extra && extra[i]; i += 2)
                nva[n++] = (nghttp2_nv)H(extra[i], extra[i + 1]);
        st->body = body;
        st->body_len = body_len;
        nghttp2_data_provider prd = { .source.ptr = st, .read_callback = r_body };
        st->id = nghttp2_submit_request(e->s, NULL, nva, n, body ? &prd : NULL, st);
        assert_true(st->id > 0);
}

/* ---------------------------------------------------------------------- */
/* fixture                                                                 */
/* ---------------------------------------------------------------------- */

static int setup(void **state)
{
        signal(SIGPIPE, SIG_IGN);
        struct env *e = calloc(1, sizeof(*e));
        assert_int_equal(uv_loop_init(&e->loop), 0);
        strcpy(e->dir, "/tmp/kdev-rpcw-XXXXXX");
        assert_non_null(mkdtemp(e->dir));
        snprintf(e->sock, sizeof(e->sock), "%s/s.sock", e->dir);
        e->srv = kdev_rpc_server_new(&e->loop, NULL);
        assert_int_equal(kdev_rpc_server_add_method(e->srv, "/t.S/Echo", false, h_echo, e), 0);
        assert_int_equal(kdev_rpc_server_add_method(e->srv, "/t.S/Fail", false, h_fail, e), 0);
        assert_int_equal(kdev_rpc_server_add_method(e->srv, "/t.S/Hold", true, h_hold, e), 0);
        struct kdev_err err = { 0 };
        assert_int_equal(kdev_rpc_server_listen_unix(e->srv, e->sock, &err), 0);
        e->fd = -1;
        *state = e;
        return 0;
}

static void srv_done(void *arg)
{
        ((struct env *)arg)->srv_closed = true;
}

static int teardown(void **state)
{
        struct env *e = *state;
        if (e->s)
                nghttp2_session_del(e->s);
        if (e->fd >= 0)
                close(e->fd);
        if (e->srv) {
                kdev_rpc_server_close(e->srv, srv_done, e);
                uint64_t end = uv_hrtime() + 5000000000u;
                while (!e->srv_closed && uv_hrtime() < end)
                        uv_run(&e->loop, UV_RUN_ONCE);
                assert_true(e->srv_closed);
        }
        uv_run(&e->loop, UV_RUN_DEFAULT);
        int rv = uv_loop_close(&e->loop);
        unlink(e->sock);
        rmdir(e->dir);
        free(e);
        assert_int_equal(rv, 0);
        return 0;
}

static const uint8_t HI[] = { 0, 0, 0, 0, 2, 'h', 'i' };

#define HDRS_200 ":status: 200\ncontent-type: application/grpc\ngrpc-accept-encoding: identity\n"

/* ---------------------------------------------------------------------- */
/* tests                                                                   */
/* ---------------------------------------------------------------------- */

static void test_unary_response_framing(void **state)
{
        struct env *e = *state;
        raw_connect(e, 0);
        struct rstream st;
        raw_request(e, &st, "/t.S/Echo", NULL, NULL, HI, sizeof(HI));
        assert_true(pump_until(e, &st.closed, 5000));
        assert_string_equal(st.hdrs, HDRS_200);
        assert_false(st.headers_end_stream);
        assert_int_equal(st.data_len, sizeof(HI));
        assert_memory_equal(st.data, HI, sizeof(HI));
        assert_string_equal(st.trailers, "grpc-status: 0\n");
        assert_int_equal(st.close_err, NGHTTP2_NO_ERROR);
        /* application/grpc+proto is accepted as well */
        raw_request(e, &st, "/t.S/Echo", "application/grpc+proto", NULL, HI, sizeof(HI));
        assert_true(pump_until(e, &st.closed, 5000));
        assert_string_equal(st.trailers, "grpc-status: 0\n");
        assert_int_equal(st.data_len, sizeof(HI));
}

static void test_trailers_only_errors(void **state)
{
        struct env *e = *state;
        raw_connect(e, 0);
        struct rstream st;
        raw_request(e, &st, "/x.Y/Z", NULL, NULL, HI, sizeof(HI));
        assert_true(pump_until(e, &st.closed, 5000));
        assert_string_equal(st.hdrs, HDRS_200 "grpc-status: 12\n"
                                              "grpc-message: unknown method /x.Y/Z\n");
        assert_true(st.headers_end_stream);
        assert_int_equal(st.data_len, 0);
        assert_string_equal(st.trailers, "");

        /* handler error: grpc-message percent-encoded on the wire */
        raw_request(e, &st, "/t.S/Fail", NULL, NULL, HI, sizeof(HI));
        assert_true(pump_until(e, &st.closed, 5000));
        assert_string_equal(st.hdrs, HDRS_200 "grpc-status: 3\n"
                                              "grpc-message: bad thing: 100%25 "
                                              "%C3%BCn%C3%AFcode%0A\n");

        /* no request message at all */
        raw_request(e, &st, "/t.S/Echo", NULL, NULL, NULL, 0);
        assert_true(pump_until(e, &st.closed, 5000));
        assert_string_equal(st.hdrs, HDRS_200 "grpc-status: 13\n"
                                              "grpc-message: missing request message\n");
        /* two request messages for a unary method */
        static const uint8_t two[] = { 0, 0, 0, 0, 1, 'a', 0, 0, 0, 0, 1, 'b' };
        raw_request(e, &st, "/t.S/Echo", NULL, NULL, two, sizeof(two));
        assert_true(pump_until(e, &st.closed, 5000));
        assert_string_equal(st.hdrs, HDRS_200 "grpc-status: 13\n"
                                              "grpc-message: more than one request message for a "
                                              "unary or server-streaming method\n");
        assert_int_equal(e->handled, 1);
        assert_int_equal(kdev_rpc_server_open_calls(e->srv), 0);
}

static void test_content_types(void **state)
{
        struct env *e = *state;
        raw_connect(e, 0);
        struct rstream st;
        raw_request(e, &st, "/t.S/Echo", "text/html", NULL, HI, sizeof(HI));
        assert_true(pump_until(e, &st.closed, 5000));
        assert_string_equal(st.hdrs, ":status: 415\ncontent-type: application/grpc\n"
                                     "grpc-accept-encoding: identity\ngrpc-status: 13\n"
                                     "grpc-message: invalid gRPC request content-type "
                                     "\"text/html\"\n");
        raw_request(e, &st, "/t.S/Echo", "application/grpc+json", NULL, HI, sizeof(HI));
        assert_true(pump_until(e, &st.closed, 5000));
        assert_string_equal(st.hdrs, HDRS_200 "grpc-status: 12\n"
                                              "grpc-message: unsupported content-type "
                                              "\"application/grpc+json\" (only application/grpc "
                                              "and application/grpc+proto)\n");
        assert_int_equal(e->handled, 0);
}

static void test_compression_refused(void **state)
{
        struct env *e = *state;
        raw_connect(e, 0);
        struct rstream st;
        static const uint8_t zipped[] = { 1, 0, 0, 0, 2, 'h', 'i' };
        raw_request(e, &st, "/t.S/Echo", NULL, NULL, zipped, sizeof(zipped));
        assert_true(pump_until(e, &st.closed, 5000));
        assert_string_equal(st.hdrs, HDRS_200 "grpc-status: 12\n"
                                              "grpc-message: compressed messages are not "
                                              "supported\n");
        const char *const enc[] = { "grpc-encoding", "gzip", NULL };
        raw_request(e, &st, "/t.S/Echo", NULL, enc, HI, sizeof(HI));
        assert_true(pump_until(e, &st.closed, 5000));
        assert_string_equal(st.hdrs, HDRS_200 "grpc-status: 12\n"
                                              "grpc-message: compressed messages are not supported "
                                              "(grpc-encoding \"gzip\"; this server accepts "
                                              "identity only)\n");
        /* identity is fine */
        const char *const ident[] = { "grpc-encoding", "identity", NULL };
        raw_request(e, &st, "/t.S/Echo", NULL, ident, HI, sizeof(HI));
        assert_true(pump_until(e, &st.closed, 5000));
        assert_string_equal(st.trailers, "grpc-status: 0\n");
        assert_int_equal(e->handled, 1);
}

static void test_server_deadline(void **state)
{
        struct env *e = *state;
        raw_connect(e, 0);
        struct rstream st;
        const char *const tmo[] = { "grpc-timeout", "100m", NULL };
        raw_request(e, &st, "/t.S/Hold", NULL, tmo, HI, sizeof(HI));
        uint64_t t0 = uv_hrtime();
        assert_true(pump_until(e, &st.closed, 5000));
        uint64_t ms = (uv_hrtime() - t0) / 1000000u;
        assert_true(ms >= 90);
        assert_string_equal(st.hdrs, HDRS_200 "grpc-status: 4\n"
                                              "grpc-message: deadline exceeded\n");
        assert_int_equal(e->cancels, 1);
        assert_null(e->held);
        assert_int_equal(kdev_rpc_server_open_calls(e->srv), 0);
        /* a malformed grpc-timeout is refused */
        const char *const bad[] = { "grpc-timeout", "12x", NULL };
        raw_request(e, &st, "/t.S/Hold", NULL, bad, HI, sizeof(HI));
        assert_true(pump_until(e, &st.closed, 5000));
        assert_string_equal(st.hdrs, HDRS_200 "grpc-status: 13\n"
                                              "grpc-message: malformed grpc-timeout\n");
}

static void test_rst_stream_cancels(void **state)
{
        struct env *e = *state;
        raw_connect(e, 0);
        struct rstream st;
        raw_request(e, &st, "/t.S/Hold", NULL, NULL, HI, sizeof(HI));
        assert_true(pump_until_int(e, &e->handled, 1, 5000));
        assert_int_equal(kdev_rpc_server_open_calls(e->srv), 1);
        nghttp2_submit_rst_stream(e->s, NGHTTP2_FLAG_NONE, st.id, NGHTTP2_CANCEL);
        assert_true(pump_until_int(e, &e->cancels, 1, 5000));
        assert_int_equal(kdev_rpc_server_open_calls(e->srv), 0);
        /* PING is answered */
        nghttp2_submit_ping(e->s, NGHTTP2_FLAG_NONE, NULL);
        assert_true(pump_until(e, &e->ping_ack, 5000));
}

static void test_goaway_on_close(void **state)
{
        struct env *e = *state;
        raw_connect(e, 0);
        struct rstream st;
        raw_request(e, &st, "/t.S/Hold", NULL, NULL, HI, sizeof(HI));
        assert_true(pump_until_int(e, &e->handled, 1, 5000));
        kdev_rpc_server_close(e->srv, srv_done, e);
        e->srv = NULL;
        assert_int_equal(e->cancels, 1);
        assert_true(pump_until(e, &e->goaway, 5000));
        assert_int_equal(e->goaway_err, NGHTTP2_NO_ERROR);
        assert_true(pump_until(e, &e->eof, 5000));
        assert_true(pump_until(e, &e->srv_closed, 5000));
}

/* The peer stops reading (a 16-byte stream window, never replenished while
 * the server sends): 1000 updates must coalesce to the latest one. */
static void test_backpressure_coalesces(void **state)
{
        struct env *e = *state;
        raw_connect(e, 16);
        struct rstream st;
        raw_request(e, &st, "/t.S/Hold", NULL, NULL, HI, sizeof(HI));
        assert_true(pump_until_int(e, &e->handled, 1, 5000));
        struct kdev_rpc_call *call = e->held;
        e->reading = false;
        for (int i = 0; i < 1000; i++) {
                char m[16];
                snprintf(m, sizeof(m), "update-%05d", i); /* 12 bytes, 17 framed */
                assert_int_equal(kdev_rpc_call_send(call, (const uint8_t *)m, 12), 0);
                uv_run(&e->loop, UV_RUN_NOWAIT);
        }
        kdev_rpc_call_finish(call, KDEV_RPC_OK, NULL);
        e->held = NULL;
        /* now read, returning window as we go */
        e->reading = true;
        e->consume = true;
        assert_true(pump_until(e, &st.closed, 10000));
        assert_string_equal(st.trailers, "grpc-status: 0\n");
        /* split the received bytes into messages */
        int count = 0;
        char first[16] = "", last[16] = "";
        size_t off = 0;
        while (off + 5 <= st.data_len) {
                const uint8_t *p = st.data + off;
                uint32_t len = (uint32_t)p[1] << 24 | (uint32_t)p[2] << 16 |
                               (uint32_t)p[3] << 8 | p[4];
                assert_int_equal(len, 12);
                assert_true(off + 5 + len <= st.data_len);
                if (count == 0)
                        memcpy(first, st.data + off + 5, len);
                memcpy(last, st.data + off + 5, len);
                count++;
                off += 5 + len;
        }
        assert_int_equal(off, st.data_len);
        /* the first one was on the wire already; the rest became the latest */
        assert_int_equal(count, 2);
        assert_string_equal(first, "update-00000");
        assert_string_equal(last, "update-00999");
        assert_int_equal(kdev_rpc_server_open_calls(e->srv), 0);
}

int main(void)
{
        const struct CMUnitTest tests[] = {
                cmocka_unit_test_setup_teardown(test_unary_response_framing, setup, teardown),
                cmocka_unit_test_setup_teardown(test_trailers_only_errors, setup, teardown),
                cmocka_unit_test_setup_teardown(test_content_types, setup, teardown),
                cmocka_unit_test_setup_teardown(test_compression_refused, setup, teardown),
                cmocka_unit_test_setup_teardown(test_server_deadline, setup, teardown),
                cmocka_unit_test_setup_teardown(test_rst_stream_cancels, setup, teardown),
                cmocka_unit_test_setup_teardown(test_goaway_on_close, setup, teardown),
                cmocka_unit_test_setup_teardown(test_backpressure_coalesces, setup, teardown),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
