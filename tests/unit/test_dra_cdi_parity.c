/* The DRA claim CDI spec and the device plugin's CDI spec of the same GPU
 * carry the same device nodes, mounts and hooks (nvidia/container_edits.h):
 * on the mock NVML (mig-a100-40gb: GPU 3 whole, GPU 0 in MIG mode) with a
 * driver root in a scratch directory that holds all four control nodes, a
 * driver of the NVML version and a hook binary, both specs are built for
 * GPU 3 and for MIG device MIG-59bcc04e-... (GPU 0, GI 2, CI 0) and compared
 * with each other and with the exact expected lists. */
#include <errno.h>
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

#include "mock_fixture.h"
#include "cdi/cdi.h"
#include "dra/plugin.h"
#include "nvidia/cdi_spec.h"
#include "nvidia/config.h"
#include "nvidia/driver_files.h"

#define UID "7c1d2e3f-0000-4000-8000-00000000a11d"
#define VERSION "550.90.07"
#define GPU3 "GPU-49c5ccb8-7f8c-230b-4fe7-33825480cfa5"
#define MIG0 "MIG-59bcc04e-5cf6-b753-ab18-f13e8543556f"
#define MIG0_DRA "gpu-0-mig-3g20gb-9-4" /* GPU 0 (minor 0), 3g.20gb, GI profile 9, start 4 */

struct fx {
        struct mock_nvml m;
        char tmp[128], sysfs[192], root[192], proc[192], cdi[192], data[192], hook[192];
        struct kdev_gpu_set *set;
        json_t *claim;
};

static void mkdirs(const char *base, const char *rel)
{
        char p[512];
        snprintf(p, sizeof(p), "%s/%s", base, rel);
        for (char *s = p + strlen(base) + 1; *s; s++) {
                if (*s != '/')
                        continue;
                *s = '\0';
                mkdir(p, 0755);
                *s = '/';
        }
        mkdir(p, 0755);
}

/* Creates <base>/<rel> (parents too) with |mode|. */
static void touch(const char *base, const char *rel, mode_t mode)
{
        char p[512];
        snprintf(p, sizeof(p), "%s/%s", base, rel);
        char *slash = strrchr(p, '/');
        *slash = '\0';
        mkdirs(base, p + strlen(base) + 1);
        *slash = '/';
        FILE *f = fopen(p, "w");
        assert_non_null(f);
        fclose(f);
        assert_int_equal(chmod(p, mode), 0);
}

static int setup(void **state)
{
        struct fx *f = calloc(1, sizeof(*f));
        if (!f || mock_nvml_open(&f->m) != 0 ||
            mock_tmpdir(f->tmp, sizeof(f->tmp), "kdev-dra-parity") != 0)
                return -1;
        snprintf(f->sysfs, sizeof(f->sysfs), "%s/sysfs", f->tmp);
        snprintf(f->root, sizeof(f->root), "%s/driver-root", f->tmp);
        snprintf(f->proc, sizeof(f->proc), "%s/proc", f->tmp);
        snprintf(f->cdi, sizeof(f->cdi), "%s/cdi", f->tmp);
        snprintf(f->data, sizeof(f->data), "%s/data", f->tmp);
        snprintf(f->hook, sizeof(f->hook), "%s/bin/nvidia-cdi-hook", f->tmp);
        if (mkdir(f->sysfs, 0755) < 0 || mkdir(f->root, 0755) < 0 || mkdir(f->proc, 0755) < 0 ||
            mkdir(f->data, 0755) < 0)
                return -1;
        /* the four control nodes, the GPUs' nodes, one driver of the NVML
         * version (library, firmware, binary), the hook */
        static const char *const nodes[] = {"dev/nvidiactl", "dev/nvidia-uvm",
                                            "dev/nvidia-uvm-tools", "dev/nvidia-modeset",
                                            "dev/nvidia0", "dev/nvidia3"};
        for (size_t i = 0; i < sizeof(nodes) / sizeof(nodes[0]); i++)
                touch(f->root, nodes[i], 0644);
        touch(f->root, "usr/lib64/libcuda.so." VERSION, 0644);
        touch(f->root, "usr/lib64/libnvidia-ml.so." VERSION, 0644);
        touch(f->root, "lib/firmware/nvidia/" VERSION "/gsp_ga10x.bin", 0644);
        touch(f->root, "usr/bin/nvidia-smi", 0755);
        touch(f->tmp, "bin/nvidia-cdi-hook", 0755);
        mock_nvml_load(&f->m, TOPO("mig-a100-40gb.yaml"), f->sysfs);
        assert_int_equal(f->m.write_proc(f->proc), NVML_SUCCESS);
        f->set = mock_nvml_discover_loaded(&f->m, f->sysfs, 0, NULL);
        assert_string_equal(f->set->driver_version, VERSION);
        f->claim = json_pack(
                "{s:{s:s,s:s,s:s},s:{s:{s:{s:[{s:s,s:s,s:s,s:s},{s:s,s:s,s:s,s:s}]}}}}",
                "metadata", "name", "c", "namespace", "ns", "uid", UID, "status", "allocation",
                "devices", "results", "request", "gpu", "driver", "gpu.nvidia.com", "pool",
                "node1", "device", "gpu-3", "request", "mig", "driver", "gpu.nvidia.com", "pool",
                "node1", "device", MIG0_DRA);
        assert_non_null(f->claim);
        *state = f;
        return 0;
}

