/* NVIDIA health monitor and rediscovery (src/nvidia/health.h) against the mock
 * libnvidia-ml.so.1 through the real loader, on a libuv loop.
 *
 * The resource set is built by hand over mig-a100-40gb.yaml:
 *   R_GPU    nvidia.com/gpu          GPU 3 whole
 *   R_SHARED nvidia.com/gpu.shared   GPU 2, replicas ::0 ::1 ::2
 *   R_MIG1G  nvidia.com/mig-1g.5gb   GPU 0 GI 9 CI 0, GPU 0 GI 10 CI 0, GPU 1 GI 13 CI 0
 *   R_MIG3G  nvidia.com/mig-3g.20gb  GPU 0 GI 2 CI 0
 *   R_MIG2G  nvidia.com/mig-2g.10gb  GPU 0 GI 3 CI 0
 * Intervals are small (probe 40 ms, quiet 300 ms, wait 50 ms); waits poll the
 * monitor's counters with generous deadlines. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>
#include <uv.h>

#include "common/log.h"
#include "mock_fixture.h"
#include "mock_loop.h"
#include "model/model.h"
#include "nvidia/devinfo.h"
#include "nvidia/health.h"
#include "nvidia/xid.h"
#include "nvml/loader.h"

#define NO KDEV_NVIDIA_NO_INSTANCE

#define G0 "GPU-c1ae70ed-64b5-7842-b2ed-e9039613ae69"
#define G1 "GPU-4603f764-b00c-271e-0980-eda368e40931"
#define G2 "GPU-0c8e873f-4cf7-689a-6647-0210cab49901"
#define G3 "GPU-49c5ccb8-7f8c-230b-4fe7-33825480cfa5"
#define M00 "MIG-59bcc04e-5cf6-b753-ab18-f13e8543556f" /* GPU 0, 3g.20gb, GI 2 */
#define M01 "MIG-9d0efe1e-fdc2-4aea-57e7-810aa03ca6ce" /* GPU 0, 2g.10gb, GI 3 */
#define M02 "MIG-d49257bf-597e-857d-3bb4-e6384c9909cc" /* GPU 0, 1g.5gb, GI 9 */
#define M03 "MIG-cc362666-f6d1-a63a-ddd2-38044c0c64a2" /* GPU 0, 1g.5gb, GI 10 */
#define M13 "MIG-f77e8b45-cbe6-cf64-aa48-e4cad680f3d8" /* GPU 1, 1g.5gb, GI 13 */

#define PROBE_MS 40
#define QUIET_MS 300
#define WAIT_MS 50
#define DEADLINE_MS 15000
#define LONG 600000  /* a quiet period no test waits for */

enum { R_GPU, R_SHARED, R_MIG1G, R_MIG3G, R_MIG2G, N_RES };
#define N_DEVS 9

struct fx {
        struct mock_nvml m;

        uv_loop_t loop;
        uv_timer_t tick;
        struct kdev_resource res[N_RES];
        struct kdev_device devs[N_DEVS];
        struct kdev_nvidia_devinfo info[N_DEVS];
        struct kdev_resource_set set;
        unsigned notified[N_RES];
        unsigned notified_total;
        struct kdev_nvidia_health *mon;
        struct kdev_nvidia_rediscover *redisc;
        bool stopped;
        char tmp[64];
        unsigned long ev_xid79, ev_ignored13; /* event observer: counts (metrics' input) */
        /* physical events received (options.physical), in order */
        struct {
                char id[64];
                bool healthy;
                unsigned long long xid;
                char reason[160];
                unsigned batch;
        } pev[16];
        unsigned n_pev, n_batches;
        bool subscribe;             /* start_monitor sets options.physical */
};

static void on_physical(void *arg, const struct kdev_physical_event *ev, size_t n)
{
        struct fx *f = arg;
        f->n_batches++;
        assert_true(n >= 1);
        for (size_t i = 0; i < n && f->n_pev < 16; i++) {
                snprintf(f->pev[f->n_pev].id, sizeof(f->pev[f->n_pev].id), "%s", ev[i].id);
                f->pev[f->n_pev].healthy = ev[i].healthy;
                f->pev[f->n_pev].xid = ev[i].xid;
                snprintf(f->pev[f->n_pev].reason, sizeof(f->pev[f->n_pev].reason), "%s",
                         ev[i].reason);
                f->pev[f->n_pev].batch = f->n_batches;
                f->n_pev++;
        }
}

static void on_notify(void *arg, const char *resource)
{
        struct fx *f = arg;
        f->notified_total++;
        for (int i = 0; i < N_RES; i++)
                if (strcmp(f->res[i].name, resource) == 0)
                        f->notified[i]++;
}

static void add_dev(struct fx *f, size_t *k, int r, const char *id, const char *uuid,
                    const char *parent, unsigned gi, unsigned ci, int replica)
{
        struct kdev_nvidia_devinfo *in = &f->info[*k];
        struct kdev_device *d = &f->devs[*k];
        snprintf(in->uuid, sizeof(in->uuid), "%s", uuid);
        snprintf(in->parent_uuid, sizeof(in->parent_uuid), "%s", parent);
        in->gi = gi;
        in->ci = ci;
        in->replica = replica;
        d->id = (char *)id;
        d->healthy = true;
        d->numa_node = -1;
        d->data = in;
        if (!f->res[r].devices)
                f->res[r].devices = d;
        f->res[r].n_devices++;
        (*k)++;
}

static void build_set(struct fx *f)
{
        static const char *names[N_RES] = { "nvidia.com/gpu", "nvidia.com/gpu.shared",
                                            "nvidia.com/mig-1g.5gb", "nvidia.com/mig-3g.20gb",
                                            "nvidia.com/mig-2g.10gb" };
        size_t k = 0;
        for (int i = 0; i < N_RES; i++)
                f->res[i].name = (char *)names[i];
        add_dev(f, &k, R_GPU, G3, G3, G3, NO, NO, -1);
        add_dev(f, &k, R_SHARED, G2 "::0", G2, G2, NO, NO, 0);
        add_dev(f, &k, R_SHARED, G2 "::1", G2, G2, NO, NO, 1);
        add_dev(f, &k, R_SHARED, G2 "::2", G2, G2, NO, NO, 2);
        add_dev(f, &k, R_MIG1G, M02, M02, G0, 9, 0, -1);
        add_dev(f, &k, R_MIG1G, M03, M03, G0, 10, 0, -1);
        add_dev(f, &k, R_MIG1G, M13, M13, G1, 13, 0, -1);
        add_dev(f, &k, R_MIG3G, M00, M00, G0, 2, 0, -1);
        add_dev(f, &k, R_MIG2G, M01, M01, G0, 3, 0, -1);
        assert_int_equal(k, N_DEVS);
        f->set.resources = f->res;
        f->set.n_resources = N_RES;
        /* the physical devices, as kdev_nvidia_attach_physical makes them:
         * one per UUID (the replicas of GPU 2 share one) */
        for (size_t i = 0; i < N_DEVS; i++) {
                struct kdev_physical *p = kdev_physical_find(&f->set, f->info[i].uuid);
                if (!p)
                        p = kdev_physical_add(&f->set, f->info[i].uuid, -1, NULL, NULL);
                assert_non_null(p);
                f->devs[i].physical = p;
        }
        assert_int_equal(f->set.n_physical, 7);
        assert_int_equal(kdev_resource_set_link(&f->set, NULL), 0);
}

