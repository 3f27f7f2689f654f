/* Internal state of the mock libnvidia-ml.so.1 (see README.md). */
#ifndef KDEV_MOCK_NVML_MOCK_H
#define KDEV_MOCK_NVML_MOCK_H

#include <limits.h>
#include <stdbool.h>
#include <stddef.h>
#include <time.h>

#include "nvml/nvml_api.h"

#define MOCK_EXPORT __attribute__((visibility("default")))

#define MOCK_MAX_GPUS 64
#define MOCK_MAX_MIGS 8
#define MOCK_MAX_FAILS 16
#define MOCK_MAX_PROCS 64        /* running compute processes per GPU */
#define MOCK_NO_SAMPLE 0xFFFFFFFFu /* a process without a utilization sample */
#define MOCK_QUEUE 256
#define MOCK_DEFAULT_EVENTS 0x1FULL   /* SBE | DBE | PState | Xid | Clock */

struct mock_gpu;
struct mock_mig;

/* A device handle: a whole GPU (mig == NULL) or a MIG device. */
struct nvmlDevice_st {
        struct mock_gpu *gpu;
        struct mock_mig *mig;
};

struct nvmlGpuInstance_st {
        struct mock_gpu *gpu;
        bool used;              /* the slot holds a GPU instance (else free) */
        unsigned id;
        unsigned profile;       /* GPU-instance profile index */
        unsigned start;         /* placement start (memory slice) */
        unsigned size;          /* placement size (memory slices) */
};

struct nvmlComputeInstance_st {
        struct nvmlGpuInstance_st *gi;
        unsigned id;
        unsigned profile;       /* compute-instance profile index */
        unsigned start;
};

struct mock_profile {
        bool present;
        char name[32];          /* e.g. "1g.10gb+me" */
        unsigned placement_size;
        nvmlGpuInstanceProfileInfo_t info;
};

/* A MIG device: one compute instance of a GPU instance. Its slot in the
 * GPU's migs[] is its index for nvmlDeviceGetMigDeviceHandleByIndex. */
struct mock_mig {
        struct nvmlDevice_st handle;
        bool used;              /* the slot holds a MIG device (else free) */
        char uuid[NVML_DEVICE_UUID_V2_BUFFER_SIZE];
        struct nvmlGpuInstance_st *gi;
        struct nvmlComputeInstance_st ci;
        /* removed with kdevMockSetPresent / `mig-destroy` (or `present: 0`):
         * not enumerated, its slot kept for its return */
        bool hidden;
};

struct mock_link {
        bool connected;
        nvmlPciInfo_t remote;
};

struct mock_fail {
        char function[64];
        nvmlReturn_t code;
};

/* A running compute process (control file `proc`). */
struct mock_proc {
        unsigned pid;
        unsigned long long used;  /* bytes */
        unsigned sm;              /* percent, MOCK_NO_SAMPLE: no sample */
        int mig;                  /* index into the GPU's migs, -1: the whole GPU */
};

struct mock_gpu {
        struct nvmlDevice_st handle;
        unsigned index;
        char name[NVML_DEVICE_NAME_V2_BUFFER_SIZE];
        char uuid[NVML_DEVICE_UUID_V2_BUFFER_SIZE];
        nvmlPciInfo_t pci;
        unsigned minor;
        unsigned long long mem_total, mem_used;   /* bytes */
        int cc_major, cc_minor;
        nvmlDeviceArchitecture_t arch;
        unsigned sm_count;                        /* 0: whole-GPU attributes NOT_SUPPORTED */
        nvmlBrandType_t brand;                    /* default NVML_BRAND_NVIDIA */
        int numa_node;
        unsigned long long events;                /* supported event types */
        bool mig_capable;
        unsigned mig_mode, mig_pending, mig_max;
        struct mock_profile profiles[NVML_GPU_INSTANCE_PROFILE_COUNT];
        struct nvmlGpuInstance_st gis[MOCK_MAX_MIGS];
        size_t n_gis;                             /* slots ever used (high-water mark) */
        struct mock_mig migs[MOCK_MAX_MIGS];
        size_t n_migs;                            /* slots ever used (high-water mark) */
        unsigned n_nvlinks;                       /* NVLink ports */
        unsigned next_link;                       /* while loading */
        struct mock_link links[NVML_NVLINK_MAX_LINKS];
        /* removed (or not added yet): not enumerated, not found by UUID */
        bool hidden;
        /* injected conditions */
        bool lost, reset_required, remap_pending;
        struct mock_fail fails[MOCK_MAX_FAILS];
        size_t n_fails;
        /* usage from the control file: utilization rates and processes */
        bool util_fixed;
        unsigned util_gpu, util_mem;
        struct mock_proc procs[MOCK_MAX_PROCS];
        size_t n_procs;
};

struct mock_state {
        char path[PATH_MAX];
        struct timespec mtime;
        long long size;
        char driver_version[NVML_SYSTEM_DRIVER_VERSION_BUFFER_SIZE];
        int cuda_version;
        struct mock_gpu *gpus;
        size_t n_gpus;
        nvmlGpuTopologyLevel_t *levels;           /* n_gpus * n_gpus */
};

/* Largest topology file read (bytes): kind "topology file". */
#define MOCK_TOPOLOGY_FILE_MAX (1024 * 1024)

/* Loads the topology file |path| into a new state; the file is read with
 * kdev_file_read (src/common/file.h: a regular file of at most
 * MOCK_TOPOLOGY_FILE_MAX bytes, no NUL bytes). On error returns NULL and
 * writes "<path>:<line>:<column>: <message>" into |msg|, or the reader's
 * message ("<path>: cannot read: <reason>", "<path>: is not a regular file
 * (a FIFO)", "<path>: the topology file is larger than 1048576 bytes",
 * "<path>: contains a NUL byte at offset <n>"). */
struct mock_state *mock_topology_load(const char *path, char *msg, size_t msg_size);

/* Frees a state (NULL-safe). */
void mock_state_free(struct mock_state *s);

/* Largest state file read (bytes): kind "state file". */
#define MOCK_STATE_FILE_MAX (1024 * 1024)

/* Writes the instance state of |s| (every GPU's MIG mode, GPU instances and
 * compute instances; format in README.md, KDEV_MOCK_NVML_STATE) to |path|
 * atomically: a temporary file in its directory, fsync'ed and renamed over
 * it. Returns 0, or -1 with "<path>: <reason>" in |msg|. */
int mock_instances_write(const struct mock_state *s, const char *path, char *msg,
                         size_t msg_size);

/* Applies the state file |path| to |s|: each GPU it names gets exactly the
 * MIG mode and instances the file lists (what mock_instances_write wrote).
 * Returns 1 when applied, 0 when there is no such file, or -1 with nothing
 * changed and "<path>:<line>: <message>" (or the reader's message, as for
 * the topology) in |msg|. */
int mock_instances_apply(struct mock_state *s, const char *path, char *msg, size_t msg_size);

/* The compute slices of compute-instance profile index |ci| in a GPU
 * instance of |gi_slices| compute slices when it fits (README
 * "Compute-instance profiles"), else 0. */
unsigned mock_ci_fit(unsigned gi_slices, unsigned ci);

/* Parses an NVML return code name ("NO_PERMISSION", "NVML_ERROR_NO_PERMISSION")
 * or number. Returns 0 or -1. */
int mock_parse_return(const char *text, nvmlReturn_t *out);

#endif /* KDEV_MOCK_NVML_MOCK_H */
