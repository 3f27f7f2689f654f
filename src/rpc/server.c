/* gRPC server over HTTP/2 (nghttp2) on a Unix socket, one libuv loop.
 *
 * Follows grpc/grpc doc/PROTOCOL-HTTP2.md: requests are HEADERS (POST,
 * content-type application/grpc[+proto]) plus one length-prefixed message;
 * responses are HEADERS (:status 200), DATA messages and trailers
 * (grpc-status, percent-encoded grpc-message), or a single trailers-only
 * HEADERS frame for errors before any message.
 *
 * Lifetime of a call (struct kdev_rpc_call, one per HTTP/2 stream):
 *   RECV  request headers/body arriving, the handler has not seen it;
 *   LIVE  handed to the handler, which must finish it (or gets on_cancel);
 *   DONE  finished or cancelled: the handler's pointer is dead, the struct
 *         stays until nghttp2 closes the stream (its data may still drain).
 * Structs are freed on stream close or when the connection goes away.
 *
 * Memory bounds: at most KDEV_RPC_MAX_CONCURRENT_STREAMS streams per
 * connection (nghttp2 enforces the SETTINGS value), max_connections
 * connections, and request-message budgets per connection and per server.
 * What is reserved against the budgets is each request buffer's size, which
 * grows only as bytes arrive (the smallest power of two, at least 1 KiB,
 * holding the bytes received, never past the declared length): a prefix
 * declaring 4 MiB followed by nothing costs nothing, and holding N bytes of
 * budget takes sending more than N/2 (or 1 byte per KiB at the start). A buffer that cannot grow within
 * the budgets ends its call RESOURCE_EXHAUSTED. Large buffers are mapped
 * directly so that freeing them returns the memory to the system.
 *
 * Holding budget cannot last either: a call still receiving that makes no
 * progress for recv_stall_ms (5 s by default) is ended CANCELLED and its
 * buffer released; progress is the header block completing or another
 * STALL_MIN_PROGRESS (1 KiB) of request bytes, so a trickle does not count.
 * A sweep timer checks every quarter of the timeout; time the loop itself
 * was blocked (the sweep ran late) is not counted as anybody's stall. The first
 * stall on a connection is logged with the connection id.
 *
 * Priority share: while a priority connection is set
 * (kdev_rpc_server_set_priority_connection(), the device plugin sets
 * kubelet's), the other connections together may reserve at most
 * server_recv_budget - priority_share, so that many hostile connections
 * that do send bytes still leave kubelet room within the stall timeout.
 * Without one (the DRA socket: kubelet dials it on demand and nothing
 * identifies its connection reliably) the whole budget is shared; what
 * protects kubelet there is that budget costs real bytes, that no single
 * connection may take more than conn_recv_budget (16 of 64 MiB), and that
 * stalled requests are released.
 *
 * Header checks: nghttp2's HTTP messaging checks stay off (see
 * kdev_rpc_server_new()), so this module checks every request header
 * itself: names must be valid HTTP/2 field names (lower case, token
 * characters; pseudo-headers :method, :scheme, :path, :authority once each,
 * before the regular ones) and values must not contain NUL, CR, LF or other
 * control characters except HTAB (nghttp2_check_header_name/_value, RFC 9113
 * section 8.2.1); connection-specific fields (connection, keep-alive,
 * proxy-connection, transfer-encoding, upgrade) and a TE other than
 * "trailers" are refused (section 8.2.2). Not checked: :authority (see
 * kdev_rpc_server_new()) and content-length (gRPC frames its own messages;
 * the body is read by their prefixes). A request that breaks this is answered trailers-only,
 * HTTP 400, grpc-status INTERNAL "invalid header ..." naming the header and
 * the offending byte, and is never handed to a method.
 */
#include "rpc/rpc_internal.h"

#include "common/log.h"

#include <errno.h>
#include <protobuf-c/protobuf-c.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

struct method {
        char *path;
        size_t path_len;
        bool streaming;
        kdev_rpc_handler_fn fn;
        void *user_data;
};

struct sconn;

struct kdev_rpc_server {
        uv_loop_t *loop;
        size_t max_recv;
        size_t max_send;
        size_t max_conns;
        size_t conn_budget;   /* request bytes per connection */
        size_t srv_budget;    /* request bytes for the whole server */
        size_t prio_share;    /* of srv_budget, kept for the priority connection */
        uint64_t stall_ms;    /* stall timeout of a receiving call */
        uint64_t prio_conn;   /* priority connection id, 0 = none */
        size_t reserved;      /* request bytes reserved now, all connections */
        size_t stalls;        /* calls ended for stalling (for tests) */
        size_t req_alloc;     /* bytes allocated for request buffers now */
        size_t nconns;        /* connections in |conns| (closing ones too) */
        nghttp2_option *h2opt;
        uint8_t *rbuf;           /* read buffer of every connection (conn.c) */
        struct method **methods; /* stable pointers: calls point at them */
        size_t nmethods;
        nghttp2_session_callbacks *cbs;
        uv_pipe_t listener;
        uv_idle_t closer;  /* only closed: makes freeing always asynchronous */
        uv_timer_t sweep;  /* stall check, every sweep_every ms */
        uv_pipe_t reject;  /* rejects a connection when out of memory */
        bool reject_busy;  /* |reject| open or closing (counted in handles) */
        bool reject_owed;  /* a connection waits, unaccepted, for |reject| */
        uint64_t sweep_every; /* stall_ms / 4, at least 1 */
        uint64_t last_sweep;  /* loop time of the last stall check */
        unsigned handles;  /* listener + closer + sweep while open */
        struct sconn *conns;
        uint64_t last_conn_id;
        size_t ncalls;
        bool listening;
        bool closing;
        void (*done)(void *arg);
        void *done_arg;
};

/* Deadline timers a connection keeps, stopped, for its next calls: a call
 * with a grpc-timeout then costs a timer start and stop, not a timer's
 * allocation, start, close and free. */
#define SPARE_TIMERS 4u

/* :path values up to this length (with the NUL) are kept in the call. */
#define PATH_INLINE 64u

struct sconn {
        struct kdev_rpc_conn c;
        struct kdev_rpc_server *srv;
        struct sconn *prev, *next;
        struct kdev_rpc_call *calls;
        size_t reserved; /* request bytes reserved by this connection's calls */
        uint64_t id; /* serial number within the server, from 1 */
        uv_timer_t *spare_timers[SPARE_TIMERS]; /* stopped deadline timers to reuse */
        struct kdev_rpc_call *spare_call; /* a freed call struct to reuse, or NULL */
        unsigned nspare;
        struct kdev_rpc_h2mem h2mem; /* the session's memory */
        bool gone;   /* calls cancelled, close requested */
        bool stall_logged; /* a stall on this connection was logged */
};

enum call_state { CALL_RECV, CALL_LIVE, CALL_DONE };

struct kdev_rpc_call {
        struct sconn *sc;
        struct kdev_rpc_call *prev, *next;
        int32_t stream_id;
        enum call_state state;
        const struct method *m;
        char *path;       /* path_buf, or malloc'd when longer; NULL until :path */
        char path_buf[PATH_INLINE];

        /* request headers */
        bool hdrs_done;   /* the request header block is complete */
        bool seen_method, seen_scheme, seen_path, seen_authority;
        bool seen_regular; /* a regular header came: no pseudo-header after */
        char *hdr_bad;    /* why the header block is malformed, or NULL */
        bool post;
        bool ct_seen, ct_ok, ct_grpc;
        char ctype[64];
        bool enc_bad;
        char enc[32];
        bool timeout_bad;
        uint64_t timeout_ms;
        bool has_timeout;

        /* request message */
        uint8_t prefix[KDEV_RPC_PREFIX_LEN];
        size_t prefix_got;
        uint8_t *req;      /* see req_grow(); NULL until bytes arrive */
        size_t req_cap;    /* bytes allocated at |req| */
        size_t req_len, req_got;
        size_t reserved;   /* budget held: req_cap while receiving */
        bool have_msg;
        uint64_t progress; /* loop time the stall clock last restarted */
        size_t progress_bytes; /* request bytes since then */

