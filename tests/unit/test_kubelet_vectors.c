/* Kubelet API wire vectors (tests/data/vectors/<api>/) against protobuf-c and
 * pbjson: device plugin v1beta1, plugin registration v1, DRA v1beta1 and v1,
 * DRA health v1alpha1, PodResources v1. For every vector in each folder's manifest.json:
 * unpack .bin, convert to proto3 JSON and compare with .json (value and exact
 * text), re-pack and compare bytes with .bin, parse .json and pack and compare
 * bytes with .bin. Plus presence details (NUMA topology, DRA v1 share_id),
 * and pbjson's own rules (JSON names, defaults, int64 strings, bytes, maps,
 * errors) on a hand-written descriptor that covers the types the vectors do
 * not use. */
#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <jansson.h>

#include "deviceplugin/v1beta1/api.pb-c.h"
#include "dra/v1/api.pb-c.h"
#include "dra/v1beta1/api.pb-c.h"
#include "dra_health/v1alpha1/api.pb-c.h"
#include "kubelet/pbjson.h"
#include "pluginregistration/v1/api.pb-c.h"
#include "podresources/v1/api.pb-c.h"

#define VEC_ROOT KDEV_SOURCE_DIR "/tests/data/vectors"
#define VEC_DIR VEC_ROOT "/deviceplugin-v1beta1"
#define DRA1_DIR VEC_ROOT "/dra-v1"
#define DRA1B_DIR VEC_ROOT "/dra-v1beta1"
#define HEALTH_DIR VEC_ROOT "/dra-health-v1alpha1"
#define PODRES_DIR VEC_ROOT "/podresources-v1"

/* Shorter names for the DRA types. */
typedef K8s__Io__Kubelet__Pkg__Apis__Dra__V1__NodePrepareResourcesResponse Dra1PrepResp;
typedef K8s__Io__Kubelet__Pkg__Apis__Dra__V1__Device Dra1Device;
typedef K8s__Io__Kubelet__Pkg__Apis__Dra__V1beta1__NodePrepareResourcesResponse Dra1bPrepResp;
#define DRA1_SHARE_SET K8S__IO__KUBELET__PKG__APIS__DRA__V1__DEVICE__SHARE_ID_PRESENCE_SHARE_ID
#define DRA1_SHARE_UNSET K8S__IO__KUBELET__PKG__APIS__DRA__V1__DEVICE__SHARE_ID_PRESENCE__NOT_SET

/* Reads a whole file; fails the test when it is missing. */
static uint8_t *read_file(const char *path, size_t *len)
{
        FILE *f = fopen(path, "rb");
        if (!f)
                fail_msg("vector file missing: %s: %s", path, strerror(errno));
        size_t cap = 4096, n = 0;
        uint8_t *buf = malloc(cap);
        assert_non_null(buf);
        size_t r;
        while ((r = fread(buf + n, 1, cap - n, f)) > 0) {
                n += r;
                if (n == cap) {
                        cap *= 2;
                        buf = realloc(buf, cap);
                        assert_non_null(buf);
                }
        }
        assert_int_equal(ferror(f), 0);
        fclose(f);
        *len = n;
        return buf;
}

static json_t *load_json(const char *path)
{
        json_error_t jerr;
        json_t *j = json_load_file(path, 0, &jerr);
        if (!j)
                fail_msg("cannot load %s: line %d: %s", path, jerr.line, jerr.text);
        return j;
}

static char *hex(const uint8_t *b, size_t n)
{
        char *s = malloc(n * 2 + 1);
        assert_non_null(s);
        for (size_t i = 0; i < n; i++)
                sprintf(s + 2 * i, "%02x", b[i]);
        s[n * 2] = '\0';
        return s;
}

static void assert_packs_to(const ProtobufCMessage *m, const uint8_t *want, size_t want_len,
                            const char *what)
{
        size_t n = protobuf_c_message_get_packed_size(m);
        uint8_t *buf = malloc(n ? n : 1);
        assert_non_null(buf);
        assert_int_equal(protobuf_c_message_pack(m, buf), n);
        if (n != want_len || (n && want && memcmp(buf, want, n) != 0)) {
                char *a = hex(buf, n), *b = hex(want, want_len);
                print_error("%s:\n  got  %s\n  want %s\n", what, a, b);
                free(a);
                free(b);
                free(buf);
                fail_msg("%s: encoding differs", what);
        }
        free(buf);
}

static ProtobufCMessage *unpack_or_fail(const ProtobufCMessageDescriptor *d, const uint8_t *b,
                                        size_t n, const char *what)
{
        static const uint8_t empty[1];
        ProtobufCMessage *m = protobuf_c_message_unpack(d, NULL, n, n ? b : empty);
        if (!m)
                fail_msg("%s: protobuf-c cannot unpack it as %s", what, d->name);
        return m;
}

/* Every vector listed in |dir|/manifest.json, both directions. The folder
 * must hold exactly |count| vectors of proto package |package|; a missing
 * folder fails the test. */
static void check_vector_dir(const char *dir, const char *package, size_t count)
{
        char path[1024];
        snprintf(path, sizeof(path), "%s/manifest.json", dir);
        json_t *manifest = load_json(path);
        json_t *vectors = json_object_get(manifest, "vectors");
        assert_true(json_is_array(vectors));
        assert_int_equal(json_array_size(vectors), count);
        assert_string_equal(json_string_value(json_object_get(manifest, "package")), package);
        size_t plen = strlen(package);

        size_t i;
        json_t *v;
        json_array_foreach(vectors, i, v) {
                const char *name = json_string_value(json_object_get(v, "name"));
                const char *type = json_string_value(json_object_get(v, "type"));
                /* the device plugin manifest says "binary", the others "file" */
                const char *binf = json_string_value(json_object_get(v, "file"));
                if (!binf)
                        binf = json_string_value(json_object_get(v, "binary"));
                const char *jsonf = json_string_value(json_object_get(v, "json"));
                const char *hexs = json_string_value(json_object_get(v, "hex"));
                assert_non_null(name);
                assert_non_null(type);
                assert_non_null(binf);
                assert_non_null(jsonf);
                assert_non_null(hexs);
                if (strncmp(type, package, plen) != 0 || type[plen] != '.')
                        fail_msg("%s: type %s is not in package %s", name, type, package);

                const ProtobufCMessageDescriptor *d = kdev_pbjson_find(type);
                if (!d)
                        fail_msg("%s: no descriptor for type %s", name, type);
                assert_string_equal(d->name, type);

                snprintf(path, sizeof(path), "%s/%s", dir, binf);
                size_t blen;
                uint8_t *bin = read_file(path, &blen);
                assert_int_equal(blen, json_integer_value(json_object_get(v, "size")));
                char *bh = hex(bin, blen);
                assert_string_equal(bh, hexs);
                free(bh);

                snprintf(path, sizeof(path), "%s/%s", dir, jsonf);
                json_t *want = load_json(path);

                /* .bin -> message -> JSON == .json */
                ProtobufCMessage *m = unpack_or_fail(d, bin, blen, name);
                struct kdev_err err = {0};
                json_t *got = kdev_pbjson_from_msg(m, &err);
                if (!got)
                        fail_msg("%s: to JSON: %s", name, err.msg);
                if (!json_equal(got, want)) {
                        char *a = json_dumps(got, JSON_INDENT(2));
                        char *b = json_dumps(want, JSON_INDENT(2));
                        print_error("%s:\n got  %s\n want %s\n", name, a, b);
                        free(a);
                        free(b);
                        fail_msg("%s: JSON differs", name);
                }
                /* kdev_pbjson_dumps() also writes the file's exact text (2-space
                 * indent, declaration order, sorted map keys, raw UTF-8) */
                size_t tlen;
                char *text = kdev_pbjson_dumps(m, &err);
                uint8_t *file_text = read_file(path, &tlen);
                assert_non_null(text);
                if (strlen(text) != tlen || memcmp(text, file_text, tlen) != 0)
                        fail_msg("%s: dumps text differs:\n%s", name, text);
                free(text);
                free(file_text);
                /* message -> .bin bytes */
                assert_packs_to(m, bin, blen, name);
                protobuf_c_message_free_unpacked(m, NULL);

                /* .json -> message -> .bin bytes */
                ProtobufCMessage *p = NULL;
                if (kdev_pbjson_to_msg(d, want, &p, &err) < 0)
                        fail_msg("%s: from JSON: %s", name, err.msg);
                assert_ptr_equal(p->descriptor, d);
                assert_packs_to(p, bin, blen, name);
                protobuf_c_message_free_unpacked(p, NULL);

                json_decref(got);
                json_decref(want);
                free(bin);
        }
        assert_int_equal(i, count);
        json_decref(manifest);
}

