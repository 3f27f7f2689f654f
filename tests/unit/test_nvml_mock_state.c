/* The mock libnvidia-ml.so.1's instance state file (KDEV_MOCK_NVML_STATE)
 * and `crash-after` (kdevMockCrashAfter): GPU and compute instances outlive
 * nvmlShutdown, kdevMockReset and the process (fork, SIGKILL), with the same
 * ids, placements, MIG UUIDs and occupancy; bad state files are ignored with
 * an exact message. mig-h100-80gb-dynamic.yaml: GPU 0 MIG on and empty,
 * GPU 1 MIG off, GPU 2 not MIG capable. */
#define _XOPEN_SOURCE 700
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "mock_fixture.h"
#include "nvml/loader.h"

#define GPU0 "GPU-3e5f7a9b-1c2d-4e3f-8a5b-6c7d8e9f0a1b"
#define GPU1 "GPU-5a7b9c1d-3e4f-4a5b-9c6d-7e8f9a0b1c2d"
#define GPU2 "GPU-7c9d1e3f-5a6b-4c7d-8e9f-0a1b2c3d4e5f"
/* GPU 0, GI 1, CI 0 */
#define MIG_3G_AT_4 "MIG-0203dd0e-c32e-54df-94fa-fe2eda393992"
#define DYN TOPO("mig-h100-80gb-dynamic.yaml")

#define HEADER "kdev-mock-nvml-state 1\n"
#define EMPTY_GPUS                                                                          \
        "gpu " GPU1 " mig-mode 0 pending 0\n"                                               \
        "gpu " GPU2 " mig-mode 0 pending 0\n"

struct fx {
        struct mock_nvml m;
        const struct kdev_nvml_api *n;
        char dir[64];
        char state[128];
};

static int setup(void **state)
{
        struct fx *f = calloc(1, sizeof(*f));
        if (!f || mock_nvml_open(&f->m) != 0 ||
            mock_tmpdir(f->dir, sizeof(f->dir), "kdev-nvml-state") != 0)
                return -1;
        f->n = kdev_nvml_api(f->m.lib);
        snprintf(f->state, sizeof(f->state), "%s/state", f->dir);
        setenv("KDEV_MOCK_NVML_TOPOLOGY", DYN, 1);
        setenv("KDEV_MOCK_NVML_STATE", f->state, 1);
        unsetenv("KDEV_MOCK_NVML_CONTROL");
        f->m.reset();
        *state = f;
        return 0;
}

static int teardown(void **state)
{
        struct fx *f = *state;
        while (f->m.count() > 0)
                f->n->nvmlShutdown();
        unsetenv("KDEV_MOCK_NVML_STATE");
        unsetenv("KDEV_MOCK_NVML_CONTROL");
        mock_nvml_close(&f->m);
        mock_rmtree(f->dir);
        free(f);
        return 0;
}

/* Every NVML reference dropped, then nvmlInit: the same process again. */
static void restart(struct fx *f)
{
        while (f->m.count() > 0)
                assert_int_equal(f->n->nvmlShutdown(), NVML_SUCCESS);
        assert_int_equal(f->n->nvmlInit(), NVML_SUCCESS);
}

/* nvmlShutdown, kdevMockReset and nvmlInit: the topology loaded anew. */
static void reload(struct fx *f)
{
        while (f->m.count() > 0)
                assert_int_equal(f->n->nvmlShutdown(), NVML_SUCCESS);
        f->m.reset();
        assert_int_equal(f->n->nvmlInit(), NVML_SUCCESS);
}

static nvmlDevice_t gpu(struct fx *f, unsigned i)
{
        nvmlDevice_t d = NULL;
        assert_int_equal(f->n->nvmlDeviceGetHandleByIndex(i, &d), NVML_SUCCESS);
        return d;
}

static char *slurp(const char *path)
{
        FILE *fp = fopen(path, "r");
        assert_non_null(fp);
        static char buf[16384];
        size_t n = fread(buf, 1, sizeof(buf) - 1, fp);
        fclose(fp);
        buf[n] = '\0';
        return buf;
}

static void put(const char *path, const char *text)
{
        FILE *fp = fopen(path, "w");
        assert_non_null(fp);
        fputs(text, fp);
        assert_int_equal(fclose(fp), 0);
}

static void append(const char *path, const char *line)
{
        FILE *fp = fopen(path, "a");
        assert_non_null(fp);
        fputs(line, fp);
        assert_int_equal(fclose(fp), 0);
}

/* The 3g.40gb instance at memory slice 4 on GPU 0 is there: GI 1 {4, 4},
 * CI 0 {0, 3}, MIG device 0 with its UUID, and it takes its slices. */
