/* kdev-plugin's usage metering loop (internal to src/daemon): every
 * interval a thread-pool job samples NVML (nvidia/usage.h) and attributes
 * the use to the containers of the supplied map (usage/usage.h), and the
 * result replaces the usage series of the metrics (metrics/plugin_metrics.h)
 * on the loop thread. Each tick runs two thread-pool jobs: the first asks
 * kubelet's PodResources API (List) which container holds which device and
 * reads kubelet's log directories for the pod UIDs and container IDs behind
 * the names (usage.h kdev_usage_logs_read), building the container map; the
 * second samples and attributes. Between them the loop thread resolves the
 * map's device IDs to device UUIDs against the served resources. A
 * PodResources socket that cannot be asked gives an empty map (every use
 * unattributed, logged once until it changes). A tick that finds the
 * previous jobs still running is skipped, so jobs never pile up.
 *
 * Threading: the loop thread; the job touches only its own copies. */
#ifndef KDEV_DAEMON_USAGE_INTERNAL_H
#define KDEV_DAEMON_USAGE_INTERNAL_H

#include <uv.h>

#include "common/err.h"
#include "daemon/dp_daemon.h"
#include "metrics/plugin_metrics.h"
#include "model/model.h"
#include "nvidia/config.h"

struct kdev_dp_usage;

/* Starts sampling every |interval_s| seconds (the first sample one interval
 * after the start) for |pm| (borrowed until kdev_dp_usage_stop), whose usage
 * families it enables with the Hostname label |hostname|. |set| points at
 * the served set (read on the loop thread at each tick: it may change at a
 * reload), |nv| gives the driver roots and proc root (copied),
 * |podres_socket| kubelet's PodResources socket (NULL: KDEV_PODRES_SOCKET,
 * "": none), |pod_log_dir| kubelet's log directory (NULL: /var/log), both
 * copied. Returns the loop, or NULL with |err|. */
struct kdev_dp_usage *kdev_dp_usage_start(uv_loop_t *loop, struct kdev_plugin_metrics *pm,
                                          const char *hostname,
                                          struct kdev_resource_set *const *set,
                                          const struct kdev_nvidia_config *nv,
                                          unsigned interval_s,
                                          const char *podres_socket,
                                          const char *pod_log_dir,
                                          struct kdev_err *err);

/* Stops the timer; a job in flight finishes on the thread pool and its
 * result is dropped, then everything is freed. |pm| is not touched after
 * this call. NULL-safe. */
void kdev_dp_usage_stop(struct kdev_dp_usage *u);

#endif /* KDEV_DAEMON_USAGE_INTERNAL_H */