static void test_vectors_deviceplugin(void **state)
{
        (void)state;
        check_vector_dir(VEC_DIR, "v1beta1", 13);
}

static void test_vectors_pluginregistration(void **state)
{
        (void)state;
        check_vector_dir(VEC_ROOT "/pluginregistration-v1", "pluginregistration", 7);
}

static void test_vectors_dra_v1beta1(void **state)
{
        (void)state;
        check_vector_dir(DRA1B_DIR, "k8s.io.kubelet.pkg.apis.dra.v1beta1", 7);
}

static void test_vectors_dra_v1(void **state)
{
        (void)state;
        check_vector_dir(DRA1_DIR, "k8s.io.kubelet.pkg.apis.dra.v1", 8);
}

static void test_vectors_dra_health(void **state)
{
        (void)state;
        check_vector_dir(HEALTH_DIR, "v1alpha1", 3);
}

static void test_vectors_podresources(void **state)
{
        (void)state;
        check_vector_dir(PODRES_DIR, "v1", 9);
}

/* PodResources v1: ClaimResource.share_id keeps "absent" and "" apart, an
 * empty pod_resources differs from an absent one, packed cpu_ids keep 0. */
static void test_podresources_presence(void **state)
{
        (void)state;
        size_t n;
        uint8_t *b = read_file(PODRES_DIR "/03_list_pod_resources_response_edge_cases.bin", &n);
        V1__ListPodResourcesResponse *r = (V1__ListPodResourcesResponse *)unpack_or_fail(
                &v1__list_pod_resources_response__descriptor, b, n, "03");
        assert_int_equal(r->n_pod_resources, 2);
        V1__ContainerResources *c = r->pod_resources[0]->containers[1];
        assert_string_equal(c->name, "edge");
        assert_int_equal(c->n_devices, 3);
        assert_null(c->devices[0]->topology);
        assert_int_equal(c->devices[1]->topology->n_nodes, 4);
        assert_int_equal(c->devices[1]->topology->nodes[0]->id, 0);
        assert_int_equal(c->devices[1]->topology->nodes[3]->id, 3);
        assert_non_null(c->devices[2]->topology);
        assert_int_equal(c->devices[2]->topology->n_nodes, 0);
        assert_int_equal(c->n_cpu_ids, 5);
        assert_int_equal(c->cpu_ids[0], 0);
        assert_int_equal(c->cpu_ids[4], 16384);
        assert_int_equal(c->n_dynamic_resources, 2);
        V1__ClaimResource *cr = c->dynamic_resources[0]->claim_resources[0];
        assert_int_equal(cr->share_id_presence_case, V1__CLAIM_RESOURCE__SHARE_ID_PRESENCE_SHARE_ID);
        assert_string_equal(cr->share_id, "");
        cr = c->dynamic_resources[0]->claim_resources[1];
        assert_int_equal(cr->share_id_presence_case,
                         V1__CLAIM_RESOURCE__SHARE_ID_PRESENCE__NOT_SET);
        /* dropping the presence drops the 2 bytes 2a 00 */
        cr = c->dynamic_resources[0]->claim_resources[0];
        size_t with = protobuf_c_message_get_packed_size(&r->base);
        cr->share_id_presence_case = V1__CLAIM_RESOURCE__SHARE_ID_PRESENCE__NOT_SET;
        assert_int_equal(protobuf_c_message_get_packed_size(&r->base), with - 2);
        cr->share_id_presence_case = V1__CLAIM_RESOURCE__SHARE_ID_PRESENCE_SHARE_ID;
        protobuf_c_message_free_unpacked(&r->base, NULL);
        free(b);

        b = read_file(PODRES_DIR "/09_get_pod_resources_response_empty_pod.bin", &n);
        V1__GetPodResourcesResponse *g = (V1__GetPodResourcesResponse *)unpack_or_fail(
                &v1__get_pod_resources_response__descriptor, b, n, "09");
        assert_non_null(g->pod_resources);
        assert_int_equal(protobuf_c_message_get_packed_size(&g->base), 2);
        protobuf_c_message_free_unpacked(&g->base, NULL);
        free(b);
        V1__GetPodResourcesResponse absent = V1__GET_POD_RESOURCES_RESPONSE__INIT;
        assert_int_equal(protobuf_c_message_get_packed_size(&absent.base), 0);
}

