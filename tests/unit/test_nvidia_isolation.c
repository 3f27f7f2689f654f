/* Isolated replicas (nvidia/isolation.h, nvidia/share_host.h): the shares of a
 * replica and of k replicas, the limits of a container over several GPUs, the
 * `limits` text, memory quantities, the `isolation` section and its errors
 * with file:line:column, and the removal of regions of containers that are
 * gone. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "nvidia/config.h"
#include "nvidia/devinfo.h"
#include "nvidia/isolation.h"
#include "nvidia/share_host.h"
#include "share/region.h"

#include "nvidia_config_fixture.h"

#define GIB (1ull << 30)
#define H100 (81559ull << 20) /* 85520809984 bytes */

static void test_parse_memory(void **state)
{
        (void)state;
        struct {
                const char *text;
                unsigned long long bytes;
        } ok[] = {
                {"1", 1},
                {"1073741824", GIB},
                {"10Gi", 10 * GIB},
                {"512Mi", 512ull << 20},
                {"3Ki", 3072},
                {"2Ti", 2ull << 40},
                {"1Pi", 1ull << 50},
                {"20G", 20000000000ull},
                {"7k", 7000},
                {"5M", 5000000},
                {"1T", 1000000000000ull},
                {"8192Pi", 1ull << 63},
        };
        for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++) {
                unsigned long long b = 0;
                struct kdev_err e = {0};
                assert_int_equal(kdev_nvidia_parse_memory(ok[i].text, &b, &e), 0);
                assert_true(b == ok[i].bytes);
        }
        const char *bad[] = {"", "0", "0Gi", "10GB", "10 Gi", "-1", "1.5Gi", "Gi", "10gi",
                             "8193Pi", "99999999999999999999"};
        for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
                unsigned long long b = 42;
                struct kdev_err e = {0};
                assert_int_equal(kdev_nvidia_parse_memory(bad[i], &b, &e), -EINVAL);
                char want[256];
                snprintf(want, sizeof(want),
                         "must be a size in bytes (e.g. 10Gi, 512Mi, 20G or 1073741824), got "
                         "\"%s\"",
                         bad[i]);
                assert_string_equal(e.msg, want);
                assert_true(b == 42);
        }
}

static void test_replica_share(void **state)
{
        (void)state;
        struct kdev_nvidia_isolated_resource dflt = {.name = "nvidia.com/gpu"};
        struct kdev_nvidia_replica_share s = kdev_nvidia_replica_share(&dflt, H100, 4);
        assert_true(s.memory == 21380202496ull);
        assert_int_equal(s.compute, 25);
        s = kdev_nvidia_replica_share(&dflt, H100, 3);
        assert_true(s.memory == 28506936661ull); /* floor(85520809984 / 3) */
        assert_int_equal(s.compute, 33);
        s = kdev_nvidia_replica_share(&dflt, H100, 4096);
        assert_true(s.memory == 20879104ull);
        assert_int_equal(s.compute, 1); /* floor(100 / 4096) = 0, at least 1 */
        s = kdev_nvidia_replica_share(&dflt, 0, 4);
        assert_true(s.memory == 0); /* unknown */
        struct kdev_nvidia_isolated_resource expl = {.name = "x/y", .memory = 10 * GIB,
                                                     .compute = 30};
        s = kdev_nvidia_replica_share(&expl, H100, 4);
        assert_true(s.memory == 10 * GIB);
        assert_int_equal(s.compute, 30);
        s = kdev_nvidia_replica_share(&expl, 0, 4);
        assert_true(s.memory == 10 * GIB);
}

static struct kdev_nvidia_devinfo info(const char *uuid, unsigned long long memory, int replica)
{
        struct kdev_nvidia_devinfo d;
        memset(&d, 0, sizeof(d));
        snprintf(d.uuid, sizeof(d.uuid), "%s", uuid);
        snprintf(d.parent_uuid, sizeof(d.parent_uuid), "%s", uuid);
        d.memory = memory;
        d.replica = replica;
        return d;
}

