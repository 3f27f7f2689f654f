/* pbjson: descriptor-driven conversion between protobuf-c messages and
 * jansson JSON values, following the proto3 JSON mapping
 * (https://protobuf.dev/programming-guides/proto3/#json):
 *
 * - member names are the JSON names: the .proto field name with every '_'
 *   removed and the letter after it upper-cased (devices_ids -> devicesIds,
 *   available_deviceIDs -> availableDeviceIDs, ID -> ID);
 * - fields at their default value (false, 0, "", empty bytes, empty repeated,
 *   unset message) are left out; a message field that is set but empty is
 *   written as {};
 * - 64-bit integers are JSON strings, 32-bit integers and floats are numbers
 *   (NaN and infinities as "NaN", "Infinity", "-Infinity"), bytes are standard
 *   base64 with padding, enums are their value names (unknown values as
 *   numbers);
 * - map fields (protobuf-c represents them as repeated "<Name>Entry" messages
 *   with key = 1 and value = 2) are JSON objects, keys in sorted order (like
 *   Go's protojson), the last entry winning when a key repeats.
 *
 * Not handled specially: the well-known types (google.protobuf.Any,
 * Timestamp, wrappers...) are treated like ordinary messages. None of the
 * kubelet device APIs uses them.
 */
#ifndef KDEV_KUBELET_PBJSON_H
#define KDEV_KUBELET_PBJSON_H

#include <stddef.h>

#include <jansson.h>
#include <protobuf-c/protobuf-c.h>

#include "common/err.h"
#include "common/export.h"

/* Converts |msg| to a new JSON object (the caller owns the reference and
 * releases it with json_decref()). Returns NULL with |err| filled on failure:
 * EILSEQ for a string field that is not valid UTF-8, ENOMEM. */
KDEV_API json_t *kdev_pbjson_from_msg(const ProtobufCMessage *msg, struct kdev_err *err);

/* Parses |json| (an object) into a new message of type |desc|. Members may be
 * named by JSON name or by the original .proto field name; JSON null leaves a
 * field at its default. Map entries are stored sorted by key (strings
 * byte-wise, integers numerically, false before true), so packing the result
 * gives the deterministic encoding. On success stores the message in |*out|
 * (free with protobuf_c_message_free_unpacked(*out, NULL)) and returns 0.
 * On failure returns a negative errno with |err| naming the member path
 * ("containerRequests[1].devicesIds[0]: expected a string"): -EINVAL for a
 * type or value mismatch, an unknown member or a member given twice (under
 * both names), -ERANGE for a number out of the field's range, -ENOMEM. */
KDEV_API int kdev_pbjson_to_msg(const ProtobufCMessageDescriptor *desc, const json_t *json,
                                ProtobufCMessage **out, struct kdev_err *err);

/* Converts |msg| to JSON text, indented by 2 spaces, UTF-8 kept as is, with
 * a final newline. Returns a malloc'ed string (caller frees) or NULL with
 * |err| filled (see kdev_pbjson_from_msg). */
KDEV_API char *kdev_pbjson_dumps(const ProtobufCMessage *msg, struct kdev_err *err);

/* Writes the proto3 JSON name of the .proto field name |proto_name| into
 * |buf| (|size| bytes, NUL-terminated, truncated if short). Returns the length
 * of the full JSON name (like snprintf). */
KDEV_API size_t kdev_pbjson_json_name(const char *proto_name, char *buf, size_t size);

/* Returns the descriptor of the kubelet API message whose fully-qualified
 * .proto name is |full_name|, or NULL when there is none (or |full_name| is
 * NULL). Static storage. Covers every API generated from proto/ (also nested
 * map entries such as "v1beta1.ContainerAllocateResponse.EnvsEntry"):
 * - device plugin v1beta1: "v1beta1.AllocateResponse", ...
 * - plugin registration v1: "pluginregistration.PluginInfo", ...
 * - DRA v1beta1 and v1: "k8s.io.kubelet.pkg.apis.dra.v1.NodePrepareResourcesResponse", ...
 * - DRA health v1alpha1: "v1alpha1.NodeWatchResourcesResponse", ...
 * - PodResources v1: "v1.ListPodResourcesResponse", "v1.NUMANode", ...
 * The names are those of Kubernetes k8s.io/kubelet pkg/apis, which the test
 * vectors' manifests use as "type". */
KDEV_API const ProtobufCMessageDescriptor *kdev_pbjson_find(const char *full_name);

/* Like kdev_pbjson_find(), restricted to the device plugin API (package
 * "v1beta1"): NULL for any other name. */
KDEV_API const ProtobufCMessageDescriptor *kdev_pbjson_v1beta1_find(const char *full_name);

#endif /* KDEV_KUBELET_PBJSON_H */
