/* The subset of the NVML C API that kdev uses: return codes, enums, constants,
 * structs and function types.
 *
 * Written by kdev from the nvml.h that go-nvml v0.13.3-1 vendors
 * (pkg/nvml/nvml.h, NVML API version 13) plus the public NVML documentation for
 * nvmlDeviceGetArchitecture and nvmlDeviceGetRemappedRows. It is not NVIDIA's
 * nvml.h: only the names kdev needs, with the same values and struct layouts,
 * so that binaries built against it talk to the real libnvidia-ml.so.1.
 *
 * Both the loader (src/nvml/loader.c) and the mock library (mock/nvml/) use
 * this header; the mock declares every function it exports through the
 * kdev_nvml*_fn types below, so the compiler rejects any drift between the
 * types the loader calls through and the functions the mock defines.
 *
 * No function is declared here: kdev never links against NVML, it resolves
 * every symbol with dlsym (src/nvml/loader.h).
 */
#ifndef KDEV_NVML_NVML_API_H
#define KDEV_NVML_NVML_API_H

/* --- return codes (nvmlReturn_t), nvml.h ------------------------------------ */
typedef enum nvmlReturn_enum {
        NVML_SUCCESS = 0,
        NVML_ERROR_UNINITIALIZED = 1,
        NVML_ERROR_INVALID_ARGUMENT = 2,
        NVML_ERROR_NOT_SUPPORTED = 3,
        NVML_ERROR_NO_PERMISSION = 4,
        NVML_ERROR_ALREADY_INITIALIZED = 5,
        NVML_ERROR_NOT_FOUND = 6,
        NVML_ERROR_INSUFFICIENT_SIZE = 7,
        NVML_ERROR_INSUFFICIENT_POWER = 8,
        NVML_ERROR_DRIVER_NOT_LOADED = 9,
        NVML_ERROR_TIMEOUT = 10,
        NVML_ERROR_IRQ_ISSUE = 11,
        NVML_ERROR_LIBRARY_NOT_FOUND = 12,
        NVML_ERROR_FUNCTION_NOT_FOUND = 13,
        NVML_ERROR_CORRUPTED_INFOROM = 14,
        NVML_ERROR_GPU_IS_LOST = 15,
        NVML_ERROR_RESET_REQUIRED = 16,
        NVML_ERROR_OPERATING_SYSTEM = 17,
        NVML_ERROR_LIB_RM_VERSION_MISMATCH = 18,
        NVML_ERROR_IN_USE = 19,
        NVML_ERROR_MEMORY = 20,
        NVML_ERROR_NO_DATA = 21,
        NVML_ERROR_VGPU_ECC_NOT_SUPPORTED = 22,
        NVML_ERROR_INSUFFICIENT_RESOURCES = 23,
        NVML_ERROR_FREQ_NOT_SUPPORTED = 24,
        NVML_ERROR_ARGUMENT_VERSION_MISMATCH = 25,
        NVML_ERROR_DEPRECATED = 26,
        NVML_ERROR_NOT_READY = 27,
        NVML_ERROR_GPU_NOT_FOUND = 28,
        NVML_ERROR_INVALID_STATE = 29,
        NVML_ERROR_RESET_TYPE_NOT_SUPPORTED = 30,
        NVML_ERROR_UNKNOWN = 999
} nvmlReturn_t;

/* --- opaque handles ------------------------------------------------------- */
typedef struct nvmlDevice_st *nvmlDevice_t;
typedef struct nvmlGpuInstance_st *nvmlGpuInstance_t;
typedef struct nvmlComputeInstance_st *nvmlComputeInstance_t;
typedef struct nvmlEventSet_st *nvmlEventSet_t;

/* --- buffer sizes, nvml.h ------------------------------------------------ */
#define NVML_DEVICE_UUID_BUFFER_SIZE 80
#define NVML_DEVICE_UUID_V2_BUFFER_SIZE 96
#define NVML_DEVICE_NAME_BUFFER_SIZE 64
#define NVML_DEVICE_NAME_V2_BUFFER_SIZE 96
#define NVML_SYSTEM_DRIVER_VERSION_BUFFER_SIZE 80
#define NVML_DEVICE_PCI_BUS_ID_BUFFER_SIZE 32
#define NVML_DEVICE_PCI_BUS_ID_BUFFER_V2_SIZE 16
#define NVML_NVLINK_MAX_LINKS 36

