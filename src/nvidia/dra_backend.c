/* The NVIDIA backend of kdev-dra-plugin. See dra_backend.h. */
#include "nvidia/dra_backend.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "nvidia/health.h"
#include "nvidia/resources.h"
#include "nvml/discover.h"
#include "nvml/loader.h"
#include "nvml/mig_config.h"

struct kdev_nvidia_dra_backend {
        struct kdev_nvml *lib;
        char sysfs_root[256];           /* "": "/sys" */
        bool dynamic_mig;               /* placements read, mig_* calls allowed */
        struct kdev_gpu_set *set;       /* NVML's discovery */
        struct kdev_nvidia_gpus gpus;   /* its NVML-free records */
        struct kdev_resource_set watched; /* the physical devices of the monitor */
        bool health_ready;
        uint64_t probe_interval_ms, quiet_period_ms;
        struct kdev_nvidia_health *health;
        /* what the monitor was started with, to start it again after a
         * rediscovery */
        const struct kdev_nvidia_config *cfg; /* borrowed from health_init */
        uv_loop_t *loop;
        struct kdev_xid_policy policy;
        bool policy_set;
        kdev_physical_events_fn physical;
        void *physical_arg;
        struct kdev_nvidia_inventory_watch *watch;
        kdev_nvidia_dra_inventory_fn changed;
        void *changed_arg;
};

/* Dynamic MIG: the placement records of every GPU of |gpus| that is not
 * faulted and in MIG mode, read through |lib|. A GPU whose MIG mode NVML
 * answers off or unsupported by now gets none; any other error is
 * returned (|gpus| then holds what was filled; the caller clears it). */
static int fill_placements(struct kdev_nvml *lib, struct kdev_nvidia_gpus *gpus,
                           struct kdev_err *err)
{
        struct kdev_nvml_mig_placements *p = malloc(sizeof(*p));
        if (!p)
                return kdev_err_set(err, ENOMEM, "MIG placements: out of memory");
        bool have_config = (kdev_nvml_caps(lib) & KDEV_NVML_CAP_MIG_CONFIG) &&
                           (kdev_nvml_caps(lib) & KDEV_NVML_CAP_MIG);
        int rc = 0;
        for (size_t i = 0; rc == 0 && i < gpus->n_gpus; i++) {
                struct kdev_nvidia_gpu *g = &gpus->gpus[i];
                if (g->faulted || !g->mig_enabled)
                        continue;
                char index[16];
                snprintf(index, sizeof(index), "%u", g->index);
                struct kdev_err e = {0};
                rc = kdev_nvml_mig_placements(lib, g->uuid[0] ? g->uuid : index, p, &e);
                if (rc == -EOPNOTSUPP && have_config) {
                        rc = 0; /* MIG turned off (or gone) since discovery */
                        continue;
                }
                if (rc < 0) {
                        if (err)
                                *err = e;
                        break;
                }
                rc = kdev_nvidia_gpu_placements_from(p, g, err);
        }
        free(p);
        return rc;
}

int kdev_nvidia_dra_backend_open(const struct kdev_nvidia_dra_backend_options *opts,
                                 struct kdev_nvidia_dra_backend **out, struct kdev_err *err)
{
        *out = NULL;
        struct kdev_nvidia_dra_backend *b = calloc(1, sizeof(*b));
        if (!b)
                return kdev_err_set(err, ENOMEM, "out of memory");
        struct kdev_nvml_options nopts = {.driver_root = opts->driver_root,
                                          .library_path = opts->nvml_library};
        snprintf(b->sysfs_root, sizeof(b->sysfs_root), "%s",
                 opts->sysfs_root ? opts->sysfs_root : "");
        struct kdev_nvml_discover_options dopts = {.sysfs_root = b->sysfs_root};
        int rc = kdev_nvml_open(&nopts, &b->lib, err);
        if (rc == 0)
                rc = kdev_nvml_discover(b->lib, &dopts, &b->set, err);
        if (rc == 0)
                rc = kdev_nvidia_gpus_from_set(b->set, &b->gpus, err);
        b->dynamic_mig = opts->dynamic_mig;
        if (rc == 0 && b->dynamic_mig)
                rc = fill_placements(b->lib, &b->gpus, err);
        if (rc < 0) {
                kdev_nvidia_dra_backend_free(b);
                return rc;
        }
        *out = b;
        return 0;
}

