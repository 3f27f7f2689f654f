/* NodeResourcesFit for extended resources (sched/fit.h). */
#include "sched/fit.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/resource_name.h"
#include "sched/objects.h"
#include "sched/sched_internal.h"

struct kdev_fit_node {
        json_t *alloc;     /* name -> int */
        json_t *requested; /* name -> int */
        json_t *dra;       /* name -> class */
};

/* KEP-5004's implicit extended resource name of a DeviceClass (API
 * resource/v1 ResourceDeviceClassPrefix). */
#define DEVICE_CLASS_PREFIX "deviceclass.resource.kubernetes.io/"

/* An extended resource name (core/v1 helper IsExtendedResourceName, as
 * kubelet checks it: common/resource_name.h), or KEP-5004's implicit name of
 * a DeviceClass, which pods request like one. */
static bool is_extended(const char *name)
{
        size_t p = strlen(DEVICE_CLASS_PREFIX);
        if (!strncmp(name, DEVICE_CLASS_PREFIX, p))
                return name[p] != 0 && !strchr(name + p, '/');
        return kdev_resource_name_check(name, NULL) == 0;
}

static json_int_t iget(const json_t *o, const char *k)
{
        return json_integer_value(json_object_get(o, k));
}

static int iset(json_t *o, const char *k, json_int_t v)
{
        return json_object_set_new(o, k, json_integer(v));
}

/* a + b for counts (>= 0), saturating at INT64_MAX: a pod asking for more
 * than that fits nowhere, and never wraps */
static json_int_t sat_add(json_int_t a, json_int_t b)
{
        return a > INT64_MAX - b ? INT64_MAX : a + b;
}

void kdev_fit_node_free(struct kdev_fit_node *node)
{
        if (!node)
                return;
        json_decref(node->alloc);
        json_decref(node->requested);
        json_decref(node->dra);
        free(node);
}

static int node_count(const json_t *v, const char *where, const char *name, int64_t *out,
                      struct kdev_err *err)
{
        struct kdev_qty q;
        struct kdev_err qe = {0};
        bool integer = false;
        if (kdev_qty_from_json(v, &q, &qe) < 0)
                return kdev_err_set(err, EINVAL, "%s[%s]: %s", where, name, qe.msg);
        if (kdev_qty_value(&q, out, &integer) < 0 || !integer || *out < 0)
                return kdev_err_set(err, EINVAL, "%s[%s]: must be a non-negative integer", where,
                                    name);
        return 0;
}

int kdev_fit_node_from_json(const json_t *obj, struct kdev_fit_node **out, struct kdev_err *err)
{
        *out = NULL;
        struct kdev_fit_node *n = calloc(1, sizeof(*n));
        if (!n || !(n->alloc = json_object()) || !(n->requested = json_object()) ||
            !(n->dra = json_object())) {
                kdev_fit_node_free(n);
                return kdev_err_set(err, ENOMEM, "out of memory");
        }
        const json_t *status = json_object_get(obj, "status");
        const json_t *res = json_object_get(obj, "resources");
        int rc = 0;
        if (json_is_object(status)) {
                const char *where = "status.allocatable";
                const json_t *alloc = json_object_get(status, "allocatable");
                if (!alloc) {
                        where = "status.capacity";
                        alloc = json_object_get(status, "capacity");
                }
                if (!json_is_object(alloc)) {
                        rc = kdev_err_set(err, EINVAL, "%s: must be an object", where);
                } else {
                        const char *k;
                        json_t *v;
                        json_object_foreach((json_t *)alloc, k, v)
                        {
                                int64_t c;
                                if (!is_extended(k))
                                        continue;
                                if ((rc = node_count(v, where, k, &c, err)) < 0)
                                        break;
                                iset(n->alloc, k, c);
                        }
                }
        } else if (json_is_array(res)) {
                size_t i;
                json_t *r;
                json_array_foreach(res, i, r)
                {
                        const char *name = json_string_value(json_object_get(r, "name"));
                        json_t *a = json_object_get(r, "allocatable");
                        json_t *u = json_object_get(r, "allocated");
                        if (!name) {
                                rc = kdev_err_set(err, EINVAL, "resources[%zu].name: must be a string",
                                                  i);
                                break;
                        }
                        if (!json_is_integer(a) || json_integer_value(a) < 0 ||
                            (u && (!json_is_integer(u) || json_integer_value(u) < 0))) {
                                rc = kdev_err_set(err, EINVAL,
                                                  "resources[%zu]: allocatable and allocated must be "
                                                  "non-negative integers",
                                                  i);
                                break;
                        }
                        iset(n->alloc, name, json_integer_value(a));
                        iset(n->requested, name, u ? json_integer_value(u) : 0);
                }
        } else {
                rc = kdev_err_set(err, EINVAL,
                                  "neither a Node (status.allocatable) nor a kdevctl kubelet state "
                                  "(resources)");
        }
        if (rc < 0) {
                kdev_fit_node_free(n);
                return rc;
        }
        *out = n;
        return 0;
}

