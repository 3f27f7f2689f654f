/* The DRA structured allocator, offline: which devices of a node's
 * published ResourceSlices a pending ResourceClaim gets, decided as
 * kube-scheduler's DynamicResources plugin decides it, and why a claim
 * cannot be allocated.
 *
 * It follows k8s.io/dynamic-resource-allocation structured/ (the
 * "incubating" allocator, which default clusters of Kubernetes 1.34 to 1.36
 * run: allocator_incubating.go, pools_incubating.go, constraint.go,
 * consumable_capacity.go) and the resource.k8s.io/v1 types
 * (k8s.io/api resource/v1/types.go):
 *   - pools: the slices of the node (spec.nodeName), of all nodes
 *     (spec.allNodes), whose spec.nodeSelector matches the node's labels,
 *     or with perDeviceNodeSelection a device of the node; per (driver,
 *     pool name) only the highest pool.generation; a pool with fewer slices
 *     than resourceSliceCount is incomplete, one with duplicate device or
 *     counter-set names or a consumesCounters entry naming a missing counter
 *     is invalid (both skipped by ExactCount requests and fatal for
 *     allocationMode All); pools ordered by driver then pool name, slices by
 *     name, devices as listed;
 *   - requests: `exactly` (count, allocationMode All, adminAccess,
 *     tolerations, capacity.requests) and `firstAvailable` (sub-requests
 *     tried in order, the first that leads to a full solution wins; results
 *     named <request>/<sub-request>);
 *   - per candidate device, in order: in use (allocated to another claim or
 *     picked for this one; adminAccess only checks this claim's picks), the
 *     DeviceClass's CEL selectors then the request's (results cached per
 *     device and request for the call), consumable capacity
 *     (allowMultipleAllocations, requestPolicy default / validRange /
 *     validValues, the capacity already consumed by other claims' shares),
 *     shared counters of partitionable devices (sharedCounters minus the
 *     consumesCounters of every allocated device of the pool), device taints
 *     (NoSchedule / NoExecute unless tolerated) and the claim's constraints
 *     (matchAttribute, distinctAttribute);
 *   - depth-first, first fit, combinations within a request, backtracking
 *     across requests; the first full solution is the answer (no scoring).
 *
 * What it writes is the claim's status.allocation as the scheduler writes
 * it (AllocationResult: devices.results in allocation order, devices.config
 * with the classes' configs (source FromClass) then the claim's (FromClaim),
 * requests cleared where a config covers every request, and the node
 * selector of node-local devices). Differences from kube-scheduler: README
 * "Structured allocator" (one claim at a time, shareID, what is not
 * implemented).
 *
 * Inputs and outputs are JSON (jansson) objects in the resource.k8s.io/v1
 * shape; the allocator keeps references to them. Not thread-safe: one
 * allocator per thread. */
#ifndef KDEV_SCHED_ALLOCATOR_H
#define KDEV_SCHED_ALLOCATOR_H

#include <jansson.h>

#include "common/err.h"
#include "common/export.h"

/* Kubernetes' limit on the devices of one claim (resource/v1
 * AllocationResultsMaxSize). */
#define KDEV_SCHED_MAX_RESULTS 32

/* The most candidate checks one claim's search makes before it gives up
 * (-ETIME): the search is exhaustive, and a claim whose requests each fit
 * alone but not together can have more combinations than can be tried
 * (kube-scheduler bounds the same search by time, its DynamicResources
 * filter timeout, DRASchedulerFilterTimeout, 10 s). A fraction of a second
 * in a release build. */
#define KDEV_SCHED_MAX_STEPS 2000000ULL

/* What an allocator decides over. Arrays hold v1-shaped objects; NULL
 * means an empty array. */
struct kdev_sched_input {
        const char *node;          /* node name (required) */
        const json_t *node_labels; /* the Node's metadata.labels, for
                                    * slices with a nodeSelector; may be NULL */
        const json_t *slices;      /* ResourceSlices (all of the cluster's
                                    * or the node's and the allNodes ones) */
        const json_t *classes;     /* DeviceClasses */
        const json_t *allocated;   /* ResourceClaims; those with
                                    * status.allocation make up the
                                    * allocated state: their devices in use,
                                    * their shares' consumedCapacity, the
                                    * counters their devices consume
                                    * (adminAccess results are not counted,
                                    * as the scheduler's allocateddevices.go) */
        unsigned long long max_steps; /* candidate checks one claim's search
                                       * may make; 0: KDEV_SCHED_MAX_STEPS */
};

struct kdev_sched;

/* Builds an allocator over |in| (copied references; the strings of |in|
 * need not outlive the call, the JSON objects are kept by reference).
 * Returns 0 and *|out| (free with kdev_sched_free), or -EINVAL with |err|:
 * `node name is required`, `ResourceSlice <name>: spec.driver is not a
 * string` and the like for malformed objects, `class <c>: selector #<i>:
 * CEL compile error: <error>` for a DeviceClass selector that does not
 * compile; -ENOMEM. */
KDEV_API int kdev_sched_new(const struct kdev_sched_input *in, struct kdev_sched **out,
                            struct kdev_err *err);

/* Frees |s| (NULL is fine). */
KDEV_API void kdev_sched_free(struct kdev_sched *s);

/* Allocates devices for |claim| (a v1 ResourceClaim without
 * status.allocation). The claims of one allocator are allocated one after
 * the other: a claim's devices count as allocated for the next calls.
 *
 * Returns
 *   1  allocated: *|allocation| receives the AllocationResult (new
 *      reference) to store in the claim's status.allocation;
 *   0  cannot be allocated on this node: *|reasons| receives an array of
 *      strings (new reference), one per request that cannot be satisfied (or
 *      one for the claim when only the combination fails), e.g.
 *      `request gpu: no device of class gpu.nvidia.com matches
 *      `device.attributes["gpu.nvidia.com"].productName == "H200"`: 8
 *      devices checked, 8 rejected — productName is "NVIDIA H100 80GB HBM3"`
 *      (README "Structured allocator" lists the forms); nothing is recorded
 *      as allocated;
 *   <0 the claim or the state is invalid, as the scheduler reports it (fatal
 *      for the pod's scheduling attempt), with |err| in Kubernetes' words:
 *      `claim <ns>/<name>: selector #<i> on device <driver>/<pool>/<device>:
 *      CEL runtime error: <error>` (-EINVAL; `no such key:` errors carry
 *      Kubernetes' hint), `claim <ns>/<name>, request <r>: missing device
 *      class name (unsupported request type?)`, `... unsupported count mode
 *      <m>`, `claim <ns>/<name>: number of requested devices <k> exceeds the
 *      claim limit of 32`, `claim <ns>/<name>, constraint #<i>: empty
 *      constraint (unsupported constraint type?)`, `claim <ns>/<name>,
 *      request <r>: asks for all devices, but resource pool <driver>/<pool>
 *      is currently being updated`; -ETIME `claim <ns>/<name>: allocation
 *      stopped after <max_steps> device checks without a solution (...)`;
 *      -ENOMEM.
 * |allocation| and |reasons| are set to NULL first; either may be NULL. */
KDEV_API int kdev_sched_allocate(struct kdev_sched *s, const json_t *claim, json_t **allocation,
                                 json_t **reasons, struct kdev_err *err);

#endif /* KDEV_SCHED_ALLOCATOR_H */
