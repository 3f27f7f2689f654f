/* kdevctl kubelet: the PodResources v1 server (v1.PodResourcesLister: List,
 * GetAllocatableResources, Get), answered from kdevctl's own device manager
 * the way kubelet's pkg/kubelet/apis/podresources/server_v1.go answers from
 * its managers:
 *
 * - List / Get: every active (admitted, not deleted) pod with its app
 *   containers; init containers are left out (kubelet lists only restartable
 *   init containers, which scenarios do not have). A container's devices come
 *   from its device manager records (kubelet's podDevices), one
 *   ContainerDevices per device and NUMA node, with that NUMA node as
 *   topology (none for a device without topology), like kubelet's
 *   containerDevicesFromResourceDeviceInstances. Resources follow the
 *   container's limits in scenario order, devices their record's NUMA order;
 *   pods are sorted by name (kubelet's order is that of a Go map).
 * - GetAllocatableResources: every device of every resource from its last
 *   ListAndWatch list, one ContainerDevices per device and NUMA node.
 * - No CPU manager, memory manager or DRA manager is modelled: cpu_ids,
 *   memory and dynamic_resources are empty.
 * - Pods have no namespace in scenarios: all are in "default".
 */
#include "kubelet/cmd_kubelet_internal.h"

#include "kubelet/podres_internal.h"
#include "podresources/v1/api.pb-c.h"

#define PODRES_NAMESPACE "default"

static V1__ContainerDevices *cdev_new(const char *resource, const char *id, bool topo,
                                      int64_t node)
{
        V1__ContainerDevices *d = malloc(sizeof(*d));
        if (!d)
                abort();
        v1__container_devices__init(d);
        d->resource_name = xstrdup(resource);
        d->n_device_ids = 1;
        d->device_ids = malloc(sizeof(char *));
        if (!d->device_ids)
                abort();
        d->device_ids[0] = xstrdup(id);
        if (topo) {
                d->topology = malloc(sizeof(*d->topology));
                V1__NUMANode *n = malloc(sizeof(*n));
                V1__NUMANode **nodes = malloc(sizeof(*nodes));
                if (!d->topology || !n || !nodes)
                        abort();
                v1__topology_info__init(d->topology);
                v1__numanode__init(n);
                n->id = node;
                nodes[0] = n;
                d->topology->nodes = nodes;
                d->topology->n_nodes = 1;
        }
        return d;
}

/* Appends |d| to the growable array |*v| (|*n| entries). */
static void cdev_push(V1__ContainerDevices ***v, size_t *n, V1__ContainerDevices *d)
{
        V1__ContainerDevices **nv = realloc(*v, (*n + 1) * sizeof(*nv));
        if (!nv)
                abort();
        nv[(*n)++] = d;
        *v = nv;
}

static V1__ContainerResources *container_resources(struct kubelet *k, const char *uid,
                                                   const struct kdev_scn_container *c)
{
        V1__ContainerResources *cr = malloc(sizeof(*cr));
        if (!cr)
                abort();
        v1__container_resources__init(cr);
        cr->name = xstrdup(c->name);
        for (size_t li = 0; li < c->n_limits; li++) {
                const struct kdev_ckpt_entry *e =
                        kdev_dm_entry(k->dm, uid, c->name, c->limits[li].resource);
                if (!e)
                        continue;
                for (size_t ni = 0; ni < e->n_numa; ni++)
                        for (size_t i = 0; i < e->numa[ni].n_ids; i++)
                                cdev_push(&cr->devices, &cr->n_devices,
                                          cdev_new(e->resource_name, e->numa[ni].ids[i],
                                                   e->numa[ni].node >= 0, e->numa[ni].node));
        }
        return cr;
}

static V1__PodResources *pod_resources(struct kubelet *k, const struct active_pod *a)
{
        V1__PodResources *p = malloc(sizeof(*p));
        if (!p)
                abort();
        v1__pod_resources__init(p);
        p->name = xstrdup(a->pod->name);
        p->namespace_ = xstrdup(PODRES_NAMESPACE);
        size_t n = 0;
        for (size_t ci = 0; ci < a->pod->n_containers; ci++)
                n += !a->pod->containers[ci].init;
        if (n) {
                p->containers = malloc(n * sizeof(*p->containers));
                if (!p->containers)
                        abort();
        }
        for (size_t ci = 0; ci < a->pod->n_containers; ci++)
                if (!a->pod->containers[ci].init)
                        p->containers[p->n_containers++] =
                                container_resources(k, a->uid, &a->pod->containers[ci]);
        return p;
}

static int by_pod_name(const void *x, const void *y)
{
        const struct active_pod *a = *(const struct active_pod *const *)x;
        const struct active_pod *b = *(const struct active_pod *const *)y;
        return strcmp(a->pod->name, b->pod->name);
}

static void on_list(struct kdev_rpc_call *call, const uint8_t *req, size_t len, void *ud)
{
        struct kubelet *k = ud;
        ProtobufCMessage *in = podres_unpack_req(call, &v1__list_pod_resources_request__descriptor, req,
                                          len);
        if (!in)
                return;
        protobuf_c_message_free_unpacked(in, NULL);
        V1__ListPodResourcesResponse *r = malloc(sizeof(*r));
        if (!r)
                abort();
        v1__list_pod_resources_response__init(r);
        if (k->n_active) {
                const struct active_pod **v = malloc(k->n_active * sizeof(*v));
                r->pod_resources = malloc(k->n_active * sizeof(*r->pod_resources));
                if (!v || !r->pod_resources)
                        abort();
                for (size_t i = 0; i < k->n_active; i++)
                        v[i] = &k->active[i];
                qsort(v, k->n_active, sizeof(*v), by_pod_name);
                for (size_t i = 0; i < k->n_active; i++)
                        r->pod_resources[r->n_pod_resources++] = pod_resources(k, v[i]);
                free(v);
        }
        podres_reply_free(call, &r->base);
}

