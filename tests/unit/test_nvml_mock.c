/* The mock libnvidia-ml.so.1 through kdev's loader: every entry point with
 * good and bad arguments (return codes, buffer sizes), events (timeout,
 * XID delivery to a waiting thread, lost GPU), and the control file. */
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "mock_fixture.h"
#include "nvml/loader.h"


#define G0 "GPU-c1ae70ed-64b5-7842-b2ed-e9039613ae69"
#define G1 "GPU-4603f764-b00c-271e-0980-eda368e40931"
#define M00 "MIG-59bcc04e-5cf6-b753-ab18-f13e8543556f"   /* GPU 0, 3g.20gb, GI 2 CI 0 */
#define M10 "MIG-fa0a443e-a85c-8cba-33fa-10b94f0ea046"   /* GPU 1, 1g.5gb+me, GI 7 */
/* the MIG device made on mig-h100-80gb-dynamic.yaml GPU 0 as GI 1, CI 0 */
#define DYN_UUID_G0_GI1_CI0 "MIG-0203dd0e-c32e-54df-94fa-fe2eda393992"

struct fx {
        struct mock_nvml m;
        const struct kdev_nvml_api *n;
};

static int setup(void **state)
{
        struct fx *f = calloc(1, sizeof(*f));
        if (mock_nvml_open(&f->m) != 0)
                return -1;
        f->n = kdev_nvml_api(f->m.lib);
        setenv("KDEV_MOCK_NVML_TOPOLOGY", TOPO("mig-a100-40gb.yaml"), 1);
        unsetenv("KDEV_MOCK_NVML_CONTROL");
        f->m.reset();
        *state = f;
        return 0;
}

static int teardown(void **state)
{
        struct fx *f = *state;
        while (f->m.count() > 0)
                f->n->nvmlShutdown();
        unsetenv("KDEV_MOCK_NVML_CONTROL");
        mock_nvml_close(&f->m);
        free(f);
        return 0;
}

static nvmlDevice_t gpu(struct fx *f, unsigned i)
{
        nvmlDevice_t d = NULL;
        assert_int_equal(f->n->nvmlDeviceGetHandleByIndex(i, &d), NVML_SUCCESS);
        return d;
}

static nvmlDevice_t by_uuid(struct fx *f, const char *uuid)
{
        nvmlDevice_t d = NULL;
        assert_int_equal(f->n->nvmlDeviceGetHandleByUUID(uuid, &d), NVML_SUCCESS);
        return d;
}

static void test_init_refcount(void **state)
{
        struct fx *f = *state;
        const struct kdev_nvml_api *n = f->n;
        unsigned c = 0;
        char buf[80];
        /* before init */
        assert_int_equal(n->nvmlDeviceGetCount(&c), NVML_ERROR_UNINITIALIZED);
        assert_int_equal(n->nvmlSystemGetDriverVersion(buf, sizeof(buf)),
                         NVML_ERROR_UNINITIALIZED);
        nvmlEventSet_t set = NULL;
        assert_int_equal(n->nvmlEventSetCreate(&set), NVML_ERROR_UNINITIALIZED);
        assert_string_equal(n->nvmlErrorString(NVML_ERROR_UNINITIALIZED), "Uninitialized");
        /* nested */
        assert_int_equal(n->nvmlInit(), NVML_SUCCESS);
        assert_int_equal(n->nvmlInit(), NVML_SUCCESS);
        assert_int_equal(f->m.count(), 2);
        assert_int_equal(n->nvmlShutdown(), NVML_SUCCESS);
        assert_int_equal(n->nvmlDeviceGetCount(&c), NVML_SUCCESS);
        assert_int_equal(c, 4);
        assert_int_equal(n->nvmlShutdown(), NVML_SUCCESS);
        assert_int_equal(n->nvmlDeviceGetCount(&c), NVML_ERROR_UNINITIALIZED);
        /* extra shutdowns are not an error (nvml.h) */
        assert_int_equal(n->nvmlShutdown(), NVML_SUCCESS);
        assert_int_equal(f->m.count(), 0);
        /* init error, persistent until cleared */
        f->m.set_init_error(NVML_ERROR_LIB_RM_VERSION_MISMATCH);
        assert_int_equal(n->nvmlInit(), NVML_ERROR_LIB_RM_VERSION_MISMATCH);
        assert_int_equal(n->nvmlInit(), NVML_ERROR_LIB_RM_VERSION_MISMATCH);
        assert_int_equal(f->m.count(), 0);
        f->m.set_init_error(NVML_SUCCESS);
        assert_int_equal(n->nvmlInit(), NVML_SUCCESS);
        assert_int_equal(n->nvmlShutdown(), NVML_SUCCESS);
        /* a broken topology file: exact position */
        char path[] = "/tmp/kdev-nvml-topo-XXXXXX";
        int fd = mkstemp(path);
        const char *text = "gpus:\n  - name: x\n    uuid: GPU-1\n    pci_bus_id: \"00000000:01:00.0\"\n"
                           "    memory_mib: 1\n    compute_capability: \"8.0\"\n    colour: red\n";
        assert_int_equal(write(fd, text, strlen(text)), (ssize_t)strlen(text));
        close(fd);
        setenv("KDEV_MOCK_NVML_TOPOLOGY", path, 1);
        assert_int_equal(n->nvmlInit(), NVML_ERROR_UNKNOWN);
        char want[256];
        snprintf(want, sizeof(want), "%s:7:5: gpu: unknown key \"colour\"", path);
        assert_string_equal(f->m.last_error(), want);
        unlink(path);
        unsetenv("KDEV_MOCK_NVML_TOPOLOGY");
        assert_int_equal(n->nvmlInit(), NVML_ERROR_DRIVER_NOT_LOADED);
        assert_string_equal(f->m.last_error(), "KDEV_MOCK_NVML_TOPOLOGY is not set");
}

static void test_system_and_handles(void **state)
{
        struct fx *f = *state;
        const struct kdev_nvml_api *n = f->n;
        assert_int_equal(n->nvmlInit(), NVML_SUCCESS);
        char buf[96];
        assert_int_equal(n->nvmlSystemGetDriverVersion(buf, sizeof(buf)), NVML_SUCCESS);
        assert_string_equal(buf, "550.90.07");
        assert_int_equal(n->nvmlSystemGetDriverVersion(buf, 10), NVML_SUCCESS);
        assert_int_equal(n->nvmlSystemGetDriverVersion(buf, 9), NVML_ERROR_INSUFFICIENT_SIZE);
        assert_int_equal(n->nvmlSystemGetDriverVersion(NULL, 80), NVML_ERROR_INVALID_ARGUMENT);
        int cuda = 0;
        assert_int_equal(n->nvmlSystemGetCudaDriverVersion(&cuda), NVML_SUCCESS);
        assert_int_equal(cuda, 12040);
        assert_int_equal(n->nvmlSystemGetCudaDriverVersion(NULL), NVML_ERROR_INVALID_ARGUMENT);
        unsigned c = 0;
        assert_int_equal(n->nvmlDeviceGetCount(&c), NVML_SUCCESS);
        assert_int_equal(c, 4);
        assert_int_equal(n->nvmlDeviceGetCount(NULL), NVML_ERROR_INVALID_ARGUMENT);
        nvmlDevice_t d = NULL;
        assert_int_equal(n->nvmlDeviceGetHandleByIndex(4, &d), NVML_ERROR_INVALID_ARGUMENT);
        assert_int_equal(n->nvmlDeviceGetHandleByIndex(0, NULL), NVML_ERROR_INVALID_ARGUMENT);
        nvmlDevice_t g0 = gpu(f, 0);
        assert_ptr_equal(by_uuid(f, G0), g0);
        assert_int_equal(n->nvmlDeviceGetHandleByUUID("GPU-nope", &d), NVML_ERROR_NOT_FOUND);
        assert_int_equal(n->nvmlDeviceGetHandleByUUID(NULL, &d), NVML_ERROR_INVALID_ARGUMENT);
        assert_int_equal(n->nvmlDeviceGetHandleByUUID(G0, NULL), NVML_ERROR_INVALID_ARGUMENT);
        nvmlDevice_t m = by_uuid(f, M00);      /* MIG UUIDs are accepted */
        unsigned is_mig = 9;
        assert_int_equal(n->nvmlDeviceIsMigDeviceHandle(m, &is_mig), NVML_SUCCESS);
        assert_int_equal(is_mig, 1);
        assert_int_equal(n->nvmlDeviceIsMigDeviceHandle(g0, &is_mig), NVML_SUCCESS);
        assert_int_equal(is_mig, 0);
        assert_int_equal(n->nvmlDeviceIsMigDeviceHandle(g0, NULL), NVML_ERROR_INVALID_ARGUMENT);

        /* UUID: 40 characters + NUL */
        assert_int_equal(n->nvmlDeviceGetUUID(g0, buf, 96), NVML_SUCCESS);
        assert_string_equal(buf, G0);
        assert_int_equal(n->nvmlDeviceGetUUID(g0, buf, 41), NVML_SUCCESS);
        assert_int_equal(n->nvmlDeviceGetUUID(g0, buf, 40), NVML_ERROR_INSUFFICIENT_SIZE);
        assert_int_equal(n->nvmlDeviceGetUUID(g0, NULL, 96), NVML_ERROR_INVALID_ARGUMENT);
        assert_int_equal(n->nvmlDeviceGetUUID(NULL, buf, 96), NVML_ERROR_INVALID_ARGUMENT);
        assert_int_equal(n->nvmlDeviceGetUUID((nvmlDevice_t)buf, buf, 96),
                         NVML_ERROR_INVALID_ARGUMENT);
        assert_int_equal(n->nvmlDeviceGetUUID(m, buf, 96), NVML_SUCCESS);
        assert_string_equal(buf, M00);
        /* name */
        assert_int_equal(n->nvmlDeviceGetName(g0, buf, 96), NVML_SUCCESS);
        assert_string_equal(buf, "NVIDIA A100-SXM4-40GB");
        assert_int_equal(n->nvmlDeviceGetName(g0, buf, 21), NVML_ERROR_INSUFFICIENT_SIZE);
        assert_int_equal(n->nvmlDeviceGetName(g0, buf, 22), NVML_SUCCESS);
        assert_int_equal(n->nvmlDeviceGetName(m, buf, 96), NVML_SUCCESS);
        assert_string_equal(buf, "NVIDIA A100-SXM4-40GB MIG 3g.20gb");
        assert_int_equal(n->nvmlDeviceGetName(by_uuid(f, M10), buf, 96), NVML_SUCCESS);
        assert_string_equal(buf, "NVIDIA A100-SXM4-40GB MIG 1g.5gb+me");
        /* index and minor */
        unsigned u = 9;
        assert_int_equal(n->nvmlDeviceGetIndex(gpu(f, 2), &u), NVML_SUCCESS);
        assert_int_equal(u, 2);
        assert_int_equal(n->nvmlDeviceGetIndex(by_uuid(f, M10), &u), NVML_SUCCESS);
        assert_int_equal(u, 1);
        assert_int_equal(n->nvmlDeviceGetIndex(g0, NULL), NVML_ERROR_INVALID_ARGUMENT);
        assert_int_equal(n->nvmlDeviceGetMinorNumber(gpu(f, 3), &u), NVML_SUCCESS);
        assert_int_equal(u, 3);
        assert_int_equal(n->nvmlDeviceGetMinorNumber(m, &u), NVML_ERROR_NOT_SUPPORTED);
        assert_int_equal(n->nvmlDeviceGetMinorNumber(g0, NULL), NVML_ERROR_INVALID_ARGUMENT);
        /* PCI */
        nvmlPciInfo_t pci;
        memset(&pci, 0xff, sizeof(pci));
        assert_int_equal(n->nvmlDeviceGetPciInfo(gpu(f, 2), &pci), NVML_SUCCESS);
        assert_string_equal(pci.busId, "00000000:47:00.0");
        assert_string_equal(pci.busIdLegacy, "0000:47:00.0");
        assert_int_equal(pci.domain, 0);
        assert_int_equal(pci.bus, 0x47);
        assert_int_equal(pci.device, 0);
        assert_int_equal(pci.pciDeviceId, 0x20B010DE);
        assert_int_equal(pci.pciSubSystemId, 0x134F10DE);
        assert_int_equal(n->nvmlDeviceGetPciInfo(m, &pci), NVML_SUCCESS);
        assert_string_equal(pci.busId, "00000000:07:00.0");
        assert_int_equal(n->nvmlDeviceGetPciInfo(g0, NULL), NVML_ERROR_INVALID_ARGUMENT);
        /* memory */
        nvmlMemory_t mem;
        assert_int_equal(n->nvmlDeviceGetMemoryInfo(g0, &mem), NVML_SUCCESS);
        assert_int_equal(mem.total, 42949672960ULL);
        assert_int_equal(mem.free, 42949672960ULL);
        assert_int_equal(mem.used, 0);
        assert_int_equal(n->nvmlDeviceGetMemoryInfo(m, &mem), NVML_SUCCESS);
        assert_int_equal(mem.total, 19968ULL << 20);
        assert_int_equal(n->nvmlDeviceGetMemoryInfo(g0, NULL), NVML_ERROR_INVALID_ARGUMENT);
        /* compute capability, architecture */
        int maj = 0, min = 9;
        assert_int_equal(n->nvmlDeviceGetCudaComputeCapability(g0, &maj, &min), NVML_SUCCESS);
        assert_int_equal(maj, 8);
        assert_int_equal(min, 0);
        assert_int_equal(n->nvmlDeviceGetCudaComputeCapability(g0, NULL, &min),
                         NVML_ERROR_INVALID_ARGUMENT);
        nvmlDeviceArchitecture_t arch = 0;
        assert_int_equal(n->nvmlDeviceGetArchitecture(g0, &arch), NVML_SUCCESS);
        assert_int_equal(arch, NVML_DEVICE_ARCH_AMPERE);
        assert_int_equal(n->nvmlDeviceGetArchitecture(g0, NULL), NVML_ERROR_INVALID_ARGUMENT);
        /* row remapping */
        unsigned corr = 9, unc = 9, pend = 9, fail = 9;
        assert_int_equal(n->nvmlDeviceGetRemappedRows(g0, &corr, &unc, &pend, &fail),
                         NVML_SUCCESS);
        assert_true(corr == 0 && unc == 0 && pend == 0 && fail == 0);
        assert_int_equal(f->m.set_remap(G0, 1), NVML_SUCCESS);
        assert_int_equal(n->nvmlDeviceGetRemappedRows(g0, &corr, &unc, &pend, &fail),
                         NVML_SUCCESS);
        assert_int_equal(pend, 1);
        assert_int_equal(f->m.set_remap(G0, 0), NVML_SUCCESS);
        assert_int_equal(n->nvmlDeviceGetRemappedRows(g0, &corr, &unc, &pend, &fail),
                         NVML_SUCCESS);
        assert_int_equal(pend, 0);
        assert_int_equal(n->nvmlDeviceGetRemappedRows(m, &corr, &unc, &pend, &fail),
                         NVML_ERROR_NOT_SUPPORTED);
        assert_int_equal(n->nvmlDeviceGetRemappedRows(g0, &corr, &unc, NULL, &fail),
                         NVML_ERROR_INVALID_ARGUMENT);
        assert_int_equal(f->m.set_remap("GPU-nope", 1), NVML_ERROR_NOT_FOUND);
}

