/* Container edits of NVIDIA logical devices (see container_edits.h). */
#include "nvidia/container_edits.h"

#include <errno.h>
#include <glob.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "nvidia/mig.h"
#include "nvidia/nvidia_internal.h"

const char *const kdev_nvidia_control_nodes[KDEV_NVIDIA_N_CONTROL_NODES] = {
        "/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools", "/dev/nvidia-modeset"};


static const char *root_or_slash(const char *dev_root)
{
        return dev_root && dev_root[0] ? dev_root : "/";
}

/* Appends node |path| (looked up under |lookup|, host path under |host|)
 * unless |out| has it; with |only_if_exists| a node that does not exist
 * under |lookup| is skipped. */
static int add_node(struct kdev_container_edits *out, const char *lookup, const char *host_root,
                    const char *path, bool only_if_exists, struct kdev_err *err)
{
        for (size_t i = 0; i < out->n_nodes; i++)
                if (strcmp(out->nodes[i].path, path) == 0)
                        return 0;
        if (only_if_exists) {
                char *at = kdev_nvidia_join(root_or_slash(lookup), path);
                if (!at)
                        return kdev_err_set(err, ENOMEM, "out of memory");
                struct stat st;
                int missing = stat(at, &st) < 0;
                free(at);
                if (missing)
                        return 0;
        }
        char *host = kdev_nvidia_join(root_or_slash(host_root), path);
        if (!host)
                return kdev_err_set(err, ENOMEM, "out of memory");
        int rc = kdev_edits_add_node(out, path, host, "rw", err);
        free(host);
        return rc;
}

/* Common edits with nodes looked up under |lookup| and written under |host|. */
static int common_edits(const char *lookup, const char *host,
                        const struct kdev_nvidia_driver_files *driver_files,
                        struct kdev_container_edits *out, struct kdev_err *err)
{
        int rc = 0;
        for (size_t i = 0; rc >= 0 && i < KDEV_NVIDIA_N_CONTROL_NODES; i++)
                rc = add_node(out, lookup, host, kdev_nvidia_control_nodes[i], true, err);
        /* nvcdi's env order: the driver's (NVIDIA_CTK_LIBCUDA_DIR), then the
         * wrapper's NVIDIA_VISIBLE_DEVICES=void */
        if (rc >= 0 && driver_files)
                rc = kdev_nvidia_driver_files_edits(driver_files, out, err);
        if (rc >= 0)
                rc = kdev_edits_set_env(out, "NVIDIA_VISIBLE_DEVICES", "void", err);
        return rc < 0 ? rc : 0;
}

int kdev_nvidia_common_edits(const char *dev_root,
                             const struct kdev_nvidia_driver_files *driver_files,
                             struct kdev_container_edits *out, struct kdev_err *err)
{
        return common_edits(dev_root, dev_root, driver_files, out, err);
}

int kdev_nvidia_common_edits_at(const struct kdev_nvidia_roots *roots,
                                const struct kdev_nvidia_driver_files *driver_files,
                                struct kdev_container_edits *out, struct kdev_err *err)
{
        return common_edits(roots->dev, roots->dev_host, driver_files, out, err);
}

/* filepath.Clean of absolute |path| in place: "." and ".." resolved,
 * repeated '/' dropped. */
static void clean_abs(char *path)
{
        char out[PATH_MAX];
        size_t n = 0;
        const char *p = path;
        while (*p) {
                while (*p == '/')
                        p++;
                const char *e = strchr(p, '/');
                size_t len = e ? (size_t)(e - p) : strlen(p);
                if (len == 0)
                        break;
                if (len == 1 && p[0] == '.') {
                        /* nothing */
                } else if (len == 2 && p[0] == '.' && p[1] == '.') {
                        while (n > 0 && out[n - 1] != '/')
                                n--;
                        if (n > 0)
                                n--;
                } else if (n + 1 + len < sizeof(out)) {
                        out[n++] = '/';
                        memcpy(out + n, p, len);
                        n += len;
                }
                p += len;
        }
        if (n == 0)
                out[n++] = '/';
        out[n] = '\0';
        memcpy(path, out, n + 1);
}

