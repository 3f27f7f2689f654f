/* NVIDIA config: defaults, file sections, env and flags with their
 * precedence, and every kind of bad value with its exact message. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "generic/generic.h"
#include "nvidia/config.h"

#include "nvidia_config_fixture.h"


/* Parses |text| as kdev's config file with the NVIDIA sections into |cfg|
 * (initialised here). Returns the loader's result; |e| holds the message. */
static int parse(struct kdev_nvidia_config *cfg, const char *text, struct kdev_err *e)
{
        assert_int_equal(kdev_nvidia_config_init(cfg, e), 0);
        kdev_err_clear(e);
        return parse_file(cfg, "nv.yaml", text, e);
}

static void parse_ok(struct kdev_nvidia_config *cfg, const char *text)
{
        struct kdev_err e;
        if (parse(cfg, text, &e) != 0)
                fail_msg("%s", e.msg);
        if (kdev_nvidia_config_finish(cfg, true, &e) != 0)
                fail_msg("%s", e.msg);
}

static void test_defaults(void **state)
{
        (void)state;
        struct kdev_nvidia_config cfg;
        struct kdev_err e;
        assert_int_equal(kdev_nvidia_config_init(&cfg, &e), 0);
        assert_int_equal(kdev_nvidia_config_finish(&cfg, false, &e), 0);
        assert_int_equal(cfg.mig_strategy, KDEV_NVIDIA_MIG_NONE);
        assert_true(cfg.fail_on_init_error);
        assert_string_equal(cfg.driver_root, "/");
        assert_string_equal(cfg.dev_root, "/");
        assert_string_equal(cfg.mps_root, "");
        assert_false(cfg.gdrcopy_enabled);
        assert_false(cfg.gds_enabled);
        assert_false(cfg.mofed_enabled);
        assert_int_equal(cfg.discovery, KDEV_NVIDIA_DISCOVERY_AUTO);
        assert_false(cfg.pass_device_specs);
        assert_int_equal(cfg.device_list_strategies, KDEV_NVIDIA_LIST_ENVVAR);
        assert_int_equal(cfg.id_strategy, KDEV_NVIDIA_ID_UUID);
        assert_string_equal(cfg.cdi_annotation_prefix, "cdi.k8s.io/");
        assert_string_equal(cfg.nvidia_ctk_path, "/usr/bin/nvidia-ctk");
        assert_string_equal(cfg.container_driver_root, "/driver-root");
        assert_int_equal(cfg.shared_policy, KDEV_NVIDIA_POLICY_DISTRIBUTED);
        assert_int_equal(cfg.n_imex_channel_ids, 0);
        assert_false(cfg.imex_required);
        assert_false(cfg.time_slicing.present);
        assert_false(cfg.mps.present);
        assert_int_equal(cfg.probe_interval, 10);
        assert_int_equal(cfg.quiet_period, 60);
        assert_string_equal(cfg.cdi_dir, "/var/run/cdi");
        assert_true(cfg.wanted); /* no config file */
        for (int i = 0; i < KDEV_NVIDIA_OPT_COUNT; i++)
                assert_int_equal(cfg.src[i], KDEV_NVIDIA_SRC_DEFAULT);
        kdev_nvidia_config_clear(&cfg);
}

static const char full_file[] =
        "version: v1\n"
        "flags:\n"
        "  migStrategy: none\n"
        "  failOnInitError: false\n"
        "  nvidiaDriverRoot: /run/nvidia/driver\n"
        "  mpsRoot: /run/nvidia/mps\n"
        "  gdrcopyEnabled: true\n"
        "  gdsEnabled: yes\n"
        "  mofedEnabled: True\n"
        "  useNodeFeatureAPI: false\n"
        "  deviceDiscoveryStrategy: nvml\n"
        "  plugin:\n"
        "    passDeviceSpecs: true\n"
        "    deviceListStrategy: [envvar, cdi-cri]\n"
        "    deviceIDStrategy: index\n"
        "    cdiAnnotationPrefix: cdi.example.com/\n"
        "    nvidiaCTKPath: /opt/bin/nvidia-ctk\n"
        "    containerDriverRoot: /host-driver\n"
        "    sharedDevicesAllocationPolicy: packed\n"
        "  gfd:\n"
        "    oneshot: false\n"
        "    noTimestamp: false\n"
        "    sleepInterval: 60s\n"
        "    outputFile: /etc/kubernetes/node-feature-discovery/features.d/gfd\n"
        "    machineTypeFile: /sys/class/dmi/id/product_name\n"
        "resources:\n"
        "  gpus:\n"
        "    - pattern: \"*\"\n"
        "      name: gpu\n"
        "imex:\n"
        "  channelIDs: [0]\n"
        "  required: true\n"
        "health:\n"
        "  probeInterval: 5\n"
        "  quietPeriod: 120\n";