static void test_share_limits(void **state)
{
        (void)state;
        struct kdev_nvidia_isolated_resource dflt = {.name = "nvidia.com/gpu.shared"};
        struct kdev_nvidia_devinfo a0 = info("GPU-a", H100, 0), a1 = info("GPU-a", H100, 1),
                                   a2 = info("GPU-a", H100, 2), a3 = info("GPU-a", H100, 3),
                                   b1 = info("GPU-b", 40 * GIB, 1);
        const struct kdev_nvidia_devinfo *one[] = {&a1};
        const struct kdev_nvidia_devinfo *mixed[] = {&b1, &a0, &a2};
        const struct kdev_nvidia_devinfo *all[] = {&a3, &a0, &a2, &a1};
        struct kdev_nvidia_share_limit *l = NULL;
        size_t n = 0;
        struct kdev_err e = {0};

        assert_int_equal(kdev_nvidia_share_limits(&dflt, 4, one, 1, &l, &n, &e), 0);
        assert_int_equal(n, 1);
        assert_string_equal(l[0].uuid, "GPU-a");
        assert_true(l[0].memory == 21380202496ull);
        assert_int_equal(l[0].compute, 25);
        free(l);

        /* replicas on two GPUs: per-GPU limits, in order of first appearance */
        assert_int_equal(kdev_nvidia_share_limits(&dflt, 4, mixed, 3, &l, &n, &e), 0);
        assert_int_equal(n, 2);
        assert_string_equal(l[0].uuid, "GPU-b");
        assert_true(l[0].memory == 10 * GIB);
        assert_int_equal(l[0].compute, 25);
        assert_string_equal(l[1].uuid, "GPU-a");
        assert_true(l[1].memory == 2 * 21380202496ull);
        assert_int_equal(l[1].compute, 50);
        char *text = kdev_nvidia_limits_text("nvidia.com/gpu.shared",
                                             (const char *[]){"GPU-b::1", "GPU-a::0", "GPU-a::2"},
                                             3, l, n, NULL);
        assert_string_equal(text, "# kdev-plugin: isolated replicas of nvidia.com/gpu.shared\n"
                                  "# device GPU-b::1\n"
                                  "# device GPU-a::0\n"
                                  "# device GPU-a::2\n"
                                  "GPU-b 10737418240 25\n"
                                  "GPU-a 42760404992 50\n");
        free(text);
        free(l);

        /* every replica of a GPU: the whole of it (floor loses 0 bytes here) */
        assert_int_equal(kdev_nvidia_share_limits(&dflt, 4, all, 4, &l, &n, &e), 0);
        assert_int_equal(n, 1);
        assert_true(l[0].memory == H100);
        assert_int_equal(l[0].compute, 100);
        free(l);

        /* explicit shares that overcommit are capped at the device */
        struct kdev_nvidia_isolated_resource big = {.name = "x/y", .memory = 30 * GIB,
                                                    .compute = 40, .policy = "strict"};
        assert_int_equal(kdev_nvidia_share_limits(&big, 4, all, 4, &l, &n, &e), 0);
        assert_true(l[0].memory == H100);
        assert_int_equal(l[0].compute, 100);
        text = kdev_nvidia_limits_text("x/y", NULL, 0, l, n, big.policy);
        assert_string_equal(text, "# kdev-plugin: isolated replicas of x/y\n"
                                  "GPU-a 85520809984 100\n"
                                  "policy strict\n");
        free(text);
        free(l);
        assert_int_equal(kdev_nvidia_share_limits(&big, 4, one, 1, &l, &n, &e), 0);
        assert_true(l[0].memory == 30 * GIB);
        assert_int_equal(l[0].compute, 40);
        free(l);

        /* memory unknown and no explicit size: refused */
        struct kdev_nvidia_devinfo u = info("GPU-u", 0, 0);
        const struct kdev_nvidia_devinfo *unk[] = {&u};
        assert_int_equal(kdev_nvidia_share_limits(&dflt, 4, unk, 1, &l, &n, &e), -EINVAL);
        assert_null(l);
        assert_string_equal(e.msg, "isolation: the memory of GPU-u is unknown; an isolated "
                                   "replica needs it (or an explicit memory size)");
        assert_int_equal(kdev_nvidia_share_limits(&big, 4, unk, 1, &l, &n, &e), 0);
        assert_true(l[0].memory == 30 * GIB);
        free(l);
}

