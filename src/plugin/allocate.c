/* Container edits -> v1beta1 ContainerAllocateResponse (see allocate.h). */
#include "plugin/allocate.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "plugin/allocate_wire_internal.h"

static void free_pb_string(char *s)
{
        if (s && s != protobuf_c_empty_string)
                free(s);
}

void kdev_allocate_response_free_contents(V1beta1__ContainerAllocateResponse *resp)
{
        if (!resp)
                return;
        for (size_t i = 0; i < resp->n_envs; i++) {
                if (!resp->envs[i])
                        continue;
                free_pb_string(resp->envs[i]->key);
                free_pb_string(resp->envs[i]->value);
                free(resp->envs[i]);
        }
        free(resp->envs);
        for (size_t i = 0; i < resp->n_mounts; i++) {
                if (!resp->mounts[i])
                        continue;
                free_pb_string(resp->mounts[i]->container_path);
                free_pb_string(resp->mounts[i]->host_path);
                free(resp->mounts[i]);
        }
        free(resp->mounts);
        for (size_t i = 0; i < resp->n_devices; i++) {
                if (!resp->devices[i])
                        continue;
                free_pb_string(resp->devices[i]->container_path);
                free_pb_string(resp->devices[i]->host_path);
                free_pb_string(resp->devices[i]->permissions);
                free(resp->devices[i]);
        }
        free(resp->devices);
        for (size_t i = 0; i < resp->n_annotations; i++) {
                if (!resp->annotations[i])
                        continue;
                free_pb_string(resp->annotations[i]->key);
                free_pb_string(resp->annotations[i]->value);
                free(resp->annotations[i]);
        }
        free(resp->annotations);
        for (size_t i = 0; i < resp->n_cdi_devices; i++) {
                if (!resp->cdi_devices[i])
                        continue;
                free_pb_string(resp->cdi_devices[i]->name);
                free(resp->cdi_devices[i]);
        }
        free(resp->cdi_devices);
        V1beta1__ContainerAllocateResponse init = V1BETA1__CONTAINER_ALLOCATE_RESPONSE__INIT;
        *resp = init;
}

/* Makes room for |add| more pointers after the *|n| of *|arr|. */
static int reserve(void ***arr, size_t n, size_t add)
{
        if (add == 0)
                return 0;
        void **na = realloc(*arr, (n + add) * sizeof(*na));
        if (!na)
                return -ENOMEM;
        *arr = na;
        return 0;
}

/* Each move below takes the strings of an entry of |e| (leaving NULL) into a
 * new message appended to |out|, with room reserved first. */

static int move_nodes(struct kdev_container_edits *e, V1beta1__ContainerAllocateResponse *out)
{
        if (reserve((void ***)&out->devices, out->n_devices, e->n_nodes) < 0)
                return -ENOMEM;
        for (size_t i = 0; i < e->n_nodes; i++) {
                struct kdev_edit_node *n = &e->nodes[i];
                if (!n->path)
                        continue; /* taken by an earlier, failed call */
                V1beta1__DeviceSpec *d = malloc(sizeof(*d));
                if (!d)
                        return -ENOMEM;
                v1beta1__device_spec__init(d);
                d->container_path = n->path;
                d->host_path = n->host_path;
                d->permissions = n->permissions;
                n->path = n->host_path = n->permissions = NULL;
                out->devices[out->n_devices++] = d;
        }
        return 0;
}

static int move_env(struct kdev_container_edits *e, V1beta1__ContainerAllocateResponse *out)
{
        if (reserve((void ***)&out->envs, out->n_envs, e->n_env) < 0)
                return -ENOMEM;
        for (size_t i = 0; i < e->n_env; i++) {
                struct kdev_edit_kv *kv = &e->env[i];
                if (!kv->key)
                        continue;
                V1beta1__ContainerAllocateResponse__EnvsEntry *m = malloc(sizeof(*m));
                if (!m)
                        return -ENOMEM;
                v1beta1__container_allocate_response__envs_entry__init(m);
                m->key = kv->key;
                m->value = kv->value;
                kv->key = kv->value = NULL;
                out->envs[out->n_envs++] = m;
        }
        return 0;
}

