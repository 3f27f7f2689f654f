/* kdev device model: logical devices grouped into resources, and the Allocate
 * payload for them. Backends (generic /dev globs now, NVML later) build
 * resources; the device plugin runtime serves them without knowing where they
 * came from.
 */
#ifndef KDEV_MODEL_MODEL_H
#define KDEV_MODEL_MODEL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/err.h"
#include "common/export.h"
#include "model/edits.h"

/* Device ID length limit (Device.ID in the v1beta1 proto: "Max length of this
 * field is 63 characters"). */
#define KDEV_DEVICE_ID_MAX 63

/* One device node handed to a container (v1beta1 DeviceSpec). */
struct kdev_device_spec {
        char *container_path; /* path inside the container */
        char *host_path;      /* real node on the host (symlinks resolved) */
        char *permissions;    /* cgroup permissions, any of "rwm" */
};

struct kdev_physical;

/* One logical device as advertised in ListAndWatch. */
struct kdev_device {
        char *id;                       /* device ID, unique within its resource */
        bool healthy;                   /* "Healthy" / "Unhealthy" */
        int numa_node;                  /* NUMA node, or -1 for no topology */
        struct kdev_device_spec *specs; /* device nodes given on Allocate */
        size_t n_specs;
        void *data;                     /* backend's, borrowed: owned by the resource's ops_data */
        /* The physical device it is made of (a record of the resource set
         * that holds this device's resource, borrowed), or NULL: none. */
        struct kdev_physical *physical;
};

/* Where a logical device sits in its resource set: resources[resource].
 * devices[device]. */
struct kdev_device_ref {
        size_t resource;
        size_t device;
};

/* One physical device: what a backend found on the node (a whole GPU, a MIG
 * device, one group of /dev nodes), which one or more logical devices
 * (replicas) are made of. Health is physical: a fault of the physical device
 * is a fault of every logical device on it (kdev_physical_set_health). */
struct kdev_physical {
        char *id;         /* unique within its set: GPU or MIG UUID, "<resource>/<set>" for /dev */
        bool healthy;
        int numa_node;    /* NUMA node, or -1 for no topology */
        void *data;       /* backend's; freed with free_data (when set) by the set */
        void (*free_data)(void *data);
        size_t index;     /* its index in the set's physical array */
        /* Set by kdev_resource_set_link(): the logical devices made of it, in
         * resource order, then device order. Owned. */
        struct kdev_device_ref *logical;
        size_t n_logical;
};

struct kdev_resource;
struct kdev_id_index; /* the model's hash index of device IDs (model/lookup_internal.h) */

/* Backend hooks of a resource (all optional). */
struct kdev_resource_ops {
        /* Adds the backend's part of the container edits for one container
         * request: |devs| (|n| devices, validated and in request order) and
         * |out|, whose nodes already hold the device nodes of |devs|
         * (kdev_resource_edits). Uses the kdev_edits_* functions of
         * model/edits.h. Returns 0 or a negative errno with |err|; |out| is
         * then cleared by the caller. */
        int (*allocate)(void *data, const struct kdev_resource *r,
                        const struct kdev_device *const *devs, size_t n,
                        struct kdev_container_edits *out, struct kdev_err *err);
        /* Chooses the answer of one GetPreferredAllocation container request,
         * called by kdev_resource_preferred() once the request is valid:
         * |avail| holds |n_avail| distinct devices of |r| in device-array
         * order, |must| the |n_must| distinct must-include devices (all in
         * |avail|, device-array order), and n_must <= |size| <= n_avail.
         * Writes exactly |size| distinct devices of |avail|, every |must|
         * device among them, into |out| (room for |size|), in the order to
         * report. Must be deterministic in the sets, not their order. Returns
         * 0 or a negative errno with |err| (the request then fails). When the
         * hook is NULL the generic NUMA ranking is used. */
        int (*preferred)(void *data, const struct kdev_resource *r,
                         const struct kdev_device *const *avail, size_t n_avail,
                         const struct kdev_device *const *must, size_t n_must, size_t size,
                         const struct kdev_device **out, struct kdev_err *err);
        /* Frees |data| when the resource is cleared. */
        void (*free)(void *data);
};

