/* Strict, table-driven reading of a YAML configuration document (libyaml).
 *
 * Internal to kdev: the engine of kdev's config file (config/config.h), whose
 * sections the backends read with their own tables (generic/config.c,
 * nvidia/config_schema.c). A schema is a set of mapping tables
 * (key, required, handler); handlers read one value node into a C struct.
 * Every error is reported as `file:line:column: key.path[i]: message` with the
 * 1-based position of the offending node, and processing stops at the first
 * error. Unknown keys, repeated keys, wrong node kinds, YAML anchors/aliases,
 * explicit YAML tags ("!!int", "!foo", "!"), collections nested deeper than
 * KDEV_YCFG_DEPTH_MAX and multi-document files are errors.
 */
#ifndef KDEV_CONFIG_YAMLCFG_H
#define KDEV_CONFIG_YAMLCFG_H

#include <stdbool.h>
#include <stddef.h>
#include <yaml.h>

#include "common/err.h"
#include "common/export.h"

/* Largest configuration file read (bytes): kind "config file". */
#define KDEV_YCFG_FILE_MAX (1024 * 1024)

/* Deepest nesting of mappings and lists accepted (the root collection is
 * level 1). libyaml's scanner costs grow with the square of the flow nesting
 * depth, so deeper input is refused as soon as the parser reaches it. */
#define KDEV_YCFG_DEPTH_MAX 32

struct kdev_ycfg {
        const char *file;       /* display name used in messages */
        yaml_document_t doc;    /* the parsed document */
        bool have_doc;
        unsigned char *visited; /* per node: already read (alias detection) */
        char **tags;            /* per node: explicit tag as written ("!!int"), or NULL */
        size_t n_nodes;
        bool empty;             /* kdev_ycfg_parse failed because the text holds no
                                   YAML document (empty, blanks or comments only) */
        char path[512];         /* key path of the node being read */
        size_t path_len;
        struct kdev_err *err;
};

/* Reads one value node; |obj| is the struct being filled (the mapping's
 * object for mapping fields, the element for list items). Returns 0 or a
 * negative errno after setting c->err (use kdev_ycfg_fail). */
typedef int (*kdev_ycfg_fn)(struct kdev_ycfg *c, yaml_node_t *node, void *obj);

struct kdev_ycfg_field {
        const char *key;
        bool required;
        kdev_ycfg_fn fn;
};

/* Reads the config file |path| (at most KDEV_YCFG_FILE_MAX bytes, a regular
 * file, no NUL bytes) into a malloc'ed, NUL-terminated buffer
 * (kdev_file_read). Errors: `<path>: cannot read: <strerror>` with the errno,
 * `<path>: is not a regular file (a FIFO)` (-EINVAL; -EISDIR for a
 * directory), `<path>: the config file is larger than 1048576 bytes`
 * (-EFBIG), `<path>: contains a NUL byte at offset <n>` (-EILSEQ). */
KDEV_API int kdev_ycfg_read_file(const char *path, char **text, size_t *len, struct kdev_err *err);

/* Parses |text| (|len| bytes) as exactly one YAML document into |c|, whose
 * messages name |file|. Errors (-EINVAL): YAML syntax errors with libyaml's
 * position and problem; `file:line:column: nesting deeper than 32 levels` at
 * the first collection (in any document of the stream) that opens level 33,
 * found by an event pass that stops there, before any document is built; an
 * empty document (also sets c->empty: the text is empty or holds only blanks
 * and comments); more than one document. -ENOMEM. On success,
 * kdev_ycfg_root() is the root node. Explicit tags are recorded per node and
 * reported when the node is read (see kdev_ycfg_mapping). Call
 * kdev_ycfg_done() always. */
KDEV_API int kdev_ycfg_parse(struct kdev_ycfg *c, const char *file, const char *text, size_t len,
                             struct kdev_err *err);

KDEV_API yaml_node_t *kdev_ycfg_root(struct kdev_ycfg *c);

/* Releases the document of |c|. */
KDEV_API void kdev_ycfg_done(struct kdev_ycfg *c);

/* Sets c->err to `file:line:column: path: message` at |node| and returns
 * -EINVAL. */
KDEV_API int kdev_ycfg_fail(struct kdev_ycfg *c, const yaml_node_t *node, const char *fmt, ...)
        __attribute__((format(printf, 3, 4)));

/* Reads mapping |node| with the |n| fields of |fields| into |obj|: unknown,
 * repeated and non-string keys and missing required keys are errors.
 *
 * Every reader here (mapping, list, string, uint, and the keys of a mapping)
 * first refuses a node that was reached a second time through an alias
 * (`...: YAML anchors and aliases are not supported`) or that has an explicit
 * tag: `file:line:column: key.path: YAML tags are not supported ("!!int")`,
 * positioned at the tag (tags of the YAML 1.1 core schema are shown with the
 * "!!" handle, others as the parser resolved them). */
KDEV_API int kdev_ycfg_mapping(struct kdev_ycfg *c, yaml_node_t *node,
                               const struct kdev_ycfg_field *fields, size_t n, void *obj);

/* Reads list |node|: allocates a zeroed array of its items (|elem_size| bytes
 * each) into *items / *n_items first (so a caller's free function can release
 * a partly read array), then calls |fn| for each item. |min| and |max| bound
 * the number of items. */
KDEV_API int kdev_ycfg_list(struct kdev_ycfg *c, yaml_node_t *node, size_t min, size_t max,
                            size_t elem_size, void **items, size_t *n_items, kdev_ycfg_fn fn);

/* Reads a string scalar (not null) into a malloc'ed copy. */
KDEV_API int kdev_ycfg_string(struct kdev_ycfg *c, yaml_node_t *node, char **out);

/* Reads a plain (unquoted) decimal integer scalar in [min, max]. */
KDEV_API int kdev_ycfg_uint(struct kdev_ycfg *c, yaml_node_t *node, unsigned min, unsigned max,
                            unsigned *out);

/* Appends printf-formatted text to the key path (".key" or "[i]"); returns
 * the mark to give kdev_ycfg_path_pop() to remove it again. */
KDEV_API size_t kdev_ycfg_path_push(struct kdev_ycfg *c, const char *fmt, ...)
        __attribute__((format(printf, 2, 3)));
KDEV_API void kdev_ycfg_path_pop(struct kdev_ycfg *c, size_t mark);

/* Value node of |key| in mapping |node|, or NULL. */
KDEV_API yaml_node_t *kdev_ycfg_lookup(struct kdev_ycfg *c, yaml_node_t *node, const char *key);

/* 1-based position of |node|. */
KDEV_API unsigned kdev_ycfg_line(const yaml_node_t *node);
KDEV_API unsigned kdev_ycfg_column(const yaml_node_t *node);

#endif /* KDEV_CONFIG_YAMLCFG_H */
