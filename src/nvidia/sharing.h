/* NVIDIA time-slicing: replicas of the built NVIDIA resources
 * (`sharing.timeSlicing` of the config file).
 *
 * Follows NVIDIA's k8s-device-plugin v0.20.0 (api/config/v1/replicas.go,
 * internal/rm/rm.go ValidateRequest,
 * internal/rm/device_map.go updateDeviceMapWithReplicas) with two differences
 * on purpose, both where NVIDIA ignores what the file says:
 *   - `rename` is honoured. NVIDIA drops it (warning "...is not yet supported
 *     in the config. Ignoring...") and only with `renameByDefault: true`
 *     advertises `<name>.shared`; kdev advertises the replicas under `rename`
 *     when given, else `<name>.shared` with renameByDefault, else under
 *     `name` itself.
 *   - `devices` is honoured together with a new name (`rename`, or
 *     renameByDefault). NVIDIA forces it to `all`; kdev then replicates only
 *     the selected devices of the resource (`all`, the first N in the
 *     resource's order, or a list of GPU indices "0", MIG indices "0:1", GPU
 *     UUIDs, MIG UUIDs "MIG-<uuid>" or "MIG-GPU-<uuid>/<gi>/<ci>") under the
 *     new name; the other devices keep their original resource. Without a new
 *     name `devices` is ignored as NVIDIA does (with a warning): every device
 *     is shared, so one resource never mixes whole devices and replicas.
 * A config that uses neither (devices all, no rename) gives exactly NVIDIA's
 * resources.
 */
#ifndef KDEV_NVIDIA_SHARING_H
#define KDEV_NVIDIA_SHARING_H

#include "common/err.h"
#include "model/model.h"
#include "nvidia/config.h"
#include "nvidia/resources.h"

/* Separator of a replica ID: "<device ID>::<n>". */
#define KDEV_NVIDIA_REPLICA_SEP "::"

/* The most replicas one MPS server takes on a device of CUDA compute
 * capability |cc_major|.|cc_minor| (NVIDIA cmd/mps-control-daemon/mps/
 * device.go maxClients): 48 from 7.5 on, else 16 (unknown 0.0 included). */
KDEV_API unsigned kdev_nvidia_mps_max_replicas(int cc_major, int cc_minor);

/* Applies the sharing section of |cfg| (kdev_nvidia_replicated_section:
 * sharing.mps when present, else cfg->time_slicing; messages then name
 * "sharing.mps.resources[<i>]" instead) to the NVIDIA resources of |set| (those whose ops
 * are kdev_nvidia_resource_ops, as kdev_nvidia_build() and the MIG builders
 * append them); call it right after the build, before the set is served or
 * monitored. Other resources are left alone.
 *
 * For each entry sharing.timeSlicing.resources[i], in file order:
 *   - the NVIDIA resource called `name` is looked up; when the node has none
 *     (e.g. a MIG resource under migStrategy none) the entry is skipped
 *     silently, as NVIDIA does; when `name` is a resource of another backend
 *     it is skipped with the warning "sharing.timeSlicing.resources[<i>]:
 *     <name> is not an NVIDIA resource; not shared";
 *   - the selected devices (see `devices` above; a count larger than the
 *     resource, or a list item that names no device of it, is warned about
 *     and the rest applied; without a new name every device, and a `devices`
 *     other than all gives the warning "sharing.timeSlicing.resources[<i>].
 *     devices: honoured only together with rename (or renameByDefault);
 *     sharing every device of <name>, as NVIDIA does") are each replaced by
 *     `replicas` devices with ID
 *     "<ID>::<n>", n = 0 .. replicas-1, in device order then n; every replica
 *     copies the device's health, NUMA node, device specs and devinfo, with
 *     devinfo.replica = n (so the health monitor, which works by parent UUID,
 *     marks every replica of a GPU; the Allocate payload names the physical
 *     device once);
 *   - target name: `rename`, else "<name>.shared" when renameByDefault, else
 *     `name`. Same name: the replicas take the place of their devices in the
 *     resource. New name: a new resource with the replicas is inserted right
 *     after the original; with `devices: all`, or a count or list that selects
 *     every device, the original resource is removed (replaced by the new
 *     one, as NVIDIA's renameByDefault does), otherwise it keeps the
 *     unselected devices. A list that selects no device of a resource that has
 *     devices creates nothing: warning "sharing.timeSlicing.resources[<i>].
 *     devices: selects no device of <name>; <new name> not advertised". A
 *     resource with no device at all (no GPU found yet) keeps its name and
 *     gets the new one too, both empty, so that the rebuild after rediscovery
 *     (which serves only names served from the start) finds every name.
 *   - failRequestsGreaterThanOne: true makes the Allocate hook of the
 *     resource holding the replicas refuse a request of more than one ID when
 *     any ID is a replica, with NVIDIA's v0.15+ text (internal/rm/rm.go).
 *
 * sharing.mps replicates the same way (the daemon of kdev-plugin
 * mps-control-daemon then serves the replicas, nvidia/mps.h), with
 * failRequestsGreaterThanOne true unless given false, and two more checks
 * per resource found: -EINVAL "sharing using MPS is not supported for MIG
 * devices" when it holds a MIG device (NVIDIA internal/plugin/mps.go);
 * -ERANGE "invalid MPS configuration: invalid device maximum allowed replicas
 * exceeded: <replicas> > <limit>" when replicas exceed the limit of one of
 * its GPUs (kdev_nvidia_mps_max_replicas; NVIDIA checks it in its control
 * daemon, kdev already when the resources are built).
 *
 * |warn| (may be NULL) receives each warning. Errors (|set| is then
 * unchanged; for the MPS checks, resources of earlier entries may be
 * replicated already, the caller drops the set): -EINVAL "sharing.timeSlicing.resources[<i>]: renameByDefault:
 * resource name \"<name>.shared\" is invalid: <rule>" when the default new
 * name is not a valid resource name; -EEXIST
 * "sharing.timeSlicing.resources[<i>]: resource <x> already exists" when the
 * target name is another resource of |set|; -EEXIST
 * "sharing.timeSlicing.resources[<i>]: resource <name> is shared twice" when
 * an earlier entry already replicated it; -ENOMEM. Returns 0 on success
 * (nothing to do included). */
KDEV_API int kdev_nvidia_apply_sharing(struct kdev_resource_set *set, const struct kdev_nvidia_config *cfg,
                              kdev_nvidia_warn_fn warn, void *warn_arg, struct kdev_err *err);

#endif /* KDEV_NVIDIA_SHARING_H */
