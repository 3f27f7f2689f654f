/* ResourceQuota admission over extended resources and DRA device classes
 * (sched/quota.h): tables of quotas and objects with the exact usage,
 * verdict and API server message. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "sched/objects.h"
#include "sched/quota.h"

static json_t *parse(const char *text)
{
        json_t *all = NULL;
        struct kdev_err err = {0};
        if (kdev_objects_parse(text, strlen(text), "t.yaml", &all, &err) < 0)
                fail_msg("%s", err.msg);
        return all;
}

static char *dump(const json_t *j)
{
        return json_dumps(j, JSON_COMPACT | JSON_SORT_KEYS);
}

#define GPU_POD(name, n)                                                                           \
        "kind: Pod\nmetadata: {name: " name "}\nspec:\n  containers:\n  - name: c\n    resources: "  \
        "{limits: {nvidia.com/gpu: " #n "}}\n"
#define CLAIM(name, requests)                                                                      \
        "kind: ResourceClaim\napiVersion: resource.k8s.io/v1\nmetadata: {name: " name               \
        "}\nspec:\n  devices:\n    requests:\n" requests

struct admit_case {
        const char *what, *quotas, *objects;
        /* per object: "Y" or "N:<message>" */
        const char *verdicts[4];
        const char *usage_last; /* usage of the last object */
        const char *used_after; /* the first quota's used after all */
};

static const char *const Q_GPU =
        "kind: ResourceQuota\nmetadata: {name: gpu-quota}\nspec:\n  hard: {requests.nvidia.com/gpu: 4}\n"
        "status:\n  hard: {requests.nvidia.com/gpu: 4}\n  used: {requests.nvidia.com/gpu: 3}\n";

