/* NVIDIA resources over every shipped mock topology (through the real NVML
 * loader), the Allocate payload for every strategy combination (NVIDIA
 * internal/plugin/server.go getAllocateResponse), and the CDI spec. */
#define _XOPEN_SOURCE 700
#include <errno.h>
#include <regex.h>
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

#include "common/file.h"
#include "mock_fixture.h"
#include "nvidia/cdi_spec.h"
#include "nvidia/config.h"
#include "nvidia/nvidia_internal.h"
#include "nvidia/resources.h"
#include "nvml/discover.h"
#include "nvml/loader.h"
#include "plugin/allocate.h"

struct fx {
        struct mock_nvml m;
        char tmp[64];      /* sysfs/, root/dev/, cdi/ */
        char sysfs[96], root[96], cdi[96];
};

static int setup(void **state)
{
        struct fx *f = calloc(1, sizeof(*f));
        if (mock_nvml_open(&f->m) != 0 || mock_tmpdir(f->tmp, sizeof(f->tmp), "kdev-nvidia") != 0)
                return -1;
        snprintf(f->sysfs, sizeof(f->sysfs), "%s/sysfs", f->tmp);
        snprintf(f->root, sizeof(f->root), "%s/root", f->tmp);
        snprintf(f->cdi, sizeof(f->cdi), "%s/cdi", f->tmp);
        char dev[128], imex[160];
        snprintf(dev, sizeof(dev), "%s/dev", f->root);
        snprintf(imex, sizeof(imex), "%s/nvidia-caps-imex-channels", dev);
        if (mkdir(f->sysfs, 0755) < 0 || mkdir(f->root, 0755) < 0 || mkdir(dev, 0755) < 0 ||
            mkdir(imex, 0755) < 0)
                return -1;
        /* present: nvidiactl and nvidia-uvm; absent: uvm-tools, modeset */
        mock_touch(dev, "nvidiactl");
        mock_touch(dev, "nvidia-uvm");
        mock_touch(imex, "channel0");
        *state = f;
        return 0;
}

static int teardown(void **state)
{
        struct fx *f = *state;
        mock_rmtree(f->tmp);
        mock_nvml_close(&f->m);
        free(f);
        return 0;
}

static struct kdev_gpu_set *discover(struct fx *f, const char *file)
{
        return mock_nvml_discover(&f->m, file, f->sysfs, 0);
}

/* A finished config with the given Allocate settings (dev root |root|). */
static void config(struct kdev_nvidia_config *cfg, const char *root, unsigned strategies,
                   enum kdev_nvidia_id_strategy id, bool specs, bool extras)
{
        struct kdev_err e;
        assert_int_equal(kdev_nvidia_config_init(cfg, &e), 0);
        cfg->device_list_strategies = strategies;
        cfg->id_strategy = id;
        cfg->pass_device_specs = specs;
        cfg->gdrcopy_enabled = cfg->gds_enabled = cfg->mofed_enabled = extras;
        if (root) {
                free(cfg->dev_root);
                cfg->dev_root = strdup(root);
        }
        assert_int_equal(kdev_nvidia_config_finish(cfg, false, &e), 0);
}

static void build(const struct kdev_gpu_set *set, const struct kdev_nvidia_config *cfg,
                  struct kdev_resource_set *rs, struct mock_warns *w)
{
        struct kdev_nvidia_build_options o = {.allow_regular_files = true, .warn = mock_collect,
                                              .warn_arg = w};
        struct kdev_err e;
        kdev_err_clear(&e);
        if (kdev_nvidia_build(set, cfg, &o, rs, &e) != 0)
                fail_msg("%s", e.msg);
}

/* --- every topology ------------------------------------------------------------ */

struct exp_dev {
        const char *uuid;
        const char *index;
        unsigned minor;
        int numa;
};

struct exp_topo {
        const char *file;
        size_t n;
        struct exp_dev d[16];
};

static const struct exp_topo topologies[] = {
        {TOPO("a100-sxm4-80gb-8x-nvswitch.yaml"), 8,
         {{"GPU-229bd551-5748-d6e2-7ccc-7d08184d1f9b", "0", 0, 3},
          {"GPU-c798a445-493b-ae92-72c0-293a6c1de8c1", "1", 1, 3},
          {"GPU-9c830235-28b3-005d-d65a-8805f4733086", "2", 2, 1},
          {"GPU-b54faf61-c2d0-a26f-8278-dd3405fab04e", "3", 3, 1},
          {"GPU-e2bdb8a7-8eb0-4189-6300-81e1bf611054", "4", 4, 7},
          {"GPU-cb7c6c6c-6c16-7b6f-97e4-20c3427c6072", "5", 5, 7},
          {"GPU-bacb4439-d542-83aa-2d96-43fc7be898d3", "6", 6, 5},
          {"GPU-6f33b75d-1507-77a9-be90-9a84deb6cc24", "7", 7, 5}}},
        {TOPO("h100-80gb-8x-nvswitch.yaml"), 8,
         {{"GPU-eb4f6c0b-b381-0e1e-fb4a-cf70a1a2805e", "0", 0, 0},
          {"GPU-d8cd89cd-fb85-bd29-f5e7-826260cc2255", "1", 1, 0},
          {"GPU-c6c362bb-3458-2b4f-ce42-acf8618a50f9", "2", 2, 0},
          {"GPU-e468c3ab-0f10-9911-df74-2436cb131826", "3", 3, 0},
          {"GPU-fe76d5dd-bdd7-3218-ca20-140883e2c7b8", "4", 4, 1},
          {"GPU-a288dd1f-391c-ec59-8d1d-b582a91b7759", "5", 5, 1},
          {"GPU-35ca105b-9262-0c50-b916-71c8b2d581d5", "6", 6, 1},
          {"GPU-c64278a1-b3c9-975f-f3b4-2ad25c978906", "7", 7, 1}}},
        {TOPO("h200-nvl-4x-pcie-2numa.yaml"), 4,
         {{"GPU-59796164-c626-db61-eee7-66572ebef2ef", "0", 0, 0},
          {"GPU-7e527414-0bac-bbbc-e316-ea8921487146", "1", 1, 0},
          {"GPU-04879f5d-19d7-803a-1faf-d8a3c47f1d02", "2", 2, 1},
          {"GPU-3df3207a-fac5-f53c-72bb-c0aa50e21533", "3", 3, 1}}},
        {TOPO("a100-sxm4-80gb-16x-2islands.yaml"), 16,
         {{"GPU-13c8b481-89f2-098d-5c7c-7d81cde78dd3", "0", 0, 0},
          {"GPU-eadb43db-f69d-fd4e-885c-19f0bc4d7a0b", "1", 1, 0},
          {"GPU-4d502445-f348-a6fe-8c9f-f4a075a5d35c", "2", 2, 0},
          {"GPU-f22723c2-8eda-2998-6ec3-4abc4aeaf92d", "3", 3, 0},
          {"GPU-e6a8cbef-6ebe-e840-ea2b-f02c49c44b8a", "4", 4, 0},
          {"GPU-385c5656-1871-593e-0d56-54bd36cdc194", "5", 5, 0},
          {"GPU-e8918603-7b98-4707-13b8-e05f5f25b396", "6", 6, 0},
          {"GPU-312d5211-e271-b251-0a5d-aab33d6b55e3", "7", 7, 0},
          {"GPU-db384cc7-c4a3-ee8b-680a-817c43f76c65", "8", 8, 1},
          {"GPU-8804c935-e11b-9a35-8908-fdcdbb069c40", "9", 9, 1},
          {"GPU-caf8ff57-d8a3-f271-e553-50f99a1e842b", "10", 10, 1},
          {"GPU-11688f30-30bf-16ea-09ae-f932aeddb37e", "11", 11, 1},
          {"GPU-db3015d5-655f-9625-8799-14ff62d4ef14", "12", 12, 1},
          {"GPU-ab6118ab-7616-e156-81a0-48edda47dcac", "13", 13, 1},
          {"GPU-ac396da2-6b6a-0a4e-6c57-8590fe8f332a", "14", 14, 1},
          {"GPU-f56a0ce8-823a-a156-33fc-2ebd7090de99", "15", 15, 1}}},
        /* the display adapter (NVML index 2) is skipped; indices keep NVML's */
        {TOPO("dgx-station-a100-display.yaml"), 4,
         {{"GPU-3617538c-b8b4-821d-2b60-14925a6bbfee", "0", 0, 0},
          {"GPU-f5988fcd-d3b2-3d75-1b3f-3f5b877ff5f6", "1", 1, 0},
          {"GPU-67a8549b-9460-deed-06c1-7199374ca24a", "3", 3, 0},
          {"GPU-64a4b484-abbd-f4b5-8fdd-f870f0b60df3", "4", 4, 0}}},
        /* migStrategy none: MIG-enabled GPUs are advertised whole (internal/rm/device_map.go) */
        {TOPO("mig-a100-40gb.yaml"), 4,
         {{"GPU-c1ae70ed-64b5-7842-b2ed-e9039613ae69", "0", 0, 0},
          {"GPU-4603f764-b00c-271e-0980-eda368e40931", "1", 1, 0},
          {"GPU-0c8e873f-4cf7-689a-6647-0210cab49901", "2", 2, 1},
          {"GPU-49c5ccb8-7f8c-230b-4fe7-33825480cfa5", "3", 3, 1}}},
        {TOPO("mig-h200.yaml"), 3,
         {{"GPU-e5a56d6a-aa8f-46ef-56bb-62ee6663e7ca", "0", 0, 0},
          {"GPU-83f3c3ae-0f10-6208-1b0c-272167e8ae91", "1", 1, 0},
          {"GPU-8c589949-2cb6-dba3-d241-8668839f873a", "2", 2, 0}}},
};

