/* CDI spec in memory: builder checks, cdiVersion selection, exact JSON text,
 * merge, strict parsing. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "cdi/cdi.h"

static struct kdev_cdi_spec *new_spec(const char *kind)
{
        struct kdev_err e = { 0 };
        struct kdev_cdi_spec *s = kdev_cdi_spec_new(kind, &e);
        if (!s)
                fail_msg("spec_new %s: %s", kind, e.msg);
        return s;
}

static struct kdev_cdi_device *add_dev(struct kdev_cdi_spec *s, const char *name, const char *node)
{
        struct kdev_err e = { 0 };
        struct kdev_cdi_device *d = kdev_cdi_spec_add_device(s, name, &e);
        if (!d)
                fail_msg("add_device %s: %s", name, e.msg);
        struct kdev_cdi_device_node n = { .path = (char *)node };
        if (kdev_cdi_edits_add_device_node(kdev_cdi_device_edits(d), &n, &e) != 0)
                fail_msg("add node %s: %s", node, e.msg);
        return d;
}

static char *compact(const struct kdev_cdi_spec *s)
{
        json_t *j = NULL;
        struct kdev_err e = { 0 };
        if (kdev_cdi_spec_to_json(s, &j, &e) != 0)
                fail_msg("to_json: %s", e.msg);
        char *text = json_dumps(j, JSON_COMPACT);
        json_decref(j);
        return text;
}

/* ---- cdiVersion ------------------------------------------------------------ */

enum feature {
        F_NONE,
        F_MOUNT_TYPE,
        F_HOST_PATH,
        F_DIGIT_NAME,
        F_CLASS_DOT,
        F_SPEC_ANN,
        F_DEV_ANN,
        F_GIDS_SPEC,
        F_GIDS_DEV,
        F_NET_SPEC,
        F_NET_DEV,
        F_HOST_PATH_SPEC,
};

struct version_case {
        unsigned features; /* bit set of 1 << enum feature */
        const char *min;   /* min_version or NULL */
        const char *want;
        const char *why;
};

static struct kdev_cdi_spec *spec_with(unsigned f)
{
        struct kdev_err e = { 0 };
        struct kdev_cdi_spec *s = new_spec(f & (1u << F_CLASS_DOT) ? "vendor.com/gpu.x"
                                                                   : "vendor.com/gpu");
        struct kdev_cdi_device *d = add_dev(s, f & (1u << F_DIGIT_NAME) ? "0" : "gpu0",
                                            "/dev/gpu0");
        struct kdev_cdi_edits *de = kdev_cdi_device_edits(d), *se = kdev_cdi_spec_edits(s);
        if (f & (1u << F_MOUNT_TYPE)) {
                struct kdev_cdi_mount m = { .host_path = "/a", .container_path = "/b",
                                            .type = "bind" };
                assert_int_equal(kdev_cdi_edits_add_mount(de, &m, &e), 0);
        }
        if (f & (1u << F_HOST_PATH)) {
                struct kdev_cdi_device_node n = { .path = "/dev/x", .host_path = "/host/dev/x" };
                assert_int_equal(kdev_cdi_edits_add_device_node(de, &n, &e), 0);
        }
        if (f & (1u << F_HOST_PATH_SPEC)) {
                struct kdev_cdi_device_node n = { .path = "/dev/y", .host_path = "/dev/y" };
                assert_int_equal(kdev_cdi_edits_add_device_node(se, &n, &e), 0);
        }
        if (f & (1u << F_SPEC_ANN))
                assert_int_equal(kdev_cdi_spec_set_annotation(s, "a", "b", &e), 0);
        if (f & (1u << F_DEV_ANN))
                assert_int_equal(kdev_cdi_device_set_annotation(d, "a", "b", &e), 0);
        if (f & (1u << F_GIDS_SPEC))
                assert_int_equal(kdev_cdi_edits_add_additional_gid(se, 44, &e), 0);
        if (f & (1u << F_GIDS_DEV))
                assert_int_equal(kdev_cdi_edits_add_additional_gid(de, 44, &e), 0);
        if (f & (1u << F_NET_SPEC))
                assert_int_equal(kdev_cdi_edits_add_net_device(se, "eth1", "net0", &e), 0);
        if (f & (1u << F_NET_DEV))
                assert_int_equal(kdev_cdi_edits_add_net_device(de, "eth1", "net0", &e), 0);
        return s;
}

#define B(x) (1u << (x))

