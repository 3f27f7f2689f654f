/* The DRA resource health service of the plugin (dra/health.h). */
#include "dra/health.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "dra/health_internal.h"
#include "dra/plugin_internal.h"
#include "dra_health/v1alpha1/api.pb-c.h"
#include "rpc/rpc.h"

struct health_dev {
        char *device;
        enum kdev_dra_health_status health;
        char *message; /* "" none */
};

struct health_stream {
        struct health_stream *next;
        struct kdev_dra_health_state *hs;
        struct kdev_rpc_call *call;
};

struct kdev_dra_health_state {
        struct kdev_dra_plugin *p;
        struct health_dev *devs;
        size_t n_devs;
        struct health_stream *streams;
        size_t n_streams;
};

static void devs_free(struct health_dev *d, size_t n)
{
        for (size_t i = 0; i < n; i++) {
                free(d[i].device);
                free(d[i].message);
        }
        free(d);
}

const char *kdev_dra_health_status_name(int s, bool pod)
{
        switch (s) {
        case KDEV_DRA_HEALTH_HEALTHY: return pod ? "Healthy" : "HEALTHY";
        case KDEV_DRA_HEALTH_UNHEALTHY: return pod ? "Unhealthy" : "UNHEALTHY";
        default: return pod ? "Unknown" : "UNKNOWN";
        }
}

/* Sends the complete list to |st|. Returns 0 or a negative errno. */
static int send_list(struct kdev_dra_health_state *hs, struct health_stream *st)
{
        V1alpha1__NodeWatchResourcesResponse r = V1ALPHA1__NODE_WATCH_RESOURCES_RESPONSE__INIT;
        size_t n = hs->n_devs ? hs->n_devs : 1;
        V1alpha1__DeviceHealth *dh = calloc(n, sizeof(*dh));
        V1alpha1__DeviceIdentifier *id = calloc(n, sizeof(*id));
        V1alpha1__DeviceHealth **dp = calloc(n, sizeof(*dp));
        char **msgs = calloc(n, sizeof(*msgs));
        int64_t now = (int64_t)time(NULL);
        int rc = -ENOMEM;

        if (!dh || !id || !dp || !msgs)
                goto out;
        for (size_t i = 0; i < hs->n_devs; i++) {
                V1alpha1__DeviceHealth hi = V1ALPHA1__DEVICE_HEALTH__INIT;
                V1alpha1__DeviceIdentifier ii = V1ALPHA1__DEVICE_IDENTIFIER__INIT;
                const struct health_dev *d = &hs->devs[i];

                id[i] = ii;
                id[i].pool_name = hs->p->pool;
                id[i].device_name = d->device;
                dh[i] = hi;
                dh[i].device = &id[i];
                dh[i].health = (V1alpha1__HealthStatus)d->health;
                dh[i].last_updated_time = now;
                dh[i].health_check_timeout_seconds = KDEV_DRA_HEALTH_TIMEOUT_S;
                if (strlen(d->message) > KDEV_DRA_HEALTH_MESSAGE_MAX) {
                        msgs[i] = strndup(d->message, KDEV_DRA_HEALTH_MESSAGE_MAX);
                        if (!msgs[i])
                                goto out;
                        dh[i].message = msgs[i];
                } else {
                        dh[i].message = d->message;
                }
                dp[i] = &dh[i];
        }
        r.devices = dp;
        r.n_devices = hs->n_devs;
        rc = kdev_rpc_call_send_pb(st->call, &r.base);
out:
        for (size_t i = 0; msgs && i < hs->n_devs; i++)
                free(msgs[i]);
        free(msgs);
        free(dp);
        free(id);
        free(dh);
        return rc;
}

static int send_all(struct kdev_dra_health_state *hs)
{
        int sent = 0;

        for (struct health_stream *st = hs->streams; st; st = st->next)
                if (send_list(hs, st) == 0)
                        sent++;
        return sent;
}

static void unlink_stream(struct kdev_dra_health_state *hs, struct health_stream *st)
{
        for (struct health_stream **pp = &hs->streams; *pp; pp = &(*pp)->next) {
                if (*pp == st) {
                        *pp = st->next;
                        hs->n_streams--;
                        return;
                }
        }
}

static void on_stream_cancel(struct kdev_rpc_call *call, void *arg)
{
        struct health_stream *st = arg;

        (void)call;
        unlink_stream(st->hs, st);
        free(st);
}

