/* The v1beta1 DevicePlugin service for one resource. See service.h. */
#include "plugin/service.h"

#include <errno.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/model.h"
#include "plugin/allocate.h"
#include "plugin/allocate_wire_internal.h"
#include "plugin/arena_internal.h"
#include "plugin/pbcheck.h"
#include "plugin/runtime.h"
#include "rpc/rpc.h"

#define SERVICE "/v1beta1.DevicePlugin/"

struct stream {
        struct kdev_rpc_call *call;
        struct kdev_dp_service *svc;
        struct stream *next;
        bool kubelet;   /* kubelet's stream: its end means kubelet dropped us */
        unsigned epoch; /* the registration it was opened for */
};

struct kdev_dp_service {
        struct kdev_rpc_server *srv;
        struct kdev_resource *res;
        const struct kdev_dp_hooks *hooks; /* NULL = none */
        void (*on_stream_end)(void *arg, bool current);
        void *arg;
        struct stream *streams;
        size_t n_streams;
        bool expect_kubelet;   /* a registration is under way */
        unsigned epoch;        /* registrations announced so far */
        uint64_t kubelet_conn; /* connection that called GetDevicePluginOptions, 0 = none yet */
        uint8_t *last; /* last ListAndWatchResponse sent, packed */
        size_t last_len;
        bool closing;
        void (*done)(void *arg);
        void *done_arg;
};

/* Seconds since |start| (uv_hrtime() nanoseconds). */
static double seconds_since(uint64_t start)
{
        return (double)(uv_hrtime() - start) / 1e9;
}

static int status_for(const struct kdev_err *err)
{
        switch (err->code) {
        case EINVAL:
                return KDEV_RPC_INVALID_ARGUMENT;
        case ENOENT:
                return KDEV_RPC_NOT_FOUND;
        case ENOMEM:
                return KDEV_RPC_RESOURCE_EXHAUSTED;
        default:
                return KDEV_RPC_INTERNAL;
        }
}

void kdev_dp_fill_options(V1beta1__DevicePluginOptions *opts)
{
        opts->pre_start_required = false;
        opts->get_preferred_allocation_available = true;
}

/* Rejects a request that protobuf-c would accept but misread (a NUL byte
 * inside a string) or cannot decode at all: finishes |call| with
 * INVALID_ARGUMENT and returns NULL. Otherwise returns the unpacked message,
 * which the caller frees with protobuf_c_message_free_unpacked() (|alloc|
 * NULL: protobuf-c's malloc) or by releasing the arena |alloc| belongs to. */
static ProtobufCMessage *decode_with(struct kdev_rpc_call *call,
                                     const ProtobufCMessageDescriptor *desc, const uint8_t *req,
                                     size_t len, ProtobufCAllocator *alloc)
{
        struct kdev_err err = {0};
        if (kdev_pb_check_strings(desc, req, len, &err) < 0) {
                kdev_rpc_call_finish(call, KDEV_RPC_INVALID_ARGUMENT, err.msg);
                return NULL;
        }
        ProtobufCMessage *m = protobuf_c_message_unpack(desc, alloc, len, req);
        if (!m) {
                char msg[160];
                snprintf(msg, sizeof(msg), "malformed %s", desc->short_name);
                kdev_rpc_call_finish(call, KDEV_RPC_INVALID_ARGUMENT, msg);
        }
        return m;
}

static ProtobufCMessage *decode(struct kdev_rpc_call *call, const ProtobufCMessageDescriptor *desc,
                                const uint8_t *req, size_t len)
{
        return decode_with(call, desc, req, len, NULL);
}

/* ---- ListAndWatch -------------------------------------------------------- */