        uint64_t deadline;
        uv_timer_t *timer;
        kdev_rpc_cancel_fn on_cancel;
        void *cancel_ud;

        /* response */
        bool headers_sent;
        bool deferred;  /* data provider returned NGHTTP2_ERR_DEFERRED */
        bool finishing; /* send trailers once the data has drained */
        int fin_status;
        char *fin_msg;  /* percent-encoded, may be NULL */
        struct kdev_rpc_outq out;  /* framed messages not yet sent */
        struct kdev_rpc_outq pend; /* the one message waiting while the peer is slow */
};

static void srv_maybe_free(struct kdev_rpc_server *srv);
static void sconn_kill(struct sconn *sc, bool goaway);

/* ---------------------------------------------------------------------- */
/* call helpers                                                            */
/* ---------------------------------------------------------------------- */

static void call_stop_timer(struct kdev_rpc_call *call)
{
        struct sconn *sc = call->sc;
        if (call->timer && !sc->gone && sc->nspare < SPARE_TIMERS) {
                uv_timer_stop(call->timer);
                sc->spare_timers[sc->nspare++] = call->timer;
                call->timer = NULL;
                return;
        }
        kdev_rpc__timer_close(&call->timer);
}

/* A stopped deadline timer for |call|: a spare of its connection, or a new
 * one. NULL when out of memory. */
static uv_timer_t *call_timer(struct kdev_rpc_call *call)
{
        struct sconn *sc = call->sc;
        if (sc->nspare == 0)
                return kdev_rpc__timer_new(sc->srv->loop, call);
        uv_timer_t *t = sc->spare_timers[--sc->nspare];
        t->data = call;
        return t;
}

static void sconn_close_spare_timers(struct sconn *sc)
{
        while (sc->nspare)
                kdev_rpc__timer_close(&sc->spare_timers[--sc->nspare]);
}

static void call_free_path(struct kdev_rpc_call *call)
{
        if (call->path != call->path_buf)
                free(call->path);
        call->path = NULL;
}

static void call_unlink(struct kdev_rpc_call *call)
{
        KDEV_RPC_LIST_UNLINK(call->sc->calls, call);
}

/* Request buffers below this size come from malloc; from it on they are
 * mapped directly: mremap() grows them without copying and munmap() returns
 * them to the system at once, where freed heap memory could stay cached in
 * the process (the malloc heap is shared with everything else). */
#define REQ_MAP_MIN (128u * 1024u)

/* Smallest request buffer (for a declared length at least as large). */
#define REQ_MIN 1024u

/* A receiving call's stall clock restarts when its header block completes
 * and whenever this many more request bytes arrived: trickling a byte now and then does not keep a request, and the
 * budget it holds, alive. */
#define STALL_MIN_PROGRESS 1024u

static void req_buf_free(struct kdev_rpc_server *srv, uint8_t *p, size_t cap)
{
        if (!p)
                return;
        srv->req_alloc -= cap;
        if (cap >= REQ_MAP_MIN)
                munmap(p, cap);
        else
                free(p);
}

/* Checks that |call| may reserve |more| bytes against its connection's and
 * the server's budgets (the priority share aside unless it is on the
 * priority connection). Returns true, or false with the refusal in |msg|. */
static bool call_budget_ok(const struct kdev_rpc_call *call, size_t more, char *msg, size_t size)
{
        const struct sconn *sc = call->sc;
        const struct kdev_rpc_server *srv = sc->srv;
        if (more > srv->conn_budget - sc->reserved) {
                snprintf(msg, size,
                         "server busy: a %zu-byte request would exceed this connection's budget "
                         "for pending requests (%zu of %zu bytes in use)",
                         call->req_len, sc->reserved, srv->conn_budget);
                return false;
        }
        if (more > srv->srv_budget - srv->reserved) {
                snprintf(msg, size,
                         "server busy: a %zu-byte request would exceed the server's budget for "
                         "pending requests (%zu of %zu bytes in use)",
                         call->req_len, srv->reserved, srv->srv_budget);
                return false;
        }
        if (srv->prio_conn != 0 && sc->id != srv->prio_conn) {
                /* the other connections' share: all but prio_share */
                size_t prio_used = 0;
                for (const struct sconn *o = srv->conns; o; o = o->next)
                        if (o->id == srv->prio_conn)
                                prio_used = o->reserved;
                size_t others = srv->reserved - prio_used;
                size_t limit = srv->srv_budget - srv->prio_share;
                if (others > limit || more > limit - others) {
                        snprintf(msg, size,
                                 "server busy: a %zu-byte request would exceed the server's "
                                 "budget for pending requests (%zu of %zu bytes in use by "
                                 "connections other than kubelet's; %zu more are kept for "
                                 "kubelet's)",
                                 call->req_len, others, limit, srv->prio_share);
                        return false;
                }
        }
        return true;
}

/* Makes room for |need| bytes (need <= req_len) in the request buffer: its
 * size becomes the smallest power of two >= |need| and >= REQ_MIN, never
 * past the declared length (so at most twice the bytes received, whatever
 * pieces they came in); the growth is
 * reserved against the budgets. Returns 0, -ENOBUFS (over a budget: the
 * refusal in |msg|) or -ENOMEM (the buffer is then unchanged). */
static int req_grow(struct kdev_rpc_call *call, size_t need, char *msg, size_t size)
{
        if (need <= call->req_cap)
                return 0;
        size_t cap = REQ_MIN;
        while (cap < need)
                cap *= 2;
        if (cap > call->req_len)
                cap = call->req_len;
        if (cap >= REQ_MAP_MIN) {
                size_t page = (size_t)sysconf(_SC_PAGESIZE);
                cap = (cap + page - 1) / page * page;
        }
        if (!call_budget_ok(call, cap - call->req_cap, msg, size))
                return -ENOBUFS;
        uint8_t *nb;
        if (cap < REQ_MAP_MIN) {
                nb = realloc(call->req, cap);
                if (!nb)
                        return -ENOMEM;
        } else {
                if (call->req_cap >= REQ_MAP_MIN)
                        nb = mremap(call->req, call->req_cap, cap, MREMAP_MAYMOVE);
                else
                        nb = mmap(NULL, cap, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
                                  -1, 0);
                if (nb == MAP_FAILED)
                        return -ENOMEM;
                if (call->req_cap < REQ_MAP_MIN) {
                        if (call->req_got)
                                memcpy(nb, call->req, call->req_got);
                        free(call->req);
                }
        }
        size_t more = cap - call->req_cap;
        call->sc->srv->req_alloc += more;
        call->reserved += more;
        call->sc->reserved += more;
        call->sc->srv->reserved += more;
        call->req = nb;
        call->req_cap = cap;
        return 0;
}

static void call_drop_req(struct kdev_rpc_call *call)
{
        req_buf_free(call->sc->srv, call->req, call->req_cap);
        call->req = NULL;
        call->req_cap = 0;
}

/* Gives the call's reservation back to its connection's and the server's
 * budgets. */
static void call_release(struct kdev_rpc_call *call)
{
        call->sc->reserved -= call->reserved;
        call->sc->srv->reserved -= call->reserved;
        call->reserved = 0;
}

static void call_free(struct kdev_rpc_call *call)
{
        call_stop_timer(call);
        call_release(call);
        call->sc->srv->ncalls--;
        call_free_path(call);
        free(call->hdr_bad);
        call_drop_req(call);
        free(call->fin_msg);
        kdev_rpc__outq_free(&call->out);
        kdev_rpc__outq_free(&call->pend);
        struct sconn *sc = call->sc;
        if (!sc->spare_call && !sc->gone)
                sc->spare_call = call; /* the next call on the connection takes it */
        else
                free(call);
}

