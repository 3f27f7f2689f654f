/* kdev DRA kubelet plugin core: plugin registration, the DRAPlugin gRPC
 * services (v1 and v1beta1) and crash-safe claim preparation.
 *
 * Sockets (kubernetes/kubelet pkg/apis/pluginregistration/v1 and pkg/apis/dra;
 * kubernetes pkg/kubelet/pluginmanager and pkg/kubelet/cm/dra/plugin):
 *   - registration socket (conventionally <plugins_registry>/<driver>-reg.sock)
 *     serving /pluginregistration.Registration/GetInfo -> {type "DRAPlugin",
 *     name <driver>, endpoint <DRA socket path>, supported_versions
 *     ["v1.DRAPlugin", "v1beta1.DRAPlugin", "v1alpha1.DRAResourceHealth"]}
 *     (the last: the health service of dra/health.h) and
 *     NotifyRegistrationStatus
 *     (handed to the on_status callback; kdev libraries do not log);
 *   - DRA socket serving /k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin/... and
 *     /k8s.io.kubelet.pkg.apis.dra.v1beta1.DRAPlugin/... NodePrepareResources and
 *     NodeUnprepareResources, and the health stream (dra/health.h). Both
 *     DRAPlugin versions are answered by one handler with
 *     the v1beta1 messages: v1 differs only by Device.share_id (field 5),
 *     which kdev sets on v1 answers for shares only ("Shares" below)
 *     (kubernetes/kubelet pkg/apis/dra/v1/api.proto; proto/dra/v1/api.proto
 *     says why the field is not optional there).
 *
 * Prepare of one claim (kubernetes/dynamic-resource-allocation kubeletplugin
 * getResourceClaims; kubernetes pkg/kubelet/cm/dra/manager.go):
 *   1. claim already in the checkpoint -> answer its recorded devices, after
 *      making sure its CDI spec file exists with exactly the expected content
 *      (rewritten when missing or different, e.g. after /var/run/cdi was
 *      wiped by a reboot; when it cannot be rebuilt — a GPU gone — the claim
 *      fails: never success without the spec);
 *   2. otherwise the claim is read through the claim source; metadata.uid must
 *      equal the requested UID ("claim got replaced" otherwise),
 *      status.allocation must be set, and the results with driver == this
 *      driver and pool == this node's pool are taken (none -> error);
 *      the allocation's opaque configs of this driver are resolved onto
 *      those devices (dra/claim_config.h: class first, then claim, per
 *      request; an unknown kind or field fails the claim naming claim,
 *      request, config entry and field);
 *   3. each device name is mapped to a device of the GPU records
 *      (nvidia/gpus.h) by the names src/dra/slices.h publishes, the records'
 *      dra_name (computed by nvidia/mig.h kdev_nvidia_dra_*): "gpu-<minor>"
 *      to the GPU with that minor (not in MIG mode), a MIG device name
 *      "gpu-<minor>-mig-<profile>-<GI profile id>-<GI placement start>"
 *      to that MIG device of the MIG-enabled GPU with that minor
 *      (kdev_nvidia_dra_name_minor reads the minor). A name no device of this node has fails the claim
 *      with -ENODEV "device <name> is not published by this node (pool
 *      <pool>)"; a GPU with a recorded fault with -EIO "device <name>
 *      (<uuid>) is unhealthy: withdrawn from the ResourceSlice, not
 *      prepared";
 *   4. one CDI spec per claim is written atomically into the CDI dir:
 *      kind KDEV_DRA_CDI_KIND ("k8s.gpu.nvidia.com/claim", NVIDIA's DRA driver
 *      kind), file "k8s.gpu.nvidia.com-claim_<uid>.json" (CDI transient
 *      name), one CDI device "<uid>-<device name>" per device with the
 *      device edits of nvidia/container_edits.h: device node
 *      /dev/nvidia<minor> (for a MIG device: the parent's, then
 *      /dev/nvidia-caps/nvidia-cap<GI cap> and /dev/nvidia-caps/nvidia-cap<CI
 *      cap> from <proc_root>/driver/nvidia-caps/mig-minors, read at each
 *      spec build, as NVIDIA's device plugin adds them; a missing line
 *      fails the claim with -ENOENT); spec-level: the common edits of
 *      nvidia/container_edits.h, env NVIDIA_VISIBLE_DEVICES=void and the
 *      control nodes kdev_nvidia_control_nodes (/dev/nvidiactl,
 *      /dev/nvidia-uvm, /dev/nvidia-uvm-tools, /dev/nvidia-modeset, the
 *      list nvcdi gives NVIDIA's DRA driver) that exist under dev_root,
 *      then the driver files' mounts and hooks (options.driver_files, see
 *      nvidia/driver_files.h). Every device node has hostPath
 *      <dev_root>/<path> when dev_root is not "/". These are the edits the
 *      device plugin's CDI spec gives the same GPU. Device names carry the
 *      claim UID so runtimes never see a reused name;
 *   5. the claim is recorded in the checkpoint and saved before its spec
 *      is written (a failed save fails the claim and writes nothing; a failed
 *      spec write removes the record again), so every spec kdev writes
 *      belongs to a claim the checkpoint holds. The claims of one
 *      NodePrepareResources call share one save (kdev_dra_prepare_many).
 *      The spec is written atomically but without fsync: the fsynced
 *      checkpoint is what a node crash leaves, and step 1 rewrites a spec
 *      that is missing or not what the record gives;
 *   6. the answer per device: request_names (the result's request with any
 *      "/<subrequest>" suffix cut, DRA-LIB behaviour), pool_name,
 *      device_name, cdi_device_ids ["k8s.gpu.nvidia.com/claim=<uid>-<dev>"].
 * Unprepare of one claim: when the checkpoint records it, removes its CDI
 * spec file, then its checkpoint entry; a claim the checkpoint does not
 * record succeeds and nothing is removed (a spec of that name is not kdev's).
 * Claim UIDs: kdev_dra_check_claim_uid below; a claim with another UID fails
 * (in its answer's error) before anything is read, written or removed.
 * Both calls are idempotent; a Prepare after an Unprepare
 * prepares again from the API server (nothing stays reserved after the
 * next Unprepare). One answer per distinct claim UID.
 *
 * Threading: everything on the loop thread, except the claim source. When
 * serving, a NodePrepareResources call whose claims are not all in the
 * checkpoint reads them on libuv's thread pool (uv_queue_work), so a slow or
 * retrying API server never stalls GetInfo (kubelet's deadline is 1 s) or
 * other calls; the source is called under a plugin mutex, one call at a time
 * (kdev_kube is not thread-safe). The claims are then prepared on the loop
 * thread. A call that ended meanwhile (kubelet's deadline, connection loss,
 * stop) is not prepared at all. kdev_dra_prepare_claim() called directly
 * reads the claim on the calling thread (same mutex).
 *
 * Overlapping calls: kubelet may retry a call after its deadline, cancel
 * it, or send the Unprepare of a claim while its Prepare still reads it.
 * The calls naming one claim (by UID) change the node in the order they
 * arrived, whatever order their reads end in: each call takes a turn per
 * claim and runs when every earlier call for its claims has run, so the
 * checkpoint, the CDI specs and the answers end in the state of the last
 * call kubelet made. A retried Prepare answers the same devices (from the
 * checkpoint). A Prepare whose call ended before its turn is not prepared;
 * an Unprepare is carried out even then (kubelet's last word on the claim
 * was to release it). Calls for other claims are not held up.
 *
 * Devices held: before a claim is prepared, every device of it is checked
 * against the claims the checkpoint records; a device another claim holds
 * (the same name, or a whole GPU and a MIG device of it) fails the claim
 * with -EBUSY "device <name> is already prepared for claim <ns>/<name>
 * (<uid>)[ (as <other name>)]: it is not shareable and this allocation has
 * no adminAccess". No device kdev publishes is shareable (whole GPUs and
 * MIG devices are published without allowMultipleAllocations, so the
 * scheduler gives each to one claim; a claim shared by several pods is one
 * claim UID). A result with adminAccess: true (resource.k8s.io/v1
 * DeviceRequestAllocationResult.adminAccess; recorded as "adminAccess":
 * true on the device record) is prepared on a held device and holds
 * nothing itself. adminAccess of another JSON type than boolean fails the
 * claim naming the field.
 *
 * Shares (KEP-5075 consumable capacity; options.share_root set, kdev-dra-
 * plugin --shareable-gpus): a result with a shareID (resource.k8s.io/v1
 * DeviceRequestAllocationResult.shareID, with consumedCapacity {memory,
 * compute}) on a whole GPU published with allowMultipleAllocations is a
 * share: its device record carries "share" {"shareID", "memory" (bytes),
 * "compute" (percent), "uuid", "region", "policy"?}. Several claims may
 * hold shares of one device as long as the sum of their consumed memory
 * and compute stays within the device's (its memory, 100): the claim that
 * would exceed it fails with -EBUSY naming both figures and the holders
 * (shares.c kdev_dra_share_check). A share and an allocation without
 * shareID (the whole device, exclusive) never overlap: -EBUSY "device
 * <name> is already prepared for claim <ns>/<name> (<uid>) as a share
 * (shareID <id>): this allocation has no shareID and needs the whole
 * device"; a share of a device another claim holds whole, -EBUSY "device
 * <name> is already prepared for claim <ns>/<name> (<uid>), which holds it
 * whole (no shareID): this allocation is a share (shareID <id>) and cannot
 * be prepared beside it". A share larger than the whole device, with no
 * other holder, fails with -EBUSY "device <dev>: consumed capacity <memory|
 * compute> <q> (shareID <id>) exceeds its <total> (no other claim holds a
 * share of it)". Each share is
 * enforced like kdev-plugin's isolated replicas: a region directory
 * <root>/claims/<uid>-<device> with its limits file ("<uuid> <consumed
 * bytes> <consumed percent>"), made before the claim's CDI spec is written,
 * and the share library's mounts, env and hook in the claim's CDI device
 * (nvidia/share_host.h kdev_nvidia_share_claim_cdi_edits). The v1
 * NodePrepareResources answer carries the shareID (Device.share_id, field
 * 5); v1beta1 has no such field. A kdev.io/v1alpha1 ShareConfig on a device
 * without shareID is applied the same way (its memory, compute and policy).
 * Unprepare removes the regions; a claim of the checkpoint whose region is
 * gone gets it made again. A share of the checkpoint prepared again while
 * shares are off (options.share_root NULL) fails with -EINVAL "device <dev>
 * was prepared as a share (region <dir>), but shares are off now ...":
 * its spec is never rewritten without the share's limits.
 *
 * Dynamic MIG (KEP-4815 partitionable devices; options.mig set,
 * kdev-dra-plugin --dynamic-mig): a device name that is one of a GPU
 * record's placements (nvidia/gpus.h, published by dra/slices.h
 * kdev_dra_build_partitionable) is a MIG device that exists only while a
 * claim holds it. Before anything is made, the placement is checked: its
 * memory slices must not overlap those of a placement another claim of the
 * checkpoint (or an earlier device of the same claim) holds, -EBUSY "device
 * <name> overlaps device <other> of claim <ns>/<name> (<uid>): memory
 * slices <a>-<b> and <c>-<d>", nor an instance on the GPU that kdev did not
 * make, -EBUSY "device <name>: memory slices <a>-<b> are taken by GPU
 * instance <id> (<MIG uuid>, or "no MIG device" for a GPU instance without
 * compute instance), which kdev-dra-plugin did not create"; the
 * whole GPU and its placements exclude each other as a GPU and its MIG
 * devices do (above). A placement with adminAccess fails with -EINVAL
 * (there is no device to watch until a claim makes it). Then, crash-safe:
 *   1. the claim is recorded with "migPending": true and each placement's
 *      "mig" {"gpu", "profileId", "start", "size"} and the checkpoint saved
 *      (the intent: what kdev is about to make);
 *   2. each GPU instance is made at its placement with a compute instance
 *      of its full size (options.mig create, nvml/mig_config.h
 *      kdev_nvml_mig_create) and "giId", "ciId", "uuid" recorded; a
 *      failure destroys what the claim made and fails it with the NVML
 *      error ("claim <ns>/<name> (<uid>): device <name>: GPU 0 (GPU-...):
 *      create GPU instance profile 9 placement 4: Insufficient Resources");
 *   3. the spec is built (the parent's node and the MIG capability nodes of
 *      the new GI/CI ids), "migPending" dropped, and the claims of the call
 *      saved with the usual one save; the specs written.
 * A failure after step 1 destroys what the call made, by the ids it
 * recorded (never by placement: an instance someone made there since the
 * check is not kdev's), the claim saved "migPending" first when it was
 * already saved prepared (a spec that cannot be written); an undo that
 * fails adds "; undoing it: <its error>" and keeps the claim "migPending"
 * for the next call. Unprepare removes the claim's spec, saves the claim
 * "migPending" again and then destroys its instances before forgetting it
 * (a destroy that fails, e.g. NVML In use while a process runs, fails the
 * Unprepare and keeps the record for kubelet's retry; with dynamic MIG off
 * it fails -ENOTSUP "... dynamic MIG is off on this node (kdev-dra-plugin
 * --dynamic-mig)" and keeps the claim rather than leave an instance no
 * record names; its retry, the claim saved pending, also destroys the GPU
 * instance a destroy that removed only the compute instance left). An
 * instance is destroyed by its recorded ids only when the GPU's list shows
 * it with the recorded profile, start and MIG uuid (NVML reuses GPU
 * instance ids). kdev_dra_plugin_reconcile_mig, called once
 * after creation, finishes what a kill left: a claim recorded "migPending"
 * has its instances destroyed (by their ids, or the unrecorded instance of
 * the recorded profile at the recorded placement when the kill came before
 * the ids were saved) and is forgotten; a prepared claim whose instance is
 * gone (a reboot, a driver reload) gets it made again at the same
 * placement (the record saved "remaking" first, so that what a kill during
 * that make leaves is adopted, or destroyed when it has no compute
 * instance, by the next restart) and its spec rewritten; an instance that
 * no claim records overlapping the placement fails the remake instead (the
 * "taken by GPU instance" text above), and a failed remake leaves the
 * records as they were, except one whose instance it could not undo, which
 * stays "remaking". A Prepare of a claim already recorded (kubelet repeats
 * them) checks and remakes its instances the same way before it answers;
 * a claim whose instance cannot be made again (at the restart or such a
 * Prepare) has its spec removed and the Prepare fails, so a spec never
 * names an instance that is not the claim's. Instances kdev has no record
 * of are never touched otherwise.
 *
 * State files: the checkpoint and the claim CDI specs are written through
 * file guards (common/file.h): one someone else changed is moved aside and
 * reported to on_file_aside before kdev writes it again from memory (on
 * Unprepare, moved aside instead of removed).
 */
