/* Scenario file parser: see scenario.h. */
#include "kubelet/scenario.h"

#include "common/file.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <yaml.h>

struct ctx {
        yaml_document_t *doc;
        const char *name;
        struct kdev_err *err;
};

static int fail(struct ctx *c, const yaml_node_t *n, const char *path, const char *fmt, ...)
        __attribute__((format(printf, 4, 5)));
static int fail(struct ctx *c, const yaml_node_t *n, const char *path, const char *fmt, ...)
{
        char msg[512];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(msg, sizeof(msg), fmt, ap);
        va_end(ap);
        return kdev_err_set(c->err, EINVAL, "%s:%zu:%zu: %s%s%s", c->name,
                            n ? n->start_mark.line + 1 : 0, n ? n->start_mark.column + 1 : 0,
                            path, *path ? ": " : "", msg);
}

static const char *kind_name(const yaml_node_t *n)
{
        switch (n->type) {
        case YAML_SCALAR_NODE:
                return "a scalar";
        case YAML_SEQUENCE_NODE:
                return "a list";
        case YAML_MAPPING_NODE:
                return "a mapping";
        default:
                return "nothing";
        }
}

static yaml_node_t *node(struct ctx *c, int id)
{
        return yaml_document_get_node(c->doc, id);
}

static const char *scalar(const yaml_node_t *n)
{
        return (const char *)n->data.scalar.value;
}

static bool is_null(const yaml_node_t *n)
{
        if (n->type != YAML_SCALAR_NODE || n->data.scalar.style != YAML_PLAIN_SCALAR_STYLE)
                return false;
        const char *s = scalar(n);
        return !*s || strcmp(s, "~") == 0 || strcmp(s, "null") == 0 || strcmp(s, "Null") == 0 ||
               strcmp(s, "NULL") == 0;
}

static int expect(struct ctx *c, const yaml_node_t *n, yaml_node_type_t type, const char *path)
{
        if (n->type == type)
                return 0;
        const char *want = type == YAML_MAPPING_NODE    ? "a mapping"
                           : type == YAML_SEQUENCE_NODE ? "a list"
                                                        : "a scalar";
        return fail(c, n, path, "expected %s, got %s", want, kind_name(n));
}

/* Checks the keys of mapping |n|: scalars, no duplicates, all in |known|. */
static int check_keys(struct ctx *c, const yaml_node_t *n, const char *path,
                      const char *const *known)
{
        for (yaml_node_pair_t *p = n->data.mapping.pairs.start; p < n->data.mapping.pairs.top; p++) {
                yaml_node_t *k = node(c, p->key);
                if (k->type != YAML_SCALAR_NODE)
                        return fail(c, k, path, "keys must be scalars");
                bool ok = false;
                for (size_t i = 0; known[i] && !ok; i++)
                        ok = strcmp(scalar(k), known[i]) == 0;
                if (!ok) {
                        /* Worded like the plugin config (src/config/yamlcfg.c): the key
                         * path including the key, then the keys allowed there. */
                        char list[256] = "";
                        for (size_t i = 0; known[i]; i++) {
                                strncat(list, i ? ", " : "", sizeof(list) - strlen(list) - 1);
                                strncat(list, known[i], sizeof(list) - strlen(list) - 1);
                        }
                        char sub[512];
                        snprintf(sub, sizeof(sub), "%s%s%s", path, *path ? "." : "", scalar(k));
                        return fail(c, k, sub, "unknown key (expected one of: %s)", list);
                }
                for (yaml_node_pair_t *q = n->data.mapping.pairs.start; q < p; q++) {
                        yaml_node_t *k2 = node(c, q->key);
                        if (k2->type == YAML_SCALAR_NODE && strcmp(scalar(k2), scalar(k)) == 0)
                                return fail(c, k, path, "key \"%s\" given twice", scalar(k));
                }
        }
        return 0;
}

static yaml_node_t *get(struct ctx *c, const yaml_node_t *map, const char *key)
{
        for (yaml_node_pair_t *p = map->data.mapping.pairs.start; p < map->data.mapping.pairs.top;
             p++) {
                yaml_node_t *k = node(c, p->key);
                if (k->type == YAML_SCALAR_NODE && strcmp(scalar(k), key) == 0)
                        return node(c, p->value);
        }
        return NULL;
}

