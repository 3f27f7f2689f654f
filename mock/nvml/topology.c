/* Mock NVML: topology file loader (format in README.md). Strict: unknown keys
 * and bad values are errors with file:line:column. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <yaml.h>

#include "mock.h"

#include "common/file.h"

struct loader {
        const char *path;
        yaml_document_t doc;
        char *msg;
        size_t msg_size;
        struct mock_state *s;
};

static int fail(struct loader *l, const yaml_node_t *n, const char *fmt, ...)
        __attribute__((format(printf, 3, 4)));

static int fail(struct loader *l, const yaml_node_t *n, const char *fmt, ...)
{
        char text[512];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(text, sizeof(text), fmt, ap);
        va_end(ap);
        if (n)
                snprintf(l->msg, l->msg_size, "%s:%zu:%zu: %s", l->path, n->start_mark.line + 1,
                         n->start_mark.column + 1, text);
        else
                snprintf(l->msg, l->msg_size, "%s: %s", l->path, text);
        return -1;
}

static yaml_node_t *node(struct loader *l, int id)
{
        return yaml_document_get_node(&l->doc, id);
}

static yaml_node_t *map_get(struct loader *l, yaml_node_t *map, const char *key)
{
        if (!map || map->type != YAML_MAPPING_NODE)
                return NULL;
        for (yaml_node_pair_t *p = map->data.mapping.pairs.start; p < map->data.mapping.pairs.top;
             p++) {
                yaml_node_t *k = node(l, p->key);
                if (k && k->type == YAML_SCALAR_NODE &&
                    strcmp((const char *)k->data.scalar.value, key) == 0)
                        return node(l, p->value);
        }
        return NULL;
}

/* Every key of |map| must be in |keys| (NULL-terminated). */
static int check_keys(struct loader *l, yaml_node_t *map, const char *const *keys,
                      const char *what)
{
        if (!map || map->type != YAML_MAPPING_NODE)
                return fail(l, map, "%s must be a mapping", what);
        for (yaml_node_pair_t *p = map->data.mapping.pairs.start; p < map->data.mapping.pairs.top;
             p++) {
                yaml_node_t *k = node(l, p->key);
                if (!k || k->type != YAML_SCALAR_NODE)
                        return fail(l, k, "%s: keys must be scalars", what);
                bool ok = false;
                for (size_t i = 0; keys[i] && !ok; i++)
                        ok = strcmp((const char *)k->data.scalar.value, keys[i]) == 0;
                if (!ok)
                        return fail(l, k, "%s: unknown key \"%s\"", what,
                                    (const char *)k->data.scalar.value);
        }
        return 0;
}

static const char *scalar(yaml_node_t *n)
{
        return n && n->type == YAML_SCALAR_NODE ? (const char *)n->data.scalar.value : NULL;
}

static int get_str(struct loader *l, yaml_node_t *n, const char *key, char *out, size_t size)
{
        const char *v = scalar(n);
        if (!v)
                return fail(l, n, "%s must be a string", key);
        if (strlen(v) >= size)
                return fail(l, n, "%s is longer than %zu characters", key, size - 1);
        snprintf(out, size, "%s", v);
        return 0;
}

static int get_ull(struct loader *l, yaml_node_t *n, const char *key, unsigned long long max,
                   unsigned long long *out)
{
        const char *v = scalar(n);
        char *end = NULL;
        if (!v || !v[0] || v[0] == '-')
                return fail(l, n, "%s must be a non-negative integer", key);
        errno = 0;
        unsigned long long x = strtoull(v, &end, 0);
        if (errno || *end || x > max)
                return fail(l, n, "%s must be an integer from 0 to %llu", key, max);
        *out = x;
        return 0;
}

static int get_uint(struct loader *l, yaml_node_t *n, const char *key, unsigned max, unsigned *out)
{
        unsigned long long x;
        if (get_ull(l, n, key, max, &x) < 0)
                return -1;
        *out = (unsigned)x;
        return 0;
}

static int get_int(struct loader *l, yaml_node_t *n, const char *key, int *out)
{
        const char *v = scalar(n);
        char *end = NULL;
        if (!v || !v[0])
                return fail(l, n, "%s must be an integer", key);
        errno = 0;
        long x = strtol(v, &end, 0);
        if (errno || *end || x < -1000000 || x > 1000000)
                return fail(l, n, "%s must be an integer", key);
        *out = (int)x;
        return 0;
}

