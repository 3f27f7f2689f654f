/* DRA plugin shares (plugin.h "Shares", dra/shares.c: KEP-5075 consumable
 * capacity): each error of parsing and resolving a share, the device record
 * the checkpoint keeps, the capacity sum rule, shares and whole-device
 * claims excluding each other, and the region directories, through the
 * plugin's public API with a fake claim source and NVML-free GPU records. */
#include <dirent.h>
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "claim_source.h"
#include "cdi/cdi.h"
#include "dra/checkpoint.h"
#include "dra/plugin.h"
#include "nvml/discover.h"
#include "tmptree.h"

#define UID1 "0b6a1c9e-1111-4c2e-9a43-aaaaaaaaaaaa"
#define UID2 "0b6a1c9e-2222-4c2e-9a43-bbbbbbbbbbbb"
#define UID3 "0b6a1c9e-3333-4c2e-9a43-cccccccccccc"
#define UIDW "0b6a1c9e-4444-4c2e-9a43-dddddddddddd"
#define SID1 "5a1e0001-0000-4000-8000-000000000001"
#define SID2 "5a1e0002-0000-4000-8000-000000000002"
#define SID3 "5a1e0003-0000-4000-8000-000000000003"
#define GIB (1ull << 30)
#define GPU_MEMORY (40 * GIB) /* each GPU of the fixture */
#define R0 ".status.allocation.devices.results[0]"

struct fix {
        char root[256], data[300], cdi[300], proc[300], share[300];
        struct kdev_gpu gpus[2];
        struct kdev_gpu_set set;
        struct kdev_nvidia_gpus recs; /* |set| as the NVIDIA backend's records */
        struct claim_source src;      /* the claims the plugin reads */
        bool no_share_root; /* new_plugin: options.share_root NULL */
        struct kdev_dra_plugin *p;
};

static void add_claim(struct fix *f, const char *name, const char *uid, json_t *results)
{
        char key[256];
        json_t *c = json_pack("{s:{s:s,s:s,s:s},s:{s:{s:{s:o}}}}", "metadata", "name", name,
                              "namespace", "ns", "uid", uid, "status", "allocation", "devices",
                              "results", results);

        assert_non_null(c);
        snprintf(key, sizeof(key), "ns/%s", name);
        json_object_set_new(f->src.claims, key, c);
}

static json_t *result(const char *dev)
{
        return json_pack("{s:s,s:s,s:s,s:s}", "request", "gpu", "driver", "gpu.nvidia.com",
                         "pool", "node1", "device", dev);
}

/* A result of |dev| with shareID |sid| (a JSON value, stolen; NULL: none)
 * and consumedCapacity |cc| (stolen; NULL: none). */
static json_t *share_result_j(const char *dev, json_t *sid, json_t *cc)
{
        json_t *r = result(dev);

        assert_non_null(r);
        if (sid)
                assert_int_equal(json_object_set_new(r, "shareID", sid), 0);
        if (cc)
                assert_int_equal(json_object_set_new(r, "consumedCapacity", cc), 0);
        return r;
}

/* A share of |dev|: shareID |sid|, consumedCapacity memory |mem| and compute
 * |cpu| (each NULL: not consumed explicitly). */
static json_t *share_result(const char *dev, const char *sid, const char *mem, const char *cpu)
{
        json_t *cc = json_object();

        assert_non_null(cc);
        if (mem)
                json_object_set_new(cc, "memory", json_string(mem));
        if (cpu)
                json_object_set_new(cc, "compute", json_string(cpu));
        return share_result_j(dev, json_string(sid), cc);
}

static void sync_gpus(struct fix *f)
{
        struct kdev_err err = {0};

        kdev_nvidia_gpus_clear(&f->recs);
        assert_int_equal(kdev_nvidia_gpus_from_set(&f->set, &f->recs, &err), 0);
}

static void new_plugin(struct fix *f)
{
        struct kdev_dra_plugin_options o = {
                .pool = "node1",
                .data_dir = f->data,
                .cdi_dir = f->cdi,
                .dev_root = f->root, /* no control nodes there */
                .proc_root = f->proc,
                .gpus = &f->recs,
                .share_root = f->no_share_root ? NULL : f->share,
                .get_claim = claim_source_get,
                .get_claim_arg = &f->src,
        };
        struct kdev_err err = {0};

        sync_gpus(f);
        assert_int_equal(kdev_dra_plugin_new(&o, &f->p, &err), 0);
}

