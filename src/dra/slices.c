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
                rc = cap(c, "copyEngines", m->engines.copy_engines);
        if (!rc && m)
                rc = cap(c, "decoders", m->engines.decoders);
        if (!rc && m)
                rc = cap(c, "encoders", m->engines.encoders);
        if (!rc && m)
                rc = cap(c, "jpegEngines", m->engines.jpeg_engines);
        if (!rc && m)
                rc = cap(c, "ofaEngines", m->engines.ofa_engines);
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
        json_t *sets = NULL;
        int n = kdev_dra_build_partitionable(gpus, health, opts, devices, &sets, err);
        if (n >= 0 && json_array_size(sets) > 0) {
                /* placement devices consume counters only the other builder
                 * returns: publishing them without would make the pool invalid */
                json_decref(*devices);
                *devices = NULL;
                n = kdev_err_set(err, EINVAL, "GPUs with MIG placements need their counter "
                                              "sets: kdev_dra_build_partitionable");
        }
        json_decref(sets);
        return n;
}

/* --- dynamic MIG: partitionable devices ----------------------------------------- */

bool kdev_dra_counters_in_own_slice(unsigned kube_minor)
{
        return kube_minor >= 35;
}

/* The capacity dimensions of a counter set, by counter name (DNS labels, the
 * capacity names of the MIG devices in that form). */
enum { DIM_MEMORY, DIM_SMS, DIM_CE, DIM_DEC, DIM_ENC, DIM_JPEG, DIM_OFA, N_DIMS };
static const char *const dim_names[N_DIMS] = {"memory",   "multiprocessors", "copy-engines",
                                              "decoders", "encoders",        "jpeg-engines",
                                              "ofa-engines"};

static void placement_dims(const struct kdev_nvidia_placement *p, unsigned long long v[N_DIMS])
{
        v[DIM_MEMORY] = p->memory_bytes;
        v[DIM_SMS] = p->multiprocessors;
        v[DIM_CE] = p->engines.copy_engines;
        v[DIM_DEC] = p->engines.decoders;
        v[DIM_ENC] = p->engines.encoders;
        v[DIM_JPEG] = p->engines.jpeg_engines;
        v[DIM_OFA] = p->engines.ofa_engines;
}

/* {"counterSet": set, "counters": {}} appended to a new consumesCounters of
 * |dev|; *counters receives the counters object. */
static int consumes(json_t *dev, const char *set, json_t **counters)
{
        json_t *e = json_pack("[{s:s, s:{}}]", "counterSet", set, "counters");
        if (!e || json_object_set_new(dev, "consumesCounters", e) < 0)
                return -ENOMEM;
        *counters = json_object_get(json_array_get(e, 0), "counters");
        return 0;
}

/* Appends the partitionable GPU |g| (n_placements > 0) to |out| and its
 * counter set to |sets|. Returns 0, -ENOMEM, or a negative errno with |err|. */
static int add_partitionable(const struct kdev_nvidia_gpus *gpus,
                             const struct kdev_nvidia_gpu *g, json_t *out, json_t *sets,
                             struct kdev_err *err)
{
        char set[KDEV_NVIDIA_DRA_NAME_MAX + 1], name[48];
        unsigned long long total[N_DIMS] = {0}, v[N_DIMS];
        unsigned slices = g->memory_slices;