int kdev_fit_node_add_class(struct kdev_fit_node *node, const json_t *obj, struct kdev_err *err)
{
        const char *kind = json_string_value(json_object_get(obj, "kind"));
        if (!kind || strcmp(kind, "DeviceClass"))
                return 1;
        const char *name =
                json_string_value(json_object_get(json_object_get(obj, "metadata"), "name"));
        if (!name || !*name)
                return kdev_err_set(err, EINVAL, "DeviceClass without metadata.name");
        char implicit[512];
        snprintf(implicit, sizeof(implicit), DEVICE_CLASS_PREFIX "%s", name);
        json_object_set_new(node->dra, implicit, json_string(name));
        const char *ext = json_string_value(
                json_object_get(json_object_get(obj, "spec"), "extendedResourceName"));
        if (ext && *ext)
                json_object_set_new(node->dra, ext, json_string(name));
        return 0;
}

json_t *kdev_fit_node_json(const struct kdev_fit_node *node)
{
        json_t *o = json_object();
        const char *k;
        json_t *v;
        json_object_foreach(node->alloc, k, v)
                json_object_set_new(o, k,
                                    json_pack("{s:I,s:I}", "allocatable", json_integer_value(v),
                                              "requested", iget(node->requested, k)));
        return o;
}

/* ---- pod requests ------------------------------------------------------ */

int kdev_sched_field_error(json_t *errors, const char *fmt, ...)
{
        char buf[1024];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(buf, sizeof(buf), fmt, ap);
        va_end(ap);
        json_array_append_new(errors, json_string(buf));
        return -EINVAL;
}

json_t *kdev_sched_sorted_keys(const json_t *obj)
{
        json_t *keys = json_array();
        const char *k;
        json_t *v;
        json_object_foreach((json_t *)obj, k, v) json_array_append_new(keys, json_string(k));
        size_t n = json_array_size(keys);
        /* insertion sort: a container has a handful of resources */
        for (size_t i = 1; i < n; i++)
                for (size_t j = i; j > 0; j--) {
                        json_t *a = json_array_get(keys, j - 1), *b = json_array_get(keys, j);
                        if (strcmp(json_string_value(a), json_string_value(b)) <= 0)
                                break;
                        json_incref(a);
                        json_array_set(keys, j - 1, b);
                        json_array_set_new(keys, j, a);
                }
        return keys;
}

/* Checks one extended resource quantity of a container; on success stores
 * its value. */
static bool check_qty(const json_t *v, const char *path, const char *name, json_t *errors,
                      struct kdev_qty *q)
{
        struct kdev_err qe = {0};
        char text[KDEV_QTY_TEXT_MAX];
        if (kdev_qty_from_json(v, q, &qe) < 0) {
                char raw[128];
                char *any = json_is_string(v) ? NULL : json_dumps(v, JSON_ENCODE_ANY | JSON_COMPACT);
                snprintf(raw, sizeof(raw), "%s",
                         json_is_string(v) ? json_string_value(v) : any ? any : "");
                free(any);
                kdev_sched_field_error(errors, "%s[%s]: Invalid value: \"%s\": %s", path, name, raw,
                                       qe.msg);
                return false;
        }
        bool ok = true;
        kdev_qty_format(q, text, sizeof(text));
        if (q->q.mantissa < 0) {
                kdev_sched_field_error(errors,
                                       "%s[%s]: Invalid value: \"%s\": must be greater than or "
                                       "equal to 0",
                                       path, name, text);
                ok = false;
        }
        int64_t value;
        bool integer = false;
        if (kdev_qty_value(q, &value, &integer) < 0) {
                kdev_sched_field_error(errors, "%s[%s]: Invalid value: \"%s\": out of the range "
                                               "kdev supports",
                                       path, name, text);
                return false;
        }
        if (!integer) {
                kdev_sched_field_error(errors, "%s[%s]: Invalid value: \"%s\": must be an integer",
                                       path, name, text);
                ok = false;
        }
        return ok;
}

