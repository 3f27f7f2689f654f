/* kdev-plugin's metric set (src/metrics/plugin_metrics.h): what each runtime
 * hook and health event adds, the scrape-time device gauges, zero series of
 * known resources, errors at listen, and a clean stop. */
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
#include <uv.h>

#include "common/version.h"
#include "metrics/plugin_metrics.h"
#include "metrics_fixture.h"

/* Two resources: a GPU resource with 2 GPUs x 2 replicas (device data = the
 * GPU UUID), one replica unhealthy; a generic one with 3 devices, no data. */
struct world {
        struct kdev_device gpu_devs[4];
        struct kdev_device null_devs[3];
        struct kdev_resource res[2];
        struct kdev_resource_set set;
};

static void world_init(struct world *w)
{
        memset(w, 0, sizeof(*w));
        static char *gids[] = {"GPU-a::0", "GPU-a::1", "GPU-b::0", "GPU-b::1"};
        static char *uuids[] = {"GPU-a", "GPU-a", "GPU-b", "GPU-b"};
        static char *nids[] = {"n0", "n1", "n2"};
        for (int i = 0; i < 4; i++)
                w->gpu_devs[i] = (struct kdev_device){.id = gids[i], .healthy = i != 2,
                                                       .numa_node = -1, .data = uuids[i]};
        for (int i = 0; i < 3; i++)
                w->null_devs[i] = (struct kdev_device){.id = nids[i], .healthy = true,
                                                        .numa_node = -1};
        w->res[0] = (struct kdev_resource){.name = "nvidia.com/gpu", .devices = w->gpu_devs,
                                           .n_devices = 4};
        w->res[1] = (struct kdev_resource){.name = "example.com/null", .devices = w->null_devs,
                                           .n_devices = 3};
        w->set = (struct kdev_resource_set){.resources = w->res, .n_resources = 2};
}

static const char *physical(void *arg, const struct kdev_resource *r, const struct kdev_device *d)
{
        (void)r;
        assert_ptr_equal(arg, (void *)0x1234);
        return d->data;
}

static void test_device_gauges_at_scrape_time(void **state)
{
        (void)state;
        struct world w;
        world_init(&w);
        struct kdev_err err = {0};
        struct kdev_plugin_metrics *pm = kdev_plugin_metrics_new(&w.set, physical,
                                                                 (void *)0x1234, &err);
        assert_non_null(pm);
        char *t = render(pm);
        assert_line(t, "# TYPE kdev_devices gauge");
        assert_line(t, "kdev_devices{resource=\"nvidia.com/gpu\",health=\"Healthy\"} 3");
        assert_line(t, "kdev_devices{resource=\"nvidia.com/gpu\",health=\"Unhealthy\"} 1");
        assert_line(t, "kdev_devices{resource=\"example.com/null\",health=\"Healthy\"} 3");
        assert_line(t, "kdev_devices{resource=\"example.com/null\",health=\"Unhealthy\"} 0");
        assert_line(t, "# TYPE kdev_gpu_devices gauge");
        assert_line(t, "kdev_gpu_devices{gpu=\"GPU-a\",resource=\"nvidia.com/gpu\"} 2");
        assert_line(t, "kdev_gpu_devices{gpu=\"GPU-b\",resource=\"nvidia.com/gpu\"} 2");
        assert_no(t, "kdev_gpu_devices{gpu=\"\""); /* generic devices have no GPU */
        char info[160];
        snprintf(info, sizeof(info), "kdev_build_info{version=\"%s\",compiler=\"", KDEV_VERSION);
        assert_non_null(strstr(t, info));
        /* Nothing happened yet: no event series; counters of resources appear
         * only once listening (below). Every family still has its HELP and
         * TYPE lines, back to back (no samples between them and the next). */
        assert_no(t, "kdev_gpu_health_events_total{");
        assert_no(t, "kdev_allocate_requests_total{");
        assert_non_null(strstr(t, "# TYPE kdev_kubelet_restarts_total counter\n"
                                  "kdev_kubelet_restarts_total 0\n"
                                  "# HELP kdev_gpu_health_events_total GPU health events, by "
                                  "event kind and XID (\"\" for non-XID events).\n"
                                  "# TYPE kdev_gpu_health_events_total counter\n"));
        assert_non_null(strstr(t, "# HELP kdev_allocate_requests_total Container requests "
                                  "answered by Allocate, by resource and result (error: every "
                                  "container request of a failed call).\n"
                                  "# TYPE kdev_allocate_requests_total counter\n"
                                  "# HELP kdev_allocate_duration_seconds "));
        assert_line(t, "kdev_kubelet_restarts_total 0");
        free(t);

        /* Health changes and a device leaving show at the next scrape. */
        w.gpu_devs[2].healthy = true;
        w.gpu_devs[0].healthy = false;
        w.gpu_devs[1].healthy = false;
        w.res[0].n_devices = 3;
        t = render(pm);
        assert_line(t, "kdev_devices{resource=\"nvidia.com/gpu\",health=\"Healthy\"} 1");
        assert_line(t, "kdev_devices{resource=\"nvidia.com/gpu\",health=\"Unhealthy\"} 2");
        assert_line(t, "kdev_gpu_devices{gpu=\"GPU-b\",resource=\"nvidia.com/gpu\"} 1");
        free(t);
        kdev_plugin_metrics_stop(pm, NULL, NULL);
}

