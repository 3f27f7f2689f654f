/* kdev_plugin_allocate (kdev_resource_edits as v1beta1) and kdev_resource_preferred. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "model/model.h"
#include "plugin/allocate.h"
#include "edits_pool.h"

/* Test resource builder: devices "id:numa:healthy" with specs
 * "container=host:perms" separated by ','. */
struct tdev {
        const char *id;
        int numa;
        bool healthy;
        const char *specs; /* "c=h:p,c=h:p" or NULL */
};

static void make_resource(struct kdev_resource *r, const char *name, const struct tdev *d, size_t n)
{
        memset(r, 0, sizeof(*r));
        r->name = strdup(name);
        r->devices = calloc(n ? n : 1, sizeof(*r->devices));
        r->n_devices = n;
        for (size_t i = 0; i < n; i++) {
                struct kdev_device *x = &r->devices[i];
                x->id = strdup(d[i].id);
                x->numa_node = d[i].numa;
                x->healthy = d[i].healthy;
                if (!d[i].specs)
                        continue;
                char *copy = strdup(d[i].specs);
                char *save = NULL;
                for (char *tok = strtok_r(copy, ",", &save); tok;
                     tok = strtok_r(NULL, ",", &save)) {
                        x->specs = realloc(x->specs, (x->n_specs + 1) * sizeof(*x->specs));
                        struct kdev_device_spec *s = &x->specs[x->n_specs++];
                        char *eq = strchr(tok, '=');
                        char *colon = strchr(tok, ':');
                        assert_non_null(eq);
                        assert_non_null(colon);
                        *eq = '\0';
                        *colon = '\0';
                        s->container_path = strdup(tok);
                        s->host_path = strdup(eq + 1);
                        s->permissions = strdup(colon + 1);
                }
                free(copy);
        }
}

/* Renders the device specs of |resp| as "c=h:p c=h:p". */
static void render(const V1beta1__ContainerAllocateResponse *resp, char *buf, size_t len)
{
        size_t used = 0;
        buf[0] = '\0';
        for (size_t i = 0; i < resp->n_devices; i++) {
                int w = snprintf(buf + used, len - used, "%s%s=%s:%s", i ? " " : "",
                                 resp->devices[i]->container_path, resp->devices[i]->host_path,
                                 resp->devices[i]->permissions);
                used += (size_t)w;
        }
}

static const struct tdev fuse_devs[] = {
        {"fuse::0", -1, true, "/dev/fuse=/dev/fuse:rw"},
        {"fuse::1", -1, true, "/dev/fuse=/dev/fuse:rw"},
        {"fuse::2", -1, false, "/dev/fuse=/dev/fuse:rw"},
        {"pair", -1, true, "/dev/a=/real/a:r,/dev/b=/real/b:rw"},
        {"pair2", -1, true, "/dev/b=/real/b:m,/dev/c=/real/c:rw"},
        {"clash", -1, true, "/dev/a=/real/other:rw"},
        {"nodes0", -1, true, NULL},
};

static void test_allocate_specs(void **state)
{
        (void)state;
        struct kdev_resource r;
        make_resource(&r, "example.com/fuse", fuse_devs, sizeof(fuse_devs) / sizeof(fuse_devs[0]));
        char buf[1024];
        struct kdev_err e;

        /* replicas of one node: one DeviceSpec */
        V1beta1__ContainerAllocateResponse resp = V1BETA1__CONTAINER_ALLOCATE_RESPONSE__INIT;
        const char *ids1[] = {"fuse::1", "fuse::0"};
        assert_int_equal(kdev_plugin_allocate(&r, ids1, 2, &resp, &e), 0);
        render(&resp, buf, sizeof(buf));
        assert_string_equal(buf, "/dev/fuse=/dev/fuse:rw");
        kdev_allocate_response_free_contents(&resp);
        assert_int_equal(resp.n_devices, 0);
        assert_null(resp.devices);

        /* request order, node order; shared node merged with permission union */
        const char *ids2[] = {"pair2", "pair"};
        assert_int_equal(kdev_plugin_allocate(&r, ids2, 2, &resp, &e), 0);
        render(&resp, buf, sizeof(buf));
        assert_string_equal(buf, "/dev/b=/real/b:rwm /dev/c=/real/c:rw /dev/a=/real/a:r");
        kdev_allocate_response_free_contents(&resp);

        const char *ids3[] = {"pair", "pair2"};
        assert_int_equal(kdev_plugin_allocate(&r, ids3, 2, &resp, &e), 0);
        render(&resp, buf, sizeof(buf));
        assert_string_equal(buf, "/dev/a=/real/a:r /dev/b=/real/b:rwm /dev/c=/real/c:rw");
        kdev_allocate_response_free_contents(&resp);

        /* a device without nodes gives no DeviceSpec */
        const char *ids4[] = {"nodes0"};
        assert_int_equal(kdev_plugin_allocate(&r, ids4, 1, &resp, &e), 0);
        assert_int_equal(resp.n_devices, 0);
        assert_null(resp.devices);
        kdev_allocate_response_free_contents(&resp);

        kdev_resource_clear(&r);
}

