/* The NVIDIA backend's NVML-free GPU records (src/nvidia/gpus.c): every
 * field from a hand-made discovery result, the DRA device names computed
 * at conversion, lookups; and kdev-dra-plugin's NVIDIA backend
 * (src/nvidia/dra_backend.c) on the mock NVML: discovery into records, the
 * whole GPUs the health monitor watches, the loader's error; dynamic MIG:
 * placement records (by hand and from the mock's H100 profile table) and MIG
 * devices made, listed and destroyed through the backend. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "mock_fixture.h"
#include "nvidia/config.h"
#include "nvidia/dra_backend.h"
#include "nvidia/gpus.h"
#include "nvml/discover.h"
#include "nvml/mig_config.h"

/* GPU 0: a whole A100 (minor 3); GPU 1: lost during discovery; GPU 2: in
 * MIG mode (minor 5) with a 3g.20gb MIG device named by NVML and a 1g MIG
 * device whose NVML name carries no profile. */
static void make_set(struct kdev_gpu_set *s, struct kdev_gpu g[3], struct kdev_mig_device m[2])
{
        memset(s, 0, sizeof(*s));
        memset(g, 0, 3 * sizeof(*g));
        memset(m, 0, 2 * sizeof(*m));
        snprintf(s->driver_version, sizeof(s->driver_version), "550.90.07");
        s->cuda_driver_version = 12040;
        s->gpus = g;
        s->n_gpus = 3;

        g[0].index = 0;
        g[0].minor = 3;
        strcpy(g[0].uuid, "GPU-aaaa");
        strcpy(g[0].name, "NVIDIA A100-SXM4-40GB");
        strcpy(g[0].sysfs_bus_id, "0000:07:00.0");
        g[0].numa_node = 1;
        g[0].memory_total = 40ULL << 30;
        g[0].cc_major = 8;
        g[0].arch = NVML_DEVICE_ARCH_AMPERE;
        g[0].has_brand = true;
        g[0].brand = NVML_BRAND_NVIDIA_RTX;
        g[0].multiprocessors = 108;

        g[1].index = 1;
        g[1].minor = 4;
        g[1].fault = NVML_ERROR_GPU_IS_LOST;
        strcpy(g[1].uuid, "GPU-bbbb");
        g[1].memory_ret = NVML_ERROR_NO_PERMISSION;
        g[1].memory_total = 12345; /* not an answer: 0 in the record */
        g[1].arch = NVML_DEVICE_ARCH_UNKNOWN;
        g[1].numa_node = -1;

        g[2].index = 2;
        g[2].minor = 5;
        strcpy(g[2].uuid, "GPU-cccc");
        strcpy(g[2].name, "NVIDIA A100-SXM4-40GB");
        g[2].memory_total = 40ULL << 30;
        g[2].has_brand = true;
        g[2].brand = 99; /* a value NVIDIA's DRA driver has no name for */
        g[2].arch = NVML_DEVICE_ARCH_HOPPER;
        g[2].mig_current = NVML_DEVICE_MIG_ENABLE;
        g[2].migs = m;
        g[2].n_migs = 2;

        strcpy(m[0].uuid, "MIG-1");
        strcpy(m[0].name, "NVIDIA A100-SXM4-40GB MIG 3g.20gb");
        m[0].gi_id = 2;
        m[0].ci_id = 0;
        m[0].memory_total = 19968ULL << 20;
        m[0].gi_profile_index = NVML_GPU_INSTANCE_PROFILE_3_SLICE;
        m[0].gi_profile.id = 9;
        m[0].gi_profile.sliceCount = 3;
        m[0].gi_profile.memorySizeMB = 20000; /* the handle's answer wins */
        m[0].gi_profile.copyEngineCount = 3;
        m[0].gi_profile.decoderCount = 2;
        m[0].gi_profile.encoderCount = 1;
        m[0].gi_profile.jpegCount = 4;
        m[0].gi_profile.ofaCount = 5;
        m[0].gi_placement.start = 4;
        m[0].ci_profile.sliceCount = 3;
        m[0].ci_profile.multiprocessorCount = 42;

        strcpy(m[1].uuid, "MIG-2");
        strcpy(m[1].name, "NVIDIA A100-SXM4-40GB");
        m[1].gi_id = 9;
        m[1].ci_id = 1;
        m[1].memory_ret = NVML_ERROR_NO_PERMISSION;
        m[1].gi_profile_index = NVML_GPU_INSTANCE_PROFILE_1_SLICE;
        m[1].gi_profile.id = 19;
        m[1].gi_profile.sliceCount = 1;
        m[1].gi_profile.memorySizeMB = 4864;
        m[1].gi_placement.start = 6;
        m[1].ci_profile.sliceCount = 1;
}

