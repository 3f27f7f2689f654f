/* NVML loader: dlopen of libnvidia-ml.so.1 and one typed table of entry points.
 *
 * The driver is not a build dependency (docs/architecture.md): the library is
 * opened once with RTLD_NOW | RTLD_LOCAL and every entry point in KDEV_NVML_SYMBOLS is
 * resolved at open time. For each entry point the names are tried in order,
 * newest first (nvmlInit_v2 then nvmlInit, nvmlDeviceGetPciInfo_v3 then _v2
 * then the v1 name), the way go-nvml switches to the newest symbol that
 * exists (go-nvml v0.13.3-1 pkg/nvml). A required entry point that is missing under every
 * name fails the open with the symbol and the library path; an optional one
 * that is missing clears its capability flag, and every entry point of that
 * capability is then NULL (so a half-present group is never called; go-nvlib
 * guards nvmlDeviceGetMigMode the same way).
 *
 * Calling through the table after kdev_nvml_open() is thread-safe (the table
 * is read-only); kdev_nvml_init()/kdev_nvml_shutdown() are serialised by a
 * mutex, so the health thread and the loop thread may both use them.
 */
#ifndef KDEV_NVML_LOADER_H
#define KDEV_NVML_LOADER_H

#include <stddef.h>

#include "common/err.h"
#include "common/export.h"
#include "nvml/nvml_api.h"

/* Capability flags: which optional groups of entry points were found. */
enum {
        KDEV_NVML_CAP_MIG = 1u << 0,          /* the 14 MIG entry points */
        KDEV_NVML_CAP_CUDA_VERSION = 1u << 1, /* nvmlSystemGetCudaDriverVersion(_v2) */
        KDEV_NVML_CAP_ARCH = 1u << 2,         /* nvmlDeviceGetArchitecture */
        KDEV_NVML_CAP_ROW_REMAP = 1u << 3,    /* nvmlDeviceGetRemappedRows */
        KDEV_NVML_CAP_BRAND = 1u << 4,        /* nvmlDeviceGetBrand */
        KDEV_NVML_CAP_USAGE = 1u << 5,        /* utilization rates, running compute processes */
        KDEV_NVML_CAP_PROC_UTIL = 1u << 6,    /* nvmlDeviceGetProcessUtilization */
        KDEV_NVML_CAP_MIG_CONFIG = 1u << 7,   /* the 12 dynamic MIG entry points */
};
#define KDEV_NVML_REQUIRED 0u                 /* "capability" of required entry points */

/* The symbol table: X(field, capability, name0, name1, name2) where field is
 * the member of struct kdev_nvml_api (the unversioned NVML name, whose
 * function type is kdev_<field>_fn) and name0..name2 are the exported names
 * tried in order (NULL ends the list early). */
