/* Benchmark of NVIDIA GetPreferredAllocation (src/nvidia/preferred.c).
 *
 * Usage: bench_preferred [ITERATIONS]
 *
 * Discovers the 8x H100 NVSwitch, 8x A100 NVSwitch and 16x A100 two-island
 * topologies through the mock NVML (links included), builds nvidia.com/gpu
 * with its link table, and for sizes 2, 4 and 8 (all GPUs available, no and
 * one must-include GPU) prints:
 *   - kdev: kdev_resource_preferred (the whole call: ID lookup, validation,
 *     the exact search, the answer's strings), median of ITERATIONS (default
 *     2001) calls, in microseconds;
 *   - search: kdev_nvidia_best_set alone on the score matrix (the exact
 *     search without the call's ID handling), median as above;
 *   - subsets: an exhaustive search of every subset of `size` GPUs containing
 *     the must-include ones, on the same score matrix;
 *   - partitions: go-gpuallocator's best-effort method
 *     (gpuallocator/besteffort_policy.go): every partition of the available GPUs
 *     (padded to a multiple of `size`) into sets of `size`, the best-scoring
 *     partition among those with a set holding every must-include GPU, then
 *     that partition's best such set; here in C on a precomputed matrix, so
 *     without NVIDIA's per-call NVML link queries (the bulk of issue #774's
 *     seconds);
 * with each brute force's median time and its ratio to kdev, and whether the
 * brute force reached kdev's score ("same": the subset search always should;
 * the partition method optimises partitions, not the set, so it may score
 * lower). Then the slowest exact search over 50 random 16-GPU link tables.
 * Figures only: it asserts nothing (tests assert behaviour).
 */
#include <dlfcn.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kdev_mock_nvml.h"
#include "model/model.h"
#include "nvidia/config.h"
#include "nvidia/preferred.h"
#include "nvidia/resources.h"
#include "nvml/discover.h"
#include "nvml/loader.h"

#define MAXG 32

static double now_us(void)
{
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3;
}

static int dbl_cmp(const void *pa, const void *pb)
{
        double a = *(const double *)pa, b = *(const double *)pb;
        return a < b ? -1 : a > b;
}

static double median(double *v, size_t n)
{
        qsort(v, n, sizeof(*v), dbl_cmp);
        return v[n / 2];
}

/* --- brute force: every subset ---------------------------------------------------- */

struct subsets {
        const int *s;
        size_t n, k;
        unsigned must;
        size_t cur[MAXG];
        size_t depth;
        long long best;
};

static void subsets_rec(struct subsets *B, size_t from, long long sc)
{
        if (B->depth == B->k) {
                unsigned mask = 0;
                for (size_t i = 0; i < B->k; i++)
                        mask |= 1u << B->cur[i];
                if ((mask & B->must) == B->must && sc > B->best)
                        B->best = sc;
                return;
        }
        for (size_t j = from; j + (B->k - B->depth) <= B->n; j++) {
                long long add = 0;
                for (size_t i = 0; i < B->depth; i++)
                        add += B->s[B->cur[i] * B->n + j];
                B->cur[B->depth++] = j;
                subsets_rec(B, j + 1, sc + add);
                B->depth--;
        }
}

static long long brute_subsets(const int *s, size_t n, unsigned must, size_t k)
{
        struct subsets B = {.s = s, .n = n, .k = k, .must = must, .best = -1};
        subsets_rec(&B, 0, 0);
        return B.best;
}

/* --- brute force: go-gpuallocator's partitions ------------------------------------ */

struct parts {
        const int *s;
        size_t n, np, k;          /* GPUs, GPUs + padding, set size */
        unsigned must;
        bool used[MAXG];
        size_t members[MAXG][MAXG]; /* per set */
        size_t n_sets;
        long long set_sc[MAXG];   /* score of each set */
        unsigned set_mask[MAXG];  /* GPUs of each set */
        size_t set_pads[MAXG];    /* padding items of each set */
        long long best_total, best_set_score;
};

