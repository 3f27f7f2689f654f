/* kdevctl kubelet: pod admission (resource fit, GetPreferredAllocation,
 * Allocate, PreStartContainer; kubelet's devicemanager rules) (cmd_kubelet_internal.h).
 * Moved from cmd_kubelet.c. */
#include "kubelet/cmd_kubelet_internal.h"

/* ------------------------------------------------------------------------ */
/* Admission                                                                */
/* ------------------------------------------------------------------------ */

/* Packs |req| and starts the unary call |method| on |cl| (as
 * kdev_rpc_client_unary(), which owns nothing of |req|). Returns the call, or
 * NULL with |err| set. */
static struct kdev_rpc_client_call *call_packed(struct kdev_rpc_client *cl, const char *method,
                                                const ProtobufCMessage *req, uint64_t timeout_ms,
                                                kdev_rpc_message_fn on_message,
                                                kdev_rpc_done_fn on_done, void *ud,
                                                struct kdev_err *err)
{
        size_t len = protobuf_c_message_get_packed_size(req);
        uint8_t *buf = malloc(len ? len : 1);
        if (!buf)
                abort();
        protobuf_c_message_pack(req, buf);
        struct kdev_rpc_client_call *call =
                kdev_rpc_client_unary(cl, method, buf, len, timeout_ms, on_message, on_done, ud,
                                      err);
        free(buf);
        return call;
}

static struct reuse *reuse_get(struct admission *a, const char *resource)
{
        for (size_t i = 0; i < a->n_reuse; i++)
                if (strcmp(a->reuse[i].resource, resource) == 0)
                        return &a->reuse[i];
        struct reuse *nr = realloc(a->reuse, (a->n_reuse + 1) * sizeof(*nr));
        if (!nr)
                abort();
        a->reuse = nr;
        struct reuse *r = &nr[a->n_reuse++];
        r->resource = xstrdup(resource);
        r->ids = NULL;
        r->n = 0;
        return r;
}

static void reuse_free(struct admission *a)
{
        for (size_t i = 0; i < a->n_reuse; i++) {
                free(a->reuse[i].resource);
                for (size_t x = 0; x < a->reuse[i].n; x++)
                        free(a->reuse[i].ids[x]);
                free(a->reuse[i].ids);
        }
        free(a->reuse);
        a->reuse = NULL;
        a->n_reuse = 0;
}

/* add/removeContainerAllocatedResources for the current container. */
static void reuse_update(struct kubelet *k, const struct kdev_scn_container *c, bool add)
{
        struct admission *a = &k->adm;
        for (size_t i = 0; i < k->dm->pods.n_entries; i++) {
                const struct kdev_ckpt_entry *e = &k->dm->pods.entries[i];
                if (strcmp(e->pod_uid, a->pod->uid) != 0 || strcmp(e->container_name, c->name) != 0)
                        continue;
                struct reuse *r = reuse_get(a, e->resource_name);
                size_t n;
                const char **ids = kdev_dm_entry_ids(e, &n);
                for (size_t x = 0; x < n; x++) {
                        size_t pos = r->n;
                        for (size_t y = 0; y < r->n; y++)
                                if (strcmp(r->ids[y], ids[x]) == 0)
                                        pos = y;
                        if (add && pos == r->n) {
                                char **ni = realloc(r->ids, (r->n + 1) * sizeof(*ni));
                                if (!ni)
                                        abort();
                                r->ids = ni;
                                r->ids[r->n++] = xstrdup(ids[x]);
                        } else if (!add && pos < r->n) {
                                free(r->ids[pos]);
                                memmove(&r->ids[pos], &r->ids[pos + 1],
                                        (r->n - pos - 1) * sizeof(*r->ids));
                                r->n--;
                        }
                }
                free(ids);
        }
}

void active_remove(struct kubelet *k, const char *uid)
{
        for (size_t i = 0; i < k->n_active; i++) {
                if (strcmp(k->active[i].uid, uid) == 0) {
                        free(k->active[i].uid);
                        k->active[i] = k->active[--k->n_active];
                        return;
                }
        }
}

/* Drops the records of pods no longer active and writes the checkpoint
 * (kubelet does this at its next allocation; done at once here so the
 * printed state is current). */
