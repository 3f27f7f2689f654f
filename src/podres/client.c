/* PodResources v1 client: List and the device -> pod map. */
#include "podres/client.h"

#include <errno.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "common/file.h"
#include "rpc/rpc.h"

static bool dup_to(char **dst, const char *s)
{
        *dst = strdup(s ? s : "");
        return *dst != NULL;
}

static struct kdev_podres_device *find_in(struct kdev_podres_map *m, const char *res,
                                          const char *id, const char *ns, const char *pod,
                                          const char *ctr)
{
        for (size_t i = 0; i < m->n_devices; i++) {
                struct kdev_podres_device *d = &m->devices[i];
                if (strcmp(d->resource, res) == 0 && strcmp(d->device_id, id) == 0 &&
                    strcmp(d->namespace_, ns) == 0 && strcmp(d->pod, pod) == 0 &&
                    strcmp(d->container, ctr) == 0)
                        return d;
        }
        return NULL;
}

static int add_numa(struct kdev_podres_device *d, const V1__TopologyInfo *t)
{
        for (size_t i = 0; t && i < t->n_nodes; i++) {
                int64_t node = t->nodes[i]->id;
                bool seen = false;
                for (size_t j = 0; j < d->n_numa; j++)
                        seen = seen || d->numa[j] == node;
                if (seen)
                        continue;
                int64_t *nv = realloc(d->numa, (d->n_numa + 1) * sizeof(*nv));
                if (!nv)
                        return -ENOMEM;
                nv[d->n_numa++] = node;
                d->numa = nv;
        }
        return 0;
}

static int add_device(struct kdev_podres_map *m, const V1__ContainerDevices *cd, const char *id,
                      const char *ns, const char *pod, const char *ctr)
{
        struct kdev_podres_device *d = find_in(m, cd->resource_name, id, ns, pod, ctr);
        if (!d) {
                struct kdev_podres_device *nv =
                        realloc(m->devices, (m->n_devices + 1) * sizeof(*nv));
                if (!nv)
                        return -ENOMEM;
                m->devices = nv;
                d = &nv[m->n_devices++];
                memset(d, 0, sizeof(*d));
                if (!dup_to(&d->resource, cd->resource_name) || !dup_to(&d->device_id, id) ||
                    !dup_to(&d->namespace_, ns) || !dup_to(&d->pod, pod) ||
                    !dup_to(&d->container, ctr))
                        return -ENOMEM;
        }
        return add_numa(d, cd->topology);
}

static int add_claim(struct kdev_podres_map *m, const V1__DynamicResource *dr,
                     const V1__ClaimResource *cr, const char *ns, const char *pod,
                     const char *ctr)
{
        struct kdev_podres_claim_device *nv = realloc(m->claims, (m->n_claims + 1) * sizeof(*nv));
        if (!nv)
                return -ENOMEM;
        m->claims = nv;
        struct kdev_podres_claim_device *c = &nv[m->n_claims++];
        memset(c, 0, sizeof(*c));
        if (!dup_to(&c->namespace_, ns) || !dup_to(&c->pod, pod) || !dup_to(&c->container, ctr) ||
            !dup_to(&c->claim_namespace, dr->claim_namespace) ||
            !dup_to(&c->claim_name, dr->claim_name) || !dup_to(&c->driver, cr->driver_name) ||
            !dup_to(&c->pool, cr->pool_name) || !dup_to(&c->device, cr->device_name))
                return -ENOMEM;
        if (cr->share_id_presence_case == V1__CLAIM_RESOURCE__SHARE_ID_PRESENCE_SHARE_ID) {
                c->has_share_id = true;
                if (!dup_to(&c->share_id, cr->share_id))
                        return -ENOMEM;
        }
        if (cr->n_cdi_devices) {
                c->cdi_devices = calloc(cr->n_cdi_devices, sizeof(char *));
                if (!c->cdi_devices)
                        return -ENOMEM;
                for (size_t i = 0; i < cr->n_cdi_devices; i++) {
                        if (!dup_to(&c->cdi_devices[i], cr->cdi_devices[i]->name))
                                return -ENOMEM;
                        c->n_cdi_devices++;
                }
        }
        return 0;
}

int kdev_podres_map_from_list(const V1__ListPodResourcesResponse *resp,
                              struct kdev_podres_map *map, struct kdev_err *err)
{
        memset(map, 0, sizeof(*map));
        int rc = 0;
        for (size_t pi = 0; rc == 0 && pi < resp->n_pod_resources; pi++) {
                const V1__PodResources *p = resp->pod_resources[pi];
                for (size_t ci = 0; rc == 0 && ci < p->n_containers; ci++) {
                        const V1__ContainerResources *c = p->containers[ci];
                        for (size_t di = 0; rc == 0 && di < c->n_devices; di++) {
                                const V1__ContainerDevices *cd = c->devices[di];
                                if (!cd->resource_name || !*cd->resource_name)
                                        continue;
                                for (size_t i = 0; rc == 0 && i < cd->n_device_ids; i++)
                                        if (*cd->device_ids[i])
                                                rc = add_device(map, cd, cd->device_ids[i],
                                                                p->namespace_, p->name, c->name);
                        }
                        for (size_t ri = 0; rc == 0 && ri < c->n_dynamic_resources; ri++) {
                                const V1__DynamicResource *dr = c->dynamic_resources[ri];
                                for (size_t k = 0; rc == 0 && k < dr->n_claim_resources; k++)
                                        rc = add_claim(map, dr, dr->claim_resources[k],
                                                       p->namespace_, p->name, c->name);
                        }
                }
        }
        if (rc < 0) {
                kdev_podres_map_clear(map);
                return kdev_err_set(err, ENOMEM, "out of memory");
        }
        return 0;
}