static void test_records_from_set(void **state)
{
        (void)state;
        struct kdev_gpu_set s;
        struct kdev_gpu g[3];
        struct kdev_mig_device m[2];
        struct kdev_nvidia_gpus r;
        struct kdev_err err = {0};

        make_set(&s, g, m);
        assert_int_equal(kdev_nvidia_gpus_from_set(&s, &r, &err), 0);
        assert_string_equal(r.driver_version, "550.90.07");
        assert_int_equal(r.cuda_driver_version, 12040);
        assert_int_equal(r.n_gpus, 3);

        const struct kdev_nvidia_gpu *a = &r.gpus[0];
        assert_int_equal(a->index, 0);
        assert_int_equal(a->minor, 3);
        assert_false(a->faulted);
        assert_string_equal(a->uuid, "GPU-aaaa");
        assert_string_equal(a->dra_name, "gpu-3");
        assert_string_equal(a->product, "NVIDIA A100-SXM4-40GB");
        assert_string_equal(a->brand, "NvidiaRTX");
        assert_string_equal(a->architecture, "Ampere");
        assert_int_equal(a->cc_major, 8);
        assert_int_equal(a->cc_minor, 0);
        assert_string_equal(a->pcie_bus_id, "0000:07:00.0");
        assert_int_equal(a->numa_node, 1);
        assert_true(a->memory_bytes == 40ULL << 30);
        assert_int_equal(a->multiprocessors, 108);
        assert_false(a->mig_enabled);
        assert_null(a->migs);
        assert_int_equal(a->n_migs, 0);

        const struct kdev_nvidia_gpu *b = &r.gpus[1];
        assert_true(b->faulted);
        assert_string_equal(b->uuid, "GPU-bbbb");
        assert_string_equal(b->dra_name, "gpu-4");
        assert_true(b->memory_bytes == 0);
        assert_null(b->brand);
        assert_null(b->architecture);
        assert_int_equal(b->numa_node, -1);

        const struct kdev_nvidia_gpu *c = &r.gpus[2];
        assert_null(c->brand);
        assert_string_equal(c->architecture, "Hopper");
        assert_true(c->mig_enabled);
        assert_int_equal(c->n_migs, 2);
        const struct kdev_nvidia_mig *m0 = &c->migs[0], *m1 = &c->migs[1];
        assert_string_equal(m0->uuid, "MIG-1");
        assert_string_equal(m0->dra_name, "gpu-5-mig-3g20gb-9-4");
        assert_int_equal(m0->dra_name_error, 0);
        assert_string_equal(m0->profile, "3g.20gb");
        assert_int_equal(m0->gi_id, 2);
        assert_int_equal(m0->ci_id, 0);
        assert_true(m0->memory_bytes == 19968ULL << 20);
        assert_int_equal(m0->multiprocessors, 42);
        assert_int_equal(m0->engines.copy_engines, 3);
        assert_int_equal(m0->engines.decoders, 2);
        assert_int_equal(m0->engines.encoders, 1);
        assert_int_equal(m0->engines.jpeg_engines, 4);
        assert_int_equal(m0->engines.ofa_engines, 5);
        /* no profile in the NVML name: named from the profiles (4864 MiB of
         * a 40 GiB parent is 1g.5gb); memory from the GI profile */
        assert_string_equal(m1->uuid, "MIG-2");
        assert_string_equal(m1->dra_name, "gpu-5-mig-1g5gb-19-6");
        assert_string_equal(m1->profile, "");
        assert_int_equal(m1->gi_id, 9);
        assert_int_equal(m1->ci_id, 1);
        assert_true(m1->memory_bytes == 4864ULL << 20);
        assert_int_equal(m1->multiprocessors, 0);

        /* lookups by UUID: GPUs only */
        assert_ptr_equal(kdev_nvidia_gpus_find(&r, "GPU-cccc"), c);
        assert_null(kdev_nvidia_gpus_find(&r, "MIG-1"));
        assert_null(kdev_nvidia_gpus_find(&r, ""));
        assert_null(kdev_nvidia_gpus_find(&r, NULL));
        assert_null(kdev_nvidia_gpus_find(NULL, "GPU-aaaa"));

        kdev_nvidia_gpus_clear(&r);
        assert_null(r.gpus);
        assert_int_equal(r.n_gpus, 0);
        assert_string_equal(r.driver_version, "");
        kdev_nvidia_gpus_clear(NULL);

        /* MIG devices of a GPU not in MIG mode are not records */
        g[2].mig_current = NVML_DEVICE_MIG_DISABLE;
        assert_int_equal(kdev_nvidia_gpus_from_set(&s, &r, &err), 0);
        assert_false(r.gpus[2].mig_enabled);
        assert_int_equal(r.gpus[2].n_migs, 0);
        assert_string_equal(r.gpus[2].dra_name, "gpu-5");
        kdev_nvidia_gpus_clear(&r);

        /* no discovery: no GPUs */
        assert_int_equal(kdev_nvidia_gpus_from_set(NULL, &r, &err), 0);
        assert_int_equal(r.n_gpus, 0);
        assert_null(r.gpus);
}