static int teardown(void **state)
{
        struct fx *f = *state;
        json_decref(f->claim);
        kdev_gpu_set_free(f->set);
        mock_rmtree(f->tmp);
        mock_nvml_close(&f->m);
        unsetenv("KDEV_MOCK_NVML_TOPOLOGY");
        free(f);
        return 0;
}

static int source(void *arg, const char *ns, const char *name, json_t **claim,
                  struct kdev_err *err)
{
        struct fx *f = arg;
        if (strcmp(ns, "ns") || strcmp(name, "c"))
                return kdev_err_set(err, ENOENT, "GET %s/%s: 404 Not Found", ns, name);
        *claim = json_deep_copy(f->claim);
        return 0;
}

/* The device plugin's spec (migStrategy mixed, cdi-cri, uuid). */
static struct kdev_cdi_spec *plugin_spec(struct fx *f)
{
        struct kdev_nvidia_config cfg;
        struct kdev_err e = {0};
        assert_int_equal(kdev_nvidia_config_init(&cfg, &e), 0);
        cfg.mig_strategy = KDEV_NVIDIA_MIG_MIXED;
        cfg.device_list_strategies = KDEV_NVIDIA_LIST_CDI_CRI;
        cfg.id_strategy = KDEV_NVIDIA_ID_UUID;
        free(cfg.driver_root);
        cfg.driver_root = strdup(f->root);
        free(cfg.container_driver_root);
        cfg.container_driver_root = strdup(""); /* kdev sees the driver root directly */
        free(cfg.proc_root);
        cfg.proc_root = strdup(f->proc);
        free(cfg.cdi_dir);
        cfg.cdi_dir = strdup(f->cdi);
        free(cfg.nvidia_ctk_path);
        cfg.nvidia_ctk_path = strdup(f->hook);
        assert_int_equal(kdev_nvidia_config_finish(&cfg, false, &e), 0);
        struct kdev_cdi_spec *spec = NULL;
        if (kdev_nvidia_cdi_spec(f->set, &cfg, &spec, &e) != 0)
                fail_msg("%s", e.msg);
        kdev_nvidia_config_clear(&cfg);
        return spec;
}

/* The DRA claim spec of claim UID (gpu-3 and the MIG device), with the
 * driver files looked up as kdev-dra-plugin does (under --driver-root). */
static struct kdev_cdi_spec *claim_spec(struct fx *f)
{
        struct kdev_nvidia_driver_files files = {0};
        struct kdev_nvidia_driver_files_options fo = {
                .driver_root = f->root, .driver_version = f->set->driver_version,
                .hook_path = f->hook};
        struct kdev_err e = {0};
        assert_int_equal(kdev_nvidia_driver_files_find(&fo, &files, &e), 2);
        struct kdev_nvidia_gpus gpus; /* the records kdev-dra-plugin's backend makes */
        assert_int_equal(kdev_nvidia_gpus_from_set(f->set, &gpus, &e), 0);
        struct kdev_dra_plugin_options o = {
                .pool = "node1",
                .data_dir = f->data,
                .cdi_dir = f->cdi,
                .dev_root = f->root,
                .proc_root = f->proc,
                .gpus = &gpus,
                .driver_files = &files,
                .get_claim = source,
                .get_claim_arg = f,
        };
        struct kdev_dra_plugin *p = NULL;
        assert_int_equal(kdev_dra_plugin_new(&o, &p, &e), 0);
        const json_t *devs = NULL;
        if (kdev_dra_prepare_claim(p, "ns", "c", UID, &devs, &e) != 0)
                fail_msg("%s", e.msg);
        char path[512];
        assert_true(kdev_dra_claim_spec_path(p, UID, path, sizeof(path), &e) > 0);
        struct kdev_cdi_spec *spec = NULL;
        if (kdev_cdi_spec_read(path, &spec, &e) != 0)
                fail_msg("%s", e.msg);
        /* the answer's CDI device IDs and the spec's devices come from the
         * same container edits: each ID names one device of the spec */
        assert_int_equal(json_array_size(devs), 2);
        assert_int_equal(spec->n_devices, 2);
        for (size_t i = 0; i < 2; i++) {
                const json_t *ids = json_object_get(json_array_get(devs, i), "cdiDeviceIDs");
                char want[256];
                snprintf(want, sizeof(want), KDEV_DRA_CDI_KIND "=%s", spec->devices[i]->name);
                assert_int_equal(json_array_size(ids), 1);
                assert_string_equal(json_string_value(json_array_get(ids, 0)), want);
        }
        kdev_dra_plugin_free(p);
        kdev_nvidia_gpus_clear(&gpus);
        kdev_nvidia_driver_files_clear(&files);
        return spec;
}

