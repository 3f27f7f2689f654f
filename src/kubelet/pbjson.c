/* pbjson: protobuf-c <-> jansson, proto3 JSON mapping. See pbjson.h. */
#include "kubelet/pbjson.h"

#include <ctype.h>
#include <errno.h>
#include <float.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/json.h"
#include "deviceplugin/v1beta1/api.pb-c.h"
#include "dra/v1/api.pb-c.h"
#include "dra/v1beta1/api.pb-c.h"
#include "dra_health/v1alpha1/api.pb-c.h"
#include "pluginregistration/v1/api.pb-c.h"
#include "podresources/v1/api.pb-c.h"

#define PATH_MAX_LEN 256

/* Member path for error messages ("containerResponses[0].envs"). */
struct path {
        char buf[PATH_MAX_LEN];
        size_t len;
};

/* Advances |p| by the |n| characters snprintf reported, capped at the room
 * left (the text was truncated then). */
static void path_advance(struct path *p, int n)
{
        size_t room = sizeof(p->buf) - p->len - 1;
        if (n > 0)
                p->len += (size_t)n < room ? (size_t)n : room;
}

static size_t path_push_member(struct path *p, const char *name)
{
        size_t old = p->len;
        int n = snprintf(p->buf + p->len, sizeof(p->buf) - p->len, "%s%s", p->len ? "." : "",
                         name);
        path_advance(p, n);
        return old;
}

static size_t path_push_index(struct path *p, size_t i)
{
        size_t old = p->len;
        int n = snprintf(p->buf + p->len, sizeof(p->buf) - p->len, "[%zu]", i);
        path_advance(p, n);
        return old;
}

static size_t path_push_key(struct path *p, const char *key)
{
        size_t old = p->len;
        int n = snprintf(p->buf + p->len, sizeof(p->buf) - p->len, "[\"%s\"]", key);
        path_advance(p, n);
        return old;
}

static void path_pop(struct path *p, size_t old)
{
        p->len = old;
        p->buf[old] = '\0';
}

static const char *path_str(const struct path *p)
{
        return p->len ? p->buf : "(message)";
}

size_t kdev_pbjson_json_name(const char *proto_name, char *buf, size_t size)
{
        size_t n = 0;
        bool upper = false;
        for (const char *c = proto_name; *c; c++) {
                char out;
                if (*c == '_') {
                        upper = true;
                        continue;
                }
                out = upper ? (char)toupper((unsigned char)*c) : *c;
                upper = false;
                if (size && n + 1 < size)
                        buf[n] = out;
                n++;
        }
        if (size)
                buf[n < size ? n : size - 1] = '\0';
        return n;
}

/* ------------------------------------------------------------------------ */
/* Field layout helpers                                                     */
/* ------------------------------------------------------------------------ */

static size_t elt_size(ProtobufCType t)
{
        switch (t) {
        case PROTOBUF_C_TYPE_INT32:
        case PROTOBUF_C_TYPE_SINT32:
        case PROTOBUF_C_TYPE_SFIXED32:
        case PROTOBUF_C_TYPE_UINT32:
        case PROTOBUF_C_TYPE_FIXED32:
                return 4;
        case PROTOBUF_C_TYPE_INT64:
        case PROTOBUF_C_TYPE_SINT64:
        case PROTOBUF_C_TYPE_SFIXED64:
        case PROTOBUF_C_TYPE_UINT64:
        case PROTOBUF_C_TYPE_FIXED64:
                return 8;
        case PROTOBUF_C_TYPE_FLOAT:
                return sizeof(float);
        case PROTOBUF_C_TYPE_DOUBLE:
                return sizeof(double);
        case PROTOBUF_C_TYPE_BOOL:
                return sizeof(protobuf_c_boolean);
        case PROTOBUF_C_TYPE_ENUM:
                return sizeof(int);
        case PROTOBUF_C_TYPE_STRING:
                return sizeof(char *);
        case PROTOBUF_C_TYPE_BYTES:
                return sizeof(ProtobufCBinaryData);
        case PROTOBUF_C_TYPE_MESSAGE:
                return sizeof(ProtobufCMessage *);
        }
        return 0;
}

static void *member(const ProtobufCMessage *msg, unsigned offset)
{
        return (char *)msg + offset;
}

static bool is_pointer_type(ProtobufCType t)
{
        return t == PROTOBUF_C_TYPE_STRING || t == PROTOBUF_C_TYPE_MESSAGE;
}

/* True for a repeated field that protoc-c generated from map<K, V>: entries
 * are messages named "<FieldNameInCamelCase>Entry" with exactly the fields
 * key = 1 and value = 2. protobuf-c keeps no map flag, so this is the rule
 * protoc itself uses to name the entry type. */
static bool is_map_field(const ProtobufCFieldDescriptor *f)
{
        if (f->label != PROTOBUF_C_LABEL_REPEATED || f->type != PROTOBUF_C_TYPE_MESSAGE)
                return false;
        const ProtobufCMessageDescriptor *d = f->descriptor;
        if (d->n_fields != 2 || d->fields[0].id != 1 || d->fields[1].id != 2 ||
            strcmp(d->fields[0].name, "key") != 0 || strcmp(d->fields[1].name, "value") != 0)
                return false;
        char want[128];
        size_t n = kdev_pbjson_json_name(f->name, want, sizeof(want) - 5);
        if (n + 6 > sizeof(want))
                return false;
        want[0] = (char)toupper((unsigned char)want[0]);
        strcat(want, "Entry");
        return strcmp(d->short_name, want) == 0;
}

