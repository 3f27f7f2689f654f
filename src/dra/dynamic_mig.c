/* Dynamic MIG of kdev's DRA plugin (dra/plugin.h "Dynamic MIG"): the MIG
 * placements of the claims' device records, the overlap rules, and the
 * instances made and destroyed through the options' MIG operations. */
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include <jansson.h>

#include "common/err.h"
#include "dra/plugin_internal.h"
#include "nvidia/gpus.h"
#include "nvidia/mig.h"

/* Most MIG devices listed on one GPU (nvml/mig_config.h
 * KDEV_NVML_MIG_INSTANCES_MAX). */
#define MIG_LIST_MAX 64

const struct kdev_nvidia_placement *kdev_dra_placement_of(const struct kdev_nvidia_gpu *g,
                                                          const char *dev)
{
        for (size_t i = 0; g && dev && i < g->n_placements; i++)
                if (g->placements[i].dra_name[0] && !strcmp(g->placements[i].dra_name, dev))
                        return &g->placements[i];
        return NULL;
}

bool kdev_dra_mig_record(const json_t *d)
{
        return json_is_object(json_object_get(d, "mig"));
}

static const char *str(const json_t *o, const char *key)
{
        return json_string_value(json_object_get(o, key));
}

static unsigned num(const json_t *o, const char *key)
{
        return (unsigned)json_integer_value(json_object_get(o, key));
}

/* Whether memory slices [a, a + as) and [b, b + bs) meet. */
static bool overlap(unsigned a, unsigned as, unsigned b, unsigned bs)
{
        return a < b + bs && b < a + as;
}

/* -EBUSY when placement |m| (of device |dev|) overlaps a placement of the
 * same GPU in |devs| (claim |ons|/|oname| (|ouid|), its first |upto|
 * records; all with SIZE_MAX). */
static int check_against(const char *dev, const json_t *m, const char *ons, const char *oname,
                         const char *ouid, const json_t *devs, size_t upto,
                         struct kdev_err *err)
{
        size_t i;
        json_t *d;

        json_array_foreach(devs, i, d) {
                const json_t *om = json_object_get(d, "mig");

                if (i >= upto)
                        break;
                if (!json_is_object(om) || strcmp(str(om, "gpu"), str(m, "gpu")))
                        continue;
                unsigned a = num(m, "start"), as = num(m, "size");
                unsigned b = num(om, "start"), bs = num(om, "size");

                if (!overlap(a, as, b, bs))
                        continue;
                return kdev_err_set(err, EBUSY,
                                    "device %s overlaps device %s of claim %s/%s (%s): memory "
                                    "slices %u-%u and %u-%u",
                                    dev, str(d, "device"), ons, oname, ouid, a, a + as - 1, b,
                                    b + bs - 1);
        }
        return 0;
}

/* Whether GPU |gpu| instance |gi_id| is recorded by a claim of the
 * checkpoint. */
static bool recorded_instance(const struct kdev_dra_plugin *p, const char *gpu, unsigned gi_id)
{
        const char *uid;
        json_t *rec, *d;
        size_t i;

        json_object_foreach(p->cp.claims, uid, rec) {
                json_array_foreach(json_object_get(rec, "devices"), i, d) {
                        const json_t *m = json_object_get(d, "mig");

                        if (json_is_object(m) && json_object_get(m, "giId") &&
                            !strcmp(str(m, "gpu"), gpu) && num(m, "giId") == gi_id)
                                return true;
                }
        }
        return false;
}

int kdev_dra_mig_resolve(const struct kdev_dra_plugin *p, const char *ns, const char *name,
                         const char *uid, json_t *devs, struct kdev_err *err)
{
        const struct kdev_nvidia_gpus *gpus = p->o.gpus;
        int count = 0, rc;
        size_t i;
        json_t *d;

        json_array_foreach(devs, i, d) {
                const char *dev = str(d, "device");
                const struct kdev_nvidia_placement *pl = NULL;
                const struct kdev_nvidia_gpu *g = NULL;
                unsigned minor;
                bool is_mig;

                if (!dev || !kdev_nvidia_dra_name_minor(dev, &minor, &is_mig) || !is_mig)
                        continue;
                for (size_t k = 0; k < gpus->n_gpus && !pl; k++) {
                        g = &gpus->gpus[k];
                        if (g->minor == minor && !g->faulted)
                                pl = kdev_dra_placement_of(g, dev);
                }
                if (!pl)
                        continue; /* a static MIG device, or unknown: build_spec says */
                if (!p->o.mig)
                        return kdev_err_set(err, EINVAL,
                                            "device %s is a MIG placement, but dynamic MIG is "
                                            "off on this node",
                                            dev);
                if (json_is_true(json_object_get(d, "adminAccess")))
                        return kdev_err_set(err, EINVAL,
                                            "device %s: adminAccess to a MIG placement is not "
                                            "supported (its MIG device exists only while a "
                                            "claim holds it)",
                                            dev);
                json_t *m = json_pack("{s:s,s:i,s:i,s:i}", "gpu", g->uuid, "profileId",
                                      (json_int_t)pl->gi_profile_id, "start",
                                      (json_int_t)pl->placement_start, "size",
                                      (json_int_t)pl->placement_size);

                if (!m || json_object_set_new(d, "mig", m) < 0)
                        return kdev_err_set(err, ENOMEM, "out of memory");
                /* other claims of the checkpoint, then this claim's earlier
                 * devices */
                const char *ouid;
                json_t *orec;

                json_object_foreach(p->cp.claims, ouid, orec) {
                        if (!strcmp(ouid, uid))
                                continue;
                        rc = check_against(dev, m, str(orec, "namespace"), str(orec, "name"),
                                           ouid, json_object_get(orec, "devices"), SIZE_MAX,
                                           err);
                        if (rc < 0)
                                return rc;
                }
                rc = check_against(dev, m, ns, name, uid, devs, i, err);
                if (rc < 0)
                        return rc;
                /* instances on the GPU that no claim records: not kdev's */
                struct kdev_nvidia_mig_made have[MIG_LIST_MAX];
                size_t n = 0;

                rc = p->o.mig->list(p->o.mig->arg, g->uuid, have, MIG_LIST_MAX, &n, err);
                if (rc < 0)
                        return kdev_err_wrap(err, "device %s", dev);
                for (size_t k = 0; k < n; k++) {
                        const struct kdev_nvidia_mig_made *h = &have[k];

                        if (!overlap(pl->placement_start, pl->placement_size,
                                     h->placement_start, h->placement_size) ||
                            recorded_instance(p, g->uuid, h->gi_id))
                                continue;
                        return kdev_err_set(err, EBUSY,
                                            "device %s: memory slices %u-%u are taken by GPU "
                                            "instance %u (%s), which kdev-dra-plugin did not "
                                            "create",
                                            dev, pl->placement_start,
                                            pl->placement_start + pl->placement_size - 1,
                                            h->gi_id, h->uuid[0] ? h->uuid : "no MIG device");
                }
                count++;
        }
        return count;
}