static void test_mig_calls(void **state)
{
        struct fx *f = *state;
        const struct kdev_nvml_api *n = f->n;
        assert_int_equal(n->nvmlInit(), NVML_SUCCESS);
        nvmlDevice_t g0 = gpu(f, 0), g2 = gpu(f, 2), g3 = gpu(f, 3), d = NULL;
        nvmlDevice_t m = by_uuid(f, M00);
        unsigned cur = 9, pend = 9, u = 0;
        assert_int_equal(n->nvmlDeviceGetMigMode(g0, &cur, &pend), NVML_SUCCESS);
        assert_true(cur == 1 && pend == 1);
        assert_int_equal(n->nvmlDeviceGetMigMode(g3, &cur, &pend), NVML_SUCCESS);
        assert_true(cur == 0 && pend == 0);
        assert_int_equal(n->nvmlDeviceGetMigMode(m, &cur, &pend), NVML_ERROR_NOT_SUPPORTED);
        assert_int_equal(n->nvmlDeviceGetMigMode(g0, NULL, &pend), NVML_ERROR_INVALID_ARGUMENT);
        assert_int_equal(n->nvmlDeviceGetMaxMigDeviceCount(g0, &u), NVML_SUCCESS);
        assert_int_equal(u, 7);
        assert_int_equal(n->nvmlDeviceGetMaxMigDeviceCount(g0, NULL), NVML_ERROR_INVALID_ARGUMENT);
        assert_int_equal(n->nvmlDeviceGetMaxMigDeviceCount(m, &u), NVML_ERROR_NOT_SUPPORTED);
        assert_int_equal(n->nvmlDeviceGetMigDeviceHandleByIndex(g0, 0, &d), NVML_SUCCESS);
        assert_ptr_equal(d, m);
        assert_int_equal(n->nvmlDeviceGetMigDeviceHandleByIndex(g0, 3, &d), NVML_SUCCESS);
        assert_int_equal(n->nvmlDeviceGetMigDeviceHandleByIndex(g0, 4, &d), NVML_ERROR_NOT_FOUND);
        assert_int_equal(n->nvmlDeviceGetMigDeviceHandleByIndex(g0, 7, &d),
                         NVML_ERROR_INVALID_ARGUMENT);
        assert_int_equal(n->nvmlDeviceGetMigDeviceHandleByIndex(g0, 0, NULL),
                         NVML_ERROR_INVALID_ARGUMENT);
        assert_int_equal(n->nvmlDeviceGetMigDeviceHandleByIndex(g2, 0, &d), NVML_ERROR_NOT_FOUND);
        assert_int_equal(n->nvmlDeviceGetMigDeviceHandleByIndex(g3, 0, &d), NVML_ERROR_NOT_FOUND);
        assert_int_equal(n->nvmlDeviceGetDeviceHandleFromMigDeviceHandle(m, &d), NVML_SUCCESS);
        assert_ptr_equal(d, g0);
        assert_int_equal(n->nvmlDeviceGetDeviceHandleFromMigDeviceHandle(g0, &d),
                         NVML_ERROR_INVALID_ARGUMENT);
        assert_int_equal(n->nvmlDeviceGetDeviceHandleFromMigDeviceHandle(m, NULL),
                         NVML_ERROR_INVALID_ARGUMENT);
        assert_int_equal(n->nvmlDeviceGetGpuInstanceId(m, &u), NVML_SUCCESS);
        assert_int_equal(u, 2);
        assert_int_equal(n->nvmlDeviceGetComputeInstanceId(m, &u), NVML_SUCCESS);
        assert_int_equal(u, 0);
        assert_int_equal(n->nvmlDeviceGetGpuInstanceId(g0, &u), NVML_ERROR_NOT_SUPPORTED);
        assert_int_equal(n->nvmlDeviceGetComputeInstanceId(g0, &u), NVML_ERROR_NOT_SUPPORTED);
        assert_int_equal(n->nvmlDeviceGetGpuInstanceId(m, NULL), NVML_ERROR_INVALID_ARGUMENT);
        assert_int_equal(n->nvmlDeviceGetComputeInstanceId(m, NULL), NVML_ERROR_INVALID_ARGUMENT);
        nvmlDeviceAttributes_t a;
        assert_int_equal(n->nvmlDeviceGetAttributes(m, &a), NVML_SUCCESS);
        nvmlDeviceAttributes_t want_a = { 42, 3, 2, 0, 0, 0, 3, 3, 19968 };
        assert_memory_equal(&a, &want_a, sizeof(a));
        assert_int_equal(n->nvmlDeviceGetAttributes(g0, &a), NVML_ERROR_NOT_SUPPORTED);
        /* a whole GPU with MIG off: its SMs and memory */
        assert_int_equal(n->nvmlDeviceGetAttributes(g3, &a), NVML_SUCCESS);
        nvmlDeviceAttributes_t want_g3 = { 108, 0, 0, 0, 0, 0, 0, 0, 40960 };
        assert_memory_equal(&a, &want_g3, sizeof(a));
        nvmlBrandType_t brand = 99;
        assert_int_equal(n->nvmlDeviceGetBrand(g3, &brand), NVML_SUCCESS);
        assert_int_equal(brand, NVML_BRAND_NVIDIA);
        assert_int_equal(n->nvmlDeviceGetBrand(m, &brand), NVML_SUCCESS);
        assert_int_equal(brand, NVML_BRAND_NVIDIA);
        assert_int_equal(n->nvmlDeviceGetBrand(g3, NULL), NVML_ERROR_INVALID_ARGUMENT);
        assert_int_equal(n->nvmlDeviceGetAttributes(m, NULL), NVML_ERROR_INVALID_ARGUMENT);

        nvmlGpuInstanceProfileInfo_t pi;
        assert_int_equal(n->nvmlDeviceGetGpuInstanceProfileInfo(g0, 0x9, &pi), NVML_SUCCESS);
        nvmlGpuInstanceProfileInfo_t want_pi = { 15, 0, 1, 4, 14, 1, 1, 0, 0, 0, 9856 };
        assert_memory_equal(&pi, &want_pi, sizeof(pi));
        assert_int_equal(n->nvmlDeviceGetGpuInstanceProfileInfo(g3, 0x7, &pi), NVML_SUCCESS);
        assert_int_equal(pi.id, 20);
        assert_int_equal(n->nvmlDeviceGetGpuInstanceProfileInfo(g0, 0x5, &pi),
                         NVML_ERROR_NOT_SUPPORTED);
        assert_int_equal(n->nvmlDeviceGetGpuInstanceProfileInfo(g0, 0x11, &pi),
                         NVML_ERROR_NOT_SUPPORTED);
        assert_int_equal(n->nvmlDeviceGetGpuInstanceProfileInfo(g0, 0x12, &pi),
                         NVML_ERROR_INVALID_ARGUMENT);
        assert_int_equal(n->nvmlDeviceGetGpuInstanceProfileInfo(g0, 0, NULL),
                         NVML_ERROR_INVALID_ARGUMENT);
        assert_int_equal(n->nvmlDeviceGetGpuInstanceProfileInfo(m, 0, &pi),
                         NVML_ERROR_NOT_SUPPORTED);

        nvmlGpuInstance_t gi = NULL;
        assert_int_equal(n->nvmlDeviceGetGpuInstanceById(g0, 2, &gi), NVML_SUCCESS);
        assert_int_equal(n->nvmlDeviceGetGpuInstanceById(g0, 1, &gi), NVML_ERROR_NOT_FOUND);
        assert_int_equal(n->nvmlDeviceGetGpuInstanceById(g3, 2, &gi), NVML_ERROR_NOT_SUPPORTED);
        assert_int_equal(n->nvmlDeviceGetGpuInstanceById(g0, 2, NULL),
                         NVML_ERROR_INVALID_ARGUMENT);
        assert_int_equal(n->nvmlDeviceGetGpuInstanceById(g0, 2, &gi), NVML_SUCCESS);
        nvmlGpuInstanceInfo_t gii;
        assert_int_equal(n->nvmlGpuInstanceGetInfo(gi, &gii), NVML_SUCCESS);
        assert_ptr_equal(gii.device, g0);
        assert_int_equal(gii.id, 2);
        assert_int_equal(gii.profileId, 9);
        assert_int_equal(gii.placement.start, 4);
        assert_int_equal(gii.placement.size, 4);
        assert_int_equal(n->nvmlGpuInstanceGetInfo(gi, NULL), NVML_ERROR_INVALID_ARGUMENT);
        assert_int_equal(n->nvmlGpuInstanceGetInfo((nvmlGpuInstance_t)&gii, &gii),
                         NVML_ERROR_INVALID_ARGUMENT);

        static const struct {
                unsigned j;
                nvmlReturn_t r;
                nvmlComputeInstanceProfileInfo_t info;
        } cis[] = {
                { 0, NVML_SUCCESS, { 0, 1, 3, 14, 3, 2, 0, 0, 0 } },
                { 1, NVML_SUCCESS, { 1, 2, 1, 28, 3, 2, 0, 0, 0 } },
                { 2, NVML_SUCCESS, { 2, 3, 1, 42, 3, 2, 0, 0, 0 } },
                { 3, NVML_ERROR_NOT_SUPPORTED, { 0 } },
                { 4, NVML_ERROR_NOT_SUPPORTED, { 0 } },
                { 7, NVML_ERROR_NOT_SUPPORTED, { 0 } },
                { 8, NVML_ERROR_NOT_SUPPORTED, { 0 } },
                { 9, NVML_ERROR_INVALID_ARGUMENT, { 0 } },
        };
        for (size_t k = 0; k < sizeof(cis) / sizeof(cis[0]); k++) {
                nvmlComputeInstanceProfileInfo_t ci;
                assert_int_equal(n->nvmlGpuInstanceGetComputeInstanceProfileInfo(gi, cis[k].j, 0,
                                                                                  &ci),
                                 cis[k].r);
                if (cis[k].r == NVML_SUCCESS)
                        assert_memory_equal(&ci, &cis[k].info, sizeof(ci));
        }
        nvmlComputeInstanceProfileInfo_t cpi;
        assert_int_equal(n->nvmlGpuInstanceGetComputeInstanceProfileInfo(gi, 0, 1, &cpi),
                         NVML_ERROR_INVALID_ARGUMENT);
        assert_int_equal(n->nvmlGpuInstanceGetComputeInstanceProfileInfo(gi, 0, 0, NULL),
                         NVML_ERROR_INVALID_ARGUMENT);
        assert_int_equal(n->nvmlGpuInstanceGetComputeInstanceProfileInfo(NULL, 0, 0, &cpi),
                         NVML_ERROR_INVALID_ARGUMENT);
        nvmlComputeInstance_t ci = NULL;
        assert_int_equal(n->nvmlGpuInstanceGetComputeInstanceById(gi, 1, &ci),
                         NVML_ERROR_NOT_FOUND);
        assert_int_equal(n->nvmlGpuInstanceGetComputeInstanceById(gi, 0, NULL),
                         NVML_ERROR_INVALID_ARGUMENT);
        assert_int_equal(n->nvmlGpuInstanceGetComputeInstanceById(gi, 0, &ci), NVML_SUCCESS);
        nvmlComputeInstanceInfo_t cii;
        assert_int_equal(n->nvmlComputeInstanceGetInfo(ci, &cii), NVML_SUCCESS);
        assert_ptr_equal(cii.device, g0);
        assert_ptr_equal(cii.gpuInstance, gi);
        assert_int_equal(cii.id, 0);
        assert_int_equal(cii.profileId, 2);
        assert_int_equal(cii.placement.start, 0);
        assert_int_equal(cii.placement.size, 3);
        assert_int_equal(n->nvmlComputeInstanceGetInfo(ci, NULL), NVML_ERROR_INVALID_ARGUMENT);
        assert_int_equal(n->nvmlComputeInstanceGetInfo((nvmlComputeInstance_t)&cii, &cii),
                         NVML_ERROR_INVALID_ARGUMENT);

        /* a GPU that is not MIG capable */
        setenv("KDEV_MOCK_NVML_TOPOLOGY", TOPO("dgx-station-a100-display.yaml"), 1);
        assert_int_equal(n->nvmlShutdown(), NVML_SUCCESS);
        assert_int_equal(n->nvmlInit(), NVML_SUCCESS);
        nvmlDevice_t disp = gpu(f, 2);
        char name[96];
        assert_int_equal(n->nvmlDeviceGetName(disp, name, sizeof(name)), NVML_SUCCESS);
        assert_string_equal(name, "DGX Display");
        assert_int_equal(n->nvmlDeviceGetMigMode(disp, &cur, &pend), NVML_ERROR_NOT_SUPPORTED);
        assert_int_equal(n->nvmlDeviceGetMaxMigDeviceCount(disp, &u), NVML_ERROR_NOT_SUPPORTED);
        assert_int_equal(n->nvmlDeviceGetGpuInstanceProfileInfo(disp, 0, &pi),
                         NVML_ERROR_NOT_SUPPORTED);
        nvmlEnableState_t st;
        assert_int_equal(n->nvmlDeviceGetNvLinkState(disp, 0, &st), NVML_ERROR_NOT_SUPPORTED);
}

