/* Dynamic MIG ResourceSlices (src/dra/slices.c kdev_dra_build_partitionable,
 * kdev_dra_split with shared counters): synthetic NVML-free records of H100
 * 80GB GPUs with their MIG placements (18 per GPU: 1g.10gb x7, 1g.20gb x4,
 * 2g.20gb x3, 3g.40gb x2, 4g.40gb, 7g.80gb), exact counter set and device
 * JSON, the 64-device split, the 1.34 (counters beside the devices) and
 * 1.35+ (counter slices of their own) layouts, and the v1 / v1beta1 wire
 * shapes (kube/kube.h kdev_kube_slice_to_wire). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dra/slices.h"
#include "kube/kube.h"
#include "nvidia/gpus.h"
#include "nvidia/mig.h"

#define MIB (1ull << 20)

struct prof {
        const char *name;
        unsigned id, size, sms, ce, dec, jpeg, ofa;
        unsigned long long mib;
        unsigned starts[8], n_starts;
};

/* H100 80GB, full-size compute instances (nvidia-smi mig -lgip shape;
 * engine counts synthetic but consistent: a partition never exceeds the GPU) */
static const struct prof h100[] = {
        {"1g.10gb", 19, 1, 16, 1, 1, 1, 0, 9984, {0, 1, 2, 3, 4, 5, 6}, 7},
        {"1g.20gb", 15, 2, 26, 1, 1, 1, 0, 19968, {0, 2, 4, 6}, 4},
        {"2g.20gb", 14, 2, 32, 2, 2, 2, 0, 19968, {0, 2, 4}, 3},
        {"3g.40gb", 9, 4, 60, 3, 3, 3, 0, 40448, {0, 4}, 2},
        {"4g.40gb", 5, 4, 64, 4, 4, 4, 0, 40448, {0}, 1},
        {"7g.80gb", 0, 8, 132, 8, 7, 7, 1, 80896, {0}, 1},
};
#define PLACEMENTS 18

static void fill_gpu(struct kdev_nvidia_gpu *g, unsigned i)
{
        memset(g, 0, sizeof(*g));
        g->index = i;
        g->minor = i;
        snprintf(g->uuid, sizeof(g->uuid), "GPU-0000000%u-aaaa-bbbb-cccc-dddddddddddd", i);
        snprintf(g->dra_name, sizeof(g->dra_name), "gpu-%u", i);
        snprintf(g->product, sizeof(g->product), "NVIDIA H100 80GB HBM3");
        g->brand = "Nvidia";
        g->architecture = "Hopper";
        g->cc_major = 9;
        g->numa_node = -1;
        snprintf(g->pcie_bus_id, sizeof(g->pcie_bus_id), "0000:%02x:00.0", 0x10 + i);
        g->memory_bytes = 81559 * MIB;
        g->multiprocessors = 132;
        g->memory_slices = 8;
        g->placements = calloc(PLACEMENTS, sizeof(*g->placements));
        assert_non_null(g->placements);
        size_t n = 0;
        for (size_t k = 0; k < sizeof(h100) / sizeof(h100[0]); k++)
                for (unsigned s = 0; s < h100[k].n_starts; s++) {
                        struct kdev_nvidia_placement *p = &g->placements[n++];
                        const struct prof *f = &h100[k];
                        snprintf(p->profile, sizeof(p->profile), "%s", f->name);
                        p->gi_profile_id = f->id;
                        p->placement_start = f->starts[s];
                        p->placement_size = f->size;
                        p->memory_bytes = f->mib * MIB;
                        p->multiprocessors = f->sms;
                        p->engines.copy_engines = f->ce;
                        p->engines.decoders = f->dec;
                        p->engines.jpeg_engines = f->jpeg;
                        p->engines.ofa_engines = f->ofa;
                        int rc = kdev_nvidia_dra_placement_name(i, f->name, f->id,
                                                                f->starts[s], p->dra_name,
                                                                sizeof(p->dra_name));
                        assert_true(rc > 0);
                }
        g->n_placements = n;
        assert_int_equal(n, PLACEMENTS);
}

