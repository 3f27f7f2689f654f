/* GPU node labels for Node Feature Discovery's local source (a file in
 * /etc/kubernetes/node-feature-discovery/features.d/), with the label names
 * and value rules of NVIDIA's GPU Feature Discovery (GFD), built from kdev's
 * own discovery (nvml/discover.h) and NVIDIA config (nvidia/config.h).
 *
 * Follows GFD as shipped in NVIDIA's k8s-device-plugin (v0.15+;
 * docs/gpu-feature-discovery/README.md; internal/lm/{nvml,resource,
 * mig-strategy,machine-type}.go, internal/resource/nvml-mig-device.go):
 *
 * Node-wide (only when at least one GPU was discovered; GFD writes no device
 * labels without GPUs):
 *   nvidia.com/cuda.driver-version.{major,minor,revision,full} from the
 *     driver version "X.Y[.Z]" (revision empty for "X.Y"), and GFD's
 *     deprecated nvidia.com/cuda.driver.{major,minor,rev} (GFD still writes
 *     them);
 *   nvidia.com/cuda.runtime-version.{major,minor,full} from the CUDA driver
 *     version v (major v/1000, minor v%1000/10, full "major.minor") and the
 *     deprecated nvidia.com/cuda.runtime.{major,minor}; left out when v is 0
 *     (unknown: GFD would fail instead);
 *   nvidia.com/gpu.machine: the first line of the machine type file
 *     (default /sys/class/dmi/id/product_name) trimmed and sanitised, or
 *     "unknown" when it cannot be read, as GFD writes;
 *   nvidia.com/gpu.mode: "compute" when every GPU's PCI class
 *     (<sysfs>/bus/pci/devices/<bus id>/class) is 0x030200, "graphics" when
 *     every one is 0x030000, otherwise (mixed, other, unreadable) "unknown";
 *   nvidia.com/mig.capable: "true" when any GPU answered nvmlDeviceGetMigMode;
 *   nvidia.com/mps.capable: "true" when the sharing strategy is MPS (GFD
 *     internal/lm: SharingStrategy() == mps), else "false";
 *   nvidia.com/mig.strategy=single|mixed (not written for none, as GFD).
 * GFD's nvidia.com/gfd.timestamp is left out on purpose: the file is then a
 * pure function of the node, rewritten only when something changed.
 *
 * Whole GPUs, nvidia.com/gpu.{product,count,replicas,sharing-strategy,memory,
 * family,compute.major,compute.minor} (every strategy):
 *   product: the GPU name sanitised (characters outside [A-Za-z0-9-_. ]
 *     dropped, runs of blanks joined by one '-'), plus "-SHARED" when
 *     sharing.timeSlicing replicates nvidia.com/gpu (replicas > 1) without a
 *     new name (kdev honours `rename`; renameByDefault also counts as one);
 *   count: the GPUs of that model (any MIG mode);
 *   replicas: the replicas of nvidia.com/gpu (sharing.mps when present, else
 *     sharing.timeSlicing), else 1;
 *     sharing-strategy: "time-slicing" or "mps" (the strategy,
 *     config.h) when replicas > 1, else "none";
 *   memory: nvmlMemory_t.total / 2^20 (left out when unknown / 0);
 *   family (GFD's table: tesla, fermi, kepler, maxwell, pascal, volta/turing,
 *     ampere/ada-lovelace, hopper, blackwell, rubin, undefined) and
 *     compute.{major,minor}: left out when the compute capability is 0.
 *   GPUs with MIG enabled are labelled "without sharing" (GFD): replicas 0,
 *     sharing-strategy none, no -SHARED; MIG-disabled GPUs win over them.
 *   Heterogeneous nodes: GFD computes these labels per model and lets one
 *     model overwrite the others in Go map order (random). kdev makes that
 *     choice deterministic: the model of the first MIG-disabled GPU in NVML
 *     order, else that of the first MIG-enabled GPU; count is that model's.
 *
 * migStrategy single (over the labels above; NVML order decides "first"):
 *   no MIG-enabled GPU: nothing more. A MIG-enabled GPU without MIG devices,
 *   a mix of MIG-enabled and MIG-disabled GPUs, or more than one MIG profile:
 *   product "<model>-MIG-INVALID" (model of the first MIG-enabled GPU), count
 *   0, replicas 0, sharing-strategy "" (empty, as GFD), memory 0. Otherwise
 *   nvidia.com/gpu.product "<model>-MIG-<profile>" (+"-SHARED" as above),
 *   count = number of MIG devices, replicas / sharing-strategy of
 *   nvidia.com/gpu, and the MIG attributes (nvmlDeviceAttributes_t) memory
 *   (memorySizeMB), multiprocessors, slices.gi, slices.ci,
 *   engines.{copy,decoder,encoder,jpeg,ofa}.
 * migStrategy mixed: for each MIG profile present (profile name with '+'
 *   replaced by '.', e.g. 1g.5gb.me), nvidia.com/mig-<profile>.{product,
 *   count,replicas,sharing-strategy} and the MIG attributes, replicas from the
 *   time-slicing entry of that resource name; model and attributes of the
 *   first MIG device with that profile.
 * GPUs with an empty name (lost before discovery read it) are left out.
 *
 * kdev's own, for each isolated resource R of the `isolation` section
 * (nvidia/isolation.h; GFD has none): R.replicas (the time-slicing replicas
 * per device), R.replica.memory (MiB of one replica: the explicit size, else
 * the memory of the first device the resource is made of, in NVML order, /
 * replicas; left out when unknown) and R.replica.compute (percent of one
 * replica), e.g. nvidia.com/gpu.shared.replica.memory=20389.
 */