int mock_parse_return(const char *text, nvmlReturn_t *out)
{
        static const struct {
                const char *name;
                nvmlReturn_t code;
        } names[] = {
                { "SUCCESS", NVML_SUCCESS },
                { "UNINITIALIZED", NVML_ERROR_UNINITIALIZED },
                { "INVALID_ARGUMENT", NVML_ERROR_INVALID_ARGUMENT },
                { "NOT_SUPPORTED", NVML_ERROR_NOT_SUPPORTED },
                { "NO_PERMISSION", NVML_ERROR_NO_PERMISSION },
                { "ALREADY_INITIALIZED", NVML_ERROR_ALREADY_INITIALIZED },
                { "NOT_FOUND", NVML_ERROR_NOT_FOUND },
                { "INSUFFICIENT_SIZE", NVML_ERROR_INSUFFICIENT_SIZE },
                { "DRIVER_NOT_LOADED", NVML_ERROR_DRIVER_NOT_LOADED },
                { "TIMEOUT", NVML_ERROR_TIMEOUT },
                { "LIBRARY_NOT_FOUND", NVML_ERROR_LIBRARY_NOT_FOUND },
                { "GPU_IS_LOST", NVML_ERROR_GPU_IS_LOST },
                { "RESET_REQUIRED", NVML_ERROR_RESET_REQUIRED },
                { "LIB_RM_VERSION_MISMATCH", NVML_ERROR_LIB_RM_VERSION_MISMATCH },
                { "MEMORY", NVML_ERROR_MEMORY },
                { "NO_DATA", NVML_ERROR_NO_DATA },
                { "UNKNOWN", NVML_ERROR_UNKNOWN },
        };
        if (!text || !text[0])
                return -1;
        if (strncmp(text, "NVML_ERROR_", 11) == 0)
                text += 11;
        else if (strncmp(text, "NVML_", 5) == 0)
                text += 5;
        for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
                if (strcasecmp(text, names[i].name) == 0) {
                        *out = names[i].code;
                        return 0;
                }
        }
        char *end = NULL;
        errno = 0;
        long v = strtol(text, &end, 0);
        if (errno || *end || v < 0 || v > 999)
                return -1;
        *out = (nvmlReturn_t)v;
        return 0;
}

static int parse_bus_id(const char *text, nvmlPciInfo_t *pci)
{
        unsigned dom, bus, dev, fn;
        char tail;
        if (sscanf(text, "%x:%x:%x.%x%c", &dom, &bus, &dev, &fn, &tail) != 4 || bus > 0xff ||
            dev > 0x1f || fn > 7)
                return -1;
        pci->domain = dom;
        pci->bus = bus;
        pci->device = dev;
        snprintf(pci->busId, sizeof(pci->busId), "%08X:%02X:%02X.0", dom, bus, dev);
        snprintf(pci->busIdLegacy, sizeof(pci->busIdLegacy), "%04X:%02X:%02X.0", dom & 0xffff,
                 bus, dev);
        return strcmp(pci->busId, text) == 0 ? 0 : -1;
}

static const char *const gpu_keys[] = {
        "name", "uuid", "pci_bus_id", "pci_device_id", "pci_subsystem_id", "minor",
        "memory_mib", "memory_used_mib", "compute_capability", "architecture", "sm_count",
        "brand", "numa_node", "events", "nvlinks", "fail", "mig", "mig_profiles", "present",
        "lost", "reset_required", "pending_remap", NULL,
};

/* The value of |key| for a GPU: its own entry first, then defaults. */
static yaml_node_t *gpu_get(struct loader *l, yaml_node_t *g, yaml_node_t *defs, const char *key)
{
        yaml_node_t *v = map_get(l, g, key);
        return v ? v : map_get(l, defs, key);
}

