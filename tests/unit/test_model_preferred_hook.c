/* kdev_resource_preferred with a backend hook (kdev_resource_ops.preferred):
 * what the hook receives, what the model does with its answer. */
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

#define N 6

/* What the hook saw and what it answers. */
struct spy {
        int calls;
        size_t n_avail, n_must, size;
        size_t avail[N], must[N];   /* device positions */
        int mode;                   /* 0: must then reverse device order; 1: repeat;
                                     * 2: foreign device; 3: drop must; 4: fail;
                                     * 5: NULL entry */
};

static struct spy spy;
static struct kdev_device devs[N];
static struct kdev_device foreign = {.id = (char *)"x"};

static int hook(void *data, const struct kdev_resource *r, const struct kdev_device *const *avail,
                size_t n_avail, const struct kdev_device *const *must, size_t n_must, size_t size,
                const struct kdev_device **out, struct kdev_err *err)
{
        (void)r;
        assert_ptr_equal(data, &spy);
        spy.calls++;
        spy.n_avail = n_avail;
        spy.n_must = n_must;
        spy.size = size;
        for (size_t i = 0; i < n_avail; i++)
                spy.avail[i] = (size_t)(avail[i] - devs);
        for (size_t i = 0; i < n_must; i++)
                spy.must[i] = (size_t)(must[i] - devs);
        if (spy.mode == 4)
                return kdev_err_set(err, EIO, "hook failed");
        size_t o = 0;
        for (size_t i = 0; i < n_must; i++)
                out[o++] = must[i];
        for (size_t i = n_avail; i-- > 0 && o < size;) {
                bool m = false;
                for (size_t j = 0; j < n_must; j++)
                        m = m || must[j] == avail[i];
                if (!m)
                        out[o++] = avail[i];
        }
        if (spy.mode == 1 && size >= 2)
                out[1] = out[0];
        if (spy.mode == 2)
                out[size - 1] = &foreign;
        if (spy.mode == 3) /* test_bad_answers: d0 is available, not chosen */
                out[0] = &devs[0];
        if (spy.mode == 5)
                out[size - 1] = NULL;
        return 0;
}

static const struct kdev_resource_ops ops = {.preferred = hook};

static struct kdev_resource res(void)
{
        static const char *ids[N] = {"d0", "d1", "d2", "d3", "d4", "d5"};
        for (size_t i = 0; i < N; i++)
                devs[i] = (struct kdev_device){.id = (char *)ids[i], .healthy = true,
                                               .numa_node = -1};
        return (struct kdev_resource){.name = (char *)"example.com/x", .devices = devs,
                                      .n_devices = N, .ops = &ops, .ops_data = &spy};
}

static void test_hook_gets_valid_request(void **state)
{
        (void)state;
        struct kdev_resource r = res();
        memset(&spy, 0, sizeof(spy));
        const char *avail[] = {"d4", "d1", "d5", "d1", "d2"};
        const char *must[] = {"d5", "d2", "d5"};
        char **out = NULL;
        size_t n = 0;
        assert_int_equal(kdev_resource_preferred(&r, avail, 5, must, 3, 3, &out, &n, NULL), 0);
        assert_int_equal(spy.calls, 1);
        /* distinct, device-array order */
        assert_int_equal(spy.n_avail, 4);
        assert_int_equal(spy.avail[0], 1);
        assert_int_equal(spy.avail[1], 2);
        assert_int_equal(spy.avail[2], 4);
        assert_int_equal(spy.avail[3], 5);
        assert_int_equal(spy.n_must, 2);
        assert_int_equal(spy.must[0], 2);
        assert_int_equal(spy.must[1], 5);
        assert_int_equal(spy.size, 3);
        /* the hook's order is kept */
        assert_int_equal(n, 3);
        assert_string_equal(out[0], "d2");
        assert_string_equal(out[1], "d5");
        assert_string_equal(out[2], "d4");
        kdev_strv_free(out, n);

        /* size above the available count: the hook is asked for all of them */
        assert_int_equal(kdev_resource_preferred(&r, avail, 5, NULL, 0, 9, &out, &n, NULL), 0);
        assert_int_equal(spy.size, 4);
        assert_int_equal(n, 4);
        assert_string_equal(out[0], "d5");
        assert_string_equal(out[3], "d1");
        kdev_strv_free(out, n);

        /* size 0: the hook answers nothing, the result is empty */
        assert_int_equal(kdev_resource_preferred(&r, avail, 5, NULL, 0, 0, &out, &n, NULL), 0);
        assert_int_equal(n, 0);
        assert_null(out);

        /* invalid requests never reach the hook */
        spy.calls = 0;
        struct kdev_err e;
        const char *bad[] = {"d9"};
        assert_int_equal(kdev_resource_preferred(&r, bad, 1, NULL, 0, 1, &out, &n, &e), -EINVAL);
        assert_int_equal(kdev_resource_preferred(&r, avail, 2, must, 1, 1, &out, &n, &e),
                         -EINVAL);
        assert_int_equal(kdev_resource_preferred(&r, avail, 5, must, 3, 1, &out, &n, &e),
                         -EINVAL);
        assert_int_equal(kdev_resource_preferred(&r, avail, 5, NULL, 0, -1, &out, &n, &e),
                         -EINVAL);
        assert_int_equal(spy.calls, 0);
}

static void test_bad_answers(void **state)
{
        (void)state;
        struct kdev_resource r = res();
        const char *avail[] = {"d0", "d1", "d2", "d3"};
        const char *must[] = {"d1"};
        for (int mode = 1; mode <= 5; mode++) {
                memset(&spy, 0, sizeof(spy));
                spy.mode = mode;
                char **out = (char **)&spy; /* must be reset to NULL */
                size_t n = 7;
                struct kdev_err e;
                kdev_err_clear(&e);
                int rc = kdev_resource_preferred(&r, avail, 4, must, 1, 3, &out, &n, &e);
                assert_int_equal(rc, mode == 4 ? -EIO : -EPROTO);
                assert_null(out);
                assert_int_equal(n, 0);
                if (mode == 4)
                        assert_string_equal(e.msg, "hook failed");
                else
                        assert_string_equal(e.msg,
                                            "preferred allocation of resource example.com/x: "
                                            "the backend's answer is not 3 distinct available "
                                            "devices with the must-include ones");
        }
}

int main(void)
{
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_hook_gets_valid_request),
                cmocka_unit_test(test_bad_answers),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
