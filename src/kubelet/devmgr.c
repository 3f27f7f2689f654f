/* kubelet device manager model: see devmgr.h. */
#include "kubelet/devmgr.h"

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "common/resource_name.h"

static void free_strv(char **v, size_t n)
{
        for (size_t i = 0; i < n; i++)
                free(v[i]);
        free(v);
}

static int strv_push(char ***v, size_t *n, const char *s)
{
        char *dup = strdup(s);
        if (!dup)
                return -ENOMEM;
        char **nv = realloc(*v, (*n + 1) * sizeof(**v));
        if (!nv) {
                free(dup);
                return -ENOMEM;
        }
        nv[(*n)++] = dup;
        *v = nv;
        return 0;
}

static bool strv_has(char *const *v, size_t n, const char *s)
{
        for (size_t i = 0; i < n; i++)
                if (strcmp(v[i], s) == 0)
                        return true;
        return false;
}

/* ------------------------------------------------------------------------ */
/* Manager and resources                                                    */
/* ------------------------------------------------------------------------ */

static void devices_free(struct kdev_dm_device *d, size_t n)
{
        for (size_t i = 0; i < n; i++) {
                free(d[i].id);
                free(d[i].numa);
        }
        free(d);
}

static void resource_clear(struct kdev_dm_resource *r)
{
        free(r->name);
        devices_free(r->devices, r->n_devices);
        free(r->endpoint);
        memset(r, 0, sizeof(*r));
}

static void resources_clear(struct kdev_devmgr *dm)
{
        for (size_t i = 0; i < dm->n_res; i++)
                resource_clear(&dm->res[i]);
        free(dm->res);
        dm->res = NULL;
        dm->n_res = 0;
}

struct kdev_devmgr *kdev_dm_new(const char *ckpt_path)
{
        struct kdev_devmgr *dm = calloc(1, sizeof(*dm));
        if (!dm)
                return NULL;
        dm->pods.entries_null = true;
        if (ckpt_path && !(dm->ckpt_path = strdup(ckpt_path))) {
                free(dm);
                return NULL;
        }
        return dm;
}

void kdev_dm_free(struct kdev_devmgr *dm)
{
        if (!dm)
                return;
        resources_clear(dm);
        kdev_ckpt_clear(&dm->pods);
        free_strv(dm->active, dm->n_active);
        free(dm->ckpt_path);
        free(dm);
}

int kdev_dm_check_register(const char *version, const char *name, struct kdev_err *err)
{
        /* plugin/v1beta1/server.go Register: version first, then the name. */
        if (!version || strcmp(version, KDEV_DM_API_VERSION) != 0)
                return kdev_err_set(err, EINVAL,
                                    "requested API version \"%s\" is not supported by kubelet. "
                                    "Supported version is [\"" KDEV_DM_API_VERSION "\"]",
                                    version ? version : "");
        if (kdev_resource_name_check(name ? name : "", NULL) < 0)
                return kdev_err_set(err, EINVAL, "the ResourceName \"%s\" is invalid",
                                    name ? name : "");
        return 0;
}

struct kdev_dm_resource *kdev_dm_find(struct kdev_devmgr *dm, const char *name)
{
        for (size_t i = 0; i < dm->n_res; i++)
                if (strcmp(dm->res[i].name, name) == 0)
                        return &dm->res[i];
        return NULL;
}

static struct kdev_dm_resource *resource_get(struct kdev_devmgr *dm, const char *name)
{
        struct kdev_dm_resource *r = kdev_dm_find(dm, name);
        if (r)
                return r;
        char *dup = strdup(name);
        if (!dup)
                return NULL;
        struct kdev_dm_resource *nr = realloc(dm->res, (dm->n_res + 1) * sizeof(*nr));
        if (!nr) {
                free(dup);
                return NULL;
        }
        dm->res = nr;
        r = &nr[dm->n_res++];
        memset(r, 0, sizeof(*r));
        r->name = dup;
        return r;
}

struct kdev_dm_resource *kdev_dm_connect(struct kdev_devmgr *dm, const char *name,
                                         const char *endpoint, bool pre_start_required,
                                         bool get_preferred_available)
{
        struct kdev_dm_resource *r = resource_get(dm, name);
        if (!r)
                return NULL;
        char *ep = endpoint ? strdup(endpoint) : NULL;
        if (endpoint && !ep)
                return NULL;
        free(r->endpoint);
        r->endpoint = ep;
        r->has_endpoint = true;
        r->stopped = false;
        r->has_options = true;
        r->pre_start_required = pre_start_required;
        r->get_preferred_available = get_preferred_available;
        return r;
}

