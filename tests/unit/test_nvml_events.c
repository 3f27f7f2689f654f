/* NVML health events (src/nvml/events.h) against the mock libnvidia-ml.so.1
 * through the real loader, on a libuv loop: the exact physical events the
 * watcher posts for registrations, XIDs (whole GPU and MIG, every XID: the
 * XID policy is not the NVML backend's), other event types, a lost GPU (wait
 * error, rebuild) and probes.
 *
 * Watched GPUs of mig-a100-40gb.yaml, in this order: W_G3 (whole GPU), W_G0
 * (MIG: GI 2/3/9/10, CI 0), W_NOPE (a UUID the driver does not know).
 * Intervals are small (probe 40 ms, wait 50 ms); waits poll with generous
 * deadlines. */
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

#include "mock_fixture.h"
#include "mock_loop.h"
#include "nvml/events.h"
#include "nvml/loader.h"

#define NO KDEV_NVML_NO_INSTANCE

#define G0 "GPU-c1ae70ed-64b5-7842-b2ed-e9039613ae69"
#define G3 "GPU-49c5ccb8-7f8c-230b-4fe7-33825480cfa5"
#define NOPE "GPU-00000000-0000-0000-0000-000000000000"
#define M02 "MIG-d49257bf-597e-857d-3bb4-e6384c9909cc" /* GPU 0, 1g.5gb, GI 9 CI 0 */

enum { W_G3, W_G0, W_NOPE, N_WATCHED };

#define PROBE_MS 40
#define WAIT_MS 50
#define DEADLINE_MS 15000
#define MAX_EV 64

struct fx {
        struct mock_nvml m;
        uv_loop_t loop;
        uv_timer_t tick;
        struct kdev_nvml_events *w;
        struct kdev_nvml_event ev[MAX_EV]; /* every event received, in order */
        unsigned batch[MAX_EV];            /* the batch each came in (1, 2, ...) */
        size_t n_ev;
        unsigned n_batches, overflows;
        bool stopped;
};

static void on_events(void *arg, const struct kdev_nvml_event *ev, size_t n, bool overflow)
{
        struct fx *f = arg;
        f->n_batches++;
        f->overflows += overflow;
        for (size_t i = 0; i < n && f->n_ev < MAX_EV; i++) {
                f->ev[f->n_ev] = ev[i];
                f->batch[f->n_ev] = f->n_batches;
                f->n_ev++;
        }
}

static int setup(void **state)
{
        struct fx *f = calloc(1, sizeof(*f));
        if (!f || mock_loop_open(&f->m, &f->loop, &f->tick, TOPO("mig-a100-40gb.yaml")) != 0)
                return -1;
        *state = f;
        return 0;
}

static void on_stopped(void *arg)
{
        struct fx *f = arg;
        f->stopped = true;
}

/* Runs the loop until |n| events arrived (or, with |stopped|, the stop's
 * done ran) or DEADLINE_MS passed. */
static void run_until(struct fx *f, size_t n, bool stopped)
{
        uint64_t end = mock_ms_now() + DEADLINE_MS;
        while ((stopped ? !f->stopped : f->n_ev < n) && mock_ms_now() < end)
                uv_run(&f->loop, UV_RUN_ONCE);
}

static void stop_watcher(struct fx *f)
{
        f->stopped = false;
        kdev_nvml_events_stop(f->w, on_stopped, f);
        f->w = NULL;
        size_t n = f->n_ev;
        run_until(f, 0, true);
        assert_true(f->stopped);
        assert_int_equal(f->n_ev, n); /* nothing after the stop */
}

static int teardown(void **state)
{
        struct fx *f = *state;
        if (f->w)
                stop_watcher(f);
        mock_loop_close(&f->loop, &f->tick);
        assert_int_equal(kdev_nvml_refs(f->m.lib), 0);
        assert_int_equal(f->m.count(), 0);
        mock_nvml_close(&f->m);
        free(f);
        return 0;
}

/* A watcher over W_G3, W_G0, W_NOPE registering |types|. */
static struct kdev_nvml_events *new_watcher(struct fx *f, unsigned long long types,
                                            struct kdev_err *e)
{
        static const char *const uuids[N_WATCHED] = { G3, G0, NOPE };
        struct kdev_nvml_events_options o = {
                .event_types = types,
                .wait_timeout_ms = WAIT_MS,
                .probe_interval_ms = PROBE_MS,
                .on_events = on_events,
                .arg = f,
        };
        return kdev_nvml_events_new(&f->loop, f->m.lib, uuids, N_WATCHED, &o, e);
}

