/* kdevctl dra, private: the claims it prepared for pods, and the
 * PodResources v1 server it answers from them (cmd_dra_podres.c), as
 * kubelet's DRA manager feeds its PodResources server
 * (pkg/kubelet/cm/dra GetContainerClaimInfos; KEP-3695, kubelet 1.32+ with
 * KubeletPodResourcesDynamicResources). Not a public interface. */
#ifndef KDEV_KUBELET_CMD_DRA_INTERNAL_H
#define KDEV_KUBELET_CMD_DRA_INTERNAL_H

#include <stddef.h>

#include <uv.h>

#include "common/err.h"
#include "dra/v1beta1/api.pb-c.h"
#include "rpc/rpc.h"

/* One claim prepared for one container of a pod. */
struct dra_held_device {
        char *pool, *device;
        char **cdi;     /* CDI device IDs, as NodePrepareResources answered them */
        size_t n_cdi;
};

struct dra_held {
        char *uid, *claim_namespace, *claim_name; /* the pod's namespace: the claim's */
        char *pod, *container, *driver;
        struct dra_held_device *devices;
        size_t n_devices;
};

struct dra_podres {
        struct dra_held *v; /* in the order they were prepared */
        size_t n;
        struct kdev_rpc_server *srv; /* NULL: not served */
        char *path;
};

/* Records claim |uid| (|ns|/|name|) prepared by driver |driver| with the
 * |n| devices |devs| for container |container| of pod |pod|; an earlier
 * record of the same claim and container is replaced. Aborts when out of
 * memory (a command-line tool). */
void dra_podres_prepared(struct dra_podres *p, const char *driver, const char *ns,
                         const char *name, const char *uid, const char *pod,
                         const char *container,
                         K8s__Io__Kubelet__Pkg__Apis__Dra__V1beta1__Device *const *devs,
                         size_t n);

/* Forgets every record of claim |uid| (NodeUnprepareResources worked). */
void dra_podres_unprepared(struct dra_podres *p, const char *uid);

/* Serves PodResources v1 (List, Get, GetAllocatableResources) on the Unix
 * socket |path| of |loop| from the records: every pod with a record, sorted
 * by namespace then name, its containers in the order of their first
 * record, each with one DynamicResource per claim (claim name and
 * namespace) and one ClaimResource per device (driver, pool, device, CDI
 * devices); no device-plugin devices; GetAllocatableResources answers empty
 * (kubelet lists no DRA devices there). Get of an unknown pod: gRPC Unknown
 * "pod NAME in namespace NS not found", kubelet's text. Returns 0 or a
 * negative errno with |err|. */
int dra_podres_start(struct dra_podres *p, uv_loop_t *loop, const char *path,
                     struct kdev_err *err);

/* Closes the server, on its loop's thread, and removes its socket; nothing
 * when not serving. */
void dra_podres_stop(struct dra_podres *p);

/* Frees the records (the server stopped first). */
void dra_podres_clear(struct dra_podres *p);

#endif /* KDEV_KUBELET_CMD_DRA_INTERNAL_H */
