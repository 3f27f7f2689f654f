/* Container edits (model/edits.h): each add keeps order and copies, NULL
 * strings become "", env is a map (a key set again keeps its position),
 * clear skips strings a converter took over. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "model/edits.h"

static void test_edits_add_and_clear(void **state)
{
        (void)state;
        struct kdev_container_edits e = {0};
        struct kdev_err err = {0};
        char path[] = "/dev/a";
        assert_int_equal(kdev_edits_add_node(&e, path, "/host/dev/a", "rw", &err), 0);
        path[5] = 'z'; /* copied, not borrowed */
        assert_int_equal(kdev_edits_add_node(&e, "/dev/b", NULL, NULL, &err), 0);
        assert_int_equal(e.n_nodes, 2);
        assert_string_equal(e.nodes[0].path, "/dev/a");
        assert_string_equal(e.nodes[0].host_path, "/host/dev/a");
        assert_string_equal(e.nodes[0].permissions, "rw");
        assert_string_equal(e.nodes[1].host_path, "");
        assert_string_equal(e.nodes[1].permissions, "");

        assert_int_equal(kdev_edits_set_env(&e, "A", "1", &err), 0);
        assert_int_equal(kdev_edits_set_env(&e, "B", "2", &err), 0);
        assert_int_equal(kdev_edits_set_env(&e, "A", "3", &err), 0);
        assert_int_equal(kdev_edits_set_env(&e, "C", NULL, &err), 0);
        assert_int_equal(e.n_env, 3);
        assert_string_equal(e.env[0].key, "A");
        assert_string_equal(e.env[0].value, "3");
        assert_string_equal(e.env[1].key, "B");
        assert_string_equal(e.env[2].key, "C");
        assert_string_equal(e.env[2].value, "");

        const char *opts[] = {"ro", "rbind"};
        assert_int_equal(kdev_edits_add_mount(&e, "/h", "/c", opts, 2, &err), 0);
        assert_int_equal(kdev_edits_add_mount(&e, "/h2", "/c2", NULL, 0, &err), 0);
        assert_int_equal(e.n_mounts, 2);
        assert_int_equal(e.mounts[0].n_options, 2);
        assert_string_equal(e.mounts[0].options[1], "rbind");
        assert_null(e.mounts[1].options);

        assert_int_equal(kdev_edits_add_annotation(&e, "k", "v", &err), 0);
        assert_int_equal(kdev_edits_add_annotation(&e, "k", "w", &err), 0);
        assert_int_equal(e.n_annotations, 2); /* no map: both kept */
        assert_int_equal(kdev_edits_add_cdi_device(&e, "example.com/dev=a", &err), 0);
        assert_string_equal(e.cdi_devices[0], "example.com/dev=a");

        char *args[] = {"hook", "update-ldcache"};
        char *env[] = {"DEBUG=false"};
        struct kdev_edit_hook h = {.hook_name = "createContainer", .path = "/usr/bin/hook",
                                   .args = args, .n_args = 2, .env = env, .n_env = 1};
        assert_int_equal(kdev_edits_add_hook(&e, &h, &err), 0);
        assert_int_equal(e.n_hooks, 1);
        assert_ptr_not_equal(e.hooks[0].args, args);
        assert_string_equal(e.hooks[0].args[1], "update-ldcache");
        assert_string_equal(e.hooks[0].env[0], "DEBUG=false");

        /* a converter took these over */
        free(e.nodes[0].path);
        e.nodes[0].path = NULL;
        free(e.cdi_devices[0]);
        e.cdi_devices[0] = NULL;
        kdev_container_edits_clear(&e);
        assert_null(e.nodes);
        assert_int_equal(e.n_nodes, 0);
        assert_int_equal(e.n_hooks, 0);
        kdev_container_edits_clear(&e);
        kdev_container_edits_clear(NULL);
}

int main(void)
{
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_edits_add_and_clear),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
