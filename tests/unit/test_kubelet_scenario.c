/* Scenario file parsing: the documented example and every kind of error. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "kubelet/scenario.h"

static void test_example_file(void **state)
{
        (void)state;
        struct kdev_scenario s;
        struct kdev_err err = {0};
        int rc = kdev_scenario_load(KDEV_SOURCE_DIR "/examples/scenario-reference.yaml", &s, &err);
        if (rc < 0)
                fail_msg("%s", err.msg);
        assert_int_equal(s.n_steps, 10);
        assert_int_equal(s.steps[0].kind, KDEV_SCN_WAIT);
        assert_int_equal(s.steps[0].wait.timeout_ms, 30000);
        assert_int_equal(s.steps[0].wait.n_resources, 1);
        assert_string_equal(s.steps[0].wait.resources[0].resource, "example.com/null");
        assert_int_equal(s.steps[0].wait.resources[0].count, 2);

        const struct kdev_scn_pod *p = &s.steps[1].pod;
        assert_int_equal(s.steps[1].kind, KDEV_SCN_POD);
        assert_string_equal(p->name, "train");
        char uid[40];
        kdev_scenario_default_uid("train", uid, sizeof(uid));
        assert_string_equal(p->uid, uid);
        assert_int_equal(p->n_containers, 3);
        assert_string_equal(p->containers[0].name, "setup");
        assert_true(p->containers[0].init);
        assert_string_equal(p->containers[1].name, "main");
        assert_false(p->containers[1].init);
        assert_int_equal(p->containers[1].n_limits, 1);
        assert_int_equal(p->containers[2].n_limits, 0);

        /* fuse-app: two resources in one container, in the order written */
        const struct kdev_scn_pod *f = &s.steps[2].pod;
        assert_string_equal(f->name, "fuse-app");
        assert_int_equal(f->containers[0].n_limits, 2);
        assert_string_equal(f->containers[0].limits[0].resource, "example.com/fuse");
        assert_int_equal(f->containers[0].limits[0].count, 2);
        assert_string_equal(f->containers[0].limits[1].resource, "example.com/zero");
        assert_int_equal(f->containers[0].limits[1].count, 1);

        assert_int_equal(s.steps[3].pod.containers[0].limits[0].count, 5);
        assert_int_equal(s.steps[4].kind, KDEV_SCN_POD);
        assert_int_equal(s.steps[5].kind, KDEV_SCN_DELETE);
        assert_string_equal(s.steps[5].name, "train");
        assert_int_equal(s.steps[6].kind, KDEV_SCN_RESTART);
        assert_int_equal(s.steps[7].kind, KDEV_SCN_WAIT);
        assert_int_equal(s.steps[8].kind, KDEV_SCN_POD);
        assert_string_equal(s.steps[8].pod.uid, s.steps[4].pod.uid);
        assert_int_equal(s.steps[9].kind, KDEV_SCN_SLEEP);
        assert_int_equal(s.steps[9].sleep_ms, 500);
        kdev_scenario_clear(&s);
}

static void expect_error(const char *text, const char *msg)
{
        struct kdev_scenario s;
        struct kdev_err err = {0};
        assert_int_equal(kdev_scenario_parse(text, strlen(text), "s.yaml", &s, &err), -EINVAL);
        assert_string_equal(err.msg, msg);
        assert_int_equal(s.n_steps, 0);
        assert_null(s.steps);
}

