/* GPU node labels (nvidia/labels.h): the exact label file of every shipped
 * mock topology under every applicable strategy (expected files in
 * tests/data/labels/<topology>-<strategy>.txt, reviewed against GFD's rules,
 * NVIDIA k8s-device-plugin internal/lm), the value rules one by one on
 * hand-made GPU sets, and the atomic writer.
 *
 * KDEV_LABELS_UPDATE=1 rewrites the expected files from the current output
 * (then review the diff by hand before keeping it). */
#define _XOPEN_SOURCE 700
#include <dirent.h>
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

#include "generic/generic.h"
#include "mock_fixture.h"
#include "nvidia/config.h"
#include "nvidia/labels.h"
#include "nvml/discover.h"

#include "nvidia_config_fixture.h"

#define DATA_DIR KDEV_SOURCE_DIR "/tests/data/labels"
#define MACHINE_TEXT "  NVIDIA DGX H100 (rev. 2)\n"
#define MACHINE_LABEL "NVIDIA-DGX-H100-rev.-2"

struct fx {
        struct mock_nvml m;
        char tmp[64];
        char sysfs[96], machine[96];
};

static int setup(void **state)
{
        struct fx *f = calloc(1, sizeof(*f));
        if (!f || mock_nvml_open(&f->m) != 0 ||
            mock_tmpdir(f->tmp, sizeof(f->tmp), "kdev-labels") != 0)
                return -1;
        snprintf(f->sysfs, sizeof(f->sysfs), "%s/sysfs", f->tmp);
        snprintf(f->machine, sizeof(f->machine), "%s/product_name", f->tmp);
        if (mkdir(f->sysfs, 0755) < 0)
                return -1;
        FILE *m = fopen(f->machine, "w");
        if (!m)
                return -1;
        fputs(MACHINE_TEXT, m);
        fclose(m);
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


/* A finished config from |yaml| (NULL: defaults), MIG strategy |mig|. */
static void config(struct kdev_nvidia_config *cfg, const char *yaml,
                   enum kdev_nvidia_mig_strategy mig)
{
        struct kdev_err e;
        kdev_err_clear(&e);
        assert_int_equal(kdev_nvidia_config_init(cfg, &e), 0);
        if (yaml) {
                if (parse_file(cfg, "labels.yaml", yaml, &e) != 0)
                        fail_msg("%s", e.msg);
        }
        cfg->mig_strategy = mig;
        if (kdev_nvidia_config_finish(cfg, yaml != NULL, &e) != 0)
                fail_msg("%s", e.msg);
}

static char *read_text(const char *path)
{
        FILE *f = fopen(path, "r");
        if (!f)
                return NULL;
        char *buf = NULL;
        size_t cap = 0, n = 0;
        for (;;) {
                if (n + 4096 + 1 > cap) {
                        cap = (n + 4096 + 1) * 2;
                        char *nb = realloc(buf, cap);
                        assert_non_null(nb);
                        buf = nb;
                }
                size_t got = fread(buf + n, 1, 4096, f);
                n += got;
                if (got == 0)
                        break;
        }
        fclose(f);
        buf[n] = '\0';
        return buf;
}

static void write_text(const char *path, const char *text)
{
        FILE *f = fopen(path, "w");
        assert_non_null(f);
        fputs(text, f);
        fclose(f);
}

/* --- every topology x strategy ----------------------------------------------- */

/* time-slicing of nvidia.com/gpu (4 replicas) and of two MIG profiles, one of
 * them present on each MIG topology (A100-40GB: 1g.5gb; 80 GB parts: 1g.10gb) */
static const char ts_yaml[] =
        "version: v1\n"
        "sharing:\n"
        "  timeSlicing:\n"
        "    resources:\n"
        "      - name: nvidia.com/gpu\n"
        "        replicas: 4\n"
        "      - name: nvidia.com/mig-1g.10gb\n"
        "        replicas: 2\n"
        "      - name: nvidia.com/mig-1g.5gb\n"
        "        replicas: 3\n";

/* the same with nvidia.com/gpu renamed (no -SHARED there); the MIG entries
 * keep their names (-SHARED) */
static const char ts_rename_yaml[] =
        "version: v1\n"
        "sharing:\n"
        "  timeSlicing:\n"
        "    resources:\n"
        "      - name: nvidia.com/gpu\n"
        "        rename: nvidia.com/gpu-shared\n"
        "        replicas: 4\n"
        "      - name: nvidia.com/mig-1g.10gb\n"
        "        replicas: 2\n"
        "      - name: nvidia.com/mig-1g.5gb\n"
        "        replicas: 3\n";

struct strategy {
        const char *name;
        enum kdev_nvidia_mig_strategy mig;
        const char *yaml;
        bool mig_enabled_only; /* only for topologies with MIG enabled somewhere */
};

static const struct strategy strategies[] = {
        {"none", KDEV_NVIDIA_MIG_NONE, NULL, false},
        {"single", KDEV_NVIDIA_MIG_SINGLE, NULL, false},
        {"mixed", KDEV_NVIDIA_MIG_MIXED, NULL, false},
        {"none-ts", KDEV_NVIDIA_MIG_NONE, ts_yaml, false},
        {"none-ts-rename", KDEV_NVIDIA_MIG_NONE, ts_rename_yaml, false},
        {"single-ts", KDEV_NVIDIA_MIG_SINGLE, ts_yaml, true},
        {"mixed-ts", KDEV_NVIDIA_MIG_MIXED, ts_yaml, true},
        {"mixed-ts-rename", KDEV_NVIDIA_MIG_MIXED, ts_rename_yaml, true},
};

static const char *const topologies[] = {
        "a100-sxm4-80gb-16x-2islands", "a100-sxm4-80gb-8x-nvswitch", "dgx-station-a100-display",
        "h100-80gb-8x-nvswitch",       "h200-nvl-4x-pcie-2numa",     "mig-a100-40gb",
        "mig-a100-80gb-single",        "mig-h100-80gb-8x-mixed",     "mig-h100-80gb",
        "mig-h200",
};

static bool any_mig_enabled(const struct kdev_gpu_set *set)
{
        for (size_t i = 0; i < set->n_gpus; i++) {
                if (set->gpus[i].mig_current == NVML_DEVICE_MIG_ENABLE)
                        return true;
        }
        return false;
}

/* The label text (no header) of |topo| under |s|; NULL when not applicable. */
static char *labels_of(struct fx *f, const char *topo, const struct strategy *s)
{
        char file[256];
        snprintf(file, sizeof(file), "%s/%s.yaml", KDEV_MOCK_NVML_TOPOLOGIES, topo);
        unsigned flags = s->mig == KDEV_NVIDIA_MIG_NONE ? KDEV_NVML_DISCOVER_NO_MIG : 0;
        struct kdev_gpu_set *set = mock_nvml_discover(&f->m, file, f->sysfs, flags);
        if (s->mig_enabled_only && !any_mig_enabled(set)) {
                kdev_gpu_set_free(set);
                return NULL;
        }
        struct kdev_nvidia_config cfg;
        config(&cfg, s->yaml, s->mig);
        struct kdev_nvidia_labels_options o = {.machine_type_file = f->machine,
                                               .sysfs_root = f->sysfs};
        struct kdev_nvidia_labels l;
        struct kdev_err e;
        kdev_err_clear(&e);
        if (kdev_nvidia_labels_build(set, &cfg, &o, &l, &e) != 0)
                fail_msg("%s %s: %s", topo, s->name, e.msg);
        char *text = kdev_nvidia_labels_text(&l, false);
        assert_non_null(text);
        kdev_nvidia_labels_clear(&l);
        kdev_nvidia_config_clear(&cfg);
        kdev_gpu_set_free(set);
        return text;
}

static void test_every_topology_and_strategy(void **state)
{
        struct fx *f = *state;
        bool update = getenv("KDEV_LABELS_UPDATE") && *getenv("KDEV_LABELS_UPDATE");
        size_t checked = 0, failed = 0;
        for (size_t t = 0; t < sizeof(topologies) / sizeof(topologies[0]); t++) {
                for (size_t k = 0; k < sizeof(strategies) / sizeof(strategies[0]); k++) {
                        char *got = labels_of(f, topologies[t], &strategies[k]);
                        char path[512];
                        snprintf(path, sizeof(path), "%s/%s-%s.txt", DATA_DIR, topologies[t],
                                 strategies[k].name);
                        if (!got) {
                                /* not applicable: no stale expected file either */
                                assert_int_equal(access(path, F_OK), -1);
                                continue;
                        }
                        if (update)
                                write_text(path, got);
                        char *want = read_text(path);
                        if (!want || strcmp(want, got) != 0) {
                                fprintf(stderr, "%s: %s\n--- got:\n%s", path,
                                        want ? "differs" : "missing", got);
                                failed++;
                        }
                        checked++;
                        free(want);
                        free(got);
                }
        }
        assert_int_equal(failed, 0);
        /* 10 topologies x 5, plus 3 for each of the 5 with MIG enabled */
        assert_int_equal(checked, 65);
        /* every expected file is used */
        DIR *d = opendir(DATA_DIR);
        assert_non_null(d);
        size_t files = 0;
        for (struct dirent *de; (de = readdir(d));)
                files += strstr(de->d_name, ".txt") != NULL;
        closedir(d);
        assert_int_equal(files, checked);
}

/* A few values checked by hand, independent of the expected files. */
static const char *get(const struct kdev_nvidia_labels *l, const char *key)
{
        const char *v = kdev_nvidia_labels_get(l, key);
        if (!v)
                fail_msg("no label %s", key);
        return v;
}

static void build_topo(struct fx *f, const char *topo, enum kdev_nvidia_mig_strategy mig,
                       const char *yaml, struct kdev_nvidia_labels *l)
{
        char file[256];
        snprintf(file, sizeof(file), "%s/%s.yaml", KDEV_MOCK_NVML_TOPOLOGIES, topo);
        struct kdev_gpu_set *set = mock_nvml_discover(
                &f->m, file, f->sysfs, mig == KDEV_NVIDIA_MIG_NONE ? KDEV_NVML_DISCOVER_NO_MIG : 0);
        struct kdev_nvidia_config cfg;
        config(&cfg, yaml, mig);
        struct kdev_nvidia_labels_options o = {.machine_type_file = f->machine,
                                               .sysfs_root = f->sysfs};
        struct kdev_err e;
        kdev_err_clear(&e);
        if (kdev_nvidia_labels_build(set, &cfg, &o, l, &e) != 0)
                fail_msg("%s", e.msg);
        kdev_nvidia_config_clear(&cfg);
        kdev_gpu_set_free(set);
}

/* kdev_nvidia_labels_file_text: the text kdev-plugin writes, with the
 * labels' count and the invalid-MIG mark, for an invalid single layout and
 * a plain one; kdev_nvidia_labels_invalid_mig does nothing unless single. */
static void file_text_of(struct fx *f, const char *topo, enum kdev_nvidia_mig_strategy mig,
                         bool want_invalid)
{
        char file[256];
        snprintf(file, sizeof(file), "%s/%s.yaml", KDEV_MOCK_NVML_TOPOLOGIES, topo);
        struct kdev_gpu_set *set = mock_nvml_discover(
                &f->m, file, f->sysfs, mig == KDEV_NVIDIA_MIG_NONE ? KDEV_NVML_DISCOVER_NO_MIG : 0);
        struct kdev_nvidia_config cfg;
        config(&cfg, NULL, mig);
        struct kdev_nvidia_labels_options o = {.machine_type_file = f->machine,
                                               .sysfs_root = f->sysfs};
        struct kdev_nvidia_labels l;
        struct kdev_err e = {0};
        assert_int_equal(kdev_nvidia_labels_build(set, &cfg, &o, &l, &e), 0);
        char *want = kdev_nvidia_labels_text(&l, true);
        char *text = NULL;
        size_t n = 0;
        bool invalid = !want_invalid;
        assert_int_equal(kdev_nvidia_labels_file_text(set, &cfg, &o, &text, &n, &invalid, &e), 0);
        assert_string_equal(text, want);
        assert_int_equal(n, l.n);
        assert_true(invalid == want_invalid);
        free(text);
        free(want);
        kdev_nvidia_labels_clear(&l);
        kdev_nvidia_config_clear(&cfg);
        kdev_gpu_set_free(set);
}

static void test_file_text(void **state)
{
        struct fx *f = *state;
        file_text_of(f, "mig-a100-40gb", KDEV_NVIDIA_MIG_SINGLE, true);
        file_text_of(f, "h100-80gb-8x-nvswitch", KDEV_NVIDIA_MIG_NONE, false);
        struct kdev_nvidia_config cfg;
        config(&cfg, NULL, KDEV_NVIDIA_MIG_NONE);
        char *text = (char *)"unset";
        size_t n = 7;
        struct kdev_err e = {0};
        assert_int_equal(kdev_nvidia_labels_invalid_mig(&cfg, NULL, &text, &n, &e), 0);
        assert_null(text);
        assert_int_equal(n, 0);
        kdev_nvidia_config_clear(&cfg);
}

static void test_h100_none_by_hand(void **state)
{
        struct fx *f = *state;
        struct kdev_nvidia_labels l;
        build_topo(f, "h100-80gb-8x-nvswitch", KDEV_NVIDIA_MIG_NONE, NULL, &l);
        assert_string_equal(get(&l, "nvidia.com/gpu.product"), "NVIDIA-H100-80GB-HBM3");
        assert_string_equal(get(&l, "nvidia.com/gpu.count"), "8");
        assert_string_equal(get(&l, "nvidia.com/gpu.replicas"), "1");
        assert_string_equal(get(&l, "nvidia.com/gpu.sharing-strategy"), "none");
        assert_string_equal(get(&l, "nvidia.com/gpu.memory"), "81559");
        assert_string_equal(get(&l, "nvidia.com/gpu.family"), "hopper");
        assert_string_equal(get(&l, "nvidia.com/gpu.compute.major"), "9");
        assert_string_equal(get(&l, "nvidia.com/gpu.compute.minor"), "0");
        assert_string_equal(get(&l, "nvidia.com/cuda.driver-version.full"), "550.90.07");
        assert_string_equal(get(&l, "nvidia.com/cuda.driver-version.major"), "550");
        assert_string_equal(get(&l, "nvidia.com/cuda.driver-version.minor"), "90");
        assert_string_equal(get(&l, "nvidia.com/cuda.driver-version.revision"), "07");
        assert_string_equal(get(&l, "nvidia.com/cuda.driver.rev"), "07");
        assert_string_equal(get(&l, "nvidia.com/cuda.runtime-version.full"), "12.4");
        assert_string_equal(get(&l, "nvidia.com/cuda.runtime.major"), "12");
        assert_string_equal(get(&l, "nvidia.com/gpu.machine"), MACHINE_LABEL);
        assert_string_equal(get(&l, "nvidia.com/gpu.mode"), "unknown"); /* no class files */
        assert_string_equal(get(&l, "nvidia.com/mig.capable"), "true");
        assert_string_equal(get(&l, "nvidia.com/mps.capable"), "false");
        assert_null(kdev_nvidia_labels_get(&l, "nvidia.com/mig.strategy"));
        assert_null(kdev_nvidia_labels_get(&l, "nvidia.com/gfd.timestamp"));
        for (size_t i = 1; i < l.n; i++)
                assert_true(strcmp(l.v[i - 1].key, l.v[i].key) < 0);
        kdev_nvidia_labels_clear(&l);
}

static void test_single_invalid_by_hand(void **state)
{
        struct fx *f = *state;
        struct kdev_nvidia_labels l;
        /* GPU 2 MIG-enabled with no MIG devices, GPU 3 MIG disabled */
        build_topo(f, "mig-a100-40gb", KDEV_NVIDIA_MIG_SINGLE, ts_yaml, &l);
        assert_string_equal(get(&l, "nvidia.com/gpu.product"), "NVIDIA-A100-SXM4-40GB-MIG-INVALID");
        assert_string_equal(get(&l, "nvidia.com/gpu.count"), "0");
        assert_string_equal(get(&l, "nvidia.com/gpu.replicas"), "0");
        assert_string_equal(get(&l, "nvidia.com/gpu.sharing-strategy"), "");
        assert_string_equal(get(&l, "nvidia.com/gpu.memory"), "0");
        assert_string_equal(get(&l, "nvidia.com/gpu.family"), "ampere");
        assert_string_equal(get(&l, "nvidia.com/mig.strategy"), "single");
        assert_null(kdev_nvidia_labels_get(&l, "nvidia.com/gpu.multiprocessors"));
        kdev_nvidia_labels_clear(&l);
}

static void test_mixed_profiles_by_hand(void **state)
{
        struct fx *f = *state;
        struct kdev_nvidia_labels l;
        build_topo(f, "mig-a100-40gb", KDEV_NVIDIA_MIG_MIXED, ts_yaml, &l);
        /* 1g.5gb+me: '+' becomes '.' in the resource name and the product */
        assert_string_equal(get(&l, "nvidia.com/mig-1g.5gb.me.product"),
                            "NVIDIA-A100-SXM4-40GB-MIG-1g.5gb.me");
        assert_string_equal(get(&l, "nvidia.com/mig-1g.5gb.me.count"), "1");
        assert_string_equal(get(&l, "nvidia.com/mig-1g.5gb.me.replicas"), "1");
        assert_string_equal(get(&l, "nvidia.com/mig-1g.5gb.me.engines.jpeg"), "1");
        /* 3 x 1g.5gb (2 on GPU 0, 1 on GPU 1), time-sliced x3, not renamed */
        assert_string_equal(get(&l, "nvidia.com/mig-1g.5gb.product"),
                            "NVIDIA-A100-SXM4-40GB-MIG-1g.5gb-SHARED");
        assert_string_equal(get(&l, "nvidia.com/mig-1g.5gb.count"), "3");
        assert_string_equal(get(&l, "nvidia.com/mig-1g.5gb.replicas"), "3");
        assert_string_equal(get(&l, "nvidia.com/mig-1g.5gb.sharing-strategy"), "time-slicing");
        assert_string_equal(get(&l, "nvidia.com/mig-1g.5gb.memory"), "4864");
        assert_string_equal(get(&l, "nvidia.com/mig-1g.5gb.multiprocessors"), "14");
        assert_string_equal(get(&l, "nvidia.com/mig-1g.5gb.slices.gi"), "1");
        assert_string_equal(get(&l, "nvidia.com/mig-1g.5gb.slices.ci"), "1");
        assert_string_equal(get(&l, "nvidia.com/mig-3g.20gb.slices.gi"), "3");
        /* whole GPUs: GPU 3 (MIG disabled) wins, time-sliced; count = all 4 */
        assert_string_equal(get(&l, "nvidia.com/gpu.product"), "NVIDIA-A100-SXM4-40GB-SHARED");
        assert_string_equal(get(&l, "nvidia.com/gpu.count"), "4");
        assert_string_equal(get(&l, "nvidia.com/gpu.replicas"), "4");
        kdev_nvidia_labels_clear(&l);
}

/* --- value rules on hand-made sets --------------------------------------------- */

static void fake_gpu(struct kdev_gpu *g, unsigned i, const char *name, int major, int minor,
                     bool mig_on)
{
        memset(g, 0, sizeof(*g));
        g->index = i;
        snprintf(g->uuid, sizeof(g->uuid), "GPU-%u", i);
        snprintf(g->name, sizeof(g->name), "%s", name);
        snprintf(g->sysfs_bus_id, sizeof(g->sysfs_bus_id), "0000:%02x:00.0", i + 1);
        g->memory_total = 24ull << 30;
        g->cc_major = major;
        g->cc_minor = minor;
        g->mig_mode_known = true;
        g->mig_capable = mig_on;
        g->mig_current = mig_on ? NVML_DEVICE_MIG_ENABLE : NVML_DEVICE_MIG_DISABLE;
}

static int build_set(const struct kdev_gpu_set *set, const char *yaml,
                     enum kdev_nvidia_mig_strategy mig, const struct kdev_nvidia_labels_options *o,
                     struct kdev_nvidia_labels *l, struct kdev_err *e)
{
        struct kdev_nvidia_config cfg;
        config(&cfg, yaml, mig);
        kdev_err_clear(e);
        int r = kdev_nvidia_labels_build(set, &cfg, o, l, e);
        kdev_nvidia_config_clear(&cfg);
        return r;
}

static void test_sanitise_family_and_heterogeneous(void **state)
{
        (void)state;
        struct kdev_gpu g[4];
        fake_gpu(&g[0], 0, "NVIDIA A100-SXM4-40GB", 8, 0, true); /* MIG on: loses */
        fake_gpu(&g[1], 1, "NVIDIA  GeForce RTX\xe2\x84\xa2 4090 (D)/x", 8, 9, false);
        fake_gpu(&g[2], 2, "Tesla V100", 7, 0, false);
        fake_gpu(&g[3], 3, "NVIDIA  GeForce RTX\xe2\x84\xa2 4090 (D)/x", 8, 9, false);
        g[3].memory_total = 0; /* unknown memory of a non-representative GPU */
        struct kdev_gpu_set set = {.driver_version = "535.54", .cuda_driver_version = 12020,
                                   .gpus = g, .n_gpus = 4};
        struct kdev_nvidia_labels_options o = {.machine_type_file = ""};
        struct kdev_nvidia_labels l;
        struct kdev_err e;
        assert_int_equal(build_set(&set, NULL, KDEV_NVIDIA_MIG_NONE, &o, &l, &e), 0);
        /* the first MIG-disabled GPU's model; count = GPUs of that model */
        assert_string_equal(get(&l, "nvidia.com/gpu.product"), "NVIDIA-GeForce-RTX-4090-Dx");
        assert_string_equal(get(&l, "nvidia.com/gpu.count"), "2");
        assert_string_equal(get(&l, "nvidia.com/gpu.memory"), "24576");
        assert_string_equal(get(&l, "nvidia.com/gpu.family"), "ada-lovelace");
        assert_string_equal(get(&l, "nvidia.com/gpu.compute.minor"), "9");
        assert_string_equal(get(&l, "nvidia.com/cuda.driver-version.revision"), "");
        assert_string_equal(get(&l, "nvidia.com/cuda.driver.rev"), "");
        assert_string_equal(get(&l, "nvidia.com/cuda.runtime-version.full"), "12.2");
        assert_string_equal(get(&l, "nvidia.com/gpu.machine"), "unknown");
        assert_string_equal(get(&l, "nvidia.com/mig.capable"), "true");
        kdev_nvidia_labels_clear(&l);

        /* only MIG-enabled GPUs: labelled without sharing */
        set.n_gpus = 1;
        assert_int_equal(build_set(&set, ts_yaml, KDEV_NVIDIA_MIG_NONE, &o, &l, &e), 0);
        assert_string_equal(get(&l, "nvidia.com/gpu.product"), "NVIDIA-A100-SXM4-40GB");
        assert_string_equal(get(&l, "nvidia.com/gpu.replicas"), "0");
        assert_string_equal(get(&l, "nvidia.com/gpu.sharing-strategy"), "none");
        kdev_nvidia_labels_clear(&l);

        /* family table and no arch labels for compute capability 0 */
        static const struct {
                int major, minor;
                const char *family;
        } fam[] = {{1, 3, "tesla"},  {2, 1, "fermi"},      {3, 7, "kepler"},  {5, 2, "maxwell"},
                   {6, 1, "pascal"}, {7, 2, "volta"},      {7, 5, "turing"},  {8, 6, "ampere"},
                   {9, 0, "hopper"}, {10, 0, "blackwell"}, {12, 0, "blackwell"}, {13, 0, "rubin"},
                   {11, 0, "undefined"}, {4, 0, "undefined"}};
        for (size_t i = 0; i < sizeof(fam) / sizeof(fam[0]); i++) {
                fake_gpu(&g[0], 0, "X", fam[i].major, fam[i].minor, false);
                assert_int_equal(build_set(&set, NULL, KDEV_NVIDIA_MIG_NONE, &o, &l, &e), 0);
                assert_string_equal(get(&l, "nvidia.com/gpu.family"), fam[i].family);
                kdev_nvidia_labels_clear(&l);
        }
        fake_gpu(&g[0], 0, "X", 0, 0, false);
        assert_int_equal(build_set(&set, NULL, KDEV_NVIDIA_MIG_NONE, &o, &l, &e), 0);
        assert_null(kdev_nvidia_labels_get(&l, "nvidia.com/gpu.family"));
        assert_null(kdev_nvidia_labels_get(&l, "nvidia.com/gpu.compute.major"));
        assert_string_equal(get(&l, "nvidia.com/mig.capable"), "false");
        kdev_nvidia_labels_clear(&l);
}

static void test_versions(void **state)
{
        (void)state;
        struct kdev_gpu g;
        fake_gpu(&g, 0, "X", 9, 0, false);
        struct kdev_gpu_set set = {.driver_version = "550", .cuda_driver_version = 0, .gpus = &g,
                                   .n_gpus = 1};
        struct kdev_nvidia_labels l;
        struct kdev_err e;
        assert_int_equal(build_set(&set, NULL, KDEV_NVIDIA_MIG_NONE, NULL, &l, &e), -EINVAL);
        assert_string_equal(e.msg, "error getting driver version: Version \"550\" does not match "
                                   "format \"X.Y[.Z]\"");
        kdev_nvidia_labels_clear(&l);
        snprintf(set.driver_version, sizeof(set.driver_version), "550.1.2.3");
        assert_int_equal(build_set(&set, NULL, KDEV_NVIDIA_MIG_NONE, NULL, &l, &e), -EINVAL);
        kdev_nvidia_labels_clear(&l);
        /* unknown CUDA version: runtime labels left out */
        snprintf(set.driver_version, sizeof(set.driver_version), "570.86.15");
        assert_int_equal(build_set(&set, NULL, KDEV_NVIDIA_MIG_NONE, NULL, &l, &e), 0);
        assert_null(kdev_nvidia_labels_get(&l, "nvidia.com/cuda.runtime-version.full"));
        assert_null(kdev_nvidia_labels_get(&l, "nvidia.com/cuda.runtime.major"));
        assert_string_equal(get(&l, "nvidia.com/cuda.driver-version.revision"), "15");
        kdev_nvidia_labels_clear(&l);
        /* 12090 -> 12.9; 11080 -> 11.8 */
        set.cuda_driver_version = 11080;
        assert_int_equal(build_set(&set, NULL, KDEV_NVIDIA_MIG_NONE, NULL, &l, &e), 0);
        assert_string_equal(get(&l, "nvidia.com/cuda.runtime-version.full"), "11.8");
        assert_string_equal(get(&l, "nvidia.com/cuda.runtime-version.minor"), "8");
        kdev_nvidia_labels_clear(&l);
}

static void test_rename_by_default_and_no_gpus(void **state)
{
        (void)state;
        struct kdev_gpu g;
        fake_gpu(&g, 0, "NVIDIA L4", 8, 9, false);
        struct kdev_gpu_set set = {.driver_version = "550.90.07", .cuda_driver_version = 12040,
                                   .gpus = &g, .n_gpus = 1};
        static const char yaml[] = "version: v1\n"
                                   "sharing:\n"
                                   "  timeSlicing:\n"
                                   "    renameByDefault: true\n"
                                   "    resources:\n"
                                   "      - name: gpu\n"
                                   "        replicas: 10\n";
        struct kdev_nvidia_labels l;
        struct kdev_err e;
        assert_int_equal(build_set(&set, yaml, KDEV_NVIDIA_MIG_NONE, NULL, &l, &e), 0);
        assert_string_equal(get(&l, "nvidia.com/gpu.product"), "NVIDIA-L4");
        assert_string_equal(get(&l, "nvidia.com/gpu.replicas"), "10");
        assert_string_equal(get(&l, "nvidia.com/gpu.sharing-strategy"), "time-slicing");
        assert_string_equal(get(&l, "nvidia.com/mps.capable"), "false");
        kdev_nvidia_labels_clear(&l);

        /* sharing.mps (winning over timeSlicing): strategy mps, mps.capable */
        static const char mps[] = "version: v1\n"
                                  "flags:\n  mpsRoot: /run/nvidia/mps\n"
                                  "sharing:\n"
                                  "  timeSlicing:\n"
                                  "    resources: [{name: gpu, replicas: 3}]\n"
                                  "  mps:\n"
                                  "    resources: [{name: gpu, replicas: 4}]\n";
        assert_int_equal(build_set(&set, mps, KDEV_NVIDIA_MIG_NONE, NULL, &l, &e), 0);
        assert_string_equal(get(&l, "nvidia.com/gpu.product"), "NVIDIA-L4-SHARED");
        assert_string_equal(get(&l, "nvidia.com/gpu.replicas"), "4");
        assert_string_equal(get(&l, "nvidia.com/gpu.sharing-strategy"), "mps");
        assert_string_equal(get(&l, "nvidia.com/mps.capable"), "true");
        kdev_nvidia_labels_clear(&l);

        /* no GPUs (or only nameless ones): no labels, the file holds the header */
        g.name[0] = '\0';
        assert_int_equal(build_set(&set, NULL, KDEV_NVIDIA_MIG_NONE, NULL, &l, &e), 0);
        assert_int_equal(l.n, 0);
        char *text = kdev_nvidia_labels_text(&l, true);
        assert_string_equal(text, KDEV_NVIDIA_LABELS_HEADER);
        free(text);
        kdev_nvidia_labels_clear(&l);
        assert_int_equal(build_set(NULL, NULL, KDEV_NVIDIA_MIG_NONE, NULL, &l, &e), 0);
        assert_int_equal(l.n, 0);
        kdev_nvidia_labels_clear(&l);
}

static void put_class(const char *sysfs, const struct kdev_gpu *g, const char *cls)
{
        char p[512];
        snprintf(p, sizeof(p), "%s/bus", sysfs);
        mkdir(p, 0755);
        snprintf(p, sizeof(p), "%s/bus/pci", sysfs);
        mkdir(p, 0755);
        snprintf(p, sizeof(p), "%s/bus/pci/devices", sysfs);
        mkdir(p, 0755);
        snprintf(p, sizeof(p), "%s/bus/pci/devices/%s", sysfs, g->sysfs_bus_id);
        mkdir(p, 0755);
        snprintf(p, sizeof(p), "%s/bus/pci/devices/%s/class", sysfs, g->sysfs_bus_id);
        write_text(p, cls);
}

static void test_gpu_mode_and_machine(void **state)
{
        struct fx *f = *state;
        struct kdev_gpu g[2];
        fake_gpu(&g[0], 0, "X", 9, 0, false);
        fake_gpu(&g[1], 1, "X", 9, 0, false);
        struct kdev_gpu_set set = {.driver_version = "550.90.07", .cuda_driver_version = 12040,
                                   .gpus = g, .n_gpus = 2};
        char sysfs[128];
        snprintf(sysfs, sizeof(sysfs), "%s/mode-sysfs", f->tmp);
        assert_int_equal(mkdir(sysfs, 0755), 0);
        struct kdev_nvidia_labels_options o = {.machine_type_file = f->machine,
                                               .sysfs_root = sysfs};
        static const struct {
                const char *c0, *c1, *mode;
        } cases[] = {
                {"0x030200\n", "0x030200\n", "compute"},
                {"0x030000\n", "0x030000\n", "graphics"},
                {"0x030000\n", "0x030200\n", "unknown"}, /* mixed */
                {"0x038000\n", "0x038000\n", "unknown"}, /* other display class */
                {"0x030200\n", NULL, "unknown"},         /* unreadable */
        };
        struct kdev_nvidia_labels l;
        struct kdev_err e;
        for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
                put_class(sysfs, &g[0], cases[i].c0);
                char p[512];
                snprintf(p, sizeof(p), "%s/bus/pci/devices/%s/class", sysfs, g[1].sysfs_bus_id);
                if (cases[i].c1)
                        put_class(sysfs, &g[1], cases[i].c1);
                else
                        unlink(p);
                assert_int_equal(build_set(&set, NULL, KDEV_NVIDIA_MIG_NONE, &o, &l, &e), 0);
                assert_string_equal(get(&l, "nvidia.com/gpu.mode"), cases[i].mode);
                assert_string_equal(get(&l, "nvidia.com/gpu.machine"), MACHINE_LABEL);
                kdev_nvidia_labels_clear(&l);
        }
        /* machine type file missing: "unknown", as GFD */
        char missing[160];
        snprintf(missing, sizeof(missing), "%s/no-such-file", f->tmp);
        o.machine_type_file = missing;
        assert_int_equal(build_set(&set, NULL, KDEV_NVIDIA_MIG_NONE, &o, &l, &e), 0);
        assert_string_equal(get(&l, "nvidia.com/gpu.machine"), "unknown");
        kdev_nvidia_labels_clear(&l);
}