static void test_topology_and_links(void **state)
{
        struct fx *f = *state;
        const struct kdev_nvml_api *n = f->n;
        assert_int_equal(n->nvmlInit(), NVML_SUCCESS);
        nvmlDevice_t g0 = gpu(f, 0), g1 = gpu(f, 1), g2 = gpu(f, 2);
        nvmlDevice_t m = by_uuid(f, M00);
        nvmlGpuTopologyLevel_t lv = 99;
        assert_int_equal(n->nvmlDeviceGetTopologyCommonAncestor(g0, g1, &lv), NVML_SUCCESS);
        assert_int_equal(lv, NVML_TOPOLOGY_MULTIPLE);
        assert_int_equal(n->nvmlDeviceGetTopologyCommonAncestor(g1, g0, &lv), NVML_SUCCESS);
        assert_int_equal(lv, NVML_TOPOLOGY_MULTIPLE);
        assert_int_equal(n->nvmlDeviceGetTopologyCommonAncestor(g0, g2, &lv), NVML_SUCCESS);
        assert_int_equal(lv, NVML_TOPOLOGY_SYSTEM);
        assert_int_equal(n->nvmlDeviceGetTopologyCommonAncestor(g0, g0, &lv),
                         NVML_ERROR_INVALID_ARGUMENT);
        assert_int_equal(n->nvmlDeviceGetTopologyCommonAncestor(g0, g1, NULL),
                         NVML_ERROR_INVALID_ARGUMENT);
        assert_int_equal(n->nvmlDeviceGetTopologyCommonAncestor(NULL, g1, &lv),
                         NVML_ERROR_INVALID_ARGUMENT);
        assert_int_equal(n->nvmlDeviceGetTopologyCommonAncestor(m, g1, &lv),
                         NVML_ERROR_NOT_SUPPORTED);
        nvmlEnableState_t st = 9;
        nvmlPciInfo_t pci;
        assert_int_equal(n->nvmlDeviceGetNvLinkState(g0, 0, &st), NVML_SUCCESS);
        assert_int_equal(st, NVML_FEATURE_DISABLED);
        assert_int_equal(n->nvmlDeviceGetNvLinkRemotePciInfo(g0, 0, &pci),
                         NVML_ERROR_NOT_SUPPORTED);
        assert_int_equal(n->nvmlDeviceGetNvLinkState(g0, 12, &st), NVML_ERROR_NOT_SUPPORTED);
        assert_int_equal(n->nvmlDeviceGetNvLinkState(g0, 36, &st), NVML_ERROR_INVALID_ARGUMENT);
        assert_int_equal(n->nvmlDeviceGetNvLinkState(g0, 0, NULL), NVML_ERROR_INVALID_ARGUMENT);
        assert_int_equal(n->nvmlDeviceGetNvLinkState(m, 0, &st), NVML_ERROR_NOT_SUPPORTED);
        assert_int_equal(n->nvmlDeviceGetNvLinkRemotePciInfo(g0, 36, &pci),
                         NVML_ERROR_INVALID_ARGUMENT);
        assert_int_equal(n->nvmlDeviceGetNvLinkRemotePciInfo(g0, 0, NULL),
                         NVML_ERROR_INVALID_ARGUMENT);
        /* connected links: H200 NVL pairs */
        assert_int_equal(n->nvmlShutdown(), NVML_SUCCESS);
        setenv("KDEV_MOCK_NVML_TOPOLOGY", TOPO("h200-nvl-4x-pcie-2numa.yaml"), 1);
        assert_int_equal(n->nvmlInit(), NVML_SUCCESS);
        g0 = gpu(f, 0);
        assert_int_equal(n->nvmlDeviceGetNvLinkState(g0, 17, &st), NVML_SUCCESS);
        assert_int_equal(st, NVML_FEATURE_ENABLED);
        assert_int_equal(n->nvmlDeviceGetNvLinkRemotePciInfo(g0, 17, &pci), NVML_SUCCESS);
        assert_string_equal(pci.busId, "00000000:3B:00.0");
        assert_int_equal(pci.pciDeviceId, 0x233B10DE);
        assert_int_equal(n->nvmlDeviceGetNvLinkState(g0, 18, &st), NVML_ERROR_NOT_SUPPORTED);
}

