/* DRA ResourceSlices (src/dra/slices.c): devices from a GPU set (names,
 * attributes, capacity, health), pool split, and reconcile against the
 * stand-in API server (tests/kubeapi/server.py): publish, >128 devices split,
 * slice deleted externally, health change, 409 conflicts, API server down and
 * back, v1beta1. Server tests are skipped without /usr/bin/python3. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "dra/slices.h"
#include "kube/kube.h"
#include "nvml/discover.h"

#define PY "/usr/bin/python3"
#define SERVER KDEV_SOURCE_DIR "/tests/kubeapi/server.py"

static pid_t srv_pid;
static int srv_in = -1;
static json_t *srv_info;
static struct kdev_kube *adm;
static bool have_server;

static const char *info_str(const char *key)
{
        return json_string_value(json_object_get(srv_info, key));
}

static int group_setup(void **state)
{
        (void)state;
        if (access(PY, X_OK) != 0)
                return 0;
        int in[2], out[2];
        if (pipe2(in, O_CLOEXEC) < 0 || pipe2(out, O_CLOEXEC) < 0)
                return -1;
        srv_pid = fork();
        if (srv_pid < 0)
                return -1;
        if (srv_pid == 0) {
                dup2(in[0], 0);
                dup2(out[1], 1);
                execl(PY, PY, SERVER, (char *)NULL);
                _exit(127);
        }
        close(in[0]);
        close(out[1]);
        srv_in = in[1];
        char line[4096];
        size_t len = 0;
        for (;;) {
                struct pollfd p = {.fd = out[0], .events = POLLIN};
                if (poll(&p, 1, 60000) <= 0)
                        break;
                ssize_t r = read(out[0], line + len, sizeof(line) - 1 - len);
                if (r <= 0)
                        break;
                len += (size_t)r;
                if (memchr(line, '\n', len) || len == sizeof(line) - 1)
                        break;
        }
        close(out[0]);
        line[len] = '\0';
        srv_info = json_loads(line, JSON_DISABLE_EOF_CHECK, NULL);
        if (!srv_info)
                return -1;
        struct kdev_kube_config cfg = {.server = (char *)info_str("admin_url")};
        struct kdev_kube_opts o = {.attempts = 1};
        adm = kdev_kube_new(&cfg, &o, NULL);
        have_server = adm != NULL;
        return adm ? 0 : -1;
}

static int group_teardown(void **state)
{
        (void)state;
        if (srv_pid > 0) {
                close(srv_in);
                kill(srv_pid, SIGTERM);
                waitpid(srv_pid, NULL, 0);
        }
        json_decref(srv_info);
        kdev_kube_free(adm);
        kdev_kube_global_cleanup();
        return 0;
}

#define NEED_SERVER()                                                                    \
        do {                                                                             \
                if (!have_server) {                                                      \
                        print_message("no /usr/bin/python3: skipped\n");                 \
                        skip();                                                          \
                }                                                                        \
        } while (0)

static struct kdev_kube *client(const char *version, unsigned attempts)
{
        struct kdev_kube_config cfg = {.server = (char *)info_str("url")};
        struct kdev_kube_opts o = {.version = version, .attempts = attempts, .backoff_ms = 10,
                                   .backoff_max_ms = 100, .timeout_ms = 20000};
        struct kdev_kube *k = kdev_kube_new(&cfg, &o, NULL);
        assert_non_null(k);
        return k;
}

static void admin(const char *method, const char *path, const char *body, json_t **out)
{
        json_t *b = body ? json_loads(body, 0, NULL) : NULL;
        assert_true(!body || b);
        struct kdev_err err = {0};
        int rc = kdev_kube_request(adm, method, path, b, out, &err);
        if (rc < 0)
                print_error("admin %s %s: %s\n", method, path, err.msg);
        assert_int_equal(rc, 0);
        json_decref(b);
}

/* API requests since the last call, as "METHOD status" words. */
static void requests(char *buf, size_t size)
{
        json_t *r;
        admin("GET", "/_admin/requests", NULL, &r);
        admin("DELETE", "/_admin/requests", NULL, NULL);
        size_t i, n = 0;
        json_t *e;
        buf[0] = '\0';
        json_array_foreach(json_object_get(r, "items"), i, e) {
                n += (size_t)snprintf(buf + n, size - n, "%s%s %lld", n ? " " : "",
                                      json_string_value(json_object_get(e, "method")),
                                      json_integer_value(json_object_get(e, "status")));
        }
        json_decref(r);
}

/* Seeds Node |name| and returns its uid (static buffer). */
static const char *seed_node(const char *name)
{
        static char uid[128];
        char body[256];
        snprintf(body, sizeof(body),
                 "{\"apiVersion\":\"v1\",\"kind\":\"Node\",\"metadata\":{\"name\":\"%s\"}}",
                 name);
        admin("POST", "/_admin/objects", body, NULL);
        json_t *all;
        admin("GET", "/_admin/objects", NULL, &all);
        size_t i;
        json_t *o;
        uid[0] = '\0';
        json_array_foreach(json_object_get(all, "items"), i, o) {
                const json_t *md = json_object_get(o, "metadata");
                if (strcmp(json_string_value(json_object_get(o, "kind")), "Node") == 0 &&
                    strcmp(json_string_value(json_object_get(md, "name")), name) == 0)
                        snprintf(uid, sizeof(uid), "%s",
                                 json_string_value(json_object_get(md, "uid")));
        }
        json_decref(all);
        assert_true(uid[0]);
        return uid;
}

