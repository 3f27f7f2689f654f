/* The DRA structured allocator: pools, the depth-first search, the
 * allocation result and the explanation of a failure. See allocator.h. */
#include "sched/allocator.h"

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cel/cel.h"
#include "sched/sched_internal.h"

#define MAX_EXPLAIN 1024

struct counter {
        const char *name;
        struct kdev_cel_quantity avail; /* sharedCounters minus allocated devices */
        struct kdev_cel_quantity used;  /* picked in this call */
};

struct cset {
        const char *name;
        struct counter *c;
        size_t n;
};

struct pool {
        const char *driver, *name;
        int64_t gen;
        bool incomplete, invalid;
        char why[256];
        struct cset *sets;
        size_t n_sets;
};

struct consume {
        struct counter *c;
        struct kdev_cel_quantity v;
};

struct dev {
        const char *name;
        struct pool *pool;
        const json_t *json;
        struct kdev_cel_device cel;
        struct kdev_cel_attribute *attrs;
        struct kdev_cel_capacity *caps;
        const json_t **cap_json;   /* the capacity entries, for requestPolicy */
        bool *cap_binary;          /* value written with a binary suffix */
        struct kdev_cel_quantity *cap_used;  /* consumed by other claims' shares */
        struct kdev_cel_quantity *cap_alloc; /* consumed by this call's shares */
        struct consume *cons;
        size_t n_cons;
        bool node_local;
        bool in_use;    /* allocated exclusively to another claim */
        bool charged;   /* its counters are already charged (allocated share) */
        unsigned picked; /* exclusive or admin picks in this call */
        unsigned shares; /* share picks in this call */
        const json_t *taints;
};

struct cls {
        const char *name;
        const json_t *json;
        struct kdev_cel_program **sel;
        const char **expr;
        size_t n_sel;
};

struct kdev_sched {
        char *node;
        json_t *labels, *slices, *classes, *allocated;
        struct pool *pools;
        size_t n_pools;
        struct dev *devs;
        size_t n_devs;
        struct cls *classes_v;
        size_t n_classes;
        unsigned long long max_steps;
};

/* --- a claim in the making ------------------------------------------------ */

struct alt {
        char *name;            /* "req" or "req/sub" */
        const char *class_name;
        struct cls *cls;
        struct kdev_cel_program **sel;
        const char **expr;
        size_t n_sel;
        bool all, admin;
        int64_t count;
        const json_t *cap_req;     /* capacity.requests or NULL */
        const json_t *tolerations; /* or NULL */
        signed char *cache;        /* per device: -1 unknown, 0 no, 1 yes */
        int *rej_sel;              /* per device: -1 class, i request selector #i */
};

struct req {
        const char *name;
        struct alt *alts;
        size_t n_alts;
        size_t chosen;
};

struct constraint {
        const json_t *requests; /* array or NULL: all */
        const char *attr;
        bool distinct;
        const struct kdev_cel_attribute *value;
        size_t n;
};

struct result {
        size_t req, alt, dev;
        bool share;
        struct kdev_cel_quantity *consumed; /* per capacity of the device, share only */
        bool *set_value;                    /* per constraint: this result fixed its value */
};

struct claim {
        struct kdev_sched *s;
        const char *ns, *name;
        struct req *reqs;
        size_t n_reqs;
        struct constraint *cons;
        size_t n_cons;
        struct result res[KDEV_SCHED_MAX_RESULTS];
        size_t n_res;
        struct kdev_err *err;
        uint64_t steps; /* candidate checks of the search, against KDEV_SCHED_MAX_STEPS */
};

/* --- small helpers --------------------------------------------------------- */

static const char *jstr(const json_t *o, const char *k)
{
        return json_string_value(json_object_get(o, k));
}

static const json_t *jpath(const json_t *o, const char *a, const char *b)
{
        return json_object_get(json_object_get(o, a), b);
}

static void split_name(const char *q, const char **domain, char **name)
{
        const char *slash = strchr(q, '/');
        if (slash) {
                *domain = strndup(q, (size_t)(slash - q));
                *name = strdup(slash + 1);
        } else {
                *domain = NULL;
                *name = strdup(q);
        }
}

static int parse_q(const json_t *j, struct kdev_cel_quantity *q, bool *binary)
{
        const char *s = json_string_value(j);
        if (!s)
                return -EINVAL;
        if (binary)
                *binary = strlen(s) >= 2 && s[strlen(s) - 1] == 'i';
        return kdev_cel_quantity_parse(s, q, NULL);
}

/* --- pools ----------------------------------------------------------------- */

static bool labels_match_expr(const json_t *labels, const json_t *e)
{
        const char *key = jstr(e, "key"), *op = jstr(e, "operator");
        const json_t *vals = json_object_get(e, "values");
        const char *have = key ? jstr(labels, key) : NULL;
        if (!key || !op)
                return false;
        if (strcmp(op, "Exists") == 0)
                return have != NULL;
        if (strcmp(op, "DoesNotExist") == 0)
                return have == NULL;
        bool in = false;
        size_t i;
        json_t *v;
        json_array_foreach(vals, i, v) if (have && json_string_value(v) &&
                                           strcmp(json_string_value(v), have) == 0) in = true;
        if (strcmp(op, "In") == 0)
                return in;
        if (strcmp(op, "NotIn") == 0)
                return !in;
        return false;
}

/* core/v1 NodeSelector: terms ORed, expressions and fields ANDed. */
static bool node_selector_match(const struct kdev_sched *s, const json_t *sel)
{
        size_t i, j;
        json_t *t, *e;
        json_array_foreach(json_object_get(sel, "nodeSelectorTerms"), i, t) {
                bool ok = true;
                json_array_foreach(json_object_get(t, "matchExpressions"), j, e) {
                        if (!labels_match_expr(s->labels, e))
                                ok = false;
                }
                json_array_foreach(json_object_get(t, "matchFields"), j, e) {
                        json_t *fake = json_pack("{s:s}", "metadata.name", s->node);
                        if (!fake || !labels_match_expr(fake, e))
                                ok = false;
                        json_decref(fake);
                }
                if (ok)
                        return true;
        }
        return false;
}

static bool dev_relevant(const struct kdev_sched *s, const json_t *d, bool *local)
{
        const char *nn = jstr(d, "nodeName");
        *local = false;
        if (nn) {
                *local = strcmp(nn, s->node) == 0;
                return *local;
        }
        if (json_is_true(json_object_get(d, "allNodes")))
                return true;
        const json_t *sel = json_object_get(d, "nodeSelector");
        return sel && node_selector_match(s, sel);
}

static struct pool *find_pool(struct kdev_sched *s, const char *driver, const char *name)
{
        for (size_t i = 0; i < s->n_pools; i++)
                if (strcmp(s->pools[i].driver, driver) == 0 && strcmp(s->pools[i].name, name) == 0)
                        return &s->pools[i];
        return NULL;
}

static int cmp_pool(const void *a, const void *b)
{
        const struct pool *x = a, *y = b;
        int c = strcmp(x->driver, y->driver);
        return c ? c : strcmp(x->name, y->name);
}

static int cmp_slice(const void *a, const void *b)
{
        const json_t *x = *(json_t *const *)a, *y = *(json_t *const *)b;
        const char *nx = jstr(json_object_get(x, "metadata"), "name");
        const char *ny = jstr(json_object_get(y, "metadata"), "name");
        return strcmp(nx ? nx : "", ny ? ny : "");
}

static struct counter *find_counter(struct pool *p, const char *set, const char *name)
{
        for (size_t i = 0; i < p->n_sets; i++) {
                if (strcmp(p->sets[i].name, set) != 0)
                        continue;
                for (size_t j = 0; j < p->sets[i].n; j++)
                        if (strcmp(p->sets[i].c[j].name, name) == 0)
                                return &p->sets[i].c[j];
        }
        return NULL;
}

static bool has_set(struct pool *p, const char *set)
{
        for (size_t i = 0; i < p->n_sets; i++)
                if (strcmp(p->sets[i].name, set) == 0)
                        return true;
        return false;
}

static int add_sets(struct pool *p, const json_t *sc)
{
        size_t i;
        json_t *set;
        json_array_foreach(sc, i, set) {
                const char *name = jstr(set, "name");
                if (!name)
                        continue;
                if (has_set(p, name)) {
                        p->invalid = true;
                        snprintf(p->why, sizeof(p->why), "duplicate counter set name %s", name);
                        continue;
                }
                struct cset *n = realloc(p->sets, (p->n_sets + 1) * sizeof(*n));
                if (!n)
                        return -ENOMEM;
                p->sets = n;
                struct cset *cs = &p->sets[p->n_sets++];
                const json_t *ctr = json_object_get(set, "counters");
                cs->name = name;
                cs->n = 0;
                cs->c = calloc(json_object_size(ctr) + 1, sizeof(*cs->c));
                if (!cs->c)
                        return -ENOMEM;
                const char *k;
                json_t *v;
                json_object_foreach((json_t *)ctr, k, v) {
                        struct counter *c = &cs->c[cs->n];
                        c->name = k;
                        if (parse_q(json_object_get(v, "value"), &c->avail, NULL) < 0) {
                                p->invalid = true;
                                snprintf(p->why, sizeof(p->why), "counter %s of set %s: bad value",
                                         k, name);
                                continue;
                        }
                        cs->n++;
                }
        }
        return 0;
}

