/* Generic backend config loader: valid files and every kind of error, with
 * exact messages. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/stat.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "generic/generic.h"

#define HEAD "version: v1\ngeneric:\n  devices:\n"

static void test_parse_valid(void **state)
{
        (void)state;
        const char *text = HEAD
                "    - name: example.com/fuse\n"
                "      groups:\n"
                "        - paths:\n"
                "            - path: /dev/fuse\n"
                "          count: 4\n"
                "    - name: example.com/tty\n"
                "      groups:\n"
                "        - paths:\n"
                "            - path: /dev/ttyS*\n"
                "              mountPath: /dev/serial/\n"
                "              permissions: mwr\n"
                "              limit: 3\n"
                "            - path: /dev/null\n"
                "              permissions: \"r\"\n"
                "        - count: 2\n"
                "          paths: [{path: /dev/zero}]\n";
        struct kdev_generic_config *cfg = NULL;
        struct kdev_err e;
        kdev_err_clear(&e);
        int rc = kdev_generic_config_parse("demo.yaml", text, strlen(text), &cfg, &e);
        if (rc != 0)
                fail_msg("%s", e.msg);
        assert_string_equal(cfg->source, "demo.yaml");
        assert_int_equal(cfg->n_resources, 2);
        const struct kdev_generic_resource *r = &cfg->resources[0];
        assert_string_equal(r->name, "example.com/fuse");
        assert_int_equal(r->line, 4);
        assert_int_equal(r->column, 7);
        assert_int_equal(r->n_groups, 1);
        assert_int_equal(r->groups[0].count, 4);
        assert_int_equal(r->groups[0].n_paths, 1);
        assert_string_equal(r->groups[0].paths[0].path, "/dev/fuse");
        assert_null(r->groups[0].paths[0].mount_path);
        assert_string_equal(r->groups[0].paths[0].permissions, "rw");
        assert_int_equal(r->groups[0].paths[0].limit, 1);
        assert_int_equal(r->groups[0].paths[0].line, 7);
        assert_int_equal(r->groups[0].paths[0].column, 21);

        r = &cfg->resources[1];
        assert_string_equal(r->name, "example.com/tty");
        assert_int_equal(r->n_groups, 2);
        assert_int_equal(r->groups[0].count, 1);
        assert_int_equal(r->groups[0].n_paths, 2);
        assert_string_equal(r->groups[0].paths[0].path, "/dev/ttyS*");
        assert_string_equal(r->groups[0].paths[0].mount_path, "/dev/serial/");
        assert_string_equal(r->groups[0].paths[0].permissions, "rwm");
        assert_int_equal(r->groups[0].paths[0].limit, 3);
        assert_string_equal(r->groups[0].paths[1].permissions, "r");
        assert_int_equal(r->groups[1].count, 2);
        assert_string_equal(r->groups[1].paths[0].path, "/dev/zero");
        kdev_generic_config_free(cfg);
        kdev_generic_config_free(NULL);
}

static void test_parse_minimal(void **state)
{
        (void)state;
        struct kdev_generic_config *cfg = NULL;
        /* version is optional (v1 when absent), as in NVIDIA's config files */
        const char *texts[] = {"version: v1\n", "version: v1\ngeneric:\n  devices: []\n",
                               "generic:\n  devices: []\n"};
        for (size_t i = 0; i < 3; i++) {
                assert_int_equal(kdev_generic_config_parse("m.yaml", texts[i], strlen(texts[i]),
                                                           &cfg, NULL),
                                 0);
                assert_int_equal(cfg->n_resources, 0);
                /* the live inventory's defaults */
                assert_int_equal(cfg->rescan_interval, 10);
                assert_int_equal(cfg->grace_period, 300);
                kdev_generic_config_free(cfg);
        }
}

