/* podres/client.h: the device -> (namespace, pod, container) map
 * built from PodResources List answers (the wire vectors of
 * tests/data/vectors/podresources-v1, encoded by Kubernetes' generated code),
 * device-plugin devices and DRA claim devices, exactly; NUMA nodes of one
 * device merged; JSON; lookup; a List on a socket nobody serves. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cmocka.h>
#include <jansson.h>

#include "podres/client.h"

#define VEC KDEV_SOURCE_DIR "/tests/data/vectors/podresources-v1"

static uint8_t *slurp(const char *path, size_t *len)
{
        FILE *f = fopen(path, "rb");
        if (!f)
                fail_msg("missing %s", path);
        static uint8_t buf[8192];
        *len = fread(buf, 1, sizeof(buf), f);
        fclose(f);
        uint8_t *out = malloc(*len ? *len : 1);
        assert_non_null(out);
        memcpy(out, buf, *len);
        return out;
}

static V1__ListPodResourcesResponse *load_list(const char *name)
{
        char path[512];
        snprintf(path, sizeof(path), "%s/%s", VEC, name);
        size_t n;
        uint8_t *b = slurp(path, &n);
        V1__ListPodResourcesResponse *r = v1__list_pod_resources_response__unpack(NULL, n, b);
        free(b);
        assert_non_null(r);
        return r;
}

static void assert_map_json(const struct kdev_podres_map *m, const char *want_text)
{
        json_t *got = kdev_podres_map_json(m);
        assert_non_null(got);
        json_error_t e;
        json_t *want = json_loads(want_text, 0, &e);
        if (!want)
                fail_msg("bad expected JSON: %s", e.text);
        if (!json_equal(got, want)) {
                char *s = json_dumps(got, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
                print_error("got %s\n", s);
                free(s);
                fail_msg("map differs");
        }
        json_decref(got);
        json_decref(want);
}

#define GPU_A "GPU-8f1e6b2a-3c4d-4e5f-9a6b-7c8d9e0f1a2b"
#define GPU_B "GPU-2d9c4f7e-1b3a-4c5d-8e6f-0a1b2c3d4e5f"
#define MIG_A "MIG-3f2e1d0c-9b8a-5c7d-6e5f-4a3b2c1d0e9f"

static void test_list_vector(void **state)
{
        (void)state;
        V1__ListPodResourcesResponse *r = load_list("02_list_pod_resources_response.bin");
        struct kdev_podres_map m;
        struct kdev_err err = {0};
        assert_int_equal(kdev_podres_map_from_list(r, &m, &err), 0);
        assert_int_equal(m.n_devices, 3);
        assert_int_equal(m.n_claims, 1);
        assert_map_json(&m,
                "{\"devices\": ["
                "{\"resource\": \"nvidia.com/gpu\", \"deviceId\": \"" GPU_A "\", \"numa\": [0],"
                " \"namespace\": \"ml-team\", \"pod\": \"llm-finetune-0\", \"container\":"
                " \"trainer\"},"
                "{\"resource\": \"nvidia.com/gpu\", \"deviceId\": \"" GPU_B "\", \"numa\": [0],"
                " \"namespace\": \"ml-team\", \"pod\": \"llm-finetune-0\", \"container\":"
                " \"trainer\"},"
                "{\"resource\": \"nvidia.com/mig-1g.10gb\", \"deviceId\": \"" MIG_A "\","
                " \"numa\": [1],"
                " \"namespace\": \"ml-team\", \"pod\": \"llm-finetune-0\", \"container\":"
                " \"trainer\"}],"
                "\"claims\": [{\"namespace\": \"default\", \"pod\":"
                " \"gpu-inference-7d9f5c8b6-x2k4p\","
                " \"container\": \"server\", \"claimNamespace\": \"default\","
                " \"claimName\": \"gpu-inference-7d9f5c8b6-x2k4p-gpu-8mz2q\","
                " \"driver\": \"gpu.nvidia.com\", \"pool\": \"node-a\", \"device\": \"gpu-0\","
                " \"cdiDevices\": [\"k8s.gpu.nvidia.com/device=common\","
                " \"k8s.gpu.nvidia.com/claim=a3c1e0f2-6d4b-4c9a-8e2f-1b7d5c9a0e34-gpu-0\"]}]}");
        const struct kdev_podres_device *d = kdev_podres_find(&m, "nvidia.com/mig-1g.10gb", MIG_A);
        assert_non_null(d);
        assert_string_equal(d->pod, "llm-finetune-0");
        assert_null(kdev_podres_find(&m, "nvidia.com/gpu", MIG_A));
        assert_null(kdev_podres_find(&m, "nvidia.com/gpu", NULL));
        assert_false(m.claims[0].has_share_id);
        assert_null(m.claims[0].share_id);
        kdev_podres_map_clear(&m);
        assert_int_equal(m.n_devices, 0);
        kdev_podres_map_clear(&m);
        kdev_podres_map_clear(NULL);
        v1__list_pod_resources_response__free_unpacked(r, NULL);
}

/* Devices without IDs or resource are skipped; one device on NUMA 0-3 is one
 * entry with four nodes; an empty topology is no node; share_id "" is kept
 * as present; a claim resource with nothing set is still a claim device. */
