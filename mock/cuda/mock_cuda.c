/* Mock libcuda.so.1: the CUDA driver API subset of README.md, over the
 * devices of a mock NVML topology file (the same UUIDs and memory). */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "mock.h"

#include "share/abi.h"

#define EXPORT __attribute__((visibility("default")))
#define MOCK_CUDA_MAX_ALLOCS 65536
#define MOCK_CUDA_VERSION_DEFAULT 13000

typedef kdev_cu_result CUresult;

struct ctx {
        unsigned magic;
        int dev;
        bool primary;
};
#define CTX_MAGIC 0x4b435458u

enum kind { K_FREE = 0, K_PTR, K_HANDLE, K_ARRAY, K_MIPMAP, K_HOST };

struct alloc {
        enum kind kind;
        unsigned long long key;
        int dev;
        size_t bytes;                   /* counted against the device */
};

struct dev {
        char name[96];
        char uuid[96];
        kdev_cu_uuid uuid_bytes;
        size_t total, used;
        int cc_major, cc_minor, sm_count;
        unsigned pci_bus, pci_domain, pci_device;
        struct ctx primary;
        int primary_refs;
        unsigned long long next_addr;
        void *default_pool;
};

/* The GPU timeline: when each device is busy until (CLOCK_MONOTONIC ns),
 * shared between processes through $KDEV_MOCK_CUDA_GPU_FILE. */
struct timeline {
        _Atomic unsigned long long busy_until[MOCK_MAX_GPUS];
        _Atomic unsigned long long busy_total[MOCK_MAX_GPUS];  /* ns of kernels run, all processes */
};

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static bool g_init;
static int g_n;
static struct dev *g_dev;
static struct alloc *g_allocs;
static size_t g_granularity = 2u << 20;
static int g_version = MOCK_CUDA_VERSION_DEFAULT;
static unsigned long long g_kernel_ns;
static struct timeline g_local_timeline;
static struct timeline *g_tl = &g_local_timeline;
static _Atomic unsigned long long g_busy_ns[MOCK_MAX_GPUS];
static _Atomic unsigned long long g_launches[MOCK_MAX_GPUS];
static unsigned long long g_last_end[MOCK_MAX_GPUS];  /* this process's queue, under g_lock */
static _Thread_local struct ctx *t_ctx;
static unsigned long long g_next_handle = 0x100000;

static unsigned long long now_ns(void)
{
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (unsigned long long)ts.tv_sec * 1000000000ull + (unsigned long long)ts.tv_nsec;
}

static void sleep_until(unsigned long long t)
{
        struct timespec ts = {(time_t)(t / 1000000000ull), (long)(t % 1000000000ull)};
        while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR) {
        }
}

static int hexval(char c)
{
        if (c >= '0' && c <= '9') return c - '0';
        if (c >= 'a' && c <= 'f') return c - 'a' + 10;
        if (c >= 'A' && c <= 'F') return c - 'A' + 10;
        return -1;
}

/* "GPU-4603f764-b00c-271e-0980-eda368e40931" -> 16 bytes; 0 or -1. */
static int parse_uuid(const char *s, kdev_cu_uuid *out)
{
        if (strncmp(s, "GPU-", 4) != 0 && strncmp(s, "MIG-", 4) != 0)
                return -1;
        s += 4;
        for (int i = 0; i < 16; i++) {
                if (*s == '-')
                        s++;
                int a = hexval(s[0]), b = a < 0 ? -1 : hexval(s[1]);
                if (b < 0)
                        return -1;
                out->bytes[i] = (char)(a << 4 | b);
                s += 2;
        }
        return *s ? -1 : 0;
}

/* The CUDA devices of |m| in MIG mode: its MIG devices not destroyed; 0
 * when MIG is off (the GPU itself is the device). */
static size_t mig_devices(const struct mock_gpu *m)
{
        size_t n = 0;
        for (size_t i = 0; m->mig_mode == NVML_DEVICE_MIG_ENABLE && i < m->n_migs; i++)
                n += !m->migs[i].hidden;
        return n;
}

static unsigned long long env_ull(const char *name, unsigned long long def)
{
        const char *v = getenv(name);
        if (!v || !*v)
                return def;
        char *end;
        errno = 0;
        unsigned long long x = strtoull(v, &end, 0);
        if (errno || *end) {
                fprintf(stderr, "mock libcuda: %s=%s is not a number; using %llu\n", name, v, def);
                return def;
        }
        return x;
}

static void map_timeline(void)
{
        const char *path = getenv("KDEV_MOCK_CUDA_GPU_FILE");
        if (!path || !*path)
                return;
        int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0666);
        if (fd < 0) {
                fprintf(stderr, "mock libcuda: %s: %s (per-process timeline)\n", path,
                        strerror(errno));
                return;
        }
        struct stat st;
        if (fstat(fd, &st) == 0 && (size_t)st.st_size < sizeof(struct timeline) &&
            ftruncate(fd, sizeof(struct timeline)) != 0) {
                close(fd);
                return;
        }
        void *m = mmap(NULL, sizeof(struct timeline), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        close(fd);
        if (m != MAP_FAILED)
                g_tl = m;
}

static CUresult load_locked(void)
{
        if (g_init)
                return KDEV_CUDA_SUCCESS;
        const char *path = getenv("KDEV_MOCK_CUDA_TOPOLOGY");
        if (!path || !*path)
                path = getenv("KDEV_MOCK_NVML_TOPOLOGY");
        if (!path || !*path) {
                fprintf(stderr, "mock libcuda: neither KDEV_MOCK_CUDA_TOPOLOGY nor "
                        "KDEV_MOCK_NVML_TOPOLOGY is set\n");
                return KDEV_CUDA_ERROR_NO_DEVICE;
        }
        char msg[512];
        struct mock_state *s = mock_topology_load(path, msg, sizeof(msg));
        if (!s) {
                fprintf(stderr, "mock libcuda: %s\n", msg);
                return KDEV_CUDA_ERROR_UNKNOWN;
        }
        /* A GPU in MIG mode is not a CUDA device: its MIG devices are, in
         * its place (each with its own UUID, as cuDeviceGetUuid_v2 gives
         * it, and its GPU instance's memory). */
        size_t n = 0;
        for (size_t i = 0; i < s->n_gpus; i++)
                n += s->gpus[i].hidden ? 0 : mig_devices(&s->gpus[i]) ? mig_devices(&s->gpus[i])
                                                                      : 1;
        if (n > MOCK_MAX_GPUS)
                n = MOCK_MAX_GPUS;
        g_dev = calloc(n ? n : 1, sizeof(*g_dev));
        g_allocs = calloc(MOCK_CUDA_MAX_ALLOCS, sizeof(*g_allocs));
        if (!g_dev || !g_allocs) {
                free(g_dev);
                free(g_allocs);
                mock_state_free(s);
                return KDEV_CUDA_ERROR_OUT_OF_MEMORY;
        }
        int k = 0;
        for (size_t i = 0; i < s->n_gpus; i++) {
                const struct mock_gpu *m = &s->gpus[i];
                if (m->hidden)
                        continue;
                bool mig_mode = mig_devices(m) > 0;
                for (size_t j = 0; j < (mig_mode ? m->n_migs : 1) && (size_t)k < n; j++) {
                        const struct mock_mig *mig = mig_mode ? &m->migs[j] : NULL;
                        if (mig && mig->hidden)
                                continue;
                        struct dev *d = &g_dev[k];
                        snprintf(d->name, sizeof(d->name), "%s", m->name);
                        snprintf(d->uuid, sizeof(d->uuid), "%s", mig ? mig->uuid : m->uuid);
                        if (parse_uuid(d->uuid, &d->uuid_bytes) != 0)
                                memset(&d->uuid_bytes, 0, sizeof(d->uuid_bytes));
                        d->total = mig ? (size_t)m->profiles[mig->gi->profile].info.memorySizeMB
                                                 << 20
                                       : (size_t)m->mem_total;
                        d->cc_major = m->cc_major;
                        d->cc_minor = m->cc_minor;
                        d->sm_count = (int)m->sm_count;
                        d->pci_bus = m->pci.bus;
                        d->pci_domain = m->pci.domain;
                        d->pci_device = m->pci.device;
                        d->primary = (struct ctx){CTX_MAGIC, k, true};
                        d->next_addr = 0x700000000000ull + ((unsigned long long)k << 40);
                        d->default_pool = &d->primary;
                        k++;
                }
        }
        g_n = k;
        mock_state_free(s);
        g_granularity = (size_t)env_ull("KDEV_MOCK_CUDA_GRANULARITY", 2u << 20);
        if (g_granularity == 0)
                g_granularity = 1;
        g_version = (int)env_ull("KDEV_MOCK_CUDA_DRIVER_VERSION", MOCK_CUDA_VERSION_DEFAULT);
        g_kernel_ns = env_ull("KDEV_MOCK_CUDA_KERNEL_US", 0) * 1000ull;
        map_timeline();
        g_init = true;
        return KDEV_CUDA_SUCCESS;
}

