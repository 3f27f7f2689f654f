/* Container edits (model/edits.h): each add keeps order and copies, NULL
 * strings become "", env is a map (a key set again keeps its position),
 * clear skips strings a converter took over. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "model/edits.h"
#include "edits_pool.h"

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

/* Edits with an allocator hold what edits without one hold (the same adds:
 * more nodes than any growth step, an env set again, a mount with options, a
 * hook), every array and string from the allocator; clearing frees nothing
 * (ASan would report a free of the pool) and keeps the allocator; scratch
 * memory comes from the allocator too. */
static void test_edits_with_allocator(void **state)
{
        (void)state;
        static struct pool pool = {.left = -1};
        const struct kdev_edits_allocator alloc = {pool_alloc, &pool};
        struct kdev_container_edits e = {.allocator = &alloc}, m = {0};
        struct kdev_err err = {0};
        struct kdev_container_edits *both[2] = {&e, &m};
        const char *opts[] = {"ro", "rbind"};
        char *args[] = {"hook", "update-ldcache"};
        char *env[] = {"DEBUG=false"};
        struct kdev_edit_hook h = {.hook_name = "createContainer", .path = "/usr/bin/hook",
                                   .args = args, .n_args = 2, .env = env, .n_env = 1};
        for (int k = 0; k < 2; k++) {
                struct kdev_container_edits *x = both[k];
                for (unsigned i = 0; i < 21; i++) {
                        char p[32];
                        snprintf(p, sizeof(p), "/dev/nvidia%u", i);
                        assert_int_equal(kdev_edits_add_node(x, p, i == 3 ? NULL : p,
                                                             i % 2 ? "rw" : "rwm", &err),
                                         0);
                }
                for (unsigned i = 0; i < 9; i++) {
                        char key[16];
                        snprintf(key, sizeof(key), "K%u", i);
                        assert_int_equal(kdev_edits_set_env(x, key, key, &err), 0);
                }
                assert_int_equal(kdev_edits_set_env(x, "K4", "again", &err), 0);
                assert_int_equal(kdev_edits_add_mount(x, "/h", "/c", opts, 2, &err), 0);
                assert_int_equal(kdev_edits_add_annotation(x, "k", "v", &err), 0);
                assert_int_equal(kdev_edits_add_cdi_device(x, "example.com/dev=a", &err), 0);
                assert_int_equal(kdev_edits_add_hook(x, &h, &err), 0);
        }
        assert_int_equal(e.n_nodes, 21);
        for (size_t i = 0; i < e.n_nodes; i++) {
                assert_string_equal(e.nodes[i].path, m.nodes[i].path);
                assert_string_equal(e.nodes[i].host_path, m.nodes[i].host_path);
                assert_string_equal(e.nodes[i].permissions, m.nodes[i].permissions);
                assert_true(in_pool(&pool, e.nodes[i].path));
                assert_true(in_pool(&pool, e.nodes[i].host_path));
                assert_true(in_pool(&pool, e.nodes[i].permissions));
        }
        assert_string_equal(e.nodes[3].host_path, "");
        assert_true(in_pool(&pool, e.nodes));
        assert_int_equal(e.n_env, 9);
        for (size_t i = 0; i < e.n_env; i++) {
                assert_string_equal(e.env[i].key, m.env[i].key);
                assert_string_equal(e.env[i].value, m.env[i].value);
                assert_true(in_pool(&pool, e.env[i].value));
        }
        assert_string_equal(e.env[4].value, "again");
        assert_int_equal(e.n_mounts, 1);
        assert_string_equal(e.mounts[0].options[1], "rbind");
        assert_true(in_pool(&pool, e.mounts[0].options));
        assert_string_equal(e.annotations[0].value, "v");
        assert_string_equal(e.cdi_devices[0], "example.com/dev=a");
        assert_string_equal(e.hooks[0].args[1], "update-ldcache");
        assert_string_equal(e.hooks[0].env[0], "DEBUG=false");
        assert_true(in_pool(&pool, e.hooks[0].env[0]));

        void *s = kdev_edits_scratch(&e, 100);
        assert_true(in_pool(&pool, s));
        kdev_edits_scratch_free(&e, s); /* nothing: the pool's */
        void *ms = kdev_edits_scratch(&m, 100);
        assert_non_null(ms);
        assert_false(in_pool(&pool, ms));
        kdev_edits_scratch_free(&m, ms); /* freed (the leak check would see it) */

        kdev_container_edits_clear(&e);
        assert_int_equal(e.n_nodes, 0);
        assert_null(e.nodes);
        assert_int_equal(e.n_hooks, 0);
        assert_ptr_equal(e.allocator, &alloc); /* kept: the edits can be filled again */
        assert_int_equal(kdev_edits_add_node(&e, "/dev/a", "/dev/a", "rw", &err), 0);
        assert_true(in_pool(&pool, e.nodes[0].path));
        kdev_container_edits_clear(&e);
        kdev_container_edits_clear(&m);

        /* the allocator out of memory: -ENOMEM, nothing added */
        pool.left = 0;
        assert_int_equal(kdev_edits_add_node(&e, "/dev/a", "/dev/a", "rw", &err), -ENOMEM);
        assert_string_equal(err.msg, "out of memory");
        assert_int_equal(e.n_nodes, 0);
        assert_int_equal(kdev_edits_set_env(&e, "A", "1", &err), -ENOMEM);
        assert_int_equal(e.n_env, 0);
        assert_null(kdev_edits_scratch(&e, 8));
        pool.left = 1; /* the array, not the strings */
        assert_int_equal(kdev_edits_add_node(&e, "/dev/a", "/dev/a", "rw", &err), -ENOMEM);
        assert_int_equal(e.n_nodes, 0);
        pool.left = -1;
}

int main(void)
{
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_edits_add_and_clear),
                cmocka_unit_test(test_edits_with_allocator),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
