/* Dynamic MIG of kdev's DRA plugin (dra/plugin.h "Dynamic MIG"): the MIG
 * placements of the claims' device records, the overlap rules, and the
 * instances made and destroyed through the options' MIG operations. */
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
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

/* The string |key| of |o|, "" when it is none (a checkpoint record is
 * checksummed, not checked field by field). */
static const char *str(const json_t *o, const char *key)
{
        const char *v = json_string_value(json_object_get(o, key));

        return v ? v : "";
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

/* Whether listed instance |h| is of record |m|'s profile at its start. */
static bool at_placement(const json_t *m, const struct kdev_nvidia_mig_made *h)
{
        return h->gi_profile_id == num(m, "profileId") && h->placement_start == num(m, "start");
}

/* Records instance |h|'s ids and MIG uuid on placement record |m|.
 * Returns 0 or -1 (out of memory; what was set stays). */
static int record_ids(json_t *m, const struct kdev_nvidia_mig_made *h)
{
        if (json_object_set_new(m, "giId", json_integer(h->gi_id)) < 0 ||
            json_object_set_new(m, "ciId", json_integer(h->ci_id)) < 0 ||
            json_object_set_new(m, "uuid", json_string(h->uuid)) < 0)
                return -1;
        return 0;
}

static void drop_ids(json_t *m)
{
        json_object_del(m, "giId");
        json_object_del(m, "ciId");
        json_object_del(m, "uuid");
}

/* Whether listed instance |h| is the one placement record |m| names: its
 * recorded "giId" with the recorded profile, start and MIG uuid (a GPU
 * instance id is reused once destroyed; a GPU instance without compute
 * instance lists no uuid, so it is never taken for a recorded one). */
static bool same_instance(const json_t *m, const struct kdev_nvidia_mig_made *h)
{
        return json_is_integer(json_object_get(m, "giId")) && num(m, "giId") == h->gi_id &&
               at_placement(m, h) && !strcmp(str(m, "uuid"), h->uuid);
}

/* Whether instance |h| of GPU |gpu| is the one a claim of the checkpoint
 * records (same_instance). */
static bool recorded_instance(const struct kdev_dra_plugin *p, const char *gpu,
                              const struct kdev_nvidia_mig_made *h)
{
        const char *uid;
        json_t *rec, *d;
        size_t i;

        json_object_foreach(p->cp.claims, uid, rec) {
                json_array_foreach(json_object_get(rec, "devices"), i, d) {
                        const json_t *m = json_object_get(d, "mig");

                        if (json_is_object(m) && !strcmp(str(m, "gpu"), gpu) &&
                            same_instance(m, h))
                                return true;
                }
        }
        return false;
}

/* The instance among |have| (|n|) that record |m| names by its ids, or
 * NULL. */
static const struct kdev_nvidia_mig_made *find_recorded(const struct kdev_nvidia_mig_made *have,
                                                        size_t n, const json_t *m)
{
        for (size_t k = 0; k < n; k++)
                if (same_instance(m, &have[k]))
                        return &have[k];
        return NULL;
}

/* The instance among |have| (|n|) of record |m|'s profile at its start that
 * no claim records (what a kill before the ids were saved left), or NULL. */
static const struct kdev_nvidia_mig_made *find_unrecorded(const struct kdev_dra_plugin *p,
                                                          const struct kdev_nvidia_mig_made *have,
                                                          size_t n, const json_t *m)
{
        for (size_t k = 0; k < n; k++)
                if (at_placement(m, &have[k]) && !recorded_instance(p, str(m, "gpu"), &have[k]))
                        return &have[k];
        return NULL;
}

/* -EBUSY when an instance among |have| (|n|) that no claim records
 * overlaps memory slices [start, start + size) of device |dev| on GPU
 * |gpu|: not kdev's. */
static int check_foreign(const struct kdev_dra_plugin *p, const char *dev, const char *gpu,
                         unsigned start, unsigned size, const struct kdev_nvidia_mig_made *have,
                         size_t n, struct kdev_err *err)
{
        for (size_t k = 0; k < n; k++) {
                const struct kdev_nvidia_mig_made *h = &have[k];

                if (!overlap(start, size, h->placement_start, h->placement_size) ||
                    recorded_instance(p, gpu, h))
                        continue;
                return kdev_err_set(err, EBUSY,
                                    "device %s: memory slices %u-%u are taken by GPU instance %u "
                                    "(%s), which kdev-dra-plugin did not create",
                                    dev, start, start + size - 1, h->gi_id,
                                    h->uuid[0] ? h->uuid : "no MIG device");
        }
        return 0;
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
                rc = check_foreign(p, dev, g->uuid, pl->placement_start, pl->placement_size,
                                   have, n, err);
                if (rc < 0)
                        return rc;
                count++;
        }
        return count;
}

