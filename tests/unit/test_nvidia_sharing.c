/* NVIDIA time-slicing (sharing.h): replica IDs, capacity, copied health,
 * NUMA and devinfo, rename / renameByDefault / devices, resources absent from
 * the node, errors; the Allocate payload of replicas (each physical device
 * once) and failRequestsGreaterThanOne with NVIDIA's text (NVIDIA
 * api/config/v1/replicas.go, internal/rm/rm.go); the 4 MiB ListAndWatch limit of the
 * runtime with huge replica counts. */
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
#include <uv.h>

#include "generic/generic.h"
#include "nvidia/config.h"
#include "nvidia/isolation.h"
#include "nvidia/nvidia_internal.h"
#include "nvidia/resources.h"
#include "nvidia/sharing.h"
#include "plugin/allocate.h"
#include "plugin/runtime.h"
#include "plugin/service.h"

#include "nvidia_config_fixture.h"

#define MAX_GPUS 16

struct env {
        struct kdev_nvidia_config cfg;
        struct kdev_resource_set set;
        struct kdev_gpu gpus[MAX_GPUS];
        char warns[16][512];
        size_t n_warns;
        struct kdev_err err;
};

static void gpu_uuid(char *buf, size_t size, unsigned i)
{
        snprintf(buf, size, "GPU-%08x-0000-4000-8000-%012x", 0xa0u + i, i);
}

static void collect(void *arg, const char *msg)
{
        struct env *e = arg;
        if (e->n_warns < 16)
                snprintf(e->warns[e->n_warns++], sizeof(e->warns[0]), "%s", msg);
}


/* Compute capability of the GPUs make() builds (sharing.mps's replica
 * limit). */
static int cc_major = 9, cc_minor = 0;

/* Parses |yaml|, builds |n_gpus| GPUs (GPU 1 faulted when |fault1|; NUMA node
 * i/2) and applies the sharing. Returns the sharing's result. */
static int make(struct env *e, const char *yaml, size_t n_gpus, bool fault1)
{
        memset(e, 0, sizeof(*e));
        assert_int_equal(kdev_nvidia_config_init(&e->cfg, &e->err), 0);
        if (parse_file(&e->cfg, "ts.yaml", yaml, &e->err) != 0)
                fail_msg("%s", e->err.msg);
        if (kdev_nvidia_config_finish(&e->cfg, true, &e->err) != 0)
                fail_msg("%s", e->err.msg);
        for (size_t i = 0; i < n_gpus; i++) {
                struct kdev_gpu *gp = &e->gpus[i];
                gp->index = (unsigned)i;
                gpu_uuid(gp->uuid, sizeof(gp->uuid), (unsigned)i);
                gp->minor = (unsigned)i + 10;
                gp->numa_node = (int)i / 2;
                gp->fault = fault1 && i == 1 ? NVML_ERROR_GPU_IS_LOST : NVML_SUCCESS;
                gp->cc_major = cc_major;
                gp->cc_minor = cc_minor;
                gp->memory_total = 80ull << 30;
        }
        struct kdev_gpu_set gs = {.gpus = e->gpus, .n_gpus = n_gpus};
        struct kdev_nvidia_build_options bo = {.warn = collect, .warn_arg = e};
        if (kdev_nvidia_build(&gs, &e->cfg, &bo, &e->set, &e->err) != 0)
                fail_msg("%s", e->err.msg);
        return kdev_nvidia_apply_sharing(&e->set, &e->cfg, collect, e, &e->err);
}

static void done(struct env *e)
{
        kdev_resource_set_clear(&e->set);
        kdev_nvidia_config_clear(&e->cfg);
}

static const struct kdev_resource *res(const struct env *e, const char *name)
{
        for (size_t i = 0; i < e->set.n_resources; i++) {
                if (strcmp(e->set.resources[i].name, name) == 0)
                        return &e->set.resources[i];
        }
        fail_msg("no resource %s", name);
        return NULL;
}

/* The device IDs of |r| joined with ' ', GPU UUIDs shortened to "g<i>". */
static const char *ids(const struct kdev_resource *r)
{
        static char buf[4096];
        size_t used = 0;
        buf[0] = '\0';
        for (size_t i = 0; i < r->n_devices; i++) {
                const char *id = r->devices[i].id;
                char u[64];
                unsigned g = MAX_GPUS;
                for (unsigned k = 0; k < MAX_GPUS; k++) {
                        gpu_uuid(u, sizeof(u), k);
                        if (strncmp(id, u, strlen(u)) == 0) {
                                g = k;
                                break;
                        }
                }
                if (g < MAX_GPUS)
                        used += (size_t)snprintf(buf + used, sizeof(buf) - used, "%sg%u%s",
                                                 i ? " " : "", g, id + strlen(u));
                else
                        used += (size_t)snprintf(buf + used, sizeof(buf) - used, "%s%s",
                                                 i ? " " : "", id);
        }
        return buf;
}

static const char *names(const struct env *e)
{
        static char buf[1024];
        size_t used = 0;
        buf[0] = '\0';
        for (size_t i = 0; i < e->set.n_resources; i++)
                used += (size_t)snprintf(buf + used, sizeof(buf) - used, "%s%s=%zu",
                                         i ? " " : "", e->set.resources[i].name,
                                         e->set.resources[i].n_devices);
        return buf;
}

#define TS_HEAD "version: v1\nsharing:\n  timeSlicing:\n"

