/* gRPC client over HTTP/2 (nghttp2) on a Unix socket, one libuv loop.
 *
 * The client dials lazily: the first call creates a connection; calls made
 * while it connects wait and are submitted once it is up. A connection that
 * ends (EOF, error, GOAWAY) finishes its calls with UNAVAILABLE and is
 * forgotten, so the next call dials again. Status rules follow
 * grpc/grpc doc/PROTOCOL-HTTP2.md and doc/http-grpc-status-mapping.md.
 */
#include "rpc/rpc_internal.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/un.h>

struct cconn;

struct kdev_rpc_client {
        uv_loop_t *loop;
        char *path;
        size_t max_recv;
        size_t max_send;
        nghttp2_session_callbacks *cbs;
        struct cconn *cur;   /* connection new calls go to, or NULL */
        struct cconn *conns; /* every connection not yet freed */
        struct kdev_rpc_client_call *deferred; /* calls failed before starting */
        uv_idle_t defer_idle;
        bool defer_closed;
        bool closing;
};

struct cconn {
        struct kdev_rpc_conn c;
        struct kdev_rpc_client *cl;
        struct cconn *prev, *next;
        uv_connect_t creq;
        struct kdev_rpc_client_call *calls;
        bool connected;
        bool gone;
};

struct kdev_rpc_client_call {
        struct kdev_rpc_client *cl;
        struct cconn *cc;
        struct kdev_rpc_client_call *prev, *next;
        int32_t stream_id;
        bool done;
        int busy; /* > 0 while a user callback for this call runs */
        bool unary;  /* exactly one response message expected */
        size_t nmsg; /* response messages received */
        char *method;
        struct kdev_rpc_outq req; /* framed request, not yet sent */
        uint64_t timeout_ms;
        uv_timer_t *timer;
        kdev_rpc_message_fn on_message;
        kdev_rpc_done_fn on_done;
        void *user_data;

        /* response */
        int http_status;
        int grpc_status; /* -1 until seen */
        char *grpc_message;
        bool ct_seen, ct_grpc;
        bool enc_bad;
        uint8_t prefix[KDEV_RPC_PREFIX_LEN];
        size_t prefix_got;
        uint8_t *msg;
        size_t msg_len, msg_got;
        bool in_msg;

        /* deferred completion */
        int def_status;
        char *def_msg;
};

static void client_maybe_free(struct kdev_rpc_client *cl);
static void cconn_kill(struct cconn *cc, int uv_status);

/* ---------------------------------------------------------------------- */
/* calls                                                                   */
/* ---------------------------------------------------------------------- */

static void call_free(struct kdev_rpc_client_call *call)
{
        kdev_rpc__timer_close(&call->timer);
        free(call->method);
        kdev_rpc__outq_free(&call->req);
        free(call->grpc_message);
        free(call->msg);
        free(call->def_msg);
        free(call);
}

static void call_unlink(struct kdev_rpc_client_call *call)
{
        struct cconn *cc = call->cc;
        if (!cc)
                return;
        KDEV_RPC_LIST_UNLINK(cc->calls, call);
}

/* Ends |call| exactly once: detaches it from its stream (RST_STREAM CANCEL
 * when |rst|), runs on_done and frees it, unless a callback of the call is
 * running (then the caller of that callback frees it). */
static void call_complete(struct kdev_rpc_client_call *call, int status, const char *message,
                          bool rst)
{
        if (call->done)
                return;
        call->done = true;
        struct cconn *cc = call->cc;
        call_unlink(call);
        if (cc && call->stream_id > 0 && cc->c.session) {
                nghttp2_session_set_stream_user_data(cc->c.session, call->stream_id, NULL);
                if (rst && !cc->gone) {
                        nghttp2_submit_rst_stream(cc->c.session, NGHTTP2_FLAG_NONE,
                                                  call->stream_id, NGHTTP2_CANCEL);
                        kdev_rpc__conn_flush(&cc->c);
                }
        }
        kdev_rpc__timer_close(&call->timer);
        call->busy++;
        call->on_done(call, status, message ? message : "", call->user_data);
        call->busy--;
        if (call->busy == 0)
                call_free(call);
        /* a connection that got GOAWAY closes once its last call is done */
        if (cc && cc->c.session && !cc->gone && !cc->calls &&
            !nghttp2_session_want_read(cc->c.session))
                cconn_kill(cc, UV_EOF);
}