#ifndef KDEV_DRA_PLUGIN_H
#define KDEV_DRA_PLUGIN_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>
#include <uv.h>

#include "common/err.h"
#include "dra/checkpoint.h"
#include "nvidia/driver_files.h"
#include "nvidia/gpus.h"

#define KDEV_DRA_PLUGIN_DEFAULT_DRIVER "gpu.nvidia.com"
#define KDEV_DRA_CDI_KIND "k8s.gpu.nvidia.com/claim"
#define KDEV_DRA_DEFAULT_CDI_DIR "/var/run/cdi"
#define KDEV_DRA_PLUGIN_TYPE "DRAPlugin"

/* Longest claim UID accepted (bytes). Kubernetes UIDs are RFC 4122 UUIDs,
 * 36 characters, generated by the API server (k8s.io/apimachinery
 * pkg/util/uuid); the margin admits other generators. */
#define KDEV_DRA_CLAIM_UID_MAX 128

/* Method paths served. */
#define KDEV_DRA_REG_GETINFO "/pluginregistration.Registration/GetInfo"
#define KDEV_DRA_REG_NOTIFY "/pluginregistration.Registration/NotifyRegistrationStatus"
#define KDEV_DRA_V1_PREPARE "/k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin/NodePrepareResources"
#define KDEV_DRA_V1_UNPREPARE "/k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin/NodeUnprepareResources"
#define KDEV_DRA_V1BETA1_PREPARE \
        "/k8s.io.kubelet.pkg.apis.dra.v1beta1.DRAPlugin/NodePrepareResources"