static json_t *object_or_empty(const json_t *o, const char *key, const char *path,
                               json_t *errors)
{
        json_t *v = json_object_get(o, key);
        if (!v || json_is_null(v))
                return json_object();
        if (!json_is_object(v)) {
                kdev_sched_field_error(errors, "%s.%s: must be an object", path, key);
                return NULL;
        }
        return json_deep_copy(v);
}

/* One container's extended-resource requests into |out| (name -> int). */
static void container_requests(const json_t *c, const char *path, json_t *errors, json_t *out)
{
        char rpath[300], lpath[300], rs[256];
        snprintf(rs, sizeof(rs), "%s.resources", path);
        snprintf(lpath, sizeof(lpath), "%s.limits", rs);
        snprintf(rpath, sizeof(rpath), "%s.requests", rs);
        const json_t *res = json_object_get(c, "resources");
        if (res && !json_is_null(res) && !json_is_object(res)) {
                kdev_sched_field_error(errors, "%s: must be an object", rs);
                return;
        }
        json_t *limits = object_or_empty(res, "limits", rs, errors);
        json_t *requests = object_or_empty(res, "requests", rs, errors);
        if (!limits || !requests) {
                json_decref(limits);
                json_decref(requests);
                return;
        }
        /* core/v1 defaulting: a limit without a request sets the request */
        const char *k;
        json_t *v;
        json_object_foreach(limits, k, v) if (!json_object_get(requests, k))
                json_object_set(requests, k, v);

        json_t *keys = kdev_sched_sorted_keys(limits);
        size_t i;
        json_t *kv;
        json_t *lim_q = json_object(); /* name -> canonical text of valid limits */
        json_array_foreach(keys, i, kv)
        {
                const char *name = json_string_value(kv);
                struct kdev_err ne = {0};
                if (!strchr(name, '/') || (strstr(name, "kubernetes.io/") && !is_extended(name)))
                        continue; /* native: not modelled */
                if (!is_extended(name) && kdev_resource_name_check(name, &ne) < 0) {
                        kdev_sched_field_error(errors, "%s[%s]: Invalid value: \"%s\": %s", lpath,
                                               name, name, ne.msg);
                        continue;
                }
                struct kdev_qty q;
                if (check_qty(json_object_get(limits, name), lpath, name, errors, &q)) {
                        char t[KDEV_QTY_TEXT_MAX];
                        json_object_set_new(lim_q, name, json_string(kdev_qty_format(&q, t, sizeof(t))));
                }
        }
        json_decref(keys);
        keys = kdev_sched_sorted_keys(requests);
        json_array_foreach(keys, i, kv)
        {
                const char *name = json_string_value(kv);
                if (!strchr(name, '/') || (strstr(name, "kubernetes.io/") && !is_extended(name)))
                        continue;
                struct kdev_err ne = {0};
                if (!is_extended(name) && kdev_resource_name_check(name, &ne) < 0) {
                        kdev_sched_field_error(errors, "%s[%s]: Invalid value: \"%s\": %s", rpath,
                                               name, name, ne.msg);
                        continue;
                }
                struct kdev_qty q, l;
                bool ok = check_qty(json_object_get(requests, name), rpath, name, errors, &q);
                json_t *lv = json_object_get(limits, name);
                char qt[KDEV_QTY_TEXT_MAX], lt[KDEV_QTY_TEXT_MAX];
                if (lv) {
                        if (kdev_qty_from_json(lv, &l, NULL) == 0 && ok &&
                            kdev_qty_cmp(&q, &l) != 0) {
                                kdev_sched_field_error(
                                        errors,
                                        "%s: Invalid value: \"%s\": must be equal to %s limit of %s",
                                        rpath, kdev_qty_format(&q, qt, sizeof(qt)), name,
                                        kdev_qty_format(&l, lt, sizeof(lt)));
                                ok = false;
                        }
                } else {
                        kdev_sched_field_error(errors,
                                               "%s: Required value: Limit must be set for non "
                                               "overcommitable resources",
                                               lpath);
                        ok = false;
                }
                int64_t n = 0;
                if (ok && kdev_qty_value(&q, &n, NULL) == 0 && n > 0)
                        iset(out, name, n);
        }
        json_decref(keys);
        json_decref(lim_q);
        json_decref(limits);
        json_decref(requests);
}

