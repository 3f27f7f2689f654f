/* A driver-API program for the share library's tests
 * (tests/integration/share_*.py): it reaches libcuda.so.1 exactly as the
 * CUDA runtime does, dlopen("libcuda.so.1") and then every entry point
 * through cuGetProcAddress_v2 with the driver's version, and prints what it
 * sees as `key value` lines. Subcommands: see usage(). */
#include <dlfcn.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "share/abi.h"

typedef kdev_cu_result CUresult;
typedef kdev_cu_deviceptr CUdeviceptr;
typedef CUresult gpa_t(const char *, void **, int, unsigned long long, int *);

static gpa_t *gpa;
static int drv_version;

static void *proc(const char *base, unsigned long long flags)
{
        void *p = NULL;
        int status = -1;
        CUresult r = gpa(base, &p, drv_version, flags, &status);
        if (r != 0 || !p) {
                fprintf(stderr, "cuGetProcAddress_v2(%s): %d status %d\n", base, r, status);
                exit(3);
        }
        return p;
}

#define P(type, name) type *name = (type *)proc(#name, 0)
typedef CUresult init_t(unsigned);
typedef CUresult ver_t(int *);
typedef CUresult dev_t_(int *, int);
typedef CUresult retain_t(kdev_cu_context *, int);
typedef CUresult setcur_t(kdev_cu_context);
typedef CUresult alloc_t(CUdeviceptr *, size_t);
typedef CUresult free_t(CUdeviceptr);
typedef CUresult info_t(size_t *, size_t *);
typedef CUresult total_t(size_t *, int);

static struct {
        init_t *cuInit;
        retain_t *cuDevicePrimaryCtxRetain;
        setcur_t *cuCtxSetCurrent;
        alloc_t *cuMemAlloc;
        free_t *cuMemFree;
        info_t *cuMemGetInfo;
        total_t *cuDeviceTotalMem;
} cu;

static void open_driver(int dev)
{
        void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL);
        if (!h) {
                fprintf(stderr, "dlopen libcuda.so.1: %s\n", dlerror());
                exit(3);
        }
        gpa = (gpa_t *)dlsym(h, "cuGetProcAddress_v2");
        ver_t *getver = (ver_t *)dlsym(h, "cuDriverGetVersion");
        if (!gpa || !getver || getver(&drv_version) != 0) {
                fprintf(stderr, "no cuGetProcAddress_v2 / cuDriverGetVersion\n");
                exit(3);
        }
        cu.cuInit = (init_t *)proc("cuInit", 0);
        cu.cuDevicePrimaryCtxRetain = (retain_t *)proc("cuDevicePrimaryCtxRetain", 0);
        cu.cuCtxSetCurrent = (setcur_t *)proc("cuCtxSetCurrent", 0);
        cu.cuMemAlloc = (alloc_t *)proc("cuMemAlloc", 0);
        cu.cuMemFree = (free_t *)proc("cuMemFree", 0);
        cu.cuMemGetInfo = (info_t *)proc("cuMemGetInfo", 0);
        cu.cuDeviceTotalMem = (total_t *)proc("cuDeviceTotalMem", 0);
        kdev_cu_context ctx;
        if (cu.cuInit(0) != 0 || cu.cuDevicePrimaryCtxRetain(&ctx, dev) != 0 ||
            cu.cuCtxSetCurrent(ctx) != 0) {
                fprintf(stderr, "cannot init device %d\n", dev);
                exit(3);
        }
}

/* --- allocation kinds: allocate |bytes| (or an element count for arrays),
 * returning the CUresult and a key to free with ---------------------------- */

struct kind {
        const char *name;
        CUresult (*alloc)(size_t bytes, unsigned long long *key);
        CUresult (*release)(unsigned long long key);
};

static int g_dev;

#define PTR_KIND(fname, base, call)                                                       \
        static CUresult fname(size_t n, unsigned long long *key)                          \
        {                                                                                 \
                static void *f;                                                           \
                if (!f)                                                                   \
                        f = proc(base, 0);                                                \
                CUdeviceptr p = 0;                                                        \
                CUresult r = call;                                                        \
                *key = p;                                                                 \
                return r;                                                                 \
        }
