/* GetPreferredAllocation for NVIDIA resources (kdev_resource_ops.preferred).
 *
 * Follows NVIDIA's k8s-device-plugin v0.20.0 and go-gpuallocator v0.6.0
 * (internal/rm/allocate.go, internal/rm/nvml_manager.go; go-gpuallocator
 * gpuallocator/besteffort_policy.go), with two differences:
 *   - whole GPUs: NVIDIA's best-effort policy searches every partition of the
 *     available GPUs (seconds at 8 GPUs, issue #774) and rebuilds its link
 *     table through NVML on every call. kdev computes the link table once, when
 *     the resource is built, and finds the set of exactly `size` GPUs that
 *     contains the must-include ones and maximises the sum of its pair scores
 *     directly, by branch and bound (optimal; microseconds at 16 GPUs);
 *   - replicas and MIG devices: NVIDIA's greedy path, plus deterministic
 *     tie-breaks (below), so the answer never depends on the request's order.
 */
#ifndef KDEV_NVIDIA_PREFERRED_H
#define KDEV_NVIDIA_PREFERRED_H

#include <stdbool.h>
#include <stddef.h>

#include "common/err.h"
#include "model/model.h"
#include "nvml/discover.h"

/* flags.plugin.sharedDevicesAllocationPolicy (NVIDIA v0.20+,
 * api/config/v1/flags.go, internal/rm/allocate.go): how replicas and MIG devices are spread. */
enum kdev_nvidia_share_policy {
        KDEV_NVIDIA_SHARE_DISTRIBUTED = 0, /* default: least-used physical device first */
        KDEV_NVIDIA_SHARE_PACKED,          /* most-used physical device first */
};

/* The exact search handles at most this many candidates besides the
 * must-include ones; beyond, the heuristic of kdev_nvidia_best_set is used. */
#define KDEV_NVIDIA_PREF_EXACT_MAX 63
/* Search nodes the exact search may visit before it settles for the best set
 * found so far: about 50 ms of CPU time at 0.2-0.4 us a node. Never reached
 * on the shipped topologies (under 100 nodes) nor on random 16- and 24-GPU
 * score matrices (at most about 1,000 and 8,000 nodes); random 32-GPU ones may
 * reach it. */
#define KDEV_NVIDIA_PREF_NODE_BUDGET (1u << 17)

/* go-gpuallocator's pair score (gpuallocator/besteffort_policy.go,
 * internal/links/device.go): the P2P score of the
 * topology level (INTERNAL 60, SINGLE 50, MULTIPLE 40, HOSTBRIDGE 30, NODE 20,
 * SYSTEM 10) plus 100 per direct NVLink. Any other level scores 0 (NVIDIA
 * fails the RPC instead; kdev's discovery already refuses unknown levels). */
KDEV_API int kdev_nvidia_link_score(nvmlGpuTopologyLevel_t level, unsigned nvlinks);

/* How kdev_nvidia_best_set found its answer. */
struct kdev_nvidia_best_stats {
        bool exact;       /* the answer is proved optimal */
        size_t nodes;     /* search nodes visited */
        long long score;  /* sum of the pair scores of the answer */
};

/* The best set of |k| of |n| items under the symmetric pair score |score|
 * (n x n, row-major; the diagonal is ignored): the set that contains the
 * |n_must| distinct items |must| (indices < n) and maximises the sum of the
 * scores of all its pairs; among equal sums, the lexicographically smallest
 * list of indices in ascending order.
 *
 * Exact (branch and bound over the candidates in index order, seeded by the
 * heuristic below; a node with r picks left is cut when "current sum + the
 * best r of (gain of a candidate against the chosen set + half the sum of its
 * r-1 best scores with candidates still open)" cannot beat the best set
 * found, a tie counting only when it could be lexicographically smaller) when at
 * most KDEV_NVIDIA_PREF_EXACT_MAX items are not in |must| and the search ends
 * within KDEV_NVIDIA_PREF_NODE_BUDGET nodes; otherwise the heuristic or the
 * best set found within the budget (st->exact false). Heuristic: greedy (add
 * the candidate with the largest gain to the set so far plus, while more picks
 * follow, its best score with a remaining candidate; lowest index on ties)
 * then single swaps while one strictly improves the sum.
 *
 * |out| (room for |k|) receives the set in ascending order; |st| may be NULL.
 * Returns 0; -EINVAL when n_must > k, k > n, an index of |must| is >= n or
 * repeated, or a pointer is NULL where needed; -ENOMEM. */
KDEV_API int kdev_nvidia_best_set(const int *score, size_t n, const size_t *must, size_t n_must,
                         size_t k, size_t *out, struct kdev_nvidia_best_stats *st);

