/* rpc: wire helpers (status names, grpc-message percent-encoding,
 * grpc-timeout, content types) against PROTOCOL-HTTP2's rules. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "rpc/rpc_internal.h"

static void test_status_names(void **state)
{
        (void)state;
        assert_string_equal(kdev_rpc_status_name(0), "OK");
        assert_string_equal(kdev_rpc_status_name(KDEV_RPC_DEADLINE_EXCEEDED), "DEADLINE_EXCEEDED");
        assert_string_equal(kdev_rpc_status_name(8), "RESOURCE_EXHAUSTED");
        assert_string_equal(kdev_rpc_status_name(12), "UNIMPLEMENTED");
        assert_string_equal(kdev_rpc_status_name(14), "UNAVAILABLE");
        assert_string_equal(kdev_rpc_status_name(16), "UNAUTHENTICATED");
        assert_string_equal(kdev_rpc_status_name(17), "UNKNOWN");
        assert_string_equal(kdev_rpc_status_name(-1), "UNKNOWN");
}

static void check_enc(const char *in, const char *want)
{
        char *s = kdev_rpc_percent_encode(in);
        assert_non_null(s);
        assert_string_equal(s, want);
        char *back = kdev_rpc_percent_decode(s, strlen(s));
        assert_string_equal(back, in);
        free(s);
        free(back);
}

static void test_percent_encode(void **state)
{
        (void)state;
        check_enc("", "");
        check_enc("plain text ~!", "plain text ~!");
        check_enc("100%", "100%25");
        check_enc("a\nb\tc", "a%0Ab%09c");
        check_enc("\xc3\xa9t\xc3\xa9", "%C3%A9t%C3%A9");
        check_enc("\x7f", "%7F");
}

static void check_dec(const char *in, const char *want)
{
        char *s = kdev_rpc_percent_decode(in, strlen(in));
        assert_non_null(s);
        assert_string_equal(s, want);
        free(s);
}

static void test_percent_decode(void **state)
{
        (void)state;
        check_dec("%c3%a9", "\xc3\xa9"); /* lower-case hex is accepted */
        check_dec("%zz", "%zz");         /* invalid escapes kept verbatim */
        check_dec("50%", "50%");
        check_dec("%4", "%4");
        check_dec("%%41", "%A");
        /* |len| bounds the input */
        char *s = kdev_rpc_percent_decode("abc%41", 4);
        assert_string_equal(s, "abc%");
        free(s);
}

static void check_timeout(const char *v, int rv, uint64_t ms)
{
        uint64_t got = 12345;
        assert_int_equal(kdev_rpc__timeout_parse(v, strlen(v), &got), rv);
        if (rv == 0)
                assert_int_equal(got, ms);
}

static void test_timeout_parse(void **state)
{
        (void)state;
        check_timeout("1H", 0, 3600000);
        check_timeout("2M", 0, 120000);
        check_timeout("3S", 0, 3000);
        check_timeout("250m", 0, 250);
        check_timeout("1500u", 0, 2); /* rounded up */
        check_timeout("1n", 0, 1);
        check_timeout("0m", 0, 0);
        check_timeout("99999999H", 0, 99999999ull * 3600000u);
        check_timeout("", -EINVAL, 0);
        check_timeout("m", -EINVAL, 0);
        check_timeout("123456789m", -EINVAL, 0); /* at most 8 digits */
        check_timeout("10x", -EINVAL, 0);
        check_timeout("1.5S", -EINVAL, 0);
        check_timeout("-1S", -EINVAL, 0);
        check_timeout("10", -EINVAL, 0);
}

static void check_fmt(uint64_t ms, const char *want)
{
        char buf[32];
        size_t n = kdev_rpc__timeout_format(ms, buf, sizeof(buf));
        assert_string_equal(buf, want);
        assert_int_equal(n, strlen(want));
}

