/* GetPreferredAllocation for NVIDIA resources (see preferred.h). */
#include "nvidia/preferred.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nvidia/devinfo.h"
#include "nvidia/nvidia_internal.h"
#include "nvidia/resources.h"

int kdev_nvidia_link_score(nvmlGpuTopologyLevel_t level, unsigned nvlinks)
{
        int p2p;
        switch (level) {
        case NVML_TOPOLOGY_INTERNAL:
                p2p = 60;
                break;
        case NVML_TOPOLOGY_SINGLE:
                p2p = 50;
                break;
        case NVML_TOPOLOGY_MULTIPLE:
                p2p = 40;
                break;
        case NVML_TOPOLOGY_HOSTBRIDGE:
                p2p = 30;
                break;
        case NVML_TOPOLOGY_NODE:
                p2p = 20;
                break;
        case NVML_TOPOLOGY_SYSTEM:
                p2p = 10;
                break;
        default:
                p2p = 0;
                break;
        }
        if (nvlinks > 1000)
                nvlinks = 1000;
        return p2p + 100 * (int)nvlinks;
}

/* --- best set ---------------------------------------------------------------- */

/* The search over the m free candidates (indices 0..m-1 of the local arrays). */
struct search {
        size_t m, t;            /* candidates, how many to choose */
        const int64_t *s;       /* m x m pair scores */
        const uint8_t *order;   /* m x (m-1): row j's other candidates, best score first */
        int64_t *g;             /* gain of each candidate against the chosen set (and must) */
        size_t *cur;            /* chosen so far */
        size_t depth;
        int64_t *buf;           /* r best values while bounding */
        int64_t best;           /* best sum found */
        uint64_t best_key;      /* its lexicographic key (larger = smaller list) */
        size_t *best_set;
        size_t nodes, budget;
        bool aborted;
};

/* Bit of candidate |j|: lower indices weigh more, so comparing keys of equal-size
 * sets compares their ascending lists lexicographically (reversed). */
static uint64_t key_bit(size_t m, size_t j)
{
        return (uint64_t)1 << (m - 1 - j);
}

/* Sum of the |r| largest of |v[0..n)| (r <= n), using |buf| (room for r). */
static int64_t top_sum(const int64_t *v, size_t n, size_t r, int64_t *buf)
{
        size_t have = 0;
        for (size_t i = 0; i < n; i++) {
                int64_t x = v[i];
                if (have < r) {
                        size_t k = have++;
                        while (k > 0 && buf[k - 1] < x) {
                                buf[k] = buf[k - 1];
                                k--;
                        }
                        buf[k] = x;
                } else if (x > buf[r - 1]) {
                        size_t k = r - 1;
                        while (k > 0 && buf[k - 1] < x) {
                                buf[k] = buf[k - 1];
                                k--;
                        }
                        buf[k] = x;
                }
        }
        int64_t sum = 0;
        for (size_t i = 0; i < have; i++)
                sum += buf[i];
        return sum;
}

