/* kdev-plugin's usage sampler. See usage.h. */
#include "nvidia/usage.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "nvidia/nvidia_internal.h"
#include "nvml/loader.h"

#define MAX_TRACKED 64 /* GPUs whose last per-process sample time is kept */

struct kdev_nvidia_usage {
        char library[PATH_MAX]; /* "" : by name through the dynamic loader */
        struct kdev_nvml *lib;  /* NULL until a sample opens it */
        nvmlProcessInfo_t *procs;
        unsigned procs_cap;
        nvmlProcessUtilizationSample_t *samples;
        unsigned samples_cap;
        /* per GPU (by UUID) the newest per-process sample seen, microseconds */
        struct {
                char uuid[KDEV_USAGE_UUID_MAX];
                unsigned long long last;
        } seen[MAX_TRACKED];
};

int kdev_nvidia_usage_new(const struct kdev_nvidia_config *cfg, const char *library_path,
                          struct kdev_nvidia_usage **out, struct kdev_err *err)
{
        *out = NULL;
        struct kdev_nvidia_usage *u = calloc(1, sizeof(*u));
        if (!u)
                return kdev_err_set(err, ENOMEM, "usage sampler: out of memory");
        if (library_path) {
                snprintf(u->library, sizeof(u->library), "%s", library_path);
        } else if (cfg) {
                struct kdev_nvml_options o;
                int rc = kdev_nvidia_nvml_options(cfg, &o, u->library, sizeof(u->library), NULL,
                                                  err);
                if (rc < 0) {
                        free(u);
                        return rc;
                }
                if (!o.library_path)
                        u->library[0] = '\0';
        }
        *out = u;
        return 0;
}

static void close_lib(struct kdev_nvidia_usage *u)
{
        if (!u->lib)
                return;
        kdev_nvml_shutdown(u->lib, NULL);
        kdev_nvml_close(u->lib);
        u->lib = NULL;
}

void kdev_nvidia_usage_free(struct kdev_nvidia_usage *u)
{
        if (!u)
                return;
        close_lib(u);
        free(u->procs);
        free(u->samples);
        free(u);
}

static int open_lib(struct kdev_nvidia_usage *u, struct kdev_err *err)
{
        if (u->lib)
                return 0;
        struct kdev_nvml_options o = {.library_path = u->library[0] ? u->library : NULL};
        int rc = kdev_nvml_open(&o, &u->lib, err);
        if (rc < 0)
                return rc;
        if ((rc = kdev_nvml_init(u->lib, err)) < 0) {
                kdev_nvml_close(u->lib);
                u->lib = NULL;
        }
        return rc;
}

static unsigned long long *last_seen(struct kdev_nvidia_usage *u, const char *uuid)
{
        size_t free_slot = MAX_TRACKED;
        for (size_t i = 0; i < MAX_TRACKED; i++) {
                if (strcmp(u->seen[i].uuid, uuid) == 0)
                        return &u->seen[i].last;
                if (!u->seen[i].uuid[0] && free_slot == MAX_TRACKED)
                        free_slot = i;
        }
        if (free_slot == MAX_TRACKED)
                return NULL;
        snprintf(u->seen[free_slot].uuid, KDEV_USAGE_UUID_MAX, "%s", uuid);
        u->seen[free_slot].last = 0;
        return &u->seen[free_slot].last;
}