/* Destroys the instance of placement |m|: by its ids, or, without them, the
 * instance of the recorded profile at the recorded start (a kill before the
 * ids were saved). *gone true when there was none. */
static int destroy_one(const struct kdev_dra_plugin *p, json_t *m, bool by_placement,
                       bool *gone, struct kdev_err *err)
{
        const char *gpu = str(m, "gpu");
        int rc;

        *gone = false;
        if (json_object_get(m, "giId"))
                return p->o.mig->destroy(p->o.mig->arg, gpu, num(m, "giId"), num(m, "ciId"),
                                         gone, err);
        *gone = true;
        if (!by_placement)
                return 0;
        struct kdev_nvidia_mig_made have[MIG_LIST_MAX];
        size_t n = 0;

        rc = p->o.mig->list(p->o.mig->arg, gpu, have, MIG_LIST_MAX, &n, err);
        if (rc < 0)
                return rc;
        for (size_t k = 0; k < n; k++) {
                if (have[k].gi_profile_id == num(m, "profileId") &&
                    have[k].placement_start == num(m, "start") &&
                    !recorded_instance(p, gpu, have[k].gi_id))
                        return p->o.mig->destroy(p->o.mig->arg, gpu, have[k].gi_id,
                                                 have[k].ci_id, gone, err);
        }
        return 0;
}

int kdev_dra_mig_destroy(const struct kdev_dra_plugin *p, json_t *devs, bool by_placement,
                         unsigned *destroyed, struct kdev_err *err)
{
        int first = 0;
        size_t i;
        json_t *d;

        if (destroyed)
                *destroyed = 0;
        json_array_foreach(devs, i, d) {
                json_t *m = json_object_get(d, "mig");
                struct kdev_err e = {0};
                bool gone = false;

                if (!json_is_object(m) || !p->o.mig)
                        continue;
                int rc = destroy_one(p, m, by_placement, &gone, &e);

                if (rc < 0) {
                        if (!first) {
                                first = rc;
                                if (err) {
                                        *err = e;
                                        kdev_err_wrap(err, "device %s", str(d, "device"));
                                }
                        }
                        continue;
                }
                /* the ids stay: destroying again by them is a no-op */
                if (!gone && destroyed)
                        (*destroyed)++;
        }
        return first;
}

int kdev_dra_mig_create(const struct kdev_dra_plugin *p, json_t *devs, struct kdev_err *err)
{
        json_t *made_here = json_array(); /* the records this call made */
        size_t i;
        json_t *d;

        if (!p->o.mig)
                return 0;
        if (!made_here)
                return kdev_err_set(err, ENOMEM, "out of memory");
        json_array_foreach(devs, i, d) {
                json_t *m = json_object_get(d, "mig");
                struct kdev_nvidia_mig_made made = {0};

                if (!json_is_object(m) || json_object_get(m, "giId"))
                        continue;
                int rc = p->o.mig->create(p->o.mig->arg, str(m, "gpu"), num(m, "profileId"),
                                          num(m, "start"), &made, err);
                /* listed first: a record whose ids could not be set is
                 * destroyed by its placement */
                if (rc == 0 && (json_array_append(made_here, d) < 0 ||
                                json_object_set_new(m, "giId", json_integer(made.gi_id)) < 0 ||
                                json_object_set_new(m, "ciId", json_integer(made.ci_id)) < 0 ||
                                json_object_set_new(m, "uuid", json_string(made.uuid)) < 0))
                        rc = kdev_err_set(err, ENOMEM, "out of memory");
                if (rc < 0) {
                        kdev_err_wrap(err, "device %s", str(d, "device"));
                        /* what this call made goes again */
                        kdev_dra_mig_destroy(p, made_here, false, NULL, NULL);
                        json_decref(made_here);
                        return rc;
                }
        }
        json_decref(made_here);
        return 0;
}