static void test_versions(void **state)
{
        (void)state;
        static const struct version_case cases[] = {
                { 0, NULL, "0.3.0", "baseline" },
                { B(F_MOUNT_TYPE), NULL, "0.4.0", "mounts type" },
                { B(F_HOST_PATH), NULL, "0.5.0", "deviceNodes hostPath" },
                { B(F_HOST_PATH_SPEC), NULL, "0.5.0", "deviceNodes hostPath" },
                { B(F_DIGIT_NAME), NULL, "0.5.0", "a device name starting with a digit" },
                { B(F_CLASS_DOT), NULL, "0.6.0", "a '.' in the class" },
                { B(F_SPEC_ANN), NULL, "0.6.0", "annotations" },
                { B(F_DEV_ANN), NULL, "0.6.0", "annotations" },
                { B(F_GIDS_SPEC), NULL, "0.7.0", "additionalGids" },
                { B(F_GIDS_DEV), NULL, "0.7.0", "additionalGids" },
                { B(F_NET_SPEC), NULL, "1.1.0", "netDevices" },
                { B(F_NET_DEV), NULL, "1.1.0", "netDevices" },
                { B(F_HOST_PATH) | B(F_MOUNT_TYPE), NULL, "0.5.0", "deviceNodes hostPath" },
                { B(F_HOST_PATH) | B(F_DEV_ANN), NULL, "0.6.0", "annotations" },
                { B(F_NET_DEV) | B(F_GIDS_DEV) | B(F_SPEC_ANN), NULL, "1.1.0", "netDevices" },
                /* a floor raises the version, never lowers it */
                { 0, "0.5.0", "0.5.0", "baseline" },
                { 0, "1.0.0", "1.0.0", "baseline" },
                { 0, "v0.8.0", "0.8.0", "baseline" },
                { 0, "0.1.0", "0.3.0", "baseline" },
                { B(F_SPEC_ANN), "0.4.0", "0.6.0", "annotations" },
                { B(F_HOST_PATH), "0.5.0", "0.5.0", "deviceNodes hostPath" },
        };
        for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
                struct kdev_cdi_spec *s = spec_with(cases[i].features);
                struct kdev_err e = { 0 };
                if (cases[i].min)
                        assert_int_equal(kdev_cdi_spec_set_min_version(s, cases[i].min, &e), 0);
                const char *why = NULL;
                (void)kdev_cdi_required_version(s, &why);
                if (strcmp(kdev_cdi_spec_version(s), cases[i].want) ||
                    strcmp(why, cases[i].why))
                        fail_msg("case %zu: version %s (%s), want %s (%s)", i,
                                 kdev_cdi_spec_version(s), why, cases[i].want, cases[i].why);
                /* the rendered text carries the same version */
                json_t *j = NULL;
                assert_int_equal(kdev_cdi_spec_to_json(s, &j, &e), 0);
                assert_string_equal(json_string_value(json_object_get(j, "cdiVersion")),
                                    cases[i].want);
                json_decref(j);
                kdev_cdi_spec_free(s);
        }

        struct kdev_cdi_spec *s = spec_with(0);
        struct kdev_err e = { 0 };
        assert_int_equal(kdev_cdi_spec_set_min_version(s, "0.9.0", &e), -EINVAL);
        assert_string_equal(e.msg, "unknown CDI version \"0.9.0\" (known: 0.1.0 to 1.1.0)");
        assert_int_equal(kdev_cdi_spec_set_min_version(s, "1.1", &e), -EINVAL);
        assert_int_equal(kdev_cdi_spec_set_min_version(s, "1.1.0", &e), 0);
        assert_string_equal(kdev_cdi_spec_version(s), "1.1.0");
        assert_int_equal(kdev_cdi_spec_set_min_version(s, NULL, &e), 0);
        assert_string_equal(kdev_cdi_spec_version(s), "0.3.0");
        kdev_cdi_spec_free(s);

        assert_true(kdev_cdi_version_compare("0.10.0", "0.9.0") > 0);
        assert_true(kdev_cdi_version_compare("1.0.0", "0.8.0") > 0);
        assert_int_equal(kdev_cdi_version_compare("v0.5.0", "0.5.0"), 0);
        assert_true(kdev_cdi_version_compare("0.5.0", "0.6.0") < 0);
        assert_true(kdev_cdi_version_compare("junk", "0.1.0") < 0);
}

/* ---- exact JSON ------------------------------------------------------------- */

