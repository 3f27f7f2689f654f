/* The hash index of a resource's device IDs: open addressing with linear
 * probing over a power-of-two table at most half full; each slot (8 bytes,
 * one cache line holds 8) holds a device's position + 1 (0: empty) beside
 * its ID's hash, so a probe reads one cache line of the table and compares
 * strings only on equal hashes. */
#include "model/lookup_internal.h"

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

struct kdev_id_index {
        const struct kdev_device *devices; /* borrowed: the indexed array */
        size_t n_devices;
        size_t mask;     /* table size - 1 */
        struct slot {
                uint32_t pos;  /* device position + 1, 0 for an empty slot */
                uint32_t hash; /* the ID's hash, valid where pos != 0 */
        } *slot;
};

uint32_t kdev_str_hash(const char *s)
{
        /* 8 bytes a step (device IDs are often 40+ bytes with a long common
         * prefix: "GPU-<uuid>::<n>"), then a final mix so that the low bits,
         * which pick the slot, depend on every byte. */
        size_t len = strlen(s);
        uint64_t h = 0x9e3779b97f4a7c15u ^ len, k = 0;
        const uint64_t m = 0xff51afd7ed558ccdu;
        const char *end = s + len;
        for (; end - s > 8; s += 8) {
                memcpy(&k, s, 8);
                h = (h ^ k) * m;
                h ^= h >> 29;
        }
        /* the last 1..8 bytes: the string's last 8 when it has 8 or more
         * (overlapping the step before; fixed-size loads, no memcpy call) */
        if (len >= 8) {
                memcpy(&k, end - 8, 8);
        } else {
                for (size_t i = 0; i < len; i++)
                        k |= (uint64_t)(unsigned char)s[i] << (8 * i);
        }
        h = (h ^ k) * m;
        h ^= h >> 32;
        h *= 0xc4ceb9fe1a85ec53u;
        h ^= h >> 29;
        return (uint32_t)h;
}

struct kdev_id_index *kdev_id_index_new(const struct kdev_device *devices, size_t n)
{
        if (n >= UINT32_MAX / 4)
                return NULL;
        struct kdev_id_index *ix = calloc(1, sizeof(*ix));
        if (!ix)
                return NULL;
        size_t size = 16;
        while (size < 2 * n)
                size *= 2;
        ix->devices = devices;
        ix->n_devices = n;
        ix->mask = size - 1;
        ix->slot = calloc(size, sizeof(*ix->slot));
        if (!ix->slot) {
                kdev_id_index_free(ix);
                return NULL;
        }
        for (size_t i = 0; i < n; i++) {
                const char *id = devices[i].id;
                if (!id)
                        continue;
                uint32_t h = kdev_str_hash(id);
                size_t s = h & ix->mask;
                for (; ix->slot[s].pos; s = (s + 1) & ix->mask) {
                        if (ix->slot[s].hash == h &&
                            strcmp(devices[ix->slot[s].pos - 1].id, id) == 0)
                                break; /* a repeated ID: the first device keeps it */
                }
                if (!ix->slot[s].pos)
                        ix->slot[s] = (struct slot){(uint32_t)i + 1, h};
        }
        return ix;
}

bool kdev_id_index_covers(const struct kdev_id_index *ix, const struct kdev_device *devices,
                          size_t n)
{
        return ix && ix->devices == devices && ix->n_devices == n;
}

const struct kdev_device *kdev_id_index_find(const struct kdev_id_index *ix, const char *id)
{
        uint32_t h = kdev_str_hash(id);
        for (size_t s = h & ix->mask; ix->slot[s].pos; s = (s + 1) & ix->mask) {
                if (ix->slot[s].hash != h)
                        continue;
                const struct kdev_device *d = &ix->devices[ix->slot[s].pos - 1];
                if (strcmp(d->id, id) == 0)
                        return d;
        }
        return NULL;
}

void kdev_id_index_free(struct kdev_id_index *ix)
{
        if (!ix)
                return;
        free(ix->slot);
        free(ix);
}

/* Below this many (queries x devices) string comparisons a linear search of
 * an unindexed resource wins over building an index for the request. */
#define LINEAR_WORK_MAX 4096

int kdev_lookup_init(struct kdev_lookup *lk, const struct kdev_resource *r, size_t n_queries)
{
        lk->r = r;
        lk->tmp = NULL;
        if (r->n_devices == 0 || kdev_id_index_covers(r->index, r->devices, r->n_devices) ||
            n_queries <= LINEAR_WORK_MAX / r->n_devices)
                return 0;
        lk->tmp = kdev_id_index_new(r->devices, r->n_devices);
        return lk->tmp ? 0 : -ENOMEM;
}

const struct kdev_device *kdev_lookup_find(const struct kdev_lookup *lk, const char *id)
{
        return lk->tmp ? kdev_id_index_find(lk->tmp, id) : kdev_resource_find(lk->r, id);
}

void kdev_lookup_free(struct kdev_lookup *lk)
{
        kdev_id_index_free(lk->tmp);
        lk->tmp = NULL;
}