/* Every folder under vectors/ is one of the above (a new one needs a test). */
static void test_vector_dirs_known(void **state)
{
        (void)state;
        static const char *const known[] = {
                "deviceplugin-v1beta1", "pluginregistration-v1", "dra-v1beta1",
                "dra-v1", "dra-health-v1alpha1", "podresources-v1",
        };
        size_t n = sizeof(known) / sizeof(known[0]);
        char path[1024];
        for (size_t i = 0; i < n; i++) {
                snprintf(path, sizeof(path), "%s/%s/manifest.json", VEC_ROOT, known[i]);
                FILE *f = fopen(path, "r");
                if (!f)
                        fail_msg("vector folder missing: %s: %s", path, strerror(errno));
                fclose(f);
        }
        DIR *dp = opendir(VEC_ROOT);
        if (!dp)
                fail_msg("cannot open %s: %s", VEC_ROOT, strerror(errno));
        struct dirent *de;
        size_t dirs = 0;
        while ((de = readdir(dp)) != NULL) {
                if (de->d_name[0] == '.')
                        continue;
                snprintf(path, sizeof(path), "%s/%s/manifest.json", VEC_ROOT, de->d_name);
                FILE *f = fopen(path, "r");
                if (!f)
                        continue;
                fclose(f);
                dirs++;
                bool found = false;
                for (size_t i = 0; i < n; i++)
                        found = found || strcmp(de->d_name, known[i]) == 0;
                if (!found)
                        fail_msg("vector folder %s has no test", de->d_name);
        }
        closedir(dp);
        assert_int_equal(dirs, n);
}

/* protobuf-c keeps absent topology, empty topology and NUMA node 0 apart. */
static void test_topology_presence(void **state)
{
        (void)state;
        size_t n;
        uint8_t *bin = read_file(VEC_DIR "/06_list_and_watch_response.bin", &n);
        V1beta1__ListAndWatchResponse *r = v1beta1__list_and_watch_response__unpack(NULL, n, bin);
        assert_non_null(r);
        assert_int_equal(r->n_devices, 5);
        /* gpu-0: one node, ID 0 (an empty nested message) */
        assert_string_equal(r->devices[0]->id, "gpu-0");
        assert_non_null(r->devices[0]->topology);
        assert_int_equal(r->devices[0]->topology->n_nodes, 1);
        assert_non_null(r->devices[0]->topology->nodes[0]);
        assert_int_equal(r->devices[0]->topology->nodes[0]->id, 0);
        /* gpu-2: nodes 0 and 1 */
        assert_int_equal(r->devices[2]->topology->n_nodes, 2);
        assert_int_equal(r->devices[2]->topology->nodes[0]->id, 0);
        assert_int_equal(r->devices[2]->topology->nodes[1]->id, 1);
        assert_string_equal(r->devices[2]->health, "Unhealthy");
        /* gpu-3: no topology at all */
        assert_string_equal(r->devices[3]->id, "gpu-3");
        assert_null(r->devices[3]->topology);
        /* gpu-4: empty topology */
        assert_string_equal(r->devices[4]->id, "gpu-4");
        assert_non_null(r->devices[4]->topology);
        assert_int_equal(r->devices[4]->topology->n_nodes, 0);

        /* the JSON keeps the distinction too */
        struct kdev_err err = {0};
        json_t *j = kdev_pbjson_from_msg(&r->base, &err);
        assert_non_null(j);
        json_t *devs = json_object_get(j, "devices");
        assert_null(json_object_get(json_array_get(devs, 3), "topology"));
        json_t *t4 = json_object_get(json_array_get(devs, 4), "topology");
        assert_true(json_is_object(t4));
        assert_int_equal(json_object_size(t4), 0);
        json_t *n0 = json_array_get(json_object_get(json_object_get(json_array_get(devs, 0),
                                                                    "topology"), "nodes"), 0);
        assert_true(json_is_object(n0));
        assert_int_equal(json_object_size(n0), 0);
        json_decref(j);
        v1beta1__list_and_watch_response__free_unpacked(r, NULL);
        free(bin);

        /* built by hand: node 0 is packed as a zero-length field 1 */
        V1beta1__NUMANode node = V1BETA1__NUMANODE__INIT;
        V1beta1__NUMANode *nodes[] = {&node};
        V1beta1__TopologyInfo topo = V1BETA1__TOPOLOGY_INFO__INIT;
        topo.n_nodes = 1;
        topo.nodes = nodes;
        static const uint8_t want_topo[] = {0x0a, 0x00};
        assert_packs_to(&topo.base, want_topo, sizeof(want_topo), "TopologyInfo{node 0}");
        V1beta1__Device dev = V1BETA1__DEVICE__INIT;
        dev.id = "d";
        V1beta1__TopologyInfo empty = V1BETA1__TOPOLOGY_INFO__INIT;
        dev.topology = &empty;
        static const uint8_t want_dev[] = {0x0a, 0x01, 'd', 0x1a, 0x00};
        assert_packs_to(&dev.base, want_dev, sizeof(want_dev), "Device{empty topology}");
}

static void test_json_names(void **state)
{
        (void)state;
        static const char *const cases[][2] = {
                {"devices_ids", "devicesIds"},
                {"available_deviceIDs", "availableDeviceIDs"},
                {"must_include_deviceIDs", "mustIncludeDeviceIDs"},
                {"ID", "ID"},
                {"get_preferred_allocation_available", "getPreferredAllocationAvailable"},
                {"cdi_devices", "cdiDevices"},
                {"deviceIDs", "deviceIDs"},
                {"a__b", "aB"},
                {"x_", "x"},
                {"_y", "Y"},
                {"field_1", "field1"},
        };
        for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
                char buf[64];
                size_t n = kdev_pbjson_json_name(cases[i][0], buf, sizeof(buf));
                assert_string_equal(buf, cases[i][1]);
                assert_int_equal(n, strlen(cases[i][1]));
        }
        char small[5];
        assert_int_equal(kdev_pbjson_json_name("resource_name", small, sizeof(small)), 12);
        assert_string_equal(small, "reso");
}

static void test_find_descriptor(void **state)
{
        (void)state;
        assert_ptr_equal(kdev_pbjson_v1beta1_find("v1beta1.AllocateResponse"),
                         &v1beta1__allocate_response__descriptor);
        assert_ptr_equal(kdev_pbjson_v1beta1_find("v1beta1.NUMANode"),
                         &v1beta1__numanode__descriptor);
        assert_ptr_equal(kdev_pbjson_v1beta1_find("v1beta1.ContainerAllocateResponse.EnvsEntry"),
                         &v1beta1__container_allocate_response__envs_entry__descriptor);
        assert_null(kdev_pbjson_v1beta1_find("AllocateResponse"));
        assert_null(kdev_pbjson_v1beta1_find("v1beta1.Nope"));
        assert_null(kdev_pbjson_v1beta1_find(NULL));
        /* the v1beta1 lookup keeps to the device plugin package */
        assert_null(kdev_pbjson_v1beta1_find("pluginregistration.PluginInfo"));
        assert_null(kdev_pbjson_v1beta1_find("k8s.io.kubelet.pkg.apis.dra.v1beta1.Device"));

        /* the general lookup covers every package, nested map entries too */
        assert_ptr_equal(kdev_pbjson_find("v1beta1.Device"), &v1beta1__device__descriptor);
        assert_ptr_equal(kdev_pbjson_find("v1beta1.ContainerAllocateResponse.AnnotationsEntry"),
                         &v1beta1__container_allocate_response__annotations_entry__descriptor);
        assert_ptr_equal(kdev_pbjson_find("pluginregistration.InfoRequest"),
                         &pluginregistration__info_request__descriptor);
        assert_ptr_equal(kdev_pbjson_find("k8s.io.kubelet.pkg.apis.dra.v1beta1.Device"),
                         &k8s__io__kubelet__pkg__apis__dra__v1beta1__device__descriptor);
        assert_ptr_equal(kdev_pbjson_find("k8s.io.kubelet.pkg.apis.dra.v1.Device"),
                         &k8s__io__kubelet__pkg__apis__dra__v1__device__descriptor);
        assert_ptr_equal(
                kdev_pbjson_find("k8s.io.kubelet.pkg.apis.dra.v1.NodeUnprepareResourcesResponse"
                                 ".ClaimsEntry"),
                &k8s__io__kubelet__pkg__apis__dra__v1__node_unprepare_resources_response__claims_entry__descriptor);
        assert_ptr_equal(kdev_pbjson_find("v1alpha1.DeviceIdentifier"),
                         &v1alpha1__device_identifier__descriptor);
        assert_null(kdev_pbjson_find("k8s.io.kubelet.pkg.apis.dra.v1alpha4.Device"));
        assert_null(kdev_pbjson_find("v1alpha1.HealthStatus"));
        assert_null(kdev_pbjson_find("Device"));
        assert_null(kdev_pbjson_find(""));
        assert_null(kdev_pbjson_find(NULL));
}