static void test_full_file(void **state)
{
        (void)state;
        struct kdev_nvidia_config cfg;
        parse_ok(&cfg, full_file);
        assert_false(cfg.fail_on_init_error);
        assert_string_equal(cfg.driver_root, "/run/nvidia/driver");
        assert_string_equal(cfg.dev_root, "/run/nvidia/driver"); /* defaults to driver root */
        assert_string_equal(cfg.mps_root, "/run/nvidia/mps");
        assert_true(cfg.gdrcopy_enabled);
        assert_true(cfg.gds_enabled);
        assert_true(cfg.mofed_enabled);
        assert_int_equal(cfg.discovery, KDEV_NVIDIA_DISCOVERY_NVML);
        assert_true(cfg.pass_device_specs);
        assert_int_equal(cfg.device_list_strategies,
                         KDEV_NVIDIA_LIST_ENVVAR | KDEV_NVIDIA_LIST_CDI_CRI);
        assert_int_equal(cfg.id_strategy, KDEV_NVIDIA_ID_INDEX);
        assert_string_equal(cfg.cdi_annotation_prefix, "cdi.example.com/");
        assert_string_equal(cfg.nvidia_ctk_path, "/opt/bin/nvidia-ctk");
        assert_string_equal(cfg.container_driver_root, "/host-driver");
        assert_int_equal(cfg.shared_policy, KDEV_NVIDIA_POLICY_PACKED);
        assert_int_equal(cfg.n_imex_channel_ids, 1);
        assert_int_equal(cfg.imex_channel_ids[0], 0);
        assert_true(cfg.imex_required);
        assert_int_equal(cfg.probe_interval, 5);
        assert_int_equal(cfg.quiet_period, 120);
        assert_int_equal(cfg.src[KDEV_NVIDIA_OPT_MIG_STRATEGY], KDEV_NVIDIA_SRC_FILE);
        assert_int_equal(cfg.src[KDEV_NVIDIA_OPT_DEV_ROOT], KDEV_NVIDIA_SRC_DEFAULT);
        assert_true(cfg.wanted);
        assert_int_equal(cfg.n_warnings, 1);
        assert_string_equal(cfg.warnings[0], "Customizing the 'resources' field is not yet "
                                             "supported in the config. Ignoring...");
        char buf[64];
        assert_string_equal(kdev_nvidia_list_strategies_text(cfg.device_list_strategies, buf,
                                                             sizeof(buf)),
                            "envvar,cdi-cri");
        kdev_nvidia_config_clear(&cfg);
}

static void test_sharing(void **state)
{
        (void)state;
        struct kdev_nvidia_config cfg;
        parse_ok(&cfg, "version: v1\n"
                       "sharing:\n"
                       "  timeSlicing:\n"
                       "    renameByDefault: true\n"
                       "    failRequestsGreaterThanOne: true\n"
                       "    resources:\n"
                       "      - name: nvidia.com/gpu\n"
                       "        replicas: 10\n"
                       "      - name: mig-1g.5gb\n"
                       "        rename: shared-1g\n"
                       "        devices: 2\n"
                       "        replicas: 2\n"
                       "      - name: mig-2g.10gb\n"
                       "        devices: [0, \"1:0\", GPU-8c3d0e7a-0b6f-4f57-a42f-8e7d8dca5c0e,"
                       " MIG-GPU-8c3d0e7a-0b6f-4f57-a42f-8e7d8dca5c0e/1/0,"
                       " MIG-2b1f3c9e-7d1a-5c2e-9f3b-0a1b2c3d4e5f]\n"
                       "        replicas: 3\n");
        const struct kdev_nvidia_replicated *ts = &cfg.time_slicing;
        assert_true(ts->present);
        assert_false(cfg.mps.present);
        assert_true(ts->rename_by_default);
        assert_int_equal(ts->fail_requests_greater_than_one, 1);
        assert_int_equal(cfg.mps.fail_requests_greater_than_one, -1);
        assert_int_equal(ts->n_resources, 3);
        assert_string_equal(ts->resources[0].name, "nvidia.com/gpu");
        assert_null(ts->resources[0].rename);
        assert_int_equal(ts->resources[0].devices_kind, KDEV_NVIDIA_DEVICES_ALL);
        assert_int_equal(ts->resources[0].replicas, 10);
        assert_int_equal(ts->resources[0].line, 7);
        assert_int_equal(ts->resources[0].column, 9);
        assert_string_equal(ts->resources[1].name, "nvidia.com/mig-1g.5gb");
        assert_string_equal(ts->resources[1].rename, "nvidia.com/shared-1g");
        assert_int_equal(ts->resources[1].devices_kind, KDEV_NVIDIA_DEVICES_COUNT);
        assert_int_equal(ts->resources[1].devices_count, 2);
        assert_int_equal(ts->resources[2].devices_kind, KDEV_NVIDIA_DEVICES_LIST);
        assert_int_equal(ts->resources[2].n_devices, 5);
        assert_string_equal(ts->resources[2].devices[0], "0");
        assert_string_equal(ts->resources[2].devices[1], "1:0");
        assert_string_equal(ts->resources[2].devices[3],
                            "MIG-GPU-8c3d0e7a-0b6f-4f57-a42f-8e7d8dca5c0e/1/0");
        assert_true(cfg.wanted);
        kdev_nvidia_config_clear(&cfg);
}

