/* Private to the metrics module: the usage families of kdev-plugin's
 * metrics (plugin_metrics.h, "usage metering"). */
#ifndef KDEV_METRICS_USAGE_METRICS_INTERNAL_H
#define KDEV_METRICS_USAGE_METRICS_INTERNAL_H

#include <stdbool.h>

#include "common/err.h"
#include "metrics/metrics.h"
#include "usage/usage.h"

struct kdev_plugin_usage_metrics;

/* Registers the families in |reg|: kdev-plugin's, or with |dra|
 * kdev-dra-plugin's (dcgm-exporter's dra_* labels on every family from the
 * map entry's claim device, no "resource" label). NULL with |err| on
 * failure. */
struct kdev_plugin_usage_metrics *kdev_plugin_usage_metrics_new(struct kdev_metrics *reg,
                                                                const char *hostname, bool dra,
                                                                struct kdev_err *err);

/* See kdev_plugin_metrics_set_usage. */
void kdev_plugin_usage_metrics_set(struct kdev_plugin_usage_metrics *u,
                                   const struct kdev_usage_snapshot *snap,
                                   const struct kdev_usage_pods *pods,
                                   const struct kdev_usage_report *rep);

/* Frees |u| (not the families: the registry owns them). NULL-safe. */
void kdev_plugin_usage_metrics_free(struct kdev_plugin_usage_metrics *u);

#endif /* KDEV_METRICS_USAGE_METRICS_INTERNAL_H */