void free_inactive(struct kubelet *k)
{
        if (kdev_dm_drop_inactive(k->dm) > 0) {
                struct kdev_err err = {0};
                if (kdev_dm_write_checkpoint(k->dm, &err) < 0)
                        kdev_log_error("checkpoint", "error", err.msg);
        }
}

void admission_end(struct kubelet *k)
{
        struct admission *a = &k->adm;
        kdev_dm_pick_clear(&a->pick);
        reuse_free(a);
        memset(a, 0, sizeof(*a));
        k->step_running = false;
        scenario_kick(k);
}

static void admission_reject(struct kubelet *k, const char *reason, const char *message)
{
        struct admission *a = &k->adm;
        struct step_result *r = a->res;
        r->done = true;
        r->ok = false;
        r->reason = xstrdup(reason);
        r->text = xstrdup(message);
        kdev_log_warn("pod rejected", "pod", a->pod->name, "reason", reason, "message", message);
        kdev_dm_set_active(k->dm, a->pod->uid, false);
        active_remove(k, a->pod->uid);
        free_inactive(k);
        admission_end(k);
}

static void admission_fail(struct kubelet *k, const char *err)
{
        char *m = xasprintf("Allocate failed due to %s, which is unexpected", err);
        admission_reject(k, "UnexpectedAdmissionError", m);
        free(m);
}

static uint64_t pod_request(const struct kdev_scn_pod *p, const char *resource)
{
        /* max(sum of app containers, largest init container) */
        uint64_t sum = 0, init = 0;
        for (size_t c = 0; c < p->n_containers; c++) {
                for (size_t l = 0; l < p->containers[c].n_limits; l++) {
                        const struct kdev_scn_limit *lim = &p->containers[c].limits[l];
                        if (strcmp(lim->resource, resource) != 0)
                                continue;
                        if (p->containers[c].init)
                                init = lim->count > init ? lim->count : init;
                        else
                                sum += lim->count;
                }
        }
        return sum > init ? sum : init;
}

/* The node resource fit that kubelet's predicate admit handler applies after
 * the device manager (extended resources only). Returns true when the pod
 * fits; otherwise rejects it. */
static bool resource_fit(struct kubelet *k)
{
        const struct kdev_scn_pod *p = k->adm.pod;
        for (size_t c = 0; c < p->n_containers; c++) {
                for (size_t l = 0; l < p->containers[c].n_limits; l++) {
                        const char *res = p->containers[c].limits[l].resource;
                        if (!strchr(res, '/'))
                                continue;
                        uint64_t req = pod_request(p, res);
                        if (req == 0)
                                continue;
                        size_t cap = 0, used_dev = 0;
                        const struct kdev_dm_resource *r = kdev_dm_find(k->dm, res);
                        if (r)
                                kdev_dm_counts(k->dm, r, NULL, &cap, &used_dev);
                        /* sanitizeNodeAllocatable: at least what is allocated */
                        if (used_dev > cap)
                                cap = used_dev;
                        uint64_t used = 0;
                        for (size_t i = 0; i < k->n_active; i++)
                                if (strcmp(k->active[i].uid, p->uid) != 0)
                                        used += pod_request(k->active[i].pod, res);
                        if (req + used > cap) {
                                char *reason = xasprintf("OutOf%s", res);
                                char *msg = xasprintf("Node didn't have enough resource: %s, "
                                                      "requested: %" PRIu64 ", used: %" PRIu64
                                                      ", capacity: %zu",
                                                      res, req, used, cap);
                                admission_reject(k, reason, msg);
                                free(reason);
                                free(msg);
                                return false;
                        }
                }
        }
        return true;
}

struct ctr_result *ctr_result(struct kubelet *k, size_t ci)
{
        struct step_result *r = k->adm.res;
        return &r->ctrs[ci];
}

