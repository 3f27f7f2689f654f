/* CDI spec in memory: building, freeing, checking, version selection. */
#include "cdi/cdi.h"
#include "cdi/cdi_internal.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- small helpers -------------------------------------------------------- */

/* Appends one zeroed element of |elem| bytes to |*arr| (|*n| elements).
 * Returns a pointer to it or NULL (ENOMEM; |*arr| unchanged). */
static void *push(void *arr_p, size_t *n, size_t elem)
{
        void **arr = arr_p;
        void *p = realloc(*arr, (*n + 1) * elem);
        if (!p)
                return NULL;
        *arr = p;
        void *slot = (char *)p + *n * elem;
        memset(slot, 0, elem);
        (*n)++;
        return slot;
}

static void strv_free(char **v, size_t n)
{
        for (size_t i = 0; i < n; i++)
                free(v[i]);
        free(v);
}

/* Copies an optional string; "" and NULL both give NULL. Sets *fail on ENOMEM. */
static char *dup_opt(const char *s, bool *fail)
{
        if (!s || !s[0])
                return NULL;
        char *d = strdup(s);
        if (!d)
                *fail = true;
        return d;
}

static char *dup_req(const char *s, bool *fail)
{
        char *d = strdup(s ? s : "");
        if (!d)
                *fail = true;
        return d;
}

static char **strv_dup(char *const *v, size_t n, bool *fail)
{
        if (n == 0)
                return NULL;
        char **d = calloc(n, sizeof(*d));
        if (!d) {
                *fail = true;
                return NULL;
        }
        for (size_t i = 0; i < n; i++)
                d[i] = dup_req(v[i], fail);
        return d;
}

static int enomem(struct kdev_err *err)
{
        return kdev_err_set(err, ENOMEM, "out of memory");
}

static void node_clear(struct kdev_cdi_device_node *n)
{
        free(n->path);
        free(n->host_path);
        free(n->type);
        free(n->permissions);
}

static void mount_clear(struct kdev_cdi_mount *m)
{
        free(m->host_path);
        free(m->container_path);
        strv_free(m->options, m->n_options);
        free(m->type);
}

static void hook_clear(struct kdev_cdi_hook *h)
{
        free(h->hook_name);
        free(h->path);
        strv_free(h->args, h->n_args);
        strv_free(h->env, h->n_env);
}

static void edits_clear(struct kdev_cdi_edits *e)
{
        strv_free(e->env, e->n_env);
        for (size_t i = 0; i < e->n_device_nodes; i++)
                node_clear(&e->device_nodes[i]);
        free(e->device_nodes);
        for (size_t i = 0; i < e->n_mounts; i++)
                mount_clear(&e->mounts[i]);
        free(e->mounts);
        for (size_t i = 0; i < e->n_hooks; i++)
                hook_clear(&e->hooks[i]);
        free(e->hooks);
        free(e->additional_gids);
        for (size_t i = 0; i < e->n_net_devices; i++) {
                free(e->net_devices[i].host_interface_name);
                free(e->net_devices[i].name);
        }
        free(e->net_devices);
        memset(e, 0, sizeof(*e));
}

static void annotations_clear(struct kdev_cdi_annotations *a)
{
        for (size_t i = 0; i < a->n; i++) {
                free(a->items[i].key);
                free(a->items[i].value);
        }
        free(a->items);
        a->items = NULL;
        a->n = 0;
}

static void device_free(struct kdev_cdi_device *d)
{
        if (!d)
                return;
        free(d->name);
        annotations_clear(&d->annotations);
        edits_clear(&d->edits);
        free(d);
}

static bool edits_empty(const struct kdev_cdi_edits *e)
{
        return e->n_env == 0 && e->n_device_nodes == 0 && e->n_mounts == 0 && e->n_hooks == 0 &&
               e->n_additional_gids == 0 && e->n_net_devices == 0;
}

/* ---- item checks (CDI pkg/cdi/container-edits.go Validate, SPEC.md) ------- */

int kdev_cdi_check_env(const char *kv, struct kdev_err *err)
{
        if (!kv)
                return kdev_err_set(err, EINVAL, "invalid environment variable: NULL");
        const char *eq = strchr(kv, '=');
        if (!eq || eq == kv)
                return kdev_err_set(err, EINVAL,
                                    "invalid environment variable \"%s\": expected \"NAME=value\"",
                                    kv);
        return 0;
}

