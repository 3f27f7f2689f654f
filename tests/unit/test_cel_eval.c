/* The CEL evaluator of device selectors (src/cel/cel.h): the tables of
 * tests/data/cel (exact values and exact error texts, Kubernetes' own
 * selector examples among them), the compile error format, the cost limit,
 * programs reused across devices, and the bound on evaluation cost. */
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "cel/cel.h"

static struct kdev_cel_quantity q(const char *s)
{
        struct kdev_cel_quantity v;
        struct kdev_err err;
        if (kdev_cel_quantity_parse(s, &v, &err) < 0)
                fail_msg("quantity %s: %s", s, err.msg);
        return v;
}

#define ATTR_S(d, n, v) {.domain = d, .name = n, .type = KDEV_CEL_ATTR_STRING, .s = v}
#define ATTR_I(d, n, v) {.domain = d, .name = n, .type = KDEV_CEL_ATTR_INT, .i = v}
#define ATTR_V(d, n, v) {.domain = d, .name = n, .type = KDEV_CEL_ATTR_VERSION, .s = v}

static struct kdev_cel_attribute attrs_a[] = {
        ATTR_I(NULL, "index", 0),
        ATTR_S(NULL, "uuid", "gpu-18db0e85-99e9-c746-8531-ffeb86328b39"),
        ATTR_S(NULL, "model", "LATEST-GPU-MODEL"),
        ATTR_V(NULL, "driverVersion", "1.0.0"),
};
static struct kdev_cel_attribute attrs_b[] = {
        ATTR_S(NULL, "type", "mig"),
        ATTR_S(NULL, "profile", "1g.10gb"),
};
static struct kdev_cel_attribute attrs_c[] = {
        ATTR_S(NULL, "type", "gpu"),
        ATTR_S("gpu.nvidia.com", "productName", "NVIDIA H100 80GB HBM3"),
        ATTR_I(NULL, "index", 0),
        ATTR_V(NULL, "driverVersion", "550.54.15"),
        ATTR_S(NULL, "uuid", "GPU-4e1a0b4c"),
        ATTR_S(NULL, "family", "hopper"),
        ATTR_S("ext.example.com", "family", "hopper-ext"),
};
static struct kdev_cel_attribute attrs_e[] = {
        ATTR_I(NULL, "index", 0),
        ATTR_V(NULL, "driverVersion", "1.2.x"),
};
static struct kdev_cel_capacity caps[1];
static struct kdev_cel_device dev_a, dev_b, dev_c, dev_d, dev_e;

static void fixtures(void)
{
        caps[0] = (struct kdev_cel_capacity){.name = "memory", .value = q("80Gi")};
        dev_a = (struct kdev_cel_device){"gpu.example.com", attrs_a, 4, caps, 1, false};
        dev_b = (struct kdev_cel_device){"gpu.nvidia.com", attrs_b, 2, NULL, 0, false};
        dev_c = (struct kdev_cel_device){"gpu.nvidia.com", attrs_c, 7, caps, 1, false};
        dev_d = (struct kdev_cel_device){"gpu.example.com", attrs_a, 4, caps, 1, true};
        dev_e = (struct kdev_cel_device){"gpu.nvidia.com", attrs_e, 2, NULL, 0, false};
}

static const struct kdev_cel_device *device_named(const char *n)
{
        if (!strcmp(n, "A"))
                return &dev_a;
        if (!strcmp(n, "B"))
                return &dev_b;
        if (!strcmp(n, "C"))
                return &dev_c;
        if (!strcmp(n, "D"))
                return &dev_d;
        if (!strcmp(n, "E"))
                return &dev_e;
        if (!strcmp(n, "none"))
                return NULL;
        fail_msg("unknown device %s", n);
        return NULL;
}

static char *chomp(char *s)
{
        size_t n = strlen(s);
        while (n && (s[n - 1] == '\n' || s[n - 1] == '\r'))
                s[--n] = 0;
        return s;
}

/* the first line of a compile error after the fixed prefix */
static const char *compile_line(char *msg)
{
        static const char prefix[] = "compilation failed: ERROR: <input>:";
        char *nl = strchr(msg, '\n');
        if (nl)
                *nl = 0;
        return strncmp(msg, prefix, strlen(prefix)) ? msg : msg + strlen(prefix);
}

