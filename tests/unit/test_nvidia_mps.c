/* NVIDIA MPS (mps.h): the paths, the exact commands each resource's control
 * daemon is sent for a topology and config (NVIDIA cmd/mps-control-daemon/
 * mps/daemon.go), and start / health / stop against the project's mock
 * nvidia-cuda-mps-control (mock/mps), whose log records every command,
 * failures included. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "nvidia/config.h"
#include "nvidia/mps.h"
#include "nvidia/resources.h"
#include "nvidia/sharing.h"

#include "nvidia_config_fixture.h"

#define MOCK KDEV_BUILD_DIR "/mock/mps/nvidia-cuda-mps-control"

struct env {
        struct kdev_nvidia_config cfg;
        struct kdev_resource_set set;
        struct kdev_gpu gpus[4];
        struct kdev_err err;
};

/* |n| GPUs "GPU-000<i>", index i, memory |mib| MiB (GPU 1: |mib1|), CC 9.0;
 * |yaml| applied. */
static void make(struct env *e, const char *yaml, size_t n, unsigned long long mib,
                 unsigned long long mib1)
{
        memset(e, 0, sizeof(*e));
        assert_int_equal(kdev_nvidia_config_init(&e->cfg, &e->err), 0);
        if (parse_file(&e->cfg, "mps.yaml", yaml, &e->err) != 0 ||
            kdev_nvidia_config_finish(&e->cfg, true, &e->err) != 0)
                fail_msg("%s", e->err.msg);
        for (size_t i = 0; i < n; i++) {
                struct kdev_gpu *g = &e->gpus[i];
                g->index = (unsigned)i;
                snprintf(g->uuid, sizeof(g->uuid), "GPU-000%zu", i);
                g->minor = (unsigned)i;
                g->numa_node = -1;
                g->cc_major = 9;
                g->memory_total = (i == 1 ? mib1 : mib) << 20;
        }
        struct kdev_gpu_set gs = {.gpus = e->gpus, .n_gpus = n};
        struct kdev_nvidia_build_options bo = {0};
        if (kdev_nvidia_build(&gs, &e->cfg, &bo, &e->set, &e->err) != 0 ||
            kdev_nvidia_apply_sharing(&e->set, &e->cfg, NULL, NULL, &e->err) != 0)
                fail_msg("%s", e->err.msg);
}

static void done(struct env *e)
{
        kdev_resource_set_clear(&e->set);
        kdev_nvidia_config_clear(&e->cfg);
}

/* The commands of plan entry |d| joined with '|'. */
static const char *joined(const struct kdev_nvidia_mps_daemon *d)
{
        static char buf[2048];
        size_t used = 0;
        buf[0] = '\0';
        for (size_t i = 0; i < d->n_commands; i++)
                used += (size_t)snprintf(buf + used, sizeof(buf) - used, "%s%s", i ? "|" : "",
                                         d->commands[i]);
        return buf;
}

static void test_paths(void **state)
{
        (void)state;
        static const char *const want[] = {"/run/nvidia/mps/nvidia.com/gpu/pipe",
                                           "/run/nvidia/mps/nvidia.com/gpu/log",
                                           "/run/nvidia/mps/nvidia.com/gpu/.started",
                                           "/run/nvidia/mps/shm"};
        for (int w = 0; w < 4; w++) {
                char *p = kdev_nvidia_mps_path("/run/nvidia/mps/", "nvidia.com/gpu",
                                               (enum kdev_nvidia_mps_path)w);
                assert_string_equal(p, want[w]);
                free(p);
        }
}

static void test_plan(void **state)
{
        (void)state;
        struct env e;
        /* 2 GPUs of 81559 MiB (H100 80GB), 4 replicas each: 81559 / 4 =
         * 20389 MiB (NVIDIA divides bytes, then by 2^20), 100 / 4 = 25 */
        make(&e,
             "version: v1\nflags:\n  mpsRoot: /run/nvidia/mps\n"
             "sharing:\n  mps:\n    resources: [{name: gpu, replicas: 4}]\n",
             2, 81559, 40960);
        struct kdev_nvidia_mps_daemon *d = NULL;
        size_t n = 0;
        assert_int_equal(kdev_nvidia_mps_plan(&e.set, &d, &n, &e.err), 0);
        assert_int_equal(n, 1);
        assert_string_equal(d[0].resource, "nvidia.com/gpu");
        assert_string_equal(joined(&d[0]), "set_default_device_pinned_mem_limit 0 20389M|"
                                           "set_default_device_pinned_mem_limit 1 10240M|"
                                           "set_default_active_thread_percentage 25");
        assert_int_equal(d[0].n_uuids, 2);
        assert_string_equal(d[0].uuids[1], "GPU-0001");
        kdev_nvidia_mps_plan_free(d, n);
        done(&e);
        /* time-slicing: no MPS daemon */
        make(&e, "version: v1\nsharing:\n  timeSlicing:\n    resources: [{name: gpu, replicas: 4}]\n",
             2, 81559, 81559);
        assert_int_equal(kdev_nvidia_mps_plan(&e.set, &d, &n, &e.err), 0);
        assert_int_equal(n, 0);
        kdev_nvidia_mps_plan_free(d, n);
        done(&e);
        /* renamed: the daemon is the new resource's; 3 replicas: 33 percent */
        make(&e,
             "version: v1\nflags:\n  mpsRoot: /run/nvidia/mps\n"
             "sharing:\n  mps:\n    renameByDefault: true\n"
             "    resources: [{name: gpu, replicas: 3}]\n",
             1, 24576, 0);
        assert_int_equal(kdev_nvidia_mps_plan(&e.set, &d, &n, &e.err), 0);
        assert_int_equal(n, 1);
        assert_string_equal(d[0].resource, "nvidia.com/gpu.shared");
        assert_string_equal(joined(&d[0]), "set_default_device_pinned_mem_limit 0 8192M|"
                                           "set_default_active_thread_percentage 33");
        kdev_nvidia_mps_plan_free(d, n);
        done(&e);
}

