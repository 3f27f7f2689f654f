/* DRA plugin over gRPC: registration service (GetInfo fields, status
 * notification) and DRAPlugin v1 / v1beta1 on the DRA socket. The plugin's
 * loop runs in a thread; the test is the client (kdev_rpc_unary_sync). */
#include <dirent.h>
#include <errno.h>
#include <pthread.h>
#include <semaphore.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "dra/plugin.h"
#include "dra/plugin_internal.h"
#include "dra/v1/api.pb-c.h"
#include "dra/v1beta1/api.pb-c.h"
#include "nvml/discover.h"
#include "pluginregistration/v1/api.pb-c.h"
#include "rpc/rpc.h"
#include "tmptree.h"

#define UID1 "9d2e6f7a-1111-4c2e-9a43-aaaaaaaaaaaa"
#define UID2 "9d2e6f7a-2222-4c2e-9a43-bbbbbbbbbbbb"

struct fix {
        char root[256], data[300], cdi[300], dra_sock[300], reg_sock[300];
        struct kdev_gpu gpus[1];
        struct kdev_gpu_set set;
        struct kdev_nvidia_gpus recs; /* |set| as the NVIDIA backend's records */
        json_t *claim;
        struct kdev_dra_plugin *p;
        uv_loop_t loop;
        uv_async_t stop;
        pthread_t thread;
        bool stopped;
        uv_async_t check;
        sem_t checked;
        int check_rc;
        int (*probe)(struct fix *f); /* run on the loop thread by on_loop() */
        /* slow claim source */
        bool gate_on;
        sem_t gate, entered, stop_begun;
        int stop_done_calls;
        /* written on the loop thread, read after join */
        int n_status;
        bool last_registered;
        char last_error[256];
        char events[4096]; /* on_claim, one line per claim */
        unsigned source_calls; /* claim source reads (thread pool; read after stop) */
        json_t *more;          /* further claims the source has: name -> claim */
};

static int fake_source(void *arg, const char *ns, const char *name, json_t **claim,
                       struct kdev_err *err)
{
        struct fix *f = arg;

        f->source_calls++;
        if (f->gate_on) {
                sem_post(&f->entered);
                while (sem_wait(&f->gate) < 0 && errno == EINTR)
                        ;
        }
        if (!strcmp(ns, "ns") && json_object_get(f->more, name)) {
                *claim = json_deep_copy(json_object_get(f->more, name));
                return 0;
        }
        if (strcmp(ns, "ns") || strcmp(name, "c1"))
                return kdev_err_set(err, ENOENT, "GET %s/%s: 404 Not Found", ns, name);
        *claim = json_deep_copy(f->claim);
        return 0;
}

static void on_status(void *arg, bool registered, const char *error)
{
        struct fix *f = arg;

        f->n_status++;
        f->last_registered = registered;
        snprintf(f->last_error, sizeof(f->last_error), "%s", error);
}

/* "<prepare|unprepare> ns/name uid recorded=<0|1> devices=<d,...|-> cdi=<...|->
 * error=<text|->" */
static void on_claim(void *arg, const struct kdev_dra_claim_event *ev)
{
        struct fix *f = arg;
        char devs[512] = "", cdis[1024] = "";
        size_t i, k;
        json_t *d, *v;

        json_array_foreach(ev->devices, i, d) {
                snprintf(devs + strlen(devs), sizeof(devs) - strlen(devs), "%s%s", i ? "," : "",
                         json_string_value(json_object_get(d, "device")));
                json_array_foreach(json_object_get(d, "cdiDeviceIDs"), k, v)
                        snprintf(cdis + strlen(cdis), sizeof(cdis) - strlen(cdis), "%s%s",
                                 cdis[0] ? "," : "", json_string_value(v));
        }
        snprintf(f->events + strlen(f->events), sizeof(f->events) - strlen(f->events),
                 "%s %s/%s %s recorded=%d devices=%s cdi=%s error=%s\n",
                 ev->prepare ? "prepare" : "unprepare", ev->ns, ev->name, ev->uid, ev->recorded,
                 ev->devices ? devs : "-", ev->devices ? cdis : "-",
                 ev->error ? ev->error : "-");
}

/* "aside <path> <aside> rebuilt=<0|1>" into the events */
static void on_file_aside(void *arg, const char *path, const char *aside, bool rebuilt)
{
        struct fix *f = arg;

        snprintf(f->events + strlen(f->events), sizeof(f->events) - strlen(f->events),
                 "aside %s %s rebuilt=%d\n", path, aside, rebuilt);
}

static void stop_done(void *arg)
{
        struct fix *f = arg;

        f->stop_done_calls++;
}

static void stop_cb(uv_async_t *a)
{
        struct fix *f = a->data;

        kdev_dra_plugin_stop(f->p, stop_done, f);
        sem_post(&f->stop_begun);
        uv_close((uv_handle_t *)&f->stop, NULL);
        uv_close((uv_handle_t *)&f->check, NULL);
}

static void check_cb(uv_async_t *a)
{
        struct fix *f = a->data;

        f->check_rc = f->probe(f);
        sem_post(&f->checked);
}

/* Runs |fn| on the loop thread; its result. */
static int on_loop(struct fix *f, int (*fn)(struct fix *f))
{
        f->probe = fn;
        uv_async_send(&f->check);
        while (sem_wait(&f->checked) < 0 && errno == EINTR)
                ;
        return f->check_rc;
}

/* setup: the two sockets in directories of their own (plugin, registry) */
static bool g_socket_dirs;

static int probe_check_sockets(struct fix *f)
{
        return kdev_dra_plugin_check_sockets(f->p, NULL);
}

static int check_sockets(struct fix *f)
{
        return on_loop(f, probe_check_sockets);
}

static void *loop_thread(void *arg)
{
        struct fix *f = arg;

        uv_run(&f->loop, UV_RUN_DEFAULT);
        return NULL;
}

