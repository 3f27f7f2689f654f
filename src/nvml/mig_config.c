/* Dynamic MIG through NVML (mig_config.h). */
#include "nvml/mig_config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* One GPU of a call: its handle and the name errors give it. */
struct gpu_ref {
        const struct kdev_nvml_api *api;
        struct kdev_nvml *lib;
        nvmlDevice_t dev;
        unsigned index;
        char uuid[KDEV_GPU_UUID_MAX];
        char label[160];                       /* "GPU 0 (GPU-...)" */
};

static bool all_digits(const char *s)
{
        if (!*s)
                return false;
        for (; *s; s++)
                if (*s < '0' || *s > '9')
                        return false;
        return true;
}

/* Looks |gpu| up (index or UUID) and checks that MIG is on. */
static int open_gpu(struct kdev_nvml *lib, const char *gpu, struct gpu_ref *g,
                    struct kdev_err *err)
{
        memset(g, 0, sizeof(*g));
        g->lib = lib;
        g->api = kdev_nvml_api(lib);
        unsigned need = KDEV_NVML_CAP_MIG | KDEV_NVML_CAP_MIG_CONFIG;
        if ((kdev_nvml_caps(lib) & need) != need)
                return kdev_err_set(err, EOPNOTSUPP,
                                    "NVML library %s lacks the dynamic MIG entry points",
                                    kdev_nvml_path(lib));
        if (!gpu || !*gpu)
                return kdev_err_set(err, EINVAL, "no GPU given");
        const struct kdev_nvml_api *api = g->api;
        nvmlReturn_t r;
        if (all_digits(gpu)) {
                errno = 0;
                unsigned long i = strtoul(gpu, NULL, 10);
                if (errno != 0 || i > 0xFFFFFFFFul)
                        return kdev_err_set(err, EINVAL, "GPU %s: index out of range", gpu);
                r = api->nvmlDeviceGetHandleByIndex((unsigned)i, &g->dev);
                if (r != NVML_SUCCESS)
                        return kdev_nvml_fail(lib, r, err, "GPU %s: nvmlDeviceGetHandleByIndex",
                                              gpu);
        } else {
                r = api->nvmlDeviceGetHandleByUUID(gpu, &g->dev);
                if (r != NVML_SUCCESS)
                        return kdev_nvml_fail(lib, r, err, "GPU %s: nvmlDeviceGetHandleByUUID",
                                              gpu);
        }
        r = api->nvmlDeviceGetIndex(g->dev, &g->index);
        if (r != NVML_SUCCESS)
                return kdev_nvml_fail(lib, r, err, "GPU %s: nvmlDeviceGetIndex", gpu);
        r = api->nvmlDeviceGetUUID(g->dev, g->uuid, sizeof(g->uuid));
        if (r != NVML_SUCCESS)
                return kdev_nvml_fail(lib, r, err, "GPU %u: nvmlDeviceGetUUID", g->index);
        snprintf(g->label, sizeof(g->label), "GPU %u (%s)", g->index, g->uuid);
        unsigned cur = 0, pending = 0;
        r = api->nvmlDeviceGetMigMode(g->dev, &cur, &pending);
        if (r == NVML_ERROR_NOT_SUPPORTED)
                return kdev_err_set(err, EOPNOTSUPP, "%s: MIG is not supported", g->label);
        if (r != NVML_SUCCESS)
                return kdev_nvml_fail(lib, r, err, "%s: nvmlDeviceGetMigMode", g->label);
        if (cur != NVML_DEVICE_MIG_ENABLE)
                return kdev_err_set(err, EOPNOTSUPP, "%s: MIG mode is disabled", g->label);
        return 0;
}

/* Runs |fn| between one kdev_nvml_init and its shutdown. */
#define WITH_NVML(lib, err, call)                                                              \
        do {                                                                                   \
                int rc_ = kdev_nvml_init((lib), (err));                                        \
                if (rc_ < 0)                                                                   \
                        return rc_;                                                            \
                rc_ = (call);                                                                  \
                int src_ = kdev_nvml_shutdown((lib), rc_ < 0 ? NULL : (err));                  \
                return rc_ < 0 ? rc_ : src_;                                                   \
        } while (0)

/* The GPU-instance profile with driver id |id|: 1 with *|index| and *|info|,
 * 0 when none, negative errno on an NVML error. */
