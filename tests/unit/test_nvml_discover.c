/* NVML discovery over every shipped mock topology, with exact values, plus
 * the fault paths (lost GPU, reset required, injected errors, sysfs). */
#define _XOPEN_SOURCE 700
#include <errno.h>
#include <limits.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/stat.h>

#include <cmocka.h>

#include "mock_fixture.h"
#include "nvml/discover.h"
#include "nvml/loader.h"

#define MIB(x) ((unsigned long long)(x) << 20)

struct fx {
        struct mock_nvml m;
        char sysfs[64];
};

static int setup(void **state)
{
        struct fx *f = calloc(1, sizeof(*f));
        if (mock_nvml_open(&f->m) != 0 || mock_tmpdir(f->sysfs, sizeof(f->sysfs),
                                                      "kdev-nvml-sysfs") != 0)
                return -1;
        *state = f;
        return 0;
}

static int teardown(void **state)
{
        struct fx *f = *state;
        mock_rmtree(f->sysfs);
        mock_nvml_close(&f->m);
        free(f);
        return 0;
}

/* Loads |file| into the mock, writes its sysfs NUMA files and discovers. */
static struct kdev_gpu_set *discover(struct fx *f, const char *file)
{
        struct kdev_gpu_set *set =
                mock_nvml_discover(&f->m, file, f->sysfs, KDEV_NVML_DISCOVER_LINKS);
        assert_int_equal(kdev_nvml_refs(f->m.lib), 0);
        assert_string_equal(set->driver_version, "550.90.07");
        assert_int_equal(set->cuda_driver_version, 12040);
        assert_true(set->has_links);
        return set;
}

struct exp_gpu {
        unsigned index;
        const char *uuid;
        const char *bus;
        const char *sysfs;
        unsigned minor;
        int numa;
};

struct exp_model {
        const char *name;
        unsigned long long memory;
        unsigned device_id;
        int cc_major, cc_minor;
        unsigned arch;
        const char *family;
        unsigned n_profiles;
        unsigned sms;          /* whole-GPU multiprocessors */
};

static void check_gpus(const struct kdev_gpu_set *set, const struct exp_model *m,
                       const struct exp_gpu *g, size_t n)
{
        assert_int_equal(set->n_gpus, n);
        for (size_t i = 0; i < n; i++) {
                const struct kdev_gpu *x = &set->gpus[i];
                assert_int_equal(x->fault, NVML_SUCCESS);
                assert_int_equal(x->index, g[i].index);
                assert_string_equal(x->uuid, g[i].uuid);
                assert_string_equal(x->pci_bus_id, g[i].bus);
                assert_string_equal(x->sysfs_bus_id, g[i].sysfs);
                assert_int_equal(x->minor, g[i].minor);
                assert_int_equal(x->numa_node, g[i].numa);
                assert_string_equal(x->name, m->name);
                assert_int_equal(x->memory_ret, NVML_SUCCESS);
                assert_int_equal(x->memory_total, m->memory);
                assert_int_equal(x->pci_device_id, m->device_id);
                assert_int_equal(x->cc_major, m->cc_major);
                assert_int_equal(x->cc_minor, m->cc_minor);
                assert_int_equal(x->arch, m->arch);
                assert_string_equal(x->family, m->family);
                assert_true(x->has_brand);
                assert_int_equal(x->brand, NVML_BRAND_NVIDIA);
                assert_int_equal(x->multiprocessors, m->sms);
                assert_true(x->mig_capable);
                assert_int_equal(x->n_mig_profiles, m->n_profiles);
                assert_ptr_equal(kdev_gpu_set_find(set, g[i].uuid), x);
        }
        assert_null(kdev_gpu_set_find(set, "GPU-none"));
}

static const struct exp_model a100_80 = { "NVIDIA A100-SXM4-80GB", MIB(81920), 0x20B210DE, 8, 0,
                                          NVML_DEVICE_ARCH_AMPERE, "ampere", 7, 108 };
static const struct exp_model h100 = { "NVIDIA H100 80GB HBM3", MIB(81559), 0x233010DE, 9, 0,
                                       NVML_DEVICE_ARCH_HOPPER, "hopper", 7, 132 };
static const struct exp_model h200_nvl = { "NVIDIA H200 NVL", MIB(143771), 0x233B10DE, 9, 0,
                                           NVML_DEVICE_ARCH_HOPPER, "hopper", 7, 132 };

static void test_a100_8x_nvswitch(void **state)
{
        struct fx *f = *state;
        static const struct exp_gpu g[] = {
                { 0, "GPU-229bd551-5748-d6e2-7ccc-7d08184d1f9b", "00000000:07:00.0", "0000:07:00.0", 0, 3 },
                { 1, "GPU-c798a445-493b-ae92-72c0-293a6c1de8c1", "00000000:0F:00.0", "0000:0f:00.0", 1, 3 },
                { 2, "GPU-9c830235-28b3-005d-d65a-8805f4733086", "00000000:47:00.0", "0000:47:00.0", 2, 1 },
                { 3, "GPU-b54faf61-c2d0-a26f-8278-dd3405fab04e", "00000000:4E:00.0", "0000:4e:00.0", 3, 1 },
                { 4, "GPU-e2bdb8a7-8eb0-4189-6300-81e1bf611054", "00000000:87:00.0", "0000:87:00.0", 4, 7 },
                { 5, "GPU-cb7c6c6c-6c16-7b6f-97e4-20c3427c6072", "00000000:90:00.0", "0000:90:00.0", 5, 7 },
                { 6, "GPU-bacb4439-d542-83aa-2d96-43fc7be898d3", "00000000:B7:00.0", "0000:b7:00.0", 6, 5 },
                { 7, "GPU-6f33b75d-1507-77a9-be90-9a84deb6cc24", "00000000:BD:00.0", "0000:bd:00.0", 7, 5 },
        };
        struct kdev_gpu_set *set = discover(f, TOPO("a100-sxm4-80gb-8x-nvswitch.yaml"));
        check_gpus(set, &a100_80, g, 8);
        assert_int_equal(set->n_skipped, 0);
        for (size_t i = 0; i < 8; i++) {
                const struct kdev_gpu *x = &set->gpus[i];
                assert_int_equal(x->pci_subsystem_id, 0x147F10DE);
                assert_int_equal(x->mig_current, 0);
                assert_int_equal(x->mig_pending, 0);
                assert_null(x->migs);
                assert_int_equal(x->n_nvlinks, 12);
                for (size_t k = 0; k < 12; k++) {
                        char want[32];
                        snprintf(want, sizeof(want), "00000000:C%zu:00.0", 1 + k % 6);
                        assert_int_equal(x->nvlinks[k].link, k);
                        assert_string_equal(x->nvlinks[k].remote_bus_id, want);
                        assert_int_equal(x->nvlinks[k].remote_gpu, -1);
                }
                for (size_t j = 0; j < 8; j++) {
                        nvmlGpuTopologyLevel_t want = i == j ? NVML_TOPOLOGY_INTERNAL
                                                      : i / 2 == j / 2 ? NVML_TOPOLOGY_MULTIPLE
                                                      : i / 4 == j / 4 ? NVML_TOPOLOGY_NODE
                                                                       : NVML_TOPOLOGY_SYSTEM;
                        assert_int_equal(kdev_gpu_set_level(set, i, j), want);
                        assert_int_equal(kdev_gpu_set_nvlinks(set, i, j), 0);
                }
        }
        /* possible MIG profiles of the 80 GB part, by index */
        static const unsigned idx[] = { 0, 1, 2, 3, 4, 7, 9 };
        static const unsigned ids[] = { 19, 14, 9, 5, 0, 20, 15 };
        static const unsigned long long mem[] = { 9856, 19968, 40192, 40192, 80384, 9856, 19968 };
        for (size_t k = 0; k < 7; k++) {
                assert_int_equal(set->gpus[0].mig_profiles[k].index, idx[k]);
                assert_int_equal(set->gpus[0].mig_profiles[k].info.id, ids[k]);
                assert_int_equal(set->gpus[0].mig_profiles[k].info.memorySizeMB, mem[k]);
        }
        kdev_gpu_set_free(set);
}