static void on_watch(struct kdev_rpc_call *call, const uint8_t *req, size_t len, void *ud)
{
        struct kdev_dra_plugin *p = ud;
        struct kdev_dra_health_state *hs = p->health;
        V1alpha1__NodeWatchResourcesRequest *rq =
                v1alpha1__node_watch_resources_request__unpack(NULL, len, req);
        struct health_stream *st;

        if (!rq) {
                kdev_rpc_call_finish(call, KDEV_RPC_INVALID_ARGUMENT,
                                     "cannot parse NodeWatchResourcesRequest");
                return;
        }
        v1alpha1__node_watch_resources_request__free_unpacked(rq, NULL);
        st = calloc(1, sizeof(*st));
        if (!hs || !st) {
                free(st);
                kdev_rpc_call_finish(call, KDEV_RPC_RESOURCE_EXHAUSTED, "out of memory");
                return;
        }
        st->hs = hs;
        st->call = call;
        st->next = hs->streams;
        hs->streams = st;
        hs->n_streams++;
        kdev_rpc_call_on_cancel(call, on_stream_cancel, st);
        if (send_list(hs, st) < 0) {
                unlink_stream(hs, st);
                kdev_rpc_call_on_cancel(call, NULL, NULL);
                kdev_rpc_call_finish(call, KDEV_RPC_INTERNAL, "cannot send the device health");
                free(st);
        }
}

int kdev_dra_health_init(struct kdev_dra_plugin *p)
{
        if (p->health)
                return 0;
        p->health = calloc(1, sizeof(*p->health));
        if (!p->health)
                return -ENOMEM;
        p->health->p = p;
        return 0;
}

int kdev_dra_health_add_methods(struct kdev_dra_plugin *p, struct kdev_rpc_server *srv)
{
        int rc = kdev_dra_health_init(p);

        if (rc == 0)
                rc = kdev_rpc_server_add_method(srv, KDEV_DRA_HEALTH_V1ALPHA1_WATCH, true,
                                                on_watch, p);
        if (rc == 0)
                rc = kdev_rpc_server_add_method(srv, KDEV_DRA_HEALTH_V1_WATCH, true, on_watch,
                                                p);
        return rc;
}

void kdev_dra_health_free(struct kdev_dra_plugin *p)
{
        struct kdev_dra_health_state *hs = p->health;

        if (!hs)
                return;
        /* streams are cancelled (and freed) when the servers close; any left
         * here belong to no server any more */
        while (hs->streams) {
                struct health_stream *st = hs->streams;

                hs->streams = st->next;
                free(st);
        }
        devs_free(hs->devs, hs->n_devs);
        free(hs);
        p->health = NULL;
}

static bool same_list(const struct kdev_dra_health_state *hs,
                      const struct kdev_dra_device_health *devs, size_t n)
{
        if (n != hs->n_devs)
                return false;
        for (size_t i = 0; i < n; i++) {
                const char *m = devs[i].message ? devs[i].message : "";

                if (strcmp(hs->devs[i].device, devs[i].device) ||
                    hs->devs[i].health != devs[i].health || strcmp(hs->devs[i].message, m))
                        return false;
        }
        return true;
}

int kdev_dra_plugin_set_health(struct kdev_dra_plugin *p,
                               const struct kdev_dra_device_health *devs, size_t n,
                               struct kdev_err *err)
{
        struct health_dev *nd;

        for (size_t i = 0; i < n; i++) {
                if (!devs[i].device || !devs[i].device[0])
                        return kdev_err_set(err, EINVAL, "device health %zu: no device name", i);
                if ((int)devs[i].health < 0 || devs[i].health > KDEV_DRA_HEALTH_UNHEALTHY)
                        return kdev_err_set(err, EINVAL,
                                            "device health of %s: status %d is not 0..2",
                                            devs[i].device, (int)devs[i].health);
        }
        if (kdev_dra_health_init(p) < 0)
                return kdev_err_set(err, ENOMEM, "out of memory");
        if (same_list(p->health, devs, n))
                return 0;
        nd = calloc(n ? n : 1, sizeof(*nd));
        if (!nd)
                return kdev_err_set(err, ENOMEM, "out of memory");
        for (size_t i = 0; i < n; i++) {
                nd[i].device = strdup(devs[i].device);
                nd[i].health = devs[i].health;
                nd[i].message = strdup(devs[i].message ? devs[i].message : "");
                if (!nd[i].device || !nd[i].message) {
                        devs_free(nd, i + 1);
                        return kdev_err_set(err, ENOMEM, "out of memory");
                }
        }
        devs_free(p->health->devs, p->health->n_devs);
        p->health->devs = nd;
        p->health->n_devs = n;
        return send_all(p->health);
}

int kdev_dra_plugin_health_resend(struct kdev_dra_plugin *p)
{
        return p->health ? send_all(p->health) : 0;
}

size_t kdev_dra_plugin_health_streams(const struct kdev_dra_plugin *p)
{
        return p->health ? p->health->n_streams : 0;
}