struct alloc_err {
        const char *ids[3];
        size_t n;
        const char *msg;
};

static void test_allocate_errors(void **state)
{
        (void)state;
        struct kdev_resource r;
        make_resource(&r, "example.com/fuse", fuse_devs, sizeof(fuse_devs) / sizeof(fuse_devs[0]));
        const struct alloc_err cases[] = {
                {{NULL}, 0, "empty allocation request for resource example.com/fuse"},
                {{"x"}, 1, "unknown device \"x\" for resource example.com/fuse"},
                {{"fuse::0", "x"}, 2, "unknown device \"x\" for resource example.com/fuse"},
                {{"fuse::0", "fuse::1", "fuse::0"}, 3,
                 "device \"fuse::0\" of resource example.com/fuse is requested more than once"},
                {{"fuse::2"}, 1, "device \"fuse::2\" of resource example.com/fuse is unhealthy"},
                {{"pair", "clash"}, 2,
                 "devices \"pair\" and \"clash\" of resource example.com/fuse both use container "
                 "path \"/dev/a\" for different host paths \"/real/a\" and \"/real/other\""},
        };
        for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
                V1beta1__ContainerAllocateResponse resp =
                        V1BETA1__CONTAINER_ALLOCATE_RESPONSE__INIT;
                struct kdev_err e;
                kdev_err_clear(&e);
                int rc = kdev_plugin_allocate(&r, cases[i].ids, cases[i].n, &resp, &e);
                assert_int_equal(rc, -EINVAL);
                assert_string_equal(e.msg, cases[i].msg);
                assert_int_equal(resp.n_devices, 0);
                assert_null(resp.devices);
        }
        kdev_resource_clear(&r);
}

/* Runs of devices with the same node one after another (the grouping's fast
 * path for an entry equal to the one before): the same answer and the same
 * errors as for the same devices apart. */
static const struct tdev run_devs[] = {
        {"rd", -1, true, "/dev/x=/real/x:r"},
        {"rd2", -1, true, "/dev/x=/real/x:r"},
        {"wr", -1, true, "/dev/x=/real/x:w"},
        {"mk", -1, true, "/dev/x=/real/x:m"},
        {"other", -1, true, "/dev/x=/real/y:rw"},
        {"other2", -1, true, "/dev/x=/real/y:rw"},
        {"z", -1, true, "/dev/z=/real/z:rw"},
        {"g0", -1, true, "/dev/a=/real/a:r,/dev/b=/real/b:rw"},
        {"g1", -1, true, "/dev/a=/real/a:w,/dev/b=/real/b:rw"},
        {"g2", -1, true, "/dev/a=/real/other:rw,/dev/b=/real/b:rw"},
};

