/* libkdev-share.so: the enforcement library (docs/share.md). Loaded into
 * every process of a container (/etc/ld.so.preload or LD_PRELOAD), it
 * intercepts the CUDA driver API's allocating and freeing entry points, the
 * memory queries of CUDA and NVML, cuGetProcAddress/_v2 and dlsym, and keeps
 * the container's accounting in the share region (share/region.h).
 *
 * Three doors lead to the driver and each returns the same hooks: the
 * exported symbols (a program linked with libcuda.so.1, or dlsym on the
 * global scope), dlsym on a handle of libcuda.so.1 / libnvidia-ml.so.1
 * (dlsym is exported here: pseudo-handles are jumped straight to glibc's
 * dlsym with the caller's return address intact, so RTLD_NEXT keeps its
 * meaning), and cuGetProcAddress/_v2, whose answer is mapped from the
 * driver's pointer to the hook of exactly that variant.
 *
 * Entry points not listed in g_hooks are never touched: dlsym and
 * cuGetProcAddress hand out the driver's own pointer. A hook on a GPU the
 * limits file does not list costs one atomic load and the driver call.
 * libc only; nothing of kdev's other modules. */
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "share/abi.h"
#include "share/region.h"

#define EXPORT __attribute__((visibility("default")))
#define UNLIKELY(x) __builtin_expect(!!(x), 0)
#define MAX_DEVS 64
#define DEFAULT_DIR "/var/run/kdev/share"

typedef kdev_cu_result CUresult;
typedef kdev_cu_deviceptr CUdeviceptr;

/* --- the real dlsym ------------------------------------------------------------ */

typedef void *dlsym_fn(void *, const char *);
static _Atomic(dlsym_fn *) g_real_dlsym;

/* glibc's dlsym (GLIBC_2.34 in libc.so.6, GLIBC_2.2.5 before). Used by the
 * x86-64 stub below, so it keeps default visibility-free linkage. */
__attribute__((used)) dlsym_fn *kdev_share__real_dlsym(void);
__attribute__((used)) dlsym_fn *kdev_share__real_dlsym(void)
{
        dlsym_fn *f = atomic_load_explicit(&g_real_dlsym, memory_order_acquire);
        if (f)
                return f;
        static const char *const versions[] = {"GLIBC_2.34", "GLIBC_2.17", "GLIBC_2.2.5"};
        for (size_t i = 0; !f && i < sizeof(versions) / sizeof(versions[0]); i++)
                f = (dlsym_fn *)dlvsym(RTLD_NEXT, "dlsym", versions[i]);
        atomic_store_explicit(&g_real_dlsym, f, memory_order_release);
        return f;
}

static void *real_sym(void *handle, const char *name)
{
        dlsym_fn *f = kdev_share__real_dlsym();
        return f ? f(handle, name) : NULL;
}

/* --- state ---------------------------------------------------------------------- */

struct hook {
        const char *name;               /* exported symbol */
        const char *base;               /* cuGetProcAddress base name */
        int version;                    /* CUDA version of this ABI variant */
        bool per_thread;
        void *fn;                       /* the hook */
        _Atomic(void *) real;           /* the driver's */
};

static pthread_once_t g_core_once = PTHREAD_ONCE_INIT;
static pthread_once_t g_cuda_once = PTHREAD_ONCE_INIT;
static struct kdev_share_region_file *g_region;  /* NULL: nothing limited */
static bool g_fail_closed;                       /* the limits file was malformed */
static _Atomic int g_slot = -1;
static _Atomic bool g_start_noted;                /* this image's start time is in its slot */
static _Atomic int g_dev_gpu[MAX_DEVS];          /* CUDA ordinal -> region GPU, -1 none, -2 unknown */
static size_t g_dev_gran[MAX_DEVS];
static bool g_warned_table;

/* --- the allocation table: pointer or handle -> (GPU, bytes), lock-free ---------- */

#define TABLE_BITS 18
#define TABLE_SIZE (1u << TABLE_BITS)
#define KEY_EMPTY 0ull
#define KEY_DEAD 1ull

struct entry {
        _Atomic unsigned long long key;
        _Atomic unsigned long long val;         /* bytes << 8 | GPU */
};

enum table { T_PTR, T_HANDLE, T_ARRAY, T_COUNT };
static struct entry *g_table[T_COUNT];

static size_t slot_of(unsigned long long key)
{
        key ^= key >> 33;
        key *= 0xff51afd7ed558ccdull;
        key ^= key >> 33;
        return (size_t)(key & (TABLE_SIZE - 1));
}

static int table_put(enum table t, unsigned long long key, int gpu, uint64_t bytes)
{
        struct entry *e = g_table[t];
        if (!e || key <= KEY_DEAD)
                return -1;
        size_t i = slot_of(key);
        for (size_t n = 0; n < TABLE_SIZE; n++, i = (i + 1) & (TABLE_SIZE - 1)) {
                unsigned long long k = atomic_load_explicit(&e[i].key, memory_order_relaxed);
                if (k != KEY_EMPTY && k != KEY_DEAD)
                        continue;
                atomic_store_explicit(&e[i].val, bytes << 8 | (unsigned)gpu,
                                      memory_order_relaxed);
                if (atomic_compare_exchange_strong(&e[i].key, &k, key))
                        return 0;
        }
        return -1;
}

static int table_take(enum table t, unsigned long long key, int *gpu, uint64_t *bytes)
{
        struct entry *e = g_table[t];
        if (!e || key <= KEY_DEAD)
                return -1;
        size_t i = slot_of(key);
        for (size_t n = 0; n < TABLE_SIZE; n++, i = (i + 1) & (TABLE_SIZE - 1)) {
                unsigned long long k = atomic_load(&e[i].key);
                if (k == KEY_EMPTY)
                        return -1;
                if (k != key)
                        continue;
                unsigned long long v = atomic_load(&e[i].val);
                if (!atomic_compare_exchange_strong(&e[i].key, &k, KEY_DEAD))
                        return -1;
                *gpu = (int)(v & 0xff);
                *bytes = v >> 8;
                return 0;
        }
        return -1;
}

/* --- initialisation (once per process; the only place that reads the
 * environment and the limits file) -------------------------------------------- */

static int my_slot(void);
static void pace_after_fork(void);

static void after_fork_child(void)
{
        pace_after_fork();
        /* the child's allocations are its own: a new slot on first use, and
         * none of the parent's pointers */
        atomic_store(&g_slot, -1);
        atomic_store(&g_start_noted, false);
        for (int t = 0; t < T_COUNT; t++)
                if (g_table[t])
                        madvise(g_table[t], TABLE_SIZE * sizeof(struct entry), MADV_DONTNEED);
}

/* No region yet (or one that cannot be opened): the limits file decides.
 * Sets g_region (the container's, or this process's own when the
 * container's cannot be mapped) and g_fail_closed. Returns false when
 * nothing is limited (no limits file, or no memory for a private region). */