static const char ts_text[] = "version: v1\n"
                              "sharing:\n"
                              "  timeSlicing:\n"
                              "    renameByDefault: true\n"
                              "    resources:\n"
                              "    - name: nvidia.com/gpu\n"
                              "      replicas: 4\n"
                              "    - name: mig-1g.10gb\n"
                              "      rename: small\n"
                              "      replicas: 7\n";

/* Parses |iso| after ts_text and finishes the config; returns the result. */
static int load(struct kdev_nvidia_config *cfg, const char *iso, struct kdev_err *e)
{
        char text[2048];
        snprintf(text, sizeof(text), "%s%s", ts_text, iso);
        assert_int_equal(kdev_nvidia_config_init(cfg, e), 0);
        int rc = parse_file(cfg, "iso.yaml", text, e);
        return rc < 0 ? rc : kdev_nvidia_config_finish(cfg, true, e);
}

static void test_config_section(void **state)
{
        (void)state;
        struct kdev_nvidia_config cfg;
        struct kdev_err e = {0};
        assert_int_equal(load(&cfg,
                              "isolation:\n"
                              "  resources:\n"
                              "  - name: gpu.shared\n"
                              "  - name: nvidia.com/small\n"
                              "    memory: 4Gi\n"
                              "    compute: 20%\n"
                              "    policy: work-conserving\n"
                              "    preload: env\n",
                              &e),
                         0);
        assert_true(cfg.isolation.present);
        assert_int_equal(cfg.isolation.n_resources, 2);
        const struct kdev_nvidia_isolated_resource *r = &cfg.isolation.resources[0];
        assert_string_equal(r->name, "nvidia.com/gpu.shared");
        assert_true(r->memory == 0);
        assert_int_equal(r->compute, 0);
        assert_null(r->policy);
        assert_int_equal(r->preload, KDEV_NVIDIA_PRELOAD_FILE);
        assert_int_equal(r->line, 13);
        assert_int_equal(r->column, 11);
        r = kdev_nvidia_isolation_find(&cfg, "nvidia.com/small");
        assert_non_null(r);
        assert_true(r->memory == 4 * GIB);
        assert_int_equal(r->compute, 20);
        assert_string_equal(r->policy, "work-conserving");
        assert_int_equal(r->preload, KDEV_NVIDIA_PRELOAD_ENV);
        assert_null(kdev_nvidia_isolation_find(&cfg, "nvidia.com/gpu"));
        assert_int_equal(kdev_nvidia_time_slicing_replicas(&cfg, "nvidia.com/gpu.shared"), 4);
        assert_int_equal(kdev_nvidia_time_slicing_replicas(&cfg, "nvidia.com/small"), 7);
        assert_int_equal(kdev_nvidia_time_slicing_replicas(&cfg, "nvidia.com/gpu"), 0);
        assert_true(cfg.file_sections);
        assert_string_equal(cfg.share_root, "/var/lib/kdev/share");
        assert_null(cfg.share_library);
        kdev_nvidia_config_clear(&cfg);
}

