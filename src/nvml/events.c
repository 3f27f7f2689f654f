/* NVML health events (events.h).
 *
 * Ownership and threads. The thread owns the NVML event set, the GPU handles
 * and the registration flags (written by kdev_nvml_events_start before the
 * thread exists, then only by the thread). The thread and the loop share,
 * under |mu|, only the event queue, the per-GPU "probe wanted" flags and the
 * stop/exit flags; nobody holds |mu| across an NVML call.
 */
#include "nvml/events.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/wait.h"

struct wgpu {
        char uuid[NVML_DEVICE_UUID_V2_BUFFER_SIZE];
        bool want_probe;            /* shared, under mu */
        /* the thread (and start) */
        nvmlDevice_t handle;
        bool registered;
        bool unsupported;
};

struct kdev_nvml_events {
        struct kdev_nvml *lib;
        const struct kdev_nvml_api *api;
        struct kdev_nvml_events_options o;
        struct wgpu *gpus;
        size_t n_gpus;

        uv_async_t async;
        bool started, thread_started, joined, stopping;
        void (*done)(void *arg);
        void *done_arg;
        pthread_t thread;

        /* the thread */
        nvmlEventSet_t evset;
        nvmlReturn_t evset_err;     /* last nvmlEventSetCreate error while evset is NULL */
        bool *todo;                 /* probe list copy */

        /* shared */
        pthread_mutex_t mu;
        pthread_cond_t cond;        /* stop wake-up for the thread's sleeps */
        bool stop, exited, overflow;
        struct kdev_nvml_event *q, *work;
        size_t qn, qcap, workn, workcap;
};

