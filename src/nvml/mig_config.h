/* Dynamic MIG through NVML: the GPU-instance profiles of a GPU with their
 * possible placements, creation of a GPU instance at a placement with one
 * compute instance spanning it, its destruction, and the instances that
 * exist now (for a restart to reconcile).
 *
 * Raw NVML records only: profile names ("1g.10gb", "3g.40gb") are NVIDIA
 * names and are computed in src/nvidia (nvidia/mig.h) from the profile index
 * and memory returned here.
 *
 * What is called and in which order follows NVIDIA's tools that configure
 * MIG through NVML: nvidia-smi mig -cgi <profile>:<start> -C / -dci / -dgi,
 * nvidia-mig-parted (pkg/mig/state, pkg/nvlib) and NVIDIA's DRA driver for
 * GPUs (k8s-dra-driver-gpu, cmd/gpu-kubelet-plugin: create the GPU instance
 * with nvmlDeviceCreateGpuInstanceWithPlacement, then the compute instance
 * of the full GPU-instance profile with the shared engine profile; destroy
 * the compute instance, then the GPU instance). The entry points are the
 * loader's optional groups KDEV_NVML_CAP_MIG and KDEV_NVML_CAP_MIG_CONFIG.
 *
 * GPU argument |gpu| of every function: a decimal NVML index ("0") or a GPU
 * UUID ("GPU-..."), looked up with nvmlDeviceGetHandleByIndex_v2 /
 * nvmlDeviceGetHandleByUUID. Error texts start with "GPU <index> (<uuid>)".
 *
 * Each function takes and drops one kdev_nvml_init() reference itself (NVML
 * keeps the instances across init/shutdown); it may run on any thread, but
 * two calls that change the same GPU must not race (NVML does not serialise
 * the check of a placement and its creation for kdev).
 */
#ifndef KDEV_NVML_MIG_CONFIG_H
#define KDEV_NVML_MIG_CONFIG_H

#include <stdbool.h>
#include <stddef.h>

#include "common/err.h"
#include "common/export.h"
#include "nvml/discover.h"
#include "nvml/loader.h"
#include "nvml/nvml_api.h"

/* Most placements kept per profile (NVIDIA's tables have at most 8: one per
 * memory slice). */
#define KDEV_NVML_MIG_PLACEMENTS_MAX 16
/* Most instances kdev_nvml_mig_instances() lists (GPU instances times their
 * compute instances; a GPU has at most 8 memory slices and a GPU instance at
 * most 8 compute slices). */
#define KDEV_NVML_MIG_INSTANCES_MAX 64

/* One GPU-instance profile the GPU supports and where it may be placed. */
struct kdev_nvml_mig_profile {
        unsigned index;                        /* NVML_GPU_INSTANCE_PROFILE_* (0x0..0x11) */
        /* nvmlDeviceGetGpuInstanceProfileInfo: .id the driver profile id (19
         * for 1g on H100), .sliceCount, .instanceCount, .memorySizeMB (MiB) */
        nvmlGpuInstanceProfileInfo_t info;
        unsigned n_placements;
        /* nvmlDeviceGetGpuInstancePossiblePlacements_v2, in NVML's order;
         * {start, size} in memory slices */
        nvmlGpuInstancePlacement_t placements[KDEV_NVML_MIG_PLACEMENTS_MAX];
};

/* The placements of every profile of one GPU. */
struct kdev_nvml_mig_placements {
        unsigned gpu_index;                    /* NVML index */
        char uuid[KDEV_GPU_UUID_MAX];          /* "GPU-..." */
        /* nvmlDeviceGetMemoryInfo total of the GPU (bytes; what the profile
         * names are computed from, nvidia/mig.h); 0 when |memory_ret| is
         * not NVML_SUCCESS (a MIG parent may answer NO_PERMISSION) */
        unsigned long long memory_total;
        nvmlReturn_t memory_ret;
        size_t n_profiles;                     /* in profile index order */
        struct kdev_nvml_mig_profile profiles[NVML_GPU_INSTANCE_PROFILE_COUNT];
};

/* Reads the GPU-instance profiles of |gpu| (profile indices 0 ..
 * NVML_GPU_INSTANCE_PROFILE_COUNT-1 that nvmlDeviceGetGpuInstanceProfileInfo
 * answers; NOT_SUPPORTED and INVALID_ARGUMENT are skipped, as go-nvlib
 * VisitMigProfiles) and each one's possible placements into |*out| (caller's
 * storage, overwritten). Returns 0, or a negative errno with |err|:
 *   -EOPNOTSUPP "NVML library <path> lacks the dynamic MIG entry points";
 *   -EOPNOTSUPP "GPU 2 (GPU-...): MIG is not supported" (nvmlDeviceGetMigMode
 *               NOT_SUPPORTED), "GPU 1 (GPU-...): MIG mode is disabled";
 *   -ENOENT / -EINVAL "GPU <gpu>: nvmlDeviceGetHandleBy...: <nvmlErrorString>";
 *   -E2BIG      more than KDEV_NVML_MIG_PLACEMENTS_MAX placements;
 *   the errno of kdev_nvml_errno() for other NVML errors, with
 *   "GPU <i> (<uuid>): <nvml function>(<arg>): <nvmlErrorString>". */
KDEV_API int kdev_nvml_mig_placements(struct kdev_nvml *lib, const char *gpu,
                                      struct kdev_nvml_mig_placements *out,
                                      struct kdev_err *err);