static void test_hooks(void **state)
{
        (void)state;
        struct world w;
        world_init(&w);
        struct kdev_plugin_metrics *pm = kdev_plugin_metrics_new(&w.set, NULL, NULL, NULL);
        assert_non_null(pm);
        const struct kdev_dp_hooks *hk = kdev_plugin_metrics_hooks(pm);
        assert_non_null(hk);
        assert_null(kdev_plugin_metrics_hooks(NULL));
        hk->allocate(hk->arg, "nvidia.com/gpu", 1, 0, 0.00004);
        hk->allocate(hk->arg, "nvidia.com/gpu", 2, 0, 0.0003);
        hk->allocate(hk->arg, "nvidia.com/gpu", 0, 1, 2.0);
        hk->preferred(hk->arg, "nvidia.com/gpu", true, 0.0001);
        hk->registered(hk->arg, "nvidia.com/gpu", false);
        hk->registered(hk->arg, "nvidia.com/gpu", true);
        hk->registered(hk->arg, "nvidia.com/gpu", true);
        hk->kubelet_restart(hk->arg);
        kdev_plugin_metrics_health_event(pm, "xid", 79, 1);
        kdev_plugin_metrics_health_event(pm, "xid", 79, 2);
        kdev_plugin_metrics_health_event(pm, "xid_ignored", 13, 1);
        kdev_plugin_metrics_health_event(pm, "gpu_lost", 0, 1);
        kdev_plugin_metrics_health_event(NULL, "xid", 1, 1); /* ignored */
        char *t = render(pm);
        assert_line(t, "kdev_allocate_requests_total{resource=\"nvidia.com/gpu\",result=\"ok\"} 3");
        assert_line(t, "kdev_allocate_requests_total{resource=\"nvidia.com/gpu\",result=\"error\"} "
                       "1");
        assert_line(t, "kdev_allocate_duration_seconds_bucket{resource=\"nvidia.com/gpu\","
                       "le=\"2.5e-05\"} 0");
        assert_line(t, "kdev_allocate_duration_seconds_bucket{resource=\"nvidia.com/gpu\","
                       "le=\"5e-05\"} 1");
        assert_line(t, "kdev_allocate_duration_seconds_bucket{resource=\"nvidia.com/gpu\","
                       "le=\"0.00025\"} 1");
        assert_line(t, "kdev_allocate_duration_seconds_bucket{resource=\"nvidia.com/gpu\","
                       "le=\"0.0005\"} 2");
        assert_line(t, "kdev_allocate_duration_seconds_bucket{resource=\"nvidia.com/gpu\","
                       "le=\"1\"} 2");
        assert_line(t, "kdev_allocate_duration_seconds_bucket{resource=\"nvidia.com/gpu\","
                       "le=\"+Inf\"} 3");
        assert_line(t, "kdev_allocate_duration_seconds_count{resource=\"nvidia.com/gpu\"} 3");
        assert_line(t, "kdev_allocate_duration_seconds_sum{resource=\"nvidia.com/gpu\"} 2.00034");
        assert_line(t, "kdev_preferred_allocation_duration_seconds_bucket{resource=\"nvidia.com/"
                       "gpu\",le=\"0.0001\"} 1");
        assert_line(t, "kdev_preferred_allocation_duration_seconds_count{resource=\"nvidia.com/"
                       "gpu\"} 1");
        assert_line(t, "kdev_kubelet_registrations_total{resource=\"nvidia.com/gpu\",result="
                       "\"error\"} 1");
        assert_line(t, "kdev_kubelet_registrations_total{resource=\"nvidia.com/gpu\",result="
                       "\"ok\"} 2");
        assert_line(t, "kdev_kubelet_restarts_total 1");
        assert_line(t, "# TYPE kdev_gpu_health_events_total counter");
        assert_line(t, "kdev_gpu_health_events_total{event=\"xid\",xid=\"79\"} 3");
        assert_line(t, "kdev_gpu_health_events_total{event=\"xid_ignored\",xid=\"13\"} 1");
        assert_line(t, "kdev_gpu_health_events_total{event=\"gpu_lost\",xid=\"\"} 1");
        free(t);
        kdev_plugin_metrics_stop(pm, NULL, NULL);
}