static void test_config_errors(void **state)
{
        (void)state;
        struct {
                const char *iso, *msg;
        } cases[] = {
                {"isolation:\n  resources:\n  - name: nvidia.com/gpu\n",
                 "iso.yaml:13:11: isolation.resources[0].name: nvidia.com/gpu is not time-sliced "
                 "(no sharing.timeSlicing.resources entry advertises it)"},
                {"isolation:\n  resources:\n  - name: gpu.shared\n  - name: gpu.other\n",
                 "iso.yaml:14:11: isolation.resources[1].name: nvidia.com/gpu.other is not "
                 "time-sliced (no sharing.timeSlicing.resources entry advertises it)"},
                {"isolation:\n  resources: []\n",
                 "iso.yaml:12:14: isolation.resources: must have at least 1 entry"},
                {"isolation: {}\n", "iso.yaml:11:12: isolation: missing required key \"resources\""},
                {"isolation:\n  resources:\n  - memory: 1Gi\n",
                 "iso.yaml:13:5: isolation.resources[0]: missing required key \"name\""},
                {"isolation:\n  resources:\n  - name: gpu.shared\n    compute: 0\n",
                 "iso.yaml:14:14: isolation.resources[0].compute: a percentage of the GPU must "
                 "be an integer between 1 and 100, got \"0\""},
                {"isolation:\n  resources:\n  - name: gpu.shared\n    compute: 50%%\n",
                 "iso.yaml:14:14: isolation.resources[0].compute: a percentage of the GPU must "
                 "be an integer between 1 and 100, got \"50%\""},
                {"isolation:\n  resources:\n  - name: gpu.shared\n    memory: 10GB\n",
                 "iso.yaml:14:13: isolation.resources[0].memory: must be a size in bytes (e.g. "
                 "10Gi, 512Mi, 20G or 1073741824), got \"10GB\""},
                {"isolation:\n  resources:\n  - name: gpu.shared\n    memory: [1]\n",
                 "iso.yaml:14:13: isolation.resources[0].memory: must be a string"},
                {"isolation:\n  resources:\n  - name: gpu.shared\n  - name: nvidia.com/gpu.shared\n",
                 "iso.yaml:14:11: isolation.resources[1].name: nvidia.com/gpu.shared is already "
                 "isolated by resources[0]"},
                {"isolation:\n  resources:\n  - name: gpu.shared\n    policy: \"\"\n",
                 "iso.yaml:14:13: isolation.resources[0].policy: must be a policy of "
                 "libkdev-share.so (work-conserving, strict or none), got \"\""},
                {"isolation:\n  resources:\n  - name: gpu.shared\n    policy: fair-share\n",
                 "iso.yaml:14:13: isolation.resources[0].policy: must be a policy of "
                 "libkdev-share.so (work-conserving, strict or none), got \"fair-share\""},
                {"isolation:\n  resources:\n  - name: gpu.shared\n    preload: LD_PRELOAD\n",
                 "iso.yaml:14:14: isolation.resources[0].preload: must be file or env, got "
                 "\"LD_PRELOAD\""},
                {"isolation:\n  resources:\n  - name: Bad Name\n",
                 "iso.yaml:13:11: isolation.resources[0].name: "},
                {"isolation:\n  devices: 1\n",
                 "iso.yaml:12:3: isolation.devices: unknown key (expected one of: resources)"},
        };
        for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
                struct kdev_nvidia_config cfg;
                struct kdev_err e = {0};
                const char *msg = cases[i].msg;
                int rc = load(&cfg, cases[i].iso, &e);
                if (rc != -EINVAL || strncmp(e.msg, msg, strlen(msg)) != 0)
                        fail_msg("case %zu: rc %d, got \"%s\", want \"%s\"", i, rc, e.msg, msg);
                kdev_nvidia_config_clear(&cfg);
        }
}

/* --- regions of containers that are gone ---------------------------------------- */

static void write_text(const char *path, const char *text)
{
        FILE *f = fopen(path, "w");
        assert_non_null(f);
        fputs(text, f);
        fclose(f);
}

/* A region |id| under |root| whose limits file names |devices| of resource
 * |res|. */
