/* libFuzzer target: every request of the v1beta1 DevicePlugin service as
 * kdev-plugin serves it (plugin/service.c: pbcheck, protobuf-c decoding, then
 * the model's Allocate / GetPreferredAllocation / device lookup) against a
 * small resource. The first input byte picks the method, the rest is the
 * request message; it travels through kdev's own gRPC client and server on
 * one in-process loop, over a Unix socket in a private temporary directory.
 *
 * Oracle beyond "no crash, no sanitizer report, no leak": every call ends
 * OK or INVALID_ARGUMENT (never INTERNAL, UNKNOWN, ...), and an OK answer
 * decodes as the method's response type with one container response per
 * container request. For Allocate also: what the one-pass request decoder
 * (plugin/allocate_wire_internal.h) takes, the NUL check and protobuf-c take too,
 * with the same container requests and ID bytes. */
#include <dirent.h>
#include <signal.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <uv.h>

#include "deviceplugin/v1beta1/api.pb-c.h"
#include "model/model.h"
#include "plugin/allocate_wire_internal.h"
#include "plugin/arena_internal.h"
#include "plugin/pbcheck.h"
#include "plugin/service.h"
#include "rpc/rpc.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define SVC "/v1beta1.DevicePlugin/"

static const struct {
        const char *method;
        const ProtobufCMessageDescriptor *req, *resp;
} methods[] = {
        {SVC "GetDevicePluginOptions", &v1beta1__empty__descriptor,
         &v1beta1__device_plugin_options__descriptor},
        {SVC "ListAndWatch", &v1beta1__empty__descriptor,
         &v1beta1__list_and_watch_response__descriptor},
        {SVC "GetPreferredAllocation", &v1beta1__preferred_allocation_request__descriptor,
         &v1beta1__preferred_allocation_response__descriptor},
        {SVC "Allocate", &v1beta1__allocate_request__descriptor,
         &v1beta1__allocate_response__descriptor},
        {SVC "PreStartContainer", &v1beta1__pre_start_container_request__descriptor,
         &v1beta1__pre_start_container_response__descriptor},
};
#define N_METHODS (sizeof(methods) / sizeof(methods[0]))

static uv_loop_t loop;
static struct kdev_resource res;
static struct kdev_dp_service *svc;
static struct kdev_rpc_client *cl;
static char dir[64];
static char sock[96];

struct result {
        bool done;
        int status;
        char message[256];
        uint8_t *msg; /* first response message */
        size_t msg_len;
        size_t n_msgs;
};

static char *xstrdup(const char *s)
{
        char *p = strdup(s);
        if (!p)
                abort();
        return p;
}

/* gpu-0..gpu-3 on NUMA nodes 0, 0, 1, 1; gpu-4 unhealthy without a node.
 * Each has its own node and shares /dev/nvidiactl (gpu-1 asks "m" too, so
 * Allocate merges permissions). */
static void make_resource(void)
{
        res.name = xstrdup("example.com/gpu");
        res.n_devices = 5;
        res.devices = calloc(res.n_devices, sizeof(*res.devices));
        if (!res.devices)
                abort();
        for (size_t i = 0; i < res.n_devices; i++) {
                struct kdev_device *d = &res.devices[i];
                char buf[64];
                snprintf(buf, sizeof(buf), "gpu-%zu", i);
                d->id = xstrdup(buf);
                d->healthy = i != 4;
                d->numa_node = i == 4 ? -1 : (int)(i / 2);
                d->n_specs = 2;
                d->specs = calloc(2, sizeof(*d->specs));
                if (!d->specs)
                        abort();
                snprintf(buf, sizeof(buf), "/dev/nvidia%zu", i);
                d->specs[0].container_path = xstrdup(buf);
                d->specs[0].host_path = xstrdup(buf);
                d->specs[0].permissions = xstrdup("rw");
                d->specs[1].container_path = xstrdup("/dev/nvidiactl");
                d->specs[1].host_path = xstrdup("/dev/nvidiactl");
                d->specs[1].permissions = xstrdup(i == 1 ? "m" : "rw");
        }
}

