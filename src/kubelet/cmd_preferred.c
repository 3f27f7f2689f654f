/* kdevctl preferred SOCKET --available IDS [--must-include IDS] --size N:
 * calls GetPreferredAllocation for one container. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

#include "deviceplugin/v1beta1/api.pb-c.h"
#include "kubelet/cli.h"
#include "kubelet/cmds.h"

#define CMD "preferred"

static void usage(FILE *f)
{
        fprintf(f,
                "Usage: kdevctl preferred SOCKET --available ID[,ID...]\n"
                "                         [--must-include ID[,ID...]] --size N\n"
                "                         [-o table|json] [--timeout SEC]\n"
                "\n"
                "Calls GetPreferredAllocation on the device plugin listening on SOCKET with\n"
                "one container request, like kubelet does, and prints the device IDs the\n"
                "plugin prefers. --available and --must-include may be repeated; their lists\n"
                "are joined in order. The IDs are sent as given (not checked against each\n"
                "other), so a plugin's handling of bad requests can be tested too.\n"
                "\n"
                "SOCKET is a path; a bare file name that does not exist in the current\n"
                "directory is looked up in " KDEV_CLI_DEVICE_PLUGIN_DIR ".\n"
                "\n"
                "Options:\n"
                "      --available IDS     available_deviceIDs (required)\n"
                "      --must-include IDS  must_include_deviceIDs\n"
                "      --size N            allocation_size, 1 to 2147483647 (required)\n"
                "  -o, --output FORMAT     table (default) or json (proto3 JSON of the response)\n"
                "      --timeout SEC       RPC deadline in seconds (default %d; 0 = none)\n"
                "  -h, --help              show this help\n"
                "\n"
                "Exit status: 0 success, 1 RPC or connection failure, 2 usage error.\n"
                "\n"
                "Example:\n"
                "  kdevctl preferred /tmp/dp/kdev-example.com_fuse.sock \\\n"
                "      --available fuse::0,fuse::1,fuse::2 --must-include fuse::2 --size 2\n",
                KDEV_CLI_DEFAULT_TIMEOUT_S);
}

enum { OPT_OUTPUT, OPT_TIMEOUT, OPT_AVAILABLE, OPT_MUST, OPT_SIZE };

struct args {
        const char *socket;
        enum kdev_cli_output output;
        uint64_t timeout_ms;
        struct kdev_cli_strv available;
        struct kdev_cli_strv must;
        long long size;
        bool have_size;
};

static int on_arg(int id, const char *value, void *ud, struct kdev_err *err)
{
        struct args *a = ud;
        switch (id) {
        case OPT_OUTPUT:
                return kdev_cli_parse_output(value, &a->output, err);
        case OPT_TIMEOUT:
                return kdev_cli_parse_timeout(value, &a->timeout_ms, err);
        case OPT_AVAILABLE:
                return kdev_cli_strv_add_list(&a->available, value, "--available", err);
        case OPT_MUST:
                return kdev_cli_strv_add_list(&a->must, value, "--must-include", err);
        case OPT_SIZE:
                a->have_size = true;
                return kdev_cli_parse_int(value, "--size", 1, INT32_MAX, &a->size, err);
        default:
                if (a->socket)
                        return kdev_err_set(err, EINVAL, "unexpected argument \"%s\"", value);
                a->socket = value;
                return 0;
        }
}

int kdevctl_cmd_preferred(int argc, char **argv)
{
        static const struct kdev_cli_opt opts[] = {
                {"output", 'o', true, OPT_OUTPUT},
                {"timeout", 0, true, OPT_TIMEOUT},
                {"available", 0, true, OPT_AVAILABLE},
                {"must-include", 0, true, OPT_MUST},
                {"size", 0, true, OPT_SIZE},
        };
        struct args a = {.timeout_ms = KDEV_CLI_DEFAULT_TIMEOUT_S * 1000u};
        struct kdev_err err = {0};
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
        if (a.available.n == 0) {
                ret = kdev_cli_usage_error(CMD, "missing --available");
                goto out;
        }
        if (!a.have_size) {
                ret = kdev_cli_usage_error(CMD, "missing --size");
                goto out;
        }
        path = kdev_cli_socket_path(a.socket);
        if (!path) {
                ret = kdev_cli_fail(CMD, "out of memory");
                goto out;
        }
        V1beta1__ContainerPreferredAllocationRequest creq =
                V1BETA1__CONTAINER_PREFERRED_ALLOCATION_REQUEST__INIT;
        creq.n_available_deviceids = a.available.n;
        creq.available_deviceids = a.available.v;
        creq.n_must_include_deviceids = a.must.n;
        creq.must_include_deviceids = a.must.v;
        creq.allocation_size = (int32_t)a.size;
        V1beta1__ContainerPreferredAllocationRequest *cptr = &creq;
        V1beta1__PreferredAllocationRequest req = V1BETA1__PREFERRED_ALLOCATION_REQUEST__INIT;
        req.n_container_requests = 1;
        req.container_requests = &cptr;
        ret = kdev_cli_unary(CMD, path, KDEV_DP_GET_PREFERRED, &req.base,
                             &v1beta1__preferred_allocation_response__descriptor, a.timeout_ms,
                             &resp, false, NULL);
        if (ret != KDEV_CLI_OK)
                goto out;
        if (a.output == KDEV_CLI_OUTPUT_JSON) {
                ret = kdev_cli_print_json(CMD, resp);
                goto out;
        }
        const V1beta1__PreferredAllocationResponse *r =
                (const V1beta1__PreferredAllocationResponse *)resp;
        struct kdev_cli_table *t = kdev_cli_table_new(3, "CONTAINER", "COUNT", "DEVICE_IDS");
        for (size_t i = 0; t && i < r->n_container_responses; i++) {
                const V1beta1__ContainerPreferredAllocationResponse *c = r->container_responses[i];
                char idx[24], cnt[24];
                char *ids = kdev_cli_strv_join(c->deviceids, c->n_deviceids, ",");
                snprintf(idx, sizeof(idx), "%zu", i);
                snprintf(cnt, sizeof(cnt), "%zu", c->n_deviceids);
                if (!ids || kdev_cli_table_add(t, idx, cnt, c->n_deviceids ? ids : NULL) < 0) {
                        kdev_cli_table_free(t);
                        t = NULL;
                }
                free(ids);
        }
        if (!t) {
                ret = kdev_cli_fail(CMD, "out of memory");
                goto out;
        }
        kdev_cli_table_print(t, stdout, NULL);
        kdev_cli_table_free(t);
        if (r->n_container_responses != 1)
                ret = kdev_cli_fail(CMD, "1 container request answered with %zu container "
                                         "responses", r->n_container_responses);
out:
        protobuf_c_message_free_unpacked(resp, NULL);
        free(path);
        kdev_cli_strv_clear(&a.available);
        kdev_cli_strv_clear(&a.must);
        return ret;
}