int kdev_cdi_check_device_node(const struct kdev_cdi_device_node *n, struct kdev_err *err)
{
        if (!n->path || !n->path[0])
                return kdev_err_set(err, EINVAL, "device node: empty path");
        const char *t = n->type;
        if (t && t[0] && strcmp(t, "b") && strcmp(t, "c") && strcmp(t, "u") && strcmp(t, "p"))
                return kdev_err_set(err, EINVAL,
                                    "device node \"%s\": invalid type \"%s\" (b, c, u or p)",
                                    n->path, t);
        const char *p = n->permissions;
        if (p && p[0] && strcmp(p, "none") && p[strspn(p, "rwm")] != '\0')
                return kdev_err_set(err, EINVAL,
                                    "device node \"%s\": invalid permissions \"%s\" (letters of \"rwm\", or \"none\")",
                                    n->path, p);
        return 0;
}

int kdev_cdi_check_mount(const struct kdev_cdi_mount *m, struct kdev_err *err)
{
        if (!m->host_path || !m->host_path[0])
                return kdev_err_set(err, EINVAL, "mount: empty host path");
        if (!m->container_path || !m->container_path[0])
                return kdev_err_set(err, EINVAL, "mount \"%s\": empty container path", m->host_path);
        if (m->n_options && !m->options)
                return kdev_err_set(err, EINVAL, "mount \"%s\": NULL options", m->container_path);
        for (size_t i = 0; i < m->n_options; i++) {
                if (!m->options[i])
                        return kdev_err_set(err, EINVAL, "mount \"%s\": NULL option",
                                            m->container_path);
        }
        return 0;
}

static const char *const hook_names[] = {
        "prestart", "createRuntime", "createContainer", "startContainer", "poststart", "poststop",
};

int kdev_cdi_check_hook(const struct kdev_cdi_hook *h, struct kdev_err *err)
{
        KDEV_CDI_LOCAL_ERR(err);
        bool known = false;
        for (size_t i = 0; h->hook_name && i < sizeof(hook_names) / sizeof(hook_names[0]); i++)
                known = known || strcmp(h->hook_name, hook_names[i]) == 0;
        if (!known)
                return kdev_err_set(err, EINVAL,
                                    "invalid hook name \"%s\" (prestart, createRuntime, createContainer, startContainer, poststart or poststop)",
                                    h->hook_name ? h->hook_name : "");
        if (!h->path || h->path[0] != '/')
                return kdev_err_set(err, EINVAL, "hook \"%s\": path \"%s\" is not absolute",
                                    h->hook_name, h->path ? h->path : "");
        if ((h->n_args && !h->args) || (h->n_env && !h->env))
                return kdev_err_set(err, EINVAL, "hook \"%s\": NULL args or env", h->hook_name);
        for (size_t i = 0; i < h->n_args; i++) {
                if (!h->args[i])
                        return kdev_err_set(err, EINVAL, "hook \"%s\": NULL argument", h->hook_name);
        }
        for (size_t i = 0; i < h->n_env; i++) {
                int r = kdev_cdi_check_env(h->env[i], err);
                if (r < 0)
                        return kdev_err_wrap(err, "hook \"%s\"", h->hook_name);
        }
        if (h->has_timeout && h->timeout <= 0)
                return kdev_err_set(err, EINVAL, "hook \"%s\": timeout %d is not positive",
                                    h->hook_name, h->timeout);
        return 0;
}

/* ---- building ------------------------------------------------------------- */

struct kdev_cdi_spec *kdev_cdi_spec_new(const char *kind, struct kdev_err *err)
{
        if (kdev_cdi_validate_kind(kind, err) < 0)
                return NULL;
        struct kdev_cdi_spec *s = calloc(1, sizeof(*s));
        if (s)
                s->kind = strdup(kind);
        if (!s || !s->kind) {
                free(s);
                enomem(err);
                return NULL;
        }
        return s;
}

void kdev_cdi_spec_free(struct kdev_cdi_spec *spec)
{
        if (!spec)
                return;
        free(spec->kind);
        free(spec->min_version);
        annotations_clear(&spec->annotations);
        for (size_t i = 0; i < spec->n_devices; i++)
                device_free(spec->devices[i]);
        free(spec->devices);
        edits_clear(&spec->edits);
        free(spec);
}