#define LOCKED(expr)                                                                     \
        do {                                                                             \
                pthread_mutex_lock(&g_lock);                                             \
                CUresult r_ = (expr);                                                    \
                pthread_mutex_unlock(&g_lock);                                           \
                return r_;                                                               \
        } while (0)

static CUresult need_dev(int dev)
{
        if (!g_init)
                return KDEV_CUDA_ERROR_NOT_INITIALIZED;
        if (dev < 0 || dev >= g_n)
                return KDEV_CUDA_ERROR_INVALID_DEVICE;
        return KDEV_CUDA_SUCCESS;
}

static CUresult need_ctx(int *dev)
{
        if (!g_init)
                return KDEV_CUDA_ERROR_NOT_INITIALIZED;
        if (!t_ctx)
                return KDEV_CUDA_ERROR_INVALID_CONTEXT;
        *dev = t_ctx->dev;
        return KDEV_CUDA_SUCCESS;
}

/* --- allocation map ---------------------------------------------------------- */

static struct alloc *find(enum kind kind, unsigned long long key)
{
        for (size_t i = 0; i < MOCK_CUDA_MAX_ALLOCS; i++)
                if (g_allocs[i].kind == kind && g_allocs[i].key == key)
                        return &g_allocs[i];
        return NULL;
}

static CUresult charge(int dev, enum kind kind, size_t bytes, unsigned long long key)
{
        struct dev *d = &g_dev[dev];
        if (kind != K_HOST && bytes > d->total - d->used)
                return KDEV_CUDA_ERROR_OUT_OF_MEMORY;
        struct alloc *a = find(K_FREE, 0);
        if (!a)
                return KDEV_CUDA_ERROR_OUT_OF_MEMORY;
        *a = (struct alloc){kind, key, dev, bytes};
        if (kind != K_HOST)
                d->used += bytes;
        return KDEV_CUDA_SUCCESS;
}

static CUresult uncharge(enum kind kind, unsigned long long key)
{
        struct alloc *a = find(kind, key);
        if (!a)
                return kind == K_PTR ? KDEV_CUDA_ERROR_INVALID_VALUE : KDEV_CUDA_ERROR_INVALID_HANDLE;
        if (kind != K_HOST)
                g_dev[a->dev].used -= a->bytes;
        *a = (struct alloc){0};
        return KDEV_CUDA_SUCCESS;
}

static CUresult alloc_ptr(kdev_cu_deviceptr *p, size_t bytes, int dev)
{
        if (!p || bytes == 0)
                return KDEV_CUDA_ERROR_INVALID_VALUE;
        size_t r = kdev_cu_round_up(bytes, g_granularity);
        struct dev *d = &g_dev[dev];
        CUresult rc = charge(dev, K_PTR, r, d->next_addr);
        if (rc != KDEV_CUDA_SUCCESS)
                return rc;
        *p = d->next_addr;
        d->next_addr += r;
        return KDEV_CUDA_SUCCESS;
}

/* --- entry points ---------------------------------------------------------- */

static CUresult m_init(unsigned flags)
{
        if (flags != 0)
                return KDEV_CUDA_ERROR_INVALID_VALUE;
        CUresult r = load_locked();
        if (r != KDEV_CUDA_SUCCESS)
                return r;
        return g_n ? KDEV_CUDA_SUCCESS : KDEV_CUDA_ERROR_NO_DEVICE;
}
EXPORT CUresult cuInit(unsigned flags);
CUresult cuInit(unsigned flags)
{
        if (getenv("KDEV_MOCK_CUDA_TRACE"))
                fprintf(stderr, "mock libcuda: cuInit %u\n", flags);
        LOCKED(m_init(flags));
}

EXPORT CUresult cuDriverGetVersion(int *v);
CUresult cuDriverGetVersion(int *v)
{
        if (!v)
                return KDEV_CUDA_ERROR_INVALID_VALUE;
        *v = (int)env_ull("KDEV_MOCK_CUDA_DRIVER_VERSION", MOCK_CUDA_VERSION_DEFAULT);
        return KDEV_CUDA_SUCCESS;
}

static CUresult m_count(int *n)
{
        if (!g_init)
                return KDEV_CUDA_ERROR_NOT_INITIALIZED;
        if (!n)
                return KDEV_CUDA_ERROR_INVALID_VALUE;
        *n = g_n;
        return KDEV_CUDA_SUCCESS;
}
EXPORT CUresult cuDeviceGetCount(int *n);
CUresult cuDeviceGetCount(int *n) { LOCKED(m_count(n)); }

static CUresult m_get(int *d, int ordinal)
{
        if (!g_init)
                return KDEV_CUDA_ERROR_NOT_INITIALIZED;
        if (!d)
                return KDEV_CUDA_ERROR_INVALID_VALUE;
        if (ordinal < 0 || ordinal >= g_n)
                return KDEV_CUDA_ERROR_INVALID_DEVICE;
        *d = ordinal;
        return KDEV_CUDA_SUCCESS;
}
EXPORT CUresult cuDeviceGet(int *d, int ordinal);
CUresult cuDeviceGet(int *d, int ordinal) { LOCKED(m_get(d, ordinal)); }

static CUresult m_name(char *name, int len, int dev)
{
        CUresult r = need_dev(dev);
        if (r != KDEV_CUDA_SUCCESS)
                return r;
        if (!name || len <= 0)
                return KDEV_CUDA_ERROR_INVALID_VALUE;
        snprintf(name, (size_t)len, "%s", g_dev[dev].name);
        return KDEV_CUDA_SUCCESS;
}
EXPORT CUresult cuDeviceGetName(char *name, int len, int dev);
CUresult cuDeviceGetName(char *name, int len, int dev) { LOCKED(m_name(name, len, dev)); }

static CUresult m_uuid(kdev_cu_uuid *u, int dev)
{
        CUresult r = need_dev(dev);
        if (r != KDEV_CUDA_SUCCESS)
                return r;
        if (!u)
                return KDEV_CUDA_ERROR_INVALID_VALUE;
        *u = g_dev[dev].uuid_bytes;
        return KDEV_CUDA_SUCCESS;
}
EXPORT CUresult cuDeviceGetUuid(kdev_cu_uuid *u, int dev);
CUresult cuDeviceGetUuid(kdev_cu_uuid *u, int dev) { LOCKED(m_uuid(u, dev)); }
EXPORT CUresult cuDeviceGetUuid_v2(kdev_cu_uuid *u, int dev);
CUresult cuDeviceGetUuid_v2(kdev_cu_uuid *u, int dev) { LOCKED(m_uuid(u, dev)); }

static CUresult m_total(size_t *b, int dev)
{
        CUresult r = need_dev(dev);
        if (r != KDEV_CUDA_SUCCESS)
                return r;
        if (!b)
                return KDEV_CUDA_ERROR_INVALID_VALUE;
        *b = g_dev[dev].total;
        return KDEV_CUDA_SUCCESS;
}
EXPORT CUresult cuDeviceTotalMem_v2(size_t *b, int dev);
CUresult cuDeviceTotalMem_v2(size_t *b, int dev) { LOCKED(m_total(b, dev)); }

