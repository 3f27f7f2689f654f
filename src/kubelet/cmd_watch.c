/* kdevctl watch SOCKET: streams ListAndWatch and prints every device list. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>
#include <uv.h>

#include "deviceplugin/v1beta1/api.pb-c.h"
#include "kubelet/cli.h"
#include "kubelet/cmds.h"
#include "kubelet/pbjson.h"
#include "rpc/rpc.h"

#define CMD "watch"

static void usage(FILE *f)
{
        fprintf(f,
                "Usage: kdevctl watch SOCKET [--count N] [--timeout SEC] [-o table|json]\n"
                "\n"
                "Calls ListAndWatch on the device plugin listening on SOCKET and prints every\n"
                "device list it sends, as kubelet receives them: a line\n"
                "  Update K: D devices (H healthy)\n"
                "then a table ID, HEALTH, NUMA. NUMA lists the topology's NUMA node IDs\n"
                "(\"0,1\"); \"-\" means the device has no topology, \"none\" a topology with no\n"
                "nodes. Updates are separated by a blank line. A device is healthy only when\n"
                "its health is exactly \"Healthy\" (kubelet's rule).\n"
                "\n"
                "Stops after N updates, when the plugin ends the stream, or after --timeout.\n"
                "\n"
                "SOCKET is a path; a bare file name that does not exist in the current\n"
                "directory is looked up in " KDEV_CLI_DEVICE_PLUGIN_DIR ".\n"
                "\n"
                "Options:\n"
                "      --count N        stop after N updates (default: no limit)\n"
                "      --timeout SEC    stop watching after SEC seconds (default 0 = never)\n"
                "  -o, --output FORMAT  table (default) or json: one proto3 JSON\n"
                "                       ListAndWatchResponse per line\n"
                "  -h, --help           show this help\n"
                "\n"
                "Exit status: 0 when N updates arrived, or, without --count, when the stream\n"
                "ended with status OK or the timeout passed; 1 on an RPC or connection error,\n"
                "or when the stream ended or the timeout passed before N updates; 2 usage\n"
                "error.\n"
                "\n"
                "Examples:\n"
                "  kdevctl watch kdev-nvidia.com_gpu.sock\n"
                "  kdevctl watch /tmp/dp/kdev-nvidia.com_gpu.sock --count 1 -o json\n");
}

enum { OPT_OUTPUT, OPT_TIMEOUT, OPT_COUNT };

struct args {
        const char *socket;
        enum kdev_cli_output output;
        uint64_t timeout_ms;
        long long count; /* 0 = unlimited */
};

static int on_arg(int id, const char *value, void *ud, struct kdev_err *err)
{
        struct args *a = ud;
        switch (id) {
        case OPT_OUTPUT:
                return kdev_cli_parse_output(value, &a->output, err);
        case OPT_TIMEOUT:
                return kdev_cli_parse_timeout(value, &a->timeout_ms, err);
        case OPT_COUNT:
                return kdev_cli_parse_int(value, "--count", 1, 1000000000, &a->count, err);
        default:
                if (a->socket)
                        return kdev_err_set(err, EINVAL, "unexpected argument \"%s\"", value);
                a->socket = value;
                return 0;
        }
}

struct watch {
        const struct args *args;
        struct kdev_rpc_client *client;
        struct kdev_rpc_client_call *call; /* NULL once on_done ran */
        uv_timer_t step;                   /* runs stop/close steps outside rpc callbacks */
        uv_timer_t deadline;
        long long updates;
        bool stopping;  /* enough updates: cancel */
        bool timed_out; /* --timeout passed: cancel */
        bool closed;
        int status;     /* final gRPC status */
        char message[KDEV_ERR_MSG_MAX];
        int local_error; /* printing or decoding failure */
};

static void close_cb(uv_handle_t *h)
{
        (void)h;
}

static void step_cb(uv_timer_t *t)
{
        struct watch *w = t->data;
        if (w->call) {
                /* on_done runs (now or later) and schedules the next step */
                kdev_rpc_client_call_cancel(w->call);
                return;
        }
        if (w->closed)
                return;
        w->closed = true;
        kdev_rpc_client_close(w->client);
        w->client = NULL;
        uv_close((uv_handle_t *)&w->step, close_cb);
        uv_close((uv_handle_t *)&w->deadline, close_cb);
}

static void deadline_cb(uv_timer_t *t)
{
        struct watch *w = t->data;
        w->timed_out = true;
        uv_timer_start(&w->step, step_cb, 0, 0);
}

static const char *numa_text(const V1beta1__Device *d, char *buf, size_t size)
{
        if (!d->topology)
                return "-";
        if (d->topology->n_nodes == 0)
                return "none";
        size_t n = 0;
        buf[0] = '\0';
        for (size_t i = 0; i < d->topology->n_nodes && n < size; i++) {
                int64_t id = d->topology->nodes[i] ? d->topology->nodes[i]->id : 0;
                int k = snprintf(buf + n, size - n, "%s%lld", i ? "," : "", (long long)id);
                if (k < 0)
                        break;
                n += (size_t)k;
        }
        return buf;
}

