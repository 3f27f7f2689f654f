/* kdev_plugin_allocate_response: container edits -> v1beta1
 * ContainerAllocateResponse, field by field, in order, strings taken over. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "plugin/allocate.h"

static void test_response_from_edits(void **state)
{
        (void)state;
        struct kdev_container_edits e = {0};
        struct kdev_err err = {0};
        const char *opts[] = {"ro"};
        char *args[] = {"hook"};
        struct kdev_edit_hook h = {.hook_name = "createContainer", .path = "/bin/hook",
                                   .args = args, .n_args = 1};
        assert_int_equal(kdev_edits_add_node(&e, "/dev/a", "/root/dev/a", "rw", &err), 0);
        assert_int_equal(kdev_edits_add_node(&e, "/dev/b", "/dev/b", "rwm", &err), 0);
        assert_int_equal(kdev_edits_set_env(&e, "K1", "v1", &err), 0);
        assert_int_equal(kdev_edits_set_env(&e, "K2", "v2", &err), 0);
        assert_int_equal(kdev_edits_add_mount(&e, "/dev/null", "/var/run/x/a", opts, 1, &err),
                         0);
        assert_int_equal(kdev_edits_add_annotation(&e, "cdi.k8s.io/x", "a=b", &err), 0);
        assert_int_equal(kdev_edits_add_cdi_device(&e, "example.com/dev=a", &err), 0);
        assert_int_equal(kdev_edits_add_hook(&e, &h, &err), 0);
        const char *node_path = e.nodes[0].path;

        V1beta1__ContainerAllocateResponse out = V1BETA1__CONTAINER_ALLOCATE_RESPONSE__INIT;
        assert_int_equal(kdev_plugin_allocate_response(&e, &out, &err), 0);
        assert_int_equal(out.n_devices, 2);
        assert_ptr_equal(out.devices[0]->container_path, node_path); /* taken, not copied */
        assert_string_equal(out.devices[0]->host_path, "/root/dev/a");
        assert_string_equal(out.devices[0]->permissions, "rw");
        assert_string_equal(out.devices[1]->container_path, "/dev/b");
        assert_string_equal(out.devices[1]->permissions, "rwm");
        assert_int_equal(out.n_envs, 2);
        assert_string_equal(out.envs[0]->key, "K1");
        assert_string_equal(out.envs[1]->value, "v2");
        assert_int_equal(out.n_mounts, 1);
        assert_string_equal(out.mounts[0]->host_path, "/dev/null");
        assert_string_equal(out.mounts[0]->container_path, "/var/run/x/a");
        assert_int_equal(out.n_annotations, 1);
        assert_string_equal(out.annotations[0]->key, "cdi.k8s.io/x");
        assert_string_equal(out.annotations[0]->value, "a=b");
        assert_int_equal(out.n_cdi_devices, 1);
        assert_string_equal(out.cdi_devices[0]->name, "example.com/dev=a");
        /* what v1beta1 cannot carry stays in the edits */
        assert_null(e.nodes[0].path);
        assert_int_equal(e.n_hooks, 1);
        assert_string_equal(e.hooks[0].path, "/bin/hook");
        assert_string_equal(e.mounts[0].options[0], "ro");

        /* a second set of edits is appended after the first */
        struct kdev_container_edits e2 = {0};
        assert_int_equal(kdev_edits_add_node(&e2, "/dev/c", "/dev/c", "r", &err), 0);
        assert_int_equal(kdev_plugin_allocate_response(&e2, &out, &err), 0);
        assert_int_equal(out.n_devices, 3);
        assert_string_equal(out.devices[2]->container_path, "/dev/c");
        assert_int_equal(out.n_envs, 2);

        kdev_container_edits_clear(&e);
        kdev_container_edits_clear(&e2);
        kdev_allocate_response_free_contents(&out);
        assert_int_equal(out.n_devices, 0);
        assert_null(out.devices);
}

static void test_allocate_generic(void **state)
{
        (void)state;
        struct kdev_device_spec specs[] = {{"/dev/fuse", "/dev/fuse", "rw"}};
        struct kdev_device devs[] = {{.id = "fuse", .healthy = true, .numa_node = -1,
                                      .specs = specs, .n_specs = 1}};
        struct kdev_resource r = {.name = "example.com/fuse", .devices = devs, .n_devices = 1};
        struct kdev_err err = {0};
        V1beta1__ContainerAllocateResponse out = V1BETA1__CONTAINER_ALLOCATE_RESPONSE__INIT;
        const char *ids[] = {"fuse"};
        assert_int_equal(kdev_plugin_allocate(&r, ids, 1, &out, &err), 0);
        assert_int_equal(out.n_devices, 1);
        assert_string_equal(out.devices[0]->container_path, "/dev/fuse");
        assert_string_equal(out.devices[0]->permissions, "rw");
        assert_int_equal(out.n_envs + out.n_mounts + out.n_annotations + out.n_cdi_devices, 0);
        /* a response that already has devices is refused, unchanged */
        assert_int_equal(kdev_plugin_allocate(&r, ids, 1, &out, &err), -EINVAL);
        assert_string_equal(err.msg, "kdev_plugin_allocate: response already has devices");
        assert_int_equal(out.n_devices, 1);
        kdev_allocate_response_free_contents(&out);
        const char *bad[] = {"nope"};
        assert_int_equal(kdev_plugin_allocate(&r, bad, 1, &out, &err), -EINVAL);
        assert_string_equal(err.msg, "unknown device \"nope\" for resource example.com/fuse");
        assert_null(out.devices);
}

int main(void)
{
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_response_from_edits),
                cmocka_unit_test(test_allocate_generic),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
