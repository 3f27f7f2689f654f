/* kdev-plugin's usage families (src/metrics/plugin_metrics.h, "usage
 * metering"): dcgm-exporter's names and labels per device, kdev's
 * per-container families, unattributed use, failure counters, and the
 * series of a device that left. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "metrics/plugin_metrics.h"
#include "metrics_fixture.h"

/* the claim fields of a device plugin's map entry: none */
#define DEVICE_PLUGIN NULL, NULL, NULL, NULL, NULL

#define MIB (1024ull * 1024)

static struct kdev_usage_device *dev(struct kdev_usage_snapshot *s, const char *uuid,
                                     const char *parent, unsigned index, const char *bus)
{
        struct kdev_usage_device *d = kdev_usage_snapshot_add(s);
        assert_non_null(d);
        strcpy(d->uuid, uuid);
        strcpy(d->parent_uuid, parent);
        d->index = index;
        d->minor = index;
        strcpy(d->pci_bus_id, bus);
        strcpy(d->model, "NVIDIA A100-SXM4-40GB");
        d->have_memory = true;
        return d;
}

static void test_usage_series(void **state)
{
        (void)state;
        struct kdev_resource_set set = {0};
        struct kdev_err err = {0};
        struct kdev_plugin_metrics *pm = kdev_plugin_metrics_new(&set, NULL, NULL, &err);
        assert_non_null(pm);
        assert_int_equal(kdev_plugin_metrics_enable_usage(pm, "node-1", &err), 0);
        assert_int_equal(kdev_plugin_metrics_enable_usage(pm, "node-1", &err), -EINVAL);
        assert_string_equal(err.msg, "usage metrics enabled twice");

        /* before any sample: the families and the zero counters */
        char *t = render(pm);
        assert_line(t, "# TYPE DCGM_FI_DEV_GPU_UTIL gauge");
        assert_line(t, "kdev_usage_attribution_failures_total{reason=\"host\"} 0");
        assert_line(t, "kdev_usage_attribution_failures_total{reason=\"region\"} 0");
        assert_line(t, "kdev_usage_samples_total{result=\"ok\"} 0");
        free(t);

        struct kdev_usage_snapshot s = {0};
        struct kdev_usage_device *g0 = dev(&s, "GPU-a", "", 0, "00000000:07:00.0");
        g0->util = 40;
        g0->mem_util = 7;
        g0->mem_total = 40960 * MIB;
        g0->mem_used = 4096 * MIB + 5; /* DCGM reports whole MiB */
        g0->mem_free = 36864 * MIB - 5;
        struct kdev_usage_device *g1 = dev(&s, "GPU-b", "", 1, "00000000:0F:00.0");
        g1->mem_total = 40960 * MIB;
        g1->mem_used = 300 * MIB;
        g1->mem_free = 40660 * MIB;
        struct kdev_usage_device *m = dev(&s, "MIG-c", "GPU-b", 1, "00000000:0F:00.0");
        strcpy(m->profile, "3g.20gb");
        m->gi = 2;
        m->mem_total = 19968 * MIB;
        m->mem_used = 300 * MIB;
        m->mem_free = 19668 * MIB;
        s.taken = 1764700000.5;

        const char *ids_a[] = {"GPU-a::0", "GPU-a::3"}, *ids_b[] = {"GPU-a::1"},
                   *ids_m[] = {"MIG-c"};
        struct kdev_usage_container cs[] = {
                {"ml", "train-0", "trainer", NULL, NULL, "nvidia.com/gpu", ids_a, 2, NULL, DEVICE_PLUGIN},
                {"web", "infer-7", "server", NULL, NULL, "nvidia.com/gpu", ids_b, 1, NULL, DEVICE_PLUGIN},
                {"ml", "mig-0", "main", NULL, NULL, "nvidia.com/mig-3g.20gb", ids_m, 1, "/r", DEVICE_PLUGIN},
        };
        struct kdev_usage_pods pods = {cs, 3};
        struct kdev_usage_row rows[] = {
                {.device = 0, .container = 0, .replicas = 2, .used = 1024 * MIB,
                 .processes = 2, .sm_util = 30},
                {.device = 0, .container = 1, .replicas = 1, .used = 3000 * MIB,
                 .processes = 1, .sm_util = KDEV_USAGE_NONE},
                {.device = 2, .container = 2, .replicas = 1, .from_region = true,
                 .used = 256 * MIB, .limit = 19968 * MIB, .compute = 100, .processes = 1,
                 .sm_util = KDEV_USAGE_NONE},
        };
        struct kdev_usage_lost lost[] = {
                {.device = 0, .reason = KDEV_USAGE_UNATTRIBUTED_HOST, .processes = 1,
                 .used = 50 * MIB},
        };
        struct kdev_usage_report rep = {.rows = rows, .n_rows = 3, .lost = lost, .n_lost = 1,
                                        .failures = {1, 0, 0, 2}, .region_errors = 1};
        kdev_plugin_metrics_set_usage(pm, &s, &pods, &rep);
        t = render(pm);
        /* GPU-a is time-sliced between two containers: no pod labels */
        assert_line(t, "DCGM_FI_DEV_GPU_UTIL{gpu=\"0\",UUID=\"GPU-a\",pci_bus_id=\"00000000:07:00.0\","
                       "device=\"nvidia0\",modelName=\"NVIDIA A100-SXM4-40GB\",Hostname=\"node-1\","
                       "GPU_I_PROFILE=\"\",GPU_I_ID=\"\",namespace=\"\",pod=\"\",container=\"\"} 40");
        assert_line(t, "DCGM_FI_DEV_MEM_COPY_UTIL{gpu=\"0\",UUID=\"GPU-a\",pci_bus_id=\"00000000:07:00.0\","
                       "device=\"nvidia0\",modelName=\"NVIDIA A100-SXM4-40GB\",Hostname=\"node-1\","
                       "GPU_I_PROFILE=\"\",GPU_I_ID=\"\",namespace=\"\",pod=\"\",container=\"\"} 7");
        assert_line(t, "DCGM_FI_DEV_FB_USED{gpu=\"0\",UUID=\"GPU-a\",pci_bus_id=\"00000000:07:00.0\","
                       "device=\"nvidia0\",modelName=\"NVIDIA A100-SXM4-40GB\",Hostname=\"node-1\","
                       "GPU_I_PROFILE=\"\",GPU_I_ID=\"\",namespace=\"\",pod=\"\",container=\"\"} 4096");
        assert_line(t, "DCGM_FI_DEV_FB_FREE{gpu=\"0\",UUID=\"GPU-a\",pci_bus_id=\"00000000:07:00.0\","
                       "device=\"nvidia0\",modelName=\"NVIDIA A100-SXM4-40GB\",Hostname=\"node-1\","
                       "GPU_I_PROFILE=\"\",GPU_I_ID=\"\",namespace=\"\",pod=\"\",container=\"\"} 36863");
        /* the MIG device: its GPU's UUID, its profile and instance, its one holder */
        assert_line(t, "DCGM_FI_DEV_FB_USED{gpu=\"1\",UUID=\"GPU-b\",pci_bus_id=\"00000000:0F:00.0\","
                       "device=\"nvidia1\",modelName=\"NVIDIA A100-SXM4-40GB\",Hostname=\"node-1\","
                       "GPU_I_PROFILE=\"3g.20gb\",GPU_I_ID=\"2\",namespace=\"ml\",pod=\"mig-0\","
                       "container=\"main\"} 300");
        assert_line(t, "DCGM_FI_DEV_FB_TOTAL{gpu=\"1\",UUID=\"GPU-b\",pci_bus_id=\"00000000:0F:00.0\","
                       "device=\"nvidia1\",modelName=\"NVIDIA A100-SXM4-40GB\",Hostname=\"node-1\","
                       "GPU_I_PROFILE=\"3g.20gb\",GPU_I_ID=\"2\",namespace=\"ml\",pod=\"mig-0\","
                       "container=\"main\"} 19968");
        /* GPU-b itself has MIG devices: no FB series of its own, no utilization */
        assert_no(t, "GPU_I_ID=\"\",namespace=\"\",pod=\"\",container=\"\"} 300");
        assert_no(t, "DCGM_FI_DEV_GPU_UTIL{gpu=\"1\"");

        assert_line(t, "kdev_container_gpu_memory_used_bytes{namespace=\"ml\",pod=\"train-0\","
                       "container=\"trainer\",UUID=\"GPU-a\",gpu=\"0\",source=\"processes\"} 1073741824");
        assert_line(t, "kdev_container_gpu_memory_used_bytes{namespace=\"web\",pod=\"infer-7\","
                       "container=\"server\",UUID=\"GPU-a\",gpu=\"0\",source=\"processes\"} 3145728000");
        assert_line(t, "kdev_container_gpu_memory_used_bytes{namespace=\"ml\",pod=\"mig-0\","
                       "container=\"main\",UUID=\"MIG-c\",gpu=\"1\",source=\"region\"} 268435456");
        assert_line(t, "kdev_container_gpu_memory_limit_bytes{namespace=\"ml\",pod=\"mig-0\","
                       "container=\"main\",UUID=\"MIG-c\",gpu=\"1\"} 20937965568");
        assert_line(t, "kdev_container_gpu_compute_share_percent{namespace=\"ml\",pod=\"mig-0\","
                       "container=\"main\",UUID=\"MIG-c\",gpu=\"1\"} 100");
        assert_line(t, "kdev_container_gpu_replicas{namespace=\"ml\",pod=\"train-0\","
                       "container=\"trainer\",UUID=\"GPU-a\",gpu=\"0\",resource=\"nvidia.com/gpu\"} 2");
        assert_line(t, "kdev_container_gpu_sm_utilization_percent{namespace=\"ml\",pod=\"train-0\","
                       "container=\"trainer\",UUID=\"GPU-a\",gpu=\"0\"} 30");
        /* no limit, share or sample where there is none */
        assert_no(t, "kdev_container_gpu_memory_limit_bytes{namespace=\"ml\",pod=\"train-0\"");
        assert_no(t, "kdev_container_gpu_sm_utilization_percent{namespace=\"web\"");
        assert_line(t, "kdev_gpu_unattributed_memory_bytes{UUID=\"GPU-a\",gpu=\"0\",reason=\"host\"} 52428800");
        assert_line(t, "kdev_gpu_unattributed_processes{UUID=\"GPU-a\",gpu=\"0\",reason=\"host\"} 1");
        assert_line(t, "kdev_usage_attribution_failures_total{reason=\"host\"} 1");
        assert_line(t, "kdev_usage_attribution_failures_total{reason=\"no_cgroup\"} 2");
        assert_line(t, "kdev_usage_attribution_failures_total{reason=\"region\"} 1");
        assert_line(t, "kdev_usage_samples_total{result=\"ok\"} 1");
        assert_line(t, "kdev_usage_last_sample_timestamp_seconds 1764700000.5");
        free(t);

        /* a failed sample counts and keeps the series; the next good one
         * replaces them (GPU-a gone, counters add up) */
        kdev_plugin_metrics_set_usage(pm, NULL, NULL, NULL);
        kdev_usage_snapshot_clear(&s);
        struct kdev_usage_device *only = dev(&s, "GPU-b", "", 1, "00000000:0F:00.0");
        only->util = 5;
        s.taken = 1764700001;
        struct kdev_usage_report rep2 = {.failures = {1, 0, 0, 0}};
        kdev_plugin_metrics_set_usage(pm, &s, &pods, &rep2);
        t = render(pm);
        assert_line(t, "kdev_usage_samples_total{result=\"error\"} 1");
        assert_line(t, "kdev_usage_samples_total{result=\"ok\"} 2");
        assert_line(t, "kdev_usage_attribution_failures_total{reason=\"host\"} 2");
        assert_no(t, "UUID=\"GPU-a\"");
        assert_no(t, "kdev_container_gpu_memory_used_bytes{");
        assert_line(t, "DCGM_FI_DEV_GPU_UTIL{gpu=\"1\",UUID=\"GPU-b\",pci_bus_id=\"00000000:0F:00.0\","
                       "device=\"nvidia1\",modelName=\"NVIDIA A100-SXM4-40GB\",Hostname=\"node-1\","
                       "GPU_I_PROFILE=\"\",GPU_I_ID=\"\",namespace=\"\",pod=\"\",container=\"\"} 5");
        free(t);
        kdev_usage_snapshot_clear(&s);
        kdev_plugin_metrics_stop(pm, NULL, NULL);
}

/* Usage not enabled: setting usage changes nothing, no usage family renders. */
static void test_usage_off(void **state)
{
        (void)state;
        struct kdev_resource_set set = {0};
        struct kdev_plugin_metrics *pm = kdev_plugin_metrics_new(&set, NULL, NULL, NULL);
        assert_non_null(pm);
        struct kdev_usage_snapshot s = {0};
        kdev_plugin_metrics_set_usage(pm, &s, NULL, NULL);
        char *t = render(pm);
        assert_no(t, "DCGM_");
        assert_no(t, "kdev_usage_");
        free(t);
        kdev_plugin_metrics_stop(pm, NULL, NULL);
}

int main(void)
{
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_usage_series),
                cmocka_unit_test(test_usage_off),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
