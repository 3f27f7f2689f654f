/* Metrics registry and text exposition. See metrics.h. */
#include "metrics/metrics.h"

#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct kdev_metric {
        struct kdev_metric_family *fam;
        struct kdev_metric *next;
        char *values[KDEV_METRICS_MAX_LABELS];
        uint64_t hash;      /* of |values| (values_hash): compared before the strings */
        double value;       /* counter, gauge; histogram: sum */
        uint64_t count;     /* histogram: observations */
        uint64_t *buckets;  /* histogram: per-bucket (not cumulative) counts */
};

struct kdev_metric_family {
        struct kdev_metrics *reg;
        struct kdev_metric_family *next;
        enum kdev_metric_type type;
        char *name;
        char *help;
        char *labels[KDEV_METRICS_MAX_LABELS];
        size_t n_labels;
        double bounds[KDEV_METRICS_MAX_BUCKETS];
        size_t n_bounds;
        struct kdev_metric *series, *last;
};

struct kdev_metrics {
        struct kdev_metric_family *families, *last;
        kdev_metrics_collect_fn collect;
        void *collect_arg;
};

struct kdev_metrics *kdev_metrics_new(void)
{
        return calloc(1, sizeof(struct kdev_metrics));
}

static void series_free(struct kdev_metric *s)
{
        for (size_t i = 0; i < KDEV_METRICS_MAX_LABELS; i++)
                free(s->values[i]);
        free(s->buckets);
        free(s);
}

static void family_drop_series(struct kdev_metric_family *f)
{
        struct kdev_metric *next;
        for (struct kdev_metric *s = f->series; s; s = next) {
                next = s->next;
                series_free(s);
        }
        f->series = f->last = NULL;
}

static void family_free(struct kdev_metric_family *f)
{
        if (!f)
                return;
        family_drop_series(f);
        free(f->name);
        free(f->help);
        for (size_t i = 0; i < f->n_labels; i++)
                free(f->labels[i]);
        free(f);
}

void kdev_metrics_free(struct kdev_metrics *m)
{
        if (!m)
                return;
        struct kdev_metric_family *next;
        for (struct kdev_metric_family *f = m->families; f; f = next) {
                next = f->next;
                family_free(f);
        }
        free(m);
}

void kdev_metrics_set_collect(struct kdev_metrics *m, kdev_metrics_collect_fn fn, void *arg)
{
        m->collect = fn;
        m->collect_arg = arg;
}

static bool valid_name(const char *s, bool colon)
{
        if (!s || !*s)
                return false;
        for (const char *p = s; *p; p++) {
                char c = *p;
                bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' ||
                          (colon && c == ':') || (p != s && c >= '0' && c <= '9');
                if (!ok)
                        return false;
        }
        return true;
}

struct kdev_metric_family *kdev_metrics_add(struct kdev_metrics *m, enum kdev_metric_type type,
                                            const char *name, const char *help,
                                            const char *const *labels, size_t n_labels,
                                            const double *buckets, size_t n_buckets,
                                            struct kdev_err *err)
{
        if (!valid_name(name, true)) {
                kdev_err_set(err, EINVAL, "metrics: invalid metric name \"%s\"", name ? name : "");
                return NULL;
        }
        for (struct kdev_metric_family *f = m->families; f; f = f->next) {
                if (strcmp(f->name, name) == 0) {
                        kdev_err_set(err, EINVAL, "metrics: %s registered twice", name);
                        return NULL;
                }
        }
        if (n_labels > KDEV_METRICS_MAX_LABELS) {
                kdev_err_set(err, EINVAL, "metrics: %s: more than %d labels", name,
                             KDEV_METRICS_MAX_LABELS);
                return NULL;
        }
        for (size_t i = 0; i < n_labels; i++) {
                const char *l = labels[i];
                if (!valid_name(l, false) || strncmp(l, "__", 2) == 0 ||
                    (type == KDEV_METRIC_HISTOGRAM && strcmp(l, "le") == 0)) {
                        kdev_err_set(err, EINVAL, "metrics: %s: invalid label name \"%s\"", name,
                                     l ? l : "");
                        return NULL;
                }
        }
        if (type == KDEV_METRIC_HISTOGRAM) {
                if (n_buckets == 0 || n_buckets > KDEV_METRICS_MAX_BUCKETS || !buckets) {
                        kdev_err_set(err, EINVAL, "metrics: %s: a histogram needs 1 to %d buckets",
                                     name, KDEV_METRICS_MAX_BUCKETS);
                        return NULL;
                }
                for (size_t i = 0; i < n_buckets; i++) {
                        if (!isfinite(buckets[i]) || (i > 0 && !(buckets[i] > buckets[i - 1]))) {
                                kdev_err_set(err, EINVAL, "metrics: %s: bucket bounds must be "
                                             "finite and strictly increasing", name);
                                return NULL;
                        }
                }
        } else if (n_buckets) {
                kdev_err_set(err, EINVAL, "metrics: %s: only histograms have buckets", name);
                return NULL;
        }
        struct kdev_metric_family *f = calloc(1, sizeof(*f));
        if (!f)
                goto oom;
        f->reg = m;
        f->type = type;
        f->name = strdup(name);
        f->help = strdup(help ? help : "");
        if (!f->name || !f->help)
                goto oom;
        for (size_t i = 0; i < n_labels; i++) {
                f->labels[i] = strdup(labels[i]);
                if (!f->labels[i])
                        goto oom;
                f->n_labels++;
        }
        if (type == KDEV_METRIC_HISTOGRAM) {
                memcpy(f->bounds, buckets, n_buckets * sizeof(double));
                f->n_bounds = n_buckets;
        }
        if (n_labels == 0 && !kdev_metric_get(f, NULL))
                goto oom;
        if (m->last)
                m->last->next = f;
        else
                m->families = f;
        m->last = f;
        return f;
oom:
        family_free(f);
        kdev_err_set(err, ENOMEM, "out of memory");
        return NULL;
}

