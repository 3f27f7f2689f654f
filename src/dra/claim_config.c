/* Opaque device configuration of DRA claims (see claim_config.h). */
#include "dra/claim_config.h"

#include <limits.h>
#include <errno.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/json.h"
#include "nvidia/isolation.h"
#include "nvidia/mig.h"
#include "share/policy.h"
#include "share/region.h"

/* Where an error is: the claim, the request, the config entry. */
struct where {
        const char *ns, *name, *uid, *request, *source;
        size_t index;
};

static int fail(const struct where *w, struct kdev_err *err, const char *fmt, ...)
        __attribute__((format(printf, 3, 4)));

static int fail(const struct where *w, struct kdev_err *err, const char *fmt, ...)
{
        char what[512];
        va_list ap;

        va_start(ap, fmt);
        vsnprintf(what, sizeof(what), fmt, ap);
        va_end(ap);
        return kdev_err_set(err, EINVAL, "claim %s/%s (%s): request %s: config %zu (%s): %s",
                            w->ns, w->name, w->uid, w->request, w->index, w->source, what);
}

/* Fails with "<at>.<key>: unknown field" for a key of |obj| not in |keys|. */
static int only_keys(const struct where *w, const json_t *obj, const char *at,
                     const char *const *keys, struct kdev_err *err)
{
        const char *k;
        json_t *v;

        json_object_foreach((json_t *)obj, k, v) {
                bool known = false;

                for (size_t i = 0; keys[i] && !known; i++)
                        known = !strcmp(keys[i], k);
                if (!known) {
                        char path[256];

                        snprintf(path, sizeof(path), "%s.%s", at, k);
                        return fail(w, err, "%s: unknown field", path);
                }
        }
        return 0;
}

/* Fails with "<at>: expected <type>, got <kind>" unless |j| is absent or of
 * |type|. */
static int want(const struct where *w, const json_t *j, json_type type, const char *at,
                struct kdev_err *err)
{
        char path[256];

        if (!j || kdev_json_is(j, type))
                return 0;
        snprintf(path, sizeof(path), "%s: expected %s, got", at, kdev_json_type_name(type));
        return fail(w, err, "%s %s", path, kdev_json_kind(j));
}

/* A quantity of at least 1 MiB as NVIDIA normalises it: "<MiB>M". */
static int pinned_limit(const struct where *w, const json_t *v, const char *at, const char *key,
                        json_t **out, struct kdev_err *err)
{
        unsigned long long bytes = 0;
        struct kdev_err qerr = {0};
        char buf[64];
        int rc = want(w, v, JSON_STRING, at, err);

        if (rc < 0)
                return rc;
        if (kdev_nvidia_parse_memory(json_string_value(v), &bytes, &qerr) < 0)
                return fail(w, err, "%s: %s", at, qerr.msg);
        if (bytes < 1024ull * 1024) {
                if (key)
                        return fail(w, err, "invalid limit: value set too low: %s: %s", key,
                                    json_string_value(v));
                return fail(w, err, "invalid limit: default value set too low: %s",
                            json_string_value(v));
        }
        snprintf(buf, sizeof(buf), "%lluM", bytes / 1024 / 1024);
        *out = json_string(buf);
        return *out ? 0 : kdev_err_set(err, ENOMEM, "out of memory");
}

/* MpsConfig: validated, normalised into |norm|. |n_devs|: the claim's
 * devices (for the per-device index keys). */
static int mps_config(const struct where *w, const json_t *m, size_t n_devs, json_t *norm,
                      struct kdev_err *err)
{
        static const char *const keys[] = {"defaultActiveThreadPercentage",
                                           "defaultPinnedDeviceMemoryLimit",
                                           "defaultPerDevicePinnedMemoryLimit", "multiUser", NULL};
        const char *at = "parameters.sharing.mpsConfig";
        const json_t *pct = json_object_get(m, "defaultActiveThreadPercentage");
        const json_t *def = json_object_get(m, "defaultPinnedDeviceMemoryLimit");
        const json_t *per = json_object_get(m, "defaultPerDevicePinnedMemoryLimit");
        const json_t *mu = json_object_get(m, "multiUser");
        json_t *v = NULL;
        int rc;

