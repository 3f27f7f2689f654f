/* Structured logging (src/common/log.c): exact text and JSON lines, the level
 * filter, quoting and escaping of values, option parsing. stderr is captured
 * by dup2()ing a temporary file onto fd 2. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "common/log.h"

/* 2026-11-29T11:00:00.123Z */
static int fixed_clock(struct timespec *ts)
{
        ts->tv_sec = 1795950000;
        ts->tv_nsec = 123456789;
        return 0;
}

struct capture {
        FILE *tmp;
        int saved_fd;
};

static void capture_start(struct capture *c)
{
        fflush(stderr);
        c->tmp = tmpfile();
        assert_non_null(c->tmp);
        c->saved_fd = dup(STDERR_FILENO);
        assert_true(c->saved_fd >= 0);
        assert_true(dup2(fileno(c->tmp), STDERR_FILENO) >= 0);
}

/* Restores stderr and returns what was written (malloc'ed). */
static char *capture_end(struct capture *c)
{
        fflush(stderr);
        assert_true(dup2(c->saved_fd, STDERR_FILENO) >= 0);
        close(c->saved_fd);
        /* Written through fd 2, so the fd's offset holds the length. */
        off_t len = lseek(fileno(c->tmp), 0, SEEK_END);
        assert_true(len >= 0);
        char *buf = calloc(1, (size_t)len + 1);
        assert_non_null(buf);
        assert_int_equal(pread(fileno(c->tmp), buf, (size_t)len, 0), len);
        fclose(c->tmp);
        return buf;
}

static int setup(void **state)
{
        (void)state;
        kdev_log_set_clock(fixed_clock);
        kdev_log_setup(KDEV_LOG_INFO, false);
        return 0;
}

static int teardown(void **state)
{
        (void)state;
        kdev_log_set_clock(NULL);
        kdev_log_setup(KDEV_LOG_INFO, false);
        return 0;
}

static void test_text_line(void **state)
{
        (void)state;
        struct capture c;
        capture_start(&c);
        kdev_log_info("registered", "resource", "nvidia.com/gpu", "devices", "8");
        kdev_log_warn("no keys");
        char *out = capture_end(&c);
        assert_string_equal(out,
                            "ts=2026-11-29T11:00:00.123Z level=info msg=\"registered\" "
                            "resource=nvidia.com/gpu devices=8\n"
                            "ts=2026-11-29T11:00:00.123Z level=warn msg=\"no keys\"\n");
        free(out);
}

static void test_json_line(void **state)
{
        (void)state;
        struct capture c;
        kdev_log_setup(KDEV_LOG_INFO, true);
        capture_start(&c);
        kdev_log_error("allocate failed", "resource", "nvidia.com/gpu", "error",
                       "unknown device \"gpu-9\"");
        char *out = capture_end(&c);
        assert_string_equal(out,
                            "{\"ts\":\"2026-11-29T11:00:00.123Z\",\"level\":\"error\","
                            "\"msg\":\"allocate failed\",\"resource\":\"nvidia.com/gpu\","
                            "\"error\":\"unknown device \\\"gpu-9\\\"\"}\n");
        free(out);
}

static void test_level_filter(void **state)
{
        (void)state;
        struct capture c;
        kdev_log_setup(KDEV_LOG_WARN, false);
        assert_false(kdev_log_enabled(KDEV_LOG_DEBUG));
        assert_false(kdev_log_enabled(KDEV_LOG_INFO));
        assert_true(kdev_log_enabled(KDEV_LOG_WARN));
        assert_true(kdev_log_enabled(KDEV_LOG_ERROR));
        capture_start(&c);
        kdev_log_debug("d");
        kdev_log_info("i");
        kdev_log(KDEV_LOG_INFO, "direct call below the minimum", NULL);
        kdev_log_warn("w");
        kdev_log_error("e");
        char *out = capture_end(&c);
        assert_string_equal(out, "ts=2026-11-29T11:00:00.123Z level=warn msg=\"w\"\n"
                                 "ts=2026-11-29T11:00:00.123Z level=error msg=\"e\"\n");
        free(out);

        kdev_log_setup(KDEV_LOG_DEBUG, true);
        capture_start(&c);
        kdev_log_debug("d", "k", "v");
        out = capture_end(&c);
        assert_string_equal(out, "{\"ts\":\"2026-11-29T11:00:00.123Z\",\"level\":\"debug\","
                                 "\"msg\":\"d\",\"k\":\"v\"}\n");
        free(out);

        kdev_log_setup(KDEV_LOG_ERROR, true);
        capture_start(&c);
        kdev_log_warn("w");
        out = capture_end(&c);
        assert_string_equal(out, "");
        free(out);
}

