/* HTTP/2 transport shared by server and client connections: reads feed
 * nghttp2_session_mem_recv(), frames from nghttp2_session_mem_send() are
 * copied into uv_write requests. nghttp2 must not be asked to send from
 * inside its own callbacks, so a flush requested there (depth > 0) is
 * deferred to the connection's idle handle, which runs before the loop
 * blocks again. Writing stops while KDEV_RPC_WQ_HIGH bytes wait for the
 * socket, which is what makes slow readers push back into the streams;
 * reading stops as well until the queue drains, so that a peer that sends
 * without reading cannot make us queue ever more frames (WINDOW_UPDATE,
 * RST_STREAM, responses) for it. Queued bytes are counted with each write
 * request's own size, so that many tiny frames weigh what they cost.
 *
 * Closing: uv_close() cancels writes still queued, so a graceful close
 * (GOAWAY) hands the last frames to the socket, stops reading and waits for
 * the write queue to drain before closing, bounded by the linger timer. */
#include "rpc/rpc_internal.h"

#include <stdlib.h>
#include <string.h>

struct wreq {
        uv_write_t req;
        struct kdev_rpc_conn *c;
        size_t len; /* counted in wq_bytes: data bytes + sizeof(struct wreq) */
        uint8_t *data;
};

static void conn_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf);
static void conn_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf);

static void conn_handle_closed(uv_handle_t *h)
{
        struct kdev_rpc_conn *c = h->data;
        if (--c->handles == 0)
                c->ops->closed(c);
}

static void conn_close_handles(struct kdev_rpc_conn *c)
{
        if (!uv_is_closing((uv_handle_t *)&c->pipe))
                uv_close((uv_handle_t *)&c->pipe, conn_handle_closed);
        if (!uv_is_closing((uv_handle_t *)&c->idle))
                uv_close((uv_handle_t *)&c->idle, conn_handle_closed);
        if (!uv_is_closing((uv_handle_t *)&c->linger))
                uv_close((uv_handle_t *)&c->linger, conn_handle_closed);
}

int kdev_rpc__conn_init(struct kdev_rpc_conn *c, uv_loop_t *loop,
                        const struct kdev_rpc_conn_ops *ops, void *owner)
{
        int rv = uv_pipe_init(loop, &c->pipe, 0);
        if (rv < 0)
                return rv;
        /* neither can fail on Unix (they only fill in the structs) */
        (void)uv_idle_init(loop, &c->idle);
        (void)uv_timer_init(loop, &c->linger);
        c->pipe.data = c;
        c->idle.data = c;
        c->linger.data = c;
        c->handles = 3;
        c->ops = ops;
        c->owner = owner;
        return 0;
}

static void conn_write_done(uv_write_t *req, int status)
{
        struct wreq *w = (struct wreq *)req;
        struct kdev_rpc_conn *c = w->c;
        c->wq_bytes -= w->len;
        free(w->data);
        free(w);
        if (c->dead) {
                if (c->draining && c->wq_bytes == 0)
                        conn_close_handles(c); /* the last frames are out */
                return;
        }
        if (status < 0) {
                c->ops->lost(c, status);
                return;
        }
        if (c->read_paused && c->wq_bytes < KDEV_RPC_WQ_HIGH / 2) {
                int rv = uv_read_start((uv_stream_t *)&c->pipe, conn_alloc, conn_read);
                if (rv < 0) {
                        c->ops->lost(c, rv);
                        return;
                }
                c->read_paused = false;
        }
        kdev_rpc__conn_flush(c);
}

/* Frames gathered on the stack before they go to the socket: one unary
 * response (HEADERS, DATA, trailers) is a few hundred bytes. */
#define PUMP_STACK_BUF 16384u