typedef CUresult managed_t(CUdeviceptr *, size_t, unsigned);
typedef CUresult async_t(CUdeviceptr *, size_t, kdev_cu_stream);
typedef CUresult pool_t(CUdeviceptr *, size_t, kdev_cu_mempool, kdev_cu_stream);
typedef CUresult getpool_t(kdev_cu_mempool *, int);
typedef CUresult pitch_t(CUdeviceptr *, size_t *, size_t, size_t, unsigned);
PTR_KIND(k_alloc, "cuMemAlloc", ((alloc_t *)f)(&p, n))
PTR_KIND(k_managed, "cuMemAllocManaged", ((managed_t *)f)(&p, n, 1))
PTR_KIND(k_async, "cuMemAllocAsync", ((async_t *)f)(&p, n, NULL))
static CUresult k_pool(size_t n, unsigned long long *key)
{
        pool_t *f = (pool_t *)proc("cuMemAllocFromPoolAsync", 0);
        getpool_t *g = (getpool_t *)proc("cuDeviceGetDefaultMemPool", 0);
        kdev_cu_mempool pool;
        CUresult r = g(&pool, g_dev);
        if (r)
                return r;
        CUdeviceptr p = 0;
        r = f(&p, n, pool, NULL);
        *key = p;
        return r;
}
/* pitch: width n bytes (a multiple of 512 here), height 1 */
static CUresult k_pitch(size_t n, unsigned long long *key)
{
        pitch_t *f = (pitch_t *)proc("cuMemAllocPitch", 0);
        CUdeviceptr p = 0;
        size_t pitch = 0;
        CUresult r = f(&p, &pitch, n, 1, 4);
        *key = p;
        return r;
}
static CUresult k_free(unsigned long long key) { return cu.cuMemFree(key); }
typedef CUresult freeasync_t(CUdeviceptr, kdev_cu_stream);
static CUresult k_free_async(unsigned long long key)
{
        return ((freeasync_t *)proc("cuMemFreeAsync", 0))(key, NULL);
}

typedef CUresult create_t(kdev_cu_mem_handle *, size_t, const kdev_cu_mem_allocation_prop *,
                          unsigned long long);
typedef CUresult release_t(kdev_cu_mem_handle);
static CUresult k_vmm(size_t n, unsigned long long *key)
{
        kdev_cu_mem_allocation_prop prop = {0};
        prop.type = KDEV_CU_MEM_ALLOCATION_TYPE_PINNED;
        prop.location.type = KDEV_CU_MEM_LOCATION_TYPE_DEVICE;
        prop.location.id = g_dev;
        kdev_cu_mem_handle h = 0;
        CUresult r = ((create_t *)proc("cuMemCreate", 0))(&h, n, &prop, 0);
        *key = h;
        return r;
}
static CUresult k_vmm_release(unsigned long long key)
{
        return ((release_t *)proc("cuMemRelease", 0))(key);
}
typedef CUresult arr_t(kdev_cu_array *, const kdev_cu_array_descriptor *);
typedef CUresult arr3_t(kdev_cu_array *, const kdev_cu_array3d_descriptor *);
typedef CUresult mip_t(kdev_cu_mipmapped_array *, const kdev_cu_array3d_descriptor *, unsigned);
typedef CUresult adestroy_t(void *);
/* arrays: n bytes as n/4 FLOAT elements of one channel */
static CUresult k_array(size_t n, unsigned long long *key)
{
        kdev_cu_array_descriptor d = {n / 4, 0, KDEV_CU_AD_FORMAT_FLOAT, 1};
        kdev_cu_array a = NULL;
        CUresult r = ((arr_t *)proc("cuArrayCreate", 0))(&a, &d);
        *key = (unsigned long long)(uintptr_t)a;
        return r;
}
static CUresult k_array3d(size_t n, unsigned long long *key)
{
        kdev_cu_array3d_descriptor d = {n / 16, 2, 2, KDEV_CU_AD_FORMAT_UNSIGNED_INT8, 4, 0};
        kdev_cu_array a = NULL;
        CUresult r = ((arr3_t *)proc("cuArray3DCreate", 0))(&a, &d);
        *key = (unsigned long long)(uintptr_t)a;
        return r;
}
/* one level: the same bytes as the 3-D array */
static CUresult k_mipmap(size_t n, unsigned long long *key)
{
        kdev_cu_array3d_descriptor d = {n / 16, 2, 2, KDEV_CU_AD_FORMAT_UNSIGNED_INT8, 4, 0};
        kdev_cu_mipmapped_array a = NULL;
        CUresult r = ((mip_t *)proc("cuMipmappedArrayCreate", 0))(&a, &d, 1);
        *key = (unsigned long long)(uintptr_t)a;
        return r;
}
static CUresult k_array_destroy(unsigned long long key)
{
        return ((adestroy_t *)proc("cuArrayDestroy", 0))((void *)(uintptr_t)key);
}
static CUresult k_mipmap_destroy(unsigned long long key)
{
        return ((adestroy_t *)proc("cuMipmappedArrayDestroy", 0))((void *)(uintptr_t)key);
}

