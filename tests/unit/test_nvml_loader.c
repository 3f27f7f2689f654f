/* NVML loader against the mock libnvidia-ml.so.1, the legacy (v1-only) mock,
 * a stub missing required symbols, an absent library and a driver root. */
#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "kdev_mock_nvml.h"
#include "nvml/discover.h"
#include "nvml/loader.h"

#define TOPO(f) KDEV_MOCK_NVML_TOPOLOGIES "/" f

static struct kdev_nvml *open_ok(const char *path)
{
        struct kdev_nvml_options o = { .library_path = path };
        struct kdev_nvml *lib = NULL;
        struct kdev_err e;
        kdev_err_clear(&e);
        int rc = kdev_nvml_open(&o, &lib, &e);
        if (rc != 0)
                fail_msg("open %s: %s", path, e.msg);
        return lib;
}

/* A second reference to the loaded mock, for its control functions. */
static void *mock_handle(const char *path)
{
        void *h = dlopen(path, RTLD_NOW | RTLD_NOLOAD);
        assert_non_null(h);
        return h;
}

static void test_mock_resolves_newest(void **state)
{
        (void)state;
        struct kdev_nvml *lib = open_ok(KDEV_MOCK_NVML_LIB);
        assert_string_equal(kdev_nvml_path(lib), KDEV_MOCK_NVML_LIB);
        assert_int_equal(kdev_nvml_caps(lib), KDEV_NVML_CAP_MIG | KDEV_NVML_CAP_CUDA_VERSION |
                                                      KDEV_NVML_CAP_ARCH |
                                                      KDEV_NVML_CAP_ROW_REMAP |
                                                      KDEV_NVML_CAP_BRAND |
                                                      KDEV_NVML_CAP_USAGE |
                                                      KDEV_NVML_CAP_PROC_UTIL |
                                                      KDEV_NVML_CAP_MIG_CONFIG);
        size_t n = kdev_nvml_symbol_count();
        assert_int_equal(n, 55);
        const struct kdev_nvml_api *api = kdev_nvml_api(lib);
        for (size_t i = 0; i < n; i++) {
                struct kdev_nvml_symbol s;
                assert_int_equal(kdev_nvml_symbol_info(lib, i, &s), 0);
                assert_non_null(s.resolved);
                assert_string_equal(s.resolved, s.names[0]);
                void *p = NULL;
                memcpy(&p, (const char *)api + i * sizeof(void *), sizeof(p));
                assert_non_null(p);
        }
        struct kdev_nvml_symbol s;
        assert_int_equal(kdev_nvml_symbol_info(lib, 11, &s), 0);
        assert_string_equal(s.field, "nvmlDeviceGetPciInfo");
        assert_string_equal(s.resolved, "nvmlDeviceGetPciInfo_v3");
        assert_string_equal(s.names[1], "nvmlDeviceGetPciInfo_v2");
        assert_string_equal(s.names[2], "nvmlDeviceGetPciInfo");
        assert_int_equal(s.cap, KDEV_NVML_REQUIRED);
        assert_int_equal(kdev_nvml_symbol_info(lib, n, &s), -ERANGE);
        /* The table calls the mock: the init entry point is nvmlInit_v2. */
        void *h = mock_handle(KDEV_MOCK_NVML_LIB);
        void *v2 = dlsym(h, "nvmlInit_v2");
        void *p = NULL;
        memcpy(&p, &api->nvmlInit, sizeof(p));
        assert_ptr_equal(p, v2);
        dlclose(h);
        kdev_nvml_close(lib);
}