static void dfs(struct search *S, size_t p, int64_t cur, uint64_t key)
{
        size_t m = S->m, r = S->t - S->depth;
        if (r == 0) {
                if (cur > S->best || (cur == S->best && key > S->best_key)) {
                        S->best = cur;
                        S->best_key = key;
                        memcpy(S->best_set, S->cur, S->t * sizeof(*S->cur));
                }
                return;
        }
        if (m - p < r)
                return;
        if (++S->nodes > S->budget) {
                S->aborted = true;
                return;
        }
        /* Bound, doubled to stay integral: each remaining pick j adds g[j] and
         * half its pair scores with the other r-1 picks, at most the sum of
         * its r-1 best scores with candidates still open (index >= p). */
        int64_t *h = S->buf + r; /* scratch after the r slots of top_sum */
        for (size_t j = p; j < m; j++) {
                const uint8_t *ord = S->order + j * (m - 1);
                const int64_t *row = S->s + j * m;
                int64_t pairs = 0;
                for (size_t q = 0, c = 0; c + 1 < r && q < m - 1; q++) {
                        if (ord[q] >= p) {
                                pairs += row[ord[q]];
                                c++;
                        }
                }
                h[j - p] = 2 * S->g[j] + pairs;
        }
        int64_t ub2 = 2 * cur + top_sum(h, m - p, r, S->buf);
        if (ub2 < 2 * S->best)
                return;
        if (ub2 < 2 * S->best + 2) {
                /* At best a tie: only a lexicographically smaller set helps. */
                uint64_t max_key = key + (((uint64_t)1 << (m - p)) - ((uint64_t)1 << (m - p - r)));
                if (max_key <= S->best_key)
                        return;
        }
        for (size_t j = p; j + r <= m && !S->aborted; j++) {
                const int64_t *row = S->s + j * m;
                for (size_t l = j + 1; l < m; l++)
                        S->g[l] += row[l];
                S->cur[S->depth++] = j;
                dfs(S, j + 1, cur + S->g[j], key | key_bit(m, j));
                S->depth--;
                for (size_t l = j + 1; l < m; l++)
                        S->g[l] -= row[l];
        }
}

/* Greedy (largest gain plus best pair still possible, lowest index on ties)
 * then single swaps while one strictly improves, over the m candidates with
 * gains |w| (against the must set); |in| (m flags) receives the set. Returns
 * its sum without the must set's own pairs. */
static int64_t heuristic(const int64_t *s, const int64_t *w, size_t m, size_t t, bool *in,
                         int64_t *g)
{
        memset(in, 0, m * sizeof(*in));
        memcpy(g, w, m * sizeof(*g));
        int64_t sum = 0;
        for (size_t c = 0; c < t; c++) {
                /* gain now plus, while more picks follow, the best pair the
                 * candidate could still form (so a strong pair is found even
                 * when every gain is still equal) */
                size_t bj = m;
                int64_t bv = 0;
                for (size_t j = 0; j < m; j++) {
                        if (in[j])
                                continue;
                        int64_t v = g[j], look = 0;
                        for (size_t l = 0; c + 1 < t && l < m; l++) {
                                if (l != j && !in[l] && s[j * m + l] > look)
                                        look = s[j * m + l];
                        }
                        v += look;
                        if (bj == m || v > bv) {
                                bj = j;
                                bv = v;
                        }
                }
                in[bj] = true;
                sum += g[bj];
                for (size_t l = 0; l < m; l++)
                        g[l] += s[bj * m + l];
        }
        if (t == 0 || t == m)
                return sum;
        /* Now g[x] = w[x] + sum of s(x, y) over the chosen y (s(x, x) is 0). */
        for (size_t iter = 0; iter < 4 * m * m; iter++) {
                int64_t best_delta = 0;
                size_t ba = m, bz = m;
                for (size_t a = 0; a < m; a++) {
                        if (!in[a])
                                continue;
                        for (size_t z = 0; z < m; z++) {
                                if (in[z])
                                        continue;
                                int64_t delta = g[z] - s[a * m + z] - g[a];
                                if (delta > best_delta) {
                                        best_delta = delta;
                                        ba = a;
                                        bz = z;
                                }
                        }
                }
                if (ba == m)
                        break;
                in[ba] = false;
                in[bz] = true;
                sum += best_delta;
                for (size_t l = 0; l < m; l++)
                        g[l] += s[bz * m + l] - s[ba * m + l];
        }
        return sum;
}

/* Sorts the |n| indices |ord| by descending |row| score (insertion sort:
 * rows are short). */
static void sort_row(uint8_t *ord, size_t n, const int64_t *row)
{
        for (size_t i = 1; i < n; i++) {
                uint8_t x = ord[i];
                size_t k = i;
                while (k > 0 && row[ord[k - 1]] < row[x]) {
                        ord[k] = ord[k - 1];
                        k--;
                }
                ord[k] = x;
        }
}

