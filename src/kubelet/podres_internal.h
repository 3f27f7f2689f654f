/* kdevctl, private: what its two PodResources v1 servers share (kdevctl
 * kubelet's, cmd_kubelet_podres.c, answered from its device manager, and
 * kdevctl dra's, cmd_dra_podres.c, answered from the claims it prepared).
 * Not a public interface. */
#ifndef KDEV_KUBELET_PODRES_INTERNAL_H
#define KDEV_KUBELET_PODRES_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include <protobuf-c/protobuf-c.h>

#include "common/err.h"
#include "rpc/rpc.h"

/* PodResources v1 (k8s.io/kubelet pkg/apis/podresources/v1, api_grpc.pb.go) */
#define PODRES_LIST_PATH "/v1.PodResourcesLister/List"
#define PODRES_ALLOCATABLE_PATH "/v1.PodResourcesLister/GetAllocatableResources"
#define PODRES_GET_PATH "/v1.PodResourcesLister/Get"

/* Packs |m|, answers |call| with it and frees |m| (every part malloc'ed). */
void podres_reply_free(struct kdev_rpc_call *call, ProtobufCMessage *m);

/* Unpacks the request of |call| (|len| bytes at |req|) as |desc|; on
 * failure ends the call with INTERNAL (grpc-go's text for an undecodable
 * request, "grpc: error unmarshalling request: not a <type>") and returns
 * NULL. The message is the caller's (protobuf_c_message_free_unpacked). */
ProtobufCMessage *podres_unpack_req(struct kdev_rpc_call *call,
                                    const ProtobufCMessageDescriptor *desc, const uint8_t *req,
                                    size_t len);

/* Makes the directory of socket |path| (mkdir -p, 0750), removes a stale
 * socket there as kubelet does, and serves |list|, |allocatable| and |get|
 * (each with |ud|) on a new server of |loop| at |path|. Returns the server
 * (close with kdev_rpc_server_close, then unlink |path|) or NULL with |err|. */
struct kdev_rpc_server *podres_serve(uv_loop_t *loop, const char *path, kdev_rpc_handler_fn list,
                                     kdev_rpc_handler_fn allocatable, kdev_rpc_handler_fn get,
                                     void *ud, struct kdev_err *err);

#endif /* KDEV_KUBELET_PODRES_INTERNAL_H */
