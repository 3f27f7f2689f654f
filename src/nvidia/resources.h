/* NVIDIA resources: from the discovered GPUs (nvml/discover.h) to kdev
 * resources (model/model.h) with NVIDIA's names, IDs and Allocate payload.
 *
 * Follows NVIDIA's k8s-device-plugin v0.20.0 (api/config/v1/resources.go,
 * internal/rm, internal/plugin/server.go).
 */
#ifndef KDEV_NVIDIA_RESOURCES_H
#define KDEV_NVIDIA_RESOURCES_H

#include <stdbool.h>
#include <stddef.h>

#include "common/err.h"
#include "model/model.h"
#include "nvidia/config.h"
#include "nvidia/devinfo.h"
#include "nvml/discover.h"

#define KDEV_NVIDIA_GPU_RESOURCE "nvidia.com/gpu"
/* CDI vendor and the kind of the GPU spec (NVIDIA internal/cdi). */
#define KDEV_NVIDIA_CDI_VENDOR "k8s.device-plugin.nvidia.com"
#define KDEV_NVIDIA_CDI_KIND KDEV_NVIDIA_CDI_VENDOR "/gpu"
/* Allocate, volume-mounts strategy (server.go). */
#define KDEV_NVIDIA_VOLUME_MOUNTS_ROOT "/var/run/nvidia-container-devices"
#define KDEV_NVIDIA_VOLUME_MOUNTS_HOST "/dev/null"
/* IMEX channel device nodes (internal/imex). */
#define KDEV_NVIDIA_IMEX_CHANNEL_DIR "/dev/nvidia-caps-imex-channels"

/* Receives one warning (one line, valid during the call). */
typedef void (*kdev_nvidia_warn_fn)(void *arg, const char *msg);

struct kdev_nvidia_build_options {
        /* Accept IMEX channel nodes that are regular files (tests); by default
         * a channel must be a character device, as NVIDIA checks. */
        bool allow_regular_files;
        kdev_nvidia_warn_fn warn; /* NULL: warnings are dropped */
        void *warn_arg;
};

/* Builds the NVIDIA resources of |gpus| under the finished config |cfg| and
 * appends them to |out| (whose resource names must differ from them).
 *
 * migStrategy none: one resource "nvidia.com/gpu" holding every GPU whole,
 * MIG-enabled ones included, as NVIDIA does (internal/rm/device_map.go).
 *
 * migStrategy single / mixed (NVIDIA internal/rm/device_map.go; names
 * from nvidia/mig.h, computed from NVML numbers): GPUs with MIG disabled stay
 * whole in "nvidia.com/gpu"; each MIG device of a MIG-enabled GPU becomes a
 * device with ID = its MIG UUID and devinfo uuid = MIG UUID, parent_uuid =
 * the GPU's, gi/ci = its GPU/compute instance IDs, index "i:j" (j =
 * nvmlDeviceGetMigDeviceHandleByIndex's index), minor = the GPU's, gi_cap /
 * ci_cap from <cfg->proc_root>/driver/nvidia-caps/mig-minors (read once per
 * build), NUMA node and health of the GPU.
 *   single: every MIG device in "nvidia.com/gpu". Invalid layouts fail
 *     (-EINVAL), checked in NVIDIA's order:
 *     "invalid MIG configuration: at least one device with migEnabled=true was
 *      not configured correctly: device <i> has no MIG devices configured",
 *     "invalid MIG configuration: more than one MIG device type present on
 *      node" (nvmlDeviceAttributes_t compared whole),
 *     "all devices on the node must be configured with the same migEnabled
 *      value" (without the prefix, as NVIDIA v0.20.0's device_map.go).
 *   mixed: one resource "nvidia.com/mig-<profile>" ('+' -> '.') per profile
 *     that has devices, after "nvidia.com/gpu" (left out when it has no
 *     device), in order of first appearance (NVML order); devices in NVML
 *     order (i, j). Matching is exact (anchored): a device's profile must
 *     have C == G and be one of the possible profiles of the node's MIG-
 *     capable GPUs, else -EINVAL "MIG profile '<p>' does not match any
 *     resource patterns" (e.g. '1c.3g.20gb'). A MIG-enabled GPU without MIG
 *     devices gives the warning "device <i> has no MIG devices configured"
 *     and is skipped.
 *   Both, faulted GPUs (kdev_gpu.fault): one whose MIG mode is unknown
 *     (!mig_mode_known: it faulted before nvmlDeviceGetMigMode answered) is
 *     neither MIG-enabled nor whole: it is skipped with the warning "GPU <i>
 *     (<uuid>): MIG mode unknown (<nvmlErrorString>); not advertised under
 *     migStrategy <single|mixed>" (counted as whole it would fail single's
 *     uniformity rule, or sit next to its own MIG devices under mixed). One
 *     with MIG enabled whose MIG devices were not read (n_migs 0) is skipped
 *     with "GPU <i> (<uuid>): MIG enabled but its MIG devices could not be
 *     read (<nvmlErrorString>); not advertised" instead of single's error.
 *     Rediscovery after the reset brings them back.
 *   Both: -EACCES etc. "error getting MIG profiles of GPU <i>: error getting
 *     parent memory info: <nvmlErrorString>" (mixed) or "error getting MIG
 *     profile for MIG device at index '(<i>, <j>)': ..." when a parent's
 *     memory size is unknown; -ENOENT "missing MIG GPU instance capability
 *     path: /proc/driver/nvidia/capabilities/gpu<g>/mig/gi<i>/access" (or
 *     .../ci<c>/access) when mig-minors lacks the device's line (also when the
 *     file is absent), as NVIDIA's device construction fails.
 *
 * Whole GPUs: device ID = the GPU UUID (also with deviceIDStrategy index,
 * internal/rm/nvml_devices.go), in NVML order; healthy unless the GPU answered GPU_IS_LOST or RESET_REQUIRED during
 * discovery (kdev_gpu.fault); numa_node from discovery (-1: none, so no
 * TopologyInfo). A GPU lost before its UUID could be read cannot be named: it
 * is left out with the warning "GPU <i>: lost before its UUID was read; not
 * advertised". kdev_device.specs stays empty: the Allocate hook adds every
 * device node (passDeviceSpecs). kdev_device.data points to a struct
 * kdev_nvidia_devinfo owned by the resource's ops_data (freed with the
 * resource). The resource's ops (kdev_nvidia_resource_ops) carry a copy of the
 * Allocate settings of |cfg|, so |cfg| may be freed afterwards.
 *
 * 0 GPUs: the resource is still appended, with 0 devices. NVIDIA does not
 * start a plugin for a resource with 0 devices ("No devices found. Waiting
 * indefinitely."); whether kdev serves it (capacity 0, then devices on
 * rediscovery) is the daemon's choice.
 *
 * IMEX channels of cfg (imex.channelIDs) are looked up now, at
 * <devRoot>/dev/nvidia-caps-imex-channels/channel<id> and at the container
 * path (NVIDIA internal/imex): a missing one is skipped with the warning
 * "Ignoring requested IMEX channel channel<id> (...)", or, with
 * imex.required, fails the build: "requested IMEX channel channel<id> does
 * not exist" (-ENOENT).
 *
 * sharing.timeSlicing is not applied here: call kdev_nvidia_apply_sharing()
 * (nvidia/sharing.h) on |out| afterwards.
 *
 * Errors: the MIG errors above, -EOPNOTSUPP "sharing.mps is not supported
 * yet" (issue 4), -EEXIST "resource <name> defined twice" when |out| already
 * has one of the names, -ENOMEM. |out| is unchanged on error. */
