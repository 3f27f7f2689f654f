/* Extended-resource fit (sched/fit.h) and the quantities and object files
 * under it (sched/objects.h): tables of pods over nodes with the exact
 * status, message, reasons and requests kube-scheduler's NodeResourcesFit
 * and the API server's validation give. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "sched/fit.h"
#include "sched/objects.h"

static json_t *parse(const char *text)
{
        json_t *all = NULL;
        struct kdev_err err = {0};
        int rc = kdev_objects_parse(text, strlen(text), "t.yaml", &all, &err);
        if (rc < 0)
                fail_msg("%s", err.msg);
        return all;
}

static char *dump(const json_t *j)
{
        return json_dumps(j, JSON_COMPACT | JSON_SORT_KEYS);
}

static void test_quantity_format(void **state)
{
        (void)state;
        static const struct {
                const char *in, *canonical;
                int64_t value;
                bool integer;
        } cases[] = {
                {"0", "0", 0, true},
                {"2", "2", 2, true},
                {"1000", "1k", 1000, true},
                {"1500", "1500", 1500, true},
                {"1.5", "1500m", 2, false},
                {"500m", "500m", 1, false},
                {"100m", "100m", 1, false},
                {"1Ki", "1Ki", 1024, true},
                {"1024", "1024", 1024, true},
                {"2048Ki", "2Mi", 2097152, true},
                {"1536Ki", "1536Ki", 1572864, true},
                {"0.5Gi", "512Mi", 536870912, true},
                {"1e3", "1e3", 1000, true},
                {"12e2", "1200", 1200, true},
                {"-1", "-1", -1, true},
                {"4G", "4G", 4000000000, true},
                /* MilliValue rounds up: Kubernetes takes this as an integer */
                {"0.9999999", "999999900n", 1, true},
                {"1.0001", "1000100u", 2, false},
        };
        for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
                json_t *s = json_string(cases[i].in);
                struct kdev_qty q;
                assert_int_equal(kdev_qty_from_json(s, &q, NULL), 0);
                char buf[KDEV_QTY_TEXT_MAX];
                kdev_qty_format(&q, buf, sizeof(buf));
                if (strcmp(buf, cases[i].canonical))
                        fail_msg("%s: \"%s\", want \"%s\"", cases[i].in, buf, cases[i].canonical);
                int64_t v;
                bool integer;
                assert_int_equal(kdev_qty_value(&q, &v, &integer), 0);
                assert_int_equal(v, cases[i].value);
                assert_int_equal(integer, cases[i].integer);
                json_decref(s);
        }
        struct kdev_qty q;
        struct kdev_err err = {0};
        json_t *bad = json_string("2 GPUs");
        assert_int_equal(kdev_qty_from_json(bad, &q, &err), -EINVAL);
        assert_string_equal(err.msg, "quantities must match the regular expression "
                                     "'^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'");
        json_decref(bad);
        json_t *t = json_true();
        assert_int_equal(kdev_qty_from_json(t, &q, &err), -EINVAL);
        assert_string_equal(err.msg, "must be a quantity (a string or a number), not a boolean");
        json_decref(t);
}

