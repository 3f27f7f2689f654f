/* ResourceQuota admission over extended resources and device classes
 * (sched/quota.h). */
#include "sched/quota.h"

#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/resource_name.h"
#include "sched/fit.h"
#include "sched/objects.h"
#include "sched/sched_internal.h"

#define CLAIM_COUNT "count/resourceclaims.resource.k8s.io"
#define CLASS_DEVICES_SUFFIX ".deviceclass.resource.k8s.io/devices"
#define CLASS_REQUESTS_PREFIX "requests.deviceclass.resource.kubernetes.io/"
/* resource/v1 AllocationResultsMaxSize: allocationMode All's worst case */
#define ALLOCATION_RESULTS_MAX 32

struct quota {
        char *name, *ns;
        json_t *hard; /* key -> quantity text */
        json_t *used; /* key -> quantity text; NULL: status unknown for missing keys */
        bool has_status;
};

struct kdev_quota_set {
        struct quota *q;
        size_t n;
};

struct kdev_quota_set *kdev_quota_set_new(void)
{
        return calloc(1, sizeof(struct kdev_quota_set));
}

void kdev_quota_set_free(struct kdev_quota_set *set)
{
        if (!set)
                return;
        for (size_t i = 0; i < set->n; i++) {
                free(set->q[i].name);
                free(set->q[i].ns);
                json_decref(set->q[i].hard);
                json_decref(set->q[i].used);
        }
        free(set->q);
        free(set);
}

/* core/helper: IsStandardResourceName and IsStandardQuotaResourceName
 * (hugepages-* and requests.hugepages-* are both) */
static const char *const standard_quota[] = {
        "cpu", "memory", "ephemeral-storage", "requests.cpu", "requests.memory",
        "requests.storage", "requests.ephemeral-storage", "limits.cpu", "limits.memory",
        "limits.ephemeral-storage", "pods", "services", "replicationcontrollers", "resourcequotas",
        "secrets", "configmaps", "persistentvolumeclaims", "services.nodeports",
        "services.loadbalancers", NULL};
static const char *const integer_names[] = {
        "pods", "services", "replicationcontrollers", "resourcequotas", "secrets", "configmaps",
        "persistentvolumeclaims", "services.nodeports", "services.loadbalancers", NULL};

static bool in(const char *const *list, const char *s)
{
        for (; *list; list++)
                if (!strcmp(*list, s))
                        return true;
        return false;
}

static bool is_hugepages(const char *k)
{
        return !strncmp(k, "hugepages-", 10) || !strncmp(k, "requests.hugepages-", 19) ||
               !strncmp(k, "limits.hugepages-", 17);
}

/* core/helper IsExtendedResourceName: not native (no '/' or in the
 * kubernetes.io domain), not requests.-prefixed. */
static bool k8s_extended(const char *k)
{
        return strchr(k, '/') && !strstr(k, "kubernetes.io/") && strncmp(k, "requests.", 9);
}

