/* CEL parsing and checking for device selectors (cel.h): a recursive
 * descent parser of CEL's grammar (google/cel-spec doc/langdef.md,
 * "Syntax") into a node array, with the static checks cel-go's checker
 * makes on what is known at compile time (the `device` declaration of
 * dynamic-resource-allocation cel/compile.go, the overloads of the standard
 * library and Kubernetes' quantity and semver libraries). */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cel/cel_internal.h"

#define MAX_DEPTH 250
#define MAX_HEIGHT 1000

enum tok {
        K_EOF, K_IDENT, K_INT, K_UINT, K_DOUBLE, K_STRING, K_BYTES,
        K_LP, K_RP, K_LB, K_RB, K_LC, K_RC, K_DOT, K_COMMA, K_COLON, K_QUEST,
        K_NOT, K_MINUS, K_PLUS, K_STAR, K_SLASH, K_PCT,
        K_LT, K_LE, K_GT, K_GE, K_EQ, K_NE, K_AND, K_OR, K_IN,
        K_TRUE, K_FALSE, K_NULL, K_BAD,
};

struct parser {
        const char *src;
        size_t len, p;
        /* current token */
        int tok, tpos;
        size_t tend;
        uint64_t u;
        double d;
        char *sbuf; /* decoded string of the current K_STRING (into strings) */
        size_t slen;
        /* output */
        struct kdev_cel_program *prog;
        size_t cap_nodes, cap_args;
        char *strings;
        size_t str_used, str_cap;
        size_t cap_regex;
        int depth;
        bool any_result;
        /* the cel.bind variables in scope, innermost last */
        struct {
                const char *name;
                size_t n;
                uint8_t type;
        } vars[KDEV_CEL__MAX_VARS];
        int n_vars;
        int error; /* 0, -EINVAL or -ENOMEM */
        struct kdev_err *err;
};

/* ---- errors --------------------------------------------------------- */

