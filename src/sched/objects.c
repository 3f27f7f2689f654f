/* Objects from JSON/YAML files and Kubernetes quantities (sched/objects.h). */
#include "sched/objects.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <yaml.h>

#include "common/file.h"

#define OBJECTS_FILE_MAX (16u << 20)
/* |mantissa| bound kdev keeps (the CEL parser's: 36 significant digits). */
#define QTY_LIMIT ((__int128)1000000000000000000 * 1000000000000000000)

static __int128 pow10i(int n)
{
        __int128 p = 1;
        while (n-- > 0)
                p *= 10;
        return p;
}

/* Kubernetes rounds a parsed quantity up to nano units. */
static void round_nano(struct kdev_cel_quantity *q)
{
        if (q->exponent >= -9)
                return;
        int shift = -9 - q->exponent;
        if (shift > 38) {
                q->mantissa = q->mantissa > 0 ? 1 : 0;
        } else {
                __int128 d = pow10i(shift);
                __int128 r = q->mantissa / d;
                if (q->mantissa > 0 && q->mantissa % d)
                        r++;
                q->mantissa = r;
        }
        q->exponent = -9;
}

static enum kdev_qty_format format_of(const char *s)
{
        if (strchr(s, 'i'))
                return KDEV_QTY_BINARY_SI;
        for (const char *p = s; *p; p++) {
                if (*p != 'e' && *p != 'E')
                        continue;
                const char *d = p + 1;
                if (*d == '+' || *d == '-')
                        d++;
                if (*d >= '0' && *d <= '9')
                        return KDEV_QTY_DECIMAL_EXPONENT;
        }
        return KDEV_QTY_DECIMAL_SI;
}

int kdev_qty_from_json(const json_t *v, struct kdev_qty *out, struct kdev_err *err)
{
        char num[64];
        const char *s;
        if (json_is_string(v)) {
                s = json_string_value(v);
        } else if (json_is_integer(v)) {
                snprintf(num, sizeof(num), "%" JSON_INTEGER_FORMAT, json_integer_value(v));
                s = num;
        } else if (json_is_real(v)) {
                snprintf(num, sizeof(num), "%.15g", json_real_value(v));
                s = num;
        } else {
                const char *t = json_is_object(v)   ? "an object"
                                : json_is_array(v)  ? "an array"
                                : json_is_null(v)   ? "null"
                                                    : "a boolean";
                return kdev_err_set(err, EINVAL, "must be a quantity (a string or a number), not %s",
                                    t);
        }
        memset(out, 0, sizeof(*out));
        int rc = kdev_cel_quantity_parse(s, &out->q, err);
        if (rc < 0)
                return rc;
        round_nano(&out->q);
        out->format = format_of(s);
        return 0;
}

struct kdev_qty kdev_qty_int(int64_t n)
{
        struct kdev_qty q = {{(__int128)n, 0}, KDEV_QTY_DECIMAL_SI};
        return q;
}

static char *i128_text(__int128 v, char *buf, size_t size)
{
        char tmp[48];
        size_t n = 0;
        bool neg = v < 0;
        unsigned __int128 u = neg ? (unsigned __int128)(-(v + 1)) + 1 : (unsigned __int128)v;
        do {
                tmp[n++] = (char)('0' + (int)(u % 10));
                u /= 10;
        } while (u);
        size_t o = 0;
        if (neg && o + 1 < size)
                buf[o++] = '-';
        while (n && o + 1 < size)
                buf[o++] = tmp[--n];
        buf[o] = 0;
        return buf;
}

/* The integer value of |q| when it is whole, else false. */
static bool whole(const struct kdev_cel_quantity *q, __int128 *v)
{
        __int128 m = q->mantissa;
        int e = q->exponent;
        while (e < 0) {
                if (m % 10)
                        return false;
                m /= 10;
                e++;
        }
        while (e > 0) {
                if (m > QTY_LIMIT || m < -QTY_LIMIT)
                        return false;
                m *= 10;
                e--;
        }
        *v = m;
        return true;
}

