/* Strict, table-driven YAML configuration reading (see yamlcfg.h). */
#include "config/yamlcfg.h"

#include "common/file.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int kdev_ycfg_read_file(const char *path, char **text, size_t *len, struct kdev_err *err)
{
        return kdev_file_read(path, "config file", KDEV_YCFG_FILE_MAX, KDEV_FILE_TEXT, text, len,
                              err);
}

unsigned kdev_ycfg_line(const yaml_node_t *node)
{
        return (unsigned)node->start_mark.line + 1;
}

unsigned kdev_ycfg_column(const yaml_node_t *node)
{
        return (unsigned)node->start_mark.column + 1;
}

static int syntax_error(const char *file, const yaml_parser_t *p, struct kdev_err *err)
{
        switch (p->error) {
        case YAML_MEMORY_ERROR:
                return kdev_err_set(err, ENOMEM, "%s: out of memory while parsing YAML", file);
        case YAML_READER_ERROR:
                return kdev_err_set(err, EINVAL, "%s: YAML error at byte %zu: %s", file,
                                    p->problem_offset, p->problem ? p->problem : "unknown");
        default:
                break;
        }
        const char *problem = p->problem ? p->problem : "unknown error";
        if (p->context)
                return kdev_err_set(err, EINVAL,
                                    "%s:%zu:%zu: YAML syntax error: %s (%s at line %zu, column "
                                    "%zu)",
                                    file, p->problem_mark.line + 1, p->problem_mark.column + 1,
                                    problem, p->context, p->context_mark.line + 1,
                                    p->context_mark.column + 1);
        return kdev_err_set(err, EINVAL, "%s:%zu:%zu: YAML syntax error: %s", file,
                            p->problem_mark.line + 1, p->problem_mark.column + 1, problem);
}

#define YAML_CORE_PREFIX "tag:yaml.org,2002:"

/* The tag as the user most likely wrote it: "!!int" for the core schema's
 * "tag:yaml.org,2002:int"; others as resolved. Malloc'ed, NULL on ENOMEM. */
static char *tag_text(const yaml_char_t *tag)
{
        const char *t = (const char *)tag;
        size_t pl = strlen(YAML_CORE_PREFIX);
        if (strncmp(t, YAML_CORE_PREFIX, pl) != 0)
                return strdup(t);
        size_t n = strlen(t + pl);
        char *s = malloc(n + 3);
        if (s) {
                memcpy(s, "!!", 2);
                memcpy(s + 2, t + pl, n + 1);
        }
        return s;
}

/* Event pass over the whole stream, before anything is built: stops at the
 * first syntax error or at the first collection opening level
 * KDEV_YCFG_DEPTH_MAX + 1, so that libyaml never scans deeply nested input
 * (its scanner is quadratic in the flow depth). Records the explicit tag of
 * every node of the first document in c->tags (node order = event order, as
 * yaml_parser_load adds nodes); *n_nodes is that document's node count. */
static int prescan(struct kdev_ycfg *c, const char *text, size_t len, size_t *n_nodes,
                   struct kdev_err *err)
{
        yaml_parser_t parser;
        size_t depth = 0, docs = 0, n = 0, cap = 0;
        int rc = 0;

        *n_nodes = 0;
        if (!yaml_parser_initialize(&parser))
                return kdev_err_set(err, ENOMEM, "%s: out of memory", c->file);
        yaml_parser_set_input_string(&parser, (const unsigned char *)text, len);
        for (bool end = false; !end && rc == 0;) {
                yaml_event_t ev;
                if (!yaml_parser_parse(&parser, &ev)) {
                        rc = syntax_error(c->file, &parser, err);
                        break;
                }
                const yaml_char_t *tag = NULL;
                bool node = false;
                switch (ev.type) {
                case YAML_STREAM_END_EVENT:
                        end = true;
                        break;
                case YAML_DOCUMENT_START_EVENT:
                        docs++;
                        break;
                case YAML_SEQUENCE_START_EVENT:
                case YAML_MAPPING_START_EVENT:
                        if (++depth > KDEV_YCFG_DEPTH_MAX) {
                                rc = kdev_err_set(err, EINVAL,
                                                  "%s:%zu:%zu: nesting deeper than %d levels",
                                                  c->file, ev.start_mark.line + 1,
                                                  ev.start_mark.column + 1, KDEV_YCFG_DEPTH_MAX);
                                break;
                        }
                        node = true;
                        tag = ev.type == YAML_SEQUENCE_START_EVENT ? ev.data.sequence_start.tag
                                                                   : ev.data.mapping_start.tag;
                        break;
                case YAML_SEQUENCE_END_EVENT:
                case YAML_MAPPING_END_EVENT:
                        depth--;
                        break;
                case YAML_SCALAR_EVENT:
                        node = true;
                        tag = ev.data.scalar.tag;
                        break;
                default:
                        break;
                }
                if (node && docs == 1) {
                        if (n == cap) {
                                size_t ncap = cap ? 2 * cap : 64;
                                char **nt = realloc(c->tags, ncap * sizeof(*nt));
                                if (!nt) {
                                        rc = kdev_err_set(err, ENOMEM, "out of memory");
                                        yaml_event_delete(&ev);
                                        break;
                                }
                                c->tags = nt;
                                cap = ncap;
                        }
                        c->tags[n] = NULL;
                        n++;
                        if (tag && !(c->tags[n - 1] = tag_text(tag)))
                                rc = kdev_err_set(err, ENOMEM, "out of memory");
                }
                yaml_event_delete(&ev);
        }
        yaml_parser_delete(&parser);
        *n_nodes = n;
        return rc;
}