const struct kdev_nvidia_gpus *kdev_nvidia_dra_backend_gpus(const struct kdev_nvidia_dra_backend *b)
{
        return &b->gpus;
}

int kdev_nvidia_dra_backend_health_init(struct kdev_nvidia_dra_backend *b,
                                        const struct kdev_nvidia_config *cfg,
                                        struct kdev_err *err)
{
        if (b->health_ready)
                return kdev_err_set(err, EALREADY, "health: devices already built");
        int rc = kdev_nvidia_build(b->set, cfg, NULL, &b->watched, err);
        if (rc == 0)
                rc = kdev_nvidia_attach_physical(&b->watched, err);
        if (rc < 0) {
                kdev_resource_set_clear(&b->watched);
                return rc;
        }
        b->cfg = cfg;
        b->probe_interval_ms = (uint64_t)cfg->probe_interval * 1000;
        b->quiet_period_ms = (uint64_t)cfg->quiet_period * 1000;
        b->health_ready = true;
        return 0;
}

const struct kdev_physical *kdev_nvidia_dra_backend_find(const struct kdev_nvidia_dra_backend *b,
                                                         const char *id)
{
        return b && b->health_ready ? kdev_physical_find(&b->watched, id) : NULL;
}

static void on_reread(void *arg, const char *uuid)
{
        kdev_nvidia_inventory_watch_reread(((struct kdev_nvidia_dra_backend *)arg)->watch, uuid);
}

static void on_inventory(void *arg, const char *why)
{
        struct kdev_nvidia_dra_backend *b = arg;
        b->changed(b->changed_arg, why);
}

const struct kdev_resource_set *
kdev_nvidia_dra_backend_watched(const struct kdev_nvidia_dra_backend *b)
{
        return b && b->health_ready ? &b->watched : NULL;
}

int kdev_nvidia_dra_backend_watch_start(struct kdev_nvidia_dra_backend *b, uv_loop_t *loop,
                                        uint64_t interval_ms, kdev_nvidia_dra_inventory_fn changed,
                                        void *arg, struct kdev_err *err)
{
        if (b->watch)
                return kdev_err_set(err, EALREADY, "inventory watch: already started");
        b->changed = changed;
        b->changed_arg = arg;
        struct kdev_nvml_discover_options dopts = {.sysfs_root = b->sysfs_root};
        struct kdev_nvidia_inventory_options io = {
                .lib = b->lib, .gpus = b->set, .interval_ms = interval_ms,
                .discover = &dopts,
                .changed = changed ? on_inventory : NULL, .arg = b};
        b->watch = kdev_nvidia_inventory_watch_start(loop, &io, err);
        return b->watch ? 0 : -(err && err->code ? err->code : EINVAL);
}

