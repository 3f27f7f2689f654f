/* Generic backend discovery: globs -> device sets -> kdev_resource. */
#include "generic/generic.h"
#include "generic/generic_internal.h"

#include <errno.h>
#include <glob.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

struct match {
        char *named; /* matched path as named, without the root prefix */
        char *real;  /* realpath of the match */
};

struct matches {
        struct match *v;
        size_t n;
};

static void matches_clear(struct matches *m)
{
        for (size_t i = 0; i < m->n; i++) {
                free(m->v[i].named);
                free(m->v[i].real);
        }
        free(m->v);
        m->v = NULL;
        m->n = 0;
}

static int match_cmp(const void *pa, const void *pb)
{
        const struct match *a = pa, *b = pb;
        return kdev_id_natural_cmp(a->named, b->named);
}

static const char *res_name(const struct kdev_generic_config *cfg, size_t ri)
{
        return cfg->resources[ri].name;
}

static const char *base_name(const char *p)
{
        const char *s = strrchr(p, '/');
        return s ? s + 1 : p;
}

/* Copies |root| with glob metacharacters escaped, without a trailing '/'. */
static char *escape_root(const char *root)
{
        size_t n = strlen(root);
        while (n > 0 && root[n - 1] == '/')
                n--;
        char *out = malloc(2 * n + 1);
        if (!out)
                return NULL;
        size_t o = 0;
        for (size_t i = 0; i < n; i++) {
                if (strchr("*?[]\\", root[i]))
                        out[o++] = '\\';
                out[o++] = root[i];
        }
        out[o] = '\0';
        return out;
}

/* An entry of a glob that was not kept, with the warning about it. */
struct skipped {
        const char *named; /* as in struct match, points into the glob result */
        char *msg;
};

static int skipped_cmp(const void *pa, const void *pb)
{
        const struct skipped *a = pa, *b = pb;
        return kdev_id_natural_cmp(a->named, b->named);
}

/* What a non-device file of mode |mode| is, as "is ..." text. */
static const char *kind_text(mode_t mode)
{
        if (S_ISREG(mode))
                return "a regular file, not a device node";
        if (S_ISDIR(mode))
                return "a directory";
        if (S_ISFIFO(mode))
                return "a FIFO, not a device node";
        if (S_ISSOCK(mode))
                return "a socket, not a device node";
        return "not a device node";
}

/* The warning for skipped entry |named| (see kdev_generic_discover), or NULL
 * on ENOMEM. |real|: its realpath (NULL when it could not be resolved, with
 * errno |e|); |is_link|: |named| is a symlink; |mode|: the type of |real|;
 * |stat_ok|: |mode| is known. */
static char *skip_message(const char *res, const char *named, bool is_link, const char *real,
                          int e, bool stat_ok, mode_t mode)
{
        char *msg = NULL;
        int n;
        if (!real && is_link && e == ENOENT)
                n = asprintf(&msg, "%s: %s is a dangling symlink; skipped", res, named);
        else if (!real || !stat_ok)
                n = asprintf(&msg, "%s: %s cannot be resolved: %s; skipped", res, named,
                             strerror(e));
        else if (is_link)
                n = asprintf(&msg, "%s: %s is a symlink to %s, which is %s; skipped", res, named,
                             real, kind_text(mode));
        else
                n = asprintf(&msg, "%s: %s is %s; skipped", res, named, kind_text(mode));
        return n < 0 ? NULL : msg;
}

/* Gives the warnings of a path whose glob kept nothing: the first
 * KDEV_GENERIC_WARN_PER_PATH skipped entries in natural order, then a count. */
static void warn_skipped(const struct kdev_generic_options *opts, const char *res,
                         const char *path, struct skipped *sk, size_t n_sk)
{
        qsort(sk, n_sk, sizeof(*sk), skipped_cmp);
        size_t shown = 0;
        for (size_t i = 0; i < n_sk && shown < KDEV_GENERIC_WARN_PER_PATH; i++) {
                if (sk[i].msg) {
                        opts->warn(opts->warn_arg, sk[i].msg);
                        shown++;
                }
        }
        if (n_sk > shown) {
                char *msg = NULL;
                if (asprintf(&msg, "%s: %zu more entries matching %s skipped", res,
                             n_sk - shown, path) >= 0) {
                        opts->warn(opts->warn_arg, msg);
                        free(msg);
                }
        }
}

