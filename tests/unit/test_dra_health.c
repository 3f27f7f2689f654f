/* The DRA resource health service (dra/health.h) over gRPC, plugin and
 * client on one libuv loop: NodeWatchResources answers the complete list at
 * once, again on every change (not on a repeat of the same list) and on a
 * resend; the v1 path the same; every field as sent (pool, timeout 30 s,
 * message cut to 1024 bytes, last_updated_time now); a cancelled stream is
 * gone; bad lists are refused with exact errors. */
#include <errno.h>
#include <signal.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "dra/health.h"
#include "dra/plugin.h"
#include "dra_health/v1alpha1/api.pb-c.h"
#include "rpc/rpc.h"

typedef V1alpha1__NodeWatchResourcesResponse Resp;

struct fix {
        char root[256], data[300], dra_sock[300], reg_sock[300];
        struct kdev_nvidia_gpus recs;
        struct kdev_dra_plugin *p;
        uv_loop_t loop;
        struct kdev_rpc_client *cl;
        struct kdev_rpc_client_call *call;
        char got[8][2048]; /* each message as "<name> <HEALTH> <message>;..." */
        unsigned n_got;
        int done_status;
        bool done;
        int step; /* what the next message triggers */
        char long_msg[1100];
};

static int no_source(void *arg, const char *ns, const char *name, json_t **claim,
                     struct kdev_err *err)
{
        (void)arg;
        (void)claim;
        return kdev_err_set(err, ENOENT, "no claim %s/%s", ns, name);
}

static const struct kdev_dra_device_health healthy[] = {
        {"gpu-3", KDEV_DRA_HEALTH_HEALTHY, NULL},
        {"gpu-0-mig-1g5gb-19-2", KDEV_DRA_HEALTH_HEALTHY, ""},
};

static void on_message(struct kdev_rpc_client_call *c, const uint8_t *msg, size_t len, void *ud)
{
        struct fix *f = ud;
        Resp *r = v1alpha1__node_watch_resources_response__unpack(NULL, len, msg);
        struct kdev_err err = {0};
        char *out = f->got[f->n_got < 8 ? f->n_got : 7];
        int64_t now = (int64_t)time(NULL);

        assert_non_null(r);
        out[0] = '\0';
        for (size_t i = 0; i < r->n_devices; i++) {
                V1alpha1__DeviceHealth *d = r->devices[i];
                assert_string_equal(d->device->pool_name, "node-h");
                assert_int_equal(d->health_check_timeout_seconds, 30);
                assert_true(d->last_updated_time <= now && d->last_updated_time >= now - 5);
                snprintf(out + strlen(out), 2048 - strlen(out), "%s %s %s;",
                         d->device->device_name, kdev_dra_health_status_name(d->health, false),
                         strlen(d->message) > 60 ? "(long)" : d->message);
                if (strlen(d->message) > 60)
                        assert_int_equal(strlen(d->message), KDEV_DRA_HEALTH_MESSAGE_MAX);
        }
        /* the bytes are exactly the message's own encoding */
        size_t n = protobuf_c_message_get_packed_size(&r->base);
        uint8_t *again = malloc(n ? n : 1);
        protobuf_c_message_pack(&r->base, again);
        assert_int_equal(n, len);
        assert_memory_equal(again, msg, len);
        free(again);
        v1alpha1__node_watch_resources_response__free_unpacked(r, NULL);
        f->n_got++;
        switch (f->step++) {
        case 0: { /* one MIG device faults */
                struct kdev_dra_device_health bad[] = {
                        healthy[0],
                        {"gpu-0-mig-1g5gb-19-2", KDEV_DRA_HEALTH_UNHEALTHY,
                         "critical XID 48 (GPU instance 9, compute instance 0)"},
                };
                assert_int_equal(kdev_dra_plugin_set_health(f->p, bad, 2, &err), 1);
                /* the same list again: nothing sent */
                assert_int_equal(kdev_dra_plugin_set_health(f->p, bad, 2, &err), 0);
                break;
        }
        case 1: /* a resend: the same list */
                assert_int_equal(kdev_dra_plugin_health_resend(f->p), 1);
                break;
        case 2: { /* recovery, a long message cut to kubelet's limit */
                struct kdev_dra_device_health ok[] = {
                        {"gpu-3", KDEV_DRA_HEALTH_UNKNOWN, f->long_msg},
                        {"gpu-0-mig-1g5gb-19-2", KDEV_DRA_HEALTH_HEALTHY,
                         "no critical event for 2000 ms and probe passed"},
                };
                assert_int_equal(kdev_dra_plugin_set_health(f->p, ok, 2, &err), 1);
                break;
        }
        default:
                assert_int_equal(kdev_dra_plugin_health_streams(f->p), 1);
                kdev_rpc_client_call_cancel(c);
                break;
        }
}