static void call_attach(struct cconn *cc, struct kdev_rpc_client_call *call)
{
        call->cc = cc;
        call->next = NULL;
        struct kdev_rpc_client_call **pp = &cc->calls, *prev = NULL;
        while (*pp) {
                prev = *pp;
                pp = &(*pp)->next;
        }
        call->prev = prev;
        *pp = call;
}

static ssize_t cli_data_read(nghttp2_session *s, int32_t stream_id, uint8_t *buf, size_t length,
                             uint32_t *flags, nghttp2_data_source *src, void *ud)
{
        (void)src;
        (void)ud;
        struct kdev_rpc_client_call *call = nghttp2_session_get_stream_user_data(s, stream_id);
        if (!call)
                return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
        size_t n = kdev_rpc__outq_read(&call->req, buf, length);
        if (kdev_rpc__outq_unsent(&call->req) == 0)
                *flags |= NGHTTP2_DATA_FLAG_EOF;
        return (ssize_t)n;
}

static int call_submit(struct kdev_rpc_client_call *call)
{
        struct cconn *cc = call->cc;
        char tmo[24];
        nghttp2_nv nva[9] = {
                KDEV_RPC_NV(":method", "POST"),
                KDEV_RPC_NV(":scheme", "http"),
                KDEV_RPC_NV(":path", call->method),
                KDEV_RPC_NV(":authority", "localhost"),
                KDEV_RPC_NV("te", "trailers"),
                KDEV_RPC_NV("content-type", "application/grpc"),
                KDEV_RPC_NV("user-agent", "kdev-rpc/0.1"),
                KDEV_RPC_NV("grpc-accept-encoding", "identity"),
        };
        size_t n = 8;
        if (call->timeout_ms > 0) {
                kdev_rpc__timeout_format(call->timeout_ms, tmo, sizeof(tmo));
                nva[n++] = (nghttp2_nv)KDEV_RPC_NV("grpc-timeout", tmo);
        }
        nghttp2_data_provider prd = { .source.ptr = call, .read_callback = cli_data_read };
        int32_t id = nghttp2_submit_request(cc->c.session, NULL, nva, n, &prd, call);
        if (id < 0)
                return -EIO;
        call->stream_id = id;
        return 0;
}

static void call_timeout_cb(uv_timer_t *t)
{
        struct kdev_rpc_client_call *call = t->data;
        call_complete(call, KDEV_RPC_DEADLINE_EXCEEDED, "deadline exceeded", true);
}

/* ---------------------------------------------------------------------- */
/* response parsing                                                        */
/* ---------------------------------------------------------------------- */

#define HDR_IS(lit) (namelen == sizeof(lit) - 1 && memcmp(name, lit, namelen) == 0)

static int on_header(nghttp2_session *s, const nghttp2_frame *frame, const uint8_t *name,
                     size_t namelen, const uint8_t *value, size_t valuelen, uint8_t flags,
                     void *ud)
{
        (void)flags;
        struct cconn *cc = ud;
        if (cc->gone)
                return NGHTTP2_ERR_CALLBACK_FAILURE;
        if (frame->hd.type != NGHTTP2_HEADERS)
                return 0;
        struct kdev_rpc_client_call *call =
                nghttp2_session_get_stream_user_data(s, frame->hd.stream_id);
        if (!call)
                return 0;
        bool first = frame->headers.cat == NGHTTP2_HCAT_RESPONSE;
        if (first && HDR_IS(":status")) {
                call->http_status = kdev_rpc__parse_uint(value, valuelen, 999);
        } else if (first && HDR_IS("content-type")) {
                call->ct_seen = true;
                bool ok = kdev_rpc__content_type_ok((const char *)value, valuelen, &call->ct_grpc);
                (void)ok; /* any application/grpc subtype is fine on responses */
        } else if (first && HDR_IS("grpc-encoding")) {
                call->enc_bad = !(valuelen == 8 && memcmp(value, "identity", 8) == 0);
        } else if (HDR_IS("grpc-status")) {
                call->grpc_status = kdev_rpc__status_parse(value, valuelen);
        } else if (HDR_IS("grpc-message")) {
                free(call->grpc_message);
                call->grpc_message = kdev_rpc_percent_decode((const char *)value, valuelen);
        }
        return 0;
}