/* Whether a singular field is set (proto3: differs from its default). */
static bool field_present(const ProtobufCMessage *msg, const ProtobufCFieldDescriptor *f)
{
        const void *p = member(msg, f->offset);
        if (f->flags & PROTOBUF_C_FIELD_FLAG_ONEOF) {
                if (*(const uint32_t *)member(msg, f->quantifier_offset) != f->id)
                        return false;
                /* like protobuf-c's packer, which skips a selected string or
                 * message member that is NULL or the shared default */
                if (is_pointer_type(f->type)) {
                        const void *v = *(void *const *)p;
                        return v != NULL && v != f->default_value;
                }
                return true;
        }
        if (f->label == PROTOBUF_C_LABEL_REQUIRED)
                return true;
        if (f->label == PROTOBUF_C_LABEL_OPTIONAL) {
                if (is_pointer_type(f->type)) {
                        const void *v = *(void *const *)p;
                        return v != NULL && v != f->default_value;
                }
                return *(const protobuf_c_boolean *)member(msg, f->quantifier_offset) != 0;
        }
        /* PROTOBUF_C_LABEL_NONE: proto3 implicit presence */
        switch (f->type) {
        case PROTOBUF_C_TYPE_STRING: {
                const char *s = *(char *const *)p;
                return s != NULL && s[0] != '\0';
        }
        case PROTOBUF_C_TYPE_MESSAGE:
                return *(void *const *)p != NULL;
        case PROTOBUF_C_TYPE_BYTES:
                return ((const ProtobufCBinaryData *)p)->len != 0;
        case PROTOBUF_C_TYPE_FLOAT:
                return *(const float *)p != 0.0f || signbit(*(const float *)p);
        case PROTOBUF_C_TYPE_DOUBLE:
                return *(const double *)p != 0.0 || signbit(*(const double *)p);
        default: {
                static const uint8_t zero[8];
                return memcmp(p, zero, elt_size(f->type)) != 0;
        }
        }
}

/* ------------------------------------------------------------------------ */
/* Message -> JSON                                                          */
/* ------------------------------------------------------------------------ */