int kdev_nvidia_dra_backend_rediscover(struct kdev_nvidia_dra_backend *b, struct kdev_err *err)
{
        struct kdev_gpu_set *set = NULL;
        struct kdev_nvidia_gpus gpus = {0};
        struct kdev_resource_set watched = {0};
        struct kdev_nvml_discover_options dopts = {.sysfs_root = b->sysfs_root};
        int rc = kdev_nvml_discover(b->lib, &dopts, &set, err);
        if (rc == 0)
                rc = kdev_nvidia_gpus_from_set(set, &gpus, err);
        if (rc == 0 && b->dynamic_mig)
                rc = fill_placements(b->lib, &gpus, err);
        if (rc == 0 && b->health_ready) {
                rc = kdev_nvidia_build(set, b->cfg, NULL, &watched, err);
                if (rc == 0)
                        rc = kdev_nvidia_attach_physical(&watched, err);
        }
        if (rc < 0) {
                kdev_resource_set_clear(&watched);
                kdev_nvidia_gpus_clear(&gpus);
                kdev_gpu_set_free(set);
                kdev_nvidia_inventory_watch_rebase(b->watch, b->set);
                return rc;
        }
        /* health is physical: what the old monitor knew carries over */
        for (size_t i = 0; b->health_ready && i < watched.n_physical; i++) {
                struct kdev_physical *p = watched.physical[i];
                const struct kdev_physical *q = kdev_physical_find(&b->watched, p->id);
                if (q && !q->healthy && !kdev_nvidia_health_cleared(b->health, p->id))
                        kdev_physical_set_health(&watched, p, false, NULL);
        }
        bool ran = b->health != NULL;
        /* stopping, not freed before the loop runs again: its pending
         * events are handed to the new monitor below */
        struct kdev_nvidia_health *old = b->health;
        kdev_nvidia_dra_backend_health_stop(b); /* from here the old devices are untouched */
        kdev_resource_set_clear(&b->watched);
        b->watched = watched;
        kdev_nvidia_gpus_clear(&b->gpus);
        b->gpus = gpus;
        kdev_gpu_set_free(b->set);
        b->set = set;
        kdev_nvidia_inventory_watch_rebase(b->watch, b->set);
        if (ran) {
                struct kdev_err e = {0};
                if (kdev_nvidia_dra_backend_health_start(b, b->loop, &b->policy, b->physical,
                                                         b->physical_arg, &e) < 0)
                        kdev_log_error("health checks not restarted after the GPU rediscovery",
                                       "error", e.msg);
                else
                        kdev_nvidia_health_take_over(b->health, old);
        }
        return 0;
}

int kdev_nvidia_dra_backend_health_start(struct kdev_nvidia_dra_backend *b, uv_loop_t *loop,
                                         const struct kdev_xid_policy *policy,
                                         kdev_physical_events_fn physical, void *arg,
                                         struct kdev_err *err)
{
        if (!b->health_ready)
                return kdev_err_set(err, EINVAL, "health: no devices built");
        if (b->health)
                return kdev_err_set(err, EALREADY, "health: already started");
        if (!b->policy_set) {
                if (kdev_xid_policy_copy(&b->policy, policy, err) != 0)
                        return err && err->code ? -err->code : -ENOMEM;
                b->policy_set = true;
        }
        b->loop = loop;
        b->physical = physical;
        b->physical_arg = arg;
        struct kdev_nvidia_health_options hopts = {
                .probe_interval_ms = b->probe_interval_ms,
                .quiet_period_ms = b->quiet_period_ms,
                .physical = physical,
                .physical_arg = arg,
                .start_checks = true,
                .reread = on_reread,
                .reread_arg = b,
        };
        b->health = kdev_nvidia_health_new(loop, b->lib, &b->watched, policy, &hopts, err);
        if (!b->health)
                return err && err->code ? -err->code : -ENOMEM;
        int rc = kdev_nvidia_health_start(b->health, err);
        if (rc < 0)
                kdev_nvidia_dra_backend_health_stop(b);
        return rc;
}

static int dynamic_mig_on(const struct kdev_nvidia_dra_backend *b, struct kdev_err *err)
{
        return b->dynamic_mig ? 0 : kdev_err_set(err, EINVAL, "dynamic MIG is off");
}

_Static_assert(KDEV_NVIDIA_NO_INSTANCE == KDEV_NVML_NO_INSTANCE,
               "gpus.h and nvml_api.h name no instance alike");

static void made_record(const struct kdev_nvml_mig_instance *m, struct kdev_nvidia_mig_made *out)
{
        memset(out, 0, sizeof(*out));
        out->gi_id = m->gi_id;
        out->ci_id = m->ci_id;
        out->gi_profile_id = m->gi_profile_id;
        out->placement_start = m->gi_placement.start;
        out->placement_size = m->gi_placement.size;
        snprintf(out->uuid, sizeof(out->uuid), "%s", m->uuid);
}