static void test_text_quoting(void **state)
{
        (void)state;
        struct capture c;
        capture_start(&c);
        kdev_log_info("line\nbreak", "plain", "a/b:c,d-e_f.g", "space", "two words", "quote",
                      "say \"hi\"", "eq", "k=v", "empty", "", "null", (const char *)NULL, "tab",
                      "a\tb", "nl", "a\nb", "cr", "a\rb", "bs", "C:\\dir", "ctl", "\x01\x7f",
                      "utf8", "h\xc3\xa9");
        char *out = capture_end(&c);
        assert_string_equal(out, "ts=2026-11-29T11:00:00.123Z level=info msg=\"line\\nbreak\" "
                                 "plain=a/b:c,d-e_f.g space=\"two words\" quote=\"say \\\"hi\\\"\" "
                                 "eq=\"k=v\" empty=\"\" null=\"\" tab=\"a\\tb\" nl=\"a\\nb\" "
                                 "cr=\"a\\rb\" bs=\"C:\\\\dir\" ctl=\"\\u0001\\u007f\" "
                                 "utf8=h\xc3\xa9\n");
        free(out);
}

static void test_json_escaping(void **state)
{
        (void)state;
        struct capture c;
        kdev_log_setup(KDEV_LOG_INFO, true);
        capture_start(&c);
        kdev_log_info("m\"sg", "k\\ey", "a\nb\tc\rd\x1f", "empty", "", "null",
                      (const char *)NULL, "utf8", "h\xc3\xa9");
        char *out = capture_end(&c);
        assert_string_equal(out, "{\"ts\":\"2026-11-29T11:00:00.123Z\",\"level\":\"info\","
                                 "\"msg\":\"m\\\"sg\",\"k\\\\ey\":\"a\\nb\\tc\\rd\\u001f\","
                                 "\"empty\":\"\",\"null\":\"\",\"utf8\":\"h\xc3\xa9\"}\n");
        free(out);
}

static void test_real_clock(void **state)
{
        (void)state;
        struct capture c;
        kdev_log_set_clock(NULL);
        capture_start(&c);
        kdev_log_info("now");
        char *out = capture_end(&c);
        /* ts=YYYY-MM-DDTHH:MM:SS.mmmZ */
        assert_int_equal(strlen(out), strlen("ts=2026-11-29T11:00:00.123Z level=info msg=\"now\"\n"));
        assert_memory_equal(out, "ts=", 3);
        assert_int_equal(out[7], '-');
        assert_int_equal(out[13], 'T');
        assert_int_equal(out[22], '.');
        assert_int_equal(out[26], 'Z');
        assert_string_equal(out + 27, " level=info msg=\"now\"\n");
        free(out);
}