        for (size_t j = 0; j < g->n_placements; j++) {
                const struct kdev_nvidia_placement *p = &g->placements[j];
                placement_dims(p, v);
                for (unsigned d = 0; d < N_DIMS; d++)
                        if (v[d] > total[d])
                                total[d] = v[d];
                if (g->memory_slices == 0 && p->placement_start + p->placement_size > slices)
                        slices = p->placement_start + p->placement_size;
        }
        for (size_t j = 0; j < g->n_placements; j++) {
                const struct kdev_nvidia_placement *p = &g->placements[j];
                if (p->placement_size == 0 || p->placement_start >= slices ||
                    p->placement_size > slices - p->placement_start)
                        return kdev_err_set(err, EINVAL,
                                            "GPU %u: placement %s ends past memory slice %u",
                                            g->index, p->dra_name[0] ? p->dra_name : "?",
                                            slices);
        }
        if (g->memory_bytes > 0)
                total[DIM_MEMORY] = g->memory_bytes;
        if (g->multiprocessors > 0)
                total[DIM_SMS] = g->multiprocessors;
        unsigned n_counters = slices;
        for (unsigned d = 0; d < N_DIMS; d++)
                n_counters += total[d] > 0;
        if (n_counters > KDEV_DRA_COUNTER_SET_MAX_COUNTERS)
                return kdev_err_set(err, E2BIG, "GPU %u: %u counters exceed %d per counter set",
                                    g->index, n_counters, KDEV_DRA_COUNTER_SET_MAX_COUNTERS);
        if (kdev_nvidia_dra_counter_set_name(g->minor, set, sizeof(set)) < 0)
                return kdev_err_set(err, ENAMETOOLONG, "GPU %u: no counter set name", g->index);

        /* the set, and the full GPU consuming all of it */
        json_t *cs = json_pack("{s:s, s:{}}", "name", set, "counters");
        if (!cs || json_array_append_new(sets, cs) < 0)
                return -ENOMEM;
        json_t *counters = json_object_get(cs, "counters");
        int rc = 0;
        for (unsigned d = 0; d < N_DIMS && !rc; d++)
                if (total[d] > 0)
                        rc = cap(counters, dim_names[d], total[d]);
        for (unsigned k = 0; k < slices && !rc; k++) {
                snprintf(name, sizeof(name), "memory-slice-%u", k);
                rc = cap(counters, name, 1);
        }
        if (!rc)
                rc = add_device(gpus, g, NULL, false, out);
        json_t *mine = NULL;
        if (!rc)
                rc = consumes(json_array_get(out, json_array_size(out) - 1), set, &mine);
        if (!rc && json_object_update(mine, counters) < 0)
                rc = -ENOMEM;

        /* the placements */
        for (size_t j = 0; j < g->n_placements && !rc; j++) {
                const struct kdev_nvidia_placement *p = &g->placements[j];
                if (p->dra_name_error < 0 || !p->dra_name[0]) {
                        int e = p->dra_name_error < 0 ? -p->dra_name_error : EINVAL;
                        return kdev_err_set(err, e,
                                            "GPU %u: a MIG placement has no valid device name",
                                            g->index);
                }
                struct kdev_nvidia_mig m = {
                        .memory_bytes = p->memory_bytes,
                        .multiprocessors = p->multiprocessors,
                        .engines = p->engines,
                        .placement_start = p->placement_start,
                        .placement_size = p->placement_size,
                };
                /* no uuid: attr_str leaves the empty string out */
                snprintf(m.dra_name, sizeof(m.dra_name), "%s", p->dra_name);
                snprintf(m.profile, sizeof(m.profile), "%s", p->profile);
                rc = add_device(gpus, g, &m, false, out);
                if (!rc)
                        rc = consumes(json_array_get(out, json_array_size(out) - 1), set,
                                      &mine);
                placement_dims(p, v);
                for (unsigned d = 0; d < N_DIMS && !rc; d++)
                        if (v[d] > 0 && total[d] > 0)
                                rc = cap(mine, dim_names[d], v[d]);
                for (unsigned k = 0; k < p->placement_size && !rc; k++) {
                        snprintf(name, sizeof(name), "memory-slice-%u", p->placement_start + k);
                        rc = cap(mine, name, 1);
                }
        }
        return rc;
}