/* Files that the loader must refuse, with the exact message. */
struct bad_case {
        const char *text;
        const char *msg;
};

static void test_bad_files(void **state)
{
        (void)state;
        static const struct bad_case cases[] = {
                {"version: v1\nflags:\n  migStrategy: bogus\n",
                 "nv.yaml:3:16: flags.migStrategy: invalid MIG strategy: bogus (expected none, "
                 "single or mixed)"},
                {"version: v1\nflags:\n  migstrategy: none\n",
                 "nv.yaml:3:3: flags.migstrategy: unknown key (expected one of: migStrategy, "
                 "failOnInitError, nvidiaDriverRoot, nvidiaDevRoot, mpsRoot, gdrcopyEnabled, "
                 "gdsEnabled, mofedEnabled, useNodeFeatureAPI, deviceDiscoveryStrategy, plugin, "
                 "gfd)"},
                {"version: v1\nflags:\n  plugin:\n    deviceListStrategy: [envvar, bogus]\n",
                 "nv.yaml:4:34: flags.plugin.deviceListStrategy[1]: invalid strategy: bogus "
                 "(expected envvar, volume-mounts, cdi-annotations or cdi-cri)"},
                {"version: v1\nflags:\n  plugin:\n    deviceListStrategy: envvar,cdi-cri\n",
                 "nv.yaml:4:25: flags.plugin.deviceListStrategy: invalid strategy: "
                 "envvar,cdi-cri (expected envvar, volume-mounts, cdi-annotations or cdi-cri)"},
                {"version: v1\nflags:\n  plugin:\n    deviceListStrategy: []\n",
                 "nv.yaml:4:25: flags.plugin.deviceListStrategy: must have at least 1 entry"},
                {"version: v1\nflags:\n  plugin:\n    deviceIDStrategy: serial\n",
                 "nv.yaml:4:23: flags.plugin.deviceIDStrategy: invalid device ID strategy: "
                 "serial (expected uuid or index)"},
                {"version: v1\nflags:\n  failOnInitError: \"false\"\n",
                 "nv.yaml:3:20: flags.failOnInitError: must be true or false, got the quoted "
                 "string \"false\""},
                /* null is "absent" under flags (see test_null_is_absent), not
                 * under sharing */
                {"version: v1\nsharing:\n  timeSlicing:\n    renameByDefault:\n"
                 "    resources: [{name: gpu, replicas: 2}]\n",
                 "nv.yaml:4:21: sharing.timeSlicing.renameByDefault: must be true or false, "
                 "got null"},
                {"version: v1\nflags:\n  gdsEnabled: [true]\n",
                 "nv.yaml:3:15: flags.gdsEnabled: must be true or false, got a list"},
                {"version: v1\nflags:\n  nvidiaDriverRoot: run/nvidia\n",
                 "nv.yaml:3:21: flags.nvidiaDriverRoot: must be an absolute path, got "
                 "\"run/nvidia\""},
                {"version: v1\nflags:\n  deviceDiscoveryStrategy: wsl\n",
                 "nv.yaml:3:28: flags.deviceDiscoveryStrategy: invalid device discovery "
                 "strategy: wsl (expected auto, nvml or tegra)"},
                {"version: v1\nflags:\n  plugin:\n    sharedDevicesAllocationPolicy: spread\n",
                 "nv.yaml:4:36: flags.plugin.sharedDevicesAllocationPolicy: invalid allocation "
                 "policy: spread (expected distributed or packed)"},
                {"version: v1\nflags:\n  plugin:\n    cdiAnnotationPrefix: cdi.k8s.io\n",
                 "nv.yaml:4:26: flags.plugin.cdiAnnotationPrefix: invalid CDI annotation "
                 "prefix: \"cdi.k8s.io\" (expected a DNS subdomain followed by '/', e.g. "
                 "cdi.k8s.io/)"},
                {"version: v1\nflags:\n  migStrategy: none\n  migStrategy: mixed\n",
                 "nv.yaml:4:3: flags.migStrategy: duplicate key (first at line 3, column 3)"},
                {"version: v1\nimex:\n  channelIDs: [1]\n",
                 "nv.yaml:3:15: imex.channelIDs: invalid IMEX channel IDs: channelIDs must be "
                 "[] or [0]; found [1]"},
                {"version: v1\nimex:\n  channelIDs: [0, 0]\n",
                 "nv.yaml:3:15: imex.channelIDs: invalid IMEX channel IDs: channelIDs must be "
                 "[] or [0]; found [0 0]"},
                {"version: v1\nhealth:\n  probeInterval: 0\n",
                 "nv.yaml:3:18: health.probeInterval: must be an integer between 1 and 86400, "
                 "got \"0\""},
                {"version: v1\nhealth:\n  quietPeriod: 1m\n",
                 "nv.yaml:3:16: health.quietPeriod: must be an integer between 1 and 86400, got "
                 "\"1m\""},
                {"version: v1\nsharing:\n  timeSlicing:\n    resources:\n"
                 "      - name: nvidia.com/gpu\n        replicas: 1\n",
                 "nv.yaml:6:19: sharing.timeSlicing.resources[0].replicas: must be >= 2"},
                {"version: v1\nsharing:\n  timeSlicing:\n    resources:\n"
                 "      - name: nvidia.com/gpu\n",
                 "nv.yaml:5:9: sharing.timeSlicing.resources[0]: missing required key "
                 "\"replicas\""},
                {"version: v1\nsharing:\n  timeSlicing:\n    renameByDefault: true\n",
                 "nv.yaml:4:5: sharing.timeSlicing: missing required key \"resources\""},
                {"version: v1\nsharing:\n  timeSlicing:\n    resources: []\n",
                 "nv.yaml:4:16: sharing.timeSlicing.resources: must have at least 1 entry"},
                {"version: v1\nsharing:\n  timeSlicing:\n    resources:\n"
                 "      - {name: gpu, replicas: 2, devices: some}\n",
                 "nv.yaml:5:43: sharing.timeSlicing.resources[0].devices: must be \"all\", a "
                 "positive count or a list of devices, got \"some\""},
                {"version: v1\nsharing:\n  timeSlicing:\n    resources:\n"
                 "      - {name: gpu, replicas: 2, devices: 0}\n",
                 "nv.yaml:5:43: sharing.timeSlicing.resources[0].devices: a count of devices "
                 "must be > 0, got 0"},
                {"version: v1\nsharing:\n  timeSlicing:\n    resources:\n"
                 "      - {name: gpu, replicas: 2, devices: [GPU-1]}\n",
                 "nv.yaml:5:44: sharing.timeSlicing.resources[0].devices[0]: unsupported "
                 "device \"GPU-1\" (expected a GPU index, a MIG index \"<gpu>:<mig>\", a GPU "
                 "UUID or a MIG UUID)"},
                {"version: v1\nsharing:\n  timeSlicing:\n    resources:\n"
                 "      - {name: \"nvidia.com/x y\", replicas: 2}\n",
                 NULL /* message of the name checker; only the position is checked */},
                {"version: v1\nresources:\n  gpus:\n    - pattern: \"*\"\n",
                 "nv.yaml:4:7: resources.gpus[0]: missing required key \"name\""},
                {"version: v1\nflags:\n  gfd:\n    oneshot: maybe\n",
                 "nv.yaml:4:14: flags.gfd.oneshot: must be true or false, got \"maybe\""},
                {"version: v1\nnvidia: {}\n",
                 "nv.yaml:2:1: nvidia: unknown key (expected one of: version, generic, flags, "
                 "resources, sharing, imex, health, usage, isolation)"},
        };
        for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
                struct kdev_nvidia_config cfg;
                struct kdev_err e;
                int rc = parse(&cfg, cases[i].text, &e);
                if (rc != -EINVAL)
                        fail_msg("case %zu: rc %d (%s)", i, rc, e.msg);
                if (cases[i].msg && strcmp(e.msg, cases[i].msg) != 0)
                        fail_msg("case %zu:\n got  %s\n want %s", i, e.msg, cases[i].msg);
                static const char name_pos[] = "nv.yaml:5:16: sharing.timeSlicing."
                                               "resources[0].name: ";
                if (!cases[i].msg && strncmp(e.msg, name_pos, strlen(name_pos)) != 0)
                        fail_msg("case %zu: %s", i, e.msg);
                kdev_nvidia_config_clear(&cfg);
        }
}

