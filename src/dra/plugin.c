/* kdev DRA kubelet plugin core: claim preparation (see plugin.h). */
#include "dra/plugin.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cdi/cdi.h"
#include "common/json.h"
#include "dra/checkpoint.h"
#include "dra/claim_config.h"
#include "dra/health_internal.h"
#include "dra/plugin_internal.h"
#include "dra/slices.h"
#include "kube/kube.h"
#include "model/edits.h"
#include "nvidia/container_edits.h"
#include "nvidia/gpus.h"
#include "nvidia/mig.h"
#include "nvidia/share_host.h"

int kdev_dra_kube_claim_source(void *arg, const char *ns, const char *name, json_t **claim,
                               struct kdev_err *err)
{
        return kdev_kube_get_claim(arg, ns, name, claim, err);
}

static char *dup_or(const char *s, const char *def)
{
        return strdup(s ? s : def);
}

int kdev_dra_plugin_new(const struct kdev_dra_plugin_options *opts, struct kdev_dra_plugin **out,
                        struct kdev_err *err)
{
        struct kdev_dra_plugin *p;
        struct kdev_err cperr = {0};
        int rc;

        *out = NULL;
        if (!opts || !opts->pool || !*opts->pool || !opts->data_dir || !*opts->data_dir ||
            !opts->gpus || !opts->get_claim)
                return kdev_err_set(err, EINVAL,
                                    "DRA plugin: pool, data_dir, gpus and get_claim are required");
        p = calloc(1, sizeof(*p));
        if (!p)
                return kdev_err_set(err, ENOMEM, "out of memory");
        p->driver = dup_or(opts->driver, KDEV_DRA_PLUGIN_DEFAULT_DRIVER);
        p->pool = strdup(opts->pool);
        p->data_dir = strdup(opts->data_dir);
        p->cdi_dir = dup_or(opts->cdi_dir, KDEV_DRA_DEFAULT_CDI_DIR);
        p->dev_root = dup_or(opts->dev_root, "/");
        p->proc_root = dup_or(opts->proc_root, "/proc");
        p->o = *opts;
        if (opts->share_root && !(p->share_root = strdup(opts->share_root))) {
                kdev_dra_plugin_free(p);
                return kdev_err_set(err, ENOMEM, "out of memory");
        }
        pthread_mutex_init(&p->source_lock, NULL);
        if (!p->driver || !p->pool || !p->data_dir || !p->cdi_dir || !p->dev_root ||
            !p->proc_root ||
            asprintf(&p->cp_path, "%s/%s", p->data_dir, KDEV_DRA_CP_FILE) < 0) {
                p->cp_path = NULL;
                kdev_dra_plugin_free(p);
                return kdev_err_set(err, ENOMEM, "out of memory");
        }
        rc = kdev_dra_cp_load_guarded(&p->cp, p->cp_path, &p->cp_guard, &cperr);
        if (rc == -EBADMSG) {
                p->cp_error = strdup(cperr.msg);
                if (!p->cp_error)
                        rc = -ENOMEM;
        }
        if (rc == -ENOMEM) {
                kdev_dra_plugin_free(p);
                return kdev_err_set(err, ENOMEM, "out of memory");
        }
        if (rc < 0 && rc != -EBADMSG) {
                /* a newer kdev's checkpoint, or not a file kdev wrote: left alone */
                kdev_dra_plugin_free(p);
                return kdev_err_set(err, -rc, "%s", cperr.msg);
        }
        *out = p;
        return 0;
}

int kdev_dra_plugin_remove_stale_temps(struct kdev_dra_plugin *p, kdev_dra_removed_fn removed,
                                       void *arg, struct kdev_err *err)
{
        char name[512], prefix[512];
        const char *x;
        int a, b;

        /* CDI specs: kdev_cdi_spec_write's ".<file name>.XXXXXX" of the
         * claim spec files "<vendor>-<class>_<uid>.json" */
        a = kdev_cdi_transient_file_name(KDEV_DRA_CDI_KIND, "x", name, sizeof(name), err);
        if (a < 0)
                return a;
        x = strrchr(name, '_');
        snprintf(prefix, sizeof(prefix), ".%.*s", x ? (int)(x - name + 1) : 0, name);
        a = kdev_dra_remove_temps(p->cdi_dir, prefix, ".json.", removed, arg, err);
        if (a < 0)
                return a;
        b = kdev_dra_cp_remove_temps(p->cp_path, removed, arg, err);
        if (b < 0)
                return b;
        return a + b;
}

const char *kdev_dra_plugin_checkpoint_error(const struct kdev_dra_plugin *p)
{
        return p->cp_error;
}

int kdev_dra_plugin_set_unhealthy(struct kdev_dra_plugin *p, const char *const *uuids, size_t n,
                                  struct kdev_err *err)
{
        char **list = n ? calloc(n, sizeof(*list)) : NULL;
        size_t i;

        if (n && !list)
                return kdev_err_set(err, ENOMEM, "out of memory");
        for (i = 0; i < n; i++) {
                list[i] = strdup(uuids[i] ? uuids[i] : "");
                if (!list[i]) {
                        while (i > 0)
                                free(list[--i]);
                        free(list);
                        return kdev_err_set(err, ENOMEM, "out of memory");
                }
        }
        for (i = 0; i < p->n_unhealthy; i++)
                free(p->unhealthy[i]);
        free(p->unhealthy);
        p->unhealthy = list;
        p->n_unhealthy = n;
        return 0;
}

size_t kdev_dra_plugin_prepared(const struct kdev_dra_plugin *p)
{
        return kdev_dra_cp_count(&p->cp);
}

void kdev_dra_plugin_free(struct kdev_dra_plugin *p)
{
        if (!p)
                return;
        kdev_dra_health_free(p);
        kdev_dra_cp_free(&p->cp);
        json_decref(p->held);
        kdev_file_guard_clear(&p->cp_guard);
        kdev_file_guard_clear(&p->spec_guard);
        pthread_mutex_destroy(&p->source_lock);
        free(p->driver);
        free(p->pool);
        free(p->data_dir);
        free(p->cdi_dir);
        free(p->dev_root);
        free(p->proc_root);
        free(p->share_root);
        for (size_t i = 0; i < p->n_unhealthy; i++)
                free(p->unhealthy[i]);
        free(p->unhealthy);
        for (size_t i = 0; i < p->n_turns; i++)
                free(p->turns[i].uid);
        free(p->turns);
        free(p->cp_path);
        free(p->cp_error);
        free(p->dra_socket);
        free(p->reg_socket);
        free(p);
}

int kdev_dra_check_claim_uid(const char *ns, const char *name, const char *uid,
                             struct kdev_err *err)
{
        char shown[4 * 40 + 4], claim[600];
        size_t len, o = 0, i;

        if (ns && name)
                snprintf(claim, sizeof(claim), "claim %s/%s: UID", ns, name);
        else
                snprintf(claim, sizeof(claim), "claim UID");
        if (!uid || !*uid)
                return kdev_err_set(err, EINVAL, "%s missing", claim);
        len = strlen(uid);
        /* the UID as shown in the message: at most 40 bytes, others as \xNN */
        for (i = 0; uid[i] && i < 40; i++) {
                unsigned char c = (unsigned char)uid[i];

                if (c < 0x20 || c >= 0x7f || c == '"' || c == '\\')
                        o += (size_t)snprintf(shown + o, sizeof(shown) - o, "\\x%02x", c);
                else
                        shown[o++] = (char)c;
        }
        if (uid[i])
                o += (size_t)snprintf(shown + o, sizeof(shown) - o, "...");
        shown[o] = '\0';
        if (len > KDEV_DRA_CLAIM_UID_MAX)
                return kdev_err_set(err, EINVAL,
                                    "%s \"%s\" refused: %zu characters, at most %d allowed",
                                    claim, shown, len, KDEV_DRA_CLAIM_UID_MAX);
        for (i = 0; i < len; i++) {
                unsigned char c = (unsigned char)uid[i];

                if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '-')
                        continue;
                char what[8];

