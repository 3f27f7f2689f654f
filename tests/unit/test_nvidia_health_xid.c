/* XID policy (src/nvidia/xid.h): DP_DISABLE_HEALTHCHECKS and
 * DP_ENABLE_HEALTHCHECKS with NVIDIA's semantics (internal/rm/health.go), table
 * driven, with exact ignored lists, critical answers and warnings. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "nvidia/xid.h"

#define END (~0ull)   /* list terminator in the tables */

struct warns {
        char msg[8][160];
        int n;
};

static void on_warn(void *arg, const char *msg)
{
        struct warns *w = arg;
        if (w->n < 8)
                snprintf(w->msg[w->n], sizeof(w->msg[0]), "%s", msg);
        w->n++;
}

struct policy_case {
        const char *disable, *enable;
        bool disabled, monitor_all;
        unsigned long long ignored[12];  /* exact, ascending, END-terminated */
        const char *warn[6];             /* exact warnings, in order */
        unsigned long long critical[6];  /* XIDs that must be critical, END-terminated */
        unsigned long long benign[6];    /* XIDs that must be ignored, END-terminated */
};

static const struct policy_case cases[] = {
        /* defaults */
        { NULL, NULL, false, false, { 13, 31, 43, 45, 68, 109, END }, { NULL },
          { 48, 79, 94, 0, 110, END }, { 13, 31, 43, 45, 68, END } },
        { "", "", false, false, { 13, 31, 43, 45, 68, 109, END }, { NULL },
          { 48, 79, END }, { 109, END } },
        /* extra ignored XIDs, trimmed, duplicates, empty elements */
        { " 79 ,48,,79, 13", NULL, false, false, { 13, 31, 43, 45, 48, 68, 79, 109, END },
          { NULL }, { 94, 63, END }, { 79, 48, 13, END } },
        /* leading zeros are decimal, not octal */
        { "079", NULL, false, false, { 13, 31, 43, 45, 68, 79, 109, END }, { NULL },
          { 63, END }, { 79, END } },
        /* all / xids, any case, switch checks off entirely */
        { "all", NULL, true, false, { END }, { NULL }, { END }, { 79, 48, 13, END } },
        { " ALL ", "", true, false, { END }, { NULL }, { END }, { 79, END } },
        { "xids", NULL, true, false, { END }, { NULL }, { END }, { 79, END } },
        { "79,Xids", NULL, true, false, { END }, { NULL }, { END }, { 79, END } },
        /* disable=all wins over a list of enabled XIDs */
        { "all", "79,48", true, false, { END }, { NULL }, { END }, { 79, 48, END } },
        /* ... but not over enable=all: every XID monitored */
        { "all", "all", false, true, { END }, { NULL }, { 13, 31, 79, 109, END }, { END } },
        { "xids", "XIDS", false, true, { END }, { NULL }, { 13, 43, END }, { END } },
        /* enable=all alone monitors the default-ignored XIDs too */
        { "", "all", false, true, { END }, { NULL }, { 13, 31, 43, 45, 68, 109 }, { END } },
        { "79", "all", false, true, { END }, { NULL }, { 79, 13, END }, { END } },
        /* enable single XIDs: default-ignored and disabled ones */
        { NULL, "13,109", false, false, { 31, 43, 45, 68, END }, { NULL },
          { 13, 109, 79, END }, { 31, 43, 45, 68, END } },
        { "79,48", "79", false, false, { 13, 31, 43, 45, 48, 68, 109, END }, { NULL },
          { 79, END }, { 48, 13, END } },
        /* malformed elements: warned and skipped, the rest still applies */
        { "abc,79,-1,+5,0x4f,7 9,18446744073709551616", NULL, false, false,
          { 13, 31, 43, 45, 68, 79, 109, END },
          { "DP_DISABLE_HEALTHCHECKS: ignoring malformed XID value \"abc\"",
            "DP_DISABLE_HEALTHCHECKS: ignoring malformed XID value \"-1\"",
            "DP_DISABLE_HEALTHCHECKS: ignoring malformed XID value \"+5\"",
            "DP_DISABLE_HEALTHCHECKS: ignoring malformed XID value \"0x4f\"",
            "DP_DISABLE_HEALTHCHECKS: ignoring malformed XID value \"7 9\"",
            "DP_DISABLE_HEALTHCHECKS: ignoring malformed XID value \"18446744073709551616\"" },
          { 48, END }, { 79, END } },
        /* the list stops at "all": nothing after it is read or warned about */
        { "all,bogus", NULL, true, false, { END }, { NULL }, { END }, { 79, END } },
        { "Bogus,all", NULL, true, false, { END },
          { "DP_DISABLE_HEALTHCHECKS: ignoring malformed XID value \"bogus\"" }, { END },
          { 79, END } },
        /* malformed in the enable list */
        { NULL, "13,x1", false, false, { 31, 43, 45, 68, 109, END },
          { "DP_ENABLE_HEALTHCHECKS: ignoring malformed XID value \"x1\"" }, { 13, END },
          { 31, END } },
        /* "0" is an ordinary XID in kdev (NVIDIA's map would read it as "all") */
        { "0", NULL, false, false, { 0, 13, 31, 43, 45, 68, 109, END }, { NULL }, { 79, END },
          { 0, END } },
        { NULL, "0", false, false, { 13, 31, 43, 45, 68, 109, END }, { NULL }, { 0, 79, END },
          { 13, END } },
};

