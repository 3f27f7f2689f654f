/* Allocate payload: device IDs -> the container edits of one container request. */
#include "model/model.h"

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "model/edits_internal.h"
#include "model/lookup_internal.h"

enum { PERM_R = 1, PERM_W = 2, PERM_M = 4 };

static unsigned perms_mask(const char *p)
{
        unsigned m = 0;
        if (!p)
                p = "rw";
        for (; *p; p++) {
                if (*p == 'r')
                        m |= PERM_R;
                else if (*p == 'w')
                        m |= PERM_W;
                else if (*p == 'm')
                        m |= PERM_M;
        }
        return m;
}

static void perms_text(unsigned m, char out[4])
{
        size_t n = 0;
        if (m & PERM_R)
                out[n++] = 'r';
        if (m & PERM_W)
                out[n++] = 'w';
        if (m & PERM_M)
                out[n++] = 'm';
        out[n] = '\0';
}

struct spec_ent {
        const struct kdev_device_spec *spec;
        const struct kdev_device *dev;
        unsigned perms;
        int keep;
        size_t group; /* the entry that heads its group; SIZE_MAX: none (a clash) */
        size_t twin;  /* the same node of the device before; SIZE_MAX: none */
};

static int path_cmp(const char *a, const char *b)
{
        return strcmp(a ? a : "", b ? b : "");
}

/* Size of a per-request open-addressing table for |n| entries: a power of
 * two, at least twice |n|. */
static size_t table_size(size_t n)
{
        size_t size = 16;
        while (size < 2 * n)
                size *= 2;
        return size;
}

/* Resolves and checks the requested IDs; fills devs[0..n_ids). Its working
 * memory is |out|'s scratch (kdev_edits_scratch). */
static int resolve_request(const struct kdev_resource *r, const char *const *ids, size_t n_ids,
                           const struct kdev_device **devs, const struct kdev_container_edits *out,
                           struct kdev_err *err)
{
        struct kdev_lookup lk;
        int rc = kdev_lookup_init(&lk, r, n_ids);
        if (rc < 0)
                return kdev_err_set(err, ENOMEM, "out of memory");
        for (size_t i = 0; i < n_ids; i++) {
                const char *id = ids[i] ? ids[i] : "";
                devs[i] = kdev_lookup_find(&lk, id);
                if (!devs[i]) {
                        kdev_lookup_free(&lk);
                        return kdev_err_set(err, EINVAL, "unknown device \"%s\" for resource %s",
                                            id, r->name);
                }
                if (!devs[i]->healthy) {
                        kdev_lookup_free(&lk);
                        return kdev_err_set(err, EINVAL,
                                            "device \"%s\" of resource %s is unhealthy", id,
                                            r->name);
                }
        }
        kdev_lookup_free(&lk);

        /* Repeated IDs: a per-request set of the devices seen so far; the
         * repeat that comes first in the request is reported. */
        if (n_ids < 2)
                return 0;
        size_t size = table_size(n_ids), mask = size - 1, dup = SIZE_MAX;
        unsigned shift = 64;
        for (size_t z = size; z > 1; z >>= 1)
                shift--;
        const struct kdev_device **seen = kdev_edits_scratch(out, size * sizeof(*seen));
        if (!seen)
                return kdev_err_set(err, ENOMEM, "out of memory");
        memset(seen, 0, size * sizeof(*seen));
        for (size_t i = 0; i < n_ids && dup == SIZE_MAX; i++) {
                /* the high bits of a 64-bit multiplicative hash: devices a
                 * request spreads evenly over the array are pointers a
                 * multiple of a large power of two apart, whose low bits
                 * after a multiply would all be equal */
                size_t s = (size_t)(((uint64_t)(uintptr_t)devs[i] * 0x9e3779b97f4a7c15u) >> shift);
                while (seen[s] && seen[s] != devs[i])
                        s = (s + 1) & mask;
                if (seen[s])
                        dup = i;
                seen[s] = devs[i];
        }
        kdev_edits_scratch_free(out, seen);
        if (dup != SIZE_MAX)
                return kdev_err_set(err, EINVAL,
                                    "device \"%s\" of resource %s is requested more than once",
                                    devs[dup]->id, r->name);
        return 0;
}

/* Fills out->nodes from the device nodes of |devs| (|n_ids| devices). */
static int build_nodes(const struct kdev_resource *r, const struct kdev_device **devs, size_t n_ids,
                       struct kdev_container_edits *out, struct kdev_err *err)
{
        int rc;
        size_t k = 0;
        for (size_t i = 0; i < n_ids; i++)
                k += devs[i]->n_specs;
        if (k == 0)
                return 0; /* no nodes (out->nodes stays empty) */
        struct spec_ent *ents = kdev_edits_scratch(out, k * sizeof(*ents));
        if (!ents)
                return kdev_err_set(err, ENOMEM, "out of memory");
        size_t o = 0;
        for (size_t i = 0; i < n_ids; i++) {
                /* devices of one kind list the same nodes in the same order:
                 * entry j's twin is the entry at the same place in the device
                 * before, when that device has as many nodes */
                bool twins = i > 0 && devs[i - 1]->n_specs == devs[i]->n_specs;
                for (size_t j = 0; j < devs[i]->n_specs; j++, o++) {
                        const struct kdev_device_spec *s = &devs[i]->specs[j];
                        ents[o] = (struct spec_ent){s, devs[i], perms_mask(s->permissions), 0,
                                                    SIZE_MAX,
                                                    twins ? o - devs[i]->n_specs : SIZE_MAX};
                }
        }

