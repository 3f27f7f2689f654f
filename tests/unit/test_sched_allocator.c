/* The structured allocator (src/sched/allocator.h): the table of
 * tests/data/sched/cases.json, each case a node's ResourceSlices (the mock
 * topologies' slices as kdev-dra-plugin publishes them, and hand-written
 * partitionable and shareable ones), the DeviceClasses, the claims already
 * allocated, and claims allocated one after the other with the exact
 * AllocationResult, the exact explanation of a failure, or the exact error.
 * Plus the input checks of kdev_sched_new. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <jansson.h>

#include "sched/allocator.h"

#define DATA KDEV_SOURCE_DIR "/tests/data/sched/"

static json_t *load(const char *name)
{
        char path[512];
        json_error_t je;
        snprintf(path, sizeof(path), DATA "%s", name);
        json_t *j = json_load_file(path, 0, &je);
        if (!j)
                fail_msg("%s:%d: %s", path, je.line, je.text);
        return j;
}

static char *dumps(const json_t *j)
{
        return json_dumps(j, JSON_SORT_KEYS | JSON_COMPACT);
}

static int run_case(const json_t *tc, json_t *classes)
{
        const char *name = json_string_value(json_object_get(tc, "name"));
        json_t *slices = json_array();
        size_t i;
        json_t *v;
        json_array_foreach(json_object_get(tc, "slices"), i, v) {
                json_t *f = load(json_string_value(v));
                json_array_extend(slices, f);
                json_decref(f);
        }
        const char *node = json_string_value(json_object_get(tc, "node"));
        struct kdev_sched_input in = {
                .node = node ? node : "node-a",
                .node_labels = json_object_get(tc, "nodeLabels"),
                .slices = slices,
                .classes = classes,
                .allocated = json_object_get(tc, "allocated"),
        };
        struct kdev_sched *s = NULL;
        struct kdev_err err = {0};
        int failures = 0;
        int rc = kdev_sched_new(&in, &s, &err);
        json_decref(slices);
        if (rc < 0) {
                print_error("case %s: kdev_sched_new: %s\n", name, err.msg);
                return 1;
        }
        json_array_foreach(json_object_get(tc, "claims"), i, v) {
                const json_t *claim = json_object_get(v, "claim");
                json_t *alloc = NULL, *reasons = NULL;
                kdev_err_clear(&err);
                rc = kdev_sched_allocate(s, claim, &alloc, &reasons, &err);
                json_t *got;
                if (rc == 1)
                        got = json_pack("{s:O}", "allocation", alloc);
                else if (rc == 0)
                        got = json_pack("{s:O}", "reasons", reasons);
                else
                        got = json_pack("{s:s}", "error", err.msg);
                json_t *want = json_deep_copy(v);
                json_object_del(want, "claim");
                if (!json_equal(got, want)) {
                        char *g = dumps(got), *w = dumps(want);
                        fprintf(stderr, "case %s, claim #%zu:\n want %s\n got  %s\n", name, i, w, g);
                        free(g);
                        free(w);
                        failures++;
                }
                json_decref(want);
                json_decref(got);
                json_decref(alloc);
                json_decref(reasons);
        }
        kdev_sched_free(s);
        return failures;
}

static void test_table(void **state)
{
        (void)state;
        json_t *classes = load("classes.json");
        json_t *cases = load("cases.json");
        size_t i, n = 0;
        json_t *tc;
        int failures = 0;
        json_array_foreach(cases, i, tc) {
                failures += run_case(tc, classes);
                n += json_array_size(json_object_get(tc, "claims"));
        }
        json_decref(cases);
        json_decref(classes);
        assert_true(n >= 30);
        assert_int_equal(failures, 0);
}

/* The same claim twice on one allocator: the first call's devices are
 * allocated for the second, and the answer does not depend on anything but
 * the input (a second allocator gives the same result). */
static void test_deterministic(void **state)
{
        (void)state;
        json_t *slices = load("slices-h100-8x.json"), *classes = load("classes.json");
        json_t *claim = json_pack(
                "{s:{s:s, s:s, s:s}, s:{s:{s:[{s:s, s:{s:s, s:i}}]}}}", "metadata", "name", "c",
                "namespace", "default", "uid", "u-1", "spec", "devices", "requests", "name", "gpu",
                "exactly", "deviceClassName", "gpu.nvidia.com", "count", 3);
        struct kdev_sched_input in = {.node = "node-a", .slices = slices, .classes = classes};
        char *first[2] = {NULL, NULL};
        for (int round = 0; round < 2; round++) {
                struct kdev_sched *s;
                assert_int_equal(kdev_sched_new(&in, &s, NULL), 0);
                json_t *a = NULL, *b = NULL, *why = NULL;
                assert_int_equal(kdev_sched_allocate(s, claim, &a, NULL, NULL), 1);
                assert_int_equal(kdev_sched_allocate(s, claim, &b, NULL, NULL), 1);
                /* 8 GPUs: a third claim of 3 does not fit */
                assert_int_equal(kdev_sched_allocate(s, claim, NULL, &why, NULL), 0);
                assert_string_equal(json_string_value(json_array_get(why, 0)),
                                    "request gpu: 3 devices needed, 8 of class gpu.nvidia.com "
                                    "match, 2 free: 6 allocated to other claims");
                assert_string_equal(json_string_value(json_object_get(json_array_get(json_object_get(
                        json_object_get(b, "devices"), "results"), 0), "device")), "gpu-3");
                char *t = json_dumps(a, JSON_SORT_KEYS);
                if (round == 0)
                        first[0] = t;
                else {
                        assert_string_equal(first[0], t);
                        free(t);
                }
                json_decref(a);
                json_decref(b);
                json_decref(why);
                kdev_sched_free(s);
        }
        free(first[0]);
        json_decref(claim);
        json_decref(slices);
        json_decref(classes);
}

