/* kdev device plugin runtime: serves any set of resources to kubelet over the
 * device plugin API v1beta1 (k8s.io/kubelet pkg/apis/deviceplugin/v1beta1).
 *
 * For each resource it takes an exclusive lock on "<socket>.lock", serves
 * the v1beta1 DevicePlugin service on "<dir>/<prefix><resource with '/' -> '_'>.sock"
 * and only then calls /v1beta1.Registration/Register on "<dir>/kubelet.sock"
 * (or the kubelet socket given, which must be in <dir>; kubelet dials back
 * and calls GetDevicePluginOptions inside Register).
 * It watches the directory: when kubelet.sock is (re-)created, or the
 * resource's own socket disappears, it starts a fresh server and registers
 * again; when a ListAndWatch stream ends while kubelet.sock exists it
 * registers again. A new kubelet.sock is registered with at once (on the
 * next loop iteration, so that the events of one inotify read are one);
 * what follows within KDEV_DP_COALESCE_MS of a Register sent to the same
 * kubelet is coalesced into one more registration at the end of that
 * window; an own socket that disappeared is served again after 50 ms (a
 * restarting kubelet removes it just before it creates kubelet.sock, which
 * then brings the one registration; an rm -rf of the directory is over by
 * then).
 * When kubelet is absent, Register is retried with exponential backoff.
 *
 * The directory itself is followed too: removed (or replaced by another
 * directory at the same path), every server is closed and every lock
 * released (the lock file went with the directory); when a directory is at
 * the path again, each resource takes its lock in it again (the instance
 * that held the lock before first, one that was waiting after
 * lock_poll_ms), serves and registers. A lock file removed while held is
 * taken again after 50 ms (a waiting instance leaves it 200 ms); when
 * another instance got it first, this one stops serving that resource and
 * waits for the lock. The watch is inotify on the
 * directory and on its parent (libuv uv_fs_event), and a check of the
 * directory, kubelet.sock, the sockets and the locks every check_ms as a
 * safety net; when inotify cannot be used (uv_fs_event_start fails, e.g.
 * ENOSPC or EMFILE at the inotify watch or instance limits) one warning is
 * logged and that check is the watch: nothing fails for want of inotify.
 *
 * The runtime knows nothing of backends: it serves struct kdev_resource
 * (src/model/model.h) and builds Allocate and GetPreferredAllocation answers
 * with kdev_plugin_allocate() (plugin/allocate.h: the model's container
 * edits as a v1beta1 answer) and kdev_resource_preferred().
 *
 * Threading: one libuv loop; every function runs on the loop thread.
 */
#ifndef KDEV_PLUGIN_RUNTIME_H
#define KDEV_PLUGIN_RUNTIME_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <uv.h>

#include "common/err.h"
#include "common/export.h"

struct kdev_resource;
struct kdev_dp_runtime;

#define KDEV_DP_DEFAULT_DIR "/var/lib/kubelet/device-plugins"
#define KDEV_DP_KUBELET_SOCKET "kubelet.sock"
#define KDEV_DP_DEFAULT_SOCKET_PREFIX "kdev-"
/* Default of kdev_dp_options.check_ms: the directory check interval (ms). */
#define KDEV_DP_DEFAULT_CHECK_MS 1000
/* Registrations with one kubelet closer together than this (ms) coalesce. */
#define KDEV_DP_COALESCE_MS 10

/* Optional observers of the runtime, e.g. for metrics (kdev-plugin wires them
 * to src/metrics). Every callback may be NULL; each runs on the loop thread
 * and must not call back into the runtime. |resource| is kdev_resource.name. */
struct kdev_dp_hooks {
        void *arg;
        /* An Allocate call was answered after |seconds| (from the request's
         * arrival to its answer being queued): |ok| container requests served
         * when it succeeded, else |failed| = its container requests (at least
         * 1: a request that cannot be decoded counts as one). */
        void (*allocate)(void *arg, const char *resource, size_t ok, size_t failed,
                         double seconds);
        /* A GetPreferredAllocation call was answered (|ok|: without error). */
        void (*preferred)(void *arg, const char *resource, bool ok, double seconds);
        /* A registration attempt ended: Register succeeded (|ok|), or failed
         * (error status, or no kubelet socket to call). */
        void (*registered)(void *arg, const char *resource, bool ok);
        /* kubelet.sock was created anew while running (a kubelet restart). */
        void (*kubelet_restart)(void *arg);
        /* A retry was scheduled |delay_ms| milliseconds from now, after a
         * failed registration attempt or a server that could not start: the
         * backoff sequence (backoff_initial_ms, doubling, capped at
         * backoff_max_ms; back to the initial delay after a success). */
        void (*retry)(void *arg, const char *resource, uint64_t delay_ms);
};