static int load_profiles(struct loader *l, struct mock_gpu *gpu, yaml_node_t *seq)
{
        static const char *const keys[] = { "index", "id", "name", "slices", "instances", "sms",
                                            "copy_engines", "decoders", "encoders", "jpegs",
                                            "ofas", "memory_mib", "p2p", "placement_size",
                                            NULL };
        if (seq->type != YAML_SEQUENCE_NODE)
                return fail(l, seq, "mig_profiles must be a list");
        for (yaml_node_item_t *it = seq->data.sequence.items.start;
             it < seq->data.sequence.items.top; it++) {
                yaml_node_t *p = node(l, *it);
                if (check_keys(l, p, keys, "mig profile") < 0)
                        return -1;
                unsigned idx;
                yaml_node_t *v = map_get(l, p, "index");
                if (!v)
                        return fail(l, p, "mig profile: index is required");
                if (get_uint(l, v, "index", NVML_GPU_INSTANCE_PROFILE_COUNT - 1, &idx) < 0)
                        return -1;
                struct mock_profile *mp = &gpu->profiles[idx];
                if (mp->present)
                        return fail(l, v, "mig profile index %u repeated", idx);
                mp->present = true;
                nvmlGpuInstanceProfileInfo_t *in = &mp->info;
                struct {
                        const char *key;
                        unsigned *dst;
                        bool required;
                } fields[] = {
                        { "id", &in->id, true },
                        { "slices", &in->sliceCount, true },
                        { "instances", &in->instanceCount, true },
                        { "sms", &in->multiprocessorCount, true },
                        { "copy_engines", &in->copyEngineCount, false },
                        { "decoders", &in->decoderCount, false },
                        { "encoders", &in->encoderCount, false },
                        { "jpegs", &in->jpegCount, false },
                        { "ofas", &in->ofaCount, false },
                        { "p2p", &in->isP2pSupported, false },
                        { "placement_size", &mp->placement_size, false },
                };
                for (size_t i = 0; i < sizeof(fields) / sizeof(fields[0]); i++) {
                        v = map_get(l, p, fields[i].key);
                        if (!v) {
                                if (fields[i].required)
                                        return fail(l, p, "mig profile: %s is required",
                                                    fields[i].key);
                                continue;
                        }
                        if (get_uint(l, v, fields[i].key, 1000000, fields[i].dst) < 0)
                                return -1;
                }
                if (in->sliceCount == 0 || in->sliceCount > 8)
                        return fail(l, p, "mig profile: slices must be 1 to 8");
                if (mp->placement_size == 0)
                        mp->placement_size = in->sliceCount;
                v = map_get(l, p, "memory_mib");
                if (!v)
                        return fail(l, p, "mig profile: memory_mib is required");
                if (get_ull(l, v, "memory_mib", 1ULL << 30, &in->memorySizeMB) < 0)
                        return -1;
                v = map_get(l, p, "name");
                if (!v)
                        return fail(l, p, "mig profile: name is required");
                if (get_str(l, v, "name", mp->name, sizeof(mp->name)) < 0)
                        return -1;
        }
        return 0;
}

/* The compute-instance profile index whose slice count equals |slices|. */
static int full_ci_profile(unsigned slices)
{
        static const unsigned ci_slices[] = { 1, 2, 3, 4, 7, 8, 6 };
        for (unsigned i = 0; i < sizeof(ci_slices) / sizeof(ci_slices[0]); i++)
                if (ci_slices[i] == slices)
                        return (int)i;
        return -1;
}