static int setup(void **state)
{
        struct fix *f = calloc(1, sizeof(*f));
        struct kdev_err err = {0};

        signal(SIGPIPE, SIG_IGN);
        strcpy(f->root, "/tmp/kdev-dra-svc-XXXXXX");
        assert_non_null(mkdtemp(f->root));
        snprintf(f->data, sizeof(f->data), "%s/data", f->root);
        snprintf(f->cdi, sizeof(f->cdi), "%s/cdi", f->root);
        if (g_socket_dirs) {
                /* kubelet's layout: <plugins>/<driver>/dra.sock and
                 * <plugins_registry>/<driver>-reg.sock */
                snprintf(f->dra_sock, sizeof(f->dra_sock), "%s/plugin", f->root);
                assert_int_equal(mkdir(f->dra_sock, 0750), 0);
                snprintf(f->reg_sock, sizeof(f->reg_sock), "%s/registry", f->root);
                assert_int_equal(mkdir(f->reg_sock, 0750), 0);
                snprintf(f->dra_sock, sizeof(f->dra_sock), "%s/plugin/dra.sock", f->root);
                snprintf(f->reg_sock, sizeof(f->reg_sock), "%s/registry/gpu.nvidia.com-reg.sock",
                         f->root);
        } else {
                snprintf(f->dra_sock, sizeof(f->dra_sock), "%s/dra.sock", f->root);
                snprintf(f->reg_sock, sizeof(f->reg_sock), "%s/gpu.nvidia.com-reg.sock", f->root);
        }
        f->gpus[0].minor = 0;
        strcpy(f->gpus[0].uuid, "GPU-00000000");
        f->set.gpus = f->gpus;
        f->set.n_gpus = 1;
        assert_int_equal(kdev_nvidia_gpus_from_set(&f->set, &f->recs, &err), 0);
        f->claim = json_pack("{s:{s:s,s:s,s:s},s:{s:{s:{s:[{s:s,s:s,s:s,s:s}]}}}}", "metadata",
                             "name", "c1", "namespace", "ns", "uid", UID1, "status", "allocation",
                             "devices", "results", "request", "gpu", "driver", "gpu.nvidia.com",
                             "pool", "node1", "device", "gpu-0");
        struct kdev_dra_plugin_options o = {
                .pool = "node1",
                .data_dir = f->data,
                .cdi_dir = f->cdi,
                .dev_root = f->root,
                .gpus = &f->recs,
                .get_claim = fake_source,
                .get_claim_arg = f,
                .on_status = on_status,
                .on_status_arg = f,
                .on_claim = on_claim,
                .on_claim_arg = f,
                .on_file_aside = on_file_aside,
                .on_file_aside_arg = f,
        };
        assert_int_equal(kdev_dra_plugin_new(&o, &f->p, &err), 0);
        assert_int_equal(uv_loop_init(&f->loop), 0);
        assert_int_equal(uv_async_init(&f->loop, &f->stop, stop_cb), 0);
        f->stop.data = f;
        assert_int_equal(uv_async_init(&f->loop, &f->check, check_cb), 0);
        f->check.data = f;
        assert_int_equal(sem_init(&f->checked, 0, 0), 0);
        assert_int_equal(sem_init(&f->gate, 0, 0), 0);
        assert_int_equal(sem_init(&f->entered, 0, 0), 0);
        assert_int_equal(sem_init(&f->stop_begun, 0, 0), 0);
        assert_int_equal(kdev_dra_plugin_start(f->p, &f->loop, f->dra_sock, f->reg_sock, &err), 0);
        assert_int_equal(pthread_create(&f->thread, NULL, loop_thread, f), 0);
        *state = f;
        return 0;
}

static int setup_socket_dirs(void **state)
{
        g_socket_dirs = true;
        int r = setup(state);
        g_socket_dirs = false;
        return r;
}

static void stop(struct fix *f)
{
        if (f->stopped)
                return;
        f->stopped = true;
        uv_async_send(&f->stop);
        pthread_join(f->thread, NULL);
        assert_int_equal(uv_loop_close(&f->loop), 0);
        assert_int_equal(f->stop_done_calls, 1);
}

static int teardown(void **state)
{
        struct fix *f = *state;

        stop(f); /* when a failed assertion skipped it */
        if (f->gate_on) { /* a failed assertion left the source waiting */
                f->gate_on = false;
                sem_post(&f->gate);
        }
        stop(f);
        sem_destroy(&f->checked);
        sem_destroy(&f->gate);
        sem_destroy(&f->entered);
        sem_destroy(&f->stop_begun);
        kdev_dra_plugin_free(f->p);
        kdev_nvidia_gpus_clear(&f->recs);
        json_decref(f->claim);
        json_decref(f->more);
        tmptree_remove(f->root);
        free(f);
        return 0;
}

static int call(const char *sock, const char *method, const ProtobufCMessage *req, uint8_t **resp,
                size_t *resp_len)
{
        size_t len = protobuf_c_message_get_packed_size(req);
        uint8_t *buf = malloc(len ? len : 1);
        struct kdev_err err = {0};
        int rc;

        protobuf_c_message_pack(req, buf);
        rc = kdev_rpc_unary_sync(sock, method, buf, len, 30000, resp, resp_len, &err);
        free(buf);
        if (rc != 0)
                fprintf(stderr, "%s: %d %s\n", method, rc, err.msg);
        return rc;
}

static void test_get_info(void **state)
{
        struct fix *f = *state;
        Pluginregistration__InfoRequest req = PLUGINREGISTRATION__INFO_REQUEST__INIT;
        Pluginregistration__PluginInfo *info;
        uint8_t *resp = NULL;
        size_t len = 0;

        assert_int_equal(call(f->reg_sock, KDEV_DRA_REG_GETINFO, &req.base, &resp, &len), 0);
        info = pluginregistration__plugin_info__unpack(NULL, len, resp);
        assert_non_null(info);
        assert_string_equal(info->type, "DRAPlugin");
        assert_string_equal(info->name, "gpu.nvidia.com");
        assert_string_equal(info->endpoint, f->dra_sock);
        assert_int_equal(info->n_supported_versions, 3);
        assert_string_equal(info->supported_versions[0], "v1.DRAPlugin");
        assert_string_equal(info->supported_versions[1], "v1beta1.DRAPlugin");
        assert_string_equal(info->supported_versions[2], "v1alpha1.DRAResourceHealth");
        pluginregistration__plugin_info__free_unpacked(info, NULL);
        free(resp);

        Pluginregistration__RegistrationStatus st = PLUGINREGISTRATION__REGISTRATION_STATUS__INIT;

        st.plugin_registered = 0;
        st.error = (char *)"RegisterPlugin error -- plugin validation failed with err: x";
        assert_int_equal(call(f->reg_sock, KDEV_DRA_REG_NOTIFY, &st.base, &resp, &len), 0);
        free(resp);
        st.plugin_registered = 1;
        st.error = (char *)"";
        assert_int_equal(call(f->reg_sock, KDEV_DRA_REG_NOTIFY, &st.base, &resp, &len), 0);
        free(resp);
        /* DRA methods are not on the registration socket */
        K8s__Io__Kubelet__Pkg__Apis__Dra__V1__NodePrepareResourcesRequest pr =
                K8S__IO__KUBELET__PKG__APIS__DRA__V1__NODE_PREPARE_RESOURCES_REQUEST__INIT;
        assert_int_equal(call(f->reg_sock, KDEV_DRA_V1_PREPARE, &pr.base, &resp, &len),
                         KDEV_RPC_UNIMPLEMENTED);
        stop(f);
        assert_int_equal(f->n_status, 2);
        assert_true(f->last_registered);
        assert_string_equal(f->last_error, "");
        /* stop removes the sockets */
        assert_int_equal(access(f->reg_sock, F_OK), -1);
        assert_int_equal(access(f->dra_sock, F_OK), -1);
}

