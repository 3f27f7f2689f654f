/* The model's hash index of device IDs: kdev_resource_index() and the lookups
 * by ID through it (kdev_resource_find, Allocate, GetPreferredAllocation). */
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
#include "plugin/allocate.h"

/* A resource of |n| healthy devices "<prefix><i>", each with node /dev/d<i>. */
static void make_resource(struct kdev_resource *r, const char *prefix, size_t n)
{
        memset(r, 0, sizeof(*r));
        r->name = strdup("example.com/dev");
        r->devices = calloc(n ? n : 1, sizeof(*r->devices));
        r->n_devices = n;
        for (size_t i = 0; i < n; i++) {
                struct kdev_device *d = &r->devices[i];
                char buf[64];
                snprintf(buf, sizeof(buf), "%s%zu", prefix, i);
                d->id = strdup(buf);
                d->healthy = true;
                d->numa_node = -1;
                d->specs = calloc(1, sizeof(*d->specs));
                d->n_specs = 1;
                snprintf(buf, sizeof(buf), "/dev/d%zu", i);
                d->specs[0].container_path = strdup(buf);
                d->specs[0].host_path = strdup(buf);
                d->specs[0].permissions = strdup("rw");
        }
}

static void test_index_finds_every_id(void **state)
{
        (void)state;
        struct kdev_resource r;
        make_resource(&r, "GPU-5b4c2b60-7f8e-4a9d-ceab-4f5061728394::", 20000);
        assert_null(r.index);
        assert_int_equal(kdev_resource_index(&r), 0);
        assert_non_null(r.index);
        char id[96];
        for (size_t i = 0; i < r.n_devices; i++) {
                snprintf(id, sizeof(id), "GPU-5b4c2b60-7f8e-4a9d-ceab-4f5061728394::%zu", i);
                assert_ptr_equal(kdev_resource_find(&r, id), &r.devices[i]);
        }
        assert_null(kdev_resource_find(&r, "GPU-5b4c2b60-7f8e-4a9d-ceab-4f5061728394::20000"));
        assert_null(kdev_resource_find(&r, "GPU-5b4c2b60-7f8e-4a9d-ceab-4f5061728394::"));
        assert_null(kdev_resource_find(&r, ""));
        assert_null(kdev_resource_find(&r, NULL));
        assert_null(kdev_resource_find(NULL, "x"));
        kdev_resource_clear(&r);
        assert_null(r.index);
}

/* Repeated IDs: the first device, indexed or not; NULL IDs are never found. */
static void test_index_repeats_and_null_ids(void **state)
{
        (void)state;
        struct kdev_resource r;
        make_resource(&r, "d", 40);
        free(r.devices[7].id);
        r.devices[7].id = strdup("d3");
        free(r.devices[9].id);
        r.devices[9].id = NULL;
        for (int round = 0; round < 2; round++) {
                assert_ptr_equal(kdev_resource_find(&r, "d3"), &r.devices[3]);
                assert_null(kdev_resource_find(&r, "d7"));
                assert_null(kdev_resource_find(&r, "d9"));
                assert_ptr_equal(kdev_resource_find(&r, "d39"), &r.devices[39]);
                assert_int_equal(kdev_resource_index(&r), 0);
        }
        kdev_resource_clear(&r);
}

/* A device array set after the index was built is searched, not the index;
 * indexing it again covers the new array. */
static void test_index_follows_new_devices(void **state)
{
        (void)state;
        struct kdev_resource r, other;
        make_resource(&r, "a", 100);
        make_resource(&other, "b", 300);
        assert_int_equal(kdev_resource_index(&r), 0);
        struct kdev_device *old = r.devices;
        size_t n_old = r.n_devices;
        r.devices = other.devices;
        r.n_devices = other.n_devices;
        other.devices = old;
        other.n_devices = n_old;
        assert_null(kdev_resource_find(&r, "a5"));
        assert_ptr_equal(kdev_resource_find(&r, "b299"), &r.devices[299]);
        assert_int_equal(kdev_resource_index(&r), 0);
        assert_null(kdev_resource_find(&r, "a5"));
        assert_ptr_equal(kdev_resource_find(&r, "b299"), &r.devices[299]);
        assert_ptr_equal(kdev_resource_find(&r, "b0"), &r.devices[0]);
        kdev_resource_clear(&r);
        kdev_resource_clear(&other);
}

static void test_set_index(void **state)
{
        (void)state;
        struct kdev_resource_set set = {.resources = calloc(2, sizeof(struct kdev_resource)),
                                        .n_resources = 2};
        make_resource(&set.resources[0], "x", 5);
        make_resource(&set.resources[1], "y", 0);
        assert_int_equal(kdev_resource_set_index(&set), 0);
        assert_non_null(set.resources[0].index);
        assert_non_null(set.resources[1].index);
        assert_ptr_equal(kdev_resource_find(&set.resources[0], "x4"), &set.resources[0].devices[4]);
        assert_null(kdev_resource_find(&set.resources[1], "x4"));
        assert_int_equal(kdev_resource_set_index(NULL), 0);
        kdev_resource_set_clear(&set);
}

/* Allocate and GetPreferredAllocation on an indexed resource of 16384
 * devices: the same answers and errors as the linear search gives. */
