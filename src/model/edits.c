/* Container edits (see edits.h). */
#include "model/edits.h"

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "model/edits_internal.h"

void *kdev_edits_scratch(const struct kdev_container_edits *e, size_t size)
{
        if (!e->allocator)
                return malloc(size);
        return e->allocator->alloc(e->allocator->data, size ? size : 1);
}

void kdev_edits_scratch_free(const struct kdev_container_edits *e, void *p)
{
        if (!e->allocator)
                free(p);
}

/* A copy of |s| (NULL: ""), from e's allocator or malloc'ed, or NULL. */
char *kdev_edits_strdup(const struct kdev_container_edits *e, const char *s)
{
        if (!s)
                s = "";
        if (!e->allocator)
                return strdup(s);
        size_t n = strlen(s) + 1;
        char *c = e->allocator->alloc(e->allocator->data, n);
        if (c)
                memcpy(c, s, n);
        return c;
}

/* Edits with an allocator grow an array of n items to room(n + 1) when n
 * is 0 or room(n) (full): 4, 8, 16, ... items, each growth a copy. */
static size_t room(size_t n)
{
        size_t r = 4;
        while (r < n)
                r *= 2;
        return r;
}

void *kdev_edits_array(const struct kdev_container_edits *e, size_t n, size_t size)
{
        if (!e->allocator)
                return calloc(n ? n : 1, size);
        size_t r = room(n);
        if (r > SIZE_MAX / size)
                return NULL;
        void *a = e->allocator->alloc(e->allocator->data, r * size);
        if (a)
                memset(a, 0, n * size);
        return a;
}

static void strv_free(const struct kdev_container_edits *e, char **v, size_t n)
{
        if (e->allocator)
                return;
        for (size_t i = 0; v && i < n; i++)
                free(v[i]);
        free(v);
}

/* A copy of |n| strings of |v| (NULL: ""); NULL when |n| is 0 or on
 * allocation failure (*ok false). */
static char **strv_dup(const struct kdev_container_edits *e, const char *const *v, size_t n,
                       int *ok)
{
        *ok = 1;
        if (n == 0)
                return NULL;
        char **o = kdev_edits_array(e, n, sizeof(*o));
        if (!o) {
                *ok = 0;
                return NULL;
        }
        for (size_t i = 0; i < n; i++) {
                o[i] = kdev_edits_strdup(e, v ? v[i] : NULL);
                if (!o[i]) {
                        strv_free(e, o, i);
                        *ok = 0;
                        return NULL;
                }
        }
        return o;
}

/* Grows array *|arr| of |n| items of |size| bytes of |e| by one; returns the
 * new (zeroed) last item, not yet counted, or NULL. */
static void *grow(const struct kdev_container_edits *e, void **arr, size_t n, size_t size)
{
        char *na;
        if (!e->allocator) {
                na = realloc(*arr, (n + 1) * size);
                if (!na)
                        return NULL;
        } else if (n == 0 || n == room(n)) {
                na = kdev_edits_array(e, n + 1, size);
                if (!na)
                        return NULL;
                if (n)
                        memcpy(na, *arr, n * size);
        } else {
                na = *arr;
        }
        *arr = na;
        memset(na + n * size, 0, size);
        return na + n * size;
}

/* Frees |s| of |e| (nothing for an allocator's). */
static void str_free(const struct kdev_container_edits *e, char *s)
{
        if (!e->allocator)
                free(s);
}

static int nomem(struct kdev_err *err)
{
        return kdev_err_set(err, ENOMEM, "out of memory");
}

int kdev_edits_add_node(struct kdev_container_edits *e, const char *path, const char *host_path,
                        const char *permissions, struct kdev_err *err)
{
        struct kdev_edit_node *n = grow(e, (void **)&e->nodes, e->n_nodes, sizeof(*n));
        if (!n)
                return nomem(err);
        if (e->allocator) {
                /* the three strings in one piece of the allocator's */
                const char *v[3] = {path ? path : "", host_path ? host_path : "",
                                    permissions ? permissions : ""};
                size_t len[3], total = 0;
                for (int i = 0; i < 3; i++)
                        total += len[i] = strlen(v[i]) + 1;
                char *p = e->allocator->alloc(e->allocator->data, total);
                if (!p)
                        return nomem(err);
                char **dst[3] = {&n->path, &n->host_path, &n->permissions};
                for (int i = 0; i < 3; i++) {
                        *dst[i] = memcpy(p, v[i], len[i]);
                        p += len[i];
                }
                e->n_nodes++;
                return 0;
        }
        n->path = kdev_edits_strdup(e, path);
        n->host_path = kdev_edits_strdup(e, host_path);
        n->permissions = kdev_edits_strdup(e, permissions);
        if (!n->path || !n->host_path || !n->permissions) {
                str_free(e, n->path);
                str_free(e, n->host_path);
                str_free(e, n->permissions);
                return nomem(err);
        }
        e->n_nodes++;
        return 0;
}

