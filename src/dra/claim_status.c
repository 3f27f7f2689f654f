/* status.devices of a prepared claim. See claim_status.h. */
#include "dra/claim_status.h"

#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>


static const char *str(const json_t *o, const char *key)
{
        return json_string_value(json_object_get(o, key));
}

static const char *nz(const char *v)
{
        return v ? v : "";
}

static bool same(const char *a, const char *b)
{
        return strcmp(a ? a : "", b ? b : "") == 0;
}

/* The entry for device record |rec|, or NULL when out of memory. */
static json_t *entry(const struct kdev_dra_claim_status *s, const json_t *rec)
{
        const char *dev = str(rec, "device");
        const char *pool = str(rec, "pool");
        json_t *msg_ids = json_object_get(rec, "cdiDeviceIDs");
        size_t n = json_array_size(msg_ids), len = 0;
        for (size_t i = 0; i < n; i++)
                len += strlen(nz(json_string_value(json_array_get(msg_ids, i)))) + 2;
        char *msg = malloc(len + 32);
        if (!msg)
                return NULL;
        strcpy(msg, n > 1 ? "prepared as CDI devices " : "prepared as CDI device ");
        for (size_t i = 0; i < n; i++) {
                if (i)
                        strcat(msg, ", ");
                strcat(msg, nz(json_string_value(json_array_get(msg_ids, i))));
        }
        if (n == 0)
                strcpy(msg, "prepared");
        const char *uuid = str(rec, "uuid"), *parent = str(rec, "parentUUID");
        json_t *data = json_object();
        if (data && uuid)
                json_object_set_new(data, "uuid", json_string(uuid));
        if (data && parent)
                json_object_set_new(data, "parentUUID", json_string(parent));
        json_t *e = json_pack("{s:s, s:s, s:s}", "driver", s->driver, "pool",
                              pool ? pool : s->pool, "device", dev ? dev : "");
        json_t *cond = json_pack("{s:s, s:s, s:s, s:s, s:s}", "type", "Ready", "status", "True",
                                 "reason", "Prepared", "message", msg, "lastTransitionTime",
                                 s->now);
        free(msg);
        if (!e || !cond || !data) {
                json_decref(e);
                json_decref(cond);
                json_decref(data);
                return NULL;
        }
        const char *share = str(json_object_get(rec, "share"), "shareID");
        if (share)
                json_object_set_new(e, "shareID", json_string(share));
        json_object_set_new(e, "conditions", json_pack("[o]", cond));
        if (json_object_size(data))
                json_object_set_new(e, "data", data);
        else
                json_decref(data);
        return e;
}

static bool ours(const struct kdev_dra_claim_status *s, const json_t *e)
{
        return same(str(e, "driver"), s->driver) && same(str(e, "pool"), s->pool);
}

/* The entry of |old| with |e|'s key, or NULL. */
static const json_t *find(const json_t *old, const json_t *e)
{
        size_t i;
        const json_t *o;
        json_array_foreach(old, i, o)
                if (same(str(o, "driver"), str(e, "driver")) &&
                    same(str(o, "pool"), str(e, "pool")) &&
                    same(str(o, "device"), str(e, "device")) &&
                    same(str(o, "shareID"), str(e, "shareID")))
                        return o;
        return NULL;
}

int kdev_dra_claim_status_mutate(json_t *claim, void *arg, struct kdev_err *err)
{
        const struct kdev_dra_claim_status *s = arg;
        json_t *status = json_object_get(claim, "status");
        if (!json_is_object(status)) {
                if (!s->devices)
                        return KDEV_KUBE_UNCHANGED;
                return kdev_err_set(err, EINVAL, "claim has no status (not allocated)");
        }
        json_t *old = json_object_get(status, "devices");
        json_t *next = json_array();
        if (!next)
                return kdev_err_set(err, ENOMEM, "out of memory");
        size_t i;
        json_t *o;
        json_array_foreach(old, i, o)
                if (!ours(s, o))
                        json_array_append(next, o);
        const json_t *rec;
        json_array_foreach(s->devices, i, rec) {
                const char *pool = str(rec, "pool");
                if (pool && strcmp(pool, s->pool) != 0)
                        continue;
                json_t *e = entry(s, rec);
                if (!e) {
                        json_decref(next);
                        return kdev_err_set(err, ENOMEM, "out of memory");
                }
                /* the same entry as before keeps its transition time */
                const json_t *was = find(old, e);
                const json_t *wc = json_array_get(json_object_get(was, "conditions"), 0);
                json_t *nc = json_array_get(json_object_get(e, "conditions"), 0);
                if (was && str(wc, "lastTransitionTime")) {
                        json_object_set(nc, "lastTransitionTime",
                                        json_object_get(wc, "lastTransitionTime"));
                        if (json_equal((json_t *)was, e)) {
                                json_array_append(next, (json_t *)was);
                                json_decref(e);
                                continue;
                        }
                }
                json_array_append_new(next, e);
        }
        if (old ? json_equal(next, old) : json_array_size(next) == 0) {
                json_decref(next);
                return KDEV_KUBE_UNCHANGED;
        }
        if (json_array_size(next) == 0)
                json_object_del(status, "devices");
        else
                json_object_set(status, "devices", next);
        json_decref(next);
        return 0;
}

