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

struct kdev_dp_usage {
        uv_loop_t *loop;
        struct kdev_plugin_metrics *pm;  /* NULL once stopped */
        struct kdev_resource_set *const *set;
        struct kdev_nvidia_usage *sampler;
        char *proc_root;
        struct kdev_dp_usage_pods pods;
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
        const struct kdev_usage_pods *pods; /* acquired, or &empty */
        struct resolved *res;
        size_t n_res, next;
        struct kdev_usage_snapshot snap;
        struct kdev_usage_report rep;
        int rc;
        struct kdev_err err;
};

static const struct kdev_usage_pods empty;

static void maybe_free(struct kdev_dp_usage *u)
{
        if (!u->timer_closed || u->in_flight)
                return;
        kdev_nvidia_usage_free(u->sampler);
        free(u->proc_root);
        free(u);
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
        j->rc = kdev_usage_attribute(&j->snap, j->pods, &o, &j->rep, &j->err);
}

static void job_free(struct job *j)
{
        struct kdev_dp_usage *u = j->u;
        if (j->pods != &empty && u->pods.release)
                u->pods.release(u->pods.arg, j->pods);
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
                        kdev_plugin_metrics_set_usage(u->pm, &j->snap, j->pods, &j->rep);
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
        j->pods = u->pods.acquire ? u->pods.acquire(u->pods.arg) : NULL;
        if (!j->pods)
                j->pods = &empty;
        for (size_t c = 0; c < j->pods->n; c++)
                j->n_res += j->pods->containers[c].n_device_ids;
        if (j->n_res && !(j->res = calloc(j->n_res, sizeof(*j->res)))) {
                job_free(j);
                return;
        }
        size_t k = 0;
        for (size_t c = 0; c < j->pods->n; c++) {
                const struct kdev_usage_container *ct = &j->pods->containers[c];
                for (size_t i = 0; i < ct->n_device_ids; i++, k++) {
                        j->res[k].id = ct->device_ids[i];
                        j->res[k].found = lookup(*u->set, ct->resource, ct->device_ids[i],
                                                 j->res[k].uuid);
                }
        }
        if (uv_queue_work(u->loop, &j->req, work, after_work) < 0) {
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
                                          const struct kdev_dp_usage_pods *pods,
                                          struct kdev_err *err)
{
        struct kdev_dp_usage *u = calloc(1, sizeof(*u));
        if (!u || !(u->proc_root = strdup(nv->proc_root ? nv->proc_root : "/proc"))) {
                free(u);
                kdev_err_set(err, ENOMEM, "out of memory");
                return NULL;
        }
        u->loop = loop;
        u->pm = pm;
        u->set = set;
        if (pods)
                u->pods = *pods;
        if (kdev_nvidia_usage_new(nv, NULL, &u->sampler, err) < 0 ||
            kdev_plugin_metrics_enable_usage(pm, hostname, err) < 0) {
                kdev_nvidia_usage_free(u->sampler);
                free(u->proc_root);
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