static uint64_t now_ms(void)
{
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

/* --- the thread --------------------------------------------------------------- */

static bool event_same(const struct kdev_nvml_event *a, const struct kdev_nvml_event *b)
{
        return a->kind == b->kind && a->gpu == b->gpu && a->data == b->data && a->gi == b->gi &&
               a->ci == b->ci && a->ret == b->ret && a->probe == b->probe && a->reg == b->reg &&
               a->reg_tried == b->reg_tried && strcmp(a->call, b->call) == 0 &&
               strcmp(a->uuid, b->uuid) == 0;
}

/* Queues |e| for the loop and wakes it. An event equal to the last pending
 * one is coalesced into it (a burst of one XID is one entry); only adjacent
 * ones, so that the order of different events is kept. */
static void post(struct kdev_nvml_events *w, const struct kdev_nvml_event *e)
{
        pthread_mutex_lock(&w->mu);
        if (w->qn > 0 && event_same(&w->q[w->qn - 1], e)) {
                w->q[w->qn - 1].count++;
        } else {
                if (w->qn == w->qcap && w->qcap < KDEV_NVML_EVENTS_QUEUE_MAX) {
                        size_t cap = w->qcap ? w->qcap * 2 : 16;
                        struct kdev_nvml_event *p = realloc(w->q, cap * sizeof(*p));
                        if (p) {
                                w->q = p;
                                w->qcap = cap;
                        }
                }
                if (w->qn < w->qcap) {
                        w->q[w->qn] = *e;
                        w->q[w->qn].count = 1;
                        w->qn++;
                } else {
                        w->overflow = true;
                }
        }
        pthread_mutex_unlock(&w->mu);
        uv_async_send(&w->async);
}

/* |e| as a fresh event of |kind| for watched GPU |gpu| (-1: none). */
static void event_init(const struct kdev_nvml_events *w, struct kdev_nvml_event *e,
                       enum kdev_nvml_event_kind kind, int gpu)
{
        memset(e, 0, sizeof(*e));
        e->kind = kind;
        e->gpu = gpu;
        e->gi = e->ci = KDEV_NVML_NO_INSTANCE;
        if (gpu >= 0)
                snprintf(e->uuid, sizeof(e->uuid), "%s", w->gpus[gpu].uuid);
}

/* Looks up (once) the handle of GPU |g|. Returns the NVML code. */
static nvmlReturn_t get_handle(const struct kdev_nvml_events *w, struct wgpu *g)
{
        if (g->handle)
                return NVML_SUCCESS;
        nvmlDevice_t d = NULL;
        nvmlReturn_t r = w->api->nvmlDeviceGetHandleByUUID(g->uuid, &d);
        if (r == NVML_SUCCESS)
                g->handle = d;
        return r;
}

/* Registers GPU |g| on |set|, recording the outcome in its flags. Returns
 * the NVML code and the failing call. */
static nvmlReturn_t register_gpu(const struct kdev_nvml_events *w, struct wgpu *g,
                                 nvmlEventSet_t set, const char **call)
{
        const struct kdev_nvml_api *n = w->api;
        nvmlReturn_t r = get_handle(w, g);
        unsigned long long supported = 0;
        if (r != NVML_SUCCESS) {
                *call = "nvmlDeviceGetHandleByUUID";
        } else if ((r = n->nvmlDeviceGetSupportedEventTypes(g->handle, &supported)) !=
                   NVML_SUCCESS) {
                *call = "nvmlDeviceGetSupportedEventTypes";
        } else {
                *call = "nvmlDeviceRegisterEvents";
                unsigned long long mask = w->o.event_types & supported;
                r = mask ? n->nvmlDeviceRegisterEvents(g->handle, mask, set)
                         : NVML_ERROR_NOT_SUPPORTED;
                g->unsupported = r == NVML_ERROR_NOT_SUPPORTED;
        }
        g->registered = r == NVML_SUCCESS;
        return r;
}

static int gpu_by_handle(const struct kdev_nvml_events *w, nvmlDevice_t d)
{
        for (size_t i = 0; i < w->n_gpus; i++)
                if (d && w->gpus[i].handle == d)
                        return (int)i;
        return -1;
}

static int gpu_by_uuid(const struct kdev_nvml_events *w, const char *uuid)
{
        for (size_t i = 0; i < w->n_gpus; i++)
                if (strcmp(w->gpus[i].uuid, uuid) == 0)
                        return (int)i;
        return -1;
}

static void handle_event(struct kdev_nvml_events *w, const nvmlEventData_t *ev)
{
        struct kdev_nvml_event e;
        if (ev->eventType != (unsigned long long)nvmlEventTypeXidCriticalError) {
                event_init(w, &e, KDEV_NVML_EVENT_OTHER, gpu_by_handle(w, ev->device));
                e.data = ev->eventType;
                post(w, &e);
                return;
        }
        char uuid[NVML_DEVICE_UUID_V2_BUFFER_SIZE];
        nvmlReturn_t r = w->api->nvmlDeviceGetUUID(ev->device, uuid, sizeof(uuid));
        int gpu = r == NVML_SUCCESS ? gpu_by_uuid(w, uuid) : gpu_by_handle(w, ev->device);
        event_init(w, &e, KDEV_NVML_EVENT_XID, gpu);
        e.data = ev->eventData;
        e.gi = ev->gpuInstanceId;
        e.ci = ev->computeInstanceId;
        if (gpu < 0 && r == NVML_SUCCESS) {
                snprintf(e.uuid, sizeof(e.uuid), "%s", uuid);
        } else if (gpu < 0) {
                e.ret = r;
                snprintf(e.call, sizeof(e.call), "nvmlDeviceGetUUID");
        }
        post(w, &e);
}

/* Sleeps up to |ms| unless a stop is requested. */
static void nap(struct kdev_nvml_events *w, unsigned ms)
{
        struct timespec ts;
        kdev_deadline_after_ms(ms, &ts);
        pthread_mutex_lock(&w->mu);
        while (!w->stop) {
                if (pthread_cond_timedwait(&w->cond, &w->mu, &ts) == ETIMEDOUT)
                        break;
        }
        pthread_mutex_unlock(&w->mu);
}

/* (Re)creates the event set and registers every GPU that is not
 * unsupported; posts each one's registration result. */
static void build_evset(struct kdev_nvml_events *w)
{
        nvmlEventSet_t set = NULL;
        nvmlReturn_t r = w->api->nvmlEventSetCreate(&set);
        if (r != NVML_SUCCESS) {
                w->evset = NULL;
                w->evset_err = r;
                for (size_t i = 0; i < w->n_gpus; i++)
                        w->gpus[i].registered = false;
                return;
        }
        w->evset = set;
        w->evset_err = NVML_SUCCESS;
        for (size_t i = 0; i < w->n_gpus; i++) {
                struct wgpu *g = &w->gpus[i];
                if (g->unsupported)
                        continue;
                const char *call = "";
                struct kdev_nvml_event e;
                event_init(w, &e, KDEV_NVML_EVENT_REGISTER, (int)i);
                e.ret = register_gpu(w, g, set, &call);
                snprintf(e.call, sizeof(e.call), "%s", call);
                post(w, &e);
        }
}

/* A failed probe step: |r| from |call|. */
static void probe_failed(struct kdev_nvml_event *e, nvmlReturn_t r, const char *call)
{
        if (r == NVML_ERROR_GPU_IS_LOST)
                e->probe = KDEV_NVML_PROBE_LOST;
        else if (r == NVML_ERROR_RESET_REQUIRED)
                e->probe = KDEV_NVML_PROBE_RESET_REQUIRED;
        else
                e->probe = KDEV_NVML_PROBE_FAILED;
        e->ret = r;
        snprintf(e->call, sizeof(e->call), "%s", call);
}

/* Probes GPU |i| into |e| (see the top of events.h). */
static void probe_gpu(struct kdev_nvml_events *w, size_t i, struct kdev_nvml_event *e)
{
        const struct kdev_nvml_api *n = w->api;
        struct wgpu *g = &w->gpus[i];
        event_init(w, e, KDEV_NVML_EVENT_PROBE, (int)i);
        nvmlReturn_t r = get_handle(w, g);
        if (r != NVML_SUCCESS) {
                probe_failed(e, r, "nvmlDeviceGetHandleByUUID");
                return;
        }
        if (n->nvmlDeviceGetRemappedRows) {
                unsigned corr = 0, unc = 0, pending = 0, failure = 0;
                r = n->nvmlDeviceGetRemappedRows(g->handle, &corr, &unc, &pending, &failure);
                if (r == NVML_SUCCESS && pending)
                        e->probe = KDEV_NVML_PROBE_REMAP_PENDING;
                else if (r == NVML_SUCCESS && failure)
                        e->probe = KDEV_NVML_PROBE_REMAP_FAILED;
                else if (r != NVML_SUCCESS && r != NVML_ERROR_NOT_SUPPORTED)
                        probe_failed(e, r, "nvmlDeviceGetRemappedRows");
                if (e->probe != KDEV_NVML_PROBE_PASSED)
                        return;
        }
        nvmlMemory_t mem;
        r = n->nvmlDeviceGetMemoryInfo(g->handle, &mem);
        if (r != NVML_SUCCESS && r != NVML_ERROR_NO_PERMISSION && r != NVML_ERROR_NOT_SUPPORTED) {
                probe_failed(e, r, "nvmlDeviceGetMemoryInfo");
                return;
        }
        if (g->registered || g->unsupported)
                return;
        e->reg_tried = true;
        if (!w->evset) {
                e->reg = w->evset_err;
                probe_failed(e, w->evset_err, "nvmlEventSetCreate");
                return;
        }
        const char *call = "";
        e->reg = register_gpu(w, g, w->evset, &call);
        if (e->reg != NVML_SUCCESS && !g->unsupported)
                probe_failed(e, e->reg, call);
}

static bool stop_requested(struct kdev_nvml_events *w)
{
        pthread_mutex_lock(&w->mu);
        bool stop = w->stop;
        pthread_mutex_unlock(&w->mu);
        return stop;
}

static void run_probes(struct kdev_nvml_events *w)
{
        pthread_mutex_lock(&w->mu);
        for (size_t i = 0; i < w->n_gpus; i++)
                w->todo[i] = w->gpus[i].want_probe;
        pthread_mutex_unlock(&w->mu);
        for (size_t i = 0; i < w->n_gpus; i++) {
                if (!w->todo[i])
                        continue;
                if (stop_requested(w))
                        return;
                struct kdev_nvml_event e;
                probe_gpu(w, i, &e);
                post(w, &e);
        }
}

static void *thread_main(void *arg)
{
        struct kdev_nvml_events *w = arg;
        const struct kdev_nvml_api *n = w->api;
        uint64_t next_probe = now_ms() + (w->o.probe_at_start ? 0 : w->o.probe_interval_ms);
        uint64_t next_build = 0;
        for (;;) {
                pthread_mutex_lock(&w->mu);
                bool stop = w->stop;
                bool want = false;
                for (size_t i = 0; i < w->n_gpus && !want; i++)
                        want = w->gpus[i].want_probe;
                pthread_mutex_unlock(&w->mu);
                if (stop)
                        break;
                uint64_t now = now_ms();
                if (now >= next_probe) {
                        if (want)
                                run_probes(w);
                        next_probe = now_ms() + w->o.probe_interval_ms;
                        continue;
                }
                unsigned timeout = w->o.wait_timeout_ms;
                if (want && next_probe - now < timeout)
                        timeout = (unsigned)(next_probe - now);
                if (timeout == 0)
                        timeout = 1;
                if (!w->evset) {
                        /* nvmlEventSetCreate failed: retry every wait timeout */
                        nap(w, timeout);
                        if (now_ms() >= next_build) {
                                build_evset(w);
                                next_build = now_ms() + w->o.wait_timeout_ms;
                        }
                        continue;
                }
                nvmlEventData_t ev;
                memset(&ev, 0, sizeof(ev));
                nvmlReturn_t r = n->nvmlEventSetWait(w->evset, &ev, timeout);
                if (r == NVML_SUCCESS) {
                        handle_event(w, &ev);
                } else if (r != NVML_ERROR_TIMEOUT) {
                        struct kdev_nvml_event e;
                        event_init(w, &e, KDEV_NVML_EVENT_WAIT_ERROR, -1);
                        e.ret = r;
                        snprintf(e.call, sizeof(e.call), "nvmlEventSetWait");
                        post(w, &e);
                        n->nvmlEventSetFree(w->evset);
                        w->evset = NULL;
                        build_evset(w);
                        next_build = now_ms() + w->o.wait_timeout_ms;
                        nap(w, w->o.wait_timeout_ms);
                }
        }
        if (w->evset)
                n->nvmlEventSetFree(w->evset);
        w->evset = NULL;
        kdev_nvml_shutdown(w->lib, NULL);
        pthread_mutex_lock(&w->mu);
        w->exited = true;
        pthread_mutex_unlock(&w->mu);
        uv_async_send(&w->async);
        return NULL;
}

/* --- the loop ------------------------------------------------------------------ */

static void free_watcher(struct kdev_nvml_events *w)
{
        free(w->gpus);
        free(w->todo);
        free(w->q);
        free(w->work);
        pthread_mutex_destroy(&w->mu);
        pthread_cond_destroy(&w->cond);
        free(w);
}

static void on_async_closed(uv_handle_t *handle)
{
        struct kdev_nvml_events *w = handle->data;
        void (*done)(void *) = w->done;
        void *arg = w->done_arg;
        free_watcher(w);
        if (done)
                done(arg);
}

/* Moves the posted events to the work queue (w->work, w->workn); returns
 * the overflow flag, and whether the thread exited in |*exited|. */
static bool take_posted(struct kdev_nvml_events *w, bool *exited)
{
        pthread_mutex_lock(&w->mu);
        struct kdev_nvml_event *tq = w->q;
        size_t tn = w->qn, tcap = w->qcap;
        w->q = w->work;
        w->qn = 0;
        w->qcap = w->workcap;
        w->work = tq;
        w->workn = tn;
        w->workcap = tcap;
        bool overflow = w->overflow;
        w->overflow = false;
        *exited = w->exited;
        pthread_mutex_unlock(&w->mu);
        return overflow;
}

void kdev_nvml_events_take(struct kdev_nvml_events *w, kdev_nvml_events_fn fn, void *arg)
{
        if (!w || !fn)
                return;
        bool exited;
        bool overflow = take_posted(w, &exited);
        if (w->workn > 0 || overflow)
                fn(arg, w->work, w->workn, overflow);
        w->workn = 0;
}

static void on_async(uv_async_t *a)
{
        struct kdev_nvml_events *w = a->data;
        bool exited;
        bool overflow = take_posted(w, &exited);
        if (!w->stopping && (w->workn > 0 || overflow))
                w->o.on_events(w->o.arg, w->work, w->workn, overflow);
        w->workn = 0;
        if (w->stopping && exited && !w->joined) {
                pthread_join(w->thread, NULL);
                w->joined = true;
                uv_close((uv_handle_t *)&w->async, on_async_closed);
        }
}

struct kdev_nvml_events *kdev_nvml_events_new(uv_loop_t *loop, struct kdev_nvml *lib,
                                              const char *const *uuids, size_t n,
                                              const struct kdev_nvml_events_options *opts,
                                              struct kdev_err *err)
{
        if (!opts || !opts->on_events || opts->wait_timeout_ms == 0 ||
            opts->probe_interval_ms == 0) {
                kdev_err_set(err, EINVAL,
                             "health: event watcher needs a callback, a wait timeout > 0 and "
                             "a probe interval > 0");
                return NULL;
        }
        struct kdev_nvml_events *w = calloc(1, sizeof(*w));
        if (!w) {
                kdev_err_set(err, ENOMEM, "health: out of memory");
                return NULL;
        }
        w->lib = lib;
        w->api = kdev_nvml_api(lib);
        w->o = *opts;
        pthread_mutex_init(&w->mu, NULL);
        kdev_cond_init_monotonic(&w->cond);
        w->gpus = calloc(n ? n : 1, sizeof(*w->gpus));
        w->todo = calloc(n ? n : 1, sizeof(*w->todo));
        if (!w->gpus || !w->todo) {
                free_watcher(w);
                kdev_err_set(err, ENOMEM, "health: out of memory");
                return NULL;
        }
        w->n_gpus = n;
        for (size_t i = 0; i < n; i++)
                snprintf(w->gpus[i].uuid, sizeof(w->gpus[i].uuid), "%s", uuids[i]);
        int rc = uv_async_init(loop, &w->async, on_async);
        if (rc != 0) {
                kdev_err_set(err, -rc, "health: uv_async_init: %s", uv_strerror(rc));
                free_watcher(w);
                return NULL;
        }
        w->async.data = w;
        return w;
}

/* Undoes what a failed start set up. Returns |rc|. */
static int start_failed(struct kdev_nvml_events *w, int rc)
{
        w->api->nvmlEventSetFree(w->evset);
        w->evset = NULL;
        kdev_nvml_shutdown(w->lib, NULL);
        return rc;
}

int kdev_nvml_events_start(struct kdev_nvml_events *w, struct kdev_err *err)
{
        if (w->started)
                return kdev_err_set(err, EALREADY, "health: already started");
        int rc = kdev_nvml_init(w->lib, err);
        if (rc != 0)
                return rc;
        nvmlEventSet_t set = NULL;
        nvmlReturn_t r = w->api->nvmlEventSetCreate(&set);
        if (r != NVML_SUCCESS) {
                rc = kdev_nvml_fail(w->lib, r, err, "health: nvmlEventSetCreate");
                kdev_nvml_shutdown(w->lib, NULL);
                return rc;
        }
        w->evset = set;
        struct kdev_nvml_event *regs = calloc(w->n_gpus ? w->n_gpus : 1, sizeof(*regs));
        if (!regs)
                return start_failed(w, kdev_err_set(err, ENOMEM, "health: out of memory"));
        for (size_t i = 0; i < w->n_gpus; i++) {
                const char *call = "";
                event_init(w, &regs[i], KDEV_NVML_EVENT_REGISTER, (int)i);
                regs[i].ret = register_gpu(w, &w->gpus[i], set, &call);
                snprintf(regs[i].call, sizeof(regs[i].call), "%s", call);
                regs[i].count = 1;
        }
        rc = pthread_create(&w->thread, NULL, thread_main, w);
        if (rc != 0) {
                free(regs);
                return start_failed(w, kdev_err_set(err, rc,
                                                    "health: cannot start the health thread: "
                                                    "%s",
                                                    strerror(rc)));
        }
        w->started = w->thread_started = true;
        /* the results as the thread's copies were before it started (it owns
         * the registration flags from now on) */
        if (w->n_gpus > 0)
                w->o.on_events(w->o.arg, regs, w->n_gpus, false);
        free(regs);
        return 0;
}

void kdev_nvml_events_want_probe(struct kdev_nvml_events *w, size_t gpu, bool on)
{
        if (gpu >= w->n_gpus)
                return;
        pthread_mutex_lock(&w->mu);
        w->gpus[gpu].want_probe = on;
        pthread_mutex_unlock(&w->mu);
}

void kdev_nvml_events_stop(struct kdev_nvml_events *w, void (*done)(void *arg), void *arg)
{
        if (!w || w->stopping)
                return;
        w->stopping = true;
        w->done = done;
        w->done_arg = arg;
        if (!w->thread_started) {
                uv_close((uv_handle_t *)&w->async, on_async_closed);
                return;
        }
        pthread_mutex_lock(&w->mu);
        w->stop = true;
        pthread_cond_broadcast(&w->cond);
        pthread_mutex_unlock(&w->mu);
        /* the thread posts once more when it has exited; on_async joins it */
}