static const struct kind kinds[] = {
        {"alloc", k_alloc, k_free},           {"pitch", k_pitch, k_free},
        {"managed", k_managed, k_free},       {"async", k_async, k_free_async},
        {"pool", k_pool, k_free_async},       {"vmm", k_vmm, k_vmm_release},
        {"array", k_array, k_array_destroy},  {"array3d", k_array3d, k_array_destroy},
        {"mipmap", k_mipmap, k_mipmap_destroy},
};

static const struct kind *kind_of(const char *name)
{
        for (size_t i = 0; i < sizeof(kinds) / sizeof(kinds[0]); i++)
                if (strcmp(kinds[i].name, name) == 0)
                        return &kinds[i];
        fprintf(stderr, "unknown kind %s\n", name);
        exit(2);
}

/* boundary KIND LIMIT GRAN: fill the share with granularity-sized pieces,
 * then the next piece fails; free one and it succeeds again; one byte more
 * than free (rounded up to a whole granule) fails too */
static int cmd_boundary(const char *kname, size_t limit, size_t gran)
{
        const struct kind *k = kind_of(kname);
        size_t n = limit / gran;
        unsigned long long *keys = calloc(n + 1, sizeof(*keys));
        size_t got = 0;
        CUresult r = 0;
        while (got <= n && (r = k->alloc(gran, &keys[got])) == 0)
                got++;
        printf("allocated %zu\n", got);
        printf("refused %d\n", r);
        size_t fr = 0, total = 0;
        cu.cuMemGetInfo(&fr, &total);
        printf("free %zu\ntotal %zu\n", fr, total);
        printf("release %d\n", got ? k->release(keys[--got]) : -1);
        unsigned long long extra;
        printf("again %d\n", k->alloc(gran, &extra));
        unsigned long long extra2;
        CUresult over = k->alloc(1, &extra2);  /* rounds to a whole granule: over */
        printf("one-more-byte %d\n", over);
        k->release(extra);
        for (size_t i = 0; i < got; i++)
                k->release(keys[i]);
        cu.cuMemGetInfo(&fr, &total);
        printf("free-after %zu\n", fr);
        free(keys);
        return 0;
}

typedef int nvml_init_t(void);
typedef int nvml_handle_t(unsigned, kdev_nv_device *);
typedef int nvml_mem_t(kdev_nv_device, kdev_nv_memory *);
typedef int nvml_mem2_t(kdev_nv_device, kdev_nv_memory_v2 *);

/* info ALLOC: cuMemGetInfo, cuDeviceTotalMem and NVML's memory queries
 * before and after allocating ALLOC bytes */
static int cmd_info(size_t alloc)
{
        CUdeviceptr p = 0;
        if (alloc && cu.cuMemAlloc(&p, alloc) != 0) {
                printf("alloc-failed\n");
                return 1;
        }
        size_t fr = 0, total = 0, dt = 0;
        printf("cuMemGetInfo %d", cu.cuMemGetInfo(&fr, &total));
        printf(" free %zu total %zu\n", fr, total);
        printf("cuDeviceTotalMem %d", cu.cuDeviceTotalMem(&dt, g_dev));
        printf(" %zu\n", dt);
        void *h = dlopen("libnvidia-ml.so.1", RTLD_NOW);
        if (h) {
                nvml_init_t *ini = (nvml_init_t *)dlsym(h, "nvmlInit_v2");
                nvml_handle_t *get = (nvml_handle_t *)dlsym(h, "nvmlDeviceGetHandleByIndex_v2");
                nvml_mem_t *m1 = (nvml_mem_t *)dlsym(h, "nvmlDeviceGetMemoryInfo");
                kdev_nv_device d;
                if (ini && get && m1 && ini() == 0 && get((unsigned)g_dev, &d) == 0) {
                        kdev_nv_memory m = {0};
                        int r = m1(d, &m);
                        printf("nvmlDeviceGetMemoryInfo %d total %llu used %llu free %llu\n", r,
                               m.total, m.used, m.free);
                }
        }
        return 0;
}

/* hold BYTES: allocate BYTES in one piece, print "held", wait for stdin */
static int cmd_hold(size_t bytes)
{
        CUdeviceptr p = 0;
        CUresult r = cu.cuMemAlloc(&p, bytes);
        printf("held %d\n", r);
        fflush(stdout);
        char c;
        while (read(0, &c, 1) > 0) {
        }
        return 0;
}

/* query-hold: cuMemGetInfo only (no allocation), print it, wait for
 * stdin to close */
