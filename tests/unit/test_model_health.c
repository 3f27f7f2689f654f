/* The model's physical devices: the physical -> logical mapping
 * (kdev_resource_set_link), lookups by physical ID and the propagation of a
 * physical device's health to its logical devices (kdev_physical_set_health),
 * without any backend. */
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

static void add_resource(struct kdev_resource_set *set, const char *name, const char *const *ids,
                         size_t n)
{
        set->resources = realloc(set->resources, (set->n_resources + 1) * sizeof(*set->resources));
        assert_non_null(set->resources);
        struct kdev_resource *r = &set->resources[set->n_resources++];
        memset(r, 0, sizeof(*r));
        r->name = strdup(name);
        r->devices = calloc(n ? n : 1, sizeof(*r->devices));
        r->n_devices = n;
        for (size_t i = 0; i < n; i++) {
                r->devices[i].id = strdup(ids[i]);
                r->devices[i].healthy = true;
                r->devices[i].numa_node = -1;
        }
}

static int freed;
static void count_free(void *data)
{
        freed++;
        free(data);
}

/* example.com/gpu: g0::0 g0::1 g1::0 g1::1 (physical g0, g1);
 * example.com/mig: m0 m1 (physical m0; m1 has none);
 * example.com/gpu.shared: g1::2 (physical g1 again). */
static void make_set(struct kdev_resource_set *set, struct kdev_physical **g0,
                     struct kdev_physical **g1, struct kdev_physical **m0)
{
        static const char *const gpu[] = {"g0::0", "g0::1", "g1::0", "g1::1"};
        static const char *const mig[] = {"m0", "m1"};
        static const char *const shared[] = {"g1::2"};
        memset(set, 0, sizeof(*set));
        add_resource(set, "example.com/gpu", gpu, 4);
        add_resource(set, "example.com/mig", mig, 2);
        add_resource(set, "example.com/gpu.shared", shared, 1);
        *g0 = kdev_physical_add(set, "g0", 0, NULL, NULL);
        *g1 = kdev_physical_add(set, "g1", 1, strdup("backend data"), count_free);
        *m0 = kdev_physical_add(set, "m0", -1, NULL, NULL);
        assert_non_null(*g0);
        assert_non_null(*g1);
        assert_non_null(*m0);
        set->resources[0].devices[0].physical = *g0;
        set->resources[0].devices[1].physical = *g0;
        set->resources[0].devices[2].physical = *g1;
        set->resources[0].devices[3].physical = *g1;
        set->resources[1].devices[0].physical = *m0;
        set->resources[2].devices[0].physical = *g1;
}

/* The healthy flags of every device of |set|, "1"/"0" per device, resources
 * separated by '|'. */
static const char *health_of(const struct kdev_resource_set *set)
{
        static char buf[64];
        size_t k = 0;
        for (size_t r = 0; r < set->n_resources; r++) {
                if (r)
                        buf[k++] = '|';
                for (size_t d = 0; d < set->resources[r].n_devices; d++)
                        buf[k++] = set->resources[r].devices[d].healthy ? '1' : '0';
        }
        buf[k] = 0;
        return buf;
}

static void test_link_maps_physical_to_logical(void **state)
{
        (void)state;
        struct kdev_resource_set set;
        struct kdev_physical *g0, *g1, *m0;
        make_set(&set, &g0, &g1, &m0);
        struct kdev_err err = {0};
        assert_int_equal(kdev_resource_set_link(&set, &err), 0);
        assert_int_equal(set.n_physical, 3);
        assert_int_equal(g0->index, 0);
        assert_int_equal(g1->index, 1);
        assert_int_equal(m0->index, 2);
        assert_int_equal(g0->numa_node, 0);
        assert_int_equal(g1->numa_node, 1);
        assert_true(g0->healthy && g1->healthy && m0->healthy);
        assert_string_equal(g1->data, "backend data");

        assert_int_equal(g0->n_logical, 2);
        assert_int_equal(g0->logical[0].resource, 0);
        assert_int_equal(g0->logical[0].device, 0);
        assert_int_equal(g0->logical[1].resource, 0);
        assert_int_equal(g0->logical[1].device, 1);
        assert_int_equal(g1->n_logical, 3);
        assert_int_equal(g1->logical[0].resource, 0);
        assert_int_equal(g1->logical[0].device, 2);
        assert_int_equal(g1->logical[1].resource, 0);
        assert_int_equal(g1->logical[1].device, 3);
        assert_int_equal(g1->logical[2].resource, 2);
        assert_int_equal(g1->logical[2].device, 0);
        assert_int_equal(m0->n_logical, 1);
        assert_int_equal(m0->logical[0].resource, 1);
        assert_int_equal(m0->logical[0].device, 0);

        assert_ptr_equal(kdev_physical_find(&set, "g0"), g0);
        assert_ptr_equal(kdev_physical_find(&set, "g1"), g1);
        assert_ptr_equal(kdev_physical_find(&set, "m0"), m0);
        assert_null(kdev_physical_find(&set, "m1"));
        assert_null(kdev_physical_find(&set, "g0::0"));
        assert_null(kdev_physical_find(&set, NULL));
        assert_null(kdev_physical_find(NULL, "g0"));

        /* a relink after a device changed its physical device */
        set.resources[1].devices[1].physical = m0;
        assert_int_equal(kdev_resource_set_link(&set, &err), 0);
        assert_int_equal(m0->n_logical, 2);
        assert_int_equal(m0->logical[1].resource, 1);
        assert_int_equal(m0->logical[1].device, 1);
        assert_int_equal(g1->n_logical, 3);

        freed = 0;
        kdev_resource_set_clear(&set);
        assert_int_equal(freed, 1);
        assert_null(set.physical);
        assert_int_equal(set.n_physical, 0);
        assert_null(set.physical_index);
}

