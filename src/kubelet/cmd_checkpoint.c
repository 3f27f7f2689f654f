/* kdevctl checkpoint [FILE]: decodes and verifies kubelet's device manager
 * checkpoint (kubelet_internal_checkpoint). */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <jansson.h>

#include "deviceplugin/v1beta1/api.pb-c.h"
#include "kubelet/checkpoint.h"
#include "kubelet/cli.h"
#include "kubelet/cmds.h"
#include "kubelet/devmgr.h"
#include "kubelet/pbjson.h"

#define CMD "checkpoint"

static void usage(FILE *f)
{
        fprintf(f,
                "Usage: kdevctl checkpoint [FILE|DIR] [-o table|json]\n"
                "\n"
                "Decodes kubelet's device manager checkpoint and verifies its checksum.\n"
                "FILE defaults to " KDEV_CLI_DEVICE_PLUGIN_DIR "/" KDEV_CKPT_FILE ";\n"
                "a directory means the checkpoint inside it.\n"
                "\n"
                "Prints the registered resources (healthy device IDs at the last write) and\n"
                "every pod device entry: pod UID, container, resource, device IDs per NUMA\n"
                "node (-1 = no topology), and the decoded Allocate response (envs, mounts,\n"
                "device specs, annotations, CDI devices). Both layouts are read: the current\n"
                "one (kubelet >= 1.20) and the pre-1.20 flat DeviceIDs list, which kubelet\n"
                "converts by putting every device under NUMA node 0 and whose checksum is\n"
                "the one kubelet 1.19 wrote.\n"
                "\n"
                "Options:\n"
                "  -o, --output FORMAT  table (default) or json\n"
                "  -h, --help           show this help\n"
                "\n"
                "Exit status: 0 decoded and checksum OK; 1 missing or unreadable file, not\n"
                "JSON, wrong structure or types, AllocResp not base64 or not a\n"
                "ContainerAllocateResponse, or checksum mismatch; 2 usage error.\n"
                "\n"
                "Files:\n"
                "  /var/lib/kubelet/device-plugins/kubelet_internal_checkpoint  the default FILE\n"
                "\n"
                "Examples:\n"
                "  kdevctl checkpoint\n"
                "  kdevctl checkpoint /tmp/dp -o json\n");
}

enum { OPT_OUTPUT };

struct args {
        const char *file;
        enum kdev_cli_output output;
};

static int on_arg(int id, const char *value, void *ud, struct kdev_err *err)
{
        struct args *a = ud;
        if (id == OPT_OUTPUT)
                return kdev_cli_parse_output(value, &a->output, err);
        if (a->file)
                return kdev_err_set(err, EINVAL, "unexpected argument \"%s\"", value);
        a->file = value;
        return 0;
}

static const char *layout_text(enum kdev_ckpt_layout l)
{
        return l == KDEV_CKPT_LAYOUT_V1 ? "pre-1.20 (flat DeviceIDs list, read as NUMA node 0)"
                                        : "current (DeviceIDs per NUMA node)";
}

/* Tables say "none" for an empty list and for a nil one alike (-o json
 * keeps kubelet's null). */
static char *join(char *const *v, size_t n)
{
        if (n == 0)
                return strdup("none");
        return kdev_cli_strv_join(v, n, ",");
}

static void print_entry(const struct kdev_ckpt_entry *e)
{
        printf("  pod %s container %s resource %s\n", e->pod_uid, e->container_name,
               e->resource_name);
        if (e->n_numa == 0)
                printf("    DeviceIDs none\n");
        for (size_t k = 0; k < e->n_numa; k++) {
                char *ids = join(e->numa[k].ids, e->numa[k].n_ids);
                printf("    numa %" PRId64 ": %s\n", e->numa[k].node, ids ? ids : "?");
                free(ids);
        }
        if (e->alloc_resp_null) {
                printf("    AllocResp none\n");
                return;
        }
        V1beta1__ContainerAllocateResponse *r =
                v1beta1__container_allocate_response__unpack(NULL, e->alloc_resp_len, e->alloc_resp);
        struct kdev_dm_opts o = {0};
        if (!r || kdev_dm_opts_add(&o, r) < 0) {
                printf("    AllocResp: cannot decode\n");
        } else if (!o.n_envs && !o.n_mounts && !o.n_devices && !o.n_annotations && !o.n_cdi) {
                printf("    AllocResp empty (%zu bytes)\n", e->alloc_resp_len);
        } else {
                kdev_dm_opts_print(stdout, "    ", &o);
        }
        kdev_dm_opts_clear(&o);
        if (r)
                v1beta1__container_allocate_response__free_unpacked(r, NULL);
}