/* --- event types (unsigned long long masks) -------------------------------- */
#define nvmlEventTypeSingleBitEccError 0x0000000000000001LL
#define nvmlEventTypeDoubleBitEccError 0x0000000000000002LL
#define nvmlEventTypePState 0x0000000000000004LL
#define nvmlEventTypeXidCriticalError 0x0000000000000008LL
#define nvmlEventTypeClock 0x0000000000000010LL
#define nvmlEventTypePowerSourceChange 0x0000000000000080LL
#define nvmlEventTypeSingleBitEccErrorStorm 0x0000000000000200LL
#define nvmlEventTypeDramRetirementEvent 0x0000000000000400LL
#define nvmlEventTypeDramRetirementFailure 0x0000000000000800LL
#define nvmlEventTypeNonFatalPoisonError 0x0000000000001000LL
#define nvmlEventTypeFatalPoisonError 0x0000000000002000LL
#define nvmlEventTypeGpuUnavailableError 0x0000000000004000LL
#define nvmlEventTypeGpuRecoveryAction 0x0000000000008000LL

/* GPU/compute instance id of an event that is not attributable to one. */
#define KDEV_NVML_NO_INSTANCE 0xFFFFFFFFu

/* --- enums ---------------------------------------------------------------- */
typedef enum nvmlEnableState_enum {
        NVML_FEATURE_DISABLED = 0,
        NVML_FEATURE_ENABLED = 1
} nvmlEnableState_t;

#define NVML_DEVICE_MIG_DISABLE 0
#define NVML_DEVICE_MIG_ENABLE 1

typedef enum nvmlGpuLevel_enum {
        NVML_TOPOLOGY_INTERNAL = 0,
        NVML_TOPOLOGY_SINGLE = 10,
        NVML_TOPOLOGY_MULTIPLE = 20,
        NVML_TOPOLOGY_HOSTBRIDGE = 30,
        NVML_TOPOLOGY_NODE = 40,
        NVML_TOPOLOGY_SYSTEM = 50
} nvmlGpuTopologyLevel_t;

typedef unsigned int nvmlDeviceArchitecture_t;
#define NVML_DEVICE_ARCH_KEPLER 2
#define NVML_DEVICE_ARCH_MAXWELL 3
#define NVML_DEVICE_ARCH_PASCAL 4
#define NVML_DEVICE_ARCH_VOLTA 5
#define NVML_DEVICE_ARCH_TURING 6
#define NVML_DEVICE_ARCH_AMPERE 7
#define NVML_DEVICE_ARCH_ADA 8
#define NVML_DEVICE_ARCH_HOPPER 9
#define NVML_DEVICE_ARCH_BLACKWELL 10
#define NVML_DEVICE_ARCH_UNKNOWN 0xffffffffu

/* nvmlDeviceGetBrand's answer (nvml.h nvmlBrandType_t; 11 is also VGAMING). */
typedef unsigned int nvmlBrandType_t;
#define NVML_BRAND_UNKNOWN 0
#define NVML_BRAND_QUADRO 1
#define NVML_BRAND_TESLA 2
#define NVML_BRAND_NVS 3
#define NVML_BRAND_GRID 4
#define NVML_BRAND_GEFORCE 5
#define NVML_BRAND_TITAN 6
#define NVML_BRAND_NVIDIA_VAPPS 7
#define NVML_BRAND_NVIDIA_VPC 8
#define NVML_BRAND_NVIDIA_VCS 9
#define NVML_BRAND_NVIDIA_VWS 10
#define NVML_BRAND_NVIDIA_CLOUD_GAMING 11
#define NVML_BRAND_QUADRO_RTX 12
#define NVML_BRAND_NVIDIA_RTX 13
#define NVML_BRAND_NVIDIA 14
#define NVML_BRAND_GEFORCE_RTX 15
#define NVML_BRAND_TITAN_RTX 16

