/* kdev DRA daemon (dra/daemon.h): the wiring of kdev-dra-plugin — timers,
 * thread-pool reconciles, health, signals — moved out of its main. */
#include "dra/daemon.h"
#include "dra/claim_status.h"

#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jansson.h>
#include <uv.h>

#include "common/dir.h"
#include "common/err.h"
#include "common/log.h"
#include "dra/health.h"
#include "dra/plugin.h"
#include "dra/slices.h"
#include "metrics/dra_metrics.h"
#include "kube/kube.h"
#include "model/model.h"
#include "nvidia/config.h"
#include "nvidia/dra_backend.h"
#include "nvidia/driver_files.h"
#include "nvidia/gpus.h"
#include "nvidia/share_host.h"
#include "nvidia/usage_loop.h"
#include "nvidia/xid.h"

#define BACKOFF_FIRST_MS KDEV_DRA_BACKOFF_FIRST_MS
#define BACKOFF_MAX_MS KDEV_DRA_BACKOFF_MAX_MS

struct kdev_dra_daemon {
        struct kdev_dra_device_options dev_opts; /* what the slices publish */
        uv_loop_t loop;
        uv_signal_t sigterm;
        uv_signal_t sigint;
        uv_timer_t sockets_timer;
        uv_timer_t slices_timer;
        struct kdev_dra_plugin *plugin;
        struct kdev_kube *kube_slices; /* the reconcile worker only */
        struct kdev_kube *kube_claims; /* the plugin's claim source (thread pool) */
        json_t *devices;
        /* NVML, the GPU records and the health monitor (nvidia/dra_backend.h) */
        struct kdev_nvidia_dra_backend *nvidia;
        const struct kdev_nvidia_gpus *gpus; /* the backend's records */
        /* GPU UUIDs withdrawn as unhealthy, from the monitor's physical
         * events (borrowed: the kdev_physical.id of the backend's physical
         * devices) */
        const char **unhealthy;
        size_t n_unhealthy, unhealthy_cap;
        /* the last physical event of each physical device (GPU or MIG
         * UUID) the monitor reported: its health and reason, for the health
         * stream (dra/health.h) */
        struct phys_health *phys;
        size_t n_phys, phys_cap;
        unsigned ticks;               /* of sockets_timer, for the health resends */
        struct kdev_dra_pool pool;
        uint64_t resync_ms;
        uint64_t backoff_ms;
        long long generation;          /* last reconciled, -1 before the first */
        bool slices_ok;                /* last reconcile succeeded */
        unsigned reconciles;           /* finished, succeeded or failed */
        struct reconcile_job *job;     /* reconcile in flight, or NULL */
        bool again;                    /* reconcile requested while one was in flight */
        bool stopping;
        /* per-claim lines: a client repeating the same call within 5 s gets
         * one line per window (common/log.h); flushed by sockets_timer */
        struct kdev_log_limiter *claim_log;
        struct kdev_dra_metrics *metrics; /* NULL: metrics off */
        struct kdev_nvidia_usage_loop *usage; /* NULL: usage metering off */
        /* status.devices of the claims prepared (dra/claim_status.h); NULL
         * with a claim source other than the API server's */
        struct kdev_dra_status_writer *status;
        /* dynamic MIG (--dynamic-mig): the counter sets published with the
         * devices (dra/slices.h), the MIG operations given to the plugin
         * and the API server's Kubernetes minor version (0 until read),
         * which decides where the counter sets go */
        bool dynamic_mig;
        json_t *counter_sets;
        struct kdev_dra_mig_ops mig_ops;
        unsigned kube_minor;
};

static void xid_warn(void *arg, const char *msg)
{
        (void)arg;
        kdev_log_warn(msg);
}

/* "a,b,c" of the strings at |key| of each record of |devices| (a string
 * key) or of each string of the array at |key| (an array key). Caller frees;
 * NULL when out of memory. */
static char *join_records(const json_t *devices, const char *key)
{
        char *out = NULL;
        size_t len = 0, i, k;
        const json_t *d, *v;
        FILE *f = open_memstream(&out, &len);
        bool first = true;

        if (!f)
                return NULL;
        json_array_foreach(devices, i, d) {
                const json_t *x = json_object_get(d, key);

                if (json_is_string(x)) {
                        fprintf(f, "%s%s", first ? "" : ",", json_string_value(x));
                        first = false;
                }
                json_array_foreach(x, k, v) {
                        fprintf(f, "%s%s", first ? "" : ",", json_string_value(v));
                        first = false;
                }
        }
        if (fclose(f) != 0) {
                free(out);
                return NULL;
        }
        return out;
}

/* A state file someone else changed was moved aside (plugin.h
 * on_file_aside): one warning naming both paths, the same words as
 * kdev-plugin's for its CDI spec and labels file. */
static void on_file_aside(void *arg, const char *path, const char *aside, bool rebuilt)
{
        (void)arg;
        kdev_log_warn(rebuilt ? "state file changed by someone else: moved aside and rebuilt "
                                "from memory"
                              : "state file changed by someone else: moved aside, not removed",
                      "path", path, "aside", aside);
}

/* One log line per claim prepared or unprepared (plugin.h on_claim):
 *   info "claim prepared" / "claim already prepared" (answered from the
 *        checkpoint) / "claim unprepared" / "claim unprepared (was not
 *        prepared)" with claim=<ns>/<name> uid= devices=<names,...>
 *        cdi_devices=<CDI device IDs,...> (the last two not for an unknown
 *        claim unprepared);
 *   warn "claim prepare failed" / "claim unprepare failed" with claim= uid=
 *        error=.
 * Identical lines within 5 s are counted and summed up (common/log.h). */
