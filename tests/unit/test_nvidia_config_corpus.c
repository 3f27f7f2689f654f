/* NVIDIA config files on disk (tests/nvidia-configs/): NVIDIA's documented
 * example configs load unchanged with the expected values (good/), and every
 * kind of mistake (bad/) gives its exact file:line:column message without
 * crashing. Keys and rules: NVIDIA
 * k8s-device-plugin v0.20.0 api/config/v1 (config.go, flags.go, replicas.go). */
#include <dirent.h>
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

#define DIR_GOOD KDEV_SOURCE_DIR "/tests/nvidia-configs/good/"
#define DIR_BAD KDEV_SOURCE_DIR "/tests/nvidia-configs/bad/"

/* Loads |path| with the NVIDIA sections and finishes the config. Returns the
 * first failing call's result; |e| holds the message. */
static int load(const char *path, struct kdev_nvidia_config *cfg, struct kdev_err *e)
{
        assert_int_equal(kdev_nvidia_config_init(cfg, e), 0);
        kdev_err_clear(e);
        int rc = parse_file(cfg, path, NULL, e);
        if (rc >= 0)
                rc = kdev_nvidia_config_finish(cfg, rc == 0, e);
        return rc;
}

static void load_ok(const char *name, struct kdev_nvidia_config *cfg)
{
        char path[512];
        snprintf(path, sizeof(path), DIR_GOOD "%s", name);
        struct kdev_err e;
        if (load(path, cfg, &e) != 0)
                fail_msg("%s: %s", name, e.msg);
        assert_true(cfg->wanted);
}

static void test_time_slicing(void **state)
{
        (void)state;
        struct kdev_nvidia_config cfg;
        load_ok("time-slicing.yaml", &cfg);
        const struct kdev_nvidia_replicated *ts = &cfg.time_slicing;
        assert_true(ts->present);
        assert_false(ts->rename_by_default);
        assert_int_equal(ts->fail_requests_greater_than_one, -1);
        assert_int_equal(ts->n_resources, 1);
        assert_string_equal(ts->resources[0].name, "nvidia.com/gpu");
        assert_null(ts->resources[0].rename);
        assert_int_equal(ts->resources[0].devices_kind, KDEV_NVIDIA_DEVICES_ALL);
        assert_int_equal(ts->resources[0].replicas, 10);
        assert_int_equal(ts->resources[0].line, 7);
        assert_int_equal(ts->resources[0].column, 7);
        assert_false(cfg.mps.present);
        assert_int_equal(cfg.mig_strategy, KDEV_NVIDIA_MIG_NONE);
        assert_int_equal(cfg.n_warnings, 0);
        kdev_nvidia_config_clear(&cfg);
}

static void test_time_slicing_rename_by_default(void **state)
{
        (void)state;
        struct kdev_nvidia_config cfg;
        load_ok("time-slicing-rename-by-default.yaml", &cfg);
        const struct kdev_nvidia_replicated *ts = &cfg.time_slicing;
        assert_true(ts->rename_by_default);
        assert_int_equal(ts->fail_requests_greater_than_one, 1);
        assert_int_equal(ts->n_resources, 1);
        assert_string_equal(ts->resources[0].name, "nvidia.com/gpu");
        assert_int_equal(ts->resources[0].replicas, 10);
        kdev_nvidia_config_clear(&cfg);
}

static void test_time_slicing_rename(void **state)
{
        (void)state;
        struct kdev_nvidia_config cfg;
        load_ok("time-slicing-rename.yaml", &cfg);
        const struct kdev_nvidia_replicated *ts = &cfg.time_slicing;
        assert_false(ts->rename_by_default);
        assert_int_equal(ts->fail_requests_greater_than_one, 0);
        assert_int_equal(ts->n_resources, 2);
        const struct kdev_nvidia_replicated_resource *a = &ts->resources[0], *b = &ts->resources[1];
        assert_string_equal(a->name, "nvidia.com/gpu");
        assert_string_equal(a->rename, "nvidia.com/gpu-ts");
        assert_int_equal(a->devices_kind, KDEV_NVIDIA_DEVICES_LIST);
        assert_int_equal(a->n_devices, 2);
        assert_string_equal(a->devices[0], "0");
        assert_string_equal(a->devices[1], "1");
        assert_int_equal(a->replicas, 4);
        assert_string_equal(b->name, "nvidia.com/gpu"); /* "gpu" gets the prefix */
        assert_null(b->rename);
        assert_int_equal(b->devices_kind, KDEV_NVIDIA_DEVICES_COUNT);
        assert_int_equal(b->devices_count, 2);
        assert_int_equal(b->replicas, 2);
        kdev_nvidia_config_clear(&cfg);
}