static int setup(void **state)
{
        struct fx *f = calloc(1, sizeof(*f));
        if (!f || mock_loop_open(&f->m, &f->loop, &f->tick, TOPO("mig-a100-40gb.yaml")) != 0)
                return -1;
        build_set(f);
        *state = f;
        return 0;
}

static void stop_monitor(struct fx *f);
static void on_stopped(void *arg);

static int teardown(void **state)
{
        struct fx *f = *state;
        /* after a failed assertion: stop what the test left running */
        if (f->mon)
                stop_monitor(f);
        if (f->redisc) {
                kdev_nvidia_rediscover_stop(f->redisc, NULL, NULL);
                f->redisc = NULL;
        }
        mock_loop_close(&f->loop, &f->tick);
        kdev_physical_truncate(&f->set, 0);
        while (f->m.count() > 0)
                kdev_nvml_api(f->m.lib)->nvmlShutdown();
        assert_int_equal(kdev_nvml_refs(f->m.lib), 0);
        mock_nvml_close(&f->m);
        if (f->tmp[0]) {
                char lib[128];
                snprintf(lib, sizeof(lib), "%s/libnvidia-ml.so.1", f->tmp);
                unlink(lib);
                rmdir(f->tmp);
        }
        free(f);
        return 0;
}

/* Runs the loop until |pred| holds or DEADLINE_MS passed; returns pred(). */
static bool run_until(struct fx *f, bool (*pred)(struct fx *f, const void *arg),
                      const void *arg)
{
        uint64_t end = mock_ms_now() + DEADLINE_MS;
        while (!pred(f, arg) && mock_ms_now() < end)
                uv_run(&f->loop, UV_RUN_ONCE);
        return pred(f, arg);
}

static struct kdev_nvidia_health_stats stats(struct fx *f)
{
        struct kdev_nvidia_health_stats s;
        kdev_nvidia_health_get_stats(f->mon, &s);
        return s;
}

/* NAME_at_least(f, arg): the monitor's counter FIELD is at least
 * *(const unsigned long *)arg (a run_until predicate). */
#define AT_LEAST(name, field)                                                    \
        static bool name##_at_least(struct fx *f, const void *arg)               \
        {                                                                        \
                return stats(f).field >= *(const unsigned long *)arg;            \
        }
AT_LEAST(critical, xid_critical)
AT_LEAST(ignored, xid_ignored)
AT_LEAST(other, other_events)
AT_LEAST(recoveries, recoveries)
AT_LEAST(probes, probes)
AT_LEAST(wait_errors, wait_errors)
#undef AT_LEAST

static bool is_stopped(struct fx *f, const void *arg)
{
        (void)arg;
        return f->stopped;
}

static void wait_critical(struct fx *f, unsigned long n)
{
        assert_true(run_until(f, critical_at_least, &n));
}

static void wait_recoveries(struct fx *f, unsigned long n)
{
        assert_true(run_until(f, recoveries_at_least, &n));
}

/* Waits for |n| more probe results than now. */
static void wait_more_probes(struct fx *f, unsigned long n)
{
        unsigned long want = stats(f).probes + n;
        assert_true(run_until(f, probes_at_least, &want));
}

/* Starts a monitor with policy (disable, enable) and quiet period |quiet| ms
 * (tests that do not look at recovery use LONG so that nothing recovers
 * behind their back on a slow machine). */
/* A started monitor over f->set with policy (disable, enable), quiet period
 * |quiet| ms, adopting |previous| (may be NULL). */
static struct kdev_nvidia_health *new_monitor(struct fx *f, const char *disable,
                                              const char *enable, uint64_t quiet,
                                              const struct kdev_nvidia_health *previous)
{
        struct kdev_xid_policy p;
        struct kdev_err e;
        assert_int_equal(kdev_xid_policy_parse(disable, enable, &p, NULL, NULL, &e), 0);
        struct kdev_nvidia_health_options o = {
                .probe_interval_ms = PROBE_MS,
                .quiet_period_ms = quiet,
                .wait_timeout_ms = WAIT_MS,
                .notify = on_notify,
                .notify_arg = f,
                .physical = f->subscribe ? on_physical : NULL,
                .physical_arg = f,
                .previous = previous,
        };
        struct kdev_nvidia_health *h = kdev_nvidia_health_new(&f->loop, f->m.lib, &f->set, &p,
                                                              &o, &e);
        kdev_xid_policy_clear(&p);
        assert_non_null(h);
        int rc = kdev_nvidia_health_start(h, &e);
        if (rc != 0)
                fail_msg("start: %s", e.msg);
        return h;
}

static void start_monitor(struct fx *f, const char *disable, const char *enable,
                          uint64_t quiet)
{
        f->mon = new_monitor(f, disable, enable, quiet, NULL);
}

static void on_stopped(void *arg)
{
        struct fx *f = arg;
        f->stopped = true;
}

static void stop_monitor(struct fx *f)
{
        f->stopped = false;
        kdev_nvidia_health_stop(f->mon, on_stopped, f);
        f->mon = NULL;
        assert_true(run_until(f, is_stopped, NULL));
}

static struct kdev_nvidia_gpu_health gpu(struct fx *f, const char *uuid)
{
        struct kdev_nvidia_gpu_health g;
        assert_int_equal(kdev_nvidia_health_gpu(f->mon, uuid, &g), 0);
        return g;
}

/* The healthy flags of all devices as a bit string in set order
 * (R_GPU, R_SHARED x3, R_MIG1G x3, R_MIG3G, R_MIG2G). */
static void assert_health(struct fx *f, const char *want)
{
        char got[N_DEVS + 1];
        for (int i = 0; i < N_DEVS; i++)
                got[i] = f->devs[i].healthy ? '1' : '0';
        got[N_DEVS] = '\0';
        assert_string_equal(got, want);
}

static void assert_notified(struct fx *f, unsigned gpu_, unsigned shared, unsigned mig1g,
                            unsigned mig3g, unsigned mig2g)
{
        assert_int_equal(f->notified[R_GPU], gpu_);
        assert_int_equal(f->notified[R_SHARED], shared);
        assert_int_equal(f->notified[R_MIG1G], mig1g);
        assert_int_equal(f->notified[R_MIG3G], mig3g);
        assert_int_equal(f->notified[R_MIG2G], mig2g);
        assert_int_equal(f->notified_total, gpu_ + shared + mig1g + mig3g + mig2g);
}

