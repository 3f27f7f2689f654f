/* kdevctl kubelet: plugin endpoints (dial, ListAndWatch) and the Register
 * service (cmd_kubelet_internal.h). Moved from cmd_kubelet.c. */
#include "kubelet/cmd_kubelet_internal.h"

/* ------------------------------------------------------------------------ */
/* Endpoints                                                                */
/* ------------------------------------------------------------------------ */

void endpoint_free(struct endpoint *ep)
{
        free(ep->resource);
        free(ep->socket);
        free(ep->path);
        free(ep);
}

static void on_reaper(uv_timer_t *t)
{
        struct kubelet *k = t->data;
        if (k->stopping)
                return;
        struct endpoint **pp = &k->eps;
        while (*pp) {
                struct endpoint *ep = *pp;
                if (ep->dead && !ep->lw) {
                        *pp = ep->next;
                        kdev_rpc_client_close(ep->cl);
                        endpoint_free(ep);
                        continue;
                }
                pp = &ep->next;
        }
}

static struct endpoint *endpoint_new(struct kubelet *k, const char *resource, const char *socket,
                                     const char *path)
{
        struct endpoint *ep = calloc(1, sizeof(*ep));
        if (!ep)
                return NULL;
        ep->k = k;
        ep->resource = xstrdup(resource);
        ep->socket = xstrdup(socket);
        ep->path = xstrdup(path);
        ep->cl = kdev_rpc_client_new(k->loop, path, NULL);
        if (!ep->cl) {
                endpoint_free(ep);
                return NULL;
        }
        ep->next = k->eps;
        k->eps = ep;
        return ep;
}

/* Stops |ep|: it is no longer current, its stream is cancelled and its
 * client closed soon (outside any callback of it). */
void endpoint_retire(struct endpoint *ep)
{
        ep->current = false;
        ep->dead = true;
        if (ep->lw)
                kdev_rpc_client_call_cancel(ep->lw); /* on_done clears ep->lw */
        if (!ep->k->stopping)
                uv_timer_start(&ep->k->reaper, on_reaper, 0, 0);
}

struct endpoint *current_endpoint(struct kubelet *k, const char *resource)
{
        for (struct endpoint *ep = k->eps; ep; ep = ep->next)
                if (ep->current && strcmp(ep->resource, resource) == 0)
                        return ep;
        return NULL;
}

static void lw_message(struct kdev_rpc_client_call *call, const uint8_t *msg, size_t len, void *ud)
{
        struct endpoint *ep = ud;
        struct kubelet *k = ep->k;
        if (!ep->current)
                return;
        V1beta1__ListAndWatchResponse *r = v1beta1__list_and_watch_response__unpack(NULL, len, msg);
        if (!r) {
                PEER_LOG(k, KDEV_LOG_ERROR, "cannot decode ListAndWatch response; ending the stream",
                         "resource", ep->resource);
                kdev_rpc_client_call_cancel(call);
                return;
        }
        struct kdev_err err = {0};
        int rc = kdev_dm_update(k->dm, ep->resource, r, &err);
        if (rc < 0)
                PEER_LOG(k, KDEV_LOG_ERROR, "device update", "resource", ep->resource, "error",
                         err.msg);
        else
                ep->listed = true;
        size_t healthy = 0;
        for (size_t i = 0; i < r->n_devices; i++)
                healthy += r->devices[i]->health && strcmp(r->devices[i]->health, "Healthy") == 0;
        PEER_LOG(k, KDEV_LOG_INFO, "ListAndWatch update", "resource", ep->resource,
                 KDEV_LOG_UINT("devices", r->n_devices), KDEV_LOG_UINT("healthy", healthy));
        v1beta1__list_and_watch_response__free_unpacked(r, NULL);
        wait_poll(k);
        scenario_kick(k);
}

static void lw_done(struct kdev_rpc_client_call *call, int status, const char *message, void *ud)
{
        (void)call;
        struct endpoint *ep = ud;
        struct kubelet *k = ep->k;
        ep->lw = NULL;
        if (ep->current) {
                char name[32];
                PEER_LOG(k, KDEV_LOG_WARN, "ListAndWatch ended unexpectedly for device plugin",
                         "resource", ep->resource, "code",
                         kdev_rpc_code_name(status, name, sizeof(name)), "message", message);
                kdev_dm_disconnect(k->dm, ep->resource);
                endpoint_retire(ep);
                scenario_kick(k);
        } else if (!k->stopping) {
                uv_timer_start(&k->reaper, on_reaper, 0, 0);
        }
}

