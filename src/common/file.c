/* Whole-file reads and atomic writes (see file.h). */
#include "common/file.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* What a file of mode |m| is, for "is not a regular file (...)". */
const char *kdev_file_type_name(mode_t mode)
{
        if (S_ISREG(mode))
                return "a regular file";
        if (S_ISDIR(mode))
                return "a directory";
        if (S_ISFIFO(mode))
                return "a FIFO";
        if (S_ISCHR(mode))
                return "a character device";
        if (S_ISBLK(mode))
                return "a block device";
        if (S_ISSOCK(mode))
                return "a socket";
        if (S_ISLNK(mode))
                return "a symbolic link";
        return "an unknown kind of file";
}

static int not_regular(const char *path, mode_t m, struct kdev_err *err)
{
        return kdev_err_set(err, S_ISDIR(m) ? EISDIR : EINVAL, "%s: is not a regular file (%s)",
                            path, kdev_file_type_name(m));
}

static int cannot_read(const char *path, int e, struct kdev_err *err)
{
        return kdev_err_set(err, e, "%s: cannot read: %s", path, strerror(e));
}

static int too_large(const char *path, const char *kind, size_t max, struct kdev_err *err)
{
        return kdev_err_set(err, EFBIG, "%s: the %s is larger than %zu bytes", path,
                            kind ? kind : "file", max);
}