static void alloc_result_add(struct ctr_result *cr, const char *resource, char *const *ids, size_t n,
                             bool cached)
{
        struct alloc_result *na = realloc(cr->allocs, (cr->n_allocs + 1) * sizeof(*na));
        if (!na)
                abort();
        cr->allocs = na;
        struct alloc_result *ar = &na[cr->n_allocs++];
        memset(ar, 0, sizeof(*ar));
        ar->resource = xstrdup(resource);
        ar->cached = cached;
        ar->ids = calloc(n ? n : 1, sizeof(char *));
        if (!ar->ids)
                abort();
        for (size_t i = 0; i < n; i++)
                ar->ids[ar->n_ids++] = xstrdup(ids[i]);
}

/* Fills the results of every container from the pod device records. */
static void collect_results(struct kubelet *k)
{
        const struct kdev_scn_pod *p = k->adm.pod;
        for (size_t c = 0; c < p->n_containers; c++) {
                struct ctr_result *cr = ctr_result(k, c);
                for (size_t l = 0; l < p->containers[c].n_limits; l++) {
                        const char *res = p->containers[c].limits[l].resource;
                        const struct kdev_ckpt_entry *e =
                                kdev_dm_entry(k->dm, p->uid, p->containers[c].name, res);
                        if (!e)
                                continue;
                        bool cached = false;
                        for (size_t a = 0; a < cr->n_allocs; a++)
                                if (strcmp(cr->allocs[a].resource, res) == 0)
                                        cached = true; /* marked during admission */
                        if (!cached) {
                                size_t n;
                                const char **ids = kdev_dm_entry_ids(e, &n);
                                alloc_result_add(cr, res, (char *const *)ids, n, false);
                                free(ids);
                        }
                        if (e->alloc_resp_null)
                                continue;
                        V1beta1__ContainerAllocateResponse *resp =
                                v1beta1__container_allocate_response__unpack(NULL, e->alloc_resp_len,
                                                                           e->alloc_resp);
                        if (resp) {
                                kdev_dm_opts_add(&cr->opts, resp);
                                for (size_t i = 0; i < cr->opts.n_conflicts; i++)
                                        kdev_log_warn("conflicting container option dropped",
                                                      "container", cr->name, "conflict",
                                                      cr->opts.conflicts[i]);
                                v1beta1__container_allocate_response__free_unpacked(resp, NULL);
                        }
                }
        }
}

static void prestart_done(struct kdev_rpc_client_call *call, int status, const char *message,
                          void *ud)
{
        (void)call;
        struct kubelet *k = ud;
        struct admission *a = &k->adm;
        a->call = NULL;
        struct ctr_result *cr = ctr_result(k, a->ps_ci);
        const char *res = a->pod->containers[a->ps_ci].limits[a->ps_li].resource;
        for (size_t i = 0; i < cr->n_allocs; i++) {
                if (strcmp(cr->allocs[i].resource, res) != 0)
                        continue;
                free(cr->allocs[i].prestart);
                if (status == KDEV_RPC_OK) {
                        cr->allocs[i].prestart = xstrdup("");
                } else {
                        char *e = rpc_error_text(status, message);
                        cr->allocs[i].prestart =
                                xasprintf("device plugin PreStartContainer rpc failed with "
                                          "err: %s", e);
                        free(e);
                }
        }
        a->ps_li++;
        admission_step(k);
}

