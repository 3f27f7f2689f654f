/* DRA daemon (src/dra/daemon.h) driven in-process on the mock NVML: started,
 * observed and stopped without Python, kubelet or an API server. */
#include <errno.h>
#include <limits.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>
#include <jansson.h>
#include <uv.h>

#include "dra/daemon.h"

#define DRIVER "gpu.nvidia.com"
#define TOPO(f) KDEV_MOCK_NVML_TOPOLOGIES "/" f

struct fixture {
        char root[64];
        char registry[PATH_MAX], plugin_dir[PATH_MAX], cdi_dir[PATH_MAX], kubeconfig[PATH_MAX];
        char dra_sock[PATH_MAX + 16], reg_sock[PATH_MAX + 32], checkpoint[PATH_MAX + 32];
        struct kdev_dra_daemon_options o;
        /* what the test saw while the daemon ran */
        uv_timer_t poll;
        bool sockets_at_start;
        struct kdev_dra_daemon_state first_failure;
        unsigned claim_calls;
        int started;
};

static int claim_source(void *arg, const char *ns, const char *name, json_t **claim,
                        struct kdev_err *err)
{
        struct fixture *f = arg;
        (void)ns;
        (void)name;
        *claim = NULL;
        f->claim_calls++;
        return kdev_err_set(err, ENOENT, "no claims in this test");
}

static bool is_socket(const char *path)
{
        struct stat st;
        return stat(path, &st) == 0 && S_ISSOCK(st.st_mode);
}

static int rm_tree(const char *dir)
{
        char cmd[PATH_MAX + 16];
        snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
        return system(cmd);
}

static int setup(void **state)
{
        struct fixture *f = calloc(1, sizeof(*f));
        if (!f)
                return -1;
        snprintf(f->root, sizeof(f->root), "/tmp/kdev-dra-daemon-XXXXXX");
        if (!mkdtemp(f->root))
                return -1;
        snprintf(f->registry, sizeof(f->registry), "%s/plugins_registry", f->root);
        snprintf(f->plugin_dir, sizeof(f->plugin_dir), "%s/plugins/" DRIVER, f->root);
        snprintf(f->cdi_dir, sizeof(f->cdi_dir), "%s/cdi", f->root);
        snprintf(f->kubeconfig, sizeof(f->kubeconfig), "%s/kubeconfig", f->root);
        snprintf(f->dra_sock, sizeof(f->dra_sock), "%s/dra.sock", f->plugin_dir);
        snprintf(f->reg_sock, sizeof(f->reg_sock), "%s/" DRIVER "-reg.sock", f->registry);
        snprintf(f->checkpoint, sizeof(f->checkpoint), "%s/dra-claims.json", f->plugin_dir);
        /* an API server that is not there: port 1 on loopback refuses */
        FILE *k = fopen(f->kubeconfig, "w");
        if (!k)
                return -1;
        fprintf(k, "apiVersion: v1\nkind: Config\ncurrent-context: t\n"
                   "clusters:\n- name: c\n  cluster:\n    server: http://127.0.0.1:1\n"
                   "users:\n- name: u\n  user:\n    token: t0k3n\n"
                   "contexts:\n- name: t\n  context:\n    cluster: c\n    user: u\n");
        fclose(k);
        setenv("KDEV_MOCK_NVML_TOPOLOGY", TOPO("h100-80gb-8x-nvswitch.yaml"), 1);
        f->o = (struct kdev_dra_daemon_options){
                .driver = DRIVER,
                .node = "node-1",
                .registry = f->registry,
                .plugin_dir = f->plugin_dir,
                .cdi_dir = f->cdi_dir,
                .kubeconfig = f->kubeconfig,
                .api_version = "v1",
                .driver_root = "/",
                .cdi_hook = "/nonexistent/nvidia-cdi-hook",
                .proc_root = "/proc",
                .resync_ms = 30000,
                .nvml_library = KDEV_MOCK_NVML_LIB,
                .on_started_arg = f,
        };
        *state = f;
        return 0;
}

static int teardown(void **state)
{
        struct fixture *f = *state;
        rm_tree(f->root);
        unsetenv("KDEV_MOCK_NVML_TOPOLOGY");
        free(f);
        return 0;
}

/* Polls the reconcile state; at the first finished reconcile records it
 * and stops the daemon. */
static void on_poll(uv_timer_t *t)
{
        struct kdev_dra_daemon *d = t->data;
        struct kdev_dra_daemon_state st;
        kdev_dra_daemon_state(d, &st);
        if (st.reconciles == 0)
                return;
        struct fixture *fx = (struct fixture *)((char *)t - offsetof(struct fixture, poll));
        fx->first_failure = st;
        uv_close((uv_handle_t *)t, NULL);
        kdev_dra_daemon_stop(d, "test");
}