/* --- tests ------------------------------------------------------------------- */

/* One critical XID on a replicated GPU: all 3 replicas Unhealthy, one notify. */
static void test_xid_marks_every_replica_once(void **state)
{
        struct fx *f = *state;
        start_monitor(f, NULL, NULL, LONG);
        assert_notified(f, 0, 0, 0, 0, 0);
        assert_int_equal(gpu(f, G2).checks, KDEV_NVIDIA_HEALTH_REGISTERED);
        assert_int_equal(f->m.xid(G2, 79, NO, NO), NVML_SUCCESS);
        wait_critical(f, 1);
        assert_health(f, "100011111");
        assert_notified(f, 0, 1, 0, 0, 0);
        struct kdev_nvidia_gpu_health g = gpu(f, G2);
        assert_false(g.healthy);
        assert_int_equal(g.marked, 3);
        assert_true(g.last_xid == 79);
        assert_string_equal(g.reason, "critical XID 79");
        assert_true(gpu(f, G3).healthy);
        /* a second critical XID changes nothing visible: no new update */
        assert_int_equal(f->m.xid(G2, 48, NO, NO), NVML_SUCCESS);
        wait_critical(f, 2);
        assert_notified(f, 0, 1, 0, 0, 0);
        assert_true(gpu(f, G2).last_xid == 48);
        struct kdev_nvidia_health_stats s = stats(f);
        assert_int_equal(s.unhealthy, 1);
        assert_int_equal(s.notifies, 1);
        stop_monitor(f);
}

/* A rebuild replaces the monitor: an XID the old monitor's watcher saw but
 * the loop had not delivered when the new monitor registered its own event
 * set (NVML gives it to the sets registered then: not the new one) is
 * applied to the new monitor by kdev_nvidia_health_take_over, not lost
 * with the old one. */
static void test_take_over_pending_events(void **state)
{
        struct fx *f = *state;
        start_monitor(f, NULL, NULL, LONG);
        struct kdev_nvidia_health *old = f->mon;
        assert_int_equal(f->m.xid(G2, 79, NO, NO), NVML_SUCCESS);
        usleep(150 * 1000); /* the old watcher's thread posts it; the loop does not run */
        struct kdev_nvidia_health *now = new_monitor(f, NULL, NULL, LONG, old);
        assert_true(gpu(f, G2).healthy); /* f->mon: the old one has not applied it */
        kdev_nvidia_health_take_over(now, old);
        f->mon = now;
        struct kdev_nvidia_gpu_health g = gpu(f, G2);
        assert_false(g.healthy);
        assert_true(g.last_xid == 79);
        assert_string_equal(g.reason, "critical XID 79");
        assert_health(f, "100011111");
        /* the old one, stopped, never applies it */
        f->mon = old;
        assert_true(gpu(f, G2).healthy);
        f->stopped = false;
        kdev_nvidia_health_stop(old, on_stopped, f);
        assert_true(run_until(f, is_stopped, NULL));
        f->mon = now;
        assert_false(gpu(f, G2).healthy);
        assert_true(gpu(f, G3).healthy);
        kdev_nvidia_health_take_over(now, NULL); /* nothing */
        stop_monitor(f);
}

/* A burst of 200 XIDs (the mock queues 256 per event set): all applied,
 * still one update, no queue overflow (which would mark every GPU). */
static void test_xid_burst(void **state)
{
        struct fx *f = *state;
        start_monitor(f, NULL, NULL, LONG);
        for (int i = 0; i < 200; i++)
                assert_int_equal(f->m.xid(G3, 79, NO, NO), NVML_SUCCESS);
        wait_critical(f, 200);
        assert_health(f, "011111111");
        assert_notified(f, 1, 0, 0, 0, 0);
        assert_int_equal(stats(f).xid_critical, 200);
        assert_int_equal(stats(f).unhealthy, 1);
        stop_monitor(f);
}

/* Default policy: 13 ignored, ECC never marks; DP_* variables change that. */
static void test_ignored_and_ecc(void **state)
{
        struct fx *f = *state;
        start_monitor(f, NULL, NULL, LONG);
        for (unsigned long i = 0; i < 6; i++) {
                static const unsigned long long ign[] = { 13, 31, 43, 45, 68, 109 };
                assert_int_equal(f->m.xid(G3, ign[i], NO, NO), NVML_SUCCESS);
                unsigned long n = i + 1;
                assert_true(run_until(f, ignored_at_least, &n));
        }
        assert_int_equal(f->m.event(G3, nvmlEventTypeDoubleBitEccError, 0, NO, NO),
                         NVML_SUCCESS);
        assert_int_equal(f->m.event(G3, nvmlEventTypeSingleBitEccError, 0, NO, NO),
                         NVML_SUCCESS);
        unsigned long two = 2;
        assert_true(run_until(f, other_at_least, &two));
        assert_health(f, "111111111");
        assert_notified(f, 0, 0, 0, 0, 0);
        assert_int_equal(stats(f).xid_critical, 0);
        /* and a critical one still gets through */
        assert_int_equal(f->m.xid(G3, 94, NO, NO), NVML_SUCCESS);
        wait_critical(f, 1);
        assert_health(f, "011111111");
        assert_notified(f, 1, 0, 0, 0, 0);
        stop_monitor(f);
}

static void test_env_policy(void **state)
{
        struct fx *f = *state;
        /* 79 disabled, 13 enabled */
        start_monitor(f, "79", "13", LONG);
        assert_int_equal(f->m.xid(G3, 79, NO, NO), NVML_SUCCESS);
        unsigned long one = 1;
        assert_true(run_until(f, ignored_at_least, &one));
        assert_health(f, "111111111");
        assert_int_equal(f->m.xid(G3, 13, NO, NO), NVML_SUCCESS);
        wait_critical(f, 1);
        assert_health(f, "011111111");
        assert_true(gpu(f, G3).last_xid == 13);
        assert_notified(f, 1, 0, 0, 0, 0);
        stop_monitor(f);
}

static void test_env_enable_all(void **state)
{
        struct fx *f = *state;
        start_monitor(f, "all", "all", LONG);
        assert_int_equal(f->m.xid(G2, 31, NO, NO), NVML_SUCCESS);
        wait_critical(f, 1);
        assert_health(f, "100011111");
        assert_int_equal(stats(f).xid_ignored, 0);
        stop_monitor(f);
}