static void test_every_topology(void **state)
{
        struct fx *f = *state;
        for (size_t t = 0; t < sizeof(topologies) / sizeof(topologies[0]); t++) {
                const struct exp_topo *x = &topologies[t];
                struct kdev_gpu_set *set = discover(f, x->file);
                struct kdev_nvidia_config cfg;
                config(&cfg, NULL, KDEV_NVIDIA_LIST_ENVVAR, KDEV_NVIDIA_ID_UUID, false, false);
                struct kdev_resource_set rs = {0};
                struct mock_warns w = {0};
                build(set, &cfg, &rs, &w);
                assert_int_equal(w.n, 0);
                assert_int_equal(rs.n_resources, 1);
                const struct kdev_resource *r = &rs.resources[0];
                assert_string_equal(r->name, "nvidia.com/gpu");
                assert_ptr_equal(r->ops, &kdev_nvidia_resource_ops);
                if (r->n_devices != x->n)
                        fail_msg("%s: %zu devices", x->file, r->n_devices);
                for (size_t i = 0; i < x->n; i++) {
                        const struct kdev_device *d = &r->devices[i];
                        assert_string_equal(d->id, x->d[i].uuid);
                        assert_true(d->healthy);
                        assert_int_equal(d->numa_node, x->d[i].numa);
                        assert_int_equal(d->n_specs, 0);
                        const struct kdev_nvidia_devinfo *info = kdev_nvidia_device_info(r, d);
                        assert_ptr_equal(info, d->data);
                        assert_string_equal(info->uuid, x->d[i].uuid);
                        assert_string_equal(info->parent_uuid, x->d[i].uuid);
                        assert_int_equal(info->gi, KDEV_NVIDIA_NO_INSTANCE);
                        assert_int_equal(info->ci, KDEV_NVIDIA_NO_INSTANCE);
                        assert_string_equal(info->index, x->d[i].index);
                        assert_int_equal(info->minor, x->d[i].minor);
                        assert_int_equal(info->replica, -1);
                }
                kdev_resource_set_clear(&rs);
                kdev_nvidia_config_clear(&cfg);
                kdev_gpu_set_free(set);
        }
}

static void test_no_gpus_and_errors(void **state)
{
        (void)state;
        struct kdev_nvidia_config cfg;
        struct kdev_err e;
        config(&cfg, NULL, KDEV_NVIDIA_LIST_ENVVAR, KDEV_NVIDIA_ID_UUID, false, false);
        struct kdev_resource_set rs = {0};
        struct mock_warns w = {0};
        build(NULL, &cfg, &rs, &w); /* 0 GPUs: the resource exists, empty */
        assert_int_equal(rs.n_resources, 1);
        assert_string_equal(rs.resources[0].name, "nvidia.com/gpu");
        assert_int_equal(rs.resources[0].n_devices, 0);
        assert_int_equal(kdev_nvidia_build(NULL, &cfg, NULL, &rs, &e), -EEXIST);
        assert_string_equal(e.msg, "resource nvidia.com/gpu defined twice");
        kdev_resource_set_clear(&rs);
        assert_null(kdev_nvidia_device_info(NULL, NULL));

        cfg.mig_strategy = KDEV_NVIDIA_MIG_MIXED; /* 0 GPUs: the empty nvidia.com/gpu too */
        build(NULL, &cfg, &rs, &w);
        assert_int_equal(rs.n_resources, 1);
        assert_string_equal(rs.resources[0].name, "nvidia.com/gpu");
        assert_int_equal(rs.resources[0].n_devices, 0);
        kdev_resource_set_clear(&rs);
        cfg.mig_strategy = KDEV_NVIDIA_MIG_NONE;
        /* IMEX: a missing required channel fails; a missing optional one warns */
        cfg.imex_channel_ids = calloc(1, sizeof(unsigned));
        cfg.n_imex_channel_ids = 1;
        free(cfg.dev_root);
        cfg.dev_root = strdup("/nonexistent-kdev-root");
        cfg.imex_required = true;
        assert_int_equal(kdev_nvidia_build(NULL, &cfg, NULL, &rs, &e), -ENOENT);
        assert_string_equal(e.msg, "requested IMEX channel channel0 does not exist "
                                   "(/nonexistent-kdev-root/dev/nvidia-caps-imex-channels/"
                                   "channel0: no such file or directory)");
        assert_int_equal(rs.n_resources, 0);
        cfg.imex_required = false;
        build(NULL, &cfg, &rs, &w);
        assert_int_equal(w.n, 1);
        assert_string_equal(w.msgs[0], "Ignoring requested IMEX channel channel0 "
                                       "(/nonexistent-kdev-root/dev/nvidia-caps-imex-channels/"
                                       "channel0: no such file or directory)");
        kdev_resource_set_clear(&rs);
        kdev_nvidia_config_clear(&cfg);
}

