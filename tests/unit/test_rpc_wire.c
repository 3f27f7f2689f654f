/* rpc: the server's bytes on the wire, seen by a raw nghttp2 client that
 * controls its own flow-control window (and can stop reading): response
 * framing, trailers-only errors, percent-encoding, content types,
 * compression refusal, deadlines, GOAWAY, coalescing backpressure, and the
 * server's bounds: concurrent streams, request budgets, connection cap,
 * reading paused for a peer that does not read, GOAWAY flushed on close. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
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
#include "rpc/rpc_internal.h"

#define FAIL_MSG "bad thing: 100% \xc3\xbc" "n\xc3\xaf" "code\n"

struct rstream {
        int32_t id;
        char hdrs[2048];     /* response header block, "name: value\n" each */
        char trailers[1024]; /* trailer block */
        bool headers_end_stream;
        uint8_t data[8192];
        size_t data_len;     /* bytes kept in |data| */
        size_t data_total;   /* DATA payload bytes received */
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
        /* raw client: the current connection (swap_conn() exchanges it with
         * the spare one) */
        int fd;
        nghttp2_session *s;
        bool eof;
        int fd2;
        nghttp2_session *s2;
        bool eof2;
        bool reading;   /* false: leave bytes in the socket */
        bool consume;   /* manual window: consume what was read */
        bool goaway;
        uint32_t goaway_err;
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