static void cleanup(void)
{
        unlink(sock);
        rmdir(dir);
}

static void setup(void)
{
        signal(SIGPIPE, SIG_IGN);
        if (uv_loop_init(&loop) < 0)
                abort();
        make_resource();
        snprintf(dir, sizeof(dir), "/tmp/kdev-fuzz-XXXXXX");
        if (!mkdtemp(dir))
                abort();
        snprintf(sock, sizeof(sock), "%s/dp.sock", dir);
        atexit(cleanup);
        struct kdev_err err = {0};
        svc = kdev_dp_service_new(&loop, &res, NULL, NULL, &err);
        if (!svc || kdev_dp_service_listen(svc, sock, &err) < 0) {
                fprintf(stderr, "fuzz_plugin_request: %s\n", err.msg);
                abort();
        }
        cl = kdev_rpc_client_new(&loop, sock, NULL);
        if (!cl)
                abort();
}

static void on_message(struct kdev_rpc_client_call *call, const uint8_t *msg, size_t len,
                       void *user_data)
{
        struct result *r = user_data;
        (void)call;
        if (r->n_msgs++ == 0) {
                r->msg = malloc(len ? len : 1);
                if (!r->msg)
                        abort();
                memcpy(r->msg, msg, len);
                r->msg_len = len;
        }
}

static void on_done(struct kdev_rpc_client_call *call, int status, const char *message,
                    void *user_data)
{
        struct result *r = user_data;
        (void)call;
        r->done = true;
        r->status = status;
        snprintf(r->message, sizeof(r->message), "%s", message);
}

/* Container requests in |req|, packed as |desc| (0 for other types). */
static size_t container_requests(const ProtobufCMessageDescriptor *desc, const uint8_t *req,
                                 size_t len)
{
        size_t n = 0;
        ProtobufCMessage *m = protobuf_c_message_unpack(desc, NULL, len, req);
        if (!m)
                abort(); /* the server accepted it */
        if (desc == &v1beta1__allocate_request__descriptor)
                n = ((V1beta1__AllocateRequest *)m)->n_container_requests;
        else if (desc == &v1beta1__preferred_allocation_request__descriptor)
                n = ((V1beta1__PreferredAllocationRequest *)m)->n_container_requests;
        protobuf_c_message_free_unpacked(m, NULL);
        return n;
}

static size_t container_responses(const ProtobufCMessageDescriptor *desc, const uint8_t *msg,
                                  size_t len)
{
        size_t n = 0;
        ProtobufCMessage *m = protobuf_c_message_unpack(desc, NULL, len, msg);
        if (!m) {
                fprintf(stderr, "OK answer is not a %s\n", desc->name);
                abort();
        }
        if (desc == &v1beta1__allocate_response__descriptor)
                n = ((V1beta1__AllocateResponse *)m)->n_container_responses;
        else if (desc == &v1beta1__preferred_allocation_response__descriptor)
                n = ((V1beta1__PreferredAllocationResponse *)m)->n_container_responses;
        protobuf_c_message_free_unpacked(m, NULL);
        return n;
}

static size_t ncalls; /* calls made, for messages */

static int open_fds(void)
{
        int n = 0;
        DIR *d = opendir("/proc/self/fd");
        if (!d)
                abort();
        while (readdir(d))
                n++;
        closedir(d);
        return n - 3; /* ".", ".." and the directory's own descriptor */
}

/* Makes one call of method |which| with request |req| and waits for its end;
 * a ListAndWatch stream is cancelled once its first message arrived. */