#ifndef KDEV_NVIDIA_LABELS_H
#define KDEV_NVIDIA_LABELS_H

#include <stdbool.h>
#include <stddef.h>

#include "common/err.h"
#include "common/file.h"
#include "nvidia/config.h"
#include "nvml/discover.h"

/* GFD's default machine type file. */
#define KDEV_NVIDIA_MACHINE_TYPE_FILE "/sys/class/dmi/id/product_name"
/* The first line of every file kdev writes (an NFD comment line). */
#define KDEV_NVIDIA_LABELS_HEADER \
        "# Written by kdev-plugin (NVIDIA GPU labels for Node Feature Discovery); do not edit.\n"

struct kdev_nvidia_label {
        char *key;   /* "nvidia.com/gpu.product" */
        char *value; /* "NVIDIA-H100-80GB-HBM3"; may be "" */
};

/* A set of labels, keys unique, sorted by key (strcmp) once built. */
struct kdev_nvidia_labels {
        struct kdev_nvidia_label *v;
        size_t n, cap;
};

struct kdev_nvidia_labels_options {
        /* NULL: KDEV_NVIDIA_MACHINE_TYPE_FILE; "": gpu.machine=unknown
         * (GFD's empty --machine-type-file). */
        const char *machine_type_file;
        /* Where <sysfs>/bus/pci/devices/<bus id>/class is read; NULL or "":
         * "/sys". */
        const char *sysfs_root;
};

/* Builds the labels of |gpus| (NULL or 0 GPUs: no labels at all) under the
 * finished config |cfg| (mig_strategy and time_slicing are used) into |out|
 * (initialised empty by this call; free with kdev_nvidia_labels_clear, also
 * after an error). |opts| may be NULL. Rules: see the top of this file.
 * Errors (negative errno, |err| set):
 *   -EINVAL "error getting driver version: Version \"<v>\" does not match
 *     format \"X.Y[.Z]\"" (GFD's text);
 *   the errors of kdev_nvidia_mig_device_profile() (a MIG profile that cannot
 *     be named, e.g. the parent's memory is unknown), wrapped as
 *     "MIG labels: ...";
 *   -ENOMEM. */
KDEV_API int kdev_nvidia_labels_build(const struct kdev_gpu_set *gpus, const struct kdev_nvidia_config *cfg,
                             const struct kdev_nvidia_labels_options *opts,
                             struct kdev_nvidia_labels *out, struct kdev_err *err);