/* Review 4, F4: null under flags / flags.plugin / imex / resources is the
 * key left out, as NVIDIA reads it; a null section still counts as NVIDIA's;
 * an alias to a null is still refused. */
static void test_null_is_absent(void **state)
{
        (void)state;
        static const char *const texts[] = {
                "version: v1\nflags:\n  migStrategy:\n",
                "version: v1\nflags:\n  plugin:\n",
                "version: v1\nflags:\n",
                "version: v1\nimex:\n",
                "version: v1\nresources: ~\n",
                "version: v1\nflags:\n  failOnInitError: null\n  plugin:\n"
                "    deviceListStrategy:\nimex:\n  channelIDs:\n",
        };
        for (size_t i = 0; i < sizeof(texts) / sizeof(texts[0]); i++) {
                struct kdev_nvidia_config cfg;
                parse_ok(&cfg, texts[i]);
                assert_true(cfg.wanted);
                assert_int_equal(cfg.mig_strategy, KDEV_NVIDIA_MIG_NONE);
                assert_int_equal(cfg.src[KDEV_NVIDIA_OPT_MIG_STRATEGY], KDEV_NVIDIA_SRC_DEFAULT);
                assert_true(cfg.fail_on_init_error);
                assert_int_equal(cfg.device_list_strategies, KDEV_NVIDIA_LIST_ENVVAR);
                assert_int_equal(cfg.n_warnings, 0);
                kdev_nvidia_config_clear(&cfg);
        }
        /* a weaker source than env: env still applies over an absent key */
        struct kdev_nvidia_config cfg;
        struct kdev_err e;
        assert_int_equal(parse(&cfg, "version: v1\nflags:\n  migStrategy:\n", &e), 0);
        char *env[] = {"MIG_STRATEGY=mixed", NULL};
        assert_int_equal(kdev_nvidia_config_apply_env(&cfg, env, &e), 0);
        assert_int_equal(kdev_nvidia_config_finish(&cfg, true, &e), 0);
        assert_int_equal(cfg.mig_strategy, KDEV_NVIDIA_MIG_MIXED);
        kdev_nvidia_config_clear(&cfg);
        /* through an alias: refused as every alias is */
        assert_int_equal(parse(&cfg,
                               "version: v1\nflags:\n  mpsRoot: &n\n  migStrategy: *n\n", &e),
                         -EINVAL);
        assert_string_equal(e.msg, "nv.yaml:3:12: flags.migStrategy: YAML anchors and aliases "
                                   "are not supported");
        kdev_nvidia_config_clear(&cfg);
}