static void test_injected_conditions(void **state)
{
        struct fx *f = *state;
        const struct kdev_nvml_api *n = f->n;
        assert_int_equal(n->nvmlInit(), NVML_SUCCESS);
        nvmlDevice_t g1 = gpu(f, 1), m = by_uuid(f, M10), d = NULL;
        char buf[96];
        nvmlMemory_t mem;
        /* lost: everything on the GPU and its MIG devices, handles still found */
        assert_int_equal(f->m.set_lost(G1, 1), NVML_SUCCESS);
        assert_int_equal(n->nvmlDeviceGetUUID(g1, buf, 96), NVML_ERROR_GPU_IS_LOST);
        assert_int_equal(n->nvmlDeviceGetMemoryInfo(m, &mem), NVML_ERROR_GPU_IS_LOST);
        assert_int_equal(n->nvmlDeviceGetHandleByUUID(G1, &d), NVML_SUCCESS);
        assert_int_equal(n->nvmlDeviceGetHandleByIndex(1, &d), NVML_SUCCESS);
        assert_int_equal(n->nvmlDeviceGetUUID(gpu(f, 0), buf, 96), NVML_SUCCESS);
        assert_int_equal(f->m.set_lost(G1, 0), NVML_SUCCESS);
        assert_int_equal(n->nvmlDeviceGetUUID(g1, buf, 96), NVML_SUCCESS);
        /* reset required: identity queries work */
        assert_int_equal(f->m.set_reset(G1, 1), NVML_SUCCESS);
        assert_int_equal(n->nvmlDeviceGetUUID(g1, buf, 96), NVML_SUCCESS);
        assert_int_equal(n->nvmlDeviceGetMemoryInfo(g1, &mem), NVML_ERROR_RESET_REQUIRED);
        assert_int_equal(n->nvmlDeviceGetMemoryInfo(m, &mem), NVML_ERROR_RESET_REQUIRED);
        assert_int_equal(f->m.set_reset(G1, 0), NVML_SUCCESS);
        assert_int_equal(n->nvmlDeviceGetMemoryInfo(g1, &mem), NVML_SUCCESS);
        /* per-function error */
        assert_int_equal(f->m.set_error(G1, "nvmlDeviceGetMemoryInfo", NVML_ERROR_NO_PERMISSION),
                         NVML_SUCCESS);
        assert_int_equal(n->nvmlDeviceGetMemoryInfo(g1, &mem), NVML_ERROR_NO_PERMISSION);
        assert_int_equal(n->nvmlDeviceGetMemoryInfo(m, &mem), NVML_SUCCESS);
        assert_int_equal(f->m.set_error(G1, "nvmlDeviceGetMemoryInfo", NVML_SUCCESS), NVML_SUCCESS);
        assert_int_equal(n->nvmlDeviceGetMemoryInfo(g1, &mem), NVML_SUCCESS);
        assert_int_equal(f->m.set_error("GPU-nope", "nvmlDeviceGetUUID", NVML_ERROR_UNKNOWN),
                         NVML_ERROR_NOT_FOUND);
        assert_int_equal(f->m.set_error(G1, NULL, NVML_ERROR_UNKNOWN), NVML_ERROR_INVALID_ARGUMENT);
        /* sysfs writer */
        char root[] = "/tmp/kdev-nvml-mock-sysfs-XXXXXX";
        assert_non_null(mkdtemp(root));
        assert_int_equal(f->m.write_sysfs(root), NVML_SUCCESS);
        char path[256], text[16] = "";
        snprintf(path, sizeof(path), "%s/bus/pci/devices/0000:4e:00.0/numa_node", root);
        FILE *fp = fopen(path, "r");
        assert_non_null(fp);
        assert_non_null(fgets(text, sizeof(text), fp));
        fclose(fp);
        assert_string_equal(text, "1\n");
        assert_int_equal(f->m.write_sysfs(NULL), NVML_ERROR_INVALID_ARGUMENT);
        static const char *const ids[] = { "0000:07:00.0", "0000:0f:00.0", "0000:47:00.0",
                                           "0000:4e:00.0" };
        for (size_t i = 0; i < 4; i++) {
                snprintf(path, sizeof(path), "%s/bus/pci/devices/%s/numa_node", root, ids[i]);
                assert_int_equal(unlink(path), 0);
                snprintf(path, sizeof(path), "%s/bus/pci/devices/%s", root, ids[i]);
                assert_int_equal(rmdir(path), 0);
        }
        static const char *const dirs[] = { "/bus/pci/devices", "/bus/pci", "/bus", "" };
        for (size_t i = 0; i < 4; i++) {
                snprintf(path, sizeof(path), "%s%s", root, dirs[i]);
                assert_int_equal(rmdir(path), 0);
        }
}

