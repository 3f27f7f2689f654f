/* kdevctl top's usage view: the devices, containers and unattributed use
 * of one metrics text, joined and sorted, as a table or JSON. See top.h. */
#include "kubelet/top.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kubelet/cli.h"
#include "kubelet/promtext.h"

#define MIB (1024.0 * 1024.0)

/* Every string points into the parsed text, which the view keeps. */
struct dev {
        const char *gpu, *gi;       /* labels gpu, GPU_I_ID ("" whole GPU, NULL unknown) */
        long idx, gi_num;           /* for sorting: -1 unknown index / whole GPU */
        const char *uuid, *mig_uuid, *model, *profile;
        const char *holder[3];      /* namespace, pod, container of its one holder */
        double util, used, total;   /* NAN: unknown */
};

struct ctr {
        const char *ns, *pod, *name, *uuid, *gpu;
        double replicas, used, limit, share, sm;
        size_t dev;
        bool region; /* used is its share region's sum */
};

struct lost {
        const char *uuid, *gpu, *reason;
        double bytes, procs;
        size_t dev;
};

struct kdev_top {
        struct kdev_prom_text text;
        struct dev *devs;
        struct ctr *ctrs;
        struct lost *losts;
        size_t n_devs, n_ctrs, n_losts;
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

/* Appends a zeroed element to |*v| (|*n| elements); NULL on ENOMEM. */
static void *push(void *v, size_t *n, size_t size)
{
        void **arr = v;
        void *nv = realloc(*arr, (*n + 1) * size);
        if (!nv)
                return NULL;
        *arr = nv;
        memset((char *)nv + *n * size, 0, size);
        return (char *)nv + (*n)++ * size;
}

static struct dev *add_dev(struct kdev_top *v, const char *gpu, const char *gi)
{
        struct dev *d = push(&v->devs, &v->n_devs, sizeof(*d));
        if (d) {
                *d = (struct dev){.gpu = gpu, .gi = gi, .idx = num(gpu), .util = NAN,
                                  .used = NAN, .total = NAN};
                d->gi_num = !gi ? LONG_MAX : *gi ? num(gi) : -1;
        }
        return d;
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
        if (!gpu)
                return 0;
        gi = gi ? gi : "";
        struct dev *d = find_dev(v, gpu, gi);
        if (!d && !(d = add_dev(v, gpu, gi)))
                return -ENOMEM;
        const char *p = kdev_prom_label(t, s, "GPU_I_PROFILE"), *pod = kdev_prom_label(t, s, "pod");
        d->uuid = d->uuid ? d->uuid : kdev_prom_label(t, s, "UUID");
        d->model = d->model ? d->model : kdev_prom_label(t, s, "modelName");
        d->profile = d->profile ? d->profile : (p && *p ? p : NULL);
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

static int container(struct kdev_top *v, const struct kdev_prom_sample *s, const char *family)
{
        const struct kdev_prom_text *t = &v->text;
        const char *k[5] = {kdev_prom_label(t, s, "namespace"), kdev_prom_label(t, s, "pod"),
                            kdev_prom_label(t, s, "container"), kdev_prom_label(t, s, "UUID"),
                            kdev_prom_label(t, s, "gpu")};
        for (int i = 0; i < 5; i++)
                if (!k[i])
                        return 0;
        struct ctr *c = NULL;
        for (size_t i = 0; !c && i < v->n_ctrs; i++) {
                struct ctr *x = &v->ctrs[i];
                if (eq(x->ns, k[0]) && eq(x->pod, k[1]) && eq(x->name, k[2]) &&
                    eq(x->uuid, k[3]) && eq(x->gpu, k[4]))
                        c = x;
        }
        if (!c) {
                if (!(c = push(&v->ctrs, &v->n_ctrs, sizeof(*c))))
                        return -ENOMEM;
                *c = (struct ctr){k[0], k[1], k[2], k[3], k[4], NAN, NAN, NAN, NAN, NAN, 0, false};
        }
        if (strcmp(family, "memory_used_bytes") == 0) {
                c->used = s->value;
                c->region = eq(kdev_prom_label(t, s, "source"), "region");
        }
        else if (strcmp(family, "memory_limit_bytes") == 0)
                c->limit = s->value;
        else if (strcmp(family, "compute_share_percent") == 0)
                c->share = s->value;
        else if (strcmp(family, "sm_utilization_percent") == 0)
                c->sm = s->value;
        else if (strcmp(family, "replicas") == 0) /* one series per resource */
                c->replicas = (isnan(c->replicas) ? 0 : c->replicas) + s->value;
        return 0;
}

static int unattributed(struct kdev_top *v, const struct kdev_prom_sample *s, bool bytes)
{
        const struct kdev_prom_text *t = &v->text;
        const char *uuid = kdev_prom_label(t, s, "UUID"), *gpu = kdev_prom_label(t, s, "gpu"),
                   *reason = kdev_prom_label(t, s, "reason");
        if (!uuid || !gpu || !reason)
                return 0;
        struct lost *l = NULL;
        for (size_t i = 0; !l && i < v->n_losts; i++)
                if (eq(v->losts[i].uuid, uuid) && eq(v->losts[i].gpu, gpu) &&
                    eq(v->losts[i].reason, reason))
                        l = &v->losts[i];
        if (!l) {
                if (!(l = push(&v->losts, &v->n_losts, sizeof(*l))))
                        return -ENOMEM;
                *l = (struct lost){uuid, gpu, reason, NAN, NAN, 0};
        }
        *(bytes ? &l->bytes : &l->procs) = s->value;
        return 0;
}

/* The device a kdev_* series' (UUID, gpu) names: a whole GPU by its UUID, a
 * MIG device by the MIG UUID joined to it. */
static struct dev *lookup(struct kdev_top *v, const char *uuid, const char *gpu)
{
        for (size_t i = 0; i < v->n_devs; i++) {
                struct dev *d = &v->devs[i];
                if (eq(d->gpu, gpu) && (eq(d->mig_uuid, uuid) || (!d->mig_uuid && d->gi &&
                                                                  !*d->gi && eq(d->uuid, uuid))))
                        return d;
        }
        return NULL;
}

/* The MiB the processes behind (UUID, gpu) use, as NVML lists them (a
 * share region's sum is not: it may count otherwise). */
static double nvml_mib(const struct kdev_top *v, const char *uuid, const char *gpu)
{
        double b = 0;
        for (size_t i = 0; i < v->n_ctrs; i++)
                if (eq(v->ctrs[i].uuid, uuid) && eq(v->ctrs[i].gpu, gpu) && !v->ctrs[i].region &&
                    !isnan(v->ctrs[i].used))
                        b += v->ctrs[i].used;
        for (size_t i = 0; i < v->n_losts; i++)
                if (eq(v->losts[i].uuid, uuid) && eq(v->losts[i].gpu, gpu) &&
                    !isnan(v->losts[i].bytes))
                        b += v->losts[i].bytes;
        return floor(b / MIB);
}

/* Joins the MIG UUIDs of |gpu| (the kdev_* series') to its MIG devices
 * (GPU_I_ID): through a device's one holder (its pod labels); then a UUID
 * goes to the one device left whose FB_USED can hold its processes' memory
 * (a device's FB_USED is at least what its processes use), until none
 * joins. */
static void join_migs(struct kdev_top *v, const char *gpu)
{
        for (size_t i = 0; i < v->n_ctrs; i++) {
                struct ctr *c = &v->ctrs[i];
                if (!eq(c->gpu, gpu) || lookup(v, c->uuid, gpu))
                        continue;
                struct dev *hit = NULL;
                size_t n = 0;
                for (size_t j = 0; j < v->n_devs; j++) {
                        struct dev *d = &v->devs[j];
                        if (eq(d->gpu, gpu) && d->gi && *d->gi && !d->mig_uuid &&
                            eq(d->holder[0], c->ns) && eq(d->holder[1], c->pod) &&
                            eq(d->holder[2], c->name))
                                hit = d, n++;
                }
                if (n == 1)
                        hit->mig_uuid = c->uuid;
        }
        for (bool joined = true; joined;) {
                joined = false;
                for (size_t i = 0; i < v->n_ctrs + v->n_losts; i++) {
                        const char *u = i < v->n_ctrs ? v->ctrs[i].uuid
                                                      : v->losts[i - v->n_ctrs].uuid;
                        const char *g = i < v->n_ctrs ? v->ctrs[i].gpu
                                                      : v->losts[i - v->n_ctrs].gpu;
                        if (!eq(g, gpu) || lookup(v, u, gpu))
                                continue;
                        double need = nvml_mib(v, u, gpu);
                        struct dev *hit = NULL;
                        size_t n = 0;
                        for (size_t j = 0; j < v->n_devs; j++) {
                                struct dev *d = &v->devs[j];
                                if (eq(d->gpu, gpu) && d->gi && *d->gi && !d->mig_uuid &&
                                    (isnan(d->used) || d->used >= need))
                                        hit = d, n++;
                        }
                        if (n == 1) {
                                hit->mig_uuid = u;
                                joined = true;
                        }
                }
        }
}

/* A row for a (UUID, gpu) no device row stands for: a MIG device of
 * unknown instance on a GPU with MIG devices, else a whole GPU. */
static int orphan(struct kdev_top *v, const char *uuid, const char *gpu)
{
        if (lookup(v, uuid, gpu))
                return 0;
        bool mig = false;
        const char *model = NULL, *parent = NULL;
        for (size_t j = 0; j < v->n_devs; j++)
                if (eq(v->devs[j].gpu, gpu)) {
                        mig = mig || (v->devs[j].gi && *v->devs[j].gi);
                        model = v->devs[j].model;
                        parent = v->devs[j].uuid;
                }
        struct dev *d = add_dev(v, gpu, mig ? NULL : "");
        if (!d)
                return -ENOMEM;
        d->model = model;
        d->uuid = mig ? parent : uuid;
        d->mig_uuid = mig ? uuid : NULL;
        return 0;
}

static int cmp_dev(const void *a, const void *b)
{
        const struct dev *x = a, *y = b;
        if (x->idx != y->idx)
                return x->idx < 0 ? 1 : y->idx < 0 ? -1 : (x->idx > y->idx) - (x->idx < y->idx);
        if (x->gi_num != y->gi_num)
                return (x->gi_num > y->gi_num) - (x->gi_num < y->gi_num);
        int c = strcmp(x->gpu ? x->gpu : "", y->gpu ? y->gpu : "");
        if (c)
                return c;
        c = strcmp(x->gi ? x->gi : "", y->gi ? y->gi : "");
        return c ? c : strcmp(x->mig_uuid ? x->mig_uuid : x->uuid ? x->uuid : "",
                              y->mig_uuid ? y->mig_uuid : y->uuid ? y->uuid : "");
}

static int cmp_ctr(const void *a, const void *b)
{
        const struct ctr *x = a, *y = b;
        int c = strcmp(x->ns, y->ns);
        c = c ? c : strcmp(x->pod, y->pod);
        return c ? c : strcmp(x->name, y->name);
}

static int cmp_lost(const void *a, const void *b)
{
        return strcmp(((const struct lost *)a)->reason, ((const struct lost *)b)->reason);
}

static int build(struct kdev_top *v)
{
        const struct kdev_prom_text *t = &v->text;
        const char **gpu_uuids = NULL;
        size_t n_uuids = 0;
        int rc = 0;
        for (size_t i = 0; rc == 0 && i < t->n_samples; i++) {
                const struct kdev_prom_sample *s = &t->samples[i];
                if (strncmp(s->name, "DCGM_FI_DEV_", 12) == 0)
                        rc = dcgm(v, s, s->name + 12);
                else if (strncmp(s->name, "kdev_container_gpu_", 19) == 0)
                        rc = container(v, s, s->name + 19);
                else if (strcmp(s->name, "kdev_gpu_unattributed_memory_bytes") == 0 ||
                         strcmp(s->name, "kdev_gpu_unattributed_processes") == 0)
                        rc = unattributed(v, s, s->name[22] == 'm');
                else if (strcmp(s->name, "kdev_usage_last_sample_timestamp_seconds") == 0)
                        v->sampled = true, v->when = s->value;
                else if (strcmp(s->name, "kdev_gpu_devices") == 0 &&
                         kdev_prom_label(t, s, "gpu")) {
                        const char **u = push(&gpu_uuids, &n_uuids, sizeof(*u));
                        rc = u ? (*u = kdev_prom_label(t, s, "gpu"), 0) : -ENOMEM;
                }
        }
        /* a GPU with MIG devices has no whole-GPU series: its row from theirs */
        for (size_t i = 0, n = v->n_devs; rc == 0 && i < n; i++) {
                struct dev m = v->devs[i];
                if (m.gi && *m.gi && !find_dev(v, m.gpu, "")) {
                        struct dev *d = add_dev(v, m.gpu, "");
                        rc = d ? (d->uuid = m.uuid, d->model = m.model, 0) : -ENOMEM;
                }
        }
        for (size_t i = 0; rc == 0 && i < v->n_ctrs + v->n_losts; i++)
                join_migs(v, i < v->n_ctrs ? v->ctrs[i].gpu : v->losts[i - v->n_ctrs].gpu);
        for (size_t i = 0; rc == 0 && i < v->n_ctrs + v->n_losts; i++)
                rc = i < v->n_ctrs ? orphan(v, v->ctrs[i].uuid, v->ctrs[i].gpu)
                                   : orphan(v, v->losts[i - v->n_ctrs].uuid,
                                            v->losts[i - v->n_ctrs].gpu);
        /* no usage sample: the GPUs kdev-plugin serves, by UUID */
        for (size_t i = 0; rc == 0 && !v->sampled && i < n_uuids; i++) {
                bool known = false;
                for (size_t j = 0; j < v->n_devs; j++)
                        known = known || eq(v->devs[j].uuid, gpu_uuids[i]);
                struct dev *d = known ? NULL : add_dev(v, NULL, "");
                if (!known)
                        rc = d ? (d->uuid = gpu_uuids[i], 0) : -ENOMEM;
        }
        free(gpu_uuids);
        if (rc < 0)
                return rc;
        if (v->n_devs)
                qsort(v->devs, v->n_devs, sizeof(*v->devs), cmp_dev);
        if (v->n_ctrs)
                qsort(v->ctrs, v->n_ctrs, sizeof(*v->ctrs), cmp_ctr);
        if (v->n_losts)
                qsort(v->losts, v->n_losts, sizeof(*v->losts), cmp_lost);
        for (size_t i = 0; i < v->n_ctrs; i++)
                v->ctrs[i].dev = (size_t)(lookup(v, v->ctrs[i].uuid, v->ctrs[i].gpu) - v->devs);
        for (size_t i = 0; i < v->n_losts; i++)
                v->losts[i].dev = (size_t)(lookup(v, v->losts[i].uuid, v->losts[i].gpu) - v->devs);
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
        free(v->ctrs);
        free(v->losts);
        free(v);
}

/* ---- output -------------------------------------------------------------- */

/* |x| as text: "-" unknown, whole numbers without a fraction. */
static const char *fmt(char b[32], double x, const char *unit)
{
        if (isnan(x))
                return "-";
        if (x == floor(x) && fabs(x) < 1e15)
                snprintf(b, 32, "%.0f%s", x, unit);
        else
                snprintf(b, 32, "%.1f%s", x, unit);
        return b;
}

static const char *mib(char b[32], double bytes)
{
        return fmt(b, isnan(bytes) ? bytes : floor(bytes / MIB), "");
}

/* A cell with the control characters of |s| as '?', malloc'ed. */
static char *clean(const char *s)
{
        char *c = strdup(s);
        for (char *p = c; p && *p; p++)
                if ((unsigned char)*p < 0x20 || *p == 0x7f)
                        *p = '?';
        return c;
}

static int row(struct kdev_cli_table *t, const char *c0, const char *c1, const char *name,
               const char *c3, const char *c4, const char *c5, const char *c6, const char *c7)
{
        char *n = clean(name);
        int rc = n ? kdev_cli_table_add(t, c0, c1, n, c3, c4, c5, c6, c7) : -ENOMEM;
        free(n);
        return rc;
}

static int dev_row(struct kdev_cli_table *t, const struct dev *d)
{
        char util[32], used[32], total[32], gpu[32], *name = NULL, *mem = NULL;
        const char *base = d->model ? d->model : d->uuid ? d->uuid : "-";
        bool mig = !d->gi || *d->gi;
        const char *mig_name = d->profile ? d->profile : d->mig_uuid ? d->mig_uuid : "?";
        int rc = -ENOMEM;
        if ((mig ? asprintf(&name, "%s MIG %s", base, mig_name) : asprintf(&name, "%s", base)) < 0)
                name = NULL;
        if (isnan(d->used) && isnan(d->total))
                mem = strdup("-");
        else if (asprintf(&mem, "%s / %s", fmt(used, d->used, ""), fmt(total, d->total, "")) < 0)
                mem = NULL;
        snprintf(gpu, sizeof(gpu), "%s", d->gpu ? d->gpu : "-");
        if (name && mem)
                rc = row(t, gpu, !d->gi ? "?" : *d->gi ? d->gi : "-", name,
                         fmt(util, d->util, "%"), mem, "", "", "");
        free(name);
        free(mem);
        return rc;
}

int kdev_top_print_table(const struct kdev_top *v, FILE *f)
{
        struct kdev_cli_table *t = kdev_cli_table_new(8, "GPU", "GI", "NAME", "UTIL", "MEMORY-MIB",
                                                      "REPLICAS", "SHARE", "SM");
        int rc = t ? 0 : -ENOMEM;
        for (size_t i = 0; rc == 0 && i < v->n_devs; i++) {
                rc = dev_row(t, &v->devs[i]);
                for (size_t k = 0; rc == 0 && k < v->n_ctrs; k++) {
                        const struct ctr *c = &v->ctrs[k];
                        char *name = NULL, *mem = NULL, a[32], b[32], r[32], s[32], m[32];
                        if (c->dev != i)
                                continue;
                        if (asprintf(&name, "  %s/%s/%s", c->ns, c->pod, c->name) < 0)
                                name = NULL;
                        if (asprintf(&mem, "%s / %s", mib(a, c->used), mib(b, c->limit)) < 0)
                                mem = NULL;
                        rc = name && mem ? row(t, "", "", name, "", mem, fmt(r, c->replicas, ""),
                                               fmt(s, c->share, "%"), fmt(m, c->sm, "%"))
                                         : -ENOMEM;
                        free(name);
                        free(mem);
                }
                for (size_t k = 0; rc == 0 && k < v->n_losts; k++) {
                        const struct lost *l = &v->losts[k];
                        char *name = NULL, p[32], b[32];
                        if (l->dev != i)
                                continue;
                        if (asprintf(&name, "  unattributed (%s): %s process%s", l->reason,
                                     fmt(p, l->procs, ""), l->procs == 1 ? "" : "es") < 0)
                                name = NULL;
                        rc = name ? row(t, "", "", name, "", mib(b, l->bytes), "", "", "")
                                  : -ENOMEM;
                        free(name);
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
        if (isnan(x))
                return json_null();
        if (x == floor(x) && fabs(x) < 9007199254740992.0)
                return json_integer((json_int_t)x);
        return isfinite(x) ? json_real(x) : json_null();
}

static json_t *jstr(const char *s)
{
        return s ? json_string(s) : json_null();
}

json_t *kdev_top_json(const struct kdev_top *v)
{
        json_t *gpus = json_array();
        for (size_t i = 0; gpus && i < v->n_devs; i++) {
                const struct dev *d = &v->devs[i];
                json_t *ctrs = json_array(), *losts = json_array();
                for (size_t k = 0; k < v->n_ctrs; k++) {
                        const struct ctr *c = &v->ctrs[k];
                        if (c->dev == i)
                                json_array_append_new(ctrs, json_pack(
                                        "{s:s,s:s,s:s,s:o,s:o,s:o,s:o,s:o}", "namespace", c->ns,
                                        "pod", c->pod, "container", c->name, "replicas",
                                        jnum(c->replicas), "memoryUsedBytes", jnum(c->used),
                                        "memoryLimitBytes", jnum(c->limit), "computeSharePercent",
                                        jnum(c->share), "smUtilizationPercent", jnum(c->sm)));
                }
                for (size_t k = 0; k < v->n_losts; k++) {
                        const struct lost *l = &v->losts[k];
                        if (l->dev == i)
                                json_array_append_new(losts, json_pack(
                                        "{s:s,s:o,s:o}", "reason", l->reason, "processes",
                                        jnum(l->procs), "memoryBytes", jnum(l->bytes)));
                }
                json_t *g = json_pack(
                        "{s:o,s:o,s:o,s:o,s:o,s:o,s:o,s:o,s:o,s:o,s:o}", "gpu", jstr(d->gpu),
                        "uuid", jstr(d->uuid), "migUuid", jstr(d->mig_uuid), "model",
                        jstr(d->model), "migProfile", jstr(d->profile), "gpuInstanceId",
                        !d->gi || !*d->gi ? json_null()
                        : d->gi_num >= 0 ? json_integer(d->gi_num) : json_string(d->gi),
                        "utilizationPercent", jnum(d->util), "memoryUsedMiB", jnum(d->used),
                        "memoryTotalMiB", jnum(d->total), "containers", ctrs, "unattributed",
                        losts);
                if (!g || json_array_append_new(gpus, g) < 0) {
                        json_decref(gpus);
                        return NULL;
                }
        }
        return gpus ? json_pack("{s:o,s:o}", "gpus", gpus, "lastSampleTimestamp",
                                v->sampled ? jnum(v->when) : json_null())
                    : NULL;
}
