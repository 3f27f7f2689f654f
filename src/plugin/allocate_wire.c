/* Allocate's request decoder and answer encoder (see allocate_wire_internal.h). */
#include "plugin/allocate_wire_internal.h"

#include <errno.h>
#include <limits.h>
#include <string.h>

#define TAG_FIELD1_LEN 0x0a /* field 1, wire type 2 (length-delimited) */

/* The length prefix at *p (< end), as protobuf-c's
 * scan_length_prefixed_data reads it: at most 5 bytes, at most INT_MAX, and
 * the data must fit before |end|. Returns 0 and moves *p past the prefix, or
 * -1. */
static inline int read_len(const uint8_t **p, const uint8_t *end, size_t *out)
{
        const uint8_t *q = *p;
        if (q < end && *q < 0x80) { /* one byte: IDs and most container requests */
                if (*q > (size_t)(end - q - 1))
                        return -1;
                *p = q + 1;
                *out = *q;
                return 0;
        }
        size_t v = 0;
        for (unsigned i = 0; i < 5 && q < end; i++) {
                uint8_t b = *q++;
                v |= (size_t)(b & 0x7f) << (7 * i);
                if (!(b & 0x80)) {
                        if (v > INT_MAX || v > (size_t)(end - q))
                                return -1;
                        *p = q;
                        *out = v;
                        return 0;
                }
        }
        return -1;
}

/* Walks |buf|: counts the container requests and IDs and the ID bytes, and
 * checks the plain encoding. Returns 0 or 1 (not plain). */
static int scan(const uint8_t *p, const uint8_t *end, size_t *n_containers, size_t *n_ids)
{
        size_t nc = 0, ni = 0;
        while (p < end) {
                size_t m;
                if (*p++ != TAG_FIELD1_LEN || read_len(&p, end, &m) < 0)
                        return 1;
                const uint8_t *cend = p + m;
                while (p < cend) {
                        size_t n;
                        if (*p++ != TAG_FIELD1_LEN || read_len(&p, cend, &n) < 0 ||
                            memchr(p, 0, n))
                                return 1;
                        p += n;
                        ni++;
                }
                nc++;
        }
        *n_containers = nc;
        *n_ids = ni;
        return 0;
}

int kdev_alloc_request_decode(const uint8_t *buf, size_t len, struct kdev_arena *a,
                              struct kdev_alloc_request *out)
{
        const uint8_t *p = buf, *end = buf ? buf + len : buf;
        size_t nc = 0, ni = 0;
        if (scan(p, end, &nc, &ni))
                return 1;
        struct kdev_alloc_container *cs = NULL;
        const char **ids = NULL;
        char *text = NULL;
        if (nc) {
                /* every ID had a tag and a length byte before it, room
                 * enough for its NUL: the copies take at most |len| bytes */
                cs = kdev_arena_alloc(a, nc * sizeof(*cs));
                ids = kdev_arena_alloc(a, (ni ? ni : 1) * sizeof(*ids));
                text = kdev_arena_alloc(a, len);
                if (!cs || !ids || !text)
                        return -ENOMEM;
        }
        size_t c = 0;
        while (p < end) {
                size_t m = 0;
                p++;
                read_len(&p, end, &m); /* checked by scan */
                const uint8_t *cend = p + m;
                cs[c].ids = p < cend ? ids : NULL;
                cs[c].n_ids = 0;
                while (p < cend) {
                        size_t n = 0;
                        p++;
                        read_len(&p, cend, &n);
                        memcpy(text, p, n);
                        text[n] = '\0';
                        *ids++ = text;
                        text += n + 1;
                        p += n;
                        cs[c].n_ids++;
                }
                c++;
        }
        out->containers = cs;
        out->n_containers = nc;
        return 0;
}

/* ---- answer ------------------------------------------------------------- */

size_t kdev_alloc_varint_size(size_t v)
{
        size_t n = 1;
        for (; v >= 0x80; v >>= 7)
                n++;
        return n;
}

uint8_t *kdev_alloc_put_varint(uint8_t *p, size_t v)
{
        for (; v >= 0x80; v >>= 7)
                *p++ = (uint8_t)(v | 0x80);
        *p++ = (uint8_t)v;
        return p;
}

/* A proto3 string field: nothing when empty (or NULL), as protobuf-c. */
static size_t str_size(const char *s)
{
        size_t n = s ? strlen(s) : 0;
        return n ? 1 + kdev_alloc_varint_size(n) + n : 0;
}

