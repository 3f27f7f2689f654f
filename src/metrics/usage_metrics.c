/* The usage families of both daemons. See plugin_metrics.h ("usage
 * metering") and dra_metrics.h. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "metrics/usage_metrics_internal.h"

#define MIB (1024.0 * 1024.0)

enum { F_UTIL, F_MEM_UTIL, F_FB_USED, F_FB_FREE, F_FB_TOTAL, N_DCGM };

struct kdev_plugin_usage_metrics {
        char *hostname;
        bool dra;       /* kdev-dra-plugin's: the dra_* labels, no resource label */
        struct kdev_metric_family *dcgm[N_DCGM];
        struct kdev_metric_family *used, *limit, *compute, *replicas, *sm;
        struct kdev_metric_family *lost_bytes, *lost_procs, *failures, *samples, *last;
};

#define LABELS(...)                                                                        \
        (const char *[]){__VA_ARGS__}, sizeof((const char *[]){__VA_ARGS__}) / sizeof(char *)

/* dcgm-exporter's device labels in Kubernetes mode, then, on DRA-claimed
 * devices, its DRA labels (KUBERNETES_ENABLE_DRA: the claim and its device
 * from PodResources' ClaimResource) */
static const char *const dcgm_labels[] = {"gpu", "UUID", "pci_bus_id", "device", "modelName",
                                          "Hostname", "GPU_I_PROFILE", "GPU_I_ID", "namespace",
                                          "pod", "container"};
#define N_DCGM_LABELS (sizeof(dcgm_labels) / sizeof(dcgm_labels[0]))
static const char *const dra_labels[] = {"dra_claim_name", "dra_claim_namespace",
                                         "dra_device_name", "dra_driver_name", "dra_pool_name"};
#define N_DRA_LABELS (sizeof(dra_labels) / sizeof(dra_labels[0]))
static const char *const container_labels[] = {"namespace", "pod", "container", "UUID", "gpu"};
#define N_CONTAINER_LABELS (sizeof(container_labels) / sizeof(container_labels[0]))
#define MAX_LABELS (N_DCGM_LABELS + N_DRA_LABELS + 1)

/* Registers a family whose labels are |base| (|n| of them), then |extra|
 * (NULL: none; "resource" is left out of kdev-dra-plugin's), then the DRA
 * labels for kdev-dra-plugin. */
static struct kdev_metric_family *add(struct kdev_plugin_usage_metrics *u, struct kdev_metrics *m,
                                      const char *name, const char *help,
                                      const char *const *base, size_t n, const char *extra,
                                      struct kdev_err *err)
{
        const char *l[MAX_LABELS];
        size_t k = 0;
        for (size_t i = 0; i < n; i++)
                l[k++] = base[i];
        if (extra && !(u->dra && strcmp(extra, "resource") == 0))
                l[k++] = extra;
        for (size_t i = 0; u->dra && i < N_DRA_LABELS; i++)
                l[k++] = dra_labels[i];
        return kdev_metrics_add(m, KDEV_METRIC_GAUGE, name, help, l, k, NULL, 0, err);
}

#define CONTAINER_FAMILY(name, help, extra)                                                \
        add(u, m, name, help, container_labels, N_CONTAINER_LABELS, extra, err)

static const char *const dcgm_names[N_DCGM][2] = {
        {"DCGM_FI_DEV_GPU_UTIL", "GPU utilization (in %)."},
        {"DCGM_FI_DEV_MEM_COPY_UTIL", "Memory utilization (in %)."},
        {"DCGM_FI_DEV_FB_USED", "Framebuffer memory used (in MiB)."},
        {"DCGM_FI_DEV_FB_FREE", "Framebuffer memory free (in MiB)."},
        {"DCGM_FI_DEV_FB_TOTAL", "Framebuffer memory total (in MiB)."},
};

