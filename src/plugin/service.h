/* One generation of a resource's gRPC server: the v1beta1 DevicePlugin
 * service on one Unix socket (k8s.io/kubelet deviceplugin/v1beta1 api.proto).
 * Internal to the plugin runtime; a kubelet restart replaces the whole
 * service with a fresh one. */
#ifndef KDEV_PLUGIN_SERVICE_H
#define KDEV_PLUGIN_SERVICE_H

#include <stdbool.h>
#include <stddef.h>

#include <uv.h>

#include "common/err.h"
#include "common/export.h"
#include "deviceplugin/v1beta1/api.pb-c.h"

struct kdev_resource;
struct kdev_dp_service;

/* Creates the service for |res| (borrowed; must outlive the service).
 * |on_stream_end| (may be NULL) runs with |arg| when kubelet's ListAndWatch
 * stream is ended by the peer (cancel, connection loss, deadline) — not for
 * other clients' streams (kdevctl watch, monitoring), and never for streams
 * ended by kdev_dp_service_close(). Kubelet's stream is the first
 * ListAndWatch opened after kdev_dp_service_expect_kubelet() on the connection
 * that called GetDevicePluginOptions since then (kubelet calls it inside
 * Register, then opens ListAndWatch on the same connection; k8s
 * pkg/kubelet/cm/devicemanager/plugin/v1beta1/client.go). |current| is true
 * when the stream belongs to the latest registration (opened after the last
 * kdev_dp_service_expect_kubelet()), false for the stream of an earlier one
 * that kubelet drops while it re-registers. Kubelet's connection is made the
 * gRPC server's priority connection (kdev_rpc_server_set_priority_connection
 * in rpc.h): a share of the request budget stays free for it whatever other
 * local clients send. Returns NULL with |err| on failure. */
KDEV_API struct kdev_dp_service *kdev_dp_service_new(uv_loop_t *loop, struct kdev_resource *res,
                                                     void (*on_stream_end)(void *arg, bool current),
                                                     void *arg, struct kdev_err *err);

struct kdev_dp_hooks;

/* Sets the observers of Allocate and GetPreferredAllocation (runtime.h;
 * borrowed, NULL = none). */
KDEV_API void kdev_dp_service_set_hooks(struct kdev_dp_service *svc,
                                        const struct kdev_dp_hooks *hooks);

/* Marks the start of a registration: the next GetDevicePluginOptions caller
 * and its next ListAndWatch stream are taken to be kubelet's. */
KDEV_API void kdev_dp_service_expect_kubelet(struct kdev_dp_service *svc);

/* Listens on Unix socket |path|. Returns 0 or a negative errno with |err|. */
KDEV_API int kdev_dp_service_listen(struct kdev_dp_service *svc, const char *path,
                                    struct kdev_err *err);

/* Sends the resource's device list on every open ListAndWatch stream when it
 * differs from the last list sent. */
KDEV_API void kdev_dp_service_notify(struct kdev_dp_service *svc);

/* Serves |res| (borrowed, as for kdev_dp_service_new) from now on, in place
 * of the resource given so far: the open ListAndWatch streams stay open and
 * hear of the new list only when it differs from the last one sent (call
 * kdev_dp_service_notify()). Used when a reloaded configuration gives the
 * same resource again. */
KDEV_API void kdev_dp_service_set_resource(struct kdev_dp_service *svc, struct kdev_resource *res);

/* Number of open ListAndWatch streams. */
KDEV_API size_t kdev_dp_service_streams(const struct kdev_dp_service *svc);

/* Closes the server (GOAWAY, streams cancelled) and frees |svc|; |done| runs
 * with |arg| once every handle is released. */
KDEV_API void kdev_dp_service_close(struct kdev_dp_service *svc, void (*done)(void *arg),
                                    void *arg);

/* Size in bytes of the packed ListAndWatchResponse for |res|. */
KDEV_API size_t kdev_dp_list_and_watch_size(const struct kdev_resource *res);

/* The DevicePluginOptions kdev-plugin advertises: GetPreferredAllocation
 * available, PreStartContainer not required. */
KDEV_API void kdev_dp_fill_options(V1beta1__DevicePluginOptions *opts);

#endif /* KDEV_PLUGIN_SERVICE_H */
