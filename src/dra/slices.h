/* ResourceSlices of kdev's DRA kubelet plugin: the node's GPUs and MIG devices
 * as one resource pool per node, published to the API server.
 *
 * Device names and attributes follow NVIDIA's DRA driver for GPUs (driver
 * gpu.nvidia.com; NVIDIA/k8s-dra-driver-gpu, now kubernetes-sigs/
 * dra-driver-nvidia-gpu, cmd/gpu-kubelet-plugin/device_state.go), so that
 * DeviceClasses and CEL selectors written for it match kdev's devices:
 *   full GPU  "gpu-<minor>"  type "gpu"
 *   MIG       "gpu-<parent minor>-mig-<profile>-<GI profile id>-<GI placement start>"
 *             type "mig" (NVIDIA's canonical MIG name, e.g. "gpu-0-mig-3g20gb-9-4",
 *             "gpu-1-mig-1g5gb-me-20-0")
 * The names come from the NVIDIA module, beside the MIG naming
 * (kdev_nvidia_dra_gpu_name, kdev_nvidia_dra_mig_name in nvidia/mig.h).
 * A GPU in MIG mode publishes its MIG devices only, not itself.
 *
 * Publishing follows the resourceslice controller of kubernetes/dynamic-
 * resource-allocation (resourceslice/resourceslicecontroller.go) and the
 * ResourceSlice type of k8s.io/api resource/v1/types.go: pool.name = node name,
 * spec.nodeName set, owner reference to the Node (controller=true), at most
 * KDEV_DRA_SLICE_MAX_DEVICES devices per slice, every slice of the pool with
 * the same pool.generation and resourceSliceCount, the generation bumped on
 * every change, new slices created with generateName "<node>-<driver>-".
 *
 * Blocking (kdev_kube is): run kdev_dra_slices_reconcile off the event loop.
 */
#ifndef KDEV_DRA_SLICES_H
#define KDEV_DRA_SLICES_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

#include "common/err.h"
#include "kube/kube.h"
#include "nvidia/gpus.h"

#define KDEV_DRA_DEFAULT_DRIVER "gpu.nvidia.com"

/* Kubernetes' standard device attributes (k8s.io/dynamic-resource-allocation
 * deviceattribute; kubernetes.io "Standard Device Attributes for Dynamic
 * Resource Allocation"). */
#define KDEV_DRA_ATTR_PCIE_ROOT "resource.kubernetes.io/pcieRoot"
#define KDEV_DRA_ATTR_NUMA_NODE "resource.kubernetes.io/numaNode"

/* At most this many memorySlice<N> capacities per MIG device (a GPU has
 * at most 8 memory slices; the API allows 32 attributes and capacities per
 * device). */
#define KDEV_DRA_MEMORY_SLICES_MAX 8

/* API limit of devices per ResourceSlice (resource/v1 ResourceSliceMaxDevices). */
#define KDEV_DRA_SLICE_MAX_DEVICES 128

/* Longest device name: a DNS label (resource.k8s.io DeviceNameMaxLength). */
#define KDEV_DRA_DEVICE_NAME_MAX KDEV_NVIDIA_DRA_NAME_MAX

/* Health input of kdev_dra_build_devices. */
struct kdev_dra_health {
        /* UUIDs ("GPU-…" or "MIG-…") of unhealthy devices. A listed GPU
         * withdraws the GPU and all its MIG devices; a listed MIG device
         * withdraws only itself. */
        const char *const *unhealthy;
        size_t n_unhealthy;
};