/* --- the writer ------------------------------------------------------------------ */

static size_t count_entries(const char *dir)
{
        DIR *d = opendir(dir);
        assert_non_null(d);
        size_t n = 0;
        for (struct dirent *de; (de = readdir(d));)
                n += strcmp(de->d_name, ".") != 0 && strcmp(de->d_name, "..") != 0;
        closedir(d);
        return n;
}

static void test_writer(void **state)
{
        struct fx *f = *state;
        char dir[128], path[192];
        snprintf(dir, sizeof(dir), "%s/features.d", f->tmp);
        assert_int_equal(mkdir(dir, 0755), 0);
        snprintf(path, sizeof(path), "%s/kdev", dir);
        struct kdev_err e;
        kdev_err_clear(&e);
        mode_t old = umask(077);
        assert_int_equal(kdev_nvidia_labels_write(path, "# h\na=1\n", &e), 1);
        umask(old);
        char *text = read_text(path);
        assert_string_equal(text, "# h\na=1\n");
        free(text);
        struct stat st1, st2;
        assert_int_equal(stat(path, &st1), 0);
        assert_int_equal(st1.st_mode & 0777, 0644);
        /* unchanged: not written (same inode, same mtime) */
        assert_int_equal(kdev_nvidia_labels_write(path, "# h\na=1\n", &e), 0);
        assert_int_equal(stat(path, &st2), 0);
        assert_true(st1.st_ino == st2.st_ino);
        /* a prefix or a longer text is a change; replaced by rename (new inode) */
        assert_int_equal(kdev_nvidia_labels_write(path, "# h\na=1\nb=2\n", &e), 1);
        assert_int_equal(stat(path, &st2), 0);
        assert_true(st1.st_ino != st2.st_ino);
        assert_int_equal(kdev_nvidia_labels_write(path, "# h\n", &e), 1);
        text = read_text(path);
        assert_string_equal(text, "# h\n");
        free(text);
        /* no temporary file left behind */
        assert_int_equal(count_entries(dir), 1);
        /* a missing directory: an error naming the path and its directory
         * (never the temporary file), nothing left */
        char bad[256], want[512];
        snprintf(bad, sizeof(bad), "%s/missing/kdev", f->tmp);
        assert_int_equal(kdev_nvidia_labels_write(bad, "x=1\n", &e), -ENOENT);
        snprintf(want, sizeof(want), "%s/missing/kdev: cannot create a file in directory "
                 "%s/missing: No such file or directory", f->tmp, f->tmp);
        assert_string_equal(e.msg, want);
        /* a "directory" that is a file (also fails as root, unlike mode 0555) */
        snprintf(bad, sizeof(bad), "%s/kdev/x", dir);
        assert_int_equal(kdev_nvidia_labels_write(bad, "x=1\n", &e), -ENOTDIR);
        snprintf(want, sizeof(want), "%s/kdev/x: cannot create a file in directory %s/kdev: "
                 "Not a directory", dir, dir);
        assert_string_equal(e.msg, want);
        /* the path is a directory: the rename fails, naming the path */
        snprintf(bad, sizeof(bad), "%s/sub", dir);
        assert_int_equal(mkdir(bad, 0755), 0);
        assert_int_equal(kdev_nvidia_labels_write(bad, "x=1\n", &e), -EISDIR);
        snprintf(want, sizeof(want), "%s/sub: Is a directory", dir);
        assert_string_equal(e.msg, want);
        assert_int_equal(rmdir(bad), 0);
        assert_int_equal(count_entries(dir), 1); /* the temporary file removed */
        assert_int_equal(kdev_nvidia_labels_write("", "x=1\n", &e), -EINVAL);
        /* a relative path in the current directory */
        char cwd[512];
        assert_non_null(getcwd(cwd, sizeof(cwd)));
        assert_int_equal(chdir(dir), 0);
        assert_int_equal(kdev_nvidia_labels_write("rel", "r=1\n", &e), 1);
        assert_int_equal(chdir(cwd), 0);
        assert_int_equal(count_entries(dir), 2);
}

int main(void)
{
        const struct CMUnitTest tests[] = {
                cmocka_unit_test_setup_teardown(test_every_topology_and_strategy, setup, teardown),
                cmocka_unit_test_setup_teardown(test_h100_none_by_hand, setup, teardown),
                cmocka_unit_test_setup_teardown(test_single_invalid_by_hand, setup, teardown),
                cmocka_unit_test_setup_teardown(test_mixed_profiles_by_hand, setup, teardown),
                cmocka_unit_test(test_sanitise_family_and_heterogeneous),
                cmocka_unit_test(test_versions),
                cmocka_unit_test(test_rename_by_default_and_no_gpus),
                cmocka_unit_test_setup_teardown(test_gpu_mode_and_machine, setup, teardown),
                cmocka_unit_test_setup_teardown(test_writer, setup, teardown),
                cmocka_unit_test_setup_teardown(test_file_text, setup, teardown),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
