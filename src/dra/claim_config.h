/* Opaque device configuration of DRA claims: the `config` entries of a
 * claim's allocation (resource.k8s.io/v1 AllocationResult.devices.config:
 * DeviceAllocationConfiguration {source, requests, opaque {driver,
 * parameters}}), which the allocator fills from the DeviceClass configs
 * (source FromClass) and the claim's own (FromClaim).
 *
 * Order and scope (NVIDIA's DRA driver, cmd/gpu-kubelet-plugin
 * device_state.go GetOpaqueDeviceConfigs): only entries whose opaque.driver
 * is this driver are read (others are another driver's, skipped); they are
 * taken class first, then claim, each in list order (a source other than
 * FromClass / FromClaim: "invalid config source: <s>"). For each allocation
 * result of this driver and pool the list is scanned from its end (the last
 * claim config has the highest precedence): an entry whose `requests` names
 * the result's request (exactly: "<request>/<subrequest>" for a
 * firstAvailable result) applies, and its kind must fit the device ("cannot
 * apply GpuConfig to device \"gpu-0-mig-1g.10gb-19-3\" of type \"mig\""); an
 * entry with empty `requests` applies only when its kind fits the device,
 * else the scan goes on. No entry: no config (exclusive use).
 *
 * Kinds (parameters.apiVersion / parameters.kind), decoded strictly: an
 * unknown field or kind fails the claim with its path:
 *   resource.nvidia.com/v1beta1 GpuConfig (whole GPUs) and MigDeviceConfig
 *   (MIG devices), NVIDIA's DRA driver's field names
 *   (api/nvidia.com/resource/v1beta1):
 *     sharing:                      optional; none: exclusive use
 *       strategy: TimeSlicing | MPS
 *       timeSlicingConfig:          GpuConfig only; TimeSlicing only
 *         interval: Default | Short | Medium | Long   (default Default)
 *       mpsConfig:                  MPS only
 *         defaultActiveThreadPercentage: integer 0..100
 *         defaultPinnedDeviceMemoryLimit: quantity >= 1Mi
 *         defaultPerDevicePinnedMemoryLimit: {<device index in the claim or
 *             UUID>: quantity >= 1Mi}
 *         multiUser: boolean (accepted; kdev starts no MPS daemon)
 *   Texts as NVIDIA's: "unknown GPU sharing strategy: <s>, supported GPU
 *   sharing strategies: TimeSlicing, MPS", "unknown time-slice interval:
 *   <v>, supported time-slice intervals: Default, Short, Medium, Long",
 *   "active thread percentage must not be negative" / "... greater than
 *   100", "cannot use MpsConfig with the 'TimeSlicing' strategy", "cannot
 *   use TimeSlicingConfig with the 'MPS' strategy", "invalid device: unable
 *   to parse key as an integer: <k>", "invalid device: invalid device index:
 *   <i>", "invalid limit: default value set too low: <v>", "invalid limit:
 *   value set too low: <k>: <v>". NVIDIA's feature gates (TimeSlicingSettings,
 *   MPSSupport) have no counterpart: both are always accepted.
 *   kdev.io/v1alpha1 ShareConfig (whole GPUs and MIG devices): a share of the
 *   device, in the terms of kdev's isolated replicas (nvidia/isolation.h):
 *     memory: quantity (bytes, "10Gi"), compute: 1..100 (optionally "%"),
 *     policy: work-conserving | strict | none (share/policy.h)
 *   at least one of memory and compute.
 * Every error is "claim <ns>/<name> (<uid>): request <request>: config
 * <n> (<source>): <what>" with <n> the entry's position in
 * allocation.devices.config (from 0) and, for a field, its path
 * ("parameters.sharing.mpsConfig.defaultActiveThreadPercentage: ...").
 *
 * What the container gets (the claim's CDI spec, per CDI device of a device
 * the config applies to): MPS with defaultActiveThreadPercentage: env
 * CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=<n> (read by CUDA's MPS client). Not
 * applied yet, only validated and recorded: the time-slice interval (a
 * setting of the GPU, which NVIDIA's driver sets with nvidia-smi
 * compute-policy), the pinned memory limits and multiUser (settings of an
 * MPS control daemon, which kdev-dra-plugin does not start), and a
 * ShareConfig's limits when shares are off (with kdev-dra-plugin
 * --shareable-gpus they are applied as a share, dra/plugin.h "Shares").
 * The applied config is kept on the
 * device record (checkpoint) as "config": {"apiVersion", "kind", "source",
 * "parameters" (normalised: interval filled in, pinned limits as "<n>M"
 * strings, memory in bytes)}, so a claim of the checkpoint gets the same spec
 * again without the API server.
 */
#ifndef KDEV_DRA_CLAIM_CONFIG_H
#define KDEV_DRA_CLAIM_CONFIG_H

#include <jansson.h>

#include "common/err.h"
#include "common/export.h"
#include "model/edits.h"

#define KDEV_DRA_NVIDIA_CONFIG_API "resource.nvidia.com/v1beta1"
#define KDEV_DRA_KDEV_CONFIG_API "kdev.io/v1alpha1"

/* Resolves the configs of claim |claim| (v1 shape, already checked by the
 * caller for its allocation results) for driver |driver| and pool |pool|
 * onto the device records |devs| (each {"device", ...}): sets "config" on
 * each record a config applies to. Returns 0 or a negative errno with |err|
 * (-EINVAL for a config that does not decode or validate, as above;
 * -ENOMEM). */
KDEV_API int kdev_dra_claim_config(const json_t *claim, const char *driver, const char *pool,
                                   const char *ns, const char *name, const char *uid,
                                   json_t *devs, struct kdev_err *err);

/* Adds the container edits of the config of device record |rec| (none
 * without "config") to |out|: the env above. Returns 0 or -ENOMEM. */
KDEV_API int kdev_dra_config_edits(const json_t *rec, struct kdev_container_edits *out,
                                   struct kdev_err *err);

#endif /* KDEV_DRA_CLAIM_CONFIG_H */
