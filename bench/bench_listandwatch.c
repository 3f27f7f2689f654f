/* Benchmark of the ListAndWatch message for a big shared node.
 *
 * Usage: bench_listandwatch [REPLICAS [ITERATIONS]]
 *
 * Discovers the 8x H100 NVSwitch topology through the mock NVML (NUMA nodes
 * from the mock's sysfs, so every device carries its TopologyInfo), applies
 * sharing.timeSlicing with REPLICAS (default 128) replicas of nvidia.com/gpu,
 * and times kdev_dp_list_and_watch_size() (plugin/service.h): the packing of
 * the whole ListAndWatchResponse that kdev-plugin sends on every stream, plus
 * its free. Prints the device count, the message size in bytes and the
 * build time min/median/max over ITERATIONS (default 501) calls, in
 * microseconds, and "kv NAME VALUE" lines for bench/run.py.
 * Figures only: it asserts nothing (tests assert behaviour).
 */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "kdev_mock_nvml.h"
#include "model/model.h"
#include "nvidia/config.h"
#include "nvidia/resources.h"
#include "nvidia/sharing.h"
#include "nvml/discover.h"
#include "nvml/loader.h"
#include "plugin/service.h"

static double now_us(void)
{
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3;
}

static int dbl_cmp(const void *pa, const void *pb)
{
        double a = *(const double *)pa, b = *(const double *)pb;
        return a < b ? -1 : a > b;
}

static void die(const char *what, const struct kdev_err *e)
{
        fprintf(stderr, "bench_listandwatch: %s: %s\n", what, e ? e->msg : "");
        exit(1);
}

int main(int argc, char **argv)
{
        unsigned long replicas = argc > 1 ? strtoul(argv[1], NULL, 10) : 128;
        unsigned long iterations = argc > 2 ? strtoul(argv[2], NULL, 10) : 501;
        if (replicas < 2 || replicas > 100000 || iterations == 0 || iterations > 1000000) {
                fprintf(stderr, "usage: %s [REPLICAS (2..100000) [ITERATIONS]]\n", argv[0]);
                return 2;
        }
        setenv("KDEV_MOCK_NVML_TOPOLOGY", KDEV_MOCK_NVML_TOPOLOGIES "/h100-80gb-8x-nvswitch.yaml",
               1);
        struct kdev_nvml_options o = {.library_path = KDEV_MOCK_NVML_LIB};
        struct kdev_nvml *lib = NULL;
        struct kdev_err e = {0};
        if (kdev_nvml_open(&o, &lib, &e) != 0)
                die("open", &e);
        void *h = dlopen(KDEV_MOCK_NVML_LIB, RTLD_NOW | RTLD_NOLOAD);
        kdevMockWriteSysfs_fn *write_sysfs =
                h ? (kdevMockWriteSysfs_fn *)dlsym(h, "kdevMockWriteSysfs") : NULL;
        char sysfs[] = "/tmp/kdev-bench-sysfs.XXXXXX";
        if (!write_sysfs || !mkdtemp(sysfs) || write_sysfs(sysfs) != NVML_SUCCESS)
                die("mock sysfs", NULL);

        struct kdev_nvml_discover_options dopt = {.sysfs_root = sysfs};
        struct kdev_gpu_set *set = NULL;
        struct kdev_nvidia_config cfg;
        struct kdev_resource_set rs = {0};
        if (kdev_nvml_discover(lib, &dopt, &set, &e) != 0)
                die("discover", &e);
        char cmd[128];
        snprintf(cmd, sizeof(cmd), "rm -rf '%s'", sysfs);
        if (system(cmd) != 0)
                fprintf(stderr, "bench_listandwatch: cannot remove %s\n", sysfs);
        if (kdev_nvidia_config_init(&cfg, &e) != 0)
                die("config", &e);
        struct kdev_nvidia_replicated_resource *rr = calloc(1, sizeof(*rr));
        if (!rr || !(rr->name = strdup("nvidia.com/gpu")))
                die("out of memory", NULL);
        rr->devices_kind = KDEV_NVIDIA_DEVICES_ALL;
        rr->replicas = (unsigned)replicas;
        cfg.time_slicing.present = true;
        cfg.time_slicing.resources = rr;
        cfg.time_slicing.n_resources = 1;
        cfg.time_slicing.fail_requests_greater_than_one = -1;
        if (kdev_nvidia_config_finish(&cfg, true, &e) != 0)
                die("config", &e);
        if (kdev_nvidia_build(set, &cfg, NULL, &rs, &e) != 0 ||
            kdev_nvidia_apply_sharing(&rs, &cfg, NULL, NULL, &e) != 0)
                die("build", &e);
        const struct kdev_resource *r = NULL;
        for (size_t i = 0; i < rs.n_resources; i++) {
                if (strcmp(rs.resources[i].name, "nvidia.com/gpu") == 0)
                        r = &rs.resources[i];
        }
        if (!r)
                die("no nvidia.com/gpu resource", NULL);

        size_t size = kdev_dp_list_and_watch_size(r);
        double *t = malloc(iterations * sizeof(*t));
        for (unsigned long i = 0; i < iterations; i++) {
                double t0 = now_us();
                size = kdev_dp_list_and_watch_size(r);
                t[i] = now_us() - t0;
        }
        qsort(t, iterations, sizeof(*t), dbl_cmp);
        printf("ListAndWatch, %zu GPUs x %lu replicas of nvidia.com/gpu (%zu devices, NUMA "
               "topology on each)\n", set->n_gpus, replicas, r->n_devices);
        printf("  message size:                %zu bytes\n", size);
        printf("  build (pack + free), %lu calls: min %.1f us, median %.1f us, max %.1f us\n",
               iterations, t[0], t[iterations / 2], t[iterations - 1]);
        printf("kv lw_devices %zu\nkv lw_bytes %zu\nkv lw_build_us %.3f\n", r->n_devices, size,
               t[iterations / 2]);
        free(t);
        kdev_resource_set_clear(&rs);
        kdev_nvidia_config_clear(&cfg);
        kdev_gpu_set_free(set);
        dlclose(h);
        kdev_nvml_close(lib);
        return 0;
}