/* The preferred-allocation data of one NVIDIA resource: the link table of its
 * physical GPUs (pair scores computed once, here) and, for every device, its
 * GPU, its physical device (the replica annotation stripped) and whether it is
 * a whole GPU. */
struct kdev_nvidia_pref;

/* Builds the data for resource |r|, whose devices' data are struct
 * kdev_nvidia_devinfo (or NULL: the device is then a unit of its own with no
 * links), on the GPUs |gpus| (positions are matched by the devinfo's
 * parent_uuid). The link table comes from gpus->levels / nvlink_counts; when
 * gpus->has_links is false it is derived from NUMA nodes (same node: NODE,
 * otherwise SYSTEM). Pairs with a faulted GPU score 0. |gpus| and |r| may be
 * freed or changed afterwards except that |r|'s device array must stay the
 * one whose positions were read (the data is indexed by device position).
 * On success *out is new (free with kdev_nvidia_pref_free). Returns 0 or
 * -ENOMEM (|err| set). */
KDEV_API int kdev_nvidia_pref_new(const struct kdev_gpu_set *gpus, const struct kdev_resource *r,
                         enum kdev_nvidia_share_policy policy, struct kdev_nvidia_pref **out,
                         struct kdev_err *err);

/* Builds the preferred-allocation data of every NVIDIA resource of |set|
 * (those whose ops are kdev_nvidia_resource_ops) on the GPUs |gpus| and stores
 * it in the resource's ops_data, replacing any earlier one. Call it once the
 * devices are final: after kdev_nvidia_build() and the time-slicing step
 * (which replaces device arrays), and again after each rebuild. Until then
 * the hook answers the must-include devices then device-array order.
 * Returns 0, or -ENOMEM with |err| (resources keep what they had). */
KDEV_API int kdev_nvidia_pref_attach(struct kdev_resource_set *set, const struct kdev_gpu_set *gpus,
                            enum kdev_nvidia_share_policy policy, struct kdev_err *err);

/* Frees |p| (NULL-safe). */
KDEV_API void kdev_nvidia_pref_free(struct kdev_nvidia_pref *p);

/* Answers a validated request (arguments as for kdev_resource_ops.preferred)
 * with data |p| built for |r|:
 *
 * Whole GPUs (every available device a whole GPU, none a replica or MIG
 * device): the best set of kdev_nvidia_best_set over the link table, items in
 * device-array order (NVML order); answer = the must-include devices, then
 * the others, each in device-array order.
 *
 * Otherwise the greedy path (NVIDIA internal/rm/allocate.go): candidates =
 * available minus must-include; then size - n_must times, take the candidate
 * first in this order:
 *   0. (kdev) unreplicated devices (whole GPUs, MIG devices) before replicas,
 *      under both policies, when a resource holds both (no config makes such
 *      a resource since `devices` without a new name shares every device;
 *      only a hand-built resource can);
 *   1. allocated replicas of its physical device, fewest first (distributed)
 *      or most first (packed). allocated = total replicas of the physical
 *      device in the resource minus its candidates not yet taken, so devices
 *      outside |avail|, must-include ones and earlier picks all count (as
 *      NVIDIA decrements "available" after each pick);
 *   2. the physical device taken least often in this call;
 *   3. (kdev) the same count as 1. over all devices on the same physical GPU
 *      (parent_uuid), which spreads or packs MIG devices by GPU;
 *   4. (kdev) device-array order.
 * Answer = must-include devices (device-array order), then the picks in pick
 * order.
 *
 * Returns 0, or -ENOMEM with |err|. */
KDEV_API int kdev_nvidia_pref_choose(const struct kdev_nvidia_pref *p, const struct kdev_resource *r,
                            const struct kdev_device *const *avail, size_t n_avail,
                            const struct kdev_device *const *must, size_t n_must, size_t size,
                            const struct kdev_device **out, struct kdev_err *err);

/* kdev_resource_ops.preferred of NVIDIA resources: |data| is the resource's
 * struct kdev_nvidia_rdata; uses its `pref` (kdev_nvidia_pref_choose), or,
 * when it has none, answers the must-include devices then the first other
 * available ones in device-array order. */
KDEV_API int kdev_nvidia_preferred(void *data, const struct kdev_resource *r,
                          const struct kdev_device *const *avail, size_t n_avail,
                          const struct kdev_device *const *must, size_t n_must, size_t size,
                          const struct kdev_device **out, struct kdev_err *err);

#endif /* KDEV_NVIDIA_PREFERRED_H */
