/* kdev device model: logical devices grouped into resources, and the Allocate
 * payload for them. Backends (generic /dev globs now, NVML later) build
 * resources; the device plugin runtime serves them without knowing where they
 * came from.
 */
#ifndef KDEV_MODEL_MODEL_H
#define KDEV_MODEL_MODEL_H

#include <stdbool.h>
#include <stddef.h>

#include "common/err.h"

/* Device ID length limit (Device.ID in the v1beta1 proto: "Max length of this
 * field is 63 characters"). */
#define KDEV_DEVICE_ID_MAX 63

/* One device node handed to a container (v1beta1 DeviceSpec). */
struct kdev_device_spec {
        char *container_path; /* path inside the container */
        char *host_path;      /* real node on the host (symlinks resolved) */
        char *permissions;    /* cgroup permissions, any of "rwm" */
};

/* One logical device as advertised in ListAndWatch. */
struct kdev_device {
        char *id;                       /* device ID, unique within its resource */
        bool healthy;                   /* "Healthy" / "Unhealthy" */
        int numa_node;                  /* NUMA node, or -1 for no topology */
        struct kdev_device_spec *specs; /* device nodes given on Allocate */
        size_t n_specs;
};

/* A resource: one extended resource name and its devices. */
struct kdev_resource {
        char *name; /* extended resource name, e.g. "example.com/fuse" */
        struct kdev_device *devices;
        size_t n_devices;
};

/* A set of resources, as a backend returns it. */
struct kdev_resource_set {
        struct kdev_resource *resources;
        size_t n_resources;
};

/* Frees everything inside |set| (not |set| itself). NULL-safe; leaves |set|
 * empty. */
void kdev_resource_set_clear(struct kdev_resource_set *set);

/* Returns the device of |r| with ID |id|, or NULL. O(n). */
const struct kdev_device *kdev_resource_find(const struct kdev_resource *r, const char *id);

/* Checks |name| with kubelet's extended resource name rules
 * (IsExtendedResourceName, k8s pkg/apis/core/v1/helper): it must contain '/',
 * must not be in the kubernetes.io domain, must not start with "requests.",
 * the prefix must be a DNS-1123 subdomain (<= 253 chars) and the name part a
 * qualified name (<= 63 chars, [A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?).
 * Returns 0, or -EINVAL with |err| saying which rule failed. */
int kdev_resource_name_check(const char *name, struct kdev_err *err);

#endif /* KDEV_MODEL_MODEL_H */