static void test_replicas_all(void **state)
{
        (void)state;
        struct env e;
        assert_int_equal(make(&e,
                              TS_HEAD "    resources:\n"
                                      "      - name: nvidia.com/gpu\n"
                                      "        replicas: 3\n",
                              2, true),
                         0);
        assert_string_equal(names(&e), "nvidia.com/gpu=6");
        const struct kdev_resource *r = res(&e, "nvidia.com/gpu");
        assert_string_equal(ids(r), "g0::0 g0::1 g0::2 g1::0 g1::1 g1::2");
        char u1[64];
        gpu_uuid(u1, sizeof(u1), 1);
        for (size_t i = 0; i < 6; i++) {
                const struct kdev_device *d = &r->devices[i];
                const struct kdev_nvidia_devinfo *info = kdev_nvidia_device_info(r, d);
                assert_non_null(info);
                assert_int_equal(info->replica, (int)(i % 3));
                assert_int_equal(d->healthy, i < 3);     /* GPU 1 faulted: all its replicas */
                assert_int_equal(d->numa_node, 0);
                assert_int_equal(info->minor, i < 3 ? 10 : 11);
                assert_string_equal(info->index, i < 3 ? "0" : "1");
                assert_string_equal(info->parent_uuid, info->uuid);
                if (i >= 3)
                        assert_string_equal(info->uuid, u1);
        }
        struct kdev_nvidia_rdata *d = r->ops_data;
        assert_int_equal(d->n_infos, 6);
        assert_false(d->fail_gt1);
        assert_int_equal(e.n_warns, 0);
        done(&e);
}

static void test_rename_by_default(void **state)
{
        (void)state;
        struct env e;
        assert_int_equal(make(&e,
                              TS_HEAD "    renameByDefault: true\n"
                                      "    resources:\n"
                                      "      - name: gpu\n"
                                      "        replicas: 2\n",
                              3, false),
                         0);
        /* NVIDIA: only nvidia.com/gpu.shared is advertised */
        assert_string_equal(names(&e), "nvidia.com/gpu.shared=6");
        assert_string_equal(ids(&e.set.resources[0]), "g0::0 g0::1 g1::0 g1::1 g2::0 g2::1");
        done(&e);
}

static void test_rename_by_default_no_gpus(void **state)
{
        (void)state;
        struct env e;
        /* the names do not depend on the device count (rediscovery) */
        assert_int_equal(make(&e,
                              TS_HEAD "    renameByDefault: true\n"
                                      "    resources: [{name: gpu, replicas: 2}]\n",
                              0, false),
                         0);
        assert_string_equal(names(&e), "nvidia.com/gpu.shared=0");
        done(&e);
        assert_int_equal(make(&e,
                              TS_HEAD "    resources: [{name: gpu, replicas: 2, devices: [0], "
                                      "rename: gpu-ts}]\n",
                              0, false),
                         0);
        assert_string_equal(names(&e), "nvidia.com/gpu=0 nvidia.com/gpu-ts=0");
        assert_int_equal(e.n_warns, 0);
        done(&e);
}

static void test_rename_subset(void **state)
{
        (void)state;
        struct env e;
        assert_int_equal(make(&e,
                              TS_HEAD "    failRequestsGreaterThanOne: true\n"
                                      "    resources:\n"
                                      "      - name: nvidia.com/gpu\n"
                                      "        rename: example.com/shared-gpu\n"
                                      "        devices: [\"2\", 0]\n"
                                      "        replicas: 2\n",
                              4, false),
                         0);
        assert_string_equal(names(&e), "nvidia.com/gpu=2 example.com/shared-gpu=4");
        assert_string_equal(ids(&e.set.resources[0]), "g1 g3");
        assert_string_equal(ids(&e.set.resources[1]), "g0::0 g0::1 g2::0 g2::1");
        const struct kdev_resource *kept = &e.set.resources[0], *sh = &e.set.resources[1];
        assert_ptr_equal(sh->ops, &kdev_nvidia_resource_ops);
        assert_false(((struct kdev_nvidia_rdata *)kept->ops_data)->fail_gt1);
        assert_true(((struct kdev_nvidia_rdata *)sh->ops_data)->fail_gt1);
        assert_int_equal(((struct kdev_nvidia_rdata *)kept->ops_data)->n_infos, 2);
        assert_int_equal(((struct kdev_nvidia_rdata *)sh->ops_data)->n_infos, 4);
        assert_int_equal(kdev_nvidia_device_info(kept, &kept->devices[1])->replica, -1);
        assert_string_equal(kdev_nvidia_device_info(kept, &kept->devices[1])->index, "3");
        assert_int_equal(sh->devices[3].numa_node, 1);
        assert_int_equal(kdev_nvidia_device_info(sh, &sh->devices[3])->replica, 1);
        assert_string_equal(kdev_nvidia_device_info(sh, &sh->devices[3])->index, "2");
        done(&e);
}

/* Physical devices (kdev_nvidia_attach_physical): one per GPU, which its
 * replicas in either resource point to; a fault of the GPU propagates to
 * every replica and to nothing else. */
static void test_physical_devices_of_replicas(void **state)
{
        (void)state;
        struct env e;
        assert_int_equal(make(&e,
                              TS_HEAD "    resources:\n"
                                      "      - name: nvidia.com/gpu\n"
                                      "        rename: example.com/shared-gpu\n"
                                      "        devices: [\"2\", 0]\n"
                                      "        replicas: 2\n",
                              4, true),
                         0);
        assert_int_equal(kdev_nvidia_attach_physical(&e.set, &e.err), 0);
        assert_int_equal(e.set.n_physical, 4);
        /* in device order: g1 g3 (nvidia.com/gpu), then g0 g2 */
        char u[4][64];
        for (unsigned i = 0; i < 4; i++)
                gpu_uuid(u[i], sizeof(u[i]), i);
        assert_string_equal(e.set.physical[0]->id, u[1]);
        assert_string_equal(e.set.physical[1]->id, u[3]);
        assert_string_equal(e.set.physical[2]->id, u[0]);
        assert_string_equal(e.set.physical[3]->id, u[2]);
        struct kdev_physical *g0 = kdev_physical_find(&e.set, u[0]);
        struct kdev_physical *g1 = kdev_physical_find(&e.set, u[1]);
        struct kdev_physical *g2 = kdev_physical_find(&e.set, u[2]);
        assert_non_null(g0);
        assert_non_null(g2);
        assert_false(g1->healthy); /* GPU 1 lost at discovery */
        assert_true(g0->healthy && g2->healthy);
        assert_int_equal(g2->numa_node, 1);
        const struct kdev_nvidia_devinfo *pi = g2->data;
        assert_string_equal(pi->uuid, u[2]);
        assert_int_equal(pi->replica, -1);
        assert_int_equal(g1->n_logical, 1);
        assert_int_equal(g1->logical[0].resource, 0);
        assert_int_equal(g1->logical[0].device, 0);
        assert_int_equal(g2->n_logical, 2);
        assert_int_equal(g2->logical[0].resource, 1);
        assert_int_equal(g2->logical[0].device, 2);
        assert_int_equal(g2->logical[1].resource, 1);
        assert_int_equal(g2->logical[1].device, 3);
        bool changed[2] = {false, false};
        assert_int_equal(kdev_physical_set_health(&e.set, g2, false, changed), 2);
        const struct kdev_resource *sh = &e.set.resources[1];
        assert_true(sh->devices[0].healthy && sh->devices[1].healthy);
        assert_false(sh->devices[2].healthy || sh->devices[3].healthy);
        assert_true(e.set.resources[0].devices[1].healthy);
        assert_false(changed[0]);
        assert_true(changed[1]);
        /* a second attach adds nothing */
        assert_int_equal(kdev_nvidia_attach_physical(&e.set, &e.err), 0);
        assert_int_equal(e.set.n_physical, 4);
        done(&e);
}