#define KDEV_NVML_SYMBOLS(X)                                                                   \
        X(nvmlInit, KDEV_NVML_REQUIRED, "nvmlInit_v2", "nvmlInit", NULL)                       \
        X(nvmlShutdown, KDEV_NVML_REQUIRED, "nvmlShutdown", NULL, NULL)                        \
        X(nvmlErrorString, KDEV_NVML_REQUIRED, "nvmlErrorString", NULL, NULL)                  \
        X(nvmlSystemGetDriverVersion, KDEV_NVML_REQUIRED, "nvmlSystemGetDriverVersion", NULL,  \
          NULL)                                                                                \
        X(nvmlDeviceGetCount, KDEV_NVML_REQUIRED, "nvmlDeviceGetCount_v2",                     \
          "nvmlDeviceGetCount", NULL)                                                          \
        X(nvmlDeviceGetHandleByIndex, KDEV_NVML_REQUIRED, "nvmlDeviceGetHandleByIndex_v2",     \
          "nvmlDeviceGetHandleByIndex", NULL)                                                  \
        X(nvmlDeviceGetHandleByUUID, KDEV_NVML_REQUIRED, "nvmlDeviceGetHandleByUUID", NULL,    \
          NULL)                                                                                \
        X(nvmlDeviceGetUUID, KDEV_NVML_REQUIRED, "nvmlDeviceGetUUID", NULL, NULL)              \
        X(nvmlDeviceGetName, KDEV_NVML_REQUIRED, "nvmlDeviceGetName", NULL, NULL)              \
        X(nvmlDeviceGetIndex, KDEV_NVML_REQUIRED, "nvmlDeviceGetIndex", NULL, NULL)            \
        X(nvmlDeviceGetMinorNumber, KDEV_NVML_REQUIRED, "nvmlDeviceGetMinorNumber", NULL,      \
          NULL)                                                                                \
        X(nvmlDeviceGetPciInfo, KDEV_NVML_REQUIRED, "nvmlDeviceGetPciInfo_v3",                 \
          "nvmlDeviceGetPciInfo_v2", "nvmlDeviceGetPciInfo")                                   \
        X(nvmlDeviceGetMemoryInfo, KDEV_NVML_REQUIRED, "nvmlDeviceGetMemoryInfo", NULL, NULL)  \
        X(nvmlDeviceGetCudaComputeCapability, KDEV_NVML_REQUIRED,                              \
          "nvmlDeviceGetCudaComputeCapability", NULL, NULL)                                    \
        X(nvmlEventSetCreate, KDEV_NVML_REQUIRED, "nvmlEventSetCreate", NULL, NULL)            \
        X(nvmlEventSetFree, KDEV_NVML_REQUIRED, "nvmlEventSetFree", NULL, NULL)                \
        X(nvmlEventSetWait, KDEV_NVML_REQUIRED, "nvmlEventSetWait_v2", "nvmlEventSetWait",     \
          NULL)                                                                                \
        X(nvmlDeviceGetSupportedEventTypes, KDEV_NVML_REQUIRED,                                \
          "nvmlDeviceGetSupportedEventTypes", NULL, NULL)                                      \
        X(nvmlDeviceRegisterEvents, KDEV_NVML_REQUIRED, "nvmlDeviceRegisterEvents", NULL,      \
          NULL)                                                                                \
        X(nvmlDeviceGetTopologyCommonAncestor, KDEV_NVML_REQUIRED,                             \
          "nvmlDeviceGetTopologyCommonAncestor", NULL, NULL)                                   \
        X(nvmlDeviceGetNvLinkState, KDEV_NVML_REQUIRED, "nvmlDeviceGetNvLinkState", NULL,      \
          NULL)                                                                                \
        X(nvmlDeviceGetNvLinkRemotePciInfo, KDEV_NVML_REQUIRED,                                \
          "nvmlDeviceGetNvLinkRemotePciInfo_v2", "nvmlDeviceGetNvLinkRemotePciInfo", NULL)     \
        X(nvmlSystemGetCudaDriverVersion, KDEV_NVML_CAP_CUDA_VERSION,                          \
          "nvmlSystemGetCudaDriverVersion_v2", "nvmlSystemGetCudaDriverVersion", NULL)         \
        X(nvmlDeviceGetArchitecture, KDEV_NVML_CAP_ARCH, "nvmlDeviceGetArchitecture", NULL,    \
          NULL)                                                                                \
        X(nvmlDeviceGetBrand, KDEV_NVML_CAP_BRAND, "nvmlDeviceGetBrand", NULL, NULL)           \
        X(nvmlDeviceGetRemappedRows, KDEV_NVML_CAP_ROW_REMAP, "nvmlDeviceGetRemappedRows",     \
          NULL, NULL)                                                                          \
        X(nvmlDeviceGetMigMode, KDEV_NVML_CAP_MIG, "nvmlDeviceGetMigMode", NULL, NULL)         \
        X(nvmlDeviceGetMaxMigDeviceCount, KDEV_NVML_CAP_MIG, "nvmlDeviceGetMaxMigDeviceCount", \
          NULL, NULL)                                                                          \
        X(nvmlDeviceGetMigDeviceHandleByIndex, KDEV_NVML_CAP_MIG,                              \
          "nvmlDeviceGetMigDeviceHandleByIndex", NULL, NULL)                                   \
        X(nvmlDeviceIsMigDeviceHandle, KDEV_NVML_CAP_MIG, "nvmlDeviceIsMigDeviceHandle", NULL, \
          NULL)                                                                                \
        X(nvmlDeviceGetDeviceHandleFromMigDeviceHandle, KDEV_NVML_CAP_MIG,                     \
          "nvmlDeviceGetDeviceHandleFromMigDeviceHandle", NULL, NULL)                          \
        X(nvmlDeviceGetGpuInstanceId, KDEV_NVML_CAP_MIG, "nvmlDeviceGetGpuInstanceId", NULL,   \
          NULL)                                                                                \
        X(nvmlDeviceGetComputeInstanceId, KDEV_NVML_CAP_MIG, "nvmlDeviceGetComputeInstanceId", \
          NULL, NULL)                                                                          \
        X(nvmlDeviceGetAttributes, KDEV_NVML_CAP_MIG, "nvmlDeviceGetAttributes_v2",            \
          "nvmlDeviceGetAttributes", NULL)                                                     \
        X(nvmlDeviceGetGpuInstanceProfileInfo, KDEV_NVML_CAP_MIG,                              \
          "nvmlDeviceGetGpuInstanceProfileInfo", NULL, NULL)                                   \
        X(nvmlDeviceGetGpuInstanceById, KDEV_NVML_CAP_MIG, "nvmlDeviceGetGpuInstanceById",     \
          NULL, NULL)                                                                          \
        X(nvmlGpuInstanceGetInfo, KDEV_NVML_CAP_MIG, "nvmlGpuInstanceGetInfo", NULL, NULL)     \
        X(nvmlGpuInstanceGetComputeInstanceProfileInfo, KDEV_NVML_CAP_MIG,                     \
          "nvmlGpuInstanceGetComputeInstanceProfileInfo", NULL, NULL)                          \
        X(nvmlGpuInstanceGetComputeInstanceById, KDEV_NVML_CAP_MIG,                            \
          "nvmlGpuInstanceGetComputeInstanceById", NULL, NULL)                                 \
        X(nvmlComputeInstanceGetInfo, KDEV_NVML_CAP_MIG, "nvmlComputeInstanceGetInfo_v2",      \
          "nvmlComputeInstanceGetInfo", NULL)                                                  \
        X(nvmlDeviceGetUtilizationRates, KDEV_NVML_CAP_USAGE, "nvmlDeviceGetUtilizationRates", \
          NULL, NULL)                                                                          \
        X(nvmlDeviceGetComputeRunningProcesses, KDEV_NVML_CAP_USAGE,                           \
          "nvmlDeviceGetComputeRunningProcesses_v3", "nvmlDeviceGetComputeRunningProcesses_v2", \
          NULL)                                                                                \
        X(nvmlDeviceGetProcessUtilization, KDEV_NVML_CAP_PROC_UTIL,                            \
          "nvmlDeviceGetProcessUtilization", NULL, NULL)                                       \
        X(nvmlDeviceGetGpuInstancePossiblePlacements, KDEV_NVML_CAP_MIG_CONFIG,                \
          "nvmlDeviceGetGpuInstancePossiblePlacements_v2", NULL, NULL)                         \
        X(nvmlDeviceGetGpuInstanceRemainingCapacity, KDEV_NVML_CAP_MIG_CONFIG,                 \
          "nvmlDeviceGetGpuInstanceRemainingCapacity", NULL, NULL)                             \
        X(nvmlDeviceCreateGpuInstance, KDEV_NVML_CAP_MIG_CONFIG,                               \
          "nvmlDeviceCreateGpuInstance", NULL, NULL)                                           \
        X(nvmlDeviceCreateGpuInstanceWithPlacement, KDEV_NVML_CAP_MIG_CONFIG,                  \
          "nvmlDeviceCreateGpuInstanceWithPlacement", NULL, NULL)                              \
        X(nvmlDeviceGetGpuInstances, KDEV_NVML_CAP_MIG_CONFIG,                                 \
          "nvmlDeviceGetGpuInstances", NULL, NULL)                                             \
        X(nvmlGpuInstanceDestroy, KDEV_NVML_CAP_MIG_CONFIG,                                    \
          "nvmlGpuInstanceDestroy", NULL, NULL)                                                \
        X(nvmlGpuInstanceGetComputeInstancePossiblePlacements, KDEV_NVML_CAP_MIG_CONFIG,       \
          "nvmlGpuInstanceGetComputeInstancePossiblePlacements", NULL, NULL)                   \
        X(nvmlGpuInstanceGetComputeInstanceRemainingCapacity, KDEV_NVML_CAP_MIG_CONFIG,        \
          "nvmlGpuInstanceGetComputeInstanceRemainingCapacity", NULL, NULL)                    \
        X(nvmlGpuInstanceCreateComputeInstance, KDEV_NVML_CAP_MIG_CONFIG,                      \
          "nvmlGpuInstanceCreateComputeInstance", NULL, NULL)                                  \
        X(nvmlGpuInstanceCreateComputeInstanceWithPlacement, KDEV_NVML_CAP_MIG_CONFIG,         \
          "nvmlGpuInstanceCreateComputeInstanceWithPlacement", NULL, NULL)                     \
        X(nvmlGpuInstanceGetComputeInstances, KDEV_NVML_CAP_MIG_CONFIG,                        \
          "nvmlGpuInstanceGetComputeInstances", NULL, NULL)                                    \
        X(nvmlComputeInstanceDestroy, KDEV_NVML_CAP_MIG_CONFIG,                                \
          "nvmlComputeInstanceDestroy", NULL, NULL)

