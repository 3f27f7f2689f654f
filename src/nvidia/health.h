/* NVIDIA GPU health: XID event monitor with recovery, and rediscovery after an
 * NVML init failure.
 *
 * Health monitor (kdev_nvidia_health_*)
 * -------------------------------------
 * Follows NVIDIA's device plugin (internal/rm/health.go, v0.20.0 with the fix
 * of NVIDIA/k8s-device-plugin PR #1930, issue #1929), on the
 * physical GPUs behind the devices of a borrowed kdev_resource_set whose
 * kdev_device.data are struct kdev_nvidia_devinfo (src/nvidia/devinfo.h):
 *
 *   - the NVML side is the NVML backend's event watcher (src/nvml/events.h),
 *     created over the physical GPUs (each distinct parent_uuid) with
 *     NVIDIA's event mask KDEV_NVIDIA_HEALTH_EVENTS: at start (on the loop
 *     thread) NVML init (refcounted), one event set, and per GPU
 *     nvmlDeviceGetHandleByUUID, nvmlDeviceGetSupportedEventTypes and
 *     nvmlDeviceRegisterEvents with (XidCriticalError | DoubleBitEccError |
 *     SingleBitEccError) & supported; then one thread in nvmlEventSetWait
 *     (wait_timeout_ms) and the probes, posting physical events to the loop.
 *     The monitor decides what they mean, on the loop thread:
 *       * a registration that answers NOT_SUPPORTED (or no supported type in
 *         the mask): that GPU has no health checks and stays as it is
 *         (logged; NVIDIA v0.19+); any other failure of the three calls:
 *         every device of that GPU Unhealthy;
 *       * an XidCriticalError whose XID the policy counts as critical
 *         (src/nvidia/xid.h) marks EVERY device on that physical GPU Unhealthy:
 *         all replicas, and MIG devices filtered by the event's GPU instance id
 *         and compute instance id, each only when it is not 0xFFFFFFFF (PR
 *         #1930; v0.20.0 marked a single device per GPU);
 *       * ignored XIDs, ECC and other event types never change health (logged);
 *       * an event whose GPU cannot be identified (nvmlDeviceGetUUID fails and
 *         the handle is not one of ours), and an nvmlEventSetWait error other
 *         than TIMEOUT (e.g. GPU_IS_LOST), mark every device of the set
 *         Unhealthy. After a wait error the watcher rebuilds its event set (a
 *         GPU whose registration now fails, e.g. a lost one, is then retried by
 *         the probes) and waits wait_timeout_ms before waiting again;
 *       * a critical XID for a GPU that is not in the set is logged and dropped.
 *   - recovery (kdev's addition; NVIDIA has none): while a GPU has devices
 *     marked Unhealthy, the monitor asks the watcher to probe it every
 *     probe_interval_ms:
 *     nvmlDeviceGetRemappedRows (when the driver has it; NOT_SUPPORTED is
 *     fine), nvmlDeviceGetMemoryInfo (NO_PERMISSION and NOT_SUPPORTED are
 *     fine), and, when its events are not registered, the registration again.
 *     A probe fails when the GPU is lost (GPU_IS_LOST), needs a reset
 *     (RESET_REQUIRED), has a pending row remap or a row-remapping failure, or
 *     any of these calls fails otherwise. The quiet period restarts at every
 *     critical event on the GPU and at every failed probe; a passing probe at
 *     least quiet_period_ms after the last of them returns every device the
 *     monitor marked on that GPU to Healthy.
 *   - physical devices that are already Unhealthy when the monitor is created
 *     (kdev_physical.healthy false, or a logical device on it Unhealthy) are
 *     adopted without an event (kdev_physical.healthy is set false): their GPU
 *     is probed and recovers the same way.
 *   - health is physical (model/model.h): the monitor decides, with the XID
 *     policy and the GI/CI filter above, which physical devices of the set
 *     (kdev_physical: the whole GPU, or each MIG device) fault or recover, and
 *     emits one physical event (physical ID = GPU or MIG UUID, fault or
 *     recovery, XID, reason) per transition of a physical device; the model
 *     applies it (kdev_physical_apply: the physical device and every logical
 *     device on it, replicas included) and says which resources changed. A
 *     physical device the monitor already marked emits nothing more until it
 *     recovers. kdev_physical.healthy is current after every batch.
 *   - each batch of changes calls |physical| once with the batch's physical
 *     events (a front end that works on physical devices, kdev-dra-plugin),
 *     then |notify| once per resource whose devices changed (so one
 *     transition = one ListAndWatch update per affected resource), after all
 *     devices of the batch are updated.
 *   - every transition is logged (src/common/log.h) with the GPU UUID, the XID
 *     and the reason.
 *
 * Threads: every function runs on the loop thread; the monitor adds exactly one
 * thread, the watcher's (none when the policy is disabled). Only the loop
 * thread touches the resource set (through kdev_physical_apply only).
 *
 * A monitor serves one resource set for its whole life. When the set is
 * rebuilt (rediscovery, reload), stop the monitor first (from the return of
 * kdev_nvidia_health_stop() on, the old set is no longer touched and may be
 * freed), then create and start a new one over the new set; both may use the
 * same |lib|, which must stay open until every stopped monitor's |done| ran.
 *
 * Wiring in kdev-plugin:
 *   kdev_xid_policy_from_env(&pol, warn -> kdev_log_warn, ...) once; log
 *     kdev_xid_policy_describe();
 *   after the NVIDIA resources are built and added to the runtime:
 *     opts.probe_interval_ms = health.probeInterval * 1000,
 *     opts.quiet_period_ms = health.quietPeriod * 1000,
 *     opts.notify = a two-line adapter calling kdev_dp_runtime_notify(rt, resource),
 *     h = kdev_nvidia_health_new(loop, lib, &nvidia_set, &pol, &opts, &err);
 *     kdev_nvidia_health_start(h, &err) -- on failure NVIDIA logs and goes on
 *     without health checks ("continuing with health checks disabled");
 *   on shutdown: kdev_nvidia_health_stop(h, done) before kdev_dp_runtime_stop();
 *     kdev_nvml_close(lib) in |done| (or later).
 *
 * Rediscovery (kdev_nvidia_rediscover_*)
 * --------------------------------------
 * For failOnInitError=false: retries opening NVML and kdev_nvml_discover()
 * every interval on a uv_timer until it finds at least one GPU, then hands
 * the library and the GPU set to a callback and stops.
 */
