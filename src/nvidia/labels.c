/* GPU node labels for Node Feature Discovery. See labels.h. */
#include "nvidia/labels.h"

#include "common/file.h"
#include "nvml/loader.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "nvidia/cdi_spec.h"
#include "nvidia/isolation.h"
#include "nvidia/mig.h"
#include "nvidia/resources.h"

#define PCI_CLASS_VGA 0x030000u /* nvpci.PCIVgaControllerClass */
#define PCI_CLASS_3D 0x030200u  /* nvpci.PCI3dControllerClass */

/* --- the label set ---------------------------------------------------------- */

void kdev_nvidia_labels_clear(struct kdev_nvidia_labels *l)
{
        if (!l)
                return;
        for (size_t i = 0; i < l->n; i++) {
                free(l->v[i].key);
                free(l->v[i].value);
        }
        free(l->v);
        memset(l, 0, sizeof(*l));
}

static struct kdev_nvidia_label *find(const struct kdev_nvidia_labels *l, const char *key)
{
        for (size_t i = 0; i < l->n; i++) {
                if (strcmp(l->v[i].key, key) == 0)
                        return &l->v[i];
        }
        return NULL;
}

const char *kdev_nvidia_labels_get(const struct kdev_nvidia_labels *l, const char *key)
{
        const struct kdev_nvidia_label *x = find(l, key);
        return x ? x->value : NULL;
}

/* Sets <prefix>.<suffix> (or <prefix> alone when |suffix| is NULL) to the
 * printf-style value, overwriting an earlier value as GFD's merge does.
 * Returns 0 or -ENOMEM. */
__attribute__((format(printf, 4, 5))) static int set(struct kdev_nvidia_labels *l,
                                                     const char *prefix, const char *suffix,
                                                     const char *fmt, ...)
{
        char *key = NULL, *value = NULL;
        int r = suffix ? asprintf(&key, "%s.%s", prefix, suffix) : asprintf(&key, "%s", prefix);
        if (r < 0)
                return -ENOMEM;
        va_list ap;
        va_start(ap, fmt);
        r = vasprintf(&value, fmt, ap);
        va_end(ap);
        if (r < 0) {
                free(key);
                return -ENOMEM;
        }
        struct kdev_nvidia_label *x = find(l, key);
        if (x) {
                free(key);
                free(x->value);
                x->value = value;
                return 0;
        }
        if (l->n == l->cap) {
                size_t cap = l->cap ? l->cap * 2 : 32;
                struct kdev_nvidia_label *v = realloc(l->v, cap * sizeof(*v));
                if (!v) {
                        free(key);
                        free(value);
                        return -ENOMEM;
                }
                l->v = v;
                l->cap = cap;
        }
        l->v[l->n].key = key;
        l->v[l->n].value = value;
        l->n++;
        return 0;
}

static int cmp_label(const void *a, const void *b)
{
        return strcmp(((const struct kdev_nvidia_label *)a)->key,
                      ((const struct kdev_nvidia_label *)b)->key);
}

/* --- value rules ------------------------------------------------------------ */

/* GFD sanitise(): drop characters outside [A-Za-z0-9-_. ], then join the
 * blank-separated fields with '-'. Writes into |out| (|size| bytes). */
static void sanitise(const char *in, char *out, size_t size)
{
        size_t n = 0;
        bool pending_dash = false;
        for (const char *p = in; *p && n + 2 < size; p++) {
                unsigned char c = (unsigned char)*p;
                if (c == ' ') {
                        pending_dash = n > 0;
                        continue;
                }
                if (!(isalnum(c) && c < 0x80) && c != '-' && c != '_' && c != '.')
                        continue;
                if (pending_dash) {
                        out[n++] = '-';
                        pending_dash = false;
                }
                out[n++] = (char)c;
        }
        out[n] = '\0';
}

static bool usable(const struct kdev_gpu *g)
{
        return g->name[0] != '\0';
}

static bool mig_enabled(const struct kdev_gpu *g)
{
        return g->mig_mode_known && g->mig_capable && g->mig_current == NVML_DEVICE_MIG_ENABLE;
}

/* How sharing.timeSlicing treats resource |name| (GFD resourceLabeler with a
 * config): replicas (1 when not listed), shared (> 1) and renamed. */
