#include "common/json.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>

const char *kdev_json_kind(const json_t *j)
{
        if (!j)
                return "nothing";
        switch (json_typeof(j)) {
        case JSON_OBJECT: return "an object";
        case JSON_ARRAY: return "an array";
        case JSON_STRING: return "a string";
        case JSON_INTEGER:
        case JSON_REAL: return "a number";
        case JSON_TRUE:
        case JSON_FALSE: return "a boolean";
        case JSON_NULL: return "null";
        }
        return "a value";
}

const char *kdev_json_type_name(json_type type)
{
        switch (type) {
        case JSON_OBJECT: return "an object";
        case JSON_ARRAY: return "an array";
        case JSON_STRING: return "a string";
        case JSON_INTEGER: return "an integer";
        case JSON_REAL: return "a number";
        case JSON_TRUE:
        case JSON_FALSE: return "a boolean";
        case JSON_NULL: return "null";
        }
        return "a value";
}

bool kdev_json_is(const json_t *j, json_type type)
{
        if (!j)
                return false;
        switch (type) {
        case JSON_REAL: return json_is_number(j);
        case JSON_TRUE:
        case JSON_FALSE: return json_is_boolean(j);
        default: return json_typeof(j) == type;
        }
}

int kdev_json_expect(const json_t *j, json_type type, struct kdev_err *err,
                     const char *where_fmt, ...)
{
        if (!j || kdev_json_is(j, type))
                return 0;
        char where[KDEV_ERR_MSG_MAX];
        va_list ap;
        va_start(ap, where_fmt);
        vsnprintf(where, sizeof(where), where_fmt, ap);
        va_end(ap);
        return kdev_err_set(err, EPROTO, "%s: expected %s, got %s", where,
                            kdev_json_type_name(type), kdev_json_kind(j));
}

int kdev_json_member(const json_t *obj, const char *key, json_type type, json_t **out,
                     const char *ctx, const char *path, struct kdev_err *err)
{
        json_t *v = json_is_object(obj) ? json_object_get(obj, key) : NULL;
        if (out)
                *out = NULL;
        int rc = ctx && *ctx ? kdev_json_expect(v, type, err, "%s: %s.%s", ctx, path, key)
                             : kdev_json_expect(v, type, err, "%s.%s", path, key);
        if (rc < 0)
                return rc;
        if (out)
                *out = v;
        return 0;
}
