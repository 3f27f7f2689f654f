/* DRA plugin with the real claim source (kdev_dra_kube_claim_source) against
 * the stand-in API server (tests/kubeapi/server.py, /usr/bin/python3), for
 * resource.k8s.io v1 and v1beta1. Skipped when /usr/bin/python3 is missing. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "cdi/cdi.h"
#include "dra/plugin.h"
#include "kube/kube.h"
#include "nvml/discover.h"
#include "tmptree.h"

#define PY "/usr/bin/python3"
#define SERVER KDEV_SOURCE_DIR "/tests/kubeapi/server.py"
#define UID1 "5c1d3e2f-1111-4c2e-9a43-aaaaaaaaaaaa"

static pid_t pid;
static int in_fd = -1;
static json_t *info;
static char root[256];

static int start_server(void)
{
        int in[2], out[2];
        char line[4096];
        size_t len = 0;

        if (pipe2(in, O_CLOEXEC) < 0 || pipe2(out, O_CLOEXEC) < 0)
                return -1;
        pid = fork();
        if (pid < 0)
                return -1;
        if (pid == 0) {
                dup2(in[0], 0);
                dup2(out[1], 1);
                execl(PY, PY, SERVER, (char *)NULL);
                _exit(127);
        }
        close(in[0]);
        close(out[1]);
        in_fd = in[1];
        for (;;) { /* one JSON line; generous timeout for a loaded machine */
                struct pollfd p = {.fd = out[0], .events = POLLIN};
                ssize_t r;

                if (poll(&p, 1, 60000) <= 0)
                        break;
                r = read(out[0], line + len, sizeof(line) - 1 - len);
                if (r <= 0)
                        break;
                len += (size_t)r;
                if (memchr(line, '\n', len) || len == sizeof(line) - 1)
                        break;
        }
        close(out[0]);
        line[len] = '\0';
        info = json_loads(line, JSON_DISABLE_EOF_CHECK, NULL);
        return info ? 0 : -1;
}

static int group_setup(void **state)
{
        (void)state;
        if (access(PY, X_OK) != 0)
                return 0;
        strcpy(root, "/tmp/kdev-dra-kube-XXXXXX");
        if (!mkdtemp(root))
                return -1;
        return start_server();
}

static int group_teardown(void **state)
{
        (void)state;
        if (pid > 0) {
                close(in_fd);
                kill(pid, SIGTERM);
                waitpid(pid, NULL, 0);
        }
        json_decref(info);
        if (root[0])
                tmptree_remove(root);
        return 0;
}

static struct kdev_kube *client(const char *key, const char *version)
{
        struct kdev_kube_config cfg = {
                .server = (char *)json_string_value(json_object_get(info, key))};
        struct kdev_kube_opts o = {.version = version, .attempts = 2, .backoff_ms = 50};
        struct kdev_kube *k = kdev_kube_new(&cfg, &o, NULL);

        assert_non_null(k);
        return k;
}

static void seed_claim(const char *name, const char *uid, const char *device)
{
        struct kdev_kube *admin = client("admin_url", NULL);
        struct kdev_err err = {0};
        json_t *c = json_pack(
                "{s:s,s:s,s:{s:s,s:s,s:s},s:{s:{s:[{s:s,s:{s:s}}]}},"
                "s:{s:{s:{s:[{s:s,s:s,s:s,s:s}]}}}}",
                "apiVersion", "resource.k8s.io/v1", "kind", "ResourceClaim", "metadata", "name",
                name, "namespace", "team-a", "uid", uid, "spec", "devices", "requests", "name",
                "gpu", "exactly", "deviceClassName", "gpu.nvidia.com", "status", "allocation",
                "devices", "results", "request", "gpu", "driver", "gpu.nvidia.com", "pool",
                "node-1", "device", device);

        assert_non_null(c);
        assert_int_equal(kdev_kube_request(admin, "POST", "/_admin/objects", c, NULL, &err), 0);
        json_decref(c);
        kdev_kube_free(admin);
}

/* A plugin with one GPU (gpu-0) reading claims through |k|, its data and
 * CDI dirs named after |tag|; |recs| filled (as the NVIDIA backend gives
 * them). */
static struct kdev_dra_plugin *kube_plugin(struct kdev_kube *k, const char *tag,
                                           struct kdev_nvidia_gpus *recs)
{
        struct kdev_gpu gpu = {.minor = 0, .uuid = "GPU-00000000"};
        struct kdev_gpu_set set = {.gpus = &gpu, .n_gpus = 1};
        char data[300], cdi[300];
        struct kdev_dra_plugin *p = NULL;
        struct kdev_err err = {0};

        snprintf(data, sizeof(data), "%s/%s-data", root, tag);
        snprintf(cdi, sizeof(cdi), "%s/%s-cdi", root, tag);
        struct kdev_dra_plugin_options o = {
                .pool = "node-1",
                .data_dir = data,
                .cdi_dir = cdi,
                .dev_root = root,
                .gpus = recs,
                .get_claim = kdev_dra_kube_claim_source,
                .get_claim_arg = k,
        };
        assert_int_equal(kdev_nvidia_gpus_from_set(&set, recs, &err), 0);
        assert_int_equal(kdev_dra_plugin_new(&o, &p, &err), 0);
        return p;
}

