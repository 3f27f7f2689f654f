/* Per-call plumbing shared by the server's and the client's calls: the
 * queue of framed bytes an nghttp2 data provider hands out (the client's
 * request, the server's responses) and the calls' heap-allocated timers
 * (the client's deadline, the server's grpc-timeout). */
#include "rpc/rpc_internal.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

uv_timer_t *kdev_rpc__timer_new(uv_loop_t *loop, void *data)
{
        uv_timer_t *t = malloc(sizeof(*t));
        if (!t)
                return NULL;
        uv_timer_init(loop, t); /* cannot fail on Unix: it fills in the struct */
        t->data = data;
        return t;
}

static void timer_free_cb(uv_handle_t *h)
{
        free(h);
}

void kdev_rpc__timer_close(uv_timer_t **t)
{
        if (*t) {
                uv_close((uv_handle_t *)*t, timer_free_cb);
                *t = NULL;
        }
}

int kdev_rpc__outq_append(struct kdev_rpc_outq *q, uint8_t *framed, size_t flen)
{
        size_t unsent = kdev_rpc__outq_unsent(q);
        if (unsent == 0) {
                free(q->buf);
                q->buf = framed;
                q->len = flen;
                q->off = 0;
                return 0;
        }
        uint8_t *nb = malloc(unsent + flen);
        if (!nb) {
                free(framed);
                return -ENOMEM;
        }
        memcpy(nb, q->buf + q->off, unsent);
        memcpy(nb + unsent, framed, flen);
        free(framed);
        free(q->buf);
        q->buf = nb;
        q->len = unsent + flen;
        q->off = 0;
        return 0;
}

size_t kdev_rpc__outq_read(struct kdev_rpc_outq *q, uint8_t *dst, size_t max)
{
        size_t n = kdev_rpc__outq_unsent(q);
        if (n > max)
                n = max;
        if (n) {
                memcpy(dst, q->buf + q->off, n);
                q->off += n;
        }
        if (q->off == q->len)
                kdev_rpc__outq_free(q);
        return n;
}

void kdev_rpc__outq_free(struct kdev_rpc_outq *q)
{
        free(q->buf);
        q->buf = NULL;
        q->len = q->off = 0;
}
