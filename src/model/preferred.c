/* GetPreferredAllocation: choose |size| devices from the available ones. */
#include "model/model.h"

#include <errno.h>
#include <limits.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "model/lookup_internal.h"

static int ptr_cmp(const void *pa, const void *pb)
{
        uintptr_t a = (uintptr_t)*(const struct kdev_device *const *)pa;
        uintptr_t b = (uintptr_t)*(const struct kdev_device *const *)pb;
        return a < b ? -1 : a > b;
}

static int int_cmp(const void *pa, const void *pb)
{
        int a = *(const int *)pa, b = *(const int *)pb;
        return a < b ? -1 : a > b;
}

static int dev_natural_cmp(const void *pa, const void *pb)
{
        const struct kdev_device *a = *(const struct kdev_device *const *)pa;
        const struct kdev_device *b = *(const struct kdev_device *const *)pb;
        return kdev_id_natural_cmp(a->id, b->id);
}

/* Sorts |v| by address and drops repeats; returns the new length. */
static size_t sort_unique(const struct kdev_device **v, size_t n)
{
        if (n == 0)
                return 0;
        qsort(v, n, sizeof(*v), ptr_cmp);
        size_t o = 1;
        for (size_t i = 1; i < n; i++) {
                if (v[i] != v[o - 1])
                        v[o++] = v[i];
        }
        return o;
}

static int contains(const struct kdev_device *const *sorted, size_t n, const struct kdev_device *d)
{
        return bsearch(&d, sorted, n, sizeof(*sorted), ptr_cmp) != NULL;
}

struct node_count {
        int node;
        size_t count;
};

static int node_count_cmp(const void *pa, const void *pb)
{
        return int_cmp(&((const struct node_count *)pa)->node,
                       &((const struct node_count *)pb)->node);
}

struct cand {
        const struct kdev_device *dev;
        int off_must_node; /* 0: on a NUMA node of a must-include device */
        size_t node_count; /* available candidates on the same node */
        int node;
};

static int cand_cmp(const void *pa, const void *pb)
{
        const struct cand *a = pa, *b = pb;
        if (a->off_must_node != b->off_must_node)
                return a->off_must_node - b->off_must_node;
        int a_none = a->node < 0, b_none = b->node < 0;
        if (a_none != b_none)
                return a_none - b_none;
        if (a->node_count != b->node_count)
                return a->node_count > b->node_count ? -1 : 1;
        if (a->node != b->node)
                return a->node < b->node ? -1 : 1;
        return kdev_id_natural_cmp(a->dev->id, b->dev->id);
}

static int resolve(const struct kdev_lookup *lk, const char *const *ids, size_t n,
                   const struct kdev_device **out, const char *what, struct kdev_err *err)
{
        for (size_t i = 0; i < n; i++) {
                const char *id = ids[i] ? ids[i] : "";
                out[i] = kdev_lookup_find(lk, id);
                if (!out[i])
                        return kdev_err_set(err, EINVAL,
                                            "unknown device \"%s\" for resource %s in %s", id,
                                            lk->r->name, what);
        }
        return 0;
}

/* Runs r->ops->preferred on the validated request (|av| and |mu| sorted by
 * address, i.e. device-array order), checks its answer and copies the IDs. */
static int hook_preferred(const struct kdev_resource *r, const struct kdev_device **av,
                          size_t na, const struct kdev_device **mu, size_t nm, size_t total,
                          char ***out, size_t *n_out, struct kdev_err *err)
{
        const struct kdev_device **pick = calloc(total ? total : 1, sizeof(*pick));
        const struct kdev_device **chk = calloc(total ? total : 1, sizeof(*chk));
        char **res = NULL;
        size_t n_res = 0;
        int rc;
        if (!pick || !chk)
                goto nomem;
        rc = r->ops->preferred(r->ops_data, r, av, na, mu, nm, total, pick, err);
        if (rc < 0)
                goto done;
        memcpy(chk, pick, total * sizeof(*chk));
        size_t nu = sort_unique(chk, total);
        bool ok = nu == total;
        size_t n_must_in = 0;
        for (size_t i = 0; ok && i < nu; i++) {
                ok = chk[i] && contains(av, na, chk[i]);
                n_must_in += ok && contains(mu, nm, chk[i]) ? 1 : 0;
        }
        if (!ok || n_must_in != nm) {
                rc = kdev_err_set(err, EPROTO,
                                  "preferred allocation of resource %s: the backend's answer "
                                  "is not %zu distinct available devices with the must-include "
                                  "ones",
                                  r->name, total);
                goto done;
        }
        res = calloc(total ? total : 1, sizeof(*res));
        if (!res)
                goto nomem;
        for (size_t i = 0; i < total; i++) {
                if (!(res[n_res++] = strdup(pick[i]->id)))
                        goto nomem;
        }
        if (n_res == 0) {
                free(res);
                res = NULL;
        }
        *out = res;
        *n_out = n_res;
        res = NULL;
        n_res = 0;
        rc = 0;
        goto done;
nomem:
        rc = kdev_err_set(err, ENOMEM, "out of memory");
done:
        kdev_strv_free(res, n_res);
        free(pick);
        free(chk);
        return rc;
}