static void on_claim(void *arg, const struct kdev_dra_claim_event *ev)
{
        struct kdev_dra_daemon *d = arg;
        char claim[512];

        kdev_dra_metrics_claim(d->metrics, ev->prepare, !ev->error, ev->seconds);
        snprintf(claim, sizeof(claim), "%s/%s", ev->ns, ev->name);
        if (ev->error) {
                kdev_log_limited(d->claim_log, 1, KDEV_LOG_WARN,
                                 ev->prepare ? "claim prepare failed" : "claim unprepare failed",
                                 "claim", claim, "uid", ev->uid, "error", ev->error, NULL);
                return;
        }
        if (!ev->prepare && !ev->recorded) {
                kdev_log_limited(d->claim_log, 1, KDEV_LOG_INFO,
                                 "claim unprepared (was not prepared)", "claim", claim, "uid",
                                 ev->uid, NULL);
                return;
        }
        char *devs = join_records(ev->devices, "device");
        char *cdis = join_records(ev->devices, "cdiDeviceIDs");
        const char *msg = !ev->prepare   ? "claim unprepared"
                          : ev->recorded ? "claim already prepared"
                                         : "claim prepared";

        kdev_log_limited(d->claim_log, 1, KDEV_LOG_INFO, msg, "claim", claim, "uid", ev->uid,
                         "devices", devs ? devs : "?", "cdi_devices", cdis ? cdis : "?", NULL);
        free(devs);
        free(cdis);
        /* the claim's status.devices: written after a prepare, removed after
         * an unprepare (a repeat answered from the checkpoint wrote it before) */
        if (d->status && ev->prepare != ev->recorded)
                kdev_dra_status_writer_claim(
                        d->status, ev->ns, ev->name,
                        ev->prepare ? kdev_dra_claim_status_records(ev->devices, d->gpus) : NULL);
}

/* A claim's status.devices could not be written (dra/claim_status.h): a
 * warning, limited as the claim lines; preparation is not affected. */
static void on_status_error(void *arg, const char *ns, const char *name, const char *msg)
{
        struct kdev_dra_daemon *d = arg;
        char claim[512];
        snprintf(claim, sizeof(claim), "%s/%s", ns, name);
        kdev_log_limited(d->claim_log, 1, KDEV_LOG_WARN, "cannot write the claim's device status",
                         "claim", claim, "error", msg, NULL);
}

/* A start that failed before serving: the metrics, signals and timers
 * closed, the loop run until they are. */
static void abandon_start(struct kdev_dra_daemon *d)
{
        kdev_dra_status_writer_stop(d->status);
        d->status = NULL;
        kdev_nvidia_usage_loop_stop(d->usage);
        d->usage = NULL;
        kdev_dra_metrics_stop(d->metrics, NULL, NULL);
        d->metrics = NULL;
        uv_close((uv_handle_t *)&d->sigterm, NULL);
        uv_close((uv_handle_t *)&d->sigint, NULL);
        uv_close((uv_handle_t *)&d->sockets_timer, NULL);
        uv_close((uv_handle_t *)&d->slices_timer, NULL);
        uv_run(&d->loop, UV_RUN_DEFAULT);
}

/* kdev_nvidia_usage_lookup_fn: the UUID of claim device |name| of map
 * entry |c|: a device of this node's pool (the pool is the node name), a
 * whole GPU (gpu-<minor>) or a MIG device by its DRA name. */
static bool usage_lookup(void *arg, const struct kdev_usage_container *c, const char *name,
                         char *uuid)
{
        const struct kdev_dra_daemon *d = arg;
        if (!c->pool || strcmp(c->pool, d->pool.node) != 0)
                return false;
        for (size_t i = 0; i < d->gpus->n_gpus; i++) {
                const struct kdev_nvidia_gpu *g = &d->gpus->gpus[i];
                if (strcmp(g->dra_name, name) == 0) {
                        snprintf(uuid, KDEV_USAGE_UUID_MAX, "%s", g->uuid);
                        return true;
                }
                for (size_t k = 0; k < g->n_migs; k++)
                        if (g->migs[k].dra_name[0] && g->migs[k].uuid[0] &&
                            strcmp(g->migs[k].dra_name, name) == 0) {
                                snprintf(uuid, KDEV_USAGE_UUID_MAX, "%s", g->migs[k].uuid);
                                return true;
                        }
        }
        return false;
}

static void usage_publish(void *arg, const struct kdev_usage_snapshot *snap,
                          const struct kdev_usage_pods *pods, const struct kdev_usage_report *rep)
{
        struct kdev_dra_daemon *d = arg;
        kdev_dra_metrics_set_usage(d->metrics, snap, pods, rep);
}

/* Usage metering with metrics on and --usage-interval > 0: the claims'
 * devices (PodResources' ClaimResource) attributed as kdev-plugin's; the
 * Hostname label is the node name. */
static int start_usage(struct kdev_dra_daemon *d, const struct kdev_dra_daemon_options *o,
                       const struct kdev_nvidia_config *nv, struct kdev_err *err)
{
        if (o->usage_interval_s == 0)
                return 0;
        if (!d->metrics) {
                kdev_log_warn("usage metering needs --metrics-address: not sampled");
                return 0;
        }
        struct kdev_nvidia_usage_loop_options uo = {
                .interval_s = o->usage_interval_s, .podres_socket = o->podres_socket,
                .pod_log_dir = o->pod_log_dir, .holders = KDEV_NVIDIA_USAGE_CLAIMS,
                .driver = o->driver, .library_path = o->nvml_library,
                .lookup = usage_lookup, .publish = usage_publish, .arg = d};
        if (kdev_dra_metrics_enable_usage(d->metrics, o->node, err) == 0)
                d->usage = kdev_nvidia_usage_loop_start(&d->loop, nv, &uo, err);
        if (!d->usage)
                return kdev_err_wrap(err, "usage metering");
        kdev_log_info("sampling GPU usage", KDEV_LOG_UINT("interval", o->usage_interval_s),
                      "hostname", o->node);
        return 0;
}

/* The MIG operations of the plugin (dra/plugin.h kdev_dra_mig_ops) on the
 * NVIDIA backend. */
static int mig_create(void *arg, const char *gpu, unsigned profile, unsigned start,
                      struct kdev_nvidia_mig_made *out, struct kdev_err *err)
{
        return kdev_nvidia_dra_backend_mig_create(arg, gpu, profile, start, out, err);
}

static int mig_destroy(void *arg, const char *gpu, unsigned gi_id, unsigned ci_id, bool *gone,
                       struct kdev_err *err)
{
        return kdev_nvidia_dra_backend_mig_destroy(arg, gpu, gi_id, ci_id, gone, err);
}

static int mig_list(void *arg, const char *gpu, struct kdev_nvidia_mig_made *out, size_t cap,
                    size_t *n, struct kdev_err *err)
{
        return kdev_nvidia_dra_backend_mig_list(arg, gpu, out, cap, n, err);
}