/* Expands one path glob under |root_pat| (escaped) into kept matches. */
static int expand(const struct kdev_generic_config *cfg, size_t ri, size_t gi, size_t pi,
                  const char *root_pat, size_t root_len, const struct kdev_generic_options *opts,
                  struct matches *out, struct kdev_err *err)
{
        const struct kdev_generic_path *p = &cfg->resources[ri].groups[gi].paths[pi];
        size_t plen = strlen(root_pat) + strlen(p->path) + 1;
        char *pattern = malloc(plen);
        if (!pattern)
                return kdev_err_set(err, ENOMEM, "out of memory");
        snprintf(pattern, plen, "%s%s", root_pat, p->path);

        glob_t g;
        memset(&g, 0, sizeof(g));
        int grc = glob(pattern, GLOB_NOSORT, NULL, &g);
        free(pattern);
        if (grc == GLOB_NOMATCH) {
                globfree(&g);
                return 0;
        }
        if (grc != 0) {
                globfree(&g);
                if (grc == GLOB_NOSPACE)
                        return kdev_err_set(err, ENOMEM, "out of memory");
                return kdev_err_set(err, EIO,
                                    "%s:%u:%u: generic.devices[%zu].groups[%zu].paths[%zu].path: "
                                    "cannot expand \"%s\": read error",
                                    cfg->source, p->line, p->column, ri, gi, pi, p->path);
        }
        if (g.gl_pathc > KDEV_GENERIC_MATCHES_MAX) {
                size_t n = g.gl_pathc;
                globfree(&g);
                return kdev_err_set(err, E2BIG,
                                    "%s:%u:%u: generic.devices[%zu].groups[%zu].paths[%zu].path: "
                                    "\"%s\" matches %zu entries, more than the limit of %d",
                                    cfg->source, p->line, p->column, ri, gi, pi, p->path, n,
                                    KDEV_GENERIC_MATCHES_MAX);
        }
        out->v = calloc(g.gl_pathc ? g.gl_pathc : 1, sizeof(*out->v));
        /* Warnings are only wanted when nothing is kept; collect them all until then. */
        struct skipped *sk = opts->warn ? calloc(g.gl_pathc ? g.gl_pathc : 1, sizeof(*sk)) : NULL;
        size_t n_sk = 0;
        if (!out->v || (opts->warn && !sk)) {
                free(sk);
                globfree(&g);
                matches_clear(out);
                return kdev_err_set(err, ENOMEM, "out of memory");
        }
        int rc = 0;
        for (size_t i = 0; i < g.gl_pathc; i++) {
                const char *m = g.gl_pathv[i];
                /* glob returns the pattern's root prefix unescaped: strip its length. */
                const char *named = strlen(m) >= root_len ? m + root_len : m;
                struct stat st;
                bool is_link = false, stat_ok = false;
                char *real = NULL;
                int e = 0;
                if (lstat(m, &st) < 0) {
                        e = errno; /* vanished entry */
                } else {
                        is_link = S_ISLNK(st.st_mode);
                        real = realpath(m, NULL);
                        if (!real)
                                e = errno; /* dangling symlink, loop, vanished entry */
                        else if (stat(real, &st) < 0)
                                e = errno;
                        else
                                stat_ok = true;
                }
                if (!stat_ok || !(S_ISCHR(st.st_mode) || S_ISBLK(st.st_mode) ||
                                  (S_ISREG(st.st_mode) && opts->allow_regular_files))) {
                        if (sk && out->n == 0) {
                                sk[n_sk].named = named;
                                sk[n_sk].msg = skip_message(res_name(cfg, ri), named, is_link,
                                                            real, e, stat_ok, st.st_mode);
                                n_sk++;
                        }
                        free(real);
                        continue;
                }
                struct match *mm = &out->v[out->n];
                mm->real = real;
                mm->named = strdup(named);
                out->n++;
                if (!mm->named) {
                        rc = kdev_err_set(err, ENOMEM, "out of memory");
                        break;
                }
        }
        if (rc == 0 && out->n == 0 && n_sk > 0)
                warn_skipped(opts, res_name(cfg, ri), p->path, sk, n_sk);
        for (size_t i = 0; i < n_sk; i++)
                free(sk[i].msg);
        free(sk);
        globfree(&g);
        if (rc < 0) {
                matches_clear(out);
                return rc;
        }
        qsort(out->v, out->n, sizeof(*out->v), match_cmp);
        return 0;
}

