/* GetPreferredAllocation of NVIDIA resources (src/nvidia/preferred.c):
 * the best set against brute force on random score matrices and on every
 * shipped mock topology (through discovery, the resource builder and
 * kdev_resource_preferred), invariants, and the greedy path's policies for
 * replicas and MIG devices (NVIDIA internal/rm/allocate.go).
 */
#define _XOPEN_SOURCE 700
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "mock_fixture.h"
#include "nvidia/config.h"
#include "nvidia/devinfo.h"
#include "nvidia/preferred.h"
#include "nvidia/resources.h"
#include "nvml/discover.h"
#include "nvml/loader.h"

/* --- helpers ------------------------------------------------------------------- */

static uint64_t rng_state;

static uint32_t rnd(void)
{
        rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
        return (uint32_t)(rng_state >> 33);
}

/* The reference score table, written out independently of the library. */
static int ref_score(unsigned level, unsigned links)
{
        int p2p = level == 0 ? 60 : level == 10 ? 50 : level == 20 ? 40 : level == 30 ? 30
                : level == 40 ? 20 : level == 50 ? 10 : -1;
        assert_true(p2p > 0);
        return p2p + 100 * (int)links;
}

struct brute {
        const int *s;
        size_t n, k;
        uint32_t must; /* bit mask */
        uint32_t avail; /* bit mask of allowed items */
        size_t cur[32], best[32];
        size_t depth;
        long long best_score;
        bool found;
};

static long long set_score(const int *s, size_t n, const size_t *v, size_t k)
{
        long long sum = 0;
        for (size_t a = 0; a < k; a++) {
                for (size_t b = a + 1; b < k; b++)
                        sum += s[v[a] * n + v[b]];
        }
        return sum;
}

/* Every k-subset of the allowed items in lexicographic order; the first of
 * the highest score that holds every must item wins. */
static void brute_rec(struct brute *B, size_t from)
{
        if (B->depth == B->k) {
                uint32_t mask = 0;
                for (size_t i = 0; i < B->k; i++)
                        mask |= 1u << B->cur[i];
                if ((mask & B->must) != B->must)
                        return;
                long long sc = set_score(B->s, B->n, B->cur, B->k);
                if (!B->found || sc > B->best_score) {
                        B->found = true;
                        B->best_score = sc;
                        memcpy(B->best, B->cur, B->k * sizeof(*B->cur));
                }
                return;
        }
        for (size_t j = from; j < B->n; j++) {
                if (!(B->avail & (1u << j)))
                        continue;
                B->cur[B->depth++] = j;
                brute_rec(B, j + 1);
                B->depth--;
        }
}

static long long brute_best(const int *s, size_t n, uint32_t avail, uint32_t must, size_t k,
                            size_t *out)
{
        struct brute B = {.s = s, .n = n, .k = k, .must = must, .avail = avail};
        brute_rec(&B, 0);
        assert_true(B.found);
        memcpy(out, B.best, k * sizeof(*out));
        return B.best_score;
}

/* --- link score ---------------------------------------------------------------- */

static void test_link_score(void **state)
{
        (void)state;
        assert_int_equal(kdev_nvidia_link_score(NVML_TOPOLOGY_INTERNAL, 0), 60);
        assert_int_equal(kdev_nvidia_link_score(NVML_TOPOLOGY_SINGLE, 0), 50);
        assert_int_equal(kdev_nvidia_link_score(NVML_TOPOLOGY_MULTIPLE, 0), 40);
        assert_int_equal(kdev_nvidia_link_score(NVML_TOPOLOGY_HOSTBRIDGE, 0), 30);
        assert_int_equal(kdev_nvidia_link_score(NVML_TOPOLOGY_NODE, 0), 20);
        assert_int_equal(kdev_nvidia_link_score(NVML_TOPOLOGY_SYSTEM, 0), 10);
        assert_int_equal(kdev_nvidia_link_score(NVML_TOPOLOGY_NODE, 1), 120);
        assert_int_equal(kdev_nvidia_link_score(NVML_TOPOLOGY_SYSTEM, 18), 1810);
        assert_int_equal(kdev_nvidia_link_score((nvmlGpuTopologyLevel_t)5, 2), 200);
}

/* --- best set vs brute force --------------------------------------------------- */

static const unsigned levels6[] = {0, 10, 20, 30, 40, 50};

/* A random symmetric score matrix of |n| GPUs: random levels and NVLinks
 * (mode 0), coarse values with many ties (mode 1), all equal (mode 2). */
