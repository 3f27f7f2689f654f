/* kdevctl top's usage view: the devices of one metrics text and, under
 * each, the containers and unattributed use on it, joined and sorted, as a
 * table or JSON. See top.h. Every string points into the parsed text, which
 * the view keeps. */
#include "kubelet/top.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kubelet/cli.h"
#include "kubelet/promtext.h"

#define MIB (1024.0 * 1024.0)

struct dev {
        const char *gpu, *gi;     /* labels gpu, GPU_I_ID ("" whole GPU, NULL unknown) */
        long idx, gi_num;         /* their numbers for sorting (-1: none) */
        const char *uuid, *mig_uuid, *model, *profile;
        const char *holder[3];    /* namespace, pod, container of its one holder */
        double util, used, total; /* NAN: unknown */
};

/* A container's use of a device (key: namespace, pod, container) or the
 * unattributed use of one reason (key[0]: the reason). */
struct use {
        const char *key[3], *uuid, *gpu;
        bool lost, region;        /* region: |used| is a share region's sum */
        double replicas, used, limit, share, sm, procs;
        size_t dev;
};

struct kdev_top {
        struct kdev_prom_text text;
        struct dev *devs;
        struct use *uses;
        size_t n_devs, n_uses;
        bool sampled;
        double when;
};

static bool eq(const char *a, const char *b)
{
        return a && b && strcmp(a, b) == 0;
}

static long num(const char *s)
{
        char *end;
        long v = s && *s ? strtol(s, &end, 10) : -1;
        return s && *s && !*end && v >= 0 ? v : -1;
}

static bool is_mig(const struct dev *d)
{
        return !d->gi || *d->gi;
}

static struct dev *add_dev(struct kdev_top *v, const char *gpu, const char *gi)
{
        struct dev *nd = realloc(v->devs, (v->n_devs + 1) * sizeof(*nd));
        if (!nd)
                return NULL;
        v->devs = nd;
        nd[v->n_devs] = (struct dev){.gpu = gpu, .gi = gi, .idx = num(gpu), .util = NAN,
                                     .used = NAN, .total = NAN,
                                     .gi_num = !gi ? LONG_MAX : *gi ? num(gi) : -1};
        return &nd[v->n_devs++];
}

static struct dev *find_dev(struct kdev_top *v, const char *gpu, const char *gi)
{
        for (size_t i = 0; i < v->n_devs; i++)
                if (eq(v->devs[i].gpu, gpu) && eq(v->devs[i].gi, gi))
                        return &v->devs[i];
        return NULL;
}

static int dcgm(struct kdev_top *v, const struct kdev_prom_sample *s, const char *field)
{
        const struct kdev_prom_text *t = &v->text;
        const char *gpu = kdev_prom_label(t, s, "gpu"), *gi = kdev_prom_label(t, s, "GPU_I_ID");
        const char *p = kdev_prom_label(t, s, "GPU_I_PROFILE"), *pod = kdev_prom_label(t, s, "pod");
        if (!gpu)
                return 0;
        struct dev *d = find_dev(v, gpu, gi ? gi : "");
        if (!d && !(d = add_dev(v, gpu, gi ? gi : "")))
                return -ENOMEM;
        d->uuid = d->uuid ? d->uuid : kdev_prom_label(t, s, "UUID");
        d->model = d->model ? d->model : kdev_prom_label(t, s, "modelName");
        d->profile = d->profile ? d->profile : p && *p ? p : NULL;
        if (pod && *pod) {
                d->holder[0] = kdev_prom_label(t, s, "namespace");
                d->holder[1] = pod;
                d->holder[2] = kdev_prom_label(t, s, "container");
        }
        if (strcmp(field, "GPU_UTIL") == 0)
                d->util = s->value;
        else if (strcmp(field, "FB_USED") == 0)
                d->used = s->value;
        else if (strcmp(field, "FB_TOTAL") == 0)
                d->total = s->value;
        return 0;
}

/* A sample of kdev_container_gpu_<field> (|lost| false) or of
 * kdev_gpu_unattributed_<field> (true). */