static void restart(struct fix *f)
{
        kdev_dra_plugin_free(f->p);
        f->p = NULL;
        new_plugin(f);
}

static int setup(void **state)
{
        struct fix *f = calloc(1, sizeof(*f));

        assert_non_null(f);
        strcpy(f->root, "/tmp/kdev-dra-shares-XXXXXX");
        assert_non_null(mkdtemp(f->root));
        snprintf(f->data, sizeof(f->data), "%s/data", f->root);
        snprintf(f->cdi, sizeof(f->cdi), "%s/cdi", f->root);
        snprintf(f->proc, sizeof(f->proc), "%s/proc", f->root);
        snprintf(f->share, sizeof(f->share), "%s/share", f->root);
        assert_int_equal(mkdir(f->share, 0755), 0);
        for (unsigned i = 0; i < 2; i++) {
                f->gpus[i].index = i;
                f->gpus[i].minor = i + 4; /* minor != index on purpose */
                snprintf(f->gpus[i].uuid, sizeof(f->gpus[i].uuid), "GPU-0000000%u", i);
                f->gpus[i].memory_total = GPU_MEMORY;
                f->gpus[i].memory_ret = NVML_SUCCESS;
        }
        f->set.gpus = f->gpus;
        f->set.n_gpus = 2;
        f->src.claims = json_object();
        new_plugin(f);
        *state = f;
        return 0;
}

static int teardown(void **state)
{
        struct fix *f = *state;

        kdev_dra_plugin_free(f->p);
        kdev_nvidia_gpus_clear(&f->recs);
        json_decref(f->src.claims);
        tmptree_remove(f->root);
        free(f);
        return 0;
}

static bool exists(const char *path)
{
        struct stat st;

        return lstat(path, &st) == 0;
}

static void region_path(const struct fix *f, const char *uid, const char *dev, char *buf,
                        size_t size)
{
        snprintf(buf, size, "%s/claims/%s-%s", f->share, uid, dev);
}

static char *read_text(const char *path)
{
        FILE *fp = fopen(path, "r");
        char *buf = calloc(1, 65536);
        size_t n;

        assert_non_null(fp);
        assert_non_null(buf);
        n = fread(buf, 1, 65535, fp);
        buf[n] = '\0';
        fclose(fp);
        return buf;
}

static void expect_text(const char *path, const char *want)
{
        char *got = read_text(path);

        assert_string_equal(got, want);
        free(got);
}

static mode_t mode_of(const char *path)
{
        struct stat st;

        assert_int_equal(lstat(path, &st), 0);
        return st.st_mode;
}

/* |got| equals |want| (stolen). */
static void expect_json(const json_t *got, json_t *want)
{
        assert_non_null(want);
        if (!json_equal((json_t *)got, want)) {
                char *g = json_dumps(got, JSON_SORT_KEYS | JSON_ENCODE_ANY);
                char *w = json_dumps(want, JSON_SORT_KEYS | JSON_ENCODE_ANY);

                fprintf(stderr, "got  %s\nwant %s\n", g ? g : "(null)", w ? w : "(null)");
                free(g);
                free(w);
                json_decref(want);
                fail();
        }
        json_decref(want);
}

/* The devices the checkpoint on disk records for |uid| into |c| (free
 * with kdev_dra_cp_free). */
static const json_t *cp_devices(const struct fix *f, struct kdev_dra_cp *c, const char *uid)
{
        char path[600];
        struct kdev_err err = {0};

        snprintf(path, sizeof(path), "%s/%s", f->data, KDEV_DRA_CP_FILE);
        assert_int_equal(kdev_dra_cp_load(c, path, &err), 0);
        return json_object_get(kdev_dra_cp_get(c, uid), "devices");
}

/* Preparing claim ns/|name| (|uid|) fails with |rc| and exactly |msg|, and
 * leaves nothing: no record, no CDI spec, no region of |dev|. */