void kdev_plugin_usage_metrics_free(struct kdev_plugin_usage_metrics *u)
{
        if (!u)
                return;
        free(u->hostname);
        free(u);
}

struct kdev_plugin_usage_metrics *kdev_plugin_usage_metrics_new(struct kdev_metrics *m,
                                                                const char *hostname, bool dra,
                                                                struct kdev_err *err)
{
        struct kdev_plugin_usage_metrics *u = calloc(1, sizeof(*u));
        if (!u || !(u->hostname = strdup(hostname ? hostname : ""))) {
                free(u);
                kdev_err_set(err, ENOMEM, "out of memory");
                return NULL;
        }
        u->dra = dra;
        for (int i = 0; i < N_DCGM; i++)
                if (!(u->dcgm[i] = add(u, m, dcgm_names[i][0], dcgm_names[i][1], dcgm_labels,
                                       N_DCGM_LABELS, NULL, err)))
                        goto fail;
        if (!(u->used = CONTAINER_FAMILY(
                      "kdev_container_gpu_memory_used_bytes",
                      "Device memory a container uses on a GPU or MIG device: its share region's "
                      "sum (source=\"region\", isolated replicas) or its processes' (source="
                      "\"processes\").",
                      "source")) ||
            !(u->limit = CONTAINER_FAMILY(
                      "kdev_container_gpu_memory_limit_bytes",
                      "Device memory limit of a container's isolated replicas on a device.", NULL)) ||
            !(u->compute = CONTAINER_FAMILY(
                      "kdev_container_gpu_compute_share_percent",
                      "Compute share of a container's isolated replicas on a device.", NULL)) ||
            !(u->replicas = CONTAINER_FAMILY(
                      "kdev_container_gpu_replicas",
                      dra ? "Claim devices a container holds on one GPU or MIG device."
                          : "Device IDs of a resource a container holds on one GPU or MIG device.",
                      "resource")) ||
            !(u->sm = CONTAINER_FAMILY(
                      "kdev_container_gpu_sm_utilization_percent",
                      "Sum of the last per-process SM utilization samples of a container's "
                      "processes on a GPU.",
                      NULL)) ||
            !(u->lost_bytes = kdev_metrics_add(
                      m, KDEV_METRIC_GAUGE, "kdev_gpu_unattributed_memory_bytes",
                      "Device memory of processes no container could be given, by reason.",
                      LABELS("UUID", "gpu", "reason"), NULL, 0, err)) ||
            !(u->lost_procs = kdev_metrics_add(
                      m, KDEV_METRIC_GAUGE, "kdev_gpu_unattributed_processes",
                      "Processes on a device no container could be given, by reason.",
                      LABELS("UUID", "gpu", "reason"), NULL, 0, err)) ||
            !(u->failures = kdev_metrics_add(
                      m, KDEV_METRIC_COUNTER, "kdev_usage_attribution_failures_total",
                      "Processes not attributed to a container, per sample, by reason "
                      "(region: a share region could not be read).",
                      LABELS("reason"), NULL, 0, err)) ||
            !(u->samples = kdev_metrics_add(m, KDEV_METRIC_COUNTER, "kdev_usage_samples_total",
                                            "Usage samples taken, by result.", LABELS("result"),
                                            NULL, 0, err)) ||
            !(u->last = kdev_metrics_add(
                      m, KDEV_METRIC_GAUGE, "kdev_usage_last_sample_timestamp_seconds",
                      "When the last good usage sample was taken (Unix time).", NULL, 0, NULL, 0,
                      err)))
                goto fail;
        for (int r = 0; r < KDEV_USAGE_UNATTRIBUTED_COUNT; r++)
                kdev_metric_get(u->failures,
                                (const char *[]){kdev_usage_unattributed_name(
                                        (enum kdev_usage_unattributed)r)});
        kdev_metric_get(u->failures, (const char *[]){"region"});
        kdev_metric_get(u->samples, (const char *[]){"ok"});
        kdev_metric_get(u->samples, (const char *[]){"error"});
        return u;
fail:
        kdev_plugin_usage_metrics_free(u);
        return NULL;
}