/* DP_DISABLE_HEALTHCHECKS=all: no NVML init, no thread, nothing changes. */
static void test_env_disabled(void **state)
{
        struct fx *f = *state;
        start_monitor(f, "all", "79", LONG);
        assert_int_equal(f->m.count(), 0);
        assert_int_equal(kdev_nvml_refs(f->m.lib), 0);
        assert_int_equal(gpu(f, G3).checks, KDEV_NVIDIA_HEALTH_NOT_STARTED);
        stop_monitor(f);
        assert_health(f, "111111111");
        assert_notified(f, 0, 0, 0, 0, 0);
}

/* MIG: GI and CI of the event filter independently (PR #1930). */
static void test_mig_gi_ci_filter(void **state)
{
        struct fx *f = *state;
        start_monitor(f, NULL, NULL, LONG);
        /* GI 2 only: the 3g.20gb device */
        assert_int_equal(f->m.xid(G0, 79, 2, NO), NVML_SUCCESS);
        wait_critical(f, 1);
        assert_health(f, "111111101");
        assert_notified(f, 0, 0, 0, 1, 0);
        assert_int_equal(gpu(f, G0).marked, 1);
        assert_string_equal(gpu(f, G0).reason,
                            "critical XID 79 (GPU instance 2, compute instance -1)");
        /* GI 9 and CI 5: no device has CI 5 -> nothing */
        assert_int_equal(f->m.xid(G0, 79, 9, 5), NVML_SUCCESS);
        wait_critical(f, 2);
        assert_health(f, "111111101");
        assert_notified(f, 0, 0, 0, 1, 0);
        /* a MIG UUID: the mock sends its parent with that device's GI/CI (10/0) */
        assert_int_equal(f->m.xid(M03, 48, NO, NO), NVML_SUCCESS);
        wait_critical(f, 3);
        assert_health(f, "111110101");
        assert_notified(f, 0, 0, 1, 1, 0);
        /* CI 0 alone: every MIG device of GPU 0 (GI 3 and GI 9 are new) */
        assert_int_equal(f->m.xid(G0, 79, NO, 0), NVML_SUCCESS);
        wait_critical(f, 4);
        assert_health(f, "111100100");
        assert_notified(f, 0, 0, 2, 1, 1);
        assert_int_equal(gpu(f, G0).marked, 4);
        assert_true(gpu(f, G1).healthy);
        /* no GI/CI on GPU 1: its MIG device */
        assert_int_equal(f->m.xid(G1, 79, NO, NO), NVML_SUCCESS);
        wait_critical(f, 5);
        assert_health(f, "111100000");
        assert_notified(f, 0, 0, 3, 1, 1);
        stop_monitor(f);
}

/* Recovery after the quiet period, one update each way. */
static void test_recovery_after_quiet_period(void **state)
{
        struct fx *f = *state;
        start_monitor(f, NULL, NULL, QUIET_MS);
        uint64_t t0 = mock_ms_now();
        assert_int_equal(f->m.xid(G2, 79, NO, NO), NVML_SUCCESS);
        wait_critical(f, 1);
        assert_health(f, "100011111");
        wait_recoveries(f, 1);
        uint64_t dt = mock_ms_now() - t0;
        assert_true(dt >= QUIET_MS);
        assert_health(f, "111111111");
        assert_notified(f, 0, 2, 0, 0, 0);
        struct kdev_nvidia_gpu_health g = gpu(f, G2);
        assert_true(g.healthy);
        assert_int_equal(g.marked, 0);
        assert_string_equal(g.reason, "critical XID 79");
        assert_true(stats(f).probes >= 1);
        /* it can fail again afterwards */
        assert_int_equal(f->m.xid(G2, 79, NO, NO), NVML_SUCCESS);
        wait_critical(f, 2);
        assert_health(f, "100011111");
        assert_notified(f, 0, 3, 0, 0, 0);
        stop_monitor(f);
}

static void test_new_xid_restarts_quiet_period(void **state)
{
        struct fx *f = *state;
        start_monitor(f, NULL, NULL, QUIET_MS);
        assert_int_equal(f->m.xid(G3, 79, NO, NO), NVML_SUCCESS);
        wait_critical(f, 1);
        /* let probes pass for 2/3 of the quiet period, then a new XID */
        mock_loop_run_for(&f->loop, QUIET_MS * 2 / 3);
        assert_int_equal(stats(f).recoveries, 0);
        uint64_t t1 = mock_ms_now();
        assert_int_equal(f->m.xid(G3, 94, NO, NO), NVML_SUCCESS);
        wait_critical(f, 2);
        assert_health(f, "011111111");
        wait_recoveries(f, 1);
        assert_true(mock_ms_now() - t1 >= QUIET_MS);
        assert_health(f, "111111111");
        assert_notified(f, 2, 0, 0, 0, 0);
        assert_true(gpu(f, G3).last_xid == 94);
        stop_monitor(f);
}

/* No recovery while a reset is required or a row remap is pending. */
static void no_recovery_while(struct fx *f, kdevMockSetResetRequired_fn *set_flag,
                              const char *reason)
{
        start_monitor(f, NULL, NULL, QUIET_MS);
        assert_int_equal(set_flag(G3, 1), NVML_SUCCESS);
        assert_int_equal(f->m.xid(G3, 79, NO, NO), NVML_SUCCESS);
        wait_critical(f, 1);
        /* well past the quiet period */
        mock_loop_run_for(&f->loop, 2 * QUIET_MS);
        wait_more_probes(f, 2);
        assert_health(f, "011111111");
        assert_int_equal(stats(f).recoveries, 0);
        assert_string_equal(gpu(f, G3).reason, reason);
        /* clear right after a failed probe was applied: the quiet period
         * starts about now */
        wait_more_probes(f, 1);
        uint64_t t1 = mock_ms_now();
        assert_int_equal(set_flag(G3, 0), NVML_SUCCESS);
        wait_recoveries(f, 1);
        /* (with a margin of one probe interval for a preempted test thread) */
        assert_true(mock_ms_now() - t1 + PROBE_MS >= QUIET_MS);
        assert_health(f, "111111111");
        assert_notified(f, 2, 0, 0, 0, 0);
        stop_monitor(f);
}

static void test_no_recovery_while_reset_required(void **state)
{
        struct fx *f = *state;
        no_recovery_while(f, f->m.set_reset, "GPU requires a reset");
}

static void test_no_recovery_while_remap_pending(void **state)
{
        struct fx *f = *state;
        no_recovery_while(f, f->m.set_remap, "row remapping pending (reset required)");
}

/* A lost GPU: the event wait fails (every device Unhealthy, NVIDIA
 * internal/rm/health.go), the other GPUs recover after the quiet period, the lost one only
 * once it is back; then its events are registered again. */