/* Replies with the request's length in decimal. */
static void h_size(struct kdev_rpc_call *call, const uint8_t *req, size_t len, void *ud)
{
        (void)req;
        struct env *e = ud;
        e->handled++;
        char m[32];
        int n = snprintf(m, sizeof(m), "%zu", len);
        kdev_rpc_call_reply(call, (const uint8_t *)m, (size_t)n);
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
                if (st->data_len + n <= sizeof(st->data)) {
                        memcpy(st->data + st->data_len, d, n);
                        st->data_len += n;
                }
                st->data_total += n;
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
        if (!e->s)
                return; /* no raw client */
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
        /* before the server's SETTINGS arrive, nghttp2 would hold requests
         * past 100 itself; the stream-limit test sends more */
        nghttp2_option_set_peer_max_concurrent_streams(opt, 1000);
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

/* :authority of raw requests (gRPC clients dialling a bare socket path send
 * the path). */
static const char *g_authority = "localhost";

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
                H(":authority", g_authority), H("te", "trailers"),
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

/* Opens a stream to |path| with HEADERS only (no END_STREAM); the body
 * follows with raw_send(). */
static void raw_open(struct env *e, struct rstream *st, const char *path)
{
        memset(st, 0, sizeof(*st));
        nghttp2_nv nva[] = {
                H(":method", "POST"),   H(":scheme", "http"), H(":path", path),
                H(":authority", "localhost"), H("te", "trailers"),
                H("content-type", "application/grpc"),
        };
        st->id = nghttp2_submit_headers(e->s, NGHTTP2_FLAG_NONE, -1, NULL, nva, 6, st);
        assert_true(st->id > 0);
}

/* Sends |len| body bytes on an open stream, ending it with |end|. */
static void raw_send(struct env *e, struct rstream *st, const void *body, size_t len, bool end)
{
        /* DATA needs the stream open: its HEADERS sent */
        for (int i = 0; i < 1000 && !nghttp2_session_find_stream(e->s, st->id); i++)
                pump(e);
        st->body = body;
        st->body_len = len;
        st->body_off = 0;
        nghttp2_data_provider prd = { .source.ptr = st, .read_callback = r_body };
        assert_int_equal(nghttp2_submit_data(e->s, end ? NGHTTP2_FLAG_END_STREAM
                                                       : NGHTTP2_FLAG_NONE,
                                             st->id, &prd),
                         0);
}

/* Makes the spare connection the current one (and back). */
static void swap_conn(struct env *e)
{
        int fd = e->fd;
        nghttp2_session *s = e->s;
        bool eof = e->eof;
        e->fd = e->fd2;
        e->s = e->s2;
        e->eof = e->eof2;
        e->fd2 = fd;
        e->s2 = s;
        e->eof2 = eof;
}

/* A gRPC message prefix declaring |len| bytes, then |extra| bytes of it. */
static uint8_t *prefix_msg(uint32_t len, size_t extra)
{
        uint8_t *m = calloc(1, 5 + extra);
        assert_non_null(m);
        kdev_rpc__put_prefix(m, len);
        memset(m + 5, 'x', extra);
        return m;
}

/* ---------------------------------------------------------------------- */
/* fixture                                                                 */
/* ---------------------------------------------------------------------- */

/* *state may hold server options (cmocka prestate); NULL: defaults. */
static int setup(void **state)
{
        signal(SIGPIPE, SIG_IGN);
        const struct kdev_rpc_server_options *opts = *state;
        struct env *e = calloc(1, sizeof(*e));
        assert_int_equal(uv_loop_init(&e->loop), 0);
        strcpy(e->dir, "/tmp/kdev-rpcw-XXXXXX");
        assert_non_null(mkdtemp(e->dir));
        snprintf(e->sock, sizeof(e->sock), "%s/s.sock", e->dir);
        e->srv = kdev_rpc_server_new(&e->loop, opts);
        assert_int_equal(kdev_rpc_server_add_method(e->srv, "/t.S/Echo", false, h_echo, e), 0);
        assert_int_equal(kdev_rpc_server_add_method(e->srv, "/t.S/Size", false, h_size, e), 0);
        assert_int_equal(kdev_rpc_server_add_method(e->srv, "/t.S/Fail", false, h_fail, e), 0);
        assert_int_equal(kdev_rpc_server_add_method(e->srv, "/t.S/Hold", true, h_hold, e), 0);
        struct kdev_err err = { 0 };
        assert_int_equal(kdev_rpc_server_listen_unix(e->srv, e->sock, &err), 0);
        e->fd = -1;
        e->fd2 = -1;
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
        if (e->s2)
                nghttp2_session_del(e->s2);
        if (e->fd2 >= 0)
                close(e->fd2);
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

static void test_socket_path_authority_accepted(void **state)
{
        struct env *e = *state;
        raw_connect(e, 0);
        struct rstream st;
        g_authority = "/var/lib/kubelet/device-plugins/kdev-example.com_x.sock";
        raw_request(e, &st, "/t.S/Echo", NULL, NULL, HI, sizeof(HI));
        g_authority = "localhost";
        assert_true(pump_until(e, &st.closed, 5000));
        assert_string_equal(st.hdrs, HDRS_200);
        assert_string_equal(st.trailers, "grpc-status: 0\n");
        assert_int_equal(st.close_err, NGHTTP2_NO_ERROR);
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


/* ---------------------------------------------------------------------- */
/* bounds                                                                  */
/* ---------------------------------------------------------------------- */

static bool run_until_size(struct env *e, size_t (*get)(const struct kdev_rpc_server *),
                           size_t want, int ms)
{
        uint64_t end = uv_hrtime() + (uint64_t)ms * 1000000u;
        while (get(e->srv) != want && uv_hrtime() < end) {
                pump(e);
                usleep(200);
        }
        return get(e->srv) == want;
}

/* The server advertises 100 concurrent streams; the 101st stream a client
 * opens before it acknowledged that SETTINGS is refused with REFUSED_STREAM,
 * the other 100 are unharmed, and a stream freed makes room for a new one. */
static void test_max_concurrent_streams(void **state)
{
        struct env *e = *state;
        enum { N = KDEV_RPC_MAX_CONCURRENT_STREAMS + 1 };
        struct rstream *st = calloc(N + 1, sizeof(*st));
        assert_non_null(st);
        raw_connect(e, 0);
        for (int i = 0; i < N; i++)
                raw_open(e, &st[i], "/t.S/Echo");
        assert_int_equal(st[N - 1].id, 201);
        e->reading = false; /* every HEADERS goes out before the SETTINGS ACK */
        pump(e);
        assert_true(run_until_size(e, kdev_rpc_server_open_calls, 100, 5000));
        e->reading = true;
        assert_true(pump_until(e, &st[N - 1].closed, 5000));
        assert_int_equal(st[N - 1].close_err, NGHTTP2_REFUSED_STREAM);
        assert_string_equal(st[N - 1].hdrs, "");
        assert_int_equal(nghttp2_session_get_remote_settings(
                                 e->s, NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS),
                         100);
        for (int i = 0; i < N - 1; i++)
                assert_false(st[i].closed);
        assert_int_equal(kdev_rpc_server_open_calls(e->srv), 100);
        /* stream 1 completes; then a new stream fits again */
        raw_send(e, &st[0], HI, sizeof(HI), true);
        assert_true(pump_until(e, &st[0].closed, 5000));
        assert_string_equal(st[0].trailers, "grpc-status: 0\n");
        raw_request(e, &st[N], "/t.S/Echo", NULL, NULL, HI, sizeof(HI));
        assert_int_equal(st[N].id, 203);
        assert_true(pump_until(e, &st[N].closed, 5000));
        assert_string_equal(st[N].trailers, "grpc-status: 0\n");
        assert_int_equal(e->handled, 2);
        assert_int_equal(kdev_rpc_server_open_calls(e->srv), 99);
        nghttp2_session_del(e->s); /* it points into |st| */
        e->s = NULL;
        free(st);
}

static int plain_connect(const char *path);
static size_t run_read(struct env *e, int fd, uint8_t *buf, size_t want, bool until_eof,
                       bool *eof);

static const struct kdev_rpc_server_options budget_opts = {
        .conn_recv_budget = 100000,
        .server_recv_budget = 140000,
};

#define BIG 4000000u

/* Declared lengths reserve nothing: what counts is each request buffer,
 * the smallest power of two (>= 1 KiB) holding the bytes received. A
 * request whose buffer cannot grow within a budget is refused at once
 * while other calls go on, and a cancelled request gives its bytes back. */
static void test_request_budgets(void **state)
{
        struct env *e = *state;
        struct rstream a[6], b[3];
        uint8_t *part = prefix_msg(BIG, 20000);
        raw_connect(e, 0);
        for (int i = 0; i < 3; i++) {
                raw_open(e, &a[i], "/t.S/Size");
                raw_send(e, &a[i], part, 5 + 20000, false);
        }
        /* 20000 bytes received each: 32768-byte buffers */
        assert_true(run_until_size(e, kdev_rpc__server_request_bytes, 3 * 32768, 5000));
        /* 16384 more bytes need 16384 more: over the connection's 100000 */
        raw_open(e, &a[3], "/t.S/Size");
        raw_send(e, &a[3], part, 5 + 16384, false);
        assert_true(pump_until(e, &a[3].closed, 5000));
        assert_string_equal(a[3].hdrs, HDRS_200 "grpc-status: 8\n"
                                                "grpc-message: server busy: a 4000000-byte "
                                                "request would exceed this connection's budget "
                                                "for pending requests (98304 of 100000 bytes "
                                                "in use)\n");
        assert_true(a[3].headers_end_stream);
        assert_int_equal(kdev_rpc__server_request_bytes(e->srv), 3 * 32768);
        /* a small call on the same connection still works */
        raw_request(e, &a[4], "/t.S/Size", NULL, NULL, HI, sizeof(HI));
        assert_true(pump_until(e, &a[4].closed, 5000));
        assert_string_equal(a[4].trailers, "grpc-status: 0\n");
        assert_int_equal(a[4].data_len, 6);
        assert_memory_equal(a[4].data, "\0\0\0\0\1" "2", 6);

        /* a second connection: 32768 more makes 131072 of the server's
         * 140000; the next 16384 do not fit */
        swap_conn(e);
        raw_connect(e, 0);
        raw_open(e, &b[0], "/t.S/Size");
        raw_send(e, &b[0], part, 5 + 20000, false);
        assert_true(run_until_size(e, kdev_rpc__server_request_bytes, 4 * 32768, 5000));
        raw_open(e, &b[1], "/t.S/Size");
        raw_send(e, &b[1], part, 5 + 16384, false);
        assert_true(pump_until(e, &b[1].closed, 5000));
        assert_string_equal(b[1].hdrs, HDRS_200 "grpc-status: 8\n"
                                                "grpc-message: server busy: a 4000000-byte "
                                                "request would exceed the server's budget for "
                                                "pending requests (131072 of 140000 bytes in "
                                                "use)\n");
        /* the first connection cancels one request: its share comes back */
        swap_conn(e);
        nghttp2_submit_rst_stream(e->s, NGHTTP2_FLAG_NONE, a[0].id, NGHTTP2_CANCEL);
        assert_true(run_until_size(e, kdev_rpc__server_request_bytes, 3 * 32768, 5000));
        swap_conn(e);
        raw_open(e, &b[2], "/t.S/Size");
        raw_send(e, &b[2], part, 5 + 16384, false);
        assert_true(run_until_size(e, kdev_rpc__server_request_bytes, 3 * 32768 + 16384, 5000));
        assert_false(b[2].closed);
        /* a request sent in full is handled, its buffer freed */
        swap_conn(e);
        uint8_t *full = prefix_msg(10000, 10000);
        raw_request(e, &a[5], "/t.S/Size", NULL, NULL, full, 5 + 10000);
        assert_true(pump_until(e, &a[5].closed, 10000));
        assert_string_equal(a[5].trailers, "grpc-status: 0\n");
        assert_int_equal(a[5].data_len, 10);
        assert_memory_equal(a[5].data + 5, "10000", 5);
        assert_int_equal(kdev_rpc__server_request_bytes(e->srv), 3 * 32768 + 16384);
        assert_int_equal(e->handled, 2);
        free(full);
        free(part);
}

/* The attack, scaled to one server: 64 streams, each one prefix
 * declaring 4 MiB (the largest message allowed) and then nothing. It costs
 * no budget: a request from another connection is served at once. */
static void test_declared_length_costs_nothing(void **state)
{
        struct env *e = *state;
        enum { N = 64 };
        struct rstream *st = calloc(N, sizeof(*st));
        assert_non_null(st);
        uint8_t *pfx = prefix_msg(KDEV_RPC_DEFAULT_MAX_MESSAGE, 0);
        raw_connect(e, 0);
        for (int i = 0; i < N; i++) {
                raw_open(e, &st[i], "/t.S/Size");
                raw_send(e, &st[i], pfx, 5, false);
        }
        assert_true(run_until_size(e, kdev_rpc_server_open_calls, N, 5000));
        for (int i = 0; i < 50; i++)
                pump(e);
        assert_int_equal(kdev_rpc__server_request_bytes(e->srv), 0);
        swap_conn(e);
        raw_connect(e, 0);
        struct rstream ok;
        raw_request(e, &ok, "/t.S/Echo", NULL, NULL, HI, sizeof(HI));
        assert_true(pump_until(e, &ok.closed, 5000));
        assert_string_equal(ok.trailers, "grpc-status: 0\n");
        assert_int_equal(ok.data_len, sizeof(HI));
        for (int i = 0; i < N; i++)
                assert_false(st[i].closed);
        swap_conn(e);
        nghttp2_session_del(e->s); /* it points into |st| */
        e->s = NULL;
        free(st);
        free(pfx);
}

static const struct kdev_rpc_server_options share_opts = {
        .server_recv_budget = 100000,
        .priority_share = 67000,
};

/* With a priority connection set, the others together stay within the
 * server budget minus the share (33000 of 100000); the priority connection
 * may use the whole budget. Without one, nothing is held back. */
static void test_priority_share(void **state)
{
        struct env *e = *state;
        struct rstream a[4], b[4];
        uint8_t *part = prefix_msg(BIG, 20000);
        raw_connect(e, 0); /* connection 1 */
        raw_open(e, &a[0], "/t.S/Size");
        raw_send(e, &a[0], part, 5 + 20000, false);
        assert_true(run_until_size(e, kdev_rpc__server_request_bytes, 32768, 5000));
        swap_conn(e);
        raw_connect(e, 0); /* connection 2: the priority one */
        raw_open(e, &b[0], "/t.S/Size");
        raw_send(e, &b[0], part, 5 + 20000, false);
        assert_true(run_until_size(e, kdev_rpc__server_request_bytes, 2 * 32768, 5000));
        kdev_rpc_server_set_priority_connection(e->srv, 2);
        /* connection 1: no more growth fits the others' 33000 */
        swap_conn(e);
        raw_open(e, &a[1], "/t.S/Size");
        raw_send(e, &a[1], part, 5 + 20000, false);
        assert_true(pump_until(e, &a[1].closed, 5000));
        assert_string_equal(a[1].hdrs, HDRS_200 "grpc-status: 8\n"
                                                "grpc-message: server busy: a 4000000-byte "
                                                "request would exceed the server's budget for "
                                                "pending requests (32768 of 33000 bytes in use "
                                                "by connections other than kubelet's; 67000 more "
                                                "are kept for kubelet's)\n");
        /* connection 2 gets it: 98304 of 100000 */
        swap_conn(e);
        raw_open(e, &b[1], "/t.S/Size");
        raw_send(e, &b[1], part, 5 + 20000, false);
        assert_true(run_until_size(e, kdev_rpc__server_request_bytes, 3 * 32768, 5000));
        assert_false(b[1].closed);
        /* and is still held to the whole server budget */
        raw_open(e, &b[2], "/t.S/Size");
        raw_send(e, &b[2], part, 5 + 20000, false);
        assert_true(pump_until(e, &b[2].closed, 5000));
        assert_string_equal(b[2].hdrs, HDRS_200 "grpc-status: 8\n"
                                                "grpc-message: server busy: a 4000000-byte "
                                                "request would exceed the server's budget for "
                                                "pending requests (98304 of 100000 bytes in "
                                                "use)\n");
        /* a small request from connection 1 still fits the others' share */
        swap_conn(e);
        raw_request(e, &a[2], "/t.S/Size", NULL, NULL, HI, sizeof(HI));
        assert_true(pump_until(e, &a[2].closed, 5000));
        assert_string_equal(a[2].trailers, "grpc-status: 0\n");
        /* the priority connection closes: nothing is held back any more */
        swap_conn(e);
        nghttp2_session_del(e->s);
        e->s = NULL;
        close(e->fd);
        e->fd = -1;
        assert_true(run_until_size(e, kdev_rpc__server_connections, 1, 5000));
        assert_int_equal(kdev_rpc__server_request_bytes(e->srv), 32768);
        swap_conn(e);
        raw_open(e, &a[3], "/t.S/Size");
        raw_send(e, &a[3], part, 5 + 20000, false);
        assert_true(run_until_size(e, kdev_rpc__server_request_bytes, 2 * 32768, 5000));
        raw_open(e, &a[1], "/t.S/Size");
        raw_send(e, &a[1], part, 5 + 20000, false);
        assert_true(run_until_size(e, kdev_rpc__server_request_bytes, 3 * 32768, 5000));
        assert_false(a[3].closed);
        assert_false(a[1].closed);
        free(part);
}

static const struct kdev_rpc_server_options stall_opts = { .recv_stall_ms = 200 };

#define STALLED HDRS_200 "grpc-status: 1\ngrpc-message: request stalled: no request data for " \
                         "200 ms\n"

/* A request that stops arriving is ended CANCELLED after the stall timeout
 * and its buffer released; single bytes trickling in are no progress, a
 * steady 1 KiB is; a header block left halfway closes the connection. */
static void test_stalled_requests_released(void **state)
{
        struct env *e = *state;
        struct rstream st[3];
        uint8_t *part = prefix_msg(BIG, 4096);
        raw_connect(e, 0);
        raw_open(e, &st[0], "/t.S/Size");
        raw_send(e, &st[0], part, 5 + 10, false);
        assert_true(run_until_size(e, kdev_rpc__server_request_bytes, 1024, 5000));
        assert_true(pump_until(e, &st[0].closed, 5000));
        assert_string_equal(st[0].hdrs, STALLED);
        assert_true(st[0].headers_end_stream);
        assert_int_equal(st[0].close_err, NGHTTP2_NO_ERROR);
        assert_int_equal(kdev_rpc__server_request_bytes(e->srv), 0);
        assert_int_equal(kdev_rpc__server_stalls(e->srv), 1);
        /* one byte every 20 ms: stalls all the same */
        raw_open(e, &st[1], "/t.S/Size");
        raw_send(e, &st[1], part, 5, false);
        /* 1 KiB every 100 ms for 600 ms: alive */
        raw_open(e, &st[2], "/t.S/Size");
        raw_send(e, &st[2], part, 5, false);
        for (int i = 0; i < 20; i++)
                pump(e);
        size_t off = 5;
        for (int i = 0; i < 30; i++) {
                if (!st[1].closed)
                        raw_send(e, &st[1], part + 5 + i, 1, false);
                if (i % 5 == 0) {
                        raw_send(e, &st[2], part + 5, 1024, false);
                        off += 1024;
                }
                uint64_t end = uv_hrtime() + 20000000u;
                while (uv_hrtime() < end) {
                        pump(e);
                        usleep(500);
                }
        }
        assert_true(st[1].closed);
        assert_string_equal(st[1].hdrs, STALLED);
        assert_false(st[2].closed);
        assert_int_equal(kdev_rpc__server_stalls(e->srv), 2);
        /* the third one stops now */
        assert_true(pump_until(e, &st[2].closed, 5000));
        assert_string_equal(st[2].hdrs, STALLED);
        assert_int_equal(kdev_rpc__server_request_bytes(e->srv), 0);
        assert_int_equal(kdev_rpc__server_stalls(e->srv), 3);
        assert_int_equal(e->handled, 0);

        /* HEADERS without END_HEADERS, then nothing: the connection goes */
        int fd = plain_connect(e->sock);
        static const uint8_t half[] = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
                                      "\0\0\0\x04\0\0\0\0\0"       /* SETTINGS */
                                      "\0\0\x01\x01\0\0\0\0\x01\x83"; /* HEADERS, :method POST */
        assert_int_equal(send(fd, half, sizeof(half) - 1, MSG_NOSIGNAL), sizeof(half) - 1);
        uint8_t buf[512];
        bool eof;
        size_t n = run_read(e, fd, buf, sizeof(buf), true, &eof);
        assert_true(eof);
        /* server SETTINGS (21), SETTINGS ACK (9), GOAWAY (17) */
        assert_int_equal(n, 21 + 9 + 17);
        assert_int_equal(buf[30 + 3], NGHTTP2_GOAWAY);
        assert_int_equal(buf[30 + 16], NGHTTP2_NO_ERROR);
        assert_int_equal(kdev_rpc__server_stalls(e->srv), 4);
        close(fd);
        free(part);
}

/* Sends what the raw client has queued without running the server's loop. */
static void client_flush(struct env *e)
{
        for (;;) {
                const uint8_t *d;
                ssize_t n = nghttp2_session_mem_send(e->s, &d);
                assert_true(n >= 0);
                if (n == 0)
                        break;
                assert_int_equal(send(e->fd, d, (size_t)n, MSG_NOSIGNAL), n);
        }
}

/* Blocks the server's loop for 400 ms (a slow disk under a handler), then
 * answers as /t.S/Size. */
static void h_block(struct kdev_rpc_call *call, const uint8_t *req, size_t len, void *ud)
{
        usleep(400 * 1000);
        h_size(call, req, len, ud);
}

/* Time the server's own loop was blocked is not a client's stall: a request
 * whose bytes arrived (unread, or read late in the same loop iteration)
 * while a handler held the loop for twice the stall timeout goes on and is
 * served. */
static void test_server_blocked_is_no_stall(void **state)
{
        struct env *e = *state;
        struct rstream a, b;
        assert_int_equal(kdev_rpc_server_add_method(e->srv, "/t.S/Block", false, h_block, e), 0);
        uint8_t *msg = prefix_msg(3000, 3000);
        raw_connect(e, 0); /* connection 1: the slow request goes here */
        swap_conn(e);
        raw_connect(e, 0); /* connection 2: a request arriving in pieces */
        raw_open(e, &b, "/t.S/Size");
        raw_send(e, &b, msg, 5 + 10, false);
        assert_true(run_until_size(e, kdev_rpc__server_request_bytes, 1024, 5000));
        /* connection 1 asks for /t.S/Block and, in the same moment,
         * connection 2 sends 2000 more bytes */
        swap_conn(e);
        raw_request(e, &a, "/t.S/Block", NULL, NULL, HI, sizeof(HI));
        client_flush(e);
        swap_conn(e);
        raw_send(e, &b, msg + 5 + 10, 2000, false);
        client_flush(e);
        uv_run(&e->loop, UV_RUN_NOWAIT); /* the handler blocks 400 ms here */
        for (int i = 0; i < 20; i++)
                pump(e);
        assert_int_equal(e->handled, 1);
        assert_int_equal(kdev_rpc__server_stalls(e->srv), 0);
        assert_false(b.closed);
        raw_send(e, &b, msg + 5 + 2010, 990, true);
        assert_true(pump_until(e, &b.closed, 5000));
        assert_string_equal(b.trailers, "grpc-status: 0\n");
        assert_int_equal(b.data_len, 9);
        assert_memory_equal(b.data + 5, "3000", 4);
        swap_conn(e);
        assert_true(pump_until(e, &a.closed, 5000));
        assert_string_equal(a.trailers, "grpc-status: 0\n");
        assert_int_equal(kdev_rpc__server_stalls(e->srv), 0);
        free(msg);
}

/* Request headers with bytes RFC 9113 forbids are refused before any
 * method runs: trailers-only, HTTP 400, INTERNAL naming the header. */
static void test_invalid_headers_refused(void **state)
{
        struct env *e = *state;
        raw_connect(e, 0);
        static const struct {
                const char *name;
                size_t nlen;
                const char *value;
                size_t vlen;
                const char *want;
        } cases[] = {
                { ":path", 5, "/t.S/Echo\0/evil", 15,
                  "invalid header \":path\": byte 9 of its value is 0x00 (values must not contain "
                  "NUL, CR, LF or other control characters)" },
                { ":path", 5, "/t.S/Echo\r\n", 11,
                  "invalid header \":path\": byte 9 of its value is 0x0d (values must not contain "
                  "NUL, CR, LF or other control characters)" },
                { "x-a", 3, "ok\nx-b: evil", 12,
                  "invalid header \"x-a\": byte 2 of its value is 0x0a (values must not contain "
                  "NUL, CR, LF or other control characters)" },
                { "x-a\0b", 5, "v", 1,
                  "invalid header name \"x-a\\x00b\" (header names are lower-case tokens)" },
                { "X-Evil", 6, "v", 1,
                  "invalid header name \"X-Evil\" (header names are lower-case tokens)" },
                { ":path", 5, "/t.S/Fail", 9, "invalid header \":path\": repeated" },
                { ":protocol", 9, "x", 1,
                  "invalid header \":protocol\": not a request pseudo-header" },
                /* connection-specific fields (RFC 9113 section 8.2.2) */
                { "connection", 10, "keep-alive", 10,
                  "invalid header \"connection\": connection-specific header fields are not "
                  "allowed in HTTP/2" },
                { "keep-alive", 10, "timeout=5", 9,
                  "invalid header \"keep-alive\": connection-specific header fields are not "
                  "allowed in HTTP/2" },
                { "proxy-connection", 16, "x", 1,
                  "invalid header \"proxy-connection\": connection-specific header fields are "
                  "not allowed in HTTP/2" },
                { "transfer-encoding", 17, "chunked", 7,
                  "invalid header \"transfer-encoding\": connection-specific header fields are "
                  "not allowed in HTTP/2" },
                { "upgrade", 7, "h2c", 3,
                  "invalid header \"upgrade\": connection-specific header fields are not "
                  "allowed in HTTP/2" },
                { "te", 2, "gzip", 4,
                  "invalid header \"te\": value \"gzip\" (only \"trailers\" is allowed)" },
        };
        for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
                struct rstream st;
                memset(&st, 0, sizeof(st));
                bool pseudo = cases[i].name[0] == ':';
                bool path = pseudo && !strcmp(cases[i].name, ":path") && cases[i].vlen != 9;
                nghttp2_nv nva[8];
                size_t n = 0;
                nva[n++] = (nghttp2_nv)H(":method", "POST");
                nva[n++] = (nghttp2_nv)H(":scheme", "http");
                /* NO_COPY: nghttp2 would lower-case a name it copies */
                nghttp2_nv bad = { (uint8_t *)cases[i].name, (uint8_t *)cases[i].value,
                                   cases[i].nlen, cases[i].vlen,
                                   NGHTTP2_NV_FLAG_NO_COPY_NAME | NGHTTP2_NV_FLAG_NO_COPY_VALUE };
                if (path) {
                        nva[n++] = bad;
                } else {
                        nva[n++] = (nghttp2_nv)H(":path", "/t.S/Echo");
                        if (pseudo)
                                nva[n++] = bad;
                }
                nva[n++] = (nghttp2_nv)H(":authority", "localhost");
                nva[n++] = (nghttp2_nv)H("content-type", "application/grpc");
                if (!pseudo)
                        nva[n++] = bad;
                st.body = HI;
                st.body_len = sizeof(HI);
                nghttp2_data_provider prd = { .source.ptr = &st, .read_callback = r_body };
                st.id = nghttp2_submit_request(e->s, NULL, nva, n, &prd, &st);
                assert_true(st.id > 0);
                assert_true(pump_until(e, &st.closed, 5000));
                char want[512];
                char *enc = kdev_rpc_percent_encode(cases[i].want);
                snprintf(want, sizeof(want),
                         ":status: 400\ncontent-type: application/grpc\n"
                         "grpc-accept-encoding: identity\ngrpc-status: 13\ngrpc-message: %s\n",
                         enc);
                free(enc);
                assert_string_equal(st.hdrs, want);
                assert_true(st.headers_end_stream);
        }
        /* a pseudo-header after a regular one */
        {
                struct rstream st;
                memset(&st, 0, sizeof(st));
                nghttp2_nv nva[] = {
                        H(":method", "POST"), H(":scheme", "http"), H("content-type",
                                                                       "application/grpc"),
                        H(":path", "/t.S/Echo"),
                };
                st.id = nghttp2_submit_request(e->s, NULL, nva, 4, NULL, &st);
                assert_true(pump_until(e, &st.closed, 5000));
                assert_string_equal(st.hdrs, ":status: 400\ncontent-type: application/grpc\n"
                                             "grpc-accept-encoding: identity\ngrpc-status: 13\n"
                                             "grpc-message: invalid header \":path\": "
                                             "pseudo-header after a regular header\n");
        }
        assert_int_equal(e->handled, 0);
        /* the connection still serves good requests */
        struct rstream ok;
        raw_request(e, &ok, "/t.S/Echo", NULL, NULL, HI, sizeof(HI));
        assert_true(pump_until(e, &ok.closed, 5000));
        assert_string_equal(ok.trailers, "grpc-status: 0\n");
        assert_int_equal(e->handled, 1);
}

static const struct kdev_rpc_server_options conncap_opts = { .max_connections = 2 };

static int plain_connect(const char *path)
{
        int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        struct sockaddr_un sa = { .sun_family = AF_UNIX };
        strcpy(sa.sun_path, path);
        assert_int_equal(connect(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
        return fd;
}

/* Runs the server loop and reads |fd| until |want| bytes (or EOF when
 * |until_eof|). Returns the bytes read. */
static size_t run_read(struct env *e, int fd, uint8_t *buf, size_t want, bool until_eof,
                       bool *eof)
{
        size_t got = 0;
        uint64_t end = uv_hrtime() + 5000000000u;
        *eof = false;
        while (uv_hrtime() < end && (until_eof ? !*eof : got < want)) {
                uv_run(&e->loop, UV_RUN_NOWAIT);
                ssize_t n = recv(fd, buf + got, want - got, MSG_DONTWAIT);
                if (n == 0)
                        *eof = true;
                else if (n > 0)
                        got += (size_t)n;
                else
                        usleep(200);
        }
        return got;
}

/* Connections over max_connections get SETTINGS + GOAWAY(ENHANCE_YOUR_CALM,
 * "too many connections") and EOF; once one closes, a new one is served. */
static void test_connection_cap(void **state)
{
        struct env *e = *state;
        static const uint8_t bye[] = {
                0, 0, 0, 4, 0, 0, 0, 0, 0,        /* SETTINGS, empty */
                0, 0, 28, 7, 0, 0, 0, 0, 0,       /* GOAWAY */
                0, 0, 0, 0, 0, 0, 0, 0x0b,        /* last stream 0, ENHANCE_YOUR_CALM */
                't', 'o', 'o', ' ', 'm', 'a', 'n', 'y', ' ', 'c', 'o', 'n', 'n', 'e', 'c', 't',
                'i', 'o', 'n', 's',
        };
        int fd[4];
        for (int i = 0; i < 3; i++)
                fd[i] = plain_connect(e->sock);
        uint8_t buf[256];
        bool eof;
        size_t n = run_read(e, fd[2], buf, sizeof(buf), true, &eof);
        assert_true(eof);
        assert_int_equal(n, sizeof(bye));
        assert_memory_equal(buf, bye, sizeof(bye));
        assert_int_equal(kdev_rpc__server_connections(e->srv), 2);
        close(fd[2]);
        /* the first two got the real server preface: SETTINGS with 2 entries */
        for (int i = 0; i < 2; i++) {
                n = run_read(e, fd[i], buf, 9, false, &eof);
                assert_int_equal(n, 9);
                assert_memory_equal(buf, "\0\0\x0c\x04\0\0\0\0\0", 9);
        }
        close(fd[0]);
        assert_true(run_until_size(e, kdev_rpc__server_connections, 1, 5000));
        fd[3] = plain_connect(e->sock);
        n = run_read(e, fd[3], buf, 9, false, &eof);
        assert_int_equal(n, 9);
        assert_memory_equal(buf, "\0\0\x0c\x04\0\0\0\0\0", 9);
        assert_int_equal(kdev_rpc__server_connections(e->srv), 2);
        close(fd[1]);
        close(fd[3]);
}

/* A streaming call whose peer stopped reading: the server sends until its
 * socket and write queue are full (later messages coalesce). */
static void fill_server_queue(struct env *e, struct rstream *st)
{
        raw_connect(e, 1u << 24);
        nghttp2_submit_window_update(e->s, NGHTTP2_FLAG_NONE, 0, 1 << 24);
        raw_request(e, st, "/t.S/Hold", NULL, NULL, HI, sizeof(HI));
        assert_true(pump_until_int(e, &e->handled, 1, 5000));
        e->reading = false;
        static uint8_t msg[16384];
        for (int i = 0; i < 512; i++) { /* 8 MiB offered */
                memset(msg, 'a' + i % 26, sizeof(msg));
                assert_int_equal(kdev_rpc_call_send(e->held, msg, sizeof(msg)), 0);
                uv_run(&e->loop, UV_RUN_NOWAIT);
        }
}

/* While the peer does not read, the server does not read it either: a
 * request sent meanwhile is handled only once the peer reads again. */
static void test_reading_paused_for_non_reader(void **state)
{
        struct env *e = *state;
        struct rstream st, echo;
        fill_server_queue(e, &st);
        raw_request(e, &echo, "/t.S/Echo", NULL, NULL, HI, sizeof(HI));
        uint64_t end = uv_hrtime() + 300000000u;
        while (uv_hrtime() < end) {
                pump(e);
                usleep(1000);
        }
        assert_int_equal(e->handled, 1);
        e->reading = true;
        e->consume = true;
        assert_true(pump_until(e, &echo.closed, 10000));
        assert_string_equal(echo.trailers, "grpc-status: 0\n");
        assert_int_equal(e->handled, 2);
        assert_true(st.data_total >= 16384 * 8);
}

/* Closing the server while frames wait for a peer that is not reading:
 * they are written before the connection closes, GOAWAY last. */
static void test_goaway_flushed_behind_pending_data(void **state)
{
        struct env *e = *state;
        struct rstream st;
        fill_server_queue(e, &st);
        kdev_rpc_server_close(e->srv, srv_done, e);
        e->srv = NULL;
        assert_int_equal(e->cancels, 1);
        uint64_t end = uv_hrtime() + 100000000u;
        while (uv_hrtime() < end) {
                uv_run(&e->loop, UV_RUN_NOWAIT);
                usleep(1000);
        }
        assert_false(e->srv_closed); /* still waiting for the peer to read */
        e->reading = true;
        e->consume = true;
        assert_true(pump_until(e, &e->goaway, 5000));
        assert_int_equal(e->goaway_err, NGHTTP2_NO_ERROR);
        assert_true(st.data_total > 256 * 1024);
        assert_true(pump_until(e, &e->eof, 5000));
        assert_true(pump_until(e, &e->srv_closed, 5000));
}

/* A peer that never reads holds a closing connection for about
 * KDEV_RPC_CLOSE_FLUSH_MS only. */
static void test_close_flush_bounded(void **state)
{
        struct env *e = *state;
        struct rstream st;
        fill_server_queue(e, &st);
        uint64_t t0 = uv_hrtime();
        kdev_rpc_server_close(e->srv, srv_done, e);
        e->srv = NULL;
        assert_true(pump_until(e, &e->srv_closed, 10000));
        uint64_t ms = (uv_hrtime() - t0) / 1000000u;
        assert_true(ms >= KDEV_RPC_CLOSE_FLUSH_MS - 50);
        assert_true(ms < KDEV_RPC_CLOSE_FLUSH_MS + 4000);
}

int main(void)
{
        const struct CMUnitTest tests[] = {
                cmocka_unit_test_setup_teardown(test_unary_response_framing, setup, teardown),
                cmocka_unit_test_setup_teardown(test_socket_path_authority_accepted, setup, teardown),
                cmocka_unit_test_setup_teardown(test_trailers_only_errors, setup, teardown),
                cmocka_unit_test_setup_teardown(test_content_types, setup, teardown),
                cmocka_unit_test_setup_teardown(test_compression_refused, setup, teardown),
                cmocka_unit_test_setup_teardown(test_server_deadline, setup, teardown),
                cmocka_unit_test_setup_teardown(test_rst_stream_cancels, setup, teardown),
                cmocka_unit_test_setup_teardown(test_goaway_on_close, setup, teardown),
                cmocka_unit_test_setup_teardown(test_backpressure_coalesces, setup, teardown),
                cmocka_unit_test_setup_teardown(test_max_concurrent_streams, setup, teardown),
                cmocka_unit_test_prestate_setup_teardown(test_request_budgets, setup, teardown,
                                                         (void *)&budget_opts),
                cmocka_unit_test_setup_teardown(test_declared_length_costs_nothing, setup,
                                                teardown),
                cmocka_unit_test_prestate_setup_teardown(test_priority_share, setup, teardown,
                                                         (void *)&share_opts),
                cmocka_unit_test_prestate_setup_teardown(test_stalled_requests_released, setup,
                                                         teardown, (void *)&stall_opts),
                cmocka_unit_test_prestate_setup_teardown(test_server_blocked_is_no_stall, setup,
                                                         teardown, (void *)&stall_opts),
                cmocka_unit_test_setup_teardown(test_invalid_headers_refused, setup, teardown),
                cmocka_unit_test_prestate_setup_teardown(test_connection_cap, setup, teardown,
                                                         (void *)&conncap_opts),
                cmocka_unit_test_setup_teardown(test_reading_paused_for_non_reader, setup,
                                                teardown),
                cmocka_unit_test_setup_teardown(test_goaway_flushed_behind_pending_data, setup,
                                                teardown),
                cmocka_unit_test_setup_teardown(test_close_flush_bounded, setup, teardown),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
