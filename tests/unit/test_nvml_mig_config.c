/* Dynamic MIG through NVML (nvml/mig_config.h) against the mock with
 * mig-h100-80gb-dynamic.yaml: GPU 0 MIG on and empty, GPU 1 MIG off, GPU 2
 * not MIG capable. Exact placements, ids, UUIDs and error texts. */
#define _XOPEN_SOURCE 700
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
#include "nvml/mig_config.h"

#define GPU0 "GPU-3e5f7a9b-1c2d-4e3f-8a5b-6c7d8e9f0a1b"
#define GPU1 "GPU-5a7b9c1d-3e4f-4a5b-9c6d-7e8f9a0b1c2d"
#define GPU2 "GPU-7c9d1e3f-5a6b-4c7d-8e9f-0a1b2c3d4e5f"
#define MIG_3G_AT_4 "MIG-0203dd0e-c32e-54df-94fa-fe2eda393992"

struct fx {
        struct mock_nvml m;
        char sysfs[64];
};

static int setup(void **state)
{
        struct fx *f = calloc(1, sizeof(*f));
        if (!f || mock_nvml_open(&f->m) != 0 ||
            mock_tmpdir(f->sysfs, sizeof(f->sysfs), "kdev-nvml-migcfg") != 0)
                return -1;
        mock_nvml_load(&f->m, TOPO("mig-h100-80gb-dynamic.yaml"), f->sysfs);
        *state = f;
        return 0;
}

static int teardown(void **state)
{
        struct fx *f = *state;
        mock_rmtree(f->sysfs);
        mock_nvml_close(&f->m);
        free(f);
        return 0;
}

static const struct kdev_nvml_mig_profile *profile(const struct kdev_nvml_mig_placements *p,
                                                   unsigned index)
{
        for (size_t i = 0; i < p->n_profiles; i++)
                if (p->profiles[i].index == index)
                        return &p->profiles[i];
        fail_msg("no profile index 0x%x", index);
        return NULL;
}

static void check_placements(const struct kdev_nvml_mig_profile *p, unsigned id,
                             unsigned slices, unsigned long long mib, unsigned n,
                             const unsigned *starts, unsigned size)
{
        assert_int_equal(p->info.id, id);
        assert_int_equal(p->info.sliceCount, slices);
        assert_int_equal(p->info.memorySizeMB, mib);
        assert_int_equal(p->n_placements, n);
        for (unsigned i = 0; i < n; i++) {
                assert_int_equal(p->placements[i].start, starts[i]);
                assert_int_equal(p->placements[i].size, size);
        }
}

static void test_placements(void **state)
{
        struct fx *f = *state;
        struct kdev_nvml_mig_placements p;
        struct kdev_err e;
        kdev_err_clear(&e);
        assert_int_equal(kdev_nvml_mig_placements(f->m.lib, "0", &p, &e), 0);
        assert_int_equal(kdev_nvml_refs(f->m.lib), 0);
        assert_int_equal(p.gpu_index, 0);
        assert_string_equal(p.uuid, GPU0);
        assert_int_equal(p.memory_ret, NVML_SUCCESS);
        assert_int_equal(p.memory_total, 81559ull << 20);
        /* profile indices 0x0, 0x1, 0x2, 0x3, 0x4, 0x7, 0x9, in index order */
        static const unsigned indices[] = { 0x0, 0x1, 0x2, 0x3, 0x4, 0x7, 0x9 };
        assert_int_equal(p.n_profiles, 7);
        for (size_t i = 0; i < 7; i++)
                assert_int_equal(p.profiles[i].index, indices[i]);
        static const unsigned s1g[] = { 0, 1, 2, 3, 4, 5, 6 };
        check_placements(profile(&p, NVML_GPU_INSTANCE_PROFILE_1_SLICE), 19, 1, 9984, 7, s1g,
                         1);
        static const unsigned s3g[] = { 0, 4 };
        check_placements(profile(&p, NVML_GPU_INSTANCE_PROFILE_3_SLICE), 9, 3, 40448, 2, s3g,
                         4);
        static const unsigned s7g[] = { 0 };
        check_placements(profile(&p, NVML_GPU_INSTANCE_PROFILE_7_SLICE), 0, 7, 81152, 1, s7g,
                         8);
        static const unsigned s2g[] = { 0, 2, 4 };
        check_placements(profile(&p, NVML_GPU_INSTANCE_PROFILE_2_SLICE), 14, 2, 20096, 3, s2g,
                         2);

        /* by UUID: the same answer */
        struct kdev_nvml_mig_placements q;
        assert_int_equal(kdev_nvml_mig_placements(f->m.lib, GPU0, &q, &e), 0);
        assert_memory_equal(&p, &q, sizeof(p));
}

