/* GPU usage metering: what the GPUs of the node are used for, and by whom.
 *
 * Three parts, joined by kdev-plugin (src/daemon) on a thread-pool job:
 *   1. a snapshot of usage per GPU and per MIG device (struct
 *      kdev_usage_snapshot), filled from NVML by the NVIDIA backend
 *      (nvidia/usage.h) and free of NVML types, so that the metrics module
 *      reads it without NVML's headers;
 *   2. the container of a process, from /proc/<pid>/cgroup
 *      (kdev_usage_cgroup_parse, kdev_usage_proc_container);
 *   3. attribution (kdev_usage_attribute): each device's use split among
 *      the containers that hold it, through the container map a caller
 *      supplies (struct kdev_usage_pods: namespace, pod, container and
 *      device IDs, as kubelet's PodResources API answers), and the share
 *      region of an isolated replica (share/region.h) where there is one.
 *
 * Attribution rules (README "Usage metering"):
 *   - a container with a share region: its memory used on a device is the
 *     region's sum (exact: what the share library accounted), its limit and
 *     compute share the region's; its processes NVML reports are not counted
 *     a second time;
 *   - any other container: the sum of the NVML memory of its processes on
 *     the device, a process being the container's when its cgroup names the
 *     container's runtime ID, or else names the container's pod and that pod
 *     has exactly one container holding the device;
 *   - a process that cannot be attributed so is reported as unattributed
 *     with its reason (KDEV_USAGE_UNATTRIBUTED_*), never guessed.
 *
 * No state, no thread of its own: every function is safe on any thread for
 * distinct arguments.
 */
#ifndef KDEV_USAGE_USAGE_H
#define KDEV_USAGE_USAGE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/err.h"
#include "common/export.h"

#define KDEV_USAGE_UUID_MAX 96     /* NVML_DEVICE_UUID_V2_BUFFER_SIZE */
#define KDEV_USAGE_NAME_MAX 96     /* NVML_DEVICE_NAME_V2_BUFFER_SIZE */
#define KDEV_USAGE_BUS_ID_MAX 32   /* NVML_DEVICE_PCI_BUS_ID_BUFFER_SIZE */
#define KDEV_USAGE_POD_UID_MAX 37  /* 36 characters of a UUID and the NUL */
#define KDEV_USAGE_CONTAINER_ID_MAX 65 /* 64 hex digits and the NUL */
/* A value NVML could not give (a utilization a MIG device has none of). */
#define KDEV_USAGE_NONE (-1)

/* --- the snapshot --------------------------------------------------------- */

/* One running compute process on a device (nvmlDeviceGetComputeRunningProcesses). */
struct kdev_usage_process {
        uint32_t pid;           /* in the host's pid namespace, as NVML reports it */
        uint64_t used;          /* device memory, bytes; UINT64_MAX: not available
                                 * (NVML_VALUE_NOT_AVAILABLE, e.g. under Windows WDDM) */
        int sm_util;            /* percent of the last per-process sample
                                 * (nvmlDeviceGetProcessUtilization), KDEV_USAGE_NONE */
};

/* One GPU or MIG device. */
struct kdev_usage_device {
        char uuid[KDEV_USAGE_UUID_MAX];         /* "GPU-..." or "MIG-..." */
        char parent_uuid[KDEV_USAGE_UUID_MAX];  /* the GPU's UUID of a MIG device, else "" */
        unsigned index;         /* NVML index (a MIG device: its GPU's) */
        unsigned minor;         /* /dev/nvidia<minor> (a MIG device: its GPU's) */
        char pci_bus_id[KDEV_USAGE_BUS_ID_MAX]; /* "00000000:18:00.0" */
        char model[KDEV_USAGE_NAME_MAX];        /* nvmlDeviceGetName */
        char profile[32];       /* MIG profile ("1g.10gb"), "" for a GPU */
        int gi;                 /* MIG GPU instance ID, KDEV_USAGE_NONE for a GPU */
        int util;               /* GPU utilization, percent, or KDEV_USAGE_NONE */
        int mem_util;           /* memory (copy) utilization, percent, or KDEV_USAGE_NONE */
        uint64_t mem_total, mem_used, mem_free; /* bytes (nvmlDeviceGetMemoryInfo) */
        bool have_memory;       /* false: the memory fields are unknown */
        struct kdev_usage_process *procs;       /* owned by the snapshot */
        size_t n_procs;
        bool procs_known;       /* false: NVML gave no process list */
};