static void test_fault_and_recovery_propagate(void **state)
{
        (void)state;
        struct kdev_resource_set set;
        struct kdev_physical *g0, *g1, *m0;
        make_set(&set, &g0, &g1, &m0);
        assert_int_equal(kdev_resource_set_link(&set, NULL), 0);
        bool changed[3] = {false, false, false};

        assert_string_equal(health_of(&set), "1111|11|1");
        /* a fault of g1: both its devices of example.com/gpu and its replica
         * in example.com/gpu.shared */
        assert_int_equal(kdev_physical_set_health(&set, g1, false, changed), 3);
        assert_string_equal(health_of(&set), "1100|11|0");
        assert_false(g1->healthy);
        assert_true(g0->healthy);
        assert_true(changed[0]);
        assert_false(changed[1]);
        assert_true(changed[2]);

        /* the same fault again changes nothing and marks nothing */
        bool again[3] = {false, false, false};
        assert_int_equal(kdev_physical_set_health(&set, g1, false, again), 0);
        assert_string_equal(health_of(&set), "1100|11|0");
        assert_false(again[0] || again[1] || again[2]);

        /* m0: one MIG device; m1, with no physical device, never changes */
        bool mig[3] = {false, false, false};
        assert_int_equal(kdev_physical_set_health(&set, m0, false, mig), 1);
        assert_string_equal(health_of(&set), "1100|01|0");
        assert_false(mig[0]);
        assert_true(mig[1]);
        assert_false(mig[2]);

        /* recovery of g1 returns its three devices, m0 stays down */
        bool rec[3] = {false, false, false};
        assert_int_equal(kdev_physical_set_health(&set, g1, true, rec), 3);
        assert_string_equal(health_of(&set), "1111|01|1");
        assert_true(g1->healthy);
        assert_true(rec[0]);
        assert_false(rec[1]);
        assert_true(rec[2]);

        /* |changed| may be NULL */
        assert_int_equal(kdev_physical_set_health(&set, g0, false, NULL), 2);
        assert_string_equal(health_of(&set), "0011|01|1");
        assert_int_equal(kdev_physical_set_health(&set, m0, true, NULL), 1);
        assert_int_equal(kdev_physical_set_health(&set, g0, true, NULL), 2);
        assert_string_equal(health_of(&set), "1111|11|1");
        assert_int_equal(kdev_physical_set_health(NULL, g0, false, NULL), 0);
        assert_int_equal(kdev_physical_set_health(&set, NULL, false, NULL), 0);
        assert_string_equal(health_of(&set), "1111|11|1");
        kdev_resource_set_clear(&set);
}

/* A physical event (kdev_physical_apply) finds its physical device by ID and
 * propagates like kdev_physical_set_health; an unknown ID changes nothing. */
