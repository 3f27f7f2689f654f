/* NVIDIA MPS sharing (`sharing.mps`): the paths of the MPS control daemon of
 * a resource, the Allocate edits of its replicas, and what kdev's control
 * daemon sends to nvidia-cuda-mps-control.
 *
 * Follows NVIDIA's k8s-device-plugin v0.20.0 (internal/plugin/mps.go,
 * cmd/mps-control-daemon/mps/{daemon,root,device}.go): under a root R (the
 * host's --mps-root, or "/mps" inside the containers) resource <res> (e.g.
 * "nvidia.com/gpu", slash kept) has its control pipe directory
 * R/<res>/pipe, its log directory R/<res>/log and its started marker
 * R/<res>/.started; the shared memory directory is R/shm.
 */
#ifndef KDEV_NVIDIA_MPS_H
#define KDEV_NVIDIA_MPS_H

#include <stddef.h>

#include <uv.h>

#include "common/err.h"
#include "model/edits.h"
#include "model/model.h"
#include "nvidia/config.h"

/* The root of the MPS directories inside the containers (NVIDIA
 * mps.ContainerRoot). */
#define KDEV_NVIDIA_MPS_CONTAINER_ROOT "/mps"

/* The control program NVIDIA runs (found on PATH). */
#define KDEV_NVIDIA_MPS_CONTROL_BIN "nvidia-cuda-mps-control"

/* The health query NVIDIA's plugin sends before serving (AssertHealthy). */
#define KDEV_NVIDIA_MPS_HEALTH_QUERY "get_default_active_thread_percentage"

/* Which of a resource's MPS paths. */
enum kdev_nvidia_mps_path {
        KDEV_NVIDIA_MPS_PIPE,    /* <root>/<res>/pipe */
        KDEV_NVIDIA_MPS_LOG,     /* <root>/<res>/log */
        KDEV_NVIDIA_MPS_STARTED, /* <root>/<res>/.started */
        KDEV_NVIDIA_MPS_SHM,     /* <root>/shm (|resource| unused) */
};

/* Path |which| of resource |resource| under |root| (absolute; repeated and
 * trailing slashes dropped, filepath.Join). Malloc'ed; NULL when out of
 * memory. */
KDEV_API char *kdev_nvidia_mps_path(const char *root, const char *resource,
                                    enum kdev_nvidia_mps_path which);

/* The size of the tmpfs at <root>/shm (NVIDIA mount-shm.go). */
#define KDEV_NVIDIA_MPS_SHM_SIZE "65536k"

/* What NVIDIA's "mps-control-daemon mount-shm" does in the control daemon's
 * init container (cmd/mps-control-daemon/mount/mount-shm.go): unmounts
 * whatever is mounted at <root>/shm (each stacked mount), makes the
 * directory (0755, with its parents), and mounts a tmpfs "shm" there with
 * nosuid, nodev, noexec, relatime, size=65536k: the /dev/shm of the MPS
 * clients and of the control daemon. Needs CAP_SYS_ADMIN; the host sees the
 * mount through the chart's Bidirectional mount propagation of |root|.
 * Returns 0, or -errno with "error unmounting <dir>: <strerror>", "error
 * creating directory <dir>: <strerror>", "error mounting <dir> as tmpfs:
 * <strerror>"; -ENOMEM. */
KDEV_API int kdev_nvidia_mps_mount_shm(const char *root, struct kdev_err *err);

/* The Allocate edits of an MPS replica of |resource| (NVIDIA updateReponse):
 * env CUDA_MPS_PIPE_DIRECTORY = /mps/<resource>/pipe; mounts
 * <host_root>/<resource>/pipe -> /mps/<resource>/pipe, then
 * <host_root>/shm -> /dev/shm, appended to |out|. Returns 0 or -ENOMEM with
 * |err|. */
KDEV_API int kdev_nvidia_mps_edits(const char *host_root, const char *resource,
                                   struct kdev_container_edits *out, struct kdev_err *err);

/* What the control daemon of one MPS resource is told (NVIDIA
 * cmd/mps-control-daemon/mps/daemon.go Start), after
 * "nvidia-cuda-mps-control -d": for each physical GPU of the resource, in
 * device order, "set_default_device_pinned_mem_limit <index> <M>M" with M =
 * its memory in bytes / its replicas in the resource / 2^20 (left out when
 * the memory is unknown; NVIDIA's order is a Go map's), then
 * "set_default_active_thread_percentage <100 / replicas per GPU>". */
struct kdev_nvidia_mps_daemon {
        char *resource;   /* e.g. "nvidia.com/gpu" */
        char **commands;  /* in the order sent */
        size_t n_commands;
        char **uuids;     /* the physical GPUs (for the compute mode option) */
        size_t n_uuids;
};

/* The MPS daemons of |set| after kdev_nvidia_apply_sharing: one per NVIDIA
 * resource whose replicas are MPS (its rdata carries the MPS root) and that
 * has devices (NVIDIA skips a resource without devices), in set order. Into
 * *out (malloc'ed array, free with kdev_nvidia_mps_plan_free) and *n.
 * Returns 0 or -ENOMEM with |err|. */
KDEV_API int kdev_nvidia_mps_plan(const struct kdev_resource_set *set,
                                  struct kdev_nvidia_mps_daemon **out, size_t *n,
                                  struct kdev_err *err);
KDEV_API void kdev_nvidia_mps_plan_free(struct kdev_nvidia_mps_daemon *d, size_t n);