static void on_mig_reconciled(void *arg, const char *action, const char *uid,
                              const char *device, const char *error)
{
        (void)arg;
        if (error)
                kdev_log_error("dynamic MIG: a claim's MIG instances could not be reconciled",
                               "claim_uid", uid, "error", error);
        else
                kdev_log_info("dynamic MIG: reconciled after a restart", "action", action,
                              "claim_uid", uid, "device", device ? device : "");
}

static size_t prepared_claims(void *arg)
{
        struct kdev_dra_daemon *d = arg;
        return d->plugin ? kdev_dra_plugin_prepared(d->plugin) : 0;
}

static void on_stale_temp(void *arg, const char *path, int error)
{
        (void)arg;
        if (error)
                kdev_log_warn("cannot remove a stale temporary file", "path", path, "error",
                              strerror(error));
        else
                kdev_log_info("removed a stale temporary file (an earlier run was killed while "
                              "writing it)",
                              "path", path);
}

static void on_status(void *arg, bool registered, const char *error)
{
        (void)arg;
        if (registered)
                kdev_log_info("registered with kubelet");
        else
                kdev_log_error("kubelet refused the registration", "error", error);
}

/* One slice reconcile on libuv's thread pool. The worker uses only
 * d->kube_slices (no other thread touches that client), the pool description
 * (immutable while running) and |devices|, its own deep copy of the desired
 * devices; everything else happens on the loop thread in reconcile_done. */
struct reconcile_job {
        uv_work_t work;
        struct kdev_dra_daemon *d;
        json_t *devices;
        /* the pool as of the job's start: its counter sets are the job's
         * copy (the loop may replace the daemon's meanwhile) */
        struct kdev_dra_pool pool;
        json_t *counter_sets;
        bool dynamic_mig;
        unsigned kube_minor;           /* 0: read /version first */
        struct kdev_dra_reconcile_result res;
        struct kdev_err err;
        int rc;
};

static void start_reconcile(uv_timer_t *t);

/* The Kubernetes minor version of the API server (GET /version, "minor":
 * "35" or "35+"), or 0 with |err|. Worker thread. */
static unsigned kube_minor(struct kdev_kube *k, struct kdev_err *err)
{
        json_t *v = NULL;
        unsigned minor = 0;

        if (kdev_kube_request(k, "GET", "/version", NULL, &v, err) < 0) {
                kdev_err_wrap(err, "the Kubernetes version (where the counter sets of "
                                   "partitionable devices go)");
                return 0;
        }
        const char *major = json_string_value(json_object_get(v, "major"));
        const char *m = json_string_value(json_object_get(v, "minor"));
        char *end = NULL;
        unsigned long n = m ? strtoul(m, &end, 10) : 0;

        if (!major || strcmp(major, "1") || !m || end == m || n == 0 || n > 1000 ||
            (*end && strcmp(end, "+")))
                kdev_err_set(err, EPROTO, "GET /version: no Kubernetes 1.<minor> version in "
                                          "the answer (major %s, minor %s)",
                             major ? major : "missing", m ? m : "missing");
        else
                minor = (unsigned)n;
        json_decref(v);
        return minor;
}

static void reconcile_work(uv_work_t *w)
{
        struct reconcile_job *job = w->data;
        if (job->dynamic_mig && job->kube_minor == 0) {
                job->kube_minor = kube_minor(job->d->kube_slices, &job->err);
                if (job->kube_minor == 0) {
                        job->rc = -(job->err.code ? job->err.code : EPROTO);
                        return;
                }
        }
        job->pool.counters_in_own_slice = kdev_dra_counters_in_own_slice(job->kube_minor);
        job->rc = kdev_dra_slices_reconcile(job->d->kube_slices, &job->pool, job->devices,
                                            &job->res, &job->err);
}

static void reconcile_done(uv_work_t *w, int status)
{
        struct reconcile_job *job = w->data;
        struct kdev_dra_daemon *d = job->d;
        uint64_t next;

        d->job = NULL;
        if (status == UV_ECANCELED || d->stopping)
                goto out;
        if (job->kube_minor && !d->kube_minor) {
                char v[16];
                snprintf(v, sizeof(v), "1.%u", job->kube_minor);
                d->kube_minor = job->kube_minor;
                kdev_log_info("partitionable devices: counter sets placed for the API server",
                              "kubernetes", v, "counter_sets",
                              kdev_dra_counters_in_own_slice(job->kube_minor)
                                      ? "own slices (1.35+)"
                                      : "with their devices (1.34)");
        }
        d->reconciles++;
        kdev_dra_metrics_publish(d->metrics, job->rc >= 0, job->res.generation);
        if (job->rc < 0) {
                char delay[32];
                snprintf(delay, sizeof(delay), "%llus",
                         (unsigned long long)(d->backoff_ms / 1000));
                kdev_log_error("cannot publish the ResourceSlices", "error", job->err.msg,
                               "retry_in", delay);
                next = d->backoff_ms;
                d->backoff_ms = d->backoff_ms * 2 > BACKOFF_MAX_MS ? BACKOFF_MAX_MS
                                                                   : d->backoff_ms * 2;
                d->slices_ok = false;
        } else {
                const struct kdev_dra_reconcile_result *res = &job->res;
                if (res->changed || !d->slices_ok || res->generation != d->generation) {
                        char c[64];
                        snprintf(c, sizeof(c), "%u/%u/%u", res->created, res->updated,
                                 res->deleted);
                        kdev_log_info("ResourceSlices published", "pool", d->pool.node,
                                      KDEV_LOG_INT("generation", res->generation),
                                      KDEV_LOG_UINT("slices", res->slices),
                                      "created/updated/deleted", c);
                }
                d->generation = res->generation;
                d->slices_ok = true;
                d->backoff_ms = BACKOFF_FIRST_MS;
                next = d->resync_ms;
        }
        /* devices changed while this one ran: one follow-up, now */
        if (d->again) {
                d->again = false;
                next = 0;
        }
        uv_timer_start(&d->slices_timer, start_reconcile, next, 0);
out:
        json_decref(job->devices);
        json_decref(job->counter_sets);
        free(job);
}

/* Timer: reconcile the slices off the loop, one at a time; a request while
 * one is in flight is coalesced into a single follow-up. */