/* A MIG device made by kdev_nvml_mig_create, or found by
 * kdev_nvml_mig_instances. */
struct kdev_nvml_mig_instance {
        unsigned gi_id;                        /* GPU instance id */
        unsigned gi_profile_id;                /* nvmlGpuInstanceProfileInfo_t.id */
        unsigned gi_profile_index;             /* NVML_GPU_INSTANCE_PROFILE_* */
        nvmlGpuInstancePlacement_t gi_placement; /* memory slices */
        /* compute instance id; KDEV_NVML_NO_INSTANCE for a GPU instance
         * without compute instance (then the fields below are zero / "") */
        unsigned ci_id;
        unsigned ci_profile_id;                /* nvmlComputeInstanceProfileInfo_t.id */
        nvmlComputeInstancePlacement_t ci_placement; /* compute slices of the GI */
        /* the MIG device handle's UUID ("MIG-..."); "" when no handle of
         * nvmlDeviceGetMigDeviceHandleByIndex has these GI/CI ids */
        char uuid[KDEV_GPU_UUID_MAX];
        unsigned mig_index;                    /* its nvmlDeviceGetMigDeviceHandleByIndex j */
};

/* Creates on |gpu| a GPU instance of driver profile id |gi_profile_id| at
 * the placement starting at memory slice |start| (its size from
 * nvmlDeviceGetGpuInstancePossiblePlacements_v2), with
 * nvmlDeviceCreateGpuInstanceWithPlacement, then one compute instance of the
 * GPU instance's full size: the compute-instance profile index whose
 * sliceCount is the GPU instance's (engine profile
 * NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED), with
 * nvmlGpuInstanceCreateComputeInstance. Fills |*out| (caller's storage) with
 * the ids, placements and the new MIG device's UUID. When the compute
 * instance cannot be made, or no MIG device handle shows it, what was made
 * is destroyed again. Returns 0, or a negative errno with |err|:
 *   the MIG errors of kdev_nvml_mig_placements;
 *   -EINVAL "GPU 0 (GPU-...): no GPU instance profile with id 99";
 *   -EINVAL "GPU 0 (GPU-...): GPU instance profile 9 has no placement at 5";
 *   kdev_nvml_errno() of NVML's answer with "GPU 0 (GPU-...): create GPU
 *     instance profile 9 placement 0: <nvmlErrorString>" (an overlap is
 *     NVML_ERROR_INSUFFICIENT_RESOURCES, -EIO) or "GPU 0 (GPU-...): create
 *     compute instance profile 2 in GPU instance 1: <nvmlErrorString>";
 *   -ENOENT "GPU 0 (GPU-...): no MIG device for GPU instance 1 compute
 *     instance 0". */
KDEV_API int kdev_nvml_mig_create(struct kdev_nvml *lib, const char *gpu,
                                  unsigned gi_profile_id, unsigned start,
                                  struct kdev_nvml_mig_instance *out, struct kdev_err *err);

/* Destroys compute instance |ci_id| of GPU instance |gi_id| on |gpu|
 * (nvmlComputeInstanceDestroy), then the GPU instance (nvmlGpuInstanceDestroy).
 * Idempotent: a compute or GPU instance that no longer exists
 * (nvmlDeviceGetGpuInstanceById / nvmlGpuInstanceGetComputeInstanceById
 * answer NOT_FOUND or INVALID_ARGUMENT) is skipped. |*gone| (may be NULL)
 * is set true when the GPU instance did not exist, so nothing was destroyed.
 * Returns 0, or a negative errno with |err|: the MIG errors of
 * kdev_nvml_mig_placements; kdev_nvml_errno() with "GPU 0 (GPU-...):
 * destroy compute instance 0 of GPU instance 1: <nvmlErrorString>" (-EBUSY
 * In use while a process runs on it) or "... destroy GPU instance 1: ...". */
KDEV_API int kdev_nvml_mig_destroy(struct kdev_nvml *lib, const char *gpu, unsigned gi_id,
                                   unsigned ci_id, bool *gone, struct kdev_err *err);

/* The GPU and compute instances on one GPU now. */
struct kdev_nvml_mig_instances {
        unsigned gpu_index;
        char uuid[KDEV_GPU_UUID_MAX];
        size_t n;
        /* by GPU instance id, then compute instance id; a GPU instance
         * without compute instance once, with ci_id KDEV_NVML_NO_INSTANCE */
        struct kdev_nvml_mig_instance items[KDEV_NVML_MIG_INSTANCES_MAX];
};

/* Lists the instances of |gpu| into |*out| (caller's storage): the GPU
 * instances of every supported profile (nvmlDeviceGetGpuInstances), the
 * compute instances of each (nvmlGpuInstanceGetComputeInstances for every
 * compute-instance profile, shared engines), and each pair's MIG device
 * UUID from the nvmlDeviceGetMigDeviceHandleByIndex walk. Returns 0, or a
 * negative errno with |err|: the MIG errors of kdev_nvml_mig_placements,
 * -E2BIG beyond KDEV_NVML_MIG_INSTANCES_MAX, kdev_nvml_errno() of a failing
 * NVML call with "GPU <i> (<uuid>): <nvml function>: <nvmlErrorString>". */
KDEV_API int kdev_nvml_mig_instances(struct kdev_nvml *lib, const char *gpu,
                                     struct kdev_nvml_mig_instances *out, struct kdev_err *err);

#endif /* KDEV_NVML_MIG_CONFIG_H */
