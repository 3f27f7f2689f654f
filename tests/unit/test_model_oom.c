/* Allocation failures in the device model: every allocation that
 * kdev_plugin_allocate (the model's container edits and their v1beta1
 * form) and kdev_resource_preferred make, failed one at a time (and from there on), returns -ENOMEM with the error set, leaves the
 * output empty and leaks nothing. Resources are built by the backends (the
 * model has no constructor); the operations that allocate nothing are shown
 * to allocate nothing. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "common/resource_name.h"
#include "model/model.h"
#include "oom_driver.h"
#include "plugin/allocate.h"

/* A resource of |n| devices "dev::<i>" on NUMA node i % 2, each with the
 * device nodes /dev/d<i> and, shared by all, /dev/ctl (built with failures
 * off). */
static void make_resource(struct kdev_resource *r, size_t n)
{
        failalloc_off();
        memset(r, 0, sizeof(*r));
        r->name = strdup("example.com/dev");
        r->devices = calloc(n, sizeof(*r->devices));
        assert_non_null(r->name);
        assert_non_null(r->devices);
        r->n_devices = n;
        for (size_t i = 0; i < n; i++) {
                struct kdev_device *d = &r->devices[i];
                char buf[64];
                snprintf(buf, sizeof(buf), "dev::%zu", i);
                d->id = strdup(buf);
                d->healthy = true;
                d->numa_node = (int)(i % 2);
                d->specs = calloc(2, sizeof(*d->specs));
                assert_non_null(d->id);
                assert_non_null(d->specs);
                d->n_specs = 2;
                snprintf(buf, sizeof(buf), "/dev/d%zu", i);
                d->specs[0].container_path = strdup(buf);
                d->specs[0].host_path = strdup(buf);
                d->specs[0].permissions = strdup("rw");
                d->specs[1].container_path = strdup("/dev/ctl");
                d->specs[1].host_path = strdup("/dev/ctl");
                d->specs[1].permissions = strdup(i % 2 ? "m" : "r");
        }
}

/* IDs "dev::<first>", "dev::<first + step>", ... (|n| of them). */
static char **make_ids(size_t first, size_t step, size_t n)
{
        char **v = calloc(n, sizeof(*v));
        assert_non_null(v);
        for (size_t i = 0; i < n; i++) {
                char buf[32];
                snprintf(buf, sizeof(buf), "dev::%zu", first + i * step);
                v[i] = strdup(buf);
                assert_non_null(v[i]);
        }
        return v;
}

static bool response_empty(const V1beta1__ContainerAllocateResponse *resp)
{
        return resp->n_devices == 0 && !resp->devices && resp->n_envs == 0 && !resp->envs &&
               resp->n_mounts == 0 && !resp->mounts && resp->n_annotations == 0 &&
               !resp->annotations && resp->n_cdi_devices == 0 && !resp->cdi_devices;
}

/* --- Allocate ------------------------------------------------------------ */

struct alloc_ctx {
        struct kdev_resource r;
        char **ids;
        size_t n_ids;
        V1beta1__ContainerAllocateResponse resp;
};

static int alloc_call(void *p, struct kdev_err *err)
{
        struct alloc_ctx *c = p;
        V1beta1__ContainerAllocateResponse init = V1BETA1__CONTAINER_ALLOCATE_RESPONSE__INIT;
        c->resp = init;
        return kdev_plugin_allocate(&c->r, (const char *const *)c->ids, c->n_ids, &c->resp,
                                      err);
}

static void alloc_check_failed(void *p)
{
        struct alloc_ctx *c = p;
        assert_true(response_empty(&c->resp));
}

/* The answer lists, in request order: d<first>, /dev/ctl (with the union of
 * the permissions: "r" from even devices, "m" from odd ones), d<second>, ... */
static void alloc_check_order(void *p)
{
        struct alloc_ctx *c = p;
        assert_int_equal(c->resp.n_devices, c->n_ids + 1);
        char want[32];
        snprintf(want, sizeof(want), "/dev/d%s", c->ids[0] + strlen("dev::"));
        assert_string_equal(c->resp.devices[0]->container_path, want);
        assert_string_equal(c->resp.devices[1]->container_path, "/dev/ctl");
        unsigned perms = 0; /* 1: an even device ("r"), 2: an odd one ("m") */
        for (size_t i = 0; i < c->n_ids; i++)
                perms |= atoi(c->ids[i] + strlen("dev::")) % 2 ? 2 : 1;
        assert_string_equal(c->resp.devices[1]->permissions,
                            perms == 3 ? "rm" : perms == 2 ? "m" : "r");
        for (size_t i = 1; i < c->n_ids; i++) {
                snprintf(want, sizeof(want), "/dev/d%s", c->ids[i] + strlen("dev::"));
                assert_string_equal(c->resp.devices[i + 1]->container_path, want);
                assert_string_equal(c->resp.devices[i + 1]->permissions, "rw");
        }
        kdev_allocate_response_free_contents(&c->resp);
}

