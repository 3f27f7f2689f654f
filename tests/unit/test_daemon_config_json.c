/* kdev-plugin's effective configuration as JSON (src/daemon/config_json.h),
 * the "config" of its start-up line: exact texts for the defaults, a file
 * that sets every NVIDIA section (NVIDIA's field names and omitempty rules),
 * MPS sharing, and a generic-only file (no NVIDIA keys). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "config/config.h"
#include "daemon/config_json.h"
#include "generic/generic.h"
#include "nvidia/config.h"

/* Reads |text| as kdev-plugin reads its config file (NULL: no file), then
 * finishes |nv|; *g gets the generic section (NULL without a file). */
static void load(struct kdev_nvidia_config *nv, const char *text, struct kdev_generic_config **g)
{
        struct kdev_err e = {0};
        assert_int_equal(kdev_nvidia_config_init(nv, &e), 0);
        *g = NULL;
        if (text) {
                struct kdev_config_root root;
                struct kdev_config_sections ext;
                kdev_config_root_init(&root);
                kdev_nvidia_config_sections(nv, &ext);
                assert_int_equal(kdev_generic_config_register(&root, "t.yaml", g, &e), 0);
                assert_int_equal(kdev_config_register(&root, &ext, &e), 0);
                int rc = kdev_config_parse(&root, "t.yaml", text, strlen(text), &e);
                if (rc != 0)
                        fail_msg("%s", e.msg);
        }
        int rc = kdev_nvidia_config_finish(nv, text != NULL, &e);
        if (rc != 0)
                fail_msg("%s", e.msg);
}

static void test_defaults(void **state)
{
        (void)state;
        struct kdev_nvidia_config nv;
        struct kdev_generic_config *g;
        load(&nv, NULL, &g);
        struct kdev_dp_daemon_options o = {.nv = &nv};
        char *j = kdev_dp_config_json(&nv, g, &o);
        assert_non_null(j);
        assert_string_equal(
                j,
                "{\"version\":\"v1\",\"flags\":{\"migStrategy\":\"none\",\"failOnInitError\":true,"
                "\"mpsRoot\":\"\",\"nvidiaDriverRoot\":\"/\",\"nvidiaDevRoot\":\"/\","
                "\"gdrcopyEnabled\":false,\"gdsEnabled\":false,\"mofedEnabled\":false,"
                "\"deviceDiscoveryStrategy\":\"auto\",\"plugin\":{\"passDeviceSpecs\":false,"
                "\"deviceListStrategy\":[\"envvar\"],\"deviceIDStrategy\":\"uuid\","
                "\"cdiAnnotationPrefix\":\"cdi.k8s.io/\",\"nvidiaCTKPath\":\"/usr/bin/nvidia-ctk\","
                "\"containerDriverRoot\":\"/driver-root\","
                "\"sharedDevicesAllocationPolicy\":\"distributed\"}},"
                "\"resources\":{\"gpus\":[{\"pattern\":\"*\",\"name\":\"nvidia.com/gpu\"}]},"
                "\"sharing\":{\"timeSlicing\":{}},\"imex\":{},"
                "\"health\":{\"probeInterval\":10,\"quietPeriod\":60},"
                "\"kdev\":{\"configFile\":null,"
                "\"devicePluginDir\":\"/var/lib/kubelet/device-plugins\","
                "\"kubeletSocket\":\"/var/lib/kubelet/device-plugins/kubelet.sock\","
                "\"socketPrefix\":\"kdev-\",\"cdiDir\":\"/var/run/cdi\",\"procRoot\":\"/proc\","
                "\"root\":null,\"metricsAddress\":null,\"nfdFeaturesFile\":null}}");
        free(j);
        kdev_nvidia_config_clear(&nv);
}

static const char FULL[] =
        "version: v1\n"
        "flags:\n"
        "  migStrategy: single\n"
        "  failOnInitError: false\n"
        "  nvidiaDriverRoot: /run/nvidia/driver\n"
        "  gdsEnabled: true\n"
        "  plugin:\n"
        "    passDeviceSpecs: true\n"
        "    deviceListStrategy: [cdi-cri, envvar]\n"
        "    deviceIDStrategy: index\n"
        "    containerDriverRoot: /host-driver\n"
        "    sharedDevicesAllocationPolicy: packed\n"
        "sharing:\n"
        "  timeSlicing:\n"
        "    renameByDefault: true\n"
        "    failRequestsGreaterThanOne: true\n"
        "    resources:\n"
        "      - name: gpu\n"
        "        replicas: 4\n"
        "        devices: 2\n"
        "      - name: nvidia.com/gpu\n"
        "        rename: shared-gpu\n"
        "        replicas: 2\n"
        "        devices: [\"0\", \"GPU-8ffa2d72-7c4d-4c6b-a5c6-0f7c2b9f1e11\"]\n"
        "imex:\n"
        "  channelIDs: [0]\n"
        "  required: true\n"
        "health:\n"
        "  probeInterval: 5\n"
        "generic:\n"
        "  devices:\n"
        "    - name: example.com/null\n"
        "      groups:\n"
        "        - paths:\n"
        "            - path: /dev/null\n"
        "              mountPath: /dev/n\n"
        "              permissions: r\n"
        "            - path: /dev/zero\n"
        "          count: 3\n";

