/* Usage attribution (src/usage/usage.h): the container of a process from
 * /proc/<pid>/cgroup in every runtime and cgroup driver layout, and the
 * split of a device's use among the containers of the container map, with
 * fake /proc trees and share regions. The cgroup paths are the forms
 * kubelet (pkg/kubelet/cm, cgroup_manager_linux.go) and the runtimes
 * (containerd's "cri-containerd-<id>.scope", CRI-O's "crio-<id>.scope" /
 * "crio-<id>", cri-dockerd's "docker-<id>.scope") create. */
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

#include "share/region.h"
#include "usage/usage.h"

/* the claim fields of a device plugin's map entry: none */
#define DEVICE_PLUGIN NULL, NULL, NULL, NULL, NULL

#define UID "0f5c4ac8-8fd7-4a9c-9d63-4b1f1e2f3a4b"
#define UID_ "0f5c4ac8_8fd7_4a9c_9d63_4b1f1e2f3a4b"
#define UID2 "7b1e9c2d-1111-4222-8333-944455566677"
#define UID2_ "7b1e9c2d_1111_4222_8333_944455566677"
#define CID_A "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa1"
#define CID_B "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb2"
#define CID_C "ccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccc3"

#define GPU0 "GPU-11111111-2222-3333-4444-555555555555"
#define GPU1 "GPU-66666666-7777-8888-9999-000000000000"
#define MIG0 "MIG-aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee"

static char root[64];

static int setup(void **state)
{
        (void)state;
        strcpy(root, "/tmp/kdev-usage-XXXXXX");
        return mkdtemp(root) ? 0 : -1;
}

static int teardown(void **state)
{
        (void)state;
        char cmd[200];
        snprintf(cmd, sizeof(cmd), "rm -rf %s", root);
        return system(cmd) == 0 ? 0 : -1;
}

static void parse_ok(const char *text, const char *uid, const char *cid,
                     enum kdev_usage_runtime runtime, enum kdev_usage_driver driver,
                     unsigned version)
{
        struct kdev_usage_cgroup cg;
        struct kdev_err err = {0};
        assert_int_equal(kdev_usage_cgroup_parse(text, strlen(text), &cg, &err), 0);
        assert_string_equal(cg.pod_uid, uid);
        assert_string_equal(cg.container_id, cid);
        assert_int_equal(cg.runtime, runtime);
        assert_int_equal(cg.driver, driver);
        assert_int_equal(cg.version, version);
}

static void parse_host(const char *text)
{
        struct kdev_usage_cgroup cg;
        assert_int_equal(kdev_usage_cgroup_parse(text, strlen(text), &cg, NULL), 1);
}

/* cgroup v2, systemd driver: containerd, CRI-O, cri-dockerd; every QoS class. */
static void test_v2_systemd(void **state)
{
        (void)state;
        parse_ok("0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" UID_
                 ".slice/cri-containerd-" CID_A ".scope\n",
                 UID, CID_A, KDEV_USAGE_RUNTIME_CONTAINERD, KDEV_USAGE_DRIVER_SYSTEMD, 2);
        parse_ok("0::/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod" UID_
                 ".slice/crio-" CID_B ".scope\n",
                 UID, CID_B, KDEV_USAGE_RUNTIME_CRIO, KDEV_USAGE_DRIVER_SYSTEMD, 2);
        /* Guaranteed: the pod's slice right under kubepods.slice */
        parse_ok("0::/kubepods.slice/kubepods-pod" UID2_ ".slice/docker-" CID_C ".scope",
                 UID2, CID_C, KDEV_USAGE_RUNTIME_DOCKER, KDEV_USAGE_DRIVER_SYSTEMD, 2);
        /* a process in a sub-cgroup the container made itself */
        parse_ok("0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" UID_
                 ".slice/cri-containerd-" CID_A ".scope/worker\n",
                 UID, CID_A, KDEV_USAGE_RUNTIME_CONTAINERD, KDEV_USAGE_DRIVER_SYSTEMD, 2);
        /* kubelet in a container (kind): the node's own slice in front */
        parse_ok("0::/kubelet.slice/kubelet-kubepods.slice/kubelet-kubepods-burstable.slice/"
                 "kubelet-kubepods-burstable-pod" UID_ ".slice/cri-containerd-" CID_A ".scope\n",
                 UID, CID_A, KDEV_USAGE_RUNTIME_CONTAINERD, KDEV_USAGE_DRIVER_SYSTEMD, 2);
}