/* Runs control program |bin| (a path, or a name looked up on PATH) for
 * resource |resource| under MPS root |root|, with CUDA_MPS_PIPE_DIRECTORY
 * and CUDA_MPS_LOG_DIRECTORY set to its pipe and log directories: with
 * |command| NULL as "<bin> -d" (start the daemon), else "<bin>" with
 * |command| written to its stdin (NVIDIA EchoPipeToControl). Its stderr goes
 * to /dev/null (as NVIDIA's); its stdout into |out| (|size| bytes, NUL-terminated, cut; may be NULL). Waits at most
 * |timeout_ms| ms, then kills it. Returns 0; -ETIMEDOUT "timed out after
 * <ms> ms" (the daemon stopped answering); -EIO "failed to send command to
 * MPS daemon: exit status <n>" (NVIDIA's text; "-d": "failed to start MPS
 * daemon: exit status <n>"); -errno "failed to start NVIDIA MPS command:
 * <strerror>" when it cannot be run. */
KDEV_API int kdev_nvidia_mps_send(const char *bin, const char *root, const char *resource,
                                  const char *command, unsigned timeout_ms, char *out,
                                  size_t size, struct kdev_err *err);

/* Starts the daemon of |d| under |root| (NVIDIA Daemon.Start, without the
 * compute mode): creates the pipe and log directories (0755, parents
 * included), runs "<bin> -d", sends |d|'s commands in order, then creates
 * the started marker <root>/<resource>/.started. Returns 0, or the first
 * failure: kdev_nvidia_mps_send's errors prefixed "error setting ... :"
 * as NVIDIA ("error setting pinned memory limit for device <i>: ",
 * "error setting active thread percentage: "), -errno "error creating
 * directory <dir>: <strerror>". */
KDEV_API int kdev_nvidia_mps_start(const char *bin, const char *root,
                                   const struct kdev_nvidia_mps_daemon *d, unsigned timeout_ms,
                                   struct kdev_err *err);

/* Stops it (NVIDIA Daemon.Stop): sends "quit", removes the started marker.
 * Returns 0, or -errno/-EIO "error sending quit message: <...>". */
KDEV_API int kdev_nvidia_mps_stop(const char *bin, const char *root, const char *resource,
                                  unsigned timeout_ms, struct kdev_err *err);

/* NVIDIA's health query (AssertHealthy): sends
 * KDEV_NVIDIA_MPS_HEALTH_QUERY. Returns 0, or kdev_nvidia_mps_send's error
 * with |err| "error checking MPS daemon health: <its message>". */
KDEV_API int kdev_nvidia_mps_health(const char *bin, const char *root, const char *resource,
                                    unsigned timeout_ms, struct kdev_err *err);

/* --- the plugin's watch of the MPS daemons (beyond NVIDIA) ----------------
 *
 * NVIDIA's plugin checks the daemon once, before serving ("error waiting for
 * MPS daemon: error checking MPS daemon health: <why>", retried 30 s later)
 * and never again. kdev keeps asking: a thread sends the health query for
 * each MPS resource of |set| every interval_ms (the query times out after
 * 2 x interval_ms). kdev_nvidia_mps_watch_start asks once itself, as
 * NVIDIA's plugin does before serving (blocking up to 2 x interval_ms per
 * resource): when the daemon answers, the devices stay as built; otherwise
 * every device of the resource is Unhealthy until the first answer (the
 * wait, logged with NVIDIA's error text at once and every 30 s while it
 * lasts); when a
 * daemon stops answering (dies, or hangs past the timeout) all that
 * resource's devices are set Unhealthy and |notify| is called once for it
 * (one ListAndWatch update), so the change is sent within about interval_ms
 * after a death and 3 x interval_ms after a hang (the default 250 ms: within
 * 1 s); when it answers again
 * they get back the health of their physical device. A device the GPU
 * health monitor marks Healthy while the daemon is down is set Unhealthy
 * again at the next check (another update). Each change is logged ("MPS
 * daemon not answering; its replicas are Unhealthy" / "MPS daemon answers
 * again") and handed to |event| ("mps_daemon_down" / "mps_daemon_up"). */
struct kdev_nvidia_mps_watch;

struct kdev_nvidia_mps_watch_options {
        uv_loop_t *loop;
        struct kdev_resource_set *set; /* borrowed until stop; resources looked up by name */
        const char *root;              /* the MPS root seen here; NULL: "/mps" */
        const char *control_bin;       /* NULL: nvidia-cuda-mps-control on PATH */
        unsigned interval_ms;          /* 0: 250 */
        void (*notify)(void *arg, const char *resource);
        void *notify_arg;
        void (*event)(void *arg, const char *kind, unsigned long long xid, unsigned count);
        void *event_arg;
};

/* Starts the watch of the MPS resources of |o->set| (those whose rdata
 * carries the MPS root). Sets *out (NULL when the set has none) and returns
 * 0, or -errno with |err| (thread, async handle, memory). Loop thread. */
KDEV_API int kdev_nvidia_mps_watch_start(const struct kdev_nvidia_mps_watch_options *o,
                                         struct kdev_nvidia_mps_watch **out,
                                         struct kdev_err *err);

/* Stops the thread (waits for a query under way: at most interval_ms) and
 * frees |w| once its handle is closed; then |done| (may be NULL). NULL-safe
 * (|done| called at once). Loop thread. */
KDEV_API void kdev_nvidia_mps_watch_stop(struct kdev_nvidia_mps_watch *w, void (*done)(void *arg),
                                         void *arg);

#endif /* KDEV_NVIDIA_MPS_H */