/* one case; returns 0 when it holds, else prints why */
static int run_case(const char *file, int line, const struct kdev_cel_device *dev, const char *expr,
                    const char *want)
{
        struct kdev_cel_program *p = NULL;
        struct kdev_err err = {0};
        char got[2048];
        int rc = kdev_cel_compile_any(expr, &p, &err);
        if (rc < 0) {
                snprintf(got, sizeof(got), "compile error: %s", compile_line(err.msg));
        } else {
                kdev_err_clear(&err);
                char val[1536];
                rc = kdev_cel_eval(p, dev, 0, NULL, val, sizeof(val), &err);
                if (rc < 0)
                        snprintf(got, sizeof(got), "error: %s", err.msg);
                else
                        snprintf(got, sizeof(got), "%s", val);
        }
        int bad = strcmp(got, want) != 0;
        if (bad)
                print_error("%s:%d: %s\n  want: %s\n  got:  %s\n", file, line, expr, want, got);
        /* a selector (bool or unknown result) gives the same through
         * kdev_cel_match: 1 for true, 0 for false, the same error */
        if (p && !bad) {
                struct kdev_cel_program *s = NULL;
                if (kdev_cel_compile(expr, &s, &err) == 0) {
                        int m = kdev_cel_match(s, dev, 0, NULL, &err);
                        int ok = !strcmp(want, "true") ? m == 1
                               : !strcmp(want, "false") ? m == 0
                               : !strncmp(want, "error: ", 7) ? m < 0 && !strcmp(err.msg, want + 7)
                                                             : m < 0 && strstr(err.msg, "could not be converted to bool");
                        if (!ok) {
                                print_error("%s:%d: %s: kdev_cel_match gave %d (%s), want %s\n", file, line, expr, m,
                                            m < 0 ? err.msg : "", want);
                                bad = 1;
                        }
                        kdev_cel_program_free(s);
                }
        }
        kdev_cel_program_free(p);
        return bad;
}

static void run_table(const char *name, int min_cases)
{
        char path[1024];
        snprintf(path, sizeof(path), "%s/tests/data/cel/%s", KDEV_SOURCE_DIR, name);
        FILE *f = fopen(path, "r");
        assert_non_null(f);
        char line[4096], expr[4096] = "";
        const struct kdev_cel_device *dev = NULL;
        int ln = 0, eline = 0, cases = 0, failed = 0;
        bool have_expr = false;
        while (fgets(line, sizeof(line), f)) {
                ln++;
                chomp(line);
                if (!have_expr && (line[0] == '#' || line[0] == 0))
                        continue;
                if (!have_expr && !strncmp(line, "@device ", 8)) {
                        dev = device_named(line + 8);
                        continue;
                }
                if (have_expr && !strncmp(line, "=> ", 3)) {
                        failed += run_case(name, eline, dev, expr, line + 3);
                        cases++;
                        have_expr = false;
                        expr[0] = 0;
                        continue;
                }
                if (!have_expr) {
                        eline = ln;
                        snprintf(expr, sizeof(expr), "%s", line);
                        have_expr = true;
                } else { /* a multi-line expression */
                        size_t n = strlen(expr);
                        snprintf(expr + n, sizeof(expr) - n, "\n%s", line);
                }
        }
        fclose(f);
        assert_false(have_expr);
        print_message("%s: %d cases, %d failed\n", name, cases, failed);
        assert_int_equal(failed, 0);
        assert_true(cases >= min_cases);
}

static void test_language_table(void **state)
{
        (void)state;
        run_table("language.txt", 150);
}

static void test_kubernetes_table(void **state)
{
        (void)state;
        run_table("kubernetes.txt", 45);
}

static void test_compile_error_format(void **state)
{
        (void)state;
        struct kdev_cel_program *p = (void *)1;
        struct kdev_err err;
        assert_int_equal(kdev_cel_compile("device.driver == 'a' &&\n  device.foo == 1", &p, &err), -EINVAL);
        assert_null(p);
        assert_string_equal(err.msg, "compilation failed: ERROR: <input>:2:10: undefined field 'foo'\n"
                                     " |   device.foo == 1\n"
                                     " | .........^");
        /* a selector must be bool or of unknown type */
        assert_int_equal(kdev_cel_compile("1 + 2", &p, &err), -EINVAL);
        assert_string_equal(err.msg, "must evaluate to bool or the unknown type, not int");
        assert_int_equal(kdev_cel_compile("device.attributes['d'].x", &p, &err), 0);
        kdev_cel_program_free(p);
        /* Kubernetes' length limit, before parsing */
        char *big = malloc(KDEV_CEL_MAX_EXPRESSION_LENGTH + 2);
        assert_non_null(big);
        memset(big, ' ', KDEV_CEL_MAX_EXPRESSION_LENGTH + 1);
        big[0] = '1';
        big[KDEV_CEL_MAX_EXPRESSION_LENGTH + 1] = 0;
        assert_int_equal(kdev_cel_compile(big, &p, &err), -EINVAL);
        assert_string_equal(err.msg, "expression too long: 10241 bytes, the limit is 10240");
        free(big);
        /* nesting beyond the parser's depth */
        char deep[700];
        memset(deep, '(', 300);
        strcpy(deep + 300, "true");
        memset(deep + 304, ')', 300);
        deep[604] = 0;
        assert_int_equal(kdev_cel_compile(deep, &p, &err), -EINVAL);
        assert_non_null(strstr(err.msg, "expression recursion limit exceeded: 250"));
}

