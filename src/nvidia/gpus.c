/* NVML discovery turned into NVML-free device records (see gpus.h). */
#include "nvidia/gpus.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nvml/discover.h"
#include "nvml/mig_config.h"

_Static_assert(KDEV_NVIDIA_UUID_MAX == KDEV_GPU_UUID_MAX, "UUID buffer of nvml/discover.h");
_Static_assert(KDEV_NVIDIA_PRODUCT_MAX == KDEV_GPU_NAME_MAX, "name buffer of nvml/discover.h");
_Static_assert(KDEV_NVIDIA_BUS_ID_MAX == KDEV_GPU_BUS_ID_MAX, "bus ID buffer of nvml/discover.h");
_Static_assert(KDEV_NVIDIA_DRIVER_VERSION_MAX ==
                       sizeof(((struct kdev_gpu_set *)0)->driver_version),
               "driver version buffer of nvml/discover.h");

/* nvmlDeviceGetArchitecture's value as the DRA `architecture` attribute
 * spells it, NULL for a value without a name here. */
static const char *arch_name(nvmlDeviceArchitecture_t a)
{
        switch (a) {
        case NVML_DEVICE_ARCH_KEPLER: return "Kepler";
        case NVML_DEVICE_ARCH_MAXWELL: return "Maxwell";
        case NVML_DEVICE_ARCH_PASCAL: return "Pascal";
        case NVML_DEVICE_ARCH_VOLTA: return "Volta";
        case NVML_DEVICE_ARCH_TURING: return "Turing";
        case NVML_DEVICE_ARCH_AMPERE: return "Ampere";
        case NVML_DEVICE_ARCH_ADA: return "Ada Lovelace";
        case NVML_DEVICE_ARCH_HOPPER: return "Hopper";
        case NVML_DEVICE_ARCH_BLACKWELL: return "Blackwell";
        default: return NULL;
        }
}

static void copy_str(char *dst, size_t size, const char *src)
{
        snprintf(dst, size, "%s", src);
}

static struct kdev_nvidia_engines engines_of(const nvmlGpuInstanceProfileInfo_t *p)
{
        return (struct kdev_nvidia_engines){
                .copy_engines = p->copyEngineCount,
                .decoders = p->decoderCount,
                .encoders = p->encoderCount,
                .jpeg_engines = p->jpegCount,
                .ofa_engines = p->ofaCount,
        };
}

static void mig_record(const struct kdev_gpu *g, const struct kdev_mig_device *m,
                       struct kdev_nvidia_mig *out)
{
        const char *prof = strstr(m->name, " MIG ");
        int rc = kdev_nvidia_dra_mig_name(g, m, out->dra_name, sizeof(out->dra_name));

        if (rc < 0) {
                out->dra_name[0] = '\0';
                out->dra_name_error = rc;
        }
        copy_str(out->uuid, sizeof(out->uuid), m->uuid);
        copy_str(out->profile, sizeof(out->profile), prof ? prof + 5 : "");
        out->gi_id = m->gi_id;
        out->ci_id = m->ci_id;
        out->memory_bytes = m->memory_ret == NVML_SUCCESS && m->memory_total > 0
                                    ? m->memory_total
                                    : m->gi_profile.memorySizeMB * 1024ULL * 1024ULL;
        out->multiprocessors = m->ci_profile.multiprocessorCount;
        out->engines = engines_of(&m->gi_profile);
        out->placement_start = m->gi_placement.start;
        out->placement_size = m->gi_placement.size;
}

static int gpu_record(const struct kdev_gpu *g, struct kdev_nvidia_gpu *out)
{
        out->index = g->index;
        out->minor = g->minor;
        out->faulted = g->fault != NVML_SUCCESS;
        copy_str(out->uuid, sizeof(out->uuid), g->uuid);
        if (kdev_nvidia_dra_gpu_name(g, out->dra_name, sizeof(out->dra_name)) < 0)
                out->dra_name[0] = '\0'; /* cannot happen: "gpu-" and 10 digits fit */
        copy_str(out->product, sizeof(out->product), g->name);
        out->brand = g->has_brand ? kdev_nvml_brand_name(g->brand) : NULL;
        out->architecture = arch_name(g->arch);
        out->cc_major = g->cc_major;
        out->cc_minor = g->cc_minor;
        copy_str(out->pcie_bus_id, sizeof(out->pcie_bus_id), g->sysfs_bus_id);
        out->numa_node = g->numa_node;
        copy_str(out->pcie_root, sizeof(out->pcie_root), g->pcie_root);
        out->memory_bytes = g->memory_ret == NVML_SUCCESS ? g->memory_total : 0;
        out->multiprocessors = g->multiprocessors;
        out->mig_enabled = g->mig_current == NVML_DEVICE_MIG_ENABLE;
        if (!out->mig_enabled || g->n_migs == 0)
                return 0;
        out->migs = calloc(g->n_migs, sizeof(*out->migs));
        if (!out->migs)
                return -ENOMEM;
        out->n_migs = g->n_migs;
        for (size_t j = 0; j < g->n_migs; j++)
                mig_record(g, &g->migs[j], &out->migs[j]);
        return 0;
}