static void fill(struct kdev_nvidia_gpus *gs, unsigned n)
{
        memset(gs, 0, sizeof(*gs));
        snprintf(gs->driver_version, sizeof(gs->driver_version), "550.90.07");
        gs->cuda_driver_version = 12040;
        gs->gpus = calloc(n, sizeof(*gs->gpus));
        assert_non_null(gs->gpus);
        gs->n_gpus = n;
        for (unsigned i = 0; i < n; i++)
                fill_gpu(&gs->gpus[i], i);
}

static void assert_json(const json_t *got, const char *want_text)
{
        json_error_t je;
        json_t *want = json_loads(want_text, 0, &je);
        if (!want)
                fail_msg("bad expected JSON: %s", je.text);
        if (!json_equal((json_t *)got, want)) {
                char *g = json_dumps(got, JSON_SORT_KEYS | JSON_INDENT(1));
                char *w = json_dumps(want, JSON_SORT_KEYS | JSON_INDENT(1));
                print_error("got:\n%s\nwant:\n%s\n", g, w);
                free(g);
                free(w);
                json_decref(want);
                fail();
        }
        json_decref(want);
}

static const json_t *device_named(const json_t *devs, const char *name)
{
        size_t i;
        const json_t *d;
        json_array_foreach(devs, i, d)
                if (strcmp(json_string_value(json_object_get(d, "name")), name) == 0)
                        return d;
        fail_msg("no device %s", name);
        return NULL;
}

static void build(unsigned n, json_t **devs, json_t **sets)
{
        struct kdev_nvidia_gpus gs;
        struct kdev_err err = {0};
        fill(&gs, n);
        int rc = kdev_dra_build_partitionable(&gs, NULL, NULL, devs, sets, &err);
        kdev_nvidia_gpus_clear(&gs);
        if (rc < 0)
                fail_msg("build: %s", err.msg);
        assert_int_equal(rc, n * (1 + PLACEMENTS));
        assert_int_equal(json_array_size(*sets), n);
}

#define SET0 "gpu-0-counter-set"
#define SLICES8                                                                            \
        "\"memory-slice-0\":{\"value\":\"1\"},\"memory-slice-1\":{\"value\":\"1\"},"       \
        "\"memory-slice-2\":{\"value\":\"1\"},\"memory-slice-3\":{\"value\":\"1\"},"       \
        "\"memory-slice-4\":{\"value\":\"1\"},\"memory-slice-5\":{\"value\":\"1\"},"       \
        "\"memory-slice-6\":{\"value\":\"1\"},\"memory-slice-7\":{\"value\":\"1\"}"
#define GPU_COUNTERS                                                                       \
        "{\"memory\":{\"value\":\"81559Mi\"},\"multiprocessors\":{\"value\":\"132\"},"     \
        "\"copy-engines\":{\"value\":\"8\"},\"decoders\":{\"value\":\"7\"},"               \
        "\"jpeg-engines\":{\"value\":\"7\"},\"ofa-engines\":{\"value\":\"1\"}," SLICES8 "}"
#define COMMON0                                                                            \
        "\"productName\":{\"string\":\"NVIDIA H100 80GB HBM3\"},"                          \
        "\"brand\":{\"string\":\"Nvidia\"},\"architecture\":{\"string\":\"Hopper\"},"      \
        "\"cudaComputeCapability\":{\"version\":\"9.0.0\"},"                               \
        "\"driverVersion\":{\"version\":\"550.90.7\"},"                                    \
        "\"cudaDriverVersion\":{\"version\":\"12.4.0\"},"                                  \
        "\"pcieBusID\":{\"string\":\"0000:10:00.0\"},"                                     \
        "\"index\":{\"int\":0},\"minor\":{\"int\":0}"
#define UUID0 "GPU-00000000-aaaa-bbbb-cccc-dddddddddddd"