int kdev_dm_update(struct kdev_devmgr *dm, const char *name, const V1beta1__ListAndWatchResponse *msg,
                   struct kdev_err *err)
{
        struct kdev_dm_resource *r = resource_get(dm, name);
        if (!r)
                return kdev_err_set(err, ENOMEM, "out of memory");
        struct kdev_dm_device *devs = calloc(msg->n_devices ? msg->n_devices : 1, sizeof(*devs));
        if (!devs)
                return kdev_err_set(err, ENOMEM, "out of memory");
        size_t n = 0;
        for (size_t i = 0; i < msg->n_devices; i++) {
                const V1beta1__Device *d = msg->devices[i];
                struct kdev_dm_device *o = &devs[n];
                /* A repeated ID replaces the earlier one (kubelet keys its
                 * device map by ID). */
                for (size_t k = 0; k < n; k++) {
                        if (strcmp(devs[k].id, d->id ? d->id : "") == 0) {
                                o = &devs[k];
                                free(o->id);
                                free(o->numa);
                                memset(o, 0, sizeof(*o));
                                break;
                        }
                }
                o->id = strdup(d->id ? d->id : "");
                o->healthy = d->health && strcmp(d->health, "Healthy") == 0;
                if (d->topology && d->topology->n_nodes > 0) {
                        o->numa = malloc(d->topology->n_nodes * sizeof(*o->numa));
                        if (o->numa) {
                                o->n_numa = d->topology->n_nodes;
                                for (size_t k = 0; k < o->n_numa; k++)
                                        o->numa[k] = d->topology->nodes[k] ? d->topology->nodes[k]->id
                                                                           : 0;
                        }
                }
                if (!o->id || (d->topology && d->topology->n_nodes > 0 && !o->numa)) {
                        devices_free(devs, n + 1);
                        return kdev_err_set(err, ENOMEM, "out of memory");
                }
                if (o == &devs[n])
                        n++;
        }
        devices_free(r->devices, r->n_devices);
        r->devices = devs;
        r->n_devices = n;
        r->known = true;
        return kdev_dm_write_checkpoint(dm, err);
}

void kdev_dm_disconnect(struct kdev_devmgr *dm, const char *name)
{
        struct kdev_dm_resource *r = kdev_dm_find(dm, name);
        if (!r)
                return;
        for (size_t i = 0; i < r->n_devices; i++)
                r->devices[i].healthy = false;
        r->stopped = true;
}

/* Distinct devices of |resource| held by pod device entries. */
static bool in_use(const struct kdev_devmgr *dm, const char *resource, const char *id)
{
        for (size_t i = 0; i < dm->pods.n_entries; i++) {
                const struct kdev_ckpt_entry *e = &dm->pods.entries[i];
                if (strcmp(e->resource_name, resource) != 0)
                        continue;
                for (size_t k = 0; k < e->n_numa; k++)
                        if (strv_has(e->numa[k].ids, e->numa[k].n_ids, id))
                                return true;
        }
        return false;
}

static size_t count_in_use(const struct kdev_devmgr *dm, const char *resource)
{
        /* Distinct IDs across entries; small sets, quadratic is fine. */
        char **seen = NULL;
        size_t n = 0;
        for (size_t i = 0; i < dm->pods.n_entries; i++) {
                const struct kdev_ckpt_entry *e = &dm->pods.entries[i];
                if (strcmp(e->resource_name, resource) != 0)
                        continue;
                for (size_t k = 0; k < e->n_numa; k++)
                        for (size_t j = 0; j < e->numa[k].n_ids; j++)
                                if (!strv_has(seen, n, e->numa[k].ids[j]))
                                        if (strv_push(&seen, &n, e->numa[k].ids[j]) < 0)
                                                goto out;
        }
out:;
        size_t count = n;
        free_strv(seen, n);
        return count;
}

void kdev_dm_counts(const struct kdev_devmgr *dm, const struct kdev_dm_resource *r, size_t *capacity,
                    size_t *allocatable, size_t *allocated)
{
        size_t healthy = 0;
        for (size_t i = 0; i < r->n_devices; i++)
                healthy += r->devices[i].healthy;
        if (capacity)
                *capacity = r->n_devices;
        if (allocatable)
                *allocatable = healthy;
        if (allocated)
                *allocated = count_in_use(dm, r->name);
}

