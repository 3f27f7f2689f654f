/* CDI spec of the NVIDIA GPUs (see cdi_spec.h). */
#include "nvidia/cdi_spec.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nvidia/container_edits.h"
#include "nvidia/driver_files.h"
#include "nvidia/mig.h"
#include "nvidia/nvidia_internal.h"
#include "nvidia/resources.h"

bool kdev_nvidia_cdi_needed(const struct kdev_nvidia_config *cfg)
{
        return (cfg->device_list_strategies & KDEV_NVIDIA_LIST_CDI) != 0;
}

int kdev_nvidia_cdi_roots(const struct kdev_nvidia_config *cfg, struct kdev_nvidia_roots *out,
                          struct kdev_err *err)
{
        return kdev_nvidia_roots_resolve(cfg->driver_root, cfg->dev_root,
                                         cfg->container_driver_root, out, err);
}

/* The CDI device of MIG device |m| of |g|: named by its UUID or "i:j", with
 * the parent's /dev/nvidia<minor> and the GI and CI access capability nodes
 * (nvcdi's MIG device edits). A missing mig-minors line fails as the build
 * does. */
static int add_mig(struct kdev_cdi_spec *spec, const struct kdev_nvidia_config *cfg,
                   const struct kdev_nvidia_roots *roots, const struct kdev_nvidia_mig_minors *minors,
                   const struct kdev_gpu *g, const struct kdev_mig_device *m,
                   struct kdev_err *err)
{
        unsigned gi_cap = 0, ci_cap = 0;
        int rc = kdev_nvidia_mig_caps(minors, g->minor, m->gi_id, m->ci_id, &gi_cap, &ci_cap,
                                      err);
        if (rc < 0)
                return rc;
        char name[KDEV_GPU_UUID_MAX];
        if (cfg->id_strategy == KDEV_NVIDIA_ID_INDEX)
                snprintf(name, sizeof(name), "%u:%u", g->index, m->index);
        else
                snprintf(name, sizeof(name), "%s", m->uuid);
        struct kdev_cdi_device *dev = kdev_cdi_spec_add_device(spec, name, err);
        if (!dev)
                return -(err && err->code ? err->code : ENOMEM);
        struct kdev_nvidia_logical d = {
                .minor = g->minor, .mig = true, .gi_cap = gi_cap, .ci_cap = ci_cap};
        return kdev_nvidia_device_edits_cdi_at(roots, &d, kdev_cdi_device_edits(dev), err);
}

int kdev_nvidia_cdi_driver_files(const struct kdev_gpu_set *gpus,
                                 const struct kdev_nvidia_config *cfg,
                                 struct kdev_nvidia_driver_files *out, struct kdev_err *err)
{
        struct kdev_nvidia_roots roots;
        memset(out, 0, sizeof(*out));
        int rc = kdev_nvidia_cdi_roots(cfg, &roots, err);
        if (rc < 0)
                return rc;
        struct kdev_nvidia_driver_files_options o = {
                .driver_root = roots.host_driver,
                .lookup_root = kdev_nvidia_root_text(roots.driver),
                .driver_version = gpus ? gpus->driver_version : NULL,
                .hook_path = cfg->nvidia_ctk_path,
                .disabled_hooks = cfg->cdi_disabled_hooks,
                .features = cfg->cdi_features,
        };
        return kdev_nvidia_driver_files_find(&o, out, err);
}

/* kdev_nvidia_cdi_spec; the driver files found go to |found| (may be NULL). */
static int build_spec(const struct kdev_gpu_set *gpus, const struct kdev_nvidia_config *cfg,
                      struct kdev_nvidia_driver_files *found, struct kdev_cdi_spec **out,
                      struct kdev_err *err)
{
        *out = NULL;
        if (found)
                memset(found, 0, sizeof(*found));
        size_t named = 0;
        for (size_t i = 0; gpus && i < gpus->n_gpus; i++)
                named += gpus->gpus[i].uuid[0] != '\0';
        if (named == 0)
                return kdev_err_set(err, ENODEV, "no GPUs for a CDI spec");

        struct kdev_nvidia_roots roots;
        int rc = kdev_nvidia_cdi_roots(cfg, &roots, err);
        if (rc < 0)
                return rc;
        struct kdev_cdi_spec *spec = kdev_cdi_spec_new(KDEV_NVIDIA_CDI_KIND, err);
        if (!spec)
                return -(err && err->code ? err->code : ENOMEM);
        /* env, control nodes, then the driver's libraries, binaries,
         * firmware, sockets and hooks (container_edits.h) */
        struct kdev_nvidia_driver_files files = {0};
        struct kdev_container_edits common = {0};
        rc = kdev_nvidia_cdi_driver_files(gpus, cfg, &files, err);
        if (rc >= 0)
                rc = kdev_nvidia_common_edits_at(&roots, &files, &common, err);
        if (rc >= 0)
                rc = kdev_nvidia_edits_to_cdi(&common, kdev_cdi_spec_edits(spec), err);
        kdev_container_edits_clear(&common);
        if (found && rc >= 0)
                *found = files;
        else
                kdev_nvidia_driver_files_clear(&files);

        /* MIG devices (migStrategy single/mixed): their capability nodes */
        bool mig = cfg->mig_strategy != KDEV_NVIDIA_MIG_NONE;
        struct kdev_nvidia_mig_minors minors = {0};
        bool any_mig = false;
        for (size_t i = 0; mig && i < gpus->n_gpus; i++)
                any_mig |= gpus->gpus[i].mig_current == NVML_DEVICE_MIG_ENABLE &&
                           gpus->gpus[i].n_migs > 0;
        if (rc >= 0 && any_mig)
                rc = kdev_nvidia_mig_minors_read(cfg->proc_root, &minors, err);

