/* NVML discovery: GPUs, MIG devices, PCI/NUMA placement and links, as plain
 * C structs. No Kubernetes knowledge here (naming, resources and health
 * policy live in the model and plugin layers).
 *
 * What is read and how follows NVIDIA's device plugin v0.20.0
 * (internal/rm/nvml_manager.go, internal/rm/device_map.go, internal/rm/
 * allocate.go) and the go-nvlib v0.12.0 it vendors (pkg/nvlib/device):
 *   - GPUs named "DGX Display" or "NVIDIA DGX Display" are skipped (go-nvlib);
 *     kept GPUs keep their NVML enumeration index;
 *   - the NUMA node comes from <sysfs>/bus/pci/devices/<bus id>/numa_node,
 *     where <bus id> is NVML's busId lower-cased without its first four
 *     characters ("00000000:3B:00.0" -> "0000:3b:00.0"); a missing file or a
 *     negative value means no NUMA node (-1);
 *   - nvmlDeviceGetMemoryInfo errors are recorded, not fatal (v0.18+: the
 *     parent of MIG devices may answer NO_PERMISSION, NVIDIA/k8s-device-plugin
 *     issue #399);
 *   - MIG devices are walked with nvmlDeviceGetMigDeviceHandleByIndex for
 *     j < nvmlDeviceGetMaxMigDeviceCount, skipping NOT_FOUND and
 *     INVALID_ARGUMENT; each one's GPU-instance and compute-instance profile
 *     is identified by looping over profile indices until the driver profile
 *     id matches (go-nvlib GetProfile);
 *   - the possible GPU-instance profiles of a MIG-capable GPU are those
 *     indices 0..NVML_GPU_INSTANCE_PROFILE_COUNT-1 that answer SUCCESS
 *     (NOT_SUPPORTED and INVALID_ARGUMENT are skipped; go-nvlib
 *     VisitMigProfiles);
 *   - links (with KDEV_NVML_DISCOVER_LINKS): the common-ancestor level of
 *     every pair and, for every enabled NVLink, the remote PCI bus id; a
 *     link whose remote bus id is a discovered GPU's is a direct GPU-GPU link
 *     (go-gpuallocator v0.6.0; links to NVSwitches or other devices are kept
 *     as "other"). NOT_SUPPORTED and INVALID_ARGUMENT from the link queries
 *     mean "no such link".
 */
#ifndef KDEV_NVML_DISCOVER_H
#define KDEV_NVML_DISCOVER_H

#include <stdbool.h>
#include <stddef.h>

#include "common/err.h"
#include "common/export.h"
#include "nvml/loader.h"
#include "nvml/nvml_api.h"

#define KDEV_GPU_UUID_MAX NVML_DEVICE_UUID_V2_BUFFER_SIZE   /* 96, with the NUL */
#define KDEV_GPU_NAME_MAX NVML_DEVICE_NAME_V2_BUFFER_SIZE   /* 96, with the NUL */
#define KDEV_GPU_BUS_ID_MAX NVML_DEVICE_PCI_BUS_ID_BUFFER_SIZE /* 32, with the NUL */
/* Size of a PCIe root complex name with the NUL ("pci<domain>:<bus>" and
 * margin). */
#define KDEV_GPU_PCIE_ROOT_MAX 32

/* One MIG device (a compute instance inside a GPU instance). */
struct kdev_mig_device {
        unsigned index;                        /* j of nvmlDeviceGetMigDeviceHandleByIndex */
        char uuid[KDEV_GPU_UUID_MAX];          /* "MIG-…" */
        char name[KDEV_GPU_NAME_MAX];          /* e.g. "NVIDIA A100-SXM4-40GB MIG 1g.5gb" */
        unsigned gi_id, ci_id;                 /* GPU instance id, compute instance id */
        nvmlDeviceAttributes_t attributes;     /* compared whole by the `single` strategy */
        unsigned long long memory_total;       /* bytes, nvmlDeviceGetMemoryInfo on the MIG
                                                * handle; 0 when memory_ret != SUCCESS */
        nvmlReturn_t memory_ret;
        unsigned gi_profile_index;             /* NVML_GPU_INSTANCE_PROFILE_* matched */
        nvmlGpuInstanceProfileInfo_t gi_profile; /* .id, .sliceCount, .memorySizeMB (MiB)… */
        nvmlGpuInstancePlacement_t gi_placement;
        unsigned ci_profile_index;             /* NVML_COMPUTE_INSTANCE_PROFILE_* matched */
        nvmlComputeInstanceProfileInfo_t ci_profile; /* .id, .sliceCount… */
        nvmlComputeInstancePlacement_t ci_placement;
};