static int cmp_size(const void *pa, const void *pb)
{
        size_t a = *(const size_t *)pa, b = *(const size_t *)pb;
        return a < b ? -1 : a > b;
}

int kdev_nvidia_best_set(const int *score, size_t n, const size_t *must, size_t n_must,
                         size_t k, size_t *out, struct kdev_nvidia_best_stats *st)
{
        struct kdev_nvidia_best_stats dummy;
        if (!st)
                st = &dummy;
        *st = (struct kdev_nvidia_best_stats){.exact = true};
        if ((n && !score) || (n_must && !must) || (k && !out) || n_must > k || k > n)
                return -EINVAL;
        int rc = -ENOMEM;
        bool *is_must = calloc(n ? n : 1, sizeof(*is_must));
        size_t *free_idx = malloc((n ? n : 1) * sizeof(*free_idx));
        int64_t *s = NULL, *w = NULL, *g = NULL, *buf = NULL;
        uint8_t *order = NULL;
        size_t *cur = NULL, *best_set = NULL;
        bool *in = NULL;
        if (!is_must || !free_idx)
                goto out;
        for (size_t i = 0; i < n_must; i++) {
                if (must[i] >= n || is_must[must[i]]) {
                        rc = -EINVAL;
                        goto out;
                }
                is_must[must[i]] = true;
        }
        size_t m = 0;
        for (size_t i = 0; i < n; i++) {
                if (!is_must[i])
                        free_idx[m++] = i;
        }
        size_t t = k - n_must;
        int64_t base = 0;
        for (size_t a = 0; a < n_must; a++) {
                for (size_t b = a + 1; b < n_must; b++)
                        base += score[must[a] * n + must[b]];
        }
        s = malloc((m ? m * m : 1) * sizeof(*s));
        w = calloc(m ? m : 1, sizeof(*w));
        g = malloc((m ? m : 1) * sizeof(*g));
        in = malloc((m ? m : 1) * sizeof(*in));
        cur = malloc((t ? t : 1) * sizeof(*cur));
        best_set = malloc((t ? t : 1) * sizeof(*best_set));
        if (!s || !w || !g || !in || !cur || !best_set)
                goto out;
        for (size_t a = 0; a < m; a++) {
                const int *row = score + free_idx[a] * n;
                for (size_t b = 0; b < m; b++)
                        s[a * m + b] = a == b ? 0 : row[free_idx[b]];
                for (size_t i = 0; i < n_must; i++)
                        w[a] += row[must[i]];
        }

        int64_t sum = heuristic(s, w, m, t, in, g);
        size_t c = 0;
        uint64_t key = 0;
        for (size_t j = 0; j < m; j++) {
                if (in[j]) {
                        best_set[c++] = j;
                        key |= m <= KDEV_NVIDIA_PREF_EXACT_MAX ? key_bit(m, j) : 0;
                }
        }
        if (t > 0 && t < m) {
                if (m > KDEV_NVIDIA_PREF_EXACT_MAX) {
                        st->exact = false;
                } else {
                        order = malloc(m * (m - 1) * sizeof(*order));
                        buf = malloc(2 * m * sizeof(*buf));
                        if (!order || !buf)
                                goto out;
                        for (size_t j = 0; j < m; j++) {
                                uint8_t *ord = order + j * (m - 1);
                                size_t q = 0;
                                for (size_t l = 0; l < m; l++) {
                                        if (l != j)
                                                ord[q++] = (uint8_t)l;
                                }
                                sort_row(ord, q, s + j * m);
                        }
                        memcpy(g, w, m * sizeof(*g));
                        struct search S = {
                                .m = m, .t = t, .s = s, .order = order, .g = g, .cur = cur,
                                .buf = buf, .best = sum, .best_key = key,
                                .best_set = best_set, .budget = KDEV_NVIDIA_PREF_NODE_BUDGET,
                        };
                        dfs(&S, 0, 0, 0);
                        sum = S.best;
                        st->nodes = S.nodes;
                        st->exact = !S.aborted;
                }
        }
        st->score = (long long)(base + sum);
        for (size_t i = 0; i < n_must; i++)
                out[i] = must[i];
        for (size_t i = 0; i < t; i++)
                out[n_must + i] = free_idx[best_set[i]];
        if (k > 1)
                qsort(out, k, sizeof(*out), cmp_size);
        rc = 0;
out:
        free(is_must);
        free(free_idx);
        free(s);
        free(w);
        free(g);
        free(order);
        free(buf);
        free(in);
        free(cur);
        free(best_set);
        return rc;
}

