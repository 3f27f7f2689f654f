/* NVIDIA resources from discovered GPUs (see resources.h). */
#include "nvidia/resources.h"

#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>

#include "nvidia/nvidia_internal.h"

void kdev_nvidia_rdata_free(void *data)
{
        struct kdev_nvidia_rdata *d = data;
        if (!d)
                return;
        free(d->infos);
        free(d->dev_root);
        free(d->annotation_prefix);
        free(d->imex_channels);
        free(d);
}

char *kdev_nvidia_join(const char *a, const char *b)
{
        size_t la = strlen(a), lb = strlen(b);
        char *out = malloc(la + lb + 2);
        if (!out)
                return NULL;
        size_t n = 0;
        const char *parts[2] = {a, b};
        for (size_t k = 0; k < 2; k++) {
                for (const char *p = parts[k]; *p; p++) {
                        if (*p == '/' && n > 0 && out[n - 1] == '/')
                                continue;
                        if (n == 0 && *p != '/')
                                out[n++] = '/';
                        out[n++] = *p;
                }
                if (k == 0 && (n == 0 || out[n - 1] != '/'))
                        out[n++] = '/';
        }
        while (n > 1 && out[n - 1] == '/')
                n--;
        out[n] = '\0';
        return out;
}

int kdev_nvidia_uuid4(char *buf, size_t size)
{
        unsigned char r[16];
        size_t got = 0;
        if (size < 37)
                return -ENOBUFS;
        while (got < sizeof(r)) {
                ssize_t n = getrandom(r + got, sizeof(r) - got, 0);
                if (n < 0) {
                        if (errno == EINTR)
                                continue;
                        return -errno;
                }
                got += (size_t)n;
        }
        r[6] = (unsigned char)((r[6] & 0x0f) | 0x40); /* version 4 */
        r[8] = (unsigned char)((r[8] & 0x3f) | 0x80); /* variant 10 */
        snprintf(buf, size,
                 "%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", r[0],
                 r[1], r[2], r[3], r[4], r[5], r[6], r[7], r[8], r[9], r[10], r[11], r[12], r[13],
                 r[14], r[15]);
        return 0;
}

const struct kdev_nvidia_devinfo *kdev_nvidia_device_info(const struct kdev_resource *r,
                                                          const struct kdev_device *d)
{
        if (!r || !d || r->ops != &kdev_nvidia_resource_ops)
                return NULL;
        return d->data;
}

static void warnf(const struct kdev_nvidia_build_options *opts, const char *fmt, ...)
        __attribute__((format(printf, 2, 3)));
static void warnf(const struct kdev_nvidia_build_options *opts, const char *fmt, ...)
{
        if (!opts || !opts->warn)
                return;
        char msg[512];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(msg, sizeof(msg), fmt, ap);
        va_end(ap);
        opts->warn(opts->warn_arg, msg);
}

/* Is |path| an IMEX channel node: a character device (or, for tests, a
 * regular file)? Returns 1, 0 when absent, or a negative errno. */
static int channel_exists(const char *path, bool allow_regular)
{
        struct stat st;
        if (stat(path, &st) < 0)
                return errno == ENOENT || errno == ENOTDIR ? 0 : -errno;
        if (S_ISCHR(st.st_mode) || (allow_regular && S_ISREG(st.st_mode)))
                return 1;
        return -ENODEV;
}

/* Resolves the configured IMEX channels into d->imex_channels. */
static int find_imex_channels(const struct kdev_nvidia_config *cfg,
                              const struct kdev_nvidia_build_options *opts,
                              struct kdev_nvidia_rdata *d, struct kdev_err *err)
{
        if (cfg->n_imex_channel_ids == 0)
                return 0;
        d->imex_channels = calloc(cfg->n_imex_channel_ids, sizeof(*d->imex_channels));
        if (!d->imex_channels)
                return kdev_err_set(err, ENOMEM, "out of memory");
        bool allow = opts && opts->allow_regular_files;
        for (size_t i = 0; i < cfg->n_imex_channel_ids; i++) {
                unsigned id = cfg->imex_channel_ids[i];
                char path[96];
                snprintf(path, sizeof(path), KDEV_NVIDIA_IMEX_CHANNEL_DIR "/channel%u", id);
                char *host = kdev_nvidia_join(d->dev_root, path);
                if (!host)
                        return kdev_err_set(err, ENOMEM, "out of memory");
                int rc = channel_exists(host, allow);
                const char *why = rc == -ENODEV ? "not a character device" : strerror(-rc);
                char where[PATH_MAX + 32];
                snprintf(where, sizeof(where), "%s: %s", host,
                         rc == 0 ? "no such file or directory" : why);
                if (rc <= 0 && strcmp(host, path) != 0) {
                        int rc2 = channel_exists(path, allow);
                        if (rc2 > 0)
                                rc = rc2;
                }
                free(host);
                if (rc > 0) {
                        d->imex_channels[d->n_imex_channels++] = id;
                        continue;
                }
                if (cfg->imex_required)
                        return kdev_err_set(err, ENOENT,
                                            "requested IMEX channel channel%u does not exist (%s)",
                                            id, where);
                warnf(opts, "Ignoring requested IMEX channel channel%u (%s)", id, where);
        }
        return 0;
}

