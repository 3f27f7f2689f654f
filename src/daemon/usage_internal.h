/* kdev-plugin's usage metering loop (internal to src/daemon): every
 * interval a thread-pool job samples NVML (nvidia/usage.h) and attributes
 * the use to the containers of the supplied map (usage/usage.h), and the
 * result replaces the usage series of the metrics (metrics/plugin_metrics.h)
 * on the loop thread. A tick that finds the previous job still running is
 * skipped (counted as neither result), so jobs never pile up. The loop
 * thread's only work per tick is acquiring the map, resolving its device
 * IDs to device UUIDs against the served resources, and setting the series.
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
 * reload), |nv| gives the driver roots and proc root (copied), |pods| the
 * map supplier (copied). Returns the loop, or NULL with |err|. */
struct kdev_dp_usage *kdev_dp_usage_start(uv_loop_t *loop, struct kdev_plugin_metrics *pm,
                                          const char *hostname,
                                          struct kdev_resource_set *const *set,
                                          const struct kdev_nvidia_config *nv,
                                          unsigned interval_s,
                                          const struct kdev_dp_usage_pods *pods,
                                          struct kdev_err *err);

/* Stops the timer; a job in flight finishes on the thread pool and its
 * result is dropped, then everything is freed. |pm| is not touched after
 * this call. NULL-safe. */
void kdev_dp_usage_stop(struct kdev_dp_usage *u);

#endif /* KDEV_DAEMON_USAGE_INTERNAL_H */
