/* MIG strategies (NVIDIA internal/rm/device_map.go, go-nvlib mig_profile.go):
 * profile names computed from NVML numbers for A100-40GB, A100-80GB,
 * H100-80GB and H200-141GB (from NVIDIA's MIG User Guide / `nvidia-smi mig -lgip` numbers and from
 * the mock topologies), the mixed and single resources with their exact IDs
 * and devinfo, every validation error with its exact text, the mig-minors
 * capability nodes, the Allocate payload of MIG devices and their CDI
 * devices. */
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

#include "common/resource_name.h"
#include "mock_fixture.h"
#include "nvidia/cdi_spec.h"
#include "nvidia/config.h"
#include "nvidia/mig.h"
#include "nvidia/resources.h"
#include "nvml/discover.h"
#include "nvml/loader.h"
#include "plugin/allocate.h"

#define MIB (1024ULL * 1024ULL)

/* --- profile names from NVIDIA's published numbers ------------------------------ */

struct name_case {
        unsigned long long parent_mib; /* nvmlMemory_t.total / 2^20 */
        unsigned gi_index;             /* NVML_GPU_INSTANCE_PROFILE_* */
        unsigned ci_index;             /* NVML_COMPUTE_INSTANCE_PROFILE_* */
        unsigned long long mig_mib;
        const char *profile;
        const char *resource; /* mixed resource name, or NULL when C != G */
};

static const struct name_case reference_names[] = {
        /* A100-SXM4-40GB / A100-PCIE-40GB, 40960 MiB */
        {40960, 0x0, 0, 4864, "1g.5gb", "nvidia.com/mig-1g.5gb"},
        {40960, 0x7, 0, 4864, "1g.5gb+me", "nvidia.com/mig-1g.5gb.me"},
        {40960, 0x9, 0, 9856, "1g.10gb", "nvidia.com/mig-1g.10gb"},
        {40960, 0x1, 1, 9856, "2g.10gb", "nvidia.com/mig-2g.10gb"},
        {40960, 0x2, 2, 19968, "3g.20gb", "nvidia.com/mig-3g.20gb"},
        {40960, 0x3, 3, 19968, "4g.20gb", "nvidia.com/mig-4g.20gb"},
        {40960, 0x4, 4, 40192, "7g.40gb", "nvidia.com/mig-7g.40gb"},
        /* the same names with the 40536 MiB total some boards report */
        {40536, 0x0, 0, 4864, "1g.5gb", "nvidia.com/mig-1g.5gb"},
        {40536, 0x7, 0, 4864, "1g.5gb+me", "nvidia.com/mig-1g.5gb.me"},
        {40536, 0x9, 0, 9856, "1g.10gb", "nvidia.com/mig-1g.10gb"},
        {40536, 0x1, 1, 9856, "2g.10gb", "nvidia.com/mig-2g.10gb"},
        {40536, 0x2, 2, 19968, "3g.20gb", "nvidia.com/mig-3g.20gb"},
        {40536, 0x3, 3, 19968, "4g.20gb", "nvidia.com/mig-4g.20gb"},
        {40536, 0x4, 4, 40192, "7g.40gb", "nvidia.com/mig-7g.40gb"},
        /* A100-SXM4-80GB / A100 80GB PCIe, 81920 MiB */
        {81920, 0x0, 0, 9856, "1g.10gb", "nvidia.com/mig-1g.10gb"},
        {81920, 0x7, 0, 9856, "1g.10gb+me", "nvidia.com/mig-1g.10gb.me"},
        {81920, 0x9, 0, 19968, "1g.20gb", "nvidia.com/mig-1g.20gb"},
        {81920, 0x1, 1, 19968, "2g.20gb", "nvidia.com/mig-2g.20gb"},
        {81920, 0x2, 2, 40192, "3g.40gb", "nvidia.com/mig-3g.40gb"},
        {81920, 0x3, 3, 40192, "4g.40gb", "nvidia.com/mig-4g.40gb"},
        {81920, 0x4, 4, 80384, "7g.80gb", "nvidia.com/mig-7g.80gb"},
        /* H100 80GB HBM3, 81559 MiB; 1g.20gb/2g.20gb: anything in 20091..20101 */
        {81559, 0x0, 0, 9984, "1g.10gb", "nvidia.com/mig-1g.10gb"},
        {81559, 0x7, 0, 9984, "1g.10gb+me", "nvidia.com/mig-1g.10gb.me"},
        {81559, 0x9, 0, 20091, "1g.20gb", "nvidia.com/mig-1g.20gb"},
        {81559, 0x9, 0, 20096, "1g.20gb", "nvidia.com/mig-1g.20gb"},
        {81559, 0x9, 0, 20101, "1g.20gb", "nvidia.com/mig-1g.20gb"},
        {81559, 0x1, 1, 20096, "2g.20gb", "nvidia.com/mig-2g.20gb"},
        {81559, 0x2, 2, 40448, "3g.40gb", "nvidia.com/mig-3g.40gb"},
        {81559, 0x3, 3, 40448, "4g.40gb", "nvidia.com/mig-4g.40gb"},
        {81559, 0x4, 4, 81152, "7g.80gb", "nvidia.com/mig-7g.80gb"},
        /* H200 141GB, 143771 MiB (3g: 70.5 rounds half away from zero to 71) */
        {143771, 0x0, 0, 16384, "1g.18gb", "nvidia.com/mig-1g.18gb"},
        {143771, 0x7, 0, 16384, "1g.18gb+me", "nvidia.com/mig-1g.18gb.me"},
        {143771, 0x9, 0, 33024, "1g.35gb", "nvidia.com/mig-1g.35gb"},
        {143771, 0x1, 1, 33024, "2g.35gb", "nvidia.com/mig-2g.35gb"},
        {143771, 0x2, 2, 71168, "3g.71gb", "nvidia.com/mig-3g.71gb"},
        {143771, 0x3, 3, 71168, "4g.71gb", "nvidia.com/mig-4g.71gb"},
        {143771, 0x4, 4, 143104, "7g.141gb", "nvidia.com/mig-7g.141gb"},
        /* compute instances smaller than their GPU instance: <C>c.<G>g.<GB>gb */
        {40960, 0x2, 0, 19968, "1c.3g.20gb", NULL},
        {40960, 0x2, 1, 19968, "2c.3g.20gb", NULL},
        {40960, 0x4, 3, 40192, "4c.7g.40gb", NULL},
        {143771, 0x4, 0, 143104, "1c.7g.141gb", NULL},
        {81920, 0x1, 7, 19968, "1c.2g.20gb", NULL},  /* CI 1_SLICE_REV1: C = 1 */
        {81559, 0x4, 8, 81152, "7g.80gb", "nvidia.com/mig-7g.80gb"}, /* CI 7_SLICE_NVL */
        /* the other suffixes (a 192 GiB parent, 1g = 24064 MiB) */
        {196608, 0xF, 0, 24064, "1g.24gb+me.all", "nvidia.com/mig-1g.24gb.me.all"},
        {196608, 0xD, 0, 24064, "1g.24gb-me", "nvidia.com/mig-1g.24gb-me"},
        {196608, 0xA, 0, 24064, "1g.24gb+gfx", "nvidia.com/mig-1g.24gb.gfx"},
        {196608, 0x8, 1, 48128, "2g.48gb+me", "nvidia.com/mig-2g.48gb.me"},
        {196608, 0x10, 1, 48128, "2g.48gb+me.all", "nvidia.com/mig-2g.48gb.me.all"},
        {196608, 0xE, 1, 48128, "2g.48gb-me", "nvidia.com/mig-2g.48gb-me"},
        {196608, 0xB, 1, 48128, "2g.48gb+gfx", "nvidia.com/mig-2g.48gb.gfx"},
        {196608, 0xC, 3, 96256, "4g.96gb+gfx", "nvidia.com/mig-4g.96gb.gfx"},
        {196608, 0x6, 6, 144384, "6g.144gb", "nvidia.com/mig-6g.144gb"},
        {196608, 0x5, 5, 196608, "8g.192gb", "nvidia.com/mig-8g.192gb"},
        {196608, 0xF, 0, 24064, "1g.24gb+me.all", "nvidia.com/mig-1g.24gb.me.all"},
};