int kdev_dm_write_checkpoint(struct kdev_devmgr *dm, struct kdev_err *err)
{
        if (!dm->ckpt_path)
                return 0;
        /* RegisteredDevices: the healthy IDs of every resource kubelet has a
         * healthy set for (never null: kubelet builds a fresh map). */
        struct kdev_checkpoint *cp = &dm->pods;
        for (size_t i = 0; i < cp->n_registered; i++) {
                free(cp->registered[i].name);
                free_strv(cp->registered[i].ids, cp->registered[i].n_ids);
        }
        free(cp->registered);
        cp->registered = NULL;
        cp->n_registered = 0;
        cp->registered_null = false;
        for (size_t i = 0; i < dm->n_res; i++) {
                const struct kdev_dm_resource *r = &dm->res[i];
                if (!r->known)
                        continue;
                const char **ids = malloc((r->n_devices ? r->n_devices : 1) * sizeof(*ids));
                if (!ids)
                        return kdev_err_set(err, ENOMEM, "out of memory");
                size_t n = 0;
                for (size_t k = 0; k < r->n_devices; k++)
                        if (r->devices[k].healthy)
                                ids[n++] = r->devices[k].id;
                int rc = kdev_ckpt_add_resource(cp, r->name, ids, n);
                free(ids);
                if (rc < 0)
                        return kdev_err_set(err, ENOMEM, "out of memory");
        }
        cp->entries_null = cp->n_entries == 0;
        cp->layout = KDEV_CKPT_LAYOUT_CURRENT;
        int rc = kdev_ckpt_write(dm->ckpt_path, cp, err);
        if (rc < 0)
                return kdev_err_wrap(err, "writing checkpoint");
        return 0;
}

int kdev_dm_restart(struct kdev_devmgr *dm, struct kdev_err *err)
{
        resources_clear(dm);
        kdev_ckpt_clear(&dm->pods);
        dm->pods.entries_null = true;
        if (!dm->ckpt_path)
                return 0;
        struct kdev_checkpoint cp = {0};
        int rc = kdev_ckpt_read(dm->ckpt_path, &cp, err);
        if (rc == 0)
                rc = kdev_ckpt_verify(&cp, NULL, err);
        if (rc < 0) {
                kdev_ckpt_clear(&cp);
                return rc;
        }
        for (size_t i = 0; i < cp.n_registered; i++) {
                struct kdev_dm_resource *r = resource_get(dm, cp.registered[i].name);
                if (!r) {
                        kdev_ckpt_clear(&cp);
                        return kdev_err_set(err, ENOMEM, "out of memory");
                }
                r->known = true;
                r->has_endpoint = true;
                r->stopped = true;
                r->has_options = false;
        }
        /* Keep the pod device entries; registered list is rebuilt on write. */
        for (size_t i = 0; i < cp.n_registered; i++) {
                free(cp.registered[i].name);
                free_strv(cp.registered[i].ids, cp.registered[i].n_ids);
        }
        free(cp.registered);
        cp.registered = NULL;
        cp.n_registered = 0;
        free_strv(cp.notes, cp.n_notes);
        cp.notes = NULL;
        cp.n_notes = 0;
        cp.layout = KDEV_CKPT_LAYOUT_CURRENT;
        cp.entries_null = cp.n_entries == 0;
        dm->pods = cp;
        return 0;
}

int kdev_dm_set_active(struct kdev_devmgr *dm, const char *uid, bool active)
{
        for (size_t i = 0; i < dm->n_active; i++) {
                if (strcmp(dm->active[i], uid) == 0) {
                        if (!active) {
                                free(dm->active[i]);
                                dm->active[i] = dm->active[--dm->n_active];
                        }
                        return 0;
                }
        }
        return active ? strv_push(&dm->active, &dm->n_active, uid) : 0;
}

size_t kdev_dm_drop_inactive(struct kdev_devmgr *dm)
{
        size_t dropped = 0, w = 0;
        struct kdev_checkpoint *cp = &dm->pods;
        for (size_t i = 0; i < cp->n_entries; i++) {
                if (!strv_has(dm->active, dm->n_active, cp->entries[i].pod_uid)) {
                        struct kdev_ckpt_entry *e = &cp->entries[i];
                        free(e->pod_uid);
                        free(e->container_name);
                        free(e->resource_name);
                        for (size_t k = 0; k < e->n_numa; k++)
                                free_strv(e->numa[k].ids, e->numa[k].n_ids);
                        free(e->numa);
                        free(e->alloc_resp);
                        dropped++;
                        continue;
                }
                cp->entries[w++] = cp->entries[i];
        }
        cp->n_entries = w;
        return dropped;
}

