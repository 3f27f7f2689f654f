/* The CEL evaluator's inside (cel.h): the compiled program (a node array
 * with static types), the value representation and the overload table the
 * checker and the interpreter share. */
#ifndef KDEV_CEL_CEL_INTERNAL_H
#define KDEV_CEL_CEL_INTERNAL_H

#include <regex.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cel/cel.h"

/* types: static (checker) and dynamic (values); T_DYN only statically,
 * T_ERROR only at runtime */
enum kdev_cel__type {
        T_DYN,
        T_NULL,
        T_BOOL,
        T_INT,
        T_UINT,
        T_DOUBLE,
        T_STRING,
        T_LIST,
        T_MAP,
        T_QUANTITY,
        T_SEMVER,
        T_DEVICE,
        T_ATTR_OUTER, /* device.attributes */
        T_ATTR_INNER, /* device.attributes[domain] */
        T_CAP_OUTER,  /* device.capacity */
        T_CAP_INNER,  /* device.capacity[domain] */
        T_OPTIONAL, /* CEL's optional_type: .?name, [?key] */
        T_ERROR,
        T__COUNT,
};

enum kdev_cel__node_kind {
        N_LIT,    /* constant: node.lit */
        N_LIST,   /* args: elements */
        N_MAP,    /* args: key, value, key, value, ... */
        N_DEVICE, /* the variable `device` */
        N_SELECT, /* a.name */
        N_HAS,    /* has(a.name) */
        N_INDEX,  /* a[b] */
        N_CALL,   /* function fn: args (receiver first for a member call) */
        N_AND,
        N_OR,
        N_NOT,
        N_COND, /* a ? b : c */
        N_BIND, /* cel.bind(var, a, b): var (slot |args|) = a while b runs */
        N_VAR,  /* a cel.bind variable: slot |args| */
};

/* nested cel.bind variables at most */
#define KDEV_CEL__MAX_VARS 16

enum kdev_cel__fn {
        F_EQ, F_NE, F_LT, F_LE, F_GT, F_GE, F_ADD, F_SUB, F_MUL, F_DIV, F_MOD, F_NEG, F_IN,
        F_SIZE, F_STARTS, F_ENDS, F_CONTAINS, F_MATCHES, F_LOWER, F_UPPER,
        F_QUANTITY, F_ISQUANTITY, F_SEMVER, F_ISSEMVER,
        F_COMPARETO, F_ISGT, F_ISLT, F_ASINT, F_ASFLOAT, F_ISINT, F_QADD, F_QSUB, F_SIGN,
        F_MAJOR, F_MINOR, F_PATCH,
        F_INT, F_UINT, F_DOUBLE, F_STRING, F_ORVALUE, F_HASVALUE,
        F__COUNT,
};

struct kdev_cel__val {
        uint8_t t;
        union {
                bool b;
                int64_t i;
                uint64_t u;
                double d;
                struct {
                        const char *s;
                        size_t n;
                } str; /* T_STRING; T_ATTR_INNER / T_CAP_INNER: the domain */
                struct {
                        const struct kdev_cel__val *v;
                        size_t n;
                } list; /* T_LIST: n values; T_MAP: n key/value pairs (2n values) */
                struct kdev_cel_quantity q;
                struct kdev_cel_semver sv;
                const char *err; /* T_ERROR */
                const struct kdev_cel__val *opt; /* T_OPTIONAL: the value, NULL for none */
        };
};

struct kdev_cel__node {
        uint8_t kind, type; /* enum kdev_cel__node_kind, static enum kdev_cel__type */
        uint8_t fn;         /* N_CALL; N_SELECT/N_INDEX: 1 for .?name / [?key] */
        uint8_t member;     /* N_CALL: called as a member (receiver is args[0]) */
        int32_t pos;        /* byte offset in the expression */
        int32_t a, b, c;    /* children (N_SELECT/N_HAS: a; N_INDEX: a, b; ...) */
        int32_t args, nargs; /* into prog->args */
        int32_t regex;      /* F_MATCHES with a constant pattern: into prog->regex, else -1 */
        const char *name;   /* N_SELECT/N_HAS: field name (into prog->strings) */
        size_t name_len;
        struct kdev_cel__val lit; /* N_LIT; strings point into prog->strings */
};

struct kdev_cel_program {
        struct kdev_cel__node *nodes;
        size_t n_nodes;
        int32_t *args;
        size_t n_args;
        int32_t root;
        char *strings; /* decoded string literals and names */
        regex_t *regex;
        size_t n_regex;
};

/* the function's CEL name ("_==_", "startsWith", ...) */
const char *kdev_cel__fn_name(int fn);
/* the static or runtime type name as cel-go writes it */
const char *kdev_cel__type_name(int t);
/* the overload of |fn| for these argument types (|argt|: |n| types, the
 * receiver first for a member call; T_DYN matches any): its result type,
 * T_DYN when it depends on a T_DYN argument, or -1 when none matches */
int kdev_cel__overload(int fn, bool member, const uint8_t *argt, size_t n);

int kdev_cel__quantity_add(const struct kdev_cel_quantity *a, const struct kdev_cel_quantity *b,
                           int sign, struct kdev_cel_quantity *out);
int kdev_cel__quantity_int(const struct kdev_cel_quantity *q, int64_t *out);
double kdev_cel__quantity_float(const struct kdev_cel_quantity *q);
size_t kdev_cel__quantity_format(const struct kdev_cel_quantity *q, char *buf, size_t size);

/* POSIX ERE from the RE2 subset the selectors use (\d \w \s and their
 * negations, outside and inside brackets); regcomp() flags REG_EXTENDED |
 * REG_NOSUB. Returns 0, or -EINVAL with |err| set to `invalid regular
 * expression '<pattern>': <why>` */
int kdev_cel__regcomp(regex_t *re, const char *pat, size_t n, struct kdev_err *err);

#endif /* KDEV_CEL_CEL_INTERNAL_H */