static void test_parse(void **state)
{
        (void)state;
        enum kdev_log_level lv = KDEV_LOG_ERROR;
        assert_int_equal(kdev_log_level_parse("debug", &lv), 0);
        assert_int_equal(lv, KDEV_LOG_DEBUG);
        assert_int_equal(kdev_log_level_parse("info", &lv), 0);
        assert_int_equal(lv, KDEV_LOG_INFO);
        assert_int_equal(kdev_log_level_parse("warn", &lv), 0);
        assert_int_equal(lv, KDEV_LOG_WARN);
        assert_int_equal(kdev_log_level_parse("error", &lv), 0);
        assert_int_equal(lv, KDEV_LOG_ERROR);
        assert_int_equal(kdev_log_level_parse("INFO", &lv), -EINVAL);
        assert_int_equal(kdev_log_level_parse("warning", &lv), -EINVAL);
        assert_int_equal(kdev_log_level_parse("", &lv), -EINVAL);
        assert_int_equal(lv, KDEV_LOG_ERROR);

        bool json = true;
        assert_int_equal(kdev_log_format_parse("text", &json), 0);
        assert_false(json);
        assert_int_equal(kdev_log_format_parse("json", &json), 0);
        assert_true(json);
        assert_int_equal(kdev_log_format_parse("JSON", &json), -EINVAL);
        assert_int_equal(kdev_log_format_parse("logfmt", &json), -EINVAL);
        assert_int_equal(kdev_log_format_parse("", &json), -EINVAL);
        assert_true(json);
}

/* --- limiter: a clock the test moves (ms after 2026-11-29T11:00:00Z) --- */

static uint64_t g_ms;

static int moving_clock(struct timespec *ts)
{
        ts->tv_sec = 1795950000 + (time_t)(g_ms / 1000);
        ts->tv_nsec = (long)(g_ms % 1000) * 1000000L;
        return 0;
}

/* |out| without the "ts=... " of each line, in place. */
static char *strip_ts(char *out)
{
        char *r = out, *w = out;
        while (*r) {
                if (strncmp(r, "ts=", 3) == 0) {
                        while (*r && *r != ' ')
                                r++;
                        if (*r == ' ')
                                r++;
                }
                while (*r && *r != '\n')
                        *w++ = *r++;
                if (*r == '\n')
                        *w++ = *r++;
        }
        *w = '\0';
        return out;
}

static void test_limiter_window(void **state)
{
        (void)state;
        struct capture c;
        struct kdev_log_limiter *l = kdev_log_limiter_new(5000);
        assert_non_null(l);
        kdev_log_set_clock(moving_clock);
        g_ms = 0;
        capture_start(&c);
        assert_true(kdev_log_limited(l, 1, KDEV_LOG_INFO, "ev", "gpu", "G0", "xid", "79", NULL));
        assert_false(kdev_log_limited(l, 1, KDEV_LOG_INFO, "ev", "gpu", "G0", "xid", "79", NULL));
        assert_false(kdev_log_limited(l, 10, KDEV_LOG_INFO, "ev", "gpu", "G0", "xid", "79", NULL));
        /* other pairs, other level: distinct events, printed */
        assert_true(kdev_log_limited(l, 1, KDEV_LOG_INFO, "ev", "gpu", "G0", "xid", "48", NULL));
        assert_true(kdev_log_limited(l, 1, KDEV_LOG_WARN, "ev", "gpu", "G0", "xid", "79", NULL));
        /* below the minimum level: neither printed nor counted */
        assert_false(kdev_log_limited(l, 1, KDEV_LOG_DEBUG, "ev", "gpu", "G0", NULL));
        g_ms = 4999;
        assert_int_equal(kdev_log_limiter_flush(l, false), 1);
        g_ms = 5000;
        /* G0/79 repeated; G0/48 and the warn forgotten (nothing counted) */
        assert_int_equal(kdev_log_limiter_flush(l, false), 5000);
        g_ms = 6000;
        assert_false(kdev_log_limited(l, 1, KDEV_LOG_INFO, "ev", "gpu", "G0", "xid", "79", NULL));
        assert_true(kdev_log_limited(l, 1, KDEV_LOG_INFO, "ev", "gpu", "G0", "xid", "48", NULL));
        g_ms = 10000;
        assert_int_equal(kdev_log_limiter_flush(l, false), 1000);
        g_ms = 11000;
        assert_int_equal(kdev_log_limiter_flush(l, false), 4000);
        g_ms = 15000;
        assert_int_equal(kdev_log_limiter_flush(l, false), 0);
        /* window ended by the next event, no flush: the repeat line first */
        assert_true(kdev_log_limited(l, 1, KDEV_LOG_INFO, "ev", "gpu", "G0", "xid", "79", NULL));
        g_ms = 16000;
        assert_false(kdev_log_limited(l, 1, KDEV_LOG_INFO, "ev", "gpu", "G0", "xid", "79", NULL));
        g_ms = 22000;
        assert_false(kdev_log_limited(l, 2, KDEV_LOG_INFO, "ev", "gpu", "G0", "xid", "79", NULL));
        /* at free, what is counted is printed */
        g_ms = 24250;
        kdev_log_limiter_free(l);
        kdev_log_limited(NULL, 3, KDEV_LOG_INFO, "unlimited", NULL);
        char *out = strip_ts(capture_end(&c));
        assert_string_equal(
                out,
                "level=info msg=\"ev\" gpu=G0 xid=79\n"
                "level=info msg=\"ev\" gpu=G0 xid=48\n"
                "level=warn msg=\"ev\" gpu=G0 xid=79\n"
                "level=info msg=\"ev, repeated 11 times in the last 5 s\" gpu=G0 xid=79 "
                "repeated=11\n"
                "level=info msg=\"ev\" gpu=G0 xid=48\n"
                "level=info msg=\"ev, repeated 1 times in the last 5 s\" gpu=G0 xid=79 "
                "repeated=1\n"
                "level=info msg=\"ev\" gpu=G0 xid=79\n"
                "level=info msg=\"ev, repeated 1 times in the last 7 s\" gpu=G0 xid=79 "
                "repeated=1\n"
                "level=info msg=\"ev, repeated 2 times in the last 2.250 s\" gpu=G0 xid=79 "
                "repeated=2\n"
                "level=info msg=\"unlimited\"\n");
        free(out);
}