static void started_poll(void *arg, struct kdev_dra_daemon *d)
{
        struct fixture *f = arg;
        f->started++;
        f->sockets_at_start = is_socket(f->dra_sock) && is_socket(f->reg_sock);
        uv_timer_init(kdev_dra_daemon_loop(d), &f->poll);
        f->poll.data = d;
        uv_timer_start(&f->poll, on_poll, 10, 10);
}

/* API server down: the first reconcile fails, the retry is due after the
 * first backoff doubled (2 s), nothing is published; a stop ends the run
 * with 0 and removes both sockets; the claim source is never asked. */
static void test_api_server_down_then_stop(void **state)
{
        struct fixture *f = *state;
        struct kdev_err err = {0};
        f->o.get_claim = claim_source;
        f->o.get_claim_arg = f;
        f->o.on_started = started_poll;
        assert_int_equal(kdev_dra_daemon_run(&f->o, &err), 0);
        assert_int_equal(f->started, 1);
        assert_true(f->sockets_at_start);
        assert_int_equal(f->first_failure.reconciles, 1);
        assert_false(f->first_failure.slices_ok);
        assert_int_equal(f->first_failure.generation, -1);
        assert_int_equal(f->first_failure.backoff_ms, 2 * KDEV_DRA_BACKOFF_FIRST_MS);
        assert_false(f->first_failure.reconciling);
        assert_false(f->first_failure.stopping);
        assert_int_equal(f->claim_calls, 0);
        assert_false(is_socket(f->dra_sock));
        assert_false(is_socket(f->reg_sock));
        assert_int_equal(access(f->dra_sock, F_OK), -1);
        assert_int_equal(access(f->reg_sock, F_OK), -1);
}

static void started_signal(void *arg, struct kdev_dra_daemon *d)
{
        struct fixture *f = arg;
        struct kdev_dra_daemon_state st;
        f->started++;
        f->sockets_at_start = is_socket(f->dra_sock) && is_socket(f->reg_sock);
        kdev_dra_daemon_state(d, &st);
        f->first_failure = st;
        raise(SIGTERM); /* handled by the daemon's signal watcher */
}

/* SIGTERM stops the daemon (the API server's claim source, never used):
 * run returns 0 and the sockets are gone. At start nothing has finished. */
static void test_sigterm_stops(void **state)
{
        struct fixture *f = *state;
        struct kdev_err err = {0};
        f->o.on_started = started_signal;
        assert_int_equal(kdev_dra_daemon_run(&f->o, &err), 0);
        assert_int_equal(f->started, 1);
        assert_true(f->sockets_at_start);
        assert_int_equal(f->first_failure.reconciles, 0);
        assert_int_equal(f->first_failure.generation, -1);
        assert_int_equal(f->first_failure.backoff_ms, KDEV_DRA_BACKOFF_FIRST_MS);
        assert_false(f->first_failure.stopping);
        assert_int_equal(access(f->dra_sock, F_OK), -1);
        assert_int_equal(access(f->reg_sock, F_OK), -1);
}

/* No NVML library: the start fails with the loader's error, never calls
 * on_started and leaves no socket; the directories exist (made first). */
static void test_no_nvml_fails(void **state)
{
        struct fixture *f = *state;
        struct kdev_err err = {0};
        char lib[PATH_MAX];
        snprintf(lib, sizeof(lib), "%s/libnvidia-ml.so.1", f->root);
        f->o.nvml_library = lib;
        f->o.on_started = started_signal;
        int r = kdev_dra_daemon_run(&f->o, &err);
        assert_true(r < 0);
        assert_int_equal(r, -err.code);
        char want[3 * PATH_MAX];
        snprintf(want, sizeof(want),
                 "NVML library %s not found: %s: cannot open shared object file: No such file "
                 "or directory", lib, lib);
        assert_string_equal(err.msg, want);
        assert_int_equal(err.code, EOPNOTSUPP); /* src/nvml/loader.c: no driver */
        assert_int_equal(f->started, 0);
        assert_int_equal(access(f->dra_sock, F_OK), -1);
        assert_int_equal(access(f->reg_sock, F_OK), -1);
        struct stat st;
        assert_int_equal(stat(f->plugin_dir, &st), 0);
        assert_true(S_ISDIR(st.st_mode));
        assert_int_equal(stat(f->registry, &st), 0);
        assert_int_equal(stat(f->cdi_dir, &st), 0);
}

int main(void)
{
        const struct CMUnitTest tests[] = {
                cmocka_unit_test_setup_teardown(test_api_server_down_then_stop, setup, teardown),
                cmocka_unit_test_setup_teardown(test_sigterm_stops, setup, teardown),
                cmocka_unit_test_setup_teardown(test_no_nvml_fails, setup, teardown),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
