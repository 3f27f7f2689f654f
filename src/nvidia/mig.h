/* MIG for the NVIDIA resources: profile names computed from NVML numbers,
 * mixed-strategy resource names, and the MIG capability device nodes of
 * /proc/driver/nvidia-caps/mig-minors.
 *
 * Follows NVIDIA's k8s-device-plugin v0.20.0 (internal/rm/device_map.go,
 * internal/plugin/server.go) with go-nvlib v0.12.0: go-nvlib
 * pkg/nvlib/device/mig_profile.go (NewMigProfile, String,
 * getMigMemorySizeGB), the plugin's internal/rm (mixed resource names) and
 * internal/mig (GetMigCapabilityDevicePaths). Names are never looked up in a
 * table: they are computed from the GPU-instance and compute-instance
 * profile indices, the MIG memory and the parent GPU's total memory.
 *
 * Beside them, the DRA device names of the GPUs and MIG devices (NVIDIA's
 * DRA driver for GPUs; kdev_nvidia_dra_*_name, at the end), so that one
 * NVIDIA module holds every NVIDIA name both front ends use.
 */
#ifndef KDEV_NVIDIA_MIG_H
#define KDEV_NVIDIA_MIG_H

#include <stdbool.h>
#include <stddef.h>

#include "common/err.h"
#include "nvidia/config.h"

/* NVML discovery's records (nvml/discover.h), taken by pointer only: this
 * header includes nothing of src/nvml, so a front end may read the DRA
 * device names and the mig-minors functions without seeing NVML. */
struct kdev_gpu;
struct kdev_mig_device;
struct kdev_nvml_mig_profile;

/* Longest profile name kdev writes ("8c.8g.1234567gb+me.all" fits). */
#define KDEV_NVIDIA_MIG_PROFILE_MAX 48
/* Prefix of the mixed-strategy resource names. */
#define KDEV_NVIDIA_MIG_RESOURCE_PREFIX "nvidia.com/mig-"
/* mig-minors under the proc root, and the capability device directory. */
#define KDEV_NVIDIA_MIG_MINORS_FILE "driver/nvidia-caps/mig-minors"
/* Largest mig-minors file read (bytes): kind "MIG minors file". The driver's
 * lists 32 GPUs' minors, about 150 KiB. */
#define KDEV_NVIDIA_MIG_MINORS_FILE_MAX (1024 * 1024)
#define KDEV_NVIDIA_CAPS_DEV_DIR "/dev/nvidia-caps"

/* G: the slice count of GPU-instance profile index |gi_index|
 * (NVML_GPU_INSTANCE_PROFILE_*): 1 for 1_SLICE, _REV1, _REV2, _GFX, _NO_ME,
 * _ALL_ME; 2 for 2_SLICE, _REV1, _GFX, _NO_ME, _ALL_ME; 3, 4 (and 4_SLICE_GFX),
 * 6, 7, 8. 0 for an index go-nvlib does not know (3_SLICE_GFX = 0x11 and
 * beyond). */
KDEV_API unsigned kdev_nvidia_mig_gi_slices(unsigned gi_index);

/* C: the slice count of compute-instance profile index |ci_index|
 * (NVML_COMPUTE_INSTANCE_PROFILE_*): 1 for 1_SLICE and 1_SLICE_REV1; 2, 3,
 * 4, 6, 7 (and 7_SLICE_NVL), 8. 0 for an unknown index. */
KDEV_API unsigned kdev_nvidia_mig_ci_slices(unsigned ci_index);

/* The "<GB>" part of a profile name (go-nvlib getMigMemorySizeGB):
 *   frac = mig_mib * 2^20 / parent_total_bytes, rounded up to eighths;
 *   GB = round-half-away(frac * ceil(parent_total_bytes / 2^30)).
 * Computed in IEEE double exactly as the Go code does. |parent_total_bytes|
 * is nvmlMemory_t.total of the parent GPU (bytes), |mig_mib| the MIG memory
 * in MiB (nvmlGpuInstanceProfileInfo_t / nvmlDeviceAttributes_t
 * .memorySizeMB). Returns 0 when |parent_total_bytes| is 0. */
KDEV_API unsigned long long kdev_nvidia_mig_memory_gb(unsigned long long mig_mib,
                                             unsigned long long parent_total_bytes);