/* Placement records from a hand-made kdev_nvml_mig_placements: a 3g.20gb
 * profile of an A100-40GB at two placements, and one whose slice count no
 * compute-instance profile has (no name); NVML gave no memory total, so the
 * GPU record's is used. */
static void test_placements_from(void **state)
{
        (void)state;
        struct kdev_nvml_mig_placements p;
        struct kdev_nvidia_gpu g;
        struct kdev_err err = {0};

        memset(&p, 0, sizeof(p));
        memset(&g, 0, sizeof(g));
        g.minor = 5;
        g.memory_bytes = 40ULL << 30;
        p.memory_ret = NVML_ERROR_NO_PERMISSION;
        p.n_profiles = 2;
        p.profiles[0].index = NVML_GPU_INSTANCE_PROFILE_3_SLICE;
        p.profiles[0].info.id = 9;
        p.profiles[0].info.sliceCount = 3;
        p.profiles[0].info.memorySizeMB = 19968;
        p.profiles[0].info.multiprocessorCount = 42;
        p.profiles[0].info.copyEngineCount = 3;
        p.profiles[0].info.decoderCount = 2;
        p.profiles[0].info.encoderCount = 1;
        p.profiles[0].info.jpegCount = 4;
        p.profiles[0].info.ofaCount = 5;
        p.profiles[0].n_placements = 2;
        p.profiles[0].placements[0] = (nvmlGpuInstancePlacement_t){.start = 4, .size = 4};
        p.profiles[0].placements[1] = (nvmlGpuInstancePlacement_t){.start = 0, .size = 4};
        p.profiles[1].index = NVML_GPU_INSTANCE_PROFILE_1_SLICE;
        p.profiles[1].info.id = 19;
        p.profiles[1].info.sliceCount = 5;
        p.profiles[1].info.memorySizeMB = 4864;
        p.profiles[1].n_placements = 1;
        p.profiles[1].placements[0] = (nvmlGpuInstancePlacement_t){.start = 6, .size = 1};

        assert_int_equal(kdev_nvidia_gpu_placements_from(&p, &g, &err), 0);
        assert_int_equal(g.n_placements, 3);
        assert_int_equal(g.memory_slices, 8);
        const struct kdev_nvidia_placement *a = &g.placements[0];
        assert_string_equal(a->dra_name, "gpu-5-mig-3g20gb-9-4");
        assert_int_equal(a->dra_name_error, 0);
        assert_string_equal(a->profile, "3g.20gb");
        assert_int_equal(a->gi_profile_id, 9);
        assert_int_equal(a->placement_start, 4);
        assert_int_equal(a->placement_size, 4);
        assert_true(a->memory_bytes == 19968ULL << 20);
        assert_int_equal(a->multiprocessors, 42);
        assert_int_equal(a->engines.copy_engines, 3);
        assert_int_equal(a->engines.decoders, 2);
        assert_int_equal(a->engines.encoders, 1);
        assert_int_equal(a->engines.jpeg_engines, 4);
        assert_int_equal(a->engines.ofa_engines, 5);
        assert_string_equal(g.placements[1].dra_name, "gpu-5-mig-3g20gb-9-0");
        assert_int_equal(g.placements[1].placement_start, 0);
        const struct kdev_nvidia_placement *c = &g.placements[2];
        assert_string_equal(c->profile, "");
        assert_string_equal(c->dra_name, "");
        assert_int_equal(c->dra_name_error, -EINVAL);
        assert_int_equal(c->gi_profile_id, 19);
        assert_int_equal(c->placement_start, 6);
        assert_int_equal(c->placement_size, 1);
        assert_true(c->memory_bytes == 4864ULL << 20);

        /* called again: replaced, not added to; no placement: none */
        p.n_profiles = 1;
        p.profiles[0].n_placements = 1;
        assert_int_equal(kdev_nvidia_gpu_placements_from(&p, &g, &err), 0);
        assert_int_equal(g.n_placements, 1);
        assert_int_equal(g.memory_slices, 8);
        assert_string_equal(g.placements[0].dra_name, "gpu-5-mig-3g20gb-9-4");
        p.n_profiles = 0;
        assert_int_equal(kdev_nvidia_gpu_placements_from(&p, &g, &err), 0);
        assert_null(g.placements);
        assert_int_equal(g.n_placements, 0);
        assert_int_equal(g.memory_slices, 0);
}