static void test_mig_off_and_not_capable(void **state)
{
        struct fx *f = *state;
        struct kdev_nvml_mig_placements p;
        struct kdev_nvml_mig_instance m;
        struct kdev_nvml_mig_instances l;
        struct kdev_err e;
        kdev_err_clear(&e);
        assert_int_equal(kdev_nvml_mig_placements(f->m.lib, "1", &p, &e), -EOPNOTSUPP);
        assert_string_equal(e.msg, "GPU 1 (" GPU1 "): MIG mode is disabled");
        assert_int_equal(kdev_nvml_mig_create(f->m.lib, GPU1, 9, 0, &m, &e), -EOPNOTSUPP);
        assert_string_equal(e.msg, "GPU 1 (" GPU1 "): MIG mode is disabled");
        assert_int_equal(kdev_nvml_mig_instances(f->m.lib, "1", &l, &e), -EOPNOTSUPP);
        assert_string_equal(e.msg, "GPU 1 (" GPU1 "): MIG mode is disabled");
        assert_int_equal(kdev_nvml_mig_placements(f->m.lib, "2", &p, &e), -EOPNOTSUPP);
        assert_string_equal(e.msg, "GPU 2 (" GPU2 "): MIG is not supported");
        bool gone = true;
        assert_int_equal(kdev_nvml_mig_destroy(f->m.lib, GPU2, 1, 0, &gone, &e), -EOPNOTSUPP);
        assert_string_equal(e.msg, "GPU 2 (" GPU2 "): MIG is not supported");
        assert_int_equal(kdev_nvml_mig_placements(f->m.lib, "7", &p, &e), -EINVAL);
        assert_string_equal(e.msg, "GPU 7: nvmlDeviceGetHandleByIndex: Invalid Argument");
        assert_int_equal(kdev_nvml_mig_placements(f->m.lib, "GPU-nope", &p, &e), -ENOENT);
        assert_string_equal(e.msg, "GPU GPU-nope: nvmlDeviceGetHandleByUUID: Not Found");
        assert_int_equal(kdev_nvml_refs(f->m.lib), 0);
}