char *kdev_qty_format(const struct kdev_qty *q, char *buf, size_t size)
{
        char digits[48];
        __int128 m = q->q.mantissa;
        int e = q->q.exponent;
        if (m == 0) {
                snprintf(buf, size, "0");
                return buf;
        }
        __int128 v;
        if (q->format == KDEV_QTY_BINARY_SI && whole(&q->q, &v) && (v >= 1024 || v <= -1024)) {
                static const char *const bin[] = {"", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei"};
                int times = 0;
                while (times < 6 && v % 1024 == 0) {
                        v /= 1024;
                        times++;
                }
                snprintf(buf, size, "%s%s", i128_text(v, digits, sizeof(digits)), bin[times]);
                return buf;
        }
        while (m % 10 == 0) {
                m /= 10;
                e++;
        }
        int r = ((e % 3) + 3) % 3;
        m *= pow10i(r);
        e -= r;
        i128_text(m, digits, sizeof(digits));
        if (q->format == KDEV_QTY_DECIMAL_EXPONENT) {
                if (e == 0)
                        snprintf(buf, size, "%s", digits);
                else
                        snprintf(buf, size, "%se%d", digits, e);
                return buf;
        }
        static const char *const si[] = {"n", "u", "m", "", "k", "M", "G", "T", "P", "E"};
        if (e >= -9 && e <= 18)
                snprintf(buf, size, "%s%s", digits, si[(e + 9) / 3]);
        else
                snprintf(buf, size, "%se%d", digits, e);
        return buf;
}

int kdev_qty_value(const struct kdev_qty *q, int64_t *value, bool *integer)
{
        /* milli = ceil(q * 1000) */
        __int128 m = q->q.mantissa;
        int e = q->q.exponent + 3;
        __int128 milli;
        if (e >= 0) {
                /* an int64 value is below 10^19, its milli-value below 10^22 */
                if (e > 22 || m > pow10i(22 - e) || m < -pow10i(22 - e))
                        return -ERANGE;
                milli = m * pow10i(e);
        } else {
                __int128 d = pow10i(-e);
                milli = m / d;
                if (m > 0 && m % d)
                        milli++;
        }
        __int128 val = milli / 1000;
        if (milli > 0 && milli % 1000)
                val++;
        if (val > INT64_MAX || val < INT64_MIN)
                return -ERANGE;
        *value = (int64_t)val;
        if (integer)
                *integer = milli % 1000 == 0;
        return 0;
}

int kdev_qty_cmp(const struct kdev_qty *a, const struct kdev_qty *b)
{
        return kdev_cel_quantity_cmp(&a->q, &b->q);
}

int kdev_qty_add(struct kdev_qty *a, const struct kdev_qty *b)
{
        if (a->q.mantissa == 0)
                a->format = b->format;
        struct kdev_cel_quantity x = a->q, y = b->q;
        while (x.exponent > y.exponent) {
                if (x.mantissa > QTY_LIMIT || x.mantissa < -QTY_LIMIT)
                        return -ERANGE;
                x.mantissa *= 10;
                x.exponent--;
        }
        while (y.exponent > x.exponent) {
                if (y.mantissa > QTY_LIMIT || y.mantissa < -QTY_LIMIT)
                        return -ERANGE;
                y.mantissa *= 10;
                y.exponent--;
        }
        a->q.mantissa = x.mantissa + y.mantissa;
        a->q.exponent = x.exponent;
        return 0;
}

/* ---- YAML/JSON documents --------------------------------------------- */

static json_t *yaml_scalar(const yaml_node_t *n)
{
        const char *s = (const char *)n->data.scalar.value;
        size_t len = n->data.scalar.length;
        if (n->data.scalar.style == YAML_PLAIN_SCALAR_STYLE) {
                if (len == 0 || !strcmp(s, "~") || !strcmp(s, "null") || !strcmp(s, "Null") ||
                    !strcmp(s, "NULL"))
                        return json_null();
                if (!strcmp(s, "true") || !strcmp(s, "True") || !strcmp(s, "TRUE"))
                        return json_true();
                if (!strcmp(s, "false") || !strcmp(s, "False") || !strcmp(s, "FALSE"))
                        return json_false();
                const char *p = s;
                if (*p == '-' || *p == '+')
                        p++;
                bool digits = *p != 0;
                for (const char *c = p; *c; c++)
                        digits = digits && *c >= '0' && *c <= '9';
                if (digits && len < 19)
                        return json_integer(strtoll(s, NULL, 10));
        }
        return json_stringn(s, len);
}

/* Values one document may expand to: aliases can repeat a subtree, and a few
 * nested ones would otherwise expand a small file into billions of values. */
#define YAML_VALUES_MAX 1000000

static json_t *yaml_to_json(yaml_document_t *doc, yaml_node_t *n, int depth, size_t *budget)
{
        if (!n || depth > 64 || *budget == 0)
                return NULL;
        --*budget;
        switch (n->type) {
        case YAML_SCALAR_NODE:
                return yaml_scalar(n);
        case YAML_SEQUENCE_NODE: {
                json_t *a = json_array();
                for (yaml_node_item_t *i = n->data.sequence.items.start;
                     a && i < n->data.sequence.items.top; i++) {
                        json_t *v = yaml_to_json(doc, yaml_document_get_node(doc, *i), depth + 1,
                                                 budget);
                        if (!v || json_array_append_new(a, v) < 0) {
                                json_decref(a);
                                return NULL;
                        }
                }
                return a;
        }
        case YAML_MAPPING_NODE: {
                json_t *o = json_object();
                for (yaml_node_pair_t *p = n->data.mapping.pairs.start;
                     o && p < n->data.mapping.pairs.top; p++) {
                        yaml_node_t *k = yaml_document_get_node(doc, p->key);
                        if (!k || k->type != YAML_SCALAR_NODE) {
                                json_decref(o);
                                return NULL;
                        }
                        json_t *v = yaml_to_json(doc, yaml_document_get_node(doc, p->value),
                                                 depth + 1, budget);
                        if (!v || json_object_setn_new(o, (const char *)k->data.scalar.value,
                                                       k->data.scalar.length, v) < 0) {
                                json_decref(o);
                                return NULL;
                        }
                }
                return o;
        }
        default:
                return NULL;
        }
}

static int add_document(json_t *all, json_t *doc, const char *name, size_t idx,
                        struct kdev_err *err)
{
        if (!json_is_object(doc))
                return kdev_err_set(err, EINVAL, "%s: document %zu is not an object", name, idx + 1);
        json_t *items = json_object_get(doc, "items");
        const char *kind = json_string_value(json_object_get(doc, "kind"));
        if (json_is_array(items) && (!kind || strlen(kind) >= 4) &&
            (!kind || !strcmp(kind + strlen(kind) - 4, "List"))) {
                size_t i;
                json_t *it;
                json_array_foreach(items, i, it)
                {
                        if (!json_is_object(it))
                                return kdev_err_set(err, EINVAL,
                                                    "%s: document %zu: items[%zu] is not an object",
                                                    name, idx + 1, i);
                        json_array_append(all, it);
                }
                return 0;
        }
        json_array_append(all, doc);
        return 0;
}

int kdev_objects_parse(const char *text, size_t len, const char *name, json_t **out,
                       struct kdev_err *err)
{
        *out = NULL;
        json_t *all = json_array();
        if (!all)
                return kdev_err_set(err, ENOMEM, "out of memory");
        size_t skip = 0;
        while (skip < len && (text[skip] == ' ' || text[skip] == '\n' || text[skip] == '\t' ||
                              text[skip] == '\r'))
                skip++;
        if (skip < len && (text[skip] == '{' || text[skip] == '[')) {
                json_error_t je;
                json_t *doc = json_loadb(text, len, JSON_REJECT_DUPLICATES, &je);
                if (!doc) {
                        json_decref(all);
                        return kdev_err_set(err, EINVAL, "%s:%d:%d: %s", name, je.line, je.column,
                                            je.text);
                }
                int rc = 0;
                if (json_is_array(doc)) {
                        size_t i;
                        json_t *d;
                        json_array_foreach(doc, i, d) if (rc == 0) rc =
                                add_document(all, d, name, i, err);
                } else {
                        rc = add_document(all, doc, name, 0, err);
                }
                json_decref(doc);
                if (rc < 0) {
                        json_decref(all);
                        return rc;
                }
                *out = all;
                return 0;
        }
        yaml_parser_t parser;
        if (!yaml_parser_initialize(&parser)) {
                json_decref(all);
                return kdev_err_set(err, ENOMEM, "out of memory");
        }
        yaml_parser_set_input_string(&parser, (const unsigned char *)text, len);
        int rc = 0;
        for (size_t idx = 0;; idx++) {
                yaml_document_t doc;
                if (!yaml_parser_load(&parser, &doc)) {
                        rc = kdev_err_set(err, EINVAL, "%s:%zu:%zu: %s", name,
                                          parser.problem_mark.line + 1,
                                          parser.problem_mark.column + 1,
                                          parser.problem ? parser.problem : "invalid YAML");
                        break;
                }
                yaml_node_t *root = yaml_document_get_root_node(&doc);
                if (!root) {
                        yaml_document_delete(&doc);
                        break;
                }
                size_t budget = YAML_VALUES_MAX;
                json_t *j = yaml_to_json(&doc, root, 0, &budget);
                yaml_document_delete(&doc);
                if (!j) {
                        rc = kdev_err_set(err, EINVAL,
                                          "%s: document %zu: unsupported YAML (a non-scalar key, "
                                          "nesting deeper than 64 or more than %d values)",
                                          name, idx + 1, YAML_VALUES_MAX);
                        break;
                }
                if (json_is_null(j)) {
                        json_decref(j);
                        continue;
                }
                rc = add_document(all, j, name, idx, err);
                json_decref(j);
                if (rc < 0)
                        break;
        }
        yaml_parser_delete(&parser);
        if (rc < 0) {
                json_decref(all);
                return rc;
        }
        *out = all;
        return 0;
}

int kdev_objects_load(const char *path, json_t **out, struct kdev_err *err)
{
        char *text = NULL;
        size_t len = 0;
        *out = NULL;
        int rc = kdev_file_read(path, "object file", OBJECTS_FILE_MAX, KDEV_FILE_TEXT, &text, &len, err);
        if (rc < 0)
                return rc;
        rc = kdev_objects_parse(text, len, path, out, err);
        free(text);
        return rc;
}

int kdev_objects_load_all(char *const *paths, size_t n, json_t **out, struct kdev_err *err)
{
        *out = NULL;
        json_t *all = json_array();
        if (!all)
                return kdev_err_set(err, ENOMEM, "out of memory");
        for (size_t i = 0; i < n; i++) {
                json_t *objs = NULL;
                int rc = kdev_objects_load(paths[i], &objs, err);
                if (rc < 0) {
                        json_decref(all);
                        return rc;
                }
                json_array_extend(all, objs);
                json_decref(objs);
        }
        *out = all;
        return 0;
}

char *kdev_object_ref(const json_t *obj, char *buf, size_t size)
{
        const json_t *md = json_object_get(obj, "metadata");
        const char *ns = json_string_value(json_object_get(md, "namespace"));
        const char *name = json_string_value(json_object_get(md, "name"));
        snprintf(buf, size, "%s/%s", ns && *ns ? ns : "default", name ? name : "");
        return buf;
}
