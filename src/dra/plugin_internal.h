/* Internal state of the DRA plugin, shared by plugin.c and registration.c. */
#ifndef KDEV_DRA_PLUGIN_INTERNAL_H
#define KDEV_DRA_PLUGIN_INTERNAL_H

#include <pthread.h>
#include <stdint.h>

#include "common/file.h"
#include "dra/checkpoint.h"
#include "dra/plugin.h"

struct kdev_rpc_server;
struct dra_op;
struct kdev_dra_health_state; /* health.c */

/* The order of the calls naming one claim: turns 1, 2, ... are handed out
 * as calls arrive (|issued| the last), |done| is the last turn whose call
 * ran; the entry goes away when done == issued. */
struct kdev_dra_turn {
        char *uid; /* owned */
        uint64_t issued, done;
};

struct kdev_dra_plugin {
        char *driver, *pool, *data_dir, *cdi_dir, *dev_root, *proc_root;
        char *share_root; /* options.share_root copied; NULL: no shares (plugin.h "Shares") */
        char *cp_path;
        char *cp_error; /* checkpoint load failure at creation, or NULL */
        /* the options as given: the GPU records, driver files, claim source
         * and callbacks are used from here (borrowed); its strings are not
         * (the copies above are) */
        struct kdev_dra_plugin_options o;
        pthread_mutex_t source_lock; /* serialises o.get_claim (kdev_kube is not thread-safe) */
        struct kdev_dra_cp cp;
        /* the devices the checkpoint's claims hold (plugin.c held_add), or
         * NULL: made from the checkpoint when a prepare next needs it */
        json_t *held;
        /* what kdev last wrote (or loaded): the checkpoint, the claim specs
         * (common/file.h; loop thread) */
        struct kdev_file_guard cp_guard, spec_guard;
        struct kdev_dra_prepare_stats stats; /* loop thread */
        char **unhealthy;     /* UUIDs withdrawn as unhealthy (loop thread) */
        size_t n_unhealthy;
        /* serving */
        uv_loop_t *loop;
        struct kdev_rpc_server *dra_srv, *reg_srv;
        char *dra_socket, *reg_socket;
        unsigned closing;     /* servers still closing after stop */
        unsigned jobs;        /* calls queued (service.c dra_op): waiting or reading claims */
        /* per-claim order of the calls (loop thread, service.c) */
        struct kdev_dra_turn *turns;
        size_t n_turns, cap_turns;
        struct dra_op *ops_head, *ops_tail; /* queued calls, in arrival order */
        struct kdev_dra_health_state *health; /* NodeWatchResources (health.c) */
        bool stopping;        /* stop requested; stop_done pending */
        void (*stop_done)(void *arg);
        void *stop_arg;
};

/* A claim read off the loop thread: |rc| < 0 = the read failed with |err|. */
struct kdev_dra_fetch {
        json_t *claim; /* owned by the fetcher */
        int rc;
        struct kdev_err err;
};

/* Reads the claim through the source under source_lock (any thread). */
int kdev_dra_fetch_claim(struct kdev_dra_plugin *p, const char *ns, const char *name,
                         json_t **claim, struct kdev_err *err);

/* kdev_dra_prepare_claim with the claim already read (|fetched| NULL: read
 * it now, blocking). Loop thread. */
int kdev_dra_prepare_fetched(struct kdev_dra_plugin *p, const char *ns, const char *name,
                             const char *uid, const struct kdev_dra_fetch *fetched,
                             const json_t **devices, struct kdev_err *err);

/* The directory of the share regions of claims under the share root. */
#define KDEV_DRA_SHARE_CLAIMS_DIR "claims"

/* The GPU record named |dev| ("gpu-<minor>", *mig NULL) or the MIG device
 * record whose dra_name is |dev| (*mig set, its parent returned), or NULL
 * with *rc and |err|: -EIO "device <dev> (<uuid>) is unhealthy: ..." for a
 * faulted GPU, -ENODEV "device <dev> is not published by this node (pool
 * <pool>)". Borrowed from options.gpus. (plugin.c) */