struct sharing {
        unsigned replicas;
        bool shared, renamed;
        const char *strategy; /* "time-slicing" or "mps" when shared */
};

static struct sharing sharing_of(const struct kdev_nvidia_config *cfg, const char *name)
{
        struct sharing s = {.replicas = 1};
        const struct kdev_nvidia_replicated *ts = kdev_nvidia_replicated_section(cfg);
        s.strategy = kdev_nvidia_sharing_strategy_name(kdev_nvidia_sharing_strategy(cfg));
        if (!ts->present)
                return s;
        for (size_t i = 0; i < ts->n_resources; i++) {
                const struct kdev_nvidia_replicated_resource *r = &ts->resources[i];
                if (strcmp(r->name, name) != 0)
                        continue;
                if (r->replicas > 0)
                        s.replicas = r->replicas;
                s.shared = r->replicas > 1;
                s.renamed = r->rename != NULL || ts->rename_by_default;
                break;
        }
        return s;
}

/* product, count, replicas and sharing-strategy of resource |res| (GFD
 * baseLabeler). |sh| NULL: sharing disabled (replicas 0). |profile| NULL for
 * a whole GPU. */
static int base_labels(struct kdev_nvidia_labels *l, const char *res, const struct sharing *sh,
                       size_t count, const char *model, const char *profile)
{
        char m[KDEV_GPU_NAME_MAX], p[KDEV_NVIDIA_MIG_PROFILE_MAX];
        sanitise(model, m, sizeof(m));
        const char *suffix = sh && sh->shared && !sh->renamed ? "-SHARED" : "";
        int r;
        if (profile) {
                sanitise(profile, p, sizeof(p));
                r = set(l, res, "product", "%s-MIG-%s%s", m, p, suffix);
        } else {
                r = set(l, res, "product", "%s%s", m, suffix);
        }
        unsigned replicas = sh ? sh->replicas : 0;
        if (r == 0)
                r = set(l, res, "count", "%zu", count);
        if (r == 0)
                r = set(l, res, "replicas", "%u", replicas);
        if (r == 0)
                r = set(l, res, "sharing-strategy", "%s",
                        sh && replicas > 1 ? sh->strategy : "none");
        return r;
}

/* --- node-wide labels ------------------------------------------------------- */

static int version_labels(struct kdev_nvidia_labels *l, const struct kdev_gpu_set *gpus,
                          struct kdev_err *err)
{
        const char *v = gpus->driver_version;
        char part[3][NVML_SYSTEM_DRIVER_VERSION_BUFFER_SIZE] = {{0}};
        size_t n = 0, k = 0;
        for (const char *p = v;; p++) {
                if (*p == '.' || *p == '\0') {
                        if (n < 3)
                                part[n][k] = '\0';
                        n++;
                        k = 0;
                        if (*p == '\0')
                                break;
                } else if (n < 3 && k + 1 < sizeof(part[0])) {
                        part[n][k++] = *p;
                }
        }
        if (n < 2 || n > 3)
                return kdev_err_set(err, EINVAL,
                                    "error getting driver version: Version \"%s\" does not match "
                                    "format \"X.Y[.Z]\"",
                                    v);
        int r = 0;
        r = r ? r : set(l, "nvidia.com/cuda.driver.major", NULL, "%s", part[0]);
        r = r ? r : set(l, "nvidia.com/cuda.driver.minor", NULL, "%s", part[1]);
        r = r ? r : set(l, "nvidia.com/cuda.driver.rev", NULL, "%s", part[2]);
        r = r ? r : set(l, "nvidia.com/cuda.driver-version.major", NULL, "%s", part[0]);
        r = r ? r : set(l, "nvidia.com/cuda.driver-version.minor", NULL, "%s", part[1]);
        r = r ? r : set(l, "nvidia.com/cuda.driver-version.revision", NULL, "%s", part[2]);
        r = r ? r : set(l, "nvidia.com/cuda.driver-version.full", NULL, "%s", v);
        int cv = gpus->cuda_driver_version;
        if (cv > 0) {
                int major = cv / 1000, minor = cv % 1000 / 10;
                r = r ? r : set(l, "nvidia.com/cuda.runtime.major", NULL, "%d", major);
                r = r ? r : set(l, "nvidia.com/cuda.runtime.minor", NULL, "%d", minor);
                r = r ? r : set(l, "nvidia.com/cuda.runtime-version.major", NULL, "%d", major);
                r = r ? r : set(l, "nvidia.com/cuda.runtime-version.minor", NULL, "%d", minor);
                r = r ? r : set(l, "nvidia.com/cuda.runtime-version.full", NULL, "%d.%d", major,
                                minor);
        }
        return r ? kdev_err_set(err, ENOMEM, "out of memory") : 0;
}

