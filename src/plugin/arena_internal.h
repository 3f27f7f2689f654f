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
        ProtobufCAllocator pb;        /* allocator_data = this arena */
};

/* Sets up |a| over the caller's |buf| of |size| bytes (NULL, 0: none).
 * Nothing is allocated until kdev_arena_alloc(). */
void kdev_arena_init(struct kdev_arena *a, void *buf, size_t size);

/* |size| bytes aligned for any object (max_align_t), valid until
 * kdev_arena_release(|a|); NULL when malloc fails (errno ENOMEM). Never
 * returns NULL for size 0 (one byte is taken). */
void *kdev_arena_alloc(struct kdev_arena *a, size_t size);

/* Frees every block of |a| at once; |a| can be used again afterwards. */
void kdev_arena_release(struct kdev_arena *a);

#endif