/* cgroup v2, cgroupfs driver: containerd's bare ID, CRI-O's "crio-<id>". */
static void test_v2_cgroupfs(void **state)
{
        (void)state;
        parse_ok("0::/kubepods/burstable/pod" UID "/" CID_A "\n", UID, CID_A,
                 KDEV_USAGE_RUNTIME_CONTAINERD, KDEV_USAGE_DRIVER_CGROUPFS, 2);
        parse_ok("0::/kubepods/besteffort/pod" UID "/crio-" CID_B "\n", UID, CID_B,
                 KDEV_USAGE_RUNTIME_CRIO, KDEV_USAGE_DRIVER_CGROUPFS, 2);
        parse_ok("0::/kubepods/pod" UID2 "/" CID_C, UID2, CID_C, KDEV_USAGE_RUNTIME_CONTAINERD,
                 KDEV_USAGE_DRIVER_CGROUPFS, 2);
}

/* cgroup v1 (and hybrid, whose unified line is "/"): a controller line. */
static void test_v1(void **state)
{
        (void)state;
        parse_ok("12:pids:/kubepods/burstable/pod" UID "/" CID_A "\n"
                 "11:memory:/kubepods/burstable/pod" UID "/" CID_A "\n"
                 "1:name=systemd:/kubepods/burstable/pod" UID "/" CID_A "\n"
                 "0::/\n",
                 UID, CID_A, KDEV_USAGE_RUNTIME_CONTAINERD, KDEV_USAGE_DRIVER_CGROUPFS, 1);
        parse_ok("11:devices:/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" UID_
                 ".slice/crio-" CID_B ".scope\n"
                 "1:name=systemd:/kubepods.slice/kubepods-burstable.slice/"
                 "kubepods-burstable-pod" UID_ ".slice/crio-" CID_B ".scope\n",
                 UID, CID_B, KDEV_USAGE_RUNTIME_CRIO, KDEV_USAGE_DRIVER_SYSTEMD, 1);
}

/* Not containers: host services, a pod's own cgroup, CRI-O's monitor, IDs
 * that are not 64 hex digits; and a file that is no cgroup file. */
static void test_not_containers(void **state)
{
        (void)state;
        parse_host("0::/system.slice/sshd.service\n");
        parse_host("0::/user.slice/user-1000.slice/session-3.scope\n");
        parse_host("0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" UID_
                   ".slice\n");
        parse_host("0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" UID_
                   ".slice/crio-conmon-" CID_B ".scope\n");
        parse_host("0::/kubepods/burstable/pod" UID "/abc123\n");
        parse_host("0::/kubepods/burstable/pod" UID "/" CID_A "X\n");
        parse_host("0::/docker/" CID_A "\n");
        parse_host("");
        struct kdev_usage_cgroup cg;
        struct kdev_err err = {0};
        const char *bad = "0::/\nnonsense\n";
        assert_int_equal(kdev_usage_cgroup_parse(bad, strlen(bad), &cg, &err), -EINVAL);
        assert_string_equal(err.msg, "line 2: not a cgroup line");
}

/* --- fake /proc and the attribution ---------------------------------------- */