/* generic.rescanInterval and generic.gracePeriod (src/generic/live.c). */
static void test_parse_live_settings(void **state)
{
        (void)state;
        const char *text = "version: v1\ngeneric:\n  rescanInterval: 1\n  gracePeriod: 0\n"
                           "  devices: []\n";
        struct kdev_generic_config *cfg = NULL;
        assert_int_equal(kdev_generic_config_parse("m.yaml", text, strlen(text), &cfg, NULL), 0);
        assert_int_equal(cfg->rescan_interval, 1);
        assert_int_equal(cfg->grace_period, 0);
        kdev_generic_config_free(cfg);
        text = "generic:\n  rescanInterval: 3600\n  gracePeriod: 86400\n  devices: []\n";
        assert_int_equal(kdev_generic_config_parse("m.yaml", text, strlen(text), &cfg, NULL), 0);
        assert_int_equal(cfg->rescan_interval, 3600);
        assert_int_equal(cfg->grace_period, 86400);
        kdev_generic_config_free(cfg);
}

struct bad {
        const char *text;
        const char *msg;
};

/* One resource, one group, one path: lines 4..8; count value at 8:18. */
#define ONE(path_extra, group_extra)                                                               \
        HEAD "    - name: example.com/fuse\n"                                                      \
             "      groups:\n"                                                                     \
             "        - paths:\n"                                                                  \
             "            - path: /dev/fuse\n" path_extra group_extra

