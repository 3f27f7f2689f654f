/* NVIDIA GPU health monitor and rediscovery (health.h).
 *
 * Ownership and threads. The monitor has two sides:
 *   - the loop side (every public function, the uv_async callback) owns the
 *     per-GPU recovery state and the marks of the physical devices, and
 *     changes the resource set's health only through the model's physical
 *     events (kdev_physical_apply);
 *   - the health thread owns the NVML event set, the GPU handles and the
 *     registration flags (written by kdev_nvidia_health_start before the thread
 *     exists, then only by the thread).
 * They share, under |mu|, only the message queue, the per-GPU "probe wanted"
 * flags and the stop/exit flags; nobody holds |mu| across an NVML call.
 */
#include "nvidia/health.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/log.h"
#include "nvidia/devinfo.h"

#define QUEUE_MAX 1024   /* distinct pending messages; beyond: overflow */

/* --- messages from the health thread -------------------------------------- */

enum msg_kind {
        M_XID,        /* critical XID (gpu -1: GPU not identifiable) */
        M_IGNORED,    /* XID the policy ignores */
        M_OTHER,      /* non-XID event type */
        M_UNKNOWN,    /* event for a GPU outside the set */
        M_WAIT_ERROR, /* nvmlEventSetWait error */
        M_REGISTER,   /* (re-)registration result after an event set rebuild */
        M_PROBE,      /* probe result */
};

enum probe_outcome {
        P_OK,
        P_LOST,
        P_RESET,
        P_REMAP_PENDING,
        P_REMAP_FAILED,
        P_ERROR,
};

struct msg {
        enum msg_kind kind;
        int gpu;                    /* index in h->gpus, -1 when unknown */
        unsigned long long xid;     /* XID (event data); the event type for M_OTHER */
        unsigned gi, ci;
        nvmlReturn_t ret;           /* NVML code of a failure (SUCCESS otherwise) */
        enum probe_outcome probe;
        nvmlReturn_t reg;           /* M_PROBE: registration retried: its code; else SUCCESS
                                     * with reg_tried false */
        bool reg_tried;
        char call[48];              /* the failing NVML call */
        char uuid[KDEV_GPU_UUID_MAX]; /* M_UNKNOWN */
        unsigned count;             /* coalesced occurrences */
};

/* --- state ---------------------------------------------------------------- */

/* One monitored physical device of the set: a whole GPU or a MIG device. */
struct hphys {
        struct kdev_physical *p;
        size_t gpu;                 /* index in h->gpus */
        unsigned gi, ci;            /* KDEV_NVIDIA_NO_INSTANCE for a whole GPU */
        unsigned n_logical;         /* monitored logical devices on it */
        bool marked;                /* Unhealthy because of the monitor (or adopted) */
};

/* A physical event of the current batch, for the subscriber. */
struct pevent {
        const char *id;             /* kdev_physical.id */
        bool healthy;
        unsigned long long xid;
        char reason[160];
};

struct hgpu {
        char uuid[KDEV_GPU_UUID_MAX];
        /* loop side */
        unsigned marked;
        uint64_t quiet_since;       /* ms, monotonic */
        unsigned long long last_xid;
        char reason[160];
        enum kdev_nvidia_health_checks checks;
        enum probe_outcome last_probe;
        bool probe_seen;
        /* shared, under mu */
        bool want_probe;
        /* health thread (and start) */
        nvmlDevice_t handle;
        bool registered;
        bool unsupported;
};

struct kdev_nvidia_health {
        uv_loop_t *loop;
        struct kdev_nvml *lib;
        const struct kdev_nvml_api *api;
        struct kdev_resource_set *set;
        struct kdev_xid_policy policy;
        uint64_t probe_interval, quiet_period;
        unsigned wait_timeout;
        kdev_nvidia_health_notify_fn notify;
        void *notify_arg;
        kdev_physical_events_fn physical;
        void *physical_arg;
        void (*event)(void *arg, const char *kind, unsigned long long xid, unsigned count);
        void *event_arg;

        struct hgpu *gpus;
        size_t n_gpus;
        struct hphys *phys;
        size_t n_phys;
        bool *changed;              /* per resource, loop side */
        struct pevent *pend;        /* physical events of the batch, loop side */
        size_t n_pend, pend_cap;
        struct kdev_nvidia_health_stats stats;

        uv_async_t async;
        /* repeated identical event lines (common/log.h), flushed by log_timer */
        struct kdev_log_limiter *lim;
        uv_timer_t log_timer;
        bool log_timer_init;
        unsigned open_handles;      /* async and log_timer until both closed */
        bool started, nvml_ref, thread_started, joined, stopping;
        void (*done)(void *arg);
        void *done_arg;
        pthread_t thread;

        /* health thread */
        nvmlEventSet_t evset;
        nvmlReturn_t evset_err;     /* last nvmlEventSetCreate error while evset is NULL */
        bool *todo;                 /* probe list copy */

        /* shared */
        pthread_mutex_t mu;
        pthread_cond_t cond;        /* stop wake-up for the thread's sleeps */
        bool stop, exited, overflow;
        struct msg *q, *work;
        size_t qn, qcap, workn, workcap;
};

