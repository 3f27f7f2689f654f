/* Benchmarks of libkdev-share.so on the mock libcuda.so.1, run by
 * bench/share/run.py with and without the library preloaded (the plain run
 * is the baseline). The driver is reached as the CUDA runtime does:
 * dlopen("libcuda.so.1"), then cuGetProcAddress_v2.
 *
 *   share_bench calls N      ns per call of each entry point (the best of 7
 *                            rounds of N calls)
 *   share_bench init         opens the driver, prints "ready", waits for a
 *                            byte or the end of stdin (one pipe shared by
 *                            every process: closing it releases them all
 *                            at once), then prints the wall-clock and CPU ns of the
 *                            first cuGetProcAddress_v2 call (the library's
 *                            one-time init: limits file, region mapped or
 *                            created, slot claimed, driver entry points
 *                            resolved), then the same two figures of
 *                            its first cuMemAlloc + cuMemFree of 2 MiB */
#include <dlfcn.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "share/abi.h"

typedef kdev_cu_result CUresult;
typedef CUresult gpa_t(const char *, void **, int, unsigned long long, int *);
typedef CUresult init_t(unsigned);
typedef CUresult retain_t(kdev_cu_context *, int);
typedef CUresult setcur_t(kdev_cu_context);
typedef CUresult alloc_t(kdev_cu_deviceptr *, size_t);
typedef CUresult free_t(kdev_cu_deviceptr);
typedef CUresult info_t(size_t *, size_t *);
typedef CUresult total_t(size_t *, int);
typedef CUresult attr_t(int *, int, int);
typedef CUresult getfn_t(kdev_cu_function *, void *, const char *);
typedef CUresult load_t(void **, const void *);
typedef CUresult launch_t(kdev_cu_function, unsigned, unsigned, unsigned, unsigned, unsigned,
                          unsigned, unsigned, kdev_cu_stream, void **, void **);

static gpa_t *gpa;

static uint64_t now_ns(void)
{
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void *proc(const char *name)
{
        void *p = NULL;
        if (gpa(name, &p, 13000, 0, NULL) != 0 || !p) {
                fprintf(stderr, "no %s\n", name);
                exit(3);
        }
        return p;
}

static void open_driver(void)
{
        void *h = dlopen("libcuda.so.1", RTLD_NOW);
        gpa = h ? (gpa_t *)dlsym(h, "cuGetProcAddress_v2") : NULL;
        if (!gpa) {
                fprintf(stderr, "no libcuda.so.1\n");
                exit(3);
        }
}

static void context(void)
{
        kdev_cu_context c;
        if (((init_t *)proc("cuInit"))(0) != 0 ||
            ((retain_t *)proc("cuDevicePrimaryCtxRetain"))(&c, 0) != 0 ||
            ((setcur_t *)proc("cuCtxSetCurrent"))(c) != 0) {
                fprintf(stderr, "no device 0\n");
                exit(3);
        }
}

static int cmp(const void *a, const void *b)
{
        double x = *(const double *)a, y = *(const double *)b;
        return x < y ? -1 : x > y;
}

#define ROUNDS 7
#define TIME(label, n, body)                                                              \
        do {                                                                              \
                double r_[ROUNDS];                                                        \
                for (int k_ = 0; k_ < ROUNDS; k_++) {                                     \
                        uint64_t t0_ = now_ns();                                          \
                        for (long i_ = 0; i_ < (n); i_++) {                               \
                                body;                                                     \
                        }                                                                 \
                        r_[k_] = (double)(now_ns() - t0_) / (double)(n);                  \
                }                                                                         \
                qsort(r_, ROUNDS, sizeof(double), cmp);                                   \
                printf("%s %.1f\n", label, r_[0]);                                        \
        } while (0)

/* An empty kernel in PTX: the real driver JIT-compiles it (no toolkit
 * needed); the mock takes any image. */
static const char ptx[] = ".version 7.0\n.target sm_50\n.address_size 64\n"
                          ".visible .entry kdev_sleep_0()\n{\n\tret;\n}\n";

static int cmd_calls(long n)
{
        open_driver();
        context();
        attr_t *attr = (attr_t *)proc("cuDeviceGetAttribute");
        total_t *total = (total_t *)proc("cuDeviceTotalMem");
        info_t *info = (info_t *)proc("cuMemGetInfo");
        alloc_t *alloc = (alloc_t *)proc("cuMemAlloc");
        free_t *fr = (free_t *)proc("cuMemFree");
        launch_t *launch = (launch_t *)proc("cuLaunchKernel");
        void *mod = NULL;
        kdev_cu_function f = NULL;
        bool kernel = ((load_t *)proc("cuModuleLoadData"))(&mod, ptx) == 0 &&
                      ((getfn_t *)proc("cuModuleGetFunction"))(&f, mod, "kdev_sleep_0") == 0;
        int v;
        size_t a, b;
        kdev_cu_deviceptr p;
        TIME("cuDeviceGetAttribute", n, attr(&v, 16, 0));
        TIME("cuDeviceTotalMem", n, total(&a, 0));
        TIME("cuMemGetInfo", n, info(&a, &b));
        if (kernel)
                TIME("cuLaunchKernel", n, launch(f, 1, 1, 1, 1, 1, 1, 0, NULL, NULL, NULL));
        /* the driver refuses a NULL function at once: what remains is the
         * cost of reaching it, hook included */
        TIME("cuLaunchKernel(NULL)", n, launch(NULL, 1, 1, 1, 1, 1, 1, 0, NULL, NULL, NULL));
        TIME("cuMemAlloc+cuMemFree", n / 10, (alloc(&p, 2u << 20), fr(p)));
        return 0;
}

static uint64_t cpu_ns(void)
{
        struct timespec ts;
        clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
        return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static int cmd_init(void)
{
        open_driver();
        printf("ready\n");
        fflush(stdout);
        char c;
        if (read(0, &c, 1) < 0)
                return 1;
        uint64_t t0 = now_ns(), c0 = cpu_ns();
        void *p = proc("cuInit");
        uint64_t t1 = now_ns(), c1 = cpu_ns();
        (void)p;
        /* then the first allocation (with the library: the slot claimed, the
         * start time noted, the reservation): a context first, untimed */
        context();
        alloc_t *alloc = (alloc_t *)proc("cuMemAlloc");
        free_t *fr = (free_t *)proc("cuMemFree");
        kdev_cu_deviceptr d;
        uint64_t t2 = now_ns(), c2 = cpu_ns();
        if (alloc(&d, 2u << 20) != 0 || fr(d) != 0)
                return 1;
        uint64_t t3 = now_ns(), c3 = cpu_ns();
        printf("%llu %llu %llu %llu\n", (unsigned long long)(t1 - t0),
               (unsigned long long)(c1 - c0), (unsigned long long)(t3 - t2),
               (unsigned long long)(c3 - c2));
        return 0;
}

int main(int argc, char **argv)
{
        if (argc == 3 && strcmp(argv[1], "calls") == 0)
                return cmd_calls(atol(argv[2]));
        if (argc == 2 && strcmp(argv[1], "init") == 0)
                return cmd_init();
        fprintf(stderr, "usage: share_bench calls N | init\n");
        return 2;
}