/* Builds the devices (resource.k8s.io v1 shape: {name, attributes, capacity})
 * of the GPU records |gpus| (nvidia/gpus.h; NULL: none), in record order, a
 * GPU in MIG mode as its MIG devices at its position, named by their
 * dra_name, leaving out unhealthy ones: faulted GPUs and those |health|
 * names (|health| may be NULL).
 *
 * Attributes, each omitted when unknown (an empty string, a NULL name):
 *   GPU: type "gpu", uuid, productName (product, the NVML name), brand
 *     (brand: "Nvidia", "Tesla", "GeForce" …), architecture (architecture:
 *     "Kepler" … "Blackwell"), cudaComputeCapability (version
 *     "<major>.<minor>.0", when not 0.0), driverVersion (version: the
 *     driver_version text made semver, leading zeros of each number
 *     dropped, missing numbers 0: "550.90.07" -> "550.90.7"),
 *     cudaDriverVersion (version "12.4.0" from 12040, when > 0), pcieBusID
 *     (pcie_bus_id, sysfs form "0000:3b:00.0"), resource.kubernetes.io/
 *     pcieRoot (pcie_root, "pci0000:00": Kubernetes' standard attribute,
 *     the PCIe root complex from sysfs, nvml/discover.h
 *     kdev_nvml_pcie_root, so that a matchAttribute constraint puts a NIC
 *     of another driver under the same root), resource.kubernetes.io/
 *     numaNode (int, numa_node, when >= 0: Kubernetes' standard attribute;
 *     a device without NUMA affinity publishes none), index (int, NVML
 *     index), minor (int). NVIDIA's DRA driver publishes the same two
 *     standard attributes, MIG devices with their parent's.
 *     Capacity: memory (memory_bytes as a Kubernetes quantity, binary suffix
 *     when exact: "80Gi"), when > 0; multiprocessors (the whole GPU's SM
 *     count), when > 0. NVIDIA's DRA driver publishes only memory for whole
 *     GPUs; multiprocessors is kdev's addition (the same name as the MIG
 *     capacity, so one CEL expression covers both).
 *   MIG: type "mig", uuid, parentUUID, profile (e.g. "1g.10gb"), index (the
 *     parent's), minor (the parent's), and the parent's productName, brand,
 *     architecture, cudaComputeCapability, driverVersion, cudaDriverVersion,
 *     pcieBusID, resource.kubernetes.io/pcieRoot, resource.kubernetes.io/
 *     numaNode.
 *     Capacity: memory (when > 0), multiprocessors (CI profile, when > 0),
 *     copyEngines, decoders, encoders, jpegEngines, ofaEngines (GI profile),
 *     and, as NVIDIA's DRA driver publishes them, memorySlice<N> = 1 for
 *     each memory slice N the GPU instance's placement occupies
 *     (placement_start .. placement_start + placement_size - 1, at most
 *     KDEV_DRA_MEMORY_SLICES_MAX).
 *
 * *devices receives a new JSON array (caller json_decref's). Returns the
 * number of devices, or with |err| set: -ENOMEM; -EINVAL "GPU <index>: no
 * UUID" (a GPU without UUID that is not faulted); "GPU <index>: a MIG device
 * has no valid device name" with the errno of its dra_name_error (a MIG
 * device published that has no name). */
KDEV_API int kdev_dra_build_devices(const struct kdev_nvidia_gpus *gpus,
                           const struct kdev_dra_health *health, json_t **devices,
                           struct kdev_err *err);

/* Consumable capacity of shareable GPUs (KEP-5075; kdev_dra_build_devices_opts):
 * the capacity names, the compute total (percent) and the memory policy. */
#define KDEV_DRA_CAP_MEMORY "memory"
#define KDEV_DRA_CAP_COMPUTE "compute"
#define KDEV_DRA_SHARE_COMPUTE_TOTAL 100u
#define KDEV_DRA_SHARE_MEMORY_MIN (1ull << 30)  /* 1Gi */
#define KDEV_DRA_SHARE_MEMORY_STEP (1ull << 20) /* 1Mi */

/* Options of kdev_dra_build_devices_opts. */
struct kdev_dra_device_options {
        /* publish each whole GPU (not MIG devices) as shareable by several
         * claims (resource.k8s.io/v1 Device.allowMultipleAllocations, KEP-5075
         * consumable capacity, Kubernetes 1.34+ with the DRAConsumableCapacity
         * feature gate; kdev-dra-plugin --shareable-gpus) */
        bool shareable_gpus;
};