static int machine_label(struct kdev_nvidia_labels *l, const char *path)
{
        char clean[256];
        if (!path)
                path = KDEV_NVIDIA_MACHINE_TYPE_FILE;
        const char *value = "unknown";
        char *raw = NULL;
        size_t n;
        if (*path && kdev_file_read(path, "sysfs attribute", KDEV_FILE_SYSFS_ATTR_MAX, 0, &raw,
                                    &n, NULL) == 0) {
                /* strings.TrimSpace, then sanitise (newlines inside are
                 * dropped by sanitise; the text ends at a NUL byte) */
                char *s = raw;
                while (*s && isspace((unsigned char)*s))
                        s++;
                size_t len = strlen(s);
                while (len && isspace((unsigned char)s[len - 1]))
                        s[--len] = '\0';
                sanitise(s, clean, sizeof(clean));
                value = clean;
        }
        int r = set(l, "nvidia.com/gpu.machine", NULL, "%s", value);
        free(raw);
        return r;
}

/* The PCI class of |g| from sysfs, or -1. */
static long pci_class(const char *sysfs, const struct kdev_gpu *g)
{
        if (!g->sysfs_bus_id[0])
                return -1;
        char path[PATH_MAX], *buf;
        size_t n;
        snprintf(path, sizeof(path), "%s/bus/pci/devices/%s/class", sysfs, g->sysfs_bus_id);
        if (kdev_file_read(path, "sysfs attribute", KDEV_FILE_SYSFS_ATTR_MAX, KDEV_FILE_TEXT, &buf,
                           &n, NULL) < 0)
                return -1;
        char *end = NULL;
        errno = 0;
        unsigned long v = strtoul(buf, &end, 16);
        bool ok = !errno && end != buf && v <= 0xffffffu;
        free(buf);
        return ok ? (long)v : -1;
}

static int mode_label(struct kdev_nvidia_labels *l, const struct kdev_gpu_set *gpus,
                      const char *sysfs)
{
        const char *mode = "unknown";
        long first = -2;
        for (size_t i = 0; i < gpus->n_gpus; i++) {
                const struct kdev_gpu *g = &gpus->gpus[i];
                if (!usable(g))
                        continue;
                long c = pci_class(sysfs, g);
                if (c < 0 || (first != -2 && c != first)) {
                        first = -1;
                        break;
                }
                first = c;
        }
        if (first == (long)PCI_CLASS_3D)
                mode = "compute";
        else if (first == (long)PCI_CLASS_VGA)
                mode = "graphics";
        return set(l, "nvidia.com/gpu.mode", NULL, "%s", mode);
}

/* --- GPU and MIG labels ----------------------------------------------------- */

/* GFD newGPULabelers with a deterministic choice of model (labels.h). */
static int gpu_labels(struct kdev_nvidia_labels *l, const struct kdev_gpu_set *gpus,
                      const struct kdev_nvidia_config *cfg)
{
        const struct kdev_gpu *rep = NULL;
        for (size_t i = 0; i < gpus->n_gpus && !rep; i++) {
                if (usable(&gpus->gpus[i]) && !mig_enabled(&gpus->gpus[i]))
                        rep = &gpus->gpus[i];
        }
        bool with_sharing = rep != NULL;
        for (size_t i = 0; i < gpus->n_gpus && !rep; i++) {
                if (usable(&gpus->gpus[i]))
                        rep = &gpus->gpus[i];
        }
        if (!rep)
                return 0;
        size_t count = 0;
        for (size_t i = 0; i < gpus->n_gpus; i++) {
                count += usable(&gpus->gpus[i]) && strcmp(gpus->gpus[i].name, rep->name) == 0;
        }
        const char *res = KDEV_NVIDIA_GPU_RESOURCE;
        struct sharing sh = sharing_of(cfg, res);
        int r = base_labels(l, res, with_sharing ? &sh : NULL, count, rep->name, NULL);
        unsigned long long mib = rep->memory_total >> 20;
        if (r == 0 && mib)
                r = set(l, res, "memory", "%llu", mib);
        if (r == 0 && rep->cc_major != 0) {
                r = set(l, res, "family", "%s", kdev_nvml_family(rep->cc_major, rep->cc_minor));
                r = r ? r : set(l, res, "compute.major", "%d", rep->cc_major);
                r = r ? r : set(l, res, "compute.minor", "%d", rep->cc_minor);
        }
        return r;
}