/* The slices of |node| as stored (v1), sorted by number of devices, descending. */
static json_t *stored(struct kdev_kube *k, const char *node)
{
        json_t *items;
        struct kdev_err err = {0};
        assert_true(kdev_kube_list_slices(k, node, NULL, &items, &err) >= 0);
        size_t n = json_array_size(items);
        for (size_t i = 0; i + 1 < n; i++)
                for (size_t j = i + 1; j < n; j++) {
                        json_t *a = json_array_get(items, i), *b = json_array_get(items, j);
                        if (json_array_size(json_object_get(json_object_get(a, "spec"),
                                                            "devices")) <
                            json_array_size(json_object_get(json_object_get(b, "spec"),
                                                            "devices"))) {
                                json_incref(a);
                                json_incref(b);
                                json_array_set_new(items, i, b);
                                json_array_set_new(items, j, a);
                        }
                }
        return items;
}

static long long pool_int(const json_t *slice, const char *key)
{
        return json_integer_value(
                json_object_get(json_object_get(json_object_get(slice, "spec"), "pool"), key));
}

static size_t ndev(const json_t *slice)
{
        return json_array_size(json_object_get(json_object_get(slice, "spec"), "devices"));
}

static const char *dev_name(const json_t *slice, size_t i)
{
        return json_string_value(json_object_get(
                json_array_get(json_object_get(json_object_get(slice, "spec"), "devices"), i),
                "name"));
}

/* --- a hand-made GPU set ------------------------------------------------------------
 * NVML's discovery result, turned into the NVIDIA backend's GPU records
 * (kdev_nvidia_gpus_from_set) as kdev-dra-plugin's backend does, before each
 * build. */

static struct kdev_gpu_set *make_set(size_t n_gpus, bool with_mig)
{
        struct kdev_gpu_set *s = calloc(1, sizeof(*s));
        assert_non_null(s);
        snprintf(s->driver_version, sizeof(s->driver_version), "550.90.07");
        s->cuda_driver_version = 12040;
        s->gpus = calloc(n_gpus, sizeof(*s->gpus));
        s->n_gpus = n_gpus;
        for (size_t i = 0; i < n_gpus; i++) {
                struct kdev_gpu *g = &s->gpus[i];
                g->index = (unsigned)i;
                g->minor = (unsigned)i + 10;
                snprintf(g->uuid, sizeof(g->uuid), "GPU-%04zx", i);
                snprintf(g->name, sizeof(g->name), "NVIDIA H100 80GB HBM3");
                snprintf(g->sysfs_bus_id, sizeof(g->sysfs_bus_id), "0000:%02zx:00.0", i + 1);
                /* GPU 0 on NUMA node 1 under root pci0000:00, the others
                 * without NUMA affinity, GPU 1 under pci0000:01, GPU 2 with
                 * no root known */
                g->numa_node = i == 0 ? 1 : -1;
                if (i < 2)
                        snprintf(g->pcie_root, sizeof(g->pcie_root), "pci0000:%02zx", i);
                g->memory_total = 80ULL << 30;
                g->cc_major = 9;
                g->arch = NVML_DEVICE_ARCH_HOPPER;
                g->has_brand = true;
                g->brand = NVML_BRAND_NVIDIA;
                g->multiprocessors = 132;
        }
        if (with_mig && n_gpus > 1) {
                struct kdev_gpu *g = &s->gpus[1];
                g->mig_current = NVML_DEVICE_MIG_ENABLE;
                g->n_migs = 2;
                g->migs = calloc(2, sizeof(*g->migs));
                for (unsigned j = 0; j < 2; j++) {
                        struct kdev_mig_device *m = &g->migs[j];
                        snprintf(m->uuid, sizeof(m->uuid), "MIG-%u", j);
                        snprintf(m->name, sizeof(m->name), "NVIDIA H100 80GB HBM3 MIG 1g.10gb");
                        m->gi_profile.id = 19;
                        m->gi_profile.memorySizeMB = 9856;
                        m->gi_profile.copyEngineCount = 1;
                        m->gi_profile.decoderCount = 1;
                        m->ci_profile.id = 0;
                        m->ci_profile.multiprocessorCount = 16;
                        m->gi_placement.start = j;
                        m->memory_ret = NVML_ERROR_NO_PERMISSION;
                }
        }
        return s;
}

static void free_set(struct kdev_gpu_set *s)
{
        for (size_t i = 0; i < s->n_gpus; i++)
                free(s->gpus[i].migs);
        free(s->gpus);
        free(s);
}

/* kdev_dra_build_devices of the records of |s|. */
static int build_from_set(const struct kdev_gpu_set *s, const struct kdev_dra_health *h,
                          json_t **d, struct kdev_err *err)
{
        struct kdev_nvidia_gpus recs;
        assert_int_equal(kdev_nvidia_gpus_from_set(s, &recs, err), 0);
        int rc = kdev_dra_build_devices(&recs, h, d, err);
        kdev_nvidia_gpus_clear(&recs);
        return rc;
}

static json_t *devices_of(const struct kdev_gpu_set *s, const struct kdev_dra_health *h,
                          int want)
{
        json_t *d;
        struct kdev_err err = {0};
        assert_int_equal(build_from_set(s, h, &d, &err), want);
        return d;
}

/* --- pure functions ------------------------------------------------------------------ */