/* Label values of one device, dcgm-exporter's way. */
struct dev_labels {
        char gpu[16], device[24], gi[16];
        const char *uuid;
};

static void dev_labels(const struct kdev_usage_device *d, struct dev_labels *l)
{
        snprintf(l->gpu, sizeof(l->gpu), "%u", d->index);
        snprintf(l->device, sizeof(l->device), "nvidia%u", d->minor);
        if (d->gi >= 0)
                snprintf(l->gi, sizeof(l->gi), "%d", d->gi);
        else
                l->gi[0] = '\0';
        l->uuid = d->parent_uuid[0] ? d->parent_uuid : d->uuid;
}

/* The DRA label values of map entry |c| (NULL: none) into |v|, for
 * kdev-dra-plugin's families. */
static void dra_values(const struct kdev_plugin_usage_metrics *u,
                       const struct kdev_usage_container *c, const char **v)
{
        if (!u->dra)
                return;
        const char *f[N_DRA_LABELS] = {c ? c->claim_name : NULL, c ? c->claim_namespace : NULL,
                                       c ? c->device : NULL, c ? c->driver : NULL,
                                       c ? c->pool : NULL};
        for (size_t i = 0; i < N_DRA_LABELS; i++)
                v[i] = f[i] ? f[i] : "";
}

static bool has_migs(const struct kdev_usage_snapshot *s, const struct kdev_usage_device *g)
{
        for (size_t i = 0; i < s->n_devices; i++)
                if (strcmp(s->devices[i].parent_uuid, g->uuid) == 0)
                        return true;
        return false;
}

static void set_devices(struct kdev_plugin_usage_metrics *u,
                        const struct kdev_usage_snapshot *snap,
                        const struct kdev_usage_pods *pods, const struct kdev_usage_report *rep)
{
        for (size_t i = 0; i < snap->n_devices; i++) {
                const struct kdev_usage_device *d = &snap->devices[i];
                struct dev_labels l;
                dev_labels(d, &l);
                const struct kdev_usage_container *only = NULL;
                size_t holders = 0;
                for (size_t r = 0; rep && r < rep->n_rows; r++)
                        if (rep->rows[r].device == i) {
                                holders++;
                                only = &pods->containers[rep->rows[r].container];
                        }
                if (holders != 1)
                        only = NULL;
                const char *v[MAX_LABELS] = {l.gpu,
                                             l.uuid,
                                             d->pci_bus_id,
                                             l.device,
                                             d->model,
                                             u->hostname,
                                             d->profile,
                                             l.gi,
                                             only ? only->namespace_name : "",
                                             only ? only->pod : "",
                                             only ? only->container : ""};
                dra_values(u, only, &v[N_DCGM_LABELS]);
                if (d->util >= 0)
                        kdev_metric_set(kdev_metric_get(u->dcgm[F_UTIL], v), d->util);
                if (d->mem_util >= 0)
                        kdev_metric_set(kdev_metric_get(u->dcgm[F_MEM_UTIL], v), d->mem_util);
                if (!d->have_memory || has_migs(snap, d))
                        continue;
                /* whole MiB, as DCGM reports them */
                kdev_metric_set(kdev_metric_get(u->dcgm[F_FB_USED], v),
                                (double)(d->mem_used / (1024 * 1024)));
                kdev_metric_set(kdev_metric_get(u->dcgm[F_FB_FREE], v),
                                (double)(d->mem_free / (1024 * 1024)));
                kdev_metric_set(kdev_metric_get(u->dcgm[F_FB_TOTAL], v),
                                (double)(d->mem_total / (1024 * 1024)));
        }
}