/* Trailers-only response (HEADERS with END_STREAM). */
static void call_respond_error(struct kdev_rpc_call *call, const char *http_status, int status,
                               const char *message)
{
        char st[16];
        char *enc = kdev_rpc_percent_encode(message ? message : "");
        nghttp2_nv nva[5] = {
                KDEV_RPC_NV(":status", http_status),
                KDEV_RPC_NV("content-type", "application/grpc"),
                KDEV_RPC_NV("grpc-accept-encoding", "identity"),
        };
        size_t n = 3 + kdev_rpc__status_nv(nva + 3, st, status, enc);
        call->state = CALL_DONE;
        call->on_cancel = NULL;
        call_stop_timer(call);
        call->headers_sent = true;
        if (nghttp2_submit_response(call->sc->c.session, call->stream_id, nva, n, NULL) != 0)
                nghttp2_submit_rst_stream(call->sc->c.session, NGHTTP2_FLAG_NONE, call->stream_id,
                                          NGHTTP2_INTERNAL_ERROR);
        free(enc);
        call_drop_req(call);
        call_release(call);
}

static ssize_t srv_data_read(nghttp2_session *s, int32_t stream_id, uint8_t *buf, size_t length,
                             uint32_t *flags, nghttp2_data_source *src, void *ud)
{
        (void)src;
        (void)ud;
        struct kdev_rpc_call *call = nghttp2_session_get_stream_user_data(s, stream_id);
        if (!call)
                return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
        if (kdev_rpc__outq_unsent(&call->out) == 0 && call->pend.buf) {
                kdev_rpc__outq_free(&call->out);
                call->out = call->pend;
                call->pend = (struct kdev_rpc_outq){ 0 };
        }
        if (kdev_rpc__outq_unsent(&call->out) > 0)
                return (ssize_t)kdev_rpc__outq_read(&call->out, buf, length);
        if (call->finishing) {
                char st[16];
                nghttp2_nv nva[2];
                size_t n = kdev_rpc__status_nv(nva, st, call->fin_status, call->fin_msg);
                if (nghttp2_submit_trailer(s, stream_id, nva, n) != 0)
                        return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
                call->finishing = false;
                *flags |= NGHTTP2_DATA_FLAG_EOF | NGHTTP2_DATA_FLAG_NO_END_STREAM;
                return 0;
        }
        call->deferred = true;
        return NGHTTP2_ERR_DEFERRED;
}

/* Sends the response HEADERS with a data provider. Returns 0 or -EIO. */
static int call_start_response(struct kdev_rpc_call *call)
{
        if (call->headers_sent)
                return 0;
        nghttp2_nv nva[3] = {
                KDEV_RPC_NV(":status", "200"),
                KDEV_RPC_NV("content-type", "application/grpc"),
                KDEV_RPC_NV("grpc-accept-encoding", "identity"),
        };
        nghttp2_data_provider prd = { .source.ptr = call, .read_callback = srv_data_read };
        int rv = nghttp2_submit_response(call->sc->c.session, call->stream_id, nva, 3, &prd);
        if (rv != 0)
                return rv == NGHTTP2_ERR_NOMEM ? -ENOMEM : -EIO; /* nghttp2's memory: h2mem.c */
        call->headers_sent = true;
        return 0;
}

static void call_resume(struct kdev_rpc_call *call)
{
        if (call->deferred) {
                call->deferred = false;
                nghttp2_session_resume_data(call->sc->c.session, call->stream_id);
        }
}

/* Ends a LIVE or RECV call with |status|: trailers-only when nothing was
 * sent, trailers after the queued data otherwise. Does not flush. */
static void call_end(struct kdev_rpc_call *call, int status, const char *message)
{
        if (!call->headers_sent) {
                call_respond_error(call, "200", status, message);
                return;
        }
        call->state = CALL_DONE;
        call->on_cancel = NULL;
        call_stop_timer(call);
        free(call->fin_msg);
        call->fin_msg = (message && message[0]) ? kdev_rpc_percent_encode(message) : NULL;
        call->fin_status = status;
        call->finishing = true;
        call_resume(call);
}

static bool call_fits(const struct kdev_rpc_call *call, size_t need)
{
        nghttp2_session *s = call->sc->c.session;
        int32_t sw = nghttp2_session_get_stream_remote_window_size(s, call->stream_id);
        int32_t cw = nghttp2_session_get_remote_window_size(s);
        size_t win = KDEV_RPC_STREAM_QUEUE_MAX;
        if (sw < 0)
                sw = 0;
        if (cw < 0)
                cw = 0;
        if ((size_t)sw < win)
                win = (size_t)sw;
        if ((size_t)cw < win)
                win = (size_t)cw;
        return need <= win && call->sc->c.wq_bytes < KDEV_RPC_WQ_HIGH;
}

/* Queues a framed message (ownership taken). |force| appends behind
 * everything (unary replies); otherwise the coalescing rule applies. */
static int call_queue(struct kdev_rpc_call *call, uint8_t *framed, size_t flen, bool force)
{
        int rs = call_start_response(call);
        if (rs < 0) {
                free(framed);
                return rs;
        }
        size_t unsent = kdev_rpc__outq_unsent(&call->out);
        int rv = 0;
        if (force) {
                if (call->pend.buf) {
                        rv = kdev_rpc__outq_append(&call->out, call->pend.buf, call->pend.len);
                        call->pend = (struct kdev_rpc_outq){ 0 };
                }
                if (rv == 0)
                        rv = kdev_rpc__outq_append(&call->out, framed, flen);
                else
                        free(framed);
        } else if (!call->pend.buf && (unsent == 0 || call_fits(call, unsent + flen))) {
                rv = kdev_rpc__outq_append(&call->out, framed, flen);
        } else {
                kdev_rpc__outq_free(&call->pend); /* a newer state replaces the waiting one */
                call->pend = (struct kdev_rpc_outq){ framed, flen, 0 };
        }
        call_resume(call);
        return rv;
}

/* ---------------------------------------------------------------------- */
/* public call API                                                         */
/* ---------------------------------------------------------------------- */

void kdev_rpc_call_on_cancel(struct kdev_rpc_call *call, kdev_rpc_cancel_fn fn, void *user_data)
{
        if (!call)
                return;
        call->on_cancel = fn;
        call->cancel_ud = user_data;
}

uint64_t kdev_rpc_call_deadline(const struct kdev_rpc_call *call)
{
        return call ? call->deadline : 0;
}

uint64_t kdev_rpc_call_connection(const struct kdev_rpc_call *call)
{
        return call && call->sc ? call->sc->id : 0;
}

const char *kdev_rpc_call_method(const struct kdev_rpc_call *call)
{
        return call && call->path ? call->path : "";
}

/* Reply with an already framed message (ownership taken). */
static int call_reply_framed(struct kdev_rpc_call *call, uint8_t *framed, size_t len)
{
        struct kdev_rpc_conn *c = &call->sc->c;
        if (len > call->sc->srv->max_send) {
                free(framed);
                char msg[128];
                kdev_rpc__send_too_large(msg, sizeof(msg), len, call->sc->srv->max_send);
                call_end(call, KDEV_RPC_RESOURCE_EXHAUSTED, msg);
                kdev_rpc__conn_flush(c);
                return -EMSGSIZE;
        }
        if (!framed) {
                call_end(call, KDEV_RPC_INTERNAL, "out of memory");
                kdev_rpc__conn_flush(c);
                return -ENOMEM;
        }
        int rv = call_queue(call, framed, KDEV_RPC_PREFIX_LEN + len, true);
        if (rv < 0)
                call_end(call, KDEV_RPC_INTERNAL,
                         rv == -ENOMEM ? "out of memory" : "server failed to queue the response");
        else
                call_end(call, KDEV_RPC_OK, NULL);
        kdev_rpc__conn_flush(c); /* may free the call */
        return rv;
}

int kdev_rpc_call_reply(struct kdev_rpc_call *call, const uint8_t *msg, size_t len)
{
        if (!call || call->state != CALL_LIVE)
                return -ECANCELED;
        uint8_t *f = NULL;
        if (len <= call->sc->srv->max_send)
                f = kdev_rpc__frame(msg, len);
        return call_reply_framed(call, f, len);
}

