/* NVIDIA GPU health monitor and rediscovery (health.h).
 *
 * The NVML mechanics (the event thread, the registrations, the waits and the
 * probes) are the NVML backend's (nvml/events.h), which posts physical events
 * to the loop. What they mean is decided here, on the loop thread only:
 * NVIDIA's XID policy (nvidia/xid.h), the GPU/compute-instance filter, the
 * quiet period and which GPUs to probe. The monitor owns the per-GPU
 * recovery state and the marks of the physical devices, and changes the
 * resource set's health only through the model's physical events
 * (kdev_physical_apply).
 */
#include "nvidia/health.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/log.h"
#include "nvidia/devinfo.h"
#include "nvml/events.h"

/* --- state ---------------------------------------------------------------- */

/* One monitored physical device of the set: a whole GPU or a MIG device. */
struct hphys {
        struct kdev_physical *p;
        size_t gpu;                 /* index in h->gpus (and in the event watcher) */
        unsigned gi, ci;            /* KDEV_NVIDIA_NO_INSTANCE for a whole GPU */
        unsigned n_logical;         /* monitored logical devices on it */
        bool marked;                /* Unhealthy because of the monitor (or adopted) */
        bool incomplete;            /* discovery found it faulted: recovers by a re-read */
        int fault;                  /* that fault's NVML code */
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
        unsigned marked;
        uint64_t quiet_since;       /* ms, monotonic */
        unsigned long long last_xid;
        char reason[160];
        enum kdev_nvidia_health_checks checks;
        enum kdev_nvml_probe last_probe;
        bool probe_seen;
        bool initial;               /* start checks: its first probe is still due */
};

struct kdev_nvidia_health {
        struct kdev_nvml *lib;
        struct kdev_resource_set *set;
        struct kdev_xid_policy policy;
        struct kdev_nvidia_health_options o; /* copied; wait_timeout_ms filled in */

        struct hgpu *gpus;
        size_t n_gpus;
        struct hphys *phys;
        size_t n_phys;
        bool *changed;              /* per resource */
        struct pevent *pend;        /* physical events of the batch */
        size_t n_pend, pend_cap;
        struct kdev_nvidia_health_stats stats;