KDEV_API int kdev_nvidia_build(const struct kdev_gpu_set *gpus, const struct kdev_nvidia_config *cfg,
                      const struct kdev_nvidia_build_options *opts, struct kdev_resource_set *out,
                      struct kdev_err *err);

/* Gives every device of the NVIDIA resources of |set| that has none its
 * physical device (model.h): the whole GPU for a GPU and its replicas, the
 * MIG device for a MIG device and its replicas; ID = the GPU's or MIG
 * device's UUID (devinfo uuid), NUMA node of the device, data = a copy of the
 * devinfo with replica -1 (owned by the set), unhealthy when a device on it
 * is. Call it once the resources are final (after kdev_nvidia_apply_sharing);
 * then links |set| (kdev_resource_set_link). Returns 0, or -ENOMEM or the
 * link's error with |err| (not NULL), the physical devices it added removed
 * again. */
KDEV_API int kdev_nvidia_attach_physical(struct kdev_resource_set *set, struct kdev_err *err);

/* Asked once per device that left an NVIDIA resource (|resource|, device
 * ID |id|): true keeps it, withdrawn, for now. */
typedef bool (*kdev_nvidia_keep_fn)(void *arg, const char *resource, const char *id);

/* Devices that pods may still hold are not dropped at once when their GPU or
 * MIG device leaves the node: for each NVIDIA resource of |set| (just built,
 * after kdev_nvidia_apply_sharing, before kdev_nvidia_pref_attach and
 * kdev_nvidia_attach_physical) that |old| (the set built before, borrowed)
 * also has, every device of |old|'s resource whose ID the new one lacks and
 * whose UUID (devinfo uuid) is no device of |set| is offered to |keep|; a
 * kept one is appended, after the others: same ID and NUMA node, Unhealthy,
 * its devinfo copied with withdrawn true (never monitored, no CDI device).
 * kubelet then stops offering it but keeps accounting for pods that hold it
 * (capacity stays, allocatable drops); the caller decides when |keep| says
 * no. Devices of resources |set| no longer has are not kept (the runtime
 * When a resource of |old| has no counterpart in |set| (its last device
 * left: the only MIG device of a profile destroyed), it is appended to |set|
 * with |old|'s Allocate settings as soon as one of its devices is kept, so
 * that the resource is served on, its devices Unhealthy, for the grace
 * period (README: KDEV_NVIDIA_WITHDRAW_GRACE); with none kept it stays out
 * and the runtime stops serving it (kubelet marks its devices Unhealthy).
 * Returns the number of devices kept, or -ENOMEM with |err| (|set| is then
 * as it was, or with some kept devices: still consistent). */