static json_t *parse(const char *text)
{
        json_error_t jerr;
        json_t *j = json_loads(text, JSON_ALLOW_NUL, &jerr);
        if (!j)
                fail_msg("bad test JSON %s: %s", text, jerr.text);
        return j;
}

/* Parses |text| as |d|, packs and compares with |want|. */
static void assert_json_packs(const ProtobufCMessageDescriptor *d, const char *text,
                              const uint8_t *want, size_t want_len)
{
        json_t *j = parse(text);
        ProtobufCMessage *m = NULL;
        struct kdev_err err = {0};
        if (kdev_pbjson_to_msg(d, j, &m, &err) < 0)
                fail_msg("%s: %s", text, err.msg);
        assert_packs_to(m, want, want_len, text);
        protobuf_c_message_free_unpacked(m, NULL);
        json_decref(j);
}

static void assert_json_fails(const ProtobufCMessageDescriptor *d, const char *text, int code,
                              const char *msg)
{
        json_t *j = parse(text);
        ProtobufCMessage *m = (ProtobufCMessage *)(uintptr_t)1;
        struct kdev_err err = {0};
        int rc = kdev_pbjson_to_msg(d, j, &m, &err);
        if (rc != -code)
                fail_msg("%s: rc %d (want %d), msg \"%s\"", text, rc, -code, err.msg);
        assert_string_equal(err.msg, msg);
        assert_null(m);
        json_decref(j);
}

static void test_parse_names_and_nulls(void **state)
{
        (void)state;
        const uint8_t want[] = {0x0a, 0x01, 'a', 0x0a, 0x01, 'b'};
        assert_json_packs(&v1beta1__pre_start_container_request__descriptor,
                          "{\"devices_ids\":[\"a\",\"b\"]}", want, sizeof(want));
        assert_json_packs(&v1beta1__pre_start_container_request__descriptor,
                          "{\"devicesIds\":[\"a\",\"b\"]}", want, sizeof(want));
        assert_json_packs(&v1beta1__pre_start_container_request__descriptor,
                          "{\"devicesIds\":null}", NULL, 0);
        /* original names, int32 from string, explicit defaults */
        const uint8_t pref2[] = {0x0a, 0x05, 0x0a, 0x01, 'x', 0x18, 0x03};
        assert_json_packs(&v1beta1__preferred_allocation_request__descriptor,
                          "{\"container_requests\":[{\"available_deviceIDs\":[\"x\"],"
                          "\"mustIncludeDeviceIDs\":[],\"allocation_size\":\"3\"}]}",
                          pref2, sizeof(pref2));
        /* int64 as number or string; NUMA node 0 explicit stays an empty node */
        const uint8_t topo[] = {0x0a, 0x00, 0x0a, 0x02, 0x08, 0x07, 0x0a, 0x02, 0x08, 0x07};
        assert_json_packs(&v1beta1__topology_info__descriptor,
                          "{\"nodes\":[{\"ID\":\"0\"},{\"ID\":7},{\"ID\":\"7\"}]}", topo,
                          sizeof(topo));
        /* map entries come out sorted by key whatever the JSON order */
        const uint8_t map[] = {0x0a, 0x10, 0x0a, 0x06, 0x0a, 0x01, 'A', 0x12, 0x01, '1',
                               0x0a, 0x06, 0x0a, 0x01, 'B', 0x12, 0x01, '2'};
        assert_json_packs(&v1beta1__container_allocate_response__descriptor,
                          "{\"envs\":{\"B\":\"2\",\"A\":\"1\"}}", map + 2, sizeof(map) - 2);
        assert_json_packs(&v1beta1__allocate_response__descriptor,
                          "{\"containerResponses\":[{\"envs\":{\"B\":\"2\",\"A\":\"1\"}}]}", map,
                          sizeof(map));
}

