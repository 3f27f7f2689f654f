/* The device plugin's Allocate answer: the model's container edits of one
 * container request (model/edits.h) as a v1beta1 ContainerAllocateResponse.
 * The one place where container edits become device plugin messages; every
 * backend's allocate hook fills the neutral edits and never sees them. */
#ifndef KDEV_PLUGIN_ALLOCATE_H
#define KDEV_PLUGIN_ALLOCATE_H

#include <stddef.h>

#include "common/err.h"
#include "common/export.h"
#include "deviceplugin/v1beta1/api.pb-c.h"
#include "model/edits.h"
#include "model/model.h"

/* Moves container edits |e| into |out| (initialised, e.g. with
 * V1BETA1__CONTAINER_ALLOCATE_RESPONSE__INIT): nodes -> devices
 * {container_path = path, host_path, permissions}, env -> envs, mounts ->
 * mounts {container_path, host_path} (options dropped: v1beta1 has none),
 * annotations -> annotations, cdi_devices -> cdi_devices {name}, each in
 * |e|'s order and appended after what |out| already holds (env keys are not
 * merged with envs already in |out|). Hooks have no v1beta1 field and are
 * left in |e|. The strings are taken over, not copied: on success |e| keeps
 * only its hooks and mount options (clear it with
 * kdev_container_edits_clear). Returns 0, or -ENOMEM with |err|: |out| then
 * holds a part of the entries (free it with
 * kdev_allocate_response_free_contents) and |e| the rest (clear it too);
 * -EINVAL with |err| (nothing moved) when |e| has an allocator (its strings
 * are not malloc'ed, model/edits.h). */
KDEV_API int kdev_plugin_allocate_response(struct kdev_container_edits *e,
                                           V1beta1__ContainerAllocateResponse *out,
                                           struct kdev_err *err);

/* Answers one container request of Allocate: kdev_resource_edits(r, ids,
 * n_ids) (model/model.h: its checks, errors and node order) turned into |out|
 * by kdev_plugin_allocate_response. |out| must be initialised and have no
 * devices yet (else -EINVAL); its other fields are appended to. The new
 * strings and messages belong to |out|; release them with
 * kdev_allocate_response_free_contents(). Returns 0, or kdev_resource_edits'
 * error (|out| unchanged) or -ENOMEM (|out| cleared), with |err|. */
KDEV_API int kdev_plugin_allocate(const struct kdev_resource *r, const char *const *ids,
                                  size_t n_ids, V1beta1__ContainerAllocateResponse *out,
                                  struct kdev_err *err);

/* Frees the contents of |resp| (envs, mounts, devices, annotations,
 * cdi_devices, each entry and its strings; strings equal to
 * protobuf_c_empty_string are not freed), assuming all were malloc'ed, and
 * resets |resp| to V1BETA1__CONTAINER_ALLOCATE_RESPONSE__INIT. Does not free
 * |resp| itself. NULL-safe. */
KDEV_API void kdev_allocate_response_free_contents(V1beta1__ContainerAllocateResponse *resp);

#endif /* KDEV_PLUGIN_ALLOCATE_H */
