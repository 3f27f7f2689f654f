/* The NVIDIA driver's user-space files as CDI "common edits": what
 * nvidia-container-toolkit's nvcdi puts into the spec-level containerEdits so
 * that a container started through a CDI spec gets the driver without the
 * NVIDIA runtime hook (pkg/nvcdi/driver-nvml.go, internal/discover/mounts.go,
 * ipc.go, hooks.go, symlinks.go; nvidia-container-toolkit v1.17-1.20).
 *
 * What is looked up (bounded: one directory listing per listed directory, no
 * recursive walk), all relative to the lookup root (see below):
 *   - libraries: regular files "lib*.so.<driver version>" (the version from
 *     NVML, e.g. libcuda.so.550.90.07, libnvidia-ml.so.550.90.07) directly in
 *     /usr/lib64, /usr/lib/x86_64-linux-gnu, /usr/lib/aarch64-linux-gnu,
 *     /lib64, /lib/x86_64-linux-gnu, /lib/aarch64-linux-gnu and their vdpau/
 *     subdirectories; a directory that is the same as one listed before it (a
 *     merged /usr: /lib -> usr/lib) is skipped; names sorted per directory;
 *   - only when at least one library was found (the driver of that version is
 *     installed there; a driver of another version is not taken):
 *     GSP firmware /lib/firmware/nvidia/<version>/gsp*.bin (sorted);
 *     binaries nvidia-smi, nvidia-debugdump, nvidia-persistenced,
 *     nvidia-cuda-mps-control, nvidia-cuda-mps-server, nvidia-imex,
 *     nvidia-imex-ctl, each the first executable regular file in
 *     /usr/local/sbin, /usr/local/bin, /usr/sbin, /usr/bin, /sbin, /bin
 *     (nvcdi's executable locator); IPC sockets
 *     /var/run/nvidia-persistenced/socket, /var/run/nvidia-fabricmanager/socket
 *     and the MPS directory /tmp/nvidia-mps when they exist.
 *
 * Roots: files are looked up under |lookup_root| (where kdev sees the driver
 * installation) and written into the spec with hostPath
 * <driver_root>/<path> (the host's view, which the runtime uses) and
 * containerPath <path>: NVIDIA's plugin looks up under containerDriverRoot
 * and rewrites the host paths to nvidiaDriverRoot the same way
 * (transform/root).
 *
 * Edits (kdev_nvidia_driver_files_edits), in this order:
 *   - one mount per file: {hostPath, containerPath, options ["ro", "nosuid",
 *     "nodev", "rbind", "rprivate"]} (nvcdi's mount options): libraries,
 *     firmware, binaries, IPC;
 *   - hooks, only when |hook_path| names an existing executable file (checked
 *     as kdev sees the path) and a library was found; both hookName
 *     "createContainer", path |hook_path|, env ["NVIDIA_CTK_DEBUG=false"],
 *     args starting with the base name of |hook_path| plus "hook" when that
 *     base name is "nvidia-ctk" (nvcdi's fixed hook CLI arguments):
 *       1. "create-symlinks" with "--link", "<target>::<dir>/<link>" per link:
 *          libcuda.so.1::<dir>/libcuda.so (libcuda found),
 *          libnvidia-opticalflow.so.1::<dir>/libnvidia-opticalflow.so,
 *          libGLX_nvidia.so.<v>::<dir>/libGLX_indirect.so.0 (dir = the
 *          library's container directory); left out when no link applies;
 *       2. "update-ldcache" with "--folder", <dir> per distinct library
 *          container directory, in library order (ldconfig there also makes
 *          the SONAME links such as libcuda.so.1).
 * Without the hook binary a container gets the files but no libcuda.so.1
 * link and no ld cache entry for them.
 */
#ifndef KDEV_NVIDIA_DRIVER_FILES_H
#define KDEV_NVIDIA_DRIVER_FILES_H

#include <stdbool.h>
#include <stddef.h>

#include "common/err.h"
#include "model/edits.h"

struct kdev_nvidia_driver_files_options {
        const char *driver_root;    /* host path of the driver root; NULL or "": "/" */
        const char *lookup_root;    /* where it is looked up; NULL or "": driver_root */
        const char *driver_version; /* NVML's, e.g. "550.90.07"; NULL or "": nothing found */
        const char *hook_path;      /* nvidia-cdi-hook / nvidia-ctk; NULL or "": no hooks */
};

/* The files found; paths are container paths ("/usr/lib64/libcuda.so.550.90.07"). */
struct kdev_nvidia_driver_files {
        char *driver_root; /* normalised: no trailing '/', "" for "/" */
        char **libraries;
        size_t n_libraries;
        char **firmware;
        size_t n_firmware;
        char **binaries;
        size_t n_binaries;
        char **ipc;
        size_t n_ipc;
        char *hook_path; /* the hook binary when it exists and hooks apply, else NULL */
};

/* The root to look the driver up under for kdev-plugin's options:
 * |container_driver_root| when it is not empty and names an existing
 * directory (kdev runs in a container with the host's driver root mounted
 * there, as NVIDIA's plugin expects), else |driver_root| (kdev sees the
 * driver root directly). Returns one of the two pointers (or "/"). */
KDEV_API const char *kdev_nvidia_driver_lookup_root(const char *driver_root,
                                           const char *container_driver_root);

/* Looks the driver files up as described above. |out| is filled (free with
 * kdev_nvidia_driver_files_clear, also after an error). Missing directories
 * and files are not errors. Returns the number of libraries found (0: none,
 * |out| then holds no files and no hook), or -ENOMEM / -ENAMETOOLONG (a path
 * longer than PATH_MAX) with |err|. */
KDEV_API int kdev_nvidia_driver_files_find(const struct kdev_nvidia_driver_files_options *opts,
                                  struct kdev_nvidia_driver_files *out, struct kdev_err *err);

/* Frees what |f| owns and zeroes it. NULL-safe. */
KDEV_API void kdev_nvidia_driver_files_clear(struct kdev_nvidia_driver_files *f);

/* Appends the mounts and hooks of |f| (described above) to container edits
 * |e| (model/edits.h; kdev_nvidia_edits_to_cdi writes them into a CDI spec).
 * Returns the number of mounts added, -EINVAL or -ENOMEM with |err|. */
KDEV_API int kdev_nvidia_driver_files_edits(const struct kdev_nvidia_driver_files *f,
                                   struct kdev_container_edits *e, struct kdev_err *err);

#endif /* KDEV_NVIDIA_DRIVER_FILES_H */