static double now_ms(void)
{
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

struct waiter {
        const struct kdev_nvml_api *n;
        nvmlEventSet_t set;
        unsigned timeout_ms;
        nvmlReturn_t r;
        nvmlEventData_t data;
        double ms;
};

static void *wait_thread(void *arg)
{
        struct waiter *w = arg;
        double t0 = now_ms();
        w->r = w->n->nvmlEventSetWait(w->set, &w->data, w->timeout_ms);
        w->ms = now_ms() - t0;
        return NULL;
}

static void test_events(void **state)
{
        struct fx *f = *state;
        const struct kdev_nvml_api *n = f->n;
        assert_int_equal(n->nvmlInit(), NVML_SUCCESS);
        nvmlDevice_t g0 = gpu(f, 0), g1 = gpu(f, 1), m = by_uuid(f, M00);
        nvmlEventSet_t set = NULL;
        assert_int_equal(n->nvmlEventSetCreate(&set), NVML_SUCCESS);
        assert_int_equal(n->nvmlEventSetCreate(NULL), NVML_ERROR_INVALID_ARGUMENT);
        unsigned long long types = 0;
        assert_int_equal(n->nvmlDeviceGetSupportedEventTypes(g0, &types), NVML_SUCCESS);
        assert_int_equal(types, 0x1F);
        assert_int_equal(n->nvmlDeviceGetSupportedEventTypes(g0, NULL),
                         NVML_ERROR_INVALID_ARGUMENT);
        assert_int_equal(n->nvmlDeviceGetSupportedEventTypes(m, &types),
                         NVML_ERROR_NOT_SUPPORTED);
        assert_int_equal(n->nvmlDeviceRegisterEvents(g0, 0xB, set), NVML_SUCCESS);
        assert_int_equal(n->nvmlDeviceRegisterEvents(g0, 0x4000, set), NVML_ERROR_NOT_SUPPORTED);
        assert_int_equal(n->nvmlDeviceRegisterEvents(m, 0x8, set), NVML_ERROR_NOT_SUPPORTED);
        assert_int_equal(n->nvmlDeviceRegisterEvents(g0, 0x8, (nvmlEventSet_t)&types),
                         NVML_ERROR_INVALID_ARGUMENT);
        nvmlEventData_t data;
        assert_int_equal(n->nvmlEventSetWait(set, NULL, 0), NVML_ERROR_INVALID_ARGUMENT);
        assert_int_equal(n->nvmlEventSetWait((nvmlEventSet_t)&types, &data, 0),
                         NVML_ERROR_INVALID_ARGUMENT);
        /* timeout: at least the time asked for */
        double t0 = now_ms();
        assert_int_equal(n->nvmlEventSetWait(set, &data, 100), NVML_ERROR_TIMEOUT);
        assert_true(now_ms() - t0 >= 99.0);
        assert_int_equal(n->nvmlEventSetWait(set, &data, 0), NVML_ERROR_TIMEOUT);

        /* XID delivered to a thread blocked in the wait */
        struct waiter w = { .n = n, .set = set, .timeout_ms = 60000 };
        pthread_t th;
        assert_int_equal(pthread_create(&th, NULL, wait_thread, &w), 0);
        assert_int_equal(f->m.xid(G0, 79, KDEV_NVML_NO_INSTANCE, KDEV_NVML_NO_INSTANCE),
                         NVML_SUCCESS);
        pthread_join(th, NULL);
        assert_int_equal(w.r, NVML_SUCCESS);
        assert_true(w.ms < 30000.0);
        assert_ptr_equal(w.data.device, g0);
        assert_int_equal(w.data.eventType, nvmlEventTypeXidCriticalError);
        assert_int_equal(w.data.eventData, 79);
        assert_int_equal(w.data.gpuInstanceId, KDEV_NVML_NO_INSTANCE);
        assert_int_equal(w.data.computeInstanceId, KDEV_NVML_NO_INSTANCE);
        char uuid[96];
        assert_int_equal(n->nvmlDeviceGetUUID(w.data.device, uuid, sizeof(uuid)), NVML_SUCCESS);
        assert_string_equal(uuid, G0);

        /* a MIG UUID: the parent device with the MIG device's GI/CI */
        assert_int_equal(f->m.xid(M00, 48, KDEV_NVML_NO_INSTANCE, KDEV_NVML_NO_INSTANCE),
                         NVML_SUCCESS);
        /* explicit GI/CI, then a type not registered, then an unregistered GPU */
        assert_int_equal(f->m.xid(G0, 94, 9, 0), NVML_SUCCESS);
        assert_int_equal(f->m.event(G0, nvmlEventTypePState, 1, KDEV_NVML_NO_INSTANCE,
                                  KDEV_NVML_NO_INSTANCE),
                         NVML_SUCCESS);
        assert_int_equal(f->m.xid(G1, 31, KDEV_NVML_NO_INSTANCE, KDEV_NVML_NO_INSTANCE),
                         NVML_SUCCESS);
        assert_int_equal(f->m.event(G0, nvmlEventTypeDoubleBitEccError, 0, KDEV_NVML_NO_INSTANCE,
                                  KDEV_NVML_NO_INSTANCE),
                         NVML_SUCCESS);
        assert_int_equal(f->m.xid("GPU-nope", 1, 0, 0), NVML_ERROR_NOT_FOUND);
        assert_int_equal(n->nvmlEventSetWait(set, &data, 1000), NVML_SUCCESS);
        assert_ptr_equal(data.device, g0);
        assert_int_equal(data.eventData, 48);
        assert_int_equal(data.gpuInstanceId, 2);
        assert_int_equal(data.computeInstanceId, 0);
        assert_int_equal(n->nvmlEventSetWait(set, &data, 1000), NVML_SUCCESS);
        assert_int_equal(data.eventData, 94);
        assert_int_equal(data.gpuInstanceId, 9);
        assert_int_equal(n->nvmlEventSetWait(set, &data, 1000), NVML_SUCCESS);
        assert_int_equal(data.eventType, nvmlEventTypeDoubleBitEccError);
        assert_int_equal(n->nvmlEventSetWait(set, &data, 0), NVML_ERROR_TIMEOUT);

        /* a second set sees only its own registrations */
        nvmlEventSet_t set2 = NULL;
        assert_int_equal(n->nvmlEventSetCreate(&set2), NVML_SUCCESS);
        assert_int_equal(n->nvmlDeviceRegisterEvents(g1, 0x8, set2), NVML_SUCCESS);
        assert_int_equal(f->m.xid(G1, 13, KDEV_NVML_NO_INSTANCE, KDEV_NVML_NO_INSTANCE),
                         NVML_SUCCESS);
        assert_int_equal(n->nvmlEventSetWait(set, &data, 0), NVML_ERROR_TIMEOUT);
        assert_int_equal(n->nvmlEventSetWait(set2, &data, 1000), NVML_SUCCESS);
        assert_ptr_equal(data.device, g1);
        assert_int_equal(data.eventData, 13);

        /* a lost GPU makes the next wait of each set registered on it fail once */
        w = (struct waiter){ .n = n, .set = set, .timeout_ms = 60000 };
        assert_int_equal(pthread_create(&th, NULL, wait_thread, &w), 0);
        assert_int_equal(f->m.set_lost(G0, 1), NVML_SUCCESS);
        pthread_join(th, NULL);
        assert_int_equal(w.r, NVML_ERROR_GPU_IS_LOST);
        assert_int_equal(n->nvmlEventSetWait(set, &data, 0), NVML_ERROR_TIMEOUT);
        assert_int_equal(n->nvmlEventSetWait(set2, &data, 0), NVML_ERROR_TIMEOUT);
        assert_int_equal(f->m.set_lost(G0, 0), NVML_SUCCESS);

        assert_int_equal(n->nvmlEventSetFree(set2), NVML_SUCCESS);
        assert_int_equal(n->nvmlEventSetFree(set), NVML_SUCCESS);
        assert_int_equal(n->nvmlEventSetFree(set), NVML_ERROR_INVALID_ARGUMENT);
        assert_int_equal(n->nvmlShutdown(), NVML_SUCCESS);
        assert_int_equal(n->nvmlEventSetCreate(&set), NVML_ERROR_UNINITIALIZED);
}

static void append(const char *path, const char *line)
{
        FILE *fp = fopen(path, "a");
        assert_non_null(fp);
        fputs(line, fp);
        fclose(fp);
}

static void test_control_file(void **state)
{
        struct fx *f = *state;
        const struct kdev_nvml_api *n = f->n;
        char path[] = "/tmp/kdev-nvml-control-XXXXXX";
        int fd = mkstemp(path);
        assert_true(fd >= 0);
        close(fd);
        setenv("KDEV_MOCK_NVML_CONTROL", path, 1);
        f->m.reset();
        /* init error from the file, then cleared */
        append(path, "init-error DRIVER_NOT_LOADED\n");
        assert_int_equal(n->nvmlInit(), NVML_ERROR_DRIVER_NOT_LOADED);
        append(path, "# comment\n\ninit-error 0\n");
        assert_int_equal(n->nvmlInit(), NVML_SUCCESS);
        nvmlDevice_t g0 = gpu(f, 0);
        nvmlEventSet_t set = NULL;
        assert_int_equal(n->nvmlEventSetCreate(&set), NVML_SUCCESS);
        assert_int_equal(n->nvmlDeviceRegisterEvents(g0, 0xB, set), NVML_SUCCESS);
        /* an XID written while a thread waits reaches it */
        struct waiter w = { .n = n, .set = set, .timeout_ms = 60000 };
        pthread_t th;
        assert_int_equal(pthread_create(&th, NULL, wait_thread, &w), 0);
        append(path, "xid " G0 " 63\n");
        pthread_join(th, NULL);
        assert_int_equal(w.r, NVML_SUCCESS);
        assert_int_equal(w.data.eventData, 63);
        assert_int_equal(w.data.gpuInstanceId, KDEV_NVML_NO_INSTANCE);
        /* with GI/CI; a partial line waits for its newline */
        append(path, "xid " G0 " 74 2 0\nevent " G0 " 0x2 0");
        assert_int_equal(n->nvmlEventSetWait(set, &w.data, 1000), NVML_SUCCESS);
        assert_int_equal(w.data.eventData, 74);
        assert_int_equal(w.data.gpuInstanceId, 2);
        assert_int_equal(w.data.computeInstanceId, 0);
        assert_int_equal(n->nvmlEventSetWait(set, &w.data, 0), NVML_ERROR_TIMEOUT);
        append(path, "\n");
        assert_int_equal(n->nvmlEventSetWait(set, &w.data, 1000), NVML_SUCCESS);
        assert_int_equal(w.data.eventType, nvmlEventTypeDoubleBitEccError);
        /* lost / reset-required / pending-remap / error */
        char buf[96];
        nvmlMemory_t mem;
        unsigned c, u, p, fl;
        append(path, "lost " G0 "\n");
        assert_int_equal(n->nvmlDeviceGetUUID(g0, buf, 96), NVML_ERROR_GPU_IS_LOST);
        append(path, "lost " G0 " 0\nreset-required " G0 "\n");
        assert_int_equal(n->nvmlDeviceGetUUID(g0, buf, 96), NVML_SUCCESS);
        assert_int_equal(n->nvmlDeviceGetMemoryInfo(g0, &mem), NVML_ERROR_RESET_REQUIRED);
        append(path, "reset-required " G0 " 0\npending-remap " G0 "\n");
        assert_int_equal(n->nvmlDeviceGetRemappedRows(g0, &c, &u, &p, &fl), NVML_SUCCESS);
        assert_int_equal(p, 1);
        append(path, "error " G0 " nvmlDeviceGetMemoryInfo NVML_ERROR_NO_PERMISSION\n");
        assert_int_equal(n->nvmlDeviceGetMemoryInfo(g0, &mem), NVML_ERROR_NO_PERMISSION);
        append(path, "error " G0 " nvmlDeviceGetMemoryInfo SUCCESS\n");
        assert_int_equal(n->nvmlDeviceGetMemoryInfo(g0, &mem), NVML_SUCCESS);
        /* a rewritten (shorter) file is read from its start */
        FILE *fp = fopen(path, "w");
        fputs("lost " G0 "\n", fp);
        fclose(fp);
        assert_int_equal(n->nvmlDeviceGetUUID(g0, buf, 96), NVML_ERROR_GPU_IS_LOST);
        assert_int_equal(n->nvmlEventSetWait(set, &w.data, 0), NVML_ERROR_GPU_IS_LOST);
        append(path, "lost " G0 " 0\n");
        assert_int_equal(n->nvmlEventSetFree(set), NVML_SUCCESS);
        unlink(path);
}

/* `xid-storm`: exactly |count| events, paced by |rate|, none dropped when
 * the sets' queues (256) are full; bad lines start nothing. */
static void test_control_xid_storm(void **state)
{
        struct fx *f = *state;
        const struct kdev_nvml_api *n = f->n;
        char path[] = "/tmp/kdev-nvml-control-XXXXXX";
        int fd = mkstemp(path);
        assert_true(fd >= 0);
        close(fd);
        setenv("KDEV_MOCK_NVML_CONTROL", path, 1);
        f->m.reset();
        assert_int_equal(n->nvmlInit(), NVML_SUCCESS);
        nvmlDevice_t g0 = gpu(f, 0);
        nvmlEventSet_t set = NULL;
        assert_int_equal(n->nvmlEventSetCreate(&set), NVML_SUCCESS);
        assert_int_equal(n->nvmlDeviceRegisterEvents(g0, 0x8, set), NVML_SUCCESS);
        nvmlEventData_t data;
        /* bad lines: missing rate, count 0, rate 0, unknown GPU, a sign, junk */
        append(path, "xid-storm " G0 " 79 10\n"
                     "xid-storm " G0 " 79 0 100\n"
                     "xid-storm " G0 " 79 10 0\n"
                     "xid-storm GPU-nope 79 10 100\n"
                     "xid-storm " G0 " 79 -1 100\n"
                     "xid-storm " G0 " 79 10 100 2\n"
                     "xid-storm " G0 " 79 10x 100\n");
        assert_int_equal(n->nvmlEventSetWait(set, &data, 100), NVML_ERROR_TIMEOUT);
        /* 1000 at once (rate far above): four times the queue, every one
         * delivered, in order of injection, then nothing more */
        append(path, "xid-storm " G0 " 43 1000 1000000000\n");
        unsigned got = 0;
        while (n->nvmlEventSetWait(set, &data, 1000) == NVML_SUCCESS) {
                assert_ptr_equal(data.device, g0);
                assert_int_equal(data.eventType, nvmlEventTypeXidCriticalError);
                assert_int_equal(data.eventData, 43);
                assert_int_equal(data.gpuInstanceId, KDEV_NVML_NO_INSTANCE);
                got++;
        }
        assert_int_equal(got, 1000);
        /* paced: at 2 per second the first is due at once, the second 0.5 s
         * later, the third 1 s later; GI/CI given */
        append(path, "xid-storm " G0 " 94 3 2 2 0\n");
        assert_int_equal(n->nvmlEventSetWait(set, &data, 100), NVML_SUCCESS);
        assert_int_equal(data.eventData, 94);
        assert_int_equal(data.gpuInstanceId, 2);
        assert_int_equal(data.computeInstanceId, 0);
        assert_int_equal(n->nvmlEventSetWait(set, &data, 0), NVML_ERROR_TIMEOUT);
        assert_int_equal(n->nvmlEventSetWait(set, &data, 5000), NVML_SUCCESS);
        assert_int_equal(n->nvmlEventSetWait(set, &data, 0), NVML_ERROR_TIMEOUT);
        assert_int_equal(n->nvmlEventSetWait(set, &data, 5000), NVML_SUCCESS);
        assert_int_equal(data.eventData, 94);
        assert_int_equal(n->nvmlEventSetWait(set, &data, 700), NVML_ERROR_TIMEOUT);
        /* two storms at once: each delivers its own count */
        append(path, "xid-storm " G0 " 48 300 1000000000\nxid-storm " G0 " 63 200 1000000000\n");
        unsigned n48 = 0, n63 = 0;
        while (n->nvmlEventSetWait(set, &data, 1000) == NVML_SUCCESS) {
                n48 += data.eventData == 48;
                n63 += data.eventData == 63;
        }
        assert_int_equal(n48, 300);
        assert_int_equal(n63, 200);
        assert_int_equal(n->nvmlEventSetFree(set), NVML_SUCCESS);
        unlink(path);
}

/* --- dynamic MIG (mig-h100-80gb-dynamic.yaml: GPU 0 MIG on and empty, GPU 1
 * MIG off, GPU 2 not MIG capable) ------------------------------------------ */

#define DYN_G0 "GPU-3e5f7a9b-1c2d-4e3f-8a5b-6c7d8e9f0a1b"

static void dyn_open(struct fx *f, const char *topology)
{
        setenv("KDEV_MOCK_NVML_TOPOLOGY", topology, 1);
        f->m.reset();
        assert_int_equal(f->n->nvmlInit(), NVML_SUCCESS);
}

static unsigned gi_left(struct fx *f, nvmlDevice_t d, unsigned profile_id)
{
        unsigned c = 99;
        assert_int_equal(f->n->nvmlDeviceGetGpuInstanceRemainingCapacity(d, profile_id, &c),
                         NVML_SUCCESS);
        return c;
}

static nvmlGpuInstance_t gi_at(struct fx *f, nvmlDevice_t d, unsigned profile_id,
                               unsigned start, unsigned size)
{
        nvmlGpuInstancePlacement_t p = { .start = start, .size = size };
        nvmlGpuInstance_t gi = NULL;
        assert_int_equal(f->n->nvmlDeviceCreateGpuInstanceWithPlacement(d, profile_id, &p, &gi),
                         NVML_SUCCESS);
        return gi;
}

static nvmlGpuInstanceInfo_t gi_info(struct fx *f, nvmlGpuInstance_t gi)
{
        nvmlGpuInstanceInfo_t in;
        memset(&in, 0xff, sizeof(in));
        assert_int_equal(f->n->nvmlGpuInstanceGetInfo(gi, &in), NVML_SUCCESS);
        return in;
}

/* Every H100 profile's possible placements (memory slices), the count
 * query and its size rules; MIG off still answers (nvml.h _v2). */
static void test_mig_possible_placements(void **state)
{
        struct fx *f = *state;
        const struct kdev_nvml_api *n = f->n;
        dyn_open(f, TOPO("mig-h100-80gb-dynamic.yaml"));
        nvmlDevice_t g0 = gpu(f, 0), g1 = gpu(f, 1), g2 = gpu(f, 2);
        static const struct {
                unsigned id, size, n, starts[7];
        } want[] = {
                { 19, 1, 7, { 0, 1, 2, 3, 4, 5, 6 } },  /* 1g.10gb */
                { 20, 1, 7, { 0, 1, 2, 3, 4, 5, 6 } },  /* 1g.10gb+me */
                { 15, 2, 4, { 0, 2, 4, 6 } },           /* 1g.20gb */
                { 14, 2, 3, { 0, 2, 4 } },              /* 2g.20gb */
                { 9, 4, 2, { 0, 4 } },                  /* 3g.40gb */
                { 5, 4, 1, { 0 } },                     /* 4g.40gb */
                { 0, 8, 1, { 0 } },                     /* 7g.80gb */
        };
        for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++) {
                nvmlDevice_t devs[2] = { g0, g1 };
                for (size_t k = 0; k < 2; k++) {
                        unsigned c = 0;
                        assert_int_equal(n->nvmlDeviceGetGpuInstancePossiblePlacements(
                                                 devs[k], want[i].id, NULL, &c),
                                         NVML_SUCCESS);
                        assert_int_equal(c, want[i].n);
                        nvmlGpuInstancePlacement_t p[8];
                        memset(p, 0xff, sizeof(p));
                        c = 8;
                        assert_int_equal(n->nvmlDeviceGetGpuInstancePossiblePlacements(
                                                 devs[k], want[i].id, p, &c),
                                         NVML_SUCCESS);
                        assert_int_equal(c, want[i].n);
                        for (unsigned j = 0; j < want[i].n; j++) {
                                assert_int_equal(p[j].start, want[i].starts[j]);
                                assert_int_equal(p[j].size, want[i].size);
                        }
                        assert_int_equal(p[want[i].n].start, 0xffffffffu); /* no more written */
                }
        }
        /* a buffer smaller than the count: INSUFFICIENT_SIZE with the count */
        nvmlGpuInstancePlacement_t p[8];
        unsigned c = 6;
        assert_int_equal(n->nvmlDeviceGetGpuInstancePossiblePlacements(g0, 19, p, &c),
                         NVML_ERROR_INSUFFICIENT_SIZE);
        assert_int_equal(c, 7);
        c = 0;
        assert_int_equal(n->nvmlDeviceGetGpuInstancePossiblePlacements(g0, 0, p, &c),
                         NVML_ERROR_INSUFFICIENT_SIZE);
        assert_int_equal(c, 1);
        assert_int_equal(n->nvmlDeviceGetGpuInstancePossiblePlacements(g0, 19, p, NULL),
                         NVML_ERROR_INVALID_ARGUMENT);
        /* a profile id the GPU lacks, a GPU without MIG, a MIG handle */
        c = 8;
        assert_int_equal(n->nvmlDeviceGetGpuInstancePossiblePlacements(g0, 99, p, &c),
                         NVML_ERROR_NOT_SUPPORTED);
        assert_int_equal(n->nvmlDeviceGetGpuInstancePossiblePlacements(g2, 19, p, &c),
                         NVML_ERROR_NOT_SUPPORTED);
        assert_int_equal(n->nvmlDeviceGetGpuInstancePossiblePlacements(NULL, 19, p, &c),
                         NVML_ERROR_INVALID_ARGUMENT);
        /* the remaining capacity of an empty GPU: the instance counts */
        static const unsigned ids[] = { 19, 20, 15, 14, 9, 5, 0 };
        static const unsigned empty[] = { 7, 1, 4, 3, 2, 1, 1 };
        for (size_t i = 0; i < 7; i++)
                assert_int_equal(gi_left(f, g0, ids[i]), empty[i]);
}

