/* kdev DRA plugin gRPC services: registration and DRAPlugin v1/v1beta1 (see
 * plugin.h). v1 requests and answers are handled with the v1beta1 messages:
 * the wire format is the same but for Device.share_id (v1 field 5), which
 * a v1 answer carries as that field's bytes (fill_devices; kubernetes/kubelet
 * pkg/apis/dra/v1/api.proto, v1beta1/api.proto). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "dra/health.h"
#include "dra/health_internal.h"
#include "dra/plugin.h"
#include "dra/plugin_internal.h"
#include "dra/v1beta1/api.pb-c.h"
#include "kube/kube.h"
#include "pluginregistration/v1/api.pb-c.h"
#include "rpc/rpc.h"

typedef K8s__Io__Kubelet__Pkg__Apis__Dra__V1beta1__Claim Claim;
typedef K8s__Io__Kubelet__Pkg__Apis__Dra__V1beta1__Device Device;
typedef K8s__Io__Kubelet__Pkg__Apis__Dra__V1beta1__NodePrepareResourcesRequest PrepReq;
typedef K8s__Io__Kubelet__Pkg__Apis__Dra__V1beta1__NodePrepareResourcesResponse PrepResp;
typedef K8s__Io__Kubelet__Pkg__Apis__Dra__V1beta1__NodePrepareResourcesResponse__ClaimsEntry
        PrepEntry;
typedef K8s__Io__Kubelet__Pkg__Apis__Dra__V1beta1__NodePrepareResourceResponse PrepOne;
typedef K8s__Io__Kubelet__Pkg__Apis__Dra__V1beta1__NodeUnprepareResourcesRequest UnprepReq;
typedef K8s__Io__Kubelet__Pkg__Apis__Dra__V1beta1__NodeUnprepareResourcesResponse UnprepResp;
typedef K8s__Io__Kubelet__Pkg__Apis__Dra__V1beta1__NodeUnprepareResourcesResponse__ClaimsEntry
        UnprepEntry;
typedef K8s__Io__Kubelet__Pkg__Apis__Dra__V1beta1__NodeUnprepareResourceResponse UnprepOne;

/* Short names for the generated ones. */
#define prep_req_unpack \
        k8s__io__kubelet__pkg__apis__dra__v1beta1__node_prepare_resources_request__unpack
#define prep_req_free \
        k8s__io__kubelet__pkg__apis__dra__v1beta1__node_prepare_resources_request__free_unpacked
#define unprep_req_unpack \
        k8s__io__kubelet__pkg__apis__dra__v1beta1__node_unprepare_resources_request__unpack
#define unprep_req_free \
        k8s__io__kubelet__pkg__apis__dra__v1beta1__node_unprepare_resources_request__free_unpacked
#define PREP_RESP_INIT \
        K8S__IO__KUBELET__PKG__APIS__DRA__V1BETA1__NODE_PREPARE_RESOURCES_RESPONSE__INIT
#define PREP_ENTRY_INIT \
        K8S__IO__KUBELET__PKG__APIS__DRA__V1BETA1__NODE_PREPARE_RESOURCES_RESPONSE__CLAIMS_ENTRY__INIT
#define PREP_ONE_INIT \
        K8S__IO__KUBELET__PKG__APIS__DRA__V1BETA1__NODE_PREPARE_RESOURCE_RESPONSE__INIT
#define UNPREP_RESP_INIT \
        K8S__IO__KUBELET__PKG__APIS__DRA__V1BETA1__NODE_UNPREPARE_RESOURCES_RESPONSE__INIT
#define UNPREP_ENTRY_INIT \
        K8S__IO__KUBELET__PKG__APIS__DRA__V1BETA1__NODE_UNPREPARE_RESOURCES_RESPONSE__CLAIMS_ENTRY__INIT
#define UNPREP_ONE_INIT \
        K8S__IO__KUBELET__PKG__APIS__DRA__V1BETA1__NODE_UNPREPARE_RESOURCE_RESPONSE__INIT
#define DEVICE_INIT K8S__IO__KUBELET__PKG__APIS__DRA__V1BETA1__DEVICE__INIT

/* Whether claims[i]'s UID already appeared before i (one answer per UID). */
static bool seen_before(Claim **claims, size_t i)
{
        for (size_t j = 0; j < i; j++)
                if (!strcmp(claims[j]->uid, claims[i]->uid))
                        return true;
        return false;
}