bool kdev_dm_is_plugin_resource(const struct kdev_devmgr *dm, const char *name)
{
        for (size_t i = 0; i < dm->n_res; i++)
                if (dm->res[i].known && strcmp(dm->res[i].name, name) == 0)
                        return true;
        for (size_t i = 0; i < dm->pods.n_entries; i++)
                if (strcmp(dm->pods.entries[i].resource_name, name) == 0)
                        return true;
        return false;
}

const struct kdev_ckpt_entry *kdev_dm_entry(const struct kdev_devmgr *dm, const char *uid,
                                            const char *container, const char *resource)
{
        for (size_t i = 0; i < dm->pods.n_entries; i++) {
                const struct kdev_ckpt_entry *e = &dm->pods.entries[i];
                if (strcmp(e->pod_uid, uid) == 0 && strcmp(e->container_name, container) == 0 &&
                    strcmp(e->resource_name, resource) == 0)
                        return e;
        }
        return NULL;
}

const char **kdev_dm_entry_ids(const struct kdev_ckpt_entry *e, size_t *n)
{
        size_t total = 0;
        *n = 0;
        for (size_t k = 0; k < e->n_numa; k++)
                total += e->numa[k].n_ids;
        if (total == 0)
                return NULL;
        const char **ids = malloc(total * sizeof(*ids));
        if (!ids)
                return NULL;
        for (size_t k = 0; k < e->n_numa; k++) {
                for (size_t j = 0; j < e->numa[k].n_ids; j++) {
                        bool dup = false;
                        for (size_t x = 0; x < *n && !dup; x++)
                                dup = strcmp(ids[x], e->numa[k].ids[j]) == 0;
                        if (!dup)
                                ids[(*n)++] = e->numa[k].ids[j];
                }
        }
        return ids;
}

/* ------------------------------------------------------------------------ */
/* Device choice (manager.go devicesToAllocate)                             */
/* ------------------------------------------------------------------------ */

void kdev_dm_pick_clear(struct kdev_dm_pick *pick)
{
        if (!pick)
                return;
        free(pick->resource);
        free_strv(pick->picked, pick->n_picked);
        free_strv(pick->available, pick->n_available);
        memset(pick, 0, sizeof(*pick));
}

/* allocateRemainingFrom: takes devices of |from| not yet picked (and, when
 * |only| is given, present in it) until nothing is needed. True when done. */
static int take_from(struct kdev_dm_pick *pick, char *const *from, size_t n, char *const *only,
                     size_t n_only, bool *done)
{
        for (size_t i = 0; i < n && pick->needed > 0; i++) {
                if (strv_has(pick->picked, pick->n_picked, from[i]))
                        continue;
                if (only && !strv_has(only, n_only, from[i]))
                        continue;
                if (strv_push(&pick->picked, &pick->n_picked, from[i]) < 0)
                        return -ENOMEM;
                pick->needed--;
        }
        *done = pick->needed == 0;
        return 0;
}

int kdev_dm_pick_begin(struct kdev_devmgr *dm, const char *uid, const char *container,
                       const char *resource, size_t required, char *const *reuse, size_t n_reuse,
                       struct kdev_dm_pick *pick, struct kdev_err *err)
{
        memset(pick, 0, sizeof(*pick));
        if (!(pick->resource = strdup(resource)))
                return kdev_err_set(err, ENOMEM, "out of memory");
        pick->required = required;
        pick->needed = required;

        const struct kdev_ckpt_entry *e = kdev_dm_entry(dm, uid, container, resource);
        size_t n_have = 0;
        const char **have = e ? kdev_dm_entry_ids(e, &n_have) : NULL;
        if (e) {
                if (n_have != required) {
                        free(have);
                        return kdev_err_set(err, EINVAL,
                                            "pod \"%s\" container \"%s\" changed request for resource "
                                            "\"%s\" from %zu to %zu",
                                            uid, container, resource, n_have, required);
                }
                pick->needed = 0;
        }