static void start_reconcile(uv_timer_t *t)
{
        struct kdev_dra_daemon *d = t->data;
        struct reconcile_job *job;
        int r = UV_ENOMEM;

        if (d->stopping)
                return;
        if (d->job) {
                d->again = true;
                return;
        }
        job = calloc(1, sizeof(*job));
        if (job) {
                job->d = d;
                job->work.data = job;
                job->devices = json_deep_copy(d->devices);
                job->pool = d->pool;
                job->dynamic_mig = d->dynamic_mig;
                job->kube_minor = d->kube_minor;
                job->counter_sets = d->counter_sets ? json_deep_copy(d->counter_sets) : NULL;
                job->pool.shared_counters = job->counter_sets;
                if (job->devices && (job->counter_sets || !d->counter_sets))
                        r = uv_queue_work(&d->loop, &job->work, reconcile_work, reconcile_done);
        }
        if (r < 0) {
                if (job) {
                        json_decref(job->devices);
                        json_decref(job->counter_sets);
                }
                free(job);
                kdev_log_error("cannot start a ResourceSlice reconcile", "error", uv_strerror(r));
                uv_timer_start(&d->slices_timer, start_reconcile, d->backoff_ms, 0);
                return;
        }
        d->job = job;
        d->again = false;
}

struct phys_health {
        char *id;      /* GPU or MIG UUID */
        bool healthy;
        char *reason;  /* the event's */
};

/* Records |ev| as the last event of its physical device. Returns 0 or
 * -ENOMEM (nothing changed). */
static int note_physical(struct kdev_dra_daemon *d, const struct kdev_physical_event *ev)
{
        struct phys_health *h = NULL;
        for (size_t i = 0; i < d->n_phys && !h; i++)
                if (strcmp(d->phys[i].id, ev->id) == 0)
                        h = &d->phys[i];
        char *reason = strdup(ev->reason ? ev->reason : "");
        if (!reason)
                return -ENOMEM;
        if (!h) {
                if (d->n_phys == d->phys_cap) {
                        size_t cap = d->phys_cap ? d->phys_cap * 2 : 8;
                        struct phys_health *v = realloc(d->phys, cap * sizeof(*v));
                        if (!v) {
                                free(reason);
                                return -ENOMEM;
                        }
                        d->phys = v;
                        d->phys_cap = cap;
                }
                h = &d->phys[d->n_phys];
                h->id = strdup(ev->id);
                if (!h->id) {
                        free(reason);
                        return -ENOMEM;
                }
                h->reason = NULL;
                d->n_phys++;
        }
        free(h->reason);
        h->reason = reason;
        h->healthy = ev->healthy;
        return 0;
}

static const struct phys_health *phys_find(const struct kdev_dra_daemon *d, const char *id)
{
        for (size_t i = 0; id && id[0] && i < d->n_phys; i++)
                if (strcmp(d->phys[i].id, id) == 0)
                        return &d->phys[i];
        return NULL;
}

/* One device's health from its own physical device's last event and, for a
 * MIG device, its GPU's (an unhealthy GPU makes its MIG devices unhealthy):
 * Unhealthy with the fault's reason; Healthy with the recovery's reason, or
 * with no message when the monitor never reported it. */
static void device_health(const struct kdev_dra_daemon *d, const char *uuid,
                          const char *parent, struct kdev_dra_device_health *out)
{
        const struct phys_health *own = phys_find(d, uuid), *up = phys_find(d, parent);
        const struct phys_health *bad = own && !own->healthy ? own
                                        : up && !up->healthy ? up
                                                             : NULL;
        out->health = bad ? KDEV_DRA_HEALTH_UNHEALTHY : KDEV_DRA_HEALTH_HEALTHY;
        out->message = bad ? bad->reason : own ? own->reason : up ? up->reason : NULL;
}

/* The health stream's list (dra/health.h) from the GPU records and the last
 * physical events: every device the node has a name for, in record order
 * (a GPU in MIG mode as its MIG devices), withdrawn ones included (a claim
 * may hold them); a GPU discovery found faulted is Unhealthy "the GPU
 * faulted when it was read (withdrawn from the ResourceSlice)". */
static void publish_health(struct kdev_dra_daemon *d)
{
        const struct kdev_nvidia_gpus *gpus = d->gpus;
        size_t n = 0, cap = 0;
        struct kdev_err err = {0};
        for (size_t i = 0; i < gpus->n_gpus; i++)
                cap += (gpus->gpus[i].mig_enabled ? gpus->gpus[i].n_migs : 0) +
                       gpus->gpus[i].n_placements + 1;
        struct kdev_dra_device_health *v = calloc(cap ? cap : 1, sizeof(*v));
        if (!v) {
                kdev_log_error("device health not updated: out of memory");
                return;
        }
        for (size_t i = 0; i < gpus->n_gpus; i++) {
                const struct kdev_nvidia_gpu *g = &gpus->gpus[i];
                /* a partitionable GPU (dynamic MIG) is published whole
                 * too, and its MIG devices are the claims' (named as the
                 * placements they were made at) */
                if (!g->mig_enabled || g->n_placements > 0) {
                        if (!g->dra_name[0])
                                continue;
                        v[n].device = g->dra_name;
                        device_health(d, g->uuid, NULL, &v[n]);
                        if (g->faulted) {
                                v[n].health = KDEV_DRA_HEALTH_UNHEALTHY;
                                v[n].message = "the GPU faulted when it was read (withdrawn "
                                               "from the ResourceSlice)";
                        }
                        n++;
                        if (!g->mig_enabled)
                                continue;
                }
                /* a placement: its MIG device's health once a claim made it
                 * (the MIG device has the placement's name), else its GPU's */
                for (size_t j = 0; j < g->n_placements; j++) {
                        const char *uuid = NULL;
                        if (!g->placements[j].dra_name[0])
                                continue;
                        for (size_t k = 0; k < g->n_migs; k++)
                                if (!strcmp(g->migs[k].dra_name, g->placements[j].dra_name))
                                        uuid = g->migs[k].uuid;
                        v[n].device = g->placements[j].dra_name;
                        device_health(d, uuid, g->uuid, &v[n]);
                        n++;
                }
                if (g->n_placements > 0)
                        continue;
                for (size_t j = 0; j < g->n_migs; j++) {
                        if (g->migs[j].dra_name_error < 0 || !g->migs[j].dra_name[0])
                                continue;
                        v[n].device = g->migs[j].dra_name;
                        device_health(d, g->migs[j].uuid, g->uuid, &v[n]);
                        n++;
                }
        }
        if (kdev_dra_plugin_set_health(d->plugin, v, n, &err) < 0)
                kdev_log_error("device health not updated", "error", err.msg);
        free(v);
}