        /* Group by container path (a per-request hash table of each path's
         * first entry, in request order); the first is kept and takes the
         * union of the group's permissions. A group whose host paths differ
         * fails; of several such groups the one whose container path sorts
         * first (strcmp) is reported, with its first entry and the first
         * differing one. */
        size_t size = table_size(k), mask = size - 1, kept = 0;
        /* entry index + 1; 0: empty */
        size_t *first = kdev_edits_scratch(out, size * sizeof(*first));
        if (!first) {
                kdev_edits_scratch_free(out, ents);
                return kdev_err_set(err, ENOMEM, "out of memory");
        }
        memset(first, 0, size * sizeof(*first));
        const struct spec_ent *bad_a = NULL, *bad_b = NULL;
        for (size_t j = 0; j < k; j++) {
                const char *cp = ents[j].spec->container_path ? ents[j].spec->container_path : "";
                /* fast path: an entry with the same container and host path
                 * as its twin, which is in a group, joins that group without
                 * a hash probe; the result is the same */
                size_t t = ents[j].twin;
                if (t != SIZE_MAX && ents[t].group != SIZE_MAX &&
                    path_cmp(ents[t].spec->container_path, ents[j].spec->container_path) == 0 &&
                    path_cmp(ents[t].spec->host_path, ents[j].spec->host_path) == 0) {
                        ents[j].group = ents[t].group;
                        ents[ents[j].group].perms |= ents[j].perms;
                        continue;
                }
                size_t s = kdev_str_hash(cp) & mask;
                while (first[s] && path_cmp(ents[first[s] - 1].spec->container_path, cp) != 0)
                        s = (s + 1) & mask;
                if (!first[s]) {
                        first[s] = j + 1;
                        ents[j].keep = 1;
                        ents[j].group = j;
                        kept++;
                        continue;
                }
                struct spec_ent *a = &ents[first[s] - 1];
                if (path_cmp(ents[j].spec->host_path, a->spec->host_path) == 0) {
                        a->perms |= ents[j].perms;
                        ents[j].group = first[s] - 1;
                } else if (!bad_a || path_cmp(cp, bad_a->spec->container_path) < 0) {
                        bad_a = a;
                        bad_b = &ents[j];
                }
        }
        kdev_edits_scratch_free(out, first);
        if (bad_a) {
                rc = kdev_err_set(err, EINVAL,
                                  "devices \"%s\" and \"%s\" of resource %s both use container "
                                  "path \"%s\" for different host paths \"%s\" and \"%s\"",
                                  bad_a->dev->id, bad_b->dev->id, r->name,
                                  bad_a->spec->container_path ? bad_a->spec->container_path : "",
                                  bad_a->spec->host_path ? bad_a->spec->host_path : "",
                                  bad_b->spec->host_path ? bad_b->spec->host_path : "");
                kdev_edits_scratch_free(out, ents);
                return rc;
        }

        /* the nodes array with the room that later additions (the
         * backend's hook) expect */
        struct kdev_edit_node *nodes = kdev_edits_array(out, kept, sizeof(*nodes));
        if (!nodes) {
                kdev_edits_scratch_free(out, ents);
                return kdev_err_set(err, ENOMEM, "out of memory");
        }
        size_t n = 0;
        for (size_t i = 0; i < k; i++) {
                if (!ents[i].keep)
                        continue;
                struct kdev_edit_node *nd = &nodes[n++];
                char p[4];
                perms_text(ents[i].perms, p);
                nd->path = kdev_edits_strdup(out, ents[i].spec->container_path);
                nd->host_path = kdev_edits_strdup(out, ents[i].spec->host_path);
                nd->permissions = kdev_edits_strdup(out, p);
                if (!nd->path || !nd->host_path || !nd->permissions)
                        goto nomem;
        }
        kdev_edits_scratch_free(out, ents);
        out->nodes = nodes;
        out->n_nodes = n; /* > 0: every group keeps its first entry */
        return 0;

nomem:
        kdev_edits_scratch_free(out, ents);
        out->nodes = nodes;
        out->n_nodes = n;
        kdev_container_edits_clear(out); /* the nodes so far (and the last one's strings) */
        return kdev_err_set(err, ENOMEM, "out of memory");
}

int kdev_resource_edits(const struct kdev_resource *r, const char *const *ids, size_t n_ids,
                        struct kdev_container_edits *out, struct kdev_err *err)
{
        if (!r || !out || (n_ids && !ids))
                return kdev_err_set(err, EINVAL, "kdev_resource_edits: invalid arguments");
        if (n_ids == 0)
                return kdev_err_set(err, EINVAL, "empty allocation request for resource %s",
                                    r->name);

        const struct kdev_device **devs = kdev_edits_scratch(out, n_ids * sizeof(*devs));
        if (!devs)
                return kdev_err_set(err, ENOMEM, "out of memory");
        int rc = resolve_request(r, ids, n_ids, devs, out, err);
        if (rc == 0)
                rc = build_nodes(r, devs, n_ids, out, err);
        if (rc == 0 && r->ops && r->ops->allocate) {
                rc = r->ops->allocate(r->ops_data, r, devs, n_ids, out, err);
                if (rc < 0)
                        kdev_container_edits_clear(out);
        }
        kdev_edits_scratch_free(out, devs);
        return rc;
}