static void test_in_place_subset_and_count(void **state)
{
        (void)state;
        struct env e;
        /* no rename: `devices` (count or list) is ignored as NVIDIA does, every
         * device is shared, so whole GPUs and replicas never mix in one
         * resource; a warning says why */
        static const char *const entries[] = {
                "{name: gpu, devices: 2, replicas: 2}",
                "{name: gpu, devices: [\"1\"], replicas: 2}",
                "{name: gpu, devices: [7], replicas: 2}",
        };
        for (size_t i = 0; i < 3; i++) {
                char yaml[256];
                snprintf(yaml, sizeof(yaml), TS_HEAD "    resources:\n      - %s\n", entries[i]);
                assert_int_equal(make(&e, yaml, 3, false), 0);
                assert_string_equal(names(&e), "nvidia.com/gpu=6");
                assert_string_equal(ids(&e.set.resources[0]),
                                    "g0::0 g0::1 g1::0 g1::1 g2::0 g2::1");
                assert_int_equal(e.n_warns, 1);
                assert_string_equal(e.warns[0],
                                    "sharing.timeSlicing.resources[0].devices: honoured only "
                                    "together with rename (or renameByDefault); sharing every "
                                    "device of nvidia.com/gpu, as NVIDIA does");
                done(&e);
        }
        /* devices: all (explicit or absent): no warning */
        assert_int_equal(make(&e,
                              TS_HEAD "    resources:\n"
                                      "      - {name: gpu, devices: all, replicas: 2}\n",
                              2, false),
                         0);
        assert_string_equal(ids(&e.set.resources[0]), "g0::0 g0::1 g1::0 g1::1");
        assert_int_equal(e.n_warns, 0);
        done(&e);
        /* with renameByDefault the count is honoured */
        assert_int_equal(make(&e,
                              TS_HEAD "    renameByDefault: true\n"
                                      "    resources:\n"
                                      "      - {name: gpu, devices: 2, replicas: 2}\n",
                              3, false),
                         0);
        assert_string_equal(names(&e), "nvidia.com/gpu=1 nvidia.com/gpu.shared=4");
        assert_string_equal(ids(&e.set.resources[1]), "g0::0 g0::1 g1::0 g1::1");
        assert_int_equal(e.n_warns, 0);
        done(&e);
        /* a count larger than the resource: every device, renamed in place */
        assert_int_equal(make(&e,
                              TS_HEAD "    resources:\n"
                                      "      - {name: gpu, devices: 5, replicas: 2, rename: ts}\n",
                              2, false),
                         0);
        assert_string_equal(names(&e), "nvidia.com/ts=4");
        assert_string_equal(ids(&e.set.resources[0]), "g0::0 g0::1 g1::0 g1::1");
        assert_int_equal(e.n_warns, 1);
        assert_string_equal(e.warns[0], "sharing.timeSlicing.resources[0].devices: 5 requested "
                                        "but nvidia.com/gpu has 2; sharing all of them");
        done(&e);
}

/* Review 4, F5: a renamed subset selecting nothing makes no empty resource;
 * one selecting every device renames in place (as `devices: all`), leaving
 * no empty original. With no device at all both names stay (rediscovery). */
static void test_rename_empty_or_every_device(void **state)
{
        (void)state;
        struct env e;
        assert_int_equal(make(&e,
                              TS_HEAD "    failRequestsGreaterThanOne: true\n"
                                      "    resources:\n"
                                      "      - {name: gpu, devices: [7, GPU-000000ff-0000-4000-"
                                      "8000-000000000001], replicas: 2, rename: ts}\n",
                              2, false),
                         0);
        assert_string_equal(names(&e), "nvidia.com/gpu=2");
        assert_string_equal(ids(&e.set.resources[0]), "g0 g1");
        assert_false(((struct kdev_nvidia_rdata *)e.set.resources[0].ops_data)->fail_gt1);
        assert_int_equal(e.n_warns, 3);
        assert_string_equal(e.warns[0], "sharing.timeSlicing.resources[0].devices[0]: \"7\" is "
                                        "not a device of nvidia.com/gpu on this node; ignored");
        assert_string_equal(e.warns[2], "sharing.timeSlicing.resources[0].devices: selects no "
                                        "device of nvidia.com/gpu; nvidia.com/ts not advertised");
        done(&e);
        /* every device by list and by count: renamed in place */
        static const char *const sel[] = {"[1, \"0\"]", "2"};
        for (size_t i = 0; i < 2; i++) {
                char yaml[256];
                snprintf(yaml, sizeof(yaml),
                         TS_HEAD "    failRequestsGreaterThanOne: true\n"
                                 "    resources:\n"
                                 "      - {name: gpu, devices: %s, replicas: 3, rename: ts}\n",
                         sel[i]);
                assert_int_equal(make(&e, yaml, 2, false), 0);
                assert_string_equal(names(&e), "nvidia.com/ts=6");
                assert_string_equal(ids(&e.set.resources[0]),
                                    "g0::0 g0::1 g0::2 g1::0 g1::1 g1::2");
                assert_true(((struct kdev_nvidia_rdata *)e.set.resources[0].ops_data)->fail_gt1);
                assert_int_equal(e.n_warns, 0);
                done(&e);
        }
        /* no device on the node: both names stay, nothing warned */
        assert_int_equal(make(&e,
                              TS_HEAD "    resources:\n"
                                      "      - {name: gpu, devices: [7], replicas: 2, rename: ts}\n"
                                      "      - {name: gpu, devices: 1, replicas: 2, rename: ts2}\n",
                              0, false),
                         0);
        assert_string_equal(names(&e), "nvidia.com/gpu=0 nvidia.com/ts2=0 nvidia.com/ts=0");
        assert_int_equal(e.n_warns, 0);
        done(&e);
}

