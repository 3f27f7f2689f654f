/* The NVIDIA names of the GPU-instance profiles that
 * kdev_nvml_mig_placements reads (nvidia/mig.h
 * kdev_nvidia_mig_gi_profile_name), against the mock with
 * mig-h100-80gb-dynamic.yaml: the names nvidia-smi mig -lgip prints on an
 * H100 80GB HBM3. */
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
#include "nvidia/mig.h"
#include "nvml/mig_config.h"

static void test_profile_names(void **state)
{
        (void)state;
        struct mock_nvml m;
        char sysfs[64];
        assert_int_equal(mock_nvml_open(&m), 0);
        assert_int_equal(mock_tmpdir(sysfs, sizeof(sysfs), "kdev-nvidia-migcfg"), 0);
        mock_nvml_load(&m, TOPO("mig-h100-80gb-dynamic.yaml"), sysfs);
        struct kdev_nvml_mig_placements p;
        struct kdev_err e;
        kdev_err_clear(&e);
        assert_int_equal(kdev_nvml_mig_placements(m.lib, "0", &p, &e), 0);
        static const char *const names[] = { "1g.10gb", "2g.20gb", "3g.40gb", "4g.40gb",
                                             "7g.80gb", "1g.10gb+me", "1g.20gb" };
        assert_int_equal(p.n_profiles, 7);
        for (size_t i = 0; i < p.n_profiles; i++) {
                char buf[KDEV_NVIDIA_MIG_PROFILE_MAX];
                int n = kdev_nvidia_mig_gi_profile_name(&p.profiles[i], p.memory_total, buf,
                                                        sizeof(buf), &e);
                assert_int_equal(n, (int)strlen(names[i]));
                assert_string_equal(buf, names[i]);
        }
        /* a slice count no compute-instance profile has */
        struct kdev_nvml_mig_profile odd = p.profiles[0];
        odd.info.sliceCount = 5;
        char buf[KDEV_NVIDIA_MIG_PROFILE_MAX];
        assert_int_equal(kdev_nvidia_mig_gi_profile_name(&odd, p.memory_total, buf, sizeof(buf),
                                                         &e),
                         -EINVAL);
        assert_string_equal(e.msg, "no compute instance profile of 5 slices");
        mock_rmtree(sysfs);
        mock_nvml_close(&m);
}

int main(void)
{
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_profile_names),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