static int load_mig(struct loader *l, struct mock_gpu *gpu, yaml_node_t *m)
{
        static const char *const keys[] = { "mode", "pending", "max_devices", "devices", NULL };
        static const char *const dkeys[] = { "uuid", "profile", "gi", "start", "ci",
                                             "ci_profile", "ci_start", "present", NULL };
        if (check_keys(l, m, keys, "mig") < 0)
                return -1;
        gpu->mig_capable = true;
        gpu->mig_max = 7;
        yaml_node_t *v;
        if ((v = map_get(l, m, "mode")) && get_uint(l, v, "mode", 1, &gpu->mig_mode) < 0)
                return -1;
        gpu->mig_pending = gpu->mig_mode;
        if ((v = map_get(l, m, "pending")) && get_uint(l, v, "pending", 1, &gpu->mig_pending) < 0)
                return -1;
        if ((v = map_get(l, m, "max_devices")) &&
            get_uint(l, v, "max_devices", MOCK_MAX_MIGS, &gpu->mig_max) < 0)
                return -1;
        yaml_node_t *devs = map_get(l, m, "devices");
        if (!devs)
                return 0;
        if (devs->type != YAML_SEQUENCE_NODE)
                return fail(l, devs, "mig.devices must be a list");
        if (gpu->mig_mode != 1 && devs->data.sequence.items.top > devs->data.sequence.items.start)
                return fail(l, devs, "mig.devices need mode: 1");
        for (yaml_node_item_t *it = devs->data.sequence.items.start;
             it < devs->data.sequence.items.top; it++) {
                yaml_node_t *d = node(l, *it);
                if (check_keys(l, d, dkeys, "mig device") < 0)
                        return -1;
                if (gpu->n_migs >= gpu->mig_max)
                        return fail(l, d, "more MIG devices than max_devices (%u)", gpu->mig_max);
                struct mock_mig *mig = &gpu->migs[gpu->n_migs];
                unsigned prof = 0, gi_id = 0, start = 0, ci_id = 0, ci_start = 0;
                if (!(v = map_get(l, d, "uuid")) ||
                    get_str(l, v, "uuid", mig->uuid, sizeof(mig->uuid)) < 0)
                        return v ? -1 : fail(l, d, "mig device: uuid is required");
                if (!(v = map_get(l, d, "profile")) ||
                    get_uint(l, v, "profile", NVML_GPU_INSTANCE_PROFILE_COUNT - 1, &prof) < 0)
                        return v ? -1 : fail(l, d, "mig device: profile is required");
                if (!gpu->profiles[prof].present)
                        return fail(l, v, "mig device: profile index %u is not in mig_profiles",
                                    prof);
                if (!(v = map_get(l, d, "gi")) || get_uint(l, v, "gi", 1000, &gi_id) < 0)
                        return v ? -1 : fail(l, d, "mig device: gi is required");
                if ((v = map_get(l, d, "start")) && get_uint(l, v, "start", 7, &start) < 0)
                        return -1;
                if ((v = map_get(l, d, "ci")) && get_uint(l, v, "ci", 1000, &ci_id) < 0)
                        return -1;
                unsigned g_slices = gpu->profiles[prof].info.sliceCount;
                int cip = full_ci_profile(g_slices);
                if ((v = map_get(l, d, "ci_profile"))) {
                        unsigned x;
                        if (get_uint(l, v, "ci_profile", NVML_COMPUTE_INSTANCE_PROFILE_COUNT - 1,
                                     &x) < 0)
                                return -1;
                        cip = (int)x;
                }
                if (cip < 0)
                        return fail(l, d, "mig device: no compute instance profile");
                if ((v = map_get(l, d, "ci_start")) &&
                    get_uint(l, v, "ci_start", 7, &ci_start) < 0)
                        return -1;
                struct nvmlGpuInstance_st *gi = NULL;
                for (size_t k = 0; k < gpu->n_gis; k++)
                        if (gpu->gis[k].id == gi_id)
                                gi = &gpu->gis[k];
                if (gi && (gi->profile != prof || gi->start != start))
                        return fail(l, d, "mig device: GPU instance %u has another profile or "
                                          "start", gi_id);
                if (!gi) {
                        gi = &gpu->gis[gpu->n_gis++];
                        gi->gpu = gpu;
                        gi->used = true;
                        gi->id = gi_id;
                        gi->profile = prof;
                        gi->start = start;
                        gi->size = gpu->profiles[prof].placement_size;
                }
                for (size_t k = 0; k < gpu->n_migs; k++)
                        if (gpu->migs[k].gi == gi && gpu->migs[k].ci.id == ci_id)
                                return fail(l, d, "mig device: GI %u CI %u repeated", gi_id,
                                            ci_id);
                mig->used = true;
                mig->gi = gi;
                mig->ci.gi = gi;
                mig->ci.id = ci_id;
                mig->ci.profile = (unsigned)cip;
                mig->ci.start = ci_start;
                unsigned present = 1;
                if ((v = map_get(l, d, "present")) && get_uint(l, v, "present", 1, &present) < 0)
                        return -1;
                mig->hidden = present == 0;
                gpu->n_migs++;
        }
        return 0;
}

