/* The NVIDIA backend of kdev-dra-plugin as one object: NVML loading under
 * the driver root, GPU discovery, the GPUs as NVML-free records
 * (nvidia/gpus.h) for the ResourceSlices and claims, and the XID health
 * monitor (nvidia/health.h) over the GPUs and MIG devices, whose physical events
 * (model/model.h) go to the front end. The DRA front end (src/dra) reaches
 * NVML only through it, so it includes no NVML header; kdev-plugin's
 * backend is nvidia/backend.h.
 *
 * Lifecycle:
 *   kdev_nvidia_dra_backend_open()         NVML, discovery, the records;
 *   kdev_nvidia_dra_backend_health_init()  the GPUs / MIG devices as the physical
 *                                          devices the monitor watches;
 *   kdev_nvidia_dra_backend_health_start() (loop thread) the monitor;
 *   kdev_nvidia_dra_backend_watch_start()  (loop thread) the GPU inventory
 *                                          watch: GPUs added or gone, MIG
 *                                          layouts changed;
 *   kdev_nvidia_dra_backend_rediscover()   (loop thread) the GPUs read again
 *                                          and the records refilled in place;
 *   kdev_nvidia_dra_backend_health_stop()  (loop thread) no more events;
 *   kdev_nvidia_dra_backend_free()         once the loop has run out
 *                                          (the monitor's thread and
 *                                          handles gone): closes NVML.
 */
#ifndef KDEV_NVIDIA_DRA_BACKEND_H
#define KDEV_NVIDIA_DRA_BACKEND_H

#include <uv.h>

#include "common/err.h"
#include "model/model.h"
#include "nvidia/config.h"
#include "nvidia/gpus.h"
#include "nvidia/xid.h"

struct kdev_nvidia_dra_backend;

struct kdev_nvidia_dra_backend_options {
        /* The NVIDIA driver root: libnvidia-ml.so.1 is looked up under it
         * (nvml/loader.h); NULL: "/". */
        const char *driver_root;
        /* NVML library to load instead (tests, the mock NVML); NULL: none. */
        const char *nvml_library;
        /* The sysfs tree discovery reads (NUMA node, PCIe root; copied);
         * NULL: "/sys". */
        const char *sysfs_root;
        /* Dynamic MIG (KEP-4815 partitionable devices): open and every
         * rediscovery also read the possible MIG placements of each GPU in
         * MIG mode into its records (struct kdev_nvidia_gpu placements,
         * memory_slices), and the kdev_nvidia_dra_backend_mig_* calls make
         * and destroy MIG devices. false: no placements, and those calls
         * answer -EINVAL. */
        bool dynamic_mig;
};

/* Loads NVML and discovers the GPUs (GPUs and MIG devices, no NVLink
 * topology, sysfs under opts->sysfs_root), then turns them into the records of
 * kdev_nvidia_dra_backend_gpus(). With opts->dynamic_mig, each GPU record
 * that is not faulted and whose current MIG mode is enabled also gets its
 * placement records from kdev_nvml_mig_placements(<its UUID>)
 * (nvml/mig_config.h; converted by kdev_nvidia_gpu_placements_from,
 * nvidia/gpus.h); a GPU with MIG off or not MIG capable gets none, and so
 * does one whose MIG mode NVML reports off or unsupported by then. Returns 0
 * with *out set, or a negative errno with |err| and *out NULL: the loader's
 * error unchanged (e.g. -EOPNOTSUPP "NVML library <path> not found: ...",
 * nvml/loader.h), the discovery's (nvml/discover.h), the other errors of
 * kdev_nvml_mig_placements unchanged (e.g. -EOPNOTSUPP "NVML library <path>
 * lacks the dynamic MIG entry points" when a GPU is in MIG mode), -ENOMEM.
 * Nothing stays open on error. */
KDEV_API int kdev_nvidia_dra_backend_open(const struct kdev_nvidia_dra_backend_options *opts,
                                 struct kdev_nvidia_dra_backend **out, struct kdev_err *err);

/* The GPU records (borrowed, valid until kdev_nvidia_dra_backend_free();
 * never NULL for an open backend). */
KDEV_API const struct kdev_nvidia_gpus *kdev_nvidia_dra_backend_gpus(const struct kdev_nvidia_dra_backend *b);

/* Builds the physical devices the health monitor watches from the
 * discovered GPUs with |cfg| (finished, kdev_nvidia_config_finish; borrowed
 * for this call): the NVIDIA resources (kdev_nvidia_build, nvidia/resources.h)
 * and their physical devices (kdev_nvidia_attach_physical). With MIG
 * strategy mixed, as kdev-dra-plugin sets it, these are the GPUs not in MIG
 * mode and each MIG device (physical ID = GPU or MIG UUID), so a health
 * event names the one device it faults (an XID with GPU/compute instance
 * IDs: one MIG device); with strategy none, the whole GPUs. A failure
 * leaves nothing built, so the caller may try again with another
 * strategy. Keeps
 * cfg->probe_interval and cfg->quiet_period (seconds) for the monitor.
 * Returns 0 or a negative errno with |err| (those of kdev_nvidia_build and
 * kdev_nvidia_attach_physical; -EALREADY when called twice). */