static void test_reference_names(void **state)
{
        (void)state;
        for (size_t i = 0; i < sizeof(reference_names) / sizeof(reference_names[0]); i++) {
                const struct name_case *c = &reference_names[i];
                char name[KDEV_NVIDIA_MIG_PROFILE_MAX], res[96];
                struct kdev_err e;
                kdev_err_clear(&e);
                int n = kdev_nvidia_mig_profile_name(c->gi_index, c->ci_index, c->mig_mib,
                                                     c->parent_mib * MIB, name, sizeof(name), &e);
                if (n < 0)
                        fail_msg("case %zu: %s", i, e.msg);
                if (strcmp(name, c->profile) != 0)
                        fail_msg("case %zu: %s, want %s", i, name, c->profile);
                assert_int_equal(n, (int)strlen(c->profile));
                if (c->resource) {
                        assert_int_equal(kdev_nvidia_mig_resource_name(name, res, sizeof(res)),
                                         (int)strlen(c->resource));
                        assert_string_equal(res, c->resource);
                }
        }
}

static void test_name_rules(void **state)
{
        (void)state;
        /* the memory rule itself */
        assert_int_equal(kdev_nvidia_mig_memory_gb(71168, 143771 * MIB), 71);   /* 70.5 up */
        assert_int_equal(kdev_nvidia_mig_memory_gb(4864, 40960 * MIB), 5);
        assert_int_equal(kdev_nvidia_mig_memory_gb(1, 40960 * MIB), 5);         /* one eighth */
        assert_int_equal(kdev_nvidia_mig_memory_gb(5121, 40960 * MIB), 10);     /* > 1/8 */
        assert_int_equal(kdev_nvidia_mig_memory_gb(5120, 40960 * MIB), 5);      /* = 1/8 */
        assert_int_equal(kdev_nvidia_mig_memory_gb(0, 40960 * MIB), 0);
        assert_int_equal(kdev_nvidia_mig_memory_gb(4864, 0), 0);
        /* go-nvml's idealised H200 mock numbers give the wrong names */
        char name[KDEV_NVIDIA_MIG_PROFILE_MAX];
        struct kdev_err e;
        assert_int_equal(kdev_nvidia_mig_profile_name(0, 0, 18432, 144384 * MIB, name,
                                                      sizeof(name), &e),
                         7);
        assert_string_equal(name, "1g.35gb");
        /* slice counts */
        assert_int_equal(kdev_nvidia_mig_gi_slices(0x11), 0);
        assert_int_equal(kdev_nvidia_mig_gi_slices(0x9), 1);
        assert_int_equal(kdev_nvidia_mig_gi_slices(0xC), 4);
        assert_int_equal(kdev_nvidia_mig_ci_slices(0x8), 7);
        assert_int_equal(kdev_nvidia_mig_ci_slices(0x9), 0);
        /* errors */
        assert_int_equal(kdev_nvidia_mig_profile_name(0x11, 0, 4864, 40960 * MIB, name,
                                                      sizeof(name), &e),
                         -EINVAL);
        assert_string_equal(e.msg, "unknown GPU instance profile index 0x11");
        assert_int_equal(kdev_nvidia_mig_profile_name(0, 9, 4864, 40960 * MIB, name,
                                                      sizeof(name), &e),
                         -EINVAL);
        assert_string_equal(e.msg, "unknown compute instance profile index 0x9");
        assert_int_equal(kdev_nvidia_mig_profile_name(0, 0, 4864, 0, name, sizeof(name), &e),
                         -EINVAL);
        assert_string_equal(e.msg, "parent GPU memory size is 0");
        assert_int_equal(kdev_nvidia_mig_profile_name(0, 0, 4864, 40960 * MIB, name, 6, &e),
                         -ENOBUFS);
        char res[20];
        assert_int_equal(kdev_nvidia_mig_resource_name("1g.5gb+me", res, sizeof(res)), -ENOBUFS);
}

/* --- fixture: the mock through the real loader ------------------------------------- */

struct fx {
        struct mock_nvml m;
        char tmp[64];
        char sysfs[96], root[96], proc[96], cdi[96];
};

static void write_file(const char *path, const char *text)
{
        FILE *f = fopen(path, "w");
        assert_non_null(f);
        fputs(text, f);
        fclose(f);
}

static int setup(void **state)
{
        struct fx *f = calloc(1, sizeof(*f));
        if (mock_nvml_open(&f->m) != 0 || mock_tmpdir(f->tmp, sizeof(f->tmp), "kdev-mig") != 0)
                return -1;
        snprintf(f->sysfs, sizeof(f->sysfs), "%s/sysfs", f->tmp);
        snprintf(f->root, sizeof(f->root), "%s/root", f->tmp);
        snprintf(f->proc, sizeof(f->proc), "%s/proc", f->tmp);
        snprintf(f->cdi, sizeof(f->cdi), "%s/cdi", f->tmp);
        char dev[128];
        snprintf(dev, sizeof(dev), "%s/dev", f->root);
        if (mkdir(f->sysfs, 0755) < 0 || mkdir(f->root, 0755) < 0 || mkdir(dev, 0755) < 0 ||
            mkdir(f->proc, 0755) < 0)
                return -1;
        mock_touch(dev, "nvidiactl");
        mock_touch(dev, "nvidia-uvm");
        *state = f;
        return 0;
}

static int teardown(void **state)
{
        struct fx *f = *state;
        mock_rmtree(f->tmp);
        mock_nvml_close(&f->m);
        unsetenv("KDEV_MOCK_NVML_TOPOLOGY");
        free(f);
        return 0;
}

/* Loads topology |file| into the mock (and writes its fake sysfs and /proc). */
static void load(struct fx *f, const char *file)
{
        mock_nvml_load(&f->m, file, f->sysfs);
        assert_int_equal(f->m.write_proc(f->proc), NVML_SUCCESS);
}

static struct kdev_gpu_set *discover_loaded(struct fx *f)
{
        return mock_nvml_discover_loaded(&f->m, f->sysfs, 0, NULL);
}

static struct kdev_gpu_set *discover(struct fx *f, const char *file)
{
        load(f, file);
        return discover_loaded(f);
}

static void config(struct kdev_nvidia_config *cfg, struct fx *f,
                   enum kdev_nvidia_mig_strategy strategy, unsigned lists,
                   enum kdev_nvidia_id_strategy id, bool specs)
{
        struct kdev_err e;
        assert_int_equal(kdev_nvidia_config_init(cfg, &e), 0);
        cfg->mig_strategy = strategy;
        cfg->device_list_strategies = lists;
        cfg->id_strategy = id;
        cfg->pass_device_specs = specs;
        free(cfg->dev_root);
        cfg->dev_root = strdup(f->root);
        free(cfg->proc_root);
        cfg->proc_root = strdup(f->proc);
        free(cfg->cdi_dir);
        cfg->cdi_dir = strdup(f->cdi);
        assert_int_equal(kdev_nvidia_config_finish(cfg, false, &e), 0);
}