                if (c > 0x20 && c < 0x7f)
                        snprintf(what, sizeof(what), "'%c'", c);
                else
                        snprintf(what, sizeof(what), "0x%02x", c);
                return kdev_err_set(err, EINVAL,
                                    "%s \"%s\" refused: character %zu (%s) is not an ASCII "
                                    "letter, digit or '-'",
                                    claim, shown, i + 1, what);
        }
        return 0;
}

/* The CDI spec file name of claim |uid|. CDI's transient name maps '/' to
 * '_' (not injective); on the UIDs kdev_dra_check_claim_uid accepts
 * (neither has '/' nor '_') it is "k8s.gpu.nvidia.com-claim_<uid>.json",
 * the identity on the UID, so two claims never share a file. */
static int spec_file_name(const char *uid, char *buf, size_t size, struct kdev_err *err)
{
        int rc = kdev_dra_check_claim_uid(NULL, NULL, uid, err);

        if (rc < 0)
                return rc;
        return kdev_cdi_transient_file_name(KDEV_DRA_CDI_KIND, uid, buf, size, err);
}

int kdev_dra_claim_spec_path(const struct kdev_dra_plugin *p, const char *uid, char *buf,
                             size_t size, struct kdev_err *err)
{
        char name[512];
        int rc = spec_file_name(uid, name, sizeof(name), err);
        int n;

        if (rc < 0)
                return rc;
        n = snprintf(buf, size, "%s/%s", p->cdi_dir, name);
        if (n < 0 || (size_t)n >= size)
                return kdev_err_set(err, ENAMETOOLONG, "CDI spec path too long");
        return n;
}

/* The GPU record named |dev| ("gpu-<minor>", *mig NULL) or the MIG device
 * record whose dra_name is |dev| (*mig set, its parent returned), or NULL
 * with |err|: -EIO "device <dev> (<uuid>) is unhealthy: ..." when a GPU with
 * that minor has a recorded fault (withdrawn from the ResourceSlice),
 * -ENODEV "device <dev> is not published by this node (pool <pool>)" when
 * no device of this node has that name. */
const struct kdev_nvidia_gpu *kdev_dra_find_gpu(const struct kdev_dra_plugin *p, const char *dev,
                                                const struct kdev_nvidia_mig **mig,
                                                const struct kdev_nvidia_placement **placement,
                                                int *rc, struct kdev_err *err)
{
        const struct kdev_nvidia_gpus *gpus = p->o.gpus;
        unsigned minor;
        bool want_mig;

        *mig = NULL;
        *placement = NULL;
        if (kdev_nvidia_dra_name_minor(dev, &minor, &want_mig)) {
                for (size_t i = 0; i < gpus->n_gpus; i++) {
                        const struct kdev_nvidia_gpu *g = &gpus->gpus[i];

                        if (g->minor != minor)
                                continue;
                        if (g->faulted && g->uuid[0]) {
                                *rc = kdev_err_set(err, EIO,
                                                   "device %s (%s) is unhealthy: withdrawn from "
                                                   "the ResourceSlice, not prepared",
                                                   dev, g->uuid);
                                return NULL;
                        }
                        if (g->faulted || !g->uuid[0])
                                continue;
                        /* a partitionable GPU (dynamic MIG) is published
                         * whole and as its placements, whatever its MIG
                         * mode (dra/slices.h kdev_dra_build_partitionable) */
                        if (g->n_placements > 0) {
                                if (!want_mig)
                                        return g;
                                *placement = kdev_dra_placement_of(g, dev);
                                if (*placement)
                                        return g;
                                continue;
                        }
                        if (!want_mig) {
                                if (g->mig_enabled)
                                        continue; /* published as its MIG devices */
                                return g;
                        }
                        if (!g->mig_enabled)
                                continue;
                        for (size_t j = 0; j < g->n_migs; j++) {
                                const struct kdev_nvidia_mig *m = &g->migs[j];

                                if (m->uuid[0] && m->dra_name[0] &&
                                    strcmp(m->dra_name, dev) == 0) {
                                        *mig = m;
                                        return g;
                                }
                        }
                }
        }
        *rc = kdev_err_set(err, ENODEV, "device %s is not published by this node (pool %s)", dev,
                           p->pool);
        return NULL;
}

static bool is_unhealthy(const struct kdev_dra_plugin *p, const char *uuid)
{
        for (size_t i = 0; uuid && *uuid && i < p->n_unhealthy; i++)
                if (strcmp(p->unhealthy[i], uuid) == 0)
                        return true;
        return false;
}

/* -EIO with "device <name> (<uuid>) is unhealthy ..." when a device of
 * |devices| (checkpoint records) is withdrawn as unhealthy; unknown names
 * are left to build_spec. */
static int check_healthy(const struct kdev_dra_plugin *p, const json_t *devices,
                         struct kdev_err *err)
{
        size_t i;
        json_t *d;

        json_array_foreach(devices, i, d) {
                const char *dev = json_string_value(json_object_get(d, "device"));
                const struct kdev_nvidia_mig *m = NULL;
                const struct kdev_nvidia_placement *pl = NULL;
                struct kdev_err ignored = {0};
                int rc = 0;
                const struct kdev_nvidia_gpu *g =
                        kdev_dra_find_gpu(p, dev ? dev : "", &m, &pl, &rc, &ignored);

                if (!g)
                        continue;
                if (is_unhealthy(p, g->uuid) || (m && is_unhealthy(p, m->uuid)))
                        return kdev_err_set(err, EIO,
                                            "device %s (%s) is unhealthy: withdrawn from the "
                                            "ResourceSlice, not prepared",
                                            dev, m ? m->uuid : g->uuid);
        }
        return 0;
}

/* The container edits (model/edits.h) of device |dev| of claim |uid|, into
 * |out| (empty): NVIDIA's device edits of the GPU or MIG device
 * (kdev_nvidia_device_edits: its node; a MIG device's parent node and
 * capability nodes, whose minors come from |minors|, read from the proc
 * root on first use, *|minors_read| then true) and the one CDI device name
 * "k8s.gpu.nvidia.com/claim=<uid>-<dev>", which both the claim's CDI spec
 * (device "<uid>-<dev>") and the NodePrepareResources answer
 * (cdi_device_ids) take. Returns 0 or a negative errno with |err| (those of
 * find_gpu, -ENOENT for a missing mig-minors line, -ENOMEM). */
static int claim_device_edits(const struct kdev_dra_plugin *p,
                              const struct kdev_nvidia_roots *roots, const char *uid,
                              const json_t *rec, struct kdev_nvidia_mig_minors *minors,
                              bool *minors_read, struct kdev_container_edits *out,
                              struct kdev_err *err)
{
        const char *dev = json_string_value(json_object_get(rec, "device"));
        const json_t *made = json_object_get(rec, "mig");
        const struct kdev_nvidia_mig *m;
        const struct kdev_nvidia_placement *pl;
        struct kdev_nvidia_logical ld = {0};
        unsigned gi_id = 0, ci_id = 0;
        char name[600];
        int rc = 0;
        const struct kdev_nvidia_gpu *g = kdev_dra_find_gpu(p, dev ? dev : "", &m, &pl, &rc, err);

