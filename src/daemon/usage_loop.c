/* kdev-plugin's usage metering loop. See usage_internal.h. */
#include "daemon/usage_internal.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "nvidia/resources.h"
#include "nvidia/usage.h"
#include "podres/client.h"
#include "usage/usage.h"

/* How long one PodResources List may take: kubelet answers from memory. */
#define PODRES_TIMEOUT_MS 5000

struct kdev_dp_usage {
        uv_loop_t *loop;
        struct kdev_plugin_metrics *pm;  /* NULL once stopped */
        struct kdev_resource_set *const *set;
        struct kdev_nvidia_usage *sampler;
        char *proc_root;
        char *podres_socket; /* NULL: none */
        char *pod_log_dir;
        char podres_error[KDEV_ERR_MSG_MAX]; /* logged once until it changes */
        char logs_error[KDEV_ERR_MSG_MAX];
        uv_timer_t timer;
        bool timer_closed;
        bool in_flight;
        char last_error[KDEV_ERR_MSG_MAX]; /* logged once until it changes or a sample works */
};

/* One device ID of the map and the device UUID behind it. */
struct resolved {
        const char *id;  /* the map's pointer */
        char uuid[KDEV_USAGE_UUID_MAX];
        bool found;
};

struct job {
        uv_work_t req;
        struct kdev_dp_usage *u;
        /* the container map: PodResources' answer and the log names, owned */
        struct kdev_podres_map map;
        struct kdev_usage_logs logs;
        struct kdev_usage_container *containers;
        const char **ids; /* the containers' device IDs, borrowed from |map| */
        struct kdev_usage_pods pods;
        int map_rc;
        struct kdev_err map_err, logs_err; /* logs_err.msg "": read */
        struct resolved *res;
        size_t n_res, next;
        struct kdev_usage_snapshot snap;
        struct kdev_usage_report rep;
        int rc;
        struct kdev_err err;
};

static void maybe_free(struct kdev_dp_usage *u)
{
        if (!u->timer_closed || u->in_flight)
                return;
        kdev_nvidia_usage_free(u->sampler);
        free(u->proc_root);
        free(u->podres_socket);
        free(u->pod_log_dir);
        free(u);
}

static bool same_container(const struct kdev_usage_container *c, const struct kdev_podres_device *d)
{
        return strcmp(c->namespace_name, d->namespace_) == 0 && strcmp(c->pod, d->pod) == 0 &&
               strcmp(c->container, d->container) == 0 && strcmp(c->resource, d->resource) == 0;
}

/* The map of |j|: one container entry per (pod, container, resource) of
 * PodResources' devices, in answer order, with the pod UID and container
 * ID the log names give (NULL: unknown). */
static int build_map(struct job *j)
{
        const struct kdev_podres_map *m = &j->map;
        if (m->n_devices == 0)
                return 0;
        j->containers = calloc(m->n_devices, sizeof(*j->containers));
        j->ids = calloc(m->n_devices, sizeof(*j->ids));
        if (!j->containers || !j->ids)
                return kdev_err_set(&j->map_err, ENOMEM, "out of memory");
        /* group: a container's devices of one resource, wherever they are in
         * the answer, become one entry (their IDs gathered in |ids|) */
        size_t *group = calloc(m->n_devices, sizeof(*group));
        size_t *count = calloc(m->n_devices, sizeof(*count));
        if (!group || !count) {
                free(group);
                free(count);
                return kdev_err_set(&j->map_err, ENOMEM, "out of memory");
        }
        size_t n = 0;
        for (size_t i = 0; i < m->n_devices; i++) {
                const struct kdev_podres_device *d = &m->devices[i];
                size_t g = n;
                for (size_t k = n; k-- > 0;)
                        if (same_container(&j->containers[k], d)) {
                                g = k;
                                break;
                        }
                if (g == n) {
                        struct kdev_usage_container *c = &j->containers[n++];
                        c->namespace_name = d->namespace_;
                        c->pod = d->pod;
                        c->container = d->container;
                        c->resource = d->resource;
                        c->pod_uid = kdev_usage_logs_pod_uid(&j->logs, d->namespace_, d->pod);
                        c->container_id = kdev_usage_logs_container_id(&j->logs, d->namespace_,
                                                                       d->pod, d->container);
                }
                group[i] = g;
                count[g]++;
        }
        size_t at = 0;
        for (size_t g = 0; g < n; g++) {
                j->containers[g].device_ids = &j->ids[at];
                at += count[g];
        }
        for (size_t i = 0; i < m->n_devices; i++) {
                struct kdev_usage_container *c = &j->containers[group[i]];
                ((const char **)c->device_ids)[c->n_device_ids++] = m->devices[i].device_id;
        }
        free(group);
        free(count);
        j->pods.containers = j->containers;
        j->pods.n = n;
        return 0;
}