static void expect_fail(struct fix *f, const char *name, const char *uid, const char *dev,
                        int rc, const char *msg)
{
        struct kdev_err err = {0};
        const json_t *devs = (const json_t *)1;
        char path[1024];
        size_t before = kdev_dra_plugin_prepared(f->p);

        assert_int_equal(kdev_dra_prepare_claim(f->p, "ns", name, uid, &devs, &err), rc);
        assert_string_equal(err.msg, msg);
        assert_int_equal(err.code, -rc);
        assert_int_equal(kdev_dra_plugin_prepared(f->p), before);
        assert_true(kdev_dra_claim_spec_path(f->p, uid, path, sizeof(path), NULL) > 0);
        assert_false(exists(path));
        region_path(f, uid, dev, path, sizeof(path));
        assert_false(exists(path));
}

static void prepare_ok(struct fix *f, const char *name, const char *uid)
{
        struct kdev_err err = {0};
        const json_t *devs = NULL;

        if (kdev_dra_prepare_claim(f->p, "ns", name, uid, &devs, &err) != 0)
                fail_msg("prepare ns/%s: %s", name, err.msg);
        assert_non_null(devs);
}

/* Parse errors (kdev_dra_share_parse): one case each. */

static void test_capacity_without_share_id(void **state)
{
        struct fix *f = *state;

        add_claim(f, "s1", UID1,
                  json_pack("[o]", share_result_j("gpu-4", NULL,
                                                  json_pack("{s:s}", "memory", "1Gi"))));
        expect_fail(f, "s1", UID1, "gpu-4", -EINVAL,
                    "claim ns/s1: " R0 ".consumedCapacity is set without a shareID: only a "
                    "device published with allowMultipleAllocations is shared");
}

static void test_capacity_not_published(void **state)
{
        struct fix *f = *state;

        add_claim(f, "s1", UID1,
                  json_pack("[o]", share_result_j("gpu-4", json_string(SID1),
                                                  json_pack("{s:s,s:s}", "memory", "1Gi",
                                                            "multiprocessors", "10"))));
        expect_fail(f, "s1", UID1, "gpu-4", -EINVAL,
                    "claim ns/s1: " R0 ".consumedCapacity.multiprocessors: device gpu-4 has no "
                    "capacity \"multiprocessors\" (kdev publishes memory and compute)");
}

static void test_memory_not_a_size(void **state)
{
        struct fix *f = *state;

        add_claim(f, "s1", UID1, json_pack("[o]", share_result("gpu-4", SID1, "20GB", "10")));
        expect_fail(f, "s1", UID1, "gpu-4", -EINVAL,
                    "claim ns/s1: " R0 ".consumedCapacity.memory: must be a size in bytes (e.g. "
                    "10Gi, 512Mi, 20G or 1073741824), got \"20GB\"");
}

/* 2^63 bytes: a size kdev_nvidia_parse_memory reads, but not a JSON integer
 * of the record (it came out negative: "its memory is unknown"). */
static void test_memory_too_large(void **state)
{
        struct fix *f = *state;

        add_claim(f, "s1", UID1, json_pack("[o]", share_result("gpu-4", SID1, "8192Pi", "10")));
        expect_fail(f, "s1", UID1, "gpu-4", -EINVAL,
                    "claim ns/s1: " R0 ".consumedCapacity.memory: must be at most "
                    "9223372036854775807 bytes, got \"8192Pi\"");
}

static void compute_refused(struct fix *f, const char *cpu)
{
        char want[512];

        add_claim(f, "s1", UID1, json_pack("[o]", share_result("gpu-4", SID1, "1Gi", cpu)));
        snprintf(want, sizeof(want),
                 "claim ns/s1: " R0 ".consumedCapacity.compute: must be a whole percentage of "
                 "the GPU, 1 to 100, got \"%s\"",
                 cpu);
        expect_fail(f, "s1", UID1, "gpu-4", -EINVAL, want);
}

static void test_compute_0(void **state)
{
        compute_refused(*state, "0");
}

static void test_compute_101(void **state)
{
        compute_refused(*state, "101");
}

static void test_compute_abc(void **state)
{
        compute_refused(*state, "abc");
}

static void test_share_id_not_a_string(void **state)
{
        struct fix *f = *state;

        add_claim(f, "s1", UID1,
                  json_pack("[o]", share_result_j("gpu-4", json_integer(42),
                                                  json_pack("{s:s}", "memory", "1Gi"))));
        expect_fail(f, "s1", UID1, "gpu-4", -EPROTO,
                    "claim ns/s1: " R0 ".shareID: expected a string, got a number");
}