static int add_device(struct kdev_sched *s, struct pool *p, const json_t *d, bool local,
                      size_t *cap)
{
        const char *name = jstr(d, "name");
        if (!name)
                return 0;
        for (size_t i = 0; i < s->n_devs; i++)
                if (s->devs[i].pool == p && strcmp(s->devs[i].name, name) == 0) {
                        p->invalid = true;
                        snprintf(p->why, sizeof(p->why), "duplicate device name %s", name);
                        return 0;
                }
        if (s->n_devs == *cap) {
                size_t nc = *cap ? *cap * 2 : 64;
                struct dev *n = realloc(s->devs, nc * sizeof(*n));
                if (!n)
                        return -ENOMEM;
                s->devs = n;
                *cap = nc;
        }
        struct dev *v = &s->devs[s->n_devs];
        memset(v, 0, sizeof(*v));
        v->name = name;
        v->pool = p;
        v->json = d;
        v->node_local = local;
        v->taints = json_object_get(d, "taints");
        v->cel.driver = p->driver;
        v->cel.allow_multiple_allocations = json_is_true(json_object_get(d, "allowMultipleAllocations"));
        s->n_devs++;

        const json_t *attrs = json_object_get(d, "attributes");
        v->attrs = calloc(json_object_size(attrs) + 1, sizeof(*v->attrs));
        const json_t *caps = json_object_get(d, "capacity");
        size_t nc = json_object_size(caps) + 1;
        v->caps = calloc(nc, sizeof(*v->caps));
        v->cap_json = calloc(nc, sizeof(*v->cap_json));
        v->cap_binary = calloc(nc, sizeof(*v->cap_binary));
        v->cap_used = calloc(nc, sizeof(*v->cap_used));
        v->cap_alloc = calloc(nc, sizeof(*v->cap_alloc));
        if (!v->attrs || !v->caps || !v->cap_json || !v->cap_binary || !v->cap_used || !v->cap_alloc)
                return -ENOMEM;
        const char *k;
        json_t *a;
        json_object_foreach((json_t *)attrs, k, a) {
                struct kdev_cel_attribute *at = &v->attrs[v->cel.n_attributes];
                char *nm;
                split_name(k, &at->domain, &nm);
                at->name = nm;
                json_t *x;
                if ((x = json_object_get(a, "int")) && json_is_integer(x)) {
                        at->type = KDEV_CEL_ATTR_INT;
                        at->i = json_integer_value(x);
                } else if ((x = json_object_get(a, "bool")) && json_is_boolean(x)) {
                        at->type = KDEV_CEL_ATTR_BOOL;
                        at->b = json_is_true(x);
                } else if ((x = json_object_get(a, "string")) && json_is_string(x)) {
                        at->type = KDEV_CEL_ATTR_STRING;
                        at->s = json_string_value(x);
                } else if ((x = json_object_get(a, "version")) && json_is_string(x)) {
                        at->type = KDEV_CEL_ATTR_VERSION;
                        at->s = json_string_value(x);
                } else {
                        free((char *)at->domain);
                        free(nm);
                        memset(at, 0, sizeof(*at));
                        continue;
                }
                v->cel.n_attributes++;
        }
        v->cel.attributes = v->attrs;
        json_object_foreach((json_t *)caps, k, a) {
                size_t i = v->cel.n_capacity;
                struct kdev_cel_capacity *c = &v->caps[i];
                char *nm;
                if (parse_q(json_object_get(a, "value"), &c->value, &v->cap_binary[i]) < 0)
                        continue;
                split_name(k, &c->domain, &nm);
                c->name = nm;
                v->cap_json[i] = a;
                v->cel.n_capacity++;
        }
        v->cel.capacity = v->caps;
        return 0;
}

/* consumesCounters of every device, once all counter sets are known. */
static int link_counters(struct kdev_sched *s)
{
        for (size_t i = 0; i < s->n_devs; i++) {
                struct dev *v = &s->devs[i];
                const json_t *cc = json_object_get(v->json, "consumesCounters");
                size_t n = 0, j;
                json_t *e;
                json_array_foreach(cc, j, e) n += json_object_size(json_object_get(e, "counters"));
                if (n == 0)
                        continue;
                v->cons = calloc(n, sizeof(*v->cons));
                if (!v->cons)
                        return -ENOMEM;
                json_array_foreach(cc, j, e) {
                        const char *set = jstr(e, "counterSet"), *k;
                        json_t *c;
                        if (!set || !has_set(v->pool, set)) {
                                v->pool->invalid = true;
                                snprintf(v->pool->why, sizeof(v->pool->why),
                                         "counter set %s not found", set ? set : "");
                                continue;
                        }
                        json_object_foreach(json_object_get(e, "counters"), k, c) {
                                struct counter *ctr = find_counter(v->pool, set, k);
                                if (!ctr) {
                                        v->pool->invalid = true;
                                        snprintf(v->pool->why, sizeof(v->pool->why),
                                                 "counter %s not found in counter set %s", k, set);
                                        continue;
                                }
                                if (parse_q(json_object_get(c, "value"), &v->cons[v->n_cons].v,
                                            NULL) < 0)
                                        continue;
                                v->cons[v->n_cons++].c = ctr;
                        }
                }
        }
        return 0;
}

static int gather(struct kdev_sched *s, struct kdev_err *err)
{
        size_t n = json_array_size(s->slices), i, cap_devs = 0;
        json_t *sl;
        /* 1. pools with the highest generation among all slices */
        s->pools = calloc(n + 1, sizeof(*s->pools));
        if (!s->pools)
                return kdev_err_set(err, ENOMEM, "allocator: out of memory");
        json_array_foreach(s->slices, i, sl) {
                const json_t *spec = json_object_get(sl, "spec");
                const char *name = jstr(json_object_get(sl, "metadata"), "name");
                const char *driver = jstr(spec, "driver");
                const char *pname = jstr(json_object_get(spec, "pool"), "name");
                if (!driver || !pname)
                        return kdev_err_set(err, EINVAL,
                                            "ResourceSlice %s: spec.driver and spec.pool.name "
                                            "must be strings",
                                            name ? name : "?");
                int64_t gen = json_integer_value(jpath(spec, "pool", "generation"));
                struct pool *p = find_pool(s, driver, pname);
                if (!p) {
                        p = &s->pools[s->n_pools++];
                        p->driver = driver;
                        p->name = pname;
                        p->gen = gen;
                } else if (gen > p->gen) {
                        p->gen = gen;
                }
        }
        qsort(s->pools, s->n_pools, sizeof(*s->pools), cmp_pool);
        /* 2. the slices of each pool's generation, by name */
        json_t **sorted = calloc(n + 1, sizeof(*sorted));
        if (!sorted)
                return kdev_err_set(err, ENOMEM, "allocator: out of memory");
        json_array_foreach(s->slices, i, sl) sorted[i] = sl;
        qsort(sorted, n, sizeof(*sorted), cmp_slice);
        bool *relevant = calloc(s->n_pools + 1, sizeof(*relevant));
        size_t *count = calloc(s->n_pools + 1, sizeof(*count));
        int rc = relevant && count ? 0 : -ENOMEM;
        for (i = 0; i < n && rc == 0; i++) {
                const json_t *spec = json_object_get(sorted[i], "spec");
                struct pool *p = find_pool(s, jstr(spec, "driver"),
                                           jstr(json_object_get(spec, "pool"), "name"));
                if (json_integer_value(jpath(spec, "pool", "generation")) != p->gen)
                        continue;
                size_t pi = (size_t)(p - s->pools);
                count[pi]++;
                if (json_object_get(spec, "sharedCounters"))
                        rc = add_sets(p, json_object_get(spec, "sharedCounters"));
                bool per_dev = json_is_true(json_object_get(spec, "perDeviceNodeSelection"));
                bool local = false, rel = per_dev || dev_relevant(s, spec, &local);
                if (!rel)
                        continue;
                relevant[pi] = true;
                size_t j;
                json_t *d;
                json_array_foreach(json_object_get(spec, "devices"), j, d) {
                        bool dl = local;
                        if (per_dev && !dev_relevant(s, d, &dl))
                                continue;
                        if ((rc = add_device(s, p, d, dl, &cap_devs)) < 0)
                                break;
                }
        }
        for (i = 0; i < s->n_pools && rc == 0; i++) {
                struct pool *p = &s->pools[i];
                json_t *first = NULL;
                for (size_t j = 0; j < n && !first; j++) {
                        const json_t *spec = json_object_get(sorted[j], "spec");
                        if (strcmp(jstr(spec, "driver"), p->driver) == 0 &&
                            strcmp(jstr(json_object_get(spec, "pool"), "name"), p->name) == 0 &&
                            json_integer_value(jpath(spec, "pool", "generation")) == p->gen)
                                first = sorted[j];
                }
                json_int_t want = json_integer_value(
                        jpath(json_object_get(first, "spec"), "pool", "resourceSliceCount"));
                if ((json_int_t)count[i] < want)
                        p->incomplete = true;
        }
        /* pools no slice of which concerns the node keep no devices anyway */
        free(sorted);
        free(relevant);
        free(count);
        if (rc == 0)
                rc = link_counters(s);
        return rc < 0 ? kdev_err_set(err, -rc, "allocator: out of memory") : 0;
}