static void test_objects_files(void **state)
{
        (void)state;
        json_t *all = parse("kind: Pod\nmetadata: {name: a}\n---\n"
                            "kind: PodList\nitems:\n- {kind: Pod, metadata: {name: b}}\n"
                            "- {kind: Pod, metadata: {name: c, namespace: ml}}\n---\n");
        assert_int_equal(json_array_size(all), 3);
        char ref[64];
        assert_string_equal(kdev_object_ref(json_array_get(all, 0), ref, sizeof(ref)), "default/a");
        assert_string_equal(kdev_object_ref(json_array_get(all, 2), ref, sizeof(ref)), "ml/c");
        json_decref(all);
        all = parse("{\"kind\": \"Pod\", \"spec\": {\"n\": 2, \"s\": \"2\"}}");
        char *s = dump(all);
        assert_string_equal(s, "[{\"kind\":\"Pod\",\"spec\":{\"n\":2,\"s\":\"2\"}}]");
        free(s);
        json_decref(all);
        all = parse("a: 2\nb: \"2\"\nc: ~\nd: true\ne: 1.5\n");
        s = dump(all);
        assert_string_equal(s, "[{\"a\":2,\"b\":\"2\",\"c\":null,\"d\":true,\"e\":\"1.5\"}]");
        free(s);
        json_decref(all);

        struct kdev_err err = {0};
        const char *bad = "kind: Pod\n  x: [\n";
        assert_int_equal(kdev_objects_parse(bad, strlen(bad), "p.yaml", &all, &err), -EINVAL);
        assert_null(all);
        assert_string_equal(err.msg, "p.yaml:2:4: mapping values are not allowed in this context");
        bad = "- 1\n";
        assert_int_equal(kdev_objects_parse(bad, strlen(bad), "p.yaml", &all, &err), -EINVAL);
        assert_string_equal(err.msg, "p.yaml: document 1 is not an object");
        /* nine levels of nine aliases: 387 million values if expanded */
        char bomb[2048] = "a: &a [x, x, x, x, x, x, x, x, x]\n";
        for (char c = 'b'; c <= 'i'; c++) {
                size_t o = strlen(bomb);
                snprintf(bomb + o, sizeof(bomb) - o, "%c: &%c [", c, c);
                for (int k = 0; k < 9; k++) {
                        o = strlen(bomb);
                        snprintf(bomb + o, sizeof(bomb) - o, "%s*%c", k ? ", " : "", c - 1);
                }
                o = strlen(bomb);
                snprintf(bomb + o, sizeof(bomb) - o, "]\n");
        }
        assert_int_equal(kdev_objects_parse(bomb, strlen(bomb), "b.yaml", &all, &err), -EINVAL);
        assert_string_equal(err.msg, "b.yaml: document 1: unsupported YAML (a non-scalar key, nesting "
                                     "deeper than 64 or more than 1000000 values)");
        bad = "{\"a\": }";
        assert_int_equal(kdev_objects_parse(bad, strlen(bad), "p.json", &all, &err), -EINVAL);
        assert_string_equal(err.msg, "p.json:1:7: unexpected token near '}'");
}

static const char *const NODE4 =
        "kind: Node\nmetadata: {name: n}\nstatus:\n  allocatable: {cpu: \"8\", nvidia.com/gpu: \"4\", "
        "example.com/fpga: 1}\n  capacity: {nvidia.com/gpu: \"8\"}\n";
static const char *const STATE =
        "{\"updates\": 3, \"resources\": [{\"name\": \"nvidia.com/gpu\", \"capacity\": 4, "
        "\"allocatable\": 4, \"allocated\": 3, \"endpoint\": \"x.sock\", \"state\": \"connected\", "
        "\"devices\": []}]}";

struct fit_case {
        const char *what, *node, *classes, *pod;
        const char *status, *message, *requests, *delegated;
};

#define POD(spec) "kind: Pod\nmetadata: {name: p}\nspec:\n" spec
#define CTR(res) "  - name: c\n    resources: " res "\n"