/* GPU-instance profile *indices* (not the driver profile ids), nvml.h. */
#define NVML_GPU_INSTANCE_PROFILE_1_SLICE 0x0
#define NVML_GPU_INSTANCE_PROFILE_2_SLICE 0x1
#define NVML_GPU_INSTANCE_PROFILE_3_SLICE 0x2
#define NVML_GPU_INSTANCE_PROFILE_4_SLICE 0x3
#define NVML_GPU_INSTANCE_PROFILE_7_SLICE 0x4
#define NVML_GPU_INSTANCE_PROFILE_8_SLICE 0x5
#define NVML_GPU_INSTANCE_PROFILE_6_SLICE 0x6
#define NVML_GPU_INSTANCE_PROFILE_1_SLICE_REV1 0x7
#define NVML_GPU_INSTANCE_PROFILE_2_SLICE_REV1 0x8
#define NVML_GPU_INSTANCE_PROFILE_1_SLICE_REV2 0x9
#define NVML_GPU_INSTANCE_PROFILE_1_SLICE_GFX 0xA
#define NVML_GPU_INSTANCE_PROFILE_2_SLICE_GFX 0xB
#define NVML_GPU_INSTANCE_PROFILE_4_SLICE_GFX 0xC
#define NVML_GPU_INSTANCE_PROFILE_1_SLICE_NO_ME 0xD
#define NVML_GPU_INSTANCE_PROFILE_2_SLICE_NO_ME 0xE
#define NVML_GPU_INSTANCE_PROFILE_1_SLICE_ALL_ME 0xF
#define NVML_GPU_INSTANCE_PROFILE_2_SLICE_ALL_ME 0x10
#define NVML_GPU_INSTANCE_PROFILE_3_SLICE_GFX 0x11
#define NVML_GPU_INSTANCE_PROFILE_COUNT 0x12

/* Compute-instance profile indices and the engine profile, nvml.h. */
#define NVML_COMPUTE_INSTANCE_PROFILE_1_SLICE 0x0
#define NVML_COMPUTE_INSTANCE_PROFILE_2_SLICE 0x1
#define NVML_COMPUTE_INSTANCE_PROFILE_3_SLICE 0x2
#define NVML_COMPUTE_INSTANCE_PROFILE_4_SLICE 0x3
#define NVML_COMPUTE_INSTANCE_PROFILE_7_SLICE 0x4
#define NVML_COMPUTE_INSTANCE_PROFILE_8_SLICE 0x5
#define NVML_COMPUTE_INSTANCE_PROFILE_6_SLICE 0x6
#define NVML_COMPUTE_INSTANCE_PROFILE_1_SLICE_REV1 0x7
#define NVML_COMPUTE_INSTANCE_PROFILE_7_SLICE_NVL 0x8
#define NVML_COMPUTE_INSTANCE_PROFILE_COUNT 0x9
#define NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED 0x0
#define NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_COUNT 0x1

/* --- structs, nvml.h (all plain members are 32-bit unsigned) ---------------- */
typedef struct nvmlPciInfo_st {
        char busIdLegacy[NVML_DEVICE_PCI_BUS_ID_BUFFER_V2_SIZE];
        unsigned int domain;
        unsigned int bus;
        unsigned int device;
        unsigned int pciDeviceId;     /* device id << 16 | 0x10DE */
        unsigned int pciSubSystemId;
        char busId[NVML_DEVICE_PCI_BUS_ID_BUFFER_SIZE]; /* "%08X:%02X:%02X.0" */
} nvmlPciInfo_t;

typedef struct nvmlMemory_st {
        unsigned long long total;     /* bytes */
        unsigned long long free;
        unsigned long long used;
} nvmlMemory_t;

/* nvmlDeviceGetUtilizationRates: percent of the last sample period
 * (between 1/6 s and 1 s, by product) during which a kernel ran, resp.
 * device memory was read or written. */
typedef struct nvmlUtilization_st {
        unsigned int gpu;
        unsigned int memory;
} nvmlUtilization_t;

/* NVML's "value not available" (nvmlProcessInfo_t.usedGpuMemory under WDDM). */
#define NVML_VALUE_NOT_AVAILABLE (~0ULL)

/* A running process, as nvmlDeviceGetComputeRunningProcesses_v3 and _v2
 * fill it (nvmlProcessInfo_v2_t; the v1 record lacks the instance IDs and
 * is not used). */
typedef struct nvmlProcessInfo_st {
        unsigned int pid;
        unsigned long long usedGpuMemory; /* bytes, or NVML_VALUE_NOT_AVAILABLE */
        unsigned int gpuInstanceId;       /* KDEV_NVML_NO_INSTANCE outside MIG */
        unsigned int computeInstanceId;
} nvmlProcessInfo_t;

