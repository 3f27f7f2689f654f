/* CDI spec <-> JSON (jansson). Key order follows the Go CDI library's
 * json.Marshal of specs-go/config.go; parsing is strict like its loader. */
#include "cdi/cdi.h"
#include "cdi/cdi_internal.h"
#include "common/json.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- rendering ------------------------------------------------------------ */

struct render {
        bool nomem;
        const char *bad_utf8; /* first string that json_string refused */
};

static bool utf8_valid(const char *s)
{
        const unsigned char *p = (const unsigned char *)s;
        while (*p) {
                unsigned c = *p;
                size_t n;
                unsigned min;
                if (c < 0x80) {
                        p++;
                        continue;
                } else if ((c & 0xe0) == 0xc0) {
                        n = 1, min = 0x80, c &= 0x1f;
                } else if ((c & 0xf0) == 0xe0) {
                        n = 2, min = 0x800, c &= 0x0f;
                } else if ((c & 0xf8) == 0xf0) {
                        n = 3, min = 0x10000, c &= 0x07;
                } else {
                        return false;
                }
                for (size_t i = 1; i <= n; i++) {
                        if ((p[i] & 0xc0) != 0x80)
                                return false;
                        c = (c << 6) | (p[i] & 0x3f);
                }
                if (c < min || c > 0x10ffff || (c >= 0xd800 && c <= 0xdfff))
                        return false;
                p += n + 1;
        }
        return true;
}

static json_t *jstr(struct render *rd, const char *s)
{
        json_t *v = json_string(s);
        if (!v) {
                if (!utf8_valid(s)) {
                        if (!rd->bad_utf8)
                                rd->bad_utf8 = s;
                } else {
                        rd->nomem = true;
                }
        }
        return v;
}

static void set(struct render *rd, json_t *obj, const char *key, json_t *val)
{
        if (!val) {
                /* jstr already recorded why */
                if (!rd->bad_utf8)
                        rd->nomem = true;
                return;
        }
        if (!obj || json_object_set_new(obj, key, val) < 0)
                rd->nomem = true;
}

static void append(struct render *rd, json_t *arr, json_t *val)
{
        if (!val) {
                if (!rd->bad_utf8)
                        rd->nomem = true;
                return;
        }
        if (!arr || json_array_append_new(arr, val) < 0)
                rd->nomem = true;
}

static json_t *strv(struct render *rd, char *const *v, size_t n)
{
        json_t *a = json_array();
        for (size_t i = 0; i < n; i++)
                append(rd, a, jstr(rd, v[i]));
        return a;
}

static json_t *annotations(struct render *rd, const struct kdev_cdi_annotations *a)
{
        json_t *o = json_object();
        for (size_t i = 0; i < a->n; i++)
                set(rd, o, a->items[i].key, jstr(rd, a->items[i].value));
        return o;
}