static int get_string(struct ctx *c, const yaml_node_t *n, const char *path, char **out)
{
        int rc = expect(c, n, YAML_SCALAR_NODE, path);
        if (rc < 0)
                return rc;
        if (!*scalar(n))
                return fail(c, n, path, "must not be empty");
        *out = strdup(scalar(n));
        return *out ? 0 : kdev_err_set(c->err, ENOMEM, "out of memory");
}

static int get_count(struct ctx *c, const yaml_node_t *n, const char *path, uint64_t *out)
{
        int rc = expect(c, n, YAML_SCALAR_NODE, path);
        if (rc < 0)
                return rc;
        const char *s = scalar(n);
        char *end;
        errno = 0;
        unsigned long long v = strtoull(s, &end, 10);
        if (!*s || *end || s[0] == '-' || s[0] == '+' || s[0] == ' ' || errno || v > 1000000)
                return fail(c, n, path,
                            "expected a non-negative integer (at most 1000000), got \"%s\"", s);
        *out = v;
        return 0;
}

static int get_seconds(struct ctx *c, const yaml_node_t *n, const char *path, uint64_t *ms)
{
        int rc = expect(c, n, YAML_SCALAR_NODE, path);
        if (rc < 0)
                return rc;
        const char *s = scalar(n);
        char *end;
        errno = 0;
        double v = strtod(s, &end);
        if (!*s || *end || errno || !isfinite(v) || v < 0 || v > 86400.0)
                return fail(c, n, path, "expected seconds between 0 and 86400, got \"%s\"", s);
        double msf = v * 1000.0;
        *ms = (uint64_t)msf;
        if ((double)*ms < msf)
                (*ms)++;
        return 0;
}

/* resource -> count mapping into |out|. */
static int parse_limits(struct ctx *c, const yaml_node_t *n, const char *path,
                        struct kdev_scn_limit **out, size_t *n_out)
{
        if (is_null(n))
                return 0;
        int rc = expect(c, n, YAML_MAPPING_NODE, path);
        if (rc < 0)
                return rc;
        for (yaml_node_pair_t *p = n->data.mapping.pairs.start; p < n->data.mapping.pairs.top; p++) {
                yaml_node_t *k = node(c, p->key), *v = node(c, p->value);
                if (k->type != YAML_SCALAR_NODE || !*scalar(k))
                        return fail(c, k, path, "keys must be resource names");
                for (yaml_node_pair_t *q = n->data.mapping.pairs.start; q < p; q++)
                        if (strcmp(scalar(node(c, q->key)), scalar(k)) == 0)
                                return fail(c, k, path, "key \"%s\" given twice", scalar(k));
                char sub[512];
                snprintf(sub, sizeof(sub), "%s.%s", path, scalar(k));
                uint64_t count = 0;
                if ((rc = get_count(c, v, sub, &count)) < 0)
                        return rc;
                struct kdev_scn_limit *nl = realloc(*out, (*n_out + 1) * sizeof(*nl));
                if (!nl)
                        return kdev_err_set(c->err, ENOMEM, "out of memory");
                *out = nl;
                nl[*n_out].count = count;
                if (!(nl[*n_out].resource = strdup(scalar(k))))
                        return kdev_err_set(c->err, ENOMEM, "out of memory");
                (*n_out)++;
        }
        return 0;
}

/* True when mapping |n| (already checked) has no pairs, or |n| is null. */
static bool empty_map(const yaml_node_t *n)
{
        return is_null(n) || (n->type == YAML_MAPPING_NODE &&
                              n->data.mapping.pairs.top == n->data.mapping.pairs.start);
}