static void test_errors(void **state)
{
        (void)state;
        expect_error("", "s.yaml: empty scenario");
        expect_error("pods: [", "s.yaml:2:1: not YAML: did not find expected node content");
        expect_error("- a", "s.yaml:1:1: expected a mapping, got a list");
        expect_error("pod: []", "s.yaml:1:1: pod: unknown key (expected one of: wait, pods, steps)");
        expect_error("pods: {}", "s.yaml:1:7: pods: expected a list, got a mapping");
        expect_error("pods:\n  - containers: []\n",
                     "s.yaml:2:5: pods[0]: missing key \"name\"");
        expect_error("pods:\n  - name: a\n    containers: []\n",
                     "s.yaml:3:17: pods[0].containers: a pod needs at least one container");
        expect_error("pods:\n  - name: a\n    containers: [{name: c, limits: {example.com/gpu: x}}]\n",
                     "s.yaml:3:54: pods[0].containers[0].limits.example.com/gpu: expected a "
                     "non-negative integer (at most 1000000), got \"x\"");
        expect_error("pods:\n  - name: a\n    containers: [{name: c, limits: {example.com/gpu: -1}}]\n",
                     "s.yaml:3:54: pods[0].containers[0].limits.example.com/gpu: expected a "
                     "non-negative integer (at most 1000000), got \"-1\"");
        expect_error("pods:\n  - name: a\n    containers: [{name: c}, {name: c}]\n",
                     "s.yaml:3:36: pods[0].containers[1].name: container name \"c\" used twice in "
                     "the pod");
        expect_error("pods:\n  - name: a\n    containers: [{name: c, limit: {}}]\n",
                     "s.yaml:3:28: pods[0].containers[0].limit: unknown key (expected one of: name, "
                     "limits)");
        expect_error("pods:\n  - name: a\n    name: b\n    containers: [{name: c}]\n",
                     "s.yaml:3:5: pods[0]: key \"name\" given twice");
        expect_error("wait: {timeout: 5}\n",
                     "s.yaml:1:7: wait: missing key \"resources\" or \"allocatable\"");
        expect_error("wait: {timeout: soon, resources: {a/b: 1}}\n",
                     "s.yaml:1:17: wait.timeout: expected seconds between 0 and 86400, got \"soon\"");
        expect_error("wait: {resources: {}}\n", "s.yaml:1:19: wait.resources: must name at least one "
                                                "resource");
        expect_error("steps:\n  - delete: nobody\n",
                     "s.yaml:2:13: steps[0].delete: no pod \"nobody\" before this step");
        expect_error("steps:\n  - sleep: 1\n    restart: true\n",
                     "s.yaml:2:5: steps[0]: a step has exactly one of wait, pod, delete, restart, "
                     "sleep, exec");
        expect_error("steps:\n  - restart: maybe\n", "s.yaml:2:14: steps[0].restart: expected true");
        expect_error("steps:\n  - jump: 1\n",
                     "s.yaml:2:5: steps[0].jump: unknown key (expected one of: wait, pod, delete, "
                     "restart, sleep, exec)");
}