static void test_timeout_format(void **state)
{
        (void)state;
        check_fmt(1, "1m");
        check_fmt(250, "250m");
        check_fmt(99999999, "99999999m");
        check_fmt(100000000, "100000S");
        check_fmt(100000001, "100001S"); /* rounded up, never shorter */
        check_fmt(99999999ull * 1000u + 1, "1666667M");
}

static void check_ct(const char *v, bool ok, bool grpc)
{
        bool g = !grpc;
        assert_int_equal(kdev_rpc__content_type_ok(v, strlen(v), &g), ok);
        assert_int_equal(g, grpc);
}

static void test_content_type(void **state)
{
        (void)state;
        check_ct("application/grpc", true, true);
        check_ct("application/grpc+proto", true, true);
        check_ct("application/grpc;charset=utf-8", true, true);
        check_ct("application/grpc+proto;x=y", true, true);
        check_ct("application/grpc+json", false, true);
        check_ct("application/grpcx", false, false);
        check_ct("application/json", false, false);
        check_ct("text/html", false, false);
        check_ct("", false, false);
}

static void test_prefix(void **state)
{
        (void)state;
        uint8_t p[5];
        kdev_rpc__put_prefix(p, 0x01020304u);
        assert_memory_equal(p, "\x00\x01\x02\x03\x04", 5);
        kdev_rpc__put_prefix(p, 4194304u);
        assert_memory_equal(p, "\x00\x00\x40\x00\x00", 5);
}

/* kdev_rpc__prefix_take: a prefix split over chunks (2 + 1 + 4 bytes, the
 * last chunk carrying 2 message bytes), then one in a single chunk. */
static void test_prefix_take(void **state)
{
        (void)state;
        static const uint8_t in[] = { 0x01, 0xaa, 0xbb, 0xcc, 0xdd, 'h', 'i' };
        uint8_t prefix[KDEV_RPC_PREFIX_LEN], flags = 9;
        size_t got = 0, n = 2;
        uint32_t len = 7;
        const uint8_t *d = in;
        assert_false(kdev_rpc__prefix_take(prefix, &got, &d, &n, &flags, &len));
        assert_int_equal(got, 2);
        assert_int_equal(n, 0);
        assert_ptr_equal(d, in + 2);
        n = 1;
        assert_false(kdev_rpc__prefix_take(prefix, &got, &d, &n, &flags, &len));
        assert_int_equal(got, 3);
        assert_int_equal(flags, 9); /* untouched until complete */
        assert_int_equal(len, 7);
        n = 4;
        assert_true(kdev_rpc__prefix_take(prefix, &got, &d, &n, &flags, &len));
        assert_int_equal(got, 5);
        assert_int_equal(n, 2);
        assert_ptr_equal(d, in + 5);
        assert_int_equal(flags, 1);
        assert_int_equal(len, 0xaabbccddu);

        uint8_t f[KDEV_RPC_PREFIX_LEN + 1];
        kdev_rpc__put_prefix(f, 4194304u);
        f[KDEV_RPC_PREFIX_LEN] = 'x';
        got = 0;
        n = sizeof(f);
        d = f;
        assert_true(kdev_rpc__prefix_take(prefix, &got, &d, &n, &flags, &len));
        assert_int_equal(flags, 0);
        assert_int_equal(len, 4194304u);
        assert_int_equal(n, 1);
        assert_int_equal(*d, 'x');
}

static void test_prefix_check(void **state)
{
        (void)state;
        char msg[160] = "";
        assert_int_equal(kdev_rpc__prefix_check(0, 100, 100, false, msg, sizeof(msg)),
                         KDEV_RPC_OK);
        assert_int_equal(kdev_rpc__prefix_check(1, 1, 100, false, msg, sizeof(msg)),
                         KDEV_RPC_UNIMPLEMENTED);
        assert_string_equal(msg, "compressed messages are not supported");
        assert_int_equal(kdev_rpc__prefix_check(2, 1, 100, false, msg, sizeof(msg)),
                         KDEV_RPC_INTERNAL);
        assert_string_equal(msg, "invalid message flags");
        assert_int_equal(kdev_rpc__prefix_check(0x80, 1, 100, true, msg, sizeof(msg)),
                         KDEV_RPC_INTERNAL);
        assert_string_equal(msg, "invalid message flags in response");
        assert_int_equal(kdev_rpc__prefix_check(0, 101, 100, true, msg, sizeof(msg)),
                         KDEV_RPC_RESOURCE_EXHAUSTED);
        assert_string_equal(msg, "received message larger than max (101 vs. 100)");
        kdev_rpc__send_too_large(msg, sizeof(msg), 11, 10);
        assert_string_equal(msg, "trying to send message larger than max (11 vs. 10)");
}

