/* Isolated replicas: time-slicing replicas that are shares of one GPU
 * (memory and compute), enforced inside the container by libkdev-share.so.
 *
 * kdev's own config section (NVIDIA's sections stay exactly as NVIDIA reads
 * them; `sharing.timeSlicing` still says how many replicas there are):
 *
 *   isolation:
 *     resources:
 *     - name: nvidia.com/gpu.shared   # a resource sharing.timeSlicing advertises
 *       memory: 10Gi                  # per replica; default: GPU memory / replicas
 *       compute: 25                   # percent per replica; default: 100 / replicas
 *       policy: work-conserving       # compute pacing policy (the library's names)
 *       preload: file                 # file (/etc/ld.so.preload) or env (LD_PRELOAD)
 *
 * `name` is the name the replicas are advertised under (the entry's `rename`,
 * "<name>.shared" with renameByDefault, else its `name`); "nvidia.com/" is
 * added to a name without '/'. `memory` is a Kubernetes quantity of bytes: a
 * plain integer, or with a binary (Ki, Mi, Gi, Ti, Pi) or decimal (k, M, G,
 * T, P) suffix. `compute` is an integer 1..100, optionally followed by '%'.
 * `policy` is one of the library's compute pacing policies (share/policy.h:
 * work-conserving, strict or none; any other name is a config error, since the
 * library would fail closed on it); absent: the library's default
 * (work-conserving). `preload`: see preload_mode in
 * docs/kdev-plugin.md.
 *
 * The shares (one rule for both front ends): a replica of a GPU (or MIG
 * device) with M bytes of memory, under `replicas: N`, carries
 *   memory  = the explicit size, else floor(M / N) bytes;
 *   compute = the explicit percent, else floor(100 / N), at least 1.
 * A container given k replicas of one GPU gets min(k x memory, M) bytes (k x
 * memory when M is unknown) and min(k x compute, 100) percent of it; replicas
 * of several GPUs give one limit per GPU.
 */
#ifndef KDEV_NVIDIA_ISOLATION_H
#define KDEV_NVIDIA_ISOLATION_H

#include <stdbool.h>
#include <stddef.h>

#include "common/err.h"
#include "common/export.h"
#include "model/model.h"
#include "nvidia/config.h"

/* Where a container sees its share (the contract with libkdev-share.so). */
#define KDEV_SHARE_CTR_LIBRARY "/usr/lib/kdev/libkdev-share.so"
#define KDEV_SHARE_CTR_PRELOAD "/etc/ld.so.preload"
#define KDEV_SHARE_CTR_DIR "/var/run/kdev/share"
#define KDEV_SHARE_ENV_DIR "KDEV_SHARE_DIR"
/* The library's file name, in --share-root/lib and next to the binaries. */
#define KDEV_SHARE_LIBRARY_NAME "libkdev-share.so"
/* The CDI kind of the per-container specs of isolated replicas. */
#define KDEV_SHARE_CDI_KIND "kdev.io/share"

/* The share of one replica of a device. */
struct kdev_nvidia_replica_share {
        unsigned long long memory; /* bytes; 0: unknown (no explicit size, memory unknown) */
        unsigned compute;          /* percent, 1..100 */
};

/* The share of one replica of a device of |total| bytes (0: unknown) under
 * |replicas| (>= 1) replicas and isolation entry |iso| (explicit memory and
 * compute, 0 for the defaults). See the rule at the top. No errors. */
KDEV_API struct kdev_nvidia_replica_share
kdev_nvidia_replica_share(const struct kdev_nvidia_isolated_resource *iso, unsigned long long total,
                          unsigned replicas);

/* One GPU's line of a `limits` file. */
struct kdev_nvidia_share_limit {
        char uuid[96];             /* GPU (or MIG device) UUID */
        unsigned long long memory; /* bytes */
        unsigned compute;          /* percent, 1..100 */
};