static int load_gpu(struct loader *l, struct mock_gpu *gpu, yaml_node_t *g, yaml_node_t *defs)
{
        if (check_keys(l, g, gpu_keys, "gpu") < 0)
                return -1;
        yaml_node_t *v;
        gpu->handle.gpu = gpu;
        gpu->numa_node = -1;
        gpu->events = MOCK_DEFAULT_EVENTS;
        gpu->minor = gpu->index;
        gpu->arch = NVML_DEVICE_ARCH_UNKNOWN;
        if (!(v = gpu_get(l, g, defs, "name")) || get_str(l, v, "name", gpu->name,
                                                           sizeof(gpu->name)) < 0)
                return v ? -1 : fail(l, g, "gpu: name is required");
        if (!(v = map_get(l, g, "uuid")) || get_str(l, v, "uuid", gpu->uuid,
                                                      sizeof(gpu->uuid)) < 0)
                return v ? -1 : fail(l, g, "gpu: uuid is required");
        if (!(v = map_get(l, g, "pci_bus_id")))
                return fail(l, g, "gpu: pci_bus_id is required");
        if (!scalar(v) || parse_bus_id(scalar(v), &gpu->pci) < 0)
                return fail(l, v, "pci_bus_id must look like 00000000:3B:00.0");
        if ((v = gpu_get(l, g, defs, "pci_device_id")) &&
            get_uint(l, v, "pci_device_id", 0xffffffffu, &gpu->pci.pciDeviceId) < 0)
                return -1;
        if ((v = gpu_get(l, g, defs, "pci_subsystem_id")) &&
            get_uint(l, v, "pci_subsystem_id", 0xffffffffu, &gpu->pci.pciSubSystemId) < 0)
                return -1;
        if ((v = map_get(l, g, "minor")) && get_uint(l, v, "minor", 255, &gpu->minor) < 0)
                return -1;
        unsigned long long mib = 0;
        if (!(v = gpu_get(l, g, defs, "memory_mib")) ||
            get_ull(l, v, "memory_mib", 1ULL << 30, &mib) < 0)
                return v ? -1 : fail(l, g, "gpu: memory_mib is required");
        gpu->mem_total = mib << 20;
        mib = 0;
        if ((v = gpu_get(l, g, defs, "memory_used_mib")) &&
            get_ull(l, v, "memory_used_mib", 1ULL << 30, &mib) < 0)
                return -1;
        gpu->mem_used = mib << 20;
        if (gpu->mem_used > gpu->mem_total)
                return fail(l, v, "memory_used_mib exceeds memory_mib");
        if (!(v = gpu_get(l, g, defs, "compute_capability")))
                return fail(l, g, "gpu: compute_capability is required");
        char tail;
        if (!scalar(v) || sscanf(scalar(v), "%d.%d%c", &gpu->cc_major, &gpu->cc_minor, &tail) != 2)
                return fail(l, v, "compute_capability must look like 9.0");
        if ((v = gpu_get(l, g, defs, "architecture"))) {
                static const char *const archs[] = { "kepler", "maxwell", "pascal",
                                                     "volta", "turing", "ampere",
                                                     "ada", "hopper", "blackwell" };
                const char *a = scalar(v);
                bool ok = false;
                for (unsigned i = 0; a && i < sizeof(archs) / sizeof(archs[0]); i++) {
                        if (strcmp(a, archs[i]) == 0) {
                                gpu->arch = NVML_DEVICE_ARCH_KEPLER + i;
                                ok = true;
                        }
                }
                if (!ok)
                        return fail(l, v, "architecture must be one of kepler, maxwell, pascal, "
                                          "volta, turing, ampere, ada, hopper, blackwell");
        }
        if ((v = gpu_get(l, g, defs, "sm_count")) &&
            get_uint(l, v, "sm_count", 100000, &gpu->sm_count) < 0)
                return -1;
        gpu->brand = NVML_BRAND_NVIDIA;
        if ((v = gpu_get(l, g, defs, "brand"))) {
                /* nvmlBrandType_t order (NVML_BRAND_UNKNOWN = 0 ...) */
                static const char *const brands[] = {
                        "unknown",    "quadro",     "tesla",      "nvs",
                        "grid",       "geforce",    "titan",      "nvidia_vapps",
                        "nvidia_vpc", "nvidia_vcs", "nvidia_vws", "nvidia_cloud_gaming",
                        "quadro_rtx", "nvidia_rtx", "nvidia",     "geforce_rtx",
                        "titan_rtx",
                };
                const char *b = scalar(v);
                bool ok = false;
                for (unsigned i = 0; b && i < sizeof(brands) / sizeof(brands[0]); i++) {
                        if (strcmp(b, brands[i]) == 0) {
                                gpu->brand = i;
                                ok = true;
                        }
                }
                if (!ok)
                        return fail(l, v, "brand must be one of unknown, quadro, tesla, nvs, "
                                          "grid, geforce, titan, nvidia_vapps, nvidia_vpc, "
                                          "nvidia_vcs, nvidia_vws, nvidia_cloud_gaming, "
                                          "quadro_rtx, nvidia_rtx, nvidia, geforce_rtx, "
                                          "titan_rtx");
        }
        if ((v = gpu_get(l, g, defs, "numa_node")) && get_int(l, v, "numa_node",
                                                              &gpu->numa_node) < 0)
                return -1;
        /* present at start (1) or added at run time (0); faults from the start */
        unsigned present = 1, lost = 0, reset = 0, remap = 0;
        if (((v = map_get(l, g, "present")) && get_uint(l, v, "present", 1, &present) < 0) ||
            ((v = map_get(l, g, "lost")) && get_uint(l, v, "lost", 1, &lost) < 0) ||
            ((v = map_get(l, g, "reset_required")) &&
             get_uint(l, v, "reset_required", 1, &reset) < 0) ||
            ((v = map_get(l, g, "pending_remap")) &&
             get_uint(l, v, "pending_remap", 1, &remap) < 0))
                return -1;
        gpu->hidden = present == 0;
        gpu->lost = lost != 0;
        gpu->reset_required = reset != 0;
        gpu->remap_pending = remap != 0;
        if ((v = gpu_get(l, g, defs, "events")) &&
            get_ull(l, v, "events", 0xffffffffffffffffULL, &gpu->events) < 0)
                return -1;
        if ((v = gpu_get(l, g, defs, "nvlinks")) &&
            get_uint(l, v, "nvlinks", NVML_NVLINK_MAX_LINKS, &gpu->n_nvlinks) < 0)
                return -1;
        if ((v = gpu_get(l, g, defs, "fail"))) {
                if (v->type != YAML_MAPPING_NODE)
                        return fail(l, v, "fail must be a mapping of function: code");
                for (yaml_node_pair_t *p = v->data.mapping.pairs.start;
                     p < v->data.mapping.pairs.top; p++) {
                        const char *fn = scalar(node(l, p->key));
                        yaml_node_t *cv = node(l, p->value);
                        if (!fn || strncmp(fn, "nvml", 4) != 0 || strlen(fn) >= 64)
                                return fail(l, node(l, p->key), "fail: bad function name");
                        if (gpu->n_fails >= MOCK_MAX_FAILS)
                                return fail(l, cv, "fail: too many entries");
                        struct mock_fail *f = &gpu->fails[gpu->n_fails++];
                        snprintf(f->function, sizeof(f->function), "%s", fn);
                        if (mock_parse_return(scalar(cv), &f->code) < 0)
                                return fail(l, cv, "fail: unknown NVML return code");
                }
        }
        if ((v = gpu_get(l, g, defs, "mig_profiles")) && load_profiles(l, gpu, v) < 0)
                return -1;
        v = gpu_get(l, g, defs, "mig");
        if (v && !(scalar(v) && strcmp(scalar(v), "none") == 0) && load_mig(l, gpu, v) < 0)
                return -1;
        return 0;
}