static void test_exact_text(void **state)
{
        (void)state;
        struct kdev_err e = { 0 };
        struct kdev_cdi_spec *s = new_spec("example.com/fuse");
        struct kdev_cdi_device *d = kdev_cdi_spec_add_device(s, "fuse", &e);
        assert_non_null(d);
        struct kdev_cdi_device_node n = { .path = "/dev/fuse", .permissions = "rw" };
        assert_int_equal(kdev_cdi_edits_add_device_node(kdev_cdi_device_edits(d), &n, &e), 0);
        assert_int_equal(kdev_cdi_edits_add_env(kdev_cdi_spec_edits(s), "A=1", &e), 0);
        char *text = NULL;
        static const char want[] = "{\n"
                                   "  \"cdiVersion\": \"0.3.0\",\n"
                                   "  \"kind\": \"example.com/fuse\",\n"
                                   "  \"devices\": [\n"
                                   "    {\n"
                                   "      \"name\": \"fuse\",\n"
                                   "      \"containerEdits\": {\n"
                                   "        \"deviceNodes\": [\n"
                                   "          {\n"
                                   "            \"path\": \"/dev/fuse\",\n"
                                   "            \"permissions\": \"rw\"\n"
                                   "          }\n"
                                   "        ]\n"
                                   "      }\n"
                                   "    }\n"
                                   "  ],\n"
                                   "  \"containerEdits\": {\n"
                                   "    \"env\": [\n"
                                   "      \"A=1\"\n"
                                   "    ]\n"
                                   "  }\n"
                                   "}\n";
        assert_int_equal(kdev_cdi_spec_format(s, &text, &e), (int)strlen(want));
        assert_string_equal(text, want);
        free(text);
        kdev_cdi_spec_free(s);
}

/* Every field, in the Go library's json.Marshal order. */
static void test_all_fields_order(void **state)
{
        (void)state;
        struct kdev_err e = { 0 };
        struct kdev_cdi_spec *s = new_spec("vendor.com/dev");
        assert_int_equal(kdev_cdi_spec_set_annotation(s, "z.io/b", "2", &e), 0);
        assert_int_equal(kdev_cdi_spec_set_annotation(s, "a", "1", &e), 0);
        assert_int_equal(kdev_cdi_spec_set_annotation(s, "z.io/b", "3", &e), 0); /* replaces */
        struct kdev_cdi_device *d = kdev_cdi_spec_add_device(s, "d1", &e);
        assert_non_null(d);
        assert_int_equal(kdev_cdi_device_set_annotation(d, "k", "v", &e), 0);
        struct kdev_cdi_edits *de = kdev_cdi_device_edits(d);
        assert_int_equal(kdev_cdi_edits_add_additional_gid(de, 44, &e), 0);
        struct kdev_cdi_mount m = { .host_path = "/h", .container_path = "/c",
                                    .options = (char *[]){ "ro", "bind" }, .n_options = 2,
                                    .type = "none" };
        assert_int_equal(kdev_cdi_edits_add_mount(de, &m, &e), 0);
        struct kdev_cdi_hook h = { .hook_name = "createContainer", .path = "/bin/hook",
                                   .args = (char *[]){ "hook", "x" }, .n_args = 2,
                                   .env = (char *[]){ "E=1" }, .n_env = 1, .has_timeout = true,
                                   .timeout = 5 };
        assert_int_equal(kdev_cdi_edits_add_hook(de, &h, &e), 0);
        assert_int_equal(kdev_cdi_edits_add_net_device(de, "eth0", "n0", &e), 0);
        struct kdev_cdi_device_node n = { .path = "/dev/d1", .host_path = "/dev/h1", .type = "c",
                                          .has_major = true, .major = 195, .has_minor = true,
                                          .minor = 0, .has_file_mode = true, .file_mode = 0666,
                                          .permissions = "rwm", .has_uid = true, .uid = 0,
                                          .has_gid = true, .gid = 44 };
        assert_int_equal(kdev_cdi_edits_add_device_node(de, &n, &e), 0);
        assert_int_equal(kdev_cdi_edits_add_env(de, "X=y=z", &e), 0);
        char *text = compact(s);
        assert_string_equal(
                text,
                "{\"cdiVersion\":\"1.1.0\",\"kind\":\"vendor.com/dev\","
                "\"annotations\":{\"a\":\"1\",\"z.io/b\":\"3\"},"
                "\"devices\":[{\"name\":\"d1\",\"annotations\":{\"k\":\"v\"},"
                "\"containerEdits\":{\"env\":[\"X=y=z\"],"
                "\"deviceNodes\":[{\"path\":\"/dev/d1\",\"hostPath\":\"/dev/h1\",\"type\":\"c\","
                "\"major\":195,\"minor\":0,\"fileMode\":438,\"permissions\":\"rwm\",\"uid\":0,"
                "\"gid\":44}],"
                "\"netDevices\":[{\"hostInterfaceName\":\"eth0\",\"name\":\"n0\"}],"
                "\"hooks\":[{\"hookName\":\"createContainer\",\"path\":\"/bin/hook\","
                "\"args\":[\"hook\",\"x\"],\"env\":[\"E=1\"],\"timeout\":5}],"
                "\"mounts\":[{\"hostPath\":\"/h\",\"containerPath\":\"/c\","
                "\"options\":[\"ro\",\"bind\"],\"type\":\"none\"}],"
                "\"additionalGids\":[44]}}]}");
        free(text);

        /* parse back: equal, and the same text */
        json_t *j = NULL;
        assert_int_equal(kdev_cdi_spec_to_json(s, &j, &e), 0);
        struct kdev_cdi_spec *back = NULL;
        if (kdev_cdi_spec_from_json(j, &back, &e) != 0)
                fail_msg("from_json: %s", e.msg);
        json_decref(j);
        assert_true(kdev_cdi_spec_equal(s, back));
        assert_string_equal(back->min_version, "1.1.0");
        assert_int_equal(back->devices[0]->edits.device_nodes[0].major, 195);
        assert_true(back->devices[0]->edits.device_nodes[0].has_minor);
        assert_int_equal(back->devices[0]->edits.hooks[0].timeout, 5);
        assert_string_equal(back->annotations.items[1].value, "3");
        kdev_cdi_spec_free(back);
        kdev_cdi_spec_free(s);
}

