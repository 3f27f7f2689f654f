/* The CEL interpreter for device selectors (cel.h): a walk over the
 * compiled node array with values on the C stack and a per-evaluation
 * arena, CEL's error values and the commutative absorption of && and ||
 * (google/cel-spec doc/langdef.md, "Logical Operators"), heterogeneous
 * equality, the device maps of dynamic-resource-allocation cel/compile.go
 * (an unknown domain is an empty map; a missing name is `no such key:
 * <name>`), Kubernetes' quantity and semver functions (k8s.io/apiserver
 * pkg/cel/library quantity.go, semverlib.go) and a runtime cost tracker with
 * cel-go's limit error. */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cel/cel_internal.h"

typedef struct kdev_cel__val val;

struct chunk {
        struct chunk *next;
        size_t cap, used;
        _Alignas(16) char data[];
};

struct ctx {
        const struct kdev_cel_program *p;
        const struct kdev_cel_device *dev;
        uint64_t cost, limit;
        bool cancelled, oom;
        size_t sused;
        struct chunk *chunks;
        struct kdev_cel__val vars[KDEV_CEL__MAX_VARS]; /* cel.bind */
        _Alignas(16) char stack[2048];
};

static const char E_CANCEL[] = "operation cancelled: actual cost limit exceeded";
static const char E_OOM[] = "out of memory";
static const char E_OVERLOAD[] = "no such overload";
static const char E_OVERFLOW[] = "integer overflow";

static void *ar_alloc(struct ctx *c, size_t n)
{
        n = (n + 15) & ~(size_t)15;
        if (c->sused + n <= sizeof(c->stack)) {
                void *r = c->stack + c->sused;
                c->sused += n;
                return r;
        }
        if (c->chunks && c->chunks->used + n <= c->chunks->cap) {
                void *r = c->chunks->data + c->chunks->used;
                c->chunks->used += n;
                return r;
        }
        size_t cap = n > 8192 ? n : 8192;
        struct chunk *ch = malloc(sizeof(*ch) + cap);
        if (!ch) {
                c->oom = true;
                return NULL;
        }
        ch->next = c->chunks;
        ch->cap = cap;
        ch->used = n;
        c->chunks = ch;
        return ch->data;
}

static val verr(const char *msg)
{
        val v = {.t = T_ERROR};
        v.err = msg;
        return v;
}