static int on_frame_recv(nghttp2_session *s, const nghttp2_frame *frame, void *ud)
{
        struct cconn *cc = ud;
        if (cc->gone)
                return NGHTTP2_ERR_CALLBACK_FAILURE;
        if (frame->hd.type == NGHTTP2_GOAWAY) {
                /* no new calls here; the next call dials a new connection */
                if (cc->cl->cur == cc)
                        cc->cl->cur = NULL;
                return 0;
        }
        if (frame->hd.type != NGHTTP2_HEADERS || frame->headers.cat != NGHTTP2_HCAT_RESPONSE)
                return 0;
        struct kdev_rpc_client_call *call =
                nghttp2_session_get_stream_user_data(s, frame->hd.stream_id);
        if (!call || call->http_status != 200 || call->grpc_status >= 0)
                return 0; /* other HTTP statuses and trailers-only: decided at close */
        if (!call->ct_grpc) {
                call_complete(call, KDEV_RPC_INTERNAL,
                              call->ct_seen ? "response content-type is not application/grpc"
                                            : "response has no content-type",
                              true);
        } else if (call->enc_bad) {
                call_complete(call, KDEV_RPC_UNIMPLEMENTED,
                              "compressed messages are not supported (response grpc-encoding)",
                              true);
        }
        return 0;
}

/* Delivers one message; returns false when the call ended meanwhile (the
 * call is then freed). */
static bool call_deliver(struct kdev_rpc_client_call *call, const uint8_t *m, size_t len)
{
        if (++call->nmsg > 1 && call->unary) {
                call_complete(call, KDEV_RPC_INTERNAL,
                              "unary call received more than one response message", true);
                return false;
        }
        if (!call->on_message)
                return true;
        call->busy++;
        call->on_message(call, m, len, call->user_data);
        call->busy--;
        if (call->done) {
                if (call->busy == 0)
                        call_free(call);
                return false;
        }
        return true;
}

static void call_feed(struct kdev_rpc_client_call *call, const uint8_t *d, size_t n)
{
        char buf[160];
        while (n > 0) {
                if (!call->in_msg) {
                        uint8_t flags;
                        uint32_t len;
                        if (!kdev_rpc__prefix_take(call->prefix, &call->prefix_got, &d, &n, &flags,
                                                   &len))
                                return;
                        int st = kdev_rpc__prefix_check(flags, len, call->cl->max_recv, true, buf,
                                                        sizeof(buf));
                        if (st != KDEV_RPC_OK) {
                                call_complete(call, st, buf, true);
                                return;
                        }
                        if (n >= len) { /* whole message in this chunk: no copy */
                                call->prefix_got = 0;
                                if (!call_deliver(call, d, len))
                                        return;
                                d += len;
                                n -= len;
                                continue;
                        }
                        call->msg = malloc(len);
                        if (!call->msg) {
                                call_complete(call, KDEV_RPC_RESOURCE_EXHAUSTED,
                                              "out of memory", true);
                                return;
                        }
                        call->msg_len = len;
                        call->msg_got = 0;
                        call->in_msg = true;
                        continue;
                }
                if (kdev_rpc__body_take(call->msg, &call->msg_got, call->msg_len, &d, &n)) {
                        uint8_t *m = call->msg;
                        call->msg = NULL;
                        call->in_msg = false;
                        call->prefix_got = 0;
                        bool alive = call_deliver(call, m, call->msg_len);
                        free(m);
                        if (!alive)
                                return;
                }
        }
}

static int on_data_chunk_recv(nghttp2_session *s, uint8_t flags, int32_t stream_id,
                              const uint8_t *data, size_t len, void *ud)
{
        (void)flags;
        struct cconn *cc = ud;
        if (cc->gone)
                return NGHTTP2_ERR_CALLBACK_FAILURE;
        struct kdev_rpc_client_call *call = nghttp2_session_get_stream_user_data(s, stream_id);
        if (call)
                call_feed(call, data, len);
        return 0;
}

