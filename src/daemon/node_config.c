/* Per-node configs: selection by node label, and the Node watch. See
 * node_config_internal.h. */
#include "daemon/node_config_internal.h"

#include <dirent.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include <jansson.h>

#include "common/log.h"
#include "kube/kube.h"

#define WATCH_TIMEOUT_S 300
#define BACKOFF_MIN_MS 1000
#define BACKOFF_MAX_MS 30000

static const char *label_of(const struct kdev_node_config_options *o)
{
        return o->label && *o->label ? o->label : KDEV_NODE_CONFIG_LABEL;
}

static const char *fallbacks_of(const struct kdev_node_config_options *o)
{
        return o->fallbacks ? o->fallbacks : KDEV_NODE_CONFIG_FALLBACKS;
}

/* Calls |fn| for each strategy of the comma-separated list |list| (blanks
 * around names ignored, empty items skipped) until it returns non-zero. */
static int each_fallback(const char *list, int (*fn)(void *arg, const char *name, size_t len),
                         void *arg)
{
        const char *p = list;
        while (*p) {
                while (*p == ' ' || *p == ',')
                        p++;
                const char *e = p;
                while (*e && *e != ',')
                        e++;
                size_t n = (size_t)(e - p);
                while (n && p[n - 1] == ' ')
                        n--;
                if (n) {
                        int r = fn(arg, p, n);
                        if (r)
                                return r;
                }
                p = e;
        }
        return 0;
}

static bool is_strategy(const char *name, size_t len, const char *want)
{
        return strlen(want) == len && strncmp(name, want, len) == 0;
}

struct check_arg {
        struct kdev_err *err;
        int rc;
};

static int check_one(void *arg, const char *name, size_t len)
{
        struct check_arg *a = arg;
        if (is_strategy(name, len, "named") || is_strategy(name, len, "single") ||
            is_strategy(name, len, "empty"))
                return 0;
        a->rc = kdev_err_set(a->err, EINVAL,
                             "unknown fallback strategy \"%.*s\" (expected named, single or empty)",
                             (int)len, name);
        return 1;
}

int kdev_node_config_check(const struct kdev_node_config_options *o, struct kdev_err *err)
{
        if (!o->node_name || !*o->node_name)
                return kdev_err_set(err, EINVAL,
                                    "--config-dir needs the node name (NODE_NAME or --node-name)");
        struct check_arg a = {err, 0};
        each_fallback(fallbacks_of(o), check_one, &a);
        return a.rc;
}

/* The config names in |dir|, sorted (malloc'ed array of malloc'ed names). */
static int list_configs(const char *dir, char ***names, size_t *n, struct kdev_err *err)
{
        *names = NULL;
        *n = 0;
        DIR *dh = opendir(dir);
        if (!dh)
                return kdev_err_set(err, errno, "cannot read the config directory %s: %s", dir,
                                    strerror(errno));
        struct dirent *de;
        int rc = 0;
        while ((de = readdir(dh))) {
                if (strncmp(de->d_name, "..", 2) == 0 || strcmp(de->d_name, ".") == 0)
                        continue;
                char path[4096];
                struct stat st;
                snprintf(path, sizeof(path), "%s/%s", dir, de->d_name);
                if (stat(path, &st) != 0 || S_ISDIR(st.st_mode))
                        continue;
                char **grown = realloc(*names, (*n + 1) * sizeof(*grown));
                char *copy = strdup(de->d_name);
                if (grown)
                        *names = grown;
                if (!grown || !copy) {
                        free(copy);
                        rc = kdev_err_set(err, ENOMEM, "out of memory");
                        break;
                }
                (*names)[(*n)++] = copy;
        }
        closedir(dh);
        for (size_t i = 1; rc == 0 && i < *n; i++) { /* insertion sort: few names */
                char *v = (*names)[i];
                size_t j = i;
                for (; j > 0 && strcmp((*names)[j - 1], v) > 0; j--)
                        (*names)[j] = (*names)[j - 1];
                (*names)[j] = v;
        }
        return rc;
}

static void free_names(char **names, size_t n)
{
        for (size_t i = 0; i < n; i++)
                free(names[i]);
        free(names);
}

static bool has_name(char *const *names, size_t n, const char *name)
{
        for (size_t i = 0; i < n; i++) {
                if (strcmp(names[i], name) == 0)
                        return true;
        }
        return false;
}