static void test_h100_8x_nvswitch(void **state)
{
        struct fx *f = *state;
        static const struct exp_gpu g[] = {
                { 0, "GPU-eb4f6c0b-b381-0e1e-fb4a-cf70a1a2805e", "00000000:18:00.0", "0000:18:00.0", 0, 0 },
                { 1, "GPU-d8cd89cd-fb85-bd29-f5e7-826260cc2255", "00000000:2A:00.0", "0000:2a:00.0", 1, 0 },
                { 2, "GPU-c6c362bb-3458-2b4f-ce42-acf8618a50f9", "00000000:3A:00.0", "0000:3a:00.0", 2, 0 },
                { 3, "GPU-e468c3ab-0f10-9911-df74-2436cb131826", "00000000:5D:00.0", "0000:5d:00.0", 3, 0 },
                { 4, "GPU-fe76d5dd-bdd7-3218-ca20-140883e2c7b8", "00000000:9A:00.0", "0000:9a:00.0", 4, 1 },
                { 5, "GPU-a288dd1f-391c-ec59-8d1d-b582a91b7759", "00000000:AB:00.0", "0000:ab:00.0", 5, 1 },
                { 6, "GPU-35ca105b-9262-0c50-b916-71c8b2d581d5", "00000000:BA:00.0", "0000:ba:00.0", 6, 1 },
                { 7, "GPU-c64278a1-b3c9-975f-f3b4-2ad25c978906", "00000000:DB:00.0", "0000:db:00.0", 7, 1 },
        };
        struct kdev_gpu_set *set = discover(f, TOPO("h100-80gb-8x-nvswitch.yaml"));
        check_gpus(set, &h100, g, 8);
        for (size_t i = 0; i < 8; i++) {
                assert_int_equal(set->gpus[i].n_nvlinks, 18);
                assert_string_equal(set->gpus[i].nvlinks[17].remote_bus_id, "00000000:06:00.0");
                for (size_t j = 0; j < 8; j++) {
                        nvmlGpuTopologyLevel_t want = i == j ? NVML_TOPOLOGY_INTERNAL
                                                      : i / 4 == j / 4 ? NVML_TOPOLOGY_NODE
                                                                       : NVML_TOPOLOGY_SYSTEM;
                        assert_int_equal(kdev_gpu_set_level(set, i, j), want);
                        assert_int_equal(kdev_gpu_set_nvlinks(set, i, j), 0);
                }
        }
        /* H100 profile memory (nvidia-smi mig -lgip) */
        assert_int_equal(set->gpus[0].mig_profiles[0].info.memorySizeMB, 9984);
        assert_int_equal(set->gpus[0].mig_profiles[0].info.multiprocessorCount, 16);
        assert_int_equal(set->gpus[0].mig_profiles[4].info.memorySizeMB, 81152);
        assert_int_equal(set->gpus[0].mig_profiles[4].info.multiprocessorCount, 132);
        assert_int_equal(set->gpus[0].mig_profiles[6].index, 9);
        assert_int_equal(set->gpus[0].mig_profiles[6].info.memorySizeMB, 20096);
        kdev_gpu_set_free(set);
}

static void test_h200_nvl_pairs(void **state)
{
        struct fx *f = *state;
        static const struct exp_gpu g[] = {
                { 0, "GPU-59796164-c626-db61-eee7-66572ebef2ef", "00000000:1B:00.0", "0000:1b:00.0", 0, 0 },
                { 1, "GPU-7e527414-0bac-bbbc-e316-ea8921487146", "00000000:3B:00.0", "0000:3b:00.0", 1, 0 },
                { 2, "GPU-04879f5d-19d7-803a-1faf-d8a3c47f1d02", "00000000:9C:00.0", "0000:9c:00.0", 2, 1 },
                { 3, "GPU-3df3207a-fac5-f53c-72bb-c0aa50e21533", "00000000:BC:00.0", "0000:bc:00.0", 3, 1 },
        };
        struct kdev_gpu_set *set = discover(f, TOPO("h200-nvl-4x-pcie-2numa.yaml"));
        check_gpus(set, &h200_nvl, g, 4);
        for (size_t i = 0; i < 4; i++) {
                const struct kdev_gpu *x = &set->gpus[i];
                size_t peer = i ^ 1;
                assert_int_equal(x->n_nvlinks, 18);
                for (size_t k = 0; k < 18; k++) {
                        assert_int_equal(x->nvlinks[k].link, k);
                        assert_string_equal(x->nvlinks[k].remote_bus_id, g[peer].bus);
                        assert_int_equal(x->nvlinks[k].remote_gpu, (int)peer);
                }
                for (size_t j = 0; j < 4; j++) {
                        nvmlGpuTopologyLevel_t want = i == j ? NVML_TOPOLOGY_INTERNAL
                                                      : j == peer ? NVML_TOPOLOGY_NODE
                                                                  : NVML_TOPOLOGY_SYSTEM;
                        assert_int_equal(kdev_gpu_set_level(set, i, j), want);
                        assert_int_equal(kdev_gpu_set_nvlinks(set, i, j), j == peer ? 18 : 0);
                }
        }
        assert_int_equal(set->gpus[0].mig_profiles[6].info.memorySizeMB, 33024);
        assert_int_equal(set->gpus[0].mig_profiles[4].info.memorySizeMB, 143104);
        kdev_gpu_set_free(set);
}

