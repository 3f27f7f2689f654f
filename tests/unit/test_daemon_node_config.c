/* Per-node config selection (src/daemon/node_config_internal.h): the rules
 * of NVIDIA's config-manager (k8s-device-plugin cmd/config-manager/main.go
 * updateConfigName) with kdev's fallback to the default when the label
 * names no config, each with its exact name, path and message. */
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

#include "daemon/node_config_internal.h"

static char dir[256];
static char warned[2048];

static void put(const char *name)
{
        char p[512];
        snprintf(p, sizeof(p), "%s/%s", dir, name);
        FILE *f = fopen(p, "w");
        assert_non_null(f);
        fputs("version: v1\n", f);
        fclose(f);
}

static void rm(const char *name)
{
        char p[512];
        snprintf(p, sizeof(p), "%s/%s", dir, name);
        unlink(p);
}

static void on_warn(void *arg, const char *msg)
{
        (void)arg;
        snprintf(warned, sizeof(warned), "%s", msg);
}

/* Selects for |value|; returns the result, the name and path as given back. */
static int sel(const struct kdev_node_config_options *o, const char *value, char **name,
               char **path, struct kdev_err *e)
{
        warned[0] = '\0';
        kdev_err_clear(e);
        return kdev_node_config_select(o, value, on_warn, NULL, name, path, e);
}

static int setup(void **state)
{
        (void)state;
        snprintf(dir, sizeof(dir), "/tmp/kdev-nodecfg-XXXXXX");
        assert_non_null(mkdtemp(dir));
        char p[512];
        snprintf(p, sizeof(p), "%s/..data", dir); /* a ConfigMap's own entry */
        assert_int_equal(mkdir(p, 0700), 0);
        snprintf(p, sizeof(p), "%s/sub", dir); /* directories are not configs */
        assert_int_equal(mkdir(p, 0700), 0);
        return 0;
}

static int teardown(void **state)
{
        (void)state;
        char cmd[600];
        snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
        assert_int_equal(system(cmd), 0);
        return 0;
}

static void test_selection_rules(void **state)
{
        (void)state;
        struct kdev_node_config_options o = {.dir = dir, .node_name = "n1"};
        struct kdev_err e;
        char *name, *path, want[1024];

        /* no configs at all */
        assert_int_equal(sel(&o, "a", &name, &path, &e), -ENOENT);
        snprintf(want, sizeof(want), "no config files in %s", dir);
        assert_string_equal(e.msg, want);
        assert_null(name);
        assert_null(path);

        put("a");
        put("b");
        /* the label names a config */
        assert_int_equal(sel(&o, "b", &name, &path, &e), 0);
        assert_string_equal(name, "b");
        snprintf(want, sizeof(want), "%s/b", dir);
        assert_string_equal(path, want);
        assert_string_equal(warned, "");
        free(name);
        free(path);

        /* no label, no default, two configs, none named "default": the
         * fallbacks (named, single) apply to none */
        assert_int_equal(sel(&o, NULL, &name, &path, &e), -ENOENT);
        snprintf(want, sizeof(want),
                 "no config selected: the node has no usable label "
                 "nvidia.com/device-plugin.config, no default config is set and the fallback "
                 "strategies (named,single) apply to none of the configs in %s (a, b)",
                 dir);
        assert_string_equal(e.msg, want);

        /* named: the config "default" */
        put("default");
        assert_int_equal(sel(&o, "", &name, &path, &e), 0);
        assert_string_equal(name, "default");
        free(name);
        free(path);

        /* a label that names no config: warned, then as without a label */
        assert_int_equal(sel(&o, "zz", &name, &path, &e), 0);
        assert_string_equal(name, "default");
        snprintf(want, sizeof(want),
                 "node label nvidia.com/device-plugin.config names config \"zz\", which is not "
                 "in %s (configs: a, b, default); using the default",
                 dir);
        assert_string_equal(warned, want);
        free(name);
        free(path);

        /* an explicit default wins over the fallbacks, and must exist */
        o.default_name = "a";
        assert_int_equal(sel(&o, NULL, &name, &path, &e), 0);
        assert_string_equal(name, "a");
        free(name);
        free(path);
        o.default_name = "missing";
        assert_int_equal(sel(&o, NULL, &name, &path, &e), -ENOENT);
        snprintf(want, sizeof(want),
                 "default config \"missing\" is not in %s (configs: a, b, default)", dir);
        assert_string_equal(e.msg, want);
        o.default_name = NULL;

        /* single: the only config */
        rm("b");
        rm("default");
        o.fallbacks = "single";
        assert_int_equal(sel(&o, NULL, &name, &path, &e), 0);
        assert_string_equal(name, "a");
        free(name);
        free(path);

        /* empty: NVIDIA's defaults, no file */
        put("b");
        o.fallbacks = "named, single ,empty";
        assert_int_equal(sel(&o, NULL, &name, &path, &e), 0);
        assert_string_equal(name, "");
        assert_null(path);
        free(name);
}

static void test_check(void **state)
{
        (void)state;
        struct kdev_node_config_options o = {.dir = dir};
        struct kdev_err e = {0};
        assert_int_equal(kdev_node_config_check(&o, &e), -EINVAL);
        assert_string_equal(e.msg, "--config-dir needs the node name (NODE_NAME or --node-name)");
        o.node_name = "n1";
        assert_int_equal(kdev_node_config_check(&o, &e), 0);
        o.fallbacks = "named,first";
        assert_int_equal(kdev_node_config_check(&o, &e), -EINVAL);
        assert_string_equal(e.msg,
                            "unknown fallback strategy \"first\" (expected named, single or empty)");
        o.fallbacks = "named,single,empty";
        assert_int_equal(kdev_node_config_check(&o, &e), 0);
}

int main(void)
{
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_selection_rules),
                cmocka_unit_test(test_check),
        };
        return cmocka_run_group_tests(tests, setup, teardown);
}