/* The DRM nodes of whole GPU |d| and the hook of their by-path links (see
 * container_edits.h), looked up under |lookup|, written under |host|. */
static int drm_edits(const char *lookup, const char *host, const struct kdev_nvidia_logical *d,
                     struct kdev_container_edits *out, struct kdev_err *err)
{
        char pattern[PATH_MAX];
        const char *sysfs = d->sysfs_root && d->sysfs_root[0] ? d->sysfs_root : "/sys";
        int n = snprintf(pattern, sizeof(pattern), "%s/bus/pci/devices/%s/drm/*", sysfs,
                         d->pci_bus_id);
        if (n < 0 || (size_t)n >= sizeof(pattern))
                return 0;
        glob_t g;
        int grc = glob(pattern, 0, NULL, &g);
        if (grc == GLOB_NOSPACE)
                return kdev_err_set(err, ENOMEM, "out of memory");
        if (grc != 0)
                return 0; /* no drm directory: no nodes (nvcdi: none) */
        size_t first = out->n_nodes;
        int rc = 0;
        for (size_t i = 0; rc >= 0 && i < g.gl_pathc; i++) {
                const char *name = strrchr(g.gl_pathv[i], '/') + 1;
                char path[PATH_MAX];
                if ((size_t)snprintf(path, sizeof(path), "/dev/dri/%s", name) < sizeof(path))
                        rc = add_node(out, lookup, host, path, true, err);
        }
        globfree(&g);
        if (rc < 0 || out->n_nodes == first)
                return rc;
        static const char *const kinds[] = {"card", "render"};
        char links[2][2 * PATH_MAX + 4];
        const char *args[2];
        size_t n_links = 0;
        for (size_t k = 0; k < 2; k++) {
                char link[PATH_MAX], at[PATH_MAX], target[PATH_MAX], node[2 * PATH_MAX];
                snprintf(link, sizeof(link), "/dev/dri/by-path/pci-%s-%s", d->pci_bus_id,
                         kinds[k]);
                snprintf(at, sizeof(at), "%s%s", lookup && strcmp(lookup, "/") ? lookup : "",
                         link);
                ssize_t len = readlink(at, target, sizeof(target) - 1);
                if (len <= 0)
                        continue; /* nvcdi: a warning, no link */
                target[len] = '\0';
                if (target[0] == '/')
                        snprintf(node, sizeof(node), "%s", target);
                else
                        snprintf(node, sizeof(node), "%.*s/%s",
                                 (int)(strrchr(at, '/') - at), at, target);
                clean_abs(node);
                bool selected = false;
                for (size_t i = first; !selected && i < out->n_nodes; i++) {
                        char want[2 * PATH_MAX];
                        snprintf(want, sizeof(want), "%s%s",
                                 lookup && strcmp(lookup, "/") ? lookup : "", out->nodes[i].path);
                        clean_abs(want);
                        selected = strcmp(want, node) == 0;
                }
                if (!selected)
                        continue; /* nvcdi: not one of the GPU's nodes */
                snprintf(links[n_links], sizeof(links[n_links]), "%s::%s", target, link);
                args[n_links] = links[n_links];
                n_links++;
        }
        if (n_links == 0)
                return 0;
        return kdev_nvidia_hook_add(d->hook_path, d->disabled_hooks,
                                    KDEV_NVIDIA_HOOK_CREATE_SYMLINKS, args, n_links, out, err);
}