static const char *const known_versions[] = {
        "0.1.0", "0.2.0", "0.3.0", "0.4.0", "0.5.0", "0.6.0", "0.7.0", "0.8.0", "1.0.0", "1.1.0",
};

const char *kdev_cdi_known_version(const char *version)
{
        if (!version)
                return NULL;
        if (version[0] == 'v')
                version++;
        for (size_t i = 0; i < sizeof(known_versions) / sizeof(known_versions[0]); i++) {
                if (strcmp(version, known_versions[i]) == 0)
                        return known_versions[i];
        }
        return NULL;
}

int kdev_cdi_spec_set_min_version(struct kdev_cdi_spec *spec, const char *version,
                                  struct kdev_err *err)
{
        char *copy = NULL;
        if (version) {
                const char *known = kdev_cdi_known_version(version);
                if (!known)
                        return kdev_err_set(err, EINVAL,
                                            "unknown CDI version \"%s\" (known: 0.1.0 to %s)",
                                            version, KDEV_CDI_CURRENT_VERSION);
                copy = strdup(known);
                if (!copy)
                        return enomem(err);
        }
        free(spec->min_version);
        spec->min_version = copy;
        return 0;
}

static int annotations_set(struct kdev_cdi_annotations *a, const char *key, const char *value,
                           struct kdev_err *err)
{
        int r = kdev_cdi_validate_annotation_key(key, err);
        if (r < 0)
                return r;
        if (!value)
                return kdev_err_set(err, EINVAL, "annotation \"%s\": NULL value", key);
        char *v = strdup(value);
        if (!v)
                return enomem(err);
        size_t pos = 0;
        while (pos < a->n && strcmp(a->items[pos].key, key) < 0)
                pos++;
        if (pos < a->n && strcmp(a->items[pos].key, key) == 0) {
                free(a->items[pos].value);
                a->items[pos].value = v;
                return 0;
        }
        char *k = strdup(key);
        if (!k || !push(&a->items, &a->n, sizeof(*a->items))) {
                free(k);
                free(v);
                return enomem(err);
        }
        memmove(&a->items[pos + 1], &a->items[pos], (a->n - 1 - pos) * sizeof(*a->items));
        a->items[pos].key = k;
        a->items[pos].value = v;
        return 0;
}

int kdev_cdi_spec_set_annotation(struct kdev_cdi_spec *spec, const char *key, const char *value,
                                 struct kdev_err *err)
{
        return annotations_set(&spec->annotations, key, value, err);
}

int kdev_cdi_device_set_annotation(struct kdev_cdi_device *dev, const char *key,
                                   const char *value, struct kdev_err *err)
{
        KDEV_CDI_LOCAL_ERR(err);
        int r = annotations_set(&dev->annotations, key, value, err);
        return r < 0 ? kdev_err_wrap(err, "device \"%s\"", dev->name) : r;
}

struct kdev_cdi_edits *kdev_cdi_spec_edits(struct kdev_cdi_spec *spec)
{
        return &spec->edits;
}

struct kdev_cdi_edits *kdev_cdi_device_edits(struct kdev_cdi_device *dev)
{
        return &dev->edits;
}

const struct kdev_cdi_device *kdev_cdi_spec_find_device(const struct kdev_cdi_spec *spec,
                                                        const char *name)
{
        for (size_t i = 0; spec && name && i < spec->n_devices; i++) {
                if (strcmp(spec->devices[i]->name, name) == 0)
                        return spec->devices[i];
        }
        return NULL;
}

struct kdev_cdi_device *kdev_cdi_spec_add_device(struct kdev_cdi_spec *spec, const char *name,
                                                 struct kdev_err *err)
{
        if (kdev_cdi_validate_device_name(name, err) < 0)
                return NULL;
        if (kdev_cdi_spec_find_device(spec, name)) {
                kdev_err_set(err, EEXIST, "CDI spec \"%s\": device \"%s\" already exists", spec->kind,
                             name);
                return NULL;
        }
        struct kdev_cdi_device *d = calloc(1, sizeof(*d));
        if (d)
                d->name = strdup(name);
        struct kdev_cdi_device **slot = NULL;
        if (d && d->name)
                slot = push(&spec->devices, &spec->n_devices, sizeof(*spec->devices));
        if (!slot) {
                device_free(d);
                enomem(err);
                return NULL;
        }
        *slot = d;
        return d;
}

