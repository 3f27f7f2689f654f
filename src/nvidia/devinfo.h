/* What an NVIDIA logical device is made of: the kdev_device.data of every
 * device in an NVIDIA resource (nvidia.com/gpu, nvidia.com/mig-*, their
 * replicas). Shared by the resource builder (which creates them), the Allocate
 * strategies and the health monitor (which maps an NVML event on a physical
 * GPU to the logical devices on it). */
#ifndef KDEV_NVIDIA_DEVINFO_H
#define KDEV_NVIDIA_DEVINFO_H

#include <stdbool.h>

/* GPU/compute instance ID of a whole GPU and of an event that names none
 * (NVML's 0xFFFFFFFF). */
#define KDEV_NVIDIA_NO_INSTANCE 0xFFFFFFFFu

struct kdev_nvidia_devinfo {
        char uuid[96];        /* the GPU's or MIG device's UUID ("GPU-…", "MIG-…") */
        char parent_uuid[96]; /* the physical GPU's UUID (== uuid for a whole GPU) */
        unsigned gi, ci;      /* MIG GPU/compute instance IDs; NO_INSTANCE for a whole GPU */
        char index[16];       /* deviceIDStrategy=index form: "i", or "i:j" for MIG */
        unsigned minor;       /* /dev/nvidia<minor> of the physical GPU */
        int replica;          /* time-slicing replica number, -1 when not replicated */
        /* memory of the GPU or MIG device (nvmlMemory_t.total), bytes; 0:
         * unknown. The share of an isolated replica is taken from it
         * (nvidia/isolation.h). */
        unsigned long long memory;
        /* CUDA compute capability of the physical GPU (whole GPUs; 0.0:
         * unknown). sharing.mps takes its replica limit from it. */
        int cc_major, cc_minor;
        /* MIG only (gi != NO_INSTANCE): minors N of the GPU-instance and
         * compute-instance access nodes /dev/nvidia-caps/nvidia-cap<N>, from
         * <procRoot>/driver/nvidia-caps/mig-minors at build time */
        unsigned gi_cap, ci_cap;
        /* Discovery stopped at a fault (lost, reset required) after the UUID:
         * minor, PCI bus ID and NUMA node are unknown. Such a device stays
         * Unhealthy (health never recovers it in place) and has no CDI device;
         * a rediscovery or a restart reads it again. */
        bool incomplete;
        /* The NVML code of that fault (an nvmlReturn_t: GPU_IS_LOST,
         * RESET_REQUIRED), 0 when complete. */
        int fault;
        /* No longer on the node (the GPU or MIG device is gone), kept
         * Unhealthy for pods that may still hold it until the daemon drops
         * it (kdev_nvidia_keep_withdrawn); never monitored. */
        bool withdrawn;
};

#endif /* KDEV_NVIDIA_DEVINFO_H */