int kdev_rpc_call_reply_pb(struct kdev_rpc_call *call, const struct ProtobufCMessage *msg)
{
        if (!call || call->state != CALL_LIVE)
                return -ECANCELED;
        size_t len = protobuf_c_message_get_packed_size(msg);
        uint8_t *f = NULL;
        if (len <= call->sc->srv->max_send) {
                f = kdev_rpc__frame(NULL, len);
                if (f)
                        protobuf_c_message_pack(msg, f + KDEV_RPC_PREFIX_LEN);
        }
        return call_reply_framed(call, f, len);
}

static int call_send_framed(struct kdev_rpc_call *call, uint8_t *framed, size_t len)
{
        if (!framed)
                return -ENOMEM;
        int rv = call_queue(call, framed, KDEV_RPC_PREFIX_LEN + len, false);
        kdev_rpc__conn_flush(&call->sc->c);
        return rv;
}

int kdev_rpc_call_send(struct kdev_rpc_call *call, const uint8_t *msg, size_t len)
{
        if (!call || call->state != CALL_LIVE)
                return -ECANCELED;
        if (len > call->sc->srv->max_send)
                return -EMSGSIZE;
        uint8_t *f = kdev_rpc__frame(msg, len);
        return call_send_framed(call, f, len);
}

int kdev_rpc_call_send_pb(struct kdev_rpc_call *call, const struct ProtobufCMessage *msg)
{
        if (!call || call->state != CALL_LIVE)
                return -ECANCELED;
        size_t len = protobuf_c_message_get_packed_size(msg);
        if (len > call->sc->srv->max_send)
                return -EMSGSIZE;
        uint8_t *f = kdev_rpc__frame(NULL, len);
        if (f)
                protobuf_c_message_pack(msg, f + KDEV_RPC_PREFIX_LEN);
        return call_send_framed(call, f, len);
}

void kdev_rpc_call_finish(struct kdev_rpc_call *call, int status, const char *message)
{
        if (!call || call->state != CALL_LIVE)
                return;
        struct kdev_rpc_conn *c = &call->sc->c;
        call_end(call, status, message);
        kdev_rpc__conn_flush(c); /* may free the call */
}

/* ---------------------------------------------------------------------- */
/* deadlines                                                               */
/* ---------------------------------------------------------------------- */

static void call_deadline_cb(uv_timer_t *t)
{
        struct kdev_rpc_call *call = t->data;
        struct kdev_rpc_conn *c = &call->sc->c;
        bool was_live = call->state == CALL_LIVE;
        kdev_rpc_cancel_fn fn = call->on_cancel;
        void *ud = call->cancel_ud;
        call_end(call, KDEV_RPC_DEADLINE_EXCEEDED, "deadline exceeded");
        if (was_live && fn)
                fn(call, ud);
        kdev_rpc__conn_flush(c);
}

/* ---------------------------------------------------------------------- */
/* stalled requests                                                        */
/* ---------------------------------------------------------------------- */

/* Ends every call of |sc| still receiving whose stall clock is older than
 * the timeout at |now|; logs the first such stall of the connection. */
static void sconn_sweep(struct sconn *sc, uint64_t now)
{
        struct kdev_rpc_server *srv = sc->srv;
        size_t ended = 0;
        bool whole = false;
        const char *method = "";
        char msg[128];
        snprintf(msg, sizeof(msg), "request stalled: no request data for %llu ms",
                 (unsigned long long)srv->stall_ms);
        for (struct kdev_rpc_call *call = sc->calls; call; call = call->next) {
                if (call->state != CALL_RECV || now - call->progress < srv->stall_ms)
                        continue;
                ended++;
                if (!method[0] && call->path)
                        method = call->path;
                if (!call->hdrs_done) {
                        /* halfway through a header block: nothing else can
                         * come on the connection (RFC 9113 section 6.10) */
                        whole = true;
                        break;
                }
                /* trailers-only CANCELLED, then RST_STREAM NO_ERROR
                 * (on_frame_send); the buffer and budget go at once */
                call_respond_error(call, "200", KDEV_RPC_CANCELLED, msg);
        }
        if (!ended)
                return;
        srv->stalls += ended;
        if (!sc->stall_logged) {
                sc->stall_logged = true;
                char tmo[24];
                snprintf(tmo, sizeof(tmo), "%llums", (unsigned long long)srv->stall_ms);
                kdev_log_warn("gRPC request stalled, stream reset (logged once per connection)",
                              KDEV_LOG_UINT("connection", sc->id), "method", method,
                              "stall_timeout", tmo,
                              "action", whole ? "connection closed" : "stream reset");
        }
        if (whole)
                sconn_kill(sc, true);
        else
                kdev_rpc__conn_flush(&sc->c);
}

static void srv_sweep_cb(uv_timer_t *t)
{
        struct kdev_rpc_server *srv = t->data;
        uint64_t now = uv_now(srv->loop);
        /* A late check means the loop itself did not run (a handler held it:
         * a slow disk, ...): request bytes sent meanwhile are still unread,
         * or were read late in that loop iteration and stamped with its
         * stale time. That time is the server's, not the clients': their
         * stall clocks stop for it. */
        uint64_t gap = now - srv->last_sweep;
        if (gap > srv->sweep_every) {
                uint64_t lag = gap - srv->sweep_every;
                for (struct sconn *sc = srv->conns; sc; sc = sc->next)
                        for (struct kdev_rpc_call *call = sc->calls; call; call = call->next)
                                if (call->state == CALL_RECV)
                                        call->progress = call->progress + lag < now
                                                                 ? call->progress + lag
                                                                 : now;
        }
        srv->last_sweep = now;
        /* conns are freed only from close callbacks, so |next| stays valid */
        for (struct sconn *sc = srv->conns; sc; sc = sc->next)
                if (!sc->gone)
                        sconn_sweep(sc, now);
}

/* ---------------------------------------------------------------------- */
/* nghttp2 callbacks                                                       */
/* ---------------------------------------------------------------------- */

static int on_begin_headers(nghttp2_session *s, const nghttp2_frame *frame, void *ud)
{
        struct sconn *sc = ud;
        if (sc->gone)
                return NGHTTP2_ERR_CALLBACK_FAILURE;
        if (frame->hd.type != NGHTTP2_HEADERS || frame->headers.cat != NGHTTP2_HCAT_REQUEST)
                return 0;
        /* the connection's spare, else malloc + memset (glibc's calloc
         * bypasses its per-thread cache) */
        struct kdev_rpc_call *call = sc->spare_call ? sc->spare_call : malloc(sizeof(*call));
        if (!call)
                return NGHTTP2_ERR_CALLBACK_FAILURE;
        sc->spare_call = NULL;
        memset(call, 0, sizeof(*call));
        call->sc = sc;
        call->stream_id = frame->hd.stream_id;
        call->progress = uv_now(sc->srv->loop);
        KDEV_RPC_LIST_PUSH(sc->calls, call);
        sc->srv->ncalls++;
        nghttp2_session_set_stream_user_data(s, frame->hd.stream_id, call);
        return 0;
}

static void copy_value(char *dst, size_t size, const uint8_t *v, size_t len)
{
        if (len >= size)
                len = size - 1;
        memcpy(dst, v, len);
        dst[len] = '\0';
}

#define HDR_IS(lit) (namelen == sizeof(lit) - 1 && memcmp(name, lit, namelen) == 0)

/* Writes |len| bytes of |p| into |dst| for an error message: printable ASCII
 * as is, other bytes as \xNN; cut with "..." past 64 bytes. */
static void show_bytes(char *dst, size_t size, const uint8_t *p, size_t len)
{
        size_t o = 0;
        for (size_t i = 0; i < len && o + 8 < size; i++) {
                if (i == 64) {
                        o += (size_t)snprintf(dst + o, size - o, "...");
                        break;
                }
                if (p[i] >= 0x20 && p[i] < 0x7f && p[i] != '"' && p[i] != '\\')
                        dst[o++] = (char)p[i];
                else
                        o += (size_t)snprintf(dst + o, size - o, "\\x%02x", p[i]);
        }
        dst[o] = '\0';
}