KDEV_API int kdev_nvidia_dra_backend_health_init(struct kdev_nvidia_dra_backend *b,
                                        const struct kdev_nvidia_config *cfg,
                                        struct kdev_err *err);

/* The physical device with ID |id| (a GPU UUID) the monitor watches, or NULL
 * (none, or before kdev_nvidia_dra_backend_health_init). Borrowed, valid
 * until kdev_nvidia_dra_backend_free(): a front end may keep its id. */
KDEV_API const struct kdev_physical *kdev_nvidia_dra_backend_find(const struct kdev_nvidia_dra_backend *b,
                                                         const char *id);

/* Creates and starts the health monitor on |loop| (kdev_nvidia_health_new
 * and kdev_nvidia_health_start, nvidia/health.h) over the physical devices
 * of kdev_nvidia_dra_backend_health_init(), with |policy| (copied) and the
 * kept probe interval and quiet period; |physical| (with |arg|) receives
 * each batch of physical events on the loop thread. Returns 0, or a
 * negative errno with |err| and no monitor left (-EINVAL before
 * health_init, -EALREADY when one runs, and the errors of the two health
 * calls). Loop thread. */
KDEV_API int kdev_nvidia_dra_backend_health_start(struct kdev_nvidia_dra_backend *b, uv_loop_t *loop,
                                         const struct kdev_xid_policy *policy,
                                         kdev_physical_events_fn physical, void *arg,
                                         struct kdev_err *err);

/* The physical devices the monitor watches (GPUs, MIG devices), or NULL
 * before kdev_nvidia_dra_backend_health_init. Borrowed: valid until the
 * next kdev_nvidia_dra_backend_rediscover or free. */
KDEV_API const struct kdev_resource_set *
kdev_nvidia_dra_backend_watched(const struct kdev_nvidia_dra_backend *b);

/* Called on the loop thread when the GPU inventory differs from the records
 * (|why|: "GPU <uuid> appeared", "GPU <uuid> is gone", "MIG devices of GPU
 * <uuid> changed", ...; nvml/discover.h) or when a GPU discovery read
 * faulted answers again after its quiet period ("GPU <uuid> answers
 * again"). Answer it with kdev_nvidia_dra_backend_rediscover(). */
typedef void (*kdev_nvidia_dra_inventory_fn)(void *arg, const char *why);

/* Starts the GPU inventory watch (nvidia/health.h,
 * kdev_nvidia_inventory_watch): every |interval_ms| (> 0) the GPUs are
 * discovered again and compared with the records; |changed| is called once
 * per difference and the watch waits for kdev_nvidia_dra_backend_rediscover.
 * Returns 0 or a negative errno with |err| (-EALREADY when one runs, the
 * watch's errors). Loop thread. */
KDEV_API int kdev_nvidia_dra_backend_watch_start(struct kdev_nvidia_dra_backend *b, uv_loop_t *loop,
                                                 uint64_t interval_ms,
                                                 kdev_nvidia_dra_inventory_fn changed, void *arg,
                                                 struct kdev_err *err);

/* Reads the GPUs again (as open does, placements included with dynamic
 * MIG) and, on success, refills the records
 * in place (the pointer of kdev_nvidia_dra_backend_gpus stays valid; a
 * prepare reads the new ones), rebuilds the watched physical devices (those
 * Unhealthy before stay Unhealthy, adopted and probed by the new monitor,
 * except a GPU read faulted whose monitor saw it recover), restarts a
 * monitor that ran (same policy and callback) and resumes the inventory
 * watch. Physical devices and IDs borrowed before are invalid afterwards.
 * Returns 0, or a negative errno with |err| and everything as it was (the
 * watch resumed): the discovery's errors, kdev_nvml_mig_placements' (as
 * for open), kdev_nvidia_build's, -ENOMEM; a
 * monitor that cannot be restarted is logged, not an error. Loop thread. */
KDEV_API int kdev_nvidia_dra_backend_rediscover(struct kdev_nvidia_dra_backend *b,
                                                struct kdev_err *err);

