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
 *     (NVIDIA k8s-device-plugin nvmlMigDevice GetPaths, nvcdi's MIG edits);
 *     for a whole GPU with a PCI bus ID, after /dev/nvidia<minor>, its DRM
 *     nodes as nvcdi v1.20 adds them (internal/platform-support/dgpu
 *     nvml.go, internal/info/drm GetDeviceNodesByBusID, by-path-hooks.go):
 *     /dev/dri/<name> for each entry of <sysfs>/bus/pci/devices/<bus id>/drm
 *     in glob (sorted) order that exists under the lookup dev root (card1,
 *     renderD128), then one create-symlinks hook with a link
 *     "<target>::/dev/dri/by-path/pci-<bus id>-card" (then -render) for each
 *     by-path link under the lookup dev root whose target is one of those
 *     nodes (<target> as readlink gives it, e.g. "../card1"). NVIDIA writes
 *     the link path joined to its lookup dev root (the same when that root
 *     is "/"); kdev writes the container path. MIG devices get none (nvcdi:
 *     only with the "gfx" MIG attribute, which kdev does not read).
 * Both parts are the model's wire-neutral container edits (model/edits.h),
 * the struct every backend fills for every front end. Every device node has
 * path = the container path, host_path = <dev root>/<path> and permissions
 * "rw" (NVIDIA apiDeviceSpecs). Allocate uses the device nodes only (NVIDIA's
 * Allocate passes no driver mounts); the CDI specs use everything, through
 * kdev_nvidia_edits_to_cdi.
 */
#ifndef KDEV_NVIDIA_CONTAINER_EDITS_H
#define KDEV_NVIDIA_CONTAINER_EDITS_H

#include <stdbool.h>
#include <stddef.h>

#include "cdi/cdi.h"
#include "common/err.h"
#include "model/edits.h"
#include "nvidia/driver_files.h"
#include "nvidia/roots.h"

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
KDEV_API extern const char *const kdev_nvidia_control_nodes[KDEV_NVIDIA_N_CONTROL_NODES];

/* One logical NVIDIA device: a whole GPU (mig false) or a MIG device. */
struct kdev_nvidia_logical {
        unsigned minor;          /* the GPU's (a MIG device: its parent's) NVML minor */
        bool mig;
        unsigned gi_cap, ci_cap; /* MIG: access-node minors (nvidia/mig.h mig-minors) */
        /* A whole GPU's DRM nodes (nvcdi dgpu newNvmlDGPUDiscoverer): its PCI
         * bus ID in sysfs form ("0000:3b:00.0"; NULL or "": none), the sysfs
         * tree (NULL or "": "/sys"), and the hook of the by-path links
         * (NULL or "": no hook; |disabled_hooks|: KDEV_NVIDIA_HOOK_* bits). */
        const char *pci_bus_id;
        const char *sysfs_root;
        const char *hook_path;
        unsigned disabled_hooks;
};

/* The common edits under |dev_root| (NULL or "": "/"): env, the control
 * nodes that exist (stat of <dev_root>/<node> now), then the mounts and hooks
 * of |driver_files| (may be NULL: none; kdev_nvidia_driver_files_edits).
 * |out| must be empty (zeroed) and is filled (clear it with
 * kdev_container_edits_clear, also after an error). Returns 0, or
 * -ENAMETOOLONG / -ENOMEM with |err|. */
KDEV_API int kdev_nvidia_common_edits(const char *dev_root,
                             const struct kdev_nvidia_driver_files *driver_files,
                             struct kdev_container_edits *out, struct kdev_err *err);

/* kdev_nvidia_common_edits with the driver-root rule (nvidia/roots.h): the
 * control nodes that exist under roots->dev, each written with host path
 * <roots->dev_host>/<node>; the env order is nvcdi's (the driver files'
 * NVIDIA_CTK_LIBCUDA_DIR, then NVIDIA_VISIBLE_DEVICES=void). Used by the
 * device plugin's CDI spec and the DRA claim specs. Returns as
 * kdev_nvidia_common_edits. */
KDEV_API int kdev_nvidia_common_edits_at(const struct kdev_nvidia_roots *roots,
                                const struct kdev_nvidia_driver_files *driver_files,
                                struct kdev_container_edits *out, struct kdev_err *err);

/* kdev_nvidia_device_edits with host paths under roots->dev_host. Returns
 * as kdev_nvidia_device_edits. */
KDEV_API int kdev_nvidia_device_edits_at(const struct kdev_nvidia_roots *roots,
                                const struct kdev_nvidia_logical *d,
                                struct kdev_container_edits *out, struct kdev_err *err);

/* kdev_nvidia_device_edits_cdi with host paths under roots->dev_host. */
KDEV_API int kdev_nvidia_device_edits_cdi_at(const struct kdev_nvidia_roots *roots,
                                    const struct kdev_nvidia_logical *d,
                                    struct kdev_cdi_edits *cdi, struct kdev_err *err);

/* Appends the device edits of logical device |d| under |dev_root| (NULL or
 * "": "/") to |out|; a node already in |out| is not added again (a replica
 * or a second MIG device of the same parent). Returns 0 or -ENOMEM with
 * |err|. */
KDEV_API int kdev_nvidia_device_edits(const char *dev_root, const struct kdev_nvidia_logical *d,
                             struct kdev_container_edits *out, struct kdev_err *err);

/* kdev_nvidia_device_edits of |d| alone, appended to CDI edits |cdi| as
 * kdev_nvidia_edits_to_cdi does: a CDI device's containerEdits. Returns 0,
 * -EINVAL or -ENOMEM with |err|. */
KDEV_API int kdev_nvidia_device_edits_cdi(const char *dev_root, const struct kdev_nvidia_logical *d,
                                 struct kdev_cdi_edits *cdi, struct kdev_err *err);

/* Appends container edits |e| to CDI edits |cdi| as NVIDIA's CDI specs (the
 * device plugin's and the DRA claims') write them: env as "K=V", device
 * nodes (hostPath only when it differs from path; no permissions field: the
 * runtime's default, as nvcdi writes them), mounts with their options, then
 * hooks. Annotations and CDI device names are not containerEdits and are
 * left out. Returns 0, -EINVAL (an edit CDI refuses, e.g. an empty path) or
 * -ENOMEM with |err|. */
KDEV_API int kdev_nvidia_edits_to_cdi(const struct kdev_container_edits *e, struct kdev_cdi_edits *cdi,
                             struct kdev_err *err);

#endif /* KDEV_NVIDIA_CONTAINER_EDITS_H */
