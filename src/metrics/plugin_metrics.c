/* kdev-plugin's metric set. See plugin_metrics.h. */
#include "metrics/plugin_metrics.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/version.h"
#include "metrics/http.h"
#include "metrics/usage_metrics_internal.h"

/* Allocate and GetPreferredAllocation latency buckets, seconds: the
 * targets (README "Benchmarks") are p50 <= 50 us and p99 <= 250 us for Allocate, <= 1 ms for
 * GetPreferredAllocation; the upper buckets catch a slow backend. */
static const double latency_buckets[] = {
        0.000025, 0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005,
        0.01,     0.025,   0.05,   0.1,     0.25,   0.5,   1,
};
#define N_LATENCY (sizeof(latency_buckets) / sizeof(latency_buckets[0]))

#ifdef __clang__
#define COMPILER "clang " __clang_version__
#else
#define COMPILER "gcc " __VERSION__
#endif

struct kdev_plugin_metrics {
        struct kdev_metrics *reg;
        const struct kdev_resource_set *set;
        kdev_plugin_metrics_physical_fn physical;
        void *physical_arg;
        struct kdev_dp_hooks hooks;
        struct kdev_metrics_http *http;

        struct kdev_metric_family *devices;
        struct kdev_metric_family *gpu_devices;
        struct kdev_metric_family *allocs;
        struct kdev_metric_family *alloc_seconds;
        struct kdev_metric_family *pref_seconds;
        struct kdev_metric_family *registrations;
        struct kdev_metric_family *restarts;
        struct kdev_metric_family *health_events;
        struct kdev_plugin_usage_metrics *usage; /* NULL: usage metering off */

        void (*done)(void *arg);
        void *done_arg;
};

/* ---- hooks ------------------------------------------------------------------ */

static void on_allocate(void *arg, const char *resource, size_t ok, size_t failed,
                        double seconds)
{
        struct kdev_plugin_metrics *pm = arg;
        if (ok)
                kdev_metric_add(kdev_metric_get(pm->allocs, (const char *[]){resource, "ok"}),
                                (double)ok);
        if (failed)
                kdev_metric_add(kdev_metric_get(pm->allocs, (const char *[]){resource, "error"}),
                                (double)failed);
        kdev_metric_observe(kdev_metric_get(pm->alloc_seconds, (const char *[]){resource}),
                            seconds);
}

static void on_preferred(void *arg, const char *resource, bool ok, double seconds)
{
        struct kdev_plugin_metrics *pm = arg;
        (void)ok;
        kdev_metric_observe(kdev_metric_get(pm->pref_seconds, (const char *[]){resource}),
                            seconds);
}

static void on_registered(void *arg, const char *resource, bool ok)
{
        struct kdev_plugin_metrics *pm = arg;
        kdev_metric_add(kdev_metric_get(pm->registrations,
                                        (const char *[]){resource, ok ? "ok" : "error"}),
                        1);
}

static void on_kubelet_restart(void *arg)
{
        struct kdev_plugin_metrics *pm = arg;
        kdev_metric_add(kdev_metric_get(pm->restarts, NULL), 1);
}

void kdev_plugin_metrics_health_event(void *arg, const char *kind, unsigned long long xid,
                                      unsigned count)
{
        struct kdev_plugin_metrics *pm = arg;
        if (!pm || !kind)
                return;
        char xs[24] = "";
        if (strncmp(kind, "xid", 3) == 0)
                snprintf(xs, sizeof(xs), "%llu", xid);
        kdev_metric_add(kdev_metric_get(pm->health_events, (const char *[]){kind, xs}),
                        (double)count);
}

/* ---- scrape-time gauges ------------------------------------------------------ */