/* ---- builder checks --------------------------------------------------------- */

static void test_builder_errors(void **state)
{
        (void)state;
        struct kdev_err e = { 0 };
        assert_null(kdev_cdi_spec_new("nokind", &e));
        assert_int_equal(e.code, EINVAL);
        assert_string_equal(e.msg, "invalid CDI kind \"nokind\": expected \"vendor/class\"");

        struct kdev_cdi_spec *s = new_spec("vendor.com/gpu");
        struct kdev_cdi_device *d = add_dev(s, "gpu0", "/dev/gpu0");
        struct kdev_cdi_edits *ed = kdev_cdi_device_edits(d);
        assert_null(kdev_cdi_spec_add_device(s, "gpu0", &e));
        assert_int_equal(e.code, EEXIST);
        assert_string_equal(e.msg, "CDI spec \"vendor.com/gpu\": device \"gpu0\" already exists");
        assert_null(kdev_cdi_spec_add_device(s, "gpu 1", &e));
        assert_string_equal(e.msg, "invalid CDI device name \"gpu 1\": invalid character ' '");
        assert_int_equal(s->n_devices, 1);

        assert_int_equal(kdev_cdi_edits_add_env(ed, "=x", &e), -EINVAL);
        assert_string_equal(e.msg, "invalid environment variable \"=x\": expected \"NAME=value\"");
        assert_int_equal(kdev_cdi_edits_add_env(ed, "NOEQ", &e), -EINVAL);
        assert_int_equal(kdev_cdi_edits_add_env(ed, "EMPTY=", &e), 0);

        struct kdev_cdi_device_node n = { .path = "" };
        assert_int_equal(kdev_cdi_edits_add_device_node(ed, &n, &e), -EINVAL);
        assert_string_equal(e.msg, "device node: empty path");
        n.path = "/dev/x";
        n.type = "x";
        assert_int_equal(kdev_cdi_edits_add_device_node(ed, &n, &e), -EINVAL);
        assert_string_equal(e.msg, "device node \"/dev/x\": invalid type \"x\" (b, c, u or p)");
        n.type = "b";
        n.permissions = "rwx";
        assert_int_equal(kdev_cdi_edits_add_device_node(ed, &n, &e), -EINVAL);
        assert_string_equal(e.msg, "device node \"/dev/x\": invalid permissions \"rwx\" (letters "
                                   "of \"rwm\", or \"none\")");
        n.permissions = "none";
        assert_int_equal(kdev_cdi_edits_add_device_node(ed, &n, &e), 0);
        n.permissions = "mr";
        n.type = "";          /* "" means unset */
        n.host_path = "";
        assert_int_equal(kdev_cdi_edits_add_device_node(ed, &n, &e), 0);
        assert_null(ed->device_nodes[2].type);
        assert_null(ed->device_nodes[2].host_path);

        struct kdev_cdi_mount m = { .host_path = "/h", .container_path = "" };
        assert_int_equal(kdev_cdi_edits_add_mount(ed, &m, &e), -EINVAL);
        assert_string_equal(e.msg, "mount \"/h\": empty container path");
        m.host_path = NULL;
        assert_int_equal(kdev_cdi_edits_add_mount(ed, &m, &e), -EINVAL);
        assert_string_equal(e.msg, "mount: empty host path");

        struct kdev_cdi_hook h = { .hook_name = "prestop", .path = "/bin/h" };
        assert_int_equal(kdev_cdi_edits_add_hook(ed, &h, &e), -EINVAL);
        assert_string_equal(e.msg, "invalid hook name \"prestop\" (prestart, createRuntime, "
                                   "createContainer, startContainer, poststart or poststop)");
        h.hook_name = "poststop";
        h.path = "bin/h";
        assert_int_equal(kdev_cdi_edits_add_hook(ed, &h, &e), -EINVAL);
        assert_string_equal(e.msg, "hook \"poststop\": path \"bin/h\" is not absolute");
        h.path = "/bin/h";
        h.has_timeout = true;
        h.timeout = 0;
        assert_int_equal(kdev_cdi_edits_add_hook(ed, &h, &e), -EINVAL);
        assert_string_equal(e.msg, "hook \"poststop\": timeout 0 is not positive");
        h.has_timeout = false;
        h.env = (char *[]){ "BAD" };
        h.n_env = 1;
        assert_int_equal(kdev_cdi_edits_add_hook(ed, &h, &e), -EINVAL);
        assert_string_equal(e.msg, "hook \"poststop\": invalid environment variable \"BAD\": "
                                   "expected \"NAME=value\"");
        assert_int_equal(ed->n_hooks, 0);

        assert_int_equal(kdev_cdi_edits_add_net_device(ed, "eth0", "n0", &e), 0);
        assert_int_equal(kdev_cdi_edits_add_net_device(ed, "eth0", "n1", &e), -EINVAL);
        assert_string_equal(e.msg, "net device: host interface \"eth0\" listed twice");
        assert_int_equal(kdev_cdi_edits_add_net_device(ed, "eth1", "n0", &e), -EINVAL);
        assert_string_equal(e.msg, "net device: name \"n0\" listed twice");
        assert_int_equal(kdev_cdi_edits_add_net_device(ed, "", "n2", &e), -EINVAL);

        assert_ptr_equal(kdev_cdi_spec_find_device(s, "gpu0"), d);
        assert_null(kdev_cdi_spec_find_device(s, "gpu9"));
        kdev_cdi_spec_free(s);
        kdev_cdi_spec_free(NULL);
}