static void test_v1_prepare_unprepare(void **state)
{
        struct fix *f = *state;
        K8s__Io__Kubelet__Pkg__Apis__Dra__V1__Claim c1 =
                K8S__IO__KUBELET__PKG__APIS__DRA__V1__CLAIM__INIT;
        K8s__Io__Kubelet__Pkg__Apis__Dra__V1__Claim c2 =
                K8S__IO__KUBELET__PKG__APIS__DRA__V1__CLAIM__INIT;
        K8s__Io__Kubelet__Pkg__Apis__Dra__V1__Claim *claims[] = {&c1, &c2, &c1};
        K8s__Io__Kubelet__Pkg__Apis__Dra__V1__NodePrepareResourcesRequest pr =
                K8S__IO__KUBELET__PKG__APIS__DRA__V1__NODE_PREPARE_RESOURCES_REQUEST__INIT;
        K8s__Io__Kubelet__Pkg__Apis__Dra__V1__NodePrepareResourcesResponse *presp;
        K8s__Io__Kubelet__Pkg__Apis__Dra__V1__NodeUnprepareResourcesRequest ur =
                K8S__IO__KUBELET__PKG__APIS__DRA__V1__NODE_UNPREPARE_RESOURCES_REQUEST__INIT;
        K8s__Io__Kubelet__Pkg__Apis__Dra__V1__NodeUnprepareResourcesResponse *uresp;
        uint8_t *resp = NULL;
        size_t len = 0;
        char spec[600];

        c1.namespace_ = (char *)"ns";
        c1.name = (char *)"c1";
        c1.uid = (char *)UID1;
        c2.namespace_ = (char *)"ns";
        c2.name = (char *)"gone";
        c2.uid = (char *)UID2;
        pr.claims = claims;
        pr.n_claims = 3; /* c1 twice: one answer per UID */
        assert_int_equal(call(f->dra_sock, KDEV_DRA_V1_PREPARE, &pr.base, &resp, &len), 0);
        presp = k8s__io__kubelet__pkg__apis__dra__v1__node_prepare_resources_response__unpack(
                NULL, len, resp);
        free(resp);
        assert_non_null(presp);
        assert_int_equal(presp->n_claims, 2);
        assert_string_equal(presp->claims[0]->key, UID1);
        assert_string_equal(presp->claims[0]->value->error, "");
        assert_int_equal(presp->claims[0]->value->n_devices, 1);
        K8s__Io__Kubelet__Pkg__Apis__Dra__V1__Device *d = presp->claims[0]->value->devices[0];

        assert_string_equal(d->pool_name, "node1");
        assert_string_equal(d->device_name, "gpu-0");
        assert_int_equal(d->n_request_names, 1);
        assert_string_equal(d->request_names[0], "gpu");
        assert_int_equal(d->n_cdi_device_ids, 1);
        assert_string_equal(d->cdi_device_ids[0], "k8s.gpu.nvidia.com/claim=" UID1 "-gpu-0");
        assert_int_equal(d->share_id_presence_case,
                         K8S__IO__KUBELET__PKG__APIS__DRA__V1__DEVICE__SHARE_ID_PRESENCE__NOT_SET);
        assert_string_equal(presp->claims[1]->key, UID2);
        assert_non_null(strstr(presp->claims[1]->value->error, "404"));
        assert_int_equal(presp->claims[1]->value->n_devices, 0);
        /* the call's claims were prepared together: one checkpoint write */
        struct kdev_dra_prepare_stats st;

        kdev_dra_plugin_stats(f->p, &st);
        assert_int_equal(st.calls, 1);
        assert_int_equal(st.claims, 2);
        assert_int_equal(st.checkpoint_writes, 1);
        assert_int_equal(st.spec_writes, 1);
        k8s__io__kubelet__pkg__apis__dra__v1__node_prepare_resources_response__free_unpacked(presp,
                                                                                          NULL);
        snprintf(spec, sizeof(spec), "%s/k8s.gpu.nvidia.com-claim_" UID1 ".json", f->cdi);
        assert_int_equal(access(spec, F_OK), 0);

        /* v1beta1 path, same claim: answered from the checkpoint */
        K8s__Io__Kubelet__Pkg__Apis__Dra__V1beta1__Claim b1 =
                K8S__IO__KUBELET__PKG__APIS__DRA__V1BETA1__CLAIM__INIT;
        K8s__Io__Kubelet__Pkg__Apis__Dra__V1beta1__Claim *bclaims[] = {&b1};
        K8s__Io__Kubelet__Pkg__Apis__Dra__V1beta1__NodePrepareResourcesRequest bpr =
                K8S__IO__KUBELET__PKG__APIS__DRA__V1BETA1__NODE_PREPARE_RESOURCES_REQUEST__INIT;
        K8s__Io__Kubelet__Pkg__Apis__Dra__V1beta1__NodePrepareResourcesResponse *bresp;

        b1.namespace_ = (char *)"ns";
        b1.name = (char *)"c1";
        b1.uid = (char *)UID1;
        bpr.claims = bclaims;
        bpr.n_claims = 1;
        assert_int_equal(call(f->dra_sock, KDEV_DRA_V1BETA1_PREPARE, &bpr.base, &resp, &len), 0);
        bresp = k8s__io__kubelet__pkg__apis__dra__v1beta1__node_prepare_resources_response__unpack(
                NULL, len, resp);
        free(resp);
        assert_non_null(bresp);
        assert_int_equal(bresp->n_claims, 1);
        assert_string_equal(bresp->claims[0]->value->devices[0]->cdi_device_ids[0],
                            "k8s.gpu.nvidia.com/claim=" UID1 "-gpu-0");
        k8s__io__kubelet__pkg__apis__dra__v1beta1__node_prepare_resources_response__free_unpacked(
                bresp, NULL);

        /* unprepare both (one never prepared): both succeed */
        ur.claims = claims;
        ur.n_claims = 2;
        assert_int_equal(call(f->dra_sock, KDEV_DRA_V1_UNPREPARE, &ur.base, &resp, &len), 0);
        uresp = k8s__io__kubelet__pkg__apis__dra__v1__node_unprepare_resources_response__unpack(
                NULL, len, resp);
        free(resp);
        assert_non_null(uresp);
        assert_int_equal(uresp->n_claims, 2);
        assert_string_equal(uresp->claims[0]->key, UID1);
        assert_string_equal(uresp->claims[0]->value->error, "");
        assert_string_equal(uresp->claims[1]->key, UID2);
        assert_string_equal(uresp->claims[1]->value->error, "");
        k8s__io__kubelet__pkg__apis__dra__v1__node_unprepare_resources_response__free_unpacked(
                uresp, NULL);
        assert_int_equal(access(spec, F_OK), -1);
        /* v1beta1 unprepare of the same again: still fine */
        assert_int_equal(call(f->dra_sock, KDEV_DRA_V1BETA1_UNPREPARE, &ur.base, &resp, &len), 0);
        free(resp);
        /* garbage request */
        assert_int_equal(kdev_rpc_unary_sync(f->dra_sock, KDEV_DRA_V1_PREPARE,
                                             (const uint8_t *)"\xff\xff", 2, 30000, &resp, &len,
                                             NULL),
                         KDEV_RPC_INVALID_ARGUMENT);
        stop(f);
        assert_int_equal(kdev_dra_plugin_prepared(f->p), 0);
        /* on_claim: once per distinct claim of each call, in order */
        assert_string_equal(
                f->events,
                "prepare ns/c1 " UID1 " recorded=0 devices=gpu-0 "
                "cdi=k8s.gpu.nvidia.com/claim=" UID1 "-gpu-0 error=-\n"
                "prepare ns/gone " UID2 " recorded=0 devices=- cdi=- "
                "error=claim ns/gone: GET ns/gone: 404 Not Found\n"
                "prepare ns/c1 " UID1 " recorded=1 devices=gpu-0 "
                "cdi=k8s.gpu.nvidia.com/claim=" UID1 "-gpu-0 error=-\n"
                "unprepare ns/c1 " UID1 " recorded=1 devices=gpu-0 "
                "cdi=k8s.gpu.nvidia.com/claim=" UID1 "-gpu-0 error=-\n"
                "unprepare ns/gone " UID2 " recorded=0 devices=- cdi=- error=-\n"
                "unprepare ns/c1 " UID1 " recorded=0 devices=- cdi=- error=-\n"
                "unprepare ns/gone " UID2 " recorded=0 devices=- cdi=- error=-\n");
}