static void test_16x_two_islands(void **state)
{
        struct fx *f = *state;
        static const char *const uuids[] = {
                "GPU-13c8b481-89f2-098d-5c7c-7d81cde78dd3", "GPU-eadb43db-f69d-fd4e-885c-19f0bc4d7a0b",
                "GPU-4d502445-f348-a6fe-8c9f-f4a075a5d35c", "GPU-f22723c2-8eda-2998-6ec3-4abc4aeaf92d",
                "GPU-e6a8cbef-6ebe-e840-ea2b-f02c49c44b8a", "GPU-385c5656-1871-593e-0d56-54bd36cdc194",
                "GPU-e8918603-7b98-4707-13b8-e05f5f25b396", "GPU-312d5211-e271-b251-0a5d-aab33d6b55e3",
                "GPU-db384cc7-c4a3-ee8b-680a-817c43f76c65", "GPU-8804c935-e11b-9a35-8908-fdcdbb069c40",
                "GPU-caf8ff57-d8a3-f271-e553-50f99a1e842b", "GPU-11688f30-30bf-16ea-09ae-f932aeddb37e",
                "GPU-db3015d5-655f-9625-8799-14ff62d4ef14", "GPU-ab6118ab-7616-e156-81a0-48edda47dcac",
                "GPU-ac396da2-6b6a-0a4e-6c57-8590fe8f332a", "GPU-f56a0ce8-823a-a156-33fc-2ebd7090de99",
        };
        static const char *const buses[] = { "05", "06", "0C", "0D", "45", "46", "4C", "4D",
                                             "85", "86", "8C", "8D", "C5", "C6", "CC", "CD" };
        struct exp_gpu g[16];
        char bus[16][32], sys[16][32];
        for (unsigned i = 0; i < 16; i++) {
                snprintf(bus[i], sizeof(bus[i]), "00000000:%s:00.0", buses[i]);
                snprintf(sys[i], sizeof(sys[i]), "0000:%c%c:00.0", buses[i][0] | 0x20,
                         buses[i][1] | 0x20);
                g[i] = (struct exp_gpu){ i, uuids[i], bus[i], sys[i], i, i < 8 ? 0 : 1 };
        }
        struct kdev_gpu_set *set = discover(f, TOPO("a100-sxm4-80gb-16x-2islands.yaml"));
        check_gpus(set, &a100_80, g, 16);
        for (size_t i = 0; i < 16; i++) {
                assert_int_equal(set->gpus[i].n_nvlinks, 10);
                for (size_t j = 0; j < 16; j++) {
                        nvmlGpuTopologyLevel_t want = i == j ? NVML_TOPOLOGY_INTERNAL
                                                      : i / 2 == j / 2 ? NVML_TOPOLOGY_SINGLE
                                                      : i / 4 == j / 4 ? NVML_TOPOLOGY_MULTIPLE
                                                      : i / 8 == j / 8 ? NVML_TOPOLOGY_NODE
                                                                       : NVML_TOPOLOGY_SYSTEM;
                        unsigned links = i == j ? 0 : i / 2 == j / 2 ? 4 : i / 8 == j / 8 ? 1 : 0;
                        assert_int_equal(kdev_gpu_set_level(set, i, j), want);
                        assert_int_equal(kdev_gpu_set_nvlinks(set, i, j), links);
                }
        }
        kdev_gpu_set_free(set);
}

static void test_display_gpu_skipped(void **state)
{
        struct fx *f = *state;
        static const struct exp_gpu g[] = {
                { 0, "GPU-3617538c-b8b4-821d-2b60-14925a6bbfee", "00000000:01:00.0", "0000:01:00.0", 0, 0 },
                { 1, "GPU-f5988fcd-d3b2-3d75-1b3f-3f5b877ff5f6", "00000000:47:00.0", "0000:47:00.0", 1, 0 },
                { 3, "GPU-67a8549b-9460-deed-06c1-7199374ca24a", "00000000:C1:00.0", "0000:c1:00.0", 3, 0 },
                { 4, "GPU-64a4b484-abbd-f4b5-8fdd-f870f0b60df3", "00000000:C2:00.0", "0000:c2:00.0", 4, 0 },
        };
        struct kdev_gpu_set *set = discover(f, TOPO("dgx-station-a100-display.yaml"));
        check_gpus(set, &a100_80, g, 4);
        assert_int_equal(set->n_skipped, 1);
        assert_null(kdev_gpu_set_find(set, "GPU-748e5577-b539-1b50-4b45-a9b26b03a580"));
        for (size_t i = 0; i < 4; i++) {
                assert_int_equal(set->gpus[i].n_nvlinks, 12);
                for (size_t j = 0; j < 4; j++) {
                        assert_int_equal(kdev_gpu_set_level(set, i, j),
                                         i == j ? NVML_TOPOLOGY_INTERNAL : NVML_TOPOLOGY_NODE);
                        assert_int_equal(kdev_gpu_set_nvlinks(set, i, j), i == j ? 0 : 4);
                }
        }
        kdev_gpu_set_free(set);
}

struct exp_mig {
        unsigned index;
        const char *uuid;
        const char *name;
        unsigned gi, ci;
        unsigned gi_index, gi_id, gi_start, gi_size;
        unsigned ci_index, ci_size;
        nvmlDeviceAttributes_t attr;
};

static void check_migs(const struct kdev_gpu *g, const struct exp_mig *m, size_t n)
{
        assert_int_equal(g->mig_current, NVML_DEVICE_MIG_ENABLE);
        assert_int_equal(g->mig_max, 7);
        assert_int_equal(g->n_migs, n);
        for (size_t i = 0; i < n; i++) {
                const struct kdev_mig_device *x = &g->migs[i];
                assert_int_equal(x->index, m[i].index);
                assert_string_equal(x->uuid, m[i].uuid);
                assert_string_equal(x->name, m[i].name);
                assert_int_equal(x->gi_id, m[i].gi);
                assert_int_equal(x->ci_id, m[i].ci);
                assert_int_equal(x->gi_profile_index, m[i].gi_index);
                assert_int_equal(x->gi_profile.id, m[i].gi_id);
                assert_int_equal(x->gi_profile.sliceCount, m[i].attr.gpuInstanceSliceCount);
                assert_int_equal(x->gi_profile.memorySizeMB, m[i].attr.memorySizeMB);
                assert_int_equal(x->gi_placement.start, m[i].gi_start);
                assert_int_equal(x->gi_placement.size, m[i].gi_size);
                assert_int_equal(x->ci_profile_index, m[i].ci_index);
                assert_int_equal(x->ci_profile.id, m[i].ci_index);
                assert_int_equal(x->ci_profile.sliceCount, m[i].attr.computeInstanceSliceCount);
                assert_int_equal(x->ci_placement.start, 0);
                assert_int_equal(x->ci_placement.size, m[i].ci_size);
                assert_memory_equal(&x->attributes, &m[i].attr, sizeof(x->attributes));
                assert_int_equal(x->memory_ret, NVML_SUCCESS);
                assert_int_equal(x->memory_total, MIB(m[i].attr.memorySizeMB));
        }
}

