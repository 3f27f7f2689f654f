/* kdevctl dra: the claims it prepared for pods and its PodResources v1
 * server. See cmd_dra_internal.h. */
#include "kubelet/cmd_dra_internal.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kubelet/podres_internal.h"
#include "podresources/v1/api.pb-c.h"

static void *xmalloc(size_t n)
{
        void *p = malloc(n ? n : 1);
        if (!p)
                abort();
        return p;
}

static char *xdup(const char *s)
{
        char *d = strdup(s ? s : "");
        if (!d)
                abort();
        return d;
}

static void held_free(struct dra_held *h)
{
        for (size_t i = 0; i < h->n_devices; i++) {
                free(h->devices[i].pool);
                free(h->devices[i].device);
                for (size_t k = 0; k < h->devices[i].n_cdi; k++)
                        free(h->devices[i].cdi[k]);
                free(h->devices[i].cdi);
        }
        free(h->devices);
        free(h->uid);
        free(h->claim_namespace);
        free(h->claim_name);
        free(h->pod);
        free(h->container);
        free(h->driver);
}

void dra_podres_prepared(struct dra_podres *p, const char *driver, const char *ns,
                         const char *name, const char *uid, const char *pod,
                         const char *container,
                         K8s__Io__Kubelet__Pkg__Apis__Dra__V1beta1__Device *const *devs,
                         size_t n)
{
        struct dra_held h = {.uid = xdup(uid), .claim_namespace = xdup(ns),
                             .claim_name = xdup(name), .pod = xdup(pod),
                             .container = xdup(container), .driver = xdup(driver),
                             .devices = xmalloc(n * sizeof(*h.devices)), .n_devices = n};
        for (size_t i = 0; i < n; i++) {
                struct dra_held_device *d = &h.devices[i];
                d->pool = xdup(devs[i]->pool_name);
                d->device = xdup(devs[i]->device_name);
                d->n_cdi = devs[i]->n_cdi_device_ids;
                d->cdi = xmalloc(d->n_cdi * sizeof(*d->cdi));
                for (size_t k = 0; k < d->n_cdi; k++)
                        d->cdi[k] = xdup(devs[i]->cdi_device_ids[k]);
        }
        for (size_t i = 0; i < p->n; i++)
                if (strcmp(p->v[i].uid, uid) == 0 && strcmp(p->v[i].pod, pod) == 0 &&
                    strcmp(p->v[i].container, container) == 0) {
                        held_free(&p->v[i]);
                        p->v[i] = h;
                        return;
                }
        struct dra_held *v = realloc(p->v, (p->n + 1) * sizeof(*v));
        if (!v)
                abort();
        p->v = v;
        p->v[p->n++] = h;
}

void dra_podres_unprepared(struct dra_podres *p, const char *uid)
{
        size_t k = 0;
        for (size_t i = 0; i < p->n; i++) {
                if (strcmp(p->v[i].uid, uid) == 0)
                        held_free(&p->v[i]);
                else
                        p->v[k++] = p->v[i];
        }
        p->n = k;
}

/* ---- the answers --------------------------------------------------------- */

static V1__ClaimResource *claim_resource(const struct dra_held *h,
                                         const struct dra_held_device *d)
{
        V1__ClaimResource *r = xmalloc(sizeof(*r));
        v1__claim_resource__init(r);
        r->driver_name = xdup(h->driver);
        r->pool_name = xdup(d->pool);
        r->device_name = xdup(d->device);
        r->n_cdi_devices = d->n_cdi;
        r->cdi_devices = d->n_cdi ? xmalloc(d->n_cdi * sizeof(*r->cdi_devices)) : NULL;
        for (size_t k = 0; k < d->n_cdi; k++) {
                V1__CDIDevice *c = xmalloc(sizeof(*c));
                v1__cdidevice__init(c);
                c->name = xdup(d->cdi[k]);
                r->cdi_devices[k] = c;
        }
        return r;
}

static V1__DynamicResource *dynamic_resource(const struct dra_held *h)
{
        V1__DynamicResource *r = xmalloc(sizeof(*r));
        v1__dynamic_resource__init(r);
        r->claim_name = xdup(h->claim_name);
        r->claim_namespace = xdup(h->claim_namespace);
        r->n_claim_resources = h->n_devices;
        r->claim_resources =
                h->n_devices ? xmalloc(h->n_devices * sizeof(*r->claim_resources)) : NULL;
        for (size_t i = 0; i < h->n_devices; i++)
                r->claim_resources[i] = claim_resource(h, &h->devices[i]);
        return r;
}

static bool same_pod(const struct dra_held *a, const struct dra_held *b)
{
        return strcmp(a->claim_namespace, b->claim_namespace) == 0 && strcmp(a->pod, b->pod) == 0;
}

