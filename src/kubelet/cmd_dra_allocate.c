/* kdevctl dra allocate --node NAME: the control plane's DRA decision,
 * offline. Reads the node's ResourceSlices, the DeviceClasses and the
 * ResourceClaims from an API server, allocates the pending claims with the
 * structured allocator (sched/allocator.h, kube-scheduler's algorithm) and
 * writes each allocation to the claim's status as the scheduler does (PUT
 * .../resourceclaims/NAME/status with status.allocation), or prints why a
 * claim cannot be allocated on the node. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "kube/kube.h"
#include "kubelet/cli.h"
#include "kubelet/cmds.h"
#include "sched/allocator.h"

#define CMD "dra allocate"

static void usage(FILE *f)
{
        fprintf(f,
                "Usage: kdevctl dra allocate --node NAME [--kubeconfig FILE] [--context NAME]\n"
                "                            [--namespace NS] [--claim NAME] [--dry-run]\n"
                "                            [--resource-api-version v1|v1beta1] [-o table|json]\n"
                "\n"
                "Plays kube-scheduler's DRA structured allocator for one node: reads the\n"
                "ResourceSlices (those of the node, of all nodes, or selecting it), the\n"
                "DeviceClasses and the ResourceClaims from the API server, counts the devices\n"
                "of allocated claims as in use, and allocates each pending claim (no\n"
                "status.allocation; in namespace, then name order) on the node: the class's\n"
                "and the request's CEL selectors, exactly (count, allocationMode All,\n"
                "adminAccess) and firstAvailable requests, matchAttribute/distinctAttribute\n"
                "constraints, shared counters (partitionable devices) and consumable capacity.\n"
                "The allocation is written to the claim's status as the scheduler writes it\n"
                "(status.allocation: device results, the class and claim configs, the node\n"
                "selector); a claim that cannot be allocated gets one line per request that\n"
                "cannot be satisfied, e.g.\n"
                "\n"
                "  request gpu: no device of class gpu.nvidia.com matches\n"
                "  `device.attributes[\"gpu.nvidia.com\"].productName == \"H200\"`: 8 devices\n"
                "  checked, 8 rejected \u2014 productName is \"NVIDIA H100 80GB HBM3\"\n"
                "\n"
                "Claims already allocated are left alone. README \"Structured allocator\"\n"
                "says what is implemented and where kdev's choice differs from the\n"
                "scheduler's.\n"
                "\n"
                "Options:\n"
                "      --node NAME          node to allocate on (required)\n"
                "      --kubeconfig FILE    kubeconfig (default: in-cluster service account)\n"
                "      --context NAME       kubeconfig context (default: current-context)\n"
                "      --namespace NS       only the pending claims of namespace NS\n"
                "      --claim NAME         only this claim (needs --namespace)\n"
                "      --dry-run            print the allocations, write nothing\n"
                "      --resource-api-version V\n"
                "                           resource.k8s.io version: v1 (default) or v1beta1\n"
                "  -o, --output FORMAT      table (default) or json\n"
                "  -h, --help               show this help\n"
                "\n"
                "Exit status: 0 every pending claim was allocated (or none was pending);\n"
                "1 a claim cannot be allocated, its claim or selectors are invalid, or the\n"
                "API server failed; 2 usage error.\n"
                "\n"
                "Examples:\n"
                "  kdevctl dra allocate --kubeconfig ~/.kube/config --node node-a --dry-run\n"
                "  kdevctl dra allocate --kubeconfig kc --node node-a --namespace default \\\n"
                "      --claim gpu-claim -o json\n");
}

enum { OPT_NODE, OPT_KUBECONFIG, OPT_CONTEXT, OPT_NAMESPACE, OPT_CLAIM, OPT_DRY_RUN, OPT_VERSION,
       OPT_OUTPUT };

struct args {
        const char *node, *kubeconfig, *context, *ns, *claim, *version;
        bool dry_run;
        enum kdev_cli_output output;
};

static int on_arg(int id, const char *value, void *user_data, struct kdev_err *err)
{
        struct args *a = user_data;
        switch (id) {
        case OPT_NODE:
                a->node = value;
                return 0;
        case OPT_KUBECONFIG:
                a->kubeconfig = value;
                return 0;
        case OPT_CONTEXT:
                a->context = value;
                return 0;
        case OPT_NAMESPACE:
                a->ns = value;
                return 0;
        case OPT_CLAIM:
                a->claim = value;
                return 0;
        case OPT_DRY_RUN:
                a->dry_run = true;
                return 0;
        case OPT_VERSION:
                if (strcmp(value, "v1") != 0 && strcmp(value, "v1beta1") != 0)
                        return kdev_err_set(err, EINVAL,
                                            "--resource-api-version: \"%s\": must be v1 or v1beta1",
                                            value);
                a->version = value;
                return 0;
        case OPT_OUTPUT:
                return kdev_cli_parse_output(value, &a->output, err);
        default:
                return kdev_err_set(err, EINVAL, "unexpected argument \"%s\"", value);
        }
}

/* LIST of a collection into *items (new reference). */
static int list(struct kdev_kube *k, const char *ns, const char *resource, json_t **items,
                struct kdev_err *err)
{
        char path[512];
        *items = NULL;
        int rc = kdev_kube_path(k, path, sizeof(path), ns, resource, NULL, NULL, err);
        if (rc < 0)
                return rc;
        json_t *body = NULL;
        rc = kdev_kube_request(k, "GET", path, NULL, &body, err);
        if (rc < 0)
                return rc;
        json_t *it = json_object_get(body, "items");
        *items = json_is_array(it) ? json_incref(it) : json_array();
        json_decref(body);
        return 0;
}

