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
        /* 16 bytes a step in two independent lanes (device IDs are often 40+
         * bytes with a long common prefix: "GPU-<uuid>::<n>"), then a final
         * mix of both so that the low bits, which pick the slot, depend on
         * every byte. */
        size_t len = strlen(s);
        const uint64_t m1 = 0xff51afd7ed558ccdu, m2 = 0xc4ceb9fe1a85ec53u;
        uint64_t a = 0x9e3779b97f4a7c15u ^ len, b = 0x2545f4914f6cdd1du, k = 0, j = 0;
        const char *end = s + len;
        for (; end - s > 16; s += 16) {
                memcpy(&k, s, 8);
                memcpy(&j, s + 8, 8);
                a = (a ^ k) * m1;
                b = (b ^ j) * m2;
                a ^= a >> 29;
                b ^= b >> 29;
        }
        /* the last 1..16 bytes: fixed-size loads of the string's last 16
         * (or 8) bytes, overlapping the step before, no memcpy call */
        if (len >= 16) {
                memcpy(&k, end - 16, 8);
                memcpy(&j, end - 8, 8);
        } else if (len >= 8) {
                memcpy(&k, s, 8);
                memcpy(&j, end - 8, 8);
        } else {
                for (size_t i = 0; i < len; i++)
                        k |= (uint64_t)(unsigned char)s[i] << (8 * i);
        }
        a = (a ^ k) * m1;
        b = (b ^ j) * m2;
        uint64_t h = a ^ (b >> 32 | b << 32);
        h ^= h >> 32;
        h *= m2;
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
        lk->ix = NULL;
        lk->tmp = NULL;
        if (r->n_devices == 0)
                return 0;
        if (kdev_id_index_covers(r->index, r->devices, r->n_devices)) {
                lk->ix = r->index;
                return 0;
        }
        if (n_queries <= LINEAR_WORK_MAX / r->n_devices)
                return 0;
        lk->ix = lk->tmp = kdev_id_index_new(r->devices, r->n_devices);
        return lk->tmp ? 0 : -ENOMEM;
}

void kdev_lookup_free(struct kdev_lookup *lk)
{
        kdev_id_index_free(lk->tmp);
        lk->ix = lk->tmp = NULL;
}