static void print_table(const char *path, const struct kdev_checkpoint *cp)
{
        printf("File: %s\n", path);
        printf("Layout: %s\n", layout_text(cp->layout));
        printf("\nRegistered resources:");
        if (cp->n_registered == 0) {
                printf(" none\n");
        } else {
                printf("\n");
                struct kdev_cli_table *t = kdev_cli_table_new(3, "RESOURCE", "HEALTHY", "DEVICES");
                for (size_t i = 0; t && i < cp->n_registered; i++) {
                        const struct kdev_ckpt_resource *r = &cp->registered[i];
                        char n[24];
                        snprintf(n, sizeof(n), "%zu", r->n_ids);
                        char *ids = join(r->ids, r->n_ids);
                        kdev_cli_table_add(t, r->name, n, ids);
                        free(ids);
                }
                if (t)
                        kdev_cli_table_print(t, stdout, "  ");
                kdev_cli_table_free(t);
        }
        printf("\nPod device entries:");
        if (cp->n_entries == 0)
                printf(" none\n");
        else
                printf(" %zu\n", cp->n_entries);
        for (size_t i = 0; i < cp->n_entries; i++)
                print_entry(&cp->entries[i]);
        if (cp->n_notes) {
                printf("\nNotes:\n");
                for (size_t i = 0; i < cp->n_notes; i++)
                        printf("  %s\n", cp->notes[i]);
        }
        printf("\n");
}

static json_t *strv_json(char *const *v, size_t n, bool is_null)
{
        if (is_null)
                return json_null();
        json_t *a = json_array();
        for (size_t i = 0; a && i < n; i++)
                json_array_append_new(a, json_string(v[i]));
        return a;
}

static json_t *to_json(const char *path, const struct kdev_checkpoint *cp)
{
        json_t *j = json_object();
        if (!j)
                return NULL;
        json_object_set_new(j, "file", json_string(path));
        json_object_set_new(j, "layout",
                            json_string(cp->layout == KDEV_CKPT_LAYOUT_V1 ? "pre-1.20" : "current"));
        json_t *reg = cp->registered_null ? json_null() : json_object();
        for (size_t i = 0; !cp->registered_null && i < cp->n_registered; i++)
                json_object_set_new(reg, cp->registered[i].name,
                                    strv_json(cp->registered[i].ids, cp->registered[i].n_ids,
                                              cp->registered[i].ids_null));
        json_object_set_new(j, "registeredDevices", reg);
        json_t *entries = cp->entries_null ? json_null() : json_array();
        for (size_t i = 0; !cp->entries_null && i < cp->n_entries; i++) {
                const struct kdev_ckpt_entry *e = &cp->entries[i];
                json_t *je = json_object();
                json_object_set_new(je, "podUID", json_string(e->pod_uid));
                json_object_set_new(je, "containerName", json_string(e->container_name));
                json_object_set_new(je, "resourceName", json_string(e->resource_name));
                json_t *numa = e->numa_null ? json_null() : json_object();
                for (size_t k = 0; !e->numa_null && k < e->n_numa; k++) {
                        char key[24];
                        snprintf(key, sizeof(key), "%" PRId64, e->numa[k].node);
                        json_object_set_new(numa, key,
                                            strv_json(e->numa[k].ids, e->numa[k].n_ids,
                                                      e->numa[k].ids_null));
                }
                json_object_set_new(je, "deviceIDs", numa);
                json_t *resp = json_null();
                if (!e->alloc_resp_null) {
                        V1beta1__ContainerAllocateResponse *r =
                                v1beta1__container_allocate_response__unpack(NULL, e->alloc_resp_len,
                                                                           e->alloc_resp);
                        if (r) {
                                json_t *pj = kdev_pbjson_from_msg(&r->base, NULL);
                                if (pj)
                                        resp = pj;
                                v1beta1__container_allocate_response__free_unpacked(r, NULL);
                        }
                }
                json_object_set_new(je, "allocResp", resp);
                json_array_append_new(entries, je);
        }
        json_object_set_new(j, "podDeviceEntries", entries);
        if (cp->n_notes)
                json_object_set_new(j, "notes", strv_json(cp->notes, cp->n_notes, false));
        return j;
}