static uint64_t now_ms(void)
{
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

static const char *nvstr(const struct kdev_nvidia_health *h, nvmlReturn_t r)
{
        return kdev_nvml_strerror(h->lib, r);
}

/* --- health thread --------------------------------------------------------- */

static bool msg_same(const struct msg *a, const struct msg *b)
{
        return a->kind == b->kind && a->gpu == b->gpu && a->xid == b->xid && a->gi == b->gi &&
               a->ci == b->ci && a->ret == b->ret && a->probe == b->probe && a->reg == b->reg &&
               a->reg_tried == b->reg_tried && strcmp(a->call, b->call) == 0 &&
               strcmp(a->uuid, b->uuid) == 0;
}

/* Queues |m| for the loop and wakes it. A message equal to the last pending
 * one is coalesced into it (a burst of one XID is one entry); only adjacent
 * ones, so that the order of different messages is kept. */
static void post(struct kdev_nvidia_health *h, const struct msg *m)
{
        pthread_mutex_lock(&h->mu);
        if (h->qn > 0 && msg_same(&h->q[h->qn - 1], m)) {
                h->q[h->qn - 1].count++;
        } else {
                if (h->qn == h->qcap && h->qcap < QUEUE_MAX) {
                        size_t cap = h->qcap ? h->qcap * 2 : 16;
                        struct msg *p = realloc(h->q, cap * sizeof(*p));
                        if (p) {
                                h->q = p;
                                h->qcap = cap;
                        }
                }
                if (h->qn < h->qcap) {
                        h->q[h->qn] = *m;
                        h->q[h->qn].count = 1;
                        h->qn++;
                } else {
                        h->overflow = true;
                }
        }
        pthread_mutex_unlock(&h->mu);
        uv_async_send(&h->async);
}

static void msg_init(struct msg *m, enum msg_kind kind, int gpu)
{
        memset(m, 0, sizeof(*m));
        m->kind = kind;
        m->gpu = gpu;
        m->gi = m->ci = KDEV_NVIDIA_NO_INSTANCE;
}

/* Registers GPU |g| on |set|. Returns the NVML code and the failing call. */
static nvmlReturn_t register_gpu(struct kdev_nvidia_health *h, struct hgpu *g,
                                 nvmlEventSet_t set, const char **call)
{
        const struct kdev_nvml_api *n = h->api;
        nvmlReturn_t r;
        if (!g->handle) {
                nvmlDevice_t d = NULL;
                r = n->nvmlDeviceGetHandleByUUID(g->uuid, &d);
                if (r != NVML_SUCCESS) {
                        *call = "nvmlDeviceGetHandleByUUID";
                        return r;
                }
                g->handle = d;
        }
        unsigned long long supported = 0;
        r = n->nvmlDeviceGetSupportedEventTypes(g->handle, &supported);
        if (r != NVML_SUCCESS) {
                *call = "nvmlDeviceGetSupportedEventTypes";
                return r;
        }
        *call = "nvmlDeviceRegisterEvents";
        unsigned long long mask = (unsigned long long)KDEV_NVIDIA_HEALTH_EVENTS & supported;
        if (mask == 0)
                return NVML_ERROR_NOT_SUPPORTED;
        return n->nvmlDeviceRegisterEvents(g->handle, mask, set);
}

static int gpu_by_handle(const struct kdev_nvidia_health *h, nvmlDevice_t d)
{
        for (size_t i = 0; i < h->n_gpus; i++)
                if (d && h->gpus[i].handle == d)
                        return (int)i;
        return -1;
}

static int gpu_by_uuid(const struct kdev_nvidia_health *h, const char *uuid)
{
        for (size_t i = 0; i < h->n_gpus; i++)
                if (strcmp(h->gpus[i].uuid, uuid) == 0)
                        return (int)i;
        return -1;
}

static void handle_event(struct kdev_nvidia_health *h, const nvmlEventData_t *ev)
{
        struct msg m;
        if (ev->eventType != (unsigned long long)nvmlEventTypeXidCriticalError) {
                msg_init(&m, M_OTHER, gpu_by_handle(h, ev->device));
                m.xid = ev->eventType;
                post(h, &m);
                return;
        }
        if (!kdev_xid_is_critical(&h->policy, ev->eventData)) {
                msg_init(&m, M_IGNORED, gpu_by_handle(h, ev->device));
                m.xid = ev->eventData;
                post(h, &m);
                return;
        }
        msg_init(&m, M_XID, -1);
        m.xid = ev->eventData;
        m.gi = ev->gpuInstanceId;
        m.ci = ev->computeInstanceId;
        char uuid[KDEV_GPU_UUID_MAX];
        nvmlReturn_t r = h->api->nvmlDeviceGetUUID(ev->device, uuid, sizeof(uuid));
        if (r == NVML_SUCCESS) {
                m.gpu = gpu_by_uuid(h, uuid);
                if (m.gpu < 0) {
                        msg_init(&m, M_UNKNOWN, -1);
                        m.xid = ev->eventData;
                        snprintf(m.uuid, sizeof(m.uuid), "%s", uuid);
                }
        } else {
                m.gpu = gpu_by_handle(h, ev->device);
                if (m.gpu < 0) {
                        m.ret = r;
                        snprintf(m.call, sizeof(m.call), "nvmlDeviceGetUUID");
                }
        }
        post(h, &m);
}

/* Sleeps up to |ms| unless a stop is requested. */
static void nap(struct kdev_nvidia_health *h, unsigned ms)
{
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        ts.tv_sec += ms / 1000;
        ts.tv_nsec += (long)(ms % 1000) * 1000000L;
        if (ts.tv_nsec >= 1000000000L) {
                ts.tv_sec++;
                ts.tv_nsec -= 1000000000L;
        }
        pthread_mutex_lock(&h->mu);
        while (!h->stop) {
                if (pthread_cond_timedwait(&h->cond, &h->mu, &ts) == ETIMEDOUT)
                        break;
        }
        pthread_mutex_unlock(&h->mu);
}

/* (Re)creates the event set and registers every GPU that supports events;
 * posts each GPU's registration result. */
static void build_evset(struct kdev_nvidia_health *h)
{
        nvmlEventSet_t set = NULL;
        nvmlReturn_t r = h->api->nvmlEventSetCreate(&set);
        if (r != NVML_SUCCESS) {
                h->evset = NULL;
                h->evset_err = r;
                for (size_t i = 0; i < h->n_gpus; i++)
                        h->gpus[i].registered = false;
                return;
        }
        h->evset = set;
        h->evset_err = NVML_SUCCESS;
        for (size_t i = 0; i < h->n_gpus; i++) {
                struct hgpu *g = &h->gpus[i];
                if (g->unsupported)
                        continue;
                const char *call = "";
                r = register_gpu(h, g, set, &call);
                g->registered = r == NVML_SUCCESS;
                g->unsupported = r == NVML_ERROR_NOT_SUPPORTED &&
                                 strcmp(call, "nvmlDeviceRegisterEvents") == 0;
                struct msg m;
                msg_init(&m, M_REGISTER, (int)i);
                m.ret = r;
                snprintf(m.call, sizeof(m.call), "%s", call);
                post(h, &m);
        }
}

static void classify(nvmlReturn_t r, struct msg *m, const char *call)
{
        if (r == NVML_ERROR_GPU_IS_LOST)
                m->probe = P_LOST;
        else if (r == NVML_ERROR_RESET_REQUIRED)
                m->probe = P_RESET;
        else
                m->probe = P_ERROR;
        m->ret = r;
        snprintf(m->call, sizeof(m->call), "%s", call);
}

static void probe_gpu(struct kdev_nvidia_health *h, size_t i)
{
        const struct kdev_nvml_api *n = h->api;
        struct hgpu *g = &h->gpus[i];
        struct msg m;
        msg_init(&m, M_PROBE, (int)i);
        m.probe = P_OK;
        nvmlReturn_t r;
        if (!g->handle) {
                nvmlDevice_t d = NULL;
                r = n->nvmlDeviceGetHandleByUUID(g->uuid, &d);
                if (r != NVML_SUCCESS) {
                        classify(r, &m, "nvmlDeviceGetHandleByUUID");
                        post(h, &m);
                        return;
                }
                g->handle = d;
        }
        if (n->nvmlDeviceGetRemappedRows) {
                unsigned corr = 0, unc = 0, pending = 0, failure = 0;
                r = n->nvmlDeviceGetRemappedRows(g->handle, &corr, &unc, &pending, &failure);
                if (r == NVML_SUCCESS && pending) {
                        m.probe = P_REMAP_PENDING;
                } else if (r == NVML_SUCCESS && failure) {
                        m.probe = P_REMAP_FAILED;
                } else if (r != NVML_SUCCESS && r != NVML_ERROR_NOT_SUPPORTED) {
                        classify(r, &m, "nvmlDeviceGetRemappedRows");
                }
                if (m.probe != P_OK) {
                        post(h, &m);
                        return;
                }
        }
        nvmlMemory_t mem;
        r = n->nvmlDeviceGetMemoryInfo(g->handle, &mem);
        if (r != NVML_SUCCESS && r != NVML_ERROR_NO_PERMISSION && r != NVML_ERROR_NOT_SUPPORTED) {
                classify(r, &m, "nvmlDeviceGetMemoryInfo");
                post(h, &m);
                return;
        }
        if (!g->registered && !g->unsupported) {
                m.reg_tried = true;
                if (!h->evset) {
                        m.reg = h->evset_err;
                        classify(h->evset_err, &m, "nvmlEventSetCreate");
                        post(h, &m);
                        return;
                }
                const char *call = "";
                r = register_gpu(h, g, h->evset, &call);
                m.reg = r;
                if (r == NVML_SUCCESS) {
                        g->registered = true;
                } else if (r == NVML_ERROR_NOT_SUPPORTED &&
                           strcmp(call, "nvmlDeviceRegisterEvents") == 0) {
                        g->unsupported = true;
                } else {
                        classify(r, &m, call);
                }
        }
        post(h, &m);
}

static void run_probes(struct kdev_nvidia_health *h)
{
        pthread_mutex_lock(&h->mu);
        for (size_t i = 0; i < h->n_gpus; i++)
                h->todo[i] = h->gpus[i].want_probe;
        pthread_mutex_unlock(&h->mu);
        for (size_t i = 0; i < h->n_gpus; i++) {
                if (!h->todo[i])
                        continue;
                pthread_mutex_lock(&h->mu);
                bool stop = h->stop;
                pthread_mutex_unlock(&h->mu);
                if (stop)
                        return;
                probe_gpu(h, i);
        }
}

static void *thread_main(void *arg)
{
        struct kdev_nvidia_health *h = arg;
        const struct kdev_nvml_api *n = h->api;
        uint64_t next_probe = now_ms() + h->probe_interval;
        uint64_t next_build = 0;
        for (;;) {
                pthread_mutex_lock(&h->mu);
                bool stop = h->stop;
                bool want = false;
                for (size_t i = 0; i < h->n_gpus && !want; i++)
                        want = h->gpus[i].want_probe;
                pthread_mutex_unlock(&h->mu);
                if (stop)
                        break;
                uint64_t now = now_ms();
                if (now >= next_probe) {
                        if (want)
                                run_probes(h);
                        next_probe = now_ms() + h->probe_interval;
                        continue;
                }
                unsigned timeout = h->wait_timeout;
                if (want && next_probe - now < timeout)
                        timeout = (unsigned)(next_probe - now);
                if (timeout == 0)
                        timeout = 1;
                if (!h->evset) {
                        /* nvmlEventSetCreate failed: retry every wait timeout */
                        nap(h, timeout);
                        if (now_ms() >= next_build) {
                                build_evset(h);
                                next_build = now_ms() + h->wait_timeout;
                        }
                        continue;
                }
                nvmlEventData_t ev;
                memset(&ev, 0, sizeof(ev));
                nvmlReturn_t r = n->nvmlEventSetWait(h->evset, &ev, timeout);
                if (r == NVML_SUCCESS) {
                        handle_event(h, &ev);
                } else if (r != NVML_ERROR_TIMEOUT) {
                        struct msg m;
                        msg_init(&m, M_WAIT_ERROR, -1);
                        m.ret = r;
                        snprintf(m.call, sizeof(m.call), "nvmlEventSetWait");
                        post(h, &m);
                        n->nvmlEventSetFree(h->evset);
                        h->evset = NULL;
                        build_evset(h);
                        next_build = now_ms() + h->wait_timeout;
                        nap(h, h->wait_timeout);
                }
        }
        if (h->evset)
                n->nvmlEventSetFree(h->evset);
        h->evset = NULL;
        kdev_nvml_shutdown(h->lib, NULL);
        pthread_mutex_lock(&h->mu);
        h->exited = true;
        pthread_mutex_unlock(&h->mu);
        uv_async_send(&h->async);
        return NULL;
}

/* --- loop side -------------------------------------------------------------- */

static void want_probe(struct kdev_nvidia_health *h, struct hgpu *g, bool on)
{
        pthread_mutex_lock(&h->mu);
        g->want_probe = on;
        pthread_mutex_unlock(&h->mu);
}

static bool dev_matches(const struct hphys *d, unsigned gi, unsigned ci)
{
        if (d->gi == KDEV_NVIDIA_NO_INSTANCE)
                return true;    /* a whole GPU (or replica): every event on it counts */
        if (gi != KDEV_NVIDIA_NO_INSTANCE && gi != d->gi)
                return false;
        if (ci != KDEV_NVIDIA_NO_INSTANCE && ci != d->ci)
                return false;
        return true;
}

static void fmt_xid(char *buf, size_t size, unsigned long long xid)
{
        if (xid)
                snprintf(buf, size, "%llu", xid);
        else
                snprintf(buf, size, "none");
}

/* Emits the physical event (p, healthy, xid, reason): the model applies it
 * to the set (h->changed says which resources changed) and, when it changes
 * the physical device's health, it is kept for the batch's subscriber call.
 * Returns the number of logical devices whose flag changed. */
static size_t emit(struct kdev_nvidia_health *h, struct kdev_physical *p, bool healthy,
                   unsigned long long xid, const char *reason)
{
        struct kdev_physical_event ev = {
                .id = p->id, .healthy = healthy, .xid = xid, .reason = reason};
        bool transition = p->healthy != healthy;
        size_t n = kdev_physical_apply(h->set, &ev, h->changed);
        if (!h->physical || !transition)
                return n;
        if (h->n_pend == h->pend_cap) {
                size_t cap = h->pend_cap ? h->pend_cap * 2 : 8;
                struct pevent *v = realloc(h->pend, cap * sizeof(*v));
                if (!v) {
                        kdev_log_error("health: physical event dropped: out of memory",
                                       "uuid", p->id);
                        return n;
                }
                h->pend = v;
                h->pend_cap = cap;
        }
        struct pevent *e = &h->pend[h->n_pend++];
        e->id = p->id;
        e->healthy = healthy;
        e->xid = xid;
        snprintf(e->reason, sizeof(e->reason), "%s", reason);
        return n;
}

/* Marks the physical devices of GPU |gidx| matching (gi, ci) Unhealthy (one
 * fault event each, for those not yet Unhealthy), restarts its quiet period
 * and records |reason|, for |count| identical events. The transition is
 * logged; the events that change nothing ("still unhealthy") go through the
 * limiter, so a storm of one XID on one GPU writes a line per window.
 * Returns the number of logical devices that matched. */
static unsigned mark_gpu(struct kdev_nvidia_health *h, size_t gidx, unsigned gi, unsigned ci,
                         unsigned long long xid, const char *reason, unsigned count)
{
        struct hgpu *g = &h->gpus[gidx];
        unsigned matched = 0, fresh = 0;
        bool was_healthy = g->marked == 0;
        for (size_t i = 0; i < h->n_phys; i++) {
                struct hphys *d = &h->phys[i];
                if (d->gpu != gidx || !dev_matches(d, gi, ci))
                        continue;
                matched += d->n_logical;
                if (!d->marked) {
                        d->marked = true;
                        g->marked += d->n_logical;
                }
                fresh += (unsigned)emit(h, d->p, false, xid, reason);
        }
        if (matched == 0)
                return 0;
        g->quiet_since = now_ms();
        if (xid)
                g->last_xid = xid;
        snprintf(g->reason, sizeof(g->reason), "%s", reason);
        g->probe_seen = false;
        want_probe(h, g, true);
        char xs[24], ns[24];
        fmt_xid(xs, sizeof(xs), xid);
        snprintf(ns, sizeof(ns), "%u", fresh);
        if (count == 0)
                count = 1;
        if (was_healthy || fresh > 0) {
                if (was_healthy)
                        h->stats.unhealthy++;
                kdev_log_warn(was_healthy ? "GPU unhealthy"
                                          : "more devices of an unhealthy GPU marked unhealthy",
                              "uuid", g->uuid, "xid", xs, "reason", reason, "devices", ns);
                count--; /* the others of a coalesced burst change nothing */
        }
        if (count > 0)
                kdev_log_limited(h->lim, count, KDEV_LOG_INFO,
                                 "GPU still unhealthy; quiet period restarted", "uuid", g->uuid,
                                 "xid", xs, "reason", reason, NULL);
        return matched;
}

/* Returns every physical device the monitor marked on GPU |gidx| to Healthy
 * (one recovery event each). */
static void recover_gpu(struct kdev_nvidia_health *h, size_t gidx)
{
        struct hgpu *g = &h->gpus[gidx];
        char xs[24], quiet[64];
        snprintf(quiet, sizeof(quiet), "no critical event for %llu ms and probe passed",
                 (unsigned long long)h->quiet_period);
        for (size_t i = 0; i < h->n_phys; i++) {
                struct hphys *d = &h->phys[i];
                if (d->gpu != gidx || !d->marked)
                        continue;
                d->marked = false;
                emit(h, d->p, true, g->last_xid, quiet);
        }
        g->marked = 0;
        want_probe(h, g, false);
        h->stats.recoveries++;
        fmt_xid(xs, sizeof(xs), g->last_xid);
        kdev_log_info("GPU healthy again", "uuid", g->uuid, "xid", xs, "reason", quiet,
                      "was", g->reason);
}

static const char *outcome_text(enum probe_outcome p)
{
        switch (p) {
        case P_OK: return "probe passed";
        case P_LOST: return "GPU is lost";
        case P_RESET: return "GPU requires a reset";
        case P_REMAP_PENDING: return "row remapping pending (reset required)";
        case P_REMAP_FAILED: return "row remapping failed";
        case P_ERROR: return "probe failed";
        }
        return "probe failed";
}

/* Tells the event observer (options.event) about |count| events. */
static void report(const struct kdev_nvidia_health *h, const char *kind, unsigned long long xid,
                   unsigned count)
{
        if (h->event)
                h->event(h->event_arg, kind, xid, count ? count : 1);
}

static void apply_register(struct kdev_nvidia_health *h, size_t gidx, nvmlReturn_t r,
                           const char *call)
{
        struct hgpu *g = &h->gpus[gidx];
        if (r == NVML_SUCCESS) {
                g->checks = KDEV_NVIDIA_HEALTH_REGISTERED;
                return;
        }
        if (r == NVML_ERROR_NOT_SUPPORTED && strcmp(call, "nvmlDeviceRegisterEvents") == 0) {
                if (g->checks != KDEV_NVIDIA_HEALTH_UNSUPPORTED)
                        kdev_log_warn("GPU does not support health events; no health checks "
                                      "for it",
                                      "uuid", g->uuid, "call", call, "error", nvstr(h, r));
                g->checks = KDEV_NVIDIA_HEALTH_UNSUPPORTED;
                return;
        }
        g->checks = KDEV_NVIDIA_HEALTH_UNREGISTERED;
        report(h, "register_failed", 0, 1);
        char reason[160];
        snprintf(reason, sizeof(reason), "cannot register health events: %s: %s", call,
                 nvstr(h, r));
        mark_gpu(h, gidx, KDEV_NVIDIA_NO_INSTANCE, KDEV_NVIDIA_NO_INSTANCE, 0, reason, 1);
}

static void apply_probe(struct kdev_nvidia_health *h, const struct msg *m)
{
        struct hgpu *g = &h->gpus[m->gpu];
        h->stats.probes += m->count;
        if (m->reg_tried) {
                if (m->reg == NVML_SUCCESS)
                        g->checks = KDEV_NVIDIA_HEALTH_REGISTERED;
                else if (m->reg == NVML_ERROR_NOT_SUPPORTED && m->probe == P_OK)
                        apply_register(h, (size_t)m->gpu, m->reg, "nvmlDeviceRegisterEvents");
        }
        if (g->marked == 0)
                return;         /* recovered meanwhile */
        uint64_t now = now_ms();
        if (m->probe == P_OK) {
                if (now - g->quiet_since >= h->quiet_period) {
                        recover_gpu(h, (size_t)m->gpu);
                } else if (!g->probe_seen || g->last_probe != P_OK) {
                        kdev_log_info("GPU probe passed; waiting for the quiet period", "uuid",
                                      g->uuid, "reason", g->reason);
                }
                g->last_probe = P_OK;
                g->probe_seen = true;
                return;
        }
        char reason[160];
        if (m->probe == P_ERROR)
                snprintf(reason, sizeof(reason), "probe failed: %s: %s", m->call,
                         nvstr(h, m->ret));
        else
                snprintf(reason, sizeof(reason), "%s", outcome_text(m->probe));
        g->quiet_since = now;
        bool news = !g->probe_seen || g->last_probe != m->probe || strcmp(g->reason, reason);
        snprintf(g->reason, sizeof(g->reason), "%s", reason);
        g->last_probe = m->probe;
        g->probe_seen = true;
        if (news) {
                char xs[24];
                fmt_xid(xs, sizeof(xs), g->last_xid);
                kdev_log_warn("GPU stays unhealthy", "uuid", g->uuid, "xid", xs, "reason",
                              reason);
        }
}

static void mark_all(struct kdev_nvidia_health *h, const char *reason, unsigned count)
{
        for (size_t i = 0; i < h->n_gpus; i++)
                mark_gpu(h, i, KDEV_NVIDIA_NO_INSTANCE, KDEV_NVIDIA_NO_INSTANCE, 0, reason,
                         count);
}

static void apply(struct kdev_nvidia_health *h, const struct msg *m)
{
        char reason[160], xs[24];
        switch (m->kind) {
        case M_XID:
                h->stats.xid_critical += m->count;
                report(h, "xid", m->xid, m->count);
                if (m->gpu < 0) {
                        snprintf(reason, sizeof(reason),
                                 "critical XID %llu on a GPU that cannot be identified: "
                                 "%s: %s",
                                 m->xid, m->call, nvstr(h, m->ret));
                        mark_all(h, reason, m->count);
                        break;
                }
                snprintf(reason, sizeof(reason), "critical XID %llu", m->xid);
                if (m->gi != KDEV_NVIDIA_NO_INSTANCE || m->ci != KDEV_NVIDIA_NO_INSTANCE) {
                        size_t l = strlen(reason);
                        snprintf(reason + l, sizeof(reason) - l, " (GPU instance %d, compute "
                                 "instance %d)",
                                 m->gi == KDEV_NVIDIA_NO_INSTANCE ? -1 : (int)m->gi,
                                 m->ci == KDEV_NVIDIA_NO_INSTANCE ? -1 : (int)m->ci);
                }
                if (mark_gpu(h, (size_t)m->gpu, m->gi, m->ci, m->xid, reason, m->count) == 0) {
                        fmt_xid(xs, sizeof(xs), m->xid);
                        kdev_log_limited(h->lim, m->count, KDEV_LOG_INFO,
                                         "critical XID matches no advertised device", "uuid",
                                         h->gpus[m->gpu].uuid, "xid", xs, "reason", reason,
                                         NULL);
                }
                break;
        case M_IGNORED:
                h->stats.xid_ignored += m->count;
                report(h, "xid_ignored", m->xid, m->count);
                fmt_xid(xs, sizeof(xs), m->xid);
                kdev_log_limited(h->lim, m->count, KDEV_LOG_INFO,
                                 "ignoring XID (not critical by policy)", "uuid",
                                 m->gpu >= 0 ? h->gpus[m->gpu].uuid : "unknown", "xid", xs,
                                 NULL);
                break;
        case M_OTHER:
                h->stats.other_events += m->count;
                report(h, m->xid == (unsigned long long)nvmlEventTypeSingleBitEccError
                                  ? "ecc_single_bit"
                          : m->xid == (unsigned long long)nvmlEventTypeDoubleBitEccError
                                  ? "ecc_double_bit"
                                  : "other",
                       0, m->count);
                snprintf(xs, sizeof(xs), "0x%llx", m->xid);
                kdev_log_limited(h->lim, m->count, KDEV_LOG_DEBUG,
                                 "skipping non-XID health event", "uuid",
                                 m->gpu >= 0 ? h->gpus[m->gpu].uuid : "unknown", "type", xs,
                                 NULL);
                break;
        case M_UNKNOWN:
                h->stats.unknown_gpu += m->count;
                report(h, "xid_unknown_gpu", m->xid, m->count);
                fmt_xid(xs, sizeof(xs), m->xid);
                kdev_log_limited(h->lim, m->count, KDEV_LOG_INFO,
                                 "ignoring XID for a GPU that is not advertised", "uuid",
                                 m->uuid, "xid", xs, NULL);
                break;
        case M_WAIT_ERROR:
                h->stats.wait_errors += m->count;
                report(h, m->ret == NVML_ERROR_GPU_IS_LOST ? "gpu_lost" : "wait_error", 0,
                       m->count);
                snprintf(reason, sizeof(reason), "waiting for health events failed: %s",
                         nvstr(h, m->ret));
                mark_all(h, reason, m->count);
                break;
        case M_REGISTER:
                apply_register(h, (size_t)m->gpu, m->ret, m->call);
                break;
        case M_PROBE:
                apply_probe(h, m);
                break;
        }
}

static void flush_notify(struct kdev_nvidia_health *h)
{
        if (h->n_pend > 0 && !h->stopping && h->physical) {
                struct kdev_physical_event *ev = malloc(h->n_pend * sizeof(*ev));
                if (ev) {
                        for (size_t i = 0; i < h->n_pend; i++)
                                ev[i] = (struct kdev_physical_event){
                                        .id = h->pend[i].id,
                                        .healthy = h->pend[i].healthy,
                                        .xid = h->pend[i].xid,
                                        .reason = h->pend[i].reason,
                                };
                        h->physical(h->physical_arg, ev, h->n_pend);
                        free(ev);
                } else {
                        kdev_log_error("health: physical events dropped: out of memory");
                }
        }
        h->n_pend = 0;
        for (size_t i = 0; i < h->set->n_resources; i++) {
                if (!h->changed[i])
                        continue;
                h->changed[i] = false;
                if (h->stopping)
                        continue;
                h->stats.notifies++;
                if (h->notify)
                        h->notify(h->notify_arg, h->set->resources[i].name);
        }
}

static void free_monitor(struct kdev_nvidia_health *h)
{
        kdev_log_limiter_free(h->lim); /* prints the counts still pending */
        kdev_xid_policy_clear(&h->policy);
        free(h->gpus);
        free(h->phys);
        free(h->changed);
        free(h->pend);
        free(h->todo);
        free(h->q);
        free(h->work);
        pthread_mutex_destroy(&h->mu);
        pthread_cond_destroy(&h->cond);
        free(h);
}

static void on_async_closed(uv_handle_t *handle)
{
        struct kdev_nvidia_health *h = handle->data;
        if (--h->open_handles > 0)
                return;
        void (*done)(void *) = h->done;
        void *arg = h->done_arg;
        free_monitor(h);
        if (done)
                done(arg);
}

static void close_handles(struct kdev_nvidia_health *h)
{
        uv_close((uv_handle_t *)&h->async, on_async_closed);
        if (h->log_timer_init)
                uv_close((uv_handle_t *)&h->log_timer, on_async_closed);
}

static void on_log_timer(uv_timer_t *t);

/* Ends the limiter's windows that are over and re-arms the timer for the
 * next one. At most 1 s apart, so that a window ends on time also when the
 * log clock is not the loop's (tests move it). */
static void arm_log_timer(struct kdev_nvidia_health *h)
{
        uint64_t ms = kdev_log_limiter_flush(h->lim, false);
        if (h->stopping || !h->log_timer_init)
                return;
        if (ms == 0) {
                uv_timer_stop(&h->log_timer);
                return;
        }
        uv_timer_start(&h->log_timer, on_log_timer, ms < 1000 ? ms : 1000, 0);
}

static void on_log_timer(uv_timer_t *t)
{
        arm_log_timer(t->data);
}

static void on_async(uv_async_t *a)
{
        struct kdev_nvidia_health *h = a->data;
        pthread_mutex_lock(&h->mu);
        struct msg *tq = h->q;
        size_t tn = h->qn, tcap = h->qcap;
        h->q = h->work;
        h->qn = 0;
        h->qcap = h->workcap;
        h->work = tq;
        h->workn = tn;
        h->workcap = tcap;
        bool overflow = h->overflow;
        h->overflow = false;
        bool exited = h->exited;
        pthread_mutex_unlock(&h->mu);

        if (!h->stopping) {
                for (size_t i = 0; i < h->workn && !h->stopping; i++)
                        apply(h, &h->work[i]);
                if (overflow && !h->stopping)
                        mark_all(h, "health event queue overflow", 1);
                flush_notify(h);
                arm_log_timer(h);
        }
        h->workn = 0;
        if (h->stopping && exited && !h->joined) {
                pthread_join(h->thread, NULL);
                h->joined = true;
                close_handles(h);
        }
}

struct kdev_nvidia_health *kdev_nvidia_health_new(uv_loop_t *loop, struct kdev_nvml *lib,
                                                  struct kdev_resource_set *set,
                                                  const struct kdev_xid_policy *policy,
                                                  const struct kdev_nvidia_health_options *opts,
                                                  struct kdev_err *err)
{
        if (!opts || opts->probe_interval_ms == 0) {
                kdev_err_set(err, EINVAL, "health: probe interval must be > 0");
                return NULL;
        }
        struct kdev_nvidia_health *h = calloc(1, sizeof(*h));
        if (!h) {
                kdev_err_set(err, ENOMEM, "health: out of memory");
                return NULL;
        }
        h->loop = loop;
        h->lib = lib;
        h->api = kdev_nvml_api(lib);
        h->set = set;
        h->probe_interval = opts->probe_interval_ms;
        h->quiet_period = opts->quiet_period_ms;
        h->wait_timeout = opts->wait_timeout_ms ? opts->wait_timeout_ms
                                                : KDEV_NVIDIA_HEALTH_WAIT_MS;
        h->notify = opts->notify;
        h->notify_arg = opts->notify_arg;
        h->physical = opts->physical;
        h->physical_arg = opts->physical_arg;
        h->event = opts->event;
        h->event_arg = opts->event_arg;
        pthread_mutex_init(&h->mu, NULL);
        pthread_condattr_t ca;
        pthread_condattr_init(&ca);
        pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
        pthread_cond_init(&h->cond, &ca);
        pthread_condattr_destroy(&ca);
        if (kdev_xid_policy_copy(&h->policy, policy, err) != 0) {
                free_monitor(h);
                return NULL;
        }

        size_t n_devs = 0;
        for (size_t r = 0; r < set->n_resources; r++)
                for (size_t i = 0; i < set->resources[r].n_devices; i++)
                        if (set->resources[r].devices[i].data)
                                n_devs++;
        h->phys = calloc(n_devs ? n_devs : 1, sizeof(*h->phys));
        h->gpus = calloc(n_devs ? n_devs : 1, sizeof(*h->gpus));
        h->changed = calloc(set->n_resources ? set->n_resources : 1, sizeof(*h->changed));
        if (!h->phys || !h->gpus || !h->changed) {
                free_monitor(h);
                kdev_err_set(err, ENOMEM, "health: out of memory");
                return NULL;
        }
        uint64_t now = now_ms();
        for (size_t r = 0; r < set->n_resources; r++) {
                struct kdev_resource *res = &set->resources[r];
                for (size_t i = 0; i < res->n_devices; i++) {
                        struct kdev_device *dev = &res->devices[i];
                        const struct kdev_nvidia_devinfo *info = dev->data;
                        if (!info || info->incomplete)
                                continue; /* an incomplete device never recovers in place */
                        if (!info->parent_uuid[0]) {
                                kdev_err_set(err, EINVAL,
                                             "health: device %s of %s has an empty parent UUID",
                                             dev->id, res->name);
                                free_monitor(h);
                                return NULL;
                        }
                        struct kdev_physical *p = dev->physical;
                        if (!p || !p->logical) {
                                kdev_err_set(err, EINVAL,
                                             "health: device %s of %s has no linked physical "
                                             "device",
                                             dev->id, res->name);
                                free_monitor(h);
                                return NULL;
                        }
                        int g = gpu_by_uuid(h, info->parent_uuid);
                        if (g < 0) {
                                g = (int)h->n_gpus++;
                                snprintf(h->gpus[g].uuid, sizeof(h->gpus[g].uuid), "%s",
                                         info->parent_uuid);
                        }
                        /* the replicas of one physical device are adjacent */
                        struct hphys *d = h->n_phys && h->phys[h->n_phys - 1].p == p
                                                  ? &h->phys[h->n_phys - 1]
                                                  : NULL;
                        for (size_t k = 0; k < h->n_phys && !d; k++)
                                if (h->phys[k].p == p)
                                        d = &h->phys[k];
                        if (!d) {
                                d = &h->phys[h->n_phys++];
                                d->p = p;
                                d->gpu = (size_t)g;
                                d->gi = info->gi;
                                d->ci = info->ci;
                        }
                        d->n_logical++;
                        if (!dev->healthy || !p->healthy)
                                d->marked = true;
                }
        }
        for (size_t k = 0; k < h->n_phys; k++) {
                struct hphys *d = &h->phys[k];
                if (!d->marked)
                        continue;
                /* adopted: probed and recovered like the others */
                d->p->healthy = false;
                struct hgpu *hg = &h->gpus[d->gpu];
                hg->marked += d->n_logical;
                hg->quiet_since = now;
                hg->want_probe = true;
                snprintf(hg->reason, sizeof(hg->reason), "%s",
                         "unhealthy when health monitoring started");
        }
        h->todo = calloc(h->n_gpus ? h->n_gpus : 1, sizeof(*h->todo));
        if (!h->todo) {
                free_monitor(h);
                kdev_err_set(err, ENOMEM, "health: out of memory");
                return NULL;
        }
        h->lim = kdev_log_limiter_new(KDEV_LOG_REPEAT_WINDOW_MS);
        if (!h->lim) {
                free_monitor(h);
                kdev_err_set(err, ENOMEM, "health: out of memory");
                return NULL;
        }
        int rc = uv_async_init(loop, &h->async, on_async);
        if (rc != 0) {
                kdev_err_set(err, -rc, "health: uv_async_init: %s", uv_strerror(rc));
                free_monitor(h);
                return NULL;
        }
        h->async.data = h;
        h->open_handles = 1;
        if (uv_timer_init(loop, &h->log_timer) == 0) {
                h->log_timer.data = h;
                h->log_timer_init = true;
                h->open_handles++;
        }
        return h;
}

int kdev_nvidia_health_start(struct kdev_nvidia_health *h, struct kdev_err *err)
{
        if (h->started)
                return kdev_err_set(err, EALREADY, "health: already started");
        if (h->policy.disabled) {
                h->started = true;
                return 0;
        }
        int rc = kdev_nvml_init(h->lib, err);
        if (rc != 0)
                return rc;
        nvmlEventSet_t set = NULL;
        nvmlReturn_t r = h->api->nvmlEventSetCreate(&set);
        if (r != NVML_SUCCESS) {
                rc = kdev_nvml_fail(h->lib, r, err, "health: nvmlEventSetCreate");
                kdev_nvml_shutdown(h->lib, NULL);
                return rc;
        }
        h->evset = set;
        nvmlReturn_t *codes = calloc(h->n_gpus ? h->n_gpus : 1, sizeof(*codes));
        const char **calls = calloc(h->n_gpus ? h->n_gpus : 1, sizeof(*calls));
        if (!codes || !calls) {
                free(codes);
                free(calls);
                h->api->nvmlEventSetFree(set);
                h->evset = NULL;
                kdev_nvml_shutdown(h->lib, NULL);
                return kdev_err_set(err, ENOMEM, "health: out of memory");
        }
        for (size_t i = 0; i < h->n_gpus; i++) {
                struct hgpu *g = &h->gpus[i];
                calls[i] = "";
                codes[i] = register_gpu(h, g, set, &calls[i]);
                g->registered = codes[i] == NVML_SUCCESS;
                g->unsupported = codes[i] == NVML_ERROR_NOT_SUPPORTED &&
                                 strcmp(calls[i], "nvmlDeviceRegisterEvents") == 0;
        }
        h->started = true;
        rc = pthread_create(&h->thread, NULL, thread_main, h);
        if (rc != 0) {
                free(codes);
                free(calls);
                h->api->nvmlEventSetFree(set);
                h->evset = NULL;
                kdev_nvml_shutdown(h->lib, NULL);
                h->started = false;
                return kdev_err_set(err, rc, "health: cannot start the health thread: %s",
                                    strerror(rc));
        }
        h->thread_started = true;
        /* Apply the registration results on the loop side (the thread owns the
         * registration flags from now on; these copies were taken before). */
        for (size_t i = 0; i < h->n_gpus; i++)
                apply_register(h, i, codes[i], calls[i]);
        free(codes);
        free(calls);
        flush_notify(h);
        return 0;
}

void kdev_nvidia_health_stop(struct kdev_nvidia_health *h, void (*done)(void *arg), void *arg)
{
        if (!h || h->stopping)
                return;
        h->stopping = true;
        h->done = done;
        h->done_arg = arg;
        if (!h->thread_started) {
                close_handles(h);
                return;
        }
        pthread_mutex_lock(&h->mu);
        h->stop = true;
        pthread_cond_broadcast(&h->cond);
        pthread_mutex_unlock(&h->mu);
        /* the thread posts once more when it has exited; on_async joins it */
}

int kdev_nvidia_health_gpu(const struct kdev_nvidia_health *h, const char *uuid,
                           struct kdev_nvidia_gpu_health *out)
{
        int g = gpu_by_uuid(h, uuid);
        if (g < 0)
                return -ENOENT;
        const struct hgpu *hg = &h->gpus[g];
        memset(out, 0, sizeof(*out));
        out->healthy = hg->marked == 0;
        out->checks = hg->checks;
        out->marked = hg->marked;
        out->last_xid = hg->last_xid;
        snprintf(out->reason, sizeof(out->reason), "%s", hg->reason);
        return 0;
}

void kdev_nvidia_health_get_stats(const struct kdev_nvidia_health *h,
                                  struct kdev_nvidia_health_stats *out)
{
        *out = h->stats;
}

/* --- rediscovery ------------------------------------------------------------ */

struct kdev_nvidia_rediscover {
        uv_timer_t timer;
        char *library_path, *driver_root, *sysfs_root;
        struct kdev_nvml_options nvml;
        struct kdev_nvml_discover_options disc;
        uint64_t interval;
        kdev_nvidia_discovered_fn discovered;
        kdev_nvidia_retry_fn retry;
        void *arg;
        struct kdev_nvml *lib;
        unsigned attempts;
        bool finished, stopping;
        char last_msg[KDEV_ERR_MSG_MAX];
        void (*done)(void *arg);
        void *done_arg;
};

static void rediscover_free(struct kdev_nvidia_rediscover *r)
{
        kdev_nvml_close(r->lib);
        free(r->library_path);
        free(r->driver_root);
        free(r->sysfs_root);
        free(r);
}

static void rediscover_failed(struct kdev_nvidia_rediscover *r, const struct kdev_err *e)
{
        if (r->attempts > 1 && strcmp(r->last_msg, e->msg) == 0)
                return;
        snprintf(r->last_msg, sizeof(r->last_msg), "%s", e->msg);
        if (r->retry)
                r->retry(r->arg, e, r->attempts);
}

static void on_rediscover_tick(uv_timer_t *t)
{
        struct kdev_nvidia_rediscover *r = t->data;
        if (r->finished || r->stopping)
                return;
        r->attempts++;
        struct kdev_err e;
        kdev_err_clear(&e);
        if (!r->lib && kdev_nvml_open(&r->nvml, &r->lib, &e) != 0) {
                r->lib = NULL;
                rediscover_failed(r, &e);
                return;
        }
        struct kdev_gpu_set *gpus = NULL;
        if (kdev_nvml_discover(r->lib, &r->disc, &gpus, &e) != 0) {
                rediscover_failed(r, &e);
                return;
        }
        if (gpus->n_gpus == 0) {
                kdev_gpu_set_free(gpus);
                kdev_err_set(&e, ENODEV, "no GPUs found");
                rediscover_failed(r, &e);
                return;
        }
        r->finished = true;
        uv_timer_stop(&r->timer);
        struct kdev_nvml *lib = r->lib;
        r->lib = NULL;
        r->discovered(r->arg, lib, gpus);
}

static char *dup_opt(const char *s, bool *fail)
{
        if (!s)
                return NULL;
        char *d = strdup(s);
        if (!d)
                *fail = true;
        return d;
}

struct kdev_nvidia_rediscover *
kdev_nvidia_rediscover_start(uv_loop_t *loop, const struct kdev_nvidia_rediscover_options *opts,
                             struct kdev_err *err)
{
        if (!opts || opts->interval_ms == 0 || !opts->discovered) {
                kdev_err_set(err, EINVAL,
                             "rediscovery: an interval > 0 and a discovered callback are "
                             "required");
                return NULL;
        }
        struct kdev_nvidia_rediscover *r = calloc(1, sizeof(*r));
        if (!r) {
                kdev_err_set(err, ENOMEM, "rediscovery: out of memory");
                return NULL;
        }
        bool fail = false;
        if (opts->nvml) {
                r->library_path = dup_opt(opts->nvml->library_path, &fail);
                r->driver_root = dup_opt(opts->nvml->driver_root, &fail);
        }
        if (opts->discover) {
                r->disc = *opts->discover;
                r->sysfs_root = dup_opt(opts->discover->sysfs_root, &fail);
        }
        if (fail) {
                rediscover_free(r);
                kdev_err_set(err, ENOMEM, "rediscovery: out of memory");
                return NULL;
        }
        r->nvml.library_path = r->library_path;
        r->nvml.driver_root = r->driver_root;
        r->disc.sysfs_root = r->sysfs_root;
        r->interval = opts->interval_ms;
        r->discovered = opts->discovered;
        r->retry = opts->retry;
        r->arg = opts->arg;
        uv_timer_init(loop, &r->timer);
        r->timer.data = r;
        uv_timer_start(&r->timer, on_rediscover_tick, r->interval, r->interval);
        return r;
}

unsigned kdev_nvidia_rediscover_attempts(const struct kdev_nvidia_rediscover *r)
{
        return r->attempts;
}

static void on_rediscover_closed(uv_handle_t *handle)
{
        struct kdev_nvidia_rediscover *r = handle->data;
        void (*done)(void *) = r->done;
        void *arg = r->done_arg;
        rediscover_free(r);
        if (done)
                done(arg);
}

void kdev_nvidia_rediscover_stop(struct kdev_nvidia_rediscover *r, void (*done)(void *arg),
                                 void *arg)
{
        if (!r || r->stopping)
                return;
        r->stopping = true;
        r->done = done;
        r->done_arg = arg;
        uv_timer_stop(&r->timer);
        uv_close((uv_handle_t *)&r->timer, on_rediscover_closed);
}