static void test_legacy_fallbacks_and_caps(void **state)
{
        (void)state;
        struct kdev_nvml *lib = open_ok(KDEV_MOCK_NVML_LEGACY_LIB);
        assert_int_equal(kdev_nvml_caps(lib), 0);
        const struct kdev_nvml_api *api = kdev_nvml_api(lib);
        assert_null(api->nvmlDeviceGetMigMode);
        assert_null(api->nvmlComputeInstanceGetInfo);
        assert_null(api->nvmlDeviceGetArchitecture);
        assert_null(api->nvmlDeviceGetBrand);
        assert_null(api->nvmlDeviceGetRemappedRows);
        assert_null(api->nvmlSystemGetCudaDriverVersion);
        /* the legacy library has utilization rates but no process list: the
         * whole usage group is off, so a half-present group is never called */
        assert_null(api->nvmlDeviceGetUtilizationRates);
        assert_null(api->nvmlDeviceGetComputeRunningProcesses);
        assert_null(api->nvmlDeviceGetProcessUtilization);
        static const char *const expect[][2] = {
                { "nvmlInit", "nvmlInit" },
                { "nvmlDeviceGetCount", "nvmlDeviceGetCount" },
                { "nvmlDeviceGetHandleByIndex", "nvmlDeviceGetHandleByIndex" },
                { "nvmlDeviceGetPciInfo", "nvmlDeviceGetPciInfo" },
                { "nvmlEventSetWait", "nvmlEventSetWait" },
                { "nvmlDeviceGetNvLinkRemotePciInfo", "nvmlDeviceGetNvLinkRemotePciInfo" },
                { "nvmlDeviceGetMigMode", NULL },
                { "nvmlSystemGetCudaDriverVersion", NULL },
        };
        for (size_t k = 0; k < sizeof(expect) / sizeof(expect[0]); k++) {
                bool seen = false;
                for (size_t i = 0; i < kdev_nvml_symbol_count(); i++) {
                        struct kdev_nvml_symbol s;
                        kdev_nvml_symbol_info(lib, i, &s);
                        if (strcmp(s.field, expect[k][0]) != 0)
                                continue;
                        seen = true;
                        if (expect[k][1])
                                assert_string_equal(s.resolved, expect[k][1]);
                        else
                                assert_null(s.resolved);
                }
                assert_true(seen);
        }
        /* Discovery still works through v1 entry points: the PCI bus id is
         * rebuilt from domain/bus/device, MIG is "not capable". */
        setenv("KDEV_MOCK_NVML_TOPOLOGY", TOPO("h100-80gb-8x-nvswitch.yaml"), 1);
        struct kdev_gpu_set *set = NULL;
        struct kdev_err e;
        kdev_err_clear(&e);
        struct kdev_nvml_discover_options o = { .sysfs_root = "/nonexistent",
                                                .flags = KDEV_NVML_DISCOVER_LINKS };
        int rc = kdev_nvml_discover(lib, &o, &set, &e);
        if (rc != 0)
                fail_msg("%s", e.msg);
        assert_int_equal(set->n_gpus, 8);
        assert_string_equal(set->gpus[0].pci_bus_id, "00000000:18:00.0");
        assert_string_equal(set->gpus[7].sysfs_bus_id, "0000:db:00.0");
        assert_false(set->gpus[0].mig_capable);
        assert_int_equal(set->gpus[0].arch, NVML_DEVICE_ARCH_UNKNOWN);
        assert_string_equal(set->gpus[0].family, "hopper");
        assert_int_equal(set->cuda_driver_version, 0);
        assert_string_equal(set->driver_version, "550.90.07");
        assert_int_equal(set->gpus[3].n_nvlinks, 18);
        assert_string_equal(set->gpus[3].nvlinks[5].remote_bus_id, "00000000:06:00.0");
        kdev_gpu_set_free(set);
        kdev_nvml_close(lib);
}

static void test_stub_missing_required(void **state)
{
        (void)state;
        struct kdev_nvml_options o = { .library_path = KDEV_MOCK_NVML_STUB_LIB };
        struct kdev_nvml *lib = (struct kdev_nvml *)1;
        struct kdev_err e;
        kdev_err_clear(&e);
        assert_int_equal(kdev_nvml_open(&o, &lib, &e), -ENOSYS);
        assert_null(lib);
        char want[1024];
        snprintf(want, sizeof(want),
                 "NVML library %s: missing required symbol nvmlSystemGetDriverVersion: %s: "
                 "undefined symbol: nvmlSystemGetDriverVersion",
                 KDEV_MOCK_NVML_STUB_LIB, KDEV_MOCK_NVML_STUB_LIB);
        assert_string_equal(e.msg, want);
        assert_int_equal(e.code, ENOSYS);
}