static void test_mig_a100_40gb(void **state)
{
        struct fx *f = *state;
        struct kdev_gpu_set *set = discover(f, TOPO("mig-a100-40gb.yaml"));
        assert_int_equal(set->n_gpus, 4);
        for (size_t i = 0; i < 4; i++) {
                assert_string_equal(set->gpus[i].name, "NVIDIA A100-SXM4-40GB");
                assert_int_equal(set->gpus[i].memory_total, MIB(40960));
                assert_int_equal(set->gpus[i].pci_device_id, 0x20B010DE);
                assert_true(set->gpus[i].mig_capable);
                assert_int_equal(set->gpus[i].n_mig_profiles, 7);
                assert_int_equal(set->gpus[i].n_nvlinks, 0);   /* ports, none connected */
                /* SMs of a whole GPU only: GPUs 0-2 are in MIG mode */
                assert_int_equal(set->gpus[i].multiprocessors, i == 3 ? 108 : 0);
                assert_true(set->gpus[i].has_brand);
                assert_int_equal(set->gpus[i].brand, NVML_BRAND_NVIDIA);
        }
        static const struct exp_mig g0[] = {
                { 0, "MIG-59bcc04e-5cf6-b753-ab18-f13e8543556f", "NVIDIA A100-SXM4-40GB MIG 3g.20gb",
                  2, 0, 2, 9, 4, 4, 2, 3, { 42, 3, 2, 0, 0, 0, 3, 3, 19968 } },
                { 1, "MIG-9d0efe1e-fdc2-4aea-57e7-810aa03ca6ce", "NVIDIA A100-SXM4-40GB MIG 2g.10gb",
                  3, 0, 1, 14, 0, 2, 1, 2, { 28, 2, 1, 0, 0, 0, 2, 2, 9856 } },
                { 2, "MIG-d49257bf-597e-857d-3bb4-e6384c9909cc", "NVIDIA A100-SXM4-40GB MIG 1g.5gb",
                  9, 0, 0, 19, 2, 1, 0, 1, { 14, 1, 0, 0, 0, 0, 1, 1, 4864 } },
                { 3, "MIG-cc362666-f6d1-a63a-ddd2-38044c0c64a2", "NVIDIA A100-SXM4-40GB MIG 1g.5gb",
                  10, 0, 0, 19, 3, 1, 0, 1, { 14, 1, 0, 0, 0, 0, 1, 1, 4864 } },
        };
        static const struct exp_mig g1[] = {
                { 0, "MIG-fa0a443e-a85c-8cba-33fa-10b94f0ea046", "NVIDIA A100-SXM4-40GB MIG 1g.5gb+me",
                  7, 0, 7, 20, 0, 1, 0, 1, { 14, 1, 1, 0, 1, 1, 1, 1, 4864 } },
                { 1, "MIG-13018ca6-7bdc-00c0-5fef-20d32e6a3980", "NVIDIA A100-SXM4-40GB MIG 1g.10gb",
                  3, 0, 9, 15, 2, 2, 0, 1, { 14, 1, 1, 0, 0, 0, 1, 1, 9856 } },
                { 2, "MIG-3765aac0-d923-9d91-f7d4-9ab6bac2329a", "NVIDIA A100-SXM4-40GB MIG 1g.10gb",
                  5, 0, 9, 15, 4, 2, 0, 1, { 14, 1, 1, 0, 0, 0, 1, 1, 9856 } },
                { 3, "MIG-f77e8b45-cbe6-cf64-aa48-e4cad680f3d8", "NVIDIA A100-SXM4-40GB MIG 1g.5gb",
                  13, 0, 0, 19, 6, 1, 0, 1, { 14, 1, 0, 0, 0, 0, 1, 1, 4864 } },
        };
        check_migs(&set->gpus[0], g0, 4);
        check_migs(&set->gpus[1], g1, 4);
        /* MIG enabled, no MIG devices */
        check_migs(&set->gpus[2], NULL, 0);
        /* MIG disabled */
        assert_int_equal(set->gpus[3].mig_current, NVML_DEVICE_MIG_DISABLE);
        assert_int_equal(set->gpus[3].mig_pending, NVML_DEVICE_MIG_DISABLE);
        assert_int_equal(set->gpus[3].n_migs, 0);
        assert_int_equal(kdev_gpu_set_level(set, 0, 1), NVML_TOPOLOGY_MULTIPLE);
        assert_int_equal(kdev_gpu_set_level(set, 1, 2), NVML_TOPOLOGY_SYSTEM);
        /* possible profiles, index -> driver id (nvidia-smi mig -lgip) */
        static const unsigned idx[] = { 0, 1, 2, 3, 4, 7, 9 };
        static const unsigned ids[] = { 19, 14, 9, 5, 0, 20, 15 };
        static const unsigned long long mem[] = { 4864, 9856, 19968, 19968, 40192, 4864, 9856 };
        for (size_t k = 0; k < 7; k++) {
                assert_int_equal(set->gpus[3].mig_profiles[k].index, idx[k]);
                assert_int_equal(set->gpus[3].mig_profiles[k].info.id, ids[k]);
                assert_int_equal(set->gpus[3].mig_profiles[k].info.memorySizeMB, mem[k]);
        }
        kdev_gpu_set_free(set);
}

static void test_mig_h200(void **state)
{
        struct fx *f = *state;
        struct kdev_gpu_set *set = discover(f, TOPO("mig-h200.yaml"));
        assert_int_equal(set->n_gpus, 3);
        assert_string_equal(set->gpus[0].name, "NVIDIA H200");
        assert_int_equal(set->gpus[0].memory_total, MIB(143771));
        assert_int_equal(set->gpus[0].pci_device_id, 0x233510DE);
        static const struct exp_mig g0[] = {
                { 0, "MIG-e07b30a0-8e2b-655d-e887-7503a42491e7", "NVIDIA H200 MIG 1g.18gb+me",
                  7, 0, 7, 20, 0, 1, 0, 1, { 16, 1, 7, 0, 7, 1, 1, 1, 16384 } },
                { 1, "MIG-6c601527-6867-f6f6-2a8e-f6d4920c8e35", "NVIDIA H200 MIG 1g.35gb",
                  3, 0, 9, 15, 2, 2, 0, 1, { 26, 1, 1, 0, 1, 0, 1, 1, 33024 } },
                { 2, "MIG-17e58271-389d-ae76-1035-a3d7660daf5c", "NVIDIA H200 MIG 2g.35gb",
                  5, 0, 1, 14, 4, 2, 1, 2, { 32, 2, 2, 0, 2, 0, 2, 2, 33024 } },
                { 3, "MIG-9b5b6c0e-3537-4802-5181-4fdbb893072e", "NVIDIA H200 MIG 1g.18gb",
                  13, 0, 0, 19, 6, 1, 0, 1, { 16, 1, 1, 0, 1, 0, 1, 1, 16384 } },
        };
        static const struct exp_mig g1[] = {
                { 0, "MIG-f5a42fc8-aaff-5fc2-c671-584864cfc0db", "NVIDIA H200 MIG 3g.71gb",
                  2, 0, 2, 9, 4, 4, 2, 3, { 60, 3, 3, 0, 3, 0, 3, 3, 71168 } },
                { 1, "MIG-1ef4e53e-e818-bf5c-d1ad-1fb3a5330cbf", "NVIDIA H200 MIG 1g.35gb",
                  3, 0, 9, 15, 0, 2, 0, 1, { 26, 1, 1, 0, 1, 0, 1, 1, 33024 } },
                { 2, "MIG-73ed1b37-c534-eec5-8366-1e7d58a18396", "NVIDIA H200 MIG 1g.35gb",
                  4, 0, 9, 15, 2, 2, 0, 1, { 26, 1, 1, 0, 1, 0, 1, 1, 33024 } },
        };
        check_migs(&set->gpus[0], g0, 4);
        check_migs(&set->gpus[1], g1, 3);
        assert_int_equal(set->gpus[2].mig_current, NVML_DEVICE_MIG_DISABLE);
        assert_int_equal(set->gpus[2].mig_pending, NVML_DEVICE_MIG_ENABLE);
        assert_int_equal(set->gpus[2].n_migs, 0);
        kdev_gpu_set_free(set);
}