/* --- per-resource data ----------------------------------------------------------- */

struct kdev_nvidia_pref {
        enum kdev_nvidia_share_policy policy;
        size_t n_gpus;
        int *score;          /* n_gpus x n_gpus pair scores */
        size_t n_devices;
        const struct kdev_device *devices; /* the array positions refer to */
        int *dev_gpu;        /* position in the GPU set, or -1 */
        size_t *dev_unit;    /* physical device (replica annotation stripped) */
        size_t *dev_parent;  /* physical GPU */
        bool *dev_whole;     /* a whole GPU, not a replica or MIG device */
        bool *dev_replica;   /* a replica (devinfo replica >= 0) */
        size_t n_units, n_parents;
        size_t *unit_total;  /* devices per unit */
        size_t *parent_total; /* devices per parent */
};

void kdev_nvidia_pref_free(struct kdev_nvidia_pref *p)
{
        if (!p)
                return;
        free(p->score);
        free(p->dev_gpu);
        free(p->dev_unit);
        free(p->dev_parent);
        free(p->dev_whole);
        free(p->dev_replica);
        free(p->unit_total);
        free(p->parent_total);
        free(p);
}

struct keyed {
        const char *key;
        size_t dev;
};

static int keyed_cmp(const void *pa, const void *pb)
{
        const struct keyed *a = pa, *b = pb;
        int c = strcmp(a->key, b->key);
        if (c)
                return c;
        return a->dev < b->dev ? -1 : a->dev > b->dev;
}

/* Numbers the distinct keys: ids[dev] = group, *n_groups, totals[group]. */
static int group(struct keyed *k, size_t n, size_t *ids, size_t *n_groups, size_t **totals)
{
        qsort(k, n, sizeof(*k), keyed_cmp);
        size_t ng = 0;
        for (size_t i = 0; i < n; i++) {
                if (i == 0 || strcmp(k[i].key, k[i - 1].key) != 0)
                        ng++;
                ids[k[i].dev] = ng - 1;
        }
        *totals = calloc(ng ? ng : 1, sizeof(**totals));
        if (!*totals)
                return -ENOMEM;
        for (size_t i = 0; i < n; i++)
                (*totals)[ids[i]]++;
        *n_groups = ng;
        return 0;
}