static int level_from_name(const char *s, nvmlGpuTopologyLevel_t *out)
{
        static const struct {
                const char *name;
                nvmlGpuTopologyLevel_t level;
        } levels[] = {
                { "INTERNAL", NVML_TOPOLOGY_INTERNAL }, { "SINGLE", NVML_TOPOLOGY_SINGLE },
                { "MULTIPLE", NVML_TOPOLOGY_MULTIPLE }, { "HOSTBRIDGE", NVML_TOPOLOGY_HOSTBRIDGE },
                { "NODE", NVML_TOPOLOGY_NODE },         { "SYSTEM", NVML_TOPOLOGY_SYSTEM },
        };
        for (size_t i = 0; s && i < sizeof(levels) / sizeof(levels[0]); i++) {
                if (strcmp(s, levels[i].name) == 0) {
                        *out = levels[i].level;
                        return 0;
                }
        }
        return -1;
}

/* Reads "gpus: [i, j, ...]" of a links entry into |idx|. */
static int group_gpus(struct loader *l, yaml_node_t *e, unsigned *idx, size_t *n)
{
        yaml_node_t *gs = map_get(l, e, "gpus");
        if (!gs || gs->type != YAML_SEQUENCE_NODE)
                return fail(l, e, "links entry: gpus must be a list of GPU indices");
        *n = 0;
        for (yaml_node_item_t *it = gs->data.sequence.items.start;
             it < gs->data.sequence.items.top; it++) {
                yaml_node_t *x = node(l, *it);
                if (*n >= MOCK_MAX_GPUS)
                        return fail(l, x, "too many GPUs");
                if (get_uint(l, x, "gpu index", (unsigned)l->s->n_gpus - 1, &idx[*n]) < 0)
                        return -1;
                for (size_t k = 0; k < *n; k++)
                        if (idx[k] == idx[*n])
                                return fail(l, x, "GPU %u repeated", idx[*n]);
                (*n)++;
        }
        return 0;
}

static int add_link(struct loader *l, yaml_node_t *at, struct mock_gpu *g,
                    const nvmlPciInfo_t *remote)
{
        if (g->next_link >= g->n_nvlinks)
                return fail(l, at, "GPU %u has only %u NVLinks", g->index, g->n_nvlinks);
        g->links[g->next_link].connected = true;
        g->links[g->next_link].remote = *remote;
        g->next_link++;
        return 0;
}