static void alloc_ctx_free(struct alloc_ctx *c)
{
        failalloc_off();
        kdev_strv_free(c->ids, c->n_ids);
        kdev_resource_clear(&c->r);
}

/* A small request: the linear lookup. 1 devs array, 1 repeat check, 1 spec
 * table, 1 DeviceSpec array, 4 allocations per kept node (3 + 1 = 4 nodes). */
static void test_allocate_small(void **state)
{
        (void)state;
        struct alloc_ctx c = { 0 };
        make_resource(&c.r, 8);
        c.ids = make_ids(2, 1, 3); /* dev::2 dev::3 dev::4 */
        c.n_ids = 3;
        struct oom_op op = { "allocate 3 of 8", alloc_call, alloc_check_order, alloc_check_failed,
                             &c, 0 };
        unsigned long n = oom_drive(&op, 4 + 4 * 4);
        (void)n;
        alloc_ctx_free(&c);
}

/* A request large enough for the lookup index (64 IDs of 128 devices). */
static void test_allocate_large(void **state)
{
        (void)state;
        struct alloc_ctx c = { 0 };
        make_resource(&c.r, 128);
        c.ids = make_ids(1, 2, 64); /* odd devices: /dev/ctl "m" ... */
        c.n_ids = 64;
        struct oom_op op = { "allocate 64 of 128", alloc_call, alloc_check_order,
                             alloc_check_failed, &c, 0 };
        oom_drive(&op, 4 + 65 * 4);
        alloc_ctx_free(&c);
}

/* A backend hook that adds two envs the way backends do (kdev_edits_set_env)
 * and fails with -ENOMEM: the model must clear what the hook left in the
 * edits. */
static int hook_add_env(struct kdev_container_edits *out, const char *k, const char *v)
{
        return kdev_edits_set_env(out, k, v, NULL);
}

static int hook_allocate(void *data, const struct kdev_resource *r,
                         const struct kdev_device *const *devs, size_t n,
                         struct kdev_container_edits *out, struct kdev_err *err)
{
        (void)data;
        (void)r;
        int rc = hook_add_env(out, "DEV_FIRST", devs[0]->id);
        if (rc == 0)
                rc = hook_add_env(out, "DEV_LAST", devs[n - 1]->id);
        return rc < 0 ? kdev_err_set(err, ENOMEM, "hook: out of memory") : 0;
}

static const struct kdev_resource_ops hook_ops = { .allocate = hook_allocate };

static void alloc_hook_check_ok(void *p)
{
        struct alloc_ctx *c = p;
        assert_int_equal(c->resp.n_envs, 2);
        assert_string_equal(c->resp.envs[0]->key, "DEV_FIRST");
        assert_string_equal(c->resp.envs[0]->value, "dev::2");
        assert_string_equal(c->resp.envs[1]->key, "DEV_LAST");
        assert_string_equal(c->resp.envs[1]->value, "dev::4");
        alloc_check_order(p);
}

static void test_allocate_hook(void **state)
{
        (void)state;
        struct alloc_ctx c = { 0 };
        make_resource(&c.r, 8);
        c.r.ops = &hook_ops;
        c.ids = make_ids(2, 1, 3);
        c.n_ids = 3;
        struct oom_op op = { "allocate with backend hook", alloc_call, alloc_hook_check_ok,
                             alloc_check_failed, &c, 0 };
        oom_drive(&op, 4 + 4 * 4 + 2 * 4);
        alloc_ctx_free(&c);
}

/* --- GetPreferredAllocation --------------------------------------------- */

struct pref_ctx {
        struct kdev_resource r;
        char **avail, **must;
        size_t n_avail, n_must;
        int size;
        char **out;
        size_t n_out;
        const char *const *want; /* expected answer, size IDs */
};

static int pref_call(void *p, struct kdev_err *err)
{
        struct pref_ctx *c = p;
        c->out = (char **)(uintptr_t)1; /* must be reset on every return */
        c->n_out = 99;
        return kdev_resource_preferred(&c->r, (const char *const *)c->avail, c->n_avail,
                                       (const char *const *)c->must, c->n_must, c->size, &c->out,
                                       &c->n_out, err);
}

static void pref_check_ok(void *p)
{
        struct pref_ctx *c = p;
        assert_int_equal(c->n_out, (size_t)c->size);
        for (size_t i = 0; i < c->n_out; i++)
                assert_string_equal(c->out[i], c->want[i]);
        kdev_strv_free(c->out, c->n_out);
        c->out = NULL;
}

