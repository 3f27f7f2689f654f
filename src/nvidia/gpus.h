/* The node's NVIDIA devices as plain, NVML-free records: what a front end
 * that publishes and prepares whole GPUs and MIG devices (kdev-dra-plugin's
 * ResourceSlices and claims, src/dra) needs to know of them, with every
 * NVML type and enum already turned into numbers and names.
 *
 * The NVIDIA backend fills them from NVML discovery
 * (kdev_nvidia_gpus_from_set: one record per discovered GPU, in NVML order;
 * kdev-dra-plugin's backend, nvidia/dra_backend.h, discovers and converts
 * in one step), so this header includes nothing of src/nvml and a front end
 * that reads it never sees NVML. The DRA device names ("gpu-<minor>",
 * "gpu-<minor>-mig-<profile>-<GI profile id>-<GI placement start>") are
 * computed once, at conversion, by nvidia/mig.h (kdev_nvidia_dra_gpu_name,
 * kdev_nvidia_dra_mig_name), beside the MIG naming; a front end compares
 * and publishes them, it never builds one.
 *
 * Attribute names and spellings follow NVIDIA's DRA driver for GPUs
 * (NVIDIA/k8s-dra-driver-gpu, now kubernetes-sigs/dra-driver-nvidia-gpu,
 * cmd/gpu-kubelet-plugin/device_state.go), which reads the same NVML calls.
 */
#ifndef KDEV_NVIDIA_GPUS_H
#define KDEV_NVIDIA_GPUS_H

#include <stdbool.h>
#include <stddef.h>

#include "common/err.h"
#include "nvidia/mig.h"

/* Sizes with the NUL, those of NVML's buffers (nvml/discover.h KDEV_GPU_*;
 * gpus.c checks that they agree). */
#define KDEV_NVIDIA_UUID_MAX 96
#define KDEV_NVIDIA_PRODUCT_MAX 96
#define KDEV_NVIDIA_BUS_ID_MAX 32
#define KDEV_NVIDIA_DRIVER_VERSION_MAX 80

/* The engines of a GPU-instance profile (nvmlGpuInstanceProfileInfo_t
 * copyEngineCount, decoderCount, encoderCount, jpegCount, ofaCount). */
struct kdev_nvidia_engines {
        unsigned copy_engines, decoders, encoders, jpeg_engines, ofa_engines;
};

/* One MIG device (a compute instance in a GPU instance) of a GPU in MIG
 * mode. */
struct kdev_nvidia_mig {
        char uuid[KDEV_NVIDIA_UUID_MAX];     /* "MIG-…"; "" when NVML gave none */
        /* The DRA device name (kdev_nvidia_dra_mig_name), or "" with
         * |dra_name_error| the negative errno it failed with (-EINVAL: no
         * profile text left, -ENAMETOOLONG: a minor that leaves no room);
         * 0 otherwise. */
        char dra_name[KDEV_NVIDIA_DRA_NAME_MAX + 1];
        int dra_name_error;
        /* The MIG profile as NVML's device name spells it, the text after
         * " MIG " ("1g.10gb" of "NVIDIA H100 80GB HBM3 MIG 1g.10gb"); "" when
         * the name has none. */
        char profile[KDEV_NVIDIA_PRODUCT_MAX];
        unsigned gi_id, ci_id;               /* GPU instance and compute instance IDs
                                              * (the mig-minors keys, nvidia/mig.h) */
        /* Memory of the MIG device in bytes: nvmlDeviceGetMemoryInfo on the MIG
         * handle when it answered (> 0), else the GPU-instance profile's
         * memorySizeMB x 2^20; 0 when neither is known. */
        unsigned long long memory_bytes;
        unsigned multiprocessors;            /* CI profile multiprocessorCount; 0: unknown */
        struct kdev_nvidia_engines engines;  /* of the GPU-instance profile */
        /* The GPU instance's placement (nvmlGpuInstanceInfo_t placement):
         * the memory slices it occupies are start .. start + size - 1;
         * size 0: unknown. */
        unsigned placement_start, placement_size;
};