int kdev_nvidia_pref_new(const struct kdev_gpu_set *gpus, const struct kdev_resource *r,
                         enum kdev_nvidia_share_policy policy, struct kdev_nvidia_pref **out,
                         struct kdev_err *err)
{
        *out = NULL;
        struct kdev_nvidia_pref *p = calloc(1, sizeof(*p));
        struct keyed *k = NULL;
        char (*own)[24] = NULL;
        if (!p)
                goto nomem;
        p->policy = policy;
        size_t ng = gpus ? gpus->n_gpus : 0, nd = r ? r->n_devices : 0;
        p->n_gpus = ng;
        p->n_devices = nd;
        p->devices = nd ? r->devices : NULL;
        p->score = calloc(ng ? ng * ng : 1, sizeof(*p->score));
        p->dev_gpu = malloc((nd ? nd : 1) * sizeof(*p->dev_gpu));
        p->dev_unit = malloc((nd ? nd : 1) * sizeof(*p->dev_unit));
        p->dev_parent = malloc((nd ? nd : 1) * sizeof(*p->dev_parent));
        p->dev_whole = malloc((nd ? nd : 1) * sizeof(*p->dev_whole));
        p->dev_replica = malloc((nd ? nd : 1) * sizeof(*p->dev_replica));
        k = malloc((nd ? nd : 1) * sizeof(*k));
        own = malloc((nd ? nd : 1) * sizeof(*own));
        if (!p->score || !p->dev_gpu || !p->dev_unit || !p->dev_parent || !p->dev_whole ||
            !p->dev_replica || !k || !own)
                goto nomem;
        for (size_t i = 0; i < ng; i++) {
                for (size_t j = 0; j < ng; j++) {
                        const struct kdev_gpu *a = &gpus->gpus[i], *b = &gpus->gpus[j];
                        if (i == j || a->fault != NVML_SUCCESS || b->fault != NVML_SUCCESS)
                                continue;
                        nvmlGpuTopologyLevel_t lvl;
                        unsigned links = 0;
                        if (gpus->has_links && gpus->levels) {
                                lvl = gpus->levels[i * ng + j];
                                links = gpus->nvlink_counts ? gpus->nvlink_counts[i * ng + j] : 0;
                        } else {
                                lvl = a->numa_node >= 0 && a->numa_node == b->numa_node
                                              ? NVML_TOPOLOGY_NODE
                                              : NVML_TOPOLOGY_SYSTEM;
                        }
                        p->score[i * ng + j] = kdev_nvidia_link_score(lvl, links);
                }
        }
        /* Devices: GPU position, unit (uuid) and parent (parent_uuid). Devices
         * without devinfo get a key of their own ("\x01<position>", which no
         * UUID equals). */
        for (size_t d = 0; d < nd; d++) {
                const struct kdev_nvidia_devinfo *info = r->devices[d].data;
                snprintf(own[d], sizeof(own[d]), "\x01%zu", d);
                p->dev_gpu[d] = -1;
                p->dev_whole[d] = info && info->replica < 0 && info->gi == KDEV_NVIDIA_NO_INSTANCE;
                p->dev_replica[d] = info && info->replica >= 0;
                const struct kdev_gpu *g =
                        info && gpus ? kdev_gpu_set_find(gpus, info->parent_uuid) : NULL;
                if (g)
                        p->dev_gpu[d] = (int)(g - gpus->gpus);
                k[d] = (struct keyed){info ? info->uuid : own[d], d};
        }
        if (group(k, nd, p->dev_unit, &p->n_units, &p->unit_total) < 0)
                goto nomem;
        for (size_t d = 0; d < nd; d++) {
                const struct kdev_nvidia_devinfo *info = r->devices[d].data;
                k[d] = (struct keyed){info ? info->parent_uuid : own[d], d};
        }
        if (group(k, nd, p->dev_parent, &p->n_parents, &p->parent_total) < 0)
                goto nomem;
        free(k);
        free(own);
        *out = p;
        return 0;
nomem:
        free(k);
        free(own);
        kdev_nvidia_pref_free(p);
        return kdev_err_set(err, ENOMEM, "out of memory");
}

int kdev_nvidia_pref_attach(struct kdev_resource_set *set, const struct kdev_gpu_set *gpus,
                            enum kdev_nvidia_share_policy policy, struct kdev_err *err)
{
        for (size_t i = 0; set && i < set->n_resources; i++) {
                struct kdev_resource *r = &set->resources[i];
                if (r->ops != &kdev_nvidia_resource_ops || !r->ops_data)
                        continue;
                struct kdev_nvidia_rdata *d = r->ops_data;
                struct kdev_nvidia_pref *p;
                int rc = kdev_nvidia_pref_new(gpus, r, policy, &p, err);
                if (rc < 0)
                        return rc;
                kdev_nvidia_pref_free(d->pref);
                d->pref = p;
        }
        return 0;
}