static CUresult m_attr(int *v, int attr, int dev)
{
        CUresult r = need_dev(dev);
        if (r != KDEV_CUDA_SUCCESS)
                return r;
        if (!v || attr <= 0 || attr > 200)
                return KDEV_CUDA_ERROR_INVALID_VALUE;
        const struct dev *d = &g_dev[dev];
        switch (attr) {
        case 1: *v = 1024; break;                       /* MAX_THREADS_PER_BLOCK */
        case 10: *v = 32; break;                        /* WARP_SIZE */
        case KDEV_CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT: *v = d->sm_count; break;
        case KDEV_CU_DEVICE_ATTRIBUTE_PCI_BUS_ID: *v = (int)d->pci_bus; break;
        case KDEV_CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID: *v = (int)d->pci_device; break;
        case KDEV_CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID: *v = (int)d->pci_domain; break;
        case KDEV_CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR: *v = d->cc_major; break;
        case KDEV_CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR: *v = d->cc_minor; break;
        case KDEV_CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED:
        case KDEV_CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED:
        case 41: /* UNIFIED_ADDRESSING */
        case 83: /* MANAGED_MEMORY */
        case 95: /* COOPERATIVE_LAUNCH */ *v = 1; break;
        case 39: *v = 2048; break;                      /* MAX_THREADS_PER_MULTIPROCESSOR */
        default: *v = 0; break;
        }
        return KDEV_CUDA_SUCCESS;
}
EXPORT CUresult cuDeviceGetAttribute(int *v, int attr, int dev);
CUresult cuDeviceGetAttribute(int *v, int attr, int dev) { LOCKED(m_attr(v, attr, dev)); }

static CUresult m_retain(kdev_cu_context *c, int dev)
{
        CUresult r = need_dev(dev);
        if (r != KDEV_CUDA_SUCCESS)
                return r;
        if (!c)
                return KDEV_CUDA_ERROR_INVALID_VALUE;
        g_dev[dev].primary_refs++;
        *c = &g_dev[dev].primary;
        return KDEV_CUDA_SUCCESS;
}
EXPORT CUresult cuDevicePrimaryCtxRetain(kdev_cu_context *c, int dev);
CUresult cuDevicePrimaryCtxRetain(kdev_cu_context *c, int dev) { LOCKED(m_retain(c, dev)); }

static CUresult m_release(int dev)
{
        CUresult r = need_dev(dev);
        if (r != KDEV_CUDA_SUCCESS)
                return r;
        if (g_dev[dev].primary_refs <= 0)
                return KDEV_CUDA_ERROR_INVALID_CONTEXT;
        g_dev[dev].primary_refs--;
        return KDEV_CUDA_SUCCESS;
}
EXPORT CUresult cuDevicePrimaryCtxRelease_v2(int dev);
CUresult cuDevicePrimaryCtxRelease_v2(int dev) { LOCKED(m_release(dev)); }
EXPORT CUresult cuDevicePrimaryCtxRelease(int dev);
CUresult cuDevicePrimaryCtxRelease(int dev) { LOCKED(m_release(dev)); }

static CUresult m_ctx_create(kdev_cu_context *c, int dev)
{
        CUresult r = need_dev(dev);
        if (r != KDEV_CUDA_SUCCESS)
                return r;
        if (!c)
                return KDEV_CUDA_ERROR_INVALID_VALUE;
        struct ctx *x = malloc(sizeof(*x));
        if (!x)
                return KDEV_CUDA_ERROR_OUT_OF_MEMORY;
        *x = (struct ctx){CTX_MAGIC, dev, false};
        t_ctx = x;
        *c = x;
        return KDEV_CUDA_SUCCESS;
}
EXPORT CUresult cuCtxCreate_v2(kdev_cu_context *c, unsigned flags, int dev);
CUresult cuCtxCreate_v2(kdev_cu_context *c, unsigned flags, int dev)
{
        (void)flags;
        LOCKED(m_ctx_create(c, dev));
}
EXPORT CUresult cuCtxCreate_v3(kdev_cu_context *c, void *params, int n, unsigned flags, int dev);
CUresult cuCtxCreate_v3(kdev_cu_context *c, void *params, int n, unsigned flags, int dev)
{
        (void)params, (void)n, (void)flags;
        LOCKED(m_ctx_create(c, dev));
}
EXPORT CUresult cuCtxCreate_v4(kdev_cu_context *c, void *params, unsigned flags, int dev);
CUresult cuCtxCreate_v4(kdev_cu_context *c, void *params, unsigned flags, int dev)
{
        (void)params, (void)flags;
        LOCKED(m_ctx_create(c, dev));
}

static CUresult m_ctx_destroy(kdev_cu_context c)
{
        struct ctx *x = c;
        if (!g_init)
                return KDEV_CUDA_ERROR_NOT_INITIALIZED;
        if (!x || x->magic != CTX_MAGIC || x->primary)
                return KDEV_CUDA_ERROR_INVALID_CONTEXT;
        if (t_ctx == x)
                t_ctx = NULL;
        x->magic = 0;
        free(x);
        return KDEV_CUDA_SUCCESS;
}
EXPORT CUresult cuCtxDestroy_v2(kdev_cu_context c);
CUresult cuCtxDestroy_v2(kdev_cu_context c) { LOCKED(m_ctx_destroy(c)); }

EXPORT CUresult cuCtxGetCurrent(kdev_cu_context *c);
CUresult cuCtxGetCurrent(kdev_cu_context *c)
{
        if (!g_init)
                return KDEV_CUDA_ERROR_NOT_INITIALIZED;
        if (!c)
                return KDEV_CUDA_ERROR_INVALID_VALUE;
        *c = t_ctx;
        return KDEV_CUDA_SUCCESS;
}

EXPORT CUresult cuCtxSetCurrent(kdev_cu_context c);
CUresult cuCtxSetCurrent(kdev_cu_context c)
{
        if (!g_init)
                return KDEV_CUDA_ERROR_NOT_INITIALIZED;
        struct ctx *x = c;
        if (x && x->magic != CTX_MAGIC)
                return KDEV_CUDA_ERROR_INVALID_CONTEXT;
        t_ctx = x;
        return KDEV_CUDA_SUCCESS;
}

EXPORT CUresult cuCtxGetDevice(int *dev);
CUresult cuCtxGetDevice(int *dev)
{
        if (!dev)
                return KDEV_CUDA_ERROR_INVALID_VALUE;
        return need_ctx(dev);
}

static void sync_dev(int dev)
{
        pthread_mutex_lock(&g_lock);
        unsigned long long end = g_last_end[dev];
        pthread_mutex_unlock(&g_lock);
        if (end > now_ns())
                sleep_until(end);
}

EXPORT CUresult cuCtxSynchronize(void);
CUresult cuCtxSynchronize(void)
{
        int dev;
        CUresult r = need_ctx(&dev);
        if (r == KDEV_CUDA_SUCCESS)
                sync_dev(dev);
        return r;
}
EXPORT CUresult cuStreamSynchronize(kdev_cu_stream s);
CUresult cuStreamSynchronize(kdev_cu_stream s)
{
        (void)s;
        return cuCtxSynchronize();
}
EXPORT CUresult cuStreamSynchronize_ptsz(kdev_cu_stream s);
CUresult cuStreamSynchronize_ptsz(kdev_cu_stream s)
{
        (void)s;
        return cuCtxSynchronize();
}

/* memory */

