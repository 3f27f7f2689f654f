/* Isolated replicas: kdev's `isolation` section and the shares of a replica
 * (see isolation.h). */
#include "nvidia/isolation.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config/yamlcfg.h"
#include "nvidia/config_internal.h"
#include "nvidia/devinfo.h"
#include "nvidia/nvidia_internal.h"
#include "share/region.h"

#define ISOLATION_RESOURCES_MAX 256

/* --- the shares ------------------------------------------------------------------ */

struct kdev_nvidia_replica_share kdev_nvidia_replica_share(const struct kdev_nvidia_isolated_resource *iso,
                                                           unsigned long long total,
                                                           unsigned replicas)
{
        struct kdev_nvidia_replica_share s = {0, 0};
        if (replicas == 0)
                replicas = 1;
        s.memory = iso->memory ? iso->memory : total / replicas;
        s.compute = iso->compute ? iso->compute : 100 / replicas;
        if (s.compute == 0)
                s.compute = 1;
        return s;
}

int kdev_nvidia_share_limits(const struct kdev_nvidia_isolated_resource *iso, unsigned replicas,
                             const struct kdev_nvidia_devinfo *const *infos, size_t n,
                             struct kdev_nvidia_share_limit **out, size_t *n_out,
                             struct kdev_err *err)
{
        *out = NULL;
        *n_out = 0;
        struct kdev_nvidia_share_limit *v = calloc(n ? n : 1, sizeof(*v));
        unsigned *count = calloc(n ? n : 1, sizeof(*count));
        const struct kdev_nvidia_devinfo **first = calloc(n ? n : 1, sizeof(*first));
        if (!v || !count || !first) {
                free(v);
                free(count);
                free(first);
                return kdev_err_set(err, ENOMEM, "out of memory");
        }
        size_t k = 0;
        for (size_t i = 0; i < n; i++) {
                size_t j = 0;
                while (j < k && strcmp(first[j]->uuid, infos[i]->uuid) != 0)
                        j++;
                if (j == k)
                        first[k++] = infos[i];
                count[j]++;
        }
        int rc = 0;
        for (size_t j = 0; j < k; j++) {
                const struct kdev_nvidia_devinfo *d = first[j];
                struct kdev_nvidia_replica_share s = kdev_nvidia_replica_share(iso, d->memory,
                                                                               replicas);
                if (s.memory == 0) {
                        rc = kdev_err_set(err, EINVAL,
                                          "isolation: the memory of %s is unknown; an isolated "
                                          "replica needs it (or an explicit memory size)",
                                          d->uuid);
                        break;
                }
                snprintf(v[j].uuid, sizeof(v[j].uuid), "%s", d->uuid);
                unsigned long long mem = s.memory * count[j];
                if (mem / count[j] != s.memory || (d->memory && mem > d->memory))
                        mem = d->memory ? d->memory : s.memory;
                v[j].memory = mem;
                unsigned c = s.compute * count[j];
                v[j].compute = c > 100 || c / count[j] != s.compute ? 100 : c;
        }
        free(count);
        free(first);
        if (rc < 0) {
                free(v);
                return rc;
        }
        *out = v;
        *n_out = k;
        return 0;
}

char *kdev_nvidia_share_limits_text(const char *const *comments, size_t n_comments,
                                    const struct kdev_nvidia_share_limit *limits,
                                    size_t n_limits, const char *policy)
{
        char *buf = NULL;
        size_t len = 0;
        FILE *f = open_memstream(&buf, &len);
        if (!f)
                return NULL;
        for (size_t i = 0; i < n_comments; i++)
                fprintf(f, "# %s\n", comments[i]);
        for (size_t i = 0; i < n_limits; i++)
                fprintf(f, "%s %llu %u\n", limits[i].uuid, limits[i].memory, limits[i].compute);
        if (policy)
                fprintf(f, "policy %s\n", policy);
        if (fclose(f) != 0) {
                free(buf);
                return NULL;
        }
        return buf;
}