/* Applies one physical event to the list of unhealthy GPUs. Returns 0 or
 * -ENOMEM (the list is unchanged). */
static int track_physical(struct kdev_dra_daemon *d, const struct kdev_physical_event *ev)
{
        size_t i = 0;
        while (i < d->n_unhealthy && strcmp(d->unhealthy[i], ev->id) != 0)
                i++;
        if (ev->healthy) {
                if (i < d->n_unhealthy)
                        d->unhealthy[i] = d->unhealthy[--d->n_unhealthy];
                return 0;
        }
        /* borrowed: the backend's physical records outlive the monitor */
        const struct kdev_physical *p = kdev_nvidia_dra_backend_find(d->nvidia, ev->id);
        if (i < d->n_unhealthy || !p)
                return 0;
        if (d->n_unhealthy == d->unhealthy_cap) {
                size_t cap = d->unhealthy_cap ? d->unhealthy_cap * 2 : 8;
                const char **v = realloc(d->unhealthy, cap * sizeof(*v));
                if (!v)
                        return -ENOMEM;
                d->unhealthy = v;
                d->unhealthy_cap = cap;
        }
        d->unhealthy[d->n_unhealthy++] = p->id;
        return 0;
}

/* Physical events of the health monitor (GPU UUIDs: the GPUs are whole
 * devices here): withdraw or return those GPUs, rebuild the devices and,
 * when they differ, reconcile the slices now. */
/* The devices to publish into *devs and, with dynamic MIG, the GPUs'
 * counter sets into *sets (else NULL): dra/slices.h
 * kdev_dra_build_partitionable or kdev_dra_build_devices_opts. Returns the
 * number of devices or a negative errno with |err|. */
static int build_devices(const struct kdev_dra_daemon *d, const struct kdev_dra_health *h,
                         json_t **devs, json_t **sets, struct kdev_err *err)
{
        *sets = NULL;
        if (!d->dynamic_mig)
                return kdev_dra_build_devices_opts(d->gpus, h, &d->dev_opts, devs, err);
        return kdev_dra_build_partitionable(d->gpus, h, &d->dev_opts, devs, sets, err);
}

static void on_physical(void *arg, const struct kdev_physical_event *ev, size_t n)
{
        struct kdev_dra_daemon *d = arg;
        json_t *devs = NULL;
        struct kdev_err err = {0};

        if (d->stopping)
                return;
        for (size_t i = 0; i < n; i++) {
                if (track_physical(d, &ev[i]) < 0 || note_physical(d, &ev[i]) < 0) {
                        kdev_log_error("health update dropped: out of memory");
                        return;
                }
        }
        const char *const *bad = d->unhealthy;
        size_t nbad = d->n_unhealthy;
        /* NodePrepareResources refuses what is withdrawn */
        if (kdev_dra_plugin_set_unhealthy(d->plugin, bad, nbad, &err) < 0) {
                kdev_log_error("health update dropped", "error", err.msg);
                return;
        }
        struct kdev_dra_health h = {.unhealthy = bad, .n_unhealthy = nbad};
        publish_health(d); /* the stream kubelet watches: every change at once */
        json_t *sets = NULL;
        int rc = build_devices(d, &h, &devs, &sets, &err);
        if (rc < 0) {
                kdev_log_error("health update dropped", "error", err.msg);
                return;
        }
        if (json_equal(devs, d->devices) &&
            (sets == d->counter_sets || (sets && d->counter_sets &&
                                         json_equal(sets, d->counter_sets)))) {
                json_decref(devs);
                json_decref(sets);
                return;
        }
        kdev_log_info("device health changed", KDEV_LOG_UINT("unhealthy_gpus", nbad),
                      KDEV_LOG_INT("devices", rc));
        json_decref(d->devices);
        d->devices = devs;
        json_decref(d->counter_sets);
        d->counter_sets = sets;
        d->backoff_ms = BACKOFF_FIRST_MS;
        uv_timer_start(&d->slices_timer, start_reconcile, 0, 0);
}

/* The MIG devices of the GPU records. */
static size_t mig_devices(const struct kdev_nvidia_gpus *gpus)
{
        size_t n = 0;
        for (size_t i = 0; i < gpus->n_gpus; i++)
                n += gpus->gpus[i].n_migs;
        return n;
}

/* The unhealthy list again from the backend's physical devices (after a
 * rediscovery replaced them), then the devices, as on_physical does. */

static void on_inventory(void *arg, const char *why)
{
        struct kdev_dra_daemon *d = arg;
        struct kdev_err err = {0};
        if (d->stopping)
                return;
        kdev_log_info("GPU inventory changed: reading the GPUs again", "why", why);
        if (kdev_nvidia_dra_backend_rediscover(d->nvidia, &err) < 0) {
                kdev_log_error("cannot read the GPUs again, the published devices stay",
                               "error", err.msg);
                return;
        }
        const struct kdev_resource_set *w = kdev_nvidia_dra_backend_watched(d->nvidia);
        d->n_unhealthy = 0;
        for (size_t i = 0; w && i < w->n_physical; i++) {
                struct kdev_physical_event ev = {.id = w->physical[i]->id, .healthy = false};
                if (!w->physical[i]->healthy && track_physical(d, &ev) < 0)
                        kdev_log_error("health update dropped: out of memory");
        }
        const struct kdev_nvidia_gpus *gpus = d->gpus;
        kdev_log_info("GPU inventory applied", KDEV_LOG_UINT("gpus", gpus->n_gpus),
                      KDEV_LOG_UINT("mig_devices", mig_devices(gpus)),
                      KDEV_LOG_UINT("unhealthy_gpus", d->n_unhealthy));
        on_physical(d, NULL, 0); /* the devices and, when they differ, the slices */
}

