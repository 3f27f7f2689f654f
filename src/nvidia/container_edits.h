/* What a container needs for an NVIDIA logical device, once for every front
 * end: the device plugin's CDI spec (nvidia/cdi_spec.c), its Allocate
 * DeviceSpecs (nvidia/allocate.c, passDeviceSpecs) and the DRA plugin's
 * claim CDI specs (dra/plugin.c) all take their device nodes, env, mounts
 * and hooks from here, so the three cannot drift apart.
 *
 * Two parts, as nvcdi splits them (nvidia-container-toolkit pkg/nvcdi
 * common-nvml.go, full-gpu-nvml.go, mig-device-nvml.go):
 *   - common edits, the same for every device of the node (CDI spec-level
 *     containerEdits): env NVIDIA_VISIBLE_DEVICES=void (nvcdi's wrapper:
 *     keeps the NVIDIA runtime hook from injecting devices again), the
 *     control nodes of kdev_nvidia_control_nodes that exist under the dev
 *     root, then the driver files (nvidia/driver_files.h: mounts, then the
 *     create-symlinks / update-ldcache hooks);
 *   - device edits of one logical device (CDI device containerEdits):
 *     /dev/nvidia<minor> of the GPU (a MIG device: of its parent), then for
 *     a MIG device its GPU-instance and compute-instance access nodes
 *     /dev/nvidia-caps/nvidia-cap<gi_cap>, /dev/nvidia-caps/nvidia-cap<ci_cap>
 *     (NVIDIA k8s-device-plugin nvmlMigDevice GetPaths, nvcdi's MIG edits).
 * Every device node has path = the container path, host_path =
 * <dev root>/<path> and permissions "rw" (NVIDIA apiDeviceSpecs). Allocate
 * uses the device nodes only (NVIDIA's Allocate passes no driver mounts);
 * the CDI specs use everything, through kdev_nvidia_edits_to_cdi.
 */
#ifndef KDEV_NVIDIA_CONTAINER_EDITS_H
#define KDEV_NVIDIA_CONTAINER_EDITS_H

#include <stdbool.h>
#include <stddef.h>

#include "cdi/cdi.h"
#include "common/err.h"
#include "nvidia/driver_files.h"

/* The NVIDIA control device nodes, in this order; each is given to a
 * container when it exists on the node. The one list of kdev (device-plugin
 * CDI spec, Allocate DeviceSpecs, DRA claim specs).
 * /dev/nvidia-modeset is in it because both NVIDIA projects give it:
 * k8s-device-plugin v0.20.0 internal/plugin/server.go apiDeviceSpecs lists
 * /dev/nvidiactl, /dev/nvidia-uvm, /dev/nvidia-uvm-tools, /dev/nvidia-modeset,
 * and nvidia-container-toolkit pkg/nvcdi/common-nvml.go
 * (newCommonNVMLDiscoverer's meta devices: /dev/nvidia-modeset,
 * /dev/nvidia-uvm-tools, /dev/nvidia-uvm, /dev/nvidiactl), which builds the
 * CDI specs of NVIDIA's device plugin and of k8s-dra-driver-gpu, so NVIDIA's
 * DRA driver hands it to claims too. Vulkan/graphics workloads need it; a
 * node without the nvidia-modeset kernel module has no such node and it is
 * skipped. The order is NVIDIA's device-plugin order. */
#define KDEV_NVIDIA_N_CONTROL_NODES 4
extern const char *const kdev_nvidia_control_nodes[KDEV_NVIDIA_N_CONTROL_NODES];

/* One device node a container gets. */
struct kdev_nvidia_dev_node {
        char *path;      /* container path, e.g. "/dev/nvidia0" */
        char *host_path; /* <dev root>/<path>; equal to path when the dev root is "/" */
        const char *permissions; /* static "rw" */
};

/* Container edits (owned strings; free with kdev_nvidia_edits_clear). */
struct kdev_nvidia_edits {
        struct kdev_nvidia_dev_node *nodes;
        size_t n_nodes;
        const char *const *env; /* static "KEY=value" strings */
        size_t n_env;
        /* mounts and hooks: the driver files (borrowed, NULL: none) */
        const struct kdev_nvidia_driver_files *driver_files;
};

/* One logical NVIDIA device: a whole GPU (mig false) or a MIG device. */
struct kdev_nvidia_logical {
        unsigned minor;          /* the GPU's (a MIG device: its parent's) NVML minor */
        bool mig;
        unsigned gi_cap, ci_cap; /* MIG: access-node minors (nvidia/mig.h mig-minors) */
};

/* The common edits under |dev_root| (NULL or "": "/"): env, the control
 * nodes that exist (stat of <dev_root>/<node> now) and |driver_files|
 * (borrowed, may be NULL; must outlive |out|). |out| is filled (clear it,
 * also after an error). Returns 0 or -ENOMEM with |err|. */
int kdev_nvidia_common_edits(const char *dev_root,
                             const struct kdev_nvidia_driver_files *driver_files,
                             struct kdev_nvidia_edits *out, struct kdev_err *err);

/* Appends the device edits of logical device |d| under |dev_root| (NULL or
 * "": "/") to |out|; a node already in |out| is not added again (a replica
 * or a second MIG device of the same parent). Returns 0 or -ENOMEM with
 * |err|. */
int kdev_nvidia_device_edits(const char *dev_root, const struct kdev_nvidia_logical *d,
                             struct kdev_nvidia_edits *out, struct kdev_err *err);

/* kdev_nvidia_device_edits of |d| alone, appended to CDI edits |cdi| as
 * kdev_nvidia_edits_to_cdi does: a CDI device's containerEdits. Returns 0,
 * -EINVAL or -ENOMEM with |err|. */
int kdev_nvidia_device_edits_cdi(const char *dev_root, const struct kdev_nvidia_logical *d,
                                 struct kdev_cdi_edits *cdi, struct kdev_err *err);

/* Appends |e| to CDI edits |cdi|: env, device nodes (hostPath only when it
 * differs from path; no permissions field: the runtime's default, as
 * before), then the
 * driver files' mounts and hooks. Returns 0, -EINVAL or -ENOMEM with |err|. */
int kdev_nvidia_edits_to_cdi(const struct kdev_nvidia_edits *e, struct kdev_cdi_edits *cdi,
                             struct kdev_err *err);

/* Frees what |e| owns and zeroes it. NULL-safe. */
void kdev_nvidia_edits_clear(struct kdev_nvidia_edits *e);

#endif /* KDEV_NVIDIA_CONTAINER_EDITS_H */