/* Create with a placement, overlap, the MIG device that a compute instance
 * makes, destruction order (IN_USE), and the handle gone afterwards. */
static void test_mig_create_destroy(void **state)
{
        struct fx *f = *state;
        const struct kdev_nvml_api *n = f->n;
        dyn_open(f, TOPO("mig-h100-80gb-dynamic.yaml"));
        nvmlDevice_t g0 = gpu(f, 0), d = NULL;
        /* 3g.40gb at {4, 4}: GI 1 (the lowest id from 1) */
        nvmlGpuInstance_t gi = gi_at(f, g0, 9, 4, 4);
        nvmlGpuInstanceInfo_t in = gi_info(f, gi);
        assert_ptr_equal(in.device, g0);
        assert_int_equal(in.id, 1);
        assert_int_equal(in.profileId, 9);
        assert_int_equal(in.placement.start, 4);
        assert_int_equal(in.placement.size, 4);
        nvmlGpuInstance_t by_id = NULL;
        assert_int_equal(n->nvmlDeviceGetGpuInstanceById(g0, 1, &by_id), NVML_SUCCESS);
        assert_ptr_equal(by_id, gi);
        nvmlGpuInstance_t list[8] = { NULL };
        unsigned c = 0;
        assert_int_equal(n->nvmlDeviceGetGpuInstances(g0, 9, list, &c), NVML_SUCCESS);
        assert_int_equal(c, 1);
        assert_ptr_equal(list[0], gi);
        assert_int_equal(n->nvmlDeviceGetGpuInstances(g0, 19, list, &c), NVML_SUCCESS);
        assert_int_equal(c, 0);
        /* remaining capacity with slices 4..7 taken */
        assert_int_equal(gi_left(f, g0, 19), 4);
        assert_int_equal(gi_left(f, g0, 20), 1);
        assert_int_equal(gi_left(f, g0, 15), 2);
        assert_int_equal(gi_left(f, g0, 14), 2);
        assert_int_equal(gi_left(f, g0, 9), 1);
        assert_int_equal(gi_left(f, g0, 5), 1);
        assert_int_equal(gi_left(f, g0, 0), 0);
        /* overlap, and placements not in the profile's list */
        nvmlGpuInstancePlacement_t p = { .start = 4, .size = 2 };
        nvmlGpuInstance_t x = NULL;
        assert_int_equal(n->nvmlDeviceCreateGpuInstanceWithPlacement(g0, 14, &p, &x),
                         NVML_ERROR_INSUFFICIENT_RESOURCES);
        p = (nvmlGpuInstancePlacement_t){ .start = 1, .size = 2 };
        assert_int_equal(n->nvmlDeviceCreateGpuInstanceWithPlacement(g0, 14, &p, &x),
                         NVML_ERROR_INVALID_ARGUMENT);
        p = (nvmlGpuInstancePlacement_t){ .start = 0, .size = 4 };
        assert_int_equal(n->nvmlDeviceCreateGpuInstanceWithPlacement(g0, 14, &p, &x),
                         NVML_ERROR_INVALID_ARGUMENT);
        assert_int_equal(n->nvmlDeviceCreateGpuInstanceWithPlacement(g0, 14, NULL, &x),
                         NVML_ERROR_INVALID_ARGUMENT);
        assert_int_equal(n->nvmlDeviceCreateGpuInstance(g0, 0, &x),
                         NVML_ERROR_INSUFFICIENT_RESOURCES);
        assert_null(x);
        /* a GPU instance alone is no MIG device */
        assert_int_equal(n->nvmlDeviceGetMigDeviceHandleByIndex(g0, 0, &d), NVML_ERROR_NOT_FOUND);
        /* its compute instance: the full 3-slice profile, CI 0, MIG index 0 */
        assert_int_equal(n->nvmlGpuInstanceGetComputeInstanceRemainingCapacity(
                                 gi, NVML_COMPUTE_INSTANCE_PROFILE_3_SLICE, &c),
                         NVML_SUCCESS);
        assert_int_equal(c, 1);
        nvmlComputeInstance_t ci = NULL;
        assert_int_equal(n->nvmlGpuInstanceCreateComputeInstance(
                                 gi, NVML_COMPUTE_INSTANCE_PROFILE_3_SLICE, &ci),
                         NVML_SUCCESS);
        nvmlComputeInstanceInfo_t cin;
        assert_int_equal(n->nvmlComputeInstanceGetInfo(ci, &cin), NVML_SUCCESS);
        assert_ptr_equal(cin.device, g0);
        assert_ptr_equal(cin.gpuInstance, gi);
        assert_int_equal(cin.id, 0);
        assert_int_equal(cin.profileId, NVML_COMPUTE_INSTANCE_PROFILE_3_SLICE);
        assert_int_equal(cin.placement.start, 0);
        assert_int_equal(cin.placement.size, 3);
        assert_int_equal(n->nvmlGpuInstanceGetComputeInstanceRemainingCapacity(
                                 gi, NVML_COMPUTE_INSTANCE_PROFILE_3_SLICE, &c),
                         NVML_SUCCESS);
        assert_int_equal(c, 0);
        nvmlComputeInstance_t again = NULL;
        assert_int_equal(n->nvmlGpuInstanceCreateComputeInstance(
                                 gi, NVML_COMPUTE_INSTANCE_PROFILE_1_SLICE, &again),
                         NVML_ERROR_INSUFFICIENT_RESOURCES);
        nvmlComputeInstance_t cis[4] = { NULL };
        assert_int_equal(n->nvmlGpuInstanceGetComputeInstances(
                                 gi, NVML_COMPUTE_INSTANCE_PROFILE_3_SLICE, cis, &c),
                         NVML_SUCCESS);
        assert_int_equal(c, 1);
        assert_ptr_equal(cis[0], ci);
        unsigned count = 0;
        assert_int_equal(n->nvmlDeviceGetMaxMigDeviceCount(g0, &count), NVML_SUCCESS);
        assert_int_equal(count, 7);
        nvmlDevice_t m = NULL;
        assert_int_equal(n->nvmlDeviceGetMigDeviceHandleByIndex(g0, 0, &m), NVML_SUCCESS);
        assert_int_equal(n->nvmlDeviceGetMigDeviceHandleByIndex(g0, 1, &d), NVML_ERROR_NOT_FOUND);
        char uuid[96], name[96];
        assert_int_equal(n->nvmlDeviceGetUUID(m, uuid, sizeof(uuid)), NVML_SUCCESS);
        assert_string_equal(uuid, DYN_UUID_G0_GI1_CI0);
        assert_ptr_equal(by_uuid(f, uuid), m);
        assert_int_equal(n->nvmlDeviceGetName(m, name, sizeof(name)), NVML_SUCCESS);
        assert_string_equal(name, "NVIDIA H100 80GB HBM3 MIG 3g.40gb");
        unsigned u = 9;
        assert_int_equal(n->nvmlDeviceGetGpuInstanceId(m, &u), NVML_SUCCESS);
        assert_int_equal(u, 1);
        assert_int_equal(n->nvmlDeviceGetComputeInstanceId(m, &u), NVML_SUCCESS);
        assert_int_equal(u, 0);
        assert_int_equal(n->nvmlDeviceGetDeviceHandleFromMigDeviceHandle(m, &d), NVML_SUCCESS);
        assert_ptr_equal(d, g0);
        nvmlMemory_t mem;
        assert_int_equal(n->nvmlDeviceGetMemoryInfo(m, &mem), NVML_SUCCESS);
        assert_true(mem.total == 40448ULL << 20);
        nvmlDeviceAttributes_t a;
        assert_int_equal(n->nvmlDeviceGetAttributes(m, &a), NVML_SUCCESS);
        assert_int_equal(a.multiprocessorCount, 60);
        assert_int_equal(a.gpuInstanceSliceCount, 3);
        assert_int_equal(a.computeInstanceSliceCount, 3);
        assert_int_equal(a.sharedCopyEngineCount, 3);
        assert_int_equal(a.sharedDecoderCount, 3);
        assert_true(a.memorySizeMB == 40448);
        /* the GPU instance is in use while it has a compute instance */
        assert_int_equal(n->nvmlGpuInstanceDestroy(gi), NVML_ERROR_IN_USE);
        assert_int_equal(n->nvmlComputeInstanceDestroy(ci), NVML_SUCCESS);
        assert_int_equal(n->nvmlComputeInstanceDestroy(ci), NVML_ERROR_INVALID_ARGUMENT);
        assert_int_equal(n->nvmlDeviceGetMigDeviceHandleByIndex(g0, 0, &d), NVML_ERROR_NOT_FOUND);
        assert_int_equal(n->nvmlDeviceGetHandleByUUID(uuid, &d), NVML_ERROR_NOT_FOUND);
        assert_int_equal(n->nvmlDeviceGetUUID(m, uuid, sizeof(uuid)),
                         NVML_ERROR_INVALID_ARGUMENT);
        assert_int_equal(n->nvmlGpuInstanceDestroy(gi), NVML_SUCCESS);
        assert_int_equal(n->nvmlGpuInstanceDestroy(gi), NVML_ERROR_INVALID_ARGUMENT);
        assert_int_equal(n->nvmlGpuInstanceGetInfo(gi, &in), NVML_ERROR_INVALID_ARGUMENT);
        assert_int_equal(n->nvmlDeviceGetGpuInstanceById(g0, 1, &by_id), NVML_ERROR_NOT_FOUND);
        assert_int_equal(gi_left(f, g0, 0), 1);
        /* the same instance again: the same UUID (derived from GPU, GI, CI) */
        gi = gi_at(f, g0, 9, 4, 4);
        assert_int_equal(gi_info(f, gi).id, 1);
        assert_int_equal(n->nvmlGpuInstanceCreateComputeInstance(
                                 gi, NVML_COMPUTE_INSTANCE_PROFILE_3_SLICE, &ci),
                         NVML_SUCCESS);
        assert_int_equal(n->nvmlDeviceGetMigDeviceHandleByIndex(g0, 0, &m), NVML_SUCCESS);
        assert_int_equal(n->nvmlDeviceGetUUID(m, uuid, sizeof(uuid)), NVML_SUCCESS);
        assert_string_equal(uuid, DYN_UUID_G0_GI1_CI0);
        /* a process on it: IN_USE (nvml.h), until it exits */
        char path[] = "/tmp/kdev-nvml-control-XXXXXX";
        int fd = mkstemp(path);
        assert_true(fd >= 0);
        close(fd);
        setenv("KDEV_MOCK_NVML_CONTROL", path, 1);
        char line[160];
        snprintf(line, sizeof(line), "proc %s 4242 1048576\n", uuid);
        append(path, line);
        assert_int_equal(n->nvmlComputeInstanceDestroy(ci), NVML_ERROR_IN_USE);
        snprintf(line, sizeof(line), "proc-exit %s 4242\n", uuid);
        append(path, line);
        assert_int_equal(n->nvmlComputeInstanceDestroy(ci), NVML_SUCCESS);
        assert_int_equal(n->nvmlGpuInstanceDestroy(gi), NVML_SUCCESS);
        unsetenv("KDEV_MOCK_NVML_CONTROL");
        unlink(path);
}