static struct dev *find_dev(struct kdev_sched *s, const char *driver, const char *pool,
                            const char *name)
{
        for (size_t i = 0; i < s->n_devs; i++) {
                struct dev *v = &s->devs[i];
                if (strcmp(v->name, name) == 0 && strcmp(v->pool->name, pool) == 0 &&
                    strcmp(v->pool->driver, driver) == 0)
                        return v;
        }
        return NULL;
}

static size_t cap_index(const struct dev *v, const char *qualified)
{
        const char *slash = strchr(qualified, '/');
        for (size_t i = 0; i < v->cel.n_capacity; i++) {
                const struct kdev_cel_capacity *c = &v->caps[i];
                if (slash) {
                        const char *dom = c->domain ? c->domain : v->cel.driver;
                        if (strlen(dom) == (size_t)(slash - qualified) &&
                            strncmp(dom, qualified, (size_t)(slash - qualified)) == 0 &&
                            strcmp(c->name, slash + 1) == 0)
                                return i;
                } else if (!c->domain && strcmp(c->name, qualified) == 0) {
                        return i;
                }
        }
        return (size_t)-1;
}

static void charge(struct dev *v, int sign)
{
        for (size_t i = 0; i < v->n_cons; i++)
                kdev_sched__qadd(&v->cons[i].c->avail, &v->cons[i].v, -sign, &v->cons[i].c->avail);
}

static void allocated_state(struct kdev_sched *s)
{
        size_t i, j;
        json_t *c, *r;
        json_array_foreach(s->allocated, i, c) {
                json_array_foreach(jpath(jpath(c, "status", "allocation"), "devices", "results"), j, r) {
                        if (json_is_true(json_object_get(r, "adminAccess")))
                                continue;
                        const char *d = jstr(r, "driver"), *p = jstr(r, "pool"), *n = jstr(r, "device");
                        struct dev *v = d && p && n ? find_dev(s, d, p, n) : NULL;
                        if (!v)
                                continue;
                        if (jstr(r, "shareID")) {
                                const char *k;
                                json_t *q;
                                json_object_foreach(json_object_get(r, "consumedCapacity"), k, q) {
                                        size_t ci = cap_index(v, k);
                                        struct kdev_cel_quantity x;
                                        if (ci != (size_t)-1 && parse_q(q, &x, NULL) == 0)
                                                kdev_sched__qadd(&v->cap_used[ci], &x, 1,
                                                                 &v->cap_used[ci]);
                                }
                                if (!v->charged)
                                        charge(v, 1);
                                v->charged = true;
                        } else if (!v->in_use) {
                                v->in_use = true;
                                if (!v->charged)
                                        charge(v, 1);
                                v->charged = true;
                        }
                }
        }
}

static int compile_sels(const json_t *sels, const char *who, struct kdev_cel_program ***progs,
                        const char ***exprs, size_t *n, struct kdev_err *err)
{
        size_t cnt = json_array_size(sels), i;
        json_t *sel;
        *progs = calloc(cnt + 1, sizeof(**progs));
        *exprs = calloc(cnt + 1, sizeof(**exprs));
        *n = 0;
        if (!*progs || !*exprs)
                return kdev_err_set(err, ENOMEM, "allocator: out of memory");
        json_array_foreach(sels, i, sel) {
                const char *e = jstr(json_object_get(sel, "cel"), "expression");
                if (!e)
                        return kdev_err_set(err, EINVAL,
                                            "%s, selector #%zu: CEL expression empty (unsupported "
                                            "selector type?)",
                                            who, i);
                struct kdev_err ce = {0};
                int rc = kdev_cel_compile(e, &(*progs)[i], &ce);
                if (rc < 0)
                        return kdev_err_set(err, -rc, "%s: selector #%zu: CEL compile error: %s", who,
                                            i, ce.msg);
                (*exprs)[i] = e;
                (*n)++;
        }
        return 0;
}

static void free_sels(struct kdev_cel_program **p, const char **e, size_t n)
{
        for (size_t i = 0; p && i < n; i++)
                kdev_cel_program_free(p[i]);
        free(p);
        free((void *)e);
}

int kdev_sched_new(const struct kdev_sched_input *in, struct kdev_sched **out,
                   struct kdev_err *err)
{
        *out = NULL;
        if (!in || !in->node || !*in->node)
                return kdev_err_set(err, EINVAL, "node name is required");
        struct kdev_sched *s = calloc(1, sizeof(*s));
        if (!s || !(s->node = strdup(in->node))) {
                free(s);
                return kdev_err_set(err, ENOMEM, "allocator: out of memory");
        }
        s->labels = in->node_labels ? json_incref((json_t *)in->node_labels) : json_object();
        s->slices = in->slices ? json_incref((json_t *)in->slices) : json_array();
        s->classes = in->classes ? json_incref((json_t *)in->classes) : json_array();
        s->allocated = in->allocated ? json_incref((json_t *)in->allocated) : json_array();
        s->max_steps = in->max_steps ? in->max_steps : KDEV_SCHED_MAX_STEPS;
        int rc = gather(s, err);
        if (rc == 0) {
                size_t n = json_array_size(s->classes), i;
                json_t *c;
                s->classes_v = calloc(n + 1, sizeof(*s->classes_v));
                if (!s->classes_v)
                        rc = kdev_err_set(err, ENOMEM, "allocator: out of memory");
                json_array_foreach(s->classes, i, c) {
                        if (rc < 0)
                                break;
                        struct cls *k = &s->classes_v[s->n_classes];
                        k->name = jstr(json_object_get(c, "metadata"), "name");
                        k->json = c;
                        if (!k->name)
                                continue;
                        s->n_classes++;
                        char who[320];
                        snprintf(who, sizeof(who), "class %s", k->name);
                        rc = compile_sels(jpath(c, "spec", "selectors"), who, &k->sel, &k->expr,
                                          &k->n_sel, err);
                }
        }
        if (rc < 0) {
                kdev_sched_free(s);
                return rc;
        }
        allocated_state(s);
        *out = s;
        return 0;
}

void kdev_sched_free(struct kdev_sched *s)
{
        if (!s)
                return;
        for (size_t i = 0; i < s->n_devs; i++) {
                struct dev *v = &s->devs[i];
                for (size_t j = 0; j < v->cel.n_attributes; j++) {
                        free((char *)v->attrs[j].domain);
                        free((char *)v->attrs[j].name);
                }
                for (size_t j = 0; j < v->cel.n_capacity; j++) {
                        free((char *)v->caps[j].domain);
                        free((char *)v->caps[j].name);
                }
                free(v->attrs);
                free(v->caps);
                free(v->cap_json);
                free(v->cap_binary);
                free(v->cap_used);
                free(v->cap_alloc);
                free(v->cons);
        }
        free(s->devs);
        for (size_t i = 0; i < s->n_pools; i++) {
                for (size_t j = 0; j < s->pools[i].n_sets; j++)
                        free(s->pools[i].sets[j].c);
                free(s->pools[i].sets);
        }
        free(s->pools);
        for (size_t i = 0; i < s->n_classes; i++)
                free_sels(s->classes_v[i].sel, s->classes_v[i].expr, s->classes_v[i].n_sel);
        free(s->classes_v);
        json_decref(s->labels);
        json_decref(s->slices);
        json_decref(s->classes);
        json_decref(s->allocated);
        free(s->node);
        free(s);
}

/* --- selection --------------------------------------------------------------- */

static const char NO_SUCH_KEY_HINT[] = KDEV_CEL_NO_SUCH_KEY_HINT;

/* 1 selectable, 0 not, <0 fatal (CEL runtime error). */
static int selectable(struct claim *c, struct alt *a, size_t d)
{
        if (a->cache[d] >= 0)
                return a->cache[d];
        struct dev *v = &c->s->devs[d];
        struct kdev_err ce = {0};
        for (size_t pass = 0; pass < 2; pass++) {
                size_t n = pass ? a->n_sel : a->cls->n_sel;
                for (size_t i = 0; i < n; i++) {
                        const struct kdev_cel_program *p = pass ? a->sel[i] : a->cls->sel[i];
                        int rc = kdev_cel_match(p, &v->cel, 0, NULL, &ce);
                        if (rc < 0) {
                                const char *hint = strstr(ce.msg, "no such key:") ? NO_SUCH_KEY_HINT : "";
                                if (pass)
                                        return kdev_err_set(c->err, -rc,
                                                            "claim %s/%s: selector #%zu on device "
                                                            "%s/%s/%s: CEL runtime error: %s%s",
                                                            c->ns, c->name, i, v->pool->driver,
                                                            v->pool->name, v->name, ce.msg, hint);
                                return kdev_err_set(c->err, -rc,
                                                    "class %s: selector #%zu on device %s/%s/%s: CEL "
                                                    "runtime error: %s%s",
                                                    a->cls->name, i, v->pool->driver, v->pool->name,
                                                    v->name, ce.msg, hint);
                        }
                        if (rc == 0) {
                                a->rej_sel[d] = pass ? (int)i : -1;
                                return a->cache[d] = 0;
                        }
                }
        }
        return a->cache[d] = 1;
}

