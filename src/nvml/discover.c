/* NVML discovery: see discover.h. */
#include "nvml/discover.h"

#include "common/file.h"

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

struct ctx {
        struct kdev_nvml *lib;
        const struct kdev_nvml_api *api;
        struct kdev_gpu_set *set;
        nvmlDevice_t *handles;    /* per kept GPU */
        const char *sysfs_root;
        unsigned flags;           /* KDEV_NVML_DISCOVER_* */
        struct kdev_err *err;
};

static bool is_fault(nvmlReturn_t r)
{
        return r == NVML_ERROR_GPU_IS_LOST || r == NVML_ERROR_RESET_REQUIRED;
}

/* Sorts the answer |r| of an NVML call on GPU |g| that must succeed: 0 when
 * it did; 1 when the GPU faulted (lost, reset required: recorded in
 * g->fault, and the reader stops, keeping what it read); otherwise the error
 * of kdev_nvml_fail() with the formatted context ("GPU 3: nvmlX: <string>"). */
static int gpu_call(struct ctx *c, struct kdev_gpu *g, nvmlReturn_t r, const char *fmt, ...)
        __attribute__((format(printf, 4, 5)));
static int gpu_call(struct ctx *c, struct kdev_gpu *g, nvmlReturn_t r, const char *fmt, ...)
{
        if (r == NVML_SUCCESS)
                return 0;
        if (is_fault(r)) {
                g->fault = r;
                return 1;
        }
        char what[160];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(what, sizeof(what), fmt, ap);
        va_end(ap);
        return kdev_nvml_fail(c->lib, r, c->err, "%s", what);
}

/* In a reader of GPU |g| (context |c|) that returns int: a call that must
 * succeed (gpu_call), returning 0 from the reader when the GPU faulted and
 * the error when the call failed otherwise. */
#define GPU_CALL(r, ...)                                                                       \
        do {                                                                                   \
                int rc_ = gpu_call(c, g, (r), __VA_ARGS__);                                    \
                if (rc_ != 0)                                                                  \
                        return rc_ < 0 ? rc_ : 0;                                              \
        } while (0)

/* In such a reader: a call whose other errors are tolerated still stops at a
 * fault (recorded in g->fault, the reader returns 0). */
#define STOP_ON_FAULT(r)                                                                       \
        do {                                                                                   \
                nvmlReturn_t f_ = (r);                                                         \
                if (is_fault(f_)) {                                                            \
                        g->fault = f_;                                                         \
                        return 0;                                                              \
                }                                                                              \
        } while (0)

/* GPUs that go-nvlib leaves out (go-nvlib pkg/nvlib/device/api.go). */
static bool is_display_gpu(const char *name)
{
        return strcmp(name, "DGX Display") == 0 || strcmp(name, "NVIDIA DGX Display") == 0;
}

const char *kdev_nvml_family(int major, int minor)
{
        switch (major) {
        case 1: return "tesla";
        case 2: return "fermi";
        case 3: return "kepler";
        case 5: return "maxwell";
        case 6: return "pascal";
        case 7: return minor < 5 ? "volta" : "turing";
        case 8: return minor < 9 ? "ampere" : "ada-lovelace";
        case 9: return "hopper";
        case 10:
        case 12: return "blackwell";
        case 13: return "rubin";
        default: return "undefined";
        }
}

const char *kdev_nvml_brand_name(nvmlBrandType_t brand)
{
        static const char *const names[] = {
                "Unknown",     "Quadro",    "Tesla",     "NVS",
                "Grid",        "GeForce",   "Titan",     "NvidiaVApps",
                "NvidiaVPC",   "NvidiaVCS", "NvidiaVWS", "NvidiaCloudGaming",
                "QuadroRTX",   "NvidiaRTX", "Nvidia",    "GeForceRTX",
                "TitanRTX",
        };
        if (brand >= sizeof(names) / sizeof(names[0]))
                return NULL;
        return names[brand];
}

const char *kdev_nvml_level_name(nvmlGpuTopologyLevel_t level)
{
        switch (level) {
        case NVML_TOPOLOGY_INTERNAL: return "INTERNAL";
        case NVML_TOPOLOGY_SINGLE: return "SINGLE";
        case NVML_TOPOLOGY_MULTIPLE: return "MULTIPLE";
        case NVML_TOPOLOGY_HOSTBRIDGE: return "HOSTBRIDGE";
        case NVML_TOPOLOGY_NODE: return "NODE";
        case NVML_TOPOLOGY_SYSTEM: return "SYSTEM";
        }
        return NULL;
}