static void start_watcher(struct fx *f, unsigned long long types)
{
        struct kdev_err e;
        f->w = new_watcher(f, types, &e);
        assert_non_null(f->w);
        if (kdev_nvml_events_start(f->w, &e) != 0)
                fail_msg("start: %s", e.msg);
}

#define ALL_TYPES                                                                              \
        ((unsigned long long)(nvmlEventTypeXidCriticalError | nvmlEventTypeDoubleBitEccError | \
                              nvmlEventTypeSingleBitEccError))

/* Event |i| is a REGISTER of GPU |gpu| (|uuid|) answering |ret| from |call|. */
static void assert_register(const struct fx *f, size_t i, int gpu, const char *uuid,
                            nvmlReturn_t ret, const char *call)
{
        assert_true(i < f->n_ev);
        const struct kdev_nvml_event *e = &f->ev[i];
        assert_int_equal(e->kind, KDEV_NVML_EVENT_REGISTER);
        assert_int_equal(e->gpu, gpu);
        assert_string_equal(e->uuid, uuid);
        assert_int_equal(e->ret, ret);
        assert_string_equal(e->call, call);
        assert_int_equal(e->count, 1);
}

/* Event |i| is |count| XIDs |xid| on GPU |gpu| (|uuid|) with GI/CI |gi|/|ci|. */
static void assert_xid_n(const struct fx *f, size_t i, int gpu, const char *uuid,
                         unsigned long long xid, unsigned gi, unsigned ci, unsigned count)
{
        assert_true(i < f->n_ev);
        const struct kdev_nvml_event *e = &f->ev[i];
        assert_int_equal(e->kind, KDEV_NVML_EVENT_XID);
        assert_int_equal(e->gpu, gpu);
        assert_string_equal(e->uuid, uuid);
        assert_true(e->data == xid);
        assert_int_equal(e->gi, gi);
        assert_int_equal(e->ci, ci);
        assert_int_equal(e->ret, NVML_SUCCESS);
        assert_string_equal(e->call, "");
        assert_int_equal(e->count, count);
}

#define assert_xid(f, i, gpu, uuid, xid, gi, ci) assert_xid_n(f, i, gpu, uuid, xid, gi, ci, 1)

/* Event |i| is a probe of GPU |gpu| with |outcome|, |ret| from |call|, and
 * (|reg_tried|) the registration's |reg|. */
static void assert_probe(const struct fx *f, size_t i, int gpu, enum kdev_nvml_probe outcome,
                         nvmlReturn_t ret, const char *call, bool reg_tried, nvmlReturn_t reg)
{
        assert_true(i < f->n_ev);
        const struct kdev_nvml_event *e = &f->ev[i];
        assert_int_equal(e->kind, KDEV_NVML_EVENT_PROBE);
        assert_int_equal(e->gpu, gpu);
        assert_int_equal(e->probe, outcome);
        assert_int_equal(e->ret, ret);
        assert_string_equal(e->call, call);
        assert_int_equal(e->reg_tried, reg_tried);
        assert_int_equal(e->reg, reg);
}

/* --- tests ------------------------------------------------------------------- */

/* Start: one batch with every GPU's registration, before start returns. */
static void test_start_registrations(void **state)
{
        struct fx *f = *state;
        start_watcher(f, ALL_TYPES);
        assert_int_equal(f->n_batches, 1);
        assert_int_equal(f->n_ev, 3);
        assert_register(f, 0, W_G3, G3, NVML_SUCCESS, "nvmlDeviceRegisterEvents");
        assert_register(f, 1, W_G0, G0, NVML_SUCCESS, "nvmlDeviceRegisterEvents");
        assert_register(f, 2, W_NOPE, NOPE, NVML_ERROR_NOT_FOUND, "nvmlDeviceGetHandleByUUID");
        assert_int_equal(kdev_nvml_refs(f->m.lib), 1);
        struct kdev_err e;
        assert_int_equal(kdev_nvml_events_start(f->w, &e), -EALREADY);
        assert_string_equal(e.msg, "health: already started");
        stop_watcher(f);
        assert_int_equal(kdev_nvml_refs(f->m.lib), 0);
}

/* XIDs, whole GPU and MIG, each as posted: no XID is filtered here (13 is
 * one NVIDIA ignores by default); a MIG UUID arrives as its GPU with the MIG
 * device's GI/CI; other types carry the type. */