static void test_consumed_capacity_not_an_object(void **state)
{
        struct fix *f = *state;

        add_claim(f, "s1", UID1,
                  json_pack("[o]", share_result_j("gpu-4", json_string(SID1),
                                                  json_pack("[s]", "1Gi"))));
        expect_fail(f, "s1", UID1, "gpu-4", -EPROTO,
                    "claim ns/s1: " R0 ".consumedCapacity: expected an object, got an array");
}

static void test_capacity_not_a_string(void **state)
{
        struct fix *f = *state;

        add_claim(f, "s1", UID1,
                  json_pack("[o]", share_result_j("gpu-4", json_string(SID1),
                                                  json_pack("{s:I}", "memory",
                                                            (json_int_t)GIB))));
        expect_fail(f, "s1", UID1, "gpu-4", -EPROTO,
                    "claim ns/s1: " R0 ".consumedCapacity.memory: expected a string, got a "
                    "number");
}

static void test_second_share_of_device(void **state)
{
        struct fix *f = *state;

        add_claim(f, "s1", UID1,
                  json_pack("[o,o]", share_result("gpu-4", SID1, "1Gi", "10"),
                            share_result("gpu-4", SID2, "2Gi", "20")));
        expect_fail(f, "s1", UID1, "gpu-4", -EINVAL,
                    "claim ns/s1: device gpu-4 is allocated more than once to this claim as a "
                    "share: not supported");
}

/* One device both whole and as a share in one claim, in both orders. */
static void test_whole_and_share_of_device(void **state)
{
        struct fix *f = *state;

        add_claim(f, "s1", UID1,
                  json_pack("[o,o]", result("gpu-4"), share_result("gpu-4", SID1, "1Gi", "10")));
        expect_fail(f, "s1", UID1, "gpu-4", -EINVAL,
                    "claim ns/s1: .status.allocation.devices.results[1]: device gpu-4 is "
                    "allocated both whole and as a share (shareID " SID1 ")");
        add_claim(f, "s1", UID1,
                  json_pack("[o,o]", share_result("gpu-4", SID1, "1Gi", "10"), result("gpu-4")));
        expect_fail(f, "s1", UID1, "gpu-4", -EINVAL,
                    "claim ns/s1: .status.allocation.devices.results[1]: device gpu-4 is "
                    "allocated both whole and as a share (shareID " SID1 ")");
}

/* Resolve errors (kdev_dra_share_resolve): one case each. */

/* GPU minor 5 in MIG mode with MIG device GI 1 / CI 0 (3g.20gb, GI profile
 * id 9, placement 0: "gpu-5-mig-3g20gb-9-0"). */
static void test_share_of_mig_device(void **state)
{
        struct fix *f = *state;
        static struct kdev_mig_device mig;

        memset(&mig, 0, sizeof(mig));
        snprintf(mig.name, sizeof(mig.name), "NVIDIA A100-SXM4-40GB MIG 3g.20gb");
        mig.gi_id = 1;
        mig.gi_profile.id = 9;
        snprintf(mig.uuid, sizeof(mig.uuid), "MIG-aaaa");
        f->gpus[1].mig_current = NVML_DEVICE_MIG_ENABLE;
        f->gpus[1].migs = &mig;
        f->gpus[1].n_migs = 1;
        sync_gpus(f);
        add_claim(f, "s1", UID1,
                  json_pack("[o]", share_result("gpu-5-mig-3g20gb-9-0", SID1, "1Gi", "10")));
        expect_fail(f, "s1", UID1, "gpu-5-mig-3g20gb-9-0", -EINVAL,
                    "claim ns/s1 (" UID1 "): device gpu-5-mig-3g20gb-9-0: a MIG device is not "
                    "published with allowMultipleAllocations; no share of it");
}

static void test_share_without_share_root(void **state)
{
        struct fix *f = *state;

        f->no_share_root = true;
        restart(f);
        add_claim(f, "s1", UID1, json_pack("[o]", share_result("gpu-4", SID1, "1Gi", "10")));
        expect_fail(f, "s1", UID1, "gpu-4", -EINVAL,
                    "claim ns/s1 (" UID1 "): device gpu-4: allocated as a share (shareID " SID1
                    "), but this node does not publish shareable GPUs (kdev-dra-plugin "
                    "--shareable-gpus is off)");
        char claims[600];

        snprintf(claims, sizeof(claims), "%s/claims", f->share);
        assert_false(exists(claims));
}