static void test_allocate_runs_of_equal_nodes(void **state)
{
        (void)state;
        struct kdev_resource r;
        make_resource(&r, "example.com/run", run_devs, sizeof(run_devs) / sizeof(run_devs[0]));
        char buf[256];
        struct kdev_err e;
        kdev_err_clear(&e);
        const struct {
                const char *ids[4];
                size_t n;
                const char *want; /* the nodes, or the error */
        } cases[] = {
                {{"rd", "rd2", "wr"}, 3, "/dev/x=/real/x:rw"},
                {{"rd", "wr", "mk"}, 3, "/dev/x=/real/x:rwm"},
                {{"z", "rd", "rd2", "mk"}, 4, "/dev/z=/real/z:rw /dev/x=/real/x:rm"},
                {{"rd", "z", "wr"}, 3, "/dev/x=/real/x:rw /dev/z=/real/z:rw"},
                {{"rd", "other", "other2"}, 3,
                 "devices \"rd\" and \"other\" of resource example.com/run both use container "
                 "path \"/dev/x\" for different host paths \"/real/x\" and \"/real/y\""},
                {{"other", "other2", "rd", "wr"}, 4,
                 "devices \"other\" and \"rd\" of resource example.com/run both use container "
                 "path \"/dev/x\" for different host paths \"/real/y\" and \"/real/x\""},
                /* devices of several nodes: each node against the same node of
                 * the device before */
                {{"g0", "g1"}, 2, "/dev/a=/real/a:rw /dev/b=/real/b:rw"},
                {{"g0", "z", "g1"}, 3, "/dev/a=/real/a:rw /dev/b=/real/b:rw /dev/z=/real/z:rw"},
                {{"g0", "g2", "g1"}, 3,
                 "devices \"g0\" and \"g2\" of resource example.com/run both use container "
                 "path \"/dev/a\" for different host paths \"/real/a\" and \"/real/other\""},
                {{"g2", "g0", "g1"}, 3,
                 "devices \"g2\" and \"g0\" of resource example.com/run both use container "
                 "path \"/dev/a\" for different host paths \"/real/other\" and \"/real/a\""},
        };
        for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
                V1beta1__ContainerAllocateResponse resp =
                        V1BETA1__CONTAINER_ALLOCATE_RESPONSE__INIT;
                int rc = kdev_plugin_allocate(&r, cases[i].ids, cases[i].n, &resp, &e);
                if (strncmp(cases[i].want, "devices", 7) == 0) {
                        assert_int_equal(rc, -EINVAL);
                        assert_string_equal(e.msg, cases[i].want);
                        assert_int_equal(resp.n_devices, 0);
                } else {
                        assert_int_equal(rc, 0);
                        render(&resp, buf, sizeof(buf));
                        assert_string_equal(buf, cases[i].want);
                }
                kdev_allocate_response_free_contents(&resp);
        }
        kdev_resource_clear(&r);
}

/* Large resource and request: the sorted lookup path. */
static void test_allocate_large(void **state)
{
        (void)state;
        enum { N = 3000 };
        struct tdev *d = calloc(N, sizeof(*d));
        char (*ids)[32] = calloc(N, 32);
        char (*specs)[80] = calloc(N, 80);
        for (size_t i = 0; i < N; i++) {
                snprintf(ids[i], 32, "dev%zu", i);
                snprintf(specs[i], 80, "/dev/d%zu=/dev/d%zu:rw", i % 100, i % 100);
                d[i] = (struct tdev){ids[i], -1, true, specs[i]};
        }
        struct kdev_resource r;
        make_resource(&r, "example.com/many", d, N);
        const char **req = calloc(N, sizeof(*req));
        for (size_t i = 0; i < N; i++)
                req[i] = ids[N - 1 - i];
        V1beta1__ContainerAllocateResponse resp = V1BETA1__CONTAINER_ALLOCATE_RESPONSE__INIT;
        struct kdev_err e;
        assert_int_equal(kdev_plugin_allocate(&r, req, N, &resp, &e), 0);
        assert_int_equal(resp.n_devices, 100);
        /* first requested is dev2999 -> /dev/d99 */
        assert_string_equal(resp.devices[0]->container_path, "/dev/d99");
        assert_string_equal(resp.devices[99]->container_path, "/dev/d0");
        kdev_allocate_response_free_contents(&resp);
        req[N / 2] = "nope";
        assert_int_equal(kdev_plugin_allocate(&r, req, N, &resp, &e), -EINVAL);
        assert_string_equal(e.msg, "unknown device \"nope\" for resource example.com/many");
        req[N / 2] = ids[7];
        assert_int_equal(kdev_plugin_allocate(&r, req, N, &resp, &e), -EINVAL);
        assert_string_equal(e.msg,
                            "device \"dev7\" of resource example.com/many is requested more "
                            "than once");
        free(req);
        kdev_resource_clear(&r);
        free(d);
        free(ids);
        free(specs);
}