static bool region_from_limits(const char *dir, const char *path)
{
        static struct kdev_share_limits limits;
        char msg[512];
        int rc = kdev_share_limits_load(path, &limits, msg, sizeof(msg));
        if (rc == 1)
                return false;  /* no limits file: nothing is limited, pure pass-through */
        if (rc < 0) {
                fprintf(stderr, "kdev-share: %s (every allocation fails with "
                        "CUDA_ERROR_OUT_OF_MEMORY)\n", msg);
                g_fail_closed = true;
        }
        g_region = kdev_share_region_map(dir, g_fail_closed ? NULL : &limits, g_fail_closed,
                                         msg, sizeof(msg));
        if (g_region)
                return true;
        /* the container's processes cannot share accounting: limit this
         * process alone, never the container unlimited */
        fprintf(stderr, "kdev-share: %s (accounting for this process only)\n", msg);
        struct kdev_share_region_file *r = mmap(NULL, sizeof(*r), PROT_READ | PROT_WRITE,
                                                MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (r == MAP_FAILED) {
                g_fail_closed = true;
                return false;
        }
        r->n_gpus = g_fail_closed ? 0 : (uint32_t)limits.n;
        for (size_t i = 0; i < r->n_gpus; i++) {
                memcpy(r->gpu[i].uuid, limits.gpu[i].uuid, KDEV_SHARE_UUID_MAX);
                r->gpu[i].memory = limits.gpu[i].memory;
                r->gpu[i].compute = limits.gpu[i].compute;
        }
        g_region = r;
        return true;
}

static void core_init(void)
{
        for (int d = 0; d < MAX_DEVS; d++)
                atomic_store(&g_dev_gpu[d], -2);
        const char *dir = getenv("KDEV_SHARE_DIR");
        if (!dir || !*dir)
                dir = DEFAULT_DIR;
        char path[4096], msg[512];
        if ((size_t)snprintf(path, sizeof(path), "%s/limits", dir) >= sizeof(path))
                return;
        /* the common case: the region exists (the node side made it at
         * Allocate, or another process of the container did), and its
         * header holds the limits: the limits file is not read */
        g_region = kdev_share_region_open(dir, msg, sizeof(msg));
        if (!g_region && !region_from_limits(dir, path))
                return;
        if (g_region->limits_error)
                g_fail_closed = true;
        /* the three tables in one reservation; pages are touched only by
         * the allocations they record */
        const size_t table_bytes = TABLE_SIZE * sizeof(struct entry);
        void *m = mmap(NULL, T_COUNT * table_bytes, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        if (m != MAP_FAILED)
                for (int t = 0; t < T_COUNT; t++)
                        g_table[t] = (struct entry *)((char *)m + (size_t)t * table_bytes);
        pthread_atfork(NULL, NULL, after_fork_child);
        /* The slot is claimed at the first reservation or paced launch, so
         * that the first call stores nothing in the shared file: on a disk
         * file system a process's first store to a page of a shared mapping
         * is a write fault that waits on the journal, and many processes
         * starting at once queue there. Only a slot an earlier image of this
         * process left (exec keeps the pid) is taken back now (a read-only
         * scan finds it): its memory is gone and must not stay charged. */
        if (g_region->magic[0] != '\0' && kdev_share_region_find(g_region, (int32_t)getpid()) >= 0)
                my_slot();
}

static inline void core_ready(void)
{
        pthread_once(&g_core_once, core_init);
}

/* This process's slot: claimed once (and again after fork); -1 none yet,
 * -2 while one thread claims it (the others wait for its answer). */
static int my_slot(void)
{
        for (;;) {
                int s = atomic_load_explicit(&g_slot, memory_order_acquire);
                if (s >= 0)
                        return s;
                if (s == -2) {
                        sched_yield();
                        continue;
                }
                int expected = -1;
                if (!atomic_compare_exchange_strong(&g_slot, &expected, -2))
                        continue;
                if (g_region->magic[0] == '\0')  /* private fallback: one slot */
                        s = 0;
                else
                        s = kdev_share_region_claim(g_region, (int32_t)getpid(), 0,
                                                    (uint32_t)getuid());
                atomic_store_explicit(&g_slot, s < 0 ? -1 : s, memory_order_release);
                return s;
        }
}

__attribute__((destructor)) static void share_fini(void)
{
        int s = atomic_load(&g_slot);
        if (s >= 0 && g_region && g_region->magic[0] != '\0')
                kdev_share_region_release(g_region, s, (int32_t)getpid());
}

/* --- the driver's entry points ------------------------------------------------- */

#define REAL(h) ((h##_hook_t *)atomic_load_explicit(&g_hooks[H_##h].real, memory_order_relaxed))

enum {
        H_cuMemAlloc_v2, H_cuMemAllocPitch_v2, H_cuMemAllocManaged, H_cuMemAllocAsync,
        H_cuMemAllocAsync_ptsz, H_cuMemAllocFromPoolAsync, H_cuMemAllocFromPoolAsync_ptsz,
        H_cuMemFree_v2, H_cuMemFreeAsync, H_cuMemFreeAsync_ptsz, H_cuMemCreate, H_cuMemRelease,
        H_cuArrayCreate_v2, H_cuArray3DCreate_v2, H_cuArrayDestroy, H_cuMipmappedArrayCreate,
        H_cuMipmappedArrayDestroy, H_cuMemGetInfo_v2, H_cuDeviceTotalMem_v2,
        H_cuGetProcAddress, H_cuGetProcAddress_v2,
        H_cuLaunchKernel, H_cuLaunchKernel_ptsz, H_cuLaunchKernelEx, H_cuLaunchKernelEx_ptsz,
        H_cuLaunchCooperativeKernel, H_cuLaunchCooperativeKernel_ptsz, H_cuGraphLaunch,
        H_cuGraphLaunch_ptsz,
        H_nvmlDeviceGetMemoryInfo, H_nvmlDeviceGetMemoryInfo_v2,
        H_COUNT
};

/* prototypes of the hooks (the driver's signatures) */
typedef CUresult cuMemAlloc_v2_hook_t(CUdeviceptr *, size_t);
typedef CUresult cuMemAllocPitch_v2_hook_t(CUdeviceptr *, size_t *, size_t, size_t, unsigned);
typedef CUresult cuMemAllocManaged_hook_t(CUdeviceptr *, size_t, unsigned);
typedef CUresult cuMemAllocAsync_hook_t(CUdeviceptr *, size_t, kdev_cu_stream);
typedef CUresult cuMemAllocAsync_ptsz_hook_t(CUdeviceptr *, size_t, kdev_cu_stream);
typedef CUresult cuMemAllocFromPoolAsync_hook_t(CUdeviceptr *, size_t, kdev_cu_mempool,
                                                kdev_cu_stream);
typedef CUresult cuMemAllocFromPoolAsync_ptsz_hook_t(CUdeviceptr *, size_t, kdev_cu_mempool,
                                                     kdev_cu_stream);
typedef CUresult cuMemFree_v2_hook_t(CUdeviceptr);
typedef CUresult cuMemFreeAsync_hook_t(CUdeviceptr, kdev_cu_stream);
typedef CUresult cuMemFreeAsync_ptsz_hook_t(CUdeviceptr, kdev_cu_stream);
typedef CUresult cuMemCreate_hook_t(kdev_cu_mem_handle *, size_t,
                                    const kdev_cu_mem_allocation_prop *, unsigned long long);
typedef CUresult cuMemRelease_hook_t(kdev_cu_mem_handle);
typedef CUresult cuArrayCreate_v2_hook_t(kdev_cu_array *, const kdev_cu_array_descriptor *);
typedef CUresult cuArray3DCreate_v2_hook_t(kdev_cu_array *, const kdev_cu_array3d_descriptor *);
typedef CUresult cuArrayDestroy_hook_t(kdev_cu_array);
typedef CUresult cuMipmappedArrayCreate_hook_t(kdev_cu_mipmapped_array *,
                                               const kdev_cu_array3d_descriptor *, unsigned);
typedef CUresult cuMipmappedArrayDestroy_hook_t(kdev_cu_mipmapped_array);
typedef CUresult cuMemGetInfo_v2_hook_t(size_t *, size_t *);
typedef CUresult cuDeviceTotalMem_v2_hook_t(size_t *, kdev_cu_device);
typedef CUresult cuGetProcAddress_hook_t(const char *, void **, int, unsigned long long);
typedef CUresult cuGetProcAddress_v2_hook_t(const char *, void **, int, unsigned long long, int *);
typedef CUresult cuLaunchKernel_hook_t(kdev_cu_function, unsigned, unsigned, unsigned, unsigned,
                                       unsigned, unsigned, unsigned, kdev_cu_stream, void **,
                                       void **);
typedef cuLaunchKernel_hook_t cuLaunchKernel_ptsz_hook_t;
typedef CUresult cuLaunchKernelEx_hook_t(const kdev_cu_launch_config *, kdev_cu_function, void **,
                                         void **);
typedef cuLaunchKernelEx_hook_t cuLaunchKernelEx_ptsz_hook_t;
typedef CUresult cuLaunchCooperativeKernel_hook_t(kdev_cu_function, unsigned, unsigned, unsigned,
                                                  unsigned, unsigned, unsigned, unsigned,
                                                  kdev_cu_stream, void **);
typedef cuLaunchCooperativeKernel_hook_t cuLaunchCooperativeKernel_ptsz_hook_t;
typedef CUresult cuGraphLaunch_hook_t(kdev_cu_graph_exec, kdev_cu_stream);
typedef cuGraphLaunch_hook_t cuGraphLaunch_ptsz_hook_t;
typedef CUresult cuEventCreate_t(void **, unsigned);
typedef CUresult cuEventRecord_t(void *, kdev_cu_stream);
typedef CUresult cuEventQuery_t(void *);
typedef CUresult cuEventElapsedTime_t(float *, void *, void *);
typedef kdev_nv_return nvmlDeviceGetMemoryInfo_hook_t(kdev_nv_device, kdev_nv_memory *);
typedef kdev_nv_return nvmlDeviceGetMemoryInfo_v2_hook_t(kdev_nv_device, kdev_nv_memory_v2 *);
typedef CUresult cuCtxGetDevice_t(kdev_cu_device *);
typedef CUresult cuDeviceGetUuid_t(kdev_cu_uuid *, kdev_cu_device);
typedef CUresult cuMemGetAllocationGranularity_t(size_t *, const kdev_cu_mem_allocation_prop *,
                                                 int);
typedef kdev_nv_return nvmlDeviceGetUUID_t(kdev_nv_device, char *, unsigned);

#define DECL(n) EXPORT n##_hook_t n
DECL(cuMemAlloc_v2); DECL(cuMemAllocPitch_v2); DECL(cuMemAllocManaged); DECL(cuMemAllocAsync);
DECL(cuMemAllocAsync_ptsz); DECL(cuMemAllocFromPoolAsync); DECL(cuMemAllocFromPoolAsync_ptsz);
DECL(cuMemFree_v2); DECL(cuMemFreeAsync); DECL(cuMemFreeAsync_ptsz); DECL(cuMemCreate);
DECL(cuMemRelease); DECL(cuArrayCreate_v2); DECL(cuArray3DCreate_v2); DECL(cuArrayDestroy);
DECL(cuMipmappedArrayCreate); DECL(cuMipmappedArrayDestroy); DECL(cuMemGetInfo_v2);
DECL(cuDeviceTotalMem_v2); DECL(cuGetProcAddress); DECL(cuGetProcAddress_v2);
DECL(nvmlDeviceGetMemoryInfo); DECL(nvmlDeviceGetMemoryInfo_v2);
DECL(cuLaunchKernel); DECL(cuLaunchKernel_ptsz); DECL(cuLaunchKernelEx); DECL(cuLaunchKernelEx_ptsz);
DECL(cuLaunchCooperativeKernel); DECL(cuLaunchCooperativeKernel_ptsz); DECL(cuGraphLaunch);
DECL(cuGraphLaunch_ptsz);

#define HK(n, base, ver, pt) [H_##n] = {#n, base, ver, pt, (void *)n, NULL}
static struct hook g_hooks[H_COUNT] = {
        HK(cuMemAlloc_v2, "cuMemAlloc", 3020, false),
        HK(cuMemAllocPitch_v2, "cuMemAllocPitch", 3020, false),
        HK(cuMemAllocManaged, "cuMemAllocManaged", 6000, false),
        HK(cuMemAllocAsync, "cuMemAllocAsync", 11020, false),
        HK(cuMemAllocAsync_ptsz, "cuMemAllocAsync", 11020, true),
        HK(cuMemAllocFromPoolAsync, "cuMemAllocFromPoolAsync", 11020, false),
        HK(cuMemAllocFromPoolAsync_ptsz, "cuMemAllocFromPoolAsync", 11020, true),
        HK(cuMemFree_v2, "cuMemFree", 3020, false),
        HK(cuMemFreeAsync, "cuMemFreeAsync", 11020, false),
        HK(cuMemFreeAsync_ptsz, "cuMemFreeAsync", 11020, true),
        HK(cuMemCreate, "cuMemCreate", 10020, false),
        HK(cuMemRelease, "cuMemRelease", 10020, false),
        HK(cuArrayCreate_v2, "cuArrayCreate", 3020, false),
        HK(cuArray3DCreate_v2, "cuArray3DCreate", 3020, false),
        HK(cuArrayDestroy, "cuArrayDestroy", 2000, false),
        HK(cuMipmappedArrayCreate, "cuMipmappedArrayCreate", 5000, false),
        HK(cuMipmappedArrayDestroy, "cuMipmappedArrayDestroy", 5000, false),
        HK(cuMemGetInfo_v2, "cuMemGetInfo", 3020, false),
        HK(cuDeviceTotalMem_v2, "cuDeviceTotalMem", 3020, false),
        HK(cuGetProcAddress, "cuGetProcAddress", 11030, false),
        HK(cuGetProcAddress_v2, "cuGetProcAddress", 12000, false),
        HK(cuLaunchKernel, "cuLaunchKernel", 4000, false),
        HK(cuLaunchKernel_ptsz, "cuLaunchKernel", 7000, true),
        HK(cuLaunchKernelEx, "cuLaunchKernelEx", 11060, false),
        HK(cuLaunchKernelEx_ptsz, "cuLaunchKernelEx", 11060, true),
        HK(cuLaunchCooperativeKernel, "cuLaunchCooperativeKernel", 9000, false),
        HK(cuLaunchCooperativeKernel_ptsz, "cuLaunchCooperativeKernel", 9000, true),
        HK(cuGraphLaunch, "cuGraphLaunch", 10000, false),
        HK(cuGraphLaunch_ptsz, "cuGraphLaunch", 10000, true),
        HK(nvmlDeviceGetMemoryInfo, NULL, 0, false),
        HK(nvmlDeviceGetMemoryInfo_v2, NULL, 0, false),
};

static cuCtxGetDevice_t *g_ctx_get_device;
static cuDeviceGetUuid_t *g_get_uuid;
static cuMemGetAllocationGranularity_t *g_get_gran;

/* the driver library: already loaded by whoever called us; loaded here
 * only when a program calls an exported hook without having it */
static void *driver_sym(const char *lib, const char *name)
{
        void *h = dlopen(lib, RTLD_NOW | RTLD_NOLOAD);
        void *p = NULL;
        if (h) {
                p = real_sym(h, name);
                dlclose(h);
        }
        if (!p)
                p = real_sym(RTLD_NEXT, name);
        if (!p && (h = dlopen(lib, RTLD_NOW | RTLD_GLOBAL)) != NULL)
                p = real_sym(h, name);  /* kept loaded */
        return p;
}

static void *g_cuda_handle;  /* NOLOAD handle of libcuda.so.1, or NULL */
static void *cuda_sym(const char *name);
static void pacing_init(void);

static void *cuda_sym(const char *name)
{
        void *p = g_cuda_handle ? real_sym(g_cuda_handle, name) : NULL;
        return p ? p : driver_sym("libcuda.so.1", name);
}

static void cuda_init(void)
{
        core_ready();
        /* one handle for every name (kept: the library is in use anyway) */
        g_cuda_handle = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
        for (int i = 0; i < H_COUNT; i++) {
                struct hook *h = &g_hooks[i];
                if (h->base && !atomic_load(&h->real))
                        atomic_store(&h->real, cuda_sym(h->name));
        }
        g_ctx_get_device = (cuCtxGetDevice_t *)cuda_sym("cuCtxGetDevice");
        g_get_uuid = (cuDeviceGetUuid_t *)cuda_sym("cuDeviceGetUuid_v2");
        if (!g_get_uuid)
                g_get_uuid = (cuDeviceGetUuid_t *)cuda_sym("cuDeviceGetUuid");
        g_get_gran = (cuMemGetAllocationGranularity_t *)cuda_sym("cuMemGetAllocationGranularity");
        pacing_init();
}

static inline void cuda_ready(void)
{
        pthread_once(&g_cuda_once, cuda_init);
}

static bool limited(void)
{
        return g_fail_closed || (g_region && g_region->n_gpus > 0);
}

/* The region GPU of CUDA device |dev|: -1 when not limited. */
static int gpu_of(kdev_cu_device dev)
{
        if (dev < 0 || dev >= MAX_DEVS)
                return -1;
        int g = atomic_load_explicit(&g_dev_gpu[dev], memory_order_acquire);
        if (g != -2)
                return g;
        g = -1;
        kdev_cu_uuid u;
        if (g_get_uuid && g_get_uuid(&u, dev) == KDEV_CUDA_SUCCESS) {
                const unsigned char *b = (const unsigned char *)u.bytes;
                char s[48];
                snprintf(s, sizeof(s),
                         "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x",
                         b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11],
                         b[12], b[13], b[14], b[15]);
                /* the 16 bytes after the prefix: cuDeviceGetUuid_v2 gives a MIG
                 * device's own UUID, which NVML prints as MIG-... (the limits
                 * file's prefix, GPU- or MIG-, is checked by the parser) */
                for (uint32_t i = 0; i < g_region->n_gpus; i++)
                        if (strcasecmp(g_region->gpu[i].uuid + 4, s + 4) == 0)
                                g = (int)i;
        }
        size_t gran = 2u << 20;
        kdev_cu_mem_allocation_prop prop = {0};
        prop.type = KDEV_CU_MEM_ALLOCATION_TYPE_PINNED;
        prop.location.type = KDEV_CU_MEM_LOCATION_TYPE_DEVICE;
        prop.location.id = dev;
        size_t got;
        if (g_get_gran && g_get_gran(&got, &prop, KDEV_CU_MEM_ALLOC_GRANULARITY_MINIMUM) ==
                                  KDEV_CUDA_SUCCESS && got > 0)
                gran = got;
        g_dev_gran[dev] = gran;
        atomic_store_explicit(&g_dev_gpu[dev], g, memory_order_release);
        return g;
}

/* The region GPU of the current context's device, with its granularity. */
static int current_gpu(kdev_cu_device *dev)
{
        if (!g_ctx_get_device || g_ctx_get_device(dev) != KDEV_CUDA_SUCCESS)
                return -1;
        return gpu_of(*dev);
}

#define FAIL_CLOSED_GPU (-3)

/* Decides what an allocation of |bytes| on device |dev| is charged: returns
 * the region GPU (>= 0) with *charge set, -1 for no accounting, or
 * FAIL_CLOSED_GPU. */
static int charge_for(kdev_cu_device dev, int gpu, size_t bytes, uint64_t *charge)
{
        if (g_fail_closed)
                return FAIL_CLOSED_GPU;
        if (gpu < 0)
                return -1;
        *charge = kdev_cu_round_up(bytes, g_dev_gran[dev]);
        return gpu;
}

/* Reserves |bytes| on region GPU |gpu|: 0, or -1 (out of the share). A
 * refusal is retried after clearing dead processes' slots, and twice more
 * after a yield (another process's reservation in flight may be what
 * pushed the sum over). */
static int reserve(int gpu, uint64_t bytes)
{
        int s = my_slot();
        if (s < 0)
                return -1;
        /* the start time that tells a reused pid, read once per process
         * (a /proc read: at the first reservation, not at the first call) */
        if (!atomic_load_explicit(&g_start_noted, memory_order_relaxed) &&
            !atomic_exchange(&g_start_noted, true) && g_region->magic[0] != '\0')
                kdev_share_region_note_start(g_region, s, (int32_t)getpid());
        if (kdev_share_region_reserve(g_region, s, gpu, bytes) == 0)
                return 0;
        if (bytes > g_region->gpu[gpu].memory)
                return -1;
        for (int attempt = 0; attempt < 3; attempt++) {
                if (attempt == 0 && g_region->magic[0] != '\0')
                        kdev_share_region_reap(g_region);
                else
                        sched_yield();
                if (kdev_share_region_reserve(g_region, s, gpu, bytes) == 0)
                        return 0;
        }
        return -1;
}

static void unreserve(int gpu, uint64_t bytes)
{
        int s = atomic_load(&g_slot);
        if (s >= 0)
                kdev_share_region_unreserve(g_region, s, gpu, bytes);
}

static CUresult record(enum table t, unsigned long long key, int gpu, uint64_t charge)
{
        if (table_put(t, key, gpu, charge) == 0)
                return KDEV_CUDA_SUCCESS;
        if (!g_warned_table) {
                g_warned_table = true;
                fprintf(stderr, "kdev-share: more than %u live allocations of one kind; "
                        "further ones fail\n", TABLE_SIZE);
        }
        return KDEV_CUDA_ERROR_OUT_OF_MEMORY;
}

/* The body of every device-pointer allocation: charge, call, record. */
#define ALLOC_PTR(hook, dptr, bytes, ...)                                                  \
        do {                                                                             \
                cuda_ready();                                                            \
                if (!limited())                                                          \
                        return REAL(hook)(__VA_ARGS__);                                  \
                kdev_cu_device dev_;                                                     \
                int g_ = current_gpu(&dev_);                                             \
                uint64_t c_ = 0;                                                         \
                g_ = charge_for(dev_, g_, (bytes), &c_);                                 \
                if (g_ == FAIL_CLOSED_GPU)                                               \
                        return KDEV_CUDA_ERROR_OUT_OF_MEMORY;                            \
                if (g_ < 0 || !(dptr) || (bytes) == 0)                                   \
                        return REAL(hook)(__VA_ARGS__);                                  \
                if (reserve(g_, c_) != 0)                                                \
                        return KDEV_CUDA_ERROR_OUT_OF_MEMORY;                            \
                CUresult r_ = REAL(hook)(__VA_ARGS__);                                   \
                if (r_ != KDEV_CUDA_SUCCESS) {                                           \
                        unreserve(g_, c_);                                               \
                        return r_;                                                       \
                }                                                                        \
                r_ = record(T_PTR, *(dptr), g_, c_);                                     \
                if (r_ != KDEV_CUDA_SUCCESS) {                                           \
                        REAL(cuMemFree_v2)(*(dptr));                                     \
                        unreserve(g_, c_);                                               \
                }                                                                        \
                return r_;                                                               \
        } while (0)

CUresult cuMemAlloc_v2(CUdeviceptr *p, size_t n) { ALLOC_PTR(cuMemAlloc_v2, p, n, p, n); }
CUresult cuMemAllocManaged(CUdeviceptr *p, size_t n, unsigned f)
{
        ALLOC_PTR(cuMemAllocManaged, p, n, p, n, f);
}
CUresult cuMemAllocAsync(CUdeviceptr *p, size_t n, kdev_cu_stream s)
{
        ALLOC_PTR(cuMemAllocAsync, p, n, p, n, s);
}
CUresult cuMemAllocAsync_ptsz(CUdeviceptr *p, size_t n, kdev_cu_stream s)
{
        ALLOC_PTR(cuMemAllocAsync_ptsz, p, n, p, n, s);
}
CUresult cuMemAllocFromPoolAsync(CUdeviceptr *p, size_t n, kdev_cu_mempool pool, kdev_cu_stream s)
{
        ALLOC_PTR(cuMemAllocFromPoolAsync, p, n, p, n, pool, s);
}
CUresult cuMemAllocFromPoolAsync_ptsz(CUdeviceptr *p, size_t n, kdev_cu_mempool pool,
                                      kdev_cu_stream s)
{
        ALLOC_PTR(cuMemAllocFromPoolAsync_ptsz, p, n, p, n, pool, s);
}

/* The pitch is known only after the call: allocate, then charge pitch x
 * height, and give the memory back when that passes the share. */
CUresult cuMemAllocPitch_v2(CUdeviceptr *p, size_t *pitch, size_t w, size_t h, unsigned elem)
{
        cuda_ready();
        if (!limited())
                return REAL(cuMemAllocPitch_v2)(p, pitch, w, h, elem);
        kdev_cu_device dev;
        int g = current_gpu(&dev);
        if (g_fail_closed)
                return KDEV_CUDA_ERROR_OUT_OF_MEMORY;
        CUresult r = REAL(cuMemAllocPitch_v2)(p, pitch, w, h, elem);
        if (r != KDEV_CUDA_SUCCESS || g < 0)
                return r;
        uint64_t c = 0;
        size_t bytes = *pitch && h > SIZE_MAX / *pitch ? SIZE_MAX : *pitch * h;
        charge_for(dev, g, bytes, &c);
        if (reserve(g, c) != 0) {
                REAL(cuMemFree_v2)(*p);
                return KDEV_CUDA_ERROR_OUT_OF_MEMORY;
        }
        r = record(T_PTR, *p, g, c);
        if (r != KDEV_CUDA_SUCCESS) {
                REAL(cuMemFree_v2)(*p);
                unreserve(g, c);
        }
        return r;
}

#define FREE_KEY(hook, table, key, ...)                                                    \
        do {                                                                             \
                cuda_ready();                                                            \
                int g_;                                                                  \
                uint64_t b_;                                                             \
                if (!limited() || table_take(table, (unsigned long long)(uintptr_t)(key), \
                                             &g_, &b_) != 0)                              \
                        return REAL(hook)(__VA_ARGS__);                                  \
                CUresult r_ = REAL(hook)(__VA_ARGS__);                                   \
                if (r_ == KDEV_CUDA_SUCCESS)                                             \
                        unreserve(g_, b_);                                               \
                else                                                                     \
                        table_put(table, (unsigned long long)(uintptr_t)(key), g_, b_);  \
                return r_;                                                               \
        } while (0)

CUresult cuMemFree_v2(CUdeviceptr p) { FREE_KEY(cuMemFree_v2, T_PTR, p, p); }
CUresult cuMemFreeAsync(CUdeviceptr p, kdev_cu_stream s) { FREE_KEY(cuMemFreeAsync, T_PTR, p, p, s); }
CUresult cuMemFreeAsync_ptsz(CUdeviceptr p, kdev_cu_stream s)
{
        FREE_KEY(cuMemFreeAsync_ptsz, T_PTR, p, p, s);
}
CUresult cuMemRelease(kdev_cu_mem_handle h) { FREE_KEY(cuMemRelease, T_HANDLE, h, h); }
CUresult cuArrayDestroy(kdev_cu_array a) { FREE_KEY(cuArrayDestroy, T_ARRAY, a, a); }
CUresult cuMipmappedArrayDestroy(kdev_cu_mipmapped_array a)
{
        FREE_KEY(cuMipmappedArrayDestroy, T_ARRAY, a, a);
}

/* VMM: the device is the one the properties name (not the current
 * context's: worker threads often have none); the size is already a
 * multiple of the granularity (the driver refuses others). */
CUresult cuMemCreate(kdev_cu_mem_handle *h, size_t size, const kdev_cu_mem_allocation_prop *prop,
                     unsigned long long flags)
{
        cuda_ready();
        if (!limited())
                return REAL(cuMemCreate)(h, size, prop, flags);
        if (g_fail_closed)
                return KDEV_CUDA_ERROR_OUT_OF_MEMORY;
        if (!h || !prop || prop->location.type != KDEV_CU_MEM_LOCATION_TYPE_DEVICE || size == 0)
                return REAL(cuMemCreate)(h, size, prop, flags);
        int g = gpu_of(prop->location.id);
        if (g < 0)
                return REAL(cuMemCreate)(h, size, prop, flags);
        if (reserve(g, size) != 0)
                return KDEV_CUDA_ERROR_OUT_OF_MEMORY;
        CUresult r = REAL(cuMemCreate)(h, size, prop, flags);
        if (r != KDEV_CUDA_SUCCESS) {
                unreserve(g, size);
                return r;
        }
        r = record(T_HANDLE, *h, g, size);
        if (r != KDEV_CUDA_SUCCESS) {
                REAL(cuMemRelease)(*h);
                unreserve(g, size);
        }
        return r;
}

#define ALLOC_ARRAY(hook, out, bytes, ...)                                                 \
        do {                                                                             \
                cuda_ready();                                                            \
                if (!limited())                                                          \
                        return REAL(hook)(__VA_ARGS__);                                  \
                if (g_fail_closed)                                                       \
                        return KDEV_CUDA_ERROR_OUT_OF_MEMORY;                            \
                kdev_cu_device dev_;                                                     \
                int g_ = current_gpu(&dev_);                                             \
                if (g_ < 0 || !(out))                                                    \
                        return REAL(hook)(__VA_ARGS__);                                  \
                uint64_t c_ = 0;                                                         \
                charge_for(dev_, g_, (bytes), &c_);                                      \
                if (reserve(g_, c_) != 0)                                                \
                        return KDEV_CUDA_ERROR_OUT_OF_MEMORY;                            \
                CUresult r_ = REAL(hook)(__VA_ARGS__);                                   \
                if (r_ != KDEV_CUDA_SUCCESS) {                                           \
                        unreserve(g_, c_);                                               \
                        return r_;                                                       \
                }                                                                        \
                if (table_put(T_ARRAY, (unsigned long long)(uintptr_t)*(out), g_, c_) != 0) \
                        unreserve(g_, c_);  /* kept, unaccounted: never freed twice */   \
                return r_;                                                               \
        } while (0)

CUresult cuArrayCreate_v2(kdev_cu_array *a, const kdev_cu_array_descriptor *d)
{
        ALLOC_ARRAY(cuArrayCreate_v2, a && d ? a : NULL,
                    d ? kdev_cu_array_bytes(d->Width, d->Height, 0, d->Format, d->NumChannels) : 0,
                    a, d);
}
CUresult cuArray3DCreate_v2(kdev_cu_array *a, const kdev_cu_array3d_descriptor *d)
{
        ALLOC_ARRAY(cuArray3DCreate_v2, a && d ? a : NULL,
                    d ? kdev_cu_array_bytes(d->Width, d->Height, d->Depth, d->Format,
                                            d->NumChannels) : 0,
                    a, d);
}
CUresult cuMipmappedArrayCreate(kdev_cu_mipmapped_array *a, const kdev_cu_array3d_descriptor *d,
                                unsigned levels)
{
        ALLOC_ARRAY(cuMipmappedArrayCreate, a && d ? a : NULL,
                    d ? kdev_cu_mipmap_bytes(d->Width, d->Height, d->Depth, d->Format,
                                             d->NumChannels, levels) : 0,
                    a, d, levels);
}

/* --- what the container is told ------------------------------------------------ */

static uint64_t share_free(int g, uint64_t driver_free)
{
        uint64_t lim = g_region->gpu[g].memory;
        uint64_t used = kdev_share_region_used(g_region, g);
        uint64_t f = used < lim ? lim - used : 0;
        return f < driver_free ? f : driver_free;
}

CUresult cuMemGetInfo_v2(size_t *fr, size_t *total)
{
        cuda_ready();
        CUresult r = REAL(cuMemGetInfo_v2)(fr, total);
        if (r != KDEV_CUDA_SUCCESS || !limited() || g_fail_closed)
                return r;
        kdev_cu_device dev;
        int g = current_gpu(&dev);
        if (g < 0)
                return r;
        if (fr)
                *fr = (size_t)share_free(g, *fr);
        if (total && *total > g_region->gpu[g].memory)
                *total = (size_t)g_region->gpu[g].memory;
        return r;
}

CUresult cuDeviceTotalMem_v2(size_t *bytes, kdev_cu_device dev)
{
        cuda_ready();
        CUresult r = REAL(cuDeviceTotalMem_v2)(bytes, dev);
        if (r != KDEV_CUDA_SUCCESS || !limited() || g_fail_closed || !bytes)
                return r;
        int g = gpu_of(dev);
        if (g >= 0 && *bytes > g_region->gpu[g].memory)
                *bytes = (size_t)g_region->gpu[g].memory;
        return r;
}

/* NVML: what nvidia-smi in the container shows */
static pthread_once_t g_nvml_once = PTHREAD_ONCE_INIT;
static nvmlDeviceGetUUID_t *g_nvml_uuid;
static void nvml_init(void)
{
        core_ready();
        for (int i = H_nvmlDeviceGetMemoryInfo; i <= H_nvmlDeviceGetMemoryInfo_v2; i++)
                if (!atomic_load(&g_hooks[i].real))
                        atomic_store(&g_hooks[i].real,
                                     driver_sym("libnvidia-ml.so.1", g_hooks[i].name));
        g_nvml_uuid = (nvmlDeviceGetUUID_t *)driver_sym("libnvidia-ml.so.1", "nvmlDeviceGetUUID");
}

static int nvml_gpu(kdev_nv_device d)
{
        char uuid[KDEV_SHARE_UUID_MAX];
        if (!limited() || g_fail_closed || !g_nvml_uuid ||
            g_nvml_uuid(d, uuid, sizeof(uuid)) != KDEV_NVML_SUCCESS)
                return -1;
        for (uint32_t i = 0; i < g_region->n_gpus; i++)
                if (strcasecmp(g_region->gpu[i].uuid, uuid) == 0)
                        return (int)i;
        return -1;
}

kdev_nv_return nvmlDeviceGetMemoryInfo(kdev_nv_device d, kdev_nv_memory *m)
{
        pthread_once(&g_nvml_once, nvml_init);
        nvmlDeviceGetMemoryInfo_hook_t *real = (nvmlDeviceGetMemoryInfo_hook_t *)atomic_load(
                &g_hooks[H_nvmlDeviceGetMemoryInfo].real);
        if (!real)
                return 12; /* NVML_ERROR_LIBRARY_NOT_FOUND */
        kdev_nv_return r = real(d, m);
        int g;
        if (r != KDEV_NVML_SUCCESS || !m || (g = nvml_gpu(d)) < 0)
                return r;
        uint64_t lim = g_region->gpu[g].memory;
        uint64_t used = kdev_share_region_used(g_region, g);
        m->total = lim;
        m->used = used < lim ? used : lim;
        m->free = lim - m->used;
        return r;
}

kdev_nv_return nvmlDeviceGetMemoryInfo_v2(kdev_nv_device d, kdev_nv_memory_v2 *m)
{
        pthread_once(&g_nvml_once, nvml_init);
        nvmlDeviceGetMemoryInfo_v2_hook_t *real = (nvmlDeviceGetMemoryInfo_v2_hook_t *)atomic_load(
                &g_hooks[H_nvmlDeviceGetMemoryInfo_v2].real);
        if (!real)
                return 12;
        kdev_nv_return r = real(d, m);
        int g;
        if (r != KDEV_NVML_SUCCESS || !m || (g = nvml_gpu(d)) < 0)
                return r;
        uint64_t lim = g_region->gpu[g].memory;
        uint64_t used = kdev_share_region_used(g_region, g);
        uint64_t res = m->reserved < lim ? m->reserved : lim;
        m->total = lim;
        m->reserved = res;
        m->used = used < lim - res ? used : lim - res;
        m->free = lim - res - m->used;
        return r;
}

/* --- compute pacing (docs/share.md, "Compute") ------------------------------------
 *
 * A launch on a paced GPU (compute share below 100 %, policy not none) may
 * start only while the container's budget of GPU time is positive: a token
 * bucket in the region, shared by the container's processes, refilled at
 * compute% of wall time and capped at compute% of PACE_WINDOW_NS. Each paced
 * launch is bracketed by two events on its stream; when the second has
 * completed, the time between them (the kernel's time on the GPU) is taken
 * from the budget. At most PACE_RING launches per thread are unmeasured at
 * a time: the next one waits for the oldest, so a program cannot run ahead
 * of its budget. Policy work-conserving waits for the budget only while
 * another container used the GPU recently (NVML's utilization of the GPU
 * minus the container's own share of it, sampled every PACE_SAMPLE_NS, at
 * least PACE_OTHERS_PCT); strict always waits. */

#define PACE_WINDOW_NS 50000000ll       /* 50 ms */
#define PACE_SAMPLE_NS 20000000ull
#define PACE_CONTENDED_NS 100000000ull  /* a contention seen holds 100 ms */
#define PACE_OTHERS_PCT 10
#define PACE_RING 4
#define PACE_SLEEP_MAX_NS 5000000ll

typedef kdev_nv_return nvml_init_t(void);
typedef kdev_nv_return nvml_by_uuid_t(const char *, kdev_nv_device *);
typedef struct {
        unsigned gpu, memory;
} nv_utilization;
typedef kdev_nv_return nvml_util_t(kdev_nv_device, nv_utilization *);

static bool g_paced[KDEV_SHARE_MAX_GPUS];
static bool g_pace_any;
static cuEventCreate_t *g_ev_create;
static cuEventRecord_t *g_ev_record, *g_ev_record_ptsz;
static cuEventQuery_t *g_ev_query, *g_ev_sync;
static cuEventElapsedTime_t *g_ev_elapsed;
static nvml_util_t *g_nv_util;
static kdev_nv_device g_nv_dev[KDEV_SHARE_MAX_GPUS];
static _Atomic uint64_t g_last_sample[KDEV_SHARE_MAX_GPUS];
static uint64_t g_sample_busy[KDEV_SHARE_MAX_GPUS];

struct pace_entry {
        void *start, *end;
        int gpu;
        bool pending;
        int64_t est;                    /* ns charged at launch, corrected when measured */
};
static __thread __attribute__((tls_model("initial-exec"))) struct pace_entry t_ring[PACE_RING];
static __thread __attribute__((tls_model("initial-exec"))) unsigned t_next;
static __thread __attribute__((tls_model("initial-exec"))) int64_t t_last_cost;

/* the forking thread's unmeasured launches belong to the parent's contexts */
static void pace_after_fork(void)
{
        memset(t_ring, 0, sizeof(t_ring));
        t_next = 0;
        t_last_cost = 0;
}

static uint64_t mono_ns(void)
{
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void pacing_init(void)
{
        if (!g_region || g_fail_closed || g_region->policy == KDEV_SHARE_POLICY_NONE)
                return;
        for (uint32_t g = 0; g < g_region->n_gpus; g++)
                g_pace_any |= g_paced[g] = g_region->gpu[g].compute < 100;
        if (!g_pace_any)
                return;
        g_ev_create = (cuEventCreate_t *)cuda_sym("cuEventCreate");
        g_ev_record = (cuEventRecord_t *)cuda_sym("cuEventRecord");
        g_ev_record_ptsz = (cuEventRecord_t *)cuda_sym("cuEventRecord_ptsz");
        g_ev_query = (cuEventQuery_t *)cuda_sym("cuEventQuery");
        g_ev_sync = (cuEventQuery_t *)cuda_sym("cuEventSynchronize");
        g_ev_elapsed = (cuEventElapsedTime_t *)cuda_sym("cuEventElapsedTime_v2");
        if (!g_ev_elapsed)
                g_ev_elapsed = (cuEventElapsedTime_t *)cuda_sym("cuEventElapsedTime");
        if (!g_ev_create || !g_ev_record || !g_ev_query || !g_ev_sync || !g_ev_elapsed) {
                fprintf(stderr, "kdev-share: the driver lacks the event entry points; "
                        "compute is not paced\n");
                g_pace_any = false;
                return;
        }
}

/* NVML for the contention estimate, loaded when a budget first runs out
 * (work-conserving only): a process that never waits never maps NVML. */
static pthread_once_t g_pace_nvml_once = PTHREAD_ONCE_INIT;
static void pace_nvml_init(void)
{
        nvml_init_t *ini = (nvml_init_t *)driver_sym("libnvidia-ml.so.1", "nvmlInit_v2");
        nvml_by_uuid_t *by = (nvml_by_uuid_t *)driver_sym("libnvidia-ml.so.1",
                                                          "nvmlDeviceGetHandleByUUID");
        nvml_util_t *util = (nvml_util_t *)driver_sym("libnvidia-ml.so.1",
                                                      "nvmlDeviceGetUtilizationRates");
        if (!ini || !by || !util || ini() != KDEV_NVML_SUCCESS)
                return;  /* contention unknown: every paced GPU is paced always */
        for (uint32_t g = 0; g < g_region->n_gpus; g++)
                if (g_paced[g] && by(g_region->gpu[g].uuid, &g_nv_dev[g]) != KDEV_NVML_SUCCESS)
                        g_nv_dev[g] = NULL;
        g_nv_util = util;
}

/* Charges completed measurements of this thread; with |wait|, first waits
 * for the oldest when the ring is full. */
static void pace_drain(bool wait)
{
        int s = atomic_load(&g_slot);
        for (unsigned k = 0; k < PACE_RING; k++) {
                struct pace_entry *e = &t_ring[(t_next + k) % PACE_RING];
                if (!e->pending)
                        continue;
                if (wait && k == 0)
                        g_ev_sync(e->end);
                float ms = 0;
                if (g_ev_query(e->end) != KDEV_CUDA_SUCCESS)
                        continue;
                e->pending = false;
                struct kdev_share_region_gpu *rg = &g_region->gpu[e->gpu];
                int64_t ns = e->est;  /* unmeasurable: the estimate stands */
                if (g_ev_elapsed(&ms, e->start, e->end) == KDEV_CUDA_SUCCESS && ms >= 0)
                        ns = (int64_t)((double)ms * 1e6);
                atomic_fetch_sub(&rg->tokens_ns, ns - e->est);
                atomic_fetch_add(&rg->busy_ns, (uint64_t)(ns - e->est));
                t_last_cost = ns;
                (void)s;
        }
}

static void pace_refill(struct kdev_share_region_gpu *rg, uint64_t now)
{
        uint64_t last = atomic_load(&rg->refill_ns);
        if (now <= last || !atomic_compare_exchange_strong(&rg->refill_ns, &last, now))
                return;
        int64_t cap = PACE_WINDOW_NS * (int64_t)rg->compute / 100;
        int64_t add = last == 0 ? cap : (int64_t)((now - last) * rg->compute / 100);
        int64_t cur = atomic_load(&rg->tokens_ns), next;
        do {
                next = cur + add > cap ? cap : cur + add;
        } while (!atomic_compare_exchange_weak(&rg->tokens_ns, &cur, next));
}

/* Whether another container used GPU |g| lately (work-conserving). */
static bool pace_contended(int g, uint64_t now)
{
        struct kdev_share_region_gpu *rg = &g_region->gpu[g];
        pthread_once(&g_pace_nvml_once, pace_nvml_init);
        if (!g_nv_util || !g_nv_dev[g])
                return true;
        if (now < atomic_load(&rg->contended_until_ns))
                return true;
        uint64_t last = atomic_load(&g_last_sample[g]);
        if (last && now - last < PACE_SAMPLE_NS)
                return false;
        if (!atomic_compare_exchange_strong(&g_last_sample[g], &last, now))
                return false;
        nv_utilization u = {0, 0};
        uint64_t busy = atomic_load(&rg->busy_ns);
        uint64_t own = last ? (busy - g_sample_busy[g]) * 100 / (now - last) : 0;
        g_sample_busy[g] = busy;
        if (g_nv_util(g_nv_dev[g], &u) != KDEV_NVML_SUCCESS || !last)
                return false;
        if ((int64_t)u.gpu - (int64_t)own >= PACE_OTHERS_PCT) {
                atomic_store(&rg->contended_until_ns, now + PACE_CONTENDED_NS);
                return true;
        }
        return false;
}

/* Waits until the container may launch on region GPU |g|. */
static void pace_wait(int g)
{
        struct kdev_share_region_gpu *rg = &g_region->gpu[g];
        bool strict = g_region->policy == KDEV_SHARE_POLICY_STRICT;
        uint64_t waited = 0;
        for (;;) {
                pace_drain(false);
                uint64_t now = mono_ns();
                pace_refill(rg, now);
                int64_t t = atomic_load(&rg->tokens_ns);
                if (t > 0)
                        break;
                if (!strict && !pace_contended(g, now)) {
                        /* alone: run, and carry no debt into a later contention */
                        int64_t cur = t;
                        while (cur < 0 && !atomic_compare_exchange_weak(&rg->tokens_ns, &cur, 0)) {
                        }
                        break;
                }
                int64_t ns = -t * 100 / (int64_t)rg->compute;
                if (ns > PACE_SLEEP_MAX_NS)
                        ns = PACE_SLEEP_MAX_NS;
                if (ns < 100000)
                        ns = 100000;
                struct timespec ts = {0, (long)ns};
                nanosleep(&ts, NULL);
                waited += (uint64_t)ns;
        }
        int s = my_slot();
        if (s >= 0) {
                atomic_fetch_add(&g_region->proc[s].launches[g], 1);
                if (waited)
                        atomic_fetch_add(&g_region->proc[s].paced_ns[g], waited);
        }
}

/* The paced GPU of the current context, or -1. */
static inline int pace_gpu(void)
{
        if (!g_pace_any)
                return -1;
        kdev_cu_device dev;
        int g = current_gpu(&dev);
        return g >= 0 && g_paced[g] ? g : -1;
}

/* The slot to measure the next launch with (its events created on first
 * use in the current context), after waiting for the oldest when all are
 * unmeasured; NULL: not measured. */
static struct pace_entry *pace_begin(int g, kdev_cu_stream s, bool ptsz)
{
        struct pace_entry *e = &t_ring[t_next % PACE_RING];
        if (e->pending)
                pace_drain(true);
        pace_wait(g);
        if (e->pending)
                return NULL;
        if ((!e->start && g_ev_create(&e->start, 0) != KDEV_CUDA_SUCCESS) ||
            (!e->end && g_ev_create(&e->end, 0) != KDEV_CUDA_SUCCESS))
                return NULL;
        cuEventRecord_t *rec = ptsz && g_ev_record_ptsz ? g_ev_record_ptsz : g_ev_record;
        if (rec(e->start, s) != KDEV_CUDA_SUCCESS)
                return NULL;
        e->gpu = g;
        /* charged now at the last measured cost, corrected when measured:
         * the budget follows what is in flight */
        e->est = t_last_cost;
        atomic_fetch_sub(&g_region->gpu[g].tokens_ns, e->est);
        atomic_fetch_add(&g_region->gpu[g].busy_ns, (uint64_t)e->est);
        return e;
}

static void pace_end(struct pace_entry *e, kdev_cu_stream s, bool ptsz, CUresult launched)
{
        if (!e)
                return;
        cuEventRecord_t *rec = ptsz && g_ev_record_ptsz ? g_ev_record_ptsz : g_ev_record;
        if (launched != KDEV_CUDA_SUCCESS || rec(e->end, s) != KDEV_CUDA_SUCCESS) {
                atomic_fetch_add(&g_region->gpu[e->gpu].tokens_ns, e->est);
                atomic_fetch_sub(&g_region->gpu[e->gpu].busy_ns, (uint64_t)e->est);
                return;
        }
        e->pending = true;
        t_next++;
}

#define PACED(hook, stream, ptsz, ...)                                                     \
        do {                                                                             \
                cuda_ready();                                                            \
                int g_ = pace_gpu();                                                     \
                if (g_ < 0)                                                              \
                        return REAL(hook)(__VA_ARGS__);                                  \
                struct pace_entry *e_ = pace_begin(g_, (stream), (ptsz));                \
                CUresult r_ = REAL(hook)(__VA_ARGS__);                                   \
                pace_end(e_, (stream), (ptsz), r_);                                      \
                return r_;                                                               \
        } while (0)

CUresult cuLaunchKernel(kdev_cu_function f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                        unsigned by, unsigned bz, unsigned sh, kdev_cu_stream s, void **p,
                        void **x)
{
        PACED(cuLaunchKernel, s, false, f, gx, gy, gz, bx, by, bz, sh, s, p, x);
}
CUresult cuLaunchKernel_ptsz(kdev_cu_function f, unsigned gx, unsigned gy, unsigned gz,
                             unsigned bx, unsigned by, unsigned bz, unsigned sh, kdev_cu_stream s,
                             void **p, void **x)
{
        PACED(cuLaunchKernel_ptsz, s, true, f, gx, gy, gz, bx, by, bz, sh, s, p, x);
}
CUresult cuLaunchKernelEx(const kdev_cu_launch_config *c, kdev_cu_function f, void **p, void **x)
{
        PACED(cuLaunchKernelEx, c ? c->hStream : NULL, false, c, f, p, x);
}
CUresult cuLaunchKernelEx_ptsz(const kdev_cu_launch_config *c, kdev_cu_function f, void **p,
                               void **x)
{
        PACED(cuLaunchKernelEx_ptsz, c ? c->hStream : NULL, true, c, f, p, x);
}
CUresult cuLaunchCooperativeKernel(kdev_cu_function f, unsigned gx, unsigned gy, unsigned gz,
                                   unsigned bx, unsigned by, unsigned bz, unsigned sh,
                                   kdev_cu_stream s, void **p)
{
        PACED(cuLaunchCooperativeKernel, s, false, f, gx, gy, gz, bx, by, bz, sh, s, p);
}
CUresult cuLaunchCooperativeKernel_ptsz(kdev_cu_function f, unsigned gx, unsigned gy, unsigned gz,
                                        unsigned bx, unsigned by, unsigned bz, unsigned sh,
                                        kdev_cu_stream s, void **p)
{
        PACED(cuLaunchCooperativeKernel_ptsz, s, true, f, gx, gy, gz, bx, by, bz, sh, s, p);
}
CUresult cuGraphLaunch(kdev_cu_graph_exec g, kdev_cu_stream s)
{
        PACED(cuGraphLaunch, s, false, g, s);
}
CUresult cuGraphLaunch_ptsz(kdev_cu_graph_exec g, kdev_cu_stream s)
{
        PACED(cuGraphLaunch_ptsz, s, true, g, s);
}

/* --- entry-point resolution ---------------------------------------------------- */

/* The hook standing for the driver's |p| (the answer to |symbol|,
 * |version|, |flags|): the hook whose driver pointer is |p|; failing that
 * (a driver handing out internal pointers) the hook of the variant the
 * version table gives; else |p| itself. */
static void *hook_for(void *p, const char *symbol, int version, unsigned long long flags)
{
        for (int i = 0; i < H_COUNT; i++)
                if (g_hooks[i].base && atomic_load_explicit(&g_hooks[i].real,
                                                            memory_order_relaxed) == p)
                        return g_hooks[i].fn;
        const struct hook *best = NULL;
        bool pt = (flags & KDEV_CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) != 0;
        for (int i = 0; i < H_COUNT; i++) {
                const struct hook *h = &g_hooks[i];
                if (!h->base || strcmp(h->base, symbol) != 0 || h->version > version ||
                    (h->per_thread && !pt) || !atomic_load(&g_hooks[i].real))
                        continue;
                if (!best || h->version > best->version ||
                    (h->version == best->version && h->per_thread))
                        best = h;
        }
        return best ? best->fn : p;
}

CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int version,
                             unsigned long long flags, int *status)
{
        cuda_ready();
        cuGetProcAddress_v2_hook_t *real = REAL(cuGetProcAddress_v2);
        if (!real)
                return KDEV_CUDA_ERROR_NOT_SUPPORTED;
        CUresult r = real(symbol, pfn, version, flags, status);
        if (r == KDEV_CUDA_SUCCESS && pfn && *pfn && symbol)
                *pfn = hook_for(*pfn, symbol, version, flags);
        return r;
}

CUresult cuGetProcAddress(const char *symbol, void **pfn, int version, unsigned long long flags)
{
        cuda_ready();
        cuGetProcAddress_hook_t *real = REAL(cuGetProcAddress);
        if (!real)
                return KDEV_CUDA_ERROR_NOT_SUPPORTED;
        CUresult r = real(symbol, pfn, version, flags);
        if (r == KDEV_CUDA_SUCCESS && pfn && *pfn && symbol)
                *pfn = hook_for(*pfn, symbol, version, flags);
        return r;
}

/* dlsym on a real handle (the stub below sends pseudo-handles to glibc):
 * the hook for a hooked name the handle's library defines. */
__attribute__((used)) void *kdev_share__dlsym_handle(void *handle, const char *name);
__attribute__((used)) void *kdev_share__dlsym_handle(void *handle, const char *name)
{
        void *p = real_sym(handle, name);
        if (!p || !name || (strncmp(name, "cu", 2) != 0 && strncmp(name, "nvml", 4) != 0))
                return p;
        for (int i = 0; i < H_COUNT; i++)
                if (strcmp(g_hooks[i].name, name) == 0) {
                        void *none = NULL;
                        atomic_compare_exchange_strong(&g_hooks[i].real, &none, p);
                        return g_hooks[i].fn;
                }
        return p;
}

#if defined(__x86_64__)
/* dlsym: RTLD_DEFAULT (0) and RTLD_NEXT (-1) jump to glibc's dlsym with the
 * stack untouched, so its caller lookup sees the program's return address;
 * a real handle goes to kdev_share__dlsym_handle. */
__asm__(".text\n"
        ".globl dlsym\n"
        ".type dlsym,@function\n"
        "dlsym:\n"
        "        test %rdi, %rdi\n"
        "        je 1f\n"
        "        cmp $-1, %rdi\n"
        "        je 1f\n"
        "        jmp kdev_share__dlsym_handle\n"
        "1:      push %rdi\n"
        "        push %rsi\n"
        "        sub $8, %rsp\n"
        "        call kdev_share__real_dlsym\n"
        "        add $8, %rsp\n"
        "        pop %rsi\n"
        "        pop %rdi\n"
        "        test %rax, %rax\n"
        "        je 2f\n"
        "        jmp *%rax\n"
        "2:      ret\n"
        ".size dlsym, .-dlsym\n");
#else
/* elsewhere: pseudo-handles are answered from this library's position in
 * the search order (docs/share.md, "Limits") */
EXPORT void *dlsym(void *handle, const char *name);
void *dlsym(void *handle, const char *name)
{
        if (handle == RTLD_DEFAULT || handle == RTLD_NEXT)
                return real_sym(handle, name);
        return kdev_share__dlsym_handle(handle, name);
}
#endif