        if ((rc = want(w, m, JSON_OBJECT, at, err)) < 0 ||
            (rc = only_keys(w, m, at, keys, err)) < 0 ||
            (rc = want(w, pct, JSON_INTEGER, "parameters.sharing.mpsConfig."
                                             "defaultActiveThreadPercentage", err)) < 0 ||
            (rc = want(w, per, JSON_OBJECT, "parameters.sharing.mpsConfig."
                                            "defaultPerDevicePinnedMemoryLimit", err)) < 0 ||
            (rc = want(w, mu, JSON_TRUE, "parameters.sharing.mpsConfig.multiUser", err)) < 0)
                return rc;
        if (pct) {
                json_int_t p = json_integer_value(pct);

                if (p < 0)
                        return fail(w, err, "active thread percentage must not be negative");
                if (p > 100)
                        return fail(w, err,
                                    "active thread percentage must not be greater than 100");
                json_object_set(norm, "defaultActiveThreadPercentage", (json_t *)pct);
        }
        if (def) {
                if ((rc = pinned_limit(w, def, "parameters.sharing.mpsConfig."
                                               "defaultPinnedDeviceMemoryLimit",
                                       NULL, &v, err)) < 0)
                        return rc;
                json_object_set_new(norm, "defaultPinnedDeviceMemoryLimit", v);
        }
        if (per) {
                json_t *np = json_object(), *lv;
                const char *k;

                if (!np)
                        return kdev_err_set(err, ENOMEM, "out of memory");
                json_object_set_new(norm, "defaultPerDevicePinnedMemoryLimit", np);
                json_object_foreach((json_t *)per, k, lv) {
                        char *end = NULL;
                        long idx;

                        if (strncmp(k, "GPU-", 4) && strncmp(k, "MIG-", 4)) {
                                idx = strtol(k, &end, 10);
                                if (!*k || *end)
                                        return fail(w, err,
                                                    "invalid device: unable to parse key as an "
                                                    "integer: %s",
                                                    k);
                                if (idx < 0 || (size_t)idx >= n_devs)
                                        return fail(w, err,
                                                    "invalid device: invalid device index: %s",
                                                    k);
                        }
                        if ((rc = pinned_limit(w, lv, "parameters.sharing.mpsConfig."
                                                      "defaultPerDevicePinnedMemoryLimit",
                                               k, &v, err)) < 0)
                                return rc;
                        json_object_set_new(np, k, v);
                }
        }
        if (mu)
                json_object_set(norm, "multiUser", (json_t *)mu);
        return 0;
}

/* GpuConfig / MigDeviceConfig parameters |p| into |norm| (normalised). */
static int nvidia_config(const struct where *w, const json_t *p, bool mig, size_t n_devs,
                         json_t *norm, struct kdev_err *err)
{
        static const char *const top[] = {"apiVersion", "kind", "sharing", NULL};
        static const char *const gpu_sharing[] = {"strategy", "timeSlicingConfig", "mpsConfig",
                                                  NULL};
        static const char *const mig_sharing[] = {"strategy", "mpsConfig", NULL};
        static const char *const ts_keys[] = {"interval", NULL};
        static const char *const intervals[] = {"Default", "Short", "Medium", "Long"};
        const json_t *sh = json_object_get(p, "sharing");
        const json_t *strategy, *ts, *mps;
        json_t *nsh;
        const char *s;
        int rc;

        if ((rc = only_keys(w, p, "parameters", top, err)) < 0 ||
            (rc = want(w, sh, JSON_OBJECT, "parameters.sharing", err)) < 0)
                return rc;
        if (!sh)
                return 0; /* exclusive use */
        if ((rc = only_keys(w, sh, "parameters.sharing", mig ? mig_sharing : gpu_sharing,
                            err)) < 0)
                return rc;
        strategy = json_object_get(sh, "strategy");
        ts = json_object_get(sh, "timeSlicingConfig");
        mps = json_object_get(sh, "mpsConfig");
        if ((rc = want(w, strategy, JSON_STRING, "parameters.sharing.strategy", err)) < 0 ||
            (rc = want(w, ts, JSON_OBJECT, "parameters.sharing.timeSlicingConfig", err)) < 0)
                return rc;
        s = strategy ? json_string_value(strategy) : "";
        if (strcmp(s, "TimeSlicing") && strcmp(s, "MPS"))
                return fail(w, err,
                            "unknown GPU sharing strategy: %s, supported GPU sharing "
                            "strategies: TimeSlicing, MPS",
                            s);
        nsh = json_pack("{s:s}", "strategy", s);
        if (!nsh || json_object_set_new(norm, "sharing", nsh) < 0)
                return kdev_err_set(err, ENOMEM, "out of memory");
        if (!strcmp(s, "TimeSlicing")) {
                const char *iv = "Default";
                bool known = false;

                if (mps)
                        return fail(w, err, "cannot use MpsConfig with the 'TimeSlicing' strategy");
                if (mig)
                        return 0;
                if (ts) {
                        const json_t *ivj = json_object_get(ts, "interval");

                        if ((rc = only_keys(w, ts, "parameters.sharing.timeSlicingConfig",
                                            ts_keys, err)) < 0 ||
                            (rc = want(w, ivj, JSON_STRING,
                                       "parameters.sharing.timeSlicingConfig.interval", err)) < 0)
                                return rc;
                        if (ivj)
                                iv = json_string_value(ivj);
                }
                for (size_t i = 0; i < 4 && !known; i++)
                        known = !strcmp(iv, intervals[i]);
                if (!known)
                        return fail(w, err,
                                    "unknown time-slice interval: %s, supported time-slice "
                                    "intervals: Default, Short, Medium, Long",
                                    iv);
                json_object_set_new(nsh, "timeSlicingConfig", json_pack("{s:s}", "interval", iv));
                return 0;
        }
        if (ts)
                return fail(w, err, "cannot use TimeSlicingConfig with the 'MPS' strategy");
        json_t *nm = json_object();

        if (!nm || json_object_set_new(nsh, "mpsConfig", nm) < 0)
                return kdev_err_set(err, ENOMEM, "out of memory");
        return mps ? mps_config(w, mps, n_devs, nm, err) : 0;
}

