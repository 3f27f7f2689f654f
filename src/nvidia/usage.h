/* kdev-plugin's usage sampler: one snapshot of every GPU and MIG device's
 * use from NVML (usage/usage.h), taken on a thread-pool job.
 *
 * Per device: utilization (nvmlDeviceGetUtilizationRates; whole GPUs only:
 * NVML has none for a MIG device), memory total/used/free
 * (nvmlDeviceGetMemoryInfo), the running compute processes with their memory
 * (nvmlDeviceGetComputeRunningProcesses_v3, else _v2) and, where the driver
 * keeps them, the per-process SM utilization samples newer than the
 * previous snapshot's (nvmlDeviceGetProcessUtilization; whole GPUs only). A
 * GPU in MIG mode lists its processes under its MIG devices. A MIG device
 * carries its GPU's index, minor, PCI bus ID and product name (as
 * dcgm-exporter labels MIG devices), its GPU instance ID and its profile
 * (the part of its NVML name after "MIG ").
 *
 * The sampler opens NVML itself (the driver root rule of nvidia/roots.h, as
 * the backend), on its first sample and again after a failed one, so that
 * a backend replaced on the loop thread (rediscovery, a reload) never
 * closes NVML under a running job; nvmlInit is reference-counted by NVML.
 *
 * Threading: one sample at a time per sampler, on any thread; the sampler
 * holds no pointer into the daemon's state.
 */
#ifndef KDEV_NVIDIA_USAGE_H
#define KDEV_NVIDIA_USAGE_H

#include "common/err.h"
#include "common/export.h"
#include "nvidia/config.h"
#include "usage/usage.h"

struct kdev_nvidia_usage;

/* Creates a sampler for the NVML of |cfg|'s driver roots, or of
 * |library_path| when not NULL (tests, the mock). Opens nothing yet.
 * Returns 0 with *|out| (free with kdev_nvidia_usage_free), or -ENOMEM /
 * the roots' -ENAMETOOLONG with |err|. */
KDEV_API int kdev_nvidia_usage_new(const struct kdev_nvidia_config *cfg, const char *library_path,
                                   struct kdev_nvidia_usage **out, struct kdev_err *err);

/* Takes a snapshot into |out| (cleared first; the caller clears it after
 * use). A device whose handle or UUID NVML cannot give is left out; a
 * figure NVML cannot give is KDEV_USAGE_NONE (memory: have_memory false;
 * processes: procs_known false). Returns 0, or a negative errno with |err|
 * when NVML cannot be opened or initialised ("nvml init failed: Driver Not
 * Loaded") or nvmlDeviceGetCount fails; |out| is then empty and the next
 * call opens NVML again. */
KDEV_API int kdev_nvidia_usage_sample(struct kdev_nvidia_usage *u, struct kdev_usage_snapshot *out,
                                      struct kdev_err *err);

/* Shuts NVML down (its own init reference) and frees |u|. NULL-safe. */
KDEV_API void kdev_nvidia_usage_free(struct kdev_nvidia_usage *u);

#endif /* KDEV_NVIDIA_USAGE_H */