static void test_faulty_gpus(void **state)
{
        struct fx *f = *state;
        setenv("KDEV_MOCK_NVML_TOPOLOGY", TOPO("h100-80gb-8x-nvswitch.yaml"), 1);
        f->m.reset();
        assert_int_equal(f->m.set_reset("GPU-c6c362bb-3458-2b4f-ce42-acf8618a50f9", 1),
                         NVML_SUCCESS);
        assert_int_equal(f->m.set_lost("GPU-a288dd1f-391c-ec59-8d1d-b582a91b7759", 1),
                         NVML_SUCCESS);
        struct kdev_nvml_discover_options o = {.sysfs_root = f->sysfs};
        struct kdev_gpu_set *set = NULL;
        struct kdev_err e;
        if (kdev_nvml_discover(f->m.lib, &o, &set, &e) != 0)
                fail_msg("%s", e.msg);
        struct kdev_nvidia_config cfg;
        config(&cfg, NULL, KDEV_NVIDIA_LIST_ENVVAR, KDEV_NVIDIA_ID_UUID, false, false);
        struct kdev_resource_set rs = {0};
        struct mock_warns w = {0};
        build(set, &cfg, &rs, &w);
        const struct kdev_resource *r = &rs.resources[0];
        assert_int_equal(w.n, 1);
        assert_string_equal(w.msgs[0], "GPU 5: lost before its UUID was read; not advertised");
        assert_int_equal(r->n_devices, 7);
        for (size_t i = 0; i < r->n_devices; i++)
                assert_int_equal(r->devices[i].healthy, i != 2);
        assert_string_equal(r->devices[5].id, "GPU-35ca105b-9262-0c50-b916-71c8b2d581d5");
        /* Allocate refuses the unhealthy GPU (model rule) */
        const char *ids[] = {"GPU-c6c362bb-3458-2b4f-ce42-acf8618a50f9"};
        V1beta1__ContainerAllocateResponse out = V1BETA1__CONTAINER_ALLOCATE_RESPONSE__INIT;
        assert_int_equal(kdev_plugin_allocate(r, ids, 1, &out, &e), -EINVAL);
        assert_string_equal(e.msg, "device \"GPU-c6c362bb-3458-2b4f-ce42-acf8618a50f9\" of "
                                   "resource nvidia.com/gpu is unhealthy");
        kdev_resource_set_clear(&rs);
        kdev_nvidia_config_clear(&cfg);
        kdev_gpu_set_free(set);
}

/* kdev_nvidia_carry_faulted across rebuilds: a GPU lost before its UUID was
 * read is carried (Unhealthy, incomplete, GPU_IS_LOST) by every rebuild
 * while it stays lost; a GPU removed meanwhile is not taken for it (it is
 * withdrawn: not carried), unless the lost one was not known lost yet (then
 * either missing GPU may be the one without a UUID: both carried). */
static void test_carry_faulted_lost_and_removed(void **state)
{
        struct fx *f = *state;
        const char *lost = "GPU-a288dd1f-391c-ec59-8d1d-b582a91b7759";
        const char *removed = "GPU-e468c3ab-0f10-9911-df74-2436cb131826";
        setenv("KDEV_MOCK_NVML_TOPOLOGY", TOPO("h100-80gb-8x-nvswitch.yaml"), 1);
        f->m.reset();
        struct kdev_nvidia_config cfg;
        config(&cfg, NULL, KDEV_NVIDIA_LIST_ENVVAR, KDEV_NVIDIA_ID_UUID, false, false);
        struct mock_warns w = {0};
        struct kdev_gpu_set *s0 = mock_nvml_discover_loaded(&f->m, f->sysfs, 0, NULL);
        struct kdev_resource_set r0 = {0}, r1 = {0}, r2 = {0}, r3 = {0};
        build(s0, &cfg, &r0, &w);
        assert_int_equal(r0.resources[0].n_devices, 8);
        /* lost: the rebuild carries it */
        assert_int_equal(f->m.set_lost(lost, 1), NVML_SUCCESS);
        struct kdev_gpu_set *s1 = mock_nvml_discover_loaded(&f->m, f->sysfs, 0, NULL);
        build(s1, &cfg, &r1, &w);
        assert_int_equal(r1.resources[0].n_devices, 7);
        struct kdev_err e = {0};
        assert_int_equal(kdev_nvidia_carry_faulted(&r1, &r0, s1, &e), 1);
        const struct kdev_device *d = kdev_resource_find(&r1.resources[0], lost);
        assert_non_null(d);
        assert_false(d->healthy);
        const struct kdev_nvidia_devinfo *in = d->data;
        assert_true(in->incomplete);
        assert_int_equal(in->fault, NVML_ERROR_GPU_IS_LOST);
        /* another GPU removed while it is lost: withdrawn, not carried */
        assert_int_equal(f->m.set_present(removed, 0), NVML_SUCCESS);
        struct kdev_gpu_set *s2 = mock_nvml_discover_loaded(&f->m, f->sysfs, 0, NULL);
        build(s2, &cfg, &r2, &w);
        assert_int_equal(r2.resources[0].n_devices, 6);
        assert_int_equal(kdev_nvidia_carry_faulted(&r2, &r1, s2, &e), 1);
        assert_non_null(kdev_resource_find(&r2.resources[0], lost));
        assert_null(kdev_resource_find(&r2.resources[0], removed));
        /* both at once since the last build (nothing known lost): either may
         * be the GPU without a UUID, both carried */
        build(s2, &cfg, &r3, &w);
        assert_int_equal(kdev_nvidia_carry_faulted(&r3, &r0, s2, &e), 2);
        assert_non_null(kdev_resource_find(&r3.resources[0], lost));
        assert_non_null(kdev_resource_find(&r3.resources[0], removed));
        assert_int_equal(f->m.set_present(removed, 1), NVML_SUCCESS);
        assert_int_equal(f->m.set_lost(lost, 0), NVML_SUCCESS);
        kdev_resource_set_clear(&r0);
        kdev_resource_set_clear(&r1);
        kdev_resource_set_clear(&r2);
        kdev_resource_set_clear(&r3);
        kdev_gpu_set_free(s0);
        kdev_gpu_set_free(s1);
        kdev_gpu_set_free(s2);
        kdev_nvidia_config_clear(&cfg);
}

/* --- Allocate ------------------------------------------------------------------ */