static void test_devices_by_uuid_and_unknown(void **state)
{
        (void)state;
        struct env e;
        assert_int_equal(make(&e,
                              TS_HEAD "    resources:\n"
                                      "      - name: gpu\n"
                                      "        rename: gpu-x\n"
                                      "        devices:\n"
                                      "          - GPU-000000a1-0000-4000-8000-000000000001\n"
                                      "          - GPU-000000ff-0000-4000-8000-000000000001\n"
                                      "          - 7\n"
                                      "        replicas: 2\n",
                              2, false),
                         0);
        assert_string_equal(names(&e), "nvidia.com/gpu=1 nvidia.com/gpu-x=2");
        assert_string_equal(ids(&e.set.resources[1]), "g1::0 g1::1");
        assert_int_equal(e.n_warns, 2);
        assert_string_equal(e.warns[0],
                            "sharing.timeSlicing.resources[0].devices[1]: "
                            "\"GPU-000000ff-0000-4000-8000-000000000001\" is not a device of "
                            "nvidia.com/gpu on this node; ignored");
        assert_string_equal(e.warns[1], "sharing.timeSlicing.resources[0].devices[2]: \"7\" is "
                                        "not a device of nvidia.com/gpu on this node; ignored");
        done(&e);
}

static void test_absent_resource_skipped(void **state)
{
        (void)state;
        struct env e;
        /* a MIG resource under migStrategy none: skipped silently (NVIDIA) */
        assert_int_equal(make(&e,
                              TS_HEAD "    renameByDefault: true\n"
                                      "    resources:\n"
                                      "      - {name: mig-1g.5gb, replicas: 4}\n",
                              2, false),
                         0);
        assert_string_equal(names(&e), "nvidia.com/gpu=2");
        assert_string_equal(ids(&e.set.resources[0]), "g0 g1");
        assert_int_equal(e.n_warns, 0);
        done(&e);
}

static void test_not_nvidia_resource(void **state)
{
        (void)state;
        struct env e;
        assert_int_equal(make(&e,
                              TS_HEAD "    resources: [{name: example.com/fuse, replicas: 2}]\n",
                              1, false),
                         0);
        /* add a generic resource of that name, then apply again */
        struct kdev_resource *nr =
                realloc(e.set.resources, (e.set.n_resources + 1) * sizeof(*nr));
        assert_non_null(nr);
        e.set.resources = nr;
        memset(&nr[e.set.n_resources], 0, sizeof(*nr));
        nr[e.set.n_resources].name = strdup("example.com/fuse");
        e.set.n_resources++;
        assert_int_equal(kdev_nvidia_apply_sharing(&e.set, &e.cfg, collect, &e, &e.err), 0);
        assert_string_equal(names(&e), "nvidia.com/gpu=1 example.com/fuse=0");
        assert_int_equal(e.n_warns, 1);
        assert_string_equal(e.warns[0], "sharing.timeSlicing.resources[0]: example.com/fuse is "
                                        "not an NVIDIA resource; not shared");
        done(&e);
}

static void test_errors(void **state)
{
        (void)state;
        struct env e;
        /* rename onto an existing resource */
        assert_int_equal(make(&e,
                              TS_HEAD "    resources:\n"
                                      "      - {name: gpu, devices: [0], replicas: 2, rename: a}\n"
                                      "      - {name: gpu, devices: [1], replicas: 2, rename: a}\n",
                              2, false),
                         -EEXIST);
        assert_string_equal(e.err.msg, "sharing.timeSlicing.resources[1]: resource nvidia.com/a "
                                       "already exists");
        done(&e);
        /* the same device twice */
        assert_int_equal(make(&e,
                              TS_HEAD "    resources:\n"
                                      "      - {name: gpu, devices: [0], replicas: 2}\n"
                                      "      - {name: gpu, devices: [\"1\"], replicas: 3, "
                                      "rename: b}\n",
                              2, false),
                         -EEXIST);
        char msg[256], u[64];
        gpu_uuid(u, sizeof(u), 1);
        snprintf(msg, sizeof(msg),
                 "sharing.timeSlicing.resources[1]: device %s of nvidia.com/gpu is shared twice",
                 u);
        assert_string_equal(e.err.msg, msg);
        done(&e);
        /* <name>.shared longer than a resource name may be (63 after the '/') */
        assert_int_equal(make(&e,
                              TS_HEAD "    renameByDefault: true\n"
                                      "    resources:\n"
                                      "      - {name: gpu, devices: [0], replicas: 2, rename: "
                                      "g12345678901234567890123456789012345678901234567890123456}\n"
                                      "      - {name: g12345678901234567890123456789012345678901"
                                      "234567890123456, replicas: 2}\n",
                              1, false),
                         -EINVAL);
        assert_string_equal(e.err.msg,
                            "sharing.timeSlicing.resources[1]: renameByDefault: resource name "
                            "\"nvidia.com/g12345678901234567890123456789012345678901234567890123"
                            "456.shared\" is invalid: the name after \"/\" must be at most 63 "
                            "characters, got 64");
        done(&e);
}

