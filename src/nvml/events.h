/* NVML health events: the event thread, the event-set registration of each
 * GPU, the waits and the probes of a GPU's state, delivered to a libuv loop
 * as physical events (GPU UUID, GPU/compute instance, fault or recovery
 * evidence, XID).
 *
 * This module knows NVML's mechanics and nothing of what an event means for
 * a device: which XIDs are critical (the XID policy), which logical devices
 * an event touches, when a GPU counts as recovered (the quiet period) and
 * what to log are the NVIDIA health monitor's (src/nvidia/health.h). It
 * follows NVIDIA's device plugin (internal/rm/health.go, v0.20.0) for the
 * registration and the wait, and adds the probes (NVIDIA has none):
 *
 *   - start (loop thread): kdev_nvml_init (refcounted), one nvmlEventSet,
 *     and for each watched GPU nvmlDeviceGetHandleByUUID,
 *     nvmlDeviceGetSupportedEventTypes and nvmlDeviceRegisterEvents with
 *     (options.event_types & supported); a mask that leaves no type is
 *     NOT_SUPPORTED from nvmlDeviceRegisterEvents. A GPU whose registration
 *     answered NOT_SUPPORTED from nvmlDeviceRegisterEvents is "unsupported":
 *     it is never registered again. MIG devices are watched through their
 *     GPU: NVML reports their events on the GPU with the event's GPU and
 *     compute instance IDs.
 *   - one thread blocks in nvmlEventSetWait (options.wait_timeout_ms at a
 *     time) and posts what it sees to the loop through uv_async: a
 *     mutex-protected queue of at most 1024 distinct pending events
 *     (KDEV_NVML_EVENTS_QUEUE_MAX) in which an event equal to the last
 *     pending one is coalesced into it (kdev_nvml_event.count); beyond the
 *     limit, or when the queue cannot grow, events are dropped and the next
 *     batch says |overflow|. No lock is held across an NVML call.
 *   - an XidCriticalError event is identified by nvmlDeviceGetUUID, then (when
 *     that fails) by its handle; every other event type by its handle only.
 *   - an nvmlEventSetWait error other than TIMEOUT (e.g. GPU_IS_LOST) is
 *     posted, the event set is rebuilt (every GPU not unsupported registered
 *     again, each result posted) and the thread waits wait_timeout_ms before
 *     waiting again; while nvmlEventSetCreate fails it retries every
 *     wait_timeout_ms.
 *   - probes: every probe_interval_ms the thread probes each GPU whose probe
 *     the loop asked for (kdev_nvml_events_want_probe):
 *     nvmlDeviceGetRemappedRows (when the driver has it; NOT_SUPPORTED is
 *     fine), nvmlDeviceGetMemoryInfo (NO_PERMISSION and NOT_SUPPORTED are
 *     fine) and, when its events are not registered (and it is not
 *     unsupported), the registration again. A probe fails when the GPU is
 *     lost (GPU_IS_LOST), needs a reset (RESET_REQUIRED), has a pending row
 *     remap or a row-remapping failure, or any of these calls fails
 *     otherwise.
 *
 * Threads: every function runs on the loop thread, and so does the callback;
 * the module adds exactly one thread while started. It never logs.
 */
#ifndef KDEV_NVML_EVENTS_H
#define KDEV_NVML_EVENTS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <uv.h>

#include "common/err.h"
#include "common/export.h"
#include "nvml/loader.h"
#include "nvml/nvml_api.h"

#define KDEV_NVML_EVENTS_QUEUE_MAX 1024u  /* distinct pending events; beyond: overflow */

enum kdev_nvml_event_kind {
        /* nvmlEventTypeXidCriticalError: |data| the XID, |gi|/|ci| the
         * event's GPU and compute instance (KDEV_NVML_NO_INSTANCE when it
         * names none). |gpu| >= 0: a watched GPU; |gpu| -1 with |uuid|: a GPU
         * NVML named that is not watched; |gpu| -1 with |uuid| "": not
         * identifiable (|ret| and |call| say why: nvmlDeviceGetUUID failed
         * and the handle is not a watched GPU's). Fault evidence. */
        KDEV_NVML_EVENT_XID,
        /* Another event type (ECC...): |data| the event type
         * (nvmlEventType*); |gpu| by handle, -1 when not a watched GPU's. */
        KDEV_NVML_EVENT_OTHER,
        /* nvmlEventSetWait failed other than TIMEOUT: |ret|, |call|
         * "nvmlEventSetWait"; |gpu| -1 (it is not attributable). Fault
         * evidence for every watched GPU. */
        KDEV_NVML_EVENT_WAIT_ERROR,
        /* The registration result of GPU |gpu|: |ret| (NVML_SUCCESS: its
         * events are registered) and the failing |call|; once per GPU at
         * start and after each event set rebuild. */
        KDEV_NVML_EVENT_REGISTER,
        /* A probe of GPU |gpu|: |probe| (PASSED is recovery evidence), |ret|
         * and |call| for KDEV_NVML_PROBE_FAILED; |reg_tried| when the probe
         * retried the registration, with its code in |reg|. */
        KDEV_NVML_EVENT_PROBE,
};