static void test_generic_only_file_not_wanted(void **state)
{
        (void)state;
        struct kdev_nvidia_config cfg;
        parse_ok(&cfg, "version: v1\ngeneric:\n  devices: []\n");
        assert_false(cfg.wanted);
        kdev_nvidia_config_clear(&cfg);
        /* an empty flags section is enough */
        parse_ok(&cfg, "version: v1\nflags: {}\n");
        assert_true(cfg.wanted);
        kdev_nvidia_config_clear(&cfg);
        /* a flag switches it on; env does not */
        struct kdev_err e;
        parse_ok(&cfg, "version: v1\n");
        assert_false(cfg.wanted);
        char *env[] = {"MIG_STRATEGY=none", NULL};
        assert_int_equal(kdev_nvidia_config_apply_env(&cfg, env, &e), 0);
        assert_int_equal(kdev_nvidia_config_finish(&cfg, true, &e), 0);
        assert_false(cfg.wanted);
        assert_int_equal(kdev_nvidia_config_apply_flag(&cfg, "pass-device-specs", NULL, &e), 0);
        assert_int_equal(kdev_nvidia_config_finish(&cfg, true, &e), 0);
        assert_true(cfg.wanted);
        kdev_nvidia_config_clear(&cfg);
}

static void test_precedence(void **state)
{
        (void)state;
        static const char text[] = "version: v1\n"
                                   "flags:\n"
                                   "  migStrategy: mixed\n"
                                   "  failOnInitError: false\n"
                                   "  nvidiaDriverRoot: /file\n"
                                   "  plugin:\n"
                                   "    deviceListStrategy: volume-mounts\n"
                                   "    deviceIDStrategy: index\n"
                                   "health: {quietPeriod: 30}\n";
        char *env[] = {"PATH=/bin",
                       "MIG_STRATEGY=single",
                       "NVIDIA_DRIVER_ROOT=/env",
                       "DEVICE_LIST_STRATEGY=cdi-annotations, cdi-cri",
                       "FAIL_ON_INIT_ERROR=",         /* empty bool: unset */
                       "NVIDIA_CTK_PATH=/second",     /* second name of the row */
                       "KDEV_HEALTH_QUIET_PERIOD=45",
                       "GDS_ENABLED=T",
                       NULL};
        /* the same result whatever the order of file, env and flags */
        for (int order = 0; order < 3; order++) {
                struct kdev_nvidia_config cfg;
                struct kdev_err e;
                kdev_err_clear(&e);
                if (order == 0) {
                        assert_int_equal(parse(&cfg, text, &e), 0);
                        assert_int_equal(kdev_nvidia_config_apply_env(&cfg, env, &e), 0);
                        assert_int_equal(kdev_nvidia_config_apply_flag(&cfg, "mig-strategy",
                                                                       "none", &e), 0);
                        assert_int_equal(kdev_nvidia_config_apply_flag(&cfg,
                                                                       "device-list-strategy",
                                                                       "envvar", &e), 0);
                        assert_int_equal(kdev_nvidia_config_apply_flag(&cfg,
                                                                       "device-list-strategy",
                                                                       "cdi-cri", &e), 0);
                } else {
                        /* flags first (as getopt runs), then env, then the file */
                        assert_int_equal(kdev_nvidia_config_init(&cfg, &e), 0);
                        assert_int_equal(kdev_nvidia_config_apply_flag(&cfg, "mig-strategy",
                                                                       "none", &e), 0);
                        assert_int_equal(kdev_nvidia_config_apply_flag(&cfg,
                                                                       "device-list-strategy",
                                                                       "envvar,cdi-cri", &e),
                                         0);
                        if (order == 2)
                                assert_int_equal(kdev_nvidia_config_apply_env(&cfg, env, &e), 0);
                        assert_int_equal(parse_file(&cfg, "nv.yaml", text, &e), 0);
                        if (order == 1)
                                assert_int_equal(kdev_nvidia_config_apply_env(&cfg, env, &e), 0);
                }
                assert_int_equal(kdev_nvidia_config_finish(&cfg, true, &e), 0);
                assert_int_equal(cfg.mig_strategy, KDEV_NVIDIA_MIG_NONE);     /* flag */
                assert_int_equal(cfg.src[KDEV_NVIDIA_OPT_MIG_STRATEGY], KDEV_NVIDIA_SRC_FLAG);
                assert_int_equal(cfg.device_list_strategies,                  /* flags */
                                 KDEV_NVIDIA_LIST_ENVVAR | KDEV_NVIDIA_LIST_CDI_CRI);
                assert_string_equal(cfg.driver_root, "/env");                 /* env */
                assert_string_equal(cfg.dev_root, "/env");
                assert_string_equal(cfg.nvidia_ctk_path, "/second");
                assert_int_equal(cfg.src[KDEV_NVIDIA_OPT_DRIVER_ROOT], KDEV_NVIDIA_SRC_ENV);
                assert_false(cfg.fail_on_init_error);                         /* file */
                assert_int_equal(cfg.id_strategy, KDEV_NVIDIA_ID_INDEX);       /* file */
                assert_int_equal(cfg.quiet_period, 45);                       /* env */
                assert_true(cfg.gds_enabled);                                 /* env */
                assert_int_equal(cfg.probe_interval, 10);                     /* default */
                assert_true(cfg.flag_given);
                kdev_nvidia_config_clear(&cfg);
        }
}