static bool tolerated(const json_t *tols, const json_t *taint)
{
        const char *effect = jstr(taint, "effect");
        if (!effect || (strcmp(effect, "NoSchedule") != 0 && strcmp(effect, "NoExecute") != 0))
                return true;
        size_t i;
        json_t *t;
        json_array_foreach(tols, i, t) {
                const char *key = jstr(t, "key"), *op = jstr(t, "operator"), *eff = jstr(t, "effect");
                const char *tk = jstr(taint, "key"), *tv = jstr(taint, "value");
                if (eff && *eff && strcmp(eff, effect) != 0)
                        continue;
                if (op && strcmp(op, "Exists") == 0) {
                        if (!key || !*key || (tk && strcmp(key, tk) == 0))
                                return true;
                        continue;
                }
                if (key && tk && strcmp(key, tk) == 0 &&
                    strcmp(jstr(t, "value") ? jstr(t, "value") : "", tv ? tv : "") == 0)
                        return true;
        }
        return false;
}

static bool taints_ok(const struct alt *a, const struct dev *v)
{
        size_t i;
        json_t *t;
        json_array_foreach(v->taints, i, t) if (!tolerated(a->tolerations, t)) return false;
        return true;
}

/* The capacity a share of |v| consumes for |a| (consumable_capacity.go);
 * false when the device cannot serve the request. */
static bool consumed_capacity(const struct alt *a, const struct dev *v,
                              struct kdev_cel_quantity *out)
{
        const char *k;
        json_t *q;
        json_object_foreach((json_t *)a->cap_req, k, q) {
                if (cap_index(v, k) == (size_t)-1)
                        return false; /* a request naming a capacity the device lacks */
        }
        for (size_t i = 0; i < v->cel.n_capacity; i++) {
                const json_t *policy = json_object_get(v->cap_json[i], "requestPolicy");
                const json_t *reqj = NULL;
                json_object_foreach((json_t *)a->cap_req, k, q) {
                        if (cap_index(v, k) == i)
                                reqj = q;
                }
                struct kdev_cel_quantity want, dflt;
                bool has_dflt = parse_q(json_object_get(policy, "default"), &dflt, NULL) == 0;
                if (!reqj) {
                        out[i] = has_dflt ? dflt : v->caps[i].value;
                } else {
                        if (parse_q(reqj, &want, NULL) < 0)
                                return false;
                        const json_t *range = json_object_get(policy, "validRange");
                        const json_t *vals = json_object_get(policy, "validValues");
                        out[i] = want;
                        if (range) {
                                struct kdev_cel_quantity mn, st, mx;
                                bool has_st = parse_q(json_object_get(range, "step"), &st, NULL) == 0;
                                if (parse_q(json_object_get(range, "min"), &mn, NULL) == 0 &&
                                    !kdev_sched__qround(&want, &mn, has_st ? &st : NULL, &out[i]))
                                        return false;
                                if (parse_q(json_object_get(range, "max"), &mx, NULL) == 0 &&
                                    kdev_cel_quantity_cmp(&out[i], &mx) > 0)
                                        return false;
                                if (has_st && parse_q(json_object_get(range, "min"), &mn, NULL) == 0 &&
                                    !kdev_sched__qmultiple(&out[i], &mn, &st))
                                        return false;
                        } else if (vals) {
                                size_t j;
                                json_t *x;
                                bool found = false;
                                json_array_foreach(vals, j, x) {
                                        struct kdev_cel_quantity vv;
                                        if (!found && parse_q(x, &vv, NULL) == 0 &&
                                            kdev_cel_quantity_cmp(&vv, &want) >= 0) {
                                                out[i] = vv;
                                                found = true;
                                        }
                                }
                                if (!found && !(has_dflt && kdev_cel_quantity_cmp(&want, &dflt) == 0))
                                        return false;
                        }
                }
                struct kdev_cel_quantity sum;
                if (!kdev_sched__qadd(&v->cap_used[i], &v->cap_alloc[i], 1, &sum) ||
                    !kdev_sched__qadd(&sum, &out[i], 1, &sum) ||
                    kdev_cel_quantity_cmp(&sum, &v->caps[i].value) > 0)
                        return false;
        }
        return true;
}

/* Dedicated device: requests act as a filter (requested <= value). */
static bool capacity_fits(const struct alt *a, const struct dev *v)
{
        const char *k;
        json_t *q;
        json_object_foreach((json_t *)a->cap_req, k, q) {
                size_t i = cap_index(v, k);
                struct kdev_cel_quantity want;
                if (i == (size_t)-1 || parse_q(q, &want, NULL) < 0 ||
                    kdev_cel_quantity_cmp(&want, &v->caps[i].value) > 0)
                        return false;
        }
        return true;
}

static bool counters_ok(const struct dev *v)
{
        for (size_t i = 0; i < v->n_cons; i++) {
                struct kdev_cel_quantity sum;
                if (!kdev_sched__qadd(&v->cons[i].c->used, &v->cons[i].v, 1, &sum) ||
                    kdev_cel_quantity_cmp(&sum, &v->cons[i].c->avail) > 0)
                        return false;
        }
        return true;
}

static void use_counters(struct dev *v, int sign)
{
        for (size_t i = 0; i < v->n_cons; i++)
                kdev_sched__qadd(&v->cons[i].c->used, &v->cons[i].v, sign, &v->cons[i].c->used);
}

static const struct kdev_cel_attribute *lookup_attr(const struct dev *v, const char *qualified)
{
        const char *slash = strchr(qualified, '/');
        for (size_t i = 0; i < v->cel.n_attributes; i++) {
                const struct kdev_cel_attribute *at = &v->attrs[i];
                const char *dom = at->domain ? at->domain : v->cel.driver;
                if (slash) {
                        if (strlen(dom) == (size_t)(slash - qualified) &&
                            strncmp(dom, qualified, (size_t)(slash - qualified)) == 0 &&
                            strcmp(at->name, slash + 1) == 0)
                                return at;
                } else if (strcmp(at->name, qualified) == 0 && !at->domain) {
                        return at;
                }
        }
        return NULL;
}

static bool attr_equal(const struct kdev_cel_attribute *a, const struct kdev_cel_attribute *b)
{
        if (a->type != b->type)
                return false;
        switch (a->type) {
        case KDEV_CEL_ATTR_INT:
                return a->i == b->i;
        case KDEV_CEL_ATTR_BOOL:
                return a->b == b->b;
        default:
                return strcmp(a->s, b->s) == 0;
        }
}

static bool constraint_applies(const struct constraint *k, const struct req *r, const struct alt *a)
{
        if (!k->requests || json_array_size(k->requests) == 0)
                return true;
        size_t i;
        json_t *n;
        json_array_foreach(k->requests, i, n) {
                const char *s = json_string_value(n);
                if (s && (strcmp(s, r->name) == 0 || strcmp(s, a->name) == 0))
                        return true;
        }
        return false;
}

/* Checks the constraints for device |d| as a result of |r|/|a|; on success
 * records the values into |set| (per constraint). */
static bool constraints_ok(struct claim *c, struct req *r, struct alt *a, size_t d, bool *set)
{
        const struct dev *v = &c->s->devs[d];
        for (size_t i = 0; i < c->n_cons; i++) {
                struct constraint *k = &c->cons[i];
                set[i] = false;
                if (!constraint_applies(k, r, a))
                        continue;
                const struct kdev_cel_attribute *at = lookup_attr(v, k->attr);
                if (!at)
                        return false;
                if (k->distinct) {
                        for (size_t j = 0; j < c->n_res; j++) {
                                struct result *x = &c->res[j];
                                if (!constraint_applies(k, &c->reqs[x->req], &c->reqs[x->req].alts[x->alt]))
                                        continue;
                                const struct kdev_cel_attribute *o = lookup_attr(&c->s->devs[x->dev], k->attr);
                                if (o && attr_equal(o, at))
                                        return false;
                        }
                } else if (k->n > 0 && !attr_equal(k->value, at)) {
                        return false;
                }
        }
        for (size_t i = 0; i < c->n_cons; i++) {
                struct constraint *k = &c->cons[i];
                if (!constraint_applies(k, r, a))
                        continue;
                if (k->n++ == 0)
                        k->value = lookup_attr(v, k->attr);
                set[i] = true;
        }
        return true;
}

/* Whether |d| can be picked for |a| now (in-use, selectors, capacity).
 * 1 yes, 0 no, <0 fatal. */
static int candidate(struct claim *c, struct alt *a, size_t d)
{
        struct dev *v = &c->s->devs[d];
        if (v->pool->incomplete || v->pool->invalid)
                return 0;
        if (!v->cel.allow_multiple_allocations) {
                if (v->picked || v->shares)
                        return 0;
                if (v->in_use && !a->admin)
                        return 0;
        } else if (v->picked) {
                return 0;
        }
        int rc = selectable(c, a, d);
        if (rc <= 0)
                return rc;
        if (!v->cel.allow_multiple_allocations && !capacity_fits(a, v))
                return 0;
        return 1;
}