#define H100_3 "GPU-e468c3ab-0f10-9911-df74-2436cb131826"
#define H100_1 "GPU-d8cd89cd-fb85-bd29-f5e7-826260cc2255"
#define ANNOT_RE                                                                         \
        "^cdi\\.k8s\\.io/nvidia-device-plugin_[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-"      \
        "[89ab][0-9a-f]{3}-[0-9a-f]{12}$"

/* The expected answer, as flat string lists. */
struct expect {
        const char *envs[8][2];
        size_t n_envs;
        const char *mounts[8]; /* container paths; host path /dev/null */
        size_t n_mounts;
        char specs[8][2][160]; /* container path, host path; permissions "rw" */
        size_t n_specs;
        const char *cdi[8];    /* CDI names (annotation value and cdi_devices) */
        size_t n_cdi;
        bool annotation, cri;
};

static void check(const V1beta1__ContainerAllocateResponse *out, const struct expect *x)
{
        assert_int_equal(out->n_envs, x->n_envs);
        for (size_t i = 0; i < x->n_envs; i++) {
                assert_string_equal(out->envs[i]->key, x->envs[i][0]);
                assert_string_equal(out->envs[i]->value, x->envs[i][1]);
        }
        assert_int_equal(out->n_mounts, x->n_mounts);
        for (size_t i = 0; i < x->n_mounts; i++) {
                assert_string_equal(out->mounts[i]->host_path, "/dev/null");
                assert_string_equal(out->mounts[i]->container_path, x->mounts[i]);
                assert_false(out->mounts[i]->read_only);
        }
        assert_int_equal(out->n_devices, x->n_specs);
        for (size_t i = 0; i < x->n_specs; i++) {
                assert_string_equal(out->devices[i]->container_path, x->specs[i][0]);
                assert_string_equal(out->devices[i]->host_path, x->specs[i][1]);
                assert_string_equal(out->devices[i]->permissions, "rw");
        }
        char joined[1024] = "";
        for (size_t i = 0; i < x->n_cdi; i++) {
                if (i)
                        strcat(joined, ",");
                strcat(joined, x->cdi[i]);
        }
        assert_int_equal(out->n_annotations, x->annotation ? 1 : 0);
        if (x->annotation) {
                regex_t re;
                assert_int_equal(regcomp(&re, ANNOT_RE, REG_EXTENDED | REG_NOSUB), 0);
                if (regexec(&re, out->annotations[0]->key, 0, NULL, 0) != 0)
                        fail_msg("annotation key %s", out->annotations[0]->key);
                regfree(&re);
                assert_string_equal(out->annotations[0]->value, joined);
        }
        assert_int_equal(out->n_cdi_devices, x->cri ? x->n_cdi : 0);
        for (size_t i = 0; x->cri && i < x->n_cdi; i++)
                assert_string_equal(out->cdi_devices[i]->name, x->cdi[i]);
}

/* The expected answer for a request of GPU 3 then GPU 1 (and GPU 3 again
 * when |twice|... kubelet never repeats an ID, so the model refuses it),
 * written from NVIDIA's getAllocateResponse steps. */
static void expected(struct expect *x, const char *root, unsigned s, bool index, bool specs,
                     bool extras)
{
        memset(x, 0, sizeof(*x));
        const char *ids[2] = {index ? "3" : H100_3, index ? "1" : H100_1};
        static char names[2][2][96];
        bool any_cdi = s & KDEV_NVIDIA_LIST_CDI;
        if (any_cdi) {
                for (int i = 0; i < 2; i++) {
                        snprintf(names[index][i], sizeof(names[0][0]),
                                 "k8s.device-plugin.nvidia.com/gpu=%s", ids[i]);
                        x->cdi[x->n_cdi++] = names[index][i];
                }
                if (extras) {
                        x->cdi[x->n_cdi++] = "k8s.device-plugin.nvidia.com/gdrcopy=all";
                        x->cdi[x->n_cdi++] = "k8s.device-plugin.nvidia.com/gds=all";
                        x->cdi[x->n_cdi++] = "k8s.device-plugin.nvidia.com/mofed=all";
                }
                x->annotation = s & KDEV_NVIDIA_LIST_CDI_ANNOTATIONS;
                x->cri = s & KDEV_NVIDIA_LIST_CDI_CRI;
        }
        if (extras) {
                x->envs[x->n_envs][0] = "NVIDIA_GDRCOPY";
                x->envs[x->n_envs++][1] = "enabled";
                x->envs[x->n_envs][0] = "NVIDIA_GDS";
                x->envs[x->n_envs++][1] = "enabled";
                x->envs[x->n_envs][0] = "NVIDIA_MOFED";
                x->envs[x->n_envs++][1] = "enabled";
        }
        if (!(s & (KDEV_NVIDIA_LIST_ENVVAR | KDEV_NVIDIA_LIST_VOLUME_MOUNTS)))
                return;
        static const char *const list[2] = {H100_3 "," H100_1, "3,1"};
        if (s & KDEV_NVIDIA_LIST_VOLUME_MOUNTS) {
                x->envs[x->n_envs][0] = "NVIDIA_VISIBLE_DEVICES";
                x->envs[x->n_envs++][1] = "/var/run/nvidia-container-devices";
                x->mounts[0] = index ? "/var/run/nvidia-container-devices/3"
                                     : "/var/run/nvidia-container-devices/" H100_3;
                x->mounts[1] = index ? "/var/run/nvidia-container-devices/1"
                                     : "/var/run/nvidia-container-devices/" H100_1;
                x->n_mounts = 2;
        } else {
                x->envs[x->n_envs][0] = "NVIDIA_VISIBLE_DEVICES";
                x->envs[x->n_envs++][1] = list[index];
        }
        if (specs) {
                static const char *const p[] = {"/dev/nvidiactl", "/dev/nvidia-uvm",
                                                "/dev/nvidia3", "/dev/nvidia1"};
                for (size_t i = 0; i < 4; i++) {
                        snprintf(x->specs[i][0], sizeof(x->specs[i][0]), "%s", p[i]);
                        snprintf(x->specs[i][1], sizeof(x->specs[i][1]), "%s%s", root, p[i]);
                }
                x->n_specs = 4;
        }
}

static void test_allocate_matrix(void **state)
{
        struct fx *f = *state;
        struct kdev_gpu_set *set = discover(f, TOPO("h100-80gb-8x-nvswitch.yaml"));
        const char *req[] = {H100_3, H100_1};
        size_t combos = 0;
        for (unsigned s = 1; s < 16; s++) {
                for (int index = 0; index < 2; index++) {
                        for (int specs = 0; specs < 2; specs++) {
                                for (int extras = 0; extras < 2; extras++) {
                                        struct kdev_nvidia_config cfg;
                                        config(&cfg, f->root, s,
                                               index ? KDEV_NVIDIA_ID_INDEX : KDEV_NVIDIA_ID_UUID,
                                               specs, extras);
                                        struct kdev_resource_set rs = {0};
                                        struct mock_warns w = {0};
                                        build(set, &cfg, &rs, &w);
                                        V1beta1__ContainerAllocateResponse out =
                                                V1BETA1__CONTAINER_ALLOCATE_RESPONSE__INIT;
                                        struct kdev_err e;
                                        if (kdev_plugin_allocate(&rs.resources[0], req, 2,
                                                                   &out, &e) != 0)
                                                fail_msg("%s", e.msg);
                                        struct expect x;
                                        expected(&x, f->root, s, index, specs, extras);
                                        check(&out, &x);
                                        kdev_allocate_response_free_contents(&out);
                                        kdev_resource_set_clear(&rs);
                                        kdev_nvidia_config_clear(&cfg);
                                        combos++;
                                }
                        }
                }
        }
        assert_int_equal(combos, 120);
        kdev_gpu_set_free(set);
}