/* Next PreStartContainer call of the admitted pod; false when none is left. */
static bool prestart_next(struct kubelet *k)
{
        struct admission *a = &k->adm;
        const struct kdev_scn_pod *p = a->pod;
        for (; a->ps_ci < p->n_containers; a->ps_ci++, a->ps_li = 0) {
                const struct kdev_scn_container *c = &p->containers[a->ps_ci];
                for (; a->ps_li < c->n_limits; a->ps_li++) {
                        const char *res = c->limits[a->ps_li].resource;
                        const struct kdev_dm_resource *r = kdev_dm_find(k->dm, res);
                        const struct kdev_ckpt_entry *e = kdev_dm_entry(k->dm, p->uid, c->name, res);
                        if (!r || !e || !r->has_options || !r->pre_start_required)
                                continue;
                        struct endpoint *ep = current_endpoint(k, res);
                        struct ctr_result *cr = ctr_result(k, a->ps_ci);
                        if (!ep) {
                                for (size_t i = 0; i < cr->n_allocs; i++)
                                        if (strcmp(cr->allocs[i].resource, res) == 0) {
                                                free(cr->allocs[i].prestart);
                                                cr->allocs[i].prestart = xasprintf(
                                                        "device plugin PreStartContainer rpc failed "
                                                        "with err: endpoint for %s has been stopped",
                                                        res);
                                        }
                                continue;
                        }
                        size_t n;
                        const char **ids = kdev_dm_entry_ids(e, &n);
                        V1beta1__PreStartContainerRequest req =
                                V1BETA1__PRE_START_CONTAINER_REQUEST__INIT;
                        req.devices_ids = (char **)ids;
                        req.n_devices_ids = n;
                        struct kdev_err err = {0};
                        a->call = call_packed(ep->cl, KDEV_DP_PRE_START, &req.base,
                                              PRESTART_TIMEOUT_MS, NULL, prestart_done, k, &err);
                        free(ids);
                        if (!a->call) {
                                for (size_t i = 0; i < cr->n_allocs; i++)
                                        if (strcmp(cr->allocs[i].resource, res) == 0) {
                                                free(cr->allocs[i].prestart);
                                                cr->allocs[i].prestart = xasprintf(
                                                        "device plugin PreStartContainer rpc failed "
                                                        "with err: %s",
                                                        err.msg);
                                        }
                                continue;
                        }
                        return true;
                }
        }
        return false;
}

struct unary_state {
        struct kubelet *k;
        uint8_t *msg;
        size_t len;
        bool got;
};

static void unary_message(struct kdev_rpc_client_call *call, const uint8_t *msg, size_t len, void *ud)
{
        (void)call;
        struct unary_state *u = ud;
        free(u->msg);
        u->msg = malloc(len ? len : 1);
        if (!u->msg)
                abort();
        memcpy(u->msg, msg, len);
        u->len = len;
        u->got = true;
}

static void allocate_call(struct kubelet *k);

static void preferred_done(struct kdev_rpc_client_call *call, int status, const char *message,
                           void *ud)
{
        (void)call;
        struct unary_state *u = ud;
        struct kubelet *k = u->k;
        struct admission *a = &k->adm;
        a->call = NULL;
        if (status != KDEV_RPC_OK) {
                char *e = rpc_error_text(status, message);
                char *m = xasprintf("device plugin GetPreferredAllocation rpc failed with err: %s", e);
                admission_fail(k, m);
                free(m);
                free(e);
                free(u->msg);
                free(u);
                return;
        }
        V1beta1__PreferredAllocationResponse *r =
                v1beta1__preferred_allocation_response__unpack(NULL, u->got ? u->len : 0,
                                                              u->got ? u->msg : (const uint8_t *)"");
        free(u->msg);
        free(u);
        if (!r) {
                admission_fail(k, "device plugin GetPreferredAllocation rpc failed with err: rpc "
                                  "error: code = Internal desc = grpc: failed to unmarshal the "
                                  "received message");
                return;
        }
        char **pref = NULL;
        size_t n_pref = 0;
        if (r->n_container_responses > 0 && r->container_responses[0]) {
                pref = r->container_responses[0]->deviceids;
                n_pref = r->container_responses[0]->n_deviceids;
        }
        struct kdev_err err = {0};
        int rc = kdev_dm_pick_finish(&a->pick, pref, n_pref, &err);
        v1beta1__preferred_allocation_response__free_unpacked(r, NULL);
        if (rc < 0) {
                admission_fail(k, err.msg);
                return;
        }
        allocate_call(k);
}