/* ShareConfig parameters |p| into |norm|: memory in bytes, compute percent. */
static int share_config(const struct where *w, const json_t *p, json_t *norm,
                        struct kdev_err *err)
{
        static const char *const keys[] = {"apiVersion", "kind", "memory", "compute", "policy",
                                           NULL};
        const json_t *mem = json_object_get(p, "memory"), *cpu = json_object_get(p, "compute");
        const json_t *pol = json_object_get(p, "policy");
        struct kdev_err qerr = {0};
        unsigned long long bytes;
        int rc;

        if ((rc = only_keys(w, p, "parameters", keys, err)) < 0 ||
            (rc = want(w, mem, JSON_STRING, "parameters.memory", err)) < 0 ||
            (rc = want(w, pol, JSON_STRING, "parameters.policy", err)) < 0)
                return rc;
        if (!mem && !cpu)
                return fail(w, err, "parameters: a share needs memory or compute");
        if (mem) {
                if (kdev_nvidia_parse_memory(json_string_value(mem), &bytes, &qerr) < 0)
                        return fail(w, err, "parameters.memory: %s", qerr.msg);
                /* the record's JSON integer holds 2^63 - 1 bytes at most,
                 * one less than the parser reads (as shares.c) */
                if (bytes > (unsigned long long)LLONG_MAX)
                        return fail(w, err, "parameters.memory: must be at most %lld bytes, "
                                            "got \"%s\"",
                                    LLONG_MAX, json_string_value(mem));
                json_object_set_new(norm, "memory", json_integer((json_int_t)bytes));
        }
        if (cpu) {
                long v = -1;
                char *end = NULL;

                if (json_is_integer(cpu)) {
                        v = (long)json_integer_value(cpu);
                } else if (json_is_string(cpu)) {
                        const char *s = json_string_value(cpu);

                        v = strtol(s, &end, 10);
                        if (end == s || (*end && strcmp(end, "%")))
                                v = -1;
                }
                if (v < 1 || v > 100) {
                        char *t = json_dumps(cpu, JSON_ENCODE_ANY);

                        rc = fail(w, err,
                                  "parameters.compute: must be a percentage of the device, 1 "
                                  "to 100 (e.g. 25 or \"25%%\"), got %s",
                                  t ? t : "?");
                        free(t);
                        return rc;
                }
                json_object_set_new(norm, "compute", json_integer(v));
        }
        if (pol) {
                enum kdev_share_policy sp;

                if (kdev_share_policy_parse(json_string_value(pol), &sp) != 0)
                        return fail(w, err,
                                    "parameters.policy: must be a policy of libkdev-share.so "
                                    "(" KDEV_SHARE_POLICY_LIST "), got \"%s\"",
                                    json_string_value(pol));
                json_object_set(norm, "policy", (json_t *)pol);
        }
        return 0;
}

