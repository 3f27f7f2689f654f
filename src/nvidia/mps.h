/* NVIDIA MPS sharing (`sharing.mps`): the paths of the MPS control daemon of
 * a resource, the Allocate edits of its replicas, and what kdev's control
 * daemon sends to nvidia-cuda-mps-control.
 *
 * Follows NVIDIA's k8s-device-plugin v0.20.0 (internal/plugin/mps.go,
 * cmd/mps-control-daemon/mps/{daemon,root,device}.go): under a root R (the
 * host's --mps-root, or "/mps" inside the containers) resource <res> (e.g.
 * "nvidia.com/gpu", slash kept) has its control pipe directory
 * R/<res>/pipe, its log directory R/<res>/log and its started marker
 * R/<res>/.started; the shared memory directory is R/shm.
 */
#ifndef KDEV_NVIDIA_MPS_H
#define KDEV_NVIDIA_MPS_H

#include <stddef.h>

#include "common/err.h"
#include "model/edits.h"
#include "model/model.h"
#include "nvidia/config.h"

/* The root of the MPS directories inside the containers (NVIDIA
 * mps.ContainerRoot). */
#define KDEV_NVIDIA_MPS_CONTAINER_ROOT "/mps"

/* The control program NVIDIA runs (found on PATH). */
#define KDEV_NVIDIA_MPS_CONTROL_BIN "nvidia-cuda-mps-control"

/* The health query NVIDIA's plugin sends before serving (AssertHealthy). */
#define KDEV_NVIDIA_MPS_HEALTH_QUERY "get_default_active_thread_percentage"

/* Which of a resource's MPS paths. */
enum kdev_nvidia_mps_path {
        KDEV_NVIDIA_MPS_PIPE,    /* <root>/<res>/pipe */
        KDEV_NVIDIA_MPS_LOG,     /* <root>/<res>/log */
        KDEV_NVIDIA_MPS_STARTED, /* <root>/<res>/.started */
        KDEV_NVIDIA_MPS_SHM,     /* <root>/shm (|resource| unused) */
};

/* Path |which| of resource |resource| under |root| (absolute; repeated and
 * trailing slashes dropped, filepath.Join). Malloc'ed; NULL when out of
 * memory. */
KDEV_API char *kdev_nvidia_mps_path(const char *root, const char *resource,
                                    enum kdev_nvidia_mps_path which);

/* The Allocate edits of an MPS replica of |resource| (NVIDIA updateReponse):
 * env CUDA_MPS_PIPE_DIRECTORY = /mps/<resource>/pipe; mounts
 * <host_root>/<resource>/pipe -> /mps/<resource>/pipe, then
 * <host_root>/shm -> /dev/shm, appended to |out|. Returns 0 or -ENOMEM with
 * |err|. */
KDEV_API int kdev_nvidia_mps_edits(const char *host_root, const char *resource,
                                   struct kdev_container_edits *out, struct kdev_err *err);

#endif /* KDEV_NVIDIA_MPS_H */