        struct kdev_nvml_events *events; /* the NVML side: thread, registrations, probes */
        /* repeated identical event lines (common/log.h), flushed by log_timer */
        struct kdev_log_limiter *lim;
        uv_timer_t log_timer;
        bool log_timer_init;
        bool started, stopping;
        void (*done)(void *arg);
        void *done_arg;
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

static int gpu_by_uuid(const struct kdev_nvidia_health *h, const char *uuid)
{
        for (size_t i = 0; i < h->n_gpus; i++)
                if (strcmp(h->gpus[i].uuid, uuid) == 0)
                        return (int)i;
        return -1;
}

/* gpu_by_uuid of |h|, -1 when |h| is NULL. */
static int gpu_by_uuid_in(const struct kdev_nvidia_health *h, const char *uuid)
{
        return h ? gpu_by_uuid(h, uuid) : -1;
}

static void want_probe(struct kdev_nvidia_health *h, const struct hgpu *g, bool on)
{
        kdev_nvml_events_want_probe(h->events, (size_t)(g - h->gpus), on);
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
        if (!h->o.physical || !transition)
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
        char xs[24];
        fmt_xid(xs, sizeof(xs), xid);
        if (count == 0)
                count = 1;
        if (was_healthy || fresh > 0) {
                if (was_healthy)
                        h->stats.unhealthy++;
                kdev_log_warn(was_healthy ? "GPU unhealthy"
                                          : "more devices of an unhealthy GPU marked unhealthy",
                              "uuid", g->uuid, KDEV_LOG_NUM("xid", xs), "reason", reason,
                              KDEV_LOG_UINT("devices", fresh));
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
                 (unsigned long long)h->o.quiet_period_ms);
        bool reread = false;
        for (size_t i = 0; i < h->n_phys; i++) {
                struct hphys *d = &h->phys[i];
                if (d->gpu != gidx || !d->marked)
                        continue;
                d->marked = false;
                if (d->incomplete)
                        reread = true; /* stays Unhealthy until the GPU is read again */
                else
                        emit(h, d->p, true, g->last_xid, quiet);
        }
        g->marked = 0;
        want_probe(h, g, false);
        h->stats.recoveries++;
        fmt_xid(xs, sizeof(xs), g->last_xid);
        if (reread) {
                kdev_log_info("GPU answers again; reading it again to advertise it", "uuid",
                              g->uuid, "xid", xs, "reason", quiet, "was", g->reason);
                if (h->o.reread)
                        h->o.reread(h->o.reread_arg, g->uuid);
                return;
        }
        kdev_log_info("GPU healthy again", "uuid", g->uuid, "xid", xs, "reason", quiet,
                      "was", g->reason);
}

static const char *outcome_text(enum kdev_nvml_probe p)
{
        switch (p) {
        case KDEV_NVML_PROBE_PASSED: return "probe passed";
        case KDEV_NVML_PROBE_LOST: return "GPU is lost";
        case KDEV_NVML_PROBE_RESET_REQUIRED: return "GPU requires a reset";
        case KDEV_NVML_PROBE_REMAP_PENDING: return "row remapping pending (reset required)";
        case KDEV_NVML_PROBE_REMAP_FAILED: return "row remapping failed";
        case KDEV_NVML_PROBE_FAILED: return "probe failed";
        }
        return "probe failed";
}

/* Tells the event observer (options.event) about |count| events. */
static void report(const struct kdev_nvidia_health *h, const char *kind, unsigned long long xid,
                   unsigned count)
{
        if (h->o.event)
                h->o.event(h->o.event_arg, kind, xid, count ? count : 1);
}

/* An event that changes no health: |count| of them added to |counter|,
 * reported to the observer as |kind| (with |xid|) and logged through the
 * limiter as |msg| with the GPU |uuid| and (|key|, |value|). */
static void pass_event(struct kdev_nvidia_health *h, unsigned long *counter, const char *kind,
                       unsigned long long xid, unsigned count, enum kdev_log_level level,
                       const char *msg, const char *uuid, const char *key, const char *value)
{
        *counter += count;
        report(h, kind, xid, count);
        kdev_log_limited(h->lim, count, level, msg, "uuid", uuid, key, value, NULL);
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

static void apply_probe(struct kdev_nvidia_health *h, const struct kdev_nvml_event *m)
{
        struct hgpu *g = &h->gpus[m->gpu];
        h->stats.probes += m->count;
        if (m->reg_tried) {
                if (m->reg == NVML_SUCCESS)
                        g->checks = KDEV_NVIDIA_HEALTH_REGISTERED;
                else if (m->reg == NVML_ERROR_NOT_SUPPORTED && m->probe == KDEV_NVML_PROBE_PASSED)
                        apply_register(h, (size_t)m->gpu, m->reg, "nvmlDeviceRegisterEvents");
        }
        if (g->initial) {
                g->initial = false;
                if (g->marked == 0 && m->probe != KDEV_NVML_PROBE_PASSED) {
                        char why[160];
                        if (m->probe == KDEV_NVML_PROBE_FAILED)
                                snprintf(why, sizeof(why), "found at start: probe failed: %s: %s",
                                         m->call, nvstr(h, m->ret));
                        else
                                snprintf(why, sizeof(why), "found at start: %s",
                                         outcome_text(m->probe));
                        mark_gpu(h, (size_t)m->gpu, KDEV_NVIDIA_NO_INSTANCE,
                                 KDEV_NVIDIA_NO_INSTANCE, 0, why, 1);
                        g->last_probe = m->probe;
                        g->probe_seen = true;
                        return;
                }
                if (g->marked == 0) {
                        want_probe(h, g, false);
                        return;
                }
        }
        if (g->marked == 0)
                return;         /* recovered meanwhile */
        uint64_t now = now_ms();
        if (m->probe == KDEV_NVML_PROBE_PASSED) {
                if (now - g->quiet_since >= h->o.quiet_period_ms) {
                        recover_gpu(h, (size_t)m->gpu);
                } else if (!g->probe_seen || g->last_probe != KDEV_NVML_PROBE_PASSED) {
                        kdev_log_info("GPU probe passed; waiting for the quiet period", "uuid",
                                      g->uuid, "reason", g->reason);
                }
                g->last_probe = KDEV_NVML_PROBE_PASSED;
                g->probe_seen = true;
                return;
        }
        char reason[160];
        if (m->probe == KDEV_NVML_PROBE_FAILED)
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

/* An XidCriticalError event: NVIDIA's XID policy first, then the GPU. */
static void apply_xid(struct kdev_nvidia_health *h, const struct kdev_nvml_event *m)
{
        char reason[160], xs[24];
        fmt_xid(xs, sizeof(xs), m->data);
        if (!kdev_xid_is_critical(&h->policy, m->data)) {
                pass_event(h, &h->stats.xid_ignored, "xid_ignored", m->data, m->count,
                           KDEV_LOG_INFO, "ignoring XID (not critical by policy)",
                           m->gpu >= 0 ? m->uuid : "unknown", "xid", xs);
                return;
        }
        if (m->gpu < 0 && m->uuid[0]) {
                pass_event(h, &h->stats.unknown_gpu, "xid_unknown_gpu", m->data, m->count,
                           KDEV_LOG_INFO, "ignoring XID for a GPU that is not advertised",
                           m->uuid, "xid", xs);
                return;
        }
        h->stats.xid_critical += m->count;
        report(h, "xid", m->data, m->count);
        if (m->gpu < 0) {
                snprintf(reason, sizeof(reason),
                         "critical XID %llu on a GPU that cannot be identified: %s: %s",
                         m->data, m->call, nvstr(h, m->ret));
                mark_all(h, reason, m->count);
                return;
        }
        snprintf(reason, sizeof(reason), "critical XID %llu", m->data);
        if (m->gi != KDEV_NVIDIA_NO_INSTANCE || m->ci != KDEV_NVIDIA_NO_INSTANCE) {
                size_t l = strlen(reason);
                snprintf(reason + l, sizeof(reason) - l,
                         " (GPU instance %d, compute instance %d)",
                         m->gi == KDEV_NVIDIA_NO_INSTANCE ? -1 : (int)m->gi,
                         m->ci == KDEV_NVIDIA_NO_INSTANCE ? -1 : (int)m->ci);
        }
        if (mark_gpu(h, (size_t)m->gpu, m->gi, m->ci, m->data, reason, m->count) == 0)
                kdev_log_limited(h->lim, m->count, KDEV_LOG_INFO,
                                 "critical XID matches no advertised device", "uuid", m->uuid,
                                 "xid", xs, "reason", reason, NULL);
}

static void apply(struct kdev_nvidia_health *h, const struct kdev_nvml_event *m)
{
        char reason[160], xs[24];
        switch (m->kind) {
        case KDEV_NVML_EVENT_XID:
                apply_xid(h, m);
                break;
        case KDEV_NVML_EVENT_OTHER:
                snprintf(xs, sizeof(xs), "0x%llx", m->data);
                pass_event(h, &h->stats.other_events,
                           m->data == (unsigned long long)nvmlEventTypeSingleBitEccError
                                   ? "ecc_single_bit"
                           : m->data == (unsigned long long)nvmlEventTypeDoubleBitEccError
                                   ? "ecc_double_bit"
                                   : "other",
                           0, m->count, KDEV_LOG_DEBUG, "skipping non-XID health event",
                           m->gpu >= 0 ? m->uuid : "unknown", "type", xs);
                break;
        case KDEV_NVML_EVENT_WAIT_ERROR:
                h->stats.wait_errors += m->count;
                report(h, m->ret == NVML_ERROR_GPU_IS_LOST ? "gpu_lost" : "wait_error", 0,
                       m->count);
                snprintf(reason, sizeof(reason), "waiting for health events failed: %s",
                         nvstr(h, m->ret));
                mark_all(h, reason, m->count);
                break;
        case KDEV_NVML_EVENT_REGISTER:
                apply_register(h, (size_t)m->gpu, m->ret, m->call);
                break;
        case KDEV_NVML_EVENT_PROBE:
                apply_probe(h, m);
                break;
        }
}

static void flush_notify(struct kdev_nvidia_health *h)
{
        if (h->n_pend > 0 && !h->stopping && h->o.physical) {
                struct kdev_physical_event *ev = malloc(h->n_pend * sizeof(*ev));
                if (ev) {
                        for (size_t i = 0; i < h->n_pend; i++)
                                ev[i] = (struct kdev_physical_event){
                                        .id = h->pend[i].id,
                                        .healthy = h->pend[i].healthy,
                                        .xid = h->pend[i].xid,
                                        .reason = h->pend[i].reason,
                                };
                        h->o.physical(h->o.physical_arg, ev, h->n_pend);
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
                if (h->o.notify)
                        h->o.notify(h->o.notify_arg, h->set->resources[i].name);
        }
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

/* A batch of the watcher's events (kdev_nvml_events_fn), on the loop thread:
 * applied in order, then one subscriber call and the notifies. */
static void on_events(void *arg, const struct kdev_nvml_event *ev, size_t n, bool overflow)
{
        struct kdev_nvidia_health *h = arg;
        for (size_t i = 0; i < n && !h->stopping; i++)
                apply(h, &ev[i]);
        if (overflow && !h->stopping)
                mark_all(h, "health event queue overflow", 1);
        flush_notify(h);
        arm_log_timer(h);
}

static void free_monitor(struct kdev_nvidia_health *h)
{
        kdev_log_limiter_free(h->lim); /* prints the counts still pending */
        kdev_xid_policy_clear(&h->policy);
        free(h->gpus);
        free(h->phys);
        free(h->changed);
        free(h->pend);
        free(h);
}

/* The last step of a stop: frees |h|, then calls its |done|. */
static void finish_stop(struct kdev_nvidia_health *h)
{
        void (*done)(void *) = h->done;
        void *arg = h->done_arg;
        free_monitor(h);
        if (done)
                done(arg);
}

static void on_log_timer_closed(uv_handle_t *handle)
{
        finish_stop(handle->data);
}

/* The watcher stopped (its thread joined, NVML released): closes the log
 * timer, then finishes. */
static void on_events_stopped(void *arg)
{
        struct kdev_nvidia_health *h = arg;
        if (h->log_timer_init)
                uv_close((uv_handle_t *)&h->log_timer, on_log_timer_closed);
        else
                finish_stop(h);
}

/* Collects the monitored physical devices of |h->set| and their GPUs into
 * h->phys and h->gpus (allocated for every device with data). Returns 0 or
 * -EINVAL with |err|. */
static int collect(struct kdev_nvidia_health *h, struct kdev_err *err)
{
        struct kdev_resource_set *set = h->set;
        for (size_t r = 0; r < set->n_resources; r++) {
                struct kdev_resource *res = &set->resources[r];
                for (size_t i = 0; i < res->n_devices; i++) {
                        struct kdev_device *dev = &res->devices[i];
                        const struct kdev_nvidia_devinfo *info = dev->data;
                        if (!info || info->withdrawn ||
                            (info->incomplete && !h->o.start_checks))
                                continue; /* an incomplete device never recovers in place */
                        if (!info->parent_uuid[0])
                                return kdev_err_set(err, EINVAL,
                                                    "health: device %s of %s has an empty "
                                                    "parent UUID",
                                                    dev->id, res->name);
                        struct kdev_physical *p = dev->physical;
                        if (!p || !p->logical)
                                return kdev_err_set(err, EINVAL,
                                                    "health: device %s of %s has no linked "
                                                    "physical device",
                                                    dev->id, res->name);
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
                                d->incomplete = info->incomplete;
                                d->fault = info->fault;
                        }
                        d->n_logical++;
                        if (!dev->healthy || !p->healthy)
                                d->marked = true;
                }
        }
        return 0;
}

/* Creates the event watcher over h->gpus. Returns 0, or -1 with |err|. */
static int new_watcher(struct kdev_nvidia_health *h, uv_loop_t *loop, struct kdev_err *err)
{
        const char **uuids = calloc(h->n_gpus ? h->n_gpus : 1, sizeof(*uuids));
        if (!uuids)
                return kdev_err_set(err, ENOMEM, "health: out of memory");
        for (size_t i = 0; i < h->n_gpus; i++)
                uuids[i] = h->gpus[i].uuid;
        struct kdev_nvml_events_options eo = {
                .event_types = (unsigned long long)KDEV_NVIDIA_HEALTH_EVENTS,
                .wait_timeout_ms = h->o.wait_timeout_ms,
                .probe_interval_ms = h->o.probe_interval_ms,
                .probe_at_start = h->o.start_checks,
                .on_events = on_events,
                .arg = h,
        };
        h->events = kdev_nvml_events_new(loop, h->lib, uuids, h->n_gpus, &eo, err);
        free(uuids);
        return h->events ? 0 : -1;
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
        h->lib = lib;
        h->set = set;
        h->o = *opts;
        if (h->o.wait_timeout_ms == 0)
                h->o.wait_timeout_ms = KDEV_NVIDIA_HEALTH_WAIT_MS;
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
        h->lim = kdev_log_limiter_new(KDEV_LOG_REPEAT_WINDOW_MS);
        if (!h->phys || !h->gpus || !h->changed || !h->lim) {
                free_monitor(h);
                kdev_err_set(err, ENOMEM, "health: out of memory");
                return NULL;
        }
        if (collect(h, err) != 0 || new_watcher(h, loop, err) != 0) {
                free_monitor(h);
                return NULL;
        }
        uint64_t now = now_ms();
        for (size_t k = 0; k < h->n_phys; k++) {
                struct hphys *d = &h->phys[k];
                if (!d->marked)
                        continue;
                /* adopted: probed and recovered like the others */
                d->p->healthy = false;
                struct hgpu *hg = &h->gpus[d->gpu];
                bool first = hg->marked == 0;
                hg->marked += d->n_logical;
                hg->quiet_since = now;
                want_probe(h, hg, true);
                int was = gpu_by_uuid_in(h->o.previous, hg->uuid);
                const struct hgpu *pg = was >= 0 ? &h->o.previous->gpus[was] : NULL;
                if (pg && pg->marked) {
                        /* carried over a rebuild: the same quiet period */
                        hg->quiet_since = pg->quiet_since;
                        hg->last_xid = pg->last_xid;
                        snprintf(hg->reason, sizeof(hg->reason), "%s", pg->reason);
                } else if (d->incomplete)
                        snprintf(hg->reason, sizeof(hg->reason), "found at start: %s",
                                 nvstr(h, (nvmlReturn_t)d->fault));
                else
                        snprintf(hg->reason, sizeof(hg->reason), "%s",
                                 "unhealthy when health monitoring started");
                if (h->o.start_checks && first)
                        kdev_log_warn("GPU unhealthy", "uuid", hg->uuid, "xid", "none",
                                      "reason", hg->reason);
        }
        h->o.previous = NULL; /* borrowed for the adoption only */
        for (size_t k = 0; h->o.start_checks && k < h->n_gpus; k++) {
                if (h->gpus[k].marked)
                        continue;
                h->gpus[k].initial = true; /* probed at once (probe_at_start) */
                want_probe(h, &h->gpus[k], true);
        }
        if (uv_timer_init(loop, &h->log_timer) == 0) {
                h->log_timer.data = h;
                h->log_timer_init = true;
        }
        return h;
}

int kdev_nvidia_health_start(struct kdev_nvidia_health *h, struct kdev_err *err)
{
        if (h->started)
                return kdev_err_set(err, EALREADY, "health: already started");
        /* disabled: NVIDIA makes no NVML init and no event set */
        int rc = h->policy.disabled ? 0 : kdev_nvml_events_start(h->events, err);
        if (rc == 0)
                h->started = true;
        return rc;
}

struct take_over {
        struct kdev_nvidia_health *h, *previous;
};

/* kdev_nvml_events_fn over |previous|'s pending events: those that say
 * something of a GPU, re-indexed into |h|'s watched list. */
static void on_taken(void *arg, const struct kdev_nvml_event *ev, size_t n, bool overflow)
{
        struct take_over *t = arg;
        struct kdev_nvidia_health *h = t->h;
        for (size_t i = 0; i < n && !h->stopping; i++) {
                struct kdev_nvml_event e = ev[i];
                if (e.kind == KDEV_NVML_EVENT_REGISTER || e.kind == KDEV_NVML_EVENT_PROBE)
                        continue;
                if (e.gpu >= 0) {
                        const char *uuid = t->previous->gpus[e.gpu].uuid;
                        e.gpu = gpu_by_uuid(h, uuid);
                        if (e.gpu < 0 && e.kind != KDEV_NVML_EVENT_XID)
                                continue;
                        if (e.gpu < 0)
                                snprintf(e.uuid, sizeof(e.uuid), "%s", uuid);
                } else if (e.kind == KDEV_NVML_EVENT_OTHER) {
                        continue;
                }
                apply(h, &e);
        }
        if (overflow && !h->stopping)
                mark_all(h, "health event queue overflow", 1);
        flush_notify(h);
        arm_log_timer(h);
}

void kdev_nvidia_health_take_over(struct kdev_nvidia_health *h,
                                  struct kdev_nvidia_health *previous)
{
        if (!h || !previous || previous == h)
                return;
        struct take_over t = {h, previous};
        kdev_nvml_events_take(previous->events, on_taken, &t);
}

void kdev_nvidia_health_stop(struct kdev_nvidia_health *h, void (*done)(void *arg), void *arg)
{
        if (!h || h->stopping)
                return;
        h->stopping = true;
        h->done = done;
        h->done_arg = arg;
        kdev_nvml_events_stop(h->events, on_events_stopped, h);
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

bool kdev_nvidia_health_cleared(const struct kdev_nvidia_health *h, const char *id)
{
        for (size_t i = 0; h && id && i < h->n_phys; i++) {
                const struct hphys *d = &h->phys[i];
                if (strcmp(d->p->id, id) == 0)
                        return d->incomplete && !d->marked;
        }
        return false;
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

/* --- inventory watch --------------------------------------------------------- */

struct kdev_nvidia_inventory_watch {
        uv_timer_t timer;
        struct kdev_nvml *lib;
        struct kdev_nvml_discover_options disc;
        char *sysfs_root;
        const struct kdev_gpu_set *gpus;
        uint64_t interval;
        kdev_nvidia_inventory_fn changed;
        void *arg;
        unsigned checks;
        bool paused, stopping, failing;
        char now_why[256];          /* kdev_nvidia_inventory_watch_now's reason, "" none */
        void (*done)(void *arg);
        void *done_arg;
};

static void on_inventory_tick(uv_timer_t *t)
{
        struct kdev_nvidia_inventory_watch *w = t->data;
        if (w->stopping || w->paused)
                return;
        char why[256];
        if (w->now_why[0]) {
                snprintf(why, sizeof(why), "%s", w->now_why);
                w->now_why[0] = '\0';
        } else {
                w->checks++;
                struct kdev_err e = {0};
                struct kdev_gpu_set *now = NULL;
                if (kdev_nvml_discover(w->lib, &w->disc, &now, &e) < 0) {
                        if (!w->failing)
                                kdev_log_warn("GPU inventory check failed, will retry", "error",
                                              e.msg);
                        w->failing = true;
                        return;
                }
                if (w->failing)
                        kdev_log_info("GPU inventory check works again");
                w->failing = false;
                bool differs = kdev_gpu_set_inventory_differs(w->gpus, now, why, sizeof(why));
                kdev_gpu_set_free(now);
                if (!differs)
                        return;
        }
        w->paused = true;
        uv_timer_stop(&w->timer);
        w->changed(w->arg, why);
}

struct kdev_nvidia_inventory_watch *
kdev_nvidia_inventory_watch_start(uv_loop_t *loop, const struct kdev_nvidia_inventory_options *opts,
                                  struct kdev_err *err)
{
        if (!opts || !opts->lib || opts->interval_ms == 0 || !opts->changed) {
                kdev_err_set(err, EINVAL,
                             "inventory watch: a library, an interval > 0 and a callback are "
                             "required");
                return NULL;
        }
        struct kdev_nvidia_inventory_watch *w = calloc(1, sizeof(*w));
        if (!w) {
                kdev_err_set(err, ENOMEM, "inventory watch: out of memory");
                return NULL;
        }
        if (opts->discover) {
                w->disc = *opts->discover;
                bool fail = false;
                w->sysfs_root = dup_opt(opts->discover->sysfs_root, &fail);
                if (fail) {
                        free(w);
                        kdev_err_set(err, ENOMEM, "inventory watch: out of memory");
                        return NULL;
                }
                w->disc.sysfs_root = w->sysfs_root;
        }
        w->disc.flags &= ~(unsigned)KDEV_NVML_DISCOVER_LINKS; /* links are not compared */
        w->lib = opts->lib;
        w->gpus = opts->gpus;
        w->interval = opts->interval_ms;
        w->changed = opts->changed;
        w->arg = opts->arg;
        uv_timer_init(loop, &w->timer);
        w->timer.data = w;
        uv_timer_start(&w->timer, on_inventory_tick, w->interval, w->interval);
        return w;
}

void kdev_nvidia_inventory_watch_now(struct kdev_nvidia_inventory_watch *w, const char *why)
{
        if (!w || w->stopping || w->paused)
                return;
        snprintf(w->now_why, sizeof(w->now_why), "%s", why && *why ? why : "re-read requested");
        uv_timer_start(&w->timer, on_inventory_tick, 0, w->interval);
}

void kdev_nvidia_inventory_watch_reread(struct kdev_nvidia_inventory_watch *w, const char *uuid)
{
        char why[160];
        snprintf(why, sizeof(why), "GPU %s answers again", uuid);
        kdev_nvidia_inventory_watch_now(w, why);
}

void kdev_nvidia_inventory_watch_rebase(struct kdev_nvidia_inventory_watch *w,
                                        const struct kdev_gpu_set *gpus)
{
        if (!w || w->stopping)
                return;
        w->gpus = gpus;
        w->paused = false;
        w->now_why[0] = '\0';
        uv_timer_start(&w->timer, on_inventory_tick, w->interval, w->interval);
}

unsigned kdev_nvidia_inventory_watch_checks(const struct kdev_nvidia_inventory_watch *w)
{
        return w ? w->checks : 0;
}

static void on_inventory_closed(uv_handle_t *handle)
{
        struct kdev_nvidia_inventory_watch *w = handle->data;
        void (*done)(void *) = w->done;
        void *arg = w->done_arg;
        free(w->sysfs_root);
        free(w);
        if (done)
                done(arg);
}

void kdev_nvidia_inventory_watch_stop(struct kdev_nvidia_inventory_watch *w,
                                      void (*done)(void *arg), void *arg)
{
        if (!w || w->stopping)
                return;
        w->stopping = true;
        w->done = done;
        w->done_arg = arg;
        uv_timer_stop(&w->timer);
        uv_close((uv_handle_t *)&w->timer, on_inventory_closed);
}