static void test_mig_mixed_time_slicing(void **state)
{
        (void)state;
        struct kdev_nvidia_config cfg;
        load_ok("mig-mixed-time-slicing.yaml", &cfg);
        assert_int_equal(cfg.mig_strategy, KDEV_NVIDIA_MIG_MIXED);
        assert_int_equal(cfg.src[KDEV_NVIDIA_OPT_MIG_STRATEGY], KDEV_NVIDIA_SRC_FILE);
        const struct kdev_nvidia_replicated *ts = &cfg.time_slicing;
        static const char *const names[] = {"nvidia.com/mig-1g.5gb", "nvidia.com/mig-2g.10gb",
                                            "nvidia.com/mig-3g.20gb", "nvidia.com/mig-7g.40gb"};
        static const unsigned replicas[] = {2, 2, 3, 7};
        assert_int_equal(ts->n_resources, 4);
        for (size_t i = 0; i < 4; i++) {
                assert_string_equal(ts->resources[i].name, names[i]);
                assert_int_equal(ts->resources[i].replicas, replicas[i]);
                assert_int_equal(ts->resources[i].devices_kind, KDEV_NVIDIA_DEVICES_ALL);
        }
        kdev_nvidia_config_clear(&cfg);
}

static void test_mig_mixed(void **state)
{
        (void)state;
        struct kdev_nvidia_config cfg;
        load_ok("mig-mixed.yaml", &cfg);
        assert_int_equal(cfg.mig_strategy, KDEV_NVIDIA_MIG_MIXED);
        assert_false(cfg.fail_on_init_error);
        assert_int_equal(cfg.device_list_strategies,
                         KDEV_NVIDIA_LIST_ENVVAR | KDEV_NVIDIA_LIST_CDI_ANNOTATIONS);
        assert_int_equal(cfg.id_strategy, KDEV_NVIDIA_ID_INDEX);
        assert_false(cfg.time_slicing.present);
        assert_int_equal(cfg.n_warnings, 1);
        assert_string_equal(cfg.warnings[0], "Customizing the 'resources' field is not yet "
                                             "supported in the config. Ignoring...");
        kdev_nvidia_config_clear(&cfg);
}

static void test_full_flags(void **state)
{
        (void)state;
        struct kdev_nvidia_config cfg;
        load_ok("full-flags.yaml", &cfg);
        assert_int_equal(cfg.mig_strategy, KDEV_NVIDIA_MIG_NONE);
        assert_true(cfg.fail_on_init_error);
        assert_string_equal(cfg.driver_root, "/");
        assert_string_equal(cfg.dev_root, "/");
        assert_false(cfg.pass_device_specs);
        assert_int_equal(cfg.device_list_strategies, KDEV_NVIDIA_LIST_ENVVAR);
        assert_int_equal(cfg.id_strategy, KDEV_NVIDIA_ID_UUID);
        assert_int_equal(cfg.src[KDEV_NVIDIA_OPT_MIG_STRATEGY], KDEV_NVIDIA_SRC_FILE);
        assert_int_equal(cfg.src[KDEV_NVIDIA_OPT_FAIL_ON_INIT_ERROR], KDEV_NVIDIA_SRC_FILE);
        assert_int_equal(cfg.src[KDEV_NVIDIA_OPT_DRIVER_ROOT], KDEV_NVIDIA_SRC_FILE);
        assert_int_equal(cfg.src[KDEV_NVIDIA_OPT_PASS_DEVICE_SPECS], KDEV_NVIDIA_SRC_FILE);
        assert_int_equal(cfg.src[KDEV_NVIDIA_OPT_DEVICE_LIST_STRATEGY], KDEV_NVIDIA_SRC_FILE);
        assert_int_equal(cfg.src[KDEV_NVIDIA_OPT_DEVICE_ID_STRATEGY], KDEV_NVIDIA_SRC_FILE);
        assert_false(cfg.time_slicing.present);
        assert_int_equal(cfg.n_warnings, 0);
        kdev_nvidia_config_clear(&cfg);
}

