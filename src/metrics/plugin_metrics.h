/* kdev-plugin's Prometheus metrics: the metric set (README.md, "Metrics"),
 * fed by the device plugin runtime's hooks (plugin/runtime.h) and the NVIDIA
 * health monitor's event observer, and served over HTTP (metrics/http.h).
 *
 *   kdev_build_info{version,compiler}                       gauge, always 1
 *   kdev_devices{resource,health="Healthy"|"Unhealthy"}     gauge, at scrape time
 *   kdev_gpu_devices{gpu,resource}                          gauge, at scrape time:
 *       logical devices (whole GPU, MIG devices, replicas) of a resource on
 *       one physical GPU
 *   kdev_allocate_requests_total{resource,result="ok"|"error"}   counter of
 *       container requests: an Allocate call that succeeds adds its container
 *       requests to "ok", one that fails adds all of them to "error"
 *   kdev_allocate_duration_seconds{resource}                histogram
 *   kdev_preferred_allocation_duration_seconds{resource}    histogram
 *   kdev_kubelet_registrations_total{resource,result="ok"|"error"}  counter
 *   kdev_kubelet_restarts_total                             counter
 *   kdev_gpu_health_events_total{event,xid}                 counter; event as
 *       kdev_nvidia_health_options.event's |kind|, xid "" for non-XID events
 * Series of known resources start at 0 (counters, histograms) when the server
 * starts listening.
 *
 * Threading: the loop thread only. With metrics off kdev-plugin creates none
 * of this (nothing allocated).
 */
#ifndef KDEV_METRICS_PLUGIN_METRICS_H
#define KDEV_METRICS_PLUGIN_METRICS_H

#include <uv.h>

#include "common/err.h"
#include "common/export.h"
#include "metrics/metrics.h"
#include "model/model.h"
#include "plugin/runtime.h"
#include "usage/usage.h"

struct kdev_plugin_metrics;

/* Returns the ID of the physical device behind device |d| of resource |r|
 * (for NVIDIA devices the GPU UUID), or NULL when it has none worth counting
 * (generic devices). The string must stay valid until the next call. */
typedef const char *(*kdev_plugin_metrics_physical_fn)(void *arg, const struct kdev_resource *r,
                                                        const struct kdev_device *d);

/* Creates the registry and metric families. |set| (borrowed, read at every
 * scrape on the loop thread; must outlive the metrics) is the served resource
 * set; |physical| (may be NULL: no kdev_gpu_devices) maps devices to physical
 * ones. Returns NULL with |err| (-ENOMEM). Free with
 * kdev_plugin_metrics_stop(). */
KDEV_API struct kdev_plugin_metrics *kdev_plugin_metrics_new(
        const struct kdev_resource_set *set, kdev_plugin_metrics_physical_fn physical,
        void *physical_arg, struct kdev_err *err);

/* Starts serving GET /metrics on |address| ("HOST:PORT", metrics/http.h) on
 * |loop|, after creating the zero series of every resource of the set.
 * Returns 0, or a negative errno with |err| (bad address, address in use:
 * "cannot listen on 127.0.0.1:9400: Address already in use"). */
KDEV_API int kdev_plugin_metrics_listen(struct kdev_plugin_metrics *pm, uv_loop_t *loop,
                                        const char *address, struct kdev_err *err);

/* Reads |set| (borrowed as for kdev_plugin_metrics_new) from now on, in
 * place of the set given so far (kdev-plugin after a configuration reload);
 * once listening, the zero series of its resources are created. The series
 * of resources that left keep their values. NULL |pm|: nothing. */
KDEV_API void kdev_plugin_metrics_set_resources(struct kdev_plugin_metrics *pm,
                                                const struct kdev_resource_set *set);

/* The port the server listens on (0 before kdev_plugin_metrics_listen()). */
KDEV_API unsigned kdev_plugin_metrics_port(const struct kdev_plugin_metrics *pm);

/* The registry (owned by |pm|). */
KDEV_API struct kdev_metrics *kdev_plugin_metrics_registry(struct kdev_plugin_metrics *pm);

/* Hooks to pass in kdev_dp_options.hooks (owned by |pm|); NULL for a NULL
 * |pm|. */