static const char *meta(const json_t *o, const char *key)
{
        return json_string_value(json_object_get(json_object_get(o, "metadata"), key));
}

static int cmp_claim(const void *pa, const void *pb)
{
        const json_t *a = *(json_t *const *)pa, *b = *(json_t *const *)pb;
        const char *na = meta(a, "namespace"), *nb = meta(b, "namespace");
        int c = strcmp(na ? na : "", nb ? nb : "");
        if (c)
                return c;
        return strcmp(meta(a, "name") ? meta(a, "name") : "", meta(b, "name") ? meta(b, "name") : "");
}

static bool allocated(const json_t *claim)
{
        return json_object_get(json_object_get(claim, "status"), "allocation") != NULL;
}

/* Writes |alloc| into the claim's status (raw wire object |wire|). */
static int write_status(struct kdev_kube *k, const json_t *wire, const json_t *alloc,
                        struct kdev_err *err)
{
        char path[512];
        const char *ns = meta(wire, "namespace"), *name = meta(wire, "name");
        int rc = kdev_kube_path(k, path, sizeof(path), ns, "resourceclaims", name, "status", err);
        if (rc < 0)
                return rc;
        json_t *obj = json_deep_copy(wire);
        json_t *status = obj ? json_object_get(obj, "status") : NULL;
        if (obj && !json_is_object(status)) {
                status = json_object();
                json_object_set_new(obj, "status", status);
        }
        if (!obj || !status || json_object_set(status, "allocation", (json_t *)alloc) < 0 ||
            json_object_set_new(obj, "apiVersion", json_string(kdev_kube_api_version(k))) < 0 ||
            json_object_set_new(obj, "kind", json_string("ResourceClaim")) < 0) {
                json_decref(obj);
                return kdev_err_set(err, ENOMEM, "out of memory");
        }
        rc = kdev_kube_request(k, "PUT", path, obj, NULL, err);
        json_decref(obj);
        return rc;
}

static void print_allocation(const json_t *alloc)
{
        size_t i;
        json_t *r;
        json_array_foreach(json_object_get(json_object_get(alloc, "devices"), "results"), i, r) {
                printf("  %s: %s/%s/%s", json_string_value(json_object_get(r, "request")),
                       json_string_value(json_object_get(r, "driver")),
                       json_string_value(json_object_get(r, "pool")),
                       json_string_value(json_object_get(r, "device")));
                if (json_is_true(json_object_get(r, "adminAccess")))
                        printf(" (admin access)");
                if (json_object_get(r, "shareID"))
                        printf(" (share %s)", json_string_value(json_object_get(r, "shareID")));
                printf("\n");
        }
}