static void test_disjoint_entries(void **state)
{
        (void)state;
        struct env e;
        /* kdev: different replica counts per GPU (the renamed subset first,
         * then the rest in place) */
        assert_int_equal(make(&e,
                              TS_HEAD "    resources:\n"
                                      "      - {name: gpu, devices: [\"1\"], replicas: 3, "
                                      "rename: gpu-3}\n"
                                      "      - {name: gpu, devices: [0, 2], replicas: 2}\n",
                              3, false),
                         0);
        assert_string_equal(names(&e), "nvidia.com/gpu=4 nvidia.com/gpu-3=3");
        assert_string_equal(ids(&e.set.resources[0]), "g0::0 g0::1 g2::0 g2::1");
        assert_string_equal(ids(&e.set.resources[1]), "g1::0 g1::1 g1::2");
        assert_int_equal(e.n_warns, 1);
        assert_string_equal(e.warns[0], "sharing.timeSlicing.resources[1].devices: honoured only "
                                        "together with rename (or renameByDefault); sharing "
                                        "every device of nvidia.com/gpu, as NVIDIA does");
        done(&e);
}

/* A MIG-like NVIDIA resource made by hand: GPU 0 with MIG devices 0:0, 0:1. */
static void add_mig_resource(struct env *e)
{
        struct kdev_nvidia_rdata *d = kdev_nvidia_rdata_dup(e->set.resources[0].ops_data);
        assert_non_null(d);
        d->infos = calloc(2, sizeof(*d->infos));
        d->n_infos = 2;
        struct kdev_resource r = {.name = strdup("nvidia.com/mig-1g.5gb"),
                                  .devices = calloc(2, sizeof(struct kdev_device)),
                                  .n_devices = 2,
                                  .ops = &kdev_nvidia_resource_ops,
                                  .ops_data = d};
        for (unsigned j = 0; j < 2; j++) {
                struct kdev_nvidia_devinfo *in = &d->infos[j];
                snprintf(in->uuid, sizeof(in->uuid), "MIG-0000000%u-1111-4000-8000-000000000000",
                         j);
                gpu_uuid(in->parent_uuid, sizeof(in->parent_uuid), 0);
                in->gi = 7 + j;
                in->ci = 0;
                snprintf(in->index, sizeof(in->index), "0:%u", j);
                in->minor = 10;
                in->replica = -1;
                r.devices[j].id = strdup(in->uuid);
                r.devices[j].healthy = true;
                r.devices[j].numa_node = -1;
                r.devices[j].data = in;
        }
        struct kdev_resource *nr = realloc(e->set.resources, 2 * sizeof(*nr));
        assert_non_null(nr);
        e->set.resources = nr;
        e->set.resources[1] = r;
        e->set.n_resources = 2;
}


static void test_mig_refs(void **state)
{
        (void)state;
        static const char *const refs[] = {
                "\"0:1\"",
                "MIG-00000001-1111-4000-8000-000000000000",
                "MIG-GPU-000000a0-0000-4000-8000-000000000000/8/0",
        };
        for (size_t i = 0; i < 3; i++) {
                struct env e;
                assert_int_equal(make(&e, "version: v1\nflags: {}\n", 1, false), 0);
                add_mig_resource(&e);
                kdev_nvidia_config_clear(&e.cfg);
                char yaml[512];
                snprintf(yaml, sizeof(yaml),
                         TS_HEAD "    resources: [{name: mig-1g.5gb, replicas: 2, rename: "
                                 "mig-ts, devices: [%s]}]\n",
                         refs[i]);
                assert_int_equal(kdev_nvidia_config_init(&e.cfg, &e.err), 0);
                if (parse_file(&e.cfg, "ts.yaml", yaml, &e.err) != 0)
                        fail_msg("%s", e.err.msg);
                assert_int_equal(kdev_nvidia_apply_sharing(&e.set, &e.cfg, collect, &e, &e.err),
                                 0);
                assert_string_equal(names(&e), "nvidia.com/gpu=1 nvidia.com/mig-1g.5gb=1 "
                                               "nvidia.com/mig-ts=2");
                assert_string_equal(ids(&e.set.resources[2]),
                                    "MIG-00000001-1111-4000-8000-000000000000::0 "
                                    "MIG-00000001-1111-4000-8000-000000000000::1");
                const struct kdev_resource *mr = &e.set.resources[2];
                const struct kdev_nvidia_devinfo *in =
                        kdev_nvidia_device_info(mr, &mr->devices[1]);
                assert_int_equal(in->gi, 8);
                assert_int_equal(in->replica, 1);
                assert_string_equal(in->index, "0:1");
                assert_int_equal(e.n_warns, 0);
                done(&e);
        }
}

/* --- Allocate ----------------------------------------------------------------- */

static const char *env_of(const V1beta1__ContainerAllocateResponse *r, const char *key)
{
        for (size_t i = 0; i < r->n_envs; i++) {
                if (strcmp(r->envs[i]->key, key) == 0)
                        return r->envs[i]->value;
        }
        return NULL;
}

static int alloc(const struct kdev_resource *r, const char *const *req, size_t n,
                 V1beta1__ContainerAllocateResponse *out, struct kdev_err *err)
{
        v1beta1__container_allocate_response__init(out);
        return kdev_plugin_allocate(r, req, n, out, err);
}