static val errf(struct ctx *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static val errf(struct ctx *c, const char *fmt, ...)
{
        char buf[KDEV_ERR_MSG_MAX];
        va_list ap;
        va_start(ap, fmt);
        int n = vsnprintf(buf, sizeof(buf), fmt, ap);
        va_end(ap);
        if (n < 0)
                n = 0;
        if ((size_t)n >= sizeof(buf))
                n = sizeof(buf) - 1;
        char *m = ar_alloc(c, (size_t)n + 1);
        if (!m)
                return verr(E_OOM);
        memcpy(m, buf, (size_t)n + 1);
        return verr(m);
}

static val vbool(bool b)
{
        val v = {.t = T_BOOL};
        v.b = b;
        return v;
}

static val vint(int64_t i)
{
        val v = {.t = T_INT};
        v.i = i;
        return v;
}

static val vstr(const char *s, size_t n)
{
        val v = {.t = T_STRING};
        v.str.s = s;
        v.str.n = n;
        return v;
}

/* adds |n| to the cost; false once the limit is passed */
static bool spend(struct ctx *c, uint64_t n)
{
        c->cost += n;
        if (c->cost > c->limit)
                c->cancelled = true;
        return !c->cancelled;
}

static uint64_t str_cost(size_t n)
{
        return (n + 9) / 10; /* cel-go's string cost factor 0.1 per byte */
}

/* ---- the device ----------------------------------------------------- */

/* entry |i| of the device's attributes (|cap| false) or capacities: its
 * domain (the driver's for none) and name */
static const char *entry_domain(const struct ctx *c, bool cap, size_t i)
{
        const char *d = cap ? c->dev->capacity[i].domain : c->dev->attributes[i].domain;
        return d ? d : c->dev->driver ? c->dev->driver : "";
}

static const char *entry_name(const struct ctx *c, bool cap, size_t i)
{
        const char *n = cap ? c->dev->capacity[i].name : c->dev->attributes[i].name;
        return n ? n : "";
}

static size_t n_entries(const struct ctx *c, bool cap)
{
        return cap ? c->dev->n_capacity : c->dev->n_attributes;
}

static bool eqn(const char *z, const char *s, size_t n)
{
        return strncmp(z, s, n) == 0 && z[n] == 0;
}

/* the index of the entry |dom|/|name|, or -1 */
static ptrdiff_t find_entry(const struct ctx *c, bool cap, const char *dom, size_t dn, const char *name, size_t nn)
{
        for (size_t i = 0; i < n_entries(c, cap); i++)
                if (eqn(entry_name(c, cap, i), name, nn) && eqn(entry_domain(c, cap, i), dom, dn))
                        return (ptrdiff_t)i;
        return -1;
}

static val attr_val(struct ctx *c, const struct kdev_cel_attribute *a)
{
        switch (a->type) {
        case KDEV_CEL_ATTR_INT: return vint(a->i);
        case KDEV_CEL_ATTR_BOOL: return vbool(a->b);
        case KDEV_CEL_ATTR_STRING: return vstr(a->s ? a->s : "", a->s ? strlen(a->s) : 0);
        case KDEV_CEL_ATTR_VERSION: {
                val v = {.t = T_SEMVER};
                struct kdev_err e;
                const char *s = a->s ? a->s : "";
                if (kdev_cel_semver_parse(s, strlen(s), &v.sv, &e) < 0)
                        return errf(c, "attribute %s: parse semantic version: %s", a->name, e.msg);
                return v;
        }
        }
        return verr(E_OVERLOAD);
}

/* the number of distinct domains of attributes (|cap| false) or capacities */
static size_t count_domains(const struct ctx *c, bool cap)
{
        size_t k = 0;
        for (size_t i = 0; i < n_entries(c, cap); i++) {
                bool seen = false;
                for (size_t j = 0; j < i && !seen; j++)
                        seen = !strcmp(entry_domain(c, cap, i), entry_domain(c, cap, j));
                k += !seen;
        }
        return k;
}

static size_t count_in_domain(const struct ctx *c, bool cap, const char *dom, size_t dn)
{
        size_t k = 0;
        for (size_t i = 0; i < n_entries(c, cap); i++)
                k += eqn(entry_domain(c, cap, i), dom, dn);
        return k;
}

/* ---- equality and order ---------------------------------------------- */

static bool is_numv(int t)
{
        return t == T_INT || t == T_UINT || t == T_DOUBLE;
}

/* numeric comparison across int, uint, double: -1, 0, 1, or 2 (NaN) */
static int num_cmp(const val *a, const val *b)
{
        if (a->t == b->t) {
                switch (a->t) {
                case T_INT: return (a->i > b->i) - (a->i < b->i);
                case T_UINT: return (a->u > b->u) - (a->u < b->u);
                default: break;
                }
        }
        if (a->t == T_DOUBLE || b->t == T_DOUBLE) {
                double x = a->t == T_DOUBLE ? a->d : a->t == T_INT ? (double)a->i : (double)a->u;
                double y = b->t == T_DOUBLE ? b->d : b->t == T_INT ? (double)b->i : (double)b->u;
                if (isnan(x) || isnan(y))
                        return 2;
                return (x > y) - (x < y);
        }
        if (a->t == T_INT) /* int vs uint */
                return a->i < 0 ? -1 : ((uint64_t)a->i > b->u) - ((uint64_t)a->i < b->u);
        return b->i < 0 ? 1 : (a->u > (uint64_t)b->i) - (a->u < (uint64_t)b->i);
}

static bool map_lookup(struct ctx *c, const val *m, const val *k, val *out);
static bool equal(struct ctx *c, const val *a, const val *b);

static bool map_equal(struct ctx *c, const val *a, const val *b)
{
        if (a->t != T_MAP || b->t != T_MAP) /* the device's maps: equal only to themselves */
                return a->t == b->t && a->str.n == b->str.n &&
                       (a->str.n == 0 || !memcmp(a->str.s, b->str.s, a->str.n));
        if (a->list.n != b->list.n)
                return false;
        for (size_t i = 0; i < a->list.n; i++) {
                val w;
                if (!map_lookup(c, b, &a->list.v[2 * i], &w) || !equal(c, &a->list.v[2 * i + 1], &w))
                        return false;
        }
        return true;
}

/* CEL's heterogeneous equality: values of different types are unequal,
 * numbers compare by value across int, uint and double */
static bool equal(struct ctx *c, const val *a, const val *b)
{
        if (is_numv(a->t) && is_numv(b->t))
                return num_cmp(a, b) == 0;
        bool am = a->t == T_MAP || (a->t >= T_ATTR_OUTER && a->t <= T_CAP_INNER);
        bool bm = b->t == T_MAP || (b->t >= T_ATTR_OUTER && b->t <= T_CAP_INNER);
        if (am && bm)
                return map_equal(c, a, b);
        if (a->t != b->t)
                return false;
        switch (a->t) {
        case T_NULL: return true;
        case T_BOOL: return a->b == b->b;
        case T_STRING: return a->str.n == b->str.n && !memcmp(a->str.s, b->str.s, a->str.n);
        case T_QUANTITY: return kdev_cel_quantity_cmp(&a->q, &b->q) == 0;
        case T_SEMVER: return kdev_cel_semver_cmp(&a->sv, &b->sv) == 0;
        case T_DEVICE: return true;
        case T_OPTIONAL: return a->opt == b->opt || (a->opt && b->opt && equal(c, a->opt, b->opt));
        case T_LIST:
                if (a->list.n != b->list.n)
                        return false;
                for (size_t i = 0; i < a->list.n; i++)
                        if (!equal(c, &a->list.v[i], &b->list.v[i]))
                                return false;
                return true;
        default: return false;
        }
}

static bool map_lookup(struct ctx *c, const val *m, const val *k, val *out)
{
        for (size_t i = 0; i < m->list.n; i++)
                if (equal(c, &m->list.v[2 * i], k)) {
                        *out = m->list.v[2 * i + 1];
                        return true;
                }
        return false;
}

/* text of a key in `no such key: <key>` (strings unquoted, as cel-go) */
static val no_such_key(struct ctx *c, const val *k)
{
        switch (k->t) {
        case T_STRING: return errf(c, "no such key: %.*s", (int)k->str.n, k->str.s);
        case T_INT: return errf(c, "no such key: %lld", (long long)k->i);
        case T_UINT: return errf(c, "no such key: %llu", (unsigned long long)k->u);
        case T_BOOL: return errf(c, "no such key: %s", k->b ? "true" : "false");
        default: return errf(c, "no such key: <%s>", kdev_cel__type_name(k->t));
        }
}

/* m[k] and m.k for every map shape */
static val map_get(struct ctx *c, const val *m, const val *k)
{
        switch (m->t) {
        case T_ATTR_OUTER:
        case T_CAP_OUTER: {
                if (k->t != T_STRING)
                        return no_such_key(c, k);
                val v = {.t = m->t == T_ATTR_OUTER ? T_ATTR_INNER : T_CAP_INNER};
                v.str = k->str; /* unknown domains: an empty map, never an error */
                return v;
        }
        case T_ATTR_INNER:
        case T_CAP_INNER: {
                bool cap = m->t == T_CAP_INNER;
                ptrdiff_t i = k->t == T_STRING ? find_entry(c, cap, m->str.s, m->str.n, k->str.s, k->str.n) : -1;
                if (i < 0)
                        return no_such_key(c, k);
                if (!cap)
                        return attr_val(c, &c->dev->attributes[i]);
                val v = {.t = T_QUANTITY};
                v.q = c->dev->capacity[i].value;
                return v;
        }
        case T_MAP: {
                val v;
                return map_lookup(c, m, k, &v) ? v : no_such_key(c, k);
        }
        default: return verr(E_OVERLOAD);
        }
}

static bool map_has(struct ctx *c, const val *m, const val *k)
{
        switch (m->t) {
        case T_ATTR_OUTER:
        case T_CAP_OUTER:
                return k->t == T_STRING && count_in_domain(c, m->t == T_CAP_OUTER, k->str.s, k->str.n) > 0;
        case T_ATTR_INNER:
        case T_CAP_INNER:
                return k->t == T_STRING &&
                       find_entry(c, m->t == T_CAP_INNER, m->str.s, m->str.n, k->str.s, k->str.n) >= 0;
        case T_MAP: {
                val v;
                return map_lookup(c, m, k, &v);
        }
        default: return false;
        }
}

static bool is_mapv(int t)
{
        return t == T_MAP || (t >= T_ATTR_OUTER && t <= T_CAP_INNER);
}

/* ---- functions ------------------------------------------------------ */

static val semver_of(struct ctx *c, const val *s, bool normalize)
{
        const char *p = s->str.s;
        size_t n = s->str.n;
        if (normalize) {
                /* strip a leading v, fill a missing minor/patch with 0, drop
                 * leading zeros of the numbers (semverlib normalizeVersion) */
                if (n && p[0] == 'v') {
                        p++;
                        n--;
                }
                size_t core = 0;
                while (core < n && p[core] != '-' && p[core] != '+')
                        core++;
                char *o = ar_alloc(c, n + 8);
                if (!o)
                        return verr(E_OOM);
                size_t k = 0, parts = 1;
                bool lead = true;
                for (size_t i = 0; i < core; i++) {
                        if (p[i] == '.') {
                                if (lead && k && o[k - 1] == '.')
                                        o[k++] = '0';
                                parts++;
                                lead = true;
                                o[k++] = '.';
                                continue;
                        }
                        if (lead && p[i] == '0' && i + 1 < core && p[i + 1] != '.')
                                continue;
                        lead = false;
                        o[k++] = p[i];
                }
                for (; parts < 3; parts++) {
                        o[k++] = '.';
                        o[k++] = '0';
                }
                memcpy(o + k, p + core, n - core);
                k += n - core;
                p = o;
                n = k;
        }
        val v = {.t = T_SEMVER};
        struct kdev_err e;
        if (kdev_cel_semver_parse(p, n, &v.sv, &e) < 0)
                return errf(c, "%s", e.msg);
        return v;
}

static size_t utf8_len(const char *s, size_t n)
{
        size_t k = 0;
        for (size_t i = 0; i < n; i++)
                k += ((unsigned char)s[i] & 0xC0) != 0x80;
        return k;
}

static val do_matches(struct ctx *c, const struct kdev_cel__node *nd, const val *s, const val *pat)
{
        if (!spend(c, 1 + (s->str.n + 3) / 4))
                return verr(E_CANCEL);
        if (nd->regex >= 0)
                return vbool(regexec(&c->p->regex[nd->regex], s->str.s, 0, NULL, 0) == 0);
        regex_t re;
        struct kdev_err e;
        if (kdev_cel__regcomp(&re, pat->str.s, pat->str.n, &e) < 0)
                return errf(c, "%s", e.msg);
        bool m = regexec(&re, s->str.s, 0, NULL, 0) == 0;
        regfree(&re);
        return vbool(m);
}

static val arith(int fn, const val *a, const val *b)
{
        if (a->t == T_INT) {
                int64_t r, x = a->i, y = b->i;
                switch (fn) {
                case F_ADD: if (__builtin_add_overflow(x, y, &r)) return verr(E_OVERFLOW); break;
                case F_SUB: if (__builtin_sub_overflow(x, y, &r)) return verr(E_OVERFLOW); break;
                case F_MUL: if (__builtin_mul_overflow(x, y, &r)) return verr(E_OVERFLOW); break;
                case F_DIV:
                        if (y == 0)
                                return verr("division by zero");
                        if (x == INT64_MIN && y == -1)
                                return verr(E_OVERFLOW);
                        r = x / y;
                        break;
                default:
                        if (y == 0)
                                return verr("modulus by zero");
                        r = (x == INT64_MIN && y == -1) ? 0 : x % y;
                        break;
                }
                return vint(r);
        }
        if (a->t == T_UINT) {
                uint64_t r, x = a->u, y = b->u;
                switch (fn) {
                case F_ADD: if (__builtin_add_overflow(x, y, &r)) return verr("unsigned integer overflow"); break;
                case F_SUB: if (__builtin_sub_overflow(x, y, &r)) return verr("unsigned integer overflow"); break;
                case F_MUL: if (__builtin_mul_overflow(x, y, &r)) return verr("unsigned integer overflow"); break;
                case F_DIV: if (y == 0) return verr("division by zero"); r = x / y; break;
                default: if (y == 0) return verr("modulus by zero"); r = x % y; break;
                }
                val v = {.t = T_UINT};
                v.u = r;
                return v;
        }
        val v = {.t = T_DOUBLE};
        v.d = fn == F_ADD ? a->d + b->d : fn == F_SUB ? a->d - b->d : fn == F_MUL ? a->d * b->d : a->d / b->d;
        return v;
}

static val concat(struct ctx *c, const val *a, const val *b)
{
        if (a->t == T_STRING) {
                if (!spend(c, str_cost(a->str.n + b->str.n)))
                        return verr(E_CANCEL);
                char *s = ar_alloc(c, a->str.n + b->str.n + 1);
                if (!s)
                        return verr(E_OOM);
                memcpy(s, a->str.s, a->str.n);
                memcpy(s + a->str.n, b->str.s, b->str.n);
                s[a->str.n + b->str.n] = 0;
                return vstr(s, a->str.n + b->str.n);
        }
        size_t n = a->list.n + b->list.n;
        if (!spend(c, n))
                return verr(E_CANCEL);
        val *v = ar_alloc(c, (n ? n : 1) * sizeof(*v));
        if (!v)
                return verr(E_OOM);
        if (a->list.n)
                memcpy(v, a->list.v, a->list.n * sizeof(*v));
        if (b->list.n)
                memcpy(v + a->list.n, b->list.v, b->list.n * sizeof(*v));
        val r = {.t = T_LIST};
        r.list.v = v;
        r.list.n = n;
        return r;
}

static val to_string(struct ctx *c, const val *a)
{
        char buf[64];
        int n;
        switch (a->t) {
        case T_STRING: return *a;
        case T_BOOL: return vstr(a->b ? "true" : "false", a->b ? 4 : 5);
        case T_INT: n = snprintf(buf, sizeof(buf), "%lld", (long long)a->i); break;
        case T_UINT: n = snprintf(buf, sizeof(buf), "%llu", (unsigned long long)a->u); break;
        default:
                n = snprintf(buf, sizeof(buf), "%.15g", a->d);
                if (strtod(buf, NULL) != a->d)
                        n = snprintf(buf, sizeof(buf), "%.17g", a->d);
                break;
        }
        char *s = ar_alloc(c, (size_t)n + 1);
        if (!s)
                return verr(E_OOM);
        memcpy(s, buf, (size_t)n + 1);
        return vstr(s, (size_t)n);
}

static val convert(struct ctx *c, int fn, const val *a)
{
        if (fn == F_STRING)
                return to_string(c, a);
        if (a->t == T_STRING) {
                char *end;
                errno = 0;
                val v = {.t = (uint8_t)(fn == F_INT ? T_INT : fn == F_UINT ? T_UINT : T_DOUBLE)};
                if (fn == F_INT)
                        v.i = strtoll(a->str.s, &end, 10);
                else if (fn == F_UINT)
                        v.u = a->str.n && a->str.s[0] != '-' ? strtoull(a->str.s, &end, 10) : (end = (char *)a->str.s, 0);
                else
                        v.d = strtod(a->str.s, &end);
                if (errno || a->str.n == 0 || end != a->str.s + a->str.n)
                        return errf(c, "cannot convert \"%.*s\" to %s", (int)a->str.n, a->str.s, kdev_cel__fn_name(fn));
                return v;
        }
        if (fn == F_DOUBLE) {
                val v = {.t = T_DOUBLE};
                v.d = a->t == T_INT ? (double)a->i : a->t == T_UINT ? (double)a->u : a->d;
                return v;
        }
        if (fn == F_INT) {
                if (a->t == T_INT)
                        return *a;
                if (a->t == T_UINT)
                        return a->u > INT64_MAX ? verr(E_OVERFLOW) : vint((int64_t)a->u);
                if (!(a->d > -9223372036854775808.0 && a->d < 9223372036854775808.0))
                        return verr(E_OVERFLOW);
                return vint((int64_t)a->d);
        }
        val v = {.t = T_UINT};
        if (a->t == T_UINT)
                return *a;
        if (a->t == T_INT) {
                if (a->i < 0)
                        return verr("unsigned integer overflow");
                v.u = (uint64_t)a->i;
                return v;
        }
        if (!(a->d > -1.0 && a->d < 18446744073709551616.0))
                return verr("unsigned integer overflow");
        v.u = (uint64_t)a->d;
        return v;
}

static val call(struct ctx *c, const struct kdev_cel__node *nd, const val *a, size_t n)
{
        uint8_t t[8] = {0};
        for (size_t k = 0; k < n; k++)
                t[k] = a[k].t;
        /* equality is heterogeneous at runtime: values of different types
         * are unequal, never an error */
        if (nd->fn != F_EQ && nd->fn != F_NE && kdev_cel__overload(nd->fn, nd->member, t, n) < 0)
                return verr(E_OVERLOAD);
        if (!spend(c, 1))
                return verr(E_CANCEL);
        switch (nd->fn) {
        case F_EQ:
        case F_NE: {
                if (a[0].t == T_STRING && a[1].t == T_STRING && !spend(c, str_cost(a[0].str.n)))
                        return verr(E_CANCEL);
                bool e = equal(c, &a[0], &a[1]);
                return vbool(nd->fn == F_EQ ? e : !e);
        }
        case F_LT:
        case F_LE:
        case F_GT:
        case F_GE: {
                int r;
                if (is_numv(a[0].t))
                        r = num_cmp(&a[0], &a[1]);
                else if (a[0].t == T_BOOL)
                        r = (a[0].b > a[1].b) - (a[0].b < a[1].b);
                else {
                        size_t m = a[0].str.n < a[1].str.n ? a[0].str.n : a[1].str.n;
                        if (!spend(c, str_cost(m)))
                                return verr(E_CANCEL);
                        r = memcmp(a[0].str.s, a[1].str.s, m);
                        r = r ? (r > 0 ? 1 : -1) : (a[0].str.n > a[1].str.n) - (a[0].str.n < a[1].str.n);
                }
                if (r == 2)
                        return vbool(false);
                return vbool(nd->fn == F_LT ? r < 0 : nd->fn == F_LE ? r <= 0 : nd->fn == F_GT ? r > 0 : r >= 0);
        }
        case F_ADD:
                if (a[0].t == T_STRING || a[0].t == T_LIST)
                        return concat(c, &a[0], &a[1]);
                return arith(nd->fn, &a[0], &a[1]);
        case F_SUB:
        case F_MUL:
        case F_DIV:
        case F_MOD: return arith(nd->fn, &a[0], &a[1]);
        case F_NEG:
                if (a[0].t == T_INT)
                        return a[0].i == INT64_MIN ? verr(E_OVERFLOW) : vint(-a[0].i);
                {
                        val v = a[0];
                        v.d = -v.d;
                        return v;
                }
        case F_IN:
                if (a[1].t == T_LIST) {
                        if (!spend(c, a[1].list.n))
                                return verr(E_CANCEL);
                        for (size_t i = 0; i < a[1].list.n; i++)
                                if (equal(c, &a[0], &a[1].list.v[i]))
                                        return vbool(true);
                        return vbool(false);
                }
                return vbool(map_has(c, &a[1], &a[0]));
        case F_SIZE:
                if (a[0].t == T_STRING)
                        return vint((int64_t)utf8_len(a[0].str.s, a[0].str.n));
                if (a[0].t == T_LIST || a[0].t == T_MAP)
                        return vint((int64_t)a[0].list.n);
                if (a[0].t == T_ATTR_OUTER || a[0].t == T_CAP_OUTER)
                        return vint((int64_t)count_domains(c, a[0].t == T_CAP_OUTER));
                return vint((int64_t)count_in_domain(c, a[0].t == T_CAP_INNER, a[0].str.s, a[0].str.n));
        case F_STARTS:
        case F_ENDS:
        case F_CONTAINS: {
                const val *s = &a[0], *x = &a[1];
                if (!spend(c, str_cost(nd->fn == F_CONTAINS ? s->str.n : x->str.n)))
                        return verr(E_CANCEL);
                if (x->str.n > s->str.n)
                        return vbool(false);
                if (nd->fn == F_STARTS)
                        return vbool(!memcmp(s->str.s, x->str.s, x->str.n));
                if (nd->fn == F_ENDS)
                        return vbool(!memcmp(s->str.s + s->str.n - x->str.n, x->str.s, x->str.n));
                if (x->str.n == 0)
                        return vbool(true);
                return vbool(memmem(s->str.s, s->str.n, x->str.s, x->str.n) != NULL);
        }
        case F_MATCHES: return do_matches(c, nd, &a[0], &a[1]);
        case F_LOWER:
        case F_UPPER: {
                if (!spend(c, str_cost(a[0].str.n)))
                        return verr(E_CANCEL);
                char *s = ar_alloc(c, a[0].str.n + 1);
                if (!s)
                        return verr(E_OOM);
                for (size_t i = 0; i < a[0].str.n; i++) {
                        char ch = a[0].str.s[i];
                        if (nd->fn == F_LOWER && ch >= 'A' && ch <= 'Z')
                                ch = (char)(ch - 'A' + 'a');
                        else if (nd->fn == F_UPPER && ch >= 'a' && ch <= 'z')
                                ch = (char)(ch - 'a' + 'A');
                        s[i] = ch;
                }
                s[a[0].str.n] = 0;
                return vstr(s, a[0].str.n);
        }
        case F_QUANTITY:
        case F_ISQUANTITY: {
                val v = {.t = T_QUANTITY};
                struct kdev_err e;
                int rc = strlen(a[0].str.s) == a[0].str.n ? kdev_cel_quantity_parse(a[0].str.s, &v.q, &e)
                                                          : kdev_err_set(&e, EINVAL, "quantities must not contain NUL");
                if (nd->fn == F_ISQUANTITY)
                        return vbool(rc == 0);
                return rc < 0 ? errf(c, "%s", e.msg) : v;
        }
        case F_SEMVER:
        case F_ISSEMVER: {
                val v = semver_of(c, &a[0], n > 1 && a[1].b);
                if (nd->fn == F_ISSEMVER)
                        return v.t == T_ERROR && v.err == E_OOM ? v : vbool(v.t == T_SEMVER);
                return v;
        }
        case F_COMPARETO:
        case F_ISGT:
        case F_ISLT: {
                int r = a[0].t == T_QUANTITY ? kdev_cel_quantity_cmp(&a[0].q, &a[1].q)
                                             : kdev_cel_semver_cmp(&a[0].sv, &a[1].sv);
                return nd->fn == F_COMPARETO ? vint(r) : vbool(nd->fn == F_ISGT ? r > 0 : r < 0);
        }
        case F_ASINT:
        case F_ISINT: {
                int64_t i;
                int rc = kdev_cel__quantity_int(&a[0].q, &i);
                if (nd->fn == F_ISINT)
                        return vbool(rc == 0);
                return rc < 0 ? verr("cannot convert value to integer") : vint(i);
        }
        case F_ASFLOAT: {
                val v = {.t = T_DOUBLE};
                v.d = kdev_cel__quantity_float(&a[0].q);
                return v;
        }
        case F_QADD:
        case F_QSUB: {
                struct kdev_cel_quantity q2 = a[1].t == T_INT ? (struct kdev_cel_quantity){a[1].i, 0} : a[1].q;
                val v = {.t = T_QUANTITY};
                if (kdev_cel__quantity_add(&a[0].q, &q2, nd->fn == F_QSUB ? -1 : 1, &v.q) < 0)
                        return verr("quantity out of the range kdev supports");
                return v;
        }
        case F_SIGN: return vint((a[0].q.mantissa > 0) - (a[0].q.mantissa < 0));
        case F_MAJOR:
        case F_MINOR:
        case F_PATCH: {
                uint64_t u = nd->fn == F_MAJOR ? a[0].sv.major : nd->fn == F_MINOR ? a[0].sv.minor : a[0].sv.patch;
                return u > INT64_MAX ? verr(E_OVERFLOW) : vint((int64_t)u);
        }
        case F_INT:
        case F_UINT:
        case F_DOUBLE:
        case F_STRING: return convert(c, nd->fn, &a[0]);
        case F_ORVALUE: return a[0].opt ? *a[0].opt : a[1];
        case F_HASVALUE: return vbool(a[0].opt != NULL);
        default: return verr(E_OVERLOAD);
        }
}

static val vnone(void)
{
        val v = {.t = T_OPTIONAL};
        v.opt = NULL;
        return v;
}

/* optional.of(v); an error stays an error */
static val some(struct ctx *c, const val *v)
{
        if (v->t == T_ERROR)
                return *v;
        val *p = ar_alloc(c, sizeof(*p));
        if (!p)
                return verr(E_OOM);
        *p = *v;
        val r = {.t = T_OPTIONAL};
        r.opt = p;
        return r;
}

/* m.name of the device or a map (|m| is one of them) */
static val select_plain(struct ctx *c, const struct kdev_cel__node *nd, const val *m, const val *k)
{
        if (m->t == T_DEVICE) {
                val v = {.t = T_CAP_OUTER};
                switch (nd->name[0]) {
                case 'd':
                        return vstr(c->dev->driver ? c->dev->driver : "", c->dev->driver ? strlen(c->dev->driver) : 0);
                case 'a':
                        if (nd->name_len == 10) {
                                v.t = T_ATTR_OUTER;
                                return v;
                        }
                        return vbool(c->dev->allow_multiple_allocations);
                default: return v;
                }
        }
        return is_mapv(m->t) ? map_get(c, m, k) : verr(E_OVERLOAD);
}

static val index_list(struct ctx *c, const val *m, const val *k)
{
        int64_t ix;
        if (k->t == T_INT)
                ix = k->i;
        else if (k->t == T_UINT && k->u <= INT64_MAX)
                ix = (int64_t)k->u;
        else if (k->t == T_DOUBLE && k->d == floor(k->d) && fabs(k->d) < 9e18)
                ix = (int64_t)k->d;
        else
                return verr(E_OVERLOAD);
        if (ix < 0 || (uint64_t)ix >= m->list.n)
                return errf(c, "index out of bounds: %lld", (long long)ix);
        return m->list.v[ix];
}

/* ---- the walk ------------------------------------------------------- */

static val eval(struct ctx *c, int32_t i)
{
        if (c->cancelled)
                return verr(E_CANCEL);
        const struct kdev_cel__node *nd = &c->p->nodes[i];
        switch (nd->kind) {
        case N_LIT: return nd->lit;
        case N_DEVICE: {
                if (!spend(c, 1))
                        return verr(E_CANCEL);
                val v = {.t = T_DEVICE};
                return v;
        }
        case N_SELECT:
        case N_HAS: {
                val m = eval(c, nd->a);
                if (m.t == T_ERROR)
                        return m;
                if (nd->kind == N_SELECT && !spend(c, 1))
                        return verr(E_CANCEL);
                val k = vstr(nd->name, nd->name_len);
                bool wrap = false;
                if (m.t == T_OPTIONAL) {
                        if (!m.opt)
                                return nd->kind == N_HAS ? vbool(false) : m;
                        m = *m.opt;
                        wrap = true;
                }
                if (nd->kind == N_HAS)
                        return m.t == T_DEVICE ? vbool(true) : is_mapv(m.t) ? vbool(map_has(c, &m, &k)) : verr(E_OVERLOAD);
                if (nd->fn) { /* .?name */
                        if (m.t != T_DEVICE && !is_mapv(m.t))
                                return verr(E_OVERLOAD);
                        if (m.t != T_DEVICE && !map_has(c, &m, &k))
                                return vnone();
                        wrap = true;
                }
                val v = select_plain(c, nd, &m, &k);
                return wrap ? some(c, &v) : v;
        }
        case N_INDEX: {
                val m = eval(c, nd->a);
                if (m.t == T_ERROR)
                        return m;
                val k = eval(c, nd->b);
                if (k.t == T_ERROR)
                        return k;
                if (!spend(c, 1))
                        return verr(E_CANCEL);
                bool wrap = false;
                if (m.t == T_OPTIONAL) {
                        if (!m.opt)
                                return m;
                        m = *m.opt;
                        wrap = true;
                }
                if (nd->fn) { /* [?key] */
                        if (m.t == T_LIST) {
                                val v = index_list(c, &m, &k);
                                if (v.t == T_ERROR)
                                        return v.err == E_OVERLOAD ? v : vnone();
                                return some(c, &v);
                        }
                        if (!is_mapv(m.t))
                                return verr(E_OVERLOAD);
                        if (!map_has(c, &m, &k))
                                return vnone();
                        wrap = true;
                }
                val v = m.t == T_LIST ? index_list(c, &m, &k) : is_mapv(m.t) ? map_get(c, &m, &k) : verr(E_OVERLOAD);
                return wrap ? some(c, &v) : v;
        }
        case N_LIST:
        case N_MAP: {
                if (!spend(c, nd->kind == N_LIST ? 10 : 30))
                        return verr(E_CANCEL);
                val *v = ar_alloc(c, (nd->nargs ? (size_t)nd->nargs : 1) * sizeof(*v));
                if (!v)
                        return verr(E_OOM);
                for (int32_t k = 0; k < nd->nargs; k++) {
                        v[k] = eval(c, c->p->args[nd->args + k]);
                        if (v[k].t == T_ERROR)
                                return v[k];
                }
                val r = {.t = nd->kind == N_LIST ? T_LIST : T_MAP};
                r.list.v = v;
                r.list.n = nd->kind == N_LIST ? (size_t)nd->nargs : (size_t)nd->nargs / 2;
                if (nd->kind == N_MAP)
                        for (size_t k = 0; k < r.list.n; k++) {
                                int kt = v[2 * k].t;
                                if (kt != T_STRING && kt != T_INT && kt != T_UINT && kt != T_BOOL)
                                        return errf(c, "unsupported key type");
                                for (size_t j = 0; j < k; j++)
                                        if (equal(c, &v[2 * j], &v[2 * k]))
                                                return errf(c, "Failed with repeated key");
                        }
                return r;
        }
        case N_CALL: {
                val a[8];
                for (int32_t k = 0; k < nd->nargs; k++) {
                        a[k] = eval(c, c->p->args[nd->args + k]);
                        if (a[k].t == T_ERROR)
                                return a[k];
                }
                return call(c, nd, a, (size_t)nd->nargs);
        }
        case N_AND:
        case N_OR: {
                bool absorb = nd->kind == N_OR; /* the value that decides: true for ||, false for && */
                val l = eval(c, nd->a);
                if (l.t == T_BOOL && l.b == absorb)
                        return l;
                if (c->cancelled)
                        return verr(E_CANCEL);
                val r = eval(c, nd->b);
                if (r.t == T_BOOL && r.b == absorb)
                        return r;
                if (c->cancelled)
                        return verr(E_CANCEL);
                if (l.t == T_BOOL && r.t == T_BOOL)
                        return vbool(!absorb);
                if (l.t == T_ERROR)
                        return l;
                if (r.t == T_ERROR)
                        return r;
                return verr(E_OVERLOAD);
        }
        case N_NOT: {
                val v = eval(c, nd->a);
                if (v.t == T_ERROR)
                        return v;
                return v.t == T_BOOL ? vbool(!v.b) : verr(E_OVERLOAD);
        }
        case N_BIND:
                /* an error in the value is one only where the variable is
                 * used */
                c->vars[nd->args] = eval(c, nd->a);
                if (c->cancelled)
                        return verr(E_CANCEL);
                return eval(c, nd->b);
        case N_VAR:
                if (!spend(c, 1))
                        return verr(E_CANCEL);
                return c->vars[nd->args];
        case N_COND: {
                val v = eval(c, nd->a);
                if (v.t == T_ERROR)
                        return v;
                if (v.t != T_BOOL)
                        return verr(E_OVERLOAD);
                return eval(c, v.b ? nd->b : nd->c);
        }
        }
        return verr(E_OVERLOAD);
}

static const struct kdev_cel_device no_device = {.driver = ""};

/* runs |prog|; *|out| the result (never T_ERROR); or a negative errno with
 * |err| set */
static int run(struct ctx *c, const struct kdev_cel_program *prog, const struct kdev_cel_device *dev,
               uint64_t cost_limit, val *out, struct kdev_err *err)
{
        c->p = prog;
        c->dev = dev ? dev : &no_device;
        c->cost = 0;
        c->cancelled = c->oom = false;
        c->sused = 0;
        c->chunks = NULL;
        c->limit = cost_limit ? cost_limit : KDEV_CEL_COST_LIMIT;
        val v = eval(c, prog->root);
        if (c->cancelled)
                return kdev_err_set(err, ECANCELED, "%s", E_CANCEL);
        if (c->oom)
                return kdev_err_set(err, ENOMEM, "%s", E_OOM);
        if (v.t == T_ERROR)
                return kdev_err_set(err, EINVAL, "%s", v.err);
        *out = v;
        return 0;
}

static void done(struct ctx *c)
{
        while (c->chunks) {
                struct chunk *n = c->chunks->next;
                free(c->chunks);
                c->chunks = n;
        }
}

int kdev_cel_match(const struct kdev_cel_program *prog, const struct kdev_cel_device *dev, uint64_t cost_limit,
                   uint64_t *cost, struct kdev_err *err)
{
        struct ctx c;
        val v;
        int rc = run(&c, prog, dev, cost_limit, &v, err);
        if (rc == 0 && v.t != T_BOOL)
                rc = kdev_err_set(err, EINVAL, "CEL result of type %s could not be converted to bool",
                                  kdev_cel__type_name(v.t));
        if (rc == 0)
                rc = v.b;
        done(&c);
        if (cost)
                *cost = c.cost;
        return rc;
}

/* ---- printing ------------------------------------------------------- */

struct out {
        char *buf;
        size_t size, n;
};

static void put(struct out *o, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void put(struct out *o, const char *fmt, ...)
{
        va_list ap;
        va_start(ap, fmt);
        int k = vsnprintf(o->buf + o->n, o->n < o->size ? o->size - o->n : 0, fmt, ap);
        va_end(ap);
        if (k > 0)
                o->n += (size_t)k;
        if (o->n >= o->size)
                o->n = o->size ? o->size - 1 : 0;
}

static void put_str(struct out *o, const char *s, size_t n)
{
        put(o, "\"");
        for (size_t i = 0; i < n; i++) {
                unsigned char ch = (unsigned char)s[i];
                if (ch == '"' || ch == '\\')
                        put(o, "\\%c", ch);
                else if (ch == '\n')
                        put(o, "\\n");
                else if (ch == '\t')
                        put(o, "\\t");
                else if (ch < 0x20 || ch == 0x7f)
                        put(o, "\\x%02x", ch);
                else
                        put(o, "%c", ch);
        }
        put(o, "\"");
}

static void print(struct ctx *c, struct out *o, const val *v, int depth)
{
        if (depth > 32) {
                put(o, "...");
                return;
        }
        switch (v->t) {
        case T_NULL: put(o, "null"); break;
        case T_BOOL: put(o, "%s", v->b ? "true" : "false"); break;
        case T_INT: put(o, "%lld", (long long)v->i); break;
        case T_UINT: put(o, "%lluu", (unsigned long long)v->u); break;
        case T_DOUBLE: {
                char b[40];
                snprintf(b, sizeof(b), "%.15g", v->d);
                if (strtod(b, NULL) != v->d)
                        snprintf(b, sizeof(b), "%.17g", v->d);
                put(o, "%s%s", b, strpbrk(b, ".einfa") ? "" : ".0");
                break;
        }
        case T_STRING: put_str(o, v->str.s, v->str.n); break;
        case T_LIST:
                put(o, "[");
                for (size_t i = 0; i < v->list.n; i++) {
                        put(o, i ? ", " : "");
                        print(c, o, &v->list.v[i], depth + 1);
                }
                put(o, "]");
                break;
        case T_MAP:
                put(o, "{");
                for (size_t i = 0; i < v->list.n; i++) {
                        put(o, i ? ", " : "");
                        print(c, o, &v->list.v[2 * i], depth + 1);
                        put(o, ": ");
                        print(c, o, &v->list.v[2 * i + 1], depth + 1);
                }
                put(o, "}");
                break;
        case T_QUANTITY: {
                char b[128];
                kdev_cel__quantity_format(&v->q, b, sizeof(b));
                put(o, "quantity(\"%s\")", b);
                break;
        }
        case T_SEMVER:
                put(o, "semver(\"%llu.%llu.%llu%s%.*s\")", (unsigned long long)v->sv.major,
                    (unsigned long long)v->sv.minor, (unsigned long long)v->sv.patch, v->sv.pre_len ? "-" : "",
                    (int)v->sv.pre_len, v->sv.pre ? v->sv.pre : "");
                break;
        case T_ATTR_INNER:
        case T_CAP_INNER: {
                /* the domain's entries, in the device's order */
                bool cap = v->t == T_CAP_INNER;
                size_t k = 0;
                put(o, "{");
                for (size_t i = 0; i < n_entries(c, cap); i++) {
                        if (!eqn(entry_domain(c, cap, i), v->str.s, v->str.n))
                                continue;
                        const char *name = entry_name(c, cap, i);
                        put(o, k++ ? ", " : "");
                        put_str(o, name, strlen(name));
                        put(o, ": ");
                        val e;
                        if (cap) {
                                e.t = T_QUANTITY;
                                e.q = c->dev->capacity[i].value;
                        } else {
                                e = attr_val(c, &c->dev->attributes[i]);
                        }
                        print(c, o, &e, depth + 1);
                }
                put(o, "}");
                break;
        }
        case T_OPTIONAL:
                if (!v->opt) {
                        put(o, "optional.none()");
                        break;
                }
                put(o, "optional.of(");
                print(c, o, v->opt, depth + 1);
                put(o, ")");
                break;
        default: put(o, "<%s>", kdev_cel__type_name(v->t)); break;
        }
}

int kdev_cel_eval(const struct kdev_cel_program *prog, const struct kdev_cel_device *dev, uint64_t cost_limit,
                  uint64_t *cost, char *buf, size_t size, struct kdev_err *err)
{
        struct ctx c;
        val v;
        if (size)
                buf[0] = 0;
        int rc = run(&c, prog, dev, cost_limit, &v, err);
        if (rc == 0) {
                struct out o = {buf, size, 0};
                print(&c, &o, &v, 0);
        }
        done(&c);
        if (cost)
                *cost = c.cost;
        return rc;
}