char *kdev_nvidia_limits_text(const char *resource, const char *const *ids, size_t n_ids,
                              const struct kdev_nvidia_share_limit *limits, size_t n_limits,
                              const char *policy)
{
        char **comments = calloc(n_ids + 1, sizeof(*comments));
        char *text = NULL;
        size_t n = 0;

        if (!comments)
                return NULL;
        if (asprintf(&comments[n], "kdev-plugin: isolated replicas of %s", resource) < 0)
                goto out;
        n++;
        for (size_t i = 0; i < n_ids; i++, n++)
                if (asprintf(&comments[n], "device %s", ids[i]) < 0)
                        goto out;
        text = kdev_nvidia_share_limits_text((const char *const *)comments, n, limits, n_limits,
                                             policy);
out:
        for (size_t i = 0; i < n; i++)
                free(comments[i]);
        free(comments);
        return text;
}

int kdev_nvidia_parse_memory(const char *v, unsigned long long *bytes, struct kdev_err *err)
{
        static const struct {
                const char *suffix;
                unsigned long long mult;
        } units[] = {
                {"", 1},
                {"Ki", 1ull << 10},
                {"Mi", 1ull << 20},
                {"Gi", 1ull << 30},
                {"Ti", 1ull << 40},
                {"Pi", 1ull << 50},
                {"k", 1000ull},
                {"M", 1000ull * 1000},
                {"G", 1000ull * 1000 * 1000},
                {"T", 1000ull * 1000 * 1000 * 1000},
                {"P", 1000ull * 1000 * 1000 * 1000 * 1000},
        };
        const char *p = v;
        unsigned long long x = 0;
        bool ok = *p >= '0' && *p <= '9';
        while (ok && *p >= '0' && *p <= '9') {
                unsigned d = (unsigned)(*p++ - '0');
                if (x > (~0ull - d) / 10)
                        ok = false;
                else
                        x = x * 10 + d;
        }
        size_t u = 0;
        while (ok && u < sizeof(units) / sizeof(units[0]) && strcmp(p, units[u].suffix) != 0)
                u++;
        ok = ok && u < sizeof(units) / sizeof(units[0]) && x > 0 &&
             x <= (1ull << 63) / units[u].mult;
        if (!ok)
                return kdev_err_set(err, EINVAL,
                                    "must be a size in bytes (e.g. 10Gi, 512Mi, 20G or "
                                    "1073741824), got \"%s\"",
                                    v);
        *bytes = x * units[u].mult;
        return 0;
}

const struct kdev_nvidia_isolated_resource *kdev_nvidia_isolation_find(const struct kdev_nvidia_config *cfg,
                                                                       const char *name)
{
        for (size_t i = 0; cfg->isolation.present && i < cfg->isolation.n_resources; i++) {
                if (strcmp(cfg->isolation.resources[i].name, name) == 0)
                        return &cfg->isolation.resources[i];
        }
        return NULL;
}

/* The name sharing.timeSlicing entry |e| advertises its replicas under
 * (sharing.h): `rename`, else "<name>.shared" with renameByDefault, else
 * `name`. Into |buf|. */
static const char *ts_target(const struct kdev_nvidia_replicated *ts,
                             const struct kdev_nvidia_replicated_resource *e, char *buf,
                             size_t size)
{
        if (e->rename)
                return e->rename;
        if (ts->rename_by_default) {
                snprintf(buf, size, "%s.shared", e->name);
                return buf;
        }
        return e->name;
}

const struct kdev_nvidia_replicated_resource *kdev_nvidia_time_slicing_entry(const struct kdev_nvidia_config *cfg,
                                                                             const char *name)
{
        const struct kdev_nvidia_replicated *ts = &cfg->time_slicing;
        if (cfg->mps.present) /* sharing.mps is applied instead (config.h) */
                return NULL;
        for (size_t i = 0; ts->present && i < ts->n_resources; i++) {
                char buf[512];
                if (strcmp(ts_target(ts, &ts->resources[i], buf, sizeof(buf)), name) == 0)
                        return &ts->resources[i];
        }
        return NULL;
}