int kdev_ycfg_parse(struct kdev_ycfg *c, const char *file, const char *text, size_t len,
                    struct kdev_err *err)
{
        yaml_parser_t parser;
        size_t n_tagged = 0;
        int rc = 0;

        memset(c, 0, sizeof(*c));
        c->file = file;
        c->err = err;
        rc = prescan(c, text, len, &n_tagged, err);
        c->n_nodes = n_tagged; /* for kdev_ycfg_done until the document is loaded */
        if (rc < 0)
                return rc;
        if (!yaml_parser_initialize(&parser))
                return kdev_err_set(err, ENOMEM, "%s: out of memory", file);
        yaml_parser_set_input_string(&parser, (const unsigned char *)text, len);
        if (!yaml_parser_load(&parser, &c->doc)) {
                rc = syntax_error(file, &parser, err);
                goto out;
        }
        c->have_doc = true;
        if (!yaml_document_get_root_node(&c->doc)) {
                c->empty = true;
                rc = kdev_err_set(err, EINVAL, "%s: the file is empty (no YAML document)", file);
                goto out;
        }
        yaml_document_t next;
        if (!yaml_parser_load(&parser, &next)) {
                rc = syntax_error(file, &parser, err);
                goto out;
        }
        yaml_node_t *next_root = yaml_document_get_root_node(&next);
        if (next_root) {
                rc = kdev_err_set(err, EINVAL, "%s:%zu:%zu: only one YAML document is allowed",
                                  file, next.start_mark.line + 1, next.start_mark.column + 1);
                yaml_document_delete(&next);
                goto out;
        }
        yaml_document_delete(&next);
        if ((size_t)(c->doc.nodes.top - c->doc.nodes.start) != n_tagged) {
                rc = kdev_err_set(err, EINVAL,
                                  "%s: internal error: %zu YAML nodes loaded, %zu scanned", file,
                                  (size_t)(c->doc.nodes.top - c->doc.nodes.start), n_tagged);
                goto out;
        }
        c->visited = calloc(c->n_nodes ? c->n_nodes : 1, 1);
        if (!c->visited)
                rc = kdev_err_set(err, ENOMEM, "out of memory");
out:
        yaml_parser_delete(&parser);
        return rc;
}

yaml_node_t *kdev_ycfg_root(struct kdev_ycfg *c)
{
        return c->have_doc ? yaml_document_get_root_node(&c->doc) : NULL;
}

void kdev_ycfg_done(struct kdev_ycfg *c)
{
        if (c->have_doc)
                yaml_document_delete(&c->doc);
        c->have_doc = false;
        free(c->visited);
        c->visited = NULL;
        for (size_t i = 0; c->tags && i < c->n_nodes; i++)
                free(c->tags[i]);
        free(c->tags);
        c->tags = NULL;
        c->n_nodes = 0;
}

int kdev_ycfg_fail(struct kdev_ycfg *c, const yaml_node_t *node, const char *fmt, ...)
{
        char msg[KDEV_ERR_MSG_MAX];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(msg, sizeof(msg), fmt, ap);
        va_end(ap);
        if (c->path_len)
                return kdev_err_set(c->err, EINVAL, "%s:%u:%u: %s: %s", c->file,
                                    kdev_ycfg_line(node), kdev_ycfg_column(node), c->path, msg);
        return kdev_err_set(c->err, EINVAL, "%s:%u:%u: %s", c->file, kdev_ycfg_line(node),
                            kdev_ycfg_column(node), msg);
}

size_t kdev_ycfg_path_push(struct kdev_ycfg *c, const char *fmt, ...)
{
        size_t mark = c->path_len;
        size_t room = sizeof(c->path) - c->path_len;
        va_list ap;
        va_start(ap, fmt);
        int n = vsnprintf(c->path + c->path_len, room, fmt, ap);
        va_end(ap);
        if (n < 0)
                n = 0;
        c->path_len += (size_t)n < room ? (size_t)n : room - 1;
        return mark;
}