int kdev_resource_preferred(const struct kdev_resource *r, const char *const *available,
                            size_t n_avail, const char *const *must, size_t n_must, int size,
                            char ***out, size_t *n_out, struct kdev_err *err)
{
        const struct kdev_device **av = NULL, **mu = NULL;
        struct cand *cands = NULL;
        struct node_count *nodes = NULL;
        int *must_nodes = NULL;
        char **res = NULL;
        size_t n_res = 0;
        struct kdev_lookup lk = {0};
        int rc;

        if (out)
                *out = NULL;
        if (n_out)
                *n_out = 0;
        if (!r || !out || !n_out || (n_avail && !available) || (n_must && !must))
                return kdev_err_set(err, EINVAL, "kdev_resource_preferred: invalid arguments");
        if (size < 0)
                return kdev_err_set(err, EINVAL,
                                    "allocation size %d for resource %s is negative", size,
                                    r->name);

        av = malloc((n_avail ? n_avail : 1) * sizeof(*av));
        mu = malloc((n_must ? n_must : 1) * sizeof(*mu));
        if (!av || !mu || kdev_lookup_init(&lk, r, n_avail + n_must) < 0)
                goto nomem;
        rc = resolve(&lk, available, n_avail, av, "the available devices", err);
        if (rc == 0)
                rc = resolve(&lk, must, n_must, mu, "the must-include devices", err);
        if (rc < 0)
                goto fail;
        size_t na = sort_unique(av, n_avail);
        /* Check membership in request order so the first offender is named. */
        for (size_t i = 0; i < n_must; i++) {
                if (!contains(av, na, mu[i])) {
                        rc = kdev_err_set(err, EINVAL,
                                          "must-include device \"%s\" of resource %s is not "
                                          "among the available devices",
                                          mu[i]->id, r->name);
                        goto fail;
                }
        }
        size_t nm = sort_unique(mu, n_must);
        if ((size_t)size < nm) {
                rc = kdev_err_set(err, EINVAL,
                                  "allocation size %d for resource %s is smaller than the %zu "
                                  "must-include devices",
                                  size, r->name, nm);
                goto fail;
        }
        size_t total = (size_t)size < na ? (size_t)size : na;
        if (r->ops && r->ops->preferred) {
                rc = hook_preferred(r, av, na, mu, nm, total, out, n_out, err);
                goto done;
        }

        /* NUMA nodes of the must-include devices. */
        must_nodes = malloc((nm ? nm : 1) * sizeof(*must_nodes));
        if (!must_nodes)
                goto nomem;
        size_t n_must_nodes = 0;
        for (size_t i = 0; i < nm; i++) {
                if (mu[i]->numa_node >= 0)
                        must_nodes[n_must_nodes++] = mu[i]->numa_node;
        }
        qsort(must_nodes, n_must_nodes, sizeof(*must_nodes), int_cmp);

        /* Candidates: available minus must-include, with their node's size. */
        cands = malloc((na ? na : 1) * sizeof(*cands));
        nodes = malloc((na ? na : 1) * sizeof(*nodes));
        if (!cands || !nodes)
                goto nomem;
        size_t nc = 0;
        for (size_t i = 0; i < na; i++) {
                if (contains(mu, nm, av[i]))
                        continue;
                int node = av[i]->numa_node < 0 ? -1 : av[i]->numa_node;
                cands[nc++] = (struct cand){av[i], 1, 0, node};
        }
        size_t nn = 0;
        for (size_t i = 0; i < nc; i++)
                nodes[nn++] = (struct node_count){cands[i].node, 0};
        qsort(nodes, nn, sizeof(*nodes), node_count_cmp);
        size_t u = 0;
        for (size_t i = 0; i < nn; i++) {
                if (u > 0 && nodes[u - 1].node == nodes[i].node) {
                        nodes[u - 1].count++;
                } else {
                        nodes[u] = nodes[i];
                        nodes[u++].count = 1;
                }
        }
        nn = u;
        for (size_t i = 0; i < nc; i++) {
                struct node_count key = {cands[i].node, 0};
                const struct node_count *nc_ent =
                        bsearch(&key, nodes, nn, sizeof(*nodes), node_count_cmp);
                cands[i].node_count = nc_ent->count;
                if (cands[i].node >= 0 &&
                    bsearch(&cands[i].node, must_nodes, n_must_nodes, sizeof(int), int_cmp))
                        cands[i].off_must_node = 0;
        }
        qsort(cands, nc, sizeof(*cands), cand_cmp);
        qsort(mu, nm, sizeof(*mu), dev_natural_cmp);

        res = calloc(total ? total : 1, sizeof(*res));
        if (!res)
                goto nomem;
        for (size_t i = 0; i < nm; i++) {
                if (!(res[n_res++] = strdup(mu[i]->id)))
                        goto nomem;
        }
        for (size_t i = 0; n_res < total && i < nc; i++) {
                if (!(res[n_res++] = strdup(cands[i].dev->id)))
                        goto nomem;
        }
        if (n_res == 0) {
                free(res);
                res = NULL;
        }
        *out = res;
        *n_out = n_res;
        rc = 0;
        res = NULL;
        n_res = 0;
        goto done;

nomem:
        rc = kdev_err_set(err, ENOMEM, "out of memory");
fail:
done:
        kdev_strv_free(res, n_res);
        kdev_lookup_free(&lk);
        free(av);
        free(mu);
        free(cands);
        free(nodes);
        free(must_nodes);
        return rc;
}