static void test_faults(void **state)
{
        struct fx *f = *state;
        const char *topo = TOPO("h100-80gb-8x-nvswitch.yaml");
        setenv("KDEV_MOCK_NVML_TOPOLOGY", topo, 1);
        f->m.reset();
        assert_int_equal(f->m.set_lost("GPU-c6c362bb-3458-2b4f-ce42-acf8618a50f9", 1),
                         NVML_SUCCESS);
        assert_int_equal(f->m.set_reset("GPU-d8cd89cd-fb85-bd29-f5e7-826260cc2255", 1),
                         NVML_SUCCESS);
        assert_int_equal(f->m.set_lost("GPU-nope", 1), NVML_ERROR_NOT_FOUND);
        struct kdev_nvml_discover_options o = { .sysfs_root = f->sysfs,
                                                .flags = KDEV_NVML_DISCOVER_LINKS };
        struct kdev_gpu_set *set = NULL;
        struct kdev_err e;
        kdev_err_clear(&e);
        int rc = kdev_nvml_discover(f->m.lib, &o, &set, &e);
        if (rc != 0)
                fail_msg("%s", e.msg);
        assert_int_equal(set->n_gpus, 8);
        /* lost: nothing but the index */
        assert_int_equal(set->gpus[2].fault, NVML_ERROR_GPU_IS_LOST);
        assert_int_equal(set->gpus[2].index, 2);
        assert_string_equal(set->gpus[2].uuid, "");
        assert_int_equal(set->gpus[2].n_nvlinks, 0);
        /* reset required: identity read, the rest not */
        assert_int_equal(set->gpus[1].fault, NVML_ERROR_RESET_REQUIRED);
        assert_string_equal(set->gpus[1].uuid, "GPU-d8cd89cd-fb85-bd29-f5e7-826260cc2255");
        assert_string_equal(set->gpus[1].pci_bus_id, "00000000:2A:00.0");
        assert_int_equal(set->gpus[1].memory_ret, NVML_ERROR_RESET_REQUIRED);
        assert_int_equal(set->gpus[1].memory_total, 0);
        /* the MIG mode is read right after the UUID, before the fault */
        assert_true(set->gpus[1].mig_mode_known);
        assert_false(set->gpus[2].mig_mode_known);
        assert_true(set->gpus[0].mig_mode_known);
        assert_int_equal(set->gpus[0].fault, NVML_SUCCESS);
        assert_int_equal(set->gpus[0].numa_node, -1);    /* no sysfs files written */
        assert_int_equal(kdev_gpu_set_level(set, 0, 3), NVML_TOPOLOGY_NODE);
        kdev_gpu_set_free(set);

        /* an error NVIDIA treats as fatal: compute capability */
        f->m.reset();
        assert_int_equal(f->m.set_error("GPU-e468c3ab-0f10-9911-df74-2436cb131826",
                                      "nvmlDeviceGetCudaComputeCapability", NVML_ERROR_UNKNOWN),
                         NVML_SUCCESS);
        kdev_err_clear(&e);
        assert_int_equal(kdev_nvml_discover(f->m.lib, &o, &set, &e), -EIO);
        assert_null(set);
        assert_string_equal(e.msg, "GPU 3: nvmlDeviceGetCudaComputeCapability: Unknown Error");
        assert_int_equal(kdev_nvml_refs(f->m.lib), 0);

        /* MIG mode NO_PERMISSION fails too (NVIDIA issue #399) */
        f->m.reset();
        f->m.set_error("GPU-eb4f6c0b-b381-0e1e-fb4a-cf70a1a2805e", "nvmlDeviceGetMigMode",
                     NVML_ERROR_NO_PERMISSION);
        assert_int_equal(kdev_nvml_discover(f->m.lib, &o, &set, &e), -EACCES);
        assert_string_equal(e.msg, "GPU 0: nvmlDeviceGetMigMode: Insufficient Permissions");

        /* a failing link query */
        f->m.reset();
        f->m.set_error("GPU-eb4f6c0b-b381-0e1e-fb4a-cf70a1a2805e", "nvmlDeviceGetNvLinkState",
                     NVML_ERROR_UNKNOWN);
        assert_int_equal(kdev_nvml_discover(f->m.lib, &o, &set, &e), -EIO);
        assert_string_equal(e.msg, "GPU 0: nvmlDeviceGetNvLinkState(0): Unknown Error");
        /* ... which is not read without the flag */
        o.flags = 0;
        assert_int_equal(kdev_nvml_discover(f->m.lib, &o, &set, &e), 0);
        assert_false(set->has_links);
        assert_int_equal(set->gpus[0].n_nvlinks, 0);
        assert_int_equal(kdev_gpu_set_level(set, 0, 1), NVML_TOPOLOGY_INTERNAL);
        assert_int_equal(kdev_gpu_set_nvlinks(set, 0, 1), 0);
        kdev_gpu_set_free(set);

        /* parent memory NO_PERMISSION on a MIG GPU: recorded, MIG devices still read */
        setenv("KDEV_MOCK_NVML_TOPOLOGY", TOPO("mig-a100-40gb.yaml"), 1);
        f->m.reset();
        f->m.set_error("GPU-c1ae70ed-64b5-7842-b2ed-e9039613ae69", "nvmlDeviceGetMemoryInfo",
                     NVML_ERROR_NO_PERMISSION);
        assert_int_equal(kdev_nvml_discover(f->m.lib, &o, &set, &e), 0);
        assert_int_equal(set->gpus[0].memory_ret, NVML_ERROR_NO_PERMISSION);
        assert_int_equal(set->gpus[0].memory_total, 0);
        assert_int_equal(set->gpus[0].fault, NVML_SUCCESS);
        assert_int_equal(set->gpus[0].n_migs, 4);
        assert_int_equal(set->gpus[0].migs[0].memory_total, MIB(19968));
        kdev_gpu_set_free(set);

        /* a MIG device whose GI profile id matches no index */
        f->m.reset();
        f->m.set_error("GPU-c1ae70ed-64b5-7842-b2ed-e9039613ae69",
                     "nvmlDeviceGetGpuInstanceProfileInfo", NVML_ERROR_NOT_SUPPORTED);
        assert_int_equal(kdev_nvml_discover(f->m.lib, &o, &set, &e), -ENOENT);
        assert_string_equal(e.msg, "GPU 0 MIG device 0: no matching GPU instance profile for "
                                   "id 9");
}