static CUresult m_alloc(kdev_cu_deviceptr *p, size_t bytes)
{
        int dev;
        CUresult r = need_ctx(&dev);
        if (r != KDEV_CUDA_SUCCESS)
                return r;
        return alloc_ptr(p, bytes, dev);
}
EXPORT CUresult cuMemAlloc_v2(kdev_cu_deviceptr *p, size_t bytes);
CUresult cuMemAlloc_v2(kdev_cu_deviceptr *p, size_t bytes) { LOCKED(m_alloc(p, bytes)); }
EXPORT CUresult cuMemAllocManaged(kdev_cu_deviceptr *p, size_t bytes, unsigned flags);
CUresult cuMemAllocManaged(kdev_cu_deviceptr *p, size_t bytes, unsigned flags)
{
        if (flags != 1 && flags != 2)
                return KDEV_CUDA_ERROR_INVALID_VALUE;
        LOCKED(m_alloc(p, bytes));
}
EXPORT CUresult cuMemAllocAsync(kdev_cu_deviceptr *p, size_t bytes, kdev_cu_stream s);
CUresult cuMemAllocAsync(kdev_cu_deviceptr *p, size_t bytes, kdev_cu_stream s)
{
        (void)s;
        LOCKED(m_alloc(p, bytes));
}
EXPORT CUresult cuMemAllocAsync_ptsz(kdev_cu_deviceptr *p, size_t bytes, kdev_cu_stream s);
CUresult cuMemAllocAsync_ptsz(kdev_cu_deviceptr *p, size_t bytes, kdev_cu_stream s)
{
        (void)s;
        LOCKED(m_alloc(p, bytes));
}
EXPORT CUresult cuMemAllocFromPoolAsync(kdev_cu_deviceptr *p, size_t bytes, kdev_cu_mempool pool,
                                        kdev_cu_stream s);
CUresult cuMemAllocFromPoolAsync(kdev_cu_deviceptr *p, size_t bytes, kdev_cu_mempool pool,
                                 kdev_cu_stream s)
{
        (void)s;
        if (!pool)
                return KDEV_CUDA_ERROR_INVALID_VALUE;
        LOCKED(m_alloc(p, bytes));
}
EXPORT CUresult cuMemAllocFromPoolAsync_ptsz(kdev_cu_deviceptr *p, size_t bytes,
                                             kdev_cu_mempool pool, kdev_cu_stream s);
CUresult cuMemAllocFromPoolAsync_ptsz(kdev_cu_deviceptr *p, size_t bytes, kdev_cu_mempool pool,
                                      kdev_cu_stream s)
{
        return cuMemAllocFromPoolAsync(p, bytes, pool, s);
}

/* The pitch: the width rounded up to 512 bytes (the mock's texture alignment). */
static CUresult m_pitch(kdev_cu_deviceptr *p, size_t *pitch, size_t w, size_t h, unsigned elem)
{
        int dev;
        CUresult r = need_ctx(&dev);
        if (r != KDEV_CUDA_SUCCESS)
                return r;
        if (!pitch || w == 0 || h == 0 || (elem != 4 && elem != 8 && elem != 16))
                return KDEV_CUDA_ERROR_INVALID_VALUE;
        size_t pw = kdev_cu_round_up(w, 512);
        if (h > SIZE_MAX / pw)
                return KDEV_CUDA_ERROR_OUT_OF_MEMORY;
        r = alloc_ptr(p, pw * h, dev);
        if (r == KDEV_CUDA_SUCCESS)
                *pitch = pw;
        return r;
}
EXPORT CUresult cuMemAllocPitch_v2(kdev_cu_deviceptr *p, size_t *pitch, size_t w, size_t h,
                                   unsigned elem);
CUresult cuMemAllocPitch_v2(kdev_cu_deviceptr *p, size_t *pitch, size_t w, size_t h, unsigned elem)
{
        LOCKED(m_pitch(p, pitch, w, h, elem));
}

static CUresult m_free(kdev_cu_deviceptr p)
{
        if (!g_init)
                return KDEV_CUDA_ERROR_NOT_INITIALIZED;
        if (p == 0)
                return KDEV_CUDA_SUCCESS;
        return uncharge(K_PTR, p);
}
EXPORT CUresult cuMemFree_v2(kdev_cu_deviceptr p);
CUresult cuMemFree_v2(kdev_cu_deviceptr p) { LOCKED(m_free(p)); }
EXPORT CUresult cuMemFreeAsync(kdev_cu_deviceptr p, kdev_cu_stream s);
CUresult cuMemFreeAsync(kdev_cu_deviceptr p, kdev_cu_stream s)
{
        (void)s;
        LOCKED(m_free(p));
}
EXPORT CUresult cuMemFreeAsync_ptsz(kdev_cu_deviceptr p, kdev_cu_stream s);
CUresult cuMemFreeAsync_ptsz(kdev_cu_deviceptr p, kdev_cu_stream s)
{
        (void)s;
        LOCKED(m_free(p));
}

static CUresult m_info(size_t *fr, size_t *total)
{
        int dev;
        CUresult r = need_ctx(&dev);
        if (r != KDEV_CUDA_SUCCESS)
                return r;
        if (!fr || !total)
                return KDEV_CUDA_ERROR_INVALID_VALUE;
        *total = g_dev[dev].total;
        *fr = g_dev[dev].total - g_dev[dev].used;
        return KDEV_CUDA_SUCCESS;
}
EXPORT CUresult cuMemGetInfo_v2(size_t *fr, size_t *total);
CUresult cuMemGetInfo_v2(size_t *fr, size_t *total) { LOCKED(m_info(fr, total)); }

static CUresult check_prop(const kdev_cu_mem_allocation_prop *prop)
{
        if (!prop || prop->type != KDEV_CU_MEM_ALLOCATION_TYPE_PINNED ||
            prop->location.type != KDEV_CU_MEM_LOCATION_TYPE_DEVICE)
                return KDEV_CUDA_ERROR_INVALID_VALUE;
        return need_dev(prop->location.id) == KDEV_CUDA_SUCCESS ? KDEV_CUDA_SUCCESS
                                                                : KDEV_CUDA_ERROR_INVALID_DEVICE;
}

static CUresult m_gran(size_t *g, const kdev_cu_mem_allocation_prop *prop, int option)
{
        if (!g_init)
                return KDEV_CUDA_ERROR_NOT_INITIALIZED;
        if (!g || (option != KDEV_CU_MEM_ALLOC_GRANULARITY_MINIMUM &&
                   option != KDEV_CU_MEM_ALLOC_GRANULARITY_RECOMMENDED))
                return KDEV_CUDA_ERROR_INVALID_VALUE;
        CUresult r = check_prop(prop);
        if (r != KDEV_CUDA_SUCCESS)
                return r;
        *g = g_granularity;
        return KDEV_CUDA_SUCCESS;
}
EXPORT CUresult cuMemGetAllocationGranularity(size_t *g, const kdev_cu_mem_allocation_prop *prop,
                                              int option);
CUresult cuMemGetAllocationGranularity(size_t *g, const kdev_cu_mem_allocation_prop *prop,
                                       int option)
{
        LOCKED(m_gran(g, prop, option));
}

static CUresult m_create(kdev_cu_mem_handle *h, size_t size,
                         const kdev_cu_mem_allocation_prop *prop, unsigned long long flags)
{
        if (!g_init)
                return KDEV_CUDA_ERROR_NOT_INITIALIZED;
        if (!h || flags != 0 || size == 0 || size % g_granularity != 0)
                return KDEV_CUDA_ERROR_INVALID_VALUE;
        CUresult r = check_prop(prop);
        if (r != KDEV_CUDA_SUCCESS)
                return r;
        unsigned long long key = g_next_handle++;
        r = charge(prop->location.id, K_HANDLE, size, key);
        if (r == KDEV_CUDA_SUCCESS)
                *h = key;
        return r;
}
EXPORT CUresult cuMemCreate(kdev_cu_mem_handle *h, size_t size,
                            const kdev_cu_mem_allocation_prop *prop, unsigned long long flags);