/* The typed table. A member is NULL only when its capability flag is clear. */
struct kdev_nvml_api {
#define KDEV_NVML_X_FIELD(field, cap, n0, n1, n2) kdev_##field##_fn *field;
        KDEV_NVML_SYMBOLS(KDEV_NVML_X_FIELD)
#undef KDEV_NVML_X_FIELD
};

/* The library name kdev opens, as NVIDIA's plugin does (cmd/nvidia-device-plugin/root.go). */
#define KDEV_NVML_LIBRARY "libnvidia-ml.so.1"

struct kdev_nvml_options {
        /* Explicit path of the library (tests, the mock); wins over driver_root.
         * NULL: search as below. */
        const char *library_path;
        /* Driver root. NULL, "" or "/": dlopen("libnvidia-ml.so.1") through the
         * dynamic loader's search path. Otherwise the first of
         * <root>/usr/lib64, /usr/lib/x86_64-linux-gnu, /usr/lib/aarch64-linux-gnu,
         * /lib64, /lib/x86_64-linux-gnu, /lib/aarch64-linux-gnu that holds
         * libnvidia-ml.so.1 (NVIDIA's plugin, cmd/nvidia-device-plugin/root.go). */
        const char *driver_root;
};

/* The library under driver root |root| (not "/"): the first of
 * <root>/usr/lib64, /usr/lib/x86_64-linux-gnu, /usr/lib/aarch64-linux-gnu,
 * /lib64, /lib/x86_64-linux-gnu, /lib/aarch64-linux-gnu/libnvidia-ml.so.1
 * that stat(2) finds a regular file (symbolic links followed), as NVIDIA's
 * plugin searches (cmd/nvidia-device-plugin/root.go tryResolveLibrary).
 * Writes the path to |buf| (|size| bytes) and returns 0; -EOPNOTSUPP "NVML
 * library libnvidia-ml.so.1 not found under driver root <root> (searched
 * <dirs>)" or -ENAMETOOLONG with |err|. */