static void test_numa_sysfs(void **state)
{
        struct fx *f = *state;
        char path[300];
        int node = 7;
        struct kdev_err e;
        kdev_err_clear(&e);
        assert_int_equal(kdev_nvml_numa_node(f->sysfs, "0000:3b:00.0", &node, &e), 0);
        assert_int_equal(node, -1);
        setenv("KDEV_MOCK_NVML_TOPOLOGY", TOPO("h200-nvl-4x-pcie-2numa.yaml"), 1);
        f->m.reset();
        assert_int_equal(f->m.write_sysfs(f->sysfs), NVML_SUCCESS);
        assert_int_equal(kdev_nvml_numa_node(f->sysfs, "0000:9c:00.0", &node, &e), 0);
        assert_int_equal(node, 1);
        snprintf(path, sizeof(path), "%s/bus/pci/devices/0000:1b:00.0/numa_node", f->sysfs);
        FILE *fp = fopen(path, "w");
        fputs("-1\n", fp);
        fclose(fp);
        assert_int_equal(kdev_nvml_numa_node(f->sysfs, "0000:1b:00.0", &node, &e), 0);
        assert_int_equal(node, -1);
        fp = fopen(path, "w");
        fputs("abc\n", fp);
        fclose(fp);
        assert_int_equal(kdev_nvml_numa_node(f->sysfs, "0000:1b:00.0", &node, &e), -EINVAL);
        char want[400];
        snprintf(want, sizeof(want), "%s: cannot parse NUMA node \"abc\"", path);
        assert_string_equal(e.msg, want);
        struct kdev_nvml_discover_options o = { .sysfs_root = f->sysfs };
        struct kdev_gpu_set *set = NULL;
        assert_int_equal(kdev_nvml_discover(f->m.lib, &o, &set, &e), -EINVAL);
        snprintf(want, sizeof(want), "GPU 0: %s: cannot parse NUMA node \"abc\"", path);
        assert_string_equal(e.msg, want);

        char out[32];
        assert_int_equal(kdev_nvml_sysfs_bus_id("00000000:BC:00.0", out, sizeof(out)), 0);
        assert_string_equal(out, "0000:bc:00.0");
        assert_int_equal(kdev_nvml_sysfs_bus_id("0000", out, sizeof(out)), -EINVAL);
        assert_int_equal(kdev_nvml_sysfs_bus_id("00000000:BC:00.0", out, 12), -EINVAL);
}

static void mkdirs(const char *path)
{
        char b[600];
        snprintf(b, sizeof(b), "%s", path);
        for (char *q = b + 1; *q; q++) {
                if (*q == '/') {
                        *q = '\0';
                        mkdir(b, 0755);
                        *q = '/';
                }
        }
        mkdir(b, 0755);
}

/* resource.kubernetes.io/pcieRoot from sysfs, as Kubernetes' deviceattribute
 * helper derives it: the first component under <sysfs>/devices of the
 * /sys/bus/pci/devices/<bus id> link's target; exact errors otherwise; and
 * discovery fills it per GPU ("" where sysfs has no link). */
static void test_pcie_root(void **state)
{
        struct fx *f = *state;
        char p[600], t[600], want[1400], out[32];
        struct kdev_err e;
        kdev_err_clear(&e);
        snprintf(p, sizeof(p), "%s/devices/pci0000:1a/0000:1a:01.0/0000:1b:00.0", f->sysfs);
        mkdirs(p);
        snprintf(p, sizeof(p), "%s/bus/pci/devices", f->sysfs);
        mkdirs(p);
        snprintf(p, sizeof(p), "%s/bus/pci/devices/0000:1b:00.0", f->sysfs);
        assert_int_equal(symlink("../../../devices/pci0000:1a/0000:1a:01.0/0000:1b:00.0", p), 0);
        assert_int_equal(kdev_nvml_pcie_root(f->sysfs, "0000:1b:00.0", out, sizeof(out), &e), 0);
        assert_string_equal(out, "pci0000:1a");
        /* an absolute target */
        snprintf(p, sizeof(p), "%s/bus/pci/devices/0000:1c:00.0", f->sysfs);
        snprintf(t, sizeof(t), "%s/devices/pci0000:1a/0000:1a:02.0/0000:1c:00.0", f->sysfs);
        mkdirs(t);
        assert_int_equal(symlink(t, p), 0);
        assert_int_equal(kdev_nvml_pcie_root(f->sysfs, "0000:1c:00.0", out, sizeof(out), &e), 0);
        assert_string_equal(out, "pci0000:1a");
        /* bus IDs: extended BDF, lower-case hex only */
        assert_int_equal(kdev_nvml_pcie_root(f->sysfs, "0000:1B:00.0", out, sizeof(out), &e),
                         -EINVAL);
        assert_string_equal(e.msg, "invalid PCI bus ID format: 0000:1B:00.0");
        assert_int_equal(kdev_nvml_pcie_root(f->sysfs, "00000000:1b:00.0", out, sizeof(out), &e),
                         -EINVAL);
        assert_string_equal(e.msg, "invalid PCI bus ID format: 00000000:1b:00.0");
        /* no link */
        assert_int_equal(kdev_nvml_pcie_root(f->sysfs, "0000:9c:00.0", out, sizeof(out), &e),
                         -EINVAL);
        snprintf(want, sizeof(want), "%s/bus/pci/devices/0000:9c:00.0: not a link: %s", f->sysfs,
                 strerror(ENOENT));
        assert_string_equal(e.msg, want);
        /* a target outside devices/pci*, and one naming another device */
        snprintf(p, sizeof(p), "%s/bus/pci/devices/0000:1d:00.0", f->sysfs);
        assert_int_equal(symlink("../../../virtual/0000:1d:00.0", p), 0);
        assert_int_equal(kdev_nvml_pcie_root(f->sysfs, "0000:1d:00.0", out, sizeof(out), &e),
                         -EINVAL);
        snprintf(want, sizeof(want), "%s: target %s/virtual/0000:1d:00.0 is not under %s/devices/pci",
                 p, f->sysfs, f->sysfs);
        assert_string_equal(e.msg, want);
        snprintf(p, sizeof(p), "%s/bus/pci/devices/0000:1e:00.0", f->sysfs);
        assert_int_equal(symlink("../../../devices/pci0000:1a/0000:1a:01.0/0000:1b:00.0", p), 0);
        assert_int_equal(kdev_nvml_pcie_root(f->sysfs, "0000:1e:00.0", out, sizeof(out), &e),
                         -EINVAL);
        snprintf(want, sizeof(want),
                 "%s: target %s/devices/pci0000:1a/0000:1a:01.0/0000:1b:00.0 does not end in "
                 "0000:1e:00.0", p, f->sysfs);
        assert_string_equal(e.msg, want);

        /* discovery: the GPU at 0000:1b:00.0 gets its root, the others none */
        setenv("KDEV_MOCK_NVML_TOPOLOGY", TOPO("h200-nvl-4x-pcie-2numa.yaml"), 1);
        f->m.reset();
        struct kdev_nvml_discover_options o = { .sysfs_root = f->sysfs };
        struct kdev_gpu_set *set = NULL;
        assert_int_equal(kdev_nvml_discover(f->m.lib, &o, &set, &e), 0);
        size_t found = 0;
        for (size_t i = 0; i < set->n_gpus; i++) {
                const struct kdev_gpu *g = &set->gpus[i];
                bool it = strcmp(g->sysfs_bus_id, "0000:1b:00.0") == 0;
                found += it;
                assert_string_equal(g->pcie_root, it ? "pci0000:1a" : "");
        }
        assert_int_equal(found, 1);
        kdev_gpu_set_free(set);
}