static void check_3g_at_4(struct fx *f)
{
        const struct kdev_nvml_api *n = f->n;
        nvmlDevice_t g0 = gpu(f, 0), m = NULL, d = NULL;
        nvmlGpuInstance_t gi = NULL;
        assert_int_equal(n->nvmlDeviceGetGpuInstanceById(g0, 1, &gi), NVML_SUCCESS);
        nvmlGpuInstanceInfo_t in;
        assert_int_equal(n->nvmlGpuInstanceGetInfo(gi, &in), NVML_SUCCESS);
        assert_ptr_equal(in.device, g0);
        assert_int_equal(in.id, 1);
        assert_int_equal(in.profileId, 9);
        assert_int_equal(in.placement.start, 4);
        assert_int_equal(in.placement.size, 4);
        nvmlGpuInstance_t list[4] = { NULL };
        unsigned c = 0;
        assert_int_equal(n->nvmlDeviceGetGpuInstances(g0, 9, list, &c), NVML_SUCCESS);
        assert_int_equal(c, 1);
        assert_ptr_equal(list[0], gi);
        nvmlComputeInstance_t ci = NULL;
        assert_int_equal(n->nvmlGpuInstanceGetComputeInstanceById(gi, 0, &ci), NVML_SUCCESS);
        nvmlComputeInstanceInfo_t cin;
        assert_int_equal(n->nvmlComputeInstanceGetInfo(ci, &cin), NVML_SUCCESS);
        assert_ptr_equal(cin.gpuInstance, gi);
        assert_int_equal(cin.id, 0);
        assert_int_equal(cin.profileId, NVML_COMPUTE_INSTANCE_PROFILE_3_SLICE);
        assert_int_equal(cin.placement.start, 0);
        assert_int_equal(cin.placement.size, 3);
        assert_int_equal(n->nvmlDeviceGetMigDeviceHandleByIndex(g0, 0, &m), NVML_SUCCESS);
        assert_int_equal(n->nvmlDeviceGetMigDeviceHandleByIndex(g0, 1, &d), NVML_ERROR_NOT_FOUND);
        char uuid[96], name[96];
        assert_int_equal(n->nvmlDeviceGetUUID(m, uuid, sizeof(uuid)), NVML_SUCCESS);
        assert_string_equal(uuid, MIG_3G_AT_4);
        assert_int_equal(n->nvmlDeviceGetHandleByUUID(MIG_3G_AT_4, &d), NVML_SUCCESS);
        assert_ptr_equal(d, m);
        assert_int_equal(n->nvmlDeviceGetName(m, name, sizeof(name)), NVML_SUCCESS);
        assert_string_equal(name, "NVIDIA H100 80GB HBM3 MIG 3g.40gb");
        unsigned id = 9;
        assert_int_equal(n->nvmlDeviceGetGpuInstanceId(m, &id), NVML_SUCCESS);
        assert_int_equal(id, 1);
        assert_int_equal(n->nvmlDeviceGetComputeInstanceId(m, &id), NVML_SUCCESS);
        assert_int_equal(id, 0);
        /* occupancy: memory slices 4..7 and the GI's compute slices taken */
        nvmlGpuInstancePlacement_t p = { .start = 4, .size = 2 };
        nvmlGpuInstance_t x = NULL;
        assert_int_equal(n->nvmlDeviceCreateGpuInstanceWithPlacement(g0, 14, &p, &x),
                         NVML_ERROR_INSUFFICIENT_RESOURCES);
        p = (nvmlGpuInstancePlacement_t){ .start = 4, .size = 4 };
        assert_int_equal(n->nvmlDeviceCreateGpuInstanceWithPlacement(g0, 9, &p, &x),
                         NVML_ERROR_INSUFFICIENT_RESOURCES);
        assert_int_equal(n->nvmlDeviceCreateGpuInstance(g0, 0, &x),
                         NVML_ERROR_INSUFFICIENT_RESOURCES);
        assert_null(x);
        nvmlComputeInstance_t y = NULL;
        assert_int_equal(n->nvmlGpuInstanceCreateComputeInstance(
                                 gi, NVML_COMPUTE_INSTANCE_PROFILE_1_SLICE, &y),
                         NVML_ERROR_INSUFFICIENT_RESOURCES);
}

/* GPU 0 holds no instance at all. */
static void check_empty(struct fx *f)
{
        const struct kdev_nvml_api *n = f->n;
        nvmlDevice_t g0 = gpu(f, 0), d = NULL;
        nvmlGpuInstance_t gi = NULL;
        assert_int_equal(n->nvmlDeviceGetGpuInstanceById(g0, 1, &gi), NVML_ERROR_NOT_FOUND);
        assert_int_equal(n->nvmlDeviceGetMigDeviceHandleByIndex(g0, 0, &d), NVML_ERROR_NOT_FOUND);
        assert_int_equal(n->nvmlDeviceGetHandleByUUID(MIG_3G_AT_4, &d), NVML_ERROR_NOT_FOUND);
        unsigned c = 9;
        assert_int_equal(n->nvmlDeviceGetGpuInstanceRemainingCapacity(g0, 0, &c), NVML_SUCCESS);
        assert_int_equal(c, 1);
}