static int use(struct kdev_top *v, const struct kdev_prom_sample *s, bool lost, const char *field)
{
        const struct kdev_prom_text *t = &v->text;
        const char *k[5] = {kdev_prom_label(t, s, lost ? "reason" : "namespace"),
                            lost ? "" : kdev_prom_label(t, s, "pod"),
                            lost ? "" : kdev_prom_label(t, s, "container"),
                            kdev_prom_label(t, s, "UUID"), kdev_prom_label(t, s, "gpu")};
        for (int i = 0; i < 5; i++)
                if (!k[i])
                        return 0;
        struct use *u = NULL;
        for (size_t i = 0; !u && i < v->n_uses; i++) {
                struct use *x = &v->uses[i];
                if (x->lost == lost && eq(x->key[0], k[0]) && eq(x->key[1], k[1]) &&
                    eq(x->key[2], k[2]) && eq(x->uuid, k[3]) && eq(x->gpu, k[4]))
                        u = x;
        }
        if (!u) {
                struct use *nu = realloc(v->uses, (v->n_uses + 1) * sizeof(*nu));
                if (!nu)
                        return -ENOMEM;
                v->uses = nu;
                u = &nu[v->n_uses++];
                *u = (struct use){{k[0], k[1], k[2]}, k[3], k[4], lost, false,
                                  NAN, NAN, NAN, NAN, NAN, NAN, 0};
        }
        if (strcmp(field, "memory_used_bytes") == 0 || strcmp(field, "memory_bytes") == 0) {
                u->used = s->value;
                u->region = eq(kdev_prom_label(t, s, "source"), "region");
        } else if (strcmp(field, "memory_limit_bytes") == 0) {
                u->limit = s->value;
        } else if (strcmp(field, "compute_share_percent") == 0) {
                u->share = s->value;
        } else if (strcmp(field, "sm_utilization_percent") == 0) {
                u->sm = s->value;
        } else if (strcmp(field, "processes") == 0) {
                u->procs = s->value;
        } else if (strcmp(field, "replicas") == 0) { /* one series per resource */
                u->replicas = (isnan(u->replicas) ? 0 : u->replicas) + s->value;
        }
        return 0;
}

/* The device a kdev_* series' (UUID, gpu) names: a whole GPU by its UUID, a
 * MIG device by the MIG UUID joined to it. */
static struct dev *lookup(struct kdev_top *v, const char *uuid, const char *gpu)
{
        for (size_t i = 0; i < v->n_devs; i++) {
                struct dev *d = &v->devs[i];
                if (eq(d->gpu, gpu) &&
                    (eq(d->mig_uuid, uuid) || (!is_mig(d) && !d->mig_uuid && eq(d->uuid, uuid))))
                        return d;
        }
        return NULL;
}

/* The MiB the processes behind (UUID, gpu) use as NVML lists them (a
 * share region's sum may count otherwise). */
static double nvml_mib(const struct kdev_top *v, const char *uuid, const char *gpu)
{
        double b = 0;
        for (size_t i = 0; i < v->n_uses; i++)
                if (eq(v->uses[i].uuid, uuid) && eq(v->uses[i].gpu, gpu) && !v->uses[i].region &&
                    !isnan(v->uses[i].used))
                        b += v->uses[i].used;
        return floor(b / MIB);
}

/* Joins the MIG UUIDs of |gpu| (the kdev_* series') to its MIG devices
 * (GPU_I_ID): through a device's one holder (its pod labels); then a UUID
 * goes to the one device left whose FB_USED can hold its processes' memory
 * (a device's FB_USED is at least what its processes use), until none
 * joins. */
static void join_migs(struct kdev_top *v, const char *gpu)
{
        for (int pass = 0, joined = 0; pass < 2 || joined; pass++) {
                joined = 0;
                for (size_t i = 0; i < v->n_uses; i++) {
                        struct use *u = &v->uses[i];
                        if (!eq(u->gpu, gpu) || lookup(v, u->uuid, gpu) || (pass == 0 && u->lost))
                                continue;
                        double need = pass ? nvml_mib(v, u->uuid, gpu) : 0;
                        struct dev *hit = NULL;
                        size_t n = 0;
                        for (size_t j = 0; j < v->n_devs; j++) {
                                struct dev *d = &v->devs[j];
                                if (!eq(d->gpu, gpu) || !d->gi || !*d->gi || d->mig_uuid)
                                        continue;
                                if (pass ? isnan(d->used) || d->used >= need
                                         : eq(d->holder[0], u->key[0]) &&
                                                   eq(d->holder[1], u->key[1]) &&
                                                   eq(d->holder[2], u->key[2]))
                                        hit = d, n++;
                        }
                        if (n == 1)
                                hit->mig_uuid = u->uuid, joined = pass > 0;
                }
        }
}