/* One per-process sample of nvmlDeviceGetProcessUtilization (percent). */
typedef struct nvmlProcessUtilizationSample_st {
        unsigned int pid;
        unsigned long long timeStamp;     /* CPU timestamp, microseconds */
        unsigned int smUtil;
        unsigned int memUtil;
        unsigned int encUtil;
        unsigned int decUtil;
} nvmlProcessUtilizationSample_t;

typedef struct nvmlDeviceAttributes_st {
        unsigned int multiprocessorCount;
        unsigned int sharedCopyEngineCount;
        unsigned int sharedDecoderCount;
        unsigned int sharedEncoderCount;
        unsigned int sharedJpegCount;
        unsigned int sharedOfaCount;
        unsigned int gpuInstanceSliceCount;
        unsigned int computeInstanceSliceCount;
        unsigned long long memorySizeMB;   /* MiB */
} nvmlDeviceAttributes_t;

typedef struct nvmlGpuInstanceProfileInfo_st {
        unsigned int id;              /* driver profile id, e.g. 19 for 1g */
        unsigned int isP2pSupported;
        unsigned int sliceCount;
        unsigned int instanceCount;
        unsigned int multiprocessorCount;
        unsigned int copyEngineCount;
        unsigned int decoderCount;
        unsigned int encoderCount;
        unsigned int jpegCount;
        unsigned int ofaCount;
        unsigned long long memorySizeMB;   /* MiB */
} nvmlGpuInstanceProfileInfo_t;

typedef struct nvmlGpuInstancePlacement_st {
        unsigned int start;
        unsigned int size;
} nvmlGpuInstancePlacement_t;

typedef struct nvmlGpuInstanceInfo_st {
        nvmlDevice_t device;
        unsigned int id;
        unsigned int profileId;
        nvmlGpuInstancePlacement_t placement;
} nvmlGpuInstanceInfo_t;

typedef struct nvmlComputeInstanceProfileInfo_st {
        unsigned int id;
        unsigned int sliceCount;
        unsigned int instanceCount;
        unsigned int multiprocessorCount;
        unsigned int sharedCopyEngineCount;
        unsigned int sharedDecoderCount;
        unsigned int sharedEncoderCount;
        unsigned int sharedJpegCount;
        unsigned int sharedOfaCount;
} nvmlComputeInstanceProfileInfo_t;

typedef struct nvmlComputeInstancePlacement_st {
        unsigned int start;
        unsigned int size;
} nvmlComputeInstancePlacement_t;

typedef struct nvmlComputeInstanceInfo_st {
        nvmlDevice_t device;
        nvmlGpuInstance_t gpuInstance;
        unsigned int id;
        unsigned int profileId;
        nvmlComputeInstancePlacement_t placement;
} nvmlComputeInstanceInfo_t;

typedef struct nvmlEventData_st {
        nvmlDevice_t device;
        unsigned long long eventType;
        unsigned long long eventData;  /* the XID for XidCriticalError; 999 = unknown */
        unsigned int gpuInstanceId;    /* KDEV_NVML_NO_INSTANCE when not attributable */
        unsigned int computeInstanceId;
} nvmlEventData_t;

/* --- function types --------------------------------------------------------
 * One function type per NVML entry point kdev resolves, named
 * kdev_<unversioned NVML name>_fn. Versioned and unversioned symbols of one
 * entry point share the type (go-nvml v0.13.3-1 pkg/nvml resolves the same pairs). */
typedef nvmlReturn_t kdev_nvmlInit_fn(void);
typedef nvmlReturn_t kdev_nvmlShutdown_fn(void);
typedef const char *kdev_nvmlErrorString_fn(nvmlReturn_t result);
typedef nvmlReturn_t kdev_nvmlSystemGetDriverVersion_fn(char *version, unsigned int length);
typedef nvmlReturn_t kdev_nvmlSystemGetCudaDriverVersion_fn(int *cudaDriverVersion);
typedef nvmlReturn_t kdev_nvmlDeviceGetCount_fn(unsigned int *deviceCount);
typedef nvmlReturn_t kdev_nvmlDeviceGetHandleByIndex_fn(unsigned int index, nvmlDevice_t *device);
typedef nvmlReturn_t kdev_nvmlDeviceGetHandleByUUID_fn(const char *uuid, nvmlDevice_t *device);
typedef nvmlReturn_t kdev_nvmlDeviceGetUUID_fn(nvmlDevice_t device, char *uuid,
                                               unsigned int length);
typedef nvmlReturn_t kdev_nvmlDeviceGetName_fn(nvmlDevice_t device, char *name,
                                               unsigned int length);
