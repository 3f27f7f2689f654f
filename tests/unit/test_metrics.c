/* Metrics registry and Prometheus text exposition 0.0.4 (src/metrics/metrics.h):
 * exact texts for each type, label escaping, histogram buckets, errors. */
#include <errno.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "metrics/metrics.h"

static char *render(struct kdev_metrics *m)
{
        char *out = NULL;
        size_t len = 0;
        struct kdev_err err = {0};
        assert_int_equal(kdev_metrics_render(m, &out, &len, &err), 0);
        assert_non_null(out);
        assert_int_equal(strlen(out), len);
        return out;
}

static void assert_render(struct kdev_metrics *m, const char *want)
{
        char *got = render(m);
        assert_string_equal(got, want);
        free(got);
}

static void test_empty_registry(void **state)
{
        (void)state;
        struct kdev_metrics *m = kdev_metrics_new();
        assert_render(m, "");
        kdev_metrics_free(m);
}

static void test_counter_and_gauge(void **state)
{
        (void)state;
        struct kdev_metrics *m = kdev_metrics_new();
        struct kdev_err err = {0};
        struct kdev_metric_family *c = kdev_metrics_add(m, KDEV_METRIC_COUNTER, "x_total",
                                                        "Things.", NULL, 0, NULL, 0, &err);
        const char *gl[] = {"resource", "health"};
        struct kdev_metric_family *g = kdev_metrics_add(m, KDEV_METRIC_GAUGE, "x_devices",
                                                        "Devices.", gl, 2, NULL, 0, &err);
        assert_non_null(c);
        assert_non_null(g);
        /* A labelled family without series has HELP and TYPE only; one
         * without labels is 0. */
        assert_render(m, "# HELP x_total Things.\n# TYPE x_total counter\nx_total 0\n"
                         "# HELP x_devices Devices.\n# TYPE x_devices gauge\n");
        struct kdev_metric *s = kdev_metric_get(c, NULL);
        kdev_metric_add(s, 2);
        kdev_metric_add(s, -5); /* counters never go down */
        kdev_metric_add(s, 0.5);
        assert_true(kdev_metric_value(s) == 2.5);
        kdev_metric_set(s, 100); /* not for counters */
        kdev_metric_set(kdev_metric_get(g, (const char *[]){"a/b", "Healthy"}), 8);
        kdev_metric_set(kdev_metric_get(g, (const char *[]){"a/b", "Unhealthy"}), 1);
        kdev_metric_add(kdev_metric_get(g, (const char *[]){"a/b", "Unhealthy"}), -1);
        /* the same label values give the same series */
        assert_ptr_equal(kdev_metric_get(g, (const char *[]){"a/b", "Healthy"}),
                         kdev_metric_get(g, (const char *[]){"a/b", "Healthy"}));
        assert_render(m, "# HELP x_total Things.\n"
                         "# TYPE x_total counter\n"
                         "x_total 2.5\n"
                         "# HELP x_devices Devices.\n"
                         "# TYPE x_devices gauge\n"
                         "x_devices{resource=\"a/b\",health=\"Healthy\"} 8\n"
                         "x_devices{resource=\"a/b\",health=\"Unhealthy\"} 0\n");
        kdev_metrics_family_clear(g);
        kdev_metrics_family_clear(c); /* back to one series at 0 */
        assert_render(m, "# HELP x_total Things.\n# TYPE x_total counter\nx_total 0\n"
                         "# HELP x_devices Devices.\n# TYPE x_devices gauge\n");
        kdev_metrics_free(m);
}

/* Every family type with labels and no series yet renders its HELP and TYPE
 * lines (text format 0.0.4 allows a family without samples), in
 * registration order, and its samples once a series exists. */