static void test_validate(void **state)
{
        (void)state;
        struct kdev_err e = { 0 };
        struct kdev_cdi_spec *s = new_spec("vendor.com/gpu");
        json_t *j = (json_t *)1;
        assert_int_equal(kdev_cdi_spec_to_json(s, &j, &e), -EINVAL);
        assert_null(j);
        assert_string_equal(e.msg, "CDI spec \"vendor.com/gpu\": no devices");
        add_dev(s, "gpu0", "/dev/gpu0");
        struct kdev_err e2 = { 0 };
        assert_non_null(kdev_cdi_spec_add_device(s, "all", &e2));
        char *text = NULL;
        assert_int_equal(kdev_cdi_spec_format(s, &text, &e), -EINVAL);
        assert_null(text);
        assert_string_equal(e.msg, "CDI spec \"vendor.com/gpu\": devices[1] \"all\": no container "
                                   "edits");
        assert_int_equal(kdev_cdi_edits_add_env(kdev_cdi_device_edits(s->devices[1]), "A=1", &e),
                         0);
        assert_int_equal(kdev_cdi_spec_validate(s, &e), 0);

        /* strings must be UTF-8 to become JSON */
        assert_int_equal(kdev_cdi_edits_add_env(kdev_cdi_spec_edits(s), "B=\xff", &e), 0);
        assert_int_equal(kdev_cdi_spec_format(s, &text, &e), -EINVAL);
        assert_string_equal(e.msg, "CDI spec \"vendor.com/gpu\": string \"B=\xff\" is not valid "
                                   "UTF-8");
        kdev_cdi_spec_free(s);
}