/* The GPU instance among |have| (|n|) with record |m|'s id, profile and
 * start but no compute instance (so no MIG uuid to match): what a destroy
 * that removed only the compute instance left (the GPU instance's destroy
 * failed, or a kill came between the two). */
static const struct kdev_nvidia_mig_made *find_lone(const struct kdev_nvidia_mig_made *have,
                                                    size_t n, const json_t *m)
{
        for (size_t k = 0; k < n; k++)
                if (have[k].ci_id == KDEV_NVIDIA_NO_INSTANCE && !have[k].uuid[0] &&
                    json_is_integer(json_object_get(m, "giId")) && have[k].gi_id == num(m, "giId") &&
                    at_placement(m, &have[k]))
                        return &have[k];
        return NULL;
}

/* Destroys the instance of placement |m| (plugin_internal.h enum
 * kdev_dra_mig_match): the one its ids name (checked against the GPU's
 * list first: an id NVML reused for someone else's instance is not
 * destroyed); from KDEV_DRA_MIG_OURS on also its GPU instance left without
 * compute instance; with KDEV_DRA_MIG_PLACEMENT, or on a record marked
 * "remaking", also a record without ids by the unrecorded instance of its
 * profile at its start. *gone true when there was none. */
static int destroy_one(const struct kdev_dra_plugin *p, json_t *m, enum kdev_dra_mig_match match,
                       bool *gone, struct kdev_err *err)
{
        struct kdev_nvidia_mig_made have[MIG_LIST_MAX];
        const struct kdev_nvidia_mig_made *h = NULL;
        const char *gpu = str(m, "gpu");
        bool ids = json_object_get(m, "giId") != NULL;
        bool placement = match == KDEV_DRA_MIG_PLACEMENT ||
                         json_is_true(json_object_get(m, "remaking"));
        size_t n = 0;
        int rc;

        *gone = true;
        if (!ids && !placement)
                return 0;
        rc = p->o.mig->list(p->o.mig->arg, gpu, have, MIG_LIST_MAX, &n, err);
        if (rc < 0)
                return rc;
        if (ids) {
                h = find_recorded(have, n, m);
                if (!h && (placement || match == KDEV_DRA_MIG_OURS))
                        h = find_lone(have, n, m);
        } else {
                h = find_unrecorded(p, have, n, m);
        }
        if (!h)
                return 0;
        *gone = false;
        return p->o.mig->destroy(p->o.mig->arg, gpu, h->gi_id,
                                 ids ? num(m, "ciId") : h->ci_id, gone, err);
}