static void test_lost_gpu_wait_error(void **state)
{
        struct fx *f = *state;
        start_monitor(f, NULL, NULL, QUIET_MS);
        assert_int_equal(f->m.set_lost(G3, 1), NVML_SUCCESS);
        unsigned long one = 1;
        assert_true(run_until(f, wait_errors_at_least, &one));
        assert_health(f, "000000000");
        assert_notified(f, 1, 1, 1, 1, 1);
        /* GPUs 0, 1, 2 recover; GPU 3 stays */
        wait_recoveries(f, 3);
        mock_loop_run_for(&f->loop, QUIET_MS);
        wait_more_probes(f, 2);
        assert_health(f, "011111111");
        /* GPUs 0 and 1 share nvidia.com/mig-1g.5gb: their recoveries are one
         * update together or one each */
        assert_int_equal(f->notified[R_GPU], 1);
        assert_int_equal(f->notified[R_SHARED], 2);
        assert_in_range(f->notified[R_MIG1G], 2, 3);
        assert_int_equal(f->notified[R_MIG3G], 2);
        assert_int_equal(f->notified[R_MIG2G], 2);
        unsigned mig1g = f->notified[R_MIG1G];
        struct kdev_nvidia_gpu_health g = gpu(f, G3);
        assert_false(g.healthy);
        assert_string_equal(g.reason, "GPU is lost");
        assert_int_equal(g.checks, KDEV_NVIDIA_HEALTH_UNREGISTERED);
        assert_int_equal(stats(f).recoveries, 3);
        /* back: probes pass, events registered again, recovery */
        assert_int_equal(f->m.set_lost(G3, 0), NVML_SUCCESS);
        wait_recoveries(f, 4);
        assert_health(f, "111111111");
        assert_notified(f, 2, 2, mig1g, 2, 2);
        assert_int_equal(gpu(f, G3).checks, KDEV_NVIDIA_HEALTH_REGISTERED);
        assert_int_equal(f->m.xid(G3, 79, NO, NO), NVML_SUCCESS);
        wait_critical(f, 1);
        assert_health(f, "011111111");
        assert_int_equal(stats(f).wait_errors, 1);
        stop_monitor(f);
}

/* NOT_SUPPORTED from nvmlDeviceRegisterEvents: no checks, stays Healthy. */
static void test_register_not_supported(void **state)
{
        struct fx *f = *state;
        assert_int_equal(f->m.set_error(G3, "nvmlDeviceRegisterEvents", NVML_ERROR_NOT_SUPPORTED),
                         NVML_SUCCESS);
        start_monitor(f, NULL, NULL, LONG);
        assert_int_equal(gpu(f, G3).checks, KDEV_NVIDIA_HEALTH_UNSUPPORTED);
        assert_true(gpu(f, G3).healthy);
        assert_notified(f, 0, 0, 0, 0, 0);
        /* no event reaches the monitor for GPU 3; one for GPU 2 does */
        assert_int_equal(f->m.xid(G3, 79, NO, NO), NVML_SUCCESS);
        assert_int_equal(f->m.xid(G2, 79, NO, NO), NVML_SUCCESS);
        wait_critical(f, 1);
        assert_health(f, "100011111");
        assert_int_equal(stats(f).xid_critical, 1);
        stop_monitor(f);
}

/* Other registration failures: the GPU's devices Unhealthy at start, in one
 * update; NOT_SUPPORTED from nvmlDeviceGetSupportedEventTypes is such a
 * failure too. Recovery once registration works again. */
static void test_register_failure(void **state)
{
        struct fx *f = *state;
        assert_int_equal(f->m.set_error(G2, "nvmlDeviceRegisterEvents", NVML_ERROR_UNKNOWN),
                         NVML_SUCCESS);
        assert_int_equal(
                f->m.set_error(G3, "nvmlDeviceGetSupportedEventTypes", NVML_ERROR_NOT_SUPPORTED),
                NVML_SUCCESS);
        start_monitor(f, NULL, NULL, QUIET_MS);
        assert_health(f, "000011111");
        assert_notified(f, 1, 1, 0, 0, 0);
        struct kdev_nvidia_gpu_health g = gpu(f, G2);
        assert_int_equal(g.checks, KDEV_NVIDIA_HEALTH_UNREGISTERED);
        assert_string_equal(g.reason, "cannot register health events: "
                                      "nvmlDeviceRegisterEvents: Unknown Error");
        assert_string_equal(gpu(f, G3).reason,
                            "cannot register health events: "
                            "nvmlDeviceGetSupportedEventTypes: Not Supported");
        /* probes retry the registration, which still fails */
        mock_loop_run_for(&f->loop, 2 * QUIET_MS);
        wait_more_probes(f, 2);
        assert_health(f, "000011111");
        assert_string_equal(gpu(f, G2).reason,
                            "probe failed: nvmlDeviceRegisterEvents: Unknown Error");
        assert_int_equal(f->m.set_error(G2, "nvmlDeviceRegisterEvents", NVML_SUCCESS),
                         NVML_SUCCESS);
        wait_recoveries(f, 1);
        assert_health(f, "011111111");
        assert_int_equal(gpu(f, G2).checks, KDEV_NVIDIA_HEALTH_REGISTERED);
        assert_notified(f, 1, 2, 0, 0, 0);
        /* events of GPU 2 arrive now */
        assert_int_equal(f->m.xid(G2, 79, NO, NO), NVML_SUCCESS);
        wait_critical(f, 1);
        assert_health(f, "000011111");
        stop_monitor(f);
}

/* Devices already Unhealthy at creation are adopted and recover. */
static void test_adopted_unhealthy(void **state)
{
        struct fx *f = *state;
        f->devs[7].healthy = false;   /* the 3g.20gb device */
        start_monitor(f, NULL, NULL, QUIET_MS);
        struct kdev_nvidia_gpu_health g = gpu(f, G0);
        assert_false(g.healthy);
        assert_string_equal(g.reason, "unhealthy when health monitoring started");
        wait_recoveries(f, 1);
        assert_health(f, "111111111");
        assert_notified(f, 0, 0, 0, 1, 0);
        stop_monitor(f);
}

static void assert_pev(struct fx *f, unsigned i, const char *id, bool healthy,
                       unsigned long long xid, const char *reason, unsigned batch)
{
        assert_true(i < f->n_pev);
        assert_string_equal(f->pev[i].id, id);
        assert_int_equal(f->pev[i].healthy, healthy);
        assert_true(f->pev[i].xid == xid);
        assert_string_equal(f->pev[i].reason, reason);
        assert_int_equal(f->pev[i].batch, batch);
}

/* Physical events: one per physical device whose health changes (the GPU for
 * its replicas, each MIG device by GI/CI), none for a repeat; the model's
 * physical records are current. */