static void random_matrix(int *s, size_t n, int mode)
{
        for (size_t i = 0; i < n; i++) {
                s[i * n + i] = 0;
                for (size_t j = i + 1; j < n; j++) {
                        int v;
                        if (mode == 0)
                                v = ref_score(levels6[rnd() % 6], rnd() % 3 == 0 ? rnd() % 13 : 0);
                        else if (mode == 1)
                                v = ref_score(levels6[4 + rnd() % 2], 0);
                        else
                                v = ref_score(40, 0);
                        s[i * n + j] = s[j * n + i] = v;
                }
        }
}

static void check_against_brute(const int *s, size_t n, const size_t *must, size_t n_must,
                                size_t k)
{
        size_t got[32], want[32];
        uint32_t must_mask = 0;
        for (size_t i = 0; i < n_must; i++)
                must_mask |= 1u << must[i];
        struct kdev_nvidia_best_stats st;
        assert_int_equal(kdev_nvidia_best_set(s, n, must, n_must, k, got, &st), 0);
        assert_true(st.exact);
        long long want_score = brute_best(s, n, (n == 32 ? 0 : (1u << n)) - 1u, must_mask, k,
                                          want);
        assert_int_equal(st.score, want_score);
        assert_int_equal(set_score(s, n, got, k), want_score);
        for (size_t i = 0; i < k; i++) {
                if (got[i] != want[i])
                        fail_msg("n=%zu k=%zu n_must=%zu: item %zu is %zu, brute force %zu", n,
                                 k, n_must, i, got[i], want[i]);
        }
}

static void test_best_set_random(void **state)
{
        (void)state;
        rng_state = 42;
        int s[10 * 10];
        size_t cases = 0;
        for (int mode = 0; mode < 3; mode++) {
                for (size_t n = 1; n <= 10; n++) {
                        for (int rep = 0; rep < (mode == 0 ? 6 : 2); rep++) {
                                random_matrix(s, n, mode);
                                for (size_t k = 0; k <= n; k++) {
                                        /* no must, must {0}, must {n-1}, random must sets */
                                        check_against_brute(s, n, NULL, 0, k);
                                        size_t m0 = 0, ml = n - 1;
                                        if (k >= 1) {
                                                check_against_brute(s, n, &m0, 1, k);
                                                check_against_brute(s, n, &ml, 1, k);
                                        }
                                        for (int r = 0; r < 3 && k >= 2; r++) {
                                                size_t must[10], nm = 1 + rnd() % (k - 1);
                                                uint32_t used = 0;
                                                for (size_t i = 0; i < nm; i++) {
                                                        size_t x;
                                                        do
                                                                x = rnd() % n;
                                                        while (used & (1u << x));
                                                        used |= 1u << x;
                                                        must[i] = x;
                                                }
                                                check_against_brute(s, n, must, nm, k);
                                                cases++;
                                        }
                                        cases += 3;
                                }
                        }
                }
        }
        assert_true(cases > 1000);
}

/* 16 items: every k and a few must sets, still against brute force. */
static void test_best_set_16(void **state)
{
        (void)state;
        rng_state = 7;
        int s[16 * 16];
        for (int rep = 0; rep < 2; rep++) {
                random_matrix(s, 16, rep);
                for (size_t k = 0; k <= 16; k += (k < 4 || k > 12) ? 1 : 2) {
                        check_against_brute(s, 16, NULL, 0, k);
                        size_t m2[2] = {3, 12};
                        if (k >= 2)
                                check_against_brute(s, 16, m2, 2, k);
                }
        }
}

static void test_best_set_errors(void **state)
{
        (void)state;
        int s[4] = {0, 5, 5, 0};
        size_t out[3], must[2] = {0, 0}, bad = 2;
        assert_int_equal(kdev_nvidia_best_set(s, 2, NULL, 0, 3, out, NULL), -EINVAL);
        assert_int_equal(kdev_nvidia_best_set(s, 2, must, 2, 2, out, NULL), -EINVAL);
        assert_int_equal(kdev_nvidia_best_set(s, 2, &bad, 1, 1, out, NULL), -EINVAL);
        assert_int_equal(kdev_nvidia_best_set(s, 2, must, 2, 1, out, NULL), -EINVAL);
        assert_int_equal(kdev_nvidia_best_set(NULL, 2, NULL, 0, 1, out, NULL), -EINVAL);
        /* k = 0 and k = n */
        assert_int_equal(kdev_nvidia_best_set(s, 2, NULL, 0, 0, NULL, NULL), 0);
        assert_int_equal(kdev_nvidia_best_set(s, 2, NULL, 0, 2, out, NULL), 0);
        assert_int_equal(out[0], 0);
        assert_int_equal(out[1], 1);
}

