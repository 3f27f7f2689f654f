/* Benchmark of the structured allocator (src/sched/allocator.h).
 *
 * Usage: bench_sched [ROUNDS]
 *
 * One node with 128 devices of driver gpu.nvidia.com in two ResourceSlices
 * of one pool, with the attributes and capacities kdev-dra-plugin publishes:
 * 64 whole GPUs (a half H100 80GB, a half A100 40GB) and 64 MIG devices
 * (1g.10gb, 2g.20gb, 3g.40gb, 7g.80gb), the first 24 GPUs allocated to other
 * claims; NVIDIA's DeviceClasses gpu.nvidia.com and mig.nvidia.com; and one
 * claim of 4 requests:
 *   gpu  2 whole H100s with at least 40Gi (product and quantity selector)
 *   mig  one 1g.10gb MIG device
 *   big  firstAvailable: an H200 (none on the node), else an A100
 *   same one more whole GPU, matchAttribute productName with gpu
 * Figures, median over ROUNDS (default 201) fresh allocators:
 *   - allocate: kdev_sched_allocate() of the claim (request parsing, selector
 *     compilation, the search with the selectors evaluated on the devices it
 *     visits, the AllocationResult);
 *   - floor: the claim's and the classes' selectors compiled and evaluated
 *     once on every device (kdev_cel_match(), what any allocator evaluating
 *     these selectors over these devices spends at least), the peer;
 *   - cannot allocate: the same claim with the gpu request asking for an
 *     H200, answered with its explanation;
 *   - build: kdev_sched_new() over the slices (the pools and device records
 *     from the JSON, the allocated state), paid once per allocator.
 * Target: allocate <= 1 ms (issue 19). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <jansson.h>

#include "bench_clock.h"
#include "cel/cel.h"
#include "sched/allocator.h"

#define NDEV 128


static double median(double *v, int n)
{
        qsort(v, (size_t)n, sizeof(*v), dbl_cmp);
        return v[n / 2];
}

static json_t *device(int i)
{
        static const char *const mig[] = {"1g.10gb", "2g.20gb", "3g.40gb", "7g.80gb"};
        static const char *const mig_mem[] = {"9984Mi", "20096Mi", "40448Mi", "81152Mi"};
        char name[64], uuid[64], bus[32];
        bool whole = i < 64, h100 = (i % 64) < 32;
        int gpu = whole ? i : (i - 64) / 4;
        snprintf(uuid, sizeof(uuid), "GPU-%08x-0000-4000-8000-%012d", (unsigned)i * 2654435761u, i);
        snprintf(bus, sizeof(bus), "0000:%02x:00.0", gpu + 16);
        if (whole)
                snprintf(name, sizeof(name), "gpu-%d", i);
        else
                snprintf(name, sizeof(name), "gpu-%d-mig-%d", 64 + gpu, i % 4);
        json_t *a = json_pack(
                "{s:{s:s}, s:{s:s}, s:{s:s}, s:{s:s}, s:{s:s}, s:{s:s}, s:{s:i}}", "type", "string",
                whole ? "gpu" : "mig", "uuid", "string", uuid, "productName", "string",
                whole ? (h100 ? "NVIDIA H100 80GB HBM3" : "NVIDIA A100-SXM4-40GB")
                      : "NVIDIA H100 80GB HBM3",
                "architecture", "string", h100 || !whole ? "Hopper" : "Ampere", "driverVersion",
                "version", "550.90.7", "pcieBusID", "string", bus, "index", "int", gpu);
        if (!whole)
                json_object_set_new(a, "profile", json_pack("{s:s}", "string", mig[i % 4]));
        const char *mem = whole ? (h100 ? "81559Mi" : "40960Mi") : mig_mem[i % 4];
        return json_pack("{s:s, s:o, s:{s:{s:s}, s:{s:s}}}", "name", name, "attributes", a,
                         "capacity", "memory", "value", mem, "multiprocessors", "value", "132");
}

static json_t *slices(void)
{
        json_t *out = json_array();
        for (int s = 0; s < 2; s++) {
                json_t *devs = json_array();
                for (int i = s * 64; i < (s + 1) * 64; i++)
                        json_array_append_new(devs, device(i));
                char name[32];
                snprintf(name, sizeof(name), "node-a-gpu.nvidia.com-%d", s);
                json_array_append_new(
                        out, json_pack("{s:{s:s}, s:{s:s, s:s, s:{s:s, s:i, s:i}, s:o}}", "metadata",
                                       "name", name, "spec", "driver", "gpu.nvidia.com", "nodeName",
                                       "node-a", "pool", "name", "node-a", "generation", 1,
                                       "resourceSliceCount", 2, "devices", devs));
        }
        return out;
}

static const char CLASS_GPU[] =
        "device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == 'gpu'";
static const char CLASS_MIG[] =
        "device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == 'mig'";
static const char SEL_H100[] =
        "device.attributes['gpu.nvidia.com'].productName == 'NVIDIA H100 80GB HBM3' && "
        "device.capacity['gpu.nvidia.com'].memory.compareTo(quantity('40Gi')) >= 0";
static const char SEL_MIG[] = "device.attributes['gpu.nvidia.com'].profile == '1g.10gb'";
static const char SEL_H200[] = "device.attributes['gpu.nvidia.com'].productName == 'NVIDIA H200'";
static const char SEL_A100[] = "device.attributes['gpu.nvidia.com'].productName.startsWith('NVIDIA A100')";

static json_t *classes(void)
{
        return json_pack("[{s:{s:s}, s:{s:[{s:{s:s}}]}}, {s:{s:s}, s:{s:[{s:{s:s}}]}}]", "metadata",
                         "name", "gpu.nvidia.com", "spec", "selectors", "cel", "expression",
                         CLASS_GPU, "metadata", "name", "mig.nvidia.com", "spec", "selectors",
                         "cel", "expression", CLASS_MIG);
}

static json_t *sel(const char *e)
{
        return json_pack("[{s:{s:s}}]", "cel", "expression", e);
}

static json_t *claim(const char *gpu_selector)
{
        json_t *reqs = json_pack(
                "[{s:s, s:{s:s, s:i, s:o}}, {s:s, s:{s:s, s:o}},"
                " {s:s, s:[{s:s, s:s, s:o}, {s:s, s:s, s:o}]}, {s:s, s:{s:s}}]",
                "name", "gpu", "exactly", "deviceClassName", "gpu.nvidia.com", "count", 2,
                "selectors", sel(gpu_selector), "name", "mig", "exactly", "deviceClassName",
                "mig.nvidia.com", "selectors", sel(SEL_MIG), "name", "big", "firstAvailable",
                "name", "h200", "deviceClassName", "gpu.nvidia.com", "selectors", sel(SEL_H200),
                "name", "a100", "deviceClassName", "gpu.nvidia.com", "selectors", sel(SEL_A100),
                "name", "same", "exactly", "deviceClassName", "gpu.nvidia.com");
        return json_pack("{s:{s:s, s:s, s:s}, s:{s:{s:o, s:[{s:[s, s], s:s}]}}}", "metadata", "name",
                         "bench", "namespace", "default", "uid", "uid-bench", "spec", "devices",
                         "requests", reqs, "constraints", "requests", "gpu", "same",
                         "matchAttribute", "gpu.nvidia.com/productName");
}

static json_t *allocated(void)
{
        json_t *results = json_array();
        for (int i = 0; i < 24; i++) {
                char name[16];
                snprintf(name, sizeof(name), "gpu-%d", i);
                json_array_append_new(results,
                                      json_pack("{s:s, s:s, s:s, s:s}", "request", "gpu", "driver",
                                                "gpu.nvidia.com", "pool", "node-a", "device", name));
        }
        return json_pack("[{s:{s:s, s:s}, s:{s:{s:{s:o}}}}]", "metadata", "name", "others",
                         "namespace", "default", "status", "allocation", "devices", "results",
                         results);
}

/* The peer: every selector of the claim and its classes on every device. */
static int floor_pass(const struct kdev_cel_device *devs, double *ns)
{
        const char *exprs[] = {CLASS_GPU, CLASS_MIG, SEL_H100, SEL_MIG, SEL_H200, SEL_A100};
        double t0 = now_ns();
        int matched = 0;
        for (size_t e = 0; e < sizeof(exprs) / sizeof(exprs[0]); e++) {
                struct kdev_cel_program *p;
                if (kdev_cel_compile(exprs[e], &p, NULL) < 0)
                        return -1;
                for (int i = 0; i < NDEV; i++)
                        matched += kdev_cel_match(p, &devs[i], 0, NULL, NULL) == 1;
                kdev_cel_program_free(p);
        }
        *ns = now_ns() - t0;
        return matched;
}

