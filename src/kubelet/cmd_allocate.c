/* kdevctl allocate SOCKET ID... [--container ID...]...: calls Allocate. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "deviceplugin/v1beta1/api.pb-c.h"
#include "kubelet/cli.h"
#include "kubelet/cmds.h"

#define CMD "allocate"

static void usage(FILE *f)
{
        fprintf(f,
                "Usage: kdevctl allocate SOCKET ID... [--container ID...]... [-o table|json]\n"
                "                        [--timeout SEC]\n"
                "\n"
                "Calls Allocate on the device plugin listening on SOCKET and prints, for each\n"
                "container, the environment variables, mounts, device specs (container path,\n"
                "host path, cgroup permissions), annotations and CDI devices it answers.\n"
                "\n"
                "The device IDs after SOCKET form the first container request; each\n"
                "--container starts another one (kubelet itself sends one container per\n"
                "call). IDs may also be given comma-separated: gpu-0,gpu-1.\n"
                "  kdevctl allocate vendor.sock gpu-0 gpu-1 --container gpu-2\n"
                "sends two container requests: [gpu-0 gpu-1] and [gpu-2].\n"
                "\n"
                "SOCKET is a path; a bare file name that does not exist in the current\n"
                "directory is looked up in " KDEV_CLI_DEVICE_PLUGIN_DIR ".\n"
                "\n"
                "Options:\n"
                "      --container ID...  start the next container request\n"
                "  -o, --output FORMAT    table (default) or json (proto3 JSON of the response)\n"
                "      --timeout SEC      RPC deadline in seconds (default %d; 0 = none)\n"
                "  -h, --help             show this help\n"
                "\n"
                "Exit status: 0 success; 1 RPC or connection failure, or a number of\n"
                "container responses that differs from the number of requests; 2 usage error.\n"
                "\n"
                "Examples:\n"
                "  kdevctl allocate kdev-nvidia.com_gpu.sock GPU-0a1b... GPU-2c3d...\n"
                "  kdevctl allocate /tmp/dp/kdev-example.com_null.sock null::0 -o json\n",
                KDEV_CLI_DEFAULT_TIMEOUT_S);
}

enum { OPT_OUTPUT, OPT_TIMEOUT, OPT_CONTAINER };

struct args {
        const char *socket;
        enum kdev_cli_output output;
        uint64_t timeout_ms;
        struct kdev_cli_strv *groups;
        size_t n_groups;
};

static int new_group(struct args *a, struct kdev_err *err)
{
        struct kdev_cli_strv *g = realloc(a->groups, (a->n_groups + 1) * sizeof(*g));
        if (!g)
                return kdev_err_set(err, ENOMEM, "out of memory");
        a->groups = g;
        a->groups[a->n_groups++] = (struct kdev_cli_strv){0};
        return 0;
}

static int on_arg(int id, const char *value, void *ud, struct kdev_err *err)
{
        struct args *a = ud;
        switch (id) {
        case OPT_OUTPUT:
                return kdev_cli_parse_output(value, &a->output, err);
        case OPT_TIMEOUT:
                return kdev_cli_parse_timeout(value, &a->timeout_ms, err);
        case OPT_CONTAINER:
                if (a->n_groups > 0 && a->groups[a->n_groups - 1].n == 0)
                        return kdev_err_set(err, EINVAL, "container %zu has no device IDs",
                                            a->n_groups);
                return new_group(a, err);
        default:
                if (!a->socket) {
                        a->socket = value;
                        return 0;
                }
                if (a->n_groups == 0 && new_group(a, err) < 0)
                        return -ENOMEM;
                return kdev_cli_strv_add_list(&a->groups[a->n_groups - 1], value, "device IDs",
                                              err);
        }
}

static void free_args(struct args *a)
{
        for (size_t i = 0; i < a->n_groups; i++)
                kdev_cli_strv_clear(&a->groups[i]);
        free(a->groups);
}

static int entry_cmp(const void *x, const void *y)
{
        /* EnvsEntry and AnnotationsEntry have the same layout */
        const V1beta1__ContainerAllocateResponse__EnvsEntry *const *a = x, *const *b = y;
        return strcmp((*a)->key, (*b)->key);
}

/* Prints a map<string,string> field sorted by key under |title|. */
static int print_map(const char *title, const char *kh, void *const *entries, size_t n)
{
        if (n == 0) {
                printf("  %s: none\n", title);
                return 0;
        }
        const V1beta1__ContainerAllocateResponse__EnvsEntry **sorted = malloc(n * sizeof(*sorted));
        struct kdev_cli_table *t = kdev_cli_table_new(2, kh, "VALUE");
        int rc = (sorted && t) ? 0 : -ENOMEM;
        if (rc == 0) {
                memcpy(sorted, entries, n * sizeof(*sorted));
                qsort(sorted, n, sizeof(*sorted), entry_cmp);
                for (size_t i = 0; i < n && rc == 0; i++)
                        rc = kdev_cli_table_add(t, sorted[i]->key, sorted[i]->value);
        }
        if (rc == 0) {
                printf("  %s:\n", title);
                kdev_cli_table_print(t, stdout, "    ");
        }
        kdev_cli_table_free(t);
        free(sorted);
        return rc;
}

static const char *nonempty(const char *s)
{
        return s && *s ? s : NULL;
}

