/* NVIDIA time-slicing: replicas of the built NVIDIA resources (see
 * sharing.h). */
#include "nvidia/sharing.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/resource_name.h"
#include "nvidia/isolation.h"
#include "nvidia/nvidia_internal.h"

#define TS "sharing.timeSlicing.resources"
#define MPS "sharing.mps.resources"


struct kdev_nvidia_rdata *kdev_nvidia_rdata_dup(const struct kdev_nvidia_rdata *src)
{
        struct kdev_nvidia_rdata *d = calloc(1, sizeof(*d));
        if (!d)
                return NULL;
        *d = *src;
        d->infos = NULL;
        d->n_infos = 0;
        d->dev_root = NULL;
        d->dev_lookup = NULL;
        d->annotation_prefix = NULL;
        d->imex_channels = NULL;
        d->pref = NULL; /* link tables are attached after sharing, per resource */
        d->share = NULL;
        d->mps_root = NULL;
        if ((src->mps_root && !(d->mps_root = strdup(src->mps_root))) ||
            (src->dev_root && !(d->dev_root = strdup(src->dev_root))) ||
            (src->dev_lookup && !(d->dev_lookup = strdup(src->dev_lookup))) ||
            (src->annotation_prefix && !(d->annotation_prefix = strdup(src->annotation_prefix))))
                goto fail;
        if (src->share && !(d->share = kdev_nvidia_share_new(&src->share->iso, src->share->replicas,
                                                             src->share->root,
                                                             src->share->cdi_dir)))
                goto fail;
        if (src->n_imex_channels) {
                d->imex_channels = malloc(src->n_imex_channels * sizeof(*d->imex_channels));
                if (!d->imex_channels)
                        goto fail;
                memcpy(d->imex_channels, src->imex_channels,
                       src->n_imex_channels * sizeof(*d->imex_channels));
        }
        return d;
fail:
        kdev_nvidia_rdata_free(d);
        return NULL;
}

static bool is_nvidia(const struct kdev_resource *r)
{
        return r->ops == &kdev_nvidia_resource_ops;
}

static struct kdev_resource *find(struct kdev_resource_set *set, const char *name, size_t *at)
{
        for (size_t i = 0; i < set->n_resources; i++) {
                if (strcmp(set->resources[i].name, name) == 0) {
                        if (at)
                                *at = i;
                        return &set->resources[i];
                }
        }
        return NULL;
}

/* Does device reference |ref| (GPU index, MIG index, GPU UUID, MIG UUID or
 * legacy "MIG-GPU-<uuid>/<gi>/<ci>") name the device of |info|? */
static bool ref_matches(const char *ref, const struct kdev_nvidia_devinfo *info)
{
        if (strcmp(ref, info->index) == 0 || strcmp(ref, info->uuid) == 0)
                return true;
        if (strncmp(ref, "MIG-GPU-", 8) != 0 || info->gi == KDEV_NVIDIA_NO_INSTANCE)
                return false;
        const char *slash = strchr(ref, '/');
        if (!slash)
                return false;
        size_t plen = (size_t)(slash - (ref + 4));
        if (strlen(info->parent_uuid) != plen || strncmp(ref + 4, info->parent_uuid, plen) != 0)
                return false;
        unsigned gi, ci;
        char tail;
        return sscanf(slash, "/%u/%u%c", &gi, &ci, &tail) == 2 && gi == info->gi &&
               ci == info->ci;
}

