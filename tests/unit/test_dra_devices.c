/* DRA ResourceSlice devices from the NVIDIA backend's NVML-free GPU records
 * (nvidia/gpus.h -> kdev_dra_build_devices -> kdev_dra_split), with a
 * hand-built record list: no NVML, no discovery, no mock. Every expected
 * value is the exact JSON text (compact, keys in the order kdev writes
 * them). */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "dra/slices.h"

/* The DRA front end's headers include nothing of src/nvml, not even through
 * the NVIDIA backend's headers. */
#if defined(KDEV_NVML_DISCOVER_H) || defined(KDEV_NVML_LOADER_H) || defined(KDEV_NVML_NVML_API_H)
#error "dra/slices.h pulls in an NVML header"
#endif

/* GPU 0: a whole A100 (minor 3); GPU 1: faulted; GPU 2: in MIG mode (minor
 * 5), brand, architecture and compute capability unknown, with a 3g.20gb
 * MIG device and one whose profile text, memory and SM count are unknown. */
struct node {
        struct kdev_nvidia_gpu gpus[3];
        struct kdev_nvidia_mig migs[2];
        struct kdev_nvidia_gpus list;
};

static void make_node(struct node *n)
{
        memset(n, 0, sizeof(*n));
        snprintf(n->list.driver_version, sizeof(n->list.driver_version), "535.104.05");
        n->list.cuda_driver_version = 12020;
        n->list.gpus = n->gpus;
        n->list.n_gpus = 3;

        struct kdev_nvidia_gpu *g = &n->gpus[0];
        g->index = 0;
        g->minor = 3;
        strcpy(g->uuid, "GPU-aaaa");
        strcpy(g->dra_name, "gpu-3");
        strcpy(g->product, "NVIDIA A100-SXM4-40GB");
        g->brand = "Nvidia";
        g->architecture = "Ampere";
        g->cc_major = 8;
        strcpy(g->pcie_bus_id, "0000:07:00.0");
        strcpy(g->pcie_root, "pci0000:00");
        g->numa_node = 0;
        g->memory_bytes = 40ULL << 30;
        g->multiprocessors = 108;

        g = &n->gpus[1];
        g->index = 1;
        g->minor = 4;
        g->faulted = true;
        strcpy(g->uuid, "GPU-bbbb");
        strcpy(g->dra_name, "gpu-4");

        g = &n->gpus[2];
        g->index = 2;
        g->minor = 5;
        strcpy(g->uuid, "GPU-cccc");
        strcpy(g->dra_name, "gpu-5");
        strcpy(g->product, "NVIDIA A100-SXM4-40GB");
        strcpy(g->pcie_bus_id, "0000:0f:00.0");
        strcpy(g->pcie_root, "pci0000:0e");
        g->numa_node = -1;
        g->mig_enabled = true;
        g->migs = n->migs;
        g->n_migs = 2;

        struct kdev_nvidia_mig *m = &n->migs[0];
        strcpy(m->uuid, "MIG-1");
        strcpy(m->dra_name, "gpu-5-mig-3g20gb-9-4");
        strcpy(m->profile, "3g.20gb");
        m->gi_id = 2;
        m->memory_bytes = 19968ULL << 20;
        m->multiprocessors = 42;
        m->engines.copy_engines = 3;
        m->engines.decoders = 2;
        m->placement_start = 4; /* memory slices 4..7 */
        m->placement_size = 4;

        m = &n->migs[1];
        strcpy(m->uuid, "MIG-2");
        strcpy(m->dra_name, "gpu-5-mig-1g5gb-19-0");
        m->gi_id = 9;
        m->engines.copy_engines = 1;
}