static int cmd_query_hold(void)
{
        size_t free_b = 0, total = 0;
        CUresult r = cu.cuMemGetInfo(&free_b, &total);
        printf("queried %d %zu %zu\n", r, free_b, total);
        fflush(stdout);
        char c;
        while (read(0, &c, 1) > 0) {
        }
        return 0;
}

/* race GRAN START_FD: wait for a byte on fd 0, then allocate GRAN pieces
 * until refused; print the count; wait for stdin to close */
static int cmd_race(size_t gran)
{
        char c;
        if (read(0, &c, 1) != 1)
                return 1;
        size_t n = 0;
        CUdeviceptr p;
        while (cu.cuMemAlloc(&p, gran) == 0)
                n++;
        printf("got %zu\n", n);
        fflush(stdout);
        while (read(0, &c, 1) > 0) {
        }
        return 0;
}

/* churn GRAN: allocate and free GRAN pieces (up to 8 held) forever, to be
 * killed at an arbitrary instruction */
__attribute__((noreturn)) static void cmd_churn(size_t gran)
{
        CUdeviceptr p[8] = {0};
        printf("churning\n");
        fflush(stdout);
        for (unsigned long i = 0;; i++) {
                if (p[i % 8])
                        cu.cuMemFree(p[i % 8]);
                p[i % 8] = 0;
                cu.cuMemAlloc(&p[i % 8], gran);
        }
}

typedef CUresult load_t(void **, const void *);
typedef CUresult getfn_t(kdev_cu_function *, void *, const char *);
typedef CUresult launch_t(kdev_cu_function, unsigned, unsigned, unsigned, unsigned, unsigned,
                          unsigned, unsigned, kdev_cu_stream, void **, void **);
typedef CUresult gl_t(kdev_cu_graph_exec, kdev_cu_stream);
typedef CUresult sync_t(void);
typedef unsigned long long busy_t(int);

static uint64_t mono(void)
{
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* burn US MS [graph]: launch kernels of US microseconds (cuLaunchKernel, or
 * cuGraphLaunch) for MS milliseconds, then print this process's share of
 * the GPU's time (percent: the mock's kernel time / wall time) and the
 * number of launches */
static int cmd_burn(unsigned us, unsigned ms, bool graph)
{
        void *mod;
        kdev_cu_function f;
        char name[64];
        snprintf(name, sizeof(name), "kdev_sleep_%u", us);
        ((load_t *)proc("cuModuleLoadData", 0))(&mod, "");
        ((getfn_t *)proc("cuModuleGetFunction", 0))(&f, mod, name);
        launch_t *launch = (launch_t *)proc("cuLaunchKernel", 0);
        gl_t *gl = (gl_t *)proc("cuGraphLaunch", 0);
        sync_t *sync = (sync_t *)proc("cuCtxSynchronize", 0);
        void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
        busy_t *busy = (busy_t *)dlsym(h, "kdevMockCudaBusyNs");
        uint64_t t0 = mono(), end = t0 + (uint64_t)ms * 1000000ull;
        unsigned long long b0 = busy(g_dev), n = 0;
        while (mono() < end) {
                CUresult r = graph ? gl((kdev_cu_graph_exec)f, NULL)
                                   : launch(f, 1, 1, 1, 1, 1, 1, 0, NULL, NULL, NULL);
                if (r != 0) {
                        printf("launch %d\n", r);
                        return 1;
                }
                n++;
        }
        sync();
        uint64_t wall = mono() - t0;
        printf("share %.1f\nlaunches %llu\n", (double)(busy(g_dev) - b0) * 100.0 / (double)wall, n);
        return 0;
}

/* fork BYTES: allocate BYTES, fork; the child allocates BYTES too and
 * reports, then execs itself with `info 0` */
static int cmd_fork(const char *self, size_t bytes)
{
        CUdeviceptr p;
        printf("parent %d\n", cu.cuMemAlloc(&p, bytes));
        fflush(stdout);
        pid_t pid = fork();
        if (pid == 0) {
                /* CUDA in a forked child needs a fresh init (the mock allows it) */
                CUdeviceptr q;
                printf("child %d\n", cu.cuMemAlloc(&q, bytes));
                fflush(stdout);
                execl(self, self, "info", "0", (char *)NULL);
                _exit(127);
        }
        int st;
        waitpid(pid, &st, 0);
        printf("child-exit %d\n", WIFEXITED(st) ? WEXITSTATUS(st) : -1);
        return 0;
}

/* procaddr: cuGetProcAddress_v2's answers (dladdr names the object and the
 * symbol each pointer belongs to) */