#define KDEV_DRA_V1BETA1_UNPREPARE \
        "/k8s.io.kubelet.pkg.apis.dra.v1beta1.DRAPlugin/NodeUnprepareResources"

/* Claim source: reads ResourceClaim |ns|/|name| into *claim (new reference,
 * resource.k8s.io v1 shape). Returns 0 or a negative errno with |err| set. */
typedef int (*kdev_dra_get_claim_fn)(void *arg, const char *ns, const char *name, json_t **claim,
                                     struct kdev_err *err);

/* The real claim source: |arg| is a struct kdev_kube * (kube/kube.h);
 * calls kdev_kube_get_claim (blocking). */
KDEV_API int kdev_dra_kube_claim_source(void *arg, const char *ns, const char *name, json_t **claim,
                               struct kdev_err *err);

/* NotifyRegistrationStatus from kubelet: |registered| and |error| (never
 * NULL, may be empty). */
typedef void (*kdev_dra_status_fn)(void *arg, bool registered, const char *error);

/* One claim NodePrepareResources or NodeUnprepareResources handled, for the
 * caller's log (kdev libraries do not log). All pointers are borrowed for
 * the duration of the call. */
struct kdev_dra_claim_event {
        bool prepare;          /* NodePrepareResources; false: NodeUnprepareResources */
        const char *ns, *name, *uid; /* as kubelet sent them (never NULL, may be empty) */
        /* Prepare: answered from the checkpoint (the claim was prepared
         * before). Unprepare: the claim was prepared (false: it was unknown,
         * nothing to undo). */
        bool recorded;
        /* The claim's device records (checkpoint.h: device, cdiDeviceIDs, ...):
         * the devices prepared, or the devices unprepared; NULL on failure
         * or for an unknown claim unprepared. */
        const json_t *devices;
        const char *error;     /* NULL on success, else the claim's error as answered */
        /* seconds from the call's arrival to this claim's answer (its claim
         * read from the API server included); < 0: unknown */
        double seconds;
};