static int parse_wait(struct ctx *c, const yaml_node_t *n, const char *path, struct kdev_scn_wait *w)
{
        static const char *const known[] = {"timeout", "resources", "allocatable", NULL};
        int rc;
        w->timeout_ms = KDEV_SCN_DEFAULT_WAIT_S * 1000u;
        if ((rc = expect(c, n, YAML_MAPPING_NODE, path)) < 0 ||
            (rc = check_keys(c, n, path, known)) < 0)
                return rc;
        char sub[256];
        yaml_node_t *v = get(c, n, "timeout");
        snprintf(sub, sizeof(sub), "%s.timeout", path);
        if (v && (rc = get_seconds(c, v, sub, &w->timeout_ms)) < 0)
                return rc;
        yaml_node_t *ge = get(c, n, "resources"), *eq = get(c, n, "allocatable");
        if (!ge && !eq)
                return fail(c, n, path, "missing key \"resources\" or \"allocatable\"");
        if (ge) {
                snprintf(sub, sizeof(sub), "%s.resources", path);
                if (empty_map(ge))
                        return fail(c, ge, sub, "must name at least one resource");
                if ((rc = parse_limits(c, ge, sub, &w->resources, &w->n_resources)) < 0)
                        return rc;
        }
        if (eq) {
                snprintf(sub, sizeof(sub), "%s.allocatable", path);
                if (empty_map(eq))
                        return fail(c, eq, sub, "must name at least one resource");
                if ((rc = parse_limits(c, eq, sub, &w->allocatable, &w->n_allocatable)) < 0)
                        return rc;
                /* One condition per resource: ">= N and == M" is redundant or
                 * can never hold. */
                size_t idx = 0;
                for (yaml_node_pair_t *p = eq->data.mapping.pairs.start;
                     p < eq->data.mapping.pairs.top; p++, idx++)
                        for (size_t i = 0; i < w->n_resources; i++)
                                if (strcmp(w->resources[i].resource, w->allocatable[idx].resource) ==
                                    0)
                                        return fail(c, node(c, p->key), sub,
                                                    "\"%s\" is also under %s.resources (one "
                                                    "condition per resource)",
                                                    w->allocatable[idx].resource, path);
        }
        return 0;
}

static int parse_containers(struct ctx *c, const yaml_node_t *n, const char *path, bool init,
                            struct kdev_scn_pod *pod)
{
        static const char *const known[] = {"name", "limits", NULL};
        int rc = expect(c, n, YAML_SEQUENCE_NODE, path);
        if (rc < 0)
                return rc;
        size_t idx = 0;
        for (yaml_node_item_t *it = n->data.sequence.items.start; it < n->data.sequence.items.top;
             it++, idx++) {
                yaml_node_t *cn = node(c, *it);
                char sub[256], sub2[300];
                snprintf(sub, sizeof(sub), "%s[%zu]", path, idx);
                if ((rc = expect(c, cn, YAML_MAPPING_NODE, sub)) < 0 ||
                    (rc = check_keys(c, cn, sub, known)) < 0)
                        return rc;
                struct kdev_scn_container *nc =
                        realloc(pod->containers, (pod->n_containers + 1) * sizeof(*nc));
                if (!nc)
                        return kdev_err_set(c->err, ENOMEM, "out of memory");
                pod->containers = nc;
                struct kdev_scn_container *ct = &nc[pod->n_containers++];
                memset(ct, 0, sizeof(*ct));
                ct->init = init;
                yaml_node_t *v = get(c, cn, "name");
                snprintf(sub2, sizeof(sub2), "%s.name", sub);
                if (!v)
                        return fail(c, cn, sub, "missing key \"name\"");
                if ((rc = get_string(c, v, sub2, &ct->name)) < 0)
                        return rc;
                for (size_t k = 0; k + 1 < pod->n_containers; k++)
                        if (strcmp(pod->containers[k].name, ct->name) == 0)
                                return fail(c, v, sub2, "container name \"%s\" used twice in the pod",
                                            ct->name);
                v = get(c, cn, "limits");
                snprintf(sub2, sizeof(sub2), "%s.limits", sub);
                if (v && (rc = parse_limits(c, v, sub2, &ct->limits, &ct->n_limits)) < 0)
                        return rc;
        }
        return 0;
}

