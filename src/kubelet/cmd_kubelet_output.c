/* kdevctl kubelet: the results of a scenario, as a table or JSON
 * (cmd_kubelet_internal.h). Moved from cmd_kubelet.c. */
#include "common/file.h"
#include "kubelet/cmd_kubelet_internal.h"

/* ------------------------------------------------------------------------ */
/* Results                                                                  */
/* ------------------------------------------------------------------------ */

struct step_result *result_new(struct kubelet *k, enum kdev_scn_kind kind)
{
        struct step_result *nr = realloc(k->results, (k->n_results + 1) * sizeof(*nr));
        if (!nr)
                abort();
        k->results = nr;
        struct step_result *r = &nr[k->n_results++];
        memset(r, 0, sizeof(*r));
        r->kind = kind;
        return r;
}

void results_free(struct kubelet *k)
{
        for (size_t i = 0; i < k->n_results; i++) {
                struct step_result *r = &k->results[i];
                free(r->text);
                free(r->pod_name);
                free(r->uid);
                free(r->reason);
                free(r->command);
                for (size_t c = 0; c < r->n_ctrs; c++) {
                        struct ctr_result *cr = &r->ctrs[c];
                        free(cr->name);
                        for (size_t a = 0; a < cr->n_allocs; a++) {
                                free(cr->allocs[a].resource);
                                for (size_t x = 0; x < cr->allocs[a].n_ids; x++)
                                        free(cr->allocs[a].ids[x]);
                                free(cr->allocs[a].ids);
                                free(cr->allocs[a].prestart);
                        }
                        free(cr->allocs);
                        kdev_dm_opts_clear(&cr->opts);
                }
                free(r->ctrs);
        }
        free(k->results);
        k->results = NULL;
        k->n_results = 0;
}

const char *state_text(const struct kdev_dm_resource *r)
{
        if (!r->has_endpoint)
                return "unregistered";
        return r->stopped ? "stopped" : "connected";
}

static json_t *resources_json(struct kubelet *k)
{
        json_t *a = json_array();
        for (size_t i = 0; i < k->dm->n_res; i++) {
                const struct kdev_dm_resource *r = &k->dm->res[i];
                size_t cap, alloc, used;
                kdev_dm_counts(k->dm, r, &cap, &alloc, &used);
                json_t *devs = json_array();
                for (size_t d = 0; d < r->n_devices; d++)
                        json_array_append_new(devs, json_pack("{s:s,s:s}", "id", r->devices[d].id,
                                                              "health",
                                                              r->devices[d].healthy ? "Healthy"
                                                                                    : "Unhealthy"));
                json_array_append_new(
                        a, json_pack("{s:s,s:I,s:I,s:I,s:o,s:s,s:o}", "name", r->name, "capacity",
                                     (json_int_t)cap, "allocatable", (json_int_t)alloc, "allocated",
                                     (json_int_t)used, "endpoint",
                                     r->endpoint ? json_string(r->endpoint) : json_null(), "state",
                                     state_text(r), "devices", devs));
        }
        return a;
}

void state_write(struct kubelet *k)
{
        if (!k->state_path || k->stopping)
                return;
        json_t *j = json_pack("{s:I,s:o}", "updates", (json_int_t)(k->state_writes + 1), "resources",
                              resources_json(k));
        char *s = j ? json_dumps(j, JSON_INDENT(2) | JSON_PRESERVE_ORDER) : NULL;
        json_decref(j);
        if (!s) {
                fprintf(stderr, "kdevctl kubelet: out of memory\n");
                abort();
        }
        char *tmpl = xasprintf("%s.XXXXXX", k->state_path);
        struct kdev_err err = {0};
        int rc = kdev_file_write_atomic(k->state_path, tmpl, s, strlen(s), 0644, false, &err);
        free(tmpl);
        free(s);
        if (rc < 0) {
                if (!k->state_failed)
                        kdev_log_warn("cannot write the state file", "error", err.msg);
                k->state_failed = true;
                return;
        }
        k->state_failed = false;
        k->state_writes++;
}

const char *kind_text(enum kdev_scn_kind kind)
{
        switch (kind) {
        case KDEV_SCN_WAIT:
                return "wait";
        case KDEV_SCN_POD:
                return "pod";
        case KDEV_SCN_DELETE:
                return "delete";
        case KDEV_SCN_RESTART:
                return "restart";
        case KDEV_SCN_SLEEP:
                return "sleep";
        case KDEV_SCN_EXEC:
                return "exec";
        }
        return "?";
}