int kdev_cdi_edits_add_env(struct kdev_cdi_edits *e, const char *kv, struct kdev_err *err)
{
        int r = kdev_cdi_check_env(kv, err);
        if (r < 0)
                return r;
        char *copy = strdup(kv);
        char **slot = copy ? push(&e->env, &e->n_env, sizeof(*e->env)) : NULL;
        if (!slot) {
                free(copy);
                return enomem(err);
        }
        *slot = copy;
        return 0;
}

int kdev_cdi_edits_add_device_node(struct kdev_cdi_edits *e,
                                   const struct kdev_cdi_device_node *node, struct kdev_err *err)
{
        int r = kdev_cdi_check_device_node(node, err);
        if (r < 0)
                return r;
        bool fail = false;
        struct kdev_cdi_device_node c = *node;
        c.path = dup_req(node->path, &fail);
        c.host_path = dup_opt(node->host_path, &fail);
        c.type = dup_opt(node->type, &fail);
        c.permissions = dup_opt(node->permissions, &fail);
        struct kdev_cdi_device_node *slot = NULL;
        if (!fail)
                slot = push(&e->device_nodes, &e->n_device_nodes, sizeof(*e->device_nodes));
        if (!slot) {
                node_clear(&c);
                return enomem(err);
        }
        *slot = c;
        return 0;
}

int kdev_cdi_edits_add_mount(struct kdev_cdi_edits *e, const struct kdev_cdi_mount *m,
                             struct kdev_err *err)
{
        int r = kdev_cdi_check_mount(m, err);
        if (r < 0)
                return r;
        bool fail = false;
        struct kdev_cdi_mount c = { 0 };
        c.host_path = dup_req(m->host_path, &fail);
        c.container_path = dup_req(m->container_path, &fail);
        c.options = strv_dup(m->options, m->n_options, &fail);
        c.n_options = c.options ? m->n_options : 0;
        c.type = dup_opt(m->type, &fail);
        struct kdev_cdi_mount *slot = NULL;
        if (!fail)
                slot = push(&e->mounts, &e->n_mounts, sizeof(*e->mounts));
        if (!slot) {
                mount_clear(&c);
                return enomem(err);
        }
        *slot = c;
        return 0;
}

int kdev_cdi_edits_add_hook(struct kdev_cdi_edits *e, const struct kdev_cdi_hook *h,
                            struct kdev_err *err)
{
        int r = kdev_cdi_check_hook(h, err);
        if (r < 0)
                return r;
        bool fail = false;
        struct kdev_cdi_hook c = { 0 };
        c.hook_name = dup_req(h->hook_name, &fail);
        c.path = dup_req(h->path, &fail);
        c.args = strv_dup(h->args, h->n_args, &fail);
        c.n_args = c.args ? h->n_args : 0;
        c.env = strv_dup(h->env, h->n_env, &fail);
        c.n_env = c.env ? h->n_env : 0;
        c.has_timeout = h->has_timeout;
        c.timeout = h->has_timeout ? h->timeout : 0;
        struct kdev_cdi_hook *slot = NULL;
        if (!fail)
                slot = push(&e->hooks, &e->n_hooks, sizeof(*e->hooks));
        if (!slot) {
                hook_clear(&c);
                return enomem(err);
        }
        *slot = c;
        return 0;
}

int kdev_cdi_edits_add_additional_gid(struct kdev_cdi_edits *e, uint32_t gid,
                                      struct kdev_err *err)
{
        uint32_t *slot = push(&e->additional_gids, &e->n_additional_gids,
                              sizeof(*e->additional_gids));
        if (!slot)
                return enomem(err);
        *slot = gid;
        return 0;
}