static void test_physical_events(void **state)
{
        struct fx *f = *state;
        f->subscribe = true;
        start_monitor(f, NULL, NULL, LONG);
        assert_int_equal(f->n_batches, 0);
        assert_int_equal(f->m.xid(G2, 79, NO, NO), NVML_SUCCESS);
        wait_critical(f, 1);
        assert_int_equal(f->n_pev, 1);
        assert_pev(f, 0, G2, false, 79, "critical XID 79", 1);
        assert_false(kdev_physical_find(&f->set, G2)->healthy);
        assert_true(kdev_physical_find(&f->set, G3)->healthy);
        /* a repeat changes no physical device: no event */
        assert_int_equal(f->m.xid(G2, 48, NO, NO), NVML_SUCCESS);
        wait_critical(f, 2);
        assert_int_equal(f->n_pev, 1);
        /* GI 2 of GPU 0: the 3g.20gb MIG device only */
        assert_int_equal(f->m.xid(G0, 79, 2, NO), NVML_SUCCESS);
        wait_critical(f, 3);
        assert_int_equal(f->n_pev, 2);
        assert_pev(f, 1, M00, false, 79, "critical XID 79 (GPU instance 2, compute instance -1)",
                   2);
        assert_false(kdev_physical_find(&f->set, M00)->healthy);
        assert_true(kdev_physical_find(&f->set, M01)->healthy);
        assert_health(f, "100011101");
        assert_notified(f, 0, 1, 0, 1, 0);
        stop_monitor(f);
}

/* A recovery is one event per physical device the monitor marked. */
static void test_physical_event_recovery(void **state)
{
        struct fx *f = *state;
        f->subscribe = true;
        start_monitor(f, NULL, NULL, QUIET_MS);
        assert_int_equal(f->m.xid(G2, 79, NO, NO), NVML_SUCCESS);
        wait_critical(f, 1);
        wait_recoveries(f, 1);
        assert_int_equal(f->n_pev, 2);
        assert_pev(f, 0, G2, false, 79, "critical XID 79", 1);
        assert_pev(f, 1, G2, true, 79, "no critical event for 300 ms and probe passed", 2);
        assert_true(kdev_physical_find(&f->set, G2)->healthy);
        assert_health(f, "111111111");
        stop_monitor(f);
}

/* A device without a linked physical device is refused. */
static void test_needs_physical_devices(void **state)
{
        struct fx *f = *state;
        struct kdev_xid_policy p = { 0 };
        struct kdev_nvidia_health_options o = { .probe_interval_ms = 100 };
        struct kdev_err e;
        f->devs[5].physical = NULL;
        assert_null(kdev_nvidia_health_new(&f->loop, f->m.lib, &f->set, &p, &o, &e));
        assert_int_equal(e.code, EINVAL);
        assert_string_equal(e.msg, "health: device " M03 " of nvidia.com/mig-1g.5gb has no "
                                   "linked physical device");
}

/* Stop is prompt with the default wait timeout, in every state. */
static void test_stop(void **state)
{
        struct fx *f = *state;
        struct kdev_xid_policy p = { 0 };
        struct kdev_nvidia_health_options o = { .probe_interval_ms = 10000,
                                                .quiet_period_ms = 60000 };
        struct kdev_err e;
        /* never started */
        f->mon = kdev_nvidia_health_new(&f->loop, f->m.lib, &f->set, &p, &o, &e);
        assert_non_null(f->mon);
        stop_monitor(f);
        /* started, default 1000 ms wait */
        f->mon = kdev_nvidia_health_new(&f->loop, f->m.lib, &f->set, &p, &o, &e);
        assert_int_equal(kdev_nvidia_health_start(f->mon, &e), 0);
        assert_int_equal(kdev_nvml_refs(f->m.lib), 1);
        assert_int_equal(kdev_nvidia_health_start(f->mon, &e), -EALREADY);
        uint64_t t0 = mock_ms_now();
        stop_monitor(f);
        assert_true(mock_ms_now() - t0 < 5000);
        assert_int_equal(kdev_nvml_refs(f->m.lib), 0);
        assert_int_equal(f->m.count(), 0);
        /* bad options */
        o.probe_interval_ms = 0;
        assert_null(kdev_nvidia_health_new(&f->loop, f->m.lib, &f->set, &p, &o, &e));
        assert_int_equal(e.code, EINVAL);
        assert_string_equal(e.msg, "health: probe interval must be > 0");
        /* init failure: start fails, nothing held */
        o.probe_interval_ms = 100;
        f->mon = kdev_nvidia_health_new(&f->loop, f->m.lib, &f->set, &p, &o, &e);
        assert_int_equal(f->m.set_init_error(NVML_ERROR_DRIVER_NOT_LOADED), NVML_SUCCESS);
        assert_int_equal(kdev_nvidia_health_start(f->mon, &e), -ENODEV);
        assert_string_equal(e.msg, "nvml init failed: Driver Not Loaded");
        assert_int_equal(kdev_nvml_refs(f->m.lib), 0);
        f->m.set_init_error(NVML_SUCCESS);
        stop_monitor(f);
        kdev_nvidia_health_stop(NULL, NULL, NULL);
}

/* --- rediscovery ------------------------------------------------------------- */

struct redisc {
        struct kdev_nvml *lib;
        struct kdev_gpu_set *gpus;
        unsigned found;
        unsigned retries;
        char first_msg[KDEV_ERR_MSG_MAX];
        char last_msg[KDEV_ERR_MSG_MAX];
        int last_code;
        struct kdev_nvidia_rediscover *r;
};

static void on_discovered(void *arg, struct kdev_nvml *lib, struct kdev_gpu_set *gpus)
{
        struct redisc *d = arg;
        d->found++;
        d->lib = lib;
        d->gpus = gpus;
}

static void on_retry(void *arg, const struct kdev_err *err, unsigned attempt)
{
        struct redisc *d = arg;
        (void)attempt;
        if (d->retries == 0)
                snprintf(d->first_msg, sizeof(d->first_msg), "%s", err->msg);
        snprintf(d->last_msg, sizeof(d->last_msg), "%s", err->msg);
        d->last_code = err->code;
        d->retries++;
}

static const struct redisc *g_rd;

static bool attempts_at_least(struct fx *f, const void *arg)
{
        (void)f;
        return kdev_nvidia_rediscover_attempts(g_rd->r) >= *(const unsigned *)arg;
}

static bool found(struct fx *f, const void *arg)
{
        (void)f;
        (void)arg;
        return g_rd->found > 0;
}

static void rediscover_stop(struct fx *f, struct redisc *d)
{
        f->stopped = false;
        kdev_nvidia_rediscover_stop(d->r, on_stopped, f);
        f->redisc = NULL;
        assert_true(run_until(f, is_stopped, NULL));
        kdev_gpu_set_free(d->gpus);
        kdev_nvml_close(d->lib);
}