/* The device type of DRA device |dev|: "mig" or "gpu". */
static bool is_mig(const char *dev)
{
        unsigned minor;
        bool mig = false;

        return kdev_nvidia_dra_name_minor(dev, &minor, &mig) && mig;
}

/* Whether |requests| (array of strings) names |request|. */
static bool names(const json_t *requests, const char *request)
{
        size_t i;
        json_t *v;

        json_array_foreach(requests, i, v) {
                if (json_is_string(v) && !strcmp(json_string_value(v), request))
                        return true;
        }
        return false;
}

/* Decodes entry |e| of the list for device |dev|: the normalised record
 * into *out (new reference). */
static int decode(const struct where *w, const json_t *e, const char *dev, size_t n_devs,
                  json_t **out, struct kdev_err *err)
{
        const json_t *p = json_object_get(json_object_get(e, "opaque"), "parameters");
        const char *api = json_string_value(json_object_get(p, "apiVersion"));
        const char *kind = json_string_value(json_object_get(p, "kind"));
        bool mig = is_mig(dev);
        json_t *norm = json_object(), *rec;
        int rc;

        if (!norm)
                return kdev_err_set(err, ENOMEM, "out of memory");
        if ((rc = want(w, p, JSON_OBJECT, "parameters", err)) < 0 ||
            (rc = want(w, json_object_get(p, "apiVersion"), JSON_STRING, "parameters.apiVersion",
                       err)) < 0 ||
            (rc = want(w, json_object_get(p, "kind"), JSON_STRING, "parameters.kind", err)) < 0)
                goto out;
        if (!api || !kind) {
                rc = fail(w, err, "parameters: apiVersion and kind are required");
                goto out;
        }
        if (!strcmp(api, KDEV_DRA_NVIDIA_CONFIG_API) &&
            (!strcmp(kind, "GpuConfig") || !strcmp(kind, "MigDeviceConfig"))) {
                bool for_mig = !strcmp(kind, "MigDeviceConfig");

                if (for_mig != mig) {
                        char what[256];

                        snprintf(what, sizeof(what), "cannot apply %s to device \"%s\"", kind,
                                 dev);
                        rc = fail(w, err, "%s of type \"%s\"", what, mig ? "mig" : "gpu");
                        goto out;
                }
                rc = nvidia_config(w, p, mig, n_devs, norm, err);
        } else if (!strcmp(api, KDEV_DRA_KDEV_CONFIG_API) && !strcmp(kind, "ShareConfig")) {
                rc = share_config(w, p, norm, err);
        } else {
                char what[300];

                snprintf(what, sizeof(what), "parameters: unknown kind %s of %s", kind, api);
                rc = fail(w, err,
                          "%s (known: " KDEV_DRA_NVIDIA_CONFIG_API " GpuConfig, MigDeviceConfig; "
                          KDEV_DRA_KDEV_CONFIG_API " ShareConfig)",
                          what);
        }
        if (rc < 0)
                goto out;
        rec = json_pack("{s:s,s:s,s:s,s:O}", "apiVersion", api, "kind", kind, "source",
                        w->source, "parameters", norm);
        if (!rec) {
                rc = kdev_err_set(err, ENOMEM, "out of memory");
                goto out;
        }
        *out = rec;
out:
        json_decref(norm);
        return rc;
}

/* Whether a config of kind (apiVersion, kind) of |e| fits device |dev|
 * (an entry with empty requests applies only then). */
static bool fits(const json_t *e, const char *dev)
{
        const json_t *p = json_object_get(json_object_get(e, "opaque"), "parameters");
        const char *api = json_string_value(json_object_get(p, "apiVersion"));
        const char *kind = json_string_value(json_object_get(p, "kind"));
        bool mig = is_mig(dev);

        if (!api || !kind)
                return true; /* decoded, so the error names it */
        if (!strcmp(api, KDEV_DRA_NVIDIA_CONFIG_API) &&
            (!strcmp(kind, "GpuConfig") || !strcmp(kind, "MigDeviceConfig")))
                return !strcmp(kind, mig ? "MigDeviceConfig" : "GpuConfig");
        return true; /* ShareConfig fits both; unknown kinds fail in decode */
}