/* Hand-written answers for a few combinations, and IMEX channels. */
static void test_allocate_exact(void **state)
{
        struct fx *f = *state;
        struct kdev_gpu_set *set = discover(f, TOPO("h100-80gb-8x-nvswitch.yaml"));
        struct kdev_err e;
        const char *req[] = {H100_3, H100_1};

        /* defaults: envvar + uuid */
        struct kdev_nvidia_config cfg;
        struct kdev_resource_set rs = {0};
        struct mock_warns w = {0};
        config(&cfg, NULL, KDEV_NVIDIA_LIST_ENVVAR, KDEV_NVIDIA_ID_UUID, false, false);
        build(set, &cfg, &rs, &w);
        V1beta1__ContainerAllocateResponse out = V1BETA1__CONTAINER_ALLOCATE_RESPONSE__INIT;
        assert_int_equal(kdev_plugin_allocate(&rs.resources[0], req, 2, &out, &e), 0);
        assert_int_equal(out.n_envs, 1);
        assert_string_equal(out.envs[0]->key, "NVIDIA_VISIBLE_DEVICES");
        assert_string_equal(out.envs[0]->value,
                            "GPU-e468c3ab-0f10-9911-df74-2436cb131826,"
                            "GPU-d8cd89cd-fb85-bd29-f5e7-826260cc2255");
        assert_int_equal(out.n_mounts + out.n_devices + out.n_annotations + out.n_cdi_devices, 0);
        kdev_allocate_response_free_contents(&out);
        /* unknown ID: the model's error */
        const char *bad[] = {"GPU-nope"};
        assert_int_equal(kdev_plugin_allocate(&rs.resources[0], bad, 1, &out, &e), -EINVAL);
        assert_string_equal(e.msg, "unknown device \"GPU-nope\" for resource nvidia.com/gpu");
        kdev_resource_set_clear(&rs);
        kdev_nvidia_config_clear(&cfg);

        /* every strategy, index IDs, device specs, GDS, IMEX channel 0 */
        config(&cfg, f->root, 15, KDEV_NVIDIA_ID_INDEX, true, false);
        cfg.gds_enabled = true;
        cfg.imex_channel_ids = calloc(1, sizeof(unsigned));
        cfg.n_imex_channel_ids = 1;
        build(set, &cfg, &rs, &w);
        assert_int_equal(w.n, 0);
        const char *one[] = {H100_1};
        assert_int_equal(kdev_plugin_allocate(&rs.resources[0], one, 1, &out, &e), 0);
        assert_int_equal(out.n_envs, 3);
        assert_string_equal(out.envs[0]->key, "NVIDIA_GDS");
        assert_string_equal(out.envs[0]->value, "enabled");
        assert_string_equal(out.envs[1]->key, "NVIDIA_VISIBLE_DEVICES");
        assert_string_equal(out.envs[1]->value, "/var/run/nvidia-container-devices");
        assert_string_equal(out.envs[2]->key, "NVIDIA_IMEX_CHANNELS");
        assert_string_equal(out.envs[2]->value, "0");
        assert_int_equal(out.n_mounts, 2);
        assert_string_equal(out.mounts[0]->container_path, "/var/run/nvidia-container-devices/1");
        assert_string_equal(out.mounts[1]->container_path,
                            "/var/run/nvidia-container-devices/imex/0");
        assert_int_equal(out.n_annotations, 1);
        assert_string_equal(out.annotations[0]->value,
                            "k8s.device-plugin.nvidia.com/gpu=1,"
                            "k8s.device-plugin.nvidia.com/imex-channel=0,"
                            "k8s.device-plugin.nvidia.com/gds=all");
        assert_int_equal(out.n_cdi_devices, 3);
        assert_string_equal(out.cdi_devices[1]->name,
                            "k8s.device-plugin.nvidia.com/imex-channel=0");
        assert_int_equal(out.n_devices, 4);
        char want[256];
        assert_string_equal(out.devices[0]->container_path, "/dev/nvidiactl");
        snprintf(want, sizeof(want), "%s/dev/nvidiactl", f->root);
        assert_string_equal(out.devices[0]->host_path, want);
        assert_string_equal(out.devices[1]->container_path, "/dev/nvidia-uvm");
        assert_string_equal(out.devices[2]->container_path, "/dev/nvidia1");
        snprintf(want, sizeof(want), "%s/dev/nvidia1", f->root);
        assert_string_equal(out.devices[2]->host_path, want);
        assert_string_equal(out.devices[3]->container_path,
                            "/dev/nvidia-caps-imex-channels/channel0");
        snprintf(want, sizeof(want), "%s/dev/nvidia-caps-imex-channels/channel0", f->root);
        assert_string_equal(out.devices[3]->host_path, want);
        /* a new random annotation key per answer */
        char first[128];
        snprintf(first, sizeof(first), "%s", out.annotations[0]->key);
        kdev_allocate_response_free_contents(&out);
        assert_int_equal(kdev_plugin_allocate(&rs.resources[0], one, 1, &out, &e), 0);
        assert_string_not_equal(out.annotations[0]->key, first);
        kdev_allocate_response_free_contents(&out);
        kdev_resource_set_clear(&rs);
        kdev_nvidia_config_clear(&cfg);

        /* a custom annotation prefix; only CDI: no device specs, no list env */
        config(&cfg, NULL, KDEV_NVIDIA_LIST_CDI_ANNOTATIONS, KDEV_NVIDIA_ID_UUID, true, false);
        free(cfg.cdi_annotation_prefix);
        cfg.cdi_annotation_prefix = strdup("cdi.example.com/");
        build(set, &cfg, &rs, &w);
        assert_int_equal(kdev_plugin_allocate(&rs.resources[0], one, 1, &out, &e), 0);
        assert_int_equal(out.n_envs + out.n_devices + out.n_mounts + out.n_cdi_devices, 0);
        assert_int_equal(out.n_annotations, 1);
        assert_true(strncmp(out.annotations[0]->key, "cdi.example.com/nvidia-device-plugin_",
                            37) == 0);
        assert_int_equal(strlen(out.annotations[0]->key), 37 + 36);
        assert_string_equal(out.annotations[0]->value, "k8s.device-plugin.nvidia.com/gpu=" H100_1);
        kdev_allocate_response_free_contents(&out);
        kdev_resource_set_clear(&rs);
        kdev_nvidia_config_clear(&cfg);
        kdev_gpu_set_free(set);
}

