/* CDI names: vendor, class, device names, qualified names, file names,
 * annotation keys (rules of CDI pkg/parser/parser.go and SPEC.md). */
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

struct bad {
        const char *in;
        const char *msg;
};

static void test_vendor_class(void **state)
{
        (void)state;
        static const char *const ok[] = { "a", "vendor.com", "k8s.device-plugin.nvidia.com",
                                          "A_b-c.D9", "x9" };
        for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++) {
                struct kdev_err e = { 0 };
                if (kdev_cdi_validate_vendor(ok[i], &e) != 0)
                        fail_msg("vendor %s: %s", ok[i], e.msg);
                if (kdev_cdi_validate_class(ok[i], &e) != 0)
                        fail_msg("class %s: %s", ok[i], e.msg);
        }
        static const struct bad bad[] = {
                { "", "invalid CDI vendor: empty" },
                { "9vendor", "invalid CDI vendor \"9vendor\": should start with a letter" },
                { "-v", "invalid CDI vendor \"-v\": should start with a letter" },
                { "vendor.", "invalid CDI vendor \"vendor.\": should end with a letter or digit" },
                { "ven dor", "invalid CDI vendor \"ven dor\": invalid character ' '" },
                { "ven/dor", "invalid CDI vendor \"ven/dor\": invalid character '/'" },
                { "ven:dor", "invalid CDI vendor \"ven:dor\": invalid character ':'" },
                { "ve\x01r", "invalid CDI vendor \"ve\x01r\": invalid character 0x01" },
        };
        for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
                struct kdev_err e = { 0 };
                assert_int_equal(kdev_cdi_validate_vendor(bad[i].in, &e), -EINVAL);
                assert_string_equal(e.msg, bad[i].msg);
        }
        struct kdev_err e = { 0 };
        assert_int_equal(kdev_cdi_validate_class("gpu_", &e), -EINVAL);
        assert_string_equal(e.msg, "invalid CDI class \"gpu_\": should end with a letter or digit");

        /* lengths: class <= 63, vendor <= 253 */
        char cls[80], ven[300];
        memset(cls, 'c', 63);
        cls[63] = '\0';
        assert_int_equal(kdev_cdi_validate_class(cls, NULL), 0);
        cls[63] = 'c';
        cls[64] = '\0';
        assert_int_equal(kdev_cdi_validate_class(cls, &e), -EINVAL);
        assert_non_null(strstr(e.msg, "longer than 63 characters"));
        memset(ven, 'v', 253);
        ven[253] = '\0';
        assert_int_equal(kdev_cdi_validate_vendor(ven, NULL), 0);
        ven[253] = 'v';
        ven[254] = '\0';
        assert_int_equal(kdev_cdi_validate_vendor(ven, &e), -EINVAL);
        assert_non_null(strstr(e.msg, "longer than 253 characters"));
}

static void test_kind(void **state)
{
        (void)state;
        static const char *const ok[] = { "vendor.com/foo", "foo.bar.baz/foo-bar123.B_az",
                                          "k8s.device-plugin.nvidia.com/gpu", "a/b" };
        for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++) {
                struct kdev_err e = { 0 };
                if (kdev_cdi_validate_kind(ok[i], &e) != 0)
                        fail_msg("%s: %s", ok[i], e.msg);
        }
        /* SPEC.md's invalid examples and more */
        static const struct bad bad[] = {
                { "foo", "invalid CDI kind \"foo\": expected \"vendor/class\"" },
                { "vendor.com/foo/", "kind \"vendor.com/foo/\": invalid CDI class \"foo/\": "
                                     "should end with a letter or digit" },
                { "vendor.com/foo/bar", "kind \"vendor.com/foo/bar\": invalid CDI class "
                                        "\"foo/bar\": invalid character '/'" },
                { "/gpu", "kind \"/gpu\": invalid CDI vendor: empty" },
                { "vendor.com/", "kind \"vendor.com/\": invalid CDI class: empty" },
                { "1vendor.com/gpu", "kind \"1vendor.com/gpu\": invalid CDI vendor "
                                     "\"1vendor.com\": should start with a letter" },
        };
        for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
                struct kdev_err e = { 0 };
                assert_int_equal(kdev_cdi_validate_kind(bad[i].in, &e), -EINVAL);
                assert_string_equal(e.msg, bad[i].msg);
        }
}

static void test_device_name(void **state)
{
        (void)state;
        static const char *const ok[] = { "0", "all", "gpu0", "GPU-4d3c1a0e-7f2b-4c8e-9a1d-0123456789ab",
                                          "0:1", "MIG-1.2_3", "a" };
        for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++) {
                struct kdev_err e = { 0 };
                if (kdev_cdi_validate_device_name(ok[i], &e) != 0)
                        fail_msg("%s: %s", ok[i], e.msg);
        }
        static const struct bad bad[] = {
                { "", "invalid CDI device name: empty" },
                { "-gpu", "invalid CDI device name \"-gpu\": should start with a letter or digit" },
                { "gpu:", "invalid CDI device name \"gpu:\": should end with a letter or digit" },
                { "gpu 0", "invalid CDI device name \"gpu 0\": invalid character ' '" },
                { "gpu/0", "invalid CDI device name \"gpu/0\": invalid character '/'" },
                { "gpu=0", "invalid CDI device name \"gpu=0\": invalid character '='" },
        };
        for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
                struct kdev_err e = { 0 };
                assert_int_equal(kdev_cdi_validate_device_name(bad[i].in, &e), -EINVAL);
                assert_string_equal(e.msg, bad[i].msg);
        }
}