/* kdev_dra_build_devices with options |opts| (NULL: all off). With
 * shareable_gpus, a whole GPU is published with
 * "allowMultipleAllocations": true and these capacities instead of memory
 * and multiprocessors (KEP-5075: on such a device every capacity is
 * consumed by each allocation, by its requestPolicy default when the claim
 * does not ask for it; a capacity without policy would be consumed whole,
 * which is why multiprocessors is left out):
 *   memory:  {"value": <memory>, "requestPolicy": {"default": <memory>,
 *             "validRange": {"min": "1Gi", "step": "1Mi"}}}
 *            (no step when the memory is not a whole number of MiB above
 *            1Gi; min the memory itself when below 1Gi; left out when the
 *            memory is unknown)
 *   compute: {"value": "100", "requestPolicy": {"default": "100",
 *             "validRange": {"min": "1", "step": "1"}}}   (percent of the GPU)
 * so a claim asking for no capacity consumes the whole GPU (the usual
 * exclusivity) and one asking {memory: 20Gi, compute: 25} a share. Returns
 * as kdev_dra_build_devices; -EINVAL for GPUs with MIG placements, whose
 * devices consume counter sets only kdev_dra_build_partitionable returns
 * (this is that builder without the counter sets). */
KDEV_API int kdev_dra_build_devices_opts(const struct kdev_nvidia_gpus *gpus,
                                         const struct kdev_dra_health *health,
                                         const struct kdev_dra_device_options *opts,
                                         json_t **devices, struct kdev_err *err);

/* --- dynamic MIG: partitionable devices (KEP-4815) ----------------------
 * NVIDIA's DRA driver's DynamicMIG model (k8s-dra-driver-gpu
 * cmd/gpu-kubelet-plugin, partitions.go; KEP-4815 "Putting it all together
 * for the MIG use-case"): one shared counter set per GPU, the full GPU
 * consuming all of it, each possible MIG placement its profile's share and
 * its memory slices, so that overlapping placements and the full GPU exclude
 * each other in the scheduler. */

/* API limits (k8s.io/api resource/v1 types.go, 1.34 and 1.35). */
#define KDEV_DRA_SLICE_MAX_DEVICES_COUNTERS 64   /* devices per slice when any consumes counters */
#define KDEV_DRA_COUNTER_SET_MAX_COUNTERS 32     /* counters per set / per consumption entry */
#define KDEV_DRA_SLICE_MAX_COUNTER_SETS 8        /* sets per counter slice (1.35+) */
#define KDEV_DRA_SLICE_MAX_COUNTERS_INLINE 32    /* counters summed over a slice's sets (1.34) */
#define KDEV_DRA_SLICE_MAX_CONSUMED_COUNTERS 1024 /* consumed counters per slice (1.34) */
#define KDEV_DRA_DEVICE_MAX_CONSUMPTIONS 2       /* consumesCounters entries per device (1.35+) */

/* Whether Kubernetes 1.<|kube_minor|> wants counter sets in slices of their
 * own (1.35 and later: a slice has devices or sharedCounters, not both) or
 * beside the devices (1.34). */
KDEV_API bool kdev_dra_counters_in_own_slice(unsigned kube_minor);

