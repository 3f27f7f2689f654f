/* The NVIDIA backend of kdev-plugin as one object: NVML loading and GPU
 * discovery, the NVIDIA resources, the CDI spec, the health monitor, and
 * rediscovery when the driver is absent at start (failOnInitError: false).
 *
 * Lifecycle on the loop thread:
 *   kdev_nvidia_backend_open()  appends the NVIDIA resources to the set the
 *                               daemon serves (before the runtime starts);
 *   kdev_nvidia_backend_start() starts health monitoring or rediscovery,
 *                               and the inventory watch;
 *   kdev_nvidia_backend_stop()  stops both, removes the CDI spec, closes NVML.
 */
#ifndef KDEV_NVIDIA_BACKEND_H
#define KDEV_NVIDIA_BACKEND_H

#include <stdbool.h>
#include <stdint.h>

#include <uv.h>

#include "common/err.h"
#include "model/model.h"
#include "nvidia/config.h"
#include "nvml/discover.h"

struct kdev_nvidia_backend;

struct kdev_nvidia_backend_options {
        uv_loop_t *loop;
        /* Finished config (kdev_nvidia_config_finish), borrowed until stop's
         * |done|. */
        const struct kdev_nvidia_config *cfg;
        /* The resources the daemon serves, borrowed until stop's |done|: the
         * NVIDIA resources are appended by open; later only their devices
         * change (health, rediscovery), in place, on the loop thread. */
        struct kdev_resource_set *set;
        /* Called when the devices or health of |resource| changed: wire it to
         * kdev_dp_runtime_notify(). */
        void (*notify)(void *arg, const char *resource);
        void *notify_arg;
        /* Interval of rediscovery attempts in ms, and of the GPU inventory
         * checks (nvidia/health.h, kdev_nvidia_inventory_watch); 0 = 30000. */
        uint64_t rediscover_interval_ms;
        /* GPUs that come and go (may be NULL: no inventory watch): called on
         * the loop thread, at most once per backend, when the GPU inventory
         * differs from the one this backend was built from (a GPU hot-added
         * or gone, a MIG layout changed; |why| says which) or when a GPU
         * discovery found faulted answers again after its quiet period
         * ("GPU <uuid> answers again"). The daemon then builds a new backend
         * (with |previous| = this one's set) and stops this one; it must not
         * stop it from within the call. */
        void (*inventory_changed)(void *arg, const char *why);
        void *inventory_arg;
        /* The set served before this backend (borrowed for open only; may be
         * NULL) and the withdrawal rule: devices of its NVIDIA resources that
         * are gone now are offered to |keep_withdrawn| and, when kept,
         * appended Unhealthy (kdev_nvidia_keep_withdrawn). */
        const struct kdev_resource_set *previous;
        bool (*keep_withdrawn)(void *arg, const char *resource, const char *id);
        void *keep_arg;
        /* The backend this one replaces (borrowed until this one's
         * kdev_nvidia_backend_start; may be NULL): its health monitor's
         * quiet periods carry over (kdev_nvidia_health_options.previous). */
        const struct kdev_nvidia_backend *replaces;
        /* Do not write the CDI spec (kdev-plugin --check). */
        bool skip_cdi;
        /* Observer of health events (kdev_nvidia_health_options.event; may be
         * NULL), e.g. for metrics. */
        void (*health_event)(void *arg, const char *kind, unsigned long long xid, unsigned count);
        void *health_event_arg;
};

/* Opens the backend when cfg->wanted (otherwise sets *out to NULL and returns
 * 0): loads NVML (cfg->driver_root), discovers the GPUs, appends the NVIDIA
 * resources to opts->set and writes the CDI spec when a CDI strategy is
 * selected. When NVML cannot be loaded or initialised:
 *   - cfg->fail_on_init_error: fails with that error (e.g. "nvml init failed:
 *     Driver Not Loaded"), as NVIDIA's plugin does;
 *   - otherwise: logs why there are no GPUs, appends nvidia.com/gpu with 0
 *     devices, and start() retries discovery until the driver appears.
 * Returns 0 with *out set, or a negative errno with |err| (nothing appended). */
KDEV_API int kdev_nvidia_backend_open(const struct kdev_nvidia_backend_options *opts,
                             struct kdev_nvidia_backend **out, struct kdev_err *err);

/* Starts health monitoring (DP_DISABLE_HEALTHCHECKS / DP_ENABLE_HEALTHCHECKS
 * policy) or, without GPUs, rediscovery. NULL-safe (returns 0). Returns 0 or
 * a negative errno with |err|. */
KDEV_API int kdev_nvidia_backend_start(struct kdev_nvidia_backend *b, struct kdev_err *err);

/* The GPUs discovered, at open or by the rediscovery that found the driver;
 * NULL while there are none (driver absent) or when |b| is NULL. Borrowed:
 * valid until stop; a rediscovery replaces NULL by a new set (so a changed
 * pointer means "rediscovered"). */
KDEV_API const struct kdev_gpu_set *kdev_nvidia_backend_gpus(const struct kdev_nvidia_backend *b);

/* The path of the CDI spec |b| wrote (and removes at stop), or NULL when it
 * wrote none or gave it up. Borrowed: valid until stop. NULL-safe. */
KDEV_API const char *kdev_nvidia_backend_cdi_path(const struct kdev_nvidia_backend *b);

/* Gives up the CDI spec |b| wrote: stop leaves the file in place. For a
 * configuration reload, when the backend that replaces |b| wrote its spec at
 * the same path. NULL-safe. */
KDEV_API void kdev_nvidia_backend_disown_cdi(struct kdev_nvidia_backend *b);

/* Whether the Unhealthy state of physical device |id| of |b|'s set must not
 * carry over into the backend that reads the GPUs again: the health monitor
 * found its GPU recovered while discovery had read it faulted
 * (kdev_nvidia_health_cleared), or it is a withdrawn device (gone, not
 * faulted: when it is back it is Healthy). False when NULL or unknown. */
KDEV_API bool kdev_nvidia_backend_cleared(const struct kdev_nvidia_backend *b, const char *id);

/* Stops monitoring and rediscovery, removes the CDI spec this process wrote,
 * closes NVML and frees |b|; |done| (may be NULL) runs once every thread and
 * handle is gone. NULL-safe (|done| is then called at once). */
KDEV_API void kdev_nvidia_backend_stop(struct kdev_nvidia_backend *b, void (*done)(void *arg), void *arg);

#endif /* KDEV_NVIDIA_BACKEND_H */