static void region(const char *root, const char *id, const char *res, const char *devices)
{
        char dir[512], path[600], text[512];
        snprintf(dir, sizeof(dir), "%s/containers/%s", root, id);
        assert_int_equal(mkdir(dir, 0755), 0);
        snprintf(path, sizeof(path), "%s/limits", dir);
        snprintf(text, sizeof(text), "# kdev-plugin: isolated replicas of %s\n%sGPU-a 1 1\n", res,
                 devices);
        write_text(path, text);
}

static int exists(const char *root, const char *id)
{
        char p[512];
        struct stat st;
        snprintf(p, sizeof(p), "%s/containers/%s", root, id);
        return lstat(p, &st) == 0;
}

static void test_cleanup(void **state)
{
        (void)state;
        char root[] = "/tmp/kdev-iso-XXXXXX";
        assert_non_null(mkdtemp(root));
        char path[600], cdi[512];
        snprintf(path, sizeof(path), "%s/containers", root);
        assert_int_equal(mkdir(path, 0700), 0);
        snprintf(cdi, sizeof(cdi), "%s/cdi", root);
        assert_int_equal(mkdir(cdi, 0755), 0);
        unsigned removed = 99;
        struct kdev_err e = {0};
        assert_int_equal(kdev_nvidia_share_cleanup(root, cdi, &removed, &e), 0);
        assert_int_equal(removed, 0);

        long now = (long)time(NULL);
        /* IDs: allocation time in ns (16 hex digits), '-', random; newer
         * first: r5 > r3 > r2 > r1 > r4 > r6 */
#define R1 "0000000000000030-00000001"
#define R2 "0000000000000040-00000002"
#define R3 "0000000000000050-00000003"
#define R4 "0000000000000020-00000004"
#define R5 "0000000000000060-00000005"
#define R6 "0000000000000010-00000006"
        region(root, R1, "x/a", "# device G0::0\n# device G0::1\n");
        region(root, R2, "x/a", "# device G0::1\n");  /* took G0::1 from r1 */
        region(root, R3, "x/b", "# device G0::0\n");  /* another resource */
        region(root, R4, "x/a", "# device G1::0\n");
        region(root, R5, "x/a", "# device G1::0\n# device G2::0\n");
        region(root, R6, "x/a", "# device G2::0\n");
        /* a name not made by kdev-plugin counts as the oldest */
        region(root, "foreign", "x/a", "# device G3::0\n");
        region(root, "0000000000000001-0000000f", "x/a", "# device G3::0\n");
        snprintf(path, sizeof(path), "%s/kdev.io-share_" R1 ".json", cdi);
        write_text(path, "{}");
        /* a directory without limits: removed when older than 60 s */
        snprintf(path, sizeof(path), "%s/containers/young", root);
        assert_int_equal(mkdir(path, 0755), 0);
        snprintf(path, sizeof(path), "%s/containers/old", root);
        assert_int_equal(mkdir(path, 0755), 0);
        struct timeval old[2] = {{now - 120, 0}, {now - 120, 0}};
        assert_int_equal(utimes(path, old), 0);
        /* a file, not a directory: left alone */
        snprintf(path, sizeof(path), "%s/containers/file", root);
        write_text(path, "x");

        assert_int_equal(kdev_nvidia_share_cleanup(root, cdi, &removed, &e), 0);
        assert_int_equal(removed, 5);
        assert_false(exists(root, R1));
        assert_true(exists(root, R2));
        assert_true(exists(root, R3));
        assert_false(exists(root, R4));
        assert_true(exists(root, R5));
        assert_false(exists(root, R6));
        assert_false(exists(root, "foreign"));
        assert_true(exists(root, "0000000000000001-0000000f"));
        assert_true(exists(root, "young"));
        assert_false(exists(root, "old"));
        assert_true(exists(root, "file"));
        snprintf(path, sizeof(path), "%s/kdev.io-share_" R1 ".json", cdi);
        assert_int_equal(access(path, F_OK), -1);
        assert_int_equal(kdev_nvidia_share_cleanup(root, cdi, &removed, &e), 0);
        assert_int_equal(removed, 0);

        char cmd[600];
        snprintf(cmd, sizeof(cmd), "rm -rf '%s'", root);
        assert_int_equal(system(cmd), 0);
}

