/* Paths, v1/v1beta1 shapes and typed helpers for Nodes, ResourceSlices and
 * ResourceClaims (see kube.h; k8s.io/api resource/v1 and resource/v1beta1
 * types.go). */
#include "kube/kube.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/json.h"
#include "kube/kube_internal.h"

#define PATH_MAX_LEN 1024
#define CONTINUE_MAX 2048 /* longest LIST continue token accepted */

/* DNS subdomain (RFC 1123, as Kubernetes names): [a-z0-9.-], at most 253,
 * starting and ending with an alphanumeric character. */
static bool valid_name(const char *s)
{
        size_t n = strlen(s);
        if (n == 0 || n > 253)
                return false;
        for (size_t i = 0; i < n; i++) {
                char c = s[i];
                bool alnum = (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9');
                if (!alnum && c != '-' && c != '.')
                        return false;
                if ((i == 0 || i == n - 1) && !alnum)
                        return false;
        }
        return true;
}

static int check_name(const char *what, const char *s, struct kdev_err *err)
{
        if (s && !valid_name(s))
                return kdev_err_set(err, EINVAL,
                                    "%s \"%s\" is not a valid name (lower-case letters, digits, "
                                    "'-' and '.', at most 253)",
                                    what, s);
        return 0;
}

int kdev_kube_path(const struct kdev_kube *k, char *buf, size_t size, const char *ns,
                   const char *resource, const char *name, const char *sub,
                   struct kdev_err *err)
{
        int rc;
        if ((rc = check_name("namespace", ns, err)) < 0 ||
            (rc = check_name("resource", resource, err)) < 0 ||
            (rc = check_name("name", name, err)) < 0 ||
            (rc = check_name("subresource", sub, err)) < 0)
                return rc;
        if (!resource)
                return kdev_err_set(err, EINVAL, "no resource");
        if (sub && !name)
                return kdev_err_set(err, EINVAL, "a subresource needs a name");
        int n;
        if (strcmp(resource, "nodes") == 0)
                n = snprintf(buf, size, "/api/v1/nodes%s%s%s%s", name ? "/" : "",
                             name ? name : "", sub ? "/" : "", sub ? sub : "");
        else
                n = snprintf(buf, size, "/apis/%s%s%s/%s%s%s%s%s", kdev_kube_api_version(k),
                             ns ? "/namespaces/" : "", ns ? ns : "", resource,
                             name ? "/" : "", name ? name : "", sub ? "/" : "", sub ? sub : "");
        if (n < 0 || (size_t)n >= size)
                return kdev_err_set(err, ENAMETOOLONG, "request path too long");
        return n;
}

int kdev_kube_slices_path(const struct kdev_kube *k, char *buf, size_t size, const char *node,
                          const char *driver, struct kdev_err *err)
{
        int rc;
        if ((rc = check_name("node", node, err)) < 0 ||
            (rc = check_name("driver", driver, err)) < 0)
                return rc;
        rc = kdev_kube_path(k, buf, size, NULL, "resourceslices", NULL, NULL, err);
        if (rc < 0 || (!node && !driver))
                return rc;
        /* The names are DNS subdomains: only '=' and ',' need escaping. */
        int n = snprintf(buf + rc, size - (size_t)rc, "?fieldSelector=%s%s%s%s%s",
                         node ? "spec.nodeName%3D" : "", node ? node : "",
                         node && driver ? "%2C" : "", driver ? "spec.driver%3D" : "",
                         driver ? driver : "");
        if (n < 0 || (size_t)n >= size - (size_t)rc)
                return kdev_err_set(err, ENAMETOOLONG, "request path too long");
        return rc + n;
}

/* --- shapes -------------------------------------------------------------------- */

static bool is_v1beta1(const struct kdev_kube *k)
{
        return strcmp(kdev_kube_version(k), "v1beta1") == 0;
}

static int set_type(const struct kdev_kube *k, json_t *obj, const char *kind)
{
        if (json_object_set_new(obj, "apiVersion", json_string(kdev_kube_api_version(k))) < 0 ||
            json_object_set_new(obj, "kind", json_string(kind)) < 0)
                return -ENOMEM;
        return 0;
}

int kdev_kube_slice_to_wire(const struct kdev_kube *k, json_t *slice)
{
        if (!json_is_object(slice))
                return -EINVAL;
        if (set_type(k, slice, "ResourceSlice") < 0)
                return -ENOMEM;
        json_t *devs = json_object_get(json_object_get(slice, "spec"), "devices");
        if (!is_v1beta1(k) || !json_is_array(devs))
                return 0;
        size_t i;
        json_t *d;
        json_array_foreach(devs, i, d) {
                if (!json_is_object(d) || json_object_get(d, "basic"))
                        continue;
                json_t *basic = json_object();
                if (!basic)
                        return -ENOMEM;
                const char *key;
                json_t *v;
                void *tmp;
                json_object_foreach_safe(d, tmp, key, v) {
                        if (strcmp(key, "name") == 0)
                                continue;
                        if (json_object_set(basic, key, v) < 0) {
                                json_decref(basic);
                                return -ENOMEM;
                        }
                        json_object_del(d, key);
                }
                if (json_object_set_new(d, "basic", basic) < 0)
                        return -ENOMEM;
        }
        return 0;
}

int kdev_kube_slice_from_wire(const struct kdev_kube *k, json_t *slice)
{
        if (!json_is_object(slice))
                return -EINVAL;
        json_t *devs = json_object_get(json_object_get(slice, "spec"), "devices");
        if (is_v1beta1(k) && json_is_array(devs)) {
                size_t i;
                json_t *d;
                json_array_foreach(devs, i, d) {
                        json_t *basic = json_object_get(d, "basic");
                        if (!json_is_object(basic))
                                continue;
                        json_incref(basic);
                        json_object_del(d, "basic");
                        int rc = json_object_update(d, basic);
                        json_decref(basic);
                        if (rc < 0)
                                return -ENOMEM;
                }
        }
        if (json_object_set_new(slice, "apiVersion", json_string("resource.k8s.io/v1")) < 0 ||
            json_object_set_new(slice, "kind", json_string("ResourceSlice")) < 0)
                return -ENOMEM;
        return 0;
}

int kdev_kube_claim_from_wire(const struct kdev_kube *k, json_t *claim)
{
        static const char *const exact[] = {"deviceClassName", "selectors", "allocationMode",
                                            "count", "adminAccess", "tolerations", "capacity"};
        if (!json_is_object(claim))
                return -EINVAL;
        json_t *reqs = json_object_get(
                json_object_get(json_object_get(claim, "spec"), "devices"), "requests");
        if (is_v1beta1(k) && json_is_array(reqs)) {
                size_t i;
                json_t *r;
                json_array_foreach(reqs, i, r) {
                        if (!json_is_object(r) || json_object_get(r, "exactly") ||
                            json_object_get(r, "firstAvailable"))
                                continue;
                        json_t *ex = json_object();
                        if (!ex)
                                return -ENOMEM;
                        for (size_t f = 0; f < sizeof(exact) / sizeof(exact[0]); f++) {
                                json_t *v = json_object_get(r, exact[f]);
                                if (!v)
                                        continue;
                                if (json_object_set(ex, exact[f], v) < 0) {
                                        json_decref(ex);
                                        return -ENOMEM;
                                }
                                json_object_del(r, exact[f]);
                        }
                        if (json_object_set_new(r, "exactly", ex) < 0)
                                return -ENOMEM;
                }
        }
        if (json_object_set_new(claim, "apiVersion", json_string("resource.k8s.io/v1")) < 0 ||
            json_object_set_new(claim, "kind", json_string("ResourceClaim")) < 0)
                return -ENOMEM;
        return 0;
}

/* --- update with retry ----------------------------------------------------------- */

int kdev_kube_update_retry(struct kdev_kube *k, const char *path, kdev_kube_mutate_fn fn,
                           void *arg, json_t **out, struct kdev_err *err)
{
        if (out)
                *out = NULL;
        unsigned conflicts = 0;
        for (;;) {
                json_t *obj = NULL;
                int rc = kdev_kube_request(k, "GET", path, NULL, &obj, err);
                if (rc < 0)
                        return rc;
                rc = fn(obj, arg, err);
                if (rc < 0) {
                        json_decref(obj);
                        return rc;
                }
                if (rc == KDEV_KUBE_UNCHANGED) {
                        if (out)
                                *out = obj;
                        else
                                json_decref(obj);
                        return 0;
                }
                json_t *written = NULL;
                rc = kdev_kube_request(k, "PUT", path, obj, out ? &written : NULL, err);
                json_decref(obj);
                if (rc == -ESTALE && conflicts < kdev_kube_conflict_retries(k)) {
                        conflicts++;
                        continue;
                }
                if (rc < 0) {
                        if (rc == -ESTALE)
                                kdev_err_wrap(err, "update gave up after %u conflicts",
                                              conflicts + 1);
                        return rc;
                }
                if (out)
                        *out = written;
                return 0;
        }
}

/* --- JSON types of what the API server sends ------------------------------------ */

/* The fields kdev reads of a ResourceSlice |slice| (wire shape) at |at| in
 * the answer to |ctx|: -EPROTO "<ctx>: <at><path>: expected <type>, got
 * <type>" when one has another JSON type than the API's. */
static int check_slice(const struct kdev_kube *k, const json_t *slice, const char *ctx,
                       const char *at, struct kdev_err *err)
{
        char path[160];
        json_t *md, *spec, *devs, *d;
        size_t i;
        int rc;

        if ((rc = kdev_json_expect(slice, JSON_OBJECT, err, "%s: %s", ctx, *at ? at : "response body")) < 0 ||
            (rc = kdev_json_member(slice, "metadata", JSON_OBJECT, &md, ctx, at, err)) < 0 ||
            (rc = kdev_json_member(slice, "spec", JSON_OBJECT, &spec, ctx, at, err)) < 0)
                return rc;
        snprintf(path, sizeof(path), "%s.metadata", at);
        if ((rc = kdev_json_member(md, "name", JSON_STRING, NULL, ctx, path, err)) < 0 ||
            (rc = kdev_json_member(md, "resourceVersion", JSON_STRING, NULL, ctx, path, err)) < 0)
                return rc;
        snprintf(path, sizeof(path), "%s.spec", at);
        if ((rc = kdev_json_member(spec, "devices", JSON_ARRAY, &devs, ctx, path, err)) < 0)
                return rc;
        json_array_foreach(devs, i, d) {
                snprintf(path, sizeof(path), "%s.spec.devices[%zu]", at, i);
                if ((rc = kdev_json_expect(d, JSON_OBJECT, err, "%s: %s", ctx, path)) < 0 ||
                    (rc = kdev_json_member(d, "name", JSON_STRING, NULL, ctx, path, err)) < 0 ||
                    (is_v1beta1(k) &&
                     (rc = kdev_json_member(d, "basic", JSON_OBJECT, NULL, ctx, path, err)) < 0))
                        return rc;
        }
        return 0;
}

/* The same for the fields kdev reads of a ResourceClaim (the request list the
 * v1beta1 shape is converted in; .status is checked where it is used). */
static int check_claim(const json_t *claim, const char *ctx, struct kdev_err *err)
{
        char path[64];
        json_t *spec, *devs, *reqs, *r;
        size_t i;
        int rc;

        if ((rc = kdev_json_member(claim, "metadata", JSON_OBJECT, NULL, ctx, "", err)) < 0 ||
            (rc = kdev_json_member(claim, "spec", JSON_OBJECT, &spec, ctx, "", err)) < 0 ||
            (rc = kdev_json_member(spec, "devices", JSON_OBJECT, &devs, ctx, ".spec", err)) < 0 ||
            (rc = kdev_json_member(devs, "requests", JSON_ARRAY, &reqs, ctx, ".spec.devices",
                                   err)) < 0)
                return rc;
        json_array_foreach(reqs, i, r) {
                snprintf(path, sizeof(path), ".spec.devices.requests[%zu]", i);
                if ((rc = kdev_json_expect(r, JSON_OBJECT, err, "%s: %s", ctx, path)) < 0)
                        return rc;
        }
        return 0;
}

/* --- typed helpers ------------------------------------------------------------- */

int kdev_kube_get_node(struct kdev_kube *k, const char *name, json_t **node,
                       struct kdev_err *err)
{
        char path[PATH_MAX_LEN];
        *node = NULL;
        if (!name)
                return kdev_err_set(err, EINVAL, "get node: no name");
        int rc = kdev_kube_path(k, path, sizeof(path), NULL, "nodes", name, NULL, err);
        if (rc < 0)
                return rc;
        rc = kdev_kube_request(k, "GET", path, NULL, node, err);
        if (rc < 0)
                return rc;
        char ctx[PATH_MAX_LEN + 8];
        json_t *md;
        snprintf(ctx, sizeof(ctx), "GET %s", path);
        if ((rc = kdev_json_member(*node, "metadata", JSON_OBJECT, &md, ctx, "", err)) < 0 ||
            (rc = kdev_json_member(md, "name", JSON_STRING, NULL, ctx, ".metadata", err)) < 0 ||
            (rc = kdev_json_member(md, "uid", JSON_STRING, NULL, ctx, ".metadata", err)) < 0) {
                json_decref(*node);
                *node = NULL;
                return rc;
        }
        return 0;
}

json_t *kdev_kube_node_owner_ref(const json_t *node)
{
        json_t *md = json_object_get(node, "metadata");
        const char *name = json_string_value(json_object_get(md, "name"));
        const char *uid = json_string_value(json_object_get(md, "uid"));
        if (!name || !uid)
                return NULL;
        return json_pack("{s:s, s:s, s:s, s:s, s:b}", "apiVersion", "v1", "kind", "Node", "name",
                         name, "uid", uid, "controller", 1);
}

int kdev_kube_get_claim(struct kdev_kube *k, const char *ns, const char *name, json_t **claim,
                        struct kdev_err *err)
{
        char path[PATH_MAX_LEN];
        *claim = NULL;
        if (!ns || !name)
                return kdev_err_set(err, EINVAL, "get claim: namespace and name are required");
        int rc = kdev_kube_path(k, path, sizeof(path), ns, "resourceclaims", name, NULL, err);
        if (rc < 0)
                return rc;
        rc = kdev_kube_request(k, "GET", path, NULL, claim, err);
        if (rc < 0)
                return rc;
        char ctx[PATH_MAX_LEN + 8];
        snprintf(ctx, sizeof(ctx), "GET %s", path);
        if ((rc = check_claim(*claim, ctx, err)) < 0) {
                json_decref(*claim);
                *claim = NULL;
                return rc;
        }
        if (kdev_kube_claim_from_wire(k, *claim) < 0) {
                json_decref(*claim);
                *claim = NULL;
                return kdev_err_set(err, ENOMEM, "out of memory");
        }
        return 0;
}

int kdev_kube_list_slices(struct kdev_kube *k, const char *node, const char *driver,
                          json_t **items, struct kdev_err *err)
{
        char base[PATH_MAX_LEN], path[PATH_MAX_LEN + 3 * CONTINUE_MAX + 64];
        *items = NULL;
        int rc = kdev_kube_slices_path(k, base, sizeof(base), node, driver, err);
        if (rc < 0)
                return rc;
        json_t *all = json_array();
        if (!all)
                return kdev_err_set(err, ENOMEM, "out of memory");
        char *cont = NULL;
        for (;;) {
                snprintf(path, sizeof(path), "%s%climit=%d%s%s", base,
                         strchr(base, '?') ? '&' : '?', KDEV_KUBE_LIST_LIMIT,
                         cont ? "&continue=" : "", cont ? cont : "");
                free(cont);
                cont = NULL;
                json_t *list = NULL;
                rc = kdev_kube_request(k, "GET", path, NULL, &list, err);
                if (rc == -ENOENT) {
                        /* a collection is never Not Found: the group version is not
                         * served (resource.k8s.io/v1 needs Kubernetes 1.34) */
                        bool v1 = strcmp(kdev_kube_version(k), "v1") == 0;
                        rc = kdev_err_set(err, EPROTONOSUPPORT,
                                          "the API server does not serve %s (GET %s: 404 Not "
                                          "Found); run with --resource-api-version %s",
                                          kdev_kube_api_version(k), base,
                                          v1 ? "v1beta1 (Kubernetes < 1.34)" : "v1");
                        break;
                }
                if (rc < 0)
                        break;
                char ctx[sizeof(path) + 8], at[32];
                json_t *page, *md, *cj;
                snprintf(ctx, sizeof(ctx), "GET %s", path);
                if ((rc = kdev_json_member(list, "items", JSON_ARRAY, &page, ctx, "", err)) < 0 ||
                    (rc = kdev_json_member(list, "metadata", JSON_OBJECT, &md, ctx, "", err)) < 0 ||
                    (rc = kdev_json_member(md, "continue", JSON_STRING, &cj, ctx, ".metadata",
                                           err)) < 0) {
                        json_decref(list);
                        break;
                }
                size_t i;
                json_t *it;
                json_array_foreach(page, i, it) {
                        snprintf(at, sizeof(at), ".items[%zu]", i);
                        if ((rc = check_slice(k, it, ctx, at, err)) < 0)
                                break;
                        if (kdev_kube_slice_from_wire(k, it) < 0 ||
                            json_array_append(all, it) < 0) {
                                rc = kdev_err_set(err, ENOMEM, "out of memory");
                                break;
                        }
                }
                const char *c = json_string_value(cj);
                if (rc >= 0 && c && *c) {
                        /* escape the opaque token for the query */
                        size_t n = strlen(c);
                        cont = n <= CONTINUE_MAX ? malloc(n * 3 + 1) : NULL;
                        if (n > CONTINUE_MAX) {
                                rc = kdev_err_set(err, EPROTO,
                                                  "GET %s: continue token longer than %d "
                                                  "characters",
                                                  path, CONTINUE_MAX);
                        } else if (!cont) {
                                rc = kdev_err_set(err, ENOMEM, "out of memory");
                        } else {
                                size_t o = 0;
                                for (size_t j = 0; j < n; j++) {
                                        unsigned char ch = (unsigned char)c[j];
                                        bool plain = (ch >= 'a' && ch <= 'z') ||
                                                     (ch >= 'A' && ch <= 'Z') ||
                                                     (ch >= '0' && ch <= '9') || ch == '-' ||
                                                     ch == '_' || ch == '.' || ch == '~';
                                        if (plain)
                                                cont[o++] = (char)ch;
                                        else
                                                o += (size_t)sprintf(cont + o, "%%%02X", ch);
                                }
                                cont[o] = '\0';
                        }
                }
                json_decref(list);
                if (rc < 0 || !cont)
                        break;
        }
        free(cont);
        if (rc < 0) {
                json_decref(all);
                return rc;
        }
        *items = all;
        return (int)json_array_size(all);
}

int kdev_kube_create_slice(struct kdev_kube *k, const json_t *slice, json_t **out,
                           struct kdev_err *err)
{
        char path[PATH_MAX_LEN];
        if (out)
                *out = NULL;
        int rc = kdev_kube_path(k, path, sizeof(path), NULL, "resourceslices", NULL, NULL, err);
        if (rc < 0)
                return rc;
        json_t *wire = json_deep_copy(slice);
        if (!wire || kdev_kube_slice_to_wire(k, wire) < 0) {
                json_decref(wire);
                return kdev_err_set(err, json_is_object(slice) ? ENOMEM : EINVAL,
                                    "create slice: not an object");
        }
        json_t *res = NULL;
        rc = kdev_kube_request(k, "POST", path, wire, out ? &res : NULL, err);
        json_decref(wire);
        if (rc < 0)
                return rc;
        if (out) {
                char ctx[PATH_MAX_LEN + 8];
                snprintf(ctx, sizeof(ctx), "POST %s", path);
                if ((rc = check_slice(k, res, ctx, "", err)) < 0) {
                        json_decref(res);
                        return rc;
                }
                kdev_kube_slice_from_wire(k, res);
                *out = res;
        }
        return 0;
}

int kdev_kube_update_slice(struct kdev_kube *k, const json_t *slice, json_t **out,
                           struct kdev_err *err)
{
        char path[PATH_MAX_LEN];
        if (out)
                *out = NULL;
        json_t *md = json_object_get(slice, "metadata");
        const char *name = json_string_value(json_object_get(md, "name"));
        const char *rv = json_string_value(json_object_get(md, "resourceVersion"));
        if (!name || !rv || !*rv)
                return kdev_err_set(err, EINVAL,
                                    "update slice: metadata.name and metadata.resourceVersion "
                                    "are required");
        int rc = kdev_kube_path(k, path, sizeof(path), NULL, "resourceslices", name, NULL, err);
        if (rc < 0)
                return rc;
        json_t *wire = json_deep_copy(slice);
        if (!wire || kdev_kube_slice_to_wire(k, wire) < 0) {
                json_decref(wire);
                return kdev_err_set(err, ENOMEM, "out of memory");
        }
        json_t *res = NULL;
        rc = kdev_kube_request(k, "PUT", path, wire, out ? &res : NULL, err);
        json_decref(wire);
        if (rc < 0)
                return rc;
        if (out) {
                char ctx[PATH_MAX_LEN + 8];
                snprintf(ctx, sizeof(ctx), "PUT %s", path);
                if ((rc = check_slice(k, res, ctx, "", err)) < 0) {
                        json_decref(res);
                        return rc;
                }
                kdev_kube_slice_from_wire(k, res);
                *out = res;
        }
        return 0;
}

int kdev_kube_delete_slice(struct kdev_kube *k, const char *name, const char *uid,
                           const char *resource_version, struct kdev_err *err)
{
        char path[PATH_MAX_LEN];
        if (!name)
                return kdev_err_set(err, EINVAL, "delete slice: no name");
        int rc = kdev_kube_path(k, path, sizeof(path), NULL, "resourceslices", name, NULL, err);
        if (rc < 0)
                return rc;
        json_t *opts = NULL;
        if (uid || resource_version) {
                json_t *pre = json_object();
                opts = json_pack("{s:s, s:s, s:o}", "apiVersion", "v1", "kind", "DeleteOptions",
                                 "preconditions", pre);
                if (!opts || (uid && json_object_set_new(pre, "uid", json_string(uid)) < 0) ||
                    (resource_version &&
                     json_object_set_new(pre, "resourceVersion",
                                         json_string(resource_version)) < 0)) {
                        json_decref(opts);
                        return kdev_err_set(err, ENOMEM, "out of memory");
                }
        }
        rc = kdev_kube_request(k, "DELETE", path, opts, NULL, err);
        json_decref(opts);
        return rc;
}

int kdev_kube_delete_slices(struct kdev_kube *k, const char *node, const char *driver,
                            struct kdev_err *err)
{
        char path[PATH_MAX_LEN];
        if (!node && !driver)
                return kdev_err_set(err, EINVAL,
                                    "delete slices: refusing to delete every slice (no node, "
                                    "no driver)");
        int rc = kdev_kube_slices_path(k, path, sizeof(path), node, driver, err);
        if (rc < 0)
                return rc;
        json_t *res = NULL;
        rc = kdev_kube_request(k, "DELETE", path, NULL, &res, err);
        if (rc < 0)
                return rc;
        char ctx[PATH_MAX_LEN + 8];
        json_t *items;
        snprintf(ctx, sizeof(ctx), "DELETE %s", path);
        rc = kdev_json_member(res, "items", JSON_ARRAY, &items, ctx, "", err);
        int n = rc < 0 ? rc : (int)json_array_size(items);
        json_decref(res);
        return n;
}
