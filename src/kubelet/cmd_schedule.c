/* kdevctl schedule: the control plane's extended-resource fit
 * (sched/fit.h), offline, over a node and pods read from files. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "kubelet/cli.h"
#include "kubelet/cmds.h"
#include "sched/fit.h"
#include "sched/objects.h"

static void schedule_usage(FILE *f)
{
        fprintf(f,
                "Usage: kdevctl schedule --node FILE [--classes FILE]... [-o table|json] POD_FILE...\n"
                "\n"
                "Would these pods fit on that node? kube-scheduler's NodeResourcesFit filter for\n"
                "extended resources (nvidia.com/gpu, ...), offline. The node is a Node object\n"
                "(JSON or YAML, status.allocatable) or the state file 'kdevctl kubelet'\n"
                "writes (allocatable less what pods hold). Pods (JSON or YAML, several\n"
                "documents or a List per file) are first validated as the API server does\n"
                "(integers, requests == limits, a limit set; requests default to limits), then\n"
                "filtered in order; a pod that fits is placed, so the next sees less. The\n"
                "reason is the scheduler's: 'Insufficient nvidia.com/gpu'. A name the node\n"
                "offers as 0 but a DeviceClass of --classes maps (DRA extended resources) and\n"
                "the pod's resource claims are reported, not decided ('kdevctl dra' decides\n"
                "claims). cpu, memory and the pod count are not checked.\n"
                "\n"
                "Options:\n"
                "      --node FILE      the node (required)\n"
                "      --classes FILE   DeviceClass objects (repeatable)\n"
                "  -o, --output FORMAT  table (default) or json\n"
                "  -h, --help           show this help\n"
                "\n"
                "Exit status: 0 every pod fits; 1 a pod does not fit or is invalid, or a file\n"
                "cannot be read; 2 usage error.\n"
                "\n"
                "Examples:\n"
                "  kdevctl schedule --node node.yaml pod.yaml\n"
                "  kdevctl schedule --node /tmp/state.json -o json pods.yaml\n");
}

enum { OPT_OUTPUT, OPT_NODE, OPT_CLASSES };

struct args {
        const char *node;
        struct kdev_cli_strv classes, files;
        enum kdev_cli_output output;
};

static int on_arg(int id, const char *value, void *ud, struct kdev_err *err)
{
        struct args *a = ud;
        switch (id) {
        case OPT_OUTPUT:
                return kdev_cli_parse_output(value, &a->output, err);
        case OPT_NODE:
                if (a->node)
                        return kdev_err_set(err, EINVAL, "--node given twice");
                a->node = value;
                return 0;
        case OPT_CLASSES:
                return kdev_cli_strv_add(&a->classes, value);
        default:
                return kdev_cli_strv_add(&a->files, value);
        }
}

static void args_clear(struct args *a)
{
        kdev_cli_strv_clear(&a->classes);
        kdev_cli_strv_clear(&a->files);
}

/* The objects of |n| files, or NULL after printing the error. */
static json_t *load_all(const char *cmd, char *const *files, size_t n)
{
        json_t *all = NULL;
        struct kdev_err err = {0};
        if (kdev_objects_load_all(files, n, &all, &err) < 0)
                kdev_cli_fail(cmd, "%s", err.msg);
        return all;
}

#define SCHED_CMD "schedule"