static void check_sockets(uv_timer_t *t)
{
        struct kdev_dra_daemon *d = t->data;
        struct kdev_err err = {0};
        kdev_log_limiter_flush(d->claim_log, false);
        if (++d->ticks % (KDEV_DRA_HEALTH_RESEND_MS / 1000) == 0)
                kdev_dra_plugin_health_resend(d->plugin); /* before kubelet's timeout */
        int r = kdev_dra_plugin_check_sockets(d->plugin, &err);
        if (r < 0)
                kdev_log_error("cannot re-create the plugin sockets", "error", err.msg);
        else if (r > 0)
                kdev_log_warn("plugin socket vanished: re-created");
}

static void on_plugin_stopped(void *arg)
{
        struct kdev_dra_daemon *d = arg;
        kdev_nvidia_usage_loop_stop(d->usage);
        d->usage = NULL;
        kdev_dra_metrics_stop(d->metrics, NULL, NULL);
        d->metrics = NULL;
        kdev_nvidia_dra_backend_health_stop(d->nvidia);
        uv_close((uv_handle_t *)&d->sigterm, NULL);
        uv_close((uv_handle_t *)&d->sigint, NULL);
}

void kdev_dra_daemon_stop(struct kdev_dra_daemon *d, const char *why)
{
        if (d->stopping)
                return;
        d->stopping = true;
        kdev_log_info("stopping", "signal", why);
        kdev_nvidia_dra_backend_watch_stop(d->nvidia);
        uv_close((uv_handle_t *)&d->sockets_timer, NULL);
        uv_close((uv_handle_t *)&d->slices_timer, NULL);
        /* a reconcile in flight: cancelled when still queued, otherwise its
         * requests abort (within about a second); the loop runs until its
         * done callback has freed it */
        if (d->job) {
                kdev_kube_abort(d->kube_slices);
                uv_cancel((uv_req_t *)&d->job->work);
        }
        /* claim reads of NodePrepareResources in flight: the plugin stops
         * once they are done, so make them fail now rather than after their
         * retries (a pod's grace period is 30 s by default) */
        if (d->kube_claims)
                kdev_kube_abort(d->kube_claims);
        kdev_dra_status_writer_stop(d->status);
        d->status = NULL;
        kdev_dra_plugin_stop(d->plugin, on_plugin_stopped, d);
}

static void on_signal(uv_signal_t *h, int signum)
{
        kdev_dra_daemon_stop(h->data, signum == SIGTERM ? "SIGTERM" : "SIGINT");
}

uv_loop_t *kdev_dra_daemon_loop(struct kdev_dra_daemon *d)
{
        return &d->loop;
}

void kdev_dra_daemon_state(const struct kdev_dra_daemon *d, struct kdev_dra_daemon_state *st)
{
        *st = (struct kdev_dra_daemon_state){
                .reconciles = d->reconciles,
                .slices_ok = d->slices_ok,
                .generation = d->generation,
                .backoff_ms = d->backoff_ms,
                .reconciling = d->job != NULL,
                .stopping = d->stopping,
        };
}

/* mkdir -p |path|: new components get exactly |mode|, whatever the umask. */
static int mkdirs(const char *path, mode_t mode, const char *what, struct kdev_err *err)
{
        int r = kdev_dir_create_all(path, mode, what, err);
        return r < 0 ? r : 0;
}

/* Looks up the driver files for the claim CDI specs under |root| and logs
 * what was found (nvidia/driver_files.h). Returns as
 * kdev_nvidia_driver_files_find. */
static int driver_files_find(const char *root, const char *version, const char *hook,
                             struct kdev_nvidia_driver_files *out, struct kdev_err *err)
{
        struct kdev_nvidia_driver_files_options o = {
                .driver_root = root, .driver_version = version, .hook_path = hook};
        char msg[PATH_MAX + 256];
        int rc = kdev_nvidia_driver_files_find(&o, out, err);
        if (rc < 0)
                return rc;
        if (rc == 0) {
                snprintf(msg, sizeof(msg),
                         "no driver libraries found under %s for driver %s; containers will "
                         "need the NVIDIA container runtime to inject them",
                         root, version);
                kdev_log_warn(msg);
        } else {
                kdev_log_info("claim CDI specs: driver files", KDEV_LOG_INT("libraries", rc), "hooks",
                              out->hook_path ? out->hook_path : "none");
                if (out->hook_path && !out->hook_visible) /* a host path: written as given */
                        kdev_log_warn("the CDI hook is not an executable file here; the claim "
                                      "specs use it as a host path",
                                      "path", out->hook_path);
        }
        return rc;
}