int kdev_cdi_edits_add_net_device(struct kdev_cdi_edits *e, const char *host_interface_name,
                                  const char *name, struct kdev_err *err)
{
        if (!host_interface_name || !host_interface_name[0])
                return kdev_err_set(err, EINVAL, "net device: empty host interface name");
        if (!name || !name[0])
                return kdev_err_set(err, EINVAL, "net device \"%s\": empty name",
                                    host_interface_name);
        for (size_t i = 0; i < e->n_net_devices; i++) {
                if (strcmp(e->net_devices[i].host_interface_name, host_interface_name) == 0)
                        return kdev_err_set(err, EINVAL,
                                            "net device: host interface \"%s\" listed twice",
                                            host_interface_name);
                if (strcmp(e->net_devices[i].name, name) == 0)
                        return kdev_err_set(err, EINVAL, "net device: name \"%s\" listed twice",
                                            name);
        }
        bool fail = false;
        char *h = dup_req(host_interface_name, &fail);
        char *n = dup_req(name, &fail);
        struct kdev_cdi_net_device *slot = NULL;
        if (!fail)
                slot = push(&e->net_devices, &e->n_net_devices, sizeof(*e->net_devices));
        if (!slot) {
                free(h);
                free(n);
                return enomem(err);
        }
        slot->host_interface_name = h;
        slot->name = n;
        return 0;
}

/* ---- merge ---------------------------------------------------------------- */

static bool str_eq(const char *a, const char *b)
{
        if (!a || !b)
                return a == b;
        return strcmp(a, b) == 0;
}

static bool strv_eq(char *const *a, size_t na, char *const *b, size_t nb)
{
        if (na != nb)
                return false;
        for (size_t i = 0; i < na; i++) {
                if (!str_eq(a[i], b[i]))
                        return false;
        }
        return true;
}

static bool hook_eq(const struct kdev_cdi_hook *a, const struct kdev_cdi_hook *b)
{
        return str_eq(a->hook_name, b->hook_name) && str_eq(a->path, b->path) &&
               strv_eq(a->args, a->n_args, b->args, b->n_args) &&
               strv_eq(a->env, a->n_env, b->env, b->n_env) && a->has_timeout == b->has_timeout &&
               (!a->has_timeout || a->timeout == b->timeout);
}

int kdev_cdi_edits_merge(struct kdev_cdi_edits *dst, const struct kdev_cdi_edits *src,
                         struct kdev_err *err)
{
        int added = 0, r;
        for (size_t i = 0; i < src->n_env; i++) {
                bool have = false;
                for (size_t j = 0; j < dst->n_env && !have; j++)
                        have = strcmp(dst->env[j], src->env[i]) == 0;
                if (have)
                        continue;
                if ((r = kdev_cdi_edits_add_env(dst, src->env[i], err)) < 0)
                        return r;
                added++;
        }
        for (size_t i = 0; i < src->n_device_nodes; i++) {
                bool have = false;
                for (size_t j = 0; j < dst->n_device_nodes && !have; j++)
                        have = strcmp(dst->device_nodes[j].path, src->device_nodes[i].path) == 0;
                if (have)
                        continue;
                if ((r = kdev_cdi_edits_add_device_node(dst, &src->device_nodes[i], err)) < 0)
                        return r;
                added++;
        }
        for (size_t i = 0; i < src->n_mounts; i++) {
                bool have = false;
                for (size_t j = 0; j < dst->n_mounts && !have; j++)
                        have = strcmp(dst->mounts[j].container_path,
                                      src->mounts[i].container_path) == 0;
                if (have)
                        continue;
                if ((r = kdev_cdi_edits_add_mount(dst, &src->mounts[i], err)) < 0)
                        return r;
                added++;
        }
        for (size_t i = 0; i < src->n_hooks; i++) {
                bool have = false;
                for (size_t j = 0; j < dst->n_hooks && !have; j++)
                        have = hook_eq(&dst->hooks[j], &src->hooks[i]);
                if (have)
                        continue;
                if ((r = kdev_cdi_edits_add_hook(dst, &src->hooks[i], err)) < 0)
                        return r;
                added++;
        }
        for (size_t i = 0; i < src->n_additional_gids; i++) {
                bool have = false;
                for (size_t j = 0; j < dst->n_additional_gids && !have; j++)
                        have = dst->additional_gids[j] == src->additional_gids[i];
                if (have)
                        continue;
                if ((r = kdev_cdi_edits_add_additional_gid(dst, src->additional_gids[i], err)) < 0)
                        return r;
                added++;
        }
        for (size_t i = 0; i < src->n_net_devices; i++) {
                const struct kdev_cdi_net_device *nd = &src->net_devices[i];
                bool have = false;
                for (size_t j = 0; j < dst->n_net_devices && !have; j++)
                        have = strcmp(dst->net_devices[j].host_interface_name,
                                      nd->host_interface_name) == 0;
                if (have)
                        continue;
                r = kdev_cdi_edits_add_net_device(dst, nd->host_interface_name, nd->name, err);
                if (r < 0)
                        return r;
                added++;
        }
        return added;
}

