/* kdevctl podresources: asks a PodResources socket (kubelet's, or kdevctl
 * kubelet's) List, GetAllocatableResources or Get, and prints the answer, or
 * the device -> pod map kdev builds from List. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "kubelet/cli.h"
#include "kubelet/cmds.h"
#include "podres/client.h"

#define CMD "podresources"

static void usage(FILE *f)
{
        fprintf(f,
                "Usage: kdevctl podresources [list|allocatable|get NAMESPACE POD|map]\n"
                "                            [--socket PATH] [-o table|json] [--timeout SEC]\n"
                "\n"
                "Calls kubelet's PodResources API (v1.PodResourcesLister) on PATH:\n"
                "  list         List (the default): every pod's containers and their devices\n"
                "               (device plugin resources and DRA claim devices)\n"
                "  allocatable  GetAllocatableResources: the devices the node can assign\n"
                "  get NS POD   Get: one pod\n"
                "  map          List, turned into kdev's device -> (namespace, pod,\n"
                "               container) map (one row per device and container; a device\n"
                "               reported for several NUMA nodes is one row)\n"
                "\n"
                "Options:\n"
                "      --socket PATH    PodResources socket (default " KDEV_PODRES_SOCKET ")\n"
                "  -o, --output FORMAT  table (default) or json: list, allocatable and get\n"
                "                       print the answer in the proto3 JSON mapping; map\n"
                "                       prints {\"devices\": [...], \"claims\": [...]}\n"
                "      --timeout SEC    deadline of the call (default %d; 0 = none)\n"
                "  -h, --help           show this help\n"
                "\n"
                "Table columns: NAMESPACE POD CONTAINER RESOURCE DEVICE NUMA (list, get,\n"
                "map; a DRA claim device shows claim/NAMESPACE/NAME as RESOURCE and\n"
                "DRIVER/POOL/DEVICE as DEVICE); RESOURCE DEVICE NUMA (allocatable).\n"
                "\n"
                "Exit status: 0 success, 1 the call failed (socket, rpc error, answer),\n"
                "2 usage error.\n"
                "\n"
                "Examples:\n"
                "  kdevctl podresources\n"
                "  kdevctl podresources get default my-pod -o json\n"
                "  kdevctl podresources map --socket /tmp/dp/pod-resources/kubelet.sock\n",
                KDEV_CLI_DEFAULT_TIMEOUT_S);
}

enum { OPT_OUTPUT, OPT_TIMEOUT, OPT_SOCKET };

struct args {
        const char *socket;
        const char *words[4];
        size_t n_words;
        enum kdev_cli_output output;
        uint64_t timeout_ms;
};

static int on_arg(int id, const char *value, void *ud, struct kdev_err *err)
{
        struct args *a = ud;
        switch (id) {
        case OPT_OUTPUT:
                return kdev_cli_parse_output(value, &a->output, err);
        case OPT_TIMEOUT:
                return kdev_cli_parse_timeout(value, &a->timeout_ms, err);
        case OPT_SOCKET:
                if (!*value)
                        return kdev_err_set(err, EINVAL, "invalid --socket \"\" (want a path)");
                a->socket = value;
                return 0;
        default:
                if (a->n_words == 4)
                        return kdev_err_set(err, EINVAL, "unexpected argument \"%s\"", value);
                a->words[a->n_words++] = value;
                return 0;
        }
}

static char *numa_text(const int64_t *v, size_t n)
{
        if (n == 0)
                return strdup("-");
        char *s = NULL;
        size_t len = 0;
        FILE *f = open_memstream(&s, &len);
        if (!f)
                return NULL;
        for (size_t i = 0; i < n; i++)
                fprintf(f, "%s%lld", i ? "," : "", (long long)v[i]);
        fclose(f);
        return s;
}

static int print_map_table(const struct kdev_podres_map *m)
{
        struct kdev_cli_table *t = kdev_cli_table_new(6, "NAMESPACE", "POD", "CONTAINER",
                                                      "RESOURCE", "DEVICE", "NUMA");
        int rc = t ? 0 : -ENOMEM;
        for (size_t i = 0; rc == 0 && i < m->n_devices; i++) {
                const struct kdev_podres_device *d = &m->devices[i];
                char *numa = numa_text(d->numa, d->n_numa);
                rc = numa ? kdev_cli_table_add(t, d->namespace_, d->pod, d->container,
                                               d->resource, d->device_id, numa)
                          : -ENOMEM;
                free(numa);
        }
        for (size_t i = 0; rc == 0 && i < m->n_claims; i++) {
                const struct kdev_podres_claim_device *c = &m->claims[i];
                char *res = NULL, *dev = NULL;
                if (asprintf(&res, "claim/%s/%s", c->claim_namespace, c->claim_name) < 0)
                        res = NULL;
                if (asprintf(&dev, "%s/%s/%s", c->driver, c->pool, c->device) < 0)
                        dev = NULL;
                rc = res && dev ? kdev_cli_table_add(t, c->namespace_, c->pod, c->container, res,
                                                     dev, "-")
                                : -ENOMEM;
                free(res);
                free(dev);
        }
        if (rc == 0)
                kdev_cli_table_print(t, stdout, NULL);
        kdev_cli_table_free(t);
        return rc;
}

static int print_allocatable_table(const V1__AllocatableResourcesResponse *r)
{
        struct kdev_cli_table *t = kdev_cli_table_new(3, "RESOURCE", "DEVICE", "NUMA");
        int rc = t ? 0 : -ENOMEM;
        for (size_t i = 0; rc == 0 && i < r->n_devices; i++) {
                const V1__ContainerDevices *d = r->devices[i];
                size_t nn = d->topology ? d->topology->n_nodes : 0;
                int64_t *nodes = nn ? calloc(nn, sizeof(*nodes)) : NULL;
                for (size_t j = 0; nodes && j < nn; j++)
                        nodes[j] = d->topology->nodes[j]->id;
                char *numa = nn && !nodes ? NULL : numa_text(nodes, nn);
                for (size_t j = 0; rc == 0 && numa && j < d->n_device_ids; j++)
                        rc = kdev_cli_table_add(t, d->resource_name, d->device_ids[j], numa);
                if (!numa)
                        rc = -ENOMEM;
                free(numa);
                free(nodes);
        }
        if (rc == 0)
                kdev_cli_table_print(t, stdout, NULL);
        kdev_cli_table_free(t);
        return rc;
}

/* Table of a List (or a one-pod Get) answer, through the map. */
static int print_pods_table(const V1__ListPodResourcesResponse *r)
{
        struct kdev_podres_map m;
        struct kdev_err err = {0};
        if (kdev_podres_map_from_list(r, &m, &err) < 0)
                return -ENOMEM;
        int rc = print_map_table(&m);
        kdev_podres_map_clear(&m);
        return rc;
}

