/* kdev device model: the withdrawal rule, one for every backend.
 *
 * A device that left the node (a generic device node deleted, a GPU removed
 * or lost from NVML's list, a MIG device destroyed) is not dropped from its
 * resource at once: it stays listed, Unhealthy, for a grace period counted
 * from the first build or scan that missed it, then it is dropped. Kubelet
 * keeps accounting for a device that a running pod holds for as long as the
 * pod runs (pkg/kubelet/cm/devicemanager: allocated devices stay in its
 * checkpoint; an Unhealthy device only stops being offered), so a device
 * withdrawn at once would let kubelet hand out capacity that a pod still
 * uses; a device back within the grace period (a USB re-plug, an FPGA
 * reprogrammed, a driver reloaded) is the same device, Healthy again, under
 * the same ID.
 *
 * This registry is where that rule lives: it remembers, per (resource name,
 * device ID), when a device was first missed and for how long it may stay.
 * It outlives the resource sets built over it, so that a rebuild of every
 * resource (a configuration reload, a new GPU inventory) neither restarts
 * nor forgets a grace period in progress: the backends ask it whether to
 * keep a device they no longer find, and carry the kept ones into the set
 * they build (the generic backend's live inventory, src/generic/live.h; the
 * NVIDIA rebuild, kdev_nvidia_keep_withdrawn in src/nvidia/resources.h).
 *
 * Times are the caller's monotonic clock in milliseconds (kdev's daemons:
 * uv_now() of their loop). Each entry has an owner (an opaque pointer the
 * caller chooses) so that one backend's sweep never forgets another's
 * entries. Lookups are hashed: O(1) on average per device.
 *
 * Threading: none; use one registry from one thread. */
#ifndef KDEV_MODEL_WITHDRAWN_H
#define KDEV_MODEL_WITHDRAWN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/export.h"

struct kdev_withdrawn;

/* What kdev_withdrawn_miss() decides for a device a build did not find. */
enum kdev_withdrawn_verdict {
        KDEV_WITHDRAWN_NEW,     /* first missed now: keep it, Unhealthy (log it) */
        KDEV_WITHDRAWN_KEPT,    /* still within its grace period: keep it, Unhealthy */
        KDEV_WITHDRAWN_DROPPED, /* its grace period is over: drop it */
};

/* Returns an empty registry, or NULL when out of memory. Free with
 * kdev_withdrawn_free(). */
KDEV_API struct kdev_withdrawn *kdev_withdrawn_new(void);

/* Frees |w| and its entries. NULL-safe. */
KDEV_API void kdev_withdrawn_free(struct kdev_withdrawn *w);

/* A build or scan by |owner| at time |now_ms| did not find device |id| of
 * resource |resource| (both copied), which may stay |grace_ms| after it was
 * first missed. The first miss records it (KDEV_WITHDRAWN_NEW), later ones
 * before |now_ms| reaches first miss + |grace_ms| answer KDEV_WITHDRAWN_KEPT
 * (the grace period is the latest one given: a reload may change it), and
 * the first one at or after it answers KDEV_WITHDRAWN_DROPPED and forgets
 * the device. With a |grace_ms| of 0 the first miss is KDEV_WITHDRAWN_NEW
 * too (the device is reported Unhealthy once, in the update that withdraws
 * it) and it is due at once: the next miss drops it. |round| marks the
 * entry for kdev_withdrawn_sweep(). Out of memory (or a NULL |w|), a device
 * not yet recorded is dropped at once (KDEV_WITHDRAWN_DROPPED). */
KDEV_API enum kdev_withdrawn_verdict kdev_withdrawn_miss(struct kdev_withdrawn *w,
                                                         const void *owner,
                                                         const char *resource, const char *id,
                                                         uint64_t now_ms, uint64_t grace_ms,
                                                         uint64_t round);

/* Device |id| of |resource| is on the node again: forgotten (a later miss
 * starts a new grace period). Returns true when it was recorded. */
KDEV_API bool kdev_withdrawn_back(struct kdev_withdrawn *w, const char *resource, const char *id);

/* Whether device |id| of |resource| is recorded as withdrawn; its first
 * miss (ms) in |*since_ms| when |since_ms| is not NULL. NULL |w|: false. */
KDEV_API bool kdev_withdrawn_has(const struct kdev_withdrawn *w, const char *resource,
                                 const char *id, uint64_t *since_ms);

/* The earliest time (ms) at which a recorded device of |owner| (NULL: any)
 * and of |resource| (NULL: any) is due to be dropped (first miss + grace),
 * or UINT64_MAX when there is none. */
KDEV_API uint64_t kdev_withdrawn_due(const struct kdev_withdrawn *w, const void *owner,
                                     const char *resource);

/* Forgets the entries of |owner| whose last miss was not in |round| (the
 * build of that round found them again, dropped them, or no longer has
 * their resource). Returns the number forgotten. */
KDEV_API size_t kdev_withdrawn_sweep(struct kdev_withdrawn *w, const void *owner,
                                     uint64_t round);

/* Forgets every entry of |resource| (its resource is no longer served).
 * Returns the number forgotten. */
KDEV_API size_t kdev_withdrawn_forget_resource(struct kdev_withdrawn *w, const char *resource);

/* Forgets every entry whose resource |served| (called once per entry)
 * says is no longer served. Returns the number forgotten. */
KDEV_API size_t kdev_withdrawn_retain(struct kdev_withdrawn *w,
                                      bool (*served)(void *arg, const char *resource),
                                      void *arg);

/* The number of devices recorded. */
KDEV_API size_t kdev_withdrawn_count(const struct kdev_withdrawn *w);

#endif /* KDEV_MODEL_WITHDRAWN_H */
