#include "plugin/pbcheck.h"

#include <errno.h>
#include <string.h>

#define MAX_DEPTH 32

/* Reads a varint at *p (< end). Returns 0, or -1 when truncated or too long. */
static int read_varint(const uint8_t **p, const uint8_t *end, uint64_t *out)
{
        uint64_t v = 0;
        for (int shift = 0; shift < 64 && *p < end; shift += 7) {
                uint8_t b = *(*p)++;
                v |= (uint64_t)(b & 0x7f) << shift;
                if (!(b & 0x80)) {
                        *out = v;
                        return 0;
                }
        }
        return -1;
}

static int walk(const ProtobufCMessageDescriptor *desc, const uint8_t *p, const uint8_t *end,
                int depth, struct kdev_err *err)
{
        if (depth > MAX_DEPTH)
                return 0; /* protobuf-c bounds recursion itself */
        /* the field of the last length-delimited tag: a repeated field's
         * elements come one after another under the same tag */
        uint64_t last_tag = 0;
        const ProtobufCFieldDescriptor *last_f = NULL;
        while (p < end) {
                uint64_t tag, n;
                if (read_varint(&p, end, &tag) < 0)
                        return 0;
                switch (tag & 7) {
                case 0:
                        if (read_varint(&p, end, &n) < 0)
                                return 0;
                        break;
                case 1:
                        if (end - p < 8)
                                return 0;
                        p += 8;
                        break;
                case 5:
                        if (end - p < 4)
                                return 0;
                        p += 4;
                        break;
                case 2: {
                        if (read_varint(&p, end, &n) < 0 || n > (uint64_t)(end - p))
                                return 0;
                        if (tag != last_tag) {
                                last_tag = tag;
                                last_f = tag >> 3 <= UINT32_MAX
                                                 ? protobuf_c_message_descriptor_get_field(
                                                           desc, (unsigned)(tag >> 3))
                                                 : NULL;
                        }
                        const ProtobufCFieldDescriptor *f = last_f;
                        if (f && f->type == PROTOBUF_C_TYPE_STRING && memchr(p, 0, n))
                                return kdev_err_set(err, EINVAL,
                                                    "%s.%s: string contains a NUL byte",
                                                    desc->short_name, f->name);
                        if (f && f->type == PROTOBUF_C_TYPE_MESSAGE) {
                                int r = walk(f->descriptor, p, p + n, depth + 1, err);
                                if (r < 0)
                                        return r;
                        }
                        p += n;
                        break;
                }
                default:
                        return 0;
                }
        }
        return 0;
}

int kdev_pb_check_strings(const ProtobufCMessageDescriptor *desc, const uint8_t *buf, size_t len,
                          struct kdev_err *err)
{
        if (!buf)
                return 0;
        return walk(desc, buf, buf + len, 0, err);
}