struct kdev_usage_snapshot {
        struct kdev_usage_device *devices;      /* owned */
        size_t n_devices;
        double taken;           /* CLOCK_REALTIME seconds when it was taken */
};

/* Appends a zeroed device (gi, util and mem_util KDEV_USAGE_NONE) to |s|.
 * Returns it (valid until the next append or the snapshot's clear), or NULL
 * when out of memory. */
KDEV_API struct kdev_usage_device *kdev_usage_snapshot_add(struct kdev_usage_snapshot *s);

/* Appends a process to |d|. Returns 0 or -ENOMEM. */
KDEV_API int kdev_usage_device_add_process(struct kdev_usage_device *d, uint32_t pid,
                                           uint64_t used, int sm_util);

/* Frees what |s| owns and zeroes it. NULL-safe. */
KDEV_API void kdev_usage_snapshot_clear(struct kdev_usage_snapshot *s);

/* --- the container of a process ------------------------------------------- */

enum kdev_usage_runtime {
        KDEV_USAGE_RUNTIME_CONTAINERD, /* "cri-containerd-<id>.scope", or a bare "<id>" */
        KDEV_USAGE_RUNTIME_CRIO,       /* "crio-<id>.scope" or "crio-<id>" */
        KDEV_USAGE_RUNTIME_DOCKER,     /* "docker-<id>.scope" (cri-dockerd) */
};

enum kdev_usage_driver {
        KDEV_USAGE_DRIVER_SYSTEMD,     /* kubepods.slice/kubepods-<qos>-pod<uid>.slice/... */
        KDEV_USAGE_DRIVER_CGROUPFS,    /* /kubepods/<qos>/pod<uid>/... */
};

/* What a process's cgroup says about its container. */
struct kdev_usage_cgroup {
        char pod_uid[KDEV_USAGE_POD_UID_MAX];           /* with dashes, as the API server has it */
        char container_id[KDEV_USAGE_CONTAINER_ID_MAX]; /* 64 lower-case hex digits */
        enum kdev_usage_runtime runtime;
        enum kdev_usage_driver driver;
        unsigned version;       /* 2: the unified line "0::", 1: a v1 controller line */
};

/* Parses the text of /proc/<pid>/cgroup (|len| bytes, need not be
 * NUL-terminated; "<id>:<controllers>:<path>" per line, cgroups(7)). The
 * first line whose path holds a Kubernetes pod's container is taken, the
 * unified line ("0::...") before v1 controller lines: the path must hold a
 * component "kubepods" or starting "kubepods" (so a node inside a container,
 * e.g. "/kubelet.slice/kubelet-kubepods.slice/...", is found), then a pod
 * component ("pod<uid>" under cgroupfs, "kubepods[-<qos>]-pod<uid with '_'
 * for '-'>.slice" under systemd, kubelet's pkg/kubelet/cm cgroup naming),
 * then the container's as the runtime names it (enum kdev_usage_runtime)
 * with a 64-hex-digit ID. A pod's own cgroup, CRI-O's "crio-conmon-<id>"
 * monitor and a pause-less path are not containers.
 * Returns 0 with |out| filled, 1 when no line names a container (a host
 * process), or -EINVAL when |text| is not a cgroup file (a line without two
 * ':'), with |err| "<line n>: not a cgroup line". */
KDEV_API int kdev_usage_cgroup_parse(const char *text, size_t len, struct kdev_usage_cgroup *out,
                                     struct kdev_err *err);

/* Reads <proc_root>/<pid>/cgroup (|proc_root| NULL or "": "/proc"; tests
 * pass a fake tree) and parses it as above. Returns 0, 1 (not a container),
 * or a negative errno with |err| ("<path>: cannot read: No such file or
 * directory" when the process has exited, the parser's message with the
 * path in front). */
KDEV_API int kdev_usage_proc_container(const char *proc_root, uint32_t pid,
                                       struct kdev_usage_cgroup *out, struct kdev_err *err);

/* --- pod UIDs and container IDs, from kubelet's log directories ------------ */

/* kubelet makes, for every pod it runs, the directory
 * <log dir>/pods/<namespace>_<pod>_<pod UID>/ and, for every container it
 * starts, the symbolic link <log dir>/containers/<pod>_<namespace>_
 * <container>-<container ID>.log (pkg/kubelet/kuberuntime: BuildPodLogsDirectory
 * and legacyLogSymlink; names cannot hold '_': DNS labels and subdomains).
 * PodResources lists containers by name; these names join them to what a
 * process's cgroup says (pod UID, container ID). */
