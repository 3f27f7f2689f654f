/* kdevctl plugins [DIR]: lists the Unix sockets of a device-plugin directory,
 * tests which ones accept connections, and asks live plugins for their
 * DevicePluginOptions. */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <jansson.h>

#include "deviceplugin/v1beta1/api.pb-c.h"
#include "kubelet/cli.h"
#include "kubelet/cmds.h"
#include "kubelet/pbjson.h"

#define CMD "plugins"

static void usage(FILE *f)
{
        fprintf(f,
                "Usage: kdevctl plugins [DIR] [-o table|json] [--timeout SEC]\n"
                "\n"
                "Lists the Unix sockets in DIR (default " KDEV_CLI_DEVICE_PLUGIN_DIR "),\n"
                "sorted by name. For each one: ROLE (kubelet for " KDEV_CLI_KUBELET_SOCKET_NAME
                ", plugin\n"
                "otherwise), STATE (live: something accepts connections; dead: nobody\n"
                "listens; error: the test failed, e.g. permission denied) and, for live\n"
                "plugins, the DevicePluginOptions they answer (\"?\" when that call fails; the\n"
                "error goes to stderr). Other files are ignored.\n"
                "\n"
                "Options:\n"
                "  -o, --output FORMAT  table (default) or json: an array of\n"
                "                       {name, path, role, state, options?, error?}\n"
                "      --timeout SEC    deadline of each GetDevicePluginOptions call\n"
                "                       (default %d; 0 = none)\n"
                "  -h, --help           show this help\n"
                "\n"
                "Files:\n"
                "  /var/lib/kubelet/device-plugins  the default DIR\n"
                "\n"
                "Exit status: 0 success, 1 DIR cannot be read or a socket could not be\n"
                "tested or a live plugin failed to answer (the list is still printed),\n"
                "2 usage error.\n"
                "\n"
                "Examples:\n"
                "  kdevctl plugins\n"
                "  kdevctl plugins /tmp/dp -o json\n",
                KDEV_CLI_DEFAULT_TIMEOUT_S);
}

enum { OPT_OUTPUT, OPT_TIMEOUT };

struct args {
        const char *dir;
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
                if (a->dir)
                        return kdev_err_set(err, EINVAL, "unexpected argument \"%s\"", value);
                a->dir = value;
                return 0;
        }
}

struct entry {
        char *name;
        char *path;
        bool kubelet;
        enum kdev_cli_sock_state state;
        int errnum;
        V1beta1__DevicePluginOptions *options; /* live plugins that answered */
        char *error;                           /* probe or RPC failure */
};

static int entry_cmp(const void *x, const void *y)
{
        const struct entry *a = x, *b = y;
        return strcmp(a->name, b->name);
}

static const char *state_name(enum kdev_cli_sock_state s)
{
        switch (s) {
        case KDEV_CLI_SOCK_LIVE:
                return "live";
        case KDEV_CLI_SOCK_DEAD:
                return "dead";
        default:
                return "error";
        }
}

/* Reads the sockets of |dir| into |*out| (sorted). Returns the count or a
 * negative errno with |err|. */
static int list_sockets(const char *dir, struct entry **out, struct kdev_err *err)
{
        DIR *d = opendir(dir);
        if (!d)
                return kdev_err_set(err, errno, "cannot read %s: %s", dir, strerror(errno));
        struct entry *v = NULL;
        size_t n = 0;
        struct dirent *de;
        int rc = 0;
        while ((de = readdir(d)) != NULL) {
                struct stat st;
                size_t len = strlen(dir) + strlen(de->d_name) + 2;
                char *path = malloc(len);
                if (!path) {
                        rc = kdev_err_set(err, ENOMEM, "out of memory");
                        break;
                }
                snprintf(path, len, "%s/%s", dir, de->d_name);
                if (lstat(path, &st) < 0 || !S_ISSOCK(st.st_mode)) {
                        free(path);
                        continue;
                }
                struct entry *nv = realloc(v, (n + 1) * sizeof(*nv));
                char *name = strdup(de->d_name);
                if (!nv || !name) {
                        free(path);
                        free(name);
                        if (nv)
                                v = nv;
                        rc = kdev_err_set(err, ENOMEM, "out of memory");
                        break;
                }
                v = nv;
                v[n++] = (struct entry){.name = name, .path = path};
        }
        closedir(d);
        if (rc < 0) {
                for (size_t i = 0; i < n; i++) {
                        free(v[i].name);
                        free(v[i].path);
                }
                free(v);
                return rc;
        }
        if (n)
                qsort(v, n, sizeof(*v), entry_cmp);
        *out = v;
        return (int)n;
}

