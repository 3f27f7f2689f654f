/* A small Prometheus metrics registry: counters, gauges and histograms with
 * labels, rendered in the Prometheus text exposition format 0.0.4
 * (https://prometheus.io/docs/instrumenting/exposition_formats/).
 *
 * A registry holds metric families (one name, help text, type, label names,
 * and for histograms a fixed set of bucket upper bounds); a family holds one
 * series per distinct tuple of label values, created on first use.
 *
 * Rendering, per family in registration order, every registered family with
 * its HELP and TYPE lines, also one with labels and no series yet (e.g. an
 * event counter before its first event: the format allows a family with no
 * samples, and a scraper then knows the metric exists):
 *   # HELP <name> <help, with '\' -> "\\" and newline -> "\n">
 *   # TYPE <name> counter|gauge|histogram
 *   <name>{<l1>="<v1>",...} <value>            (series in creation order)
 * Label values escape '\' -> "\\", '"' -> "\"", newline -> "\n". A histogram
 * series renders <name>_bucket{...,le="<bound>"} with cumulative counts for
 * each bound and le="+Inf", then <name>_sum{...} and <name>_count{...}.
 * Numbers use the shortest form that reads back to the same double ("%.15g",
 * else "%.17g"): "3", "0.25", "2.5e-05"; infinities "+Inf"/"-Inf", NaN "NaN".
 *
 * Threading: none. Use a registry from one thread (kdev: the loop thread).
 * Memory: a family costs its name, help and label names; a series its label
 * values, and for a histogram one counter per bucket.
 */
#ifndef KDEV_METRICS_METRICS_H
#define KDEV_METRICS_METRICS_H

#include <stddef.h>

#include "common/err.h"
#include "common/export.h"

/* Most labels a family may have (le not counted): dcgm-exporter's device
 * labels (gpu, UUID, pci_bus_id, device, modelName, Hostname, GPU_I_PROFILE,
 * GPU_I_ID), Kubernetes' (namespace, pod, container) and its DRA ones
 * (dra_claim_name, dra_claim_namespace, dra_device_name, dra_driver_name,
 * dra_pool_name) fit. */
#define KDEV_METRICS_MAX_LABELS 16
/* Most buckets a histogram may have (+Inf not counted). */
#define KDEV_METRICS_MAX_BUCKETS 32

/* Content-Type of the exposition text. */
#define KDEV_METRICS_CONTENT_TYPE "text/plain; version=0.0.4; charset=utf-8"

enum kdev_metric_type {
        KDEV_METRIC_COUNTER,
        KDEV_METRIC_GAUGE,
        KDEV_METRIC_HISTOGRAM,
};

struct kdev_metrics;
struct kdev_metric_family;
struct kdev_metric;

/* Called by kdev_metrics_render() before the text is produced, to refresh
 * gauges computed from state (e.g. devices by health). */
typedef void (*kdev_metrics_collect_fn)(void *arg, struct kdev_metrics *m);

/* Creates an empty registry. Returns NULL when out of memory. Free with
 * kdev_metrics_free(). */
KDEV_API struct kdev_metrics *kdev_metrics_new(void);

/* Frees |m|, its families and series. NULL-safe. */
KDEV_API void kdev_metrics_free(struct kdev_metrics *m);

/* Sets the collect callback (NULL: none). */
KDEV_API void kdev_metrics_set_collect(struct kdev_metrics *m, kdev_metrics_collect_fn fn,
                                       void *arg);

/* Registers a family. |name| must match [a-zA-Z_:][a-zA-Z0-9_:]*, each of the
 * |n_labels| (<= KDEV_METRICS_MAX_LABELS) |labels| [a-zA-Z_][a-zA-Z0-9_]* and
 * not start with "__" nor be "le" for a histogram. |help| is any text. For a
 * histogram, |buckets| holds |n_buckets| (1..KDEV_METRICS_MAX_BUCKETS) finite
 * upper bounds in strictly increasing order (+Inf is implicit); other types
 * pass NULL, 0. Strings are copied. A family without labels gets its single
 * series (value 0) at once, so it always renders.
 * Returns the family (owned by |m|), or NULL with |err|: -EINVAL (bad name,
 * label or buckets; a name registered already), -ENOMEM. */
KDEV_API struct kdev_metric_family *kdev_metrics_add(struct kdev_metrics *m,
                                                     enum kdev_metric_type type, const char *name,
                                                     const char *help, const char *const *labels,
                                                     size_t n_labels, const double *buckets,
                                                     size_t n_buckets, struct kdev_err *err);

/* The series of |fam| with label values |values| (as many as the family has
 * labels; NULL means ""), created with value 0 when new. Values are any
 * UTF-8 text and copied. Returns the series (owned by the family, valid until
 * kdev_metrics_family_clear() or kdev_metrics_free()), or NULL when out of
 * memory (the update is then lost; callers may ignore it). */
KDEV_API struct kdev_metric *kdev_metric_get(struct kdev_metric_family *fam,
                                             const char *const *values);

/* Adds |v| to a counter (|v| >= 0; negative values are ignored) or a gauge.
 * NULL-safe. */
KDEV_API void kdev_metric_add(struct kdev_metric *s, double v);

/* Sets a gauge to |v| (a counter or histogram: ignored). NULL-safe. */
KDEV_API void kdev_metric_set(struct kdev_metric *s, double v);

/* Records observation |v| in a histogram: every bucket whose bound is >= |v|
 * counts it, sum += v, count += 1 (other types: ignored). NULL-safe. */
KDEV_API void kdev_metric_observe(struct kdev_metric *s, double v);

/* Value of a counter or gauge; a histogram's count. 0 for NULL. */
KDEV_API double kdev_metric_value(const struct kdev_metric *s);

/* Drops every series of |fam| (a family without labels gets its series back
 * at 0; out of memory it has none and renders its HELP and TYPE only). Series
 * pointers of |fam| become invalid. For gauges recomputed in the collect
 * callback. */
KDEV_API void kdev_metrics_family_clear(struct kdev_metric_family *fam);

/* Renders every family (after the collect callback) into a malloc'ed,
 * NUL-terminated text (*out, freed by the caller; *len its length without the
 * NUL). Returns 0, or -ENOMEM with |err| (*out NULL). */
KDEV_API int kdev_metrics_render(struct kdev_metrics *m, char **out, size_t *len,
                                 struct kdev_err *err);

/* Formats |v| as the exposition format writes a number (see the top of this
 * file) into |buf| of |size| bytes (32 is always enough). Returns |buf|. */
KDEV_API const char *kdev_metrics_format_number(double v, char *buf, size_t size);

#endif /* KDEV_METRICS_METRICS_H */
