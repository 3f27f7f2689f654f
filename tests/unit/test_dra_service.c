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

static void rm_tree(const char *path)
{
        DIR *d = opendir(path);
        struct dirent *e;
        char p[1024];

        if (!d) {
                unlink(path);
                return;
        }
        while ((e = readdir(d))) {
                if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
                        continue;
                snprintf(p, sizeof(p), "%s/%s", path, e->d_name);
                rm_tree(p);
        }
        closedir(d);
        rmdir(path);
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
        rm_tree(f->root);
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
        assert_int_equal(info->n_supported_versions, 2);
        assert_string_equal(info->supported_versions[0], "v1.DRAPlugin");
        assert_string_equal(info->supported_versions[1], "v1beta1.DRAPlugin");
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
        K8s__Io__Kubelet__Pkg__Apis__Dra__V1__Claim c1 =
                K8S__IO__KUBELET__PKG__APIS__DRA__V1__CLAIM__INIT;
        K8s__Io__Kubelet__Pkg__Apis__Dra__V1__Claim *claims[] = {&c1};
        K8s__Io__Kubelet__Pkg__Apis__Dra__V1__NodePrepareResourcesRequest pr =
                K8S__IO__KUBELET__PKG__APIS__DRA__V1__NODE_PREPARE_RESOURCES_REQUEST__INIT;
        uint8_t buf[256], *resp = NULL;
        size_t len = 0, n;

        c1.namespace_ = (char *)"ns";
        c1.name = (char *)"c1";
        c1.uid = (char *)UID1;
        pr.claims = claims;
        pr.n_claims = 1;
        n = protobuf_c_message_pack(&pr.base, buf);
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
        };

        return cmocka_run_group_tests(tests, NULL, NULL);
}