struct run {
        struct kdev_kube *k;
        json_t *slices, *classes, *claims, *wire_claims, *node_obj;
};

static void run_free(struct run *r)
{
        json_decref(r->slices);
        json_decref(r->classes);
        json_decref(r->claims);
        json_decref(r->wire_claims);
        json_decref(r->node_obj);
        kdev_kube_free(r->k);
}

static int connect_and_read(const struct args *a, struct run *r, struct kdev_err *err)
{
        struct kdev_kube_config cfg = {0};
        int rc = a->kubeconfig ? kdev_kube_config_kubeconfig(&cfg, a->kubeconfig, a->context, err)
                               : kdev_kube_config_in_cluster(&cfg, NULL, err);
        if (rc < 0) {
                kdev_kube_config_free(&cfg);
                return rc;
        }
        struct kdev_kube_opts opts = {.version = a->version, .attempts = 3};
        r->k = kdev_kube_new(&cfg, &opts, err);
        kdev_kube_config_free(&cfg);
        if (!r->k)
                return -EIO;
        rc = kdev_kube_get_node(r->k, a->node, &r->node_obj, err);
        if (rc == -ENOENT) { /* a node object is only needed for nodeSelector slices */
                r->node_obj = NULL;
                rc = 0;
        }
        if (rc == 0) {
                rc = kdev_kube_list_slices(r->k, NULL, NULL, &r->slices, err);
                rc = rc < 0 ? rc : 0;
        }
        if (rc == 0)
                rc = list(r->k, NULL, "deviceclasses", &r->classes, err);
        if (rc == 0)
                rc = list(r->k, a->ns, "resourceclaims", &r->wire_claims, err);
        if (rc < 0)
                return rc;
        /* sorted, and a v1-shaped copy of each for the allocator */
        size_t n = json_array_size(r->wire_claims);
        json_t **v = calloc(n + 1, sizeof(*v));
        r->claims = json_array();
        if (!v || !r->claims) {
                free(v);
                return kdev_err_set(err, ENOMEM, "out of memory");
        }
        for (size_t i = 0; i < n; i++)
                v[i] = json_array_get(r->wire_claims, i);
        qsort(v, n, sizeof(*v), cmp_claim);
        json_t *sorted = json_array();
        for (size_t i = 0; sorted && i < n; i++) {
                json_t *c = json_deep_copy(v[i]);
                if (c)
                        kdev_kube_claim_from_wire(r->k, c);
                json_array_append_new(r->claims, c);
                json_array_append(sorted, v[i]);
        }
        free(v);
        json_decref(r->wire_claims);
        r->wire_claims = sorted;
        return 0;
}