/* A resource: one extended resource name and its devices. */
struct kdev_resource {
        char *name; /* extended resource name, e.g. "example.com/fuse" (common/resource_name.h) */
        struct kdev_device *devices;
        size_t n_devices;
        const struct kdev_resource_ops *ops; /* NULL: device nodes only */
        void *ops_data;                      /* owned; released by ops->free */
        struct kdev_id_index *index;         /* owned; kdev_resource_index(), NULL: none */
};

struct kdev_physical_index; /* the model's hash index of physical IDs */

/* A set of resources, as a backend returns it, and the physical devices that
 * their logical devices are made of. */
struct kdev_resource_set {
        struct kdev_resource *resources;
        size_t n_resources;
        struct kdev_physical **physical; /* owned, each record owned */
        size_t n_physical;
        struct kdev_physical_index *physical_index; /* owned; kdev_resource_set_link() */
};

/* Frees everything inside |set| (not |set| itself), the physical devices and
 * their data included. NULL-safe; leaves |set| empty. */
KDEV_API void kdev_resource_set_clear(struct kdev_resource_set *set);

/* Appends a physical device to |set|: a copy of |id| (not NULL), healthy,
 * |numa_node| (-1: none), |data| owned by the set when |free_data| is set
 * (freed with it by kdev_resource_set_clear). The caller points logical
 * devices at the returned record (kdev_device.physical), then calls
 * kdev_resource_set_link(). IDs are checked for repeats by the link. Returns
 * the record, or NULL on allocation failure (|data| is then freed with
 * |free_data|). */
KDEV_API struct kdev_physical *kdev_physical_add(struct kdev_resource_set *set, const char *id,
                                                 int numa_node, void *data,
                                                 void (*free_data)(void *data));

/* Frees the physical devices of |set| from index |from| on (those appended
 * since the set had |from|), for a backend undoing a failed build; no logical
 * device may still point at them. Drops the physical index (link again). */
KDEV_API void kdev_physical_truncate(struct kdev_resource_set *set, size_t from);

/* Frees the physical devices of |set| for which |drop|(|arg|, record)
 * returns true, keeping the others in their order (their index updated); no
 * logical device may still point at a dropped one. For a backend whose
 * physical devices come and go while serving (the generic backend's live
 * inventory, src/generic/live.c). O(physical devices). Drops the physical
 * index (link again). Returns the number freed. */
KDEV_API size_t kdev_physical_remove_if(struct kdev_resource_set *set,
                                        bool (*drop)(void *arg, const struct kdev_physical *p),
                                        void *arg);

/* Moves every physical device of |src| to the end of |dst| (the records keep
 * their addresses, so logical devices moved from |src| to |dst| keep their
 * pointers); |src| is left without physical devices. Drops both physical
 * indexes (link again). Returns 0 or -ENOMEM (nothing moved). */
KDEV_API int kdev_physical_move(struct kdev_resource_set *dst, struct kdev_resource_set *src);

/* (Re)builds the physical -> logical mapping of |set| (kdev_physical.logical,
 * in resource order, then device order) and the hash index of physical IDs
 * (kdev_physical_find). Call it whenever a device's physical pointer, the
 * devices of a resource, the resources or the physical devices change.
 * O(devices + physical devices). Returns 0, or with |err| (may be NULL; the
 * mapping is then empty and lookups linear): -EEXIST "physical device <id>
 * appears twice", -EINVAL "device <id> of <resource> points to a physical
 * device outside the set", -ENOMEM. */
KDEV_API int kdev_resource_set_link(struct kdev_resource_set *set, struct kdev_err *err);

/* The physical device of |set| with ID |id|, or NULL (also for NULL
 * arguments). O(1) on average after kdev_resource_set_link(), linear before. */