/* Beyond KDEV_NVIDIA_PREF_EXACT_MAX candidates the heuristic answers: a valid
 * set, marked not exact; on two obvious cliques it finds the best one. */
static void test_best_set_large(void **state)
{
        (void)state;
        size_t n = 80;
        int *s = calloc(n * n, sizeof(*s));
        size_t out[8];
        for (size_t i = 0; i < n; i++) {
                for (size_t j = 0; j < n; j++) {
                        /* items 40..47 form the strongest clique */
                        bool in = i >= 40 && i < 48 && j >= 40 && j < 48;
                        s[i * n + j] = i == j ? 0 : in ? 1000 : 10 + (int)((i + j) % 7);
                }
        }
        struct kdev_nvidia_best_stats st;
        assert_int_equal(kdev_nvidia_best_set(s, n, NULL, 0, 8, out, &st), 0);
        assert_false(st.exact);
        for (size_t i = 0; i < 8; i++)
                assert_int_equal(out[i], 40 + i);
        assert_int_equal(st.score, 28 * 1000);
        size_t must = 3;
        assert_int_equal(kdev_nvidia_best_set(s, n, &must, 1, 8, out, &st), 0);
        bool has3 = false;
        for (size_t i = 0; i < 8; i++) {
                has3 = has3 || out[i] == 3;
                assert_true(i == 0 || out[i] > out[i - 1]);
        }
        assert_true(has3);
        free(s);
}

/* --- every shipped topology, through the resource ------------------------------ */

struct fx {
        struct mock_nvml m;
        char tmp[64];
};

static int setup(void **state)
{
        struct fx *f = calloc(1, sizeof(*f));
        if (mock_nvml_open(&f->m) != 0 || mock_tmpdir(f->tmp, sizeof(f->tmp), "kdev-pref") != 0)
                return -1;
        *state = f;
        return 0;
}

static int teardown(void **state)
{
        struct fx *f = *state;
        mock_rmtree(f->tmp);
        mock_nvml_close(&f->m);
        free(f);
        return 0;
}

static struct kdev_gpu_set *discover(struct fx *f, const char *file)
{
        struct kdev_gpu_set *set =
                mock_nvml_discover(&f->m, file, f->tmp, KDEV_NVML_DISCOVER_LINKS);
        assert_true(set->has_links);
        return set;
}

/* nvidia.com/gpu of |set| with its preferred-allocation data attached. */
static void build_gpu_resource(const struct kdev_gpu_set *set, struct kdev_resource_set *rs)
{
        struct kdev_nvidia_config cfg;
        struct kdev_err e;
        kdev_err_clear(&e);
        assert_int_equal(kdev_nvidia_config_init(&cfg, &e), 0);
        assert_int_equal(kdev_nvidia_config_finish(&cfg, false, &e), 0);
        if (kdev_nvidia_build(set, &cfg, NULL, rs, &e) != 0)
                fail_msg("%s", e.msg);
        kdev_nvidia_config_clear(&cfg);
        assert_int_equal(kdev_nvidia_pref_attach(rs, set, KDEV_NVIDIA_SHARE_DISTRIBUTED, &e), 0);
        assert_int_equal(rs->n_resources, 1);
        assert_string_equal(rs->resources[0].name, "nvidia.com/gpu");
}

/* Reference score matrix of the discovered GPUs (independent table). */
static int *topo_matrix(const struct kdev_gpu_set *set)
{
        size_t n = set->n_gpus;
        int *s = calloc(n * n, sizeof(*s));
        for (size_t i = 0; i < n; i++) {
                for (size_t j = 0; j < n; j++) {
                        if (i != j)
                                s[i * n + j] = ref_score(set->levels[i * n + j],
                                                         set->nvlink_counts[i * n + j]);
                }
        }
        return s;
}

/* kdev_resource_preferred over |avail_mask| with |must_mask|, size |k|:
 * checks the answer against brute force (set, order) and returns it as a
 * mask. The IDs are given in |order| (a permutation). */