struct kdev_dp_options {
        const char *plugin_dir;       /* device-plugins dir; NULL = KDEV_DP_DEFAULT_DIR */
        /* kubelet's Registration socket, any file name in plugin_dir (NVIDIA's
         * --kubelet-socket); NULL = "<plugin_dir>/kubelet.sock" */
        const char *kubelet_socket;
        const char *socket_prefix;    /* socket file name prefix; NULL = "kdev-" (the default) */
        uint64_t register_timeout_ms; /* deadline of each Register call; 0 = 10000 */
        uint64_t backoff_initial_ms;  /* first Register retry delay; 0 = 100 */
        uint64_t backoff_max_ms;      /* retry delay cap; 0 = 5000 */
        uint64_t lock_poll_ms;        /* how often a waiting instance retries the lock; 0 = 100 */
        /* how often the directory, kubelet.sock, the resource sockets and
         * the locks are checked whatever inotify reports (the only watch
         * when inotify cannot be used); 0 = KDEV_DP_DEFAULT_CHECK_MS */
        uint64_t check_ms;
        const struct kdev_dp_hooks *hooks; /* NULL = none; borrowed, must outlive the runtime */
};

/* Creates a runtime on |loop|. |opts| (may be NULL) is copied. Returns NULL
 * with |err| filled on failure: -ENOMEM, or -EINVAL when opts->kubelet_socket
 * is not a file directly in the plugin directory ("kubelet socket <path> is
 * not in the device plugin directory <dir>": its re-creation by a restarted
 * kubelet could not be seen). */
KDEV_API struct kdev_dp_runtime *
kdev_dp_runtime_new(uv_loop_t *loop, const struct kdev_dp_options *opts, struct kdev_err *err);

/* Adds |res| to be served. |res| is borrowed: it must stay valid until the
 * runtime is freed; change it only on the loop thread and then call
 * kdev_dp_runtime_notify(). Fails with -EINVAL when the resource name is
 * invalid or already added, -ENAMETOOLONG when the socket path does not fit a
 * Unix socket address (108 bytes with the NUL), -EMSGSIZE when its
 * ListAndWatch message would exceed 4 MiB (kubelet's receive limit). Before
 * kdev_dp_runtime_start() the resource waits for it; once started (a
 * reloaded configuration that brings a new resource) it is served and
 * registered at once: lock, socket, Register, as at start. */
KDEV_API int kdev_dp_runtime_add_resource(struct kdev_dp_runtime *rt, struct kdev_resource *res,
                                          struct kdev_err *err);

/* Starts serving: creates the directory when missing, watches it, and for
 * each resource takes the lock (or waits for it, logging so), listens and
 * registers. Returns 0, or a negative errno with |err| (the directory cannot
 * be created or opened, or the path is not a directory). A directory that
 * inotify cannot watch is not an error: the runtime logs "cannot watch the
 * device plugin directory with inotify, checking it every <check_ms>ms
 * instead" once (fields dir or path, error) and polls. Per-resource failures
 * later are logged and retried. */
KDEV_API int kdev_dp_runtime_start(struct kdev_dp_runtime *rt, struct kdev_err *err);

/* Tells the runtime that the devices or health of resource |name| changed:
 * the full list is sent on every open ListAndWatch stream if it differs from
 * the last one sent. Unknown names are ignored. */
KDEV_API void kdev_dp_runtime_notify(struct kdev_dp_runtime *rt, const char *name);

/* Stops: closes every server (GOAWAY, streams cancelled), removes only the
 * sockets this process created and still owns (same inode), releases the
 * locks, stops the watch and timers, then frees |rt| and calls |done| (may be
 * NULL) once libuv has released every handle. NULL-safe. */
KDEV_API void kdev_dp_runtime_stop(struct kdev_dp_runtime *rt, void (*done)(void *arg), void *arg);

