/* nghttp2's memory for a server connection's session (struct
 * kdev_rpc_h2mem, rpc/rpc_internal.h): freed blocks of a size class are
 * reused, calloc zeroes a reused block, realloc keeps the contents, large
 * blocks are plain malloc'ed ones, at most KDEV_RPC_H2MEM_KEEP blocks a class
 * are kept, and the release frees them (the leak check of the ASan and
 * valgrind runs). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>

#include "rpc/rpc_internal.h"

#define ALIGNED16(p) (((uintptr_t)(p) & 15u) == 0)

static void test_reuse_and_zeroing(void **state)
{
        (void)state;
        struct kdev_rpc_h2mem m;
        kdev_rpc__h2mem_init(&m);
        nghttp2_mem *mem = &m.mem;
        assert_ptr_equal(mem->mem_user_data, &m);
        char *a = mem->malloc(10, &m);
        assert_non_null(a);
        assert_true(ALIGNED16(a));
        memset(a, 0x5a, 64); /* class 0 holds 64 bytes */
        mem->free(a, &m);
        assert_int_equal(m.n_spare[0], 1);
        char *b = mem->malloc(64, &m); /* the same class: the freed block */
        assert_ptr_equal(b, a);
        assert_int_equal(m.n_spare[0], 0);
        mem->free(b, &m);
        char *c = mem->calloc(4, 16, &m); /* reused, and zeroed */
        assert_ptr_equal(c, a);
        for (int i = 0; i < 64; i++)
                assert_int_equal(c[i], 0);
        char *d = mem->malloc(65, &m); /* the next class: a new block */
        assert_ptr_not_equal(d, a);
        assert_true(ALIGNED16(d));
        mem->free(c, &m);
        mem->free(d, &m);
        assert_int_equal(m.n_spare[0], 1);
        assert_int_equal(m.n_spare[1], 1);
        mem->free(NULL, &m);
        kdev_rpc__h2mem_release(&m);
        assert_int_equal(m.n_spare[0], 0);
        assert_null(m.spare[0]);
        assert_null(m.spare[1]);
}

static void test_realloc_keeps_contents(void **state)
{
        (void)state;
        struct kdev_rpc_h2mem m;
        kdev_rpc__h2mem_init(&m);
        nghttp2_mem *mem = &m.mem;
        char *a = mem->realloc(NULL, 20, &m); /* NULL: a malloc */
        assert_non_null(a);
        for (int i = 0; i < 20; i++)
                a[i] = (char)i;
        assert_ptr_equal(mem->realloc(a, 60, &m), a); /* fits its block */
        char *b = mem->realloc(a, 300, &m);          /* class 3: moved, contents kept */
        assert_ptr_not_equal(b, a);
        for (int i = 0; i < 20; i++)
                assert_int_equal(b[i], i);
        assert_int_equal(m.n_spare[0], 1); /* the old block went back to its class */
        char *big = mem->realloc(b, 10000, &m); /* above 4 KiB: a malloc'ed block */
        for (int i = 0; i < 20; i++)
                assert_int_equal(big[i], i);
        memset(big, 1, 10000);
        char *bigger = mem->realloc(big, 50000, &m); /* grown in place or moved */
        assert_non_null(bigger);
        assert_true(ALIGNED16(bigger));
        assert_int_equal(bigger[9999], 1);
        mem->free(bigger, &m); /* freed, not kept */
        for (unsigned c = 0; c < KDEV_RPC_H2MEM_CLASSES; c++)
                assert_true(m.n_spare[c] <= 1);
        kdev_rpc__h2mem_release(&m);
}

static void test_keeps_at_most_keep(void **state)
{
        (void)state;
        struct kdev_rpc_h2mem m;
        kdev_rpc__h2mem_init(&m);
        enum { N = KDEV_RPC_H2MEM_KEEP + 5 };
        void *p[N];
        for (int i = 0; i < N; i++) {
                p[i] = m.mem.malloc(4096, &m); /* the largest class */
                assert_non_null(p[i]);
        }
        for (int i = 0; i < N; i++)
                m.mem.free(p[i], &m);
        assert_int_equal(m.n_spare[KDEV_RPC_H2MEM_CLASSES - 1], KDEV_RPC_H2MEM_KEEP);
        assert_null(m.mem.calloc(SIZE_MAX / 2, 4, &m)); /* overflow: NULL */
        kdev_rpc__h2mem_release(&m);
        assert_int_equal(m.n_spare[KDEV_RPC_H2MEM_CLASSES - 1], 0);
}

int main(void)
{
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_reuse_and_zeroing),
                cmocka_unit_test(test_realloc_keeps_contents),
                cmocka_unit_test(test_keeps_at_most_keep),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