typedef nvmlReturn_t kdev_nvmlDeviceGetIndex_fn(nvmlDevice_t device, unsigned int *index);
typedef nvmlReturn_t kdev_nvmlDeviceGetMinorNumber_fn(nvmlDevice_t device,
                                                      unsigned int *minorNumber);
typedef nvmlReturn_t kdev_nvmlDeviceGetPciInfo_fn(nvmlDevice_t device, nvmlPciInfo_t *pci);
typedef nvmlReturn_t kdev_nvmlDeviceGetMemoryInfo_fn(nvmlDevice_t device, nvmlMemory_t *memory);
typedef nvmlReturn_t kdev_nvmlDeviceGetUtilizationRates_fn(nvmlDevice_t device,
                                                          nvmlUtilization_t *utilization);
/* |infoCount|: in, the room in |infos|; out, the processes (with
 * NVML_ERROR_INSUFFICIENT_SIZE when they do not fit; |infos| may then be
 * NULL with *infoCount 0 to ask for the count). */
typedef nvmlReturn_t kdev_nvmlDeviceGetComputeRunningProcesses_fn(nvmlDevice_t device,
                                                                  unsigned int *infoCount,
                                                                  nvmlProcessInfo_t *infos);
/* Samples newer than |lastSeenTimeStamp| (microseconds; 0: every sample the
 * driver holds); |utilization| NULL asks for the count (answered with
 * NVML_ERROR_INSUFFICIENT_SIZE); NVML_ERROR_NOT_FOUND when none is newer. */
typedef nvmlReturn_t kdev_nvmlDeviceGetProcessUtilization_fn(
        nvmlDevice_t device, nvmlProcessUtilizationSample_t *utilization,
        unsigned int *processSamplesCount, unsigned long long lastSeenTimeStamp);
typedef nvmlReturn_t kdev_nvmlDeviceGetCudaComputeCapability_fn(nvmlDevice_t device, int *major,
                                                                int *minor);
typedef nvmlReturn_t kdev_nvmlDeviceGetArchitecture_fn(nvmlDevice_t device,
                                                       nvmlDeviceArchitecture_t *arch);
typedef nvmlReturn_t kdev_nvmlDeviceGetBrand_fn(nvmlDevice_t device, nvmlBrandType_t *type);
typedef nvmlReturn_t kdev_nvmlDeviceGetRemappedRows_fn(nvmlDevice_t device, unsigned int *corrRows,
                                                       unsigned int *uncRows,
                                                       unsigned int *isPending,
                                                       unsigned int *failureOccurred);
typedef nvmlReturn_t kdev_nvmlDeviceGetMigMode_fn(nvmlDevice_t device, unsigned int *currentMode,
                                                  unsigned int *pendingMode);
typedef nvmlReturn_t kdev_nvmlDeviceGetMaxMigDeviceCount_fn(nvmlDevice_t device,
                                                            unsigned int *count);
typedef nvmlReturn_t kdev_nvmlDeviceGetMigDeviceHandleByIndex_fn(nvmlDevice_t device,
                                                                 unsigned int index,
                                                                 nvmlDevice_t *migDevice);
typedef nvmlReturn_t kdev_nvmlDeviceIsMigDeviceHandle_fn(nvmlDevice_t device,
                                                         unsigned int *isMigDevice);
typedef nvmlReturn_t kdev_nvmlDeviceGetDeviceHandleFromMigDeviceHandle_fn(nvmlDevice_t migDevice,
                                                                          nvmlDevice_t *device);
typedef nvmlReturn_t kdev_nvmlDeviceGetGpuInstanceId_fn(nvmlDevice_t device, unsigned int *id);
typedef nvmlReturn_t kdev_nvmlDeviceGetComputeInstanceId_fn(nvmlDevice_t device,
                                                            unsigned int *id);
typedef nvmlReturn_t kdev_nvmlDeviceGetAttributes_fn(nvmlDevice_t device,
                                                     nvmlDeviceAttributes_t *attributes);
typedef nvmlReturn_t kdev_nvmlDeviceGetGpuInstanceProfileInfo_fn(
        nvmlDevice_t device, unsigned int profile, nvmlGpuInstanceProfileInfo_t *info);
typedef nvmlReturn_t kdev_nvmlDeviceGetGpuInstanceById_fn(nvmlDevice_t device, unsigned int id,
                                                          nvmlGpuInstance_t *gpuInstance);