static int try_build(const struct kdev_gpu_set *set, const struct kdev_nvidia_config *cfg,
                     struct kdev_resource_set *rs, struct mock_warns *w, struct kdev_err *e)
{
        struct kdev_nvidia_build_options o = {.warn = mock_collect, .warn_arg = w};
        kdev_err_clear(e);
        return kdev_nvidia_build(set, cfg, &o, rs, e);
}

/* --- mixed and single: exact resources ---------------------------------------------- */

struct exp_dev {
        const char *id;
        const char *parent; /* NULL: a whole GPU (parent = id) */
        const char *index;
        unsigned minor, gi, ci, gi_cap, ci_cap;
        int numa;
};

struct exp_res {
        const char *name;
        size_t n;
        struct exp_dev d[14];
};

#define A40_0 "GPU-c1ae70ed-64b5-7842-b2ed-e9039613ae69"
#define A40_1 "GPU-4603f764-b00c-271e-0980-eda368e40931"
#define A40_3 "GPU-49c5ccb8-7f8c-230b-4fe7-33825480cfa5"
#define NOI KDEV_NVIDIA_NO_INSTANCE

static const struct exp_res mixed_a100_40gb[] = {
        {"nvidia.com/gpu", 1, {{A40_3, NULL, "3", 3, NOI, NOI, 0, 0, 1}}},
        {"nvidia.com/mig-3g.20gb", 1,
         {{"MIG-59bcc04e-5cf6-b753-ab18-f13e8543556f", A40_0, "0:0", 0, 2, 0, 21, 22, 0}}},
        {"nvidia.com/mig-2g.10gb", 1,
         {{"MIG-9d0efe1e-fdc2-4aea-57e7-810aa03ca6ce", A40_0, "0:1", 0, 3, 0, 30, 31, 0}}},
        {"nvidia.com/mig-1g.5gb", 3,
         {{"MIG-d49257bf-597e-857d-3bb4-e6384c9909cc", A40_0, "0:2", 0, 9, 0, 84, 85, 0},
          {"MIG-cc362666-f6d1-a63a-ddd2-38044c0c64a2", A40_0, "0:3", 0, 10, 0, 93, 94, 0},
          {"MIG-f77e8b45-cbe6-cf64-aa48-e4cad680f3d8", A40_1, "1:3", 1, 13, 0, 255, 256, 0}}},
        {"nvidia.com/mig-1g.5gb.me", 1,
         {{"MIG-fa0a443e-a85c-8cba-33fa-10b94f0ea046", A40_1, "1:0", 1, 7, 0, 201, 202, 0}}},
        {"nvidia.com/mig-1g.10gb", 2,
         {{"MIG-13018ca6-7bdc-00c0-5fef-20d32e6a3980", A40_1, "1:1", 1, 3, 0, 165, 166, 0},
          {"MIG-3765aac0-d923-9d91-f7d4-9ab6bac2329a", A40_1, "1:2", 1, 5, 0, 183, 184, 0}}},
};

#define H200_0 "GPU-e5a56d6a-aa8f-46ef-56bb-62ee6663e7ca"
#define H200_1 "GPU-83f3c3ae-0f10-6208-1b0c-272167e8ae91"
#define H200_2 "GPU-8c589949-2cb6-dba3-d241-8668839f873a"

static const struct exp_res mixed_h200[] = {
        {"nvidia.com/gpu", 1, {{H200_2, NULL, "2", 2, NOI, NOI, 0, 0, 0}}},
        {"nvidia.com/mig-1g.18gb.me", 1,
         {{"MIG-e07b30a0-8e2b-655d-e887-7503a42491e7", H200_0, "0:0", 0, 7, 0, 66, 67, 0}}},
        {"nvidia.com/mig-1g.35gb", 3,
         {{"MIG-6c601527-6867-f6f6-2a8e-f6d4920c8e35", H200_0, "0:1", 0, 3, 0, 30, 31, 0},
          {"MIG-1ef4e53e-e818-bf5c-d1ad-1fb3a5330cbf", H200_1, "1:1", 1, 3, 0, 165, 166, 0},
          {"MIG-73ed1b37-c534-eec5-8366-1e7d58a18396", H200_1, "1:2", 1, 4, 0, 174, 175, 0}}},
        {"nvidia.com/mig-2g.35gb", 1,
         {{"MIG-17e58271-389d-ae76-1035-a3d7660daf5c", H200_0, "0:2", 0, 5, 0, 48, 49, 0}}},
        {"nvidia.com/mig-1g.18gb", 1,
         {{"MIG-9b5b6c0e-3537-4802-5181-4fdbb893072e", H200_0, "0:3", 0, 13, 0, 120, 121, 0}}},
        {"nvidia.com/mig-3g.71gb", 1,
         {{"MIG-f5a42fc8-aaff-5fc2-c671-584864cfc0db", H200_1, "1:0", 1, 2, 0, 156, 157, 0}}},
};

#define H100_0 "GPU-0d4a9c1e-5b7f-4e2a-9c3d-1f2e3a4b5c6d"
#define H100_1 "GPU-7a1b2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4d"
#define H100_2 "GPU-b5c6d7e8-f9a0-4b1c-9d2e-3f4a5b6c7d8e"

/* every GPU has MIG on: no nvidia.com/gpu */
static const struct exp_res mixed_h100[] = {
        {"nvidia.com/mig-3g.40gb", 1,
         {{"MIG-2b8e4f10-7c3a-5d9e-8f1a-3c5e7a9b1d2f", H100_0, "0:0", 0, 2, 0, 21, 22, 0}}},
        {"nvidia.com/mig-2g.20gb", 1,
         {{"MIG-4c0a6e32-9e5c-5fb0-a13c-5e7a9cbd3f41", H100_0, "0:1", 0, 3, 0, 30, 31, 0}}},
        {"nvidia.com/mig-1g.20gb", 1,
         {{"MIG-6e2c8054-b07e-5fd2-c35e-7a9cbedf5163", H100_0, "0:2", 0, 5, 0, 48, 49, 0}}},
        {"nvidia.com/mig-4g.40gb", 1,
         {{"MIG-80e4a276-d290-5f14-e570-9cbedf017385", H100_1, "1:0", 1, 1, 0, 147, 148, 0}}},
        {"nvidia.com/mig-1g.10gb.me", 1,
         {{"MIG-a206c498-f4b2-5f36-0792-bedf0132a5a7", H100_1, "1:1", 1, 7, 0, 201, 202, 0}}},
        {"nvidia.com/mig-1g.10gb", 2,
         {{"MIG-c428e6ba-16d4-5f58-29b4-df0132547c9c", H100_1, "1:2", 1, 8, 0, 210, 211, 0},
          {"MIG-e64a08dc-38f6-5f7a-4bd6-0132547698be", H100_1, "1:3", 1, 9, 0, 219, 220, 0}}},
        {"nvidia.com/mig-7g.80gb", 1,
         {{"MIG-086c2afe-5a18-5f9c-6df8-32547698bad0", H100_2, "2:0", 2, 0, 0, 273, 274, 1}}},
};