/* FNV-1a 64 over the |n| label values |values| (NULL: ""), each ended by a
 * NUL, so that a lookup among many series compares strings only on a
 * match. */
static uint64_t values_hash(const char *const *values, size_t n)
{
        uint64_t h = 0xcbf29ce484222325ULL;
        for (size_t i = 0; i < n; i++) {
                for (const unsigned char *c = (const unsigned char *)(values[i] ? values[i] : "");
                     *c; c++)
                        h = (h ^ *c) * 0x100000001b3ULL;
                h = h * 0x100000001b3ULL; /* the NUL */
        }
        return h;
}

struct kdev_metric *kdev_metric_get(struct kdev_metric_family *fam, const char *const *values)
{
        uint64_t h = values_hash(values, fam->n_labels);
        for (struct kdev_metric *s = fam->series; s; s = s->next) {
                if (s->hash != h)
                        continue;
                bool same = true;
                for (size_t i = 0; i < fam->n_labels && same; i++) {
                        const char *v = values[i] ? values[i] : "";
                        same = strcmp(s->values[i], v) == 0;
                }
                if (same)
                        return s;
        }
        struct kdev_metric *s = calloc(1, sizeof(*s));
        if (!s)
                return NULL;
        s->fam = fam;
        s->hash = h;
        for (size_t i = 0; i < fam->n_labels; i++) {
                s->values[i] = strdup(values[i] ? values[i] : "");
                if (!s->values[i]) {
                        series_free(s);
                        return NULL;
                }
        }
        if (fam->type == KDEV_METRIC_HISTOGRAM) {
                s->buckets = calloc(fam->n_bounds, sizeof(*s->buckets));
                if (!s->buckets) {
                        series_free(s);
                        return NULL;
                }
        }
        if (fam->last)
                fam->last->next = s;
        else
                fam->series = s;
        fam->last = s;
        return s;
}

void kdev_metric_add(struct kdev_metric *s, double v)
{
        if (!s)
                return;
        if (s->fam->type == KDEV_METRIC_COUNTER && v >= 0)
                s->value += v;
        else if (s->fam->type == KDEV_METRIC_GAUGE)
                s->value += v;
}

void kdev_metric_set(struct kdev_metric *s, double v)
{
        if (s && s->fam->type == KDEV_METRIC_GAUGE)
                s->value = v;
}

void kdev_metric_observe(struct kdev_metric *s, double v)
{
        if (!s || s->fam->type != KDEV_METRIC_HISTOGRAM)
                return;
        for (size_t i = 0; i < s->fam->n_bounds; i++) {
                if (v <= s->fam->bounds[i]) {
                        s->buckets[i]++;
                        break;
                }
        }
        s->value += v;
        s->count++;
}