static const struct bad bad_cases[] = {
        {ONE("", "          count: 0\n"),
         "demo.yaml:8:18: generic.devices[0].groups[0].count: must be an integer between 1 and "
         "1000, got \"0\""},
        {ONE("", "          count: abc\n"),
         "demo.yaml:8:18: generic.devices[0].groups[0].count: must be an integer between 1 and "
         "1000, got \"abc\""},
        {ONE("", "          count: 1001\n"),
         "demo.yaml:8:18: generic.devices[0].groups[0].count: must be an integer between 1 and "
         "1000, got \"1001\""},
        {ONE("", "          count: -1\n"),
         "demo.yaml:8:18: generic.devices[0].groups[0].count: must be an integer between 1 and "
         "1000, got \"-1\""},
        {ONE("", "          count: 99999999999999999999\n"),
         "demo.yaml:8:18: generic.devices[0].groups[0].count: must be an integer between 1 and "
         "1000, got \"99999999999999999999\""},
        {ONE("", "          count: \"4\"\n"),
         "demo.yaml:8:18: generic.devices[0].groups[0].count: must be an integer between 1 and "
         "1000, got the quoted string \"4\""},
        {ONE("", "          count: [1]\n"),
         "demo.yaml:8:18: generic.devices[0].groups[0].count: must be an integer between 1 and "
         "1000, got a list"},
        {ONE("", "          count:\n"),
         "demo.yaml:8:17: generic.devices[0].groups[0].count: must be an integer between 1 and "
         "1000, got null"},
        {ONE("              permissions: x\n", ""),
         "demo.yaml:8:28: generic.devices[0].groups[0].paths[0].permissions: must be a "
         "combination of \"r\", \"w\" and \"m\", each at most once, got \"x\""},
        {ONE("              permissions: rr\n", ""),
         "demo.yaml:8:28: generic.devices[0].groups[0].paths[0].permissions: must be a "
         "combination of \"r\", \"w\" and \"m\", each at most once, got \"rr\""},
        {ONE("              permissions: \"\"\n", ""),
         "demo.yaml:8:28: generic.devices[0].groups[0].paths[0].permissions: must be a "
         "combination of \"r\", \"w\" and \"m\", each at most once, got \"\""},
        {ONE("              limit: 0\n", ""),
         "demo.yaml:8:22: generic.devices[0].groups[0].paths[0].limit: must be an integer "
         "between 1 and 1000, got \"0\""},
        {ONE("              mountPath: dev/fuse\n", ""),
         "demo.yaml:8:26: generic.devices[0].groups[0].paths[0].mountPath: must be an absolute "
         "path, got \"dev/fuse\""},
        {ONE("              mountPath: /dev/../etc\n", ""),
         "demo.yaml:8:26: generic.devices[0].groups[0].paths[0].mountPath: must not contain "
         "\".\" or \"..\" components, got \"/dev/../etc\""},
        {ONE("              pth: /x\n", ""),
         "demo.yaml:8:15: generic.devices[0].groups[0].paths[0].pth: unknown key (expected one "
         "of: path, mountPath, permissions, limit)"},
        {ONE("              path: /x\n", ""),
         "demo.yaml:8:15: generic.devices[0].groups[0].paths[0].path: duplicate key (first at "
         "line 7, column 15)"},
        {ONE("", "          cnt: 2\n"),
         "demo.yaml:8:11: generic.devices[0].groups[0].cnt: unknown key (expected one of: paths, "
         "count)"},
        {HEAD "    - name: example.com/fuse\n"
              "      groups:\n"
              "        - paths:\n"
              "            - path: dev/fuse\n",
         "demo.yaml:7:21: generic.devices[0].groups[0].paths[0].path: must be an absolute path, "
         "got \"dev/fuse\""},
        {HEAD "    - name: example.com/fuse\n"
              "      groups:\n"
              "        - paths:\n"
              "            - path: /dev/\n",
         "demo.yaml:7:21: generic.devices[0].groups[0].paths[0].path: must not end with '/', "
         "got \"/dev/\""},
        {HEAD "    - name: example.com/fuse\n"
              "      groups:\n"
              "        - paths:\n"
              "            - path: /dev/./fuse\n",
         "demo.yaml:7:21: generic.devices[0].groups[0].paths[0].path: must not contain \".\" or "
         "\"..\" components, got \"/dev/./fuse\""},
        {HEAD "    - name: example.com/fuse\n"
              "      groups:\n"
              "        - paths:\n"
              "            - mountPath: /dev/fuse\n",
         "demo.yaml:7:15: generic.devices[0].groups[0].paths[0]: missing required key \"path\""},
        {HEAD "    - name: example.com/fuse\n"
              "      groups:\n"
              "        - count: 2\n",
         "demo.yaml:6:11: generic.devices[0].groups[0]: missing required key \"paths\""},
        {HEAD "    - name: example.com/fuse\n"
              "      groups:\n"
              "        - paths: []\n",
         "demo.yaml:6:18: generic.devices[0].groups[0].paths: must have at least 1 entry"},
        {HEAD "    - name: example.com/fuse\n"
              "      groups:\n"
              "        paths:\n"
              "          - path: /dev/fuse\n",
         "demo.yaml:6:9: generic.devices[0].groups: must be a list, got a mapping"},
        {HEAD "    - name: example.com/fuse\n"
              "      groups: []\n",
         "demo.yaml:5:15: generic.devices[0].groups: must have at least 1 entry"},
        {HEAD "    - name: example.com/fuse\n",
         "demo.yaml:4:7: generic.devices[0]: missing required key \"groups\""},
        {HEAD "    - name:\n"
              "      groups: []\n",
         "demo.yaml:4:12: generic.devices[0].name: must be a string, got null"},
        {HEAD "    - name: gpu\n"
              "      groups: []\n",
         "demo.yaml:4:13: generic.devices[0].name: resource name \"gpu\" is invalid: it must have "
         "the form <domain>/<name>"},
        {HEAD "    - name: kubernetes.io/gpu\n"
              "      groups: []\n",
         "demo.yaml:4:13: generic.devices[0].name: resource name \"kubernetes.io/gpu\" is "
         "invalid: the \"kubernetes.io\" domain is reserved for native resources"},
        {HEAD "    - name: example.com/a\n"
              "      groups: [{paths: [{path: /dev/a}]}]\n"
              "    - groups: [{paths: [{path: /dev/a}]}]\n"
              "      name: example.com/a\n",
         "demo.yaml:7:13: generic.devices[1].name: duplicate resource name \"example.com/a\" "
         "(first at line 4, column 13)"},
        {HEAD "    - name: example.com/a\n"
              "      gropus: []\n",
         "demo.yaml:5:7: generic.devices[0].gropus: unknown key (expected one of: name, groups)"},
        {HEAD "    name: example.com/a\n",
         "demo.yaml:4:5: generic.devices: must be a list, got a mapping"},
        {"version: v1\ngeneric: devices\n",
         "demo.yaml:2:10: generic: must be a mapping, got \"devices\""},
        {"version: v1\ngeneric:\n",
         "demo.yaml:2:9: generic: must be a mapping, got null"},
        {"version: v1\ngeneric:\n  rescanInterval: 0\n  devices: []\n",
         "demo.yaml:3:19: generic.rescanInterval: must be an integer between 1 and 3600, got "
         "\"0\""},
        {"version: v1\ngeneric:\n  rescanInterval: 3601\n  devices: []\n",
         "demo.yaml:3:19: generic.rescanInterval: must be an integer between 1 and 3600, got "
         "\"3601\""},
        {"version: v1\ngeneric:\n  gracePeriod: 86401\n  devices: []\n",
         "demo.yaml:3:16: generic.gracePeriod: must be an integer between 0 and 86400, got "
         "\"86401\""},
        {"version: v1\ngeneric:\n  gracePeriod: 5s\n  devices: []\n",
         "demo.yaml:3:16: generic.gracePeriod: must be an integer between 0 and 86400, got "
         "\"5s\""},
        {"version: v1\ngeneric:\n  devicez: []\n",
         "demo.yaml:3:3: generic.devicez: unknown key (expected one of: devices, rescanInterval, "
         "gracePeriod)"},
        {"version: v1\ngeneric: {}\n",
         "demo.yaml:2:10: generic: missing required key \"devices\""},
        {"version: v1\ngeneric:\n  devices: []\nflags: {}\n",
         "demo.yaml:4:1: flags: unknown key (expected one of: version, generic)"},
        {"version: v2\n", "demo.yaml:1:10: version: unsupported version \"v2\" (supported: v1)"},
        {"version: 1\n", "demo.yaml:1:10: version: unsupported version \"1\" (supported: v1)"},
        {"version: [v1]\n", "demo.yaml:1:10: version: must be a string, got a list"},
        {"version: v1\nversion: v1\n",
         "demo.yaml:2:1: version: duplicate key (first at line 1, column 1)"},
        {"- version: v1\n", "demo.yaml:1:1: must be a mapping, got a list"},
        {"v1\n", "demo.yaml:1:1: must be a mapping, got \"v1\""},
        {"[v1]: x\n", "demo.yaml:1:1: keys must be strings, got a list"},
        {"version: v1\n---\nversion: v1\n", "demo.yaml:2:1: only one YAML document is allowed"},
        {"version: v1\ngeneric: [\n",
         "demo.yaml:3:1: YAML syntax error: did not find expected node content (while parsing "
         "a flow node at line 3, column 1)"},
        {"version: v1\n  bad: x\n",
         "demo.yaml:2:6: YAML syntax error: mapping values are not allowed in this context"},
        {"version: \"v1\n",
         "demo.yaml:2:1: YAML syntax error: found unexpected end of stream (while scanning a "
         "quoted scalar at line 1, column 10)"},
        {"version: *x\n",
         "demo.yaml:1:10: YAML syntax error: found undefined alias"},
        {"version: v1\n\xff\xfe: x\n",
         "demo.yaml: YAML error at byte 12: invalid leading UTF-8 octet"},
        {HEAD "    - name: example.com/a\n"
              "      groups:\n"
              "        - &g\n"
              "          paths: [{path: /dev/a}]\n"
              "        - *g\n",
         "demo.yaml:6:11: generic.devices[0].groups[1]: YAML anchors and aliases are not "
         "supported"},
        {HEAD "    - name: &n example.com/a\n"
              "      groups: [{paths: [{path: *n}]}]\n",
         "demo.yaml:4:13: generic.devices[0].groups[0].paths[0].path: YAML anchors and aliases "
         "are not supported"},
        /* explicit tags, on every kind of node, even where the value would be accepted */
        {HEAD "    - name: example.com/fuse\n"
              "      groups:\n"
              "        - paths:\n"
              "            - path: !!int /dev/null\n",
         "demo.yaml:7:21: generic.devices[0].groups[0].paths[0].path: YAML tags are not "
         "supported (\"!!int\")"},
        {ONE("", "          count: !!str 4\n"),
         "demo.yaml:8:18: generic.devices[0].groups[0].count: YAML tags are not supported "
         "(\"!!str\")"},
        {ONE("", "          count: !!int 4\n"),
         "demo.yaml:8:18: generic.devices[0].groups[0].count: YAML tags are not supported "
         "(\"!!int\")"},
        {"version: !foo v1\n", "demo.yaml:1:10: version: YAML tags are not supported (\"!foo\")"},
        {"version: ! v1\n", "demo.yaml:1:10: version: YAML tags are not supported (\"!\")"},
        {"version: !<tag:yaml.org,2002:str> v1\n",
         "demo.yaml:1:10: version: YAML tags are not supported (\"!!str\")"},
        {"%TAG !e! tag:example.com,2000:\n---\nversion: !e!v v1\n",
         "demo.yaml:3:10: version: YAML tags are not supported (\"tag:example.com,2000:v\")"},
        {"version: &a !!str v1\n",
         "demo.yaml:1:10: version: YAML tags are not supported (\"!!str\")"},
        {"!!str version: v1\n", "demo.yaml:1:1: version: YAML tags are not supported (\"!!str\")"},
        {"--- !!map\nversion: v1\n", "demo.yaml:1:5: YAML tags are not supported (\"!!map\")"},
        {"version: v1\ngeneric: !!map {devices: []}\n",
         "demo.yaml:2:10: generic: YAML tags are not supported (\"!!map\")"},
        {"version: v1\ngeneric:\n  devices: !!seq []\n",
         "demo.yaml:3:12: generic.devices: YAML tags are not supported (\"!!seq\")"},
        {"version: v1\ngeneric:\n  !!str devices: []\n",
         "demo.yaml:3:3: generic.devices: YAML tags are not supported (\"!!str\")"},
};