/* The container paths of out.devices, comma-joined, into |buf|. */
static const char *device_paths(const V1beta1__ContainerAllocateResponse *out, char *buf,
                                size_t size)
{
        size_t n = 0;
        buf[0] = '\0';
        for (size_t i = 0; i < out->n_devices; i++)
                n += (size_t)snprintf(buf + n, size - n, "%s%s", i ? "," : "",
                                      out->devices[i]->container_path);
        return buf;
}

/* passDeviceSpecs: the control nodes present under the dev root are stat'ed
 * at most every KDEV_NVIDIA_CONTROL_NODE_TTL_MS (the rdata's ctl cache); a
 * node that appears or disappears is in the answers once that has passed. */
static void test_allocate_control_node_cache(void **state)
{
        struct fx *f = *state;
        struct kdev_gpu_set *set = discover(f, TOPO("h100-80gb-8x-nvswitch.yaml"));
        struct kdev_nvidia_config cfg;
        struct kdev_resource_set rs = {0};
        struct mock_warns w = {0};
        struct kdev_err e;
        char dev[128], path[192], got[512];
        snprintf(dev, sizeof(dev), "%s/dev", f->root);
        config(&cfg, f->root, KDEV_NVIDIA_LIST_ENVVAR, KDEV_NVIDIA_ID_UUID, true, false);
        build(set, &cfg, &rs, &w);
        struct kdev_nvidia_rdata *d = rs.resources[0].ops_data;
        const char *one[] = {H100_1};
        V1beta1__ContainerAllocateResponse out = V1BETA1__CONTAINER_ALLOCATE_RESPONSE__INIT;

        assert_int_equal(kdev_plugin_allocate(&rs.resources[0], one, 1, &out, &e), 0);
        assert_string_equal(device_paths(&out, got, sizeof(got)),
                            "/dev/nvidiactl,/dev/nvidia-uvm,/dev/nvidia1");
        kdev_allocate_response_free_contents(&out);

        /* within the TTL (an hour here) the last stat stands */
        d->ctl.ttl_ns = 3600ull * 1000000000u;
        mock_touch(dev, "nvidia-modeset");
        snprintf(path, sizeof(path), "%s/nvidia-uvm", dev);
        assert_int_equal(unlink(path), 0);
        assert_int_equal(kdev_plugin_allocate(&rs.resources[0], one, 1, &out, &e), 0);
        assert_string_equal(device_paths(&out, got, sizeof(got)),
                            "/dev/nvidiactl,/dev/nvidia-uvm,/dev/nvidia1");
        kdev_allocate_response_free_contents(&out);

        /* past it (1 ns): stat'ed again, the changes are in, in NVIDIA's order */
        d->ctl.ttl_ns = 1;
        assert_int_equal(kdev_plugin_allocate(&rs.resources[0], one, 1, &out, &e), 0);
        assert_string_equal(device_paths(&out, got, sizeof(got)),
                            "/dev/nvidiactl,/dev/nvidia-modeset,/dev/nvidia1");
        kdev_allocate_response_free_contents(&out);

        /* the default TTL: a node that appears is in the answers after it */
        d->ctl.ttl_ns = 0;
        mock_touch(dev, "nvidia-uvm-tools");
        usleep((KDEV_NVIDIA_CONTROL_NODE_TTL_MS + 100) * 1000);
        assert_int_equal(kdev_plugin_allocate(&rs.resources[0], one, 1, &out, &e), 0);
        assert_string_equal(device_paths(&out, got, sizeof(got)),
                            "/dev/nvidiactl,/dev/nvidia-uvm-tools,/dev/nvidia-modeset,"
                            "/dev/nvidia1");
        kdev_allocate_response_free_contents(&out);

        /* back to the fixture's nodes for the next tests */
        mock_touch(dev, "nvidia-uvm");
        snprintf(path, sizeof(path), "%s/nvidia-modeset", dev);
        assert_int_equal(unlink(path), 0);
        snprintf(path, sizeof(path), "%s/nvidia-uvm-tools", dev);
        assert_int_equal(unlink(path), 0);
        kdev_resource_set_clear(&rs);
        kdev_nvidia_config_clear(&cfg);
        kdev_gpu_set_free(set);
}

/* passDeviceSpecs over the driver-root layouts (nvidia/roots.h), exact
 * values: the control nodes and IMEX channels are looked up under the
 * device-node lookup root (the container driver root when it has dev/,
 * else the container's own /; the host dev root when there is no
 * container root), HostPath is <--dev-root>/p (NVIDIA apiDeviceSpecs:
 * filepath.Join(NvidiaDevRoot, p)), ContainerPath p. The fixture's
 * root/dev holds nvidiactl, nvidia-uvm and IMEX channel0; ctr/ has no dev/. */
struct specs_row {
        const char *name;
        const char *driver_root, *dev_root, *ctr; /* '@': under the fixture's tmp */
        const char *lookup; /* NULL: this machine's /dev (the container's own) */
        const char *host;   /* the HostPath prefix; '@': under tmp */
};

static const struct specs_row specs_rows[] = {
        {"/ + /", "/", NULL, "/", NULL, ""},
        {"/run/nvidia/driver + driver-root with dev/", "/run/nvidia/driver", NULL, "@/root",
         "@/root", "/run/nvidia/driver"},
        {"custom /opt/nvidia, dev root /srv/dev-root, ctr with dev/", "/opt/nvidia",
         "/srv/dev-root", "@/root", "@/root", "/srv/dev-root"},
        {"custom /opt/nvidia, dev root /srv/dev-root, ctr without dev/", "/opt/nvidia",
         "/srv/dev-root", "@/ctr", NULL, "/srv/dev-root"},
        {"host: driver root @/root, no container root", "@/root", NULL, "@/missing", "@/root",
         "@/root"},
};

static const char *at_tmp(const struct fx *f, const char *v, char *buf, size_t size)
{
        if (!v || v[0] != '@')
                return v;
        snprintf(buf, size, "%s%s", f->tmp, v + 1);
        return buf;
}