#ifndef KDEV_NVIDIA_HEALTH_H
#define KDEV_NVIDIA_HEALTH_H

#include <stdbool.h>
#include <stdint.h>

#include <uv.h>

#include "common/err.h"
#include "model/model.h"
#include "nvidia/xid.h"
#include "nvml/discover.h"
#include "nvml/loader.h"

/* Event types registered (NVIDIA's mask, 0xB). */
#define KDEV_NVIDIA_HEALTH_EVENTS                                                              \
        (nvmlEventTypeXidCriticalError | nvmlEventTypeDoubleBitEccError |                      \
         nvmlEventTypeSingleBitEccError)

/* Default nvmlEventSetWait timeout: the longest a stop waits for the thread. */
#define KDEV_NVIDIA_HEALTH_WAIT_MS 1000u

/* Called on the loop thread once per resource whose devices' health changed
 * in one batch; |resource| is kdev_resource.name. Wire it to
 * kdev_dp_runtime_notify(rt, resource). */
typedef void (*kdev_nvidia_health_notify_fn)(void *arg, const char *resource);

struct kdev_nvidia_health_options {
        uint64_t probe_interval_ms;   /* health.probeInterval (s) x 1000; > 0 */
        uint64_t quiet_period_ms;     /* health.quietPeriod (s) x 1000; 0: first passing probe */
        unsigned wait_timeout_ms;     /* nvmlEventSetWait timeout; 0: KDEV_NVIDIA_HEALTH_WAIT_MS */
        kdev_nvidia_health_notify_fn notify; /* may be NULL */
        void *notify_arg;
        /* Subscriber of the physical events (may be NULL): one call per batch
         * with the batch's events (model/model.h), before |notify|; the IDs
         * are the set's kdev_physical.id. */
        kdev_physical_events_fn physical;
        void *physical_arg;
        /* Observer of the events the monitor applies, e.g. for metrics (may be
         * NULL); runs on the loop thread. |kind|: "xid" (critical by policy),
         * "xid_ignored" (not critical by policy), "xid_unknown_gpu" (critical,
         * for a GPU outside the set), "ecc_single_bit", "ecc_double_bit",
         * "other" (other event types), "gpu_lost" / "wait_error"
         * (nvmlEventSetWait failed with GPU_IS_LOST / otherwise),
         * "register_failed" (event registration of a GPU failed, not
         * NOT_SUPPORTED). |xid|: the XID for the "xid*" kinds, else 0.
         * |count|: occurrences (the queue coalesces repeats). */
        void (*event)(void *arg, const char *kind, unsigned long long xid, unsigned count);
        void *event_arg;
        /* Start checks (kdev's addition): every GPU is probed once as soon as
         * the monitor starts, and a GPU whose first probe fails (reset
         * required, row remap pending, lost...) is marked Unhealthy with the
         * reason "found at start: <probe outcome>" and recovers as any other
         * (quiet period, passing probe). Devices discovery found faulted
         * (kdev_nvidia_devinfo.incomplete) are monitored too, adopted with
         * the reason "found at start: <nvmlErrorString of the fault>"; as
         * their minor and PCI bus ID are unknown they never recover in
         * place: when their GPU passes (quiet period, probe) the monitor
         * calls |reread| with the GPU UUID so that the backend reads the GPU
         * again, and kdev_nvidia_health_cleared() then says so. Devices
         * marked withdrawn are never monitored (with or without this). */
        bool start_checks;
        void (*reread)(void *arg, const char *uuid);
        void *reread_arg;
        /* The monitor this one replaces (an inventory or configuration
         * rebuild; borrowed for kdev_nvidia_health_new only, may be NULL): a
         * GPU that both mark Unhealthy keeps the previous one's quiet-period
         * start, last XID and reason, so that rebuilds following each other
         * faster than the quiet period do not hold its recovery back. */
        const struct kdev_nvidia_health *previous;
};