static void test_free_contents_all_fields(void **state)
{
        (void)state;
        V1beta1__ContainerAllocateResponse resp = V1BETA1__CONTAINER_ALLOCATE_RESPONSE__INIT;
        resp.n_envs = 1;
        resp.envs = calloc(1, sizeof(*resp.envs));
        resp.envs[0] = malloc(sizeof(*resp.envs[0]));
        V1beta1__ContainerAllocateResponse__EnvsEntry ee =
                V1BETA1__CONTAINER_ALLOCATE_RESPONSE__ENVS_ENTRY__INIT;
        *resp.envs[0] = ee;
        resp.envs[0]->key = strdup("K"); /* value stays protobuf_c_empty_string */
        resp.n_cdi_devices = 1;
        resp.cdi_devices = calloc(1, sizeof(*resp.cdi_devices));
        resp.cdi_devices[0] = malloc(sizeof(*resp.cdi_devices[0]));
        V1beta1__CDIDevice cd = V1BETA1__CDIDEVICE__INIT;
        *resp.cdi_devices[0] = cd;
        resp.cdi_devices[0]->name = strdup("example.com/x=a");
        resp.n_mounts = 1;
        resp.mounts = calloc(1, sizeof(*resp.mounts));
        resp.mounts[0] = malloc(sizeof(*resp.mounts[0]));
        V1beta1__Mount mo = V1BETA1__MOUNT__INIT;
        *resp.mounts[0] = mo;
        resp.mounts[0]->host_path = strdup("/h");
        resp.n_annotations = 1;
        resp.annotations = calloc(1, sizeof(*resp.annotations));
        resp.annotations[0] = malloc(sizeof(*resp.annotations[0]));
        V1beta1__ContainerAllocateResponse__AnnotationsEntry ae =
                V1BETA1__CONTAINER_ALLOCATE_RESPONSE__ANNOTATIONS_ENTRY__INIT;
        *resp.annotations[0] = ae;
        resp.annotations[0]->value = strdup("v");
        kdev_allocate_response_free_contents(&resp);
        assert_int_equal(resp.n_envs + resp.n_mounts + resp.n_annotations + resp.n_cdi_devices, 0);
        kdev_allocate_response_free_contents(&resp);
        kdev_allocate_response_free_contents(NULL);
}

/* --- preferred ------------------------------------------------------------------- */

static const struct tdev numa_devs[] = {
        {"gpu0", 0, true, NULL},  {"gpu1", 0, true, NULL},  {"gpu2", 1, true, NULL},
        {"gpu3", 1, true, NULL},  {"gpu4", 1, true, NULL},  {"gpu10", 0, true, NULL},
        {"gpu11", -1, true, NULL}, {"gpu12", -1, true, NULL},
};

static void join(char **v, size_t n, char *buf, size_t len)
{
        size_t used = 0;
        buf[0] = '\0';
        for (size_t i = 0; i < n; i++)
                used += (size_t)snprintf(buf + used, len - used, "%s%s", i ? " " : "", v[i]);
}

struct pref_case {
        const char *avail[9];
        size_t n_avail;
        const char *must[4];
        size_t n_must;
        int size;
        const char *want;
};

/* Backend hook: adds TEST_IDS=<ids joined by ','>, or fails on "bad". */
static int hook_allocate(void *data, const struct kdev_resource *r,
                         const struct kdev_device *const *devs, size_t n,
                         struct kdev_container_edits *out, struct kdev_err *err)
{
        int *calls = data;
        (*calls)++;
        char buf[256] = "";
        for (size_t i = 0; i < n; i++) {
                if (strcmp(devs[i]->id, "bad") == 0)
                        return kdev_err_set(err, EIO, "hook failed for %s", r->name);
                if (i)
                        strcat(buf, ",");
                strcat(buf, devs[i]->id);
        }
        return kdev_edits_set_env(out, "TEST_IDS", buf, err);
}