/* Review 4, F4: a YAML null under flags, flags.plugin, flags.gfd, imex and
 * resources is the key left out (NVIDIA's pointer fields): every option keeps
 * its default and its source stays "default"; the file still wants NVIDIA
 * GPUs. */
static void test_null_values(void **state)
{
        (void)state;
        static const char *const files[] = {"null-flags.yaml", "null-nested.yaml"};
        for (size_t f = 0; f < 2; f++) {
                struct kdev_nvidia_config cfg;
                load_ok(files[f], &cfg);
                for (size_t o = 0; o < KDEV_NVIDIA_OPT_COUNT; o++) {
                        if (cfg.src[o] != KDEV_NVIDIA_SRC_DEFAULT)
                                fail_msg("%s: option %zu has source %d", files[f], o,
                                         (int)cfg.src[o]);
                }
                assert_int_equal(cfg.mig_strategy, KDEV_NVIDIA_MIG_NONE);
                assert_true(cfg.fail_on_init_error);
                assert_string_equal(cfg.driver_root, "/");
                assert_string_equal(cfg.dev_root, "/");
                assert_false(cfg.pass_device_specs);
                assert_false(cfg.gds_enabled);
                assert_int_equal(cfg.device_list_strategies, KDEV_NVIDIA_LIST_ENVVAR);
                assert_int_equal(cfg.id_strategy, KDEV_NVIDIA_ID_UUID);
                assert_int_equal(cfg.n_imex_channel_ids, 0);
                assert_false(cfg.imex_required);
                assert_false(cfg.time_slicing.present);
                assert_int_equal(cfg.n_warnings, 0); /* resources: nothing customised */
                kdev_nvidia_config_clear(&cfg);
        }
}

/* A file without a YAML document (empty, or comments only) is NVIDIA's
 * defaults, as if no file were given: the reader says 1 (nothing read), no
 * option comes from the file, and NVIDIA is wanted (kdev-plugin finishes the
 * config as without a file). */
static void test_empty_files_are_defaults(void **state)
{
        (void)state;
        static const char *const files[] = {"empty.yaml", "comment-only.yaml"};
        for (size_t f = 0; f < 2; f++) {
                char path[512];
                snprintf(path, sizeof(path), DIR_GOOD "%s", files[f]);
                struct kdev_nvidia_config cfg;
                struct kdev_err e;
                assert_int_equal(kdev_nvidia_config_init(&cfg, &e), 0);
                kdev_err_clear(&e);
                assert_int_equal(parse_file(&cfg, path, NULL, &e), 1);
                assert_int_equal(e.code, 0);
                assert_string_equal(e.msg, "");
                assert_false(cfg.file_sections);
                assert_int_equal(kdev_nvidia_config_finish(&cfg, false, &e), 0);
                assert_true(cfg.wanted);
                for (size_t o = 0; o < KDEV_NVIDIA_OPT_COUNT; o++)
                        assert_int_equal(cfg.src[o], KDEV_NVIDIA_SRC_DEFAULT);
                assert_int_equal(cfg.mig_strategy, KDEV_NVIDIA_MIG_NONE);
                assert_int_equal(cfg.device_list_strategies, KDEV_NVIDIA_LIST_ENVVAR);
                assert_false(cfg.time_slicing.present);
                kdev_nvidia_config_clear(&cfg);
        }
}

/* Every file of good/ loads; every file of bad/ is in the table below. */
struct bad_case {
        const char *file;
        const char *msg; /* after "<path>:" */
};

