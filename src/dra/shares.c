/* Share claims of kdev's DRA kubelet plugin: KEP-5075 consumable capacity on
 * the whole GPUs published with allowMultipleAllocations (dra/slices.h
 * kdev_dra_build_devices_opts), and kdev.io/v1alpha1 ShareConfig limits,
 * enforced with kdev-plugin's share library and region (nvidia/share_host.h).
 * See plugin.h "Shares". */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "common/dir.h"
#include "common/json.h"
#include "dra/plugin.h"
#include "dra/plugin_internal.h"
#include "dra/slices.h"
#include "nvidia/isolation.h"
#include "nvidia/share_host.h"

/* One consumed capacity |v| (a quantity string, resource.k8s.io/v1
 * DeviceRequestAllocationResult.consumedCapacity[name]) of capacity |cap|
 * into *out: memory in bytes, compute in percent (1..100). |at| names the
 * field for the error. */
static int parse_consumed(const char *cap, const json_t *v, const char *at, const char *ns,
                          const char *name, unsigned long long *out, struct kdev_err *err)
{
        struct kdev_err qerr = {0};

        if (!json_is_string(v))
                return kdev_json_expect(v, JSON_STRING, err, "claim %s/%s: %s", ns, name, at);
        if (kdev_nvidia_parse_memory(json_string_value(v), out, &qerr) < 0) {
                if (!strcmp(cap, KDEV_DRA_CAP_MEMORY))
                        return kdev_err_set(err, EINVAL, "claim %s/%s: %s: %s", ns, name, at,
                                            qerr.msg);
                *out = 0;
        } else if (!strcmp(cap, KDEV_DRA_CAP_MEMORY) && *out > (unsigned long long)LLONG_MAX) {
                /* kdev_nvidia_parse_memory reads up to 2^63 bytes, one more
                 * than the record's JSON integer (json_int_t) holds: cast to
                 * it, 2^63 turned negative and the share was refused as "its
                 * memory is unknown" */
                return kdev_err_set(err, EINVAL,
                                    "claim %s/%s: %s: must be at most %lld bytes, got \"%s\"",
                                    ns, name, at, LLONG_MAX, json_string_value(v));
        }
        if (!strcmp(cap, KDEV_DRA_CAP_COMPUTE) && (*out < 1 || *out > KDEV_DRA_SHARE_COMPUTE_TOTAL))
                return kdev_err_set(err, EINVAL,
                                    "claim %s/%s: %s: must be a whole percentage of the GPU, 1 "
                                    "to 100, got \"%s\"",
                                    ns, name, at, json_string_value(v));
        return 0;
}

int kdev_dra_share_parse(const json_t *r, size_t i, const char *ns, const char *name,
                         json_t *rec, struct kdev_err *err)
{
        const json_t *sid = json_object_get(r, "shareID");
        const json_t *cc = json_object_get(r, "consumedCapacity");
        const char *dev = json_string_value(json_object_get(r, "device"));
        char at[160];
        const char *k;
        json_t *v, *share;
        int rc;

        snprintf(at, sizeof(at), ".status.allocation.devices.results[%zu].shareID", i);
        if ((rc = kdev_json_expect(sid, JSON_STRING, err, "claim %s/%s: %s", ns, name, at)) < 0)
                return rc;
        snprintf(at, sizeof(at), ".status.allocation.devices.results[%zu].consumedCapacity", i);
        if ((rc = kdev_json_expect(cc, JSON_OBJECT, err, "claim %s/%s: %s", ns, name, at)) < 0)
                return rc;
        if (!sid && !cc)
                return 0;
        if (!sid)
                return kdev_err_set(err, EINVAL,
                                    "claim %s/%s: %s is set without a shareID: only a device "
                                    "published with allowMultipleAllocations is shared",
                                    ns, name, at);
        if (json_object_get(rec, "share"))
                return kdev_err_set(err, EINVAL,
                                    "claim %s/%s: device %s is allocated more than once to "
                                    "this claim as a share: not supported",
                                    ns, name, dev ? dev : "");
        share = json_pack("{s:O}", "shareID", sid);
        if (!share || json_object_set_new(rec, "share", share) < 0)
                return kdev_err_set(err, ENOMEM, "out of memory");
        json_object_foreach((json_t *)cc, k, v) {
                unsigned long long q = 0;

                snprintf(at, sizeof(at),
                         ".status.allocation.devices.results[%zu].consumedCapacity.%s", i, k);
                if (strcmp(k, KDEV_DRA_CAP_MEMORY) && strcmp(k, KDEV_DRA_CAP_COMPUTE))
                        return kdev_err_set(err, EINVAL,
                                            "claim %s/%s: %s: device %s has no capacity \"%s\" "
                                            "(kdev publishes memory and compute)",
                                            ns, name, at, dev ? dev : "", k);
                if ((rc = parse_consumed(k, v, at, ns, name, &q, err)) < 0)
                        return rc;
                if (json_object_set_new(share, k, json_integer((json_int_t)q)) < 0)
                        return kdev_err_set(err, ENOMEM, "out of memory");
        }
        return 0;
}