/* Hands the |len| bytes at |data| to the socket: written at once when
 * nothing of ours is queued and the socket takes them (no request, no
 * completion callback, no change of the poll set), else (the rest) in a
 * uv_write request. |heap| is NULL when |data| is borrowed (copied if it
 * must be queued), else the malloc'd buffer holding |data| (ownership
 * taken). A write error is left to the request's callback, as for any
 * write, so that the owner hears of it from the loop. Returns 0 or a
 * negative libuv error (nothing queued). */
static int conn_write(struct kdev_rpc_conn *c, const uint8_t *data, size_t len, uint8_t *heap)
{
        if (c->wq_bytes == 0) {
                uv_buf_t ub = uv_buf_init((char *)data, (unsigned int)len);
                int n = uv_try_write((uv_stream_t *)&c->pipe, &ub, 1);
                if (n > 0) {
                        data += n;
                        len -= (size_t)n;
                }
                if (len == 0) {
                        free(heap);
                        return 0;
                }
        }
        if (!heap) {
                heap = malloc(len);
                if (!heap)
                        return UV_ENOMEM;
                memcpy(heap, data, len);
                data = heap;
        }
        struct wreq *w = malloc(sizeof(*w));
        if (!w) {
                free(heap);
                return UV_ENOMEM;
        }
        w->c = c;
        w->len = len + sizeof(*w);
        w->data = heap;
        uv_buf_t ub = uv_buf_init((char *)data, (unsigned int)len);
        int rv = uv_write(&w->req, (uv_stream_t *)&c->pipe, &ub, 1, conn_write_done);
        if (rv < 0) {
                free(heap);
                free(w);
                return rv;
        }
        c->wq_bytes += w->len;
        if (c->wq_bytes >= KDEV_RPC_WQ_HIGH && !c->read_paused && !c->dead) {
                /* the peer is not reading: stop reading it too */
                if (uv_read_stop((uv_stream_t *)&c->pipe) == 0)
                        c->read_paused = true;
        }
        return 0;
}

/* Moves frames from nghttp2 to the socket, in batches of up to
 * KDEV_RPC_WQ_HIGH bytes less what is queued, each handed over in one write
 * (gathered on the stack while they fit, else in a growing heap buffer).
 * With |final| it takes one batch of up to KDEV_RPC_WQ_HIGH bytes whatever
 * is already queued (the GOAWAY must go out even behind a full queue);
 * otherwise it goes on with another batch while the socket took all of the
 * last one. Returns 0, or a negative libuv error when the connection must
 * be dropped. */
static int conn_pump(struct kdev_rpc_conn *c, bool final)
{
        uint8_t stack[PUMP_STACK_BUF];
        int err = 0;

        for (;;) {
                uint8_t *buf = NULL; /* heap buffer once the stack is too small */
                size_t len = 0, cap = 0;
                bool more = false; /* stopped at the size bound, not for lack of frames */

                c->depth++;
                for (;;) {
                        if ((final ? 0 : c->wq_bytes) + len >= KDEV_RPC_WQ_HIGH) {
                                more = true;
                                break;
                        }
                        const uint8_t *data;
                        ssize_t n = nghttp2_session_mem_send(c->session, &data);
                        if (n < 0) {
                                err = UV_EPROTO;
                                break;
                        }
                        if (n == 0)
                                break;
                        if (!buf && len + (size_t)n <= sizeof(stack)) {
                                memcpy(stack + len, data, (size_t)n);
                                len += (size_t)n;
                                continue;
                        }
                        if (len + (size_t)n > cap) {
                                size_t ncap = cap ? cap * 2 : 2 * sizeof(stack);
                                while (ncap < len + (size_t)n)
                                        ncap *= 2;
                                uint8_t *nb = realloc(buf, ncap);
                                if (!nb) {
                                        err = UV_ENOMEM;
                                        break;
                                }
                                if (!buf)
                                        memcpy(nb, stack, len);
                                buf = nb;
                                cap = ncap;
                        }
                        memcpy(buf + len, data, (size_t)n);
                        len += (size_t)n;
                }
                c->depth--;
                if (len == 0 || uv_is_closing((uv_handle_t *)&c->pipe)) {
                        free(buf);
                        return err;
                }
                size_t queued = c->wq_bytes;
                int rv = conn_write(c, buf ? buf : stack, len, buf);
                if (rv < 0)
                        return rv;
                if (err || final || !more || c->wq_bytes != queued)
                        return err; /* done, or the rest waits for the queue */
        }
}