static char *slurp(const char *path)
{
        FILE *f = fopen(path, "r");
        if (!f)
                return strdup("");
        static char buf[8192];
        size_t n = fread(buf, 1, sizeof(buf) - 1, f);
        buf[n] = '\0';
        fclose(f);
        return strdup(buf);
}

static void put(const char *path, const char *text)
{
        FILE *f = fopen(path, "w");
        assert_non_null(f);
        fputs(text, f);
        fclose(f);
}

static void test_start_health_stop_with_mock(void **state)
{
        (void)state;
        char dir[] = "/tmp/kdev-mps-XXXXXX";
        assert_non_null(mkdtemp(dir));
        char log[256], ctl[256], started[256], want[4096];
        snprintf(log, sizeof(log), "%s/commands.log", dir);
        snprintf(ctl, sizeof(ctl), "%s/control", dir);
        snprintf(started, sizeof(started), "%s/nvidia.com/gpu/.started", dir);
        setenv("KDEV_MOCK_MPS_LOG", log, 1);
        setenv("KDEV_MOCK_MPS_CONTROL", ctl, 1);
        put(ctl, "");
        struct env e;
        make(&e,
             "version: v1\nflags:\n  mpsRoot: /run/nvidia/mps\n"
             "sharing:\n  mps:\n    resources: [{name: gpu, replicas: 2}]\n",
             2, 81559, 81559);
        struct kdev_nvidia_mps_daemon *d = NULL;
        size_t n = 0;
        assert_int_equal(kdev_nvidia_mps_plan(&e.set, &d, &n, &e.err), 0);
        assert_int_equal(n, 1);
        /* not started: the health query fails with NVIDIA's wording */
        assert_int_equal(kdev_nvidia_mps_health(MOCK, dir, "nvidia.com/gpu", 5000, &e.err), -EIO);
        assert_string_equal(e.err.msg, "error checking MPS daemon health: failed to send command "
                                       "to MPS daemon: exit status 1");
        assert_int_equal(kdev_nvidia_mps_start(MOCK, dir, &d[0], 5000, &e.err), 0);
        struct stat st;
        assert_int_equal(stat(started, &st), 0);
        char out[64];
        assert_int_equal(kdev_nvidia_mps_send(MOCK, dir, "nvidia.com/gpu",
                                              KDEV_NVIDIA_MPS_HEALTH_QUERY, 5000, out,
                                              sizeof(out), &e.err),
                         0);
        assert_string_equal(out, "50.0\n");
        assert_int_equal(kdev_nvidia_mps_stop(MOCK, dir, "nvidia.com/gpu", 5000, &e.err), 0);
        assert_int_equal(stat(started, &st), -1);
        char *got = slurp(log);
        snprintf(want, sizeof(want),
                 "%1$s/nvidia.com/gpu/pipe: get_default_active_thread_percentage\n"
                 "%1$s/nvidia.com/gpu/pipe: -d\n"
                 "%1$s/nvidia.com/gpu/pipe: set_default_device_pinned_mem_limit 0 40779M\n"
                 "%1$s/nvidia.com/gpu/pipe: set_default_device_pinned_mem_limit 1 40779M\n"
                 "%1$s/nvidia.com/gpu/pipe: set_default_active_thread_percentage 50\n"
                 "%1$s/nvidia.com/gpu/pipe: get_default_active_thread_percentage\n"
                 "%1$s/nvidia.com/gpu/pipe: quit\n",
                 dir);
        assert_string_equal(got, want);
        free(got);

        /* a failing command: NVIDIA's prefix, no started marker */
        put(ctl, "fail set_default_device_pinned_mem_limit\n");
        assert_int_equal(kdev_nvidia_mps_start(MOCK, dir, &d[0], 5000, &e.err), -EIO);
        assert_string_equal(e.err.msg, "error setting pinned memory limit for device 0: failed to "
                                       "send command to MPS daemon: exit status 1");
        assert_int_equal(stat(started, &st), -1);
        /* a daemon that stops answering: the query is killed at the timeout */
        put(ctl, "hang\n");
        assert_int_equal(kdev_nvidia_mps_health(MOCK, dir, "nvidia.com/gpu", 200, &e.err),
                         -ETIMEDOUT);
        assert_string_equal(e.err.msg, "error checking MPS daemon health: timed out after 200 ms");
        /* no such program */
        assert_int_equal(kdev_nvidia_mps_health(dir, dir, "nvidia.com/gpu", 2000, &e.err), -EIO);
        assert_string_equal(e.err.msg, "error checking MPS daemon health: failed to send command "
                                       "to MPS daemon: exit status 127");
        kdev_nvidia_mps_plan_free(d, n);
        done(&e);
        char cmd[512];
        snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
        assert_int_equal(system(cmd), 0);
}

int main(void)
{
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_paths),
                cmocka_unit_test(test_plan),
                cmocka_unit_test(test_start_health_stop_with_mock),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
