/* Control interface of the mock libnvidia-ml.so.1 (mock/nvml, README.md).
 *
 * Tests resolve these with dlsym() on the handle of the mock (the same
 * library the NVML loader opened: dlopen(path, RTLD_NOW | RTLD_NOLOAD) gives a
 * second reference to it). Every function takes the mock's lock, so it may be
 * called from any thread, also while another thread blocks in
 * nvmlEventSetWait. They return NVML codes: NVML_SUCCESS;
 * NVML_ERROR_NOT_FOUND for an unknown UUID; NVML_ERROR_INVALID_ARGUMENT for
 * a NULL or bad argument; or the error of loading the topology when none is
 * loaded yet (the topology is loaded on demand, as by nvmlInit).
 */
#ifndef KDEV_MOCK_NVML_H
#define KDEV_MOCK_NVML_H

#include "nvml/nvml_api.h"

/* Queues an event of |type| (an nvmlEventType* mask bit) with |data| for the
 * GPU |uuid| into every event set that registered that type for the GPU.
 * A MIG UUID means its parent GPU, and when |gi| and |ci| are both
 * KDEV_NVML_NO_INSTANCE the MIG device's own GI/CI ids are used. */
typedef nvmlReturn_t kdevMockInjectEvent_fn(const char *uuid, unsigned long long type,
                                            unsigned long long data, unsigned gi, unsigned ci);
/* kdevMockInjectEvent(uuid, nvmlEventTypeXidCriticalError, xid, gi, ci). */
typedef nvmlReturn_t kdevMockInjectXid_fn(const char *uuid, unsigned long long xid, unsigned gi,
                                          unsigned ci);
/* GPU lost (1) or back (0): every call on the GPU or its MIG devices answers
 * NVML_ERROR_GPU_IS_LOST (handle lookups still succeed), and each event set
 * registered on it returns NVML_ERROR_GPU_IS_LOST once from its next wait. */
typedef nvmlReturn_t kdevMockSetLost_fn(const char *uuid, int lost);
/* GPU or MIG device |uuid| present (1) or not (0), as a GPU hot-added or
 * removed (a driver reload) or a MIG device created or destroyed (as
 * nvidia-mig-manager does) while running: a removed GPU is left out of
 * nvmlDeviceGetCount / nvmlDeviceGetHandleByIndex (the others' indices
 * close up), nvmlDeviceGetHandleByUUID answers NOT_FOUND for it and a handle
 * to it answers GPU_IS_LOST; a destroyed MIG device's slot answers NOT_FOUND
 * in nvmlDeviceGetMigDeviceHandleByIndex. Topology key `present: 0` starts
 * one absent. A removed MIG device keeps its slot and GPU instance; it comes
 * back only while its compute instance id and slices are free (else
 * NVML_ERROR_IN_USE), and not after nvmlGpuInstanceDestroy of its GPU
 * instance (NVML_ERROR_NOT_FOUND). */
typedef nvmlReturn_t kdevMockSetPresent_fn(const char *uuid, int on);
/* MIG mode of GPU |uuid| set to |mode| (0 disabled, 1 enabled; current and
 * pending), as nvidia-smi -mig after the GPU reset. NOT_SUPPORTED for a GPU
 * without MIG, INVALID_ARGUMENT for another mode. */
typedef nvmlReturn_t kdevMockSetMigMode_fn(const char *uuid, unsigned mode);
/* Reset required (1) or not (0): every call on the GPU except identity
 * queries (handles, UUID, name, index, minor, PCI info, MIG handle walk)
 * answers NVML_ERROR_RESET_REQUIRED. */
typedef nvmlReturn_t kdevMockSetResetRequired_fn(const char *uuid, int on);
/* Pending row remap: nvmlDeviceGetRemappedRows reports isPending = |on|. */
typedef nvmlReturn_t kdevMockSetPendingRemap_fn(const char *uuid, int on);
/* Makes |function| (an NVML name without version suffix, e.g.
 * "nvmlDeviceGetMemoryInfo") answer |code| for the GPU |uuid| and its MIG
 * devices; NVML_SUCCESS removes the override. */
typedef nvmlReturn_t kdevMockSetError_fn(const char *uuid, const char *function,
                                         nvmlReturn_t code);
/* Makes every following nvmlInit fail with |code| (NVML_SUCCESS clears). */
typedef nvmlReturn_t kdevMockSetInitError_fn(nvmlReturn_t code);
/* Writes <root>/bus/pci/devices/<bus id>/numa_node for every GPU of the
 * topology (its numa_node, -1 when unset), creating directories. */
typedef nvmlReturn_t kdevMockWriteSysfs_fn(const char *root);
/* Writes <root>/driver/nvidia-caps/mig-minors (root: a fake /proc) for the
 * GPUs of the topology, numbered as the real driver does: "config 1",
 * "monitor 2", then for each GPU (by minor number g), GPU instance i = 0..14
 * and compute instance c = 0..7: "gpu<g>/gi<i>/access <3 + 135g + 9i>" and
 * "gpu<g>/gi<i>/ci<c>/access <3 + 135g + 9i + 1 + c>". Creates directories. */
typedef nvmlReturn_t kdevMockWriteProc_fn(const char *root);
/* Kills the calling process with SIGKILL (raise) in the |count|-th next
 * successful call of NVML entry point |function| (an un-suffixed name:
 * nvmlDeviceCreateGpuInstance, nvmlDeviceCreateGpuInstanceWithPlacement,
 * nvmlGpuInstanceCreateComputeInstance,
 * nvmlGpuInstanceCreateComputeInstanceWithPlacement,
 * nvmlComputeInstanceDestroy or nvmlGpuInstanceDestroy), right after its
 * change is made and written to $KDEV_MOCK_NVML_STATE, before the call
 * returns: kill -9 of a caller between making an instance and recording it.
 * |count| 0 disarms it. INVALID_ARGUMENT for another name. */
typedef nvmlReturn_t kdevMockCrashAfter_fn(const char *function, unsigned count);
/* The outcome of the last read or write of the state file
 * $KDEV_MOCK_NVML_STATE: "" when it went well (or there was no file), else
 * the message also written to stderr: "<file>:<line>: <message>" for a file
 * that was ignored (malformed, or for another topology), "<file>: ..." for
 * one that could not be read or written. */
typedef const char *kdevMockLastStateError_fn(void);
/* Forgets the loaded topology, injected conditions, the init error, the
 * control-file position, armed crash-after calls and the last state-file
 * error (the init count is kept; the state file stays, and is applied
 * again when the topology is loaded next). */
typedef void kdevMockReset_fn(void);
/* The last topology load error ("<file>:<line>:<col>: <message>"), or "". */
typedef const char *kdevMockLastError_fn(void);
/* The mock's own NVML init count. */
typedef unsigned kdevMockInitCount_fn(void);

#endif /* KDEV_MOCK_NVML_H */