static void test_xid_and_other_events(void **state)
{
        struct fx *f = *state;
        start_watcher(f, ALL_TYPES);
        assert_int_equal(f->m.xid(G3, 79, NO, NO), NVML_SUCCESS);
        run_until(f, 4, false);
        assert_int_equal(f->m.xid(G0, 48, 2, NO), NVML_SUCCESS);
        run_until(f, 5, false);
        assert_int_equal(f->m.xid(M02, 13, NO, NO), NVML_SUCCESS);
        run_until(f, 6, false);
        assert_int_equal(f->m.event(G3, nvmlEventTypeDoubleBitEccError, 0, NO, NO),
                         NVML_SUCCESS);
        run_until(f, 7, false);
        assert_int_equal(f->n_ev, 7);
        assert_xid(f, 3, W_G3, G3, 79, NO, NO);
        assert_xid(f, 4, W_G0, G0, 48, 2, NO);
        assert_xid(f, 5, W_G0, G0, 13, 9, 0);
        const struct kdev_nvml_event *e = &f->ev[6];
        assert_int_equal(e->kind, KDEV_NVML_EVENT_OTHER);
        assert_int_equal(e->gpu, W_G3);
        assert_string_equal(e->uuid, G3);
        assert_true(e->data == (unsigned long long)nvmlEventTypeDoubleBitEccError);
        assert_int_equal(e->count, 1);
        /* nvmlDeviceGetUUID failing: the GPU is known by its handle */
        assert_int_equal(f->m.set_error(G3, "nvmlDeviceGetUUID", NVML_ERROR_UNKNOWN),
                         NVML_SUCCESS);
        assert_int_equal(f->m.xid(G3, 94, NO, NO), NVML_SUCCESS);
        run_until(f, 8, false);
        assert_xid(f, 7, W_G3, G3, 94, NO, NO);
        assert_int_equal(f->overflows, 0);
        stop_watcher(f);
}

/* Only the types asked for are registered: an ECC event of an XID-only
 * watcher never arrives. A burst of one XID posted while the loop does not
 * run is one entry that counts every occurrence. */
static void test_event_types_and_burst(void **state)
{
        struct fx *f = *state;
        start_watcher(f, (unsigned long long)nvmlEventTypeXidCriticalError);
        assert_int_equal(f->m.event(G3, nvmlEventTypeSingleBitEccError, 0, NO, NO),
                         NVML_SUCCESS);
        for (int i = 0; i < 50; i++)
                assert_int_equal(f->m.xid(G0, 79, NO, NO), NVML_SUCCESS);
        /* the thread takes all 50 within a wait or so (50 ms); the loop,
         * not running, drains nothing meanwhile */
        usleep(1000 * 1000);
        run_until(f, 4, false);
        assert_int_equal(f->n_ev, 4);
        assert_int_equal(f->batch[3], 2);
        assert_xid_n(f, 3, W_G0, G0, 79, NO, NO, 50);
        assert_int_equal(f->overflows, 0);
        stop_watcher(f);
}

/* A lost GPU: the wait fails (GPU_IS_LOST), the event set is rebuilt (the
 * lost GPU's registration fails, the unknown one is tried again); its probe
 * fails until it is back, then registers it again. */
static void test_lost_gpu_and_probes(void **state)
{
        struct fx *f = *state;
        start_watcher(f, ALL_TYPES);
        assert_int_equal(f->m.set_lost(G3, 1), NVML_SUCCESS);
        run_until(f, 7, false);
        assert_int_equal(f->n_ev, 7);
        const struct kdev_nvml_event *e = &f->ev[3];
        assert_int_equal(e->kind, KDEV_NVML_EVENT_WAIT_ERROR);
        assert_int_equal(e->gpu, -1);
        assert_string_equal(e->uuid, "");
        assert_int_equal(e->ret, NVML_ERROR_GPU_IS_LOST);
        assert_string_equal(e->call, "nvmlEventSetWait");
        assert_register(f, 4, W_G3, G3, NVML_ERROR_GPU_IS_LOST,
                        "nvmlDeviceGetSupportedEventTypes");
        assert_register(f, 5, W_G0, G0, NVML_SUCCESS, "nvmlDeviceRegisterEvents");
        assert_register(f, 6, W_NOPE, NOPE, NVML_ERROR_NOT_FOUND, "nvmlDeviceGetHandleByUUID");
        /* probes only when asked for */
        mock_loop_run_for(&f->loop, 3 * PROBE_MS);
        assert_int_equal(f->n_ev, 7);
        kdev_nvml_events_want_probe(f->w, W_G3, true);
        kdev_nvml_events_want_probe(f->w, N_WATCHED, true); /* not a GPU: ignored */
        run_until(f, 8, false);
        assert_probe(f, 7, W_G3, KDEV_NVML_PROBE_LOST, NVML_ERROR_GPU_IS_LOST,
                     "nvmlDeviceGetRemappedRows", false, NVML_SUCCESS);
        assert_string_equal(f->ev[7].uuid, G3);
        /* back: the probe passes and registers the GPU again */
        assert_int_equal(f->m.set_lost(G3, 0), NVML_SUCCESS);
        size_t i;
        uint64_t end = mock_ms_now() + DEADLINE_MS;
        for (i = f->n_ev; mock_ms_now() < end; i++) {
                run_until(f, i + 1, false);
                assert_true(i < f->n_ev);
                if (f->ev[i].probe == KDEV_NVML_PROBE_PASSED)
                        break;
                assert_probe(f, i, W_G3, KDEV_NVML_PROBE_LOST, NVML_ERROR_GPU_IS_LOST,
                             "nvmlDeviceGetRemappedRows", false, NVML_SUCCESS);
        }
        assert_probe(f, i, W_G3, KDEV_NVML_PROBE_PASSED, NVML_SUCCESS, "", true, NVML_SUCCESS);
        /* registered: the next probe does not register again, and events come */
        run_until(f, i + 2, false);
        assert_probe(f, i + 1, W_G3, KDEV_NVML_PROBE_PASSED, NVML_SUCCESS, "", false,
                     NVML_SUCCESS);
        kdev_nvml_events_want_probe(f->w, W_G3, false);
        mock_loop_run_for(&f->loop, 2 * PROBE_MS); /* a probe already under way may still arrive */
        size_t n = f->n_ev;
        assert_int_equal(f->m.xid(G3, 79, NO, NO), NVML_SUCCESS);
        run_until(f, n + 1, false);
        assert_int_equal(f->n_ev, n + 1);
        assert_xid(f, n, W_G3, G3, 79, NO, NO);
        stop_watcher(f);
}