KDEV_API int kdev_nvml_find_library(const char *root, char *buf, size_t size,
                                    struct kdev_err *err);

/* One loaded library. Opaque. */
struct kdev_nvml;

/* Opens the library and resolves the table.
 * |opts| may be NULL (defaults). On success *|out| owns the handle; release it
 * with kdev_nvml_close(). NVML itself is not initialised (kdev_nvml_init).
 * Errors:
 *   -EOPNOTSUPP  the library is absent: "NVML library libnvidia-ml.so.1 not
 *                found: <dlerror>" (or "... not found under driver root <root>
 *                (searched <dirs>)", or for an explicit path that does not
 *                exist "NVML library <path> not found: <dlerror>");
 *   -ELIBBAD     an explicit path exists but cannot be loaded:
 *                "cannot load NVML library <path>: <dlerror>";
 *   -ENOSYS      a required entry point is missing:
 *                "NVML library <path>: missing required symbol <name0>[ (or
 *                <name1>[ or <name2>])]: <dlerror of the last name tried>",
 *                where <path> is the file the dynamic loader mapped;
 *   -ENOMEM. */
KDEV_API int kdev_nvml_open(const struct kdev_nvml_options *opts, struct kdev_nvml **out,
                            struct kdev_err *err);

/* Closes |lib| (NULL-safe): if kdev-side init references remain, NVML is shut
 * down once first; then dlclose and free. */
KDEV_API void kdev_nvml_close(struct kdev_nvml *lib);

