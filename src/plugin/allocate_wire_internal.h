/* The wire side of Allocate, the request kdev-plugin serves most, without
 * protobuf-c's generic code on the hot path. Internal to src/plugin.
 *
 * 1. Request. A decoder for the v1beta1
 * AllocateRequest (deviceplugin/v1beta1/api.proto: AllocateRequest
 * {repeated ContainerAllocateRequest container_requests = 1},
 * ContainerAllocateRequest {repeated string devices_ids = 1}), in one pass
 * over the wire bytes instead of protobuf-c's generic unpack (two passes,
 * descriptor lookups, one allocation per string) and kdev_pb_check_strings'
 * NUL walk. Internal to src/plugin.
 *
 * It takes only the plain encoding kubelet and every protobuf encoder send:
 * each field as tag byte 0x0a (field 1, length-delimited) with a valid
 * length, and no NUL byte inside an ID. Anything else (an unknown field,
 * another wire type, a multi-byte tag, a NUL, a malformed length) is left to
 * the generic path, which accepts or rejects it with the errors it always
 * gave: what this decoder accepts, protobuf-c accepts with the same IDs in
 * the same order (tests/unit/test_plugin_allocate_request.c checks this on
 * the vectors and on crafted inputs, fuzz_plugin_request on every input).
 *
 * 2. Answer. An encoder of container edits (model/edits.h) straight to the
 * bytes of a v1beta1 ContainerAllocateResponse, the same bytes as
 * kdev_plugin_allocate_response (plugin/allocate.h) then protobuf-c's pack:
 * fields in field-number order (envs 1, mounts 2, devices 3, annotations 4,
 * cdi_devices 5), each entry a length-delimited message whose proto3 string
 * fields are left out when empty (map entries {key 1, value 2}, Mount
 * {container_path 1, host_path 2}, DeviceSpec {container_path 1, host_path
 * 2, permissions 3}, CDIDevice {name 1}); entries the edits no longer hold
 * (NULL key or path) are skipped, as kdev_plugin_allocate_response skips
 * them; hooks and mount options have no field. */
#ifndef KDEV_PLUGIN_ALLOCATE_WIRE_INTERNAL_H
#define KDEV_PLUGIN_ALLOCATE_WIRE_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "model/edits.h"
#include "plugin/arena_internal.h"

/* One container request: |n_ids| device IDs, NUL-terminated copies in the
 * arena, in wire order. */
struct kdev_alloc_container {
        const char *const *ids; /* NULL when n_ids is 0 */
        size_t n_ids;
};

struct kdev_alloc_request {
        struct kdev_alloc_container *containers; /* in wire order; NULL when none */
        size_t n_containers;
};

/* Decodes AllocateRequest |buf| (|len| bytes) into |out|, everything in
 * arena |a| (valid until it is released). Returns 0 when decoded, 1 when
 * |buf| is not in the plain encoding above (|out| unset: decode it the
 * generic way), -ENOMEM when the arena cannot grow. */
int kdev_alloc_request_decode(const uint8_t *buf, size_t len, struct kdev_arena *a,
                              struct kdev_alloc_request *out);

/* Bytes of the ContainerAllocateResponse of |e| (no length prefix). */
size_t kdev_alloc_edits_packed_size(const struct kdev_container_edits *e);

/* Whether mount |m| is read-only: one of its options is "ro" (v1beta1
 * Mount.read_only; the other options are CDI's only). */
bool kdev_alloc_mount_read_only(const struct kdev_edit_mount *m);

/* Writes the ContainerAllocateResponse of |e| at |out|, which has room for
 * kdev_alloc_edits_packed_size(|e|) bytes. Returns the end of what was
 * written. */
uint8_t *kdev_alloc_edits_pack(const struct kdev_container_edits *e, uint8_t *out);

/* Bytes of a varint of |v|, and writes it at |p| (returns its end): for the
 * length prefix of each container response in AllocateResponse
 * (container_responses = 1). */
size_t kdev_alloc_varint_size(size_t v);
uint8_t *kdev_alloc_put_varint(uint8_t *p, size_t v);

#endif /* KDEV_PLUGIN_ALLOCATE_WIRE_INTERNAL_H */