/* Marks the devices of |r| that entry |e| selects. */
static void select_devices(const struct kdev_resource *r, const char *sec,
                           const struct kdev_nvidia_replicated_resource *e, size_t ei, bool *sel,
                           kdev_nvidia_warn_fn warn, void *arg)
{
        switch (e->devices_kind) {
        case KDEV_NVIDIA_DEVICES_ALL:
                for (size_t i = 0; i < r->n_devices; i++)
                        sel[i] = true;
                return;
        case KDEV_NVIDIA_DEVICES_COUNT:
                for (size_t i = 0; i < r->n_devices && i < e->devices_count; i++)
                        sel[i] = true;
                if (r->n_devices > 0 && e->devices_count > r->n_devices)
                        kdev_nvidia_warnf(warn, arg,
                                          "%s[%zu].devices: %u requested but %s has %zu; "
                                             "sharing all of them",
                                          sec, ei, e->devices_count, r->name, r->n_devices);
                return;
        case KDEV_NVIDIA_DEVICES_LIST:
                for (size_t k = 0; k < e->n_devices; k++) {
                        bool any = false;
                        for (size_t i = 0; i < r->n_devices; i++) {
                                const struct kdev_nvidia_devinfo *info = r->devices[i].data;
                                if (info && ref_matches(e->devices[k], info)) {
                                        sel[i] = true;
                                        any = true;
                                }
                        }
                        if (!any && r->n_devices > 0)
                                kdev_nvidia_warnf(warn, arg,
                                                  "%s[%zu].devices[%zu]: \"%s\" is not a "
                                                     "device of %s on this node; ignored",
                                                  sec, ei, k, e->devices[k], r->name);
                }
                return;
        }
}

static int copy_specs(struct kdev_device *dst, const struct kdev_device *src)
{
        if (!src->n_specs)
                return 0;
        dst->specs = calloc(src->n_specs, sizeof(*dst->specs));
        if (!dst->specs)
                return -ENOMEM;
        for (size_t k = 0; k < src->n_specs; k++) {
                const struct kdev_device_spec *s = &src->specs[k];
                struct kdev_device_spec *t = &dst->specs[dst->n_specs++];
                if ((s->container_path && !(t->container_path = strdup(s->container_path))) ||
                    (s->host_path && !(t->host_path = strdup(s->host_path))) ||
                    (s->permissions && !(t->permissions = strdup(s->permissions))))
                        return -ENOMEM;
        }
        return 0;
}

/* The replicas of the selected devices of |r|: *reps (|n_sel| x |replicas|
 * devices, device order then replica number) and *infos (their devinfos;
 * reps[i].data points to infos[i]). */
static int make_replicas(const struct kdev_resource *r, const bool *sel, size_t n_sel,
                         unsigned replicas, struct kdev_device **reps,
                         struct kdev_nvidia_devinfo **infos)
{
        size_t total = n_sel * replicas;
        *reps = calloc(total ? total : 1, sizeof(**reps));
        *infos = calloc(total ? total : 1, sizeof(**infos));
        if (!*reps || !*infos)
                return -ENOMEM;
        size_t k = 0;
        for (size_t i = 0; i < r->n_devices; i++) {
                if (!sel[i])
                        continue;
                const struct kdev_device *src = &r->devices[i];
                for (unsigned n = 0; n < replicas; n++, k++) {
                        struct kdev_device *dst = &(*reps)[k];
                        dst->healthy = src->healthy;
                        dst->numa_node = src->numa_node;
                        if (asprintf(&dst->id, "%s" KDEV_NVIDIA_REPLICA_SEP "%u", src->id, n) < 0) {
                                dst->id = NULL;
                                return -ENOMEM;
                        }
                        if (copy_specs(dst, src) < 0)
                                return -ENOMEM;
                        (*infos)[k] = *(const struct kdev_nvidia_devinfo *)src->data;
                        (*infos)[k].replica = (int)n;
                        dst->data = &(*infos)[k];
                }
        }
        return 0;
}

static void free_devices(struct kdev_device *devs, size_t n)
{
        for (size_t i = 0; devs && i < n; i++)
                kdev_device_clear(&devs[i]);
        free(devs);
}

/* Rebuilds |r|'s devices and devinfos: kept devices (moved) and, when |reps|
 * is given, the replicas in place of the selected devices. Cannot fail. */
static void rebuild(struct kdev_resource *r, const bool *sel, struct kdev_device *reps,
                    struct kdev_nvidia_devinfo *rep_infos, unsigned replicas,
                    struct kdev_device *new_devs, struct kdev_nvidia_devinfo *new_infos,
                    size_t *n_new)
{
        struct kdev_nvidia_rdata *d = r->ops_data;
        size_t k = 0, rk = 0;
        for (size_t i = 0; i < r->n_devices; i++) {
                if (!sel[i]) {
                        new_devs[k] = r->devices[i];
                        new_infos[k] = *(const struct kdev_nvidia_devinfo *)r->devices[i].data;
                        new_devs[k].data = &new_infos[k];
                        k++;
                        continue;
                }
                kdev_device_clear(&r->devices[i]);
                for (unsigned n = 0; reps && n < replicas; n++, rk++, k++) {
                        new_devs[k] = reps[rk];
                        new_infos[k] = rep_infos[rk];
                        new_devs[k].data = &new_infos[k];
                }
        }
        free(r->devices);
        free(d->infos);
        r->devices = new_devs;
        r->n_devices = k;
        d->infos = new_infos;
        d->n_infos = k;
        *n_new = k;
}