static const struct fit_case fit_cases[] = {
        {"limits only: requests default to limits", NULL, NULL,
         POD("  containers:\n" CTR("{limits: {nvidia.com/gpu: 2}}")), "Success", "",
         "{\"nvidia.com/gpu\":2}", "[]"},
        {"requests equal to limits", NULL, NULL,
         POD("  containers:\n" CTR("{limits: {nvidia.com/gpu: 4}, requests: {nvidia.com/gpu: \"4\"}}")),
         "Success", "", "{\"nvidia.com/gpu\":4}", "[]"},
        {"more than the node's allocatable", NULL, NULL,
         POD("  containers:\n" CTR("{limits: {nvidia.com/gpu: 5}}")), "UnschedulableAndUnresolvable",
         "Insufficient nvidia.com/gpu", "{\"nvidia.com/gpu\":5}", "[]"},
        {"kubelet state: 3 of 4 allocated", STATE, NULL,
         POD("  containers:\n" CTR("{limits: {nvidia.com/gpu: 2}}")), "Unschedulable",
         "Insufficient nvidia.com/gpu", "{\"nvidia.com/gpu\":2}", "[]"},
        {"kubelet state: the last one", STATE, NULL,
         POD("  containers:\n" CTR("{limits: {nvidia.com/gpu: 1}}")), "Success", "",
         "{\"nvidia.com/gpu\":1}", "[]"},
        {"containers add up", NULL, NULL,
         POD("  containers:\n" CTR("{limits: {nvidia.com/gpu: 2}}") CTR("{limits: {nvidia.com/gpu: 3}}")),
         "UnschedulableAndUnresolvable", "Insufficient nvidia.com/gpu", "{\"nvidia.com/gpu\":5}", "[]"},
        {"an init container bigger than the containers", NULL, NULL,
         POD("  initContainers:\n" CTR("{limits: {nvidia.com/gpu: 3}}") "  containers:\n"
             CTR("{limits: {nvidia.com/gpu: 1}}")),
         "Success", "", "{\"nvidia.com/gpu\":3}", "[]"},
        {"a sidecar runs beside a later init container", NULL, NULL,
         POD("  initContainers:\n  - name: s\n    restartPolicy: Always\n    resources: {limits: "
             "{nvidia.com/gpu: 1}}\n" CTR("{limits: {nvidia.com/gpu: 3}}") "  containers:\n"
             CTR("{limits: {nvidia.com/gpu: 1}}")),
         "Success", "", "{\"nvidia.com/gpu\":4}", "[]"},
        {"a sidecar after an init container runs beside the containers", NULL, NULL,
         POD("  initContainers:\n" CTR("{limits: {nvidia.com/gpu: 2}}")
             "  - name: s\n    restartPolicy: Always\n    resources: {limits: {nvidia.com/gpu: 1}}\n"
             "  containers:\n" CTR("{limits: {nvidia.com/gpu: 2}}")),
         "Success", "", "{\"nvidia.com/gpu\":3}", "[]"},
        {"pod overhead counts", NULL, NULL,
         POD("  overhead: {example.com/fpga: 1}\n  containers:\n" CTR("{limits: {example.com/fpga: 1}}")),
         "UnschedulableAndUnresolvable", "Insufficient example.com/fpga", "{\"example.com/fpga\":2}",
         "[]"},
        {"reasons sorted by name", NULL, NULL,
         POD("  containers:\n" CTR("{limits: {nvidia.com/gpu: 9, example.com/fpga: 2, vendor.io/nic: 1}}")),
         "UnschedulableAndUnresolvable",
         "Insufficient example.com/fpga, Insufficient nvidia.com/gpu, Insufficient vendor.io/nic",
         "{\"example.com/fpga\":2,\"nvidia.com/gpu\":9,\"vendor.io/nic\":1}", "[]"},
        {"cpu and memory are not modelled", NULL, NULL,
         POD("  containers:\n" CTR("{limits: {cpu: 100, memory: 1Ti}, requests: {cpu: 50}}")), "Success",
         "", "{}", "[]"},
        {"a DeviceClass maps a name the node does not offer", NULL,
         "kind: DeviceClass\nmetadata: {name: gpu.nvidia.com}\nspec: {extendedResourceName: "
         "vendor.io/gpu}\n",
         POD("  containers:\n" CTR("{limits: {vendor.io/gpu: 1, "
                                   "deviceclass.resource.kubernetes.io/gpu.nvidia.com: 1}}")),
         "Success", "", "{\"deviceclass.resource.kubernetes.io/gpu.nvidia.com\":1,\"vendor.io/gpu\":1}",
         "[\"deviceclass.resource.kubernetes.io/gpu.nvidia.com\",\"vendor.io/gpu\"]"},
        {"a device plugin resource stays the node's even when a class maps it", NULL,
         "kind: DeviceClass\nmetadata: {name: gpu.nvidia.com}\nspec: {extendedResourceName: "
         "nvidia.com/gpu}\n",
         POD("  containers:\n" CTR("{limits: {nvidia.com/gpu: 5}}")), "UnschedulableAndUnresolvable",
         "Insufficient nvidia.com/gpu", "{\"nvidia.com/gpu\":5}", "[]"},
        {"not an integer (the defaulted request too)", NULL, NULL,
         POD("  containers:\n" CTR("{limits: {nvidia.com/gpu: 1.5}}")), "Invalid",
         "Pod \"p\" is invalid: [spec.containers[0].resources.limits[nvidia.com/gpu]: Invalid value: "
         "\"1500m\": must be an integer, spec.containers[0].resources.requests[nvidia.com/gpu]: "
         "Invalid value: \"1500m\": must be an integer]",
         "{}", "[]"},
        {"requests differ from limits", NULL, NULL,
         POD("  containers:\n" CTR("{limits: {nvidia.com/gpu: 1}, requests: {nvidia.com/gpu: 2}}")),
         "Invalid",
         "Pod \"p\" is invalid: spec.containers[0].resources.requests: Invalid value: \"2\": must be "
         "equal to nvidia.com/gpu limit of 1",
         "{}", "[]"},
        {"a request without a limit", NULL, NULL,
         POD("  initContainers:\n" CTR("{requests: {nvidia.com/gpu: 1}}") "  containers: []\n"),
         "Invalid",
         "Pod \"p\" is invalid: spec.initContainers[0].resources.limits: Required value: Limit must be "
         "set for non overcommitable resources",
         "{}", "[]"},
        {"negative", NULL, NULL, POD("  containers:\n" CTR("{limits: {nvidia.com/gpu: -1}}")), "Invalid",
         "Pod \"p\" is invalid: [spec.containers[0].resources.limits[nvidia.com/gpu]: Invalid value: "
         "\"-1\": must be greater than or equal to 0, spec.containers[0].resources.requests"
         "[nvidia.com/gpu]: Invalid value: \"-1\": must be greater than or equal to 0]",
         "{}", "[]"},
        {"not a quantity", NULL, NULL, POD("  containers:\n" CTR("{limits: {nvidia.com/gpu: two}}")),
         "Invalid",
         "Pod \"p\" is invalid: [spec.containers[0].resources.limits[nvidia.com/gpu]: Invalid value: "
         "\"two\": quantities must match the regular expression "
         "'^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$', spec.containers[0].resources.requests"
         "[nvidia.com/gpu]: Invalid value: \"two\": quantities must match the regular expression "
         "'^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$']",
         "{}", "[]"},
        {"no containers array", NULL, NULL, POD("  containers: {}\n"), "Invalid",
         "Pod \"p\" is invalid: spec.containers: must be an array", "{}", "[]"},
        {"containers that are no objects", NULL, NULL,
         POD("  containers: [1]\n  initContainers: [null]\n"), "Invalid",
         "Pod \"p\" is invalid: [spec.containers[0]: must be an object, spec.initContainers[0]: must "
         "be an object]",
         "{}", "[]"},
        {"a null quantity", NULL, NULL, POD("  containers:\n" CTR("{limits: {nvidia.com/gpu: ~}}")),
         "Invalid",
         "Pod \"p\" is invalid: [spec.containers[0].resources.limits[nvidia.com/gpu]: Invalid value: "
         "\"null\": must be a quantity (a string or a number), not null, "
         "spec.containers[0].resources.requests[nvidia.com/gpu]: Invalid value: \"null\": must be a "
         "quantity (a string or a number), not null]",
         "{}", "[]"},
        /* canonical DecimalExponent: the exponent a multiple of 3 */
        {"beyond kdev's range", NULL, NULL, POD("  containers:\n" CTR("{limits: {nvidia.com/gpu: 1e19}}")),
         "Invalid",
         "Pod \"p\" is invalid: [spec.containers[0].resources.limits[nvidia.com/gpu]: Invalid value: "
         "\"10e18\": out of the range kdev supports, spec.containers[0].resources.requests"
         "[nvidia.com/gpu]: Invalid value: \"10e18\": out of the range kdev supports]",
         "{}", "[]"},
        {"a sum past int64 saturates", NULL, NULL,
         POD("  containers:\n" CTR("{limits: {nvidia.com/gpu: 1}}")
             CTR("{limits: {nvidia.com/gpu: \"9223372036854775807\"}}")),
         "UnschedulableAndUnresolvable", "Insufficient nvidia.com/gpu",
         "{\"nvidia.com/gpu\":9223372036854775807}", "[]"},
};