static int try_add(struct claim *c, size_t r, size_t ai, size_t d)
{
        struct req *rq = &c->reqs[r];
        struct alt *a = &rq->alts[ai];
        struct dev *v = &c->s->devs[d];
        if (c->n_res == KDEV_SCHED_MAX_RESULTS)
                return 0;
        struct result *x = &c->res[c->n_res];
        memset(x, 0, sizeof(*x));
        x->req = r;
        x->alt = ai;
        x->dev = d;
        x->share = v->cel.allow_multiple_allocations && !a->admin;
        x->set_value = calloc(c->n_cons + 1, sizeof(bool));
        if (!x->set_value)
                return kdev_err_set(c->err, ENOMEM, "allocator: out of memory");
        if (x->share) {
                x->consumed = calloc(v->cel.n_capacity + 1, sizeof(*x->consumed));
                if (!x->consumed || !consumed_capacity(a, v, x->consumed))
                        goto no;
        }
        bool charge_now = !a->admin && !v->charged && !(x->share && v->shares);
        if (charge_now && !counters_ok(v))
                goto no;
        if (!taints_ok(a, v))
                goto no;
        if (!constraints_ok(c, rq, a, d, x->set_value))
                goto no;
        if (charge_now)
                use_counters(v, 1);
        if (x->share) {
                for (size_t i = 0; i < v->cel.n_capacity; i++)
                        kdev_sched__qadd(&v->cap_alloc[i], &x->consumed[i], 1, &v->cap_alloc[i]);
                v->shares++;
        } else {
                v->picked++;
        }
        c->n_res++;
        return 1;
no:
        free(x->consumed);
        free(x->set_value);
        x->consumed = NULL;
        x->set_value = NULL;
        return 0;
}

static void undo(struct claim *c)
{
        struct result *x = &c->res[--c->n_res];
        struct dev *v = &c->s->devs[x->dev];
        struct alt *a = &c->reqs[x->req].alts[x->alt];
        for (size_t i = 0; i < c->n_cons; i++)
                if (x->set_value[i] && --c->cons[i].n == 0)
                        c->cons[i].value = NULL;
        if (x->share) {
                for (size_t i = 0; i < v->cel.n_capacity; i++)
                        kdev_sched__qadd(&v->cap_alloc[i], &x->consumed[i], -1, &v->cap_alloc[i]);
                v->shares--;
                if (!a->admin && !v->charged && v->shares == 0)
                        use_counters(v, -1);
        } else {
                v->picked--;
                if (!a->admin && !v->charged)
                        use_counters(v, -1);
        }
        free(x->consumed);
        free(x->set_value);
        x->consumed = NULL;
        x->set_value = NULL;
}

static int alloc_req(struct claim *c, size_t r);

/* Whether |a| could be satisfied if it were the claim's only request: enough
 * devices that are selectable and free on their own (a necessary condition
 * of any full solution, so a claim with a request that fails it is answered
 * without the search). A selector error counts the device as possible and
 * sets *|errors|. */
static bool feasible_alone(struct claim *c, struct alt *a, bool *errors)
{
        if (!a->cls)
                return false;
        if (a->all)
                return true;
        int64_t n = 0;
        for (size_t d = 0; d < c->s->n_devs; d++) {
                struct dev *v = &c->s->devs[d];
                if (v->pool->incomplete || v->pool->invalid)
                        continue;
                int sel = selectable(c, a, d);
                if (sel == 0)
                        continue;
                if (sel < 0)
                        *errors = true;
                if (sel > 0) {
                        bool multi = v->cel.allow_multiple_allocations;
                        struct kdev_cel_quantity tmp[64];
                        if (!multi && v->in_use && !a->admin)
                                continue;
                        if (!multi && !capacity_fits(a, v))
                                continue;
                        if (multi && v->cel.n_capacity <= 64 && !consumed_capacity(a, v, tmp))
                                continue;
                        if (!a->admin && !v->charged && !counters_ok(v))
                                continue;
                        if (!taints_ok(a, v))
                                continue;
                }
                if (++n >= a->count)
                        return true; /* no further device is looked at */
        }
        return false;
}

static int alloc_all(struct claim *c, size_t r, size_t ai)
{
        struct alt *a = &c->reqs[r].alts[ai];
        size_t base = c->n_res, added = 0;
        for (size_t d = 0; d < c->s->n_devs; d++) {
                struct dev *v = &c->s->devs[d];
                int rc = selectable(c, a, d);
                if (rc < 0)
                        return rc;
                if (rc == 0 || (!v->cel.allow_multiple_allocations && !capacity_fits(a, v)))
                        continue;
                if (v->pool->incomplete)
                        return kdev_err_set(c->err, EINVAL,
                                            "claim %s/%s, request %s: asks for all devices, but "
                                            "resource pool %s/%s is currently being updated",
                                            c->ns, c->name, a->name, v->pool->driver, v->pool->name);
                if (v->pool->invalid)
                        return kdev_err_set(c->err, EINVAL,
                                            "claim %s/%s, request %s: asks for all devices, but "
                                            "resource pool %s/%s is currently invalid",
                                            c->ns, c->name, a->name, v->pool->driver, v->pool->name);
                rc = candidate(c, a, d);
                if (rc < 0)
                        return rc;
                if (rc > 0)
                        rc = try_add(c, r, ai, d);
                if (rc < 0)
                        return rc;
                if (rc == 0)
                        goto fail;
                added++;
        }
        if (added > 0) {
                int rc = alloc_req(c, r + 1);
                if (rc != 0)
                        return rc;
        }
fail:
        while (c->n_res > base)
                undo(c);
        return 0;
}

static int alloc_dev(struct claim *c, size_t r, size_t ai, int64_t k, size_t start)
{
        struct alt *a = &c->reqs[r].alts[ai];
        if (k == a->count)
                return alloc_req(c, r + 1);
        for (size_t d = start; d < c->s->n_devs; d++) {
                if (++c->steps > c->s->max_steps)
                        return kdev_err_set(c->err, ETIME,
                                            "claim %s/%s: allocation stopped after %llu device "
                                            "checks without a solution (too many combinations; "
                                            "kube-scheduler stops at its filter timeout)",
                                            c->ns, c->name, c->s->max_steps);
                int rc = candidate(c, a, d);
                if (rc < 0)
                        return rc;
                if (rc == 0)
                        continue;
                rc = try_add(c, r, ai, d);
                if (rc < 0)
                        return rc;
                if (rc == 0)
                        continue;
                rc = alloc_dev(c, r, ai, k + 1, d + 1);
                if (rc != 0)
                        return rc;
                undo(c);
        }
        return 0;
}

static int alloc_req(struct claim *c, size_t r)
{
        if (r == c->n_reqs)
                return 1;
        struct req *rq = &c->reqs[r];
        for (size_t ai = 0; ai < rq->n_alts; ai++) {
                rq->chosen = ai;
                if (!rq->alts[ai].cls)
                        continue; /* class missing: explained */
                int rc = rq->alts[ai].all ? alloc_all(c, r, ai) : alloc_dev(c, r, ai, 0, 0);
                if (rc != 0)
                        return rc;
        }
        return 0;
}

/* --- claim parsing --------------------------------------------------------------- */

static struct cls *find_class(struct kdev_sched *s, const char *name)
{
        for (size_t i = 0; i < s->n_classes; i++)
                if (strcmp(s->classes_v[i].name, name) == 0)
                        return &s->classes_v[i];
        return NULL;
}

static int parse_alt(struct claim *c, const char *req, const json_t *j, const char *sub,
                     bool allow_admin, struct alt *a)
{
        char who[512];
        if (sub)
                snprintf(who, sizeof(who), "claim %s/%s, request %s, subrequest %s", c->ns, c->name,
                         req, sub);
        else
                snprintf(who, sizeof(who), "claim %s/%s, request %s", c->ns, c->name, req);
        size_t len = strlen(req) + (sub ? strlen(sub) + 1 : 0) + 1;
        a->name = malloc(len);
        a->cache = malloc(c->s->n_devs + 1);
        a->rej_sel = calloc(c->s->n_devs + 1, sizeof(int));
        if (!a->name || !a->cache || !a->rej_sel)
                return kdev_err_set(c->err, ENOMEM, "allocator: out of memory");
        snprintf(a->name, len, sub ? "%s/%s" : "%s", req, sub);
        memset(a->cache, -1, c->s->n_devs + 1);
        a->class_name = jstr(j, "deviceClassName");
        if (!a->class_name || !*a->class_name)
                return kdev_err_set(c->err, EINVAL,
                                    "%s: missing device class name (unsupported request type?)", who);
        a->cls = find_class(c->s, a->class_name);
        char cwho[512];
        snprintf(cwho, sizeof(cwho), "claim %s/%s", c->ns, c->name);
        int rc = compile_sels(json_object_get(j, "selectors"), cwho, &a->sel, &a->expr, &a->n_sel,
                              c->err);
        if (rc < 0) {
                /* "claim ns/n, selector #i: CEL expression empty" names the request */
                if (strstr(c->err->msg, "CEL expression empty"))
                        kdev_err_set(c->err, EINVAL, "%s, selector #%zu: CEL expression empty "
                                                     "(unsupported selector type?)",
                                     who, a->n_sel);
                return rc;
        }
        const char *mode = jstr(j, "allocationMode");
        if (!mode || strcmp(mode, "ExactCount") == 0) {
                const json_t *cnt = json_object_get(j, "count");
                a->count = cnt ? json_integer_value(cnt) : 1;
                if (a->count <= 0)
                        return kdev_err_set(c->err, EINVAL, "%s: exact count %" PRId64 " is too small",
                                            who, a->count);
        } else if (strcmp(mode, "All") == 0) {
                a->all = true;
        } else {
                return kdev_err_set(c->err, EINVAL, "%s: unsupported count mode %s", who, mode);
        }
        a->admin = allow_admin && json_is_true(json_object_get(j, "adminAccess"));
        a->cap_req = jpath(j, "capacity", "requests");
        a->tolerations = json_object_get(j, "tolerations");
        return 0;
}