int kdev_nvml_sysfs_bus_id(const char *bus_id, char *out, size_t size)
{
        size_t n = strnlen(bus_id, KDEV_GPU_BUS_ID_MAX);
        if (n < 5 || n - 4 >= size)
                return -EINVAL;
        for (size_t i = 4; i < n; i++)
                out[i - 4] = (char)tolower((unsigned char)bus_id[i]);
        out[n - 4] = '\0';
        return 0;
}

int kdev_nvml_numa_node(const char *sysfs_root, const char *sysfs_bus_id, int *node,
                        struct kdev_err *err)
{
        char path[PATH_MAX];
        if (!sysfs_root || !sysfs_root[0])
                sysfs_root = "/sys";
        *node = -1;
        snprintf(path, sizeof(path), "%s/bus/pci/devices/%s/numa_node", sysfs_root,
                 sysfs_bus_id);
        char *buf;
        size_t n;
        /* missing (no such device, no NUMA) or unreadable: no node */
        if (kdev_file_read(path, "sysfs attribute", KDEV_FILE_SYSFS_ATTR_MAX, 0, &buf, &n, NULL) <
            0)
                return 0;
        while (n > 0 && isspace((unsigned char)buf[n - 1]))
                buf[--n] = '\0';
        char *end = NULL;
        errno = 0;
        long v = strtol(buf, &end, 10);
        int rc = 0;
        if (n == 0 || errno || (size_t)(end - buf) != n || v > INT_MAX || v < INT_MIN)
                rc = kdev_err_set(err, EINVAL, "%s: cannot parse NUMA node \"%.64s\"", path, buf);
        else
                *node = v < 0 ? -1 : (int)v;
        free(buf);
        return rc;
}