/* The resolved table (valid until kdev_nvml_close). */
KDEV_API const struct kdev_nvml_api *kdev_nvml_api(const struct kdev_nvml *lib);

/* Bitwise OR of the KDEV_NVML_CAP_* groups whose entry points were all found. */
KDEV_API unsigned kdev_nvml_caps(const struct kdev_nvml *lib);

/* The path of the mapped library file (from dlinfo), e.g.
 * "/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1". */
KDEV_API const char *kdev_nvml_path(const struct kdev_nvml *lib);

/* Refcounted NVML initialisation. The first call (count 0 → 1) calls
 * nvmlInit_v2 (or nvmlInit); later calls only count. Returns 0, or on
 * failure of nvmlInit the negative errno of kdev_nvml_errno() with
 * "nvml init failed: <nvmlErrorString>" (the count is unchanged). */
KDEV_API int kdev_nvml_init(struct kdev_nvml *lib, struct kdev_err *err);

/* Drops one reference; the last one (1 → 0) calls nvmlShutdown. Returns 0;
 * -EALREADY "nvml shutdown without a matching init" when the count is 0
 * (NVML is not called); or, when nvmlShutdown fails, the negative errno of
 * kdev_nvml_errno() with "nvml shutdown failed: <nvmlErrorString>" (the
 * count still drops to 0). */
KDEV_API int kdev_nvml_shutdown(struct kdev_nvml *lib, struct kdev_err *err);

/* The current kdev-side init count. */
KDEV_API unsigned kdev_nvml_refs(struct kdev_nvml *lib);

/* The library's nvmlErrorString(|r|); with |lib| NULL (or a NULL result) a
 * built-in string with the same wording for the codes in nvml_api.h, and
 * "Unknown Error" for others. Never NULL; static storage. */
KDEV_API const char *kdev_nvml_strerror(const struct kdev_nvml *lib, nvmlReturn_t r);

/* Maps an NVML return code to a negative errno (0 for NVML_SUCCESS):
 * UNINITIALIZED -EBADF, INVALID_ARGUMENT -EINVAL, NOT_SUPPORTED -EOPNOTSUPP,
 * NO_PERMISSION -EACCES, ALREADY_INITIALIZED -EALREADY, NOT_FOUND -ENOENT,
 * INSUFFICIENT_SIZE -ENOBUFS, DRIVER_NOT_LOADED -ENODEV, TIMEOUT -ETIMEDOUT,
 * LIBRARY_NOT_FOUND -ELIBACC, FUNCTION_NOT_FOUND -ENOSYS, GPU_IS_LOST -ENXIO,
 * RESET_REQUIRED -ESTALE, LIB_RM_VERSION_MISMATCH -ELIBBAD, IN_USE -EBUSY,
 * MEMORY -ENOMEM, NO_DATA -ENODATA, everything else -EIO. */
KDEV_API int kdev_nvml_errno(nvmlReturn_t r);

/* Error helper for NVML callers: when |r| is NVML_SUCCESS returns 0;
 * otherwise sets |err| to "<context>: <nvmlErrorString(r)>" (context
 * printf-formatted) and returns kdev_nvml_errno(r). */
KDEV_API int kdev_nvml_fail(const struct kdev_nvml *lib, nvmlReturn_t r, struct kdev_err *err,
                            const char *fmt, ...) __attribute__((format(printf, 4, 5)));

/* Introspection of the symbol table (tests, `kdevctl`-style diagnostics). */
struct kdev_nvml_symbol {
        const char *field;      /* the table member, e.g. "nvmlDeviceGetPciInfo" */
        const char *names[3];   /* names tried, newest first; unused slots NULL */
        unsigned cap;           /* KDEV_NVML_REQUIRED or one KDEV_NVML_CAP_* flag */
        const char *resolved;   /* the name found in |lib|, NULL if none (or lib NULL) */
};

/* Number of entry points in KDEV_NVML_SYMBOLS. */
KDEV_API size_t kdev_nvml_symbol_count(void);

/* Fills |out| for entry |i| (< kdev_nvml_symbol_count()); |lib| may be NULL.
 * Returns 0 or -ERANGE. */
KDEV_API int kdev_nvml_symbol_info(const struct kdev_nvml *lib, size_t i,
                                   struct kdev_nvml_symbol *out);

#endif /* KDEV_NVML_LOADER_H */