void kdev_ycfg_path_pop(struct kdev_ycfg *c, size_t mark)
{
        c->path_len = mark;
        c->path[mark] = '\0';
}

static bool is_null_scalar(const yaml_node_t *node)
{
        if (node->type != YAML_SCALAR_NODE || node->data.scalar.style != YAML_PLAIN_SCALAR_STYLE)
                return false;
        const char *v = (const char *)node->data.scalar.value;
        return strcmp(v, "") == 0 || strcmp(v, "~") == 0 || strcmp(v, "null") == 0 ||
               strcmp(v, "Null") == 0 || strcmp(v, "NULL") == 0;
}

/* A short description of what |node| is, for "got ..." messages. */
static void describe(const yaml_node_t *node, char *buf, size_t len)
{
        switch (node->type) {
        case YAML_MAPPING_NODE:
                snprintf(buf, len, "a mapping");
                return;
        case YAML_SEQUENCE_NODE:
                snprintf(buf, len, "a list");
                return;
        case YAML_SCALAR_NODE:
                if (is_null_scalar(node))
                        snprintf(buf, len, "null");
                else
                        snprintf(buf, len, "\"%.200s\"", (const char *)node->data.scalar.value);
                return;
        default:
                snprintf(buf, len, "nothing");
                return;
        }
}

/* Refuses a node with an explicit tag. */
static int check_tag(struct kdev_ycfg *c, const yaml_node_t *node)
{
        size_t i = (size_t)(node - c->doc.nodes.start);
        if (i < c->n_nodes && c->tags && c->tags[i])
                return kdev_ycfg_fail(c, node, "YAML tags are not supported (\"%.100s\")",
                                      c->tags[i]);
        return 0;
}

/* Marks |node| as read; a node reached twice came through a YAML alias. A
 * tagged node is refused. */
static int visit(struct kdev_ycfg *c, const yaml_node_t *node)
{
        size_t i = (size_t)(node - c->doc.nodes.start);
        if (i < c->n_nodes) {
                if (c->visited[i])
                        return kdev_ycfg_fail(c, node,
                                              "YAML anchors and aliases are not supported");
                c->visited[i] = 1;
        }
        return check_tag(c, node);
}

int kdev_ycfg_mapping(struct kdev_ycfg *c, yaml_node_t *node, const struct kdev_ycfg_field *fields,
                      size_t n, void *obj)
{
        char got[256];
        int rc = visit(c, node);
        if (rc < 0)
                return rc;
        if (node->type != YAML_MAPPING_NODE) {
                describe(node, got, sizeof(got));
                return kdev_ycfg_fail(c, node, "must be a mapping, got %s", got);
        }
        /* Bit set of the fields seen; tables are small. */
        bool seen[64] = {false};
        if (n > 64)
                return kdev_ycfg_fail(c, node, "internal error: schema table too large");

        for (yaml_node_pair_t *pr = node->data.mapping.pairs.start;
             pr < node->data.mapping.pairs.top; pr++) {
                yaml_node_t *k = yaml_document_get_node(&c->doc, pr->key);
                yaml_node_t *v = yaml_document_get_node(&c->doc, pr->value);
                if (k->type != YAML_SCALAR_NODE) {
                        describe(k, got, sizeof(got));
                        return kdev_ycfg_fail(c, k, "keys must be strings, got %s", got);
                }
                const char *key = (const char *)k->data.scalar.value;
                size_t f;
                for (f = 0; f < n; f++) {
                        if (strcmp(fields[f].key, key) == 0)
                                break;
                }
                size_t mark = kdev_ycfg_path_push(c, c->path_len ? ".%s" : "%s", key);
                rc = check_tag(c, k);
                if (rc < 0) {
                        kdev_ycfg_path_pop(c, mark);
                        return rc;
                }
                if (f == n) {
                        char expected[512];
                        size_t used = 0;
                        expected[0] = '\0';
                        for (size_t i = 0; i < n && used < sizeof(expected); i++) {
                                int w = snprintf(expected + used, sizeof(expected) - used, "%s%s",
                                                 i ? ", " : "", fields[i].key);
                                if (w > 0)
                                        used += (size_t)w;
                        }
                        rc = kdev_ycfg_fail(c, k, "unknown key (expected one of: %s)", expected);
                        kdev_ycfg_path_pop(c, mark);
                        return rc;
                }
                if (seen[f]) {
                        /* find the first occurrence for the message */
                        unsigned line = 0, col = 0;
                        for (yaml_node_pair_t *q = node->data.mapping.pairs.start; q < pr; q++) {
                                yaml_node_t *qk = yaml_document_get_node(&c->doc, q->key);
                                if (qk->type == YAML_SCALAR_NODE &&
                                    strcmp((const char *)qk->data.scalar.value, key) == 0) {
                                        line = kdev_ycfg_line(qk);
                                        col = kdev_ycfg_column(qk);
                                        break;
                                }
                        }
                        rc = kdev_ycfg_fail(c, k, "duplicate key (first at line %u, column %u)",
                                            line, col);
                        kdev_ycfg_path_pop(c, mark);
                        return rc;
                }
                seen[f] = true;
                rc = fields[f].fn(c, v, obj);
                kdev_ycfg_path_pop(c, mark);
                if (rc < 0)
                        return rc;
        }
        for (size_t f = 0; f < n; f++) {
                if (fields[f].required && !seen[f])
                        return kdev_ycfg_fail(c, node, "missing required key \"%s\"",
                                              fields[f].key);
        }
        return 0;
}

