/* Container edits (see edits.h). */
#include "model/edits.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

static char *dup0(const char *s)
{
        return strdup(s ? s : "");
}

static void strv_free(char **v, size_t n)
{
        for (size_t i = 0; v && i < n; i++)
                free(v[i]);
        free(v);
}

/* A copy of |n| strings of |v| (NULL: ""); NULL when |n| is 0 or on
 * allocation failure (*ok false). */
static char **strv_dup(const char *const *v, size_t n, int *ok)
{
        *ok = 1;
        if (n == 0)
                return NULL;
        char **o = calloc(n, sizeof(*o));
        if (!o) {
                *ok = 0;
                return NULL;
        }
        for (size_t i = 0; i < n; i++) {
                o[i] = dup0(v ? v[i] : NULL);
                if (!o[i]) {
                        strv_free(o, i);
                        *ok = 0;
                        return NULL;
                }
        }
        return o;
}

/* Grows array *|arr| of *|n| items of |size| bytes by one; returns the new
 * (zeroed) last item, not yet counted, or NULL. */
static void *grow(void **arr, size_t n, size_t size)
{
        char *na = realloc(*arr, (n + 1) * size);
        if (!na)
                return NULL;
        *arr = na;
        memset(na + n * size, 0, size);
        return na + n * size;
}

static int nomem(struct kdev_err *err)
{
        return kdev_err_set(err, ENOMEM, "out of memory");
}

int kdev_edits_add_node(struct kdev_container_edits *e, const char *path, const char *host_path,
                        const char *permissions, struct kdev_err *err)
{
        struct kdev_edit_node *n = grow((void **)&e->nodes, e->n_nodes, sizeof(*n));
        if (!n)
                return nomem(err);
        n->path = dup0(path);
        n->host_path = dup0(host_path);
        n->permissions = dup0(permissions);
        if (!n->path || !n->host_path || !n->permissions) {
                free(n->path);
                free(n->host_path);
                free(n->permissions);
                return nomem(err);
        }
        e->n_nodes++;
        return 0;
}

static int add_kv(struct kdev_edit_kv **arr, size_t *n, const char *key, const char *value,
                  struct kdev_err *err)
{
        struct kdev_edit_kv *kv = grow((void **)arr, *n, sizeof(*kv));
        if (!kv)
                return nomem(err);
        kv->key = dup0(key);
        kv->value = dup0(value);
        if (!kv->key || !kv->value) {
                free(kv->key);
                free(kv->value);
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
                        char *v = dup0(value);
                        if (!v)
                                return nomem(err);
                        free(e->env[i].value);
                        e->env[i].value = v;
                        return 0;
                }
        }
        return add_kv(&e->env, &e->n_env, k, value, err);
}

int kdev_edits_add_mount(struct kdev_container_edits *e, const char *host_path,
                         const char *container_path, const char *const *options,
                         size_t n_options, struct kdev_err *err)
{
        struct kdev_edit_mount *m = grow((void **)&e->mounts, e->n_mounts, sizeof(*m));
        if (!m)
                return nomem(err);
        int ok;
        m->host_path = dup0(host_path);
        m->container_path = dup0(container_path);
        m->options = strv_dup(options, n_options, &ok);
        m->n_options = n_options;
        if (!m->host_path || !m->container_path || !ok) {
                free(m->host_path);
                free(m->container_path);
                strv_free(m->options, m->n_options);
                return nomem(err);
        }
        e->n_mounts++;
        return 0;
}

int kdev_edits_add_annotation(struct kdev_container_edits *e, const char *key, const char *value,
                              struct kdev_err *err)
{
        return add_kv(&e->annotations, &e->n_annotations, key, value, err);
}

int kdev_edits_add_cdi_device(struct kdev_container_edits *e, const char *name,
                              struct kdev_err *err)
{
        char **slot = grow((void **)&e->cdi_devices, e->n_cdi_devices, sizeof(*slot));
        if (!slot)
                return nomem(err);
        *slot = dup0(name);
        if (!*slot)
                return nomem(err);
        e->n_cdi_devices++;
        return 0;
}

static void hook_free(struct kdev_edit_hook *h)
{
        free(h->hook_name);
        free(h->path);
        strv_free(h->args, h->n_args);
        strv_free(h->env, h->n_env);
}

int kdev_edits_add_hook(struct kdev_container_edits *e, const struct kdev_edit_hook *h,
                        struct kdev_err *err)
{
        struct kdev_edit_hook *o = grow((void **)&e->hooks, e->n_hooks, sizeof(*o));
        if (!o)
                return nomem(err);
        int ok_args, ok_env;
        o->hook_name = dup0(h->hook_name);
        o->path = dup0(h->path);
        o->args = strv_dup((const char *const *)h->args, h->n_args, &ok_args);
        o->n_args = h->n_args;
        o->env = strv_dup((const char *const *)h->env, h->n_env, &ok_env);
        o->n_env = h->n_env;
        if (!o->hook_name || !o->path || !ok_args || !ok_env) {
                hook_free(o);
                return nomem(err);
        }
        e->n_hooks++;
        return 0;
}

void kdev_container_edits_clear(struct kdev_container_edits *e)
{
        if (!e)
                return;
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
                strv_free(e->mounts[i].options, e->mounts[i].n_options);
        }
        free(e->mounts);
        for (size_t i = 0; i < e->n_annotations; i++) {
                free(e->annotations[i].key);
                free(e->annotations[i].value);
        }
        free(e->annotations);
        strv_free(e->cdi_devices, e->n_cdi_devices);
        for (size_t i = 0; i < e->n_hooks; i++)
                hook_free(&e->hooks[i]);
        free(e->hooks);
        memset(e, 0, sizeof(*e));
}
