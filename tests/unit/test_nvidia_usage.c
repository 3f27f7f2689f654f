/* The usage sampler (src/nvidia/usage.h) on the mock NVML: utilization,
 * memory and running processes per GPU and MIG device, driven from the
 * mock's control file (mock/nvml/README.md: `util`, `proc`, `proc-exit`). */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "nvidia/usage.h"

#define TOPO(f) KDEV_MOCK_NVML_TOPOLOGIES "/" f
#define GPU0 "GPU-c1ae70ed-64b5-7842-b2ed-e9039613ae69"
#define MIG00 "MIG-59bcc04e-5cf6-b753-ab18-f13e8543556f"
#define GPU3 "GPU-49c5ccb8-7f8c-230b-4fe7-33825480cfa5"
#define MIB (1024ull * 1024)

static char control[64];

static void ctl(const char *line)
{
        FILE *f = fopen(control, "a");
        assert_non_null(f);
        fprintf(f, "%s\n", line);
        fclose(f);
}

static int setup(void **state)
{
        (void)state;
        strcpy(control, "/tmp/kdev-usage-ctl-XXXXXX");
        int fd = mkstemp(control);
        if (fd < 0)
                return -1;
        close(fd);
        setenv("KDEV_MOCK_NVML_TOPOLOGY", TOPO("mig-a100-40gb.yaml"), 1);
        setenv("KDEV_MOCK_NVML_CONTROL", control, 1);
        return 0;
}

static int teardown(void **state)
{
        (void)state;
        unlink(control);
        return 0;
}

static void test_sample(void **state)
{
        (void)state;
        struct kdev_nvidia_usage *u = NULL;
        struct kdev_err err = {0};
        assert_int_equal(kdev_nvidia_usage_new(NULL, KDEV_MOCK_NVML_LIB, &u, &err), 0);

        /* NVML that does not initialise: an error, and nothing kept open */
        ctl("init-error DRIVER_NOT_LOADED");
        struct kdev_usage_snapshot s = {0};
        assert_int_equal(kdev_nvidia_usage_sample(u, &s, &err), -ENODEV);
        assert_string_equal(err.msg, "nvml init failed: Driver Not Loaded");
        assert_int_equal(s.n_devices, 0);
        ctl("init-error SUCCESS");

        ctl("util " GPU3 " 73 12");
        ctl("proc " GPU3 " 4242 1073741824 55");
        ctl("proc " GPU3 " 4243 2147483648");
        ctl("proc " MIG00 " 777 104857600");
        assert_int_equal(kdev_nvidia_usage_sample(u, &s, &err), 0);
        /* GPU 0 and 1 in MIG mode with 4 MIG devices each, GPU 2 in MIG mode
         * with none, GPU 3 whole */
        assert_int_equal(s.n_devices, 12);
        assert_true(s.taken > 1.7e9);

        const struct kdev_usage_device *g0 = &s.devices[0];
        assert_string_equal(g0->uuid, GPU0);
        assert_string_equal(g0->parent_uuid, "");
        assert_string_equal(g0->model, "NVIDIA A100-SXM4-40GB");
        assert_string_equal(g0->pci_bus_id, "00000000:07:00.0");
        assert_int_equal(g0->gi, KDEV_USAGE_NONE);
        assert_false(g0->procs_known); /* listed under its MIG devices */
        assert_int_equal(g0->n_procs, 0);

        const struct kdev_usage_device *m = &s.devices[1];
        assert_string_equal(m->uuid, MIG00);
        assert_string_equal(m->parent_uuid, GPU0);
        assert_int_equal(m->index, 0);
        assert_int_equal(m->minor, 0);
        assert_string_equal(m->pci_bus_id, "00000000:07:00.0");
        assert_string_equal(m->model, "NVIDIA A100-SXM4-40GB");
        assert_string_equal(m->profile, "3g.20gb");
        assert_int_equal(m->gi, 2);
        assert_int_equal(m->util, KDEV_USAGE_NONE);
        assert_true(m->have_memory);
        assert_int_equal(m->mem_total, 19968 * MIB);
        assert_int_equal(m->mem_used, 100 * MIB);
        assert_int_equal(m->mem_free, 19868 * MIB);
        assert_true(m->procs_known);
        assert_int_equal(m->n_procs, 1);
        assert_int_equal(m->procs[0].pid, 777);
        assert_int_equal(m->procs[0].used, 100 * MIB);
        assert_int_equal(m->procs[0].sm_util, KDEV_USAGE_NONE);
        assert_string_equal(s.devices[2].profile, "2g.10gb");
        assert_int_equal(s.devices[2].n_procs, 0);

        const struct kdev_usage_device *g3 = &s.devices[11];
        assert_string_equal(g3->uuid, GPU3);
        assert_int_equal(g3->index, 3);
        assert_int_equal(g3->minor, 3);
        assert_int_equal(g3->util, 73);
        assert_int_equal(g3->mem_util, 12);
        assert_int_equal(g3->mem_total, 40960 * MIB);
        assert_int_equal(g3->mem_used, 3072 * MIB);
        assert_int_equal(g3->mem_free, 37888 * MIB);
        assert_int_equal(g3->n_procs, 2);
        assert_int_equal(g3->procs[0].pid, 4242);
        assert_int_equal(g3->procs[0].used, 1024 * MIB);
        assert_int_equal(g3->procs[0].sm_util, 55);
        assert_int_equal(g3->procs[1].pid, 4243);
        assert_int_equal(g3->procs[1].used, 2048 * MIB);
        assert_int_equal(g3->procs[1].sm_util, KDEV_USAGE_NONE);

        /* a process ends; another one's sample changes */
        ctl("proc-exit " GPU3 " 4242");
        ctl("proc " GPU3 " 4243 2147483648 9");
        assert_int_equal(kdev_nvidia_usage_sample(u, &s, &err), 0);
        g3 = &s.devices[11];
        assert_int_equal(g3->n_procs, 1);
        assert_int_equal(g3->procs[0].pid, 4243);
        assert_int_equal(g3->procs[0].sm_util, 9);
        assert_int_equal(g3->mem_used, 2048 * MIB);

        /* an NVML error on one entry point leaves that figure out only */
        ctl("error " GPU3 " nvmlDeviceGetComputeRunningProcesses NO_PERMISSION");
        assert_int_equal(kdev_nvidia_usage_sample(u, &s, &err), 0);
        g3 = &s.devices[11];
        assert_false(g3->procs_known);
        assert_int_equal(g3->n_procs, 0);
        assert_int_equal(g3->util, 73);
        kdev_usage_snapshot_clear(&s);
        kdev_nvidia_usage_free(u);
}

int main(void)
{
        const struct CMUnitTest tests[] = {
                cmocka_unit_test_setup_teardown(test_sample, setup, teardown),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