/* With only the 3g.40gb at slice 4: one more 3g.40gb, four 1g.10gb. */
static void check_3g_at_4_alone(struct fx *f)
{
        check_3g_at_4(f);
        unsigned c = 0;
        nvmlDevice_t g0 = gpu(f, 0);
        assert_int_equal(f->n->nvmlDeviceGetGpuInstanceRemainingCapacity(g0, 9, &c),
                         NVML_SUCCESS);
        assert_int_equal(c, 1);
        assert_int_equal(f->n->nvmlDeviceGetGpuInstanceRemainingCapacity(g0, 19, &c),
                         NVML_SUCCESS);
        assert_int_equal(c, 4);
}

static const char state_3g_at_4[] =
        HEADER
        "gpu " GPU0 " mig-mode 1 pending 1\n"
        "gi slot 0 id 1 profile 2 start 4 size 4\n"
        "ci slot 0 gi 1 id 0 profile 2 start 0 present 1 uuid " MIG_3G_AT_4 "\n"
        EMPTY_GPUS;

/* 3g.40gb at slice 4 with its compute instance, through shutdown/init, a
 * kdevMockReset reload, and gone after destruction and a reload. */
static void test_state_survives_reload(void **state)
{
        struct fx *f = *state;
        const struct kdev_nvml_api *n = f->n;
        assert_int_equal(n->nvmlInit(), NVML_SUCCESS);
        assert_int_equal(access(f->state, F_OK), -1);   /* no change yet, no file */
        nvmlDevice_t g0 = gpu(f, 0);
        nvmlGpuInstancePlacement_t p = { .start = 4, .size = 4 };
        nvmlGpuInstance_t gi = NULL;
        assert_int_equal(n->nvmlDeviceCreateGpuInstanceWithPlacement(g0, 9, &p, &gi),
                         NVML_SUCCESS);
        assert_string_equal(slurp(f->state), HEADER "gpu " GPU0 " mig-mode 1 pending 1\n"
                                             "gi slot 0 id 1 profile 2 start 4 size 4\n"
                                             EMPTY_GPUS);
        nvmlComputeInstance_t ci = NULL;
        assert_int_equal(n->nvmlGpuInstanceCreateComputeInstance(
                                 gi, NVML_COMPUTE_INSTANCE_PROFILE_3_SLICE, &ci),
                         NVML_SUCCESS);
        assert_string_equal(slurp(f->state), state_3g_at_4);
        assert_string_equal(f->m.state_error(), "");
        check_3g_at_4_alone(f);

        /* the same process after nvmlShutdown / nvmlInit */
        restart(f);
        check_3g_at_4_alone(f);
        /* the topology loaded again: the state file brings them back */
        reload(f);
        check_3g_at_4_alone(f);
        assert_string_equal(f->m.state_error(), "");
        /* the failed creations above changed nothing */
        assert_string_equal(slurp(f->state), state_3g_at_4);
        /* without the state file the topology alone has none */
        unsetenv("KDEV_MOCK_NVML_STATE");
        reload(f);
        check_empty(f);
        setenv("KDEV_MOCK_NVML_STATE", f->state, 1);
        reload(f);
        check_3g_at_4(f);

        /* destroyed: the file says so, and a reload has none */
        g0 = gpu(f, 0);
        assert_int_equal(n->nvmlDeviceGetGpuInstanceById(g0, 1, &gi), NVML_SUCCESS);
        assert_int_equal(n->nvmlGpuInstanceGetComputeInstanceById(gi, 0, &ci), NVML_SUCCESS);
        assert_int_equal(n->nvmlComputeInstanceDestroy(ci), NVML_SUCCESS);
        assert_string_equal(slurp(f->state), HEADER "gpu " GPU0 " mig-mode 1 pending 1\n"
                                             "gi slot 0 id 1 profile 2 start 4 size 4\n"
                                             EMPTY_GPUS);
        assert_int_equal(n->nvmlGpuInstanceDestroy(gi), NVML_SUCCESS);
        assert_string_equal(slurp(f->state),
                            HEADER "gpu " GPU0 " mig-mode 1 pending 1\n" EMPTY_GPUS);
        reload(f);
        check_empty(f);
        restart(f);
        check_empty(f);
        /* the same instance made again: the same ids and UUID */
        g0 = gpu(f, 0);
        assert_int_equal(n->nvmlDeviceCreateGpuInstanceWithPlacement(g0, 9, &p, &gi),
                         NVML_SUCCESS);
        assert_int_equal(n->nvmlGpuInstanceCreateComputeInstance(
                                 gi, NVML_COMPUTE_INSTANCE_PROFILE_3_SLICE, &ci),
                         NVML_SUCCESS);
        assert_string_equal(slurp(f->state), state_3g_at_4);
}