static void test_allocate_specs_layouts(void **state)
{
        struct fx *f = *state;
        struct kdev_gpu_set *set = discover(f, TOPO("h100-80gb-8x-nvswitch.yaml"));
        struct kdev_err e;
        char ctr[128];
        snprintf(ctr, sizeof(ctr), "%s/ctr", f->tmp);
        assert_int_equal(mkdir(ctr, 0755), 0);
        for (size_t r = 0; r < sizeof(specs_rows) / sizeof(specs_rows[0]); r++) {
                const struct specs_row *row = &specs_rows[r];
                char b1[256], b2[256], b3[256], b4[256];
                print_message("layout %s\n", row->name);
                struct kdev_nvidia_config cfg;
                config(&cfg, NULL, KDEV_NVIDIA_LIST_ENVVAR, KDEV_NVIDIA_ID_UUID, true, false);
                free(cfg.driver_root);
                cfg.driver_root = strdup(at_tmp(f, row->driver_root, b1, sizeof(b1)));
                free(cfg.dev_root);
                cfg.dev_root = strdup(row->dev_root ? row->dev_root : cfg.driver_root);
                free(cfg.container_driver_root);
                cfg.container_driver_root = strdup(at_tmp(f, row->ctr, b2, sizeof(b2)));
                cfg.imex_channel_ids = calloc(1, sizeof(unsigned));
                cfg.n_imex_channel_ids = 1;
                struct kdev_resource_set rs = {0};
                struct mock_warns w = {0};
                build(set, &cfg, &rs, &w);
                const char *one[] = {H100_1};
                V1beta1__ContainerAllocateResponse out = V1BETA1__CONTAINER_ALLOCATE_RESPONSE__INIT;
                assert_int_equal(kdev_plugin_allocate(&rs.resources[0], one, 1, &out, &e), 0);
                /* the expected list: the nodes present under the lookup root */
                const char *lookup = at_tmp(f, row->lookup, b3, sizeof(b3));
                const char *host = at_tmp(f, row->host, b4, sizeof(b4));
                static const char *const ctl[] = {"/dev/nvidiactl", "/dev/nvidia-uvm",
                                                  "/dev/nvidia-uvm-tools",
                                                  "/dev/nvidia-modeset"};
                const char *want[8];
                size_t n = 0;
                for (size_t i = 0; i < 4; i++) {
                        char p[256];
                        struct stat st;
                        snprintf(p, sizeof(p), "%s%s", lookup ? lookup : "", ctl[i]);
                        if (stat(p, &st) == 0)
                                want[n++] = ctl[i];
                }
                if (lookup)   /* the fixture's root/dev: exactly these two */
                        assert_int_equal(n, 2);
                want[n++] = "/dev/nvidia1";
                struct stat st;
                bool channel = !lookup ? stat("/dev/nvidia-caps-imex-channels/channel0", &st) == 0
                                       : true;
                if (channel)
                        want[n++] = "/dev/nvidia-caps-imex-channels/channel0";
                assert_int_equal(out.n_devices, n);
                for (size_t i = 0; i < n; i++) {
                        char hp[512];
                        snprintf(hp, sizeof(hp), "%s%s", host, want[i]);
                        assert_string_equal(out.devices[i]->container_path, want[i]);
                        assert_string_equal(out.devices[i]->host_path, hp);
                        assert_string_equal(out.devices[i]->permissions, "rw");
                }
                /* a channel missing under the lookup root is warned about */
                assert_int_equal(w.n, channel ? 0 : 1);
                if (r == 1) { /* the driver-container layout, spelled out */
                        assert_int_equal(out.n_devices, 4);
                        assert_string_equal(out.devices[0]->host_path,
                                            "/run/nvidia/driver/dev/nvidiactl");
                        assert_string_equal(out.devices[1]->host_path,
                                            "/run/nvidia/driver/dev/nvidia-uvm");
                        assert_string_equal(out.devices[2]->host_path,
                                            "/run/nvidia/driver/dev/nvidia1");
                        assert_string_equal(out.devices[3]->host_path,
                                            "/run/nvidia/driver/dev/nvidia-caps-imex-channels/"
                                            "channel0");
                }
                kdev_allocate_response_free_contents(&out);
                kdev_resource_set_clear(&rs);
                kdev_nvidia_config_clear(&cfg);
        }
        kdev_gpu_set_free(set);
}

static void test_uuid4(void **state)
{
        (void)state;
        regex_t re;
        assert_int_equal(regcomp(&re,
                                 "^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-"
                                 "[0-9a-f]{12}$",
                                 REG_EXTENDED | REG_NOSUB),
                         0);
        char a[37], b[37];
        for (int i = 0; i < 64; i++) {
                assert_int_equal(kdev_nvidia_uuid4(a, sizeof(a)), 0);
                assert_int_equal(regexec(&re, a, 0, NULL, 0), 0);
                assert_int_equal(kdev_nvidia_uuid4(b, sizeof(b)), 0);
                assert_string_not_equal(a, b);
        }
        regfree(&re);
        assert_int_equal(kdev_nvidia_uuid4(a, 36), -ENOBUFS);
}

/* --- CDI spec ------------------------------------------------------------------- */

static void test_cdi_spec(void **state)
{
        struct fx *f = *state;
        struct kdev_gpu_set *set = discover(f, TOPO("h200-nvl-4x-pcie-2numa.yaml"));
        struct kdev_err e;
        for (int index = 0; index < 2; index++) {
                struct kdev_nvidia_config cfg;
                config(&cfg, f->root, KDEV_NVIDIA_LIST_CDI_CRI,
                       index ? KDEV_NVIDIA_ID_INDEX : KDEV_NVIDIA_ID_UUID, false, false);
                free(cfg.cdi_dir);
                cfg.cdi_dir = strdup(f->cdi);
                assert_true(kdev_nvidia_cdi_needed(&cfg));
                char path[256], want[256];
                if (kdev_nvidia_cdi_write(set, &cfg, path, sizeof(path), &e) != 0)
                        fail_msg("%s", e.msg);
                snprintf(want, sizeof(want), "%s/k8s.device-plugin.nvidia.com-gpu.json", f->cdi);
                assert_string_equal(path, want);
                struct stat st;
                assert_int_equal(stat(path, &st), 0);
                assert_int_equal(st.st_mode & 0777, 0644);
                struct kdev_cdi_spec *spec = NULL;
                if (kdev_cdi_spec_read(path, &spec, &e) != 0)
                        fail_msg("%s", e.msg);
                assert_string_equal(spec->kind, "k8s.device-plugin.nvidia.com/gpu");
                assert_string_equal(kdev_cdi_spec_version(spec), "0.5.0"); /* hostPath */
                /* spec level: env and the control nodes that exist */
                const struct kdev_cdi_edits *se = &spec->edits;
                assert_int_equal(se->n_env, 1);
                assert_string_equal(se->env[0], "NVIDIA_VISIBLE_DEVICES=void");
                assert_int_equal(se->n_device_nodes, 2);
                assert_string_equal(se->device_nodes[0].path, "/dev/nvidiactl");
                snprintf(want, sizeof(want), "%s/dev/nvidiactl", f->root);
                assert_string_equal(se->device_nodes[0].host_path, want);
                assert_string_equal(se->device_nodes[1].path, "/dev/nvidia-uvm");
                static const char *const uuids[] = {"GPU-59796164-c626-db61-eee7-66572ebef2ef",
                                                    "GPU-7e527414-0bac-bbbc-e316-ea8921487146",
                                                    "GPU-04879f5d-19d7-803a-1faf-d8a3c47f1d02",
                                                    "GPU-3df3207a-fac5-f53c-72bb-c0aa50e21533"};
                static const char *const indices[] = {"0", "1", "2", "3"};
                assert_int_equal(spec->n_devices, 5);
                for (size_t i = 0; i < 4; i++) {
                        const struct kdev_cdi_device *d = spec->devices[i];
                        assert_string_equal(d->name, index ? indices[i] : uuids[i]);
                        assert_int_equal(d->edits.n_device_nodes, 1);
                        snprintf(want, sizeof(want), "/dev/nvidia%zu", i);
                        assert_string_equal(d->edits.device_nodes[0].path, want);
                        snprintf(want, sizeof(want), "%s/dev/nvidia%zu", f->root, i);
                        assert_string_equal(d->edits.device_nodes[0].host_path, want);
                }
                const struct kdev_cdi_device *all = spec->devices[4];
                assert_string_equal(all->name, "all");
                assert_int_equal(all->edits.n_device_nodes, 4);
                for (size_t i = 0; i < 4; i++) {
                        snprintf(want, sizeof(want), "/dev/nvidia%zu", i);
                        assert_string_equal(all->edits.device_nodes[i].path, want);
                }
                /* what was written is what is built */
                struct kdev_cdi_spec *built = NULL;
                assert_int_equal(kdev_nvidia_cdi_spec(set, &cfg, &built, &e), 0);
                assert_int_equal(kdev_cdi_spec_set_min_version(built, "0.5.0", &e), 0);
                assert_true(kdev_cdi_spec_equal(spec, built));
                kdev_cdi_spec_free(built);
                kdev_cdi_spec_free(spec);
                assert_int_equal(kdev_nvidia_cdi_remove(&cfg, &e), 1);
                assert_int_equal(stat(path, &st), -1);
                assert_int_equal(kdev_nvidia_cdi_remove(&cfg, &e), 0);
                kdev_nvidia_config_clear(&cfg);
        }
        /* dev root "/": no hostPath; envvar only: not needed */
        struct kdev_nvidia_config cfg;
        config(&cfg, "/", KDEV_NVIDIA_LIST_ENVVAR, KDEV_NVIDIA_ID_UUID, false, false);
        assert_false(kdev_nvidia_cdi_needed(&cfg));
        struct kdev_cdi_spec *spec = NULL;
        assert_int_equal(kdev_nvidia_cdi_spec(set, &cfg, &spec, &e), 0);
        assert_null(spec->devices[0]->edits.device_nodes[0].host_path);
        kdev_cdi_spec_free(spec);
        /* no GPUs: no spec; write removes a stale file */
        struct kdev_gpu_set empty = {0};
        assert_int_equal(kdev_nvidia_cdi_spec(&empty, &cfg, &spec, &e), -ENODEV);
        assert_string_equal(e.msg, "no GPUs for a CDI spec");
        free(cfg.cdi_dir);
        cfg.cdi_dir = strdup(f->cdi);
        assert_int_equal(kdev_nvidia_cdi_write(set, &cfg, NULL, 0, &e), 0);
        assert_int_equal(kdev_nvidia_cdi_write(&empty, &cfg, NULL, 0, &e), 0);
        assert_int_equal(kdev_nvidia_cdi_remove(&cfg, &e), 0);
        kdev_nvidia_config_clear(&cfg);
        kdev_gpu_set_free(set);
}