#define GPU3                                                                                   \
        "{\"name\":\"gpu-3\",\"attributes\":{\"type\":{\"string\":\"gpu\"},"                   \
        "\"uuid\":{\"string\":\"GPU-aaaa\"},"                                                  \
        "\"productName\":{\"string\":\"NVIDIA A100-SXM4-40GB\"},"                              \
        "\"brand\":{\"string\":\"Nvidia\"},\"architecture\":{\"string\":\"Ampere\"},"          \
        "\"cudaComputeCapability\":{\"version\":\"8.0.0\"},"                                   \
        "\"driverVersion\":{\"version\":\"535.104.5\"},"                                       \
        "\"cudaDriverVersion\":{\"version\":\"12.2.0\"},"                                      \
        "\"pcieBusID\":{\"string\":\"0000:07:00.0\"},"                                         \
        "\"resource.kubernetes.io/pcieRoot\":{\"string\":\"pci0000:00\"},"                       \
        "\"resource.kubernetes.io/numaNode\":{\"int\":0},"                                       \
        "\"index\":{\"int\":0},\"minor\":{\"int\":3}},"                                        \
        "\"capacity\":{\"memory\":{\"value\":\"40Gi\"},"                                       \
        "\"multiprocessors\":{\"value\":\"108\"}}}"
#define MIG1                                                                                   \
        "{\"name\":\"gpu-5-mig-3g20gb-9-4\",\"attributes\":{\"type\":{\"string\":\"mig\"},"    \
        "\"uuid\":{\"string\":\"MIG-1\"},\"parentUUID\":{\"string\":\"GPU-cccc\"},"            \
        "\"profile\":{\"string\":\"3g.20gb\"},"                                                \
        "\"productName\":{\"string\":\"NVIDIA A100-SXM4-40GB\"},"                              \
        "\"driverVersion\":{\"version\":\"535.104.5\"},"                                       \
        "\"cudaDriverVersion\":{\"version\":\"12.2.0\"},"                                      \
        "\"pcieBusID\":{\"string\":\"0000:0f:00.0\"},"                                         \
        "\"resource.kubernetes.io/pcieRoot\":{\"string\":\"pci0000:0e\"},"                       \
        "\"index\":{\"int\":2},\"minor\":{\"int\":5}},"                                        \
        "\"capacity\":{\"memory\":{\"value\":\"19968Mi\"},"                                    \
        "\"multiprocessors\":{\"value\":\"42\"},\"copyEngines\":{\"value\":\"3\"},"            \
        "\"decoders\":{\"value\":\"2\"},\"encoders\":{\"value\":\"0\"},"                       \
        "\"jpegEngines\":{\"value\":\"0\"},\"ofaEngines\":{\"value\":\"0\"},"              \
        "\"memorySlice4\":{\"value\":\"1\"},\"memorySlice5\":{\"value\":\"1\"},"          \
        "\"memorySlice6\":{\"value\":\"1\"},\"memorySlice7\":{\"value\":\"1\"}}}"
#define MIG2                                                                                   \
        "{\"name\":\"gpu-5-mig-1g5gb-19-0\",\"attributes\":{\"type\":{\"string\":\"mig\"},"    \
        "\"uuid\":{\"string\":\"MIG-2\"},\"parentUUID\":{\"string\":\"GPU-cccc\"},"            \
        "\"productName\":{\"string\":\"NVIDIA A100-SXM4-40GB\"},"                              \
        "\"driverVersion\":{\"version\":\"535.104.5\"},"                                       \
        "\"cudaDriverVersion\":{\"version\":\"12.2.0\"},"                                      \
        "\"pcieBusID\":{\"string\":\"0000:0f:00.0\"},"                                         \
        "\"resource.kubernetes.io/pcieRoot\":{\"string\":\"pci0000:0e\"},"                       \
        "\"index\":{\"int\":2},\"minor\":{\"int\":5}},"                                        \
        "\"capacity\":{\"copyEngines\":{\"value\":\"1\"},"                                     \
        "\"decoders\":{\"value\":\"0\"},\"encoders\":{\"value\":\"0\"},"                       \
        "\"jpegEngines\":{\"value\":\"0\"},\"ofaEngines\":{\"value\":\"0\"}}}"

/* kdev_dra_build_devices of |list| with |health| must return |want| devices
 * whose compact JSON text is |text|. */
static void expect_devices(const struct kdev_nvidia_gpus *list, const struct kdev_dra_health *h,
                           int want, const char *text)
{
        struct kdev_err err = {0};
        json_t *d = NULL;
        assert_int_equal(kdev_dra_build_devices(list, h, &d, &err), want);
        char *got = json_dumps(d, JSON_COMPACT);
        assert_non_null(got);
        assert_string_equal(got, text);
        free(got);
        json_decref(d);
}