struct kdev_nvidia_health;

/* Creates a monitor for the devices of |set| (borrowed: it must stay valid and
 * unchanged in shape until kdev_nvidia_health_stop(); the monitor writes only
 * health: kdev_physical.healthy and kdev_device.healthy, through the model).
 * Devices whose data is NULL are not monitored; every other device must point
 * to its physical device in the linked set (kdev_nvidia_attach_physical),
 * whose ID is the device's UUID (kdev_nvidia_devinfo.uuid). |lib| (borrowed)
 * must stay open until the stop's |done| has been called. |policy| and |opts|
 * are copied. Makes no NVML call.
 * Returns NULL with |err|: -EINVAL "health: probe interval must be > 0",
 * "health: device <id> of <resource> has an empty parent UUID", "health:
 * device <id> of <resource> has no linked physical device"; -ENOMEM; the
 * error of uv_async_init. */
KDEV_API struct kdev_nvidia_health *kdev_nvidia_health_new(uv_loop_t *loop, struct kdev_nvml *lib,
                                                  struct kdev_resource_set *set,
                                                  const struct kdev_xid_policy *policy,
                                                  const struct kdev_nvidia_health_options *opts,
                                                  struct kdev_err *err);

/* Starts monitoring (see the top of this file): registers the events of every
 * GPU, applies the registration failures (notify), starts the thread.
 * With policy->disabled it does nothing and returns 0 (NVIDIA: no NVML init,
 * no event set). Returns 0, or (nothing started, NVML init released):
 *   the error of kdev_nvml_init() ("nvml init failed: <nvmlErrorString>");
 *   "health: nvmlEventSetCreate: <nvmlErrorString>" (errno of kdev_nvml_errno);
 *   -EALREADY "health: already started"; -ENOMEM / thread creation errno.
 * Per-GPU registration failures are not errors (the GPU goes Unhealthy). */
KDEV_API int kdev_nvidia_health_start(struct kdev_nvidia_health *h, struct kdev_err *err);

/* A rebuild: |h| (started, its events registered) replaces |previous|
 * (borrowed; the monitor it adopted at kdev_nvidia_health_new, still running
 * or stopping; NULL: nothing). The events |previous|'s watcher saw and the
 * loop has not delivered yet (kdev_nvml_events_take) are applied to |h|:
 * XIDs, other events and event-wait failures, each GPU's by its UUID (a GPU
 * |h| does not watch: ignored, as by |previous|), so that a fault that
 * occurred before |h|'s event set existed is not lost with the old monitor
 * (NVML delivers an event only to the sets registered when it occurs). Its
 * probe and registration results are |previous|'s own and are dropped. */
KDEV_API void kdev_nvidia_health_take_over(struct kdev_nvidia_health *h,
                                           struct kdev_nvidia_health *previous);