/* "a, b, c" into |buf|. */
static const char *join_names(char *const *names, size_t n, char *buf, size_t size)
{
        size_t off = 0;
        buf[0] = '\0';
        for (size_t i = 0; i < n && off < size; i++)
                off += (size_t)snprintf(buf + off, size - off, "%s%s", i ? ", " : "", names[i]);
        return buf;
}

struct fallback_arg {
        char *const *names;
        size_t n;
        const char *picked; /* a name, "" for empty, NULL: none yet */
};

static int fallback_one(void *arg, const char *name, size_t len)
{
        struct fallback_arg *a = arg;
        if (is_strategy(name, len, "named") &&
            has_name(a->names, a->n, KDEV_NODE_CONFIG_FALLBACK_NAME))
                a->picked = KDEV_NODE_CONFIG_FALLBACK_NAME;
        else if (is_strategy(name, len, "single") && a->n == 1)
                a->picked = a->names[0];
        else if (is_strategy(name, len, "empty"))
                a->picked = "";
        return a->picked != NULL;
}

int kdev_node_config_select(const struct kdev_node_config_options *o, const char *value,
                            void (*warn)(void *arg, const char *msg), void *warn_arg,
                            char **name, char **path, struct kdev_err *err)
{
        *name = NULL;
        *path = NULL;
        char **names;
        size_t n;
        int rc = list_configs(o->dir, &names, &n, err);
        if (rc < 0)
                return rc;
        char avail[1024];
        join_names(names, n, avail, sizeof(avail));
        const char *picked = NULL;
        if (n == 0) {
                rc = kdev_err_set(err, ENOENT, "no config files in %s", o->dir);
                goto out;
        }
        if (value && *value) {
                if (has_name(names, n, value)) {
                        picked = value;
                } else if (warn) {
                        char msg[1400];
                        snprintf(msg, sizeof(msg),
                                 "node label %s names config \"%s\", which is not in %s "
                                 "(configs: %s); using the default",
                                 label_of(o), value, o->dir, avail);
                        warn(warn_arg, msg);
                }
        }
        if (!picked && o->default_name && *o->default_name) {
                if (!has_name(names, n, o->default_name)) {
                        rc = kdev_err_set(err, ENOENT, "default config \"%s\" is not in %s (configs: %s)",
                                          o->default_name, o->dir, avail);
                        goto out;
                }
                picked = o->default_name;
        }
        if (!picked) {
                struct fallback_arg a = {names, n, NULL};
                each_fallback(fallbacks_of(o), fallback_one, &a);
                picked = a.picked;
        }
        if (!picked) {
                rc = kdev_err_set(err, ENOENT,
                                  "no config selected: the node has no usable label %s, no default "
                                  "config is set and the fallback strategies (%s) apply to none of "
                                  "the configs in %s (%s)",
                                  label_of(o), fallbacks_of(o), o->dir, avail);
                goto out;
        }
        *name = strdup(picked);
        if (*name && *picked && asprintf(path, "%s/%s", o->dir, picked) < 0)
                *path = NULL;
        if (!*name || (*picked && !*path)) {
                free(*name);
                *name = NULL;
                rc = kdev_err_set(err, ENOMEM, "out of memory");
        }
out:
        free_names(names, n);
        return rc;
}

/* ---- the Node ----------------------------------------------------------- */

static struct kdev_kube *client(const struct kdev_node_config_options *o, struct kdev_err *err)
{
        struct kdev_kube_config cfg;
        int rc = kdev_kube_config_load(&cfg, o->kubeconfig, err);
        struct kdev_kube *k = rc < 0 ? NULL : kdev_kube_new(&cfg, NULL, err);
        kdev_kube_config_free(&cfg);
        return k;
}

/* The label's value and the resourceVersion of Node object |node|. */
static int node_label(const json_t *node, const char *label, char **value, char **rv)
{
        const json_t *md = json_object_get(node, "metadata");
        const char *v = json_string_value(json_object_get(json_object_get(md, "labels"), label));
        const char *r = json_string_value(json_object_get(md, "resourceVersion"));
        *value = v ? strdup(v) : NULL;
        *rv = r ? strdup(r) : NULL;
        return (v && !*value) || (r && !*rv) ? -ENOMEM : 0;
}