/* Placement choice without a placement (the lowest free start), ids (lowest
 * free), per-profile instance limits, compute instances sharing a GI. */
static void test_mig_create_auto(void **state)
{
        struct fx *f = *state;
        const struct kdev_nvml_api *n = f->n;
        dyn_open(f, TOPO("mig-h100-80gb-dynamic.yaml"));
        nvmlDevice_t g0 = gpu(f, 0);
        nvmlGpuInstance_t gis[8] = { NULL }, x = NULL;
        for (unsigned i = 0; i < 7; i++) {
                assert_int_equal(n->nvmlDeviceCreateGpuInstance(g0, 19, &gis[i]), NVML_SUCCESS);
                nvmlGpuInstanceInfo_t in = gi_info(f, gis[i]);
                assert_int_equal(in.id, i + 1);
                assert_int_equal(in.profileId, 19);
                assert_int_equal(in.placement.start, i);
                assert_int_equal(in.placement.size, 1);
        }
        assert_int_equal(n->nvmlDeviceCreateGpuInstance(g0, 19, &x),
                         NVML_ERROR_INSUFFICIENT_RESOURCES);
        assert_int_equal(gi_left(f, g0, 19), 0);
        assert_int_equal(gi_left(f, g0, 20), 0);
        assert_int_equal(gi_left(f, g0, 15), 0);    /* slice 7 alone fits no 1g.20gb at 6 */
        nvmlGpuInstance_t list[7] = { NULL };
        unsigned c = 0;
        assert_int_equal(n->nvmlDeviceGetGpuInstances(g0, 19, list, &c), NVML_SUCCESS);
        assert_int_equal(c, 7);
        for (unsigned i = 0; i < 7; i++)
                assert_ptr_equal(list[i], gis[i]);
        /* the lowest free ids and starts come back after a destruction */
        assert_int_equal(n->nvmlGpuInstanceDestroy(gis[2]), NVML_SUCCESS);
        assert_int_equal(n->nvmlGpuInstanceDestroy(gis[4]), NVML_SUCCESS);
        assert_int_equal(gi_left(f, g0, 19), 2);
        assert_int_equal(gi_left(f, g0, 20), 1);
        assert_int_equal(n->nvmlDeviceCreateGpuInstance(g0, 20, &x), NVML_SUCCESS);
        assert_int_equal(gi_info(f, x).id, 3);
        assert_int_equal(gi_info(f, x).placement.start, 2);
        /* one +me instance per GPU */
        assert_int_equal(gi_left(f, g0, 20), 0);
        assert_int_equal(gi_left(f, g0, 19), 1);
        nvmlGpuInstancePlacement_t p = { .start = 4, .size = 1 };
        nvmlGpuInstance_t y = NULL;
        assert_int_equal(n->nvmlDeviceCreateGpuInstanceWithPlacement(g0, 20, &p, &y),
                         NVML_ERROR_INSUFFICIENT_RESOURCES);
        assert_int_equal(n->nvmlDeviceCreateGpuInstanceWithPlacement(g0, 19, &p, &y),
                         NVML_SUCCESS);
        assert_int_equal(gi_info(f, y).id, 5);
        assert_int_equal(n->nvmlGpuInstanceDestroy(x), NVML_SUCCESS);
        assert_int_equal(n->nvmlGpuInstanceDestroy(y), NVML_SUCCESS);
        for (unsigned i = 0; i < 7; i++)
                if (i != 2 && i != 4)
                        assert_int_equal(n->nvmlGpuInstanceDestroy(gis[i]), NVML_SUCCESS);
        /* 7g.80gb: the whole GPU, GI 0; seven 1-slice compute instances */
        nvmlGpuInstance_t full = NULL;
        assert_int_equal(n->nvmlDeviceCreateGpuInstance(g0, 0, &full), NVML_SUCCESS);
        assert_int_equal(gi_info(f, full).id, 0);
        assert_int_equal(gi_info(f, full).placement.size, 8);
        nvmlComputeInstancePlacement_t cp[8];
        c = 8;
        assert_int_equal(n->nvmlGpuInstanceGetComputeInstancePossiblePlacements(
                                 full, NVML_COMPUTE_INSTANCE_PROFILE_3_SLICE, cp, &c),
                         NVML_SUCCESS);
        assert_int_equal(c, 2);
        assert_true(cp[0].start == 0 && cp[0].size == 3 && cp[1].start == 4 && cp[1].size == 3);
        c = 8;
        assert_int_equal(n->nvmlGpuInstanceGetComputeInstancePossiblePlacements(
                                 full, NVML_COMPUTE_INSTANCE_PROFILE_2_SLICE, cp, &c),
                         NVML_SUCCESS);
        assert_int_equal(c, 3);
        assert_true(cp[2].start == 4 && cp[2].size == 2);
        /* a 3-slice CI at 4, then 1-slice CIs fill slices 0..3 and none more */
        nvmlComputeInstancePlacement_t at = { .start = 3, .size = 3 };
        nvmlComputeInstance_t ci = NULL;
        assert_int_equal(n->nvmlGpuInstanceCreateComputeInstanceWithPlacement(
                                 full, NVML_COMPUTE_INSTANCE_PROFILE_3_SLICE, &at, &ci),
                         NVML_ERROR_INVALID_ARGUMENT);
        at.start = 4;
        assert_int_equal(n->nvmlGpuInstanceCreateComputeInstanceWithPlacement(
                                 full, NVML_COMPUTE_INSTANCE_PROFILE_3_SLICE, &at, &ci),
                         NVML_SUCCESS);
        assert_int_equal(n->nvmlGpuInstanceGetComputeInstanceRemainingCapacity(
                                 full, NVML_COMPUTE_INSTANCE_PROFILE_1_SLICE, &c),
                         NVML_SUCCESS);
        assert_int_equal(c, 4);
        nvmlComputeInstance_t small[5] = { NULL };
        for (unsigned i = 0; i < 4; i++) {
                assert_int_equal(n->nvmlGpuInstanceCreateComputeInstance(
                                         full, NVML_COMPUTE_INSTANCE_PROFILE_1_SLICE, &small[i]),
                                 NVML_SUCCESS);
                nvmlComputeInstanceInfo_t cin;
                assert_int_equal(n->nvmlComputeInstanceGetInfo(small[i], &cin), NVML_SUCCESS);
                assert_int_equal(cin.id, i + 1);
                assert_int_equal(cin.placement.start, i);
        }
        assert_int_equal(n->nvmlGpuInstanceCreateComputeInstance(
                                 full, NVML_COMPUTE_INSTANCE_PROFILE_1_SLICE, &small[4]),
                         NVML_ERROR_INSUFFICIENT_RESOURCES);
        nvmlComputeInstance_t cis[7];
        assert_int_equal(n->nvmlGpuInstanceGetComputeInstances(
                                 full, NVML_COMPUTE_INSTANCE_PROFILE_1_SLICE, cis, &c),
                         NVML_SUCCESS);
        assert_int_equal(c, 4);
        assert_ptr_equal(cis[0], small[0]);
        nvmlDevice_t m = NULL;
        char name[96];
        assert_int_equal(n->nvmlDeviceGetMigDeviceHandleByIndex(g0, 1, &m), NVML_SUCCESS);
        assert_int_equal(n->nvmlDeviceGetName(m, name, sizeof(name)), NVML_SUCCESS);
        assert_string_equal(name, "NVIDIA H100 80GB HBM3 MIG 1c.7g.80gb");
        nvmlDeviceAttributes_t a;
        assert_int_equal(n->nvmlDeviceGetAttributes(m, &a), NVML_SUCCESS);
        assert_int_equal(a.multiprocessorCount, 18);        /* 132 * 1 / 7 */
        assert_int_equal(a.gpuInstanceSliceCount, 7);
        assert_int_equal(a.computeInstanceSliceCount, 1);
        assert_true(a.memorySizeMB == 81152);
        /* CI profiles that do not fit the GI */
        assert_int_equal(n->nvmlGpuInstanceCreateComputeInstance(
                                 full, NVML_COMPUTE_INSTANCE_PROFILE_1_SLICE_REV1, &ci),
                         NVML_ERROR_NOT_SUPPORTED);
        assert_int_equal(n->nvmlGpuInstanceCreateComputeInstance(
                                 full, NVML_COMPUTE_INSTANCE_PROFILE_COUNT, &ci),
                         NVML_ERROR_INVALID_ARGUMENT);
        assert_int_equal(n->nvmlGpuInstanceDestroy(full), NVML_ERROR_IN_USE);
}