int main(int argc, char **argv)
{
        int rounds = argc > 1 ? atoi(argv[1]) : 201;
        if (rounds < 1)
                rounds = 1;
        json_t *sl = slices(), *cl = classes(), *c = claim(SEL_H100), *al = allocated();
        json_t *bad = claim(SEL_H200); /* cannot be allocated: explained */
        struct kdev_sched_input in = {.node = "node-a", .slices = sl, .classes = cl, .allocated = al};

        /* the floor's device records, as the allocator builds them */
        static struct kdev_cel_attribute attrs[NDEV][8];
        static struct kdev_cel_capacity caps[NDEV][2];
        static struct kdev_cel_device devs[NDEV];
        for (int i = 0; i < NDEV; i++) {
                json_t *d = json_array_get(json_object_get(json_object_get(json_array_get(sl, (size_t)i / 64),
                                                                           "spec"),
                                                           "devices"),
                                           (size_t)i % 64);
                size_t n = 0;
                const char *k;
                json_t *v;
                json_object_foreach(json_object_get(d, "attributes"), k, v) {
                        json_t *x;
                        struct kdev_cel_attribute *a = &attrs[i][n++];
                        a->name = k;
                        if ((x = json_object_get(v, "int"))) {
                                a->type = KDEV_CEL_ATTR_INT;
                                a->i = json_integer_value(x);
                        } else if ((x = json_object_get(v, "version"))) {
                                a->type = KDEV_CEL_ATTR_VERSION;
                                a->s = json_string_value(x);
                        } else {
                                a->type = KDEV_CEL_ATTR_STRING;
                                a->s = json_string_value(json_object_get(v, "string"));
                        }
                }
                size_t m = 0;
                json_object_foreach(json_object_get(d, "capacity"), k, v) {
                        caps[i][m].name = k;
                        kdev_cel_quantity_parse(json_string_value(json_object_get(v, "value")),
                                                &caps[i][m++].value, NULL);
                }
                devs[i] = (struct kdev_cel_device){"gpu.nvidia.com", attrs[i], n, caps[i], m, false};
        }

        double *t_alloc = calloc((size_t)rounds, sizeof(double));
        double *t_build = calloc((size_t)rounds, sizeof(double));
        double *t_floor = calloc((size_t)rounds, sizeof(double));
        double *t_explain = calloc((size_t)rounds, sizeof(double));
        if (!t_alloc || !t_build || !t_floor || !t_explain)
                return 2;
        char *first = NULL, *explanation = NULL;
        int floor_matched = 0;
        for (int r = 0; r < rounds; r++) {
                struct kdev_sched *s;
                struct kdev_err err;
                double t0 = now_ns();
                if (kdev_sched_new(&in, &s, &err) < 0) {
                        fprintf(stderr, "kdev_sched_new: %s\n", err.msg);
                        return 1;
                }
                double t1 = now_ns();
                json_t *a = NULL;
                int rc = kdev_sched_allocate(s, c, &a, NULL, &err);
                double t2 = now_ns();
                if (rc != 1) {
                        fprintf(stderr, "allocate: %d %s\n", rc, rc < 0 ? err.msg : "cannot allocate");
                        return 1;
                }
                json_t *why = NULL;
                if (kdev_sched_allocate(s, bad, NULL, &why, &err) != 0) {
                        fprintf(stderr, "the H200 claim was allocated\n");
                        return 1;
                }
                t_explain[r] = now_ns() - t2;
                if (r == 0)
                        explanation = strdup(json_string_value(json_array_get(why, 0)));
                json_decref(why);
                t_build[r] = t1 - t0;
                t_alloc[r] = t2 - t1;
                if (!first)
                        first = json_dumps(json_object_get(json_object_get(a, "devices"), "results"),
                                           JSON_COMPACT);
                json_decref(a);
                kdev_sched_free(s);
                floor_matched = floor_pass(devs, &t_floor[r]);
                if (floor_matched < 0)
                        return 1;
        }
        double alloc_us = median(t_alloc, rounds) / 1e3, build_us = median(t_build, rounds) / 1e3;
        double floor_us = median(t_floor, rounds) / 1e3, explain_us = median(t_explain, rounds) / 1e3;
        printf("Structured allocation of a 4-request claim over %d devices (24 in use), median of %d rounds\n",
               NDEV, rounds);
        printf("%-48s %12s\n", "", "us");
        printf("%-48s %12.1f   target <= 1000 us\n", "allocate (kdev_sched_allocate)", alloc_us);
        printf("%-48s %12.1f   (%d matches)\n", "floor: 6 selectors x 128 devices, compiled + run",
               floor_us, floor_matched);
        printf("%-48s %12.1f\n", "cannot allocate (H200 claim), with explanation", explain_us);
        printf("%-48s %12.1f\n", "build (kdev_sched_new: pools, devices, state)", build_us);
        printf("allocate / floor: %.2f\n", alloc_us / floor_us);
        printf("results: %s\n", first ? first : "?");
        printf("explanation: %s\n", explanation ? explanation : "?");
        free(first);
        free(explanation);
        free(t_explain);
        json_decref(bad);
        free(t_alloc);
        free(t_build);
        free(t_floor);
        json_decref(sl);
        json_decref(cl);
        json_decref(c);
        json_decref(al);
        return alloc_us <= 1000 ? 0 : 1;
}
