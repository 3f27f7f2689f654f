/* kdev-dra-plugin's metric set. See dra_metrics.h. */
#include "metrics/dra_metrics.h"

#include <errno.h>
#include <stdlib.h>

#include "common/version.h"
#include "metrics/http.h"
#include "metrics/usage_metrics_internal.h"

/* Claim operation buckets, seconds: a prepare from the checkpoint takes
 * microseconds, one that reads the claim from the API server and writes
 * the checkpoint and a CDI spec milliseconds; the upper ones catch a slow
 * API server (kubelet's call deadline is 45 s, NodePrepareResources). */
static const double op_buckets[] = {
        0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025,
        0.05,   0.1,     0.25,   0.5,   1,     2.5,    5,    10,    30,
};
#define N_OP (sizeof(op_buckets) / sizeof(op_buckets[0]))

#ifdef __clang__
#define COMPILER "clang " __clang_version__
#else
#define COMPILER "gcc " __VERSION__
#endif

#define LABELS(...)                                                                        \
        (const char *[]){__VA_ARGS__}, sizeof((const char *[]){__VA_ARGS__}) / sizeof(char *)

struct kdev_dra_metrics {
        struct kdev_metrics *reg;
        struct kdev_metrics_http *http;
        kdev_dra_metrics_prepared_fn prepared;
        void *prepared_arg;
        struct kdev_metric *prepared_claims, *generation;
        struct kdev_metric *ops[2][2];     /* [prepare][ok] */
        struct kdev_metric *seconds[2];    /* [prepare] */
        struct kdev_metric *publishes[2];  /* [ok] */
        struct kdev_plugin_usage_metrics *usage; /* NULL: usage metering off */
        void (*done)(void *arg);
        void *done_arg;
};

static void collect(void *arg, struct kdev_metrics *reg)
{
        struct kdev_dra_metrics *m = arg;
        (void)reg;
        kdev_metric_set(m->prepared_claims, m->prepared ? (double)m->prepared(m->prepared_arg) : 0);
}

struct kdev_dra_metrics *kdev_dra_metrics_new(kdev_dra_metrics_prepared_fn prepared,
                                              void *prepared_arg, struct kdev_err *err)
{
        struct kdev_dra_metrics *m = calloc(1, sizeof(*m));
        if (!m || !(m->reg = kdev_metrics_new())) {
                free(m);
                kdev_err_set(err, ENOMEM, "out of memory");
                return NULL;
        }
        m->prepared = prepared;
        m->prepared_arg = prepared_arg;
        struct kdev_metrics *r = m->reg;
        static const char *const opname[2] = {"unprepare", "prepare"};
        static const char *const result[2] = {"error", "ok"};
        struct kdev_metric_family *info = kdev_metrics_add(
                r, KDEV_METRIC_GAUGE, "kdev_build_info",
                "kdev build information; the value is always 1.", LABELS("version", "compiler"),
                NULL, 0, err);
        struct kdev_metric_family *claims = info ? kdev_metrics_add(
                r, KDEV_METRIC_GAUGE, "kdev_dra_prepared_claims",
                "ResourceClaims prepared on this node now (the plugin's checkpoint).", NULL, 0,
                NULL, 0, err) : NULL;
        struct kdev_metric_family *ops = claims ? kdev_metrics_add(
                r, KDEV_METRIC_COUNTER, "kdev_dra_claim_operations_total",
                "Claims handled by NodePrepareResources (prepare) and NodeUnprepareResources "
                "(unprepare), by result.",
                LABELS("operation", "result"), NULL, 0, err) : NULL;
        struct kdev_metric_family *secs = ops ? kdev_metrics_add(
                r, KDEV_METRIC_HISTOGRAM, "kdev_dra_claim_operation_duration_seconds",
                "Time from a NodePrepareResources or NodeUnprepareResources call's arrival to "
                "its answer, per claim.",
                LABELS("operation"), op_buckets, N_OP, err) : NULL;
        struct kdev_metric_family *pubs = secs ? kdev_metrics_add(
                r, KDEV_METRIC_COUNTER, "kdev_dra_slice_publishes_total",
                "ResourceSlice reconciles with the API server, by result.", LABELS("result"),
                NULL, 0, err) : NULL;
        struct kdev_metric_family *gen = pubs ? kdev_metrics_add(
                r, KDEV_METRIC_GAUGE, "kdev_dra_slice_generation",
                "The generation of the node's ResourceSlice pool last published.", NULL, 0, NULL,
                0, err) : NULL;
        if (!gen) {
                kdev_metrics_free(r);
                free(m);
                if (err && !err->msg[0])
                        kdev_err_set(err, ENOMEM, "out of memory");
                return NULL;
        }
        kdev_metric_set(kdev_metric_get(info, (const char *[]){KDEV_VERSION, COMPILER}), 1);
        m->prepared_claims = kdev_metric_get(claims, NULL);
        m->generation = kdev_metric_get(gen, NULL);
        for (int p = 0; p < 2; p++) {
                for (int ok = 0; ok < 2; ok++)
                        m->ops[p][ok] = kdev_metric_get(ops, (const char *[]){opname[p], result[ok]});
                m->seconds[p] = kdev_metric_get(secs, (const char *[]){opname[p]});
        }
        for (int ok = 0; ok < 2; ok++)
                m->publishes[ok] = kdev_metric_get(pubs, (const char *[]){result[ok]});
        kdev_metrics_set_collect(r, collect, m);
        return m;
}