int kdev_dra_build_partitionable(const struct kdev_nvidia_gpus *gpus,
                                 const struct kdev_dra_health *health,
                                 const struct kdev_dra_device_options *opts, json_t **devices,
                                 json_t **counter_sets, struct kdev_err *err)
{
        bool shareable = opts && opts->shareable_gpus;

        *devices = NULL;
        *counter_sets = NULL;
        json_t *out = json_array(), *sets = json_array();
        int rc = out && sets ? 0 : -ENOMEM;
        for (size_t i = 0; gpus && i < gpus->n_gpus && rc == 0; i++) {
                const struct kdev_nvidia_gpu *g = &gpus->gpus[i];
                if (g->faulted || listed(health, g->uuid))
                        continue;
                if (!g->uuid[0]) {
                        rc = kdev_err_set(err, EINVAL, "GPU %u: no UUID", g->index);
                        break;
                }
                if (g->n_placements > 0) {
                        rc = add_partitionable(gpus, g, out, sets, err);
                } else if (g->mig_enabled) {
                        for (size_t j = 0; j < g->n_migs && rc == 0; j++)
                                if (!listed(health, g->migs[j].uuid))
                                        rc = add_device(gpus, g, &g->migs[j], false, out);
                        if (rc < 0 && rc != -ENOMEM)
                                kdev_err_set(err, -rc,
                                             "GPU %u: a MIG device has no valid device name",
                                             g->index);
                } else {
                        rc = add_device(gpus, g, NULL, shareable, out);
                }
        }
        if (rc == -ENOMEM)
                kdev_err_set(err, ENOMEM, "building devices: out of memory");
        if (rc < 0) {
                json_decref(out);
                json_decref(sets);
                return rc;
        }
        *devices = out;
        *counter_sets = sets;
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

/* The spec of one slice: devices [d0, d1) of |devices| and sets [s0, s1) of
 * |sets| (the key left out when the range is empty and |key_always| is not
 * set for it). NULL on -ENOMEM. */
static json_t *slice_spec(const struct kdev_dra_pool *pool, long long generation, size_t count,
                          const json_t *devices, size_t d0, size_t d1, bool with_devices,
                          const json_t *sets, size_t s0, size_t s1)
{
        json_t *spec = json_pack("{s:s, s:s, s:{s:s, s:I, s:I}}", "driver", driver_of(pool),
                                 "nodeName", pool->node, "pool", "name", pool->node,
                                 "generation", (json_int_t)generation, "resourceSliceCount",
                                 (json_int_t)count);
        if (!spec)
                return NULL;
        if (s1 > s0) {
                json_t *a = json_array();
                if (!a || json_object_set_new(spec, "sharedCounters", a) < 0)
                        goto oom;
                for (size_t i = s0; i < s1; i++)
                        if (json_array_append_new(a, json_deep_copy(json_array_get(sets, i))) < 0)
                                goto oom;
        }
        if (with_devices) {
                json_t *a = json_array();
                if (!a || json_object_set_new(spec, "devices", a) < 0)
                        goto oom;
                for (size_t i = d0; i < d1; i++)
                        if (json_array_append_new(a, json_deep_copy(json_array_get(devices, i))) <
                            0)
                                goto oom;
        }
        return spec;
oom:
        json_decref(spec);
        return NULL;
}

/* The counter set |d| consumes (its first consumesCounters entry), or NULL;
 * *n_entries the number of entries, *n_counters the counters over them. */
static const char *consumed_set(const json_t *d, size_t *n_entries, size_t *n_counters)
{
        const json_t *cc = json_object_get(d, "consumesCounters");
        size_t i;
        const json_t *e;
        *n_entries = json_array_size(cc);
        *n_counters = 0;
        json_array_foreach(cc, i, e)
                *n_counters += json_object_size(json_object_get(e, "counters"));
        return json_string_value(json_object_get(json_array_get(cc, 0), "counterSet"));
}

static long find_set(const json_t *sets, const char *name)
{
        size_t i;
        const json_t *s;
        json_array_foreach(sets, i, s) {
                const char *n = json_string_value(json_object_get(s, "name"));
                if (n && strcmp(n, name) == 0)
                        return (long)i;
        }
        return -1;
}

/* One slice of the 1.34 layout: devices [d0, d1), and the sets of |order|
 * [s0, s1) (indices into the pool's sets). */
struct chunk {
        size_t d0, d1, s0, s1;
};

/* The 1.34 layout of |devices| and |sets| (see kdev_dra_split) into
 * *chunks (*n_chunks) and *order (set indices in slice order). */
static int inline_layout(const json_t *devices, const json_t *sets, size_t max,
                         struct chunk **chunks, size_t *n_chunks, size_t **order,
                         struct kdev_err *err)
{
        size_t n = json_array_size(devices), n_sets = json_array_size(sets);
        struct chunk *c = calloc(n + n_sets + 1, sizeof(*c));
        size_t *ord = calloc(n_sets + 1, sizeof(*ord));
        unsigned char *placed = calloc(n_sets + 1, 1);
        size_t nc = 0, no = 0, cur_dev = 0, cur_cnt = 0, cur_use = 0;
        int rc = 0;
        if (!c || !ord || !placed) {
                rc = kdev_err_set(err, ENOMEM, "ResourceSlice pool: out of memory");
                goto out;
        }
        /* runs: [i, j) consuming set |si| (-1: none), then the unconsumed sets */
        for (size_t i = 0; i < n || no < n_sets;) {
                size_t j = i, use = 0, cnt = 0, e, k;
                long si = -1;
                const char *dname = NULL, *set = NULL;
                if (i < n) {
                        const json_t *d = json_array_get(devices, i);
                        dname = json_string_value(json_object_get(d, "name"));
                        set = consumed_set(d, &e, &k);
                        if (e > 1) {
                                rc = kdev_err_set(err, EINVAL,
                                                  "device %s: consumes more than one counter set",
                                                  dname ? dname : "?");
                                goto out;
                        }
                        if (set && (si = find_set(sets, set)) < 0) {
                                rc = kdev_err_set(err, EINVAL,
                                                  "device %s: consumes counter set %s, which "
                                                  "the pool does not have",
                                                  dname ? dname : "?", set);
                                goto out;
                        }
                        if (si >= 0 && placed[si]) {
                                rc = kdev_err_set(err, EINVAL,
                                                  "counter set %s: its devices are not "
                                                  "consecutive",
                                                  set);
                                goto out;
                        }
                        for (j = i; j < n; j++) {
                                const char *s2 = consumed_set(json_array_get(devices, j), &e, &k);
                                if (j > i && (si < 0 || !s2 || strcmp(s2, set) != 0))
                                        break;
                                if (e > 1)
                                        break; /* reported when its run starts */
                                use += k;
                        }
                } else {
                        for (si = 0; placed[si]; si++)
                                ;
                        set = json_string_value(
                                json_object_get(json_array_get(sets, (size_t)si), "name"));
                }
                if (si >= 0)
                        cnt = json_object_size(
                                json_object_get(json_array_get(sets, (size_t)si), "counters"));
                size_t nd = j - i;
                if (nd > max || cnt > KDEV_DRA_SLICE_MAX_COUNTERS_INLINE ||
                    use > KDEV_DRA_SLICE_MAX_CONSUMED_COUNTERS) {
                        rc = kdev_err_set(err, E2BIG,
                                          "counter set %s: %zu devices and %zu counters do not "
                                          "fit in one ResourceSlice",
                                          set ? set : "?", nd, cnt);
                        goto out;
                }
                if (nc == 0 || cur_dev + nd > max ||
                    cur_cnt + cnt > KDEV_DRA_SLICE_MAX_COUNTERS_INLINE ||
                    cur_use + use > KDEV_DRA_SLICE_MAX_CONSUMED_COUNTERS) {
                        c[nc].d0 = c[nc].d1 = i;
                        c[nc].s0 = c[nc].s1 = no;
                        nc++;
                        cur_dev = cur_cnt = cur_use = 0;
                }
                c[nc - 1].d1 = j;
                if (si >= 0) {
                        placed[si] = 1;
                        ord[no++] = (size_t)si;
                        c[nc - 1].s1 = no;
                }
                cur_dev += nd;
                cur_cnt += cnt;
                cur_use += use;
                i = j;
        }
        if (nc == 0)
                nc = 1; /* no devices, no sets: one empty slice */
out:
        free(placed);
        if (rc < 0) {
                free(c);
                free(ord);
                return rc;
        }
        *chunks = c;
        *n_chunks = nc;
        *order = ord;
        return 0;
}

int kdev_dra_split(const struct kdev_dra_pool *pool, const json_t *devices, long long generation,
                   json_t **specs, struct kdev_err *err)
{
        *specs = NULL;
        if (!pool->node || !*pool->node)
                return kdev_err_set(err, EINVAL, "ResourceSlice pool: no node name");
        if (!json_is_array(devices))
                return kdev_err_set(err, EINVAL, "ResourceSlice pool: devices is not an array");
        const json_t *sets = pool->shared_counters;
        size_t n = json_array_size(devices), max = per_slice(pool);
        size_t n_sets = json_is_array(sets) ? json_array_size(sets) : 0;
        bool counters = n_sets > 0;
        for (size_t i = 0; i < n && !counters; i++)
                counters = json_object_get(json_array_get(devices, i), "consumesCounters");
        if (counters && max > KDEV_DRA_SLICE_MAX_DEVICES_COUNTERS)
                max = KDEV_DRA_SLICE_MAX_DEVICES_COUNTERS;

        struct chunk *chunks = NULL;
        size_t *order = NULL, n_chunks = 0, count, set_slices = 0, dev_slices;
        json_t *ordered = NULL;
        if (n_sets > 0 && !pool->counters_in_own_slice) {
                int rc = inline_layout(devices, sets, max, &chunks, &n_chunks, &order, err);
                if (rc < 0)
                        return rc;
                count = n_chunks;
                ordered = json_array();
                for (size_t i = 0; ordered && i < n_sets; i++)
                        if (json_array_append(ordered, json_array_get(sets, order[i])) < 0) {
                                json_decref(ordered);
                                ordered = NULL;
                        }
                free(order);
                if (!ordered) {
                        free(chunks);
                        return kdev_err_set(err, ENOMEM, "ResourceSlice pool: out of memory");
                }
        } else {
                if (n_sets > 0)
                        set_slices = (n_sets + KDEV_DRA_SLICE_MAX_COUNTER_SETS - 1) /
                                     KDEV_DRA_SLICE_MAX_COUNTER_SETS;
                dev_slices = (n + max - 1) / max;
                if (dev_slices == 0 && set_slices == 0)
                        dev_slices = 1;
                count = set_slices + dev_slices;
        }
        json_t *out = json_array();
        bool oom = !out;
        for (size_t s = 0; s < count && !oom; s++) {
                json_t *spec;
                if (chunks)
                        spec = slice_spec(pool, generation, count, devices, chunks[s].d0,
                                          chunks[s].d1, true, ordered, chunks[s].s0,
                                          chunks[s].s1);
                else if (s < set_slices)
                        spec = slice_spec(pool, generation, count, devices, 0, 0, false, sets,
                                          s * KDEV_DRA_SLICE_MAX_COUNTER_SETS,
                                          (s + 1) * KDEV_DRA_SLICE_MAX_COUNTER_SETS < n_sets
                                                  ? (s + 1) * KDEV_DRA_SLICE_MAX_COUNTER_SETS
                                                  : n_sets);
                else {
                        size_t d = s - set_slices;
                        spec = slice_spec(pool, generation, count, devices, d * max,
                                          (d + 1) * max < n ? (d + 1) * max : n, true, NULL, 0,
                                          0);
                }
                oom = !spec || json_array_append_new(out, spec) < 0;
        }
        free(chunks);
        json_decref(ordered);
        if (oom) {
                json_decref(out);
                return kdev_err_set(err, ENOMEM, "ResourceSlice pool: out of memory");
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