        for (size_t i = 0; rc >= 0 && i < gpus->n_gpus; i++) {
                const struct kdev_gpu *g = &gpus->gpus[i];
                if (g->uuid[0] == '\0' || g->fault != NVML_SUCCESS)
                        continue; /* minor unknown: no device node to name */
                char name[KDEV_GPU_UUID_MAX];
                if (mig && g->mig_current == NVML_DEVICE_MIG_ENABLE) {
                        for (size_t k = 0; rc >= 0 && k < g->n_migs; k++)
                                rc = add_mig(spec, cfg, &roots, &minors, g, &g->migs[k], err);
                        continue;
                }
                if (cfg->id_strategy == KDEV_NVIDIA_ID_INDEX)
                        snprintf(name, sizeof(name), "%u", g->index);
                else
                        snprintf(name, sizeof(name), "%s", g->uuid);
                struct kdev_cdi_device *dev = kdev_cdi_spec_add_device(spec, name, err);
                if (!dev) {
                        rc = -(err && err->code ? err->code : ENOMEM);
                        break;
                }
                struct kdev_nvidia_logical d = {.minor = g->minor,
                                                .pci_bus_id = g->sysfs_bus_id,
                                                .sysfs_root = gpus->sysfs_root,
                                                .hook_path = cfg->nvidia_ctk_path,
                                                .disabled_hooks = cfg->cdi_disabled_hooks};
                rc = kdev_nvidia_device_edits_cdi_at(&roots, &d, kdev_cdi_device_edits(dev),
                                                     err);
        }
        kdev_nvidia_mig_minors_clear(&minors);
        if (rc >= 0) {
                /* "all": the union of the GPUs' edits, in GPU order */
                size_t n_gpus = spec->n_devices;
                struct kdev_cdi_device *dev = kdev_cdi_spec_add_device(spec, "all", err);
                if (!dev)
                        rc = -(err && err->code ? err->code : ENOMEM);
                for (size_t i = 0; rc >= 0 && i < n_gpus; i++)
                        rc = kdev_cdi_edits_merge(kdev_cdi_device_edits(dev),
                                                  kdev_cdi_device_edits(spec->devices[i]), err);
        }
        if (rc >= 0)
                rc = kdev_cdi_spec_validate(spec, err);
        if (rc < 0) {
                kdev_nvidia_driver_files_clear(found);
                kdev_cdi_spec_free(spec);
                return rc;
        }
        *out = spec;
        return 0;
}

int kdev_nvidia_cdi_spec(const struct kdev_gpu_set *gpus, const struct kdev_nvidia_config *cfg,
                         struct kdev_cdi_spec **out, struct kdev_err *err)
{
        return build_spec(gpus, cfg, NULL, out, err);
}

static int spec_file(char *buf, size_t size, struct kdev_err *err)
{
        int n = kdev_cdi_spec_file_name(KDEV_NVIDIA_CDI_KIND, buf, size, err);
        return n < 0 ? n : 0;
}

int kdev_nvidia_cdi_write(const struct kdev_gpu_set *gpus, const struct kdev_nvidia_config *cfg,
                          char *path, size_t size, struct kdev_err *err)
{
        return kdev_nvidia_cdi_write_ex(gpus, cfg, path, size, NULL, err);
}

int kdev_nvidia_cdi_write_ex(const struct kdev_gpu_set *gpus, const struct kdev_nvidia_config *cfg,
                             char *path, size_t size, struct kdev_nvidia_driver_files *found,
                             struct kdev_err *err)
{
        int rc = kdev_nvidia_cdi_write_guarded(gpus, cfg, path, size, found, NULL, NULL, 0, err);
        return rc < 0 ? rc : 0;
}

int kdev_nvidia_cdi_write_guarded(const struct kdev_gpu_set *gpus,
                                  const struct kdev_nvidia_config *cfg, char *path, size_t size,
                                  struct kdev_nvidia_driver_files *found,
                                  struct kdev_file_guard *guard, char *aside, size_t asize,
                                  struct kdev_err *err)
{
        if (aside && asize)
                aside[0] = '\0';
        if (found)
                memset(found, 0, sizeof(*found));
        char file[128];
        int rc = spec_file(file, sizeof(file), err);
        if (rc < 0)
                return rc;
        if (path && size)
                snprintf(path, size, "%s/%s", cfg->cdi_dir, file);
        struct kdev_cdi_spec *spec = NULL;
        rc = build_spec(gpus, cfg, found, &spec, err);
        if (rc == -ENODEV) {
                rc = kdev_cdi_spec_remove_guarded(cfg->cdi_dir, file, guard, aside, asize, err);
                return rc < 0 ? rc : rc == 2 ? 1 : 0;
        }
        if (rc < 0)
                return rc;
        rc = kdev_cdi_spec_write_guarded(spec, cfg->cdi_dir, file, guard, aside, asize, err);
        kdev_cdi_spec_free(spec);
        if (rc < 0 && found)
                kdev_nvidia_driver_files_clear(found);
        return rc;
}

int kdev_nvidia_cdi_remove(const struct kdev_nvidia_config *cfg, struct kdev_err *err)
{
        return kdev_nvidia_cdi_remove_guarded(cfg, NULL, NULL, 0, err);
}

int kdev_nvidia_cdi_remove_guarded(const struct kdev_nvidia_config *cfg,
                                   struct kdev_file_guard *guard, char *aside, size_t asize,
                                   struct kdev_err *err)
{
        char file[128];
        int rc = spec_file(file, sizeof(file), err);
        if (rc < 0)
                return rc;
        return kdev_cdi_spec_remove_guarded(cfg->cdi_dir, file, guard, aside, asize, err);
}