/* The control lines mig-mode, mig-destroy and mig-create are kept too, and
 * a static topology's devices (their own UUIDs) come back as they were. */
static void test_state_controls(void **state)
{
        struct fx *f = *state;
        const struct kdev_nvml_api *n = f->n;
        char ctl[160];
        snprintf(ctl, sizeof(ctl), "%s/control", f->dir);
        put(ctl, "");
        setenv("KDEV_MOCK_NVML_CONTROL", ctl, 1);
        assert_int_equal(n->nvmlInit(), NVML_SUCCESS);
        append(ctl, "mig-mode " GPU1 " 1\n");
        unsigned cur = 9, pend = 9;
        assert_int_equal(n->nvmlDeviceGetMigMode(gpu(f, 1), &cur, &pend), NVML_SUCCESS);
        assert_int_equal(cur, 1);
        assert_string_equal(slurp(f->state), HEADER "gpu " GPU0 " mig-mode 1 pending 1\n"
                                             "gpu " GPU1 " mig-mode 1 pending 1\n"
                                             "gpu " GPU2 " mig-mode 0 pending 0\n");
        unsetenv("KDEV_MOCK_NVML_CONTROL");
        reload(f);
        assert_int_equal(n->nvmlDeviceGetMigMode(gpu(f, 1), &cur, &pend), NVML_SUCCESS);
        assert_int_equal(cur, 1);
        assert_int_equal(pend, 1);

        /* a static topology: GPU 0's 3g.40gb (GI 2) removed and back */
#define H100_G0 "GPU-0d4a9c1e-5b7f-4e2a-9c3d-1f2e3a4b5c6d"
#define H100_M0 "MIG-2b8e4f10-7c3a-5d9e-8f1a-3c5e7a9b1d2f"
        unlink(f->state);
        setenv("KDEV_MOCK_NVML_TOPOLOGY", TOPO("mig-h100-80gb.yaml"), 1);
        reload(f);
        put(ctl, "");
        setenv("KDEV_MOCK_NVML_CONTROL", ctl, 1);
        append(ctl, "mig-destroy " H100_M0 "\n");
        nvmlDevice_t d = NULL;
        assert_int_equal(n->nvmlDeviceGetHandleByUUID(H100_M0, &d), NVML_ERROR_NOT_FOUND);
        const char *text = slurp(f->state);
        assert_non_null(strstr(text, "gpu " H100_G0 " mig-mode 1 pending 1\n"
                                     "gi slot 0 id 2 profile 2 start 4 size 4\n"
                                     "gi slot 1 id 3 profile 1 start 0 size 2\n"
                                     "gi slot 2 id 5 profile 9 start 2 size 2\n"
                                     "ci slot 0 gi 2 id 0 profile 2 start 0 present 0 uuid "
                                     H100_M0 "\n"));
        unsetenv("KDEV_MOCK_NVML_CONTROL");
        reload(f);
        assert_int_equal(n->nvmlDeviceGetHandleByUUID(H100_M0, &d), NVML_ERROR_NOT_FOUND);
        assert_int_equal(n->nvmlDeviceGetMigDeviceHandleByIndex(gpu(f, 0), 0, &d),
                         NVML_ERROR_NOT_FOUND);
        assert_string_equal(f->m.state_error(), "");
        setenv("KDEV_MOCK_NVML_CONTROL", ctl, 1);
        append(ctl, "mig-create " H100_M0 "\n");
        assert_int_equal(n->nvmlDeviceGetHandleByUUID(H100_M0, &d), NVML_SUCCESS);
        unsetenv("KDEV_MOCK_NVML_CONTROL");
        reload(f);
        nvmlDevice_t m = NULL;
        assert_int_equal(n->nvmlDeviceGetHandleByUUID(H100_M0, &d), NVML_SUCCESS);
        assert_int_equal(n->nvmlDeviceGetMigDeviceHandleByIndex(gpu(f, 0), 0, &m), NVML_SUCCESS);
        assert_ptr_equal(d, m);
        unsigned id = 9;
        assert_int_equal(n->nvmlDeviceGetGpuInstanceId(m, &id), NVML_SUCCESS);
        assert_int_equal(id, 2);
#undef H100_G0
#undef H100_M0
}

/* Every shipped topology's own instances pass as a state file: written,
 * applied after a reload and written again, the same text. */