static void test_absent_library(void **state)
{
        (void)state;
        struct kdev_nvml_options o = { .library_path = "/nonexistent/libnvidia-ml.so.1" };
        struct kdev_nvml *lib = NULL;
        struct kdev_err e;
        kdev_err_clear(&e);
        assert_int_equal(kdev_nvml_open(&o, &lib, &e), -EOPNOTSUPP);
        assert_string_equal(e.msg, "NVML library /nonexistent/libnvidia-ml.so.1 not found: "
                                   "/nonexistent/libnvidia-ml.so.1: cannot open shared object "
                                   "file: No such file or directory");
        /* The default name through the loader's search path. On a machine with
         * the NVIDIA driver it loads; without it, the exact absent message. */
        kdev_err_clear(&e);
        int rc = kdev_nvml_open(NULL, &lib, &e);
        if (rc == 0) {
                kdev_nvml_close(lib);
        } else {
                assert_int_equal(rc, -EOPNOTSUPP);
                assert_string_equal(e.msg, "NVML library libnvidia-ml.so.1 not found: "
                                           "libnvidia-ml.so.1: cannot open shared object file: "
                                           "No such file or directory");
        }
}

static void test_not_a_library(void **state)
{
        (void)state;
        char path[] = "/tmp/kdev-nvml-notlib-XXXXXX";
        int fd = mkstemp(path);
        assert_true(fd >= 0);
        assert_int_equal(write(fd, "hello\n", 6), 6);
        close(fd);
        struct kdev_nvml_options o = { .library_path = path };
        struct kdev_nvml *lib = NULL;
        struct kdev_err e;
        kdev_err_clear(&e);
        assert_int_equal(kdev_nvml_open(&o, &lib, &e), -ELIBBAD);
        char want[256];
        snprintf(want, sizeof(want), "cannot load NVML library %s: %s: ", path, path);
        assert_memory_equal(e.msg, want, strlen(want));
        unlink(path);
}

static void test_driver_root(void **state)
{
        (void)state;
        char root[] = "/tmp/kdev-nvml-root-XXXXXX";
        assert_non_null(mkdtemp(root));
        struct kdev_nvml_options o = { .driver_root = root };
        struct kdev_nvml *lib = NULL;
        struct kdev_err e;
        kdev_err_clear(&e);
        assert_int_equal(kdev_nvml_open(&o, &lib, &e), -EOPNOTSUPP);
        char want[1024];
        snprintf(want, sizeof(want),
                 "NVML library libnvidia-ml.so.1 not found under driver root %s (searched "
                 "/usr/lib64, /usr/lib/x86_64-linux-gnu, /usr/lib/aarch64-linux-gnu, /lib64, "
                 "/lib/x86_64-linux-gnu, /lib/aarch64-linux-gnu)",
                 root);
        assert_string_equal(e.msg, want);

        char dir[PATH_MAX / 2], lnk[PATH_MAX], usr[PATH_MAX / 2], lib_dir[PATH_MAX / 2];
        snprintf(usr, sizeof(usr), "%s/usr", root);
        snprintf(lib_dir, sizeof(lib_dir), "%s/usr/lib", root);
        snprintf(dir, sizeof(dir), "%s/usr/lib/x86_64-linux-gnu", root);
        snprintf(lnk, sizeof(lnk), "%s/libnvidia-ml.so.1", dir);
        assert_int_equal(mkdir(usr, 0755), 0);
        assert_int_equal(mkdir(lib_dir, 0755), 0);
        assert_int_equal(mkdir(dir, 0755), 0);
        /* a copy, so that the dynamic loader sees a new file */
        FILE *in = fopen(KDEV_MOCK_NVML_LIB, "rb"), *out = fopen(lnk, "wb");
        assert_non_null(in);
        assert_non_null(out);
        char buf[65536];
        size_t n;
        while ((n = fread(buf, 1, sizeof(buf), in)) > 0)
                assert_int_equal(fwrite(buf, 1, n, out), n);
        fclose(in);
        fclose(out);
        /* a trailing slash on the root is accepted */
        char root_slash[PATH_MAX];
        snprintf(root_slash, sizeof(root_slash), "%s/", root);
        o.driver_root = root_slash;
        kdev_err_clear(&e);
        int rc = kdev_nvml_open(&o, &lib, &e);
        if (rc != 0)
                fail_msg("%s", e.msg);
        assert_string_equal(kdev_nvml_path(lib), lnk);
        kdev_nvml_close(lib);
        unlink(lnk);
        rmdir(dir);
        rmdir(lib_dir);
        rmdir(usr);
        rmdir(root);
}

