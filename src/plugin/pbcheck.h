/* Wire-level checks protobuf-c does not make. */
#ifndef KDEV_PLUGIN_PBCHECK_H
#define KDEV_PLUGIN_PBCHECK_H

#include <stddef.h>
#include <stdint.h>

#include <protobuf-c/protobuf-c.h>

#include "common/err.h"
#include "common/export.h"

/* Walks the encoded message |buf| (|len| bytes) of type |desc| and fails when
 * a string field, at any depth, contains a NUL byte. protobuf-c hands strings
 * to C as NUL-terminated char*, so such a string would silently be cut short
 * (a device ID "null::0\0junk" would read as "null::0"). Malformed encodings
 * are left for the unpacker to reject. Returns 0, or -EINVAL with |err|
 * naming the field ("devices_ids"). */
KDEV_API int kdev_pb_check_strings(const ProtobufCMessageDescriptor *desc, const uint8_t *buf,
                                   size_t len, struct kdev_err *err);

#endif /* KDEV_PLUGIN_PBCHECK_H */