static void test_devices_of_records(void **state)
{
        (void)state;
        struct node n;
        make_node(&n);
        /* the faulted GPU is left out; the GPU in MIG mode is its MIG devices */
        expect_devices(&n.list, NULL, 3, "[" GPU3 "," MIG1 "," MIG2 "]");
        /* no records: no devices */
        expect_devices(NULL, NULL, 0, "[]");
        struct kdev_nvidia_gpus none = {0};
        expect_devices(&none, NULL, 0, "[]");
}

/* memorySlice<N>: at most 8 (a GPU's memory slices), from the placement
 * start on. */
static void test_memory_slices_capped(void **state)
{
        (void)state;
        struct node n;
        struct kdev_err err = {0};
        json_t *d = NULL;
        make_node(&n);
        n.migs[1].placement_start = 2;
        n.migs[1].placement_size = 12;
        assert_int_equal(kdev_dra_build_devices(&n.list, NULL, &d, &err), 3);
        json_t *c = json_object_get(json_array_get(d, 2), "capacity");
        unsigned slices = 0;
        const char *k;
        json_t *v;
        json_object_foreach(c, k, v) {
                if (strncmp(k, "memorySlice", 11) == 0) {
                        unsigned want = 2 + slices++;
                        char name[32];
                        snprintf(name, sizeof(name), "memorySlice%u", want);
                        assert_string_equal(k, name);
                        assert_string_equal(json_string_value(json_object_get(v, "value")), "1");
                }
        }
        assert_int_equal(slices, 8);
        json_decref(d);
}

/* --shareable-gpus: a whole GPU is published with allowMultipleAllocations
 * and memory and compute as consumable capacity with request policies
 * (KEP-5075), without multiprocessors; MIG devices stay as they are. */
static void test_shareable_gpus(void **state)
{
        (void)state;
        struct node n;
        struct kdev_err err = {0};
        struct kdev_dra_device_options o = {.shareable_gpus = true};
        json_t *d = NULL;
        make_node(&n);
        assert_int_equal(kdev_dra_build_devices_opts(&n.list, NULL, &o, &d, &err), 3);
        char *got = json_dumps(json_object_get(json_array_get(d, 0), "capacity"), JSON_COMPACT);
        assert_string_equal(got, "{\"memory\":{\"value\":\"40Gi\",\"requestPolicy\":"
                                 "{\"default\":\"40Gi\",\"validRange\":{\"min\":\"1Gi\","
                                 "\"step\":\"1Mi\"}}},\"compute\":{\"value\":\"100\","
                                 "\"requestPolicy\":{\"default\":\"100\",\"validRange\":"
                                 "{\"min\":\"1\",\"step\":\"1\"}}}}");
        free(got);
        assert_true(json_is_true(
                json_object_get(json_array_get(d, 0), "allowMultipleAllocations")));
        /* MIG devices: unchanged */
        assert_null(json_object_get(json_array_get(d, 1), "allowMultipleAllocations"));
        got = json_dumps(json_array_get(d, 1), JSON_COMPACT);
        assert_string_equal(got, MIG1);
        free(got);
        json_decref(d);
        /* memory not a whole number of MiB: no step; below 1Gi: min = memory */
        n.gpus[0].memory_bytes = (40ULL << 30) + 1;
        assert_int_equal(kdev_dra_build_devices_opts(&n.list, NULL, &o, &d, &err), 3);
        got = json_dumps(json_object_get(json_object_get(json_array_get(d, 0), "capacity"),
                                         "memory"),
                         JSON_COMPACT);
        assert_string_equal(got, "{\"value\":\"42949672961\",\"requestPolicy\":{\"default\":"
                                 "\"42949672961\",\"validRange\":{\"min\":\"1Gi\"}}}");
        free(got);
        json_decref(d);
        n.gpus[0].memory_bytes = 512ULL << 20;
        assert_int_equal(kdev_dra_build_devices_opts(&n.list, NULL, &o, &d, &err), 3);
        got = json_dumps(json_object_get(json_object_get(json_array_get(d, 0), "capacity"),
                                         "memory"),
                         JSON_COMPACT);
        assert_string_equal(got, "{\"value\":\"512Mi\",\"requestPolicy\":{\"default\":"
                                 "\"512Mi\",\"validRange\":{\"min\":\"512Mi\"}}}");
        free(got);
        json_decref(d);
}

