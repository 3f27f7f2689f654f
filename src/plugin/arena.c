/* Per-request bump allocator (see arena_internal.h). */
#include "plugin/arena_internal.h"

#include <errno.h>
#include <stdalign.h>
#include <stdint.h>
#include <stdlib.h>

struct kdev_arena_block {
        struct kdev_arena_block *next;
        size_t size; /* usable bytes after the header */
        alignas(max_align_t) char data[];
};

#define ALIGN ((size_t)alignof(max_align_t))

static void *pb_alloc(void *data, size_t size)
{
        return kdev_arena_alloc(data, size);
}

static void pb_free(void *data, void *p)
{
        (void)data; /* released with the arena */
        (void)p;
}

void kdev_arena_init(struct kdev_arena *a, void *buf, size_t size)
{
        /* the caller's buffer, trimmed to start aligned */
        uintptr_t b = (uintptr_t)buf, al = (b + ALIGN - 1) & ~(uintptr_t)(ALIGN - 1);
        a->first = buf && size > al - b ? (char *)al : NULL;
        a->first_size = a->first ? (size - (al - b)) & ~(ALIGN - 1) : 0;
        a->used = 0;
        a->big = NULL;
        a->cur = a->first;
        a->cap = a->first_size;
        a->pb.alloc = pb_alloc;
        a->pb.free = pb_free;
        a->pb.allocator_data = a;
}

void *kdev_arena_alloc_block(struct kdev_arena *a, size_t size)
{
        if (size > SIZE_MAX / 2 - ALIGN) {
                errno = ENOMEM;
                return NULL;
        }
        size = size ? (size + ALIGN - 1) & ~(ALIGN - 1) : ALIGN;
        if (a->cur && a->cap - a->used >= size) { /* size 0 in a block with room */
                void *p = a->cur + a->used;
                a->used += size;
                return p;
        }
        size_t want = a->cap ? 2 * a->cap : 4096;
        while (want < size)
                want *= 2;
        struct kdev_arena_block *blk = malloc(sizeof(*blk) + want);
        if (!blk)
                return NULL;
        blk->next = a->big;
        blk->size = want;
        a->big = blk;
        a->cur = blk->data;
        a->cap = want;
        a->used = size;
        return blk->data;
}

void kdev_arena_release(struct kdev_arena *a)
{
        while (a->big) {
                struct kdev_arena_block *next = a->big->next;
                free(a->big);
                a->big = next;
        }
        a->cur = a->first;
        a->cap = a->first_size;
        a->used = 0;
}
