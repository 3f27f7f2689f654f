/* kdev device model: physical devices and the physical -> logical mapping
 * (model.h). */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "model/model.h"

/* Open addressing over the set's physical array: slots hold index + 1 (0:
 * empty), at most half full. */
struct kdev_physical_index {
        uint32_t *slots;
        size_t mask;
        struct kdev_physical *const *of; /* the array it was built for */
        size_t n;
};

static void index_free(struct kdev_physical_index *ix)
{
        if (!ix)
                return;
        free(ix->slots);
        free(ix);
}

static void drop_index(struct kdev_resource_set *set)
{
        index_free(set->physical_index);
        set->physical_index = NULL;
}

static void physical_free(struct kdev_physical *p)
{
        if (!p)
                return;
        if (p->free_data)
                p->free_data(p->data);
        free(p->logical);
        free(p->id);
        free(p);
}

void kdev_physical_truncate(struct kdev_resource_set *set, size_t from)
{
        if (!set)
                return;
        for (size_t i = from; i < set->n_physical; i++)
                physical_free(set->physical[i]);
        if (from < set->n_physical)
                set->n_physical = from;
        if (set->n_physical == 0) {
                free(set->physical);
                set->physical = NULL;
        }
        drop_index(set);
}

size_t kdev_physical_remove_if(struct kdev_resource_set *set,
                               bool (*drop)(void *arg, const struct kdev_physical *p), void *arg)
{
        if (!set || !drop)
                return 0;
        size_t kept = 0, n = set->n_physical;
        for (size_t i = 0; i < n; i++) {
                struct kdev_physical *p = set->physical[i];
                if (drop(arg, p)) {
                        physical_free(p);
                        continue;
                }
                p->index = kept;
                set->physical[kept++] = p;
        }
        set->n_physical = kept;
        if (kept == 0) {
                free(set->physical);
                set->physical = NULL;
        }
        drop_index(set);
        return n - kept;
}

struct kdev_physical *kdev_physical_add(struct kdev_resource_set *set, const char *id,
                                        int numa_node, void *data,
                                        void (*free_data)(void *data))
{
        struct kdev_physical *p = calloc(1, sizeof(*p));
        if (p)
                p->id = strdup(id);
        struct kdev_physical **v =
                p && p->id ? realloc(set->physical, (set->n_physical + 1) * sizeof(*v)) : NULL;
        if (!v) {
                if (p)
                        free(p->id);
                free(p);
                if (free_data)
                        free_data(data);
                return NULL;
        }
        set->physical = v;
        p->healthy = true;
        p->numa_node = numa_node;
        p->data = data;
        p->free_data = free_data;
        p->index = set->n_physical;
        v[set->n_physical++] = p;
        drop_index(set);
        return p;
}

int kdev_physical_move(struct kdev_resource_set *dst, struct kdev_resource_set *src)
{
        if (!src->n_physical)
                return 0;
        struct kdev_physical **v =
                realloc(dst->physical, (dst->n_physical + src->n_physical) * sizeof(*v));
        if (!v)
                return -ENOMEM;
        dst->physical = v;
        for (size_t i = 0; i < src->n_physical; i++) {
                struct kdev_physical *p = src->physical[i];
                p->index = dst->n_physical;
                v[dst->n_physical++] = p;
        }
        free(src->physical);
        src->physical = NULL;
        src->n_physical = 0;
        drop_index(src);
        drop_index(dst);
        return 0;
}

static struct kdev_physical_index *index_new(struct kdev_physical *const *v, size_t n)
{
        if (n >= UINT32_MAX / 2)
                return NULL;
        struct kdev_physical_index *ix = calloc(1, sizeof(*ix));
        if (!ix)
                return NULL;
        size_t size = 16;
        while (size < 2 * n)
                size *= 2;
        ix->slots = calloc(size, sizeof(*ix->slots));
        if (!ix->slots) {
                free(ix);
                return NULL;
        }
        ix->mask = size - 1;
        ix->of = v;
        ix->n = n;
        return ix;
}

/* The slot of |id| in |ix|: the one holding it, or the empty one where it
 * would go. */
static size_t index_slot(const struct kdev_physical_index *ix, const char *id)
{
        size_t s = kdev_str_hash(id) & ix->mask;
        while (ix->slots[s] && strcmp(ix->of[ix->slots[s] - 1]->id, id) != 0)
                s = (s + 1) & ix->mask;
        return s;
}

static bool index_covers(const struct kdev_resource_set *set)
{
        const struct kdev_physical_index *ix = set->physical_index;
        return ix && ix->of == set->physical && ix->n == set->n_physical;
}