static int find_gi_profile(const struct gpu_ref *g, unsigned id, unsigned *index,
                           nvmlGpuInstanceProfileInfo_t *info, struct kdev_err *err)
{
        for (unsigned i = 0; i < NVML_GPU_INSTANCE_PROFILE_COUNT; i++) {
                nvmlGpuInstanceProfileInfo_t pi = { 0 };
                nvmlReturn_t r = g->api->nvmlDeviceGetGpuInstanceProfileInfo(g->dev, i, &pi);
                if (r == NVML_ERROR_NOT_SUPPORTED || r == NVML_ERROR_INVALID_ARGUMENT)
                        continue;
                if (r != NVML_SUCCESS)
                        return kdev_nvml_fail(g->lib, r, err,
                                              "%s: nvmlDeviceGetGpuInstanceProfileInfo(%u)",
                                              g->label, i);
                if (pi.id == id) {
                        *index = i;
                        *info = pi;
                        return 1;
                }
        }
        return 0;
}

/* The possible placements of profile id |id| into |p| (room |max|). */
static int read_placements(const struct gpu_ref *g, unsigned id, nvmlGpuInstancePlacement_t *p,
                           unsigned max, unsigned *n, struct kdev_err *err)
{
        unsigned count = 0;
        nvmlReturn_t r = g->api->nvmlDeviceGetGpuInstancePossiblePlacements(g->dev, id, NULL,
                                                                            &count);
        if (r != NVML_SUCCESS)
                return kdev_nvml_fail(g->lib, r, err,
                                      "%s: nvmlDeviceGetGpuInstancePossiblePlacements(%u)",
                                      g->label, id);
        if (count > max)
                return kdev_err_set(err, E2BIG,
                                    "%s: GPU instance profile %u has %u placements (at most %u)",
                                    g->label, id, count, max);
        *n = 0;
        if (count == 0)
                return 0;
        r = g->api->nvmlDeviceGetGpuInstancePossiblePlacements(g->dev, id, p, &count);
        if (r != NVML_SUCCESS)
                return kdev_nvml_fail(g->lib, r, err,
                                      "%s: nvmlDeviceGetGpuInstancePossiblePlacements(%u)",
                                      g->label, id);
        *n = count;
        return 0;
}

static int placements_locked(struct kdev_nvml *lib, const char *gpu,
                             struct kdev_nvml_mig_placements *out, struct kdev_err *err)
{
        struct gpu_ref g;
        int rc = open_gpu(lib, gpu, &g, err);
        if (rc < 0)
                return rc;
        out->gpu_index = g.index;
        snprintf(out->uuid, sizeof(out->uuid), "%s", g.uuid);
        nvmlMemory_t mem = { 0 };
        out->memory_ret = g.api->nvmlDeviceGetMemoryInfo(g.dev, &mem);
        out->memory_total = out->memory_ret == NVML_SUCCESS ? mem.total : 0;
        for (unsigned i = 0; i < NVML_GPU_INSTANCE_PROFILE_COUNT; i++) {
                nvmlGpuInstanceProfileInfo_t pi = { 0 };
                nvmlReturn_t r = g.api->nvmlDeviceGetGpuInstanceProfileInfo(g.dev, i, &pi);
                if (r == NVML_ERROR_NOT_SUPPORTED || r == NVML_ERROR_INVALID_ARGUMENT)
                        continue;
                if (r != NVML_SUCCESS)
                        return kdev_nvml_fail(lib, r, err,
                                              "%s: nvmlDeviceGetGpuInstanceProfileInfo(%u)",
                                              g.label, i);
                struct kdev_nvml_mig_profile *p = &out->profiles[out->n_profiles];
                p->index = i;
                p->info = pi;
                rc = read_placements(&g, pi.id, p->placements, KDEV_NVML_MIG_PLACEMENTS_MAX,
                                     &p->n_placements, err);
                if (rc < 0)
                        return rc;
                out->n_profiles++;
        }
        return 0;
}

int kdev_nvml_mig_placements(struct kdev_nvml *lib, const char *gpu,
                             struct kdev_nvml_mig_placements *out, struct kdev_err *err)
{
        memset(out, 0, sizeof(*out));
        WITH_NVML(lib, err, placements_locked(lib, gpu, out, err));
}