static int on_stream_close(nghttp2_session *s, int32_t stream_id, uint32_t error_code, void *ud)
{
        (void)ud;
        struct kdev_rpc_client_call *call = nghttp2_session_get_stream_user_data(s, stream_id);
        if (!call)
                return 0;
        char buf[160];
        int status;
        const char *msg;
        if (call->grpc_status >= 0) {
                status = call->grpc_status;
                msg = call->grpc_message ? call->grpc_message : "";
                if (status == KDEV_RPC_OK && (call->in_msg || call->prefix_got)) {
                        status = KDEV_RPC_INTERNAL;
                        msg = "stream ended inside a message";
                } else if (status == KDEV_RPC_OK && call->unary && call->nmsg == 0) {
                        /* grpc-go: a unary call needs its one message */
                        status = KDEV_RPC_INTERNAL;
                        msg = "unary call returned no message";
                }
        } else if (error_code != NGHTTP2_NO_ERROR) {
                status = kdev_rpc__status_from_h2(error_code);
                snprintf(buf, sizeof(buf), "stream reset: %s",
                         nghttp2_http2_strerror(error_code));
                msg = buf;
        } else if (call->http_status != 200) {
                status = kdev_rpc__status_from_http(call->http_status);
                snprintf(buf, sizeof(buf), "unexpected HTTP status %d", call->http_status);
                msg = buf;
        } else {
                status = KDEV_RPC_INTERNAL;
                msg = "server closed the stream without sending a grpc-status";
        }
        call_complete(call, status, msg, false);
        return 0;
}

static int on_frame_not_send(nghttp2_session *s, const nghttp2_frame *frame, int lib_error,
                             void *ud)
{
        (void)s;
        struct cconn *cc = ud;
        if (frame->hd.type != NGHTTP2_HEADERS || cc->gone)
                return 0;
        /* a request that could not start (GOAWAY received, ...): the stream
         * never opened, so find the call by id */
        for (struct kdev_rpc_client_call *call = cc->calls; call; call = call->next) {
                if (call->stream_id == frame->hd.stream_id) {
                        char buf[160];
                        snprintf(buf, sizeof(buf), "request not sent: %s",
                                 nghttp2_strerror(lib_error));
                        call_complete(call, KDEV_RPC_UNAVAILABLE, buf, false);
                        break;
                }
        }
        return 0;
}

/* ---------------------------------------------------------------------- */
/* connections                                                             */
/* ---------------------------------------------------------------------- */

static void cconn_closed(struct kdev_rpc_conn *c)
{
        struct cconn *cc = c->owner;
        struct kdev_rpc_client *cl = cc->cl;
        KDEV_RPC_LIST_UNLINK(cl->conns, cc);
        nghttp2_session_del(c->session);
        free(cc);
        client_maybe_free(cl);
}

/* Ends the connection: its calls finish with UNAVAILABLE. */
static void cconn_kill(struct cconn *cc, int uv_status)
{
        if (cc->gone)
                return;
        cc->gone = true;
        struct kdev_rpc_client *cl = cc->cl;
        if (cl->cur == cc)
                cl->cur = NULL;
        kdev_rpc__conn_close(&cc->c, uv_status == UV_EPROTO);
        char msg[600];
        if (!cc->connected)
                snprintf(msg, sizeof(msg), "connect unix:%s: %s", cl->path, strerror(-uv_status));
        else if (uv_status == UV_EOF || uv_status == UV_ECONNRESET || uv_status == UV_EPIPE)
                /* one text for the one event, whichever way the kernel tells it:
                 * EOF on read, ECONNRESET when the peer closed with our bytes
                 * still unread, EPIPE on a write after it closed */
                snprintf(msg, sizeof(msg), "connection to unix:%s closed by the peer", cl->path);
        else
                snprintf(msg, sizeof(msg), "connection to unix:%s lost: %s", cl->path,
                         uv_status == UV_EPROTO ? "HTTP/2 protocol error" : strerror(-uv_status));
        struct kdev_rpc_client_call *call;
        while ((call = cc->calls))
                call_complete(call, KDEV_RPC_UNAVAILABLE, msg, false);
}

static void cconn_lost(struct kdev_rpc_conn *c, int uv_status)
{
        cconn_kill(c->owner, uv_status);
}

static const struct kdev_rpc_conn_ops cconn_ops = {
        .lost = cconn_lost,
        .closed = cconn_closed,
};