static void test_state_round_trip(void **state)
{
        struct fx *f = *state;
        const struct kdev_nvml_api *n = f->n;
        static const char *const topologies[] = {
                TOPO("mig-a100-40gb.yaml"),        TOPO("mig-a100-80gb-single.yaml"),
                TOPO("mig-h100-80gb-8x-mixed.yaml"), TOPO("mig-h100-80gb-dynamic.yaml"),
                TOPO("mig-h100-80gb.yaml"),        TOPO("mig-h200.yaml"),
                TOPO("h100-80gb-8x-nvswitch.yaml"),
        };
        for (size_t t = 0; t < sizeof(topologies) / sizeof(topologies[0]); t++) {
                unlink(f->state);
                setenv("KDEV_MOCK_NVML_TOPOLOGY", topologies[t], 1);
                reload(f);
                /* a MIG GPU set to the mode it has writes the file */
                char uuid[96] = "";
                unsigned count = 0, cur = 0, pend = 0;
                assert_int_equal(n->nvmlDeviceGetCount(&count), NVML_SUCCESS);
                for (unsigned i = 0; i < count && !uuid[0]; i++)
                        if (n->nvmlDeviceGetMigMode(gpu(f, i), &cur, &pend) == NVML_SUCCESS &&
                            cur == pend)
                                assert_int_equal(n->nvmlDeviceGetUUID(gpu(f, i), uuid, 96),
                                                 NVML_SUCCESS);
                assert_true(uuid[0]);
                assert_int_equal(f->m.set_mig_mode(uuid, cur), NVML_SUCCESS);
                char first[16384];
                snprintf(first, sizeof(first), "%s", slurp(f->state));
                reload(f);
                assert_string_equal(f->m.state_error(), "");
                assert_int_equal(f->m.set_mig_mode(uuid, cur), NVML_SUCCESS);
                assert_string_equal(slurp(f->state), first);
        }
}

/* Runs |fn| in a child process; returns its wait status. */
static int in_child(struct fx *f, int (*fn)(struct fx *))
{
        fflush(NULL);
        pid_t pid = fork();
        assert_true(pid >= 0);
        if (pid == 0)
                _exit(fn(f));
        int st = 0;
        assert_int_equal(waitpid(pid, &st, 0), pid);
        return st;
}

/* GI 1 (3g.40gb at 4), killed in making its compute instance. */
static int child_create(struct fx *f)
{
        const struct kdev_nvml_api *n = f->n;
        nvmlDevice_t g0 = NULL;
        nvmlGpuInstancePlacement_t p = { .start = 4, .size = 4 };
        nvmlGpuInstance_t gi = NULL;
        nvmlComputeInstance_t ci = NULL;
        if (f->m.crash_after("nvmlGpuInstanceCreateComputeInstance", 1) != NVML_SUCCESS)
                return 10;
        if (n->nvmlDeviceGetHandleByIndex(0, &g0) != NVML_SUCCESS ||
            n->nvmlDeviceCreateGpuInstanceWithPlacement(g0, 9, &p, &gi) != NVML_SUCCESS)
                return 11;
        n->nvmlGpuInstanceCreateComputeInstance(gi, NVML_COMPUTE_INSTANCE_PROFILE_3_SLICE,
                                                &ci);
        return 12;      /* not reached */
}

/* Through the control file: the second GPU instance creation kills. */
static int child_control(struct fx *f)
{
        const struct kdev_nvml_api *n = f->n;
        char ctl[160];
        snprintf(ctl, sizeof(ctl), "%s/control", f->dir);
        FILE *fp = fopen(ctl, "w");
        if (!fp || fputs("crash-after nvmlDeviceCreateGpuInstanceWithPlacement 2\n", fp) < 0 ||
            fclose(fp) != 0)
                return 10;
        setenv("KDEV_MOCK_NVML_CONTROL", ctl, 1);
        nvmlDevice_t g0 = NULL;
        nvmlGpuInstance_t gi = NULL;
        if (n->nvmlDeviceGetHandleByIndex(0, &g0) != NVML_SUCCESS)
                return 11;
        for (unsigned s = 0; s < 2; s++) {
                nvmlGpuInstancePlacement_t p = { .start = s, .size = 1 };
                if (n->nvmlDeviceCreateGpuInstanceWithPlacement(g0, 19, &p, &gi) != NVML_SUCCESS)
                        return 12;
        }
        return 13;
}

/* Destroys GI 1's compute instance, then is killed in destroying GI 1. */
static int child_destroy(struct fx *f)
{
        const struct kdev_nvml_api *n = f->n;
        nvmlDevice_t g0 = NULL;
        nvmlGpuInstance_t gi = NULL;
        nvmlComputeInstance_t ci = NULL;
        if (f->m.crash_after("nvmlGpuInstanceDestroy", 1) != NVML_SUCCESS)
                return 10;
        if (n->nvmlDeviceGetHandleByIndex(0, &g0) != NVML_SUCCESS ||
            n->nvmlDeviceGetGpuInstanceById(g0, 1, &gi) != NVML_SUCCESS ||
            n->nvmlGpuInstanceGetComputeInstanceById(gi, 0, &ci) != NVML_SUCCESS ||
            n->nvmlComputeInstanceDestroy(ci) != NVML_SUCCESS)
                return 11;
        n->nvmlGpuInstanceDestroy(gi);
        return 12;
}

