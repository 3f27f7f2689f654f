/* Allocation-failure driver shared by the test_*_oom unit tests: runs one
 * operation with allocation N failing, for N = 1 .. the number of
 * allocations a successful run makes, once failing only allocation N and
 * once failing N and every later one, and checks what each failed run
 * returns and that nothing leaked (LeakSanitizer, in ASan builds).
 * Header-only: included by one test file each. */
#ifndef KDEV_TESTS_OOM_DRIVER_H
#define KDEV_TESTS_OOM_DRIVER_H

#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#include "common/err.h"
#include "failalloc.h"

struct oom_op {
        const char *name;
        /* The operation alone (the only code that runs while allocations
         * fail): returns 0 or a negative errno, with |err| filled. */
        int (*call)(void *ctx, struct kdev_err *err);
        /* After a successful call: checks the exact output, frees it. */
        void (*check_ok)(void *ctx);
        /* After a failed call: checks the output is untouched/empty. May be
         * NULL. */
        void (*check_failed)(void *ctx);
        void *ctx;
        /* Error code every failed run must return (0: -ENOMEM). */
        int want_rc;
};

/* Runs |op| as described above; returns the number of failure points (the
 * allocations of one successful run), after asserting it is |min_points| or
 * more. */
static unsigned long oom_drive(const struct oom_op *op, unsigned long min_points)
{
        const int want = op->want_rc ? op->want_rc : -ENOMEM;
        struct kdev_err err = { 0 };

        failalloc_off();
        int rc = op->call(op->ctx, &err);
        unsigned long total = failalloc_count();
        failalloc_off();
        if (rc != 0)
                print_error("%s: failed without injected failures: %d %s\n", op->name, rc,
                            err.msg);
        assert_int_equal(rc, 0);
        op->check_ok(op->ctx);

        for (int sticky = 0; sticky <= 1; sticky++) {
                for (unsigned long n = 1; n <= total; n++) {
                        struct kdev_err e = { 0 };
                        if (sticky)
                                failalloc_fail_from(n);
                        else
                                failalloc_fail_nth(n);
                        rc = op->call(op->ctx, &e);
                        unsigned long failed = failalloc_failures();
                        failalloc_off();
                        if (rc != want || failed == 0)
                                print_error("%s: allocation %lu of %lu failing%s: returned %d "
                                            "(want %d), %lu failed, err \"%s\"\n",
                                            op->name, n, total, sticky ? " and later ones" : "",
                                            rc, want, failed, e.msg);
                        assert_true(failed >= 1);
                        if (rc == 0)
                                op->check_ok(op->ctx); /* frees it before failing */
                        assert_int_equal(rc, want);
                        assert_int_equal(e.code, -want);
                        assert_true(e.msg[0] != '\0');
                        if (op->check_failed)
                                op->check_failed(op->ctx);
                }
        }
        if (failalloc_have_leak_check())
                assert_int_equal(failalloc_leak_check(), 0);
        print_message("%s: %lu allocation failure points, each %d, no leaks\n", op->name, total,
                      want);
        assert_true(total >= min_points);
        return total;
}

#endif /* KDEV_TESTS_OOM_DRIVER_H */