typedef void (*kdev_dra_claim_fn)(void *arg, const struct kdev_dra_claim_event *ev);

/* A state file of the plugin (the claim checkpoint, a claim's CDI spec) was
 * changed by someone else: it was moved to |aside| ("<dir>/.<name>.foreign-
 * <unix seconds>", common/file.h) before kdev rebuilt it from memory
 * (|rebuilt|), or, on Unprepare, instead of being removed (!|rebuilt|). Both
 * paths borrowed for the call. */
typedef void (*kdev_dra_file_aside_fn)(void *arg, const char *path, const char *aside,
                                       bool rebuilt);

/* MIG instance operations for dynamic MIG ("Dynamic MIG" above), called on
 * the loop thread with |arg|; each returns 0 or a negative errno with
 * |err|. kdev-dra-plugin binds them to the NVIDIA backend
 * (nvidia/dra_backend.h kdev_nvidia_dra_backend_mig_*). */
struct kdev_dra_mig_ops {
        /* Makes a GPU instance of driver profile id |gi_profile_id| at memory
         * slice |start| on GPU |gpu_uuid| and one compute instance of its
         * full size; fills *out. */
        int (*create)(void *arg, const char *gpu_uuid, unsigned gi_profile_id, unsigned start,
                      struct kdev_nvidia_mig_made *out, struct kdev_err *err);
        /* Destroys compute instance |ci_id| of GPU instance |gi_id| and the
         * GPU instance; *gone (may be NULL) true when it did not exist. */
        int (*destroy)(void *arg, const char *gpu_uuid, unsigned gi_id, unsigned ci_id,
                       bool *gone, struct kdev_err *err);
        /* The MIG devices on GPU |gpu_uuid| now (at most |cap| into |out|,
         * *n set; -E2BIG beyond). */
        int (*list)(void *arg, const char *gpu_uuid, struct kdev_nvidia_mig_made *out,
                    size_t cap, size_t *n, struct kdev_err *err);
        void *arg;
};