struct kdev_physical *kdev_physical_find(const struct kdev_resource_set *set, const char *id)
{
        if (!set || !id)
                return NULL;
        if (index_covers(set)) {
                const struct kdev_physical_index *ix = set->physical_index;
                uint32_t at = ix->slots[index_slot(ix, id)];
                return at ? set->physical[at - 1] : NULL;
        }
        for (size_t i = 0; i < set->n_physical; i++) {
                if (strcmp(set->physical[i]->id, id) == 0)
                        return set->physical[i];
        }
        return NULL;
}

/* Empties the mapping of every physical device. */
static void unlink_all(struct kdev_resource_set *set)
{
        for (size_t i = 0; i < set->n_physical; i++) {
                free(set->physical[i]->logical);
                set->physical[i]->logical = NULL;
                set->physical[i]->n_logical = 0;
        }
        drop_index(set);
}

int kdev_resource_set_link(struct kdev_resource_set *set, struct kdev_err *err)
{
        if (!set)
                return 0;
        unlink_all(set);
        struct kdev_physical_index *ix = index_new(set->physical, set->n_physical);
        if (!ix)
                return kdev_err_set(err, ENOMEM, "out of memory");
        for (size_t i = 0; i < set->n_physical; i++) {
                size_t s = index_slot(ix, set->physical[i]->id);
                if (ix->slots[s]) {
                        index_free(ix);
                        return kdev_err_set(err, EEXIST, "physical device %s appears twice",
                                            set->physical[i]->id);
                }
                ix->slots[s] = (uint32_t)i + 1;
        }
        /* count, then fill: one pass over the devices each */
        size_t *counts = calloc(set->n_physical ? set->n_physical : 1, sizeof(*counts));
        if (!counts) {
                index_free(ix);
                return kdev_err_set(err, ENOMEM, "out of memory");
        }
        int rc = 0;
        for (size_t r = 0; r < set->n_resources && rc == 0; r++) {
                const struct kdev_resource *res = &set->resources[r];
                for (size_t d = 0; d < res->n_devices; d++) {
                        const struct kdev_physical *p = res->devices[d].physical;
                        if (!p)
                                continue;
                        if (p->index >= set->n_physical || set->physical[p->index] != p) {
                                rc = kdev_err_set(err, EINVAL,
                                                  "device %s of %s points to a physical device "
                                                  "outside the set",
                                                  res->devices[d].id ? res->devices[d].id : "",
                                                  res->name ? res->name : "");
                                break;
                        }
                        counts[p->index]++;
                }
        }
        for (size_t i = 0; i < set->n_physical && rc == 0; i++) {
                if (!counts[i])
                        continue;
                set->physical[i]->logical = malloc(counts[i] * sizeof(struct kdev_device_ref));
                if (!set->physical[i]->logical)
                        rc = kdev_err_set(err, ENOMEM, "out of memory");
        }
        if (rc < 0) {
                free(counts);
                index_free(ix);
                unlink_all(set);
                return rc;
        }
        for (size_t r = 0; r < set->n_resources; r++) {
                const struct kdev_resource *res = &set->resources[r];
                for (size_t d = 0; d < res->n_devices; d++) {
                        struct kdev_physical *p = res->devices[d].physical;
                        if (p)
                                p->logical[p->n_logical++] = (struct kdev_device_ref){r, d};
                }
        }
        free(counts);
        set->physical_index = ix;
        return 0;
}

size_t kdev_physical_set_health(struct kdev_resource_set *set, struct kdev_physical *p,
                                bool healthy, bool *changed)
{
        if (!set || !p)
                return 0;
        size_t n = 0;
        p->healthy = healthy;
        for (size_t i = 0; i < p->n_logical; i++) {
                const struct kdev_device_ref *ref = &p->logical[i];
                if (ref->resource >= set->n_resources ||
                    ref->device >= set->resources[ref->resource].n_devices)
                        continue; /* the set changed since the link */
                struct kdev_device *d = &set->resources[ref->resource].devices[ref->device];
                if (d->physical != p || d->healthy == healthy)
                        continue;
                d->healthy = healthy;
                n++;
                if (changed)
                        changed[ref->resource] = true;
        }
        return n;
}

size_t kdev_physical_apply(struct kdev_resource_set *set, const struct kdev_physical_event *ev,
                           bool *changed)
{
        if (!set || !ev)
                return 0;
        return kdev_physical_set_health(set, kdev_physical_find(set, ev->id), ev->healthy,
                                        changed);
}