/* Tells the plugin's on_claim about claim |c| handled (plugin.h): |error|
 * is the answer's error field ("" or NULL: success). */
static void notify_claim(const struct kdev_dra_plugin *p, bool prepare, const Claim *c,
                         bool recorded, const json_t *devices, const char *error,
                         uint64_t start_ns)
{
        bool failed = error && *error;
        uint64_t now = uv_hrtime();
        struct kdev_dra_claim_event ev = {
                .prepare = prepare,
                .ns = c->namespace_ ? c->namespace_ : "",
                .name = c->name ? c->name : "",
                .uid = c->uid ? c->uid : "",
                .recorded = recorded,
                .devices = failed ? NULL : devices,
                .error = failed ? error : NULL,
                .seconds = start_ns && now >= start_ns ? (double)(now - start_ns) / 1e9 : -1,
        };

        if (p->o.on_claim)
                p->o.on_claim(p->o.on_claim_arg, &ev);
}

/* Per-claim storage of a prepare answer. */
struct prep_slot {
        PrepEntry entry;
        PrepOne one;
        Device *devs;
        Device **devp;
        char **reqs;  /* flattened pointer arrays, borrowed strings */
        char **cdis;
        ProtobufCMessageUnknownField *share_ids; /* v1: Device.share_id, per device */
        struct kdev_err err;
};

/* Fills the answer's devices of |s| from the device records |devices|. With
 * |v1| (the call came on the v1 service), a share's shareID is set as
 * Device.share_id (v1 field 5, which the v1beta1 message kdev encodes with
 * lacks): written as that field's bytes (an unknown field of the v1beta1
 * message, packed as-is by protobuf-c), the same bytes the v1 message gives. */
static void fill_devices(struct prep_slot *s, const json_t *devices, bool v1)
{
        size_t n = json_array_size(devices), nreq = 0, ncdi = 0, i, k;
        json_t *d, *v;

        json_array_foreach(devices, i, d) {
                nreq += json_array_size(json_object_get(d, "requestNames"));
                ncdi += json_array_size(json_object_get(d, "cdiDeviceIDs"));
        }
        s->devs = calloc(n ? n : 1, sizeof(*s->devs));
        s->devp = calloc(n ? n : 1, sizeof(*s->devp));
        s->reqs = calloc(nreq ? nreq : 1, sizeof(*s->reqs));
        s->cdis = calloc(ncdi ? ncdi : 1, sizeof(*s->cdis));
        s->share_ids = calloc(n ? n : 1, sizeof(*s->share_ids));
        if (!s->devs || !s->devp || !s->reqs || !s->cdis || !s->share_ids) {
                kdev_err_set(&s->err, ENOMEM, "out of memory");
                s->one.error = s->err.msg;
                return;
        }
        nreq = ncdi = 0;
        json_array_foreach(devices, i, d) {
                Device init = DEVICE_INIT;
                Device *dv = &s->devs[i];

                *dv = init;
                dv->pool_name = (char *)json_string_value(json_object_get(d, "pool"));
                dv->device_name = (char *)json_string_value(json_object_get(d, "device"));
                dv->request_names = &s->reqs[nreq];
                json_array_foreach(json_object_get(d, "requestNames"), k, v)
                        s->reqs[nreq++] = (char *)json_string_value(v);
                dv->n_request_names = (size_t)(&s->reqs[nreq] - dv->request_names);
                dv->cdi_device_ids = &s->cdis[ncdi];
                json_array_foreach(json_object_get(d, "cdiDeviceIDs"), k, v)
                        s->cdis[ncdi++] = (char *)json_string_value(v);
                dv->n_cdi_device_ids = (size_t)(&s->cdis[ncdi] - dv->cdi_device_ids);
                const char *sid = json_string_value(
                        json_object_get(json_object_get(d, "share"), "shareID"));
                if (v1 && sid) {
                        ProtobufCMessageUnknownField *u = &s->share_ids[i];

                        size_t len = strlen(sid), o = 0;
                        uint8_t *b = malloc(len + 10);

                        /* a length-delimited unknown field's data is its
                         * length varint and the bytes (protobuf-c keeps
                         * them so on unpack and packs them as-is) */
                        if (b) {
                                for (size_t q = len; ; q >>= 7) {
                                        b[o++] = (uint8_t)((q & 0x7f) | (q > 0x7f ? 0x80 : 0));
                                        if (q <= 0x7f)
                                                break;
                                }
                                memcpy(b + o, sid, len);
                                u->tag = 5;
                                u->wire_type = PROTOBUF_C_WIRE_TYPE_LENGTH_PREFIXED;
                                u->len = o + len;
                                u->data = b;
                                dv->base.n_unknown_fields = 1;
                                dv->base.unknown_fields = u;
                        }
                }
                s->devp[i] = dv;
        }
        s->one.devices = s->devp;
        s->one.n_devices = n;
}

