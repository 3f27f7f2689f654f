/* kdev_arena: the per-request bump allocator that Allocate unpacks its
 * request into (plugin/arena_internal.h). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "plugin/arena_internal.h"
#include "deviceplugin/v1beta1/api.pb-c.h"

#define ALIGNED(p) (((uintptr_t)(p) % _Alignof(max_align_t)) == 0)

static void test_caller_block_first_then_heap(void **state)
{
        (void)state;
        _Alignas(max_align_t) char buf[256];
        struct kdev_arena a;
        kdev_arena_init(&a, buf, sizeof(buf));
        char *p = kdev_arena_alloc(&a, 10), *q = kdev_arena_alloc(&a, 1);
        assert_ptr_equal(p, buf); /* the caller's block, from its start */
        assert_ptr_equal(q, buf + _Alignof(max_align_t)); /* 10 bytes rounded up */
        assert_null(a.big);
        char *big = kdev_arena_alloc(&a, 1000); /* does not fit: a malloc'ed block */
        assert_non_null(a.big);
        assert_true(big < buf || big >= buf + sizeof(buf));
        assert_true(ALIGNED(big));
        memset(big, 0x5a, 1000);
        assert_non_null(kdev_arena_alloc(&a, 0)); /* size 0: still a distinct pointer */
        kdev_arena_release(&a);
        assert_null(a.big);
        assert_ptr_equal(kdev_arena_alloc(&a, 8), buf); /* usable again, from the start */
        kdev_arena_release(&a);
}

static void test_no_caller_block(void **state)
{
        (void)state;
        struct kdev_arena a;
        kdev_arena_init(&a, NULL, 0);
        char *prev = NULL;
        for (int i = 0; i < 2000; i++) { /* many blocks, each aligned, none overlapping */
                char *p = kdev_arena_alloc(&a, 24);
                assert_non_null(p);
                assert_true(ALIGNED(p));
                memset(p, i & 0xff, 24);
                if (prev)
                        assert_int_equal((unsigned char)prev[23], (unsigned)(i - 1) & 0xff);
                prev = p;
        }
        assert_null(kdev_arena_alloc(&a, SIZE_MAX - 8)); /* too big: NULL, not a wrap */
        kdev_arena_release(&a);
}

/* An AllocateRequest of 300 IDs (more than the caller's block holds)
 * unpacked through the arena reads back as packed. */
static void test_unpack_through_arena(void **state)
{
        (void)state;
        enum { N = 300 };
        char ids[N][32];
        char *idv[N];
        for (int i = 0; i < N; i++) {
                snprintf(ids[i], sizeof(ids[i]), "GPU-%04d::%d", i, i % 7);
                idv[i] = ids[i];
        }
        V1beta1__ContainerAllocateRequest cr = V1BETA1__CONTAINER_ALLOCATE_REQUEST__INIT;
        cr.n_devices_ids = N;
        cr.devices_ids = idv;
        V1beta1__ContainerAllocateRequest *crp = &cr;
        V1beta1__AllocateRequest ar = V1BETA1__ALLOCATE_REQUEST__INIT;
        ar.n_container_requests = 1;
        ar.container_requests = &crp;
        size_t len = v1beta1__allocate_request__get_packed_size(&ar);
        uint8_t *wire = malloc(len);
        assert_non_null(wire);
        v1beta1__allocate_request__pack(&ar, wire);

        _Alignas(max_align_t) char buf[1024];
        struct kdev_arena a;
        kdev_arena_init(&a, buf, sizeof(buf));
        V1beta1__AllocateRequest *got = v1beta1__allocate_request__unpack(&a.pb, len, wire);
        assert_non_null(got);
        assert_non_null(a.big); /* 300 IDs did not fit in 1 KiB */
        assert_int_equal(got->n_container_requests, 1);
        assert_int_equal(got->container_requests[0]->n_devices_ids, N);
        for (int i = 0; i < N; i++)
                assert_string_equal(got->container_requests[0]->devices_ids[i], ids[i]);
        kdev_arena_release(&a); /* the whole message at once (valgrind/ASan: no leak) */
        free(wire);
}

int main(void)
{
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_caller_block_first_then_heap),
                cmocka_unit_test(test_no_caller_block),
                cmocka_unit_test(test_unpack_through_arena),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