static void test_quantity_semver(void **state)
{
        (void)state;
        char b[32];
        kdev_dra_quantity(85899345920ULL, b, sizeof(b));
        assert_string_equal(b, "80Gi");
        kdev_dra_quantity(1000, b, sizeof(b));
        assert_string_equal(b, "1000");
        kdev_dra_quantity(9856ULL << 20, b, sizeof(b));
        assert_string_equal(b, "9856Mi");
        kdev_dra_quantity(0, b, sizeof(b));
        assert_string_equal(b, "0");
        kdev_dra_quantity(16, b, sizeof(b));
        assert_string_equal(b, "16");
        assert_int_equal(kdev_dra_semver("550.90.07", b, sizeof(b)), 0);
        assert_string_equal(b, "550.90.7");
        assert_int_equal(kdev_dra_semver("535.104", b, sizeof(b)), 0);
        assert_string_equal(b, "535.104.0");
        assert_int_equal(kdev_dra_semver("1.2.3.4", b, sizeof(b)), -EINVAL);
        assert_int_equal(kdev_dra_semver("1..2", b, sizeof(b)), -EINVAL);
        assert_int_equal(kdev_dra_semver("", b, sizeof(b)), -EINVAL);
        assert_int_equal(kdev_dra_semver("r550", b, sizeof(b)), -EINVAL);
}

static void test_build_devices(void **state)
{
        (void)state;
        struct kdev_gpu_set *s = make_set(3, true);
        json_t *d = devices_of(s, NULL, 4);
        json_t *want = json_loads(
                "[{\"name\":\"gpu-10\",\"attributes\":{\"type\":{\"string\":\"gpu\"},"
                "\"uuid\":{\"string\":\"GPU-0000\"},"
                "\"productName\":{\"string\":\"NVIDIA H100 80GB HBM3\"},"
                "\"brand\":{\"string\":\"Nvidia\"},"
                "\"architecture\":{\"string\":\"Hopper\"},"
                "\"cudaComputeCapability\":{\"version\":\"9.0.0\"},"
                "\"driverVersion\":{\"version\":\"550.90.7\"},"
                "\"cudaDriverVersion\":{\"version\":\"12.4.0\"},"
                "\"pcieBusID\":{\"string\":\"0000:01:00.0\"},"
                "\"resource.kubernetes.io/pcieRoot\":{\"string\":\"pci0000:00\"},"
                "\"resource.kubernetes.io/numaNode\":{\"int\":1},"
                "\"index\":{\"int\":0},\"minor\":{\"int\":10}},"
                "\"capacity\":{\"memory\":{\"value\":\"80Gi\"},"
                "\"multiprocessors\":{\"value\":\"132\"}}},"
                "{\"name\":\"gpu-11-mig-1g10gb-19-0\","
                "\"attributes\":{\"type\":{\"string\":\"mig\"},"
                "\"uuid\":{\"string\":\"MIG-0\"},\"parentUUID\":{\"string\":\"GPU-0001\"},"
                "\"profile\":{\"string\":\"1g.10gb\"},"
                "\"productName\":{\"string\":\"NVIDIA H100 80GB HBM3\"},"
                "\"brand\":{\"string\":\"Nvidia\"},"
                "\"architecture\":{\"string\":\"Hopper\"},"
                "\"cudaComputeCapability\":{\"version\":\"9.0.0\"},"
                "\"driverVersion\":{\"version\":\"550.90.7\"},"
                "\"cudaDriverVersion\":{\"version\":\"12.4.0\"},"
                "\"pcieBusID\":{\"string\":\"0000:02:00.0\"},"
                "\"resource.kubernetes.io/pcieRoot\":{\"string\":\"pci0000:01\"},"
                "\"index\":{\"int\":1},\"minor\":{\"int\":11}},"
                "\"capacity\":{\"memory\":{\"value\":\"9856Mi\"},"
                "\"multiprocessors\":{\"value\":\"16\"},\"copyEngines\":{\"value\":\"1\"},"
                "\"decoders\":{\"value\":\"1\"},\"encoders\":{\"value\":\"0\"},"
                "\"jpegEngines\":{\"value\":\"0\"},\"ofaEngines\":{\"value\":\"0\"}}}]",
                0, NULL);
        assert_non_null(want);
        assert_true(json_equal(json_array_get(d, 0), json_array_get(want, 0)));
        assert_true(json_equal(json_array_get(d, 1), json_array_get(want, 1)));
        assert_string_equal(json_string_value(json_object_get(json_array_get(d, 2), "name")),
                            "gpu-11-mig-1g10gb-19-1");
        assert_string_equal(json_string_value(json_object_get(json_array_get(d, 3), "name")),
                            "gpu-12");
        json_decref(want);
        json_decref(d);

        /* brand and SM count unknown (library without the entry points): omitted;
         * other brands spelled as NVIDIA's DRA driver does */
        s->gpus[0].has_brand = false;
        s->gpus[0].multiprocessors = 0;
        s->gpus[2].brand = NVML_BRAND_GEFORCE_RTX;
        d = devices_of(s, NULL, 4);
        json_t *a0 = json_object_get(json_array_get(d, 0), "attributes");
        assert_null(json_object_get(a0, "brand"));
        assert_int_equal(json_object_size(a0), 12); /* with pcieRoot and numaNode */
        char *cap0 = json_dumps(json_object_get(json_array_get(d, 0), "capacity"),
                                JSON_COMPACT);
        assert_string_equal(cap0, "{\"memory\":{\"value\":\"80Gi\"}}");
        free(cap0);
        json_t *b2 = json_object_get(json_object_get(json_array_get(d, 3), "attributes"),
                                     "brand");
        assert_string_equal(json_string_value(json_object_get(b2, "string")), "GeForceRTX");
        json_decref(d);
        s->gpus[0].has_brand = true;
        s->gpus[0].multiprocessors = 132;
        s->gpus[2].brand = NVML_BRAND_NVIDIA;

        /* health: an unhealthy GPU takes its MIG devices with it; a MIG alone; faults */
        const char *bad1[] = {"GPU-0001"};
        struct kdev_dra_health h = {bad1, 1};
        d = devices_of(s, &h, 2);
        assert_string_equal(json_string_value(json_object_get(json_array_get(d, 1), "name")),
                            "gpu-12");
        json_decref(d);
        const char *bad2[] = {"MIG-0", "GPU-nope"};
        h = (struct kdev_dra_health){bad2, 2};
        d = devices_of(s, &h, 3);
        assert_string_equal(json_string_value(json_object_get(json_array_get(d, 1), "name")),
                            "gpu-11-mig-1g10gb-19-1");
        json_decref(d);
        s->gpus[0].fault = NVML_ERROR_GPU_IS_LOST;
        d = devices_of(s, NULL, 3);
        assert_string_equal(json_string_value(json_object_get(json_array_get(d, 0), "name")),
                            "gpu-11-mig-1g10gb-19-0");
        json_decref(d);
        /* no UUID without a fault: an error */
        s->gpus[0].fault = NVML_SUCCESS;
        s->gpus[0].uuid[0] = '\0';
        struct kdev_err err = {0};
        assert_int_equal(build_from_set(s, NULL, &d, &err), -EINVAL);
        assert_null(d);
        assert_string_equal(err.msg, "GPU 0: no UUID");
        free_set(s);
}