/* Brand and whole-GPU SM count: per-GPU values, SMs unknown without
 * sm_count, and both unset with a library that lacks the entry points. */
static void test_brand_and_sms(void **state)
{
        struct fx *f = *state;
        char dir[64], topo[128];
        assert_int_equal(mock_tmpdir(dir, sizeof(dir), "kdev-nvml-brand"), 0);
        snprintf(topo, sizeof(topo), "%s/t.yaml", dir);
        FILE *fp = fopen(topo, "w");
        assert_non_null(fp);
        fputs("defaults: {name: \"NVIDIA GeForce RTX 4090\", memory_mib: 24564,\n"
              "           compute_capability: \"8.9\", architecture: ada}\n"
              "gpus:\n"
              "  - {uuid: GPU-b0, pci_bus_id: \"00000000:01:00.0\", brand: geforce_rtx,\n"
              "     sm_count: 128}\n"
              "  - {uuid: GPU-b1, pci_bus_id: \"00000000:02:00.0\", brand: tesla}\n"
              "  - {uuid: GPU-b2, pci_bus_id: \"00000000:03:00.0\", sm_count: 76}\n",
              fp);
        fclose(fp);
        struct kdev_gpu_set *set = mock_nvml_discover(&f->m, topo, f->sysfs, 0);
        assert_int_equal(set->n_gpus, 3);
        assert_true(set->gpus[0].has_brand);
        assert_int_equal(set->gpus[0].brand, NVML_BRAND_GEFORCE_RTX);
        assert_string_equal(kdev_nvml_brand_name(set->gpus[0].brand), "GeForceRTX");
        assert_int_equal(set->gpus[0].multiprocessors, 128);
        assert_int_equal(set->gpus[1].brand, NVML_BRAND_TESLA);
        assert_int_equal(set->gpus[1].multiprocessors, 0);     /* NOT_SUPPORTED */
        assert_int_equal(set->gpus[2].brand, NVML_BRAND_NVIDIA); /* the mock's default */
        assert_int_equal(set->gpus[2].multiprocessors, 76);
        kdev_gpu_set_free(set);

        /* a library without nvmlDeviceGetBrand / nvmlDeviceGetAttributes */
        struct kdev_nvml_options o = { .library_path = KDEV_MOCK_NVML_LEGACY_LIB };
        struct kdev_nvml *legacy = NULL;
        struct kdev_err e;
        kdev_err_clear(&e);
        assert_int_equal(kdev_nvml_open(&o, &legacy, &e), 0);
        assert_int_equal(kdev_nvml_discover(legacy, NULL, &set, &e), 0);
        assert_int_equal(set->n_gpus, 3);
        for (size_t i = 0; i < 3; i++) {
                assert_false(set->gpus[i].has_brand);
                assert_int_equal(set->gpus[i].multiprocessors, 0);
        }
        kdev_gpu_set_free(set);
        kdev_nvml_close(legacy);
        unlink(topo);
        mock_rmtree(dir);
}

/* Discovers the mock's current machine (no links). */
static struct kdev_gpu_set *now_set(struct fx *f)
{
        struct kdev_nvml_discover_options o = {.sysfs_root = f->sysfs};
        struct kdev_gpu_set *set = NULL;
        struct kdev_err e;
        kdev_err_clear(&e);
        if (kdev_nvml_discover(f->m.lib, &o, &set, &e) != 0)
                fail_msg("%s", e.msg);
        return set;
}

/* GPUs and MIG devices added and removed at run time (kdevMockSetPresent,
 * kdevMockSetMigMode) and kdev_gpu_set_inventory_differs' exact reasons. */
