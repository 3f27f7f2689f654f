/* The NVIDIA backend of kdev-dra-plugin. See dra_backend.h. */
#include "nvidia/dra_backend.h"

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>

#include "nvidia/health.h"
#include "nvidia/resources.h"
#include "nvml/discover.h"
#include "nvml/loader.h"

struct kdev_nvidia_dra_backend {
        struct kdev_nvml *lib;
        struct kdev_gpu_set *set;       /* NVML's discovery */
        struct kdev_nvidia_gpus gpus;   /* its NVML-free records */
        struct kdev_resource_set watched; /* the physical devices of the monitor */
        bool health_ready;
        uint64_t probe_interval_ms, quiet_period_ms;
        struct kdev_nvidia_health *health;
};

int kdev_nvidia_dra_backend_open(const struct kdev_nvidia_dra_backend_options *opts,
                                 struct kdev_nvidia_dra_backend **out, struct kdev_err *err)
{
        *out = NULL;
        struct kdev_nvidia_dra_backend *b = calloc(1, sizeof(*b));
        if (!b)
                return kdev_err_set(err, ENOMEM, "out of memory");
        struct kdev_nvml_options nopts = {.driver_root = opts->driver_root,
                                          .library_path = opts->nvml_library};
        int rc = kdev_nvml_open(&nopts, &b->lib, err);
        if (rc == 0)
                rc = kdev_nvml_discover(b->lib, NULL, &b->set, err);
        if (rc == 0)
                rc = kdev_nvidia_gpus_from_set(b->set, &b->gpus, err);
        if (rc < 0) {
                kdev_nvidia_dra_backend_free(b);
                return rc;
        }
        *out = b;
        return 0;
}

const struct kdev_nvidia_gpus *kdev_nvidia_dra_backend_gpus(const struct kdev_nvidia_dra_backend *b)
{
        return &b->gpus;
}

int kdev_nvidia_dra_backend_health_init(struct kdev_nvidia_dra_backend *b,
                                        const struct kdev_nvidia_config *cfg,
                                        struct kdev_err *err)
{
        if (b->health_ready)
                return kdev_err_set(err, EALREADY, "health: devices already built");
        int rc = kdev_nvidia_build(b->set, cfg, NULL, &b->watched, err);
        if (rc == 0)
                rc = kdev_nvidia_attach_physical(&b->watched, err);
        if (rc < 0) {
                kdev_resource_set_clear(&b->watched);
                return rc;
        }
        b->probe_interval_ms = (uint64_t)cfg->probe_interval * 1000;
        b->quiet_period_ms = (uint64_t)cfg->quiet_period * 1000;
        b->health_ready = true;
        return 0;
}

const struct kdev_physical *kdev_nvidia_dra_backend_find(const struct kdev_nvidia_dra_backend *b,
                                                         const char *id)
{
        return b && b->health_ready ? kdev_physical_find(&b->watched, id) : NULL;
}

int kdev_nvidia_dra_backend_health_start(struct kdev_nvidia_dra_backend *b, uv_loop_t *loop,
                                         const struct kdev_xid_policy *policy,
                                         kdev_physical_events_fn physical, void *arg,
                                         struct kdev_err *err)
{
        if (!b->health_ready)
                return kdev_err_set(err, EINVAL, "health: no devices built");
        if (b->health)
                return kdev_err_set(err, EALREADY, "health: already started");
        struct kdev_nvidia_health_options hopts = {
                .probe_interval_ms = b->probe_interval_ms,
                .quiet_period_ms = b->quiet_period_ms,
                .physical = physical,
                .physical_arg = arg,
        };
        b->health = kdev_nvidia_health_new(loop, b->lib, &b->watched, policy, &hopts, err);
        if (!b->health)
                return err && err->code ? -err->code : -ENOMEM;
        int rc = kdev_nvidia_health_start(b->health, err);
        if (rc < 0)
                kdev_nvidia_dra_backend_health_stop(b);
        return rc;
}

void kdev_nvidia_dra_backend_health_stop(struct kdev_nvidia_dra_backend *b)
{
        if (!b)
                return;
        kdev_nvidia_health_stop(b->health, NULL, NULL);
        b->health = NULL;
}

void kdev_nvidia_dra_backend_free(struct kdev_nvidia_dra_backend *b)
{
        if (!b)
                return;
        kdev_nvidia_dra_backend_health_stop(b);
        kdev_resource_set_clear(&b->watched);
        kdev_nvidia_gpus_clear(&b->gpus);
        kdev_gpu_set_free(b->set);
        kdev_nvml_close(b->lib);
        free(b);
}