static int load_links(struct loader *l, yaml_node_t *links)
{
        static const char *const keys[] = { "levels", "nvlink", "nvswitches", "nvswitch_links",
                                            NULL };
        static const char *const lkeys[] = { "gpus", "level", NULL };
        static const char *const nkeys[] = { "gpus", "links", NULL };
        struct mock_state *s = l->s;
        size_t n = s->n_gpus;
        unsigned idx[MOCK_MAX_GPUS];
        size_t cnt;
        if (check_keys(l, links, keys, "links") < 0)
                return -1;
        if (n == 0)
                return fail(l, links, "links need at least one GPU");
        yaml_node_t *seq = map_get(l, links, "levels");
        if (seq) {
                if (seq->type != YAML_SEQUENCE_NODE)
                        return fail(l, seq, "links.levels must be a list");
                for (yaml_node_item_t *it = seq->data.sequence.items.start;
                     it < seq->data.sequence.items.top; it++) {
                        yaml_node_t *e = node(l, *it);
                        if (check_keys(l, e, lkeys, "links.levels entry") < 0 ||
                            group_gpus(l, e, idx, &cnt) < 0)
                                return -1;
                        nvmlGpuTopologyLevel_t lv;
                        yaml_node_t *lvn = map_get(l, e, "level");
                        if (level_from_name(scalar(lvn), &lv) < 0)
                                return fail(l, lvn ? lvn : e, "level must be one of INTERNAL, "
                                                              "SINGLE, MULTIPLE, HOSTBRIDGE, "
                                                              "NODE, SYSTEM");
                        for (size_t a = 0; a < cnt; a++)
                                for (size_t b = 0; b < cnt; b++)
                                        if (a != b)
                                                s->levels[idx[a] * n + idx[b]] = lv;
                }
        }
        seq = map_get(l, links, "nvlink");
        if (seq) {
                if (seq->type != YAML_SEQUENCE_NODE)
                        return fail(l, seq, "links.nvlink must be a list");
                for (yaml_node_item_t *it = seq->data.sequence.items.start;
                     it < seq->data.sequence.items.top; it++) {
                        yaml_node_t *e = node(l, *it);
                        unsigned per = 0;
                        yaml_node_t *pn = map_get(l, e, "links");
                        if (check_keys(l, e, nkeys, "links.nvlink entry") < 0 ||
                            group_gpus(l, e, idx, &cnt) < 0)
                                return -1;
                        if (!pn)
                                return fail(l, e, "links.nvlink entry: links is required");
                        if (get_uint(l, pn, "links", NVML_NVLINK_MAX_LINKS, &per) < 0)
                                return -1;
                        for (size_t a = 0; a < cnt; a++) {
                                for (size_t b = a + 1; b < cnt; b++) {
                                        struct mock_gpu *ga = &s->gpus[idx[a]];
                                        struct mock_gpu *gb = &s->gpus[idx[b]];
                                        for (unsigned k = 0; k < per; k++) {
                                                if (add_link(l, e, ga, &gb->pci) < 0 ||
                                                    add_link(l, e, gb, &ga->pci) < 0)
                                                        return -1;
                                        }
                                }
                        }
                }
        }
        seq = map_get(l, links, "nvswitches");
        yaml_node_t *per_node = map_get(l, links, "nvswitch_links");
        if (!seq != !per_node)
                return fail(l, links, "links: nvswitches and nvswitch_links go together");
        if (seq) {
                nvmlPciInfo_t sw[16];
                size_t n_sw = 0;
                unsigned per = 0;
                if (seq->type != YAML_SEQUENCE_NODE)
                        return fail(l, seq, "links.nvswitches must be a list of PCI bus ids");
                for (yaml_node_item_t *it = seq->data.sequence.items.start;
                     it < seq->data.sequence.items.top; it++) {
                        yaml_node_t *x = node(l, *it);
                        if (n_sw >= 16)
                                return fail(l, x, "at most 16 NVSwitches");
                        memset(&sw[n_sw], 0, sizeof(sw[n_sw]));
                        if (!scalar(x) || parse_bus_id(scalar(x), &sw[n_sw]) < 0)
                                return fail(l, x, "NVSwitch bus id must look like "
                                                  "00000000:C4:00.0");
                        n_sw++;
                }
                if (n_sw == 0)
                        return fail(l, seq, "links.nvswitches is empty");
                if (get_uint(l, per_node, "nvswitch_links", NVML_NVLINK_MAX_LINKS, &per) < 0)
                        return -1;
                for (size_t g = 0; g < n; g++)
                        for (unsigned k = 0; k < per; k++)
                                if (add_link(l, per_node, &s->gpus[g], &sw[k % n_sw]) < 0)
                                        return -1;
        }
        return 0;
}