static void test_create_list_destroy(void **state)
{
        struct fx *f = *state;
        struct kdev_nvml_mig_instance m;
        struct kdev_nvml_mig_instances l;
        struct kdev_err e;
        kdev_err_clear(&e);

        /* empty at first */
        assert_int_equal(kdev_nvml_mig_instances(f->m.lib, "0", &l, &e), 0);
        assert_int_equal(l.gpu_index, 0);
        assert_string_equal(l.uuid, GPU0);
        assert_int_equal(l.n, 0);

        /* 3g.40gb (id 9) at memory slice 4 */
        int rc = kdev_nvml_mig_create(f->m.lib, "0", 9, 4, &m, &e);
        assert_int_equal(rc, 0);
        assert_int_equal(kdev_nvml_refs(f->m.lib), 0);
        assert_int_equal(m.gi_id, 1);
        assert_int_equal(m.gi_profile_id, 9);
        assert_int_equal(m.gi_profile_index, NVML_GPU_INSTANCE_PROFILE_3_SLICE);
        assert_int_equal(m.gi_placement.start, 4);
        assert_int_equal(m.gi_placement.size, 4);
        assert_int_equal(m.ci_id, 0);
        assert_int_equal(m.ci_profile_id, NVML_COMPUTE_INSTANCE_PROFILE_3_SLICE);
        assert_int_equal(m.ci_placement.start, 0);
        assert_int_equal(m.ci_placement.size, 3);
        assert_int_equal(m.mig_index, 0);
        assert_string_equal(m.uuid, MIG_3G_AT_4);

        /* the MIG device is a real NVML device now */
        const struct kdev_nvml_api *api = kdev_nvml_api(f->m.lib);
        assert_int_equal(kdev_nvml_init(f->m.lib, &e), 0);
        nvmlDevice_t h = NULL;
        assert_int_equal(api->nvmlDeviceGetHandleByUUID(MIG_3G_AT_4, &h), NVML_SUCCESS);
        char name[96];
        assert_int_equal(api->nvmlDeviceGetName(h, name, sizeof(name)), NVML_SUCCESS);
        assert_string_equal(name, "NVIDIA H100 80GB HBM3 MIG 3g.40gb");
        assert_int_equal(kdev_nvml_shutdown(f->m.lib, &e), 0);

        /* the instance list */
        assert_int_equal(kdev_nvml_mig_instances(f->m.lib, GPU0, &l, &e), 0);
        assert_int_equal(l.n, 1);
        assert_memory_equal(&l.items[0], &m, sizeof(m));

        /* 1g.10gb (id 19) at slice 5 overlaps it; 3g at 5 is no placement */
        struct kdev_nvml_mig_instance o;
        rc = kdev_nvml_mig_create(f->m.lib, "0", 19, 5, &o, &e);
        assert_int_equal(rc, -EIO);
        assert_string_equal(e.msg, "GPU 0 (" GPU0 "): create GPU instance profile 19 "
                                   "placement 5: Ran out of critical resources, other than "
                                   "memory");
        assert_int_equal(kdev_nvml_mig_create(f->m.lib, "0", 9, 5, &o, &e), -EINVAL);
        assert_string_equal(e.msg,
                            "GPU 0 (" GPU0 "): GPU instance profile 9 has no placement at 5");
        assert_int_equal(kdev_nvml_mig_create(f->m.lib, "0", 99, 0, &o, &e), -EINVAL);
        assert_string_equal(e.msg, "GPU 0 (" GPU0 "): no GPU instance profile with id 99");

        /* a second instance: 1g.10gb at slice 0, GI id 2 */
        rc = kdev_nvml_mig_create(f->m.lib, GPU0, 19, 0, &o, &e);
        assert_int_equal(rc, 0);
        assert_int_equal(o.gi_id, 2);
        assert_int_equal(o.ci_id, 0);
        assert_int_equal(o.gi_placement.start, 0);
        assert_int_equal(o.gi_placement.size, 1);
        assert_int_equal(o.ci_profile_id, NVML_COMPUTE_INSTANCE_PROFILE_1_SLICE);
        assert_int_equal(o.mig_index, 1);
        assert_int_equal(strncmp(o.uuid, "MIG-", 4), 0);
        assert_string_not_equal(o.uuid, m.uuid);
        assert_int_equal(kdev_nvml_mig_instances(f->m.lib, "0", &l, &e), 0);
        assert_int_equal(l.n, 2);
        assert_memory_equal(&l.items[0], &m, sizeof(m));
        assert_memory_equal(&l.items[1], &o, sizeof(o));

        /* destroy: gone, then again 0 with |gone| */
        bool gone = true;
        assert_int_equal(kdev_nvml_mig_destroy(f->m.lib, "0", m.gi_id, m.ci_id, &gone, &e), 0);
        assert_false(gone);
        assert_int_equal(kdev_nvml_refs(f->m.lib), 0);
        assert_int_equal(kdev_nvml_mig_instances(f->m.lib, "0", &l, &e), 0);
        assert_int_equal(l.n, 1);
        assert_memory_equal(&l.items[0], &o, sizeof(o));
        assert_int_equal(kdev_nvml_init(f->m.lib, &e), 0);
        assert_int_equal(api->nvmlDeviceGetHandleByUUID(MIG_3G_AT_4, &h), NVML_ERROR_NOT_FOUND);
        assert_int_equal(kdev_nvml_shutdown(f->m.lib, &e), 0);
        assert_int_equal(kdev_nvml_mig_destroy(f->m.lib, "0", m.gi_id, m.ci_id, &gone, &e), 0);
        assert_true(gone);
        assert_int_equal(kdev_nvml_mig_destroy(f->m.lib, "0", m.gi_id, m.ci_id, NULL, &e), 0);

        /* the same placement again: the same ids and UUID */
        assert_int_equal(kdev_nvml_mig_create(f->m.lib, "0", 9, 4, &o, &e), 0);
        assert_memory_equal(&o, &m, sizeof(m));
        assert_int_equal(kdev_nvml_mig_destroy(f->m.lib, "0", 1, 0, &gone, &e), 0);
        assert_int_equal(kdev_nvml_mig_destroy(f->m.lib, "0", 2, 0, &gone, &e), 0);
        assert_false(gone);
        assert_int_equal(kdev_nvml_mig_instances(f->m.lib, "0", &l, &e), 0);
        assert_int_equal(l.n, 0);
}