static void test_parse_errors(void **state)
{
        (void)state;
        assert_json_fails(&v1beta1__allocate_request__descriptor,
                          "{\"containerRequests\":[{\"devicesIds\":[\"a\",5]}]}", EINVAL,
                          "containerRequests[0].devicesIds[1]: expected a string, got a number");
        assert_json_fails(&v1beta1__allocate_request__descriptor,
                          "{\"containerRequests\":[{\"devicesIDs\":[]}]}", EINVAL,
                          "containerRequests[0].devicesIDs: unknown field of "
                          "v1beta1.ContainerAllocateRequest");
        assert_json_fails(&v1beta1__pre_start_container_request__descriptor,
                          "{\"devicesIds\":[\"a\"],\"devices_ids\":[\"b\"]}", EINVAL,
                          "devices_ids: field devices_ids given twice");
        assert_json_fails(&v1beta1__pre_start_container_request__descriptor,
                          "{\"devicesIds\":[null]}", EINVAL,
                          "devicesIds[0]: null is not allowed in a list");
        assert_json_fails(&v1beta1__pre_start_container_request__descriptor, "[]", EINVAL,
                          "(message): expected an object, got an array");
        assert_json_fails(&v1beta1__pre_start_container_request__descriptor,
                          "{\"devicesIds\":\"a\"}", EINVAL,
                          "devicesIds: expected an array, got a string");
        assert_json_fails(&v1beta1__device_plugin_options__descriptor,
                          "{\"preStartRequired\":1}", EINVAL,
                          "preStartRequired: expected true or false, got a number");
        assert_json_fails(&v1beta1__numanode__descriptor, "{\"ID\":\"9223372036854775808\"}",
                          ERANGE, "ID: value out of range for a 64-bit integer");
        assert_json_fails(&v1beta1__numanode__descriptor, "{\"ID\":\"1x\"}", EINVAL,
                          "ID: expected a 64-bit integer");
        assert_json_fails(&v1beta1__numanode__descriptor, "{\"ID\":1.5}", EINVAL,
                          "ID: expected a 64-bit integer");
        assert_json_fails(&v1beta1__container_preferred_allocation_request__descriptor,
                          "{\"allocationSize\":2147483648}", ERANGE,
                          "allocationSize: value out of range for a 32-bit integer");
        assert_json_fails(&v1beta1__container_allocate_response__descriptor,
                          "{\"envs\":{\"A\":1}}", EINVAL,
                          "envs[\"A\"]: expected a string, got a number");
        assert_json_fails(&v1beta1__container_allocate_response__descriptor,
                          "{\"envs\":[\"A\"]}", EINVAL,
                          "envs: expected an object, got an array");
        assert_json_fails(&v1beta1__container_allocate_response__descriptor,
                          "{\"envs\":{\"A\":null}}", EINVAL,
                          "envs[\"A\"]: map value must not be null");
        assert_json_fails(&v1beta1__cdidevice__descriptor, "{\"name\":\"a\\u0000b\"}", EINVAL,
                          "name: string contains a NUL character");
        assert_json_fails(&v1beta1__device__descriptor, "{\"ID\":\"a\",\"topology\":[]}",
                          EINVAL, "topology: expected an object, got an array");
        /* an error deep inside after partial success frees what was built (valgrind) */
        assert_json_fails(&v1beta1__allocate_response__descriptor,
                          "{\"containerResponses\":[{\"envs\":{\"A\":\"1\"},\"mounts\":"
                          "[{\"hostPath\":\"/h\"}]},{\"devices\":[{\"permissions\":\"rw\"},"
                          "{\"permissions\":true}]}]}",
                          EINVAL,
                          "containerResponses[1].devices[1].permissions: expected a string, "
                          "got a boolean");
}

static void test_invalid_utf8(void **state)
{
        (void)state;
        V1beta1__CDIDevice d = V1BETA1__CDIDEVICE__INIT;
        char bad[] = {'a', (char)0xff, 0};
        d.name = bad;
        V1beta1__CDIDevice *list[] = {&d};
        V1beta1__ContainerAllocateResponse r = V1BETA1__CONTAINER_ALLOCATE_RESPONSE__INIT;
        r.n_cdi_devices = 1;
        r.cdi_devices = list;
        struct kdev_err err = {0};
        assert_null(kdev_pbjson_from_msg(&r.base, &err));
        assert_int_equal(err.code, EILSEQ);
        assert_string_equal(err.msg, "cdiDevices[0].name: string is not valid UTF-8");
}

static void test_dumps(void **state)
{
        (void)state;
        V1beta1__DevicePluginOptions o = V1BETA1__DEVICE_PLUGIN_OPTIONS__INIT;
        o.get_preferred_allocation_available = 1;
        struct kdev_err err = {0};
        char *s = kdev_pbjson_dumps(&o.base, &err);
        assert_non_null(s);
        assert_string_equal(s, "{\n  \"getPreferredAllocationAvailable\": true\n}\n");
        free(s);
        V1beta1__Empty e = V1BETA1__EMPTY__INIT;
        s = kdev_pbjson_dumps(&e.base, &err);
        assert_string_equal(s, "{}\n");
        free(s);
}

/* Maps print sorted by key whatever the wire order; a repeated key: last wins. */
static void test_map_order(void **state)
{
        (void)state;
        V1beta1__ContainerAllocateResponse__EnvsEntry e[3];
        const char *kv[3][2] = {{"B", "1"}, {"A", "2"}, {"B", "3"}};
        V1beta1__ContainerAllocateResponse__EnvsEntry *ep[3];
        for (int i = 0; i < 3; i++) {
                v1beta1__container_allocate_response__envs_entry__init(&e[i]);
                e[i].key = (char *)kv[i][0];
                e[i].value = (char *)kv[i][1];
                ep[i] = &e[i];
        }
        V1beta1__ContainerAllocateResponse r = V1BETA1__CONTAINER_ALLOCATE_RESPONSE__INIT;
        r.n_envs = 3;
        r.envs = ep;
        struct kdev_err err = {0};
        char *s = kdev_pbjson_dumps(&r.base, &err);
        assert_non_null(s);
        assert_string_equal(s, "{\n  \"envs\": {\n    \"A\": \"2\",\n    \"B\": \"3\"\n  }\n}\n");
        free(s);
}

/* Unpacks vector |file| of |dir| as |d| (the caller frees message and *bin). */
static ProtobufCMessage *unpack_vector(const char *dir, const char *file,
                                       const ProtobufCMessageDescriptor *d, uint8_t **bin,
                                       size_t *len)
{
        char path[1024];
        snprintf(path, sizeof(path), "%s/%s", dir, file);
        *bin = read_file(path, len);
        return unpack_or_fail(d, *bin, *len, file);
}

/* Packs |d|, unpacks the bytes again and dumps |d| as JSON: field 5 must be
 * on the wire, and "shareId" in the JSON, exactly when |want_share|.
 * Returns the packed size. */
static size_t pack_and_check_share(const Dra1Device *d, bool want_share)
{
        uint8_t buf[256];
        size_t n = protobuf_c_message_get_packed_size(&d->base);
        assert_true(n <= sizeof(buf));
        assert_int_equal(protobuf_c_message_pack(&d->base, buf), n);
        Dra1Device *back = k8s__io__kubelet__pkg__apis__dra__v1__device__unpack(NULL, n, buf);
        assert_non_null(back);
        assert_int_equal(back->share_id_presence_case,
                         want_share ? DRA1_SHARE_SET : DRA1_SHARE_UNSET);
        k8s__io__kubelet__pkg__apis__dra__v1__device__free_unpacked(back, NULL);
        struct kdev_err err = {0};
        json_t *j = kdev_pbjson_from_msg(&d->base, &err);
        assert_non_null(j);
        assert_int_equal(json_object_get(j, "shareId") != NULL, want_share);
        json_decref(j);
        return n;
}

/* DRA v1 Device.share_id (proto3 `optional`, declared as a one-member oneof
 * for protoc-c): absent, present and empty, present with a value. */