static int load_doc(struct loader *l)
{
        static const char *const keys[] = { "driver_version", "cuda_driver_version", "defaults",
                                            "gpus", "links", NULL };
        yaml_node_t *root = yaml_document_get_root_node(&l->doc);
        if (!root)
                return fail(l, NULL, "empty document");
        if (check_keys(l, root, keys, "topology") < 0)
                return -1;
        struct mock_state *s = l->s;
        snprintf(s->driver_version, sizeof(s->driver_version), "550.90.07");
        s->cuda_version = 12040;
        yaml_node_t *v;
        if ((v = map_get(l, root, "driver_version")) &&
            get_str(l, v, "driver_version", s->driver_version, sizeof(s->driver_version)) < 0)
                return -1;
        if ((v = map_get(l, root, "cuda_driver_version")) &&
            get_int(l, v, "cuda_driver_version", &s->cuda_version) < 0)
                return -1;
        yaml_node_t *defs = map_get(l, root, "defaults");
        if (defs && check_keys(l, defs, gpu_keys, "defaults") < 0)
                return -1;
        yaml_node_t *gpus = map_get(l, root, "gpus");
        if (!gpus || gpus->type != YAML_SEQUENCE_NODE)
                return fail(l, gpus ? gpus : root, "gpus must be a list");
        size_t n = (size_t)(gpus->data.sequence.items.top - gpus->data.sequence.items.start);
        if (n > MOCK_MAX_GPUS)
                return fail(l, gpus, "at most %d GPUs", MOCK_MAX_GPUS);
        s->gpus = calloc(n ? n : 1, sizeof(*s->gpus));
        s->levels = calloc(n ? n * n : 1, sizeof(*s->levels));
        if (!s->gpus || !s->levels)
                return fail(l, NULL, "out of memory");
        for (size_t i = 0; i < n * n; i++)
                s->levels[i] = NVML_TOPOLOGY_SYSTEM;
        for (size_t i = 0; i < n; i++) {
                struct mock_gpu *g = &s->gpus[i];
                g->index = (unsigned)i;
                if (load_gpu(l, g, node(l, gpus->data.sequence.items.start[i]), defs) < 0)
                        return -1;
                s->n_gpus++;
                for (size_t k = 0; k < i; k++) {
                        if (strcmp(s->gpus[k].uuid, g->uuid) == 0)
                                return fail(l, node(l, gpus->data.sequence.items.start[i]),
                                            "uuid %s repeated", g->uuid);
                        if (strcmp(s->gpus[k].pci.busId, g->pci.busId) == 0)
                                return fail(l, node(l, gpus->data.sequence.items.start[i]),
                                            "pci_bus_id %s repeated", g->pci.busId);
                }
        }
        if ((v = map_get(l, root, "links")) && load_links(l, v) < 0)
                return -1;
        /* Fix the handles' back pointers (the array no longer moves). */
        for (size_t i = 0; i < n; i++) {
                struct mock_gpu *g = &s->gpus[i];
                g->handle.gpu = g;
                g->handle.mig = NULL;
                for (size_t k = 0; k < g->n_gis; k++)
                        g->gis[k].gpu = g;
                for (size_t k = 0; k < g->n_migs; k++) {
                        g->migs[k].handle.gpu = g;
                        g->migs[k].handle.mig = &g->migs[k];
                }
        }
        return 0;
}

struct mock_state *mock_topology_load(const char *path, char *msg, size_t msg_size)
{
        struct loader l = { .path = path, .msg = msg, .msg_size = msg_size };
        msg[0] = '\0';
        /* stat before the read: a change in between is seen by the next
         * poll (mock_nvml.c compares size and mtime) and loaded again */
        struct stat st;
        if (stat(path, &st) < 0) {
                snprintf(msg, msg_size, "%s: cannot read: %s", path, strerror(errno));
                return NULL;
        }
        char *text;
        size_t len;
        struct kdev_err err = {0};
        if (kdev_file_read(path, "topology file", MOCK_TOPOLOGY_FILE_MAX, KDEV_FILE_TEXT, &text,
                           &len, &err) < 0) {
                snprintf(msg, msg_size, "%s", err.msg);
                return NULL;
        }
        yaml_parser_t parser;
        yaml_parser_initialize(&parser);
        yaml_parser_set_input_string(&parser, (const unsigned char *)text, len);
        if (!yaml_parser_load(&parser, &l.doc)) {
                snprintf(msg, msg_size, "%s:%zu:%zu: %s", path, parser.problem_mark.line + 1,
                         parser.problem_mark.column + 1,
                         parser.problem ? parser.problem : "YAML error");
                yaml_parser_delete(&parser);
                free(text);
                return NULL;
        }
        yaml_parser_delete(&parser);
        free(text);
        l.s = calloc(1, sizeof(*l.s));
        int rc = l.s ? load_doc(&l) : fail(&l, NULL, "out of memory");
        yaml_document_delete(&l.doc);
        if (rc < 0) {
                mock_state_free(l.s);
                return NULL;
        }
        snprintf(l.s->path, sizeof(l.s->path), "%s", path);
        l.s->mtime = st.st_mtim;
        l.s->size = (long long)st.st_size;
        return l.s;
}

void mock_state_free(struct mock_state *s)
{
        if (!s)
                return;
        free(s->gpus);
        free(s->levels);
        free(s);
}