static const struct bad_case bad_cases[] = {
        {"typo-key.yaml",
         "3:3: flags.migStrategie: unknown key (expected one of: migStrategy, "
         "failOnInitError, nvidiaDriverRoot, nvidiaDevRoot, mpsRoot, gdrcopyEnabled, "
         "gdsEnabled, mofedEnabled, useNodeFeatureAPI, deviceDiscoveryStrategy, plugin, "
         "gfd)"},
        {"wrong-nesting-plugin.yaml",
         "5:3: flags.deviceListStrategy: unknown key (expected one of: migStrategy, "
         "failOnInitError, nvidiaDriverRoot, nvidiaDevRoot, mpsRoot, gdrcopyEnabled, "
         "gdsEnabled, mofedEnabled, useNodeFeatureAPI, deviceDiscoveryStrategy, plugin, "
         "gfd)"},
        {"wrong-nesting-sharing.yaml",
         "3:3: sharing.resources: unknown key (expected one of: timeSlicing, mps)"},
        {"string-for-int.yaml",
         "6:19: sharing.timeSlicing.resources[0].replicas: must be an integer between 2 "
         "and 4096, got the quoted string \"4\""},
        {"word-for-int.yaml",
         "6:19: sharing.timeSlicing.resources[0].replicas: must be an integer between 2 "
         "and 4096, got \"four\""},
        {"replicas-1.yaml", "6:19: sharing.timeSlicing.resources[0].replicas: must be >= 2"},
        {"replicas-0.yaml", "6:19: sharing.timeSlicing.resources[0].replicas: must be >= 2"},
        {"replicas-negative.yaml",
         "6:19: sharing.timeSlicing.resources[0].replicas: must be an integer between 2 "
         "and 4096, got \"-3\""},
        {"replicas-too-many.yaml",
         "6:19: sharing.timeSlicing.resources[0].replicas: must be <= 4096"},
        {"huge-replicas.yaml", "6:19: sharing.timeSlicing.resources[0].replicas: must be <= 4096"},
        {"float-replicas.yaml",
         "6:19: sharing.timeSlicing.resources[0].replicas: must be an integer between 2 "
         "and 4096, got \"2.5\""},
        {"null-replicas.yaml",
         "6:19: sharing.timeSlicing.resources[0].replicas: must be an integer between 2 "
         "and 4096, got null"},
        {"tagged-replicas.yaml",
         "6:19: sharing.timeSlicing.resources[0].replicas: YAML tags are not supported "
         "(\"!!int\")"},
        {"replicas-missing.yaml",
         "5:9: sharing.timeSlicing.resources[0]: missing required key \"replicas\""},
        {"name-missing.yaml",
         "5:9: sharing.timeSlicing.resources[0]: missing required key \"name\""},
        {"unknown-mig-strategy.yaml",
         "3:16: flags.migStrategy: invalid MIG strategy: mixd (expected none, single or "
         "mixed)"},
        {"unknown-list-strategy.yaml",
         "4:34: flags.plugin.deviceListStrategy[1]: invalid strategy: cdi (expected "
         "envvar, volume-mounts, cdi-annotations or cdi-cri)"},
        {"unknown-id-strategy.yaml",
         "4:23: flags.plugin.deviceIDStrategy: invalid device ID strategy: serial "
         "(expected uuid or index)"},
        {"unknown-policy.yaml",
         "4:36: flags.plugin.sharedDevicesAllocationPolicy: invalid allocation policy: "
         "spread (expected distributed or packed)"},
        {"duplicate-key.yaml", "4:3: flags.migStrategy: duplicate key (first at line 3, column 3)"},
        {"bad-yaml-flow.yaml",
         "4:1: YAML syntax error: did not find expected ',' or ']' (while parsing a "
         "flow sequence at line 3, column 16)"},
        {"bad-yaml-indent.yaml",
         "4:19: YAML syntax error: mapping values are not allowed in this context"},
        {"tab-indent.yaml",
         "3:1: YAML syntax error: found character that cannot start any token (while "
         "scanning for the next token at line 3, column 1)"},
        {"list-for-map.yaml", "3:3: flags: must be a mapping, got a list"},
        {"map-for-list.yaml", "5:7: sharing.timeSlicing.resources: must be a list, got a mapping"},
        {"scalar-for-map.yaml", "2:8: flags: must be a mapping, got \"mixed\""},
        {"bad-bool.yaml", "3:20: flags.failOnInitError: must be true or false, got \"maybe\""},
        {"quoted-bool.yaml",
         "3:20: flags.failOnInitError: must be true or false, got the quoted string "
         "\"true\""},
        {"unknown-version.yaml", "1:10: version: unsupported version \"v2\" (supported: v1)"},
        {"empty-resources.yaml", "4:16: sharing.timeSlicing.resources: must have at least 1 entry"},
        {"resources-missing.yaml", "4:5: sharing.timeSlicing: missing required key \"resources\""},
        {"devices-word.yaml",
         "7:18: sharing.timeSlicing.resources[0].devices: must be \"all\", a positive "
         "count or a list of devices, got \"some\""},
        {"devices-bad-uuid.yaml",
         "7:19: sharing.timeSlicing.resources[0].devices[0]: unsupported device "
         "\"GPU-1234\" (expected a GPU index, a MIG index \"<gpu>:<mig>\", a GPU UUID or a "
         "MIG UUID)"},
        {"bad-resource-name.yaml",
         "5:15: sharing.timeSlicing.resources[0].name: resource name \"nvidia.com/gpu "
         "shared\" is invalid: the name \"gpu shared\" must consist of letters, digits, "
         "'-', '_' or '.', and start and end with a letter or digit"},
        {"duplicate-resource.yaml",
         "7:15: sharing.timeSlicing.resources[1].name: nvidia.com/gpu is already shared "
         "by resources[0]; with devices \"all\" a resource can be shared once"},
        {"two-documents.yaml", "4:1: only one YAML document is allowed"},
        {"imex-channel.yaml",
         "3:15: imex.channelIDs: invalid IMEX channel IDs: channelIDs must be [] or "
         "[0]; found [1]"},
        {"relative-root.yaml",
         "3:21: flags.nvidiaDriverRoot: must be an absolute path, got \"run/nvidia\""},
        {"alias.yaml", "2:8: imex: YAML anchors and aliases are not supported"},
        {"tag.yaml", "3:16: flags.migStrategy: YAML tags are not supported (\"!!str\")"},
        {"invalid-utf8.yaml", " YAML error at byte 35: invalid trailing UTF-8 octet"},
        /* null stays an error where NVIDIA refuses it too (no resources) */
        {"null-time-slicing.yaml", "3:15: sharing.timeSlicing: must be a mapping, got null"},
        /* a quoted empty string is a value, not null */
        {"quoted-null.yaml",
         "3:16: flags.migStrategy: invalid MIG strategy:  (expected none, single or mixed)"},
};