/* The MIG device handle with GPU/compute instance ids |gi|/|ci|: 1 with its
 * UUID and index in |m|, 0 when none, negative errno on an NVML error. */
static int find_mig_device(const struct gpu_ref *g, struct kdev_nvml_mig_instance *m,
                           struct kdev_err *err)
{
        const struct kdev_nvml_api *api = g->api;
        unsigned max = 0;
        nvmlReturn_t r = api->nvmlDeviceGetMaxMigDeviceCount(g->dev, &max);
        if (r != NVML_SUCCESS)
                return kdev_nvml_fail(g->lib, r, err, "%s: nvmlDeviceGetMaxMigDeviceCount",
                                      g->label);
        for (unsigned j = 0; j < max; j++) {
                nvmlDevice_t mig = NULL;
                r = api->nvmlDeviceGetMigDeviceHandleByIndex(g->dev, j, &mig);
                if (r == NVML_ERROR_NOT_FOUND || r == NVML_ERROR_INVALID_ARGUMENT)
                        continue;
                if (r != NVML_SUCCESS)
                        return kdev_nvml_fail(g->lib, r, err,
                                              "%s: nvmlDeviceGetMigDeviceHandleByIndex(%u)",
                                              g->label, j);
                unsigned gi = 0, ci = 0;
                r = api->nvmlDeviceGetGpuInstanceId(mig, &gi);
                if (r == NVML_SUCCESS)
                        r = api->nvmlDeviceGetComputeInstanceId(mig, &ci);
                if (r != NVML_SUCCESS)
                        return kdev_nvml_fail(g->lib, r, err,
                                              "%s MIG device %u: instance ids", g->label, j);
                if (gi != m->gi_id || ci != m->ci_id)
                        continue;
                r = api->nvmlDeviceGetUUID(mig, m->uuid, sizeof(m->uuid));
                if (r != NVML_SUCCESS)
                        return kdev_nvml_fail(g->lib, r, err,
                                              "%s MIG device %u: nvmlDeviceGetUUID", g->label, j);
                m->mig_index = j;
                return 1;
        }
        return 0;
}

/* The compute-instance profile of GPU instance |gi| with |slices| slices
 * (shared engines): 1 with *|info|, 0 when none, negative errno. */
static int find_full_ci_profile(const struct gpu_ref *g, nvmlGpuInstance_t gi, unsigned slices,
                                nvmlComputeInstanceProfileInfo_t *info, struct kdev_err *err)
{
        for (unsigned i = 0; i < NVML_COMPUTE_INSTANCE_PROFILE_COUNT; i++) {
                nvmlComputeInstanceProfileInfo_t pi = { 0 };
                nvmlReturn_t r = g->api->nvmlGpuInstanceGetComputeInstanceProfileInfo(
                        gi, i, NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED, &pi);
                if (r == NVML_ERROR_NOT_SUPPORTED || r == NVML_ERROR_INVALID_ARGUMENT)
                        continue;
                if (r != NVML_SUCCESS)
                        return kdev_nvml_fail(
                                g->lib, r, err,
                                "%s: nvmlGpuInstanceGetComputeInstanceProfileInfo(%u)",
                                g->label, i);
                if (pi.sliceCount == slices) {
                        *info = pi;
                        return 1;
                }
        }
        return 0;
}

static int create_locked(struct kdev_nvml *lib, const char *gpu, unsigned profile_id,
                         unsigned start, struct kdev_nvml_mig_instance *out,
                         struct kdev_err *err)
{
        struct gpu_ref g;
        int rc = open_gpu(lib, gpu, &g, err);
        if (rc < 0)
                return rc;
        const struct kdev_nvml_api *api = g.api;
        nvmlGpuInstanceProfileInfo_t pi = { 0 };
        rc = find_gi_profile(&g, profile_id, &out->gi_profile_index, &pi, err);
        if (rc < 0)
                return rc;
        if (rc == 0)
                return kdev_err_set(err, EINVAL, "%s: no GPU instance profile with id %u",
                                    g.label, profile_id);
        nvmlGpuInstancePlacement_t pl[KDEV_NVML_MIG_PLACEMENTS_MAX];
        unsigned n = 0;
        rc = read_placements(&g, profile_id, pl, KDEV_NVML_MIG_PLACEMENTS_MAX, &n, err);
        if (rc < 0)
                return rc;
        const nvmlGpuInstancePlacement_t *place = NULL;
        for (unsigned i = 0; i < n && !place; i++)
                if (pl[i].start == start)
                        place = &pl[i];
        if (!place)
                return kdev_err_set(err, EINVAL, "%s: GPU instance profile %u has no placement at %u",
                                    g.label, profile_id, start);

