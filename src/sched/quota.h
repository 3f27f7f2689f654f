/* ResourceQuota over extended resources and DRA device classes, checked as
 * the API server's ResourceQuota admission plugin checks a create, offline.
 *
 * Usage, as Kubernetes' quota evaluators count it (pkg/quota/v1/evaluator/
 * core): a Pod charges `pods`, `count/pods` and `requests.<name>` for each
 * extended resource it requests (the pod requests of sched/fit.h, overhead
 * included; a pod in phase Succeeded or Failed charges nothing); a
 * ResourceClaim charges `count/resourceclaims.resource.k8s.io`,
 * `<class>.deviceclass.resource.k8s.io/devices` and
 * `requests.deviceclass.resource.kubernetes.io/<class>` with the devices
 * each request may get (exactly: `count`, default 1; allocationMode All:
 * 32, AllocationResultsMaxSize; a firstAvailable list: per class the most
 * any of its subrequests may get; admin access is not exempt).
 *
 * Admission (apiserver admission/plugin/resourcequota/controller.go): the
 * quotas of the object's namespace, by name; the tracked keys of each are
 * its hard keys the evaluator matches; a quota whose status lacks a used
 * value for a tracked key refuses (`status unknown for quota: NAME,
 * resources: KEYS`); the requested usage is masked by the hard keys and
 * zeros dropped; the first quota where used + requested exceeds hard
 * refuses with `<resource> "NAME" is forbidden: exceeded quota: QUOTA,
 * requested: K=V,..., used: K=V,..., limited: K=V,...` (the exceeded keys,
 * sorted, quantities in canonical form); otherwise every quota is charged.
 * Only the `requests.` form counts extended resources: the API server
 * accepts `limits.nvidia.com/gpu` and a bare `nvidia.com/gpu` as quota keys
 * but no evaluator charges them, so kdev warns about them.
 * Not implemented: quota scopes and scope selectors (refused at load), cpu,
 * memory, storage and object counts other than the ones above (never
 * charged), the pod evaluator's `must specify` constraints for cpu/memory.
 */
#ifndef KDEV_SCHED_QUOTA_H
#define KDEV_SCHED_QUOTA_H

#include <jansson.h>

#include "common/err.h"
#include "common/export.h"

struct kdev_quota_set;

/* An empty set. NULL without memory. */
KDEV_API struct kdev_quota_set *kdev_quota_set_new(void);

KDEV_API void kdev_quota_set_free(struct kdev_quota_set *set);

/* Adds the ResourceQuota |obj| (copied). Its used values come from
 * status.used; a quota with no status at all is taken as the quota
 * controller would first write it: status.hard = spec.hard, every used
 * value 0. Validates as the API server does (core/validation
 * ValidateResourceQuota) and returns -EINVAL with |err| set to its answer:
 *   ResourceQuota "q" is invalid: spec.hard[gpu]: Invalid value: "gpu": must be a standard resource type or fully qualified
 *   ... spec.hard[gpu]: Invalid value: "gpu": must be a standard resource for quota
 *   ... spec.hard[nvidia.com/gpu]: Invalid value: "-1": must be greater than or equal to 0
 *   ... spec.hard[nvidia.com/gpu]: Invalid value: "1500m": must be an integer
 * (several as `[ERR, ERR]`); -ENOTSUP for scopes ("ResourceQuota \"q\":
 * spec.scopes and spec.scopeSelector are not implemented"); -EINVAL for no
 * metadata.name, a spec.hard that is no object, or another kind (`Node "n"
 * is not a ResourceQuota`; an object without `kind` is taken as one). Appends to |warnings| (an
 * array, may be NULL) one line per key that is never charged:
 *   ResourceQuota "q": spec.hard[limits.nvidia.com/gpu] is never charged: quota counts extended resources only as requests.nvidia.com/gpu
 * Returns 0. */
KDEV_API int kdev_quota_set_add(struct kdev_quota_set *set, const json_t *obj, json_t *warnings,
                                struct kdev_err *err);

/* Admits the Pod or ResourceClaim |obj| as a create (see the file comment)
 * and, when allowed, charges it. Returns a new object (NULL only without
 * memory):
 *   kind, object ("NAMESPACE/NAME"), allowed (bool),
 *   message ("" when allowed; the API server's refusal otherwise, or
 *            `Pod "x" is invalid: ...` for a pod validation refuses),
 *   usage   ({"<key>": "<quantity>"}: what the object would charge),
 *   quota   (the name of the refusing quota, when one refused).
 * Another kind: allowed, message "kind K is not counted by kdev's quota
 * check". */
KDEV_API json_t *kdev_quota_admit(struct kdev_quota_set *set, const json_t *obj);

/* The quotas as [{name, namespace, hard: {...}, used: {...}}] after the
 * admissions so far (new reference). */
KDEV_API json_t *kdev_quota_set_json(const struct kdev_quota_set *set);

#endif /* KDEV_SCHED_QUOTA_H */