static char *slurp_file(const char *path)
{
        char *text = NULL;
        size_t len;
        assert_int_equal(kdev_file_read(path, NULL, 1 << 22, 0, &text, &len, NULL), 0);
        return text;
}

/* kdev-plugin's CDI spec edited behind kdev's back: the next write (a
 * rediscovery) moves it aside to ".k8s.device-plugin.nvidia.com-gpu.json.
 * foreign-<secs>" with the edit, and writes kdev's spec again, byte for
 * byte; at exit an edited spec is moved aside instead of removed. */
static void test_cdi_spec_guarded(void **state)
{
        struct fx *f = *state;
        struct kdev_gpu_set *set = discover(f, TOPO("h200-nvl-4x-pcie-2numa.yaml"));
        struct kdev_file_guard g = {0};
        struct kdev_nvidia_config cfg;
        struct kdev_err e = {0};
        char path[256], aside[4096], want[4200];
        config(&cfg, f->root, KDEV_NVIDIA_LIST_CDI_CRI, KDEV_NVIDIA_ID_UUID, false, false);
        free(cfg.cdi_dir);
        cfg.cdi_dir = strdup(f->cdi);
        assert_int_equal(kdev_nvidia_cdi_write_guarded(set, &cfg, path, sizeof(path), NULL, &g,
                                                       aside, sizeof(aside), &e), 0);
        assert_string_equal(aside, "");
        char *orig = slurp_file(path);
        /* kdev's own file: rewritten without a move */
        assert_int_equal(kdev_nvidia_cdi_write_guarded(set, &cfg, path, sizeof(path), NULL, &g,
                                                       aside, sizeof(aside), &e), 0);
        assert_string_equal(aside, "");
        FILE *fp = fopen(path, "w");
        assert_non_null(fp);
        fputs("{\"cdiVersion\":\"0.5.0\",\"kind\":\"edited/by-hand\",\"devices\":[]}\n", fp);
        assert_int_equal(fclose(fp), 0);
        assert_int_equal(kdev_nvidia_cdi_write_guarded(set, &cfg, path, sizeof(path), NULL, &g,
                                                       aside, sizeof(aside), &e), 1);
        snprintf(want, sizeof(want), "%s/.k8s.device-plugin.nvidia.com-gpu.json.foreign-",
                 f->cdi);
        assert_int_equal(strncmp(aside, want, strlen(want)), 0);
        const char *secs = aside + strlen(want);
        assert_true(*secs && strspn(secs, "0123456789") == strlen(secs));
        char *t = slurp_file(aside);
        assert_string_equal(t,
                            "{\"cdiVersion\":\"0.5.0\",\"kind\":\"edited/by-hand\",\"devices\":[]}\n");
        free(t);
        t = slurp_file(path);
        assert_string_equal(t, orig);
        free(t);
        assert_int_equal(unlink(aside), 0);
        /* at exit: edited again, kept aside rather than removed */
        fp = fopen(path, "a");
        assert_non_null(fp);
        fputs(" ", fp);
        assert_int_equal(fclose(fp), 0);
        assert_int_equal(kdev_nvidia_cdi_remove_guarded(&cfg, &g, aside, sizeof(aside), &e), 2);
        struct stat st;
        assert_int_equal(stat(path, &st), -1);
        t = slurp_file(aside);
        assert_int_equal(strlen(t), strlen(orig) + 1);
        free(t);
        assert_int_equal(unlink(aside), 0);
        free(orig);
        kdev_file_guard_clear(&g);
        kdev_nvidia_config_clear(&cfg);
        kdev_gpu_set_free(set);
}

int main(void)
{
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_every_topology),
                cmocka_unit_test(test_no_gpus_and_errors),
                cmocka_unit_test(test_faulty_gpus),
                cmocka_unit_test(test_carry_faulted_lost_and_removed),
                cmocka_unit_test(test_allocate_matrix),
                cmocka_unit_test(test_allocate_exact),
                cmocka_unit_test(test_allocate_control_node_cache),
                cmocka_unit_test(test_allocate_specs_layouts),
                cmocka_unit_test(test_uuid4),
                cmocka_unit_test(test_cdi_spec),
                cmocka_unit_test(test_cdi_spec_guarded),
        };
        return cmocka_run_group_tests(tests, setup, teardown);
}
