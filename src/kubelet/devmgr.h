/* kdevctl's model of kubelet's device manager (Kubernetes
 * pkg/kubelet/cm/devicemanager: manager.go, endpoint.go, pod_devices.go,
 * plugin/v1beta1/server.go, topology_hints.go).
 *
 * This part is pure state and decisions: registration checks, device lists
 * from ListAndWatch, capacity, the device choice of an allocation, pod device
 * records, merging of container options, checkpoint writing and restoring.
 * It does no I/O except the checkpoint file; the RPCs (GetDevicePluginOptions,
 * ListAndWatch, GetPreferredAllocation, Allocate, PreStartContainer) are
 * issued by the caller (cmd_kubelet.c), which feeds their results back here.
 *
 * Not modelled: the topology manager (no NUMA alignment: every device is
 * "unaligned", as with kubelet's default topology policy "none"), the
 * 5-minute grace period after which stopped resources are dropped, and
 * kubelet's "sources not ready" path for containers found running after a
 * restart.
 */
#ifndef KDEV_KUBELET_DEVMGR_H
#define KDEV_KUBELET_DEVMGR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <jansson.h>

#include "common/err.h"
#include "common/export.h"
#include "deviceplugin/v1beta1/api.pb-c.h"
#include "kubelet/checkpoint.h"

/* The only API version kubelet accepts (k8s.io/kubelet constants.go). */
#define KDEV_DM_API_VERSION "v1beta1"

/* One device as the last ListAndWatch message described it. */
struct kdev_dm_device {
        char *id;
        bool healthy;   /* health == "Healthy" exactly */
        int64_t *numa;  /* topology NUMA node IDs; none = no topology */
        size_t n_numa;
};

/* One resource (extended resource name) of the device manager. */
struct kdev_dm_resource {
        char *name;
        struct kdev_dm_device *devices; /* last list, in message order */
        size_t n_devices;
        bool known;         /* kubelet's healthyDevices has the name: a list was received,
                             * or the name was restored from the checkpoint */
        bool has_endpoint;  /* an endpoint is recorded (registered or restored) */
        bool stopped;       /* the endpoint is stopped (stream ended, or restored) */
        bool has_options;   /* options known (false for a restored endpoint: opts nil) */
        bool pre_start_required;
        bool get_preferred_available;
        char *endpoint;     /* socket file name given in Register, or NULL */
};

struct kdev_devmgr {
        char *ckpt_path;                 /* NULL: no checkpoint file */
        struct kdev_dm_resource *res;    /* in order of first appearance */
        size_t n_res;
        struct kdev_checkpoint pods;     /* pod device entries (podDevices) */
        char **active;                   /* UIDs of active pods */
        size_t n_active;
};

/* Creates an empty device manager writing its checkpoint to |ckpt_path|
 * (copied; NULL = never write). NULL on allocation failure. Free with
 * kdev_dm_free() (NULL-safe). */
KDEV_API struct kdev_devmgr *kdev_dm_new(const char *ckpt_path);
KDEV_API void kdev_dm_free(struct kdev_devmgr *dm);

/* kubelet's Register checks, in its order (server.go): |version| must be
 * "v1beta1", else -EINVAL with `requested API version "<v>" is not supported
 * by kubelet. Supported version is ["v1beta1"]`; |name| must be an extended
 * resource name (kdev_resource_name_check, common/resource_name.h), else
 * -EINVAL with `the ResourceName "<name>" is invalid`. Returns 0 when both pass. */
KDEV_API int kdev_dm_check_register(const char *version, const char *name, struct kdev_err *err);

/* Returns the resource |name| or NULL. */
KDEV_API struct kdev_dm_resource *kdev_dm_find(struct kdev_devmgr *dm, const char *name);

/* Records the endpoint of |name| after a successful Register (PluginConnected):
 * socket file name |endpoint| (copied) and its options. The device list is
 * kept until the first ListAndWatch message replaces it. Returns the resource
 * or NULL on allocation failure. */
KDEV_API struct kdev_dm_resource *kdev_dm_connect(struct kdev_devmgr *dm, const char *name,
                                                  const char *endpoint, bool pre_start_required,
                                                  bool get_preferred_available);

/* Replaces the device list of |name| with the devices of |msg| (one
 * ListAndWatch message; genericDeviceUpdateCallback) and rewrites the
 * checkpoint. Returns 0, -ENOMEM, or the checkpoint write error (the update
 * itself is kept) with |err| filled. */