static void partition_done(struct parts *P)
{
        long long total = 0, with_must = -1;
        size_t padding = P->np - P->n;
        for (size_t set = 0; set < P->n_sets; set++) {
                if (P->set_pads[set] != 0 && P->set_pads[set] != padding)
                        return; /* a set holds no padding or all of it */
                total += P->set_sc[set];
                if ((P->set_mask[set] & P->must) == P->must && P->set_pads[set] == 0 &&
                    P->set_sc[set] > with_must)
                        with_must = P->set_sc[set];
        }
        if (with_must >= 0 && total > P->best_total) {
                P->best_total = total;
                P->best_set_score = with_must;
        }
}

static void add_item(struct parts *P, size_t set, size_t have, size_t j)
{
        long long add = 0;
        if (j < P->n) {
                for (size_t i = 0; i < have; i++) {
                        size_t o = P->members[set][i];
                        if (o < P->n)
                                add += P->s[o * P->n + j];
                }
                P->set_mask[set] |= 1u << j;
        } else {
                P->set_pads[set]++;
        }
        P->set_sc[set] += add;
        P->members[set][have] = j;
        P->used[j] = true;
}

static void remove_item(struct parts *P, size_t set, size_t have, size_t j)
{
        long long add = 0;
        if (j < P->n) {
                for (size_t i = 0; i < have; i++) {
                        size_t o = P->members[set][i];
                        if (o < P->n)
                                add += P->s[o * P->n + j];
                }
                P->set_mask[set] &= ~(1u << j);
        } else {
                P->set_pads[set]--;
        }
        P->set_sc[set] -= add;
        P->used[j] = false;
}

/* Fills set |set| (|have| members so far) from items >= |from|; each set
 * starts with the lowest unused item, so every partition is seen once. */
static void partition_rec(struct parts *P, size_t set, size_t have, size_t from)
{
        if (have == P->k) {
                size_t first = 0;
                while (first < P->np && P->used[first])
                        first++;
                if (first == P->np) {
                        partition_done(P);
                        return;
                }
                size_t ns = set + 1;
                P->set_sc[ns] = 0;
                P->set_mask[ns] = 0;
                P->set_pads[ns] = 0;
                P->n_sets++;
                add_item(P, ns, 0, first);
                partition_rec(P, ns, 1, first + 1);
                remove_item(P, ns, 0, first);
                P->n_sets--;
                return;
        }
        for (size_t j = from; j < P->np; j++) {
                if (P->used[j])
                        continue;
                add_item(P, set, have, j);
                partition_rec(P, set, have + 1, j + 1);
                remove_item(P, set, have, j);
        }
}

static long long brute_partitions(const int *s, size_t n, unsigned must, size_t k)
{
        struct parts P = {.s = s, .n = n, .k = k, .must = must, .best_total = -1,
                          .best_set_score = -1};
        P.np = (n + k - 1) / k * k;
        P.n_sets = 1;
        add_item(&P, 0, 0, 0);
        partition_rec(&P, 0, 1, 1);
        return P.best_set_score;
}

/* --- the benchmark ---------------------------------------------------------------- */

static long long score_of(const int *s, size_t n, const struct kdev_resource *r, char **ids,
                          size_t n_ids)
{
        size_t pos[MAXG];
        for (size_t i = 0; i < n_ids; i++) {
                for (size_t d = 0; d < r->n_devices; d++) {
                        if (strcmp(r->devices[d].id, ids[i]) == 0)
                                pos[i] = d;
                }
        }
        long long sc = 0;
        for (size_t a = 0; a < n_ids; a++) {
                for (size_t b = a + 1; b < n_ids; b++)
                        sc += s[pos[a] * n + pos[b]];
        }
        return sc;
}

