/* Internal to kdev_model: device lookup by ID for one request. Linear for
 * small requests, a sorted index for large ones, so a request of m IDs over n
 * devices costs O(m*n) only when that is small. */
#ifndef KDEV_MODEL_LOOKUP_H
#define KDEV_MODEL_LOOKUP_H

#include <stddef.h>

#include "model/model.h"

struct kdev_lookup {
        const struct kdev_resource *r;
        const struct kdev_device **sorted; /* NULL: linear search */
};

/* Prepares lookups in |r| for about |n_queries| IDs. Returns 0 or -ENOMEM. */
int kdev_lookup_init(struct kdev_lookup *lk, const struct kdev_resource *r, size_t n_queries);

/* Returns the device with ID |id| or NULL. */
const struct kdev_device *kdev_lookup_find(const struct kdev_lookup *lk, const char *id);

void kdev_lookup_free(struct kdev_lookup *lk);

#endif /* KDEV_MODEL_LOOKUP_H */