static void test_frame_and_body_take(void **state)
{
        (void)state;
        uint8_t *f = kdev_rpc__frame((const uint8_t *)"abc", 3);
        assert_non_null(f);
        assert_memory_equal(f, "\0\0\0\0\3abc", 8);
        /* the body arrives in pieces of 2 and 5 bytes, the second one
         * carrying 3 bytes of the next message */
        uint8_t body[4];
        size_t got = 0, n = 2;
        const uint8_t *d = (const uint8_t *)"wxyz123";
        assert_false(kdev_rpc__body_take(body, &got, 4, &d, &n));
        assert_int_equal(got, 2);
        assert_int_equal(n, 0);
        n = 5;
        assert_true(kdev_rpc__body_take(body, &got, 4, &d, &n));
        assert_memory_equal(body, "wxyz", 4);
        assert_int_equal(n, 3);
        assert_memory_equal(d, "123", 3);
        free(f);
        f = kdev_rpc__frame(NULL, 0);
        assert_non_null(f);
        assert_memory_equal(f, "\0\0\0\0\0", 5);
        free(f);
}

static void test_outq(void **state)
{
        (void)state;
        struct kdev_rpc_outq q = { 0 };
        uint8_t buf[8];
        assert_int_equal(kdev_rpc__outq_read(&q, buf, sizeof(buf)), 0);
        uint8_t *a = malloc(4);
        memcpy(a, "abcd", 4);
        assert_int_equal(kdev_rpc__outq_append(&q, a, 4), 0);
        assert_ptr_equal(q.buf, a); /* empty queue: no copy */
        assert_int_equal(kdev_rpc__outq_read(&q, buf, 3), 3);
        assert_memory_equal(buf, "abc", 3);
        uint8_t *b = malloc(2);
        memcpy(b, "ef", 2);
        assert_int_equal(kdev_rpc__outq_append(&q, b, 2), 0);
        assert_int_equal(kdev_rpc__outq_unsent(&q), 3);
        assert_int_equal(kdev_rpc__outq_read(&q, buf, sizeof(buf)), 3);
        assert_memory_equal(buf, "def", 3);
        assert_null(q.buf); /* drained: nothing held */
        assert_int_equal(q.len, 0);
        kdev_rpc__outq_free(&q);
}