static json_t *edits(struct render *rd, const struct kdev_cdi_edits *e)
{
        json_t *o = json_object();
        if (e->n_env)
                set(rd, o, "env", strv(rd, e->env, e->n_env));
        if (e->n_device_nodes) {
                json_t *a = json_array();
                for (size_t i = 0; i < e->n_device_nodes; i++) {
                        const struct kdev_cdi_device_node *n = &e->device_nodes[i];
                        json_t *d = json_object();
                        set(rd, d, "path", jstr(rd, n->path));
                        if (n->host_path)
                                set(rd, d, "hostPath", jstr(rd, n->host_path));
                        if (n->type)
                                set(rd, d, "type", jstr(rd, n->type));
                        if (n->has_major)
                                set(rd, d, "major", json_integer(n->major));
                        if (n->has_minor)
                                set(rd, d, "minor", json_integer(n->minor));
                        if (n->has_file_mode)
                                set(rd, d, "fileMode", json_integer(n->file_mode));
                        if (n->permissions)
                                set(rd, d, "permissions", jstr(rd, n->permissions));
                        if (n->has_uid)
                                set(rd, d, "uid", json_integer(n->uid));
                        if (n->has_gid)
                                set(rd, d, "gid", json_integer(n->gid));
                        append(rd, a, d);
                }
                set(rd, o, "deviceNodes", a);
        }
        if (e->n_net_devices) {
                json_t *a = json_array();
                for (size_t i = 0; i < e->n_net_devices; i++) {
                        json_t *d = json_object();
                        set(rd, d, "hostInterfaceName",
                            jstr(rd, e->net_devices[i].host_interface_name));
                        set(rd, d, "name", jstr(rd, e->net_devices[i].name));
                        append(rd, a, d);
                }
                set(rd, o, "netDevices", a);
        }
        if (e->n_hooks) {
                json_t *a = json_array();
                for (size_t i = 0; i < e->n_hooks; i++) {
                        const struct kdev_cdi_hook *h = &e->hooks[i];
                        json_t *d = json_object();
                        set(rd, d, "hookName", jstr(rd, h->hook_name));
                        set(rd, d, "path", jstr(rd, h->path));
                        if (h->n_args)
                                set(rd, d, "args", strv(rd, h->args, h->n_args));
                        if (h->n_env)
                                set(rd, d, "env", strv(rd, h->env, h->n_env));
                        if (h->has_timeout)
                                set(rd, d, "timeout", json_integer(h->timeout));
                        append(rd, a, d);
                }
                set(rd, o, "hooks", a);
        }
        if (e->n_mounts) {
                json_t *a = json_array();
                for (size_t i = 0; i < e->n_mounts; i++) {
                        const struct kdev_cdi_mount *m = &e->mounts[i];
                        json_t *d = json_object();
                        set(rd, d, "hostPath", jstr(rd, m->host_path));
                        set(rd, d, "containerPath", jstr(rd, m->container_path));
                        if (m->n_options)
                                set(rd, d, "options", strv(rd, m->options, m->n_options));
                        if (m->type)
                                set(rd, d, "type", jstr(rd, m->type));
                        append(rd, a, d);
                }
                set(rd, o, "mounts", a);
        }
        if (e->n_additional_gids) {
                json_t *a = json_array();
                for (size_t i = 0; i < e->n_additional_gids; i++)
                        append(rd, a, json_integer(e->additional_gids[i]));
                set(rd, o, "additionalGids", a);
        }
        return o;
}

static json_t *render(const struct kdev_cdi_spec *spec, struct kdev_err *err)
{
        struct render rd = { 0 };
        json_t *root = json_object();
        set(&rd, root, "cdiVersion", jstr(&rd, kdev_cdi_spec_version(spec)));
        set(&rd, root, "kind", jstr(&rd, spec->kind));
        if (spec->annotations.n)
                set(&rd, root, "annotations", annotations(&rd, &spec->annotations));
        json_t *devs = json_array();
        for (size_t i = 0; i < spec->n_devices; i++) {
                const struct kdev_cdi_device *d = spec->devices[i];
                json_t *o = json_object();
                set(&rd, o, "name", jstr(&rd, d->name));
                if (d->annotations.n)
                        set(&rd, o, "annotations", annotations(&rd, &d->annotations));
                set(&rd, o, "containerEdits", edits(&rd, &d->edits));
                append(&rd, devs, o);
        }
        set(&rd, root, "devices", devs);
        json_t *se = edits(&rd, &spec->edits);
        if (se && json_object_size(se) == 0)
                json_decref(se);
        else
                set(&rd, root, "containerEdits", se);
        if (rd.bad_utf8 || rd.nomem) {
                json_decref(root);
                if (rd.bad_utf8)
                        kdev_err_set(err, EINVAL, "CDI spec \"%s\": string \"%s\" is not valid UTF-8",
                                     spec->kind, rd.bad_utf8);
                else
                        kdev_err_set(err, ENOMEM, "out of memory");
                return NULL;
        }
        return root;
}

json_t *kdev_cdi_spec_json_raw(const struct kdev_cdi_spec *spec)
{
        return render(spec, NULL);
}

int kdev_cdi_spec_to_json(const struct kdev_cdi_spec *spec, json_t **out, struct kdev_err *err)
{
        KDEV_CDI_LOCAL_ERR(err);
        *out = NULL;
        int r = kdev_cdi_spec_validate(spec, err);
        if (r < 0)
                return r;
        json_t *root = render(spec, err);
        if (!root)
                return -err->code;
        *out = root;
        return 0;
}

int kdev_cdi_spec_format(const struct kdev_cdi_spec *spec, char **out, struct kdev_err *err)
{
        *out = NULL;
        json_t *root;
        int r = kdev_cdi_spec_to_json(spec, &root, err);
        if (r < 0)
                return r;
        char *text = json_dumps(root, JSON_INDENT(2));
        json_decref(root);
        size_t len = text ? strlen(text) : 0;
        char *with_nl = text ? realloc(text, len + 2) : NULL;
        if (!with_nl) {
                free(text);
                return kdev_err_set(err, ENOMEM, "out of memory");
        }
        with_nl[len] = '\n';
        with_nl[len + 1] = '\0';
        if (len + 1 > (size_t)0x7fffffff) {
                free(with_nl);
                return kdev_err_set(err, EFBIG, "CDI spec \"%s\": JSON text too large", spec->kind);
        }
        *out = with_nl;
        return (int)(len + 1);
}