static void test_refcounted_init(void **state)
{
        (void)state;
        setenv("KDEV_MOCK_NVML_TOPOLOGY", TOPO("h100-80gb-8x-nvswitch.yaml"), 1);
        struct kdev_nvml *lib = open_ok(KDEV_MOCK_NVML_LIB);
        void *h = mock_handle(KDEV_MOCK_NVML_LIB);
        kdevMockInitCount_fn *count = (kdevMockInitCount_fn *)dlsym(h, "kdevMockInitCount");
        kdevMockSetInitError_fn *init_error =
                (kdevMockSetInitError_fn *)dlsym(h, "kdevMockSetInitError");
        kdevMockReset_fn *reset = (kdevMockReset_fn *)dlsym(h, "kdevMockReset");
        assert_non_null(count);
        assert_non_null(init_error);
        assert_non_null(reset);
        reset();
        struct kdev_err e;
        kdev_err_clear(&e);
        assert_int_equal(count(), 0);
        for (int i = 0; i < 3; i++)
                assert_int_equal(kdev_nvml_init(lib, &e), 0);
        assert_int_equal(kdev_nvml_refs(lib), 3);
        assert_int_equal(count(), 1);
        assert_int_equal(kdev_nvml_shutdown(lib, &e), 0);
        assert_int_equal(kdev_nvml_shutdown(lib, &e), 0);
        assert_int_equal(count(), 1);
        assert_int_equal(kdev_nvml_shutdown(lib, &e), 0);
        assert_int_equal(count(), 0);
        assert_int_equal(kdev_nvml_refs(lib), 0);
        assert_int_equal(kdev_nvml_shutdown(lib, &e), -EALREADY);
        assert_string_equal(e.msg, "nvml shutdown without a matching init");
        assert_int_equal(count(), 0);

        /* init failure: the NVML error string, the mapped errno, no reference */
        init_error(NVML_ERROR_DRIVER_NOT_LOADED);
        kdev_err_clear(&e);
        assert_int_equal(kdev_nvml_init(lib, &e), -ENODEV);
        assert_string_equal(e.msg, "nvml init failed: Driver Not Loaded");
        assert_int_equal(kdev_nvml_refs(lib), 0);
        init_error(NVML_SUCCESS);
        assert_int_equal(kdev_nvml_init(lib, &e), 0);

        /* a topology that does not exist: NVML "Unknown Error" */
        assert_int_equal(kdev_nvml_shutdown(lib, &e), 0);
        setenv("KDEV_MOCK_NVML_TOPOLOGY", "/nonexistent.yaml", 1);
        reset();
        assert_int_equal(kdev_nvml_init(lib, &e), -EIO);
        assert_string_equal(e.msg, "nvml init failed: Unknown Error");
        kdevMockLastError_fn *last = (kdevMockLastError_fn *)dlsym(h, "kdevMockLastError");
        assert_string_equal(last(), "/nonexistent.yaml: cannot read: No such file or directory");
        /* odd topology files are refused at once (the bounded reader) */
        char tdir[] = "/tmp/kdev-topo-XXXXXX";
        assert_non_null(mkdtemp(tdir));
        char fifo[64], zero[64], big[64], want[256];
        snprintf(fifo, sizeof(fifo), "%s/fifo.yaml", tdir);
        snprintf(zero, sizeof(zero), "%s/zero.yaml", tdir);
        snprintf(big, sizeof(big), "%s/big.yaml", tdir);
        assert_int_equal(mkfifo(fifo, 0600), 0);
        assert_int_equal(symlink("/dev/zero", zero), 0);
        FILE *bf = fopen(big, "w");
        assert_non_null(bf);
        assert_int_equal(ftruncate(fileno(bf), 1024 * 1024 + 1), 0);
        fclose(bf);
        const char *const odd[][2] = {
                {fifo, "is not a regular file (a FIFO)"},
                {zero, "is not a regular file (a character device)"},
                {tdir, "is not a regular file (a directory)"},
                {big, "the topology file is larger than 1048576 bytes"},
        };
        for (size_t i = 0; i < sizeof(odd) / sizeof(odd[0]); i++) {
                setenv("KDEV_MOCK_NVML_TOPOLOGY", odd[i][0], 1);
                reset();
                assert_int_equal(kdev_nvml_init(lib, &e), -EIO);
                snprintf(want, sizeof(want), "%s: %s", odd[i][0], odd[i][1]);
                assert_string_equal(last(), want);
        }
        unlink(fifo);
        unlink(zero);
        unlink(big);
        rmdir(tdir);
        unsetenv("KDEV_MOCK_NVML_TOPOLOGY");
        assert_int_equal(kdev_nvml_init(lib, &e), -ENODEV);
        assert_string_equal(e.msg, "nvml init failed: Driver Not Loaded");
        setenv("KDEV_MOCK_NVML_TOPOLOGY", TOPO("h100-80gb-8x-nvswitch.yaml"), 1);

        /* close with a reference left shuts NVML down once */
        assert_int_equal(kdev_nvml_init(lib, &e), 0);
        assert_int_equal(kdev_nvml_init(lib, &e), 0);
        assert_int_equal(count(), 1);
        kdev_nvml_close(lib);
        assert_int_equal(count(), 0);
        reset();
        dlclose(h);
}