/* A possible GPU-instance profile of a MIG-capable GPU. */
struct kdev_mig_profile {
        unsigned index;                        /* NVML_GPU_INSTANCE_PROFILE_* */
        nvmlGpuInstanceProfileInfo_t info;
};

/* One enabled NVLink of a GPU. */
struct kdev_nvlink {
        unsigned link;                         /* 0 .. NVML_NVLINK_MAX_LINKS-1 */
        char remote_bus_id[KDEV_GPU_BUS_ID_MAX]; /* NVML form, "00000000:C4:00.0" */
        int remote_gpu;                        /* position in kdev_gpu_set.gpus, or -1 */
};

struct kdev_gpu {
        unsigned index;                        /* NVML enumeration index */
        /* NVML_SUCCESS, or NVML_ERROR_GPU_IS_LOST / NVML_ERROR_RESET_REQUIRED when
         * a query answered so: the fields after the failing query are left zero
         * (uuid may be empty for a GPU lost before its UUID was read). */
        nvmlReturn_t fault;
        char uuid[KDEV_GPU_UUID_MAX];          /* "GPU-…" */
        char name[KDEV_GPU_NAME_MAX];          /* e.g. "NVIDIA H100 80GB HBM3" */
        char pci_bus_id[KDEV_GPU_BUS_ID_MAX];  /* NVML busId, "00000000:3B:00.0" */
        char sysfs_bus_id[KDEV_GPU_BUS_ID_MAX]; /* "0000:3b:00.0" (sysfs directory name) */
        unsigned pci_domain, pci_bus, pci_device;
        unsigned pci_device_id;                /* e.g. 0x233010DE */
        unsigned pci_subsystem_id;
        unsigned minor;                        /* /dev/nvidia<minor> */
        unsigned long long memory_total;       /* bytes; 0 when memory_ret != SUCCESS */
        nvmlReturn_t memory_ret;               /* nvmlDeviceGetMemoryInfo's answer */
        int cc_major, cc_minor;                /* CUDA compute capability */
        nvmlDeviceArchitecture_t arch;         /* NVML_DEVICE_ARCH_*, UNKNOWN without cap */
        const char *family;                    /* from cc (GFD gpu.family,
                                                * internal/lm): "volta", "turing", "ampere",
                                                * "ada-lovelace", "hopper", "blackwell",
                                                * "rubin" or "undefined"; static */
        int numa_node;                         /* -1: none */
        /* PCIe root complex (kdev_nvml_pcie_root), e.g. "pci0000:00"; ""
         * when sysfs does not say */
        char pcie_root[KDEV_GPU_PCIE_ROOT_MAX];
        /* nvmlDeviceGetMigMode answered (SUCCESS or NOT_SUPPORTED, or the
         * library lacks it): false only for a GPU whose fault came before or
         * with that answer, whose MIG mode is then unknown. It is read right
         * after the UUID, so a GPU that needs a reset still has it. */
        bool mig_mode_known;
        bool mig_capable;                      /* nvmlDeviceGetMigMode answered SUCCESS */
        unsigned mig_current, mig_pending;     /* NVML_DEVICE_MIG_{DISABLE,ENABLE} */
        unsigned mig_max;                      /* nvmlDeviceGetMaxMigDeviceCount (MIG on) */
        struct kdev_mig_device *migs;          /* when mig_current == ENABLE */
        size_t n_migs;
        struct kdev_mig_profile *mig_profiles; /* when mig_capable */
        size_t n_mig_profiles;
        struct kdev_nvlink *nvlinks;           /* with KDEV_NVML_DISCOVER_LINKS */
        size_t n_nvlinks;
        /* nvmlDeviceGetBrand (optional entry point, KDEV_NVML_CAP_BRAND):
         * |brand| (NVML_BRAND_*) is valid when |has_brand|; false when the
         * library lacks it or the GPU answered an error other than a fault
         * (a fault is recorded in |fault|). */
        bool has_brand;
        nvmlBrandType_t brand;
        /* Streaming multiprocessors of the whole GPU: multiprocessorCount of
         * nvmlDeviceGetAttributes(_v2) on the GPU handle, read only when the
         * GPU is not in MIG mode; 0 when unknown (the library lacks the entry
         * point, or NVML answered an error: NVML documents the call for MIG
         * handles, so a driver may answer NOT_SUPPORTED for whole GPUs). */
        unsigned multiprocessors;
};