/* Applies entry |ei| to resource |ri| of |set|. */
static int share_one(struct kdev_resource_set *set, size_t ri, const char *target, const char *sec,
                     const struct kdev_nvidia_replicated_resource *e, size_t ei, bool fail_gt1,
                     kdev_nvidia_warn_fn warn, void *arg, struct kdev_err *err)
{
        struct kdev_resource *r = &set->resources[ri];
        size_t n = r->n_devices, n_sel = 0;
        bool *sel = calloc(n ? n : 1, sizeof(*sel));
        if (!sel)
                return kdev_err_set(err, ENOMEM, "out of memory");
        bool rename = strcmp(target, r->name) != 0;
        if (rename) {
                select_devices(r, sec, e, ei, sel, warn, arg);
        } else {
                /* no new name: NVIDIA's behaviour, every device shared
                 * (replicas and whole devices never mix in one resource) */
                if (e->devices_kind != KDEV_NVIDIA_DEVICES_ALL)
                        kdev_nvidia_warnf(warn, arg,
                                          "%s[%zu].devices: honoured only together with rename "
                                             "(or renameByDefault); sharing every device of %s, "
                                             "as NVIDIA does",
                                          sec, ei, r->name);
                for (size_t i = 0; i < n; i++)
                        sel[i] = true;
        }
        for (size_t i = 0; i < n; i++) {
                if (!sel[i])
                        continue;
                const struct kdev_nvidia_devinfo *info = r->devices[i].data;
                if (!info || info->replica >= 0) {
                        int rc = kdev_err_set(err, EEXIST,
                                              "%s[%zu]: device %s of %s is shared twice", sec, ei,
                                              info ? info->uuid : r->devices[i].id, r->name);
                        free(sel);
                        return rc;
                }
                n_sel++;
        }
        /* With devices on the node, a renamed subset that selects nothing
         * makes no empty resource, and one that selects every device renames
         * in place as `devices: all` does. Without devices (no GPU found yet)
         * both names are kept, so that a rebuild after rediscovery finds every
         * name already served. */
        if (rename && n > 0 && n_sel == 0) {
                kdev_nvidia_warnf(warn, arg,
                                  "%s[%zu].devices: selects no device of %s; %s not advertised",
                                  sec, ei, r->name, target);
                free(sel);
                return 0;
        }
        bool in_place = !rename || e->devices_kind == KDEV_NVIDIA_DEVICES_ALL ||
                        (n > 0 && n_sel == n);
        struct kdev_device *reps = NULL, *new_devs = NULL;
        struct kdev_nvidia_devinfo *rep_infos = NULL, *new_infos = NULL;
        struct kdev_nvidia_rdata *nd = NULL;
        char *new_name = NULL;
        size_t total = n_sel * e->replicas, n_new = 0;
        if (make_replicas(r, sel, n_sel, e->replicas, &reps, &rep_infos) < 0)
                goto nomem;
        if (rename && !(new_name = strdup(target)))
                goto nomem;
        if (in_place) {
                size_t cap = n - n_sel + total;
                new_devs = calloc(cap ? cap : 1, sizeof(*new_devs));
                new_infos = calloc(cap ? cap : 1, sizeof(*new_infos));
                if (!new_devs || !new_infos)
                        goto nomem;
                rebuild(r, sel, reps, rep_infos, e->replicas, new_devs, new_infos, &n_new);
                free(reps); /* moved */
                free(rep_infos);
                if (rename) {
                        free(r->name);
                        r->name = new_name;
                }
                ((struct kdev_nvidia_rdata *)r->ops_data)->fail_gt1 = fail_gt1;
                free(sel);
                return 0;
        }
        /* split: a new resource after |r| with the replicas */
        size_t keep = n - n_sel;
        new_devs = calloc(keep ? keep : 1, sizeof(*new_devs));
        new_infos = calloc(keep ? keep : 1, sizeof(*new_infos));
        nd = kdev_nvidia_rdata_dup(r->ops_data);
        struct kdev_resource *grown =
                realloc(set->resources, (set->n_resources + 1) * sizeof(*grown));
        if (grown)
                set->resources = grown;
        if (!new_devs || !new_infos || !nd || !grown)
                goto nomem;
        r = &set->resources[ri];
        rebuild(r, sel, NULL, NULL, 0, new_devs, new_infos, &n_new);
        nd->infos = rep_infos;
        nd->n_infos = total;
        nd->fail_gt1 = fail_gt1;
        struct kdev_resource nr = {
                .name = new_name,
                .devices = reps,
                .n_devices = total,
                .ops = &kdev_nvidia_resource_ops,
                .ops_data = nd,
        };
        memmove(&set->resources[ri + 2], &set->resources[ri + 1],
                (set->n_resources - ri - 1) * sizeof(*set->resources));
        set->resources[ri + 1] = nr;
        set->n_resources++;
        free(sel);
        return 0;
nomem:
        free(sel);
        free_devices(reps, reps ? total : 0);
        free(rep_infos);
        free(new_devs);
        free(new_infos);
        free(new_name);
        kdev_nvidia_rdata_free(nd);
        return kdev_err_set(err, ENOMEM, "out of memory");
}