/* The records and the watched MIG devices follow a layout kdev changed:
 * the inventory watch's |changed| at once (nothing before watch_start). */
static void layout_changed(struct kdev_nvidia_dra_backend *b, const char *gpu_uuid,
                           unsigned gi_id, const char *what)
{
        char why[160];
        snprintf(why, sizeof(why), "MIG devices of GPU %s changed: GPU instance %u %s",
                 gpu_uuid, gi_id, what);
        kdev_nvidia_inventory_watch_now(b->watch, why);
}

int kdev_nvidia_dra_backend_mig_create(struct kdev_nvidia_dra_backend *b, const char *gpu_uuid,
                                       unsigned gi_profile_id, unsigned start,
                                       struct kdev_nvidia_mig_made *out, struct kdev_err *err)
{
        int rc = dynamic_mig_on(b, err);
        if (rc < 0)
                return rc;
        struct kdev_nvml_mig_instance m;
        rc = kdev_nvml_mig_create(b->lib, gpu_uuid, gi_profile_id, start, &m, err);
        if (rc == 0) {
                made_record(&m, out);
                layout_changed(b, gpu_uuid, m.gi_id, "made");
        }
        return rc;
}

int kdev_nvidia_dra_backend_mig_destroy(struct kdev_nvidia_dra_backend *b, const char *gpu_uuid,
                                        unsigned gi_id, unsigned ci_id, bool *gone,
                                        struct kdev_err *err)
{
        bool was_gone = false;
        int rc = dynamic_mig_on(b, err);
        if (rc == 0)
                rc = kdev_nvml_mig_destroy(b->lib, gpu_uuid, gi_id, ci_id, &was_gone, err);
        if (rc == 0 && !was_gone)
                layout_changed(b, gpu_uuid, gi_id, "destroyed");
        if (rc == 0 && gone)
                *gone = was_gone;
        return rc;
}

int kdev_nvidia_dra_backend_mig_list(struct kdev_nvidia_dra_backend *b, const char *gpu_uuid,
                                     struct kdev_nvidia_mig_made *out, size_t cap, size_t *n,
                                     struct kdev_err *err)
{
        int rc = dynamic_mig_on(b, err);
        if (rc < 0)
                return rc;
        struct kdev_nvml_mig_instances *l = malloc(sizeof(*l));
        if (!l)
                return kdev_err_set(err, ENOMEM, "MIG devices: out of memory");
        rc = kdev_nvml_mig_instances(b->lib, gpu_uuid, l, err);
        if (rc == 0) {
                size_t k = 0;
                for (size_t i = 0; i < l->n && i < KDEV_NVML_MIG_INSTANCES_MAX; i++) {
                        if (k < cap)
                                made_record(&l->items[i], &out[k]);
                        k++;
                }
                *n = k;
                if (k > cap)
                        rc = kdev_err_set(err, E2BIG, "GPU %s: %zu MIG devices, room for %zu",
                                          gpu_uuid, k, cap);
        }
        free(l);
        return rc;
}

void kdev_nvidia_dra_backend_health_stop(struct kdev_nvidia_dra_backend *b)
{
        if (!b)
                return;
        kdev_nvidia_health_stop(b->health, NULL, NULL);
        b->health = NULL;
}

void kdev_nvidia_dra_backend_watch_stop(struct kdev_nvidia_dra_backend *b)
{
        if (!b)
                return;
        kdev_nvidia_inventory_watch_stop(b->watch, NULL, NULL);
        b->watch = NULL;
}

void kdev_nvidia_dra_backend_free(struct kdev_nvidia_dra_backend *b)
{
        if (!b)
                return;
        kdev_nvidia_dra_backend_health_stop(b);
        if (b->policy_set)
                kdev_xid_policy_clear(&b->policy);
        kdev_resource_set_clear(&b->watched);
        kdev_nvidia_gpus_clear(&b->gpus);
        kdev_gpu_set_free(b->set);
        kdev_nvml_close(b->lib);
        free(b);
}