static void allocate_done(struct kdev_rpc_client_call *call, int status, const char *message,
                          void *ud)
{
        (void)call;
        struct unary_state *u = ud;
        struct kubelet *k = u->k;
        struct admission *a = &k->adm;
        a->call = NULL;
        if (status != KDEV_RPC_OK) {
                char *e = rpc_error_text(status, message);
                admission_fail(k, e);
                free(e);
                free(u->msg);
                free(u);
                return;
        }
        V1beta1__AllocateResponse *r = v1beta1__allocate_response__unpack(
                NULL, u->got ? u->len : 0, u->got ? u->msg : (const uint8_t *)"");
        free(u->msg);
        free(u);
        if (!r) {
                admission_fail(k, "rpc error: code = Internal desc = grpc: failed to unmarshal the "
                                  "received message");
                return;
        }
        if (r->n_container_responses == 0) {
                v1beta1__allocate_response__free_unpacked(r, NULL);
                admission_fail(k, "no containers return in allocation response");
                return;
        }
        /* kubelet keeps container_responses[0] only. */
        const V1beta1__ContainerAllocateResponse *cr0 = r->container_responses[0];
        size_t len = v1beta1__container_allocate_response__get_packed_size(cr0);
        uint8_t *buf = malloc(len ? len : 1);
        if (!buf)
                abort();
        v1beta1__container_allocate_response__pack(cr0, buf);
        v1beta1__allocate_response__free_unpacked(r, NULL);
        const struct kdev_scn_container *c = &a->pod->containers[a->ci];
        int rc = kdev_dm_record(k->dm, a->pod->uid, c->name, a->pick.resource, a->pick.picked,
                                a->pick.n_picked, buf, len);
        free(buf);
        if (rc < 0)
                abort();
        char *ids = kdev_cli_strv_join(a->pick.picked, a->pick.n_picked, ",");
        kdev_log_info("allocated", "pod", a->pod->name, "container", c->name, "resource",
                      a->pick.resource, "devices", ids ? ids : "");
        free(ids);
        a->wrote = true;
        kdev_dm_pick_clear(&a->pick);
        a->li++;
        admission_step(k);
}

static void allocate_call(struct kubelet *k)
{
        struct admission *a = &k->adm;
        struct endpoint *ep = current_endpoint(k, a->pick.resource);
        if (!ep) {
                char *m = xasprintf("endpoint for %s has been stopped", a->pick.resource);
                admission_fail(k, m);
                free(m);
                return;
        }
        V1beta1__ContainerAllocateRequest creq = V1BETA1__CONTAINER_ALLOCATE_REQUEST__INIT;
        creq.devices_ids = a->pick.picked;
        creq.n_devices_ids = a->pick.n_picked;
        V1beta1__ContainerAllocateRequest *list[1] = {&creq};
        V1beta1__AllocateRequest req = V1BETA1__ALLOCATE_REQUEST__INIT;
        req.container_requests = list;
        req.n_container_requests = 1;
        struct unary_state *u = calloc(1, sizeof(*u));
        if (!u)
                abort();
        u->k = k;
        struct kdev_err err = {0};
        /* kubelet sets no deadline on Allocate. */
        a->call = call_packed(ep->cl, KDEV_DP_ALLOCATE, &req.base, 0, unary_message,
                              allocate_done, u, &err);
        if (!a->call) {
                free(u);
                admission_fail(k, err.msg);
        }
}

static void preferred_call(struct kubelet *k)
{
        struct admission *a = &k->adm;
        struct endpoint *ep = current_endpoint(k, a->pick.resource);
        if (!ep) {
                char *m = xasprintf("device plugin GetPreferredAllocation rpc failed with err: "
                                    "endpoint for %s has been stopped",
                                    a->pick.resource);
                admission_fail(k, m);
                free(m);
                return;
        }
        V1beta1__PreferredAllocationRequest req;
        V1beta1__ContainerPreferredAllocationRequest creq;
        if (kdev_dm_pick_preferred_req(&a->pick, &req, &creq) < 0)
                abort();
        struct unary_state *u = calloc(1, sizeof(*u));
        if (!u)
                abort();
        u->k = k;
        struct kdev_err err = {0};
        a->call = call_packed(ep->cl, KDEV_DP_GET_PREFERRED, &req.base, 0, unary_message,
                              preferred_done, u, &err);
        kdev_dm_preferred_req_clear(&req, &creq);
        if (!a->call) {
                free(u);
                char *m = xasprintf("device plugin GetPreferredAllocation rpc failed with err: %s",
                                    err.msg);
                admission_fail(k, m);
                free(m);
        }
}

/* Advances the admission of the current pod until an RPC is in flight or
 * the pod is decided. */