        if (!g)
                return rc;
        if (pl) {
                /* a placement: the instance its claim made (dynamic_mig.c) */
                if (!json_is_integer(json_object_get(made, "giId")) ||
                    !json_is_integer(json_object_get(made, "ciId")))
                        return kdev_err_set(err, ENODEV,
                                            "device %s: its MIG instance has not been made", dev);
                gi_id = (unsigned)json_integer_value(json_object_get(made, "giId"));
                ci_id = (unsigned)json_integer_value(json_object_get(made, "ciId"));
        } else if (m) {
                gi_id = m->gi_id;
                ci_id = m->ci_id;
        }
        ld.minor = g->minor;
        /* a whole GPU's DRM nodes, as nvcdi gives NVIDIA's DRA driver
         * (GetDeviceSpecsByID), from the host's /sys */
        ld.pci_bus_id = g->pcie_bus_id;
        ld.sysfs_root = p->o.sysfs_root;
        if (p->o.driver_files) {
                ld.hook_path = p->o.driver_files->hook_path;
                ld.disabled_hooks = p->o.driver_files->disabled_hooks;
        }
        if (m || pl) {
                if (!*minors_read) {
                        rc = kdev_nvidia_mig_minors_read(p->proc_root, minors, err);
                        if (rc < 0)
                                return rc;
                        *minors_read = true;
                }
                rc = kdev_nvidia_mig_caps(minors, g->minor, gi_id, ci_id, &ld.gi_cap,
                                          &ld.ci_cap, err);
                if (rc < 0)
                        return kdev_err_wrap(err, "device %s", dev);
                ld.mig = true;
        }
        rc = kdev_nvidia_device_edits_at(roots, &ld, out, err);
        if (rc < 0)
                return rc;
        snprintf(name, sizeof(name), "%s=%s-%s", KDEV_DRA_CDI_KIND, uid, dev);
        return kdev_edits_add_cdi_device(out, name, err);
}

/* The CDI device IDs of |e| as a new JSON array of strings, or NULL (out of
 * memory). */
static json_t *cdi_ids(const struct kdev_container_edits *e)
{
        json_t *a = json_array();

        for (size_t i = 0; a && i < e->n_cdi_devices; i++) {
                if (json_array_append_new(a, json_string(e->cdi_devices[i])) < 0) {
                        json_decref(a);
                        a = NULL;
                }
        }
        return a;
}

/* Builds the CDI spec of claim |uid| for the device records |devices|, each
 * device from its container edits (claim_device_edits: the device edits of
 * nvidia/container_edits.h, the same as the device plugin's CDI spec gives
 * the same GPU, and its CDI device name), the spec-level edits from
 * kdev_nvidia_common_edits. With |answer| each record's "cdiDeviceIDs" is
 * set to its edits' CDI device names (a claim being prepared; a claim of
 * the checkpoint keeps the IDs it was answered with). */
static int build_spec(const struct kdev_dra_plugin *p, const char *uid, json_t *devices,
                      bool answer, struct kdev_cdi_spec **out, struct kdev_err *err)
{
        struct kdev_cdi_spec *spec = kdev_cdi_spec_new(KDEV_DRA_CDI_KIND, err);
        struct kdev_nvidia_mig_minors minors = {0};
        struct kdev_container_edits common = {0};
        bool minors_read = false;
        size_t i;
        json_t *d;
        /* the driver-root rule of both front ends (nvidia/roots.h): every
         * node with its host path under the driver root */
        struct kdev_nvidia_roots roots;
        int rc = kdev_nvidia_roots_resolve(p->dev_root, NULL, NULL, &roots, err);

        if (rc < 0 || !spec) {
                kdev_cdi_spec_free(spec);
                return rc < 0 ? rc : -(err && err->code ? err->code : ENOMEM);
        }
        json_array_foreach(devices, i, d) {
                struct kdev_container_edits ed = {0};
                struct kdev_cdi_device *cd = NULL;

                rc = claim_device_edits(p, &roots, uid, d, &minors, &minors_read, &ed, err);
                /* the CDI device is named by the part after "<kind>=" */
                if (rc == 0) {
                        cd = kdev_cdi_spec_add_device(
                                spec, ed.cdi_devices[0] + strlen(KDEV_DRA_CDI_KIND) + 1, err);
                        if (!cd)
                                rc = -(err && err->code ? err->code : ENOMEM);
                }
                if (rc == 0)
                        rc = kdev_dra_config_edits(d, &ed, err);
                if (rc == 0)
                        rc = kdev_nvidia_edits_to_cdi(&ed, kdev_cdi_device_edits(cd), err);
                /* a share (plugin.h "Shares"): the share library's edits,
                 * those of kdev-plugin's isolated replicas */
                const char *region = json_string_value(
                        json_object_get(json_object_get(d, "share"), "region"));
                if (rc == 0 && region && p->share_root)
                        rc = kdev_nvidia_share_claim_cdi_edits(p->share_root, region,
                                                               kdev_cdi_device_edits(cd), err);
                /* a share of the checkpoint while shares are off: its spec
                 * without the share library would drop its limits */
                else if (rc == 0 && region)
                        rc = kdev_err_set(err, EINVAL,
                                          "device %s was prepared as a share (region %s), "
                                          "but shares are off now (kdev-dra-plugin "
                                          "--shareable-gpus); its spec is not written "
                                          "without the share's limits",
                                          json_string_value(json_object_get(d, "device")),
                                          region);
                if (rc == 0 && answer && json_object_set_new(d, "cdiDeviceIDs", cdi_ids(&ed)) < 0)
                        rc = kdev_err_set(err, ENOMEM, "out of memory");
                kdev_container_edits_clear(&ed);
                if (rc < 0)
                        goto fail;
        }
        kdev_nvidia_mig_minors_clear(&minors);
        rc = kdev_nvidia_common_edits_at(&roots, p->o.driver_files, &common, err);
        if (rc == 0)
                rc = kdev_nvidia_edits_to_cdi(&common, kdev_cdi_spec_edits(spec), err);
        kdev_container_edits_clear(&common);
        if (rc < 0)
                goto fail;
        *out = spec;
        return 0;
fail:
        kdev_nvidia_mig_minors_clear(&minors);
        kdev_cdi_spec_free(spec);
        return rc;
}

/* Tells the caller's on_file_aside (plugin.h) that |path|, changed by
 * someone else, was moved to |aside|. */
static void report_aside(const struct kdev_dra_plugin *p, const char *path, const char *aside,
                         bool rebuilt)
{
        if (p->o.on_file_aside)
                p->o.on_file_aside(p->o.on_file_aside_arg, path, aside, rebuilt);
}

int kdev_dra_save_checkpoint(struct kdev_dra_plugin *p, struct kdev_err *err)
{
        char aside[4096];
        int rc = kdev_dra_cp_save_guarded(&p->cp, p->cp_path, &p->cp_guard, aside, sizeof(aside),
                                          err);

        if (rc == 1)
                report_aside(p, p->cp_path, aside, true);
        return rc < 0 ? rc : 0;
}

/* Removes the CDI spec file |fname| of a claim through the spec guard (a
 * file someone else changed is moved aside, not deleted). Returns as
 * kdev_cdi_spec_remove (2 counts as removed: 1). */
static int remove_spec(struct kdev_dra_plugin *p, const char *fname, struct kdev_err *err)
{
        char aside[4096], path[4096];
        int rc = kdev_cdi_spec_remove_guarded(p->cdi_dir, fname, &p->spec_guard, aside,
                                              sizeof(aside), err);

        if (rc == 2) {
                snprintf(path, sizeof(path), "%s/%s", p->cdi_dir, fname);
                report_aside(p, path, aside, false);
                rc = 1;
        }
        return rc;
}

/* Makes the CDI spec file of |uid| hold exactly |want|, through the spec
 * guard: a file that is no longer what kdev wrote is moved aside first
 * (reported). Returns 1 when it was (re)written, 0 when already right, or an
 * error. */