/* The processes of |h| into |d| (procs_known when NVML answered). */
static int take_processes(struct kdev_nvidia_usage *u, const struct kdev_nvml_api *api,
                          nvmlDevice_t h, struct kdev_usage_device *d)
{
        if (!api->nvmlDeviceGetComputeRunningProcesses)
                return 0;
        unsigned n = 0;
        nvmlReturn_t r = NVML_ERROR_INSUFFICIENT_SIZE;
        for (int tries = 0; tries < 4 && r == NVML_ERROR_INSUFFICIENT_SIZE; tries++) {
                n = u->procs_cap;
                r = api->nvmlDeviceGetComputeRunningProcesses(h, &n, u->procs);
                if (r == NVML_ERROR_INSUFFICIENT_SIZE) {
                        unsigned want = n + 8; /* room for processes starting meanwhile */
                        nvmlProcessInfo_t *p = realloc(u->procs, want * sizeof(*p));
                        if (!p)
                                return -ENOMEM;
                        u->procs = p;
                        u->procs_cap = want;
                }
        }
        if (r != NVML_SUCCESS)
                return 0;
        d->procs_known = true;
        for (unsigned i = 0; i < n; i++)
                if (kdev_usage_device_add_process(d, u->procs[i].pid, u->procs[i].usedGpuMemory,
                                                  KDEV_USAGE_NONE) < 0)
                        return -ENOMEM;
        return 0;
}

/* The newest per-process SM sample of each process of |d| since the last
 * snapshot. */
static int take_samples(struct kdev_nvidia_usage *u, const struct kdev_nvml_api *api,
                        nvmlDevice_t h, struct kdev_usage_device *d)
{
        unsigned long long *last = last_seen(u, d->uuid);
        if (!api->nvmlDeviceGetProcessUtilization || !last || !d->n_procs)
                return 0;
        unsigned n = 0;
        nvmlReturn_t r = api->nvmlDeviceGetProcessUtilization(h, NULL, &n, *last);
        if (r != NVML_ERROR_INSUFFICIENT_SIZE && r != NVML_SUCCESS)
                return 0; /* NOT_FOUND: no newer sample; NOT_SUPPORTED */
        if (n > u->samples_cap) {
                nvmlProcessUtilizationSample_t *s = realloc(u->samples, n * sizeof(*s));
                if (!s)
                        return -ENOMEM;
                u->samples = s;
                u->samples_cap = n;
        }
        n = u->samples_cap;
        if (!n || api->nvmlDeviceGetProcessUtilization(h, u->samples, &n, *last) != NVML_SUCCESS)
                return 0;
        unsigned long long newest = *last;
        for (size_t p = 0; p < d->n_procs; p++) {
                unsigned long long at = 0;
                for (unsigned i = 0; i < n; i++) {
                        const nvmlProcessUtilizationSample_t *s = &u->samples[i];
                        if (s->timeStamp > newest)
                                newest = s->timeStamp;
                        if (s->pid == d->procs[p].pid && s->timeStamp >= at) {
                                at = s->timeStamp;
                                d->procs[p].sm_util = (int)(s->smUtil > 100 ? 100 : s->smUtil);
                        }
                }
        }
        *last = newest;
        return 0;
}

static void take_memory(const struct kdev_nvml_api *api, nvmlDevice_t h,
                        struct kdev_usage_device *d)
{
        nvmlMemory_t m;
        if (api->nvmlDeviceGetMemoryInfo(h, &m) != NVML_SUCCESS)
                return;
        d->have_memory = true;
        d->mem_total = m.total;
        d->mem_used = m.used;
        d->mem_free = m.free;
}