/* A valid DNS label of at most 63 characters: [a-z0-9-], alphanumeric at
 * both ends. */
static void assert_dns_label(const char *s)
{
        size_t n = strlen(s);

        assert_true(n >= 1 && n <= KDEV_DRA_DEVICE_NAME_MAX);
        for (size_t i = 0; i < n; i++)
                assert_true((s[i] >= 'a' && s[i] <= 'z') || (s[i] >= '0' && s[i] <= '9') ||
                            (s[i] == '-' && i > 0 && i + 1 < n));
}

static const char *mig_name(const struct kdev_gpu *g, const struct kdev_mig_device *m)
{
        static char buf[KDEV_DRA_DEVICE_NAME_MAX + 1];
        int n = kdev_nvidia_dra_mig_name(g, m, buf, sizeof(buf));

        assert_int_equal(n, (int)strlen(buf));
        assert_dns_label(buf);
        return buf;
}

/* NVIDIA's canonical MIG device names (k8s-dra-driver-gpu mig.go):
 * gpu-<parent minor>-mig-<profile, dots dropped>-<GI profile id>-<start>. */
static void test_mig_device_name(void **state)
{
        (void)state;
        struct kdev_gpu g = {.minor = 0, .memory_total = 40ULL << 30,
                             .memory_ret = NVML_SUCCESS};
        struct kdev_mig_device m = {0};
        char buf[KDEV_DRA_DEVICE_NAME_MAX + 1];

        /* A100-40GB 3g.20gb (GI profile id 9) at placement 4 */
        snprintf(m.name, sizeof(m.name), "NVIDIA A100-SXM4-40GB MIG 3g.20gb");
        m.gi_profile.id = 9;
        m.gi_profile.sliceCount = 3;
        m.gi_profile.memorySizeMB = 19968;
        m.ci_profile.sliceCount = 3;
        m.gi_placement.start = 4;
        m.ci_id = 7; /* GI/CI ids play no part */
        m.gi_id = 2;
        assert_string_equal(mig_name(&g, &m), "gpu-0-mig-3g20gb-9-4");
        g.minor = 12;
        assert_string_equal(mig_name(&g, &m), "gpu-12-mig-3g20gb-9-4");
        g.minor = 0;
        /* attributes: '+' (and any other character) becomes '-' */
        snprintf(m.name, sizeof(m.name), "NVIDIA A100-SXM4-40GB MIG 1g.5gb+me");
        m.gi_profile.id = 20;
        m.gi_placement.start = 6;
        assert_string_equal(mig_name(&g, &m), "gpu-0-mig-1g5gb-me-20-6");
        snprintf(m.name, sizeof(m.name), "NVIDIA H100 MIG 1g.10gb+me.all");
        assert_string_equal(mig_name(&g, &m), "gpu-0-mig-1g10gb-meall-20-6");
        snprintf(m.name, sizeof(m.name), "X MIG 1g.24gb+gfx");
        assert_string_equal(mig_name(&g, &m), "gpu-0-mig-1g24gb-gfx-20-6");
        snprintf(m.name, sizeof(m.name), "X MIG _2G.10GB (Foo)!");
        m.gi_profile.id = 14;
        m.gi_placement.start = 0;
        assert_string_equal(mig_name(&g, &m), "gpu-0-mig-2g10gb--foo-14-0");
        snprintf(m.name, sizeof(m.name), "X MIG 7g.40gb");
        m.gi_profile.id = 0;
        assert_string_equal(mig_name(&g, &m), "gpu-0-mig-7g40gb-0-0");

        /* a CI that does not span its GI: "-ci<CI placement start>" keeps
         * the CIs of one GI apart */
        snprintf(m.name, sizeof(m.name), "NVIDIA A100-SXM4-40GB MIG 1c.3g.20gb");
        m.gi_profile.id = 9;
        m.gi_placement.start = 4;
        m.ci_profile.sliceCount = 1;
        m.ci_placement.start = 0;
        assert_string_equal(mig_name(&g, &m), "gpu-0-mig-1c3g20gb-ci0-9-4");
        m.ci_placement.start = 2;
        assert_string_equal(mig_name(&g, &m), "gpu-0-mig-1c3g20gb-ci2-9-4");

        /* no profile in NVML's name (or nothing usable): go-nvlib's spelling
         * from the profiles, GB rounded as go-nvlib does */
        m.name[0] = '\0';
        m.ci_profile.sliceCount = 3;
        assert_string_equal(mig_name(&g, &m), "gpu-0-mig-3g20gb-9-4");
        snprintf(m.name, sizeof(m.name), "NVIDIA A100-SXM4-40GB MIG +.+");
        assert_string_equal(mig_name(&g, &m), "gpu-0-mig-3g20gb-9-4");
        snprintf(m.name, sizeof(m.name), "NVIDIA A100-SXM4-40GB");
        m.ci_profile.sliceCount = 2;
        m.ci_placement.start = 1;
        assert_string_equal(mig_name(&g, &m), "gpu-0-mig-2c3g20gb-ci1-9-4");
        m.gi_profile_index = NVML_GPU_INSTANCE_PROFILE_1_SLICE_REV1;
        m.gi_profile.id = 20;
        m.gi_profile.sliceCount = 1;
        m.gi_profile.memorySizeMB = 4864;
        m.ci_profile.sliceCount = 1;
        m.gi_placement.start = 6;
        assert_string_equal(mig_name(&g, &m), "gpu-0-mig-1g5gb-me-20-6");
        m.gi_profile_index = NVML_GPU_INSTANCE_PROFILE_2_SLICE_REV1;
        m.gi_profile.sliceCount = 2;
        m.gi_profile.memorySizeMB = 9856;
        m.ci_profile.sliceCount = 2;
        assert_string_equal(mig_name(&g, &m), "gpu-0-mig-2g10gb-me-20-6");
        /* H100 80GB 1g.10gb (9856 MiB of 80 GiB): 10 */
        g.memory_total = 80ULL << 30;
        m.gi_profile_index = 0;
        m.gi_profile.id = 19;
        m.gi_profile.sliceCount = 1;
        m.ci_profile.sliceCount = 1;
        m.gi_placement.start = 3;
        assert_string_equal(mig_name(&g, &m), "gpu-0-mig-1g10gb-19-3");
        /* parent memory unknown: MiB / 1024 rounded up */
        g.memory_ret = NVML_ERROR_NO_PERMISSION;
        g.memory_total = 0;
        m.gi_profile.memorySizeMB = 9985;
        assert_string_equal(mig_name(&g, &m), "gpu-0-mig-1g10gb-19-3");

        /* at most 63 characters: the profile part is shortened (and never
         * ends in '-') */
        g.minor = 4294967295u;
        m.gi_profile.id = 4294967295u;
        m.gi_placement.start = 4294967295u;
        snprintf(m.name, sizeof(m.name), "X MIG %s", "abcdefghij.klmnopqrs-tuvwxyz0123456789");
        assert_string_equal(mig_name(&g, &m),
                            "gpu-4294967295-mig-abcdefghijklmnopqrs-tu-4294967295-4294967295");
        assert_int_equal(strlen(mig_name(&g, &m)), 63);
        snprintf(m.name, sizeof(m.name), "X MIG %s", "abcdefghijklmnopqrstu-vwxyz");
        assert_string_equal(mig_name(&g, &m),
                            "gpu-4294967295-mig-abcdefghijklmnopqrstu-4294967295-4294967295");
        /* |buf| too small */
        assert_int_equal(kdev_nvidia_dra_mig_name(&g, &m, buf, 20), -ENAMETOOLONG);
}