/* Position of |d| in the resource's device array. */
static size_t dev_pos(const struct kdev_nvidia_pref *p, const struct kdev_device *d)
{
        return (size_t)(d - p->devices);
}

static int choose_aligned(const struct kdev_nvidia_pref *p,
                          const struct kdev_device *const *avail, size_t n_avail,
                          const struct kdev_device *const *must, size_t n_must, size_t size,
                          const struct kdev_device **out, struct kdev_err *err)
{
        int *sc = calloc(n_avail ? n_avail * n_avail : 1, sizeof(*sc));
        size_t *mi = calloc(n_must ? n_must : 1, sizeof(*mi));
        size_t *set = malloc((size ? size : 1) * sizeof(*set));
        bool *is_must = calloc(n_avail ? n_avail : 1, sizeof(*is_must));
        int rc = -ENOMEM;
        if (!sc || !mi || !set || !is_must)
                goto out;
        for (size_t a = 0; a < n_avail; a++) {
                int ga = p->dev_gpu[dev_pos(p, avail[a])];
                for (size_t b = 0; b < n_avail; b++) {
                        int gb = p->dev_gpu[dev_pos(p, avail[b])];
                        sc[a * n_avail + b] = ga < 0 || gb < 0 || a == b
                                                      ? 0
                                                      : p->score[(size_t)ga * p->n_gpus +
                                                                 (size_t)gb];
                }
        }
        /* Both lists are in device-array order: merge. */
        for (size_t a = 0, i = 0; a < n_avail && i < n_must; a++) {
                if (avail[a] == must[i]) {
                        is_must[a] = true;
                        mi[i++] = a;
                }
        }
        rc = kdev_nvidia_best_set(sc, n_avail, mi, n_must, size, set, NULL);
        if (rc < 0)
                goto out;
        size_t o = 0;
        for (size_t i = 0; i < n_must; i++)
                out[o++] = must[i];
        for (size_t i = 0; i < size; i++) {
                if (!is_must[set[i]])
                        out[o++] = avail[set[i]];
        }
out:
        free(sc);
        free(mi);
        free(set);
        free(is_must);
        if (rc == -ENOMEM)
                return kdev_err_set(err, ENOMEM, "out of memory");
        if (rc < 0)
                return kdev_err_set(err, -rc, "preferred allocation: invalid request");
        return 0;
}

/* Is candidate |a| preferred over |b| by the greedy path's order? */
static bool greedy_before(const struct kdev_nvidia_pref *p, size_t a, size_t b,
                          const size_t *unit_left, const size_t *unit_picked,
                          const size_t *parent_left)
{
        bool packed = p->policy == KDEV_NVIDIA_SHARE_PACKED;
        if (p->dev_replica[a] != p->dev_replica[b])
                return !p->dev_replica[a]; /* unreplicated devices first */
        size_t ua = p->dev_unit[a], ub = p->dev_unit[b];
        size_t alloc_a = p->unit_total[ua] - unit_left[ua];
        size_t alloc_b = p->unit_total[ub] - unit_left[ub];
        if (alloc_a != alloc_b)
                return packed ? alloc_a > alloc_b : alloc_a < alloc_b;
        if (unit_picked[ua] != unit_picked[ub])
                return unit_picked[ua] < unit_picked[ub];
        size_t pa = p->dev_parent[a], pb = p->dev_parent[b];
        size_t palloc_a = p->parent_total[pa] - parent_left[pa];
        size_t palloc_b = p->parent_total[pb] - parent_left[pb];
        if (palloc_a != palloc_b)
                return packed ? palloc_a > palloc_b : palloc_a < palloc_b;
        return a < b;
}