static void test_strings_and_errno(void **state)
{
        (void)state;
        assert_string_equal(kdev_nvml_strerror(NULL, NVML_ERROR_GPU_IS_LOST), "GPU is lost");
        assert_string_equal(kdev_nvml_strerror(NULL, NVML_ERROR_NO_PERMISSION),
                            "Insufficient Permissions");
        assert_string_equal(kdev_nvml_strerror(NULL, (nvmlReturn_t)12345), "Unknown Error");
        struct kdev_nvml *lib = open_ok(KDEV_MOCK_NVML_LIB);
        assert_string_equal(kdev_nvml_strerror(lib, NVML_ERROR_TIMEOUT), "Timeout");
        struct kdev_err e;
        kdev_err_clear(&e);
        assert_int_equal(kdev_nvml_fail(lib, NVML_SUCCESS, &e, "x"), 0);
        assert_string_equal(e.msg, "");
        assert_int_equal(kdev_nvml_fail(lib, NVML_ERROR_NOT_FOUND, &e, "GPU %d: %s", 3,
                                        "nvmlDeviceGetUUID"),
                         -ENOENT);
        assert_string_equal(e.msg, "GPU 3: nvmlDeviceGetUUID: Not Found");
        kdev_nvml_close(lib);
        static const struct {
                nvmlReturn_t r;
                int e;
        } map[] = {
                { NVML_SUCCESS, 0 },
                { NVML_ERROR_UNINITIALIZED, -EBADF },
                { NVML_ERROR_INVALID_ARGUMENT, -EINVAL },
                { NVML_ERROR_NOT_SUPPORTED, -EOPNOTSUPP },
                { NVML_ERROR_NO_PERMISSION, -EACCES },
                { NVML_ERROR_NOT_FOUND, -ENOENT },
                { NVML_ERROR_INSUFFICIENT_SIZE, -ENOBUFS },
                { NVML_ERROR_DRIVER_NOT_LOADED, -ENODEV },
                { NVML_ERROR_TIMEOUT, -ETIMEDOUT },
                { NVML_ERROR_GPU_IS_LOST, -ENXIO },
                { NVML_ERROR_RESET_REQUIRED, -ESTALE },
                { NVML_ERROR_UNKNOWN, -EIO },
        };
        for (size_t i = 0; i < sizeof(map) / sizeof(map[0]); i++)
                assert_int_equal(kdev_nvml_errno(map[i].r), map[i].e);
}

int main(void)
{
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_mock_resolves_newest),
                cmocka_unit_test(test_legacy_fallbacks_and_caps),
                cmocka_unit_test(test_stub_missing_required),
                cmocka_unit_test(test_absent_library),
                cmocka_unit_test(test_not_a_library),
                cmocka_unit_test(test_driver_root),
                cmocka_unit_test(test_refcounted_init),
                cmocka_unit_test(test_strings_and_errno),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