static void test_families_without_series(void **state)
{
        (void)state;
        struct kdev_metrics *m = kdev_metrics_new();
        struct kdev_err err = {0};
        const char *l[] = {"event"};
        const double b[] = {0.5};
        struct kdev_metric_family *c = kdev_metrics_add(m, KDEV_METRIC_COUNTER, "ev_total",
                                                        "Events.", l, 1, NULL, 0, &err);
        struct kdev_metric_family *g = kdev_metrics_add(m, KDEV_METRIC_GAUGE, "lvl", "Level.",
                                                        l, 1, NULL, 0, &err);
        struct kdev_metric_family *h = kdev_metrics_add(m, KDEV_METRIC_HISTOGRAM, "dur_seconds",
                                                        "Duration.", l, 1, b, 1, &err);
        assert_non_null(c);
        assert_non_null(g);
        assert_non_null(h);
        const char *empty = "# HELP ev_total Events.\n# TYPE ev_total counter\n"
                            "# HELP lvl Level.\n# TYPE lvl gauge\n"
                            "# HELP dur_seconds Duration.\n# TYPE dur_seconds histogram\n";
        assert_render(m, empty);
        kdev_metric_add(kdev_metric_get(c, (const char *[]){"xid"}), 1);
        assert_render(m, "# HELP ev_total Events.\n# TYPE ev_total counter\n"
                         "ev_total{event=\"xid\"} 1\n"
                         "# HELP lvl Level.\n# TYPE lvl gauge\n"
                         "# HELP dur_seconds Duration.\n# TYPE dur_seconds histogram\n");
        kdev_metrics_family_clear(c);
        assert_render(m, empty);
        kdev_metrics_free(m);
}

static void test_escaping(void **state)
{
        (void)state;
        struct kdev_metrics *m = kdev_metrics_new();
        struct kdev_err err = {0};
        const char *l[] = {"v"};
        struct kdev_metric_family *g = kdev_metrics_add(
                m, KDEV_METRIC_GAUGE, "esc", "Back\\slash \"quoted\"\nnext line", l, 1, NULL, 0,
                &err);
        assert_non_null(g);
        kdev_metric_set(kdev_metric_get(g, (const char *[]){"a\\b\"c\nd"}), 1);
        kdev_metric_set(kdev_metric_get(g, (const char *[]){NULL}), 2); /* NULL = "" */
        kdev_metric_set(kdev_metric_get(g, (const char *[]){"\xc3\xa9t\xc3\xa9"}), 3);
        /* HELP escapes \ and newline only; label values also ". */
        assert_render(m, "# HELP esc Back\\\\slash \"quoted\"\\nnext line\n"
                         "# TYPE esc gauge\n"
                         "esc{v=\"a\\\\b\\\"c\\nd\"} 1\n"
                         "esc{v=\"\"} 2\n"
                         "esc{v=\"\xc3\xa9t\xc3\xa9\"} 3\n");
        kdev_metrics_free(m);
}

static void test_histogram(void **state)
{
        (void)state;
        struct kdev_metrics *m = kdev_metrics_new();
        struct kdev_err err = {0};
        const double b[] = {0.000025, 0.5, 1};
        const char *l[] = {"resource"};
        struct kdev_metric_family *h = kdev_metrics_add(m, KDEV_METRIC_HISTOGRAM, "lat_seconds",
                                                        "Latency.", l, 1, b, 3, &err);
        assert_non_null(h);
        struct kdev_metric *s = kdev_metric_get(h, (const char *[]){"x/y"});
        kdev_metric_observe(s, 0.00001); /* first bucket */
        kdev_metric_observe(s, 0.5);      /* on a bound: that bucket (le) */
        kdev_metric_observe(s, 0.75);
        kdev_metric_observe(s, 2);        /* only +Inf */
        kdev_metric_add(s, 7);            /* not for histograms */
        assert_true(kdev_metric_value(s) == 4);
        kdev_metric_get(h, (const char *[]){"empty"});
        assert_render(m, "# HELP lat_seconds Latency.\n"
                         "# TYPE lat_seconds histogram\n"
                         "lat_seconds_bucket{resource=\"x/y\",le=\"2.5e-05\"} 1\n"
                         "lat_seconds_bucket{resource=\"x/y\",le=\"0.5\"} 2\n"
                         "lat_seconds_bucket{resource=\"x/y\",le=\"1\"} 3\n"
                         "lat_seconds_bucket{resource=\"x/y\",le=\"+Inf\"} 4\n"
                         "lat_seconds_sum{resource=\"x/y\"} 3.25001\n"
                         "lat_seconds_count{resource=\"x/y\"} 4\n"
                         "lat_seconds_bucket{resource=\"empty\",le=\"2.5e-05\"} 0\n"
                         "lat_seconds_bucket{resource=\"empty\",le=\"0.5\"} 0\n"
                         "lat_seconds_bucket{resource=\"empty\",le=\"1\"} 0\n"
                         "lat_seconds_bucket{resource=\"empty\",le=\"+Inf\"} 0\n"
                         "lat_seconds_sum{resource=\"empty\"} 0\n"
                         "lat_seconds_count{resource=\"empty\"} 0\n");
        kdev_metrics_free(m);
}

