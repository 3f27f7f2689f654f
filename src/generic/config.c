/* The generic backend's section of kdev's config file (`generic`): schema
 * tables and checks. */
#include "generic/generic.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "common/resource_name.h"
#include "config/config.h"
#include "config/yamlcfg.h"

#define PATH_TEXT_MAX 4095

static void path_clear(struct kdev_generic_path *p)
{
        free(p->path);
        free(p->mount_path);
}

static void group_clear(struct kdev_generic_group *g)
{
        for (size_t i = 0; i < g->n_paths; i++)
                path_clear(&g->paths[i]);
        free(g->paths);
}

static void resource_clear(struct kdev_generic_resource *r)
{
        for (size_t i = 0; i < r->n_groups; i++)
                group_clear(&r->groups[i]);
        free(r->groups);
        free(r->name);
}

void kdev_generic_config_free(struct kdev_generic_config *cfg)
{
        if (!cfg)
                return;
        for (size_t i = 0; i < cfg->n_resources; i++)
                resource_clear(&cfg->resources[i]);
        free(cfg->resources);
        free(cfg->source);
        free(cfg);
}

/* --- value checks ----------------------------------------------------------- */

/* An absolute path without "." or ".." components and without empty
 * components other than a trailing '/'. */
static int check_abs_path(struct kdev_ycfg *c, yaml_node_t *node, const char *s, bool dir_ok)
{
        if (s[0] != '/')
                return kdev_ycfg_fail(c, node, "must be an absolute path, got \"%s\"", s);
        if (strlen(s) > PATH_TEXT_MAX)
                return kdev_ycfg_fail(c, node, "must be at most %d characters", PATH_TEXT_MAX);
        const char *p = s;
        while (*p) {
                while (*p == '/')
                        p++;
                const char *e = strchrnul(p, '/');
                size_t len = (size_t)(e - p);
                if ((len == 1 && p[0] == '.') || (len == 2 && p[0] == '.' && p[1] == '.'))
                        return kdev_ycfg_fail(c, node,
                                              "must not contain \".\" or \"..\" components, got "
                                              "\"%s\"",
                                              s);
                p = e;
        }
        size_t n = strlen(s);
        if (!dir_ok && s[n - 1] == '/')
                return kdev_ycfg_fail(c, node, "must not end with '/', got \"%s\"", s);
        return 0;
}

/* --- schema: paths[k] -------------------------------------------------------- */

static int read_path_path(struct kdev_ycfg *c, yaml_node_t *node, void *obj)
{
        struct kdev_generic_path *p = obj;
        int rc = kdev_ycfg_string(c, node, &p->path);
        if (rc < 0)
                return rc;
        p->line = kdev_ycfg_line(node);
        p->column = kdev_ycfg_column(node);
        return check_abs_path(c, node, p->path, false);
}

static int read_path_mount(struct kdev_ycfg *c, yaml_node_t *node, void *obj)
{
        struct kdev_generic_path *p = obj;
        int rc = kdev_ycfg_string(c, node, &p->mount_path);
        if (rc < 0)
                return rc;
        return check_abs_path(c, node, p->mount_path, true);
}

static int read_path_perms(struct kdev_ycfg *c, yaml_node_t *node, void *obj)
{
        struct kdev_generic_path *p = obj;
        char *s = NULL;
        int rc = kdev_ycfg_string(c, node, &s);
        if (rc < 0)
                return rc;
        bool r = false, w = false, m = false, ok = s[0] != '\0';
        for (const char *q = s; *q && ok; q++) {
                bool *flag = *q == 'r' ? &r : *q == 'w' ? &w : *q == 'm' ? &m : NULL;
                if (!flag || *flag)
                        ok = false;
                else
                        *flag = true;
        }
        if (!ok) {
                rc = kdev_ycfg_fail(c, node,
                                    "must be a combination of \"r\", \"w\" and \"m\", each at "
                                    "most once, got \"%s\"",
                                    s);
                free(s);
                return rc;
        }
        free(s);
        size_t n = 0;
        if (r)
                p->permissions[n++] = 'r';
        if (w)
                p->permissions[n++] = 'w';
        if (m)
                p->permissions[n++] = 'm';
        p->permissions[n] = '\0';
        return 0;
}