json_t *kdev_dra_claim_status_records(const json_t *devices, const struct kdev_nvidia_gpus *g)
{
        json_t *out = json_deep_copy(devices);
        size_t i;
        json_t *rec;
        json_array_foreach(out, i, rec) {
                const char *name = str(rec, "device");
                for (size_t k = 0; g && name && k < g->n_gpus; k++) {
                        const struct kdev_nvidia_gpu *gpu = &g->gpus[k];
                        if (strcmp(gpu->dra_name, name) == 0) {
                                json_object_set_new(rec, "uuid", json_string(gpu->uuid));
                                break;
                        }
                        for (size_t m = 0; m < gpu->n_migs; m++)
                                if (strcmp(gpu->migs[m].dra_name, name) == 0) {
                                        if (gpu->migs[m].uuid[0])
                                                json_object_set_new(
                                                        rec, "uuid",
                                                        json_string(gpu->migs[m].uuid));
                                        json_object_set_new(rec, "parentUUID",
                                                            json_string(gpu->uuid));
                                }
                }
        }
        return out;
}

/* --- the writer ------------------------------------------------------------ */

struct pending {
        char *ns, *name;
        json_t *records; /* NULL: unprepared */
        struct pending *next;
};

struct kdev_dra_status_writer {
        uv_loop_t *loop;
        struct kdev_kube *kube;
        char *driver, *pool;
        kdev_dra_status_error_fn on_error;
        void *arg;
        struct pending *head, *tail;
        bool busy, stopped;
        uv_work_t work;
        struct pending *job;  /* the write in flight */
        int rc;
        struct kdev_err err;
};

static void pending_free(struct pending *p)
{
        if (!p)
                return;
        free(p->ns);
        free(p->name);
        json_decref(p->records);
        free(p);
}

static void writer_free(struct kdev_dra_status_writer *w)
{
        while (w->head) {
                struct pending *p = w->head;
                w->head = p->next;
                pending_free(p);
        }
        kdev_kube_free(w->kube);
        free(w->driver);
        free(w->pool);
        free(w);
}

static void now_rfc3339(char *buf, size_t size)
{
        time_t t = time(NULL);
        struct tm tm;
        gmtime_r(&t, &tm);
        strftime(buf, size, "%Y-%m-%dT%H:%M:%SZ", &tm);
}

static void write_work(uv_work_t *req)
{
        struct kdev_dra_status_writer *w = req->data;
        char path[1024], now[32];
        w->err = (struct kdev_err){0};
        w->rc = kdev_kube_path(w->kube, path, sizeof(path), w->job->ns, "resourceclaims",
                               w->job->name, "status", &w->err);
        if (w->rc < 0)
                return;
        now_rfc3339(now, sizeof(now));
        struct kdev_dra_claim_status s = {.driver = w->driver, .pool = w->pool,
                                          .devices = w->job->records, .now = now};
        w->rc = kdev_kube_update_retry(w->kube, path, kdev_dra_claim_status_mutate, &s, NULL,
                                       &w->err);
        if (w->rc == -ENOENT || kdev_kube_last_status(w->kube) == 404)
                w->rc = 0; /* the claim is gone: nothing to tell */
}

static void start_next(struct kdev_dra_status_writer *w);

static void write_done(uv_work_t *req, int status)
{
        struct kdev_dra_status_writer *w = req->data;
        w->busy = false;
        if (status == 0 && w->rc < 0 && !w->stopped && w->on_error)
                w->on_error(w->arg, w->job->ns, w->job->name, w->err.msg);
        pending_free(w->job);
        w->job = NULL;
        if (w->stopped) {
                writer_free(w);
                return;
        }
        start_next(w);
}

static void start_next(struct kdev_dra_status_writer *w)
{
        if (w->busy || !w->head)
                return;
        w->job = w->head;
        w->head = w->job->next;
        if (!w->head)
                w->tail = NULL;
        w->work.data = w;
        if (uv_queue_work(w->loop, &w->work, write_work, write_done) < 0) {
                pending_free(w->job);
                w->job = NULL;
                return;
        }
        w->busy = true;
}

struct kdev_dra_status_writer *kdev_dra_status_writer_new(uv_loop_t *loop, struct kdev_kube *kube,
                                                          const char *driver, const char *pool,
                                                          kdev_dra_status_error_fn on_error,
                                                          void *arg)
{
        struct kdev_dra_status_writer *w = calloc(1, sizeof(*w));
        if (!w || !(w->driver = strdup(driver)) || !(w->pool = strdup(pool))) {
                if (w) {
                        free(w->driver);
                        free(w);
                }
                kdev_kube_free(kube);
                return NULL;
        }
        w->loop = loop;
        w->kube = kube;
        w->on_error = on_error;
        w->arg = arg;
        return w;
}

void kdev_dra_status_writer_claim(struct kdev_dra_status_writer *w, const char *ns,
                                  const char *name, json_t *records)
{
        if (!w || w->stopped) {
                json_decref(records);
                return;
        }
        for (struct pending *p = w->head; p; p = p->next)
                if (strcmp(p->ns, ns) == 0 && strcmp(p->name, name) == 0) {
                        json_decref(p->records);
                        p->records = records;
                        return;
                }
        struct pending *p = calloc(1, sizeof(*p));
        if (!p || !(p->ns = strdup(ns)) || !(p->name = strdup(name))) {
                if (p)
                        free(p->ns);
                free(p);
                json_decref(records);
                return;
        }
        p->records = records;
        if (w->tail)
                w->tail->next = p;
        else
                w->head = p;
        w->tail = p;
        start_next(w);
}

void kdev_dra_status_writer_stop(struct kdev_dra_status_writer *w)
{
        if (!w)
                return;
        w->stopped = true;
        if (!w->busy) {
                writer_free(w);
                return;
        }
        kdev_kube_abort(w->kube);
        uv_cancel((uv_req_t *)&w->work);
}