static void test_split(void **state)
{
        (void)state;
        struct kdev_gpu_set *s = make_set(300, false);
        json_t *d = devices_of(s, NULL, 300), *specs;
        struct kdev_dra_pool p = {.node = "n1"};
        struct kdev_err err = {0};
        assert_int_equal(kdev_dra_split(&p, d, 7, &specs, &err), 3);
        size_t i;
        json_t *sp;
        size_t sizes[3] = {128, 128, 44};
        json_array_foreach(specs, i, sp) {
                assert_int_equal(json_array_size(json_object_get(sp, "devices")), sizes[i]);
                assert_string_equal(json_string_value(json_object_get(sp, "driver")),
                                    "gpu.nvidia.com");
                assert_string_equal(json_string_value(json_object_get(sp, "nodeName")), "n1");
                json_t *pool = json_object_get(sp, "pool");
                assert_string_equal(json_string_value(json_object_get(pool, "name")), "n1");
                assert_int_equal(json_integer_value(json_object_get(pool, "generation")), 7);
                assert_int_equal(
                        json_integer_value(json_object_get(pool, "resourceSliceCount")), 3);
        }
        assert_string_equal(json_string_value(json_object_get(
                                    json_array_get(json_object_get(json_array_get(specs, 2),
                                                                   "devices"),
                                                   0),
                                    "name")),
                            "gpu-266");
        json_decref(specs);
        /* smaller cap; empty pool is one empty slice; no node */
        p.max_per_slice = 100;
        p.driver = "gpu.example.com";
        assert_int_equal(kdev_dra_split(&p, d, 1, &specs, &err), 3);
        assert_string_equal(json_string_value(json_object_get(json_array_get(specs, 0),
                                                              "driver")),
                            "gpu.example.com");
        json_decref(specs);
        json_t *empty = json_array();
        assert_int_equal(kdev_dra_split(&p, empty, 1, &specs, &err), 1);
        assert_int_equal(json_array_size(json_object_get(json_array_get(specs, 0), "devices")),
                         0);
        json_decref(specs);
        p.node = NULL;
        assert_int_equal(kdev_dra_split(&p, empty, 1, &specs, &err), -EINVAL);
        json_decref(empty);
        json_decref(d);
        free_set(s);
}