/* One NodePrepareResources or NodeUnprepareResources call, queued until it
 * may change the node (plugin.h "Overlapping calls"): each distinct valid
 * claim of it holds a turn (ticket) in that claim's order, and the call runs
 * once it is first in line for every one of its claims and its claim reads
 * (Prepare) are done. */
struct dra_op {
        struct dra_op *next;
        uint64_t start_ns; /* uv_hrtime() at the call's arrival */
        struct kdev_dra_plugin *p;
        bool prepare;
        bool fetching;              /* claims being read on the thread pool */
        struct kdev_rpc_call *call; /* NULL once the call ended (cancelled) */
        PrepReq *prq;               /* Prepare */
        UnprepReq *urq;             /* Unprepare */
        Claim **claims;             /* borrowed from the request */
        size_t n_claims;
        uint64_t *ticket;           /* per claim: its turn; 0: none (repeated or bad UID) */
        bool *need;                 /* Prepare, per claim: read off the loop */
        struct kdev_dra_fetch *fetched;
        uv_work_t work;
        /* fired when the call ends early (kubelet cancelled it, its deadline
         * passed, the connection went away); carries the call's grpc-timeout
         * deadline: the claim reads stop at either (kube.h) */
        struct kdev_kube_cancel cancel;
};

static struct kdev_dra_turn *find_turn(struct kdev_dra_plugin *p, const char *uid)
{
        for (size_t i = 0; i < p->n_turns; i++)
                if (!strcmp(p->turns[i].uid, uid))
                        return &p->turns[i];
        return NULL;
}

/* Takes the next turn of claim |uid|: 1, 2, ... Returns 0 when out of
 * memory. */
static uint64_t take_turn(struct kdev_dra_plugin *p, const char *uid)
{
        struct kdev_dra_turn *t = find_turn(p, uid);

        if (!t) {
                if (p->n_turns == p->cap_turns) {
                        size_t ncap = p->cap_turns ? p->cap_turns * 2 : 8;
                        struct kdev_dra_turn *nv = realloc(p->turns, ncap * sizeof(*nv));

                        if (!nv)
                                return 0;
                        p->turns = nv;
                        p->cap_turns = ncap;
                }
                t = &p->turns[p->n_turns];
                t->uid = strdup(uid);
                if (!t->uid)
                        return 0;
                t->issued = t->done = 0;
                p->n_turns++;
        }
        return ++t->issued;
}

/* Whether turn |n| of |uid| is next in line (every earlier call done). */
static bool turn_next(struct kdev_dra_plugin *p, const char *uid, uint64_t n)
{
        const struct kdev_dra_turn *t = find_turn(p, uid);

        return !t || t->done + 1 == n;
}

static void turn_done(struct kdev_dra_plugin *p, const char *uid, uint64_t n)
{
        struct kdev_dra_turn *t = find_turn(p, uid);

        if (!t)
                return;
        t->done = n;
        if (t->done == t->issued) { /* no call of this claim left */
                free(t->uid);
                *t = p->turns[--p->n_turns];
        }
}

static void op_free(struct dra_op *op)
{
        if (op->fetched)
                for (size_t i = 0; i < op->n_claims; i++)
                        json_decref(op->fetched[i].claim);
        if (op->prq)
                prep_req_free(op->prq, NULL);
        if (op->urq)
                unprep_req_free(op->urq, NULL);
        free(op->ticket);
        free(op->need);
        free(op->fetched);
        free(op);
}

/* calloc's |n| (at least 1) answer slots of |slot_size| bytes and entry
 * pointers; false (nothing allocated) when out of memory. */
static bool alloc_answer(size_t n, size_t slot_size, void **slots, void ***entries)
{
        *slots = calloc(n ? n : 1, slot_size);
        *entries = calloc(n ? n : 1, sizeof(**entries));
        if (*slots && *entries)
                return true;
        free(*slots);
        free(*entries);
        return false;
}