/* kdev-dra-plugin's backend on the mock: 4x A100-40GB, GPUs 0-2 in MIG mode. */
static void test_dra_backend_mock(void **state)
{
        (void)state;
        struct kdev_nvidia_dra_backend *b = NULL;
        struct kdev_err err = {0};
        struct kdev_nvidia_dra_backend_options o = {.nvml_library = KDEV_MOCK_NVML_LIB};
        struct kdev_nvidia_config cfg;
        uv_loop_t loop;

        setenv("KDEV_MOCK_NVML_TOPOLOGY", TOPO("mig-a100-40gb.yaml"), 1);
        assert_int_equal(kdev_nvidia_dra_backend_open(&o, &b, &err), 0);
        const struct kdev_nvidia_gpus *r = kdev_nvidia_dra_backend_gpus(b);
        assert_string_equal(r->driver_version, "550.90.07");
        assert_int_equal(r->cuda_driver_version, 12040);
        assert_int_equal(r->n_gpus, 4);
        assert_true(r->gpus[0].mig_enabled);
        assert_int_equal(r->gpus[0].n_migs, 4);
        assert_string_equal(r->gpus[0].migs[0].uuid, "MIG-59bcc04e-5cf6-b753-ab18-f13e8543556f");
        assert_string_equal(r->gpus[0].migs[0].dra_name, "gpu-0-mig-3g20gb-9-4");
        assert_true(r->gpus[2].mig_enabled);
        assert_int_equal(r->gpus[2].n_migs, 0);
        assert_false(r->gpus[3].mig_enabled);
        assert_string_equal(r->gpus[3].uuid, "GPU-49c5ccb8-7f8c-230b-4fe7-33825480cfa5");
        assert_string_equal(r->gpus[3].dra_name, "gpu-3");
        assert_string_equal(r->gpus[3].architecture, "Ampere");

        /* the monitor's devices: the whole GPUs, by GPU UUID */
        assert_null(kdev_nvidia_dra_backend_find(b, "GPU-49c5ccb8-7f8c-230b-4fe7-33825480cfa5"));
        assert_int_equal(uv_loop_init(&loop), 0);
        assert_int_equal(kdev_nvidia_dra_backend_health_start(b, &loop, NULL, NULL, NULL, &err),
                         -EINVAL);
        assert_string_equal(err.msg, "health: no devices built");
        assert_int_equal(kdev_nvidia_config_init(&cfg, &err), 0);
        cfg.mig_strategy = KDEV_NVIDIA_MIG_NONE;
        assert_int_equal(kdev_nvidia_config_finish(&cfg, false, &err), 0);
        assert_int_equal(kdev_nvidia_dra_backend_health_init(b, &cfg, &err), 0);
        for (size_t i = 0; i < r->n_gpus; i++) {
                const struct kdev_physical *p = kdev_nvidia_dra_backend_find(b, r->gpus[i].uuid);
                assert_non_null(p);
                assert_string_equal(p->id, r->gpus[i].uuid);
        }
        assert_null(kdev_nvidia_dra_backend_find(b, "MIG-59bcc04e-5cf6-b753-ab18-f13e8543556f"));
        assert_null(kdev_nvidia_dra_backend_find(b, "GPU-nope"));
        err = (struct kdev_err){0};
        assert_int_equal(kdev_nvidia_dra_backend_health_init(b, &cfg, &err), -EALREADY);
        kdev_nvidia_config_clear(&cfg);
        kdev_nvidia_dra_backend_health_stop(b); /* none runs: nothing to do */
        kdev_nvidia_dra_backend_free(b);
        assert_int_equal(uv_loop_close(&loop), 0);
        kdev_nvidia_dra_backend_free(NULL);

        /* no library: the loader's error, nothing left open */
        o.nvml_library = "/nonexistent/libnvidia-ml.so.1";
        b = (void *)1;
        err = (struct kdev_err){0};
        assert_int_equal(kdev_nvidia_dra_backend_open(&o, &b, &err), -EOPNOTSUPP);
        assert_null(b);
        assert_string_equal(err.msg, "NVML library /nonexistent/libnvidia-ml.so.1 not found: "
                                     "/nonexistent/libnvidia-ml.so.1: cannot open shared "
                                     "object file: No such file or directory");
        unsetenv("KDEV_MOCK_NVML_TOPOLOGY");
}