/* Packs the full device list of |res| into a malloc'ed buffer. */
static uint8_t *pack_device_list(const struct kdev_resource *res, size_t *len)
{
        size_t n = res->n_devices;
        V1beta1__Device *devs = calloc(n ? n : 1, sizeof(*devs));
        V1beta1__Device **ptrs = calloc(n ? n : 1, sizeof(*ptrs));
        V1beta1__TopologyInfo *topo = calloc(n ? n : 1, sizeof(*topo));
        V1beta1__NUMANode *nodes = calloc(n ? n : 1, sizeof(*nodes));
        V1beta1__NUMANode **node_ptrs = calloc(n ? n : 1, sizeof(*node_ptrs));
        uint8_t *buf = NULL;
        if (!devs || !ptrs || !topo || !nodes || !node_ptrs)
                goto out;
        for (size_t i = 0; i < n; i++) {
                const struct kdev_device *d = &res->devices[i];
                v1beta1__device__init(&devs[i]);
                devs[i].id = d->id;
                devs[i].health = d->healthy ? "Healthy" : "Unhealthy";
                if (d->numa_node >= 0) {
                        v1beta1__topology_info__init(&topo[i]);
                        v1beta1__numanode__init(&nodes[i]);
                        nodes[i].id = d->numa_node;
                        node_ptrs[i] = &nodes[i];
                        topo[i].n_nodes = 1;
                        topo[i].nodes = &node_ptrs[i];
                        devs[i].topology = &topo[i];
                }
                ptrs[i] = &devs[i];
        }
        V1beta1__ListAndWatchResponse msg = V1BETA1__LIST_AND_WATCH_RESPONSE__INIT;
        msg.n_devices = n;
        msg.devices = ptrs;
        *len = v1beta1__list_and_watch_response__get_packed_size(&msg);
        buf = malloc(*len ? *len : 1);
        if (buf)
                v1beta1__list_and_watch_response__pack(&msg, buf);
out:
        free(devs);
        free(ptrs);
        free(topo);
        free(nodes);
        free(node_ptrs);
        return buf;
}

size_t kdev_dp_list_and_watch_size(const struct kdev_resource *res)
{
        size_t len = 0;
        uint8_t *buf = pack_device_list(res, &len);
        free(buf);
        return len;
}

static void on_stream_cancel(struct kdev_rpc_call *call, void *user_data)
{
        struct stream *st = user_data;
        struct kdev_dp_service *svc = st->svc;
        (void)call;
        for (struct stream **pp = &svc->streams; *pp; pp = &(*pp)->next) {
                if (*pp == st) {
                        *pp = st->next;
                        break;
                }
        }
        svc->n_streams--;
        bool kubelet = st->kubelet;
        bool current = st->epoch == svc->epoch;
        free(st);
        if (kubelet && !svc->closing && svc->on_stream_end)
                svc->on_stream_end(svc->arg, current);
}

static void handle_list_and_watch(struct kdev_rpc_call *call, const uint8_t *req, size_t len,
                                  void *user_data)
{
        struct kdev_dp_service *svc = user_data;
        ProtobufCMessage *empty = decode(call, &v1beta1__empty__descriptor, req, len);
        if (!empty)
                return;
        protobuf_c_message_free_unpacked(empty, NULL);
        struct stream *st = calloc(1, sizeof(*st));
        if (!st) {
                kdev_rpc_call_finish(call, KDEV_RPC_RESOURCE_EXHAUSTED, "out of memory");
                return;
        }
        if (!svc->last) {
                svc->last = pack_device_list(svc->res, &svc->last_len);
                if (!svc->last) {
                        free(st);
                        kdev_rpc_call_finish(call, KDEV_RPC_RESOURCE_EXHAUSTED, "out of memory");
                        return;
                }
        }
        st->call = call;
        st->svc = svc;
        uint64_t conn = kdev_rpc_call_connection(call);
        if (svc->expect_kubelet && svc->kubelet_conn != 0 && svc->kubelet_conn == conn) {
                for (struct stream *o = svc->streams; o; o = o->next)
                        o->kubelet = false;
                st->kubelet = true;
                st->epoch = svc->epoch;
                svc->expect_kubelet = false;
                /* kubelet's connection keeps a share of the request budget
                 * that other local clients cannot take */
                kdev_rpc_server_set_priority_connection(svc->srv, conn);
        }
        st->next = svc->streams;
        svc->streams = st;
        svc->n_streams++;
        kdev_rpc_call_on_cancel(call, on_stream_cancel, st);
        kdev_rpc_call_send(call, svc->last, svc->last_len);
}

void kdev_dp_service_notify(struct kdev_dp_service *svc)
{
        size_t len = 0;
        uint8_t *buf = pack_device_list(svc->res, &len);
        if (!buf)
                return;
        if (svc->last && len == svc->last_len && memcmp(buf, svc->last, len) == 0) {
                free(buf);
                return; /* unchanged: ListAndWatch sends only on change */
        }
        free(svc->last);
        svc->last = buf;
        svc->last_len = len;
        struct stream *next;
        for (struct stream *st = svc->streams; st; st = next) {
                next = st->next; /* a send that loses the connection frees |st| */
                kdev_rpc_call_send(st->call, buf, len);
        }
}