/* Prepares every claim of |op| (claims read on the thread pool where
 * op->need says so) and answers |call|. */
static void answer_prepare(struct kdev_dra_plugin *p, struct kdev_rpc_call *call,
                           const struct dra_op *op)
{
        PrepResp resp = PREP_RESP_INIT;
        PrepReq *rq = op->prq;
        struct prep_slot *slots;
        PrepEntry **entries;
        struct kdev_dra_prepare_item *items;
        struct kdev_dra_fetch *unread;
        Claim **claims;
        size_t n = 0;

        if (!alloc_answer(rq->n_claims, sizeof(*slots), (void **)&slots, (void ***)&entries)) {
                kdev_rpc_call_finish(call, KDEV_RPC_RESOURCE_EXHAUSTED, "out of memory");
                return;
        }
        items = calloc(rq->n_claims ? rq->n_claims : 1, sizeof(*items));
        unread = calloc(rq->n_claims ? rq->n_claims : 1, sizeof(*unread));
        claims = calloc(rq->n_claims ? rq->n_claims : 1, sizeof(*claims));
        if (!items || !unread || !claims) {
                free(items);
                free(unread);
                free(claims);
                free(slots);
                free(entries);
                kdev_rpc_call_finish(call, KDEV_RPC_RESOURCE_EXHAUSTED, "out of memory");
                return;
        }
        for (size_t i = 0; i < rq->n_claims; i++) {
                Claim *c = rq->claims[i];
                struct kdev_dra_prepare_item *it = &items[n];
                const struct kdev_dra_fetch *f = op->need[i] ? &op->fetched[i] : NULL;

                if (seen_before(rq->claims, i))
                        continue;
                bool recorded = *c->uid && kdev_dra_cp_get(&p->cp, c->uid);

                if (!f && !recorded && kdev_dra_check_claim_uid(NULL, NULL, c->uid, NULL) == 0) {
                        /* recorded when the call came and no earlier call was
                         * pending, yet gone now (a direct kdev_dra_unprepare_claim):
                         * never a blocking read on the loop */
                        unread[n].rc = kdev_err_set(&unread[n].err, EAGAIN,
                                                    "claim %s/%s: unprepared while this call "
                                                    "waited; not read, retry",
                                                    c->namespace_, c->name);
                        f = &unread[n];
                }
                it->ns = c->namespace_;
                it->name = c->name;
                it->uid = c->uid;
                it->fetched = f;
                claims[n++] = c;
        }
        /* the whole call at once: one checkpoint write for its new claims */
        kdev_dra_prepare_many(p, items, n);
        for (size_t i = 0; i < n; i++) {
                struct prep_slot *s = &slots[i];
                struct kdev_dra_prepare_item *it = &items[i];
                PrepEntry ei = PREP_ENTRY_INIT;
                PrepOne oi = PREP_ONE_INIT;

                s->entry = ei;
                s->one = oi;
                s->entry.key = claims[i]->uid;
                s->entry.value = &s->one;
                s->err = it->err;
                if (it->rc < 0)
                        s->one.error = s->err.msg[0] ? s->err.msg : (char *)"prepare failed";
                else
                        fill_devices(s, it->devices,
                                     !strcmp(kdev_rpc_call_method(call), KDEV_DRA_V1_PREPARE));
                notify_claim(p, true, claims[i], it->recorded, it->devices, s->one.error,
                             op->start_ns);
                entries[i] = &s->entry;
        }
        free(items);
        free(unread);
        free(claims);
        resp.claims = entries;
        resp.n_claims = n;
        kdev_rpc_call_reply_pb(call, &resp.base);
        for (size_t i = 0; i < n; i++) {
                free(slots[i].devs);
                free(slots[i].devp);
                free(slots[i].reqs);
                free(slots[i].cdis);
                for (size_t k = 0; slots[i].share_ids && k < slots[i].one.n_devices; k++)
                        free(slots[i].share_ids[k].data);
                free(slots[i].share_ids);
        }
        free(slots);
        free(entries);
}

struct unprep_slot {
        UnprepEntry entry;
        UnprepOne one;
        struct kdev_err err;
};

/* Unprepares every claim of |rq| and answers |call| (NULL: the call ended;
 * the claims are unprepared all the same, plugin.h). */
