/* Whole-file reads and atomic whole-file writes, shared by every module that
 * keeps state or configuration in files (configs, kubeconfigs, CDI specs,
 * checkpoints, node labels). */
#ifndef KDEV_COMMON_FILE_H
#define KDEV_COMMON_FILE_H

#include <stdbool.h>
#include <stddef.h>
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

#endif /* KDEV_COMMON_FILE_H */