/* ---- versions (CDI specs-go/version.go) ----------------------------------- */

static bool edits_have_host_path(const struct kdev_cdi_edits *e)
{
        for (size_t i = 0; i < e->n_device_nodes; i++) {
                if (e->device_nodes[i].host_path && e->device_nodes[i].host_path[0])
                        return true;
        }
        return false;
}

static bool edits_have_mount_type(const struct kdev_cdi_edits *e)
{
        for (size_t i = 0; i < e->n_mounts; i++) {
                if (e->mounts[i].type && e->mounts[i].type[0])
                        return true;
        }
        return false;
}

const char *kdev_cdi_required_version(const struct kdev_cdi_spec *spec, const char **why)
{
        const char *dummy;
        if (!why)
                why = &dummy;
        bool net = spec->edits.n_net_devices > 0, gids = spec->edits.n_additional_gids > 0;
        bool ann = spec->annotations.n > 0, digit = false;
        bool host_path = edits_have_host_path(&spec->edits);
        bool mount_type = edits_have_mount_type(&spec->edits);
        for (size_t i = 0; i < spec->n_devices; i++) {
                const struct kdev_cdi_device *d = spec->devices[i];
                net = net || d->edits.n_net_devices > 0;
                gids = gids || d->edits.n_additional_gids > 0;
                ann = ann || d->annotations.n > 0;
                digit = digit || (d->name[0] >= '0' && d->name[0] <= '9');
                host_path = host_path || edits_have_host_path(&d->edits);
                mount_type = mount_type || edits_have_mount_type(&d->edits);
        }
        const char *slash = spec->kind ? strchr(spec->kind, '/') : NULL;
        bool class_dot = slash && strchr(slash + 1, '.');

        if (net)
                return *why = "netDevices", "1.1.0";
        if (gids)
                return *why = "additionalGids", "0.7.0";
        if (ann)
                return *why = "annotations", "0.6.0";
        if (class_dot)
                return *why = "a '.' in the class", "0.6.0";
        if (digit)
                return *why = "a device name starting with a digit", "0.5.0";
        if (host_path)
                return *why = "deviceNodes hostPath", "0.5.0";
        if (mount_type)
                return *why = "mounts type", "0.4.0";
        return *why = "baseline", "0.3.0";
}

int kdev_cdi_version_compare(const char *a, const char *b)
{
        long va[3] = { -1, -1, -1 }, vb[3] = { -1, -1, -1 };
        if (a && a[0] == 'v')
                a++;
        if (b && b[0] == 'v')
                b++;
        if (!a || sscanf(a, "%ld.%ld.%ld", &va[0], &va[1], &va[2]) != 3)
                va[0] = va[1] = va[2] = -1;
        if (!b || sscanf(b, "%ld.%ld.%ld", &vb[0], &vb[1], &vb[2]) != 3)
                vb[0] = vb[1] = vb[2] = -1;
        for (int i = 0; i < 3; i++) {
                if (va[i] != vb[i])
                        return va[i] < vb[i] ? -1 : 1;
        }
        return 0;
}

const char *kdev_cdi_spec_version(const struct kdev_cdi_spec *spec)
{
        const char *req = kdev_cdi_required_version(spec, NULL);
        const char *min = kdev_cdi_known_version(spec->min_version);
        if (min && kdev_cdi_version_compare(min, req) > 0)
                return min;
        return req;
}

/* ---- whole-spec validation ------------------------------------------------ */

static int check_annotations(const struct kdev_cdi_annotations *a, struct kdev_err *err)
{
        for (size_t i = 0; i < a->n; i++) {
                int r = kdev_cdi_validate_annotation_key(a->items[i].key, err);
                if (r < 0)
                        return r;
                if (i > 0 && strcmp(a->items[i - 1].key, a->items[i].key) >= 0)
                        return kdev_err_set(err, EINVAL, "annotations: keys not sorted or not unique");
        }
        return 0;
}