#define N_BAD (sizeof(bad_cases) / sizeof(bad_cases[0]))

static void test_bad_corpus(void **state)
{
        (void)state;
        size_t failures = 0;
        for (size_t i = 0; i < N_BAD; i++) {
                char path[512], want[1024];
                snprintf(path, sizeof(path), DIR_BAD "%s", bad_cases[i].file);
                snprintf(want, sizeof(want), "%s:%s", path, bad_cases[i].msg);
                struct kdev_nvidia_config cfg;
                struct kdev_err e;
                int rc = load(path, &cfg, &e);
                kdev_nvidia_config_clear(&cfg);
                if (rc >= 0) {
                        fprintf(stderr, "%s: accepted\n", bad_cases[i].file);
                        failures++;
                } else if (strcmp(e.msg, want) != 0) {
                        fprintf(stderr, "%s:\n  got  %s\n  want %s\n", bad_cases[i].file, e.msg,
                                want);
                        failures++;
                }
        }
        assert_int_equal(failures, 0);
}

/* NVIDIA's MPS examples: the MPS root comes by flag (NVIDIA's chart), so the
 * file alone gives NVIDIA's message; with --mps-root the section is MPS with
 * failRequestsGreaterThanOne not given (true for MPS, v0.20). */
static void test_mps(void **state)
{
        (void)state;
        static const char *const files[] = {"mps.yaml", "mps-rename-by-default.yaml"};
        for (size_t i = 0; i < 2; i++) {
                char path[512];
                snprintf(path, sizeof(path), DIR_GOOD "%s", files[i]);
                struct kdev_nvidia_config cfg;
                struct kdev_err e;
                assert_int_equal(load(path, &cfg, &e), -EINVAL);
                assert_string_equal(e.msg, "using MPS requires --mps-root to be specified");
                kdev_nvidia_config_clear(&cfg);
                assert_int_equal(kdev_nvidia_config_init(&cfg, &e), 0);
                assert_int_equal(parse_file(&cfg, path, NULL, &e), 0);
                assert_int_equal(kdev_nvidia_config_apply_flag(&cfg, "mps-root", "/run/nvidia/mps", &e),
                                 0);
                assert_int_equal(kdev_nvidia_config_finish(&cfg, true, &e), 0);
                assert_int_equal(kdev_nvidia_sharing_strategy(&cfg), KDEV_NVIDIA_SHARING_MPS);
                assert_ptr_equal(kdev_nvidia_replicated_section(&cfg), &cfg.mps);
                assert_int_equal(cfg.mps.fail_requests_greater_than_one, -1);
                assert_true(kdev_nvidia_replicated_fail_gt1(&cfg, &cfg.mps));
                assert_int_equal(cfg.mps.rename_by_default, i == 1);
                assert_int_equal(cfg.mps.n_resources, 1);
                assert_string_equal(cfg.mps.resources[0].name, "nvidia.com/gpu");
                assert_int_equal(cfg.mps.resources[0].replicas, 10);
                assert_string_equal(cfg.mps_root, "/run/nvidia/mps");
                kdev_nvidia_config_clear(&cfg);
        }
}