static void test_wait_allocatable(void **state)
{
        (void)state;
        const char *t = "wait:\n  allocatable: {nvidia.com/gpu: 8}\n"
                        "steps:\n"
                        "  - wait: {timeout: 2.5, resources: {example.com/a: 1, example.com/b: 0},\n"
                        "           allocatable: {nvidia.com/gpu: 7, example.com/c: 0}}\n"
                        "  - wait: {allocatable: {nvidia.com/gpu: 8}, timeout: 0}\n";
        struct kdev_scenario s;
        struct kdev_err err = {0};
        if (kdev_scenario_parse(t, strlen(t), "t", &s, &err) < 0)
                fail_msg("%s", err.msg);
        assert_int_equal(s.n_steps, 3);
        const struct kdev_scn_wait *w = &s.steps[0].wait;
        assert_int_equal(s.steps[0].kind, KDEV_SCN_WAIT);
        assert_int_equal(w->timeout_ms, 30000);
        assert_int_equal(w->n_resources, 0);
        assert_null(w->resources);
        assert_int_equal(w->n_allocatable, 1);
        assert_string_equal(w->allocatable[0].resource, "nvidia.com/gpu");
        assert_int_equal(w->allocatable[0].count, 8);

        w = &s.steps[1].wait;
        assert_int_equal(s.steps[1].kind, KDEV_SCN_WAIT);
        assert_int_equal(s.steps[1].line, 4);
        assert_int_equal(w->timeout_ms, 2500);
        assert_int_equal(w->n_resources, 2);
        assert_string_equal(w->resources[0].resource, "example.com/a");
        assert_int_equal(w->resources[0].count, 1);
        assert_string_equal(w->resources[1].resource, "example.com/b");
        assert_int_equal(w->resources[1].count, 0);
        assert_int_equal(w->n_allocatable, 2);
        assert_string_equal(w->allocatable[0].resource, "nvidia.com/gpu");
        assert_int_equal(w->allocatable[0].count, 7);
        assert_string_equal(w->allocatable[1].resource, "example.com/c");
        assert_int_equal(w->allocatable[1].count, 0);

        w = &s.steps[2].wait;
        assert_int_equal(w->timeout_ms, 0);
        assert_int_equal(w->n_resources, 0);
        assert_int_equal(w->n_allocatable, 1);
        assert_int_equal(w->allocatable[0].count, 8);
        kdev_scenario_clear(&s);

        expect_error("wait: {allocatable: {}}\n",
                     "s.yaml:1:21: wait.allocatable: must name at least one resource");
        expect_error("wait: {allocatable: }\n",
                     "s.yaml:1:21: wait.allocatable: must name at least one resource");
        expect_error("wait: {allocatable: [a]}\n",
                     "s.yaml:1:21: wait.allocatable: expected a mapping, got a list");
        expect_error("wait: {allocatable: {a/b: 7x}}\n",
                     "s.yaml:1:27: wait.allocatable.a/b: expected a non-negative integer (at most "
                     "1000000), got \"7x\"");
        expect_error("wait: {allocatable: {a/b: 1, a/b: 2}}\n",
                     "s.yaml:1:30: wait.allocatable: key \"a/b\" given twice");
        expect_error("wait: {resources: {a/b: 1, c/d: 1}, allocatable: {e/f: 1, c/d: 1}}\n",
                     "s.yaml:1:59: wait.allocatable: \"c/d\" is also under wait.resources (one "
                     "condition per resource)");
        expect_error("wait: {resources: {a/b: 1}, allocatable: {a/b: 1}, alloc: {}}\n",
                     "s.yaml:1:52: wait.alloc: unknown key (expected one of: timeout, resources, "
                     "allocatable)");
        expect_error("steps:\n  - wait: {timeout: 1}\n",
                     "s.yaml:2:11: steps[0].wait: missing key \"resources\" or \"allocatable\"");
        expect_error("steps:\n  - wait: {allocatable: {a/b: -1}}\n",
                     "s.yaml:2:31: steps[0].wait.allocatable.a/b: expected a non-negative integer "
                     "(at most 1000000), got \"-1\"");
}