static void pref_check_failed(void *p)
{
        struct pref_ctx *c = p;
        assert_null(c->out);
        assert_int_equal(c->n_out, 0);
}

static void pref_ctx_free(struct pref_ctx *c)
{
        failalloc_off();
        kdev_strv_free(c->avail, c->n_avail);
        kdev_strv_free(c->must, c->n_must);
        kdev_resource_clear(&c->r);
}

/* Generic NUMA ranking: must dev::3 (node 1), then node 1 first. */
static void test_preferred_numa(void **state)
{
        (void)state;
        static const char *const want[] = { "dev::3", "dev::1", "dev::5" };
        struct pref_ctx c = { .size = 3, .want = want };
        make_resource(&c.r, 8);
        c.avail = make_ids(0, 1, 8);
        c.n_avail = 8;
        c.must = make_ids(3, 1, 1);
        c.n_must = 1;
        struct oom_op op = { "preferred 3 of 8 (NUMA)", pref_call, pref_check_ok,
                             pref_check_failed, &c, 0 };
        oom_drive(&op, 6 + 3);
        pref_ctx_free(&c);
}

/* Many IDs: the lookup index. */
static void test_preferred_large(void **state)
{
        (void)state;
        static const char *const want[] = { "dev::0", "dev::2", "dev::4", "dev::6" };
        struct pref_ctx c = { .size = 4, .want = want };
        make_resource(&c.r, 128);
        c.avail = make_ids(0, 1, 128);
        c.n_avail = 128;
        struct oom_op op = { "preferred 4 of 128", pref_call, pref_check_ok, pref_check_failed,
                             &c, 0 };
        oom_drive(&op, 7 + 4);
        pref_ctx_free(&c);
}

/* A backend's preferred hook: the last |size| available devices. */
static int hook_preferred(void *data, const struct kdev_resource *r,
                          const struct kdev_device *const *avail, size_t n_avail,
                          const struct kdev_device *const *must, size_t n_must, size_t size,
                          const struct kdev_device **out, struct kdev_err *err)
{
        (void)data;
        (void)r;
        (void)must;
        (void)n_must;
        (void)err;
        for (size_t i = 0; i < size; i++)
                out[i] = avail[n_avail - size + i];
        return 0;
}

static const struct kdev_resource_ops pref_hook_ops = { .preferred = hook_preferred };

static void test_preferred_hook(void **state)
{
        (void)state;
        static const char *const want[] = { "dev::6", "dev::7" };
        struct pref_ctx c = { .size = 2, .want = want };
        make_resource(&c.r, 8);
        c.r.ops = &pref_hook_ops;
        c.avail = make_ids(0, 1, 8);
        c.n_avail = 8;
        struct oom_op op = { "preferred with backend hook", pref_call, pref_check_ok,
                             pref_check_failed, &c, 0 };
        oom_drive(&op, 5 + 2);
        pref_ctx_free(&c);
}

/* --- operations that allocate nothing ------------------------------------- */

static void test_no_allocation(void **state)
{
        (void)state;
        struct kdev_resource r;
        make_resource(&r, 8);
        struct kdev_err err = { 0 };
        failalloc_fail_from(1);
        const struct kdev_device *d = kdev_resource_find(&r, "dev::5");
        const struct kdev_device *none = kdev_resource_find(&r, "dev::50");
        int name_ok = kdev_resource_name_check("example.com/dev", &err);
        int name_bad = kdev_resource_name_check("kubernetes.io/dev", &err);
        int cmp = kdev_id_natural_cmp("dev::2", "dev::10");
        V1beta1__ContainerAllocateResponse empty = V1BETA1__CONTAINER_ALLOCATE_RESPONSE__INIT;
        kdev_allocate_response_free_contents(&empty);
        kdev_strv_free(NULL, 0);
        kdev_resource_clear(&r);
        kdev_resource_clear(NULL);
        kdev_device_clear(NULL);
        kdev_resource_set_clear(NULL);
        unsigned long n = failalloc_count();
        failalloc_off();
        assert_int_equal(n, 0);
        assert_non_null(d);
        (void)d;
        assert_null(none);
        assert_int_equal(name_ok, 0);
        assert_int_equal(name_bad, -EINVAL);
        assert_true(cmp < 0);
        assert_null(r.devices);
}

int main(void)
{
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_allocate_small),
                cmocka_unit_test(test_allocate_large),
                cmocka_unit_test(test_allocate_hook),
                cmocka_unit_test(test_preferred_numa),
                cmocka_unit_test(test_preferred_large),
                cmocka_unit_test(test_preferred_hook),
                cmocka_unit_test(test_no_allocation),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