static void test_allocate_each_physical_once(void **state)
{
        (void)state;
        struct env e;
        assert_int_equal(make(&e,
                              "version: v1\n"
                              "flags:\n"
                              "  nvidiaDevRoot: /nonexistent-kdev-root\n"
                              "  plugin:\n"
                              "    passDeviceSpecs: true\n"
                              "    deviceListStrategy: [envvar, volume-mounts, cdi-cri]\n"
                              "sharing:\n  timeSlicing:\n"
                              "    resources: [{name: gpu, replicas: 4}]\n",
                              3, false),
                         0);
        char u0[64], u2[64], a[80], b[80], c[80], d[80];
        gpu_uuid(u0, sizeof(u0), 0);
        gpu_uuid(u2, sizeof(u2), 2);
        snprintf(a, sizeof(a), "%s::3", u2);
        snprintf(b, sizeof(b), "%s::1", u0);
        snprintf(c, sizeof(c), "%s::0", u2);
        snprintf(d, sizeof(d), "%s::2", u0);
        const char *req[] = {a, b, c, d};
        V1beta1__ContainerAllocateResponse out;
        assert_int_equal(alloc(&e.set.resources[0], req, 4, &out, &e.err), 0);
        char want[256];
        /* volume-mounts replaces the envvar value */
        assert_string_equal(env_of(&out, "NVIDIA_VISIBLE_DEVICES"),
                            "/var/run/nvidia-container-devices");
        assert_int_equal(out.n_mounts, 2);
        snprintf(want, sizeof(want), "/var/run/nvidia-container-devices/%s", u2);
        assert_string_equal(out.mounts[0]->container_path, want);
        snprintf(want, sizeof(want), "/var/run/nvidia-container-devices/%s", u0);
        assert_string_equal(out.mounts[1]->container_path, want);
        assert_int_equal(out.n_cdi_devices, 2);
        snprintf(want, sizeof(want), "k8s.device-plugin.nvidia.com/gpu=%s", u2);
        assert_string_equal(out.cdi_devices[0]->name, want);
        snprintf(want, sizeof(want), "k8s.device-plugin.nvidia.com/gpu=%s", u0);
        assert_string_equal(out.cdi_devices[1]->name, want);
        assert_int_equal(out.n_devices, 2);
        assert_string_equal(out.devices[0]->container_path, "/dev/nvidia12");
        assert_string_equal(out.devices[1]->container_path, "/dev/nvidia10");
        kdev_allocate_response_free_contents(&out);
        done(&e);
}

static void test_allocate_envvar_and_index(void **state)
{
        (void)state;
        struct env e;
        assert_int_equal(make(&e,
                              "version: v1\nflags:\n  plugin:\n    deviceIDStrategy: index\n"
                              "sharing:\n  timeSlicing:\n"
                              "    resources: [{name: gpu, replicas: 2}]\n",
                              2, false),
                         0);
        char u0[64], u1[64], a[80], b[80], c[80];
        gpu_uuid(u0, sizeof(u0), 0);
        gpu_uuid(u1, sizeof(u1), 1);
        snprintf(a, sizeof(a), "%s::1", u1);
        snprintf(b, sizeof(b), "%s::0", u1);
        snprintf(c, sizeof(c), "%s::0", u0);
        const char *req[] = {a, b, c};
        V1beta1__ContainerAllocateResponse out;
        assert_int_equal(alloc(&e.set.resources[0], req, 3, &out, &e.err), 0);
        assert_string_equal(env_of(&out, "NVIDIA_VISIBLE_DEVICES"), "1,0");
        kdev_allocate_response_free_contents(&out);
        done(&e);
}

#define MPS_HEAD "version: v1\nflags:\n  mpsRoot: /run/nvidia/mps\nsharing:\n  mps:\n"

static void test_mps_replicas(void **state)
{
        (void)state;
        struct env e;
        assert_int_equal(make(&e, MPS_HEAD "    resources: [{name: gpu, replicas: 3}]\n", 2, false),
                         0);
        assert_int_equal(kdev_nvidia_sharing_strategy(&e.cfg), KDEV_NVIDIA_SHARING_MPS);
        assert_string_equal(names(&e), "nvidia.com/gpu=6");
        assert_string_equal(ids(&e.set.resources[0]), "g0::0 g0::1 g0::2 g1::0 g1::1 g1::2");
        const struct kdev_nvidia_rdata *d = e.set.resources[0].ops_data;
        assert_string_equal(d->mps_root, "/run/nvidia/mps");
        assert_true(d->fail_gt1); /* not given: true for MPS (v0.20) */
        done(&e);
        assert_int_equal(make(&e,
                              MPS_HEAD "    failRequestsGreaterThanOne: false\n"
                                       "    renameByDefault: true\n"
                                       "    resources: [{name: gpu, replicas: 2}]\n",
                              1, false),
                         0);
        assert_string_equal(names(&e), "nvidia.com/gpu.shared=2");
        d = e.set.resources[0].ops_data;
        assert_false(d->fail_gt1);
        assert_string_equal(d->mps_root, "/run/nvidia/mps");
        done(&e);
}

static void test_mps_wins_over_time_slicing(void **state)
{
        (void)state;
        struct env e;
        assert_int_equal(make(&e,
                              MPS_HEAD "    resources: [{name: gpu, replicas: 2}]\n"
                                       "  timeSlicing:\n"
                                       "    resources: [{name: gpu, replicas: 5}]\n",
                              1, false),
                         0);
        assert_string_equal(names(&e), "nvidia.com/gpu=2");
        assert_string_equal(kdev_nvidia_sharing_strategy_name(kdev_nvidia_sharing_strategy(&e.cfg)),
                            "mps");
        assert_int_equal(kdev_nvidia_time_slicing_replicas(&e.cfg, "nvidia.com/gpu"), 0);
        done(&e);
        /* time-slicing alone: not MPS, no MPS root on the resource */
        assert_int_equal(make(&e, TS_HEAD "    resources: [{name: gpu, replicas: 2}]\n", 1, false),
                         0);
        assert_string_equal(kdev_nvidia_sharing_strategy_name(kdev_nvidia_sharing_strategy(&e.cfg)),
                            "time-slicing");
        assert_null(((const struct kdev_nvidia_rdata *)e.set.resources[0].ops_data)->mps_root);
        assert_false(((const struct kdev_nvidia_rdata *)e.set.resources[0].ops_data)->fail_gt1);
        done(&e);
}