typedef nvmlReturn_t kdev_nvmlGpuInstanceGetInfo_fn(nvmlGpuInstance_t gpuInstance,
                                                    nvmlGpuInstanceInfo_t *info);
typedef nvmlReturn_t kdev_nvmlGpuInstanceGetComputeInstanceProfileInfo_fn(
        nvmlGpuInstance_t gpuInstance, unsigned int profile, unsigned int engProfile,
        nvmlComputeInstanceProfileInfo_t *info);
typedef nvmlReturn_t kdev_nvmlGpuInstanceGetComputeInstanceById_fn(
        nvmlGpuInstance_t gpuInstance, unsigned int id, nvmlComputeInstance_t *computeInstance);
typedef nvmlReturn_t kdev_nvmlComputeInstanceGetInfo_fn(nvmlComputeInstance_t computeInstance,
                                                        nvmlComputeInstanceInfo_t *info);
/* Dynamic MIG (GPU and compute instance creation and destruction). The
 * |profileId| arguments are driver profile ids (nvmlGpuInstanceProfileInfo_t
 * and nvmlComputeInstanceProfileInfo_t .id), not profile indices. */
/* |placements| NULL asks for the count; otherwise it must hold them all. */
typedef nvmlReturn_t kdev_nvmlDeviceGetGpuInstancePossiblePlacements_fn(
        nvmlDevice_t device, unsigned int profileId, nvmlGpuInstancePlacement_t *placements,
        unsigned int *count);
typedef nvmlReturn_t kdev_nvmlDeviceGetGpuInstanceRemainingCapacity_fn(nvmlDevice_t device,
                                                                      unsigned int profileId,
                                                                      unsigned int *count);
typedef nvmlReturn_t kdev_nvmlDeviceCreateGpuInstance_fn(nvmlDevice_t device,
                                                         unsigned int profileId,
                                                         nvmlGpuInstance_t *gpuInstance);
typedef nvmlReturn_t kdev_nvmlDeviceCreateGpuInstanceWithPlacement_fn(
        nvmlDevice_t device, unsigned int profileId, const nvmlGpuInstancePlacement_t *placement,
        nvmlGpuInstance_t *gpuInstance);
/* |gpuInstances| must hold the profile's instanceCount handles. */
typedef nvmlReturn_t kdev_nvmlDeviceGetGpuInstances_fn(nvmlDevice_t device, unsigned int profileId,
                                                       nvmlGpuInstance_t *gpuInstances,
                                                       unsigned int *count);
typedef nvmlReturn_t kdev_nvmlGpuInstanceDestroy_fn(nvmlGpuInstance_t gpuInstance);
typedef nvmlReturn_t kdev_nvmlGpuInstanceGetComputeInstancePossiblePlacements_fn(
        nvmlGpuInstance_t gpuInstance, unsigned int profileId,
        nvmlComputeInstancePlacement_t *placements, unsigned int *count);
typedef nvmlReturn_t kdev_nvmlGpuInstanceGetComputeInstanceRemainingCapacity_fn(
        nvmlGpuInstance_t gpuInstance, unsigned int profileId, unsigned int *count);
typedef nvmlReturn_t kdev_nvmlGpuInstanceCreateComputeInstance_fn(
        nvmlGpuInstance_t gpuInstance, unsigned int profileId,
        nvmlComputeInstance_t *computeInstance);
typedef nvmlReturn_t kdev_nvmlGpuInstanceCreateComputeInstanceWithPlacement_fn(
        nvmlGpuInstance_t gpuInstance, unsigned int profileId,
        const nvmlComputeInstancePlacement_t *placement, nvmlComputeInstance_t *computeInstance);
/* |computeInstances| must hold the profile's instanceCount handles. */
typedef nvmlReturn_t kdev_nvmlGpuInstanceGetComputeInstances_fn(
        nvmlGpuInstance_t gpuInstance, unsigned int profileId,
        nvmlComputeInstance_t *computeInstances, unsigned int *count);
typedef nvmlReturn_t kdev_nvmlComputeInstanceDestroy_fn(nvmlComputeInstance_t computeInstance);
typedef nvmlReturn_t kdev_nvmlEventSetCreate_fn(nvmlEventSet_t *set);
typedef nvmlReturn_t kdev_nvmlEventSetFree_fn(nvmlEventSet_t set);
typedef nvmlReturn_t kdev_nvmlEventSetWait_fn(nvmlEventSet_t set, nvmlEventData_t *data,
                                              unsigned int timeoutms);