static uint32_t check_topo_call(const struct kdev_resource *r, const int *s, size_t n,
                                uint32_t avail_mask, uint32_t must_mask, size_t k,
                                const size_t *order)
{
        const char *avail[32], *must[32];
        size_t na = 0, nm = 0;
        for (size_t i = 0; i < n; i++) {
                size_t g = order[i];
                if (avail_mask & (1u << g))
                        avail[na++] = r->devices[g].id;
                if (must_mask & (1u << g))
                        must[nm++] = r->devices[g].id;
        }
        char **out = NULL;
        size_t n_out = 0;
        struct kdev_err e;
        kdev_err_clear(&e);
        if (kdev_resource_preferred(r, avail, na, must, nm, (int)k, &out, &n_out, &e) != 0)
                fail_msg("%s", e.msg);
        assert_int_equal(n_out, k);
        size_t want[32];
        brute_best(s, n, avail_mask, must_mask, k, want);
        uint32_t want_mask = 0, got_mask = 0;
        for (size_t i = 0; i < k; i++)
                want_mask |= 1u << want[i];
        /* order: must-include first, then the others, each in device order */
        size_t prev = 0;
        for (size_t i = 0; i < n_out; i++) {
                size_t g = n;
                for (size_t d = 0; d < n; d++) {
                        if (strcmp(r->devices[d].id, out[i]) == 0)
                                g = d;
                }
                assert_true(g < n);
                assert_false(got_mask & (1u << g));
                got_mask |= 1u << g;
                bool is_must = must_mask & (1u << g);
                bool prev_must = i > 0 && (must_mask & (1u << prev));
                if (i > 0) {
                        assert_true(prev_must || !is_must);
                        if (prev_must == is_must)
                                assert_true(g > prev);
                }
                prev = g;
        }
        assert_true((got_mask & must_mask) == must_mask);
        assert_true((got_mask & ~avail_mask) == 0);
        if (got_mask != want_mask)
                fail_msg("avail %#x must %#x size %zu: got %#x, brute force %#x", avail_mask,
                         must_mask, k, got_mask, want_mask);
        kdev_strv_free(out, n_out);
        return got_mask;
}

static const char *const all_topologies[] = {
        TOPO("a100-sxm4-80gb-16x-2islands.yaml"), TOPO("a100-sxm4-80gb-8x-nvswitch.yaml"),
        TOPO("dgx-station-a100-display.yaml"),    TOPO("h100-80gb-8x-nvswitch.yaml"),
        TOPO("h200-nvl-4x-pcie-2numa.yaml"),      TOPO("mig-a100-40gb.yaml"),
        TOPO("mig-h200.yaml"),
};

static void test_every_topology(void **state)
{
        struct fx *f = *state;
        rng_state = 1234;
        for (size_t t = 0; t < sizeof(all_topologies) / sizeof(*all_topologies); t++) {
                struct kdev_gpu_set *set = discover(f, all_topologies[t]);
                struct kdev_resource_set rs = {0};
                build_gpu_resource(set, &rs);
                const struct kdev_resource *r = &rs.resources[0];
                size_t n = set->n_gpus;
                assert_int_equal(r->n_devices, n);
                int *s = topo_matrix(set);
                size_t ident[32], rev[32];
                for (size_t i = 0; i < n; i++) {
                        ident[i] = i;
                        rev[i] = n - 1 - i;
                }
                uint32_t all = (1u << n) - 1;
                for (size_t k = 1; k <= n; k++) {
                        uint32_t musts[5] = {0, 1u, 1u << (n - 1), 0, 0};
                        size_t n_musts = 3;
                        if (k >= 2 && n >= 3)
                                musts[n_musts++] = (1u << 1) | (1u << (n - 2));
                        if (k >= 3 && n >= 4)
                                musts[n_musts++] = 1u | (1u << (n / 2)) | (1u << (n - 1));
                        for (size_t m = 0; m < n_musts; m++) {
                                uint32_t a = check_topo_call(r, s, n, all, musts[m], k, ident);
                                /* the same sets in another order: the same answer */
                                uint32_t b = check_topo_call(r, s, n, all, musts[m], k, rev);
                                assert_int_equal(a, b);
                        }
                        /* a random part of the GPUs available */
                        for (int rep = 0; rep < 2; rep++) {
                                uint32_t avail = 0;
                                for (size_t i = 0; i < n; i++) {
                                        if (rnd() % 4 != 0)
                                                avail |= 1u << i;
                                }
                                if ((size_t)__builtin_popcount(avail) < k)
                                        continue;
                                uint32_t must = 0;
                                for (size_t i = 0; i < n && !must; i++) {
                                        if ((avail & (1u << i)) && rnd() % 2)
                                                must = 1u << i;
                                }
                                check_topo_call(r, s, n, avail, must, k, ident);
                        }
                }
                free(s);
                kdev_resource_set_clear(&rs);
                kdev_gpu_set_free(set);
        }
}