static void on_done(struct kdev_rpc_client_call *c, int status, const char *message, void *ud)
{
        struct fix *f = ud;

        (void)c;
        (void)message;
        f->done = true;
        f->done_status = status;
        f->call = NULL;
}

static int setup(void **state)
{
        struct fix *f = calloc(1, sizeof(*f));
        struct kdev_err err = {0};

        snprintf(f->root, sizeof(f->root), "/tmp/kdev-drahealth-XXXXXX");
        assert_non_null(mkdtemp(f->root));
        snprintf(f->data, sizeof(f->data), "%s/data", f->root);
        snprintf(f->dra_sock, sizeof(f->dra_sock), "%s/dra.sock", f->root);
        snprintf(f->reg_sock, sizeof(f->reg_sock), "%s/reg.sock", f->root);
        memset(f->long_msg, 'x', 1099);
        assert_int_equal(uv_loop_init(&f->loop), 0);
        struct kdev_dra_plugin_options o = {
                .pool = "node-h",
                .data_dir = f->root,
                .cdi_dir = f->root,
                .gpus = &f->recs,
                .get_claim = no_source,
        };
        assert_int_equal(kdev_dra_plugin_new(&o, &f->p, &err), 0);
        *state = f;
        return 0;
}

static int teardown(void **state)
{
        struct fix *f = *state;
        char cmd[400];

        kdev_dra_plugin_stop(f->p, NULL, NULL);
        kdev_rpc_client_close(f->cl);
        uv_run(&f->loop, UV_RUN_DEFAULT);
        kdev_dra_plugin_free(f->p);
        assert_int_equal(uv_loop_close(&f->loop), 0);
        snprintf(cmd, sizeof(cmd), "rm -rf '%s'", f->root);
        assert_int_equal(system(cmd), 0);
        free(f);
        return 0;
}

/* Runs the loop until the stream ended (or 10 s). */
static void run_until_done(struct fix *f)
{
        time_t end = time(NULL) + 10;

        while (!f->done && time(NULL) < end)
                uv_run(&f->loop, UV_RUN_ONCE);
        assert_true(f->done);
}

static void watch(struct fix *f, const char *method)
{
        V1alpha1__NodeWatchResourcesRequest rq = V1ALPHA1__NODE_WATCH_RESOURCES_REQUEST__INIT;
        uint8_t buf[8];
        struct kdev_err err = {0};
        size_t n = protobuf_c_message_pack(&rq.base, buf);

        assert_int_equal(n, 0); /* an empty message: 0 bytes (vector 01) */
        f->cl = kdev_rpc_client_new(&f->loop, f->dra_sock, NULL);
        assert_non_null(f->cl);
        f->call = kdev_rpc_client_call(f->cl, method, buf, n, 0, on_message, on_done, f, &err);
        assert_non_null(f->call);
}