/* RFC 9113 section 8.2.1, 8.2.2 and 8.3 checks that nghttp2's HTTP
 * messaging would make (it is off: see kdev_rpc_server_new()) for one
 * request header of
 * |call|. Returns 0 when the header is fine, 1 when it is not (the reason
 * in call->hdr_bad: the request is refused once its header block is
 * complete), -ENOMEM. */
static int header_check(struct kdev_rpc_call *call, const uint8_t *name, size_t namelen,
                        const uint8_t *value, size_t valuelen)
{
        char why[512], shown[300];
        why[0] = '\0';
        /* the name as shown in an error, made only for an error */
#define SHOWN (show_bytes(shown, sizeof(shown), name, namelen), shown)
        if (!nghttp2_check_header_name(name, namelen)) {
                snprintf(why, sizeof(why),
                         "invalid header name \"%s\" (header names are lower-case tokens)",
                         SHOWN);
        } else if (!nghttp2_check_header_value(value, valuelen)) {
                size_t i = 0;
                while (i < valuelen && nghttp2_check_header_value(value + i, 1))
                        i++;
                snprintf(why, sizeof(why),
                         "invalid header \"%s\": byte %zu of its value is 0x%02x (values must "
                         "not contain NUL, CR, LF or other control characters)",
                         SHOWN, i, i < valuelen ? value[i] : 0);
        } else if (name[0] == ':') {
                bool *seen = HDR_IS(":method")      ? &call->seen_method
                             : HDR_IS(":scheme")    ? &call->seen_scheme
                             : HDR_IS(":path")      ? &call->seen_path
                             : HDR_IS(":authority") ? &call->seen_authority
                                                    : NULL;
                if (!seen)
                        snprintf(why, sizeof(why),
                                 "invalid header \"%s\": not a request pseudo-header", SHOWN);
                else if (*seen)
                        snprintf(why, sizeof(why), "invalid header \"%s\": repeated", SHOWN);
                else if (call->seen_regular)
                        snprintf(why, sizeof(why),
                                 "invalid header \"%s\": pseudo-header after a regular header",
                                 SHOWN);
                else
                        *seen = true;
        } else {
                call->seen_regular = true;
                /* RFC 9113 section 8.2.2: connection-specific fields make
                 * the request malformed; TE may only say "trailers" */
                if (HDR_IS("connection") || HDR_IS("keep-alive") || HDR_IS("proxy-connection") ||
                    HDR_IS("transfer-encoding") || HDR_IS("upgrade")) {
                        snprintf(why, sizeof(why),
                                 "invalid header \"%s\": connection-specific header fields are "
                                 "not allowed in HTTP/2",
                                 SHOWN);
                } else if (HDR_IS("te") &&
                           !(valuelen == 8 && memcmp(value, "trailers", 8) == 0)) {
                        char v[300];
                        show_bytes(v, sizeof(v), value, valuelen);
                        snprintf(why, sizeof(why),
                                 "invalid header \"te\": value \"%s\" (only \"trailers\" is "
                                 "allowed)",
                                 v);
                }
        }
#undef SHOWN
        if (!why[0])
                return 0;
        call->hdr_bad = strdup(why);
        return call->hdr_bad ? 1 : -ENOMEM;
}

static int on_header(nghttp2_session *s, const nghttp2_frame *frame, const uint8_t *name,
                     size_t namelen, const uint8_t *value, size_t valuelen, uint8_t flags,
                     void *ud)
{
        (void)flags;
        struct sconn *sc = ud;
        if (sc->gone)
                return NGHTTP2_ERR_CALLBACK_FAILURE;
        if (frame->hd.type != NGHTTP2_HEADERS)
                return 0;
        struct kdev_rpc_call *call = nghttp2_session_get_stream_user_data(s, frame->hd.stream_id);
        if (!call || call->state != CALL_RECV)
                return 0;
        if (frame->headers.cat != NGHTTP2_HCAT_REQUEST) {
                /* request trailers: checked, never interpreted */
                if (!call->hdr_bad) {
                        call->seen_regular = true;
                        if (header_check(call, name, namelen, value, valuelen) < 0)
                                return NGHTTP2_ERR_CALLBACK_FAILURE;
                }
                return 0;
        }
        if (call->hdr_bad)
                return 0; /* refused already: the first fault is the one named */
        int bad = header_check(call, name, namelen, value, valuelen);
        if (bad < 0)
                return NGHTTP2_ERR_CALLBACK_FAILURE;
        if (bad > 0)
                return 0;
        if (HDR_IS(":path")) {
                call_free_path(call);
                if (valuelen < sizeof(call->path_buf)) {
                        memcpy(call->path_buf, value, valuelen); /* no NUL: checked above */
                        call->path_buf[valuelen] = '\0';
                        call->path = call->path_buf;
                } else {
                        call->path = strndup((const char *)value, valuelen);
                }
                if (!call->path)
                        return NGHTTP2_ERR_CALLBACK_FAILURE;
        } else if (HDR_IS(":method")) {
                call->post = valuelen == 4 && memcmp(value, "POST", 4) == 0;
        } else if (HDR_IS("content-type")) {
                call->ct_seen = true;
                copy_value(call->ctype, sizeof(call->ctype), value, valuelen);
                call->ct_ok = kdev_rpc__content_type_ok((const char *)value, valuelen,
                                                        &call->ct_grpc);
        } else if (HDR_IS("grpc-encoding")) {
                if (!(valuelen == 8 && memcmp(value, "identity", 8) == 0)) {
                        call->enc_bad = true;
                        copy_value(call->enc, sizeof(call->enc), value, valuelen);
                }
        } else if (HDR_IS("grpc-timeout")) {
                if (kdev_rpc__timeout_parse((const char *)value, valuelen, &call->timeout_ms) < 0)
                        call->timeout_bad = true;
                else
                        call->has_timeout = true;
        }
        return 0;
}

static const struct method *find_method(const struct kdev_rpc_server *srv, const char *path)
{
        size_t len = strlen(path);
        for (size_t i = 0; i < srv->nmethods; i++)
                if (srv->methods[i]->path_len == len && memcmp(srv->methods[i]->path, path, len) == 0)
                        return srv->methods[i];
        return NULL;
}

static void call_headers_done(struct kdev_rpc_call *call)
{
        struct kdev_rpc_server *srv = call->sc->srv;
        char msg[512];
        if (call->hdr_bad) {
                call_respond_error(call, "400", KDEV_RPC_INTERNAL, call->hdr_bad);
                return;
        }
        if (!call->ct_ok && !call->ct_grpc) {
                /* not gRPC at all: HTTP 415 (PROTOCOL-HTTP2, Content-Type) */
                snprintf(msg, sizeof(msg), "invalid gRPC request content-type \"%s\"",
                         call->ct_seen ? call->ctype : "");
                call_respond_error(call, "415", KDEV_RPC_INTERNAL, msg);
                return;
        }
        if (!call->ct_ok) {
                snprintf(msg, sizeof(msg),
                         "unsupported content-type \"%s\" (only application/grpc and "
                         "application/grpc+proto)",
                         call->ctype);
                call_respond_error(call, "200", KDEV_RPC_UNIMPLEMENTED, msg);
                return;
        }
        if (!call->post) {
                call_respond_error(call, "405", KDEV_RPC_INTERNAL, "gRPC requires method POST");
                return;
        }
        if (call->enc_bad) {
                snprintf(msg, sizeof(msg),
                         "compressed messages are not supported (grpc-encoding \"%s\"; "
                         "this server accepts identity only)",
                         call->enc);
                call_respond_error(call, "200", KDEV_RPC_UNIMPLEMENTED, msg);
                return;
        }
        if (call->timeout_bad) {
                call_respond_error(call, "200", KDEV_RPC_INTERNAL, "malformed grpc-timeout");
                return;
        }
        call->m = call->path ? find_method(srv, call->path) : NULL;
        if (!call->m) {
                snprintf(msg, sizeof(msg), "unknown method %s", call->path ? call->path : "");
                call_respond_error(call, "200", KDEV_RPC_UNIMPLEMENTED, msg);
                return;
        }
        if (call->has_timeout) {
                call->deadline = uv_now(srv->loop) + call->timeout_ms;
                call->timer = call_timer(call);
                if (!call->timer) {
                        call_respond_error(call, "200", KDEV_RPC_RESOURCE_EXHAUSTED,
                                           "out of memory");
                        return;
                }
                uv_timer_start(call->timer, call_deadline_cb, call->timeout_ms, 0);
        }
}