        const struct kdev_dm_resource *r = kdev_dm_find(dm, resource);
        int rc = 0;
        if (!r || !r->known) {
                rc = kdev_err_set(err, EINVAL, "cannot allocate unregistered device %s", resource);
                goto out;
        }
        size_t healthy = 0;
        for (size_t i = 0; i < r->n_devices; i++)
                healthy += r->devices[i].healthy;
        if (healthy == 0) {
                rc = kdev_err_set(err, EINVAL,
                                  "no healthy devices present; cannot allocate unhealthy devices %s",
                                  resource);
                goto out;
        }
        for (size_t i = 0; i < n_have; i++) {
                bool ok = false;
                for (size_t k = 0; k < r->n_devices && !ok; k++)
                        ok = r->devices[k].healthy && strcmp(r->devices[k].id, have[i]) == 0;
                if (!ok) {
                        rc = kdev_err_set(err, EINVAL,
                                          "previously allocated devices are no longer healthy; "
                                          "cannot allocate unhealthy devices %s",
                                          resource);
                        goto out;
                }
        }
        if (pick->needed == 0) {
                pick->cached = e != NULL;
                for (size_t i = 0; i < n_have; i++)
                        if (strv_push(&pick->picked, &pick->n_picked, have[i]) < 0) {
                                rc = kdev_err_set(err, ENOMEM, "out of memory");
                                goto out;
                        }
                goto out;
        }

        bool done;
        if (take_from(pick, reuse, n_reuse, NULL, 0, &done) < 0) {
                rc = kdev_err_set(err, ENOMEM, "out of memory");
                goto out;
        }
        if (done)
                goto out;

        for (size_t i = 0; i < r->n_devices; i++) {
                const struct kdev_dm_device *d = &r->devices[i];
                if (d->healthy && !in_use(dm, resource, d->id) &&
                    strv_push(&pick->available, &pick->n_available, d->id) < 0) {
                        rc = kdev_err_set(err, ENOMEM, "out of memory");
                        goto out;
                }
        }
        if (pick->n_available < pick->needed) {
                rc = kdev_err_set(err, EINVAL,
                                  "requested number of devices unavailable for %s. Requested: %zu, "
                                  "Available: %zu",
                                  resource, pick->needed, pick->n_available);
                goto out;
        }
        /* No topology manager: nothing is NUMA-aligned, so the plugin is
         * asked about all available devices (kubelet manager.go
         * callGetPreferredAllocationIfAvailable). */
        pick->want_preferred = r->has_options && r->get_preferred_available;
out:
        free(have);
        return rc;
}

int kdev_dm_pick_preferred_req(const struct kdev_dm_pick *pick,
                               V1beta1__PreferredAllocationRequest *req,
                               V1beta1__ContainerPreferredAllocationRequest *creq)
{
        v1beta1__preferred_allocation_request__init(req);
        v1beta1__container_preferred_allocation_request__init(creq);
        size_t n = pick->n_available + pick->n_picked;
        creq->available_deviceids = malloc((n ? n : 1) * sizeof(char *));
        creq->must_include_deviceids =
                malloc((pick->n_picked ? pick->n_picked : 1) * sizeof(char *));
        req->container_requests = malloc(sizeof(*req->container_requests));
        if (!creq->available_deviceids || !creq->must_include_deviceids ||
            !req->container_requests) {
                kdev_dm_preferred_req_clear(req, creq);
                return -ENOMEM;
        }
        for (size_t i = 0; i < pick->n_available; i++)
                creq->available_deviceids[creq->n_available_deviceids++] = pick->available[i];
        for (size_t i = 0; i < pick->n_picked; i++) {
                if (!strv_has(pick->available, pick->n_available, pick->picked[i]))
                        creq->available_deviceids[creq->n_available_deviceids++] = pick->picked[i];
                creq->must_include_deviceids[creq->n_must_include_deviceids++] = pick->picked[i];
        }
        creq->allocation_size = (int32_t)pick->required;
        req->container_requests[0] = creq;
        req->n_container_requests = 1;
        return 0;
}

void kdev_dm_preferred_req_clear(V1beta1__PreferredAllocationRequest *req,
                                 V1beta1__ContainerPreferredAllocationRequest *creq)
{
        free(creq->available_deviceids);
        free(creq->must_include_deviceids);
        free(req->container_requests);
        creq->available_deviceids = NULL;
        creq->must_include_deviceids = NULL;
        creq->n_available_deviceids = creq->n_must_include_deviceids = 0;
        req->container_requests = NULL;
        req->n_container_requests = 0;
}