/* One MIG profile present on the node. */
struct profile {
        char name[KDEV_NVIDIA_MIG_PROFILE_MAX]; /* '+' replaced by '.' */
        const struct kdev_gpu *parent;          /* of the first device */
        const struct kdev_mig_device *dev;      /* the first device */
        size_t count;
};

/* The MIG profiles of the MIG-enabled GPUs, in order of first appearance.
 * Returns the count (|*out| owned by the caller) or a negative errno. */
static int collect_profiles(const struct kdev_gpu_set *gpus, struct profile **out,
                            struct kdev_err *err)
{
        struct profile *v = NULL;
        size_t n = 0;
        *out = NULL;
        for (size_t i = 0; i < gpus->n_gpus; i++) {
                const struct kdev_gpu *g = &gpus->gpus[i];
                if (!usable(g) || !mig_enabled(g))
                        continue;
                for (size_t j = 0; j < g->n_migs; j++) {
                        char name[KDEV_NVIDIA_MIG_PROFILE_MAX];
                        int r = kdev_nvidia_mig_device_profile(g, &g->migs[j], name, sizeof(name),
                                                               err);
                        if (r < 0) {
                                free(v);
                                return kdev_err_wrap(err, "MIG labels");
                        }
                        for (char *c = name; *c; c++)
                                *c = *c == '+' ? '.' : *c;
                        size_t k = 0;
                        while (k < n && strcmp(v[k].name, name) != 0)
                                k++;
                        if (k == n) {
                                struct profile *nv = realloc(v, (n + 1) * sizeof(*nv));
                                if (!nv) {
                                        free(v);
                                        return kdev_err_set(err, ENOMEM, "out of memory");
                                }
                                v = nv;
                                memset(&v[n], 0, sizeof(v[n]));
                                snprintf(v[n].name, sizeof(v[n].name), "%s", name);
                                v[n].parent = g;
                                v[n].dev = &g->migs[j];
                                n++;
                        }
                        v[k].count++;
                }
        }
        *out = v;
        return (int)n;
}

/* GFD NewMIGResourceLabeler for resource |res|. */
static int mig_labels(struct kdev_nvidia_labels *l, const char *res,
                      const struct kdev_nvidia_config *cfg, const struct profile *p)
{
        struct sharing sh = sharing_of(cfg, res);
        const nvmlDeviceAttributes_t *a = &p->dev->attributes;
        int r = base_labels(l, res, &sh, p->count, p->parent->name, p->name);
        r = r ? r : set(l, res, "memory", "%llu", a->memorySizeMB);
        r = r ? r : set(l, res, "multiprocessors", "%u", a->multiprocessorCount);
        r = r ? r : set(l, res, "slices.gi", "%u", a->gpuInstanceSliceCount);
        r = r ? r : set(l, res, "slices.ci", "%u", a->computeInstanceSliceCount);
        r = r ? r : set(l, res, "engines.copy", "%u", a->sharedCopyEngineCount);
        r = r ? r : set(l, res, "engines.decoder", "%u", a->sharedDecoderCount);
        r = r ? r : set(l, res, "engines.encoder", "%u", a->sharedEncoderCount);
        r = r ? r : set(l, res, "engines.jpeg", "%u", a->sharedJpegCount);
        r = r ? r : set(l, res, "engines.ofa", "%u", a->sharedOfaCount);
        return r;
}

/* The memory of the devices resource |base| is made of, from the first one
 * in NVML order: a MIG-disabled GPU for nvidia.com/gpu (a MIG device under
 * migStrategy single), else the first MIG device whose resource is |base|.
 * 0: unknown. */