size_t kdev_dp_service_streams(const struct kdev_dp_service *svc)
{
        return svc->n_streams;
}

/* ---- unary methods ------------------------------------------------------- */

void kdev_dp_service_set_hooks(struct kdev_dp_service *svc, const struct kdev_dp_hooks *hooks)
{
        svc->hooks = hooks;
}

void kdev_dp_service_expect_kubelet(struct kdev_dp_service *svc)
{
        svc->expect_kubelet = true;
        svc->kubelet_conn = 0;
        svc->epoch++;
}

static void handle_options(struct kdev_rpc_call *call, const uint8_t *req, size_t len,
                           void *user_data)
{
        struct kdev_dp_service *svc = user_data;
        ProtobufCMessage *empty = decode(call, &v1beta1__empty__descriptor, req, len);
        if (!empty)
                return;
        protobuf_c_message_free_unpacked(empty, NULL);
        if (svc->expect_kubelet)
                svc->kubelet_conn = kdev_rpc_call_connection(call);
        V1beta1__DevicePluginOptions opts = V1BETA1__DEVICE_PLUGIN_OPTIONS__INIT;
        kdev_dp_fill_options(&opts);
        kdev_rpc_call_reply_pb(call, &opts.base);
}

/* The AllocateRequest |req| (|len| bytes) as |out|, in |arena|: the plain
 * encoding by kdev_alloc_request_decode, anything else the generic way
 * (decode_with: the NUL check, then protobuf-c), which also gives the
 * errors. Returns 0, or -1 when |call| was finished with the error. */
static int decode_allocate(struct kdev_rpc_call *call, const uint8_t *req, size_t len,
                           struct kdev_arena *arena, struct kdev_alloc_request *out)
{
        int rc = kdev_alloc_request_decode(req, len, arena, out);
        if (rc == 0)
                return 0;
        if (rc < 0) {
                kdev_rpc_call_finish(call, KDEV_RPC_RESOURCE_EXHAUSTED, "out of memory");
                return -1;
        }
        V1beta1__AllocateRequest *ar = (V1beta1__AllocateRequest *)decode_with(
                call, &v1beta1__allocate_request__descriptor, req, len, &arena->pb);
        if (!ar)
                return -1;
        size_t n = ar->n_container_requests;
        out->n_containers = n;
        out->containers = kdev_arena_alloc(arena, (n ? n : 1) * sizeof(*out->containers));
        if (!out->containers) {
                kdev_rpc_call_finish(call, KDEV_RPC_RESOURCE_EXHAUSTED, "out of memory");
                return -1;
        }
        for (size_t i = 0; i < n; i++) {
                out->containers[i].ids =
                        (const char *const *)ar->container_requests[i]->devices_ids;
                out->containers[i].n_ids = ar->container_requests[i]->n_devices_ids;
        }
        return 0;
}

static void *edits_arena_alloc(void *data, size_t size)
{
        return kdev_arena_alloc(data, size);
}

