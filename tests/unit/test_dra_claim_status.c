/* status.devices of a prepared claim (dra/claim_status.h): the mutation a
 * write makes, exactly. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <jansson.h>

#include "dra/claim_status.h"

#define T1 "2026-12-03T12:00:00Z"
#define T2 "2026-12-03T13:00:00Z"

static json_t *parse(const char *text)
{
        json_error_t e;
        json_t *j = json_loads(text, 0, &e);
        if (!j)
                fail_msg("%s: %s", text, e.text);
        return j;
}

static void assert_json(const json_t *got, const char *want)
{
        json_t *w = parse(want);
        char *g = json_dumps(got, JSON_SORT_KEYS | JSON_COMPACT);
        if (!json_equal((json_t *)got, w))
                fail_msg("got %s\nwant %s", g, want);
        free(g);
        json_decref(w);
}

static const char *const records =
        "[{\"pool\": \"node-a\", \"device\": \"gpu-0\", \"requestNames\": [\"gpu\"],"
        "  \"cdiDeviceIDs\": [\"k8s.gpu.nvidia.com/claim=u-gpu-0\"], \"uuid\": \"GPU-0\"},"
        " {\"pool\": \"node-a\", \"device\": \"gpu-0-mig-1g10gb-19-0\","
        "  \"cdiDeviceIDs\": [\"a\", \"b\"], \"uuid\": \"MIG-1\", \"parentUUID\": \"GPU-1\","
        "  \"share\": {\"shareID\": \"s-1\"}},"
        " {\"pool\": \"other\", \"device\": \"gpu-9\", \"cdiDeviceIDs\": []}]";

#define OTHER "{\"driver\": \"nic.example.com\", \"pool\": \"node-a\", \"device\": \"eth0\"}"
#define ENTRY0(t)                                                                           \
        "{\"driver\": \"gpu.nvidia.com\", \"pool\": \"node-a\", \"device\": \"gpu-0\","     \
        " \"conditions\": [{\"type\": \"Ready\", \"status\": \"True\", \"reason\": "        \
        "\"Prepared\", \"message\": \"prepared as CDI device "                              \
        "k8s.gpu.nvidia.com/claim=u-gpu-0\", \"lastTransitionTime\": \"" t "\"}],"          \
        " \"data\": {\"uuid\": \"GPU-0\"}}"
#define ENTRY1(t)                                                                           \
        "{\"driver\": \"gpu.nvidia.com\", \"pool\": \"node-a\", "                           \
        "\"device\": \"gpu-0-mig-1g10gb-19-0\", \"shareID\": \"s-1\","                      \
        " \"conditions\": [{\"type\": \"Ready\", \"status\": \"True\", \"reason\": "        \
        "\"Prepared\", \"message\": \"prepared as CDI devices a, b\", "                     \
        "\"lastTransitionTime\": \"" t "\"}],"                                              \
        " \"data\": {\"uuid\": \"MIG-1\", \"parentUUID\": \"GPU-1\"}}"

static void test_prepare_then_unprepare(void **state)
{
        (void)state;
        json_t *claim = parse("{\"status\": {\"allocation\": {}, \"devices\": [" OTHER "]}}");
        json_t *recs = parse(records);
        struct kdev_dra_claim_status s = {"gpu.nvidia.com", "node-a", recs, T1};
        struct kdev_err err = {0};
        assert_int_equal(kdev_dra_claim_status_mutate(claim, &s, &err), 0);
        assert_json(claim, "{\"status\": {\"allocation\": {}, \"devices\": [" OTHER ", " ENTRY0(T1)
                           ", " ENTRY1(T1) "]}}");
        /* the same devices later: nothing to write, the first time kept */
        s.now = T2;
        assert_int_equal(kdev_dra_claim_status_mutate(claim, &s, &err), 1);
        /* one device's message changes: written, both keep T1 */
        json_object_set_new(json_array_get(recs, 0), "cdiDeviceIDs",
                            json_pack("[s]", "k8s.gpu.nvidia.com/claim=u-gpu-0"));
        json_object_set_new(json_array_get(recs, 1), "cdiDeviceIDs", json_pack("[s]", "a"));
        assert_int_equal(kdev_dra_claim_status_mutate(claim, &s, &err), 0);
        json_t *d1 = json_array_get(json_object_get(json_object_get(claim, "status"), "devices"),
                                    2);
        assert_string_equal(
                json_string_value(json_object_get(
                        json_array_get(json_object_get(d1, "conditions"), 0),
                        "lastTransitionTime")),
                T1);
        /* unprepared: the driver's entries go, the other driver's stays */
        s.devices = NULL;
        assert_int_equal(kdev_dra_claim_status_mutate(claim, &s, &err), 0);
        assert_json(claim, "{\"status\": {\"allocation\": {}, \"devices\": [" OTHER "]}}");
        assert_int_equal(kdev_dra_claim_status_mutate(claim, &s, &err), 1);
        json_decref(recs);
        json_decref(claim);
}