static void free_claim(struct claim *c)
{
        while (c->n_res > 0)
                undo(c);
        for (size_t r = 0; c->reqs && r < c->n_reqs; r++) {
                for (size_t i = 0; i < c->reqs[r].n_alts; i++) {
                        struct alt *a = &c->reqs[r].alts[i];
                        free(a->name);
                        free(a->cache);
                        free(a->rej_sel);
                        free_sels(a->sel, a->expr, a->n_sel);
                }
                free(c->reqs[r].alts);
        }
        free(c->reqs);
        free(c->cons);
}

static int parse_claim(struct claim *c, const json_t *claim)
{
        const json_t *devs = jpath(claim, "spec", "devices");
        const json_t *reqs = json_object_get(devs, "requests");
        size_t n = json_array_size(reqs), i;
        json_t *r;
        c->reqs = calloc(n + 1, sizeof(*c->reqs));
        if (!c->reqs)
                return kdev_err_set(c->err, ENOMEM, "allocator: out of memory");
        int64_t min_devices = 0;
        json_array_foreach(reqs, i, r) {
                struct req *rq = &c->reqs[c->n_reqs++];
                rq->name = jstr(r, "name") ? jstr(r, "name") : "";
                const json_t *fa = json_object_get(r, "firstAvailable");
                size_t na = fa ? json_array_size(fa) : 1;
                if (na == 0)
                        return kdev_err_set(c->err, EINVAL,
                                            "claim %s/%s, request %s: firstAvailable has no "
                                            "subrequests",
                                            c->ns, c->name, rq->name);
                rq->alts = calloc(na + 1, sizeof(*rq->alts));
                if (!rq->alts)
                        return kdev_err_set(c->err, ENOMEM, "allocator: out of memory");
                int64_t least = -1;
                for (size_t k = 0; k < na; k++) {
                        const json_t *j = fa ? json_array_get(fa, k) : json_object_get(r, "exactly");
                        const char *sub = fa ? jstr(j, "name") : NULL;
                        if (fa && !sub)
                                sub = "";
                        struct alt *a = &rq->alts[rq->n_alts++];
                        int rc = parse_alt(c, rq->name, j, sub, !fa, a);
                        if (rc < 0)
                                return rc;
                        int64_t need = a->count;
                        if (a->all) {
                                need = 0;
                                for (size_t d = 0; a->cls && d < c->s->n_devs; d++) {
                                        int s = selectable(c, a, d);
                                        if (s < 0)
                                                return s;
                                        need += s;
                                }
                        }
                        if (least < 0 || need < least)
                                least = need;
                }
                if (__builtin_add_overflow(min_devices, least < 0 ? 0 : least, &min_devices))
                        min_devices = INT64_MAX;
        }
        if (min_devices > KDEV_SCHED_MAX_RESULTS)
                return kdev_err_set(c->err, EINVAL,
                                    "claim %s/%s: number of requested devices %" PRId64
                                    " exceeds the claim limit of %d",
                                    c->ns, c->name, min_devices, KDEV_SCHED_MAX_RESULTS);
        const json_t *cons = json_object_get(devs, "constraints");
        c->cons = calloc(json_array_size(cons) + 1, sizeof(*c->cons));
        if (!c->cons)
                return kdev_err_set(c->err, ENOMEM, "allocator: out of memory");
        json_array_foreach(cons, i, r) {
                struct constraint *k = &c->cons[c->n_cons];
                k->requests = json_object_get(r, "requests");
                k->attr = jstr(r, "matchAttribute");
                if (!k->attr) {
                        k->attr = jstr(r, "distinctAttribute");
                        k->distinct = k->attr != NULL;
                }
                if (!k->attr)
                        return kdev_err_set(c->err, EINVAL,
                                            "claim %s/%s, constraint #%zu: empty constraint "
                                            "(unsupported constraint type?)",
                                            c->ns, c->name, i);
                c->n_cons++;
        }
        return 0;
}

/* --- the result ---------------------------------------------------------------- */

/* Kubernetes makes a random UUID per share (GenerateShareID); kdev's is
 * derived from the claim's UID, the result's index and the device, so the
 * same input gives the same answer: a UUID-shaped FNV-1a hash. */
static void share_id(const char *uid, size_t index, const struct dev *v, char *buf, size_t size)
{
        uint64_t h1 = 14695981039346656037ULL, h2 = 0x84222325cbf29ce4ULL;
        char idx[24];
        snprintf(idx, sizeof(idx), "#%zu", index);
        const char *parts[] = {uid ? uid : "", idx, v->pool->driver, v->pool->name, v->name};
        for (size_t p = 0; p < sizeof(parts) / sizeof(parts[0]); p++)
                for (const char *q = parts[p]; *q; q++) {
                        h1 = (h1 ^ (unsigned char)*q) * 1099511628211ULL;
                        h2 = (h2 ^ (unsigned char)*q) * 1099511628211ULL + 0x9E3779B97F4A7C15ULL;
                }
        snprintf(buf, size, "%08" PRIx32 "-%04" PRIx32 "-4%03" PRIx32 "-%04" PRIx32 "-%012" PRIx64,
                 (uint32_t)(h1 >> 32), (uint32_t)(h1 >> 16) & 0xffff, (uint32_t)h1 & 0xfff,
                 (uint32_t)(0x8000 | ((h2 >> 48) & 0x3fff)), (uint64_t)(h2 & 0xffffffffffffULL));
}

static bool covers_all(const struct claim *c, const json_t *names)
{
        for (size_t r = 0; r < c->n_reqs; r++) {
                const struct req *rq = &c->reqs[r];
                bool found = false;
                size_t i;
                json_t *n;
                json_array_foreach(names, i, n) {
                        const char *s = json_string_value(n);
                        if (s && (strcmp(s, rq->name) == 0 || strcmp(s, rq->alts[rq->chosen].name) == 0))
                                found = true;
                }
                if (!found)
                        return false;
        }
        return true;
}

static int add_config(json_t *out, const char *source, const json_t *reqs, const json_t *entry,
                      const struct claim *c)
{
        json_t *e = json_pack("{s:s}", "source", source);
        if (!e)
                return -ENOMEM;
        if (reqs && json_array_size(reqs) > 0 && !covers_all(c, reqs))
                json_object_set(e, "requests", (json_t *)reqs);
        const char *k;
        json_t *v;
        json_object_foreach((json_t *)entry, k, v) {
                if (strcmp(k, "requests") != 0)
                        json_object_set(e, k, v);
        }
        return json_array_append_new(out, e) < 0 ? -ENOMEM : 0;
}

