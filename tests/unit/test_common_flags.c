/* The daemons' shared flag and environment validators (common/flags.h). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "common/flags.h"

static void test_dns_subdomain(void **state)
{
        (void)state;
        assert_true(kdev_dns_subdomain("node-1", 253));
        assert_true(kdev_dns_subdomain("gpu.nvidia.com", 63));
        assert_true(kdev_dns_subdomain("a", 1));
        assert_true(kdev_dns_subdomain("0.a-b.9", 253));
        assert_false(kdev_dns_subdomain("", 253));
        assert_false(kdev_dns_subdomain("ab", 1));       /* longer than max */
        assert_false(kdev_dns_subdomain("Node", 253));   /* upper case */
        assert_false(kdev_dns_subdomain("-a", 253));     /* '-' at an edge */
        assert_false(kdev_dns_subdomain("a-", 253));
        assert_false(kdev_dns_subdomain("a.-b", 253));   /* '-' at a label's edge */
        assert_false(kdev_dns_subdomain("a..b", 253));   /* empty label */
        assert_false(kdev_dns_subdomain(".a", 253));
        assert_false(kdev_dns_subdomain("a_b", 253));
        char name[300];
        memset(name, 'a', 253);
        name[253] = '\0';
        assert_true(kdev_dns_subdomain(name, 253));
        name[253] = 'a';
        name[254] = '\0';
        assert_false(kdev_dns_subdomain(name, 253));
}

static void test_seconds(void **state)
{
        (void)state;
        double s = -1;
        assert_true(kdev_seconds_parse("1", 86400, &s));
        assert_true(s == 1.0);
        assert_true(kdev_seconds_parse("0.5", 86400, &s));
        assert_true(s == 0.5);
        assert_true(kdev_seconds_parse("86400", 86400, &s));
        assert_true(s == 86400.0);
        assert_true(kdev_seconds_parse("1e2", 86400, &s));
        assert_true(s == 100.0);
        s = 7;
        assert_false(kdev_seconds_parse("0", 86400, &s));
        assert_false(kdev_seconds_parse("-1", 86400, &s));
        assert_false(kdev_seconds_parse("86400.5", 86400, &s));
        assert_false(kdev_seconds_parse("1s", 86400, &s));
        assert_false(kdev_seconds_parse("", 86400, &s));
        assert_false(kdev_seconds_parse("nan", 86400, &s));
        assert_true(s == 7); /* untouched */

        unsigned long long u = 9;
        assert_true(kdev_whole_seconds_parse("1", 1, 86400, &u));
        assert_int_equal(u, 1);
        assert_true(kdev_whole_seconds_parse("86400", 1, 86400, &u));
        assert_int_equal(u, 86400);
        u = 9;
        assert_false(kdev_whole_seconds_parse("0", 1, 86400, &u));
        assert_false(kdev_whole_seconds_parse("86401", 1, 86400, &u));
        assert_false(kdev_whole_seconds_parse("+5", 1, 86400, &u));
        assert_false(kdev_whole_seconds_parse(" 5", 1, 86400, &u));
        assert_false(kdev_whole_seconds_parse("1.5", 1, 86400, &u));
        assert_false(kdev_whole_seconds_parse("99999999999999999999999", 1, 86400, &u));
        assert_int_equal(u, 9);
}

static void usage_stub(FILE *f)
{
        fputs("usage text\n", f);
}

/* kdev_flag_common on the codes it owns; -1 for others; bad values 2. */
static void test_common(void **state)
{
        (void)state;
        struct kdev_flag_common c = {.level = KDEV_LOG_INFO};
        assert_int_equal(kdev_flag_common("p", KDEV_FLAG_LOG_LEVEL, "debug", &c, usage_stub), 1);
        assert_int_equal(c.level, KDEV_LOG_DEBUG);
        assert_int_equal(kdev_flag_common("p", KDEV_FLAG_LOG_FORMAT, "json", &c, usage_stub), 1);
        assert_true(c.json);
        assert_int_equal(kdev_flag_common("p", KDEV_FLAG_LOG_LEVEL, "loud", &c, usage_stub), 2);
        assert_int_equal(c.level, KDEV_LOG_DEBUG);
        assert_int_equal(kdev_flag_common("p", KDEV_FLAG_LOG_FORMAT, "xml", &c, usage_stub), 2);
        assert_true(c.json);
        assert_int_equal(kdev_flag_common("p", 'c', "x", &c, usage_stub), -1);
        assert_int_equal(kdev_flag_common("p", '?', NULL, &c, usage_stub), -1);
        char *argv[] = {"p", "extra", NULL};
        assert_int_equal(kdev_flag_no_operands("p", -1, 2, argv, 1), 2);
        assert_int_equal(kdev_flag_no_operands("p", -1, 2, argv, 2), -1);
        assert_int_equal(kdev_flag_no_operands("p", 0, 2, argv, 1), 0);
        assert_int_equal(kdev_flag_finish("p", 2), 2);
        assert_int_equal(kdev_flag_finish("p", -1), -1);
        const struct kdev_flag_path paths[] = {{"a", "/x"}, {"b", NULL}, {"c", ""}, {"d", ""}};
        assert_true(kdev_flag_paths_nonempty("p", paths, 2));
        assert_false(kdev_flag_paths_nonempty("p", paths, 4));
}

/* What a usage error prints on stderr, exactly. */
static void test_messages(void **state)
{
        (void)state;
        char path[] = "/tmp/kdev-flags-XXXXXX";
        int fd = mkstemp(path);
        assert_true(fd >= 0);
        fflush(stderr);
        int saved = dup(STDERR_FILENO);
        assert_true(dup2(fd, STDERR_FILENO) >= 0);
        struct kdev_flag_common c = {.level = KDEV_LOG_INFO};
        char *argv[] = {"p", "extra", NULL};
        const struct kdev_flag_path paths[] = {{"cdi-dir", ""}};
        kdev_flag_common("kdev-x", KDEV_FLAG_LOG_LEVEL, "loud", &c, usage_stub);
        kdev_flag_common("kdev-x", KDEV_FLAG_LOG_FORMAT, "xml", &c, usage_stub);
        kdev_flag_no_operands("kdev-x", -1, 2, argv, 1);
        kdev_flag_paths_nonempty("kdev-x", paths, 1);
        kdev_flag_finish("kdev-x", 2);
        fflush(stderr);
        assert_true(dup2(saved, STDERR_FILENO) >= 0);
        close(saved);
        char text[1024] = "";
        ssize_t n = pread(fd, text, sizeof(text) - 1, 0);
        close(fd);
        unlink(path);
        assert_true(n > 0);
        text[n] = '\0';
        assert_string_equal(text,
                            "kdev-x: invalid --log-level \"loud\": want debug, info, warn or error\n"
                            "kdev-x: invalid --log-format \"xml\": want text or json\n"
                            "kdev-x: unexpected argument \"extra\"\n"
                            "kdev-x: --cdi-dir must not be empty\n"
                            "Run 'kdev-x --help' for the options.\n");
}

int main(void)
{
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_dns_subdomain),
                cmocka_unit_test(test_seconds),
                cmocka_unit_test(test_common),
                cmocka_unit_test(test_messages),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
