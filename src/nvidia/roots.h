/* Where kdev looks the NVIDIA driver up and what it writes into container
 * edits: the one driver-root rule of both front ends (kdev-plugin's CDI spec
 * and NVML, kdev-dra-plugin's claim specs and NVML).
 *
 * NVIDIA's device plugin (k8s-device-plugin v0.20.0
 * cmd/nvidia-device-plugin/main.go, plugin-manager.go, root.go and
 * internal/cdi/cdi.go, with nvidia-container-toolkit v1.20.0
 * pkg/nvcdi/transform/root) runs in a container where the host's driver root
 * (--driver-root, NVIDIA_DRIVER_ROOT) is mounted at the container driver
 * root (--driver-root-ctr-path, default /driver-root). It
 *   - opens NVML as <container root>/<lib dir>/libnvidia-ml.so.1 (root.go
 *     tryResolveLibrary; by name through the dynamic loader when the root is
 *     "/" or the library is not there);
 *   - looks the driver files up under the container root, and the device
 *     nodes under the container root when it has a dev/ directory, else
 *     under "/" (root.go getDevRoot);
 *   - writes every host path found under the container root with that root
 *     replaced by the host driver root; device nodes found under "/" (a
 *     container root without dev/) with <host dev root>/dev (--dev-root,
 *     NVIDIA_DEV_ROOT, default the driver root) in place of /dev
 *     (cdi.go getRootTransformer).
 *
 * Allocate's passDeviceSpecs (NVIDIA internal/plugin/server.go
 * apiDeviceSpecs) takes the same lookup root: the control nodes and IMEX
 * channels are checked under |dev| (NVIDIA stats them in its own view, where
 * the container toolkit put them), and HostPath is written under the host
 * dev root |host_dev| (filepath.Join(NvidiaDevRoot, p)), ContainerPath p.
 *
 * kdev follows this when the container driver root names an existing
 * directory. When it does not (kdev runs on the host, or in a container
 * without that mount), kdev looks under the host roots themselves, which it
 * then sees directly (NVIDIA would look under the missing directory and find
 * no driver files).
 *
 * Paths are kept normalised: no trailing '/', "" for "/". */
#ifndef KDEV_NVIDIA_ROOTS_H
#define KDEV_NVIDIA_ROOTS_H

#include <limits.h>
#include <stdbool.h>
#include <stddef.h>

#include "common/err.h"
#include "common/export.h"
#include "nvml/loader.h"

struct kdev_nvidia_roots {
        char host_driver[PATH_MAX]; /* --driver-root as the host sees it */
        char host_dev[PATH_MAX];    /* --dev-root, default host_driver */
        char driver[PATH_MAX];      /* where kdev looks up NVML and the driver files */
        char dev[PATH_MAX];         /* where kdev looks up the device nodes */
        char dev_host[PATH_MAX];    /* the host root of a node found under |dev| */
        bool in_container;          /* the container driver root was used */
};

/* Resolves the roots of |driver_root| (host; NULL or "": "/"), |dev_root|
 * (host; NULL or "": the driver root) and |container_driver_root| (NULL or
 * "": none) as described above; the directories are checked with stat(2)
 * now. Returns 0, or -ENAMETOOLONG ("<option> too long: <path>") with |err|. */
KDEV_API int kdev_nvidia_roots_resolve(const char *driver_root, const char *dev_root,
                              const char *container_driver_root, struct kdev_nvidia_roots *out,
                              struct kdev_err *err);

/* A root as an option value: "/" for the normalised "". */
KDEV_API const char *kdev_nvidia_root_text(const char *root);

/* The NVML options of |roots| (NVIDIA root.go tryResolveLibrary on the
 * lookup root roots->driver): with libnvidia-ml.so.1 under roots->driver
 * (not "/"; kdev_nvml_find_library), out->library_path = that path, copied
 * to |buf| (|size| bytes); else out->library_path and out->driver_root NULL,
 * libnvidia-ml.so.1 by name through the dynamic loader. |out| is zeroed
 * first. Returns 1 (under the root), 0 (by name; with a root other than "/"
 * |why| (may be NULL) gets the "not found under driver root" message). */
KDEV_API int kdev_nvidia_roots_nvml(const struct kdev_nvidia_roots *roots, struct kdev_nvml_options *out,
                           char *buf, size_t size, struct kdev_err *why);

#endif /* KDEV_NVIDIA_ROOTS_H */
