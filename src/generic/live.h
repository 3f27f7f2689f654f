/* kdev generic backend: the live inventory. While kdev-plugin serves, the
 * matches of every glob of the `generic` section are followed: the
 * directories the globs name are watched with inotify (libuv uv_fs_event)
 * and every glob is rescanned every generic.rescanInterval seconds as a
 * safety net (the only means when a watch cannot be added: EMFILE, ENOSPC,
 * a filesystem without events; one warning, never an exit).
 *
 * What a scan does to each served resource (kdev_resource, borrowed from the
 * served set and changed in place on the loop thread, then announced with
 * the |changed| callback, which kdev-plugin turns into one ListAndWatch
 * update, kdev_dp_runtime_notify):
 *
 * - a device that appears is advertised, Healthy;
 * - a device whose nodes vanished is reported Unhealthy at once and kept,
 *   with its last device nodes, for generic.gracePeriod seconds (default
 *   300), then dropped from the list. Kubelet keeps accounting for a device
 *   that a running pod holds as long as the pod runs; a device withdrawn at
 *   once would let kubelet forget a node a pod still uses, and a node back
 *   within the grace period (a USB re-plug, an FPGA reprogrammed, a udev
 *   rule re-run) is the same device, Healthy again, under the same ID;
 * - a device whose symlink is re-pointed (another real path) keeps its ID
 *   and Allocate answers the new host path;
 * - IDs stay stable: a device keeps the ID it was first advertised under for
 *   as long as it is listed, whatever else appears or vanishes. The first
 *   inventory has exactly the IDs of kdev_generic_discover() (generic.h);
 *   a device that appears later gets the ID that rule gives it, unless that
 *   ID is already listed for another device: then it takes "g<group>-" in
 *   front of its name (the rule's prefix for IDs shared by groups), and when
 *   that is taken too it is left out with a warning. A device is "the same"
 *   from scan to scan when its group, its set's first-path match (the path
 *   as named) and its reuse and replica numbers are.
 *
 * Physical devices ("<resource>/<device ID without ::n>", model.h) follow
 * their logical devices: added, made Unhealthy and removed with them.
 *
 * Threading: one libuv loop; every function runs on its thread. */
#ifndef KDEV_GENERIC_LIVE_H
#define KDEV_GENERIC_LIVE_H

#include <stdbool.h>
#include <stdint.h>

#include <uv.h>

#include "common/err.h"
#include "common/export.h"
#include "generic/generic.h"
#include "model/model.h"
#include "model/withdrawn.h"

struct kdev_generic_live;

/* Resource |resource| (kdev_resource.name) of the served set changed: its
 * devices, their health or their device nodes. */
typedef void (*kdev_generic_changed_fn)(void *arg, const char *resource);

struct kdev_generic_live_options {
        uv_loop_t *loop;
        const struct kdev_generic_config *cfg; /* borrowed, must outlive the tracker */
        /* root, allow_regular_files as for kdev_generic_discover(); |warn|
         * receives the skip warnings of every scan (kdev-plugin logs them at
         * debug level: the first discovery already warned) */
        struct kdev_generic_options discover;
        /* the served set, borrowed: it holds every resource of |cfg| (by
         * name), as kdev_generic_discover() built them */
        struct kdev_resource_set *set;
        kdev_generic_changed_fn changed; /* may be NULL */
        void *changed_arg;
        uint64_t rescan_interval_ms; /* 0: cfg->rescan_interval seconds */
        int64_t grace_period_ms;     /* < 0: cfg->grace_period seconds */
        uint64_t debounce_ms;        /* delay from a watch event to the scan; 0: 50 */
        bool no_watch;               /* rescans only, no inotify (tests) */
        /* the withdrawal rule's registry (model/withdrawn.h), borrowed, must
         * outlive the tracker; NULL: the tracker's own. kdev-plugin passes
         * one registry to every tracker it starts, so that a tracker started
         * over a rebuilt set (a reload) takes over the grace periods */
        struct kdev_withdrawn *withdrawn;
};

/* Counters for tests. */
struct kdev_generic_live_stats {
        unsigned scans;          /* scans done (the first one, at start, included) */
        unsigned events;         /* watch events that asked for a scan */
        unsigned watches;        /* directories watched now */
        unsigned watch_failures; /* watches that could not be added */
        unsigned changes;        /* |changed| calls */
};

/* Starts following the matches of |o->cfg| on |o->loop|: adds the watches,
 * scans once at once (the served set then has the keys that tell the same
 * device apart, and anything that changed since the discovery is applied),
 * and arms the rescan timer. Returns the tracker, or NULL with |err|:
 * -EINVAL when an argument is missing or a resource of the config is not in
 * the set, -ENOMEM. A watch that cannot be added is not an error (logged
 * once as a warning: "cannot watch a directory of the generic globs,
 * following them by rescans"). */
KDEV_API struct kdev_generic_live *
kdev_generic_live_start(const struct kdev_generic_live_options *o, struct kdev_err *err);

/* A rebuild of the served set (a reload, a new GPU inventory) discovers the
 * generic devices afresh, without those that left the node: for every
 * resource of |cfg| that both |set| (the new set, changed in place) and
 * |previous| (the set served before, borrowed) have, every device of
 * |previous| whose ID |set| lacks is appended, Unhealthy, with its last
 * device nodes and physical device, so that kubelet never sees a device
 * vanish before its grace period ends: those in their grace period already
 * and those that left since the last scan alike (the discovery of the
 * rebuild may be the first to miss them). The tracker started over |set|
 * with the same withdrawal registry then keeps or drops them by the rule:
 * at the end of the grace period begun before the rebuild, or of one begun
 * by its first scan. Call it before |set| is served. NULL |previous|:
 * nothing to carry. Returns 0 or -ENOMEM (|set| then consistent, with some
 * carried). */
KDEV_API int kdev_generic_carry_withdrawn(struct kdev_resource_set *set,
                                         const struct kdev_generic_config *cfg,
                                         const struct kdev_resource_set *previous);

/* Scans now (tests). */
KDEV_API void kdev_generic_live_scan(struct kdev_generic_live *l);

/* Fills |out| with the counters of |l|. */
KDEV_API void kdev_generic_live_stats(const struct kdev_generic_live *l,
                                      struct kdev_generic_live_stats *out);

/* Stops: no scan and no callback runs once this returns, the config and set
 * are no longer touched; the watches and timers close and |l| is freed on
 * the loop, then |done| (may be NULL) is called. NULL-safe. */
KDEV_API void kdev_generic_live_stop(struct kdev_generic_live *l, void (*done)(void *arg),
                                     void *arg);

#endif /* KDEV_GENERIC_LIVE_H */
