/* The usage metering loop of both daemons (README "Usage metering"): every
 * interval two thread-pool jobs, off the event loop's hot path, find out
 * who holds which GPU and how much of it they use.
 *
 *   1. The first asks kubelet's PodResources API (v1 List, podres/client.h)
 *      which container holds which device and reads kubelet's log
 *      directories for the pod UIDs and container IDs behind the names
 *      (usage/usage.h kdev_usage_logs_read), building the container map:
 *      - KDEV_NVIDIA_USAGE_DEVICE_PLUGIN (kdev-plugin): one entry per
 *        container and resource, with its device IDs as kdev advertised
 *        them;
 *      - KDEV_NVIDIA_USAGE_CLAIMS (kdev-dra-plugin): one entry per container
 *        and DRA claim device (ClaimResource) of |driver|, its one "device
 *        ID" the device name; claim namespace and name, driver, pool and
 *        device are set on the entry (dcgm-exporter's dra_* labels).
 *   2. Between the jobs, on the loop thread, |lookup| gives the device UUID
 *      of each device ID of the map (against the daemon's own inventory).
 *   3. The second samples NVML (nvidia/usage.h, its own NVML handle) and
 *      attributes the use to the map's containers (kdev_usage_attribute).
 *   4. On the loop thread |publish| receives the snapshot, map and report
 *      (borrowed for the call), or NULLs when the sample failed.
 *
 * A PodResources socket that cannot be asked gives an empty map (every use
 * unattributed, logged once until it changes); a tick that finds the
 * previous jobs still running is skipped, so jobs never pile up.
 *
 * Threading: start, stop and the callbacks on the loop thread; the jobs
 * touch only their own copies. */
#ifndef KDEV_NVIDIA_USAGE_LOOP_H
#define KDEV_NVIDIA_USAGE_LOOP_H

#include <stdbool.h>

#include <uv.h>

#include "common/err.h"
#include "common/export.h"
#include "nvidia/config.h"
#include "usage/usage.h"

enum kdev_nvidia_usage_holders {
        KDEV_NVIDIA_USAGE_DEVICE_PLUGIN, /* PodResources' devices (ContainerDevices) */
        KDEV_NVIDIA_USAGE_CLAIMS,        /* PodResources' DRA claim devices (ClaimResource) */
};

/* The UUID (into |uuid|, KDEV_USAGE_UUID_MAX bytes) of device ID
 * |device_id| of map entry |c| (borrowed for the call); false when it is no
 * GPU or MIG device of this node's. */
typedef bool (*kdev_nvidia_usage_lookup_fn)(void *arg, const struct kdev_usage_container *c,
                                            const char *device_id, char *uuid);

/* One sample's result: |snap|, |pods| and |rep| borrowed for the call;
 * all NULL when the sample failed. */
typedef void (*kdev_nvidia_usage_publish_fn)(void *arg, const struct kdev_usage_snapshot *snap,
                                             const struct kdev_usage_pods *pods,
                                             const struct kdev_usage_report *rep);

struct kdev_nvidia_usage_loop_options {
        unsigned interval_s;         /* > 0; the first sample one interval after the start */
        const char *podres_socket;   /* NULL: KDEV_PODRES_SOCKET; "": none (all unattributed) */
        const char *pod_log_dir;     /* NULL: /var/log */
        enum kdev_nvidia_usage_holders holders;
        const char *driver;          /* KDEV_NVIDIA_USAGE_CLAIMS: the DRA driver name */
        const char *library_path;    /* NVML to load; NULL: the driver roots' */
        kdev_nvidia_usage_lookup_fn lookup;   /* required */
        kdev_nvidia_usage_publish_fn publish; /* required */
        void *arg;
};

struct kdev_nvidia_usage_loop;

/* Starts the loop on |loop| for the NVML of |nv|'s driver roots (its proc
 * root reads the processes' cgroups; |nv| and the option strings copied).
 * Returns the loop, or NULL with |err| (-ENOMEM, the roots' errors). */
KDEV_API struct kdev_nvidia_usage_loop *kdev_nvidia_usage_loop_start(
        uv_loop_t *loop, const struct kdev_nvidia_config *nv,
        const struct kdev_nvidia_usage_loop_options *opts, struct kdev_err *err);

/* Stops the timer; jobs in flight finish on the thread pool, their result
 * is dropped (no callback after this call), then everything is freed.
 * NULL-safe. */
KDEV_API void kdev_nvidia_usage_loop_stop(struct kdev_nvidia_usage_loop *l);

#endif /* KDEV_NVIDIA_USAGE_LOOP_H */