static void cconn_connected(uv_connect_t *req, int status)
{
        struct cconn *cc = req->data;
        if (cc->gone)
                return;
        if (status < 0) {
                cconn_kill(cc, status);
                return;
        }
        cc->connected = true;
        nghttp2_settings_entry iv[] = {
                { NGHTTP2_SETTINGS_ENABLE_PUSH, 0 },
        };
        if (nghttp2_session_client_new(&cc->c.session, cc->cl->cbs, cc) != 0 ||
            nghttp2_submit_settings(cc->c.session, NGHTTP2_FLAG_NONE, iv, 1) != 0) {
                cconn_kill(cc, UV_ENOMEM);
                return;
        }
        /* submit the calls that waited for the connection */
        for (struct kdev_rpc_client_call *call = cc->calls, *next; call; call = next) {
                next = call->next;
                if (call_submit(call) < 0) {
                        call_complete(call, KDEV_RPC_INTERNAL, "cannot submit the request",
                                      false);
                        if (cc->gone)
                                return;
                }
        }
        if (kdev_rpc__conn_start(&cc->c) < 0) {
                cconn_kill(cc, UV_EIO);
                return;
        }
        kdev_rpc__conn_flush(&cc->c);
}

static struct cconn *cconn_new(struct kdev_rpc_client *cl)
{
        struct cconn *cc = calloc(1, sizeof(*cc));
        if (!cc)
                return NULL;
        cc->cl = cl;
        if (kdev_rpc__conn_init(&cc->c, cl->loop, &cconn_ops, cc) < 0) {
                free(cc);
                return NULL;
        }
        KDEV_RPC_LIST_PUSH(cl->conns, cc);
        cc->creq.data = cc;
        /* libuv reports connect errors through the callback, never here */
        uv_pipe_connect(&cc->creq, &cc->c.pipe, cl->path, cconn_connected);
        return cc;
}

/* ---------------------------------------------------------------------- */
/* client                                                                  */
/* ---------------------------------------------------------------------- */

static void defer_cb(uv_idle_t *h)
{
        struct kdev_rpc_client *cl = h->data;
        uv_idle_stop(h);
        struct kdev_rpc_client_call *call;
        while ((call = cl->deferred)) {
                cl->deferred = call->next;
                call->next = NULL;
                call_complete(call, call->def_status, call->def_msg, false);
        }
}

static void call_defer(struct kdev_rpc_client_call *call, int status, const char *msg)
{
        struct kdev_rpc_client *cl = call->cl;
        call->def_status = status;
        call->def_msg = strdup(msg);
        call->next = NULL;
        struct kdev_rpc_client_call **pp = &cl->deferred;
        while (*pp)
                pp = &(*pp)->next;
        *pp = call;
        uv_idle_start(&cl->defer_idle, defer_cb);
}

struct kdev_rpc_client *kdev_rpc_client_new(uv_loop_t *loop, const char *path,
                                            const struct kdev_rpc_client_options *opts)
{
        struct kdev_rpc_client *cl = calloc(1, sizeof(*cl));
        if (!cl)
                return NULL;
        cl->loop = loop;
        cl->path = strdup(path ? path : "");
        cl->max_recv = opts && opts->max_recv_message ? opts->max_recv_message
                                                      : KDEV_RPC_DEFAULT_MAX_MESSAGE;
        cl->max_send = opts && opts->max_send_message ? opts->max_send_message
                                                      : KDEV_RPC_DEFAULT_MAX_MESSAGE;
        if (!cl->path || nghttp2_session_callbacks_new(&cl->cbs) != 0) {
                free(cl->path);
                free(cl);
                return NULL;
        }
        nghttp2_session_callbacks_set_on_header_callback(cl->cbs, on_header);
        nghttp2_session_callbacks_set_on_frame_recv_callback(cl->cbs, on_frame_recv);
        nghttp2_session_callbacks_set_on_data_chunk_recv_callback(cl->cbs, on_data_chunk_recv);
        nghttp2_session_callbacks_set_on_stream_close_callback(cl->cbs, on_stream_close);
        nghttp2_session_callbacks_set_on_frame_not_send_callback(cl->cbs, on_frame_not_send);
        uv_idle_init(loop, &cl->defer_idle);
        cl->defer_idle.data = cl;
        return cl;
}