/* --- against the stand-in API server ------------------------------------------------ */

static void reconcile_ok(struct kdev_kube *k, const struct kdev_dra_pool *p, const json_t *d,
                         struct kdev_dra_reconcile_result *r)
{
        struct kdev_err err = {0};
        int rc = kdev_dra_slices_reconcile(k, p, d, r, &err);
        if (rc < 0)
                print_error("reconcile: %s\n", err.msg);
        assert_int_equal(rc, 0);
}

static void test_publish(void **state)
{
        (void)state;
        NEED_SERVER();
        struct kdev_kube *k = client(NULL, 3);
        const char *uid = seed_node("pub-node");
        struct kdev_gpu_set *s = make_set(3, true);
        json_t *d = devices_of(s, NULL, 4);
        struct kdev_dra_pool p = {.node = "pub-node"};
        struct kdev_dra_reconcile_result r;
        char log[1024];
        requests(log, sizeof(log));
        reconcile_ok(k, &p, d, &r);
        assert_int_equal(r.generation, 1);
        assert_int_equal(r.slices, 1);
        assert_int_equal(r.created, 1);
        assert_int_equal(r.updated + r.deleted, 0);
        assert_true(r.changed);
        requests(log, sizeof(log));
        assert_string_equal(log, "GET 200 GET 200 POST 201");

        json_t *st = stored(k, "pub-node");
        assert_int_equal(json_array_size(st), 1);
        json_t *sl = json_array_get(st, 0);
        assert_int_equal(strncmp(json_string_value(json_object_get(json_object_get(sl,
                                                                                   "metadata"),
                                                                   "name")),
                                 "pub-node-gpu.nvidia.com-", 24),
                         0);
        json_t *ref = json_array_get(json_object_get(json_object_get(sl, "metadata"),
                                                     "ownerReferences"),
                                     0);
        json_t *want_ref = json_pack("{s:s, s:s, s:s, s:s, s:b}", "apiVersion", "v1", "kind",
                                     "Node", "name", "pub-node", "uid", uid, "controller", 1);
        assert_true(json_equal(ref, want_ref));
        json_decref(want_ref);
        json_t *spec = json_object_get(sl, "spec");
        assert_string_equal(json_string_value(json_object_get(spec, "nodeName")), "pub-node");
        assert_string_equal(json_string_value(json_object_get(spec, "driver")),
                            "gpu.nvidia.com");
        assert_int_equal(pool_int(sl, "generation"), 1);
        assert_int_equal(pool_int(sl, "resourceSliceCount"), 1);
        assert_true(json_equal(json_object_get(spec, "devices"), d));
        json_decref(st);
        requests(log, sizeof(log));

        /* nothing changed: nothing written */
        reconcile_ok(k, &p, d, &r);
        assert_false(r.changed);
        assert_int_equal(r.generation, 1);
        assert_int_equal(r.slices, 1);
        requests(log, sizeof(log));
        assert_string_equal(log, "GET 200 GET 200");

        /* no such Node: -ENOENT, nothing written */
        struct kdev_dra_pool p2 = {.node = "no-such-node"};
        struct kdev_err err = {0};
        assert_int_equal(kdev_dra_slices_reconcile(k, &p2, d, &r, &err), -ENOENT);
        requests(log, sizeof(log));
        assert_string_equal(log, "GET 404");
        json_decref(d);
        free_set(s);
        kdev_kube_free(k);
}

static void test_split_above_128(void **state)
{
        (void)state;
        NEED_SERVER();
        struct kdev_kube *k = client(NULL, 3);
        seed_node("big-node");
        struct kdev_gpu_set *s = make_set(130, false);
        json_t *d = devices_of(s, NULL, 130);
        struct kdev_dra_pool p = {.node = "big-node"};
        struct kdev_dra_reconcile_result r;
        reconcile_ok(k, &p, d, &r);
        assert_int_equal(r.slices, 2);
        assert_int_equal(r.created, 2);
        json_t *st = stored(k, "big-node");
        assert_int_equal(json_array_size(st), 2);
        assert_int_equal(ndev(json_array_get(st, 0)), 128);
        assert_int_equal(ndev(json_array_get(st, 1)), 2);
        assert_string_equal(dev_name(json_array_get(st, 1), 0), "gpu-138");
        for (size_t i = 0; i < 2; i++) {
                assert_int_equal(pool_int(json_array_get(st, i), "generation"), 1);
                assert_int_equal(pool_int(json_array_get(st, i), "resourceSliceCount"), 2);
        }
        json_decref(st);

        /* shrink to 3 devices: one slice, generation 2, the other deleted */
        json_decref(d);
        s->n_gpus = 3;
        d = devices_of(s, NULL, 3);
        reconcile_ok(k, &p, d, &r);
        assert_int_equal(r.generation, 2);
        assert_int_equal(r.slices, 1);
        assert_int_equal(r.updated, 1);
        assert_int_equal(r.created, 0);
        assert_int_equal(r.deleted, 1);
        st = stored(k, "big-node");
        assert_int_equal(json_array_size(st), 1);
        assert_int_equal(ndev(json_array_get(st, 0)), 3);
        assert_int_equal(pool_int(json_array_get(st, 0), "generation"), 2);
        assert_int_equal(pool_int(json_array_get(st, 0), "resourceSliceCount"), 1);
        json_decref(st);
        s->n_gpus = 130;
        json_decref(d);
        free_set(s);
        kdev_kube_free(k);
}