static void test_histogram_without_labels(void **state)
{
        (void)state;
        struct kdev_metrics *m = kdev_metrics_new();
        const double b[] = {1};
        struct kdev_metric_family *h =
                kdev_metrics_add(m, KDEV_METRIC_HISTOGRAM, "h", "H.", NULL, 0, b, 1, NULL);
        assert_non_null(h);
        kdev_metric_observe(kdev_metric_get(h, NULL), 0.25);
        assert_render(m, "# HELP h H.\n# TYPE h histogram\n"
                         "h_bucket{le=\"1\"} 1\n"
                         "h_bucket{le=\"+Inf\"} 1\n"
                         "h_sum 0.25\n"
                         "h_count 1\n");
        kdev_metrics_free(m);
}

static void test_numbers(void **state)
{
        (void)state;
        char buf[32];
        assert_string_equal(kdev_metrics_format_number(0, buf, sizeof(buf)), "0");
        assert_string_equal(kdev_metrics_format_number(-0.0, buf, sizeof(buf)), "0");
        assert_string_equal(kdev_metrics_format_number(3, buf, sizeof(buf)), "3");
        assert_string_equal(kdev_metrics_format_number(-2, buf, sizeof(buf)), "-2");
        assert_string_equal(kdev_metrics_format_number(0.1, buf, sizeof(buf)), "0.1");
        assert_string_equal(kdev_metrics_format_number(0.00025, buf, sizeof(buf)), "0.00025");
        assert_string_equal(kdev_metrics_format_number(2.5e-05, buf, sizeof(buf)), "2.5e-05");
        assert_string_equal(kdev_metrics_format_number(1e21, buf, sizeof(buf)), "1e+21");
        assert_string_equal(kdev_metrics_format_number(123456789012, buf, sizeof(buf)),
                            "123456789012");
        /* needs 17 digits to read back */
        assert_string_equal(kdev_metrics_format_number(0.1 + 0.2, buf, sizeof(buf)),
                            "0.30000000000000004");
        assert_string_equal(kdev_metrics_format_number(INFINITY, buf, sizeof(buf)), "+Inf");
        assert_string_equal(kdev_metrics_format_number(-INFINITY, buf, sizeof(buf)), "-Inf");
        assert_string_equal(kdev_metrics_format_number(NAN, buf, sizeof(buf)), "NaN");
}

static int collected;

static void collect(void *arg, struct kdev_metrics *m)
{
        (void)m;
        struct kdev_metric_family *g = arg;
        collected++;
        kdev_metrics_family_clear(g);
        kdev_metric_set(kdev_metric_get(g, (const char *[]){"n"}), collected);
}

static void test_collect_callback(void **state)
{
        (void)state;
        struct kdev_metrics *m = kdev_metrics_new();
        const char *l[] = {"k"};
        struct kdev_metric_family *g =
                kdev_metrics_add(m, KDEV_METRIC_GAUGE, "g", "G.", l, 1, NULL, 0, NULL);
        kdev_metrics_set_collect(m, collect, g);
        collected = 0;
        assert_render(m, "# HELP g G.\n# TYPE g gauge\ng{k=\"n\"} 1\n");
        assert_render(m, "# HELP g G.\n# TYPE g gauge\ng{k=\"n\"} 2\n");
        kdev_metrics_free(m);
}