static int read_node(struct kdev_kube *k, const struct kdev_node_config_options *o, char **value,
                     char **rv, struct kdev_err *err)
{
        json_t *node = NULL;
        int rc = kdev_kube_get_node(k, o->node_name, &node, err);
        if (rc < 0)
                return kdev_err_wrap(err, "reading node %s", o->node_name);
        rc = node_label(node, label_of(o), value, rv);
        json_decref(node);
        if (rc < 0)
                return kdev_err_set(err, ENOMEM, "out of memory");
        return 0;
}

int kdev_node_label_read(const struct kdev_node_config_options *o, char **value,
                         char **resource_version, struct kdev_err *err)
{
        *value = NULL;
        *resource_version = NULL;
        struct kdev_kube *k = client(o, err);
        if (!k)
                return kdev_err_wrap(err, "reading node %s", o->node_name);
        int rc = read_node(k, o, value, resource_version, err);
        kdev_kube_free(k);
        return rc;
}

struct kdev_node_watch {
        const struct kdev_node_config_options *o;
        struct kdev_kube *k;
        pthread_t thread;
        bool thread_on;
        uv_async_t async;
        kdev_node_label_fn fn;
        void *arg;
        char *rv;              /* watch thread's: where the next watch starts */
        pthread_mutex_t mu;    /* guards the fields below */
        pthread_cond_t cond;
        bool stopping;
        char *pending;         /* the latest value seen, for the loop */
        bool have_pending;
        char *reported;        /* loop thread's: the last value reported */
        void (*done)(void *arg);
        void *done_arg;
};

static bool same_value(const char *a, const char *b)
{
        return (!a && !b) || (a && b && strcmp(a, b) == 0);
}

/* Watch thread: hands |value| (copied) to the loop. */
static void post(struct kdev_node_watch *w, const char *value)
{
        char *copy = value ? strdup(value) : NULL;
        if (value && !copy)
                return; /* out of memory: the next event brings it */
        pthread_mutex_lock(&w->mu);
        free(w->pending);
        w->pending = copy;
        w->have_pending = true;
        pthread_mutex_unlock(&w->mu);
        uv_async_send(&w->async);
}

static void on_async(uv_async_t *h)
{
        struct kdev_node_watch *w = h->data;
        pthread_mutex_lock(&w->mu);
        bool have = w->have_pending;
        char *value = w->pending;
        w->pending = NULL;
        w->have_pending = false;
        bool stopping = w->stopping;
        pthread_mutex_unlock(&w->mu);
        if (have && !stopping && !same_value(value, w->reported)) {
                free(w->reported);
                w->reported = value;
                value = NULL;
                w->fn(w->arg, w->reported);
        }
        free(value);
}

static bool stopped(struct kdev_node_watch *w)
{
        pthread_mutex_lock(&w->mu);
        bool s = w->stopping;
        pthread_mutex_unlock(&w->mu);
        return s;
}

/* Sleeps |ms| or until the stop. */
static void nap(struct kdev_node_watch *w, unsigned ms)
{
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_sec += ms / 1000;
        ts.tv_nsec += (long)(ms % 1000) * 1000000L;
        if (ts.tv_nsec >= 1000000000L) {
                ts.tv_sec++;
                ts.tv_nsec -= 1000000000L;
        }
        pthread_mutex_lock(&w->mu);
        while (!w->stopping && pthread_cond_timedwait(&w->cond, &w->mu, &ts) == 0)
                ;
        pthread_mutex_unlock(&w->mu);
}

/* One watch event: the label of an ADDED or MODIFIED Node, none for a
 * DELETED one; an ERROR (410 Gone: the resourceVersion is too old) ends the
 * watch and makes the thread list again. */
static int on_event(void *arg, const json_t *ev)
{
        struct kdev_node_watch *w = arg;
        const char *type = json_string_value(json_object_get(ev, "type"));
        const json_t *obj = json_object_get(ev, "object");
        if (!type)
                return 0;
        if (strcmp(type, "ERROR") == 0) {
                free(w->rv);
                w->rv = NULL;
                return 1;
        }
        char *value = NULL, *rv = NULL;
        if (node_label(obj, label_of(w->o), &value, &rv) < 0) {
                free(value);
                free(rv);
                return 0;
        }
        if (rv) {
                free(w->rv);
                w->rv = rv;
                rv = NULL;
        }
        if (strcmp(type, "ADDED") == 0 || strcmp(type, "MODIFIED") == 0)
                post(w, value);
        else if (strcmp(type, "DELETED") == 0)
                post(w, NULL);
        free(value);
        free(rv);
        return 0;
}