static void call_request_end(struct kdev_rpc_call *call)
{
        if (call->state != CALL_RECV)
                return;
        if (!call->have_msg) {
                call_respond_error(call, "200", KDEV_RPC_INTERNAL,
                                   call->prefix_got ? "truncated request message"
                                                    : "missing request message");
                return;
        }
        call->state = CALL_LIVE;
        uint8_t *req = call->req;
        size_t cap = call->req_cap;
        size_t len = call->req_len;
        call->req = NULL;
        call->req_cap = 0;
        call_release(call);
        struct kdev_rpc_server *srv = call->sc->srv; /* freed only from close callbacks */
        const struct method *m = call->m;
        /* the handler may end, or (by closing the server) free, the call */
        m->fn(call, req ? req : (const uint8_t *)"", len, m->user_data);
        req_buf_free(srv, req, cap);
}

static int on_frame_recv(nghttp2_session *s, const nghttp2_frame *frame, void *ud)
{
        struct sconn *sc = ud;
        if (sc->gone)
                return NGHTTP2_ERR_CALLBACK_FAILURE;
        if (frame->hd.type != NGHTTP2_HEADERS && frame->hd.type != NGHTTP2_DATA)
                return 0;
        struct kdev_rpc_call *call = nghttp2_session_get_stream_user_data(s, frame->hd.stream_id);
        if (!call)
                return 0;
        if (frame->hd.type == NGHTTP2_HEADERS && call->state == CALL_RECV) {
                if (frame->headers.cat == NGHTTP2_HCAT_REQUEST) {
                        call->hdrs_done = true;
                        call->progress = uv_now(sc->srv->loop);
                        call->progress_bytes = 0;
                        call_headers_done(call);
                } else if (call->hdr_bad) { /* request trailers */
                        call_respond_error(call, "400", KDEV_RPC_INTERNAL, call->hdr_bad);
                }
        }
        if (frame->hd.flags & NGHTTP2_FLAG_END_STREAM)
                call_request_end(call);
        return 0;
}

static void call_feed(struct kdev_rpc_call *call, const uint8_t *d, size_t n)
{
        struct kdev_rpc_server *srv = call->sc->srv;
        char msg[256];
        while (n > 0 && call->state == CALL_RECV) {
                if (call->have_msg) {
                        call_respond_error(call, "200", KDEV_RPC_INTERNAL,
                                           "more than one request message for a unary or "
                                           "server-streaming method");
                        return;
                }
                if (call->prefix_got < KDEV_RPC_PREFIX_LEN) {
                        uint8_t flags;
                        uint32_t len;
                        if (!kdev_rpc__prefix_take(call->prefix, &call->prefix_got, &d, &n, &flags,
                                                   &len))
                                return;
                        int st = kdev_rpc__prefix_check(flags, len, srv->max_recv, false, msg,
                                                        sizeof(msg));
                        if (st != KDEV_RPC_OK) {
                                call_respond_error(call, "200", st, msg);
                                return;
                        }
                        call->req_len = len;
                        call->req_got = 0;
                        call->have_msg = len == 0;
                        continue;
                }
                size_t take = call->req_len - call->req_got;
                if (take > n)
                        take = n;
                int rv = req_grow(call, call->req_got + take, msg, sizeof(msg));
                if (rv < 0) {
                        call_respond_error(call, "200", KDEV_RPC_RESOURCE_EXHAUSTED,
                                           rv == -ENOBUFS ? msg : "out of memory");
                        return;
                }
                call->have_msg =
                        kdev_rpc__body_take(call->req, &call->req_got, call->req_len, &d, &n);
        }
}

static int on_data_chunk_recv(nghttp2_session *s, uint8_t flags, int32_t stream_id,
                              const uint8_t *data, size_t len, void *ud)
{
        (void)flags;
        struct sconn *sc = ud;
        if (sc->gone)
                return NGHTTP2_ERR_CALLBACK_FAILURE;
        struct kdev_rpc_call *call = nghttp2_session_get_stream_user_data(s, stream_id);
        if (call && call->state == CALL_RECV) {
                call->progress_bytes += len;
                if (call->progress_bytes >= STALL_MIN_PROGRESS) {
                        call->progress = uv_now(sc->srv->loop);
                        call->progress_bytes = 0;
                }
                call_feed(call, data, len);
        }
        return 0;
}

static int on_frame_send(nghttp2_session *s, const nghttp2_frame *frame, void *ud)
{
        (void)ud;
        /* Response complete but the client is still sending (early error):
         * tell it to stop, as PROTOCOL-HTTP2 allows (RST_STREAM NO_ERROR). */
        if (frame->hd.type == NGHTTP2_HEADERS && (frame->hd.flags & NGHTTP2_FLAG_END_STREAM) &&
            nghttp2_session_get_stream_remote_close(s, frame->hd.stream_id) == 0)
                nghttp2_submit_rst_stream(s, NGHTTP2_FLAG_NONE, frame->hd.stream_id,
                                          NGHTTP2_NO_ERROR);
        return 0;
}

static int on_stream_close(nghttp2_session *s, int32_t stream_id, uint32_t error_code, void *ud)
{
        (void)error_code;
        (void)ud;
        struct kdev_rpc_call *call = nghttp2_session_get_stream_user_data(s, stream_id);
        if (!call)
                return 0;
        nghttp2_session_set_stream_user_data(s, stream_id, NULL);
        call_unlink(call);
        if (call->state == CALL_LIVE) {
                call->state = CALL_DONE;
                if (call->on_cancel)
                        call->on_cancel(call, call->cancel_ud);
        }
        call_free(call);
        return 0;
}

/* ---------------------------------------------------------------------- */
/* connections                                                             */
/* ---------------------------------------------------------------------- */

static void sconn_closed(struct kdev_rpc_conn *c)
{
        struct sconn *sc = c->owner;
        struct kdev_rpc_server *srv = sc->srv;
        KDEV_RPC_LIST_UNLINK(srv->conns, sc);
        srv->nconns--;
        if (srv->prio_conn == sc->id)
                srv->prio_conn = 0;
        struct kdev_rpc_call *call;
        while ((call = sc->calls)) {
                call_unlink(call);
                call_free(call);
        }
        sconn_close_spare_timers(sc);
        free(sc->spare_call);
        nghttp2_session_del(c->session);
        kdev_rpc__h2mem_release(&sc->h2mem);
        free(sc);
        srv_maybe_free(srv);
}

/* Drops the connection: every call still open is cancelled (on_cancel runs)
 * and freed. With |goaway| a GOAWAY(NO_ERROR) goes out first. */
static void sconn_kill(struct sconn *sc, bool goaway)
{
        if (sc->gone)
                return;
        sc->gone = true;
        nghttp2_session *s = sc->c.session;
        if (goaway && s)
                nghttp2_submit_goaway(s, NGHTTP2_FLAG_NONE,
                                      nghttp2_session_get_last_proc_stream_id(s),
                                      NGHTTP2_NO_ERROR, NULL, 0);
        kdev_rpc__conn_close(&sc->c, goaway);
        struct kdev_rpc_call *call;
        while ((call = sc->calls)) {
                call_unlink(call);
                if (s)
                        nghttp2_session_set_stream_user_data(s, call->stream_id, NULL);
                if (call->state == CALL_LIVE) {
                        call->state = CALL_DONE;
                        if (call->on_cancel)
                                call->on_cancel(call, call->cancel_ud);
                }
                call_free(call);
        }
        sconn_close_spare_timers(sc);
}