/* Claim UIDs outside [A-Za-z0-9-] are refused per claim, before anything
 * is read, written or removed: "a/b" and "a_b" once named the same spec
 * file k8s.gpu.nvidia.com-claim_a_b.json. */
static void test_uid_refused(void **state)
{
        struct fix *f = *state;
        K8s__Io__Kubelet__Pkg__Apis__Dra__V1__Claim c1 =
                K8S__IO__KUBELET__PKG__APIS__DRA__V1__CLAIM__INIT;
        K8s__Io__Kubelet__Pkg__Apis__Dra__V1__Claim c2 =
                K8S__IO__KUBELET__PKG__APIS__DRA__V1__CLAIM__INIT;
        K8s__Io__Kubelet__Pkg__Apis__Dra__V1__Claim *claims[] = {&c1, &c2};
        K8s__Io__Kubelet__Pkg__Apis__Dra__V1__NodePrepareResourcesRequest pr =
                K8S__IO__KUBELET__PKG__APIS__DRA__V1__NODE_PREPARE_RESOURCES_REQUEST__INIT;
        K8s__Io__Kubelet__Pkg__Apis__Dra__V1__NodePrepareResourcesResponse *presp;
        K8s__Io__Kubelet__Pkg__Apis__Dra__V1__NodeUnprepareResourcesRequest ur =
                K8S__IO__KUBELET__PKG__APIS__DRA__V1__NODE_UNPREPARE_RESOURCES_REQUEST__INIT;
        K8s__Io__Kubelet__Pkg__Apis__Dra__V1__NodeUnprepareResourcesResponse *uresp;
        uint8_t *resp = NULL;
        size_t len = 0;
        char spec[600], got[16] = "";
        FILE *fp;

        assert_int_equal(mkdir(f->cdi, 0700), 0);
        snprintf(spec, sizeof(spec), "%s/k8s.gpu.nvidia.com-claim_a_b.json", f->cdi);
        fp = fopen(spec, "w");
        assert_non_null(fp);
        fputs("theirs", fp);
        assert_int_equal(fclose(fp), 0);
        c1.namespace_ = (char *)"ns";
        c1.name = (char *)"c1"; /* the source has it: must not be read */
        c1.uid = (char *)"a/b";
        c2.namespace_ = (char *)"ns";
        c2.name = (char *)"c2";
        c2.uid = (char *)"a_b";
        pr.claims = claims;
        pr.n_claims = 2;
        assert_int_equal(call(f->dra_sock, KDEV_DRA_V1_PREPARE, &pr.base, &resp, &len), 0);
        presp = k8s__io__kubelet__pkg__apis__dra__v1__node_prepare_resources_response__unpack(
                NULL, len, resp);
        free(resp);
        assert_non_null(presp);
        assert_int_equal(presp->n_claims, 2);
        assert_string_equal(presp->claims[0]->key, "a/b");
        assert_string_equal(presp->claims[0]->value->error,
                            "claim ns/c1: UID \"a/b\" refused: character 2 ('/') is not an ASCII "
                            "letter, digit or '-'");
        assert_string_equal(presp->claims[1]->key, "a_b");
        assert_string_equal(presp->claims[1]->value->error,
                            "claim ns/c2: UID \"a_b\" refused: character 2 ('_') is not an ASCII "
                            "letter, digit or '-'");
        k8s__io__kubelet__pkg__apis__dra__v1__node_prepare_resources_response__free_unpacked(presp,
                                                                                          NULL);
        ur.claims = claims;
        ur.n_claims = 2;
        assert_int_equal(call(f->dra_sock, KDEV_DRA_V1_UNPREPARE, &ur.base, &resp, &len), 0);
        uresp = k8s__io__kubelet__pkg__apis__dra__v1__node_unprepare_resources_response__unpack(
                NULL, len, resp);
        free(resp);
        assert_non_null(uresp);
        assert_int_equal(uresp->n_claims, 2);
        assert_string_equal(uresp->claims[0]->value->error,
                            "claim ns/c1: UID \"a/b\" refused: character 2 ('/') is not an ASCII "
                            "letter, digit or '-'");
        assert_string_equal(uresp->claims[1]->value->error,
                            "claim ns/c2: UID \"a_b\" refused: character 2 ('_') is not an ASCII "
                            "letter, digit or '-'");
        k8s__io__kubelet__pkg__apis__dra__v1__node_unprepare_resources_response__free_unpacked(
                uresp, NULL);
        stop(f);
        assert_int_equal(f->source_calls, 0);
        assert_int_equal(kdev_dra_plugin_prepared(f->p), 0);
        fp = fopen(spec, "r");
        assert_non_null(fp);
        assert_non_null(fgets(got, sizeof(got), fp));
        fclose(fp);
        assert_string_equal(got, "theirs");
}

static void get_info_ok(struct fix *f)
{
        Pluginregistration__InfoRequest req = PLUGINREGISTRATION__INFO_REQUEST__INIT;
        Pluginregistration__PluginInfo *info;
        uint8_t *resp = NULL;
        size_t len = 0;

        assert_int_equal(call(f->reg_sock, KDEV_DRA_REG_GETINFO, &req.base, &resp, &len), 0);
        info = pluginregistration__plugin_info__unpack(NULL, len, resp);
        assert_non_null(info);
        assert_string_equal(info->endpoint, f->dra_sock);
        pluginregistration__plugin_info__free_unpacked(info, NULL);
        free(resp);
}

static void test_sockets_recreated(void **state)
{
        struct fix *f = *state;
        K8s__Io__Kubelet__Pkg__Apis__Dra__V1__NodeUnprepareResourcesRequest ur =
                K8S__IO__KUBELET__PKG__APIS__DRA__V1__NODE_UNPREPARE_RESOURCES_REQUEST__INIT;
        uint8_t *resp = NULL;
        size_t len = 0;
        FILE *fp;

        assert_int_equal(check_sockets(f), 0);
        assert_int_equal(unlink(f->reg_sock), 0);
        assert_int_equal(check_sockets(f), 1);
        get_info_ok(f);
        /* both gone, one replaced by a plain file */
        assert_int_equal(unlink(f->reg_sock), 0);
        assert_int_equal(unlink(f->dra_sock), 0);
        fp = fopen(f->dra_sock, "w");
        assert_non_null(fp);
        fclose(fp);
        assert_int_equal(check_sockets(f), 2);
        get_info_ok(f);
        assert_int_equal(call(f->dra_sock, KDEV_DRA_V1_UNPREPARE, &ur.base, &resp, &len), 0);
        free(resp);
        assert_int_equal(check_sockets(f), 0);
        stop(f);
}