unsigned kdev_nvidia_time_slicing_replicas(const struct kdev_nvidia_config *cfg, const char *name)
{
        const struct kdev_nvidia_replicated_resource *e = kdev_nvidia_time_slicing_entry(cfg, name);
        return e ? e->replicas : 0;
}

int kdev_nvidia_isolation_describe(const struct kdev_resource *r, char *buf, size_t size)
{
        if (size)
                buf[0] = '\0';
        if (r->ops != &kdev_nvidia_resource_ops || !r->ops_data ||
            !((const struct kdev_nvidia_rdata *)r->ops_data)->share || r->n_devices == 0)
                return 0;
        const struct kdev_nvidia_share_rdata *sh =
                ((const struct kdev_nvidia_rdata *)r->ops_data)->share;
        const struct kdev_nvidia_devinfo *first = r->devices[0].data;
        struct kdev_nvidia_replica_share s0 =
                kdev_nvidia_replica_share(&sh->iso, first->memory, sh->replicas);
        bool same = true;
        for (size_t i = 1; i < r->n_devices && same; i++) {
                const struct kdev_nvidia_devinfo *d = r->devices[i].data;
                same = kdev_nvidia_replica_share(&sh->iso, d->memory, sh->replicas).memory ==
                       s0.memory;
        }
        char mem[64];
        if (s0.memory)
                snprintf(mem, sizeof(mem), "%llu bytes (%llu MiB)", s0.memory, s0.memory >> 20);
        else
                snprintf(mem, sizeof(mem), "unknown memory");
        if (same)
                snprintf(buf, size, "isolated: one replica = %s and %u%% of its GPU, on every GPU",
                         mem, s0.compute);
        else
                snprintf(buf, size,
                         "isolated: one replica = %s and %u%% of %s (the first; sizes differ)",
                         mem, s0.compute, first->uuid);
        return 1;
}

/* --- the config section ---------------------------------------------------------- */

void kdev_nvcfg_isolation_clear(struct kdev_nvidia_isolation *iso)
{
        for (size_t i = 0; iso->resources && i < iso->n_resources; i++) {
                free(iso->resources[i].name);
                free(iso->resources[i].policy);
        }
        free(iso->resources);
        free(iso->file);
        memset(iso, 0, sizeof(*iso));
}

static int read_name(struct kdev_ycfg *c, yaml_node_t *node, void *obj)
{
        struct kdev_nvidia_isolated_resource *r = obj;
        r->line = kdev_ycfg_line(node);
        r->column = kdev_ycfg_column(node);
        return kdev_nvcfg_read_resource_name(c, node, &r->name);
}

static int read_memory(struct kdev_ycfg *c, yaml_node_t *node, void *obj)
{
        char *s = NULL;
        int rc = kdev_ycfg_string(c, node, &s);
        if (rc < 0)
                return rc;
        struct kdev_err e = {0};
        rc = kdev_nvidia_parse_memory(s, &((struct kdev_nvidia_isolated_resource *)obj)->memory,
                                      &e);
        free(s);
        return rc < 0 ? kdev_ycfg_fail(c, node, "%s", e.msg) : 0;
}

static int read_compute(struct kdev_ycfg *c, yaml_node_t *node, void *obj)
{
        char *s = NULL;
        int rc = kdev_ycfg_string(c, node, &s);
        if (rc < 0)
                return rc;
        size_t n = strlen(s);
        if (n > 1 && s[n - 1] == '%')
                s[--n] = '\0';
        char msg[KDEV_NVCFG_MSG_MAX];
        unsigned v = 0;
        rc = kdev_nvcfg_parse_uint(s, 1, 100, &v, msg);
        free(s);
        if (rc < 0)
                return kdev_ycfg_fail(c, node, "a percentage of the GPU %s", msg);
        ((struct kdev_nvidia_isolated_resource *)obj)->compute = v;
        return 0;
}

