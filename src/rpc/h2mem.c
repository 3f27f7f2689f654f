/* nghttp2's memory for a server connection's session (see rpc_internal.h,
 * struct kdev_rpc_h2mem). Each block has a 16-byte header with its size
 * class (KDEV_RPC_H2MEM_CLASSES for a malloc'ed large block) and its usable
 * size; a block on a spare list holds the next one in its first bytes. */
#include <errno.h>
#include <stdalign.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "rpc/rpc_internal.h"

#define SMALLEST 64u /* usable bytes of class 0; class c holds SMALLEST << c */
#define BIG KDEV_RPC_H2MEM_CLASSES

struct head {
        alignas(16) uint32_t cls; /* size class, BIG for a malloc'ed large block */
        size_t size;              /* usable bytes after the header */
};

_Static_assert(sizeof(struct head) == 16, "the header keeps blocks 16-byte aligned");

static unsigned class_of(size_t size)
{
        unsigned c = 0;
        while (c < BIG && (size_t)SMALLEST << c < size)
                c++;
        return c;
}

static void *h2_malloc(size_t size, void *ud)
{
        struct kdev_rpc_h2mem *m = ud;
        unsigned c = class_of(size);
        struct head *h;
        if (c < BIG && m->spare[c]) {
                h = m->spare[c];
                memcpy(&m->spare[c], h + 1, sizeof(void *));
                m->n_spare[c]--;
                return h + 1;
        }
        size_t usable = c < BIG ? (size_t)SMALLEST << c : size;
        if (usable > SIZE_MAX - sizeof(*h)) {
                errno = ENOMEM;
                return NULL;
        }
        h = malloc(sizeof(*h) + usable);
        if (!h)
                return NULL;
        h->cls = c;
        h->size = usable;
        return h + 1;
}

static void h2_free(void *ptr, void *ud)
{
        struct kdev_rpc_h2mem *m = ud;
        if (!ptr)
                return;
        struct head *h = (struct head *)ptr - 1;
        if (h->cls >= BIG || m->n_spare[h->cls] >= KDEV_RPC_H2MEM_KEEP) {
                free(h);
                return;
        }
        memcpy(ptr, &m->spare[h->cls], sizeof(void *));
        m->spare[h->cls] = h;
        m->n_spare[h->cls]++;
}

static void *h2_calloc(size_t nmemb, size_t size, void *ud)
{
        if (size && nmemb > SIZE_MAX / size) {
                errno = ENOMEM;
                return NULL;
        }
        void *p = h2_malloc(nmemb * size, ud);
        if (p)
                memset(p, 0, nmemb * size);
        return p;
}

static void *h2_realloc(void *ptr, size_t size, void *ud)
{
        if (!ptr)
                return h2_malloc(size, ud);
        struct head *h = (struct head *)ptr - 1;
        if (size <= h->size && h->cls < BIG)
                return ptr;
        if (h->cls >= BIG && class_of(size) >= BIG) {
                if (size > SIZE_MAX - sizeof(*h)) {
                        errno = ENOMEM;
                        return NULL;
                }
                struct head *n = realloc(h, sizeof(*h) + size);
                if (!n)
                        return NULL;
                n->size = size;
                return n + 1;
        }
        void *n = h2_malloc(size, ud);
        if (!n)
                return NULL;
        memcpy(n, ptr, h->size < size ? h->size : size);
        h2_free(ptr, ud);
        return n;
}

void kdev_rpc__h2mem_init(struct kdev_rpc_h2mem *m)
{
        memset(m, 0, sizeof(*m));
        m->mem = (nghttp2_mem){m, h2_malloc, h2_free, h2_calloc, h2_realloc};
}

void kdev_rpc__h2mem_release(struct kdev_rpc_h2mem *m)
{
        for (unsigned c = 0; c < KDEV_RPC_H2MEM_CLASSES; c++) {
                while (m->spare[c]) {
                        struct head *h = m->spare[c];
                        memcpy(&m->spare[c], h + 1, sizeof(void *));
                        free(h);
                }
                m->n_spare[c] = 0;
        }
}