struct kdev_usage_pod_log {
        char *namespace_name, *pod, *uid; /* owned */
        int64_t mtime_ns;                 /* the entry's own (lstat) */
        uint64_t key;                     /* kdev_usage_logs_key(namespace, pod, NULL) */
};

struct kdev_usage_container_log {
        char *namespace_name, *pod, *container; /* owned */
        char container_id[KDEV_USAGE_CONTAINER_ID_MAX];
        int64_t mtime_ns;
        uint64_t key;                     /* kdev_usage_logs_key(namespace, pod, container) */
};

struct kdev_usage_logs {
        struct kdev_usage_pod_log *pods;
        size_t n_pods;
        struct kdev_usage_container_log *containers;
        size_t n_containers;
        /* kdev_usage_logs_refresh's: the two directories' mtimes when they
         * were read, and whether they may be trusted */
        int64_t dir_mtime_ns[2];
        bool reusable;
};

/* The lookup key of a pod (|container| NULL) or a container: FNV-1a 64 of
 * the names, each ended by a NUL; entries are compared by name only when
 * their keys match. */
KDEV_API uint64_t kdev_usage_logs_key(const char *namespace_name, const char *pod,
                                      const char *container);

/* At most this many entries are read from each directory. */
#define KDEV_USAGE_LOGS_MAX 65536

/* Reads the names in <log_dir>/pods and <log_dir>/containers (|log_dir|
 * NULL or "": "/var/log") into |out| (zeroed first; free with
 * kdev_usage_logs_clear). Names that do not have the forms above are
 * skipped (a pod UID must be 36 characters, a container ID 64 lower-case hex
 * digits); a directory that does not exist gives no entries. Opens nothing
 * but the two directories; follows no link (-ELOOP "<dir>: cannot read: a
 * symbolic link, not followed" for pods/ or containers/ itself). Returns 0,
 * or a negative errno with |err| ("<dir>: cannot read: <strerror>";
 * -ENOMEM), |out| then holding what was read before. */
KDEV_API int kdev_usage_logs_read(const char *log_dir, struct kdev_usage_logs *out,
                                  struct kdev_err *err);

/* kdev_usage_logs_read for a reader that asks again and again (the usage
 * loop, every sample): when |logs| holds an earlier answer of this function
 * for the same |log_dir| and neither <log_dir>/pods nor <log_dir>/containers
 * changed since (their mtimes: an entry added, removed or renamed changes
 * its directory's), |logs| is kept as it is and 1 is returned (two stat
 * calls instead of one per entry); otherwise |logs| is cleared and read
 * again (0, or kdev_usage_logs_read's errors). A directory whose mtime was
 * less than 2 s old at the read is read again next time, so that a change
 * within the file system's timestamp granularity is never missed. */
KDEV_API int kdev_usage_logs_refresh(const char *log_dir, struct kdev_usage_logs *logs,
                                     struct kdev_err *err);

/* The UID of pod |pod| of |namespace_name| in |logs|, or NULL; of several
 * (a pod deleted and made again under its name, whose old directory is not
 * removed yet) the newest. Borrowed from |logs|. */
KDEV_API const char *kdev_usage_logs_pod_uid(const struct kdev_usage_logs *logs,
                                             const char *namespace_name, const char *pod);

/* The ID of container |container| of that pod, or NULL; of several (the
 * container restarted) the newest link's, the running one's. Borrowed. */
KDEV_API const char *kdev_usage_logs_container_id(const struct kdev_usage_logs *logs,
                                                  const char *namespace_name, const char *pod,
                                                  const char *container);

/* Frees what |logs| holds and zeroes it. NULL-safe. */
KDEV_API void kdev_usage_logs_clear(struct kdev_usage_logs *logs);

/* --- the container map (supplied) ----------------------------------------- */

/* One container that holds devices, as kubelet's PodResources API lists it
 * (v1.PodResourcesLister List: pod name and namespace, container name, and
 * per resource its device IDs), with what the caller knows besides. All
 * strings borrowed for the call that reads the map. */
struct kdev_usage_container {
        const char *namespace_name;    /* the pod's namespace */
        const char *pod;               /* the pod's name */
        const char *container;         /* the container's name */
        const char *pod_uid;           /* NULL or "": unknown */
        const char *container_id;      /* the runtime's ID (64 hex digits), NULL or "": unknown */
        const char *resource;          /* the resource name of |device_ids| */
        const char *const *device_ids; /* as kdev advertised them ("GPU-...::3", "MIG-...") */
        size_t n_device_ids;
        const char *share_dir;         /* the container's share region directory
                                        * (nvidia/share_host.h), NULL: none */
        /* a DRA claim device (PodResources' ClaimResource), NULL for a
         * device plugin's devices: the claim, and its device's driver, pool
         * and name (the one entry of |device_ids|) */
        const char *claim_namespace, *claim_name, *driver, *pool, *device;
};