/* The devices and counter sets of a node whose GPUs are partitionable
 * (dynamic MIG). A GPU record without placements (nvidia/gpus.h
 * n_placements 0) is published as kdev_dra_build_devices_opts does (whole, or
 * its static MIG devices); one with placements, whatever its MIG mode and
 * existing MIG devices, as
 *   - a counter set "gpu-<minor>-counter-set"
 *     (kdev_nvidia_dra_counter_set_name) appended to *counter_sets:
 *     {"name": ..., "counters": {<counter>: {"value": <quantity>}}} with the
 *     counters (DNS-label forms of the capacity names)
 *       memory          the GPU's memory_bytes (else the largest placement's)
 *       multiprocessors the GPU's multiprocessors (else the largest placement's)
 *       copy-engines, decoders, encoders, jpeg-engines, ofa-engines
 *                       the largest count of any placement
 *     each left out when 0, and memory-slice-0 .. memory-slice-<N-1> = 1,
 *     N the GPU's memory_slices (0: the end of its last placement);
 *   - the full GPU device, as kdev_dra_build_devices publishes it (never
 *     shareable), with "consumesCounters": [{"counterSet": <set>,
 *     "counters": <every counter of the set at its value>}];
 *   - one device per placement, in record order, named by its dra_name,
 *     with the attributes and capacity of kdev's static MIG devices but no
 *     uuid (the GPU instance does not exist until a claim is prepared):
 *     type "mig", parentUUID, profile, the parent's common attributes,
 *     capacity memory, multiprocessors (when > 0), copyEngines, decoders,
 *     encoders, jpegEngines, ofaEngines, memorySlice<start..start+size-1> =
 *     1; and "consumesCounters": [{"counterSet": <set>, "counters": its
 *     memory, multiprocessors and engines (those > 0 and in the set) and
 *     memory-slice-<i> = 1 for i in [start, start + size)}].
 * A faulted or unhealthy GPU (|health|) publishes none of it. With |opts|
 * shareable_gpus, GPUs with placements are still published whole-exclusive.
 * *devices and *counter_sets receive new JSON arrays (caller json_decref's).
 * Returns the number of devices, or with |err|: kdev_dra_build_devices'
 * errors; -EINVAL "GPU <index>: placement <name> ends past memory slice <N>",
 * "GPU <index>: a MIG placement has no valid device name" (the errno of its
 * dra_name_error); -E2BIG "GPU <index>: <c> counters exceed 32 per counter
 * set". */
KDEV_API int kdev_dra_build_partitionable(const struct kdev_nvidia_gpus *gpus,
                                          const struct kdev_dra_health *health,
                                          const struct kdev_dra_device_options *opts,
                                          json_t **devices, json_t **counter_sets,
                                          struct kdev_err *err);

/* What the pool should look like. */
struct kdev_dra_pool {
        const char *driver;       /* NULL: KDEV_DRA_DEFAULT_DRIVER */
        const char *node;         /* node name = pool name = spec.nodeName; required */
        /* Owner reference (kdev_kube_node_owner_ref) put on every slice; NULL:
         * kdev_dra_slices_reconcile GETs the Node each time for it (-ENOENT
         * when the Node does not exist). */
        const json_t *owner_ref;
        size_t max_per_slice;     /* 0: KDEV_DRA_SLICE_MAX_DEVICES (larger values too) */
        /* Dynamic MIG (KEP-4815): the counter sets of the pool
         * (kdev_dra_build_partitionable's *counter_sets; NULL or empty:
         * none), and where they go: true (Kubernetes 1.35+,
         * kdev_dra_counters_in_own_slice) in slices of their own, false
         * (1.34) in the slice of the devices that consume them. */
        const json_t *shared_counters;
        bool counters_in_own_slice;
};