static void test_qualified_name(void **state)
{
        (void)state;
        char buf[128];
        struct kdev_err e = { 0 };
        assert_int_equal(kdev_cdi_qualified_name("k8s.device-plugin.nvidia.com/gpu",
                                                 "GPU-1234", buf, sizeof(buf), &e),
                         (int)strlen("k8s.device-plugin.nvidia.com/gpu=GPU-1234"));
        assert_string_equal(buf, "k8s.device-plugin.nvidia.com/gpu=GPU-1234");
        assert_int_equal(kdev_cdi_qualified_name("vendor.com/gpu", "0:1", buf, sizeof(buf), &e),
                         18);
        assert_string_equal(buf, "vendor.com/gpu=0:1");

        /* exact fit and one byte short */
        assert_int_equal(kdev_cdi_qualified_name("v/c", "n", buf, 6, &e), 5);
        assert_string_equal(buf, "v/c=n");
        assert_int_equal(kdev_cdi_qualified_name("v/c", "n", buf, 5, &e), -ENAMETOOLONG);
        assert_string_equal(buf, "");
        assert_string_equal(e.msg, "CDI name needs 6 bytes, buffer has 5");

        assert_int_equal(kdev_cdi_qualified_name("vendor.com", "gpu0", buf, sizeof(buf), &e),
                         -EINVAL);
        assert_string_equal(e.msg, "invalid CDI kind \"vendor.com\": expected \"vendor/class\"");
        assert_int_equal(kdev_cdi_qualified_name("vendor.com/gpu", "gpu 0", buf, sizeof(buf), &e),
                         -EINVAL);
        assert_string_equal(e.msg, "invalid CDI device name \"gpu 0\": invalid character ' '");
}

static void test_parse_qualified_name(void **state)
{
        (void)state;
        char kind[300], name[64];
        struct kdev_err e = { 0 };
        assert_int_equal(kdev_cdi_parse_qualified_name("vendor.com/gpu=gpu0", kind, sizeof(kind),
                                                       name, sizeof(name), &e),
                         0);
        assert_string_equal(kind, "vendor.com/gpu");
        assert_string_equal(name, "gpu0");
        /* the device name may hold ':' but not '=' */
        assert_int_equal(kdev_cdi_parse_qualified_name("v.com/c=0:1", NULL, 0, name, sizeof(name),
                                                       &e),
                         0);
        assert_string_equal(name, "0:1");

        static const struct bad bad[] = {
                { "/dev/nvidia0", "\"/dev/nvidia0\" is a device path, not a CDI device name" },
                { "gpu0", "unqualified CDI device \"gpu0\": expected \"vendor/class=name\"" },
                { "vendor.com/gpu=", "unqualified CDI device \"vendor.com/gpu=\": expected "
                                     "\"vendor/class=name\"" },
                { "=gpu0", "unqualified CDI device \"=gpu0\": expected \"vendor/class=name\"" },
                { "vendor.com=gpu0", "CDI device \"vendor.com=gpu0\": invalid CDI kind "
                                     "\"vendor.com\": expected \"vendor/class\"" },
                { "vendor.com/gpu=a=b", "CDI device \"vendor.com/gpu=a=b\": invalid CDI device "
                                        "name \"a=b\": invalid character '='" },
        };
        for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
                assert_int_equal(kdev_cdi_parse_qualified_name(bad[i].in, kind, sizeof(kind), name,
                                                               sizeof(name), &e),
                                 -EINVAL);
                assert_string_equal(e.msg, bad[i].msg);
        }
        assert_int_equal(kdev_cdi_parse_qualified_name("vendor.com/gpu=gpu0", kind, 4, NULL, 0,
                                                       &e),
                         -ENAMETOOLONG);
}

static void test_file_names(void **state)
{
        (void)state;
        char buf[256];
        struct kdev_err e = { 0 };
        /* NVIDIA's plugin: /var/run/cdi/k8s.device-plugin.nvidia.com-gpu.json */
        assert_int_equal(kdev_cdi_spec_file_name("k8s.device-plugin.nvidia.com/gpu", buf,
                                                 sizeof(buf), &e),
                         37);
        assert_string_equal(buf, "k8s.device-plugin.nvidia.com-gpu.json");
        assert_int_equal(kdev_cdi_spec_file_name("example.com/fuse", buf, sizeof(buf), &e), 21);
        assert_string_equal(buf, "example.com-fuse.json");
        assert_int_equal(kdev_cdi_spec_file_name("example.com", buf, sizeof(buf), &e), -EINVAL);
        assert_int_equal(kdev_cdi_spec_file_name("a/b", buf, 8, &e), -ENAMETOOLONG);
        assert_int_equal(kdev_cdi_spec_file_name("a/b", buf, 9, &e), 8);
        assert_string_equal(buf, "a-b.json");

        assert_int_equal(kdev_cdi_transient_file_name("gpu.example.com/gpu", "claim/uid-1", buf,
                                                      sizeof(buf), &e),
                         (int)strlen("gpu.example.com-gpu_claim_uid-1.json"));
        assert_string_equal(buf, "gpu.example.com-gpu_claim_uid-1.json");
        assert_int_equal(kdev_cdi_transient_file_name("v.com/c", "", buf, sizeof(buf), &e),
                         -EINVAL);
        assert_string_equal(e.msg, "invalid CDI transient ID: empty");
        assert_int_equal(kdev_cdi_transient_file_name("v.com/c", "a b", buf, sizeof(buf), &e),
                         -EINVAL);
        assert_string_equal(e.msg, "invalid CDI transient ID \"a b\": character 0x20");
}