static int read_policy(struct kdev_ycfg *c, yaml_node_t *node, void *obj)
{
        struct kdev_nvidia_isolated_resource *r = obj;
        char *s = NULL;
        int rc = kdev_ycfg_string(c, node, &s);
        if (rc < 0)
                return rc;
        enum kdev_share_policy p;
        if (kdev_share_policy_parse(s, &p) != 0) {
                rc = kdev_ycfg_fail(c, node,
                                    "must be a policy of libkdev-share.so ("
                                    KDEV_SHARE_POLICY_LIST "), got \"%.64s\"",
                                    s);
                free(s);
                return rc;
        }
        free(r->policy);
        r->policy = s;
        return 0;
}

static int read_preload(struct kdev_ycfg *c, yaml_node_t *node, void *obj)
{
        struct kdev_nvidia_isolated_resource *r = obj;
        char *s = NULL;
        int rc = kdev_ycfg_string(c, node, &s);
        if (rc < 0)
                return rc;
        if (strcmp(s, "file") == 0)
                r->preload = KDEV_NVIDIA_PRELOAD_FILE;
        else if (strcmp(s, "env") == 0)
                r->preload = KDEV_NVIDIA_PRELOAD_ENV;
        else
                rc = kdev_ycfg_fail(c, node, "must be file or env, got \"%s\"", s);
        free(s);
        return rc;
}

static const struct kdev_ycfg_field entry_fields[] = {
        {"name", true, read_name},
        {"memory", false, read_memory},
        {"compute", false, read_compute},
        {"policy", false, read_policy},
        {"preload", false, read_preload},
};

static int read_entry(struct kdev_ycfg *c, yaml_node_t *node, void *obj)
{
        return kdev_ycfg_mapping(c, node, entry_fields,
                                 sizeof(entry_fields) / sizeof(entry_fields[0]), obj);
}

static int read_resources(struct kdev_ycfg *c, yaml_node_t *node, void *obj)
{
        struct kdev_nvidia_isolation *iso = obj;
        int rc = kdev_ycfg_list(c, node, 1, ISOLATION_RESOURCES_MAX, sizeof(*iso->resources),
                                (void **)&iso->resources, &iso->n_resources, read_entry);
        if (rc < 0)
                return rc;
        for (size_t j = 1; j < iso->n_resources; j++) {
                for (size_t i = 0; i < j; i++) {
                        if (strcmp(iso->resources[i].name, iso->resources[j].name) != 0)
                                continue;
                        return kdev_ycfg_fail(c, kdev_nvcfg_item_name(c, node, j),
                                              "%s is already isolated by resources[%zu]",
                                              iso->resources[j].name, i);
                }
        }
        return 0;
}

static const struct kdev_ycfg_field isolation_fields[] = {
        {"resources", true, read_resources},
};

int kdev_nvcfg_read_isolation(struct kdev_ycfg *c, yaml_node_t *node, void *obj)
{
        struct kdev_nvidia_config *cfg = obj;
        struct kdev_nvidia_isolation *iso = &cfg->isolation;
        cfg->file_sections = true;
        kdev_nvcfg_isolation_clear(iso);
        iso->present = true;
        if (!(iso->file = strdup(c->file ? c->file : "<config>")))
                return kdev_err_set(c->err, ENOMEM, "out of memory");
        return kdev_ycfg_mapping(c, node, isolation_fields,
                                 sizeof(isolation_fields) / sizeof(isolation_fields[0]), iso);
}

int kdev_nvcfg_isolation_check(const struct kdev_nvidia_config *cfg, struct kdev_err *err)
{
        const struct kdev_nvidia_isolation *iso = &cfg->isolation;
        for (size_t i = 0; iso->present && i < iso->n_resources; i++) {
                const struct kdev_nvidia_isolated_resource *r = &iso->resources[i];
                if (kdev_nvidia_time_slicing_replicas(cfg, r->name) > 0)
                        continue;
                return kdev_err_set(err, EINVAL,
                                    "%s:%u:%u: isolation.resources[%zu].name: %s is not "
                                    "time-sliced (no sharing.timeSlicing.resources entry "
                                    "advertises it)",
                                    iso->file, r->line, r->column, i, r->name);
        }
        return 0;
}