KDEV_API int kdev_dm_update(struct kdev_devmgr *dm, const char *name,
                            const V1beta1__ListAndWatchResponse *msg, struct kdev_err *err);

/* The ListAndWatch stream of |name| ended (PluginDisconnected): every device
 * is marked unhealthy and the endpoint stopped. No checkpoint write. */
KDEV_API void kdev_dm_disconnect(struct kdev_devmgr *dm, const char *name);

/* Counts of |r|: capacity = all devices, allocatable = healthy ones (kubelet
 * GetCapacity), allocated = distinct devices held by pod device entries. Any
 * pointer may be NULL. */
KDEV_API void kdev_dm_counts(const struct kdev_devmgr *dm, const struct kdev_dm_resource *r,
                             size_t *capacity, size_t *allocatable, size_t *allocated);

/* Writes the checkpoint (RegisteredDevices = healthy IDs of every known
 * resource, PodDeviceEntries = pod device entries, null when none). No-op
 * when the manager has no checkpoint path. Returns 0 or a negative errno. */
KDEV_API int kdev_dm_write_checkpoint(struct kdev_devmgr *dm, struct kdev_err *err);

/* Simulated kubelet restart: forgets every resource and pod record, then
 * reads the checkpoint like kubelet's readCheckpoint(): pod device entries
 * come back, every resource in RegisteredDevices gets an empty device list and
 * a stopped endpoint without options (capacity 0 until it registers again).
 * Active pods are kept. Returns 0, or the read/verify error (then the state
 * stays empty: kubelet "Continue after failing to read checkpoint file"). */
KDEV_API int kdev_dm_restart(struct kdev_devmgr *dm, struct kdev_err *err);

/* Marks the pod |uid| active or not (kubelet's activePods). */
KDEV_API int kdev_dm_set_active(struct kdev_devmgr *dm, const char *uid, bool active);

/* UpdateAllocatedDevices: drops the pod device entries of pods that are not
 * active. Returns the number of entries dropped. */
KDEV_API size_t kdev_dm_drop_inactive(struct kdev_devmgr *dm);

/* isDevicePluginResource: |name| has a device list or allocated devices. */
KDEV_API bool kdev_dm_is_plugin_resource(const struct kdev_devmgr *dm, const char *name);

/* The device choice for one container and resource (devicesToAllocate). */
struct kdev_dm_pick {
        char *resource;
        size_t required;      /* devices the container asks for */
        size_t needed;        /* devices still missing */
        char **picked;        /* chosen so far, in order */
        size_t n_picked;
        char **available;     /* healthy devices not in use, in device list order */
        size_t n_available;
        bool cached;          /* the container already holds its devices: no Allocate */
        bool want_preferred;  /* call GetPreferredAllocation (see kdev_dm_pick_preferred_req) */
};

/* Starts the choice of |required| devices of |resource| for container
 * |container| of pod |uid|, with |reuse| (may be NULL) the devices of the
 * pod's init containers that may be reused (in order). kubelet's order of
 * checks and its error texts (-EINVAL):
 *   `pod "<uid>" container "<c>" changed request for resource "<r>" from N to M`
 *   `cannot allocate unregistered device <r>`
 *   `no healthy devices present; cannot allocate unhealthy devices <r>`
 *   `previously allocated devices are no longer healthy; cannot allocate unhealthy devices <r>`
 *   `requested number of devices unavailable for <r>. Requested: N, Available: M`
 * On success |pick| says whether the container already holds the devices
 * (cached), whether the choice is complete (needed == 0), or whether a
 * GetPreferredAllocation call should be made before kdev_dm_pick_finish().
 * Free with kdev_dm_pick_clear(). */
KDEV_API int kdev_dm_pick_begin(struct kdev_devmgr *dm, const char *uid, const char *container,
                                const char *resource, size_t required, char *const *reuse,
                                size_t n_reuse, struct kdev_dm_pick *pick, struct kdev_err *err);

/* Fills a GetPreferredAllocation request for |pick| (endpoint.go and manager.go
 * callGetPreferredAllocationIfAvailable): one container
 * request, available = available ∪ picked, must_include = picked,
 * allocation_size = required. The string arrays point into |pick| (valid
 * while it lives); free the request's arrays with
 * kdev_dm_preferred_req_clear(). Returns 0 or -ENOMEM. */
KDEV_API int kdev_dm_pick_preferred_req(const struct kdev_dm_pick *pick,
                                        V1beta1__PreferredAllocationRequest *req,
                                        V1beta1__ContainerPreferredAllocationRequest *creq);