static void test_match_results(void **state)
{
        (void)state;
        struct kdev_cel_program *p;
        struct kdev_err err;
        /* one program, many devices */
        assert_int_equal(kdev_cel_compile("device.driver == 'gpu.nvidia.com' && "
                                          "device.attributes['gpu.nvidia.com'].type == 'gpu'",
                                          &p, &err),
                         0);
        assert_int_equal(kdev_cel_match(p, &dev_a, 0, NULL, &err), 0);
        assert_int_equal(kdev_cel_match(p, &dev_b, 0, NULL, &err), 0);
        assert_int_equal(kdev_cel_match(p, &dev_c, 0, NULL, &err), 1);
        assert_int_equal(kdev_cel_match(p, &dev_c, 0, NULL, &err), 1);
        kdev_cel_program_free(p);
        /* an attribute of unknown type that is not a bool */
        assert_int_equal(kdev_cel_compile("device.attributes['gpu.nvidia.com'].type", &p, &err), 0);
        assert_int_equal(kdev_cel_match(p, &dev_c, 0, NULL, &err), -EINVAL);
        assert_string_equal(err.msg, "CEL result of type string could not be converted to bool");
        kdev_cel_program_free(p);
        /* the scheduler's hint, as the allocator appends it */
        assert_int_equal(kdev_cel_compile("device.attributes['gpu.example.com'].model == 'x'", &p, &err), 0);
        assert_int_equal(kdev_cel_match(p, &dev_b, 0, NULL, &err), -EINVAL);
        char full[2048];
        snprintf(full, sizeof(full), "%s%s", err.msg, KDEV_CEL_NO_SUCH_KEY_HINT);
        assert_string_equal(full, "no such key: model. consider using CEL optional chaining (.? followed by "
                                  "orValue()) or guarding the check with has() for optional fields");
        kdev_cel_program_free(p);
}

static void test_cost_limit(void **state)
{
        (void)state;
        struct kdev_cel_program *p;
        struct kdev_err err;
        uint64_t cost = 0;
        const char *sel = "device.attributes['gpu.nvidia.com'].productName.startsWith('NVIDIA') && "
                          "device.capacity['gpu.nvidia.com'].memory.compareTo(quantity('40Gi')) >= 0";
        assert_int_equal(kdev_cel_compile(sel, &p, &err), 0);
        assert_int_equal(kdev_cel_match(p, &dev_c, 0, &cost, &err), 1);
        /* per side: device 1, two selections and an index 1 each, the
         * calls 1 each (startsWith 1 + 1 for its 6 bytes; compareTo and
         * >=); quantity('40Gi') is a constant, parsed at compile time */
        assert_int_equal(cost, 12);
        /* a limit below that cancels, and || cannot absorb it */
        assert_int_equal(kdev_cel_match(p, &dev_c, 5, &cost, &err), -ECANCELED);
        assert_string_equal(err.msg, "operation cancelled: actual cost limit exceeded");
        kdev_cel_program_free(p);
        assert_int_equal(kdev_cel_compile("device.driver == 'x' || true", &p, &err), 0);
        assert_int_equal(kdev_cel_match(p, &dev_c, 1, &cost, &err), -ECANCELED);
        assert_int_equal(kdev_cel_match(p, &dev_c, 0, &cost, &err), 1);
        kdev_cel_program_free(p);
        assert_int_equal(KDEV_CEL_COST_LIMIT, 1000000);
}

/* Without comprehensions, the cost of one evaluation is bounded by the
 * expression: the costliest 10 KiB selector kdev's subset can write stays
 * far below Kubernetes' limit, and the evaluation ends. */
static void test_cost_bounded(void **state)
{
        (void)state;
        size_t max = KDEV_CEL_MAX_EXPRESSION_LENGTH;
        char *e = malloc(max + 1);
        assert_non_null(e);
        /* string concatenations that double... do not: each + copies both
         * sides, so a chain of n additions of the whole device string */
        size_t n = 0;
        n += (size_t)snprintf(e + n, max + 1 - n, "size(");
        while (n + 60 < max)
                n += (size_t)snprintf(e + n, max + 1 - n, "device.attributes['gpu.nvidia.com'].productName + ");
        n += (size_t)snprintf(e + n, max + 1 - n, "'') > 0");
        struct kdev_cel_program *p;
        struct kdev_err err;
        int rc = kdev_cel_compile(e, &p, &err);
        if (rc < 0)
                fail_msg("%s", err.msg);
        uint64_t cost = 0;
        assert_int_equal(kdev_cel_match(p, &dev_c, 0, &cost, &err), 1);
        print_message("costliest chain of %zu bytes: cost %llu of %llu\n", n, (unsigned long long)cost,
                      (unsigned long long)KDEV_CEL_COST_LIMIT);
        assert_true(cost > 1000);
        assert_true(cost < KDEV_CEL_COST_LIMIT / 10);
        kdev_cel_program_free(p);
        /* a list membership over a 10 KiB list literal */
        n = (size_t)snprintf(e, max + 1, "device.attributes['gpu.nvidia.com'].index in [");
        while (n + 10 < max)
                n += (size_t)snprintf(e + n, max + 1 - n, "1, ");
        snprintf(e + n, max + 1 - n, "0]");
        assert_int_equal(kdev_cel_compile(e, &p, &err), 0);
        assert_int_equal(kdev_cel_match(p, &dev_c, 0, &cost, &err), 1);
        assert_true(cost < KDEV_CEL_COST_LIMIT / 10);
        kdev_cel_program_free(p);
        free(e);
}