KDEV_API struct kdev_physical *kdev_physical_find(const struct kdev_resource_set *set,
                                                  const char *id);

/* Propagates the health of physical device |p| (of |set|, linked) to the
 * logical devices made of it: sets p->healthy and the healthy flag of every
 * device in p->logical to |healthy|. For each resource with a device whose
 * flag changed, changed[resource index] is set to true (|changed| may be
 * NULL; otherwise it has set->n_resources entries; other entries are left
 * as they are). Returns the number of logical devices whose flag changed. */
KDEV_API size_t kdev_physical_set_health(struct kdev_resource_set *set, struct kdev_physical *p,
                                         bool healthy, bool *changed);

/* A physical event: the health of one physical device changed, as a health
 * source (NVIDIA's XID monitor, src/nvidia/health.h) reports it on the loop
 * thread. The model applies it (kdev_physical_apply); a front end that
 * subscribes to the source receives the events of each batch as they were
 * applied. Strings are borrowed for the call that carries the event. */
struct kdev_physical_event {
        const char *id;          /* kdev_physical.id: GPU or MIG UUID, "<resource>/<set>" */
        bool healthy;            /* false: a fault, true: a recovery */
        unsigned long long xid;  /* NVIDIA XID of the fault (of a recovery: the last
                                  * critical one); 0: none (a registration or wait
                                  * failure, a non-NVIDIA source) */
        const char *reason;      /* why, as logged; never NULL */
};

/* Receives one batch of physical events (|n| >= 1, in the order applied), on
 * the loop thread, after the model applied them (kdev_physical.healthy and
 * the logical devices' flags are current) and before the ListAndWatch
 * notifies of the batch. */
typedef void (*kdev_physical_events_fn)(void *arg, const struct kdev_physical_event *ev,
                                        size_t n);

/* Applies |ev| to |set| (linked): kdev_physical_set_health() of the physical
 * device with ID ev->id to ev->healthy, |changed| as there. Returns the
 * number of logical devices whose flag changed; 0 also for an ID that is not
 * in |set| (nothing changes) and for NULL |set| or |ev|. */
KDEV_API size_t kdev_physical_apply(struct kdev_resource_set *set,
                                    const struct kdev_physical_event *ev, bool *changed);

/* Returns the device of |r| with ID |id| (the first one when an ID repeats),
 * or NULL when there is none or |r| or |id| is NULL; devices whose ID is NULL
 * are never found. O(1) on average once kdev_resource_index() has indexed
 * r->devices; O(n) (a linear search, same answer) while the index is missing
 * or was built for another device array. */
KDEV_API const struct kdev_device *kdev_resource_find(const struct kdev_resource *r,
                                                      const char *id);

/* (Re)builds the hash index of |r|'s device IDs that kdev_resource_find()
 * (and so Allocate, GetPreferredAllocation and PreStartContainer) uses. Call
 * it whenever r->devices or r->n_devices is set or changed, or a device's ID
 * is; the index borrows r->devices and is freed by kdev_resource_clear().
 * Costs O(n) time and about 16 bytes per device. Returns 0, or -ENOMEM (|r|
 * then has no index and lookups stay linear, with the same answers). */
KDEV_API int kdev_resource_index(struct kdev_resource *r);

/* A 32-bit hash of the NUL-terminated string |s| (not NULL), the hash of the
 * model's ID index, for other per-request hash sets too (all of its bits
 * depend on every byte of |s|). Not for adversarial keys beyond a request's
 * own size. */
KDEV_API uint32_t kdev_str_hash(const char *s);

/* kdev_resource_index() on every resource of |set|. Returns 0 or -ENOMEM
 * (resources indexed before the failure keep their index). */
KDEV_API int kdev_resource_set_index(struct kdev_resource_set *set);

/* Frees everything inside |r| (not |r| itself). NULL-safe; leaves |r| empty. */
KDEV_API void kdev_resource_clear(struct kdev_resource *r);

/* Frees everything inside |d| (not |d| itself). NULL-safe; leaves |d| empty. */
KDEV_API void kdev_device_clear(struct kdev_device *d);