struct kdev_dra_plugin_options {
        const char *driver;   /* NULL: KDEV_DRA_PLUGIN_DEFAULT_DRIVER */
        const char *pool;     /* pool name = node name; required */
        const char *data_dir; /* checkpoint directory; required */
        const char *cdi_dir;  /* NULL: KDEV_DRA_DEFAULT_CDI_DIR */
        /* the host's root of the NVIDIA device nodes: control nodes are
         * looked up there and every node's hostPath is under it; NULL: "/" */
        const char *dev_root;
        const char *proc_root; /* where driver/nvidia-caps/mig-minors is read; NULL: "/proc" */
        /* where bus/pci/devices/<bus id>/drm is read (a whole GPU's DRM
         * nodes, nvidia/container_edits.h); borrowed; NULL: "/sys" */
        const char *sysfs_root;
        /* the node's GPU records (nvidia/gpus.h: NVML-free, filled by the
         * NVIDIA backend); borrowed, must outlive the plugin; read at each
         * prepare, so a caller may refill them in place */
        const struct kdev_nvidia_gpus *gpus;
        /* the driver's files as CDI common edits, added to each claim spec's
         * spec-level edits (nvidia/driver_files.h); borrowed, must outlive
         * the plugin; NULL: none */
        const struct kdev_nvidia_driver_files *driver_files;
        /* the share root (nvidia/share_host.h, installed by the caller) under
         * which share claims get their region directories
         * (<root>/claims/<uid>-<device>): set, whole GPUs are published
         * shareable and shares are prepared ("Shares" above); NULL: off */
        const char *share_root;
        /* Dynamic MIG ("Dynamic MIG" above): the MIG instance operations,
         * borrowed, must outlive the plugin; NULL: off (a placement device
         * then fails the claim) */
        const struct kdev_dra_mig_ops *mig;
        kdev_dra_get_claim_fn get_claim; /* required */
        void *get_claim_arg;
        kdev_dra_status_fn on_status; /* may be NULL */
        void *on_status_arg;
        /* called on the loop thread once per distinct claim of each
         * NodePrepareResources / NodeUnprepareResources call answered (not
         * for calls that ended before their claims were prepared); may be NULL */
        kdev_dra_claim_fn on_claim;
        void *on_claim_arg;
        /* called on the loop thread for each state file moved aside; may be
         * NULL */
        kdev_dra_file_aside_fn on_file_aside;
        void *on_file_aside_arg;
};