static void test_annotation_key(void **state)
{
        (void)state;
        char buf[128];
        struct kdev_err e = { 0 };
        assert_int_equal(kdev_cdi_annotation_key("nvidia-device-plugin", "GPU-1/2", buf,
                                                 sizeof(buf), &e),
                         (int)strlen("cdi.k8s.io/nvidia-device-plugin_GPU-1_2"));
        assert_string_equal(buf, "cdi.k8s.io/nvidia-device-plugin_GPU-1_2");

        char id[64];
        memset(id, 'd', 61);
        id[61] = '\0';
        /* "p_" + 61 = 63: the limit */
        assert_true(kdev_cdi_annotation_key("p", id, buf, sizeof(buf), &e) > 0);
        id[61] = 'd';
        id[62] = '\0';
        assert_int_equal(kdev_cdi_annotation_key("p", id, buf, sizeof(buf), &e), -EINVAL);
        assert_non_null(strstr(e.msg, "longer than 63 characters"));
        assert_int_equal(kdev_cdi_annotation_key("", "x", buf, sizeof(buf), &e), -EINVAL);
        assert_string_equal(e.msg, "invalid CDI annotation plugin name: empty");
        assert_int_equal(kdev_cdi_annotation_key("p", "x/", buf, sizeof(buf), &e), -EINVAL);
        assert_string_equal(e.msg,
                            "invalid CDI annotation name \"p_x_\": should end with a letter or digit");
        assert_int_equal(kdev_cdi_annotation_key("_p", "x", buf, sizeof(buf), &e), -EINVAL);
        assert_int_equal(kdev_cdi_annotation_key("p", "x:y", buf, sizeof(buf), &e), -EINVAL);
        assert_string_equal(e.msg, "invalid CDI annotation name \"p_x:y\": invalid character ':'");
}

/* Spec and device annotation keys follow Kubernetes' qualified-name rules. */
static void test_spec_annotation_keys(void **state)
{
        (void)state;
        struct kdev_cdi_spec *s = kdev_cdi_spec_new("vendor.com/gpu", NULL);
        assert_non_null(s);
        static const char *const ok[] = { "a", "vendor.com/key", "x.y-z/A_b.C", "k8s.io/a-1",
                                          "1/2" };
        for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++) {
                struct kdev_err e = { 0 };
                if (kdev_cdi_spec_set_annotation(s, ok[i], "v", &e) != 0)
                        fail_msg("%s: %s", ok[i], e.msg);
        }
        static const struct bad bad[] = {
                { "", "invalid annotation key: empty" },
                { "Vendor.com/key", "invalid annotation key \"Vendor.com/key\": prefix must be a "
                                    "lower-case DNS subdomain" },
                { "vendor..com/key", "invalid annotation key \"vendor..com/key\": prefix must be "
                                     "a lower-case DNS subdomain" },
                { "-v.com/key", "invalid annotation key \"-v.com/key\": prefix must be a "
                                "lower-case DNS subdomain" },
                { "v-.com/key", "invalid annotation key \"v-.com/key\": prefix must be a "
                                "lower-case DNS subdomain" },
                { "/key", "invalid annotation key \"/key\": prefix must be 1 to 253 characters" },
                { "v.com/", "annotation key \"v.com/\": invalid annotation name: empty" },
                { "v.com/a/b", "annotation key \"v.com/a/b\": invalid annotation name \"a/b\": "
                               "invalid character '/'" },
                { "key-", "annotation key \"key-\": invalid annotation name \"key-\": should end "
                          "with a letter or digit" },
        };
        for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
                struct kdev_err e = { 0 };
                assert_int_equal(kdev_cdi_spec_set_annotation(s, bad[i].in, "v", &e), -EINVAL);
                assert_string_equal(e.msg, bad[i].msg);
        }
        kdev_cdi_spec_free(s);
}

int main(void)
{
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_vendor_class),
                cmocka_unit_test(test_kind),
                cmocka_unit_test(test_device_name),
                cmocka_unit_test(test_qualified_name),
                cmocka_unit_test(test_parse_qualified_name),
                cmocka_unit_test(test_file_names),
                cmocka_unit_test(test_annotation_key),
                cmocka_unit_test(test_spec_annotation_keys),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