static void test_env_flag_errors(void **state)
{
        (void)state;
        static const struct {
                const char *env; /* "NAME=value", or NULL for the flag */
                const char *flag, *value;
                int rc;
                const char *msg;
        } cases[] = {
                {"MIG_STRATEGY=bogus", NULL, NULL, -EINVAL,
                 "MIG_STRATEGY: invalid MIG strategy: bogus (expected none, single or mixed)"},
                {"DEVICE_LIST_STRATEGY=envvar,nope", NULL, NULL, -EINVAL,
                 "DEVICE_LIST_STRATEGY: invalid strategy: nope (expected envvar, volume-mounts, "
                 "cdi-annotations or cdi-cri)"},
                {"PASS_DEVICE_SPECS=yes", NULL, NULL, -EINVAL,
                 "PASS_DEVICE_SPECS: invalid boolean: yes (expected true or false)"},
                {"DEVICE_ID_STRATEGY=", NULL, NULL, -EINVAL,
                 "DEVICE_ID_STRATEGY: invalid device ID strategy:  (expected uuid or index)"},
                {"IMEX_CHANNEL_IDS=0,1", NULL, NULL, -EINVAL,
                 "IMEX_CHANNEL_IDS: invalid IMEX channel IDs: channelIDs must be [] or [0]; "
                 "found [0 1]"},
                {"KDEV_HEALTH_PROBE_INTERVAL=90000", NULL, NULL, -EINVAL,
                 "KDEV_HEALTH_PROBE_INTERVAL: must be an integer between 1 and 86400, got "
                 "\"90000\""},
                {"NVIDIA_DEV_ROOT=dev", NULL, NULL, -EINVAL,
                 "NVIDIA_DEV_ROOT: must be an absolute path, got \"dev\""},
                {NULL, "device-id-strategy", "serial", -EINVAL,
                 "--device-id-strategy: invalid device ID strategy: serial (expected uuid or "
                 "index)"},
                {NULL, "device-id-strategy", NULL, -EINVAL,
                 "--device-id-strategy: a value is required"},
                {NULL, "fail-on-init-error", "nah", -EINVAL,
                 "--fail-on-init-error: invalid boolean: nah (expected true or false)"},
                {NULL, "mig-stratgy", "none", -ENOENT, "unknown flag --mig-stratgy"},
                {NULL, "cdi-annotation-prefix", "Bad_Prefix/", -EINVAL,
                 "--cdi-annotation-prefix: invalid CDI annotation prefix: \"Bad_Prefix/\" "
                 "(expected a DNS subdomain followed by '/', e.g. cdi.k8s.io/)"},
                {NULL, "imex-channel-ids", "x", -EINVAL,
                 "--imex-channel-ids: must be an integer between 0 and 2147483647, got \"x\""},
        };
        for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
                struct kdev_nvidia_config cfg;
                struct kdev_err e;
                assert_int_equal(kdev_nvidia_config_init(&cfg, &e), 0);
                kdev_err_clear(&e);
                int rc;
                if (cases[i].env) {
                        char *env[] = {(char *)cases[i].env, NULL};
                        rc = kdev_nvidia_config_apply_env(&cfg, env, &e);
                } else {
                        rc = kdev_nvidia_config_apply_flag(&cfg, cases[i].flag, cases[i].value,
                                                           &e);
                }
                if (rc != cases[i].rc || strcmp(e.msg, cases[i].msg) != 0)
                        fail_msg("case %zu: rc %d\n got  %s\n want %s", i, rc, e.msg,
                                 cases[i].msg);
                kdev_nvidia_config_clear(&cfg);
        }
}