static int parse_pod(struct ctx *c, const yaml_node_t *n, const char *path, struct kdev_scn_pod *pod)
{
        static const char *const known[] = {"name", "uid", "initContainers", "containers", NULL};
        int rc;
        if ((rc = expect(c, n, YAML_MAPPING_NODE, path)) < 0 ||
            (rc = check_keys(c, n, path, known)) < 0)
                return rc;
        char sub[256];
        yaml_node_t *v = get(c, n, "name");
        if (!v)
                return fail(c, n, path, "missing key \"name\"");
        snprintf(sub, sizeof(sub), "%s.name", path);
        if ((rc = get_string(c, v, sub, &pod->name)) < 0)
                return rc;
        v = get(c, n, "uid");
        snprintf(sub, sizeof(sub), "%s.uid", path);
        if (v) {
                if ((rc = get_string(c, v, sub, &pod->uid)) < 0)
                        return rc;
        } else {
                char buf[40];
                kdev_scenario_default_uid(pod->name, buf, sizeof(buf));
                if (!(pod->uid = strdup(buf)))
                        return kdev_err_set(c->err, ENOMEM, "out of memory");
        }
        v = get(c, n, "initContainers");
        snprintf(sub, sizeof(sub), "%s.initContainers", path);
        if (v && !is_null(v) && (rc = parse_containers(c, v, sub, true, pod)) < 0)
                return rc;
        size_t n_init = pod->n_containers;
        v = get(c, n, "containers");
        snprintf(sub, sizeof(sub), "%s.containers", path);
        if (!v)
                return fail(c, n, path, "missing key \"containers\"");
        if ((rc = parse_containers(c, v, sub, false, pod)) < 0)
                return rc;
        if (pod->n_containers == n_init)
                return fail(c, v, sub, "a pod needs at least one container");
        return 0;
}

static struct kdev_scn_step *add_step(struct kdev_scenario *scn, enum kdev_scn_kind kind,
                                      const yaml_node_t *n)
{
        struct kdev_scn_step *ns = realloc(scn->steps, (scn->n_steps + 1) * sizeof(*ns));
        if (!ns)
                return NULL;
        scn->steps = ns;
        struct kdev_scn_step *s = &ns[scn->n_steps++];
        memset(s, 0, sizeof(*s));
        s->kind = kind;
        s->line = (int)n->start_mark.line + 1;
        return s;
}

/* exec: "command" or exec: {command: "...", timeout: SEC}. */
static int parse_exec(struct ctx *c, const yaml_node_t *n, const char *path,
                      struct kdev_scn_step *s)
{
        static const char *const known[] = {"command", "timeout", NULL};
        s->timeout_ms = KDEV_SCN_DEFAULT_EXEC_S * 1000u;
        if (n->type == YAML_SCALAR_NODE) {
                if (is_null(n))
                        return fail(c, n, path, "expected a command or a mapping");
                return get_string(c, n, path, &s->command);
        }
        if (n->type != YAML_MAPPING_NODE)
                return fail(c, n, path, "expected a command or a mapping, got %s", kind_name(n));
        int rc = check_keys(c, n, path, known);
        if (rc < 0)
                return rc;
        char sub[256];
        yaml_node_t *v = get(c, n, "command");
        if (!v)
                return fail(c, n, path, "missing key \"command\"");
        snprintf(sub, sizeof(sub), "%s.command", path);
        if (is_null(v))
                return fail(c, v, sub, "must not be empty");
        if ((rc = get_string(c, v, sub, &s->command)) < 0)
                return rc;
        v = get(c, n, "timeout");
        snprintf(sub, sizeof(sub), "%s.timeout", path);
        if (v) {
                if ((rc = get_seconds(c, v, sub, &s->timeout_ms)) < 0)
                        return rc;
                if (s->timeout_ms == 0)
                        return fail(c, v, sub, "must be greater than 0");
        }
        return 0;
}

static bool pod_known(const struct kdev_scenario *scn, const char *name)
{
        for (size_t i = 0; i < scn->n_steps; i++)
                if (scn->steps[i].kind == KDEV_SCN_POD && strcmp(scn->steps[i].pod.name, name) == 0)
                        return true;
        return false;
}