static void test_deleted_externally(void **state)
{
        (void)state;
        NEED_SERVER();
        struct kdev_kube *k = client(NULL, 3);
        const char *uid = seed_node("del-node");
        json_t *owner = json_pack("{s:s, s:s, s:s, s:s, s:b}", "apiVersion", "v1", "kind",
                                  "Node", "name", "del-node", "uid", uid, "controller", 1);
        struct kdev_gpu_set *s = make_set(130, false);
        json_t *d = devices_of(s, NULL, 130);
        struct kdev_dra_pool p = {.node = "del-node", .owner_ref = owner};
        struct kdev_dra_reconcile_result r;
        reconcile_ok(k, &p, d, &r);
        json_t *st = stored(k, "del-node");
        struct kdev_err err = {0};
        /* someone (kubelet, an admin) deletes the big slice */
        const char *victim = json_string_value(
                json_object_get(json_object_get(json_array_get(st, 0), "metadata"), "name"));
        assert_int_equal(kdev_kube_delete_slice(k, victim, NULL, NULL, &err), 0);
        json_decref(st);
        char log[1024];
        requests(log, sizeof(log));
        reconcile_ok(k, &p, d, &r);
        assert_int_equal(r.generation, 2);
        assert_int_equal(r.created, 1);
        assert_int_equal(r.updated, 1);
        assert_int_equal(r.deleted, 0);
        /* owner given: no Node GET; the lost chunk is created, the other one updated */
        requests(log, sizeof(log));
        assert_string_equal(log, "GET 200 POST 201 GET 200 PUT 200");
        st = stored(k, "del-node");
        assert_int_equal(json_array_size(st), 2);
        assert_int_equal(ndev(json_array_get(st, 0)), 128);
        assert_int_equal(ndev(json_array_get(st, 1)), 2);
        for (size_t i = 0; i < 2; i++)
                assert_int_equal(pool_int(json_array_get(st, i), "generation"), 2);
        json_decref(st);
        /* all slices deleted: all re-created */
        assert_int_equal(kdev_kube_delete_slices(k, "del-node", NULL, &err), 2);
        reconcile_ok(k, &p, d, &r);
        assert_int_equal(r.created, 2);
        assert_int_equal(r.generation, 1);
        json_decref(d);
        json_decref(owner);
        free_set(s);
        kdev_kube_free(k);
}

static void test_health_change(void **state)
{
        (void)state;
        NEED_SERVER();
        struct kdev_kube *k = client(NULL, 3);
        seed_node("h-node");
        struct kdev_gpu_set *s = make_set(3, true);
        json_t *d = devices_of(s, NULL, 4);
        struct kdev_dra_pool p = {.node = "h-node"};
        struct kdev_dra_reconcile_result r;
        reconcile_ok(k, &p, d, &r);
        json_t *st = stored(k, "h-node");
        const char *name0 = json_string_value(
                json_object_get(json_object_get(json_array_get(st, 0), "metadata"), "name"));
        char name[300];
        snprintf(name, sizeof(name), "%s", name0);
        json_decref(st);
        json_decref(d);

        const char *bad[] = {"MIG-1"};
        struct kdev_dra_health h = {bad, 1};
        d = devices_of(s, &h, 3);
        char log[1024];
        requests(log, sizeof(log));
        reconcile_ok(k, &p, d, &r);
        assert_int_equal(r.generation, 2);
        assert_int_equal(r.updated, 1);
        assert_int_equal(r.created + r.deleted, 0);
        requests(log, sizeof(log));
        assert_string_equal(log, "GET 200 GET 200 GET 200 PUT 200");
        st = stored(k, "h-node");
        assert_int_equal(json_array_size(st), 1);
        json_t *sl = json_array_get(st, 0);
        assert_string_equal(json_string_value(json_object_get(json_object_get(sl, "metadata"),
                                                              "name")),
                            name); /* same object, updated in place */
        assert_int_equal(pool_int(sl, "generation"), 2);
        assert_int_equal(ndev(sl), 3);
        assert_string_equal(dev_name(sl, 0), "gpu-10");
        assert_string_equal(dev_name(sl, 1), "gpu-11-mig-1g10gb-19-0");
        assert_string_equal(dev_name(sl, 2), "gpu-12");
        json_decref(st);
        json_decref(d);

        /* healthy again: back, generation 3 */
        d = devices_of(s, NULL, 4);
        reconcile_ok(k, &p, d, &r);
        assert_int_equal(r.generation, 3);
        st = stored(k, "h-node");
        assert_int_equal(ndev(json_array_get(st, 0)), 4);
        json_decref(st);
        json_decref(d);
        free_set(s);
        kdev_kube_free(k);
}

