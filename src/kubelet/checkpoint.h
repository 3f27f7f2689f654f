/* kubelet device manager checkpoint (`kubelet_internal_checkpoint`):
 * decoding, verification and writing, byte-compatible with kubelet.
 *
 * Follows Kubernetes pkg/kubelet/cm/devicemanager/checkpoint (checkpoint.go,
 * checkpointv1.go), pkg/kubelet/checkpointmanager/checksum and
 * k8s.io/utils/dump (dump.ForHash, hashed by pkg/util/hash):
 *
 *   {"Data":{"PodDeviceEntries":[{"PodUID":..,"ContainerName":..,
 *     "ResourceName":..,"DeviceIDs":{"<numa>":[..]},"AllocResp":"<base64>"}]|null,
 *     "RegisteredDevices":{"<resource>":[..]}},"Checksum":<uint32 as number>}
 *
 * The checksum is FNV-1a 32-bit over the go-spew text of "Data"
 * (kdev_ckpt_spew() reproduces that text), so JSON null and empty lists are
 * different values: the structures below keep a `*_null` flag next to every
 * list or map that Go would hold as a nil slice/map.
 *
 * Two layouts are read: the current one (DeviceIDs keyed by NUMA node, kubelet
 * >= 1.20) and the pre-1.20 one (DeviceIDs a flat list, kubelet checkpointv1.go),
 * which is converted like kubelet does: all devices under NUMA node 0. The
 * pre-1.20 checksum is the one kubelet 1.19 wrote: the same algorithm over the
 * text with a flat `DeviceIDs:([]string)[..]` and the 1.19 type names.
 */
#ifndef KDEV_KUBELET_CHECKPOINT_H
#define KDEV_KUBELET_CHECKPOINT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/err.h"
#include "common/export.h"

/* File name of the checkpoint inside the device-plugin directory. */
#define KDEV_CKPT_FILE "kubelet_internal_checkpoint"

/* Device IDs of one allocation on one NUMA node (-1 = device without
 * topology). */
struct kdev_ckpt_numa {
        int64_t node;
        char **ids;
        size_t n_ids;
        bool ids_null; /* JSON null (Go nil slice); then n_ids == 0 */
};

/* One PodDevicesEntry: the devices of one resource given to one container. */
struct kdev_ckpt_entry {
        char *pod_uid;
        char *container_name;
        char *resource_name;
        struct kdev_ckpt_numa *numa; /* sorted by node, unique nodes */
        size_t n_numa;
        bool numa_null;       /* DeviceIDs was null */
        uint8_t *alloc_resp;  /* protobuf v1beta1.ContainerAllocateResponse */
        size_t alloc_resp_len;
        bool alloc_resp_null; /* AllocResp was null (Go nil []byte) */
};

/* One RegisteredDevices member: a resource and its healthy device IDs. */
struct kdev_ckpt_resource {
        char *name;
        char **ids;
        size_t n_ids;
        bool ids_null;
};

enum kdev_ckpt_layout {
        KDEV_CKPT_LAYOUT_CURRENT = 0, /* DeviceIDs keyed by NUMA node (kubelet >= 1.20) */
        KDEV_CKPT_LAYOUT_V1 = 1,      /* flat DeviceIDs list (kubelet <= 1.19) */
};

struct kdev_checkpoint {
        struct kdev_ckpt_entry *entries;
        size_t n_entries;
        bool entries_null;                    /* PodDeviceEntries was null */
        struct kdev_ckpt_resource *registered; /* sorted by name, unique */
        size_t n_registered;
        bool registered_null;                 /* RegisteredDevices was null */
        uint64_t checksum;                    /* as stored in the file (decode) */
        enum kdev_ckpt_layout layout;         /* layout read (decode) */
        char **notes;                         /* decode remarks (absent keys...) */
        size_t n_notes;
};

/* Frees everything inside |cp| (not |cp| itself) and zeroes it. NULL-safe. */
KDEV_API void kdev_ckpt_clear(struct kdev_checkpoint *cp);

/* Produces the go-spew text kubelet hashes, for |cp| in |layout| (for
 * KDEV_CKPT_LAYOUT_V1 every entry must have exactly one NUMA node, 0, as the
 * decoder converts it; the text then has the flat list and the 1.19 type
 * names, with checkpointv1.go's string replacements). Returns a malloc'ed
 * string (caller frees) or NULL on allocation failure. */
KDEV_API char *kdev_ckpt_spew(const struct kdev_checkpoint *cp, enum kdev_ckpt_layout layout);

/* FNV-1a 32-bit hash of |len| bytes at |data| (Go hash/fnv New32a). */
KDEV_API uint32_t kdev_fnv1a32(const void *data, size_t len);

/* Checksum of |cp| as kubelet computes it for |layout| (FNV-1a over
 * kdev_ckpt_spew()). Returns the value (< 2^32), or -ENOMEM. */
KDEV_API int64_t kdev_ckpt_checksum(const struct kdev_checkpoint *cp, enum kdev_ckpt_layout layout);