static void test_full_file(void **state)
{
        (void)state;
        struct kdev_nvidia_config nv;
        struct kdev_generic_config *g;
        load(&nv, FULL, &g);
        struct kdev_dp_daemon_options o = {
                .config = "/etc/kdev/config.yaml",
                .dp = {.plugin_dir = "/k/dp", .kubelet_socket = "/k/dp/custom.sock",
                       .socket_prefix = "x-"},
                .generic_root = "/fixture",
                .metrics_address = ":9400",
                .nfd_file = "/etc/nfd/kdev",
                .nv = &nv,
        };
        char *j = kdev_dp_config_json(&nv, g, &o);
        assert_non_null(j);
        assert_string_equal(
                j,
                "{\"version\":\"v1\",\"flags\":{\"migStrategy\":\"single\","
                "\"failOnInitError\":false,\"mpsRoot\":\"\","
                "\"nvidiaDriverRoot\":\"/run/nvidia/driver\","
                "\"nvidiaDevRoot\":\"/run/nvidia/driver\",\"gdrcopyEnabled\":false,"
                "\"gdsEnabled\":true,\"mofedEnabled\":false,\"deviceDiscoveryStrategy\":\"auto\","
                "\"plugin\":{\"passDeviceSpecs\":true,\"deviceListStrategy\":[\"envvar\","
                "\"cdi-cri\"],\"deviceIDStrategy\":\"index\","
                "\"cdiAnnotationPrefix\":\"cdi.k8s.io/\",\"nvidiaCTKPath\":\"/usr/bin/nvidia-ctk\","
                "\"containerDriverRoot\":\"/host-driver\","
                "\"sharedDevicesAllocationPolicy\":\"packed\"}},"
                "\"resources\":{\"gpus\":[{\"pattern\":\"*\",\"name\":\"nvidia.com/gpu\"}],"
                "\"mig\":[{\"pattern\":\"*\",\"name\":\"nvidia.com/gpu\"}]},"
                "\"sharing\":{\"timeSlicing\":{\"renameByDefault\":true,"
                "\"failRequestsGreaterThanOne\":true,\"resources\":[{\"name\":\"nvidia.com/gpu\","
                "\"devices\":2,\"replicas\":4},{\"name\":\"nvidia.com/gpu\","
                "\"rename\":\"nvidia.com/shared-gpu\","
                "\"devices\":[\"0\",\"GPU-8ffa2d72-7c4d-4c6b-a5c6-0f7c2b9f1e11\"],"
                "\"replicas\":2}]}},"
                "\"imex\":{\"channelIDs\":[0],\"required\":true},"
                "\"health\":{\"probeInterval\":5,\"quietPeriod\":60},"
                "\"generic\":{\"devices\":[{\"name\":\"example.com/null\",\"groups\":[{\"paths\":"
                "[{\"path\":\"/dev/null\",\"mountPath\":\"/dev/n\",\"permissions\":\"r\","
                "\"limit\":1},{\"path\":\"/dev/zero\",\"permissions\":\"rw\",\"limit\":1}],"
                "\"count\":3}]}]},"
                "\"kdev\":{\"configFile\":\"/etc/kdev/config.yaml\",\"devicePluginDir\":\"/k/dp\","
                "\"kubeletSocket\":\"/k/dp/custom.sock\",\"socketPrefix\":\"x-\","
                "\"cdiDir\":\"/var/run/cdi\",\"procRoot\":\"/proc\",\"root\":\"/fixture\","
                "\"metricsAddress\":\":9400\",\"nfdFeaturesFile\":\"/etc/nfd/kdev\"}}");
        free(j);
        kdev_generic_config_free(g);
        kdev_nvidia_config_clear(&nv);
}

/* MPS: sharing.mps appears, failRequestsGreaterThanOne true when not given
 * (NVIDIA's NewConfig), timeSlicing still an (empty) object. */
static void test_mps(void **state)
{
        (void)state;
        struct kdev_nvidia_config nv;
        struct kdev_generic_config *g;
        load(&nv,
             "version: v1\n"
             "flags:\n"
             "  mpsRoot: /run/nvidia/mps\n"
             "sharing:\n"
             "  mps:\n"
             "    resources:\n"
             "      - name: nvidia.com/gpu\n"
             "        replicas: 3\n",
             &g);
        struct kdev_dp_daemon_options o = {.nv = &nv};
        char *j = kdev_dp_config_json(&nv, g, &o);
        assert_non_null(j);
        const char *want = "\"mpsRoot\":\"/run/nvidia/mps\"";
        assert_non_null(strstr(j, want));
        want = "\"sharing\":{\"timeSlicing\":{},\"mps\":{\"failRequestsGreaterThanOne\":true,"
               "\"resources\":[{\"name\":\"nvidia.com/gpu\",\"devices\":\"all\","
               "\"replicas\":3}]}},\"imex\":{}";
        if (!strstr(j, want))
                fail_msg("want %s in %s", want, j);
        free(j);
        kdev_generic_config_free(g);
        kdev_nvidia_config_clear(&nv);
}