static void test_merge(void **state)
{
        (void)state;
        struct kdev_err e = { 0 };
        struct kdev_cdi_spec *s = new_spec("vendor.com/gpu");
        struct kdev_cdi_device *g0 = add_dev(s, "gpu0", "/dev/gpu0");
        struct kdev_cdi_device *g1 = add_dev(s, "gpu1", "/dev/gpu1");
        struct kdev_cdi_edits *e0 = kdev_cdi_device_edits(g0), *e1 = kdev_cdi_device_edits(g1);
        assert_int_equal(kdev_cdi_edits_add_env(e0, "A=1", &e), 0);
        assert_int_equal(kdev_cdi_edits_add_env(e1, "A=1", &e), 0);
        assert_int_equal(kdev_cdi_edits_add_env(e1, "B=2", &e), 0);
        struct kdev_cdi_device_node shared = { .path = "/dev/ctl" };
        assert_int_equal(kdev_cdi_edits_add_device_node(e0, &shared, &e), 0);
        assert_int_equal(kdev_cdi_edits_add_device_node(e1, &shared, &e), 0);
        struct kdev_cdi_mount m = { .host_path = "/h", .container_path = "/c" };
        assert_int_equal(kdev_cdi_edits_add_mount(e0, &m, &e), 0);
        assert_int_equal(kdev_cdi_edits_add_mount(e1, &m, &e), 0);
        struct kdev_cdi_hook h = { .hook_name = "createContainer", .path = "/bin/h" };
        assert_int_equal(kdev_cdi_edits_add_hook(e0, &h, &e), 0);
        h.args = (char *[]){ "h", "1" };
        h.n_args = 2;
        assert_int_equal(kdev_cdi_edits_add_hook(e1, &h, &e), 0); /* differs in args */
        assert_int_equal(kdev_cdi_edits_add_additional_gid(e0, 5, &e), 0);
        assert_int_equal(kdev_cdi_edits_add_additional_gid(e1, 5, &e), 0);

        struct kdev_cdi_device *all = kdev_cdi_spec_add_device(s, "all", &e);
        assert_non_null(all);
        struct kdev_cdi_edits *ea = kdev_cdi_device_edits(all);
        /* A, gpu0, ctl, mount, hook, gid */
        assert_int_equal(kdev_cdi_edits_merge(ea, e0, &e), 6);
        /* B, gpu1, hook with args */
        assert_int_equal(kdev_cdi_edits_merge(ea, e1, &e), 3);
        assert_int_equal(kdev_cdi_edits_merge(ea, e1, &e), 0);
        assert_int_equal(ea->n_env, 2);
        assert_string_equal(ea->env[1], "B=2");
        assert_int_equal(ea->n_device_nodes, 3);
        assert_string_equal(ea->device_nodes[0].path, "/dev/gpu0");
        assert_string_equal(ea->device_nodes[1].path, "/dev/ctl");
        assert_string_equal(ea->device_nodes[2].path, "/dev/gpu1");
        assert_int_equal(ea->n_mounts, 1);
        assert_int_equal(ea->n_hooks, 2);
        assert_int_equal(ea->hooks[1].n_args, 2);
        assert_int_equal(ea->n_additional_gids, 1);
        kdev_cdi_spec_free(s);
}

/* ---- strict parsing --------------------------------------------------------- */

struct parse_case {
        const char *json;
        int rc;
        const char *msg;
};

#define DEV "\"devices\":[{\"name\":\"d\",\"containerEdits\":{\"env\":[\"A=1\"]}}]"