static void test_placement_names(void **state)
{
        (void)state;
        char buf[KDEV_NVIDIA_DRA_NAME_MAX + 1];
        assert_int_equal(kdev_nvidia_dra_placement_name(0, "1g.10gb", 19, 3, buf, sizeof(buf)),
                         21);
        assert_string_equal(buf, "gpu-0-mig-1g10gb-19-3");
        kdev_nvidia_dra_placement_name(1, "1g.10gb+me", 20, 0, buf, sizeof(buf));
        assert_string_equal(buf, "gpu-1-mig-1g10gb-me-20-0");
        assert_int_equal(kdev_nvidia_dra_placement_name(0, "..", 19, 3, buf, sizeof(buf)),
                         -EINVAL);
        assert_int_equal(kdev_nvidia_dra_placement_name(0, "1g.10gb", 19, 3, buf, 8),
                         -ENAMETOOLONG);
        assert_int_equal(kdev_nvidia_dra_counter_set_name(7, buf, sizeof(buf)), 17);
        assert_string_equal(buf, "gpu-7-counter-set");
        assert_false(kdev_dra_counters_in_own_slice(34));
        assert_true(kdev_dra_counters_in_own_slice(35));
        assert_true(kdev_dra_counters_in_own_slice(36));
}

static void test_counter_set_and_devices(void **state)
{
        (void)state;
        json_t *devs, *sets;
        build(1, &devs, &sets);
        assert_json(sets, "[{\"name\":\"" SET0 "\",\"counters\":" GPU_COUNTERS "}]");
        /* the full GPU first, then the placements in record order */
        assert_string_equal(json_string_value(json_object_get(json_array_get(devs, 0), "name")),
                            "gpu-0");
        assert_string_equal(json_string_value(json_object_get(json_array_get(devs, 1), "name")),
                            "gpu-0-mig-1g10gb-19-0");
        assert_string_equal(json_string_value(json_object_get(json_array_get(devs, 18), "name")),
                            "gpu-0-mig-7g80gb-0-0");
        assert_json(device_named(devs, "gpu-0"),
                    "{\"name\":\"gpu-0\",\"attributes\":{\"type\":{\"string\":\"gpu\"},"
                    "\"uuid\":{\"string\":\"" UUID0 "\"}," COMMON0 "},"
                    "\"capacity\":{\"memory\":{\"value\":\"81559Mi\"},"
                    "\"multiprocessors\":{\"value\":\"132\"}},"
                    "\"consumesCounters\":[{\"counterSet\":\"" SET0 "\",\"counters\":"
                    GPU_COUNTERS "}]}");
        assert_json(device_named(devs, "gpu-0-mig-1g10gb-19-3"),
                    "{\"name\":\"gpu-0-mig-1g10gb-19-3\",\"attributes\":{"
                    "\"type\":{\"string\":\"mig\"},\"parentUUID\":{\"string\":\"" UUID0 "\"},"
                    "\"profile\":{\"string\":\"1g.10gb\"}," COMMON0 "},"
                    "\"capacity\":{\"memory\":{\"value\":\"9984Mi\"},"
                    "\"multiprocessors\":{\"value\":\"16\"},\"copyEngines\":{\"value\":\"1\"},"
                    "\"decoders\":{\"value\":\"1\"},\"encoders\":{\"value\":\"0\"},"
                    "\"jpegEngines\":{\"value\":\"1\"},\"ofaEngines\":{\"value\":\"0\"},"
                    "\"memorySlice3\":{\"value\":\"1\"}},"
                    "\"consumesCounters\":[{\"counterSet\":\"" SET0 "\",\"counters\":{"
                    "\"memory\":{\"value\":\"9984Mi\"},\"multiprocessors\":{\"value\":\"16\"},"
                    "\"copy-engines\":{\"value\":\"1\"},\"decoders\":{\"value\":\"1\"},"
                    "\"jpeg-engines\":{\"value\":\"1\"},"
                    "\"memory-slice-3\":{\"value\":\"1\"}}}]}");
        assert_json(device_named(devs, "gpu-0-mig-3g40gb-9-4"),
                    "{\"name\":\"gpu-0-mig-3g40gb-9-4\",\"attributes\":{"
                    "\"type\":{\"string\":\"mig\"},\"parentUUID\":{\"string\":\"" UUID0 "\"},"
                    "\"profile\":{\"string\":\"3g.40gb\"}," COMMON0 "},"
                    "\"capacity\":{\"memory\":{\"value\":\"40448Mi\"},"
                    "\"multiprocessors\":{\"value\":\"60\"},\"copyEngines\":{\"value\":\"3\"},"
                    "\"decoders\":{\"value\":\"3\"},\"encoders\":{\"value\":\"0\"},"
                    "\"jpegEngines\":{\"value\":\"3\"},\"ofaEngines\":{\"value\":\"0\"},"
                    "\"memorySlice4\":{\"value\":\"1\"},\"memorySlice5\":{\"value\":\"1\"},"
                    "\"memorySlice6\":{\"value\":\"1\"},\"memorySlice7\":{\"value\":\"1\"}},"
                    "\"consumesCounters\":[{\"counterSet\":\"" SET0 "\",\"counters\":{"
                    "\"memory\":{\"value\":\"40448Mi\"},\"multiprocessors\":{\"value\":\"60\"},"
                    "\"copy-engines\":{\"value\":\"3\"},\"decoders\":{\"value\":\"3\"},"
                    "\"jpeg-engines\":{\"value\":\"3\"},"
                    "\"memory-slice-4\":{\"value\":\"1\"},\"memory-slice-5\":{\"value\":\"1\"},"
                    "\"memory-slice-6\":{\"value\":\"1\"},"
                    "\"memory-slice-7\":{\"value\":\"1\"}}}]}");
        /* no placement device carries a uuid, every device one consumption
         * entry within the API limits */
        size_t i;
        json_t *d;
        json_array_foreach(devs, i, d) {
                const json_t *cc = json_object_get(d, "consumesCounters");
                assert_int_equal(json_array_size(cc), 1);
                assert_true(json_array_size(cc) <= KDEV_DRA_DEVICE_MAX_CONSUMPTIONS);
                assert_true(json_object_size(json_object_get(json_array_get(cc, 0),
                                                             "counters")) <=
                            KDEV_DRA_COUNTER_SET_MAX_COUNTERS);
                if (i > 0)
                        assert_null(json_object_get(json_object_get(d, "attributes"), "uuid"));
        }
        json_decref(devs);
        json_decref(sets);
}