static void test_memory_unknown(void **state)
{
        struct fix *f = *state;

        f->gpus[0].memory_total = 0;
        f->gpus[0].memory_ret = NVML_ERROR_NOT_SUPPORTED;
        sync_gpus(f);
        add_claim(f, "s1", UID1, json_pack("[o]", share_result("gpu-4", SID1, NULL, "10")));
        expect_fail(f, "s1", UID1, "gpu-4", -EINVAL,
                    "claim ns/s1 (" UID1 "): device gpu-4 (GPU-00000000): its memory is "
                    "unknown; a share needs a memory size");
}

/* The device record of a valid share. */

static void expect_record(struct fix *f, const char *memory, const char *compute,
                          json_int_t want_memory, json_int_t want_compute)
{
        struct kdev_dra_cp c = {0};
        struct kdev_err err = {0};
        const json_t *devs = NULL;
        char region[1024];

        add_claim(f, "s1", UID1, json_pack("[o]", share_result("gpu-4", SID1, memory, compute)));
        assert_int_equal(kdev_dra_prepare_claim(f->p, "ns", "s1", UID1, &devs, &err), 0);
        region_path(f, UID1, "gpu-4", region, sizeof(region));
        json_t *want = json_pack("[{s:[s],s:s,s:s,s:{s:s,s:I,s:I,s:s,s:s},s:[s]}]",
                                 "requestNames", "gpu", "pool", "node1", "device", "gpu-4",
                                 "share", "shareID", SID1, "memory", want_memory, "compute",
                                 want_compute, "uuid", "GPU-00000000", "region", region,
                                 "cdiDeviceIDs", "k8s.gpu.nvidia.com/claim=" UID1 "-gpu-4");

        /* the answer and the checkpoint on disk */
        expect_json(devs, json_deep_copy(want));
        expect_json(cp_devices(f, &c, UID1), want);
        kdev_dra_cp_free(&c);
}

static void test_record_memory_gi(void **state)
{
        expect_record(*state, "20Gi", "25", (json_int_t)(20 * GIB), 25);
}

static void test_record_memory_mi(void **state)
{
        expect_record(*state, "20480Mi", "25", (json_int_t)(20 * GIB), 25);
}

static void test_record_memory_bytes(void **state)
{
        expect_record(*state, "21474836480", "25", (json_int_t)(20 * GIB), 25);
}

static void test_record_compute_missing(void **state)
{
        expect_record(*state, "20Gi", NULL, (json_int_t)(20 * GIB), 100);
}

static void test_record_memory_missing(void **state)
{
        expect_record(*state, NULL, "30", (json_int_t)GPU_MEMORY, 30);
}

/* The capacity sum rule (kdev_dra_share_check). */

static void test_sum_memory(void **state)
{
        struct fix *f = *state;
        struct kdev_dra_prepare_item v[3] = {
                {.ns = "ns", .name = "s1", .uid = UID1},
                {.ns = "ns", .name = "s2", .uid = UID2},
                {.ns = "ns", .name = "s3", .uid = UID3},
        };
        char region[1024];

        add_claim(f, "s1", UID1, json_pack("[o]", share_result("gpu-4", SID1, "20Gi", "10")));
        add_claim(f, "s2", UID2, json_pack("[o]", share_result("gpu-4", SID2, "15Gi", "10")));
        add_claim(f, "s3", UID3, json_pack("[o]", share_result("gpu-4", SID3, "10Gi", "10")));
        /* one call: the earlier claims of it count */
        assert_int_equal(kdev_dra_prepare_many(f->p, v, 3), 1);
        assert_int_equal(v[0].rc, 0);
        assert_int_equal(v[1].rc, 0);
        assert_int_equal(v[2].rc, -EBUSY);
        assert_string_equal(v[2].err.msg,
                            "claim ns/s3 (" UID3 "): device gpu-4: consumed capacity memory "
                            "10Gi (shareID " SID3 ") exceeds the 5Gi left of its 40Gi: 35Gi "
                            "held by claims ns/s1 (" UID1 "), ns/s2 (" UID2 ")");
        region_path(f, UID3, "gpu-4", region, sizeof(region));
        assert_false(exists(region));
        assert_int_equal(kdev_dra_plugin_prepared(f->p), 2);
        /* alone again, after its own call */
        expect_fail(f, "s3", UID3, "gpu-4", -EBUSY,
                    "claim ns/s3 (" UID3 "): device gpu-4: consumed capacity memory 10Gi "
                    "(shareID " SID3 ") exceeds the 5Gi left of its 40Gi: 35Gi held by claims "
                    "ns/s1 (" UID1 "), ns/s2 (" UID2 ")");
        /* the other GPU's capacity is its own */
        add_claim(f, "o1", UIDW, json_pack("[o]", share_result("gpu-5", SID3, "40Gi", "100")));
        prepare_ok(f, "o1", UIDW);
        /* s2 gone: s3 fits (20Gi + 10Gi) */
        struct kdev_err err = {0};

        assert_int_equal(kdev_dra_unprepare_claim(f->p, UID2, &err), 0);
        prepare_ok(f, "s3", UID3);
        assert_true(exists(region));
        assert_int_equal(kdev_dra_plugin_prepared(f->p), 3);
}