struct kdev_dra_plugin;

/* Creates a plugin (strings copied) and loads <data_dir>/dra-claims.json.
 * A corrupt checkpoint is moved aside (checkpoint.h) and the plugin starts
 * with no prepared claims: *out is still set, the function returns 0, and
 * kdev_dra_plugin_checkpoint_error() gives the message to log. A checkpoint
 * of a newer kdev (a higher version) is left alone and creation fails with
 * -ENOTSUP ("checkpoint <path> was written by a newer kdev (version 2, this
 * one reads 1); refusing to start so prepared claims are not forgotten"); so
 * is one that is not a regular file (-EINVAL, -EISDIR: "claim checkpoint
 * <path>: is not a regular file (a FIFO); refusing to start, it is left
 * alone") or is too large (-EFBIG), as kdev_dra_cp_load says.
 * Returns 0, -EINVAL (missing option or not a regular file), -EISDIR,
 * -EFBIG, -ENOTSUP or -ENOMEM, with |err|. Free with
 * kdev_dra_plugin_free() (after kdev_dra_plugin_stop() completed). */
KDEV_API int kdev_dra_plugin_new(const struct kdev_dra_plugin_options *opts, struct kdev_dra_plugin **out,
                        struct kdev_err *err);

/* Removes the temporary files a kill during an atomic write left behind:
 * in the CDI dir ".<vendor>-<class>_<id>.json.XXXXXX" (kdev_cdi_spec_write's
 * temporary names of the claim spec files, ".k8s.gpu.nvidia.com-claim_
 * <uid>.json.XXXXXX"), in the data dir "dra-claims.json.tmp.XXXXXX"
 * (kdev_dra_cp_save's); XXXXXX six letters or digits, regular files only,
 * nothing else touched (checkpoint.h kdev_dra_remove_temps). |removed| (may
 * be NULL) is told each path (and the errno of one that could not be
 * removed). Call it after kdev_dra_plugin_new and before
 * kdev_dra_plugin_start. Returns the number removed or a negative errno with
 * |err| (a directory that cannot be read). */
KDEV_API int kdev_dra_plugin_remove_stale_temps(struct kdev_dra_plugin *p, kdev_dra_removed_fn removed,
                                       void *arg, struct kdev_err *err);

/* The message of the checkpoint load failure at creation, or NULL. */
KDEV_API const char *kdev_dra_plugin_checkpoint_error(const struct kdev_dra_plugin *p);

/* What kdev_dra_plugin_reconcile_mig did for one claim, for the caller's
 * log: |action| "destroyed" (an instance of a claim left "migPending"),
 * "forgotten" (such a claim, its instances gone), "recreated" (a prepared
 * claim's instance made again), "adopted" (the instance a kill left at a
 * prepared claim's placement recorded) or "failed" (|error| says why); the
 * device may be NULL. All borrowed for the call. */
typedef void (*kdev_dra_mig_report_fn)(void *arg, const char *action, const char *uid,
                                       const char *device, const char *error);

/* Finishes the dynamic MIG work a kill left ("Dynamic MIG" above) with
 * options.mig (nothing without it). Call once after kdev_dra_plugin_new,
 * before serving; loop thread. Returns the number of claims acted on, or a
 * negative errno with |err| when the checkpoint cannot be saved afterwards
 * (an instance that cannot be destroyed or made is reported "failed" and
 * its claim kept as it was, not an error). */
KDEV_API int kdev_dra_plugin_reconcile_mig(struct kdev_dra_plugin *p, kdev_dra_mig_report_fn fn,
                                           void *arg, struct kdev_err *err);