static int read_path_limit(struct kdev_ycfg *c, yaml_node_t *node, void *obj)
{
        struct kdev_generic_path *p = obj;
        return kdev_ycfg_uint(c, node, 1, KDEV_GENERIC_LIMIT_MAX, &p->limit);
}

static const struct kdev_ycfg_field path_fields[] = {
        {"path", true, read_path_path},
        {"mountPath", false, read_path_mount},
        {"permissions", false, read_path_perms},
        {"limit", false, read_path_limit},
};

static int read_path(struct kdev_ycfg *c, yaml_node_t *node, void *obj)
{
        struct kdev_generic_path *p = obj;
        strcpy(p->permissions, "rw");
        p->limit = 1;
        return kdev_ycfg_mapping(c, node, path_fields, sizeof(path_fields) / sizeof(path_fields[0]),
                                 p);
}

/* --- schema: groups[j] -------------------------------------------------------- */

static int read_group_paths(struct kdev_ycfg *c, yaml_node_t *node, void *obj)
{
        struct kdev_generic_group *g = obj;
        return kdev_ycfg_list(c, node, 1, KDEV_GENERIC_PATHS_MAX, sizeof(*g->paths),
                              (void **)&g->paths, &g->n_paths, read_path);
}

static int read_group_count(struct kdev_ycfg *c, yaml_node_t *node, void *obj)
{
        struct kdev_generic_group *g = obj;
        return kdev_ycfg_uint(c, node, 1, KDEV_GENERIC_COUNT_MAX, &g->count);
}

static const struct kdev_ycfg_field group_fields[] = {
        {"paths", true, read_group_paths},
        {"count", false, read_group_count},
};

static int read_group(struct kdev_ycfg *c, yaml_node_t *node, void *obj)
{
        struct kdev_generic_group *g = obj;
        g->count = 1;
        g->line = kdev_ycfg_line(node);
        g->column = kdev_ycfg_column(node);
        return kdev_ycfg_mapping(c, node, group_fields,
                                 sizeof(group_fields) / sizeof(group_fields[0]), g);
}

/* --- schema: generic.devices[i] ----------------------------------------------- */

static int read_resource_name(struct kdev_ycfg *c, yaml_node_t *node, void *obj)
{
        struct kdev_generic_resource *r = obj;
        int rc = kdev_ycfg_string(c, node, &r->name);
        if (rc < 0)
                return rc;
        r->name_line = kdev_ycfg_line(node);
        r->name_column = kdev_ycfg_column(node);
        struct kdev_err e;
        kdev_err_clear(&e);
        if (kdev_resource_name_check(r->name, &e) < 0)
                return kdev_ycfg_fail(c, node, "%s", e.msg);
        return 0;
}

static int read_resource_groups(struct kdev_ycfg *c, yaml_node_t *node, void *obj)
{
        struct kdev_generic_resource *r = obj;
        return kdev_ycfg_list(c, node, 1, KDEV_GENERIC_GROUPS_MAX, sizeof(*r->groups),
                              (void **)&r->groups, &r->n_groups, read_group);
}

static const struct kdev_ycfg_field resource_fields[] = {
        {"name", true, read_resource_name},
        {"groups", true, read_resource_groups},
};

static int read_resource(struct kdev_ycfg *c, yaml_node_t *node, void *obj)
{
        struct kdev_generic_resource *r = obj;
        r->line = kdev_ycfg_line(node);
        r->column = kdev_ycfg_column(node);
        return kdev_ycfg_mapping(c, node, resource_fields,
                                 sizeof(resource_fields) / sizeof(resource_fields[0]), r);
}

/* --- schema: generic ------------------------------------------------------------ */