/* ------------------------------------------------------------------------ */
/* Register                                                                 */
/* ------------------------------------------------------------------------ */

static void reg_closed(uv_handle_t *h)
{
        struct reg *r = h->data;
        free(r->resource);
        free(r->socket);
        free(r->path);
        free(r);
}

void reg_finish(struct reg *r)
{
        struct kubelet *k = r->k;
        for (struct reg **pp = &k->regs; *pp; pp = &(*pp)->next) {
                if (*pp == r) {
                        *pp = r->next;
                        break;
                }
        }
        r->closing = true;
        uv_timer_stop(&r->timer);
        uv_close((uv_handle_t *)&r->timer, reg_closed);
}

static void reg_fail(struct reg *r, const char *msg)
{
        PEER_LOG(r->k, KDEV_LOG_ERROR, "registration failed", "resource", r->resource, "endpoint",
                 r->socket, "error", msg);
        if (r->call)
                kdev_rpc_call_finish(r->call, KDEV_RPC_UNKNOWN, msg);
        r->call = NULL;
        reg_finish(r);
}

static void reg_on_cancel(struct kdev_rpc_call *call, void *ud)
{
        (void)call;
        struct reg *r = ud;
        r->call = NULL; /* kubelet carries on with the plugin all the same */
}

static void options_message(struct kdev_rpc_client_call *call, const uint8_t *msg, size_t len,
                            void *ud);


static void reg_dial(uv_timer_t *t)
{
        struct reg *r = t->data;
        struct kubelet *k = r->k;
        int e = 0;
        enum kdev_cli_sock_state st = kdev_cli_probe_socket(r->path, &e);
        if (st != KDEV_CLI_SOCK_LIVE) {
                r->last_errno = e;
                if (uv_now(k->loop) >= r->deadline) {
                        PEER_LOG(k, KDEV_LOG_WARN, "cannot dial device plugin", "path", r->path,
                                 "error", strerror(r->last_errno));
                        /* grpc-go's blocking dial reports only the deadline. */
                        reg_fail(r, "failed to dial device plugin: context deadline exceeded");
                        return;
                }
                uv_timer_start(&r->timer, reg_dial, DIAL_RETRY_MS, 0);
                return;
        }
        r->ep = endpoint_new(k, r->resource, r->socket, r->path);
        if (!r->ep) {
                reg_fail(r, "failed to dial device plugin: out of memory");
                return;
        }
        struct options_state *os = calloc(1, sizeof(*os));
        if (!os) {
                endpoint_retire(r->ep);
                r->ep = NULL;
                reg_fail(r, "failed to get device plugin options: out of memory");
                return;
        }
        os->r = r;
        os->ep = r->ep;
        r->os = os;
        V1beta1__Empty empty = V1BETA1__EMPTY__INIT;
        uint8_t buf[8];
        size_t len = v1beta1__empty__pack(&empty, buf);
        struct kdev_err err = {0};
        /* kubelet sets no deadline on GetDevicePluginOptions. */
        r->opt_call = kdev_rpc_client_unary(r->ep->cl, KDEV_DP_GET_OPTIONS, buf, len, 0,
                                            options_message, options_done, os, &err);
        if (!r->opt_call) {
                free(os);
                r->os = NULL;
                endpoint_retire(r->ep);
                r->ep = NULL;
                char *m = xasprintf("failed to get device plugin options: %s", err.msg);
                reg_fail(r, m);
                free(m);
        }
}

static void options_message(struct kdev_rpc_client_call *call, const uint8_t *msg, size_t len,
                            void *ud)
{
        (void)call;
        struct options_state *os = ud;
        V1beta1__DevicePluginOptions *o = v1beta1__device_plugin_options__unpack(NULL, len, msg);
        if (!o) {
                os->bad = true;
                return;
        }
        os->got = true;
        os->pre_start = o->pre_start_required;
        os->preferred = o->get_preferred_allocation_available;
        v1beta1__device_plugin_options__free_unpacked(o, NULL);
}