static void test_allocate_ops_hook(void **state)
{
        (void)state;
        static const struct tdev devs[] = {
                {"a", -1, true, "/dev/a=/dev/a:rw"},
                {"bad", -1, true, "/dev/b=/dev/b:rw"},
        };
        struct kdev_resource r;
        make_resource(&r, "example.com/x", devs, 2);
        int calls = 0;
        static const struct kdev_resource_ops ops = {.allocate = hook_allocate};
        r.ops = &ops;
        r.ops_data = &calls;
        struct kdev_err err = {0};

        V1beta1__ContainerAllocateResponse out = V1BETA1__CONTAINER_ALLOCATE_RESPONSE__INIT;
        const char *ok[] = {"a"};
        assert_int_equal(kdev_plugin_allocate(&r, ok, 1, &out, &err), 0);
        assert_int_equal(calls, 1);
        assert_int_equal(out.n_devices, 1);
        assert_string_equal(out.devices[0]->container_path, "/dev/a");
        assert_int_equal(out.n_envs, 1);
        assert_string_equal(out.envs[0]->key, "TEST_IDS");
        assert_string_equal(out.envs[0]->value, "a");
        kdev_allocate_response_free_contents(&out);

        const char *bad[] = {"a", "bad"};
        assert_int_equal(kdev_plugin_allocate(&r, bad, 2, &out, &err), -EIO);
        assert_string_equal(err.msg, "hook failed for example.com/x");
        assert_int_equal(out.n_devices, 0);
        assert_null(out.devices);
        assert_int_equal(out.n_envs, 0);

        const char *unknown[] = {"zz"};
        assert_int_equal(kdev_plugin_allocate(&r, unknown, 1, &out, &err), -EINVAL);
        assert_int_equal(calls, 2); /* not called for a request that fails validation */
        r.ops = NULL;
        kdev_resource_clear(&r);
}

/* kdev_resource_edits into edits with an allocator (the device plugin's
 * Allocate): the same nodes, merges and errors as without one, everything
 * (the hook's env too) from the allocator; such edits cannot be taken over
 * by kdev_plugin_allocate_response. */
static void test_allocate_with_allocator(void **state)
{
        (void)state;
        static const struct tdev devs[] = {
                {"pair", -1, true, "/dev/a=/real/a:r,/dev/b=/real/b:rw"},
                {"pair2", -1, true, "/dev/b=/real/b:m,/dev/c=/real/c:rw"},
                {"clash", -1, true, "/dev/a=/real/other:rw"},
                {"bad", -1, true, "/dev/d=/dev/d:rw"},
        };
        struct kdev_resource r;
        make_resource(&r, "example.com/x", devs, 4);
        int calls = 0;
        static const struct kdev_resource_ops ops = {.allocate = hook_allocate};
        r.ops = &ops;
        r.ops_data = &calls;
        static struct pool pool = {.left = -1};
        const struct kdev_edits_allocator alloc = {pool_alloc, &pool};
        struct kdev_container_edits e = {.allocator = &alloc};
        struct kdev_err err = {0};

        const char *ids[] = {"pair2", "pair"};
        assert_int_equal(kdev_resource_edits(&r, ids, 2, &e, &err), 0);
        assert_int_equal(e.n_nodes, 3);
        const char *want[][3] = {{"/dev/b", "/real/b", "rwm"},
                                 {"/dev/c", "/real/c", "rw"},
                                 {"/dev/a", "/real/a", "r"}};
        for (size_t i = 0; i < 3; i++) {
                assert_string_equal(e.nodes[i].path, want[i][0]);
                assert_string_equal(e.nodes[i].host_path, want[i][1]);
                assert_string_equal(e.nodes[i].permissions, want[i][2]);
                assert_true(in_pool(&pool, e.nodes[i].path));
                assert_true(in_pool(&pool, e.nodes[i].permissions));
        }
        assert_true(in_pool(&pool, e.nodes));
        assert_int_equal(e.n_env, 1);
        assert_string_equal(e.env[0].value, "pair2,pair");
        assert_true(in_pool(&pool, e.env[0].value));

        V1beta1__ContainerAllocateResponse out = V1BETA1__CONTAINER_ALLOCATE_RESPONSE__INIT;
        assert_int_equal(kdev_plugin_allocate_response(&e, &out, &err), -EINVAL);
        assert_string_equal(err.msg, "kdev_plugin_allocate_response: the edits' strings come "
                                     "from an allocator and cannot be taken over");
        assert_int_equal(out.n_devices, 0);
        assert_string_equal(e.nodes[0].path, "/dev/b"); /* nothing moved */
        kdev_container_edits_clear(&e);
        assert_ptr_equal(e.allocator, &alloc);

        const char *clash[] = {"pair", "clash"};
        assert_int_equal(kdev_resource_edits(&r, clash, 2, &e, &err), -EINVAL);
        assert_string_equal(err.msg, "devices \"pair\" and \"clash\" of resource example.com/x "
                                     "both use container path \"/dev/a\" for different host "
                                     "paths \"/real/a\" and \"/real/other\"");
        assert_int_equal(e.n_nodes, 0);
        const char *bad[] = {"pair", "bad"};
        assert_int_equal(kdev_resource_edits(&r, bad, 2, &e, &err), -EIO);
        assert_string_equal(err.msg, "hook failed for example.com/x");
        assert_int_equal(e.n_nodes, 0); /* cleared, the allocator kept */
        assert_null(e.nodes);
        assert_ptr_equal(e.allocator, &alloc);
        const char *again[] = {"pair", "pair"};
        assert_int_equal(kdev_resource_edits(&r, again, 2, &e, &err), -EINVAL);
        assert_string_equal(err.msg,
                            "device \"pair\" of resource example.com/x is requested more than once");
        r.ops = NULL;
        kdev_resource_clear(&r);
}