KDEV_API int kdev_nvidia_keep_withdrawn(struct kdev_resource_set *set,
                                        const struct kdev_resource_set *old,
                                        kdev_nvidia_keep_fn keep, void *arg,
                                        struct kdev_err *err);

/* A GPU that is on the node but faulted is not dropped by a rebuild: for
 * each NVIDIA resource of |old| (the set built before, borrowed), every
 * device that is not withdrawn, whose parent GPU (devinfo parent_uuid) |gpus|
 * (the discovery of this build) reads faulted, whose ID the resource of
 * |set| lacks and whose UUID is no device of |set|, is appended to that
 * resource (created with |old|'s Allocate settings when |set| lacks it):
 * same ID and NUMA node, Unhealthy, its devinfo copied with incomplete true
 * and fault the GPU's (NVML GPU_IS_LOST or RESET_REQUIRED), so the health
 * monitor probes the GPU and a re-read advertises it whole once it answers.
 * A GPU is read faulted when |gpus| has it with kdev_gpu.fault set, or lacks
 * it while holding a GPU without a UUID (lost before its UUID was read) that
 * may be it: a GPU known lost already (its devices in |old| carried
 * incomplete with GPU_IS_LOST) may; another only while |gpus| has more GPUs
 * without a UUID than there are such known lost GPUs missing (a GPU removed
 * while another one is lost is withdrawn, not carried).
 * Call it after kdev_nvidia_apply_sharing and before
 * kdev_nvidia_keep_withdrawn (carried devices are not withdrawn). NVIDIA's
 * plugin reads its devices once; a faulted device stays Unhealthy there too
 * (internal/rm/health.go). Returns the number of devices carried, or -ENOMEM
 * with |err| (|set| then consistent, with some carried). */
KDEV_API int kdev_nvidia_carry_faulted(struct kdev_resource_set *set,
                                       const struct kdev_resource_set *old,
                                       const struct kdev_gpu_set *gpus, struct kdev_err *err);

/* Health follows the physical GPU: after kdev_nvidia_attach_physical, every
 * NVIDIA physical device of |set| that |old| (the set served before,
 * borrowed, linked) lacks or has only withdrawn (a MIG device created since,
 * or destroyed and created again) and whose parent GPU
 * was faulted in |old| (it had devices there, not withdrawn, and all of them
 * Unhealthy) is marked Unhealthy with its logical devices
 * (kdev_physical_set_health); the health monitor then adopts it and probes
 * it with the GPU. Returns the number of logical devices marked. */
KDEV_API size_t kdev_nvidia_carry_gpu_health(struct kdev_resource_set *set,
                                             const struct kdev_resource_set *old);

/* The ops of every NVIDIA resource (Allocate hook, free). */
KDEV_API extern const struct kdev_resource_ops kdev_nvidia_resource_ops;

/* The devinfo of device |d| of resource |r|, or NULL when |r| is not an
 * NVIDIA resource (its ops are not kdev_nvidia_resource_ops). */
KDEV_API const struct kdev_nvidia_devinfo *kdev_nvidia_device_info(const struct kdev_resource *r,
                                                          const struct kdev_device *d);

/* Whether NVIDIA resources |a| and |b| (two builds of the same resource
 * name, e.g. before and after a configuration reload) answer Allocate and
 * GetPreferredAllocation alike for kubelet: both have NVIDIA's ops, the same
 * Allocate settings (device list strategies, device ID strategy,
 * passDeviceSpecs, GDRCopy / GDS / MOFED, dev root, CDI annotation prefix,
 * IMEX channels, time-slicing failRequestsGreaterThanOne) and, device by
 * device in order, the same devinfo (UUID, parent, MIG GI/CI and capability
 * minors, index, minor, replica). The device IDs, specs and NUMA nodes are
 * the model's to compare; the topology behind GetPreferredAllocation follows
 * the UUIDs (the same GPUs). Health is not compared. False when either is not
 * an NVIDIA resource. */
KDEV_API bool kdev_nvidia_resource_same(const struct kdev_resource *a, const struct kdev_resource *b);

/* Fills |buf| (at least 37 bytes) with a random UUID version 4 (RFC 9562),
 * lower-case "xxxxxxxx-xxxx-4xxx-[89ab]xxx-xxxxxxxxxxxx", from getrandom(2).
 * Returns 0 or a negative errno. */
KDEV_API int kdev_nvidia_uuid4(char *buf, size_t size);

#endif /* KDEV_NVIDIA_RESOURCES_H */