static int print_update(struct watch *w, const V1beta1__ListAndWatchResponse *r)
{
        if (w->args->output == KDEV_CLI_OUTPUT_JSON) {
                struct kdev_err err = {0};
                json_t *j = kdev_pbjson_from_msg(&r->base, &err);
                char *text = j ? json_dumps(j, JSON_COMPACT) : NULL;
                json_decref(j);
                if (!text)
                        return kdev_cli_fail(CMD, "cannot print update as JSON: %s",
                                             err.msg[0] ? err.msg : "out of memory");
                puts(text);
                free(text);
                fflush(stdout);
                return 0;
        }
        size_t healthy = 0;
        for (size_t i = 0; i < r->n_devices; i++) {
                if (strcmp(r->devices[i]->health, "Healthy") == 0)
                        healthy++;
        }
        if (w->updates > 1)
                putchar('\n');
        printf("Update %lld: %zu device%s (%zu healthy)\n", w->updates, r->n_devices,
               r->n_devices == 1 ? "" : "s", healthy);
        if (r->n_devices > 0) {
                struct kdev_cli_table *t = kdev_cli_table_new(3, "ID", "HEALTH", "NUMA");
                int rc = t ? 0 : -ENOMEM;
                for (size_t i = 0; rc == 0 && i < r->n_devices; i++) {
                        char numa[256];
                        const V1beta1__Device *d = r->devices[i];
                        rc = kdev_cli_table_add(t, d->id[0] ? d->id : "\"\"",
                                                d->health[0] ? d->health : "\"\"",
                                                numa_text(d, numa, sizeof(numa)));
                }
                if (rc == 0)
                        kdev_cli_table_print(t, stdout, NULL);
                kdev_cli_table_free(t);
                if (rc < 0)
                        return kdev_cli_fail(CMD, "out of memory");
        }
        fflush(stdout);
        return 0;
}

static void on_message(struct kdev_rpc_client_call *call, const uint8_t *msg, size_t len,
                       void *ud)
{
        static const uint8_t empty[1];
        struct watch *w = ud;
        (void)call;
        if (w->stopping || w->timed_out || w->local_error)
                return;
        V1beta1__ListAndWatchResponse *r =
                v1beta1__list_and_watch_response__unpack(NULL, len, len ? msg : empty);
        if (!r) {
                w->local_error = kdev_cli_fail(CMD, "cannot decode a ListAndWatchResponse "
                                                    "(%zu bytes)", len);
        } else {
                w->updates++;
                if (print_update(w, r) != 0)
                        w->local_error = KDEV_CLI_FAIL;
                v1beta1__list_and_watch_response__free_unpacked(r, NULL);
        }
        if (w->local_error || (w->args->count && w->updates >= w->args->count)) {
                w->stopping = true;
                uv_timer_start(&w->step, step_cb, 0, 0);
        }
}

static void on_done(struct kdev_rpc_client_call *call, int status, const char *message, void *ud)
{
        struct watch *w = ud;
        (void)call;
        w->call = NULL;
        w->status = status;
        snprintf(w->message, sizeof(w->message), "%s", message ? message : "");
        uv_timer_stop(&w->deadline);
        uv_timer_start(&w->step, step_cb, 0, 0);
}

int kdevctl_cmd_watch(int argc, char **argv)
{
        static const struct kdev_cli_opt opts[] = {
                {"output", 'o', true, OPT_OUTPUT},
                {"timeout", 0, true, OPT_TIMEOUT},
                {"count", 0, true, OPT_COUNT},
        };
        struct args a = {.timeout_ms = 0};
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
        if (kdev_cli_check_socket(path, &err) < 0) {
                free(path);
                return kdev_cli_fail(CMD, "%s", err.msg);
        }
        uv_loop_t loop;
        if (uv_loop_init(&loop) != 0) {
                free(path);
                return kdev_cli_fail(CMD, "cannot create an event loop");
        }
        struct watch w = {.args = &a};
        uv_timer_init(&loop, &w.step);
        uv_timer_init(&loop, &w.deadline);
        w.step.data = &w;
        w.deadline.data = &w;
        int ret = KDEV_CLI_OK;
        w.client = kdev_rpc_client_new(&loop, path, NULL);
        if (!w.client) {
                ret = kdev_cli_fail(CMD, "out of memory");
        } else {
                /* the deadline is local, not grpc-timeout: reaching it is how a
                 * timed watch ends, not a failure of the call */
                static const uint8_t no_bytes[1];
                w.call = kdev_rpc_client_call(w.client, KDEV_DP_LIST_AND_WATCH, no_bytes, 0, 0,
                                              on_message, on_done, &w, &err);
                if (!w.call)
                        ret = kdev_cli_fail(CMD, "%s: %s", path, err.msg);
                else if (a.timeout_ms)
                        uv_timer_start(&w.deadline, deadline_cb, a.timeout_ms, 0);
        }
        if (!w.call) /* nothing to wait for: close at once */
                uv_timer_start(&w.step, step_cb, 0, 0);
        uv_run(&loop, UV_RUN_DEFAULT);
        if (uv_loop_close(&loop) != 0)
                ret = kdev_cli_fail(CMD, "event loop still busy at exit");
        free(path);
        if (ret != KDEV_CLI_OK)
                return ret;

        if (w.local_error)
                return w.local_error;
        if (w.stopping) /* --count reached */
                return KDEV_CLI_OK;
        if (w.timed_out) {
                if (a.count)
                        return kdev_cli_fail(CMD, "timed out after %lld of %lld updates",
                                             w.updates, a.count);
                return KDEV_CLI_OK;
        }
        if (w.status != KDEV_RPC_OK)
                return kdev_cli_rpc_error(CMD, w.status, w.message);
        fprintf(stderr, "kdevctl %s: stream ended after %lld update%s\n", CMD, w.updates,
                w.updates == 1 ? "" : "s");
        if (a.count)
                return KDEV_CLI_FAIL;
        return KDEV_CLI_OK;
}