static void test_dra_v1_share_id(void **state)
{
        (void)state;
        uint8_t *bin;
        size_t n;
        /* vector 04: present and empty, written 2a 00 */
        Dra1PrepResp *r = (Dra1PrepResp *)unpack_vector(
                DRA1_DIR, "04_node_prepare_resources_response_share_id_empty.bin",
                &k8s__io__kubelet__pkg__apis__dra__v1__node_prepare_resources_response__descriptor,
                &bin, &n);
        assert_int_equal(r->n_claims, 1);
        assert_string_equal(r->claims[0]->key, "7e3b5c1a-4d2f-4b8e-9a61-2c5d8f0e1b37");
        assert_int_equal(r->claims[0]->value->n_devices, 1);
        Dra1Device *dev = r->claims[0]->value->devices[0];
        assert_string_equal(dev->device_name, "gpu-0");
        assert_int_equal(dev->share_id_presence_case, DRA1_SHARE_SET);
        assert_non_null(dev->share_id);
        assert_string_equal(dev->share_id, "");
        assert_int_equal(bin[n - 2], 0x2a);
        assert_int_equal(bin[n - 1], 0x00);
        /* cleared presence drops exactly those two bytes (and the JSON member) */
        dev->share_id_presence_case = DRA1_SHARE_UNSET;
        assert_int_equal(pack_and_check_share(dev, false), 24 - 2);
        dev->share_id_presence_case = DRA1_SHARE_SET;
        assert_int_equal(pack_and_check_share(dev, true), 24);
        protobuf_c_message_free_unpacked(&r->base, NULL);
        free(bin);

        /* vector 02: only gpu-1 has one */
        r = (Dra1PrepResp *)unpack_vector(
                DRA1_DIR, "02_node_prepare_resources_response.bin",
                &k8s__io__kubelet__pkg__apis__dra__v1__node_prepare_resources_response__descriptor,
                &bin, &n);
        assert_int_equal(r->n_claims, 2);
        K8s__Io__Kubelet__Pkg__Apis__Dra__V1__NodePrepareResourceResponse *a = r->claims[1]->value;
        assert_string_equal(r->claims[1]->key, "7e3b5c1a-4d2f-4b8e-9a61-2c5d8f0e1b37");
        assert_int_equal(a->n_devices, 3);
        assert_int_equal(a->devices[0]->share_id_presence_case, DRA1_SHARE_UNSET);
        assert_int_equal(a->devices[1]->share_id_presence_case, DRA1_SHARE_SET);
        assert_string_equal(a->devices[1]->share_id, "c2a1f9e4-3b7d-4e62-8f15-d0b9a6e73c48");
        assert_int_equal(a->devices[2]->share_id_presence_case, DRA1_SHARE_UNSET);
        protobuf_c_message_free_unpacked(&r->base, NULL);
        free(bin);

        /* built by hand */
        Dra1Device d = K8S__IO__KUBELET__PKG__APIS__DRA__V1__DEVICE__INIT;
        d.device_name = "g";
        static const uint8_t absent[] = {0x1a, 0x01, 'g'};
        assert_packs_to(&d.base, absent, sizeof(absent), "Device{no share_id}");
        pack_and_check_share(&d, false);
        d.share_id_presence_case = DRA1_SHARE_SET;
        d.share_id = "";
        static const uint8_t empty[] = {0x1a, 0x01, 'g', 0x2a, 0x00};
        assert_packs_to(&d.base, empty, sizeof(empty), "Device{share_id \"\"}");
        pack_and_check_share(&d, true);
        d.share_id = "s1";
        static const uint8_t set[] = {0x1a, 0x01, 'g', 0x2a, 0x02, 's', '1'};
        assert_packs_to(&d.base, set, sizeof(set), "Device{share_id s1}");
        /* pitfall: protobuf-c's packer treats its shared empty-string default
         * (and NULL) as "not set" even when the case says set; pbjson agrees,
         * so JSON and bytes never disagree. A present empty share_id needs a
         * string of its own, such as the literal "". */
        d.share_id = (char *)protobuf_c_empty_string;
        assert_packs_to(&d.base, absent, sizeof(absent), "Device{share_id default}");
        pack_and_check_share(&d, false);
        d.share_id = NULL;
        assert_packs_to(&d.base, absent, sizeof(absent), "Device{share_id NULL}");
        pack_and_check_share(&d, false);

        /* JSON: "shareId": "" is present, null is absent, both names work */
        assert_json_packs(&k8s__io__kubelet__pkg__apis__dra__v1__device__descriptor,
                          "{\"deviceName\":\"g\",\"shareId\":\"\"}", empty, sizeof(empty));
        assert_json_packs(&k8s__io__kubelet__pkg__apis__dra__v1__device__descriptor,
                          "{\"deviceName\":\"g\",\"share_id\":\"s1\"}", set, sizeof(set));
        assert_json_packs(&k8s__io__kubelet__pkg__apis__dra__v1__device__descriptor,
                          "{\"deviceName\":\"g\",\"shareId\":null}", absent, sizeof(absent));
        assert_json_fails(&k8s__io__kubelet__pkg__apis__dra__v1__device__descriptor,
                          "{\"shareId\":\"a\",\"share_id\":\"b\"}", EINVAL,
                          "share_id: field share_id given twice");
        assert_json_fails(&k8s__io__kubelet__pkg__apis__dra__v1__device__descriptor,
                          "{\"shareId\":1}", EINVAL,
                          "shareId: expected a string, got a number");
}

/* A v1beta1 decoder skips v1's share_id (field 5) and keeps the rest. */
static void test_dra_v1beta1_skips_share_id(void **state)
{
        (void)state;
        uint8_t *bin;
        size_t n;
        Dra1bPrepResp *r = (Dra1bPrepResp *)unpack_vector(
                DRA1_DIR, "02_node_prepare_resources_response.bin",
                &k8s__io__kubelet__pkg__apis__dra__v1beta1__node_prepare_resources_response__descriptor,
                &bin, &n);
        assert_int_equal(r->n_claims, 2);
        assert_int_equal(r->claims[1]->value->n_devices, 3);
        assert_string_equal(r->claims[1]->value->devices[1]->device_name, "gpu-1");
        assert_int_equal(r->claims[1]->value->devices[1]->n_cdi_device_ids, 2);
        /* the v1beta1 JSON has no shareId; it equals v1beta1's own vector 02 */
        struct kdev_err err = {0};
        json_t *got = kdev_pbjson_from_msg(&r->base, &err);
        assert_non_null(got);
        json_t *want = load_json(DRA1B_DIR "/02_node_prepare_resources_response.json");
        assert_true(json_equal(got, want));
        json_decref(got);
        json_decref(want);
        protobuf_c_message_free_unpacked(&r->base, NULL);
        free(bin);
}

/* DRA health: negative int64 as a 10-byte varint, enum names, unknown enum
 * values kept as numbers. */