/* Decodes checkpoint JSON |text| (|len| bytes) into |cp| (cleared first; on
 * failure it is left cleared). Does NOT verify the checksum (see
 * kdev_ckpt_verify()). Returns 0, or a negative errno with |err| saying
 * precisely what is wrong:
 *   -EBADMSG  not JSON: "not JSON: line L column C: <parser message>";
 *   -EINVAL   "missing key \"Data\"", "missing key \"Checksum\"", or a wrong
 *             type with its key path, e.g.
 *             "Data.PodDeviceEntries[0].DeviceIDs[\"0\"][1]: expected a string, got a number",
 *             a NUMA key that is not an int64, AllocResp that is not base64
 *             ("...AllocResp: not valid base64: ...") or not a
 *             v1beta1.ContainerAllocateResponse;
 *   -ENOMEM.
 * Absent inner keys (Data.PodDeviceEntries, Data.RegisteredDevices, entry
 * members) decode as null/empty like Go's encoding/json and add a note to
 * cp->notes. Unknown keys are ignored (also noted). */
KDEV_API int kdev_ckpt_decode(const char *text, size_t len, struct kdev_checkpoint *cp,
                              struct kdev_err *err);

/* Largest checkpoint file read (bytes): kind "kubelet checkpoint". */
#define KDEV_CKPT_FILE_MAX (16 * 1024 * 1024)

/* Reads the file |path| with kdev_file_read (a regular file of at most
 * KDEV_CKPT_FILE_MAX bytes, no NUL bytes) and decodes it (see
 * kdev_ckpt_decode()). Errors of the read name the path ("<path>: cannot
 * read: No such file or directory" with -ENOENT, "<path>: is not a regular
 * file (a FIFO)" with -EINVAL or -EISDIR, "<path>: the kubelet checkpoint is
 * larger than 16777216 bytes" with -EFBIG, "<path>: contains a NUL byte at
 * offset <n>" with -EILSEQ); those of the decoding do not (callers add the
 * path). */
KDEV_API int kdev_ckpt_read(const char *path, struct kdev_checkpoint *cp, struct kdev_err *err);

/* Verifies the stored checksum of a decoded |cp| against the one computed for
 * its layout. Returns 0 and stores the computed value in |*computed| (may be
 * NULL); -EBADMSG with "checksum mismatch: stored X, computed Y"; -ENOMEM. */
KDEV_API int kdev_ckpt_verify(const struct kdev_checkpoint *cp, uint32_t *computed,
                              struct kdev_err *err);

/* Encodes |cp| in the current layout exactly like kubelet (Go encoding/json
 * of checkpoint.Data: no spaces, keys Data{PodDeviceEntries,
 * RegisteredDevices}, Checksum; map keys sorted as Go sorts their text),
 * setting cp->checksum to the computed checksum first. No trailing newline.
 * Returns a malloc'ed string (caller frees) or NULL on allocation failure. */
KDEV_API char *kdev_ckpt_encode(struct kdev_checkpoint *cp);

/* Encodes |cp| (see kdev_ckpt_encode()) and writes it to |path| atomically:
 * a temporary file in the same directory, fsync, rename over |path|. Mode
 * 0644. Returns 0 or a negative errno with |err| filled. */
KDEV_API int kdev_ckpt_write(const char *path, struct kdev_checkpoint *cp, struct kdev_err *err);

/* Standard base64 with padding (Go base64.StdEncoding). Encode returns a
 * malloc'ed NUL-terminated string or NULL. Decode ignores '\r' and '\n' like
 * Go, stores a malloc'ed buffer (non-NULL even when empty) in |*out| and its
 * size in |*out_len|, and returns 0, -EINVAL (with |err| naming the offset of
 * the first bad byte) or -ENOMEM. */
KDEV_API char *kdev_base64_encode(const uint8_t *data, size_t len);
KDEV_API int kdev_base64_decode(const char *text, size_t len, uint8_t **out, size_t *out_len,
                                struct kdev_err *err);

/* Helpers to build a checkpoint in memory (device manager). Each copies its
 * strings. Return 0 or -ENOMEM. */
KDEV_API int kdev_ckpt_add_resource(struct kdev_checkpoint *cp, const char *name,
                                    const char *const *ids, size_t n_ids);
/* Adds an entry; |alloc_resp| may be NULL with |len| 0 (then AllocResp is
 * written as null). */
KDEV_API struct kdev_ckpt_entry *kdev_ckpt_add_entry(struct kdev_checkpoint *cp,
                                                     const char *pod_uid, const char *container,
                                                     const char *resource,
                                                     const uint8_t *alloc_resp, size_t len);
/* Appends |id| under NUMA node |node| of |e| (creating the node, kept
 * sorted). */
KDEV_API int kdev_ckpt_entry_add_id(struct kdev_ckpt_entry *e, int64_t node, const char *id);

#endif /* KDEV_KUBELET_CHECKPOINT_H */