static void test_fit_table(void **state)
{
        (void)state;
        for (size_t i = 0; i < sizeof(fit_cases) / sizeof(fit_cases[0]); i++) {
                const struct fit_case *c = &fit_cases[i];
                json_t *nodes = parse(c->node ? c->node : NODE4);
                struct kdev_fit_node *node = NULL;
                struct kdev_err err = {0};
                assert_int_equal(kdev_fit_node_from_json(json_array_get(nodes, 0), &node, &err), 0);
                if (c->classes) {
                        json_t *cl = parse(c->classes);
                        assert_int_equal(kdev_fit_node_add_class(node, json_array_get(cl, 0), &err), 0);
                        json_decref(cl);
                }
                json_t *pods = parse(c->pod);
                json_t *r = kdev_fit_pod(node, json_array_get(pods, 0));
                assert_non_null(r);
                const char *status = json_string_value(json_object_get(r, "status"));
                const char *msg = json_string_value(json_object_get(r, "message"));
                char *reqs = dump(json_object_get(r, "requests"));
                char *del = dump(json_object_get(r, "delegated"));
                if (strcmp(status, c->status) || strcmp(msg, c->message) || strcmp(reqs, c->requests) ||
                    strcmp(del, c->delegated))
                        fail_msg("%s: status %s message '%s' requests %s delegated %s", c->what, status,
                                 msg, reqs, del);
                assert_int_equal(json_is_true(json_object_get(r, "fits")), !strcmp(c->status, "Success"));
                free(reqs);
                free(del);
                json_decref(r);
                json_decref(pods);
                json_decref(nodes);
                kdev_fit_node_free(node);
        }
}