int kdev_dra_mig_destroy(const struct kdev_dra_plugin *p, json_t *devs,
                         enum kdev_dra_mig_match match, unsigned *destroyed, struct kdev_err *err)
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

                if (!json_is_object(m))
                        continue;
                int rc = p->o.mig ? destroy_one(p, m, match, &gone, &e)
                                  : kdev_err_set(&e, ENOTSUP,
                                                 "its MIG instance is not destroyed: dynamic MIG "
                                                 "is off on this node (kdev-dra-plugin "
                                                 "--dynamic-mig)");

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

                if (rc == 0 && (record_ids(m, &made) < 0 || json_array_append(made_here, d) < 0)) {
                        /* not recorded: destroyed by the ids it was made with
                         * (kept as far as they were set if that fails too) */
                        if (p->o.mig->destroy(p->o.mig->arg, str(m, "gpu"), made.gi_id,
                                              made.ci_id, NULL, NULL) == 0)
                                drop_ids(m);
                        rc = kdev_err_set(err, ENOMEM, "out of memory");
                }
                if (rc < 0) {
                        kdev_err_wrap(err, "device %s", str(d, "device"));
                        /* what this call made goes again (what cannot stays
                         * recorded, for the caller's own undo to report) */
                        kdev_dra_mig_destroy(p, made_here, KDEV_DRA_MIG_OURS, NULL, NULL);
                        json_decref(made_here);
                        return rc;
                }
        }
        json_decref(made_here);
        return 0;
}

/* What kdev_dra_mig_remake does with one placement record. */
struct remake {
        enum { REMAKE_KEEP, REMAKE_ADOPT, REMAKE_MAKE } action;
        struct kdev_nvidia_mig_made found; /* ADOPT: the instance; MAKE: a lone GPU instance */
        bool lone;                         /* MAKE: |found| is destroyed first */
        json_t *old;                       /* MAKE: the record as it was */
};

/* Plans record |m| (device |dev|) from the GPU's list |have| (|n|). */
static int remake_plan(const struct kdev_dra_plugin *p, const char *dev, const json_t *m,
                       const struct kdev_nvidia_mig_made *have, size_t n, struct remake *v,
                       struct kdev_err *err)
{
        const struct kdev_nvidia_mig_made *h = find_recorded(have, n, m);

        if (h && h->ci_id != KDEV_NVIDIA_NO_INSTANCE)
                return 0; /* KEEP */
        v->action = REMAKE_MAKE;
        if (!json_is_true(json_object_get(m, "remaking")))
                /* nothing of kdev's can be at the placement: whatever is
                 * there is someone else's */
                return check_foreign(p, dev, str(m, "gpu"), num(m, "start"), num(m, "size"), have,
                                     n, err);
        /* a kill during the last remake, after the marker was saved */
        h = find_unrecorded(p, have, n, m);
        if (h && h->ci_id != KDEV_NVIDIA_NO_INSTANCE)
                v->action = REMAKE_ADOPT;
        v->lone = h && h->ci_id == KDEV_NVIDIA_NO_INSTANCE;
        if (h)
                v->found = *h;
        return 0;
}

/* Whether a failed remake left something of its own at record |m|'s
 * placement (|v| its plan): the instance it made there (the record has the
 * ids of this call's make) or the lone GPU instance it could not destroy;
 * true when the list fails (the mark is kept). Someone else's instance
 * there (a race with the make) is not. */
static bool ours_left(const struct kdev_dra_plugin *p, const json_t *m, const struct remake *v)
{
        struct kdev_nvidia_mig_made have[MIG_LIST_MAX];
        size_t n = 0;

        if (p->o.mig->list(p->o.mig->arg, str(m, "gpu"), have, MIG_LIST_MAX, &n, NULL) < 0)
                return true;
        if (json_object_get(m, "giId") && (find_recorded(have, n, m) || find_lone(have, n, m)))
                return true;
        for (size_t k = 0; v->lone && k < n; k++)
                if (have[k].gi_id == v->found.gi_id && at_placement(m, &have[k]))
                        return true;
        return false;
}

static void report_each(const json_t *devs, const struct remake *v, const char *uid,
                        kdev_dra_mig_report_fn fn, void *arg)
{
        size_t i;
        json_t *d;

        json_array_foreach(devs, i, d) {
                if (fn && v[i].action != REMAKE_KEEP)
                        fn(arg, v[i].action == REMAKE_ADOPT ? "adopted" : "recreated", uid,
                           str(d, "device"), NULL);
        }
}