static void test_rediscover_after_init_error(void **state)
{
        struct fx *f = *state;
        struct redisc d = { 0 };
        g_rd = &d;
        struct kdev_nvml_options no = { .library_path = KDEV_MOCK_NVML_LIB };
        struct kdev_nvidia_rediscover_options o = {
                .nvml = &no, .interval_ms = 30, .discovered = on_discovered,
                .retry = on_retry, .arg = &d,
        };
        struct kdev_err e;
        assert_int_equal(f->m.set_init_error(NVML_ERROR_DRIVER_NOT_LOADED), NVML_SUCCESS);
        d.r = f->redisc = kdev_nvidia_rediscover_start(&f->loop, &o, &e);
        assert_non_null(d.r);
        unsigned three = 3;
        assert_true(run_until(f, attempts_at_least, &three));
        assert_int_equal(d.found, 0);
        assert_int_equal(d.retries, 1);   /* same message: reported once */
        assert_string_equal(d.first_msg, "nvml init failed: Driver Not Loaded");
        assert_int_equal(d.last_code, ENODEV);
        /* another error text is reported again */
        assert_int_equal(f->m.set_init_error(NVML_ERROR_LIB_RM_VERSION_MISMATCH), NVML_SUCCESS);
        unsigned more = kdev_nvidia_rediscover_attempts(d.r) + 2;
        assert_true(run_until(f, attempts_at_least, &more));
        assert_int_equal(d.retries, 2);
        assert_string_equal(d.last_msg, "nvml init failed: RM has detected an NVML/RM version "
                                        "mismatch.");
        /* the driver appears */
        assert_int_equal(f->m.set_init_error(NVML_SUCCESS), NVML_SUCCESS);
        assert_true(run_until(f, found, NULL));
        assert_int_equal(d.found, 1);
        assert_non_null(d.lib);
        assert_int_equal(d.gpus->n_gpus, 4);
        assert_string_equal(d.gpus->gpus[0].uuid, G0);
        assert_string_equal(d.gpus->gpus[3].uuid, G3);
        /* no attempt after success */
        unsigned n = kdev_nvidia_rediscover_attempts(d.r);
        mock_loop_run_for(&f->loop, 150);
        assert_int_equal(kdev_nvidia_rediscover_attempts(d.r), n);
        assert_int_equal(d.found, 1);
        assert_int_equal(kdev_nvml_refs(d.lib), 0);
        rediscover_stop(f, &d);
}

static void test_rediscover_library_appears(void **state)
{
        struct fx *f = *state;
        struct redisc d = { 0 };
        g_rd = &d;
        snprintf(f->tmp, sizeof(f->tmp), "/tmp/kdev-health-XXXXXX");
        assert_non_null(mkdtemp(f->tmp));
        char path[128];
        snprintf(path, sizeof(path), "%s/libnvidia-ml.so.1", f->tmp);
        struct kdev_nvml_options no = { .library_path = path };
        struct kdev_nvidia_rediscover_options o = {
                .nvml = &no, .interval_ms = 30, .discovered = on_discovered,
                .retry = on_retry, .arg = &d,
        };
        struct kdev_err e;
        d.r = f->redisc = kdev_nvidia_rediscover_start(&f->loop, &o, &e);
        assert_non_null(d.r);
        unsigned two = 2;
        assert_true(run_until(f, attempts_at_least, &two));
        assert_int_equal(d.retries, 1);
        assert_int_equal(d.last_code, EOPNOTSUPP);
        char want[256];
        snprintf(want, sizeof(want), "NVML library %s not found: ", path);
        assert_memory_equal(d.first_msg, want, strlen(want));
        assert_int_equal(symlink(KDEV_MOCK_NVML_LIB, path), 0);
        assert_true(run_until(f, found, NULL));
        assert_int_equal(d.gpus->n_gpus, 4);
        rediscover_stop(f, &d);
}

static void test_rediscover_stop_early_and_bad_options(void **state)
{
        struct fx *f = *state;
        struct redisc d = { 0 };
        struct kdev_err e;
        struct kdev_nvidia_rediscover_options o = { .interval_ms = 0,
                                                    .discovered = on_discovered };
        assert_null(kdev_nvidia_rediscover_start(&f->loop, &o, &e));
        assert_int_equal(e.code, EINVAL);
        o.interval_ms = 10;
        o.discovered = NULL;
        assert_null(kdev_nvidia_rediscover_start(&f->loop, &o, &e));
        /* stopped before any attempt, while the library is open after one */
        struct kdev_nvml_options no = { .library_path = KDEV_MOCK_NVML_LIB };
        o.nvml = &no;
        o.discovered = on_discovered;
        o.retry = on_retry;
        o.arg = &d;
        g_rd = &d;
        assert_int_equal(f->m.set_init_error(NVML_ERROR_DRIVER_NOT_LOADED), NVML_SUCCESS);
        d.r = f->redisc = kdev_nvidia_rediscover_start(&f->loop, &o, &e);
        unsigned one = 1;
        assert_true(run_until(f, attempts_at_least, &one));
        rediscover_stop(f, &d);
        assert_int_equal(d.found, 0);
        f->m.set_init_error(NVML_SUCCESS);
        kdev_nvidia_rediscover_stop(NULL, NULL, NULL);
}

/* --- log storm --------------------------------------------------------------- */

static uint64_t g_log_ms; /* the log clock: ms after 2026-11-29T11:00:00Z */

static int log_clock(struct timespec *ts)
{
        ts->tv_sec = 1795950000 + (time_t)(g_log_ms / 1000);
        ts->tv_nsec = (long)(g_log_ms % 1000) * 1000000L;
        return 0;
}

static void on_event(void *arg, const char *kind, unsigned long long xid, unsigned count)
{
        struct fx *f = arg;
        if (strcmp(kind, "xid") == 0 && xid == 79)
                f->ev_xid79 += count;
        if (strcmp(kind, "xid_ignored") == 0 && xid == 13)
                f->ev_ignored13 += count;
}

struct cap {
        FILE *tmp;
        int saved;
};

/* The lines written to stderr so far whose msg is one of the XID lines,
 * without their "ts=... " (malloc'ed). */
static char *cap_lines(struct cap *c)
{
        static const char *const msgs[] = {"msg=\"GPU unhealthy\"",
                                           "msg=\"GPU still unhealthy",
                                           "msg=\"ignoring XID"};
        fflush(stderr);
        off_t len = lseek(fileno(c->tmp), 0, SEEK_END);
        char *all = calloc(1, (size_t)len + 1), *out = calloc(1, (size_t)len + 1);
        assert_non_null(all);
        assert_non_null(out);
        assert_int_equal(pread(fileno(c->tmp), all, (size_t)len, 0), len);
        for (char *line = strtok(all, "\n"); line; line = strtok(NULL, "\n")) {
                char *rest = strchr(line, ' ');
                bool keep = false;
                for (size_t i = 0; rest && i < 3; i++)
                        keep |= strstr(rest, msgs[i]) != NULL;
                if (keep) {
                        strcat(out, rest + 1);
                        strcat(out, "\n");
                }
        }
        free(all);
        return out;
}