int kdev_file_read(const char *path, const char *kind, size_t max, unsigned flags, char **out,
                   size_t *len, struct kdev_err *err)
{
        *out = NULL;
        *len = 0;
        struct stat st;
        /* stat first: a device or FIFO is refused without being opened */
        if (stat(path, &st) < 0)
                return cannot_read(path, errno, err);
        if (!S_ISREG(st.st_mode))
                return not_regular(path, st.st_mode, err);
        int fd = open(path, O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
        if (fd < 0)
                return cannot_read(path, errno, err);
        /* the path may have been replaced since the stat */
        if (fstat(fd, &st) < 0) {
                int e = errno;
                close(fd);
                return cannot_read(path, e, err);
        }
        if (!S_ISREG(st.st_mode)) {
                close(fd);
                return not_regular(path, st.st_mode, err);
        }
        if (st.st_size > 0 && (uintmax_t)st.st_size > max) {
                close(fd);
                return too_large(path, kind, max, err);
        }
        /* O_NONBLOCK only kept the open from blocking; read normally */
        int fl = fcntl(fd, F_GETFL);
        if (fl < 0 || fcntl(fd, F_SETFL, fl & ~O_NONBLOCK) < 0) {
                int e = errno;
                close(fd);
                return cannot_read(path, e, err);
        }
        /* room for max + 1 bytes at most: one past the limit tells "too large" */
        size_t limit = max == SIZE_MAX ? SIZE_MAX - 1 : max + 1;
        size_t cap = st.st_size > 0 ? (size_t)st.st_size + 1 : 4096, n = 0;
        if (cap > limit)
                cap = limit;
        char *buf = malloc(cap + 1);
        if (!buf) {
                close(fd);
                return kdev_err_set(err, ENOMEM, "out of memory");
        }
        for (;;) {
                if (n == cap) {
                        if (cap == limit)
                                break; /* over the limit: reported below */
                        size_t ncap = cap > limit / 2 ? limit : cap * 2;
                        char *nb = realloc(buf, ncap + 1);
                        if (!nb) {
                                free(buf);
                                close(fd);
                                return kdev_err_set(err, ENOMEM, "out of memory");
                        }
                        buf = nb;
                        cap = ncap;
                }
                ssize_t r = read(fd, buf + n, cap - n);
                if (r < 0 && errno == EINTR)
                        continue;
                if (r < 0) {
                        int e = errno;
                        free(buf);
                        close(fd);
                        return cannot_read(path, e, err);
                }
                if (r == 0)
                        break;
                n += (size_t)r;
        }
        close(fd);
        if (n > max) {
                free(buf);
                return too_large(path, kind, max, err);
        }
        const char *nul = (flags & KDEV_FILE_TEXT) ? memchr(buf, '\0', n) : NULL;
        if (nul) {
                size_t off = (size_t)(nul - buf);
                free(buf);
                return kdev_err_set(err, EILSEQ, "%s: contains a NUL byte at offset %zu", path,
                                    off);
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
        return kdev_file_write_atomic_flags(path, tmp_template, data, len, mode,
                                            sync_dir ? KDEV_FILE_SYNC_DIR : 0, err);
}

int kdev_file_write_atomic_flags(const char *path, const char *tmp_template, const void *data,
                                 size_t len, mode_t mode, unsigned flags, struct kdev_err *err)
{
        bool sync = !(flags & KDEV_FILE_NO_FSYNC);
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
        if (r == 0 && sync && fsync(fd) < 0)
                r = -errno;
        if (close(fd) < 0 && r == 0)
                r = -errno;
        if (r == 0 && rename(tmp, path) < 0)
                r = -errno;
        if (r < 0) {
                unlink(tmp);
                return kdev_err_set(err, -r, "%s: %s", path, strerror(-r));
        }
        if (!sync)
                return 0;
        /* make the rename durable */
        int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (dfd < 0 || fsync(dfd) < 0)
                r = -errno;
        if (dfd >= 0)
                close(dfd);
        if (r < 0 && (flags & KDEV_FILE_SYNC_DIR))
                return kdev_err_set(err, -r, "%s: fsync of directory %s: %s", path, dir,
                                    strerror(-r));
        return 0;
}

uint64_t kdev_fnv1a64(const void *data, size_t len)
{
        const unsigned char *p = data;
        uint64_t h = 0xcbf29ce484222325ull;

        for (size_t i = 0; i < len; i++) {
                h ^= p[i];
                h *= 0x100000001b3ull;
        }
        return h;
}

/* The guard's hash of a file's bytes (kept in memory only, never written):
 * FNV-1a over 64-bit words (each 8 bytes, little-endian, xored in, one
 * multiply by the FNV prime, then h ^= h >> 29 to bring the high bits
 * down), then byte-wise FNV-1a over the rest, from the offset basis xor the
 * length: a tenth of the multiplies of byte-wise FNV-1a, so a
 * guarded write of a large state file (the DRA checkpoint) does not spend
 * more on the hash than on the write. Detects changes as well as the file's
 * identity and size, which the guard compares first. */
static uint64_t content_hash(const void *data, size_t len)
{
        const unsigned char *p = data;
        uint64_t h = 0xcbf29ce484222325ull ^ (uint64_t)len, w;
        size_t i = 0;

        for (; i + 8 <= len; i += 8) {
                w = 0;
                for (unsigned b = 0; b < 8; b++)
                        w |= (uint64_t)p[i + b] << (8 * b);
                h ^= w;
                h *= 0x100000001b3ull;
                h ^= h >> 29;
        }
        for (; i < len; i++) {
                h ^= p[i];
                h *= 0x100000001b3ull;
        }
        return h;
}

struct kdev_file_guard_entry {
        char *path;
        uint64_t path_hash; /* kdev_fnv1a64 of path: lookups compare it first */
        dev_t dev;
        ino_t ino;
        off_t size;
        struct timespec mtime, ctime;
        uint64_t hash;
};

static struct kdev_file_guard_entry *guard_find(struct kdev_file_guard *g, const char *path)
{
        uint64_t h = kdev_fnv1a64(path, strlen(path));

        for (size_t i = 0; i < g->n; i++)
                if (g->v[i].path_hash == h && strcmp(g->v[i].path, path) == 0)
                        return &g->v[i];
        return NULL;
}

static void guard_ident(struct kdev_file_guard_entry *e, const struct stat *st)
{
        e->dev = st->st_dev;
        e->ino = st->st_ino;
        e->size = st->st_size;
        e->mtime = st->st_mtim;
        e->ctime = st->st_ctim;
}

static bool guard_same_ident(const struct kdev_file_guard_entry *e, const struct stat *st)
{
        return S_ISREG(st->st_mode) && e->dev == st->st_dev && e->ino == st->st_ino &&
               e->size == st->st_size && e->mtime.tv_sec == st->st_mtim.tv_sec &&
               e->mtime.tv_nsec == st->st_mtim.tv_nsec && e->ctime.tv_sec == st->st_ctim.tv_sec &&
               e->ctime.tv_nsec == st->st_ctim.tv_nsec;
}

void kdev_file_guard_clear(struct kdev_file_guard *g)
{
        if (!g)
                return;
        for (size_t i = 0; i < g->n; i++)
                free(g->v[i].path);
        free(g->v);
        g->v = NULL;
        g->n = g->cap = 0;
}

void kdev_file_guard_forget(struct kdev_file_guard *g, const char *path)
{
        struct kdev_file_guard_entry *e = g ? guard_find(g, path) : NULL;

        if (!e)
                return;
        free(e->path);
        *e = g->v[--g->n];
}

int kdev_file_guard_note(struct kdev_file_guard *g, const char *path, const void *data,
                         size_t len, struct kdev_err *err)
{
        struct kdev_file_guard_entry *e = guard_find(g, path);
        struct stat st;

        if (lstat(path, &st) < 0) {
                int en = errno;

                kdev_file_guard_forget(g, path);
                return kdev_err_set(err, en, "%s: cannot stat: %s", path, strerror(en));
        }
        if (!e) {
                if (g->n == g->cap) {
                        size_t ncap = g->cap ? g->cap * 2 : 4;
                        struct kdev_file_guard_entry *nv = realloc(g->v, ncap * sizeof(*nv));

                        if (!nv)
                                return kdev_err_set(err, ENOMEM, "out of memory");
                        g->v = nv;
                        g->cap = ncap;
                }
                e = &g->v[g->n];
                memset(e, 0, sizeof(*e));
                e->path = strdup(path);
                if (!e->path)
                        return kdev_err_set(err, ENOMEM, "out of memory");
                e->path_hash = kdev_fnv1a64(path, strlen(path));
                g->n++;
        }
        guard_ident(e, &st);
        e->hash = content_hash(data, len);
        return 0;
}

/* "<dir>/.<name>.foreign-<secs>[-<n>]" for |path| into |buf|. */
static int aside_name(const char *path, char *buf, size_t size)
{
        const char *slash = strrchr(path, '/');
        int dl = slash ? (int)(slash - path + 1) : 0;
        long long now = (long long)time(NULL);
        struct stat st;
        int n = snprintf(buf, size, "%.*s.%s.foreign-%lld", dl, path, path + dl, now);

        for (unsigned k = 1; n >= 0 && (size_t)n < size && k < 1000 && lstat(buf, &st) == 0; k++)
                n = snprintf(buf, size, "%.*s.%s.foreign-%lld-%u", dl, path, path + dl, now, k);
        return n < 0 || (size_t)n >= size ? -ENAMETOOLONG : 0;
}

int kdev_file_guard_check(struct kdev_file_guard *g, const char *path, char *aside, size_t size,
                          struct kdev_err *err)
{
        struct kdev_file_guard_entry *e = g ? guard_find(g, path) : NULL;
        char to[PATH_MAX];
        struct stat st;

        if (aside && size)
                aside[0] = '\0';
        if (!e)
                return 0;
        if (lstat(path, &st) < 0) {
                int en = errno;

                if (en == ENOENT) {
                        kdev_file_guard_forget(g, path);
                        return 0; /* gone: rebuilt, nothing of anyone's lost */
                }
                return kdev_err_set(err, en, "%s: cannot stat: %s", path, strerror(en));
        }
        if (guard_same_ident(e, &st))
                return 0;
        if (!S_ISREG(st.st_mode) && !S_ISLNK(st.st_mode))
                /* a directory, FIFO, device or socket is nobody's file to
                 * move: left alone, and kdev's is not written over it */
                return kdev_err_set(err, S_ISDIR(st.st_mode) ? EISDIR : EINVAL,
                                    "%s: is not a regular file (%s); left alone", path,
                                    kdev_file_type_name(st.st_mode));
        if (S_ISREG(st.st_mode) && st.st_size == e->size) {
                /* a new identity may still hold kdev's bytes (touch, chmod) */
                char *text = NULL;
                size_t n = 0;
                int r = kdev_file_read(path, NULL, (size_t)e->size, 0, &text, &n, NULL);
                bool ours = r == 0 && content_hash(text, n) == e->hash;

                free(text);
                if (r == -ENOENT) {
                        kdev_file_guard_forget(g, path);
                        return 0;
                }
                if (ours) {
                        guard_ident(e, &st);
                        return 0;
                }
        }
        if (aside_name(path, to, sizeof(to)) < 0)
                return kdev_err_set(err, ENAMETOOLONG, "%s: path too long", path);
        if (rename(path, to) < 0) {
                int en = errno;

                return kdev_err_set(err, en,
                                    "%s: changed by someone else; moving it aside to %s "
                                    "failed: %s",
                                    path, to, strerror(en));
        }
        kdev_file_guard_forget(g, path);
        if (aside && size)
                snprintf(aside, size, "%s", to);
        return 1;
}

int kdev_file_write_guarded(struct kdev_file_guard *g, const char *path, const char *tmp_template,
                            const void *data, size_t len, mode_t mode, bool sync_dir, char *aside,
                            size_t size, struct kdev_err *err)
{
        return kdev_file_write_guarded_flags(g, path, tmp_template, data, len, mode,
                                             sync_dir ? KDEV_FILE_SYNC_DIR : 0, aside, size, err);
}

int kdev_file_write_guarded_flags(struct kdev_file_guard *g, const char *path,
                                  const char *tmp_template, const void *data, size_t len,
                                  mode_t mode, unsigned flags, char *aside, size_t size,
                                  struct kdev_err *err)
{
        int moved = kdev_file_guard_check(g, path, aside, size, err);

        if (moved < 0)
                return moved;
        int r = kdev_file_write_atomic_flags(path, tmp_template, data, len, mode, flags, err);

        if (r < 0)
                return r;
        if (g)
                kdev_file_guard_note(g, path, data, len, NULL);
        return moved;
}