unsigned kdev_nvidia_mps_max_replicas(int cc_major, int cc_minor)
{
        return cc_major > 7 || (cc_major == 7 && cc_minor >= 5) ? 48 : 16;
}

/* sharing.mps entry |e| on resource |r|: -EINVAL for a MIG device, -ERANGE when |e|'s replicas exceed a device's limit. */
static int mps_check(const struct kdev_resource *r, const struct kdev_nvidia_replicated_resource *e)
{
        for (size_t i = 0; i < r->n_devices; i++) {
                const struct kdev_nvidia_devinfo *info = r->devices[i].data;
                if (!info)
                        continue;
                if (info->gi != KDEV_NVIDIA_NO_INSTANCE)
                        return -EINVAL;
                if (e->replicas > kdev_nvidia_mps_max_replicas(info->cc_major, info->cc_minor))
                        return -ERANGE;
        }
        return 0;
}

/* NVIDIA's texts for mps_check's errors (internal/plugin/mps.go,
 * cmd/mps-control-daemon/mps/manager.go and device.go). */
static int mps_error(int rc, const struct kdev_resource *r,
                     const struct kdev_nvidia_replicated_resource *e, struct kdev_err *err)
{
        if (rc == -EINVAL)
                return kdev_err_set(err, EINVAL, "sharing using MPS is not supported for MIG devices");
        unsigned max = 48;
        for (size_t i = 0; i < r->n_devices; i++) {
                const struct kdev_nvidia_devinfo *info = r->devices[i].data;
                unsigned m = info ? kdev_nvidia_mps_max_replicas(info->cc_major, info->cc_minor) : 48;
                max = m < max ? m : max;
        }
        return kdev_err_set(err, ERANGE,
                            "invalid MPS configuration: invalid device maximum allowed replicas "
                            "exceeded: %u > %u",
                            e->replicas, max);
}

/* `isolation` (isolation.h): the share record of each isolated resource of
 * |set|, and a warning when explicit shares overcommit a device. */