/* Sets the devices currently withdrawn from the ResourceSlices as unhealthy:
 * |uuids| ("GPU-…" or "MIG-…"; copied, replacing the previous list; n 0
 * clears it). Prepare of a claim that is not prepared yet fails for a device
 * whose GPU or MIG UUID is listed (a listed GPU covers its MIG devices):
 * -EIO, "claim <ns>/<name> (<uid>): device <name> (<uuid>) is unhealthy:
 * withdrawn from the ResourceSlice, not prepared", and nothing is written
 * or recorded for the claim. Claims already prepared (in the checkpoint)
 * keep being answered from it. Loop thread. Returns 0 or -ENOMEM. */
KDEV_API int kdev_dra_plugin_set_unhealthy(struct kdev_dra_plugin *p, const char *const *uuids, size_t n,
                                  struct kdev_err *err);

/* Prepares claim |uid| (|ns|/|name|) as described above. *devices (may be
 * NULL) receives the borrowed device array (checkpoint records: requestNames,
 * pool, device, cdiDeviceIDs), valid until the claim changes. Returns 0 or a
 * negative errno with |err|: -ESTALE (UID mismatch), -ENODATA (not
 * allocated / nothing for this driver and pool), -ENODEV (a device name
 * this node does not publish, or its GPU gone), -EIO (a device withdrawn as
 * unhealthy, see kdev_dra_plugin_set_unhealthy, or a faulted GPU), -ENOENT
 * (MIG capability line missing), errors of the claim source, CDI writer and
 * checkpoint, -EINVAL (a UID kdev_dra_check_claim_uid refuses). On failure nothing stays recorded for a
 * claim that was not prepared before. */
KDEV_API int kdev_dra_prepare_claim(struct kdev_dra_plugin *p, const char *ns, const char *name,
                           const char *uid, const json_t **devices, struct kdev_err *err);

/* One claim of a NodePrepareResources call, for kdev_dra_prepare_many. */
struct kdev_dra_fetch; /* plugin_internal.h: a claim read off the loop thread */
struct kdev_dra_prepare_item {
        const char *ns, *name, *uid; /* in, borrowed */
        /* in: the claim as read on another thread (plugin_internal.h), or
         * NULL: read now through the claim source (blocking) */
        const struct kdev_dra_fetch *fetched;
        int rc;                      /* out: 0 or a negative errno, as kdev_dra_prepare_claim */
        struct kdev_err err;         /* out: the error when rc < 0 */
        const json_t *devices;       /* out: as kdev_dra_prepare_claim's *devices (borrowed) */
        bool recorded;               /* out: answered from the checkpoint */
};

/* Prepares the |n| claims of |v| as one NodePrepareResources call: each as
 * kdev_dra_prepare_claim does, with the same answers and errors, but the
 * claims not prepared before are recorded in the checkpoint with one save
 * (one atomic write and its fsyncs) for the whole call, after every check
 * and spec build and before any of their CDI specs is written; a failed
 * save fails each of them with "claim <ns>/<name> (<uid>): checkpoint: ..."
 * and writes no spec. A claim whose spec write then fails is removed again
 * (a second save). So the checkpoint records every claim whose spec exists
 * before the call answers, as for single claims. The claims are checked in
 * order: a device already prepared for an earlier claim of the same call is
 * held (-EBUSY) like one of an earlier call. A UID repeated in |v| gets the
 * answer of its first item. Loop thread. Returns the number of items that
 * failed (0..n). */
KDEV_API int kdev_dra_prepare_many(struct kdev_dra_plugin *p, struct kdev_dra_prepare_item *v,
                                   size_t n);

/* Counters of the prepare work since the plugin was created (monotonic
 * clock, nanoseconds), for benchmarks and metrics. */
struct kdev_dra_prepare_stats {
        uint64_t calls;             /* kdev_dra_prepare_many calls (a single claim: 1) */
        uint64_t claims;            /* claims not in the checkpoint that were prepared or tried */
        uint64_t checkpoint_writes; /* checkpoint saves by prepares */
        uint64_t spec_writes;       /* CDI specs of new claims written */
        uint64_t read_ns;           /* claim source calls made by the plugin itself */
        uint64_t build_ns;          /* claim checks, spec builds, records (no I/O) */
        uint64_t checkpoint_ns;     /* checkpoint saves (write, fsync, rename, dir fsync) */
        uint64_t specs_ns;          /* CDI spec reads and atomic writes */
};