static void answer_unprepare(struct kdev_dra_plugin *p, struct kdev_rpc_call *call, UnprepReq *rq,
                             uint64_t start_ns)
{
        UnprepResp resp = UNPREP_RESP_INIT;
        struct unprep_slot *slots;
        UnprepEntry **entries;
        size_t n = 0;

        if (!alloc_answer(rq->n_claims, sizeof(*slots), (void **)&slots, (void ***)&entries)) {
                if (call)
                        kdev_rpc_call_finish(call, KDEV_RPC_RESOURCE_EXHAUSTED, "out of memory");
                return;
        }
        for (size_t i = 0; i < rq->n_claims; i++) {
                struct unprep_slot *s = &slots[n];
                UnprepEntry ei = UNPREP_ENTRY_INIT;
                UnprepOne oi = UNPREP_ONE_INIT;

                if (seen_before(rq->claims, i))
                        continue;
                s->entry = ei;
                s->one = oi;
                s->entry.key = rq->claims[i]->uid;
                s->entry.value = &s->one;
                const json_t *rec = kdev_dra_cp_get(&p->cp, rq->claims[i]->uid);
                json_t *devs = json_incref(json_object_get(rec, "devices"));

                if (kdev_dra_check_claim_uid(rq->claims[i]->namespace_, rq->claims[i]->name,
                                             rq->claims[i]->uid, &s->err) < 0 ||
                    kdev_dra_unprepare_claim(p, rq->claims[i]->uid, &s->err) < 0)
                        s->one.error = s->err.msg[0] ? s->err.msg : (char *)"unprepare failed";
                notify_claim(p, false, rq->claims[i], rec != NULL, devs, s->one.error, start_ns);
                json_decref(devs);
                entries[n++] = &s->entry;
        }
        resp.claims = entries;
        resp.n_claims = n;
        if (call)
                kdev_rpc_call_reply_pb(call, &resp.base);
        free(slots);
        free(entries);
}

static void maybe_stopped(struct kdev_dra_plugin *p)
{
        if (p->stopping && p->closing == 0 && p->jobs == 0) {
                p->stopping = false;
                if (p->stop_done)
                        p->stop_done(p->stop_arg);
        }
}

static bool op_ready(struct kdev_dra_plugin *p, const struct dra_op *op)
{
        if (op->fetching)
                return false;
        for (size_t i = 0; i < op->n_claims; i++)
                if (op->ticket[i] && !turn_next(p, op->claims[i]->uid, op->ticket[i]))
                        return false;
        return true;
}

/* Runs the call: a Prepare kubelet gave up on is not prepared (nothing stays
 * reserved); an Unprepare is applied even then. */
static void op_run(struct kdev_dra_plugin *p, struct dra_op *op)
{
        if (op->call)
                kdev_rpc_call_on_cancel(op->call, NULL, NULL);
        if (op->prepare && op->call)
                answer_prepare(p, op->call, op);
        else if (!op->prepare)
                answer_unprepare(p, op->call, op->urq, op->start_ns);
        for (size_t i = 0; i < op->n_claims; i++)
                if (op->ticket[i])
                        turn_done(p, op->claims[i]->uid, op->ticket[i]);
}

/* Runs, in arrival order, every queued call that may run now. One pass
 * suffices: a call waits only for earlier ones. */
static void run_ready(struct kdev_dra_plugin *p)
{
        struct dra_op *prev = NULL, *op = p->ops_head;

        while (op) {
                struct dra_op *next = op->next;

                if (!op_ready(p, op)) {
                        prev = op;
                        op = next;
                        continue;
                }
                if (prev)
                        prev->next = next;
                else
                        p->ops_head = next;
                if (p->ops_tail == op)
                        p->ops_tail = prev;
                op_run(p, op);
                op_free(op);
                p->jobs--;
                op = next;
        }
        maybe_stopped(p);
}

static void op_cancel(struct kdev_rpc_call *call, void *arg)
{
        struct dra_op *op = arg;

        (void)call;
        op->call = NULL;
        kdev_kube_cancel_fire(&op->cancel);
}

/* Thread pool: read the claims (source calls serialised by source_lock,
 * taken per claim so that other calls' reads interleave). Once the call is
 * cancelled or past its deadline the remaining claims are not read and the
 * read in flight stops (the kube client honours op->cancel on this thread). */