static void on_get(struct kdev_rpc_call *call, const uint8_t *req, size_t len, void *ud)
{
        struct kubelet *k = ud;
        V1__GetPodResourcesRequest *in = (V1__GetPodResourcesRequest *)podres_unpack_req(
                call, &v1__get_pod_resources_request__descriptor, req, len);
        if (!in)
                return;
        const struct active_pod *found = NULL;
        for (size_t i = 0; i < k->n_active && !found; i++)
                if (strcmp(k->active[i].pod->name, in->pod_name) == 0 &&
                    strcmp(PODRES_NAMESPACE, in->pod_namespace) == 0)
                        found = &k->active[i];
        if (!found) {
                /* server_v1.go Get: fmt.Errorf, hence status Unknown */
                char *msg = xasprintf("pod %s in namespace %s not found", in->pod_name,
                                      in->pod_namespace);
                kdev_rpc_call_finish(call, KDEV_RPC_UNKNOWN, msg);
                free(msg);
                v1__get_pod_resources_request__free_unpacked(in, NULL);
                return;
        }
        v1__get_pod_resources_request__free_unpacked(in, NULL);
        V1__GetPodResourcesResponse *r = malloc(sizeof(*r));
        if (!r)
                abort();
        v1__get_pod_resources_response__init(r);
        r->pod_resources = pod_resources(k, found);
        podres_reply_free(call, &r->base);
}

static void on_allocatable(struct kdev_rpc_call *call, const uint8_t *req, size_t len, void *ud)
{
        struct kubelet *k = ud;
        ProtobufCMessage *in = podres_unpack_req(call, &v1__allocatable_resources_request__descriptor,
                                          req, len);
        if (!in)
                return;
        protobuf_c_message_free_unpacked(in, NULL);
        V1__AllocatableResourcesResponse *r = malloc(sizeof(*r));
        if (!r)
                abort();
        v1__allocatable_resources_response__init(r);
        for (size_t ri = 0; ri < k->dm->n_res; ri++) {
                const struct kdev_dm_resource *res = &k->dm->res[ri];
                for (size_t di = 0; di < res->n_devices; di++) {
                        const struct kdev_dm_device *d = &res->devices[di];
                        if (d->n_numa == 0)
                                cdev_push(&r->devices, &r->n_devices,
                                          cdev_new(res->name, d->id, false, 0));
                        for (size_t ni = 0; ni < d->n_numa; ni++)
                                cdev_push(&r->devices, &r->n_devices,
                                          cdev_new(res->name, d->id, true, d->numa[ni]));
                }
        }
        podres_reply_free(call, &r->base);
}

int podres_start(struct kubelet *k, struct kdev_err *err)
{
        if (!k->podres_path)
                return 0;
        k->podres_srv = podres_serve(k->loop, k->podres_path, on_list, on_allocatable, on_get,
                                     k, err);
        if (!k->podres_srv)
                return -(err->code ? err->code : EIO);
        kdev_log_info("serving PodResources", "socket", k->podres_path);
        return 0;
}

/* The helpers both PodResources servers share (podres_internal.h). */
void podres_reply_free(struct kdev_rpc_call *call, ProtobufCMessage *m)
{
        kdev_rpc_call_reply_pb(call, m);
        protobuf_c_message_free_unpacked(m, NULL);
}

ProtobufCMessage *podres_unpack_req(struct kdev_rpc_call *call,
                                    const ProtobufCMessageDescriptor *desc, const uint8_t *req,
                                    size_t len)
{
        static const uint8_t empty[1];
        ProtobufCMessage *m = protobuf_c_message_unpack(desc, NULL, len, len ? req : empty);
        if (!m) {
                char *msg = xasprintf("grpc: error unmarshalling request: not a %s", desc->name);
                kdev_rpc_call_finish(call, KDEV_RPC_INTERNAL, msg);
                free(msg);
        }
        return m;
}

struct kdev_rpc_server *podres_serve(uv_loop_t *loop, const char *path, kdev_rpc_handler_fn list,
                                     kdev_rpc_handler_fn allocatable, kdev_rpc_handler_fn get,
                                     void *ud, struct kdev_err *err)
{
        char *dir = xstrdup(path);
        char *slash = strrchr(dir, '/');
        int rc = 0;
        if (slash && slash != dir) {
                *slash = '\0';
                rc = kdev_dir_create_all(dir, KDEV_DIR_MODE_PLUGIN, "pod-resources directory", err);
        }
        free(dir);
        if (rc < 0)
                return NULL;
        unlink(path); /* kubelet removes a stale socket before listening */
        struct kdev_rpc_server *srv = kdev_rpc_server_new(loop, NULL);
        if (!srv)
                abort();
        if (kdev_rpc_server_add_method(srv, PODRES_LIST_PATH, false, list, ud) < 0 ||
            kdev_rpc_server_add_method(srv, PODRES_ALLOCATABLE_PATH, false, allocatable, ud) < 0 ||
            kdev_rpc_server_add_method(srv, PODRES_GET_PATH, false, get, ud) < 0)
                abort();
        if (kdev_rpc_server_listen_unix(srv, path, err) < 0) {
                kdev_rpc_server_close(srv, NULL, NULL);
                return NULL;
        }
        return srv;
}

void podres_stop(struct kubelet *k)
{
        if (!k->podres_srv)
                return;
        kdev_rpc_server_close(k->podres_srv, NULL, NULL);
        k->podres_srv = NULL;
        unlink(k->podres_path);
}