int kdev_ycfg_list(struct kdev_ycfg *c, yaml_node_t *node, size_t min, size_t max,
                   size_t elem_size, void **items, size_t *n_items, kdev_ycfg_fn fn)
{
        char got[256];
        int rc = visit(c, node);
        if (rc < 0)
                return rc;
        if (node->type != YAML_SEQUENCE_NODE) {
                describe(node, got, sizeof(got));
                return kdev_ycfg_fail(c, node, "must be a list, got %s", got);
        }
        size_t n = (size_t)(node->data.sequence.items.top - node->data.sequence.items.start);
        if (n < min)
                return kdev_ycfg_fail(c, node, "must have at least %zu entr%s", min,
                                      min == 1 ? "y" : "ies");
        if (n > max)
                return kdev_ycfg_fail(c, node, "must have at most %zu entries, got %zu", max, n);
        if (n == 0)
                return 0;
        char *arr = calloc(n, elem_size);
        if (!arr)
                return kdev_err_set(c->err, ENOMEM, "out of memory");
        *items = arr;
        *n_items = n;
        for (size_t i = 0; i < n; i++) {
                yaml_node_t *item = yaml_document_get_node(&c->doc,
                                                           node->data.sequence.items.start[i]);
                size_t mark = kdev_ycfg_path_push(c, "[%zu]", i);
                rc = fn(c, item, arr + i * elem_size);
                kdev_ycfg_path_pop(c, mark);
                if (rc < 0)
                        return rc;
        }
        return 0;
}

int kdev_ycfg_string(struct kdev_ycfg *c, yaml_node_t *node, char **out)
{
        char got[256];
        int rc = visit(c, node);
        if (rc < 0)
                return rc;
        if (node->type != YAML_SCALAR_NODE || is_null_scalar(node)) {
                describe(node, got, sizeof(got));
                return kdev_ycfg_fail(c, node, "must be a string, got %s", got);
        }
        char *s = strdup((const char *)node->data.scalar.value);
        if (!s)
                return kdev_err_set(c->err, ENOMEM, "out of memory");
        free(*out);
        *out = s;
        return 0;
}

int kdev_ycfg_uint(struct kdev_ycfg *c, yaml_node_t *node, unsigned min, unsigned max,
                   unsigned *out)
{
        char got[256];
        int rc = visit(c, node);
        if (rc < 0)
                return rc;
        describe(node, got, sizeof(got));
        if (node->type == YAML_SCALAR_NODE && node->data.scalar.style != YAML_PLAIN_SCALAR_STYLE)
                return kdev_ycfg_fail(c, node,
                                      "must be an integer between %u and %u, got the quoted "
                                      "string %s",
                                      min, max, got);
        if (node->type != YAML_SCALAR_NODE)
                return kdev_ycfg_fail(c, node, "must be an integer between %u and %u, got %s",
                                      min, max, got);
        const char *v = (const char *)node->data.scalar.value;
        unsigned long long val = 0;
        bool ok = *v != '\0';
        for (const char *p = v; *p && ok; p++) {
                if (*p < '0' || *p > '9' || val > UINT_MAX)
                        ok = false;
                else
                        val = val * 10 + (unsigned)(*p - '0');
        }
        if (!ok || val < min || val > max)
                return kdev_ycfg_fail(c, node, "must be an integer between %u and %u, got %s",
                                      min, max, got);
        *out = (unsigned)val;
        return 0;
}

yaml_node_t *kdev_ycfg_lookup(struct kdev_ycfg *c, yaml_node_t *node, const char *key)
{
        if (node->type != YAML_MAPPING_NODE)
                return NULL;
        for (yaml_node_pair_t *pr = node->data.mapping.pairs.start;
             pr < node->data.mapping.pairs.top; pr++) {
                yaml_node_t *k = yaml_document_get_node(&c->doc, pr->key);
                if (k->type == YAML_SCALAR_NODE &&
                    strcmp((const char *)k->data.scalar.value, key) == 0)
                        return yaml_document_get_node(&c->doc, pr->value);
        }
        return NULL;
}
