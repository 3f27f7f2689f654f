/* Directory creation with an exact mode, whatever the process umask. Every
 * directory kdev creates goes through here (device-plugin directory, DRA
 * plugin and registration directories, CDI spec directories, the DRA claim
 * checkpoint's directory). */
#ifndef KDEV_COMMON_DIR_H
#define KDEV_COMMON_DIR_H

#include <sys/types.h>

#include "common/err.h"
#include "common/export.h"

/* Modes of the directories kdev creates (README "Files and modes"). An
 * existing directory keeps its mode: it is not kdev's. */
#define KDEV_DIR_MODE_PLUGIN 0750     /* device-plugin, DRA plugin and registration
                                       * directories: kubelet's mkdir -p mode for
                                       * /var/lib/kubelet/device-plugins */
#define KDEV_DIR_MODE_CDI 0755        /* CDI spec directories: the spec files are
                                       * 0644, for every CDI consumer to read */
#define KDEV_DIR_MODE_PRIVATE 0700    /* state only kdev reads (claim checkpoint) */

/* Creates the directory |path| with mode |mode| (permission bits, e.g. 0750):
 * mkdir(2) and then chmod(2) to exactly |mode|, so the umask has no say.
 * |what| names the directory in errors ("device plugin directory"; NULL:
 * "directory"). Returns 1 when it created |path|, 0 when something already
 * exists there (left as it is, mode included; the caller checks that it is a
 * directory), or a negative errno with |err| set to "cannot create WHAT PATH:
 * STRERROR" (a failed chmod: "cannot set mode 0750 of WHAT PATH: ..."; the
 * directory just created is removed again). */
KDEV_API int kdev_dir_create(const char *path, mode_t mode, const char *what, struct kdev_err *err);

/* mkdir -p: creates every missing component of |path| (absolute or relative)
 * as kdev_dir_create() does, each with exactly |mode|; existing components
 * are left as they are. Returns the number of components it created (0 when
 * |path| already existed) or a negative errno with |err| naming the component
 * that failed (a component that is a file: -ENOTDIR from the next mkdir, or
 * -EEXIST never: an existing last component is success, so the caller checks
 * it is a directory). -EINVAL for an empty |path|, -ENOMEM. */
KDEV_API int kdev_dir_create_all(const char *path, mode_t mode, const char *what,
                                 struct kdev_err *err);

#endif /* KDEV_COMMON_DIR_H */
