/* Whole-file reads and atomic writes (see file.h). */
#include "common/file.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int kdev_file_read(const char *path, size_t max, char **out, size_t *len, struct kdev_err *err)
{
        *out = NULL;
        *len = 0;
        int fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd < 0) {
                int e = errno;
                return kdev_err_set(err, e, "%s: cannot read: %s", path, strerror(e));
        }
        struct stat st;
        if (fstat(fd, &st) < 0) {
                int e = errno;
                close(fd);
                return kdev_err_set(err, e, "%s: cannot read: %s", path, strerror(e));
        }
        if (S_ISDIR(st.st_mode)) {
                close(fd);
                return kdev_err_set(err, EISDIR, "%s: cannot read: %s", path, strerror(EISDIR));
        }
        size_t cap = 4096, n = 0;
        char *buf = malloc(cap + 1);
        if (!buf) {
                close(fd);
                return kdev_err_set(err, ENOMEM, "out of memory");
        }
        for (;;) {
                if (n == cap) {
                        if (cap > max)
                                break; /* over the limit: reported below */
                        char *nb = realloc(buf, cap * 2 + 1);
                        if (!nb) {
                                free(buf);
                                close(fd);
                                return kdev_err_set(err, ENOMEM, "out of memory");
                        }
                        buf = nb;
                        cap *= 2;
                }
                ssize_t r = read(fd, buf + n, cap - n);
                if (r < 0 && errno == EINTR)
                        continue;
                if (r < 0) {
                        int e = errno;
                        free(buf);
                        close(fd);
                        return kdev_err_set(err, e, "%s: cannot read: %s", path, strerror(e));
                }
                if (r == 0)
                        break;
                n += (size_t)r;
        }
        close(fd);
        if (n > max) {
                free(buf);
                return kdev_err_set(err, EFBIG, "%s: the file is larger than %zu bytes", path,
                                    max);
        }
        buf[n] = '\0';
        *out = buf;
        *len = n;
        return 0;
}

static int write_all(int fd, const char *s, size_t len)
{
        while (len) {
                ssize_t n = write(fd, s, len);
                if (n < 0 && errno == EINTR)
                        continue;
                if (n < 0)
                        return -errno;
                s += n;
                len -= (size_t)n;
        }
        return 0;
}

int kdev_file_write_atomic(const char *path, const char *tmp_template, const void *data,
                           size_t len, mode_t mode, bool sync_dir, struct kdev_err *err)
{
        char tmp[PATH_MAX], dir[PATH_MAX];
        size_t tlen = strlen(tmp_template);
        if (tlen >= sizeof(tmp))
                return kdev_err_set(err, ENAMETOOLONG, "%s: path too long", path);
        memcpy(tmp, tmp_template, tlen + 1);
        const char *slash = strrchr(path, '/');
        if (!slash) {
                strcpy(dir, ".");
        } else {
                size_t dlen = slash == path ? 1 : (size_t)(slash - path);
                if (dlen >= sizeof(dir))
                        return kdev_err_set(err, ENAMETOOLONG, "%s: path too long", path);
                memcpy(dir, path, dlen);
                dir[dlen] = '\0';
        }
        int fd = mkostemp(tmp, O_CLOEXEC);
        if (fd < 0) {
                int e = errno;
                return kdev_err_set(err, e, "%s: cannot create a file in directory %s: %s", path,
                                    dir, strerror(e));
        }
        int r = write_all(fd, data, len);
        if (r == 0 && fchmod(fd, mode) < 0)
                r = -errno;
        if (r == 0 && fsync(fd) < 0)
                r = -errno;
        if (close(fd) < 0 && r == 0)
                r = -errno;
        if (r == 0 && rename(tmp, path) < 0)
                r = -errno;
        if (r < 0) {
                unlink(tmp);
                return kdev_err_set(err, -r, "%s: %s", path, strerror(-r));
        }
        /* make the rename durable */
        int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (dfd < 0 || fsync(dfd) < 0)
                r = -errno;
        if (dfd >= 0)
                close(dfd);
        if (r < 0 && sync_dir)
                return kdev_err_set(err, -r, "%s: fsync of directory %s: %s", path, dir,
                                    strerror(-r));
        return 0;
}
