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
 * Edits with an allocator (struct kdev_edits_allocator, set before the first
 * addition) take their arrays and strings from it instead, and nothing of
 * them is freed one by one: the allocator's owner releases it all at once
 * (the device plugin's Allocate answer, built and packed within one request,
 * src/plugin/service.c). Their strings cannot be taken over.
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

/* Memory for container edits that is not malloc'ed: |alloc|(|data|, size)
 * returns |size| bytes (size > 0) aligned for any object, or NULL when out of
 * memory; the memory lives until the allocator's owner releases all of it. */
struct kdev_edits_allocator {
        void *(*alloc)(void *data, size_t size);
        void *data;
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
        /* NULL: arrays and strings are malloc'ed, owned and freed by
         * kdev_container_edits_clear(); otherwise borrowed, they come from
         * it (see above). */
        const struct kdev_edits_allocator *allocator;
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

/* Frees what |e| owns (NULL strings, taken over by a converter, are skipped;
 * nothing for edits with an allocator) and zeroes it, keeping its allocator.
 * NULL-safe. */
KDEV_API void kdev_container_edits_clear(struct kdev_container_edits *e);

/* |size| bytes (uninitialised) of working memory for code that builds |e|
 * (a backend's allocate hook: per-request tables and lists), from e's
 * allocator when it has one, else from malloc. Free it with
 * kdev_edits_scratch_free(|e|, p) (which does nothing for an allocator's
 * memory: that lives until the allocator is released). Returns NULL when
 * out of memory (or |size| is 0 and malloc returns NULL for it). */
KDEV_API void *kdev_edits_scratch(const struct kdev_container_edits *e, size_t size);

/* Frees |p| from kdev_edits_scratch(|e|, ...) (|e| with the same allocator
 * as then; clearing |e| keeps it). NULL-safe. */
KDEV_API void kdev_edits_scratch_free(const struct kdev_container_edits *e, void *p);

#endif /* KDEV_MODEL_EDITS_H */
