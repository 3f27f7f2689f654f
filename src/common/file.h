/* Whole-file reads and atomic whole-file writes, shared by every module that
 * keeps state or configuration in files (configs, kubeconfigs, CDI specs,
 * checkpoints, node labels). */
#ifndef KDEV_COMMON_FILE_H
#define KDEV_COMMON_FILE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "common/err.h"
#include "common/export.h"

/* Largest sysfs attribute read (bytes): kind "sysfs attribute". A sysfs
 * show() writes at most one page, and st_size says 4096 whatever it holds. */
#define KDEV_FILE_SYSFS_ATTR_MAX 4096

/* Names the file type of |mode| (an st_mode; only its S_IFMT bits count),
 * with its article, for error messages: "a regular file", "a directory",
 * "a FIFO", "a character device", "a block device", "a socket", "a symbolic
 * link", or "an unknown kind of file" for any other value. Returns a static
 * string (never NULL, never to be freed); no errors. */
KDEV_API const char *kdev_file_type_name(mode_t mode);

/* kdev_file_read flags. */
#define KDEV_FILE_TEXT 1u /* the file is text: a NUL byte in it is an error */

/* Reads the regular file |path| (a symbolic link is followed) into a
 * NUL-terminated buffer of at most |max| bytes (plus the NUL). |kind| names
 * what the file is in the size error ("config file", "claim checkpoint"...;
 * NULL: "file"); |flags| is 0 or KDEV_FILE_TEXT. The file is opened with
 * O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC after stat() says it is a
 * regular file, and checked again with fstat(), so a FIFO, a device (also
 * through a symbolic link, e.g. to /dev/zero) or a directory is refused
 * without blocking and without reading; the size is checked by st_size and
 * again while reading (files whose st_size is 0 or wrong, as in /proc and
 * /sys, stop at |max| + 1 bytes). On success returns 0 with |*out|
 * (malloc'd, caller frees) and |*len| (bytes, NUL not counted). Errors
 * (|*out| NULL, |*len| 0, |err| names |path|):
 *   the stat/open/read errno     "PATH: cannot read: <strerror>";
 *   -EISDIR  a directory         "PATH: is not a regular file (a directory)";
 *   -EINVAL  any other non-regular file: "PATH: is not a regular file (a
 *            FIFO)", "(a character device)", "(a block device)", "(a socket)";
 *   -EFBIG   more than |max| bytes "PATH: the KIND is larger than MAX bytes";
 *   -EILSEQ  KDEV_FILE_TEXT and a NUL byte in the file
 *            "PATH: contains a NUL byte at offset N" (N from 0, the first);
 *   -ENOMEM. */
KDEV_API int kdev_file_read(const char *path, const char *kind, size_t max, unsigned flags,
                            char **out, size_t *len, struct kdev_err *err);

/* Replaces |path| atomically with |len| bytes of |data|: a temporary file
 * made from |tmp_template| (a path in |path|'s directory ending in
 * "XXXXXX", e.g. "DIR/.NAME.XXXXXX"; copied, not modified), mode |mode|,
 * written, fsync'ed, closed and renamed over |path|; then the directory is
 * fsync'ed when |sync_dir| (an error if that fails), else best effort. The
 * directory must exist. Returns 0, or a negative errno with the temporary
 * file removed and |err| naming |path| (never the temporary file):
 * "PATH: cannot create a file in directory DIR: ..." when the temporary
 * file cannot be made, "PATH: ..." for the later steps, -ENAMETOOLONG,
 * -ENOMEM. */
KDEV_API int kdev_file_write_atomic(const char *path, const char *tmp_template, const void *data,
                                    size_t len, mode_t mode, bool sync_dir, struct kdev_err *err);

/* Flags of kdev_file_write_atomic_flags. */
#define KDEV_FILE_SYNC_DIR 1u /* a failed fsync of the directory is an error */
/* No fsync at all, of the file or of the directory: readers still see the
 * old or the new content, never a part (the rename), but a crash of the
 * node may lose the file. For files that matter only while something that
 * a crash ends anyway runs (a container's limits file, its CDI spec). */
#define KDEV_FILE_NO_FSYNC 2u

/* kdev_file_write_atomic with |flags| (0, KDEV_FILE_SYNC_DIR or
 * KDEV_FILE_NO_FSYNC): the same steps, inputs and errors; with
 * KDEV_FILE_NO_FSYNC the two fsyncs are left out. */
KDEV_API int kdev_file_write_atomic_flags(const char *path, const char *tmp_template,
                                          const void *data, size_t len, mode_t mode,
                                          unsigned flags, struct kdev_err *err);