/* Writes the MIG profile name into |buf| (|size| bytes; KDEV_NVIDIA_MIG_
 * PROFILE_MAX is enough): "<G>g.<GB>gb" when C == G, otherwise
 * "<C>c.<G>g.<GB>gb", then the suffix of the GPU-instance profile:
 * "+me" for *_SLICE_REV1, "+me.all" for *_SLICE_ALL_ME, "+gfx" for
 * *_SLICE_GFX, "-me" for *_SLICE_NO_ME, none otherwise (REV2, the double-
 * memory 1g, has none). G from |gi_index|, C from |ci_index|, GB from
 * kdev_nvidia_mig_memory_gb(|memory_mib|, |parent_total_bytes|).
 * Examples (NVIDIA MIG User Guide, "Supported MIG Profiles"; H200 from
 * `nvidia-smi mig -lgip` in NVIDIA/mig-parted issue #120): A100-40GB (40960 MiB) index 0x7 / CI 0 / 4864 MiB
 * -> "1g.5gb+me"; H200 (143771 MiB) index 0x2 / CI 2 / 71168 MiB ->
 * "3g.71gb"; index 0x2 / CI 0 -> "1c.3g.71gb".
 * Returns the length, or -EINVAL with |err| ("unknown GPU instance profile
 * index 0x11", "unknown compute instance profile index 0x9", "parent GPU
 * memory size is 0"), -ENOBUFS when |buf| is too small. |err| may be NULL. */
KDEV_API int kdev_nvidia_mig_profile_name(unsigned gi_index, unsigned ci_index,
                                 unsigned long long memory_mib,
                                 unsigned long long parent_total_bytes, char *buf, size_t size,
                                 struct kdev_err *err);

/* The name of a GPU instance of profile |p| (nvml/mig_config.h, from
 * kdev_nvml_mig_placements) holding one compute instance of its full size,
 * as nvidia-smi mig -lgip and NVIDIA's DRA driver name the profile
 * ("1g.10gb", "3g.40gb", "7g.80gb" on H100 80GB; "1g.10gb+me" for index
 * 0x7): kdev_nvidia_mig_profile_name of |p|->index, the first compute-
 * instance profile index whose slice count is the GPU instance's (the
 * full-size CI that kdev_nvml_mig_create makes), |p|->info.memorySizeMB
 * (MiB) and |parent_total_bytes| (kdev_nvml_mig_placements' memory_total).
 * Returns the length, or kdev_nvidia_mig_profile_name's errors; -EINVAL
 * "no compute instance profile of <G> slices" for an unknown slice count.
 * |err| may be NULL. */
KDEV_API int kdev_nvidia_mig_gi_profile_name(const struct kdev_nvml_mig_profile *p,
                                             unsigned long long parent_total_bytes, char *buf,
                                             size_t size, struct kdev_err *err);

/* The profile name of an existing MIG device |m| of |parent| (go-nvlib
 * GetProfile): its matched GI/CI profile indices, its attributes'
 * memorySizeMB, and the parent's nvmlDeviceGetMemoryInfo total. Errors
 * (-EIO unless noted): "error getting MIG profile for MIG device at index
 * '(<i>, <j>)': error getting parent memory info: <nvmlErrorString>" when
 * discovery could not read the parent's memory (errno from the NVML code),
 * and the errors of kdev_nvidia_mig_profile_name in that same wrapping. */
KDEV_API int kdev_nvidia_mig_device_profile(const struct kdev_gpu *parent,
                                   const struct kdev_mig_device *m, char *buf, size_t size,
                                   struct kdev_err *err);

/* The mixed-strategy resource name of |profile|: "nvidia.com/mig-" + profile
 * with every '+' replaced by '.' ("1g.10gb+me" -> "nvidia.com/mig-1g.10gb.me",
 * "1g.24gb-me" -> "nvidia.com/mig-1g.24gb-me"). Returns the length or
 * -ENOBUFS. */
KDEV_API int kdev_nvidia_mig_resource_name(const char *profile, char *buf, size_t size);

/* One line of mig-minors. */
struct kdev_nvidia_mig_minor {
        unsigned gpu, gi;   /* gpu<g>/gi<i>/... (g is the GPU's minor number) */
        int ci;             /* gpu<g>/gi<i>/ci<c>/access: c; -1 for gpu<g>/gi<i>/access */
        unsigned minor;     /* /dev/nvidia-caps/nvidia-cap<minor> */
};

/* The parsed <proc root>/driver/nvidia-caps/mig-minors. */
struct kdev_nvidia_mig_minors {
        bool present;                        /* the file existed */
        struct kdev_nvidia_mig_minor *entries; /* access lines, in file order */
        size_t n_entries;
        int config, monitor;                 /* "config <m>", "monitor <m>"; -1 if absent */
        size_t n_skipped;                    /* lines that parse as none of these */
};

