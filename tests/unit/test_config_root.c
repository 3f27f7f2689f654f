/* The root of kdev's config file (config/config.h): `version`, registration
 * of sections, dispatch to each section's reader and object, with exact
 * messages. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "config/config.h"

/* A module's object: the string values of its sections. */
struct mod {
        char *a, *b;
        unsigned n;
};

static void mod_clear(struct mod *m)
{
        free(m->a);
        free(m->b);
        memset(m, 0, sizeof(*m));
}

static int read_a(struct kdev_ycfg *c, yaml_node_t *node, void *obj)
{
        return kdev_ycfg_string(c, node, &((struct mod *)obj)->a);
}

static int read_b(struct kdev_ycfg *c, yaml_node_t *node, void *obj)
{
        return kdev_ycfg_string(c, node, &((struct mod *)obj)->b);
}

static int read_n(struct kdev_ycfg *c, yaml_node_t *node, void *obj)
{
        return kdev_ycfg_uint(c, node, 1, 5, &((struct mod *)obj)->n);
}

static const struct kdev_ycfg_field n_fields[] = {{"n", true, read_n}};

static int read_nested(struct kdev_ycfg *c, yaml_node_t *node, void *obj)
{
        return kdev_ycfg_mapping(c, node, n_fields, 1, obj);
}

static const struct kdev_ycfg_field ab_fields[] = {{"alpha", false, read_a},
                                                   {"beta", false, read_b}};
static const struct kdev_ycfg_field g_fields[] = {{"gamma", false, read_a},
                                                  {"nested", false, read_nested}};

/* Root with version, alpha and beta (module |m1|), gamma and nested (|m2|). */
static void setup_root(struct kdev_config_root *root, struct mod *m1, struct mod *m2)
{
        struct kdev_err e;
        kdev_err_clear(&e);
        kdev_config_root_init(root);
        assert_int_equal(root->n_fields, 1);
        assert_string_equal(root->fields[0].key, "version");
        struct kdev_config_sections s1 = {ab_fields, 2, m1}, s2 = {g_fields, 2, m2};
        assert_int_equal(kdev_config_register(root, &s1, &e), 0);
        assert_int_equal(kdev_config_register(root, &s2, &e), 0);
        assert_int_equal(root->n_fields, 5);
}

static int parse(const struct kdev_config_root *root, const char *text, struct kdev_err *e)
{
        kdev_err_clear(e);
        return kdev_config_parse(root, "r.yaml", text, strlen(text), e);
}

static void test_sections_read_into_their_objects(void **state)
{
        (void)state;
        struct kdev_config_root root;
        struct mod m1 = {0}, m2 = {0};
        struct kdev_err e;
        setup_root(&root, &m1, &m2);
        const char *text = "version: v1\nbeta: two\ngamma: three\nalpha: one\nnested: {n: 4}\n";
        if (parse(&root, text, &e) != 0)
                fail_msg("%s", e.msg);
        assert_string_equal(m1.a, "one");
        assert_string_equal(m1.b, "two");
        assert_string_equal(m2.a, "three");
        assert_null(m2.b);
        assert_int_equal(m2.n, 4);
        mod_clear(&m1);
        mod_clear(&m2);

        /* version is optional; a root can be read again */
        assert_int_equal(parse(&root, "alpha: x\n", &e), 0);
        assert_string_equal(m1.a, "x");
        assert_null(m2.a);
        mod_clear(&m1);
        assert_int_equal(parse(&root, "version: v1\n", &e), 0);
        assert_null(m1.a);
}

static void test_errors_name_file_line_key(void **state)
{
        (void)state;
        struct kdev_config_root root;
        struct mod m1 = {0}, m2 = {0};
        struct kdev_err e;
        setup_root(&root, &m1, &m2);
        static const struct {
                const char *text, *msg;
        } cases[] = {
                {"version: v2\n",
                 "r.yaml:1:10: version: unsupported version \"v2\" (supported: v1)"},
                {"alpha: a\ndelta: d\n",
                 "r.yaml:2:1: delta: unknown key (expected one of: version, alpha, beta, gamma, "
                 "nested)"},
                {"nested:\n  n: 9\n",
                 "r.yaml:2:6: nested.n: must be an integer between 1 and 5, got \"9\""},
                {"nested: {}\n", "r.yaml:1:9: nested: missing required key \"n\""},
                {"gamma: [1]\n", "r.yaml:1:8: gamma: must be a string, got a list"},
                {"alpha: a\nalpha: b\n",
                 "r.yaml:2:1: alpha: duplicate key (first at line 1, column 1)"},
                {"- alpha\n", "r.yaml:1:1: must be a mapping, got a list"},
        };
        for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
                assert_int_equal(parse(&root, cases[i].text, &e), -EINVAL);
                assert_int_equal(e.code, EINVAL);
                assert_string_equal(e.msg, cases[i].msg);
                mod_clear(&m1);
                mod_clear(&m2);
        }

        /* no text, no display name: no YAML document, so every section is
         * absent (1, nothing read, no error), as NVIDIA reads an empty file */
        kdev_err_clear(&e);
        assert_int_equal(kdev_config_parse(&root, NULL, NULL, 0, &e), 1);
        assert_int_equal(e.code, 0);
        assert_string_equal(e.msg, "");
        assert_int_equal(parse(&root, "# only a comment\n\n", &e), 1);
        assert_string_equal(e.msg, "");
}