static void write_cgroup(unsigned pid, const char *text)
{
        char path[256];
        snprintf(path, sizeof(path), "%s/proc/%u", root, pid);
        char cmd[300];
        snprintf(cmd, sizeof(cmd), "mkdir -p %s", path);
        assert_int_equal(system(cmd), 0);
        strcat(path, "/cgroup");
        FILE *f = fopen(path, "w");
        assert_non_null(f);
        fputs(text, f);
        fclose(f);
}

static const char *resolve(void *arg, const char *resource, const char *id)
{
        (void)arg;
        (void)resource;
        /* "GPU-...::N" replicas: the GPU; GPU and MIG IDs: themselves */
        static char buf[16][KDEV_USAGE_UUID_MAX];
        static unsigned next;
        char *b = buf[next++ % 16];
        snprintf(b, KDEV_USAGE_UUID_MAX, "%s", id);
        char *sep = strstr(b, "::");
        if (sep)
                *sep = '\0';
        return strncmp(b, "GPU-", 4) == 0 || strncmp(b, "MIG-", 4) == 0 ? b : NULL;
}

static struct kdev_usage_device *add_device(struct kdev_usage_snapshot *s, const char *uuid)
{
        struct kdev_usage_device *d = kdev_usage_snapshot_add(s);
        assert_non_null(d);
        strcpy(d->uuid, uuid);
        d->procs_known = true;
        return d;
}

#define MIB (1024ull * 1024)

static const char *proc_root(void)
{
        static char p[96];
        snprintf(p, sizeof(p), "%s/proc", root);
        return p;
}

/* Two time-sliced containers on one GPU, told apart by their cgroups; a
 * host process, a container the map does not list and an exited process
 * are unattributed with their reasons. */