/* usage.interval, KDEV_USAGE_INTERVAL and --usage-interval: one option,
 * 0 (off) by default, 0..3600 seconds, flag over variable over file. */
static void test_usage_interval(void **state)
{
        (void)state;
        struct kdev_nvidia_config cfg;
        struct kdev_err e;
        kdev_err_clear(&e);
        assert_int_equal(kdev_nvidia_config_init(&cfg, &e), 0);
        assert_int_equal(cfg.usage_interval, 0);
        kdev_nvidia_config_clear(&cfg);

        const char *text = "version: v1\nusage:\n  interval: 30\n";
        parse_ok(&cfg, text);
        assert_int_equal(cfg.usage_interval, 30);
        assert_int_equal(cfg.src[KDEV_NVIDIA_OPT_USAGE_INTERVAL], KDEV_NVIDIA_SRC_FILE);
        kdev_nvidia_config_clear(&cfg);

        char *env[] = {"KDEV_USAGE_INTERVAL=5", NULL};
        assert_int_equal(kdev_nvidia_config_init(&cfg, &e), 0);
        assert_int_equal(kdev_nvidia_config_apply_env(&cfg, env, &e), 0);
        assert_int_equal(parse_file(&cfg, "nv.yaml", text, &e), 0);
        assert_int_equal(cfg.usage_interval, 5);
        kdev_nvidia_config_clear(&cfg);

        assert_int_equal(kdev_nvidia_config_init(&cfg, &e), 0);
        assert_int_equal(kdev_nvidia_config_apply_flag(&cfg, "usage-interval", "1", &e), 0);
        assert_int_equal(kdev_nvidia_config_apply_env(&cfg, env, &e), 0);
        assert_int_equal(parse_file(&cfg, "nv.yaml", text, &e), 0);
        assert_int_equal(cfg.usage_interval, 1);
        assert_int_equal(kdev_nvidia_config_apply_flag(&cfg, "usage-interval", "3601", &e),
                         -EINVAL);
        assert_string_equal(e.msg,
                            "--usage-interval: must be an integer between 0 and 3600, got \"3601\"");
        kdev_nvidia_config_clear(&cfg);

        char *bad_env[] = {"KDEV_USAGE_INTERVAL=1s", NULL};
        assert_int_equal(kdev_nvidia_config_init(&cfg, &e), 0);
        assert_int_equal(kdev_nvidia_config_apply_env(&cfg, bad_env, &e), -EINVAL);
        assert_string_equal(e.msg,
                            "KDEV_USAGE_INTERVAL: must be an integer between 0 and 3600, got \"1s\"");
        kdev_nvidia_config_clear(&cfg);

        assert_int_equal(kdev_nvidia_config_init(&cfg, &e), 0);
        assert_int_not_equal(parse_file(&cfg, "nv.yaml", "version: v1\nusage:\n  interval: -1\n",
                                        &e), 0);
        assert_string_equal(e.msg, "nv.yaml:3:13: usage.interval: must be an integer between 0 "
                                   "and 3600, got \"-1\"");
        kdev_nvidia_config_clear(&cfg);
        assert_int_equal(kdev_nvidia_config_init(&cfg, &e), 0);
        assert_int_not_equal(parse_file(&cfg, "nv.yaml", "version: v1\nusage:\n  period: 1\n",
                                        &e), 0);
        assert_string_equal(e.msg,
                            "nv.yaml:3:3: usage.period: unknown key (expected one of: interval)");
        kdev_nvidia_config_clear(&cfg);
}