/* ---- parsing -------------------------------------------------------------- */

#define PATH_MAX_LEN 256

/* Rejects keys of |obj| not in the NULL-terminated |known|. */
static int only_fields(const json_t *obj, const char *const *known, const char *where,
                       struct kdev_err *err)
{
        const char *key;
        json_t *val;
        json_object_foreach((json_t *)obj, key, val) {
                bool ok = false;
                for (size_t i = 0; known[i] && !ok; i++)
                        ok = strcmp(key, known[i]) == 0;
                if (!ok)
                        return kdev_err_set(err, EINVAL, "%s: unknown field \"%s\"", where, key);
        }
        return 0;
}

/* A field value; JSON null counts as absent (Go's decoder leaves the zero value). */
static json_t *field(const json_t *obj, const char *key)
{
        json_t *v = json_object_get(obj, key);
        return json_is_null(v) ? NULL : v;
}

static int want_string(const json_t *obj, const char *key, bool required, const char **out,
                       const char *where, struct kdev_err *err)
{
        json_t *v = field(obj, key);
        *out = NULL;
        if (!v) {
                if (required)
                        return kdev_err_set(err, EINVAL, "%s: missing required field \"%s\"", where,
                                            key);
                return 0;
        }
        if (!json_is_string(v))
                return kdev_err_set(err, EINVAL, "%s.%s: expected a string, got %s", where, key,
                                    kdev_json_kind(v));
        if (strlen(json_string_value(v)) != json_string_length(v))
                return kdev_err_set(err, EINVAL, "%s.%s: string holds a NUL byte", where, key);
        *out = json_string_value(v);
        return 0;
}

static int want_int(const json_t *obj, const char *key, json_int_t lo, json_int_t hi, bool *has,
                    json_int_t *out, const char *where, struct kdev_err *err)
{
        json_t *v = field(obj, key);
        *has = false;
        *out = 0;
        if (!v)
                return 0;
        if (!json_is_integer(v))
                return kdev_err_set(err, EINVAL, "%s.%s: expected an integer, got %s", where, key,
                                    kdev_json_kind(v));
        json_int_t x = json_integer_value(v);
        if (x < lo || x > hi)
                return kdev_err_set(err, EINVAL, "%s.%s: %lld out of range [%lld, %lld]", where, key,
                                    (long long)x, (long long)lo, (long long)hi);
        *has = true;
        *out = x;
        return 0;
}

/* A string array as a borrowed, malloc'ed vector (free only the vector). */
static int want_strv(const json_t *obj, const char *key, char ***out, size_t *n,
                     const char *where, struct kdev_err *err)
{
        json_t *v = field(obj, key);
        *out = NULL;
        *n = 0;
        if (!v)
                return 0;
        if (!json_is_array(v))
                return kdev_err_set(err, EINVAL, "%s.%s: expected an array, got %s", where, key,
                                    kdev_json_kind(v));
        size_t len = json_array_size(v);
        if (len == 0)
                return 0;
        char **vec = calloc(len, sizeof(*vec));
        if (!vec)
                return kdev_err_set(err, ENOMEM, "out of memory");
        for (size_t i = 0; i < len; i++) {
                json_t *s = json_array_get(v, i);
                if (!json_is_string(s)) {
                        free(vec);
                        return kdev_err_set(err, EINVAL, "%s.%s[%zu]: expected a string, got %s",
                                            where, key, i, kdev_json_kind(s));
                }
                if (strlen(json_string_value(s)) != json_string_length(s)) {
                        free(vec);
                        return kdev_err_set(err, EINVAL, "%s.%s[%zu]: string holds a NUL byte",
                                            where, key, i);
                }
                vec[i] = (char *)json_string_value(s);
        }
        *out = vec;
        *n = len;
        return 0;
}

static int want_array(const json_t *obj, const char *key, json_t **out, const char *where,
                      struct kdev_err *err)
{
        *out = field(obj, key);
        if (*out && !json_is_array(*out))
                return kdev_err_set(err, EINVAL, "%s.%s: expected an array, got %s", where, key,
                                    kdev_json_kind(*out));
        return 0;
}