/* The XID storm of the issue, on the limiter alone: 10 000 identical events
 * a second for 10 s, flushed once a second: 3 lines, every event counted. */
static void test_limiter_storm(void **state)
{
        (void)state;
        struct capture c;
        struct kdev_log_limiter *l = kdev_log_limiter_new(KDEV_LOG_REPEAT_WINDOW_MS);
        unsigned printed = 0;
        kdev_log_set_clock(moving_clock);
        capture_start(&c);
        for (g_ms = 0; g_ms < 10000; g_ms++) {
                if (g_ms % 1000 == 0)
                        kdev_log_limiter_flush(l, false);
                for (int i = 0; i < 10; i++)
                        printed += kdev_log_limited(l, 1, KDEV_LOG_INFO, "GPU still unhealthy",
                                                    "uuid", "GPU-1", "xid", "79", NULL);
        }
        kdev_log_limiter_flush(l, false);
        g_ms = 15000;
        assert_int_equal(kdev_log_limiter_flush(l, false), 0);
        kdev_log_limiter_free(l);
        char *out = strip_ts(capture_end(&c));
        assert_int_equal(printed, 1);
        assert_string_equal(out,
                            "level=info msg=\"GPU still unhealthy\" uuid=GPU-1 xid=79\n"
                            "level=info msg=\"GPU still unhealthy, repeated 49999 times in the "
                            "last 5 s\" uuid=GPU-1 xid=79 repeated=49999\n"
                            "level=info msg=\"GPU still unhealthy, repeated 50000 times in the "
                            "last 5 s\" uuid=GPU-1 xid=79 repeated=50000\n");
        free(out);
}

/* Typed pairs: the same text as a plain string of that text in text lines;
 * JSON numbers, booleans and inserted JSON in JSON lines. */