/* Splits |devices| (a JSON array, v1 devices) into the specs of the pool's
 * slices at |generation|: ceil(n / max_per_slice) specs (one with no devices
 * when |devices| is empty), each {driver, nodeName, pool{name, generation,
 * resourceSliceCount}, devices}, devices in order. *specs receives a new
 * JSON array. Returns the number of specs, -EINVAL (no node) or -ENOMEM.
 *
 * Partitionable devices (KEP-4815; API limits of k8s.io/api resource/v1
 * types.go and validation, dra-control-plane §5.1): when any device has
 * consumesCounters, at most KDEV_DRA_SLICE_MAX_DEVICES_COUNTERS (64)
 * devices go in a slice (the 1.35+ rule, kept on 1.34 too). With
 * |pool|->shared_counters:
 *   counters_in_own_slice (1.35+): first ceil(sets / 8) slices
 *     {driver, nodeName, pool, sharedCounters: [<= 8 sets]} in set order,
 *     then the devices in slices of at most 64 (none when there are no
 *     devices); resourceSliceCount counts both kinds.
 *   otherwise (1.34): each counter set travels with the devices that
 *     consume it (a run of consecutive devices whose consumesCounters name
 *     it; a device that consumes none is a run of its own; a set no device
 *     consumes travels alone, after them), and runs are packed in order into
 *     slices {..., sharedCounters, devices} holding at most 64 devices,
 *     KDEV_DRA_SLICE_MAX_COUNTERS_INLINE (32) counters summed over their
 *     sets and KDEV_DRA_SLICE_MAX_CONSUMED_COUNTERS (1024) counters summed
 *     over their devices' consumesCounters; a slice without sets has no
 *     sharedCounters key.
 * Further errors: -EINVAL "device <name>: consumes counter set <set>, which
 * the pool does not have" / "... consumes more than one counter set" (1.34
 * only) / "counter set <set>: its devices are not consecutive" (1.34 only);
 * -E2BIG "counter set <set>: <n> devices and <c> counters do not fit in one
 * ResourceSlice" (1.34). */
KDEV_API int kdev_dra_split(const struct kdev_dra_pool *pool, const json_t *devices, long long generation,
                   json_t **specs, struct kdev_err *err);

/* What one reconcile did. */
struct kdev_dra_reconcile_result {
        long long generation;     /* the pool's generation afterwards */
        unsigned slices;          /* slices of the pool afterwards */
        unsigned created, updated, deleted;
        bool changed;             /* anything written */
};

/* Makes the API server hold exactly the pool |pool| with |devices|:
 *   1. LISTs the slices with spec.nodeName=<node>, spec.driver=<driver>
 *      (slices of another pool name are left alone);
 *   2. when the existing slices already equal the desired ones (same device
 *      chunks, same resourceSliceCount and generation, nodeName and owner
 *      reference present), writes nothing;
 *   3. otherwise the generation becomes (highest existing generation) + 1
 *      (1 for a new pool); existing slices are reused for the desired chunks
 *      (one already holding a chunk's devices first) and PUT through
 *      kdev_kube_update_retry (409 Conflict: re-read and retry; a slice
 *      deleted meanwhile is created instead), missing ones POSTed with
 *      generateName "<node>-<driver>-", and then the remaining slices of the
 *      pool are DELETEd (uid precondition; already gone is fine).
 * Works with v1 and v1beta1 clients (shapes converted by kdev_kube).
 * |result| may be NULL. Returns 0 or the first failing request's negative
 * errno (see kube.h: -ECONNREFUSED when the API server is down, -ESTALE when
 * conflicts persist, …), with |err| naming the step; a failed reconcile may
 * leave the pool half-written at the new generation and is simply called
 * again later. */
KDEV_API int kdev_dra_slices_reconcile(struct kdev_kube *k, const struct kdev_dra_pool *pool,
                              const json_t *devices, struct kdev_dra_reconcile_result *result,
                              struct kdev_err *err);

/* The Kubernetes quantity text of |bytes| (canonical binary-SI form: the
 * largest of Ki, Mi, Gi, Ti, Pi, Ei that divides it exactly, else plain
 * digits: 85899345920 -> "80Gi", 1000 -> "1000"). |buf| holds >= 24 bytes. */
KDEV_API void kdev_dra_quantity(unsigned long long bytes, char *buf, size_t size);

/* NVML's driver version text as a semantic version ("550.90.07" ->
 * "550.90.7", "535.104" -> "535.104.0"). Returns 0, or -EINVAL when |in| is
 * not 1-3 dot-separated decimal numbers. */
KDEV_API int kdev_dra_semver(const char *in, char *buf, size_t size);

#endif /* KDEV_DRA_SLICES_H */