/* Exact answers on known topologies (hand-checked). */
static void expect_pick(const struct kdev_resource *r, const char *const *avail, size_t na,
                        const char *const *must, size_t nm, int size, const char *expect)
{
        char **out = NULL;
        size_t n_out = 0;
        struct kdev_err e;
        kdev_err_clear(&e);
        if (kdev_resource_preferred(r, avail, na, must, nm, size, &out, &n_out, &e) != 0)
                fail_msg("%s", e.msg);
        char buf[2048] = "";
        for (size_t i = 0; i < n_out; i++) {
                /* by position in the resource, for short expectations */
                for (size_t d = 0; d < r->n_devices; d++) {
                        if (strcmp(r->devices[d].id, out[i]) == 0) {
                                snprintf(buf + strlen(buf), sizeof(buf) - strlen(buf), "%s%zu",
                                         i ? "," : "", d);
                        }
                }
        }
        assert_string_equal(buf, expect);
        kdev_strv_free(out, n_out);
}

static void test_topology_exact(void **state)
{
        struct fx *f = *state;
        struct kdev_gpu_set *set = discover(f, TOPO("a100-sxm4-80gb-16x-2islands.yaml"));
        struct kdev_resource_set rs = {0};
        build_gpu_resource(set, &rs);
        const struct kdev_resource *r = &rs.resources[0];
        const char *all[16];
        for (size_t i = 0; i < 16; i++)
                all[i] = r->devices[i].id;
        /* pairs on one PCIe switch with 4 NVLinks: 0+1 */
        expect_pick(r, all, 16, NULL, 0, 2, "0,1");
        expect_pick(r, all, 16, NULL, 0, 4, "0,1,2,3");
        expect_pick(r, all, 16, NULL, 0, 8, "0,1,2,3,4,5,6,7");
        /* must GPU 9: its switch partner 8 */
        expect_pick(r, all, 16, &all[9], 1, 2, "9,8");
        expect_pick(r, all, 16, &all[9], 1, 4, "9,8,10,11");
        /* GPU 0 taken: 2,3 beat 1 + anything */
        expect_pick(r, &all[1], 15, NULL, 0, 2, "2,3");
        /* must on both islands: size 4 adds each one's partner */
        const char *m2[2] = {all[14], all[3]};
        expect_pick(r, all, 16, m2, 2, 4, "3,14,2,15");
        /* size larger than available: everything, kubelet fills the rest */
        expect_pick(r, &all[12], 4, NULL, 0, 6, "12,13,14,15");
        kdev_resource_set_clear(&rs);
        kdev_gpu_set_free(set);

        set = discover(f, TOPO("h200-nvl-4x-pcie-2numa.yaml"));
        build_gpu_resource(set, &rs);
        r = &rs.resources[0];
        for (size_t i = 0; i < 4; i++)
                all[i] = r->devices[i].id;
        expect_pick(r, all, 4, NULL, 0, 2, "0,1");
        expect_pick(r, all, 4, &all[2], 1, 2, "2,3");
        expect_pick(r, all, 4, &all[1], 1, 3, "1,0,2");
        kdev_resource_set_clear(&rs);
        kdev_gpu_set_free(set);
}

/* --- replicas and MIG devices: the greedy path ----------------------------------- */

struct fake {
        struct kdev_resource r;
        struct kdev_nvidia_devinfo infos[32];
        char ids[32][128];
};

/* A resource of |n_gpus| physical GPUs "GPU-A".. with |replicas| replicas each
 * (device order: GPU then replica), owned by |fk|; ops are the NVIDIA ones
 * (with a real rdata so the hook finds its pref). */
static void fake_replicas(struct fake *fk, size_t n_gpus, size_t replicas,
                          enum kdev_nvidia_share_policy policy)
{
        memset(fk, 0, sizeof(*fk));
        size_t n = n_gpus * replicas;
        fk->r.name = strdup("nvidia.com/gpu");
        fk->r.devices = calloc(n, sizeof(*fk->r.devices));
        for (size_t g = 0; g < n_gpus; g++) {
                for (size_t k = 0; k < replicas; k++) {
                        size_t d = g * replicas + k;
                        struct kdev_nvidia_devinfo *info = &fk->infos[d];
                        snprintf(info->uuid, sizeof(info->uuid), "GPU-%c", (char)('A' + g));
                        snprintf(info->parent_uuid, sizeof(info->parent_uuid), "GPU-%c",
                                 (char)('A' + g));
                        info->gi = info->ci = KDEV_NVIDIA_NO_INSTANCE;
                        info->replica = (int)k;
                        snprintf(fk->ids[d], sizeof(fk->ids[d]), "%s::%zu", info->uuid, k);
                        fk->r.devices[d].id = strdup(fk->ids[d]);
                        fk->r.devices[d].healthy = true;
                        fk->r.devices[d].numa_node = -1;
                        fk->r.devices[d].data = info;
                }
        }
        fk->r.n_devices = n;
        struct kdev_nvidia_pref *p = NULL;
        assert_int_equal(kdev_nvidia_pref_new(NULL, &fk->r, policy, &p, NULL), 0);
        fk->r.ops_data = p;
}