static void test_quantity_parse(void **state)
{
        (void)state;
        struct kdev_cel_quantity a, b;
        struct kdev_err err;
        assert_int_equal(kdev_cel_quantity_parse("1Gi", &a, &err), 0);
        assert_int_equal(kdev_cel_quantity_parse("1073741824", &b, &err), 0);
        assert_int_equal(kdev_cel_quantity_cmp(&a, &b), 0);
        assert_int_equal(kdev_cel_quantity_parse("0.2G", &b, &err), 0);
        assert_int_equal(kdev_cel_quantity_parse("200M", &a, &err), 0);
        assert_int_equal(kdev_cel_quantity_cmp(&a, &b), 0);
        assert_int_equal(kdev_cel_quantity_parse("1E", &a, &err), 0); /* exa */
        assert_int_equal(kdev_cel_quantity_parse("1e18", &b, &err), 0);
        assert_int_equal(kdev_cel_quantity_cmp(&a, &b), 0);
        assert_int_equal(kdev_cel_quantity_parse("-1m", &a, &err), 0);
        assert_int_equal(kdev_cel_quantity_parse("1n", &b, &err), 0);
        assert_int_equal(kdev_cel_quantity_cmp(&a, &b), -1);
        assert_int_equal(kdev_cel_quantity_parse("", &a, &err), -EINVAL);
        assert_int_equal(kdev_cel_quantity_parse("1.2.3", &a, &err), -EINVAL);
        assert_int_equal(kdev_cel_quantity_parse("1Ki2", &a, &err), -EINVAL);
        assert_string_equal(err.msg, "unable to parse quantity's suffix");
        assert_int_equal(kdev_cel_quantity_parse("1 Gi", &a, &err), -EINVAL);
        assert_int_equal(kdev_cel_quantity_parse("1e999", &a, &err), -EINVAL);
        assert_string_equal(err.msg, "quantity out of the range kdev supports");
}

/* one program, shared by threads: each evaluation keeps its state to
 * itself (run under ASan/UBSan; TSan builds would see no race either) */
struct shared {
        const struct kdev_cel_program *p;
        int ok;
};

static void *match_many(void *arg)
{
        struct shared *s = arg;
        struct kdev_err err;
        s->ok = 1;
        for (int i = 0; i < 2000; i++) {
                if (kdev_cel_match(s->p, &dev_c, 0, NULL, &err) != 1 || kdev_cel_match(s->p, &dev_b, 0, NULL, &err) != 0)
                        s->ok = 0;
        }
        return NULL;
}

static void test_threads_share_a_program(void **state)
{
        (void)state;
        struct kdev_cel_program *p;
        struct kdev_err err;
        assert_int_equal(kdev_cel_compile("device.driver == 'gpu.nvidia.com' && "
                                          "device.attributes['gpu.nvidia.com'].?productName.orValue('')"
                                          ".matches('H[0-9]+') && cel.bind(m, device.capacity['gpu.nvidia.com'], "
                                          "m.memory.isGreaterThan(quantity('1Gi')))",
                                          &p, &err),
                         0);
        struct shared s[4];
        pthread_t th[4];
        for (int i = 0; i < 4; i++) {
                s[i].p = p;
                assert_int_equal(pthread_create(&th[i], NULL, match_many, &s[i]), 0);
        }
        for (int i = 0; i < 4; i++) {
                pthread_join(th[i], NULL);
                assert_int_equal(s[i].ok, 1);
        }
        kdev_cel_program_free(p);
}

int main(void)
{
        fixtures();
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_language_table),  cmocka_unit_test(test_kubernetes_table),
                cmocka_unit_test(test_compile_error_format), cmocka_unit_test(test_match_results),
                cmocka_unit_test(test_cost_limit),      cmocka_unit_test(test_cost_bounded),
                cmocka_unit_test(test_quantity_parse),  cmocka_unit_test(test_threads_share_a_program),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