static void test_parse_errors(void **state)
{
        (void)state;
        for (size_t i = 0; i < sizeof(bad_cases) / sizeof(bad_cases[0]); i++) {
                struct kdev_generic_config *cfg = (struct kdev_generic_config *)1;
                struct kdev_err e;
                kdev_err_clear(&e);
                int rc = kdev_generic_config_parse("demo.yaml", bad_cases[i].text,
                                                   strlen(bad_cases[i].text), &cfg, &e);
                if (rc != -EINVAL || strcmp(e.msg, bad_cases[i].msg) != 0)
                        fail_msg("case %zu: rc %d\n got: %s\nwant: %s", i, rc, e.msg,
                                 bad_cases[i].msg);
                assert_null(cfg);
        }
}

static void test_list_limits(void **state)
{
        (void)state;
        /* 65 paths in one group: over the limit of 64 */
        char *text = malloc(65536);
        size_t n = (size_t)sprintf(text, HEAD "    - name: example.com/a\n      groups:\n"
                                              "        - paths:\n");
        for (int i = 0; i < 65; i++)
                n += (size_t)sprintf(text + n, "            - path: /dev/x%d\n", i);
        struct kdev_generic_config *cfg;
        struct kdev_err e;
        assert_int_equal(kdev_generic_config_parse("demo.yaml", text, n, &cfg, &e), -EINVAL);
        assert_string_equal(e.msg, "demo.yaml:7:13: generic.devices[0].groups[0].paths: must "
                                   "have at most 64 entries, got 65");
        free(text);
}