int kdevctl_cmd_dra_allocate(int argc, char **argv)
{
        static const struct kdev_cli_opt opts[] = {
                {"node", 0, true, OPT_NODE},
                {"kubeconfig", 0, true, OPT_KUBECONFIG},
                {"context", 0, true, OPT_CONTEXT},
                {"namespace", 0, true, OPT_NAMESPACE},
                {"claim", 0, true, OPT_CLAIM},
                {"dry-run", 0, false, OPT_DRY_RUN},
                {"resource-api-version", 0, true, OPT_VERSION},
                {"output", 'o', true, OPT_OUTPUT},
        };
        struct args a = {0};
        struct kdev_err err = {0};
        int rc = kdev_cli_parse(argc, argv, opts, sizeof(opts) / sizeof(opts[0]), on_arg, &a, &err);
        if (rc == 1) {
                usage(stdout);
                return KDEV_CLI_OK;
        }
        if (rc < 0)
                return kdev_cli_usage_error(CMD, "%s", err.msg);
        if (!a.node)
                return kdev_cli_usage_error(CMD, "--node NAME is required");
        if (a.claim && !a.ns)
                return kdev_cli_usage_error(CMD, "--claim needs --namespace");

        struct run r = {0};
        if (connect_and_read(&a, &r, &err) < 0) {
                run_free(&r);
                kdev_kube_global_cleanup();
                return kdev_cli_fail(CMD, "%s", err.msg);
        }
        json_t *labels = json_object_get(json_object_get(r.node_obj, "metadata"), "labels");
        struct kdev_sched_input in = {.node = a.node, .node_labels = labels, .slices = r.slices,
                                      .classes = r.classes, .allocated = r.claims};
        struct kdev_sched *s = NULL;
        if (kdev_sched_new(&in, &s, &err) < 0) {
                run_free(&r);
                kdev_kube_global_cleanup();
                return kdev_cli_fail(CMD, "%s", err.msg);
        }
        int failed = 0;
        bool found = !a.claim;
        json_t *out = json_array();
        size_t i;
        json_t *c;
        json_array_foreach(r.claims, i, c) {
                const char *ns = meta(c, "namespace") ? meta(c, "namespace") : "";
                const char *name = meta(c, "name") ? meta(c, "name") : "";
                if (a.claim && strcmp(name, a.claim) != 0)
                        continue;
                found = true;
                json_t *entry = json_pack("{s:s, s:s}", "namespace", ns, "name", name);
                if (allocated(c)) {
                        json_object_set_new(entry, "state", json_string("already allocated"));
                        if (a.output == KDEV_CLI_OUTPUT_TABLE && a.claim)
                                printf("%s/%s: already allocated\n", ns, name);
                        json_array_append_new(out, entry);
                        continue;
                }
                json_t *alloc = NULL, *reasons = NULL;
                kdev_err_clear(&err);
                rc = kdev_sched_allocate(s, c, &alloc, &reasons, &err);
                if (rc == 1 && !a.dry_run &&
                    write_status(r.k, json_array_get(r.wire_claims, i), alloc, &err) < 0) {
                        json_object_set_new(entry, "state", json_string("error"));
                        json_object_set_new(entry, "error", json_string(err.msg));
                        if (a.output == KDEV_CLI_OUTPUT_TABLE)
                                printf("%s/%s: allocated, but writing the status failed: %s\n", ns,
                                       name, err.msg);
                        failed = 1;
                } else if (rc == 1) {
                        json_object_set_new(entry, "state", json_string("allocated"));
                        json_object_set(entry, "allocation", alloc);
                        if (a.output == KDEV_CLI_OUTPUT_TABLE) {
                                printf("%s/%s: allocated on node %s%s\n", ns, name, a.node,
                                       a.dry_run ? " (dry run, not written)" : "");
                                print_allocation(alloc);
                        }
                } else if (rc == 0) {
                        json_object_set_new(entry, "state", json_string("unschedulable"));
                        json_object_set(entry, "reasons", reasons);
                        if (a.output == KDEV_CLI_OUTPUT_TABLE) {
                                printf("%s/%s: cannot allocate all claims on node %s\n", ns, name,
                                       a.node);
                                size_t j;
                                json_t *why;
                                json_array_foreach(reasons, j, why)
                                        printf("  %s\n", json_string_value(why));
                        }
                        failed = 1;
                } else {
                        json_object_set_new(entry, "state", json_string("error"));
                        json_object_set_new(entry, "error", json_string(err.msg));
                        if (a.output == KDEV_CLI_OUTPUT_TABLE)
                                printf("%s/%s: error: %s\n", ns, name, err.msg);
                        failed = 1;
                }
                json_decref(alloc);
                json_decref(reasons);
                json_array_append_new(out, entry);
        }
        if (!found) {
                fprintf(stderr, "kdevctl %s: resourceclaims \"%s\" not found in namespace %s\n",
                        CMD, a.claim, a.ns);
                failed = 1;
        }
        if (a.output == KDEV_CLI_OUTPUT_JSON) {
                json_t *root = json_pack("{s:s, s:b, s:o}", "node", a.node, "dryRun", a.dry_run,
                                         "claims", out);
                char *text = root ? json_dumps(root, JSON_INDENT(2)) : NULL;
                if (text)
                        printf("%s\n", text);
                free(text);
                json_decref(root);
        } else {
                json_decref(out);
        }
        kdev_sched_free(s);
        run_free(&r);
        kdev_kube_global_cleanup();
        return failed ? KDEV_CLI_FAIL : KDEV_CLI_OK;
}