CUresult cuMemCreate(kdev_cu_mem_handle *h, size_t size, const kdev_cu_mem_allocation_prop *prop,
                     unsigned long long flags)
{
        LOCKED(m_create(h, size, prop, flags));
}
static CUresult m_mem_release(kdev_cu_mem_handle h)
{
        if (!g_init)
                return KDEV_CUDA_ERROR_NOT_INITIALIZED;
        CUresult r = uncharge(K_HANDLE, h);
        return r == KDEV_CUDA_SUCCESS ? r : KDEV_CUDA_ERROR_INVALID_VALUE;
}
EXPORT CUresult cuMemRelease(kdev_cu_mem_handle h);
CUresult cuMemRelease(kdev_cu_mem_handle h) { LOCKED(m_mem_release(h)); }

static CUresult new_array(enum kind kind, void **out, size_t bytes)
{
        int dev;
        CUresult r = need_ctx(&dev);
        if (r != KDEV_CUDA_SUCCESS)
                return r;
        if (!out)
                return KDEV_CUDA_ERROR_INVALID_VALUE;
        unsigned long long key = g_next_handle++;
        r = charge(dev, kind, kdev_cu_round_up(bytes, g_granularity), key);
        if (r == KDEV_CUDA_SUCCESS)
                *out = (void *)(uintptr_t)key;
        return r;
}
static CUresult m_array(kdev_cu_array *a, const kdev_cu_array_descriptor *d)
{
        if (!d || d->Width == 0)
                return g_init ? KDEV_CUDA_ERROR_INVALID_VALUE : KDEV_CUDA_ERROR_NOT_INITIALIZED;
        return new_array(K_ARRAY, a, kdev_cu_array_bytes(d->Width, d->Height, 0, d->Format,
                                                         d->NumChannels));
}
EXPORT CUresult cuArrayCreate_v2(kdev_cu_array *a, const kdev_cu_array_descriptor *d);
CUresult cuArrayCreate_v2(kdev_cu_array *a, const kdev_cu_array_descriptor *d) { LOCKED(m_array(a, d)); }
static CUresult m_array3d(kdev_cu_array *a, const kdev_cu_array3d_descriptor *d)
{
        if (!d || d->Width == 0)
                return g_init ? KDEV_CUDA_ERROR_INVALID_VALUE : KDEV_CUDA_ERROR_NOT_INITIALIZED;
        return new_array(K_ARRAY, a, kdev_cu_array_bytes(d->Width, d->Height, d->Depth, d->Format,
                                                         d->NumChannels));
}
EXPORT CUresult cuArray3DCreate_v2(kdev_cu_array *a, const kdev_cu_array3d_descriptor *d);
CUresult cuArray3DCreate_v2(kdev_cu_array *a, const kdev_cu_array3d_descriptor *d)
{
        LOCKED(m_array3d(a, d));
}
static CUresult m_mipmap(kdev_cu_mipmapped_array *a, const kdev_cu_array3d_descriptor *d,
                         unsigned levels)
{
        if (!d || d->Width == 0 || levels == 0)
                return g_init ? KDEV_CUDA_ERROR_INVALID_VALUE : KDEV_CUDA_ERROR_NOT_INITIALIZED;
        return new_array(K_MIPMAP, a, kdev_cu_mipmap_bytes(d->Width, d->Height, d->Depth,
                                                           d->Format, d->NumChannels, levels));
}
EXPORT CUresult cuMipmappedArrayCreate(kdev_cu_mipmapped_array *a,
                                       const kdev_cu_array3d_descriptor *d, unsigned levels);
CUresult cuMipmappedArrayCreate(kdev_cu_mipmapped_array *a, const kdev_cu_array3d_descriptor *d,
                                unsigned levels)
{
        LOCKED(m_mipmap(a, d, levels));
}
static CUresult m_array_destroy(enum kind kind, void *a)
{
        if (!g_init)
                return KDEV_CUDA_ERROR_NOT_INITIALIZED;
        return uncharge(kind, (unsigned long long)(uintptr_t)a);
}
EXPORT CUresult cuArrayDestroy(kdev_cu_array a);
CUresult cuArrayDestroy(kdev_cu_array a) { LOCKED(m_array_destroy(K_ARRAY, a)); }
EXPORT CUresult cuMipmappedArrayDestroy(kdev_cu_mipmapped_array a);
CUresult cuMipmappedArrayDestroy(kdev_cu_mipmapped_array a) { LOCKED(m_array_destroy(K_MIPMAP, a)); }

EXPORT CUresult cuDeviceGetDefaultMemPool(kdev_cu_mempool *pool, int dev);
CUresult cuDeviceGetDefaultMemPool(kdev_cu_mempool *pool, int dev)
{
        pthread_mutex_lock(&g_lock);
        CUresult r = need_dev(dev);
        if (r == KDEV_CUDA_SUCCESS && !pool)
                r = KDEV_CUDA_ERROR_INVALID_VALUE;
        if (r == KDEV_CUDA_SUCCESS)
                *pool = g_dev[dev].default_pool;
        pthread_mutex_unlock(&g_lock);
        return r;
}

/* pinned host memory: real host memory, not device memory */
static CUresult m_host(void **pp, size_t bytes)
{
        if (!g_init)
                return KDEV_CUDA_ERROR_NOT_INITIALIZED;
        if (!pp || bytes == 0)
                return KDEV_CUDA_ERROR_INVALID_VALUE;
        void *p = malloc(bytes);
        if (!p)
                return KDEV_CUDA_ERROR_OUT_OF_MEMORY;
        CUresult r = charge(0, K_HOST, bytes, (unsigned long long)(uintptr_t)p);
        if (r != KDEV_CUDA_SUCCESS) {
                free(p);
                return r;
        }
        *pp = p;
        return KDEV_CUDA_SUCCESS;
}
EXPORT CUresult cuMemAllocHost_v2(void **pp, size_t bytes);
CUresult cuMemAllocHost_v2(void **pp, size_t bytes) { LOCKED(m_host(pp, bytes)); }
EXPORT CUresult cuMemHostAlloc(void **pp, size_t bytes, unsigned flags);
CUresult cuMemHostAlloc(void **pp, size_t bytes, unsigned flags)
{
        (void)flags;
        LOCKED(m_host(pp, bytes));
}
static CUresult m_host_free(void *p)
{
        if (!g_init)
                return KDEV_CUDA_ERROR_NOT_INITIALIZED;
        CUresult r = uncharge(K_HOST, (unsigned long long)(uintptr_t)p);
        if (r == KDEV_CUDA_SUCCESS)
                free(p);
        return r == KDEV_CUDA_SUCCESS ? r : KDEV_CUDA_ERROR_INVALID_VALUE;
}
EXPORT CUresult cuMemFreeHost(void *p);
CUresult cuMemFreeHost(void *p) { LOCKED(m_host_free(p)); }

/* modules and kernels: cuModuleGetFunction names a kernel; "kdev_sleep_<us>"
 * runs for <us> microseconds, any other for $KDEV_MOCK_CUDA_KERNEL_US */
struct func {
        unsigned magic;
        unsigned long long ns;
};
#define FUNC_MAGIC 0x46554e43u

EXPORT CUresult cuModuleLoadData(void **module, const void *image);
CUresult cuModuleLoadData(void **module, const void *image)
{
        if (!g_init)
                return KDEV_CUDA_ERROR_NOT_INITIALIZED;
        if (!module || !image)
                return KDEV_CUDA_ERROR_INVALID_VALUE;
        *module = (void *)&g_lock;
        return KDEV_CUDA_SUCCESS;
}
EXPORT CUresult cuModuleGetFunction(kdev_cu_function *f, void *module, const char *name);
CUresult cuModuleGetFunction(kdev_cu_function *f, void *module, const char *name)
{
        if (!g_init)
                return KDEV_CUDA_ERROR_NOT_INITIALIZED;
        if (!f || !module || !name)
                return KDEV_CUDA_ERROR_INVALID_VALUE;
        struct func *fn = malloc(sizeof(*fn));
        if (!fn)
                return KDEV_CUDA_ERROR_OUT_OF_MEMORY;
        fn->magic = FUNC_MAGIC;
        fn->ns = g_kernel_ns;
        unsigned long long us;
        if (sscanf(name, "kdev_sleep_%llu", &us) == 1)
                fn->ns = us * 1000ull;
        *f = fn;
        return KDEV_CUDA_SUCCESS;
}

