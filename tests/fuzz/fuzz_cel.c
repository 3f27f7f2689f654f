/* libFuzzer target: the CEL evaluator of device selectors (cel/cel.h). The
 * input is an expression: it is compiled as a selector and as an
 * expression of any type, each program evaluated against two devices (an
 * NVIDIA GPU and no device) under a small and the default cost limit, and
 * printed; the input is also parsed as a quantity and as a semver. Checked:
 * a failure always says why, a selector's result is 1, 0 or an error, the
 * cost spent never passes the limit by more than one step's cost, and a
 * quantity parsed compares equal to itself. */
#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cel/cel.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const struct kdev_cel_attribute attrs[] = {
        {.name = "type", .type = KDEV_CEL_ATTR_STRING, .s = "gpu"},
        {.name = "productName", .type = KDEV_CEL_ATTR_STRING, .s = "NVIDIA H100 80GB HBM3"},
        {.name = "index", .type = KDEV_CEL_ATTR_INT, .i = 3},
        {.name = "mig", .type = KDEV_CEL_ATTR_BOOL, .b = true},
        {.name = "driverVersion", .type = KDEV_CEL_ATTR_VERSION, .s = "550.54.15"},
        {.domain = "ext.example.com", .name = "family", .type = KDEV_CEL_ATTR_STRING, .s = "hopper"},
};

static void run(const struct kdev_cel_program *p, const struct kdev_cel_device *dev, bool selector)
{
        static const uint64_t limits[] = {7, 0};
        for (size_t i = 0; i < 2; i++) {
                struct kdev_err err = {0};
                uint64_t cost = 0, limit = limits[i] ? limits[i] : KDEV_CEL_COST_LIMIT;
                int rc;
                if (selector) {
                        rc = kdev_cel_match(p, dev, limits[i], &cost, &err);
                        if (rc > 1)
                                abort();
                } else {
                        char buf[512];
                        rc = kdev_cel_eval(p, dev, limits[i], &cost, buf, sizeof(buf), &err);
                        if (rc == 0 && strlen(buf) >= sizeof(buf))
                                abort();
                }
                if (rc < 0 && !err.msg[0])
                        abort();
                if (rc == -ECANCELED) {
                        if (cost <= limit)
                                abort();
                } else if (cost > limit) {
                        abort();
                }
        }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
        if (size > KDEV_CEL_MAX_EXPRESSION_LENGTH + 16)
                return 0;
        char *expr = malloc(size + 1);
        if (!expr)
                return 0;
        memcpy(expr, data, size);
        expr[size] = 0;

        struct kdev_cel_capacity cap = {.name = "memory"};
        struct kdev_err err = {0};
        if (kdev_cel_quantity_parse("80Gi", &cap.value, &err) < 0)
                abort();
        struct kdev_cel_device gpu = {"gpu.nvidia.com", attrs, sizeof(attrs) / sizeof(attrs[0]), &cap, 1, false};

        for (int any = 0; any < 2; any++) {
                struct kdev_cel_program *p = NULL;
                int rc = any ? kdev_cel_compile_any(expr, &p, &err) : kdev_cel_compile(expr, &p, &err);
                if (rc < 0) {
                        if (p || !err.msg[0])
                                abort();
                        continue;
                }
                run(p, &gpu, !any);
                run(p, NULL, !any);
                kdev_cel_program_free(p);
        }

        struct kdev_cel_quantity q;
        if (kdev_cel_quantity_parse(expr, &q, &err) == 0 && kdev_cel_quantity_cmp(&q, &q) != 0)
                abort();
        struct kdev_cel_semver v;
        if (kdev_cel_semver_parse(expr, size, &v, &err) == 0 && kdev_cel_semver_cmp(&v, &v) != 0)
                abort();
        free(expr);
        return 0;
}