/* A row for a (UUID, gpu) no device row stands for: a MIG device of
 * unknown instance on a GPU with MIG devices, else a whole GPU. */
static int orphan(struct kdev_top *v, const char *uuid, const char *gpu)
{
        if (lookup(v, uuid, gpu))
                return 0;
        struct dev *mig = NULL;
        for (size_t j = 0; j < v->n_devs; j++)
                if (eq(v->devs[j].gpu, gpu) && (!mig || is_mig(&v->devs[j])))
                        mig = &v->devs[j];
        const char *model = mig ? mig->model : NULL, *parent = mig ? mig->uuid : NULL;
        bool in_mig = mig && is_mig(mig);
        struct dev *d = add_dev(v, gpu, in_mig ? NULL : "");
        if (!d)
                return -ENOMEM;
        d->model = model;
        d->uuid = in_mig ? parent : uuid;
        d->mig_uuid = in_mig ? uuid : NULL;
        return 0;
}

static int cmp_str(const char *a, const char *b)
{
        return strcmp(a ? a : "", b ? b : "");
}

static int cmp_dev(const void *a, const void *b)
{
        const struct dev *x = a, *y = b;
        if (x->idx != y->idx) /* unknown index (-1) last */
                return x->idx < 0 ? 1 : y->idx < 0 ? -1 : x->idx < y->idx ? -1 : 1;
        if (x->gi_num != y->gi_num)
                return x->gi_num < y->gi_num ? -1 : 1;
        int c = cmp_str(x->gpu, y->gpu);
        c = c ? c : cmp_str(x->gi, y->gi);
        return c ? c : cmp_str(x->mig_uuid ? x->mig_uuid : x->uuid,
                               y->mig_uuid ? y->mig_uuid : y->uuid);
}

static int cmp_use(const void *a, const void *b)
{
        const struct use *x = a, *y = b;
        int c = x->lost - y->lost;
        for (int i = 0; c == 0 && i < 3; i++)
                c = strcmp(x->key[i], y->key[i]);
        return c;
}

static int build(struct kdev_top *v)
{
        const struct kdev_prom_text *t = &v->text;
        int rc = 0;
        for (size_t i = 0; rc == 0 && i < t->n_samples; i++) {
                const struct kdev_prom_sample *s = &t->samples[i];
                if (strncmp(s->name, "DCGM_FI_DEV_", 12) == 0)
                        rc = dcgm(v, s, s->name + 12);
                else if (strncmp(s->name, "kdev_container_gpu_", 19) == 0)
                        rc = use(v, s, false, s->name + 19);
                else if (strncmp(s->name, "kdev_gpu_unattributed_", 22) == 0)
                        rc = use(v, s, true, s->name + 22);
                else if (strcmp(s->name, "kdev_usage_last_sample_timestamp_seconds") == 0)
                        v->sampled = true, v->when = s->value;
        }
        /* a GPU whose MIG devices have series but itself none: its row from theirs */
        for (size_t i = 0, n = v->n_devs; rc == 0 && i < n; i++)
                if (is_mig(&v->devs[i]) && !find_dev(v, v->devs[i].gpu, "")) {
                        struct dev m = v->devs[i], *d = add_dev(v, m.gpu, "");
                        rc = d ? (d->uuid = m.uuid, d->model = m.model, 0) : -ENOMEM;
                }
        for (size_t i = 0; rc == 0 && i < v->n_uses; i++)
                join_migs(v, v->uses[i].gpu);
        for (size_t i = 0; rc == 0 && i < v->n_uses; i++)
                rc = orphan(v, v->uses[i].uuid, v->uses[i].gpu);
        /* no usage sample: the GPUs kdev-plugin serves, by UUID */
        for (size_t i = 0; rc == 0 && !v->sampled && i < t->n_samples; i++) {
                const char *u = kdev_prom_label(t, &t->samples[i], "gpu");
                bool known = !u || strcmp(t->samples[i].name, "kdev_gpu_devices") != 0;
                for (size_t j = 0; !known && j < v->n_devs; j++)
                        known = eq(v->devs[j].uuid, u);
                struct dev *d = known ? NULL : add_dev(v, NULL, "");
                if (d)
                        d->uuid = u;
                rc = known || d ? 0 : -ENOMEM;
        }
        if (rc < 0)
                return rc;
        if (v->n_devs)
                qsort(v->devs, v->n_devs, sizeof(*v->devs), cmp_dev);
        if (v->n_uses)
                qsort(v->uses, v->n_uses, sizeof(*v->uses), cmp_use);
        for (size_t i = 0; i < v->n_uses; i++)
                v->uses[i].dev = (size_t)(lookup(v, v->uses[i].uuid, v->uses[i].gpu) - v->devs);
        return 0;
}