static void check_resources(const struct kdev_resource_set *rs, const struct exp_res *x,
                            size_t n)
{
        if (rs->n_resources != n) {
                for (size_t i = 0; i < rs->n_resources; i++)
                        fprintf(stderr, "  got %s\n", rs->resources[i].name);
                fail_msg("%zu resources, want %zu", rs->n_resources, n);
        }
        for (size_t i = 0; i < n; i++) {
                const struct kdev_resource *r = &rs->resources[i];
                assert_string_equal(r->name, x[i].name);
                assert_ptr_equal(r->ops, &kdev_nvidia_resource_ops);
                if (r->n_devices != x[i].n)
                        fail_msg("%s: %zu devices, want %zu", r->name, r->n_devices, x[i].n);
                for (size_t k = 0; k < x[i].n; k++) {
                        const struct exp_dev *w = &x[i].d[k];
                        const struct kdev_device *d = &r->devices[k];
                        const struct kdev_nvidia_devinfo *info = kdev_nvidia_device_info(r, d);
                        assert_string_equal(d->id, w->id);
                        assert_true(d->healthy);
                        assert_int_equal(d->numa_node, w->numa);
                        assert_string_equal(info->uuid, w->id);
                        assert_string_equal(info->parent_uuid, w->parent ? w->parent : w->id);
                        assert_string_equal(info->index, w->index);
                        assert_int_equal(info->minor, w->minor);
                        assert_int_equal(info->gi, w->gi);
                        assert_int_equal(info->ci, w->ci);
                        assert_int_equal(info->replica, -1);
                        if (w->gi != NOI) {
                                assert_int_equal(info->gi_cap, w->gi_cap);
                                assert_int_equal(info->ci_cap, w->ci_cap);
                        }
                }
        }
}

static void test_mixed(void **state)
{
        struct fx *f = *state;
        static const struct {
                const char *file;
                const struct exp_res *x;
                size_t n;
                const char *warning;
        } cases[] = {
                {TOPO("mig-a100-40gb.yaml"), mixed_a100_40gb, 6,
                 "device 2 has no MIG devices configured"},
                {TOPO("mig-h200.yaml"), mixed_h200, 6, NULL},
                {TOPO("mig-h100-80gb.yaml"), mixed_h100, 7, NULL},
        };
        for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
                struct kdev_gpu_set *set = discover(f, cases[c].file);
                struct kdev_nvidia_config cfg;
                config(&cfg, f, KDEV_NVIDIA_MIG_MIXED, KDEV_NVIDIA_LIST_ENVVAR,
                       KDEV_NVIDIA_ID_UUID, false);
                struct kdev_resource_set rs = {0};
                struct mock_warns w = {0};
                struct kdev_err e;
                if (try_build(set, &cfg, &rs, &w, &e) != 0)
                        fail_msg("%s: %s", cases[c].file, e.msg);
                check_resources(&rs, cases[c].x, cases[c].n);
                assert_int_equal(w.n, cases[c].warning ? 1 : 0);
                if (cases[c].warning)
                        assert_string_equal(w.msgs[0], cases[c].warning);
                /* each resource name passes kubelet's rules */
                for (size_t i = 0; i < rs.n_resources; i++)
                        assert_int_equal(kdev_resource_name_check(rs.resources[i].name, &e), 0);
                /* a second build into the same set: every name collides */
                struct kdev_resource_set copy = rs;
                assert_int_equal(try_build(set, &cfg, &copy, &w, &e), -EEXIST);
                assert_int_equal(copy.n_resources, rs.n_resources);
                kdev_resource_set_clear(&rs);
                kdev_nvidia_config_clear(&cfg);
                kdev_gpu_set_free(set);
        }
}

/* The names of the possible profiles of every MIG-capable GPU of the mock
 * topologies (discovery's mig_profiles: index, memorySizeMB) and of the
 * existing MIG devices (attributes.memorySizeMB), through the name function:
 * every published profile of the four GPUs. */
static void test_topology_names(void **state)
{
        struct fx *f = *state;
        static const struct {
                const char *file;
                const char *names[8]; /* index order 0x0, 0x1, 0x2, 0x3, 0x4, 0x7, 0x9 */
        } cases[] = {
                {TOPO("mig-a100-40gb.yaml"),
                 {"1g.5gb", "2g.10gb", "3g.20gb", "4g.20gb", "7g.40gb", "1g.5gb+me", "1g.10gb"}},
                {TOPO("a100-sxm4-80gb-8x-nvswitch.yaml"),
                 {"1g.10gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb", "1g.10gb+me",
                  "1g.20gb"}},
                {TOPO("mig-a100-80gb-single.yaml"),
                 {"1g.10gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb", "1g.10gb+me",
                  "1g.20gb"}},
                {TOPO("h100-80gb-8x-nvswitch.yaml"),
                 {"1g.10gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb", "1g.10gb+me",
                  "1g.20gb"}},
                {TOPO("mig-h100-80gb.yaml"),
                 {"1g.10gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb", "1g.10gb+me",
                  "1g.20gb"}},
                {TOPO("mig-h200.yaml"),
                 {"1g.18gb", "2g.35gb", "3g.71gb", "4g.71gb", "7g.141gb", "1g.18gb+me",
                  "1g.35gb"}},
        };
        for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
                struct kdev_gpu_set *set = discover(f, cases[c].file);
                for (size_t i = 0; i < set->n_gpus; i++) {
                        const struct kdev_gpu *g = &set->gpus[i];
                        assert_true(g->mig_capable);
                        assert_int_equal(g->n_mig_profiles, 7);
                        for (size_t k = 0; k < g->n_mig_profiles; k++) {
                                const struct kdev_mig_profile *p = &g->mig_profiles[k];
                                static const unsigned order[] = {0, 1, 2, 3, 4, 7, 9};
                                size_t pos = 0;
                                while (pos < 7 && order[pos] != p->index)
                                        pos++;
                                assert_true(pos < 7);
                                unsigned s = kdev_nvidia_mig_gi_slices(p->index);
                                static const unsigned full_ci[] = {0, 0, 1, 2, 3, 0, 6, 4};
                                char name[KDEV_NVIDIA_MIG_PROFILE_MAX];
                                struct kdev_err e;
                                assert_true(kdev_nvidia_mig_profile_name(
                                                    p->index, full_ci[s], p->info.memorySizeMB,
                                                    g->memory_total, name, sizeof(name),
                                                    &e) > 0);
                                if (strcmp(name, cases[c].names[pos]) != 0)
                                        fail_msg("%s GPU %zu index 0x%x: %s, want %s",
                                                 cases[c].file, i, p->index, name,
                                                 cases[c].names[pos]);
                        }
                        /* existing MIG devices: named like their GI profile */
                        for (size_t k = 0; k < g->n_migs; k++) {
                                const struct kdev_mig_device *m = &g->migs[k];
                                char name[KDEV_NVIDIA_MIG_PROFILE_MAX];
                                struct kdev_err e;
                                assert_true(kdev_nvidia_mig_device_profile(g, m, name,
                                                                           sizeof(name), &e) > 0);
                                size_t pos = 0;
                                static const unsigned order[] = {0, 1, 2, 3, 4, 7, 9};
                                while (pos < 7 && order[pos] != m->gi_profile_index)
                                        pos++;
                                assert_true(pos < 7);
                                assert_string_equal(name, cases[c].names[pos]);
                                /* the mock's own MIG device name ends with it */
                                size_t ln = strlen(m->name), lp = strlen(name);
                                assert_true(ln > lp);
                                assert_string_equal(m->name + ln - lp, name);
                        }
                }
                kdev_gpu_set_free(set);
        }
}