/* Armed, then disarmed by count 0 or kdevMockReset: no crash. */
static int child_disarmed(struct fx *f)
{
        const struct kdev_nvml_api *n = f->n;
        nvmlDevice_t g0 = NULL;
        nvmlGpuInstance_t gi = NULL;
        if (f->m.crash_after("nvmlDeviceCreateGpuInstance", 1) != NVML_SUCCESS ||
            f->m.crash_after("nvmlDeviceCreateGpuInstance", 0) != NVML_SUCCESS ||
            f->m.crash_after("nvmlGpuInstanceDestroy", 1) != NVML_SUCCESS)
                return 10;
        while (f->m.count() > 0)
                n->nvmlShutdown();
        f->m.reset();
        if (n->nvmlInit() != NVML_SUCCESS || n->nvmlDeviceGetHandleByIndex(0, &g0) != 0 ||
            n->nvmlDeviceCreateGpuInstance(g0, 9, &gi) != NVML_SUCCESS ||
            n->nvmlGpuInstanceDestroy(gi) != NVML_SUCCESS)
                return 11;
        return 0;
}

static void test_crash_after(void **state)
{
        struct fx *f = *state;
        const struct kdev_nvml_api *n = f->n;
        assert_int_equal(n->nvmlInit(), NVML_SUCCESS);
        int st = in_child(f, child_create);
        assert_true(WIFSIGNALED(st));
        assert_int_equal(WTERMSIG(st), SIGKILL);
        /* made and written before the kill */
        assert_string_equal(slurp(f->state), state_3g_at_4);
        /* this process has not looked again yet */
        nvmlGpuInstance_t gi = NULL;
        assert_int_equal(n->nvmlDeviceGetGpuInstanceById(gpu(f, 0), 1, &gi),
                         NVML_ERROR_NOT_FOUND);
        /* a new look (init count 0 -> 1) finds what the killed one left */
        restart(f);
        check_3g_at_4_alone(f);
        reload(f);
        check_3g_at_4_alone(f);

        /* `crash-after <fn> <count>`: the second call */
        st = in_child(f, child_control);
        assert_true(WIFSIGNALED(st));
        assert_int_equal(WTERMSIG(st), SIGKILL);
        restart(f);
        check_3g_at_4(f);
        nvmlGpuInstanceInfo_t in;
        for (unsigned id = 2; id <= 3; id++) {
                assert_int_equal(n->nvmlDeviceGetGpuInstanceById(gpu(f, 0), id, &gi),
                                 NVML_SUCCESS);
                assert_int_equal(n->nvmlGpuInstanceGetInfo(gi, &in), NVML_SUCCESS);
                assert_int_equal(in.profileId, 19);
                assert_int_equal(in.placement.start, id - 2);
                assert_int_equal(in.placement.size, 1);
        }

        /* killed in a destruction: it is done */
        st = in_child(f, child_destroy);
        assert_true(WIFSIGNALED(st));
        assert_int_equal(WTERMSIG(st), SIGKILL);
        reload(f);
        assert_int_equal(n->nvmlDeviceGetGpuInstanceById(gpu(f, 0), 1, &gi),
                         NVML_ERROR_NOT_FOUND);
        assert_int_equal(n->nvmlDeviceGetGpuInstanceById(gpu(f, 0), 2, &gi), NVML_SUCCESS);
        assert_string_equal(slurp(f->state), HEADER "gpu " GPU0 " mig-mode 1 pending 1\n"
                                             "gi slot 1 id 2 profile 0 start 0 size 1\n"
                                             "gi slot 2 id 3 profile 0 start 1 size 1\n"
                                             EMPTY_GPUS);

        /* disarmed: the child runs to its end */
        st = in_child(f, child_disarmed);
        assert_true(WIFEXITED(st));
        assert_int_equal(WEXITSTATUS(st), 0);
        /* only the instance-changing entry points */
        assert_int_equal(f->m.crash_after("nvmlDeviceGetCount", 1), NVML_ERROR_INVALID_ARGUMENT);
        assert_int_equal(f->m.crash_after("nvmlGpuInstanceCreateComputeInstance_v2", 1),
                         NVML_ERROR_INVALID_ARGUMENT);
        assert_int_equal(f->m.crash_after(NULL, 1), NVML_ERROR_INVALID_ARGUMENT);
}

/* Bad state files: ignored as a whole (the topology's instances stay),
 * the reason in kdevMockLastStateError as "file:line: message". */