/* Reads <|proc_root| or "/proc">/driver/nvidia-caps/mig-minors into |out|
 * (NVIDIA internal/mig GetMigCapabilityDevicePaths): lines
 * "gpu<g>/gi<i>/ci<c>/access <m>", "gpu<g>/gi<i>/access <m>", "config <m>",
 * "monitor <m>"; other lines are skipped and counted (NVIDIA logs "Skipping
 * line in MIG minors file"); a later line for the same key wins. A missing
 * file is not an error (out->present false, no entries: NVIDIA's "not a MIG
 * capable machine"). Lines holding a NUL byte are skipped too. The file is
 * read with kdev_file_read (a regular file, as procfs files are, of at most
 * KDEV_NVIDIA_MIG_MINORS_FILE_MAX bytes). Clear with
 * kdev_nvidia_mig_minors_clear. Errors: "error opening MIG minors file: "
 * followed by kdev_file_read's message with its errno ("<path>: cannot read:
 * <strerror>", "<path>: is not a regular file (a FIFO)", "<path>: the MIG
 * minors file is larger than 1048576 bytes"), -ENOMEM. */
KDEV_API int kdev_nvidia_mig_minors_read(const char *proc_root, struct kdev_nvidia_mig_minors *out,
                                struct kdev_err *err);

/* Frees what |m| owns; NULL-safe; leaves it empty. */
KDEV_API void kdev_nvidia_mig_minors_clear(struct kdev_nvidia_mig_minors *m);

/* The capability minors of MIG device (GPU instance |gi|, compute instance
 * |ci|) on the GPU with minor number |gpu_minor| (NVIDIA nvmlMigDevice
 * GetPaths). Returns 0 with *gi_cap / *ci_cap set, or -ENOENT with NVIDIA's
 * "missing MIG GPU instance capability path:
 * /proc/driver/nvidia/capabilities/gpu<g>/mig/gi<i>/access" (for a missing
 * CI line the CI path .../gi<i>/ci<c>/access is named; NVIDIA names the GI
 * path there by mistake). */
KDEV_API int kdev_nvidia_mig_caps(const struct kdev_nvidia_mig_minors *m, unsigned gpu_minor, unsigned gi,
                         unsigned ci, unsigned *gi_cap, unsigned *ci_cap, struct kdev_err *err);

/* --- DRA device names ------------------------------------------------------
 * The names kdev-dra-plugin publishes in its ResourceSlices and reads back
 * from a claim's allocation, as NVIDIA's DRA driver for GPUs names them
 * (NVIDIA/k8s-dra-driver-gpu, now kubernetes-sigs/dra-driver-nvidia-gpu,
 * cmd/gpu-kubelet-plugin/device_state.go), so that DeviceClasses and CEL
 * selectors written for it match kdev's devices:
 *   full GPU  "gpu-<minor>"
 *   MIG       "gpu-<parent minor>-mig-<profile>-<GI profile id>-<GI placement start>"
 */

/* Longest DRA device name: a DNS label (resource.k8s.io DeviceNameMaxLength). */
#define KDEV_NVIDIA_DRA_NAME_MAX 63

/* The device name of whole GPU |g|: "gpu-<minor>" (|g|->minor, the
 * /dev/nvidia<minor> number). Writes the NUL-terminated name into |buf|
 * (|size| bytes; KDEV_NVIDIA_DRA_NAME_MAX + 1 always suffice) and returns its
 * length, or -ENAMETOOLONG (|buf| too small). */
KDEV_API int kdev_nvidia_dra_gpu_name(const struct kdev_gpu *g, char *buf, size_t size);

/* Reads the minor number out of a DRA device name: true with *|minor| set
 * when |name| starts with "gpu-" and a decimal digit (sscanf "%u", so the
 * number wraps as strtoul does), *|mig| true when more follows the number (a
 * MIG device name of that parent, to be matched with kdev_nvidia_dra_mig_name
 * against the parent's MIG devices; "gpu-<minor>" alone: false); false for
 * any other name. */
KDEV_API bool kdev_nvidia_dra_name_minor(const char *name, unsigned *minor, bool *mig);