/* Packs a v1 NodePrepareResources (|prepare|) or NodeUnprepareResources
 * request of claim ns/|name| |uid| into |buf| (512 bytes); its length. */
static size_t pack_one_claim(bool prepare, const char *name, const char *uid, uint8_t *buf)
{
        K8s__Io__Kubelet__Pkg__Apis__Dra__V1__Claim c =
                K8S__IO__KUBELET__PKG__APIS__DRA__V1__CLAIM__INIT;
        K8s__Io__Kubelet__Pkg__Apis__Dra__V1__Claim *claims[] = {&c};
        K8s__Io__Kubelet__Pkg__Apis__Dra__V1__NodePrepareResourcesRequest pr =
                K8S__IO__KUBELET__PKG__APIS__DRA__V1__NODE_PREPARE_RESOURCES_REQUEST__INIT;
        K8s__Io__Kubelet__Pkg__Apis__Dra__V1__NodeUnprepareResourcesRequest ur =
                K8S__IO__KUBELET__PKG__APIS__DRA__V1__NODE_UNPREPARE_RESOURCES_REQUEST__INIT;

        c.namespace_ = (char *)"ns";
        c.name = (char *)name;
        c.uid = (char *)uid;
        pr.claims = ur.claims = claims;
        pr.n_claims = ur.n_claims = 1;
        assert_true(protobuf_c_message_get_packed_size(prepare ? &pr.base : &ur.base) <= 512);
        return protobuf_c_message_pack(prepare ? &pr.base : &ur.base, buf);
}

/* The plugin directory and the registry directory removed (rm -rf) and
 * created again, in either order: no socket can be re-created while a
 * directory is missing (an error, the plugin keeps running); once both are
 * back, both sockets are served again, each exactly once. */
static void test_socket_dirs_recreated(void **state)
{
        struct fix *f = *state;
        char plugin[300], registry[300];

        snprintf(plugin, sizeof(plugin), "%s/plugin", f->root);
        snprintf(registry, sizeof(registry), "%s/registry", f->root);
        get_info_ok(f);
        assert_int_equal(unlink(f->dra_sock), 0);
        assert_int_equal(rmdir(plugin), 0);
        assert_int_equal(unlink(f->reg_sock), 0);
        assert_int_equal(rmdir(registry), 0);
        assert_int_equal(check_sockets(f), -ENOENT);
        assert_int_equal(mkdir(registry, 0750), 0);
        assert_int_equal(check_sockets(f), -ENOENT); /* the plugin directory still missing */
        assert_int_equal(mkdir(plugin, 0750), 0);
        assert_int_equal(check_sockets(f), 2);
        get_info_ok(f);
        assert_int_equal(check_sockets(f), 0);
        /* the registry alone, removed and back before the next check */
        assert_int_equal(unlink(f->reg_sock), 0);
        assert_int_equal(rmdir(registry), 0);
        assert_int_equal(mkdir(registry, 0750), 0);
        assert_int_equal(check_sockets(f), 1);
        get_info_ok(f);
        assert_int_equal(check_sockets(f), 0);
        stop(f);
}

struct prep_thread {
        struct fix *f;
        uint64_t timeout_ms;
        int rc;
        K8s__Io__Kubelet__Pkg__Apis__Dra__V1__NodePrepareResourcesResponse *resp;
        pthread_t t;
};

static void *prep_thread_fn(void *arg)
{
        struct prep_thread *pt = arg;
        uint8_t buf[512], *resp = NULL;
        size_t len = 0, n = pack_one_claim(true, "c1", UID1, buf);

        pt->rc = kdev_rpc_unary_sync(pt->f->dra_sock, KDEV_DRA_V1_PREPARE, buf, n, pt->timeout_ms,
                                     &resp, &len, NULL);
        if (pt->rc == 0)
                pt->resp =
                        k8s__io__kubelet__pkg__apis__dra__v1__node_prepare_resources_response__unpack(
                                NULL, len, resp);
        free(resp);
        return NULL;
}

static void wait_sem(sem_t *s)
{
        struct timespec ts;

        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_sec += 60;
        while (sem_timedwait(s, &ts) < 0) {
                assert_int_equal(errno, EINTR);
        }
}

static int probe_quiet(struct fix *f)
{
        return (int)(kdev_rpc_server_open_calls(f->p->dra_srv) + f->p->jobs);
}

static int probe_prepared(struct fix *f)
{
        return (int)kdev_dra_plugin_prepared(f->p);
}

/* A claim source that blocks does not block the loop: GetInfo answers. */
static void test_slow_source(void **state)
{
        struct fix *f = *state;
        struct prep_thread pt = {.f = f, .timeout_ms = 60000};
        char spec[600];

        f->gate_on = true;
        assert_int_equal(pthread_create(&pt.t, NULL, prep_thread_fn, &pt), 0);
        wait_sem(&f->entered);
        get_info_ok(f);
        assert_int_equal(check_sockets(f), 0);
        f->gate_on = false;
        sem_post(&f->gate);
        pthread_join(pt.t, NULL);
        assert_int_equal(pt.rc, 0);
        assert_non_null(pt.resp);
        assert_int_equal(pt.resp->n_claims, 1);
        assert_string_equal(pt.resp->claims[0]->value->error, "");
        assert_int_equal(pt.resp->claims[0]->value->n_devices, 1);
        k8s__io__kubelet__pkg__apis__dra__v1__node_prepare_resources_response__free_unpacked(
                pt.resp, NULL);
        snprintf(spec, sizeof(spec), "%s/k8s.gpu.nvidia.com-claim_" UID1 ".json", f->cdi);
        assert_int_equal(access(spec, F_OK), 0);
        stop(f);
}

/* kubelet gave up (deadline) while the claim was being read: not prepared. */
static void test_prepare_deadline(void **state)
{
        struct fix *f = *state;
        struct prep_thread pt = {.f = f, .timeout_ms = 300};
        char spec[600];

        f->gate_on = true;
        assert_int_equal(pthread_create(&pt.t, NULL, prep_thread_fn, &pt), 0);
        wait_sem(&f->entered);
        pthread_join(pt.t, NULL);
        assert_int_equal(pt.rc, KDEV_RPC_DEADLINE_EXCEEDED);
        /* wait (poll) until the server dropped the call */
        for (int i = 0; i < 6000 && on_loop(f, probe_quiet) != 1; i++)
                usleep(10000);
        assert_int_equal(on_loop(f, probe_quiet), 1); /* only the job left */
        f->gate_on = false;
        sem_post(&f->gate);
        for (int i = 0; i < 6000 && on_loop(f, probe_quiet) != 0; i++)
                usleep(10000);
        assert_int_equal(on_loop(f, probe_quiet), 0);
        assert_int_equal(on_loop(f, probe_prepared), 0);
        snprintf(spec, sizeof(spec), "%s/k8s.gpu.nvidia.com-claim_" UID1 ".json", f->cdi);
        assert_int_equal(access(spec, F_OK), -1);
        stop(f);
}