/* Stops and frees |h| (NULL-safe), in any state. From the return on, the
 * monitor no longer reads or writes the resource set nor calls |notify|; the
 * thread ends after its current nvmlEventSetWait (at most wait_timeout_ms),
 * frees the event set and drops its NVML init reference; then |done| (may be
 * NULL) is called on the loop thread, after which |lib| may be closed. */
KDEV_API void kdev_nvidia_health_stop(struct kdev_nvidia_health *h, void (*done)(void *arg), void *arg);

/* Checks state of one physical GPU, as the loop thread sees it. */
enum kdev_nvidia_health_checks {
        KDEV_NVIDIA_HEALTH_NOT_STARTED = 0, /* not started, or policy disabled */
        KDEV_NVIDIA_HEALTH_REGISTERED,      /* events registered */
        KDEV_NVIDIA_HEALTH_UNSUPPORTED,     /* NOT_SUPPORTED: no health checks */
        KDEV_NVIDIA_HEALTH_UNREGISTERED,    /* registration failed; retried by probes */
};

struct kdev_nvidia_gpu_health {
        bool healthy;                       /* no device of the GPU marked by the monitor */
        enum kdev_nvidia_health_checks checks;
        unsigned marked;                    /* logical devices of the GPU marked Unhealthy
                                             * (those on its marked physical devices) */
        unsigned long long last_xid;        /* last critical XID, 0 when none */
        char reason[160];                   /* why it is (or was last) unhealthy, "" never */
};

/* State of the physical GPU |uuid|. Returns 0, or -ENOENT when no device of
 * the set is on it. */
KDEV_API int kdev_nvidia_health_gpu(const struct kdev_nvidia_health *h, const char *uuid,
                           struct kdev_nvidia_gpu_health *out);

/* Whether the monitor found the GPU of physical device |id| recovered
 * while |id| was incomplete (start_checks, |reread| called): the device is
 * still Unhealthy in the set but its Unhealthy state should not carry over
 * into the set that reads the GPU again. False for any other ID. */
KDEV_API bool kdev_nvidia_health_cleared(const struct kdev_nvidia_health *h, const char *id);

/* Counters, updated on the loop thread as messages are processed. */
struct kdev_nvidia_health_stats {
        unsigned long xid_critical;  /* critical XID events applied */
        unsigned long xid_ignored;   /* XID events the policy ignores */
        unsigned long other_events;  /* ECC and other non-XID events (never a change) */
        unsigned long unknown_gpu;   /* events for GPUs outside the set */
        unsigned long wait_errors;   /* nvmlEventSetWait errors other than TIMEOUT */
        unsigned long probes;        /* probe results received */
        unsigned long unhealthy;     /* GPU transitions to unhealthy */
        unsigned long recoveries;    /* GPU transitions back to healthy */
        unsigned long notifies;      /* notify calls */
};

KDEV_API void kdev_nvidia_health_get_stats(const struct kdev_nvidia_health *h,
                                  struct kdev_nvidia_health_stats *out);

/* --- rediscovery ------------------------------------------------------------ */

struct kdev_nvidia_rediscover;

/* Called on the loop thread when discovery found GPUs. Ownership of |lib|
 * (kdev_nvml_close) and |gpus| (kdev_gpu_set_free) passes to the callee. The
 * rediscovery has stopped retrying; the caller still ends it with
 * kdev_nvidia_rediscover_stop() (which may be called from this callback). */
typedef void (*kdev_nvidia_discovered_fn)(void *arg, struct kdev_nvml *lib,
                                          struct kdev_gpu_set *gpus);

/* Called on the loop thread after a failed attempt whose message differs from
 * the previous attempt's (the first failure always): |err| says why (the
 * error of kdev_nvml_open or kdev_nvml_discover, or -ENODEV "no GPUs found"). */
typedef void (*kdev_nvidia_retry_fn)(void *arg, const struct kdev_err *err, unsigned attempt);

struct kdev_nvidia_rediscover_options {
        const struct kdev_nvml_options *nvml;          /* copied; NULL: defaults */
        const struct kdev_nvml_discover_options *discover; /* copied; NULL: defaults */
        uint64_t interval_ms;                           /* > 0; first attempt after one interval */
        kdev_nvidia_discovered_fn discovered;           /* required */
        kdev_nvidia_retry_fn retry;                     /* may be NULL */
        void *arg;
};