static const char *set_name(const json_t *spec, size_t i)
{
        return json_string_value(
                json_object_get(json_array_get(json_object_get(spec, "sharedCounters"), i),
                                "name"));
}

static long long pool_count(const json_t *spec)
{
        return json_integer_value(
                json_object_get(json_object_get(spec, "pool"), "resourceSliceCount"));
}

/* 1.35+: one counter slice of the 8 sets, then 152 devices in 64 + 64 + 24 */
static void test_split_own_slices(void **state)
{
        (void)state;
        json_t *devs, *sets, *specs;
        build(8, &devs, &sets);
        assert_int_equal(json_array_size(devs), 152);
        struct kdev_dra_pool pool = {.node = "node-a", .shared_counters = sets,
                                     .counters_in_own_slice = true};
        struct kdev_err err = {0};
        assert_int_equal(kdev_dra_split(&pool, devs, 3, &specs, &err), 4);
        const json_t *c = json_array_get(specs, 0);
        assert_null(json_object_get(c, "devices"));
        assert_int_equal(json_array_size(json_object_get(c, "sharedCounters")), 8);
        assert_string_equal(set_name(c, 0), "gpu-0-counter-set");
        assert_string_equal(set_name(c, 7), "gpu-7-counter-set");
        assert_json(json_object_get(c, "pool"),
                    "{\"name\":\"node-a\",\"generation\":3,\"resourceSliceCount\":4}");
        assert_string_equal(json_string_value(json_object_get(c, "nodeName")), "node-a");
        static const size_t want[] = {64, 64, 24};
        for (size_t s = 1; s < 4; s++) {
                const json_t *sp = json_array_get(specs, s);
                assert_null(json_object_get(sp, "sharedCounters"));
                assert_int_equal(json_array_size(json_object_get(sp, "devices")), want[s - 1]);
                assert_int_equal(pool_count(sp), 4);
        }
        /* devices in order: slice 2 starts with device 64 (gpu-3's 7th) */
        assert_true(json_equal(
                json_array_get(json_object_get(json_array_get(specs, 2), "devices"), 0),
                json_array_get(devs, 64)));
        json_decref(specs);

        /* nine sets: two counter slices (8 + 1) */
        json_t *nine = json_deep_copy(sets);
        json_t *extra = json_deep_copy(json_array_get(sets, 0));
        json_object_set_new(extra, "name", json_string("gpu-8-counter-set"));
        json_array_append_new(nine, extra);
        pool.shared_counters = nine;
        assert_int_equal(kdev_dra_split(&pool, devs, 1, &specs, &err), 5);
        assert_int_equal(json_array_size(json_object_get(json_array_get(specs, 1),
                                                         "sharedCounters")),
                         1);
        json_decref(specs);
        json_decref(nine);
        json_decref(devs);
        json_decref(sets);
}

