/* The driver's part of a ResourceClaim's status: status.devices
 * (resource.k8s.io v1 ResourceClaimStatus.devices, AllocatedDeviceStatus;
 * v1beta1 and v1beta2 have the same shape). Entries are owned by their
 * driver (the API's rule), keyed by driver, pool, device and, for a share
 * of a device with allowMultipleAllocations, shareID; the API server keeps
 * the field with the DRAResourceClaimDeviceStatus feature gate (beta and on
 * by default from Kubernetes 1.33) and drops it without.
 *
 * kdev-dra-plugin writes, after a claim is prepared, one entry per prepared
 * device of its pool:
 *
 *   {"driver": D, "pool": P, "device": NAME, ["shareID": ID,]
 *    "conditions": [{"type": "Ready", "status": "True", "reason": "Prepared",
 *                    "message": "prepared as CDI device <id>[, <id>...]",
 *                    "lastTransitionTime": T}],
 *    "data": {"uuid": "GPU-..." or "MIG-..."[, "parentUUID": "GPU-..."]}}
 *
 * ("Ready": the device is configured as the class and claim configs say,
 * the condition the API documents), and after it is unprepared none. Entries
 * of other drivers or pools are left as they are. */
#ifndef KDEV_DRA_CLAIM_STATUS_H
#define KDEV_DRA_CLAIM_STATUS_H

#include <jansson.h>
#include <uv.h>

#include "common/err.h"
#include "common/export.h"
#include "kube/kube.h"
#include "nvidia/gpus.h"

/* What one write sets: |devices| the claim's device records (checkpoint.h:
 * pool, device, cdiDeviceIDs, share.shareID for a share, and the uuid and parentUUID that
 * kdev_dra_claim_status_records adds; borrowed) after a prepare, NULL after
 * an unprepare (the driver's entries of |pool| removed); |now| the
 * condition's lastTransitionTime (RFC 3339, "2026-12-03T12:00:00Z"). */
struct kdev_dra_claim_status {
        const char *driver, *pool;
        const json_t *devices;
        const char *now;
};

/* A copy of the device records |devices| (NULL: NULL) with each device's
 * "uuid" (the GPU's or MIG device's) and, for a MIG device, "parentUUID"
 * from |g| (may be NULL: none), for kdev_dra_claim_status_mutate on another
 * thread. New reference; NULL when out of memory. */
KDEV_API json_t *kdev_dra_claim_status_records(const json_t *devices,
                                               const struct kdev_nvidia_gpus *g);

/* kdev_kube_mutate_fn for PUT .../resourceclaims/NAME/status: replaces, in
 * |claim| (the object read, any resource.k8s.io version), the status.devices
 * entries of |s|'s driver and pool with the new ones (appended after the
 * others, in record order; an entry that is the same as before but for its
 * condition's lastTransitionTime keeps the old time); status.devices is
 * removed when it ends up empty. Returns 0 (write), KDEV_KUBE_UNCHANGED
 * (1: nothing changed) or -EINVAL ("claim has no status" when it has none to
 * write into after a prepare: not allocated) / -ENOMEM with |err|. */
KDEV_API int kdev_dra_claim_status_mutate(json_t *claim, void *s, struct kdev_err *err);

/* --- the writer ---------------------------------------------------------- */

/* Writes the status of prepared and unprepared claims to the API server,
 * one claim at a time on libuv's thread pool (GET, mutate, PUT on
 * .../namespaces/NS/resourceclaims/NAME/status, retried on conflicts:
 * kdev_kube_update_retry), never on the loop thread and never delaying a
 * NodePrepareResources answer: a write is best effort after the answer. A
 * claim gone (404) is not an error; any other failure goes to |on_error|. A
 * claim queued again before its write started is written once, with the
 * newest devices. */
struct kdev_dra_status_writer;

/* A failed write of claim |ns|/|name|: |msg| the error (borrowed). */
typedef void (*kdev_dra_status_error_fn)(void *arg, const char *ns, const char *name,
                                         const char *msg);

/* A writer on |loop| through |kube| (owned from now on, freed with the
 * writer; used only by its jobs) for driver |driver| and pool |pool|
 * (copied). NULL when out of memory (|kube| then freed). */
KDEV_API struct kdev_dra_status_writer *kdev_dra_status_writer_new(
        uv_loop_t *loop, struct kdev_kube *kube, const char *driver, const char *pool,
        kdev_dra_status_error_fn on_error, void *arg);

/* Queues the write of claim |ns|/|name|: |records| (device records with
 * their UUIDs, kdev_dra_claim_status_records; the reference is taken) after a
 * prepare, NULL after an unprepare. Loop thread. */
KDEV_API void kdev_dra_status_writer_claim(struct kdev_dra_status_writer *w, const char *ns,
                                           const char *name, json_t *records);

/* Drops the queue, aborts the write in flight (its requests fail within
 * about a second) and frees the writer once it is done; the loop runs until
 * then. NULL-safe. */
KDEV_API void kdev_dra_status_writer_stop(struct kdev_dra_status_writer *w);

#endif /* KDEV_DRA_CLAIM_STATUS_H */