static void test_mps_replica_limit(void **state)
{
        (void)state;
        struct env e;
        assert_int_equal(kdev_nvidia_mps_max_replicas(7, 5), 48);
        assert_int_equal(kdev_nvidia_mps_max_replicas(7, 0), 16);
        assert_int_equal(kdev_nvidia_mps_max_replicas(0, 0), 16);
        assert_int_equal(make(&e, MPS_HEAD "    resources: [{name: gpu, replicas: 48}]\n", 1, false),
                         0);
        assert_string_equal(names(&e), "nvidia.com/gpu=48");
        done(&e);
        assert_int_equal(make(&e, MPS_HEAD "    resources: [{name: gpu, replicas: 49}]\n", 1, false),
                         -ERANGE);
        assert_string_equal(e.err.msg, "invalid MPS configuration: invalid device maximum allowed "
                                       "replicas exceeded: 49 > 48");
        done(&e);
        cc_major = 7;
        assert_int_equal(make(&e, MPS_HEAD "    resources: [{name: gpu, replicas: 17}]\n", 1, false),
                         -ERANGE);
        assert_string_equal(e.err.msg, "invalid MPS configuration: invalid device maximum allowed "
                                       "replicas exceeded: 17 > 16");
        done(&e);
        cc_major = 9;
}

static void test_mps_allocate_every_strategy(void **state)
{
        (void)state;
        static const char *const strategies[] = {"envvar", "volume-mounts", "cdi-annotations",
                                                 "cdi-cri"};
        for (size_t k = 0; k < 4; k++) {
                struct env e;
                char yaml[512];
                snprintf(yaml, sizeof(yaml),
                         "version: v1\nflags:\n  mpsRoot: /run/nvidia/mps\n"
                         "  plugin:\n    deviceListStrategy: %s\n"
                         "sharing:\n  mps:\n    resources: [{name: gpu, replicas: 2}]\n",
                         strategies[k]);
                assert_int_equal(make(&e, yaml, 1, false), 0);
                char u0[64], a[80];
                gpu_uuid(u0, sizeof(u0), 0);
                snprintf(a, sizeof(a), "%s::1", u0);
                const char *req[] = {a};
                V1beta1__ContainerAllocateResponse out;
                assert_int_equal(alloc(&e.set.resources[0], req, 1, &out, &e.err), 0);
                assert_string_equal(env_of(&out, "CUDA_MPS_PIPE_DIRECTORY"),
                                    "/mps/nvidia.com/gpu/pipe");
                size_t m = k == 1 ? 1 : 0; /* volume-mounts: its /dev/null mount after */
                assert_int_equal(out.n_mounts, 2 + m);
                assert_string_equal(out.mounts[0]->host_path, "/run/nvidia/mps/nvidia.com/gpu/pipe");
                assert_string_equal(out.mounts[0]->container_path, "/mps/nvidia.com/gpu/pipe");
                assert_string_equal(out.mounts[1]->host_path, "/run/nvidia/mps/shm");
                assert_string_equal(out.mounts[1]->container_path, "/dev/shm");
                assert_false(out.mounts[0]->read_only);
                if (k < 2)
                        assert_non_null(env_of(&out, "NVIDIA_VISIBLE_DEVICES"));
                else
                        assert_null(env_of(&out, "NVIDIA_VISIBLE_DEVICES"));
                kdev_allocate_response_free_contents(&out);
                /* failRequestsGreaterThanOne: true by default */
                char b[80];
                snprintf(b, sizeof(b), "%s::0", u0);
                const char *two[] = {a, b};
                assert_int_equal(alloc(&e.set.resources[0], two, 2, &out, &e.err), -EINVAL);
                assert_string_equal(e.err.msg, "invalid allocation request for \"nvidia.com/gpu\": "
                                               "invalid request: maximum request size for shared "
                                               "resources is 1; found 2");
                kdev_allocate_response_free_contents(&out);
                done(&e);
        }
}

static void test_mps_mig_refused(void **state)
{
        (void)state;
        struct env e;
        assert_int_equal(make(&e, "version: v1\n", 1, false), 0);
        add_mig_resource(&e);
        kdev_nvidia_config_clear(&e.cfg);
        assert_int_equal(kdev_nvidia_config_init(&e.cfg, &e.err), 0);
        if (parse_file(&e.cfg, "mps.yaml",
                       MPS_HEAD "    resources: [{name: mig-1g.5gb, replicas: 2}]\n", &e.err) != 0)
                fail_msg("%s", e.err.msg);
        assert_int_equal(kdev_nvidia_apply_sharing(&e.set, &e.cfg, NULL, NULL, &e.err), -EINVAL);
        assert_string_equal(e.err.msg, "sharing using MPS is not supported for MIG devices");
        done(&e);
}