#define DYN_GPU0 "GPU-3e5f7a9b-1c2d-4e3f-8a5b-6c7d8e9f0a1b"
#define DYN_GPU1 "GPU-5a7b9c1d-3e4f-4a5b-9c6d-7e8f9a0b1c2d"
#define DYN_MIG_3G_AT_4 "MIG-0203dd0e-c32e-54df-94fa-fe2eda393992"

/* The 25 placements of an H100 80GB HBM3 in the mock (mock/nvml README,
 * "Placements"), profile index order: 1g.10gb (0x0) at 0..6, 2g.20gb (0x1)
 * at 0, 2, 4, 3g.40gb (0x2) at 0, 4, 4g.40gb (0x3) and 7g.80gb (0x4) at 0,
 * 1g.10gb+me (0x7) at 0..6, 1g.20gb (0x9) at 0, 2, 4, 6. */
static const char *const dyn_placements[] = {
        "gpu-0-mig-1g10gb-19-0",    "gpu-0-mig-1g10gb-19-1",    "gpu-0-mig-1g10gb-19-2",
        "gpu-0-mig-1g10gb-19-3",    "gpu-0-mig-1g10gb-19-4",    "gpu-0-mig-1g10gb-19-5",
        "gpu-0-mig-1g10gb-19-6",    "gpu-0-mig-2g20gb-14-0",    "gpu-0-mig-2g20gb-14-2",
        "gpu-0-mig-2g20gb-14-4",    "gpu-0-mig-3g40gb-9-0",     "gpu-0-mig-3g40gb-9-4",
        "gpu-0-mig-4g40gb-5-0",     "gpu-0-mig-7g80gb-0-0",     "gpu-0-mig-1g10gb-me-20-0",
        "gpu-0-mig-1g10gb-me-20-1", "gpu-0-mig-1g10gb-me-20-2", "gpu-0-mig-1g10gb-me-20-3",
        "gpu-0-mig-1g10gb-me-20-4", "gpu-0-mig-1g10gb-me-20-5", "gpu-0-mig-1g10gb-me-20-6",
        "gpu-0-mig-1g20gb-15-0",    "gpu-0-mig-1g20gb-15-2",    "gpu-0-mig-1g20gb-15-4",
        "gpu-0-mig-1g20gb-15-6",
};

static void check_dyn_placements(const struct kdev_nvidia_gpus *r)
{
        assert_int_equal(r->n_gpus, 3);
        const struct kdev_nvidia_gpu *g = &r->gpus[0];
        assert_string_equal(g->uuid, DYN_GPU0);
        assert_true(g->mig_enabled);
        assert_int_equal(g->n_placements, 25);
        assert_int_equal(g->memory_slices, 8);
        for (size_t i = 0; i < 25; i++) {
                assert_string_equal(g->placements[i].dra_name, dyn_placements[i]);
                assert_int_equal(g->placements[i].dra_name_error, 0);
        }
        const struct kdev_nvidia_placement *a = &g->placements[0];
        assert_string_equal(a->profile, "1g.10gb");
        assert_int_equal(a->gi_profile_id, 19);
        assert_int_equal(a->placement_start, 0);
        assert_int_equal(a->placement_size, 1);
        assert_true(a->memory_bytes == 9984ULL << 20);
        assert_int_equal(a->multiprocessors, 16);
        assert_int_equal(a->engines.copy_engines, 1);
        assert_int_equal(a->engines.decoders, 1);
        assert_int_equal(a->engines.encoders, 0);
        assert_int_equal(a->engines.jpeg_engines, 1);
        assert_int_equal(a->engines.ofa_engines, 0);
        const struct kdev_nvidia_placement *w = &g->placements[13];
        assert_string_equal(w->profile, "7g.80gb");
        assert_int_equal(w->gi_profile_id, 0);
        assert_int_equal(w->placement_size, 8);
        assert_int_equal(w->multiprocessors, 132);
        assert_int_equal(w->engines.copy_engines, 8);
        assert_int_equal(w->engines.ofa_engines, 1);
        assert_string_equal(g->placements[14].profile, "1g.10gb+me");
        assert_int_equal(g->placements[14].engines.decoders, 7);
        const struct kdev_nvidia_placement *z = &g->placements[24];
        assert_string_equal(z->profile, "1g.20gb");
        assert_int_equal(z->gi_profile_id, 15);
        assert_int_equal(z->placement_start, 6);
        assert_int_equal(z->placement_size, 2);
        assert_true(z->memory_bytes == 20096ULL << 20);
        assert_int_equal(z->multiprocessors, 26);
        assert_int_equal(z->engines.copy_engines, 1);
        assert_int_equal(z->engines.decoders, 1);
        assert_int_equal(z->engines.encoders, 0);
        assert_int_equal(z->engines.jpeg_engines, 1);
        assert_int_equal(z->engines.ofa_engines, 0);
        /* MIG off, not MIG capable: none */
        for (size_t i = 1; i < 3; i++) {
                assert_false(r->gpus[i].mig_enabled);
                assert_null(r->gpus[i].placements);
                assert_int_equal(r->gpus[i].n_placements, 0);
                assert_int_equal(r->gpus[i].memory_slices, 0);
        }
}