static void sconn_lost(struct kdev_rpc_conn *c, int uv_status)
{
        sconn_kill(c->owner, uv_status == UV_EPROTO);
}

static const struct kdev_rpc_conn_ops sconn_ops = {
        .lost = sconn_lost,
        .closed = sconn_closed,
};

static void srv_reject(struct kdev_rpc_server *srv, uv_stream_t *listener);

static void reject_closed(uv_handle_t *h)
{
        free(h);
}

static void reject_spare_closed(uv_handle_t *h)
{
        struct kdev_rpc_server *srv = h->data;
        srv->reject_busy = false;
        srv->handles--;
        if (srv->reject_owed && !srv->closing) {
                srv->reject_owed = false;
                srv_reject(srv, (uv_stream_t *)&srv->listener);
        }
        srv_maybe_free(srv);
}

/* Accepts and closes a connection over the cap (or one we have no memory
 * for). The peer gets the server
 * preface (an empty SETTINGS frame) and GOAWAY ENHANCE_YOUR_CALM with the
 * reason as debug data, written without blocking (best effort: a few bytes
 * into an empty socket buffer). Out of memory, the server's own reject
 * handle serves: a connection left unaccepted would wait for its deadline
 * (its client sees nothing) and libuv stops listening until an accept. When
 * that handle is still closing, the connection waits for its close
 * callback. */
static void srv_reject(struct kdev_rpc_server *srv, uv_stream_t *listener)
{
        static const char bye[] =
                "\x00\x00\x00\x04\x00\x00\x00\x00\x00" /* SETTINGS, empty */
                "\x00\x00\x1c\x07\x00\x00\x00\x00\x00" /* GOAWAY, 28 bytes: */
                "\x00\x00\x00\x00\x00\x00\x00\x0b"     /* last 0, ENHANCE_YOUR_CALM */
                "too many connections";
        uv_pipe_t *p = malloc(sizeof(*p));
        if (!p) {
                if (srv->reject_busy) {
                        srv->reject_owed = true; /* libuv holds it until an accept */
                        return;
                }
                p = &srv->reject;
                srv->reject_busy = true;
                srv->handles++;
        }
        uv_pipe_init(srv->loop, p, 0); /* cannot fail on Unix: it fills in the struct */
        p->data = srv;
        if (uv_accept(listener, (uv_stream_t *)p) == 0) {
                uv_buf_t b = uv_buf_init((char *)bye, sizeof(bye) - 1);
                (void)uv_try_write((uv_stream_t *)p, &b, 1);
        }
        uv_close((uv_handle_t *)p, p == &srv->reject ? reject_spare_closed : reject_closed);
}

/* Adds a connection: its pipe is accepted from |listener|, or, when
 * |listener| is NULL, opened on the connected socket |fd| (consumed: closed
 * on failure). Returns 0, or a negative errno once the connection is torn
 * down. */
static int sconn_add(struct kdev_rpc_server *srv, uv_stream_t *listener, int fd)
{
        struct sconn *sc = calloc(1, sizeof(*sc));
        if (!sc) {
                /* an unaccepted connection would stop libuv's listener */
                if (listener)
                        srv_reject(srv, listener);
                else
                        close(fd);
                return -ENOMEM;
        }
        sc->srv = srv;
        sc->id = ++srv->last_conn_id;
        kdev_rpc__h2mem_init(&sc->h2mem);
        int rv = kdev_rpc__conn_init(&sc->c, srv->loop, &sconn_ops, sc);
        sc->c.rbuf = srv->rbuf;
        if (rv < 0) {
                free(sc);
                if (!listener)
                        close(fd);
                return rv;
        }
        KDEV_RPC_LIST_PUSH(srv->conns, sc);
        srv->nconns++;
        rv = listener ? uv_accept(listener, (uv_stream_t *)&sc->c.pipe)
                      : uv_pipe_open(&sc->c.pipe, fd);
        if (rv < 0 && !listener)
                close(fd); /* not the pipe's: closing the handle leaves it open */
        if (rv < 0 || nghttp2_session_server_new3(&sc->c.session, srv->cbs, sc, srv->h2opt,
                                                   &sc->h2mem.mem) != 0) {
                sconn_kill(sc, false);
                return rv < 0 ? rv : -ENOMEM;
        }
        nghttp2_settings_entry iv[] = {
                { NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS, KDEV_RPC_MAX_CONCURRENT_STREAMS },
                { NGHTTP2_SETTINGS_ENABLE_PUSH, 0 },
        };
        if (nghttp2_submit_settings(sc->c.session, NGHTTP2_FLAG_NONE, iv, 2) != 0) {
                sconn_kill(sc, false);
                return -ENOMEM;
        }
        rv = kdev_rpc__conn_start(&sc->c);
        if (rv < 0) {
                sconn_kill(sc, false);
                return rv;
        }
        return 0;
}

static void on_connection(uv_stream_t *listener, int status)
{
        struct kdev_rpc_server *srv = listener->data;
        if (status < 0 || srv->closing)
                return;
        if (srv->nconns >= srv->max_conns) {
                srv_reject(srv, listener);
                return;
        }
        (void)sconn_add(srv, listener, -1);
}

int kdev_rpc__server_adopt_fd(struct kdev_rpc_server *srv, int fd)
{
        if (!srv || fd < 0)
                return -EINVAL;
        if (srv->closing)
                return -ESHUTDOWN;
        return sconn_add(srv, NULL, fd);
}

/* ---------------------------------------------------------------------- */
/* server                                                                  */
/* ---------------------------------------------------------------------- */

struct kdev_rpc_server *kdev_rpc_server_new(uv_loop_t *loop,
                                            const struct kdev_rpc_server_options *opts)
{
        struct kdev_rpc_server *srv = calloc(1, sizeof(*srv));
        if (!srv)
                return NULL;
        srv->loop = loop;
        srv->max_recv = opts && opts->max_recv_message ? opts->max_recv_message
                                                       : KDEV_RPC_DEFAULT_MAX_MESSAGE;
        srv->max_send = opts && opts->max_send_message ? opts->max_send_message
                                                       : KDEV_RPC_DEFAULT_MAX_MESSAGE;
        srv->max_conns = opts && opts->max_connections ? opts->max_connections
                                                       : KDEV_RPC_DEFAULT_MAX_CONNECTIONS;
        srv->conn_budget = opts && opts->conn_recv_budget ? opts->conn_recv_budget
                                                          : KDEV_RPC_DEFAULT_CONN_RECV_BUDGET;
        srv->srv_budget = opts && opts->server_recv_budget ? opts->server_recv_budget
                                                           : KDEV_RPC_DEFAULT_SERVER_RECV_BUDGET;
        srv->prio_share = opts && opts->priority_share ? opts->priority_share
                                                       : KDEV_RPC_DEFAULT_PRIORITY_SHARE;
        if (srv->prio_share > srv->srv_budget)
                srv->prio_share = srv->srv_budget;
        srv->stall_ms = opts && opts->recv_stall_ms ? opts->recv_stall_ms
                                                    : KDEV_RPC_DEFAULT_RECV_STALL_MS;
        srv->rbuf = malloc(KDEV_RPC_READ_BUF);
        if (!srv->rbuf || nghttp2_option_new(&srv->h2opt) != 0) {
                free(srv->rbuf);
                free(srv);
                return NULL;
        }
        /* no priority tree to keep: closed streams need not be retained */
        nghttp2_option_set_no_closed_streams(srv->h2opt, 1);
        /* nghttp2's HTTP messaging checks stay off: they reject an
         * :authority that is a socket path ("/var/lib/kubelet/device-plugins/
         * x.sock", which older kubelets and grpc-go releases send when they
         * dial a bare path) as a PROTOCOL_ERROR, where gRPC servers accept
         * it, and nghttp2 has no switch for that check alone. What they would
         * check is checked here instead (header_check(): field names and
         * values per RFC 9113 section 8.2.1 -- no NUL, CR, LF or other
         * controls --, no connection-specific fields and TE only "trailers"
         * (8.2.2), and the request pseudo-headers, once each, before the
         * regular ones), as is what gRPC needs (:method POST, :path,
         * content-type); content-length is not (gRPC messages carry their
         * own lengths). */
        nghttp2_option_set_no_http_messaging(srv->h2opt, 1);
        if (nghttp2_session_callbacks_new(&srv->cbs) != 0) {
                nghttp2_option_del(srv->h2opt);
                free(srv->rbuf);
                free(srv);
                return NULL;
        }
        nghttp2_session_callbacks_set_on_begin_headers_callback(srv->cbs, on_begin_headers);
        nghttp2_session_callbacks_set_on_header_callback(srv->cbs, on_header);
        nghttp2_session_callbacks_set_on_frame_recv_callback(srv->cbs, on_frame_recv);
        nghttp2_session_callbacks_set_on_data_chunk_recv_callback(srv->cbs, on_data_chunk_recv);
        nghttp2_session_callbacks_set_on_frame_send_callback(srv->cbs, on_frame_send);
        nghttp2_session_callbacks_set_on_stream_close_callback(srv->cbs, on_stream_close);
        if (uv_pipe_init(loop, &srv->listener, 0) < 0 || uv_idle_init(loop, &srv->closer) < 0 ||
            uv_timer_init(loop, &srv->sweep) < 0) {
                nghttp2_session_callbacks_del(srv->cbs);
                nghttp2_option_del(srv->h2opt);
                free(srv->rbuf);
                free(srv);
                return NULL;
        }
        srv->listener.data = srv;
        srv->closer.data = srv;
        srv->sweep.data = srv;
        srv->handles = 3;
        srv->sweep_every = srv->stall_ms / 4 ? srv->stall_ms / 4 : 1;
        srv->last_sweep = uv_now(loop);
        uv_timer_start(&srv->sweep, srv_sweep_cb, srv->sweep_every, srv->sweep_every);
        uv_unref((uv_handle_t *)&srv->sweep); /* never keeps the loop alive */
        return srv;
}