static int write_spec(struct kdev_dra_plugin *p, const char *uid,
                      const struct kdev_cdi_spec *want, struct kdev_err *err)
{
        struct kdev_cdi_spec *have = NULL;
        char name[512], path[4096], aside[4096];
        int rc;

        rc = spec_file_name(uid, name, sizeof(name), err);
        if (rc < 0)
                return rc;
        rc = kdev_dra_claim_spec_path(p, uid, path, sizeof(path), err);
        if (rc < 0)
                return rc;
        if (kdev_cdi_spec_read(path, &have, NULL) == 0 && kdev_cdi_spec_equal(want, have)) {
                char *text = NULL;
                int len = kdev_cdi_spec_format(want, &text, NULL);

                /* right as it is: kdev's from now on (a file from before a
                 * restart is adopted here) */
                if (len >= 0)
                        kdev_file_guard_note(&p->spec_guard, path, text, (size_t)len, NULL);
                free(text);
                rc = 0;
        } else {
                /* no fsync: the checkpoint (fsynced) is what survives a
                 * crash of the node, and every Prepare of a recorded claim
                 * rewrites a spec that is missing or not whole (plugin.h) */
                rc = kdev_cdi_spec_write_guarded_transient(want, p->cdi_dir, name,
                                                           &p->spec_guard, aside,
                                                           sizeof(aside), err);
                if (rc == 1)
                        report_aside(p, path, aside, true);
                if (rc >= 0)
                        rc = 1;
        }
        kdev_cdi_spec_free(have);
        return rc;
}

/* Makes sure the CDI spec file of |uid| holds exactly what |devices| need.
 * Returns 1 when it was (re)written, 0 when already right, or an error. */
static int ensure_spec(struct kdev_dra_plugin *p, const char *uid, const json_t *devices,
                       struct kdev_err *err)
{
        struct kdev_cdi_spec *want = NULL;
        /* not |answer|: the records are only read */
        int rc = build_spec(p, uid, (json_t *)devices, false, &want, err);

        if (rc < 0)
                return rc;
        rc = write_spec(p, uid, want, err);
        kdev_cdi_spec_free(want);
        return rc;
}

/* Adds |request| (sub-request suffix cut) to |names| unless present. */
static int add_request(json_t *names, const char *request)
{
        size_t len = strcspn(request, "/"), i;
        json_t *v;

        json_array_foreach(names, i, v) {
                if (json_string_length(v) == len && !strncmp(json_string_value(v), request, len))
                        return 0;
        }
        return json_array_append_new(names, json_stringn(request, len));
}

/* -EPROTO "claim <ns>/<name>: <path>: expected <want>, got <what>" unless
 * |j| is absent or of type |type| (common/json.h). */
static int check_type(const json_t *j, json_type type, const char *ns, const char *name,
                      const char *path, struct kdev_err *err)
{
        return kdev_json_expect(j, type, err, "claim %s/%s: %s", ns, name, path);
}

/* From the v1 claim object, the device records for this driver and pool. */
static int devices_of_claim(const struct kdev_dra_plugin *p, const json_t *claim, const char *ns,
                            const char *name, const char *uid, json_t **out,
                            struct kdev_err *err)
{
        const char *got = json_string_value(json_object_get(json_object_get(claim, "metadata"),
                                                            "uid"));
        const json_t *alloc = json_object_get(json_object_get(claim, "status"), "allocation");
        const json_t *results = json_object_get(json_object_get(alloc, "devices"), "results");
        json_t *devs, *r;
        size_t i;
        int trc;

        /* a value of another JSON type than the API's is named by its path */
        if ((trc = check_type(json_object_get(claim, "metadata"), JSON_OBJECT, ns,
                              name, ".metadata", err)) < 0 ||
            (trc = check_type(json_object_get(json_object_get(claim, "metadata"), "uid"),
                              JSON_STRING, ns, name, ".metadata.uid", err)) < 0 ||
            (trc = check_type(json_object_get(claim, "status"), JSON_OBJECT, ns,
                              name, ".status", err)) < 0 ||
            (trc = check_type(alloc, JSON_OBJECT, ns, name, ".status.allocation",
                              err)) < 0 ||
            (trc = check_type(json_object_get(alloc, "devices"), JSON_OBJECT, ns,
                              name, ".status.allocation.devices", err)) < 0 ||
            (trc = check_type(results, JSON_ARRAY, ns, name,
                              ".status.allocation.devices.results", err)) < 0)
                return trc;
        json_array_foreach(results, i, r) {
                char path[96];
                static const char *const keys[] = {"driver", "pool", "device", "request"};

                snprintf(path, sizeof(path), ".status.allocation.devices.results[%zu]", i);
                if ((trc = check_type(r, JSON_OBJECT, ns, name, path, err)) < 0)
                        return trc;
                for (size_t k = 0; k < 4; k++) {
                        snprintf(path, sizeof(path), ".status.allocation.devices.results[%zu].%s",
                                 i, keys[k]);
                        trc = check_type(json_object_get(r, keys[k]), JSON_STRING,
                                         ns, name, path, err);
                        if (trc < 0)
                                return trc;
                }
                snprintf(path, sizeof(path),
                         ".status.allocation.devices.results[%zu].adminAccess", i);
                /* JSON_TRUE: either boolean (common/json.h) */
                if ((trc = check_type(json_object_get(r, "adminAccess"), JSON_TRUE, ns, name,
                                      path, err)) < 0)
                        return trc;
        }
        if (!got || strcmp(got, uid) != 0)
                return kdev_err_set(err, ESTALE,
                                    "claim %s/%s: UID %s differs from the requested %s "
                                    "(claim got replaced)",
                                    ns, name, got ? got : "(none)", uid);
        if (!json_is_object(alloc))
                return kdev_err_set(err, ENODATA, "claim %s/%s: not allocated", ns, name);
        devs = json_array();
        if (!devs)
                return kdev_err_set(err, ENOMEM, "out of memory");
        json_array_foreach(results, i, r) {
                const char *drv = json_string_value(json_object_get(r, "driver"));
                const char *pool = json_string_value(json_object_get(r, "pool"));
                const char *dev = json_string_value(json_object_get(r, "device"));
                const char *req = json_string_value(json_object_get(r, "request"));
                bool admin = json_is_true(json_object_get(r, "adminAccess"));
                json_t *rec = NULL, *d;
                size_t j;

                if (!drv || strcmp(drv, p->driver) || !pool || strcmp(pool, p->pool))
                        continue;
                if (!dev || !*dev) {
                        json_decref(devs);
                        return kdev_err_set(err, EINVAL, "claim %s/%s: result %zu has no device",
                                            ns, name, i);
                }
                json_array_foreach(devs, j, d) {
                        if (!strcmp(json_string_value(json_object_get(d, "device")), dev))
                                rec = d;
                }
                /* one device both whole and as a share: neither can be
                 * prepared (KEP-5075 gives a device to a request whole or as
                 * a share, never both) */
                const char *sid = json_string_value(json_object_get(r, "shareID"));
                if (rec && (sid != NULL) != kdev_dra_share_record(rec)) {
                        kdev_err_set(err, EINVAL,
                                     "claim %s/%s: .status.allocation.devices.results[%zu]: "
                                     "device %s is allocated both whole and as a share "
                                     "(shareID %s)",
                                     ns, name, i, dev,
                                     sid ? sid
                                         : json_string_value(json_object_get(
                                                   json_object_get(rec, "share"), "shareID")));
                        json_decref(devs); /* |rec| is one of them */
                        return -EINVAL;
                }
                /* cdiDeviceIDs follow from the device's container edits
                 * (build_spec) */
                if (!rec) {
                        rec = json_pack("{s:o,s:s,s:s}", "requestNames", json_array(), "pool",
                                        pool, "device", dev);
                        if (!rec || json_array_append_new(devs, rec) < 0 ||
                            (admin && json_object_set_new(rec, "adminAccess", json_true()) < 0)) {
                                json_decref(devs);
                                return kdev_err_set(err, ENOMEM, "out of memory");
                        }
                } else if (!admin) {
                        /* admin access only when every result for it has it */
                        json_object_del(rec, "adminAccess");
                }
                if (req && *req && add_request(json_object_get(rec, "requestNames"), req) < 0) {
                        json_decref(devs);
                        return kdev_err_set(err, ENOMEM, "out of memory");
                }
                /* KEP-5075: shareID and consumedCapacity (plugin.h "Shares") */
                if ((trc = kdev_dra_share_parse(r, i, ns, name, rec, err)) < 0) {
                        json_decref(devs);
                        return trc;
                }
        }
        if (json_array_size(devs) == 0) {
                json_decref(devs);
                return kdev_err_set(err, ENODATA,
                                    "claim %s/%s: no devices allocated by driver %s in pool %s", ns,
                                    name, p->driver, p->pool);
        }
        *out = devs;
        return 0;
}