/* The mock on mig-h100-80gb-dynamic.yaml (GPU 0 MIG on and empty, GPU 1
 * MIG off, GPU 2 not MIG capable), and backend options on it. */
struct dyn_fx {
        struct mock_nvml m;
        char sysfs[64];
        struct kdev_nvidia_dra_backend_options o;
};

static void dyn_open(struct dyn_fx *f)
{
        assert_int_equal(mock_nvml_open(&f->m), 0);
        assert_int_equal(mock_tmpdir(f->sysfs, sizeof(f->sysfs), "kdev-nvidia-dynmig"), 0);
        mock_nvml_load(&f->m, TOPO("mig-h100-80gb-dynamic.yaml"), f->sysfs);
        f->o = (struct kdev_nvidia_dra_backend_options){.nvml_library = KDEV_MOCK_NVML_LIB,
                                                        .sysfs_root = f->sysfs};
}

static void dyn_close(struct dyn_fx *f)
{
        mock_rmtree(f->sysfs);
        mock_nvml_close(&f->m);
        unsetenv("KDEV_MOCK_NVML_TOPOLOGY");
}

/* Placement records: none without dynamic MIG; with it, GPU 0's after open
 * and every rediscovery; a failing placement read fails open and
 * rediscover (the records as they were); MIG turned off: none. */
static void test_dra_backend_dynamic_placements(void **state)
{
        (void)state;
        struct dyn_fx f;
        struct kdev_nvidia_dra_backend *b = NULL;
        struct kdev_err err = {0};
        dyn_open(&f);

        assert_int_equal(kdev_nvidia_dra_backend_open(&f.o, &b, &err), 0);
        const struct kdev_nvidia_gpus *r = kdev_nvidia_dra_backend_gpus(b);
        assert_int_equal(r->n_gpus, 3);
        assert_true(r->gpus[0].mig_enabled);
        for (int pass = 0; pass < 2; pass++) {
                for (size_t i = 0; i < r->n_gpus; i++) {
                        assert_null(r->gpus[i].placements);
                        assert_int_equal(r->gpus[i].n_placements, 0);
                        assert_int_equal(r->gpus[i].memory_slices, 0);
                }
                assert_int_equal(kdev_nvidia_dra_backend_rediscover(b, &err), 0);
        }
        kdev_nvidia_dra_backend_free(b);

        f.o.dynamic_mig = true;
        assert_int_equal(kdev_nvidia_dra_backend_open(&f.o, &b, &err), 0);
        r = kdev_nvidia_dra_backend_gpus(b);
        check_dyn_placements(r);
        assert_int_equal(kdev_nvidia_dra_backend_rediscover(b, &err), 0);
        assert_ptr_equal(kdev_nvidia_dra_backend_gpus(b), r);
        check_dyn_placements(r);

        /* a placement read that fails: rediscover fails, the records stay */
        assert_int_equal(f.m.set_error(DYN_GPU0, "nvmlDeviceGetGpuInstancePossiblePlacements",
                                       NVML_ERROR_NO_PERMISSION),
                         NVML_SUCCESS);
        assert_int_equal(kdev_nvidia_dra_backend_rediscover(b, &err), -EACCES);
        assert_string_equal(err.msg, "GPU 0 (" DYN_GPU0 "): "
                                     "nvmlDeviceGetGpuInstancePossiblePlacements(19): "
                                     "Insufficient Permissions");
        check_dyn_placements(r);
        /* ... and open, with nothing left open */
        struct kdev_nvidia_dra_backend *b2 = (void *)1;
        err = (struct kdev_err){0};
        assert_int_equal(kdev_nvidia_dra_backend_open(&f.o, &b2, &err), -EACCES);
        assert_null(b2);
        assert_string_equal(err.msg, "GPU 0 (" DYN_GPU0 "): "
                                     "nvmlDeviceGetGpuInstancePossiblePlacements(19): "
                                     "Insufficient Permissions");
        assert_int_equal(f.m.set_error(DYN_GPU0, "nvmlDeviceGetGpuInstancePossiblePlacements",
                                       NVML_SUCCESS),
                         NVML_SUCCESS);

        /* GPU 0's MIG mode turned off: a rediscovery gives it none */
        assert_int_equal(f.m.set_mig_mode(DYN_GPU0, 0), NVML_SUCCESS);
        assert_int_equal(kdev_nvidia_dra_backend_rediscover(b, &err), 0);
        for (size_t i = 0; i < r->n_gpus; i++) {
                assert_false(r->gpus[i].mig_enabled);
                assert_null(r->gpus[i].placements);
                assert_int_equal(r->gpus[i].n_placements, 0);
                assert_int_equal(r->gpus[i].memory_slices, 0);
        }
        kdev_nvidia_dra_backend_free(b);
        dyn_close(&f);
}

