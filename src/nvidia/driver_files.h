/* The NVIDIA driver's user-space files as CDI "common edits": what
 * nvidia-container-toolkit's nvcdi puts into the spec-level containerEdits so
 * that a container started through a CDI spec gets the driver without the
 * NVIDIA runtime hook (nvidia-container-toolkit v1.20.0, the version NVIDIA's
 * device plugin v0.20.0 uses: pkg/nvcdi/driver-nvml.go, common-nvml.go,
 * internal/lookup/root/root.go, pkg/lookup/library.go, ldcache.go,
 * executable.go, path.go, internal/discover/mounts.go, ipc.go, hooks.go,
 * symlinks.go, ldconfig.go, compat_libs.go, application_profile.go).
 *
 * What is looked up, all under the lookup root (nvidia/roots.h: where kdev
 * sees the driver); a directory is listed once, never walked recursively:
 *   - the driver's library directories: the directories of the files
 *     "lib*.so.<version>" (the version from NVML) in nvcdi's library search
 *     paths /, /usr/lib64, /usr/lib/{x86_64,aarch64}-linux-gnu,
 *     /usr/lib/{x86_64,aarch64}-linux-gnu/nvidia/current, /lib64,
 *     /lib/{x86_64,aarch64}-linux-gnu, /lib/{x86_64,aarch64}-linux-gnu/
 *     nvidia/current, each file with its symlinks resolved; when none is
 *     there, the 64-bit entries of the root's /etc/ld.so.cache (glibc's
 *     "glibc-ld.so.cache1.1" format, also behind the old "ld.so-1.7.0"
 *     table) with such a name;
 *   - libraries: "*.so.<version>" in each library directory, then in each
 *     one's vdpau/ (names sorted per directory, symlinks resolved, each file
 *     once), then "libnvidia-nvvm70.so.*" there, then, with the feature flag
 *     enable-explicit-driver-libraries, libEGL.so, libGL.so,
 *     libGLESv1_CM.so, libGLESv2.so, libGLX.so, libGLdispatch.so,
 *     libOpenCL.so, libOpenGL.so, libnvidia-api.so, libnvidia-egl-xcb.so,
 *     libnvidia-egl-xlib.so;
 *   - only when at least one library was found (the driver of that version
 *     is installed there):
 *     IPC sockets (unless the feature flag disable-ipc-discoverer):
 *     nvidia-persistenced/socket and nvidia-fabricmanager/socket, each the
 *     first in /run, /var/run; /tmp/nvidia-mps when it is not a directory
 *     (nvcdi's file locator takes no directories);
 *     GSP firmware nvidia/<version>/gsp*.bin in /lib/firmware/updates/
 *     <release>, /lib/firmware/updates, /lib/firmware/<release>,
 *     /lib/firmware (<release>: uname -r; a custom firmware_class path
 *     from /sys/module/firmware_class/parameters/path first);
 *     binaries nvidia-smi, nvidia-debugdump, nvidia-persistenced,
 *     nvidia-cuda-mps-control, nvidia-cuda-mps-server, nvidia-imex,
 *     nvidia-imex-ctl, each the first executable file in $PATH's
 *     directories, then those of /usr/local/sbin, /usr/local/bin,
 *     /usr/sbin, /usr/bin, /sbin, /bin not in $PATH.
 *
 * Each file is written with containerPath = its path under the lookup root
 * and hostPath = <driver_root>/<containerPath> (the host's view, which the
 * runtime uses; nvcdi transform/root).
 *
 * Edits (kdev_nvidia_driver_files_edits), in nvcdi's order:
 *   - env NVIDIA_CTK_LIBCUDA_DIR=<library directories joined by ':'>;
 *   - one mount per file: libraries, IPC, firmware, binaries; options
 *     ["ro", "nosuid", "nodev", "rbind", "rprivate"], IPC ["nosuid",
 *     "nodev", "rbind", "rprivate", "noexec"];
 *   - hooks, with path |hook_path| as given (a host path: it need not exist
 *     where kdev runs; |hook_visible| says whether kdev sees an executable
 *     there), hookName "createContainer", env ["NVIDIA_CTK_DEBUG=false"],
 *     args starting with the base name of |hook_path| plus "hook" when that
 *     base name is "nvidia-ctk", each left out when it is disabled:
 *       1. create-symlinks, "--link" "<target>::<dir>/<link>" per link:
 *          libcuda.so.1::<dir>/libcuda.so (libcuda.so.<version>),
 *          libGLX_nvidia.so.<version>::<dir>/libGLX_indirect.so.0,
 *          libnvidia-opticalflow.so.1::<dir>/libnvidia-opticalflow.so
 *          (<dir>: the library's directory); left out when no link applies;
 *       2. enable-cuda-compat --host-driver-version=<version>;
 *       3. update-ldcache, "--folder" <dir> per distinct directory of the
 *          libraries named lib?*.so*, in library order;
 *       4. disable-device-node-modification;
 *       5. update-application-profile.
 * Without the hook binary in the container's namespace the runtime fails to
 * run the hooks; without the hooks a container gets the files but no
 * libcuda.so.1 link and no ld cache entry for them.
 */
#ifndef KDEV_NVIDIA_DRIVER_FILES_H
#define KDEV_NVIDIA_DRIVER_FILES_H

#include <stdbool.h>
#include <stddef.h>

#include "common/err.h"
#include "model/edits.h"