static int validate(const json_t *obj, const char *name, const json_t *hard, json_t *warnings,
                    struct kdev_err *err)
{
        json_t *errs = json_array();
        json_t *keys = kdev_sched_sorted_keys(hard);
        size_t i;
        json_t *kv;
        json_array_foreach(keys, i, kv)
        {
                const char *k = json_string_value(kv);
                if (!strchr(k, '/') && !in(standard_quota, k) && !is_hugepages(k)) {
                        kdev_sched_field_error(errs,
                                               "spec.hard[%s]: Invalid value: \"%s\": must be a "
                                               "standard resource type or fully qualified",
                                               k, k);
                        kdev_sched_field_error(errs,
                                               "spec.hard[%s]: Invalid value: \"%s\": must be a "
                                               "standard resource for quota",
                                               k, k);
                        continue;
                }
                struct kdev_qty q;
                struct kdev_err qe = {0};
                char t[KDEV_QTY_TEXT_MAX];
                if (kdev_qty_from_json(json_object_get(hard, k), &q, &qe) < 0) {
                        kdev_sched_field_error(errs, "spec.hard[%s]: %s", k, qe.msg);
                        continue;
                }
                kdev_qty_format(&q, t, sizeof(t));
                if (q.q.mantissa < 0)
                        kdev_sched_field_error(errs,
                                               "spec.hard[%s]: Invalid value: \"%s\": must be "
                                               "greater than or equal to 0",
                                               k, t);
                int64_t v;
                bool integer = true;
                if ((in(integer_names, k) || k8s_extended(k)) &&
                    (kdev_qty_value(&q, &v, &integer) < 0 || !integer))
                        kdev_sched_field_error(errs,
                                               "spec.hard[%s]: Invalid value: \"%s\": must be an "
                                               "integer",
                                               k, t);
                const char *bare = !strncmp(k, "limits.", 7) ? k + 7 : k;
                if (warnings && kdev_resource_name_check(bare, NULL) == 0 &&
                    !strstr(k, CLASS_DEVICES_SUFFIX) && strncmp(k, "count/", 6)) {
                        char line[1024];
                        snprintf(line, sizeof(line),
                                 "ResourceQuota \"%s\": spec.hard[%s] is never charged: quota "
                                 "counts extended resources only as requests.%s",
                                 name, k, bare);
                        json_array_append_new(warnings, json_string(line));
                }
        }
        json_decref(keys);
        int rc = 0;
        if (json_array_size(errs)) {
                char *msg = kdev_sched_invalid_message("ResourceQuota", obj, errs);
                rc = kdev_err_set(err, EINVAL, "%s", msg ? msg : "invalid ResourceQuota");
                free(msg);
        }
        json_decref(errs);
        return rc;
}

/* key -> canonical quantity text, from a ResourceList (values checked). */
static json_t *qty_list(const json_t *list)
{
        json_t *o = json_object();
        const char *k;
        json_t *v;
        json_object_foreach((json_t *)list, k, v)
        {
                struct kdev_qty q;
                char t[KDEV_QTY_TEXT_MAX];
                if (kdev_qty_from_json(v, &q, NULL) == 0)
                        json_object_set_new(o, k, json_string(kdev_qty_format(&q, t, sizeof(t))));
        }
        return o;
}

int kdev_quota_set_add(struct kdev_quota_set *set, const json_t *obj, json_t *warnings,
                       struct kdev_err *err)
{
        const json_t *md = json_object_get(obj, "metadata");
        const char *name = json_string_value(json_object_get(md, "name"));
        const char *ns = json_string_value(json_object_get(md, "namespace"));
        const json_t *spec = json_object_get(obj, "spec");
        const json_t *status = json_object_get(obj, "status");
        const char *kind = json_string_value(json_object_get(obj, "kind"));
        if (kind && strcmp(kind, "ResourceQuota"))
                return kdev_err_set(err, EINVAL, "%s \"%s\" is not a ResourceQuota", kind,
                                    name ? name : "");
        if (!name || !*name)
                return kdev_err_set(err, EINVAL, "ResourceQuota without metadata.name");
        const json_t *scopes = json_object_get(spec, "scopes");
        if (json_array_size(scopes) || json_object_get(spec, "scopeSelector"))
                return kdev_err_set(err, ENOTSUP,
                                    "ResourceQuota \"%s\": spec.scopes and spec.scopeSelector are "
                                    "not implemented",
                                    name);
        const json_t *hard = json_object_get(spec, "hard");
        if (hard && !json_is_object(hard))
                return kdev_err_set(err, EINVAL, "ResourceQuota \"%s\": spec.hard: must be an object",
                                    name);
        json_t *empty = json_object();
        int rc = validate(obj, name, hard ? hard : empty, warnings, err);
        json_decref(empty);
        if (rc < 0)
                return rc;
        struct quota *nq = realloc(set->q, (set->n + 1) * sizeof(*nq));
        if (!nq)
                return kdev_err_set(err, ENOMEM, "out of memory");
        set->q = nq;
        struct quota *q = &set->q[set->n];
        memset(q, 0, sizeof(*q));
        q->name = strdup(name);
        q->ns = strdup(ns && *ns ? ns : "default");
        const json_t *shard = json_object_get(status, "hard");
        q->has_status = json_is_object(status);
        if (json_object_size(shard))
                q->hard = qty_list(shard);
        else
                q->hard = qty_list(hard);
        if (q->has_status) {
                q->used = qty_list(json_object_get(status, "used"));
        } else {
                q->used = json_object();
                const char *k;
                json_t *v;
                json_object_foreach(q->hard, k, v) json_object_set_new(q->used, k, json_string("0"));
        }
        if (!q->name || !q->ns || !q->hard || !q->used) {
                free(q->name);
                free(q->ns);
                json_decref(q->hard);
                json_decref(q->used);
                return kdev_err_set(err, ENOMEM, "out of memory");
        }
        set->n++;
        return 0;
}