static char *container_path(const struct kdev_generic_path *p, const struct match *m)
{
        if (!p->mount_path)
                return strdup(m->named);
        size_t n = strlen(p->mount_path);
        if (n == 0 || p->mount_path[n - 1] != '/')
                return strdup(p->mount_path);
        const char *b = base_name(m->named);
        char *s = malloc(n + strlen(b) + 1);
        if (s) {
                memcpy(s, p->mount_path, n);
                strcpy(s + n, b);
        }
        return s;
}

/* Devices of one resource under construction. */
struct dev_list {
        struct kdev_device *v;
        size_t n;
        size_t *group; /* group index of each device */
        char **key;    /* NULL, or each device's key (generic_internal.h) */
        char **base;   /* NULL, or each device's ID before the group prefix */
};

static void strv_clear(char **v, size_t n)
{
        for (size_t i = 0; v && i < n; i++)
                free(v[i]);
        free(v);
}

static void dev_list_clear(struct dev_list *l)
{
        for (size_t i = 0; i < l->n; i++)
                kdev_device_clear(&l->v[i]);
        free(l->v);
        free(l->group);
        strv_clear(l->key, l->n);
        strv_clear(l->base, l->n);
        memset(l, 0, sizeof(*l));
}

/* Builds the devices of group |gi| of resource |ri| from the matches of each
 * path; appends to |l| (capacity already reserved). */
static int build_group(const struct kdev_generic_group *g, size_t gi, const struct matches *ms,
                       size_t sets, struct dev_list *l)
{
        size_t m0 = ms[0].n;
        for (size_t i = 0; i < sets; i++) {
                char base[PATH_MAX + 32];
                if (sets > m0)
                        snprintf(base, sizeof(base), "%s-%zu", base_name(ms[0].v[i % m0].named),
                                 i / m0);
                else
                        snprintf(base, sizeof(base), "%s", base_name(ms[0].v[i % m0].named));
                for (unsigned r = 0; r < g->count; r++) {
                        struct kdev_device *d = &l->v[l->n];
                        size_t at = l->n;
                        l->group[l->n] = gi;
                        l->n++;
                        d->healthy = true;
                        d->numa_node = -1;
                        if (g->count > 1) {
                                size_t len = strlen(base) + 16;
                                d->id = malloc(len);
                                if (d->id)
                                        snprintf(d->id, len, "%s::%u", base, r);
                        } else {
                                d->id = strdup(base);
                        }
                        d->specs = calloc(g->n_paths, sizeof(*d->specs));
                        if (!d->id || !d->specs)
                                return -ENOMEM;
                        if (l->key && asprintf(&l->key[at], "%zu\x1f%zu\x1f%u\x1f%s", gi, i / m0,
                                               r, ms[0].v[i % m0].named) < 0) {
                                l->key[at] = NULL;
                                return -ENOMEM;
                        }
                        if (l->base && !(l->base[at] = strdup(d->id)))
                                return -ENOMEM;
                        d->n_specs = g->n_paths;
                        for (size_t k = 0; k < g->n_paths; k++) {
                                const struct match *m = &ms[k].v[i % ms[k].n];
                                struct kdev_device_spec *s = &d->specs[k];
                                s->container_path = container_path(&g->paths[k], m);
                                s->host_path = strdup(m->real);
                                s->permissions = strdup(g->paths[k].permissions);
                                if (!s->container_path || !s->host_path || !s->permissions)
                                        return -ENOMEM;
                        }
                }
        }
        return 0;
}

struct id_ref {
        const char *id;
        size_t idx;
};

static int id_ref_cmp(const void *pa, const void *pb)
{
        const struct id_ref *a = pa, *b = pb;
        int c = strcmp(a->id, b->id);
        if (c)
                return c;
        return a->idx < b->idx ? -1 : a->idx > b->idx;
}

/* Sorted (id, index) pairs of |l|, or NULL on ENOMEM. */
static struct id_ref *sorted_ids(const struct dev_list *l)
{
        struct id_ref *v = malloc((l->n ? l->n : 1) * sizeof(*v));
        if (!v)
                return NULL;
        for (size_t i = 0; i < l->n; i++)
                v[i] = (struct id_ref){l->v[i].id, i};
        qsort(v, l->n, sizeof(*v), id_ref_cmp);
        return v;
}

/* Prefixes "g<group>-" to the IDs of groups that share an ID with another
 * group, then checks that IDs are unique, short and printable. */