/* NVIDIA's CDI hooks (nvcdi HookName), as bits. */
enum {
        KDEV_NVIDIA_HOOK_CREATE_SYMLINKS = 1u << 0,       /* "create-symlinks" */
        KDEV_NVIDIA_HOOK_ENABLE_CUDA_COMPAT = 1u << 1,    /* "enable-cuda-compat" */
        KDEV_NVIDIA_HOOK_UPDATE_LDCACHE = 1u << 2,        /* "update-ldcache" */
        KDEV_NVIDIA_HOOK_DISABLE_DEVICE_NODE_MODIFICATION = 1u << 3,
        KDEV_NVIDIA_HOOK_UPDATE_APPLICATION_PROFILE = 1u << 4,
        KDEV_NVIDIA_HOOK_CHMOD = 1u << 5,                 /* "chmod": never written (nvcdi's default) */
        KDEV_NVIDIA_HOOK_ALL = (1u << 6) - 1,             /* "all" */
};

/* nvcdi's feature flags (pkg/nvcdi/api.go FeatureFlag), as bits. */
enum {
        KDEV_NVIDIA_CDI_EXPLICIT_DRIVER_LIBRARIES = 1u << 0, /* enable-explicit-driver-libraries */
        KDEV_NVIDIA_CDI_DISABLE_NVSANDBOXUTILS = 1u << 1,    /* disable-nvsandboxutils */
        KDEV_NVIDIA_CDI_COHERENT_ANNOTATIONS = 1u << 2,      /* enable-coherent-annotations */
        KDEV_NVIDIA_CDI_DISABLE_MULTIPLE_CSV_DEVICES = 1u << 3,
        KDEV_NVIDIA_CDI_NO_ADDITIONAL_GIDS = 1u << 4,        /* no-additional-gids-for-device-nodes */
        KDEV_NVIDIA_CDI_DISABLE_IPC = 1u << 5,               /* disable-ipc-discoverer */
};

/* Parses a comma-separated list of hook names (--cdi-disable-hooks,
 * CDI_DISABLE_HOOKS; "all" for every hook) into KDEV_NVIDIA_HOOK_* bits,
 * or of feature flags (--cdi-feature-flags, CDI_FEATURE_FLAGS) into
 * KDEV_NVIDIA_CDI_* bits. Empty items are skipped. Returns 0, or -EINVAL
 * with "unknown CDI hook: <name> (expected ...)" / "unknown CDI feature
 * flag: <name> (expected ...)" in |msg| (|size| bytes). */
KDEV_API int kdev_nvidia_cdi_hooks_parse(const char *list, unsigned *mask, char *msg, size_t size);
KDEV_API int kdev_nvidia_cdi_features_parse(const char *list, unsigned *mask, char *msg, size_t size);

struct kdev_nvidia_driver_files_options {
        const char *driver_root;    /* host path of the driver root; NULL or "": "/" */
        const char *lookup_root;    /* where it is looked up; NULL or "": driver_root */
        const char *driver_version; /* NVML's, e.g. "550.90.07"; NULL or "": nothing found */
        const char *hook_path;      /* nvidia-cdi-hook / nvidia-ctk; NULL or "": no hooks */
        unsigned disabled_hooks;    /* KDEV_NVIDIA_HOOK_* bits left out */
        unsigned features;          /* KDEV_NVIDIA_CDI_* bits */
};

/* The files found; paths are container paths ("/usr/lib64/libcuda.so.550.90.07"). */
struct kdev_nvidia_driver_files {
        char *driver_root; /* normalised: no trailing '/', "" for "/" */
        char *version;     /* the driver version the files are of */
        char **lib_dirs;   /* the library directories, in search order */
        size_t n_lib_dirs;
        char **libraries;
        size_t n_libraries;
        char **firmware;
        size_t n_firmware;
        char **binaries;
        size_t n_binaries;
        char **ipc;
        size_t n_ipc;
        char *hook_path;   /* |hook_path| when hooks apply (a library found), else NULL */
        bool hook_visible; /* hook_path names an executable file where kdev runs */
        unsigned disabled_hooks;
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
 * and files, and a missing or malformed ld.so.cache, are not errors.
 * Returns the number of libraries found (0: none, |out| then holds no files
 * and no hook), or -ENOMEM / -ENAMETOOLONG (a path longer than PATH_MAX)
 * with |err|. */
KDEV_API int kdev_nvidia_driver_files_find(const struct kdev_nvidia_driver_files_options *opts,
                                  struct kdev_nvidia_driver_files *out, struct kdev_err *err);

/* Appends NVIDIA's CDI hook |hook| (one KDEV_NVIDIA_HOOK_* bit) to |e|
 * unless it is in |disabled| or |hook_path| is NULL or "" (nvcdi
 * hooks.go Create): hookName "createContainer", path |hook_path|, env
 * ["NVIDIA_CTK_DEBUG=false"], args: the base name of |hook_path| ("hook"
 * after it for nvidia-ctk), the hook's name, then |args| (create-symlinks:
 * each after "--link", left out with no args; update-ldcache: each after
 * "--folder"; others as given). Returns 0, -EINVAL or -ENOMEM with |err|. */
KDEV_API int kdev_nvidia_hook_add(const char *hook_path, unsigned disabled, unsigned hook,
                         const char *const *args, size_t n_args,
                         struct kdev_container_edits *e, struct kdev_err *err);

/* Frees what |f| owns and zeroes it. NULL-safe. */
KDEV_API void kdev_nvidia_driver_files_clear(struct kdev_nvidia_driver_files *f);

/* Appends the env, mounts and hooks of |f| (described above) to container
 * edits |e| (model/edits.h; kdev_nvidia_edits_to_cdi writes them into a CDI
 * spec). Returns the number of mounts added, -EINVAL or -ENOMEM with |err|. */
KDEV_API int kdev_nvidia_driver_files_edits(const struct kdev_nvidia_driver_files *f,
                                   struct kdev_container_edits *e, struct kdev_err *err);

#endif /* KDEV_NVIDIA_DRIVER_FILES_H */