static const char b64_std[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

static json_t *base64_json(const ProtobufCBinaryData *b)
{
        size_t out_len = (b->len + 2) / 3 * 4;
        char *out = malloc(out_len + 1);
        if (!out)
                return NULL;
        size_t o = 0;
        for (size_t i = 0; i < b->len; i += 3) {
                uint32_t v = (uint32_t)b->data[i] << 16;
                if (i + 1 < b->len)
                        v |= (uint32_t)b->data[i + 1] << 8;
                if (i + 2 < b->len)
                        v |= b->data[i + 2];
                out[o++] = b64_std[(v >> 18) & 63];
                out[o++] = b64_std[(v >> 12) & 63];
                out[o++] = i + 1 < b->len ? b64_std[(v >> 6) & 63] : '=';
                out[o++] = i + 2 < b->len ? b64_std[v & 63] : '=';
        }
        out[o] = '\0';
        json_t *j = json_stringn(out, o);
        free(out);
        return j;
}

static json_t *float_json(double v)
{
        if (isnan(v))
                return json_string("NaN");
        if (isinf(v))
                return json_string(v > 0 ? "Infinity" : "-Infinity");
        return json_real(v);
}

static json_t *msg_to_json(const ProtobufCMessage *msg, struct path *path, struct kdev_err *err);

/* Converts one value of field |f| stored at |p|. */
static json_t *value_to_json(const ProtobufCFieldDescriptor *f, const void *p, struct path *path,
                             struct kdev_err *err)
{
        char num[32];
        json_t *j = NULL;
        switch (f->type) {
        case PROTOBUF_C_TYPE_INT32:
        case PROTOBUF_C_TYPE_SINT32:
        case PROTOBUF_C_TYPE_SFIXED32:
                j = json_integer(*(const int32_t *)p);
                break;
        case PROTOBUF_C_TYPE_UINT32:
        case PROTOBUF_C_TYPE_FIXED32:
                j = json_integer(*(const uint32_t *)p);
                break;
        case PROTOBUF_C_TYPE_INT64:
        case PROTOBUF_C_TYPE_SINT64:
        case PROTOBUF_C_TYPE_SFIXED64:
                snprintf(num, sizeof(num), "%" PRId64, *(const int64_t *)p);
                j = json_string(num);
                break;
        case PROTOBUF_C_TYPE_UINT64:
        case PROTOBUF_C_TYPE_FIXED64:
                snprintf(num, sizeof(num), "%" PRIu64, *(const uint64_t *)p);
                j = json_string(num);
                break;
        case PROTOBUF_C_TYPE_FLOAT:
                j = float_json(*(const float *)p);
                break;
        case PROTOBUF_C_TYPE_DOUBLE:
                j = float_json(*(const double *)p);
                break;
        case PROTOBUF_C_TYPE_BOOL:
                j = json_boolean(*(const protobuf_c_boolean *)p);
                break;
        case PROTOBUF_C_TYPE_ENUM: {
                int v = *(const int *)p;
                const ProtobufCEnumValue *ev =
                        protobuf_c_enum_descriptor_get_value(f->descriptor, v);
                j = ev ? json_string(ev->name) : json_integer(v);
                break;
        }
        case PROTOBUF_C_TYPE_STRING: {
                const char *s = *(char *const *)p;
                j = json_string(s ? s : "");
                if (!j && s) {
                        kdev_err_set(err, EILSEQ, "%s: string is not valid UTF-8",
                                     path_str(path));
                        return NULL;
                }
                break;
        }
        case PROTOBUF_C_TYPE_BYTES:
                j = base64_json(p);
                break;
        case PROTOBUF_C_TYPE_MESSAGE: {
                const ProtobufCMessage *m = *(ProtobufCMessage *const *)p;
                if (!m)
                        return json_object(); /* map value or list element left NULL */
                return msg_to_json(m, path, err);
        }
        }
        if (!j)
                kdev_err_set(err, ENOMEM, "%s: out of memory", path_str(path));
        return j;
}

/* The JSON object key for map key field |kf| stored at |p|. */
static int map_key_string(const ProtobufCFieldDescriptor *kf, const void *p, char *buf,
                          size_t size, const char **out)
{
        switch (kf->type) {
        case PROTOBUF_C_TYPE_STRING:
                *out = *(char *const *)p ? *(char *const *)p : "";
                return 0;
        case PROTOBUF_C_TYPE_BOOL:
                *out = *(const protobuf_c_boolean *)p ? "true" : "false";
                return 0;
        case PROTOBUF_C_TYPE_INT32:
        case PROTOBUF_C_TYPE_SINT32:
        case PROTOBUF_C_TYPE_SFIXED32:
                snprintf(buf, size, "%" PRId32, *(const int32_t *)p);
                break;
        case PROTOBUF_C_TYPE_UINT32:
        case PROTOBUF_C_TYPE_FIXED32:
                snprintf(buf, size, "%" PRIu32, *(const uint32_t *)p);
                break;
        case PROTOBUF_C_TYPE_INT64:
        case PROTOBUF_C_TYPE_SINT64:
        case PROTOBUF_C_TYPE_SFIXED64:
                snprintf(buf, size, "%" PRId64, *(const int64_t *)p);
                break;
        case PROTOBUF_C_TYPE_UINT64:
        case PROTOBUF_C_TYPE_FIXED64:
                snprintf(buf, size, "%" PRIu64, *(const uint64_t *)p);
                break;
        default:
                return -EINVAL;
        }
        *out = buf;
        return 0;
}

struct map_ref {
        const ProtobufCMessage *entry;
        const ProtobufCFieldDescriptor *kf;
        size_t idx;
};

/* Orders map entries by key (strings byte-wise, numbers by value, false
 * before true), then by position so that the last duplicate key wins. */
static int map_ref_cmp(const void *x, const void *y)
{
        const struct map_ref *a = x, *b = y;
        const void *pa = member(a->entry, a->kf->offset), *pb = member(b->entry, a->kf->offset);
        int c = 0;
        switch (a->kf->type) {
        case PROTOBUF_C_TYPE_STRING: {
                const char *sa = *(char *const *)pa, *sb = *(char *const *)pb;
                c = strcmp(sa ? sa : "", sb ? sb : "");
                break;
        }
        case PROTOBUF_C_TYPE_BOOL: {
                int va = *(const protobuf_c_boolean *)pa != 0;
                int vb = *(const protobuf_c_boolean *)pb != 0;
                c = va - vb;
                break;
        }
        case PROTOBUF_C_TYPE_INT32:
        case PROTOBUF_C_TYPE_SINT32:
        case PROTOBUF_C_TYPE_SFIXED32: {
                int32_t va = *(const int32_t *)pa, vb = *(const int32_t *)pb;
                c = (va > vb) - (va < vb);
                break;
        }
        case PROTOBUF_C_TYPE_UINT32:
        case PROTOBUF_C_TYPE_FIXED32: {
                uint32_t va = *(const uint32_t *)pa, vb = *(const uint32_t *)pb;
                c = (va > vb) - (va < vb);
                break;
        }
        case PROTOBUF_C_TYPE_INT64:
        case PROTOBUF_C_TYPE_SINT64:
        case PROTOBUF_C_TYPE_SFIXED64: {
                int64_t va = *(const int64_t *)pa, vb = *(const int64_t *)pb;
                c = (va > vb) - (va < vb);
                break;
        }
        case PROTOBUF_C_TYPE_UINT64:
        case PROTOBUF_C_TYPE_FIXED64: {
                uint64_t va = *(const uint64_t *)pa, vb = *(const uint64_t *)pb;
                c = (va > vb) - (va < vb);
                break;
        }
        default:
                break;
        }
        if (c == 0)
                c = (a->idx > b->idx) - (a->idx < b->idx);
        return c;
}

/* A map as a JSON object with keys in sorted order (what Go's protojson
 * writes too, whatever the order on the wire). */
static json_t *map_to_json(const ProtobufCFieldDescriptor *f,
                           const ProtobufCMessage *const *entries, size_t n, struct path *path,
                           struct kdev_err *err)
{
        const ProtobufCMessageDescriptor *ed = f->descriptor;
        const ProtobufCFieldDescriptor *kf = &ed->fields[0];
        const ProtobufCFieldDescriptor *vf = &ed->fields[1];
        json_t *obj = json_object();
        struct map_ref *refs = calloc(n, sizeof(*refs));
        size_t m = 0;
        if (!obj || !refs) {
                json_decref(obj);
                free(refs);
                kdev_err_set(err, ENOMEM, "%s: out of memory", path_str(path));
                return NULL;
        }
        for (size_t i = 0; i < n; i++) {
                if (entries[i])
                        refs[m++] = (struct map_ref){.entry = entries[i], .kf = kf, .idx = i};
        }
        qsort(refs, m, sizeof(*refs), map_ref_cmp);
        for (size_t i = 0; i < m; i++) {
                char kbuf[32];
                const char *key;
                if (map_key_string(kf, member(refs[i].entry, kf->offset), kbuf, sizeof(kbuf),
                                   &key) < 0) {
                        kdev_err_set(err, EINVAL, "%s: unsupported map key type", path_str(path));
                        goto fail;
                }
                size_t old = path_push_key(path, key);
                json_t *v = value_to_json(vf, member(refs[i].entry, vf->offset), path, err);
                if (!v)
                        goto fail;
                if (json_object_set_new(obj, key, v) < 0) {
                        kdev_err_set(err, EILSEQ, "%s: map key is not valid UTF-8",
                                     path_str(path));
                        goto fail;
                }
                path_pop(path, old);
        }
        free(refs);
        return obj;
fail:
        free(refs);
        json_decref(obj);
        return NULL;
}

static json_t *msg_to_json(const ProtobufCMessage *msg, struct path *path, struct kdev_err *err)
{
        const ProtobufCMessageDescriptor *d = msg->descriptor;
        json_t *obj = json_object();
        if (!obj) {
                kdev_err_set(err, ENOMEM, "%s: out of memory", path_str(path));
                return NULL;
        }
        for (unsigned i = 0; i < d->n_fields; i++) {
                const ProtobufCFieldDescriptor *f = &d->fields[i];
                char name[128];
                json_t *v = NULL;
                kdev_pbjson_json_name(f->name, name, sizeof(name));
                size_t old = path_push_member(path, name);
                if (f->label == PROTOBUF_C_LABEL_REPEATED) {
                        size_t n = *(const size_t *)member(msg, f->quantifier_offset);
                        const char *arr = *(char *const *)member(msg, f->offset);
                        if (n == 0) {
                                path_pop(path, old);
                                continue;
                        }
                        if (is_map_field(f)) {
                                const void *entries = arr;
                                v = map_to_json(f, entries, n, path, err);
                        } else {
                                v = json_array();
                                if (!v)
                                        kdev_err_set(err, ENOMEM, "out of memory");
                                size_t es = elt_size(f->type);
                                for (size_t k = 0; v && k < n; k++) {
                                        size_t o2 = path_push_index(path, k);
                                        json_t *e = value_to_json(f, arr + k * es, path, err);
                                        if (!e || json_array_append_new(v, e) < 0) {
                                                json_decref(v);
                                                v = NULL;
                                                if (e)
                                                        kdev_err_set(err, ENOMEM, "out of memory");
                                                break;
                                        }
                                        path_pop(path, o2);
                                }
                        }
                } else {
                        if (!field_present(msg, f)) {
                                path_pop(path, old);
                                continue;
                        }
                        v = value_to_json(f, member(msg, f->offset), path, err);
                }
                if (!v || json_object_set_new(obj, name, v) < 0) {
                        json_decref(obj);
                        return NULL;
                }
                path_pop(path, old);
        }
        return obj;
}

json_t *kdev_pbjson_from_msg(const ProtobufCMessage *msg, struct kdev_err *err)
{
        struct path path = {.len = 0};
        path.buf[0] = '\0';
        if (!msg) {
                kdev_err_set(err, EINVAL, "no message");
                return NULL;
        }
        return msg_to_json(msg, &path, err);
}

char *kdev_pbjson_dumps(const ProtobufCMessage *msg, struct kdev_err *err)
{
        json_t *j = kdev_pbjson_from_msg(msg, err);
        if (!j)
                return NULL;
        char *text = json_dumps(j, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
        json_decref(j);
        if (!text) {
                kdev_err_set(err, ENOMEM, "out of memory");
                return NULL;
        }
        size_t n = strlen(text);
        char *out = realloc(text, n + 2);
        if (!out) {
                free(text);
                kdev_err_set(err, ENOMEM, "out of memory");
                return NULL;
        }
        out[n] = '\n';
        out[n + 1] = '\0';
        return out;
}

/* ------------------------------------------------------------------------ */
/* JSON -> message                                                          */
/* ------------------------------------------------------------------------ */

static int b64_value(char c)
{
        if (c >= 'A' && c <= 'Z')
                return c - 'A';
        if (c >= 'a' && c <= 'z')
                return c - 'a' + 26;
        if (c >= '0' && c <= '9')
                return c - '0' + 52;
        if (c == '+' || c == '-')
                return 62;
        if (c == '/' || c == '_')
                return 63;
        return -1;
}

/* Decodes standard or URL-safe base64, padding optional. */
static int base64_decode(const char *s, size_t len, ProtobufCBinaryData *out)
{
        while (len > 0 && s[len - 1] == '=')
                len--;
        if (len % 4 == 1)
                return -EINVAL;
        uint8_t *buf = malloc(len / 4 * 3 + 3);
        if (!buf)
                return -ENOMEM;
        size_t o = 0;
        uint32_t acc = 0;
        int bits = 0;
        for (size_t i = 0; i < len; i++) {
                int v = b64_value(s[i]);
                if (v < 0) {
                        free(buf);
                        return -EINVAL;
                }
                acc = (acc << 6) | (uint32_t)v;
                bits += 6;
                if (bits >= 8) {
                        bits -= 8;
                        buf[o++] = (uint8_t)(acc >> bits);
                }
        }
        if (o == 0) {
                free(buf);
                buf = NULL;
        }
        out->data = buf;
        out->len = o;
        return 0;
}

/* Reads an integer JSON value (number or decimal string) as signed. */
static int json_get_int(const json_t *j, int64_t min, int64_t max, int64_t *out)
{
        if (json_is_integer(j)) {
                json_int_t v = json_integer_value(j);
                if (v < min || v > max)
                        return -ERANGE;
                *out = v;
                return 0;
        }
        if (json_is_real(j)) {
                double v = json_real_value(j);
                if (!isfinite(v))
                        return -EINVAL;
                /* doubles this large are all integers */
                if (v < -9223372036854775808.0 || v >= 9223372036854775808.0)
                        return -ERANGE;
                int64_t iv = (int64_t)v;
                if ((double)iv != v)
                        return -EINVAL;
                if (iv < min || iv > max)
                        return -ERANGE;
                *out = iv;
                return 0;
        }
        if (json_is_string(j)) {
                const char *s = json_string_value(j);
                char *end;
                if (!*s || isspace((unsigned char)*s))
                        return -EINVAL;
                errno = 0;
                long long v = strtoll(s, &end, 10);
                if (*end)
                        return -EINVAL;
                if (errno == ERANGE || v < min || v > max)
                        return -ERANGE;
                *out = v;
                return 0;
        }
        return -EINVAL;
}

static int json_get_uint(const json_t *j, uint64_t max, uint64_t *out)
{
        if (json_is_integer(j)) {
                json_int_t v = json_integer_value(j);
                if (v < 0 || (uint64_t)v > max)
                        return -ERANGE;
                *out = (uint64_t)v;
                return 0;
        }
        if (json_is_real(j)) {
                double v = json_real_value(j);
                if (!isfinite(v))
                        return -EINVAL;
                if (v < 0 || v >= 18446744073709551616.0)
                        return -ERANGE;
                uint64_t uv = (uint64_t)v;
                if ((double)uv != v)
                        return -EINVAL;
                if (uv > max)
                        return -ERANGE;
                *out = uv;
                return 0;
        }
        if (json_is_string(j)) {
                const char *s = json_string_value(j);
                char *end;
                if (!*s || !isdigit((unsigned char)*s))
                        return -EINVAL;
                errno = 0;
                unsigned long long v = strtoull(s, &end, 10);
                if (*end)
                        return -EINVAL;
                if (errno == ERANGE || v > max)
                        return -ERANGE;
                *out = v;
                return 0;
        }
        return -EINVAL;
}

static int json_get_double(const json_t *j, double *out)
{
        if (json_is_number(j)) {
                *out = json_number_value(j);
                return 0;
        }
        if (json_is_string(j)) {
                const char *s = json_string_value(j);
                if (strcmp(s, "NaN") == 0) {
                        *out = NAN;
                        return 0;
                }
                if (strcmp(s, "Infinity") == 0) {
                        *out = INFINITY;
                        return 0;
                }
                if (strcmp(s, "-Infinity") == 0) {
                        *out = -INFINITY;
                        return 0;
                }
                char *end;
                if (!*s || isspace((unsigned char)*s))
                        return -EINVAL;
                errno = 0;
                double v = strtod(s, &end);
                if (*end || isnan(v) || isinf(v))
                        return -EINVAL;
                if (errno == ERANGE)
                        return -ERANGE;
                *out = v;
                return 0;
        }
        return -EINVAL;
}

static int json_to_msg(const ProtobufCMessageDescriptor *desc, const json_t *json,
                       ProtobufCMessage **out, struct path *path, struct kdev_err *err);

/* Whether |j| is of the JSON type |f|'s values are written in (numbers,
 * 64-bit ones and enums may also be strings, per the proto3 JSON mapping): a
 * value of another type is named in the error ("got an array"). */
static bool json_type_fits(const ProtobufCFieldDescriptor *f, const json_t *j)
{
        switch (f->type) {
        case PROTOBUF_C_TYPE_STRING:
        case PROTOBUF_C_TYPE_BYTES: return json_is_string(j);
        case PROTOBUF_C_TYPE_BOOL: return json_is_boolean(j);
        case PROTOBUF_C_TYPE_MESSAGE: return json_is_object(j);
        default: return json_is_number(j) || json_is_string(j);
        }
}

static int value_error(int rc, const ProtobufCFieldDescriptor *f, const json_t *j,
                       struct path *path, struct kdev_err *err)
{
        static const char *const what[] = {
                [PROTOBUF_C_TYPE_INT32] = "a 32-bit integer",
                [PROTOBUF_C_TYPE_SINT32] = "a 32-bit integer",
                [PROTOBUF_C_TYPE_SFIXED32] = "a 32-bit integer",
                [PROTOBUF_C_TYPE_INT64] = "a 64-bit integer",
                [PROTOBUF_C_TYPE_SINT64] = "a 64-bit integer",
                [PROTOBUF_C_TYPE_SFIXED64] = "a 64-bit integer",
                [PROTOBUF_C_TYPE_UINT32] = "an unsigned 32-bit integer",
                [PROTOBUF_C_TYPE_FIXED32] = "an unsigned 32-bit integer",
                [PROTOBUF_C_TYPE_UINT64] = "an unsigned 64-bit integer",
                [PROTOBUF_C_TYPE_FIXED64] = "an unsigned 64-bit integer",
                [PROTOBUF_C_TYPE_FLOAT] = "a number",
                [PROTOBUF_C_TYPE_DOUBLE] = "a number",
                [PROTOBUF_C_TYPE_BOOL] = "true or false",
                [PROTOBUF_C_TYPE_ENUM] = "an enum value name or number",
                [PROTOBUF_C_TYPE_STRING] = "a string",
                [PROTOBUF_C_TYPE_BYTES] = "a base64 string",
                [PROTOBUF_C_TYPE_MESSAGE] = "an object",
        };
        if (rc == -ENOMEM)
                return kdev_err_set(err, ENOMEM, "%s: out of memory", path_str(path));
        if (rc == -ERANGE)
                return kdev_err_set(err, ERANGE, "%s: value out of range for %s", path_str(path),
                                    what[f->type]);
        if (!json_type_fits(f, j))
                return kdev_err_set(err, EINVAL, "%s: expected %s, got %s", path_str(path),
                                    what[f->type], kdev_json_kind(j));
        return kdev_err_set(err, EINVAL, "%s: expected %s", path_str(path), what[f->type]);
}

/* Stores JSON value |j| for field |f| at |p| (which holds the default).
 * On failure |p| still holds something free_unpacked can release. */
static int value_from_json(const ProtobufCFieldDescriptor *f, const json_t *j, void *p,
                           struct path *path, struct kdev_err *err)
{
        int rc = 0;
        int64_t iv = 0;
        uint64_t uv = 0;
        double dv = 0;
        switch (f->type) {
        case PROTOBUF_C_TYPE_INT32:
        case PROTOBUF_C_TYPE_SINT32:
        case PROTOBUF_C_TYPE_SFIXED32:
                rc = json_get_int(j, INT32_MIN, INT32_MAX, &iv);
                if (rc == 0)
                        *(int32_t *)p = (int32_t)iv;
                break;
        case PROTOBUF_C_TYPE_INT64:
        case PROTOBUF_C_TYPE_SINT64:
        case PROTOBUF_C_TYPE_SFIXED64:
                rc = json_get_int(j, INT64_MIN, INT64_MAX, &iv);
                if (rc == 0)
                        *(int64_t *)p = iv;
                break;
        case PROTOBUF_C_TYPE_UINT32:
        case PROTOBUF_C_TYPE_FIXED32:
                rc = json_get_uint(j, UINT32_MAX, &uv);
                if (rc == 0)
                        *(uint32_t *)p = (uint32_t)uv;
                break;
        case PROTOBUF_C_TYPE_UINT64:
        case PROTOBUF_C_TYPE_FIXED64:
                rc = json_get_uint(j, UINT64_MAX, &uv);
                if (rc == 0)
                        *(uint64_t *)p = uv;
                break;
        case PROTOBUF_C_TYPE_FLOAT:
                rc = json_get_double(j, &dv);
                if (rc == 0 && isfinite(dv) && (dv > FLT_MAX || dv < -FLT_MAX))
                        rc = -ERANGE;
                if (rc == 0)
                        *(float *)p = (float)dv;
                break;
        case PROTOBUF_C_TYPE_DOUBLE:
                rc = json_get_double(j, &dv);
                if (rc == 0)
                        *(double *)p = dv;
                break;
        case PROTOBUF_C_TYPE_BOOL:
                if (json_is_boolean(j))
                        *(protobuf_c_boolean *)p = json_is_true(j);
                else
                        rc = -EINVAL;
                break;
        case PROTOBUF_C_TYPE_ENUM:
                if (json_is_string(j)) {
                        const ProtobufCEnumValue *ev = protobuf_c_enum_descriptor_get_value_by_name(
                                f->descriptor, json_string_value(j));
                        if (ev)
                                *(int *)p = ev->value;
                        else
                                rc = -EINVAL;
                } else {
                        rc = json_get_int(j, INT32_MIN, INT32_MAX, &iv);
                        if (rc == 0)
                                *(int *)p = (int)iv;
                }
                break;
        case PROTOBUF_C_TYPE_STRING: {
                if (!json_is_string(j)) {
                        rc = -EINVAL;
                        break;
                }
                size_t len = json_string_length(j);
                const char *s = json_string_value(j);
                if (memchr(s, '\0', len))
                        return kdev_err_set(err, EINVAL, "%s: string contains a NUL character",
                                            path_str(path));
                char *copy = strdup(s);
                if (!copy) {
                        rc = -ENOMEM;
                        break;
                }
                *(char **)p = copy;
                break;
        }
        case PROTOBUF_C_TYPE_BYTES:
                if (!json_is_string(j)) {
                        rc = -EINVAL;
                        break;
                }
                rc = base64_decode(json_string_value(j), json_string_length(j), p);
                break;
        case PROTOBUF_C_TYPE_MESSAGE:
                return json_to_msg(f->descriptor, j, (ProtobufCMessage **)p, path, err);
        }
        if (rc < 0)
                return value_error(rc, f, j, path, err);
        return 0;
}

/* Parses a JSON object key into map key field |kf| at |p|. */
static int map_key_from_string(const ProtobufCFieldDescriptor *kf, const char *key, void *p,
                               struct path *path, struct kdev_err *err)
{
        if (kf->type == PROTOBUF_C_TYPE_BOOL) {
                if (strcmp(key, "true") == 0)
                        *(protobuf_c_boolean *)p = 1;
                else if (strcmp(key, "false") == 0)
                        *(protobuf_c_boolean *)p = 0;
                else
                        return kdev_err_set(err, EINVAL, "%s: map key must be true or false",
                                            path_str(path));
                return 0;
        }
        json_t *tmp = json_string(key);
        if (!tmp)
                return kdev_err_set(err, ENOMEM, "%s: out of memory", path_str(path));
        int rc = value_from_json(kf, tmp, p, path, err);
        json_decref(tmp);
        return rc;
}

struct map_item {
        const char *key;
        const json_t *value;
        ProtobufCType key_type;
};

static int map_item_cmp(const void *a, const void *b)
{
        const struct map_item *x = a, *y = b;
        switch (x->key_type) {
        case PROTOBUF_C_TYPE_STRING:
                return strcmp(x->key, y->key);
        case PROTOBUF_C_TYPE_BOOL:
                return (strcmp(x->key, "true") == 0) - (strcmp(y->key, "true") == 0);
        case PROTOBUF_C_TYPE_UINT32:
        case PROTOBUF_C_TYPE_FIXED32:
        case PROTOBUF_C_TYPE_UINT64:
        case PROTOBUF_C_TYPE_FIXED64: {
                unsigned long long u = strtoull(x->key, NULL, 10), v = strtoull(y->key, NULL, 10);
                return (u > v) - (u < v);
        }
        default: {
                long long u = strtoll(x->key, NULL, 10), v = strtoll(y->key, NULL, 10);
                return (u > v) - (u < v);
        }
        }
}

static int map_from_json(const ProtobufCFieldDescriptor *f, const json_t *j, ProtobufCMessage *msg,
                         struct path *path, struct kdev_err *err)
{
        const ProtobufCMessageDescriptor *ed = f->descriptor;
        size_t *count = member(msg, f->quantifier_offset);
        ProtobufCMessage ***arr = member(msg, f->offset);
        if (!json_is_object(j))
                return kdev_err_set(err, EINVAL, "%s: expected an object, got %s", path_str(path),
                                    kdev_json_kind(j));
        size_t n = json_object_size(j);
        if (n == 0)
                return 0;
        struct map_item *items = calloc(n, sizeof(*items));
        *arr = calloc(n, sizeof(ProtobufCMessage *));
        if (!items || !*arr) {
                free(items);
                return kdev_err_set(err, ENOMEM, "%s: out of memory", path_str(path));
        }
        size_t k = 0;
        const char *key;
        json_t *v;
        json_object_foreach((json_t *)j, key, v) {
                items[k].key = key;
                items[k].value = v;
                items[k].key_type = ed->fields[0].type;
                k++;
        }
        int rc = 0;
        /* validate keys before sorting them numerically */
        for (size_t i = 0; i < n && rc == 0; i++) {
                ProtobufCMessage *probe = calloc(1, ed->sizeof_message);
                if (!probe) {
                        rc = kdev_err_set(err, ENOMEM, "%s: out of memory", path_str(path));
                        break;
                }
                ed->message_init(probe);
                size_t old = path_push_key(path, items[i].key);
                rc = map_key_from_string(&ed->fields[0], items[i].key,
                                         member(probe, ed->fields[0].offset), path, err);
                if (rc == 0)
                        path_pop(path, old);
                protobuf_c_message_free_unpacked(probe, NULL);
        }
        if (rc == 0)
                qsort(items, n, sizeof(*items), map_item_cmp);
        for (size_t i = 0; i < n && rc == 0; i++) {
                ProtobufCMessage *e = calloc(1, ed->sizeof_message);
                if (!e) {
                        rc = kdev_err_set(err, ENOMEM, "%s: out of memory", path_str(path));
                        break;
                }
                ed->message_init(e);
                (*arr)[(*count)++] = e;
                size_t old = path_push_key(path, items[i].key);
                rc = map_key_from_string(&ed->fields[0], items[i].key,
                                         member(e, ed->fields[0].offset), path, err);
                if (rc == 0 && !json_is_null(items[i].value))
                        rc = value_from_json(&ed->fields[1], items[i].value,
                                             member(e, ed->fields[1].offset), path, err);
                else if (rc == 0)
                        rc = kdev_err_set(err, EINVAL, "%s: map value must not be null",
                                          path_str(path));
                if (rc == 0)
                        path_pop(path, old);
        }
        free(items);
        return rc;
}

static int repeated_from_json(const ProtobufCFieldDescriptor *f, const json_t *j,
                              ProtobufCMessage *msg, struct path *path, struct kdev_err *err)
{
        size_t *count = member(msg, f->quantifier_offset);
        char **arr = member(msg, f->offset);
        size_t es = elt_size(f->type);
        if (!json_is_array(j))
                return kdev_err_set(err, EINVAL, "%s: expected an array, got %s", path_str(path),
                                    kdev_json_kind(j));
        size_t n = json_array_size(j);
        if (n == 0)
                return 0;
        *arr = calloc(n, es);
        if (!*arr)
                return kdev_err_set(err, ENOMEM, "%s: out of memory", path_str(path));
        for (size_t i = 0; i < n; i++) {
                const json_t *e = json_array_get(j, i);
                size_t old = path_push_index(path, i);
                if (json_is_null(e))
                        return kdev_err_set(err, EINVAL, "%s: null is not allowed in a list",
                                            path_str(path));
                int rc = value_from_json(f, e, *arr + i * es, path, err);
                /* count the element even on failure so free_unpacked releases it */
                if (rc < 0 && is_pointer_type(f->type) && !*(void **)(*arr + i * es))
                        return rc;
                (*count)++;
                if (rc < 0)
                        return rc;
                path_pop(path, old);
        }
        return 0;
}

static const ProtobufCFieldDescriptor *find_field(const ProtobufCMessageDescriptor *d,
                                                  const char *key)
{
        for (unsigned i = 0; i < d->n_fields; i++) {
                char jn[128];
                const ProtobufCFieldDescriptor *f = &d->fields[i];
                kdev_pbjson_json_name(f->name, jn, sizeof(jn));
                if (strcmp(key, jn) == 0 || strcmp(key, f->name) == 0)
                        return f;
        }
        return NULL;
}

static int json_to_msg(const ProtobufCMessageDescriptor *desc, const json_t *json,
                       ProtobufCMessage **out, struct path *path, struct kdev_err *err)
{
        if (!json_is_object(json))
                return kdev_err_set(err, EINVAL, "%s: expected an object, got %s", path_str(path),
                                    kdev_json_kind(json));
        ProtobufCMessage *msg = calloc(1, desc->sizeof_message);
        uint8_t *seen = calloc(desc->n_fields ? desc->n_fields : 1, 1);
        if (!msg || !seen) {
                free(msg);
                free(seen);
                return kdev_err_set(err, ENOMEM, "%s: out of memory", path_str(path));
        }
        desc->message_init(msg);
        int rc = 0;
        const char *key;
        json_t *v;
        json_object_foreach((json_t *)json, key, v) {
                const ProtobufCFieldDescriptor *f = find_field(desc, key);
                size_t old = path_push_member(path, key);
                if (!f) {
                        rc = kdev_err_set(err, EINVAL, "%s: unknown field of %s", path_str(path),
                                          desc->name);
                        break;
                }
                unsigned idx = (unsigned)(f - desc->fields);
                if (seen[idx]) {
                        rc = kdev_err_set(err, EINVAL, "%s: field %s given twice", path_str(path),
                                          f->name);
                        break;
                }
                seen[idx] = 1;
                if (json_is_null(v)) {
                        path_pop(path, old);
                        continue;
                }
                if (f->flags & PROTOBUF_C_FIELD_FLAG_ONEOF) {
                        uint32_t *oneof_case = member(msg, f->quantifier_offset);
                        if (*oneof_case != 0) {
                                rc = kdev_err_set(err, EINVAL,
                                                  "%s: more than one member of a oneof is set",
                                                  path_str(path));
                                break;
                        }
                }
                if (f->label == PROTOBUF_C_LABEL_REPEATED) {
                        rc = is_map_field(f) ? map_from_json(f, v, msg, path, err)
                                             : repeated_from_json(f, v, msg, path, err);
                } else {
                        void *p = member(msg, f->offset);
                        /* a default string is shared static storage: never free it */
                        if (f->type == PROTOBUF_C_TYPE_STRING)
                                *(char **)p = NULL;
                        rc = value_from_json(f, v, p, path, err);
                        if (f->type == PROTOBUF_C_TYPE_STRING && !*(char **)p)
                                *(const char **)p = f->default_value;
                        if (rc == 0 && (f->flags & PROTOBUF_C_FIELD_FLAG_ONEOF))
                                *(uint32_t *)member(msg, f->quantifier_offset) = f->id;
                        else if (rc == 0 && f->label == PROTOBUF_C_LABEL_OPTIONAL &&
                                 !is_pointer_type(f->type))
                                *(protobuf_c_boolean *)member(msg, f->quantifier_offset) = 1;
                }
                if (rc < 0)
                        break;
                path_pop(path, old);
        }
        free(seen);
        if (rc < 0) {
                protobuf_c_message_free_unpacked(msg, NULL);
                return rc;
        }
        *out = msg;
        return 0;
}

int kdev_pbjson_to_msg(const ProtobufCMessageDescriptor *desc, const json_t *json,
                       ProtobufCMessage **out, struct kdev_err *err)
{
        struct path path = {.len = 0};
        path.buf[0] = '\0';
        *out = NULL;
        return json_to_msg(desc, json, out, &path, err);
}

/* ------------------------------------------------------------------------ */
/* Descriptor registry                                                      */
/* ------------------------------------------------------------------------ */

/* Top-level messages of every API kdev generates; nested ones (map entries)
 * are found through the fields that use them. */
static const ProtobufCMessageDescriptor *const top_descriptors[] = {
        /* deviceplugin v1beta1 (package v1beta1) */
        &v1beta1__device_plugin_options__descriptor,
        &v1beta1__register_request__descriptor,
        &v1beta1__empty__descriptor,
        &v1beta1__list_and_watch_response__descriptor,
        &v1beta1__topology_info__descriptor,
        &v1beta1__numanode__descriptor,
        &v1beta1__device__descriptor,
        &v1beta1__pre_start_container_request__descriptor,
        &v1beta1__pre_start_container_response__descriptor,
        &v1beta1__preferred_allocation_request__descriptor,
        &v1beta1__container_preferred_allocation_request__descriptor,
        &v1beta1__preferred_allocation_response__descriptor,
        &v1beta1__container_preferred_allocation_response__descriptor,
        &v1beta1__allocate_request__descriptor,
        &v1beta1__container_allocate_request__descriptor,
        &v1beta1__cdidevice__descriptor,
        &v1beta1__allocate_response__descriptor,
        &v1beta1__container_allocate_response__descriptor,
        &v1beta1__mount__descriptor,
        &v1beta1__device_spec__descriptor,
        /* plugin registration v1 (package pluginregistration) */
        &pluginregistration__plugin_info__descriptor,
        &pluginregistration__registration_status__descriptor,
        &pluginregistration__registration_status_response__descriptor,
        &pluginregistration__info_request__descriptor,
        /* DRA v1beta1 */
        &k8s__io__kubelet__pkg__apis__dra__v1beta1__node_prepare_resources_request__descriptor,
        &k8s__io__kubelet__pkg__apis__dra__v1beta1__node_prepare_resources_response__descriptor,
        &k8s__io__kubelet__pkg__apis__dra__v1beta1__node_prepare_resource_response__descriptor,
        &k8s__io__kubelet__pkg__apis__dra__v1beta1__device__descriptor,
        &k8s__io__kubelet__pkg__apis__dra__v1beta1__node_unprepare_resources_request__descriptor,
        &k8s__io__kubelet__pkg__apis__dra__v1beta1__node_unprepare_resources_response__descriptor,
        &k8s__io__kubelet__pkg__apis__dra__v1beta1__node_unprepare_resource_response__descriptor,
        &k8s__io__kubelet__pkg__apis__dra__v1beta1__claim__descriptor,
        /* DRA v1 */
        &k8s__io__kubelet__pkg__apis__dra__v1__node_prepare_resources_request__descriptor,
        &k8s__io__kubelet__pkg__apis__dra__v1__node_prepare_resources_response__descriptor,
        &k8s__io__kubelet__pkg__apis__dra__v1__node_prepare_resource_response__descriptor,
        &k8s__io__kubelet__pkg__apis__dra__v1__device__descriptor,
        &k8s__io__kubelet__pkg__apis__dra__v1__node_unprepare_resources_request__descriptor,
        &k8s__io__kubelet__pkg__apis__dra__v1__node_unprepare_resources_response__descriptor,
        &k8s__io__kubelet__pkg__apis__dra__v1__node_unprepare_resource_response__descriptor,
        &k8s__io__kubelet__pkg__apis__dra__v1__claim__descriptor,
        /* DRA health v1alpha1 (package v1alpha1) */
        &v1alpha1__node_watch_resources_request__descriptor,
        &v1alpha1__node_watch_resources_response__descriptor,
        &v1alpha1__device_identifier__descriptor,
        &v1alpha1__device_health__descriptor,
        /* PodResources v1 (package v1) */
        &v1__allocatable_resources_request__descriptor,
        &v1__allocatable_resources_response__descriptor,
        &v1__list_pod_resources_request__descriptor,
        &v1__list_pod_resources_response__descriptor,
        &v1__get_pod_resources_request__descriptor,
        &v1__get_pod_resources_response__descriptor,
};

/* Searches |d| and, |depth| levels down, the message types of its fields. */
static const ProtobufCMessageDescriptor *find_from(const ProtobufCMessageDescriptor *d,
                                                   const char *full_name, int depth)
{
        if (strcmp(d->name, full_name) == 0)
                return d;
        if (depth == 0)
                return NULL;
        for (unsigned i = 0; i < d->n_fields; i++) {
                const ProtobufCFieldDescriptor *f = &d->fields[i];
                if (f->type != PROTOBUF_C_TYPE_MESSAGE)
                        continue;
                const ProtobufCMessageDescriptor *r = find_from(f->descriptor, full_name,
                                                                depth - 1);
                if (r)
                        return r;
        }
        return NULL;
}

const ProtobufCMessageDescriptor *kdev_pbjson_find(const char *full_name)
{
        if (!full_name)
                return NULL;
        /* the APIs nest at most 3 levels below a top-level message; the bound
         * also stops any recursive message type */
        for (size_t i = 0; i < sizeof(top_descriptors) / sizeof(top_descriptors[0]); i++) {
                const ProtobufCMessageDescriptor *d = find_from(top_descriptors[i], full_name, 4);
                if (d)
                        return d;
        }
        return NULL;
}

const ProtobufCMessageDescriptor *kdev_pbjson_v1beta1_find(const char *full_name)
{
        if (!full_name || strncmp(full_name, "v1beta1.", 8) != 0)
                return NULL;
        return kdev_pbjson_find(full_name);
}