static void test_index_allocate_preferred(void **state)
{
        (void)state;
        struct kdev_resource r;
        make_resource(&r, "null::", 16384);
        for (int indexed = 0; indexed < 2; indexed++) {
                if (indexed)
                        assert_int_equal(kdev_resource_index(&r), 0);
                struct kdev_err err = {0};
                const char *ids[] = {"null::16383", "null::0", "null::8191"};
                V1beta1__ContainerAllocateResponse out = V1BETA1__CONTAINER_ALLOCATE_RESPONSE__INIT;
                assert_int_equal(kdev_plugin_allocate(&r, ids, 3, &out, &err), 0);
                assert_int_equal(out.n_devices, 3);
                assert_string_equal(out.devices[0]->host_path, "/dev/d16383");
                assert_string_equal(out.devices[1]->host_path, "/dev/d0");
                assert_string_equal(out.devices[2]->host_path, "/dev/d8191");
                kdev_allocate_response_free_contents(&out);

                const char *bad[] = {"null::1", "null::16384"};
                assert_int_equal(kdev_plugin_allocate(&r, bad, 2, &out, &err), -EINVAL);
                assert_string_equal(err.msg,
                                    "unknown device \"null::16384\" for resource example.com/dev");
                const char *dup[] = {"null::5", "null::9", "null::5"};
                assert_int_equal(kdev_plugin_allocate(&r, dup, 3, &out, &err), -EINVAL);
                assert_string_equal(err.msg, "device \"null::5\" of resource example.com/dev is "
                                             "requested more than once");

                char **pref = NULL;
                size_t n_pref = 0;
                const char *avail[] = {"null::12", "null::16000", "null::3"};
                const char *must[] = {"null::16000"};
                assert_int_equal(kdev_resource_preferred(&r, avail, 3, must, 1, 2, &pref, &n_pref,
                                                         &err),
                                 0);
                assert_int_equal(n_pref, 2);
                assert_string_equal(pref[0], "null::16000");
                assert_string_equal(pref[1], "null::3");
                kdev_strv_free(pref, n_pref);
                const char *avail_bad[] = {"null::12", "nul::3"};
                assert_int_equal(kdev_resource_preferred(&r, avail_bad, 2, NULL, 0, 1, &pref,
                                                         &n_pref, &err),
                                 -EINVAL);
                assert_string_equal(err.msg, "unknown device \"nul::3\" for resource "
                                             "example.com/dev in the available devices");
        }
        kdev_resource_clear(&r);
}

static void set_spec(struct kdev_device *d, const char *ctr, const char *host, const char *perms)
{
        free(d->specs[0].container_path);
        free(d->specs[0].host_path);
        free(d->specs[0].permissions);
        d->specs[0].container_path = strdup(ctr);
        d->specs[0].host_path = strdup(host);
        d->specs[0].permissions = perms ? strdup(perms) : NULL;
}

/* The per-request checks: the first repeat in request order is named; of two
 * container paths with different host paths, the one that sorts first;
 * permissions of one container path merge into its first DeviceSpec. */
static void test_request_checks(void **state)
{
        (void)state;
        struct kdev_resource r;
        make_resource(&r, "d", 8);
        assert_int_equal(kdev_resource_index(&r), 0);
        struct kdev_err err = {0};
        V1beta1__ContainerAllocateResponse out = V1BETA1__CONTAINER_ALLOCATE_RESPONSE__INIT;
        const char *rep1[] = {"d1", "d2", "d2", "d1"};
        assert_int_equal(kdev_plugin_allocate(&r, rep1, 4, &out, &err), -EINVAL);
        assert_string_equal(err.msg,
                            "device \"d2\" of resource example.com/dev is requested more than once");
        const char *rep2[] = {"d1", "d2", "d1", "d2"};
        assert_int_equal(kdev_plugin_allocate(&r, rep2, 4, &out, &err), -EINVAL);
        assert_string_equal(err.msg,
                            "device \"d1\" of resource example.com/dev is requested more than once");

        set_spec(&r.devices[0], "/dev/z", "/dev/z1", "rw");
        set_spec(&r.devices[1], "/dev/z", "/dev/z2", "rw");
        set_spec(&r.devices[2], "/dev/a", "/dev/a1", "rw");
        set_spec(&r.devices[3], "/dev/a", "/dev/a2", "rw");
        set_spec(&r.devices[4], "/dev/m", "/dev/m", "r");
        set_spec(&r.devices[5], "/dev/m", "/dev/m", "m");
        set_spec(&r.devices[6], "/dev/m", "/dev/m", NULL);
        const char *clash[] = {"d0", "d1", "d2", "d3"};
        assert_int_equal(kdev_plugin_allocate(&r, clash, 4, &out, &err), -EINVAL);
        assert_string_equal(err.msg, "devices \"d2\" and \"d3\" of resource example.com/dev "
                                     "both use container path \"/dev/a\" for different host "
                                     "paths \"/dev/a1\" and \"/dev/a2\"");
        assert_int_equal(out.n_devices, 0);
        const char *merge[] = {"d7", "d4", "d0", "d5", "d6"};
        assert_int_equal(kdev_plugin_allocate(&r, merge, 5, &out, &err), 0);
        assert_int_equal(out.n_devices, 3);
        assert_string_equal(out.devices[0]->container_path, "/dev/d7");
        assert_string_equal(out.devices[1]->container_path, "/dev/m");
        assert_string_equal(out.devices[1]->permissions, "rwm");
        assert_string_equal(out.devices[2]->container_path, "/dev/z");
        kdev_allocate_response_free_contents(&out);
        kdev_resource_clear(&r);
}

int main(void)
{
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_index_finds_every_id),
                cmocka_unit_test(test_index_repeats_and_null_ids),
                cmocka_unit_test(test_index_follows_new_devices),
                cmocka_unit_test(test_set_index),
                cmocka_unit_test(test_index_allocate_preferred),
                cmocka_unit_test(test_request_checks),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