static const struct kdev_cdi_device *device(const struct kdev_cdi_spec *s, const char *name)
{
        for (size_t i = 0; i < s->n_devices; i++)
                if (strcmp(s->devices[i]->name, name) == 0)
                        return s->devices[i];
        fail_msg("no CDI device %s", name);
        return NULL;
}

static const char *str(const char *s)
{
        return s ? s : "(null)";
}

/* |e|'s device nodes are exactly |want| (pairs path, host path relative to
 * the driver root, NULL-terminated), nothing else on the nodes set. */
static void assert_nodes(const struct fx *f, const struct kdev_cdi_edits *e,
                         const char *const *want)
{
        size_t n = 0;
        for (; want[n]; n++) {
                char host[512];
                assert_true(n < e->n_device_nodes);
                const struct kdev_cdi_device_node *d = &e->device_nodes[n];
                snprintf(host, sizeof(host), "%s%s", f->root, want[n]);
                assert_string_equal(d->path, want[n]);
                assert_string_equal(str(d->host_path), host);
                assert_null(d->type);
                assert_null(d->permissions);
        }
        assert_int_equal(e->n_device_nodes, n);
}

static void assert_same_strings(char **a, size_t na, char **b, size_t nb)
{
        assert_int_equal(na, nb);
        for (size_t i = 0; i < na; i++)
                assert_string_equal(a[i], b[i]);
}

/* |a| and |b| carry the same env, device nodes, mounts and hooks. */
static void assert_same_edits(const struct kdev_cdi_edits *a, const struct kdev_cdi_edits *b)
{
        assert_same_strings(a->env, a->n_env, b->env, b->n_env);
        assert_int_equal(a->n_device_nodes, b->n_device_nodes);
        for (size_t i = 0; i < a->n_device_nodes; i++) {
                assert_string_equal(a->device_nodes[i].path, b->device_nodes[i].path);
                assert_string_equal(str(a->device_nodes[i].host_path),
                                    str(b->device_nodes[i].host_path));
                assert_string_equal(str(a->device_nodes[i].permissions),
                                    str(b->device_nodes[i].permissions));
        }
        assert_int_equal(a->n_mounts, b->n_mounts);
        for (size_t i = 0; i < a->n_mounts; i++) {
                assert_string_equal(a->mounts[i].host_path, b->mounts[i].host_path);
                assert_string_equal(a->mounts[i].container_path, b->mounts[i].container_path);
                assert_same_strings(a->mounts[i].options, a->mounts[i].n_options,
                                    b->mounts[i].options, b->mounts[i].n_options);
        }
        assert_int_equal(a->n_hooks, b->n_hooks);
        for (size_t i = 0; i < a->n_hooks; i++) {
                assert_string_equal(a->hooks[i].hook_name, b->hooks[i].hook_name);
                assert_string_equal(a->hooks[i].path, b->hooks[i].path);
                assert_same_strings(a->hooks[i].args, a->hooks[i].n_args, b->hooks[i].args,
                                    b->hooks[i].n_args);
                assert_same_strings(a->hooks[i].env, a->hooks[i].n_env, b->hooks[i].env,
                                    b->hooks[i].n_env);
        }
}