/* Stop while a claim is being read: the call is cancelled, stop completes
 * once the read returned, nothing is prepared. */
static void test_stop_during_read(void **state)
{
        struct fix *f = *state;
        struct prep_thread pt = {.f = f, .timeout_ms = 60000};

        f->gate_on = true;
        assert_int_equal(pthread_create(&pt.t, NULL, prep_thread_fn, &pt), 0);
        wait_sem(&f->entered);
        f->stopped = true;
        uv_async_send(&f->stop);
        wait_sem(&f->stop_begun);
        assert_int_equal(f->stop_done_calls, 0); /* read still in flight */
        f->gate_on = false;
        sem_post(&f->gate);
        pthread_join(f->thread, NULL);
        assert_int_equal(uv_loop_close(&f->loop), 0);
        assert_int_equal(f->stop_done_calls, 1);
        pthread_join(pt.t, NULL);
        assert_int_not_equal(pt.rc, 0);
        assert_int_equal(kdev_dra_plugin_prepared(f->p), 0);
}

#define UID3 "9d2e6f7a-3333-4c2e-9a43-cccccccccccc"
#define UID4 "9d2e6f7a-4444-4c2e-9a43-dddddddddddd"
#define CDI1 "k8s.gpu.nvidia.com/claim=" UID1 "-gpu-0"

/* One v1 NodePrepareResources / NodeUnprepareResources call of one claim on
 * a thread of its own; |answer| sums the claim's answer up:
 * "error=<text> devices=<device>:<CDI ID>,..." (Prepare), "error=<text>"
 * (Unprepare). */
struct call_thread {
        struct fix *f;
        bool prepare;
        const char *name, *uid;
        int rc;
        char answer[1024];
        pthread_t t;
};

static void *call_thread_fn(void *arg)
{
        struct call_thread *ct = arg;
        uint8_t buf[512], *resp = NULL;
        size_t len = 0, n = pack_one_claim(ct->prepare, ct->name, ct->uid, buf);

        ct->rc = kdev_rpc_unary_sync(ct->f->dra_sock,
                                     ct->prepare ? KDEV_DRA_V1_PREPARE : KDEV_DRA_V1_UNPREPARE,
                                     buf, n, 60000, &resp, &len, NULL);
        if (ct->rc == 0 && ct->prepare) {
                K8s__Io__Kubelet__Pkg__Apis__Dra__V1__NodePrepareResourcesResponse *r =
                        k8s__io__kubelet__pkg__apis__dra__v1__node_prepare_resources_response__unpack(
                                NULL, len, resp);
                size_t o;

                assert_non_null(r);
                assert_int_equal(r->n_claims, 1);
                o = (size_t)snprintf(ct->answer, sizeof(ct->answer), "error=%s devices=",
                                     r->claims[0]->value->error);
                for (size_t i = 0; i < r->claims[0]->value->n_devices; i++) {
                        K8s__Io__Kubelet__Pkg__Apis__Dra__V1__Device *d =
                                r->claims[0]->value->devices[i];

                        o += (size_t)snprintf(ct->answer + o, sizeof(ct->answer) - o, "%s%s:%s",
                                              i ? "," : "", d->device_name,
                                              d->n_cdi_device_ids ? d->cdi_device_ids[0] : "");
                }
                k8s__io__kubelet__pkg__apis__dra__v1__node_prepare_resources_response__free_unpacked(
                        r, NULL);
        } else if (ct->rc == 0) {
                K8s__Io__Kubelet__Pkg__Apis__Dra__V1__NodeUnprepareResourcesResponse *r =
                        k8s__io__kubelet__pkg__apis__dra__v1__node_unprepare_resources_response__unpack(
                                NULL, len, resp);

                assert_non_null(r);
                assert_int_equal(r->n_claims, 1);
                snprintf(ct->answer, sizeof(ct->answer), "error=%s", r->claims[0]->value->error);
                k8s__io__kubelet__pkg__apis__dra__v1__node_unprepare_resources_response__free_unpacked(
                        r, NULL);
        }
        free(resp);
        return NULL;
}

static void start_call(struct call_thread *ct, struct fix *f, bool prepare, const char *name,
                       const char *uid)
{
        ct->f = f;
        ct->prepare = prepare;
        ct->name = name;
        ct->uid = uid;
        assert_int_equal(pthread_create(&ct->t, NULL, call_thread_fn, ct), 0);
}

/* The call of |ct| answered: its summary. */
static const char *join_call(struct call_thread *ct)
{
        pthread_join(ct->t, NULL);
        assert_int_equal(ct->rc, 0);
        return ct->answer;
}

/* One call on this thread: its summary (into |ct|). */
static const char *sync_call(struct call_thread *ct, struct fix *f, bool prepare,
                             const char *name, const char *uid)
{
        start_call(ct, f, prepare, name, uid);
        return join_call(ct);
}

static int probe_jobs(struct fix *f)
{
        return (int)f->p->jobs;
}

/* Waits until |n| calls are queued in the plugin. */
static void wait_jobs(struct fix *f, int n)
{
        for (int i = 0; i < 6000 && on_loop(f, probe_jobs) != n; i++)
                usleep(1000);
        assert_int_equal(on_loop(f, probe_jobs), n);
}

/* The checkpoint file as "<uid>:<device>[+admin],...;" per claim (sorted). */
static void cp_summary(struct fix *f, char *buf, size_t size)
{
        char path[400];
        json_t *root, *claims, *rec, *d;
        json_error_t je;
        const char *uid;
        size_t i, o = 0;

        snprintf(path, sizeof(path), "%s/dra-claims.json", f->data);
        root = json_load_file(path, 0, &je);
        assert_non_null(root);
        claims = json_object_get(json_object_get(root, "data"), "claims");
        assert_true(json_is_object(claims));
        buf[0] = '\0';
        const char **keys = calloc(json_object_size(claims) + 1, sizeof(*keys));
        size_t nk = 0;

        json_object_foreach(claims, uid, rec)
                keys[nk++] = uid;
        for (size_t a = 0; a < nk; a++)
                for (size_t b = a + 1; b < nk; b++)
                        if (strcmp(keys[a], keys[b]) > 0) {
                                const char *t = keys[a];
                                keys[a] = keys[b];
                                keys[b] = t;
                        }
        for (size_t k = 0; k < nk; k++) {
                o += (size_t)snprintf(buf + o, size - o, "%s:", keys[k]);
                json_array_foreach(json_object_get(json_object_get(claims, keys[k]), "devices"),
                                   i, d)
                        o += (size_t)snprintf(
                                buf + o, size - o, "%s%s%s", i ? "," : "",
                                json_string_value(json_object_get(d, "device")),
                                json_is_true(json_object_get(d, "adminAccess")) ? "+admin" : "");
                o += (size_t)snprintf(buf + o, size - o, ";");
        }
        free(keys);
        json_decref(root);
}