/* Frees what |l| owns (NULL-safe) and leaves it empty. */
KDEV_API void kdev_nvidia_labels_clear(struct kdev_nvidia_labels *l);

/* The value of |key|, or NULL when there is no such label. Borrowed. */
KDEV_API const char *kdev_nvidia_labels_get(const struct kdev_nvidia_labels *l, const char *key);

/* The file text: KDEV_NVIDIA_LABELS_HEADER when |header|, then one
 * "key=value\n" line per label in |l|'s order (NFD features.d format).
 * Returns a new string (caller frees), or NULL when out of memory. */
KDEV_API char *kdev_nvidia_labels_text(const struct kdev_nvidia_labels *l, bool header);

/* Writes |text| to |path| unless the file already holds exactly |text|:
 * a temporary file ".<name>.XXXXXX" in the same directory (NFD's local
 * source skips dot files), written in full, fsync'ed, mode 0644, renamed over
 * |path|, then the directory fsync'ed, so readers see the old or the new
 * file, never a part. The directory must exist. Returns 1 when written, 0
 * when unchanged, or a negative errno with |err|, always naming |path| (never
 * the temporary file): "<path>: cannot create a file in directory <dir>:
 * <strerror>" (missing or unwritable directory), else "<path>: <strerror>";
 * the temporary file is removed on error. */
KDEV_API int kdev_nvidia_labels_write(const char *path, const char *text, struct kdev_err *err);

/* kdev_nvidia_labels_write guarded by |guard| (common/file.h; may be NULL):
 * when the file differs from |text| and is no longer what kdev last wrote
 * (edited or replaced by hand), it is moved aside to
 * "<dir>/.<name>.foreign-<unix seconds>" (a dot file: NFD's local source
 * skips it; its path into |aside|, |size| bytes) before |text| is written.
 * Returns 2 written after a move aside, 1 written, 0 unchanged, or a
 * negative errno with |err| (kdev_file_guard_check's or the write's). */
KDEV_API int kdev_nvidia_labels_write_guarded(struct kdev_file_guard *guard, const char *path,
                                              const char *text, char *aside, size_t size,
                                              struct kdev_err *err);

/* The node labels file text of |gpus| under |cfg|: kdev_nvidia_labels_build
 * with |opts| (may be NULL), then kdev_nvidia_labels_text with the header,
 * into *text (caller frees; NULL on error). *n is the number of labels built
 * and *invalid_mig whether nvidia.com/gpu.product ends in "-MIG-INVALID"
 * (GFD's mark of an invalid MIG layout), both set also after an error of
 * the text. Returns 0, the errors of kdev_nvidia_labels_build, or -ENOMEM. */
KDEV_API int kdev_nvidia_labels_file_text(const struct kdev_gpu_set *gpus,
                                 const struct kdev_nvidia_config *cfg,
                                 const struct kdev_nvidia_labels_options *opts, char **text,
                                 size_t *n, bool *invalid_mig, struct kdev_err *err);

/* For kdev-plugin after the NVIDIA backend failed to open under
 * migStrategy single: discovers the GPUs again (NVML under
 * cfg->driver_root; MIG devices, no links) and, when their MIG layout is
 * invalid, builds their labels file text, so that the caller can replace a
 * file written for an earlier valid layout, as GPU Feature Discovery does.
 * Returns 1 with *text (caller frees) and *n labels when the layout is
 * invalid; 0 with *text NULL when it is not, when the strategy is not
 * single, or when NVML or the discovery fails (no GPUs to judge); or a
 * negative errno with |err| from kdev_nvidia_labels_file_text. */
KDEV_API int kdev_nvidia_labels_invalid_mig(const struct kdev_nvidia_config *cfg,
                                   const struct kdev_nvidia_labels_options *opts, char **text,
                                   size_t *n, struct kdev_err *err);

#endif /* KDEV_NVIDIA_LABELS_H */