static void test_typed_values(void **state)
{
        (void)state;
        struct capture c;
        capture_start(&c);
        kdev_log_info("typed", KDEV_LOG_UINT("gpus", (size_t)8), KDEV_LOG_INT("numa_node", -1),
                      KDEV_LOG_UINT("max", UINT64_MAX), KDEV_LOG_INT("min", INT64_MIN),
                      KDEV_LOG_BOOL("mig", 1), KDEV_LOG_BOOL("healthy", 0),
                      KDEV_LOG_NUM("seconds", "4.250"), KDEV_LOG_JSON("config",
                      "{\"a\": [1, true]}"), KDEV_LOG_JSON("none", NULL), "plain", "8");
        char *out = capture_end(&c);
        assert_string_equal(out, "ts=2026-11-29T11:00:00.123Z level=info msg=\"typed\" gpus=8 "
                                 "numa_node=-1 max=18446744073709551615 "
                                 "min=-9223372036854775808 mig=true healthy=false "
                                 "seconds=4.250 config=\"{\\\"a\\\": [1, true]}\" none=null "
                                 "plain=8\n");
        free(out);

        kdev_log_setup(KDEV_LOG_INFO, true);
        capture_start(&c);
        kdev_log_info("typed", KDEV_LOG_UINT("gpus", (size_t)8), KDEV_LOG_INT("numa_node", -1),
                      KDEV_LOG_UINT("max", UINT64_MAX), KDEV_LOG_INT("min", INT64_MIN),
                      KDEV_LOG_BOOL("mig", 1), KDEV_LOG_BOOL("healthy", 0),
                      KDEV_LOG_NUM("seconds", "4.250"), KDEV_LOG_JSON("config",
                      "{\"a\": [1, true]}"), KDEV_LOG_JSON("none", NULL), "plain", "8");
        out = capture_end(&c);
        assert_string_equal(out, "{\"ts\":\"2026-11-29T11:00:00.123Z\",\"level\":\"info\","
                                 "\"msg\":\"typed\",\"gpus\":8,\"numa_node\":-1,"
                                 "\"max\":18446744073709551615,\"min\":-9223372036854775808,"
                                 "\"mig\":true,\"healthy\":false,\"seconds\":4.250,"
                                 "\"config\":{\"a\": [1, true]},\"none\":null,\"plain\":\"8\"}\n");
        free(out);
}

/* A number or JSON text that is not one is written as a string: a JSON line
 * stays valid JSON whatever the caller passes. */
static void test_typed_invalid(void **state)
{
        (void)state;
        struct capture c;
        kdev_log_setup(KDEV_LOG_INFO, true);
        capture_start(&c);
        kdev_log_info("bad", KDEV_LOG_NUM("a", "01"), KDEV_LOG_NUM("b", "4."),
                      KDEV_LOG_NUM("c", "inf"), KDEV_LOG_NUM("d", "100ms"),
                      KDEV_LOG_NUM("e", ""), KDEV_LOG_NUM("f", (const char *)NULL),
                      KDEV_LOG_NUM("g", "-0.5e+3"), KDEV_LOG_NUM("h", "1E9"),
                      KDEV_LOG_NUM("i", "-"), KDEV_LOG_NUM("j", "1e"),
                      KDEV_LOG_JSON("k", "{\"a\":"), KDEV_LOG_JSON("l", "[1] [2]"),
                      KDEV_LOG_JSON("m", "\"s\""));
        char *out = capture_end(&c);
        assert_string_equal(out, "{\"ts\":\"2026-11-29T11:00:00.123Z\",\"level\":\"info\","
                                 "\"msg\":\"bad\",\"a\":\"01\",\"b\":\"4.\",\"c\":\"inf\","
                                 "\"d\":\"100ms\",\"e\":\"\",\"f\":\"\",\"g\":-0.5e+3,"
                                 "\"h\":1E9,\"i\":\"-\",\"j\":\"1e\",\"k\":\"{\\\"a\\\":\","
                                 "\"l\":\"[1] [2]\",\"m\":\"s\"}\n");
        free(out);
}

/* Beyond 32 pairs typed values are still read off the argument list (the
 * sentinel is found, the pairs after the limit are dropped). */