static void test_time_sliced(void **state)
{
        (void)state;
        write_cgroup(100, "0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" UID_
                          ".slice/cri-containerd-" CID_A ".scope\n");
        write_cgroup(101, "0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" UID_
                          ".slice/cri-containerd-" CID_A ".scope\n");
        write_cgroup(200, "0::/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod" UID2_
                          ".slice/cri-containerd-" CID_B ".scope\n");
        write_cgroup(300, "0::/system.slice/xorg.service\n");
        write_cgroup(400, "0::/kubepods/burstable/pod" UID2 "/" CID_C "\n");

        struct kdev_usage_snapshot snap = {0};
        struct kdev_usage_device *d = add_device(&snap, GPU0);
        assert_int_equal(kdev_usage_device_add_process(d, 100, 1000 * MIB, 30), 0);
        assert_int_equal(kdev_usage_device_add_process(d, 200, 3000 * MIB, 50), 0);
        assert_int_equal(kdev_usage_device_add_process(d, 101, 24 * MIB, KDEV_USAGE_NONE), 0);
        assert_int_equal(kdev_usage_device_add_process(d, 300, 50 * MIB, 1), 0);
        assert_int_equal(kdev_usage_device_add_process(d, 400, 7 * MIB, 2), 0);
        assert_int_equal(kdev_usage_device_add_process(d, 500, 9 * MIB, 0), 0); /* exited */
        add_device(&snap, GPU1);

        const char *ids_a[] = {GPU0 "::0", GPU0 "::5"};
        const char *ids_b[] = {GPU0 "::1"};
        const char *ids_idle[] = {GPU1 "::0"};
        struct kdev_usage_container cs[] = {
                {"ml", "train-0", "trainer", UID, CID_A, "nvidia.com/gpu", ids_a, 2, NULL, DEVICE_PLUGIN},
                {"web", "infer-7", "server", UID2, CID_B, "nvidia.com/gpu", ids_b, 1, NULL, DEVICE_PLUGIN},
                {"web", "idle-1", "main", NULL, NULL, "nvidia.com/gpu", ids_idle, 1, NULL, DEVICE_PLUGIN},
        };
        struct kdev_usage_pods pods = {cs, 3};
        struct kdev_usage_attribute_options o = {.proc_root = proc_root(), .resolve = resolve};
        struct kdev_usage_report r;
        struct kdev_err err = {0};
        assert_int_equal(kdev_usage_attribute(&snap, &pods, &o, &r, &err), 0);

        assert_int_equal(r.n_rows, 3);
        assert_int_equal(r.rows[0].device, 0);
        assert_int_equal(r.rows[0].container, 0);
        assert_int_equal(r.rows[0].replicas, 2);
        assert_false(r.rows[0].from_region);
        assert_int_equal(r.rows[0].used, 1024 * MIB);
        assert_int_equal(r.rows[0].limit, 0);
        assert_int_equal(r.rows[0].processes, 2);
        assert_int_equal(r.rows[0].sm_util, 30);
        assert_int_equal(r.rows[1].device, 0);
        assert_int_equal(r.rows[1].container, 1);
        assert_int_equal(r.rows[1].replicas, 1);
        assert_int_equal(r.rows[1].used, 3000 * MIB);
        assert_int_equal(r.rows[1].processes, 1);
        assert_int_equal(r.rows[1].sm_util, 50);
        assert_int_equal(r.rows[2].device, 1);
        assert_int_equal(r.rows[2].container, 2);
        assert_int_equal(r.rows[2].replicas, 1);
        assert_int_equal(r.rows[2].used, 0);
        assert_int_equal(r.rows[2].processes, 0);
        assert_int_equal(r.rows[2].sm_util, KDEV_USAGE_NONE);

        assert_int_equal(r.n_lost, 3);
        assert_int_equal(r.lost[0].reason, KDEV_USAGE_UNATTRIBUTED_HOST);
        assert_int_equal(r.lost[0].used, 50 * MIB);
        assert_int_equal(r.lost[0].processes, 1);
        assert_int_equal(r.lost[1].reason, KDEV_USAGE_UNATTRIBUTED_NO_POD);
        assert_int_equal(r.lost[1].used, 7 * MIB);
        assert_int_equal(r.lost[2].reason, KDEV_USAGE_UNATTRIBUTED_NO_CGROUP);
        assert_int_equal(r.lost[2].used, 9 * MIB);
        assert_int_equal(r.failures[KDEV_USAGE_UNATTRIBUTED_HOST], 1);
        assert_int_equal(r.failures[KDEV_USAGE_UNATTRIBUTED_NO_POD], 1);
        assert_int_equal(r.failures[KDEV_USAGE_UNATTRIBUTED_AMBIGUOUS], 0);
        assert_int_equal(r.failures[KDEV_USAGE_UNATTRIBUTED_NO_CGROUP], 1);
        assert_string_equal(kdev_usage_unattributed_name(r.lost[1].reason), "unknown_container");
        kdev_usage_report_clear(&r);
        kdev_usage_snapshot_clear(&snap);
}

/* Without container IDs in the map, the pod UID decides when exactly one
 * of the pod's containers holds the device; two of them: "ambiguous". */