/* Events: an event recorded on a stream completes when the work before it
 * does; one recorded when no kernel follows yet takes the start time of the
 * next kernel this process runs on the device when that kernel starts
 * later (so a pair around a launch measures exactly that kernel). */
struct event {
        unsigned magic;
        int dev;
        bool recorded, pending_start;
        unsigned long long t;            /* CLOCK_MONOTONIC ns */
};
#define EVENT_MAGIC 0x45564e54u
static struct event *g_pending_start[MOCK_MAX_GPUS];  /* under g_lock */

/* Runs a kernel of |ns| on the current device's timeline: it starts when the
 * device is free (every process's kernels queue on one timeline), and a
 * launch waits while this process already has a kernel queued behind one in
 * flight (a queue of depth 2). */
static CUresult run_kernel(unsigned long long ns)
{
        int dev;
        CUresult r = need_ctx(&dev);
        if (r != KDEV_CUDA_SUCCESS)
                return r;
        pthread_mutex_lock(&g_lock);
        unsigned long long prev = g_last_end[dev];
        pthread_mutex_unlock(&g_lock);
        unsigned long long t = now_ns();
        if (prev > t + ns)
                sleep_until(prev - ns);
        t = now_ns();
        _Atomic unsigned long long *busy = &g_tl->busy_until[dev];
        unsigned long long cur = atomic_load(busy), end;
        do {
                end = (cur > t ? cur : t) + ns;
        } while (!atomic_compare_exchange_weak(busy, &cur, end));
        pthread_mutex_lock(&g_lock);
        if (end > g_last_end[dev])
                g_last_end[dev] = end;
        if (g_pending_start[dev]) {
                if (end - ns > g_pending_start[dev]->t)
                        g_pending_start[dev]->t = end - ns;
                g_pending_start[dev]->pending_start = false;
                g_pending_start[dev] = NULL;
        }
        pthread_mutex_unlock(&g_lock);
        atomic_fetch_add(&g_tl->busy_total[dev], ns);
        atomic_fetch_add(&g_busy_ns[dev], ns);
        atomic_fetch_add(&g_launches[dev], 1);
        return KDEV_CUDA_SUCCESS;
}

static CUresult launch(kdev_cu_function f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                       unsigned by, unsigned bz)
{
        const struct func *fn = f;
        if (!g_init)
                return KDEV_CUDA_ERROR_NOT_INITIALIZED;
        if (!fn || fn->magic != FUNC_MAGIC)
                return KDEV_CUDA_ERROR_INVALID_HANDLE;
        if (!gx || !gy || !gz || !bx || !by || !bz ||
            (unsigned long long)bx * by * bz > 1024)
                return KDEV_CUDA_ERROR_INVALID_VALUE;
        return run_kernel(fn->ns);
}

EXPORT CUresult cuLaunchKernel(kdev_cu_function f, unsigned gx, unsigned gy, unsigned gz,
                               unsigned bx, unsigned by, unsigned bz, unsigned shmem,
                               kdev_cu_stream s, void **params, void **extra);
CUresult cuLaunchKernel(kdev_cu_function f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                        unsigned by, unsigned bz, unsigned shmem, kdev_cu_stream s,
                        void **params, void **extra)
{
        (void)shmem, (void)s, (void)params, (void)extra;
        return launch(f, gx, gy, gz, bx, by, bz);
}
EXPORT CUresult cuLaunchKernel_ptsz(kdev_cu_function f, unsigned gx, unsigned gy, unsigned gz,
                                    unsigned bx, unsigned by, unsigned bz, unsigned shmem,
                                    kdev_cu_stream s, void **params, void **extra);
CUresult cuLaunchKernel_ptsz(kdev_cu_function f, unsigned gx, unsigned gy, unsigned gz,
                             unsigned bx, unsigned by, unsigned bz, unsigned shmem,
                             kdev_cu_stream s, void **params, void **extra)
{
        (void)shmem, (void)s, (void)params, (void)extra;
        return launch(f, gx, gy, gz, bx, by, bz);
}
EXPORT CUresult cuLaunchCooperativeKernel(kdev_cu_function f, unsigned gx, unsigned gy,
                                          unsigned gz, unsigned bx, unsigned by, unsigned bz,
                                          unsigned shmem, kdev_cu_stream s, void **params);
CUresult cuLaunchCooperativeKernel(kdev_cu_function f, unsigned gx, unsigned gy, unsigned gz,
                                   unsigned bx, unsigned by, unsigned bz, unsigned shmem,
                                   kdev_cu_stream s, void **params)
{
        (void)shmem, (void)s, (void)params;
        return launch(f, gx, gy, gz, bx, by, bz);
}
EXPORT CUresult cuLaunchKernelEx(const kdev_cu_launch_config *c, kdev_cu_function f,
                                 void **params, void **extra);
CUresult cuLaunchKernelEx(const kdev_cu_launch_config *c, kdev_cu_function f, void **params,
                          void **extra)
{
        (void)params, (void)extra;
        if (!c)
                return KDEV_CUDA_ERROR_INVALID_VALUE;
        return launch(f, c->gridDimX, c->gridDimY, c->gridDimZ, c->blockDimX, c->blockDimY,
                      c->blockDimZ);
}
EXPORT CUresult cuLaunchKernelEx_ptsz(const kdev_cu_launch_config *c, kdev_cu_function f,
                                      void **params, void **extra);
CUresult cuLaunchKernelEx_ptsz(const kdev_cu_launch_config *c, kdev_cu_function f, void **params,
                               void **extra)
{
        return cuLaunchKernelEx(c, f, params, extra);
}
EXPORT CUresult cuLaunchCooperativeKernel_ptsz(kdev_cu_function f, unsigned gx, unsigned gy,
                                               unsigned gz, unsigned bx, unsigned by, unsigned bz,
                                               unsigned shmem, kdev_cu_stream s, void **params);
CUresult cuLaunchCooperativeKernel_ptsz(kdev_cu_function f, unsigned gx, unsigned gy, unsigned gz,
                                        unsigned bx, unsigned by, unsigned bz, unsigned shmem,
                                        kdev_cu_stream s, void **params)
{
        (void)shmem, (void)s, (void)params;
        return launch(f, gx, gy, gz, bx, by, bz);
}
/* a graph runs as one kernel of $KDEV_MOCK_CUDA_KERNEL_US */
EXPORT CUresult cuGraphLaunch(kdev_cu_graph_exec g, kdev_cu_stream s);
CUresult cuGraphLaunch(kdev_cu_graph_exec g, kdev_cu_stream s)
{
        (void)s;
        if (!g_init)
                return KDEV_CUDA_ERROR_NOT_INITIALIZED;
        if (!g)
                return KDEV_CUDA_ERROR_INVALID_VALUE;
        return run_kernel(g_kernel_ns);
}

EXPORT CUresult cuGraphLaunch_ptsz(kdev_cu_graph_exec g, kdev_cu_stream s);
CUresult cuGraphLaunch_ptsz(kdev_cu_graph_exec g, kdev_cu_stream s) { return cuGraphLaunch(g, s); }