typedef nvmlReturn_t kdev_nvmlDeviceGetSupportedEventTypes_fn(nvmlDevice_t device,
                                                              unsigned long long *eventTypes);
typedef nvmlReturn_t kdev_nvmlDeviceRegisterEvents_fn(nvmlDevice_t device,
                                                      unsigned long long eventTypes,
                                                      nvmlEventSet_t set);
typedef nvmlReturn_t kdev_nvmlDeviceGetTopologyCommonAncestor_fn(
        nvmlDevice_t device1, nvmlDevice_t device2, nvmlGpuTopologyLevel_t *pathInfo);
typedef nvmlReturn_t kdev_nvmlDeviceGetNvLinkState_fn(nvmlDevice_t device, unsigned int link,
                                                      nvmlEnableState_t *isActive);
typedef nvmlReturn_t kdev_nvmlDeviceGetNvLinkRemotePciInfo_fn(nvmlDevice_t device,
                                                              unsigned int link,
                                                              nvmlPciInfo_t *pci);

/* The message nvmlErrorString gives for |r| (the mock returns these; the
 * loader falls back to them when the library returns NULL). */
static inline const char *kdev_nvml_builtin_strerror(nvmlReturn_t r)
{
        switch (r) {
        case NVML_SUCCESS: return "Success";
        case NVML_ERROR_UNINITIALIZED: return "Uninitialized";
        case NVML_ERROR_INVALID_ARGUMENT: return "Invalid Argument";
        case NVML_ERROR_NOT_SUPPORTED: return "Not Supported";
        case NVML_ERROR_NO_PERMISSION: return "Insufficient Permissions";
        case NVML_ERROR_ALREADY_INITIALIZED: return "Already Initialized";
        case NVML_ERROR_NOT_FOUND: return "Not Found";
        case NVML_ERROR_INSUFFICIENT_SIZE: return "Insufficient Size";
        case NVML_ERROR_INSUFFICIENT_POWER: return "Insufficient External Power";
        case NVML_ERROR_DRIVER_NOT_LOADED: return "Driver Not Loaded";
        case NVML_ERROR_TIMEOUT: return "Timeout";
        case NVML_ERROR_IRQ_ISSUE: return "Interrupt request issue";
        case NVML_ERROR_LIBRARY_NOT_FOUND: return "NVML Shared Library Not Found";
        case NVML_ERROR_FUNCTION_NOT_FOUND: return "Function Not Found";
        case NVML_ERROR_CORRUPTED_INFOROM: return "Corrupted infoROM";
        case NVML_ERROR_GPU_IS_LOST: return "GPU is lost";
        case NVML_ERROR_RESET_REQUIRED: return "GPU requires restart";
        case NVML_ERROR_OPERATING_SYSTEM: return "The operating system has blocked the request.";
        case NVML_ERROR_LIB_RM_VERSION_MISMATCH: return "RM has detected an NVML/RM version mismatch.";
        case NVML_ERROR_IN_USE: return "In use by another client";
        case NVML_ERROR_MEMORY: return "Insufficient Memory";
        case NVML_ERROR_NO_DATA: return "No data";
        case NVML_ERROR_VGPU_ECC_NOT_SUPPORTED:
                return "vGPU operation not available while ECC is enabled";
        case NVML_ERROR_INSUFFICIENT_RESOURCES: return "Ran out of critical resources, other than memory";
        case NVML_ERROR_FREQ_NOT_SUPPORTED: return "The requested frequency is not supported";
        case NVML_ERROR_ARGUMENT_VERSION_MISMATCH: return "The provided version is invalid/unsupported";
        case NVML_ERROR_DEPRECATED: return "The requested functionality has been deprecated";
        case NVML_ERROR_NOT_READY: return "The system is not ready for the request";
        case NVML_ERROR_GPU_NOT_FOUND: return "The GPU was not found";
        case NVML_ERROR_INVALID_STATE: return "The resource is in an invalid state";
        case NVML_ERROR_RESET_TYPE_NOT_SUPPORTED: return "The reset type is not supported";
        case NVML_ERROR_UNKNOWN: return "Unknown Error";
        }
        return "Unknown Error";
}

#endif /* KDEV_NVML_NVML_API_H */