static void op_fetch_work(uv_work_t *w)
{
        struct dra_op *op = w->data;
        const struct kdev_kube_cancel *prev = kdev_kube_cancel_scope(&op->cancel);

        for (size_t i = 0; i < op->n_claims; i++) {
                Claim *c = op->claims[i];

                if (!op->need[i])
                        continue;
                if (atomic_load(&op->cancel.cancelled)) {
                        op->fetched[i].rc = kdev_err_set(&op->fetched[i].err, ECANCELED,
                                                         "claim %s/%s: not read: the call "
                                                         "was cancelled",
                                                         c->namespace_, c->name);
                        continue;
                }
                if (kdev_kube_cancel_done(&op->cancel)) {
                        op->fetched[i].rc = kdev_err_set(&op->fetched[i].err, ETIMEDOUT,
                                                         "claim %s/%s: not read before the "
                                                         "call's deadline",
                                                         c->namespace_, c->name);
                        continue;
                }
                op->fetched[i].rc = kdev_dra_fetch_claim(op->p, c->namespace_, c->name,
                                                         &op->fetched[i].claim,
                                                         &op->fetched[i].err);
        }
        kdev_kube_cancel_scope(prev);
}

static void op_fetch_done(uv_work_t *w, int status)
{
        struct dra_op *op = w->data;

        (void)status;
        op->fetching = false;
        run_ready(op->p);
}

/* Queues the call of |op| (its request and claims set): takes its claims'
 * turns, starts the claim reads of a Prepare, and runs what may run. On
 * failure (out of memory) the call is answered and |op| freed. */
static void op_queue(struct kdev_dra_plugin *p, struct dra_op *op)
{
        size_t n = op->n_claims ? op->n_claims : 1, n_need = 0;

        op->p = p;
        op->ticket = calloc(n, sizeof(*op->ticket));
        op->need = calloc(n, sizeof(*op->need));
        op->fetched = calloc(n, sizeof(*op->fetched));
        if (!op->ticket || !op->need || !op->fetched) {
                kdev_rpc_call_finish(op->call, KDEV_RPC_RESOURCE_EXHAUSTED, "out of memory");
                op_free(op);
                return;
        }
        for (size_t i = 0; i < op->n_claims; i++) {
                const char *uid = op->claims[i]->uid;

                if (kdev_dra_check_claim_uid(NULL, NULL, uid, NULL) < 0 ||
                    seen_before(op->claims, i))
                        continue;
                op->ticket[i] = take_turn(p, uid);
                if (!op->ticket[i]) {
                        /* out of memory: give the turns back, answer */
                        for (size_t j = 0; j < i; j++)
                                if (op->ticket[j])
                                        turn_done(p, op->claims[j]->uid, op->ticket[j]);
                        kdev_rpc_call_finish(op->call, KDEV_RPC_RESOURCE_EXHAUSTED,
                                             "out of memory");
                        op_free(op);
                        return;
                }
                /* claims not prepared yet are read off the loop: the source
                 * may block (HTTP with retries) and GetInfo must keep
                 * answering meanwhile. A claim an earlier call may still
                 * unprepare is read too, in case. */
                op->need[i] = op->prepare && (!kdev_dra_cp_get(&p->cp, uid) ||
                                              !turn_next(p, uid, op->ticket[i]));
                n_need += op->need[i];
        }
        op->work.data = op;
        {
                /* grpc-timeout (loop clock) -> the kube clock, less a margin
                 * (10 %, 100 ms to 1 s) so that the claims' errors reach the
                 * caller before its deadline */
                uint64_t dl = kdev_rpc_call_deadline(op->call), now = uv_now(p->loop), at = 0;
                uint64_t left = dl > now ? dl - now : 0, margin = left / 10;

                margin = margin < 100 ? 100 : margin > 1000 ? 1000 : margin;
                if (dl)
                        at = kdev_kube_now_ms() + (left > margin ? left - margin : 0);
                kdev_kube_cancel_init(&op->cancel, at);
        }
        if (p->ops_tail)
                p->ops_tail->next = op;
        else
                p->ops_head = op;
        p->ops_tail = op;
        p->jobs++;
        kdev_rpc_call_on_cancel(op->call, op_cancel, op);
        if (n_need > 0) {
                op->fetching = true;
                if (uv_queue_work(p->loop, &op->work, op_fetch_work, op_fetch_done) < 0) {
                        /* no thread pool: read here, blocking */
                        op_fetch_work(&op->work);
                        op->fetching = false;
                }
        }
        run_ready(p);
}