int kdev_dra_daemon_run(const struct kdev_dra_daemon_options *o, struct kdev_err *errp)
{
        const char *driver = o->driver, *node = o->node, *registry = o->registry;
        const char *plugin_dir = o->plugin_dir, *cdi_dir = o->cdi_dir;
        const char *share_root = NULL; /* set with shareable_gpus */
        const char *driver_root = o->driver_root, *proc_root = o->proc_root;
        const char *cdi_hook = o->cdi_hook, *api_version = o->api_version;
        const char *probe_s = o->probe_s, *quiet_s = o->quiet_s;
        struct kdev_dra_daemon d = {0};
        struct kdev_err err = {0};
        struct kdev_nvidia_driver_files drv = {0};
        struct kdev_kube_config kcfg = {0};
        struct kdev_nvidia_config nv = {0};
        struct kdev_xid_policy pol = {0};
        bool nv_ready = false;
        char default_plugin_dir[PATH_MAX], abs_dir[PATH_MAX], dra_sock[PATH_MAX + 16],
                reg_sock[PATH_MAX + 300];
        int status = -EIO;
        bool loop_ready = false, started = false;

        d.claim_log = kdev_log_limiter_new(KDEV_LOG_REPEAT_WINDOW_MS); /* NULL: unlimited */

        if (!plugin_dir) {
                snprintf(default_plugin_dir, sizeof(default_plugin_dir), "%s/%s",
                         KDEV_DRA_DEFAULT_PLUGINS, driver);
                plugin_dir = default_plugin_dir;
        }
        d.generation = -1;
        d.backoff_ms = BACKOFF_FIRST_MS;
        d.resync_ms = o->resync_ms;
        if (mkdirs(plugin_dir, KDEV_DIR_MODE_PLUGIN, "plugin directory", &err) < 0 ||
            mkdirs(registry, KDEV_DIR_MODE_PLUGIN, "plugin registration directory", &err) < 0 ||
            mkdirs(cdi_dir, KDEV_DIR_MODE_CDI, "CDI spec directory", &err) < 0)
                goto out;
        if (!realpath(plugin_dir, abs_dir)) {
                kdev_err_set(&err, errno, "%s: %s", plugin_dir, strerror(errno));
                goto out;
        }
        snprintf(dra_sock, sizeof(dra_sock), "%s/dra.sock", abs_dir);
        snprintf(reg_sock, sizeof(reg_sock), "%s/%s-reg.sock", registry, driver);

        /* GPUs, through the NVIDIA backend */
        struct kdev_nvidia_dra_backend_options nopts = {.driver_root = driver_root,
                                                        .nvml_library = o->nvml_library,
                                                        .sysfs_root = o->sysfs_root,
                                                        .dynamic_mig = o->dynamic_mig};
        if (kdev_nvidia_dra_backend_open(&nopts, &d.nvidia, &err) < 0)
                goto out;
        const struct kdev_nvidia_gpus *gpus = kdev_nvidia_dra_backend_gpus(d.nvidia);
        d.dev_opts.shareable_gpus = o->shareable_gpus;
        if (o->shareable_gpus) {
                /* the share library's host side, as kdev-plugin installs it */
                char lib[4096], exe[4096];
                const char *library = o->share_library;
                ssize_t n_exe = readlink("/proc/self/exe", exe, sizeof(exe) - 1);

                share_root = o->share_root && *o->share_root ? o->share_root
                                                              : KDEV_DRA_DEFAULT_SHARE_ROOT;
                if (!library || !*library) {
                        exe[n_exe > 0 ? n_exe : 0] = '\0';
                        if (kdev_nvidia_share_library_default(exe, lib, sizeof(lib)) < 0) {
                                kdev_err_set(&err, ENAMETOOLONG, "share library path too long");
                                goto out;
                        }
                        library = lib;
                }
                if (kdev_nvidia_share_install(share_root, library, NULL, NULL, &err) < 0) {
                        kdev_err_wrap(&err, "--shareable-gpus: share root %s", share_root);
                        goto out;
                }
                kdev_log_info("shareable GPUs on", "share_root", share_root, "share_library",
                              library);
        }
        d.gpus = gpus;
        d.dynamic_mig = o->dynamic_mig;
        int n = build_devices(&d, NULL, &d.devices, &d.counter_sets, &err);
        if (n < 0)
                goto out;
        if (o->dynamic_mig) {
                size_t parts = 0, pgpus = 0;
                for (size_t i = 0; i < gpus->n_gpus; i++) {
                        parts += gpus->gpus[i].n_placements;
                        pgpus += gpus->gpus[i].n_placements > 0;
                }
                kdev_log_info("dynamic MIG on", KDEV_LOG_UINT("partitionable_gpus", pgpus),
                              KDEV_LOG_UINT("mig_placements", parts));
                d.mig_ops = (struct kdev_dra_mig_ops){.create = mig_create,
                                                      .destroy = mig_destroy,
                                                      .list = mig_list,
                                                      .arg = d.nvidia};
        }
        kdev_log_info("GPUs discovered", KDEV_LOG_UINT("gpus", gpus->n_gpus),
                      KDEV_LOG_INT("devices", n), "driver_version",
                      gpus->driver_version);
        if (driver_files_find(driver_root, gpus->driver_version,
                              cdi_hook && *cdi_hook ? cdi_hook : KDEV_DRA_DEFAULT_CDI_HOOK, &drv, &err) < 0)
                goto out;

        /* Health: the GPUs as whole NVIDIA devices for the XID monitor
         * (physical ID = GPU UUID). */
        if (kdev_nvidia_config_init(&nv, &err) < 0)
                goto out;
        nv_ready = true;
        if ((probe_s && kdev_nvidia_config_apply_flag(&nv, "health-probe-interval", probe_s,
                                                      &err) < 0) ||
            (quiet_s && kdev_nvidia_config_apply_flag(&nv, "health-quiet-period", quiet_s,
                                                      &err) < 0))
                goto out;
        /* mixed: whole GPUs and each MIG device are the physical devices,
         * so an XID carrying GPU/compute instance IDs faults that MIG
         * device only */
        nv.mig_strategy = KDEV_NVIDIA_MIG_MIXED;
        if ((proc_root && kdev_nvidia_config_apply_flag(&nv, "proc-root", proc_root, &err) < 0) ||
            kdev_nvidia_config_apply_flag(&nv, "driver-root", driver_root, &err) < 0)
                goto out;
        if (kdev_nvidia_config_finish(&nv, false, &err) < 0)
                goto out;
        if (kdev_nvidia_dra_backend_health_init(d.nvidia, &nv, &err) < 0) {
                /* MIG devices as physical devices need their capability
                 * nodes (mig-minors under the proc root); without them the
                 * whole GPUs are watched, as before */
                kdev_log_warn("MIG devices not watched one by one: whole GPUs instead",
                              "error", err.msg);
                err = (struct kdev_err){0};
                nv.mig_strategy = KDEV_NVIDIA_MIG_NONE;
                if (kdev_nvidia_dra_backend_health_init(d.nvidia, &nv, &err) < 0)
                        goto out;
        }
        if (kdev_xid_policy_from_env(&pol, xid_warn, NULL, &err) < 0)
                goto out;

        /* API server: one client per thread (kdev_kube is not thread-safe). */
        if (kdev_kube_config_load(&kcfg, o->kubeconfig, &err) < 0)
                goto out;
        struct kdev_kube_opts slice_opts = {
                .version = api_version,
                .attempts = 3,
                .timeout_ms = 10000,
                .connect_timeout_ms = 5000,
        };
        struct kdev_kube_opts claim_opts = {.version = api_version};
        d.kube_slices = kdev_kube_new(&kcfg, &slice_opts, &err);
        if (!d.kube_slices)
                goto out;
        if (!o->get_claim) {
                d.kube_claims = kdev_kube_new(&kcfg, &claim_opts, &err);
                if (!d.kube_claims)
                        goto out;
        }
        d.pool.driver = driver;
        d.pool.node = node;

        struct kdev_dra_plugin_options popts = {
                .driver = driver,
                .pool = node,
                .data_dir = abs_dir,
                .cdi_dir = cdi_dir,
                .dev_root = driver_root,
                .proc_root = proc_root,
                .sysfs_root = o->sysfs_root,
                .share_root = share_root,
                .mig = o->dynamic_mig ? &d.mig_ops : NULL,
                .gpus = gpus,
                .driver_files = &drv,
                .get_claim = o->get_claim ? o->get_claim : kdev_dra_kube_claim_source,
                .get_claim_arg = o->get_claim ? o->get_claim_arg : d.kube_claims,
                .on_status = on_status,
                .on_status_arg = &d,
                .on_claim = on_claim,
                .on_claim_arg = &d,
                .on_file_aside = on_file_aside,
        };
        if (kdev_dra_plugin_new(&popts, &d.plugin, &err) < 0)
                goto out;
        const char *cperr = kdev_dra_plugin_checkpoint_error(d.plugin);
        if (cperr)
                kdev_log_error("claim checkpoint unusable, moved aside", "error", cperr);
        if (kdev_dra_plugin_remove_stale_temps(d.plugin, on_stale_temp, NULL, &err) < 0) {
                kdev_log_warn("cannot clean up stale temporary files", "error", err.msg);
                err = (struct kdev_err){0};
        }
        /* what a kill between making a MIG instance and recording it left */
        int acted = kdev_dra_plugin_reconcile_mig(d.plugin, on_mig_reconciled, NULL, &err);
        if (acted < 0)
                goto out;
        /* instances made or destroyed: the records and the health watch
         * follow the new MIG layout before serving */
        if (acted > 0) {
                if (kdev_nvidia_dra_backend_rediscover(d.nvidia, &err) < 0) {
                        kdev_log_warn("cannot read the GPUs again after the dynamic MIG "
                                      "reconcile; the inventory watch reads them later",
                                      "error", err.msg);
                        err = (struct kdev_err){0};
                } else {
                        kdev_log_info("GPUs read again after the dynamic MIG reconcile",
                                      KDEV_LOG_UINT("mig_devices", mig_devices(d.gpus)));
                }
        }

        int r = uv_loop_init(&d.loop);
        if (r < 0) {
                kdev_err_set(&err, -r, "cannot start the event loop: %s", uv_strerror(r));
                goto out;
        }
        loop_ready = true;
        uv_signal_init(&d.loop, &d.sigterm);
        uv_signal_init(&d.loop, &d.sigint);
        uv_timer_init(&d.loop, &d.sockets_timer);
        uv_timer_init(&d.loop, &d.slices_timer);
        d.sigterm.data = d.sigint.data = d.sockets_timer.data = d.slices_timer.data = &d;
        uv_signal_start(&d.sigterm, on_signal, SIGTERM);
        uv_signal_start(&d.sigint, on_signal, SIGINT);
        if (!o->get_claim) {
                struct kdev_kube *ks = kdev_kube_new(&kcfg, &slice_opts, &err);
                if (!ks ||
                    !(d.status = kdev_dra_status_writer_new(&d.loop, ks, driver, node,
                                                            on_status_error, &d))) {
                        if (ks && !err.msg[0])
                                kdev_err_set(&err, ENOMEM, "out of memory");
                        abandon_start(&d);
                        goto out;
                }
        }

        if (o->metrics_address && *o->metrics_address) {
                d.metrics = kdev_dra_metrics_new(prepared_claims, &d, &err);
                if (!d.metrics || kdev_dra_metrics_listen(d.metrics, &d.loop, o->metrics_address,
                                                          &err) < 0) {
                        /* a port in use is a start failure, as kdev-plugin's */
                        abandon_start(&d);
                        goto out;
                }
                kdev_log_info("serving metrics", "address", o->metrics_address,
                              KDEV_LOG_UINT("port", kdev_dra_metrics_port(d.metrics)),
                              "path", "/metrics");
        }
        if (start_usage(&d, o, &nv, &err) < 0) {
                abandon_start(&d);
                goto out;
        }
        if (kdev_dra_plugin_start(d.plugin, &d.loop, dra_sock, reg_sock, &err) < 0) {
                abandon_start(&d);
                goto out;
        }
        started = true;
        publish_health(&d); /* every device Healthy until the monitor says otherwise */
        if (kdev_nvidia_dra_backend_health_start(d.nvidia, &d.loop, &pol, on_physical, &d,
                                                 &err) < 0) {
                kdev_log_error("continuing with health checks disabled", "error", err.msg);
                err = (struct kdev_err){0};
        }
        if (kdev_nvidia_dra_backend_watch_start(d.nvidia, &d.loop,
                                                o->rediscover_ms ? o->rediscover_ms : 30000,
                                                on_inventory, &d, &err) < 0) {
                kdev_log_error("GPU inventory watch not started", "error", err.msg);
                err = (struct kdev_err){0};
        }
        kdev_log_info("serving", "driver", driver, "node", node, "registration", reg_sock,
                      "endpoint", dra_sock, "resource_api", api_version);
        uv_timer_start(&d.sockets_timer, check_sockets, 1000, 1000);
        uv_timer_start(&d.slices_timer, start_reconcile, 0, 0);
        if (o->on_started)
                o->on_started(o->on_started_arg, &d);
        uv_run(&d.loop, UV_RUN_DEFAULT);
        kdev_log_info("stopped");
        status = 0;

out:
        if (!started && err.msg[0])
                kdev_log_error("cannot start", "error", err.msg);
        if (status < 0) {
                status = err.code > 0 ? -err.code : -EIO;
                if (errp)
                        *errp = err;
        }
        if (loop_ready && uv_loop_close(&d.loop) != 0)
                kdev_log_warn("event loop closed with handles still open");
        kdev_dra_plugin_free(d.plugin);
        kdev_log_limiter_free(d.claim_log);
        kdev_nvidia_driver_files_clear(&drv);
        kdev_kube_free(d.kube_claims);
        kdev_kube_free(d.kube_slices);
        kdev_kube_config_free(&kcfg);
        json_decref(d.devices);
        json_decref(d.counter_sets);
        free(d.unhealthy);
        for (size_t i = 0; i < d.n_phys; i++) {
                free(d.phys[i].id);
                free(d.phys[i].reason);
        }
        free(d.phys);
        kdev_xid_policy_clear(&pol);
        if (nv_ready)
                kdev_nvidia_config_clear(&nv);
        kdev_nvidia_dra_backend_free(d.nvidia);
        return status;
}