/* Parses |text| (NUL-free) and expects -EINVAL with message |want|. */
static void expect_error(const char *text, size_t len, const char *want)
{
        struct kdev_generic_config *cfg = (struct kdev_generic_config *)1;
        struct kdev_err e;
        kdev_err_clear(&e);
        int rc = kdev_generic_config_parse("demo.yaml", text, len, &cfg, &e);
        if (rc != -EINVAL || strcmp(e.msg, want) != 0)
                fail_msg("rc %d\n got: %s\nwant: %s", rc, e.msg, want);
        assert_null(cfg);
}

/* |prefix| + |n| x |open| + |mid| + |n| x |close| + |suffix| in a new buffer. */
static char *nest(const char *prefix, const char *open, size_t n, const char *mid,
                  const char *close, const char *suffix, size_t *len)
{
        size_t cap = strlen(prefix) + n * (strlen(open) + strlen(close)) + strlen(mid) +
                     strlen(suffix) + 1;
        char *t = malloc(cap);
        assert_non_null(t);
        size_t o = 0;
        o += (size_t)sprintf(t + o, "%s", prefix);
        for (size_t i = 0; i < n; i++)
                o += (size_t)sprintf(t + o, "%s", open);
        o += (size_t)sprintf(t + o, "%s", mid);
        for (size_t i = 0; i < n; i++)
                o += (size_t)sprintf(t + o, "%s", close);
        o += (size_t)sprintf(t + o, "%s", suffix);
        *len = o;
        return t;
}