static void test_single(void **state)
{
        struct fx *f = *state;
        struct kdev_gpu_set *set = discover(f, TOPO("mig-a100-80gb-single.yaml"));
        struct kdev_nvidia_config cfg;
        config(&cfg, f, KDEV_NVIDIA_MIG_SINGLE, KDEV_NVIDIA_LIST_ENVVAR, KDEV_NVIDIA_ID_UUID,
               false);
        struct kdev_resource_set rs = {0};
        struct mock_warns w = {0};
        struct kdev_err e;
        if (try_build(set, &cfg, &rs, &w, &e) != 0)
                fail_msg("%s", e.msg);
        struct exp_res x = {"nvidia.com/gpu", 14, {{0}}};
        static char ids[14][64], idx[14][8];
        for (unsigned g = 0; g < 2; g++) {
                for (unsigned j = 0; j < 7; j++) {
                        struct exp_dev *d = &x.d[g * 7 + j];
                        snprintf(ids[g * 7 + j], sizeof(ids[0]),
                                 "MIG-5a0b1c2d-3e4f-5a6b-7c8d-9e0f1a2b3c%u%u", g, j);
                        snprintf(idx[g * 7 + j], sizeof(idx[0]), "%u:%u", g, j);
                        d->id = ids[g * 7 + j];
                        d->parent = g ? "GPU-3f1e2d4c-5b6a-4798-8a7b-6c5d4e3f2a11"
                                      : "GPU-3f1e2d4c-5b6a-4798-8a7b-6c5d4e3f2a10";
                        d->index = idx[g * 7 + j];
                        d->minor = g;
                        d->gi = 7 + j;
                        d->ci = 0;
                        d->gi_cap = 3 + 135 * g + 9 * (7 + j);
                        d->ci_cap = d->gi_cap + 1;
                        d->numa = 0;
                }
        }
        check_resources(&rs, &x, 1);
        assert_int_equal(w.n, 0);
        kdev_resource_set_clear(&rs);
        kdev_gpu_set_free(set);

        /* the three invalid layouts, NVIDIA's texts (device_map.go) */
        static const struct {
                const char *file;
                const char *msg;
        } bad[] = {
                {TOPO("mig-a100-40gb.yaml"),
                 "invalid MIG configuration: at least one device with migEnabled=true was not "
                 "configured correctly: device 2 has no MIG devices configured"},
                {TOPO("mig-h200.yaml"),
                 "invalid MIG configuration: more than one MIG device type present on node"},
                {TOPO("mig-h100-80gb.yaml"),
                 "invalid MIG configuration: more than one MIG device type present on node"},
        };
        for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
                set = discover(f, bad[i].file);
                assert_int_equal(try_build(set, &cfg, &rs, &w, &e), -EINVAL);
                assert_string_equal(e.msg, bad[i].msg);
                assert_int_equal(rs.n_resources, 0);
                kdev_gpu_set_free(set);
        }
        kdev_nvidia_config_clear(&cfg);
}

/* A100-40GB header for fixture topologies (profiles of mig-a100-40gb.yaml). */
static const char a100_40gb_head[] =
        "defaults:\n"
        "  name: \"NVIDIA A100-SXM4-40GB\"\n"
        "  memory_mib: 40960\n"
        "  compute_capability: \"8.0\"\n"
        "  mig_profiles:\n"
        "    - {index: 0x0, id: 19, name: \"1g.5gb\", slices: 1, instances: 7, sms: 14, "
        "memory_mib: 4864, placement_size: 1}\n"
        "    - {index: 0x2, id: 9, name: \"3g.20gb\", slices: 3, instances: 2, sms: 42, "
        "memory_mib: 19968, placement_size: 4}\n"
        "    - {index: 0x4, id: 0, name: \"7g.40gb\", slices: 7, instances: 1, sms: 98, "
        "memory_mib: 40192, placement_size: 8}\n"
        "gpus:\n";

static struct kdev_gpu_set *fixture(struct fx *f, const char *gpus)
{
        char path[160], *text = NULL;
        snprintf(path, sizeof(path), "%s/topo.yaml", f->tmp);
        assert_true(asprintf(&text, "%s%s", a100_40gb_head, gpus) > 0);
        write_file(path, text);
        free(text);
        return discover(f, path);
}

static void test_fixture_layouts(void **state)
{
        struct fx *f = *state;
        struct kdev_nvidia_config single, mixed;
        config(&single, f, KDEV_NVIDIA_MIG_SINGLE, KDEV_NVIDIA_LIST_ENVVAR, KDEV_NVIDIA_ID_UUID,
               false);
        config(&mixed, f, KDEV_NVIDIA_MIG_MIXED, KDEV_NVIDIA_LIST_ENVVAR, KDEV_NVIDIA_ID_UUID,
               false);
        struct kdev_resource_set rs = {0};
        struct mock_warns w = {0};
        struct kdev_err e;

        /* MIG and whole GPUs mixed: (c) under single; fine under mixed */
        struct kdev_gpu_set *set = fixture(
                f, "  - {uuid: GPU-00000000-0000-4000-8000-000000000000, pci_bus_id: "
                   "\"00000000:07:00.0\", mig: {mode: 1, devices: [{uuid: "
                   "MIG-00000000-0000-5000-8000-000000000001, profile: 0x4, gi: 0, start: 0}]}}\n"
                   "  - {uuid: GPU-00000000-0000-4000-8000-000000000002, pci_bus_id: "
                   "\"00000000:0F:00.0\", mig: {mode: 0}}\n");
        assert_int_equal(try_build(set, &single, &rs, &w, &e), -EINVAL);
        /* NVIDIA v0.20.0 device_map.go: this one without the prefix */
        assert_string_equal(e.msg, "all devices on the node must be configured with the same "
                                   "migEnabled value");
        assert_int_equal(try_build(set, &mixed, &rs, &w, &e), 0);
        assert_int_equal(rs.n_resources, 2);
        assert_string_equal(rs.resources[0].name, "nvidia.com/gpu");
        assert_string_equal(rs.resources[0].devices[0].id,
                            "GPU-00000000-0000-4000-8000-000000000002");
        assert_string_equal(rs.resources[1].name, "nvidia.com/mig-7g.40gb");
        assert_string_equal(rs.resources[1].devices[0].id,
                            "MIG-00000000-0000-5000-8000-000000000001");
        kdev_resource_set_clear(&rs);
        kdev_gpu_set_free(set);

        /* compute instances smaller than their GPU instance (1c.3g.20gb): no
         * mixed resource (fatal, as NVIDIA); single takes them when uniform */
        set = fixture(f, "  - {uuid: GPU-00000000-0000-4000-8000-000000000000, pci_bus_id: "
                         "\"00000000:07:00.0\", mig: {mode: 1, devices: ["
                         "{uuid: MIG-00000000-0000-5000-8000-000000000001, profile: 0x2, gi: 2, "
                         "start: 4, ci: 0, ci_profile: 0, ci_start: 0}, "
                         "{uuid: MIG-00000000-0000-5000-8000-000000000002, profile: 0x2, gi: 2, "
                         "start: 4, ci: 1, ci_profile: 0, ci_start: 1}]}}\n");
        assert_int_equal(try_build(set, &mixed, &rs, &w, &e), -EINVAL);
        assert_string_equal(e.msg, "MIG profile '1c.3g.20gb' does not match any resource patterns");
        assert_int_equal(rs.n_resources, 0);
        assert_int_equal(try_build(set, &single, &rs, &w, &e), 0);
        assert_int_equal(rs.n_resources, 1);
        assert_int_equal(rs.resources[0].n_devices, 2);
        const struct kdev_nvidia_devinfo *info =
                kdev_nvidia_device_info(&rs.resources[0], &rs.resources[0].devices[1]);
        assert_int_equal(info->gi, 2);
        assert_int_equal(info->ci, 1);
        assert_int_equal(info->gi_cap, 21);
        assert_int_equal(info->ci_cap, 23);
        kdev_resource_set_clear(&rs);
        kdev_gpu_set_free(set);

        /* no GPUs at all: an empty nvidia.com/gpu, as with migStrategy none */
        assert_int_equal(try_build(NULL, &mixed, &rs, &w, &e), 0);
        assert_int_equal(rs.n_resources, 1);
        assert_string_equal(rs.resources[0].name, "nvidia.com/gpu");
        assert_int_equal(rs.resources[0].n_devices, 0);
        kdev_resource_set_clear(&rs);

        /* the parent's memory unreadable (NO_PERMISSION, NVIDIA issue #399): the
         * profiles cannot be named */
        load(f, TOPO("mig-a100-40gb.yaml"));
        assert_int_equal(f->m.set_error(A40_0, "nvmlDeviceGetMemoryInfo", NVML_ERROR_NO_PERMISSION),
                         NVML_SUCCESS);
        set = discover_loaded(f);
        assert_int_equal(try_build(set, &mixed, &rs, &w, &e), -EACCES);
        assert_string_equal(e.msg, "error getting MIG profiles of GPU 0: error getting parent "
                                   "memory info: Insufficient Permissions");
        assert_int_equal(try_build(set, &single, &rs, &w, &e), -EACCES);
        assert_string_equal(e.msg, "error getting MIG profile for MIG device at index '(0, 0)': "
                                   "error getting parent memory info: Insufficient Permissions");
        /* migStrategy none does not need it */
        struct kdev_nvidia_config none;
        config(&none, f, KDEV_NVIDIA_MIG_NONE, KDEV_NVIDIA_LIST_ENVVAR, KDEV_NVIDIA_ID_UUID,
               false);
        assert_int_equal(try_build(set, &none, &rs, &w, &e), 0);
        assert_int_equal(rs.n_resources, 1);
        assert_int_equal(rs.resources[0].n_devices, 4);
        kdev_resource_set_clear(&rs);
        kdev_nvidia_config_clear(&none);
        kdev_gpu_set_free(set);
        kdev_nvidia_config_clear(&single);
        kdev_nvidia_config_clear(&mixed);
}