static size_t count_list(const unsigned long long *l, size_t max)
{
        size_t n = 0;
        while (n < max && l[n] != END)
                n++;
        return n;
}

static void test_policy_table(void **state)
{
        (void)state;
        for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
                const struct policy_case *t = &cases[c];
                struct kdev_xid_policy p;
                struct warns w = { .n = 0 };
                struct kdev_err e;
                print_message("case %zu: disable=%s enable=%s\n", c,
                              t->disable ? t->disable : "(unset)",
                              t->enable ? t->enable : "(unset)");
                assert_int_equal(kdev_xid_policy_parse(t->disable, t->enable, &p, on_warn, &w,
                                                       &e),
                                 0);
                assert_int_equal(p.disabled, t->disabled);
                assert_int_equal(p.monitor_all, t->monitor_all);
                size_t n = count_list(t->ignored, 12);
                assert_int_equal(p.n_ignored, n);
                for (size_t i = 0; i < n; i++)
                        assert_true(p.ignored[i] == t->ignored[i]);
                int nw = 0;
                while (nw < 6 && t->warn[nw])
                        nw++;
                assert_int_equal(w.n, nw);
                for (int i = 0; i < nw; i++)
                        assert_string_equal(w.msg[i], t->warn[i]);
                for (size_t i = 0; i < 6 && t->critical[i] != END; i++)
                        assert_true(kdev_xid_is_critical(&p, t->critical[i]));
                for (size_t i = 0; i < 6 && t->benign[i] != END; i++)
                        assert_false(kdev_xid_is_critical(&p, t->benign[i]));
                kdev_xid_policy_clear(&p);
                assert_null(p.ignored);
        }
}

/* 5 malformed values: all warned, in order, and NULL warn callbacks work. */
static void test_warnings_all_and_null_callback(void **state)
{
        (void)state;
        struct kdev_xid_policy p;
        struct warns w = { .n = 0 };
        assert_int_equal(kdev_xid_policy_parse("a,b,c", "d,e", &p, on_warn, &w, NULL), 0);
        assert_int_equal(w.n, 5);
        assert_string_equal(w.msg[3], "DP_ENABLE_HEALTHCHECKS: ignoring malformed XID value \"d\"");
        assert_int_equal(p.n_ignored, 6);
        kdev_xid_policy_clear(&p);
        assert_int_equal(kdev_xid_policy_parse("a,79", NULL, &p, NULL, NULL, NULL), 0);
        assert_int_equal(p.n_ignored, 7);
        assert_false(kdev_xid_is_critical(&p, 79));
        kdev_xid_policy_clear(&p);
        /* the largest 64-bit value is an XID (the table uses it as terminator) */
        assert_int_equal(kdev_xid_policy_parse("18446744073709551615", NULL, &p, on_warn, &w,
                                               NULL),
                         0);
        assert_int_equal(w.n, 5);
        assert_int_equal(p.n_ignored, 7);
        assert_true(p.ignored[6] == UINT64_MAX);
        assert_false(kdev_xid_is_critical(&p, UINT64_MAX));
        assert_true(kdev_xid_is_critical(&p, UINT64_MAX - 1));
        kdev_xid_policy_clear(&p);
        /* a long malformed value is shown cut at 64 bytes */
        char longv[200];
        memset(longv, 'z', sizeof(longv) - 1);
        longv[sizeof(longv) - 1] = '\0';
        w.n = 0;
        assert_int_equal(kdev_xid_policy_parse(longv, NULL, &p, on_warn, &w, NULL), 0);
        assert_int_equal(w.n, 1);
        char want[160];
        snprintf(want, sizeof(want),
                 "DP_DISABLE_HEALTHCHECKS: ignoring malformed XID value \"%.64s\"", longv);
        assert_string_equal(w.msg[0], want);
        kdev_xid_policy_clear(&p);
}