static void test_fit_in_order(void **state)
{
        (void)state;
        json_t *nodes = parse(NODE4);
        struct kdev_fit_node *node = NULL;
        assert_int_equal(kdev_fit_node_from_json(json_array_get(nodes, 0), &node, NULL), 0);
        json_t *pods = parse(POD("  containers:\n" CTR("{limits: {nvidia.com/gpu: 3}}")) "---\n"
                             "kind: Pod\nmetadata: {name: q, namespace: ml}\nspec:\n  containers:\n"
                             CTR("{limits: {nvidia.com/gpu: 2}}") "  resourceClaims:\n  - name: "
                             "extra\n    resourceClaimName: c\n---\n"
                             "kind: Pod\nmetadata: {name: r}\nspec:\n  containers:\n"
                             CTR("{limits: {nvidia.com/gpu: 1}}"));
        json_t *a = kdev_fit_pod(node, json_array_get(pods, 0));
        json_t *b = kdev_fit_pod(node, json_array_get(pods, 1));
        json_t *c = kdev_fit_pod(node, json_array_get(pods, 2));
        char *s = dump(b);
        assert_string_equal(s, "{\"claims\":[\"extra\"],\"delegated\":[],\"errors\":[],\"fits\":false,"
                               "\"message\":\"Insufficient nvidia.com/gpu\",\"pod\":\"ml/q\","
                               "\"reasons\":[\"Insufficient nvidia.com/gpu\"],\"requests\":"
                               "{\"nvidia.com/gpu\":2},\"status\":\"Unschedulable\"}");
        free(s);
        assert_true(json_is_true(json_object_get(a, "fits")));
        assert_true(json_is_true(json_object_get(c, "fits")));
        json_t *nj = kdev_fit_node_json(node);
        s = dump(nj);
        assert_string_equal(s, "{\"example.com/fpga\":{\"allocatable\":1,\"requested\":0},"
                               "\"nvidia.com/gpu\":{\"allocatable\":4,\"requested\":4}}");
        free(s);
        json_decref(nj);
        json_decref(a);
        json_decref(b);
        json_decref(c);
        json_decref(pods);
        json_decref(nodes);
        kdev_fit_node_free(node);
}

static void test_node_errors(void **state)
{
        (void)state;
        static const struct {
                const char *node, *msg;
        } cases[] = {
                {"{\"kind\": \"Node\", \"status\": {\"allocatable\": {\"nvidia.com/gpu\": \"1.5\"}}}",
                 "status.allocatable[nvidia.com/gpu]: must be a non-negative integer"},
                {"{\"kind\": \"Node\", \"status\": {\"capacity\": {\"nvidia.com/gpu\": \"x\"}}}",
                 "status.capacity[nvidia.com/gpu]: quantities must match the regular expression "
                 "'^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"},
                {"{\"kind\": \"Node\", \"status\": {}}", "status.capacity: must be an object"},
                {"{\"resources\": [{\"name\": \"a/b\", \"allocatable\": -1}]}",
                 "resources[0]: allocatable and allocated must be non-negative integers"},
                {"{\"kind\": \"Pod\"}",
                 "neither a Node (status.allocatable) nor a kdevctl kubelet state (resources)"},
        };
        for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
                json_t *n = parse(cases[i].node);
                struct kdev_fit_node *node = (void *)1;
                struct kdev_err err = {0};
                assert_int_equal(kdev_fit_node_from_json(json_array_get(n, 0), &node, &err), -EINVAL);
                assert_null(node);
                assert_string_equal(err.msg, cases[i].msg);
                json_decref(n);
        }
}

int main(void)
{
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_quantity_format),
                cmocka_unit_test(test_objects_files),
                cmocka_unit_test(test_fit_table),
                cmocka_unit_test(test_fit_in_order),
                cmocka_unit_test(test_node_errors),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