static int build_result(struct claim *c, const json_t *claim, json_t **out)
{
        const char *uid = jstr(json_object_get(claim, "metadata"), "uid");
        json_t *results = json_array(), *config = json_array();
        json_t *alloc = json_pack("{s:{s:o, s:o}}", "devices", "results", results, "config", config);
        if (!alloc)
                return -ENOMEM;
        bool local = false;
        for (size_t i = 0; i < c->n_res; i++) {
                struct result *x = &c->res[i];
                struct dev *v = &c->s->devs[x->dev];
                struct alt *a = &c->reqs[x->req].alts[x->alt];
                json_t *r = json_pack("{s:s, s:s, s:s, s:s}", "request", a->name, "driver",
                                      v->pool->driver, "pool", v->pool->name, "device", v->name);
                if (!r)
                        goto oom;
                if (a->admin)
                        json_object_set_new(r, "adminAccess", json_true());
                if (a->tolerations && json_array_size(a->tolerations) > 0)
                        json_object_set(r, "tolerations", (json_t *)a->tolerations);
                if (x->share) {
                        char id[40];
                        share_id(uid, i, v, id, sizeof(id));
                        json_object_set_new(r, "shareID", json_string(id));
                        json_t *cc = json_object();
                        for (size_t k = 0; cc && k < v->cel.n_capacity; k++) {
                                char q[64], key[256];
                                kdev_sched__qformat(&x->consumed[k], v->cap_binary[k], q, sizeof(q));
                                snprintf(key, sizeof(key), "%s%s%s", v->caps[k].domain ? v->caps[k].domain : "",
                                         v->caps[k].domain ? "/" : "", v->caps[k].name);
                                json_object_set_new(cc, key, json_string(q));
                        }
                        if (cc && json_object_size(cc) > 0)
                                json_object_set_new(r, "consumedCapacity", cc);
                        else
                                json_decref(cc);
                }
                if (v->node_local)
                        local = true;
                if (json_array_append_new(results, r) < 0)
                        goto oom;
        }
        /* class configs, per class in order of first use */
        for (size_t i = 0; i < c->n_res; i++) {
                const struct cls *k = c->reqs[c->res[i].req].alts[c->res[i].alt].cls;
                bool seen = false;
                for (size_t j = 0; j < i; j++)
                        if (c->reqs[c->res[j].req].alts[c->res[j].alt].cls == k)
                                seen = true;
                const json_t *cfg = jpath(k->json, "spec", "config");
                if (seen || json_array_size(cfg) == 0)
                        continue;
                json_t *names = json_array();
                for (size_t r = 0; names && r < c->n_reqs; r++) {
                        const struct alt *a = &c->reqs[r].alts[c->reqs[r].chosen];
                        if (a->cls == k)
                                json_array_append_new(names, json_string(a->name));
                }
                size_t j;
                json_t *e;
                json_array_foreach(cfg, j, e) {
                        if (add_config(config, "FromClass", names, e, c) < 0) {
                                json_decref(names);
                                goto oom;
                        }
                }
                json_decref(names);
        }
        size_t j;
        json_t *e;
        json_array_foreach(json_object_get(jpath(claim, "spec", "devices"), "config"), j, e) {
                const json_t *names = json_object_get(e, "requests");
                bool use = json_array_size(names) == 0;
                size_t q;
                json_t *n;
                json_array_foreach(names, q, n) {
                        const char *s = json_string_value(n);
                        for (size_t r = 0; s && r < c->n_reqs; r++) {
                                const struct req *rq = &c->reqs[r];
                                if (strcmp(s, rq->name) == 0 || strcmp(s, rq->alts[rq->chosen].name) == 0)
                                        use = true;
                        }
                }
                if (use && add_config(config, "FromClaim", names, e, c) < 0)
                        goto oom;
        }
        if (json_array_size(config) == 0)
                json_object_del(json_object_get(alloc, "devices"), "config");
        if (local) {
                json_t *ns = json_pack("{s:[{s:[{s:s, s:s, s:[s]}]}]}", "nodeSelectorTerms",
                                       "matchFields", "key", "metadata.name", "operator", "In",
                                       "values", c->s->node);
                if (!ns)
                        goto oom;
                json_object_set_new(alloc, "nodeSelector", ns);
        }
        *out = alloc;
        return 0;
oom:
        json_decref(alloc);
        return -ENOMEM;
}

/* --- explanation ------------------------------------------------------------------ */

/* What a selector reads: attributes, capacities, the driver. */
struct ref {
        char kind; /* 'a' attribute, 'c' capacity, 'd' driver */
        char domain[64];
        char name[64];
};

static size_t find_refs(const char *e, struct ref *refs, size_t max)
{
        size_t n = 0;
        for (const char *p = e; *p && n < max; p++) {
                char kind = 0;
                const char *q = NULL;
                if (strncmp(p, "device.driver", 13) == 0) {
                        struct ref r = {.kind = 'd'};
                        snprintf(r.name, sizeof(r.name), "driver");
                        bool dup = false;
                        for (size_t i = 0; i < n; i++)
                                if (refs[i].kind == 'd')
                                        dup = true;
                        if (!dup)
                                refs[n++] = r;
                        p += 12;
                        continue;
                }
                if (strncmp(p, "attributes[", 11) == 0) {
                        kind = 'a';
                        q = p + 11;
                } else if (strncmp(p, "capacity[", 9) == 0) {
                        kind = 'c';
                        q = p + 9;
                } else {
                        continue;
                }
                char quote = *q;
                if (quote != '"' && quote != '\'')
                        continue;
                const char *end = strchr(q + 1, quote);
                if (!end || end[1] != ']')
                        continue;
                struct ref r = {.kind = kind};
                snprintf(r.domain, sizeof(r.domain), "%.*s", (int)(end - q - 1), q + 1);
                const char *id = end + 2;
                if (*id != '.')
                        continue;
                id++;
                if (*id == '?')
                        id++;
                size_t len = 0;
                while (id[len] == '_' || (id[len] >= 'a' && id[len] <= 'z') ||
                       (id[len] >= 'A' && id[len] <= 'Z') || (id[len] >= '0' && id[len] <= '9'))
                        len++;
                if (len == 0)
                        continue;
                snprintf(r.name, sizeof(r.name), "%.*s", (int)len, id);
                bool dup = false;
                for (size_t i = 0; i < n; i++)
                        if (refs[i].kind == kind && strcmp(refs[i].name, r.name) == 0 &&
                            strcmp(refs[i].domain, r.domain) == 0)
                                dup = true;
                if (!dup)
                        refs[n++] = r;
                p = id + len - 1;
        }
        return n;
}

/* The value |r| reads on |v| as text ("missing" when absent). */
static void ref_value(const struct dev *v, const struct ref *r, char *buf, size_t size)
{
        if (r->kind == 'd') {
                snprintf(buf, size, "\"%s\"", v->cel.driver);
                return;
        }
        char q[192];
        snprintf(q, sizeof(q), "%s/%s", r->domain, r->name);
        if (r->kind == 'c') {
                size_t i = cap_index(v, q);
                if (i == (size_t)-1)
                        snprintf(buf, size, "missing");
                else
                        kdev_sched__qformat(&v->caps[i].value, v->cap_binary[i], buf, size);
                return;
        }
        const struct kdev_cel_attribute *at = lookup_attr(v, q);
        if (!at) {
                snprintf(buf, size, "missing");
                return;
        }
        switch (at->type) {
        case KDEV_CEL_ATTR_INT:
                snprintf(buf, size, "%" PRId64, at->i);
                break;
        case KDEV_CEL_ATTR_BOOL:
                snprintf(buf, size, "%s", at->b ? "true" : "false");
                break;
        case KDEV_CEL_ATTR_STRING:
                snprintf(buf, size, "\"%s\"", at->s);
                break;
        default:
                snprintf(buf, size, "%s", at->s);
        }
}