/* The region directory of claim |uid|'s share of device |dev| into |buf|:
 * "<share root>/claims/<uid>-<dev>". */
static int region_dir(const struct kdev_dra_plugin *p, const char *uid, const char *dev,
                      char *buf, size_t size, struct kdev_err *err)
{
        int n = snprintf(buf, size, "%s/%s/%s-%s", p->share_root, KDEV_DRA_SHARE_CLAIMS_DIR, uid,
                         dev);

        if (n < 0 || (size_t)n >= size)
                return kdev_err_set(err, ENAMETOOLONG, "share region path too long");
        return 0;
}

int kdev_dra_share_resolve(const struct kdev_dra_plugin *p, const char *uid, json_t *devs,
                           struct kdev_err *err)
{
        size_t i;
        json_t *d;

        json_array_foreach(devs, i, d) {
                const char *dev = json_string_value(json_object_get(d, "device"));
                json_t *share = json_object_get(d, "share");
                const json_t *cfg = json_object_get(d, "config");
                const json_t *params = json_object_get(cfg, "parameters");
                bool share_config = !strcmp(json_string_value(json_object_get(cfg, "kind"))
                                                    ? json_string_value(json_object_get(cfg, "kind"))
                                                    : "",
                                            "ShareConfig");
                const struct kdev_nvidia_mig *m = NULL;
                const struct kdev_nvidia_placement *pl = NULL;
                struct kdev_err ignored = {0};
                int frc = 0;
                char dir[PATH_MAX];

                if (!share && !(share_config && p->share_root))
                        continue;
                if (share && !p->share_root)
                        return kdev_err_set(err, EINVAL,
                                            "device %s: allocated as a share (shareID %s), but "
                                            "this node does not publish shareable GPUs "
                                            "(kdev-dra-plugin --shareable-gpus is off)",
                                            dev,
                                            json_string_value(json_object_get(share, "shareID")));
                const struct kdev_nvidia_gpu *g =
                        kdev_dra_find_gpu(p, dev, &m, &pl, &frc, &ignored);

                if (!g)
                        continue; /* build_spec names the device */
                if (share && (m || pl))
                        return kdev_err_set(err, EINVAL,
                                            "device %s: a MIG device is not published with "
                                            "allowMultipleAllocations; no share of it",
                                            dev);
                if (pl)
                        return kdev_err_set(err, EINVAL,
                                            "device %s: a ShareConfig does not apply to a MIG "
                                            "placement (its MIG device is made when the claim "
                                            "is prepared)",
                                            dev);
                if (!share) {
                        share = json_object();
                        if (!share || json_object_set_new(d, "share", share) < 0)
                                return kdev_err_set(err, ENOMEM, "out of memory");
                }
                unsigned long long total = m ? m->memory_bytes : g->memory_bytes;
                /* KEP-5075: the scheduler writes every capacity of the device
                 * into consumedCapacity; one missing (another writer) is
                 * consumed whole, as a request without it is; a ShareConfig
                 * without memory or compute gives the whole of it */
                const json_t *mem = json_object_get(share, KDEV_DRA_CAP_MEMORY);
                const json_t *cpu = json_object_get(share, KDEV_DRA_CAP_COMPUTE);

                if (!mem && share_config)
                        mem = json_object_get(params, "memory");
                if (!cpu && share_config)
                        cpu = json_object_get(params, "compute");
                json_int_t mv = json_is_integer(mem) ? json_integer_value(mem) : (json_int_t)total;
                json_int_t cv = json_is_integer(cpu) ? json_integer_value(cpu)
                                                     : (json_int_t)KDEV_DRA_SHARE_COMPUTE_TOTAL;
                if (mv <= 0)
                        return kdev_err_set(err, EINVAL,
                                            "device %s (%s): its memory is unknown; a share "
                                            "needs a memory size",
                                            dev, m ? m->uuid : g->uuid);
                if (json_object_set_new(share, KDEV_DRA_CAP_MEMORY, json_integer(mv)) < 0 ||
                    json_object_set_new(share, KDEV_DRA_CAP_COMPUTE, json_integer(cv)) < 0 ||
                    json_object_set_new(share, "uuid", json_string(m ? m->uuid : g->uuid)) < 0)
                        return kdev_err_set(err, ENOMEM, "out of memory");
                if (share_config && json_is_string(json_object_get(params, "policy")) &&
                    json_object_set(share, "policy", json_object_get(params, "policy")) < 0)
                        return kdev_err_set(err, ENOMEM, "out of memory");
                int rc = region_dir(p, uid, dev, dir, sizeof(dir), err);

                if (rc < 0)
                        return rc;
                if (json_object_set_new(share, "region", json_string(dir)) < 0)
                        return kdev_err_set(err, ENOMEM, "out of memory");
        }
        return 0;
}