static void test_nesting_limit(void **state)
{
        (void)state;
        size_t len;
        char *t;

        /* 100000 levels followed by a byte that is not UTF-8: the parser stops at the 33rd
         * bracket and never reads that far (a full parse reports the byte, after ~30 s) */
        t = nest("", "[", 100000, "\xff", "", "", &len);
        expect_error(t, len, "demo.yaml:1:33: nesting deeper than 32 levels");
        free(t);

        /* the tester's file: the root mapping is level 1, the 32nd bracket level 33 */
        t = nest("version: v1\ngeneric: ", "[", 100000, "", "]", "\n", &len);
        expect_error(t, len, "demo.yaml:2:41: nesting deeper than 32 levels");
        free(t);
        t = nest("version: v1\ngeneric: ", "{a: ", 50000, "x", "}", "\n", &len);
        expect_error(t, len, "demo.yaml:2:134: nesting deeper than 32 levels");
        free(t);

        /* 32 levels are read (and then refused by the schema) */
        t = nest("version: v1\ngeneric: ", "[", 31, "", "]", "\n", &len);
        expect_error(t, len, "demo.yaml:2:10: generic: must be a mapping, got a list");
        free(t);
        t = nest("version: v1\ngeneric: ", "[", 32, "", "]", "\n", &len);
        expect_error(t, len, "demo.yaml:2:41: nesting deeper than 32 levels");
        free(t);

        /* block mappings: level k starts on line k at column 2k-1 */
        char *b = malloc(64 * 80);
        assert_non_null(b);
        size_t o = 0;
        for (int i = 0; i < 40; i++)
                o += (size_t)sprintf(b + o, "%*sa:\n", 2 * i, "");
        expect_error(b, o, "demo.yaml:33:65: nesting deeper than 32 levels");
        o = 0;
        for (int i = 0; i < 32; i++)
                o += (size_t)sprintf(b + o, "%*sa:\n", 2 * i, "");
        expect_error(b, o, "demo.yaml:1:1: a: unknown key (expected one of: version, generic)");
        free(b);

        /* block sequences on one line */
        t = nest("", "- ", 40, "x", "", "\n", &len);
        expect_error(t, len, "demo.yaml:1:65: nesting deeper than 32 levels");
        free(t);

        /* a later document is checked too, before the one-document rule */
        t = nest("version: v1\n---\n", "[", 40, "", "]", "\n", &len);
        expect_error(t, len, "demo.yaml:3:33: nesting deeper than 32 levels");
        free(t);
}