static json_t *pod_json(const struct step_result *r)
{
        json_t *j = json_pack("{s:s,s:s,s:s,s:b}", "kind", "pod", "name", r->pod_name, "uid", r->uid,
                              "admitted", r->ok);
        if (!r->ok) {
                json_object_set_new(j, "reason", json_string(r->reason ? r->reason : ""));
                json_object_set_new(j, "message", json_string(r->text ? r->text : ""));
                return j;
        }
        json_t *ctrs = json_array();
        for (size_t c = 0; c < r->n_ctrs; c++) {
                const struct ctr_result *cr = &r->ctrs[c];
                json_t *allocs = json_array();
                for (size_t a = 0; a < cr->n_allocs; a++) {
                        const struct alloc_result *ar = &cr->allocs[a];
                        json_t *ids = json_array();
                        for (size_t x = 0; x < ar->n_ids; x++)
                                json_array_append_new(ids, json_string(ar->ids[x]));
                        json_t *ja = json_pack("{s:s,s:o,s:b}", "resource", ar->resource,
                                               "deviceIDs", ids, "fromCheckpoint", ar->cached);
                        if (ar->prestart)
                                json_object_set_new(ja, "preStart",
                                                    json_string(*ar->prestart ? ar->prestart : "ok"));
                        json_array_append_new(allocs, ja);
                }
                json_t *jc = json_pack("{s:s,s:b,s:o}", "name", cr->name, "init", cr->init,
                                       "allocations", allocs);
                json_t *opts = kdev_dm_opts_json(&cr->opts);
                if (opts)
                        json_object_update(jc, opts);
                json_decref(opts);
                json_array_append_new(ctrs, jc);
        }
        json_object_set_new(j, "containers", ctrs);
        return j;
}

void print_results(struct kubelet *k)
{
        if (k->printed)
                return;
        k->printed = true;
        if (k->output == KDEV_CLI_OUTPUT_JSON) {
                json_t *steps = json_array();
                for (size_t i = 0; i < k->n_results; i++) {
                        const struct step_result *r = &k->results[i];
                        if (r->kind == KDEV_SCN_POD && r->done) {
                                json_array_append_new(steps, pod_json(r));
                                continue;
                        }
                        json_t *js = json_pack("{s:s,s:b,s:s}", "kind", kind_text(r->kind), "ok",
                                               r->done && r->ok, "result",
                                               r->done ? (r->text ? r->text : "") : "not finished");
                        if (r->pod_name)
                                json_object_set_new(js, "name", json_string(r->pod_name));
                        if (r->command)
                                json_object_set_new(js, "command", json_string(r->command));
                        if (r->done && r->exited)
                                json_object_set_new(js, "exitCode", json_integer(r->exit_code));
                        if (r->done && r->term_signal)
                                json_object_set_new(js, "signal", json_integer(r->term_signal));
                        if (r->done && r->timed_out)
                                json_object_set_new(js, "timedOut", json_true());
                        json_array_append_new(steps, js);
                }
                json_t *j = json_pack("{s:o,s:o}", "steps", steps, "resources", resources_json(k));
                char *s = json_dumps(j, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
                if (s)
                        printf("%s\n", s);
                free(s);
                json_decref(j);
                fflush(stdout);
                return;
        }
        for (size_t i = 0; i < k->n_results; i++) {
                const struct step_result *r = &k->results[i];
                if (r->kind != KDEV_SCN_POD) {
                        printf("%s%s%s: %s\n", kind_text(r->kind), r->pod_name ? " " : "",
                               r->pod_name ? r->pod_name : "",
                               r->done ? (r->text ? r->text : "") : "not finished");
                        continue;
                }
                if (!r->done) {
                        printf("pod %s (uid %s): not finished\n", r->pod_name, r->uid);
                        continue;
                }
                if (!r->ok) {
                        printf("pod %s (uid %s): rejected: %s: %s\n", r->pod_name, r->uid, r->reason,
                               r->text);
                        continue;
                }
                printf("pod %s (uid %s): admitted\n", r->pod_name, r->uid);
                for (size_t c = 0; c < r->n_ctrs; c++) {
                        const struct ctr_result *cr = &r->ctrs[c];
                        printf("  %scontainer %s\n", cr->init ? "init " : "", cr->name);
                        for (size_t a = 0; a < cr->n_allocs; a++) {
                                const struct alloc_result *ar = &cr->allocs[a];
                                char *ids = kdev_cli_strv_join(ar->ids, ar->n_ids, ",");
                                printf("    %s: %s%s\n", ar->resource, ids ? ids : "",
                                       ar->cached ? " (held from before, no Allocate)" : "");
                                free(ids);
                        }
                        kdev_dm_opts_print(stdout, "    ", &cr->opts);
                        for (size_t a = 0; a < cr->n_allocs; a++) {
                                const struct alloc_result *ar = &cr->allocs[a];
                                if (ar->prestart)
                                        printf("    prestart %s: %s\n", ar->resource,
                                               *ar->prestart ? ar->prestart : "ok");
                        }
                }
        }
        if (k->n_results)
                printf("\n");
        struct kdev_cli_table *t = kdev_cli_table_new(6, "RESOURCE", "CAPACITY", "ALLOCATABLE",
                                                      "ALLOCATED", "ENDPOINT", "STATE");
        for (size_t i = 0; t && i < k->dm->n_res; i++) {
                const struct kdev_dm_resource *r = &k->dm->res[i];
                size_t cap, alloc, used;
                kdev_dm_counts(k->dm, r, &cap, &alloc, &used);
                char c1[24], c2[24], c3[24];
                snprintf(c1, sizeof(c1), "%zu", cap);
                snprintf(c2, sizeof(c2), "%zu", alloc);
                snprintf(c3, sizeof(c3), "%zu", used);
                kdev_cli_table_add(t, r->name, c1, c2, c3, r->endpoint, state_text(r));
        }
        if (t && kdev_cli_table_rows(t) > 0)
                kdev_cli_table_print(t, stdout, NULL);
        else
                printf("no resources\n");
        kdev_cli_table_free(t);
        fflush(stdout);
}
