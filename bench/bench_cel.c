/* Benchmark of the CEL evaluator of device selectors (src/cel/cel.h).
 *
 * Usage: bench_cel [ROUNDS]
 *
 * 128 devices as a structured allocator sees them (driver gpu.nvidia.com,
 * a third whole H100s, a third A100s, a third MIG devices of each; the
 * attributes type, productName, index, uuid, driverVersion (version) and
 * one of another domain; capacity memory), and five typical selectors:
 * the DeviceClass driver check, NVIDIA's gpu.nvidia.com class, a product
 * and memory selector with the quantity library, a driver version with the
 * semver library, and a regular expression on the product name. For each:
 *   - cel: kdev_cel_match() of the compiled selector (compiled once),
 *     nanoseconds per device evaluation, median over ROUNDS (default 201)
 *     passes over the 128 devices;
 *   - C: the same condition written by hand in C over the same device
 *     records (the same attribute lookups by domain and name, quantity and
 *     semver compared with the library's exact comparisons, the regex
 *     compiled once), as the baseline;
 *   - the ratio, the number of matching devices (both must agree: the
 *     program exits 1 otherwise), and the compile time of the selector.
 * Target: <= 1 us per device evaluation for these selectors (issue 19). */
#include <regex.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench_clock.h"
#include "cel/cel.h"

#define NDEV 128
#define NATTR 6

static struct kdev_cel_attribute attrs[NDEV][NATTR];
static struct kdev_cel_capacity caps[NDEV][1];
static struct kdev_cel_device devs[NDEV];
static char uuids[NDEV][48];
static regex_t re_product;
static struct kdev_cel_quantity q40;
static struct kdev_cel_semver v550;


static void setup(void)
{
        static const char *const products[] = {"NVIDIA H100 80GB HBM3", "NVIDIA A100-SXM4-40GB",
                                               "NVIDIA H100 80GB HBM3"};
        static const char *const mem[] = {"80Gi", "40Gi", "10Gi"};
        for (int i = 0; i < NDEV; i++) {
                int k = i % 3;
                snprintf(uuids[i], sizeof(uuids[i]), "GPU-%08x-0000-0000-0000-%012d", (unsigned)i * 2654435761u, i);
                struct kdev_cel_attribute *a = attrs[i];
                a[0] = (struct kdev_cel_attribute){.name = "type", .type = KDEV_CEL_ATTR_STRING,
                                                   .s = k == 2 ? "mig" : "gpu"};
                a[1] = (struct kdev_cel_attribute){.name = "productName", .type = KDEV_CEL_ATTR_STRING,
                                                   .s = products[k]};
                a[2] = (struct kdev_cel_attribute){.name = "index", .type = KDEV_CEL_ATTR_INT, .i = i};
                a[3] = (struct kdev_cel_attribute){.name = "uuid", .type = KDEV_CEL_ATTR_STRING, .s = uuids[i]};
                a[4] = (struct kdev_cel_attribute){.name = "driverVersion", .type = KDEV_CEL_ATTR_VERSION,
                                                   .s = i % 4 ? "550.54.15" : "535.161.8"};
                a[5] = (struct kdev_cel_attribute){.domain = "resource.kubernetes.io", .name = "pcieRoot",
                                                   .type = KDEV_CEL_ATTR_STRING, .s = "pci0000:00"};
                caps[i][0].name = "memory";
                if (kdev_cel_quantity_parse(mem[k], &caps[i][0].value, NULL) < 0)
                        exit(2);
                devs[i] = (struct kdev_cel_device){"gpu.nvidia.com", attrs[i], NATTR, caps[i], 1, false};
        }
        if (regcomp(&re_product, "H(100|200)", REG_EXTENDED | REG_NOSUB) != 0 ||
            kdev_cel_quantity_parse("40Gi", &q40, NULL) < 0 || kdev_cel_semver_parse("550.0.0", 7, &v550, NULL) < 0)
                exit(2);
}

/* the hand-written peer: the lookups the selector makes, in C */
static const struct kdev_cel_attribute *attr(const struct kdev_cel_device *d, const char *dom, const char *name)
{
        for (size_t i = 0; i < d->n_attributes; i++) {
                const struct kdev_cel_attribute *a = &d->attributes[i];
                if (!strcmp(a->name, name) && !strcmp(a->domain ? a->domain : d->driver, dom))
                        return a;
        }
        return NULL;
}

static const struct kdev_cel_capacity *cap(const struct kdev_cel_device *d, const char *dom, const char *name)
{
        for (size_t i = 0; i < d->n_capacity; i++) {
                const struct kdev_cel_capacity *c = &d->capacity[i];
                if (!strcmp(c->name, name) && !strcmp(c->domain ? c->domain : d->driver, dom))
                        return c;
        }
        return NULL;
}

static int c_driver(const struct kdev_cel_device *d)
{
        return !strcmp(d->driver, "gpu.nvidia.com");
}