        nvmlGpuInstance_t gi = NULL;
        nvmlReturn_t r = api->nvmlDeviceCreateGpuInstanceWithPlacement(g.dev, profile_id, place,
                                                                       &gi);
        if (r != NVML_SUCCESS)
                return kdev_nvml_fail(lib, r, err,
                                      "%s: create GPU instance profile %u placement %u",
                                      g.label, profile_id, start);
        nvmlGpuInstanceInfo_t gi_info = { 0 };
        r = api->nvmlGpuInstanceGetInfo(gi, &gi_info);
        if (r != NVML_SUCCESS) {
                rc = kdev_nvml_fail(lib, r, err, "%s: nvmlGpuInstanceGetInfo", g.label);
                goto destroy_gi;
        }
        out->gi_id = gi_info.id;
        out->gi_profile_id = gi_info.profileId;
        out->gi_placement = gi_info.placement;

        nvmlComputeInstanceProfileInfo_t ci_pi = { 0 };
        rc = find_full_ci_profile(&g, gi, pi.sliceCount, &ci_pi, err);
        if (rc == 0)
                rc = kdev_err_set(err, EOPNOTSUPP,
                                  "%s: GPU instance %u has no compute instance profile of %u "
                                  "slices",
                                  g.label, out->gi_id, pi.sliceCount);
        if (rc < 0)
                goto destroy_gi;
        nvmlComputeInstance_t ci = NULL;
        r = api->nvmlGpuInstanceCreateComputeInstance(gi, ci_pi.id, &ci);
        if (r != NVML_SUCCESS) {
                rc = kdev_nvml_fail(lib, r, err,
                                    "%s: create compute instance profile %u in GPU instance %u",
                                    g.label, ci_pi.id, out->gi_id);
                goto destroy_gi;
        }
        nvmlComputeInstanceInfo_t ci_info = { 0 };
        r = api->nvmlComputeInstanceGetInfo(ci, &ci_info);
        if (r != NVML_SUCCESS) {
                rc = kdev_nvml_fail(lib, r, err, "%s: nvmlComputeInstanceGetInfo", g.label);
                goto destroy_ci;
        }
        out->ci_id = ci_info.id;
        out->ci_profile_id = ci_info.profileId;
        out->ci_placement = ci_info.placement;
        rc = find_mig_device(&g, out, err);
        if (rc == 0)
                rc = kdev_err_set(err, ENOENT,
                                  "%s: no MIG device for GPU instance %u compute instance %u",
                                  g.label, out->gi_id, out->ci_id);
        if (rc < 0)
                goto destroy_ci;
        return 0;

destroy_ci:
        api->nvmlComputeInstanceDestroy(ci);
destroy_gi:
        api->nvmlGpuInstanceDestroy(gi);
        return rc;
}

int kdev_nvml_mig_create(struct kdev_nvml *lib, const char *gpu, unsigned gi_profile_id,
                         unsigned start, struct kdev_nvml_mig_instance *out,
                         struct kdev_err *err)
{
        memset(out, 0, sizeof(*out));
        WITH_NVML(lib, err, create_locked(lib, gpu, gi_profile_id, start, out, err));
}

static bool is_gone(nvmlReturn_t r)
{
        return r == NVML_ERROR_NOT_FOUND || r == NVML_ERROR_INVALID_ARGUMENT;
}