int kdev_dm_pick_finish(struct kdev_dm_pick *pick, char *const *preferred, size_t n_preferred,
                        struct kdev_err *err)
{
        bool done = pick->needed == 0;
        if (!done && preferred &&
            take_from(pick, preferred, n_preferred, pick->available, pick->n_available, &done) < 0)
                return kdev_err_set(err, ENOMEM, "out of memory");
        if (!done && take_from(pick, pick->available, pick->n_available, NULL, 0, &done) < 0)
                return kdev_err_set(err, ENOMEM, "out of memory");
        if (!done)
                return kdev_err_set(err, EINVAL,
                                    "unexpectedly allocated less resources than required. "
                                    "Requested: %zu, Got: %zu",
                                    pick->required, pick->required - pick->needed);
        return 0;
}

int kdev_dm_record(struct kdev_devmgr *dm, const char *uid, const char *container,
                   const char *resource, char *const *ids, size_t n_ids, const uint8_t *resp,
                   size_t len)
{
        /* podDevices.insert replaces an earlier record of the same key. */
        for (size_t i = 0; i < dm->pods.n_entries; i++) {
                struct kdev_ckpt_entry *e = &dm->pods.entries[i];
                if (strcmp(e->pod_uid, uid) == 0 && strcmp(e->container_name, container) == 0 &&
                    strcmp(e->resource_name, resource) == 0) {
                        free(e->pod_uid);
                        free(e->container_name);
                        free(e->resource_name);
                        for (size_t k = 0; k < e->n_numa; k++)
                                free_strv(e->numa[k].ids, e->numa[k].n_ids);
                        free(e->numa);
                        free(e->alloc_resp);
                        memmove(e, e + 1, (dm->pods.n_entries - i - 1) * sizeof(*e));
                        dm->pods.n_entries--;
                        break;
                }
        }
        static const uint8_t empty;
        struct kdev_ckpt_entry *e = kdev_ckpt_add_entry(&dm->pods, uid, container, resource,
                                                        resp ? resp : &empty, resp ? len : 0);
        if (!e)
                return -ENOMEM;
        const struct kdev_dm_resource *r = kdev_dm_find(dm, resource);
        for (size_t i = 0; i < n_ids; i++) {
                const struct kdev_dm_device *d = NULL;
                for (size_t k = 0; r && k < r->n_devices && !d; k++)
                        if (strcmp(r->devices[k].id, ids[i]) == 0)
                                d = &r->devices[k];
                if (!d || d->n_numa == 0) {
                        if (kdev_ckpt_entry_add_id(e, -1, ids[i]) < 0)
                                return -ENOMEM;
                        continue;
                }
                for (size_t k = 0; k < d->n_numa; k++)
                        if (kdev_ckpt_entry_add_id(e, d->numa[k], ids[i]) < 0)
                                return -ENOMEM;
        }
        return 0;
}

/* ------------------------------------------------------------------------ */
/* Container run options                                                    */
/* ------------------------------------------------------------------------ */

void kdev_dm_opts_clear(struct kdev_dm_opts *o)
{
        if (!o)
                return;
        for (size_t i = 0; i < o->n_envs; i++) {
                free(o->envs[i].key);
                free(o->envs[i].value);
        }
        free(o->envs);
        for (size_t i = 0; i < o->n_mounts; i++) {
                free(o->mounts[i].container_path);
                free(o->mounts[i].host_path);
        }
        free(o->mounts);
        for (size_t i = 0; i < o->n_devices; i++) {
                free(o->devices[i].container_path);
                free(o->devices[i].host_path);
                free(o->devices[i].permissions);
        }
        free(o->devices);
        for (size_t i = 0; i < o->n_annotations; i++) {
                free(o->annotations[i].key);
                free(o->annotations[i].value);
        }
        free(o->annotations);
        free_strv(o->cdi, o->n_cdi);
        free_strv(o->conflicts, o->n_conflicts);
        memset(o, 0, sizeof(*o));
}

static const char *nz(const char *s)
{
        return s ? s : "";
}

static int conflict(struct kdev_dm_opts *o, const char *what, const char *key, const char *kept,
                    const char *dropped)
{
        char buf[1024];
        snprintf(buf, sizeof(buf), "%s %s: kept \"%s\", dropped \"%s\"", what, key, kept, dropped);
        return strv_push(&o->conflicts, &o->n_conflicts, buf);
}