static void test_sum_compute(void **state)
{
        struct fix *f = *state;

        add_claim(f, "s1", UID1, json_pack("[o]", share_result("gpu-4", SID1, "1Gi", "60")));
        add_claim(f, "s2", UID2, json_pack("[o]", share_result("gpu-4", SID2, "1Gi", "30")));
        add_claim(f, "s3", UID3, json_pack("[o]", share_result("gpu-4", SID3, "1Gi", "20")));
        prepare_ok(f, "s1", UID1);
        prepare_ok(f, "s2", UID2);
        expect_fail(f, "s3", UID3, "gpu-4", -EBUSY,
                    "claim ns/s3 (" UID3 "): device gpu-4: consumed capacity compute 20 "
                    "(shareID " SID3 ") exceeds the 10 left of its 100: 90 held by claims "
                    "ns/s1 (" UID1 "), ns/s2 (" UID2 ")");
        /* a restart reads the holders from the checkpoint */
        restart(f);
        expect_fail(f, "s3", UID3, "gpu-4", -EBUSY,
                    "claim ns/s3 (" UID3 "): device gpu-4: consumed capacity compute 20 "
                    "(shareID " SID3 ") exceeds the 10 left of its 100: 90 held by claims "
                    "ns/s1 (" UID1 "), ns/s2 (" UID2 ")");
        /* exactly the 10 left fits */
        add_claim(f, "s3", UID3, json_pack("[o]", share_result("gpu-4", SID3, "1Gi", "10")));
        prepare_ok(f, "s3", UID3);
}

/* A share larger than the whole device, no other holder: the text said
 * "... held by claims " with nobody after it. */
static void test_sum_alone(void **state)
{
        struct fix *f = *state;

        add_claim(f, "s1", UID1, json_pack("[o]", share_result("gpu-4", SID1, "41Gi", "10")));
        expect_fail(f, "s1", UID1, "gpu-4", -EBUSY,
                    "claim ns/s1 (" UID1 "): device gpu-4: consumed capacity memory 41Gi "
                    "(shareID " SID1 ") exceeds its 40Gi (no other claim holds a share of it)");
}

/* Shares and whole-device claims exclude each other. */

static void test_share_then_whole(void **state)
{
        struct fix *f = *state;
        struct kdev_err err = {0};

        add_claim(f, "s1", UID1, json_pack("[o]", share_result("gpu-4", SID1, "1Gi", "10")));
        add_claim(f, "w", UIDW, json_pack("[o]", result("gpu-4")));
        prepare_ok(f, "s1", UID1);
        expect_fail(f, "w", UIDW, "gpu-4", -EBUSY,
                    "claim ns/w (" UIDW "): device gpu-4 is already prepared for claim ns/s1 "
                    "(" UID1 ") as a share (shareID " SID1 "): this allocation has no shareID "
                    "and needs the whole device");
        assert_int_equal(kdev_dra_unprepare_claim(f->p, UID1, &err), 0);
        prepare_ok(f, "w", UIDW);
}