static int destroy_locked(struct kdev_nvml *lib, const char *gpu, unsigned gi_id,
                          unsigned ci_id, bool *gone, struct kdev_err *err)
{
        struct gpu_ref g;
        int rc = open_gpu(lib, gpu, &g, err);
        if (rc < 0)
                return rc;
        const struct kdev_nvml_api *api = g.api;
        nvmlGpuInstance_t gi = NULL;
        nvmlReturn_t r = api->nvmlDeviceGetGpuInstanceById(g.dev, gi_id, &gi);
        if (is_gone(r)) {
                *gone = true;
                return 0;
        }
        if (r != NVML_SUCCESS)
                return kdev_nvml_fail(lib, r, err, "%s: nvmlDeviceGetGpuInstanceById(%u)",
                                      g.label, gi_id);
        nvmlComputeInstance_t ci = NULL;
        r = api->nvmlGpuInstanceGetComputeInstanceById(gi, ci_id, &ci);
        if (r == NVML_SUCCESS) {
                r = api->nvmlComputeInstanceDestroy(ci);
                if (r != NVML_SUCCESS && !is_gone(r))
                        return kdev_nvml_fail(lib, r, err,
                                              "%s: destroy compute instance %u of GPU "
                                              "instance %u",
                                              g.label, ci_id, gi_id);
        } else if (!is_gone(r)) {
                return kdev_nvml_fail(lib, r, err,
                                      "%s: nvmlGpuInstanceGetComputeInstanceById(%u, %u)",
                                      g.label, gi_id, ci_id);
        }
        r = api->nvmlGpuInstanceDestroy(gi);
        if (r != NVML_SUCCESS && !is_gone(r))
                return kdev_nvml_fail(lib, r, err, "%s: destroy GPU instance %u", g.label,
                                      gi_id);
        return 0;
}

int kdev_nvml_mig_destroy(struct kdev_nvml *lib, const char *gpu, unsigned gi_id,
                          unsigned ci_id, bool *gone, struct kdev_err *err)
{
        bool dummy = false;
        if (!gone)
                gone = &dummy;
        *gone = false;
        WITH_NVML(lib, err, destroy_locked(lib, gpu, gi_id, ci_id, gone, err));
}

static int cmp_instance(const void *a, const void *b)
{
        const struct kdev_nvml_mig_instance *x = a, *y = b;
        if (x->gi_id != y->gi_id)
                return x->gi_id < y->gi_id ? -1 : 1;
        if (x->ci_id != y->ci_id)
                return x->ci_id < y->ci_id ? -1 : 1;
        return 0;
}

/* Appends the compute instances of GPU instance |gi| (info |gi_info|,
 * profile index |gi_index|) to |out|, or the GPU instance alone. */
static int list_gi(const struct gpu_ref *g, nvmlGpuInstance_t gi,
                   const nvmlGpuInstanceInfo_t *gi_info, unsigned gi_index,
                   struct kdev_nvml_mig_instances *out, struct kdev_err *err)
{
        const struct kdev_nvml_api *api = g->api;
        struct kdev_nvml_mig_instance base = {
                .gi_id = gi_info->id,
                .gi_profile_id = gi_info->profileId,
                .gi_profile_index = gi_index,
                .gi_placement = gi_info->placement,
                .ci_id = KDEV_NVML_NO_INSTANCE,
        };
        size_t first = out->n;
        for (unsigned i = 0; i < NVML_COMPUTE_INSTANCE_PROFILE_COUNT; i++) {
                nvmlComputeInstanceProfileInfo_t pi = { 0 };
                nvmlReturn_t r = api->nvmlGpuInstanceGetComputeInstanceProfileInfo(
                        gi, i, NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED, &pi);
                if (r == NVML_ERROR_NOT_SUPPORTED || r == NVML_ERROR_INVALID_ARGUMENT)
                        continue;
                if (r != NVML_SUCCESS)
                        return kdev_nvml_fail(
                                g->lib, r, err,
                                "%s: nvmlGpuInstanceGetComputeInstanceProfileInfo(%u)",
                                g->label, i);
                if (pi.instanceCount == 0)
                        continue;
                nvmlComputeInstance_t *cis = calloc(pi.instanceCount, sizeof(*cis));
                if (!cis)
                        return kdev_err_set(err, ENOMEM, "out of memory");
                unsigned count = pi.instanceCount;
                r = api->nvmlGpuInstanceGetComputeInstances(gi, pi.id, cis, &count);
                if (r != NVML_SUCCESS) {
                        free(cis);
                        return kdev_nvml_fail(g->lib, r, err,
                                              "%s: nvmlGpuInstanceGetComputeInstances(%u, %u)",
                                              g->label, gi_info->id, pi.id);
                }
                for (unsigned k = 0; k < count; k++) {
                        nvmlComputeInstanceInfo_t ci_info = { 0 };
                        r = api->nvmlComputeInstanceGetInfo(cis[k], &ci_info);
                        if (r != NVML_SUCCESS) {
                                free(cis);
                                return kdev_nvml_fail(g->lib, r, err,
                                                      "%s: nvmlComputeInstanceGetInfo",
                                                      g->label);
                        }
                        if (out->n == KDEV_NVML_MIG_INSTANCES_MAX) {
                                free(cis);
                                return kdev_err_set(err, E2BIG,
                                                    "%s: more than %d MIG instances",
                                                    g->label, KDEV_NVML_MIG_INSTANCES_MAX);
                        }
                        struct kdev_nvml_mig_instance *m = &out->items[out->n++];
                        *m = base;
                        m->ci_id = ci_info.id;
                        m->ci_profile_id = ci_info.profileId;
                        m->ci_placement = ci_info.placement;
                        int rc = find_mig_device(g, m, err);
                        if (rc < 0) {
                                free(cis);
                                return rc;
                        }
                }
                free(cis);
        }
        if (out->n == first) {
                if (out->n == KDEV_NVML_MIG_INSTANCES_MAX)
                        return kdev_err_set(err, E2BIG, "%s: more than %d MIG instances",
                                            g->label, KDEV_NVML_MIG_INSTANCES_MAX);
                out->items[out->n++] = base;
        }
        return 0;
}