struct kdev_top *kdev_top_new(const char *text, size_t len, struct kdev_err *err)
{
        struct kdev_top *v = calloc(1, sizeof(*v));
        if (!v) {
                kdev_err_set(err, ENOMEM, "out of memory");
                return NULL;
        }
        if (kdev_prom_parse(text, len, &v->text, err) < 0) {
                free(v);
                return NULL;
        }
        if (build(v) < 0) {
                kdev_top_free(v);
                kdev_err_set(err, ENOMEM, "out of memory");
                return NULL;
        }
        return v;
}

bool kdev_top_sampled(const struct kdev_top *v, double *when)
{
        if (v->sampled && when)
                *when = v->when;
        return v->sampled;
}

void kdev_top_free(struct kdev_top *v)
{
        if (!v)
                return;
        kdev_prom_text_clear(&v->text);
        free(v->devs);
        free(v->uses);
        free(v);
}

/* ---- output -------------------------------------------------------------- */

/* |x| into |b| ("-" unknown; whole numbers without a fraction) + |unit|;
 * with |mib| bytes as whole MiB. */
static const char *fmt(char b[32], double x, const char *unit, bool mib)
{
        if (isnan(x))
                return "-";
        x = mib ? floor(x / MIB) : x;
        snprintf(b, 32, x == floor(x) && fabs(x) < 1e15 ? "%.0f%s" : "%.1f%s", x, unit);
        return b;
}

/* Adds a row whose NAME cell (formatted) has its control characters as '?'. */
static int __attribute__((format(printf, 6, 7))) row(struct kdev_cli_table *t, const char *gpu, const char *gi, const char *mem,
               const char *const tail[4], const char *name_fmt, ...)
{
        char name[1024];
        va_list ap;
        va_start(ap, name_fmt);
        vsnprintf(name, sizeof(name), name_fmt, ap);
        va_end(ap);
        for (char *p = name; *p; p++)
                if ((unsigned char)*p < 0x20 || *p == 0x7f)
                        *p = '?';
        return kdev_cli_table_add(t, gpu, gi, name, tail[0], mem, tail[1], tail[2], tail[3]);
}

int kdev_top_print_table(const struct kdev_top *v, FILE *f)
{
        struct kdev_cli_table *t = kdev_cli_table_new(8, "GPU", "GI", "NAME", "UTIL", "MEMORY-MIB",
                                                      "REPLICAS", "SHARE", "SM");
        int rc = t ? 0 : -ENOMEM;
        for (size_t i = 0; rc == 0 && i < v->n_devs; i++) {
                const struct dev *d = &v->devs[i];
                char a[32], b[32], c[32], mem[80];
                const char *base = d->model ? d->model : d->uuid ? d->uuid : "-";
                if (isnan(d->used) && isnan(d->total))
                        snprintf(mem, sizeof(mem), "-");
                else
                        snprintf(mem, sizeof(mem), "%s / %s", fmt(a, d->used, "", false),
                                 fmt(b, d->total, "", false));
                const char *tail[4] = {fmt(c, d->util, "%", false), "", "", ""};
                rc = row(t, d->gpu ? d->gpu : "-", !d->gi ? "?" : *d->gi ? d->gi : "-", mem, tail,
                         "%s%s%s", base, is_mig(d) ? " MIG " : "",
                         !is_mig(d)   ? ""
                         : d->profile ? d->profile
                         : d->mig_uuid ? d->mig_uuid : "?");
                for (size_t k = 0; rc == 0 && k < v->n_uses; k++) {
                        const struct use *u = &v->uses[k];
                        char r[32], s[32], m[32];
                        if (u->dev != i)
                                continue;
                        if (u->lost) {
                                const char *none[4] = {"", "", "", ""};
                                rc = row(t, "", "", fmt(a, u->used, "", true), none,
                                         "  unattributed (%s): %s process%s", u->key[0],
                                         fmt(b, u->procs, "", false), u->procs == 1 ? "" : "es");
                                continue;
                        }
                        snprintf(mem, sizeof(mem), "%s / %s", fmt(a, u->used, "", true),
                                 fmt(b, u->limit, "", true));
                        const char *cells[4] = {"", fmt(r, u->replicas, "", false),
                                                fmt(s, u->share, "%", false),
                                                fmt(m, u->sm, "%", false)};
                        rc = row(t, "", "", mem, cells, "  %s/%s/%s", u->key[0], u->key[1],
                                 u->key[2]);
                }
        }
        if (rc == 0 && v->n_devs)
                kdev_cli_table_print(t, f, NULL);
        kdev_cli_table_free(t);
        if (rc == 0 && !v->sampled)
                fprintf(f, "no usage samples yet (is usage.interval set in kdev-plugin's "
                           "config?)\n");
        else if (rc == 0 && !v->n_devs)
                fprintf(f, "no GPU in kdev-plugin's usage sample\n");
        return rc;
}