static void test_inventory_changes(void **state)
{
        struct fx *f = *state;
        const char *g0 = "GPU-c1ae70ed-64b5-7842-b2ed-e9039613ae69";
        const char *g1 = "GPU-4603f764-b00c-271e-0980-eda368e40931";
        const char *g3 = "GPU-49c5ccb8-7f8c-230b-4fe7-33825480cfa5";
        const char *m0 = "MIG-d49257bf-597e-857d-3bb4-e6384c9909cc";
        setenv("KDEV_MOCK_NVML_TOPOLOGY", TOPO("mig-a100-40gb.yaml"), 1);
        f->m.reset();
        char why[256];
        struct kdev_gpu_set *a = now_set(f), *b;
        assert_int_equal(a->n_gpus, 4);
        b = now_set(f);
        assert_false(kdev_gpu_set_inventory_differs(a, b, why, sizeof(why)));
        kdev_gpu_set_free(b);

        /* GPU 1 removed: the others' NVML indices close up */
        assert_int_equal(f->m.set_present(g1, 0), NVML_SUCCESS);
        b = now_set(f);
        assert_int_equal(b->n_gpus, 3);
        assert_string_equal(b->gpus[1].uuid, "GPU-0c8e873f-4cf7-689a-6647-0210cab49901");
        assert_int_equal(b->gpus[1].index, 1);
        assert_string_equal(b->gpus[2].uuid, g3);
        assert_true(kdev_gpu_set_inventory_differs(a, b, why, sizeof(why)));
        assert_string_equal(why, "GPU GPU-4603f764-b00c-271e-0980-eda368e40931 is gone");
        /* ...and back: the reverse is an addition */
        assert_true(kdev_gpu_set_inventory_differs(b, a, why, sizeof(why)));
        assert_string_equal(why, "GPU GPU-4603f764-b00c-271e-0980-eda368e40931 appeared");
        kdev_gpu_set_free(b);
        assert_int_equal(f->m.set_present(g1, 1), NVML_SUCCESS);

        /* a MIG device destroyed: its slot answers NOT_FOUND */
        assert_int_equal(f->m.set_present(m0, 0), NVML_SUCCESS);
        b = now_set(f);
        assert_int_equal(b->gpus[0].n_migs, 3);
        assert_true(kdev_gpu_set_inventory_differs(a, b, why, sizeof(why)));
        assert_string_equal(why,
                            "MIG devices of GPU GPU-c1ae70ed-64b5-7842-b2ed-e9039613ae69 changed");
        /* a faulted GPU's MIG devices are not compared */
        b->gpus[0].fault = NVML_ERROR_RESET_REQUIRED;
        assert_false(kdev_gpu_set_inventory_differs(a, b, NULL, 0));
        kdev_gpu_set_free(b);
        assert_int_equal(f->m.set_present(m0, 1), NVML_SUCCESS);

        /* MIG mode switched on GPU 3 */
        assert_int_equal(f->m.set_mig_mode(g3, 1), NVML_SUCCESS);
        assert_int_equal(f->m.set_mig_mode(g3, 2), NVML_ERROR_INVALID_ARGUMENT);
        assert_int_equal(f->m.set_mig_mode(m0, 1), NVML_ERROR_NOT_FOUND);
        b = now_set(f);
        assert_true(kdev_gpu_set_inventory_differs(a, b, why, sizeof(why)));
        assert_string_equal(why,
                            "MIG mode of GPU GPU-49c5ccb8-7f8c-230b-4fe7-33825480cfa5 changed");
        kdev_gpu_set_free(b);
        assert_int_equal(f->m.set_mig_mode(g3, 0), NVML_SUCCESS);

        /* a GPU lost before its UUID could be read may be the one missing */
        assert_int_equal(f->m.set_lost(g0, 1), NVML_SUCCESS);
        b = now_set(f);
        assert_string_equal(b->gpus[0].uuid, "");
        assert_false(kdev_gpu_set_inventory_differs(a, b, why, sizeof(why)));
        /* ...but not one missing besides: the GPU without a UUID was read so
         * before (a rebuild while it is lost), and GPU 1 is removed now */
        assert_int_equal(f->m.set_present(g1, 0), NVML_SUCCESS);
        struct kdev_gpu_set *c = now_set(f);
        assert_int_equal(c->n_gpus, 3);
        assert_true(kdev_gpu_set_inventory_differs(b, c, why, sizeof(why)));
        assert_string_equal(why, "GPU GPU-4603f764-b00c-271e-0980-eda368e40931 is gone");
        /* the lost GPU removed in turn (GPU 1 back) */
        assert_int_equal(f->m.set_present(g1, 1), NVML_SUCCESS);
        assert_int_equal(f->m.set_present(g0, 0), NVML_SUCCESS);
        kdev_gpu_set_free(c);
        c = now_set(f);
        assert_int_equal(c->n_gpus, 3);
        assert_true(kdev_gpu_set_inventory_differs(b, c, why, sizeof(why)));
        assert_string_equal(why, "a GPU lost before its UUID was read is gone");
        kdev_gpu_set_free(c);
        assert_int_equal(f->m.set_present(g0, 1), NVML_SUCCESS);
        kdev_gpu_set_free(b);
        assert_int_equal(f->m.set_lost(g0, 0), NVML_SUCCESS);
        assert_int_equal(f->m.set_present("GPU-nope", 0), NVML_ERROR_NOT_FOUND);
        /* NULL is no GPU */
        assert_true(kdev_gpu_set_inventory_differs(NULL, a, why, sizeof(why)));
        assert_string_equal(why, "GPU GPU-c1ae70ed-64b5-7842-b2ed-e9039613ae69 appeared");
        kdev_gpu_set_free(a);
}

static void test_names(void **state)
{
        (void)state;
        assert_string_equal(kdev_nvml_family(7, 0), "volta");
        assert_string_equal(kdev_nvml_family(7, 5), "turing");
        assert_string_equal(kdev_nvml_family(8, 6), "ampere");
        assert_string_equal(kdev_nvml_family(8, 9), "ada-lovelace");
        assert_string_equal(kdev_nvml_family(9, 0), "hopper");
        assert_string_equal(kdev_nvml_family(10, 0), "blackwell");
        assert_string_equal(kdev_nvml_family(12, 0), "blackwell");
        assert_string_equal(kdev_nvml_family(13, 0), "rubin");
        assert_string_equal(kdev_nvml_family(11, 0), "undefined");
        assert_string_equal(kdev_nvml_level_name(NVML_TOPOLOGY_HOSTBRIDGE), "HOSTBRIDGE");
        assert_null(kdev_nvml_level_name((nvmlGpuTopologyLevel_t)15));
        assert_string_equal(kdev_nvml_brand_name(NVML_BRAND_UNKNOWN), "Unknown");
        assert_string_equal(kdev_nvml_brand_name(NVML_BRAND_TESLA), "Tesla");
        assert_string_equal(kdev_nvml_brand_name(NVML_BRAND_GEFORCE), "GeForce");
        assert_string_equal(kdev_nvml_brand_name(NVML_BRAND_NVIDIA_CLOUD_GAMING),
                            "NvidiaCloudGaming");
        assert_string_equal(kdev_nvml_brand_name(NVML_BRAND_NVIDIA), "Nvidia");
        assert_string_equal(kdev_nvml_brand_name(NVML_BRAND_TITAN_RTX), "TitanRTX");
        assert_null(kdev_nvml_brand_name(17));
}

int main(void)
{
        const struct CMUnitTest tests[] = {
                cmocka_unit_test_setup_teardown(test_a100_8x_nvswitch, setup, teardown),
                cmocka_unit_test_setup_teardown(test_h100_8x_nvswitch, setup, teardown),
                cmocka_unit_test_setup_teardown(test_h200_nvl_pairs, setup, teardown),
                cmocka_unit_test_setup_teardown(test_16x_two_islands, setup, teardown),
                cmocka_unit_test_setup_teardown(test_display_gpu_skipped, setup, teardown),
                cmocka_unit_test_setup_teardown(test_mig_a100_40gb, setup, teardown),
                cmocka_unit_test_setup_teardown(test_mig_h200, setup, teardown),
                cmocka_unit_test_setup_teardown(test_faults, setup, teardown),
                cmocka_unit_test_setup_teardown(test_numa_sysfs, setup, teardown),
                cmocka_unit_test_setup_teardown(test_pcie_root, setup, teardown),
                cmocka_unit_test_setup_teardown(test_brand_and_sms, setup, teardown),
                cmocka_unit_test_setup_teardown(test_inventory_changes, setup, teardown),
                cmocka_unit_test(test_names),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
