/* kdev-dra-plugin's metric set, served on its --metrics-address (off by
 * default, as kdev-plugin's):
 *
 *   kdev_build_info{version,compiler}                    gauge, always 1
 *   kdev_dra_prepared_claims                             gauge: claims prepared now
 *                                                        (the checkpoint's), read at scrape
 *   kdev_dra_claim_operations_total{operation,result}    counter: claims handled by
 *                                                        NodePrepareResources (operation
 *                                                        "prepare") or NodeUnprepareResources
 *                                                        ("unprepare"); result "ok" or "error"
 *   kdev_dra_claim_operation_duration_seconds{operation} histogram: from the call's
 *                                                        arrival to its answer, per claim
 *                                                        (claim reads from the API server
 *                                                        included)
 *   kdev_dra_slice_publishes_total{result}               counter: ResourceSlice reconciles,
 *                                                        "ok" or "error"
 *   kdev_dra_slice_generation                            gauge: the pool generation last
 *                                                        published
 *
 * With usage metering on (kdev_dra_metrics_enable_usage), kdev-plugin's
 * usage families (plugin_metrics.h "usage metering") for the claimed
 * devices: dcgm-exporter's device series and kdev's per-container ones,
 * each with dcgm-exporter's DRA labels dra_claim_name, dra_claim_namespace,
 * dra_device_name, dra_driver_name, dra_pool_name (the claim device the
 * series' container holds; "" on a device series held by none or several),
 * kdev_container_gpu_replicas without its resource label (it counts claim
 * devices).
 *
 * Threading: the loop thread only. */
#ifndef KDEV_METRICS_DRA_METRICS_H
#define KDEV_METRICS_DRA_METRICS_H

#include <stdbool.h>
#include <stddef.h>

#include <uv.h>

#include "common/err.h"
#include "common/export.h"
#include "metrics/metrics.h"
#include "usage/usage.h"

struct kdev_dra_metrics;

/* Reads the number of prepared claims at each scrape. */
typedef size_t (*kdev_dra_metrics_prepared_fn)(void *arg);

/* A new metric set with every family registered (counters at 0 for each
 * operation and result, so that rates exist from the first scrape).
 * |prepared| (may be NULL: 0) is read at each scrape. Returns NULL with
 * |err| (-ENOMEM). Free with kdev_dra_metrics_stop(). */
KDEV_API struct kdev_dra_metrics *kdev_dra_metrics_new(kdev_dra_metrics_prepared_fn prepared,
                                                       void *prepared_arg, struct kdev_err *err);

/* Serves the set on |address| ("HOST:PORT", metrics/http.h) on |loop|.
 * Returns 0, or the negative errno of kdev_metrics_http_start() with |err|
 * ("cannot listen on 127.0.0.1:9401: Address already in use"). */
KDEV_API int kdev_dra_metrics_listen(struct kdev_dra_metrics *m, uv_loop_t *loop,
                                     const char *address, struct kdev_err *err);

/* The port bound (0 before listen). */
KDEV_API unsigned kdev_dra_metrics_port(const struct kdev_dra_metrics *m);

/* One claim prepared (|prepare|) or unprepared, |ok| or not, |seconds| from
 * its call's arrival to the answer (< 0: not observed). NULL-safe. */
KDEV_API void kdev_dra_metrics_claim(struct kdev_dra_metrics *m, bool prepare, bool ok,
                                     double seconds);

/* One ResourceSlice reconcile finished, |ok| with pool |generation| (ignored
 * when !ok). NULL-safe. */
KDEV_API void kdev_dra_metrics_publish(struct kdev_dra_metrics *m, bool ok, long long generation);

/* Registers the usage families; |hostname| is the Hostname label (copied).
 * Returns 0, or -EINVAL (enabled twice) / -ENOMEM with |err|. */
KDEV_API int kdev_dra_metrics_enable_usage(struct kdev_dra_metrics *m, const char *hostname,
                                           struct kdev_err *err);

/* Replaces the usage series with those of |snap| attributed by |rep| to the
 * claim devices of |pods| (nvidia/usage_loop.h, claims mode); |snap| NULL
 * (a failed sample) counts an error and keeps the series. Nothing when
 * usage is not enabled; NULL-safe. */
KDEV_API void kdev_dra_metrics_set_usage(struct kdev_dra_metrics *m,
                                         const struct kdev_usage_snapshot *snap,
                                         const struct kdev_usage_pods *pods,
                                         const struct kdev_usage_report *rep);

/* The registry (for tests rendering it). */
KDEV_API struct kdev_metrics *kdev_dra_metrics_registry(struct kdev_dra_metrics *m);

/* Stops serving and frees |m| once the server's handles are released, then
 * calls |done| (may be NULL). NULL-safe (|done| at once). */
KDEV_API void kdev_dra_metrics_stop(struct kdev_dra_metrics *m, void (*done)(void *arg),
                                    void *done_arg);

#endif /* KDEV_METRICS_DRA_METRICS_H */