static void test_whole_then_share(void **state)
{
        struct fix *f = *state;
        struct kdev_err err = {0};

        add_claim(f, "s1", UID1, json_pack("[o]", share_result("gpu-4", SID1, "1Gi", "10")));
        add_claim(f, "w", UIDW, json_pack("[o]", result("gpu-4")));
        prepare_ok(f, "w", UIDW);
        expect_fail(f, "s1", UID1, "gpu-4", -EBUSY,
                    "claim ns/s1 (" UID1 "): device gpu-4 is already prepared for claim ns/w "
                    "(" UIDW "), which holds it whole (no shareID): this allocation is a share "
                    "(shareID " SID1 ") and cannot be prepared beside it");
        assert_int_equal(kdev_dra_unprepare_claim(f->p, UIDW, &err), 0);
        prepare_ok(f, "s1", UID1);
}

/* The region directory (kdev_dra_share_make_regions, _remove_regions). */

static void expect_region(struct fix *f, const char *name, const char *uid, const char *sid,
                          const char *dev, const char *uuid, const char *mem, unsigned cpu)
{
        char region[1024], path[1100], want[1024];

        snprintf(path, sizeof(path), "%s/claims", f->share);
        assert_int_equal(mode_of(path), S_IFDIR | 0700);
        region_path(f, uid, dev, region, sizeof(region));
        assert_int_equal(mode_of(region), S_IFDIR | 01777);
        snprintf(path, sizeof(path), "%s/limits", region);
        snprintf(want, sizeof(want),
                 "# kdev-dra-plugin: claim ns/%s (%s)\n# device %s\n# share %s\n%s %s %u\n",
                 name, uid, dev, sid, uuid, mem, cpu);
        expect_text(path, want);
        assert_int_equal(mode_of(path), S_IFREG | 0444);
        snprintf(path, sizeof(path), "%s/ld.so.preload", region);
        expect_text(path, "/usr/lib/kdev/libkdev-share.so\n");
        assert_int_equal(mode_of(path), S_IFREG | 0444);
}

/* The claim's CDI device mounts the region (share_host.h
 * kdev_nvidia_share_claim_cdi_edits). */
static void expect_spec_mounts_region(struct fix *f, const char *uid, const char *dev)
{
        char path[1024], region[1024], name[256];
        struct kdev_cdi_spec *s = NULL;
        struct kdev_err err = {0};
        const struct kdev_cdi_device *d;
        bool found = false;

        assert_true(kdev_dra_claim_spec_path(f->p, uid, path, sizeof(path), NULL) > 0);
        assert_int_equal(kdev_cdi_spec_read(path, &s, &err), 0);
        snprintf(name, sizeof(name), "%s-%s", uid, dev);
        d = kdev_cdi_spec_find_device(s, name);
        assert_non_null(d);
        region_path(f, uid, dev, region, sizeof(region));
        for (size_t i = 0; i < d->edits.n_mounts; i++)
                if (!strcmp(d->edits.mounts[i].host_path, region) &&
                    !strcmp(d->edits.mounts[i].container_path, "/var/run/kdev/share"))
                        found = true;
        assert_true(found);
        kdev_cdi_spec_free(s);
}

static void test_region(void **state)
{
        struct fix *f = *state;
        struct kdev_err err = {0};
        char r1[1024], r2[1024], claims[600];

        /* umask must not change the modes */
        mode_t old = umask(077);

        add_claim(f, "s1", UID1, json_pack("[o]", share_result("gpu-4", SID1, "20Gi", "25")));
        add_claim(f, "s2", UID2, json_pack("[o]", share_result("gpu-4", SID2, "10Gi", "50")));
        prepare_ok(f, "s1", UID1);
        prepare_ok(f, "s2", UID2);
        umask(old);
        expect_region(f, "s1", UID1, SID1, "gpu-4", "GPU-00000000", "21474836480", 25);
        expect_region(f, "s2", UID2, SID2, "gpu-4", "GPU-00000000", "10737418240", 50);
        expect_spec_mounts_region(f, UID1, "gpu-4");
        region_path(f, UID1, "gpu-4", r1, sizeof(r1));
        region_path(f, UID2, "gpu-4", r2, sizeof(r2));
        /* unprepare removes its region only */
        assert_int_equal(kdev_dra_unprepare_claim(f->p, UID1, &err), 0);
        assert_false(exists(r1));
        assert_true(exists(r2));
        snprintf(claims, sizeof(claims), "%s/claims", f->share);
        assert_int_equal(mode_of(claims), S_IFDIR | 0700);
        assert_int_equal(kdev_dra_unprepare_claim(f->p, UID2, &err), 0);
        assert_false(exists(r2));
        assert_int_equal(kdev_dra_plugin_prepared(f->p), 0);
}