/* Compares two device IDs in natural order: runs of decimal digits compare by
 * numeric value ("ttyS2" < "ttyS10", "null::2" < "null::10"), everything else
 * byte-wise; IDs equal in that order fall back to strcmp, so this is a total
 * order consistent with equality. Returns <0, 0 or >0 like strcmp. */
KDEV_API int kdev_id_natural_cmp(const char *a, const char *b);

/* Builds the container edits for one container request (v1beta1
 * ContainerAllocateRequest.devices_ids; the device plugin turns them into a
 * ContainerAllocateResponse with kdev_plugin_allocate, plugin/allocate.h).
 *
 * |ids| holds |n_ids| device IDs of resource |r|. On success |out| (which
 * must be empty: zeroed or cleared) gets one node per distinct container path
 * of the requested devices' nodes, in request order (device order, then node
 * order); a container path seen again is not repeated (kubelet merges by
 * container_path too, pod_devices.go). When two requested devices give the
 * same container path from the same host path their permissions are merged
 * ("rw" + "m" -> "rwm"; a NULL permissions field counts as "rw"). After the
 * nodes, r->ops->allocate (when set) adds the backend's part (env, mounts,
 * annotations, CDI devices, more nodes).
 *
 * The new strings belong to |out|; release them with
 * kdev_container_edits_clear().
 *
 * Returns 0, or -EINVAL (|out| empty) with |err| naming the device and the
 * resource when the request is empty, an ID is unknown
 * (`unknown device "x" for resource example.com/fuse`), an ID is repeated, a
 * device is unhealthy (the v1beta1 proto asks plugins to fail Allocate for
 * devices that cannot be allocated), or two devices map one container path to
 * different host paths; -ENOMEM on allocation failure; the hook's error when
 * it fails (|out| is then cleared). */
KDEV_API int kdev_resource_edits(const struct kdev_resource *r, const char *const *ids,
                                 size_t n_ids, struct kdev_container_edits *out,
                                 struct kdev_err *err);

/* Answers one GetPreferredAllocation container request
 * (ContainerPreferredAllocationRequest, see kubelet endpoint.go).
 *
 * |available| (|n_avail| IDs) and |must| (|n_must| IDs) are device IDs of |r|;
 * repeated IDs count once. |size| is the wanted number of devices
 * (allocation_size). The answer is a subset of |available| that contains every
 * ID of |must|, with exactly |size| IDs when |size| <= the number of distinct
 * available IDs, otherwise all of them. It is deterministic: the same sets in
 * any order give the same list. Order and choice: |must| first (natural ID
 * order), then the other available devices ranked by (1) NUMA node among the
 * nodes of |must|'s devices, (2) NUMA node with the most available devices
 * (ties: lower node number; devices with no NUMA node (-1) last), (3) natural
 * ID order (kdev_id_natural_cmp). When r->ops->preferred is set, the valid
 * request goes to that hook instead, which chooses and orders the answer; an
 * answer breaking the rules above (wrong size, repeated or foreign device,
 * missing must-include device) fails with -EPROTO.
 *
 * On success *out is a malloc'ed array of *n_out malloc'ed strings (NULL when
 * *n_out is 0) that the caller frees with kdev_strv_free(). Returns 0, or
 * -EINVAL with |err| naming the ID when an ID is not a device of |r|, an ID of
 * |must| is not in |available|, or |size| is negative or smaller than the
 * number of distinct |must| IDs; -ENOMEM. On error *out is NULL, *n_out 0. */
KDEV_API int kdev_resource_preferred(const struct kdev_resource *r, const char *const *available,
                                     size_t n_avail, const char *const *must, size_t n_must,
                                     int size, char ***out, size_t *n_out, struct kdev_err *err);

/* Frees |n| strings of |v| and |v| itself. NULL-safe. */
KDEV_API void kdev_strv_free(char **v, size_t n);

#endif /* KDEV_MODEL_MODEL_H */