int kdev_dra_mig_remake(struct kdev_dra_plugin *p, const char *uid, json_t *devs,
                        kdev_dra_mig_report_fn fn, void *arg, struct kdev_err *err)
{
        size_t nd = json_array_size(devs), i;
        struct remake *v = calloc(nd ? nd : 1, sizeof(*v));
        bool act = false, make = false;
        int rc = 0;
        json_t *d;

        if (!v)
                return kdev_err_set(err, ENOMEM, "out of memory");
        /* 1: what each record needs, nothing changed yet */
        json_array_foreach(devs, i, d) {
                const json_t *m = json_object_get(d, "mig");
                struct kdev_nvidia_mig_made have[MIG_LIST_MAX];
                size_t n = 0;

                if (!json_is_object(m))
                        continue;
                rc = p->o.mig->list(p->o.mig->arg, str(m, "gpu"), have, MIG_LIST_MAX, &n, err);
                if (rc < 0) {
                        kdev_err_wrap(err, "device %s", str(d, "device"));
                        goto out;
                }
                rc = remake_plan(p, str(d, "device"), m, have, n, &v[i], err);
                if (rc < 0)
                        goto out;
                act |= v[i].action != REMAKE_KEEP;
                make |= v[i].action == REMAKE_MAKE;
        }
        if (!act)
                goto out;
        /* 2: adopted; the records to make marked "remaking" and saved
         * before anything is made, so that what a kill leaves at their
         * placements is known for kdev's */
        json_array_foreach(devs, i, d) {
                json_t *m = json_object_get(d, "mig");
                const struct kdev_nvidia_mig_made *h = &v[i].found;

                if (v[i].action == REMAKE_ADOPT && record_ids(m, h) < 0)
                        rc = kdev_err_set(err, ENOMEM, "out of memory");
                if (v[i].action == REMAKE_ADOPT)
                        json_object_del(m, "remaking");
                if (v[i].action != REMAKE_MAKE || rc < 0)
                        continue;
                v[i].old = json_deep_copy(m);
                if (!v[i].old || json_object_set_new(m, "remaking", json_true()) < 0) {
                        rc = kdev_err_set(err, ENOMEM, "out of memory");
                        continue;
                }
                json_object_del(v[i].old, "remaking");
                drop_ids(m);
        }
        kdev_dra_cp_touch(&p->cp, uid);
        if (rc == 0 && make)
                rc = kdev_dra_save_checkpoint(p, err);
        /* 3: a GPU instance a kill left without its compute instance is
         * destroyed, then the instances made */
        json_array_foreach(devs, i, d) {
                json_t *m = json_object_get(d, "mig");

                if (rc < 0)
                        break;
                if (v[i].lone)
                        rc = p->o.mig->destroy(p->o.mig->arg, str(m, "gpu"), v[i].found.gi_id,
                                               KDEV_NVIDIA_NO_INSTANCE, NULL, err);
                if (rc < 0)
                        kdev_err_wrap(err, "device %s", str(d, "device"));
        }
        if (rc == 0)
                rc = kdev_dra_mig_create(p, devs, err);
        /* the marks go once made; after a failure a record is as it was
         * unless something is left at its placement (an undo or the lone
         * GPU instance's destroy that failed: kdev's, to adopt or destroy
         * by the mark) */
        json_array_foreach(devs, i, d) {
                json_t *m = json_object_get(d, "mig");

                if (v[i].action != REMAKE_MAKE)
                        continue;
                bool keep = rc < 0 && ours_left(p, m, &v[i]);

                if (rc < 0)
                        drop_ids(m);
                if (keep)
                        continue;
                json_object_del(m, "remaking");
                if (rc < 0 && v[i].old)
                        json_object_update(m, v[i].old);
        }
        kdev_dra_cp_touch(&p->cp, uid);
        if (rc == 0) {
                report_each(devs, v, uid, fn, arg);
                rc = 1;
        }
out:
        for (i = 0; i < nd; i++)
                json_decref(v[i].old);
        free(v);
        return rc;
}
