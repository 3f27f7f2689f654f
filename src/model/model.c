/* kdev device model: resources, devices, the natural order of device IDs. */
#include "model/model.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "model/lookup_internal.h"

void kdev_device_clear(struct kdev_device *d)
{
        if (!d)
                return;
        for (size_t i = 0; i < d->n_specs; i++) {
                free(d->specs[i].container_path);
                free(d->specs[i].host_path);
                free(d->specs[i].permissions);
        }
        free(d->specs);
        free(d->id);
        memset(d, 0, sizeof(*d));
}

void kdev_resource_clear(struct kdev_resource *r)
{
        if (!r)
                return;
        for (size_t i = 0; i < r->n_devices; i++)
                kdev_device_clear(&r->devices[i]);
        free(r->devices);
        free(r->name);
        kdev_id_index_free(r->index);
        if (r->ops && r->ops->free)
                r->ops->free(r->ops_data);
        memset(r, 0, sizeof(*r));
}

void kdev_resource_set_clear(struct kdev_resource_set *set)
{
        if (!set)
                return;
        for (size_t i = 0; i < set->n_resources; i++)
                kdev_resource_clear(&set->resources[i]);
        free(set->resources);
        set->resources = NULL;
        set->n_resources = 0;
        kdev_physical_truncate(set, 0);
}

const struct kdev_device *kdev_resource_find(const struct kdev_resource *r, const char *id)
{
        if (!r || !id)
                return NULL;
        if (kdev_id_index_covers(r->index, r->devices, r->n_devices))
                return kdev_id_index_find(r->index, id);
        for (size_t i = 0; i < r->n_devices; i++) {
                if (r->devices[i].id && strcmp(r->devices[i].id, id) == 0)
                        return &r->devices[i];
        }
        return NULL;
}

int kdev_resource_index(struct kdev_resource *r)
{
        if (!r)
                return 0;
        kdev_id_index_free(r->index);
        r->index = kdev_id_index_new(r->devices, r->n_devices);
        return r->index ? 0 : -ENOMEM;
}

int kdev_resource_set_index(struct kdev_resource_set *set)
{
        if (!set)
                return 0;
        for (size_t i = 0; i < set->n_resources; i++) {
                if (kdev_resource_index(&set->resources[i]) < 0)
                        return -ENOMEM;
        }
        return 0;
}

void kdev_strv_free(char **v, size_t n)
{
        if (!v)
                return;
        for (size_t i = 0; i < n; i++)
                free(v[i]);
        free(v);
}

static int is_digit(char c)
{
        return c >= '0' && c <= '9';
}

int kdev_id_natural_cmp(const char *a, const char *b)
{
        const char *p = a, *q = b;

        while (*p && *q) {
                if (is_digit(*p) && is_digit(*q)) {
                        while (*p == '0')
                                p++;
                        while (*q == '0')
                                q++;
                        size_t lp = 0, lq = 0;
                        while (is_digit(p[lp]))
                                lp++;
                        while (is_digit(q[lq]))
                                lq++;
                        if (lp != lq)
                                return lp < lq ? -1 : 1;
                        int c = memcmp(p, q, lp);
                        if (c != 0)
                                return c;
                        p += lp;
                        q += lq;
                        continue;
                }
                if (*p != *q)
                        return (unsigned char)*p < (unsigned char)*q ? -1 : 1;
                p++;
                q++;
        }
        if (*p || *q)
                return *p ? 1 : -1;
        return strcmp(a, b);
}