int kdev_nvidia_build(const struct kdev_gpu_set *gpus, const struct kdev_nvidia_config *cfg,
                      const struct kdev_nvidia_build_options *opts, struct kdev_resource_set *out,
                      struct kdev_err *err)
{
        if (cfg->mig_strategy != KDEV_NVIDIA_MIG_NONE)
                return kdev_err_set(err, EOPNOTSUPP, "MIG strategy %s is not supported yet",
                                    kdev_nvidia_mig_strategy_name(cfg->mig_strategy));
        if (cfg->time_slicing.present)
                return kdev_err_set(err, EOPNOTSUPP, "sharing.timeSlicing is not supported yet");
        if (cfg->mps.present)
                return kdev_err_set(err, EOPNOTSUPP, "sharing.mps is not supported yet");
        for (size_t i = 0; i < out->n_resources; i++) {
                if (strcmp(out->resources[i].name, KDEV_NVIDIA_GPU_RESOURCE) == 0)
                        return kdev_err_set(err, EEXIST, "resource %s defined twice",
                                            KDEV_NVIDIA_GPU_RESOURCE);
        }

        int rc = -ENOMEM;
        size_t n_gpus = gpus ? gpus->n_gpus : 0;
        struct kdev_resource r = {0};
        struct kdev_nvidia_rdata *d = calloc(1, sizeof(*d));
        if (!d)
                return kdev_err_set(err, ENOMEM, "out of memory");
        d->strategies = cfg->device_list_strategies;
        d->id_strategy = cfg->id_strategy;
        d->pass_device_specs = cfg->pass_device_specs;
        d->gdrcopy = cfg->gdrcopy_enabled;
        d->gds = cfg->gds_enabled;
        d->mofed = cfg->mofed_enabled;
        const char *dev_root = cfg->dev_root && cfg->dev_root[0] ? cfg->dev_root : cfg->driver_root;
        if (!(d->dev_root = strdup(dev_root ? dev_root : "/")) ||
            !(d->annotation_prefix = strdup(cfg->cdi_annotation_prefix
                                                    ? cfg->cdi_annotation_prefix
                                                    : KDEV_NVIDIA_DEFAULT_CDI_ANNOTATION_PREFIX)))
                goto nomem;
        if ((rc = find_imex_channels(cfg, opts, d, err)) < 0)
                goto fail;
        rc = -ENOMEM;
        r.ops = &kdev_nvidia_resource_ops;
        r.ops_data = d;
        if (!(r.name = strdup(KDEV_NVIDIA_GPU_RESOURCE)))
                goto nomem;
        if (n_gpus) {
                d->infos = calloc(n_gpus, sizeof(*d->infos));
                r.devices = calloc(n_gpus, sizeof(*r.devices));
                if (!d->infos || !r.devices)
                        goto nomem;
        }
        for (size_t i = 0; i < n_gpus; i++) {
                const struct kdev_gpu *g = &gpus->gpus[i];
                if (g->uuid[0] == '\0') {
                        warnf(opts, "GPU %u: lost before its UUID was read; not advertised",
                              g->index);
                        continue;
                }
                struct kdev_nvidia_devinfo *info = &d->infos[d->n_infos++];
                snprintf(info->uuid, sizeof(info->uuid), "%s", g->uuid);
                snprintf(info->parent_uuid, sizeof(info->parent_uuid), "%s", g->uuid);
                info->gi = info->ci = KDEV_NVIDIA_NO_INSTANCE;
                snprintf(info->index, sizeof(info->index), "%u", g->index);
                info->minor = g->minor;
                info->replica = -1;
                struct kdev_device *dev = &r.devices[r.n_devices];
                if (!(dev->id = strdup(g->uuid)))
                        goto nomem;
                r.n_devices++;
                dev->healthy = g->fault == NVML_SUCCESS;
                dev->numa_node = g->numa_node;
                dev->data = info;
        }
        struct kdev_resource *nr = realloc(out->resources,
                                           (out->n_resources + 1) * sizeof(*nr));
        if (!nr)
                goto nomem;
        out->resources = nr;
        out->resources[out->n_resources++] = r;
        return 0;
nomem:
        rc = kdev_err_set(err, ENOMEM, "out of memory");
fail:
        if (r.ops_data) {
                kdev_resource_clear(&r); /* frees d through the ops */
        } else {
                kdev_nvidia_rdata_free(d);
        }
        return rc;
}
