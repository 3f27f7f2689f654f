/* Shared by the unit tests of container edits with an allocator
 * (struct kdev_edits_allocator, model/edits.h): a bump allocator over one
 * buffer that can be told to fail. */
#ifndef KDEV_TESTS_EDITS_POOL_H
#define KDEV_TESTS_EDITS_POOL_H

#include <stdbool.h>
#include <stddef.h>

struct pool {
        _Alignas(max_align_t) char buf[16384];
        size_t used;
        int left;  /* allocations before it fails; -1: never */
        int calls; /* allocations asked for */
};

/* The allocator's alloc: |data| is a struct pool. */
static inline void *pool_alloc(void *data, size_t size)
{
        struct pool *p = data;
        p->calls++;
        size = (size + _Alignof(max_align_t) - 1) & ~(_Alignof(max_align_t) - 1);
        if (p->left == 0 || size > sizeof(p->buf) - p->used)
                return NULL;
        if (p->left > 0)
                p->left--;
        void *r = p->buf + p->used;
        p->used += size;
        return r;
}

/* Whether |ptr| points into what |p| handed out. */
static inline bool in_pool(const struct pool *p, const void *ptr)
{
        return (const char *)ptr >= p->buf && (const char *)ptr < p->buf + p->used;
}

#endif /* KDEV_TESTS_EDITS_POOL_H */