EXPORT CUresult cuEventCreate(void **e, unsigned flags);
CUresult cuEventCreate(void **e, unsigned flags)
{
        (void)flags;
        int dev;
        CUresult r = need_ctx(&dev);
        if (r != KDEV_CUDA_SUCCESS)
                return r;
        if (!e)
                return KDEV_CUDA_ERROR_INVALID_VALUE;
        struct event *ev = calloc(1, sizeof(*ev));
        if (!ev)
                return KDEV_CUDA_ERROR_OUT_OF_MEMORY;
        ev->magic = EVENT_MAGIC;
        ev->dev = dev;
        *e = ev;
        return KDEV_CUDA_SUCCESS;
}
static CUresult m_event_destroy(void *e)
{
        struct event *ev = e;
        if (!ev || ev->magic != EVENT_MAGIC)
                return KDEV_CUDA_ERROR_INVALID_HANDLE;
        for (int d = 0; d < MOCK_MAX_GPUS; d++)
                if (g_pending_start[d] == ev)
                        g_pending_start[d] = NULL;
        ev->magic = 0;
        free(ev);
        return KDEV_CUDA_SUCCESS;
}
EXPORT CUresult cuEventDestroy_v2(void *e);
CUresult cuEventDestroy_v2(void *e) { LOCKED(m_event_destroy(e)); }
static CUresult m_event_record(void *e)
{
        struct event *ev = e;
        if (!ev || ev->magic != EVENT_MAGIC)
                return KDEV_CUDA_ERROR_INVALID_HANDLE;
        /* after the queued work; the latest event recorded takes the start
         * of a kernel that begins later (the device served others first) */
        unsigned long long now = now_ns();
        ev->recorded = true;
        ev->t = g_last_end[ev->dev] > now ? g_last_end[ev->dev] : now;
        struct event *old = g_pending_start[ev->dev];
        if (old && old != ev)
                old->pending_start = false;
        ev->pending_start = true;
        g_pending_start[ev->dev] = ev;
        return KDEV_CUDA_SUCCESS;
}
EXPORT CUresult cuEventRecord(void *e, kdev_cu_stream s);
CUresult cuEventRecord(void *e, kdev_cu_stream s)
{
        (void)s;
        LOCKED(m_event_record(e));
}
EXPORT CUresult cuEventRecord_ptsz(void *e, kdev_cu_stream s);
CUresult cuEventRecord_ptsz(void *e, kdev_cu_stream s)
{
        (void)s;
        LOCKED(m_event_record(e));
}
static CUresult m_event_query(void *e)
{
        struct event *ev = e;
        if (!ev || ev->magic != EVENT_MAGIC)
                return KDEV_CUDA_ERROR_INVALID_HANDLE;
        if (!ev->recorded)
                return KDEV_CUDA_SUCCESS;
        return now_ns() >= ev->t ? KDEV_CUDA_SUCCESS : 600; /* CUDA_ERROR_NOT_READY */
}
EXPORT CUresult cuEventQuery(void *e);
CUresult cuEventQuery(void *e) { LOCKED(m_event_query(e)); }
EXPORT CUresult cuEventSynchronize(void *e);
CUresult cuEventSynchronize(void *e)
{
        pthread_mutex_lock(&g_lock);
        struct event *ev = e;
        CUresult r = !ev || ev->magic != EVENT_MAGIC ? KDEV_CUDA_ERROR_INVALID_HANDLE
                                                      : KDEV_CUDA_SUCCESS;
        unsigned long long t = r == KDEV_CUDA_SUCCESS && ev->recorded ? ev->t : 0;
        pthread_mutex_unlock(&g_lock);
        if (t > now_ns())
                sleep_until(t);
        return r;
}
static CUresult m_elapsed(float *ms, void *a, void *b)
{
        struct event *x = a, *y = b;
        if (!ms)
                return KDEV_CUDA_ERROR_INVALID_VALUE;
        if (!x || !y || x->magic != EVENT_MAGIC || y->magic != EVENT_MAGIC)
                return KDEV_CUDA_ERROR_INVALID_HANDLE;
        unsigned long long now = now_ns();
        if (!x->recorded || !y->recorded || now < x->t || now < y->t)
                return 600;
        *ms = (float)((double)((long long)(y->t - x->t)) / 1e6);
        return KDEV_CUDA_SUCCESS;
}
EXPORT CUresult cuEventElapsedTime(float *ms, void *a, void *b);
CUresult cuEventElapsedTime(float *ms, void *a, void *b) { LOCKED(m_elapsed(ms, a, b)); }
EXPORT CUresult cuEventElapsedTime_v2(float *ms, void *a, void *b);
CUresult cuEventElapsedTime_v2(float *ms, void *a, void *b) { LOCKED(m_elapsed(ms, a, b)); }

/* errors */
static const struct {
        int code;
        const char *name, *text;
} g_errors[] = {
        {0, "CUDA_SUCCESS", "no error"},
        {1, "CUDA_ERROR_INVALID_VALUE", "invalid argument"},
        {2, "CUDA_ERROR_OUT_OF_MEMORY", "out of memory"},
        {3, "CUDA_ERROR_NOT_INITIALIZED", "initialization error"},
        {100, "CUDA_ERROR_NO_DEVICE", "no CUDA-capable device is detected"},
        {101, "CUDA_ERROR_INVALID_DEVICE", "invalid device ordinal"},
        {201, "CUDA_ERROR_INVALID_CONTEXT", "invalid device context"},
        {400, "CUDA_ERROR_INVALID_HANDLE", "invalid resource handle"},
        {500, "CUDA_ERROR_NOT_FOUND", "named symbol not found"},
        {801, "CUDA_ERROR_NOT_SUPPORTED", "operation not supported"},
        {999, "CUDA_ERROR_UNKNOWN", "unknown error"},
};
static CUresult err_lookup(int code, const char **s, bool name)
{
        if (!s)
                return KDEV_CUDA_ERROR_INVALID_VALUE;
        for (size_t i = 0; i < sizeof(g_errors) / sizeof(g_errors[0]); i++)
                if (g_errors[i].code == code) {
                        *s = name ? g_errors[i].name : g_errors[i].text;
                        return KDEV_CUDA_SUCCESS;
                }
        *s = NULL;
        return KDEV_CUDA_ERROR_INVALID_VALUE;
}
EXPORT CUresult cuGetErrorName(int code, const char **s);
CUresult cuGetErrorName(int code, const char **s) { return err_lookup(code, s, true); }
EXPORT CUresult cuGetErrorString(int code, const char **s);
CUresult cuGetErrorString(int code, const char **s) { return err_lookup(code, s, false); }

/* The runtime's private tables are not modelled: every id is unknown. */
EXPORT CUresult cuGetExportTable(const void **table, const kdev_cu_uuid *id);
CUresult cuGetExportTable(const void **table, const kdev_cu_uuid *id)
{
        if (!table || !id)
                return KDEV_CUDA_ERROR_INVALID_VALUE;
        if (getenv("KDEV_MOCK_CUDA_TRACE")) {
                const unsigned char *u = (const unsigned char *)id->bytes;
                fprintf(stderr, "mock libcuda: cuGetExportTable ");
                for (int i = 0; i < 16; i++)
                        fprintf(stderr, "%02x", u[i]);
                fprintf(stderr, " -> CUDA_ERROR_NOT_SUPPORTED\n");
        }
        *table = NULL;
        return KDEV_CUDA_ERROR_NOT_SUPPORTED;
}

/* controls for tests */
EXPORT unsigned long long kdevMockCudaBusyNs(int dev);
unsigned long long kdevMockCudaBusyNs(int dev)
{
        return dev >= 0 && dev < MOCK_MAX_GPUS ? atomic_load(&g_busy_ns[dev]) : 0;
}
EXPORT unsigned long long kdevMockCudaLaunches(int dev);
unsigned long long kdevMockCudaLaunches(int dev)
{
        return dev >= 0 && dev < MOCK_MAX_GPUS ? atomic_load(&g_launches[dev]) : 0;
}
EXPORT size_t kdevMockCudaUsed(int dev);
size_t kdevMockCudaUsed(int dev)
{
        pthread_mutex_lock(&g_lock);
        size_t u = g_init && dev >= 0 && dev < g_n ? g_dev[dev].used : 0;
        pthread_mutex_unlock(&g_lock);
        return u;
}

/* --- cuGetProcAddress ---------------------------------------------------------- */

