/* The CDI spec of the NVIDIA GPUs (kind k8s.device-plugin.nvidia.com/gpu),
 * as NVIDIA's plugin writes it at start when a CDI device list strategy is
 * selected (NVIDIA/k8s-device-plugin v0.20.0 internal/cdi/cdi.go with
 * nvidia-container-toolkit's nvcdi).
 *
 * Content:
 *   - one device per GPU, named by deviceIDStrategy as nvcdi's device namer
 *     does: the GPU UUID ("GPU-…") for uuid, the NVML index ("0") for index;
 *     device edits: the device node /dev/nvidia<minor> (hostPath
 *     <host root>/dev/nvidia<minor> when that root is not "/": the
 *     driver-root rule of nvidia/roots.h, kdev_nvidia_cdi_roots);
 *   - "all": the union of the GPUs' edits (nvcdi's merged device);
 *   - spec-level edits (the common edits of nvidia/container_edits.h, which
 *     the DRA claim specs and Allocate share): env NVIDIA_VISIBLE_DEVICES=void
 *     (nvcdi's wrapper), the control nodes (kdev_nvidia_control_nodes:
 *     /dev/nvidiactl, /dev/nvidia-uvm, /dev/nvidia-uvm-tools,
 *     /dev/nvidia-modeset) that exist under roots.dev when the spec is
 *     built (hostPath under roots.dev_host), then nvcdi's common edits
 *     (nvidia/driver_files.h): NVIDIA_CTK_LIBCUDA_DIR, the driver's
 *     libraries of the NVML driver version, IPC sockets, firmware and
 *     binaries as bind mounts (looked up under roots.driver, hostPath under
 *     the host driver root) and the hooks with cfg->nvidia_ctk_path as given
 *     (create-symlinks, enable-cuda-compat, update-ldcache,
 *     disable-device-node-modification, update-application-profile; less
 *     cfg->cdi_disabled_hooks); cfg->cdi_features as nvcdi's feature flags.
 *     With no library of that version found, none of these (the spec then
 *     holds device nodes only).
 * Differences from NVIDIA (documented, on purpose or not yet done):
 *   - with migStrategy none, MIG-enabled GPUs are included whole (nvcdi
 *     leaves them out, yet migStrategy none advertises them, so NVIDIA's CDI
 *     names for them do not resolve) and MIG devices are left out (not
 *     advertised); with single/mixed, MIG-enabled GPUs are left out and each
 *     MIG device is a CDI device named by its MIG UUID (or "i:j" with
 *     deviceIDStrategy index) with the parent's /dev/nvidia<minor> and the
 *     GI and CI access nodes /dev/nvidia-caps/nvidia-cap<N> from
 *     <procRoot>/driver/nvidia-caps/mig-minors (a missing line fails with the
 *     build's "missing MIG GPU instance capability path: ..." error, -ENOENT);
 *   - the remaining differences of the driver files are listed in
 *     docs/kdev-plugin.md ("CDI spec: differences from NVIDIA"); when no
 *     library of the driver version is found the spec holds device nodes
 *     only and NVIDIA_VISIBLE_DEVICES=void keeps the NVIDIA runtime hook from
 *     adding the driver (nvcdi fails the spec then);
 *   - GPUs lost before their UUID was read are left out.
 */
#ifndef KDEV_NVIDIA_CDI_SPEC_H
#define KDEV_NVIDIA_CDI_SPEC_H

#include <stdbool.h>

#include "cdi/cdi.h"
#include "common/err.h"
#include "nvidia/config.h"
#include "nvidia/driver_files.h"
#include "nvidia/roots.h"
#include "nvml/discover.h"

/* The driver roots of |cfg| (nvidia/roots.h: cfg->driver_root,
 * cfg->dev_root, cfg->container_driver_root): where kdev-plugin opens NVML
 * (roots.driver), looks up the driver files and the device nodes, and the
 * host roots written into the spec. Returns as kdev_nvidia_roots_resolve. */
KDEV_API int kdev_nvidia_cdi_roots(const struct kdev_nvidia_config *cfg, struct kdev_nvidia_roots *out,
                          struct kdev_err *err);

/* Whether NVIDIA writes a CDI spec for |cfg|: a CDI device list strategy
 * (cdi-annotations or cdi-cri) is selected. */
KDEV_API bool kdev_nvidia_cdi_needed(const struct kdev_nvidia_config *cfg);