static int c_class(const struct kdev_cel_device *d)
{
        if (strcmp(d->driver, "gpu.nvidia.com"))
                return 0;
        const struct kdev_cel_attribute *a = attr(d, "gpu.nvidia.com", "type");
        return a && a->type == KDEV_CEL_ATTR_STRING ? !strcmp(a->s, "gpu") : -1;
}

static int c_product_memory(const struct kdev_cel_device *d)
{
        const struct kdev_cel_attribute *a = attr(d, "gpu.nvidia.com", "productName");
        if (!a)
                return -1;
        if (strcmp(a->s, "NVIDIA H100 80GB HBM3"))
                return 0;
        const struct kdev_cel_capacity *c = cap(d, "gpu.nvidia.com", "memory");
        return c ? kdev_cel_quantity_cmp(&c->value, &q40) >= 0 : -1;
}

static int c_version(const struct kdev_cel_device *d)
{
        const struct kdev_cel_attribute *a = attr(d, "gpu.nvidia.com", "driverVersion");
        struct kdev_cel_semver v;
        if (!a || kdev_cel_semver_parse(a->s, strlen(a->s), &v, NULL) < 0)
                return -1;
        return kdev_cel_semver_cmp(&v, &v550) >= 0;
}

static int c_regex(const struct kdev_cel_device *d)
{
        const struct kdev_cel_attribute *a = attr(d, "gpu.nvidia.com", "productName");
        return a ? regexec(&re_product, a->s, 0, NULL, 0) == 0 : -1;
}

static const struct {
        const char *name, *expr;
        int (*peer)(const struct kdev_cel_device *);
} cases[] = {
        {"driver", "device.driver == 'gpu.nvidia.com'", c_driver},
        {"class gpu.nvidia.com",
         "device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == 'gpu'", c_class},
        {"product + memory",
         "device.attributes['gpu.nvidia.com'].productName == 'NVIDIA H100 80GB HBM3' && "
         "device.capacity['gpu.nvidia.com'].memory.compareTo(quantity('40Gi')) >= 0",
         c_product_memory},
        {"driverVersion semver",
         "device.attributes['gpu.nvidia.com'].driverVersion.compareTo(semver('550.0.0')) >= 0", c_version},
        {"productName matches", "device.attributes['gpu.nvidia.com'].productName.matches('H(100|200)')", c_regex},
};

int main(int argc, char **argv)
{
        int rounds = argc > 1 ? atoi(argv[1]) : 201;
        if (rounds < 1)
                rounds = 1;
        setup();
        double *t_cel = calloc((size_t)rounds, sizeof(double)), *t_c = calloc((size_t)rounds, sizeof(double));
        if (!t_cel || !t_c)
                return 2;
        int bad = 0;
        printf("CEL device selector evaluation, %d devices, median of %d passes (ns per device)\n", NDEV, rounds);
        printf("%-22s %10s %10s %8s %8s %12s %s\n", "selector", "cel ns", "C ns", "cel/C", "matched", "compile us",
               "target <= 1000 ns");
        for (size_t s = 0; s < sizeof(cases) / sizeof(cases[0]); s++) {
                struct kdev_cel_program *p;
                struct kdev_err err;
                double c0 = now_ns();
                for (int k = 0; k < 100; k++) {
                        if (kdev_cel_compile(cases[s].expr, &p, &err) < 0) {
                                fprintf(stderr, "%s: %s\n", cases[s].name, err.msg);
                                return 1;
                        }
                        if (k < 99)
                                kdev_cel_program_free(p);
                }
                double compile_us = (now_ns() - c0) / 100 / 1e3;
                int m_cel = 0, m_c = 0;
                volatile int sink = 0;
                for (int r = 0; r < rounds; r++) {
                        double t0 = now_ns();
                        int m = 0;
                        for (int i = 0; i < NDEV; i++)
                                m += kdev_cel_match(p, &devs[i], 0, NULL, &err) == 1;
                        double t1 = now_ns();
                        int mc = 0;
                        for (int i = 0; i < NDEV; i++)
                                mc += cases[s].peer(&devs[i]) == 1;
                        double t2 = now_ns();
                        t_cel[r] = (t1 - t0) / NDEV;
                        t_c[r] = (t2 - t1) / NDEV;
                        m_cel = m;
                        m_c = mc;
                        sink += m;
                }
                (void)sink;
                qsort(t_cel, (size_t)rounds, sizeof(double), dbl_cmp);
                qsort(t_c, (size_t)rounds, sizeof(double), dbl_cmp);
                double mc = t_cel[rounds / 2], mp = t_c[rounds / 2];
                printf("%-22s %10.1f %10.1f %8.2f %4d/%-3d %12.2f %s\n", cases[s].name, mc, mp, mp > 0 ? mc / mp : 0,
                       m_cel, NDEV, compile_us, mc <= 1000 ? "met" : "NOT MET");
                if (m_cel != m_c) {
                        fprintf(stderr, "%s: cel matched %d, C matched %d\n", cases[s].name, m_cel, m_c);
                        bad = 1;
                }
                kdev_cel_program_free(p);
        }
        regfree(&re_product);
        free(t_cel);
        free(t_c);
        return bad;
}