/* MIG devices: |per_gpu| on each of |n_gpus| GPUs, not replicated. */
static void fake_migs(struct fake *fk, size_t n_gpus, size_t per_gpu,
                      enum kdev_nvidia_share_policy policy)
{
        memset(fk, 0, sizeof(*fk));
        size_t n = n_gpus * per_gpu;
        fk->r.name = strdup("nvidia.com/mig-1g.10gb");
        fk->r.devices = calloc(n, sizeof(*fk->r.devices));
        for (size_t g = 0; g < n_gpus; g++) {
                for (size_t k = 0; k < per_gpu; k++) {
                        size_t d = g * per_gpu + k;
                        struct kdev_nvidia_devinfo *info = &fk->infos[d];
                        snprintf(info->uuid, sizeof(info->uuid), "MIG-%zu", d);
                        snprintf(info->parent_uuid, sizeof(info->parent_uuid), "GPU-%c",
                                 (char)('A' + g));
                        info->gi = (unsigned)k;
                        info->ci = 0;
                        info->replica = -1;
                        fk->r.devices[d].id = strdup(info->uuid);
                        fk->r.devices[d].healthy = true;
                        fk->r.devices[d].numa_node = -1;
                        fk->r.devices[d].data = info;
                }
        }
        fk->r.n_devices = n;
        struct kdev_nvidia_pref *p = NULL;
        assert_int_equal(kdev_nvidia_pref_new(NULL, &fk->r, policy, &p, NULL), 0);
        fk->r.ops_data = p;
}

static void fake_free(struct fake *fk)
{
        kdev_nvidia_pref_free(fk->r.ops_data);
        fk->r.ops_data = NULL;
        for (size_t i = 0; i < fk->r.n_devices; i++)
                free(fk->r.devices[i].id);
        free(fk->r.devices);
        free(fk->r.name);
}

/* Calls the pref directly: |avail| and |must| are comma-separated IDs (any
 * order); the answer is compared with |expect| (comma-separated, in order). */
static void greedy_expect(struct fake *fk, const char *avail, const char *must, size_t size,
                          const char *expect)
{
        const struct kdev_device *av[32], *mu[32], *out[32];
        size_t na = 0, nm = 0;
        /* device-array order, as the model passes them */
        for (size_t d = 0; d < fk->r.n_devices; d++) {
                char key[80];
                snprintf(key, sizeof(key), ",%s,", fk->r.devices[d].id);
                char a[512], m[512];
                snprintf(a, sizeof(a), ",%s,", avail);
                snprintf(m, sizeof(m), ",%s,", must);
                if (strstr(a, key))
                        av[na++] = &fk->r.devices[d];
                if (strstr(m, key))
                        mu[nm++] = &fk->r.devices[d];
        }
        struct kdev_err e;
        kdev_err_clear(&e);
        if (kdev_nvidia_pref_choose(fk->r.ops_data, &fk->r, av, na, mu, nm, size, out, &e) != 0)
                fail_msg("%s", e.msg);
        char buf[1024] = "";
        for (size_t i = 0; i < size; i++)
                snprintf(buf + strlen(buf), sizeof(buf) - strlen(buf), "%s%s", i ? "," : "",
                         out[i]->id);
        assert_string_equal(buf, expect);
}

#define A4 "GPU-A::0,GPU-A::1,GPU-A::2,GPU-A::3"
#define B4 "GPU-B::0,GPU-B::1,GPU-B::2,GPU-B::3"
#define C4 "GPU-C::0,GPU-C::1,GPU-C::2,GPU-C::3"