/* The device name of MIG device |m| of GPU |g|, NVIDIA's DRA driver's
 * canonical MIG device name (k8s-dra-driver-gpu v25.12,
 * cmd/gpu-kubelet-plugin/mig.go, MigSpecTuple.ToCanonicalName):
 *   "gpu-<parent minor>-mig-<profile>-<GI profile id>-<GI placement start>"
 * <GI profile id> is nvmlGpuInstanceProfileInfo_t.id (the id `nvidia-smi mig
 * -lgip` shows and nvmlDeviceCreateGpuInstance takes: 9 for 3g.20gb on an
 * A100-40GB), <GI placement start> the GPU instance's first memory slice.
 * <profile> is the MIG profile (the text after " MIG " in NVML's device name,
 * else -- no such text, or nothing of it left below -- go-nvlib's spelling
 * computed from the profiles: "1g.5gb", "1g.10gb+me", "1c.3g.20gb") made a
 * DNS-label part as NVIDIA does: dots dropped, upper case lowered, any other
 * character but [a-z0-9-] turned into '-', '-' trimmed at both ends
 * ("3g.20gb" -> "3g20gb", "1g.10gb+me" -> "1g10gb-me").
 * kdev also publishes compute instances that do not span their GPU instance
 * (NVIDIA's driver publishes none); their profile part gets "-ci<CI placement
 * start>" ("gpu-0-mig-1c3g20gb-ci1-9-4") so that names stay unique per node.
 * The profile part is shortened so that the name has at most
 * KDEV_NVIDIA_DRA_NAME_MAX characters. Writes the NUL-terminated name into
 * |buf| (|size| bytes; KDEV_NVIDIA_DRA_NAME_MAX + 1 always suffice) and
 * returns its length, -ENAMETOOLONG (|buf| too small, or a minor number
 * that leaves no room for the profile) or -EINVAL (no profile text left). */
KDEV_API int kdev_nvidia_dra_mig_name(const struct kdev_gpu *g, const struct kdev_mig_device *m,
                             char *buf, size_t size);

/* The device name of a possible MIG placement (dynamic MIG, KEP-4815
 * partitionable devices: a GPU instance that does not exist yet, published so
 * that a claim may ask for it), NVML-free: NVIDIA's DRA driver's canonical
 * name as kdev_nvidia_dra_mig_name makes it (same profile spelling, same
 * shortening), from the parent's minor |parent_minor|, the GPU-instance
 * profile name |profile| as nvidia-smi mig -lgip spells it ("1g.10gb",
 * kdev_nvidia_mig_gi_profile_name), the GPU-instance profile id
 * |gi_profile_id| (nvmlGpuInstanceProfileInfo_t.id) and the placement's first
 * memory slice |placement_start|: (0, "1g.10gb", 19, 3) ->
 * "gpu-0-mig-1g10gb-19-3" (k8s-dra-driver-gpu cmd/gpu-kubelet-plugin,
 * MigSpecTuple.ToCanonicalName). Writes the NUL-terminated name into |buf|
 * (|size| bytes; KDEV_NVIDIA_DRA_NAME_MAX + 1 suffice). Returns its length,
 * -EINVAL (|profile| NULL or with nothing left as a label part) or
 * -ENAMETOOLONG (|buf| too small, or a minor that leaves no room). */
KDEV_API int kdev_nvidia_dra_placement_name(unsigned parent_minor, const char *profile,
                                            unsigned gi_profile_id, unsigned placement_start,
                                            char *buf, size_t size);

/* The name of the shared counter set of the GPU with minor |minor| (KEP-4815
 * ResourceSlice spec.sharedCounters[].name, a DNS label), as NVIDIA's DRA
 * driver names it with DynamicMIG: "gpu-<minor>-counter-set". Writes it into
 * |buf| (|size| bytes; KDEV_NVIDIA_DRA_NAME_MAX + 1 suffice). Returns its
 * length or -ENAMETOOLONG. */
KDEV_API int kdev_nvidia_dra_counter_set_name(unsigned minor, char *buf, size_t size);

/* Whether |file_name| (a file name, no directory) is named as NVIDIA's device
 * plugin names its sockets in kubelet's device-plugins directory:
 * "nvidia-<name>.sock", <name> the resource name without "nvidia.com/"
 * (nvidia-gpu.sock, nvidia-mig-1g.5gb.sock, nvidia-gpu.shared.sock), of the
 * characters a resource name allows (A-Z a-z 0-9 - _ .). Source: NVIDIA
 * k8s-device-plugin internal/plugin/server.go (getPluginSocketPath).
 * kdev-plugin warns at start when such a socket is there, since both
 * plugins can register nvidia.com/gpu at once. */
KDEV_API bool kdev_nvidia_is_plugin_socket_name(const char *file_name);

#endif /* KDEV_NVIDIA_MIG_H */