static void collect(void *arg, struct kdev_metrics *m)
{
        struct kdev_plugin_metrics *pm = arg;
        (void)m;
        kdev_metrics_family_clear(pm->devices);
        kdev_metrics_family_clear(pm->gpu_devices);
        for (size_t i = 0; i < pm->set->n_resources; i++) {
                const struct kdev_resource *r = &pm->set->resources[i];
                size_t healthy = 0;
                for (size_t j = 0; j < r->n_devices; j++)
                        healthy += r->devices[j].healthy;
                kdev_metric_set(kdev_metric_get(pm->devices,
                                                (const char *[]){r->name, "Healthy"}),
                                (double)healthy);
                kdev_metric_set(kdev_metric_get(pm->devices,
                                                (const char *[]){r->name, "Unhealthy"}),
                                (double)(r->n_devices - healthy));
                if (!pm->physical)
                        continue;
                for (size_t j = 0; j < r->n_devices; j++) {
                        const char *gpu = pm->physical(pm->physical_arg, r, &r->devices[j]);
                        if (gpu && *gpu)
                                kdev_metric_add(kdev_metric_get(pm->gpu_devices,
                                                                (const char *[]){gpu, r->name}),
                                                1);
                }
        }
}

/* ---- lifecycle ---------------------------------------------------------------- */

/* A label name list and its length, for kdev_metrics_add(). */
#define LABELS(...)                                                                        \
        (const char *[]){__VA_ARGS__}, sizeof((const char *[]){__VA_ARGS__}) / sizeof(char *)

struct kdev_plugin_metrics *kdev_plugin_metrics_new(const struct kdev_resource_set *set,
                                                    kdev_plugin_metrics_physical_fn physical,
                                                    void *physical_arg, struct kdev_err *err)
{
        struct kdev_plugin_metrics *pm = calloc(1, sizeof(*pm));
        if (!pm || !(pm->reg = kdev_metrics_new())) {
                free(pm);
                kdev_err_set(err, ENOMEM, "out of memory");
                return NULL;
        }
        pm->set = set;
        pm->physical = physical;
        pm->physical_arg = physical_arg;
        pm->hooks = (struct kdev_dp_hooks){
                .arg = pm,
                .allocate = on_allocate,
                .preferred = on_preferred,
                .registered = on_registered,
                .kubelet_restart = on_kubelet_restart,
        };
        struct kdev_metrics *m = pm->reg;
        struct kdev_metric_family *info = kdev_metrics_add(
                m, KDEV_METRIC_GAUGE, "kdev_build_info",
                "kdev build information; the value is always 1.", LABELS("version", "compiler"),
                NULL, 0, err);
        if (!info)
                goto fail;
        kdev_metric_set(kdev_metric_get(info, (const char *[]){KDEV_VERSION, COMPILER}), 1);
        if (!(pm->devices = kdev_metrics_add(
                      m, KDEV_METRIC_GAUGE, "kdev_devices",
                      "Devices advertised to kubelet, by resource and health.",
                      LABELS("resource", "health"), NULL, 0, err)) ||
            !(pm->gpu_devices = kdev_metrics_add(
                      m, KDEV_METRIC_GAUGE, "kdev_gpu_devices",
                      "Devices of a resource (whole GPU, MIG devices, time-slicing replicas) "
                      "backed by one physical GPU.",
                      LABELS("gpu", "resource"), NULL, 0, err)) ||
            !(pm->allocs = kdev_metrics_add(
                      m, KDEV_METRIC_COUNTER, "kdev_allocate_requests_total",
                      "Container requests answered by Allocate, by resource and result (error: "
                      "every container request of a failed call).",
                      LABELS("resource", "result"), NULL, 0, err)) ||
            !(pm->alloc_seconds = kdev_metrics_add(
                      m, KDEV_METRIC_HISTOGRAM, "kdev_allocate_duration_seconds",
                      "Time to answer an Allocate call, by resource.", LABELS("resource"),
                      latency_buckets, N_LATENCY, err)) ||
            !(pm->pref_seconds = kdev_metrics_add(
                      m, KDEV_METRIC_HISTOGRAM, "kdev_preferred_allocation_duration_seconds",
                      "Time to answer a GetPreferredAllocation call, by resource.",
                      LABELS("resource"), latency_buckets, N_LATENCY, err)) ||
            !(pm->registrations = kdev_metrics_add(
                      m, KDEV_METRIC_COUNTER, "kdev_kubelet_registrations_total",
                      "Registrations with kubelet, by resource and result.",
                      LABELS("resource", "result"), NULL, 0, err)) ||
            !(pm->restarts = kdev_metrics_add(
                      m, KDEV_METRIC_COUNTER, "kdev_kubelet_restarts_total",
                      "Kubelet restarts seen (kubelet.sock created anew).", NULL, 0, NULL, 0,
                      err)) ||
            !(pm->health_events = kdev_metrics_add(
                      m, KDEV_METRIC_COUNTER, "kdev_gpu_health_events_total",
                      "GPU health events, by event kind and XID (\"\" for non-XID events).",
                      LABELS("event", "xid"), NULL, 0, err)))
                goto fail;
        kdev_metrics_set_collect(m, collect, pm);
        return pm;
fail:
        kdev_metrics_free(pm->reg);
        free(pm);
        return NULL;
}