static void test_preferred(void **state)
{
        (void)state;
        struct kdev_resource r;
        make_resource(&r, "example.com/gpu", numa_devs, sizeof(numa_devs) / sizeof(numa_devs[0]));
        const struct pref_case cases[] = {
                /* node 1 has most available (3 against 2) */
                {{"gpu0", "gpu1", "gpu2", "gpu3", "gpu4", "gpu11", "gpu12"}, 7, {NULL}, 0, 2,
                 "gpu2 gpu3"},
                /* same sets, other order: same answer */
                {{"gpu12", "gpu4", "gpu3", "gpu2", "gpu11", "gpu1", "gpu0"}, 7, {NULL}, 0, 2,
                 "gpu2 gpu3"},
                /* 3 against 3: the lower node; natural order gpu1 < gpu10 */
                {{"gpu10", "gpu1", "gpu2", "gpu3", "gpu4", "gpu0"}, 6, {NULL}, 0, 3,
                 "gpu0 gpu1 gpu10"},
                /* must on node 0 pulls node 0 devices first, natural order gpu1 < gpu10 */
                {{"gpu0", "gpu1", "gpu2", "gpu3", "gpu4", "gpu10"}, 6, {"gpu0"}, 1, 3,
                 "gpu0 gpu1 gpu10"},
                /* then the biggest other node; devices without a node last */
                {{"gpu0", "gpu1", "gpu2", "gpu3", "gpu4", "gpu11"}, 6, {"gpu0"}, 1, 5,
                 "gpu0 gpu1 gpu2 gpu3 gpu4"},
                {{"gpu0", "gpu11", "gpu12"}, 3, {NULL}, 0, 3, "gpu0 gpu11 gpu12"},
                /* tie between nodes with equal counts: lower node first */
                {{"gpu0", "gpu2", "gpu11"}, 3, {NULL}, 0, 1, "gpu0"},
                /* must listed in natural order first even if off-node */
                {{"gpu12", "gpu11", "gpu2", "gpu3"}, 4, {"gpu12", "gpu11"}, 2, 3,
                 "gpu11 gpu12 gpu2"},
                /* not feasible: all available */
                {{"gpu3", "gpu2"}, 2, {NULL}, 0, 5, "gpu2 gpu3"},
                /* size 0 */
                {{"gpu3", "gpu2"}, 2, {NULL}, 0, 0, ""},
                /* repeats count once */
                {{"gpu3", "gpu3", "gpu2"}, 3, {"gpu3", "gpu3"}, 2, 1, "gpu3"},
                {{"gpu3", "gpu3"}, 2, {NULL}, 0, 2, "gpu3"},
                /* size == must */
                {{"gpu0", "gpu2", "gpu3"}, 3, {"gpu3", "gpu0"}, 2, 2, "gpu0 gpu3"},
        };
        for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
                char **out = (char **)1;
                size_t n = 99;
                struct kdev_err e;
                kdev_err_clear(&e);
                int rc = kdev_resource_preferred(&r, cases[i].avail, cases[i].n_avail,
                                                 cases[i].must, cases[i].n_must, cases[i].size,
                                                 &out, &n, &e);
                if (rc != 0)
                        fail_msg("case %zu: %s", i, e.msg);
                char buf[256];
                join(out, n, buf, sizeof(buf));
                if (strcmp(buf, cases[i].want) != 0)
                        fail_msg("case %zu: got \"%s\", want \"%s\"", i, buf, cases[i].want);
                if (n == 0)
                        assert_null(out);
                kdev_strv_free(out, n);
        }
        kdev_resource_clear(&r);
}