static void charge(json_t *usage, const char *key, int64_t n)
{
        json_int_t have = json_integer_value(json_object_get(usage, key));
        json_object_set_new(usage, key, json_integer(have > INT64_MAX - n ? INT64_MAX : have + n));
}

static int64_t mode_count(const json_t *r)
{
        const char *mode = json_string_value(json_object_get(r, "allocationMode"));
        const json_t *count = json_object_get(r, "count");
        if (!mode || !strcmp(mode, "ExactCount")) {
                /* validation wants count >= 1; kdev does not validate claims and
                 * counts a negative or non-integer count as 0 */
                json_int_t n = count ? json_integer_value(count) : 1;
                return n > 0 ? n : 0;
        }
        if (!strcmp(mode, "All"))
                return ALLOCATION_RESULTS_MAX;
        return 0; /* an unknown mode counts nothing */
}

static void class_charge(json_t *usage, const char *cls, int64_t n)
{
        char key[512];
        snprintf(key, sizeof(key), "%s" CLASS_DEVICES_SUFFIX, cls);
        charge(usage, key, n);
        if (n > 0) {
                snprintf(key, sizeof(key), CLASS_REQUESTS_PREFIX "%s", cls);
                charge(usage, key, n);
        }
}

static json_t *claim_usage(const json_t *claim)
{
        json_t *usage = json_object();
        charge(usage, CLAIM_COUNT, 1);
        const json_t *reqs = json_object_get(json_object_get(json_object_get(claim, "spec"), "devices"),
                                             "requests");
        size_t i;
        json_t *r;
        json_array_foreach(reqs, i, r)
        {
                const json_t *fa = json_object_get(r, "firstAvailable");
                if (json_array_size(fa)) {
                        json_t *most = json_object();
                        size_t j;
                        json_t *s;
                        json_array_foreach(fa, j, s)
                        {
                                const char *cls =
                                        json_string_value(json_object_get(s, "deviceClassName"));
                                int64_t n = mode_count(s);
                                if (cls && n > json_integer_value(json_object_get(most, cls)))
                                        json_object_set_new(most, cls, json_integer(n));
                                else if (cls && !json_object_get(most, cls))
                                        json_object_set_new(most, cls, json_integer(0));
                        }
                        const char *cls;
                        json_t *v;
                        json_object_foreach(most, cls, v) class_charge(usage, cls,
                                                                       json_integer_value(v));
                        json_decref(most);
                        continue;
                }
                const json_t *ex = json_object_get(r, "exactly");
                const json_t *src = ex ? ex : r; /* v1 nests it; v1beta1 does not */
                const char *cls = json_string_value(json_object_get(src, "deviceClassName"));
                if (cls)
                        class_charge(usage, cls, mode_count(src));
        }
        return usage;
}

static bool tracked(const char *kind, const char *k)
{
        if (!strcmp(kind, "Pod"))
                return !strcmp(k, "pods") || !strcmp(k, "count/pods") ||
                       (!strncmp(k, "requests.", 9) && kdev_resource_name_check(k + 9, NULL) == 0 &&
                        strncmp(k, CLASS_REQUESTS_PREFIX, strlen(CLASS_REQUESTS_PREFIX)));
        size_t n = strlen(k), s = strlen(CLASS_DEVICES_SUFFIX);
        return !strcmp(k, CLAIM_COUNT) || (n > s && !strcmp(k + n - s, CLASS_DEVICES_SUFFIX)) ||
               !strncmp(k, CLASS_REQUESTS_PREFIX, strlen(CLASS_REQUESTS_PREFIX));
}