enum kdev_nvml_probe {
        KDEV_NVML_PROBE_PASSED = 0,
        KDEV_NVML_PROBE_LOST,           /* GPU_IS_LOST */
        KDEV_NVML_PROBE_RESET_REQUIRED, /* RESET_REQUIRED */
        KDEV_NVML_PROBE_REMAP_PENDING,  /* nvmlDeviceGetRemappedRows: isPending */
        KDEV_NVML_PROBE_REMAP_FAILED,   /* nvmlDeviceGetRemappedRows: failureOccurred */
        KDEV_NVML_PROBE_FAILED,         /* another NVML error: |ret| from |call| */
};

/* One physical event. Fields that a kind does not use are 0 / "" / NVML_SUCCESS
 * (|gi| and |ci|: KDEV_NVML_NO_INSTANCE). */
struct kdev_nvml_event {
        enum kdev_nvml_event_kind kind;
        int gpu;                        /* index in the watched list, -1: none */
        char uuid[NVML_DEVICE_UUID_V2_BUFFER_SIZE]; /* the watched GPU's UUID, or (XID
                                                     * for another GPU) NVML's; "" */
        unsigned long long data;        /* XID: the XID; OTHER: the event type */
        unsigned gi, ci;                /* XID: GPU / compute instance ID */
        nvmlReturn_t ret;               /* the NVML code of a failure */
        char call[48];                  /* the NVML call that answered |ret| */
        enum kdev_nvml_probe probe;     /* PROBE */
        bool reg_tried;                 /* PROBE: the registration was retried... */
        nvmlReturn_t reg;               /* ...and answered this */
        unsigned count;                 /* coalesced identical occurrences, >= 1 */
};

/* Called on the loop thread with the events posted since the last call, in
 * order (|ev| valid during the call only; |n| may be 0 when only |overflow|
 * is set); |overflow|: events were dropped since the last call. */
typedef void (*kdev_nvml_events_fn)(void *arg, const struct kdev_nvml_event *ev, size_t n,
                                    bool overflow);

struct kdev_nvml_events_options {
        unsigned long long event_types; /* nvmlEventType* mask to register (NVIDIA: 0xB) */
        unsigned wait_timeout_ms;       /* > 0: one nvmlEventSetWait; the longest a stop waits */
        uint64_t probe_interval_ms;     /* > 0 */
        /* The first probe round runs as soon as the thread starts (for the
         * GPUs whose probe is wanted then), not one probe interval later. */
        bool probe_at_start;
        kdev_nvml_events_fn on_events;  /* required */
        void *arg;
};

struct kdev_nvml_events;

/* Creates the watcher of the |n| GPUs |uuids| (copied; "GPU-..." UUIDs, index
 * i of |uuids| is kdev_nvml_event.gpu i) on |loop|. |lib| (borrowed) must stay
 * open until the stop's |done| ran. |opts| is copied. Makes no NVML call.
 * Returns NULL with |err|: -EINVAL "health: event watcher needs a callback,
 * a wait timeout > 0 and a probe interval > 0", -ENOMEM, or the error of
 * uv_async_init. */
KDEV_API struct kdev_nvml_events *kdev_nvml_events_new(uv_loop_t *loop, struct kdev_nvml *lib,
                                                       const char *const *uuids, size_t n,
                                                       const struct kdev_nvml_events_options *opts,
                                                       struct kdev_err *err);

/* Registers the events of every GPU and starts the thread (see the top of
 * this file); then, before returning, calls options.on_events once with one
 * KDEV_NVML_EVENT_REGISTER event per GPU, in list order (none when the list
 * is empty). Returns 0, or (nothing started, NVML init released):
 *   the error of kdev_nvml_init() ("nvml init failed: <nvmlErrorString>");
 *   "health: nvmlEventSetCreate: <nvmlErrorString>" (errno of kdev_nvml_errno);
 *   -EALREADY "health: already started"; -ENOMEM "health: out of memory";
 *   the errno of pthread_create "health: cannot start the health thread: ...".
 * A GPU whose registration fails is not an error (its REGISTER event says
 * so). */
KDEV_API int kdev_nvml_events_start(struct kdev_nvml_events *w, struct kdev_err *err);

/* Asks for (|on|) or stops the probes of GPU |gpu| (an index of the list;
 * others are ignored). May be called before start. */
KDEV_API void kdev_nvml_events_want_probe(struct kdev_nvml_events *w, size_t gpu, bool on);

/* Hands the events |w|'s thread posted and the loop has not delivered yet to
 * |fn| (with |arg|) now, on the loop thread, instead of options.on_events,
 * whether |w| is running or stopping (not once stopped). For a watcher being
 * replaced: what it saw before its successor's event set was registered
 * (NVML delivers an event only to the sets registered when it occurs) would
 * otherwise be lost with it. NULL-safe. */
KDEV_API void kdev_nvml_events_take(struct kdev_nvml_events *w, kdev_nvml_events_fn fn,
                                    void *arg);

/* Stops and frees |w| (NULL-safe), in any state. From the return on
 * options.on_events is not called; the thread ends after its current
 * nvmlEventSetWait (at most wait_timeout_ms) or probe, frees the event set
 * and drops its NVML init reference; then |done| (may be NULL) is called on
 * the loop thread, after which |lib| may be closed. */
KDEV_API void kdev_nvml_events_stop(struct kdev_nvml_events *w, void (*done)(void *arg),
                                    void *arg);

#endif /* KDEV_NVML_EVENTS_H */