/* Dynamic MIG: MIG devices made and destroyed on a GPU in MIG mode for the
 * DRA front end (NVML-free; nvml/mig_config.h does the work). |gpu_uuid| is
 * the GPU's UUID ("GPU-...", struct kdev_nvidia_gpu uuid). They may run on
 * the loop thread while the health monitor runs: each call takes and drops
 * its own NVML init reference on the backend's library handle (serialised by
 * the loader, nvml/loader.h) and NVML itself is thread-safe; calls that
 * change the same GPU must not race each other (nvml/mig_config.h), which
 * one loop thread ensures. The records of kdev_nvidia_dra_backend_gpus are
 * not changed by the call: a create or destroy that changed the layout asks
 * the inventory watch, once started, to call its |changed| from the loop
 * at once ("MIG devices of GPU <uuid> changed: GPU instance <id> made" or
 * "... destroyed"), and kdev_nvidia_dra_backend_rediscover then refills
 * them and watches the new MIG devices' health.
 * Every call answers -EINVAL "dynamic MIG is off" (|*out|, |*gone|, |*n|
 * untouched) when the backend was opened without dynamic_mig. Loop thread. */

/* Creates a MIG device on |gpu_uuid|: a GPU instance of driver profile id
 * |gi_profile_id| (nvmlGpuInstanceProfileInfo_t.id, struct
 * kdev_nvidia_placement gi_profile_id) at the placement starting at memory
 * slice |start|, with one compute instance spanning it (kdev_nvml_mig_create).
 * Fills |*out| (caller's storage) with its GPU / compute instance ids,
 * profile id, placement and MIG UUID. Returns 0, or a negative errno with
 * |err|: kdev_nvml_mig_create's errors unchanged (e.g. -EIO "GPU 0 (GPU-...):
 * create GPU instance profile 19 placement 5: Ran out of critical
 * resources, other than memory" for an overlap, -EINVAL "GPU 0 (GPU-...):
 * GPU instance profile 9 has no placement at 5"). */
KDEV_API int kdev_nvidia_dra_backend_mig_create(struct kdev_nvidia_dra_backend *b,
                                                const char *gpu_uuid, unsigned gi_profile_id,
                                                unsigned start,
                                                struct kdev_nvidia_mig_made *out,
                                                struct kdev_err *err);

/* Destroys compute instance |ci_id| of GPU instance |gi_id| on |gpu_uuid|,
 * then the GPU instance (kdev_nvml_mig_destroy): idempotent, |*gone| (may
 * be NULL) true when the GPU instance no longer existed, false when it was
 * destroyed now. Returns 0, or kdev_nvml_mig_destroy's negative errno with
 * |err| (-EBUSY "... destroy compute instance 0 of GPU instance 1: In use
 * by another client" while a process runs on it). */
KDEV_API int kdev_nvidia_dra_backend_mig_destroy(struct kdev_nvidia_dra_backend *b,
                                                 const char *gpu_uuid, unsigned gi_id,
                                                 unsigned ci_id, bool *gone,
                                                 struct kdev_err *err);

/* The MIG devices on |gpu_uuid| now (kdev_nvml_mig_instances): each (GPU
 * instance, compute instance) pair once, and a GPU instance without compute
 * instance (a kill between the two creations leaves one) once with ci_id
 * KDEV_NVIDIA_NO_INSTANCE and uuid "", in its order (by GPU instance id,
 * then compute instance id), into |out| (|cap| entries, caller's storage; may be NULL
 * when |cap| is 0). Sets |*n| to how many there are. Returns 0, or a
 * negative errno with |err|: kdev_nvml_mig_instances' errors unchanged;
 * -E2BIG "GPU <uuid>: <n> MIG devices, room for <cap>" when there are more
 * than |cap| (|out| then holds the first |cap|). */
KDEV_API int kdev_nvidia_dra_backend_mig_list(struct kdev_nvidia_dra_backend *b,
                                              const char *gpu_uuid,
                                              struct kdev_nvidia_mig_made *out, size_t cap,
                                              size_t *n, struct kdev_err *err);

/* Stops the inventory watch (NULL-safe, and when none runs): no |changed|
 * call after the return; its timer closes on the loop (run it out before
 * kdev_nvidia_dra_backend_free). Loop thread. */
KDEV_API void kdev_nvidia_dra_backend_watch_stop(struct kdev_nvidia_dra_backend *b);

/* Stops the monitor (NULL-safe, and when none runs): from the return on,
 * |physical| is not called again; its thread and handles finish on the
 * loop (run it out before kdev_nvidia_dra_backend_free). Loop thread. */
KDEV_API void kdev_nvidia_dra_backend_health_stop(struct kdev_nvidia_dra_backend *b);

/* Stops the monitor if it still runs, frees the records and the physical
 * devices and closes NVML (NULL-safe). */
KDEV_API void kdev_nvidia_dra_backend_free(struct kdev_nvidia_dra_backend *b);

#endif /* KDEV_NVIDIA_DRA_BACKEND_H */