KDEV_API const struct kdev_dp_hooks *kdev_plugin_metrics_hooks(struct kdev_plugin_metrics *pm);

/* Health event observer: |arg| is the kdev_plugin_metrics; matches
 * kdev_nvidia_backend_options.health_event. Adds |count| to
 * kdev_gpu_health_events_total{event=|kind|,xid=<xid, or "" when 0 and not an
 * XID kind>}. NULL |arg|: nothing. */
KDEV_API void kdev_plugin_metrics_health_event(void *arg, const char *kind, unsigned long long xid,
                                               unsigned count);

/* --- usage metering (README "Usage metering"; off unless enabled) ---------
 *
 * dcgm-exporter's names, units and labels for what both export, one series
 * per device (GPU or MIG device) of the last snapshot:
 *   DCGM_FI_DEV_GPU_UTIL       percent (whole GPUs: NVML has none for MIG)
 *   DCGM_FI_DEV_MEM_COPY_UTIL  percent (whole GPUs)
 *   DCGM_FI_DEV_FB_USED, DCGM_FI_DEV_FB_FREE, DCGM_FI_DEV_FB_TOTAL   MiB
 *   labels: gpu (NVML index; a MIG device its GPU's), UUID (the GPU's; a MIG
 *   device its GPU's, as dcgm-exporter), pci_bus_id, device ("nvidia<minor>"),
 *   modelName, Hostname, GPU_I_PROFILE and GPU_I_ID (MIG devices, else ""),
 *   and namespace, pod, container: the one container that holds the device,
 *   "" when none or several do (time-slicing: a device's figure cannot be
 *   split; the kdev families below split it).
 * A GPU whose MIG devices are in the snapshot has no FB series of its own
 * (its MIG devices' would be counted twice).
 * kdev's own, labels namespace, pod, container, UUID (the device's own: GPU
 * or MIG UUID), gpu:
 *   kdev_container_gpu_memory_used_bytes{...,source="region"|"processes"}
 *   kdev_container_gpu_memory_limit_bytes      (isolated replicas only)
 *   kdev_container_gpu_compute_share_percent   (isolated replicas only)
 *   kdev_container_gpu_replicas{...,resource}  device IDs held on the device
 *   kdev_container_gpu_sm_utilization_percent  (where NVML gives per-process samples)
 *   kdev_gpu_unattributed_memory_bytes{UUID,gpu,reason}, kdev_gpu_unattributed_processes
 *   kdev_usage_attribution_failures_total{reason}   counter, per process and sample;
 *       reason as kdev_usage_unattributed_name(), or "region" (a share region unreadable)
 *   kdev_usage_samples_total{result="ok"|"error"}  counter
 *   kdev_usage_last_sample_timestamp_seconds        gauge
 * Cardinality: no label holds a process ID; per-container series are at most
 * one per device ID kdev advertises (kubelet gives an ID to one container at
 * a time), device series one per GPU and MIG device, unattributed series four
 * per device. */

/* Registers the usage families; |hostname| is the Hostname label (copied).
 * Returns 0, or -ENOMEM / -EINVAL (called twice) with |err|. */
KDEV_API int kdev_plugin_metrics_enable_usage(struct kdev_plugin_metrics *pm, const char *hostname,
                                              struct kdev_err *err);

/* Replaces the usage series with those of |snap| attributed by |rep| to the
 * containers of |pods| (all borrowed for the call; label values are copied)
 * and counts the sample and its failures. |snap| NULL: a failed sample
 * (result="error"; the series of the last good one stay). Nothing when
 * usage is not enabled. */
KDEV_API void kdev_plugin_metrics_set_usage(struct kdev_plugin_metrics *pm,
                                            const struct kdev_usage_snapshot *snap,
                                            const struct kdev_usage_pods *pods,
                                            const struct kdev_usage_report *rep);

/* Stops the server (if listening) and frees everything once libuv released
 * its handles; then |done| (may be NULL) runs with |done_arg|. NULL-safe. */
KDEV_API void kdev_plugin_metrics_stop(struct kdev_plugin_metrics *pm, void (*done)(void *arg),
                                       void *done_arg);

#endif /* KDEV_METRICS_PLUGIN_METRICS_H */