/* The first job: PodResources and the log names (blocking, off the loop). */
static void map_work(uv_work_t *req)
{
        struct job *j = req->data;
        if (!j->u->podres_socket)
                return;
        j->map_rc = kdev_podres_list(j->u->podres_socket, PODRES_TIMEOUT_MS, &j->map, &j->map_err);
        if (j->map_rc == 0 && j->map.n_devices) { /* no holder: no names to join */
                kdev_usage_logs_read(j->u->pod_log_dir, &j->logs, &j->logs_err);
                j->map_rc = build_map(j);
        }
        if (j->map_rc < 0) {
                kdev_podres_map_clear(&j->map);
                j->pods = (struct kdev_usage_pods){0};
        }
}

/* kdev_usage_resolve_fn over the table the loop thread built: the map's
 * device IDs come in map order, so the next entry is the one asked for. */
static const char *resolve(void *arg, const char *resource, const char *id)
{
        (void)resource;
        struct job *j = arg;
        for (size_t tries = 0; tries < j->n_res; tries++) {
                struct resolved *r = &j->res[j->next];
                j->next = (j->next + 1) % j->n_res;
                if (r->id == id)
                        return r->found ? r->uuid : NULL;
        }
        return NULL;
}

static void work(uv_work_t *req)
{
        struct job *j = req->data;
        j->rc = kdev_nvidia_usage_sample(j->u->sampler, &j->snap, &j->err);
        if (j->rc < 0)
                return;
        struct kdev_usage_attribute_options o = {
                .proc_root = j->u->proc_root, .resolve = resolve, .resolve_arg = j};
        j->rc = kdev_usage_attribute(&j->snap, &j->pods, &o, &j->rep, &j->err);
}

static void job_free(struct job *j)
{
        kdev_podres_map_clear(&j->map);
        kdev_usage_logs_clear(&j->logs);
        free(j->containers);
        free(j->ids);
        kdev_usage_snapshot_clear(&j->snap);
        kdev_usage_report_clear(&j->rep);
        free(j->res);
        free(j);
}

static void after_work(uv_work_t *req, int status)
{
        struct job *j = req->data;
        struct kdev_dp_usage *u = j->u;
        u->in_flight = false;
        if (u->pm && status == 0) {
                if (j->rc < 0) {
                        if (strcmp(u->last_error, j->err.msg) != 0) {
                                kdev_log_warn("usage sample failed", "error", j->err.msg);
                                snprintf(u->last_error, sizeof(u->last_error), "%s", j->err.msg);
                        }
                        kdev_plugin_metrics_set_usage(u->pm, NULL, NULL, NULL);
                } else {
                        if (u->last_error[0])
                                kdev_log_info("usage sampling works again");
                        u->last_error[0] = '\0';
                        kdev_plugin_metrics_set_usage(u->pm, &j->snap, &j->pods, &j->rep);
                }
        }
        job_free(j);
        maybe_free(u);
}

/* The device UUID of |id| of resource |name| in the served set. */
static bool lookup(const struct kdev_resource_set *set, const char *name, const char *id,
                   char *uuid)
{
        for (size_t i = 0; set && name && i < set->n_resources; i++) {
                const struct kdev_resource *r = &set->resources[i];
                if (strcmp(r->name, name) != 0)
                        continue;
                const struct kdev_device *d = kdev_resource_find(r, id);
                const struct kdev_nvidia_devinfo *in = d ? kdev_nvidia_device_info(r, d) : NULL;
                if (!in)
                        return false;
                snprintf(uuid, KDEV_USAGE_UUID_MAX, "%s", in->uuid);
                return true;
        }
        return false;
}

/* Between the jobs, on the loop thread: the map's device IDs resolved
 * against the served set, then the sample queued. */
