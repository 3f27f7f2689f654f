/* The driver-root rule (see roots.h). */
#include "nvidia/roots.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

/* Copies |root| without trailing slashes ("" for "/", NULL or ""). */
static int norm(const char *root, char *buf, const char *what, struct kdev_err *err)
{
        size_t len = root ? strlen(root) : 0;
        while (len > 0 && root[len - 1] == '/')
                len--;
        if (len >= PATH_MAX)
                return kdev_err_set(err, ENAMETOOLONG, "%s too long: %s", what, root);
        memcpy(buf, root ? root : "", len);
        buf[len] = '\0';
        return 0;
}

static bool is_dir(const char *path)
{
        struct stat st;
        return stat(path[0] ? path : "/", &st) == 0 && S_ISDIR(st.st_mode);
}

int kdev_nvidia_roots_resolve(const char *driver_root, const char *dev_root,
                              const char *container_driver_root, struct kdev_nvidia_roots *out,
                              struct kdev_err *err)
{
        memset(out, 0, sizeof(*out));
        int rc = norm(driver_root, out->host_driver, "driver root", err);
        if (rc == 0)
                rc = norm(dev_root && dev_root[0] ? dev_root : driver_root, out->host_dev,
                          "dev root", err);
        if (rc < 0)
                return rc;
        if (container_driver_root && container_driver_root[0] && is_dir(container_driver_root)) {
                rc = norm(container_driver_root, out->driver, "container driver root", err);
                if (rc < 0)
                        return rc;
                char dev[PATH_MAX + 8];
                snprintf(dev, sizeof(dev), "%s/dev", out->driver);
                out->in_container = true;
                if (is_dir(dev)) {
                        /* NVIDIA: devRoot == driverRoot, one transform to the
                         * host driver root */
                        memcpy(out->dev, out->driver, sizeof(out->dev));
                        memcpy(out->dev_host, out->host_driver, sizeof(out->dev_host));
                } else {
                        out->dev[0] = '\0';
                        memcpy(out->dev_host, out->host_dev, sizeof(out->dev_host));
                }
                return 0;
        }
        memcpy(out->driver, out->host_driver, sizeof(out->driver));
        memcpy(out->dev, out->host_dev, sizeof(out->dev));
        memcpy(out->dev_host, out->host_dev, sizeof(out->dev_host));
        return 0;
}

const char *kdev_nvidia_root_text(const char *root)
{
        return root && root[0] ? root : "/";
}

int kdev_nvidia_roots_nvml(const struct kdev_nvidia_roots *roots, struct kdev_nvml_options *out,
                           char *buf, size_t size, struct kdev_err *why)
{
        memset(out, 0, sizeof(*out));
        if (!roots->driver[0])
                return 0;
        struct kdev_err e = {0};
        if (kdev_nvml_find_library(roots->driver, buf, size, &e) < 0) {
                if (why)
                        *why = e;
                return 0;
        }
        out->library_path = buf;
        return 1;
}