static void list_add(json_t *dst, const json_t *src)
{
        const char *k;
        json_t *v;
        json_object_foreach((json_t *)src, k, v) iset(dst, k, sat_add(iget(dst, k), json_integer_value(v)));
}

static void list_max(json_t *dst, const json_t *src)
{
        const char *k;
        json_t *v;
        json_object_foreach((json_t *)src, k, v) if (json_integer_value(v) > iget(dst, k))
                iset(dst, k, json_integer_value(v));
}

int kdev_fit_pod_requests(const json_t *pod, json_t **requests, json_t **errors)
{
        *requests = NULL;
        json_t *errs = json_array();
        json_t *reqs = json_object();
        const json_t *spec = json_object_get(pod, "spec");
        const json_t *ctrs = json_object_get(spec, "containers");
        const json_t *inits = json_object_get(spec, "initContainers");
        if (!json_is_object(spec))
                kdev_sched_field_error(errs, "spec: must be an object");
        else if (!json_is_array(ctrs))
                kdev_sched_field_error(errs, "spec.containers: must be an array");
        else if (inits && !json_is_null(inits) && !json_is_array(inits))
                kdev_sched_field_error(errs, "spec.initContainers: must be an array");
        if (json_array_size(errs)) {
                json_decref(reqs);
                *errors = errs;
                return -EINVAL;
        }
        size_t i;
        json_t *c;
        char path[128];
        json_array_foreach(ctrs, i, c) if (!json_is_object(c))
                kdev_sched_field_error(errs, "spec.containers[%zu]: must be an object", i);
        json_array_foreach(inits, i, c) if (!json_is_object(c))
                kdev_sched_field_error(errs, "spec.initContainers[%zu]: must be an object", i);
        json_array_foreach(ctrs, i, c)
        {
                json_t *one = json_object();
                snprintf(path, sizeof(path), "spec.containers[%zu]", i);
                container_requests(c, path, errs, one);
                list_add(reqs, one);
                json_decref(one);
        }
        /* KEP-753: sidecars run beside everything after them */
        json_t *sidecars = json_object(), *init_max = json_object();
        json_array_foreach(inits, i, c)
        {
                json_t *one = json_object();
                snprintf(path, sizeof(path), "spec.initContainers[%zu]", i);
                container_requests(c, path, errs, one);
                const char *policy = json_string_value(json_object_get(c, "restartPolicy"));
                if (policy && !strcmp(policy, "Always")) {
                        list_add(reqs, one);
                        list_add(sidecars, one);
                        list_max(init_max, sidecars);
                } else {
                        list_add(one, sidecars);
                        list_max(init_max, one);
                }
                json_decref(one);
        }
        list_max(reqs, init_max);
        json_decref(sidecars);
        json_decref(init_max);
        /* RuntimeClass overhead (spec.overhead) counts toward the pod */
        const json_t *overhead = json_object_get(spec, "overhead");
        if (json_is_object(overhead)) {
                json_t *one = json_object();
                json_t *keys = kdev_sched_sorted_keys(overhead);
                json_t *kv;
                json_array_foreach(keys, i, kv)
                {
                        const char *name = json_string_value(kv);
                        if (!is_extended(name))
                                continue;
                        struct kdev_qty q;
                        int64_t n;
                        if (check_qty(json_object_get(overhead, name), "spec.overhead", name, errs,
                                      &q) &&
                            kdev_qty_value(&q, &n, NULL) == 0 && n > 0)
                                iset(one, name, n);
                }
                json_decref(keys);
                list_add(reqs, one);
                json_decref(one);
        }
        if (json_array_size(errs)) {
                json_decref(reqs);
                *errors = errs;
                return -EINVAL;
        }
        json_decref(errs);
        *errors = NULL;
        *requests = reqs;
        return 0;
}