int kdev_dra_metrics_listen(struct kdev_dra_metrics *m, uv_loop_t *loop, const char *address,
                            struct kdev_err *err)
{
        struct kdev_err e = {0};
        m->http = kdev_metrics_http_start(loop, address, m->reg, &e);
        if (m->http)
                return 0;
        if (err)
                *err = e;
        return -e.code;
}

unsigned kdev_dra_metrics_port(const struct kdev_dra_metrics *m)
{
        return m && m->http ? kdev_metrics_http_port(m->http) : 0;
}

void kdev_dra_metrics_claim(struct kdev_dra_metrics *m, bool prepare, bool ok, double seconds)
{
        if (!m)
                return;
        kdev_metric_add(m->ops[prepare][ok], 1);
        if (seconds >= 0)
                kdev_metric_observe(m->seconds[prepare], seconds);
}

void kdev_dra_metrics_publish(struct kdev_dra_metrics *m, bool ok, long long generation)
{
        if (!m)
                return;
        kdev_metric_add(m->publishes[ok], 1);
        if (ok)
                kdev_metric_set(m->generation, (double)generation);
}

struct kdev_metrics *kdev_dra_metrics_registry(struct kdev_dra_metrics *m)
{
        return m ? m->reg : NULL;
}

static void on_http_closed(void *arg)
{
        struct kdev_dra_metrics *m = arg;
        void (*done)(void *) = m->done;
        void *done_arg = m->done_arg;
        kdev_metrics_free(m->reg);
        kdev_plugin_usage_metrics_free(m->usage);
        free(m);
        if (done)
                done(done_arg);
}

int kdev_dra_metrics_enable_usage(struct kdev_dra_metrics *m, const char *hostname,
                                  struct kdev_err *err)
{
        if (m->usage)
                return kdev_err_set(err, EINVAL, "usage metrics enabled twice");
        struct kdev_err e = {0};
        m->usage = kdev_plugin_usage_metrics_new(m->reg, hostname, true, &e);
        if (m->usage)
                return 0;
        if (err)
                *err = e;
        return -e.code;
}

void kdev_dra_metrics_set_usage(struct kdev_dra_metrics *m, const struct kdev_usage_snapshot *snap,
                                const struct kdev_usage_pods *pods,
                                const struct kdev_usage_report *rep)
{
        if (m && m->usage)
                kdev_plugin_usage_metrics_set(m->usage, snap, pods, rep);
}

void kdev_dra_metrics_stop(struct kdev_dra_metrics *m, void (*done)(void *arg), void *done_arg)
{
        if (!m) {
                if (done)
                        done(done_arg);
                return;
        }
        m->done = done;
        m->done_arg = done_arg;
        struct kdev_metrics_http *http = m->http;
        m->http = NULL;
        kdev_metrics_http_close(http, on_http_closed, m);
}