static void test_parse_errors(void **state)
{
        (void)state;
        static const struct parse_case cases[] = {
                { "[]", -EINVAL, "spec: expected an object, got an array" },
                { "{\"kind\":\"v.com/c\"," DEV "}", -EINVAL,
                  "spec: missing required field \"cdiVersion\"" },
                { "{\"cdiVersion\":\"0.3.0\"," DEV "}", -EINVAL,
                  "spec: missing required field \"kind\"" },
                { "{\"cdiVersion\":\"0.3.0\",\"kind\":\"v.com/c\"}", -EINVAL,
                  "spec: missing required field \"devices\"" },
                { "{\"cdiVersion\":\"0.3.0\",\"kind\":\"v.com/c\",\"devices\":[]}", -EINVAL,
                  "CDI spec \"v.com/c\": no devices" },
                { "{\"cdiVersion\":\"0.3.0\",\"kind\":\"v.com/c\",\"extra\":1," DEV "}", -EINVAL,
                  "spec: unknown field \"extra\"" },
                { "{\"cdiVersion\":\"0.9.0\",\"kind\":\"v.com/c\"," DEV "}", -EINVAL,
                  "spec.cdiVersion: unknown CDI version \"0.9.0\" (known: 0.1.0 to 1.1.0)" },
                { "{\"cdiVersion\":3,\"kind\":\"v.com/c\"," DEV "}", -EINVAL,
                  "spec.cdiVersion: expected a string, got a number" },
                { "{\"cdiVersion\":\"0.3.0\",\"kind\":\"vcom\"," DEV "}", -EINVAL,
                  "spec.kind: invalid CDI kind \"vcom\": expected \"vendor/class\"" },
                { "{\"cdiVersion\":\"0.3.0\",\"kind\":\"v.com/c\",\"devices\":[{\"name\":\"d\","
                  "\"containerEdits\":{\"deviceNodes\":[{\"path\":\"/dev/a\",\"hostPath\":"
                  "\"/dev/a\"}]}}]}",
                  -EINVAL,
                  "spec.cdiVersion: \"0.3.0\" is lower than 0.5.0, which deviceNodes hostPath "
                  "requires" },
                { "{\"cdiVersion\":\"0.2.0\",\"kind\":\"v.com/c\"," DEV "}", -EINVAL,
                  "spec.cdiVersion: \"0.2.0\" is lower than 0.3.0, which baseline requires" },
                { "{\"cdiVersion\":\"0.6.0\",\"kind\":\"v.com/c\",\"devices\":[{\"name\":\"d\","
                  "\"containerEdits\":{\"mounts\":[{\"hostPath\":\"/a\",\"containerPath\":\"/b\","
                  "\"opts\":[]}]}}]}",
                  -EINVAL, "devices[0].containerEdits.mounts[0]: unknown field \"opts\"" },
                { "{\"cdiVersion\":\"0.6.0\",\"kind\":\"v.com/c\",\"devices\":[{\"name\":\"d\","
                  "\"containerEdits\":{\"mounts\":[{\"hostPath\":\"/a\"}]}}]}",
                  -EINVAL,
                  "devices[0].containerEdits.mounts[0]: missing required field "
                  "\"containerPath\"" },
                { "{\"cdiVersion\":\"0.6.0\",\"kind\":\"v.com/c\",\"devices\":[{\"name\":\"d\","
                  "\"containerEdits\":{\"env\":[\"A=1\"],\"intelRdt\":{}}}]}",
                  -EOPNOTSUPP, "devices[0].containerEdits.intelRdt: not supported" },
                { "{\"cdiVersion\":\"0.6.0\",\"kind\":\"v.com/c\",\"devices\":[{\"name\":\"d\","
                  "\"containerEdits\":{\"deviceNodes\":[{\"path\":\"/a\",\"major\":\"1\"}]}}]}",
                  -EINVAL, "devices[0].containerEdits.deviceNodes[0].major: expected an integer, "
                  "got a string" },
                { "{\"cdiVersion\":\"0.6.0\",\"kind\":\"v.com/c\",\"devices\":[{\"name\":\"d\","
                  "\"containerEdits\":{\"deviceNodes\":[{\"path\":\"/a\",\"uid\":-1}]}}]}",
                  -EINVAL,
                  "devices[0].containerEdits.deviceNodes[0].uid: -1 out of range [0, 4294967295]" },
                { "{\"cdiVersion\":\"0.6.0\",\"kind\":\"v.com/c\",\"devices\":[{\"name\":\"d\","
                  "\"containerEdits\":{\"hooks\":[{\"hookName\":\"x\",\"path\":\"/a\"}]}}]}",
                  -EINVAL,
                  "devices[0].containerEdits.hooks[0]: invalid hook name \"x\" (prestart, "
                  "createRuntime, createContainer, startContainer, poststart or poststop)" },
                { "{\"cdiVersion\":\"0.6.0\",\"kind\":\"v.com/c\",\"devices\":[{\"name\":\"d\","
                  "\"containerEdits\":{\"env\":[\"A\"]}}]}",
                  -EINVAL,
                  "devices[0].containerEdits.env[0]: invalid environment variable \"A\": "
                  "expected \"NAME=value\"" },
                { "{\"cdiVersion\":\"0.6.0\",\"kind\":\"v.com/c\",\"devices\":[{\"name\":\"d\","
                  "\"containerEdits\":{\"env\":[1]}}]}",
                  -EINVAL, "devices[0].containerEdits.env[0]: expected a string, got a number" },
                { "{\"cdiVersion\":\"0.6.0\",\"kind\":\"v.com/c\",\"devices\":[{\"name\":\"d\","
                  "\"containerEdits\":{\"additionalGids\":[-3]}}]}",
                  -EINVAL,
                  "devices[0].containerEdits.additionalGids[0]: expected an integer in "
                  "[0, 4294967295], got -3" },
                { "{\"cdiVersion\":\"0.6.0\",\"kind\":\"v.com/c\",\"devices\":[{\"name\":\"d\"}]}",
                  -EINVAL, "CDI spec \"v.com/c\": devices[0] \"d\": no container edits" },
                { "{\"cdiVersion\":\"0.6.0\",\"kind\":\"v.com/c\",\"devices\":[{\"name\":\"d\","
                  "\"containerEdits\":{\"env\":[\"A=1\"]}},{\"name\":\"d\",\"containerEdits\":"
                  "{\"env\":[\"A=1\"]}}]}",
                  -EINVAL,
                  "devices[1]: CDI spec \"v.com/c\": device \"d\" already exists" },
                { "{\"cdiVersion\":\"0.6.0\",\"kind\":\"v.com/c\",\"devices\":[{\"name\":\"-d\","
                  "\"containerEdits\":{\"env\":[\"A=1\"]}}]}",
                  -EINVAL,
                  "devices[0]: invalid CDI device name \"-d\": should start with a letter or "
                  "digit" },
                { "{\"cdiVersion\":\"0.6.0\",\"kind\":\"v.com/c\",\"annotations\":{\"k\":1}," DEV
                  "}",
                  -EINVAL, "spec.annotations.k: expected a string, got a number" },
                { "{\"cdiVersion\":\"0.6.0\",\"kind\":\"v.com/c\",\"devices\":[[]]}",
                  -EINVAL, "devices[0]: expected an object, got an array" },
                { "{\"cdiVersion\":\"0.6.0\",\"kind\":\"v.com/c\",\"devices\":{}}",
                  -EINVAL, "spec.devices: expected an array, got an object" },
                { "{\"cdiVersion\":\"0.6.0\",\"kind\":\"v.com/c\",\"devices\":[{\"name\":\"d\","
                  "\"containerEdits\":[]}]}",
                  -EINVAL, "devices[0].containerEdits: expected an object, got an array" },
                { "{\"cdiVersion\":\"0.6.0\",\"kind\":\"v.com/c\",\"devices\":[{\"name\":\"d\","
                  "\"annotations\":{\"-k\":\"v\"},\"containerEdits\":{\"env\":[\"A=1\"]}}]}",
                  -EINVAL,
                  "devices[0].annotations: device \"d\": annotation key \"-k\": invalid "
                  "annotation name \"-k\": should start with a letter or digit" },
        };
        for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
                json_error_t jerr;
                json_t *root = json_loads(cases[i].json, 0, &jerr);
                if (!root)
                        fail_msg("case %zu: bad test JSON: %s", i, jerr.text);
                struct kdev_err e = { 0 };
                struct kdev_cdi_spec *s = (struct kdev_cdi_spec *)1;
                int rc = kdev_cdi_spec_from_json(root, &s, &e);
                json_decref(root);
                if (rc != cases[i].rc || strcmp(e.msg, cases[i].msg))
                        fail_msg("case %zu: rc %d msg \"%s\"; want %d \"%s\"", i, rc, e.msg,
                                 cases[i].rc, cases[i].msg);
                assert_null(s);
                /* the same code without an error object */
                root = json_loads(cases[i].json, 0, NULL);
                assert_int_equal(kdev_cdi_spec_from_json(root, &s, NULL), cases[i].rc);
                json_decref(root);
                assert_null(s);
        }
}