/* A faulted MIG GPU (review 4, F1): the MIG mode is read right after the
 * UUID, so a GPU needing a reset is still known to be MIG-enabled and is not
 * counted whole; one whose MIG mode is unknown (lost at nvmlDeviceGetMigMode)
 * is a third state, skipped with a warning under single and mixed. */
#define S80_0 "GPU-3f1e2d4c-5b6a-4798-8a7b-6c5d4e3f2a10"
#define S80_1 "GPU-3f1e2d4c-5b6a-4798-8a7b-6c5d4e3f2a11"

static void test_faulted_mig_gpu(void **state)
{
        struct fx *f = *state;
        struct kdev_nvidia_config single, mixed, none;
        config(&single, f, KDEV_NVIDIA_MIG_SINGLE, KDEV_NVIDIA_LIST_ENVVAR, KDEV_NVIDIA_ID_UUID,
               false);
        config(&mixed, f, KDEV_NVIDIA_MIG_MIXED, KDEV_NVIDIA_LIST_ENVVAR, KDEV_NVIDIA_ID_UUID,
               false);
        config(&none, f, KDEV_NVIDIA_MIG_NONE, KDEV_NVIDIA_LIST_ENVVAR, KDEV_NVIDIA_ID_UUID,
               false);
        struct kdev_resource_set rs = {0};
        struct kdev_err e;
        static const struct {
                bool lost_at_mig_mode; /* else reset required */
                const char *warning;
        } cases[] = {
                {false, "GPU 0 (" S80_0 "): MIG enabled but its MIG devices could not be read "
                        "(GPU requires restart); not advertised"},
                {true, "GPU 0 (" S80_0 "): MIG mode unknown (GPU is lost); not advertised "
                       "under migStrategy "},
        };
        for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
                load(f, TOPO("mig-a100-80gb-single.yaml"));
                if (cases[c].lost_at_mig_mode)
                        assert_int_equal(f->m.set_error(S80_0, "nvmlDeviceGetMigMode",
                                                      NVML_ERROR_GPU_IS_LOST),
                                         NVML_SUCCESS);
                else
                        assert_int_equal(f->m.set_reset(S80_0, 1), NVML_SUCCESS);
                struct kdev_gpu_set *set = discover_loaded(f);
                const struct kdev_gpu *g = &set->gpus[0];
                assert_string_equal(g->uuid, S80_0);
                assert_int_equal(g->n_migs, 0);
                if (cases[c].lost_at_mig_mode) {
                        assert_int_equal(g->fault, NVML_ERROR_GPU_IS_LOST);
                        assert_false(g->mig_mode_known);
                        assert_int_equal(g->mig_current, 0);
                } else {
                        assert_int_equal(g->fault, NVML_ERROR_RESET_REQUIRED);
                        assert_true(g->mig_mode_known);
                        assert_int_equal(g->mig_current, NVML_DEVICE_MIG_ENABLE);
                }
                const struct kdev_nvidia_config *cfgs[2] = {&single, &mixed};
                for (size_t k = 0; k < 2; k++) {
                        struct mock_warns w = {0};
                        if (try_build(set, cfgs[k], &rs, &w, &e) != 0)
                                fail_msg("case %zu %s: %s", c, k ? "mixed" : "single", e.msg);
                        /* only GPU 1's seven 1g.10gb devices, no whole GPU */
                        assert_int_equal(rs.n_resources, 1);
                        assert_string_equal(rs.resources[0].name,
                                            k ? "nvidia.com/mig-1g.10gb" : "nvidia.com/gpu");
                        assert_int_equal(rs.resources[0].n_devices, 7);
                        for (size_t d = 0; d < 7; d++) {
                                const struct kdev_nvidia_devinfo *info = kdev_nvidia_device_info(
                                        &rs.resources[0], &rs.resources[0].devices[d]);
                                assert_string_equal(info->parent_uuid, S80_1);
                                assert_true(rs.resources[0].devices[d].healthy);
                        }
                        char want[256];
                        snprintf(want, sizeof(want), "%s%s", cases[c].warning,
                                 !cases[c].lost_at_mig_mode ? ""
                                 : k                        ? "mixed"
                                                            : "single");
                        assert_int_equal(w.n, 1);
                        assert_string_equal(w.msgs[0], want);
                        kdev_resource_set_clear(&rs);
                }
                /* none: both whole, GPU 0 unhealthy */
                struct mock_warns w = {0};
                assert_int_equal(try_build(set, &none, &rs, &w, &e), 0);
                assert_int_equal(rs.n_resources, 1);
                assert_int_equal(rs.resources[0].n_devices, 2);
                assert_string_equal(rs.resources[0].devices[0].id, S80_0);
                assert_false(rs.resources[0].devices[0].healthy);
                assert_true(rs.resources[0].devices[1].healthy);
                assert_int_equal(w.n, 0);
                kdev_resource_set_clear(&rs);
                kdev_gpu_set_free(set);
        }
        kdev_nvidia_config_clear(&single);
        kdev_nvidia_config_clear(&mixed);
        kdev_nvidia_config_clear(&none);
}

/* --- mig-minors ---------------------------------------------------------------------- */

