/* A per-request bump allocator for protobuf-c (ProtobufCAllocator): the
 * messages one request unpacks into live in a few blocks that are freed at
 * once when the request is done, instead of one malloc per message, array
 * and string. Internal to src/plugin. */
#ifndef KDEV_PLUGIN_ARENA_INTERNAL_H
#define KDEV_PLUGIN_ARENA_INTERNAL_H

#include <stddef.h>

#include <protobuf-c/protobuf-c.h>

struct kdev_arena_block;

/* An arena. |first| (|first_size| bytes, the caller's, e.g. on its stack,
 * may be NULL with size 0) is used first; what does not fit goes to blocks
 * from malloc, each at least twice the previous one. */
struct kdev_arena {
        char *first;
        size_t first_size, used;      /* bytes of the current block */
        struct kdev_arena_block *big; /* malloc'ed blocks, newest first */
        char *cur;                    /* the current block: |first| or big's */
        size_t cap;                   /* its size (a multiple of max_align_t) */
        ProtobufCAllocator pb;        /* allocator_data = this arena */
};

/* Sets up |a| over the caller's |buf| of |size| bytes (NULL, 0: none).
 * Nothing is allocated until kdev_arena_alloc(). */
void kdev_arena_init(struct kdev_arena *a, void *buf, size_t size);

/* kdev_arena_alloc() of what the current block has no room for (and of
 * size 0): a new block. */
void *kdev_arena_alloc_block(struct kdev_arena *a, size_t size);

/* |size| bytes aligned for any object (max_align_t), valid until
 * kdev_arena_release(|a|); NULL when malloc fails (errno ENOMEM). Never
 * returns NULL for size 0 (one byte is taken). Inline for the common case,
 * a bump within the current block (whose free bytes are a multiple of the
 * alignment, so |size| rounded up fits when |size| does). */
static inline void *kdev_arena_alloc(struct kdev_arena *a, size_t size)
{
        if (size - 1 >= a->cap - a->used) /* size 0 wraps to the slow path */
                return kdev_arena_alloc_block(a, size);
        void *p = a->cur + a->used;
        a->used += (size + _Alignof(max_align_t) - 1) & ~(size_t)(_Alignof(max_align_t) - 1);
        return p;
}

/* Frees every block of |a| at once; |a| can be used again afterwards. */
void kdev_arena_release(struct kdev_arena *a);

#endif