static bool spec_exists(struct fix *f, const char *uid)
{
        char spec[600];

        snprintf(spec, sizeof(spec), "%s/k8s.gpu.nvidia.com-claim_%s.json", f->cdi, uid);
        return access(spec, F_OK) == 0;
}

/* Starts a Prepare of ns/c1 whose claim read blocks until the gate opens;
 * returns once the read began. */
static void start_gated_prepare(struct fix *f, struct call_thread *ct)
{
        f->gate_on = true;
        start_call(ct, f, true, "c1", UID1);
        wait_sem(&f->entered);
}

/* Opens the gate for the blocked read. */
static void open_gate(struct fix *f)
{
        f->gate_on = false;
        sem_post(&f->gate);
}

/* Once no call is queued: |prepared| claims, UID1's spec there or not, the
 * checkpoint file as |cp_want| (cp_summary). */
static void assert_final(struct fix *f, int prepared, const char *cp_want)
{
        char cp[512];

        wait_jobs(f, 0);
        assert_int_equal(on_loop(f, probe_prepared), prepared);
        assert_int_equal(spec_exists(f, UID1), prepared > 0);
        cp_summary(f, cp, sizeof(cp));
        assert_string_equal(cp, cp_want);
}

/* An Unprepare that arrives while the Prepare of the same claim is still
 * reading it waits for it: kubelet's last call (Unprepare) decides, the
 * claim ends unprepared. Each call answers what it did. */
static void test_unprepare_waits_for_prepare(void **state)
{
        struct fix *f = *state;
        struct call_thread p1 = {0}, u = {0};

        start_gated_prepare(f, &p1);
        start_call(&u, f, false, "c1", UID1);
        wait_jobs(f, 2);          /* the Unprepare waits in line */
        get_info_ok(f);           /* the loop is free meanwhile */
        open_gate(f);
        assert_string_equal(join_call(&p1), "error= devices=gpu-0:" CDI1);
        assert_string_equal(join_call(&u), "error=");
        assert_final(f, 0, "");
        stop(f);
        assert_string_equal(f->events,
                            "prepare ns/c1 " UID1 " recorded=0 devices=gpu-0 cdi=" CDI1
                            " error=-\n"
                            "unprepare ns/c1 " UID1 " recorded=1 devices=gpu-0 cdi=" CDI1
                            " error=-\n");
}

/* A Prepare retried while the first is still reading the claim: both are
 * answered, the same way; the claim is prepared once. */
static void test_retried_prepare_same_answer(void **state)
{
        struct fix *f = *state;
        struct call_thread p1 = {0}, p2 = {0};

        start_gated_prepare(f, &p1);
        start_call(&p2, f, true, "c1", UID1);
        wait_jobs(f, 2);
        open_gate(f);
        assert_string_equal(join_call(&p1), "error= devices=gpu-0:" CDI1);
        assert_string_equal(join_call(&p2), "error= devices=gpu-0:" CDI1);
        assert_final(f, 1, UID1 ":gpu-0;");
        stop(f);
        assert_string_equal(f->events,
                            "prepare ns/c1 " UID1 " recorded=0 devices=gpu-0 cdi=" CDI1
                            " error=-\n"
                            "prepare ns/c1 " UID1 " recorded=1 devices=gpu-0 cdi=" CDI1
                            " error=-\n");
}

/* Prepare (reading), Unprepare, Prepare again of one claim: run in that
 * order whatever order the reads end in; the last call (Prepare) decides:
 * the claim ends prepared, its spec and checkpoint record in place. */
static void test_prepare_unprepare_prepare(void **state)
{
        struct fix *f = *state;
        struct call_thread p1 = {0}, u = {0}, p2 = {0};

        start_gated_prepare(f, &p1);
        start_call(&u, f, false, "c1", UID1);
        wait_jobs(f, 2);
        start_call(&p2, f, true, "c1", UID1);
        wait_jobs(f, 3);
        open_gate(f);
        assert_string_equal(join_call(&p1), "error= devices=gpu-0:" CDI1);
        assert_string_equal(join_call(&u), "error=");
        assert_string_equal(join_call(&p2), "error= devices=gpu-0:" CDI1);
        assert_final(f, 1, UID1 ":gpu-0;");
        stop(f);
        assert_int_equal(f->source_calls, 2);
        assert_string_equal(f->events,
                            "prepare ns/c1 " UID1 " recorded=0 devices=gpu-0 cdi=" CDI1
                            " error=-\n"
                            "unprepare ns/c1 " UID1 " recorded=1 devices=gpu-0 cdi=" CDI1
                            " error=-\n"
                            "prepare ns/c1 " UID1 " recorded=0 devices=gpu-0 cdi=" CDI1
                            " error=-\n");
}

static json_t *claim_on_gpu0(const char *name, const char *uid, bool admin)
{
        json_t *r = json_pack("{s:s,s:s,s:s,s:s}", "request", "gpu", "driver", "gpu.nvidia.com",
                              "pool", "node1", "device", "gpu-0");

        if (admin)
                json_object_set_new(r, "adminAccess", json_true());
        return json_pack("{s:{s:s,s:s,s:s},s:{s:{s:{s:[o]}}}}", "metadata", "name", name,
                         "namespace", "ns", "uid", uid, "status", "allocation", "devices",
                         "results", r);
}

/* A device prepared for one claim is refused to another, naming both,
 * unless the allocation has adminAccess; admin-access claims hold nothing. */
static void test_double_allocation(void **state)
{
        struct fix *f = *state;
        struct call_thread ct = {0};
        char cp[512];

        f->more = json_object();
        json_object_set_new(f->more, "c3", claim_on_gpu0("c3", UID3, false));
        json_object_set_new(f->more, "c4", claim_on_gpu0("c4", UID4, true));
        assert_string_equal(sync_call(&ct, f, true, "c1", UID1), "error= devices=gpu-0:" CDI1);
        assert_string_equal(sync_call(&ct, f, true, "c3", UID3),
                            "error=claim ns/c3 (" UID3 "): device gpu-0 is already prepared for "
                            "claim ns/c1 (" UID1 "): it is not shareable and this allocation "
                            "has no adminAccess devices=");
        assert_false(spec_exists(f, UID3));
        assert_string_equal(sync_call(&ct, f, true, "c4", UID4),
                            "error= devices=gpu-0:k8s.gpu.nvidia.com/claim=" UID4 "-gpu-0");
        assert_true(spec_exists(f, UID4));
        cp_summary(f, cp, sizeof(cp));
        assert_string_equal(cp, UID1 ":gpu-0;" UID4 ":gpu-0+admin;");
        /* c1 released: c3 may have it (the admin-access claim holds nothing) */
        assert_string_equal(sync_call(&ct, f, false, "c1", UID1), "error=");
        assert_string_equal(sync_call(&ct, f, true, "c3", UID3),
                            "error= devices=gpu-0:k8s.gpu.nvidia.com/claim=" UID3 "-gpu-0");
        cp_summary(f, cp, sizeof(cp));
        assert_string_equal(cp, UID3 ":gpu-0;" UID4 ":gpu-0+admin;");
        stop(f);
}

