/* A CEL evaluator for DRA device selectors: the language subset that
 * ResourceClaim and DeviceClass selectors (`selectors[].cel.expression`) use,
 * compiled once and evaluated against many devices.
 *
 * It follows the Kubernetes DRA CEL environment:
 * k8s.io/dynamic-resource-allocation cel/compile.go (the `device` variable,
 * its fields, empty maps for unknown domains, `no such key: <name>` for a
 * missing attribute, the runtime cost limit), the apiserver's CEL libraries
 * (k8s.io/apiserver pkg/cel/library quantity.go and semverlib.go) and the CEL
 * language definition (google/cel-spec doc/langdef.md: literals, operators,
 * commutative error absorption of && and ||, heterogeneous equality,
 * the cross-type numeric comparisons the Kubernetes base environment turns
 * on). What is supported, the regex dialect of matches() and the cost model:
 * README.md, "CEL device selectors".
 *
 * Threading: a compiled program is immutable; any number of threads may
 * evaluate one program at the same time (each evaluation keeps its state on
 * its own stack and in its own allocations). No global state.
 */
#ifndef KDEV_CEL_CEL_H
#define KDEV_CEL_CEL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/err.h"
#include "common/export.h"

/* Kubernetes' limits for a device selector (resource.k8s.io/v1 types.go):
 * CELSelectorExpressionMaxLength (bytes) and CELSelectorExpressionMaxCost,
 * the latter also the runtime cost limit of every evaluation
 * (dynamic-resource-allocation cel/compile.go). */
#define KDEV_CEL_MAX_EXPRESSION_LENGTH 10240
#define KDEV_CEL_COST_LIMIT 1000000ULL

/* What Kubernetes' scheduler appends to a runtime error that contains
 * `no such key:` (dynamic-resource-allocation cel/errors.go,
 * EnhanceRuntimeError; once): the allocator adds it, kdev_cel_match() does
 * not. */
#define KDEV_CEL_NO_SUCH_KEY_HINT                                                                         \
        ". consider using CEL optional chaining (.? followed by orValue()) or guarding the check with has() " \
        "for optional fields"

/* A Kubernetes quantity (apimachinery resource.Quantity), exact: the value
 * is mantissa x 10^exponent. Binary suffixes are folded into the mantissa
 * (1Ki = 1024 x 10^0). */
struct kdev_cel_quantity {
        __int128 mantissa;
        int32_t exponent;
};

/* A semantic version (semver 2.0.0, as github.com/blang/semver parses it
 * strictly). |pre| points into the string it was parsed from (not owned),
 * |pre_len| bytes, 0 for a release; build metadata is ignored. */
struct kdev_cel_semver {
        uint64_t major, minor, patch;
        const char *pre;
        size_t pre_len;
};

/* The type of a device attribute (resource.k8s.io DeviceAttribute: exactly
 * one of int, bool, string, version). */
enum kdev_cel_attr_type {
        KDEV_CEL_ATTR_INT,
        KDEV_CEL_ATTR_BOOL,
        KDEV_CEL_ATTR_STRING,
        /* |s| is the version string, parsed when the selector reads it
         * (Kubernetes converts every attribute before evaluating; a version
         * that does not parse cannot pass the API server's validation of a
         * ResourceSlice, so only an unchecked record can tell them apart) */
        KDEV_CEL_ATTR_VERSION,
};

/* One attribute of a device. |domain| is the domain part of the attribute's
 * qualified name; NULL stands for the driver name (Kubernetes places an
 * unqualified name under the driver's domain: parseQualifiedName in
 * cel/compile.go); |name| is the ID part, without the domain. */
struct kdev_cel_attribute {
        const char *domain;
        const char *name;
        enum kdev_cel_attr_type type;
        int64_t i;
        bool b;
        const char *s;
};

/* One capacity of a device: domain and name as for attributes, |value| the
 * capacity's `value` (kdev_cel_quantity_parse). */
struct kdev_cel_capacity {
        const char *domain;
        const char *name;
        struct kdev_cel_quantity value;
};

/* The device a selector is evaluated against (the CEL variable `device`,
 * declared type kubernetes.DRADevice). All strings NUL-terminated; nothing
 * is copied or owned by the evaluator; each array may be NULL when its count
 * is 0. */
struct kdev_cel_device {
        const char *driver;
        const struct kdev_cel_attribute *attributes;
        size_t n_attributes;
        const struct kdev_cel_capacity *capacity;
        size_t n_capacity;
        bool allow_multiple_allocations;
};

struct kdev_cel_program;