static void print_json(json_t *j)
{
        char *s = json_dumps(j, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
        if (s) {
                printf("%s\n", s);
                free(s);
        }
}

int kdevctl_cmd_checkpoint(int argc, char **argv)
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

        /* No argument: kubelet's checkpoint file itself, named in every error
         * even when its directory is missing. */
        char *path = NULL;
        struct stat st;
        if (!a.file) {
                path = strdup(KDEV_CLI_DEVICE_PLUGIN_DIR "/" KDEV_CKPT_FILE);
        } else if (stat(a.file, &st) == 0 && S_ISDIR(st.st_mode)) {
                if (asprintf(&path, "%s/%s", a.file, KDEV_CKPT_FILE) < 0)
                        path = NULL;
        } else {
                path = strdup(a.file);
        }
        if (!path)
                return kdev_cli_fail(CMD, "out of memory");

        struct kdev_checkpoint cp = {0};
        bool located = false;
        /* A socket (DIR/kubelet.sock given for DIR), FIFO or device is
         * refused by the reader without blocking; its messages name the path,
         * the decoder's do not. */
        rc = kdev_ckpt_read(path, &cp, &err);
        size_t pl = strlen(path);
        located = strncmp(err.msg, path, pl) == 0 && err.msg[pl] == ':';
        if (rc < 0) {
                /* A broken file is never shown as an empty one. */
                if (a.output == KDEV_CLI_OUTPUT_JSON) {
                        json_t *j = json_pack("{s:s,s:s}", "file", path, "error", err.msg);
                        if (j)
                                print_json(j);
                        json_decref(j);
                }
                int ret = located ? kdev_cli_fail(CMD, "%s", err.msg)
                                  : kdev_cli_fail(CMD, "%s: %s", path, err.msg);
                free(path);
                return ret;
        }
        uint32_t computed = 0;
        struct kdev_err verr = {0};
        int vrc = kdev_ckpt_verify(&cp, &computed, &verr);
        int ret = KDEV_CLI_OK;
        if (vrc == -ENOMEM) {
                ret = kdev_cli_fail(CMD, "out of memory");
        } else if (a.output == KDEV_CLI_OUTPUT_JSON) {
                json_t *j = to_json(path, &cp);
                json_t *sum = json_pack("{s:I,s:I,s:b}", "stored", (json_int_t)cp.checksum,
                                        "computed", (json_int_t)computed, "ok", vrc == 0);
                if (!j || !sum) {
                        json_decref(j);
                        json_decref(sum);
                        ret = kdev_cli_fail(CMD, "out of memory");
                } else {
                        json_object_set_new(j, "checksum", sum);
                        print_json(j);
                        json_decref(j);
                }
        } else {
                print_table(path, &cp);
                if (vrc == 0)
                        printf("checksum OK (%" PRIu32 ")\n", computed);
                else
                        printf("checksum MISMATCH (stored %" PRIu64 ", computed %" PRIu32 ")\n",
                               cp.checksum, computed);
        }
        if (ret == KDEV_CLI_OK && vrc < 0)
                ret = kdev_cli_fail(CMD, "%s: %s (kubelet would ignore this checkpoint)", path,
                                    verr.msg);
        kdev_ckpt_clear(&cp);
        free(path);
        return ret;
}
