/* The root of kdev's config file: `version` and the top-level sections that
 * the backends register.
 *
 *   version: v1          # optional; "v1" when absent, as in NVIDIA's files
 *   generic: ...         # the generic /dev backend (generic/generic.h)
 *   flags: ...           # the NVIDIA backend: flags, resources, sharing,
 *   sharing: ...         #   imex, health (nvidia/config.h)
 *
 * A module that owns a section fills a struct kdev_config_sections (its keys,
 * each with a yamlcfg reader, config/yamlcfg.h, and the object they fill) and
 * registers it on a root; kdev_config_load / kdev_config_parse then read the
 * file strictly: a key no module registered is an error that lists the known
 * keys in registration order (`version` first), e.g. `demo.yaml:4:1: flags:
 * unknown key (expected one of: version, generic)`; every other error comes
 * from the section's reader as `file:line:column: key.path: message`.
 */
#ifndef KDEV_CONFIG_CONFIG_H
#define KDEV_CONFIG_CONFIG_H

#include <stddef.h>

#include "common/err.h"
#include "common/export.h"
#include "config/yamlcfg.h"

/* Top-level keys of one root, `version` included. */
#define KDEV_CONFIG_KEYS_MAX 64

/* Top-level sections of kdev's config file that one module reads. |fields|
 * are yamlcfg field readers, called with obj = |obj| when their key is in the
 * file (the `required` flag of a field is honoured: a missing required section
 * is `missing required key "x"` at the root node). The table and |obj| must
 * outlive the parse. */
struct kdev_config_sections {
        const struct kdev_ycfg_field *fields;
        size_t n_fields;
        void *obj;
};

/* A root: the registered keys, their readers and objects. Plain data, no
 * allocations; a root can be read any number of times. */
struct kdev_config_root {
        struct kdev_ycfg_field fields[KDEV_CONFIG_KEYS_MAX]; /* the top-level mapping's table */
        kdev_ycfg_fn fns[KDEV_CONFIG_KEYS_MAX];               /* the registered readers */
        void *objs[KDEV_CONFIG_KEYS_MAX];                     /* their objects */
        size_t n_fields;
};

/* Sets |root| to hold `version` alone (optional; "v1" is the only value
 * accepted: `unsupported version "v2" (supported: v1)`). */
KDEV_API void kdev_config_root_init(struct kdev_config_root *root);

/* Adds the keys of |s| after those already registered (the order shown in
 * "unknown key" messages). Errors, |root| unchanged: -EINVAL "too many config
 * sections" when the root would hold more than KDEV_CONFIG_KEYS_MAX keys;
 * -EINVAL "config section \"x\" defined twice" for a key already registered
 * (`version` included) or given twice in |s|. */
KDEV_API int kdev_config_register(struct kdev_config_root *root,
                                  const struct kdev_config_sections *s, struct kdev_err *err);

/* Reads |len| bytes of |text| (NULL: empty) as kdev's config file with the
 * sections of |root|; messages name |display_name| (NULL: "<config>").
 * Returns 0; 1 when the text holds no YAML document (empty, or blanks and
 * comments only): nothing is read, every section counts as absent (NVIDIA's
 * plugin reads such a file as its defaults), |err| is left empty; or the
 * first error: YAML syntax and the document rules of kdev_ycfg_parse (-EINVAL), an unknown, repeated or missing top-level key
 * (-EINVAL), the error of a section's reader (-EINVAL, -ENOMEM, ...). On an
 * error the registered objects may hold part of the file's values. */
KDEV_API int kdev_config_parse(const struct kdev_config_root *root, const char *display_name,
                               const char *text, size_t len, struct kdev_err *err);

/* Like kdev_config_parse (1 for a file without a YAML document), from the
 * file at |path| (also the display name),
 * read by kdev_ycfg_read_file: at most 1 MiB, a regular file, no NUL byte
 * (its errors: -ENOENT..., -EISDIR, -EINVAL, -EFBIG, -EILSEQ). */
KDEV_API int kdev_config_load(const struct kdev_config_root *root, const char *path,
                              struct kdev_err *err);

#endif /* KDEV_CONFIG_CONFIG_H */