static void show(const char *sym, int ver, unsigned long long flags)
{
        void *p = NULL;
        int status = -1;
        CUresult r = gpa(sym, &p, ver, flags, &status);
        Dl_info di = {0};
        const char *obj = "-", *name = "-";
        if (p && dladdr(p, &di)) {
                obj = di.dli_fname ? strrchr(di.dli_fname, '/') ? strrchr(di.dli_fname, '/') + 1
                                                                : di.dli_fname
                                   : "?";
                name = di.dli_sname ? di.dli_sname : "?";
        }
        printf("%s %d %llu -> %d status %d %s %s\n", sym, ver, flags, r, status, obj, name);
}

static int cmd_procaddr(void)
{
        show("cuMemAlloc", drv_version, 0);
        show("cuMemAlloc", 3000, 0);            /* before cuMemAlloc_v2: none in the mock */
        show("cuMemAllocAsync", drv_version, 1);
        show("cuMemAllocAsync", drv_version, 2);
        show("cuMemAllocAsync", 11000, 0);
        show("cuDeviceGetAttribute", drv_version, 0);
        show("cuDeviceGetUuid", 11000, 0);
        show("cuDeviceGetUuid", drv_version, 0);
        show("cuGetProcAddress", drv_version, 0);
        show("cuGetProcAddress", 11030, 0);
        show("cuBogus", drv_version, 0);
        show("cuMemAlloc", drv_version + 10, 0);
        /* the dlsym door: a handle of libcuda.so.1 */
        void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
        const char *names[] = {"cuMemAlloc_v2", "cuMemCreate", "cuDeviceGetAttribute"};
        for (int i = 0; i < 3; i++) {
                void *p = dlsym(h, names[i]);
                Dl_info di = {0};
                dladdr(p, &di);
                printf("dlsym %s -> %s\n", names[i], di.dli_fname ? strrchr(di.dli_fname, '/') + 1 : "-");
        }
        void *d = dlsym(RTLD_DEFAULT, "cuMemAlloc_v2");
        Dl_info di = {0};
        dladdr(d, &di);
        printf("dlsym-default cuMemAlloc_v2 -> %s\n",
               di.dli_fname ? strrchr(di.dli_fname, '/') + 1 : "-");
        /* pass-through exact: the driver's own answer for a non-intercepted name */
        void *p1 = NULL;
        gpa("cuDeviceGetAttribute", &p1, drv_version, 0, NULL);
        printf("passthrough-identical %d\n", p1 == dlsym(h, "cuDeviceGetAttribute"));
        return 0;
}

static void usage(void)
{
        fprintf(stderr, "usage: kdev-share-client [-d DEV] boundary KIND LIMIT GRAN | info BYTES | "
                "hold BYTES | query-hold | race GRAN | churn GRAN | burn US MS [graph] | fork BYTES | procaddr\n");
        exit(2);
}

int main(int argc, char **argv)
{
        int a = 1;
        if (argc > 2 && strcmp(argv[1], "-d") == 0) {
                g_dev = atoi(argv[2]);
                a = 3;
        }
        if (a >= argc)
                usage();
        const char *cmd = argv[a];
        setvbuf(stdout, NULL, _IOLBF, 0);
        open_driver(g_dev);
        if (strcmp(cmd, "boundary") == 0 && argc == a + 4)
                return cmd_boundary(argv[a + 1], strtoull(argv[a + 2], NULL, 0),
                                    strtoull(argv[a + 3], NULL, 0));
        if (strcmp(cmd, "info") == 0 && argc == a + 2)
                return cmd_info(strtoull(argv[a + 1], NULL, 0));
        if (strcmp(cmd, "hold") == 0 && argc == a + 2)
                return cmd_hold(strtoull(argv[a + 1], NULL, 0));
        if (strcmp(cmd, "query-hold") == 0 && argc == a + 1)
                return cmd_query_hold();
        if (strcmp(cmd, "race") == 0 && argc == a + 2)
                return cmd_race(strtoull(argv[a + 1], NULL, 0));
        if (strcmp(cmd, "burn") == 0 && (argc == a + 3 || argc == a + 4))
                return cmd_burn((unsigned)atoi(argv[a + 1]), (unsigned)atoi(argv[a + 2]),
                                argc == a + 4);
        if (strcmp(cmd, "churn") == 0 && argc == a + 2)
                cmd_churn(strtoull(argv[a + 1], NULL, 0));
        if (strcmp(cmd, "fork") == 0 && argc == a + 2)
                return cmd_fork(argv[0], strtoull(argv[a + 1], NULL, 0));
        if (strcmp(cmd, "procaddr") == 0)
                return cmd_procaddr();
        usage();
}
