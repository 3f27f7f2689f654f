/* The plugin's watch of the MPS control daemons (see mps.h). */
#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "common/wait.h"
#include "nvidia/mps.h"
#include "nvidia/nvidia_internal.h"

#define WAIT_LOG_MS 30000u /* NVIDIA's retry period, for the waiting log */

struct watched {
        char *resource;
        int answered;   /* thread side: last result, 1 up, 0 down, -1 none yet */
        char why[1024]; /* thread side: the last error */
        int applied;    /* loop side: 1 up, 0 down, -1 waiting (Unhealthy) */
        uint64_t logged_ms;
};

struct kdev_nvidia_mps_watch {
        struct kdev_nvidia_mps_watch_options o;
        char *root, *bin;
        struct watched *r;
        size_t n;
        uv_async_t async;
        pthread_t thread;
        pthread_mutex_t mu;
        pthread_cond_t cond;
        bool stop;
        void (*done)(void *arg);
        void *done_arg;
};

static struct kdev_resource *lookup(struct kdev_resource_set *set, const char *name)
{
        for (size_t i = 0; i < set->n_resources; i++) {
                if (strcmp(set->resources[i].name, name) == 0)
                        return &set->resources[i];
        }
        return NULL;
}

/* Sets the devices of |r|: down (Unhealthy) or up (their physical device's
 * health). Returns whether any changed. */
static bool mark(struct kdev_resource *r, bool up)
{
        bool changed = false;
        for (size_t i = 0; i < r->n_devices; i++) {
                struct kdev_device *d = &r->devices[i];
                bool h = up && (!d->physical || d->physical->healthy);
                if (up && !d->physical) {
                        const struct kdev_nvidia_devinfo *in = d->data;
                        h = !in || (!in->incomplete && !in->withdrawn);
                }
                changed = changed || d->healthy != h;
                d->healthy = h;
        }
        return changed;
}

static void *run(void *arg)
{
        struct kdev_nvidia_mps_watch *w = arg;
        pthread_mutex_lock(&w->mu);
        while (!w->stop) {
                for (size_t i = 0; i < w->n && !w->stop; i++) {
                        pthread_mutex_unlock(&w->mu);
                        struct kdev_err e = {0};
                        int rc = kdev_nvidia_mps_health(w->bin, w->root, w->r[i].resource,
                                                        2 * w->o.interval_ms, &e);
                        pthread_mutex_lock(&w->mu);
                        w->r[i].answered = rc == 0;
                        snprintf(w->r[i].why, sizeof(w->r[i].why), "%s", e.msg);
                }
                uv_async_send(&w->async);
                struct timespec ts;
                kdev_deadline_after_ms(w->o.interval_ms, &ts);
                while (!w->stop && pthread_cond_timedwait(&w->cond, &w->mu, &ts) != ETIMEDOUT)
                        ;
        }
        pthread_mutex_unlock(&w->mu);
        return NULL;
}

static void on_async(uv_async_t *h)
{
        struct kdev_nvidia_mps_watch *w = h->data;
        pthread_mutex_lock(&w->mu);
        for (size_t i = 0; i < w->n; i++) {
                struct watched *x = &w->r[i];
                int got = x->answered;
                char why[1024];
                snprintf(why, sizeof(why), "%s", x->why);
                pthread_mutex_unlock(&w->mu);
                struct kdev_resource *r = lookup(w->o.set, x->resource);
                uint64_t now = kdev_log_now_ms();
                if (got == 1) {
                        if (r && mark(r, true) && w->o.notify)
                                w->o.notify(w->o.notify_arg, x->resource);
                        if (x->applied == -1)
                                kdev_log_info("MPS daemon is ready", "resource", x->resource);
                        else if (x->applied == 0)
                                kdev_log_info("MPS daemon answers again", "resource", x->resource);
                        if (x->applied != 1 && w->o.event)
                                w->o.event(w->o.event_arg, "mps_daemon_up", 0, 1);
                        x->applied = 1;
                } else if (got == 0) {
                        if (r && mark(r, false) && w->o.notify)
                                w->o.notify(w->o.notify_arg, x->resource);
                        if (x->applied == 1) {
                                kdev_log_warn("MPS daemon not answering; its replicas are "
                                              "Unhealthy",
                                              "resource", x->resource, "error", why);
                                if (w->o.event)
                                        w->o.event(w->o.event_arg, "mps_daemon_down", 0, 1);
                                x->applied = 0;
                        } else if (x->applied == -1 &&
                                   (!x->logged_ms || now - x->logged_ms >= WAIT_LOG_MS)) {
                                char msg[1100];
                                snprintf(msg, sizeof(msg), "error waiting for MPS daemon: %s",
                                         why);
                                kdev_log_error("MPS daemon not ready; its replicas stay "
                                               "Unhealthy, retrying",
                                               "resource", x->resource, "error", msg);
                                x->logged_ms = now;
                        }
                }
                pthread_mutex_lock(&w->mu);
        }
        pthread_mutex_unlock(&w->mu);
}