/* A compute instance that cannot be made takes its GPU instance along. */
static void test_ci_failure_rolls_back(void **state)
{
        struct fx *f = *state;
        struct kdev_nvml_mig_instance m;
        struct kdev_nvml_mig_instances l;
        struct kdev_err e;
        kdev_err_clear(&e);
        assert_int_equal(f->m.set_error(GPU0, "nvmlGpuInstanceCreateComputeInstance",
                                        NVML_ERROR_NO_PERMISSION),
                         NVML_SUCCESS);
        assert_int_equal(kdev_nvml_mig_create(f->m.lib, "0", 0, 0, &m, &e), -EACCES);
        assert_string_equal(e.msg, "GPU 0 (" GPU0 "): create compute instance profile 4 in "
                                   "GPU instance 0: Insufficient Permissions");
        assert_int_equal(f->m.set_error(GPU0, "nvmlGpuInstanceCreateComputeInstance",
                                        NVML_SUCCESS),
                         NVML_SUCCESS);
        assert_int_equal(kdev_nvml_mig_instances(f->m.lib, "0", &l, &e), 0);
        assert_int_equal(l.n, 0);
        /* 7g.80gb now succeeds: GI id 0 (whole GPU), CI profile 4 */
        assert_int_equal(kdev_nvml_mig_create(f->m.lib, "0", 0, 0, &m, &e), 0);
        assert_int_equal(m.gi_id, 0);
        assert_int_equal(m.ci_id, 0);
        assert_int_equal(m.ci_profile_id, NVML_COMPUTE_INSTANCE_PROFILE_7_SLICE);
        assert_int_equal(m.gi_placement.size, 8);
        assert_int_equal(kdev_nvml_mig_destroy(f->m.lib, "0", 0, 0, NULL, &e), 0);
}

int main(void)
{
        const struct CMUnitTest tests[] = {
                cmocka_unit_test_setup_teardown(test_placements, setup, teardown),
                cmocka_unit_test_setup_teardown(test_mig_off_and_not_capable, setup, teardown),
                cmocka_unit_test_setup_teardown(test_create_list_destroy, setup, teardown),
                cmocka_unit_test_setup_teardown(test_ci_failure_rolls_back, setup, teardown),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