static json_t *jnum(double x)
{
        if (!isfinite(x))
                return json_null();
        return x == floor(x) && fabs(x) < 9007199254740992.0 ? json_integer((json_int_t)x)
                                                               : json_real(x);
}

/* |s| as a JSON string (NULL: null); text that is not UTF-8 with its
 * non-ASCII bytes as '?'. */
static json_t *jstr(const char *s)
{
        json_t *j = s ? json_string(s) : json_null();
        char *c = j ? NULL : strdup(s);
        for (char *p = c; p && *p; p++)
                *p = (unsigned char)*p < 0x80 ? *p : '?';
        if (c)
                j = json_string(c);
        free(c);
        return j;
}

json_t *kdev_top_json(const struct kdev_top *v)
{
        json_t *gpus = json_array();
        for (size_t i = 0; gpus && i < v->n_devs; i++) {
                const struct dev *d = &v->devs[i];
                json_t *ctrs = json_array(), *lost = json_array();
                for (size_t k = 0; k < v->n_uses; k++) {
                        const struct use *u = &v->uses[k];
                        if (u->dev != i)
                                continue;
                        json_t *j = u->lost ? json_pack("{s:o,s:o,s:o}", "reason",
                                                        jstr(u->key[0]), "processes",
                                                        jnum(u->procs), "memoryBytes",
                                                        jnum(u->used))
                                            : json_pack("{s:o,s:o,s:o,s:o,s:o,s:o,s:o,s:o}",
                                                        "namespace", jstr(u->key[0]), "pod",
                                                        jstr(u->key[1]), "container",
                                                        jstr(u->key[2]), "replicas",
                                                        jnum(u->replicas), "memoryUsedBytes",
                                                        jnum(u->used), "memoryLimitBytes",
                                                        jnum(u->limit), "computeSharePercent",
                                                        jnum(u->share), "smUtilizationPercent",
                                                        jnum(u->sm));
                        json_array_append_new(u->lost ? lost : ctrs, j);
                }
                json_t *gi = !d->gi || !*d->gi ? json_null()
                             : d->gi_num >= 0  ? json_integer(d->gi_num)
                                               : jstr(d->gi);
                json_t *g = json_pack(
                        "{s:o,s:o,s:o,s:o,s:o,s:o,s:o,s:o,s:o,s:o,s:o}", "gpu", jstr(d->gpu),
                        "uuid", jstr(d->uuid), "migUuid", jstr(d->mig_uuid), "model",
                        jstr(d->model), "migProfile", jstr(d->profile), "gpuInstanceId", gi,
                        "utilizationPercent", jnum(d->util), "memoryUsedMiB", jnum(d->used),
                        "memoryTotalMiB", jnum(d->total), "containers", ctrs, "unattributed",
                        lost);
                if (json_array_append_new(gpus, g) < 0) {
                        json_decref(gpus);
                        return NULL;
                }
        }
        return gpus ? json_pack("{s:o,s:o}", "gpus", gpus, "lastSampleTimestamp",
                                v->sampled ? jnum(v->when) : json_null())
                    : NULL;
}