static void test_typed_over_limit(void **state)
{
        (void)state;
        struct capture c;
        kdev_log_setup(KDEV_LOG_INFO, false);
        capture_start(&c);
#define P8(x) KDEV_LOG_UINT("k", x), KDEV_LOG_UINT("k", x), KDEV_LOG_UINT("k", x), \
              KDEV_LOG_UINT("k", x), KDEV_LOG_UINT("k", x), KDEV_LOG_UINT("k", x), \
              KDEV_LOG_UINT("k", x), KDEV_LOG_UINT("k", x)
        kdev_log_info("many", P8(1), P8(2), P8(3), P8(4), KDEV_LOG_UINT("k", 5),
                      KDEV_LOG_BOOL("k", 1), KDEV_LOG_INT("k", -7), "k", "s");
#undef P8
        kdev_log_info("after", KDEV_LOG_INT("n", 3));
        char *out = strip_ts(capture_end(&c));
        assert_string_equal(out, "level=info msg=\"many\" k=1 k=1 k=1 k=1 k=1 k=1 k=1 k=1 "
                                 "k=2 k=2 k=2 k=2 k=2 k=2 k=2 k=2 k=3 k=3 k=3 k=3 k=3 k=3 k=3 "
                                 "k=3 k=4 k=4 k=4 k=4 k=4 k=4 k=4 k=4\n"
                                 "level=info msg=\"after\" n=3\n");
        free(out);
}

/* The limiter keeps the types: its repeat line is typed too (repeated is a
 * number), and a typed pair is another event than the string of its text. */
static void test_limiter_typed(void **state)
{
        (void)state;
        struct capture c;
        struct kdev_log_limiter *l = kdev_log_limiter_new(5000);
        assert_non_null(l);
        kdev_log_set_clock(moving_clock);
        kdev_log_setup(KDEV_LOG_INFO, true);
        g_ms = 0;
        capture_start(&c);
        assert_true(kdev_log_limited(l, 1, KDEV_LOG_INFO, "ev", "uuid", "GPU-1",
                                     KDEV_LOG_UINT("xid", 79), NULL));
        assert_false(kdev_log_limited(l, 3, KDEV_LOG_INFO, "ev", "uuid", "GPU-1",
                                      KDEV_LOG_UINT("xid", 79), NULL));
        assert_true(kdev_log_limited(l, 1, KDEV_LOG_INFO, "ev", "uuid", "GPU-1", "xid", "79",
                                     NULL));
        g_ms = 5000;
        kdev_log_limiter_flush(l, false);
        kdev_log_limiter_free(l);
        char *out = capture_end(&c);
        assert_string_equal(out,
                            "{\"ts\":\"2026-11-29T11:00:00.000Z\",\"level\":\"info\","
                            "\"msg\":\"ev\",\"uuid\":\"GPU-1\",\"xid\":79}\n"
                            "{\"ts\":\"2026-11-29T11:00:00.000Z\",\"level\":\"info\","
                            "\"msg\":\"ev\",\"uuid\":\"GPU-1\",\"xid\":\"79\"}\n"
                            "{\"ts\":\"2026-11-29T11:00:05.000Z\",\"level\":\"info\","
                            "\"msg\":\"ev, repeated 3 times in the last 5 s\",\"uuid\":\"GPU-1\","
                            "\"xid\":79,\"repeated\":3}\n");
        free(out);
}

int main(void)
{
        const struct CMUnitTest tests[] = {
                cmocka_unit_test_setup_teardown(test_text_line, setup, teardown),
                cmocka_unit_test_setup_teardown(test_json_line, setup, teardown),
                cmocka_unit_test_setup_teardown(test_level_filter, setup, teardown),
                cmocka_unit_test_setup_teardown(test_text_quoting, setup, teardown),
                cmocka_unit_test_setup_teardown(test_json_escaping, setup, teardown),
                cmocka_unit_test_setup_teardown(test_real_clock, setup, teardown),
                cmocka_unit_test(test_parse),
                cmocka_unit_test_setup_teardown(test_limiter_window, setup, teardown),
                cmocka_unit_test_setup_teardown(test_limiter_storm, setup, teardown),
                cmocka_unit_test_setup_teardown(test_typed_values, setup, teardown),
                cmocka_unit_test_setup_teardown(test_typed_invalid, setup, teardown),
                cmocka_unit_test_setup_teardown(test_typed_over_limit, setup, teardown),
                cmocka_unit_test_setup_teardown(test_limiter_typed, setup, teardown),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