/* Unpacks a NodePrepareResources (|prepare|) or NodeUnprepareResources
 * request and queues it as a call (op_queue). */
static void start_op(struct kdev_dra_plugin *p, struct kdev_rpc_call *call, bool prepare,
                     const uint8_t *req, size_t len)
{
        PrepReq *prq = prepare ? prep_req_unpack(NULL, len, req) : NULL;
        UnprepReq *urq = prepare ? NULL : unprep_req_unpack(NULL, len, req);
        struct dra_op *op;

        if (!prq && !urq) {
                kdev_rpc_call_finish(call, KDEV_RPC_INVALID_ARGUMENT,
                                     prepare ? "cannot parse NodePrepareResourcesRequest"
                                             : "cannot parse NodeUnprepareResourcesRequest");
                return;
        }
        op = calloc(1, sizeof(*op));
        if (!op) {
                if (prq)
                        prep_req_free(prq, NULL);
                if (urq)
                        unprep_req_free(urq, NULL);
                kdev_rpc_call_finish(call, KDEV_RPC_RESOURCE_EXHAUSTED, "out of memory");
                return;
        }
        op->prepare = prepare;
        op->start_ns = uv_hrtime();
        op->call = call;
        op->prq = prq;
        op->urq = urq;
        op->claims = prq ? prq->claims : urq->claims;
        op->n_claims = prq ? prq->n_claims : urq->n_claims;
        op_queue(p, op);
}

static void on_prepare(struct kdev_rpc_call *call, const uint8_t *req, size_t len, void *ud)
{
        start_op(ud, call, true, req, len);
}

static void on_unprepare(struct kdev_rpc_call *call, const uint8_t *req, size_t len, void *ud)
{
        start_op(ud, call, false, req, len);
}

static void on_get_info(struct kdev_rpc_call *call, const uint8_t *req, size_t len, void *ud)
{
        struct kdev_dra_plugin *p = ud;
        Pluginregistration__PluginInfo info = PLUGINREGISTRATION__PLUGIN_INFO__INIT;
        char *versions[] = {(char *)"v1.DRAPlugin", (char *)"v1beta1.DRAPlugin",
                            (char *)KDEV_DRA_HEALTH_SERVICE_V1ALPHA1};

        (void)req;
        (void)len;
        info.type = (char *)KDEV_DRA_PLUGIN_TYPE;
        info.name = p->driver;
        info.endpoint = p->dra_socket;
        info.supported_versions = versions;
        info.n_supported_versions = 3;
        kdev_rpc_call_reply_pb(call, &info.base);
}

static void on_notify(struct kdev_rpc_call *call, const uint8_t *req, size_t len, void *ud)
{
        struct kdev_dra_plugin *p = ud;
        Pluginregistration__RegistrationStatus *st =
                pluginregistration__registration_status__unpack(NULL, len, req);
        Pluginregistration__RegistrationStatusResponse r =
                PLUGINREGISTRATION__REGISTRATION_STATUS_RESPONSE__INIT;

        if (!st) {
                kdev_rpc_call_finish(call, KDEV_RPC_INVALID_ARGUMENT,
                                     "cannot parse RegistrationStatus");
                return;
        }
        if (p->o.on_status)
                p->o.on_status(p->o.on_status_arg, st->plugin_registered, st->error ? st->error : "");
        pluginregistration__registration_status__free_unpacked(st, NULL);
        kdev_rpc_call_reply_pb(call, &r.base);
}

static void server_closed(void *arg)
{
        struct kdev_dra_plugin *p = arg;

        if (p->closing > 0)
                p->closing--;
        maybe_stopped(p);
}

void kdev_dra_plugin_stop(struct kdev_dra_plugin *p, void (*done)(void *arg), void *arg)
{
        unsigned n = (p->dra_srv != NULL) + (p->reg_srv != NULL);

        if (p->reg_socket)
                unlink(p->reg_socket);
        if (p->dra_socket)
                unlink(p->dra_socket);
        p->stop_done = done;
        p->stop_arg = arg;
        p->closing = n;
        p->stopping = true;
        if (n == 0) {
                maybe_stopped(p); /* runs |done| now unless claim reads are in flight */
                return;
        }
        if (p->reg_srv)
                kdev_rpc_server_close(p->reg_srv, server_closed, p);
        if (p->dra_srv)
                kdev_rpc_server_close(p->dra_srv, server_closed, p);
        p->reg_srv = p->dra_srv = NULL;
}