void admission_step(struct kubelet *k)
{
        struct admission *a = &k->adm;
        const struct kdev_scn_pod *p = a->pod;
        if (a->ps_ci > 0 || a->ps_li > 0 || a->ci >= p->n_containers) {
                /* Admitted: PreStartContainer before each container start. */
                if (prestart_next(k))
                        return;
                a->res->done = true;
                a->res->ok = true;
                kdev_log_info("pod admitted", "pod", p->name, "uid", p->uid);
                admission_end(k);
                return;
        }
        while (a->ci < p->n_containers) {
                const struct kdev_scn_container *c = &p->containers[a->ci];
                while (a->li < c->n_limits) {
                        const struct kdev_scn_limit *lim = &c->limits[a->li];
                        if (!kdev_dm_is_plugin_resource(k->dm, lim->resource)) {
                                a->li++;
                                continue;
                        }
                        if (!a->updated) {
                                /* UpdateAllocatedDevices */
                                kdev_dm_drop_inactive(k->dm);
                                a->updated = true;
                        }
                        struct reuse *ru = NULL;
                        for (size_t i = 0; i < a->n_reuse; i++)
                                if (strcmp(a->reuse[i].resource, lim->resource) == 0)
                                        ru = &a->reuse[i];
                        struct kdev_err err = {0};
                        int rc = kdev_dm_pick_begin(k->dm, p->uid, c->name, lim->resource,
                                                    (size_t)lim->count, ru ? ru->ids : NULL,
                                                    ru ? ru->n : 0, &a->pick, &err);
                        if (rc < 0) {
                                admission_fail(k, err.msg);
                                return;
                        }
                        if (a->pick.cached) {
                                alloc_result_add(ctr_result(k, a->ci), lim->resource,
                                                 a->pick.picked, a->pick.n_picked, true);
                                kdev_dm_pick_clear(&a->pick);
                                a->li++;
                                continue;
                        }
                        if (a->pick.needed == 0 && a->pick.n_picked == 0) {
                                /* zero devices requested */
                                kdev_dm_pick_clear(&a->pick);
                                a->li++;
                                continue;
                        }
                        if (a->pick.needed == 0) {
                                allocate_call(k);
                                return;
                        }
                        if (a->pick.want_preferred) {
                                preferred_call(k);
                                return;
                        }
                        if (kdev_dm_pick_finish(&a->pick, NULL, 0, &err) < 0) {
                                admission_fail(k, err.msg);
                                return;
                        }
                        allocate_call(k);
                        return;
                }
                if (a->wrote) {
                        struct kdev_err err = {0};
                        if (kdev_dm_write_checkpoint(k->dm, &err) < 0) {
                                admission_fail(k, err.msg);
                                return;
                        }
                }
                reuse_update(k, c, c->init);
                a->ci++;
                a->li = 0;
                a->updated = false;
                a->wrote = false;
        }
        if (!resource_fit(k))
                return;
        collect_results(k);
        admission_step(k);
}

void admission_start(struct kubelet *k, const struct kdev_scn_pod *p)
{
        struct admission *a = &k->adm;
        memset(a, 0, sizeof(*a));
        a->active = true;
        a->pod = p;
        struct step_result *r = result_new(k, KDEV_SCN_POD);
        r->pod_name = xstrdup(p->name);
        r->uid = xstrdup(p->uid);
        r->ctrs = calloc(p->n_containers, sizeof(*r->ctrs));
        if (!r->ctrs)
                abort();
        r->n_ctrs = p->n_containers;
        for (size_t c = 0; c < p->n_containers; c++) {
                r->ctrs[c].name = xstrdup(p->containers[c].name);
                r->ctrs[c].init = p->containers[c].init;
        }
        a->res = r;
        kdev_log_info("admitting pod", "pod", p->name, "uid", p->uid);
        kdev_dm_set_active(k->dm, p->uid, true);
        bool known = false;
        for (size_t i = 0; i < k->n_active; i++)
                known = known || strcmp(k->active[i].uid, p->uid) == 0;
        if (!known) {
                struct active_pod *na = realloc(k->active, (k->n_active + 1) * sizeof(*na));
                if (!na)
                        abort();
                k->active = na;
                na[k->n_active].uid = xstrdup(p->uid);
                na[k->n_active].pod = p;
                k->n_active++;
        }
        admission_step(k);
}