/* The keys of device record |d| in the held index (below): its own two
 * (|other| false), or the two under which a device overlapping it is held
 * (|other| true: the whole GPU for a MIG device, its MIG devices for a whole
 * GPU). Returns how many (0 for a record with adminAccess). */
static int held_keys(const json_t *d, bool other, char key[2][600]);

/* Adds the devices of claim |uid| (device records |devs|) to |held|, the
 * devices the checkpoint's claims hold without adminAccess: key
 * "<pool>\x1f<device>" and, so that a whole GPU and a MIG device of it
 * overlap (nvidia/mig.h kdev_nvidia_dra_name_minor), "<pool>\x1f#<minor>g"
 * for a whole GPU, "<pool>\x1f#<minor>m" for a MIG device; each to
 * [<uid>, <device>] of its first holder. Returns 0 or -ENOMEM. */
static int held_keys(const json_t *d, bool other, char key[2][600])
{
        const char *dev = json_string_value(json_object_get(d, "device"));
        const char *pool = json_string_value(json_object_get(d, "pool"));
        unsigned minor;
        bool mig;
        int n = 1;

        if (!dev || !pool || json_is_true(json_object_get(d, "adminAccess")))
                return 0;
        snprintf(key[0], 600, "%s\x1f%s", pool, dev);
        if (kdev_nvidia_dra_name_minor(dev, &minor, &mig))
                snprintf(key[n++], 600, "%s\x1f#%u%c", pool, minor, mig != other ? 'm' : 'g');
        return n;
}

static int held_add(json_t *held, const char *uid, const json_t *devs)
{
        size_t i;
        json_t *d;

        json_array_foreach(devs, i, d) {
                const char *dev = json_string_value(json_object_get(d, "device"));
                char key[2][600];
                int n = held_keys(d, false, key);

                for (int k = 0; k < n; k++) {
                        if (json_object_get(held, key[k]))
                                continue;
                        if (json_object_set_new(held, key[k], json_pack("[s,s]", uid, dev)) < 0)
                                return -ENOMEM;
                }
        }
        return 0;
}

/* The held devices of every claim of the checkpoint (held_add), new
 * reference, or NULL (out of memory). One pass over the checkpoint per
 * call, so each device is then looked up, not compared with every claim. */
static json_t *held_index(const struct kdev_dra_plugin *p)
{
        json_t *held = json_object(), *rec;
        const char *uid;

        json_object_foreach(p->cp.claims, uid, rec) {
                if (held && held_add(held, uid, json_object_get(rec, "devices")) < 0) {
                        json_decref(held);
                        held = NULL;
                }
        }
        return held;
}

/* Removes claim |uid| from the checkpoint (in memory) and its devices from
 * the held index: the keys it is the holder of. A MIG device's key may have
 * other holders (several MIG devices of one GPU), so the index is then
 * dropped, to be made again when next needed. */
static void forget_claim(struct kdev_dra_plugin *p, const char *uid)
{
        const json_t *rec = kdev_dra_cp_get(&p->cp, uid);
        const json_t *d;
        size_t i;

        json_array_foreach(json_object_get(rec, "devices"), i, d) {
                const char *dev = json_string_value(json_object_get(d, "device"));
                const char *pool = json_string_value(json_object_get(d, "pool"));
                unsigned minor = 0;
                bool mig = false, named;
                char key[2][600];

                if (!p->held || !dev || !pool)
                        continue;
                named = kdev_nvidia_dra_name_minor(dev, &minor, &mig);
                /* a MIG device's key, like a share's, may have other holders */
                if ((named && mig) || kdev_dra_share_record(d)) {
                        json_decref(p->held);
                        p->held = NULL;
                        continue;
                }
                snprintf(key[0], sizeof(key[0]), "%s\x1f%s", pool, dev);
                snprintf(key[1], sizeof(key[1]), "%s\x1f#%ug", pool, minor);
                for (int k = 0; k < (named ? 2 : 1); k++) {
                        const char *h = json_string_value(
                                json_array_get(json_object_get(p->held, key[k]), 0));

                        if (h && !strcmp(h, uid))
                                json_object_del(p->held, key[k]);
                }
        }
        kdev_dra_cp_remove(&p->cp, uid);
}

/* -EBUSY when a device of |devs| (claim |uid|) is already prepared for
 * another claim of the checkpoint (|held|, held_index) and neither
 * allocation has admin access: no device kdev publishes is shareable
 * (plugin.h). The same name, or a whole GPU and a MIG device of it, overlap
 * (nvidia/mig.h kdev_nvidia_dra_name_minor). */
static int check_not_held(const struct kdev_dra_plugin *p, const json_t *held, const char *uid,
                          const json_t *devs, struct kdev_err *err)
{
        json_t *d;
        size_t i;

        json_array_foreach(devs, i, d) {
                const char *dev = json_string_value(json_object_get(d, "device"));
                char key[2][600];
                int n = held_keys(d, true, key);

                for (int k = 0; k < n; k++) {
                        const json_t *h = json_object_get(held, key[k]);
                        const char *ouid = json_string_value(json_array_get(h, 0));
                        const char *odev = json_string_value(json_array_get(h, 1));

                        if (!ouid || !odev || !strcmp(ouid, uid))
                                continue;
                        const json_t *orec = kdev_dra_cp_get(&p->cp, ouid);
                        const char *ons = json_string_value(json_object_get(orec, "namespace"));
                        const char *oname = json_string_value(json_object_get(orec, "name"));
                        const json_t *od = NULL, *x;
                        size_t j;
                        char as[128] = "";

                        json_array_foreach(json_object_get(orec, "devices"), j, x) {
                                if (!strcmp(json_string_value(json_object_get(x, "device")),
                                            odev))
                                        od = x;
                        }
                        /* shares of one device: the capacity sum decides
                         * (kdev_dra_share_check) */
                        if (od && kdev_dra_share_record(od) && kdev_dra_share_record(d) &&
                            !strcmp(dev, odev))
                                continue;
                        if (strcmp(dev, odev))
                                snprintf(as, sizeof(as), " (as %s)", odev);
                        if (od && kdev_dra_share_record(od))
                                return kdev_err_set(
                                        err, EBUSY,
                                        "device %s is already prepared for claim %s/%s (%s)%s "
                                        "as a share (shareID %s): this allocation %s",
                                        dev, ons ? ons : "", oname ? oname : "", ouid, as,
                                        json_string_value(json_object_get(
                                                json_object_get(od, "share"), "shareID")),
                                        kdev_dra_share_record(d)
                                                ? "is a share of another device overlapping it"
                                                : "has no shareID and needs the whole device");
                        /* a share beside a claim that holds the device
                         * whole: the device is shareable, its holder is not */
                        if (od && kdev_dra_share_record(d) && !as[0])
                                return kdev_err_set(
                                        err, EBUSY,
                                        "device %s is already prepared for claim %s/%s (%s), "
                                        "which holds it whole (no shareID): this allocation is "
                                        "a share (shareID %s) and cannot be prepared beside it",
                                        dev, ons ? ons : "", oname ? oname : "", ouid,
                                        json_string_value(json_object_get(
                                                json_object_get(d, "share"), "shareID")));
                        return kdev_err_set(err, EBUSY,
                                            "device %s is already prepared for claim %s/%s "
                                            "(%s)%s: it is not shareable and this allocation has "
                                            "no adminAccess",
                                            dev, ons ? ons : "", oname ? oname : "", ouid, as);
                }
        }
        return 0;
}