/* The one aside file "<dir>/.<name>.foreign-<digits>": its path. */
static void find_aside(const char *dir, const char *name, char *out, size_t size)
{
        char prefix[300];
        int n = 0;
        DIR *h = opendir(dir);

        snprintf(prefix, sizeof(prefix), ".%s.foreign-", name);
        assert_non_null(h);
        for (struct dirent *e; (e = readdir(h));) {
                if (strncmp(e->d_name, prefix, strlen(prefix)))
                        continue;
                assert_true(strspn(e->d_name + strlen(prefix), "0123456789") ==
                            strlen(e->d_name + strlen(prefix)));
                snprintf(out, size, "%s/%s", dir, e->d_name);
                n++;
        }
        closedir(h);
        assert_int_equal(n, 1);
}

static char *read_text(const char *path)
{
        FILE *fp = fopen(path, "r");
        char *buf = calloc(1, 65536);

        assert_non_null(fp);
        assert_non_null(buf);
        fread(buf, 1, 65535, fp);
        fclose(fp);
        return buf;
}

static void write_text(const char *path, const char *text)
{
        FILE *fp = fopen(path, "w");

        assert_non_null(fp);
        fputs(text, fp);
        assert_int_equal(fclose(fp), 0);
}

/* The claim checkpoint edited behind kdev's back: the next save moves it
 * aside (".dra-claims.json.foreign-<secs>", the edit kept), says so, and
 * writes it from memory: no prepared claim is lost. */
static void test_checkpoint_edited(void **state)
{
        struct fix *f = *state;
        struct call_thread ct = {0};
        char cp[512], path[400], aside[700], want[2048];

        f->more = json_object();
        json_object_set_new(f->more, "c4", claim_on_gpu0("c4", UID4, true));
        assert_string_equal(sync_call(&ct, f, true, "c1", UID1), "error= devices=gpu-0:" CDI1);
        snprintf(path, sizeof(path), "%s/dra-claims.json", f->data);
        write_text(path, "{\"version\":1,\"edited\":true}\n");
        f->events[0] = '\0';
        assert_string_equal(sync_call(&ct, f, true, "c4", UID4),
                            "error= devices=gpu-0:k8s.gpu.nvidia.com/claim=" UID4 "-gpu-0");
        find_aside(f->data, "dra-claims.json", aside, sizeof(aside));
        char *t = read_text(aside);

        assert_string_equal(t, "{\"version\":1,\"edited\":true}\n");
        free(t);
        cp_summary(f, cp, sizeof(cp));
        assert_string_equal(cp, UID1 ":gpu-0;" UID4 ":gpu-0+admin;");
        stop(f);
        snprintf(want, sizeof(want),
                 "aside %s %s rebuilt=1\n"
                 "prepare ns/c4 " UID4 " recorded=0 devices=gpu-0 "
                 "cdi=k8s.gpu.nvidia.com/claim=" UID4 "-gpu-0 error=-\n",
                 path, aside);
        assert_string_equal(f->events, want);
}

/* A claim's CDI spec edited behind kdev's back: a retried Prepare moves it
 * aside and writes kdev's spec again, byte for byte; edited again, the
 * Unprepare moves it aside instead of removing it. */
static void test_claim_spec_edited(void **state)
{
        struct fix *f = *state;
        struct call_thread ct = {0};
        char spec[600], aside[700], want[2048], name[200];

        assert_string_equal(sync_call(&ct, f, true, "c1", UID1), "error= devices=gpu-0:" CDI1);
        snprintf(name, sizeof(name), "k8s.gpu.nvidia.com-claim_%s.json", UID1);
        snprintf(spec, sizeof(spec), "%s/%s", f->cdi, name);
        char *orig = read_text(spec);

        write_text(spec, "{\"cdiVersion\":\"0.5.0\",\"kind\":\"someone/else\"}\n");
        f->events[0] = '\0';
        assert_string_equal(sync_call(&ct, f, true, "c1", UID1), "error= devices=gpu-0:" CDI1);
        find_aside(f->cdi, name, aside, sizeof(aside));
        char *t = read_text(aside);

        assert_string_equal(t, "{\"cdiVersion\":\"0.5.0\",\"kind\":\"someone/else\"}\n");
        free(t);
        t = read_text(spec);
        assert_string_equal(t, orig);
        free(t);
        snprintf(want, sizeof(want),
                 "aside %s %s rebuilt=1\n"
                 "prepare ns/c1 " UID1 " recorded=1 devices=gpu-0 cdi=" CDI1 " error=-\n",
                 spec, aside);
        assert_string_equal(f->events, want);
        assert_int_equal(unlink(aside), 0);
        /* edited again: Unprepare keeps the edit aside */
        write_text(spec, "edited\n");
        f->events[0] = '\0';
        assert_string_equal(sync_call(&ct, f, false, "c1", UID1), "error=");
        assert_false(spec_exists(f, UID1));
        find_aside(f->cdi, name, aside, sizeof(aside));
        t = read_text(aside);
        assert_string_equal(t, "edited\n");
        free(t);
        snprintf(want, sizeof(want),
                 "aside %s %s rebuilt=0\n"
                 "unprepare ns/c1 " UID1 " recorded=1 devices=gpu-0 cdi=" CDI1 " error=-\n",
                 spec, aside);
        assert_string_equal(f->events, want);
        free(orig);
        stop(f);
}

int main(void)
{
        const struct CMUnitTest tests[] = {
                cmocka_unit_test_setup_teardown(test_get_info, setup, teardown),
                cmocka_unit_test_setup_teardown(test_v1_prepare_unprepare, setup, teardown),
                cmocka_unit_test_setup_teardown(test_uid_refused, setup, teardown),
                cmocka_unit_test_setup_teardown(test_sockets_recreated, setup, teardown),
                cmocka_unit_test_setup_teardown(test_socket_dirs_recreated, setup_socket_dirs,
                                                teardown),
                cmocka_unit_test_setup_teardown(test_slow_source, setup, teardown),
                cmocka_unit_test_setup_teardown(test_prepare_deadline, setup, teardown),
                cmocka_unit_test_setup_teardown(test_stop_during_read, setup, teardown),
                cmocka_unit_test_setup_teardown(test_unprepare_waits_for_prepare, setup,
                                                teardown),
                cmocka_unit_test_setup_teardown(test_retried_prepare_same_answer, setup,
                                                teardown),
                cmocka_unit_test_setup_teardown(test_prepare_unprepare_prepare, setup, teardown),
                cmocka_unit_test_setup_teardown(test_double_allocation, setup, teardown),
                cmocka_unit_test_setup_teardown(test_checkpoint_edited, setup, teardown),
                cmocka_unit_test_setup_teardown(test_claim_spec_edited, setup, teardown),
        };

        return cmocka_run_group_tests(tests, NULL, NULL);
}