const struct kdev_nvidia_gpu *kdev_dra_find_gpu(const struct kdev_dra_plugin *p, const char *dev,
                                                const struct kdev_nvidia_mig **mig,
                                                const struct kdev_nvidia_placement **placement,
                                                int *rc, struct kdev_err *err);

/* Dynamic MIG (plugin.h "Dynamic MIG"; dynamic_mig.c). */

/* The placement of GPU record |g| whose dra_name is |dev|, or NULL. */
const struct kdev_nvidia_placement *kdev_dra_placement_of(const struct kdev_nvidia_gpu *g,
                                                          const char *dev);

/* Whether device record |d| is a MIG placement (has "mig"). */
bool kdev_dra_mig_record(const json_t *d);

/* Sets "mig" {"gpu", "profileId", "start", "size"} on each record of |devs|
 * (claim |ns|/|name| (|uid|)) that names a placement of the GPU records,
 * after the overlap checks of plugin.h (the checkpoint's other claims, the
 * claim's earlier devices, instances on the GPU no claim records: the MIG
 * operations' list). Returns the number of placements (0..n) or a negative
 * errno with |err| (-EBUSY, -EINVAL dynamic MIG off or adminAccess, the list
 * operation's errors). */
int kdev_dra_mig_resolve(const struct kdev_dra_plugin *p, const char *ns, const char *name,
                         const char *uid, json_t *devs, struct kdev_err *err);

/* Makes the instance of each placement record of |devs| that has no
 * "giId" yet and records "giId", "ciId", "uuid" (changed in place). On a
 * failure the instances this call made are destroyed again and the
 * create's error returned, "device <name>: ...". 0 without MIG operations. */
int kdev_dra_mig_create(const struct kdev_dra_plugin *p, json_t *devs, struct kdev_err *err);

/* Which instances kdev_dra_mig_destroy takes for a record's. */
enum kdev_dra_mig_match {
        /* the one the record's ids name, listed with the recorded profile,
         * start and MIG uuid (an id NVML gave to someone else's instance
         * since is left alone) */
        KDEV_DRA_MIG_EXACT,
        /* also its GPU instance left without compute instance (so without
         * MIG uuid) by a destroy that did not finish: for instances this
         * process made, or a claim saved as being undone */
        KDEV_DRA_MIG_OURS,
        /* also, for a record without ids, the instance of its profile at
         * its start that no claim records (a kill came before the ids were
         * saved): for a claim saved "migPending" before this process */
        KDEV_DRA_MIG_PLACEMENT,
};

/* Destroys the instance of each placement record of |devs| that |match|
 * (a record marked "remaking" as with KDEV_DRA_MIG_PLACEMENT) finds on its
 * GPU; the ids stay recorded. *destroyed (may be NULL) counts the
 * instances that existed. Every record is tried; returns 0 or the first
 * error, "device <name>: ..."; without MIG operations a placement record
 * fails it with -ENOTSUP "device <name>: its MIG instance is not
 * destroyed: dynamic MIG is off on this node (kdev-dra-plugin
 * --dynamic-mig)", and nothing is destroyed. */
int kdev_dra_mig_destroy(const struct kdev_dra_plugin *p, json_t *devs,
                         enum kdev_dra_mig_match match, unsigned *destroyed, struct kdev_err *err);

/* Makes prepared claim |uid|'s instances that are gone ("Dynamic MIG" in
 * plugin.h: a reboot, a driver reload) again at their placements, changing
 * |devs| in place: a record whose instance the GPU's list shows (ids,
 * profile, start, MIG uuid) with its compute instance is kept. Any other
 * is made again, once an instance no claim records that overlaps its
 * placement has failed it (-EBUSY, the text of kdev_dra_mig_resolve):
 * before the make the record is saved marked "remaking" without ids, so
 * that at the next remake an unrecorded instance of its profile at its
 * start (a kill after the make, before the ids were saved) is adopted and
 * a GPU instance there without compute instance (a kill inside the make)
 * destroyed first; the mark goes with the make. Every list is read before
 * anything changes. On success each adopted or made record is reported to
 * |fn| (may be NULL), "adopted" or "recreated", and 1 returned; 0 when no
 * record needed it; else a negative errno with |err| ("device <name>:
 * ..."), the instances this call made destroyed again and the records to
 * make as they were (adopted ones recorded), except one with an instance
 * left at its placement (an undo that failed), which keeps "remaking"
 * without ids. Records are touched; the caller saves. */