/* 1.34: each slice holds two GPUs' sets (2 x 14 counters <= 32) and their
 * 2 x 19 devices (2 x 146 consumed counters <= 1024) */
static void test_split_inline(void **state)
{
        (void)state;
        json_t *devs, *sets, *specs;
        build(8, &devs, &sets);
        struct kdev_dra_pool pool = {.node = "node-a", .shared_counters = sets};
        struct kdev_err err = {0};
        assert_int_equal(kdev_dra_split(&pool, devs, 1, &specs, &err), 4);
        for (size_t s = 0; s < 4; s++) {
                const json_t *sp = json_array_get(specs, s);
                const json_t *d = json_object_get(sp, "devices");
                assert_int_equal(json_array_size(d), 38);
                assert_int_equal(json_array_size(json_object_get(sp, "sharedCounters")), 2);
                assert_int_equal(pool_count(sp), 4);
                char want[32];
                snprintf(want, sizeof(want), "gpu-%zu-counter-set", 2 * s);
                assert_string_equal(set_name(sp, 0), want);
                snprintf(want, sizeof(want), "gpu-%zu", 2 * s + 1);
                assert_string_equal(json_string_value(json_object_get(json_array_get(d, 19),
                                                                      "name")),
                                    want);
                size_t i, used = 0, counters = 0;
                json_t *x;
                json_array_foreach(d, i, x)
                        used += json_object_size(json_object_get(
                                json_array_get(json_object_get(x, "consumesCounters"), 0),
                                "counters"));
                json_array_foreach(json_object_get(sp, "sharedCounters"), i, x)
                        counters += json_object_size(json_object_get(x, "counters"));
                assert_int_equal(used, 2 * 146);
                assert_int_equal(counters, 28);
        }
        json_decref(specs);

        /* a device whose counter set the pool lacks */
        json_t *few = json_array();
        json_array_append(few, json_array_get(sets, 1));
        pool.shared_counters = few;
        assert_int_equal(kdev_dra_split(&pool, devs, 1, &specs, &err), -EINVAL);
        assert_non_null(strstr(err.msg, "consumes counter set gpu-0-counter-set, which the pool"));
        assert_null(specs);
        json_decref(few);
        json_decref(devs);
        json_decref(sets);
}