static int parse_steps(struct ctx *c, const yaml_node_t *n, struct kdev_scenario *scn)
{
        int rc = expect(c, n, YAML_SEQUENCE_NODE, "steps");
        if (rc < 0)
                return rc;
        static const char *const known[] = {"wait",  "pod",  "delete", "restart",
                                            "sleep", "exec", NULL};
        size_t idx = 0;
        for (yaml_node_item_t *it = n->data.sequence.items.start; it < n->data.sequence.items.top;
             it++, idx++) {
                yaml_node_t *sn = node(c, *it);
                char path[64], sub[96];
                snprintf(path, sizeof(path), "steps[%zu]", idx);
                if ((rc = expect(c, sn, YAML_MAPPING_NODE, path)) < 0 ||
                    (rc = check_keys(c, sn, path, known)) < 0)
                        return rc;
                size_t nkeys = (size_t)(sn->data.mapping.pairs.top - sn->data.mapping.pairs.start);
                if (nkeys != 1)
                        return fail(c, sn, path,
                                    "a step has exactly one of wait, pod, delete, restart, sleep, "
                                    "exec");
                yaml_node_t *k = node(c, sn->data.mapping.pairs.start->key);
                yaml_node_t *v = node(c, sn->data.mapping.pairs.start->value);
                const char *key = scalar(k);
                snprintf(sub, sizeof(sub), "%s.%s", path, key);
                struct kdev_scn_step *s;
                if (strcmp(key, "wait") == 0) {
                        if (!(s = add_step(scn, KDEV_SCN_WAIT, sn)))
                                return kdev_err_set(c->err, ENOMEM, "out of memory");
                        rc = parse_wait(c, v, sub, &s->wait);
                } else if (strcmp(key, "pod") == 0) {
                        if (!(s = add_step(scn, KDEV_SCN_POD, sn)))
                                return kdev_err_set(c->err, ENOMEM, "out of memory");
                        rc = parse_pod(c, v, sub, &s->pod);
                } else if (strcmp(key, "delete") == 0) {
                        char *name = NULL;
                        if ((rc = get_string(c, v, sub, &name)) < 0)
                                return rc;
                        if (!pod_known(scn, name)) {
                                rc = fail(c, v, sub, "no pod \"%s\" before this step", name);
                                free(name);
                                return rc;
                        }
                        if (!(s = add_step(scn, KDEV_SCN_DELETE, sn))) {
                                free(name);
                                return kdev_err_set(c->err, ENOMEM, "out of memory");
                        }
                        s->name = name;
                } else if (strcmp(key, "restart") == 0) {
                        if (v->type != YAML_SCALAR_NODE ||
                            (strcmp(scalar(v), "true") != 0 && !is_null(v)))
                                return fail(c, v, sub, "expected true");
                        if (!add_step(scn, KDEV_SCN_RESTART, sn))
                                return kdev_err_set(c->err, ENOMEM, "out of memory");
                } else if (strcmp(key, "exec") == 0) {
                        if (!(s = add_step(scn, KDEV_SCN_EXEC, sn)))
                                return kdev_err_set(c->err, ENOMEM, "out of memory");
                        rc = parse_exec(c, v, sub, s);
                } else {
                        if (!(s = add_step(scn, KDEV_SCN_SLEEP, sn)))
                                return kdev_err_set(c->err, ENOMEM, "out of memory");
                        rc = get_seconds(c, v, sub, &s->sleep_ms);
                }
                if (rc < 0)
                        return rc;
        }
        return 0;
}

static int parse_root(struct ctx *c, struct kdev_scenario *scn)
{
        yaml_node_t *root = yaml_document_get_root_node(c->doc);
        if (!root)
                return kdev_err_set(c->err, EINVAL, "%s: empty scenario", c->name);
        static const char *const known[] = {"wait", "pods", "steps", NULL};
        int rc;
        if ((rc = expect(c, root, YAML_MAPPING_NODE, "")) < 0 ||
            (rc = check_keys(c, root, "", known)) < 0)
                return rc;
        yaml_node_t *v = get(c, root, "wait");
        if (v) {
                struct kdev_scn_step *s = add_step(scn, KDEV_SCN_WAIT, v);
                if (!s)
                        return kdev_err_set(c->err, ENOMEM, "out of memory");
                if ((rc = parse_wait(c, v, "wait", &s->wait)) < 0)
                        return rc;
        }
        v = get(c, root, "pods");
        if (v && !is_null(v)) {
                if ((rc = expect(c, v, YAML_SEQUENCE_NODE, "pods")) < 0)
                        return rc;
                size_t idx = 0;
                for (yaml_node_item_t *it = v->data.sequence.items.start;
                     it < v->data.sequence.items.top; it++, idx++) {
                        yaml_node_t *pn = node(c, *it);
                        char path[64];
                        snprintf(path, sizeof(path), "pods[%zu]", idx);
                        struct kdev_scn_step *s = add_step(scn, KDEV_SCN_POD, pn);
                        if (!s)
                                return kdev_err_set(c->err, ENOMEM, "out of memory");
                        if ((rc = parse_pod(c, pn, path, &s->pod)) < 0)
                                return rc;
                }
        }
        v = get(c, root, "steps");
        if (v && !is_null(v) && (rc = parse_steps(c, v, scn)) < 0)
                return rc;
        return 0;
}