static void on_stopped(void *arg)
{
        *(int *)arg += 1;
}

static void test_listen_zero_series_and_stop(void **state)
{
        (void)state;
        struct world w;
        world_init(&w);
        uv_loop_t loop;
        assert_int_equal(uv_loop_init(&loop), 0);
        struct kdev_err err = {0};
        struct kdev_plugin_metrics *pm = kdev_plugin_metrics_new(&w.set, NULL, NULL, &err);
        assert_int_equal(kdev_plugin_metrics_port(pm), 0);
        assert_int_equal(kdev_plugin_metrics_listen(pm, &loop, "127.0.0.1:0", &err), 0);
        assert_true(kdev_plugin_metrics_port(pm) > 0);
        char *t = render(pm);
        static const char *const zero[] = {
                "kdev_allocate_requests_total{resource=\"nvidia.com/gpu\",result=\"ok\"} 0",
                "kdev_allocate_requests_total{resource=\"nvidia.com/gpu\",result=\"error\"} 0",
                "kdev_allocate_requests_total{resource=\"example.com/null\",result=\"ok\"} 0",
                "kdev_allocate_requests_total{resource=\"example.com/null\",result=\"error\"} 0",
                "kdev_kubelet_registrations_total{resource=\"example.com/null\",result=\"ok\"} 0",
                "kdev_kubelet_registrations_total{resource=\"example.com/null\","
                "result=\"error\"} 0",
                "kdev_allocate_duration_seconds_count{resource=\"example.com/null\"} 0",
                "kdev_preferred_allocation_duration_seconds_count{resource=\"example.com/null\"} 0",
        };
        for (size_t i = 0; i < sizeof(zero) / sizeof(zero[0]); i++)
                assert_line(t, zero[i]);
        free(t);

        /* a second instance on the same port: a clear error */
        char addr[64];
        snprintf(addr, sizeof(addr), "127.0.0.1:%u", kdev_plugin_metrics_port(pm));
        struct kdev_plugin_metrics *pm2 = kdev_plugin_metrics_new(&w.set, NULL, NULL, &err);
        assert_int_equal(kdev_plugin_metrics_listen(pm2, &loop, addr, &err), -EADDRINUSE);
        char want[128];
        snprintf(want, sizeof(want), "cannot listen on %s: Address already in use", addr);
        assert_string_equal(err.msg, want);
        int stopped = 0;
        kdev_plugin_metrics_stop(pm2, on_stopped, &stopped);
        assert_int_equal(stopped, 1); /* never listened: at once */

        kdev_plugin_metrics_stop(pm, on_stopped, &stopped);
        assert_int_equal(stopped, 1);
        uv_run(&loop, UV_RUN_DEFAULT);
        assert_int_equal(stopped, 2);
        assert_int_equal(uv_loop_close(&loop), 0);
        kdev_plugin_metrics_stop(NULL, on_stopped, &stopped);
        assert_int_equal(stopped, 3);
}

int main(void)
{
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_device_gauges_at_scrape_time),
                cmocka_unit_test(test_hooks),
                cmocka_unit_test(test_listen_zero_series_and_stop),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