/* The directories hold exactly the files the tests name. */
static void test_corpus_complete(void **state)
{
        (void)state;
        static const char *const good[] = {
                "time-slicing.yaml",       "time-slicing-rename-by-default.yaml",
                "time-slicing-rename.yaml", "mig-mixed-time-slicing.yaml",
                "mig-mixed.yaml",          "full-flags.yaml",
                "null-flags.yaml",         "null-nested.yaml",
                "empty.yaml",              "comment-only.yaml",
                "mps.yaml",                "mps-rename-by-default.yaml",
        };
        const char *dirs[] = {DIR_GOOD, DIR_BAD};
        for (size_t d = 0; d < 2; d++) {
                DIR *dir = opendir(dirs[d]);
                assert_non_null(dir);
                struct dirent *de;
                size_t n = 0;
                while ((de = readdir(dir))) {
                        if (de->d_name[0] == '.')
                                continue;
                        bool known = false;
                        for (size_t i = 0; d == 0 && i < sizeof(good) / sizeof(good[0]); i++)
                                known = known || strcmp(good[i], de->d_name) == 0;
                        for (size_t i = 0; d == 1 && i < N_BAD; i++)
                                known = known || strcmp(bad_cases[i].file, de->d_name) == 0;
                        if (!known)
                                fail_msg("%s%s is not in the test's tables", dirs[d], de->d_name);
                        n++;
                }
                closedir(dir);
                assert_int_equal(n, d == 0 ? sizeof(good) / sizeof(good[0]) : N_BAD);
        }
}

int main(void)
{
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_time_slicing),
                cmocka_unit_test(test_time_slicing_rename_by_default),
                cmocka_unit_test(test_time_slicing_rename),
                cmocka_unit_test(test_mig_mixed_time_slicing),
                cmocka_unit_test(test_mig_mixed),
                cmocka_unit_test(test_full_flags),
                cmocka_unit_test(test_null_values),
                cmocka_unit_test(test_empty_files_are_defaults),
                cmocka_unit_test(test_mps),
                cmocka_unit_test(test_bad_corpus),
                cmocka_unit_test(test_corpus_complete),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