static int move_mounts(struct kdev_container_edits *e, V1beta1__ContainerAllocateResponse *out)
{
        if (reserve((void ***)&out->mounts, out->n_mounts, e->n_mounts) < 0)
                return -ENOMEM;
        for (size_t i = 0; i < e->n_mounts; i++) {
                struct kdev_edit_mount *em = &e->mounts[i];
                if (!em->container_path)
                        continue;
                V1beta1__Mount *m = malloc(sizeof(*m));
                if (!m)
                        return -ENOMEM;
                v1beta1__mount__init(m);
                m->container_path = em->container_path;
                m->host_path = em->host_path;
                m->read_only = kdev_alloc_mount_read_only(em);
                em->container_path = em->host_path = NULL;
                out->mounts[out->n_mounts++] = m;
        }
        return 0;
}

static int move_annotations(struct kdev_container_edits *e,
                            V1beta1__ContainerAllocateResponse *out)
{
        if (reserve((void ***)&out->annotations, out->n_annotations, e->n_annotations) < 0)
                return -ENOMEM;
        for (size_t i = 0; i < e->n_annotations; i++) {
                struct kdev_edit_kv *kv = &e->annotations[i];
                if (!kv->key)
                        continue;
                V1beta1__ContainerAllocateResponse__AnnotationsEntry *a = malloc(sizeof(*a));
                if (!a)
                        return -ENOMEM;
                v1beta1__container_allocate_response__annotations_entry__init(a);
                a->key = kv->key;
                a->value = kv->value;
                kv->key = kv->value = NULL;
                out->annotations[out->n_annotations++] = a;
        }
        return 0;
}

static int move_cdi_devices(struct kdev_container_edits *e,
                            V1beta1__ContainerAllocateResponse *out)
{
        if (reserve((void ***)&out->cdi_devices, out->n_cdi_devices, e->n_cdi_devices) < 0)
                return -ENOMEM;
        for (size_t i = 0; i < e->n_cdi_devices; i++) {
                if (!e->cdi_devices[i])
                        continue;
                V1beta1__CDIDevice *c = malloc(sizeof(*c));
                if (!c)
                        return -ENOMEM;
                v1beta1__cdidevice__init(c);
                c->name = e->cdi_devices[i];
                e->cdi_devices[i] = NULL;
                out->cdi_devices[out->n_cdi_devices++] = c;
        }
        return 0;
}

int kdev_plugin_allocate_response(struct kdev_container_edits *e,
                                  V1beta1__ContainerAllocateResponse *out, struct kdev_err *err)
{
        if (e->allocator)
                return kdev_err_set(err, EINVAL, "kdev_plugin_allocate_response: the edits' "
                                    "strings come from an allocator and cannot be taken over");
        if (move_nodes(e, out) < 0 || move_env(e, out) < 0 || move_mounts(e, out) < 0 ||
            move_annotations(e, out) < 0 || move_cdi_devices(e, out) < 0)
                return kdev_err_set(err, ENOMEM, "out of memory");
        return 0;
}

int kdev_plugin_allocate(const struct kdev_resource *r, const char *const *ids, size_t n_ids,
                         V1beta1__ContainerAllocateResponse *out, struct kdev_err *err)
{
        if (!r || !out || (n_ids && !ids))
                return kdev_err_set(err, EINVAL, "kdev_plugin_allocate: invalid arguments");
        if (out->n_devices != 0)
                return kdev_err_set(err, EINVAL,
                                    "kdev_plugin_allocate: response already has devices");
        struct kdev_container_edits e = {0};
        int rc = kdev_resource_edits(r, ids, n_ids, &e, err);
        if (rc == 0) {
                rc = kdev_plugin_allocate_response(&e, out, err);
                if (rc < 0)
                        kdev_allocate_response_free_contents(out);
        }
        kdev_container_edits_clear(&e);
        return rc;
}