static void test_state_rejected(void **state)
{
        struct fx *f = *state;
        const struct kdev_nvml_api *n = f->n;
#define G0L "gpu " GPU0 " mig-mode 1 pending 1\n"
#define GI1 "gi slot 0 id 1 profile 2 start 4 size 4\n"
        static const struct {
                const char *text;
                const char *msg;        /* after "<file>:" */
        } cases[] = {
                { "", "1: the first line must be \"kdev-mock-nvml-state 1\"" },
                { "kdev-mock-nvml-state 2\n",
                  "1: the first line must be \"kdev-mock-nvml-state 1\"" },
                { "# comment\n" G0L, "2: the first line must be \"kdev-mock-nvml-state 1\"" },
                { HEADER "gpu GPU-00000000-0000-0000-0000-000000000000 mig-mode 1 pending 1\n",
                  "2: GPU GPU-00000000-0000-0000-0000-000000000000 is not in the topology "
                  DYN },
                { HEADER GI1, "2: gi line before any gpu line" },
                { HEADER "bogus line\n", "2: unknown line \"bogus\"" },
                { HEADER G0L "gi slot 0 id 1\n",
                  "3: expected \"gi slot <n> id <n> profile <n> start <n> size <n>\"" },
                { HEADER "gpu " GPU0 " mig-mode 2 pending 1\n",
                  "2: gpu mig-mode must be a number from 0 to 1" },
                { HEADER G0L "gi slot 9 id 1 profile 2 start 4 size 4\n",
                  "3: gi slot must be a number from 0 to 7" },
                { HEADER G0L "gi slot 0 id 1 profile -2 start 4 size 4\n",
                  "3: gi profile must be a number from 0 to 17" },
                { HEADER G0L "gi slot 0 id 1 profile 0x8 start 4 size 4\n",
                  "3: GPU instance profile index 8 is not in the mig_profiles of " GPU0 },
                { HEADER G0L "gi slot 0 id 1 profile 2 start 6 size 4\n",
                  "3: GPU instance placement {6, 4} is not within the 8 memory slices" },
                { HEADER G0L GI1 "gi slot 1 id 2 profile 0 start 5 size 1\n",
                  "4: GPU instance placement {5, 1} overlaps GPU instance 1" },
                { HEADER G0L GI1 "gi slot 1 id 1 profile 0 start 0 size 1\n",
                  "4: GPU instance id 1 repeated" },
                { HEADER G0L GI1 "gi slot 0 id 2 profile 0 start 0 size 1\n",
                  "4: GPU instance slot 0 repeated" },
                { HEADER G0L GI1 "ci slot 0 gi 7 id 0 profile 2 start 0 present 1 uuid MIG-x\n",
                  "4: no GPU instance 7 on " GPU0 " before this line" },
                { HEADER G0L GI1 "ci slot 7 gi 1 id 0 profile 2 start 0 present 1 uuid MIG-x\n",
                  "4: MIG device slot 7 is not below max_devices (7) of " GPU0 },
                { HEADER G0L GI1 "ci slot 0 gi 1 id 0 profile 4 start 0 present 1 uuid MIG-x\n",
                  "4: compute instance profile 4 does not fit GPU instance 1" },
                { HEADER G0L GI1 "ci slot 0 gi 1 id 0 profile 1 start 2 present 1 uuid MIG-x\n",
                  "4: compute placement {2, 2} is not within the 3 slices of GPU instance 1" },
                { HEADER G0L GI1 "ci slot 0 gi 1 id 0 profile 1 start 0 present 1 uuid MIG-x\n"
                                 "ci slot 1 gi 1 id 1 profile 0 start 1 present 1 uuid MIG-y\n",
                  "5: compute placement {1, 1} overlaps compute instance 0 of GPU instance 1" },
                { HEADER G0L GI1 "ci slot 0 gi 1 id 0 profile 0 start 0 present 1 uuid MIG-x\n"
                                 "ci slot 1 gi 1 id 0 profile 0 start 1 present 1 uuid MIG-y\n",
                  "5: compute instance id 0 repeated in GPU instance 1" },
                { HEADER G0L GI1 "ci slot 0 gi 1 id 0 profile 0 start 0 present 1 uuid MIG-x\n"
                                 "ci slot 1 gi 1 id 1 profile 0 start 1 present 1 uuid MIG-x\n",
                  "5: MIG UUID MIG-x repeated" },
                { HEADER G0L GI1 "ci slot 0 gi 1 id 0 profile 0 start 0 present 1 uuid " GPU1
                                 "\n",
                  "4: MIG UUID " GPU1 " names a GPU" },
                { HEADER G0L G0L, "3: GPU " GPU0 " repeated" },
                { HEADER "gpu " GPU1 " mig-mode 1 pending 1\n"
                         "gpu " GPU2 " mig-mode 1 pending 1\n",
                  "3: GPU " GPU2 " is not MIG capable" },
                { HEADER "gpu " GPU2 " mig-mode 0 pending 0\n" GI1,
                  "3: GPU " GPU2 " is not MIG capable" },
                { HEADER G0L GI1, NULL },       /* no newline: below */
        };
        char want[512];
        for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
                const char *msg = cases[i].msg;
                if (!msg) {
                        put(f->state, HEADER G0L "gi slot 0 id 1 profile 2 start 4 size 4");
                        msg = "3: the last line has no newline (a cut file)";
                } else {
                        put(f->state, cases[i].text);
                }
                snprintf(want, sizeof(want), "%s:%s", f->state, msg);
                reload(f);
                assert_string_equal(f->m.state_error(), want);
                check_empty(f);
                unsigned cur = 9, pend = 9;
                assert_int_equal(n->nvmlDeviceGetMigMode(gpu(f, 1), &cur, &pend), NVML_SUCCESS);
                assert_int_equal(cur, 0);
                /* read again (and refused again) at the next init */
                restart(f);
                assert_string_equal(f->m.state_error(), want);
                check_empty(f);
        }