static void test_dra_health_values(void **state)
{
        (void)state;
        uint8_t *bin;
        size_t n;
        V1alpha1__NodeWatchResourcesResponse *r = (V1alpha1__NodeWatchResourcesResponse *)
                unpack_vector(HEALTH_DIR, "02_node_watch_resources_response.bin",
                              &v1alpha1__node_watch_resources_response__descriptor, &bin, &n);
        assert_int_equal(r->n_devices, 3);
        assert_int_equal(r->devices[0]->health, V1ALPHA1__HEALTH_STATUS__HEALTHY);
        assert_int_equal(r->devices[0]->health_check_timeout_seconds, 30);
        assert_int_equal(r->devices[1]->health, V1ALPHA1__HEALTH_STATUS__UNHEALTHY);
        assert_int_equal(r->devices[2]->health, V1ALPHA1__HEALTH_STATUS__UNKNOWN);
        assert_int_equal(r->devices[2]->last_updated_time, 1767225610);
        assert_true(r->devices[2]->health_check_timeout_seconds == -1);
        assert_string_equal(r->devices[2]->device->device_name, "gpu-2-mig-1g-10gb");
        protobuf_c_message_free_unpacked(&r->base, NULL);
        free(bin);

        V1alpha1__DeviceHealth h = V1ALPHA1__DEVICE_HEALTH__INIT;
        h.health = (V1alpha1__HealthStatus)3;
        static const uint8_t three[] = {0x10, 0x03};
        assert_packs_to(&h.base, three, sizeof(three), "DeviceHealth{health 3}");
        struct kdev_err err = {0};
        char *s = kdev_pbjson_dumps(&h.base, &err);
        assert_non_null(s);
        assert_string_equal(s, "{\n  \"health\": 3\n}\n");
        free(s);
        assert_json_packs(&v1alpha1__device_health__descriptor, "{\"health\":3}", three,
                          sizeof(three));
        static const uint8_t unhealthy_neg[] = {0x10, 0x02, 0x20, 0xfe, 0xff, 0xff, 0xff, 0xff,
                                                0xff, 0xff, 0xff, 0xff, 0x01};
        assert_json_packs(&v1alpha1__device_health__descriptor,
                          "{\"health\":\"UNHEALTHY\",\"healthCheckTimeoutSeconds\":-2}",
                          unhealthy_neg, sizeof(unhealthy_neg));
        assert_json_fails(&v1alpha1__device_health__descriptor, "{\"health\":\"SICK\"}", EINVAL,
                          "health: expected an enum value name or number");
        /* an absent device and an empty one differ */
        V1alpha1__DeviceIdentifier id = V1ALPHA1__DEVICE_IDENTIFIER__INIT;
        V1alpha1__DeviceHealth e = V1ALPHA1__DEVICE_HEALTH__INIT;
        assert_packs_to(&e.base, NULL, 0, "DeviceHealth{}");
        e.device = &id;
        static const uint8_t empty_dev[] = {0x0a, 0x00};
        assert_packs_to(&e.base, empty_dev, sizeof(empty_dev), "DeviceHealth{device {}}");
        s = kdev_pbjson_dumps(&e.base, &err);
        assert_string_equal(s, "{\n  \"device\": {}\n}\n");
        free(s);
}

/* ---- a hand-written descriptor with the types v1beta1 does not use ---- */

typedef struct {
        ProtobufCMessage base;
        int32_t key;
        char *value;
} ById;

typedef struct {
        ProtobufCMessage base;
        int32_t i32;
        uint64_t u64;
        ProtobufCBinaryData b;
        double d;
        int color;
        size_t n_list;
        int64_t *list;
        size_t n_by_id;
        ById **by_id;
        protobuf_c_boolean has_opt;
        uint32_t opt;
        float f;
} Scalars;

static const ProtobufCEnumValue color_values[] = {
        {"COLOR_UNSET", "COLOR_UNSET", 0},
        {"RED", "RED", 1},
        {"GREEN", "GREEN", 2},
};
static const ProtobufCEnumValueIndex color_by_name[] = {
        {"COLOR_UNSET", 0},
        {"GREEN", 2},
        {"RED", 1},
};
static const ProtobufCIntRange color_ranges[] = {{0, 0}, {0, 3}};
static const ProtobufCEnumDescriptor color_desc = {
        PROTOBUF_C__ENUM_DESCRIPTOR_MAGIC, "t.Color", "Color", "Color", "t", 3, color_values, 3,
        color_by_name, 1, color_ranges, NULL, NULL, NULL, NULL,
};

static void by_id_init(ById *m);
static const ProtobufCFieldDescriptor by_id_fields[] = {
        {"key", 1, PROTOBUF_C_LABEL_NONE, PROTOBUF_C_TYPE_INT32, 0, offsetof(ById, key), NULL,
         NULL, 0, 0, NULL, NULL},
        {"value", 2, PROTOBUF_C_LABEL_NONE, PROTOBUF_C_TYPE_STRING, 0, offsetof(ById, value), NULL,
         &protobuf_c_empty_string, 0, 0, NULL, NULL},
};
static const unsigned by_id_sorted[] = {0, 1};
static const ProtobufCIntRange by_id_ranges[] = {{1, 0}, {0, 2}};
static const ProtobufCMessageDescriptor by_id_desc = {
        PROTOBUF_C__MESSAGE_DESCRIPTOR_MAGIC, "t.Scalars.ByIdEntry", "ByIdEntry", "ById", "t",
        sizeof(ById), 2, by_id_fields, by_id_sorted, 1, by_id_ranges,
        (ProtobufCMessageInit)by_id_init, NULL, NULL, NULL,
};
static void by_id_init(ById *m)
{
        memset(m, 0, sizeof(*m));
        m->base.descriptor = &by_id_desc;
        m->value = (char *)protobuf_c_empty_string;
}

static void scalars_init(Scalars *m);
static const ProtobufCFieldDescriptor scalars_fields[] = {
        {"i32", 1, PROTOBUF_C_LABEL_NONE, PROTOBUF_C_TYPE_SINT32, 0, offsetof(Scalars, i32), NULL,
         NULL, 0, 0, NULL, NULL},
        {"big_u64", 2, PROTOBUF_C_LABEL_NONE, PROTOBUF_C_TYPE_UINT64, 0, offsetof(Scalars, u64),
         NULL, NULL, 0, 0, NULL, NULL},
        {"raw_b", 3, PROTOBUF_C_LABEL_NONE, PROTOBUF_C_TYPE_BYTES, 0, offsetof(Scalars, b), NULL,
         NULL, 0, 0, NULL, NULL},
        {"d", 4, PROTOBUF_C_LABEL_NONE, PROTOBUF_C_TYPE_DOUBLE, 0, offsetof(Scalars, d), NULL,
         NULL, 0, 0, NULL, NULL},
        {"color", 5, PROTOBUF_C_LABEL_NONE, PROTOBUF_C_TYPE_ENUM, 0, offsetof(Scalars, color),
         &color_desc, NULL, 0, 0, NULL, NULL},
        {"list", 6, PROTOBUF_C_LABEL_REPEATED, PROTOBUF_C_TYPE_SINT64, offsetof(Scalars, n_list),
         offsetof(Scalars, list), NULL, NULL, PROTOBUF_C_FIELD_FLAG_PACKED, 0, NULL, NULL},
        {"by_id", 7, PROTOBUF_C_LABEL_REPEATED, PROTOBUF_C_TYPE_MESSAGE,
         offsetof(Scalars, n_by_id), offsetof(Scalars, by_id), &by_id_desc, NULL, 0, 0, NULL,
         NULL},
        {"opt", 8, PROTOBUF_C_LABEL_OPTIONAL, PROTOBUF_C_TYPE_UINT32, offsetof(Scalars, has_opt),
         offsetof(Scalars, opt), NULL, NULL, 0, 0, NULL, NULL},
        {"f", 9, PROTOBUF_C_LABEL_NONE, PROTOBUF_C_TYPE_FLOAT, 0, offsetof(Scalars, f), NULL,
         NULL, 0, 0, NULL, NULL},
};
static const unsigned scalars_sorted[] = {1, 6, 4, 3, 8, 0, 5, 7, 2};
static const ProtobufCIntRange scalars_ranges[] = {{1, 0}, {0, 9}};
static const ProtobufCMessageDescriptor scalars_desc = {
        PROTOBUF_C__MESSAGE_DESCRIPTOR_MAGIC, "t.Scalars", "Scalars", "Scalars", "t",
        sizeof(Scalars), 9, scalars_fields, scalars_sorted, 1, scalars_ranges,
        (ProtobufCMessageInit)scalars_init, NULL, NULL, NULL,
};
static void scalars_init(Scalars *m)
{
        memset(m, 0, sizeof(*m));
        m->base.descriptor = &scalars_desc;
}