static void test_fail_requests_greater_than_one(void **state)
{
        (void)state;
        struct env e;
        assert_int_equal(make(&e,
                              TS_HEAD "    failRequestsGreaterThanOne: true\n"
                                      "    resources: [{name: gpu, replicas: 2}]\n",
                              3, false),
                         0);
        struct kdev_resource *r = &e.set.resources[0];
        assert_string_equal(ids(r), "g0::0 g0::1 g1::0 g1::1 g2::0 g2::1");
        char u0[64], u1[64], u2[64], a[80], b[80], c1[80], c2[80];
        gpu_uuid(u0, sizeof(u0), 0);
        gpu_uuid(u1, sizeof(u1), 1);
        gpu_uuid(u2, sizeof(u2), 2);
        snprintf(a, sizeof(a), "%s::0", u0);
        snprintf(b, sizeof(b), "%s::1", u0);
        snprintf(c1, sizeof(c1), "%s::1", u1);
        snprintf(c2, sizeof(c2), "%s::0", u2);
        V1beta1__ContainerAllocateResponse out;
        const char *two[] = {a, b};
        assert_int_equal(alloc(r, two, 2, &out, &e.err), -EINVAL);
        assert_string_equal(e.err.msg,
                            "invalid allocation request for \"nvidia.com/gpu\": invalid request: "
                            "maximum request size for shared resources is 1; found 2");
        kdev_allocate_response_free_contents(&out);
        const char *three[] = {c1, a, c2};
        assert_int_equal(alloc(r, three, 3, &out, &e.err), -EINVAL);
        assert_string_equal(e.err.msg,
                            "invalid allocation request for \"nvidia.com/gpu\": invalid request: "
                            "maximum request size for shared resources is 1; found 3");
        kdev_allocate_response_free_contents(&out);
        /* one replica: fine */
        assert_int_equal(alloc(r, two, 1, &out, &e.err), 0);
        assert_string_equal(env_of(&out, "NVIDIA_VISIBLE_DEVICES"), u0);
        kdev_allocate_response_free_contents(&out);
        done(&e);
        /* a renamed subset: the whole GPUs left under nvidia.com/gpu do not
         * carry the flag; and were it set, IDs without "::n" pass */
        assert_int_equal(make(&e,
                              TS_HEAD "    failRequestsGreaterThanOne: true\n"
                                      "    resources: [{name: gpu, replicas: 2, devices: [0], "
                                      "rename: ts}]\n",
                              3, false),
                         0);
        assert_string_equal(names(&e), "nvidia.com/gpu=2 nvidia.com/ts=2");
        r = &e.set.resources[0];
        assert_false(((struct kdev_nvidia_rdata *)r->ops_data)->fail_gt1);
        assert_true(((struct kdev_nvidia_rdata *)e.set.resources[1].ops_data)->fail_gt1);
        ((struct kdev_nvidia_rdata *)r->ops_data)->fail_gt1 = true;
        const char *whole[] = {u2, u1};
        assert_int_equal(alloc(r, whole, 2, &out, &e.err), 0);
        char want[160];
        snprintf(want, sizeof(want), "%s,%s", u2, u1);
        assert_string_equal(env_of(&out, "NVIDIA_VISIBLE_DEVICES"), want);
        kdev_allocate_response_free_contents(&out);
        done(&e);

        /* not set (and false): more than one replica is allowed */
        for (int f = 0; f < 2; f++) {
                assert_int_equal(make(&e,
                                      f ? TS_HEAD "    failRequestsGreaterThanOne: false\n"
                                                  "    resources: [{name: gpu, replicas: 2}]\n"
                                        : TS_HEAD "    resources: [{name: gpu, replicas: 2}]\n",
                                      1, false),
                                 0);
                assert_int_equal(alloc(&e.set.resources[0], two, 2, &out, &e.err), 0);
                assert_string_equal(env_of(&out, "NVIDIA_VISIBLE_DEVICES"), u0);
                kdev_allocate_response_free_contents(&out);
                done(&e);
        }
        /* the renamed resource carries the flag and names itself */
        assert_int_equal(make(&e,
                              TS_HEAD "    failRequestsGreaterThanOne: true\n"
                                      "    renameByDefault: true\n"
                                      "    resources: [{name: gpu, replicas: 2}]\n",
                              1, false),
                         0);
        assert_int_equal(alloc(&e.set.resources[0], two, 2, &out, &e.err), -EINVAL);
        assert_string_equal(e.err.msg,
                            "invalid allocation request for \"nvidia.com/gpu.shared\": invalid "
                            "request: maximum request size for shared resources is 1; found 2");
        kdev_allocate_response_free_contents(&out);
        done(&e);
}

/* --- ListAndWatch size ------------------------------------------------------------ */

static void test_list_and_watch_limit(void **state)
{
        (void)state;
        char dir[] = "/tmp/kdev-ts-XXXXXX";
        assert_non_null(mkdtemp(dir));
        /* 8 GPUs x 4096 replicas (the config's maximum): served; 16 x 4096:
         * refused by the runtime */
        static const size_t counts[] = {8, 16};
        for (size_t k = 0; k < 2; k++) {
                struct env *e = calloc(1, sizeof(*e));
                assert_non_null(e);
                assert_int_equal(make(e,
                                      TS_HEAD "    resources: [{name: gpu, replicas: 4096}]\n",
                                      counts[k], false),
                                 0);
                struct kdev_resource *r = &e->set.resources[0];
                assert_int_equal(r->n_devices, counts[k] * 4096);
                size_t lw = kdev_dp_list_and_watch_size(r);
                uv_loop_t loop;
                assert_int_equal(uv_loop_init(&loop), 0);
                struct kdev_dp_options o = {.plugin_dir = dir};
                struct kdev_err err = {0};
                struct kdev_dp_runtime *rt = kdev_dp_runtime_new(&loop, &o, &err);
                assert_non_null(rt);
                int rc = kdev_dp_runtime_add_resource(rt, r, &err);
                if (k == 0) {
                        assert_true(lw < 4u << 20);
                        assert_int_equal(rc, 0);
                } else {
                        assert_true(lw > 4u << 20);
                        assert_int_equal(rc, -EMSGSIZE);
                        char want[256];
                        snprintf(want, sizeof(want),
                                 "resource nvidia.com/gpu: its ListAndWatch message of %zu bytes "
                                 "(65536 devices) exceeds kubelet's 4 MiB receive limit",
                                 lw);
                        assert_string_equal(err.msg, want);
                }
                kdev_dp_runtime_stop(rt, NULL, NULL);
                uv_run(&loop, UV_RUN_DEFAULT);
                assert_int_equal(uv_loop_close(&loop), 0);
                done(e);
                free(e);
        }
        rmdir(dir);
}

int main(void)
{
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_replicas_all),
                cmocka_unit_test(test_rename_by_default),
                cmocka_unit_test(test_rename_by_default_no_gpus),
                cmocka_unit_test(test_rename_subset),
                cmocka_unit_test(test_physical_devices_of_replicas),
                cmocka_unit_test(test_in_place_subset_and_count),
                cmocka_unit_test(test_rename_empty_or_every_device),
                cmocka_unit_test(test_devices_by_uuid_and_unknown),
                cmocka_unit_test(test_absent_resource_skipped),
                cmocka_unit_test(test_not_nvidia_resource),
                cmocka_unit_test(test_errors),
                cmocka_unit_test(test_disjoint_entries),
                cmocka_unit_test(test_mps_replicas),
                cmocka_unit_test(test_mps_wins_over_time_slicing),
                cmocka_unit_test(test_mps_replica_limit),
                cmocka_unit_test(test_mps_allocate_every_strategy),
                cmocka_unit_test(test_mps_mig_refused),
                cmocka_unit_test(test_mig_refs),
                cmocka_unit_test(test_allocate_each_physical_once),
                cmocka_unit_test(test_allocate_envvar_and_index),
                cmocka_unit_test(test_fail_requests_greater_than_one),
                cmocka_unit_test(test_list_and_watch_limit),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