static void test_exec(void **state)
{
        (void)state;
        const char *t = "steps:\n"
                        "  - exec: \"echo hi >&2; exit 3\"\n"
                        "  - exec: {command: sleep 5, timeout: 10}\n"
                        "  - exec:\n      command: |\n        true\n        false\n"
                        "      timeout: 0.25\n"
                        "  - exec: {timeout: 1, command: \"true\"}\n";
        struct kdev_scenario s;
        struct kdev_err err = {0};
        if (kdev_scenario_parse(t, strlen(t), "t", &s, &err) < 0)
                fail_msg("%s", err.msg);
        assert_int_equal(s.n_steps, 4);
        for (size_t i = 0; i < 4; i++)
                assert_int_equal(s.steps[i].kind, KDEV_SCN_EXEC);
        assert_string_equal(s.steps[0].command, "echo hi >&2; exit 3");
        assert_int_equal(s.steps[0].timeout_ms, 30000);
        assert_int_equal(s.steps[0].line, 2);
        assert_string_equal(s.steps[1].command, "sleep 5");
        assert_int_equal(s.steps[1].timeout_ms, 10000);
        assert_string_equal(s.steps[2].command, "true\nfalse\n");
        assert_int_equal(s.steps[2].timeout_ms, 250);
        assert_int_equal(s.steps[2].line, 4);
        assert_string_equal(s.steps[3].command, "true");
        assert_int_equal(s.steps[3].timeout_ms, 1000);
        kdev_scenario_clear(&s);

        expect_error("steps:\n  - exec:\n",
                     "s.yaml:2:10: steps[0].exec: expected a command or a mapping");
        expect_error("steps:\n  - exec: \"\"\n", "s.yaml:2:11: steps[0].exec: must not be empty");
        expect_error("steps:\n  - exec: [ls]\n",
                     "s.yaml:2:11: steps[0].exec: expected a command or a mapping, got a list");
        expect_error("steps:\n  - exec: {timeout: 3}\n",
                     "s.yaml:2:11: steps[0].exec: missing key \"command\"");
        expect_error("steps:\n  - exec: {command: ls, timout: 3}\n",
                     "s.yaml:2:25: steps[0].exec.timout: unknown key (expected one of: command, "
                     "timeout)");
        expect_error("steps:\n  - exec: {command: ls, command: ls}\n",
                     "s.yaml:2:25: steps[0].exec: key \"command\" given twice");
        expect_error("steps:\n  - exec: {command: }\n",
                     "s.yaml:2:21: steps[0].exec.command: must not be empty");
        expect_error("steps:\n  - exec: {command: \"\"}\n",
                     "s.yaml:2:21: steps[0].exec.command: must not be empty");
        expect_error("steps:\n  - exec: {command: [ls]}\n",
                     "s.yaml:2:21: steps[0].exec.command: expected a scalar, got a list");
        expect_error("steps:\n  - exec: {command: ls, timeout: 0}\n",
                     "s.yaml:2:34: steps[0].exec.timeout: must be greater than 0");
        expect_error("steps:\n  - exec: {command: ls, timeout: -1}\n",
                     "s.yaml:2:34: steps[0].exec.timeout: expected seconds between 0 and 86400, "
                     "got \"-1\"");
        expect_error("steps:\n  - exec: ls\n    sleep: 1\n",
                     "s.yaml:2:5: steps[0]: a step has exactly one of wait, pod, delete, restart, "
                     "sleep, exec");
}

static void test_minimal_and_uid(void **state)
{
        (void)state;
        const char *t = "pods:\n  - name: train\n    uid: my-uid\n    containers:\n"
                        "      - name: main\n        limits: {example.com/null: 1, vendor.com/x: 0}\n"
                        "steps:\n  - restart:\n  - delete: train\n";
        struct kdev_scenario s;
        struct kdev_err err = {0};
        assert_int_equal(kdev_scenario_parse(t, strlen(t), "t", &s, &err), 0);
        assert_int_equal(s.n_steps, 3);
        assert_string_equal(s.steps[0].pod.uid, "my-uid");
        assert_int_equal(s.steps[0].line, 2);
        assert_int_equal(s.steps[0].pod.containers[0].n_limits, 2);
        assert_string_equal(s.steps[0].pod.containers[0].limits[1].resource, "vendor.com/x");
        assert_int_equal(s.steps[0].pod.containers[0].limits[1].count, 0);
        assert_int_equal(s.steps[1].kind, KDEV_SCN_RESTART);
        kdev_scenario_clear(&s);

        char a[40], b[40];
        kdev_scenario_default_uid("train", a, sizeof(a));
        kdev_scenario_default_uid("train2", b, sizeof(b));
        assert_int_equal(strlen(a), 36);
        assert_string_not_equal(a, b);
        assert_int_equal(a[14], '4');
        assert_int_equal(a[19], '8');

        struct kdev_err e2 = {0};
        assert_int_equal(kdev_scenario_load("/nonexistent/s.yaml", &s, &e2), -ENOENT);
        assert_string_equal(e2.msg, "/nonexistent/s.yaml: cannot read: No such file or directory");
}

int main(void)
{
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_example_file),
                cmocka_unit_test(test_errors),
                cmocka_unit_test(test_wait_allocatable),
                cmocka_unit_test(test_exec),
                cmocka_unit_test(test_minimal_and_uid),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