/* MIG devices made, listed, seen by a rediscovery and destroyed through the
 * backend; the dynamic-MIG-off error. */
static void test_dra_backend_dynamic_mig_ops(void **state)
{
        (void)state;
        struct dyn_fx f;
        struct kdev_nvidia_dra_backend *b = NULL;
        struct kdev_err err = {0};
        struct kdev_nvidia_mig_made made = {.gi_id = 77};
        struct kdev_nvidia_mig_made list[4];
        size_t n = 99;
        bool gone = false;
        dyn_open(&f);

        /* opened without dynamic MIG: every call refused, nothing touched */
        assert_int_equal(kdev_nvidia_dra_backend_open(&f.o, &b, &err), 0);
        assert_int_equal(kdev_nvidia_dra_backend_mig_create(b, DYN_GPU0, 9, 4, &made, &err),
                         -EINVAL);
        assert_string_equal(err.msg, "dynamic MIG is off");
        assert_int_equal(made.gi_id, 77);
        err = (struct kdev_err){0};
        assert_int_equal(kdev_nvidia_dra_backend_mig_destroy(b, DYN_GPU0, 1, 0, &gone, &err),
                         -EINVAL);
        assert_string_equal(err.msg, "dynamic MIG is off");
        assert_false(gone);
        err = (struct kdev_err){0};
        assert_int_equal(kdev_nvidia_dra_backend_mig_list(b, DYN_GPU0, list, 4, &n, &err),
                         -EINVAL);
        assert_string_equal(err.msg, "dynamic MIG is off");
        assert_int_equal(n, 99);
        kdev_nvidia_dra_backend_free(b);

        f.o.dynamic_mig = true;
        assert_int_equal(kdev_nvidia_dra_backend_open(&f.o, &b, &err), 0);
        const struct kdev_nvidia_gpus *r = kdev_nvidia_dra_backend_gpus(b);
        assert_int_equal(r->gpus[0].n_migs, 0);
        assert_int_equal(kdev_nvidia_dra_backend_mig_list(b, DYN_GPU0, list, 4, &n, &err), 0);
        assert_int_equal(n, 0);

        /* 3g.40gb (id 9) at memory slice 4 */
        assert_int_equal(kdev_nvidia_dra_backend_mig_create(b, DYN_GPU0, 9, 4, &made, &err), 0);
        assert_int_equal(made.gi_id, 1);
        assert_int_equal(made.ci_id, 0);
        assert_int_equal(made.gi_profile_id, 9);
        assert_int_equal(made.placement_start, 4);
        assert_int_equal(made.placement_size, 4);
        assert_string_equal(made.uuid, DYN_MIG_3G_AT_4);
        memset(list, 0xa5, sizeof(list));
        assert_int_equal(kdev_nvidia_dra_backend_mig_list(b, DYN_GPU0, list, 4, &n, &err), 0);
        assert_int_equal(n, 1);
        assert_int_equal(list[0].gi_id, 1);
        assert_int_equal(list[0].ci_id, 0);
        assert_int_equal(list[0].gi_profile_id, 9);
        assert_int_equal(list[0].placement_start, 4);
        assert_int_equal(list[0].placement_size, 4);
        assert_string_equal(list[0].uuid, DYN_MIG_3G_AT_4);
        assert_memory_equal(&list[0], &made, sizeof(made));
        /* no room: the count, -E2BIG */
        n = 0;
        assert_int_equal(kdev_nvidia_dra_backend_mig_list(b, DYN_GPU0, NULL, 0, &n, &err),
                         -E2BIG);
        assert_int_equal(n, 1);
        assert_string_equal(err.msg, "GPU " DYN_GPU0 ": 1 MIG devices, room for 0");
        /* an overlap, no such placement: kdev_nvml_mig_create's errors unchanged */
        struct kdev_nvidia_mig_made other;
        assert_int_equal(kdev_nvidia_dra_backend_mig_create(b, DYN_GPU0, 19, 5, &other, &err),
                         -EIO);
        assert_string_equal(err.msg, "GPU 0 (" DYN_GPU0 "): create GPU instance profile 19 "
                                     "placement 5: Ran out of critical resources, other "
                                     "than memory");
        assert_int_equal(kdev_nvidia_dra_backend_mig_create(b, DYN_GPU0, 9, 5, &other, &err),
                         -EINVAL);
        assert_string_equal(err.msg,
                            "GPU 0 (" DYN_GPU0 "): GPU instance profile 9 has no placement at 5");

        /* the records refilled: placements as before, the new MIG device */
        assert_int_equal(r->gpus[0].n_migs, 0);
        assert_int_equal(kdev_nvidia_dra_backend_rediscover(b, &err), 0);
        assert_ptr_equal(kdev_nvidia_dra_backend_gpus(b), r);
        check_dyn_placements(r);
        assert_int_equal(r->gpus[0].n_migs, 1);
        const struct kdev_nvidia_mig *mg = &r->gpus[0].migs[0];
        assert_string_equal(mg->uuid, DYN_MIG_3G_AT_4);
        assert_string_equal(mg->dra_name, "gpu-0-mig-3g40gb-9-4");
        assert_string_equal(mg->profile, "3g.40gb");
        assert_int_equal(mg->gi_id, 1);
        assert_int_equal(mg->ci_id, 0);
        assert_int_equal(mg->placement_start, 4);
        assert_int_equal(mg->placement_size, 4);

        /* destroy, destroy again, none left */
        gone = true;
        assert_int_equal(kdev_nvidia_dra_backend_mig_destroy(b, DYN_GPU0, made.gi_id,
                                                             made.ci_id, &gone, &err),
                         0);
        assert_false(gone);
        assert_int_equal(kdev_nvidia_dra_backend_mig_destroy(b, DYN_GPU0, made.gi_id,
                                                             made.ci_id, &gone, &err),
                         0);
        assert_true(gone);
        assert_int_equal(kdev_nvidia_dra_backend_mig_list(b, DYN_GPU0, list, 4, &n, &err), 0);
        assert_int_equal(n, 0);
        assert_int_equal(kdev_nvidia_dra_backend_rediscover(b, &err), 0);
        assert_int_equal(r->gpus[0].n_migs, 0);
        assert_int_equal(r->gpus[0].n_placements, 25);

        /* a GPU instance without compute instance (a kill between the two
         * creations): listed with KDEV_NVIDIA_NO_INSTANCE, destroyed alone */
        {
                const struct kdev_nvml_api *nv = kdev_nvml_api(f.m.lib);
                nvmlDevice_t g0;
                nvmlGpuInstance_t gi;
                nvmlGpuInstancePlacement_t pl = {.start = 0, .size = 1};

                assert_int_equal(nv->nvmlInit(), NVML_SUCCESS);
                assert_int_equal(nv->nvmlDeviceGetHandleByIndex(0, &g0), NVML_SUCCESS);
                assert_int_equal(nv->nvmlDeviceCreateGpuInstanceWithPlacement(g0, 19, &pl, &gi),
                                 NVML_SUCCESS);
                assert_int_equal(nv->nvmlShutdown(), NVML_SUCCESS);
        }
        assert_int_equal(kdev_nvidia_dra_backend_mig_list(b, DYN_GPU0, list, 4, &n, &err), 0);
        assert_int_equal(n, 1);
        assert_int_equal(list[0].gi_id, 1);
        assert_int_equal(list[0].ci_id, KDEV_NVIDIA_NO_INSTANCE);
        assert_int_equal(list[0].gi_profile_id, 19);
        assert_int_equal(list[0].placement_start, 0);
        assert_int_equal(list[0].placement_size, 1);
        assert_string_equal(list[0].uuid, "");
        assert_int_equal(kdev_nvidia_dra_backend_mig_destroy(b, DYN_GPU0, 1,
                                                             KDEV_NVIDIA_NO_INSTANCE, &gone,
                                                             &err),
                         0);
        assert_false(gone);
        assert_int_equal(kdev_nvidia_dra_backend_mig_list(b, DYN_GPU0, list, 4, &n, &err), 0);
        assert_int_equal(n, 0);

        /* GPU 1 (MIG off): kdev_nvml's error unchanged */
        assert_int_equal(kdev_nvidia_dra_backend_mig_list(b, DYN_GPU1, list, 4, &n, &err),
                         -EOPNOTSUPP);
        assert_string_equal(err.msg, "GPU 1 (" DYN_GPU1 "): MIG mode is disabled");

        kdev_nvidia_dra_backend_free(b);
        dyn_close(&f);
}

int main(void)
{
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_records_from_set),
                cmocka_unit_test(test_placements_from),
                cmocka_unit_test(test_dra_backend_mock),
                cmocka_unit_test(test_dra_backend_dynamic_placements),
                cmocka_unit_test(test_dra_backend_dynamic_mig_ops),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