static void test_bad_input(void **state)
{
        (void)state;
        struct kdev_sched *s = (void *)1;
        struct kdev_err err = {0};
        struct kdev_sched_input in = {0};
        assert_int_equal(kdev_sched_new(&in, &s, &err), -EINVAL);
        assert_null(s);
        assert_string_equal(err.msg, "node name is required");

        json_t *slices = json_pack("[{s:{s:s}, s:{s:i}}]", "metadata", "name", "s1", "spec",
                                   "driver", 3);
        in.node = "node-a";
        in.slices = slices;
        assert_int_equal(kdev_sched_new(&in, &s, &err), -EINVAL);
        assert_string_equal(err.msg,
                            "ResourceSlice s1: spec.driver and spec.pool.name must be strings");
        json_decref(slices);

        json_t *classes = json_pack("[{s:{s:s}, s:{s:[{s:{s:s}}]}}]", "metadata", "name", "bad",
                                    "spec", "selectors", "cel", "expression", "device.nope");
        in.slices = NULL;
        in.classes = classes;
        assert_int_equal(kdev_sched_new(&in, &s, &err), -EINVAL);
        assert_non_null(strstr(err.msg, "class bad: selector #0: CEL compile error: compilation "
                                        "failed: ERROR: <input>:1:8: undefined field 'nope'"));
        json_decref(classes);
}

/* Requests that each fit alone but not together over 30 devices (14 + 14
 * + 4, within the claim limit of 32): more
 * combinations than the search tries; it stops with -ETIME and a clear
 * error instead of running for hours. */
static void test_search_bound(void **state)
{
        (void)state;
        json_t *devs = json_array();
        for (int i = 0; i < 30; i++) {
                char name[16];
                snprintf(name, sizeof(name), "dev-%d", i);
                json_array_append_new(devs, json_pack("{s:s}", "name", name));
        }
        json_t *slices = json_pack("[{s:{s:s}, s:{s:s, s:s, s:{s:s, s:i, s:i}, s:o}}]", "metadata",
                                   "name", "s", "spec", "driver", "gpu.example.com", "nodeName",
                                   "node-a", "pool", "name", "node-a", "generation", 1,
                                   "resourceSliceCount", 1, "devices", devs);
        json_t *classes = json_pack("[{s:{s:s}, s:{}}]", "metadata", "name", "any", "spec");
        json_t *claim = json_pack(
                "{s:{s:s, s:s}, s:{s:{s:[{s:s, s:{s:s, s:i}}, {s:s, s:{s:s, s:i}}, "
                "{s:s, s:{s:s, s:i}}]}}}",
                "metadata", "name", "big", "namespace", "default", "spec", "devices", "requests",
                "name", "a", "exactly", "deviceClassName", "any", "count", 14, "name", "b",
                "exactly", "deviceClassName", "any", "count", 14, "name", "c", "exactly",
                "deviceClassName", "any", "count", 4);
        /* a small bound: the default one (KDEV_SCHED_MAX_STEPS) works the same
         * and takes seconds under valgrind */
        struct kdev_sched_input in = {.node = "node-a", .slices = slices, .classes = classes,
                                      .max_steps = 10000};
        struct kdev_sched *s;
        struct kdev_err err = {0};
        assert_int_equal(kdev_sched_new(&in, &s, &err), 0);
        json_t *a = NULL, *why = NULL;
        assert_int_equal(kdev_sched_allocate(s, claim, &a, &why, &err), -ETIME);
        assert_null(a);
        assert_null(why);
        assert_string_equal(err.msg, "claim default/big: allocation stopped after 10000 device "
                                     "checks without a solution (too many combinations; "
                                     "kube-scheduler stops at its filter timeout)");
        /* nothing was left allocated: a claim that fits still gets the first devices */
        json_t *small = json_pack("{s:{s:s, s:s}, s:{s:{s:[{s:s, s:{s:s, s:i}}]}}}", "metadata",
                                  "name", "small", "namespace", "default", "spec", "devices",
                                  "requests", "name", "a", "exactly", "deviceClassName", "any",
                                  "count", 30);
        assert_int_equal(kdev_sched_allocate(s, small, &a, &why, &err), 1);
        assert_int_equal(json_array_size(json_object_get(json_object_get(a, "devices"), "results")),
                         30);
        json_decref(a);
        json_decref(small);
        kdev_sched_free(s);
        json_decref(claim);
        json_decref(classes);
        json_decref(slices);
}

int main(void)
{
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_table),
                cmocka_unit_test(test_deterministic),
                cmocka_unit_test(test_bad_input),
                cmocka_unit_test(test_search_bound),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