struct kdev_gpu_set {
        char driver_version[NVML_SYSTEM_DRIVER_VERSION_BUFFER_SIZE]; /* "550.90.07" */
        int cuda_driver_version;               /* e.g. 12040 (12.4); 0 when unknown */
        struct kdev_gpu *gpus;                 /* NVML order, display GPUs left out */
        size_t n_gpus;
        size_t n_skipped;                      /* display GPUs skipped */
        bool has_links;                        /* levels/nvlink_counts are filled */
        /* n_gpus x n_gpus, row-major by position in gpus[]; the diagonal and the
         * pairs involving a GPU with a fault are 0 (level) and 0 (links) */
        nvmlGpuTopologyLevel_t *levels;
        unsigned *nvlink_counts;               /* direct GPU-GPU NVLinks of a pair */
        /* the sysfs tree the GPUs were read from (the discover options'
         * sysfs_root; "": "/sys"): where the CDI spec finds each GPU's DRM
         * nodes (nvidia/container_edits.h) */
        char sysfs_root[256];
};

enum {
        KDEV_NVML_DISCOVER_LINKS = 1u << 0,    /* read topology levels and NVLinks */
        /* Read only the MIG mode, not MIG profiles and devices (migStrategy
         * none: NVIDIA's plugin calls only nvmlDeviceGetMigMode then, so a MIG
         * query it would not make cannot stop the node). */
        KDEV_NVML_DISCOVER_NO_MIG = 1u << 1,
};

struct kdev_nvml_discover_options {
        const char *sysfs_root;                /* NULL or "": "/sys" */
        unsigned flags;                        /* KDEV_NVML_DISCOVER_* */
};

/* Discovers every GPU through |lib|. Calls kdev_nvml_init() and
 * kdev_nvml_shutdown() itself (balanced, also on error). |opts| may be NULL.
 * On success *|out| is a new set (free with kdev_gpu_set_free).
 * Errors (negative errno, |err| names the GPU and the NVML call):
 *   the init error of kdev_nvml_init();
 *   "GPU <i>: nvmlDeviceGetUUID: <nvmlErrorString>" and the like for a failing
 *     identity query (count, handle, UUID, name, PCI info, minor number) and
 *     for nvmlDeviceGetCudaComputeCapability / nvmlDeviceGetMigMode answers
 *     other than the recorded faults (GPU_IS_LOST, RESET_REQUIRED) and, for the
 *     MIG mode, NOT_SUPPORTED; errno from kdev_nvml_errno();
 *   "GPU <i> MIG device <j>: no matching GPU instance profile for id <id>"
 *     (-ENOENT), the same for compute instance profiles;
 *   "<path>: cannot parse NUMA node \"<text>\"" (-EINVAL);
 *   with KDEV_NVML_DISCOVER_LINKS: "GPU <i> and GPU <j>: unknown topology
 *     level <n>" (-EPROTO), "GPU <i> and GPU <j>: asymmetric topology
 *     (<a> vs <b>)" (-EPROTO), "GPU <i> and GPU <j>: asymmetric NVLink count
 *     (<a> vs <b>)" (-EPROTO), and NVML errors of the link queries other than
 *     NOT_SUPPORTED / INVALID_ARGUMENT;
 *   -ENOMEM. */
KDEV_API int kdev_nvml_discover(struct kdev_nvml *lib,
                                const struct kdev_nvml_discover_options *opts,
                                struct kdev_gpu_set **out, struct kdev_err *err);

/* Frees |set| and everything it owns (NULL-safe). */
KDEV_API void kdev_gpu_set_free(struct kdev_gpu_set *set);

/* The GPU whose UUID is |uuid|, or NULL. */
KDEV_API const struct kdev_gpu *kdev_gpu_set_find(const struct kdev_gpu_set *set, const char *uuid);

/* Whether the GPU inventory of |now| differs from |was|'s (both from
 * kdev_nvml_discover; NULL counts as no GPU): a GPU UUID of |now| that |was|
 * lacks (hot-added, driver reloaded), more GPUs of |was| missing from |now|
 * than |now| has GPUs without a UUID beyond those |was| had (a GPU lost
 * before its UUID was read cannot be named, so one that lost its UUID since
 * may be one of the missing; one without a UUID in |was| already stood for
 * a GPU missing then), fewer GPUs without a UUID than |was| had (a lost GPU
 * gone from the node), or, for a GPU in both
 * without a fault on either side (kdev_gpu.fault; a faulted GPU's MIG devices
 * may not have been read), another MIG mode or another list of MIG devices
 * (UUID, GPU- and compute-instance profile index, in order). Faults, health,
 * memory and links are not compared: the health monitor follows faults.
 * With a difference, |why| (|size| bytes, may be NULL) names the first one
 * found: "GPU <uuid> appeared", "GPU <uuid> is gone", "a GPU lost before its
 * UUID was read is gone", "MIG mode of GPU <uuid> changed", "MIG devices of
 * GPU <uuid> changed". */