static void set_rows(struct kdev_plugin_usage_metrics *u, const struct kdev_usage_snapshot *snap,
                     const struct kdev_usage_pods *pods, const struct kdev_usage_report *rep)
{
        for (size_t r = 0; r < rep->n_rows; r++) {
                const struct kdev_usage_row *row = &rep->rows[r];
                const struct kdev_usage_device *d = &snap->devices[row->device];
                const struct kdev_usage_container *c = &pods->containers[row->container];
                struct dev_labels l;
                dev_labels(d, &l);
                const char *src = row->from_region ? "region" : "processes";
                /* the container labels, then (|v|) none, (|vx|) one more */
                const char *v[MAX_LABELS] = {c->namespace_name, c->pod, c->container, d->uuid,
                                             l.gpu};
                const char *vx[MAX_LABELS] = {c->namespace_name, c->pod, c->container, d->uuid,
                                              l.gpu, src};
                dra_values(u, c, &v[N_CONTAINER_LABELS]);
                dra_values(u, c, &vx[N_CONTAINER_LABELS + 1]);
                kdev_metric_set(kdev_metric_get(u->used, vx), (double)row->used);
                vx[N_CONTAINER_LABELS] = c->resource;
                kdev_metric_set(kdev_metric_get(u->replicas, u->dra ? v : vx), row->replicas);
                if (row->limit)
                        kdev_metric_set(kdev_metric_get(u->limit, v), (double)row->limit);
                if (row->compute)
                        kdev_metric_set(kdev_metric_get(u->compute, v), row->compute);
                if (row->sm_util >= 0)
                        kdev_metric_set(kdev_metric_get(u->sm, v), row->sm_util);
        }
        for (size_t k = 0; k < rep->n_lost; k++) {
                const struct kdev_usage_lost *lost = &rep->lost[k];
                const struct kdev_usage_device *d = &snap->devices[lost->device];
                struct dev_labels l;
                dev_labels(d, &l);
                const char *v[] = {d->uuid, l.gpu, kdev_usage_unattributed_name(lost->reason)};
                kdev_metric_set(kdev_metric_get(u->lost_bytes, v), (double)lost->used);
                kdev_metric_set(kdev_metric_get(u->lost_procs, v), lost->processes);
        }
        for (int w = 0; w < KDEV_USAGE_UNATTRIBUTED_COUNT; w++)
                kdev_metric_add(kdev_metric_get(u->failures,
                                                (const char *[]){kdev_usage_unattributed_name(
                                                        (enum kdev_usage_unattributed)w)}),
                                rep->failures[w]);
        kdev_metric_add(kdev_metric_get(u->failures, (const char *[]){"region"}),
                        rep->region_errors);
}

void kdev_plugin_usage_metrics_set(struct kdev_plugin_usage_metrics *u,
                                   const struct kdev_usage_snapshot *snap,
                                   const struct kdev_usage_pods *pods,
                                   const struct kdev_usage_report *rep)
{
        if (!snap) {
                kdev_metric_add(kdev_metric_get(u->samples, (const char *[]){"error"}), 1);
                return;
        }
        static const struct kdev_usage_pods none = {0};
        if (!pods)
                pods = &none;
        kdev_metric_add(kdev_metric_get(u->samples, (const char *[]){"ok"}), 1);
        kdev_metric_set(kdev_metric_get(u->last, NULL), snap->taken);
        for (int i = 0; i < N_DCGM; i++)
                kdev_metrics_family_clear(u->dcgm[i]);
        kdev_metrics_family_clear(u->used);
        kdev_metrics_family_clear(u->limit);
        kdev_metrics_family_clear(u->compute);
        kdev_metrics_family_clear(u->replicas);
        kdev_metrics_family_clear(u->sm);
        kdev_metrics_family_clear(u->lost_bytes);
        kdev_metrics_family_clear(u->lost_procs);
        set_devices(u, snap, pods, rep);
        if (rep)
                set_rows(u, snap, pods, rep);
}