/* Copies the counters into *out. */
KDEV_API void kdev_dra_plugin_stats(const struct kdev_dra_plugin *p,
                                    struct kdev_dra_prepare_stats *out);

/* Unprepares claim |uid| as described above (0 and nothing removed for a
 * claim the checkpoint does not record). Returns 0, or a negative errno
 * with |err|: -EINVAL for a UID kdev_dra_check_claim_uid refuses, or when
 * the CDI spec cannot be removed or the checkpoint cannot be saved (the
 * entry is kept then, so a retry works). */
KDEV_API int kdev_dra_unprepare_claim(struct kdev_dra_plugin *p, const char *uid, struct kdev_err *err);

/* Checks claim UID |uid| (from kubelet) of claim |ns|/|name| (both NULL:
 * unnamed): 1 to KDEV_DRA_CLAIM_UID_MAX characters, each an ASCII letter,
 * digit or '-' (the characters of the UUIDs Kubernetes assigns; types.UID
 * is any string, but kdev names files after it and refuses the rest). With
 * this set the CDI spec file name "k8s.gpu.nvidia.com-claim_<uid>.json" is
 * the UID itself (CDI's transient name maps '/' to '_', which never
 * occurs), so distinct claims never share a spec file. Returns 0 or -EINVAL
 * with |err|, "<C> missing", "<C> \"<uid>\" refused: character <n> ('<c>')
 * is not an ASCII letter, digit or '-'" (a byte outside printable ASCII as
 * 0x<hex>; in the shown UID as \x<hex>, cut after 40 bytes with "...") or
 * "<C> \"<uid>\" refused: <n> characters, at most 128 allowed", where <C>
 * is "claim <ns>/<name>: UID" or "claim UID". */
KDEV_API int kdev_dra_check_claim_uid(const char *ns, const char *name, const char *uid,
                             struct kdev_err *err);

/* Number of prepared claims recorded. */
KDEV_API size_t kdev_dra_plugin_prepared(const struct kdev_dra_plugin *p);

/* Path of the CDI spec of claim |uid| into |buf|. Returns its length or a
 * negative errno (-EINVAL for a UID kdev_dra_check_claim_uid refuses). */
KDEV_API int kdev_dra_claim_spec_path(const struct kdev_dra_plugin *p, const char *uid, char *buf,
                             size_t size, struct kdev_err *err);

/* Starts serving on |loop|: the DRA services on |dra_socket| and the
 * registration service on |reg_socket| (both paths copied; GetInfo's endpoint
 * is |dra_socket| as given, so pass an absolute path). A stale file at either
 * path is unlinked first. Returns 0 or a negative errno with |err| (nothing
 * left listening then; the servers close asynchronously, so run |loop| until
 * it has no more handles of theirs before kdev_dra_plugin_free()). */
KDEV_API int kdev_dra_plugin_start(struct kdev_dra_plugin *p, uv_loop_t *loop, const char *dra_socket,
                          const char *reg_socket, struct kdev_err *err);

/* Re-creates a socket that vanished (kubelet plugin registration is driven by
 * the socket files: an operator or a kubelet cleanup that deletes them would
 * otherwise leave the plugin unreachable). For the DRA socket and the
 * registration socket: when the path no longer names a socket, a new server
 * listens there and the old one is closed (its open calls are cancelled); a
 * re-created registration socket makes kubelet register the plugin again.
 * Call it periodically (e.g. from a 1 s uv_timer; kubelet's reconciler also
 * runs every 1 s). Returns the number of sockets re-created (0..2; 0 when not
 * serving) or a negative errno with |err|. */
KDEV_API int kdev_dra_plugin_check_sockets(struct kdev_dra_plugin *p, struct kdev_err *err);

/* Stops serving: unlinks the registration socket first (kubelet then
 * deregisters), closes both servers (open calls are cancelled); |done| (may
 * be NULL) runs on the loop once both are released and no claim read is in
 * flight any more (a blocked claim source delays it). Safe when not started
 * (|done| runs at once unless a read is in flight). */
KDEV_API void kdev_dra_plugin_stop(struct kdev_dra_plugin *p, void (*done)(void *arg), void *arg);

/* Frees |p| (NULL-safe). Call only when not serving. */
KDEV_API void kdev_dra_plugin_free(struct kdev_dra_plugin *p);

#endif /* KDEV_DRA_PLUGIN_H */