static int check_edits(const struct kdev_cdi_edits *e, struct kdev_err *err)
{
        int r;
        for (size_t i = 0; i < e->n_env; i++) {
                if ((r = kdev_cdi_check_env(e->env[i], err)) < 0)
                        return kdev_err_wrap(err, "env[%zu]", i);
        }
        for (size_t i = 0; i < e->n_device_nodes; i++) {
                if ((r = kdev_cdi_check_device_node(&e->device_nodes[i], err)) < 0)
                        return kdev_err_wrap(err, "deviceNodes[%zu]", i);
        }
        for (size_t i = 0; i < e->n_mounts; i++) {
                if ((r = kdev_cdi_check_mount(&e->mounts[i], err)) < 0)
                        return kdev_err_wrap(err, "mounts[%zu]", i);
        }
        for (size_t i = 0; i < e->n_hooks; i++) {
                if ((r = kdev_cdi_check_hook(&e->hooks[i], err)) < 0)
                        return kdev_err_wrap(err, "hooks[%zu]", i);
        }
        for (size_t i = 0; i < e->n_net_devices; i++) {
                const struct kdev_cdi_net_device *a = &e->net_devices[i];
                if (!a->host_interface_name || !a->host_interface_name[0] || !a->name ||
                    !a->name[0])
                        return kdev_err_set(err, EINVAL, "netDevices[%zu]: empty name", i);
                for (size_t j = 0; j < i; j++) {
                        const struct kdev_cdi_net_device *b = &e->net_devices[j];
                        if (strcmp(a->host_interface_name, b->host_interface_name) == 0 ||
                            strcmp(a->name, b->name) == 0)
                                return kdev_err_set(err, EINVAL,
                                                    "netDevices[%zu]: \"%s\" (\"%s\") duplicates netDevices[%zu]",
                                                    i, a->host_interface_name, a->name, j);
                }
        }
        return 0;
}

int kdev_cdi_spec_validate(const struct kdev_cdi_spec *spec, struct kdev_err *err)
{
        KDEV_CDI_LOCAL_ERR(err);
        int r;
        if (!spec)
                return kdev_err_set(err, EINVAL, "CDI spec: NULL");
        if ((r = kdev_cdi_validate_kind(spec->kind, err)) < 0)
                return r;
        if (spec->min_version && !kdev_cdi_known_version(spec->min_version))
                return kdev_err_set(err, EINVAL, "CDI spec \"%s\": unknown cdiVersion \"%s\"",
                                    spec->kind, spec->min_version);
        if ((r = check_annotations(&spec->annotations, err)) < 0)
                return kdev_err_wrap(err, "CDI spec \"%s\"", spec->kind);
        if ((r = check_edits(&spec->edits, err)) < 0)
                return kdev_err_wrap(err, "CDI spec \"%s\": containerEdits", spec->kind);
        if (spec->n_devices == 0)
                return kdev_err_set(err, EINVAL, "CDI spec \"%s\": no devices", spec->kind);
        for (size_t i = 0; i < spec->n_devices; i++) {
                const struct kdev_cdi_device *d = spec->devices[i];
                if ((r = kdev_cdi_validate_device_name(d->name, err)) < 0)
                        return kdev_err_wrap(err, "CDI spec \"%s\": devices[%zu]", spec->kind, i);
                for (size_t j = 0; j < i; j++) {
                        if (strcmp(spec->devices[j]->name, d->name) == 0)
                                return kdev_err_set(err, EINVAL,
                                                    "CDI spec \"%s\": devices[%zu] \"%s\": name used twice",
                                                    spec->kind, i, d->name);
                }
                if ((r = check_annotations(&d->annotations, err)) < 0 ||
                    (r = check_edits(&d->edits, err)) < 0)
                        return kdev_err_wrap(err, "CDI spec \"%s\": devices[%zu] \"%s\"", spec->kind,
                                             i, d->name);
                if (edits_empty(&d->edits))
                        return kdev_err_set(err, EINVAL,
                                            "CDI spec \"%s\": devices[%zu] \"%s\": no container edits",
                                            spec->kind, i, d->name);
        }
        return 0;
}

bool kdev_cdi_spec_equal(const struct kdev_cdi_spec *a, const struct kdev_cdi_spec *b)
{
        if (!a || !b)
                return a == b;
        json_t *ja = kdev_cdi_spec_json_raw(a);
        json_t *jb = kdev_cdi_spec_json_raw(b);
        bool eq = ja && jb && json_equal(ja, jb);
        json_decref(ja);
        json_decref(jb);
        return eq;
}