static const struct admit_case cases[] = {
        {"over the quota", Q_GPU, GPU_POD("p", 2),
         {"N:pods \"p\" is forbidden: exceeded quota: gpu-quota, requested: requests.nvidia.com/gpu=2, "
          "used: requests.nvidia.com/gpu=3, limited: requests.nvidia.com/gpu=4"},
         "{\"count/pods\":\"1\",\"pods\":\"1\",\"requests.nvidia.com/gpu\":\"2\"}",
         "{\"requests.nvidia.com/gpu\":\"3\"}"},
        {"admitted pods are charged in order", Q_GPU, GPU_POD("a", 1) "---\n" GPU_POD("b", 1),
         {"Y",
          "N:pods \"b\" is forbidden: exceeded quota: gpu-quota, requested: requests.nvidia.com/gpu=1, "
          "used: requests.nvidia.com/gpu=4, limited: requests.nvidia.com/gpu=4"},
         "{\"count/pods\":\"1\",\"pods\":\"1\",\"requests.nvidia.com/gpu\":\"1\"}",
         "{\"requests.nvidia.com/gpu\":\"4\"}"},
        {"another namespace's quota does not apply", Q_GPU,
         "kind: Pod\nmetadata: {name: p, namespace: ml}\nspec:\n  containers:\n  - name: c\n    "
         "resources: {limits: {nvidia.com/gpu: 8}}\n",
         {"Y"}, "{\"count/pods\":\"1\",\"pods\":\"1\",\"requests.nvidia.com/gpu\":\"8\"}",
         "{\"requests.nvidia.com/gpu\":\"3\"}"},
        {"a finished pod charges nothing", Q_GPU,
         "kind: Pod\nmetadata: {name: done}\nspec:\n  containers:\n  - name: c\n    resources: "
         "{limits: {nvidia.com/gpu: 8}}\nstatus: {phase: Succeeded}\n",
         {"Y"}, "{}", "{\"requests.nvidia.com/gpu\":\"3\"}"},
        {"a pod without GPUs only counts as a pod", Q_GPU,
         "kind: Pod\nmetadata: {name: cpu}\nspec:\n  containers:\n  - name: c\n", {"Y"},
         "{\"count/pods\":\"1\",\"pods\":\"1\"}", "{\"requests.nvidia.com/gpu\":\"3\"}"},
        {"the exceeded keys only, sorted, canonical quantities",
         "kind: ResourceQuota\nmetadata: {name: q}\nspec:\n  hard: {requests.nvidia.com/gpu: 1000, pods: "
         "\"10\", requests.example.com/fpga: 1}\nstatus:\n  hard: {requests.nvidia.com/gpu: 1000, pods: "
         "\"10\", requests.example.com/fpga: 1}\n  used: {requests.nvidia.com/gpu: 999, pods: 1, "
         "requests.example.com/fpga: 1}\n",
         "kind: Pod\nmetadata: {name: p}\nspec:\n  containers:\n  - name: c\n    resources: {limits: "
         "{nvidia.com/gpu: 2, example.com/fpga: 1}}\n",
         {"N:pods \"p\" is forbidden: exceeded quota: q, requested: requests.example.com/fpga=1,"
          "requests.nvidia.com/gpu=2, used: requests.example.com/fpga=1,requests.nvidia.com/gpu=999, "
          "limited: requests.example.com/fpga=1,requests.nvidia.com/gpu=1k"},
         "{\"count/pods\":\"1\",\"pods\":\"1\",\"requests.example.com/fpga\":\"1\","
         "\"requests.nvidia.com/gpu\":\"2\"}",
         "{\"pods\":\"1\",\"requests.example.com/fpga\":\"1\",\"requests.nvidia.com/gpu\":\"999\"}"},
        {"the first refusing quota by name",
         "kind: ResourceQuota\nmetadata: {name: z}\nspec:\n  hard: {requests.nvidia.com/gpu: 0}\n---\n"
         "kind: ResourceQuota\nmetadata: {name: a}\nspec:\n  hard: {count/pods: 0}\n",
         GPU_POD("p", 1),
         {"N:pods \"p\" is forbidden: exceeded quota: a, requested: count/pods=1, used: count/pods=0, "
          "limited: count/pods=0"},
         "{\"count/pods\":\"1\",\"pods\":\"1\",\"requests.nvidia.com/gpu\":\"1\"}",
         "{\"requests.nvidia.com/gpu\":\"0\"}"},
        {"status without a used value",
         "kind: ResourceQuota\nmetadata: {name: q}\nspec:\n  hard: {requests.nvidia.com/gpu: 4, pods: "
         "10}\nstatus:\n  hard: {requests.nvidia.com/gpu: 4, pods: 10}\n  used: {}\n",
         GPU_POD("p", 1),
         {"N:pods \"p\" is forbidden: status unknown for quota: q, resources: "
          "pods,requests.nvidia.com/gpu"},
         "{\"count/pods\":\"1\",\"pods\":\"1\",\"requests.nvidia.com/gpu\":\"1\"}", "{}"},
        {"an invalid pod is refused by validation first", Q_GPU,
         "kind: Pod\nmetadata: {name: p}\nspec:\n  containers:\n  - name: c\n    resources: {requests: "
         "{nvidia.com/gpu: 1}}\n",
         {"N:Pod \"p\" is invalid: spec.containers[0].resources.limits: Required value: Limit must be "
          "set for non overcommitable resources"},
         "{}", "{\"requests.nvidia.com/gpu\":\"3\"}"},
        {"device classes: exactly, default count, All, firstAvailable",
         "kind: ResourceQuota\nmetadata: {name: dra}\nspec:\n  hard: "
         "{gpu.deviceclass.resource.k8s.io/devices: 36, mig.deviceclass.resource.k8s.io/devices: 2, "
         "count/resourceclaims.resource.k8s.io: 3}\n",
         CLAIM("two", "    - name: g\n      exactly: {deviceClassName: gpu, count: 2}\n") "---\n"
         CLAIM("all", "    - name: g\n      exactly: {deviceClassName: gpu, allocationMode: All}\n")
         "---\n"
         CLAIM("pick", "    - name: g\n      firstAvailable:\n      - {name: big, deviceClassName: "
                       "gpu, count: 2}\n      - {name: small, deviceClassName: gpu}\n      - {name: "
                       "m, deviceClassName: mig, count: 3}\n")
         "---\n"
         CLAIM("beta", "    - {name: g, deviceClassName: gpu}\n"),
         {"Y", "Y",
          /* gpu: 34 + 2 fits 36 exactly; only mig is named */
          "N:resourceclaims.resource.k8s.io \"pick\" is forbidden: exceeded quota: dra, requested: "
          "mig.deviceclass.resource.k8s.io/devices=3, used: mig.deviceclass.resource.k8s.io/devices=0, "
          "limited: mig.deviceclass.resource.k8s.io/devices=2",
          "Y"},
         "{\"count/resourceclaims.resource.k8s.io\":\"1\",\"gpu.deviceclass.resource.k8s.io/devices\":"
         "\"1\",\"requests.deviceclass.resource.kubernetes.io/gpu\":\"1\"}",
         "{\"count/resourceclaims.resource.k8s.io\":\"3\",\"gpu.deviceclass.resource.k8s.io/devices\":"
         "\"35\",\"mig.deviceclass.resource.k8s.io/devices\":\"0\"}"},
        {"a pod does not charge a device-class quota",
         "kind: ResourceQuota\nmetadata: {name: dra}\nspec:\n  hard: "
         "{gpu.deviceclass.resource.k8s.io/devices: 0}\n",
         GPU_POD("p", 1), {"Y"}, "{\"count/pods\":\"1\",\"pods\":\"1\",\"requests.nvidia.com/gpu\":\"1\"}",
         "{\"gpu.deviceclass.resource.k8s.io/devices\":\"0\"}"},
};