/* Whether device record |d| is a share of the device's consumable capacity
 * (it carries a shareID). */
static bool is_capacity_share(const json_t *d)
{
        return json_is_string(json_object_get(json_object_get(d, "share"), "shareID"));
}

bool kdev_dra_share_record(const json_t *d)
{
        return is_capacity_share(d);
}

/* The quantity text of capacity |cap| amount |v|: memory as
 * kdev_dra_quantity ("20Gi"), compute as a plain number. */
static void quantity_of(const char *cap, unsigned long long v, char *buf, size_t size)
{
        if (!strcmp(cap, KDEV_DRA_CAP_MEMORY))
                kdev_dra_quantity(v, buf, size);
        else
                snprintf(buf, size, "%llu", v);
}

int kdev_dra_share_check(const struct kdev_dra_plugin *p, const char *uid, const json_t *devs,
                         struct kdev_err *err)
{
        static const char *const caps[] = {KDEV_DRA_CAP_MEMORY, KDEV_DRA_CAP_COMPUTE};
        size_t i;
        json_t *d;

        json_array_foreach(devs, i, d) {
                const char *dev = json_string_value(json_object_get(d, "device"));
                const char *pool = json_string_value(json_object_get(d, "pool"));
                const json_t *share = json_object_get(d, "share");
                const struct kdev_nvidia_mig *m = NULL;
                const struct kdev_nvidia_placement *pl = NULL;
                struct kdev_err ignored = {0};
                int frc = 0;

                if (!is_capacity_share(d))
                        continue;
                const struct kdev_nvidia_gpu *g =
                        kdev_dra_find_gpu(p, dev, &m, &pl, &frc, &ignored);

                if (!g)
                        continue;
                unsigned long long total[2] = {g->memory_bytes, KDEV_DRA_SHARE_COMPUTE_TOTAL};

                for (size_t c = 0; c < 2; c++) {
                        unsigned long long mine = (unsigned long long)json_integer_value(
                                json_object_get(share, caps[c]));
                        unsigned long long used = 0;
                        char holders[1024] = "";
                        size_t o = 0;
                        const char *ouid;
                        json_t *orec;

                        json_object_foreach(p->cp.claims, ouid, orec) {
                                size_t j;
                                json_t *od;

                                if (!strcmp(ouid, uid))
                                        continue;
                                json_array_foreach(json_object_get(orec, "devices"), j, od) {
                                        const char *odev =
                                                json_string_value(json_object_get(od, "device"));
                                        const char *opool =
                                                json_string_value(json_object_get(od, "pool"));

                                        if (!is_capacity_share(od) || !odev || !opool ||
                                            strcmp(odev, dev) || strcmp(opool, pool))
                                                continue;
                                        used += (unsigned long long)json_integer_value(
                                                json_object_get(json_object_get(od, "share"),
                                                                caps[c]));
                                        if (o < sizeof(holders))
                                                o += (size_t)snprintf(
                                                        holders + o, sizeof(holders) - o,
                                                        "%s%s/%s (%s)", o ? ", " : "",
                                                        json_string_value(json_object_get(
                                                                orec, "namespace")),
                                                        json_string_value(
                                                                json_object_get(orec, "name")),
                                                        ouid);
                                }
                        }
                        if (used + mine <= total[c])
                                continue;
                        char qm[32], ql[32], qt[32], qu[32];

                        quantity_of(caps[c], mine, qm, sizeof(qm));
                        quantity_of(caps[c], used < total[c] ? total[c] - used : 0, ql,
                                    sizeof(ql));
                        quantity_of(caps[c], total[c], qt, sizeof(qt));
                        quantity_of(caps[c], used, qu, sizeof(qu));
                        /* more than the whole device: nobody else to name */
                        if (o == 0)
                                return kdev_err_set(
                                        err, EBUSY,
                                        "device %s: consumed capacity %s %s (shareID %s) "
                                        "exceeds its %s (no other claim holds a share of it)",
                                        dev, caps[c], qm,
                                        json_string_value(json_object_get(share, "shareID")),
                                        qt);
                        return kdev_err_set(err, EBUSY,
                                            "device %s: consumed capacity %s %s (shareID %s) "
                                            "exceeds the %s left of its %s: %s held by claims %s",
                                            dev, caps[c], qm,
                                            json_string_value(json_object_get(share, "shareID")),
                                            ql, qt, qu, holders);
                }
        }
        return 0;
}