static void test_invalid_definitions(void **state)
{
        (void)state;
        struct kdev_metrics *m = kdev_metrics_new();
        struct kdev_err err = {0};
        const double ok_b[] = {1, 2};
        const double bad_b[] = {2, 1};
        const double inf_b[] = {1, INFINITY};
        assert_null(kdev_metrics_add(m, KDEV_METRIC_COUNTER, "1abc", "", NULL, 0, NULL, 0, &err));
        assert_int_equal(err.code, EINVAL);
        assert_string_equal(err.msg, "metrics: invalid metric name \"1abc\"");
        assert_null(kdev_metrics_add(m, KDEV_METRIC_COUNTER, "a-b", "", NULL, 0, NULL, 0, &err));
        assert_null(kdev_metrics_add(m, KDEV_METRIC_COUNTER, "", "", NULL, 0, NULL, 0, &err));
        assert_non_null(kdev_metrics_add(m, KDEV_METRIC_COUNTER, "ns:a_b", "", NULL, 0, NULL, 0,
                                         &err));
        assert_null(kdev_metrics_add(m, KDEV_METRIC_GAUGE, "ns:a_b", "", NULL, 0, NULL, 0, &err));
        assert_string_equal(err.msg, "metrics: ns:a_b registered twice");
        assert_null(kdev_metrics_add(m, KDEV_METRIC_GAUGE, "g", "", (const char *[]){"a:b"}, 1,
                                     NULL, 0, &err));
        assert_string_equal(err.msg, "metrics: g: invalid label name \"a:b\"");
        assert_null(kdev_metrics_add(m, KDEV_METRIC_GAUGE, "g", "", (const char *[]){"__x"}, 1,
                                     NULL, 0, &err));
        assert_null(kdev_metrics_add(m, KDEV_METRIC_HISTOGRAM, "h", "", (const char *[]){"le"},
                                     1, ok_b, 2, &err));
        assert_string_equal(err.msg, "metrics: h: invalid label name \"le\"");
        assert_null(kdev_metrics_add(m, KDEV_METRIC_HISTOGRAM, "h", "", NULL, 0, bad_b, 2, &err));
        assert_string_equal(err.msg,
                            "metrics: h: bucket bounds must be finite and strictly increasing");
        assert_null(kdev_metrics_add(m, KDEV_METRIC_HISTOGRAM, "h", "", NULL, 0, inf_b, 2, &err));
        assert_null(kdev_metrics_add(m, KDEV_METRIC_HISTOGRAM, "h", "", NULL, 0, NULL, 0, &err));
        assert_string_equal(err.msg, "metrics: h: a histogram needs 1 to 32 buckets");
        assert_null(kdev_metrics_add(m, KDEV_METRIC_GAUGE, "h", "", NULL, 0, ok_b, 2, &err));
        assert_string_equal(err.msg, "metrics: h: only histograms have buckets");
        const char *many[] = {"a", "b", "c", "d", "e", "f", "g", "h", "i",
                              "j", "k", "l", "m", "n", "o", "p", "q"};
        assert_null(kdev_metrics_add(m, KDEV_METRIC_GAUGE, "h", "", many, 17, NULL, 0, &err));
        assert_string_equal(err.msg, "metrics: h: more than 16 labels");
        assert_non_null(kdev_metrics_add(m, KDEV_METRIC_GAUGE, "h16", "", many, 16, NULL, 0, &err));
        /* a label "le" is fine outside histograms */
        assert_non_null(kdev_metrics_add(m, KDEV_METRIC_GAUGE, "g2", "", (const char *[]){"le"},
                                         1, NULL, 0, &err));
        kdev_metrics_free(m);
        kdev_metrics_free(NULL);
        kdev_metric_add(NULL, 1);
        kdev_metric_set(NULL, 1);
        kdev_metric_observe(NULL, 1);
        assert_true(kdev_metric_value(NULL) == 0);
}

int main(void)
{
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_empty_registry),
                cmocka_unit_test(test_counter_and_gauge),
                cmocka_unit_test(test_families_without_series),
                cmocka_unit_test(test_escaping),
                cmocka_unit_test(test_histogram),
                cmocka_unit_test(test_histogram_without_labels),
                cmocka_unit_test(test_numbers),
                cmocka_unit_test(test_collect_callback),
                cmocka_unit_test(test_invalid_definitions),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