/* Starts retrying on |loop|. Each attempt (on the loop thread, blocking for
 * the NVML calls): open the library if not open yet (kept open between
 * attempts), then kdev_nvml_discover(); success needs at least one GPU.
 * Returns NULL with |err|: -EINVAL (interval 0, no callback), -ENOMEM. */
KDEV_API struct kdev_nvidia_rediscover *
kdev_nvidia_rediscover_start(uv_loop_t *loop, const struct kdev_nvidia_rediscover_options *opts,
                             struct kdev_err *err);

/* Number of attempts made so far. */
KDEV_API unsigned kdev_nvidia_rediscover_attempts(const struct kdev_nvidia_rediscover *r);

/* Stops retrying and frees |r| once libuv released the timer (NULL-safe);
 * closes a library it still owns; no callback is called after the return
 * except |done| (may be NULL). */
KDEV_API void kdev_nvidia_rediscover_stop(struct kdev_nvidia_rediscover *r, void (*done)(void *arg),
                                 void *arg);

/* --- inventory watch --------------------------------------------------------- */

/* GPUs that come and go while running (kdev's addition; NVIDIA's plugin reads
 * its GPUs once): every interval, on a uv_timer, kdev_nvml_discover() through
 * the open |lib| and kdev_gpu_set_inventory_differs() against the GPUs in
 * force. A difference (a GPU hot-added or gone, a MIG layout changed) calls
 * |changed| once with the reason and pauses the watch until
 * kdev_nvidia_inventory_watch_rebase(); a discovery that fails (the driver
 * being reloaded) is logged once and retried at the next tick. */
struct kdev_nvidia_inventory_watch;

/* |why|: "GPU <uuid> appeared" and the like (kdev_gpu_set_inventory_differs),
 * or the reason given to kdev_nvidia_inventory_watch_now(). Loop thread. */
typedef void (*kdev_nvidia_inventory_fn)(void *arg, const char *why);

struct kdev_nvidia_inventory_options {
        struct kdev_nvml *lib;                          /* borrowed, open until stop's done */
        const struct kdev_nvml_discover_options *discover; /* copied (sysfs_root too); NULL: defaults */
        const struct kdev_gpu_set *gpus;                /* borrowed: the GPUs in force */
        uint64_t interval_ms;                           /* > 0 */
        kdev_nvidia_inventory_fn changed;               /* required */
        void *arg;
};

/* Starts the watch on |loop|; the first check runs one interval from now.
 * Returns NULL with |err|: -EINVAL (no library, interval 0, no callback),
 * -ENOMEM. */
KDEV_API struct kdev_nvidia_inventory_watch *
kdev_nvidia_inventory_watch_start(uv_loop_t *loop, const struct kdev_nvidia_inventory_options *opts,
                                  struct kdev_err *err);

/* Calls |changed| with |why| (copied) from the loop as soon as possible
 * (a zero timer, never from within this call), as a difference would: for
 * a GPU that must be read again although its UUID and MIG devices are the
 * same (it was faulted when read and answers again). NULL-safe. */
KDEV_API void kdev_nvidia_inventory_watch_now(struct kdev_nvidia_inventory_watch *w, const char *why);

/* kdev_nvidia_inventory_watch_now(w, "GPU <uuid> answers again"): the
 * health monitor's |reread| for a GPU discovery read faulted. NULL-safe. */
KDEV_API void kdev_nvidia_inventory_watch_reread(struct kdev_nvidia_inventory_watch *w,
                                                 const char *uuid);

/* Resumes a paused watch against |gpus| (borrowed, the GPUs now in force);
 * the next check runs one interval from now. NULL-safe. */
KDEV_API void kdev_nvidia_inventory_watch_rebase(struct kdev_nvidia_inventory_watch *w,
                                                 const struct kdev_gpu_set *gpus);

/* Number of checks made so far (tests). */
KDEV_API unsigned kdev_nvidia_inventory_watch_checks(const struct kdev_nvidia_inventory_watch *w);

/* Stops the watch and frees it once libuv released the timer (NULL-safe);
 * no callback after the return except |done| (may be NULL). */
KDEV_API void kdev_nvidia_inventory_watch_stop(struct kdev_nvidia_inventory_watch *w,
                                               void (*done)(void *arg), void *arg);

#endif /* KDEV_NVIDIA_HEALTH_H */
