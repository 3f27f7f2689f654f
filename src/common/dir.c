/* Directory creation with an exact mode (see dir.h). */
#include "common/dir.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int kdev_dir_create(const char *path, mode_t mode, const char *what, struct kdev_err *err)
{
        if (!what)
                what = "directory";
        if (mkdir(path, mode) < 0) {
                int e = errno;
                if (e == EEXIST)
                        return 0;
                return kdev_err_set(err, e, "cannot create %s %s: %s", what, path, strerror(e));
        }
        /* mkdir(2) applies the umask; the mode must not depend on it. */
        if (chmod(path, mode) < 0) {
                int e = errno;
                rmdir(path);
                return kdev_err_set(err, e, "cannot set mode %04o of %s %s: %s", (unsigned)mode,
                                    what, path, strerror(e));
        }
        return 1;
}

int kdev_dir_create_all(const char *path, mode_t mode, const char *what, struct kdev_err *err)
{
        if (!path || !path[0])
                return kdev_err_set(err, EINVAL, "cannot create %s: empty path",
                                    what ? what : "directory");
        char *p = strdup(path);
        if (!p)
                return kdev_err_set(err, ENOMEM, "out of memory");
        int created = 0;
        for (char *s = p + 1;; s++) {
                if (*s != '/' && *s != '\0')
                        continue;
                char saved = *s;
                *s = '\0';
                if (s[-1] != '/') { /* "a//b", "a/": nothing to make for the empty part */
                        int r = kdev_dir_create(p, mode, what, err);
                        if (r < 0) {
                                free(p);
                                return r;
                        }
                        created += r;
                }
                *s = saved;
                if (saved == '\0')
                        break;
        }
        free(p);
        return created;
}