static void test_same_edits(void **state)
{
        struct fx *f = *state;
        struct kdev_cdi_spec *dp = plugin_spec(f);
        struct kdev_cdi_spec *dra = claim_spec(f);

        /* whole GPU 3 (minor 3) */
        const struct kdev_cdi_device *a = device(dp, GPU3);
        const struct kdev_cdi_device *b = device(dra, UID "-gpu-3");
        assert_nodes(f, &a->edits, (const char *const[]){"/dev/nvidia3", NULL});
        assert_same_edits(&a->edits, &b->edits);
        assert_int_equal(a->edits.n_env + a->edits.n_mounts + a->edits.n_hooks, 0);

        /* MIG device: the parent's node, GI 2 / CI 0 access caps 21 and 22 */
        a = device(dp, MIG0);
        b = device(dra, UID "-" MIG0_DRA);
        assert_nodes(f, &a->edits,
                     (const char *const[]){"/dev/nvidia0", "/dev/nvidia-caps/nvidia-cap21",
                                           "/dev/nvidia-caps/nvidia-cap22", NULL});
        assert_same_edits(&a->edits, &b->edits);

        /* spec level: env (nvcdi's order), the four control nodes
         * (nvidia-modeset included), the driver's files as mounts and the
         * five hooks of nvcdi v1.20 */
        const struct kdev_cdi_edits *s = &dp->edits;
        assert_same_edits(s, &dra->edits);
        assert_int_equal(s->n_env, 2);
        assert_string_equal(s->env[0], "NVIDIA_CTK_LIBCUDA_DIR=/usr/lib64");
        assert_string_equal(s->env[1], "NVIDIA_VISIBLE_DEVICES=void");
        assert_nodes(f, s,
                     (const char *const[]){"/dev/nvidiactl", "/dev/nvidia-uvm",
                                           "/dev/nvidia-uvm-tools", "/dev/nvidia-modeset",
                                           NULL});
        static const char *const mounts[] = {
                "/usr/lib64/libcuda.so." VERSION, "/usr/lib64/libnvidia-ml.so." VERSION,
                "/lib/firmware/nvidia/" VERSION "/gsp_ga10x.bin", "/usr/bin/nvidia-smi"};
        static const char *const opts[] = {"ro", "nosuid", "nodev", "rbind", "rprivate"};
        assert_int_equal(s->n_mounts, 4);
        for (size_t i = 0; i < 4; i++) {
                char host[512];
                snprintf(host, sizeof(host), "%s%s", f->root, mounts[i]);
                assert_string_equal(s->mounts[i].host_path, host);
                assert_string_equal(s->mounts[i].container_path, mounts[i]);
                assert_int_equal(s->mounts[i].n_options, 5);
                for (size_t k = 0; k < 5; k++)
                        assert_string_equal(s->mounts[i].options[k], opts[k]);
        }
        static const char *const symlinks[] = {"nvidia-cdi-hook", "create-symlinks", "--link",
                                               "libcuda.so.1::/usr/lib64/libcuda.so"};
        static const char *const compat[] = {"nvidia-cdi-hook", "enable-cuda-compat",
                                             "--host-driver-version=" VERSION};
        static const char *const ldcache[] = {"nvidia-cdi-hook", "update-ldcache", "--folder",
                                              "/usr/lib64"};
        static const char *const nodemod[] = {"nvidia-cdi-hook",
                                              "disable-device-node-modification"};
        static const char *const profile[] = {"nvidia-cdi-hook", "update-application-profile"};
        const char *const *args[] = {symlinks, compat, ldcache, nodemod, profile};
        const size_t n_args[] = {4, 3, 4, 2, 2};
        assert_int_equal(s->n_hooks, 5);
        for (size_t i = 0; i < 5; i++) {
                const struct kdev_cdi_hook *h = &s->hooks[i];
                assert_string_equal(h->hook_name, "createContainer");
                assert_string_equal(h->path, f->hook);
                assert_int_equal(h->n_args, n_args[i]);
                for (size_t k = 0; k < n_args[i]; k++)
                        assert_string_equal(h->args[k], args[i][k]);
                assert_int_equal(h->n_env, 1);
                assert_string_equal(h->env[0], "NVIDIA_CTK_DEBUG=false");
        }
        kdev_cdi_spec_free(dp);
        kdev_cdi_spec_free(dra);
}

/* Without nvidia-modeset on the node, neither spec names it (both skip a
 * control node that does not exist, NVIDIA's os.Stat check). */
static void test_missing_control_node(void **state)
{
        struct fx *f = *state;
        char p[512];
        snprintf(p, sizeof(p), "%s/dev/nvidia-modeset", f->root);
        assert_int_equal(unlink(p), 0);
        struct kdev_cdi_spec *dp = plugin_spec(f);
        struct kdev_cdi_spec *dra = claim_spec(f);
        assert_nodes(f, &dp->edits,
                     (const char *const[]){"/dev/nvidiactl", "/dev/nvidia-uvm",
                                           "/dev/nvidia-uvm-tools", NULL});
        assert_same_edits(&dp->edits, &dra->edits);
        kdev_cdi_spec_free(dp);
        kdev_cdi_spec_free(dra);
}

int main(void)
{
        const struct CMUnitTest tests[] = {
                cmocka_unit_test_setup_teardown(test_same_edits, setup, teardown),
                cmocka_unit_test_setup_teardown(test_missing_control_node, setup, teardown),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