/* The pod of record |first| with every container that has a record. */
static V1__PodResources *pod_resources(const struct dra_podres *p, size_t first)
{
        const struct dra_held *h0 = &p->v[first];
        V1__PodResources *pr = xmalloc(sizeof(*pr));
        v1__pod_resources__init(pr);
        pr->name = xdup(h0->pod);
        pr->namespace_ = xdup(h0->claim_namespace);
        pr->containers = xmalloc(p->n * sizeof(*pr->containers));
        for (size_t i = first; i < p->n; i++) {
                const struct dra_held *h = &p->v[i];
                if (!same_pod(h, h0))
                        continue;
                V1__ContainerResources *cr = NULL;
                for (size_t c = 0; c < pr->n_containers && !cr; c++)
                        if (strcmp(pr->containers[c]->name, h->container) == 0)
                                cr = pr->containers[c];
                if (!cr) {
                        cr = xmalloc(sizeof(*cr));
                        v1__container_resources__init(cr);
                        cr->name = xdup(h->container);
                        cr->dynamic_resources = xmalloc(p->n * sizeof(*cr->dynamic_resources));
                        pr->containers[pr->n_containers++] = cr;
                }
                cr->dynamic_resources[cr->n_dynamic_resources++] = dynamic_resource(h);
        }
        return pr;
}

/* Indices of the first record of every pod, sorted by namespace, name. */
static size_t pod_firsts(const struct dra_podres *p, size_t *out)
{
        size_t n = 0;
        for (size_t i = 0; i < p->n; i++) {
                bool seen = false;
                for (size_t k = 0; k < n && !seen; k++)
                        seen = same_pod(&p->v[out[k]], &p->v[i]);
                if (seen)
                        continue;
                size_t at = n++;
                while (at > 0) {
                        const struct dra_held *a = &p->v[out[at - 1]], *b = &p->v[i];
                        int c = strcmp(a->claim_namespace, b->claim_namespace);
                        if (c < 0 || (c == 0 && strcmp(a->pod, b->pod) < 0))
                                break;
                        out[at] = out[at - 1];
                        at--;
                }
                out[at] = i;
        }
        return n;
}

static void on_list(struct kdev_rpc_call *call, const uint8_t *req, size_t len, void *ud)
{
        const struct dra_podres *p = ud;
        ProtobufCMessage *in = podres_unpack_req(call, &v1__list_pod_resources_request__descriptor,
                                                 req, len);
        if (!in)
                return;
        protobuf_c_message_free_unpacked(in, NULL);
        V1__ListPodResourcesResponse *r = xmalloc(sizeof(*r));
        v1__list_pod_resources_response__init(r);
        size_t *firsts = xmalloc(p->n * sizeof(*firsts));
        size_t n = pod_firsts(p, firsts);
        r->pod_resources = n ? xmalloc(n * sizeof(*r->pod_resources)) : NULL;
        for (size_t i = 0; i < n; i++)
                r->pod_resources[r->n_pod_resources++] = pod_resources(p, firsts[i]);
        free(firsts);
        podres_reply_free(call, &r->base);
}

static void on_get(struct kdev_rpc_call *call, const uint8_t *req, size_t len, void *ud)
{
        const struct dra_podres *p = ud;
        V1__GetPodResourcesRequest *in = (V1__GetPodResourcesRequest *)podres_unpack_req(
                call, &v1__get_pod_resources_request__descriptor, req, len);
        if (!in)
                return;
        size_t found = p->n;
        for (size_t i = 0; i < p->n && found == p->n; i++)
                if (strcmp(p->v[i].pod, in->pod_name) == 0 &&
                    strcmp(p->v[i].claim_namespace, in->pod_namespace) == 0)
                        found = i;
        if (found == p->n) {
                /* server_v1.go Get: fmt.Errorf, hence status Unknown */
                char msg[600];
                snprintf(msg, sizeof(msg), "pod %.256s in namespace %.256s not found",
                         in->pod_name, in->pod_namespace);
                kdev_rpc_call_finish(call, KDEV_RPC_UNKNOWN, msg);
                v1__get_pod_resources_request__free_unpacked(in, NULL);
                return;
        }
        v1__get_pod_resources_request__free_unpacked(in, NULL);
        V1__GetPodResourcesResponse *r = xmalloc(sizeof(*r));
        v1__get_pod_resources_response__init(r);
        r->pod_resources = pod_resources(p, found);
        podres_reply_free(call, &r->base);
}

static void on_allocatable(struct kdev_rpc_call *call, const uint8_t *req, size_t len, void *ud)
{
        (void)ud;
        ProtobufCMessage *in = podres_unpack_req(
                call, &v1__allocatable_resources_request__descriptor, req, len);
        if (!in)
                return;
        protobuf_c_message_free_unpacked(in, NULL);
        V1__AllocatableResourcesResponse *r = xmalloc(sizeof(*r));
        v1__allocatable_resources_response__init(r);
        podres_reply_free(call, &r->base);
}

int dra_podres_start(struct dra_podres *p, uv_loop_t *loop, const char *path,
                     struct kdev_err *err)
{
        p->srv = podres_serve(loop, path, on_list, on_allocatable, on_get, p, err);
        if (!p->srv)
                return -(err->code ? err->code : EIO);
        p->path = xdup(path);
        return 0;
}

void dra_podres_stop(struct dra_podres *p)
{
        if (!p->srv)
                return;
        kdev_rpc_server_close(p->srv, NULL, NULL);
        p->srv = NULL;
        unlink(p->path);
        free(p->path);
        p->path = NULL;
}

void dra_podres_clear(struct dra_podres *p)
{
        dra_podres_stop(p);
        for (size_t i = 0; i < p->n; i++)
                held_free(&p->v[i]);
        free(p->v);
        p->v = NULL;
        p->n = 0;
}
