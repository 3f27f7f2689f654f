/* common/wait.h: the monotonic deadlines of the helper threads' timed
 * waits (NVML event thread, per-node config watch). */
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include <cmocka.h>

#include "common/wait.h"

static int64_t ns_of(const struct timespec *ts)
{
        return (int64_t)ts->tv_sec * 1000000000LL + ts->tv_nsec;
}

/* The deadline is |ms| after CLOCK_MONOTONIC's now, normalised, for the
 * carries a millisecond count can cause (999, 1000, 1999 ms). */
static void test_deadline(void **state)
{
        (void)state;
        const unsigned cases[] = {0, 1, 999, 1000, 1999, 86400000};
        for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
                struct timespec before, ts, after;
                clock_gettime(CLOCK_MONOTONIC, &before);
                kdev_deadline_after_ms(cases[i], &ts);
                clock_gettime(CLOCK_MONOTONIC, &after);
                assert_true(ts.tv_nsec >= 0 && ts.tv_nsec < 1000000000L);
                int64_t want = (int64_t)cases[i] * 1000000LL;
                assert_true(ns_of(&ts) - ns_of(&before) >= want);
                assert_true(ns_of(&ts) - ns_of(&after) <= want);
        }
}

/* A wait on a monotonic condition variable times out at the deadline: 20 ms
 * pass, not 0 (a CLOCK_REALTIME deadline on a monotonic condition variable
 * would be decades away; a monotonic one on a realtime condition variable
 * long past). */
static void test_timed_wait(void **state)
{
        (void)state;
        pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
        pthread_cond_t cond;
        assert_int_equal(kdev_cond_init_monotonic(&cond), 0);
        struct timespec start, ts, end;
        clock_gettime(CLOCK_MONOTONIC, &start);
        kdev_deadline_after_ms(20, &ts);
        pthread_mutex_lock(&mu);
        int r;
        while ((r = pthread_cond_timedwait(&cond, &mu, &ts)) == 0)
                ;
        pthread_mutex_unlock(&mu);
        clock_gettime(CLOCK_MONOTONIC, &end);
        assert_int_equal(r, ETIMEDOUT);
        assert_true(ns_of(&end) - ns_of(&start) >= 20 * 1000000LL);
        assert_true(ns_of(&end) - ns_of(&start) < 5000 * 1000000LL);
        pthread_cond_destroy(&cond);
}

int main(void)
{
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_deadline),
                cmocka_unit_test(test_timed_wait),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