/* One possible MIG placement of a GPU (dynamic MIG, KEP-4815 partitionable
 * devices): a GPU instance of one profile at one position, which exists only
 * once a claim that asks for it is prepared. The records follow what
 * nvmlDeviceGetGpuInstanceProfileInfo and
 * nvmlDeviceGetGpuInstancePossiblePlacements_v2 answer (nvml/mig_config.h
 * kdev_nvml_mig_placements), with a full-size compute instance, as NVIDIA's
 * DRA driver publishes its partitions (cmd/gpu-kubelet-plugin, DynamicMIG). */
struct kdev_nvidia_placement {
        /* The DRA device name (kdev_nvidia_dra_placement_name,
         * "gpu-0-mig-1g10gb-19-3"), or "" with |dra_name_error| its negative
         * errno; 0 otherwise. */
        char dra_name[KDEV_NVIDIA_DRA_NAME_MAX + 1];
        int dra_name_error;
        /* The profile as nvidia-smi mig -lgip names it ("1g.10gb",
         * kdev_nvidia_mig_gi_profile_name). */
        char profile[KDEV_NVIDIA_MIG_PROFILE_MAX];
        unsigned gi_profile_id;              /* nvmlGpuInstanceProfileInfo_t.id (19 for 1g.10gb) */
        /* The memory slices it occupies: start .. start + size - 1
         * (nvmlGpuInstancePlacement_t); size >= 1. */
        unsigned placement_start, placement_size;
        unsigned long long memory_bytes;     /* memorySizeMB x 2^20; 0: unknown */
        unsigned multiprocessors;            /* multiprocessorCount; 0: unknown */
        struct kdev_nvidia_engines engines;  /* of the GPU-instance profile */
};

/* A MIG device (GPU instance + compute instance) on a GPU, as dynamic MIG
 * makes, destroys and lists them (nvidia/dra_backend.h
 * kdev_nvidia_dra_backend_mig_create / _mig_list; the numbers of
 * nvml/mig_config.h struct kdev_nvml_mig_instance). */
#define KDEV_NVIDIA_NO_INSTANCE 0xFFFFFFFFu /* ci_id of a GPU instance without one */
struct kdev_nvidia_mig_made {
        unsigned gi_id, ci_id;              /* GPU / compute instance ids */
        unsigned gi_profile_id;             /* nvmlGpuInstanceProfileInfo_t.id */
        unsigned placement_start, placement_size; /* memory slices */
        char uuid[KDEV_NVIDIA_UUID_MAX];    /* "MIG-..." ("" when NVML shows none) */
};

/* One GPU. */
struct kdev_nvidia_gpu {
        unsigned index;                      /* NVML enumeration index */
        unsigned minor;                      /* /dev/nvidia<minor> */
        /* Discovery met a fault (GPU lost, reset required): the GPU is
         * withdrawn, and the fields NVML did not answer before the fault
         * are zero or empty (even the UUID, for a GPU lost before it). */
        bool faulted;
        char uuid[KDEV_NVIDIA_UUID_MAX];     /* "GPU-…" */
        char dra_name[KDEV_NVIDIA_DRA_NAME_MAX + 1]; /* "gpu-<minor>" (kdev_nvidia_dra_gpu_name) */
        char product[KDEV_NVIDIA_PRODUCT_MAX]; /* NVML name, "NVIDIA H100 80GB HBM3" */
        /* nvmlDeviceGetBrand spelled as NVIDIA's DRA driver publishes it
         * ("Nvidia", "Tesla", "GeForceRTX", ...: kdev_nvml_brand_name), and the
         * architecture ("Kepler", "Maxwell", "Pascal", "Volta", "Turing",
         * "Ampere", "Ada Lovelace", "Hopper", "Blackwell" from
         * nvmlDeviceGetArchitecture); static strings, NULL when unknown. */
        const char *brand;
        const char *architecture;
        int cc_major, cc_minor;              /* CUDA compute capability; 0.0: unknown */
        char pcie_bus_id[KDEV_NVIDIA_BUS_ID_MAX]; /* sysfs form "0000:3b:00.0"; "" unknown */
        int numa_node;                       /* -1: none */
        /* PCIe root complex "pci<domain>:<bus>" (nvml/discover.h
         * kdev_nvml_pcie_root, from sysfs); "" unknown */
        char pcie_root[KDEV_NVIDIA_BUS_ID_MAX];
        unsigned long long memory_bytes;     /* nvmlDeviceGetMemoryInfo total; 0: unknown */
        unsigned multiprocessors;            /* SMs of the whole GPU; 0: unknown */
        bool mig_enabled;                    /* current MIG mode is enabled */
        struct kdev_nvidia_mig *migs;        /* mig_enabled: its MIG devices, NVML order */
        size_t n_migs;
        /* Dynamic MIG (KEP-4815): the MIG placements the GPU could be
         * partitioned into, owned by the record (freed by
         * kdev_nvidia_gpus_clear), and its number of MIG memory slices
         * (nvmlGpuInstancePlacement_t positions: 8 on A100 / H100). NULL, 0
         * and 0 unless dynamic MIG is asked for; a GPU with placements is
         * published as partitionable (dra/slices.h
         * kdev_dra_build_partitionable). */
        struct kdev_nvidia_placement *placements;
        size_t n_placements;
        unsigned memory_slices;
};