static void test_physical_event_applies_by_id(void **state)
{
        (void)state;
        struct kdev_resource_set set;
        struct kdev_physical *g0, *g1, *m0;
        make_set(&set, &g0, &g1, &m0);
        assert_int_equal(kdev_resource_set_link(&set, NULL), 0);
        bool changed[3] = {false, false, false};
        struct kdev_physical_event ev = {.id = "g1", .healthy = false, .xid = 79,
                                         .reason = "critical XID 79"};
        assert_int_equal(kdev_physical_apply(&set, &ev, changed), 3);
        assert_string_equal(health_of(&set), "1100|11|0");
        assert_false(g1->healthy);
        assert_true(changed[0]);
        assert_false(changed[1]);
        assert_true(changed[2]);
        /* unknown IDs (a logical ID is not a physical one) and NULLs: nothing */
        bool none[3] = {false, false, false};
        ev.id = "g0::0";
        assert_int_equal(kdev_physical_apply(&set, &ev, none), 0);
        ev.id = NULL;
        assert_int_equal(kdev_physical_apply(&set, &ev, none), 0);
        assert_int_equal(kdev_physical_apply(NULL, &ev, none), 0);
        assert_int_equal(kdev_physical_apply(&set, NULL, none), 0);
        assert_false(none[0] || none[1] || none[2]);
        assert_string_equal(health_of(&set), "1100|11|0");
        assert_true(g0->healthy);
        /* the recovery */
        ev.id = "g1";
        ev.healthy = true;
        assert_int_equal(kdev_physical_apply(&set, &ev, NULL), 3);
        assert_string_equal(health_of(&set), "1111|11|1");
        assert_true(g1->healthy);
        kdev_resource_set_clear(&set);
}

static void test_logical_device_unhealthy_by_itself(void **state)
{
        (void)state;
        struct kdev_resource_set set;
        struct kdev_physical *g0, *g1, *m0;
        make_set(&set, &g0, &g1, &m0);
        assert_int_equal(kdev_resource_set_link(&set, NULL), 0);
        /* a device already down counts only the ones that change */
        set.resources[0].devices[1].healthy = false;
        bool changed[3] = {false, false, false};
        assert_int_equal(kdev_physical_set_health(&set, g0, false, changed), 1);
        assert_string_equal(health_of(&set), "0011|11|1");
        assert_true(changed[0]);
        kdev_resource_set_clear(&set);
}

static void test_link_errors(void **state)
{
        (void)state;
        struct kdev_resource_set set;
        struct kdev_physical *g0, *g1, *m0;
        struct kdev_err err = {0};
        make_set(&set, &g0, &g1, &m0);
        assert_non_null(kdev_physical_add(&set, "g1", -1, NULL, NULL));
        assert_int_equal(kdev_resource_set_link(&set, &err), -EEXIST);
        assert_string_equal(err.msg, "physical device g1 appears twice");
        assert_int_equal(g0->n_logical, 0);
        assert_null(g0->logical);
        /* the lookup stays right without the index */
        assert_ptr_equal(kdev_physical_find(&set, "g1"), g1);
        assert_ptr_equal(kdev_physical_find(&set, "m0"), m0);
        kdev_physical_truncate(&set, 3);
        assert_int_equal(set.n_physical, 3);
        assert_int_equal(kdev_resource_set_link(&set, &err), 0);

        /* a device pointing at another set's physical device */
        struct kdev_resource_set other = {0};
        struct kdev_physical *x = kdev_physical_add(&other, "x", -1, NULL, NULL);
        assert_non_null(x);
        set.resources[1].devices[1].physical = x;
        err = (struct kdev_err){0};
        assert_int_equal(kdev_resource_set_link(&set, &err), -EINVAL);
        assert_string_equal(err.msg, "device m1 of example.com/mig points to a physical device "
                                     "outside the set");
        assert_int_equal(g1->n_logical, 0);
        set.resources[1].devices[1].physical = NULL;
        kdev_resource_set_clear(&other);
        kdev_resource_set_clear(&set);
}

static void test_move_keeps_records(void **state)
{
        (void)state;
        struct kdev_resource_set set, dst = {0};
        struct kdev_physical *g0, *g1, *m0;
        make_set(&set, &g0, &g1, &m0);
        struct kdev_physical *keep = kdev_physical_add(&dst, "d0", 3, NULL, NULL);
        assert_non_null(keep);
        assert_int_equal(kdev_physical_move(&dst, &set), 0);
        assert_int_equal(set.n_physical, 0);
        assert_null(set.physical);
        assert_int_equal(dst.n_physical, 4);
        assert_ptr_equal(dst.physical[0], keep);
        assert_ptr_equal(dst.physical[1], g0);
        assert_ptr_equal(dst.physical[2], g1);
        assert_ptr_equal(dst.physical[3], m0);
        assert_int_equal(g0->index, 1);
        assert_int_equal(m0->index, 3);
        /* the devices move too (as a rediscovery swaps them in) */
        dst.resources = set.resources;
        dst.n_resources = set.n_resources;
        set.resources = NULL;
        set.n_resources = 0;
        assert_int_equal(kdev_resource_set_link(&dst, NULL), 0);
        assert_int_equal(g1->n_logical, 3);
        assert_int_equal(keep->n_logical, 0);
        assert_ptr_equal(kdev_physical_find(&dst, "m0"), m0);
        assert_ptr_equal(kdev_physical_find(&dst, "d0"), keep);
        assert_int_equal(kdev_physical_set_health(&dst, g1, false, NULL), 3);
        assert_string_equal(health_of(&dst), "1100|11|0");
        freed = 0;
        kdev_resource_set_clear(&set);
        kdev_resource_set_clear(&dst);
        assert_int_equal(freed, 1);
}