/* A region deleted behind kdev's back is made again by a repeated prepare of
 * the checkpointed claim, without reading the claim again; so is one whose
 * limits file alone is gone, and one gone with the whole share root across a
 * restart (a reboot). */
static void test_region_remade(void **state)
{
        struct fix *f = *state;
        char region[1024], limits[1100], claims[600];
        unsigned calls;

        add_claim(f, "s1", UID1, json_pack("[o]", share_result("gpu-4", SID1, "20Gi", "25")));
        prepare_ok(f, "s1", UID1);
        calls = f->src.calls;
        region_path(f, UID1, "gpu-4", region, sizeof(region));
        snprintf(limits, sizeof(limits), "%s/limits", region);
        snprintf(claims, sizeof(claims), "%s/claims", f->share);

        tmptree_remove(region);
        assert_false(exists(region));
        prepare_ok(f, "s1", UID1);
        expect_region(f, "s1", UID1, SID1, "gpu-4", "GPU-00000000", "21474836480", 25);

        assert_int_equal(unlink(limits), 0);
        prepare_ok(f, "s1", UID1);
        expect_region(f, "s1", UID1, SID1, "gpu-4", "GPU-00000000", "21474836480", 25);

        /* present: left as it is */
        assert_int_equal(chmod(limits, 0644), 0);
        prepare_ok(f, "s1", UID1);
        assert_int_equal(mode_of(limits), S_IFREG | 0644);
        assert_int_equal(chmod(limits, 0444), 0);

        tmptree_remove(claims);
        restart(f);
        prepare_ok(f, "s1", UID1);
        expect_region(f, "s1", UID1, SID1, "gpu-4", "GPU-00000000", "21474836480", 25);
        assert_int_equal(f->src.calls, calls);
        assert_int_equal(kdev_dra_plugin_prepared(f->p), 1);
}

/* A share of the checkpoint after a restart with shares off: its spec is
 * not rewritten without the share library (which would drop its limits). */
static void test_share_after_shares_off(void **state)
{
        struct fix *f = *state;
        struct kdev_err err = {0};
        char region[1024], want[1400];

        add_claim(f, "s1", UID1, json_pack("[o]", share_result("gpu-4", SID1, "20Gi", "25")));
        prepare_ok(f, "s1", UID1);
        region_path(f, UID1, "gpu-4", region, sizeof(region));
        f->no_share_root = true;
        restart(f);
        assert_int_equal(kdev_dra_prepare_claim(f->p, "ns", "s1", UID1, NULL, &err), -EINVAL);
        snprintf(want, sizeof(want),
                 "claim ns/s1 (" UID1 "): device gpu-4 was prepared as a share (region %s), "
                 "but shares are off now (kdev-dra-plugin --shareable-gpus); its spec is not "
                 "written without the share's limits",
                 region);
        assert_string_equal(err.msg, want);
        assert_int_equal(kdev_dra_plugin_prepared(f->p), 1);
}

#define T(fn) cmocka_unit_test_setup_teardown(fn, setup, teardown)

int main(void)
{
        const struct CMUnitTest tests[] = {
                T(test_capacity_without_share_id),
                T(test_capacity_not_published),
                T(test_memory_not_a_size),
                T(test_memory_too_large),
                T(test_compute_0),
                T(test_compute_101),
                T(test_compute_abc),
                T(test_share_id_not_a_string),
                T(test_consumed_capacity_not_an_object),
                T(test_capacity_not_a_string),
                T(test_second_share_of_device),
                T(test_whole_and_share_of_device),
                T(test_share_of_mig_device),
                T(test_share_without_share_root),
                T(test_memory_unknown),
                T(test_record_memory_gi),
                T(test_record_memory_mi),
                T(test_record_memory_bytes),
                T(test_record_compute_missing),
                T(test_record_memory_missing),
                T(test_sum_memory),
                T(test_sum_compute),
                T(test_sum_alone),
                T(test_share_then_whole),
                T(test_whole_then_share),
                T(test_region),
                T(test_region_remade),
                T(test_share_after_shares_off),
        };

        return cmocka_run_group_tests(tests, NULL, NULL);
}
