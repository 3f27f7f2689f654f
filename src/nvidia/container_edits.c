/* Container edits of NVIDIA logical devices (see container_edits.h). */
#include "nvidia/container_edits.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "nvidia/mig.h"
#include "nvidia/nvidia_internal.h"

const char *const kdev_nvidia_control_nodes[KDEV_NVIDIA_N_CONTROL_NODES] = {
        "/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools", "/dev/nvidia-modeset"};

static const char *const cdi_env[] = {"NVIDIA_VISIBLE_DEVICES=void"};

static const char *root_or_slash(const char *dev_root)
{
        return dev_root && dev_root[0] ? dev_root : "/";
}

/* Appends node |path| (host path under |dev_root|) unless |out| has it;
 * with |only_if_exists| a host path that does not exist is skipped. */
static int add_node(struct kdev_nvidia_edits *out, const char *dev_root, const char *path,
                    bool only_if_exists, struct kdev_err *err)
{
        for (size_t i = 0; i < out->n_nodes; i++)
                if (strcmp(out->nodes[i].path, path) == 0)
                        return 0;
        char *host = kdev_nvidia_join(root_or_slash(dev_root), path);
        if (!host)
                return kdev_err_set(err, ENOMEM, "out of memory");
        struct stat st;
        if (only_if_exists && stat(host, &st) < 0) {
                free(host);
                return 0;
        }
        char *p = strdup(path);
        struct kdev_nvidia_dev_node *n =
                p ? realloc(out->nodes, (out->n_nodes + 1) * sizeof(*n)) : NULL;
        if (!n) {
                free(p);
                free(host);
                return kdev_err_set(err, ENOMEM, "out of memory");
        }
        out->nodes = n;
        out->nodes[out->n_nodes++] =
                (struct kdev_nvidia_dev_node){.path = p, .host_path = host, .permissions = "rw"};
        return 0;
}

int kdev_nvidia_common_edits(const char *dev_root,
                             const struct kdev_nvidia_driver_files *driver_files,
                             struct kdev_nvidia_edits *out, struct kdev_err *err)
{
        memset(out, 0, sizeof(*out));
        out->env = cdi_env;
        out->n_env = sizeof(cdi_env) / sizeof(cdi_env[0]);
        out->driver_files = driver_files;
        for (size_t i = 0; i < KDEV_NVIDIA_N_CONTROL_NODES; i++) {
                int rc = add_node(out, dev_root, kdev_nvidia_control_nodes[i], true, err);
                if (rc < 0)
                        return rc;
        }
        return 0;
}

int kdev_nvidia_device_edits(const char *dev_root, const struct kdev_nvidia_logical *d,
                             struct kdev_nvidia_edits *out, struct kdev_err *err)
{
        char path[64];
        snprintf(path, sizeof(path), "/dev/nvidia%u", d->minor);
        int rc = add_node(out, dev_root, path, false, err);
        if (rc < 0 || !d->mig)
                return rc;
        snprintf(path, sizeof(path), KDEV_NVIDIA_CAPS_DEV_DIR "/nvidia-cap%u", d->gi_cap);
        rc = add_node(out, dev_root, path, false, err);
        if (rc < 0)
                return rc;
        snprintf(path, sizeof(path), KDEV_NVIDIA_CAPS_DEV_DIR "/nvidia-cap%u", d->ci_cap);
        return add_node(out, dev_root, path, false, err);
}

int kdev_nvidia_edits_to_cdi(const struct kdev_nvidia_edits *e, struct kdev_cdi_edits *cdi,
                             struct kdev_err *err)
{
        int rc = 0;
        for (size_t i = 0; rc >= 0 && i < e->n_env; i++)
                rc = kdev_cdi_edits_add_env(cdi, e->env[i], err);
        for (size_t i = 0; rc >= 0 && i < e->n_nodes; i++) {
                const struct kdev_nvidia_dev_node *n = &e->nodes[i];
                struct kdev_cdi_device_node c = {
                        .path = n->path,
                        .host_path = strcmp(n->host_path, n->path) != 0 ? n->host_path : NULL,
                };
                rc = kdev_cdi_edits_add_device_node(cdi, &c, err);
        }
        if (rc >= 0 && e->driver_files)
                rc = kdev_nvidia_driver_files_edits(e->driver_files, cdi, err);
        return rc < 0 ? rc : 0;
}

int kdev_nvidia_device_edits_cdi(const char *dev_root, const struct kdev_nvidia_logical *d,
                                 struct kdev_cdi_edits *cdi, struct kdev_err *err)
{
        struct kdev_nvidia_edits ed = {0};
        int rc = kdev_nvidia_device_edits(dev_root, d, &ed, err);
        if (rc >= 0)
                rc = kdev_nvidia_edits_to_cdi(&ed, cdi, err);
        kdev_nvidia_edits_clear(&ed);
        return rc;
}

void kdev_nvidia_edits_clear(struct kdev_nvidia_edits *e)
{
        if (!e)
                return;
        for (size_t i = 0; i < e->n_nodes; i++) {
                free(e->nodes[i].path);
                free(e->nodes[i].host_path);
        }
        free(e->nodes);
        memset(e, 0, sizeof(*e));
}