/* A file with only `generic` does not want NVIDIA GPUs: no NVIDIA keys. */
static void test_generic_only(void **state)
{
        (void)state;
        struct kdev_nvidia_config nv;
        struct kdev_generic_config *g;
        load(&nv,
             "version: v1\n"
             "generic:\n"
             "  devices:\n"
             "    - name: example.com/null\n"
             "      groups:\n"
             "        - paths:\n"
             "            - path: /dev/null\n",
             &g);
        assert_false(nv.wanted);
        struct kdev_dp_daemon_options o = {.config = "g.yaml", .dp = {.plugin_dir = "dp"},
                                           .metrics_address = "", .nv = &nv};
        char *j = kdev_dp_config_json(&nv, g, &o);
        assert_non_null(j);
        assert_string_equal(
                j, "{\"version\":\"v1\",\"health\":{\"probeInterval\":10,\"quietPeriod\":60},"
                   "\"generic\":{\"devices\":[{\"name\":\"example.com/null\",\"groups\":"
                   "[{\"paths\":[{\"path\":\"/dev/null\",\"permissions\":\"rw\",\"limit\":1}],"
                   "\"count\":1}]}]},"
                   "\"kdev\":{\"configFile\":\"g.yaml\",\"devicePluginDir\":\"dp\","
                   "\"kubeletSocket\":\"dp/kubelet.sock\",\"socketPrefix\":\"kdev-\","
                   "\"cdiDir\":\"/var/run/cdi\",\"procRoot\":\"/proc\",\"root\":null,"
                   "\"metricsAddress\":null,\"nfdFeaturesFile\":null}}");
        free(j);
        kdev_generic_config_free(g);
        kdev_nvidia_config_clear(&nv);
}

/* usage.interval: "usage" after "health", only when sampling is on. */
static void test_usage(void **state)
{
        (void)state;
        struct kdev_nvidia_config nv;
        struct kdev_generic_config *g;
        load(&nv,
             "version: v1\n"
             "usage:\n"
             "  interval: 5\n"
             "generic:\n"
             "  devices:\n"
             "    - name: example.com/null\n"
             "      groups:\n"
             "        - paths:\n"
             "            - path: /dev/null\n",
             &g);
        struct kdev_dp_daemon_options o = {.config = "g.yaml", .dp = {.plugin_dir = "dp"},
                                           .metrics_address = "", .nv = &nv};
        char *j = kdev_dp_config_json(&nv, g, &o);
        assert_non_null(j);
        const char *want = "\"health\":{\"probeInterval\":10,\"quietPeriod\":60},"
                           "\"usage\":{\"interval\":5},\"generic\":";
        if (!strstr(j, want))
                fail_msg("%s not in %s", want, j);
        free(j);
        nv.usage_interval = 0;
        j = kdev_dp_config_json(&nv, g, &o);
        assert_non_null(j);
        assert_null(strstr(j, "\"usage\""));
        free(j);
        kdev_generic_config_free(g);
        kdev_nvidia_config_clear(&nv);
}

/* kdev's isolation section, after "generic"'s place: every key, nulls for
 * the defaults. */
static void test_isolation(void **state)
{
        (void)state;
        struct kdev_nvidia_config nv;
        struct kdev_generic_config *g;
        load(&nv,
             "version: v1\n"
             "sharing:\n"
             "  timeSlicing:\n"
             "    resources:\n"
             "    - {name: nvidia.com/gpu, rename: a, replicas: 2}\n"
             "    - {name: mig-1g.10gb, rename: b, replicas: 7}\n"
             "isolation:\n"
             "  resources:\n"
             "  - name: a\n"
             "  - {name: b, memory: 1Gi, compute: 10%, policy: strict, preload: env}\n",
             &g);
        struct kdev_err e = {0};
        assert_int_equal(kdev_nvidia_config_apply_flag(&nv, "share-root", "/srv/share", &e), 0);
        struct kdev_dp_daemon_options o = {.nv = &nv};
        char *j = kdev_dp_config_json(&nv, g, &o);
        assert_non_null(j);
        static const char want[] =
                ",\"isolation\":{\"resources\":[{\"name\":\"nvidia.com/a\",\"memory\":null,"
                "\"compute\":null,\"policy\":null,\"preload\":\"file\"},"
                "{\"name\":\"nvidia.com/b\",\"memory\":1073741824,\"compute\":10,"
                "\"policy\":\"strict\",\"preload\":\"env\"}],"
                "\"shareRoot\":\"/srv/share\",\"shareLibrary\":null},\"kdev\":";
        const char *iso = strstr(j, ",\"isolation\":");
        assert_non_null(iso);
        assert_true(strncmp(iso, want, strlen(want)) == 0);
        free(j);
        kdev_generic_config_free(g);
        kdev_nvidia_config_clear(&nv);
}

int main(void)
{
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_defaults),
                cmocka_unit_test(test_full_file),
                cmocka_unit_test(test_mps),
                cmocka_unit_test(test_generic_only),
                cmocka_unit_test(test_usage),
                cmocka_unit_test(test_isolation),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