/* 64-bit FNV-1a of |len| bytes at |data| (offset basis 0xcbf29ce484222325,
 * prime 0x100000001b3, http://www.isthe.com/chongo/tech/comp/fnv/). No
 * errors. */
KDEV_API uint64_t kdev_fnv1a64(const void *data, size_t len);

/* State files are kdev's alone: a guard remembers, per path, what kdev last
 * wrote there (or read at start, for a file it then owns): the file's
 * identity (device, inode, size, modification and change times, lstat) and
 * a 64-bit hash of its bytes (FNV-1a over 64-bit words, file.c). Before a
 * writer replaces or removes the file it asks the guard: a file that is no longer what kdev last wrote
 * (another inode, size or content: edited, replaced, turned into a link) was
 * changed by someone else, and is moved aside (renamed, never deleted) to
 * "<dir>/.<name>.foreign-<unix seconds>" ("...-<n>", n from 1, when that
 * name exists) before kdev writes its own content again from memory. The
 * aside name is a dot file that ends in neither ".json" nor ".yaml", so no
 * reader of the directory takes it for a live file (CDI registries read
 * *.json and *.yaml; NFD's local source skips dot files). A path the guard
 * has no record of (kdev has not written it since it started) is taken as
 * kdev's: a previous kdev wrote it. One guard serves any number of paths;
 * lookups are linear over a 64-bit hash of the path. Not thread-safe: one
 * thread uses a guard. */
struct kdev_file_guard_entry;
struct kdev_file_guard {
        struct kdev_file_guard_entry *v; /* owned */
        size_t n, cap;
};

/* Frees what |g| holds (NULL-safe); |g| is then empty and usable again. A
 * zeroed guard is empty and needs no init. */
KDEV_API void kdev_file_guard_clear(struct kdev_file_guard *g);

/* Records that |path| now holds |len| bytes of |data| (kdev just wrote or
 * read them): its identity is taken with lstat. |path| is copied. Returns 0,
 * the lstat errno (the record is then dropped: the next check takes the
 * file as kdev's) or -ENOMEM, with |err|. */
KDEV_API int kdev_file_guard_note(struct kdev_file_guard *g, const char *path, const void *data,
                                  size_t len, struct kdev_err *err);

/* Drops the record of |path| (after kdev removed the file); |g| may be
 * NULL. No errors. */
KDEV_API void kdev_file_guard_forget(struct kdev_file_guard *g, const char *path);

/* Before |path| is replaced or removed: whether it is still what kdev last
 * wrote. Returns 0 when it is (same identity, or the same bytes under a new
 * identity, e.g. after a touch or chmod), when it is gone, or when |g| has
 * no record of it; 1 when someone else changed it: it was renamed to the
 * aside name above, written into |aside| (|size| bytes; may be NULL) and
 * its record dropped (a regular file or a symbolic link: the link itself
 * is moved). Errors, with |err| naming |path| (the caller then must not
 * replace the file: it is not kdev's and could not be kept): -EISDIR or
 * -EINVAL when something other than a regular file or a link is there now
 * ("<path>: is not a regular file (a directory); left alone"), the lstat
 * errno, "<path>: changed by someone else; moving it
 * aside to <aside> failed: <strerror>" (the rename errno),
 * -ENAMETOOLONG. */
KDEV_API int kdev_file_guard_check(struct kdev_file_guard *g /* may be NULL: 0 */, const char *path, char *aside,
                                   size_t size, struct kdev_err *err);

/* kdev_file_write_atomic guarded by |g|: kdev_file_guard_check, the write,
 * then kdev_file_guard_note of what was written (a failed note only drops
 * the record). Returns 0 written, 1 written after the file someone else
 * changed was moved aside to |aside| (as kdev_file_guard_check), or a
 * negative errno of either step with |err| (nothing written). */
KDEV_API int kdev_file_write_guarded(struct kdev_file_guard *g, const char *path,
                                     const char *tmp_template, const void *data, size_t len,
                                     mode_t mode, bool sync_dir, char *aside, size_t size,
                                     struct kdev_err *err);

/* kdev_file_write_guarded with the |flags| of kdev_file_write_atomic_flags
 * (KDEV_FILE_SYNC_DIR, KDEV_FILE_NO_FSYNC) instead of |sync_dir|; the same
 * steps, results and errors. */
KDEV_API int kdev_file_write_guarded_flags(struct kdev_file_guard *g, const char *path,
                                           const char *tmp_template, const void *data,
                                           size_t len, mode_t mode, unsigned flags, char *aside,
                                           size_t size, struct kdev_err *err);

#endif /* KDEV_COMMON_FILE_H */