KDEV_API void kdev_dm_preferred_req_clear(V1beta1__PreferredAllocationRequest *req,
                                          V1beta1__ContainerPreferredAllocationRequest *creq);

/* Completes |pick|: takes devices of |preferred| (may be NULL; the plugin's
 * answer) that are available, in their order, then fills from the available
 * devices in list order. Returns 0, or -EINVAL with `unexpectedly allocated
 * less resources than required. Requested: N, Got: M`. */
KDEV_API int kdev_dm_pick_finish(struct kdev_dm_pick *pick, char *const *preferred,
                                 size_t n_preferred, struct kdev_err *err);

KDEV_API void kdev_dm_pick_clear(struct kdev_dm_pick *pick);

/* Records that |container| of pod |uid| got devices |ids| of |resource| with
 * the plugin's answer |resp| (|len| bytes, a packed ContainerAllocateResponse).
 * Devices are filed under their NUMA nodes (-1 without topology), like
 * kubelet. Does not write the checkpoint. Returns 0 or -ENOMEM. */
KDEV_API int kdev_dm_record(struct kdev_devmgr *dm, const char *uid, const char *container,
                            const char *resource, char *const *ids, size_t n_ids,
                            const uint8_t *resp, size_t len);

/* The entry of (|uid|, |container|, |resource|), or NULL. */
KDEV_API const struct kdev_ckpt_entry *kdev_dm_entry(const struct kdev_devmgr *dm, const char *uid,
                                                     const char *container, const char *resource);

/* Distinct device IDs of |e| in NUMA order (kubelet's containerDevices).
 * Returns a malloc'ed array of pointers into |e| (free only the array), its
 * length in |*n|; NULL with *n == 0 when empty or on allocation failure. */
KDEV_API const char **kdev_dm_entry_ids(const struct kdev_ckpt_entry *e, size_t *n);

/* ------------------------------------------------------------------------ */
/* Container run options (pod_devices.go deviceRunContainerOptions)         */
/* ------------------------------------------------------------------------ */

struct kdev_dm_kv {
        char *key;
        char *value;
};

struct kdev_dm_mount {
        char *container_path;
        char *host_path;
        bool read_only;
};

struct kdev_dm_devspec {
        char *container_path;
        char *host_path;
        char *permissions;
};

/* The merged options of one container's allocations. */
struct kdev_dm_opts {
        struct kdev_dm_kv *envs; /* first value of a key wins */
        size_t n_envs;
        struct kdev_dm_mount *mounts; /* keyed by container_path, first wins */
        size_t n_mounts;
        struct kdev_dm_devspec *devices; /* keyed by container_path, first wins */
        size_t n_devices;
        struct kdev_dm_kv *annotations; /* first value of a key wins */
        size_t n_annotations;
        char **cdi; /* CDI device names, de-duplicated */
        size_t n_cdi;
        char **conflicts; /* what was dropped, e.g. `env X: kept "a", dropped "b"` */
        size_t n_conflicts;
};

/* Merges |resp| into |opts| with kubelet's rules (first wins for envs,
 * devices and mounts by container path, annotations; CDI devices de-duplicated
 * by name). Returns 0 or -ENOMEM. */
KDEV_API int kdev_dm_opts_add(struct kdev_dm_opts *opts,
                              const V1beta1__ContainerAllocateResponse *resp);

/* Frees the contents of |opts| and zeroes it. NULL-safe. */
KDEV_API void kdev_dm_opts_clear(struct kdev_dm_opts *opts);

/* Prints |opts| one item a line, each prefixed with |indent|:
 *   env KEY=VALUE                       (sorted by key)
 *   mount CONTAINER_PATH from HOST_PATH (ro|rw)
 *   device CONTAINER_PATH from HOST_PATH (PERMISSIONS)
 *   annotation KEY=VALUE                (sorted by key)
 *   cdi NAME
 *   conflict TEXT
 * Prints nothing when |opts| is empty. */
KDEV_API void kdev_dm_opts_print(FILE *f, const char *indent, const struct kdev_dm_opts *opts);

/* |opts| as a JSON object with proto3 JSON names: envs {}, mounts
 * [{containerPath,hostPath,readOnly}], devices [{containerPath,hostPath,
 * permissions}], annotations {}, cdiDevices [{name}], and conflicts [] when
 * there are any. New reference or NULL on allocation failure. */
KDEV_API json_t *kdev_dm_opts_json(const struct kdev_dm_opts *opts);

#endif /* KDEV_KUBELET_DEVMGR_H */