static void bench_topology(struct kdev_nvml *lib, kdevMockReset_fn *reset, const char *label,
                           const char *file, size_t iterations)
{
        setenv("KDEV_MOCK_NVML_TOPOLOGY", file, 1);
        reset();
        struct kdev_nvml_discover_options o = {.sysfs_root = "/nonexistent-kdev-sysfs",
                                               .flags = KDEV_NVML_DISCOVER_LINKS};
        struct kdev_gpu_set *set = NULL;
        struct kdev_err e;
        struct kdev_nvidia_config cfg;
        struct kdev_resource_set rs = {0};
        if (kdev_nvml_discover(lib, &o, &set, &e) != 0 || kdev_nvidia_config_init(&cfg, &e) ||
            kdev_nvidia_config_finish(&cfg, false, &e) ||
            kdev_nvidia_build(set, &cfg, NULL, &rs, &e) ||
            kdev_nvidia_pref_attach(&rs, set, KDEV_NVIDIA_SHARE_DISTRIBUTED, &e)) {
                fprintf(stderr, "%s: %s\n", file, e.msg);
                exit(1);
        }
        kdev_nvidia_config_clear(&cfg);
        const struct kdev_resource *r = &rs.resources[0];
        size_t n = set->n_gpus;
        int *s = calloc(n * n, sizeof(*s));
        for (size_t i = 0; i < n; i++) {
                for (size_t j = 0; j < n; j++) {
                        if (i != j)
                                s[i * n + j] = kdev_nvidia_link_score(
                                        kdev_gpu_set_level(set, i, j),
                                        kdev_gpu_set_nvlinks(set, i, j));
                }
        }
        const char *avail[MAXG];
        for (size_t i = 0; i < n; i++)
                avail[i] = r->devices[i].id;
        double *t = malloc(iterations * sizeof(*t));
        static const size_t sizes[] = {2, 4, 8};
        for (size_t si = 0; si < 3; si++) {
                size_t k = sizes[si];
                for (int with_must = 0; with_must < 2; with_must++) {
                        /* must-include: the second GPU of the last quad */
                        size_t must_pos = n - 3;
                        const char *must = avail[must_pos];
                        unsigned must_mask = with_must ? 1u << must_pos : 0;
                        char **out = NULL;
                        size_t n_out = 0;
                        long long kdev_score = -1;
                        for (size_t it = 0; it < iterations; it++) {
                                double t0 = now_us();
                                int rc = kdev_resource_preferred(r, avail, n, &must,
                                                                 with_must ? 1 : 0, (int)k, &out,
                                                                 &n_out, &e);
                                t[it] = now_us() - t0;
                                if (rc != 0) {
                                        fprintf(stderr, "%s\n", e.msg);
                                        exit(1);
                                }
                                if (it == 0)
                                        kdev_score = score_of(s, n, r, out, n_out);
                                kdev_strv_free(out, n_out);
                        }
                        double kdev_us = median(t, iterations);
                        /* the search alone, on the same matrix */
                        size_t pick[MAXG], mp = must_pos;
                        for (size_t it = 0; it < iterations; it++) {
                                double t0 = now_us();
                                kdev_nvidia_best_set(s, n, &mp, with_must ? 1 : 0, k, pick, NULL);
                                t[it] = now_us() - t0;
                        }
                        double search_us = median(t, iterations);
                        /* brute forces: fewer runs, they are slow */
                        size_t runs = 5;
                        double tb[5], tp[5];
                        long long sub = 0, part = 0;
                        for (size_t it = 0; it < runs; it++) {
                                double t0 = now_us();
                                sub = brute_subsets(s, n, must_mask, k);
                                tb[it] = now_us() - t0;
                                t0 = now_us();
                                part = brute_partitions(s, n, must_mask, k);
                                tp[it] = now_us() - t0;
                        }
                        double sub_us = median(tb, runs), part_us = median(tp, runs);
                        printf("%-18s %4zu %4zu %4s %8.2f %8.2f %10.1f %8.1fx %4s %12.1f %9.1fx "
                               "%4s\n",
                               label, n, k, with_must ? "1" : "-", kdev_us, search_us, sub_us,
                               sub_us / kdev_us, sub == kdev_score ? "yes" : "NO", part_us,
                               part_us / kdev_us, part == kdev_score ? "yes" : "no");
                }
        }
        free(t);
        free(s);
        kdev_resource_set_clear(&rs);
        kdev_gpu_set_free(set);
}