static void conn_linger_cb(uv_timer_t *t)
{
        conn_close_handles(t->data); /* the peer does not read: give up */
}

static void conn_idle_cb(uv_idle_t *h)
{
        struct kdev_rpc_conn *c = h->data;
        uv_idle_stop(h);
        if (c->final_flush) {
                c->final_flush = false;
                if (c->session)
                        (void)conn_pump(c, true); /* on error the queue fails fast */
                if (c->wq_bytes > 0) {
                        c->draining = true;
                        uv_timer_start(&c->linger, conn_linger_cb, KDEV_RPC_CLOSE_FLUSH_MS, 0);
                        return;
                }
                conn_close_handles(c);
                return;
        }
        kdev_rpc__conn_flush(c);
}

void kdev_rpc__conn_flush(struct kdev_rpc_conn *c)
{
        if (c->dead || !c->session)
                return;
        if (c->depth > 0) {
                uv_idle_start(&c->idle, conn_idle_cb);
                return;
        }
        /* flushing now: a flush deferred from inside nghttp2 is done by this
         * one (the idle handle serves nothing else on a live connection) */
        uv_idle_stop(&c->idle);
        int rv = conn_pump(c, false);
        if (c->dead)
                return;
        if (rv < 0) {
                c->ops->lost(c, rv);
                return;
        }
        if (!nghttp2_session_want_read(c->session) && !nghttp2_session_want_write(c->session) &&
            c->wq_bytes == 0)
                c->ops->lost(c, UV_EOF); /* GOAWAY exchanged and no streams left */
}

static void conn_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
{
        (void)suggested;
        struct kdev_rpc_conn *c = h->data;
        buf->base = c->rbuf ? (char *)c->rbuf : malloc(KDEV_RPC_READ_BUF);
        buf->len = buf->base ? KDEV_RPC_READ_BUF : 0;
}

static void conn_read_buf_done(struct kdev_rpc_conn *c, const uv_buf_t *buf)
{
        if (buf->base != (char *)c->rbuf)
                free(buf->base);
}

static void conn_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf)
{
        struct kdev_rpc_conn *c = s->data;
        if (nread > 0 && !c->dead) {
                c->depth++;
                ssize_t rv = nghttp2_session_mem_recv(c->session, (const uint8_t *)buf->base,
                                                      (size_t)nread);
                c->depth--;
                conn_read_buf_done(c, buf);
                if (c->dead)
                        return;
                if (rv < 0) {
                        /* the owner closes with flush_first for UV_EPROTO, so
                         * the GOAWAY nghttp2 queued goes out */
                        c->ops->lost(c, UV_EPROTO);
                        return;
                }
                kdev_rpc__conn_flush(c);
                return;
        }
        conn_read_buf_done(c, buf);
        if (nread < 0 && !c->dead)
                c->ops->lost(c, (int)nread);
}

int kdev_rpc__conn_start(struct kdev_rpc_conn *c)
{
        int rv = uv_read_start((uv_stream_t *)&c->pipe, conn_alloc, conn_read);
        if (rv < 0)
                return rv;
        uv_idle_start(&c->idle, conn_idle_cb);
        return 0;
}

void kdev_rpc__conn_close(struct kdev_rpc_conn *c, bool flush_first)
{
        if (c->dead)
                return;
        c->dead = true;
        if (!uv_is_closing((uv_handle_t *)&c->pipe))
                uv_read_stop((uv_stream_t *)&c->pipe);
        if (flush_first && c->session) {
                c->final_flush = true;
                uv_idle_start(&c->idle, conn_idle_cb);
                return;
        }
        conn_close_handles(c);
}