static int choose_greedy(const struct kdev_nvidia_pref *p,
                         const struct kdev_device *const *avail, size_t n_avail,
                         const struct kdev_device *const *must, size_t n_must, size_t size,
                         const struct kdev_device **out, struct kdev_err *err)
{
        size_t *unit_left = calloc(p->n_units ? p->n_units : 1, sizeof(*unit_left));
        size_t *unit_picked = calloc(p->n_units ? p->n_units : 1, sizeof(*unit_picked));
        size_t *parent_left = calloc(p->n_parents ? p->n_parents : 1, sizeof(*parent_left));
        size_t *cand = malloc((n_avail ? n_avail : 1) * sizeof(*cand));
        if (!unit_left || !unit_picked || !parent_left || !cand) {
                free(unit_left);
                free(unit_picked);
                free(parent_left);
                free(cand);
                return kdev_err_set(err, ENOMEM, "out of memory");
        }
        size_t nc = 0;
        for (size_t a = 0, i = 0; a < n_avail; a++) {
                if (i < n_must && avail[a] == must[i]) {
                        i++;
                        continue;
                }
                size_t d = dev_pos(p, avail[a]);
                cand[nc++] = d;
                unit_left[p->dev_unit[d]]++;
                parent_left[p->dev_parent[d]]++;
        }
        size_t o = 0;
        for (size_t i = 0; i < n_must; i++)
                out[o++] = must[i];
        for (size_t picks = size - n_must; picks > 0 && nc > 0; picks--) {
                size_t best = 0;
                for (size_t c = 1; c < nc; c++) {
                        if (greedy_before(p, cand[c], cand[best], unit_left, unit_picked,
                                          parent_left))
                                best = c;
                }
                size_t d = cand[best];
                out[o++] = &p->devices[d];
                unit_left[p->dev_unit[d]]--;
                unit_picked[p->dev_unit[d]]++;
                parent_left[p->dev_parent[d]]--;
                cand[best] = cand[--nc];
        }
        free(unit_left);
        free(unit_picked);
        free(parent_left);
        free(cand);
        return 0;
}

int kdev_nvidia_pref_choose(const struct kdev_nvidia_pref *p, const struct kdev_resource *r,
                            const struct kdev_device *const *avail, size_t n_avail,
                            const struct kdev_device *const *must, size_t n_must, size_t size,
                            const struct kdev_device **out, struct kdev_err *err)
{
        if (!p || !r || r->devices != p->devices || r->n_devices != p->n_devices ||
            n_must > size || size > n_avail)
                return kdev_err_set(err, EINVAL,
                                    "preferred allocation: invalid request for resource %s",
                                    r ? r->name : "(null)");
        bool aligned = true;
        for (size_t a = 0; a < n_avail; a++) {
                if (avail[a] < p->devices || avail[a] >= p->devices + p->n_devices)
                        return kdev_err_set(err, EINVAL,
                                            "preferred allocation: device not of resource %s",
                                            r->name);
                aligned = aligned && p->dev_whole[dev_pos(p, avail[a])];
        }
        if (aligned)
                return choose_aligned(p, avail, n_avail, must, n_must, size, out, err);
        return choose_greedy(p, avail, n_avail, must, n_must, size, out, err);
}

int kdev_nvidia_preferred(void *data, const struct kdev_resource *r,
                          const struct kdev_device *const *avail, size_t n_avail,
                          const struct kdev_device *const *must, size_t n_must, size_t size,
                          const struct kdev_device **out, struct kdev_err *err)
{
        const struct kdev_nvidia_rdata *d = data;
        if (d && d->pref && d->pref->devices == r->devices && d->pref->n_devices == r->n_devices)
                return kdev_nvidia_pref_choose(d->pref, r, avail, n_avail, must, n_must, size,
                                               out, err);
        size_t o = 0;
        for (size_t i = 0; i < n_must; i++)
                out[o++] = must[i];
        for (size_t a = 0, i = 0; a < n_avail && o < size; a++) {
                if (i < n_must && avail[a] == must[i]) {
                        i++;
                        continue;
                }
                out[o++] = avail[a];
        }
        return 0;
}