static int print_container(size_t idx, const struct kdev_cli_strv *req,
                           const V1beta1__ContainerAllocateResponse *r)
{
        char *ids = req ? kdev_cli_strv_join(req->v, req->n, " ") : NULL;
        printf("Container %zu: %s\n", idx, ids ? ids : "(not requested)");
        free(ids);
        int rc = print_map("Envs", "NAME", (void *const *)r->envs, r->n_envs);
        if (rc < 0)
                return rc;

        if (r->n_mounts == 0) {
                printf("  Mounts: none\n");
        } else {
                struct kdev_cli_table *t =
                        kdev_cli_table_new(3, "CONTAINER_PATH", "HOST_PATH", "READ_ONLY");
                for (size_t i = 0; t && rc == 0 && i < r->n_mounts; i++)
                        rc = kdev_cli_table_add(t, nonempty(r->mounts[i]->container_path),
                                                nonempty(r->mounts[i]->host_path),
                                                r->mounts[i]->read_only ? "true" : "false");
                if (t && rc == 0) {
                        printf("  Mounts:\n");
                        kdev_cli_table_print(t, stdout, "    ");
                }
                rc = t ? rc : -ENOMEM;
                kdev_cli_table_free(t);
                if (rc < 0)
                        return rc;
        }

        if (r->n_devices == 0) {
                printf("  Devices: none\n");
        } else {
                struct kdev_cli_table *t =
                        kdev_cli_table_new(3, "CONTAINER_PATH", "HOST_PATH", "PERMISSIONS");
                for (size_t i = 0; t && rc == 0 && i < r->n_devices; i++)
                        rc = kdev_cli_table_add(t, nonempty(r->devices[i]->container_path),
                                                nonempty(r->devices[i]->host_path),
                                                nonempty(r->devices[i]->permissions));
                if (t && rc == 0) {
                        printf("  Devices:\n");
                        kdev_cli_table_print(t, stdout, "    ");
                }
                rc = t ? rc : -ENOMEM;
                kdev_cli_table_free(t);
                if (rc < 0)
                        return rc;
        }

        rc = print_map("Annotations", "KEY", (void *const *)r->annotations, r->n_annotations);
        if (rc < 0)
                return rc;

        if (r->n_cdi_devices == 0) {
                printf("  CDI devices: none\n");
        } else {
                printf("  CDI devices:\n");
                for (size_t i = 0; i < r->n_cdi_devices; i++)
                        printf("    %s\n", r->cdi_devices[i]->name);
        }
        return 0;
}

int kdevctl_cmd_allocate(int argc, char **argv)
{
        static const struct kdev_cli_opt opts[] = {
                {"output", 'o', true, OPT_OUTPUT},
                {"timeout", 0, true, OPT_TIMEOUT},
                {"container", 0, false, OPT_CONTAINER},
        };
        struct args a = {.timeout_ms = KDEV_CLI_DEFAULT_TIMEOUT_S * 1000u};
        struct kdev_err err = {0};
        V1beta1__ContainerAllocateRequest *creqs = NULL;
        V1beta1__ContainerAllocateRequest **cptrs = NULL;
        ProtobufCMessage *resp = NULL;
        char *path = NULL;
        int ret;
        int rc = kdev_cli_parse(argc, argv, opts, sizeof(opts) / sizeof(opts[0]), on_arg, &a, &err);
        if (rc == 1) {
                usage(stdout);
                ret = KDEV_CLI_OK;
                goto out;
        }
        if (rc < 0) {
                ret = kdev_cli_usage_error(CMD, "%s", err.msg);
                goto out;
        }
        if (!a.socket) {
                ret = kdev_cli_usage_error(CMD, "missing SOCKET");
                goto out;
        }
        if (a.n_groups == 0) {
                ret = kdev_cli_usage_error(CMD, "missing device IDs");
                goto out;
        }
        if (a.groups[a.n_groups - 1].n == 0) {
                ret = kdev_cli_usage_error(CMD, "container %zu has no device IDs", a.n_groups);
                goto out;
        }

        creqs = calloc(a.n_groups, sizeof(*creqs));
        cptrs = calloc(a.n_groups, sizeof(*cptrs));
        path = kdev_cli_socket_path(a.socket);
        if (!creqs || !cptrs || !path) {
                ret = kdev_cli_fail(CMD, "out of memory");
                goto out;
        }
        for (size_t i = 0; i < a.n_groups; i++) {
                v1beta1__container_allocate_request__init(&creqs[i]);
                creqs[i].n_devices_ids = a.groups[i].n;
                creqs[i].devices_ids = a.groups[i].v;
                cptrs[i] = &creqs[i];
        }
        V1beta1__AllocateRequest req = V1BETA1__ALLOCATE_REQUEST__INIT;
        req.n_container_requests = a.n_groups;
        req.container_requests = cptrs;
        ret = kdev_cli_unary(CMD, path, KDEV_DP_ALLOCATE, &req.base,
                             &v1beta1__allocate_response__descriptor, a.timeout_ms, &resp, false,
                             NULL);
        if (ret != KDEV_CLI_OK)
                goto out;
        const V1beta1__AllocateResponse *r = (const V1beta1__AllocateResponse *)resp;
        if (a.output == KDEV_CLI_OUTPUT_JSON) {
                ret = kdev_cli_print_json(CMD, resp);
        } else {
                for (size_t i = 0; i < r->n_container_responses; i++) {
                        if (i > 0)
                                putchar('\n');
                        if (print_container(i, i < a.n_groups ? &a.groups[i] : NULL,
                                            r->container_responses[i]) < 0) {
                                ret = kdev_cli_fail(CMD, "out of memory");
                                goto out;
                        }
                }
        }
        if (r->n_container_responses != a.n_groups) {
                /* kubelet fails a call answered with no container at all */
                ret = kdev_cli_fail(CMD, "%zu container requests answered with %zu container "
                                         "responses", a.n_groups, r->n_container_responses);
        }
out:
        protobuf_c_message_free_unpacked(resp, NULL);
        free(path);
        free(cptrs);
        free(creqs);
        free_args(&a);
        return ret;
}