int kdev_dra_claim_config(const json_t *claim, const char *driver, const char *pool,
                          const char *ns, const char *name, const char *uid, json_t *devs,
                          struct kdev_err *err)
{
        const json_t *alloc = json_object_get(json_object_get(claim, "status"), "allocation");
        const json_t *list = json_object_get(json_object_get(alloc, "devices"), "config");
        const json_t *results = json_object_get(json_object_get(alloc, "devices"), "results");
        const json_t **order = NULL;
        size_t *pos = NULL, n = 0, i, k;
        const char **src = NULL;
        json_t *e, *r;
        int rc = 0;

        if (!list)
                return 0;
        if (!json_is_array(list))
                return kdev_err_set(err, EPROTO,
                                    "claim %s/%s: .status.allocation.devices.config: expected an "
                                    "array, got %s",
                                    ns, name, kdev_json_kind(list));
        order = calloc(json_array_size(list) + 1, sizeof(*order));
        pos = calloc(json_array_size(list) + 1, sizeof(*pos));
        src = calloc(json_array_size(list) + 1, sizeof(*src));
        if (!order || !pos || !src) {
                rc = kdev_err_set(err, ENOMEM, "out of memory");
                goto out;
        }
        /* this driver's entries: class first, then claim, each in list order */
        for (int pass = 0; pass < 2; pass++) {
                json_array_foreach(list, i, e) {
                        const char *s = json_string_value(json_object_get(e, "source"));
                        const char *drv = json_string_value(
                                json_object_get(json_object_get(e, "opaque"), "driver"));

                        if (!drv || strcmp(drv, driver))
                                continue;
                        if (!s || (strcmp(s, "FromClass") && strcmp(s, "FromClaim"))) {
                                rc = kdev_err_set(err, EINVAL,
                                                  "claim %s/%s (%s): config %zu: invalid "
                                                  "config source: %s",
                                                  ns, name, uid, i, s ? s : "(none)");
                                goto out;
                        }
                        if (!strcmp(s, pass == 0 ? "FromClass" : "FromClaim")) {
                                order[n] = e;
                                pos[n] = i;
                                src[n++] = s;
                        }
                }
        }
        json_array_foreach(results, i, r) {
                const char *drv = json_string_value(json_object_get(r, "driver"));
                const char *rp = json_string_value(json_object_get(r, "pool"));
                const char *dev = json_string_value(json_object_get(r, "device"));
                const char *req = json_string_value(json_object_get(r, "request"));
                json_t *rec = NULL, *d, *cfg = NULL;
                size_t j;

                if (!drv || strcmp(drv, driver) || !rp || strcmp(rp, pool) || !dev)
                        continue;
                json_array_foreach(devs, j, d) {
                        if (!strcmp(json_string_value(json_object_get(d, "device")), dev))
                                rec = d;
                }
                if (!rec || json_object_get(rec, "config"))
                        continue; /* the first result of a device decides */
                for (k = n; k-- > 0;) {
                        const json_t *reqs = json_object_get(order[k], "requests");
                        struct where w = {ns, name, uid, req ? req : "", src[k], pos[k]};

                        if (json_array_size(reqs) > 0 ? !names(reqs, req ? req : "")
                                                      : !fits(order[k], dev))
                                continue;
                        rc = decode(&w, order[k], dev, json_array_size(devs), &cfg, err);
                        if (rc < 0)
                                goto out;
                        break;
                }
                if (cfg && json_object_set_new(rec, "config", cfg) < 0) {
                        rc = kdev_err_set(err, ENOMEM, "out of memory");
                        goto out;
                }
        }
out:
        free(order);
        free(pos);
        free(src);
        return rc;
}

int kdev_dra_config_edits(const json_t *rec, struct kdev_container_edits *out,
                          struct kdev_err *err)
{
        const json_t *p = json_object_get(json_object_get(rec, "config"), "parameters");
        const json_t *pct = json_object_get(
                json_object_get(json_object_get(p, "sharing"), "mpsConfig"),
                "defaultActiveThreadPercentage");
        char v[32];

        if (!json_is_integer(pct))
                return 0;
        snprintf(v, sizeof(v), "%lld", (long long)json_integer_value(pct));
        return kdev_edits_set_env(out, "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", v, err);
}