static void test_health_withdraws(void **state)
{
        (void)state;
        struct node n;
        make_node(&n);
        /* a GPU takes its MIG devices with it; a MIG device goes alone;
         * unknown UUIDs change nothing */
        const char *parent[] = {"GPU-cccc"};
        struct kdev_dra_health h = {parent, 1};
        expect_devices(&n.list, &h, 1, "[" GPU3 "]");
        const char *mig[] = {"MIG-1", "GPU-nope", NULL};
        h = (struct kdev_dra_health){mig, 3};
        expect_devices(&n.list, &h, 2, "[" GPU3 "," MIG2 "]");
        /* the faulted GPU stays out when it is also listed */
        const char *faulted[] = {"GPU-bbbb", "GPU-aaaa"};
        h = (struct kdev_dra_health){faulted, 2};
        expect_devices(&n.list, &h, 2, "[" MIG1 "," MIG2 "]");
}

static void test_record_errors(void **state)
{
        (void)state;
        struct node n;
        struct kdev_err err = {0};
        json_t *d = (json_t *)&err; /* overwritten with NULL on error */

        /* a MIG device the NVIDIA backend could not name: the error it
         * recorded, when the device would be published */
        make_node(&n);
        n.migs[1].dra_name[0] = '\0';
        n.migs[1].dra_name_error = -ENAMETOOLONG;
        assert_int_equal(kdev_dra_build_devices(&n.list, NULL, &d, &err), -ENAMETOOLONG);
        assert_null(d);
        assert_int_equal(err.code, ENAMETOOLONG);
        assert_string_equal(err.msg, "GPU 2: a MIG device has no valid device name");
        const char *bad[] = {"MIG-2"};
        struct kdev_dra_health h = {bad, 1};
        expect_devices(&n.list, &h, 2, "[" GPU3 "," MIG1 "]");

        /* a GPU without UUID that is not faulted */
        make_node(&n);
        n.gpus[2].uuid[0] = '\0';
        err = (struct kdev_err){0};
        assert_int_equal(kdev_dra_build_devices(&n.list, NULL, &d, &err), -EINVAL);
        assert_null(d);
        assert_string_equal(err.msg, "GPU 2: no UUID");
        /* faulted and without UUID (lost before its UUID was read): left out */
        n.gpus[2].faulted = true;
        expect_devices(&n.list, NULL, 1, "[" GPU3 "]");
}

/* The whole path: records -> devices -> the ResourceSlice specs of a pool
 * of at most two devices a slice. */
static void test_records_to_slices(void **state)
{
        (void)state;
        struct node n;
        struct kdev_err err = {0};
        json_t *d = NULL, *specs = NULL;
        make_node(&n);
        assert_int_equal(kdev_dra_build_devices(&n.list, NULL, &d, &err), 3);
        struct kdev_dra_pool pool = {.node = "node-a", .max_per_slice = 2};
        assert_int_equal(kdev_dra_split(&pool, d, 7, &specs, &err), 2);
        char *got = json_dumps(specs, JSON_COMPACT);
        assert_string_equal(
                got,
                "[{\"driver\":\"gpu.nvidia.com\",\"nodeName\":\"node-a\",\"pool\":{\"name\":"
                "\"node-a\",\"generation\":7,\"resourceSliceCount\":2},\"devices\":[" GPU3
                "," MIG1 "]},"
                "{\"driver\":\"gpu.nvidia.com\",\"nodeName\":\"node-a\",\"pool\":{\"name\":"
                "\"node-a\",\"generation\":7,\"resourceSliceCount\":2},\"devices\":[" MIG2
                "]}]");
        free(got);
        json_decref(specs);
        json_decref(d);
}

int main(void)
{
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_devices_of_records),
                cmocka_unit_test(test_memory_slices_capped),
                cmocka_unit_test(test_health_withdraws),
                cmocka_unit_test(test_shareable_gpus),
                cmocka_unit_test(test_record_errors),
                cmocka_unit_test(test_records_to_slices),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