KDEV_API bool kdev_gpu_set_inventory_differs(const struct kdev_gpu_set *was,
                                             const struct kdev_gpu_set *now, char *why,
                                             size_t size);

/* The topology level between positions |i| and |j| of set->gpus (both <
 * n_gpus, has_links true); NVML_TOPOLOGY_INTERNAL when i == j. */
KDEV_API nvmlGpuTopologyLevel_t kdev_gpu_set_level(const struct kdev_gpu_set *set, size_t i,
                                                   size_t j);

/* The number of direct NVLinks between positions |i| and |j| (0 without links). */
KDEV_API unsigned kdev_gpu_set_nvlinks(const struct kdev_gpu_set *set, size_t i, size_t j);

/* Converts NVML's busId ("00000000:3B:00.0") into the sysfs directory name
 * ("0000:3b:00.0"): lower-cased, first four characters dropped, as NVIDIA's
 * plugin does. |out| holds at least KDEV_GPU_BUS_ID_MAX bytes. Returns 0, or
 * -EINVAL when |bus_id| is shorter than 5 characters or does not fit. */
KDEV_API int kdev_nvml_sysfs_bus_id(const char *bus_id, char *out, size_t size);

/* Reads <sysfs_root or "/sys">/bus/pci/devices/<sysfs_bus_id>/numa_node into
 * *|node|: the value, or -1 when the file cannot be read (kdev_file_read:
 * missing, not a regular file, over KDEV_FILE_SYSFS_ATTR_MAX bytes) or holds
 * a negative value. Returns 0, or -EINVAL for text that is not an integer
 * ("<path>: cannot parse NUMA node \"<text>\""). */
KDEV_API int kdev_nvml_numa_node(const char *sysfs_root, const char *sysfs_bus_id, int *node,
                                 struct kdev_err *err);

/* The PCIe root complex of PCI device |sysfs_bus_id| ("0000:3b:00.0"), as
 * Kubernetes defines the standard attribute resource.kubernetes.io/pcieRoot
 * (k8s.io/dynamic-resource-allocation deviceattribute,
 * GetPCIeRootAttributeByPCIBusID; kubernetes.io "Standard Device Attributes
 * for Dynamic Resource Allocation"): the bus ID must be extended BDF,
 * lower-case hex "dddd:bb:dd.f"; the link <sysfs_root or "/sys">/bus/pci/
 * devices/<bus id> is read (a relative target taken from the link's
 * directory, "." and ".." resolved by name); its target must lie under
 * <sysfs_root>/devices/pci and end in the bus ID; the root is the first
 * component below <sysfs_root>/devices, "pci<domain>:<bus>" (e.g.
 * "pci0000:00"), written to |buf| (>= KDEV_GPU_PCIE_ROOT_MAX bytes).
 * Returns 0, or -EINVAL with |err|: "invalid PCI bus ID format: <id>",
 * "<link>: not a link: <strerror>" (readlink failed: missing, not a link),
 * "<link>: target <target> is not under <root>/devices/pci", "<link>: target
 * <target> does not end in <id>", or -ENAMETOOLONG. */
KDEV_API int kdev_nvml_pcie_root(const char *sysfs_root, const char *sysfs_bus_id, char *buf,
                                 size_t size, struct kdev_err *err);

/* The brand name of an NVML_BRAND_* value, as go-nvlib's
 * GetBrandAsString spells it (NVIDIA's DRA driver publishes it as the
 * `brand` attribute): "Unknown", "Quadro", "Tesla", "NVS", "Grid",
 * "GeForce", "Titan", "NvidiaVApps", "NvidiaVPC", "NvidiaVCS", "NvidiaVWS",
 * "NvidiaCloudGaming", "QuadroRTX", "NvidiaRTX", "Nvidia", "GeForceRTX",
 * "TitanRTX" for 0..16; NULL for any other value. Static storage. */
KDEV_API const char *kdev_nvml_brand_name(nvmlBrandType_t brand);

/* The family name GPU Feature Discovery gives a compute capability
 * (GFD internal/lm: tesla, fermi, kepler, ..., rubin; "undefined" for an
 * unknown major), used for the nvidia.com/gpu.family label and the DRA
 * architecture attribute. Static storage. */
KDEV_API const char *kdev_nvml_family(int cc_major, int cc_minor);

/* A name for a topology level ("INTERNAL", "SINGLE", "MULTIPLE",
 * "HOSTBRIDGE", "NODE", "SYSTEM"), or NULL for any other value. */
KDEV_API const char *kdev_nvml_level_name(nvmlGpuTopologyLevel_t level);

#endif /* KDEV_NVML_DISCOVER_H */
