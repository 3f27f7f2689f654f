/* Internal to kdev_model: the hash index of a resource's device IDs
 * (struct kdev_resource.index), built by kdev_resource_index() and used by
 * kdev_resource_find(), so that a lookup by ID costs O(1) on average whatever
 * the resource's size. */
#ifndef KDEV_MODEL_LOOKUP_INTERNAL_H
#define KDEV_MODEL_LOOKUP_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "model/model.h"

/* Builds an index of the device IDs of |devices| (|n| devices; devices with a
 * NULL ID are left out; of repeated IDs the first device is kept, as a linear
 * search finds it). Borrows |devices|: the index is valid while the array and
 * its IDs are unchanged. Returns the index (free with kdev_id_index_free), or
 * NULL on allocation failure or when |n| does not fit the index (UINT32_MAX
 * devices and more). */
struct kdev_id_index *kdev_id_index_new(const struct kdev_device *devices, size_t n);

/* True when |ix| was built for exactly this |devices| array of |n| devices. */
bool kdev_id_index_covers(const struct kdev_id_index *ix, const struct kdev_device *devices,
                          size_t n);

/* Returns the device with ID |id| in the indexed array, or NULL. O(1) on
 * average (one hash of |id|, then compares with the IDs of equal hash). */
const struct kdev_device *kdev_id_index_find(const struct kdev_id_index *ix, const char *id);

/* NULL-safe. */
void kdev_id_index_free(struct kdev_id_index *ix);

/* Lookups for one request: the resource's own index when it covers its
 * devices, otherwise a linear search for small requests and an index built
 * for the request when (queries x devices) is large. */
struct kdev_lookup {
        const struct kdev_resource *r;
        const struct kdev_id_index *ix; /* r->index or tmp; NULL: linear */
        struct kdev_id_index *tmp;      /* owned; NULL: r->index or linear */
};

/* Prepares lookups in |r| for about |n_queries| IDs. Returns 0 or -ENOMEM. */
int kdev_lookup_init(struct kdev_lookup *lk, const struct kdev_resource *r, size_t n_queries);

/* Returns the device with ID |id| (not NULL) or NULL, as kdev_resource_find(). */
static inline const struct kdev_device *kdev_lookup_find(const struct kdev_lookup *lk,
                                                         const char *id)
{
        return lk->ix ? kdev_id_index_find(lk->ix, id) : kdev_resource_find(lk->r, id);
}

void kdev_lookup_free(struct kdev_lookup *lk);

#endif /* KDEV_MODEL_LOOKUP_INTERNAL_H */
