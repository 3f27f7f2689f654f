/* Device plugin daemon (src/daemon/dp_daemon.h) driven in-process with a
 * generic-only configuration (no NVML is loaded): started, observed and
 * stopped without Python or kubelet. */
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
#include <uv.h>

#include "daemon/dp_daemon.h"
#include "nvidia/config.h"

struct fixture {
        char root[64];
        char config[PATH_MAX], plugin_dir[PATH_MAX], socket[PATH_MAX + 64];
        struct kdev_nvidia_config nv;
        struct kdev_dp_daemon_options o;
        int started;
        bool socket_at_start;
        bool runtime_at_start;
};

static bool is_socket(const char *path)
{
        struct stat st;
        return stat(path, &st) == 0 && S_ISSOCK(st.st_mode);
}

static int write_file(const char *path, const char *text)
{
        FILE *f = fopen(path, "w");
        if (!f)
                return -1;
        fputs(text, f);
        return fclose(f);
}

static int setup(void **state)
{
        struct fixture *f = calloc(1, sizeof(*f));
        struct kdev_err err;
        if (!f)
                return -1;
        snprintf(f->root, sizeof(f->root), "/tmp/kdev-dp-daemon-XXXXXX");
        if (!mkdtemp(f->root))
                return -1;
        snprintf(f->config, sizeof(f->config), "%s/config.yaml", f->root);
        snprintf(f->plugin_dir, sizeof(f->plugin_dir), "%s/device-plugins", f->root);
        snprintf(f->socket, sizeof(f->socket), "%s/kdev-example.com_null.sock", f->plugin_dir);
        if (mkdir(f->plugin_dir, 0750) < 0 ||
            write_file(f->config, "version: v1\n"
                                  "generic:\n"
                                  "  devices:\n"
                                  "    - name: example.com/null\n"
                                  "      groups:\n"
                                  "        - paths:\n"
                                  "            - path: /dev/null\n"
                                  "          count: 2\n") < 0 ||
            kdev_nvidia_config_init(&f->nv, &err) < 0)
                return -1;
        f->o = (struct kdev_dp_daemon_options){
                .config = f->config,
                .dp = {.plugin_dir = f->plugin_dir},
                .nv = &f->nv,
                .on_started_arg = f,
        };
        *state = f;
        return 0;
}

static int teardown(void **state)
{
        struct fixture *f = *state;
        char cmd[128];
        kdev_nvidia_config_clear(&f->nv);
        snprintf(cmd, sizeof(cmd), "rm -rf '%s'", f->root);
        int r = system(cmd);
        free(f);
        return r == 0 ? 0 : -1;
}

static void started_stop(void *arg, struct kdev_dp_daemon *d)
{
        struct fixture *f = arg;
        f->started++;
        f->socket_at_start = is_socket(f->socket);
        f->runtime_at_start = kdev_dp_daemon_runtime(d) != NULL;
        kdev_dp_daemon_stop(d, "test");
        kdev_dp_daemon_stop(d, "test"); /* a second stop does nothing */
        assert_null(kdev_dp_daemon_runtime(d));
}

/* Serving: the resource's socket exists (kdev-<name, '/' as '_'>.sock) while
 * it runs, even without kubelet; a stop returns 0 and removes it. */
static void test_serve_then_stop(void **state)
{
        struct fixture *f = *state;
        struct kdev_err err = {0};
        f->o.on_started = started_stop;
        assert_int_equal(kdev_dp_daemon_run(&f->o, &err), 0);
        assert_int_equal(f->started, 1);
        assert_true(f->socket_at_start);
        assert_true(f->runtime_at_start);
        assert_int_equal(access(f->socket, F_OK), -1);
        assert_int_equal(errno, ENOENT);
}

static void started_sigterm(void *arg, struct kdev_dp_daemon *d)
{
        struct fixture *f = arg;
        (void)d;
        f->started++;
        f->socket_at_start = is_socket(f->socket);
        raise(SIGTERM); /* handled by the daemon's signal watcher */
}

/* SIGTERM stops it the same way. */
static void test_sigterm_stops(void **state)
{
        struct fixture *f = *state;
        struct kdev_err err = {0};
        f->o.on_started = started_sigterm;
        assert_int_equal(kdev_dp_daemon_run(&f->o, &err), 0);
        assert_int_equal(f->started, 1);
        assert_true(f->socket_at_start);
        assert_int_equal(access(f->socket, F_OK), -1);
}

/* --check: the configuration and discovery succeed, the resources are
 * printed to stdout, nothing is served and on_started is not called. */
static void test_check(void **state)
{
        struct fixture *f = *state;
        struct kdev_err err = {0};
        char out[PATH_MAX + 16], text[512] = "";
        snprintf(out, sizeof(out), "%s/check.out", f->root);
        f->o.check = true;
        f->o.on_started = started_stop;
        fflush(stdout);
        int saved = dup(STDOUT_FILENO);
        assert_true(saved >= 0);
        assert_non_null(freopen(out, "w", stdout));
        int r = kdev_dp_daemon_run(&f->o, &err);
        fflush(stdout);
        assert_true(dup2(saved, STDOUT_FILENO) >= 0);
        close(saved);
        FILE *in = fopen(out, "r");
        assert_non_null(in);
        size_t n = fread(text, 1, sizeof(text) - 1, in);
        text[n] = '\0';
        fclose(in);
        assert_int_equal(r, 0);
        assert_string_equal(text, "example.com/null: 2 devices: null::0 null::1\n"
                                  "  null::0: /dev/null->/dev/null:rw\n"
                                  "  null::1: /dev/null->/dev/null:rw\n");
        assert_int_equal(f->started, 0);
        assert_int_equal(access(f->socket, F_OK), -1);
}

/* A configuration error fails the start with the file:line:column message. */
static void test_bad_config(void **state)
{
        struct fixture *f = *state;
        struct kdev_err err = {0};
        char want[PATH_MAX + 128];
        assert_int_equal(write_file(f->config, "version: v1\ngeneric:\n  devicez: []\n"), 0);
        f->o.on_started = started_stop;
        int r = kdev_dp_daemon_run(&f->o, &err);
        snprintf(want, sizeof(want),
                 "%s:3:3: generic.devicez: unknown key (expected one of: devices, rescanInterval, "
                 "gracePeriod)", f->config);
        assert_string_equal(err.msg, want);
        assert_int_equal(r, -err.code);
        assert_int_equal(err.code, EINVAL);
        assert_int_equal(f->started, 0);
}

/* A malformed KDEV_NVIDIA_REDISCOVER_INTERVAL fails the start. */
static void test_bad_rediscover_interval(void **state)
{
        struct fixture *f = *state;
        struct kdev_err err = {0};
        f->o.rediscover_interval = "0";
        f->o.on_started = started_stop;
        assert_int_equal(kdev_dp_daemon_run(&f->o, &err), -EINVAL);
        assert_string_equal(err.msg, "KDEV_NVIDIA_REDISCOVER_INTERVAL: want seconds between 0 "
                                     "and 86400, got \"0\"");
        assert_int_equal(f->started, 0);
        assert_int_equal(access(f->socket, F_OK), -1);
}

int main(void)
{
        const struct CMUnitTest tests[] = {
                cmocka_unit_test_setup_teardown(test_serve_then_stop, setup, teardown),
                cmocka_unit_test_setup_teardown(test_sigterm_stops, setup, teardown),
                cmocka_unit_test_setup_teardown(test_check, setup, teardown),
                cmocka_unit_test_setup_teardown(test_bad_config, setup, teardown),
                cmocka_unit_test_setup_teardown(test_bad_rediscover_interval, setup, teardown),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