static void run_call(size_t which, const uint8_t *req, size_t len, struct result *r)
{
        struct kdev_err err = {0};
        ncalls++;
        struct kdev_rpc_client_call *call =
                kdev_rpc_client_call(cl, methods[which].method, req, len, 0, on_message, on_done,
                                     r, &err);
        if (!call) {
                fprintf(stderr, "client call: %s\n", err.msg);
                abort();
        }
        bool cancelled = false;
        while (!r->done) {
                uv_run(&loop, UV_RUN_ONCE);
                /* ListAndWatch never ends by itself: drop it after the list */
                if (!r->done && r->n_msgs > 0 && !cancelled) {
                        cancelled = true;
                        kdev_rpc_client_call_cancel(call);
                }
        }
}

/* The one-pass decoder against the NUL check and protobuf-c. */
static void check_allocate_decoder(const uint8_t *req, size_t len)
{
        struct kdev_arena a;
        kdev_arena_init(&a, NULL, 0);
        struct kdev_alloc_request r;
        int rc = kdev_alloc_request_decode(req, len, &a, &r);
        if (rc < 0)
                abort();
        if (rc == 0) {
                struct kdev_err err = {0};
                if (kdev_pb_check_strings(&v1beta1__allocate_request__descriptor, req, len,
                                          &err) < 0) {
                        fprintf(stderr, "decoder took a request the NUL check rejects\n");
                        abort();
                }
                V1beta1__AllocateRequest *m = v1beta1__allocate_request__unpack(NULL, len, req);
                if (!m || m->n_container_requests != r.n_containers) {
                        fprintf(stderr, "decoder and protobuf-c disagree\n");
                        abort();
                }
                for (size_t i = 0; i < r.n_containers; i++) {
                        V1beta1__ContainerAllocateRequest *c = m->container_requests[i];
                        if (c->n_devices_ids != r.containers[i].n_ids)
                                abort();
                        for (size_t j = 0; j < c->n_devices_ids; j++)
                                if (strcmp(c->devices_ids[j], r.containers[i].ids[j]) != 0)
                                        abort();
                }
                v1beta1__allocate_request__free_unpacked(m, NULL);
        }
        kdev_arena_release(&a);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
        if (!svc)
                setup();
        if (size < 1)
                return 0;
        size_t which = data[0] % N_METHODS;
        const uint8_t *req = data + 1;
        size_t len = size - 1;
        if (which == 3)
                check_allocate_decoder(req, len);
        struct result r = {0};
        run_call(which, req, len, &r);
        if (r.status == KDEV_RPC_UNAVAILABLE) {
                /* nghttp2's rapid-reset guard (CVE-2023-44487: a burst of 1000
                 * RST_STREAMs, then 33/s) ends a connection on which the
                 * client cancelled that many ListAndWatch streams; kdev's
                 * client must then dial again for the next call. */
                free(r.msg);
                memset(&r, 0, sizeof(r));
                run_call(which, req, len, &r);
        }
        bool stream = which == 1;
        if (!(r.status == KDEV_RPC_OK || r.status == KDEV_RPC_INVALID_ARGUMENT ||
              (stream && r.status == KDEV_RPC_CANCELLED))) {
                fprintf(stderr, "call %zu: %s ended %s: %s\n", ncalls,
                        methods[which].method, kdev_rpc_status_name(r.status), r.message);
                abort();
        }
        if (r.n_msgs > 0) {
                size_t got = container_responses(methods[which].resp, r.msg, r.msg_len);
                size_t want = container_requests(methods[which].req, req, len);
                if (got != want) {
                        fprintf(stderr, "%s: %zu container responses for %zu requests\n",
                                methods[which].method, got, want);
                        abort();
                }
        } else if (r.status != KDEV_RPC_INVALID_ARGUMENT) {
                fprintf(stderr, "%s ended %s without an answer\n", methods[which].method,
                        kdev_rpc_status_name(r.status));
                abort();
        }
        free(r.msg);
        /* connections the server or client dropped must not pile up */
        if (ncalls % 4096 == 0 && open_fds() > 64) {
                fprintf(stderr, "%d file descriptors open after %zu calls\n", open_fds(), ncalls);
                abort();
        }
        return 0;
}
