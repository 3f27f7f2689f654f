/* The CUDA driver API and NVML types the share library and the mock
 * libcuda.so.1 need, declared here so that both build on machines without
 * the CUDA toolkit. Names carry a kdev_cu_ / kdev_nv_ prefix so that this
 * header and NVIDIA's cuda.h can be included together:
 * tests/share/test_share_abi.c does, where the toolkit exists, and checks
 * every size, offset and value below against cuda.h (CUDA 13.0).
 *
 * Follows NVIDIA's cuda.h (CUresult, CUdevice, CUdeviceptr,
 * CUmemAllocationProp, CUDA_ARRAY_DESCRIPTOR, CUDA_ARRAY3D_DESCRIPTOR,
 * CUlaunchConfig, CUdriverProcAddressQueryResult) and nvml.h (nvmlMemory_t,
 * nvmlMemory_v2_t) on LP64. Types only, no functions. */
#ifndef KDEV_SHARE_ABI_H
#define KDEV_SHARE_ABI_H

#include <stddef.h>
#include <stdint.h>

typedef int kdev_cu_result;             /* CUresult (an enum: 4 bytes) */
typedef int kdev_cu_device;             /* CUdevice */
typedef unsigned long long kdev_cu_deviceptr; /* CUdeviceptr (v2) */
typedef unsigned long long kdev_cu_mem_handle; /* CUmemGenericAllocationHandle */
typedef void *kdev_cu_context;          /* CUcontext and the other opaque handles */
typedef void *kdev_cu_stream;
typedef void *kdev_cu_function;
typedef void *kdev_cu_array;
typedef void *kdev_cu_mipmapped_array;
typedef void *kdev_cu_mempool;
typedef void *kdev_cu_graph_exec;

/* CUresult values */
#define KDEV_CUDA_SUCCESS 0
#define KDEV_CUDA_ERROR_INVALID_VALUE 1
#define KDEV_CUDA_ERROR_OUT_OF_MEMORY 2
#define KDEV_CUDA_ERROR_NOT_INITIALIZED 3
#define KDEV_CUDA_ERROR_NO_DEVICE 100
#define KDEV_CUDA_ERROR_INVALID_DEVICE 101
#define KDEV_CUDA_ERROR_INVALID_CONTEXT 201
#define KDEV_CUDA_ERROR_INVALID_HANDLE 400
#define KDEV_CUDA_ERROR_NOT_FOUND 500
#define KDEV_CUDA_ERROR_NOT_SUPPORTED 801
#define KDEV_CUDA_ERROR_UNKNOWN 999

/* CUdriverProcAddressQueryResult */
#define KDEV_CU_GET_PROC_ADDRESS_SUCCESS 0
#define KDEV_CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND 1
#define KDEV_CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT 2
/* CUdriverProcAddress_flags */
#define KDEV_CU_GET_PROC_ADDRESS_DEFAULT 0
#define KDEV_CU_GET_PROC_ADDRESS_LEGACY_STREAM 1
#define KDEV_CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM 2

/* CUmemAllocationType, CUmemLocationType, CUmemAllocationGranularity_flags */
#define KDEV_CU_MEM_ALLOCATION_TYPE_PINNED 1
#define KDEV_CU_MEM_LOCATION_TYPE_DEVICE 1
#define KDEV_CU_MEM_ALLOC_GRANULARITY_MINIMUM 0
#define KDEV_CU_MEM_ALLOC_GRANULARITY_RECOMMENDED 1

/* CUdevice_attribute values the mock answers */
#define KDEV_CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT 16
#define KDEV_CU_DEVICE_ATTRIBUTE_PCI_BUS_ID 33
#define KDEV_CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID 34
#define KDEV_CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID 50
#define KDEV_CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR 75
#define KDEV_CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR 76
#define KDEV_CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED 102
#define KDEV_CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED 115

/* CUarray_format values with a fixed element size */
#define KDEV_CU_AD_FORMAT_UNSIGNED_INT8 0x01
#define KDEV_CU_AD_FORMAT_UNSIGNED_INT16 0x02
#define KDEV_CU_AD_FORMAT_UNSIGNED_INT32 0x03
#define KDEV_CU_AD_FORMAT_SIGNED_INT8 0x08
#define KDEV_CU_AD_FORMAT_SIGNED_INT16 0x09
#define KDEV_CU_AD_FORMAT_SIGNED_INT32 0x0a
#define KDEV_CU_AD_FORMAT_HALF 0x10
#define KDEV_CU_AD_FORMAT_FLOAT 0x20

typedef struct {
        char bytes[16];
} kdev_cu_uuid;                         /* CUuuid */

typedef struct {
        int type;                       /* CUmemLocationType */
        int id;
} kdev_cu_mem_location;                 /* CUmemLocation */