int kdev_rpc_server_add_method(struct kdev_rpc_server *srv, const char *path, bool server_streaming,
                               kdev_rpc_handler_fn handler, void *user_data)
{
        if (!srv || !path || !handler)
                return -EINVAL;
        struct method **nm = realloc(srv->methods, (srv->nmethods + 1) * sizeof(*nm));
        if (!nm)
                return -ENOMEM;
        srv->methods = nm;
        struct method *m = malloc(sizeof(*m));
        char *p = strdup(path);
        if (!m || !p) {
                free(m);
                free(p);
                return -ENOMEM;
        }
        *m = (struct method){ p, strlen(p), server_streaming, handler, user_data };
        nm[srv->nmethods++] = m;
        return 0;
}

int kdev_rpc_server_listen_unix(struct kdev_rpc_server *srv, const char *path,
                                struct kdev_err *err)
{
        struct sockaddr_un sa = { .sun_family = AF_UNIX };
        if (!srv || !path || !path[0])
                return kdev_err_set(err, EINVAL, "listen: empty socket path");
        if (srv->closing)
                return kdev_err_set(err, ESHUTDOWN, "listen unix:%s: server is closing", path);
        if (srv->listening)
                return kdev_err_set(err, EBUSY, "listen unix:%s: server already listening", path);
        size_t len = strlen(path);
        if (len >= sizeof(sa.sun_path))
                return kdev_err_set(err, ENAMETOOLONG,
                                    "listen unix:%s: socket path is %zu bytes, a Unix socket path "
                                    "must be at most %zu bytes (sun_path is %zu bytes with the "
                                    "terminating NUL)",
                                    path, len, sizeof(sa.sun_path) - 1, sizeof(sa.sun_path));
        memcpy(sa.sun_path, path, len + 1);
        int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
        if (fd < 0) {
                int e = errno;
                return kdev_err_set(err, e, "listen unix:%s: socket: %s", path, strerror(e));
        }
        if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
                int e = errno;
                close(fd);
                return kdev_err_set(err, e, "listen unix:%s: bind: %s", path, strerror(e));
        }
        /* 0600 whatever the umask: bind(2) creates the file with 0777 & ~umask
         * (fchmod on a Unix socket fd does not change the file on Linux, and
         * umask is process-wide, not thread-safe). connect(2) checks the mode
         * it finds, and nobody can connect before listen(2), so the looser
         * mode between bind and here is never usable. */
        if (chmod(path, KDEV_RPC_SOCKET_MODE) < 0) {
                int e = errno;
                close(fd);
                unlink(path); /* we created it a moment ago */
                return kdev_err_set(err, e, "listen unix:%s: chmod %04o: %s", path,
                                    (unsigned)KDEV_RPC_SOCKET_MODE, strerror(e));
        }
        /* uv_pipe_open (not uv_pipe_bind): libuv would unlink a path it bound
         * when the handle closes, and the file's fate is the caller's call. */
        int rv = uv_pipe_open(&srv->listener, fd);
        if (rv == 0)
                rv = uv_listen((uv_stream_t *)&srv->listener, 128, on_connection);
        if (rv < 0) {
                if (uv_fileno((uv_handle_t *)&srv->listener, &(uv_os_fd_t){ 0 }) != 0)
                        close(fd);
                unlink(path); /* we created it a moment ago */
                return kdev_err_set(err, -rv, "listen unix:%s: %s", path, uv_strerror(rv));
        }
        srv->listening = true;
        return 0;
}

static void srv_handle_closed(uv_handle_t *h)
{
        struct kdev_rpc_server *srv = h->data;
        srv->handles--;
        srv_maybe_free(srv);
}

static void srv_maybe_free(struct kdev_rpc_server *srv)
{
        if (!srv->closing || srv->handles > 0 || srv->conns)
                return;
        void (*done)(void *) = srv->done;
        void *arg = srv->done_arg;
        for (size_t i = 0; i < srv->nmethods; i++) {
                free(srv->methods[i]->path);
                free(srv->methods[i]);
        }
        free(srv->methods);
        nghttp2_session_callbacks_del(srv->cbs);
        nghttp2_option_del(srv->h2opt);
        free(srv->rbuf);
        free(srv);
        if (done)
                done(arg);
}

void kdev_rpc_server_close(struct kdev_rpc_server *srv, void (*done)(void *arg), void *arg)
{
        if (!srv || srv->closing)
                return;
        srv->closing = true;
        srv->done = done;
        srv->done_arg = arg;
        uv_close((uv_handle_t *)&srv->listener, srv_handle_closed);
        uv_close((uv_handle_t *)&srv->closer, srv_handle_closed);
        uv_close((uv_handle_t *)&srv->sweep, srv_handle_closed);
        /* conns are freed only from close callbacks, so |next| stays valid */
        for (struct sconn *sc = srv->conns; sc; sc = sc->next)
                sconn_kill(sc, true);
}

void kdev_rpc_server_set_priority_connection(struct kdev_rpc_server *srv, uint64_t conn_id)
{
        if (!srv)
                return;
        srv->prio_conn = 0;
        for (const struct sconn *sc = srv->conns; sc; sc = sc->next)
                if (sc->id == conn_id && !sc->gone)
                        srv->prio_conn = conn_id;
}

size_t kdev_rpc__server_stalls(const struct kdev_rpc_server *srv)
{
        return srv ? srv->stalls : 0;
}

size_t kdev_rpc_server_open_calls(const struct kdev_rpc_server *srv)
{
        return srv ? srv->ncalls : 0;
}

size_t kdev_rpc__server_connections(const struct kdev_rpc_server *srv)
{
        return srv ? srv->nconns : 0;
}

size_t kdev_rpc__server_request_bytes(const struct kdev_rpc_server *srv)
{
        return srv ? srv->req_alloc : 0;
}