static void test_stream(void **state)
{
        struct fix *f = *state;
        struct kdev_err err = {0};

        assert_int_equal(kdev_dra_plugin_set_health(f->p, healthy, 2, &err), 0); /* no stream */
        assert_int_equal(kdev_dra_plugin_start(f->p, &f->loop, f->dra_sock, f->reg_sock, &err), 0);
        watch(f, KDEV_DRA_HEALTH_V1ALPHA1_WATCH);
        run_until_done(f);
        assert_int_equal(f->done_status, KDEV_RPC_CANCELLED);
        assert_int_equal(f->n_got, 4);
        assert_string_equal(f->got[0], "gpu-3 HEALTHY ;gpu-0-mig-1g5gb-19-2 HEALTHY ;");
        assert_string_equal(f->got[1], "gpu-3 HEALTHY ;gpu-0-mig-1g5gb-19-2 UNHEALTHY critical "
                                       "XID 48 (GPU instance 9, compute instance 0);");
        assert_string_equal(f->got[2], f->got[1]);
        assert_string_equal(f->got[3], "gpu-3 UNKNOWN (long);gpu-0-mig-1g5gb-19-2 HEALTHY no "
                                       "critical event for 2000 ms and probe passed;");
        /* the cancelled stream is gone once the server saw the reset */
        time_t end = time(NULL) + 10;
        while (kdev_dra_plugin_health_streams(f->p) > 0 && time(NULL) < end)
                uv_run(&f->loop, UV_RUN_NOWAIT);
        assert_int_equal(kdev_dra_plugin_health_streams(f->p), 0);
        assert_int_equal(kdev_dra_plugin_health_resend(f->p), 0);
}

/* Kubernetes' later v1 path: the same stream (first message only here). */
static void test_v1_path(void **state)
{
        struct fix *f = *state;
        struct kdev_err err = {0};

        assert_int_equal(kdev_dra_plugin_set_health(f->p, healthy, 2, &err), 0);
        assert_int_equal(kdev_dra_plugin_start(f->p, &f->loop, f->dra_sock, f->reg_sock, &err), 0);
        f->step = 3; /* cancel after the first message */
        watch(f, KDEV_DRA_HEALTH_V1_WATCH);
        run_until_done(f);
        assert_int_equal(f->n_got, 1);
        assert_string_equal(f->got[0], "gpu-3 HEALTHY ;gpu-0-mig-1g5gb-19-2 HEALTHY ;");
}

static void test_bad_lists(void **state)
{
        struct fix *f = *state;
        struct kdev_err err = {0};
        struct kdev_dra_device_health bad[] = {{"gpu-3", KDEV_DRA_HEALTH_HEALTHY, NULL},
                                               {"", KDEV_DRA_HEALTH_HEALTHY, NULL}};

        assert_int_equal(kdev_dra_plugin_set_health(f->p, bad, 2, &err), -EINVAL);
        assert_string_equal(err.msg, "device health 1: no device name");
        bad[1].device = "gpu-4";
        bad[1].health = (enum kdev_dra_health_status)3;
        assert_int_equal(kdev_dra_plugin_set_health(f->p, bad, 2, &err), -EINVAL);
        assert_string_equal(err.msg, "device health of gpu-4: status 3 is not 0..2");
        assert_string_equal(kdev_dra_health_status_name(2, true), "Unhealthy");
        assert_string_equal(kdev_dra_health_status_name(1, true), "Healthy");
        assert_string_equal(kdev_dra_health_status_name(7, true), "Unknown");
        assert_string_equal(kdev_dra_health_status_name(0, false), "UNKNOWN");
}

int main(void)
{
        const struct CMUnitTest tests[] = {
                cmocka_unit_test_setup_teardown(test_stream, setup, teardown),
                cmocka_unit_test_setup_teardown(test_v1_path, setup, teardown),
                cmocka_unit_test_setup_teardown(test_bad_lists, setup, teardown),
        };
        signal(SIGPIPE, SIG_IGN);
        return cmocka_run_group_tests(tests, NULL, NULL);
}