/* Known series start at 0, so that rate() and increase() see the first
 * event (Prometheus' instrumentation advice). */
static void zero_series(struct kdev_plugin_metrics *pm)
{
        for (size_t i = 0; i < pm->set->n_resources; i++) {
                const char *name = pm->set->resources[i].name;
                kdev_metric_get(pm->allocs, (const char *[]){name, "ok"});
                kdev_metric_get(pm->allocs, (const char *[]){name, "error"});
                kdev_metric_get(pm->alloc_seconds, (const char *[]){name});
                kdev_metric_get(pm->pref_seconds, (const char *[]){name});
                kdev_metric_get(pm->registrations, (const char *[]){name, "ok"});
                kdev_metric_get(pm->registrations, (const char *[]){name, "error"});
        }
}

void kdev_plugin_metrics_set_resources(struct kdev_plugin_metrics *pm,
                                       const struct kdev_resource_set *set)
{
        if (!pm)
                return;
        pm->set = set;
        if (pm->http)
                zero_series(pm);
}

int kdev_plugin_metrics_listen(struct kdev_plugin_metrics *pm, uv_loop_t *loop,
                               const char *address, struct kdev_err *err)
{
        zero_series(pm);
        struct kdev_err e = {0};
        pm->http = kdev_metrics_http_start(loop, address, pm->reg, &e);
        if (pm->http)
                return 0;
        if (err)
                *err = e;
        return -e.code;
}

unsigned kdev_plugin_metrics_port(const struct kdev_plugin_metrics *pm)
{
        return pm->http ? kdev_metrics_http_port(pm->http) : 0;
}

struct kdev_metrics *kdev_plugin_metrics_registry(struct kdev_plugin_metrics *pm)
{
        return pm->reg;
}

int kdev_plugin_metrics_enable_usage(struct kdev_plugin_metrics *pm, const char *hostname,
                                     struct kdev_err *err)
{
        if (pm->usage)
                return kdev_err_set(err, EINVAL, "usage metrics enabled twice");
        struct kdev_err e = {0};
        pm->usage = kdev_plugin_usage_metrics_new(pm->reg, hostname, false, &e);
        if (pm->usage)
                return 0;
        if (err)
                *err = e;
        return -e.code;
}

void kdev_plugin_metrics_set_usage(struct kdev_plugin_metrics *pm,
                                   const struct kdev_usage_snapshot *snap,
                                   const struct kdev_usage_pods *pods,
                                   const struct kdev_usage_report *rep)
{
        if (pm && pm->usage)
                kdev_plugin_usage_metrics_set(pm->usage, snap, pods, rep);
}

const struct kdev_dp_hooks *kdev_plugin_metrics_hooks(struct kdev_plugin_metrics *pm)
{
        return pm ? &pm->hooks : NULL;
}

static void on_http_closed(void *arg)
{
        struct kdev_plugin_metrics *pm = arg;
        void (*done)(void *) = pm->done;
        void *done_arg = pm->done_arg;
        kdev_metrics_free(pm->reg);
        kdev_plugin_usage_metrics_free(pm->usage);
        free(pm);
        if (done)
                done(done_arg);
}

void kdev_plugin_metrics_stop(struct kdev_plugin_metrics *pm, void (*done)(void *arg),
                              void *done_arg)
{
        if (!pm) {
                if (done)
                        done(done_arg);
                return;
        }
        pm->done = done;
        pm->done_arg = done_arg;
        struct kdev_metrics_http *http = pm->http;
        pm->http = NULL;
        kdev_metrics_http_close(http, on_http_closed, pm); /* NULL: at once */
}