static int qcmp_text(const char *a, const char *b, int *out)
{
        struct kdev_qty x, y;
        json_t *ja = json_string(a), *jb = json_string(b);
        int rc = (kdev_qty_from_json(ja, &x, NULL) < 0 || kdev_qty_from_json(jb, &y, NULL) < 0)
                         ? -EINVAL
                         : 0;
        json_decref(ja);
        json_decref(jb);
        if (rc == 0)
                *out = kdev_qty_cmp(&x, &y);
        return rc;
}

static char *qadd_text(const char *a, const char *b, char *buf, size_t size)
{
        struct kdev_qty x, y;
        json_t *ja = json_string(a), *jb = json_string(b);
        kdev_qty_from_json(ja, &x, NULL);
        kdev_qty_from_json(jb, &y, NULL);
        json_decref(ja);
        json_decref(jb);
        kdev_qty_add(&x, &y);
        return kdev_qty_format(&x, buf, size);
}

static void pretty(char *buf, size_t size, const json_t *list, const json_t *keys)
{
        size_t o = 0, i;
        json_t *kv;
        buf[0] = 0;
        json_array_foreach(keys, i, kv)
        {
                const char *k = json_string_value(kv);
                const char *v = json_string_value(json_object_get(list, k));
                if (!v)
                        continue;
                int w = snprintf(buf + o, size - o, "%s%s=%s", o ? "," : "", k, v);
                if (w < 0 || (size_t)w >= size - o)
                        break;
                o += (size_t)w;
        }
}

static int cmp_quota(const void *a, const void *b)
{
        return strcmp((*(const struct quota *const *)a)->name, (*(const struct quota *const *)b)->name);
}

