/* kdevctl share REGION: a container's share region (share/region.h): the
 * GPUs with their limits and use, and the use per process. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "kubelet/cli.h"
#include "kubelet/cmds.h"
#include "share/region.h"

#define CMD "share"

static void usage(FILE *f)
{
        fprintf(f,
                "Usage: kdevctl share REGION [-o table|json]\n"
                "\n"
                "Prints the usage of one container's share region: REGION is the region\n"
                "directory (kdev-plugin's <share root>/containers/<allocation id>, the\n"
                "container's /var/run/kdev/share) or its region file. For each GPU of the\n"
                "container's limits: UUID, memory limit and memory in use (bytes), compute\n"
                "share (percent); for each process of the container that holds a slot: pid\n"
                "(in the container's pid namespace), uid, memory in use per GPU (bytes),\n"
                "kernel launches and the time its launches were paced (ns).\n"
                "\n"
                "Options:\n"
                "  -o, --output FORMAT  table (default) or json\n"
                "  -h, --help           show this help\n"
                "\n"
                "Exit status: 0 printed; 1 no region there, not a share region, or another\n"
                "version of it; 2 usage error.\n"
                "\n"
                "Files:\n"
                "  REGION/region  the accounting file every process of the container maps\n"
                "\n"
                "Examples:\n"
                "  kdevctl share /var/lib/kdev/share/containers/0c1f9e\n"
                "  kdevctl share /var/lib/kdev/share/containers/0c1f9e -o json\n");
}

enum { OPT_OUTPUT };

struct args {
        const char *dir;
        enum kdev_cli_output output;
};

static int on_arg(int id, const char *value, void *ud, struct kdev_err *err)
{
        struct args *a = ud;
        if (id == OPT_OUTPUT)
                return kdev_cli_parse_output(value, &a->output, err);
        if (a->dir)
                return kdev_err_set(err, EINVAL, "unexpected argument \"%s\"", value);
        a->dir = value;
        return 0;
}

static json_t *to_json(const char *dir, const struct kdev_share_usage *u)
{
        json_t *gpus = json_array(), *procs = json_array();
        for (size_t g = 0; g < u->n_gpus; g++)
                json_array_append_new(gpus, json_pack("{s:I,s:s,s:I,s:I,s:I}", "index",
                                                      (json_int_t)g, "uuid", u->gpu[g].uuid,
                                                      "memoryLimit", (json_int_t)u->gpu[g].memory,
                                                      "memoryUsed", (json_int_t)u->used[g],
                                                      "computePercent",
                                                      (json_int_t)u->gpu[g].compute));
        for (size_t i = 0; i < u->n_procs; i++) {
                const struct kdev_share_usage_proc *p = &u->proc[i];
                json_t *pg = json_array();
                for (size_t g = 0; g < u->n_gpus; g++)
                        json_array_append_new(pg, json_pack("{s:I,s:I,s:I,s:I}", "index",
                                                            (json_int_t)g, "memoryUsed",
                                                            (json_int_t)p->used[g], "launches",
                                                            (json_int_t)p->launches[g], "pacedNs",
                                                            (json_int_t)p->paced_ns[g]));
                json_array_append_new(procs, json_pack("{s:i,s:I,s:o}", "pid", (int)p->pid, "uid",
                                                       (json_int_t)p->uid, "gpus", pg));
        }
        return json_pack("{s:s,s:s,s:b,s:o,s:o}", "region", dir, "policy",
                         kdev_share_policy_name(u->policy), "limitsError", u->limits_error,
                         "gpus", gpus, "processes", procs);
}

static void print_table(const char *dir, const struct kdev_share_usage *u)
{
        printf("Region: %s\n", dir);
        printf("Policy: %s\n", kdev_share_policy_name(u->policy));
        if (u->limits_error)
                printf("Limits: malformed (every allocation is refused)\n");
        printf("\nGPUs:");
        if (u->n_gpus == 0) {
                printf(" none\n");
        } else {
                printf("\n");
                struct kdev_cli_table *t = kdev_cli_table_new(5, "INDEX", "UUID", "MEMORY-LIMIT",
                                                              "MEMORY-USED", "COMPUTE");
                for (size_t g = 0; t && g < u->n_gpus; g++) {
                        char i[24], lim[24], used[24], pct[24];
                        snprintf(i, sizeof(i), "%zu", g);
                        snprintf(lim, sizeof(lim), "%" PRIu64, u->gpu[g].memory);
                        snprintf(used, sizeof(used), "%" PRIu64, u->used[g]);
                        snprintf(pct, sizeof(pct), "%u%%", u->gpu[g].compute);
                        kdev_cli_table_add(t, i, u->gpu[g].uuid, lim, used, pct);
                }
                if (t)
                        kdev_cli_table_print(t, stdout, "  ");
                kdev_cli_table_free(t);
        }
        printf("\nProcesses:");
        if (u->n_procs == 0) {
                printf(" none\n");
                return;
        }
        printf("\n");
        struct kdev_cli_table *t = kdev_cli_table_new(6, "PID", "UID", "GPU", "MEMORY-USED",
                                                      "LAUNCHES", "PACED-NS");
        for (size_t i = 0; t && i < u->n_procs; i++)
                for (size_t g = 0; g < u->n_gpus; g++) {
                        const struct kdev_share_usage_proc *p = &u->proc[i];
                        char pid[24], uid[24], gi[24], used[24], l[24], pn[24];
                        snprintf(pid, sizeof(pid), "%d", (int)p->pid);
                        snprintf(uid, sizeof(uid), "%u", p->uid);
                        snprintf(gi, sizeof(gi), "%zu", g);
                        snprintf(used, sizeof(used), "%" PRIu64, p->used[g]);
                        snprintf(l, sizeof(l), "%" PRIu64, p->launches[g]);
                        snprintf(pn, sizeof(pn), "%" PRIu64, p->paced_ns[g]);
                        kdev_cli_table_add(t, pid, uid, gi, used, l, pn);
                }
        if (t)
                kdev_cli_table_print(t, stdout, "  ");
        kdev_cli_table_free(t);
}

int kdevctl_cmd_share(int argc, char **argv)
{
        static const struct kdev_cli_opt opts[] = {{"output", 'o', true, OPT_OUTPUT}};
        struct args a = {0};
        struct kdev_err err = {0};
        int rc = kdev_cli_parse(argc, argv, opts, 1, on_arg, &a, &err);
        if (rc == 1) {
                usage(stdout);
                return KDEV_CLI_OK;
        }
        if (rc < 0)
                return kdev_cli_usage_error(CMD, "%s", err.msg);
        if (!a.dir)
                return kdev_cli_usage_error(CMD, "missing REGION (the region directory)");
        /* the region file itself names its directory */
        char dir[4096];
        snprintf(dir, sizeof(dir), "%s", a.dir);
        size_t n = strlen(dir);
        if (n >= 7 && strcmp(dir + n - 7, "/region") == 0)
                dir[n - 7] = '\0';
        struct kdev_share_usage *u = malloc(sizeof(*u));
        if (!u)
                return kdev_cli_fail(CMD, "out of memory");
        char msg[512];
        if (kdev_share_usage_read(dir, u, msg, sizeof(msg)) != 0) {
                free(u);
                return kdev_cli_fail(CMD, "%s", msg);
        }
        int ret = KDEV_CLI_OK;
        if (a.output == KDEV_CLI_OUTPUT_JSON) {
                json_t *j = to_json(dir, u);
                char *s = j ? json_dumps(j, JSON_INDENT(2) | JSON_PRESERVE_ORDER) : NULL;
                if (s)
                        printf("%s\n", s);
                else
                        ret = kdev_cli_fail(CMD, "out of memory");
                free(s);
                json_decref(j);
        } else {
                print_table(dir, u);
        }
        free(u);
        return ret;
}