static int device_edits(const char *lookup, const char *host,
                        const struct kdev_nvidia_logical *d, struct kdev_container_edits *out,
                        struct kdev_err *err)
{
        char path[64];
        snprintf(path, sizeof(path), "/dev/nvidia%u", d->minor);
        int rc = add_node(out, lookup, host, path, false, err);
        if (rc >= 0 && !d->mig && d->pci_bus_id && d->pci_bus_id[0])
                rc = drm_edits(lookup, host, d, out, err);
        if (rc < 0 || !d->mig)
                return rc;
        snprintf(path, sizeof(path), KDEV_NVIDIA_CAPS_DEV_DIR "/nvidia-cap%u", d->gi_cap);
        rc = add_node(out, lookup, host, path, false, err);
        if (rc < 0)
                return rc;
        snprintf(path, sizeof(path), KDEV_NVIDIA_CAPS_DEV_DIR "/nvidia-cap%u", d->ci_cap);
        return add_node(out, lookup, host, path, false, err);
}

int kdev_nvidia_device_edits(const char *dev_root, const struct kdev_nvidia_logical *d,
                             struct kdev_container_edits *out, struct kdev_err *err)
{
        return device_edits(dev_root, dev_root, d, out, err);
}

int kdev_nvidia_device_edits_at(const struct kdev_nvidia_roots *roots,
                                const struct kdev_nvidia_logical *d,
                                struct kdev_container_edits *out, struct kdev_err *err)
{
        return device_edits(roots->dev, roots->dev_host, d, out, err);
}

int kdev_nvidia_edits_to_cdi(const struct kdev_container_edits *e, struct kdev_cdi_edits *cdi,
                             struct kdev_err *err)
{
        int rc = 0;
        for (size_t i = 0; rc >= 0 && i < e->n_env; i++) {
                char *kv = NULL;
                if (asprintf(&kv, "%s=%s", e->env[i].key, e->env[i].value) < 0)
                        return kdev_err_set(err, ENOMEM, "out of memory");
                rc = kdev_cdi_edits_add_env(cdi, kv, err);
                free(kv);
        }
        for (size_t i = 0; rc >= 0 && i < e->n_nodes; i++) {
                const struct kdev_edit_node *n = &e->nodes[i];
                struct kdev_cdi_device_node c = {
                        .path = n->path,
                        .host_path = strcmp(n->host_path, n->path) != 0 ? n->host_path : NULL,
                };
                rc = kdev_cdi_edits_add_device_node(cdi, &c, err);
        }
        for (size_t i = 0; rc >= 0 && i < e->n_mounts; i++) {
                const struct kdev_edit_mount *m = &e->mounts[i];
                struct kdev_cdi_mount c = {.host_path = m->host_path,
                                           .container_path = m->container_path,
                                           .options = m->options,
                                           .n_options = m->n_options};
                rc = kdev_cdi_edits_add_mount(cdi, &c, err);
        }
        for (size_t i = 0; rc >= 0 && i < e->n_hooks; i++) {
                const struct kdev_edit_hook *h = &e->hooks[i];
                struct kdev_cdi_hook c = {.hook_name = h->hook_name,
                                          .path = h->path,
                                          .args = h->args,
                                          .n_args = h->n_args,
                                          .env = h->env,
                                          .n_env = h->n_env};
                rc = kdev_cdi_edits_add_hook(cdi, &c, err);
        }
        return rc < 0 ? rc : 0;
}

int kdev_nvidia_device_edits_cdi(const char *dev_root, const struct kdev_nvidia_logical *d,
                                 struct kdev_cdi_edits *cdi, struct kdev_err *err)
{
        struct kdev_nvidia_roots roots;
        int rc = kdev_nvidia_roots_resolve(dev_root, NULL, NULL, &roots, err);
        return rc < 0 ? rc : kdev_nvidia_device_edits_cdi_at(&roots, d, cdi, err);
}

int kdev_nvidia_device_edits_cdi_at(const struct kdev_nvidia_roots *roots,
                                    const struct kdev_nvidia_logical *d,
                                    struct kdev_cdi_edits *cdi, struct kdev_err *err)
{
        struct kdev_container_edits ed = {0};
        int rc = kdev_nvidia_device_edits_at(roots, d, &ed, err);
        if (rc >= 0)
                rc = kdev_nvidia_edits_to_cdi(&ed, cdi, err);
        kdev_container_edits_clear(&ed);
        return rc;
}