static int take_migs(struct kdev_nvidia_usage *u, const struct kdev_nvml_api *api, nvmlDevice_t h,
                     struct kdev_usage_snapshot *out, size_t parent)
{
        unsigned max = 0;
        if (api->nvmlDeviceGetMaxMigDeviceCount(h, &max) != NVML_SUCCESS)
                return 0;
        for (unsigned j = 0; j < max; j++) {
                nvmlDevice_t m;
                if (api->nvmlDeviceGetMigDeviceHandleByIndex(h, j, &m) != NVML_SUCCESS)
                        continue;
                struct kdev_usage_device *d = kdev_usage_snapshot_add(out);
                if (!d)
                        return -ENOMEM;
                const struct kdev_usage_device *g = &out->devices[parent];
                if (api->nvmlDeviceGetUUID(m, d->uuid, sizeof(d->uuid)) != NVML_SUCCESS) {
                        out->n_devices--;
                        continue;
                }
                memcpy(d->parent_uuid, g->uuid, sizeof(d->parent_uuid));
                d->index = g->index;
                d->minor = g->minor;
                memcpy(d->pci_bus_id, g->pci_bus_id, sizeof(d->pci_bus_id));
                memcpy(d->model, g->model, sizeof(d->model));
                char name[KDEV_USAGE_NAME_MAX];
                if (api->nvmlDeviceGetName(m, name, sizeof(name)) == NVML_SUCCESS) {
                        const char *p = strstr(name, "MIG ");
                        if (p)
                                snprintf(d->profile, sizeof(d->profile), "%s", p + 4);
                }
                unsigned gi = 0;
                if (api->nvmlDeviceGetGpuInstanceId(m, &gi) == NVML_SUCCESS)
                        d->gi = (int)gi;
                take_memory(api, m, d);
                if (take_processes(u, api, m, d) < 0)
                        return -ENOMEM;
        }
        return 0;
}

int kdev_nvidia_usage_sample(struct kdev_nvidia_usage *u, struct kdev_usage_snapshot *out,
                             struct kdev_err *err)
{
        kdev_usage_snapshot_clear(out);
        int rc = open_lib(u, err);
        if (rc < 0)
                return rc;
        const struct kdev_nvml_api *api = kdev_nvml_api(u->lib);
        unsigned count = 0;
        nvmlReturn_t r = api->nvmlDeviceGetCount(&count);
        if (r != NVML_SUCCESS) {
                rc = kdev_nvml_fail(u->lib, r, err, "nvmlDeviceGetCount");
                close_lib(u);
                return rc;
        }
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        out->taken = (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
        bool mig_api = (kdev_nvml_caps(u->lib) & KDEV_NVML_CAP_MIG) != 0;
        for (unsigned i = 0; i < count; i++) {
                nvmlDevice_t h;
                if (api->nvmlDeviceGetHandleByIndex(i, &h) != NVML_SUCCESS)
                        continue;
                struct kdev_usage_device *d = kdev_usage_snapshot_add(out);
                if (!d)
                        goto oom;
                if (api->nvmlDeviceGetUUID(h, d->uuid, sizeof(d->uuid)) != NVML_SUCCESS) {
                        out->n_devices--;
                        continue;
                }
                d->index = i;
                unsigned minor = 0;
                if (api->nvmlDeviceGetMinorNumber(h, &minor) == NVML_SUCCESS)
                        d->minor = minor;
                nvmlPciInfo_t pci;
                if (api->nvmlDeviceGetPciInfo(h, &pci) == NVML_SUCCESS)
                        snprintf(d->pci_bus_id, sizeof(d->pci_bus_id), "%s", pci.busId);
                if (api->nvmlDeviceGetName(h, d->model, sizeof(d->model)) != NVML_SUCCESS)
                        d->model[0] = '\0';
                take_memory(api, h, d);
                nvmlUtilization_t ut;
                if (api->nvmlDeviceGetUtilizationRates &&
                    api->nvmlDeviceGetUtilizationRates(h, &ut) == NVML_SUCCESS) {
                        d->util = (int)(ut.gpu > 100 ? 100 : ut.gpu);
                        d->mem_util = (int)(ut.memory > 100 ? 100 : ut.memory);
                }
                unsigned cur = 0, pending = 0;
                size_t at = out->n_devices - 1;
                if (mig_api && api->nvmlDeviceGetMigMode(h, &cur, &pending) == NVML_SUCCESS &&
                    cur == 1) {
                        if (take_migs(u, api, h, out, at) < 0)
                                goto oom;
                        continue;
                }
                if (take_processes(u, api, h, d) < 0 || take_samples(u, api, h, d) < 0)
                        goto oom;
        }
        return 0;
oom:
        kdev_usage_snapshot_clear(out);
        return kdev_err_set(err, ENOMEM, "usage sample: out of memory");
}
