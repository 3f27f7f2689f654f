/* The withdrawal rule's registry (model/withdrawn.h): verdicts over time,
 * grace periods kept across rounds, owners' sweeps, due times, and many
 * devices withdrawn and dropped at once. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <cmocka.h>

#include "model/withdrawn.h"

static const char A[] = "a", B[] = "b"; /* two owners */

static void test_verdicts_follow_the_grace_period(void **state)
{
        (void)state;
        struct kdev_withdrawn *w = kdev_withdrawn_new();
        assert_non_null(w);
        assert_int_equal(kdev_withdrawn_miss(w, A, "example.com/kx", "kx0", 1000, 300, 1),
                         KDEV_WITHDRAWN_NEW);
        uint64_t since = 0;
        assert_true(kdev_withdrawn_has(w, "example.com/kx", "kx0", &since));
        assert_int_equal(since, 1000);
        assert_false(kdev_withdrawn_has(w, "example.com/kx", "kx1", NULL));
        assert_false(kdev_withdrawn_has(w, "example.com/ky", "kx0", NULL));
        assert_int_equal(kdev_withdrawn_miss(w, A, "example.com/kx", "kx0", 1299, 300, 2),
                         KDEV_WITHDRAWN_KEPT);
        assert_int_equal(kdev_withdrawn_due(w, NULL, NULL), 1300);
        assert_int_equal(kdev_withdrawn_due(w, A, "example.com/kx"), 1300);
        assert_int_equal(kdev_withdrawn_due(w, B, NULL), UINT64_MAX);
        assert_int_equal(kdev_withdrawn_due(w, NULL, "example.com/ky"), UINT64_MAX);
        /* at first miss + grace exactly: dropped and forgotten */
        assert_int_equal(kdev_withdrawn_miss(w, A, "example.com/kx", "kx0", 1300, 300, 3),
                         KDEV_WITHDRAWN_DROPPED);
        assert_false(kdev_withdrawn_has(w, "example.com/kx", "kx0", NULL));
        assert_int_equal(kdev_withdrawn_count(w), 0);
        /* missed again later: a new grace period */
        assert_int_equal(kdev_withdrawn_miss(w, A, "example.com/kx", "kx0", 5000, 300, 4),
                         KDEV_WITHDRAWN_NEW);
        assert_int_equal(kdev_withdrawn_due(w, NULL, NULL), 5300);
        kdev_withdrawn_free(w);
}

/* Grace 0: Unhealthy in the update that withdraws it, due at once, dropped
 * by the next miss. */
static void test_grace_zero_drops_at_the_next_miss(void **state)
{
        (void)state;
        struct kdev_withdrawn *w = kdev_withdrawn_new();
        assert_int_equal(kdev_withdrawn_miss(w, A, "r", "d", 10, 0, 1), KDEV_WITHDRAWN_NEW);
        assert_int_equal(kdev_withdrawn_due(w, NULL, NULL), 10);
        assert_int_equal(kdev_withdrawn_miss(w, A, "r", "d", 10, 0, 2), KDEV_WITHDRAWN_DROPPED);
        assert_int_equal(kdev_withdrawn_count(w), 0);
        /* NULL registry: no grace */
        assert_int_equal(kdev_withdrawn_miss(NULL, A, "r", "d", 10, 300, 1),
                         KDEV_WITHDRAWN_DROPPED);
        assert_false(kdev_withdrawn_has(NULL, "r", "d", NULL));
        kdev_withdrawn_free(w);
}

static void test_back_forgets_and_a_later_grace_applies(void **state)
{
        (void)state;
        struct kdev_withdrawn *w = kdev_withdrawn_new();
        assert_int_equal(kdev_withdrawn_miss(w, A, "r", "d", 0, 100, 1), KDEV_WITHDRAWN_NEW);
        assert_true(kdev_withdrawn_back(w, "r", "d"));
        assert_false(kdev_withdrawn_back(w, "r", "d"));
        assert_int_equal(kdev_withdrawn_miss(w, A, "r", "d", 50, 100, 2), KDEV_WITHDRAWN_NEW);
        /* a reload shortens the grace period: the latest one counts */
        assert_int_equal(kdev_withdrawn_miss(w, A, "r", "d", 60, 5, 3), KDEV_WITHDRAWN_DROPPED);
        kdev_withdrawn_free(w);
}

static void test_sweep_forgets_only_its_owners_unasked(void **state)
{
        (void)state;
        struct kdev_withdrawn *w = kdev_withdrawn_new();
        kdev_withdrawn_miss(w, A, "nvidia.com/gpu", "GPU-1", 0, 1000, 7);
        kdev_withdrawn_miss(w, A, "nvidia.com/gpu", "GPU-2", 0, 1000, 6);
        kdev_withdrawn_miss(w, B, "example.com/kx", "kx0", 0, 1000, 1);
        assert_int_equal(kdev_withdrawn_sweep(w, A, 7), 1);
        assert_true(kdev_withdrawn_has(w, "nvidia.com/gpu", "GPU-1", NULL));
        assert_false(kdev_withdrawn_has(w, "nvidia.com/gpu", "GPU-2", NULL));
        assert_true(kdev_withdrawn_has(w, "example.com/kx", "kx0", NULL));
        assert_int_equal(kdev_withdrawn_forget_resource(w, "example.com/kx"), 1);
        assert_int_equal(kdev_withdrawn_count(w), 1);
        kdev_withdrawn_free(w);
}

/* 20000 devices withdrawn, half back, the rest dropped: every lookup still
 * answers right through the compactions. */
static void test_many_devices(void **state)
{
        (void)state;
        enum { N = 20000 };
        struct kdev_withdrawn *w = kdev_withdrawn_new();
        char id[32];
        for (int i = 0; i < N; i++) {
                snprintf(id, sizeof(id), "d%d", i);
                assert_int_equal(kdev_withdrawn_miss(w, A, "r", id, (uint64_t)i, 1000, 1),
                                 KDEV_WITHDRAWN_NEW);
        }
        assert_int_equal(kdev_withdrawn_count(w), N);
        assert_int_equal(kdev_withdrawn_due(w, A, "r"), 1000);
        for (int i = 0; i < N; i += 2) {
                snprintf(id, sizeof(id), "d%d", i);
                assert_true(kdev_withdrawn_back(w, "r", id));
        }
        assert_int_equal(kdev_withdrawn_count(w), N / 2);
        for (int i = 0; i < N; i++) {
                snprintf(id, sizeof(id), "d%d", i);
                uint64_t since = 0;
                bool has = kdev_withdrawn_has(w, "r", id, &since);
                assert_int_equal(has, i % 2 == 1);
                if (has)
                        assert_int_equal(since, (uint64_t)i);
        }
        for (int i = 1; i < N; i += 2) {
                snprintf(id, sizeof(id), "d%d", i);
                assert_int_equal(kdev_withdrawn_miss(w, A, "r", id, 1000 + (uint64_t)i, 1000, 2),
                                 KDEV_WITHDRAWN_DROPPED);
        }
        assert_int_equal(kdev_withdrawn_count(w), 0);
        assert_int_equal(kdev_withdrawn_due(w, NULL, NULL), UINT64_MAX);
        kdev_withdrawn_free(w);
}

int main(void)
{
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_verdicts_follow_the_grace_period),
                cmocka_unit_test(test_grace_zero_drops_at_the_next_miss),
                cmocka_unit_test(test_back_forgets_and_a_later_grace_applies),
                cmocka_unit_test(test_sweep_forgets_only_its_owners_unasked),
                cmocka_unit_test(test_many_devices),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