static void test_flags(void **state)
{
        (void)state;
        struct kdev_nvidia_config cfg;
        struct kdev_err e;
        assert_int_equal(kdev_nvidia_config_init(&cfg, &e), 0);
        /* every flag of the table is accepted with a valid value */
        for (const struct kdev_nvidia_flag *f = kdev_nvidia_flags; f->name; f++) {
                const char *v = f->is_bool ? NULL : "/x";
                if (f->opt == KDEV_NVIDIA_OPT_MIG_STRATEGY)
                        v = "mixed";
                else if (f->opt == KDEV_NVIDIA_OPT_DISCOVERY)
                        v = "nvml";
                else if (f->opt == KDEV_NVIDIA_OPT_DEVICE_LIST_STRATEGY)
                        v = "volume-mounts";
                else if (f->opt == KDEV_NVIDIA_OPT_DEVICE_ID_STRATEGY)
                        v = "index";
                else if (f->opt == KDEV_NVIDIA_OPT_CDI_ANNOTATION_PREFIX)
                        v = "example.com/";
                else if (f->opt == KDEV_NVIDIA_OPT_SHARED_POLICY)
                        v = "packed";
                else if (f->opt == KDEV_NVIDIA_OPT_IMEX_CHANNEL_IDS)
                        v = "0";
                else if (f->opt == KDEV_NVIDIA_OPT_PROBE_INTERVAL ||
                         f->opt == KDEV_NVIDIA_OPT_QUIET_PERIOD ||
                         f->opt == KDEV_NVIDIA_OPT_USAGE_INTERVAL)
                        v = "7";
                else if (f->opt == KDEV_NVIDIA_OPT_CDI_FEATURE_FLAGS)
                        v = "disable-ipc-discoverer";
                else if (f->opt == KDEV_NVIDIA_OPT_CDI_DISABLE_HOOKS)
                        v = "all";
                if (kdev_nvidia_config_apply_flag(&cfg, f->name, v, &e) != 0)
                        fail_msg("--%s: %s", f->name, e.msg);
                assert_int_equal(cfg.src[f->opt], KDEV_NVIDIA_SRC_FLAG);
        }
        assert_int_equal(cfg.mig_strategy, KDEV_NVIDIA_MIG_MIXED);
        assert_true(cfg.fail_on_init_error);
        assert_true(cfg.gdrcopy_enabled && cfg.gds_enabled && cfg.mofed_enabled);
        assert_true(cfg.pass_device_specs && cfg.imex_required);
        assert_string_equal(cfg.driver_root, "/x");
        assert_string_equal(cfg.cdi_dir, "/x");
        assert_int_equal(cfg.probe_interval, 7);
        assert_int_equal(cfg.quiet_period, 7);
        assert_int_equal(cfg.usage_interval, 7);
        assert_int_equal(cfg.device_list_strategies, KDEV_NVIDIA_LIST_VOLUME_MOUNTS);
        assert_int_equal(cfg.n_imex_channel_ids, 1);
        /* a repeated imex flag adds: [0, 0] is refused */
        assert_int_equal(kdev_nvidia_config_apply_flag(&cfg, "imex-channel-ids", "0", &e),
                         -EINVAL);
        assert_int_equal(cfg.n_imex_channel_ids, 1);
        assert_int_equal(kdev_nvidia_config_apply_flag(&cfg, "fail-on-init-error", "false", &e),
                         0);
        assert_false(cfg.fail_on_init_error);
        kdev_nvidia_config_clear(&cfg);
}

static void test_finish_rules(void **state)
{
        (void)state;
        static const struct bad_case cases[] = {
                {"version: v1\nsharing:\n  mps:\n    resources: [{name: gpu, replicas: 2}]\n",
                 "using MPS requires --mps-root to be specified"},
                {"version: v1\nflags: {migStrategy: mixed, mpsRoot: /m}\n"
                 "sharing:\n  mps:\n    resources: [{name: gpu, replicas: 2}]\n",
                 "using --mig-strategy=mixed is not supported with MPS"},
                {"version: v1\nflags:\n  deviceDiscoveryStrategy: tegra\n"
                 "  plugin: {deviceListStrategy: cdi-cri}\n",
                 "CDI --device-list-strategy options are only supported on NVML-based systems"},
                {"version: v1\nflags:\n  deviceDiscoveryStrategy: tegra\n",
                 "deviceDiscoveryStrategy tegra is not supported by kdev (NVML only)"},
        };
        for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
                struct kdev_nvidia_config cfg;
                struct kdev_err e;
                if (parse(&cfg, cases[i].text, &e) != 0)
                        fail_msg("case %zu: %s", i, e.msg);
                assert_int_equal(kdev_nvidia_config_finish(&cfg, true, &e), -EINVAL);
                assert_string_equal(e.msg, cases[i].msg);
                kdev_nvidia_config_clear(&cfg);
        }
        /* an explicit dev root stays; an empty one means the driver root */
        struct kdev_nvidia_config cfg;
        struct kdev_err e;
        parse_ok(&cfg, "version: v1\nflags: {nvidiaDriverRoot: /d, nvidiaDevRoot: /v}\n");
        assert_string_equal(cfg.dev_root, "/v");
        kdev_nvidia_config_clear(&cfg);
        parse_ok(&cfg, "version: v1\nflags: {nvidiaDriverRoot: /d, nvidiaDevRoot: \"\"}\n");
        assert_string_equal(cfg.dev_root, "/d");
        kdev_nvidia_config_clear(&cfg);
        (void)e;
}

int main(void)
{
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_defaults),
                cmocka_unit_test(test_full_file),
                cmocka_unit_test(test_sharing),
                cmocka_unit_test(test_bad_files),
                cmocka_unit_test(test_null_is_absent),
                cmocka_unit_test(test_generic_only_file_not_wanted),
                cmocka_unit_test(test_precedence),
                cmocka_unit_test(test_env_flag_errors),
                cmocka_unit_test(test_flags),
                cmocka_unit_test(test_usage_interval),
                cmocka_unit_test(test_finish_rules),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