static struct kdev_rpc_client_call *call_start(struct kdev_rpc_client *cl, bool unary,
                                               const char *method, const uint8_t *req,
                                               size_t len, uint64_t timeout_ms,
                                               kdev_rpc_message_fn on_message,
                                               kdev_rpc_done_fn on_done, void *user_data,
                                               struct kdev_err *err)
{
        if (!cl || !method || !on_done || (len && !req)) {
                kdev_err_set(err, EINVAL, "rpc call: invalid arguments");
                return NULL;
        }
        if (cl->closing) {
                kdev_err_set(err, ESHUTDOWN, "rpc call %s: client is closing", method);
                return NULL;
        }
        struct kdev_rpc_client_call *call = calloc(1, sizeof(*call));
        if (!call) {
                kdev_err_set(err, ENOMEM, "rpc call %s: out of memory", method);
                return NULL;
        }
        call->cl = cl;
        call->unary = unary;
        call->grpc_status = -1;
        call->timeout_ms = timeout_ms;
        call->on_message = on_message;
        call->on_done = on_done;
        call->user_data = user_data;
        call->method = strdup(method);
        if (!call->method)
                goto nomem;

        char msg[600];
        if (len > cl->max_send) {
                kdev_rpc__send_too_large(msg, sizeof(msg), len, cl->max_send);
                call_defer(call, KDEV_RPC_RESOURCE_EXHAUSTED, msg);
                return call;
        }
        call->req.buf = kdev_rpc__frame(req, len);
        if (!call->req.buf)
                goto nomem;
        call->req.len = KDEV_RPC_PREFIX_LEN + len;

        if (strlen(cl->path) >= sizeof(((struct sockaddr_un *)0)->sun_path)) {
                snprintf(msg, sizeof(msg), "connect unix:%s: %s", cl->path,
                         strerror(ENAMETOOLONG));
                call_defer(call, KDEV_RPC_UNAVAILABLE, msg);
                return call;
        }
        if (timeout_ms > 0) {
                call->timer = kdev_rpc__timer_new(cl->loop, call);
                if (!call->timer)
                        goto nomem;
        }
        struct cconn *cc = cl->cur;
        if (!cc) {
                cc = cconn_new(cl);
                if (!cc)
                        goto nomem;
                cl->cur = cc;
        }
        call_attach(cc, call);
        if (cc->connected && call_submit(call) < 0) {
                call_unlink(call);
                kdev_err_set(err, EIO, "rpc call %s: cannot submit the request", method);
                call_free(call);
                return NULL;
        }
        if (call->timer)
                uv_timer_start(call->timer, call_timeout_cb, timeout_ms, 0);
        kdev_rpc__conn_flush(&cc->c);
        return call;
nomem:
        call_free(call);
        kdev_err_set(err, ENOMEM, "rpc call %s: out of memory", method);
        return NULL;
}

struct kdev_rpc_client_call *kdev_rpc_client_call(struct kdev_rpc_client *cl, const char *method,
                                                  const uint8_t *req, size_t len,
                                                  uint64_t timeout_ms,
                                                  kdev_rpc_message_fn on_message,
                                                  kdev_rpc_done_fn on_done, void *user_data,
                                                  struct kdev_err *err)
{
        return call_start(cl, false, method, req, len, timeout_ms, on_message, on_done, user_data,
                          err);
}

struct kdev_rpc_client_call *kdev_rpc_client_unary(struct kdev_rpc_client *cl, const char *method,
                                                   const uint8_t *req, size_t len,
                                                   uint64_t timeout_ms,
                                                   kdev_rpc_message_fn on_message,
                                                   kdev_rpc_done_fn on_done, void *user_data,
                                                   struct kdev_err *err)
{
        return call_start(cl, true, method, req, len, timeout_ms, on_message, on_done, user_data,
                          err);
}

void kdev_rpc_client_call_cancel(struct kdev_rpc_client_call *call)
{
        if (!call || call->done)
                return;
        if (!call->cc) {
                /* waiting in the deferred list */
                struct kdev_rpc_client_call **pp = &call->cl->deferred;
                while (*pp && *pp != call)
                        pp = &(*pp)->next;
                if (*pp)
                        *pp = call->next;
                call->next = NULL;
        }
        call_complete(call, KDEV_RPC_CANCELLED, "cancelled", true);
}