static int want_object(const json_t *v, const char *where, struct kdev_err *err)
{
        if (!json_is_object(v))
                return kdev_err_set(err, EINVAL, "%s: expected an object, got %s", where,
                                    kdev_json_kind(v));
        return 0;
}

static int parse_node(const json_t *o, struct kdev_cdi_edits *e, const char *where,
                      struct kdev_err *err)
{
        static const char *const known[] = { "path", "hostPath", "type", "major", "minor",
                                             "fileMode", "permissions", "uid", "gid", NULL };
        struct kdev_cdi_device_node n = { 0 };
        json_int_t x;
        int r;
        if ((r = want_object(o, where, err)) < 0 || (r = only_fields(o, known, where, err)) < 0 ||
            (r = want_string(o, "path", true, (const char **)&n.path, where, err)) < 0 ||
            (r = want_string(o, "hostPath", false, (const char **)&n.host_path, where, err)) < 0 ||
            (r = want_string(o, "type", false, (const char **)&n.type, where, err)) < 0 ||
            (r = want_string(o, "permissions", false, (const char **)&n.permissions, where,
                             err)) < 0)
                return r;
        if ((r = want_int(o, "major", INT64_MIN, INT64_MAX, &n.has_major, &x, where, err)) < 0)
                return r;
        n.major = x;
        if ((r = want_int(o, "minor", INT64_MIN, INT64_MAX, &n.has_minor, &x, where, err)) < 0)
                return r;
        n.minor = x;
        if ((r = want_int(o, "fileMode", 0, UINT32_MAX, &n.has_file_mode, &x, where, err)) < 0)
                return r;
        n.file_mode = (uint32_t)x;
        if ((r = want_int(o, "uid", 0, UINT32_MAX, &n.has_uid, &x, where, err)) < 0)
                return r;
        n.uid = (uint32_t)x;
        if ((r = want_int(o, "gid", 0, UINT32_MAX, &n.has_gid, &x, where, err)) < 0)
                return r;
        n.gid = (uint32_t)x;
        if ((r = kdev_cdi_edits_add_device_node(e, &n, err)) < 0)
                return kdev_err_wrap(err, "%s", where);
        return 0;
}

static int parse_mount(const json_t *o, struct kdev_cdi_edits *e, const char *where,
                       struct kdev_err *err)
{
        static const char *const known[] = { "hostPath", "containerPath", "options", "type",
                                             NULL };
        struct kdev_cdi_mount m = { 0 };
        int r;
        if ((r = want_object(o, where, err)) < 0 || (r = only_fields(o, known, where, err)) < 0 ||
            (r = want_string(o, "hostPath", true, (const char **)&m.host_path, where, err)) < 0 ||
            (r = want_string(o, "containerPath", true, (const char **)&m.container_path, where,
                             err)) < 0 ||
            (r = want_string(o, "type", false, (const char **)&m.type, where, err)) < 0 ||
            (r = want_strv(o, "options", &m.options, &m.n_options, where, err)) < 0)
                return r;
        r = kdev_cdi_edits_add_mount(e, &m, err);
        free(m.options);
        return r < 0 ? kdev_err_wrap(err, "%s", where) : 0;
}

static int parse_hook(const json_t *o, struct kdev_cdi_edits *e, const char *where,
                      struct kdev_err *err)
{
        static const char *const known[] = { "hookName", "path", "args", "env", "timeout", NULL };
        struct kdev_cdi_hook h = { 0 };
        json_int_t x;
        int r;
        if ((r = want_object(o, where, err)) < 0 || (r = only_fields(o, known, where, err)) < 0 ||
            (r = want_string(o, "hookName", true, (const char **)&h.hook_name, where, err)) < 0 ||
            (r = want_string(o, "path", true, (const char **)&h.path, where, err)) < 0 ||
            (r = want_int(o, "timeout", INT32_MIN, INT32_MAX, &h.has_timeout, &x, where, err)) < 0)
                return r;
        h.timeout = (int)x;
        if ((r = want_strv(o, "args", &h.args, &h.n_args, where, err)) < 0)
                return r;
        if ((r = want_strv(o, "env", &h.env, &h.n_env, where, err)) == 0) {
                r = kdev_cdi_edits_add_hook(e, &h, err);
                if (r < 0)
                        kdev_err_wrap(err, "%s", where);
        }
        free(h.args);
        free(h.env);
        return r;
}

