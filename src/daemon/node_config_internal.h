/* Per-node configs of kdev-plugin (internal to src/daemon): one of several
 * named config files, picked by a label of this node, as NVIDIA's
 * config-manager picks them (k8s-device-plugin cmd/config-manager/main.go,
 * v0.17+), but inside kdev-plugin: the Node is watched through the kube
 * client (src/kube) on a thread of its own, and a new selection is applied
 * live by the daemon (no sidecar, no restart).
 *
 * Selection, for the value of the label (NULL or "": the node has none):
 *   1. the label names a config file in the directory: that file;
 *   2. the label names no file there: a warning, then as with no label
 *      (NVIDIA's config-manager fails instead and keeps the previous file);
 *   3. no label: the default config name when one is set (it must exist:
 *      otherwise an error, as NVIDIA), else the fallback strategies in order
 *      (NVIDIA's FALLBACK_STRATEGIES, default "named,single" as NVIDIA's
 *      helm chart sets it): "named" picks the file "default", "single" the
 *      only file when there is exactly one, "empty" NVIDIA's defaults (no
 *      file); none applies: an error.
 * The configs are the directory's entries that are not directories and do
 * not start with ".." (a mounted ConfigMap's own entries); the file name is
 * the config name.
 *
 * Threading: kdev_node_config_select() and kdev_node_label_read() on any
 * thread (the latter blocks); the watch's callbacks on the loop thread. */
#ifndef KDEV_DAEMON_NODE_CONFIG_INTERNAL_H
#define KDEV_DAEMON_NODE_CONFIG_INTERNAL_H

#include <stdbool.h>

#include <uv.h>

#include "common/err.h"
#include "daemon/dp_daemon.h"

/* Checks |o| without touching the network: a directory, a node name, known
 * fallback strategies. Returns 0 or -EINVAL with |err|: "--config-dir needs
 * the node name (NODE_NAME or --node-name)", "unknown fallback strategy
 * \"x\" (expected named, single or empty)". */
int kdev_node_config_check(const struct kdev_node_config_options *o, struct kdev_err *err);

/* Selects the config for label value |value| (see above). On success *name
 * is the config's name (malloc'ed; "" for NVIDIA's defaults, no file) and
 * *path its file (malloc'ed, NULL for ""). |warn| (may be NULL) receives the
 * warning of rule 2 (valid during the call). Errors (-ENOENT, -EINVAL), with
 * the directory and the configs it has: "no config files in DIR",
 * "cannot read DIR: ...", "default config \"x\" is not in DIR (configs: a,
 * b)", "no config selected: the node has no label L, no default config is
 * set and the fallback strategies (named, single) apply to none of the
 * configs in DIR (a, b)"; -ENOMEM. */
int kdev_node_config_select(const struct kdev_node_config_options *o, const char *value,
                            void (*warn)(void *arg, const char *msg), void *warn_arg,
                            char **name, char **path, struct kdev_err *err);

/* Reads the Node once (GET /api/v1/nodes/<node>, blocking, with the kube
 * client's retries): *value the label's value (malloc'ed; NULL when the node
 * has no such label), *resource_version the Node's (malloc'ed). Errors: the
 * kube client's ("GET /api/v1/nodes/n1: 404 Not Found: ..."), prefixed with
 * "reading node N". */
int kdev_node_label_read(const struct kdev_node_config_options *o, char **value,
                         char **resource_version, struct kdev_err *err);

struct kdev_node_watch;

/* Called on the loop thread with the label's new value (NULL: the node has
 * no such label, or the Node was deleted); only when it differs from the
 * last value reported (the first: |initial|). */
typedef void (*kdev_node_label_fn)(void *arg, const char *value);

/* Starts watching the Node |o->node_name| from |resource_version| (NULL:
 * reads it first) on a thread of its own with its own kube client (GET
 * ...?watch=1, re-listed after a stream ends with an error or 410 Gone,
 * errors logged and retried with backoff from 1 s to 30 s). |initial| is the
 * value already known (copied). Returns NULL with |err| (the kube
 * configuration, -ENOMEM, thread creation). */
struct kdev_node_watch *kdev_node_watch_start(uv_loop_t *loop,
                                              const struct kdev_node_config_options *o,
                                              const char *initial, const char *resource_version,
                                              kdev_node_label_fn fn, void *arg,
                                              struct kdev_err *err);

/* Stops the watch: aborts its request (within about a second), joins the
 * thread, frees |w| and calls |done| (may be NULL) once its handle closed.
 * Loop thread. NULL-safe (|done| then runs at once). */
void kdev_node_watch_stop(struct kdev_node_watch *w, void (*done)(void *arg), void *arg);

#endif /* KDEV_DAEMON_NODE_CONFIG_INTERNAL_H */