/* Adds KEY=VALUE to |kv| unless the key is there (first wins). */
static int kv_add(struct kdev_dm_opts *o, struct kdev_dm_kv **kv, size_t *n, const char *what,
                  const char *key, const char *value)
{
        for (size_t i = 0; i < *n; i++) {
                if (strcmp((*kv)[i].key, key) == 0) {
                        if (strcmp((*kv)[i].value, value) != 0)
                                return conflict(o, what, key, (*kv)[i].value, value);
                        return 0;
                }
        }
        struct kdev_dm_kv *nk = realloc(*kv, (*n + 1) * sizeof(*nk));
        if (!nk)
                return -ENOMEM;
        *kv = nk;
        nk[*n].key = strdup(key);
        nk[*n].value = strdup(value);
        if (!nk[*n].key || !nk[*n].value) {
                free(nk[*n].key);
                free(nk[*n].value);
                return -ENOMEM;
        }
        (*n)++;
        return 0;
}

int kdev_dm_opts_add(struct kdev_dm_opts *o, const V1beta1__ContainerAllocateResponse *resp)
{
        /* Within one message a repeated map key keeps its last value (proto
         * map semantics), so skip entries overridden later in the message. */
        for (size_t i = 0; i < resp->n_envs; i++) {
                bool later = false;
                for (size_t j = i + 1; j < resp->n_envs && !later; j++)
                        later = strcmp(nz(resp->envs[i]->key), nz(resp->envs[j]->key)) == 0;
                if (!later && kv_add(o, &o->envs, &o->n_envs, "env", nz(resp->envs[i]->key),
                                     nz(resp->envs[i]->value)) < 0)
                        return -ENOMEM;
        }
        for (size_t i = 0; i < resp->n_mounts; i++) {
                const V1beta1__Mount *m = resp->mounts[i];
                bool dup = false;
                for (size_t k = 0; k < o->n_mounts && !dup; k++) {
                        if (strcmp(o->mounts[k].container_path, nz(m->container_path)) == 0) {
                                dup = true;
                                if (strcmp(o->mounts[k].host_path, nz(m->host_path)) != 0 &&
                                    conflict(o, "mount", o->mounts[k].container_path,
                                             o->mounts[k].host_path, nz(m->host_path)) < 0)
                                        return -ENOMEM;
                        }
                }
                if (dup)
                        continue;
                struct kdev_dm_mount *nm = realloc(o->mounts, (o->n_mounts + 1) * sizeof(*nm));
                if (!nm)
                        return -ENOMEM;
                o->mounts = nm;
                nm[o->n_mounts].container_path = strdup(nz(m->container_path));
                nm[o->n_mounts].host_path = strdup(nz(m->host_path));
                nm[o->n_mounts].read_only = m->read_only;
                o->n_mounts++;
                if (!nm[o->n_mounts - 1].container_path || !nm[o->n_mounts - 1].host_path)
                        return -ENOMEM;
        }
        for (size_t i = 0; i < resp->n_devices; i++) {
                const V1beta1__DeviceSpec *d = resp->devices[i];
                bool dup = false;
                for (size_t k = 0; k < o->n_devices && !dup; k++) {
                        if (strcmp(o->devices[k].container_path, nz(d->container_path)) == 0) {
                                dup = true;
                                if (strcmp(o->devices[k].host_path, nz(d->host_path)) != 0 &&
                                    conflict(o, "device", o->devices[k].container_path,
                                             o->devices[k].host_path, nz(d->host_path)) < 0)
                                        return -ENOMEM;
                        }
                }
                if (dup)
                        continue;
                struct kdev_dm_devspec *nd = realloc(o->devices, (o->n_devices + 1) * sizeof(*nd));
                if (!nd)
                        return -ENOMEM;
                o->devices = nd;
                nd[o->n_devices].container_path = strdup(nz(d->container_path));
                nd[o->n_devices].host_path = strdup(nz(d->host_path));
                nd[o->n_devices].permissions = strdup(nz(d->permissions));
                o->n_devices++;
                if (!nd[o->n_devices - 1].container_path || !nd[o->n_devices - 1].host_path ||
                    !nd[o->n_devices - 1].permissions)
                        return -ENOMEM;
        }
        for (size_t i = 0; i < resp->n_annotations; i++) {
                bool later = false;
                for (size_t j = i + 1; j < resp->n_annotations && !later; j++)
                        later = strcmp(nz(resp->annotations[i]->key),
                                       nz(resp->annotations[j]->key)) == 0;
                if (!later && kv_add(o, &o->annotations, &o->n_annotations, "annotation",
                                     nz(resp->annotations[i]->key),
                                     nz(resp->annotations[i]->value)) < 0)
                        return -ENOMEM;
        }
        for (size_t i = 0; i < resp->n_cdi_devices; i++) {
                const char *name = nz(resp->cdi_devices[i]->name);
                if (!strv_has(o->cdi, o->n_cdi, name) && strv_push(&o->cdi, &o->n_cdi, name) < 0)
                        return -ENOMEM;
        }
        return 0;
}