static int fix_ids(const struct kdev_generic_config *cfg, size_t ri, struct dev_list *l,
                   struct kdev_err *err)
{
        const struct kdev_generic_resource *res = &cfg->resources[ri];
        struct id_ref *ids = sorted_ids(l);
        bool *prefix = calloc(res->n_groups, sizeof(*prefix));
        if (!ids || !prefix) {
                free(ids);
                free(prefix);
                return kdev_err_set(err, ENOMEM, "out of memory");
        }
        bool any = false;
        for (size_t i = 1; i < l->n; i++) {
                if (strcmp(ids[i].id, ids[i - 1].id) == 0 &&
                    l->group[ids[i].idx] != l->group[ids[i - 1].idx]) {
                        prefix[l->group[ids[i].idx]] = true;
                        prefix[l->group[ids[i - 1].idx]] = true;
                        any = true;
                }
        }
        free(ids);
        ids = NULL;
        for (size_t i = 0; any && i < l->n; i++) {
                size_t gi = l->group[i];
                if (!prefix[gi])
                        continue;
                size_t len = strlen(l->v[i].id) + 32;
                char *s = malloc(len);
                if (!s) {
                        free(prefix);
                        return kdev_err_set(err, ENOMEM, "out of memory");
                }
                snprintf(s, len, "g%zu-%s", gi, l->v[i].id);
                free(l->v[i].id);
                l->v[i].id = s;
        }
        free(prefix);

        for (size_t i = 0; i < l->n; i++) {
                const struct kdev_generic_group *g = &res->groups[l->group[i]];
                const char *id = l->v[i].id;
                if (strlen(id) > KDEV_DEVICE_ID_MAX)
                        return kdev_err_set(err, EINVAL,
                                            "%s:%u:%u: generic.devices[%zu].groups[%zu]: device "
                                            "ID \"%s\" of resource %s is longer than %d "
                                            "characters",
                                            cfg->source, g->line, g->column, ri, l->group[i], id,
                                            res->name, KDEV_DEVICE_ID_MAX);
                for (const char *p = id; *p; p++) {
                        if (*p <= ' ' || *p > '~')
                                return kdev_err_set(err, EINVAL,
                                                    "%s:%u:%u: generic.devices[%zu].groups[%zu]: "
                                                    "device ID \"%s\" of resource %s has a "
                                                    "character that is not printable ASCII",
                                                    cfg->source, g->line, g->column, ri,
                                                    l->group[i], id, res->name);
                }
        }
        ids = sorted_ids(l);
        if (!ids)
                return kdev_err_set(err, ENOMEM, "out of memory");
        for (size_t i = 1; i < l->n; i++) {
                if (strcmp(ids[i].id, ids[i - 1].id) != 0)
                        continue;
                size_t gi = l->group[ids[i].idx];
                const struct kdev_generic_group *g = &res->groups[gi];
                int rc = kdev_err_set(err, EINVAL,
                                      "%s:%u:%u: generic.devices[%zu].groups[%zu]: device ID "
                                      "\"%s\" of resource %s is not unique (matches of the "
                                      "first path must have distinct basenames)",
                                      cfg->source, g->line, g->column, ri, gi, ids[i].id,
                                      res->name);
                free(ids);
                return rc;
        }
        free(ids);
        return 0;
}

/* The physical devices of resource |out| (devices of |l|, groups of |res|):
 * one per set, "<resource>/<device ID without the replica suffix>", that the
 * set's |count| devices point to; appended to |set|. */
static int add_physical(struct kdev_resource_set *set, const struct kdev_generic_resource *res,
                        const struct dev_list *l, struct kdev_resource *out, struct kdev_err *err)
{
        struct kdev_physical *p = NULL;
        for (size_t i = 0; i < out->n_devices; i++) {
                struct kdev_device *d = &out->devices[i];
                unsigned count = res->groups[l->group[i]].count;
                size_t len = strlen(d->id);
                if (count > 1) {
                        const char *sep = strrchr(d->id, ':');
                        len = sep && sep > d->id + 1 ? (size_t)(sep - 1 - d->id) : len;
                }
                /* the replicas of a set are adjacent (build_group) */
                if (!p || count == 1 || strncmp(d->id, p->id + strlen(res->name) + 1, len) != 0 ||
                    p->id[strlen(res->name) + 1 + len] != 0) {
                        char *id = NULL;
                        if (asprintf(&id, "%s/%.*s", res->name, (int)len, d->id) < 0)
                                return kdev_err_set(err, ENOMEM, "out of memory");
                        p = kdev_physical_add(set, id, d->numa_node, NULL, NULL);
                        free(id);
                        if (!p)
                                return kdev_err_set(err, ENOMEM, "out of memory");
                }
                d->physical = p;
        }
        return 0;
}