#define V(base, ver, fn, pt) {base, ver, pt, (void *)fn}
static const struct proc {
        const char *base;
        int version;                    /* CUDA version that introduced this ABI */
        bool per_thread;                /* the _ptsz / _ptds variant */
        void *fn;
} g_procs[] = {
        V("cuInit", 2000, cuInit, false),
        V("cuDriverGetVersion", 2020, cuDriverGetVersion, false),
        V("cuDeviceGet", 2000, cuDeviceGet, false),
        V("cuDeviceGetCount", 2000, cuDeviceGetCount, false),
        V("cuDeviceGetName", 2000, cuDeviceGetName, false),
        V("cuDeviceGetUuid", 9020, cuDeviceGetUuid, false),
        V("cuDeviceGetUuid", 11040, cuDeviceGetUuid_v2, false),
        V("cuDeviceTotalMem", 3020, cuDeviceTotalMem_v2, false),
        V("cuDeviceGetAttribute", 2000, cuDeviceGetAttribute, false),
        V("cuDevicePrimaryCtxRetain", 7000, cuDevicePrimaryCtxRetain, false),
        V("cuDevicePrimaryCtxRelease", 7000, cuDevicePrimaryCtxRelease, false),
        V("cuDevicePrimaryCtxRelease", 11000, cuDevicePrimaryCtxRelease_v2, false),
        V("cuCtxCreate", 3020, cuCtxCreate_v2, false),
        V("cuCtxCreate", 11040, cuCtxCreate_v3, false),
        V("cuCtxCreate", 12050, cuCtxCreate_v4, false),
        V("cuCtxDestroy", 4000, cuCtxDestroy_v2, false),
        V("cuCtxGetCurrent", 4000, cuCtxGetCurrent, false),
        V("cuCtxSetCurrent", 4000, cuCtxSetCurrent, false),
        V("cuCtxGetDevice", 2000, cuCtxGetDevice, false),
        V("cuCtxSynchronize", 2000, cuCtxSynchronize, false),
        V("cuStreamSynchronize", 2000, cuStreamSynchronize, false),
        V("cuStreamSynchronize", 7000, cuStreamSynchronize_ptsz, true),
        V("cuMemAlloc", 3020, cuMemAlloc_v2, false),
        V("cuMemAllocPitch", 3020, cuMemAllocPitch_v2, false),
        V("cuMemAllocManaged", 6000, cuMemAllocManaged, false),
        V("cuMemAllocAsync", 11020, cuMemAllocAsync, false),
        V("cuMemAllocAsync", 11020, cuMemAllocAsync_ptsz, true),
        V("cuMemAllocFromPoolAsync", 11020, cuMemAllocFromPoolAsync, false),
        V("cuMemAllocFromPoolAsync", 11020, cuMemAllocFromPoolAsync_ptsz, true),
        V("cuMemFree", 3020, cuMemFree_v2, false),
        V("cuMemFreeAsync", 11020, cuMemFreeAsync, false),
        V("cuMemFreeAsync", 11020, cuMemFreeAsync_ptsz, true),
        V("cuMemGetInfo", 3020, cuMemGetInfo_v2, false),
        V("cuMemGetAllocationGranularity", 10020, cuMemGetAllocationGranularity, false),
        V("cuMemCreate", 10020, cuMemCreate, false),
        V("cuMemRelease", 10020, cuMemRelease, false),
        V("cuArrayCreate", 3020, cuArrayCreate_v2, false),
        V("cuArray3DCreate", 3020, cuArray3DCreate_v2, false),
        V("cuArrayDestroy", 2000, cuArrayDestroy, false),
        V("cuMipmappedArrayCreate", 5000, cuMipmappedArrayCreate, false),
        V("cuMipmappedArrayDestroy", 5000, cuMipmappedArrayDestroy, false),
        V("cuDeviceGetDefaultMemPool", 11020, cuDeviceGetDefaultMemPool, false),
        V("cuMemAllocHost", 3020, cuMemAllocHost_v2, false),
        V("cuMemHostAlloc", 2020, cuMemHostAlloc, false),
        V("cuMemFreeHost", 2000, cuMemFreeHost, false),
        V("cuModuleLoadData", 2000, cuModuleLoadData, false),
        V("cuModuleGetFunction", 2000, cuModuleGetFunction, false),
        V("cuLaunchKernel", 4000, cuLaunchKernel, false),
        V("cuLaunchKernel", 7000, cuLaunchKernel_ptsz, true),
        V("cuLaunchKernelEx", 11060, cuLaunchKernelEx, false),
        V("cuLaunchKernelEx", 11060, cuLaunchKernelEx_ptsz, true),
        V("cuLaunchCooperativeKernel", 9000, cuLaunchCooperativeKernel, false),
        V("cuLaunchCooperativeKernel", 9000, cuLaunchCooperativeKernel_ptsz, true),
        V("cuGraphLaunch", 10000, cuGraphLaunch, false),
        V("cuGraphLaunch", 10000, cuGraphLaunch_ptsz, true),
        V("cuEventCreate", 2000, cuEventCreate, false),
        V("cuEventDestroy", 4000, cuEventDestroy_v2, false),
        V("cuEventRecord", 2000, cuEventRecord, false),
        V("cuEventRecord", 7000, cuEventRecord_ptsz, true),
        V("cuEventQuery", 2000, cuEventQuery, false),
        V("cuEventSynchronize", 2000, cuEventSynchronize, false),
        V("cuEventElapsedTime", 2000, cuEventElapsedTime, false),
        V("cuEventElapsedTime", 12080, cuEventElapsedTime_v2, false),
        V("cuGetErrorName", 6000, cuGetErrorName, false),
        V("cuGetErrorString", 6000, cuGetErrorString, false),
        V("cuGetExportTable", 3000, cuGetExportTable, false),
        V("cuGetProcAddress", 11030, NULL, false),   /* filled below */
        V("cuGetProcAddress", 12000, NULL, false),
};

EXPORT CUresult cuGetProcAddress(const char *symbol, void **pfn, int ver, unsigned long long flags);
EXPORT CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int ver,
                                    unsigned long long flags, int *status);

/* cuGetProcAddress_v2 (cuda.h): the newest variant of |symbol| (a base name)
 * introduced at or before |ver|; with PER_THREAD_DEFAULT_STREAM its
 * per-thread variant when there is one; not found: SUCCESS, *pfn NULL and
 * SYMBOL_NOT_FOUND or VERSION_NOT_SUFFICIENT. |ver| above the driver's
 * version: INVALID_VALUE. */
CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int ver, unsigned long long flags,
                             int *status)
{
        if (!symbol || !pfn || (flags & ~3ull) != 0)
                return KDEV_CUDA_ERROR_INVALID_VALUE;
        int drv;
        cuDriverGetVersion(&drv);
        if (ver > drv)
                return KDEV_CUDA_ERROR_INVALID_VALUE;
        bool pt = (flags & KDEV_CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) != 0;
        const struct proc *best = NULL, *best_pt = NULL;
        bool known = false;
        for (size_t i = 0; i < sizeof(g_procs) / sizeof(g_procs[0]); i++) {
                const struct proc *p = &g_procs[i];
                if (strcmp(p->base, symbol) != 0)
                        continue;
                known = true;
                if (p->version > ver)
                        continue;
                const struct proc **slot = p->per_thread ? &best_pt : &best;
                if (!*slot || p->version > (*slot)->version)
                        *slot = p;
        }
        if (pt && best_pt)
                best = best_pt;
        void *fn = best ? best->fn : NULL;
        if (best && strcmp(symbol, "cuGetProcAddress") == 0)
                fn = best->version >= 12000 ? (void *)cuGetProcAddress_v2 : (void *)cuGetProcAddress;
        *pfn = fn;
        if (getenv("KDEV_MOCK_CUDA_TRACE"))
                fprintf(stderr, "mock libcuda: cuGetProcAddress %s %d %llu -> %s\n", symbol, ver,
                        flags, fn ? "found" : known ? "version not sufficient" : "not found");
        if (status)
                *status = fn ? KDEV_CU_GET_PROC_ADDRESS_SUCCESS
                             : known ? KDEV_CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT
                                     : KDEV_CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
        return KDEV_CUDA_SUCCESS;
}

CUresult cuGetProcAddress(const char *symbol, void **pfn, int ver, unsigned long long flags)
{
        return cuGetProcAddress_v2(symbol, pfn, ver, flags, NULL);
}
