/* kubelet device manager checkpoint: see checkpoint.h. */
#include "kubelet/checkpoint.h"

#include "common/file.h"
#include "common/json.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jansson.h>

#include "deviceplugin/v1beta1/api.pb-c.h"

/* ------------------------------------------------------------------------ */
/* Growable string                                                          */
/* ------------------------------------------------------------------------ */

struct sbuf {
        char *s;
        size_t len;
        size_t cap;
        bool oom;
};

static void sb_put(struct sbuf *b, const char *p, size_t n)
{
        if (b->oom)
                return;
        if (b->len + n + 1 > b->cap) {
                size_t cap = b->cap ? b->cap : 256;
                while (b->len + n + 1 > cap)
                        cap *= 2;
                char *s = realloc(b->s, cap);
                if (!s) {
                        b->oom = true;
                        return;
                }
                b->s = s;
                b->cap = cap;
        }
        memcpy(b->s + b->len, p, n);
        b->len += n;
        b->s[b->len] = '\0';
}

static void sb_str(struct sbuf *b, const char *s)
{
        sb_put(b, s, strlen(s));
}

static void sb_fmt(struct sbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void sb_fmt(struct sbuf *b, const char *fmt, ...)
{
        char tmp[64];
        va_list ap;
        va_start(ap, fmt);
        int n = vsnprintf(tmp, sizeof(tmp), fmt, ap);
        va_end(ap);
        if (n > 0)
                sb_put(b, tmp, (size_t)n < sizeof(tmp) ? (size_t)n : sizeof(tmp) - 1);
}

/* Returns the string (caller frees) or NULL after an allocation failure. */
static char *sb_take(struct sbuf *b)
{
        if (b->oom) {
                free(b->s);
                return NULL;
        }
        if (!b->s)
                return strdup("");
        return b->s;
}

/* ------------------------------------------------------------------------ */
/* Freeing and building                                                     */
/* ------------------------------------------------------------------------ */

static void free_strv(char **v, size_t n)
{
        for (size_t i = 0; i < n; i++)
                free(v[i]);
        free(v);
}

static void entry_clear(struct kdev_ckpt_entry *e)
{
        free(e->pod_uid);
        free(e->container_name);
        free(e->resource_name);
        for (size_t i = 0; i < e->n_numa; i++)
                free_strv(e->numa[i].ids, e->numa[i].n_ids);
        free(e->numa);
        free(e->alloc_resp);
        memset(e, 0, sizeof(*e));
}

void kdev_ckpt_clear(struct kdev_checkpoint *cp)
{
        if (!cp)
                return;
        for (size_t i = 0; i < cp->n_entries; i++)
                entry_clear(&cp->entries[i]);
        free(cp->entries);
        for (size_t i = 0; i < cp->n_registered; i++) {
                free(cp->registered[i].name);
                free_strv(cp->registered[i].ids, cp->registered[i].n_ids);
        }
        free(cp->registered);
        free_strv(cp->notes, cp->n_notes);
        memset(cp, 0, sizeof(*cp));
}

static int strv_push(char ***v, size_t *n, const char *s)
{
        char *dup = strdup(s);
        if (!dup)
                return -ENOMEM;
        char **nv = realloc(*v, (*n + 1) * sizeof(**v));
        if (!nv) {
                free(dup);
                return -ENOMEM;
        }
        nv[(*n)++] = dup;
        *v = nv;
        return 0;
}

/* Finds the resource |name| or the index where it belongs (sorted). */
static size_t resource_pos(const struct kdev_checkpoint *cp, const char *name, bool *found)
{
        size_t lo = 0, hi = cp->n_registered;
        while (lo < hi) {
                size_t mid = (lo + hi) / 2;
                int c = strcmp(cp->registered[mid].name, name);
                if (c == 0) {
                        *found = true;
                        return mid;
                }
                if (c < 0)
                        lo = mid + 1;
                else
                        hi = mid;
        }
        *found = false;
        return lo;
}

/* Returns the (new, empty) resource slot |name|, replacing an existing one. */
static struct kdev_ckpt_resource *resource_slot(struct kdev_checkpoint *cp, const char *name)
{
        bool found;
        size_t pos = resource_pos(cp, name, &found);
        if (found) {
                struct kdev_ckpt_resource *r = &cp->registered[pos];
                free_strv(r->ids, r->n_ids);
                r->ids = NULL;
                r->n_ids = 0;
                r->ids_null = false;
                return r;
        }
        char *dup = strdup(name);
        if (!dup)
                return NULL;
        struct kdev_ckpt_resource *nr =
                realloc(cp->registered, (cp->n_registered + 1) * sizeof(*nr));
        if (!nr) {
                free(dup);
                return NULL;
        }
        cp->registered = nr;
        memmove(&nr[pos + 1], &nr[pos], (cp->n_registered - pos) * sizeof(*nr));
        cp->n_registered++;
        memset(&nr[pos], 0, sizeof(*nr));
        nr[pos].name = dup;
        return &nr[pos];
}

int kdev_ckpt_add_resource(struct kdev_checkpoint *cp, const char *name, const char *const *ids,
                           size_t n_ids)
{
        struct kdev_ckpt_resource *r = resource_slot(cp, name);
        if (!r)
                return -ENOMEM;
        for (size_t i = 0; i < n_ids; i++)
                if (strv_push(&r->ids, &r->n_ids, ids[i]) < 0)
                        return -ENOMEM;
        cp->registered_null = false;
        return 0;
}

struct kdev_ckpt_entry *kdev_ckpt_add_entry(struct kdev_checkpoint *cp, const char *pod_uid,
                                            const char *container, const char *resource,
                                            const uint8_t *alloc_resp, size_t len)
{
        struct kdev_ckpt_entry *ne = realloc(cp->entries, (cp->n_entries + 1) * sizeof(*ne));
        if (!ne)
                return NULL;
        cp->entries = ne;
        struct kdev_ckpt_entry *e = &ne[cp->n_entries];
        memset(e, 0, sizeof(*e));
        e->pod_uid = strdup(pod_uid);
        e->container_name = strdup(container);
        e->resource_name = strdup(resource);
        if (alloc_resp) {
                e->alloc_resp = malloc(len ? len : 1);
                if (e->alloc_resp)
                        memcpy(e->alloc_resp, alloc_resp, len);
                e->alloc_resp_len = len;
        } else {
                e->alloc_resp_null = true;
        }
        if (!e->pod_uid || !e->container_name || !e->resource_name ||
            (alloc_resp && !e->alloc_resp)) {
                entry_clear(e);
                return NULL;
        }
        cp->n_entries++;
        cp->entries_null = false;
        return e;
}

/* Returns the NUMA slot |node| of |e|, created (sorted) when absent. */
static struct kdev_ckpt_numa *numa_slot(struct kdev_ckpt_entry *e, int64_t node, bool *created)
{
        size_t pos = 0;
        while (pos < e->n_numa && e->numa[pos].node < node)
                pos++;
        if (pos < e->n_numa && e->numa[pos].node == node) {
                *created = false;
                return &e->numa[pos];
        }
        struct kdev_ckpt_numa *nn = realloc(e->numa, (e->n_numa + 1) * sizeof(*nn));
        if (!nn)
                return NULL;
        e->numa = nn;
        memmove(&nn[pos + 1], &nn[pos], (e->n_numa - pos) * sizeof(*nn));
        e->n_numa++;
        memset(&nn[pos], 0, sizeof(*nn));
        nn[pos].node = node;
        *created = true;
        return &nn[pos];
}

int kdev_ckpt_entry_add_id(struct kdev_ckpt_entry *e, int64_t node, const char *id)
{
        bool created;
        struct kdev_ckpt_numa *n = numa_slot(e, node, &created);
        if (!n)
                return -ENOMEM;
        e->numa_null = false;
        return strv_push(&n->ids, &n->n_ids, id);
}

/* ------------------------------------------------------------------------ */
/* go-spew text and checksum                                                */
/* ------------------------------------------------------------------------ */

uint32_t kdev_fnv1a32(const void *data, size_t len)
{
        const uint8_t *p = data;
        uint32_t h = 2166136261u;
        for (size_t i = 0; i < len; i++) {
                h ^= p[i];
                h *= 16777619u;
        }
        return h;
}

/* A []string as spew's %#v prints it inside a container: [a b] or <nil>. */
static void spew_strv(struct sbuf *b, char *const *ids, size_t n, bool is_null)
{
        if (is_null) {
                sb_str(b, "<nil>");
                return;
        }
        sb_str(b, "[");
        for (size_t i = 0; i < n; i++) {
                if (i)
                        sb_str(b, " ");
                sb_str(b, ids[i]);
        }
        sb_str(b, "]");
}

/* Replaces every occurrence of |from| in |s| with |to| (|to| not longer than
 * |from|), at most |max| times (0 = all), in place. Go strings.Replace. */
static void replace_in_place(char *s, const char *from, const char *to, int max)
{
        size_t fl = strlen(from), tl = strlen(to);
        char *r = s, *w = s;
        int done = 0;
        while (*r) {
                if ((max == 0 || done < max) && strncmp(r, from, fl) == 0) {
                        memcpy(w, to, tl);
                        w += tl;
                        r += fl;
                        done++;
                } else {
                        *w++ = *r++;
                }
        }
        *w = '\0';
}

char *kdev_ckpt_spew(const struct kdev_checkpoint *cp, enum kdev_ckpt_layout layout)
{
        bool v1 = layout == KDEV_CKPT_LAYOUT_V1;
        struct sbuf b = {0};
        sb_str(&b, v1 ? "(checkpoint.checkpointDataV1){PodDeviceEntries:"
                        "([]checkpoint.PodDevicesEntryV1)"
                      : "(checkpoint.checkpointData){PodDeviceEntries:"
                        "([]checkpoint.PodDevicesEntry)");
        if (cp->entries_null) {
                sb_str(&b, "<nil>");
        } else {
                sb_str(&b, "[");
                for (size_t i = 0; i < cp->n_entries; i++) {
                        const struct kdev_ckpt_entry *e = &cp->entries[i];
                        if (i)
                                sb_str(&b, " ");
                        sb_str(&b, "{PodUID:(string)");
                        sb_str(&b, e->pod_uid);
                        sb_str(&b, " ContainerName:(string)");
                        sb_str(&b, e->container_name);
                        sb_str(&b, " ResourceName:(string)");
                        sb_str(&b, e->resource_name);
                        if (v1) {
                                sb_str(&b, " DeviceIDs:([]string)");
                                if (e->n_numa > 0)
                                        spew_strv(&b, e->numa[0].ids, e->numa[0].n_ids,
                                                  e->numa[0].ids_null);
                                else
                                        sb_str(&b, "<nil>");
                        } else {
                                sb_str(&b, " DeviceIDs:(checkpoint.DevicesPerNUMA)");
                                if (e->numa_null) {
                                        sb_str(&b, "<nil>");
                                } else {
                                        sb_str(&b, "map[");
                                        for (size_t k = 0; k < e->n_numa; k++) {
                                                if (k)
                                                        sb_str(&b, " ");
                                                sb_fmt(&b, "%" PRId64 ":", e->numa[k].node);
                                                spew_strv(&b, e->numa[k].ids, e->numa[k].n_ids,
                                                          e->numa[k].ids_null);
                                        }
                                        sb_str(&b, "]");
                                }
                        }
                        sb_str(&b, " AllocResp:([]uint8)");
                        if (e->alloc_resp_null) {
                                sb_str(&b, "<nil>");
                        } else {
                                sb_str(&b, "[");
                                for (size_t k = 0; k < e->alloc_resp_len; k++)
                                        sb_fmt(&b, k ? " %u" : "%u", e->alloc_resp[k]);
                                sb_str(&b, "]");
                        }
                        sb_str(&b, "}");
                }
                sb_str(&b, "]");
        }
        sb_str(&b, " RegisteredDevices:(map[string][]string)");
        if (cp->registered_null) {
                sb_str(&b, "<nil>");
        } else {
                sb_str(&b, "map[");
                for (size_t i = 0; i < cp->n_registered; i++) {
                        if (i)
                                sb_str(&b, " ");
                        sb_str(&b, cp->registered[i].name);
                        sb_str(&b, ":");
                        spew_strv(&b, cp->registered[i].ids, cp->registered[i].n_ids,
                                  cp->registered[i].ids_null);
                }
                sb_str(&b, "]");
        }
        sb_str(&b, "}");
        char *s = sb_take(&b);
        if (s && v1) {
                /* checkpointv1.go: the text with the 1.19 type names. */
                replace_in_place(s, "checkpointDataV1", "checkpointData", 1);
                replace_in_place(s, "PodDevicesEntryV1", "PodDevicesEntry", 0);
        }
        return s;
}

int64_t kdev_ckpt_checksum(const struct kdev_checkpoint *cp, enum kdev_ckpt_layout layout)
{
        char *s = kdev_ckpt_spew(cp, layout);
        if (!s)
                return -ENOMEM;
        uint32_t h = kdev_fnv1a32(s, strlen(s));
        free(s);
        return (int64_t)h;
}

int kdev_ckpt_verify(const struct kdev_checkpoint *cp, uint32_t *computed, struct kdev_err *err)
{
        int64_t sum = kdev_ckpt_checksum(cp, cp->layout);
        if (sum < 0)
                return kdev_err_set(err, ENOMEM, "out of memory");
        if (computed)
                *computed = (uint32_t)sum;
        if ((uint64_t)sum != cp->checksum)
                return kdev_err_set(err, EBADMSG, "checksum mismatch: stored %" PRIu64
                                    ", computed %" PRId64, cp->checksum, sum);
        return 0;
}

/* ------------------------------------------------------------------------ */
/* base64                                                                   */
/* ------------------------------------------------------------------------ */

static const char b64chars[] =
        "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

char *kdev_base64_encode(const uint8_t *data, size_t len)
{
        char *out = malloc((len + 2) / 3 * 4 + 1);
        if (!out)
                return NULL;
        size_t o = 0, i = 0;
        for (; i + 3 <= len; i += 3) {
                uint32_t v = (uint32_t)data[i] << 16 | (uint32_t)data[i + 1] << 8 | data[i + 2];
                out[o++] = b64chars[v >> 18 & 63];
                out[o++] = b64chars[v >> 12 & 63];
                out[o++] = b64chars[v >> 6 & 63];
                out[o++] = b64chars[v & 63];
        }
        if (len - i == 1) {
                uint32_t v = (uint32_t)data[i] << 16;
                out[o++] = b64chars[v >> 18 & 63];
                out[o++] = b64chars[v >> 12 & 63];
                out[o++] = '=';
                out[o++] = '=';
        } else if (len - i == 2) {
                uint32_t v = (uint32_t)data[i] << 16 | (uint32_t)data[i + 1] << 8;
                out[o++] = b64chars[v >> 18 & 63];
                out[o++] = b64chars[v >> 12 & 63];
                out[o++] = b64chars[v >> 6 & 63];
                out[o++] = '=';
        }
        out[o] = '\0';
        return out;
}

static int b64val(char c)
{
        if (c >= 'A' && c <= 'Z')
                return c - 'A';
        if (c >= 'a' && c <= 'z')
                return c - 'a' + 26;
        if (c >= '0' && c <= '9')
                return c - '0' + 52;
        if (c == '+')
                return 62;
        if (c == '/')
                return 63;
        return -1;
}

int kdev_base64_decode(const char *text, size_t len, uint8_t **out, size_t *out_len,
                       struct kdev_err *err)
{
        uint8_t *buf = malloc(len / 4 * 3 + 3);
        if (!buf)
                return kdev_err_set(err, ENOMEM, "out of memory");
        size_t o = 0, i = 0;
        int quad[4];
        size_t qpos[4];
        size_t nq = 0;
        bool ended = false;
        while (i < len) {
                char c = text[i];
                if (c == '\r' || c == '\n') {
                        i++;
                        continue;
                }
                if (ended)
                        goto bad;
                if (c == '=') {
                        /* Padding: allowed only as the 3rd/4th symbol of the
                         * last quantum. */
                        if (nq < 2)
                                goto bad;
                        size_t need = 4 - nq, got = 0;
                        size_t j = i;
                        while (j < len && got < need) {
                                if (text[j] == '\r' || text[j] == '\n') {
                                        j++;
                                        continue;
                                }
                                if (text[j] != '=') {
                                        i = j;
                                        goto bad;
                                }
                                got++;
                                j++;
                        }
                        if (got < need) {
                                i = len;
                                goto bad;
                        }
                        uint32_t v = (uint32_t)quad[0] << 18 | (uint32_t)quad[1] << 12;
                        if (nq == 3)
                                v |= (uint32_t)quad[2] << 6;
                        buf[o++] = (uint8_t)(v >> 16);
                        if (nq == 3)
                                buf[o++] = (uint8_t)(v >> 8);
                        nq = 0;
                        ended = true;
                        i = j;
                        continue;
                }
                int v = b64val(c);
                if (v < 0)
                        goto bad;
                qpos[nq] = i;
                quad[nq++] = v;
                i++;
                if (nq == 4) {
                        uint32_t w = (uint32_t)quad[0] << 18 | (uint32_t)quad[1] << 12 |
                                     (uint32_t)quad[2] << 6 | (uint32_t)quad[3];
                        buf[o++] = (uint8_t)(w >> 16);
                        buf[o++] = (uint8_t)(w >> 8);
                        buf[o++] = (uint8_t)w;
                        nq = 0;
                }
        }
        if (nq != 0) {
                /* Go reports the position of the incomplete quantum's end. */
                i = nq == 1 ? qpos[0] : len;
                goto bad;
        }
        *out = buf;
        *out_len = o;
        return 0;
bad:
        free(buf);
        return kdev_err_set(err, EINVAL, "illegal base64 data at input byte %zu", i);
}

/* ------------------------------------------------------------------------ */
/* Decoding                                                                 */
/* ------------------------------------------------------------------------ */

/* "<path>: expected <want>, got <JSON type of v>" with the type names of
 * common/json.h ("an array", "a string", ...). */
static int type_err(struct kdev_err *err, const char *path, const char *want, const json_t *v)
{
        return kdev_err_set(err, EINVAL, "%s: expected %s, got %s", path, want, kdev_json_kind(v));
}

static int add_note(struct kdev_checkpoint *cp, const char *fmt, ...)
        __attribute__((format(printf, 2, 3)));
static int add_note(struct kdev_checkpoint *cp, const char *fmt, ...)
{
        char buf[512];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(buf, sizeof(buf), fmt, ap);
        va_end(ap);
        return strv_push(&cp->notes, &cp->n_notes, buf);
}

/* Notes every member of |obj| not in the NULL-terminated |known| list. */
static int note_unknown(struct kdev_checkpoint *cp, const json_t *obj, const char *path,
                        const char *const *known)
{
        const char *key;
        json_t *val;
        json_object_foreach((json_t *)obj, key, val) {
                bool ok = false;
                for (size_t i = 0; known[i]; i++)
                        ok = ok || strcmp(key, known[i]) == 0;
                if (!ok && add_note(cp, "%s%s\"%s\": unknown key ignored (kubelet ignores it too)",
                                    path, *path ? "." : "", key) < 0)
                        return -ENOMEM;
        }
        return 0;
}

/* Decodes a JSON string array or null at |path| into |ids|. */
static int decode_strv(const json_t *v, const char *path, char ***ids, size_t *n, bool *is_null,
                       struct kdev_err *err)
{
        if (json_is_null(v)) {
                *is_null = true;
                return 0;
        }
        if (!json_is_array(v))
                return type_err(err, path, "an array of strings or null", v);
        *is_null = false;
        size_t i;
        json_t *item;
        json_array_foreach(v, i, item) {
                if (!json_is_string(item))
                        return kdev_err_set(err, EINVAL, "%s[%zu]: expected a string, got %s", path,
                                            i, kdev_json_kind(item));
                if (strv_push(ids, n, json_string_value(item)) < 0)
                        return kdev_err_set(err, ENOMEM, "out of memory");
        }
        return 0;
}

/* strconv.ParseInt(s, 10, 64). */
static bool parse_int64(const char *s, int64_t *out)
{
        const char *p = s;
        bool neg = false;
        if (*p == '+' || *p == '-')
                neg = *p++ == '-';
        if (!*p)
                return false;
        uint64_t v = 0;
        for (; *p; p++) {
                if (*p < '0' || *p > '9')
                        return false;
                unsigned d = (unsigned)(*p - '0');
                if (v > (UINT64_MAX - d) / 10)
                        return false;
                v = v * 10 + d;
        }
        if (neg) {
                if (v > (uint64_t)INT64_MAX + 1)
                        return false;
                *out = v == (uint64_t)INT64_MAX + 1 ? INT64_MIN : -(int64_t)v;
        } else {
                if (v > (uint64_t)INT64_MAX)
                        return false;
                *out = (int64_t)v;
        }
        return true;
}

static int decode_string_member(struct kdev_checkpoint *cp, const json_t *obj, const char *path,
                                const char *key, char **out, struct kdev_err *err)
{
        const json_t *v = json_object_get(obj, key);
        char p[256];
        snprintf(p, sizeof(p), "%s.%s", path, key);
        if (!v) {
                if (add_note(cp, "%s: absent, read as \"\" like kubelet", p) < 0)
                        return kdev_err_set(err, ENOMEM, "out of memory");
                *out = strdup("");
        } else if (!json_is_string(v)) {
                return type_err(err, p, "a string", v);
        } else {
                *out = strdup(json_string_value(v));
        }
        return *out ? 0 : kdev_err_set(err, ENOMEM, "out of memory");
}

/* Decodes one PodDevicesEntry; |*flat| tells whether DeviceIDs was a flat
 * list (pre-1.20), -1 when it was null or absent. */
static int decode_entry(struct kdev_checkpoint *cp, const json_t *obj, const char *path,
                        struct kdev_ckpt_entry *e, int *flat, struct kdev_err *err)
{
        static const char *const known[] = {"PodUID", "ContainerName", "ResourceName",
                                            "DeviceIDs", "AllocResp", NULL};
        int rc;
        if (!json_is_object(obj))
                return type_err(err, path, "an object", obj);
        if ((rc = note_unknown(cp, obj, path, known)) < 0)
                return kdev_err_set(err, ENOMEM, "out of memory");
        if ((rc = decode_string_member(cp, obj, path, "PodUID", &e->pod_uid, err)) < 0 ||
            (rc = decode_string_member(cp, obj, path, "ContainerName", &e->container_name, err)) < 0 ||
            (rc = decode_string_member(cp, obj, path, "ResourceName", &e->resource_name, err)) < 0)
                return rc;

        char p[256];
        snprintf(p, sizeof(p), "%s.DeviceIDs", path);
        const json_t *d = json_object_get(obj, "DeviceIDs");
        *flat = -1;
        if (!d || json_is_null(d)) {
                e->numa_null = true;
                if (!d && add_note(cp, "%s: absent, read as null like kubelet", p) < 0)
                        return kdev_err_set(err, ENOMEM, "out of memory");
        } else if (json_is_array(d)) {
                /* Pre-1.20 layout: kubelet puts every device under node 0. */
                *flat = 1;
                bool created;
                struct kdev_ckpt_numa *n = numa_slot(e, 0, &created);
                if (!n)
                        return kdev_err_set(err, ENOMEM, "out of memory");
                if ((rc = decode_strv(d, p, &n->ids, &n->n_ids, &n->ids_null, err)) < 0)
                        return rc;
        } else if (json_is_object(d)) {
                *flat = 0;
                const char *key;
                json_t *val;
                json_object_foreach((json_t *)d, key, val) {
                        char kp[320];
                        snprintf(kp, sizeof(kp), "%s[\"%s\"]", p, key);
                        int64_t node;
                        if (!parse_int64(key, &node))
                                return kdev_err_set(err, EINVAL,
                                                    "%s: key \"%s\" is not a NUMA node number (int64)",
                                                    p, key);
                        bool created;
                        struct kdev_ckpt_numa *n = numa_slot(e, node, &created);
                        if (!n)
                                return kdev_err_set(err, ENOMEM, "out of memory");
                        if (!created) {
                                /* "0" and "00": Go keeps the later value. */
                                free_strv(n->ids, n->n_ids);
                                n->ids = NULL;
                                n->n_ids = 0;
                        }
                        if ((rc = decode_strv(val, kp, &n->ids, &n->n_ids, &n->ids_null, err)) < 0)
                                return rc;
                }
        } else {
                return type_err(err, p, "an object (NUMA node -> device IDs), an array or null", d);
        }

        snprintf(p, sizeof(p), "%s.AllocResp", path);
        const json_t *a = json_object_get(obj, "AllocResp");
        if (!a || json_is_null(a)) {
                e->alloc_resp_null = true;
                if (!a && add_note(cp, "%s: absent, read as null like kubelet", p) < 0)
                        return kdev_err_set(err, ENOMEM, "out of memory");
                return 0;
        }
        if (!json_is_string(a))
                return type_err(err, p, "a base64 string", a);
        rc = kdev_base64_decode(json_string_value(a), json_string_length(a), &e->alloc_resp,
                                &e->alloc_resp_len, err);
        if (rc < 0)
                return rc == -ENOMEM ? rc : kdev_err_wrap(err, "%s: not valid base64", p);
        V1beta1__ContainerAllocateResponse *r =
                v1beta1__container_allocate_response__unpack(NULL, e->alloc_resp_len, e->alloc_resp);
        if (!r)
                return kdev_err_set(err, EINVAL,
                                    "%s: not a valid v1beta1.ContainerAllocateResponse (%zu bytes)", p,
                                    e->alloc_resp_len);
        v1beta1__container_allocate_response__free_unpacked(r, NULL);
        return 0;
}

static int decode_data(struct kdev_checkpoint *cp, const json_t *data, struct kdev_err *err)
{
        static const char *const known[] = {"PodDeviceEntries", "RegisteredDevices", NULL};
        int rc;
        if (!json_is_object(data))
                return type_err(err, "Data", "an object", data);
        if (note_unknown(cp, data, "Data", known) < 0)
                return kdev_err_set(err, ENOMEM, "out of memory");

        const json_t *entries = json_object_get(data, "PodDeviceEntries");
        if (!entries || json_is_null(entries)) {
                cp->entries_null = true;
                if (!entries &&
                    add_note(cp, "Data.PodDeviceEntries: absent, read as null like kubelet") < 0)
                        return kdev_err_set(err, ENOMEM, "out of memory");
        } else if (!json_is_array(entries)) {
                return type_err(err, "Data.PodDeviceEntries", "an array or null", entries);
        } else {
                size_t n = json_array_size(entries);
                cp->entries = calloc(n ? n : 1, sizeof(*cp->entries));
                if (!cp->entries)
                        return kdev_err_set(err, ENOMEM, "out of memory");
                int layout = -1; /* -1 unknown, 0 current, 1 flat */
                size_t first = 0;
                for (size_t i = 0; i < n; i++) {
                        char path[64];
                        snprintf(path, sizeof(path), "Data.PodDeviceEntries[%zu]", i);
                        int flat = -1;
                        cp->n_entries = i + 1;
                        rc = decode_entry(cp, json_array_get(entries, i), path, &cp->entries[i],
                                          &flat, err);
                        if (rc < 0)
                                return rc;
                        if (flat < 0)
                                continue;
                        if (layout >= 0 && layout != flat)
                                return kdev_err_set(err, EINVAL,
                                                    "%s.DeviceIDs: %s, but Data.PodDeviceEntries[%zu]"
                                                    ".DeviceIDs is %s: layouts mixed",
                                                    path,
                                                    flat ? "flat list (pre-1.20 layout)"
                                                         : "NUMA-keyed object (current layout)",
                                                    first, layout ? "a flat list" : "NUMA-keyed");
                        if (layout < 0) {
                                layout = flat;
                                first = i;
                        }
                }
                if (layout == 1) {
                        cp->layout = KDEV_CKPT_LAYOUT_V1;
                        /* A null flat list converts to node 0 holding nil. */
                        for (size_t i = 0; i < n; i++) {
                                struct kdev_ckpt_entry *e = &cp->entries[i];
                                if (e->numa_null) {
                                        bool created;
                                        struct kdev_ckpt_numa *nn = numa_slot(e, 0, &created);
                                        if (!nn)
                                                return kdev_err_set(err, ENOMEM, "out of memory");
                                        nn->ids_null = true;
                                        e->numa_null = false;
                                }
                        }
                }
        }

        const json_t *reg = json_object_get(data, "RegisteredDevices");
        if (!reg || json_is_null(reg)) {
                cp->registered_null = true;
                if (!reg &&
                    add_note(cp, "Data.RegisteredDevices: absent, read as null like kubelet") < 0)
                        return kdev_err_set(err, ENOMEM, "out of memory");
                return 0;
        }
        if (!json_is_object(reg))
                return type_err(err, "Data.RegisteredDevices", "an object or null", reg);
        const char *key;
        json_t *val;
        json_object_foreach((json_t *)reg, key, val) {
                char path[320];
                snprintf(path, sizeof(path), "Data.RegisteredDevices[\"%s\"]", key);
                struct kdev_ckpt_resource *r = resource_slot(cp, key);
                if (!r)
                        return kdev_err_set(err, ENOMEM, "out of memory");
                if ((rc = decode_strv(val, path, &r->ids, &r->n_ids, &r->ids_null, err)) < 0)
                        return rc;
        }
        return 0;
}

int kdev_ckpt_decode(const char *text, size_t len, struct kdev_checkpoint *cp,
                     struct kdev_err *err)
{
        kdev_ckpt_clear(cp);
        json_error_t jerr;
        json_t *root = json_loadb(text, len, 0, &jerr);
        if (!root)
                return kdev_err_set(err, EBADMSG, "not JSON: line %d column %d: %s", jerr.line,
                                    jerr.column, jerr.text);
        int rc;
        static const char *const known[] = {"Data", "Checksum", NULL};
        if (!json_is_object(root)) {
                rc = type_err(err, "top level", "an object", root);
                goto out;
        }
        const json_t *data = json_object_get(root, "Data");
        const json_t *sum = json_object_get(root, "Checksum");
        if (!data) {
                rc = kdev_err_set(err, EINVAL, "missing key \"Data\"");
                goto out;
        }
        if (!sum) {
                rc = kdev_err_set(err, EINVAL, "missing key \"Checksum\"");
                goto out;
        }
        if (note_unknown(cp, root, "", known) < 0) {
                rc = kdev_err_set(err, ENOMEM, "out of memory");
                goto out;
        }
        if (!json_is_integer(sum) || json_integer_value(sum) < 0) {
                if (json_is_number(sum))
                        rc = kdev_err_set(err, EINVAL,
                                          "Checksum: expected an unsigned integer, got %s",
                                          json_is_integer(sum) ? "a negative number" : "a fraction");
                else
                        rc = type_err(err, "Checksum", "an unsigned integer", sum);
                goto out;
        }
        cp->checksum = (uint64_t)json_integer_value(sum);
        rc = decode_data(cp, data, err);
out:
        json_decref(root);
        if (rc < 0)
                kdev_ckpt_clear(cp);
        return rc;
}

int kdev_ckpt_read(const char *path, struct kdev_checkpoint *cp, struct kdev_err *err)
{
        kdev_ckpt_clear(cp);
        char *buf;
        size_t len;
        int rc = kdev_file_read(path, "kubelet checkpoint", KDEV_CKPT_FILE_MAX, KDEV_FILE_TEXT,
                                &buf, &len, err);
        if (rc < 0)
                return rc;
        rc = kdev_ckpt_decode(buf, len, cp, err);
        free(buf);
        return rc;
}

/* ------------------------------------------------------------------------ */
/* Encoding (Go encoding/json)                                              */
/* ------------------------------------------------------------------------ */

/* Go utf8.DecodeRuneInString: the rune at |s| (|n| bytes left) and its size;
 * invalid input gives size 1 and rune -1. */
static int32_t utf8_rune(const unsigned char *s, size_t n, size_t *size)
{
        unsigned c = s[0];
        *size = 1;
        if (c < 0x80)
                return (int32_t)c;
        size_t need;
        uint32_t r, min;
        unsigned lo = 0x80, hi = 0xBF;
        if (c >= 0xC2 && c <= 0xDF) {
                need = 1;
                r = c & 0x1F;
                min = 0x80;
        } else if (c >= 0xE0 && c <= 0xEF) {
                need = 2;
                r = c & 0x0F;
                min = 0x800;
                if (c == 0xE0)
                        lo = 0xA0;
                if (c == 0xED)
                        hi = 0x9F; /* no surrogates */
        } else if (c >= 0xF0 && c <= 0xF4) {
                need = 3;
                r = c & 0x07;
                min = 0x10000;
                if (c == 0xF0)
                        lo = 0x90;
                if (c == 0xF4)
                        hi = 0x8F;
        } else {
                return -1;
        }
        if (n < need + 1)
                return -1;
        for (size_t i = 1; i <= need; i++) {
                unsigned b = s[i];
                unsigned l = i == 1 ? lo : 0x80, h = i == 1 ? hi : 0xBF;
                if (b < l || b > h)
                        return -1;
                r = r << 6 | (b & 0x3F);
        }
        (void)min;
        *size = need + 1;
        return (int32_t)r;
}

static void json_str(struct sbuf *b, const char *str)
{
        static const char hex[] = "0123456789abcdef";
        const unsigned char *s = (const unsigned char *)str;
        size_t n = strlen(str);
        sb_str(b, "\"");
        for (size_t i = 0; i < n;) {
                unsigned c = s[i];
                if (c < 0x80) {
                        char esc[7];
                        if (c == '"' || c == '\\') {
                                esc[0] = '\\';
                                esc[1] = (char)c;
                                sb_put(b, esc, 2);
                        } else if (c == '\n') {
                                sb_str(b, "\\n");
                        } else if (c == '\r') {
                                sb_str(b, "\\r");
                        } else if (c == '\t') {
                                sb_str(b, "\\t");
                        } else if (c == '\b') {
                                sb_str(b, "\\b");
                        } else if (c == '\f') {
                                sb_str(b, "\\f");
                        } else if (c < 0x20 || c == '<' || c == '>' || c == '&') {
                                /* HTML-safe escaping, as json.Marshal does */
                                memcpy(esc, "\\u00", 4);
                                esc[4] = hex[c >> 4];
                                esc[5] = hex[c & 15];
                                sb_put(b, esc, 6);
                        } else {
                                esc[0] = (char)c;
                                sb_put(b, esc, 1);
                        }
                        i++;
                        continue;
                }
                size_t size;
                int32_t r = utf8_rune(s + i, n - i, &size);
                if (r < 0)
                        sb_str(b, "\\ufffd");
                else if (r == 0x2028)
                        sb_str(b, "\\u2028");
                else if (r == 0x2029)
                        sb_str(b, "\\u2029");
                else
                        sb_put(b, (const char *)s + i, size);
                i += size;
        }
        sb_str(b, "\"");
}

static void json_strv(struct sbuf *b, char *const *ids, size_t n, bool is_null)
{
        if (is_null) {
                sb_str(b, "null");
                return;
        }
        sb_str(b, "[");
        for (size_t i = 0; i < n; i++) {
                if (i)
                        sb_str(b, ",");
                json_str(b, ids[i]);
        }
        sb_str(b, "]");
}

/* Go sorts the keys of map[int64] by their decimal text. */
static int cmp_numa_text(const void *a, const void *b)
{
        const struct kdev_ckpt_numa *x = *(const struct kdev_ckpt_numa *const *)a;
        const struct kdev_ckpt_numa *y = *(const struct kdev_ckpt_numa *const *)b;
        char xs[24], ys[24];
        snprintf(xs, sizeof(xs), "%" PRId64, x->node);
        snprintf(ys, sizeof(ys), "%" PRId64, y->node);
        return strcmp(xs, ys);
}

char *kdev_ckpt_encode(struct kdev_checkpoint *cp)
{
        int64_t sum = kdev_ckpt_checksum(cp, KDEV_CKPT_LAYOUT_CURRENT);
        if (sum < 0)
                return NULL;
        cp->checksum = (uint64_t)sum;
        struct sbuf b = {0};
        sb_str(&b, "{\"Data\":{\"PodDeviceEntries\":");
        if (cp->entries_null || cp->n_entries == 0) {
                /* kubelet builds the list by appending to a nil slice. */
                sb_str(&b, cp->entries_null ? "null" : "[]");
        } else {
                sb_str(&b, "[");
                for (size_t i = 0; i < cp->n_entries; i++) {
                        const struct kdev_ckpt_entry *e = &cp->entries[i];
                        if (i)
                                sb_str(&b, ",");
                        sb_str(&b, "{\"PodUID\":");
                        json_str(&b, e->pod_uid);
                        sb_str(&b, ",\"ContainerName\":");
                        json_str(&b, e->container_name);
                        sb_str(&b, ",\"ResourceName\":");
                        json_str(&b, e->resource_name);
                        sb_str(&b, ",\"DeviceIDs\":");
                        if (e->numa_null) {
                                sb_str(&b, "null");
                        } else {
                                const struct kdev_ckpt_numa **ord =
                                        malloc((e->n_numa ? e->n_numa : 1) * sizeof(*ord));
                                if (!ord) {
                                        b.oom = true;
                                        break;
                                }
                                for (size_t k = 0; k < e->n_numa; k++)
                                        ord[k] = &e->numa[k];
                                qsort(ord, e->n_numa, sizeof(*ord), cmp_numa_text);
                                sb_str(&b, "{");
                                for (size_t k = 0; k < e->n_numa; k++) {
                                        if (k)
                                                sb_str(&b, ",");
                                        sb_fmt(&b, "\"%" PRId64 "\":", ord[k]->node);
                                        json_strv(&b, ord[k]->ids, ord[k]->n_ids, ord[k]->ids_null);
                                }
                                sb_str(&b, "}");
                                free(ord);
                        }
                        sb_str(&b, ",\"AllocResp\":");
                        if (e->alloc_resp_null) {
                                sb_str(&b, "null");
                        } else {
                                char *s = kdev_base64_encode(e->alloc_resp, e->alloc_resp_len);
                                if (!s) {
                                        b.oom = true;
                                        break;
                                }
                                sb_str(&b, "\"");
                                sb_str(&b, s);
                                sb_str(&b, "\"");
                                free(s);
                        }
                        sb_str(&b, "}");
                }
                sb_str(&b, "]");
        }
        sb_str(&b, ",\"RegisteredDevices\":");
        if (cp->registered_null) {
                sb_str(&b, "null");
        } else {
                /* Already sorted byte-wise by name, as Go sorts map[string]. */
                sb_str(&b, "{");
                for (size_t i = 0; i < cp->n_registered; i++) {
                        if (i)
                                sb_str(&b, ",");
                        json_str(&b, cp->registered[i].name);
                        sb_str(&b, ":");
                        json_strv(&b, cp->registered[i].ids, cp->registered[i].n_ids,
                                  cp->registered[i].ids_null);
                }
                sb_str(&b, "}");
        }
        sb_fmt(&b, "},\"Checksum\":%" PRIu64 "}", cp->checksum);
        return sb_take(&b);
}

int kdev_ckpt_write(const char *path, struct kdev_checkpoint *cp, struct kdev_err *err)
{
        char *text = kdev_ckpt_encode(cp);
        if (!text)
                return kdev_err_set(err, ENOMEM, "out of memory");
        size_t plen = strlen(path);
        char *tmp = malloc(plen + 16);
        if (!tmp) {
                free(text);
                return kdev_err_set(err, ENOMEM, "out of memory");
        }
        snprintf(tmp, plen + 16, "%s.tmpXXXXXX", path);
        int rc = kdev_file_write_atomic(path, tmp, text, strlen(text), 0644, false, err);
        free(tmp);
        free(text);
        return rc;
}