static int add_kv(const struct kdev_container_edits *e, struct kdev_edit_kv **arr, size_t *n,
                  const char *key, const char *value, struct kdev_err *err)
{
        struct kdev_edit_kv *kv = grow(e, (void **)arr, *n, sizeof(*kv));
        if (!kv)
                return nomem(err);
        kv->key = kdev_edits_strdup(e, key);
        kv->value = kdev_edits_strdup(e, value);
        if (!kv->key || !kv->value) {
                str_free(e, kv->key);
                str_free(e, kv->value);
                return nomem(err);
        }
        (*n)++;
        return 0;
}

int kdev_edits_set_env(struct kdev_container_edits *e, const char *key, const char *value,
                       struct kdev_err *err)
{
        const char *k = key ? key : "";
        for (size_t i = 0; i < e->n_env; i++) {
                if (e->env[i].key && strcmp(e->env[i].key, k) == 0) {
                        char *v = kdev_edits_strdup(e, value);
                        if (!v)
                                return nomem(err);
                        str_free(e, e->env[i].value);
                        e->env[i].value = v;
                        return 0;
                }
        }
        return add_kv(e, &e->env, &e->n_env, k, value, err);
}

int kdev_edits_add_mount(struct kdev_container_edits *e, const char *host_path,
                         const char *container_path, const char *const *options,
                         size_t n_options, struct kdev_err *err)
{
        struct kdev_edit_mount *m = grow(e, (void **)&e->mounts, e->n_mounts, sizeof(*m));
        if (!m)
                return nomem(err);
        int ok;
        m->host_path = kdev_edits_strdup(e, host_path);
        m->container_path = kdev_edits_strdup(e, container_path);
        m->options = strv_dup(e, options, n_options, &ok);
        m->n_options = n_options;
        if (!m->host_path || !m->container_path || !ok) {
                str_free(e, m->host_path);
                str_free(e, m->container_path);
                strv_free(e, m->options, m->n_options);
                return nomem(err);
        }
        e->n_mounts++;
        return 0;
}

int kdev_edits_add_annotation(struct kdev_container_edits *e, const char *key, const char *value,
                              struct kdev_err *err)
{
        return add_kv(e, &e->annotations, &e->n_annotations, key, value, err);
}

int kdev_edits_add_cdi_device(struct kdev_container_edits *e, const char *name,
                              struct kdev_err *err)
{
        char **slot = grow(e, (void **)&e->cdi_devices, e->n_cdi_devices, sizeof(*slot));
        if (!slot)
                return nomem(err);
        *slot = kdev_edits_strdup(e, name);
        if (!*slot)
                return nomem(err);
        e->n_cdi_devices++;
        return 0;
}

static void hook_free(const struct kdev_container_edits *e, struct kdev_edit_hook *h)
{
        str_free(e, h->hook_name);
        str_free(e, h->path);
        strv_free(e, h->args, h->n_args);
        strv_free(e, h->env, h->n_env);
}

int kdev_edits_add_hook(struct kdev_container_edits *e, const struct kdev_edit_hook *h,
                        struct kdev_err *err)
{
        struct kdev_edit_hook *o = grow(e, (void **)&e->hooks, e->n_hooks, sizeof(*o));
        if (!o)
                return nomem(err);
        int ok_args, ok_env;
        o->hook_name = kdev_edits_strdup(e, h->hook_name);
        o->path = kdev_edits_strdup(e, h->path);
        o->args = strv_dup(e, (const char *const *)h->args, h->n_args, &ok_args);
        o->n_args = h->n_args;
        o->env = strv_dup(e, (const char *const *)h->env, h->n_env, &ok_env);
        o->n_env = h->n_env;
        if (!o->hook_name || !o->path || !ok_args || !ok_env) {
                hook_free(e, o);
                return nomem(err);
        }
        e->n_hooks++;
        return 0;
}

void kdev_container_edits_clear(struct kdev_container_edits *e)
{
        if (!e)
                return;
        const struct kdev_edits_allocator *allocator = e->allocator;
        if (allocator) {
                memset(e, 0, sizeof(*e));
                e->allocator = allocator;
                return;
        }
        for (size_t i = 0; i < e->n_nodes; i++) {
                free(e->nodes[i].path);
                free(e->nodes[i].host_path);
                free(e->nodes[i].permissions);
        }
        free(e->nodes);
        for (size_t i = 0; i < e->n_env; i++) {
                free(e->env[i].key);
                free(e->env[i].value);
        }
        free(e->env);
        for (size_t i = 0; i < e->n_mounts; i++) {
                free(e->mounts[i].host_path);
                free(e->mounts[i].container_path);
                strv_free(e, e->mounts[i].options, e->mounts[i].n_options);
        }
        free(e->mounts);
        for (size_t i = 0; i < e->n_annotations; i++) {
                free(e->annotations[i].key);
                free(e->annotations[i].value);
        }
        free(e->annotations);
        strv_free(e, e->cdi_devices, e->n_cdi_devices);
        for (size_t i = 0; i < e->n_hooks; i++)
                hook_free(e, &e->hooks[i]);
        free(e->hooks);
        memset(e, 0, sizeof(*e));
}
