/* PodResources v1 client: asks kubelet's PodResources API
 * (v1.PodResourcesLister/List on /var/lib/kubelet/pod-resources/kubelet.sock,
 * k8s.io/kubelet pkg/apis/podresources/v1) which pod holds which device, and
 * turns the answer into a device -> (namespace, pod, container) map: one
 * entry per device-plugin device of a container, one per DRA claim device
 * (ClaimResource) of a container with its CDI device names. What a GPU
 * metrics exporter joins its per-device figures with. */
#ifndef KDEV_PODRES_CLIENT_H
#define KDEV_PODRES_CLIENT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "common/err.h"
#include "common/export.h"
#include "podresources/v1/api.pb-c.h"

/* kubelet's socket (k8s.io/kubelet pkg/apis/podresources: the kubelet root
 * /var/lib/kubelet + "pod-resources/kubelet.sock"). */
#define KDEV_PODRES_SOCKET "/var/lib/kubelet/pod-resources/kubelet.sock"
#define KDEV_PODRES_LIST "/v1.PodResourcesLister/List"
#define KDEV_PODRES_ALLOCATABLE "/v1.PodResourcesLister/GetAllocatableResources"
#define KDEV_PODRES_GET "/v1.PodResourcesLister/Get"

/* One device-plugin device held by one container. kubelet reports a device
 * once per NUMA node (ContainerDevices with that node as topology); the
 * entries are merged here: |numa| lists the nodes in answer order, none when
 * the device has no topology. */
struct kdev_podres_device {
        char *resource;   /* extended resource name, e.g. nvidia.com/gpu */
        char *device_id;  /* device ID as the device plugin listed it */
        int64_t *numa;
        size_t n_numa;
        char *namespace_;
        char *pod;
        char *container;
};

/* One device of a DRA claim (ClaimResource) prepared for one container. */
struct kdev_podres_claim_device {
        char *namespace_;        /* the pod's */
        char *pod;
        char *container;
        char *claim_namespace;
        char *claim_name;
        char *driver;            /* "" when the kubelet left it out */
        char *pool;
        char *device;
        char **cdi_devices;      /* fully-qualified CDI device names */
        size_t n_cdi_devices;
        bool has_share_id;       /* share_id present (proto3 optional) */
        char *share_id;          /* NULL unless has_share_id */
};

struct kdev_podres_map {
        struct kdev_podres_device *devices;      /* pods, containers, devices in answer order */
        size_t n_devices;
        struct kdev_podres_claim_device *claims; /* same order */
        size_t n_claims;
};

/* Builds |*map| (zeroed first; free with kdev_podres_map_clear()) from a List
 * answer |resp|. Device entries repeated for several NUMA nodes of one
 * container are merged (a node is not repeated). A device without a resource
 * name or an empty device ID is skipped. Returns 0 or -ENOMEM (|err| set;
 * |*map| then empty). */
KDEV_API int kdev_podres_map_from_list(const V1__ListPodResourcesResponse *resp,
                                       struct kdev_podres_map *map, struct kdev_err *err);

/* Calls List on the PodResources socket |path| (NULL = KDEV_PODRES_SOCKET),
 * waiting at most |timeout_ms| (0 = no deadline), and builds |*map| from the
 * answer. Returns 0, or a negative errno with |err| set, its message
 * "PodResources List on PATH: ...": -EREMOTEIO for a non-OK gRPC status
 * ("rpc error: code = Unavailable desc = ..." also when nothing listens on
 * the socket), the socket check's errno when PATH is not a Unix socket
 * (-ENOENT \"no such socket PATH\", -ENOTSOCK \"PATH is not a socket (it is a
 * regular file)\", -EACCES), -EBADMSG
 * for an answer that is not a ListPodResourcesResponse, -ENOMEM. Blocking:
 * runs a private loop, so not for a daemon's event loop thread. */
KDEV_API int kdev_podres_list(const char *path, uint64_t timeout_ms, struct kdev_podres_map *map,
                              struct kdev_err *err);

/* The first entry of |map| for device |device_id| of resource |resource|, or
 * NULL. */
KDEV_API const struct kdev_podres_device *kdev_podres_find(const struct kdev_podres_map *map,
                                                           const char *resource,
                                                           const char *device_id);

/* |map| as JSON: {"devices": [{resource, deviceId, numa: [..], namespace,
 * pod, container}], "claims": [{namespace, pod, container, claimNamespace,
 * claimName, driver, pool, device, cdiDevices: [..], shareId?}]} (numa
 * empty for no topology; shareId only when present). New reference; NULL on
 * allocation failure. */
KDEV_API json_t *kdev_podres_map_json(const struct kdev_podres_map *map);

/* Frees everything |map| holds and leaves it empty. NULL-safe. */
KDEV_API void kdev_podres_map_clear(struct kdev_podres_map *map);

#endif /* KDEV_PODRES_CLIENT_H */