static void test_edge_vector(void **state)
{
        (void)state;
        V1__ListPodResourcesResponse *r =
                load_list("03_list_pod_resources_response_edge_cases.bin");
        struct kdev_podres_map m;
        struct kdev_err err = {0};
        assert_int_equal(kdev_podres_map_from_list(r, &m, &err), 0);
        assert_map_json(&m,
                "{\"devices\": ["
                "{\"resource\": \"nvidia.com/mig-1g.10gb\","
                " \"deviceId\": \"MIG-7a6b5c4d-3e2f-5a1b-9c8d-7e6f5a4b3c2d\","
                " \"numa\": [0, 1, 2, 3],"
                " \"namespace\": \"kube-system\", \"pod\": \"edge-cases\", \"container\":"
                " \"edge\"},"
                "{\"resource\": \"nvidia.com/gpu\","
                " \"deviceId\": \"GPU-5a7b9c1d-3e5f-4a6b-8c7d-9e0f1a2b3c4d\", \"numa\": [],"
                " \"namespace\": \"kube-system\", \"pod\": \"edge-cases\", \"container\":"
                " \"edge\"}],"
                "\"claims\": ["
                "{\"namespace\": \"kube-system\", \"pod\": \"edge-cases\", \"container\": \"edge\","
                " \"claimNamespace\": \"kube-system\", \"claimName\": \"edge-claim\","
                " \"driver\": \"gpu.nvidia.com\", \"pool\": \"node-a\", \"device\": \"gpu-1\","
                " \"cdiDevices\": [], \"shareId\": \"\"},"
                "{\"namespace\": \"kube-system\", \"pod\": \"edge-cases\", \"container\": \"edge\","
                " \"claimNamespace\": \"kube-system\", \"claimName\": \"edge-claim\","
                " \"driver\": \"\", \"pool\": \"\", \"device\": \"\", \"cdiDevices\": []}]}");
        kdev_podres_map_clear(&m);
        v1__list_pod_resources_response__free_unpacked(r, NULL);

        r = load_list("04_list_pod_resources_response_no_pods.bin");
        assert_int_equal(kdev_podres_map_from_list(r, &m, &err), 0);
        assert_map_json(&m, "{\"devices\": [], \"claims\": []}");
        kdev_podres_map_clear(&m);
        v1__list_pod_resources_response__free_unpacked(r, NULL);
}

/* Replica IDs of a shared GPU stay distinct devices; share_id is kept. */
static void test_get_vector_replicas(void **state)
{
        (void)state;
        size_t n;
        uint8_t *b = slurp(VEC "/08_get_pod_resources_response.bin", &n);
        V1__GetPodResourcesResponse *g = v1__get_pod_resources_response__unpack(NULL, n, b);
        free(b);
        assert_non_null(g);
        V1__ListPodResourcesResponse one = V1__LIST_POD_RESOURCES_RESPONSE__INIT;
        one.n_pod_resources = 1;
        one.pod_resources = &g->pod_resources;
        struct kdev_podres_map m;
        struct kdev_err err = {0};
        assert_int_equal(kdev_podres_map_from_list(&one, &m, &err), 0);
        assert_int_equal(m.n_devices, 2);
        assert_string_equal(m.devices[0].device_id, "GPU-5a7b9c1d-3e5f-4a6b-8c7d-9e0f1a2b3c4d::3");
        assert_string_equal(m.devices[1].device_id, "GPU-5a7b9c1d-3e5f-4a6b-8c7d-9e0f1a2b3c4d::7");
        assert_int_equal(m.devices[1].n_numa, 1);
        assert_int_equal(m.devices[1].numa[0], 1);
        assert_string_equal(m.devices[1].container, "notebook");
        assert_int_equal(m.n_claims, 1);
        assert_true(m.claims[0].has_share_id);
        assert_string_equal(m.claims[0].share_id, "c2a1f9e4-3b7d-4e62-8f15-d0b9a6e73c48");
        assert_string_equal(m.claims[0].claim_name, "jupyter-alice-shared-gpu");
        assert_int_equal(m.claims[0].n_cdi_devices, 1);
        kdev_podres_map_clear(&m);
        v1__get_pod_resources_response__free_unpacked(g, NULL);
}

static void test_list_no_server(void **state)
{
        (void)state;
        struct kdev_podres_map m = {0};
        struct kdev_err err = {0};
        const char *path = "/nonexistent-kdev-dir/pod-resources/kubelet.sock";
        assert_int_equal(kdev_podres_list(path, 1000, &m, &err), -ENOENT);
        assert_int_equal(m.n_devices, 0);
        assert_string_equal(err.msg, "PodResources List on /nonexistent-kdev-dir/pod-resources/"
                                     "kubelet.sock: no such socket /nonexistent-kdev-dir/"
                                     "pod-resources/kubelet.sock");

        /* a socket file nobody listens on: UNAVAILABLE */
        char dir[] = "/tmp/kdev-podres-XXXXXX";
        assert_non_null(mkdtemp(dir));
        struct sockaddr_un sa = {.sun_family = AF_UNIX};
        snprintf(sa.sun_path, sizeof(sa.sun_path), "%s/dead.sock", dir);
        int fd = socket(AF_UNIX, SOCK_STREAM, 0);
        assert_true(fd >= 0);
        assert_int_equal(bind(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
        close(fd);
        assert_int_equal(kdev_podres_list(sa.sun_path, 1000, &m, &err), -EREMOTEIO);
        char want[512];
        snprintf(want, sizeof(want),
                 "PodResources List on %s: rpc error: code = Unavailable desc = ",
                 sa.sun_path);
        if (strncmp(err.msg, want, strlen(want)) != 0)
                fail_msg("message: %s", err.msg);
        assert_int_equal(m.n_devices, 0);
        unlink(sa.sun_path);
        rmdir(dir);
}

int main(void)
{
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_list_vector),
                cmocka_unit_test(test_edge_vector),
                cmocka_unit_test(test_get_vector_replicas),
                cmocka_unit_test(test_list_no_server),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