void options_done(struct kdev_rpc_client_call *call, int status, const char *message, void *ud)
{
        (void)call;
        struct options_state *os = ud;
        struct reg *r = os->r;
        struct endpoint *ep = os->ep;
        if (!r) {
                /* The registration was dropped (stop or restart). */
                endpoint_retire(ep);
                free(os);
                return;
        }
        struct kubelet *k = r->k;
        r->opt_call = NULL;
        r->os = NULL;
        r->ep = NULL;
        if (status == KDEV_RPC_OK && os->bad) {
                status = KDEV_RPC_INTERNAL;
                message = "grpc: failed to unmarshal the received message";
        }
        if (status != KDEV_RPC_OK || k->stopping) {
                char *e = rpc_error_text(status, message);
                char *m = xasprintf("failed to get device plugin options: %s", e);
                endpoint_retire(ep);
                reg_fail(r, m);
                free(m);
                free(e);
                free(os);
                return;
        }
        /* PluginConnected: the new endpoint replaces the old one, whose
         * stream is cancelled first so its end cannot disconnect the new
         * one. */
        struct endpoint *old = current_endpoint(k, r->resource);
        if (old)
                endpoint_retire(old);
        if (!kdev_dm_connect(k->dm, r->resource, r->socket, os->pre_start, os->preferred)) {
                endpoint_retire(ep);
                reg_fail(r, "out of memory");
                free(os);
                return;
        }
        ep->current = true;
        PEER_LOG(k, KDEV_LOG_INFO, "registered device plugin", "resource", r->resource, "endpoint",
                 r->socket, "pre_start_required", os->pre_start ? "true" : "false",
                 "get_preferred_allocation_available", os->preferred ? "true" : "false");
        free(os);
        if (r->call) {
                V1beta1__Empty empty = V1BETA1__EMPTY__INIT;
                kdev_rpc_call_reply_pb(r->call, &empty.base);
                r->call = NULL;
        }
        reg_finish(r);

        uint8_t buf[8];
        V1beta1__Empty empty = V1BETA1__EMPTY__INIT;
        size_t len = v1beta1__empty__pack(&empty, buf);
        struct kdev_err err = {0};
        ep->lw = kdev_rpc_client_call(ep->cl, KDEV_DP_LIST_AND_WATCH, buf, len, 0, lw_message,
                                      lw_done, ep, &err);
        if (!ep->lw) {
                PEER_LOG(k, KDEV_LOG_WARN, "ListAndWatch ended unexpectedly for device plugin",
                         "resource", ep->resource, "error", err.msg);
                kdev_dm_disconnect(k->dm, ep->resource);
                endpoint_retire(ep);
        }
        scenario_kick(k);
}

void on_register(struct kdev_rpc_call *call, const uint8_t *req, size_t len, void *ud)
{
        struct kubelet *k = ud;
        V1beta1__RegisterRequest *rq = v1beta1__register_request__unpack(NULL, len, req);
        if (!rq) {
                kdev_rpc_call_finish(call, KDEV_RPC_INTERNAL,
                                     "grpc: error unmarshalling request: invalid RegisterRequest");
                return;
        }
        PEER_LOG(k, KDEV_LOG_INFO, "Register", "resource", rq->resource_name, "endpoint",
                 rq->endpoint, "version", rq->version);
        struct kdev_err err = {0};
        if (kdev_dm_check_register(rq->version, rq->resource_name, &err) < 0) {
                PEER_LOG(k, KDEV_LOG_ERROR, "registration rejected", "resource", rq->resource_name,
                         "error", err.msg);
                kdev_rpc_call_finish(call, KDEV_RPC_UNKNOWN, err.msg);
                v1beta1__register_request__free_unpacked(rq, NULL);
                return;
        }
        struct reg *r = calloc(1, sizeof(*r));
        if (!r) {
                kdev_rpc_call_finish(call, KDEV_RPC_INTERNAL, "out of memory");
                v1beta1__register_request__free_unpacked(rq, NULL);
                return;
        }
        r->k = k;
        r->call = call;
        r->resource = xstrdup(rq->resource_name);
        r->socket = xstrdup(rq->endpoint);
        /* filepath.Join(socketDir, endpoint) */
        r->path = rq->endpoint[0] == '/' ? xasprintf("%s%s", k->dir, rq->endpoint)
                                         : xasprintf("%s/%s", k->dir, rq->endpoint);
        r->deadline = uv_now(k->loop) + k->dial_timeout_ms;
        v1beta1__register_request__free_unpacked(rq, NULL);
        uv_timer_init(k->loop, &r->timer);
        r->timer.data = r;
        r->next = k->regs;
        k->regs = r;
        kdev_rpc_call_on_cancel(call, reg_on_cancel, r);
        reg_dial(&r->timer);
}