static int fail(struct parser *ps, int pos, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int fail(struct parser *ps, int pos, const char *fmt, ...)
{
        if (ps->error)
                return -1;
        ps->error = -EINVAL;
        char msg[512];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(msg, sizeof(msg), fmt, ap);
        va_end(ap);
        size_t line = 1, ls = 0;
        for (size_t i = 0; i < (size_t)pos && i < ps->len; i++)
                if (ps->src[i] == '\n') {
                        line++;
                        ls = i + 1;
                }
        size_t le = ls;
        while (le < ps->len && ps->src[le] != '\n')
                le++;
        size_t col = (size_t)pos - ls;
        char caret[160];
        size_t k = 0;
        for (; k < col && k < sizeof(caret) - 2; k++)
                caret[k] = '.';
        caret[k++] = '^';
        caret[k] = 0;
        int shown = (int)(le - ls > 120 ? 120 : le - ls);
        kdev_err_set(ps->err, EINVAL, "compilation failed: ERROR: <input>:%zu:%zu: %s\n | %.*s\n | %s", line,
                     col + 1, msg, shown, ps->src + ls, col < 120 ? caret : "");
        return -1;
}

static int oom(struct parser *ps)
{
        if (!ps->error) {
                ps->error = -ENOMEM;
                kdev_err_set(ps->err, ENOMEM, "compilation failed: out of memory");
        }
        return -1;
}

/* ---- storage -------------------------------------------------------- */

static int new_node(struct parser *ps, int kind, int pos)
{
        struct kdev_cel_program *pr = ps->prog;
        if (pr->n_nodes == ps->cap_nodes) {
                size_t nc = ps->cap_nodes ? ps->cap_nodes * 2 : 16;
                void *n = realloc(pr->nodes, nc * sizeof(*pr->nodes));
                if (!n)
                        return oom(ps);
                pr->nodes = n;
                ps->cap_nodes = nc;
        }
        struct kdev_cel__node *nd = &pr->nodes[pr->n_nodes];
        memset(nd, 0, sizeof(*nd));
        nd->kind = (uint8_t)kind;
        nd->pos = pos;
        nd->a = nd->b = nd->c = -1;
        nd->regex = -1;
        return (int)pr->n_nodes++;
}

static struct kdev_cel__node *N(struct parser *ps, int i)
{
        return &ps->prog->nodes[i];
}

/* appends |n| node indexes as one argument run; returns its start or -1 */
static int add_args(struct parser *ps, const int32_t *a, size_t n)
{
        struct kdev_cel_program *pr = ps->prog;
        if (n == 0)
                return (int)pr->n_args;
        if (pr->n_args + n > ps->cap_args) {
                size_t nc = ps->cap_args ? ps->cap_args * 2 : 16;
                while (nc < pr->n_args + n)
                        nc *= 2;
                void *m = realloc(pr->args, nc * sizeof(*pr->args));
                if (!m)
                        return oom(ps);
                pr->args = m;
                ps->cap_args = nc;
        }
        memcpy(pr->args + pr->n_args, a, n * sizeof(*a));
        int start = (int)pr->n_args;
        pr->n_args += n;
        return start;
}

/* the string area is sized up front (decoded literals are never longer than
 * their source), so pointers into it stay valid */
static char *str_alloc(struct parser *ps, size_t n)
{
        if (ps->str_used + n + 1 > ps->str_cap)
                return NULL;
        char *s = ps->strings + ps->str_used;
        ps->str_used += n + 1;
        return s;
}

/* ---- lexer ---------------------------------------------------------- */

static int is_id0(int c)
{
        return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
}

static int is_dig(int c)
{
        return c >= '0' && c <= '9';
}

static int hexval(int c)
{
        if (is_dig(c))
                return c - '0';
        if (c >= 'a' && c <= 'f')
                return c - 'a' + 10;
        if (c >= 'A' && c <= 'F')
                return c - 'A' + 10;
        return -1;
}

static size_t put_utf8(char *o, uint32_t cp)
{
        if (cp < 0x80) {
                o[0] = (char)cp;
                return 1;
        }
        if (cp < 0x800) {
                o[0] = (char)(0xC0 | (cp >> 6));
                o[1] = (char)(0x80 | (cp & 0x3F));
                return 2;
        }
        if (cp < 0x10000) {
                o[0] = (char)(0xE0 | (cp >> 12));
                o[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
                o[2] = (char)(0x80 | (cp & 0x3F));
                return 3;
        }
        o[0] = (char)(0xF0 | (cp >> 18));
        o[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
        o[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
        o[3] = (char)(0x80 | (cp & 0x3F));
        return 4;
}

/* a string literal at ps->p (after an optional r/R or b/B prefix) */
static int lex_string(struct parser *ps, bool raw, int start)
{
        const char *s = ps->src;
        char q = s[ps->p];
        bool triple = ps->p + 2 < ps->len && s[ps->p + 1] == q && s[ps->p + 2] == q;
        ps->p += triple ? 3 : 1;
        char *o = str_alloc(ps, ps->len);
        if (!o)
                return oom(ps);
        size_t n = 0;
        for (;;) {
                if (ps->p >= ps->len)
                        return fail(ps, start, "Syntax error: unterminated string literal");
                char c = s[ps->p];
                if (c == q && (!triple || (ps->p + 2 < ps->len + 0 && s[ps->p + 1] == q && s[ps->p + 2] == q))) {
                        ps->p += triple ? 3 : 1;
                        break;
                }
                if (!triple && (c == '\n' || c == '\r'))
                        return fail(ps, start, "Syntax error: newline in string literal");
                if (c != '\\' || raw) {
                        o[n++] = c;
                        ps->p++;
                        continue;
                }
                int epos = (int)ps->p;
                ps->p++;
                if (ps->p >= ps->len)
                        return fail(ps, epos, "Syntax error: invalid escape sequence");
                c = s[ps->p++];
                const char *simple = "abfnrtv\\'\"`?";
                const char *map = "\a\b\f\n\r\t\v\\'\"`?";
                const char *f = strchr(simple, c);
                if (f && c) {
                        o[n++] = map[f - simple];
                        continue;
                }
                uint32_t cp = 0;
                int digs = c == 'x' || c == 'X' ? 2 : c == 'u' ? 4 : c == 'U' ? 8 : 0;
                if (digs) {
                        for (int k = 0; k < digs; k++) {
                                int h = ps->p < ps->len ? hexval(s[ps->p]) : -1;
                                if (h < 0)
                                        return fail(ps, epos, "Syntax error: invalid escape sequence");
                                cp = cp * 16 + (uint32_t)h;
                                ps->p++;
                        }
                        if (digs == 2) {
                                o[n++] = (char)cp; /* \x: one byte (cel-go: a code point < 256) */
                                if (cp >= 0x80) {
                                        n--;
                                        n += put_utf8(o + n, cp);
                                }
                                continue;
                        }
                        if (cp > 0x10FFFF || (cp >= 0xD800 && cp < 0xE000))
                                return fail(ps, epos, "Syntax error: invalid unicode code point");
                        n += put_utf8(o + n, cp);
                        continue;
                }
                if (c >= '0' && c <= '3') {
                        cp = (uint32_t)(c - '0');
                        for (int k = 0; k < 2; k++) {
                                if (ps->p >= ps->len || s[ps->p] < '0' || s[ps->p] > '7')
                                        return fail(ps, epos, "Syntax error: invalid escape sequence");
                                cp = cp * 8 + (uint32_t)(s[ps->p++] - '0');
                        }
                        n += put_utf8(o + n, cp);
                        continue;
                }
                return fail(ps, epos, "Syntax error: invalid escape sequence");
        }
        o[n] = 0;
        ps->str_used -= ps->len - n; /* give back the unused part */
        ps->sbuf = o;
        ps->slen = n;
        return 0;
}

static int next(struct parser *ps)
{
        const char *s = ps->src;
        for (;;) {
                while (ps->p < ps->len && strchr(" \t\n\r\f", s[ps->p]) && s[ps->p])
                        ps->p++;
                if (ps->p + 1 < ps->len && s[ps->p] == '/' && s[ps->p + 1] == '/') {
                        while (ps->p < ps->len && s[ps->p] != '\n')
                                ps->p++;
                        continue;
                }
                break;
        }
        ps->tpos = (int)ps->p;
        if (ps->p >= ps->len) {
                ps->tok = K_EOF;
                return 0;
        }
        char c = s[ps->p];
        char c1 = ps->p + 1 < ps->len ? s[ps->p + 1] : 0;
        if ((c == 'r' || c == 'R') && (c1 == '"' || c1 == '\'')) {
                ps->p++;
                ps->tok = K_STRING;
                return lex_string(ps, true, ps->tpos);
        }
        if ((c == 'b' || c == 'B') && (c1 == '"' || c1 == '\'')) {
                ps->tok = K_BYTES;
                return 0;
        }
        if (is_id0((unsigned char)c)) {
                size_t b = ps->p;
                while (ps->p < ps->len && (is_id0((unsigned char)s[ps->p]) || is_dig(s[ps->p])))
                        ps->p++;
                size_t n = ps->p - b;
                ps->tend = ps->p;
                ps->tok = K_IDENT;
                if (n == 4 && !memcmp(s + b, "true", 4))
                        ps->tok = K_TRUE;
                else if (n == 5 && !memcmp(s + b, "false", 5))
                        ps->tok = K_FALSE;
                else if (n == 4 && !memcmp(s + b, "null", 4))
                        ps->tok = K_NULL;
                else if (n == 2 && !memcmp(s + b, "in", 2))
                        ps->tok = K_IN;
                return 0;
        }
        if (is_dig(c) || (c == '.' && is_dig(c1))) {
                size_t b = ps->p;
                if (c == '0' && (c1 == 'x' || c1 == 'X')) {
                        ps->p += 2;
                        uint64_t v = 0;
                        int nd = 0;
                        for (; ps->p < ps->len && hexval(s[ps->p]) >= 0; ps->p++, nd++) {
                                if (v >> 60)
                                        return fail(ps, (int)b, "invalid int literal");
                                v = v * 16 + (uint64_t)hexval(s[ps->p]);
                        }
                        if (!nd)
                                return fail(ps, (int)b, "Syntax error: invalid hex literal");
                        ps->u = v;
                } else {
                        bool dbl = false;
                        while (ps->p < ps->len && is_dig(s[ps->p]))
                                ps->p++;
                        if (ps->p + 1 < ps->len && s[ps->p] == '.' && is_dig(s[ps->p + 1])) {
                                dbl = true;
                                ps->p++;
                                while (ps->p < ps->len && is_dig(s[ps->p]))
                                        ps->p++;
                        }
                        if (ps->p < ps->len && (s[ps->p] == 'e' || s[ps->p] == 'E')) {
                                size_t e = ps->p + 1;
                                if (e < ps->len && (s[e] == '+' || s[e] == '-'))
                                        e++;
                                if (e < ps->len && is_dig(s[e])) {
                                        dbl = true;
                                        ps->p = e;
                                        while (ps->p < ps->len && is_dig(s[ps->p]))
                                                ps->p++;
                                }
                        }
                        char tmp[64];
                        size_t n = ps->p - b;
                        if (n >= sizeof(tmp))
                                return fail(ps, (int)b, dbl ? "invalid double literal" : "invalid int literal");
                        memcpy(tmp, s + b, n);
                        tmp[n] = 0;
                        if (dbl) {
                                ps->d = strtod(tmp, NULL);
                                ps->tok = K_DOUBLE;
                                return 0;
                        }
                        errno = 0;
                        ps->u = strtoull(tmp, NULL, 10);
                        if (errno)
                                return fail(ps, (int)b, "invalid int literal");
                }
                ps->tok = K_INT;
                if (ps->p < ps->len && (s[ps->p] == 'u' || s[ps->p] == 'U')) {
                        ps->p++;
                        ps->tok = K_UINT;
                }
                if (ps->p < ps->len && (is_id0((unsigned char)s[ps->p]) || is_dig(s[ps->p])))
                        return fail(ps, (int)ps->p, "Syntax error: token recognition error at: '%c'", s[ps->p]);
                return 0;
        }
        if (c == '"' || c == '\'') {
                ps->tok = K_STRING;
                return lex_string(ps, false, ps->tpos);
        }
        static const struct {
                const char *s;
                int t;
        } ops[] = {{"&&", K_AND}, {"||", K_OR}, {"<=", K_LE}, {">=", K_GE}, {"==", K_EQ}, {"!=", K_NE},
                   {"(", K_LP},   {")", K_RP},  {"[", K_LB},  {"]", K_RB},  {"{", K_LC},  {"}", K_RC},
                   {".", K_DOT},  {",", K_COMMA}, {":", K_COLON}, {"?", K_QUEST}, {"!", K_NOT},
                   {"-", K_MINUS}, {"+", K_PLUS}, {"*", K_STAR}, {"/", K_SLASH}, {"%", K_PCT},
                   {"<", K_LT},   {">", K_GT}};
        for (size_t i = 0; i < sizeof(ops) / sizeof(ops[0]); i++) {
                size_t n = strlen(ops[i].s);
                if (ps->p + n <= ps->len && !memcmp(s + ps->p, ops[i].s, n)) {
                        ps->p += n;
                        ps->tok = ops[i].t;
                        return 0;
                }
        }
        unsigned char uc = (unsigned char)c;
        if (uc >= 0x20 && uc < 0x7f)
                return fail(ps, ps->tpos, "Syntax error: token recognition error at: '%c'", c);
        return fail(ps, ps->tpos, "Syntax error: token recognition error at: '\\x%02x'", uc);
}

static const char *tok_text(struct parser *ps, char *buf, size_t n)
{
        if (ps->tok == K_EOF)
                return "<EOF>";
        size_t e = ps->p > (size_t)ps->tpos ? ps->p : (size_t)ps->tpos + 1;
        snprintf(buf, n, "'%.*s'", (int)(e - (size_t)ps->tpos > 40 ? 40 : e - (size_t)ps->tpos),
                 ps->src + ps->tpos);
        return buf;
}

static int unexpected(struct parser *ps)
{
        char b[64];
        if (ps->tok == K_BYTES)
                return fail(ps, ps->tpos, "bytes literals are not supported by kdev's CEL subset");
        return fail(ps, ps->tpos, "Syntax error: unexpected input %s", tok_text(ps, b, sizeof(b)));
}

static int expect(struct parser *ps, int t, const char *what)
{
        if (ps->tok != t) {
                char b[64];
                return fail(ps, ps->tpos, "Syntax error: missing %s at %s", what, tok_text(ps, b, sizeof(b)));
        }
        return next(ps);
}

/* ---- checker helpers ------------------------------------------------ */

static const char *const fn_names[F__COUNT] = {
        [F_EQ] = "_==_", [F_NE] = "_!=_", [F_LT] = "_<_", [F_LE] = "_<=_", [F_GT] = "_>_", [F_GE] = "_>=_",
        [F_ADD] = "_+_", [F_SUB] = "_-_", [F_MUL] = "_*_", [F_DIV] = "_/_", [F_MOD] = "_%_", [F_NEG] = "-_",
        [F_IN] = "@in", [F_SIZE] = "size", [F_STARTS] = "startsWith", [F_ENDS] = "endsWith",
        [F_CONTAINS] = "contains", [F_MATCHES] = "matches", [F_LOWER] = "lowerAscii",
        [F_UPPER] = "upperAscii", [F_QUANTITY] = "quantity", [F_ISQUANTITY] = "isQuantity",
        [F_SEMVER] = "semver", [F_ISSEMVER] = "isSemver", [F_COMPARETO] = "compareTo",
        [F_ISGT] = "isGreaterThan", [F_ISLT] = "isLessThan", [F_ASINT] = "asInteger",
        [F_ASFLOAT] = "asApproximateFloat", [F_ISINT] = "isInteger", [F_QADD] = "add", [F_QSUB] = "sub",
        [F_SIGN] = "sign", [F_MAJOR] = "major", [F_MINOR] = "minor", [F_PATCH] = "patch", [F_INT] = "int",
        [F_UINT] = "uint", [F_DOUBLE] = "double", [F_STRING] = "string", [F_ORVALUE] = "orValue",
        [F_HASVALUE] = "hasValue",
};

const char *kdev_cel__fn_name(int fn)
{
        return fn >= 0 && fn < F__COUNT ? fn_names[fn] : "?";
}

const char *kdev_cel__type_name(int t)
{
        static const char *const names[T__COUNT] = {
                [T_DYN] = "dyn", [T_NULL] = "null_type", [T_BOOL] = "bool", [T_INT] = "int",
                [T_UINT] = "uint", [T_DOUBLE] = "double", [T_STRING] = "string", [T_LIST] = "list(dyn)",
                [T_MAP] = "map(dyn, dyn)", [T_QUANTITY] = "kubernetes.Quantity",
                [T_SEMVER] = "kubernetes.Semver", [T_DEVICE] = "kubernetes.DRADevice",
                [T_ATTR_OUTER] = "map(string, map(string, dyn))", [T_ATTR_INNER] = "map(string, dyn)",
                [T_CAP_OUTER] = "map(string, map(string, kubernetes.Quantity))",
                [T_CAP_INNER] = "map(string, kubernetes.Quantity)", [T_OPTIONAL] = "optional_type(dyn)",
                [T_ERROR] = "error",
        };
        return t >= 0 && t < T__COUNT ? names[t] : "?";
}

static bool is_num(int t)
{
        return t == T_INT || t == T_UINT || t == T_DOUBLE;
}

static bool is_map(int t)
{
        return t == T_MAP || t == T_ATTR_OUTER || t == T_ATTR_INNER || t == T_CAP_OUTER || t == T_CAP_INNER;
}

/* one concrete signature: receiver (member call) or first argument, then
 * the others; T_DYN in a signature matches any type */
struct sig {
        uint8_t fn, member, n, res;
        uint8_t at[3];
};

static const struct sig sigs[] = {
        {F_SIZE, 1, 1, T_INT, {T_STRING}}, {F_SIZE, 0, 1, T_INT, {T_STRING}},
        {F_SIZE, 1, 1, T_INT, {T_LIST}},   {F_SIZE, 0, 1, T_INT, {T_LIST}},
        {F_SIZE, 1, 1, T_INT, {T_MAP}},    {F_SIZE, 0, 1, T_INT, {T_MAP}},
        {F_STARTS, 1, 2, T_BOOL, {T_STRING, T_STRING}}, {F_ENDS, 1, 2, T_BOOL, {T_STRING, T_STRING}},
        {F_CONTAINS, 1, 2, T_BOOL, {T_STRING, T_STRING}}, {F_MATCHES, 1, 2, T_BOOL, {T_STRING, T_STRING}},
        {F_MATCHES, 0, 2, T_BOOL, {T_STRING, T_STRING}},
        {F_LOWER, 1, 1, T_STRING, {T_STRING}}, {F_UPPER, 1, 1, T_STRING, {T_STRING}},
        {F_QUANTITY, 0, 1, T_QUANTITY, {T_STRING}}, {F_ISQUANTITY, 0, 1, T_BOOL, {T_STRING}},
        {F_SEMVER, 0, 1, T_SEMVER, {T_STRING}}, {F_SEMVER, 0, 2, T_SEMVER, {T_STRING, T_BOOL}},
        {F_ISSEMVER, 0, 1, T_BOOL, {T_STRING}}, {F_ISSEMVER, 0, 2, T_BOOL, {T_STRING, T_BOOL}},
        {F_COMPARETO, 1, 2, T_INT, {T_QUANTITY, T_QUANTITY}}, {F_ISGT, 1, 2, T_BOOL, {T_QUANTITY, T_QUANTITY}},
        {F_ISLT, 1, 2, T_BOOL, {T_QUANTITY, T_QUANTITY}}, {F_COMPARETO, 1, 2, T_INT, {T_SEMVER, T_SEMVER}},
        {F_ISGT, 1, 2, T_BOOL, {T_SEMVER, T_SEMVER}}, {F_ISLT, 1, 2, T_BOOL, {T_SEMVER, T_SEMVER}},
        {F_ASINT, 1, 1, T_INT, {T_QUANTITY}}, {F_ASFLOAT, 1, 1, T_DOUBLE, {T_QUANTITY}},
        {F_ISINT, 1, 1, T_BOOL, {T_QUANTITY}}, {F_QADD, 1, 2, T_QUANTITY, {T_QUANTITY, T_QUANTITY}},
        {F_QADD, 1, 2, T_QUANTITY, {T_QUANTITY, T_INT}}, {F_QSUB, 1, 2, T_QUANTITY, {T_QUANTITY, T_QUANTITY}},
        {F_QSUB, 1, 2, T_QUANTITY, {T_QUANTITY, T_INT}}, {F_SIGN, 0, 1, T_INT, {T_QUANTITY}},
        {F_MAJOR, 1, 1, T_INT, {T_SEMVER}}, {F_MINOR, 1, 1, T_INT, {T_SEMVER}},
        {F_PATCH, 1, 1, T_INT, {T_SEMVER}},
        {F_INT, 0, 1, T_INT, {T_INT}}, {F_INT, 0, 1, T_INT, {T_UINT}}, {F_INT, 0, 1, T_INT, {T_DOUBLE}},
        {F_INT, 0, 1, T_INT, {T_STRING}}, {F_UINT, 0, 1, T_UINT, {T_UINT}}, {F_UINT, 0, 1, T_UINT, {T_INT}},
        {F_UINT, 0, 1, T_UINT, {T_DOUBLE}}, {F_UINT, 0, 1, T_UINT, {T_STRING}},
        {F_DOUBLE, 0, 1, T_DOUBLE, {T_DOUBLE}}, {F_DOUBLE, 0, 1, T_DOUBLE, {T_INT}},
        {F_DOUBLE, 0, 1, T_DOUBLE, {T_UINT}}, {F_DOUBLE, 0, 1, T_DOUBLE, {T_STRING}},
        {F_STRING, 0, 1, T_STRING, {T_STRING}}, {F_STRING, 0, 1, T_STRING, {T_INT}},
        {F_STRING, 0, 1, T_STRING, {T_UINT}}, {F_STRING, 0, 1, T_STRING, {T_DOUBLE}},
        {F_STRING, 0, 1, T_STRING, {T_BOOL}},
        {F_ORVALUE, 1, 2, T_DYN, {T_OPTIONAL, T_DYN}}, {F_HASVALUE, 1, 1, T_BOOL, {T_OPTIONAL}},
        {F_NEG, 0, 1, T_INT, {T_INT}}, {F_NEG, 0, 1, T_DOUBLE, {T_DOUBLE}},
        {F_ADD, 0, 2, T_INT, {T_INT, T_INT}}, {F_ADD, 0, 2, T_UINT, {T_UINT, T_UINT}},
        {F_ADD, 0, 2, T_DOUBLE, {T_DOUBLE, T_DOUBLE}}, {F_ADD, 0, 2, T_STRING, {T_STRING, T_STRING}},
        {F_ADD, 0, 2, T_LIST, {T_LIST, T_LIST}},
        {F_SUB, 0, 2, T_INT, {T_INT, T_INT}}, {F_SUB, 0, 2, T_UINT, {T_UINT, T_UINT}},
        {F_SUB, 0, 2, T_DOUBLE, {T_DOUBLE, T_DOUBLE}}, {F_MUL, 0, 2, T_INT, {T_INT, T_INT}},
        {F_MUL, 0, 2, T_UINT, {T_UINT, T_UINT}}, {F_MUL, 0, 2, T_DOUBLE, {T_DOUBLE, T_DOUBLE}},
        {F_DIV, 0, 2, T_INT, {T_INT, T_INT}}, {F_DIV, 0, 2, T_UINT, {T_UINT, T_UINT}},
        {F_DIV, 0, 2, T_DOUBLE, {T_DOUBLE, T_DOUBLE}}, {F_MOD, 0, 2, T_INT, {T_INT, T_INT}},
        {F_MOD, 0, 2, T_UINT, {T_UINT, T_UINT}},
};

/* a type as the signature tables see it: all map shapes are maps */
static int base(int t)
{
        return is_map(t) ? T_MAP : t;
}

static bool ordered(int a, int b)
{
        if (is_num(a) && is_num(b))
                return true; /* cross-type numeric comparisons (Kubernetes' base env) */
        return a == b && (a == T_STRING || a == T_BOOL);
}

int kdev_cel__overload(int fn, bool member, const uint8_t *argt, size_t n)
{
        if (fn == F_EQ || fn == F_NE) {
                if (n != 2)
                        return -1;
                int a = base(argt[0]), b = base(argt[1]);
                if (a == T_DYN || b == T_DYN || a == b || a == T_NULL || b == T_NULL)
                        return T_BOOL;
                return -1;
        }
        if (fn >= F_LT && fn <= F_GE) {
                if (argt[0] == T_DYN || argt[1] == T_DYN)
                        return T_BOOL;
                return ordered(argt[0], argt[1]) ? T_BOOL : -1;
        }
        if (fn == F_IN) {
                int c = base(argt[1]);
                if (c == T_DYN || c == T_LIST || c == T_MAP)
                        return T_BOOL;
                return -1;
        }
        int res = -1;
        for (size_t i = 0; i < sizeof(sigs) / sizeof(sigs[0]); i++) {
                const struct sig *s = &sigs[i];
                if (s->fn != fn || s->member != member || s->n != n)
                        continue;
                bool ok = true, dyn = false;
                for (size_t k = 0; k < n && ok; k++) {
                        int t = base(argt[k]);
                        if (s->at[k] == T_DYN)
                                continue; /* any type */
                        if (t == T_DYN)
                                dyn = true;
                        else if (t != s->at[k])
                                ok = false;
                }
                if (!ok)
                        continue;
                if (!dyn)
                        return s->res;
                res = res < 0 || res == s->res ? s->res : T_DYN;
        }
        return res;
}

static int overload_error(struct parser *ps, int pos, int fn, bool member, const uint8_t *t, size_t n)
{
        char list[256];
        size_t o = 0;
        list[0] = 0;
        for (size_t k = member ? 1 : 0; k < n; k++)
                o += (size_t)snprintf(list + o, sizeof(list) - o, "%s%s", o ? ", " : "", kdev_cel__type_name(t[k]));
        if (member)
                return fail(ps, pos, "found no matching overload for '%s' applied to '%s.(%s)'",
                            kdev_cel__fn_name(fn), kdev_cel__type_name(t[0]), list);
        return fail(ps, pos, "found no matching overload for '%s' applied to '(%s)'", kdev_cel__fn_name(fn),
                    list);
}

static int lit_node(struct parser *ps, int t, int pos)
{
        int nd = new_node(ps, N_LIT, pos);
        if (nd >= 0) {
                N(ps, nd)->type = (uint8_t)t;
                N(ps, nd)->lit.t = (uint8_t)t;
        }
        return nd;
}

/* builds a call node of |fn| over |args| and checks it */
static int make_call(struct parser *ps, int fn, bool member, int pos, const int32_t *args, size_t n)
{
        uint8_t t[8] = {0};
        for (size_t k = 0; k < n; k++)
                t[k] = N(ps, args[k])->type;
        int res = kdev_cel__overload(fn, member, t, n);
        if (res < 0)
                return overload_error(ps, pos, fn, member, t, n);
        if ((fn == F_QUANTITY || fn == F_SEMVER) && n == 1 && N(ps, args[0])->kind == N_LIT &&
            N(ps, args[0])->lit.t == T_STRING) {
                /* a constant: parsed once here (a literal that does not
                 * parse stays a call and fails when evaluated, as in
                 * Kubernetes) */
                struct kdev_cel__node *l = N(ps, args[0]);
                struct kdev_cel__val v = {.t = (uint8_t)(fn == F_QUANTITY ? T_QUANTITY : T_SEMVER)};
                int rc = strlen(l->lit.str.s) != l->lit.str.n ? -EINVAL
                         : fn == F_QUANTITY ? kdev_cel_quantity_parse(l->lit.str.s, &v.q, NULL)
                                            : kdev_cel_semver_parse(l->lit.str.s, l->lit.str.n, &v.sv, NULL);
                if (rc == 0) {
                        int nd = lit_node(ps, v.t, pos);
                        if (nd >= 0)
                                N(ps, nd)->lit = v;
                        return nd;
                }
        }
        int a = add_args(ps, args, n);
        int nd = a < 0 ? -1 : new_node(ps, N_CALL, pos);
        if (nd < 0)
                return -1;
        struct kdev_cel__node *x = N(ps, nd);
        x->fn = (uint8_t)fn;
        x->member = member;
        x->args = a;
        x->nargs = (int32_t)n;
        x->type = (uint8_t)res;
        if (fn == F_MATCHES) {
                const struct kdev_cel__node *pat = N(ps, args[1]);
                if (pat->kind == N_LIT && pat->lit.t == T_STRING) {
                        struct kdev_cel_program *pr = ps->prog;
                        if (pr->n_regex == ps->cap_regex) {
                                size_t nc = ps->cap_regex ? ps->cap_regex * 2 : 4;
                                void *m = realloc(pr->regex, nc * sizeof(*pr->regex));
                                if (!m)
                                        return oom(ps);
                                pr->regex = m;
                                ps->cap_regex = nc;
                        }
                        struct kdev_err e;
                        if (kdev_cel__regcomp(&pr->regex[pr->n_regex], pat->lit.str.s, pat->lit.str.n, &e) < 0)
                                return fail(ps, pat->pos, "%s", e.msg);
                        N(ps, nd)->regex = (int32_t)pr->n_regex++;
                }
        }
        return nd;
}

/* the field |name| of a value of static type |t|: the result's type, or -1
 * with the error set */
static int select_type(struct parser *ps, int pos, int t, const char *name, size_t n)
{
        if (t == T_DEVICE) {
                static const struct {
                        const char *f;
                        int t;
                } fields[] = {{"driver", T_STRING}, {"attributes", T_ATTR_OUTER}, {"capacity", T_CAP_OUTER},
                              {"allowMultipleAllocations", T_BOOL}};
                for (size_t i = 0; i < 4; i++)
                        if (strlen(fields[i].f) == n && !memcmp(fields[i].f, name, n))
                                return fields[i].t;
                return fail(ps, pos, "undefined field '%.*s'", (int)n, name);
        }
        switch (t) {
        case T_ATTR_OUTER: return T_ATTR_INNER;
        case T_CAP_OUTER: return T_CAP_INNER;
        case T_CAP_INNER: return T_QUANTITY;
        case T_ATTR_INNER:
        case T_MAP:
        case T_DYN: return T_DYN;
        default: return fail(ps, pos, "type '%s' does not support field selection", kdev_cel__type_name(t));
        }
}

static int index_type(struct parser *ps, int pos, int t, int kt)
{
        switch (t) {
        case T_ATTR_OUTER:
        case T_CAP_OUTER:
        case T_ATTR_INNER:
        case T_CAP_INNER:
                if (kt != T_STRING && kt != T_DYN)
                        break;
                return t == T_ATTR_OUTER ? T_ATTR_INNER : t == T_CAP_OUTER ? T_CAP_INNER
                                                       : t == T_CAP_INNER ? T_QUANTITY
                                                                          : T_DYN;
        case T_LIST:
                if (kt != T_INT && kt != T_UINT && kt != T_DYN)
                        break;
                return T_DYN;
        case T_MAP:
        case T_DYN: return T_DYN;
        default: break;
        }
        return fail(ps, pos, "found no matching overload for '_[_]' applied to '(%s, %s)'", kdev_cel__type_name(t),
                    kdev_cel__type_name(kt));
}

/* ---- grammar -------------------------------------------------------- */

static int expr(struct parser *ps);


static struct {
        const char *name;
        int fn;
} const globals[] = {{"size", F_SIZE},       {"matches", F_MATCHES}, {"quantity", F_QUANTITY},
                     {"isQuantity", F_ISQUANTITY}, {"semver", F_SEMVER}, {"isSemver", F_ISSEMVER},
                     {"sign", F_SIGN},       {"int", F_INT},         {"uint", F_UINT},
                     {"double", F_DOUBLE},   {"string", F_STRING}};
static struct {
        const char *name;
        int fn;
} const members[] = {{"size", F_SIZE},         {"startsWith", F_STARTS},      {"endsWith", F_ENDS},
                     {"contains", F_CONTAINS}, {"matches", F_MATCHES},        {"lowerAscii", F_LOWER},
                     {"upperAscii", F_UPPER},  {"compareTo", F_COMPARETO},    {"isGreaterThan", F_ISGT},
                     {"isLessThan", F_ISLT},   {"asInteger", F_ASINT},        {"asApproximateFloat", F_ASFLOAT},
                     {"isInteger", F_ISINT},   {"add", F_QADD},               {"sub", F_QSUB},
                     {"major", F_MAJOR},       {"minor", F_MINOR},            {"patch", F_PATCH},
                     {"orValue", F_ORVALUE},   {"hasValue", F_HASVALUE}};

/* '(' args ')' after a function name; fills |args| (receiver already in
 * args[0] when |have|) and returns the count or -1 */
static int call_args(struct parser *ps, int32_t *args, int have, int max)
{
        int n = have;
        if (next(ps) < 0) /* past '(' */
                return -1;
        if (ps->tok != K_RP) {
                for (;;) {
                        int a = expr(ps);
                        if (a < 0)
                                return -1;
                        if (n < max)
                                args[n] = a;
                        n++;
                        if (ps->tok != K_COMMA)
                                break;
                        if (next(ps) < 0)
                                return -1;
                }
        }
        if (expect(ps, K_RP, "')'") < 0)
                return -1;
        return n;
}

/* cel.bind(var, init, expr) (cel-go ext.Bindings), after `cel`; the
 * current token is the dot */
static int bind(struct parser *ps, int pos)
{
        if (next(ps) < 0)
                return -1;
        if (ps->tok != K_IDENT || ps->tend - (size_t)ps->tpos != 4 || memcmp(ps->src + ps->tpos, "bind", 4))
                return fail(ps, pos, "undeclared reference to 'cel' (in container '')");
        if (next(ps) < 0 || expect(ps, K_LP, "'('") < 0)
                return -1;
        if (ps->tok != K_IDENT)
                return fail(ps, ps->tpos, "cel.bind() variable name must be a simple identifier");
        const char *name = ps->src + ps->tpos;
        size_t n = ps->tend - (size_t)ps->tpos;
        if ((n == 6 && !memcmp(name, "device", 6)))
                return fail(ps, ps->tpos, "cel.bind() variable name must not shadow 'device'");
        if (ps->n_vars == KDEV_CEL__MAX_VARS)
                return fail(ps, ps->tpos, "more than %d nested cel.bind() variables", KDEV_CEL__MAX_VARS);
        int init, body;
        if (next(ps) < 0 || expect(ps, K_COMMA, "','") < 0 || (init = expr(ps)) < 0 ||
            expect(ps, K_COMMA, "','") < 0)
                return -1;
        int slot = ps->n_vars++;
        ps->vars[slot].name = name;
        ps->vars[slot].n = n;
        ps->vars[slot].type = N(ps, init)->type;
        body = expr(ps);
        ps->n_vars--;
        if (body < 0 || expect(ps, K_RP, "')'") < 0)
                return -1;
        int nd = new_node(ps, N_BIND, pos);
        if (nd < 0)
                return -1;
        N(ps, nd)->a = init;
        N(ps, nd)->b = body;
        N(ps, nd)->args = slot;
        N(ps, nd)->type = N(ps, body)->type;
        return nd;
}

static int ident_primary(struct parser *ps)
{
        int pos = ps->tpos;
        const char *name = ps->src + pos;
        size_t n = ps->tend - (size_t)pos;
        if (next(ps) < 0)
                return -1;
        for (int v = ps->n_vars - 1; v >= 0 && ps->tok != K_LP; v--)
                if (ps->vars[v].n == n && !memcmp(ps->vars[v].name, name, n)) {
                        int nd = new_node(ps, N_VAR, pos);
                        if (nd >= 0) {
                                N(ps, nd)->args = v;
                                N(ps, nd)->type = ps->vars[v].type;
                        }
                        return nd;
                }
        if (n == 3 && !memcmp(name, "cel", 3) && ps->tok == K_DOT)
                return bind(ps, pos);
        if (ps->tok != K_LP) {
                if (n == 6 && !memcmp(name, "device", 6)) {
                        int nd = new_node(ps, N_DEVICE, pos);
                        if (nd >= 0)
                                N(ps, nd)->type = T_DEVICE;
                        return nd;
                }
                return fail(ps, pos, "undeclared reference to '%.*s' (in container '')", (int)n, name);
        }
        if (n == 3 && !memcmp(name, "has", 3)) {
                int32_t a[4];
                int cnt = call_args(ps, a, 0, 4);
                if (cnt < 0)
                        return -1;
                if (cnt != 1 || N(ps, a[0])->kind != N_SELECT || N(ps, a[0])->fn)
                        return fail(ps, pos, "invalid argument to has() macro");
                N(ps, a[0])->kind = N_HAS;
                N(ps, a[0])->type = T_BOOL;
                return a[0];
        }
        for (size_t i = 0; i < sizeof(globals) / sizeof(globals[0]); i++)
                if (strlen(globals[i].name) == n && !memcmp(globals[i].name, name, n)) {
                        int32_t a[8];
                        int cnt = call_args(ps, a, 0, 8);
                        if (cnt < 0)
                                return -1;
                        if (cnt > 8)
                                return fail(ps, pos, "too many arguments to '%.*s'", (int)n, name);
                        return make_call(ps, globals[i].fn, false, pos, a, (size_t)cnt);
                }
        return fail(ps, pos, "undeclared reference to '%.*s' (in container '')", (int)n, name);
}

static int primary(struct parser *ps)
{
        int pos = ps->tpos, nd;
        switch (ps->tok) {
        case K_IDENT: return ident_primary(ps);
        case K_LP:
                if (next(ps) < 0 || (nd = expr(ps)) < 0 || expect(ps, K_RP, "')'") < 0)
                        return -1;
                return nd;
        case K_TRUE:
        case K_FALSE:
                nd = lit_node(ps, T_BOOL, pos);
                if (nd >= 0)
                        N(ps, nd)->lit.b = ps->tok == K_TRUE;
                return nd < 0 || next(ps) < 0 ? -1 : nd;
        case K_NULL: nd = lit_node(ps, T_NULL, pos); return nd < 0 || next(ps) < 0 ? -1 : nd;
        case K_INT:
                if (ps->u > INT64_MAX)
                        return fail(ps, pos, "invalid int literal");
                nd = lit_node(ps, T_INT, pos);
                if (nd >= 0)
                        N(ps, nd)->lit.i = (int64_t)ps->u;
                return nd < 0 || next(ps) < 0 ? -1 : nd;
        case K_UINT:
                nd = lit_node(ps, T_UINT, pos);
                if (nd >= 0)
                        N(ps, nd)->lit.u = ps->u;
                return nd < 0 || next(ps) < 0 ? -1 : nd;
        case K_DOUBLE:
                nd = lit_node(ps, T_DOUBLE, pos);
                if (nd >= 0)
                        N(ps, nd)->lit.d = ps->d;
                return nd < 0 || next(ps) < 0 ? -1 : nd;
        case K_STRING:
                nd = lit_node(ps, T_STRING, pos);
                if (nd >= 0) {
                        N(ps, nd)->lit.str.s = ps->sbuf;
                        N(ps, nd)->lit.str.n = ps->slen;
                }
                return nd < 0 || next(ps) < 0 ? -1 : nd;
        case K_LB:
        case K_LC: {
                bool is_map_lit = ps->tok == K_LC;
                int close = is_map_lit ? K_RC : K_RB;
                int32_t stackv[32], *v = stackv;
                size_t n = 0, cap = 32;
                if (next(ps) < 0)
                        return -1;
                int rc = 0;
                while (ps->tok != close) {
                        for (int part = 0; part < (is_map_lit ? 2 : 1); part++) {
                                int e = expr(ps);
                                if (e < 0) {
                                        rc = -1;
                                        goto out;
                                }
                                if (n == cap) {
                                        int32_t *m = malloc(cap * 2 * sizeof(*m));
                                        if (!m) {
                                                rc = oom(ps);
                                                goto out;
                                        }
                                        memcpy(m, v, n * sizeof(*m));
                                        if (v != stackv)
                                                free(v);
                                        v = m;
                                        cap *= 2;
                                }
                                v[n++] = e;
                                if (is_map_lit && part == 0) {
                                        int kt = N(ps, e)->type;
                                        if (kt != T_DYN && kt != T_STRING && kt != T_INT && kt != T_UINT && kt != T_BOOL) {
                                                rc = fail(ps, N(ps, e)->pos, "unsupported map key type: %s",
                                                          kdev_cel__type_name(kt));
                                                goto out;
                                        }
                                        if (expect(ps, K_COLON, "':'") < 0) {
                                                rc = -1;
                                                goto out;
                                        }
                                }
                        }
                        if (ps->tok != K_COMMA)
                                break;
                        if (next(ps) < 0) {
                                rc = -1;
                                goto out;
                        }
                }
                if (expect(ps, close, is_map_lit ? "'}'" : "']'") < 0) {
                        rc = -1;
                        goto out;
                }
                int a = add_args(ps, v, n);
                nd = a < 0 ? -1 : new_node(ps, is_map_lit ? N_MAP : N_LIST, pos);
                if (nd < 0) {
                        rc = -1;
                        goto out;
                }
                N(ps, nd)->args = a;
                N(ps, nd)->nargs = (int32_t)n;
                N(ps, nd)->type = is_map_lit ? T_MAP : T_LIST;
                rc = nd;
out:
                if (v != stackv)
                        free(v);
                return rc;
        }
        case K_DOT: return fail(ps, pos, "qualified identifiers are not supported by kdev's CEL subset");
        default: return unexpected(ps);
        }
}

static int member(struct parser *ps)
{
        int e = primary(ps);
        while (e >= 0) {
                int pos = ps->tpos;
                if (ps->tok == K_DOT) {
                        if (next(ps) < 0)
                                return -1;
                        bool opt = ps->tok == K_QUEST;
                        if (opt && next(ps) < 0)
                                return -1;
                        if (ps->tok != K_IDENT && ps->tok != K_IN && ps->tok != K_TRUE && ps->tok != K_FALSE &&
                            ps->tok != K_NULL)
                                return unexpected(ps);
                        int npos = ps->tpos;
                        const char *name = ps->src + npos;
                        size_t n = (ps->tok == K_IDENT ? ps->tend : ps->p) - (size_t)npos;
                        if (next(ps) < 0)
                                return -1;
                        if (ps->tok == K_LP && opt)
                                return unexpected(ps);
                        if (ps->tok == K_LP) {
                                int fn = -1;
                                for (size_t i = 0; i < sizeof(members) / sizeof(members[0]); i++)
                                        if (strlen(members[i].name) == n && !memcmp(members[i].name, name, n))
                                                fn = members[i].fn;
                                if (fn < 0)
                                        return fail(ps, npos, "undeclared reference to '%.*s' (in container '')",
                                                    (int)n, name);
                                int32_t a[8];
                                a[0] = e;
                                int cnt = call_args(ps, a, 1, 8);
                                if (cnt < 0)
                                        return -1;
                                if (cnt > 8)
                                        return fail(ps, npos, "too many arguments to '%.*s'", (int)n, name);
                                e = make_call(ps, fn, true, npos, a, (size_t)cnt);
                                continue;
                        }
                        int et = N(ps, e)->type;
                        int t = select_type(ps, npos, et == T_OPTIONAL ? T_DYN : et, name, n);
                        if (t < 0)
                                return -1;
                        if (opt || et == T_OPTIONAL)
                                t = T_OPTIONAL;
                        char *s = str_alloc(ps, n);
                        if (!s)
                                return oom(ps);
                        memcpy(s, name, n);
                        s[n] = 0;
                        int nd = new_node(ps, N_SELECT, npos);
                        if (nd < 0)
                                return -1;
                        N(ps, nd)->a = e;
                        N(ps, nd)->name = s;
                        N(ps, nd)->name_len = n;
                        N(ps, nd)->type = (uint8_t)t;
                        N(ps, nd)->fn = opt;
                        e = nd;
                } else if (ps->tok == K_LB) {
                        if (next(ps) < 0)
                                return -1;
                        bool opt = ps->tok == K_QUEST;
                        if (opt && next(ps) < 0)
                                return -1;
                        int k = expr(ps);
                        if (k < 0 || expect(ps, K_RB, "']'") < 0)
                                return -1;
                        int et = N(ps, e)->type;
                        int t = index_type(ps, pos, et == T_OPTIONAL ? T_DYN : et, N(ps, k)->type);
                        if (t >= 0 && (opt || et == T_OPTIONAL))
                                t = T_OPTIONAL;
                        int nd = t < 0 ? -1 : new_node(ps, N_INDEX, pos);
                        if (nd < 0)
                                return -1;
                        N(ps, nd)->fn = opt;
                        N(ps, nd)->a = e;
                        N(ps, nd)->b = k;
                        N(ps, nd)->type = (uint8_t)t;
                        e = nd;
                } else {
                        break;
                }
        }
        return e;
}

static int unary(struct parser *ps)
{
        int pos = ps->tpos;
        if (ps->tok == K_NOT || ps->tok == K_MINUS) {
                int count = 0, t = ps->tok;
                while (ps->tok == t) {
                        count++;
                        if (next(ps) < 0)
                                return -1;
                }
                if (t == K_MINUS && (ps->tok == K_INT || ps->tok == K_DOUBLE) && count % 2 == 1) {
                        /* a negative literal: -9223372036854775808 is an int */
                        int nd;
                        if (ps->tok == K_INT) {
                                if (ps->u > (uint64_t)INT64_MAX + 1)
                                        return fail(ps, pos, "invalid int literal");
                                nd = lit_node(ps, T_INT, pos);
                                if (nd >= 0)
                                        N(ps, nd)->lit.i = ps->u == (uint64_t)INT64_MAX + 1 ? INT64_MIN
                                                                                           : -(int64_t)ps->u;
                        } else {
                                nd = lit_node(ps, T_DOUBLE, pos);
                                if (nd >= 0)
                                        N(ps, nd)->lit.d = -ps->d;
                        }
                        if (nd < 0 || next(ps) < 0)
                                return -1;
                        /* member access after the literal: (-1).x is not CEL; keep it simple */
                        return nd;
                }
                int e = member(ps);
                for (int i = 0; i < count && e >= 0; i++) {
                        if (t == K_NOT) {
                                int at = N(ps, e)->type;
                                if (at != T_BOOL && at != T_DYN)
                                        return fail(ps, pos, "found no matching overload for '!_' applied to '(%s)'",
                                                    kdev_cel__type_name(at));
                                int nd = new_node(ps, N_NOT, pos);
                                if (nd < 0)
                                        return -1;
                                N(ps, nd)->a = e;
                                N(ps, nd)->type = T_BOOL;
                                e = nd;
                        } else {
                                int32_t a[1] = {e};
                                e = make_call(ps, F_NEG, false, pos, a, 1);
                        }
                }
                return e;
        }
        return member(ps);
}

static int binary(struct parser *ps, int level);

static int binop(struct parser *ps, int fn, int pos, int l, int r)
{
        int32_t a[2] = {l, r};
        return make_call(ps, fn, false, pos, a, 2);
}

/* levels: 0 relation, 1 additive, 2 multiplicative */
static int binary(struct parser *ps, int level)
{
        if (++ps->depth > MAX_DEPTH)
                return fail(ps, ps->tpos, "expression recursion limit exceeded: %d", MAX_DEPTH);
        int l = level == 2 ? unary(ps) : binary(ps, level + 1);
        for (;;) {
                if (l < 0)
                        break;
                int t = ps->tok, fn = -1, pos = ps->tpos;
                if (level == 0)
                        fn = t == K_LT ? F_LT : t == K_LE ? F_LE : t == K_GT ? F_GT : t == K_GE ? F_GE
                           : t == K_EQ ? F_EQ : t == K_NE ? F_NE : t == K_IN ? F_IN : -1;
                else if (level == 1)
                        fn = t == K_PLUS ? F_ADD : t == K_MINUS ? F_SUB : -1;
                else
                        fn = t == K_STAR ? F_MUL : t == K_SLASH ? F_DIV : t == K_PCT ? F_MOD : -1;
                if (fn < 0)
                        break;
                if (next(ps) < 0)
                        return -1;
                int r = level == 2 ? unary(ps) : binary(ps, level + 1);
                if (r < 0)
                        return -1;
                l = binop(ps, fn, pos, l, r);
        }
        ps->depth--;
        return l;
}

static int logic(struct parser *ps, bool is_or)
{
        int l = is_or ? logic(ps, false) : binary(ps, 0);
        int tok = is_or ? K_OR : K_AND;
        while (l >= 0 && ps->tok == tok) {
                int pos = ps->tpos;
                if (next(ps) < 0)
                        return -1;
                int r = is_or ? logic(ps, false) : binary(ps, 0);
                if (r < 0)
                        return -1;
                for (int k = 0; k < 2; k++) {
                        int at = N(ps, k ? r : l)->type;
                        if (at != T_BOOL && at != T_DYN)
                                return fail(ps, pos, "found no matching overload for '%s' applied to '(%s, %s)'",
                                            is_or ? "_||_" : "_&&_", kdev_cel__type_name(N(ps, l)->type),
                                            kdev_cel__type_name(N(ps, r)->type));
                }
                int nd = new_node(ps, is_or ? N_OR : N_AND, pos);
                if (nd < 0)
                        return -1;
                N(ps, nd)->a = l;
                N(ps, nd)->b = r;
                N(ps, nd)->type = T_BOOL;
                l = nd;
        }
        return l;
}

static int expr(struct parser *ps)
{
        if (++ps->depth > MAX_DEPTH)
                return fail(ps, ps->tpos, "expression recursion limit exceeded: %d", MAX_DEPTH);
        int c = logic(ps, true);
        if (c >= 0 && ps->tok == K_QUEST) {
                int pos = ps->tpos;
                int ct = N(ps, c)->type;
                if (ct != T_BOOL && ct != T_DYN)
                        return fail(ps, pos, "found no matching overload for '_?_:_' applied to '(%s, ...)'",
                                    kdev_cel__type_name(ct));
                int a, b;
                if (next(ps) < 0 || (a = logic(ps, true)) < 0 || expect(ps, K_COLON, "':'") < 0 ||
                    (b = expr(ps)) < 0)
                        return -1;
                int nd = new_node(ps, N_COND, pos);
                if (nd < 0)
                        return -1;
                int ta = N(ps, a)->type, tb = N(ps, b)->type;
                if (ta != tb && ta != T_DYN && tb != T_DYN && base(ta) != base(tb))
                        return fail(ps, pos, "found no matching overload for '_?_:_' applied to '(bool, %s, %s)'",
                                    kdev_cel__type_name(ta), kdev_cel__type_name(tb));
                N(ps, nd)->a = c;
                N(ps, nd)->b = a;
                N(ps, nd)->c = b;
                N(ps, nd)->type = (uint8_t)(ta == tb ? ta : T_DYN);
                c = nd;
        }
        ps->depth--;
        return c;
}

/* ---- compile -------------------------------------------------------- */

void kdev_cel_program_free(struct kdev_cel_program *prog)
{
        if (!prog)
                return;
        for (size_t i = 0; i < prog->n_regex; i++)
                regfree(&prog->regex[i]);
        free(prog->regex);
        free(prog->nodes);
        free(prog->args);
        free(prog->strings);
        free(prog);
}

static int compile(const char *src, bool any, struct kdev_cel_program **out, struct kdev_err *err)
{
        *out = NULL;
        size_t len = src ? strlen(src) : 0;
        if (len > KDEV_CEL_MAX_EXPRESSION_LENGTH)
                return kdev_err_set(err, EINVAL, "expression too long: %zu bytes, the limit is %d", len,
                                    KDEV_CEL_MAX_EXPRESSION_LENGTH);
        struct parser ps = {.src = src ? src : "", .len = len, .err = err, .any_result = any};
        ps.prog = calloc(1, sizeof(*ps.prog));
        /* names and decoded strings are never longer than the source; each
         * string literal also takes a NUL and the lexer's working room */
        ps.str_cap = 3 * len + 16;
        ps.strings = malloc(ps.str_cap);
        if (!ps.prog || !ps.strings) {
                free(ps.strings);
                free(ps.prog);
                return kdev_err_set(err, ENOMEM, "compilation failed: out of memory");
        }
        ps.prog->strings = ps.strings;
        int root = -1;
        if (next(&ps) == 0) {
                root = expr(&ps);
                if (root >= 0 && ps.tok != K_EOF)
                        root = unexpected(&ps);
        }
        if (root >= 0) {
                /* children are made before their parents: one forward pass
                 * gives every node's height, the interpreter's recursion
                 * depth */
                size_t n = ps.prog->n_nodes;
                uint16_t *h = calloc(n ? n : 1, sizeof(*h));
                if (!h) {
                        root = oom(&ps);
                } else {
                        for (size_t i = 0; i < n && root >= 0; i++) {
                                const struct kdev_cel__node *x = &ps.prog->nodes[i];
                                int m = 0;
                                int32_t kids[3] = {x->a, x->b, x->c};
                                for (int k = 0; k < 3; k++)
                                        if (kids[k] >= 0 && h[kids[k]] > m)
                                                m = h[kids[k]];
                                for (int32_t k = 0; k < x->nargs; k++)
                                        if (h[ps.prog->args[x->args + k]] > m)
                                                m = h[ps.prog->args[x->args + k]];
                                h[i] = (uint16_t)(m + 1);
                                if (h[i] > MAX_HEIGHT)
                                        root = fail(&ps, x->pos, "expression nesting limit exceeded: %d", MAX_HEIGHT);
                        }
                        free(h);
                }
        }
        if (root >= 0 && !any) {
                int t = N(&ps, root)->type;
                if (t != T_BOOL && t != T_DYN) {
                        /* Kubernetes reports it without a position
                         * (cel/compile.go) */
                        ps.error = kdev_err_set(err, EINVAL, "must evaluate to bool or the unknown type, not %s",
                                                kdev_cel__type_name(t));
                        root = -1;
                }
        }
        if (root < 0) {
                int rc = ps.error ? ps.error : -EINVAL;
                kdev_cel_program_free(ps.prog);
                return rc;
        }
        ps.prog->root = root;
        *out = ps.prog;
        return 0;
}

int kdev_cel_compile(const char *expr_src, struct kdev_cel_program **out, struct kdev_err *err)
{
        return compile(expr_src, false, out, err);
}

int kdev_cel_compile_any(const char *expr_src, struct kdev_cel_program **out, struct kdev_err *err)
{
        return compile(expr_src, true, out, err);
}

/* ---- regex dialect -------------------------------------------------- */

int kdev_cel__regcomp(regex_t *re, const char *pat, size_t n, struct kdev_err *err)
{
        /* worst case: every \d becomes [0-9] (5 bytes for 2) and \w inside a
         * bracket "0-9A-Za-z_" (10 for 2) */
        char *o = malloc(n * 6 + 1);
        if (!o)
                return kdev_err_set(err, ENOMEM, "out of memory");
        size_t k = 0;
        bool in_br = false, after_rep = false;
        unsigned long reps = 1;
        int shown = (int)(n > 100 ? 100 : n);
        for (size_t i = 0; i < n; i++) {
                char c = pat[i];
                if (c == 0) {
                        free(o);
                        return kdev_err_set(err, EINVAL, "invalid regular expression: NUL in pattern");
                }
                /* RE2's limits, which also keep regcomp's memory bounded: no
                 * repetition of a repetition, counts up to 1000 (here: their
                 * product, as if nested), no backreferences */
                bool rep = !in_br && (c == '*' || c == '+' || c == '?' || c == '{');
                if (rep && after_rep) {
                        free(o);
                        return kdev_err_set(err, EINVAL,
                                            "invalid regular expression '%.*s': invalid nested repetition operator",
                                            shown, pat);
                }
                after_rep = rep;
                if (rep && c == '{') {
                        size_t j = i + 1;
                        unsigned long a = 0, b = 0;
                        bool comma = false;
                        while (j < n && ((pat[j] >= '0' && pat[j] <= '9') || (pat[j] == ',' && !comma))) {
                                if (pat[j] == ',')
                                        comma = true;
                                else if (comma)
                                        b = b * 10 + (unsigned long)(pat[j] - '0');
                                else
                                        a = a * 10 + (unsigned long)(pat[j] - '0');
                                if (a > 100000 || b > 100000)
                                        break;
                                j++;
                        }
                        reps *= (a > b ? a : b) > 1 ? (a > b ? a : b) : 1;
                        if (reps > 1000) {
                                free(o);
                                return kdev_err_set(err, EINVAL,
                                                    "invalid regular expression '%.*s': bad repetition operator "
                                                    "(counts above 1000)",
                                                    shown, pat);
                        }
                        while (i < n && pat[i] != '}')
                                o[k++] = pat[i++];
                        if (i < n)
                                o[k++] = pat[i];
                        continue;
                }
                if (!in_br && c == '\\' && i + 1 < n && pat[i + 1] >= '0' && pat[i + 1] <= '9') {
                        free(o);
                        return kdev_err_set(err, EINVAL,
                                            "invalid regular expression '%.*s': backreferences are not supported",
                                            shown, pat);
                }
                if (!in_br && c == '(' && i + 1 < n && pat[i + 1] == '?') {
                        free(o);
                        return kdev_err_set(err, EINVAL,
                                            "invalid regular expression '%.*s': RE2 groups and flags (?...) are "
                                            "not supported by POSIX ERE",
                                            (int)(n > 100 ? 100 : n), pat);
                }
                if (c == '[' && !in_br) {
                        in_br = true;
                        o[k++] = c;
                        if (i + 1 < n && pat[i + 1] == '^')
                                o[k++] = pat[++i];
                        if (i + 1 < n && pat[i + 1] == ']')
                                o[k++] = pat[++i];
                        continue;
                }
                if (c == ']' && in_br) {
                        in_br = false;
                        o[k++] = c;
                        continue;
                }
                if (c == '\\' && i + 1 < n) {
                        char e = pat[i + 1];
                        const char *cls = e == 'd' ? "0-9" : e == 'w' ? "0-9A-Za-z_" : e == 's' ? " \t\n\r\f\v" : NULL;
                        const char *ncls = e == 'D' ? "0-9" : e == 'W' ? "0-9A-Za-z_" : e == 'S' ? " \t\n\r\f\v" : NULL;
                        if (cls && in_br) {
                                k += (size_t)sprintf(o + k, "%s", cls);
                                i++;
                                continue;
                        }
                        if ((cls || ncls) && !in_br) {
                                k += (size_t)sprintf(o + k, "[%s%s]", ncls ? "^" : "", cls ? cls : ncls);
                                i++;
                                continue;
                        }
                        if (ncls && in_br) {
                                free(o);
                                return kdev_err_set(err, EINVAL,
                                                    "invalid regular expression '%.*s': \\%c inside brackets is not "
                                                    "supported",
                                                    (int)(n > 100 ? 100 : n), pat, e);
                        }
                        if (in_br) { /* POSIX: no escapes in brackets; a literal backslash escape */
                                o[k++] = e;
                                i++;
                                continue;
                        }
                }
                o[k++] = c;
        }
        o[k] = 0;
        int rc = regcomp(re, o, REG_EXTENDED | REG_NOSUB);
        free(o);
        if (rc != 0) {
                char why[128];
                regerror(rc, re, why, sizeof(why));
                return kdev_err_set(err, EINVAL, "invalid regular expression '%.*s': %s", (int)(n > 100 ? 100 : n),
                                    pat, why);
        }
        return 0;
}
