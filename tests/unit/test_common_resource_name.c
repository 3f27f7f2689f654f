/* kdev_resource_name_check (common/resource_name.h): kubelet's
 * IsExtendedResourceName rules (k8s.io/kubernetes pkg/apis/core/v1/helper),
 * with the exact error of each rule. common alone: the device model's users
 * and kdevctl's stand-in kubelet share this one rule. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "common/resource_name.h"

static void test_valid_names(void **state)
{
        (void)state;
        static const char *const ok[] = {
                "example.com/fuse",
                "vendor.com/gpu",
                "nvidia.com/mig-1g.10gb",
                "a/b",
                "x-1.y-2/A_b.c-D",
                "example.com/0",
                "9.9/9",
        };
        for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++) {
                struct kdev_err e;
                kdev_err_clear(&e);
                int rc = kdev_resource_name_check(ok[i], &e);
                if (rc != 0)
                        fail_msg("%s: %s", ok[i], e.msg);
        }
}

struct bad {
        const char *name;
        const char *msg;
};

static void test_invalid_names(void **state)
{
        (void)state;
        char long_domain[300], long_part[100], max_domain[300], max_part[100];
        /* 245 characters of domain: one more than 253 - strlen("requests.") */
        memset(long_domain, 'a', 245);
        strcpy(long_domain + 245, "/x");
        memset(max_domain, 'a', 244);
        strcpy(max_domain + 244, "/x");
        strcpy(long_part, "e.com/");
        memset(long_part + 6, 'b', 64);
        long_part[70] = '\0';
        strcpy(max_part, "e.com/");
        memset(max_part + 6, 'b', 63);
        max_part[69] = '\0';

        assert_int_equal(kdev_resource_name_check(max_domain, NULL), 0);
        assert_int_equal(kdev_resource_name_check(max_part, NULL), 0);

        char long_domain_msg[600], long_part_msg[300];
        snprintf(long_domain_msg, sizeof(long_domain_msg),
                 "resource name \"%s\" is invalid: the domain must be at most 244 characters, "
                 "got 245",
                 long_domain);
        snprintf(long_part_msg, sizeof(long_part_msg),
                 "resource name \"%s\" is invalid: the name after \"/\" must be at most 63 "
                 "characters, got 64",
                 long_part);

        const struct bad bad[] = {
                {"gpu", "resource name \"gpu\" is invalid: it must have the form <domain>/<name>"},
                {"", "resource name \"\" is invalid: it must have the form <domain>/<name>"},
                {"kubernetes.io/gpu",
                 "resource name \"kubernetes.io/gpu\" is invalid: the \"kubernetes.io\" domain is "
                 "reserved for native resources"},
                {"foo.kubernetes.io/x",
                 "resource name \"foo.kubernetes.io/x\" is invalid: the \"kubernetes.io\" domain "
                 "is reserved for native resources"},
                {"requests.example.com/gpu",
                 "resource name \"requests.example.com/gpu\" is invalid: it must not start with "
                 "\"requests.\""},
                {"example.com/a/b",
                 "resource name \"example.com/a/b\" is invalid: it must contain exactly one \"/\""},
                {"/gpu", "resource name \"/gpu\" is invalid: the domain before \"/\" is empty"},
                {long_domain, long_domain_msg},
                {"Vendor.com/gpu",
                 "resource name \"Vendor.com/gpu\" is invalid: the domain \"Vendor.com\" must be "
                 "a DNS-1123 subdomain (lower-case letters, digits, '-' and '.', each label "
                 "starting and ending with a letter or digit)"},
                {"a..b/gpu",
                 "resource name \"a..b/gpu\" is invalid: the domain \"a..b\" must be a DNS-1123 "
                 "subdomain (lower-case letters, digits, '-' and '.', each label starting and "
                 "ending with a letter or digit)"},
                {"-a.com/gpu",
                 "resource name \"-a.com/gpu\" is invalid: the domain \"-a.com\" must be a "
                 "DNS-1123 subdomain (lower-case letters, digits, '-' and '.', each label "
                 "starting and ending with a letter or digit)"},
                {"a-.com/gpu",
                 "resource name \"a-.com/gpu\" is invalid: the domain \"a-.com\" must be a "
                 "DNS-1123 subdomain (lower-case letters, digits, '-' and '.', each label "
                 "starting and ending with a letter or digit)"},
                {"a_b.com/gpu",
                 "resource name \"a_b.com/gpu\" is invalid: the domain \"a_b.com\" must be a "
                 "DNS-1123 subdomain (lower-case letters, digits, '-' and '.', each label "
                 "starting and ending with a letter or digit)"},
                {"example.com/",
                 "resource name \"example.com/\" is invalid: the name after \"/\" is empty"},
                {long_part, long_part_msg},
                {"example.com/gpu_",
                 "resource name \"example.com/gpu_\" is invalid: the name \"gpu_\" must consist "
                 "of letters, digits, '-', '_' or '.', and start and end with a letter or digit"},
                {"example.com/-gpu",
                 "resource name \"example.com/-gpu\" is invalid: the name \"-gpu\" must consist "
                 "of letters, digits, '-', '_' or '.', and start and end with a letter or digit"},
                {"example.com/g pu",
                 "resource name \"example.com/g pu\" is invalid: the name \"g pu\" must consist "
                 "of letters, digits, '-', '_' or '.', and start and end with a letter or digit"},
        };
        for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
                struct kdev_err e;
                kdev_err_clear(&e);
                int rc = kdev_resource_name_check(bad[i].name, &e);
                assert_int_equal(rc, -EINVAL);
                assert_int_equal(e.code, EINVAL);
                assert_string_equal(e.msg, bad[i].msg);
        }
        /* NULL is treated as the empty name; a NULL err is allowed. */
        assert_int_equal(kdev_resource_name_check(NULL, NULL), -EINVAL);
}

int main(void)
{
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_valid_names),
                cmocka_unit_test(test_invalid_names),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