int kdevctl_cmd_podresources(int argc, char **argv)
{
        static const struct kdev_cli_opt opts[] = {
                {"output", 'o', true, OPT_OUTPUT},
                {"timeout", 0, true, OPT_TIMEOUT},
                {"socket", 0, true, OPT_SOCKET},
        };
        struct args a = {.timeout_ms = KDEV_CLI_DEFAULT_TIMEOUT_S * 1000ull};
        struct kdev_err err = {0};
        int rc = kdev_cli_parse(argc, argv, opts, sizeof(opts) / sizeof(opts[0]), on_arg, &a, &err);
        if (rc == 1) {
                usage(stdout);
                return KDEV_CLI_OK;
        }
        if (rc < 0)
                return kdev_cli_usage_error(CMD, "%s", err.msg);
        const char *verb = a.n_words ? a.words[0] : "list";
        size_t want = strcmp(verb, "get") == 0 ? 3 : 1;
        if (strcmp(verb, "list") && strcmp(verb, "allocatable") && strcmp(verb, "get") &&
            strcmp(verb, "map"))
                return kdev_cli_usage_error(CMD, "unknown request \"%s\" (want list, "
                                                 "allocatable, get or map)", verb);
        if (a.n_words > want || (a.n_words && a.n_words < want))
                return kdev_cli_usage_error(CMD, want == 3 ? "get takes NAMESPACE and POD"
                                                           : "%s takes no arguments", verb);
        const char *path = a.socket ? a.socket : KDEV_PODRES_SOCKET;
        bool json = a.output == KDEV_CLI_OUTPUT_JSON;

        if (strcmp(verb, "map") == 0) {
                struct kdev_podres_map m;
                if (kdev_podres_list(path, a.timeout_ms, &m, &err) < 0)
                        return kdev_cli_fail(CMD, "%s", err.msg);
                int ret = KDEV_CLI_OK;
                if (json) {
                        json_t *j = kdev_podres_map_json(&m);
                        char *text = j ? json_dumps(j, JSON_INDENT(2) | JSON_PRESERVE_ORDER)
                                       : NULL;
                        if (text)
                                printf("%s\n", text);
                        else
                                ret = kdev_cli_fail(CMD, "out of memory");
                        free(text);
                        json_decref(j);
                } else if (print_map_table(&m) < 0) {
                        ret = kdev_cli_fail(CMD, "out of memory");
                }
                kdev_podres_map_clear(&m);
                return ret;
        }

        V1__ListPodResourcesRequest lreq = V1__LIST_POD_RESOURCES_REQUEST__INIT;
        V1__AllocatableResourcesRequest areq = V1__ALLOCATABLE_RESOURCES_REQUEST__INIT;
        V1__GetPodResourcesRequest greq = V1__GET_POD_RESOURCES_REQUEST__INIT;
        const ProtobufCMessage *req = &lreq.base;
        const ProtobufCMessageDescriptor *rd = &v1__list_pod_resources_response__descriptor;
        const char *method = KDEV_PODRES_LIST;
        if (strcmp(verb, "allocatable") == 0) {
                req = &areq.base;
                rd = &v1__allocatable_resources_response__descriptor;
                method = KDEV_PODRES_ALLOCATABLE;
        } else if (strcmp(verb, "get") == 0) {
                greq.pod_namespace = (char *)a.words[1];
                greq.pod_name = (char *)a.words[2];
                req = &greq.base;
                rd = &v1__get_pod_resources_response__descriptor;
                method = KDEV_PODRES_GET;
        }
        ProtobufCMessage *resp = NULL;
        if (kdev_cli_unary(CMD, path, method, req, rd, a.timeout_ms, &resp, false, &err) !=
            KDEV_CLI_OK)
                return KDEV_CLI_FAIL;
        int ret = KDEV_CLI_OK;
        if (json) {
                ret = kdev_cli_print_json(CMD, resp);
        } else {
                int prc;
                if (rd == &v1__allocatable_resources_response__descriptor) {
                        prc = print_allocatable_table((V1__AllocatableResourcesResponse *)resp);
                } else if (rd == &v1__get_pod_resources_response__descriptor) {
                        V1__GetPodResourcesResponse *g = (V1__GetPodResourcesResponse *)resp;
                        V1__ListPodResourcesResponse one = V1__LIST_POD_RESOURCES_RESPONSE__INIT;
                        one.n_pod_resources = g->pod_resources ? 1 : 0;
                        one.pod_resources = &g->pod_resources;
                        prc = print_pods_table(&one);
                } else {
                        prc = print_pods_table((V1__ListPodResourcesResponse *)resp);
                }
                if (prc < 0)
                        ret = kdev_cli_fail(CMD, "out of memory");
        }
        protobuf_c_message_free_unpacked(resp, NULL);
        return ret;
}