static void test_by_pod_uid(void **state)
{
        (void)state;
        write_cgroup(600, "0::/kubepods/burstable/pod" UID "/crio-" CID_A "\n");
        struct kdev_usage_snapshot snap = {0};
        struct kdev_usage_device *d0 = add_device(&snap, GPU0);
        assert_int_equal(kdev_usage_device_add_process(d0, 600, 100 * MIB, KDEV_USAGE_NONE), 0);
        struct kdev_usage_device *d1 = add_device(&snap, GPU1);
        assert_int_equal(kdev_usage_device_add_process(d1, 600, 200 * MIB, KDEV_USAGE_NONE), 0);

        const char *one[] = {GPU0 "::2"};
        const char *both[] = {GPU1 "::0"};
        const char *both2[] = {GPU1 "::1"};
        struct kdev_usage_container cs[] = {
                {"ml", "p", "a", UID, NULL, "nvidia.com/gpu", one, 1, NULL, DEVICE_PLUGIN},
                {"ml", "p", "b", UID, NULL, "nvidia.com/gpu", both, 1, NULL, DEVICE_PLUGIN},
                {"ml", "p", "c", UID, NULL, "nvidia.com/gpu", both2, 1, NULL, DEVICE_PLUGIN},
        };
        struct kdev_usage_pods pods = {cs, 3};
        struct kdev_usage_attribute_options o = {.proc_root = proc_root(), .resolve = resolve};
        struct kdev_usage_report r;
        assert_int_equal(kdev_usage_attribute(&snap, &pods, &o, &r, NULL), 0);
        assert_int_equal(r.n_rows, 3);
        assert_int_equal(r.rows[0].container, 0);
        assert_int_equal(r.rows[0].used, 100 * MIB);
        assert_int_equal(r.rows[1].used, 0);
        assert_int_equal(r.rows[2].used, 0);
        assert_int_equal(r.n_lost, 1);
        assert_int_equal(r.lost[0].device, 1);
        assert_int_equal(r.lost[0].reason, KDEV_USAGE_UNATTRIBUTED_AMBIGUOUS);
        assert_int_equal(r.lost[0].used, 200 * MIB);
        kdev_usage_report_clear(&r);
        kdev_usage_snapshot_clear(&snap);
}

/* An isolated replica: the share region's sum, limit and compute share,
 * exact, and its processes are not counted twice; a MIG device held whole
 * beside it; a region that cannot be read is reported. */
static void test_region(void **state)
{
        (void)state;
        char dir[128], msg[256];
        snprintf(dir, sizeof(dir), "%s/region-a", root);
        assert_int_equal(mkdir(dir, 0755), 0);
        struct kdev_share_limits lim = {0};
        const char *text = GPU0 " 4294967296 25\n";
        assert_int_equal(kdev_share_limits_parse(text, strlen(text), "limits", &lim, msg,
                                                 sizeof(msg)), 0);
        struct kdev_share_region_file *reg = kdev_share_region_map(dir, &lim, false, msg,
                                                                   sizeof(msg));
        assert_non_null(reg);
        int s1 = kdev_share_region_claim(reg, 7, 0, 0);
        int s2 = kdev_share_region_claim(reg, 8, 0, 0);
        assert_int_equal(kdev_share_region_reserve(reg, s1, 0, 1536 * MIB), 0);
        assert_int_equal(kdev_share_region_reserve(reg, s2, 0, 512 * MIB), 0);

        write_cgroup(700, "0::/kubepods.slice/kubepods-pod" UID_ ".slice/cri-containerd-" CID_A
                          ".scope\n");
        write_cgroup(800, "0::/kubepods.slice/kubepods-pod" UID2_ ".slice/cri-containerd-" CID_B
                          ".scope\n");
        struct kdev_usage_snapshot snap = {0};
        struct kdev_usage_device *d = add_device(&snap, GPU0);
        /* NVML's figure includes the CUDA context; the region's does not */
        assert_int_equal(kdev_usage_device_add_process(d, 700, 2600 * MIB, 40), 0);
        struct kdev_usage_device *m = add_device(&snap, MIG0);
        assert_int_equal(kdev_usage_device_add_process(m, 800, 300 * MIB, KDEV_USAGE_NONE), 0);

        char bad[128];
        snprintf(bad, sizeof(bad), "%s/missing", root);
        const char *ids_a[] = {GPU0 "::3"};
        const char *ids_m[] = {MIG0};
        struct kdev_usage_container cs[] = {
                {"ml", "iso", "main", UID, CID_A, "nvidia.com/gpu.shared", ids_a, 1, dir, DEVICE_PLUGIN},
                {"ml", "mig", "main", UID2, CID_B, "nvidia.com/mig-1g.10gb", ids_m, 1, bad, DEVICE_PLUGIN},
        };
        struct kdev_usage_pods pods = {cs, 2};
        struct kdev_usage_attribute_options o = {.proc_root = proc_root(), .resolve = resolve};
        struct kdev_usage_report r;
        assert_int_equal(kdev_usage_attribute(&snap, &pods, &o, &r, NULL), 0);
        assert_int_equal(r.n_rows, 2);
        assert_true(r.rows[0].from_region);
        assert_int_equal(r.rows[0].used, 2048 * MIB);
        assert_int_equal(r.rows[0].limit, 4096 * MIB);
        assert_int_equal(r.rows[0].compute, 25);
        assert_int_equal(r.rows[0].processes, 1);
        assert_int_equal(r.rows[0].sm_util, 40);
        assert_false(r.rows[1].from_region);
        assert_int_equal(r.rows[1].device, 1);
        assert_int_equal(r.rows[1].used, 300 * MIB);
        assert_int_equal(r.rows[1].limit, 0);
        assert_int_equal(r.n_lost, 0);
        assert_int_equal(r.region_errors, 1);
        char want[300];
        snprintf(want, sizeof(want), "%s/region: ", bad);
        assert_memory_equal(r.region_error, want, strlen(want));
        kdev_usage_report_clear(&r);
        kdev_usage_snapshot_clear(&snap);
        kdev_share_region_unmap(reg);
}

