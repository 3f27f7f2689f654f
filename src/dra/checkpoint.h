/* kdev DRA claim checkpoint: which ResourceClaims this node's DRA plugin has
 * prepared, kept in one JSON file under the plugin's data dir so that a
 * restarted plugin (or one after a reboot) answers NodePrepareResources and
 * NodeUnprepareResources from it (kubelet repeats both calls, e.g. after its
 * own restart, and they must be idempotent: kubernetes/dynamic-resource-
 * allocation kubeletplugin/draplugin.go; kubernetes pkg/kubelet/cm/dra/manager.go).
 *
 * File format, written compactly (version 2 once a record holds a share, a
 * MIG placement or "migPending", which a kdev that reads only version 1
 * would take for exclusive holds of devices or not know at all, so it
 * refuses the file instead; version 1 otherwise; both read):
 *   {"version":1,
 *    "checksum":"fnv1a64:<16 lower-case hex digits>",
 *    "data":{"claims":{"<claim uid>":{"namespace":"ns","name":"c",
 *        "devices":[{"requestNames":["gpu"],"pool":"node1","device":"gpu-0",
 *                    "cdiDeviceIDs":["k8s.gpu.nvidia.com/claim=<uid>-gpu-0"]}]}}}}
 *   (a device record also has "adminAccess":true when its allocation had it,
 *   and "config":{...} when a class or claim config applies to it,
 *   "share":{"shareID","memory","compute","uuid","region","policy"} for a
 *   share (plugin.h "Shares"), "mig":{"gpu","profileId","start","size",
 *   "giId","ciId","uuid"} for a MIG placement (plugin.h "Dynamic MIG"; the
 *   ids and uuid once the instance is made; "remaking":true, without them,
 *   while a restart makes it again); a claim record has
 *   "migPending":true while its MIG instances are being made or undone),
 *   dra/claim_config.h)
 * The checksum is 64-bit FNV-1a over the canonical text of "data"
 * (json_dumps with JSON_COMPACT | JSON_SORT_KEYS), so key order in the file
 * does not matter but any change of a value does.
 *
 * Ownership: the in-memory checkpoint owns a jansson object; records handed
 * out by kdev_dra_cp_get() are borrowed (valid until the entry changes).
 */
#ifndef KDEV_DRA_CHECKPOINT_H
#define KDEV_DRA_CHECKPOINT_H

#include <jansson.h>
#include <stdint.h>

#include "common/err.h"
#include "common/file.h"

#define KDEV_DRA_CP_VERSION 2   /* the newest format read and written */
#define KDEV_DRA_CP_VERSION_1 1 /* the oldest read, written without shares or MIG */
#define KDEV_DRA_CP_FILE "dra-claims.json"
/* Largest checkpoint read (bytes): kind "claim checkpoint". A record is
 * about 300 bytes, so this holds some 50 000 prepared claims. */
#define KDEV_DRA_CP_FILE_MAX (16 * 1024 * 1024)
/* Corrupt checkpoints moved aside that are kept (the newest ones). */
#define KDEV_DRA_CP_KEEP_CORRUPT 5

struct kdev_dra_cp {
        json_t *claims; /* object: claim uid -> record (see above) */
        /* each claim's canonical text as last saved (checkpoint.c): a save
         * formats only the records that changed. Records are replaced
         * (kdev_dra_cp_put, kdev_dra_cp_restore) or changed in place and
         * marked (kdev_dra_cp_touch). */
        json_t *texts;
};

/* 64-bit FNV-1a of |len| bytes at |data| (offset basis 0xcbf29ce484222325,
 * prime 0x100000001b3). */
KDEV_API uint64_t kdev_dra_fnv1a64(const void *data, size_t len);

/* Initialises |cp| empty. Returns 0 or -ENOMEM. Free with kdev_dra_cp_free. */
KDEV_API int kdev_dra_cp_init(struct kdev_dra_cp *cp);

/* Releases what |cp| holds (NULL-safe); |cp| is then empty-but-invalid. */
KDEV_API void kdev_dra_cp_free(struct kdev_dra_cp *cp);

/* Loads |path| into |cp| (zeroed, initialised or freed, never garbage;
 * its previous content is dropped). Returns:
 *   0   loaded, or the file does not exist (|cp| empty);
 *   -ENOTSUP  the file is a JSON object whose "version" is an integer above
 *        KDEV_DRA_CP_VERSION: written by a newer kdev, whose claims this one
 *        cannot read but must not forget either. The file is left alone, |cp|
 *        is empty, and |err| says "checkpoint <path> was written by a newer
 *        kdev (version <v>, this one reads 1 to 2); refusing to start so prepared
 *        claims are not forgotten". The caller does not serve;
 *   -EINVAL, -EISDIR  |path| is not a regular file (a FIFO, a device, a
 *        symbolic link to one, a socket, a directory; read through
 *        kdev_file_read, so nothing blocks): not a file kdev wrote, so it is
 *        neither read nor moved aside; |cp| is empty and |err| says "claim
 *        checkpoint <path>: is not a regular file (a FIFO); refusing to
 *        start, it is left alone". The caller does not serve;
 *   -EFBIG  the file is larger than KDEV_DRA_CP_FILE_MAX: left alone (it may
 *        hold prepared claims), |err| says "<path>: the claim checkpoint is
 *        larger than 16777216 bytes; refusing to start, it is left alone".
 *        The caller does not serve;
 *   -EBADMSG  the file was unreadable as a checkpoint (bad JSON, a NUL byte:
 *        "contains a NUL byte at offset <n>", a version that is not an
 *        integer or is below 1, checksum mismatch, malformed record) or could
 *        not be read (EACCES, EIO, ...): it was renamed to
 *        "<path>.corrupt-<unix seconds>" ("...-<n>" when that name exists)
 *        (when the rename fails the message says so), |cp| is empty, and |err|
 *        says what was wrong and where the file went. Of the moved-aside
 *        copies only the newest KDEV_DRA_CP_KEEP_CORRUPT stay (by the
 *        seconds and counter in their names); when older ones were removed
 *        the message says "(<n> older copies removed, the newest 5 kept)".
 *        The caller logs this and goes on serving;
 *   -ENOMEM.
 */