static void after_map(uv_work_t *req, int status)
{
        struct job *j = req->data;
        struct kdev_dp_usage *u = j->u;
        if (status != 0 || !u->pm) {
                u->in_flight = false;
                job_free(j);
                maybe_free(u);
                return;
        }
        if (j->map_rc < 0 && strcmp(u->podres_error, j->map_err.msg) != 0) {
                kdev_log_warn("cannot ask kubelet which container holds which device: usage is "
                              "unattributed",
                              "error", j->map_err.msg);
                snprintf(u->podres_error, sizeof(u->podres_error), "%s", j->map_err.msg);
        } else if (j->map_rc == 0 && u->podres_error[0]) {
                kdev_log_info("PodResources answers again");
                u->podres_error[0] = '\0';
        }
        if (j->logs_err.msg[0] && strcmp(u->logs_error, j->logs_err.msg) != 0)
                kdev_log_warn("cannot read kubelet's log directories: processes are not matched "
                              "to the containers PodResources names",
                              "error", j->logs_err.msg);
        if (j->map_rc == 0)
                snprintf(u->logs_error, sizeof(u->logs_error), "%s", j->logs_err.msg);
        for (size_t c = 0; c < j->pods.n; c++)
                j->n_res += j->pods.containers[c].n_device_ids;
        if (j->n_res && !(j->res = calloc(j->n_res, sizeof(*j->res)))) {
                u->in_flight = false;
                job_free(j);
                maybe_free(u);
                return;
        }
        size_t k = 0;
        for (size_t c = 0; c < j->pods.n; c++) {
                const struct kdev_usage_container *ct = &j->pods.containers[c];
                for (size_t i = 0; i < ct->n_device_ids; i++, k++) {
                        j->res[k].id = ct->device_ids[i];
                        j->res[k].found = lookup(*u->set, ct->resource, ct->device_ids[i],
                                                 j->res[k].uuid);
                }
        }
        if (uv_queue_work(u->loop, &j->req, work, after_work) < 0) {
                u->in_flight = false;
                job_free(j);
                maybe_free(u);
        }
}

static void on_tick(uv_timer_t *t)
{
        struct kdev_dp_usage *u = t->data;
        if (u->in_flight || !u->pm)
                return; /* the previous sample still runs: this tick is skipped */
        struct job *j = calloc(1, sizeof(*j));
        if (!j)
                return;
        j->u = u;
        j->req.data = j;
        if (uv_queue_work(u->loop, &j->req, map_work, after_map) < 0) {
                job_free(j);
                return;
        }
        u->in_flight = true;
}

struct kdev_dp_usage *kdev_dp_usage_start(uv_loop_t *loop, struct kdev_plugin_metrics *pm,
                                          const char *hostname,
                                          struct kdev_resource_set *const *set,
                                          const struct kdev_nvidia_config *nv,
                                          unsigned interval_s,
                                          const char *podres_socket,
                                          const char *pod_log_dir,
                                          struct kdev_err *err)
{
        struct kdev_dp_usage *u = calloc(1, sizeof(*u));
        if (!podres_socket)
                podres_socket = KDEV_PODRES_SOCKET;
        if (!u || !(u->proc_root = strdup(nv->proc_root ? nv->proc_root : "/proc")) ||
            (*podres_socket && !(u->podres_socket = strdup(podres_socket))) ||
            (pod_log_dir && !(u->pod_log_dir = strdup(pod_log_dir)))) {
                if (u) {
                        free(u->proc_root);
                        free(u->podres_socket);
                        free(u->pod_log_dir);
                }
                free(u);
                kdev_err_set(err, ENOMEM, "out of memory");
                return NULL;
        }
        u->loop = loop;
        u->pm = pm;
        u->set = set;
        if (kdev_nvidia_usage_new(nv, NULL, &u->sampler, err) < 0 ||
            kdev_plugin_metrics_enable_usage(pm, hostname, err) < 0) {
                kdev_nvidia_usage_free(u->sampler);
                free(u->proc_root);
                free(u->podres_socket);
                free(u->pod_log_dir);
                free(u);
                return NULL;
        }
        uv_timer_init(loop, &u->timer);
        u->timer.data = u;
        uint64_t ms = (uint64_t)interval_s * 1000;
        uv_timer_start(&u->timer, on_tick, ms, ms);
        return u;
}

static void on_timer_closed(uv_handle_t *h)
{
        struct kdev_dp_usage *u = h->data;
        u->timer_closed = true;
        maybe_free(u);
}

void kdev_dp_usage_stop(struct kdev_dp_usage *u)
{
        if (!u)
                return;
        u->pm = NULL;
        uv_close((uv_handle_t *)&u->timer, on_timer_closed);
}