static uint8_t *put_str(uint8_t *p, unsigned field, const char *s)
{
        size_t n = s ? strlen(s) : 0;
        if (!n)
                return p;
        *p++ = (uint8_t)(field << 3 | 2);
        p = kdev_alloc_put_varint(p, n);
        memcpy(p, s, n);
        return p + n;
}

/* A length-delimited entry of |m| bytes. */
static size_t entry_size(size_t m)
{
        return 1 + kdev_alloc_varint_size(m) + m;
}

static uint8_t *put_entry_head(uint8_t *p, unsigned field, size_t m)
{
        *p++ = (uint8_t)(field << 3 | 2);
        return kdev_alloc_put_varint(p, m);
}

static size_t node_size(const struct kdev_edit_node *n)
{
        return str_size(n->path) + str_size(n->host_path) + str_size(n->permissions);
}

static size_t kv_size(const struct kdev_edit_kv *kv)
{
        return str_size(kv->key) + str_size(kv->value);
}

bool kdev_alloc_mount_read_only(const struct kdev_edit_mount *m)
{
        for (size_t i = 0; i < m->n_options; i++) {
                if (m->options[i] && strcmp(m->options[i], "ro") == 0)
                        return true;
        }
        return false;
}

/* Mount: container_path = 1, host_path = 2, read_only = 3 (a varint 1, only
 * when true: proto3 leaves out false). */
static size_t mount_size(const struct kdev_edit_mount *m)
{
        return str_size(m->container_path) + str_size(m->host_path) +
               (kdev_alloc_mount_read_only(m) ? 2 : 0);
}

size_t kdev_alloc_edits_packed_size(const struct kdev_container_edits *e)
{
        size_t t = 0;
        for (size_t i = 0; i < e->n_env; i++)
                if (e->env[i].key)
                        t += entry_size(kv_size(&e->env[i]));
        for (size_t i = 0; i < e->n_mounts; i++)
                if (e->mounts[i].container_path)
                        t += entry_size(mount_size(&e->mounts[i]));
        for (size_t i = 0; i < e->n_nodes; i++)
                if (e->nodes[i].path)
                        t += entry_size(node_size(&e->nodes[i]));
        for (size_t i = 0; i < e->n_annotations; i++)
                if (e->annotations[i].key)
                        t += entry_size(kv_size(&e->annotations[i]));
        for (size_t i = 0; i < e->n_cdi_devices; i++)
                if (e->cdi_devices[i])
                        t += entry_size(str_size(e->cdi_devices[i]));
        return t;
}

uint8_t *kdev_alloc_edits_pack(const struct kdev_container_edits *e, uint8_t *p)
{
        for (size_t i = 0; i < e->n_env; i++) {
                const struct kdev_edit_kv *kv = &e->env[i];
                if (!kv->key)
                        continue;
                p = put_entry_head(p, 1, kv_size(kv));
                p = put_str(p, 1, kv->key);
                p = put_str(p, 2, kv->value);
        }
        for (size_t i = 0; i < e->n_mounts; i++) {
                const struct kdev_edit_mount *m = &e->mounts[i];
                if (!m->container_path)
                        continue;
                p = put_entry_head(p, 2, mount_size(m));
                p = put_str(p, 1, m->container_path);
                p = put_str(p, 2, m->host_path);
                if (kdev_alloc_mount_read_only(m)) {
                        *p++ = 3 << 3; /* field 3, varint */
                        *p++ = 1;
                }
        }
        for (size_t i = 0; i < e->n_nodes; i++) {
                const struct kdev_edit_node *n = &e->nodes[i];
                if (!n->path)
                        continue;
                p = put_entry_head(p, 3, node_size(n));
                p = put_str(p, 1, n->path);
                p = put_str(p, 2, n->host_path);
                p = put_str(p, 3, n->permissions);
        }
        for (size_t i = 0; i < e->n_annotations; i++) {
                const struct kdev_edit_kv *kv = &e->annotations[i];
                if (!kv->key)
                        continue;
                p = put_entry_head(p, 4, kv_size(kv));
                p = put_str(p, 1, kv->key);
                p = put_str(p, 2, kv->value);
        }
        for (size_t i = 0; i < e->n_cdi_devices; i++) {
                if (!e->cdi_devices[i])
                        continue;
                p = put_entry_head(p, 5, str_size(e->cdi_devices[i]));
                p = put_str(p, 1, e->cdi_devices[i]);
        }
        return p;
}
