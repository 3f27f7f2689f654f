/* The device model's names: the natural order of device IDs, and clearing
 * and finding devices by ID. (The resource-name rule is common's:
 * test_common_resource_name.c.) */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "model/model.h"

static void test_natural_order(void **state)
{
        (void)state;
        assert_true(kdev_id_natural_cmp("ttyS2", "ttyS10") < 0);
        assert_true(kdev_id_natural_cmp("ttyS10", "ttyS2") > 0);
        assert_true(kdev_id_natural_cmp("null::2", "null::10") < 0);
        assert_true(kdev_id_natural_cmp("a", "a") == 0);
        assert_true(kdev_id_natural_cmp("a", "a0") < 0);
        assert_true(kdev_id_natural_cmp("a", "b") < 0);
        assert_true(kdev_id_natural_cmp("a9b", "a10a") < 0);
        /* equal value, different leading zeros: still a total order */
        assert_true(kdev_id_natural_cmp("x01", "x1") != 0);
        assert_true((kdev_id_natural_cmp("x01", "x1") < 0) ==
                    (kdev_id_natural_cmp("x1", "x01") > 0));
        assert_true(kdev_id_natural_cmp("x007y", "x7z") < 0);
        assert_true(kdev_id_natural_cmp("99999999999999999999a", "100000000000000000000") < 0);
}

static void test_clear_and_find(void **state)
{
        (void)state;
        struct kdev_resource_set set = {0};
        kdev_resource_set_clear(&set);
        kdev_resource_set_clear(NULL);
        set.resources = calloc(1, sizeof(*set.resources));
        set.n_resources = 1;
        struct kdev_resource *r = &set.resources[0];
        r->name = strdup("example.com/x");
        r->devices = calloc(2, sizeof(*r->devices));
        r->n_devices = 2;
        r->devices[0].id = strdup("a");
        r->devices[1].id = strdup("b");
        r->devices[1].specs = calloc(1, sizeof(*r->devices[1].specs));
        r->devices[1].n_specs = 1;
        r->devices[1].specs[0].container_path = strdup("/dev/b");
        r->devices[1].specs[0].host_path = strdup("/dev/b");
        r->devices[1].specs[0].permissions = strdup("rw");
        assert_ptr_equal(kdev_resource_find(r, "b"), &r->devices[1]);
        assert_ptr_equal(kdev_resource_find(r, "a"), &r->devices[0]);
        assert_null(kdev_resource_find(r, "c"));
        assert_null(kdev_resource_find(NULL, "c"));
        kdev_resource_set_clear(&set);
        assert_null(set.resources);
        assert_int_equal(set.n_resources, 0);
}

int main(void)
{
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_natural_order),
                cmocka_unit_test(test_clear_and_find),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