static void test_replicas_distributed(void **state)
{
        (void)state;
        struct fake fk;
        fake_replicas(&fk, 3, 4, KDEV_NVIDIA_SHARE_DISTRIBUTED);
        /* a fresh node: one replica per GPU before a second one anywhere */
        greedy_expect(&fk, A4 "," B4 "," C4, "", 2, "GPU-A::0,GPU-B::0");
        greedy_expect(&fk, A4 "," B4 "," C4, "", 4, "GPU-A::0,GPU-B::0,GPU-C::0,GPU-A::1");
        /* GPU-A::0 in use: B and C first */
        greedy_expect(&fk, "GPU-A::1,GPU-A::2,GPU-A::3," B4 "," C4, "", 2, "GPU-B::0,GPU-C::0");
        /* a must-include replica counts as allocated on its GPU */
        greedy_expect(&fk, A4 "," B4 "," C4, "GPU-A::1", 2, "GPU-A::1,GPU-B::0");
        /* A has 1 in use, B 2, C 0: C, then A and C tie at 1 (C picked) -> A, then C */
        greedy_expect(&fk, "GPU-A::1,GPU-A::2,GPU-A::3,GPU-B::2,GPU-B::3," C4, "", 3,
                      "GPU-C::0,GPU-A::1,GPU-C::1");
        /* one GPU left with room: it serves the whole request */
        greedy_expect(&fk, "GPU-C::1,GPU-C::2", "", 2, "GPU-C::1,GPU-C::2");
        fake_free(&fk);
}

static void test_replicas_packed(void **state)
{
        (void)state;
        struct fake fk;
        fake_replicas(&fk, 3, 4, KDEV_NVIDIA_SHARE_PACKED);
        greedy_expect(&fk, A4 "," B4 "," C4, "", 2, "GPU-A::0,GPU-A::1");
        greedy_expect(&fk, A4 "," B4 "," C4, "", 5,
                      "GPU-A::0,GPU-A::1,GPU-A::2,GPU-A::3,GPU-B::0");
        /* B has 2 in use, A 1: B first, then A */
        greedy_expect(&fk, "GPU-A::1,GPU-A::2,GPU-A::3,GPU-B::2,GPU-B::3," C4, "", 2,
                      "GPU-B::2,GPU-B::3");
        greedy_expect(&fk, "GPU-A::1,GPU-A::2,GPU-A::3,GPU-B::2,GPU-B::3," C4, "", 3,
                      "GPU-B::2,GPU-B::3,GPU-A::1");
        /* a must-include replica makes its GPU the fullest */
        greedy_expect(&fk, A4 "," B4 "," C4, "GPU-C::3", 3, "GPU-C::3,GPU-C::0,GPU-C::1");
        fake_free(&fk);
}

/* A hand-built resource holding replicas of GPU-A next to whole GPU-B and
 * GPU-C (no config makes one since review 4, F2): whole devices go first under
 * both policies, replicas only once they run out. */
static void test_whole_before_replicas(void **state)
{
        (void)state;
        static const enum kdev_nvidia_share_policy policies[] = {KDEV_NVIDIA_SHARE_DISTRIBUTED,
                                                                 KDEV_NVIDIA_SHARE_PACKED};
        for (size_t k = 0; k < 2; k++) {
                struct fake fk;
                fake_replicas(&fk, 1, 2, policies[k]); /* GPU-A::0, GPU-A::1 */
                kdev_nvidia_pref_free(fk.r.ops_data);
                struct kdev_device *nd = realloc(fk.r.devices, 4 * sizeof(*nd));
                assert_non_null(nd);
                fk.r.devices = nd;
                for (size_t d = 2; d < 4; d++) {
                        struct kdev_nvidia_devinfo *info = &fk.infos[d];
                        snprintf(info->uuid, sizeof(info->uuid), "GPU-%c", (char)('A' + d - 1));
                        snprintf(info->parent_uuid, sizeof(info->parent_uuid), "GPU-%c",
                                 (char)('A' + d - 1));
                        info->gi = info->ci = KDEV_NVIDIA_NO_INSTANCE;
                        info->replica = -1;
                        memset(&nd[d], 0, sizeof(nd[d]));
                        nd[d].id = strdup(info->uuid);
                        nd[d].healthy = true;
                        nd[d].numa_node = -1;
                        nd[d].data = info;
                }
                fk.r.n_devices = 4;
                struct kdev_nvidia_pref *p = NULL;
                assert_int_equal(kdev_nvidia_pref_new(NULL, &fk.r, policies[k], &p, NULL), 0);
                fk.r.ops_data = p;
                greedy_expect(&fk, "GPU-A::0,GPU-A::1,GPU-B,GPU-C", "", 1, "GPU-B");
                greedy_expect(&fk, "GPU-A::0,GPU-A::1,GPU-B,GPU-C", "", 2, "GPU-B,GPU-C");
                greedy_expect(&fk, "GPU-A::0,GPU-A::1,GPU-B,GPU-C", "GPU-A::1", 2,
                              "GPU-A::1,GPU-B");
                greedy_expect(&fk, "GPU-A::0,GPU-A::1,GPU-B,GPU-C", "", 3,
                              "GPU-B,GPU-C,GPU-A::0");
                greedy_expect(&fk, "GPU-A::0,GPU-A::1,GPU-C", "", 1, "GPU-C");
                fake_free(&fk);
        }
}