static unsigned long long base_memory(const struct kdev_gpu_set *gpus,
                                      const struct kdev_nvidia_config *cfg, const char *base)
{
        bool whole = strcmp(base, KDEV_NVIDIA_GPU_RESOURCE) == 0 &&
                     cfg->mig_strategy != KDEV_NVIDIA_MIG_SINGLE;
        for (size_t i = 0; i < gpus->n_gpus; i++) {
                const struct kdev_gpu *g = &gpus->gpus[i];
                if (!usable(g) || whole != !mig_enabled(g))
                        continue;
                if (whole)
                        return g->memory_total;
                for (size_t k = 0; k < g->n_migs; k++) {
                        char profile[KDEV_NVIDIA_MIG_PROFILE_MAX];
                        char name[KDEV_NVIDIA_MIG_PROFILE_MAX + 32];
                        struct kdev_err e = {0};
                        if (kdev_nvidia_mig_device_profile(g, &g->migs[k], profile,
                                                           sizeof(profile), &e) < 0)
                                continue;
                        kdev_nvidia_mig_resource_name(profile, name, sizeof(name));
                        if (cfg->mig_strategy == KDEV_NVIDIA_MIG_SINGLE || strcmp(name, base) == 0)
                                return g->migs[k].memory_total;
                }
        }
        return 0;
}

/* kdev: what a replica of each isolated resource R is (isolation.h):
 * R.replicas, R.replica.memory (MiB per replica; left out when unknown) and
 * R.replica.compute (percent per replica). */
static int isolation_labels(struct kdev_nvidia_labels *l, const struct kdev_gpu_set *gpus,
                            const struct kdev_nvidia_config *cfg)
{
        int r = 0;
        for (size_t i = 0; r == 0 && cfg->isolation.present && i < cfg->isolation.n_resources;
             i++) {
                const struct kdev_nvidia_isolated_resource *iso = &cfg->isolation.resources[i];
                const struct kdev_nvidia_replicated_resource *e =
                        kdev_nvidia_time_slicing_entry(cfg, iso->name);
                if (!e)
                        continue;
                struct kdev_nvidia_replica_share sh = kdev_nvidia_replica_share(
                        iso, base_memory(gpus, cfg, e->name), e->replicas);
                r = set(l, iso->name, "replicas", "%u", e->replicas);
                if (r == 0 && sh.memory >> 20)
                        r = set(l, iso->name, "replica.memory", "%llu", sh.memory >> 20);
                r = r ? r : set(l, iso->name, "replica.compute", "%u", sh.compute);
        }
        return r;
}

/* GFD newInvalidMigStrategyLabeler. */
static int invalid_labels(struct kdev_nvidia_labels *l, const struct kdev_gpu *first)
{
        const char *res = KDEV_NVIDIA_GPU_RESOURCE;
        char m[KDEV_GPU_NAME_MAX];
        sanitise(first->name, m, sizeof(m));
        int r = set(l, res, "product", "%s-MIG-INVALID", m);
        r = r ? r : set(l, res, "count", "0");
        r = r ? r : set(l, res, "replicas", "0");
        r = r ? r : set(l, res, "sharing-strategy", "%s", "");
        r = r ? r : set(l, res, "memory", "0");
        return r;
}

static int single_labels(struct kdev_nvidia_labels *l, const struct kdev_gpu_set *gpus,
                         const struct kdev_nvidia_config *cfg, struct kdev_err *err)
{
        const struct kdev_gpu *first = NULL;
        bool empty = false, disabled = false;
        for (size_t i = 0; i < gpus->n_gpus; i++) {
                const struct kdev_gpu *g = &gpus->gpus[i];
                if (!usable(g))
                        continue;
                if (!mig_enabled(g)) {
                        disabled = true;
                        continue;
                }
                if (!first)
                        first = g;
                empty = empty || g->n_migs == 0;
        }
        if (!first)
                return 0;
        if (empty || disabled)
                return invalid_labels(l, first) ? kdev_err_set(err, ENOMEM, "out of memory") : 0;
        struct profile *p = NULL;
        int n = collect_profiles(gpus, &p, err);
        if (n < 0)
                return n;
        int r = n != 1 ? invalid_labels(l, first) : mig_labels(l, KDEV_NVIDIA_GPU_RESOURCE, cfg, p);
        free(p);
        return r ? kdev_err_set(err, ENOMEM, "out of memory") : 0;
}