static int read_generic_devices(struct kdev_ycfg *c, yaml_node_t *node, void *obj)
{
        struct kdev_generic_config *cfg = obj;
        int rc = kdev_ycfg_list(c, node, 0, KDEV_GENERIC_RESOURCES_MAX, sizeof(*cfg->resources),
                                (void **)&cfg->resources, &cfg->n_resources, read_resource);
        if (rc < 0)
                return rc;
        for (size_t i = 1; i < cfg->n_resources; i++) {
                for (size_t j = 0; j < i; j++) {
                        if (strcmp(cfg->resources[i].name, cfg->resources[j].name) != 0)
                                continue;
                        /* Point at the repeated name. */
                        yaml_node_t *item = yaml_document_get_node(
                                &c->doc, node->data.sequence.items.start[i]);
                        yaml_node_t *name = kdev_ycfg_lookup(c, item, "name");
                        size_t mark = kdev_ycfg_path_push(c, "[%zu].name", i);
                        rc = kdev_ycfg_fail(c, name ? name : item,
                                            "duplicate resource name \"%s\" (first at line %u, "
                                            "column %u)",
                                            cfg->resources[i].name, cfg->resources[j].name_line,
                                            cfg->resources[j].name_column);
                        kdev_ycfg_path_pop(c, mark);
                        return rc;
                }
        }
        return 0;
}

static int read_generic_rescan(struct kdev_ycfg *c, yaml_node_t *node, void *obj)
{
        struct kdev_generic_config *cfg = obj;
        return kdev_ycfg_uint(c, node, 1, KDEV_GENERIC_RESCAN_MAX, &cfg->rescan_interval);
}

static int read_generic_grace(struct kdev_ycfg *c, yaml_node_t *node, void *obj)
{
        struct kdev_generic_config *cfg = obj;
        return kdev_ycfg_uint(c, node, 0, KDEV_GENERIC_GRACE_MAX, &cfg->grace_period);
}

static const struct kdev_ycfg_field generic_fields[] = {
        {"devices", true, read_generic_devices},
        {"rescanInterval", false, read_generic_rescan},
        {"gracePeriod", false, read_generic_grace},
};

static int read_generic(struct kdev_ycfg *c, yaml_node_t *node, void *obj)
{
        return kdev_ycfg_mapping(c, node, generic_fields,
                                 sizeof(generic_fields) / sizeof(generic_fields[0]), obj);
}

/* --- the section on kdev's config root ---------------------------------------------- */

static const struct kdev_ycfg_field section_fields[] = {
        {"generic", false, read_generic},
};

int kdev_generic_config_register(struct kdev_config_root *root, const char *display_name,
                                 struct kdev_generic_config **out, struct kdev_err *err)
{
        *out = NULL;
        if (!display_name)
                display_name = "<config>";
        struct kdev_generic_config *cfg = calloc(1, sizeof(*cfg));
        if (!cfg || !(cfg->source = strdup(display_name))) {
                free(cfg);
                return kdev_err_set(err, ENOMEM, "out of memory");
        }
        cfg->rescan_interval = KDEV_GENERIC_RESCAN_DEFAULT;
        cfg->grace_period = KDEV_GENERIC_GRACE_DEFAULT;
        struct kdev_config_sections s = {section_fields,
                                         sizeof(section_fields) / sizeof(section_fields[0]), cfg};
        int rc = kdev_config_register(root, &s, err);
        if (rc < 0) {
                kdev_generic_config_free(cfg);
                return rc;
        }
        *out = cfg;
        return 0;
}

int kdev_generic_config_parse(const char *display_name, const char *text, size_t len,
                              struct kdev_generic_config **out, struct kdev_err *err)
{
        struct kdev_config_root root;
        struct kdev_generic_config *cfg;
        kdev_config_root_init(&root);
        *out = NULL;
        int rc = kdev_generic_config_register(&root, display_name, &cfg, err);
        if (rc < 0)
                return rc;
        rc = kdev_config_parse(&root, display_name, text, len, err);
        if (rc < 0) {
                kdev_generic_config_free(cfg);
                return rc;
        }
        *out = cfg;
        return 0;
}

int kdev_generic_config_load(const char *path, struct kdev_generic_config **out,
                             struct kdev_err *err)
{
        struct kdev_config_root root;
        struct kdev_generic_config *cfg;
        kdev_config_root_init(&root);
        *out = NULL;
        int rc = kdev_generic_config_register(&root, path, &cfg, err);
        if (rc < 0)
                return rc;
        rc = kdev_config_load(&root, path, err);
        if (rc < 0) {
                kdev_generic_config_free(cfg);
                return rc;
        }
        *out = cfg;
        return 0;
}