int kdev_dra_fetch_claim(struct kdev_dra_plugin *p, const char *ns, const char *name,
                         json_t **claim, struct kdev_err *err)
{
        int rc;

        *claim = NULL;
        pthread_mutex_lock(&p->source_lock);
        rc = p->o.get_claim(p->o.get_claim_arg, ns, name, claim, err);
        pthread_mutex_unlock(&p->source_lock);
        if (rc < 0) {
                json_decref(*claim);
                *claim = NULL;
                if (err && !err->code)
                        kdev_err_set(err, -rc, "claim source failed");
                kdev_err_wrap(err, "claim %s/%s", ns, name);
                return rc;
        }
        if (!json_is_object(*claim)) {
                json_decref(*claim);
                *claim = NULL;
                return kdev_err_set(err, EPROTO, "claim %s/%s: source returned no object", ns,
                                    name);
        }
        return 0;
}

/* Nanoseconds of CLOCK_MONOTONIC. */
static uint64_t now_ns(void)
{
        struct timespec ts;

        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* The checkpoint record of |uid|, changeable in place (mark it with
 * kdev_dra_cp_touch), or NULL. */
static json_t *cp_record(struct kdev_dra_plugin *p, const char *uid)
{
        return (json_t *)kdev_dra_cp_get(&p->cp, uid);
}

static bool has_mig(const json_t *devs)
{
        size_t i;
        json_t *d;

        json_array_foreach(devs, i, d) {
                if (kdev_dra_mig_record(d))
                        return true;
        }
        return false;
}

/* Forgets claim |uid|, which is being prepared or was left "migPending":
 * its MIG instances (dynamic MIG) are destroyed first, by their ids, and
 * with |by_placement| (a claim loaded "migPending": a kill may have come
 * before the ids were saved) a record without ids by its placement. With
 * |save_first| (the checkpoint says the claim is prepared) the claim is
 * saved "migPending" before any destroy, so that a kill during them does
 * not make the instances again. A destroy (or that save) that fails keeps
 * the claim recorded "migPending", its records without ids no longer
 * placements (in-process, nothing was made for them), for the next Prepare,
 * Unprepare or kdev_dra_plugin_reconcile_mig, and its error is returned. */
static int drop_new_claim(struct kdev_dra_plugin *p, const char *uid, bool by_placement,
                          bool save_first, struct kdev_err *err)
{
        json_t *rec = cp_record(p, uid);
        json_t *devs = json_object_get(rec, "devices");
        int rc = 0;

        if (!rec || !has_mig(devs)) {
                forget_claim(p, uid);
                return 0;
        }
        if (json_object_set_new(rec, "migPending", json_true()) < 0)
                return kdev_err_set(err, ENOMEM, "out of memory");
        kdev_dra_cp_touch(&p->cp, uid);
        if (save_first)
                rc = kdev_dra_save_checkpoint(p, err);
        if (rc == 0)
                rc = kdev_dra_mig_destroy(p, devs,
                                          by_placement ? KDEV_DRA_MIG_PLACEMENT : KDEV_DRA_MIG_OURS,
                                          NULL, err);
        if (rc == 0) {
                forget_claim(p, uid);
                return 0;
        }
        if (!by_placement) {
                size_t i;
                json_t *d;

                json_array_foreach(devs, i, d) {
                        json_t *m = json_object_get(d, "mig");

                        if (json_is_object(m) && !json_object_get(m, "giId"))
                                json_object_del(d, "mig");
                }
        }
        return rc;
}

/* Removes the CDI spec of claim |uid|, best effort: one half written, or
 * one of a prepared claim whose MIG instance is gone and could not be made
 * again (it names capability nodes that may be someone else's instance
 * now; a later Prepare that remakes it writes it again). */
static void drop_spec(struct kdev_dra_plugin *p, const char *uid)
{
        char fname[512];

        if (spec_file_name(uid, fname, sizeof(fname), NULL) >= 0)
                remove_spec(p, fname, NULL);
}

/* |first| (a failed step's error) and, when the undo failed too, |undo|'s
 * message after it, as |first|. */
static void with_undo_error(struct kdev_err *first, const struct kdev_err *undo)
{
        struct kdev_err e = *first;

        if (undo->code)
                kdev_err_set(first, e.code, "%s; undoing it: %s", e.msg, undo->msg);
}

/* First phase of a claim not in the checkpoint: read (or take the read
 * claim), check, build its spec into *spec and record it in memory (not yet
 * saved). A claim with MIG placements (dynamic MIG) is recorded
 * "migPending", without a spec, and *mig set: its instances are made after
 * the intent is saved (kdev_dra_prepare_many). Returns 0 or a negative
 * errno with it->err. */
static int prepare_new(struct kdev_dra_plugin *p, json_t *held,
                       struct kdev_dra_prepare_item *it, struct kdev_cdi_spec **spec, bool *mig)
{
        const char *ns = it->ns, *name = it->name, *uid = it->uid;
        struct kdev_err *err = &it->err;
        json_t *claim = NULL, *devs = NULL;
        char fname[512];
        uint64_t t0;
        int rc;

        if (it->fetched && it->fetched->rc < 0) {
                *err = it->fetched->err;
                return it->fetched->rc;
        }
        if (it->fetched) {
                claim = json_incref(it->fetched->claim);
        } else {
                t0 = now_ns();
                rc = kdev_dra_fetch_claim(p, ns, name, &claim, err);
                p->stats.read_ns += now_ns() - t0;
                if (rc < 0)
                        return rc;
        }
        t0 = now_ns();
        rc = devices_of_claim(p, claim, ns, name, uid, &devs, err);
        /* the class and claim configs onto the device records
         * (claim_config.h) */
        if (rc == 0 && (rc = kdev_dra_claim_config(claim, p->driver, p->pool, ns, name, uid,
                                                   devs, err)) < 0)
                json_decref(devs);
        json_decref(claim);
        if (rc < 0)
                goto out;
        rc = kdev_dra_share_resolve(p, uid, devs, err);
        if (rc == 0)
                rc = check_healthy(p, devs, err);
        if (rc == 0)
                rc = check_not_held(p, held, uid, devs, err);
        if (rc == 0)
                rc = kdev_dra_share_check(p, uid, devs, err);
        int n_mig = 0;
        if (rc == 0)
                rc = n_mig = kdev_dra_mig_resolve(p, ns, name, uid, devs, err);
        if (rc >= 0)
                rc = spec_file_name(uid, fname, sizeof(fname), err);
        if (rc >= 0 && n_mig == 0)
                rc = build_spec(p, uid, devs, true, spec, err);
        if (rc < 0) {
                json_decref(devs);
                rc = kdev_err_wrap(err, "claim %s/%s (%s)", ns, name, uid);
                goto out;
        }
        /* a claim whose MIG instances are still to be made has no CDI
         * device IDs yet (build_spec sets them once they are) */
        for (size_t k = 0; n_mig > 0 && k < json_array_size(devs); k++)
                if (json_object_set_new(json_array_get(devs, k), "cdiDeviceIDs",
                                        json_array()) < 0)
                        rc = kdev_err_set(err, ENOMEM, "out of memory");
        /* recorded before the spec is written: every spec kdev writes
         * belongs to a claim the checkpoint holds, so Unprepare removes only
         * those */
        if (rc >= 0)
                rc = kdev_dra_cp_put(&p->cp, uid, ns, name, devs, err);
        else
                json_decref(devs);
        if (rc == 0 && held_add(held, uid, json_object_get(kdev_dra_cp_get(&p->cp, uid),
                                                           "devices")) < 0)
                rc = kdev_err_set(err, ENOMEM, "out of memory");
        if (rc == 0 && n_mig > 0 &&
            json_object_set_new(cp_record(p, uid), "migPending", json_true()) < 0)
                rc = kdev_err_set(err, ENOMEM, "out of memory");
        *mig = rc == 0 && n_mig > 0;
        if (rc < 0) {
                kdev_cdi_spec_free(*spec);
                *spec = NULL;
                forget_claim(p, uid);
                rc = kdev_err_wrap(err, "claim %s/%s (%s): checkpoint", ns, name, uid);
        }
out:
        p->stats.build_ns += now_ns() - t0;
        return rc;
}

int kdev_dra_prepare_many(struct kdev_dra_plugin *p, struct kdev_dra_prepare_item *v, size_t n)
{
        struct kdev_cdi_spec **specs = calloc(n ? n : 1, sizeof(*specs));
        size_t *same = calloc(n ? n : 1, sizeof(*same)); /* index + 1 of an earlier item */
        bool *mig = calloc(n ? n : 1, sizeof(*mig)); /* MIG instances to make */
        size_t i, n_new = 0, n_mig = 0, failed = 0;
        struct kdev_err serr = {0};
        bool undone = false;
        uint64_t t0;
        int rc;

        if (!specs || !same || !mig) {
                free(specs);
                free(same);
                free(mig);
                for (i = 0; i < n; i++)
                        v[i].rc = kdev_err_set(&v[i].err, ENOMEM, "out of memory");
                return (int)n;
        }
        p->stats.calls++;
        /* 1: checks, answers from the checkpoint, specs built, records put */
        for (i = 0; i < n; i++) {
                struct kdev_dra_prepare_item *it = &v[i];
                const json_t *rec;

                it->rc = 0;
                it->devices = NULL;
                it->recorded = false;
                memset(&it->err, 0, sizeof(it->err));
                it->rc = kdev_dra_check_claim_uid(it->ns, it->name, it->uid, &it->err);
                if (it->rc < 0)
                        continue;
                for (size_t j = 0; j < i && !same[i]; j++)
                        if (v[j].uid && !strcmp(v[j].uid, it->uid))
                                same[i] = j + 1;
                if (same[i])
                        continue;
                rec = kdev_dra_cp_get(&p->cp, it->uid);
                /* left "migPending" by a destroy that failed: undone
                 * first, then prepared anew */
                if (rec && json_is_true(json_object_get(rec, "migPending"))) {
                        undone = true;
                        it->rc = drop_new_claim(p, it->uid, true, false, &it->err);
                        if (it->rc < 0) {
                                kdev_err_wrap(&it->err,
                                              "claim %s/%s (%s): the MIG instances it still "
                                              "holds from an earlier call cannot be destroyed",
                                              it->ns, it->name, it->uid);
                                continue;
                        }
                        rec = NULL;
                }
                if (rec) {
                        json_t *devs = json_object_get(rec, "devices");

                        it->recorded = true;
                        t0 = now_ns();
                        /* a region gone (a reboot, someone's cleanup) is made again */
                        rc = kdev_dra_share_make_regions(p, it->ns, it->name, it->uid, devs,
                                                         true, &it->err);
                        /* and a MIG instance gone (a driver reload), as at a
                         * restart: the spec never names another's instance */
                        if (rc == 0 && p->o.mig && has_mig(devs)) {
                                rc = kdev_dra_mig_remake(p, it->uid, devs, NULL, NULL,
                                                         &it->err);
                                undone |= rc != 0;
                                if (rc < 0)
                                        drop_spec(p, it->uid);
                                rc = rc < 0 ? rc : 0;
                        }
                        if (rc == 0)
                                rc = ensure_spec(p, it->uid, json_object_get(rec, "devices"),
                                                 &it->err);
                        p->stats.specs_ns += now_ns() - t0;
                        if (rc < 0)
                                it->rc = kdev_err_wrap(&it->err, "claim %s/%s (%s)", it->ns,
                                                       it->name, it->uid);
                        else
                                it->devices = json_object_get(rec, "devices");
                        continue;
                }
                p->stats.claims++;
                if (!p->held)
                        p->held = held_index(p);
                if (!p->held) {
                        it->rc = kdev_err_set(&it->err, ENOMEM, "out of memory");
                        continue;
                }
                it->rc = prepare_new(p, p->held, it, &specs[i], &mig[i]);
                n_new += it->rc == 0;
                n_mig += mig[i];
        }
        /* 1b: dynamic MIG (plugin.h): the intent saved, then the instances
         * made and those claims' specs built */
        if (n_mig > 0) {
                t0 = now_ns();
                rc = kdev_dra_save_checkpoint(p, &serr);
                p->stats.checkpoint_ns += now_ns() - t0;
                p->stats.checkpoint_writes++;
                for (i = 0; i < n; i++) {
                        if (!mig[i])
                                continue;
                        json_t *rec = cp_record(p, v[i].uid);
                        json_t *devs = json_object_get(rec, "devices");
                        int r = rc;

                        if (r < 0) {
                                v[i].err = serr;
                                kdev_err_wrap(&v[i].err, "checkpoint");
                        }
                        if (r == 0)
                                r = kdev_dra_mig_create(p, devs, &v[i].err);
                        if (r == 0)
                                r = build_spec(p, v[i].uid, devs, true, &specs[i], &v[i].err);
                        if (r < 0) {
                                struct kdev_err derr = {0};

                                drop_new_claim(p, v[i].uid, false, false, &derr);
                                with_undo_error(&v[i].err, &derr);
                                v[i].rc = kdev_err_wrap(&v[i].err, "claim %s/%s (%s)", v[i].ns,
                                                        v[i].name, v[i].uid);
                                n_new--;
                                undone = true;
                                continue;
                        }
                        json_object_del(rec, "migPending");
                        kdev_dra_cp_touch(&p->cp, v[i].uid);
                }
        }
        /* 2: one checkpoint write for every claim recorded above, before any
         * of their specs is written */
        if (n_new > 0) {
                t0 = now_ns();
                rc = kdev_dra_save_checkpoint(p, &serr);
                p->stats.checkpoint_ns += now_ns() - t0;
                p->stats.checkpoint_writes++;
                for (i = 0; rc < 0 && i < n; i++) {
                        if (!specs[i])
                                continue;
                        kdev_cdi_spec_free(specs[i]);
                        specs[i] = NULL;
                        drop_new_claim(p, v[i].uid, false, false, NULL);
                        undone = true; /* 1b may have saved it "migPending" */
                        v[i].err = serr;
                        v[i].rc = kdev_err_wrap(&v[i].err, "claim %s/%s (%s): checkpoint",
                                                v[i].ns, v[i].name, v[i].uid);
                }
        }
        /* 3: the specs of the claims now on disk */
        t0 = now_ns();
        for (i = 0; i < n; i++) {
                if (!specs[i])
                        continue;
                const json_t *devs = json_object_get(kdev_dra_cp_get(&p->cp, v[i].uid),
                                                     "devices");

                /* the share regions before the spec that mounts them */
                rc = kdev_dra_share_make_regions(p, v[i].ns, v[i].name, v[i].uid, devs, false,
                                                 &v[i].err);
                if (rc == 0)
                        rc = write_spec(p, v[i].uid, specs[i], &v[i].err);
                kdev_cdi_spec_free(specs[i]);
                p->stats.spec_writes++;
                if (rc < 0) {
                        kdev_dra_share_remove_regions(devs, NULL);
                        /* undone (best effort: a record left by a failed
                         * save makes the next Prepare or Unprepare of the
                         * claim finish the job) */
                        drop_spec(p, v[i].uid);
                        /* saved prepared by 2: "migPending" before its
                         * instances are destroyed */
                        struct kdev_err derr = {0};

                        drop_new_claim(p, v[i].uid, false, true, &derr);
                        with_undo_error(&v[i].err, &derr);
                        undone = true;
                        v[i].rc = kdev_err_wrap(&v[i].err, "claim %s/%s (%s)", v[i].ns,
                                                v[i].name, v[i].uid);
                        continue;
                }
                v[i].devices = json_object_get(kdev_dra_cp_get(&p->cp, v[i].uid), "devices");
        }
        p->stats.specs_ns += now_ns() - t0;
        if (undone) {
                t0 = now_ns();
                kdev_dra_save_checkpoint(p, NULL);
                p->stats.checkpoint_ns += now_ns() - t0;
                p->stats.checkpoint_writes++;
        }
        for (i = 0; i < n; i++) {
                if (same[i]) {
                        const struct kdev_dra_prepare_item *o = &v[same[i] - 1];

                        v[i].rc = o->rc;
                        v[i].err = o->err;
                        v[i].devices = o->devices;
                        v[i].recorded = o->recorded;
                }
                failed += v[i].rc < 0;
        }
        free(specs);
        free(same);
        free(mig);
        return (int)failed;
}

void kdev_dra_plugin_stats(const struct kdev_dra_plugin *p, struct kdev_dra_prepare_stats *out)
{
        *out = p->stats;
}

int kdev_dra_prepare_fetched(struct kdev_dra_plugin *p, const char *ns, const char *name,
                             const char *uid, const struct kdev_dra_fetch *fetched,
                             const json_t **devices, struct kdev_err *err)
{
        struct kdev_dra_prepare_item it = {
                .ns = ns, .name = name, .uid = uid, .fetched = fetched,
        };

        kdev_dra_prepare_many(p, &it, 1);
        if (it.rc < 0) {
                if (err)
                        *err = it.err;
                return it.rc;
        }
        if (devices)
                *devices = it.devices;
        return 0;
}

int kdev_dra_prepare_claim(struct kdev_dra_plugin *p, const char *ns, const char *name,
                           const char *uid, const json_t **devices, struct kdev_err *err)
{
        return kdev_dra_prepare_fetched(p, ns, name, uid, NULL, devices, err);
}

int kdev_dra_unprepare_claim(struct kdev_dra_plugin *p, const char *uid, struct kdev_err *err)
{
        char fname[512];
        json_t *rec;
        int rc;

        rc = spec_file_name(uid, fname, sizeof(fname), err);
        if (rc < 0)
                return rc;
        /* only what kdev wrote: a claim the checkpoint does not record has no
         * spec of ours (prepare records the claim before writing its spec) */
        rec = json_incref((json_t *)kdev_dra_cp_get(&p->cp, uid));
        if (!rec)
                return 0;
        rc = remove_spec(p, fname, err);
        if (rc < 0) {
                json_decref(rec);
                return kdev_err_wrap(err, "claim %s: CDI spec", uid);
        }
        /* the share regions, after the spec that mounts them */
        rc = kdev_dra_share_remove_regions(json_object_get(rec, "devices"), err);
        /* the MIG instances the claim made (dynamic MIG), once the claim is
         * saved "migPending" (a kill during the destroys leaves a record
         * that kdev_dra_plugin_reconcile_mig destroys and forgets, not one
         * it would make again): one that cannot be destroyed (a process
         * still runs on it) keeps the claim for kubelet's retry */
        if (rc == 0 && has_mig(json_object_get(rec, "devices"))) {
                /* an earlier Unprepare's destroy that did not finish */
                bool again = json_is_true(json_object_get(rec, "migPending"));

                if (!again && p->o.mig) {
                        rc = json_object_set_new(rec, "migPending", json_true());
                        kdev_dra_cp_touch(&p->cp, uid);
                        rc = rc < 0 ? kdev_err_set(err, ENOMEM, "out of memory")
                                    : kdev_dra_save_checkpoint(p, err);
                        if (rc < 0) {
                                json_object_del(rec, "migPending");
                                kdev_dra_cp_touch(&p->cp, uid);
                                json_decref(rec);
                                return kdev_err_wrap(err, "claim %s: checkpoint", uid);
                        }
                }
                rc = kdev_dra_mig_destroy(p, json_object_get(rec, "devices"),
                                          again ? KDEV_DRA_MIG_PLACEMENT : KDEV_DRA_MIG_EXACT,
                                          NULL, err);
        }
        if (rc < 0) {
                json_decref(rec);
                return kdev_err_wrap(err, "claim %s", uid);
        }
        forget_claim(p, uid);
        rc = kdev_dra_save_checkpoint(p, err);
        if (rc < 0) {
                kdev_dra_cp_restore(&p->cp, uid, rec); /* keep it for a retry */
                json_decref(p->held); /* made again when next needed */
                p->held = NULL;
                json_decref(rec);
                return kdev_err_wrap(err, "claim %s: checkpoint", uid);
        }
        json_decref(rec);
        return 0;
}

int kdev_dra_plugin_reconcile_mig(struct kdev_dra_plugin *p, kdev_dra_mig_report_fn fn,
                                  void *arg, struct kdev_err *err)
{
        json_t *uids = json_array();
        const char *key;
        json_t *rec, *u;
        size_t i;
        int acted = 0;
        bool changed = false;

        if (!p->o.mig) {
                json_decref(uids);
                return 0;
        }
        if (!uids)
                return kdev_err_set(err, ENOMEM, "out of memory");
        json_object_foreach(p->cp.claims, key, rec) {
                if (has_mig(json_object_get(rec, "devices")) &&
                    json_array_append_new(uids, json_string(key)) < 0) {
                        json_decref(uids);
                        return kdev_err_set(err, ENOMEM, "out of memory");
                }
        }
        json_array_foreach(uids, i, u) {
                const char *uid = json_string_value(u);
                struct kdev_err e = {0};
                unsigned destroyed = 0;
                int rc;

                rec = cp_record(p, uid);
                json_t *devs = json_object_get(rec, "devices");

                acted++;
                if (json_is_true(json_object_get(rec, "migPending"))) {
                        /* the kill came before the claim was prepared */
                        rc = kdev_dra_mig_destroy(p, devs, KDEV_DRA_MIG_PLACEMENT, &destroyed,
                                                  &e);
                        if (rc < 0) {
                                if (fn)
                                        fn(arg, "failed", uid, NULL, e.msg);
                                continue;
                        }
                        if (fn)
                                fn(arg, destroyed ? "destroyed" : "forgotten", uid, NULL, NULL);
                        forget_claim(p, uid);
                        changed = true;
                        continue;
                }
                rc = kdev_dra_mig_remake(p, uid, devs, fn, arg, &e);
                if (rc == 0) {
                        acted--;
                        continue;
                }
                changed = true;
                if (rc > 0)
                        rc = ensure_spec(p, uid, devs, &e);
                else
                        drop_spec(p, uid);
                if (rc < 0 && fn)
                        fn(arg, "failed", uid, NULL, e.msg);
        }
        json_decref(uids);
        if (changed && kdev_dra_save_checkpoint(p, err) < 0)
                return kdev_err_wrap(err, "dynamic MIG reconcile: checkpoint");
        return acted;
}