static void run_version(const char *version)
{
        struct kdev_nvidia_gpus recs;
        struct kdev_kube *k = client("url", version);
        struct kdev_dra_plugin *p = kube_plugin(k, version, &recs);
        struct kdev_err err = {0};
        const json_t *devs = NULL;

        assert_int_equal(kdev_dra_prepare_claim(p, "team-a", "gpu-claim", UID1, &devs, &err), 0);
        assert_int_equal(json_array_size(devs), 1);
        assert_string_equal(json_string_value(json_array_get(json_object_get(
                                    json_array_get(devs, 0), "cdiDeviceIDs"), 0)),
                            "k8s.gpu.nvidia.com/claim=" UID1 "-gpu-0");
        /* a claim object replaced under the same name: UID mismatch */
        assert_int_equal(kdev_dra_prepare_claim(p, "team-a", "gpu-claim",
                                                "5c1d3e2f-0000-4c2e-9a43-aaaaaaaaaaaa", NULL,
                                                &err),
                         -ESTALE);
        /* a claim that does not exist */
        assert_int_equal(kdev_dra_prepare_claim(p, "team-a", "absent", "x-1", NULL, &err),
                         -ENOENT);
        assert_non_null(strstr(err.msg, "404 Not Found"));
        assert_int_equal(kdev_dra_unprepare_claim(p, UID1, &err), 0);
        assert_int_equal(kdev_dra_plugin_prepared(p), 0);
        kdev_dra_plugin_free(p);
        kdev_nvidia_gpus_clear(&recs);
        kdev_kube_free(k);
}

/* A claim whose allocation carries a class config (GpuConfig, MPS) and
 * another driver's config, read from the stand-in API server in |version|:
 * the config reaches the device record and the CDI device's env. */
#define UID2 "5c1d3e2f-2222-4c2e-9a43-bbbbbbbbbbbb"
static void run_config_version(const char *version)
{
        struct kdev_nvidia_gpus recs;
        struct kdev_kube *k = client("url", version);
        char tag[64], path[600];
        struct kdev_cdi_spec *spec = NULL;
        struct kdev_err err = {0};
        const json_t *devs = NULL;
        const struct kdev_cdi_device *d;

        snprintf(tag, sizeof(tag), "%s-cfg", version);
        struct kdev_dra_plugin *p = kube_plugin(k, tag, &recs);

        assert_int_equal(kdev_dra_prepare_claim(p, "team-a", "cfg-claim", UID2, &devs, &err), 0);
        json_t *want = json_pack("{s:s,s:s,s:s,s:{s:{s:s,s:{s:i}}}}", "apiVersion",
                                 "resource.nvidia.com/v1beta1", "kind", "GpuConfig", "source",
                                 "FromClass", "parameters", "sharing", "strategy", "MPS",
                                 "mpsConfig", "defaultActiveThreadPercentage", 40);

        assert_true(json_equal(json_object_get(json_array_get(devs, 0), "config"), want));
        json_decref(want);
        assert_true(kdev_dra_claim_spec_path(p, UID2, path, sizeof(path), &err) > 0);
        assert_int_equal(kdev_cdi_spec_read(path, &spec, &err), 0);
        d = kdev_cdi_spec_find_device(spec, UID2 "-gpu-0");
        assert_non_null(d);
        assert_int_equal(d->edits.n_env, 1);
        assert_string_equal(d->edits.env[0], "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=40");
        kdev_cdi_spec_free(spec);
        kdev_dra_plugin_free(p);
        kdev_nvidia_gpus_clear(&recs);
        kdev_kube_free(k);
}

static void test_kube_claim_config(void **state)
{
        struct kdev_kube *admin;
        struct kdev_err err = {0};
        json_t *c;

        (void)state;
        if (!info)
                skip();
        admin = client("admin_url", NULL);
        c = json_pack("{s:s,s:s,s:{s:s,s:s,s:s},s:{s:{s:[{s:s,s:{s:s}}]}},"
                      "s:{s:{s:{s:[{s:s,s:s,s:s,s:s}],s:[{s:s,s:[s],s:{s:s,s:{s:s,s:s,"
                      "s:{s:s,s:{s:i}}}}},{s:s,s:{s:s,s:{s:s}}}]}}}}",
                      "apiVersion", "resource.k8s.io/v1", "kind", "ResourceClaim", "metadata",
                      "name", "cfg-claim", "namespace", "team-a", "uid", UID2, "spec", "devices",
                      "requests", "name", "gpu", "exactly", "deviceClassName", "gpu.nvidia.com",
                      "status", "allocation", "devices", "results", "request", "gpu", "driver",
                      "gpu.nvidia.com", "pool", "node-1", "device", "gpu-0", "config", "source",
                      "FromClass", "requests", "gpu", "opaque", "driver", "gpu.nvidia.com",
                      "parameters", "apiVersion", "resource.nvidia.com/v1beta1", "kind",
                      "GpuConfig", "sharing", "strategy", "MPS", "mpsConfig",
                      "defaultActiveThreadPercentage", 40, "source", "FromClaim", "opaque",
                      "driver", "other.example.com", "parameters", "x", "y");
        assert_non_null(c);
        assert_int_equal(kdev_kube_request(admin, "POST", "/_admin/objects", c, NULL, &err), 0);
        json_decref(c);
        kdev_kube_free(admin);
        run_config_version("v1");
        run_config_version("v1beta1");
}

static void test_kube_source(void **state)
{
        (void)state;
        if (!info)
                skip();
        seed_claim("gpu-claim", UID1, "gpu-0");
        run_version("v1");
        run_version("v1beta1");
}

int main(void)
{
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_kube_source),
                cmocka_unit_test(test_kube_claim_config),
        };

        return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