static int parse_edits(const json_t *o, struct kdev_cdi_edits *e, const char *where,
                       struct kdev_err *err)
{
        static const char *const known[] = { "env", "deviceNodes", "netDevices", "hooks",
                                             "mounts", "intelRdt", "additionalGids", NULL };
        char sub[PATH_MAX_LEN];
        json_t *arr;
        int r;
        if ((r = want_object(o, where, err)) < 0 || (r = only_fields(o, known, where, err)) < 0)
                return r;
        if (field(o, "intelRdt"))
                return kdev_err_set(err, EOPNOTSUPP, "%s.intelRdt: not supported", where);

        char **env;
        size_t n_env;
        if ((r = want_strv(o, "env", &env, &n_env, where, err)) < 0)
                return r;
        for (size_t i = 0; i < n_env && r == 0; i++) {
                r = kdev_cdi_edits_add_env(e, env[i], err);
                if (r < 0)
                        kdev_err_wrap(err, "%s.env[%zu]", where, i);
        }
        free(env);
        if (r < 0)
                return r;

        if ((r = want_array(o, "deviceNodes", &arr, where, err)) < 0)
                return r;
        for (size_t i = 0; i < json_array_size(arr); i++) {
                snprintf(sub, sizeof(sub), "%s.deviceNodes[%zu]", where, i);
                if ((r = parse_node(json_array_get(arr, i), e, sub, err)) < 0)
                        return r;
        }
        if ((r = want_array(o, "netDevices", &arr, where, err)) < 0)
                return r;
        for (size_t i = 0; i < json_array_size(arr); i++) {
                static const char *const nknown[] = { "hostInterfaceName", "name", NULL };
                const json_t *nd = json_array_get(arr, i);
                const char *host, *name;
                snprintf(sub, sizeof(sub), "%s.netDevices[%zu]", where, i);
                if ((r = want_object(nd, sub, err)) < 0 ||
                    (r = only_fields(nd, nknown, sub, err)) < 0 ||
                    (r = want_string(nd, "hostInterfaceName", true, &host, sub, err)) < 0 ||
                    (r = want_string(nd, "name", true, &name, sub, err)) < 0)
                        return r;
                if ((r = kdev_cdi_edits_add_net_device(e, host, name, err)) < 0)
                        return kdev_err_wrap(err, "%s", sub);
        }
        if ((r = want_array(o, "hooks", &arr, where, err)) < 0)
                return r;
        for (size_t i = 0; i < json_array_size(arr); i++) {
                snprintf(sub, sizeof(sub), "%s.hooks[%zu]", where, i);
                if ((r = parse_hook(json_array_get(arr, i), e, sub, err)) < 0)
                        return r;
        }
        if ((r = want_array(o, "mounts", &arr, where, err)) < 0)
                return r;
        for (size_t i = 0; i < json_array_size(arr); i++) {
                snprintf(sub, sizeof(sub), "%s.mounts[%zu]", where, i);
                if ((r = parse_mount(json_array_get(arr, i), e, sub, err)) < 0)
                        return r;
        }
        if ((r = want_array(o, "additionalGids", &arr, where, err)) < 0)
                return r;
        for (size_t i = 0; i < json_array_size(arr); i++) {
                json_t *g = json_array_get(arr, i);
                if (!json_is_integer(g) || json_integer_value(g) < 0 ||
                    json_integer_value(g) > (json_int_t)UINT32_MAX)
                {
                        char got[32];
                        if (json_is_integer(g))
                                snprintf(got, sizeof(got), "%lld",
                                         (long long)json_integer_value(g));
                        else
                                snprintf(got, sizeof(got), "%s", kdev_json_kind(g));
                        return kdev_err_set(err, EINVAL,
                                            "%s.additionalGids[%zu]: expected an integer in [0, "
                                            "4294967295], got %s",
                                            where, i, got);
                }
                if ((r = kdev_cdi_edits_add_additional_gid(e, (uint32_t)json_integer_value(g),
                                                           err)) < 0)
                        return r;
        }
        return 0;
}

