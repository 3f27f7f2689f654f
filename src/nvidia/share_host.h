/* The host side of isolated replicas (nvidia/isolation.h) in kdev-plugin:
 * the files under --share-root that libkdev-share.so reads, and what
 * Allocate gives a container that requests isolated replicas.
 *
 *   <root>/lib/libkdev-share.so   copy of --share-library, mode 0644, installed
 *                                 at start (written to a temporary file, then
 *                                 renamed over the old copy)
 *   <root>/ld.so.preload          "/usr/lib/kdev/libkdev-share.so\n", mode 0644
 *   <root>/containers/            mode 0700: only root on the host gets in
 *   <root>/containers/<id>/       one region directory per container answer
 *                                 of Allocate (<id>: the allocation's time in
 *                                 nanoseconds, 16 hex digits, '-', 8 random
 *                                 hex digits: IDs sort by time), mode
 *                                 01777 (any user of the container may create
 *                                 the region; nobody removes another's files)
 *   <root>/containers/<id>/limits the container's limits (isolation.h
 *                                 kdev_nvidia_limits_text), mode 0444
 *
 * <root>, <root>/lib and <root>/containers are created with exactly their
 * mode (0755, 0755, 0700) when missing; something that is not a directory
 * there, or a file to be replaced that is not a regular file (a symbolic
 * link, a FIFO, ...), is refused with "<path>: is not a regular file (a
 * symbolic link); not replaced" (or "is not a directory"). The installed files
 * are state files (common/file.h kdev_file_guard): one changed by someone else
 * since kdev-plugin wrote it is moved aside, never deleted.
 *
 * Region directories are removed (with everything in them, never following
 * a symbolic link or crossing a mount) at start and after every Allocate of
 * an isolated replica when they belong to a container that is gone: kubelet
 * hands a device ID to one container at a time, so a region whose limits
 * file names a device ID (of the same resource) that a newer region also
 * names belongs to a container that no longer holds the device ("newer": the
 * later time in the region ID). At most one
 * region per device ID is kept, so their number is bounded by the isolated
 * replicas of the node. A directory without a limits file older than 60 s
 * (a start that stopped half-way) is removed too. The per-container CDI spec
 * of a removed region goes with it.
 */
#ifndef KDEV_NVIDIA_SHARE_HOST_H
#define KDEV_NVIDIA_SHARE_HOST_H

#include <stdbool.h>
#include <stddef.h>

#include "common/err.h"
#include "common/export.h"
#include "common/file.h"
#include "nvidia/config.h"

/* Size of a region ID with its NUL: "<16 hex digits: CLOCK_REALTIME ns>-<8
 * random hex digits>". */
#define KDEV_SHARE_REGION_ID_MAX 26

/* Largest library copied (bytes): kind "share library". */
#define KDEV_SHARE_LIBRARY_MAX (64u * 1024 * 1024)
/* A directory without a limits file is removed after this long (seconds). */
#define KDEV_SHARE_STALE_SECONDS 60

/* The default --share-library for the kdev-plugin binary |exe| (e.g.
 * /proc/self/exe resolved): "<dir of exe>/../lib/kdev/libkdev-share.so" when
 * that is a file, else "<dir of exe>/libkdev-share.so" (the build tree).
 * Into |buf| (|size| bytes). Returns 0, or -ENAMETOOLONG. */
KDEV_API int kdev_nvidia_share_library_default(const char *exe, char *buf, size_t size);

/* Installs the host side under |root| from the library at |library|: the
 * directories above, <root>/lib/libkdev-share.so and <root>/ld.so.preload
 * (each guarded by |guard|, may be NULL), then removes the region directories
 * of containers that are gone (kdev_nvidia_share_cleanup, with |cdi_dir|).
 * Errors (negative errno, |err|): kdev_file_read's for |library| ("<path>:
 * cannot read: No such file or directory", "<path>: is not a regular file (a
 * FIFO)", "<path>: the share library is larger than 67108864 bytes"), the
 * refusals above, the write errors of common/file.h, -ENOMEM. */
KDEV_API int kdev_nvidia_share_install(const char *root, const char *library, const char *cdi_dir,
                                       struct kdev_file_guard *guard, struct kdev_err *err);

/* Removes the region directories under <root>/containers of containers that
 * are gone (the rule above) and their CDI specs in |cdi_dir| (NULL: none).
 * *removed (may be NULL) counts the directories removed. Returns 0, or a
 * negative errno when <root>/containers cannot be read (a missing one is 0). A
 * directory that cannot be removed is left for the next pass. */
KDEV_API int kdev_nvidia_share_cleanup(const char *root, const char *cdi_dir, unsigned *removed,
                                       struct kdev_err *err);

/* Fills the new region directory |dir| (made by the caller, mode 01777) of
 * one container or claim: <dir>/limits with |limits_text| (mode 0444; the
 * text of kdev_nvidia_limits_text or kdev_nvidia_share_limits_text), the
 * share region itself (share/region.h, so the first process maps it and
 * the node reads usage from the start) and, with |own_preload|,
 * <dir>/ld.so.preload "/usr/lib/kdev/libkdev-share.so\n" (mode 0444), the
 * container's own preload file that the CDI hook completes with the
 * image's entries. Written atomically, without fsync (a node crash ends
 * the container). Used by kdev-plugin's Allocate of isolated replicas and
 * kdev-dra-plugin's share claims. Returns 0 or a negative errno with |err|
 * (the write errors of common/file.h, the region's, -ENAMETOOLONG). */
KDEV_API int kdev_nvidia_share_region_fill(const char *dir, const char *limits_text,
                                           bool own_preload, struct kdev_err *err);

struct kdev_cdi_edits;
/* Adds to |e| the CDI edits of a share whose region directory is |dir|
 * (filled with own_preload) under share root |root|, exactly those of
 * kdev-plugin's per-container CDI spec of isolated replicas with preload
 * "file": env KDEV_SHARE_DIR=/var/run/kdev/share; mounts (options rw|ro,
 * nosuid, nodev, bind) <root>/lib/libkdev-share.so ->
 * /usr/lib/kdev/libkdev-share.so (ro), <dir>/ld.so.preload ->
 * /etc/ld.so.preload (ro), <dir> -> /var/run/kdev/share (rw),
 * <dir>/limits -> /var/run/kdev/share/limits (ro), <dir>/ld.so.preload ->
 * /var/run/kdev/share/ld.so.preload (ro); the createRuntime hook
 * "/bin/sh -c <script> kdev-share-preload <dir>/ld.so.preload
 * /usr/lib/kdev/libkdev-share.so" that adds the image's own
 * /etc/ld.so.preload. For kdev-dra-plugin's claim CDI specs. Returns 0 or
 * a negative errno with |err| (-ENAMETOOLONG, -ENOMEM). */
KDEV_API int kdev_nvidia_share_claim_cdi_edits(const char *root, const char *dir,
                                               struct kdev_cdi_edits *e, struct kdev_err *err);

/* Removes region directory |dir| with everything in it (never following a
 * symbolic link or crossing a mount). Returns 0 (also when it does not
 * exist), -ENOTDIR when |dir| is not a directory, or the negative errno of
 * the removal. */
KDEV_API int kdev_nvidia_share_region_remove(const char *dir);

#endif /* KDEV_NVIDIA_SHARE_HOST_H */