static void cat(char *buf, size_t size, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void cat(char *buf, size_t size, const char *fmt, ...)
{
        size_t len = strlen(buf);
        if (len + 1 >= size)
                return;
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(buf + len, size - len, fmt, ap);
        va_end(ap);
}

#define MAX_VALUES 4

/* " — name is V[ (n)], ..." for the devices of |a| that selector |which|
 * (-1: the class's, i: the request's #i; -2: any) rejected. */
static void detail(struct claim *c, struct alt *a, int which, char *buf, size_t size)
{
        struct ref refs[4];
        size_t nr = 0;
        if (which >= 0)
                nr = find_refs(a->expr[which], refs, 4);
        else
                for (size_t i = 0; i < a->cls->n_sel && nr < 4; i++)
                        nr += find_refs(a->cls->expr[i], refs + nr, 4 - nr);
        for (size_t k = 0; k < nr; k++) {
                char vals[MAX_VALUES][128];
                size_t counts[MAX_VALUES] = {0}, nv = 0;
                bool more = false;
                for (size_t d = 0; d < c->s->n_devs; d++) {
                        if (a->cache[d] != 0 || a->rej_sel[d] != which)
                                continue;
                        char v[128];
                        ref_value(&c->s->devs[d], &refs[k], v, sizeof(v));
                        size_t i;
                        for (i = 0; i < nv && strcmp(vals[i], v) != 0; i++)
                                ;
                        if (i < nv) {
                                counts[i]++;
                        } else if (nv < MAX_VALUES) {
                                snprintf(vals[nv], sizeof(vals[nv]), "%s", v);
                                counts[nv++] = 1;
                        } else {
                                more = true;
                        }
                }
                if (nv == 0)
                        continue;
                cat(buf, size, "%s%s is ", k == 0 ? " \u2014 " : "; ", refs[k].name);
                for (size_t i = 0; i < nv; i++) {
                        cat(buf, size, "%s%s", i ? ", " : "", vals[i]);
                        if (nv > 1 || more)
                                cat(buf, size, " (%zu)", counts[i]);
                }
                if (more)
                        cat(buf, size, ", ...");
        }
}

static void sel_text(const struct alt *a, char *buf, size_t size)
{
        buf[0] = '\0';
        for (size_t i = 0; i < a->n_sel; i++)
                cat(buf, size, "%s`%s`", i ? " and " : "", a->expr[i]);
}

static const char *plural(size_t n)
{
        return n == 1 ? "" : "s";
}

/* The line for |a| of request |r| into |buf|, or "" when |a| can be
 * satisfied on its own. */
static int explain_alt(struct claim *c, struct alt *a, char *buf, size_t size)
{
        buf[0] = '\0';
        if (!a->cls) {
                snprintf(buf, size, "request %s: device class %s does not exist", a->name,
                         a->class_name);
                return 0;
        }
        size_t checked = 0, rejected = 0, by_class = 0, matching = 0, in_use = 0, no_cap = 0,
               no_ctr = 0, tainted = 0, free_n = 0;
        int first_rej = -2;
        for (size_t d = 0; d < c->s->n_devs; d++) {
                struct dev *v = &c->s->devs[d];
                if (v->pool->incomplete || v->pool->invalid)
                        continue;
                checked++;
                int rc = selectable(c, a, d);
                if (rc < 0) {
                        snprintf(buf, size, "request %s: %.900s", a->name, c->err->msg);
                        return 0;
                }
                if (rc == 0) {
                        rejected++;
                        if (a->rej_sel[d] < 0)
                                by_class++;
                        else if (first_rej < 0)
                                first_rej = a->rej_sel[d];
                        continue;
                }
                matching++;
                bool multi = v->cel.allow_multiple_allocations;
                struct kdev_cel_quantity tmp[64];
                if (!multi && v->in_use && !a->admin)
                        in_use++;
                else if (!multi && !capacity_fits(a, v))
                        no_cap++;
                else if (multi && (v->cel.n_capacity > 64 || !consumed_capacity(a, v, tmp)))
                        no_cap++;
                else if (!a->admin && !v->charged && !counters_ok(v))
                        no_ctr++;
                else if (!taints_ok(a, v))
                        tainted++;
                else
                        free_n++;
        }
        int64_t needed = a->all ? (int64_t)(matching ? matching : 1) : a->count;
        char sel[MAX_EXPLAIN];
        sel_text(a, sel, sizeof(sel));
        if (matching == 0 || (int64_t)matching < needed) {
                if (matching == 0 && a->n_sel > 0 && by_class < rejected)
                        snprintf(buf, size, "request %s: no device of class %s matches %s", a->name,
                                 a->cls->name, sel);
                else if (matching == 0) /* the class's own selectors reject them all */
                        snprintf(buf, size, "request %s: no device matches class %s", a->name,
                                 a->cls->name);
                else
                        snprintf(buf, size, "request %s: %" PRId64 " devices needed, %zu of class %s %s%s%s",
                                 a->name, needed, matching, a->cls->name, matching == 1 ? "matches" : "match",
                                 a->n_sel ? " " : "", sel);
                cat(buf, size, ": %zu device%s checked, %zu rejected", checked, plural(checked),
                    rejected);
                if (by_class > 0 && by_class < rejected)
                        cat(buf, size, " (%zu by the class's selectors)", by_class);
                if (first_rej >= 0)
                        detail(c, a, first_rej, buf, size);
                else if (by_class > 0)
                        detail(c, a, -1, buf, size);
                return 0;
        }
        if ((int64_t)free_n < needed || (a->all && free_n < matching)) {
                snprintf(buf, size, "request %s: %" PRId64 " device%s needed, %zu of class %s %s%s%s, %zu free:",
                         a->name, needed, plural((size_t)needed), matching, a->cls->name,
                         matching == 1 ? "matches" : "match", a->n_sel ? " " : "", sel, free_n);
                const char *sep = " ";
                if (in_use) {
                        cat(buf, size, "%s%zu allocated to other claims", sep, in_use);
                        sep = ", ";
                }
                if (no_cap) {
                        cat(buf, size, "%s%zu without the requested capacity left", sep, no_cap);
                        sep = ", ";
                }
                if (no_ctr) {
                        cat(buf, size, "%s%zu without shared counters left", sep, no_ctr);
                        sep = ", ";
                }
                if (tainted)
                        cat(buf, size, "%s%zu with a taint the request does not tolerate", sep, tainted);
                return 0;
        }
        return 0;
}

static int explain(struct claim *c, json_t **out)
{
        json_t *lines = json_array();
        if (!lines)
                return kdev_err_set(c->err, ENOMEM, "allocator: out of memory");
        char buf[MAX_EXPLAIN];
        for (size_t r = 0; r < c->n_reqs; r++) {
                struct req *rq = &c->reqs[r];
                size_t failed = 0;
                for (size_t i = 0; i < rq->n_alts; i++) {
                        explain_alt(c, &rq->alts[i], buf, sizeof(buf));
                        if (buf[0])
                                failed++;
                }
                if (failed < rq->n_alts)
                        continue;
                for (size_t i = 0; i < rq->n_alts; i++) {
                        explain_alt(c, &rq->alts[i], buf, sizeof(buf));
                        json_array_append_new(lines, json_string(buf));
                }
        }
        if (json_array_size(lines) == 0) {
                if (c->n_cons > 0) {
                        snprintf(buf, sizeof(buf),
                                 "claim %s/%s: no combination of free devices satisfies the claim's "
                                 "constraints (",
                                 c->ns, c->name);
                        for (size_t i = 0; i < c->n_cons; i++)
                                cat(buf, sizeof(buf), "%s%s %s", i ? ", " : "",
                                    c->cons[i].distinct ? "distinctAttribute" : "matchAttribute",
                                    c->cons[i].attr);
                        cat(buf, sizeof(buf), ")");
                } else {
                        snprintf(buf, sizeof(buf),
                                 "claim %s/%s: each request can be satisfied alone, but not all "
                                 "together: they compete for the same devices, shared counters or "
                                 "capacity",
                                 c->ns, c->name);
                }
                json_array_append_new(lines, json_string(buf));
        }
        for (size_t i = 0; i < c->s->n_pools; i++) {
                const struct pool *p = &c->s->pools[i];
                bool has = false;
                for (size_t d = 0; d < c->s->n_devs && !has; d++)
                        has = c->s->devs[d].pool == p;
                if (!has)
                        continue;
                if (p->invalid)
                        snprintf(buf, sizeof(buf), "invalid resource pools were encountered: %s/%s: %s",
                                 p->driver, p->name, p->why);
                else if (p->incomplete)
                        snprintf(buf, sizeof(buf),
                                 "resource pool %s/%s is currently being updated: its devices were "
                                 "not considered",
                                 p->driver, p->name);
                else
                        continue;
                json_array_append_new(lines, json_string(buf));
        }
        *out = lines;
        return 0;
}

/* --- entry point ------------------------------------------------------------------ */

int kdev_sched_allocate(struct kdev_sched *s, const json_t *claim, json_t **allocation,
                        json_t **reasons, struct kdev_err *err)
{
        if (allocation)
                *allocation = NULL;
        if (reasons)
                *reasons = NULL;
        struct kdev_err local = {0};
        struct claim c = {.s = s, .err = err ? err : &local};
        const json_t *meta = json_object_get(claim, "metadata");
        c.ns = jstr(meta, "namespace") ? jstr(meta, "namespace") : "";
        c.name = jstr(meta, "name") ? jstr(meta, "name") : "";
        int rc = parse_claim(&c, claim);
        bool infeasible = false, errors = false;
        for (size_t r = 0; rc == 0 && r < c.n_reqs; r++) {
                bool any = false;
                for (size_t i = 0; i < c.reqs[r].n_alts && !any; i++)
                        any = feasible_alone(&c, &c.reqs[r].alts[i], &errors);
                if (!any)
                        infeasible = true; /* explained below without a search */
        }
        /* with a selector error somewhere, the search decides (it reports the
         * error where the scheduler's would reach the device) */
        if (errors)
                infeasible = false;
        if (rc == 0)
                kdev_err_clear(c.err); /* selector errors the search may not reach */
        if (rc == 0 && !infeasible)
                rc = alloc_req(&c, 0);
        if (rc == 1) {
                json_t *a = NULL;
                if (build_result(&c, claim, &a) < 0) {
                        rc = kdev_err_set(c.err, ENOMEM, "allocator: out of memory");
                } else {
                        /* commit: the devices are allocated for the next claims */
                        for (size_t i = 0; i < c.n_res; i++) {
                                struct result *x = &c.res[i];
                                struct dev *v = &s->devs[x->dev];
                                struct alt *al = &c.reqs[x->req].alts[x->alt];
                                if (al->admin)
                                        continue;
                                if (x->share) {
                                        for (size_t k = 0; k < v->cel.n_capacity; k++)
                                                kdev_sched__qadd(&v->cap_used[k], &x->consumed[k], 1,
                                                                 &v->cap_used[k]);
                                } else {
                                        v->in_use = true;
                                }
                        }
                        /* counters picked in this call become allocated */
                        for (size_t i = 0; i < c.n_res; i++) {
                                struct result *x = &c.res[i];
                                struct dev *v = &s->devs[x->dev];
                                if (c.reqs[x->req].alts[x->alt].admin || v->charged)
                                        continue;
                                use_counters(v, -1);
                                charge(v, 1);
                                v->charged = true;
                        }
                        for (size_t i = 0; i < c.n_res; i++) {
                                struct result *x = &c.res[i];
                                struct dev *v = &s->devs[x->dev];
                                for (size_t k = 0; x->share && k < v->cel.n_capacity; k++)
                                        memset(&v->cap_alloc[k], 0, sizeof(v->cap_alloc[k]));
                                if (x->share)
                                        v->shares = 0;
                                else
                                        v->picked = 0;
                                free(x->consumed);
                                free(x->set_value);
                        }
                        c.n_res = 0;
                        if (allocation)
                                *allocation = a;
                        else
                                json_decref(a);
                }
        } else if (rc == 0) {
                json_t *why = NULL;
                rc = explain(&c, &why);
                if (rc == 0 && reasons)
                        *reasons = why;
                else
                        json_decref(why);
        }
        free_claim(&c);
        return rc;
}
