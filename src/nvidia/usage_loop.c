/* The usage metering loop of both daemons. See usage_loop.h. */
#include "nvidia/usage_loop.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "nvidia/usage.h"
#include "podres/client.h"
#include "usage/usage.h"

/* How long one PodResources List may take: kubelet answers from memory. */
#define PODRES_TIMEOUT_MS 5000

struct kdev_nvidia_usage_loop {
        uv_loop_t *loop;
        bool stopped;
        struct kdev_nvidia_usage_loop_options o; /* strings: the copies below */
        char *driver;
        struct kdev_nvidia_usage *sampler;
        char *proc_root;
        char *podres_socket; /* NULL: none */
        char *pod_log_dir;
        char podres_error[KDEV_ERR_MSG_MAX]; /* logged once until it changes */
        char logs_error[KDEV_ERR_MSG_MAX];
        /* kubelet's log names, read again only when their directories
         * change (kdev_usage_logs_refresh); the job's alone while one runs */
        struct kdev_usage_logs logs;
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
        struct kdev_nvidia_usage_loop *u;
        /* the container map: PodResources' answer and the log names, owned */
        struct kdev_podres_map map;
        const struct kdev_usage_logs *logs; /* the loop's */
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

static void loop_free(struct kdev_nvidia_usage_loop *u)
{
        kdev_nvidia_usage_free(u->sampler);
        free(u->proc_root);
        free(u->podres_socket);
        free(u->pod_log_dir);
        free(u->driver);
        kdev_usage_logs_clear(&u->logs);
        free(u);
}

static void maybe_free(struct kdev_nvidia_usage_loop *u)
{
        if (u->timer_closed && !u->in_flight)
                loop_free(u);
}

static bool same_container(const struct kdev_usage_container *c, const struct kdev_podres_device *d)
{
        return strcmp(c->namespace_name, d->namespace_) == 0 && strcmp(c->pod, d->pod) == 0 &&
               strcmp(c->container, d->container) == 0 && strcmp(c->resource, d->resource) == 0;
}

/* The claims map of |j|: one container entry per claim device of the
 * driver, in answer order, its one device ID the device name. */
static int build_claims_map(struct job *j)
{
        const struct kdev_podres_map *m = &j->map;
        if (m->n_claims == 0)
                return 0;
        j->containers = calloc(m->n_claims, sizeof(*j->containers));
        j->ids = calloc(m->n_claims, sizeof(*j->ids));
        if (!j->containers || !j->ids)
                return kdev_err_set(&j->map_err, ENOMEM, "out of memory");
        size_t n = 0;
        for (size_t i = 0; i < m->n_claims; i++) {
                const struct kdev_podres_claim_device *d = &m->claims[i];
                /* kubelet may leave the driver out: then the pool and name
                 * are checked against the node's devices by lookup */
                if (d->driver[0] && strcmp(d->driver, j->u->driver) != 0)
                        continue;
                struct kdev_usage_container *c = &j->containers[n];
                c->namespace_name = d->namespace_;
                c->pod = d->pod;
                c->container = d->container;
                c->resource = d->driver[0] ? d->driver : j->u->driver;
                c->claim_namespace = d->claim_namespace;
                c->claim_name = d->claim_name;
                c->driver = c->resource;
                c->pool = d->pool;
                c->device = d->device;
                j->ids[n] = d->device;
                c->device_ids = &j->ids[n];
                c->n_device_ids = 1;
                c->pod_uid = kdev_usage_logs_pod_uid(j->logs, d->namespace_, d->pod);
                c->container_id = kdev_usage_logs_container_id(j->logs, d->namespace_, d->pod,
                                                               d->container);
                n++;
        }
        j->pods.containers = j->containers;
        j->pods.n = n;
        return 0;
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
                        c->pod_uid = kdev_usage_logs_pod_uid(j->logs, d->namespace_, d->pod);
                        c->container_id = kdev_usage_logs_container_id(j->logs, d->namespace_,
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
        bool claims = j->u->o.holders == KDEV_NVIDIA_USAGE_CLAIMS;
        if (j->map_rc == 0 && (claims ? j->map.n_claims : j->map.n_devices)) {
                /* no holder: no names to join */
                kdev_usage_logs_refresh(j->u->pod_log_dir, &j->u->logs, &j->logs_err);
                j->logs = &j->u->logs;
                j->map_rc = claims ? build_claims_map(j) : build_map(j);
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
        struct kdev_nvidia_usage_loop *u = j->u;
        u->in_flight = false;
        if (!u->stopped && status == 0) {
                if (j->rc < 0) {
                        if (strcmp(u->last_error, j->err.msg) != 0) {
                                kdev_log_warn("usage sample failed", "error", j->err.msg);
                                snprintf(u->last_error, sizeof(u->last_error), "%s", j->err.msg);
                        }
                        u->o.publish(u->o.arg, NULL, NULL, NULL);
                } else {
                        if (u->last_error[0])
                                kdev_log_info("usage sampling works again");
                        u->last_error[0] = '\0';
                        u->o.publish(u->o.arg, &j->snap, &j->pods, &j->rep);
                }
        }
        job_free(j);
        maybe_free(u);
}

/* Between the jobs, on the loop thread: the map's device IDs resolved
 * through the daemon's lookup, then the sample queued. */
static void after_map(uv_work_t *req, int status)
{
        struct job *j = req->data;
        struct kdev_nvidia_usage_loop *u = j->u;
        if (status != 0 || u->stopped) {
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
                        j->res[k].found = u->o.lookup(u->o.arg, ct, ct->device_ids[i],
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
        struct kdev_nvidia_usage_loop *u = t->data;
        if (u->in_flight || u->stopped)
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

struct kdev_nvidia_usage_loop *kdev_nvidia_usage_loop_start(
        uv_loop_t *loop, const struct kdev_nvidia_config *nv,
        const struct kdev_nvidia_usage_loop_options *opts, struct kdev_err *err)
{
        struct kdev_nvidia_usage_loop *u = calloc(1, sizeof(*u));
        const char *podres_socket = opts->podres_socket ? opts->podres_socket : KDEV_PODRES_SOCKET;
        if (!u || !(u->proc_root = strdup(nv->proc_root ? nv->proc_root : "/proc")) ||
            (*podres_socket && !(u->podres_socket = strdup(podres_socket))) ||
            (opts->pod_log_dir && !(u->pod_log_dir = strdup(opts->pod_log_dir))) ||
            !(u->driver = strdup(opts->driver ? opts->driver : ""))) {
                if (u)
                        loop_free(u);
                kdev_err_set(err, ENOMEM, "out of memory");
                return NULL;
        }
        u->loop = loop;
        u->o = *opts;
        u->o.podres_socket = u->podres_socket;
        u->o.pod_log_dir = u->pod_log_dir;
        u->o.driver = u->driver;
        u->o.library_path = NULL; /* the sampler's copy */
        if (kdev_nvidia_usage_new(nv, opts->library_path, &u->sampler, err) < 0) {
                loop_free(u);
                return NULL;
        }
        uv_timer_init(loop, &u->timer);
        u->timer.data = u;
        uint64_t ms = (uint64_t)opts->interval_s * 1000;
        uv_timer_start(&u->timer, on_tick, ms, ms);
        return u;
}

static void on_timer_closed(uv_handle_t *h)
{
        struct kdev_nvidia_usage_loop *u = h->data;
        u->timer_closed = true;
        maybe_free(u);
}

void kdev_nvidia_usage_loop_stop(struct kdev_nvidia_usage_loop *u)
{
        if (!u)
                return;
        u->stopped = true;
        uv_close((uv_handle_t *)&u->timer, on_timer_closed);
}