static void probe(struct entry *e, uint64_t timeout_ms)
{
        e->kubelet = strcmp(e->name, KDEV_CLI_KUBELET_SOCKET_NAME) == 0;
        e->state = kdev_cli_probe_socket(e->path, &e->errnum);
        if (e->state == KDEV_CLI_SOCK_ERROR) {
                e->error = strdup(strerror(e->errnum));
                return;
        }
        if (e->state != KDEV_CLI_SOCK_LIVE || e->kubelet)
                return;
        V1beta1__Empty req = V1BETA1__EMPTY__INIT;
        ProtobufCMessage *resp = NULL;
        struct kdev_err err = {0};
        if (kdev_cli_unary(CMD, e->path, KDEV_DP_GET_OPTIONS, &req.base,
                           &v1beta1__device_plugin_options__descriptor, timeout_ms, &resp, true,
                           &err) == KDEV_CLI_OK)
                e->options = (V1beta1__DevicePluginOptions *)resp;
        else
                e->error = strdup(err.msg);
}

static const char *yes_no(bool b)
{
        return b ? "true" : "false";
}

static int print_table(const struct entry *v, size_t n)
{
        struct kdev_cli_table *t = kdev_cli_table_new(5, "NAME", "ROLE", "STATE",
                                                      "PRE_START_REQUIRED",
                                                      "GET_PREFERRED_ALLOCATION_AVAILABLE");
        int rc = t ? 0 : -ENOMEM;
        for (size_t i = 0; rc == 0 && i < n; i++) {
                const struct entry *e = &v[i];
                const char *pre = NULL, *pref = NULL;
                if (e->options) {
                        pre = yes_no(e->options->pre_start_required);
                        pref = yes_no(e->options->get_preferred_allocation_available);
                } else if (e->state == KDEV_CLI_SOCK_LIVE && !e->kubelet) {
                        pre = pref = "?";
                }
                rc = kdev_cli_table_add(t, e->name, e->kubelet ? "kubelet" : "plugin",
                                        state_name(e->state), pre, pref);
        }
        if (rc == 0)
                kdev_cli_table_print(t, stdout, NULL);
        kdev_cli_table_free(t);
        return rc;
}

static int print_json(const struct entry *v, size_t n)
{
        json_t *arr = json_array();
        int rc = arr ? 0 : -ENOMEM;
        for (size_t i = 0; rc == 0 && i < n; i++) {
                const struct entry *e = &v[i];
                json_t *o = json_pack("{s:s, s:s, s:s, s:s}", "name", e->name, "path", e->path,
                                      "role", e->kubelet ? "kubelet" : "plugin", "state",
                                      state_name(e->state));
                if (!o) {
                        rc = -EILSEQ;
                        break;
                }
                if (e->options) {
                        json_t *opt = kdev_pbjson_from_msg(&e->options->base, NULL);
                        if (!opt || json_object_set_new(o, "options", opt) < 0)
                                rc = -ENOMEM;
                }
                if (e->error && json_object_set_new(o, "error", json_string(e->error)) < 0)
                        rc = -ENOMEM;
                if (json_array_append_new(arr, o) < 0)
                        rc = -ENOMEM;
        }
        if (rc == 0) {
                char *text = json_dumps(arr, JSON_INDENT(2));
                if (text) {
                        puts(text);
                        free(text);
                } else {
                        rc = -ENOMEM;
                }
        }
        json_decref(arr);
        return rc;
}

int kdevctl_cmd_plugins(int argc, char **argv)
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
        const char *dir = a.dir ? a.dir : KDEV_CLI_DEVICE_PLUGIN_DIR;

        struct entry *v = NULL;
        int n = list_sockets(dir, &v, &err);
        if (n < 0)
                return kdev_cli_fail(CMD, "%s", err.msg);
        int ret = KDEV_CLI_OK;
        for (int i = 0; i < n; i++) {
                probe(&v[i], a.timeout_ms);
                if (v[i].error)
                        ret = kdev_cli_fail(CMD, "%s: %s", v[i].name, v[i].error);
        }
        if (a.output == KDEV_CLI_OUTPUT_JSON)
                rc = print_json(v, (size_t)n);
        else if (n == 0)
                fprintf(stderr, "kdevctl %s: no sockets in %s\n", CMD, dir);
        else
                rc = print_table(v, (size_t)n);
        if (rc < 0)
                ret = kdev_cli_fail(CMD, "cannot print the list: %s", strerror(-rc));
        for (int i = 0; i < n; i++) {
                free(v[i].name);
                free(v[i].path);
                free(v[i].error);
                protobuf_c_message_free_unpacked((ProtobufCMessage *)v[i].options, NULL);
        }
        free(v);
        return ret;
}
