/* Extended-resource fit: kube-scheduler's NodeResourcesFit filter for
 * extended resources (device plugin resources such as nvidia.com/gpu),
 * offline, over one node's allocatable resources and pod specs.
 *
 * Follows Kubernetes' pod request computation (component-helpers
 * resource.PodRequests: the sum over containers, init containers as
 * KEP-753 counts them with restartable sidecars, pod overhead), the filter
 * (noderesources/fit.go fitsRequest: `Insufficient <name>` when the request
 * exceeds allocatable less what is already requested; Unschedulable, or
 * UnschedulableAndUnresolvable when it exceeds the node's whole
 * allocatable), the DRA extended-resource delegation (KEP-5004: a name the
 * node does not offer but a DeviceClass maps is DynamicResources' to decide)
 * and the API server's validation of the containers' extended resources
 * (core/validation: integers, requests == limits, a limit required;
 * requests defaulted from limits first, as the core/v1 defaults do).
 * Only extended resources are modelled: cpu, memory, ephemeral-storage,
 * hugepages and the pod count are not checked.
 */
#ifndef KDEV_SCHED_FIT_H
#define KDEV_SCHED_FIT_H

#include <jansson.h>

#include "common/err.h"
#include "common/export.h"

struct kdev_fit_node;

/* A node from |obj|: a Node object (status.allocatable, else
 * status.capacity; nothing requested yet) or the state file of `kdevctl
 * kubelet --state` (`resources[]` with `name`, `allocatable` and
 * `allocated`, the devices pods already hold). Only extended resource
 * names are kept. Returns 0 with *|out| the caller's
 * (kdev_fit_node_free), or -EINVAL with |err| naming the bad field
 * ("status.allocatable[nvidia.com/gpu]: must be an integer", "resources[0].
 * allocatable: must be a non-negative integer", "neither a Node (status.
 * allocatable) nor a kdevctl kubelet state (resources)"). */
KDEV_API int kdev_fit_node_from_json(const json_t *obj, struct kdev_fit_node **out,
                                     struct kdev_err *err);

/* Adds the DeviceClass |obj| (resource.k8s.io): its explicit
 * spec.extendedResourceName and its implicit name
 * deviceclass.resource.kubernetes.io/<class> (KEP-5004) become names DRA
 * may serve on this node. Objects of another kind are ignored (returns 1).
 * Returns 0, 1, or -EINVAL (no metadata.name) / -ENOMEM. */
KDEV_API int kdev_fit_node_add_class(struct kdev_fit_node *node, const json_t *obj,
                                     struct kdev_err *err);

KDEV_API void kdev_fit_node_free(struct kdev_fit_node *node);

/* The node's resources as JSON: {"<name>": {"allocatable": N,
 * "requested": N}} (new reference). */
KDEV_API json_t *kdev_fit_node_json(const struct kdev_fit_node *node);

/* The extended-resource requests of the Pod |pod| after defaulting and
 * validation: *|requests| a new object {"<name>": <int>} of the non-zero
 * pod requests (PodRequests: max(sum over containers + sidecars, max over
 * init containers of their need), plus spec.overhead). When the pod is
 * invalid, returns -EINVAL with *|requests| NULL and *|errors| a new array
 * of the API server's field errors, in the order it reports them
 * (containers, then initContainers; limits, then requests; by resource
 * name):
 *   spec.containers[0].resources.limits[nvidia.com/gpu]: Invalid value: "500m": must be an integer
 *   spec.containers[0].resources.requests[nvidia.com/gpu]: Invalid value: "-1": must be greater than or equal to 0
 *   spec.containers[0].resources.requests: Invalid value: "2": must be equal to nvidia.com/gpu limit of 1
 *   spec.containers[0].resources.limits: Required value: Limit must be set for non overcommitable resources
 *   spec.containers[0].resources.limits[x]: Invalid value: "x": <quantity parse error>
 * (a quantity is printed in its canonical form). Also -EINVAL for a
 * structure that is no pod ("spec.containers: must be an array").
 * Returns 0 with *|errors| NULL otherwise. */
KDEV_API int kdev_fit_pod_requests(const json_t *pod, json_t **requests, json_t **errors);

/* Filters the Pod |pod| against |node| as NodeResourcesFit does (see the
 * file comment). Returns a new object (NULL only without memory):
 *   pod:      "NAMESPACE/NAME"
 *   fits:     true or false
 *   status:   "Success", "Unschedulable", "UnschedulableAndUnresolvable",
 *             or "Invalid" (the API server would refuse the pod)
 *   message:  "" on success; the reasons joined by ", " (each exactly
 *             `Insufficient <name>`, sorted by name), or `Pod "NAME" is
 *             invalid: ERR` / `... is invalid: [ERR, ERR]` as the API server
 *             answers
 *   reasons:  the Insufficient lines; errors: the field errors (Invalid)
 *   requests: the pod's extended-resource requests {"<name>": N}
 *   delegated: names left to DRA's DynamicResources (on the node as 0 and
 *             mapped by a DeviceClass): not decided here
 *   claims:   the pod's spec.resourceClaims names: not decided here
 *             (`kdevctl dra allocate` decides claims)
 * A pod that fits is charged to the node, so pods given in order are placed
 * one after another. */
KDEV_API json_t *kdev_fit_pod(struct kdev_fit_node *node, const json_t *pod);

#endif /* KDEV_SCHED_FIT_H */