/* The node's GPUs. */
struct kdev_nvidia_gpus {
        char driver_version[KDEV_NVIDIA_DRIVER_VERSION_MAX]; /* NVML's text, "550.90.07" */
        /* nvmlSystemGetCudaDriverVersion: 1000 x major + 10 x minor (12040 is
         * CUDA 12.4); 0 when unknown */
        int cuda_driver_version;
        struct kdev_nvidia_gpu *gpus;        /* NVML order (display GPUs left out) */
        size_t n_gpus;
};

/* NVML's discovery result (nvml/discover.h); only the NVIDIA backend, which
 * includes src/nvml, makes or reads one. */
struct kdev_gpu_set;

/* Fills |out| (zeroed or cleared) with one record per GPU of |set| (NULL:
 * no GPUs), each MIG device of a GPU in MIG mode after it, computing the DRA
 * device names. A MIG device whose name cannot be made is kept with its
 * dra_name_error (the front end reports it where it would publish it).
 * Returns 0, or -ENOMEM with |err| (|out| is then empty). Clear |out| with
 * kdev_nvidia_gpus_clear(). */
KDEV_API int kdev_nvidia_gpus_from_set(const struct kdev_gpu_set *set, struct kdev_nvidia_gpus *out,
                              struct kdev_err *err);

/* One GPU's GPU-instance profiles and their possible placements as
 * nvml/mig_config.h reads them (kdev_nvml_mig_placements); only the NVIDIA
 * backend makes or reads one. */
struct kdev_nvml_mig_placements;

/* Replaces the placement records of |g| (freeing any it had) with one
 * struct kdev_nvidia_placement per (profile, placement) of |p|: profiles in
 * |p|'s order (NVML profile index order), each profile's placements in
 * NVML's order. profile: kdev_nvidia_mig_gi_profile_name of the profile
 * with |p|->memory_total (bytes), or with |g|->memory_bytes when NVML gave
 * no total; "" when it cannot be named. gi_profile_id: info.id;
 * placement_start/size: the placement (memory slices); memory_bytes:
 * info.memorySizeMB x 2^20; multiprocessors: info.multiprocessorCount;
 * the engines: info.copyEngineCount, decoderCount, encoderCount, jpegCount,
 * ofaCount. dra_name: kdev_nvidia_dra_placement_name(|g|->minor, profile,
 * id, start), or "" with dra_name_error its negative errno (-EINVAL for a
 * profile without a name). |g|->memory_slices: the largest start + size of
 * any placement (0 when there is none). The records are owned by |g| (freed
 * by kdev_nvidia_gpus_clear). Returns 0, or -ENOMEM with |err| (|g| then
 * has no placements). */
KDEV_API int kdev_nvidia_gpu_placements_from(const struct kdev_nvml_mig_placements *p,
                                             struct kdev_nvidia_gpu *g, struct kdev_err *err);

/* Frees what |g| owns and zeroes it (NULL-safe). */
KDEV_API void kdev_nvidia_gpus_clear(struct kdev_nvidia_gpus *g);

/* The GPU whose UUID is |uuid|, or NULL (also for NULL or ""). */
KDEV_API const struct kdev_nvidia_gpu *kdev_nvidia_gpus_find(const struct kdev_nvidia_gpus *g,
                                                    const char *uuid);

#endif /* KDEV_NVIDIA_GPUS_H */