static int mixed_labels(struct kdev_nvidia_labels *l, const struct kdev_gpu_set *gpus,
                        const struct kdev_nvidia_config *cfg, struct kdev_err *err)
{
        struct profile *p = NULL;
        int n = collect_profiles(gpus, &p, err);
        if (n < 0)
                return n;
        int r = 0;
        for (int k = 0; k < n && r == 0; k++) {
                char res[sizeof(KDEV_NVIDIA_MIG_RESOURCE_PREFIX) + KDEV_NVIDIA_MIG_PROFILE_MAX];
                snprintf(res, sizeof(res), KDEV_NVIDIA_MIG_RESOURCE_PREFIX "%s", p[k].name);
                r = mig_labels(l, res, cfg, &p[k]);
        }
        free(p);
        return r ? kdev_err_set(err, ENOMEM, "out of memory") : 0;
}

int kdev_nvidia_labels_build(const struct kdev_gpu_set *gpus, const struct kdev_nvidia_config *cfg,
                             const struct kdev_nvidia_labels_options *opts,
                             struct kdev_nvidia_labels *out, struct kdev_err *err)
{
        memset(out, 0, sizeof(*out));
        size_t n_usable = 0;
        for (size_t i = 0; gpus && i < gpus->n_gpus; i++)
                n_usable += usable(&gpus->gpus[i]);
        if (n_usable == 0)
                return 0;
        const char *sysfs = opts && opts->sysfs_root && *opts->sysfs_root ? opts->sysfs_root
                                                                          : "/sys";
        int r = version_labels(out, gpus, err);
        if (r < 0)
                return r;
        bool capable = false;
        for (size_t i = 0; i < gpus->n_gpus; i++)
                capable = capable || (usable(&gpus->gpus[i]) && gpus->gpus[i].mig_capable);
        if (machine_label(out, opts ? opts->machine_type_file : NULL) < 0 ||
            mode_label(out, gpus, sysfs) < 0 ||
            set(out, "nvidia.com/mig.capable", NULL, "%s", capable ? "true" : "false") < 0 ||
            set(out, "nvidia.com/mps.capable", NULL, "%s",
                kdev_nvidia_sharing_strategy(cfg) == KDEV_NVIDIA_SHARING_MPS ? "true" : "false") < 0 || gpu_labels(out, gpus, cfg) < 0)
                return kdev_err_set(err, ENOMEM, "out of memory");
        switch (cfg->mig_strategy) {
        case KDEV_NVIDIA_MIG_NONE:
                break;
        case KDEV_NVIDIA_MIG_SINGLE:
                if (set(out, "nvidia.com/mig.strategy", NULL, "single") < 0)
                        return kdev_err_set(err, ENOMEM, "out of memory");
                r = single_labels(out, gpus, cfg, err);
                break;
        case KDEV_NVIDIA_MIG_MIXED:
                if (set(out, "nvidia.com/mig.strategy", NULL, "mixed") < 0)
                        return kdev_err_set(err, ENOMEM, "out of memory");
                r = mixed_labels(out, gpus, cfg, err);
                break;
        }
        if (r < 0)
                return r;
        if (isolation_labels(out, gpus, cfg) < 0)
                return kdev_err_set(err, ENOMEM, "out of memory");
        qsort(out->v, out->n, sizeof(out->v[0]), cmp_label);
        return 0;
}

/* --- text and file ---------------------------------------------------------- */

char *kdev_nvidia_labels_text(const struct kdev_nvidia_labels *l, bool header)
{
        size_t len = header ? strlen(KDEV_NVIDIA_LABELS_HEADER) : 0;
        for (size_t i = 0; i < l->n; i++)
                len += strlen(l->v[i].key) + strlen(l->v[i].value) + 2;
        char *s = malloc(len + 1), *p = s;
        if (!s)
                return NULL;
        if (header)
                p = stpcpy(p, KDEV_NVIDIA_LABELS_HEADER);
        for (size_t i = 0; i < l->n; i++) {
                p = stpcpy(p, l->v[i].key);
                *p++ = '=';
                p = stpcpy(p, l->v[i].value);
                *p++ = '\n';
        }
        *p = '\0';
        return s;
}

/* Whether |path| holds exactly |text|. */
static bool same_content(const char *path, const char *text)
{
        size_t want = strlen(text), got;
        char *old;
        /* larger than |text|, unreadable or not a regular file: not the same */
        if (kdev_file_read(path, "node labels file", want, 0, &old, &got, NULL) < 0)
                return false;
        bool same = got == want && memcmp(old, text, want) == 0;
        free(old);
        return same;
}