static void test_other_types(void **state)
{
        (void)state;
        Scalars s;
        scalars_init(&s);
        uint8_t raw[] = {0xfb, 0xff, 0x00, 'a'};
        int64_t list[] = {-1, INT64_MAX, 0};
        ById e1, e2;
        by_id_init(&e1);
        by_id_init(&e2);
        e1.key = 9;
        e1.value = "nine";
        e2.key = 10;
        ById *entries[] = {&e1, &e2};
        s.i32 = -7;
        s.u64 = UINT64_MAX;
        s.b.data = raw;
        s.b.len = sizeof(raw);
        s.d = 0.5;
        s.color = 2;
        s.n_list = 3;
        s.list = list;
        s.n_by_id = 2;
        s.by_id = entries;
        s.has_opt = 1; /* explicit presence: written although 0 */
        s.opt = 0;
        s.f = INFINITY;
        struct kdev_err err = {0};
        json_t *j = kdev_pbjson_from_msg(&s.base, &err);
        assert_non_null(j);
        json_t *want = parse("{\"i32\":-7,\"bigU64\":\"18446744073709551615\","
                             "\"rawB\":\"+/8AYQ==\","
                             "\"d\":0.5,\"color\":\"GREEN\",\"list\":[\"-1\","
                             "\"9223372036854775807\",\"0\"],\"byId\":{\"9\":\"nine\",\"10\":\"\"},"
                             "\"opt\":0,\"f\":\"Infinity\"}");
        if (!json_equal(j, want)) {
                char *a = json_dumps(j, 0);
                fail_msg("got %s", a);
        }

        /* back: the parse packs exactly like the original */
        size_t n = protobuf_c_message_get_packed_size(&s.base);
        uint8_t *orig = malloc(n);
        protobuf_c_message_pack(&s.base, orig);
        ProtobufCMessage *back = NULL;
        assert_int_equal(kdev_pbjson_to_msg(&scalars_desc, want, &back, &err), 0);
        assert_packs_to(back, orig, n, "Scalars round trip");
        protobuf_c_message_free_unpacked(back, NULL);

        /* map keys sorted numerically, url-safe unpadded base64, enum by number */
        json_t *alt = parse("{\"rawB\":\"-_8AYQ\",\"by_id\":{\"10\":\"\",\"9\":\"nine\"},"
                            "\"color\":2,\"i32\":\"-7\",\"bigU64\":1e30,"
                            "\"list\":[-1,\"9223372036854775807\",0],\"d\":\"0.5\",\"opt\":0,"
                            "\"f\":\"Infinity\"}");
        /* a number beyond uint64 is out of range; the decimal string is fine */
        int rc = kdev_pbjson_to_msg(&scalars_desc, alt, &back, &err);
        assert_int_equal(rc, -ERANGE);
        assert_string_equal(err.msg, "bigU64: value out of range for an unsigned 64-bit integer");
        json_object_set_new(alt, "bigU64", json_string("18446744073709551615"));
        assert_int_equal(kdev_pbjson_to_msg(&scalars_desc, alt, &back, &err), 0);
        assert_packs_to(back, orig, n, "Scalars alternative spellings");
        protobuf_c_message_free_unpacked(back, NULL);

        assert_json_fails(&scalars_desc, "{\"color\":\"BLUE\"}", EINVAL,
                          "color: expected an enum value name or number");
        assert_json_fails(&scalars_desc, "{\"rawB\":\"a\"}", EINVAL,
                          "rawB: expected a base64 string");
        assert_json_fails(&scalars_desc, "{\"rawB\":\"ab!d\"}", EINVAL,
                          "rawB: expected a base64 string");
        assert_json_fails(&scalars_desc, "{\"byId\":{\"x\":\"\"}}", EINVAL,
                          "byId[\"x\"]: expected a 32-bit integer");
        assert_json_fails(&scalars_desc, "{\"bigU64\":\"-1\"}", EINVAL,
                          "bigU64: expected an unsigned 64-bit integer");
        assert_json_fails(&scalars_desc, "{\"f\":1e39}", ERANGE,
                          "f: value out of range for a number");

        /* unset: everything omitted, opt too */
        Scalars z;
        scalars_init(&z);
        json_t *jz = kdev_pbjson_from_msg(&z.base, &err);
        assert_int_equal(json_object_size(jz), 0);
        json_decref(jz);

        free(orig);
        json_decref(alt);
        json_decref(want);
        json_decref(j);
}

int main(void)
{
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_vectors_deviceplugin),
                cmocka_unit_test(test_vectors_pluginregistration),
                cmocka_unit_test(test_vectors_dra_v1beta1),
                cmocka_unit_test(test_vectors_dra_v1),
                cmocka_unit_test(test_vectors_dra_health),
                cmocka_unit_test(test_vectors_podresources),
                cmocka_unit_test(test_podresources_presence),
                cmocka_unit_test(test_vector_dirs_known),
                cmocka_unit_test(test_dra_v1_share_id),
                cmocka_unit_test(test_dra_v1beta1_skips_share_id),
                cmocka_unit_test(test_dra_health_values),
                cmocka_unit_test(test_topology_presence),
                cmocka_unit_test(test_json_names),
                cmocka_unit_test(test_find_descriptor),
                cmocka_unit_test(test_parse_names_and_nulls),
                cmocka_unit_test(test_parse_errors),
                cmocka_unit_test(test_invalid_utf8),
                cmocka_unit_test(test_dumps),
                cmocka_unit_test(test_map_order),
                cmocka_unit_test(test_other_types),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