static void test_empty_and_errors(void **state)
{
        (void)state;
        struct kdev_err err = {0};
        json_t *recs = parse(records);
        /* only our entries: devices removed on unprepare */
        json_t *claim = parse("{\"status\": {}}");
        struct kdev_dra_claim_status s = {"gpu.nvidia.com", "node-a", recs, T1};
        assert_int_equal(kdev_dra_claim_status_mutate(claim, &s, &err), 0);
        s.devices = NULL;
        assert_int_equal(kdev_dra_claim_status_mutate(claim, &s, &err), 0);
        assert_json(claim, "{\"status\": {}}");
        assert_int_equal(kdev_dra_claim_status_mutate(claim, &s, &err), 1);
        json_decref(claim);
        /* not allocated: nothing to write into */
        claim = parse("{\"spec\": {}}");
        assert_int_equal(kdev_dra_claim_status_mutate(claim, &s, &err), 1);
        s.devices = recs;
        assert_int_equal(kdev_dra_claim_status_mutate(claim, &s, &err), -EINVAL);
        assert_string_equal(err.msg, "claim has no status (not allocated)");
        json_decref(claim);
        json_decref(recs);
}

static void test_records_get_uuids(void **state)
{
        (void)state;
        struct kdev_nvidia_mig mig = {0};
        strcpy(mig.uuid, "MIG-aaa");
        strcpy(mig.dra_name, "gpu-0-mig-1g10gb-19-0");
        struct kdev_nvidia_gpu gpu = {0};
        strcpy(gpu.uuid, "GPU-bbb");
        strcpy(gpu.dra_name, "gpu-0");
        gpu.migs = &mig;
        gpu.n_migs = 1;
        struct kdev_nvidia_gpus g = {0};
        g.gpus = &gpu;
        g.n_gpus = 1;
        json_t *in = parse("[{\"device\": \"gpu-0\"}, {\"device\": \"gpu-0-mig-1g10gb-19-0\"},"
                           " {\"device\": \"gpu-7\"}]");
        json_t *out = kdev_dra_claim_status_records(in, &g);
        assert_json(out, "[{\"device\": \"gpu-0\", \"uuid\": \"GPU-bbb\"},"
                         " {\"device\": \"gpu-0-mig-1g10gb-19-0\", \"uuid\": \"MIG-aaa\","
                         "  \"parentUUID\": \"GPU-bbb\"}, {\"device\": \"gpu-7\"}]");
        assert_json(in, "[{\"device\": \"gpu-0\"}, {\"device\": \"gpu-0-mig-1g10gb-19-0\"},"
                        " {\"device\": \"gpu-7\"}]");
        assert_null(kdev_dra_claim_status_records(NULL, &g));
        json_decref(out);
        json_decref(in);
}

int main(void)
{
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_prepare_then_unprepare),
                cmocka_unit_test(test_empty_and_errors),
                cmocka_unit_test(test_records_get_uuids),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
