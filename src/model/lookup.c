#include "model/lookup.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

/* Below this many (queries x devices) string comparisons a linear scan wins. */
#define LINEAR_WORK_MAX 4096

static int dev_ptr_cmp(const void *pa, const void *pb)
{
        const struct kdev_device *const *a = pa, *const *b = pb;
        return strcmp((*a)->id ? (*a)->id : "", (*b)->id ? (*b)->id : "");
}

int kdev_lookup_init(struct kdev_lookup *lk, const struct kdev_resource *r, size_t n_queries)
{
        lk->r = r;
        lk->sorted = NULL;
        if (r->n_devices == 0 || n_queries <= LINEAR_WORK_MAX / r->n_devices)
                return 0;
        lk->sorted = malloc(r->n_devices * sizeof(*lk->sorted));
        if (!lk->sorted)
                return -ENOMEM;
        for (size_t i = 0; i < r->n_devices; i++)
                lk->sorted[i] = &r->devices[i];
        qsort(lk->sorted, r->n_devices, sizeof(*lk->sorted), dev_ptr_cmp);
        return 0;
}

const struct kdev_device *kdev_lookup_find(const struct kdev_lookup *lk, const char *id)
{
        if (!lk->sorted)
                return kdev_resource_find(lk->r, id);
        size_t lo = 0, hi = lk->r->n_devices;
        while (lo < hi) {
                size_t mid = lo + (hi - lo) / 2;
                const char *mid_id = lk->sorted[mid]->id ? lk->sorted[mid]->id : "";
                int c = strcmp(id, mid_id);
                if (c == 0)
                        return lk->sorted[mid];
                if (c < 0)
                        hi = mid;
                else
                        lo = mid + 1;
        }
        return NULL;
}

void kdev_lookup_free(struct kdev_lookup *lk)
{
        free(lk->sorted);
        lk->sorted = NULL;
}