int kdev_nvidia_gpus_from_set(const struct kdev_gpu_set *set, struct kdev_nvidia_gpus *out,
                              struct kdev_err *err)
{
        memset(out, 0, sizeof(*out));
        if (!set)
                return 0;
        copy_str(out->driver_version, sizeof(out->driver_version), set->driver_version);
        out->cuda_driver_version = set->cuda_driver_version;
        if (set->n_gpus == 0)
                return 0;
        out->gpus = calloc(set->n_gpus, sizeof(*out->gpus));
        if (!out->gpus)
                return kdev_err_set(err, ENOMEM, "GPU records: out of memory");
        out->n_gpus = set->n_gpus;
        for (size_t i = 0; i < set->n_gpus; i++) {
                if (gpu_record(&set->gpus[i], &out->gpus[i]) < 0) {
                        kdev_nvidia_gpus_clear(out);
                        return kdev_err_set(err, ENOMEM, "GPU records: out of memory");
                }
        }
        return 0;
}

/* The counts of |p| within its arrays. */
static size_t n_profiles(const struct kdev_nvml_mig_placements *p)
{
        size_t cap = sizeof(p->profiles) / sizeof(p->profiles[0]);
        return p->n_profiles < cap ? p->n_profiles : cap;
}

static unsigned n_placements(const struct kdev_nvml_mig_profile *p)
{
        return p->n_placements < KDEV_NVML_MIG_PLACEMENTS_MAX ? p->n_placements
                                                              : KDEV_NVML_MIG_PLACEMENTS_MAX;
}

static void placement_record(const struct kdev_nvml_mig_profile *prof,
                             const nvmlGpuInstancePlacement_t *pl, unsigned minor,
                             unsigned long long parent_total, struct kdev_nvidia_placement *out)
{
        if (kdev_nvidia_mig_gi_profile_name(prof, parent_total, out->profile,
                                            sizeof(out->profile), NULL) < 0)
                out->profile[0] = '\0';
        out->gi_profile_id = prof->info.id;
        out->placement_start = pl->start;
        out->placement_size = pl->size;
        out->memory_bytes = (unsigned long long)prof->info.memorySizeMB << 20;
        out->multiprocessors = prof->info.multiprocessorCount;
        out->engines = engines_of(&prof->info);
        int rc = kdev_nvidia_dra_placement_name(minor, out->profile, out->gi_profile_id,
                                                out->placement_start, out->dra_name,
                                                sizeof(out->dra_name));
        if (rc < 0) {
                out->dra_name[0] = '\0';
                out->dra_name_error = rc;
        }
}

int kdev_nvidia_gpu_placements_from(const struct kdev_nvml_mig_placements *p,
                                    struct kdev_nvidia_gpu *g, struct kdev_err *err)
{
        free(g->placements);
        g->placements = NULL;
        g->n_placements = 0;
        g->memory_slices = 0;
        size_t n = 0;
        for (size_t i = 0; i < n_profiles(p); i++)
                n += n_placements(&p->profiles[i]);
        if (n == 0)
                return 0;
        struct kdev_nvidia_placement *r = calloc(n, sizeof(*r));
        if (!r)
                return kdev_err_set(err, ENOMEM, "MIG placement records: out of memory");
        unsigned long long total = p->memory_ret == NVML_SUCCESS && p->memory_total > 0
                                           ? p->memory_total
                                           : g->memory_bytes;
        unsigned slices = 0;
        size_t k = 0;
        for (size_t i = 0; i < n_profiles(p); i++) {
                const struct kdev_nvml_mig_profile *prof = &p->profiles[i];
                for (unsigned j = 0; j < n_placements(prof); j++) {
                        const nvmlGpuInstancePlacement_t *pl = &prof->placements[j];
                        placement_record(prof, pl, g->minor, total, &r[k++]);
                        if (pl->start + pl->size > slices)
                                slices = pl->start + pl->size;
                }
        }
        g->placements = r;
        g->n_placements = n;
        g->memory_slices = slices;
        return 0;
}

void kdev_nvidia_gpus_clear(struct kdev_nvidia_gpus *g)
{
        if (!g)
                return;
        for (size_t i = 0; i < g->n_gpus; i++) {
                free(g->gpus[i].migs);
                free(g->gpus[i].placements);
        }
        free(g->gpus);
        memset(g, 0, sizeof(*g));
}

const struct kdev_nvidia_gpu *kdev_nvidia_gpus_find(const struct kdev_nvidia_gpus *g,
                                                    const char *uuid)
{
        for (size_t i = 0; g && uuid && *uuid && i < g->n_gpus; i++)
                if (strcmp(g->gpus[i].uuid, uuid) == 0)
                        return &g->gpus[i];
        return NULL;
}
