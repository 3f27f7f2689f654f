/* ResourceSlices of the DRA plugin: devices from the NVIDIA backend's GPU
 * records, pool split, reconcile against the API server. See slices.h. */
#include "dra/slices.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void kdev_dra_quantity(unsigned long long bytes, char *buf, size_t size)
{
        static const char *const sfx[] = {"", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei"};
        unsigned i = 0;
        unsigned long long v = bytes;
        while (v != 0 && i + 1 < sizeof(sfx) / sizeof(sfx[0]) && v % 1024 == 0) {
                v /= 1024;
                i++;
        }
        snprintf(buf, size, "%llu%s", v, sfx[i]);
}

int kdev_dra_semver(const char *in, char *buf, size_t size)
{
        unsigned long long part[3] = {0, 0, 0};
        unsigned n = 0;
        const char *p = in;
        if (!p || !*p)
                return -EINVAL;
        for (;;) {
                if (n == 3 || *p < '0' || *p > '9')
                        return -EINVAL;
                unsigned long long v = 0;
                while (*p >= '0' && *p <= '9') {
                        if (v > 100000000ULL)
                                return -EINVAL;
                        v = v * 10 + (unsigned)(*p - '0');
                        p++;
                }
                part[n++] = v;
                if (*p == '\0')
                        break;
                if (*p != '.')
                        return -EINVAL;
                p++;
        }
        int w = snprintf(buf, size, "%llu.%llu.%llu", part[0], part[1], part[2]);
        return w < 0 || (size_t)w >= size ? -EINVAL : 0;
}

static bool listed(const struct kdev_dra_health *h, const char *uuid)
{
        if (!h || !uuid[0])
                return false;
        for (size_t i = 0; i < h->n_unhealthy; i++)
                if (h->unhealthy[i] && strcmp(h->unhealthy[i], uuid) == 0)
                        return true;
        return false;
}

/* Attribute helpers: each returns 0 or -ENOMEM. */
static int attr(json_t *attrs, const char *name, const char *kind, json_t *v)
{
        if (!v)
                return -ENOMEM;
        return json_object_set_new(attrs, name, json_pack("{s:o}", kind, v)) < 0 ? -ENOMEM : 0;
}

static int attr_str(json_t *attrs, const char *name, const char *s)
{
        if (!s || !*s)
                return 0;
        return attr(attrs, name, "string", json_string(s));
}

static int attr_ver(json_t *attrs, const char *name, const char *s)
{
        if (!s || !*s)
                return 0;
        return attr(attrs, name, "version", json_string(s));
}

static int attr_int(json_t *attrs, const char *name, long long v)
{
        return attr(attrs, name, "int", json_integer(v));
}

static int cap(json_t *caps, const char *name, unsigned long long v)
{
        char q[32];
        kdev_dra_quantity(v, q, sizeof(q));
        return json_object_set_new(caps, name, json_pack("{s:s}", "value", q)) < 0 ? -ENOMEM : 0;
}

/* A consumable capacity of a shareable GPU (KEP-5075, resource.k8s.io/v1
 * DeviceCapacity.requestPolicy): value |v|, default |v| (a claim that asks
 * for none of it consumes all of it: the whole GPU, as without sharing),
 * validRange {min |min|, step |step|} (step 0: none). The API's rules,
 * which the values here keep: min <= value, default within the range and
 * min + k x step, min + step <= value. The scheduler rounds a request below
 * min up to min and any other up to min + ceil((req - min) / step) x step
 * (dynamic-resource-allocation consumable_capacity.go). */
static int shared_cap(json_t *caps, const char *name, unsigned long long v,
                      unsigned long long min, unsigned long long step)
{
        char q[32], qmin[32], qstep[32];
        json_t *range;

        kdev_dra_quantity(v, q, sizeof(q));
        kdev_dra_quantity(min, qmin, sizeof(qmin));
        range = json_pack("{s:s}", "min", qmin);
        if (range && step) {
                kdev_dra_quantity(step, qstep, sizeof(qstep));
                if (json_object_set_new(range, "step", json_string(qstep)) < 0) {
                        json_decref(range);
                        range = NULL;
                }
        }
        if (!range)
                return -ENOMEM;
        return json_object_set_new(caps, name,
                                   json_pack("{s:s,s:{s:s,s:o}}", "value", q, "requestPolicy",
                                             "default", q, "validRange", range)) < 0
                       ? -ENOMEM
                       : 0;
}

/* The capacities of shareable whole GPU |g| (kdev_dra_device_options):
 * memory (its bytes; min 1Gi, step 1Mi when the memory is a whole number of
 * MiB of at least 1Gi + 1Mi, else no step and min the smaller of 1Gi and
 * the memory) and compute (100 percent; min 1, step 1). */
static int shared_caps(json_t *c, const struct kdev_nvidia_gpu *g)
{
        unsigned long long mem = g->memory_bytes, min = KDEV_DRA_SHARE_MEMORY_MIN, step = 0;
        int rc = 0;

        if (mem >= min + KDEV_DRA_SHARE_MEMORY_STEP && mem % KDEV_DRA_SHARE_MEMORY_STEP == 0)
                step = KDEV_DRA_SHARE_MEMORY_STEP;
        else if (mem < min)
                min = mem;
        if (mem > 0)
                rc = shared_cap(c, KDEV_DRA_CAP_MEMORY, mem, min, step);
        if (!rc)
                rc = shared_cap(c, KDEV_DRA_CAP_COMPUTE, KDEV_DRA_SHARE_COMPUTE_TOTAL, 1, 1);
        return rc;
}

/* Attributes every device of |g| shares (GPU or MIG parent). */
static int common_attrs(json_t *a, const struct kdev_nvidia_gpus *gpus,
                        const struct kdev_nvidia_gpu *g)
{
        char ver[64];
        int rc = attr_str(a, "productName", g->product);
        if (!rc)
                rc = attr_str(a, "brand", g->brand);
        if (!rc)
                rc = attr_str(a, "architecture", g->architecture);
        if (!rc && (g->cc_major > 0 || g->cc_minor > 0)) {
                snprintf(ver, sizeof(ver), "%d.%d.0", g->cc_major, g->cc_minor);
                rc = attr_ver(a, "cudaComputeCapability", ver);
        }
        if (!rc && kdev_dra_semver(gpus->driver_version, ver, sizeof(ver)) == 0)
                rc = attr_ver(a, "driverVersion", ver);
        if (!rc && gpus->cuda_driver_version > 0) {
                snprintf(ver, sizeof(ver), "%d.%d.0", gpus->cuda_driver_version / 1000,
                         (gpus->cuda_driver_version % 1000) / 10);
                rc = attr_ver(a, "cudaDriverVersion", ver);
        }
        if (!rc)
                rc = attr_str(a, "pcieBusID", g->pcie_bus_id);
        /* Kubernetes' standard attributes (resource.kubernetes.io), which
         * matchAttribute constraints align across drivers (a NIC under the
         * same PCIe root, on the same NUMA node) */
        if (!rc)
                rc = attr_str(a, KDEV_DRA_ATTR_PCIE_ROOT, g->pcie_root);
        if (!rc && g->numa_node >= 0)
                rc = attr_int(a, KDEV_DRA_ATTR_NUMA_NODE, g->numa_node);
        if (!rc)
                rc = attr_int(a, "index", g->index);
        if (!rc)
                rc = attr_int(a, "minor", g->minor);
        return rc;
}

static json_t *new_device(const char *name, json_t **attrs, json_t **caps)
{
        json_t *d = json_pack("{s:s, s:{}, s:{}}", "name", name, "attributes", "capacity");
        if (d) {
                *attrs = json_object_get(d, "attributes");
                *caps = json_object_get(d, "capacity");
        }
        return d;
}

/* Appends the device of whole GPU |g| (|m| NULL) or of its MIG device |m|
 * to |out|. Returns 0, -ENOMEM or the MIG device's dra_name_error. */
static int add_device(const struct kdev_nvidia_gpus *gpus, const struct kdev_nvidia_gpu *g,
                      const struct kdev_nvidia_mig *m, bool shareable, json_t *out)
{
        json_t *a, *c;

        if (m && m->dra_name_error < 0)
                return m->dra_name_error;
        json_t *d = new_device(m ? m->dra_name : g->dra_name, &a, &c);
        if (!d)
                return -ENOMEM;
        int rc = attr_str(a, "type", m ? "mig" : "gpu");
        if (!rc)
                rc = attr_str(a, "uuid", m ? m->uuid : g->uuid);
        if (!rc && m)
                rc = attr_str(a, "parentUUID", g->uuid);
        if (!rc && m)
                rc = attr_str(a, "profile", m->profile);
        if (!rc)
                rc = common_attrs(a, gpus, g);
        unsigned long long mem = m ? m->memory_bytes : g->memory_bytes;
        unsigned sms = m ? m->multiprocessors : g->multiprocessors;
        /* a shareable GPU: with allowMultipleAllocations every capacity is
         * consumed by each allocation (its requestPolicy default, else all
         * of it), so multiprocessors, which has no share semantics here, is
         * left out: a second claim could never be given the GPU */
        if (!rc && shareable && !m) {
                rc = shared_caps(c, g);
                if (!rc && json_object_set_new(d, "allowMultipleAllocations", json_true()) < 0)
                        rc = -ENOMEM;
        } else {
                if (!rc && mem > 0)
                        rc = cap(c, KDEV_DRA_CAP_MEMORY, mem);
                if (!rc && sms > 0)
                        rc = cap(c, "multiprocessors", sms);
        }
        if (!rc && m)
                rc = cap(c, "copyEngines", m->copy_engines);
        if (!rc && m)
                rc = cap(c, "decoders", m->decoders);
        if (!rc && m)
                rc = cap(c, "encoders", m->encoders);
        if (!rc && m)
                rc = cap(c, "jpegEngines", m->jpeg_engines);
        if (!rc && m)
                rc = cap(c, "ofaEngines", m->ofa_engines);
        /* NVIDIA's DRA driver: one capacity per memory slice the GPU
         * instance occupies, value 1 (MigDeviceInfo.GetDevice) */
        for (unsigned k = 0; !rc && m && k < m->placement_size && k < KDEV_DRA_MEMORY_SLICES_MAX;
             k++) {
                char name[32];
                snprintf(name, sizeof(name), "memorySlice%u", m->placement_start + k);
                rc = cap(c, name, 1);
        }
        if (!rc && json_array_append(out, d) < 0)
                rc = -ENOMEM;
        json_decref(d);
        return rc;
}

int kdev_dra_build_devices(const struct kdev_nvidia_gpus *gpus,
                           const struct kdev_dra_health *health, json_t **devices,
                           struct kdev_err *err)
{
        return kdev_dra_build_devices_opts(gpus, health, NULL, devices, err);
}

int kdev_dra_build_devices_opts(const struct kdev_nvidia_gpus *gpus,
                                const struct kdev_dra_health *health,
                                const struct kdev_dra_device_options *opts, json_t **devices,
                                struct kdev_err *err)
{
        bool shareable = opts && opts->shareable_gpus;

        *devices = NULL;
        json_t *out = json_array();
        if (!out)
                return kdev_err_set(err, ENOMEM, "building devices: out of memory");
        int rc = 0;
        for (size_t i = 0; gpus && i < gpus->n_gpus && rc == 0; i++) {
                const struct kdev_nvidia_gpu *g = &gpus->gpus[i];
                if (g->faulted || listed(health, g->uuid))
                        continue;
                if (!g->uuid[0]) {
                        rc = kdev_err_set(err, EINVAL, "GPU %u: no UUID", g->index);
                        break;
                }
                if (g->mig_enabled) {
                        for (size_t j = 0; j < g->n_migs && rc == 0; j++)
                                if (!listed(health, g->migs[j].uuid))
                                        rc = add_device(gpus, g, &g->migs[j], false, out);
                } else {
                        rc = add_device(gpus, g, NULL, shareable, out);
                }
                if (rc == -ENOMEM)
                        kdev_err_set(err, ENOMEM, "building devices: out of memory");
                else if (rc < 0)
                        kdev_err_set(err, -rc, "GPU %u: a MIG device has no valid device name",
                                     g->index);
        }
        if (rc < 0) {
                json_decref(out);
                return rc;
        }
        *devices = out;
        return (int)json_array_size(out);
}

static const char *driver_of(const struct kdev_dra_pool *pool)
{
        return pool->driver && *pool->driver ? pool->driver : KDEV_DRA_DEFAULT_DRIVER;
}

static size_t per_slice(const struct kdev_dra_pool *pool)
{
        return pool->max_per_slice == 0 || pool->max_per_slice > KDEV_DRA_SLICE_MAX_DEVICES
                       ? KDEV_DRA_SLICE_MAX_DEVICES
                       : pool->max_per_slice;
}

int kdev_dra_split(const struct kdev_dra_pool *pool, const json_t *devices, long long generation,
                   json_t **specs, struct kdev_err *err)
{
        *specs = NULL;
        if (!pool->node || !*pool->node)
                return kdev_err_set(err, EINVAL, "ResourceSlice pool: no node name");
        if (!json_is_array(devices))
                return kdev_err_set(err, EINVAL, "ResourceSlice pool: devices is not an array");
        size_t n = json_array_size(devices), max = per_slice(pool);
        size_t count = n == 0 ? 1 : (n + max - 1) / max;
        json_t *out = json_array();
        if (!out)
                return kdev_err_set(err, ENOMEM, "ResourceSlice pool: out of memory");
        for (size_t s = 0; s < count; s++) {
                json_t *devs = json_array();
                for (size_t i = s * max; devs && i < n && i < (s + 1) * max; i++)
                        if (json_array_append_new(devs, json_deep_copy(json_array_get(devices,
                                                                                      i))) < 0) {
                                json_decref(devs);
                                devs = NULL;
                        }
                json_t *spec = devs ? json_pack("{s:s, s:s, s:{s:s, s:I, s:I}, s:o}", "driver",
                                                driver_of(pool), "nodeName", pool->node, "pool",
                                                "name", pool->node, "generation",
                                                (json_int_t)generation, "resourceSliceCount",
                                                (json_int_t)count, "devices", devs)
                                    : NULL;
                if (!spec || json_array_append_new(out, spec) < 0) {
                        json_decref(out);
                        return kdev_err_set(err, ENOMEM, "ResourceSlice pool: out of memory");
                }
        }
        *specs = out;
        return (int)count;
}

/* --- reconcile ----------------------------------------------------------------------- */

static long long pool_int(const json_t *slice, const char *key)
{
        return json_integer_value(
                json_object_get(json_object_get(json_object_get(slice, "spec"), "pool"), key));
}

static const char *meta_str(const json_t *obj, const char *key)
{
        return json_string_value(json_object_get(json_object_get(obj, "metadata"), key));
}

static bool same_owner(const json_t *slice, const json_t *owner)
{
        const json_t *refs = json_object_get(json_object_get(slice, "metadata"),
                                             "ownerReferences");
        return json_array_size(refs) == 1 && json_equal(json_array_get(refs, 0), (json_t *)owner);
}

struct mutate_arg {
        struct kdev_kube *k;
        const json_t *spec;
        const json_t *owner;
        bool written;
};

static int mutate_slice(json_t *obj, void *arg, struct kdev_err *err)
{
        struct mutate_arg *m = arg;
        if (kdev_kube_slice_from_wire(m->k, obj) < 0)
                return kdev_err_set(err, EPROTO, "ResourceSlice %s: not an object",
                                    meta_str(obj, "name") ? meta_str(obj, "name") : "?");
        json_t *meta = json_object_get(obj, "metadata");
        m->written = false;
        if (json_equal(json_object_get(obj, "spec"), (json_t *)m->spec) &&
            same_owner(obj, m->owner))
                return KDEV_KUBE_UNCHANGED;
        m->written = true;
        if (!json_is_object(meta) ||
            json_object_set_new(obj, "spec", json_deep_copy(m->spec)) < 0 ||
            json_object_set_new(meta, "ownerReferences",
                                json_pack("[O]", (json_t *)m->owner)) < 0 ||
            kdev_kube_slice_to_wire(m->k, obj) < 0)
                return kdev_err_set(err, ENOMEM, "ResourceSlice: out of memory");
        return 0;
}

static int create_slice(struct kdev_kube *k, const struct kdev_dra_pool *pool,
                        const json_t *spec, const json_t *owner, struct kdev_err *err)
{
        char gen[300];
        snprintf(gen, sizeof(gen), "%s-%s-", pool->node, driver_of(pool));
        json_t *s = json_pack("{s:{s:s, s:[O]}, s:O}", "metadata", "generateName", gen,
                              "ownerReferences", (json_t *)owner, "spec", (json_t *)spec);
        if (!s)
                return kdev_err_set(err, ENOMEM, "ResourceSlice: out of memory");
        int rc = kdev_kube_create_slice(k, s, NULL, err);
        json_decref(s);
        return rc;
}

/* Existing slices of the pool equal |specs| exactly (any order). */
static bool pool_matches(const json_t *mine, const json_t *specs, const json_t *owner)
{
        size_t n = json_array_size(specs);
        if (json_array_size(mine) != n || n > 4096)
                return false;
        bool used[4096] = {false};
        size_t i, j;
        json_t *s;
        json_array_foreach(mine, i, s) {
                if (!same_owner(s, owner))
                        return false;
                const json_t *spec = json_object_get(s, "spec");
                for (j = 0; j < n; j++)
                        if (!used[j] && json_equal((json_t *)spec, json_array_get(specs, j)))
                                break;
                if (j == n)
                        return false;
                used[j] = true;
        }
        return true;
}

static int reconcile(struct kdev_kube *k, const struct kdev_dra_pool *pool,
                     const json_t *devices, const json_t *owner,
                     struct kdev_dra_reconcile_result *res, struct kdev_err *err)
{
        const char *driver = driver_of(pool);
        json_t *items = NULL, *mine = json_array(), *specs = NULL;
        unsigned char *used = NULL;
        int rc = mine ? 0 : kdev_err_set(err, ENOMEM, "ResourceSlices: out of memory");
        if (rc == 0)
                rc = kdev_kube_list_slices(k, pool->node, driver, &items, err);
        if (rc < 0) {
                kdev_err_wrap(err, "listing ResourceSlices of node %s", pool->node);
                goto out;
        }
        long long gen = 0;
        size_t i;
        json_t *s;
        json_array_foreach(items, i, s) {
                const char *pname = json_string_value(json_object_get(
                        json_object_get(json_object_get(s, "spec"), "pool"), "name"));
                if (!pname || strcmp(pname, pool->node) != 0)
                        continue;
                if (json_array_append(mine, s) < 0) {
                        rc = kdev_err_set(err, ENOMEM, "ResourceSlices: out of memory");
                        goto out;
                }
                if (pool_int(s, "generation") > gen)
                        gen = pool_int(s, "generation");
        }
        /* unchanged at the current generation? */
        if (json_array_size(mine) > 0) {
                rc = kdev_dra_split(pool, devices, gen, &specs, err);
                if (rc < 0)
                        goto out;
                if (pool_matches(mine, specs, owner)) {
                        res->generation = gen;
                        res->slices = (unsigned)json_array_size(mine);
                        rc = 0;
                        goto out;
                }
                json_decref(specs);
                specs = NULL;
        }
        gen++;
        rc = kdev_dra_split(pool, devices, gen, &specs, err);
        if (rc < 0)
                goto out;
        rc = 0;
        res->generation = gen;
        res->slices = (unsigned)json_array_size(specs);
        size_t n_mine = json_array_size(mine), n_specs = json_array_size(specs);
        used = calloc(n_mine + 1, 1);
        long *pick = calloc(n_specs, sizeof(long));
        if (!used || !pick) {
                free(pick);
                rc = kdev_err_set(err, ENOMEM, "ResourceSlices: out of memory");
                goto out;
        }
        /* pair desired chunks with existing slices: same devices first, then any */
        for (size_t d = 0; d < n_specs; d++) {
                pick[d] = -1;
                const json_t *want = json_object_get(json_array_get(specs, d), "devices");
                for (size_t e = 0; e < n_mine; e++) {
                        const json_t *have = json_object_get(
                                json_object_get(json_array_get(mine, e), "spec"), "devices");
                        if (!used[e] && json_equal((json_t *)have, (json_t *)want)) {
                                used[e] = 1;
                                pick[d] = (long)e;
                                break;
                        }
                }
        }
        for (size_t d = 0; d < n_specs; d++)
                for (size_t e = 0; pick[d] < 0 && e < n_mine; e++)
                        if (!used[e]) {
                                used[e] = 1;
                                pick[d] = (long)e;
                        }
        for (size_t d = 0; d < n_specs && rc == 0; d++) {
                const json_t *spec = json_array_get(specs, d);
                if (pick[d] >= 0) {
                        const char *name = meta_str(json_array_get(mine, (size_t)pick[d]),
                                                    "name");
                        char path[512];
                        rc = kdev_kube_path(k, path, sizeof(path), NULL, "resourceslices",
                                            name ? name : "", NULL, err);
                        if (rc < 0)
                                break;
                        struct mutate_arg m = {.k = k, .spec = spec, .owner = owner};
                        rc = kdev_kube_update_retry(k, path, mutate_slice, &m, NULL, err);
                        if (rc == 0) {
                                if (m.written) {
                                        res->updated++;
                                        res->changed = true;
                                }
                                continue;
                        }
                        if (rc != -ENOENT) {
                                kdev_err_wrap(err, "updating ResourceSlice %s", name);
                                break;
                        }
                        /* deleted since the LIST: create it anew */
                }
                rc = create_slice(k, pool, spec, owner, err);
                if (rc < 0) {
                        kdev_err_wrap(err, "creating ResourceSlice %zu of pool %s", d,
                                      pool->node);
                        break;
                }
                res->created++;
                res->changed = true;
        }
        free(pick);
        /* the rest of the old generation goes last */
        for (size_t e = 0; e < n_mine && rc == 0; e++) {
                if (used[e])
                        continue;
                const json_t *o = json_array_get(mine, e);
                const char *name = meta_str(o, "name");
                rc = kdev_kube_delete_slice(k, name ? name : "", meta_str(o, "uid"), NULL, err);
                if (rc == -ENOENT) {
                        rc = 0;
                        continue;
                }
                if (rc < 0) {
                        kdev_err_wrap(err, "deleting ResourceSlice %s", name);
                        break;
                }
                res->deleted++;
                res->changed = true;
        }
out:
        free(used);
        json_decref(items);
        json_decref(mine);
        json_decref(specs);
        return rc < 0 ? rc : 0;
}

int kdev_dra_slices_reconcile(struct kdev_kube *k, const struct kdev_dra_pool *pool,
                              const json_t *devices, struct kdev_dra_reconcile_result *result,
                              struct kdev_err *err)
{
        struct kdev_dra_reconcile_result local;
        struct kdev_dra_reconcile_result *res = result ? result : &local;
        memset(res, 0, sizeof(*res));
        if (!pool || !pool->node || !*pool->node)
                return kdev_err_set(err, EINVAL, "ResourceSlices: no node name");
        if (!json_is_array(devices))
                return kdev_err_set(err, EINVAL, "ResourceSlices: devices is not an array");
        json_t *owner = NULL;
        if (pool->owner_ref) {
                owner = json_incref((json_t *)pool->owner_ref);
        } else {
                json_t *node = NULL;
                int rc = kdev_kube_get_node(k, pool->node, &node, err);
                if (rc < 0)
                        return kdev_err_wrap(err, "owner reference of the ResourceSlices");
                owner = kdev_kube_node_owner_ref(node);
                json_decref(node);
                if (!owner)
                        return kdev_err_set(err, EPROTO, "Node %s has no name or uid",
                                            pool->node);
        }
        int rc = reconcile(k, pool, devices, owner, res, err);
        json_decref(owner);
        return rc;
}