/* A server for the DRA services (|reg| false) or the registration service. */
static struct kdev_rpc_server *make_server(struct kdev_dra_plugin *p, bool reg)
{
        static const char *const dra_paths[] = {KDEV_DRA_V1_PREPARE, KDEV_DRA_V1_UNPREPARE,
                                                KDEV_DRA_V1BETA1_PREPARE,
                                                KDEV_DRA_V1BETA1_UNPREPARE};
        struct kdev_rpc_server *srv = kdev_rpc_server_new(p->loop, NULL);
        int rc = 0;

        if (!srv)
                return NULL;
        if (reg) {
                rc = kdev_rpc_server_add_method(srv, KDEV_DRA_REG_GETINFO, false, on_get_info, p);
                if (rc == 0)
                        rc = kdev_rpc_server_add_method(srv, KDEV_DRA_REG_NOTIFY, false,
                                                        on_notify, p);
        } else {
                for (size_t i = 0; i < 4 && rc == 0; i++)
                        rc = kdev_rpc_server_add_method(srv, dra_paths[i], false,
                                                        (i % 2) ? on_unprepare : on_prepare, p);
                if (rc == 0)
                        rc = kdev_dra_health_add_methods(p, srv);
        }
        if (rc < 0) {
                kdev_rpc_server_close(srv, NULL, NULL);
                return NULL;
        }
        return srv;
}

int kdev_dra_plugin_start(struct kdev_dra_plugin *p, uv_loop_t *loop, const char *dra_socket,
                          const char *reg_socket, struct kdev_err *err)
{
        int rc;

        if (p->dra_srv || p->reg_srv)
                return kdev_err_set(err, EBUSY, "DRA plugin already serving");
        free(p->dra_socket);
        free(p->reg_socket);
        p->loop = loop;
        p->dra_socket = strdup(dra_socket);
        p->reg_socket = strdup(reg_socket);
        if (!p->dra_socket || !p->reg_socket) {
                rc = kdev_err_set(err, ENOMEM, "out of memory");
                goto fail;
        }
        p->dra_srv = make_server(p, false);
        p->reg_srv = make_server(p, true);
        if (!p->dra_srv || !p->reg_srv) {
                rc = kdev_err_set(err, ENOMEM, "out of memory");
                goto fail;
        }
        unlink(dra_socket);
        rc = kdev_rpc_server_listen_unix(p->dra_srv, dra_socket, err);
        if (rc < 0)
                goto fail;
        /* registration last: kubelet must find the DRA socket ready */
        unlink(reg_socket);
        rc = kdev_rpc_server_listen_unix(p->reg_srv, reg_socket, err);
        if (rc < 0)
                goto fail;
        return 0;
fail:
        kdev_dra_plugin_stop(p, NULL, NULL);
        return rc;
}

/* Re-creates the server of |*srv| on |path| when the socket file is gone. */
static int check_one(struct kdev_dra_plugin *p, struct kdev_rpc_server **srv, const char *path,
                     bool reg, struct kdev_err *err)
{
        struct kdev_rpc_server *fresh;
        struct stat st;
        int rc;

        rc = lstat(path, &st);
        if (rc == 0 && S_ISSOCK(st.st_mode))
                return 0;
        if (rc < 0 && errno != ENOENT)
                return kdev_err_set(err, errno, "stat %s: %s", path, strerror(errno));
        fresh = make_server(p, reg);
        if (!fresh)
                return kdev_err_set(err, ENOMEM, "out of memory");
        unlink(path); /* not a socket (or gone): ours to replace */
        rc = kdev_rpc_server_listen_unix(fresh, path, err);
        if (rc < 0) {
                kdev_rpc_server_close(fresh, NULL, NULL);
                return rc;
        }
        kdev_rpc_server_close(*srv, NULL, NULL);
        *srv = fresh;
        return 1;
}

int kdev_dra_plugin_check_sockets(struct kdev_dra_plugin *p, struct kdev_err *err)
{
        int a, b;

        if (!p->dra_srv || !p->reg_srv)
                return 0;
        a = check_one(p, &p->dra_srv, p->dra_socket, false, err);
        if (a < 0)
                return a;
        b = check_one(p, &p->reg_srv, p->reg_socket, true, err);
        if (b < 0)
                return b;
        return a + b;
}