/* Faulted, unhealthy, and plain GPUs beside partitionable ones */
static void test_health_and_mixed(void **state)
{
        (void)state;
        struct kdev_nvidia_gpus gs;
        struct kdev_err err = {0};
        json_t *devs, *sets;
        fill(&gs, 3);
        gs.gpus[1].faulted = true;
        free(gs.gpus[2].placements);
        gs.gpus[2].placements = NULL;
        gs.gpus[2].n_placements = 0;
        assert_int_equal(kdev_dra_build_partitionable(&gs, NULL, NULL, &devs, &sets, &err), 20);
        assert_int_equal(json_array_size(sets), 1);
        assert_null(json_object_get(json_array_get(devs, 19), "consumesCounters"));
        assert_string_equal(json_string_value(json_object_get(json_array_get(devs, 19), "name")),
                            "gpu-2");
        json_decref(devs);
        json_decref(sets);

        const char *bad[] = {UUID0};
        struct kdev_dra_health h = {.unhealthy = bad, .n_unhealthy = 1};
        assert_int_equal(kdev_dra_build_partitionable(&gs, &h, NULL, &devs, &sets, &err), 1);
        assert_int_equal(json_array_size(sets), 0);
        json_decref(devs);
        json_decref(sets);

        /* a placement past the GPU's memory slices */
        gs.gpus[0].placements[0].placement_start = 8;
        assert_int_equal(kdev_dra_build_partitionable(&gs, NULL, NULL, &devs, &sets, &err),
                         -EINVAL);
        assert_string_equal(err.msg,
                            "GPU 0: placement gpu-0-mig-1g10gb-19-0 ends past memory slice 8");
        assert_null(devs);
        assert_null(sets);
        kdev_nvidia_gpus_clear(&gs);
}

/* The wire shapes: v1 keeps consumesCounters on the device and the
 * sharedCounters of the spec as they are; v1beta1 moves the device's keys,
 * consumesCounters included, under "basic" (BasicDevice), sharedCounters
 * staying in the spec. */
static void test_wire(void **state)
{
        (void)state;
        json_t *devs, *sets, *specs;
        build(1, &devs, &sets);
        struct kdev_dra_pool pool = {.node = "node-a", .shared_counters = sets};
        struct kdev_err err = {0};
        assert_int_equal(kdev_dra_split(&pool, devs, 1, &specs, &err), 1);
        struct kdev_kube_config cfg = {.server = "http://127.0.0.1:1"};
        const char *versions[] = {"v1", "v1beta1"};
        for (size_t v = 0; v < 2; v++) {
                struct kdev_kube_opts o = {.version = versions[v]};
                struct kdev_kube *k = kdev_kube_new(&cfg, &o, &err);
                assert_non_null(k);
                json_t *slice = json_pack("{s:{s:s}, s:O}", "metadata", "name", "s",
                                          "spec", json_array_get(specs, 0));
                assert_int_equal(kdev_kube_slice_to_wire(k, slice), 0);
                const json_t *spec = json_object_get(slice, "spec");
                assert_true(json_equal(json_object_get(spec, "sharedCounters"), sets));
                const json_t *d = json_array_get(json_object_get(spec, "devices"), 3);
                const json_t *cc = v == 0 ? json_object_get(d, "consumesCounters")
                                          : json_object_get(json_object_get(d, "basic"),
                                                            "consumesCounters");
                assert_true(json_equal((json_t *)cc,
                                       json_object_get(json_array_get(devs, 3),
                                                       "consumesCounters")));
                if (v == 1)
                        assert_null(json_object_get(d, "consumesCounters"));
                assert_int_equal(kdev_kube_slice_from_wire(k, slice), 0);
                assert_true(json_equal(json_object_get(slice, "spec"),
                                       json_array_get(specs, 0)));
                json_decref(slice);
                kdev_kube_free(k);
        }
        json_decref(specs);
        json_decref(devs);
        json_decref(sets);
}

int main(void)
{
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_placement_names),
                cmocka_unit_test(test_counter_set_and_devices),
                cmocka_unit_test(test_split_own_slices),
                cmocka_unit_test(test_split_inline),
                cmocka_unit_test(test_health_and_mixed),
                cmocka_unit_test(test_wire),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