int kdev_podres_list(const char *path, uint64_t timeout_ms, struct kdev_podres_map *map,
                     struct kdev_err *err)
{
        memset(map, 0, sizeof(*map));
        if (!path)
                path = KDEV_PODRES_SOCKET;
        struct stat st;
        if (stat(path, &st) < 0) {
                int e = errno;
                if (e == ENOENT)
                        return kdev_err_set(err, ENOENT, "PodResources List on %s: no such socket %s",
                                            path, path);
                return kdev_err_set(err, e, "PodResources List on %s: %s: %s", path, path,
                                    strerror(e));
        }
        if (!S_ISSOCK(st.st_mode))
                return kdev_err_set(err, ENOTSOCK, "PodResources List on %s: %s is not a socket "
                                                   "(it is %s)",
                                    path, path, kdev_file_type_name(st.st_mode));
        /* an empty ListPodResourcesRequest packs to no bytes */
        uint8_t *in = NULL;
        size_t in_len = 0;
        struct kdev_err e = {0};
        int rc = kdev_rpc_unary_sync(path, KDEV_PODRES_LIST, NULL, 0, timeout_ms, &in, &in_len, &e);
        if (rc < 0) {
                free(in);
                return kdev_err_set(err, -rc, "PodResources List on %s: %s", path,
                                    e.msg[0] ? e.msg : strerror(-rc));
        }
        if (rc != KDEV_RPC_OK) {
                char name[32];
                free(in);
                return kdev_err_set(err, EREMOTEIO,
                                    "PodResources List on %s: rpc error: code = %s desc = %s", path,
                                    kdev_rpc_code_name(rc, name, sizeof(name)), e.msg);
        }
        static const uint8_t none[1];
        V1__ListPodResourcesResponse *resp =
                v1__list_pod_resources_response__unpack(NULL, in_len, in ? in : none);
        free(in);
        if (!resp)
                return kdev_err_set(err, EBADMSG,
                                    "PodResources List on %s: cannot decode the %s response "
                                    "(%zu bytes)",
                                    path, v1__list_pod_resources_response__descriptor.name, in_len);
        rc = kdev_podres_map_from_list(resp, map, err);
        v1__list_pod_resources_response__free_unpacked(resp, NULL);
        return rc;
}

const struct kdev_podres_device *kdev_podres_find(const struct kdev_podres_map *map,
                                                  const char *resource, const char *device_id)
{
        for (size_t i = 0; map && resource && device_id && i < map->n_devices; i++)
                if (strcmp(map->devices[i].resource, resource) == 0 &&
                    strcmp(map->devices[i].device_id, device_id) == 0)
                        return &map->devices[i];
        return NULL;
}

json_t *kdev_podres_map_json(const struct kdev_podres_map *map)
{
        json_t *devs = json_array(), *claims = json_array();
        json_t *out = json_pack("{s:o?,s:o?}", "devices", devs, "claims", claims);
        if (!out)
                return NULL;
        bool ok = devs && claims;
        for (size_t i = 0; ok && i < map->n_devices; i++) {
                const struct kdev_podres_device *d = &map->devices[i];
                json_t *numa = json_array();
                for (size_t j = 0; numa && j < d->n_numa; j++)
                        json_array_append_new(numa, json_integer(d->numa[j]));
                json_t *o = json_pack("{s:s,s:s,s:o?,s:s,s:s,s:s}", "resource", d->resource,
                                      "deviceId", d->device_id, "numa", numa, "namespace",
                                      d->namespace_, "pod", d->pod, "container", d->container);
                ok = o && json_array_append_new(devs, o) == 0;
        }
        for (size_t i = 0; ok && i < map->n_claims; i++) {
                const struct kdev_podres_claim_device *c = &map->claims[i];
                json_t *cdi = json_array();
                for (size_t j = 0; cdi && j < c->n_cdi_devices; j++)
                        json_array_append_new(cdi, json_string(c->cdi_devices[j]));
                json_t *o = json_pack("{s:s,s:s,s:s,s:s,s:s,s:s,s:s,s:s,s:o?}", "namespace",
                                      c->namespace_, "pod", c->pod, "container", c->container,
                                      "claimNamespace", c->claim_namespace, "claimName",
                                      c->claim_name, "driver", c->driver, "pool", c->pool,
                                      "device", c->device, "cdiDevices", cdi);
                if (o && c->has_share_id)
                        json_object_set_new(o, "shareId", json_string(c->share_id));
                ok = o && json_array_append_new(claims, o) == 0;
        }
        if (!ok) {
                json_decref(out);
                return NULL;
        }
        return out;
}

void kdev_podres_map_clear(struct kdev_podres_map *map)
{
        if (!map)
                return;
        for (size_t i = 0; i < map->n_devices; i++) {
                struct kdev_podres_device *d = &map->devices[i];
                free(d->resource);
                free(d->device_id);
                free(d->numa);
                free(d->namespace_);
                free(d->pod);
                free(d->container);
        }
        for (size_t i = 0; i < map->n_claims; i++) {
                struct kdev_podres_claim_device *c = &map->claims[i];
                free(c->namespace_);
                free(c->pod);
                free(c->container);
                free(c->claim_namespace);
                free(c->claim_name);
                free(c->driver);
                free(c->pool);
                free(c->device);
                for (size_t j = 0; j < c->n_cdi_devices; j++)
                        free(c->cdi_devices[j]);
                free(c->cdi_devices);
                free(c->share_id);
        }
        free(map->devices);
        free(map->claims);
        memset(map, 0, sizeof(*map));
}