static void test_admit_table(void **state)
{
        (void)state;
        for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
                const struct admit_case *c = &cases[i];
                struct kdev_quota_set *set = kdev_quota_set_new();
                json_t *qs = parse(c->quotas), *objs = parse(c->objects), *warnings = json_array();
                size_t j;
                json_t *o;
                struct kdev_err err = {0};
                json_array_foreach(qs, j, o) assert_int_equal(kdev_quota_set_add(set, o, warnings, &err), 0);
                assert_int_equal(json_array_size(warnings), 0);
                char *usage = NULL;
                json_array_foreach(objs, j, o)
                {
                        json_t *r = kdev_quota_admit(set, o);
                        const char *want = c->verdicts[j];
                        assert_non_null(want);
                        bool allowed = json_is_true(json_object_get(r, "allowed"));
                        const char *msg = json_string_value(json_object_get(r, "message"));
                        if (allowed != (want[0] == 'Y') || (want[0] == 'N' && strcmp(msg, want + 2)))
                                fail_msg("%s, object %zu: allowed %d message '%s'", c->what, j, allowed,
                                         msg);
                        free(usage);
                        usage = dump(json_object_get(r, "usage"));
                        json_decref(r);
                }
                if (strcmp(usage, c->usage_last))
                        fail_msg("%s: usage %s", c->what, usage);
                json_t *sj = kdev_quota_set_json(set);
                char *used = dump(json_object_get(json_array_get(sj, 0), "used"));
                if (strcmp(used, c->used_after))
                        fail_msg("%s: used %s", c->what, used);
                free(used);
                free(usage);
                json_decref(sj);
                json_decref(qs);
                json_decref(objs);
                json_decref(warnings);
                kdev_quota_set_free(set);
        }
}

