/* Internal to kdev_model: the memory of container edits (model/edits.h),
 * malloc'ed or from the edits' allocator, for the model's own builders
 * (kdev_resource_edits writes its node array directly). */
#ifndef KDEV_MODEL_EDITS_INTERNAL_H
#define KDEV_MODEL_EDITS_INTERNAL_H

#include <stddef.h>

#include "model/edits.h"

/* A copy of |s| (NULL: "") for |e|: from its allocator, or malloc'ed. NULL
 * when out of memory. */
char *kdev_edits_strdup(const struct kdev_container_edits *e, const char *s);

/* An array of |n| zeroed items of |size| bytes for one of e's arrays, with
 * the room that the kdev_edits_add_* functions expect of it when they add to
 * it: calloc'ed (at least one item), or from e's allocator. NULL when out of
 * memory. */
void *kdev_edits_array(const struct kdev_container_edits *e, size_t n, size_t size);

#endif /* KDEV_MODEL_EDITS_INTERNAL_H */