struct want_text {
        struct cap *c;
        const char *text;
};

static bool cap_has(struct fx *f, const void *arg)
{
        const struct want_text *w = arg;
        (void)f;
        char *got = cap_lines(w->c);
        bool yes = strstr(got, w->text) != NULL;
        free(got);
        return yes;
}

/* An XID storm on one GPU: 150 critical XIDs 79 and 100 ignored XIDs 13
 * (the mock queues 256). Logged: the transition, the first "still
 * unhealthy" and the first "ignoring"; the other 148 and 99 are counted
 * and, once the 5 s window of the log clock is over, printed as one line
 * each. The event observer (what the metrics count) sees every event. */
static void test_xid_storm_log_bounded(void **state)
{
        struct fx *f = *state;
        struct kdev_xid_policy p;
        struct kdev_err e;
        struct cap c;

        g_log_ms = 0;
        kdev_log_set_clock(log_clock);
        fflush(stderr);
        c.tmp = tmpfile();
        assert_non_null(c.tmp);
        c.saved = dup(STDERR_FILENO);
        assert_true(dup2(fileno(c.tmp), STDERR_FILENO) >= 0);

        assert_int_equal(kdev_xid_policy_parse(NULL, NULL, &p, NULL, NULL, &e), 0);
        struct kdev_nvidia_health_options o = {
                .probe_interval_ms = PROBE_MS,
                .quiet_period_ms = LONG,
                .wait_timeout_ms = WAIT_MS,
                .notify = on_notify,
                .notify_arg = f,
                .event = on_event,
                .event_arg = f,
        };
        f->mon = kdev_nvidia_health_new(&f->loop, f->m.lib, &f->set, &p, &o, &e);
        kdev_xid_policy_clear(&p);
        assert_non_null(f->mon);
        assert_int_equal(kdev_nvidia_health_start(f->mon, &e), 0);
        for (int i = 0; i < 150; i++)
                assert_int_equal(f->m.xid(G3, 79, NO, NO), NVML_SUCCESS);
        for (int i = 0; i < 100; i++)
                assert_int_equal(f->m.xid(G3, 13, NO, NO), NVML_SUCCESS);
        unsigned long n = 100;
        wait_critical(f, 150);
        assert_true(run_until(f, ignored_at_least, &n));
        char *got = cap_lines(&c);
        assert_string_equal(got,
                            "level=warn msg=\"GPU unhealthy\" uuid=" G3 " xid=79 "
                            "reason=\"critical XID 79\" devices=1\n"
                            "level=info msg=\"GPU still unhealthy; quiet period restarted\" "
                            "uuid=" G3 " xid=79 reason=\"critical XID 79\"\n"
                            "level=info msg=\"ignoring XID (not critical by policy)\" "
                            "uuid=" G3 " xid=13\n");
        free(got);
        /* the window ends on the log clock; the monitor's timer notices */
        g_log_ms = 5000;
        struct want_text w = {&c, "repeated=99\n"};
        assert_true(run_until(f, cap_has, &w));
        stop_monitor(f);
        got = cap_lines(&c);
        fflush(stderr);
        assert_true(dup2(c.saved, STDERR_FILENO) >= 0);
        close(c.saved);
        fclose(c.tmp);
        kdev_log_set_clock(NULL);
        assert_string_equal(got,
                            "level=warn msg=\"GPU unhealthy\" uuid=" G3 " xid=79 "
                            "reason=\"critical XID 79\" devices=1\n"
                            "level=info msg=\"GPU still unhealthy; quiet period restarted\" "
                            "uuid=" G3 " xid=79 reason=\"critical XID 79\"\n"
                            "level=info msg=\"ignoring XID (not critical by policy)\" "
                            "uuid=" G3 " xid=13\n"
                            "level=info msg=\"GPU still unhealthy; quiet period restarted, "
                            "repeated 148 times in the last 5 s\" uuid=" G3 " xid=79 "
                            "reason=\"critical XID 79\" repeated=148\n"
                            "level=info msg=\"ignoring XID (not critical by policy), repeated "
                            "99 times in the last 5 s\" uuid=" G3 " xid=13 repeated=99\n");
        free(got);
        assert_int_equal(f->ev_xid79, 150);
        assert_int_equal(f->ev_ignored13, 100);
}

int main(void)
{
        const struct CMUnitTest tests[] = {
                cmocka_unit_test_setup_teardown(test_xid_marks_every_replica_once, setup,
                                                teardown),
                cmocka_unit_test_setup_teardown(test_take_over_pending_events, setup,
                                                teardown),
                cmocka_unit_test_setup_teardown(test_xid_burst, setup, teardown),
                cmocka_unit_test_setup_teardown(test_xid_storm_log_bounded, setup, teardown),
                cmocka_unit_test_setup_teardown(test_ignored_and_ecc, setup, teardown),
                cmocka_unit_test_setup_teardown(test_env_policy, setup, teardown),
                cmocka_unit_test_setup_teardown(test_env_enable_all, setup, teardown),
                cmocka_unit_test_setup_teardown(test_env_disabled, setup, teardown),
                cmocka_unit_test_setup_teardown(test_mig_gi_ci_filter, setup, teardown),
                cmocka_unit_test_setup_teardown(test_recovery_after_quiet_period, setup,
                                                teardown),
                cmocka_unit_test_setup_teardown(test_new_xid_restarts_quiet_period, setup,
                                                teardown),
                cmocka_unit_test_setup_teardown(test_no_recovery_while_reset_required, setup,
                                                teardown),
                cmocka_unit_test_setup_teardown(test_no_recovery_while_remap_pending, setup,
                                                teardown),
                cmocka_unit_test_setup_teardown(test_lost_gpu_wait_error, setup, teardown),
                cmocka_unit_test_setup_teardown(test_register_not_supported, setup, teardown),
                cmocka_unit_test_setup_teardown(test_register_failure, setup, teardown),
                cmocka_unit_test_setup_teardown(test_adopted_unhealthy, setup, teardown),
                cmocka_unit_test_setup_teardown(test_physical_events, setup, teardown),
                cmocka_unit_test_setup_teardown(test_physical_event_recovery, setup, teardown),
                cmocka_unit_test_setup_teardown(test_needs_physical_devices, setup, teardown),
                cmocka_unit_test_setup_teardown(test_stop, setup, teardown),
                cmocka_unit_test_setup_teardown(test_rediscover_after_init_error, setup,
                                                teardown),
                cmocka_unit_test_setup_teardown(test_rediscover_library_appears, setup,
                                                teardown),
                cmocka_unit_test_setup_teardown(test_rediscover_stop_early_and_bad_options,
                                                setup, teardown),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
