/* Type checks for JSON read from outside (files, the API server, scenario
 * files), so that a value of another JSON type than expected fails with one
 * message form everywhere:
 *
 *     <context>: <path>: expected <type>, got <type>
 *
 * e.g. "claim ns/t: .status.allocation: expected an object, got an array".
 * <context> says what was read (a file name, "GET <path>: 200", "claim
 * <ns>/<name>"), <path> is the value's path in jq notation (".spec.devices[2]")
 * or a phrase for the whole document ("top level", "response body"). Types are
 * named as JSON names them (RFC 8259 section 3): "an object", "an array",
 * "a string", "a number", "a boolean", "null"; an integer and a real are both
 * "a number" when found, and "an integer" is named only as an expectation.
 */
#ifndef KDEV_COMMON_JSON_H
#define KDEV_COMMON_JSON_H

#include <jansson.h>
#include <stdbool.h>

#include "common/err.h"
#include "common/export.h"

/* The JSON type of |j| with its article ("an object", "a number", ...;
 * "nothing" for NULL). Returns a static string, never NULL. */
KDEV_API const char *kdev_json_kind(const json_t *j);

/* The name of |type| as an expectation ("an object", "an integer" for
 * JSON_INTEGER, "a number" for JSON_REAL, "a boolean" for JSON_TRUE and
 * JSON_FALSE). Returns a static string, never NULL. */
KDEV_API const char *kdev_json_type_name(json_type type);

/* Whether |j| (not NULL) is of |type|: JSON_REAL accepts any number,
 * JSON_TRUE and JSON_FALSE accept either boolean. */
KDEV_API bool kdev_json_is(const json_t *j, json_type type);

/* Checks that |j| is absent (NULL) or of |type| (as kdev_json_is()).
 * |where_fmt| and its arguments (printf-style) give "<context>: <path>".
 * Returns 0 when |j| is NULL or of |type|; otherwise sets |err| (may be NULL)
 * to EPROTO "<where>: expected <type>, got <kind of j>" and returns -EPROTO.
 * Nothing is allocated; |j| is borrowed. */
KDEV_API int kdev_json_expect(const json_t *j, json_type type, struct kdev_err *err,
                              const char *where_fmt, ...) __attribute__((format(printf, 4, 5)));

/* As kdev_json_expect() for |key| of |obj| (which may be NULL or not an
 * object: then there is no member). |ctx| is "<context>" (NULL or "" for
 * none) and |path| the object's path ("" for the top level); the message
 * names "<ctx>: <path>.<key>" (or "<path>.<key>" without a context).
 * On success |*out| (may be NULL) is the member (borrowed) or NULL when absent. */
KDEV_API int kdev_json_member(const json_t *obj, const char *key, json_type type, json_t **out,
                              const char *ctx, const char *path, struct kdev_err *err);

#endif /* KDEV_COMMON_JSON_H */