static void *watch_main(void *arg)
{
        struct kdev_node_watch *w = arg;
        unsigned backoff = BACKOFF_MIN_MS;
        char sel[512], path[1024];
        snprintf(sel, sizeof(sel), "metadata.name%%3D%s", w->o->node_name);
        while (!stopped(w)) {
                struct kdev_err err = {0};
                int rc = 0;
                if (!w->rv) {
                        char *value = NULL;
                        rc = read_node(w->k, w->o, &value, &w->rv, &err);
                        if (rc == 0)
                                post(w, value);
                        free(value);
                }
                if (rc == 0) {
                        snprintf(path, sizeof(path),
                                 "/api/v1/nodes?fieldSelector=%s&watch=1&resourceVersion=%s"
                                 "&timeoutSeconds=%u",
                                 sel, w->rv ? w->rv : "", WATCH_TIMEOUT_S);
                        rc = kdev_kube_watch(w->k, path, WATCH_TIMEOUT_S, on_event, w, &err);
                }
                if (stopped(w))
                        break;
                if (rc == 0) {
                        backoff = BACKOFF_MIN_MS;
                        continue;
                }
                char ms[32];
                snprintf(ms, sizeof(ms), "%u", backoff);
                kdev_log_warn("watching the node for its config label failed, retrying", "node",
                              w->o->node_name, "error", err.msg, "retry_in_ms", ms);
                free(w->rv);
                w->rv = NULL; /* list again */
                nap(w, backoff);
                backoff = backoff * 2 > BACKOFF_MAX_MS ? BACKOFF_MAX_MS : backoff * 2;
        }
        return NULL;
}

static void watch_free(struct kdev_node_watch *w)
{
        kdev_kube_free(w->k);
        pthread_mutex_destroy(&w->mu);
        pthread_cond_destroy(&w->cond);
        free(w->rv);
        free(w->pending);
        free(w->reported);
        free(w);
}

struct kdev_node_watch *kdev_node_watch_start(uv_loop_t *loop,
                                              const struct kdev_node_config_options *o,
                                              const char *initial, const char *resource_version,
                                              kdev_node_label_fn fn, void *arg,
                                              struct kdev_err *err)
{
        struct kdev_node_watch *w = calloc(1, sizeof(*w));
        if (!w) {
                kdev_err_set(err, ENOMEM, "out of memory");
                return NULL;
        }
        w->o = o;
        w->fn = fn;
        w->arg = arg;
        pthread_mutex_init(&w->mu, NULL);
        pthread_cond_init(&w->cond, NULL);
        if ((initial && !(w->reported = strdup(initial))) ||
            (resource_version && !(w->rv = strdup(resource_version)))) {
                watch_free(w);
                kdev_err_set(err, ENOMEM, "out of memory");
                return NULL;
        }
        w->k = client(o, err);
        if (!w->k) {
                watch_free(w);
                return NULL;
        }
        int r = uv_async_init(loop, &w->async, on_async);
        if (r < 0) {
                watch_free(w);
                kdev_err_set(err, -r, "cannot watch the node: %s", uv_strerror(r));
                return NULL;
        }
        w->async.data = w;
        r = pthread_create(&w->thread, NULL, watch_main, w);
        if (r != 0) {
                /* the handle is open: close it, free in the callback */
                w->thread_on = false;
                kdev_err_set(err, r, "cannot start the node watch thread: %s", strerror(r));
                kdev_node_watch_stop(w, NULL, NULL);
                return NULL;
        }
        w->thread_on = true;
        return w;
}

static void on_async_closed(uv_handle_t *h)
{
        struct kdev_node_watch *w = h->data;
        void (*done)(void *) = w->done;
        void *done_arg = w->done_arg;
        watch_free(w);
        if (done)
                done(done_arg);
}

void kdev_node_watch_stop(struct kdev_node_watch *w, void (*done)(void *arg), void *arg)
{
        if (!w) {
                if (done)
                        done(arg);
                return;
        }
        pthread_mutex_lock(&w->mu);
        w->stopping = true;
        pthread_cond_broadcast(&w->cond);
        pthread_mutex_unlock(&w->mu);
        kdev_kube_abort(w->k);
        if (w->thread_on)
                pthread_join(w->thread, NULL);
        w->thread_on = false;
        w->done = done;
        w->done_arg = arg;
        uv_close((uv_handle_t *)&w->async, on_async_closed);
}