/* Builds the spec for |gpus| under the finished |cfg|. *out is new
 * (kdev_cdi_spec_free). Returns 0; -ENODEV "no GPUs for a CDI spec" when
 * |gpus| has no nameable GPU (a CDI device needs edits, so NVIDIA skips such
 * specs too); -EINVAL (a name CDI rejects); -ENOMEM. */
KDEV_API int kdev_nvidia_cdi_spec(const struct kdev_gpu_set *gpus, const struct kdev_nvidia_config *cfg,
                         struct kdev_cdi_spec **out, struct kdev_err *err);

/* Builds the spec and writes it atomically (mode 0644) as
 * <cfg->cdi_dir>/k8s.device-plugin.nvidia.com-gpu.json (CDI
 * GenerateNameForSpec, as NVIDIA names it), creating the directory. The path
 * written goes to |path| (|size| bytes) when |path| is not NULL. With no
 * GPUs nothing is written and a spec file left from before is removed
 * (returns 0). Returns 0 or the errors of kdev_nvidia_cdi_spec and
 * kdev_cdi_spec_write. Call it at
 * start (when kdev_nvidia_cdi_needed) and again after a rediscovery. */
KDEV_API int kdev_nvidia_cdi_write(const struct kdev_gpu_set *gpus, const struct kdev_nvidia_config *cfg,
                          char *path, size_t size, struct kdev_err *err);

/* kdev_nvidia_cdi_write that also hands over the driver files put into the
 * spec: |found| (may be NULL) is filled when a spec was written (zeroed
 * otherwise); the caller frees it with kdev_nvidia_driver_files_clear. For
 * the daemon's log ("no driver libraries found ..."). */
KDEV_API int kdev_nvidia_cdi_write_ex(const struct kdev_gpu_set *gpus, const struct kdev_nvidia_config *cfg,
                             char *path, size_t size, struct kdev_nvidia_driver_files *found,
                             struct kdev_err *err);

/* kdev_nvidia_cdi_write_ex guarded by |guard| (common/file.h; may be NULL):
 * a spec file that is no longer what kdev last wrote (edited or replaced by
 * hand) is first moved aside to "<cdi_dir>/.k8s.device-plugin.nvidia.com-
 * gpu.json.foreign-<unix seconds>" (no .json extension: CDI ignores it; its
 * path into |aside|, |asize| bytes; also when the spec is removed for want
 * of GPUs) and the spec is written from |gpus|. Returns 0, 1 after a move
 * aside, or the errors of kdev_nvidia_cdi_write_ex and
 * kdev_file_guard_check. */
KDEV_API int kdev_nvidia_cdi_write_guarded(const struct kdev_gpu_set *gpus,
                                           const struct kdev_nvidia_config *cfg, char *path,
                                           size_t size, struct kdev_nvidia_driver_files *found,
                                           struct kdev_file_guard *guard, char *aside,
                                           size_t asize, struct kdev_err *err);

/* The driver files for the spec of |gpus| under |cfg|: looked up under
 * roots.driver of kdev_nvidia_cdi_roots for gpus->driver_version, host
 * paths under the host driver root, hooks with cfg->nvidia_ctk_path less
 * cfg->cdi_disabled_hooks, cfg->cdi_features. Returns as
 * kdev_nvidia_driver_files_find (free |out| with
 * kdev_nvidia_driver_files_clear). */
KDEV_API int kdev_nvidia_cdi_driver_files(const struct kdev_gpu_set *gpus,
                                 const struct kdev_nvidia_config *cfg,
                                 struct kdev_nvidia_driver_files *out, struct kdev_err *err);

/* Removes the spec file written by kdev_nvidia_cdi_write (clean exit).
 * Returns 1 when removed, 0 when it was not there, or a negative errno. */
KDEV_API int kdev_nvidia_cdi_remove(const struct kdev_nvidia_config *cfg, struct kdev_err *err);

/* kdev_nvidia_cdi_remove guarded by |guard| (may be NULL): a spec someone
 * else changed is moved aside instead of removed (returns 2, its path in
 * |aside|). Returns 1 removed, 0 not there, 2 moved aside, or a negative
 * errno. */
KDEV_API int kdev_nvidia_cdi_remove_guarded(const struct kdev_nvidia_config *cfg,
                                            struct kdev_file_guard *guard, char *aside,
                                            size_t asize, struct kdev_err *err);

#endif /* KDEV_NVIDIA_CDI_SPEC_H */