int kdev_nvidia_labels_write(const char *path, const char *text, struct kdev_err *err)
{
        return kdev_nvidia_labels_write_guarded(NULL, path, text, NULL, 0, err);
}

int kdev_nvidia_labels_write_guarded(struct kdev_file_guard *guard, const char *path,
                                     const char *text, char *aside, size_t size,
                                     struct kdev_err *err)
{
        if (aside && size)
                aside[0] = '\0';
        if (same_content(path, text))
                return 0;
        const char *slash = strrchr(path, '/');
        size_t dirlen = slash ? (size_t)(slash - path) : 0;
        const char *base = slash ? slash + 1 : path;
        char dir[PATH_MAX], tmp[PATH_MAX];
        if (!*base || dirlen >= sizeof(dir))
                return kdev_err_set(err, EINVAL, "%s: not a file path", path);
        if (slash) {
                memcpy(dir, path, dirlen ? dirlen : 1);
                dir[dirlen ? dirlen : 1] = '\0';
        } else {
                strcpy(dir, ".");
        }
        int n = snprintf(tmp, sizeof(tmp), "%s/.%s.XXXXXX", strcmp(dir, "/") ? dir : "", base);
        if (n < 0 || (size_t)n >= sizeof(tmp))
                return kdev_err_set(err, ENAMETOOLONG, "%s: path too long", path);
        int r = kdev_file_write_guarded(guard, path, tmp, text, strlen(text), 0644, false, aside,
                                        size, err);
        return r < 0 ? r : r + 1;
}

int kdev_nvidia_labels_file_text(const struct kdev_gpu_set *gpus,
                                 const struct kdev_nvidia_config *cfg,
                                 const struct kdev_nvidia_labels_options *opts, char **text,
                                 size_t *n, bool *invalid_mig, struct kdev_err *err)
{
        struct kdev_nvidia_labels l;
        *text = NULL;
        int r = kdev_nvidia_labels_build(gpus, cfg, opts, &l, err);
        const char *p = kdev_nvidia_labels_get(&l, "nvidia.com/gpu.product");
        size_t len = p ? strlen(p) : 0;
        *invalid_mig = len >= 12 && strcmp(p + len - 12, "-MIG-INVALID") == 0;
        if (r == 0 && !(*text = kdev_nvidia_labels_text(&l, true)))
                r = kdev_err_set(err, ENOMEM, "out of memory");
        *n = l.n;
        kdev_nvidia_labels_clear(&l);
        return r;
}

int kdev_nvidia_labels_invalid_mig(const struct kdev_nvidia_config *cfg,
                                   const struct kdev_nvidia_labels_options *opts, char **text,
                                   size_t *n, struct kdev_err *err)
{
        *text = NULL;
        *n = 0;
        if (cfg->mig_strategy != KDEV_NVIDIA_MIG_SINGLE)
                return 0;
        struct kdev_nvml_options nopts;
        struct kdev_nvml_discover_options dopts = {.flags = 0}; /* MIG devices, no links */
        struct kdev_nvml *lib = NULL;
        struct kdev_gpu_set *gpus = NULL;
        struct kdev_err ignored = {0};
        struct kdev_nvidia_roots roots;
        char nvml_path[PATH_MAX];
        if (kdev_nvidia_cdi_roots(cfg, &roots, &ignored) < 0)
                return 0;
        kdev_nvidia_roots_nvml(&roots, &nopts, nvml_path, sizeof(nvml_path), NULL);
        if (kdev_nvml_open(&nopts, &lib, &ignored) < 0 ||
            kdev_nvml_discover(lib, &dopts, &gpus, &ignored) < 0) {
                kdev_nvml_close(lib);
                return 0; /* no GPUs to judge: not a MIG layout failure */
        }
        bool invalid_mig = false;
        int r = kdev_nvidia_labels_file_text(gpus, cfg, opts, text, n, &invalid_mig, err);
        kdev_gpu_set_free(gpus);
        kdev_nvml_close(lib);
        if (r < 0)
                return r;
        if (!invalid_mig) {
                free(*text);
                *text = NULL;
                return 0;
        }
        return 1;
}