static void test_load_files(void **state)
{
        (void)state;
        char dir[] = "/tmp/kdev-gcfg-XXXXXX";
        assert_non_null(mkdtemp(dir));
        char path[256];
        struct kdev_generic_config *cfg = (struct kdev_generic_config *)1;
        struct kdev_err e;

        /* missing file */
        snprintf(path, sizeof(path), "%s/missing.yaml", dir);
        assert_int_equal(kdev_generic_config_load(path, &cfg, &e), -ENOENT);
        assert_null(cfg);
        char want[512];
        snprintf(want, sizeof(want), "%s: cannot read: No such file or directory", path);
        assert_string_equal(e.msg, want);

        /* a directory */
        assert_int_equal(kdev_generic_config_load(dir, &cfg, &e), -EISDIR);
        snprintf(want, sizeof(want), "%s: is not a regular file (a directory)", dir);
        assert_string_equal(e.msg, want);

        /* a FIFO (kdev-plugin --check-config FIFO must not block), a link to
         * /dev/zero (must not read forever), a NUL byte */
        snprintf(path, sizeof(path), "%s/fifo.yaml", dir);
        assert_int_equal(mkfifo(path, 0600), 0);
        assert_int_equal(kdev_generic_config_load(path, &cfg, &e), -EINVAL);
        assert_null(cfg);
        snprintf(want, sizeof(want), "%s: is not a regular file (a FIFO)", path);
        assert_string_equal(e.msg, want);
        unlink(path);
        snprintf(path, sizeof(path), "%s/zero.yaml", dir);
        assert_int_equal(symlink("/dev/zero", path), 0);
        assert_int_equal(kdev_generic_config_load(path, &cfg, &e), -EINVAL);
        snprintf(want, sizeof(want), "%s: is not a regular file (a character device)", path);
        assert_string_equal(e.msg, want);
        unlink(path);
        snprintf(path, sizeof(path), "%s/nul.yaml", dir);
        FILE *nf = fopen(path, "w");
        assert_non_null(nf);
        fwrite("version: v1\n\0", 1, 13, nf);
        fclose(nf);
        assert_int_equal(kdev_generic_config_load(path, &cfg, &e), -EILSEQ);
        snprintf(want, sizeof(want), "%s: contains a NUL byte at offset 12", path);
        assert_string_equal(e.msg, want);
        unlink(path);

        /* empty file */
        snprintf(path, sizeof(path), "%s/empty.yaml", dir);
        FILE *f = fopen(path, "w");
        assert_non_null(f);
        fclose(f);
        /* no YAML document: no generic section, so no generic resources
         * (kdev-plugin then serves NVIDIA's defaults) */
        assert_int_equal(kdev_generic_config_load(path, &cfg, &e), 0);
        assert_non_null(cfg);
        assert_int_equal(cfg->n_resources, 0);
        kdev_generic_config_free(cfg);
        cfg = NULL;
        unlink(path);

        /* error messages name the file as given */
        snprintf(path, sizeof(path), "%s/bad.yaml", dir);
        f = fopen(path, "w");
        fputs("version: v1\ngeneric:\n  devices:\n    - name: x\n", f);
        fclose(f);
        assert_int_equal(kdev_generic_config_load(path, &cfg, &e), -EINVAL);
        snprintf(want, sizeof(want),
                 "%s:4:13: generic.devices[0].name: resource name \"x\" is invalid: it must have "
                 "the form <domain>/<name>",
                 path);
        assert_string_equal(e.msg, want);
        unlink(path);

        /* too large */
        snprintf(path, sizeof(path), "%s/big.yaml", dir);
        f = fopen(path, "w");
        for (int i = 0; i < 1024 * 1024 / 16 + 1; i++)
                fputs("# padding line\n\n", f);
        fclose(f);
        assert_int_equal(kdev_generic_config_load(path, &cfg, &e), -EFBIG);
        snprintf(want, sizeof(want), "%s: the config file is larger than 1048576 bytes", path);
        assert_string_equal(e.msg, want);
        unlink(path);

        /* the shipped example loads */
        assert_int_equal(kdev_generic_config_load(KDEV_SOURCE_DIR "/examples/generic-demo.yaml",
                                                  &cfg, &e),
                         0);
        assert_int_equal(cfg->n_resources, 4);
        assert_string_equal(cfg->resources[0].name, "example.com/null");
        assert_string_equal(cfg->resources[1].name, "example.com/zero");
        assert_string_equal(cfg->resources[2].name, "example.com/fuse");
        assert_string_equal(cfg->resources[3].name, "example.com/tty");
        kdev_generic_config_free(cfg);

        assert_int_equal(rmdir(dir), 0);
}

int main(void)
{
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_parse_valid),
                cmocka_unit_test(test_parse_minimal),
                cmocka_unit_test(test_parse_live_settings),
                cmocka_unit_test(test_parse_errors),
                cmocka_unit_test(test_list_limits),
                cmocka_unit_test(test_nesting_limit),
                cmocka_unit_test(test_load_files),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