static void test_parse_ok(void **state)
{
        (void)state;
        /* null counts as absent; a "v" prefix is accepted and normalised; a
         * higher version than needed is kept */
        static const char in[] =
                "{\"cdiVersion\":\"v0.7.0\",\"kind\":\"vendor.com/device\",\"annotations\":null,"
                "\"devices\":[{\"name\":\"myDevice\",\"containerEdits\":{\"deviceNodes\":"
                "[{\"hostPath\":\"/vendorroot/dev/card1\",\"path\":\"/dev/card1\",\"type\":null}]}}],"
                "\"containerEdits\":{\"env\":[\"FOO=CDI_SPEC\"],\"mounts\":[{\"hostPath\":"
                "\"/usr/lib/libVendor.so.0\",\"containerPath\":\"/usr/lib/libVendor.so.0\"}],"
                "\"hooks\":[{\"hookName\":\"createContainer\",\"path\":\"/bin/vendor-hook\"}]}}";
        json_t *root = json_loads(in, 0, NULL);
        assert_non_null(root);
        struct kdev_err e = { 0 };
        struct kdev_cdi_spec *s = NULL;
        if (kdev_cdi_spec_from_json(root, &s, &e) != 0)
                fail_msg("%s", e.msg);
        json_decref(root);
        assert_string_equal(kdev_cdi_spec_version(s), "0.7.0");
        assert_string_equal(kdev_cdi_required_version(s, NULL), "0.5.0");
        assert_int_equal(s->n_devices, 1);
        assert_string_equal(s->devices[0]->edits.device_nodes[0].host_path,
                            "/vendorroot/dev/card1");
        assert_null(s->devices[0]->edits.device_nodes[0].type);
        assert_int_equal(s->edits.n_hooks, 1);
        assert_int_equal(s->edits.n_mounts, 1);
        char *text = compact(s);
        assert_string_equal(
                text,
                "{\"cdiVersion\":\"0.7.0\",\"kind\":\"vendor.com/device\",\"devices\":[{\"name\":"
                "\"myDevice\",\"containerEdits\":{\"deviceNodes\":[{\"path\":\"/dev/card1\","
                "\"hostPath\":\"/vendorroot/dev/card1\"}]}}],\"containerEdits\":{\"env\":"
                "[\"FOO=CDI_SPEC\"],\"hooks\":[{\"hookName\":\"createContainer\",\"path\":"
                "\"/bin/vendor-hook\"}],\"mounts\":[{\"hostPath\":\"/usr/lib/libVendor.so.0\","
                "\"containerPath\":\"/usr/lib/libVendor.so.0\"}]}}");
        free(text);
        kdev_cdi_spec_free(s);
}

int main(void)
{
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_versions),      cmocka_unit_test(test_exact_text),
                cmocka_unit_test(test_all_fields_order), cmocka_unit_test(test_builder_errors),
                cmocka_unit_test(test_validate),      cmocka_unit_test(test_merge),
                cmocka_unit_test(test_parse_errors),  cmocka_unit_test(test_parse_ok),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