static int instances_locked(struct kdev_nvml *lib, const char *gpu,
                            struct kdev_nvml_mig_instances *out, struct kdev_err *err)
{
        struct gpu_ref g;
        int rc = open_gpu(lib, gpu, &g, err);
        if (rc < 0)
                return rc;
        const struct kdev_nvml_api *api = g.api;
        out->gpu_index = g.index;
        snprintf(out->uuid, sizeof(out->uuid), "%s", g.uuid);
        for (unsigned i = 0; i < NVML_GPU_INSTANCE_PROFILE_COUNT; i++) {
                nvmlGpuInstanceProfileInfo_t pi = { 0 };
                nvmlReturn_t r = api->nvmlDeviceGetGpuInstanceProfileInfo(g.dev, i, &pi);
                if (r == NVML_ERROR_NOT_SUPPORTED || r == NVML_ERROR_INVALID_ARGUMENT)
                        continue;
                if (r != NVML_SUCCESS)
                        return kdev_nvml_fail(lib, r, err,
                                              "%s: nvmlDeviceGetGpuInstanceProfileInfo(%u)",
                                              g.label, i);
                if (pi.instanceCount == 0)
                        continue;
                nvmlGpuInstance_t *gis = calloc(pi.instanceCount, sizeof(*gis));
                if (!gis)
                        return kdev_err_set(err, ENOMEM, "out of memory");
                unsigned count = pi.instanceCount;
                r = api->nvmlDeviceGetGpuInstances(g.dev, pi.id, gis, &count);
                if (r != NVML_SUCCESS) {
                        free(gis);
                        return kdev_nvml_fail(lib, r, err, "%s: nvmlDeviceGetGpuInstances(%u)",
                                              g.label, pi.id);
                }
                for (unsigned k = 0; k < count; k++) {
                        nvmlGpuInstanceInfo_t gi_info = { 0 };
                        r = api->nvmlGpuInstanceGetInfo(gis[k], &gi_info);
                        if (r != NVML_SUCCESS) {
                                free(gis);
                                return kdev_nvml_fail(lib, r, err, "%s: nvmlGpuInstanceGetInfo",
                                                      g.label);
                        }
                        rc = list_gi(&g, gis[k], &gi_info, i, out, err);
                        if (rc < 0) {
                                free(gis);
                                return rc;
                        }
                }
                free(gis);
        }
        qsort(out->items, out->n, sizeof(out->items[0]), cmp_instance);
        return 0;
}

int kdev_nvml_mig_instances(struct kdev_nvml *lib, const char *gpu,
                            struct kdev_nvml_mig_instances *out, struct kdev_err *err)
{
        memset(out, 0, sizeof(*out));
        WITH_NVML(lib, err, instances_locked(lib, gpu, out, err));
}