int kdevctl_cmd_schedule(int argc, char **argv)
{
        static const struct kdev_cli_opt opts[] = {
                {"output", 'o', true, OPT_OUTPUT},
                {"node", 0, true, OPT_NODE},
                {"classes", 0, true, OPT_CLASSES},
        };
        struct args a = {0};
        struct kdev_err err = {0};
        int rc = kdev_cli_parse(argc, argv, opts, sizeof(opts) / sizeof(opts[0]), on_arg, &a, &err);
        if (rc == 1) {
                schedule_usage(stdout);
                args_clear(&a);
                return KDEV_CLI_OK;
        }
        if (rc == 0 && !a.node)
                rc = kdev_err_set(&err, EINVAL, "--node FILE is required");
        if (rc == 0 && a.files.n == 0)
                rc = kdev_err_set(&err, EINVAL, "no POD_FILE given");
        if (rc < 0) {
                args_clear(&a);
                return kdev_cli_usage_error(SCHED_CMD, "%s", err.msg);
        }
        int status = KDEV_CLI_FAIL;
        struct kdev_fit_node *node = NULL;
        json_t *nodes = NULL, *classes = NULL, *pods = NULL, *results = NULL;
        char *node_file[] = {(char *)a.node};
        if (!(nodes = load_all(SCHED_CMD, node_file, 1)))
                goto out;
        if (json_array_size(nodes) != 1) {
                kdev_cli_fail(SCHED_CMD, "%s: holds %zu objects; one node is expected", a.node,
                              json_array_size(nodes));
                goto out;
        }
        if (kdev_fit_node_from_json(json_array_get(nodes, 0), &node, &err) < 0) {
                kdev_cli_fail(SCHED_CMD, "%s: %s", a.node, err.msg);
                goto out;
        }
        if (!(classes = load_all(SCHED_CMD, a.classes.v, a.classes.n)))
                goto out;
        size_t i;
        json_t *o;
        json_array_foreach(classes, i, o) if (kdev_fit_node_add_class(node, o, &err) < 0)
        {
                kdev_cli_fail(SCHED_CMD, "%s", err.msg);
                goto out;
        }
        if (!(pods = load_all(SCHED_CMD, a.files.v, a.files.n)))
                goto out;
        results = json_array();
        bool all_fit = true;
        json_array_foreach(pods, i, o)
        {
                json_t *r = kdev_fit_pod(node, o);
                if (!r) {
                        kdev_cli_fail(SCHED_CMD, "out of memory");
                        goto out;
                }
                all_fit = all_fit && json_is_true(json_object_get(r, "fits"));
                json_array_append_new(results, r);
        }
        if (a.output == KDEV_CLI_OUTPUT_JSON) {
                json_t *j = json_pack("{s:O,s:o}", "pods", results, "node", kdev_fit_node_json(node));
                if (kdev_cli_print_json_value(SCHED_CMD, j) != KDEV_CLI_OK)
                        goto out;
        } else {
                struct kdev_cli_table *t = kdev_cli_table_new(4, "POD", "FITS", "STATUS", "REASON");
                json_array_foreach(results, i, o)
                {
                        json_t *d = json_object_get(o, "delegated"), *c = json_object_get(o, "claims");
                        char note[1024] = "";
                        const char *msg = json_string_value(json_object_get(o, "message"));
                        size_t n = (size_t)snprintf(note, sizeof(note), "%s", msg);
                        if (json_array_size(d) && n < sizeof(note))
                                n += (size_t)snprintf(note + n, sizeof(note) - n,
                                                      "%s%zu resource(s) left to DRA, not decided here",
                                                      n ? "; " : "", json_array_size(d));
                        if (json_array_size(c) && n < sizeof(note))
                                snprintf(note + n, sizeof(note) - n,
                                         "%s%zu claim(s) not decided here", n ? "; " : "",
                                         json_array_size(c));
                        kdev_cli_table_add(t, json_string_value(json_object_get(o, "pod")),
                                           json_is_true(json_object_get(o, "fits")) ? "yes" : "no",
                                           json_string_value(json_object_get(o, "status")),
                                           note[0] ? note : "-");
                }
                kdev_cli_table_print(t, stdout, NULL);
                kdev_cli_table_free(t);
        }
        status = all_fit ? KDEV_CLI_OK : KDEV_CLI_FAIL;
out:
        json_decref(nodes);
        json_decref(classes);
        json_decref(pods);
        json_decref(results);
        kdev_fit_node_free(node);
        args_clear(&a);
        return status;
}