double kdev_metric_value(const struct kdev_metric *s)
{
        if (!s)
                return 0;
        return s->fam->type == KDEV_METRIC_HISTOGRAM ? (double)s->count : s->value;
}

void kdev_metrics_family_clear(struct kdev_metric_family *fam)
{
        family_drop_series(fam);
        if (fam->n_labels == 0)
                kdev_metric_get(fam, NULL); /* out of memory: HELP and TYPE only */
}

/* ---- exposition ---------------------------------------------------------- */

const char *kdev_metrics_format_number(double v, char *buf, size_t size)
{
        if (isnan(v))
                snprintf(buf, size, "NaN");
        else if (isinf(v))
                snprintf(buf, size, v > 0 ? "+Inf" : "-Inf");
        else if (v == 0)
                snprintf(buf, size, "0"); /* also -0 */
        else {
                snprintf(buf, size, "%.15g", v);
                if (strtod(buf, NULL) != v)
                        snprintf(buf, size, "%.17g", v);
        }
        return buf;
}

/* Writes |s| escaped: '\' and newline always, '"' when |quote|. */
static void put_escaped(FILE *f, const char *s, bool quote)
{
        for (; *s; s++) {
                if (*s == '\\')
                        fputs("\\\\", f);
                else if (*s == '\n')
                        fputs("\\n", f);
                else if (quote && *s == '"')
                        fputs("\\\"", f);
                else
                        fputc(*s, f);
        }
}

/* Writes "<name><suffix>{labels[,le="<le>"]} <value>\n". */
static void put_sample(FILE *f, const struct kdev_metric *s, const char *suffix, const char *le,
                       const char *value)
{
        const struct kdev_metric_family *fam = s->fam;
        fputs(fam->name, f);
        fputs(suffix, f);
        if (fam->n_labels || le) {
                fputc('{', f);
                for (size_t i = 0; i < fam->n_labels; i++) {
                        fprintf(f, "%s%s=\"", i ? "," : "", fam->labels[i]);
                        put_escaped(f, s->values[i], true);
                        fputc('"', f);
                }
                if (le)
                        fprintf(f, "%sle=\"%s\"", fam->n_labels ? "," : "", le);
                fputc('}', f);
        }
        fprintf(f, " %s\n", value);
}

static void put_family(FILE *f, const struct kdev_metric_family *fam)
{
        static const char *const types[] = {"counter", "gauge", "histogram"};
        /* HELP and TYPE also without series: a scraper sees every family. */
        fprintf(f, "# HELP %s ", fam->name);
        put_escaped(f, fam->help, false);
        fprintf(f, "\n# TYPE %s %s\n", fam->name, types[fam->type]);
        char num[32], le[32];
        for (const struct kdev_metric *s = fam->series; s; s = s->next) {
                if (fam->type != KDEV_METRIC_HISTOGRAM) {
                        put_sample(f, s, "", NULL,
                                   kdev_metrics_format_number(s->value, num, sizeof(num)));
                        continue;
                }
                uint64_t cum = 0;
                for (size_t i = 0; i < fam->n_bounds; i++) {
                        cum += s->buckets[i];
                        snprintf(num, sizeof(num), "%llu", (unsigned long long)cum);
                        put_sample(f, s, "_bucket",
                                   kdev_metrics_format_number(fam->bounds[i], le, sizeof(le)),
                                   num);
                }
                snprintf(num, sizeof(num), "%llu", (unsigned long long)s->count);
                put_sample(f, s, "_bucket", "+Inf", num);
                put_sample(f, s, "_sum", NULL,
                           kdev_metrics_format_number(s->value, le, sizeof(le)));
                put_sample(f, s, "_count", NULL, num);
        }
}

int kdev_metrics_render(struct kdev_metrics *m, char **out, size_t *len, struct kdev_err *err)
{
        *out = NULL;
        *len = 0;
        if (m->collect)
                m->collect(m->collect_arg, m);
        char *buf = NULL;
        size_t n = 0;
        FILE *f = open_memstream(&buf, &n);
        if (!f)
                return kdev_err_set(err, ENOMEM, "out of memory");
        for (const struct kdev_metric_family *fam = m->families; fam; fam = fam->next)
                put_family(f, fam);
        bool bad = ferror(f) != 0;
        if (fclose(f) != 0 || bad || !buf) {
                free(buf);
                return kdev_err_set(err, ENOMEM, "out of memory");
        }
        *out = buf;
        *len = n;
        return 0;
}