static void handle_allocate(struct kdev_rpc_call *call, const uint8_t *req, size_t len,
                            void *user_data)
{
        struct kdev_dp_service *svc = user_data;
        uint64_t start = svc->hooks ? uv_hrtime() : 0; /* no clock read without hooks */
        /* The request, the container edits (their allocator: nothing of
         * them is freed one by one) and the answer live in one per-request
         * arena (on the stack up to 16 KiB: a request of ~150 IDs), freed at
         * once at the end; the request's ID strings are the arena's for the
         * call's duration. */
        _Alignas(max_align_t) char stack[16384];
        struct kdev_arena arena;
        kdev_arena_init(&arena, stack, sizeof(stack));
        const struct kdev_edits_allocator edits_alloc = {edits_arena_alloc, &arena};
        struct kdev_alloc_request ar;
        if (decode_allocate(call, req, len, &arena, &ar) < 0) {
                kdev_arena_release(&arena);
                if (svc->hooks && svc->hooks->allocate)
                        svc->hooks->allocate(svc->hooks->arg, svc->res->name, 0, 1,
                                             seconds_since(start));
                return;
        }
        /* each container request's edits (kdev_resource_edits: the checks
         * and errors of kdev_plugin_allocate), then the answer packed
         * straight from them (allocate_wire_internal.h: protobuf-c's bytes) */
        size_t n = ar.n_containers;
        struct kdev_container_edits *eds = kdev_arena_alloc(&arena, (n ? n : 1) * sizeof(*eds));
        size_t *sizes = kdev_arena_alloc(&arena, (n ? n : 1) * sizeof(*sizes));
        struct kdev_err err = {0};
        int status = KDEV_RPC_OK;
        if (!eds || !sizes) {
                status = KDEV_RPC_RESOURCE_EXHAUSTED;
                kdev_err_set(&err, ENOMEM, "out of memory");
        }
        size_t total = 0;
        for (size_t i = 0; status == KDEV_RPC_OK && i < n; i++) {
                const struct kdev_alloc_container *cr = &ar.containers[i];
                memset(&eds[i], 0, sizeof(eds[i]));
                eds[i].allocator = &edits_alloc;
                if (kdev_resource_edits(svc->res, cr->ids, cr->n_ids, &eds[i], &err) < 0) {
                        status = status_for(&err);
                        break;
                }
                sizes[i] = kdev_alloc_edits_packed_size(&eds[i]);
                total += 1 + kdev_alloc_varint_size(sizes[i]) + sizes[i];
        }
        if (status == KDEV_RPC_OK) {
                uint8_t *buf = kdev_arena_alloc(&arena, total);
                if (buf) {
                        uint8_t *p = buf;
                        for (size_t i = 0; i < n; i++) {
                                *p++ = 0x0a; /* container_responses = 1, length-delimited */
                                p = kdev_alloc_put_varint(p, sizes[i]);
                                p = kdev_alloc_edits_pack(&eds[i], p);
                        }
                        kdev_rpc_call_reply(call, buf, total);
                } else {
                        status = KDEV_RPC_RESOURCE_EXHAUSTED;
                        kdev_err_set(&err, ENOMEM, "out of memory");
                }
        }
        if (status != KDEV_RPC_OK)
                kdev_rpc_call_finish(call, status, err.msg);
        if (svc->hooks && svc->hooks->allocate)
                svc->hooks->allocate(svc->hooks->arg, svc->res->name,
                                     status == KDEV_RPC_OK ? n : 0,
                                     status == KDEV_RPC_OK ? 0 : (n ? n : 1),
                                     seconds_since(start));
        kdev_arena_release(&arena); /* the request, eds and their contents, the answer */
}

static void handle_preferred(struct kdev_rpc_call *call, const uint8_t *req, size_t len,
                             void *user_data)
{
        struct kdev_dp_service *svc = user_data;
        uint64_t start = svc->hooks ? uv_hrtime() : 0; /* no clock read without hooks */
        V1beta1__PreferredAllocationRequest *pr = (V1beta1__PreferredAllocationRequest *)decode(
                call, &v1beta1__preferred_allocation_request__descriptor, req, len);
        if (!pr) {
                if (svc->hooks && svc->hooks->preferred)
                        svc->hooks->preferred(svc->hooks->arg, svc->res->name, false,
                                              seconds_since(start));
                return;
        }
        size_t n = pr->n_container_requests;
        V1beta1__ContainerPreferredAllocationResponse *crs = calloc(n ? n : 1, sizeof(*crs));
        V1beta1__ContainerPreferredAllocationResponse **ptrs = calloc(n ? n : 1, sizeof(*ptrs));
        struct kdev_err err = {0};
        int status = KDEV_RPC_OK;
        size_t done = 0;
        if (!crs || !ptrs) {
                status = KDEV_RPC_RESOURCE_EXHAUSTED;
                kdev_err_set(&err, ENOMEM, "out of memory");
        }
        for (; status == KDEV_RPC_OK && done < n; done++) {
                V1beta1__ContainerPreferredAllocationRequest *cr = pr->container_requests[done];
                v1beta1__container_preferred_allocation_response__init(&crs[done]);
                ptrs[done] = &crs[done];
                if (kdev_resource_preferred(svc->res, (const char *const *)cr->available_deviceids,
                                            cr->n_available_deviceids,
                                            (const char *const *)cr->must_include_deviceids,
                                            cr->n_must_include_deviceids, cr->allocation_size,
                                            &crs[done].deviceids, &crs[done].n_deviceids,
                                            &err) < 0) {
                        status = status_for(&err);
                        done++;
                        break;
                }
        }
        if (status == KDEV_RPC_OK) {
                V1beta1__PreferredAllocationResponse resp = V1BETA1__PREFERRED_ALLOCATION_RESPONSE__INIT;
                resp.n_container_responses = n;
                resp.container_responses = ptrs;
                kdev_rpc_call_reply_pb(call, &resp.base);
        } else {
                kdev_rpc_call_finish(call, status, err.msg);
        }
        if (svc->hooks && svc->hooks->preferred)
                svc->hooks->preferred(svc->hooks->arg, svc->res->name, status == KDEV_RPC_OK,
                                      seconds_since(start));
        for (size_t i = 0; i < done; i++)
                kdev_strv_free(crs[i].deviceids, crs[i].n_deviceids);
        free(crs);
        free(ptrs);
        v1beta1__preferred_allocation_request__free_unpacked(pr, NULL);
}