json_t *kdev_quota_admit(struct kdev_quota_set *set, const json_t *obj)
{
        char ref[512];
        const char *kind = json_string_value(json_object_get(obj, "kind"));
        json_t *out = json_object();
        json_object_set_new(out, "kind", json_string(kind ? kind : ""));
        json_object_set_new(out, "object", json_string(kdev_object_ref(obj, ref, sizeof(ref))));
        const char *name = json_string_value(json_object_get(json_object_get(obj, "metadata"), "name"));
        const char *resource;
        json_t *usage; /* key -> int */
        if (kind && !strcmp(kind, "Pod")) {
                resource = "pods";
                json_t *reqs = NULL, *errors = NULL;
                if (kdev_fit_pod_requests(obj, &reqs, &errors) < 0) {
                        char *msg = kdev_sched_invalid_message("Pod", obj, errors);
                        json_decref(errors);
                        json_object_set_new(out, "allowed", json_false());
                        json_object_set_new(out, "message", json_string(msg ? msg : ""));
                        json_object_set_new(out, "usage", json_object());
                        free(msg);
                        return out;
                }
                usage = json_object();
                const char *phase = json_string_value(
                        json_object_get(json_object_get(obj, "status"), "phase"));
                if (!phase || (strcmp(phase, "Succeeded") && strcmp(phase, "Failed"))) {
                        charge(usage, "pods", 1);
                        charge(usage, "count/pods", 1);
                        const char *k;
                        json_t *v;
                        json_object_foreach(reqs, k, v)
                        {
                                char key[512];
                                snprintf(key, sizeof(key), "requests.%s", k);
                                charge(usage, key, json_integer_value(v));
                        }
                }
                json_decref(reqs);
        } else if (kind && !strcmp(kind, "ResourceClaim")) {
                resource = "resourceclaims.resource.k8s.io";
                usage = claim_usage(obj);
        } else {
                char msg[256];
                snprintf(msg, sizeof(msg), "kind %s is not counted by kdev's quota check",
                         kind ? kind : "(none)");
                json_object_set_new(out, "allowed", json_true());
                json_object_set_new(out, "message", json_string(msg));
                json_object_set_new(out, "usage", json_object());
                return out;
        }
        json_t *usage_text = json_object();
        const char *k;
        json_t *v;
        json_object_foreach(usage, k, v)
        {
                char t[KDEV_QTY_TEXT_MAX];
                struct kdev_qty q = kdev_qty_int(json_integer_value(v));
                json_object_set_new(usage_text, k, json_string(kdev_qty_format(&q, t, sizeof(t))));
        }
        json_decref(usage);
        json_object_set_new(out, "usage", usage_text);

        char ns[512];
        snprintf(ns, sizeof(ns), "%s", ref);
        *strchr(ns, '/') = 0;
        struct quota **order = calloc(set->n + 1, sizeof(*order));
        size_t n = 0;
        for (size_t i = 0; i < set->n; i++)
                if (!strcmp(set->q[i].ns, ns))
                        order[n++] = &set->q[i];
        qsort(order, n, sizeof(*order), cmp_quota);
        char msg[4096] = "";
        const char *refused = NULL;
        for (size_t i = 0; i < n && !refused; i++) {
                struct quota *q = order[i];
                json_t *keys = kdev_sched_sorted_keys(q->hard), *kv;
                json_t *track = json_array(), *missing = json_array(), *exceeded = json_array();
                json_t *req = json_object();
                size_t j;
                json_array_foreach(keys, j, kv)
                {
                        const char *key = json_string_value(kv);
                        if (!tracked(kind, key))
                                continue;
                        json_array_append(track, kv);
                        if (!json_object_get(q->used, key))
                                json_array_append(missing, kv);
                        const char *r = json_string_value(json_object_get(usage_text, key));
                        if (r && strcmp(r, "0"))
                                json_object_set_new(req, key, json_string(r));
                }
                if (json_array_size(missing)) {
                        char list[2048] = "";
                        size_t o = 0;
                        json_array_foreach(track, j, kv) o += (size_t)snprintf(
                                list + o, sizeof(list) - o, "%s%s", j ? "," : "", json_string_value(kv));
                        snprintf(msg, sizeof(msg),
                                 "%s \"%s\" is forbidden: status unknown for quota: %s, resources: %s",
                                 resource, name ? name : "", q->name, list);
                        refused = q->name;
                }
                json_array_foreach(keys, j, kv)
                {
                        const char *key = json_string_value(kv);
                        const char *r = json_string_value(json_object_get(req, key));
                        if (refused || !r)
                                continue;
                        const char *u = json_string_value(json_object_get(q->used, key));
                        char sum[KDEV_QTY_TEXT_MAX];
                        int c = 0;
                        qadd_text(u ? u : "0", r, sum, sizeof(sum));
                        if (qcmp_text(sum, json_string_value(json_object_get(q->hard, key)), &c) == 0 &&
                            c > 0)
                                json_array_append(exceeded, kv);
                }
                if (!refused && json_array_size(exceeded)) {
                        char a[1024], b[1024], c[1024];
                        pretty(a, sizeof(a), req, exceeded);
                        pretty(b, sizeof(b), q->used, exceeded);
                        pretty(c, sizeof(c), q->hard, exceeded);
                        snprintf(msg, sizeof(msg),
                                 "%s \"%s\" is forbidden: exceeded quota: %s, requested: %s, used: "
                                 "%s, limited: %s",
                                 resource, name ? name : "", q->name, a, b, c);
                        refused = q->name;
                }
                json_decref(keys);
                json_decref(track);
                json_decref(missing);
                json_decref(exceeded);
                json_decref(req);
        }
        if (!refused) {
                for (size_t i = 0; i < n; i++) {
                        struct quota *q = order[i];
                        json_object_foreach(q->hard, k, v)
                        {
                                const char *r = json_string_value(json_object_get(usage_text, k));
                                if (!r || !tracked(kind, k))
                                        continue;
                                const char *u = json_string_value(json_object_get(q->used, k));
                                char sum[KDEV_QTY_TEXT_MAX];
                                json_object_set_new(q->used, k,
                                                    json_string(qadd_text(u ? u : "0", r, sum,
                                                                          sizeof(sum))));
                        }
                }
        }
        free(order);
        json_object_set_new(out, "allowed", json_boolean(!refused));
        json_object_set_new(out, "message", json_string(msg));
        if (refused)
                json_object_set_new(out, "quota", json_string(refused));
        return out;
}

json_t *kdev_quota_set_json(const struct kdev_quota_set *set)
{
        json_t *a = json_array();
        for (size_t i = 0; i < set->n; i++)
                json_array_append_new(a, json_pack("{s:s,s:s,s:O,s:O}", "name", set->q[i].name,
                                                   "namespace", set->q[i].ns, "hard", set->q[i].hard,
                                                   "used", set->q[i].used));
        return a;
}
