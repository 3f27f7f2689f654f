/* kdevctl options SOCKET: calls GetDevicePluginOptions. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

#include "deviceplugin/v1beta1/api.pb-c.h"
#include "kubelet/cli.h"
#include "kubelet/cmds.h"

#define CMD "options"

static void usage(FILE *f)
{
        fprintf(f,
                "Usage: kdevctl options SOCKET [-o table|json] [--timeout SEC]\n"
                "\n"
                "Calls GetDevicePluginOptions on the device plugin listening on SOCKET and\n"
                "prints its options.\n"
                "\n"
                "SOCKET is a path; a bare file name that does not exist in the current\n"
                "directory is looked up in " KDEV_CLI_DEVICE_PLUGIN_DIR ".\n"
                "\n"
                "Options:\n"
                "  -o, --output FORMAT  table (default) or json (proto3 JSON of the response)\n"
                "      --timeout SEC    RPC deadline in seconds (default %d; 0 = none)\n"
                "  -h, --help           show this help\n"
                "\n"
                "Exit status: 0 success, 1 RPC or connection failure, 2 usage error.\n"
                "\n"
                "Examples:\n"
                "  kdevctl options kdev-nvidia.com_gpu.sock\n"
                "  kdevctl options /tmp/dp/kdev-example.com_null.sock -o json\n",
                KDEV_CLI_DEFAULT_TIMEOUT_S);
}

enum { OPT_OUTPUT, OPT_TIMEOUT };

struct args {
        const char *socket;
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
        default:
                if (a->socket)
                        return kdev_err_set(err, EINVAL, "unexpected argument \"%s\"", value);
                a->socket = value;
                return 0;
        }
}

int kdevctl_cmd_options(int argc, char **argv)
{
        static const struct kdev_cli_opt opts[] = {
                {"output", 'o', true, OPT_OUTPUT},
                {"timeout", 0, true, OPT_TIMEOUT},
        };
        struct args a = {.timeout_ms = KDEV_CLI_DEFAULT_TIMEOUT_S * 1000u};
        struct kdev_err err = {0};
        int rc = kdev_cli_parse(argc, argv, opts, sizeof(opts) / sizeof(opts[0]), on_arg, &a, &err);
        if (rc == 1) {
                usage(stdout);
                return KDEV_CLI_OK;
        }
        if (rc < 0)
                return kdev_cli_usage_error(CMD, "%s", err.msg);
        if (!a.socket)
                return kdev_cli_usage_error(CMD, "missing SOCKET");

        char *path = kdev_cli_socket_path(a.socket);
        if (!path)
                return kdev_cli_fail(CMD, "out of memory");
        V1beta1__Empty req = V1BETA1__EMPTY__INIT;
        ProtobufCMessage *resp = NULL;
        int ret = kdev_cli_unary(CMD, path, KDEV_DP_GET_OPTIONS, &req.base,
                                 &v1beta1__device_plugin_options__descriptor, a.timeout_ms, &resp,
                                 false, NULL);
        free(path);
        if (ret != KDEV_CLI_OK)
                return ret;
        if (a.output == KDEV_CLI_OUTPUT_JSON) {
                ret = kdev_cli_print_json(CMD, resp);
        } else {
                const V1beta1__DevicePluginOptions *o = (const V1beta1__DevicePluginOptions *)resp;
                struct kdev_cli_table *t = kdev_cli_table_new(
                        2, "PRE_START_REQUIRED", "GET_PREFERRED_ALLOCATION_AVAILABLE");
                if (!t || kdev_cli_table_add(t, o->pre_start_required ? "true" : "false",
                                             o->get_preferred_allocation_available ? "true"
                                                                                   : "false") < 0) {
                        ret = kdev_cli_fail(CMD, "out of memory");
                } else {
                        kdev_cli_table_print(t, stdout, NULL);
                }
                kdev_cli_table_free(t);
        }
        protobuf_c_message_free_unpacked(resp, NULL);
        return ret;
}