int kdev_dra_mig_remake(struct kdev_dra_plugin *p, const char *uid, json_t *devs,
                        kdev_dra_mig_report_fn fn, void *arg, struct kdev_err *err);

/* Shares (plugin.h "Shares"; shares.c). */

/* Result |r| (index |i| of .status.allocation.devices.results of claim
 * |ns|/|name|): its shareID and consumedCapacity (KEP-5075) onto device
 * record |rec| as "share": {"shareID", "memory" (bytes), "compute"
 * (percent)}, the capacities only when consumedCapacity names them. Nothing
 * without both. Errors (-EPROTO wrong JSON type, -EINVAL): consumedCapacity
 * without shareID, a capacity kdev does not publish, a memory that is not a
 * size (or above 2^63 - 1 bytes), a compute outside 1..100, a second share
 * of one device in the claim;
 * each names the claim and the field. */
int kdev_dra_share_parse(const json_t *r, size_t i, const char *ns, const char *name,
                         json_t *rec, struct kdev_err *err);

/* Completes the "share" of each record of |devs| (claim |uid|): memory and
 * compute not consumed explicitly are the whole device (its memory, 100),
 * "uuid" the device's, "region" <share root>/claims/<uid>-<device>; and a
 * record without shareID whose config is a kdev.io/v1alpha1 ShareConfig
 * (claim_config.h) gets a share from it (its memory, compute, policy; the
 * whole device for the one not given) when shares are on. -EINVAL "device
 * <dev>: allocated as a share (shareID <id>), but this node does not
 * publish shareable GPUs (kdev-dra-plugin --shareable-gpus is off)", or for
 * a MIG device with a shareID; -ENOMEM. */
int kdev_dra_share_resolve(const struct kdev_dra_plugin *p, const char *uid, json_t *devs,
                           struct kdev_err *err);

/* Whether device record |d| is a share of consumable capacity (has a
 * shareID). */
bool kdev_dra_share_record(const json_t *d);

/* The capacity sum rule: for each share of |devs| (claim |uid|), the
 * consumed memory and compute of the shares of the same device that other
 * claims of the checkpoint hold, plus its own, must not exceed the device's
 * (its memory, 100). -EBUSY "device <dev>: consumed capacity <memory|compute>
 * <q> (shareID <id>) exceeds the <left> left of its <total>: <used> held by
 * claims <ns>/<name> (<uid>), ..." otherwise, or "... exceeds its <total>
 * (no other claim holds a share of it)" when no other claim holds a share
 * of the device. */
int kdev_dra_share_check(const struct kdev_dra_plugin *p, const char *uid, const json_t *devs,
                         struct kdev_err *err);

/* Makes the region directory of each share of |devs| (claim |uid|,
 * |ns|/|name|): <share root>/claims (0700) and the region (01777, filled by
 * nvidia/share_host.h kdev_nvidia_share_region_fill with the limits text
 * "# kdev-dra-plugin: claim <ns>/<name> (<uid>)", "# device <dev>", "#
 * share <shareID>", "<uuid> <bytes> <percent>", "policy <p>"). With
 * |only_missing| a region whose limits file exists is left as it is (a
 * claim of the checkpoint). Returns 0 or a negative errno with |err|. */
int kdev_dra_share_make_regions(const struct kdev_dra_plugin *p, const char *ns,
                                const char *name, const char *uid, const json_t *devs,
                                bool only_missing, struct kdev_err *err);

/* Removes the region directories of the shares of |devs|. Returns 0 or the
 * first failure (the others are still tried) with |err|. */
int kdev_dra_share_remove_regions(const json_t *devs, struct kdev_err *err);

/* Saves the checkpoint through its guard (a file someone else changed is
 * moved aside and reported to on_file_aside). Returns 0 or a negative errno
 * with |err|. Loop thread. */
int kdev_dra_save_checkpoint(struct kdev_dra_plugin *p, struct kdev_err *err);

#endif /* KDEV_DRA_PLUGIN_INTERNAL_H */