static void defer_closed(uv_handle_t *h)
{
        struct kdev_rpc_client *cl = h->data;
        cl->defer_closed = true;
        client_maybe_free(cl);
}

static void client_maybe_free(struct kdev_rpc_client *cl)
{
        if (!cl->closing || !cl->defer_closed || cl->conns)
                return;
        nghttp2_session_callbacks_del(cl->cbs);
        free(cl->path);
        free(cl);
}

void kdev_rpc_client_close(struct kdev_rpc_client *cl)
{
        if (!cl || cl->closing)
                return;
        cl->closing = true;
        struct kdev_rpc_client_call *call;
        while ((call = cl->deferred)) {
                cl->deferred = call->next;
                call->next = NULL;
                call_complete(call, KDEV_RPC_CANCELLED, "client closed", false);
        }
        for (struct cconn *cc = cl->conns; cc; cc = cc->next) {
                while ((call = cc->calls))
                        call_complete(call, KDEV_RPC_CANCELLED, "client closed", true);
                if (!cc->gone) {
                        cc->gone = true;
                        kdev_rpc__conn_close(&cc->c, cc->connected);
                }
        }
        cl->cur = NULL;
        uv_close((uv_handle_t *)&cl->defer_idle, defer_closed);
}

/* ---------------------------------------------------------------------- */
/* blocking helper                                                         */
/* ---------------------------------------------------------------------- */

struct sync_state {
        bool done;
        int status;
        char *message;
        uint8_t *resp;
        size_t resp_len;
        size_t nmsg;
        bool nomem;
};

static void sync_msg(struct kdev_rpc_client_call *call, const uint8_t *msg, size_t len, void *ud)
{
        (void)call;
        struct sync_state *st = ud;
        if (++st->nmsg > 1)
                return;
        st->resp = malloc(len ? len : 1);
        if (!st->resp) {
                st->nomem = true;
                return;
        }
        memcpy(st->resp, msg, len);
        st->resp_len = len;
}

static void sync_done(struct kdev_rpc_client_call *call, int status, const char *message, void *ud)
{
        (void)call;
        struct sync_state *st = ud;
        st->done = true;
        st->status = status;
        st->message = strdup(message);
}

int kdev_rpc_unary_sync(const char *path, const char *method, const uint8_t *req, size_t len,
                        uint64_t timeout_ms, uint8_t **resp, size_t *resp_len,
                        struct kdev_err *err)
{
        *resp = NULL;
        *resp_len = 0;
        uv_loop_t loop;
        int rv = uv_loop_init(&loop);
        if (rv < 0)
                return kdev_err_set(err, -rv, "rpc %s: loop: %s", method, uv_strerror(rv));
        struct kdev_rpc_client *cl = kdev_rpc_client_new(&loop, path, NULL);
        if (!cl) {
                uv_loop_close(&loop);
                return kdev_err_set(err, ENOMEM, "rpc %s: out of memory", method);
        }
        struct sync_state st = { 0 };
        /* a record of our own: the start's errno is needed even when the
         * caller passes no |err| */
        struct kdev_err start_err = { 0 };
        struct kdev_rpc_client_call *call =
                kdev_rpc_client_unary(cl, method, req, len, timeout_ms, sync_msg, sync_done, &st,
                                      &start_err);
        rv = call ? 0 : (start_err.code ? -start_err.code : -EIO);
        if (!call && err)
                *err = start_err;
        while (call && !st.done)
                uv_run(&loop, UV_RUN_ONCE);
        kdev_rpc_client_close(cl);
        uv_run(&loop, UV_RUN_DEFAULT);
        uv_loop_close(&loop);
        if (rv < 0) {
                free(st.resp);
                return rv;
        }
        if (st.nomem || !st.message) {
                free(st.resp);
                free(st.message);
                return kdev_err_set(err, ENOMEM, "rpc %s: out of memory", method);
        }
        if (st.status != KDEV_RPC_OK) {
                kdev_err_set(err, EREMOTEIO, "%s",
                             st.message && st.message[0] ? st.message
                                                         : kdev_rpc_status_name(st.status));
                free(st.resp);
                free(st.message);
                return st.status;
        }
        free(st.message);
        *resp = st.resp;
        *resp_len = st.resp_len;
        return KDEV_RPC_OK;
}
