/* Internal helpers shared by the files of the CDI module. */
#ifndef KDEV_CDI_CDI_INTERNAL_H
#define KDEV_CDI_CDI_INTERNAL_H

#include "cdi/cdi.h"

/* kdev_err_wrap() needs a non-NULL error to keep the code: public functions
 * that wrap point a NULL |err| at a local one. */
#define KDEV_CDI_LOCAL_ERR(err)                 \
        struct kdev_err err##_local_ = { 0 };   \
        if (!(err))                             \
        (err) = &err##_local_

/* Checks an annotation key (Kubernetes qualified name). 0 or -EINVAL. */
int kdev_cdi_validate_annotation_key(const char *key, struct kdev_err *err);

/* Item checks used by the add functions, the validator and the reader.
 * 0 or -EINVAL with a message (without location prefix). */
int kdev_cdi_check_env(const char *kv, struct kdev_err *err);
int kdev_cdi_check_device_node(const struct kdev_cdi_device_node *n, struct kdev_err *err);
int kdev_cdi_check_mount(const struct kdev_cdi_mount *m, struct kdev_err *err);
int kdev_cdi_check_hook(const struct kdev_cdi_hook *h, struct kdev_err *err);

/* Normalises a known CDI version ("v1.0.0" -> "1.0.0"); returns the static
 * string, or NULL when unknown. */
const char *kdev_cdi_known_version(const char *version);

/* JSON rendering without validation (for kdev_cdi_spec_equal). NULL on ENOMEM. */
json_t *kdev_cdi_spec_json_raw(const struct kdev_cdi_spec *spec);

#endif /* KDEV_CDI_CDI_INTERNAL_H */
