/* Private to the NVIDIA configuration (config.c, config_schema.c,
 * config_env.c): the value checks and the assignment of option values by
 * source, shared by the file schema and the env/flag overrides. */
#ifndef KDEV_NVIDIA_CONFIG_INTERNAL_H
#define KDEV_NVIDIA_CONFIG_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>

#include "config/yamlcfg.h"
#include "nvidia/config.h"

/* Size of the |msg| buffers below (bytes, NUL included). */
#define KDEV_NVCFG_MSG_MAX 384

/* Index of |v| in the array |names| of strings, or -1. */
int kdev_nvcfg_lookup(const char *const *names, size_t n, const char *v);
#define KDEV_NVCFG_LOOKUP(names, v) kdev_nvcfg_lookup(names, sizeof(names) / sizeof(names[0]), v)

/* Appends a printf-formatted warning to cfg->warnings. 0 or -ENOMEM. */
int kdev_nvcfg_add_warning(struct kdev_nvidia_config *cfg, const char *fmt, ...)
        __attribute__((format(printf, 2, 3)));

/* Whether source |s| may set option |o| (not weaker than the source that set
 * it); records |s| as the option's source when it may. */
bool kdev_nvcfg_take(struct kdev_nvidia_config *cfg, enum kdev_nvidia_opt o,
                     enum kdev_nvidia_src s);

/* Frees what |r| owns and resets it to "not given". */
void kdev_nvcfg_replicated_clear(struct kdev_nvidia_replicated *r);

/* One device list strategy name ("envvar", ...) to its KDEV_NVIDIA_LIST_*
 * bit. 0, or -EINVAL with the message in |msg|. */
int kdev_nvcfg_parse_list_item(const char *v, unsigned *bit, char *msg);

/* A decimal number without sign in [min, max]. 0, or -EINVAL with `must be an
 * integer between <min> and <max>, got "<v>"` in |msg|. */
int kdev_nvcfg_parse_uint(const char *v, unsigned min, unsigned max, unsigned *out, char *msg);

/* Sets boolean option |o| to |v| from source |s| (when kdev_nvcfg_take
 * allows). */
void kdev_nvcfg_assign_bool(struct kdev_nvidia_config *cfg, enum kdev_nvidia_opt o,
                            enum kdev_nvidia_src s, bool v);

/* Sets the device list strategies to |mask| from source |s|; a repeated flag
 * adds to the strategies of earlier flags. */
void kdev_nvcfg_assign_mask(struct kdev_nvidia_config *cfg, enum kdev_nvidia_src s,
                            unsigned mask);

/* Sets the IMEX channel list (appending for a repeated flag) after checking
 * the result. |ids| (|n| entries, malloc'ed) is taken over on success and on
 * error. 0, -EINVAL with the message in |msg|, or -ENOMEM. */
int kdev_nvcfg_assign_channels(struct kdev_nvidia_config *cfg, enum kdev_nvidia_src s,
                               unsigned *ids, size_t n, char *msg);

/* Applies the text value |v| of option |o| from source |s| (env, flag, or a
 * file value given as text). 0, -EINVAL with the message in |msg|, or
 * -ENOMEM. */
int kdev_nvcfg_set_text(struct kdev_nvidia_config *cfg, enum kdev_nvidia_opt o,
                        enum kdev_nvidia_src s, const char *v, char *msg);

/* Reads a resource name of the config file into *out (replacing it): a
 * string, "nvidia.com/" added when it has no '/', checked with
 * kdev_resource_name_check (the error at |node|). (config_schema.c) */
int kdev_nvcfg_read_resource_name(struct kdev_ycfg *c, yaml_node_t *node, char **out);

/* The `name` node of item |j| of the mapping list |list| (|list| itself when
 * it has none), with "[j].name" pushed on the key path: where a duplicate
 * name is reported. (config_schema.c) */
yaml_node_t *kdev_nvcfg_item_name(struct kdev_ycfg *c, yaml_node_t *list, size_t j);

/* Frees what |iso| owns and resets it to "not given" (isolation.c). */
void kdev_nvcfg_isolation_clear(struct kdev_nvidia_isolation *iso);

/* The reader of kdev's `isolation` section (isolation.c), for the schema's
 * top-level table. */
int kdev_nvcfg_read_isolation(struct kdev_ycfg *c, yaml_node_t *node, void *obj);

/* The rules of `isolation` that need the whole file (kdev_nvidia_config_finish):
 * every isolated resource is the advertised name of a sharing.timeSlicing
 * entry. 0, or -EINVAL "<file>:<line>:<column>: isolation.resources[<i>].name:
 * ..." (isolation.c). */
int kdev_nvcfg_isolation_check(const struct kdev_nvidia_config *cfg, struct kdev_err *err);

/* Whether option |o| is a boolean. */
bool kdev_nvcfg_is_bool_opt(enum kdev_nvidia_opt o);

#endif /* KDEV_NVIDIA_CONFIG_INTERNAL_H */