static void test_register_refusals(void **state)
{
        (void)state;
        struct kdev_config_root root;
        struct mod m = {0};
        struct kdev_err e;
        kdev_config_root_init(&root);

        static const struct kdev_ycfg_field version[] = {{"version", false, read_a}};
        struct kdev_config_sections s = {version, 1, &m};
        kdev_err_clear(&e);
        assert_int_equal(kdev_config_register(&root, &s, &e), -EINVAL);
        assert_string_equal(e.msg, "config section \"version\" defined twice");
        assert_int_equal(root.n_fields, 1);

        static const struct kdev_ycfg_field twice[] = {{"alpha", false, read_a},
                                                       {"alpha", false, read_b}};
        s = (struct kdev_config_sections){twice, 2, &m};
        assert_int_equal(kdev_config_register(&root, &s, &e), -EINVAL);
        assert_string_equal(e.msg, "config section \"alpha\" defined twice");
        assert_int_equal(root.n_fields, 1);

        s = (struct kdev_config_sections){ab_fields, 2, &m};
        assert_int_equal(kdev_config_register(&root, &s, &e), 0);
        s = (struct kdev_config_sections){version + 0, 0, &m};
        assert_int_equal(kdev_config_register(&root, &s, &e), 0); /* no keys: nothing to add */
        s = (struct kdev_config_sections){ab_fields + 1, 1, &m};
        assert_int_equal(kdev_config_register(&root, &s, &e), -EINVAL);
        assert_string_equal(e.msg, "config section \"beta\" defined twice");
        assert_int_equal(root.n_fields, 3);
}

static void test_register_limit(void **state)
{
        (void)state;
        struct kdev_config_root root;
        struct mod m = {0};
        struct kdev_err e;
        static char names[KDEV_CONFIG_KEYS_MAX][8];
        static struct kdev_ycfg_field many[KDEV_CONFIG_KEYS_MAX];
        for (size_t i = 0; i < KDEV_CONFIG_KEYS_MAX; i++) {
                snprintf(names[i], sizeof(names[i]), "k%zu", i);
                many[i] = (struct kdev_ycfg_field){names[i], false, read_a};
        }
        kdev_config_root_init(&root);
        /* version + 64 keys: one too many; nothing is added */
        struct kdev_config_sections s = {many, KDEV_CONFIG_KEYS_MAX, &m};
        kdev_err_clear(&e);
        assert_int_equal(kdev_config_register(&root, &s, &e), -EINVAL);
        assert_string_equal(e.msg, "too many config sections");
        assert_int_equal(root.n_fields, 1);
        /* version + 63 keys fill the root exactly */
        s.n_fields = KDEV_CONFIG_KEYS_MAX - 1;
        assert_int_equal(kdev_config_register(&root, &s, &e), 0);
        assert_int_equal(root.n_fields, KDEV_CONFIG_KEYS_MAX);
        s = (struct kdev_config_sections){many + KDEV_CONFIG_KEYS_MAX - 1, 1, &m};
        assert_int_equal(kdev_config_register(&root, &s, &e), -EINVAL);
        assert_string_equal(e.msg, "too many config sections");
        /* the last key registered is read */
        assert_int_equal(parse(&root, "k62: last\n", &e), 0);
        assert_string_equal(m.a, "last");
        mod_clear(&m);
}

static void test_load(void **state)
{
        (void)state;
        struct kdev_config_root root;
        struct mod m1 = {0}, m2 = {0};
        struct kdev_err e;
        setup_root(&root, &m1, &m2);
        char dir[] = "/tmp/kdev-config-root-XXXXXX";
        assert_non_null(mkdtemp(dir));
        char path[256];
        snprintf(path, sizeof(path), "%s/kdev.yaml", dir);

        kdev_err_clear(&e);
        assert_int_equal(kdev_config_load(&root, path, &e), -ENOENT);
        char want[512];
        snprintf(want, sizeof(want), "%s: cannot read: No such file or directory", path);
        assert_string_equal(e.msg, want);

        FILE *f = fopen(path, "w");
        assert_non_null(f);
        fputs("version: v1\nalpha: file\nnested: {n: 0}\n", f);
        fclose(f);
        kdev_err_clear(&e);
        assert_int_equal(kdev_config_load(&root, path, &e), -EINVAL);
        snprintf(want, sizeof(want),
                 "%s:3:13: nested.n: must be an integer between 1 and 5, got \"0\"", path);
        assert_string_equal(e.msg, want);
        assert_string_equal(m1.a, "file"); /* read before the error */
        mod_clear(&m1);
        mod_clear(&m2);

        f = fopen(path, "w");
        assert_non_null(f);
        fputs("gamma: g\n", f);
        fclose(f);
        assert_int_equal(kdev_config_load(&root, path, &e), 0);
        assert_string_equal(m2.a, "g");
        mod_clear(&m2);
        unlink(path);
        rmdir(dir);
}

int main(void)
{
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_sections_read_into_their_objects),
                cmocka_unit_test(test_errors_name_file_line_key),
                cmocka_unit_test(test_register_refusals),
                cmocka_unit_test(test_register_limit),
                cmocka_unit_test(test_load),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