struct pref_err {
        const char *avail[4];
        size_t n_avail;
        const char *must[4];
        size_t n_must;
        int size;
        const char *msg;
};

static void test_preferred_errors(void **state)
{
        (void)state;
        struct kdev_resource r;
        make_resource(&r, "example.com/gpu", numa_devs, sizeof(numa_devs) / sizeof(numa_devs[0]));
        const struct pref_err cases[] = {
                {{"gpu0", "nope"}, 2, {NULL}, 0, 1,
                 "unknown device \"nope\" for resource example.com/gpu in the available devices"},
                {{"gpu0"}, 1, {"what"}, 1, 1,
                 "unknown device \"what\" for resource example.com/gpu in the must-include "
                 "devices"},
                {{"gpu0", "gpu1"}, 2, {"gpu1", "gpu2"}, 2, 2,
                 "must-include device \"gpu2\" of resource example.com/gpu is not among the "
                 "available devices"},
                {{"gpu0", "gpu1"}, 2, {"gpu1", "gpu0"}, 2, 1,
                 "allocation size 1 for resource example.com/gpu is smaller than the 2 "
                 "must-include devices"},
                {{"gpu0"}, 1, {NULL}, 0, -1,
                 "allocation size -1 for resource example.com/gpu is negative"},
        };
        for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
                char **out = (char **)1;
                size_t n = 99;
                struct kdev_err e;
                kdev_err_clear(&e);
                int rc = kdev_resource_preferred(&r, cases[i].avail, cases[i].n_avail,
                                                 cases[i].must, cases[i].n_must, cases[i].size,
                                                 &out, &n, &e);
                assert_int_equal(rc, -EINVAL);
                assert_string_equal(e.msg, cases[i].msg);
                assert_null(out);
                assert_int_equal(n, 0);
        }
        kdev_resource_clear(&r);
}

/* Every permutation-free check of determinism: shuffle the same set many times. */
static void test_preferred_deterministic(void **state)
{
        (void)state;
        enum { N = 40 };
        struct tdev d[N];
        char ids[N][16];
        for (int i = 0; i < N; i++) {
                snprintf(ids[i], sizeof(ids[i]), "ttyS%d", i);
                d[i] = (struct tdev){ids[i], i % 3 == 0 ? -1 : i % 4, true, NULL};
        }
        struct kdev_resource r;
        make_resource(&r, "example.com/tty", d, N);
        const char *avail[N];
        for (int i = 0; i < N; i++)
                avail[i] = ids[i];
        const char *must[] = {"ttyS5", "ttyS10"};
        char first[1024] = "";
        unsigned seed = 12345;
        for (int round = 0; round < 50; round++) {
                for (int i = N - 1; i > 0; i--) {
                        seed = seed * 1103515245u + 12345u;
                        int j = (int)((seed >> 16) % (unsigned)(i + 1));
                        const char *t = avail[i];
                        avail[i] = avail[j];
                        avail[j] = t;
                }
                char **out;
                size_t n;
                assert_int_equal(kdev_resource_preferred(&r, avail, N, must, 2, 7, &out, &n, NULL),
                                 0);
                assert_int_equal(n, 7);
                char buf[1024];
                join(out, n, buf, sizeof(buf));
                kdev_strv_free(out, n);
                if (round == 0)
                        strcpy(first, buf);
                else
                        assert_string_equal(buf, first);
        }
        /* must first (natural order), then must's nodes (ttyS5: node 1, ttyS10: node 2),
         * 6 candidates each, so the lower node 1 first */
        assert_string_equal(first, "ttyS5 ttyS10 ttyS1 ttyS13 ttyS17 ttyS25 ttyS29");
        kdev_resource_clear(&r);
}

int main(void)
{
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_allocate_specs),
                cmocka_unit_test(test_allocate_errors),
                cmocka_unit_test(test_allocate_runs_of_equal_nodes),
                cmocka_unit_test(test_allocate_large),
                cmocka_unit_test(test_allocate_ops_hook),
                cmocka_unit_test(test_allocate_with_allocator),
                cmocka_unit_test(test_free_contents_all_fields),
                cmocka_unit_test(test_preferred),
                cmocka_unit_test(test_preferred_errors),
                cmocka_unit_test(test_preferred_deterministic),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