static void test_conflict(void **state)
{
        (void)state;
        NEED_SERVER();
        struct kdev_kube *k = client(NULL, 3);
        seed_node("c-node");
        struct kdev_gpu_set *s = make_set(2, false);
        json_t *d = devices_of(s, NULL, 2);
        struct kdev_dra_pool p = {.node = "c-node"};
        struct kdev_dra_reconcile_result r;
        reconcile_ok(k, &p, d, &r);
        json_decref(d);
        s->n_gpus = 1;
        d = devices_of(s, NULL, 1);
        char log[1024];
        requests(log, sizeof(log));
        /* two 409s on PUT: re-read and retried */
        admin("POST", "/_admin/faults", "{\"status\":409,\"count\":2,\"method\":\"PUT\"}", NULL);
        reconcile_ok(k, &p, d, &r);
        assert_int_equal(r.generation, 2);
        assert_int_equal(r.updated, 1);
        requests(log, sizeof(log));
        assert_string_equal(log, "GET 200 GET 200 GET 200 PUT 409 GET 200 PUT 409 GET 200 "
                                 "PUT 200");
        json_t *st = stored(k, "c-node");
        assert_int_equal(ndev(json_array_get(st, 0)), 1);
        assert_int_equal(pool_int(json_array_get(st, 0), "generation"), 2);
        json_decref(st);

        /* conflicts that never end: -ESTALE, and a later reconcile converges */
        json_decref(d);
        s->n_gpus = 2;
        d = devices_of(s, NULL, 2);
        admin("POST", "/_admin/faults", "{\"status\":409,\"count\":100,\"method\":\"PUT\"}",
              NULL);
        struct kdev_err err = {0};
        assert_int_equal(kdev_dra_slices_reconcile(k, &p, d, &r, &err), -ESTALE);
        assert_non_null(strstr(err.msg, "updating ResourceSlice c-node-gpu.nvidia.com-"));
        admin("DELETE", "/_admin/faults", NULL, NULL);
        reconcile_ok(k, &p, d, &r);
        assert_int_equal(r.generation, 3);
        st = stored(k, "c-node");
        assert_int_equal(ndev(json_array_get(st, 0)), 2);
        json_decref(st);
        json_decref(d);
        free_set(s);
        kdev_kube_free(k);
}

static void test_server_down_and_back(void **state)
{
        (void)state;
        NEED_SERVER();
        struct kdev_kube *k = client(NULL, 1);
        const char *uid = seed_node("down-node");
        json_t *owner = json_pack("{s:s, s:s, s:s, s:s, s:b}", "apiVersion", "v1", "kind",
                                  "Node", "name", "down-node", "uid", uid, "controller", 1);
        struct kdev_gpu_set *s = make_set(2, false);
        json_t *d = devices_of(s, NULL, 2);
        struct kdev_dra_pool p = {.node = "down-node", .owner_ref = owner};
        struct kdev_dra_reconcile_result r;
        admin("POST", "/_admin/down", "{}", NULL);
        struct kdev_err err = {0};
        assert_int_equal(kdev_dra_slices_reconcile(k, &p, d, &r, &err), -ECONNREFUSED);
        assert_non_null(strstr(err.msg, "listing ResourceSlices of node down-node: GET "));
        assert_false(r.changed);
        admin("POST", "/_admin/up", "{}", NULL);
        reconcile_ok(k, &p, d, &r);
        assert_int_equal(r.created, 1);
        assert_int_equal(r.generation, 1);
        json_t *st = stored(k, "down-node");
        assert_int_equal(json_array_size(st), 1);
        assert_int_equal(ndev(json_array_get(st, 0)), 2);
        json_decref(st);
        json_decref(d);
        json_decref(owner);
        free_set(s);
        kdev_kube_free(k);
}

static void test_v1beta1(void **state)
{
        (void)state;
        NEED_SERVER();
        struct kdev_kube *k = client("v1beta1", 3);
        struct kdev_kube *k1 = client(NULL, 3);
        seed_node("b-node");
        struct kdev_gpu_set *s = make_set(3, true);
        json_t *d = devices_of(s, NULL, 4);
        struct kdev_dra_pool p = {.node = "b-node"};
        struct kdev_dra_reconcile_result r;
        reconcile_ok(k, &p, d, &r);
        assert_int_equal(r.created, 1);
        reconcile_ok(k, &p, d, &r);
        assert_false(r.changed);
        json_decref(d);
        const char *bad[] = {"GPU-0000"};
        struct kdev_dra_health h = {bad, 1};
        d = devices_of(s, &h, 3);
        reconcile_ok(k, &p, d, &r);
        assert_int_equal(r.updated, 1);
        assert_int_equal(r.generation, 2);
        /* stored (seen through v1) exactly as built */
        json_t *st = stored(k1, "b-node");
        assert_true(json_equal(json_object_get(json_object_get(json_array_get(st, 0), "spec"),
                                               "devices"),
                               d));
        json_decref(st);
        json_decref(d);
        free_set(s);
        kdev_kube_free(k);
        kdev_kube_free(k1);
}

int main(void)
{
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_quantity_semver),
                cmocka_unit_test(test_build_devices),
                cmocka_unit_test(test_mig_device_name),
                cmocka_unit_test(test_split),
                cmocka_unit_test(test_publish),
                cmocka_unit_test(test_split_above_128),
                cmocka_unit_test(test_deleted_externally),
                cmocka_unit_test(test_health_change),
                cmocka_unit_test(test_conflict),
                cmocka_unit_test(test_server_down_and_back),
                cmocka_unit_test(test_v1beta1),
        };
        return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