struct kdev_usage_pods {
        const struct kdev_usage_container *containers;
        size_t n;
};

/* The device UUID (the "uuid" of a kdev_usage_device) behind device ID
 * |device_id| of |resource| (the map's own pointers), or NULL when it is not
 * a GPU or MIG device of this node. Called once per device ID of the map,
 * in map order; the string must stay valid until the attribution returns. */
typedef const char *(*kdev_usage_resolve_fn)(void *arg, const char *resource,
                                             const char *device_id);

/* --- attribution ------------------------------------------------------------ */

/* Why a process's use could not be attributed (the "reason" label). */
enum kdev_usage_unattributed {
        KDEV_USAGE_UNATTRIBUTED_HOST,      /* "host": its cgroup is no pod's container */
        KDEV_USAGE_UNATTRIBUTED_NO_POD,    /* "unknown_container": a pod's container that the
                                            * map does not list as holding the device */
        KDEV_USAGE_UNATTRIBUTED_AMBIGUOUS, /* "ambiguous": only the pod is known and several
                                            * of its containers hold the device */
        KDEV_USAGE_UNATTRIBUTED_NO_CGROUP, /* "no_cgroup": /proc/<pid>/cgroup unreadable
                                            * (exited, another pid namespace) */
        KDEV_USAGE_UNATTRIBUTED_COUNT
};

/* The reason's label value ("host", "unknown_container", "ambiguous",
 * "no_cgroup"); "?" for another value. */
KDEV_API const char *kdev_usage_unattributed_name(enum kdev_usage_unattributed r);

/* One container's use of one device. */
struct kdev_usage_row {
        size_t device;          /* index into the snapshot's devices */
        size_t container;       /* index into the map's containers */
        unsigned replicas;      /* device IDs of the container on this device */
        bool from_region;       /* the figures come from the share region */
        uint64_t used;          /* bytes */
        uint64_t limit;         /* bytes; 0: no limit (not an isolated replica) */
        unsigned compute;       /* compute share, percent; 0: none */
        unsigned processes;     /* its processes NVML lists on the device */
        int sm_util;            /* sum of its processes' samples, percent, or KDEV_USAGE_NONE */
};

/* Use nobody could be given, per device and reason. */
struct kdev_usage_lost {
        size_t device;
        enum kdev_usage_unattributed reason;
        unsigned processes;
        uint64_t used;          /* bytes (processes whose memory NVML does not give count 0) */
};

struct kdev_usage_report {
        struct kdev_usage_row *rows;    /* owned; by device, then container, in map order */
        size_t n_rows;
        struct kdev_usage_lost *lost;   /* owned; by device, then reason */
        size_t n_lost;
        /* per reason, processes not attributed in this report */
        unsigned failures[KDEV_USAGE_UNATTRIBUTED_COUNT];
        /* share regions that could not be read: "<dir>/region: <reason>" of the
         * last one, "" when none failed; their containers fall back to processes */
        unsigned region_errors;
        char region_error[256];
};

struct kdev_usage_attribute_options {
        const char *proc_root;          /* NULL: "/proc" */
        kdev_usage_resolve_fn resolve;  /* required */
        void *resolve_arg;
};

/* Attributes the use in |snap| to the containers of |pods| by the rules at
 * the top of this file, into |out| (caller-owned, zeroed or cleared; fill
 * freed with kdev_usage_report_clear). Every container that holds a device
 * of the snapshot gets a row for it, also one with no use (used 0). Reads
 * /proc/<pid>/cgroup of each process and the share region of each
 * container with a |share_dir|; makes no other system call.
 * Returns 0, or -ENOMEM (|out| cleared) with |err|. */
KDEV_API int kdev_usage_attribute(const struct kdev_usage_snapshot *snap,
                                  const struct kdev_usage_pods *pods,
                                  const struct kdev_usage_attribute_options *opts,
                                  struct kdev_usage_report *out, struct kdev_err *err);

/* Frees what |r| owns and zeroes it. NULL-safe. */
KDEV_API void kdev_usage_report_clear(struct kdev_usage_report *r);

#endif /* KDEV_USAGE_USAGE_H */