typedef struct {
        int type;                       /* CUmemAllocationType */
        int requestedHandleTypes;       /* CUmemAllocationHandleType */
        kdev_cu_mem_location location;
        void *win32HandleMetaData;
        struct {
                unsigned char compressionType;
                unsigned char gpuDirectRDMACapable;
                unsigned short usage;
                unsigned char reserved[4];
        } allocFlags;
} kdev_cu_mem_allocation_prop;          /* CUmemAllocationProp */

typedef struct {
        size_t Width;
        size_t Height;
        int Format;                     /* CUarray_format */
        unsigned int NumChannels;
} kdev_cu_array_descriptor;             /* CUDA_ARRAY_DESCRIPTOR (v2) */

typedef struct {
        size_t Width;
        size_t Height;
        size_t Depth;
        int Format;
        unsigned int NumChannels;
        unsigned int Flags;
} kdev_cu_array3d_descriptor;           /* CUDA_ARRAY3D_DESCRIPTOR (v2) */

typedef struct {
        unsigned int gridDimX, gridDimY, gridDimZ;
        unsigned int blockDimX, blockDimY, blockDimZ;
        unsigned int sharedMemBytes;
        kdev_cu_stream hStream;
        void *attrs;                    /* CUlaunchAttribute * */
        unsigned int numAttrs;
} kdev_cu_launch_config;                /* CUlaunchConfig */

/* NVML */
typedef int kdev_nv_return;             /* nvmlReturn_t */
#define KDEV_NVML_SUCCESS 0
#define KDEV_NVML_ERROR_INVALID_ARGUMENT 2
typedef void *kdev_nv_device;           /* nvmlDevice_t */
typedef struct {
        unsigned long long total, free, used;
} kdev_nv_memory;                       /* nvmlMemory_t (v1), bytes */
typedef struct {
        unsigned int version;           /* nvmlMemory_v2 = 0x02000028 */
        unsigned long long total, reserved, free, used;
} kdev_nv_memory_v2;                    /* nvmlMemory_v2_t, bytes */
#define KDEV_NVML_MEMORY_V2 (unsigned)(sizeof(kdev_nv_memory_v2) | (2u << 24))

/* Bytes of one element of an array of |format| with |channels| channels; 0
 * for formats without a fixed element size (planar video, block-compressed):
 * the caller then counts one byte per element and channel. */
static inline size_t kdev_cu_format_bytes(int format)
{
        switch (format) {
        case KDEV_CU_AD_FORMAT_UNSIGNED_INT8: case KDEV_CU_AD_FORMAT_SIGNED_INT8: return 1;
        case KDEV_CU_AD_FORMAT_UNSIGNED_INT16: case KDEV_CU_AD_FORMAT_SIGNED_INT16:
        case KDEV_CU_AD_FORMAT_HALF: return 2;
        case KDEV_CU_AD_FORMAT_UNSIGNED_INT32: case KDEV_CU_AD_FORMAT_SIGNED_INT32:
        case KDEV_CU_AD_FORMAT_FLOAT: return 4;
        default: return 0;
        }
}

/* Bytes an array of width w, height h (0: 1-D), depth d (0: 2-D), |format|
 * and |channels| is counted as (before rounding to the granularity): the
 * product of the extents, the channels and the element size (1 when the
 * format has none), saturating at SIZE_MAX. The driver does not document
 * an array's footprint; the mock libcuda.so.1 charges the same figure, so
 * the two agree exactly. */
static inline size_t kdev_cu_array_bytes(size_t w, size_t h, size_t d, int format,
                                         unsigned channels)
{
        size_t e = kdev_cu_format_bytes(format);
        size_t f[4] = {w, h ? h : 1, d ? d : 1, (size_t)(channels ? channels : 1) * (e ? e : 1)};
        size_t n = 1;
        for (int i = 0; i < 4; i++) {
                if (f[i] && n > SIZE_MAX / f[i])
                        return SIZE_MAX;
                n *= f[i];
        }
        return n;
}

/* The bytes of a mipmapped array of |levels| levels (each level halves every
 * non-zero extent, down to 1): the sum of kdev_cu_array_bytes of the levels,
 * saturating. */
static inline size_t kdev_cu_mipmap_bytes(size_t w, size_t h, size_t d, int format,
                                          unsigned channels, unsigned levels)
{
        size_t sum = 0;
        for (unsigned l = 0; l < (levels ? levels : 1); l++) {
                size_t b = kdev_cu_array_bytes(w, h, d, format, channels);
                if (b > SIZE_MAX - sum)
                        return SIZE_MAX;
                sum += b;
                w = w > 1 ? w / 2 : 1;
                h = h > 1 ? h / 2 : h;
                d = d > 1 ? d / 2 : d;
        }
        return sum;
}

/* |n| rounded up to a multiple of |g| (g > 0), saturating at SIZE_MAX
 * rounded down to a multiple of g. */
static inline size_t kdev_cu_round_up(size_t n, size_t g)
{
        if (g <= 1)
                return n;
        if (n > SIZE_MAX - (g - 1))
                return SIZE_MAX / g * g;
        return (n + g - 1) / g * g;
}

#endif /* KDEV_SHARE_ABI_H */
