/* Device health of the DRA kubelet plugin for kubelet (KEP-4680): the
 * optional DRA resource health service, served on the plugin's DRA socket.
 *
 * Service and versions (kubernetes/kubelet pkg/apis/dra-health/v1alpha1/
 * api.proto; pkg/kubelet/cm/dra): kubelet 1.34, 1.35 and 1.36 (feature
 * gate ResourceHealthStatus) know only v1alpha1: gRPC service
 * "v1alpha1.DRAResourceHealth", server-streaming method
 * KDEV_DRA_HEALTH_V1ALPHA1_WATCH, advertised in GetInfo's
 * supported_versions as "v1alpha1.DRAResourceHealth" (after the DRAPlugin
 * versions). Kubernetes' later v1 copy (package "v1", the same messages and
 * field numbers; in no kubelet release up to 1.36) is answered on
 * KDEV_DRA_HEALTH_V1_WATCH by the same handler, not advertised.
 *
 * Stream: every NodeWatchResources call gets, at once and then after every
 * change (kdev_dra_plugin_set_health with a list that differs) and every
 * kdev_dra_plugin_health_resend, one NodeWatchResourcesResponse with the
 * complete device list of the driver (kubelet replaces its view with each
 * response), in the order given: per device pool_name = the plugin's pool,
 * device_name, health (UNKNOWN 0, HEALTHY 1, UNHEALTHY 2), last_updated_time
 * = the Unix time (seconds) the response was built (the plugin vouches for
 * every device's state then), health_check_timeout_seconds =
 * KDEV_DRA_HEALTH_TIMEOUT_S and message (omitted when empty; cut to 1024
 * bytes, kubelet's limit). kubelet marks a device Unknown when it heard
 * nothing of it for the timeout, so the caller resends more often (the
 * daemon: every KDEV_DRA_HEALTH_RESEND_MS). A stream ends when kubelet
 * cancels it or the plugin stops (its server closes). Loop thread. */
#ifndef KDEV_DRA_HEALTH_H
#define KDEV_DRA_HEALTH_H

#include <stdbool.h>
#include <stddef.h>

#include "common/err.h"
#include "dra/plugin.h"

#define KDEV_DRA_HEALTH_SERVICE_V1ALPHA1 "v1alpha1.DRAResourceHealth"
#define KDEV_DRA_HEALTH_V1ALPHA1_WATCH "/v1alpha1.DRAResourceHealth/NodeWatchResources"
#define KDEV_DRA_HEALTH_V1_WATCH "/v1.DRAResourceHealth/NodeWatchResources"

/* health_check_timeout_seconds sent with every device (kubelet's own
 * default is 30 s as well). */
#define KDEV_DRA_HEALTH_TIMEOUT_S 30
/* How often the daemon resends the complete list (ms): well within the
 * timeout. */
#define KDEV_DRA_HEALTH_RESEND_MS 10000
/* Longest message kubelet keeps (bytes, ResourceHealth.message). */
#define KDEV_DRA_HEALTH_MESSAGE_MAX 1024

/* The values of the proto's HealthStatus. */
enum kdev_dra_health_status {
        KDEV_DRA_HEALTH_UNKNOWN = 0,
        KDEV_DRA_HEALTH_HEALTHY = 1,
        KDEV_DRA_HEALTH_UNHEALTHY = 2,
};

/* One device's health. Strings borrowed for the call. */
struct kdev_dra_device_health {
        const char *device;  /* device name in the plugin's pool; required */
        enum kdev_dra_health_status health;
        const char *message; /* why; NULL or "": none */
};

/* Replaces the device list the health stream reports with |devs| (|n|
 * entries, copied; n 0: none). When it differs from the previous list
 * (names, health, messages, order), every open stream is sent the new
 * complete list at once. Returns the number of streams sent to (0 when
 * nothing changed) or a negative errno with |err|: -EINVAL (a device
 * without name, a status outside 0..2), -ENOMEM (the previous list stays). */
KDEV_API int kdev_dra_plugin_set_health(struct kdev_dra_plugin *p,
                                        const struct kdev_dra_device_health *devs, size_t n,
                                        struct kdev_err *err);

/* Sends the complete current list to every open stream again (with a fresh
 * last_updated_time). Returns the number of streams sent to. */
KDEV_API int kdev_dra_plugin_health_resend(struct kdev_dra_plugin *p);

/* Number of NodeWatchResources streams open. */
KDEV_API size_t kdev_dra_plugin_health_streams(const struct kdev_dra_plugin *p);

/* The proto name of |s| ("HEALTHY", ...; "UNKNOWN" for other values), the
 * words kubelet's pod status uses are "Healthy", "Unhealthy", "Unknown":
 * |pod| true gives those. Static strings. */
KDEV_API const char *kdev_dra_health_status_name(int s, bool pod);

#endif /* KDEV_DRA_HEALTH_H */