int kdev_scenario_parse(const char *text, size_t len, const char *name, struct kdev_scenario *scn,
                        struct kdev_err *err)
{
        memset(scn, 0, sizeof(*scn));
        yaml_parser_t parser;
        yaml_document_t doc;
        if (!yaml_parser_initialize(&parser))
                return kdev_err_set(err, ENOMEM, "out of memory");
        yaml_parser_set_input_string(&parser, (const unsigned char *)text, len);
        if (!yaml_parser_load(&parser, &doc)) {
                int rc = kdev_err_set(err, EINVAL, "%s:%zu:%zu: not YAML: %s", name,
                                      parser.problem_mark.line + 1, parser.problem_mark.column + 1,
                                      parser.problem ? parser.problem : "parse error");
                yaml_parser_delete(&parser);
                return rc;
        }
        struct ctx c = {.doc = &doc, .name = name, .err = err};
        int rc = parse_root(&c, scn);
        yaml_document_delete(&doc);
        yaml_parser_delete(&parser);
        if (rc < 0)
                kdev_scenario_clear(scn);
        return rc;
}

int kdev_scenario_load(const char *path, struct kdev_scenario *scn, struct kdev_err *err)
{
        memset(scn, 0, sizeof(*scn));
        char *buf;
        size_t len;
        int rc = kdev_file_read(path, "scenario file", KDEV_SCENARIO_FILE_MAX, KDEV_FILE_TEXT,
                                &buf, &len, err);
        if (rc < 0)
                return rc;
        rc = kdev_scenario_parse(buf, len, path, scn, err);
        free(buf);
        return rc;
}

static void pod_clear(struct kdev_scn_pod *p)
{
        free(p->name);
        free(p->uid);
        for (size_t i = 0; i < p->n_containers; i++) {
                free(p->containers[i].name);
                for (size_t k = 0; k < p->containers[i].n_limits; k++)
                        free(p->containers[i].limits[k].resource);
                free(p->containers[i].limits);
        }
        free(p->containers);
}

void kdev_scenario_clear(struct kdev_scenario *scn)
{
        if (!scn)
                return;
        for (size_t i = 0; i < scn->n_steps; i++) {
                struct kdev_scn_step *s = &scn->steps[i];
                pod_clear(&s->pod);
                for (size_t k = 0; k < s->wait.n_resources; k++)
                        free(s->wait.resources[k].resource);
                free(s->wait.resources);
                for (size_t k = 0; k < s->wait.n_allocatable; k++)
                        free(s->wait.allocatable[k].resource);
                free(s->wait.allocatable);
                free(s->name);
                free(s->command);
        }
        free(scn->steps);
        memset(scn, 0, sizeof(*scn));
}

void kdev_scenario_default_uid(const char *name, char *buf, size_t size)
{
        uint64_t h = 14695981039346656037ull;
        for (const unsigned char *p = (const unsigned char *)name; *p; p++) {
                h ^= *p;
                h *= 1099511628211ull;
        }
        uint64_t h2 = h * 0x9e3779b97f4a7c15ull;
        snprintf(buf, size, "%08x-%04x-4%03x-8%03x-%012llx", (unsigned)(h >> 32),
                 (unsigned)(h >> 16) & 0xffffu, (unsigned)h & 0xfffu, (unsigned)(h2 >> 52) & 0xfffu,
                 (unsigned long long)(h2 & 0xffffffffffffull));
}