static void test_quota_validation(void **state)
{
        (void)state;
        static const struct {
                const char *quota, *msg;
                int rc;
        } bad[] = {
                {"kind: ResourceQuota\nmetadata: {name: q}\nspec:\n  hard: {gpu: 1}\n",
                 "ResourceQuota \"q\" is invalid: [spec.hard[gpu]: Invalid value: \"gpu\": must be a "
                 "standard resource type or fully qualified, spec.hard[gpu]: Invalid value: \"gpu\": must "
                 "be a standard resource for quota]",
                 -EINVAL},
                {"kind: ResourceQuota\nmetadata: {name: q}\nspec:\n  hard: {requests.nvidia.com/gpu: -1}\n",
                 "ResourceQuota \"q\" is invalid: spec.hard[requests.nvidia.com/gpu]: Invalid value: "
                 "\"-1\": must be greater than or equal to 0",
                 -EINVAL},
                {"kind: ResourceQuota\nmetadata: {name: q}\nspec:\n  hard: {example.com/fpga: 1.5, pods: "
                 "500m}\n",
                 "ResourceQuota \"q\" is invalid: [spec.hard[example.com/fpga]: Invalid value: \"1500m\": "
                 "must be an integer, spec.hard[pods]: Invalid value: \"500m\": must be an integer]",
                 -EINVAL},
                {"kind: ResourceQuota\nmetadata: {name: q}\nspec:\n  hard: {pods: 1}\n  scopes: "
                 "[BestEffort]\n",
                 "ResourceQuota \"q\": spec.scopes and spec.scopeSelector are not implemented", -ENOTSUP},
                {"kind: ResourceQuota\nspec:\n  hard: {pods: 1}\n", "ResourceQuota without metadata.name",
                 -EINVAL},
                {"kind: Node\nmetadata: {name: n}\n", "Node \"n\" is not a ResourceQuota", -EINVAL},
        };
        for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
                struct kdev_quota_set *set = kdev_quota_set_new();
                json_t *qs = parse(bad[i].quota);
                struct kdev_err err = {0};
                assert_int_equal(kdev_quota_set_add(set, json_array_get(qs, 0), NULL, &err), bad[i].rc);
                assert_string_equal(err.msg, bad[i].msg);
                json_decref(qs);
                kdev_quota_set_free(set);
        }

        /* accepted, but never charged: only requests.<name> counts */
        struct kdev_quota_set *set = kdev_quota_set_new();
        json_t *qs = parse("kind: ResourceQuota\nmetadata: {name: q}\nspec:\n  hard: "
                           "{limits.nvidia.com/gpu: 1, nvidia.com/gpu: 1, requests.nvidia.com/gpu: 8}\n");
        json_t *warnings = json_array();
        assert_int_equal(kdev_quota_set_add(set, json_array_get(qs, 0), warnings, NULL), 0);
        char *s = dump(warnings);
        assert_string_equal(s, "[\"ResourceQuota \\\"q\\\": spec.hard[limits.nvidia.com/gpu] is never "
                               "charged: quota counts extended resources only as "
                               "requests.nvidia.com/gpu\",\"ResourceQuota \\\"q\\\": "
                               "spec.hard[nvidia.com/gpu] is never charged: quota counts extended "
                               "resources only as requests.nvidia.com/gpu\"]");
        free(s);
        json_t *pods = parse(GPU_POD("p", 2));
        json_t *r = kdev_quota_admit(set, json_array_get(pods, 0));
        assert_true(json_is_true(json_object_get(r, "allowed")));
        json_decref(r);
        json_t *sj = kdev_quota_set_json(set);
        s = dump(sj);
        assert_string_equal(s, "[{\"hard\":{\"limits.nvidia.com/gpu\":\"1\",\"nvidia.com/gpu\":\"1\","
                               "\"requests.nvidia.com/gpu\":\"8\"},\"name\":\"q\",\"namespace\":"
                               "\"default\",\"used\":{\"limits.nvidia.com/gpu\":\"0\",\"nvidia.com/gpu\":"
                               "\"0\",\"requests.nvidia.com/gpu\":\"2\"}}]");
        free(s);
        json_decref(sj);
        /* another kind passes untouched */
        json_t *cm = parse("kind: ConfigMap\nmetadata: {name: c}\n");
        r = kdev_quota_admit(set, json_array_get(cm, 0));
        s = dump(r);
        assert_string_equal(s, "{\"allowed\":true,\"kind\":\"ConfigMap\",\"message\":\"kind ConfigMap is "
                               "not counted by kdev's quota check\",\"object\":\"default/c\",\"usage\":{}}");
        free(s);
        json_decref(r);
        json_decref(cm);
        json_decref(pods);
        json_decref(warnings);
        json_decref(qs);
        kdev_quota_set_free(set);
}

int main(void)
{
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_admit_table),
                cmocka_unit_test(test_quota_validation),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