/* Compiles the NUL-terminated selector |expr|: parses it, resolves the
 * `device` variable and its fields, type-checks what is statically known
 * and compiles constant regular expressions. The result must be bool or of
 * unknown type (an attribute value), as Kubernetes requires.
 *
 * Returns 0 and sets *|out| to a program the caller frees with
 * kdev_cel_program_free(); or -EINVAL with |err| (may be NULL) set to the
 * compile error: `compilation failed: ERROR: <input>:LINE:COLUMN: <message>`
 * (1-based line and column, cel-go's format) followed by the offending line
 * and a caret under the column, e.g. `undeclared reference to 'x' (in
 * container '')`, `undefined field 'foo'`, `Syntax error: ...`,
 * `found no matching overload for '_+_' applied to '(int, string)'`; an
 * expression longer than KDEV_CEL_MAX_EXPRESSION_LENGTH bytes is refused
 * before parsing; a selector of another type gets Kubernetes' `must
 * evaluate to bool or the unknown type, not <type>`. -ENOMEM when out of
 * memory. |expr| is not kept. */
KDEV_API int kdev_cel_compile(const char *expr, struct kdev_cel_program **out,
                              struct kdev_err *err);

/* As kdev_cel_compile(), but the result may have any type (for tests and
 * for printing values with kdev_cel_eval()). */
KDEV_API int kdev_cel_compile_any(const char *expr, struct kdev_cel_program **out,
                                  struct kdev_err *err);

/* Frees |prog| (NULL is allowed). */
KDEV_API void kdev_cel_program_free(struct kdev_cel_program *prog);

/* Evaluates the selector |prog| against |dev| (may be NULL for an expression
 * that does not refer to `device`) with a runtime cost limit of
 * |cost_limit| units (KDEV_CEL_COST_LIMIT as Kubernetes; 0 means that
 * default). *|cost| (may be NULL) receives the cost spent.
 *
 * Returns 1 (true), 0 (false), or a negative errno with |err| (may be NULL)
 * set to the CEL runtime error, without Kubernetes' prefixes (the caller
 * adds `selector #<i> on device <driver>/<pool>/<device>: CEL runtime
 * error: `): `no such key: <name>`, `no such overload`, `integer overflow`,
 * `division by zero`, `attribute <name>: parse semantic version: <why>`,
 * a quantity or semver parse error, `CEL result of type <type> could not be
 * converted to bool`, or `operation cancelled: actual cost limit exceeded`
 * (-ECANCELED). -ENOMEM when out of memory. */
KDEV_API int kdev_cel_match(const struct kdev_cel_program *prog, const struct kdev_cel_device *dev,
                            uint64_t cost_limit, uint64_t *cost, struct kdev_err *err);

/* Evaluates |prog| as kdev_cel_match() does and writes the result as CEL
 * text into |buf| (|size| bytes, NUL-terminated, truncated if short): `true`,
 * `42`, `42u`, `1.5`, `"text"` (quoted, escaped), `null`, `[1, 2]`,
 * `{"a": 1}`, `quantity("10737418240")` (the exact decimal value),
 * `semver("1.2.3-rc.1")`, `optional.of(1)`, `optional.none()`. Returns 0 or a negative errno with |err| set as
 * kdev_cel_match() does. */
KDEV_API int kdev_cel_eval(const struct kdev_cel_program *prog, const struct kdev_cel_device *dev,
                           uint64_t cost_limit, uint64_t *cost, char *buf, size_t size,
                           struct kdev_err *err);

/* Parses the NUL-terminated Kubernetes quantity |s| (apimachinery
 * resource.ParseQuantity: optional sign, digits with an optional fraction,
 * then one of the suffixes n u m "" k M G T P E, Ki Mi Gi Ti Pi Ei, or an
 * exponent e<int> / E<int>) into *|q|. Returns 0, or -EINVAL with |err|
 * (may be NULL) set to `quantities must match the regular expression
 * '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'` (Kubernetes'
 * ErrFormatWrong), `unable to parse quantity's suffix` or, for values beyond
 * 36 significant digits or exponents beyond +-60 (which Kubernetes accepts
 * and kdev does not), `quantity out of the range kdev supports`. */
KDEV_API int kdev_cel_quantity_parse(const char *s, struct kdev_cel_quantity *q,
                                     struct kdev_err *err);

/* Compares two quantities exactly: -1, 0 or 1 (Quantity.Cmp). */
KDEV_API int kdev_cel_quantity_cmp(const struct kdev_cel_quantity *a,
                                   const struct kdev_cel_quantity *b);

/* Parses the semantic version |s| (|len| bytes, need not be NUL-terminated)
 * strictly (semver 2.0.0: MAJOR.MINOR.PATCH, numbers without leading zeros,
 * optional -prerelease and +build) into *|v|, whose |pre| points into |s|.
 * Returns 0 or -EINVAL with |err| (may be NULL) set to blang/semver's
 * message (`Version string empty`, `No Major.Minor.Patch elements found`,
 * `Invalid character(s) found in major number "<n>"`, ...). */
KDEV_API int kdev_cel_semver_parse(const char *s, size_t len, struct kdev_cel_semver *v,
                                   struct kdev_err *err);

/* Compares two versions by semver precedence: -1, 0 or 1. */
KDEV_API int kdev_cel_semver_cmp(const struct kdev_cel_semver *a, const struct kdev_cel_semver *b);

#endif /* KDEV_CEL_CEL_H */