#undef G0L
#undef GI1
        /* the next change writes a good file over the bad one */
        nvmlGpuInstancePlacement_t p = { .start = 4, .size = 4 };
        nvmlGpuInstance_t gi = NULL;
        nvmlComputeInstance_t ci = NULL;
        assert_int_equal(n->nvmlDeviceCreateGpuInstanceWithPlacement(gpu(f, 0), 9, &p, &gi),
                         NVML_SUCCESS);
        assert_string_equal(f->m.state_error(), "");
        assert_int_equal(n->nvmlGpuInstanceCreateComputeInstance(
                                 gi, NVML_COMPUTE_INSTANCE_PROFILE_3_SLICE, &ci),
                         NVML_SUCCESS);
        assert_string_equal(slurp(f->state), state_3g_at_4);
        reload(f);
        assert_string_equal(f->m.state_error(), "");
        check_3g_at_4(f);

        /* that file for another topology: it lacks GPU 0 */
        setenv("KDEV_MOCK_NVML_TOPOLOGY", TOPO("mig-a100-40gb.yaml"), 1);
        reload(f);
        snprintf(want, sizeof(want), "%s:2: GPU " GPU0 " is not in the topology %s", f->state,
                 TOPO("mig-a100-40gb.yaml"));
        assert_string_equal(f->m.state_error(), want);
        nvmlDevice_t d = NULL;
        assert_int_equal(n->nvmlDeviceGetHandleByUUID(MIG_3G_AT_4, &d), NVML_ERROR_NOT_FOUND);
        assert_int_equal(n->nvmlDeviceGetHandleByUUID("MIG-59bcc04e-5cf6-b753-ab18-f13e8543556f",
                                                      &d),
                         NVML_SUCCESS);   /* the topology's own */
        setenv("KDEV_MOCK_NVML_TOPOLOGY", DYN, 1);

        /* not a regular file; then no file at all: no state, no error */
        unlink(f->state);
        assert_int_equal(mkdir(f->state, 0755), 0);
        reload(f);
        snprintf(want, sizeof(want), "%s: is not a regular file (a directory)", f->state);
        assert_string_equal(f->m.state_error(), want);
        check_empty(f);
        assert_int_equal(rmdir(f->state), 0);
        reload(f);
        assert_string_equal(f->m.state_error(), "");
        check_empty(f);
        /* a file that cannot be written: the call still succeeds */
        snprintf(f->state, sizeof(f->state), "%s/no/such/dir/state", f->dir);
        setenv("KDEV_MOCK_NVML_STATE", f->state, 1);
        assert_int_equal(n->nvmlDeviceCreateGpuInstanceWithPlacement(gpu(f, 0), 9, &p, &gi),
                         NVML_SUCCESS);
        snprintf(want, sizeof(want), "%s: cannot create a file in directory %s/no/such/dir: "
                 "No such file or directory", f->state, f->dir);
        assert_string_equal(f->m.state_error(), want);
        assert_int_equal(n->nvmlGpuInstanceDestroy(gi), NVML_SUCCESS);
}

int main(void)
{
        const struct CMUnitTest tests[] = {
                cmocka_unit_test_setup_teardown(test_state_survives_reload, setup, teardown),
                cmocka_unit_test_setup_teardown(test_state_controls, setup, teardown),
                cmocka_unit_test_setup_teardown(test_state_round_trip, setup, teardown),
                cmocka_unit_test_setup_teardown(test_crash_after, setup, teardown),
                cmocka_unit_test_setup_teardown(test_state_rejected, setup, teardown),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