/* Starts a fresh server for every resource and registers each again, as
 * after a kubelet restart (kdev-plugin does this on SIGHUP, where NVIDIA's
 * plugin restarts its plugins). */
KDEV_API void kdev_dp_runtime_restart(struct kdev_dp_runtime *rt);

/* Stops serving resource |name| (a reloaded configuration no longer has
 * it): its Register call is cancelled, its server closed (GOAWAY, streams
 * cancelled), its socket removed when this process created it and still
 * owns it, its lock file removed and released; the runtime no longer
 * borrows its struct kdev_resource once this returns. Returns 0, or -ENOENT
 * when no such resource was added. Kubelet sees the socket go and, as for a
 * plugin that stopped, marks the resource's devices unhealthy until its
 * grace period ends (k8s pkg/kubelet/cm/devicemanager). */
KDEV_API int kdev_dp_runtime_remove_resource(struct kdev_dp_runtime *rt, const char *name);

/* Serves |res| (borrowed as by kdev_dp_runtime_add_resource()) in place of
 * the resource of the same name added before (a reloaded configuration that
 * gives that resource again). |restart| false: the resource is unchanged
 * for kubelet, so its server and registration stay as they are, the open
 * ListAndWatch streams stay open and get the list only when it differs from
 * the last one sent; true: its definition changed, so a fresh server is
 * started on its socket and registered again, as after a kubelet restart
 * (kubelet then drops the old stream). Returns 0, -ENOENT when no resource
 * of that name was added, -EMSGSIZE as kdev_dp_runtime_add_resource() (the
 * old resource is then kept). */
KDEV_API int kdev_dp_runtime_update_resource(struct kdev_dp_runtime *rt, struct kdev_resource *res,
                                    bool restart, struct kdev_err *err);

/* Statistics for tests and benchmarks: successful registrations so far for
 * resource |name| (0 when unknown). */
KDEV_API unsigned kdev_dp_runtime_registrations(const struct kdev_dp_runtime *rt, const char *name);

/* Registration state of one resource (kdev_dp_runtime_state()). */
enum kdev_dp_reg_state {
        KDEV_DP_WAIT_LOCK,  /* another instance holds the socket lock: polling it */
        KDEV_DP_IDLE,       /* serving, not registered, nothing in flight */
        KDEV_DP_PENDING,    /* Register call in flight */
        KDEV_DP_REGISTERED, /* Register answered OK */
        KDEV_DP_BACKOFF,    /* waiting to retry */
        KDEV_DP_WAIT_DIR,   /* the directory is gone: waiting for it to be created again */
};

/* A snapshot of one resource's state machine, for tests. Counts run from
 * kdev_dp_runtime_start(). */
struct kdev_dp_state {
        enum kdev_dp_reg_state state;
        unsigned registrations; /* Register calls answered OK */
        unsigned failures;      /* registration attempts that failed (error status,
                                   no kubelet socket, call not started) */
        unsigned attempts;      /* registration attempts started */
        unsigned generations;   /* servers started on the resource socket */
        unsigned lock_waits;    /* lock attempts that found it held by another */
        uint64_t backoff_ms;    /* delay of the next retry after a failure */
        bool lock_held;
        bool flush_pending;     /* a coalesced restart/re-registration is scheduled
                                   (runtime-wide debounce) */
        size_t streams;         /* open ListAndWatch streams of the current server */
        unsigned dir_events;    /* directory watch events seen (runtime-wide) */
        unsigned dir_losses;    /* times the directory was found removed or replaced
                                   (runtime-wide) */
        unsigned checks;        /* directory checks run (runtime-wide) */
        bool polling;           /* the directory has no inotify watch: only the
                                   check every check_ms follows it (runtime-wide) */
};

/* Fills |out| with the state of resource |name|. Returns 0, or -ENOENT when
 * no such resource was added (|out| untouched). */
KDEV_API int kdev_dp_runtime_state(const struct kdev_dp_runtime *rt, const char *name,
                                   struct kdev_dp_state *out);

/* Formats the socket file name for resource |name| with |prefix| into |buf|
 * (|size| bytes): "<prefix><name with '/' replaced by '_'>.sock". Returns the
 * length, or -ENAMETOOLONG when it does not fit. */
KDEV_API int kdev_dp_socket_name(const char *prefix, const char *name, char *buf, size_t size);

#endif /* KDEV_PLUGIN_RUNTIME_H */