static void test_status_trailers(void **state)
{
        (void)state;
        nghttp2_nv nv[2];
        char code[16];
        assert_int_equal(kdev_rpc__status_nv(nv, code, 14, "busy%20now"), 2);
        assert_memory_equal(nv[0].name, "grpc-status", nv[0].namelen);
        assert_int_equal(nv[0].valuelen, 2);
        assert_memory_equal(nv[0].value, "14", 2);
        assert_memory_equal(nv[1].name, "grpc-message", nv[1].namelen);
        assert_memory_equal(nv[1].value, "busy%20now", nv[1].valuelen);
        assert_int_equal(kdev_rpc__status_nv(nv, code, 0, ""), 1);
        assert_int_equal(kdev_rpc__status_nv(nv, code, 0, NULL), 1);
        assert_memory_equal(nv[0].value, "0", 1);
        assert_int_equal(kdev_rpc__status_nv(nv, code, 16, NULL), 1);
        assert_int_equal(nv[0].valuelen, 2);
        assert_memory_equal(nv[0].value, "16", 2);
        kdev_rpc__status_nv(nv, code, -2147483647 - 1, NULL);
        assert_string_equal(code, "-2147483648");
        assert_int_equal(nv[0].valuelen, 11);

        assert_int_equal(kdev_rpc__status_parse((const uint8_t *)"5", 1), KDEV_RPC_NOT_FOUND);
        assert_int_equal(kdev_rpc__status_parse((const uint8_t *)"x", 1), KDEV_RPC_UNKNOWN);
        assert_int_equal(kdev_rpc__status_parse((const uint8_t *)"", 0), KDEV_RPC_UNKNOWN);
        assert_int_equal(kdev_rpc__status_parse((const uint8_t *)"1000001", 7), KDEV_RPC_UNKNOWN);
        assert_int_equal(kdev_rpc__parse_uint((const uint8_t *)"200", 3, 999), 200);
        assert_int_equal(kdev_rpc__parse_uint((const uint8_t *)"1000", 4, 999), -1);

        assert_int_equal(kdev_rpc__status_from_http(400), KDEV_RPC_INTERNAL);
        assert_int_equal(kdev_rpc__status_from_http(401), KDEV_RPC_UNAUTHENTICATED);
        assert_int_equal(kdev_rpc__status_from_http(403), KDEV_RPC_PERMISSION_DENIED);
        assert_int_equal(kdev_rpc__status_from_http(404), KDEV_RPC_UNIMPLEMENTED);
        assert_int_equal(kdev_rpc__status_from_http(503), KDEV_RPC_UNAVAILABLE);
        assert_int_equal(kdev_rpc__status_from_http(500), KDEV_RPC_UNKNOWN);
        assert_int_equal(kdev_rpc__status_from_h2(NGHTTP2_REFUSED_STREAM), KDEV_RPC_UNAVAILABLE);
        assert_int_equal(kdev_rpc__status_from_h2(NGHTTP2_CANCEL), KDEV_RPC_CANCELLED);
        assert_int_equal(kdev_rpc__status_from_h2(NGHTTP2_ENHANCE_YOUR_CALM),
                         KDEV_RPC_RESOURCE_EXHAUSTED);
        assert_int_equal(kdev_rpc__status_from_h2(NGHTTP2_INADEQUATE_SECURITY),
                         KDEV_RPC_PERMISSION_DENIED);
        assert_int_equal(kdev_rpc__status_from_h2(NGHTTP2_PROTOCOL_ERROR), KDEV_RPC_INTERNAL);
}

static void test_code_names(void **state)
{
        (void)state;
        static const char *const want[] = {
                "OK", "Canceled", "Unknown", "InvalidArgument", "DeadlineExceeded", "NotFound",
                "AlreadyExists", "PermissionDenied", "ResourceExhausted", "FailedPrecondition",
                "Aborted", "OutOfRange", "Unimplemented", "Internal", "Unavailable", "DataLoss",
                "Unauthenticated",
        };
        char buf[32];
        for (int i = 0; i <= 16; i++)
                assert_string_equal(kdev_rpc_code_name(i, buf, sizeof(buf)), want[i]);
        assert_string_equal(kdev_rpc_code_name(17, buf, sizeof(buf)), "Code(17)");
        assert_string_equal(kdev_rpc_code_name(-1, buf, sizeof(buf)), "Code(-1)");
}

int main(void)
{
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_status_names),
                cmocka_unit_test(test_code_names),
                cmocka_unit_test(test_percent_encode),
                cmocka_unit_test(test_percent_decode), cmocka_unit_test(test_timeout_parse),
                cmocka_unit_test(test_timeout_format), cmocka_unit_test(test_content_type),
                cmocka_unit_test(test_prefix),         cmocka_unit_test(test_prefix_take),
                cmocka_unit_test(test_prefix_check),   cmocka_unit_test(test_frame_and_body_take),
                cmocka_unit_test(test_outq),           cmocka_unit_test(test_status_trailers),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
