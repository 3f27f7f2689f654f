/* Whole-file reads and atomic whole-file writes, shared by every module that
 * keeps state or configuration in files (configs, kubeconfigs, CDI specs,
 * checkpoints, node labels). */
#ifndef KDEV_COMMON_FILE_H
#define KDEV_COMMON_FILE_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

#include "common/err.h"

/* Reads the regular file |path| into a NUL-terminated buffer of at most
 * |max| bytes (plus the NUL). On success returns 0 with |*out| (malloc'd,
 * caller frees) and |*len| (bytes, NUL not counted). Errors (|*out| NULL,
 * |err| names |path|): the open/read errno ("PATH: cannot read: ..."),
 * -EISDIR for a directory, -EFBIG past |max| ("PATH: the file is larger
 * than MAX bytes"), -ENOMEM. */
int kdev_file_read(const char *path, size_t max, char **out, size_t *len, struct kdev_err *err);

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
int kdev_file_write_atomic(const char *path, const char *tmp_template, const void *data,
                           size_t len, mode_t mode, bool sync_dir, struct kdev_err *err);

#endif /* KDEV_COMMON_FILE_H */
