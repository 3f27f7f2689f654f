/* The root of kdev's config file (see config.h). */
#include "config/config.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

static int read_version(struct kdev_ycfg *c, yaml_node_t *node, void *obj)
{
        (void)obj;
        char *v = NULL;
        int rc = kdev_ycfg_string(c, node, &v);
        if (rc < 0)
                return rc;
        if (strcmp(v, "v1") != 0)
                rc = kdev_ycfg_fail(c, node, "unsupported version \"%s\" (supported: v1)", v);
        free(v);
        return rc;
}

/* Reads a registered section: at the top level the key path is the key
 * itself, which selects the module's reader and object. */
static int read_section(struct kdev_ycfg *c, yaml_node_t *node, void *obj)
{
        const struct kdev_config_root *root = obj;
        for (size_t i = 0; i < root->n_fields; i++) {
                if (strcmp(root->fields[i].key, c->path) == 0)
                        return root->fns[i](c, node, root->objs[i]);
        }
        return kdev_ycfg_fail(c, node, "internal error: no reader for this section");
}

void kdev_config_root_init(struct kdev_config_root *root)
{
        memset(root, 0, sizeof(*root));
        /* optional: v1 when absent, as NVIDIA */
        root->fields[0] = (struct kdev_ycfg_field){"version", false, read_section};
        root->fns[0] = read_version;
        root->n_fields = 1;
}

int kdev_config_register(struct kdev_config_root *root, const struct kdev_config_sections *s,
                         struct kdev_err *err)
{
        if (s->n_fields > KDEV_CONFIG_KEYS_MAX - root->n_fields)
                return kdev_err_set(err, EINVAL, "too many config sections");
        for (size_t i = 0; i < s->n_fields; i++) {
                for (size_t j = 0; j < root->n_fields + i; j++) {
                        const char *key = j < root->n_fields ? root->fields[j].key
                                                             : s->fields[j - root->n_fields].key;
                        if (strcmp(key, s->fields[i].key) == 0)
                                return kdev_err_set(err, EINVAL,
                                                    "config section \"%s\" defined twice",
                                                    s->fields[i].key);
                }
        }
        for (size_t i = 0; i < s->n_fields; i++) {
                size_t k = root->n_fields++;
                root->fields[k] = s->fields[i];
                root->fields[k].fn = read_section;
                root->fns[k] = s->fields[i].fn;
                root->objs[k] = s->obj;
        }
        return 0;
}

int kdev_config_parse(const struct kdev_config_root *root, const char *display_name,
                      const char *text, size_t len, struct kdev_err *err)
{
        struct kdev_ycfg c;
        if (!display_name)
                display_name = "<config>";
        int rc = kdev_ycfg_parse(&c, display_name, text ? text : "", text ? len : 0, err);
        if (rc < 0 && c.empty) {
                /* no document: every section absent, as NVIDIA reads an
                 * empty file (its defaults) */
                kdev_ycfg_done(&c);
                if (err)
                        *err = (struct kdev_err){0};
                return 1;
        }
        if (rc == 0)
                rc = kdev_ycfg_mapping(&c, kdev_ycfg_root(&c), root->fields, root->n_fields,
                                       (void *)root);
        kdev_ycfg_done(&c);
        return rc;
}

int kdev_config_load(const struct kdev_config_root *root, const char *path, struct kdev_err *err)
{
        char *text;
        size_t len;
        int rc = kdev_ycfg_read_file(path, &text, &len, err);
        if (rc < 0)
                return rc;
        rc = kdev_config_parse(root, path, text, len, err);
        free(text);
        return rc;
}