KDEV_API int kdev_dra_cp_load(struct kdev_dra_cp *cp, const char *path, struct kdev_err *err);

/* kdev_dra_cp_load that also records the file loaded in |guard| (may be
 * NULL; common/file.h): from then on it is kdev's, and a later
 * kdev_dra_cp_save_guarded moves it aside when someone else changed it. */
KDEV_API int kdev_dra_cp_load_guarded(struct kdev_dra_cp *cp, const char *path,
                                      struct kdev_file_guard *guard, struct kdev_err *err);

/* Told about each stale temporary file kdev_dra_remove_temps removed
 * (|error| 0) or could not remove (|error| the errno). */
typedef void (*kdev_dra_removed_fn)(void *arg, const char *path, int error);

/* Removes the temporary files an atomic write killed midway leaves in |dir|:
 * regular files (symbolic links and other kinds are left alone) named
 * "<prefix>XXXXXX" (|infix| NULL) or "<prefix><one or more characters>
 * <infix>XXXXXX", XXXXXX being exactly six letters or digits (mkstemp's).
 * Nothing else is touched. |removed| (may be NULL) is called for each. Call it
 * only while no writer of such files runs (at start). Returns the number of
 * files removed, 0 when |dir| does not exist, or a negative errno with |err|
 * when |dir| cannot be read. */
KDEV_API int kdev_dra_remove_temps(const char *dir, const char *prefix, const char *infix,
                          kdev_dra_removed_fn removed, void *arg, struct kdev_err *err);

/* kdev_dra_remove_temps for the temporary files of kdev_dra_cp_save(|path|):
 * "<path>.tmp.XXXXXX". Returns as kdev_dra_remove_temps, or -ENAMETOOLONG. */
KDEV_API int kdev_dra_cp_remove_temps(const char *path, kdev_dra_removed_fn removed, void *arg,
                             struct kdev_err *err);

/* Writes |cp| to |path| atomically: "<path>.tmp.XXXXXX" in the same
 * directory, fsync, rename over |path|, fsync of the directory. The directory
 * is created (0700) when missing (one level). On failure the previous file
 * stays and no temporary file is left. Returns 0 or a negative errno. */
KDEV_API int kdev_dra_cp_save(const struct kdev_dra_cp *cp, const char *path, struct kdev_err *err);

/* kdev_dra_cp_save through |guard| (may be NULL: unguarded; common/file.h
 * kdev_file_write_guarded): when the file is no longer what kdev last wrote
 * or loaded, it is first moved aside to "<dir>/.dra-claims.json.foreign-
 * <unix seconds>" (written into |aside|, |size| bytes) and the checkpoint
 * is written from |cp|, so no prepared claim is lost. Returns 0 written, 1
 * written after a move aside, or a negative errno with |err| (the file is
 * then left as it is: a foreign file that cannot be moved aside is not
 * overwritten). */
KDEV_API int kdev_dra_cp_save_guarded(const struct kdev_dra_cp *cp, const char *path,
                                      struct kdev_file_guard *guard, char *aside, size_t size,
                                      struct kdev_err *err);

/* The record of claim |uid|, borrowed, or NULL. */
KDEV_API const json_t *kdev_dra_cp_get(const struct kdev_dra_cp *cp, const char *uid);

/* Sets the record of |uid| to {namespace, name, devices} (|devices| a JSON
 * array of device records as above; its reference is taken over, also on
 * failure). Returns 0, -EINVAL (|devices| not an array of valid records) or
 * -ENOMEM. */
KDEV_API int kdev_dra_cp_put(struct kdev_dra_cp *cp, const char *uid, const char *ns, const char *name,
                    json_t *devices, struct kdev_err *err);

/* Sets the record of |uid| to |rec| as it was before (a record
 * kdev_dra_cp_get returned, taken out with kdev_dra_cp_remove; a reference
 * is added). Returns 0 or -ENOMEM. */
KDEV_API int kdev_dra_cp_restore(struct kdev_dra_cp *cp, const char *uid, json_t *rec);

/* Marks the record of |uid| changed in place (its saved text is dropped,
 * so the next save formats it again). */
KDEV_API void kdev_dra_cp_touch(struct kdev_dra_cp *cp, const char *uid);

/* Removes the record of |uid|. Returns 1 when removed, 0 when absent. */
KDEV_API int kdev_dra_cp_remove(struct kdev_dra_cp *cp, const char *uid);

/* Number of claims recorded. */
KDEV_API size_t kdev_dra_cp_count(const struct kdev_dra_cp *cp);

/* Checks one device record: object with "pool" and "device" non-empty
 * strings, "requestNames" and "cdiDeviceIDs" arrays of strings, and an
 * optional boolean "adminAccess" (true: the allocation result had
 * adminAccess, resource.k8s.io/v1 DeviceRequestAllocationResult; written
 * only when true). Returns 0 or
 * -EINVAL naming the field ("device record.pool: expected a string, got an
 * array", common/json.h). */
KDEV_API int kdev_dra_cp_check_device(const json_t *dev, struct kdev_err *err);

#endif /* KDEV_DRA_CHECKPOINT_H */