/* Random symmetric 16-GPU link tables (fixed seed: random levels, NVLinks on
 * a third of the pairs): the slowest exact search over sizes 2..8. */
static void bench_random(void)
{
        uint64_t st = 20240601;
        double worst = 0;
        size_t worst_nodes = 0, worst_k = 0, inexact = 0;
        enum { N = 16, MATRICES = 50, RUNS = 5 };
        int s[N * N];
        for (int m = 0; m < MATRICES; m++) {
                for (size_t i = 0; i < N; i++) {
                        s[i * N + i] = 0;
                        for (size_t j = i + 1; j < N; j++) {
                                st = st * 6364136223846793005ull + 1442695040888963407ull;
                                unsigned x = (unsigned)(st >> 33);
                                unsigned links = x % 3 == 0 ? (x >> 8) % 13 : 0;
                                s[i * N + j] = s[j * N + i] = kdev_nvidia_link_score(
                                        (nvmlGpuTopologyLevel_t)((x >> 4) % 6 * 10), links);
                        }
                }
                for (size_t k = 2; k <= 8; k++) {
                        size_t out[N];
                        struct kdev_nvidia_best_stats bs;
                        double t[RUNS];
                        for (int r = 0; r < RUNS; r++) {
                                double t0 = now_us();
                                kdev_nvidia_best_set(s, N, NULL, 0, k, out, &bs);
                                t[r] = now_us() - t0;
                        }
                        double med = median(t, RUNS);
                        inexact += bs.exact ? 0 : 1;
                        if (med > worst) {
                                worst = med;
                                worst_nodes = bs.nodes;
                                worst_k = k;
                        }
                }
        }
        printf("random 16-GPU tables (%d, sizes 2-8): slowest search %.1f us (size %zu, %zu "
               "nodes); not proved optimal: %zu\n",
               MATRICES, worst, worst_k, worst_nodes, inexact);
}

int main(int argc, char **argv)
{
        size_t iterations = argc > 1 ? strtoul(argv[1], NULL, 10) : 2001;
        if (iterations == 0 || iterations > 1000000)
                iterations = 2001;
        struct kdev_nvml_options o = {.library_path = KDEV_MOCK_NVML_LIB};
        struct kdev_nvml *lib = NULL;
        struct kdev_err e;
        if (kdev_nvml_open(&o, &lib, &e) != 0) {
                fprintf(stderr, "%s\n", e.msg);
                return 1;
        }
        void *h = dlopen(KDEV_MOCK_NVML_LIB, RTLD_NOW | RTLD_NOLOAD);
        kdevMockReset_fn *reset = h ? (kdevMockReset_fn *)dlsym(h, "kdevMockReset") : NULL;
        if (!reset) {
                fprintf(stderr, "mock NVML control interface not found\n");
                return 1;
        }
        printf("GetPreferredAllocation, all GPUs available; times are medians in us\n");
        printf("%-18s %4s %4s %4s %8s %8s %10s %9s %4s %12s %10s %4s\n", "topology", "gpus",
               "size", "must", "kdev", "search", "subsets", "ratio", "same", "partitions",
               "ratio", "same");
        bench_topology(lib, reset, "h100-8x-nvswitch",
                       KDEV_MOCK_NVML_TOPOLOGIES "/h100-80gb-8x-nvswitch.yaml", iterations);
        bench_topology(lib, reset, "a100-8x-nvswitch",
                       KDEV_MOCK_NVML_TOPOLOGIES "/a100-sxm4-80gb-8x-nvswitch.yaml",
                       iterations);
        bench_topology(lib, reset, "a100-16x-2islands",
                       KDEV_MOCK_NVML_TOPOLOGIES "/a100-sxm4-80gb-16x-2islands.yaml",
                       iterations);
        bench_random();
        dlclose(h);
        kdev_nvml_close(lib);
        return 0;
}