/* The limits of a container given |n| replicas |infos| (devinfos of
 * isolated replicas, any order) of resource |iso| whose replica count is
 * |replicas|: one limit per device UUID, in order of first appearance, with
 * k replicas of a device giving min(k x memory, device memory) bytes and
 * min(k x compute, 100) percent. *out (|n| entries at most, caller frees) and
 * *n_out. Errors: -EINVAL "isolation: the memory of <uuid> is unknown; an
 * isolated replica needs it (or an explicit memory size)" when a device's
 * memory is unknown and no size is given; -ENOMEM. */
struct kdev_nvidia_devinfo;
KDEV_API int kdev_nvidia_share_limits(const struct kdev_nvidia_isolated_resource *iso,
                                      unsigned replicas,
                                      const struct kdev_nvidia_devinfo *const *infos, size_t n,
                                      struct kdev_nvidia_share_limit **out, size_t *n_out,
                                      struct kdev_err *err);

/* The text of a `limits` file (the format libkdev-share.so reads): comment
 * lines "# kdev-plugin: isolated replicas of <resource>" and one
 * "# device <device ID>" per ID of |ids| (what kdev-plugin reads back to
 * remove regions of containers that are gone), then one
 * "<UUID> <bytes> <percent>" line per limit, then "policy <name>" when
 * |policy| is not NULL. Malloc'ed (caller frees), NULL when out of memory. */
KDEV_API char *kdev_nvidia_limits_text(const char *resource, const char *const *ids, size_t n_ids,
                                       const struct kdev_nvidia_share_limit *limits,
                                       size_t n_limits, const char *policy);

/* The text of a `limits` file from its comment lines: "# <comment>" per
 * entry of |comments|, then one "<UUID> <bytes> <percent>" line per limit,
 * then "policy <name>" when |policy| is not NULL (kdev_nvidia_limits_text is
 * this with kdev-plugin's comments; kdev-dra-plugin names the claim, device
 * and shareID). Malloc'ed (caller frees), NULL when out of memory. */
KDEV_API char *kdev_nvidia_share_limits_text(const char *const *comments, size_t n_comments,
                                             const struct kdev_nvidia_share_limit *limits,
                                             size_t n_limits, const char *policy);

/* Parses a memory quantity ("10Gi", "512Mi", "1073741824", "20G"): see the
 * top. Returns 0 with *bytes > 0, or -EINVAL with |err| "must be a size in
 * bytes (e.g. 10Gi, 512Mi, 20G or 1073741824), got \"<v>\"" (also for 0 and
 * for more than 2^63 bytes). */
KDEV_API int kdev_nvidia_parse_memory(const char *v, unsigned long long *bytes,
                                      struct kdev_err *err);

/* The isolation entry of resource |name| in |cfg|, or NULL. Borrowed. */
KDEV_API const struct kdev_nvidia_isolated_resource *
kdev_nvidia_isolation_find(const struct kdev_nvidia_config *cfg, const char *name);

/* The replica count of the sharing.timeSlicing entry that advertises |name|
 * (its target name, as kdev_nvidia_apply_sharing names it), or 0 when none
 * does (also whenever sharing.mps is present: that section is applied
 * instead, kdev_nvidia_replicated_section). */
KDEV_API unsigned kdev_nvidia_time_slicing_replicas(const struct kdev_nvidia_config *cfg,
                                                    const char *name);

/* That sharing.timeSlicing entry itself (its `name` is the resource it
 * replicates), or NULL. Borrowed. */
KDEV_API const struct kdev_nvidia_replicated_resource *
kdev_nvidia_time_slicing_entry(const struct kdev_nvidia_config *cfg, const char *name);

/* For kdev-plugin --check: what one replica of resource |r| is when its
 * replicas are isolated, e.g. "isolated: one replica = 21380202496 bytes
 * (20389 MiB) and 25% of its GPU" (", on every GPU" when all its devices
 * give the same size, else "of GPU-<uuid> (the first; sizes differ)"; the
 * memory "unknown" when it is). Into |buf| (|size| bytes). Returns 1 when
 * written, 0 (|buf| "") when |r| is not an isolated NVIDIA resource. */
KDEV_API int kdev_nvidia_isolation_describe(const struct kdev_resource *r, char *buf, size_t size);

#endif /* KDEV_NVIDIA_ISOLATION_H */