/* The reader of one process: a missing one is an error naming the path. */
static void test_proc_missing(void **state)
{
        (void)state;
        struct kdev_usage_cgroup cg;
        struct kdev_err err = {0};
        int rc = kdev_usage_proc_container(proc_root(), 999999, &cg, &err);
        assert_int_equal(rc, -ENOENT);
        char want[200];
        snprintf(want, sizeof(want), "%s/999999/cgroup: cannot read: No such file or directory",
                 proc_root());
        assert_string_equal(err.msg, want);
}

/* A cgroup file longer than the one-read buffer (v1, many controllers, the
 * container's line last) is read whole; a directory in its place is an
 * error naming it. */
static void test_proc_long_and_odd(void **state)
{
        (void)state;
        char text[8192] = "";
        for (int i = 0; i < 90; i++)
                snprintf(text + strlen(text), sizeof(text) - strlen(text),
                         "%d:ctl%d:/system.slice/some-long-service-name-%d.service\n", 90 - i, i, i);
        strcat(text, "0::/kubepods/burstable/pod" UID "/" CID_A "\n");
        assert_true(strlen(text) > 4096);
        write_cgroup(4100, text);
        struct kdev_usage_cgroup cg;
        struct kdev_err err = {0};
        assert_int_equal(kdev_usage_proc_container(proc_root(), 4100, &cg, &err), 0);
        assert_string_equal(cg.container_id, CID_A);
        assert_int_equal(cg.version, 2);
        char path[256];
        snprintf(path, sizeof(path), "%s/4200/cgroup", proc_root());
        char cmd[300];
        snprintf(cmd, sizeof(cmd), "mkdir -p %s", path);
        assert_int_equal(system(cmd), 0);
        assert_int_equal(kdev_usage_proc_container(proc_root(), 4200, &cg, &err), -EISDIR);
        char want[300];
        snprintf(want, sizeof(want), "%s: is not a regular file (a directory)", path);
        assert_string_equal(err.msg, want);
}

int main(void)
{
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_v2_systemd),
                cmocka_unit_test(test_v2_cgroupfs),
                cmocka_unit_test(test_v1),
                cmocka_unit_test(test_not_containers),
                cmocka_unit_test_setup_teardown(test_time_sliced, setup, teardown),
                cmocka_unit_test_setup_teardown(test_by_pod_uid, setup, teardown),
                cmocka_unit_test_setup_teardown(test_region, setup, teardown),
                cmocka_unit_test_setup_teardown(test_proc_missing, setup, teardown),
                cmocka_unit_test_setup_teardown(test_proc_long_and_odd, setup, teardown),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