static void test_mig_minors(void **state)
{
        struct fx *f = *state;
        char dir[192], path[256];
        snprintf(dir, sizeof(dir), "%s/p2", f->tmp);
        struct kdev_nvidia_mig_minors m;
        struct kdev_err e;
        /* no file: not a MIG machine, no error */
        assert_int_equal(kdev_nvidia_mig_minors_read(dir, &m, &e), 0);
        assert_false(m.present);
        assert_int_equal(m.n_entries, 0);
        assert_int_equal(m.config, -1);
        unsigned gi_cap = 0, ci_cap = 0;
        assert_int_equal(kdev_nvidia_mig_caps(&m, 0, 2, 0, &gi_cap, &ci_cap, &e), -ENOENT);
        assert_string_equal(e.msg, "missing MIG GPU instance capability path: "
                                   "/proc/driver/nvidia/capabilities/gpu0/mig/gi2/access");
        kdev_nvidia_mig_minors_clear(&m);

        assert_int_equal(mkdir(dir, 0755), 0);
        snprintf(path, sizeof(path), "%s/driver", dir);
        assert_int_equal(mkdir(path, 0755), 0);
        snprintf(path, sizeof(path), "%s/driver/nvidia-caps", dir);
        assert_int_equal(mkdir(path, 0755), 0);
        snprintf(path, sizeof(path), "%s/driver/nvidia-caps/mig-minors", dir);
        write_file(path, "config 1\n"
                         "monitor 2\n"
                         "gpu1/gi2/access 156\n"
                         "gpu1/gi2/ci0/access 157\n"
                         "garbage line\n"
                         "gpu1/gi2/ci0/access\n"
                         "gpu1/gi3/access 165\n"
                         "gpu1/gi2/ci1/access 158 trailing\n"
                         "gpu1/gi2/ci7/access 164"); /* no final newline */
        assert_int_equal(kdev_nvidia_mig_minors_read(dir, &m, &e), 0);
        assert_true(m.present);
        assert_int_equal(m.config, 1);
        assert_int_equal(m.monitor, 2);
        assert_int_equal(m.n_entries, 4);
        assert_int_equal(m.n_skipped, 3);
        assert_int_equal(kdev_nvidia_mig_caps(&m, 1, 2, 7, &gi_cap, &ci_cap, &e), 0);
        assert_int_equal(gi_cap, 156);
        assert_int_equal(ci_cap, 164);
        assert_int_equal(kdev_nvidia_mig_caps(&m, 1, 2, 1, &gi_cap, &ci_cap, &e), -ENOENT);
        assert_string_equal(e.msg, "missing MIG GPU instance capability path: "
                                   "/proc/driver/nvidia/capabilities/gpu1/mig/gi2/ci1/access");
        assert_int_equal(kdev_nvidia_mig_caps(&m, 0, 2, 0, &gi_cap, &ci_cap, &e), -ENOENT);
        kdev_nvidia_mig_minors_clear(&m);
        /* a file that cannot be opened */
        if (geteuid() != 0) {
                chmod(path, 0);
                assert_int_equal(kdev_nvidia_mig_minors_read(dir, &m, &e), -EACCES);
                assert_true(strncmp(e.msg, "error opening MIG minors file: ", 31) == 0);
                chmod(path, 0644);
        }

        /* the build fails on a missing capability, as NVIDIA's device construction */
        struct kdev_gpu_set *set = discover(f, TOPO("mig-a100-40gb.yaml"));
        struct kdev_nvidia_config cfg;
        config(&cfg, f, KDEV_NVIDIA_MIG_MIXED, KDEV_NVIDIA_LIST_ENVVAR, KDEV_NVIDIA_ID_UUID,
               false);
        free(cfg.proc_root);
        cfg.proc_root = strdup(dir); /* the file above: no gpu0 lines */
        struct kdev_resource_set rs = {0};
        struct mock_warns w = {0};
        assert_int_equal(try_build(set, &cfg, &rs, &w, &e), -ENOENT);
        assert_string_equal(e.msg, "missing MIG GPU instance capability path: "
                                   "/proc/driver/nvidia/capabilities/gpu0/mig/gi2/access");
        assert_int_equal(rs.n_resources, 0);
        struct kdev_cdi_spec *spec = NULL;
        cfg.device_list_strategies = KDEV_NVIDIA_LIST_CDI_CRI;
        assert_int_equal(kdev_nvidia_cdi_spec(set, &cfg, &spec, &e), -ENOENT);
        assert_null(spec);
        kdev_nvidia_config_clear(&cfg);
        kdev_gpu_set_free(set);
}

/* --- Allocate and CDI ---------------------------------------------------------------- */

static void test_allocate(void **state)
{
        struct fx *f = *state;
        struct kdev_gpu_set *set = discover(f, TOPO("mig-a100-40gb.yaml"));
        struct kdev_nvidia_config cfg;
        struct kdev_resource_set rs = {0};
        struct mock_warns w = {0};
        struct kdev_err e;
        config(&cfg, f, KDEV_NVIDIA_MIG_MIXED, KDEV_NVIDIA_LIST_ENVVAR, KDEV_NVIDIA_ID_UUID,
               true);
        assert_int_equal(try_build(set, &cfg, &rs, &w, &e), 0);
        const struct kdev_resource *r = &rs.resources[3];
        assert_string_equal(r->name, "nvidia.com/mig-1g.5gb");
        const char *req[] = {"MIG-cc362666-f6d1-a63a-ddd2-38044c0c64a2",
                             "MIG-f77e8b45-cbe6-cf64-aa48-e4cad680f3d8",
                             "MIG-d49257bf-597e-857d-3bb4-e6384c9909cc"};
        V1beta1__ContainerAllocateResponse out = V1BETA1__CONTAINER_ALLOCATE_RESPONSE__INIT;
        assert_int_equal(kdev_plugin_allocate(r, req, 3, &out, &e), 0);
        assert_int_equal(out.n_envs, 1);
        assert_string_equal(out.envs[0]->key, "NVIDIA_VISIBLE_DEVICES");
        assert_string_equal(out.envs[0]->value, "MIG-cc362666-f6d1-a63a-ddd2-38044c0c64a2,"
                                                "MIG-f77e8b45-cbe6-cf64-aa48-e4cad680f3d8,"
                                                "MIG-d49257bf-597e-857d-3bb4-e6384c9909cc");
        static const char *const paths[] = {
                "/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia0",
                "/dev/nvidia-caps/nvidia-cap93", "/dev/nvidia-caps/nvidia-cap94",
                "/dev/nvidia1", "/dev/nvidia-caps/nvidia-cap255",
                "/dev/nvidia-caps/nvidia-cap256", "/dev/nvidia-caps/nvidia-cap84",
                "/dev/nvidia-caps/nvidia-cap85"};
        assert_int_equal(out.n_devices, 10);
        for (size_t i = 0; i < 10; i++) {
                char want[256];
                assert_string_equal(out.devices[i]->container_path, paths[i]);
                snprintf(want, sizeof(want), "%s%s", f->root, paths[i]);
                assert_string_equal(out.devices[i]->host_path, want);
                assert_string_equal(out.devices[i]->permissions, "rw");
        }
        assert_int_equal(out.n_mounts + out.n_annotations + out.n_cdi_devices, 0);
        kdev_allocate_response_free_contents(&out);
        kdev_resource_set_clear(&rs);
        kdev_nvidia_config_clear(&cfg);

        /* index IDs "i:j" and CDI names */
        config(&cfg, f, KDEV_NVIDIA_MIG_MIXED,
               KDEV_NVIDIA_LIST_ENVVAR | KDEV_NVIDIA_LIST_CDI_CRI, KDEV_NVIDIA_ID_INDEX, false);
        assert_int_equal(try_build(set, &cfg, &rs, &w, &e), 0);
        r = &rs.resources[3];
        assert_int_equal(kdev_plugin_allocate(r, req, 3, &out, &e), 0);
        assert_int_equal(out.n_envs, 1);
        assert_string_equal(out.envs[0]->value, "0:3,1:3,0:2");
        assert_int_equal(out.n_cdi_devices, 3);
        assert_string_equal(out.cdi_devices[0]->name, "k8s.device-plugin.nvidia.com/gpu=0:3");
        assert_string_equal(out.cdi_devices[1]->name, "k8s.device-plugin.nvidia.com/gpu=1:3");
        assert_string_equal(out.cdi_devices[2]->name, "k8s.device-plugin.nvidia.com/gpu=0:2");
        assert_int_equal(out.n_devices, 0);
        kdev_allocate_response_free_contents(&out);
        /* a whole GPU next to them still gets only /dev/nvidia<minor> */
        kdev_resource_set_clear(&rs);
        kdev_nvidia_config_clear(&cfg);
        kdev_gpu_set_free(set);
}