/* MIG off, no MIG, bad handles and ids, lost GPU. */
static void test_mig_create_errors(void **state)
{
        struct fx *f = *state;
        const struct kdev_nvml_api *n = f->n;
        dyn_open(f, TOPO("mig-h100-80gb-dynamic.yaml"));
        nvmlDevice_t g0 = gpu(f, 0), g1 = gpu(f, 1), g2 = gpu(f, 2);
        nvmlGpuInstance_t gi = NULL, list[8];
        nvmlGpuInstancePlacement_t p = { .start = 0, .size = 1 };
        unsigned c = 0;
        nvmlDevice_t off[2] = { g1, g2 };     /* MIG off; not MIG capable */
        for (int k = 0; k < 2; k++) {
                assert_int_equal(n->nvmlDeviceGetGpuInstanceRemainingCapacity(off[k], 19, &c),
                                 NVML_ERROR_NOT_SUPPORTED);
                assert_int_equal(n->nvmlDeviceCreateGpuInstance(off[k], 19, &gi),
                                 NVML_ERROR_NOT_SUPPORTED);
                assert_int_equal(n->nvmlDeviceCreateGpuInstanceWithPlacement(off[k], 19, &p, &gi),
                                 NVML_ERROR_NOT_SUPPORTED);
                assert_int_equal(n->nvmlDeviceGetGpuInstances(off[k], 19, list, &c),
                                 NVML_ERROR_NOT_SUPPORTED);
        }
        assert_null(gi);
        /* unknown profile ids, NULL out-pointers, bad handles */
        assert_int_equal(n->nvmlDeviceGetGpuInstanceRemainingCapacity(g0, 99, &c),
                         NVML_ERROR_INVALID_ARGUMENT);
        assert_int_equal(n->nvmlDeviceGetGpuInstanceRemainingCapacity(g0, 19, NULL),
                         NVML_ERROR_INVALID_ARGUMENT);
        assert_int_equal(n->nvmlDeviceCreateGpuInstance(g0, 99, &gi), NVML_ERROR_INVALID_ARGUMENT);
        assert_int_equal(n->nvmlDeviceCreateGpuInstance(g0, 19, NULL), NVML_ERROR_INVALID_ARGUMENT);
        assert_int_equal(n->nvmlDeviceGetGpuInstances(g0, 19, NULL, &c),
                         NVML_ERROR_INVALID_ARGUMENT);
        assert_int_equal(n->nvmlDeviceGetGpuInstances(g0, 99, list, &c),
                         NVML_ERROR_INVALID_ARGUMENT);
        assert_int_equal(n->nvmlGpuInstanceDestroy(NULL), NVML_ERROR_INVALID_ARGUMENT);
        assert_int_equal(n->nvmlComputeInstanceDestroy(NULL), NVML_ERROR_INVALID_ARGUMENT);
        assert_int_equal(n->nvmlGpuInstanceCreateComputeInstance(NULL, 0, NULL),
                         NVML_ERROR_INVALID_ARGUMENT);
        /* MIG turned off after a GPU instance was made: no compute instance */
        gi = gi_at(f, g0, 14, 2, 2);
        nvmlComputeInstance_t ci = NULL;
        assert_int_equal(n->nvmlGpuInstanceCreateComputeInstance(gi, 0, NULL),
                         NVML_ERROR_INVALID_ARGUMENT);
        assert_int_equal(f->m.set_mig_mode(DYN_G0, 0), NVML_SUCCESS);
        assert_int_equal(n->nvmlGpuInstanceCreateComputeInstance(gi, 0, &ci),
                         NVML_ERROR_NOT_SUPPORTED);
        assert_int_equal(f->m.set_mig_mode(DYN_G0, 1), NVML_SUCCESS);
        /* a lost GPU answers GPU_IS_LOST */
        assert_int_equal(f->m.set_lost(DYN_G0, 1), NVML_SUCCESS);
        assert_int_equal(n->nvmlDeviceCreateGpuInstance(g0, 19, &gi), NVML_ERROR_GPU_IS_LOST);
        assert_int_equal(n->nvmlGpuInstanceCreateComputeInstance(gi, 0, &ci),
                         NVML_ERROR_GPU_IS_LOST);
        assert_int_equal(f->m.set_lost(DYN_G0, 0), NVML_SUCCESS);
        assert_int_equal(n->nvmlGpuInstanceCreateComputeInstance(gi, 0, &ci), NVML_SUCCESS);
        nvmlDevice_t m = NULL;
        assert_int_equal(n->nvmlDeviceGetMigDeviceHandleByIndex(g0, 0, &m), NVML_SUCCESS);
        assert_int_equal(n->nvmlDeviceCreateGpuInstance(m, 19, &gi), NVML_ERROR_NOT_SUPPORTED);
}

/* Static topology MIG devices (mig-h100-80gb.yaml GPU 0: 3g.40gb GI 2 at 4,
 * 2g.20gb GI 3 at 0, 1g.20gb GI 5 at 2) are destroyed like created ones,
 * and their room taken by new instances. */
static void test_mig_destroy_static(void **state)
{
        struct fx *f = *state;
        const struct kdev_nvml_api *n = f->n;
        dyn_open(f, TOPO("mig-h100-80gb.yaml"));
        nvmlDevice_t g0 = gpu(f, 0), d = NULL;
        static const unsigned ids[] = { 19, 20, 15, 14, 9, 5, 0 };
        for (size_t i = 0; i < 7; i++)
                assert_int_equal(gi_left(f, g0, ids[i]), 0);   /* every slice taken */
        nvmlGpuInstance_t gi = NULL;
        assert_int_equal(n->nvmlDeviceGetGpuInstanceById(g0, 3, &gi), NVML_SUCCESS);
        nvmlComputeInstance_t ci = NULL;
        assert_int_equal(n->nvmlGpuInstanceGetComputeInstanceById(gi, 0, &ci), NVML_SUCCESS);
        assert_int_equal(n->nvmlGpuInstanceDestroy(gi), NVML_ERROR_IN_USE);
        assert_int_equal(n->nvmlComputeInstanceDestroy(ci), NVML_SUCCESS);
        assert_int_equal(n->nvmlDeviceGetMigDeviceHandleByIndex(g0, 1, &d), NVML_ERROR_NOT_FOUND);
        assert_int_equal(n->nvmlDeviceGetHandleByUUID("MIG-4c0a6e32-9e5c-5fb0-a13c-5e7a9cbd3f41",
                                                      &d),
                         NVML_ERROR_NOT_FOUND);
        assert_int_equal(n->nvmlDeviceGetMigDeviceHandleByIndex(g0, 0, &d), NVML_SUCCESS);
        assert_int_equal(n->nvmlDeviceGetMigDeviceHandleByIndex(g0, 2, &d), NVML_SUCCESS);
        assert_int_equal(n->nvmlGpuInstanceDestroy(gi), NVML_SUCCESS);
        assert_int_equal(gi_left(f, g0, 14), 1);
        assert_int_equal(gi_left(f, g0, 19), 2);
        assert_int_equal(gi_left(f, g0, 15), 1);
        /* two 1g.10gb: GI ids 1 and 3 (2 and 5 are taken), starts 0 and 1 */
        nvmlGpuInstance_t a = NULL, b = NULL;
        assert_int_equal(n->nvmlDeviceCreateGpuInstance(g0, 19, &a), NVML_SUCCESS);
        assert_int_equal(n->nvmlDeviceCreateGpuInstance(g0, 19, &b), NVML_SUCCESS);
        assert_int_equal(gi_info(f, a).id, 1);
        assert_int_equal(gi_info(f, b).id, 3);
        assert_int_equal(gi_info(f, b).placement.start, 1);
        /* the new MIG device takes the freed slot 1 */
        assert_int_equal(n->nvmlGpuInstanceCreateComputeInstance(a, 0, &ci), NVML_SUCCESS);
        nvmlDevice_t m = NULL;
        assert_int_equal(n->nvmlDeviceGetMigDeviceHandleByIndex(g0, 1, &m), NVML_SUCCESS);
        unsigned u = 9;
        assert_int_equal(n->nvmlDeviceGetGpuInstanceId(m, &u), NVML_SUCCESS);
        assert_int_equal(u, 1);
        /* a MIG device removed with kdevMockSetPresent (`mig-destroy`) no
         * longer holds its GPU instance, which then goes for good */
        const char *me = "MIG-2b8e4f10-7c3a-5d9e-8f1a-3c5e7a9b1d2f";   /* 3g.40gb, GI 2 */
        assert_int_equal(n->nvmlDeviceGetGpuInstanceById(g0, 2, &gi), NVML_SUCCESS);
        assert_int_equal(n->nvmlGpuInstanceDestroy(gi), NVML_ERROR_IN_USE);
        assert_int_equal(f->m.set_present(me, 0), NVML_SUCCESS);
        assert_int_equal(n->nvmlGpuInstanceDestroy(gi), NVML_SUCCESS);
        assert_int_equal(f->m.set_present(me, 1), NVML_ERROR_NOT_FOUND);
        assert_int_equal(gi_left(f, g0, 9), 1);
        /* GPU 2's 7g.80gb removed keeps its GPU instance and MIG slot: a new
         * compute instance takes CI id 0 and its slices, so it cannot come
         * back until that one is destroyed */
        const char *full = "MIG-086c2afe-5a18-5f9c-6df8-32547698bad0";
        nvmlDevice_t g2 = gpu(f, 2);
        assert_int_equal(f->m.set_present(full, 0), NVML_SUCCESS);
        assert_int_equal(n->nvmlDeviceGetGpuInstanceById(g2, 0, &gi), NVML_SUCCESS);
        assert_int_equal(n->nvmlGpuInstanceGetComputeInstanceById(gi, 0, &ci),
                         NVML_ERROR_NOT_FOUND);
        assert_int_equal(n->nvmlGpuInstanceGetComputeInstanceRemainingCapacity(
                                 gi, NVML_COMPUTE_INSTANCE_PROFILE_1_SLICE, &u),
                         NVML_SUCCESS);
        assert_int_equal(u, 6);         /* 7 slices, 6 free MIG slots */
        assert_int_equal(n->nvmlGpuInstanceCreateComputeInstance(
                                 gi, NVML_COMPUTE_INSTANCE_PROFILE_1_SLICE, &ci),
                         NVML_SUCCESS);
        nvmlComputeInstanceInfo_t cin;
        assert_int_equal(n->nvmlComputeInstanceGetInfo(ci, &cin), NVML_SUCCESS);
        assert_int_equal(cin.id, 0);
        assert_int_equal(n->nvmlDeviceGetMigDeviceHandleByIndex(g2, 1, &m), NVML_SUCCESS);
        assert_int_equal(n->nvmlDeviceGetMigDeviceHandleByIndex(g2, 0, &m), NVML_ERROR_NOT_FOUND);
        assert_int_equal(f->m.set_present(full, 1), NVML_ERROR_IN_USE);
        assert_int_equal(n->nvmlComputeInstanceDestroy(ci), NVML_SUCCESS);
        assert_int_equal(f->m.set_present(full, 1), NVML_SUCCESS);
        assert_int_equal(n->nvmlDeviceGetMigDeviceHandleByIndex(g2, 0, &m), NVML_SUCCESS);
        assert_ptr_equal(m, by_uuid(f, full));
}

int main(void)
{
        const struct CMUnitTest tests[] = {
                cmocka_unit_test_setup_teardown(test_init_refcount, setup, teardown),
                cmocka_unit_test_setup_teardown(test_system_and_handles, setup, teardown),
                cmocka_unit_test_setup_teardown(test_mig_calls, setup, teardown),
                cmocka_unit_test_setup_teardown(test_topology_and_links, setup, teardown),
                cmocka_unit_test_setup_teardown(test_injected_conditions, setup, teardown),
                cmocka_unit_test_setup_teardown(test_events, setup, teardown),
                cmocka_unit_test_setup_teardown(test_control_file, setup, teardown),
                cmocka_unit_test_setup_teardown(test_control_xid_storm, setup, teardown),
                cmocka_unit_test_setup_teardown(test_mig_possible_placements, setup, teardown),
                cmocka_unit_test_setup_teardown(test_mig_create_destroy, setup, teardown),
                cmocka_unit_test_setup_teardown(test_mig_create_auto, setup, teardown),
                cmocka_unit_test_setup_teardown(test_mig_create_errors, setup, teardown),
                cmocka_unit_test_setup_teardown(test_mig_destroy_static, setup, teardown),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
