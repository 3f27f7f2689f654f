/* Container edits: what a container needs for the logical devices it is
 * given, in no front end's wire format. A backend's allocate hook
 * (struct kdev_resource_ops) and NVIDIA's CDI builders fill one; each front
 * end turns it into its own answer:
 *   - src/plugin: a v1beta1 ContainerAllocateResponse
 *     (kdev_plugin_allocate_response, plugin/allocate.h): nodes -> devices,
 *     env -> envs, mounts -> mounts, annotations -> annotations,
 *     cdi_devices -> cdi_devices (hooks and mount options have no v1beta1
 *     field and are not sent);
 *   - src/nvidia and src/dra: CDI containerEdits of a spec or a claim's spec
 *     (kdev_nvidia_edits_to_cdi, nvidia/container_edits.h): env, nodes,
 *     mounts with options, hooks.
 * Order is kept everywhere: each array is in the order of its additions.
 * Every string is malloc'ed and owned by the edits (never NULL once added:
 * a NULL argument is stored as ""); a converter may take them over, leaving
 * NULL behind, which kdev_container_edits_clear() skips.
 */
#ifndef KDEV_MODEL_EDITS_H
#define KDEV_MODEL_EDITS_H

#include <stddef.h>

#include "common/err.h"
#include "common/export.h"

/* One device node (v1beta1 DeviceSpec; CDI deviceNodes entry). */
struct kdev_edit_node {
        char *path;        /* path inside the container */
        char *host_path;   /* the node on the host */
        char *permissions; /* cgroup permissions, letters of "rwm" */
};

/* One key/value pair (an environment variable, an annotation). */
struct kdev_edit_kv {
        char *key;
        char *value;
};

/* One bind mount (v1beta1 Mount; CDI mounts entry). */
struct kdev_edit_mount {
        char *host_path;
        char *container_path;
        char **options; /* |n_options| mount options ("ro", "rbind", ...); CDI only */
        size_t n_options;
};

/* One OCI hook (CDI hooks entry; the device plugin API has none). */
struct kdev_edit_hook {
        char *hook_name; /* e.g. "createContainer" */
        char *path;      /* absolute path of the executable */
        char **args;     /* argv, argv[0] included */
        size_t n_args;
        char **env; /* "K=V" strings */
        size_t n_env;
};

struct kdev_container_edits {
        struct kdev_edit_node *nodes;
        size_t n_nodes;
        struct kdev_edit_kv *env; /* a map: each key once, at its first position */
        size_t n_env;
        struct kdev_edit_mount *mounts;
        size_t n_mounts;
        struct kdev_edit_kv *annotations;
        size_t n_annotations;
        char **cdi_devices; /* fully-qualified CDI device names ("vendor/class=name") */
        size_t n_cdi_devices;
        struct kdev_edit_hook *hooks;
        size_t n_hooks;
};

/* Appends device node {path, host_path, permissions} (copies; NULL: ""). No
 * duplicate check: the caller decides what one container path may repeat.
 * Returns 0 or -ENOMEM with |err|; |e| is then unchanged. */
KDEV_API int kdev_edits_add_node(struct kdev_container_edits *e, const char *path,
                                 const char *host_path, const char *permissions,
                                 struct kdev_err *err);

/* Sets environment variable |key| to |value| (copies; NULL value: ""): a key
 * already in |e| keeps its position and takes the new value (the device plugin
 * API's envs are a map), a new key is appended. Returns 0 or -ENOMEM with
 * |err|; |e| is then unchanged. */
KDEV_API int kdev_edits_set_env(struct kdev_container_edits *e, const char *key, const char *value,
                                struct kdev_err *err);

/* Appends a mount of |host_path| at |container_path| with |n_options|
 * options |options| (copies; |options| may be NULL when |n_options| is 0).
 * Returns 0 or -ENOMEM with |err|; |e| is then unchanged. */
KDEV_API int kdev_edits_add_mount(struct kdev_container_edits *e, const char *host_path,
                                  const char *container_path, const char *const *options,
                                  size_t n_options, struct kdev_err *err);

/* Appends annotation |key| = |value| (copies; no duplicate check). Returns 0
 * or -ENOMEM with |err|; |e| is then unchanged. */
KDEV_API int kdev_edits_add_annotation(struct kdev_container_edits *e, const char *key,
                                       const char *value, struct kdev_err *err);

/* Appends CDI device name |name| (a copy; not checked here: the front end
 * that sends it checks it). Returns 0 or -ENOMEM with |err|. */
KDEV_API int kdev_edits_add_cdi_device(struct kdev_container_edits *e, const char *name,
                                       struct kdev_err *err);

/* Appends a deep copy of |h| (NULL strings become ""). Returns 0 or -ENOMEM
 * with |err|; |e| is then unchanged. */
KDEV_API int kdev_edits_add_hook(struct kdev_container_edits *e, const struct kdev_edit_hook *h,
                                 struct kdev_err *err);

/* Frees what |e| owns (NULL strings, taken over by a converter, are skipped)
 * and zeroes it. NULL-safe. */
KDEV_API void kdev_container_edits_clear(struct kdev_container_edits *e);

#endif /* KDEV_MODEL_EDITS_H */