static void test_mig_policies(void **state)
{
        (void)state;
        struct fake fk;
        fake_migs(&fk, 2, 2, KDEV_NVIDIA_SHARE_DISTRIBUTED); /* MIG-0,1 on A; MIG-2,3 on B */
        greedy_expect(&fk, "MIG-0,MIG-1,MIG-2,MIG-3", "", 2, "MIG-0,MIG-2");
        greedy_expect(&fk, "MIG-1,MIG-2,MIG-3", "", 1, "MIG-2");
        greedy_expect(&fk, "MIG-0,MIG-1,MIG-2,MIG-3", "MIG-0", 2, "MIG-0,MIG-2");
        fake_free(&fk);
        fake_migs(&fk, 2, 2, KDEV_NVIDIA_SHARE_PACKED);
        greedy_expect(&fk, "MIG-0,MIG-1,MIG-2,MIG-3", "", 2, "MIG-0,MIG-1");
        greedy_expect(&fk, "MIG-0,MIG-2,MIG-3", "", 1, "MIG-0");
        greedy_expect(&fk, "MIG-0,MIG-1,MIG-2,MIG-3", "MIG-3", 2, "MIG-3,MIG-2");
        fake_free(&fk);
}

/* Through kdev_resource_preferred and the ops hook of a real NVIDIA
 * resource: size beyond what is available, permutation, whole GPUs next to
 * replicas (greedy), no pref attached (device order). */
static void test_hook_and_invariants(void **state)
{
        struct fx *f = *state;
        struct kdev_gpu_set *set = discover(f, TOPO("h200-nvl-4x-pcie-2numa.yaml"));
        struct kdev_resource_set rs = {0};
        struct kdev_nvidia_config cfg;
        struct kdev_err e;
        kdev_err_clear(&e);
        assert_int_equal(kdev_nvidia_config_init(&cfg, &e), 0);
        assert_int_equal(kdev_nvidia_config_finish(&cfg, false, &e), 0);
        assert_int_equal(kdev_nvidia_build(set, &cfg, NULL, &rs, &e), 0);
        kdev_nvidia_config_clear(&cfg);
        const struct kdev_resource *r = &rs.resources[0];
        const char *all[4];
        for (size_t i = 0; i < 4; i++)
                all[i] = r->devices[i].id;
        /* no pref attached yet: must-include, then device order */
        expect_pick(r, all, 4, &all[2], 1, 2, "2,0");
        assert_int_equal(kdev_nvidia_pref_attach(&rs, set, KDEV_NVIDIA_SHARE_DISTRIBUTED, &e), 0);
        expect_pick(r, all, 4, &all[2], 1, 2, "2,3");
        /* attaching again replaces the data */
        assert_int_equal(kdev_nvidia_pref_attach(&rs, set, KDEV_NVIDIA_SHARE_PACKED, &e), 0);
        const char *rev[4] = {all[3], all[2], all[1], all[0]};
        expect_pick(r, rev, 4, NULL, 0, 3, "0,1,2");
        expect_pick(r, all, 4, NULL, 0, 3, "0,1,2");
        /* repeated IDs count once; size above what is available: all */
        const char *dup[5] = {all[3], all[1], all[3], all[1], all[1]};
        expect_pick(r, dup, 5, NULL, 0, 4, "1,3");
        /* the validation of the model still applies */
        char **out = NULL;
        size_t n_out = 0;
        assert_int_equal(kdev_resource_preferred(r, &all[1], 3, &all[0], 1, 2, &out, &n_out, &e),
                         -EINVAL);
        assert_int_equal(kdev_resource_preferred(r, all, 4, all, 3, 2, &out, &n_out, &e),
                         -EINVAL);
        kdev_resource_set_clear(&rs);
        kdev_gpu_set_free(set);
}

int main(void)
{
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_link_score),
                cmocka_unit_test(test_best_set_random),
                cmocka_unit_test(test_best_set_16),
                cmocka_unit_test(test_best_set_errors),
                cmocka_unit_test(test_best_set_large),
                cmocka_unit_test_setup_teardown(test_every_topology, setup, teardown),
                cmocka_unit_test_setup_teardown(test_topology_exact, setup, teardown),
                cmocka_unit_test(test_replicas_distributed),
                cmocka_unit_test(test_replicas_packed),
                cmocka_unit_test(test_mig_policies),
                cmocka_unit_test(test_whole_before_replicas),
                cmocka_unit_test_setup_teardown(test_hook_and_invariants, setup, teardown),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