static int cmp_kv(const void *a, const void *b)
{
        const struct kdev_dm_kv *const *x = a, *const *y = b;
        return strcmp((*x)->key, (*y)->key);
}

/* Pointers to |kv| sorted by key (caller frees the array); NULL when empty. */
static const struct kdev_dm_kv **sorted_kv(const struct kdev_dm_kv *kv, size_t n)
{
        if (n == 0)
                return NULL;
        const struct kdev_dm_kv **s = malloc(n * sizeof(*s));
        if (!s)
                return NULL;
        for (size_t i = 0; i < n; i++)
                s[i] = &kv[i];
        qsort(s, n, sizeof(*s), cmp_kv);
        return s;
}

void kdev_dm_opts_print(FILE *f, const char *indent, const struct kdev_dm_opts *o)
{
        const struct kdev_dm_kv **s = sorted_kv(o->envs, o->n_envs);
        for (size_t i = 0; s && i < o->n_envs; i++)
                fprintf(f, "%senv %s=%s\n", indent, s[i]->key, s[i]->value);
        free(s);
        for (size_t i = 0; i < o->n_mounts; i++)
                fprintf(f, "%smount %s from %s (%s)\n", indent, o->mounts[i].container_path,
                        o->mounts[i].host_path, o->mounts[i].read_only ? "ro" : "rw");
        for (size_t i = 0; i < o->n_devices; i++)
                fprintf(f, "%sdevice %s from %s (%s)\n", indent, o->devices[i].container_path,
                        o->devices[i].host_path, o->devices[i].permissions);
        s = sorted_kv(o->annotations, o->n_annotations);
        for (size_t i = 0; s && i < o->n_annotations; i++)
                fprintf(f, "%sannotation %s=%s\n", indent, s[i]->key, s[i]->value);
        free(s);
        for (size_t i = 0; i < o->n_cdi; i++)
                fprintf(f, "%scdi %s\n", indent, o->cdi[i]);
        for (size_t i = 0; i < o->n_conflicts; i++)
                fprintf(f, "%sconflict %s\n", indent, o->conflicts[i]);
}

json_t *kdev_dm_opts_json(const struct kdev_dm_opts *o)
{
        json_t *j = json_object();
        json_t *envs = json_object(), *mounts = json_array(), *devs = json_array();
        json_t *ann = json_object(), *cdi = json_array();
        bool ok = j && envs && mounts && devs && ann && cdi;
        for (size_t i = 0; ok && i < o->n_envs; i++)
                ok = json_object_set_new(envs, o->envs[i].key, json_string(o->envs[i].value)) == 0;
        for (size_t i = 0; ok && i < o->n_mounts; i++)
                ok = json_array_append_new(
                             mounts, json_pack("{s:s,s:s,s:b}", "containerPath",
                                               o->mounts[i].container_path, "hostPath",
                                               o->mounts[i].host_path, "readOnly",
                                               o->mounts[i].read_only)) == 0;
        for (size_t i = 0; ok && i < o->n_devices; i++)
                ok = json_array_append_new(
                             devs, json_pack("{s:s,s:s,s:s}", "containerPath",
                                             o->devices[i].container_path, "hostPath",
                                             o->devices[i].host_path, "permissions",
                                             o->devices[i].permissions)) == 0;
        for (size_t i = 0; ok && i < o->n_annotations; i++)
                ok = json_object_set_new(ann, o->annotations[i].key,
                                         json_string(o->annotations[i].value)) == 0;
        for (size_t i = 0; ok && i < o->n_cdi; i++)
                ok = json_array_append_new(cdi, json_pack("{s:s}", "name", o->cdi[i])) == 0;
        if (!ok) {
                json_decref(j);
                json_decref(envs);
                json_decref(mounts);
                json_decref(devs);
                json_decref(ann);
                json_decref(cdi);
                return NULL;
        }
        json_object_set_new(j, "envs", envs);
        json_object_set_new(j, "mounts", mounts);
        json_object_set_new(j, "devices", devs);
        json_object_set_new(j, "annotations", ann);
        json_object_set_new(j, "cdiDevices", cdi);
        if (o->n_conflicts > 0) {
                json_t *c = json_array();
                for (size_t i = 0; c && i < o->n_conflicts; i++)
                        json_array_append_new(c, json_string(o->conflicts[i]));
                json_object_set_new(j, "conflicts", c);
        }
        return j;
}