static void test_from_env(void **state)
{
        (void)state;
        struct kdev_xid_policy p;
        setenv("DP_DISABLE_HEALTHCHECKS", "48", 1);
        setenv("DP_ENABLE_HEALTHCHECKS", "31", 1);
        assert_int_equal(kdev_xid_policy_from_env(&p, NULL, NULL, NULL), 0);
        assert_int_equal(p.n_ignored, 6);
        const unsigned long long want[] = { 13, 43, 45, 48, 68, 109 };
        for (size_t i = 0; i < 6; i++)
                assert_true(p.ignored[i] == want[i]);
        kdev_xid_policy_clear(&p);
        setenv("DP_DISABLE_HEALTHCHECKS", "all", 1);
        unsetenv("DP_ENABLE_HEALTHCHECKS");
        assert_int_equal(kdev_xid_policy_from_env(&p, NULL, NULL, NULL), 0);
        assert_true(p.disabled);
        kdev_xid_policy_clear(&p);
        unsetenv("DP_DISABLE_HEALTHCHECKS");
}

static void test_copy_and_describe(void **state)
{
        (void)state;
        struct kdev_xid_policy p, q;
        char buf[128];
        assert_int_equal(kdev_xid_policy_parse("79", NULL, &p, NULL, NULL, NULL), 0);
        assert_int_equal(kdev_xid_policy_copy(&q, &p, NULL), 0);
        assert_ptr_not_equal(q.ignored, p.ignored);
        kdev_xid_policy_clear(&p);
        assert_int_equal(q.n_ignored, 7);
        assert_int_equal(kdev_xid_policy_describe(&q, buf, sizeof(buf)),
                         strlen("ignored XIDs: 13,31,43,45,68,79,109"));
        assert_string_equal(buf, "ignored XIDs: 13,31,43,45,68,79,109");
        /* truncated */
        assert_int_equal(kdev_xid_policy_describe(&q, buf, 20), 19);
        assert_string_equal(buf, "ignored XIDs: 13...");
        kdev_xid_policy_clear(&q);

        assert_int_equal(kdev_xid_policy_parse(NULL, "13,31,43,45,68,109", &p, NULL, NULL, NULL),
                         0);
        assert_int_equal(p.n_ignored, 0);
        assert_null(p.ignored);
        kdev_xid_policy_describe(&p, buf, sizeof(buf));
        assert_string_equal(buf, "ignored XIDs: none");
        assert_true(kdev_xid_is_critical(&p, 13));
        assert_int_equal(kdev_xid_policy_copy(&q, &p, NULL), 0);
        assert_null(q.ignored);
        kdev_xid_policy_clear(&p);
        kdev_xid_policy_clear(&q);

        assert_int_equal(kdev_xid_policy_parse("all", NULL, &p, NULL, NULL, NULL), 0);
        kdev_xid_policy_describe(&p, buf, sizeof(buf));
        assert_string_equal(buf, "health checks disabled");
        kdev_xid_policy_clear(&p);
        assert_int_equal(kdev_xid_policy_parse(NULL, "all", &p, NULL, NULL, NULL), 0);
        kdev_xid_policy_describe(&p, buf, sizeof(buf));
        assert_string_equal(buf, "all XIDs critical");
        kdev_xid_policy_clear(&p);

        kdev_xid_policy_clear(NULL);
}

int main(void)
{
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_policy_table),
                cmocka_unit_test(test_warnings_all_and_null_callback),
                cmocka_unit_test(test_from_env),
                cmocka_unit_test(test_copy_and_describe),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