/* The limits file text of share record |d| of claim |uid| (|ns|/|name|). */
static char *share_limits_text(const char *ns, const char *name, const char *uid,
                               const json_t *d)
{
        const json_t *share = json_object_get(d, "share");
        const char *sid = json_string_value(json_object_get(share, "shareID"));
        struct kdev_nvidia_share_limit l = {0};
        char *c[3] = {NULL, NULL, NULL}, *text = NULL;
        size_t n = 0;

        snprintf(l.uuid, sizeof(l.uuid), "%s",
                 json_string_value(json_object_get(share, "uuid")));
        l.memory = (unsigned long long)json_integer_value(json_object_get(share, "memory"));
        l.compute = (unsigned)json_integer_value(json_object_get(share, "compute"));
        if (asprintf(&c[n], "kdev-dra-plugin: claim %s/%s (%s)", ns, name, uid) < 0)
                goto out;
        n++;
        if (asprintf(&c[n], "device %s", json_string_value(json_object_get(d, "device"))) < 0)
                goto out;
        n++;
        if (sid) {
                if (asprintf(&c[n], "share %s", sid) < 0)
                        goto out;
                n++;
        }
        text = kdev_nvidia_share_limits_text((const char *const *)c, n, &l, 1,
                                             json_string_value(json_object_get(share, "policy")));
out:
        for (size_t i = 0; i < n; i++)
                free(c[i]);
        return text;
}

int kdev_dra_share_make_regions(const struct kdev_dra_plugin *p, const char *ns,
                                const char *name, const char *uid, const json_t *devs,
                                bool only_missing, struct kdev_err *err)
{
        char claims[PATH_MAX];
        size_t i;
        json_t *d;
        int rc;

        if (!p->share_root)
                return 0;
        json_array_foreach(devs, i, d) {
                const char *dir = json_string_value(
                        json_object_get(json_object_get(d, "share"), "region"));
                char limits[PATH_MAX];
                struct stat st;

                if (!dir)
                        continue;
                snprintf(limits, sizeof(limits), "%s/limits", dir);
                if (only_missing && lstat(limits, &st) == 0)
                        continue;
                snprintf(claims, sizeof(claims), "%s/%s", p->share_root,
                         KDEV_DRA_SHARE_CLAIMS_DIR);
                if ((rc = kdev_dir_create(claims, 0700, "share claims directory", err)) < 0 ||
                    (rc = kdev_dir_create(dir, 01777, "share region directory", err)) < 0)
                        return rc;
                char *text = share_limits_text(ns, name, uid, d);

                if (!text)
                        return kdev_err_set(err, ENOMEM, "out of memory");
                rc = kdev_nvidia_share_region_fill(dir, text, true, err);
                free(text);
                if (rc < 0)
                        return kdev_err_wrap(err, "device %s: share region",
                                             json_string_value(json_object_get(d, "device")));
        }
        return 0;
}

int kdev_dra_share_remove_regions(const json_t *devs, struct kdev_err *err)
{
        size_t i;
        json_t *d;
        int first = 0;

        json_array_foreach(devs, i, d) {
                const char *dir = json_string_value(
                        json_object_get(json_object_get(d, "share"), "region"));
                int rc = dir ? kdev_nvidia_share_region_remove(dir) : 0;

                if (rc < 0 && first == 0)
                        first = kdev_err_set(err, -rc, "share region %s: %s", dir,
                                             strerror(-rc));
        }
        return first;
}