/* Discovers resource |ri| into |out|, its physical devices appended to
 * |set|. |keys| (may be NULL) gets the keys, bases and groups of the
 * devices (generic_internal.h). */
static int discover_resource(const struct kdev_generic_config *cfg, size_t ri,
                             const char *root_pat, size_t root_len,
                             const struct kdev_generic_options *opts, struct kdev_resource *out,
                             struct kdev_resource_set *set, struct kdev_generic_scan *keys,
                             struct kdev_err *err)
{
        const struct kdev_generic_resource *res = &cfg->resources[ri];
        struct matches *ms = NULL;
        size_t *sets = calloc(res->n_groups, sizeof(*sets));
        struct matches **all = calloc(res->n_groups, sizeof(*all));
        struct dev_list l = {0};
        int rc = 0;
        size_t total = 0;

        if (!sets || !all) {
                rc = kdev_err_set(err, ENOMEM, "out of memory");
                goto out;
        }
        for (size_t gi = 0; gi < res->n_groups; gi++) {
                const struct kdev_generic_group *g = &res->groups[gi];
                ms = calloc(g->n_paths, sizeof(*ms));
                if (!ms) {
                        rc = kdev_err_set(err, ENOMEM, "out of memory");
                        goto out;
                }
                all[gi] = ms;
                size_t n_sets = SIZE_MAX;
                for (size_t pi = 0; pi < g->n_paths; pi++) {
                        rc = expand(cfg, ri, gi, pi, root_pat, root_len, opts, &ms[pi], err);
                        if (rc < 0)
                                goto out;
                        size_t s = ms[pi].n * g->paths[pi].limit;
                        if (s < n_sets)
                                n_sets = s;
                }
                sets[gi] = n_sets;
                total += n_sets * g->count;
                if (total > KDEV_GENERIC_DEVICES_MAX) {
                        rc = kdev_err_set(err, E2BIG,
                                          "%s:%u:%u: generic.devices[%zu]: resource %s has more "
                                          "than %d devices",
                                          cfg->source, res->line, res->column, ri, res->name,
                                          KDEV_GENERIC_DEVICES_MAX);
                        goto out;
                }
        }
        if (total > 0) {
                l.v = calloc(total, sizeof(*l.v));
                l.group = calloc(total, sizeof(*l.group));
                if (keys) {
                        l.key = calloc(total, sizeof(*l.key));
                        l.base = calloc(total, sizeof(*l.base));
                }
                if (!l.v || !l.group || (keys && (!l.key || !l.base))) {
                        rc = kdev_err_set(err, ENOMEM, "out of memory");
                        goto out;
                }
        }
        for (size_t gi = 0; gi < res->n_groups; gi++) {
                if (sets[gi] == 0)
                        continue;
                rc = build_group(&res->groups[gi], gi, all[gi], sets[gi], &l);
                if (rc < 0) {
                        rc = kdev_err_set(err, ENOMEM, "out of memory");
                        goto out;
                }
        }
        rc = fix_ids(cfg, ri, &l, err);
        if (rc < 0)
                goto out;
        out->name = strdup(res->name);
        if (!out->name) {
                rc = kdev_err_set(err, ENOMEM, "out of memory");
                goto out;
        }
        out->devices = l.v;
        out->n_devices = l.n;
        l.v = NULL;
        rc = add_physical(set, res, &l, out, err);
        if (keys && rc == 0) {
                keys->keys = l.key;
                keys->bases = l.base;
                keys->groups = l.group;
                l.group = NULL;
        } else {
                strv_clear(l.key, l.n);
                strv_clear(l.base, l.n);
        }
        l.key = l.base = NULL;
        l.n = 0;
        if (rc < 0)
                goto out;
        if (kdev_resource_index(out) < 0)
                rc = kdev_err_set(err, ENOMEM, "out of memory");
out:
        dev_list_clear(&l);
        for (size_t gi = 0; all && gi < res->n_groups; gi++) {
                if (!all[gi])
                        continue;
                for (size_t pi = 0; pi < res->groups[gi].n_paths; pi++)
                        matches_clear(&all[gi][pi]);
                free(all[gi]);
        }
        free(all);
        free(sets);
        return rc;
}