static int isolate(struct kdev_resource_set *set, const struct kdev_nvidia_config *cfg,
                   kdev_nvidia_warn_fn warn, void *warn_arg, struct kdev_err *err)
{
        const struct kdev_nvidia_isolation *iso = &cfg->isolation;
        for (size_t i = 0; iso->present && i < iso->n_resources; i++) {
                const struct kdev_nvidia_isolated_resource *e = &iso->resources[i];
                struct kdev_resource *r = find(set, e->name, NULL);
                unsigned replicas = kdev_nvidia_time_slicing_replicas(cfg, e->name);
                if (!r || !is_nvidia(r) || replicas == 0)
                        continue;
                struct kdev_nvidia_rdata *d = r->ops_data;
                struct kdev_nvidia_share_rdata *sh =
                        kdev_nvidia_share_new(e, replicas, cfg->share_root, cfg->cdi_dir);
                if (!sh)
                        return kdev_err_set(err, ENOMEM, "out of memory");
                kdev_nvidia_share_free(d->share);
                d->share = sh;
                for (size_t k = 0; k < r->n_devices; k++) {
                        const struct kdev_nvidia_devinfo *info = r->devices[k].data;
                        struct kdev_nvidia_replica_share rs =
                                kdev_nvidia_replica_share(e, info->memory, replicas);
                        unsigned long long need = rs.memory * replicas;
                        bool over_mem = info->memory && need / replicas == rs.memory &&
                                        need > info->memory;
                        bool over_compute = rs.compute * replicas > 100;
                        if (info->replica == 0 && (over_mem || over_compute))
                                kdev_nvidia_warnf(warn, warn_arg,
                                                  "isolation.resources[%zu]: %u replicas of %s "
                                                  "ask for %llu bytes and %u%% of it, more than "
                                                  "its %llu bytes and 100%%; the shares are "
                                                  "limits, not guarantees",
                                                  i, replicas, info->uuid, need,
                                                  rs.compute * replicas, info->memory);
                }
        }
        return 0;
}

int kdev_nvidia_apply_sharing(struct kdev_resource_set *set, const struct kdev_nvidia_config *cfg,
                              kdev_nvidia_warn_fn warn, void *warn_arg, struct kdev_err *err)
{
        const struct kdev_nvidia_replicated *ts = kdev_nvidia_replicated_section(cfg);
        if (!ts->present)
                return 0;
        bool mps = ts == &cfg->mps;
        const char *sec = mps ? MPS : TS;
        bool fail_gt1 = kdev_nvidia_replicated_fail_gt1(cfg, ts);
        for (size_t ei = 0; ei < ts->n_resources; ei++) {
                const struct kdev_nvidia_replicated_resource *e = &ts->resources[ei];
                size_t ri = 0;
                struct kdev_resource *r = find(set, e->name, &ri);
                if (!r)
                        continue; /* not on this node: skipped silently, as NVIDIA */
                if (!is_nvidia(r)) {
                        kdev_nvidia_warnf(warn, warn_arg,
                                          "%s[%zu]: %s is not an NVIDIA resource; not shared",
                                          sec, ei, e->name);
                        continue;
                }
                if (mps) {
                        int rc = mps_check(r, e);
                        if (rc < 0)
                                return mps_error(rc, r, e, err);
                }
                char *dflt = NULL;
                const char *target = e->name;
                if (e->rename) {
                        target = e->rename;
                } else if (ts->rename_by_default) {
                        if (asprintf(&dflt, "%s.shared", e->name) < 0)
                                return kdev_err_set(err, ENOMEM, "out of memory");
                        struct kdev_err ne = {0};
                        if (kdev_resource_name_check(dflt, &ne) < 0) {
                                int rc = kdev_err_set(err, EINVAL, "%s[%zu]: renameByDefault: %s",
                                                      sec, ei, ne.msg);
                                free(dflt);
                                return rc;
                        }
                        target = dflt;
                }
                if (strcmp(target, e->name) != 0 && find(set, target, NULL)) {
                        int rc = kdev_err_set(err, EEXIST, "%s[%zu]: resource %s already exists",
                                              sec, ei, target);
                        free(dflt);
                        return rc;
                }
                int rc = share_one(set, ri, target, sec, e, ei, fail_gt1, warn, warn_arg, err);
                struct kdev_resource *t = rc == 0 && mps ? find(set, target, NULL) : NULL;
                free(dflt);
                if (rc < 0)
                        return rc;
                if (t) {
                        struct kdev_nvidia_rdata *td = t->ops_data;
                        free(td->mps_root);
                        if (!(td->mps_root = strdup(cfg->mps_root)))
                                return kdev_err_set(err, ENOMEM, "out of memory");
                }
        }
        return isolate(set, cfg, warn, warn_arg, err);
}
