/* kdevctl quota: the API server's ResourceQuota admission over extended
 * resources and DRA device classes (sched/quota.h), offline, over quotas,
 * pods and claims read from files. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "kubelet/cli.h"
#include "kubelet/cmds.h"
#include "sched/objects.h"
#include "sched/quota.h"

static void quota_usage(FILE *f)
{
        fprintf(f,
                "Usage: kdevctl quota --quota FILE... [-o table|json] OBJECT_FILE...\n"
                "\n"
                "Would the API server's ResourceQuota admission let these pods and\n"
                "ResourceClaims be created? Quotas over extended resources\n"
                "(requests.nvidia.com/gpu; limits.<name> and a bare <name> are accepted by the\n"
                "API server but never charged, and are warned about) and over DRA device\n"
                "classes (<class>.deviceclass.resource.k8s.io/devices,\n"
                "count/resourceclaims.resource.k8s.io), with the used values of each quota's\n"
                "status (a quota without status starts at 0). Objects are admitted in order; an\n"
                "admitted one is charged. A refusal is the API server's message: 'pods \"p\" is\n"
                "forbidden: exceeded quota: Q, requested: ..., used: ..., limited: ...'. Quota\n"
                "scopes are not implemented; cpu and memory are not charged.\n"
                "\n"
                "Options:\n"
                "      --quota FILE     ResourceQuota objects (required, repeatable)\n"
                "  -o, --output FORMAT  table (default) or json\n"
                "  -h, --help           show this help\n"
                "\n"
                "Exit status: 0 every object admitted; 1 one refused, an invalid quota, or a\n"
                "file that cannot be read; 2 usage error.\n"
                "\n"
                "Examples:\n"
                "  kdevctl quota --quota quota.yaml pod.yaml claim.yaml\n");
}

enum { OPT_OUTPUT, OPT_QUOTA };

struct args {
        struct kdev_cli_strv quotas, files;
        enum kdev_cli_output output;
};

static int on_arg(int id, const char *value, void *ud, struct kdev_err *err)
{
        struct args *a = ud;
        if (id == OPT_OUTPUT)
                return kdev_cli_parse_output(value, &a->output, err);
        if (id == OPT_QUOTA)
                return kdev_cli_strv_add(&a->quotas, value);
        return kdev_cli_strv_add(&a->files, value);
}

static void args_clear(struct args *a)
{
        kdev_cli_strv_clear(&a->quotas);
        kdev_cli_strv_clear(&a->files);
}

#define QUOTA_CMD "quota"

int kdevctl_cmd_quota(int argc, char **argv)
{
        static const struct kdev_cli_opt opts[] = {
                {"output", 'o', true, OPT_OUTPUT},
                {"quota", 0, true, OPT_QUOTA},
        };
        struct args a = {0};
        struct kdev_err err = {0};
        int rc = kdev_cli_parse(argc, argv, opts, sizeof(opts) / sizeof(opts[0]), on_arg, &a, &err);
        if (rc == 1) {
                quota_usage(stdout);
                args_clear(&a);
                return KDEV_CLI_OK;
        }
        if (rc == 0 && a.quotas.n == 0)
                rc = kdev_err_set(&err, EINVAL, "--quota FILE is required");
        if (rc == 0 && a.files.n == 0)
                rc = kdev_err_set(&err, EINVAL, "no OBJECT_FILE given");
        if (rc < 0) {
                args_clear(&a);
                return kdev_cli_usage_error(QUOTA_CMD, "%s", err.msg);
        }
        int status = KDEV_CLI_FAIL;
        struct kdev_quota_set *set = kdev_quota_set_new();
        json_t *quotas = NULL, *objs = NULL, *results = json_array(), *warnings = json_array();
        if (!set || !results || !warnings) {
                kdev_cli_fail(QUOTA_CMD, "out of memory");
                goto out;
        }
        if (kdev_objects_load_all(a.quotas.v, a.quotas.n, &quotas, &err) < 0) {
                kdev_cli_fail(QUOTA_CMD, "%s", err.msg);
                goto out;
        }
        size_t i;
        json_t *o;
        json_array_foreach(quotas, i, o)
        {
                if (kdev_quota_set_add(set, o, warnings, &err) < 0) {
                        kdev_cli_fail(QUOTA_CMD, "%s", err.msg);
                        goto out;
                }
        }
        json_array_foreach(warnings, i, o) fprintf(stderr, "kdevctl " QUOTA_CMD ": warning: %s\n",
                                                   json_string_value(o));
        if (kdev_objects_load_all(a.files.v, a.files.n, &objs, &err) < 0) {
                kdev_cli_fail(QUOTA_CMD, "%s", err.msg);
                goto out;
        }
        bool all = true;
        json_array_foreach(objs, i, o)
        {
                json_t *r = kdev_quota_admit(set, o);
                if (!r) {
                        kdev_cli_fail(QUOTA_CMD, "out of memory");
                        goto out;
                }
                all = all && json_is_true(json_object_get(r, "allowed"));
                json_array_append_new(results, r);
        }
        if (a.output == KDEV_CLI_OUTPUT_JSON) {
                json_t *j = json_pack("{s:O,s:o,s:O}", "objects", results, "quotas",
                                      kdev_quota_set_json(set), "warnings", warnings);
                if (kdev_cli_print_json_value(QUOTA_CMD, j) != KDEV_CLI_OK)
                        goto out;
        } else {
                struct kdev_cli_table *t = kdev_cli_table_new(4, "KIND", "OBJECT", "ADMITTED", "MESSAGE");
                json_array_foreach(results, i, o)
                {
                        const char *m = json_string_value(json_object_get(o, "message"));
                        kdev_cli_table_add(t, json_string_value(json_object_get(o, "kind")),
                                           json_string_value(json_object_get(o, "object")),
                                           json_is_true(json_object_get(o, "allowed")) ? "yes" : "no",
                                           m && *m ? m : "-");
                }
                kdev_cli_table_print(t, stdout, NULL);
                kdev_cli_table_free(t);
        }
        status = all ? KDEV_CLI_OK : KDEV_CLI_FAIL;
out:
        json_decref(quotas);
        json_decref(objs);
        json_decref(results);
        json_decref(warnings);
        kdev_quota_set_free(set);
        args_clear(&a);
        return status;
}