int kdev_generic_discover(const struct kdev_generic_config *cfg,
                          const struct kdev_generic_options *opts, struct kdev_resource_set *out,
                          struct kdev_err *err)
{
        static const struct kdev_generic_options defaults = {NULL, false, NULL, NULL};
        if (!cfg || !out)
                return kdev_err_set(err, EINVAL, "kdev_generic_discover: invalid arguments");
        if (!opts)
                opts = &defaults;
        const char *root = opts->root ? opts->root : "";
        if (root[0]) {
                struct stat st;
                if (stat(root, &st) < 0)
                        return kdev_err_set(err, errno, "root \"%s\": %s", root, strerror(errno));
                if (!S_ISDIR(st.st_mode))
                        return kdev_err_set(err, ENOTDIR, "root \"%s\": %s", root,
                                            strerror(ENOTDIR));
        }
        for (size_t i = 0; i < cfg->n_resources; i++) {
                for (size_t j = 0; j < out->n_resources; j++) {
                        if (strcmp(out->resources[j].name, cfg->resources[i].name) == 0)
                                return kdev_err_set(err, EEXIST,
                                                    "resource %s is already defined",
                                                    cfg->resources[i].name);
                }
        }
        char *root_pat = escape_root(root);
        if (!root_pat)
                return kdev_err_set(err, ENOMEM, "out of memory");
        /* Length of the unescaped root prefix that glob puts in front of matches. */
        size_t root_len = strlen(root);
        while (root_len > 0 && root[root_len - 1] == '/')
                root_len--;

        size_t n_old = out->n_resources, n_old_physical = out->n_physical;
        struct kdev_resource *v =
                realloc(out->resources, (n_old + cfg->n_resources + 1) * sizeof(*v));
        if (!v) {
                free(root_pat);
                return kdev_err_set(err, ENOMEM, "out of memory");
        }
        out->resources = v;
        int rc = 0;
        size_t done = 0;
        for (; done < cfg->n_resources; done++) {
                struct kdev_resource *r = &v[n_old + done];
                memset(r, 0, sizeof(*r));
                rc = discover_resource(cfg, done, root_pat, root_len, opts, r, out, NULL, err);
                if (rc < 0) {
                        kdev_resource_clear(r);
                        break;
                }
        }
        free(root_pat);
        if (rc == 0) {
                out->n_resources = n_old + cfg->n_resources;
                rc = kdev_resource_set_link(out, err);
                if (rc == 0)
                        return 0;
                out->n_resources = n_old;
        }
        for (size_t i = 0; i < done; i++)
                kdev_resource_clear(&v[n_old + i]);
        kdev_physical_truncate(out, n_old_physical);
        if (out->n_physical)
                kdev_resource_set_link(out, NULL);
        return rc;
}

void kdev_generic_scan_clear(struct kdev_generic_scan *s)
{
        if (!s)
                return;
        size_t n = s->set.n_resources ? s->set.resources[0].n_devices : 0;
        strv_clear(s->keys, n);
        strv_clear(s->bases, n);
        free(s->groups);
        kdev_resource_set_clear(&s->set);
        memset(s, 0, sizeof(*s));
}

int kdev_generic_scan_resource(const struct kdev_generic_config *cfg, size_t ri,
                               const struct kdev_generic_options *opts,
                               struct kdev_generic_scan *out, struct kdev_err *err)
{
        static const struct kdev_generic_options defaults = {NULL, false, NULL, NULL};
        memset(out, 0, sizeof(*out));
        if (!opts)
                opts = &defaults;
        const char *root = opts->root ? opts->root : "";
        char *root_pat = escape_root(root);
        out->set.resources = calloc(1, sizeof(*out->set.resources));
        if (!root_pat || !out->set.resources) {
                free(root_pat);
                free(out->set.resources);
                out->set.resources = NULL;
                return kdev_err_set(err, ENOMEM, "out of memory");
        }
        size_t root_len = strlen(root);
        while (root_len > 0 && root[root_len - 1] == '/')
                root_len--;
        out->set.n_resources = 1;
        int rc = discover_resource(cfg, ri, root_pat, root_len, opts, &out->set.resources[0],
                                   &out->set, out, err);
        free(root_pat);
        if (rc == 0)
                rc = kdev_resource_set_link(&out->set, err);
        if (rc < 0)
                kdev_generic_scan_clear(out);
        return rc;
}