static void test_library_default(void **state)
{
        (void)state;
        char dir[] = "/tmp/kdev-iso-XXXXXX";
        assert_non_null(mkdtemp(dir));
        char exe[512], buf[600];
        snprintf(exe, sizeof(exe), "%s/bin/kdev-plugin", dir);
        assert_int_equal(kdev_nvidia_share_library_default(exe, buf, sizeof(buf)), 0);
        char want[600];
        snprintf(want, sizeof(want), "%s/bin/libkdev-share.so", dir);
        assert_string_equal(buf, want); /* the build tree */
        snprintf(buf, sizeof(buf), "mkdir -p %s/bin %s/lib/kdev && touch "
                                   "%s/lib/kdev/libkdev-share.so", dir, dir, dir);
        assert_int_equal(system(buf), 0);
        assert_int_equal(kdev_nvidia_share_library_default(exe, buf, sizeof(buf)), 0);
        snprintf(want, sizeof(want), "%s/bin/../lib/kdev/libkdev-share.so", dir);
        assert_string_equal(buf, want); /* installed */
        assert_int_equal(kdev_nvidia_share_library_default(exe, buf, 10), -ENAMETOOLONG);
        snprintf(buf, sizeof(buf), "rm -rf '%s'", dir);
        assert_int_equal(system(buf), 0);
}

/* What kdev-plugin writes is what libkdev-share.so reads: the limits text of
 * every policy name (and of none), with GPU and MIG UUIDs, through the
 * library's own parser (share/region.h kdev_share_limits_parse). */
static void test_limits_text_parses_in_the_library(void **state)
{
        (void)state;
        static const char *const names[] = KDEV_SHARE_POLICY_NAMES;
        const struct kdev_nvidia_share_limit l[] = {
                {"GPU-4603f764-b00c-271e-0980-eda368e40931", 42760404992ull, 50},
                {"MIG-59bcc04e-5cf6-b753-ab18-f13e8543556f", 20937965568ull, 100},
                {"GPU-c6c362bb-3458-2b4f-ce42-acf8618a50f9", 1ull, 1},
        };
        const char *ids[] = {"GPU-4603f764-b00c-271e-0980-eda368e40931::0",
                             "MIG-59bcc04e-5cf6-b753-ab18-f13e8543556f::3"};
        for (int p = -1; p < KDEV_SHARE_POLICY_COUNT; p++) {
                char *text = kdev_nvidia_limits_text("nvidia.com/gpu.shared", ids, 2, l, 3,
                                                     p < 0 ? NULL : names[p]);
                assert_non_null(text);
                struct kdev_share_limits out;
                char msg[256] = "";
                assert_int_equal(kdev_share_limits_parse(text, strlen(text), "limits", &out, msg,
                                                         sizeof(msg)),
                                 0);
                assert_string_equal(msg, "");
                assert_int_equal(out.n, 3);
                for (size_t i = 0; i < 3; i++) {
                        assert_string_equal(out.gpu[i].uuid, l[i].uuid);
                        assert_true(out.gpu[i].memory == l[i].memory);
                        assert_int_equal(out.gpu[i].compute, l[i].compute);
                }
                assert_int_equal(out.policy, p < 0 ? KDEV_SHARE_POLICY_WORK_CONSERVING
                                                   : (enum kdev_share_policy)p);
                assert_string_equal(kdev_share_policy_name(out.policy),
                                    p < 0 ? "work-conserving" : names[p]);
                free(text);
        }
}

int main(void)
{
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_parse_memory),
                cmocka_unit_test(test_replica_share),
                cmocka_unit_test(test_share_limits),
                cmocka_unit_test(test_config_section),
                cmocka_unit_test(test_config_errors),
                cmocka_unit_test(test_cleanup),
                cmocka_unit_test(test_library_default),
                cmocka_unit_test(test_limits_text_parses_in_the_library),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