static int parse_annotations(const json_t *obj, const char *where, struct kdev_err *err,
                             int (*setter)(void *, const char *, const char *, struct kdev_err *),
                             void *target)
{
        json_t *a = field(obj, "annotations");
        if (!a)
                return 0;
        if (!json_is_object(a))
                return kdev_err_set(err, EINVAL, "%s.annotations: expected an object, got %s",
                                    where, kdev_json_kind(a));
        const char *key;
        json_t *val;
        json_object_foreach(a, key, val) {
                if (!json_is_string(val))
                        return kdev_err_set(err, EINVAL,
                                            "%s.annotations.%s: expected a string, got %s", where,
                                            key, kdev_json_kind(val));
                if (strlen(json_string_value(val)) != json_string_length(val))
                        return kdev_err_set(err, EINVAL,
                                            "%s.annotations.%s: string holds a NUL byte", where,
                                            key);
                int r = setter(target, key, json_string_value(val), err);
                if (r < 0)
                        return kdev_err_wrap(err, "%s.annotations", where);
        }
        return 0;
}

static int set_spec_ann(void *t, const char *k, const char *v, struct kdev_err *err)
{
        return kdev_cdi_spec_set_annotation(t, k, v, err);
}

static int set_dev_ann(void *t, const char *k, const char *v, struct kdev_err *err)
{
        return kdev_cdi_device_set_annotation(t, k, v, err);
}

static int parse_spec(const json_t *root, struct kdev_cdi_spec **out, struct kdev_err *err)
{
        static const char *const known[] = { "cdiVersion", "kind", "annotations", "devices",
                                             "containerEdits", NULL };
        static const char *const dknown[] = { "name", "annotations", "containerEdits", NULL };
        const char *version, *kind;
        json_t *devs;
        int r;
        if ((r = want_object(root, "spec", err)) < 0 ||
            (r = only_fields(root, known, "spec", err)) < 0 ||
            (r = want_string(root, "cdiVersion", true, &version, "spec", err)) < 0 ||
            (r = want_string(root, "kind", true, &kind, "spec", err)) < 0)
                return r;
        if (!field(root, "devices"))
                return kdev_err_set(err, EINVAL, "spec: missing required field \"devices\"");
        if ((r = want_array(root, "devices", &devs, "spec", err)) < 0)
                return r;
        struct kdev_cdi_spec *spec = kdev_cdi_spec_new(kind, err);
        if (!spec)
                return kdev_err_wrap(err, "spec.kind");
        if ((r = kdev_cdi_spec_set_min_version(spec, version, err)) < 0) {
                kdev_err_wrap(err, "spec.cdiVersion");
                goto fail;
        }
        if ((r = parse_annotations(root, "spec", err, set_spec_ann, spec)) < 0)
                goto fail;
        for (size_t i = 0; i < json_array_size(devs); i++) {
                char where[PATH_MAX_LEN];
                const json_t *d = json_array_get(devs, i);
                const char *name;
                snprintf(where, sizeof(where), "devices[%zu]", i);
                if ((r = want_object(d, where, err)) < 0 ||
                    (r = only_fields(d, dknown, where, err)) < 0 ||
                    (r = want_string(d, "name", true, &name, where, err)) < 0)
                        goto fail;
                struct kdev_cdi_device *dev = kdev_cdi_spec_add_device(spec, name, err);
                if (!dev) {
                        r = kdev_err_wrap(err, "%s", where);
                        if (r == -EEXIST) { /* a duplicate name is invalid content */
                                err->code = EINVAL;
                                r = -EINVAL;
                        }
                        goto fail;
                }
                if ((r = parse_annotations(d, where, err, set_dev_ann, dev)) < 0)
                        goto fail;
                json_t *ce = field(d, "containerEdits");
                char sub[PATH_MAX_LEN];
                snprintf(sub, sizeof(sub), "devices[%zu].containerEdits", i);
                if (ce && (r = parse_edits(ce, &dev->edits, sub, err)) < 0)
                        goto fail;
        }
        json_t *ce = field(root, "containerEdits");
        if (ce && (r = parse_edits(ce, &spec->edits, "containerEdits", err)) < 0)
                goto fail;

        const char *why;
        const char *need = kdev_cdi_required_version(spec, &why);
        if (kdev_cdi_version_compare(spec->min_version, need) < 0) {
                r = kdev_err_set(err, EINVAL,
                                 "spec.cdiVersion: \"%s\" is lower than %s, which %s requires",
                                 version, need, why);
                goto fail;
        }
        if ((r = kdev_cdi_spec_validate(spec, err)) < 0)
                goto fail;
        *out = spec;
        return 0;
fail:
        kdev_cdi_spec_free(spec);
        return r;
}

int kdev_cdi_spec_from_json(const json_t *root, struct kdev_cdi_spec **out,
                            struct kdev_err *err)
{
        KDEV_CDI_LOCAL_ERR(err);
        *out = NULL;
        return parse_spec(root, out, err);
}