static bool bdf_ok(const char *s)
{
        /* dddd:bb:dd.f, lower-case hex */
        static const char pat[] = "xxxx:xx:xx.x";
        if (strlen(s) != sizeof(pat) - 1)
                return false;
        for (size_t i = 0; pat[i]; i++) {
                bool hex = (s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f');
                if (pat[i] == 'x' ? !hex : s[i] != pat[i])
                        return false;
        }
        return true;
}

/* Resolves "." and ".." of the absolute path |p| in place, by name (as Go's
 * filepath.Clean), and drops repeated '/'. */
static void clean_path(char *p)
{
        char *out = p, *in = p;
        while (*in) {
                while (*in == '/')
                        in++;
                char *seg = in;
                while (*in && *in != '/')
                        in++;
                size_t len = (size_t)(in - seg);
                if (len == 0 || (len == 1 && seg[0] == '.'))
                        continue;
                if (len == 2 && seg[0] == '.' && seg[1] == '.') {
                        while (out > p && *--out != '/')
                                ;
                        continue;
                }
                *out++ = '/';
                memmove(out, seg, len);
                out += len;
        }
        if (out == p)
                *out++ = '/';
        *out = '\0';
}

int kdev_nvml_pcie_root(const char *sysfs_root, const char *sysfs_bus_id, char *buf, size_t size,
                        struct kdev_err *err)
{
        char link[PATH_MAX], target[PATH_MAX], full[2 * PATH_MAX + 2], devs[PATH_MAX];
        if (!sysfs_root || !sysfs_root[0])
                sysfs_root = "/sys";
        if (!sysfs_bus_id || !bdf_ok(sysfs_bus_id))
                return kdev_err_set(err, EINVAL, "invalid PCI bus ID format: %s",
                                    sysfs_bus_id ? sysfs_bus_id : "");
        snprintf(link, sizeof(link), "%s/bus/pci/devices/%s", sysfs_root, sysfs_bus_id);
        ssize_t n = readlink(link, target, sizeof(target) - 1);
        if (n < 0)
                return kdev_err_set(err, EINVAL, "%s: not a link: %s", link, strerror(errno));
        target[n] = '\0';
        if (target[0] == '/')
                snprintf(full, sizeof(full), "%s", target);
        else
                snprintf(full, sizeof(full), "%s/bus/pci/devices/%s", sysfs_root, target);
        clean_path(full);
        snprintf(devs, sizeof(devs), "%s/devices/", sysfs_root);
        clean_path(devs);
        size_t dl = strlen(devs);
        if (dl == 0 || devs[dl - 1] != '/')
                devs[dl++] = '/', devs[dl] = '\0';
        if (strncmp(full, devs, dl) != 0 || strncmp(full + dl, "pci", 3) != 0)
                return kdev_err_set(err, EINVAL, "%s: target %s is not under %spci", link, full,
                                    devs);
        const char *base = strrchr(full, '/');
        if (strcmp(base + 1, sysfs_bus_id) != 0)
                return kdev_err_set(err, EINVAL, "%s: target %s does not end in %s", link, full,
                                    sysfs_bus_id);
        const char *root = full + dl;
        size_t rl = strcspn(root, "/");
        if (rl + 1 > size)
                return kdev_err_set(err, ENAMETOOLONG, "%s: PCIe root name too long", link);
        memcpy(buf, root, rl);
        buf[rl] = '\0';
        return 0;
}

static void fill_bus_id(nvmlPciInfo_t *pci)
{
        /* Older entry points (nvmlDeviceGetPciInfo v1) leave busId empty. */
        if (pci->busId[0] == '\0')
                snprintf(pci->busId, sizeof(pci->busId), "%08X:%02X:%02X.0", pci->domain,
                         pci->bus, pci->device);
        pci->busId[sizeof(pci->busId) - 1] = '\0';
}

/* Reads the MIG devices of GPU |g| (MIG enabled). */
static int read_migs(struct ctx *c, struct kdev_gpu *g, nvmlDevice_t dev)
{
        const struct kdev_nvml_api *api = c->api;
        unsigned max = 0;
        nvmlReturn_t r = api->nvmlDeviceGetMaxMigDeviceCount(dev, &max);
        GPU_CALL(r, "GPU %u: nvmlDeviceGetMaxMigDeviceCount", g->index);
        g->mig_max = max;
        if (max == 0)
                return 0;
        g->migs = calloc(max, sizeof(*g->migs));
        if (!g->migs)
                return kdev_err_set(c->err, ENOMEM, "out of memory");
        for (unsigned j = 0; j < max; j++) {
                nvmlDevice_t mig = NULL;
                r = api->nvmlDeviceGetMigDeviceHandleByIndex(dev, j, &mig);
                if (r == NVML_ERROR_NOT_FOUND || r == NVML_ERROR_INVALID_ARGUMENT)
                        continue;
                GPU_CALL(r, "GPU %u: nvmlDeviceGetMigDeviceHandleByIndex(%u)", g->index, j);
                struct kdev_mig_device *m = &g->migs[g->n_migs];
                m->index = j;
#define MIGCALL(call, name) GPU_CALL((call), "GPU %u MIG device %u: %s", g->index, j, (name))
                MIGCALL(api->nvmlDeviceGetUUID(mig, m->uuid, sizeof(m->uuid)),
                        "nvmlDeviceGetUUID");
                MIGCALL(api->nvmlDeviceGetName(mig, m->name, sizeof(m->name)),
                        "nvmlDeviceGetName");
                MIGCALL(api->nvmlDeviceGetGpuInstanceId(mig, &m->gi_id),
                        "nvmlDeviceGetGpuInstanceId");
                MIGCALL(api->nvmlDeviceGetComputeInstanceId(mig, &m->ci_id),
                        "nvmlDeviceGetComputeInstanceId");
                MIGCALL(api->nvmlDeviceGetAttributes(mig, &m->attributes),
                        "nvmlDeviceGetAttributes");
                nvmlMemory_t mem = { 0 };
                m->memory_ret = api->nvmlDeviceGetMemoryInfo(mig, &mem);
                m->memory_total = m->memory_ret == NVML_SUCCESS ? mem.total : 0;

                nvmlGpuInstance_t gi = NULL;
                nvmlGpuInstanceInfo_t gi_info = { 0 };
                nvmlComputeInstance_t ci = NULL;
                nvmlComputeInstanceInfo_t ci_info = { 0 };
                MIGCALL(api->nvmlDeviceGetGpuInstanceById(dev, m->gi_id, &gi),
                        "nvmlDeviceGetGpuInstanceById");
                MIGCALL(api->nvmlGpuInstanceGetInfo(gi, &gi_info), "nvmlGpuInstanceGetInfo");
                MIGCALL(api->nvmlGpuInstanceGetComputeInstanceById(gi, m->ci_id, &ci),
                        "nvmlGpuInstanceGetComputeInstanceById");
                MIGCALL(api->nvmlComputeInstanceGetInfo(ci, &ci_info),
                        "nvmlComputeInstanceGetInfo");
                m->gi_placement = gi_info.placement;
                m->ci_placement = ci_info.placement;

                bool found = false;
                for (unsigned i = 0; i < NVML_GPU_INSTANCE_PROFILE_COUNT && !found; i++) {
                        nvmlGpuInstanceProfileInfo_t pi = { 0 };
                        r = api->nvmlDeviceGetGpuInstanceProfileInfo(dev, i, &pi);
                        STOP_ON_FAULT(r);
                        if (r == NVML_SUCCESS && pi.id == gi_info.profileId) {
                                m->gi_profile_index = i;
                                m->gi_profile = pi;
                                found = true;
                        }
                }
                if (!found)
                        return kdev_err_set(c->err, ENOENT,
                                            "GPU %u MIG device %u: no matching GPU instance "
                                            "profile for id %u",
                                            g->index, j, gi_info.profileId);
                found = false;
                for (unsigned i = 0; i < NVML_COMPUTE_INSTANCE_PROFILE_COUNT && !found; i++) {
                        for (unsigned e = 0; e < NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_COUNT; e++) {
                                nvmlComputeInstanceProfileInfo_t pi = { 0 };
                                r = api->nvmlGpuInstanceGetComputeInstanceProfileInfo(gi, i, e,
                                                                                      &pi);
                                STOP_ON_FAULT(r);
                                if (r == NVML_SUCCESS && pi.id == ci_info.profileId) {
                                        m->ci_profile_index = i;
                                        m->ci_profile = pi;
                                        found = true;
                                        break;
                                }
                        }
                }
                if (!found)
                        return kdev_err_set(c->err, ENOENT,
                                            "GPU %u MIG device %u: no matching compute instance "
                                            "profile for id %u",
                                            g->index, j, ci_info.profileId);
#undef MIGCALL
                g->n_migs++;
        }
        return 0;
}

static int read_mig_profiles(struct ctx *c, struct kdev_gpu *g, nvmlDevice_t dev)
{
        g->mig_profiles = calloc(NVML_GPU_INSTANCE_PROFILE_COUNT, sizeof(*g->mig_profiles));
        if (!g->mig_profiles)
                return kdev_err_set(c->err, ENOMEM, "out of memory");
        for (unsigned i = 0; i < NVML_GPU_INSTANCE_PROFILE_COUNT; i++) {
                nvmlGpuInstanceProfileInfo_t pi = { 0 };
                nvmlReturn_t r = c->api->nvmlDeviceGetGpuInstanceProfileInfo(dev, i, &pi);
                if (r == NVML_ERROR_NOT_SUPPORTED || r == NVML_ERROR_INVALID_ARGUMENT)
                        continue;
                GPU_CALL(r, "GPU %u: nvmlDeviceGetGpuInstanceProfileInfo(%u)", g->index, i);
                g->mig_profiles[g->n_mig_profiles].index = i;
                g->mig_profiles[g->n_mig_profiles].info = pi;
                g->n_mig_profiles++;
        }
        return 0;
}

/* Reads GPU |idx| into |g|. Returns 1 when the GPU is skipped (display), 0
 * when kept, negative errno on error. */
static int read_gpu(struct ctx *c, unsigned idx, struct kdev_gpu *g, nvmlDevice_t *handle)
{
        const struct kdev_nvml_api *api = c->api;
        nvmlDevice_t dev = NULL;
        memset(g, 0, sizeof(*g));
        g->index = idx;
        g->numa_node = -1;
        g->arch = NVML_DEVICE_ARCH_UNKNOWN;
        g->family = "undefined";
        g->fault = NVML_SUCCESS;

#define IDCALL(call, name) GPU_CALL((call), "GPU %u: %s", idx, (name))

        nvmlReturn_t r = api->nvmlDeviceGetHandleByIndex(idx, &dev);
        if (r != NVML_SUCCESS)
                return kdev_nvml_fail(c->lib, r, c->err, "GPU %u: nvmlDeviceGetHandleByIndex",
                                      idx);
        *handle = dev;
        r = api->nvmlDeviceGetName(dev, g->name, sizeof(g->name));
        if (r == NVML_SUCCESS && is_display_gpu(g->name))
                return 1;
        IDCALL(r, "nvmlDeviceGetName");
        IDCALL(api->nvmlDeviceGetUUID(dev, g->uuid, sizeof(g->uuid)), "nvmlDeviceGetUUID");
        /* the MIG mode right after the UUID: a GPU that faults later (reset
         * required) is still known to be MIG-enabled or not */
        if (api->nvmlDeviceGetMigMode) {
                r = api->nvmlDeviceGetMigMode(dev, &g->mig_current, &g->mig_pending);
                if (r != NVML_ERROR_NOT_SUPPORTED) {
                        if (is_fault(r)) {
                                g->mig_current = g->mig_pending = 0;
                                g->fault = r;
                                return 0;
                        }
                        IDCALL(r, "nvmlDeviceGetMigMode");
                        g->mig_capable = true;
                }
        }
        g->mig_mode_known = true;
        nvmlPciInfo_t pci;
        memset(&pci, 0, sizeof(pci));
        IDCALL(api->nvmlDeviceGetPciInfo(dev, &pci), "nvmlDeviceGetPciInfo");
        fill_bus_id(&pci);
        snprintf(g->pci_bus_id, sizeof(g->pci_bus_id), "%s", pci.busId);
        if (kdev_nvml_sysfs_bus_id(g->pci_bus_id, g->sysfs_bus_id, sizeof(g->sysfs_bus_id)) < 0)
                return kdev_err_set(c->err, EPROTO, "GPU %u: malformed PCI bus id \"%s\"", idx,
                                    g->pci_bus_id);
        g->pci_domain = pci.domain;
        g->pci_bus = pci.bus;
        g->pci_device = pci.device;
        g->pci_device_id = pci.pciDeviceId;
        g->pci_subsystem_id = pci.pciSubSystemId;
        IDCALL(api->nvmlDeviceGetMinorNumber(dev, &g->minor), "nvmlDeviceGetMinorNumber");

        int rc = kdev_nvml_numa_node(c->sysfs_root, g->sysfs_bus_id, &g->numa_node, c->err);
        if (rc < 0)
                return kdev_err_wrap(c->err, "GPU %u", idx);
        /* no link (a container without /sys, a test tree): no attribute */
        if (kdev_nvml_pcie_root(c->sysfs_root, g->sysfs_bus_id, g->pcie_root,
                                sizeof(g->pcie_root), NULL) < 0)
                g->pcie_root[0] = '\0';

        nvmlMemory_t mem = { 0 };
        g->memory_ret = api->nvmlDeviceGetMemoryInfo(dev, &mem);
        g->memory_total = g->memory_ret == NVML_SUCCESS ? mem.total : 0;
        STOP_ON_FAULT(g->memory_ret);
        IDCALL(api->nvmlDeviceGetCudaComputeCapability(dev, &g->cc_major, &g->cc_minor),
               "nvmlDeviceGetCudaComputeCapability");
        g->family = kdev_nvml_family(g->cc_major, g->cc_minor);
        if (api->nvmlDeviceGetArchitecture) {
                nvmlDeviceArchitecture_t a = NVML_DEVICE_ARCH_UNKNOWN;
                r = api->nvmlDeviceGetArchitecture(dev, &a);
                STOP_ON_FAULT(r);
                if (r == NVML_SUCCESS)
                        g->arch = a;
        }
        if (api->nvmlDeviceGetBrand) {
                nvmlBrandType_t b = NVML_BRAND_UNKNOWN;
                r = api->nvmlDeviceGetBrand(dev, &b);
                STOP_ON_FAULT(r);
                if (r == NVML_SUCCESS) {
                        g->brand = b;
                        g->has_brand = true;
                }
        }
        /* whole-GPU SM count: only for a GPU used whole (MIG mode off) */
        if (api->nvmlDeviceGetAttributes && g->mig_current != NVML_DEVICE_MIG_ENABLE) {
                nvmlDeviceAttributes_t a;
                memset(&a, 0, sizeof(a));
                r = api->nvmlDeviceGetAttributes(dev, &a);
                STOP_ON_FAULT(r);
                if (r == NVML_SUCCESS)
                        g->multiprocessors = a.multiprocessorCount;
        }
#undef IDCALL
        if (g->mig_capable && !(c->flags & KDEV_NVML_DISCOVER_NO_MIG)) {
                rc = read_mig_profiles(c, g, dev);
                if (rc < 0 || g->fault != NVML_SUCCESS)
                        return rc;
                if (g->mig_current == NVML_DEVICE_MIG_ENABLE)
                        return read_migs(c, g, dev);
        }
        return 0;
}

static bool bus_id_equal(const char *a, const char *b)
{
        /* Compared the way go-gpuallocator's users see them: case-insensitive. */
        return strncasecmp(a, b, KDEV_GPU_BUS_ID_MAX) == 0;
}

static int read_nvlinks(struct ctx *c, size_t pos)
{
        struct kdev_gpu *g = &c->set->gpus[pos];
        nvmlDevice_t dev = c->handles[pos];
        for (unsigned link = 0; link < NVML_NVLINK_MAX_LINKS; link++) {
                nvmlEnableState_t st = NVML_FEATURE_DISABLED;
                nvmlReturn_t r = c->api->nvmlDeviceGetNvLinkState(dev, link, &st);
                if (r == NVML_ERROR_NOT_SUPPORTED || r == NVML_ERROR_INVALID_ARGUMENT)
                        continue;
                if (r != NVML_SUCCESS)
                        return kdev_nvml_fail(c->lib, r, c->err,
                                              "GPU %u: nvmlDeviceGetNvLinkState(%u)", g->index,
                                              link);
                if (st != NVML_FEATURE_ENABLED)
                        continue;
                nvmlPciInfo_t pci;
                memset(&pci, 0, sizeof(pci));
                r = c->api->nvmlDeviceGetNvLinkRemotePciInfo(dev, link, &pci);
                if (r == NVML_ERROR_NOT_SUPPORTED || r == NVML_ERROR_INVALID_ARGUMENT)
                        continue;
                if (r != NVML_SUCCESS)
                        return kdev_nvml_fail(c->lib, r, c->err,
                                              "GPU %u: nvmlDeviceGetNvLinkRemotePciInfo(%u)",
                                              g->index, link);
                fill_bus_id(&pci);
                if (!g->nvlinks) {
                        g->nvlinks = calloc(NVML_NVLINK_MAX_LINKS, sizeof(*g->nvlinks));
                        if (!g->nvlinks)
                                return kdev_err_set(c->err, ENOMEM, "out of memory");
                }
                struct kdev_nvlink *l = &g->nvlinks[g->n_nvlinks++];
                l->link = link;
                snprintf(l->remote_bus_id, sizeof(l->remote_bus_id), "%s", pci.busId);
                l->remote_gpu = -1;
                for (size_t k = 0; k < c->set->n_gpus; k++) {
                        if (k != pos && bus_id_equal(c->set->gpus[k].pci_bus_id, pci.busId)) {
                                l->remote_gpu = (int)k;
                                break;
                        }
                }
        }
        return 0;
}

static int read_links(struct ctx *c)
{
        struct kdev_gpu_set *set = c->set;
        size_t n = set->n_gpus;
        if (n == 0) {
                set->has_links = true;
                return 0;
        }
        set->levels = calloc(n * n, sizeof(*set->levels));
        set->nvlink_counts = calloc(n * n, sizeof(*set->nvlink_counts));
        if (!set->levels || !set->nvlink_counts)
                return kdev_err_set(c->err, ENOMEM, "out of memory");
        for (size_t i = 0; i < n; i++) {
                if (set->gpus[i].fault != NVML_SUCCESS)
                        continue;
                for (size_t j = 0; j < n; j++) {
                        if (i == j || set->gpus[j].fault != NVML_SUCCESS)
                                continue;
                        nvmlGpuTopologyLevel_t lv = NVML_TOPOLOGY_SYSTEM;
                        nvmlReturn_t r = c->api->nvmlDeviceGetTopologyCommonAncestor(
                                c->handles[i], c->handles[j], &lv);
                        if (r != NVML_SUCCESS)
                                return kdev_nvml_fail(
                                        c->lib, r, c->err,
                                        "GPU %u and GPU %u: nvmlDeviceGetTopologyCommonAncestor",
                                        set->gpus[i].index, set->gpus[j].index);
                        if (!kdev_nvml_level_name(lv))
                                return kdev_err_set(c->err, EPROTO,
                                                    "GPU %u and GPU %u: unknown topology level %d",
                                                    set->gpus[i].index, set->gpus[j].index,
                                                    (int)lv);
                        set->levels[i * n + j] = lv;
                }
                int rc = read_nvlinks(c, i);
                if (rc < 0)
                        return rc;
                for (size_t k = 0; k < set->gpus[i].n_nvlinks; k++) {
                        int peer = set->gpus[i].nvlinks[k].remote_gpu;
                        if (peer >= 0)
                                set->nvlink_counts[i * n + (size_t)peer]++;
                }
        }
        for (size_t i = 0; i < n; i++) {
                for (size_t j = i + 1; j < n; j++) {
                        const struct kdev_gpu *a = &set->gpus[i], *b = &set->gpus[j];
                        if (a->fault != NVML_SUCCESS || b->fault != NVML_SUCCESS)
                                continue;
                        if (set->levels[i * n + j] != set->levels[j * n + i])
                                return kdev_err_set(c->err, EPROTO,
                                                    "GPU %u and GPU %u: asymmetric topology "
                                                    "(%d vs %d)",
                                                    a->index, b->index,
                                                    (int)set->levels[i * n + j],
                                                    (int)set->levels[j * n + i]);
                        if (set->nvlink_counts[i * n + j] != set->nvlink_counts[j * n + i])
                                return kdev_err_set(c->err, EPROTO,
                                                    "GPU %u and GPU %u: asymmetric NVLink count "
                                                    "(%u vs %u)",
                                                    a->index, b->index,
                                                    set->nvlink_counts[i * n + j],
                                                    set->nvlink_counts[j * n + i]);
                }
        }
        set->has_links = true;
        return 0;
}

static int discover_locked(struct ctx *c, unsigned flags)
{
        const struct kdev_nvml_api *api = c->api;
        struct kdev_gpu_set *set = c->set;
        nvmlReturn_t r = api->nvmlSystemGetDriverVersion(set->driver_version,
                                                         sizeof(set->driver_version));
        if (r != NVML_SUCCESS)
                return kdev_nvml_fail(c->lib, r, c->err, "nvmlSystemGetDriverVersion");
        if (api->nvmlSystemGetCudaDriverVersion) {
                int v = 0;
                if (api->nvmlSystemGetCudaDriverVersion(&v) == NVML_SUCCESS)
                        set->cuda_driver_version = v;
        }
        unsigned count = 0;
        r = api->nvmlDeviceGetCount(&count);
        if (r != NVML_SUCCESS)
                return kdev_nvml_fail(c->lib, r, c->err, "nvmlDeviceGetCount");
        if (count == 0)
                return 0;
        set->gpus = calloc(count, sizeof(*set->gpus));
        c->handles = calloc(count, sizeof(*c->handles));
        if (!set->gpus || !c->handles)
                return kdev_err_set(c->err, ENOMEM, "out of memory");
        for (unsigned i = 0; i < count; i++) {
                struct kdev_gpu *g = &set->gpus[set->n_gpus];
                int rc = read_gpu(c, i, g, &c->handles[set->n_gpus]);
                /* the slot is counted before checking rc so that its
                 * allocations are freed with the set */
                if (rc == 1) {
                        set->n_skipped++;
                        free(g->migs);
                        free(g->mig_profiles);
                        memset(g, 0, sizeof(*g));
                        continue;
                }
                set->n_gpus++;
                if (rc < 0)
                        return rc;
        }
        if (flags & KDEV_NVML_DISCOVER_LINKS)
                return read_links(c);
        return 0;
}

int kdev_nvml_discover(struct kdev_nvml *lib, const struct kdev_nvml_discover_options *opts,
                       struct kdev_gpu_set **out, struct kdev_err *err)
{
        *out = NULL;
        struct ctx c = {
                .lib = lib,
                .api = kdev_nvml_api(lib),
                .sysfs_root = opts ? opts->sysfs_root : NULL,
                .flags = opts ? opts->flags : 0,
                .err = err,
        };
        c.set = calloc(1, sizeof(*c.set));
        if (!c.set)
                return kdev_err_set(err, ENOMEM, "out of memory");
        if (c.sysfs_root && strlen(c.sysfs_root) >= sizeof(c.set->sysfs_root)) {
                free(c.set);
                c.set = NULL;
                return kdev_err_set(err, ENAMETOOLONG, "sysfs root too long: %s", c.sysfs_root);
        }
        snprintf(c.set->sysfs_root, sizeof(c.set->sysfs_root), "%s",
                 c.sysfs_root ? c.sysfs_root : "");
        int rc = kdev_nvml_init(lib, err);
        if (rc < 0) {
                free(c.set);
                return rc;
        }
        rc = discover_locked(&c, opts ? opts->flags : 0);
        int src = kdev_nvml_shutdown(lib, rc < 0 ? NULL : err);
        if (rc == 0)
                rc = src;
        free(c.handles);
        if (rc < 0) {
                kdev_gpu_set_free(c.set);
                return rc;
        }
        *out = c.set;
        return 0;
}

void kdev_gpu_set_free(struct kdev_gpu_set *set)
{
        if (!set)
                return;
        for (size_t i = 0; i < set->n_gpus; i++) {
                free(set->gpus[i].migs);
                free(set->gpus[i].mig_profiles);
                free(set->gpus[i].nvlinks);
        }
        free(set->gpus);
        free(set->levels);
        free(set->nvlink_counts);
        free(set);
}

const struct kdev_gpu *kdev_gpu_set_find(const struct kdev_gpu_set *set, const char *uuid)
{
        for (size_t i = 0; i < set->n_gpus; i++)
                if (strcmp(set->gpus[i].uuid, uuid) == 0)
                        return &set->gpus[i];
        return NULL;
}

static bool same_migs(const struct kdev_gpu *a, const struct kdev_gpu *b)
{
        if (a->mig_current != b->mig_current || a->n_migs != b->n_migs)
                return false;
        for (size_t k = 0; k < a->n_migs; k++) {
                const struct kdev_mig_device *x = &a->migs[k], *y = &b->migs[k];
                if (strcmp(x->uuid, y->uuid) != 0 || x->gi_profile_index != y->gi_profile_index ||
                    x->ci_profile_index != y->ci_profile_index)
                        return false;
        }
        return true;
}

static bool differs(char *why, size_t size, const char *what, const char *uuid, const char *tail)
{
        if (why && size)
                snprintf(why, size, "%s%s%s", what, uuid, tail);
        return true;
}

bool kdev_gpu_set_inventory_differs(const struct kdev_gpu_set *was, const struct kdev_gpu_set *now,
                                    char *why, size_t size)
{
        static const struct kdev_gpu_set none = {0};
        if (!was)
                was = &none;
        if (!now)
                now = &none;
        size_t unnamed = 0, missing = 0;
        const char *gone = NULL;
        for (size_t i = 0; i < now->n_gpus; i++) {
                const struct kdev_gpu *g = &now->gpus[i];
                if (!g->uuid[0]) {
                        unnamed++;
                        continue;
                }
                const struct kdev_gpu *o = kdev_gpu_set_find(was, g->uuid);
                if (!o)
                        return differs(why, size, "GPU ", g->uuid, " appeared");
                if (g->fault != NVML_SUCCESS || o->fault != NVML_SUCCESS)
                        continue;
                if (g->mig_current != o->mig_current)
                        return differs(why, size, "MIG mode of GPU ", g->uuid, " changed");
                if (!same_migs(o, g))
                        return differs(why, size, "MIG devices of GPU ", g->uuid, " changed");
        }
        size_t unnamed_was = 0;
        for (size_t i = 0; i < was->n_gpus; i++) {
                const struct kdev_gpu *o = &was->gpus[i];
                if (!o->uuid[0])
                        unnamed_was++;
                else if (!kdev_gpu_set_find(now, o->uuid)) {
                        missing++;
                        if (!gone)
                                gone = o->uuid;
                }
        }
        /* only a GPU that lost its name since can be one of the missing: the
         * GPUs without a UUID before stand for GPUs already missing then */
        if (missing > (unnamed > unnamed_was ? unnamed - unnamed_was : 0))
                return differs(why, size, "GPU ", gone, " is gone");
        if (unnamed < unnamed_was)
                return differs(why, size, "a GPU lost before its UUID was read", "",
                               " is gone");
        return false;
}

nvmlGpuTopologyLevel_t kdev_gpu_set_level(const struct kdev_gpu_set *set, size_t i, size_t j)
{
        if (i == j || !set->levels || i >= set->n_gpus || j >= set->n_gpus)
                return NVML_TOPOLOGY_INTERNAL;
        return set->levels[i * set->n_gpus + j];
}

unsigned kdev_gpu_set_nvlinks(const struct kdev_gpu_set *set, size_t i, size_t j)
{
        if (!set->nvlink_counts || i >= set->n_gpus || j >= set->n_gpus)
                return 0;
        return set->nvlink_counts[i * set->n_gpus + j];
}