static void handle_prestart(struct kdev_rpc_call *call, const uint8_t *req, size_t len,
                            void *user_data)
{
        struct kdev_dp_service *svc = user_data;
        V1beta1__PreStartContainerRequest *pr = (V1beta1__PreStartContainerRequest *)decode(
                call, &v1beta1__pre_start_container_request__descriptor, req, len);
        if (!pr)
                return;
        for (size_t i = 0; i < pr->n_devices_ids; i++) {
                if (!kdev_resource_find(svc->res, pr->devices_ids[i])) {
                        char msg[256];
                        snprintf(msg, sizeof(msg), "unknown device \"%.80s\" for resource %.120s",
                                 pr->devices_ids[i], svc->res->name);
                        kdev_rpc_call_finish(call, KDEV_RPC_INVALID_ARGUMENT, msg);
                        v1beta1__pre_start_container_request__free_unpacked(pr, NULL);
                        return;
                }
        }
        v1beta1__pre_start_container_request__free_unpacked(pr, NULL);
        V1beta1__PreStartContainerResponse resp = V1BETA1__PRE_START_CONTAINER_RESPONSE__INIT;
        kdev_rpc_call_reply_pb(call, &resp.base);
}

/* ---- lifecycle ----------------------------------------------------------- */

struct kdev_dp_service *kdev_dp_service_new(uv_loop_t *loop, struct kdev_resource *res,
                                            void (*on_stream_end)(void *arg, bool current),
                                            void *arg, struct kdev_err *err)
{
        struct kdev_dp_service *svc = calloc(1, sizeof(*svc));
        if (!svc)
                goto oom;
        svc->res = res;
        svc->on_stream_end = on_stream_end;
        svc->arg = arg;
        svc->srv = kdev_rpc_server_new(loop, NULL);
        if (!svc->srv)
                goto oom;
        static const struct {
                const char *method;
                bool streaming;
                kdev_rpc_handler_fn fn;
        } methods[] = {
                {SERVICE "GetDevicePluginOptions", false, handle_options},
                {SERVICE "ListAndWatch", true, handle_list_and_watch},
                {SERVICE "GetPreferredAllocation", false, handle_preferred},
                {SERVICE "Allocate", false, handle_allocate},
                {SERVICE "PreStartContainer", false, handle_prestart},
        };
        for (size_t i = 0; i < sizeof(methods) / sizeof(methods[0]); i++) {
                if (kdev_rpc_server_add_method(svc->srv, methods[i].method, methods[i].streaming,
                                               methods[i].fn, svc) < 0)
                        goto oom;
        }
        return svc;
oom:
        if (svc) {
                kdev_rpc_server_close(svc->srv, NULL, NULL);
                free(svc);
        }
        kdev_err_set(err, ENOMEM, "out of memory");
        return NULL;
}

void kdev_dp_service_set_resource(struct kdev_dp_service *svc, struct kdev_resource *res)
{
        svc->res = res;
}

int kdev_dp_service_listen(struct kdev_dp_service *svc, const char *path, struct kdev_err *err)
{
        return kdev_rpc_server_listen_unix(svc->srv, path, err);
}

static void on_server_closed(void *arg)
{
        struct kdev_dp_service *svc = arg;
        void (*done)(void *) = svc->done;
        void *done_arg = svc->done_arg;
        free(svc->last);
        free(svc);
        if (done)
                done(done_arg);
}

void kdev_dp_service_close(struct kdev_dp_service *svc, void (*done)(void *arg), void *arg)
{
        svc->closing = true;
        svc->done = done;
        svc->done_arg = arg;
        kdev_rpc_server_close(svc->srv, on_server_closed, svc);
}