static void test_cdi(void **state)
{
        struct fx *f = *state;
        struct kdev_gpu_set *set = discover(f, TOPO("mig-a100-40gb.yaml"));
        struct kdev_err e;
        static const char *const uuids[] = {
                "MIG-59bcc04e-5cf6-b753-ab18-f13e8543556f",
                "MIG-9d0efe1e-fdc2-4aea-57e7-810aa03ca6ce",
                "MIG-d49257bf-597e-857d-3bb4-e6384c9909cc",
                "MIG-cc362666-f6d1-a63a-ddd2-38044c0c64a2",
                "MIG-fa0a443e-a85c-8cba-33fa-10b94f0ea046",
                "MIG-13018ca6-7bdc-00c0-5fef-20d32e6a3980",
                "MIG-3765aac0-d923-9d91-f7d4-9ab6bac2329a",
                "MIG-f77e8b45-cbe6-cf64-aa48-e4cad680f3d8", A40_3};
        static const char *const indices[] = {"0:0", "0:1", "0:2", "0:3", "1:0",
                                              "1:1", "1:2", "1:3", "3"};
        static const unsigned minors[] = {0, 0, 0, 0, 1, 1, 1, 1, 3};
        static const unsigned caps[][2] = {{21, 22},   {30, 31},   {84, 85},   {93, 94},
                                           {201, 202}, {165, 166}, {183, 184}, {255, 256}};
        for (int index = 0; index < 2; index++) {
                struct kdev_nvidia_config cfg;
                config(&cfg, f, KDEV_NVIDIA_MIG_MIXED, KDEV_NVIDIA_LIST_CDI_CRI,
                       index ? KDEV_NVIDIA_ID_INDEX : KDEV_NVIDIA_ID_UUID, false);
                struct kdev_cdi_spec *spec = NULL;
                if (kdev_nvidia_cdi_spec(set, &cfg, &spec, &e) != 0)
                        fail_msg("%s", e.msg);
                assert_int_equal(spec->n_devices, 10); /* 8 MIG, GPU 3, "all" */
                size_t all_nodes = 0;
                for (size_t i = 0; i < 9; i++) {
                        const struct kdev_cdi_device *d = spec->devices[i];
                        char want[256];
                        assert_string_equal(d->name, index ? indices[i] : uuids[i]);
                        assert_int_equal(d->edits.n_device_nodes, i < 8 ? 3 : 1);
                        snprintf(want, sizeof(want), "/dev/nvidia%u", minors[i]);
                        assert_string_equal(d->edits.device_nodes[0].path, want);
                        snprintf(want, sizeof(want), "%s/dev/nvidia%u", f->root, minors[i]);
                        assert_string_equal(d->edits.device_nodes[0].host_path, want);
                        for (size_t k = 0; i < 8 && k < 2; k++) {
                                snprintf(want, sizeof(want), "/dev/nvidia-caps/nvidia-cap%u",
                                         caps[i][k]);
                                assert_string_equal(d->edits.device_nodes[1 + k].path, want);
                        }
                        all_nodes += d->edits.n_device_nodes;
                }
                const struct kdev_cdi_device *all = spec->devices[9];
                assert_string_equal(all->name, "all");
                /* the union: /dev/nvidia0 and /dev/nvidia1 once each */
                assert_int_equal(all->edits.n_device_nodes, all_nodes - 6);
                kdev_cdi_spec_free(spec);
                kdev_nvidia_config_clear(&cfg);
        }
        /* migStrategy none: whole GPUs only, as before */
        struct kdev_nvidia_config cfg;
        config(&cfg, f, KDEV_NVIDIA_MIG_NONE, KDEV_NVIDIA_LIST_CDI_CRI, KDEV_NVIDIA_ID_UUID,
               false);
        struct kdev_cdi_spec *spec = NULL;
        assert_int_equal(kdev_nvidia_cdi_spec(set, &cfg, &spec, &e), 0);
        assert_int_equal(spec->n_devices, 5);
        assert_string_equal(spec->devices[0]->name, A40_0);
        kdev_cdi_spec_free(spec);
        kdev_nvidia_config_clear(&cfg);
        kdev_gpu_set_free(set);
}

/* --proc-root and KDEV_PROC_ROOT */
static void test_proc_root_option(void **state)
{
        (void)state;
        struct kdev_nvidia_config cfg;
        struct kdev_err e;
        assert_int_equal(kdev_nvidia_config_init(&cfg, &e), 0);
        assert_string_equal(cfg.proc_root, "/proc");
        char *env[] = {"KDEV_PROC_ROOT=/host/proc", NULL};
        assert_int_equal(kdev_nvidia_config_apply_env(&cfg, env, &e), 0);
        assert_string_equal(cfg.proc_root, "/host/proc");
        assert_int_equal(kdev_nvidia_config_apply_flag(&cfg, "proc-root", "/fixture/proc", &e),
                         0);
        assert_string_equal(cfg.proc_root, "/fixture/proc");
        assert_true(cfg.flag_given);
        assert_int_equal(kdev_nvidia_config_apply_flag(&cfg, "proc-root", "relative", &e),
                         -EINVAL);
        assert_true(strncmp(e.msg, "--proc-root: ", 13) == 0);
        kdev_nvidia_config_clear(&cfg);
}

/* NVIDIA's device plugin socket names (internal/plugin/server.go):
 * "nvidia-<resource name without nvidia.com/>.sock". */
static void test_plugin_socket_names(void **state)
{
        (void)state;
        const char *yes[] = {"nvidia-gpu.sock", "nvidia-mig-1g.5gb.sock", "nvidia-gpu.shared.sock",
                             "nvidia-mig-3g.40gb.shared.sock", "nvidia-A_b-9.sock"};
        const char *no[] = {"nvidia-.sock", "nvidia.sock", "nvidia-gpu.sock.lock", "nvidia-gpu",
                            "kdev-nvidia.com_gpu.sock", "kubelet.sock", "nvidia-gpu/x.sock",
                            "nvidia-g pu.sock", "xnvidia-gpu.sock", ""};
        for (size_t i = 0; i < sizeof(yes) / sizeof(yes[0]); i++)
                assert_true(kdev_nvidia_is_plugin_socket_name(yes[i]));
        for (size_t i = 0; i < sizeof(no) / sizeof(no[0]); i++)
                assert_false(kdev_nvidia_is_plugin_socket_name(no[i]));
}

int main(void)
{
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_reference_names),
                cmocka_unit_test(test_name_rules),
                cmocka_unit_test(test_proc_root_option),
                cmocka_unit_test_setup_teardown(test_topology_names, setup, teardown),
                cmocka_unit_test_setup_teardown(test_mixed, setup, teardown),
                cmocka_unit_test_setup_teardown(test_single, setup, teardown),
                cmocka_unit_test_setup_teardown(test_fixture_layouts, setup, teardown),
                cmocka_unit_test_setup_teardown(test_faulted_mig_gpu, setup, teardown),
                cmocka_unit_test_setup_teardown(test_mig_minors, setup, teardown),
                cmocka_unit_test_setup_teardown(test_allocate, setup, teardown),
                cmocka_unit_test_setup_teardown(test_cdi, setup, teardown),
                cmocka_unit_test(test_plugin_socket_names),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