char *kdev_sched_invalid_message(const char *kind, const json_t *obj, const json_t *errors)
{
        const char *name =
                json_string_value(json_object_get(json_object_get(obj, "metadata"), "name"));
        size_t n = json_array_size(errors);
        size_t len = 64 + strlen(kind) + (name ? strlen(name) : 0);
        for (size_t i = 0; i < n; i++)
                len += strlen(json_string_value(json_array_get(errors, i))) + 2;
        char *s = malloc(len);
        if (!s)
                return NULL;
        int o = snprintf(s, len, "%s \"%s\" is invalid: %s", kind, name ? name : "",
                         n > 1 ? "[" : "");
        for (size_t i = 0; i < n; i++)
                o += snprintf(s + o, len - (size_t)o, "%s%s", i ? ", " : "",
                              json_string_value(json_array_get(errors, i)));
        snprintf(s + o, len - (size_t)o, "%s", n > 1 ? "]" : "");
        return s;
}

json_t *kdev_fit_pod(struct kdev_fit_node *node, const json_t *pod)
{
        char ref[512];
        json_t *out = json_object();
        json_object_set_new(out, "pod", json_string(kdev_object_ref(pod, ref, sizeof(ref))));
        json_t *claims = json_array();
        const json_t *rcs = json_object_get(json_object_get(pod, "spec"), "resourceClaims");
        size_t i;
        json_t *rc;
        json_array_foreach(rcs, i, rc)
        {
                const char *n = json_string_value(json_object_get(rc, "name"));
                json_array_append_new(claims, json_string(n ? n : ""));
        }
        json_t *reqs = NULL, *errors = NULL;
        if (kdev_fit_pod_requests(pod, &reqs, &errors) < 0) {
                char *msg = kdev_sched_invalid_message("Pod", pod, errors);
                json_object_set_new(out, "fits", json_false());
                json_object_set_new(out, "status", json_string("Invalid"));
                json_object_set_new(out, "message", json_string(msg ? msg : ""));
                free(msg);
                json_object_set_new(out, "errors", errors);
                json_object_set_new(out, "reasons", json_array());
                json_object_set_new(out, "requests", json_object());
                json_object_set_new(out, "delegated", json_array());
                json_object_set_new(out, "claims", claims);
                return out;
        }
        json_t *reasons = json_array(), *delegated = json_array();
        bool unresolvable = false;
        json_t *keys = kdev_sched_sorted_keys(reqs);
        json_t *kv;
        json_array_foreach(keys, i, kv)
        {
                const char *name = json_string_value(kv);
                json_int_t want = iget(reqs, name);
                json_int_t alloc = iget(node->alloc, name);
                if (alloc == 0 && json_object_get(node->dra, name)) {
                        json_array_append_new(delegated, json_string(name));
                        continue;
                }
                json_int_t used = iget(node->requested, name);
                if (want > alloc - (used < alloc ? used : alloc)) {
                        char line[600];
                        snprintf(line, sizeof(line), "Insufficient %s", name);
                        json_array_append_new(reasons, json_string(line));
                        if (want > alloc)
                                unresolvable = true;
                }
        }
        bool fits = json_array_size(reasons) == 0;
        if (fits) {
                json_array_foreach(keys, i, kv)
                {
                        const char *name = json_string_value(kv);
                        if (json_object_get(node->alloc, name) &&
                            !(iget(node->alloc, name) == 0 && json_object_get(node->dra, name)))
                                iset(node->requested, name,
                                     sat_add(iget(node->requested, name), iget(reqs, name)));
                }
        }
        json_decref(keys);
        char msg[2048] = "";
        size_t o = 0;
        json_array_foreach(reasons, i, kv) o +=
                (size_t)snprintf(msg + o, sizeof(msg) - o, "%s%s", i ? ", " : "",
                                 json_string_value(kv));
        json_object_set_new(out, "fits", json_boolean(fits));
        json_object_set_new(out, "status",
                            json_string(fits ? "Success"
                                        : unresolvable ? "UnschedulableAndUnresolvable"
                                                       : "Unschedulable"));
        json_object_set_new(out, "message", json_string(msg));
        json_object_set_new(out, "errors", json_array());
        json_object_set_new(out, "reasons", reasons);
        json_object_set_new(out, "requests", reqs);
        json_object_set_new(out, "delegated", delegated);
        json_object_set_new(out, "claims", claims);
        return out;
}
