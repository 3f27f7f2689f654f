/* NVIDIA MPS sharing: paths and Allocate edits (see mps.h). */
#include "nvidia/mps.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nvidia/nvidia_internal.h"

char *kdev_nvidia_mps_path(const char *root, const char *resource, enum kdev_nvidia_mps_path which)
{
        static const char *const leaf[] = {"pipe", "log", ".started"};
        char *rel = NULL;
        if (which == KDEV_NVIDIA_MPS_SHM)
                return kdev_nvidia_join(root, "shm");
        if (asprintf(&rel, "%s/%s", resource, leaf[which]) < 0)
                return NULL;
        char *p = kdev_nvidia_join(root, rel);
        free(rel);
        return p;
}

int kdev_nvidia_mps_edits(const char *host_root, const char *resource,
                          struct kdev_container_edits *out, struct kdev_err *err)
{
        char *ctr = kdev_nvidia_mps_path(KDEV_NVIDIA_MPS_CONTAINER_ROOT, resource,
                                         KDEV_NVIDIA_MPS_PIPE);
        char *host = kdev_nvidia_mps_path(host_root, resource, KDEV_NVIDIA_MPS_PIPE);
        char *shm = kdev_nvidia_mps_path(host_root, resource, KDEV_NVIDIA_MPS_SHM);
        int rc = -ENOMEM;
        if (ctr && host && shm && kdev_edits_set_env(out, "CUDA_MPS_PIPE_DIRECTORY", ctr, NULL) == 0 &&
            kdev_edits_add_mount(out, host, ctr, NULL, 0, NULL) == 0 &&
            kdev_edits_add_mount(out, shm, "/dev/shm", NULL, 0, NULL) == 0)
                rc = 0;
        free(ctr);
        free(host);
        free(shm);
        return rc < 0 ? kdev_err_set(err, ENOMEM, "out of memory") : 0;
}