static void free_watch(struct kdev_nvidia_mps_watch *w)
{
        for (size_t i = 0; i < w->n; i++)
                free(w->r[i].resource);
        free(w->r);
        free(w->root);
        free(w->bin);
        free(w);
}

int kdev_nvidia_mps_watch_start(const struct kdev_nvidia_mps_watch_options *o,
                                struct kdev_nvidia_mps_watch **out, struct kdev_err *err)
{
        *out = NULL;
        size_t n = 0;
        for (size_t i = 0; i < o->set->n_resources; i++) {
                const struct kdev_resource *r = &o->set->resources[i];
                const struct kdev_nvidia_rdata *d = r->ops_data;
                n += r->ops == &kdev_nvidia_resource_ops && d && d->mps_root;
        }
        if (n == 0)
                return 0;
        struct kdev_nvidia_mps_watch *w = calloc(1, sizeof(*w));
        if (!w)
                return kdev_err_set(err, ENOMEM, "out of memory");
        w->o = *o;
        if (!w->o.interval_ms)
                w->o.interval_ms = 250;
        w->root = strdup(o->root ? o->root : KDEV_NVIDIA_MPS_CONTAINER_ROOT);
        w->bin = strdup(o->control_bin ? o->control_bin : KDEV_NVIDIA_MPS_CONTROL_BIN);
        w->r = calloc(n, sizeof(*w->r));
        if (!w->root || !w->bin || !w->r) {
                free_watch(w);
                return kdev_err_set(err, ENOMEM, "out of memory");
        }
        for (size_t i = 0; i < o->set->n_resources; i++) {
                struct kdev_resource *r = &o->set->resources[i];
                const struct kdev_nvidia_rdata *d = r->ops_data;
                if (r->ops != &kdev_nvidia_resource_ops || !d || !d->mps_root)
                        continue;
                struct watched *x = &w->r[w->n];
                if (!(x->resource = strdup(r->name))) {
                        free_watch(w);
                        return kdev_err_set(err, ENOMEM, "out of memory");
                }
                x->answered = x->applied = -1;
                w->n++;
                /* NVIDIA's check before serving, once here: a daemon that
                 * answers keeps the replicas as built (no Unhealthy blip at
                 * a reload); otherwise they wait Unhealthy */
                struct kdev_err he = {0};
                if (kdev_nvidia_mps_health(w->bin, w->root, x->resource, 2 * w->o.interval_ms,
                                           &he) == 0) {
                        x->applied = 1;
                        kdev_log_info("MPS daemon is ready", "resource", x->resource);
                        continue;
                }
                mark(r, false);
                char msg[1100];
                snprintf(msg, sizeof(msg), "error waiting for MPS daemon: %s", he.msg);
                kdev_log_error("MPS daemon not ready; its replicas stay Unhealthy, retrying",
                               "resource", x->resource, "error", msg);
                x->logged_ms = kdev_log_now_ms();
        }
        int rc = kdev_cond_init_monotonic(&w->cond);
        if (rc) {
                free_watch(w);
                return kdev_err_set(err, rc, "MPS watch: %s", strerror(rc));
        }
        pthread_mutex_init(&w->mu, NULL);
        rc = uv_async_init(o->loop, &w->async, on_async);
        if (rc < 0) {
                pthread_cond_destroy(&w->cond);
                pthread_mutex_destroy(&w->mu);
                free_watch(w);
                return kdev_err_set(err, -rc, "MPS watch: %s", uv_strerror(rc));
        }
        w->async.data = w;
        rc = pthread_create(&w->thread, NULL, run, w);
        if (rc) {
                /* no thread: the handle is closed and |w| freed by stop */
                w->stop = true;
                kdev_nvidia_mps_watch_stop(w, NULL, NULL);
                return kdev_err_set(err, rc, "MPS watch: %s", strerror(rc));
        }
        *out = w;
        return 0;
}

static void on_closed(uv_handle_t *h)
{
        struct kdev_nvidia_mps_watch *w = h->data;
        void (*done)(void *) = w->done;
        void *arg = w->done_arg;
        pthread_cond_destroy(&w->cond);
        pthread_mutex_destroy(&w->mu);
        free_watch(w);
        if (done)
                done(arg);
}

void kdev_nvidia_mps_watch_stop(struct kdev_nvidia_mps_watch *w, void (*done)(void *arg), void *arg)
{
        if (!w) {
                if (done)
                        done(arg);
                return;
        }
        pthread_mutex_lock(&w->mu);
        bool had_thread = !w->stop;
        w->stop = true;
        pthread_cond_signal(&w->cond);
        pthread_mutex_unlock(&w->mu);
        if (had_thread)
                pthread_join(w->thread, NULL);
        w->done = done;
        w->done_arg = arg;
        uv_close((uv_handle_t *)&w->async, on_closed);
}