/* Probe outcomes of a GPU that answers: reset required, pending row remap,
 * an unknown GPU's handle lookup, another error. */
static void test_probe_outcomes(void **state)
{
        struct fx *f = *state;
        start_watcher(f, ALL_TYPES);
        assert_int_equal(f->m.set_reset(G3, 1), NVML_SUCCESS);
        kdev_nvml_events_want_probe(f->w, W_G3, true);
        run_until(f, 4, false);
        assert_probe(f, 3, W_G3, KDEV_NVML_PROBE_RESET_REQUIRED, NVML_ERROR_RESET_REQUIRED,
                     "nvmlDeviceGetRemappedRows", false, NVML_SUCCESS);
        kdev_nvml_events_want_probe(f->w, W_G3, false);
        assert_int_equal(f->m.set_reset(G3, 0), NVML_SUCCESS);
        mock_loop_run_for(&f->loop, 2 * PROBE_MS);

        size_t n = f->n_ev;
        assert_int_equal(f->m.set_remap(G0, 1), NVML_SUCCESS);
        kdev_nvml_events_want_probe(f->w, W_G0, true);
        run_until(f, n + 1, false);
        assert_probe(f, n, W_G0, KDEV_NVML_PROBE_REMAP_PENDING, NVML_SUCCESS, "", false,
                     NVML_SUCCESS);
        kdev_nvml_events_want_probe(f->w, W_G0, false);
        mock_loop_run_for(&f->loop, 2 * PROBE_MS);

        n = f->n_ev;
        kdev_nvml_events_want_probe(f->w, W_NOPE, true);
        run_until(f, n + 1, false);
        assert_probe(f, n, W_NOPE, KDEV_NVML_PROBE_FAILED, NVML_ERROR_NOT_FOUND,
                     "nvmlDeviceGetHandleByUUID", false, NVML_SUCCESS);
        kdev_nvml_events_want_probe(f->w, W_NOPE, false);
        mock_loop_run_for(&f->loop, 2 * PROBE_MS);

        n = f->n_ev;
        assert_int_equal(f->m.set_error(G3, "nvmlDeviceGetMemoryInfo", NVML_ERROR_UNKNOWN),
                         NVML_SUCCESS);
        kdev_nvml_events_want_probe(f->w, W_G3, true);
        run_until(f, n + 1, false);
        assert_probe(f, n, W_G3, KDEV_NVML_PROBE_FAILED, NVML_ERROR_UNKNOWN,
                     "nvmlDeviceGetMemoryInfo", false, NVML_SUCCESS);
        stop_watcher(f);
}

/* NOT_SUPPORTED from nvmlDeviceRegisterEvents, and a mask with no supported
 * type, are both NOT_SUPPORTED from that call; such a GPU is not registered
 * again after a rebuild. */