static bool drop_g(void *arg, const struct kdev_physical *p)
{
        assert_string_equal(arg, "arg");
        return p->id[0] == 'g';
}

/* kdev_physical_remove_if: the records the predicate picks are freed (their
 * data too), the others keep their order, with their index updated. */
static void test_remove_if_keeps_the_others(void **state)
{
        (void)state;
        struct kdev_resource_set set;
        struct kdev_physical *g0, *g1, *m0;
        make_set(&set, &g0, &g1, &m0);
        struct kdev_physical *m9 = kdev_physical_add(&set, "m9", 2, NULL, NULL);
        assert_non_null(m9);
        /* no logical device may point at a dropped record */
        for (size_t r = 0; r < set.n_resources; r++)
                for (size_t d = 0; d < set.resources[r].n_devices; d++)
                        if (set.resources[r].devices[d].physical != m0)
                                set.resources[r].devices[d].physical = NULL;
        freed = 0;
        assert_int_equal(kdev_physical_remove_if(&set, drop_g, "arg"), 2);
        assert_int_equal(freed, 1); /* g1's data */
        assert_int_equal(set.n_physical, 2);
        assert_ptr_equal(set.physical[0], m0);
        assert_ptr_equal(set.physical[1], m9);
        assert_int_equal(m0->index, 0);
        assert_int_equal(m9->index, 1);
        assert_int_equal(kdev_resource_set_link(&set, NULL), 0);
        assert_ptr_equal(kdev_physical_find(&set, "m9"), m9);
        assert_null(kdev_physical_find(&set, "g0"));
        assert_int_equal(m0->n_logical, 1);
        /* all of them: the array goes */
        assert_int_equal(kdev_physical_remove_if(&set, drop_g, "arg"), 0);
        set.resources[1].devices[0].physical = NULL;
        m0->id[0] = 'g';
        m9->id[0] = 'g';
        assert_int_equal(kdev_physical_remove_if(&set, drop_g, "arg"), 2);
        assert_int_equal(set.n_physical, 0);
        assert_null(set.physical);
        assert_int_equal(kdev_physical_remove_if(NULL, drop_g, NULL), 0);
        kdev_resource_set_clear(&set);
}

static void test_many_physical_devices(void **state)
{
        (void)state;
        enum { N = 5000 };
        struct kdev_resource_set set = {0};
        char **ids = calloc(N, sizeof(*ids));
        assert_non_null(ids);
        for (size_t i = 0; i < N; i++) {
                char b[32];
                snprintf(b, sizeof(b), "GPU-%zu", i);
                ids[i] = strdup(b);
        }
        add_resource(&set, "example.com/many", (const char *const *)ids, N);
        for (size_t i = 0; i < N; i++) {
                struct kdev_physical *p = kdev_physical_add(&set, ids[i], -1, NULL, NULL);
                assert_non_null(p);
                set.resources[0].devices[N - 1 - i].physical = p;
        }
        assert_int_equal(kdev_resource_set_link(&set, NULL), 0);
        for (size_t i = 0; i < N; i++) {
                struct kdev_physical *p = kdev_physical_find(&set, ids[i]);
                assert_non_null(p);
                assert_int_equal(p->index, i);
                assert_int_equal(p->n_logical, 1);
                assert_int_equal(p->logical[0].device, N - 1 - i);
        }
        assert_null(kdev_physical_find(&set, "GPU-5000"));
        assert_int_equal(kdev_physical_set_health(&set, set.physical[7], false, NULL), 1);
        assert_false(set.resources[0].devices[N - 8].healthy);
        assert_true(set.resources[0].devices[N - 7].healthy);
        for (size_t i = 0; i < N; i++)
                free(ids[i]);
        free(ids);
        kdev_resource_set_clear(&set);
}

int main(void)
{
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_link_maps_physical_to_logical),
                cmocka_unit_test(test_fault_and_recovery_propagate),
                cmocka_unit_test(test_physical_event_applies_by_id),
                cmocka_unit_test(test_logical_device_unhealthy_by_itself),
                cmocka_unit_test(test_link_errors),
                cmocka_unit_test(test_move_keeps_records),
                cmocka_unit_test(test_remove_if_keeps_the_others),
                cmocka_unit_test(test_many_physical_devices),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