static void test_unsupported(void **state)
{
        struct fx *f = *state;
        assert_int_equal(f->m.set_error(G0, "nvmlDeviceRegisterEvents", NVML_ERROR_NOT_SUPPORTED),
                         NVML_SUCCESS);
        start_watcher(f, ALL_TYPES);
        assert_register(f, 1, W_G0, G0, NVML_ERROR_NOT_SUPPORTED, "nvmlDeviceRegisterEvents");
        assert_int_equal(f->m.set_lost(G3, 1), NVML_SUCCESS);
        run_until(f, 6, false);
        assert_int_equal(f->n_ev, 6);
        assert_int_equal(f->ev[3].kind, KDEV_NVML_EVENT_WAIT_ERROR);
        assert_register(f, 4, W_G3, G3, NVML_ERROR_GPU_IS_LOST,
                        "nvmlDeviceGetSupportedEventTypes");
        assert_register(f, 5, W_NOPE, NOPE, NVML_ERROR_NOT_FOUND, "nvmlDeviceGetHandleByUUID");
        assert_int_equal(f->m.set_lost(G3, 0), NVML_SUCCESS);
        stop_watcher(f);
        /* no event type in the mask */
        f->n_ev = 0;
        f->n_batches = 0;
        f->m.reset();
        start_watcher(f, 1ull << 40);
        assert_int_equal(f->n_ev, 3);
        assert_register(f, 0, W_G3, G3, NVML_ERROR_NOT_SUPPORTED, "nvmlDeviceRegisterEvents");
        assert_register(f, 1, W_G0, G0, NVML_ERROR_NOT_SUPPORTED, "nvmlDeviceRegisterEvents");
        stop_watcher(f);
}

/* Bad options, an NVML init failure, a stop before start, NULL. */
static void test_errors_and_stop(void **state)
{
        struct fx *f = *state;
        struct kdev_err e;
        struct kdev_nvml_events_options o = { .wait_timeout_ms = WAIT_MS,
                                              .probe_interval_ms = PROBE_MS };
        assert_null(kdev_nvml_events_new(&f->loop, f->m.lib, NULL, 0, &o, &e));
        assert_int_equal(e.code, EINVAL);
        assert_string_equal(e.msg, "health: event watcher needs a callback, a wait timeout > 0 "
                                   "and a probe interval > 0");
        o.on_events = on_events;
        o.wait_timeout_ms = 0;
        assert_null(kdev_nvml_events_new(&f->loop, f->m.lib, NULL, 0, &o, &e));
        assert_int_equal(e.code, EINVAL);
        assert_null(kdev_nvml_events_new(&f->loop, f->m.lib, NULL, 0, NULL, &e));
        assert_int_equal(e.code, EINVAL);

        f->w = new_watcher(f, ALL_TYPES, &e);
        assert_non_null(f->w);
        assert_int_equal(f->m.set_init_error(NVML_ERROR_DRIVER_NOT_LOADED), NVML_SUCCESS);
        assert_int_equal(kdev_nvml_events_start(f->w, &e), -ENODEV);
        assert_string_equal(e.msg, "nvml init failed: Driver Not Loaded");
        assert_int_equal(kdev_nvml_refs(f->m.lib), 0);
        assert_int_equal(f->n_batches, 0);
        f->m.set_init_error(NVML_SUCCESS);
        stop_watcher(f);

        /* never started; no GPUs at all: start posts no batch */
        f->w = new_watcher(f, ALL_TYPES, &e);
        assert_non_null(f->w);
        stop_watcher(f);
        o.on_events = on_events;
        o.wait_timeout_ms = 1000;
        o.arg = f;
        f->w = kdev_nvml_events_new(&f->loop, f->m.lib, NULL, 0, &o, &e);
        assert_non_null(f->w);
        assert_int_equal(kdev_nvml_events_start(f->w, &e), 0);
        assert_int_equal(f->n_batches, 0);
        uint64_t t0 = mock_ms_now();
        stop_watcher(f);
        assert_true(mock_ms_now() - t0 < 5000);
        kdev_nvml_events_stop(NULL, NULL, NULL);
}

int main(void)
{
        const struct CMUnitTest tests[] = {
                cmocka_unit_test_setup_teardown(test_start_registrations, setup, teardown),
                cmocka_unit_test_setup_teardown(test_xid_and_other_events, setup, teardown),
                cmocka_unit_test_setup_teardown(test_event_types_and_burst, setup, teardown),
                cmocka_unit_test_setup_teardown(test_lost_gpu_and_probes, setup, teardown),
                cmocka_unit_test_setup_teardown(test_probe_outcomes, setup, teardown),
                cmocka_unit_test_setup_teardown(test_unsupported, setup, teardown),
                cmocka_unit_test_setup_teardown(test_errors_and_stop, setup, teardown),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
