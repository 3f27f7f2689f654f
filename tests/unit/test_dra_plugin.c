/* DRA plugin core: claim preparation with a fake claim source, CDI specs,
 * checkpoint across restarts. */
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

struct fix {
        char root[256], data[300], cdi[300], proc[300];
        struct kdev_gpu gpus[2];
        struct kdev_gpu_set set;
        /* |set| as the NVIDIA backend's records, which the plugin reads
         * (refilled in place by sync_gpus after each change of |set|) */
        struct kdev_nvidia_gpus recs;
        struct claim_source src;      /* the claims the plugin reads */
        struct kdev_dra_plugin *p;
};

static void add_claim(struct fix *f, const char *ns, const char *name, const char *uid,
                      json_t *results)
{
        char key[256];
        json_t *c = json_pack("{s:{s:s,s:s,s:s},s:{s:{s:{s:o}}}}", "metadata", "name", name,
                              "namespace", ns, "uid", uid, "status", "allocation", "devices",
                              "results", results);

        assert_non_null(c);
        snprintf(key, sizeof(key), "%s/%s", ns, name);
        json_object_set_new(f->src.claims, key, c);
}

static json_t *result(const char *req, const char *driver, const char *pool, const char *dev)
{
        return json_pack("{s:s,s:s,s:s,s:s}", "request", req, "driver", driver, "pool", pool,
                         "device", dev);
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
                .get_claim = claim_source_get,
                .get_claim_arg = &f->src,
        };
        struct kdev_err err = {0};

        sync_gpus(f);
        assert_int_equal(kdev_dra_plugin_new(&o, &f->p, &err), 0);
}

static int setup(void **state)
{
        struct fix *f = calloc(1, sizeof(*f));

        strcpy(f->root, "/tmp/kdev-dra-plugin-XXXXXX");
        assert_non_null(mkdtemp(f->root));
        snprintf(f->data, sizeof(f->data), "%s/data", f->root);
        snprintf(f->cdi, sizeof(f->cdi), "%s/cdi", f->root);
        snprintf(f->proc, sizeof(f->proc), "%s/proc", f->root);
        for (unsigned i = 0; i < 2; i++) {
                f->gpus[i].index = i;
                f->gpus[i].minor = i + 4; /* minor != index on purpose */
                snprintf(f->gpus[i].uuid, sizeof(f->gpus[i].uuid), "GPU-0000000%u", i);
        }
        f->set.gpus = f->gpus;
        f->set.n_gpus = 2;
        f->src.claims = json_object();
        add_claim(f, "ns", "c1", UID1,
                  json_pack("[o,o,o]", result("gpu", "gpu.nvidia.com", "node1", "gpu-4"),
                            result("pair/sub", "gpu.nvidia.com", "node1", "gpu-5"),
                            result("x", "other.example.com", "node1", "dev-0")));
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

static void spec_path(struct fix *f, const char *uid, char *buf, size_t size)
{
        assert_true(kdev_dra_claim_spec_path(f->p, uid, buf, size, NULL) > 0);
}

static void check_spec(struct fix *f, const char *uid)
{
        char path[1024], want[1024];
        struct kdev_cdi_spec *s = NULL;
        struct kdev_err err = {0};
        const struct kdev_cdi_device *d;

        spec_path(f, uid, path, sizeof(path));
        snprintf(want, sizeof(want), "%s/k8s.gpu.nvidia.com-claim_%s.json", f->cdi, uid);
        assert_string_equal(path, want);
        assert_int_equal(kdev_cdi_spec_read(path, &s, &err), 0);
        assert_string_equal(s->kind, "k8s.gpu.nvidia.com/claim");
        assert_int_equal(s->n_devices, 2);
        snprintf(want, sizeof(want), "%s-gpu-4", uid);
        d = kdev_cdi_spec_find_device(s, want);
        assert_non_null(d);
        assert_int_equal(d->edits.n_device_nodes, 1);
        assert_string_equal(d->edits.device_nodes[0].path, "/dev/nvidia4");
        snprintf(want, sizeof(want), "%s-gpu-5", uid);
        d = kdev_cdi_spec_find_device(s, want);
        assert_non_null(d);
        assert_string_equal(d->edits.device_nodes[0].path, "/dev/nvidia5");
        assert_int_equal(s->edits.n_env, 1);
        assert_string_equal(s->edits.env[0], "NVIDIA_VISIBLE_DEVICES=void");
        assert_int_equal(s->edits.n_device_nodes, 0);
        kdev_cdi_spec_free(s);
}

static void check_devices(const json_t *devs)
{
        json_t *want = json_pack(
                "[{s:[s],s:s,s:s,s:[s]},{s:[s],s:s,s:s,s:[s]}]", "requestNames", "gpu", "pool",
                "node1", "device", "gpu-4", "cdiDeviceIDs",
                "k8s.gpu.nvidia.com/claim=" UID1 "-gpu-4", "requestNames", "pair", "pool", "node1",
                "device", "gpu-5", "cdiDeviceIDs", "k8s.gpu.nvidia.com/claim=" UID1 "-gpu-5");

        assert_non_null(want);
        if (!json_equal(want, (json_t *)devs)) {
                char *s = json_dumps(devs, 0);

                fprintf(stderr, "got %s\n", s);
                free(s);
                fail();
        }
        json_decref(want);
}

static bool exists(const char *path)
{
        return access(path, F_OK) == 0;
}

static void test_prepare(void **state)
{
        struct fix *f = *state;
        struct kdev_err err = {0};
        const json_t *devs = NULL;
        char cp[600];

        assert_int_equal(kdev_dra_prepare_claim(f->p, "ns", "c1", UID1, &devs, &err), 0);
        check_devices(devs);
        check_spec(f, UID1);
        assert_int_equal(f->src.calls, 1);
        assert_int_equal(kdev_dra_plugin_prepared(f->p), 1);
        /* the checkpoint on disk has it */
        struct kdev_dra_cp c = {0};

        snprintf(cp, sizeof(cp), "%s/%s", f->data, KDEV_DRA_CP_FILE);
        assert_int_equal(kdev_dra_cp_load(&c, cp, &err), 0);
        check_devices(json_object_get(kdev_dra_cp_get(&c, UID1), "devices"));
        assert_string_equal(json_string_value(json_object_get(kdev_dra_cp_get(&c, UID1), "name")),
                            "c1");
        kdev_dra_cp_free(&c);
}

static void test_idempotent(void **state)
{
        struct fix *f = *state;
        struct kdev_err err = {0};
        const json_t *devs = NULL;
        char path[1024];

        assert_int_equal(kdev_dra_prepare_claim(f->p, "ns", "c1", UID1, &devs, &err), 0);
        assert_int_equal(kdev_dra_prepare_claim(f->p, "ns", "c1", UID1, &devs, &err), 0);
        check_devices(devs);
        assert_int_equal(f->src.calls, 1); /* second answered from the checkpoint */
        assert_int_equal(kdev_dra_plugin_prepared(f->p), 1);
        spec_path(f, UID1, path, sizeof(path));
        assert_true(exists(path));
        assert_int_equal(kdev_dra_unprepare_claim(f->p, UID1, &err), 0);
        assert_false(exists(path));
        assert_int_equal(kdev_dra_plugin_prepared(f->p), 0);
        assert_int_equal(kdev_dra_unprepare_claim(f->p, UID1, &err), 0);
        assert_int_equal(kdev_dra_unprepare_claim(f->p, UID2, &err), 0); /* never prepared */
        assert_int_equal(kdev_dra_plugin_prepared(f->p), 0);
}

static void write_file(const char *path, const char *text)
{
        FILE *fp = fopen(path, "w");

        assert_non_null(fp);
        assert_true(fputs(text, fp) >= 0);
        assert_int_equal(fclose(fp), 0);
}

static void read_file(const char *path, char *buf, size_t size)
{
        FILE *fp = fopen(path, "r");
        size_t n;

        assert_non_null(fp);
        n = fread(buf, 1, size - 1, fp);
        buf[n] = '\0';
        fclose(fp);
}

static void test_unprepare_only_recorded(void **state)
{
        struct fix *f = *state;
        struct kdev_err err = {0};
        char path[1024], cp[600], got[64];

        /* a spec by the name of a claim the checkpoint does not record is
         * not kdev's: Unprepare succeeds and leaves it */
        assert_int_equal(kdev_dra_prepare_claim(f->p, "ns", "c1", UID1, NULL, &err), 0);
        spec_path(f, UID1, path, sizeof(path));
        kdev_dra_plugin_free(f->p);
        snprintf(cp, sizeof(cp), "%s/%s", f->data, KDEV_DRA_CP_FILE);
        assert_int_equal(unlink(cp), 0);
        new_plugin(f);
        assert_int_equal(kdev_dra_plugin_prepared(f->p), 0);
        assert_true(exists(path));
        assert_int_equal(kdev_dra_unprepare_claim(f->p, UID1, &err), 0);
        assert_true(exists(path));
        /* someone else's file, never prepared by kdev */
        spec_path(f, UID2, path, sizeof(path));
        write_file(path, "theirs");
        assert_int_equal(kdev_dra_unprepare_claim(f->p, UID2, &err), 0);
        read_file(path, got, sizeof(got));
        assert_string_equal(got, "theirs");
        assert_int_equal(f->src.calls, 1);
}

static void test_claim_uid_rules(void **state)
{
        struct fix *f = *state;
        struct kdev_err err = {0};
        char path[1024], other[1024], want[1200], got[64], uid[200];
        const json_t *devs = NULL;

        assert_int_equal(kdev_dra_check_claim_uid(NULL, NULL, UID1, &err), 0);
        assert_int_equal(kdev_dra_check_claim_uid("ns", "c1", "uid-1", &err), 0);
        assert_int_equal(kdev_dra_check_claim_uid(NULL, NULL, "A-z-0-9", &err), 0);
        memset(uid, 'a', KDEV_DRA_CLAIM_UID_MAX);
        uid[KDEV_DRA_CLAIM_UID_MAX] = '\0';
        assert_int_equal(kdev_dra_check_claim_uid(NULL, NULL, uid, &err), 0);
        uid[KDEV_DRA_CLAIM_UID_MAX] = 'a';
        uid[KDEV_DRA_CLAIM_UID_MAX + 1] = '\0';
        assert_int_equal(kdev_dra_check_claim_uid(NULL, NULL, uid, &err), -EINVAL);
        assert_string_equal(err.msg, "claim UID \"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa...\" "
                                     "refused: 129 characters, at most 128 allowed");
        assert_int_equal(kdev_dra_check_claim_uid(NULL, NULL, "", &err), -EINVAL);
        assert_string_equal(err.msg, "claim UID missing");
        assert_int_equal(kdev_dra_check_claim_uid("ns", "c1", NULL, &err), -EINVAL);
        assert_string_equal(err.msg, "claim ns/c1: UID missing");
        assert_int_equal(kdev_dra_check_claim_uid(NULL, NULL, "a/b", &err), -EINVAL);
        assert_string_equal(err.msg, "claim UID \"a/b\" refused: character 2 ('/') is not an "
                                     "ASCII letter, digit or '-'");
        assert_int_equal(kdev_dra_check_claim_uid("ns", "c1", "a_b", &err), -EINVAL);
        assert_string_equal(err.msg, "claim ns/c1: UID \"a_b\" refused: character 2 ('_') is "
                                     "not an ASCII letter, digit or '-'");
        assert_int_equal(kdev_dra_check_claim_uid(NULL, NULL, "..", &err), -EINVAL);
        assert_string_equal(err.msg, "claim UID \"..\" refused: character 1 ('.') is not an "
                                     "ASCII letter, digit or '-'");
        assert_int_equal(kdev_dra_check_claim_uid(NULL, NULL, "ab c\n\"\\\xff", &err), -EINVAL);
        assert_string_equal(err.msg, "claim UID \"ab c\\x0a\\x22\\x5c\\xff\" refused: "
                                     "character 3 (0x20) is not an ASCII letter, digit or '-'");

        /* the spec file is named by the UID itself: case matters, nothing
         * folds two UIDs together */
        spec_path(f, "Ab-1", path, sizeof(path));
        spec_path(f, "ab-1", other, sizeof(other));
        snprintf(want, sizeof(want), "%s/k8s.gpu.nvidia.com-claim_Ab-1.json", f->cdi);
        assert_string_equal(path, want);
        snprintf(want, sizeof(want), "%s/k8s.gpu.nvidia.com-claim_ab-1.json", f->cdi);
        assert_string_equal(other, want);
        assert_int_equal(kdev_dra_claim_spec_path(f->p, "a/b", path, sizeof(path), &err),
                         -EINVAL);

        /* "a/b" and "a_b" once shared k8s.gpu.nvidia.com-claim_a_b.json:
         * both are refused now, before the claim is read, and the file of
         * that name is left alone by Prepare and Unprepare */
        add_claim(f, "ns", "slash", "a/b",
                  json_pack("[o]", result("gpu", "gpu.nvidia.com", "node1", "gpu-4")));
        snprintf(path, sizeof(path), "%s/k8s.gpu.nvidia.com-claim_a_b.json", f->cdi);
        assert_int_equal(mkdir(f->cdi, 0700), 0);
        write_file(path, "theirs");
        assert_int_equal(kdev_dra_prepare_claim(f->p, "ns", "slash", "a/b", &devs, &err),
                         -EINVAL);
        assert_string_equal(err.msg, "claim ns/slash: UID \"a/b\" refused: character 2 ('/') "
                                     "is not an ASCII letter, digit or '-'");
        assert_int_equal(f->src.calls, 0);
        assert_int_equal(kdev_dra_unprepare_claim(f->p, "a/b", &err), -EINVAL);
        assert_string_equal(err.msg, "claim UID \"a/b\" refused: character 2 ('/') is not an "
                                     "ASCII letter, digit or '-'");
        assert_int_equal(kdev_dra_unprepare_claim(f->p, "a_b", &err), -EINVAL);
        read_file(path, got, sizeof(got));
        assert_string_equal(got, "theirs");
        assert_int_equal(kdev_dra_plugin_prepared(f->p), 0);
}

static void test_checkpoint_before_spec(void **state)
{
        struct fix *f = *state;
        struct kdev_err err = {0};
        char path[1024], cp[600];

        /* the checkpoint cannot be saved (its path is a directory): the
         * claim fails and no spec is written */
        snprintf(cp, sizeof(cp), "%s/%s", f->data, KDEV_DRA_CP_FILE);
        mkdir(f->data, 0700);
        assert_int_equal(mkdir(cp, 0700), 0);
        spec_path(f, UID1, path, sizeof(path));
        assert_true(kdev_dra_prepare_claim(f->p, "ns", "c1", UID1, NULL, &err) < 0);
        assert_non_null(strstr(err.msg, "claim ns/c1 (" UID1 "): checkpoint: "));
        assert_false(exists(path));
        assert_int_equal(kdev_dra_plugin_prepared(f->p), 0);
        assert_int_equal(rmdir(cp), 0);
        assert_int_equal(kdev_dra_prepare_claim(f->p, "ns", "c1", UID1, NULL, &err), 0);
        assert_true(exists(path));
        assert_int_equal(kdev_dra_plugin_prepared(f->p), 1);
}

/* Claims of one call: c2 (UID2) holds gpu-4 too, c3 (UID3) a MIG-free
 * device of its own is not there (gpu-9): three claims, one checkpoint
 * write; c2 is refused because c1, earlier in the same call, holds gpu-4. */
#define UID3 "0b6a1c9e-3333-4c2e-9a43-cccccccccccc"
static void test_prepare_many(void **state)
{
        struct fix *f = *state;
        struct kdev_dra_prepare_stats s0, s1;
        struct kdev_dra_prepare_item v[4] = {
                {.ns = "ns", .name = "c1", .uid = UID1},
                {.ns = "ns", .name = "c2", .uid = UID2},
                {.ns = "ns", .name = "c3", .uid = UID3},
                {.ns = "ns", .name = "c1", .uid = UID1},
        };
        char path[1024], cp[600];
        struct kdev_dra_cp c = {0};
        struct kdev_err err = {0};

        add_claim(f, "ns", "c2", UID2,
                  json_pack("[o]", result("gpu", "gpu.nvidia.com", "node1", "gpu-4")));
        add_claim(f, "ns", "c3", UID3,
                  json_pack("[o]", result("gpu", "gpu.nvidia.com", "node1", "gpu-9")));
        kdev_dra_plugin_stats(f->p, &s0);
        assert_int_equal(kdev_dra_prepare_many(f->p, v, 4), 2);
        kdev_dra_plugin_stats(f->p, &s1);
        assert_int_equal(s1.checkpoint_writes - s0.checkpoint_writes, 1);
        assert_int_equal(s1.spec_writes - s0.spec_writes, 1);
        assert_int_equal(s1.calls - s0.calls, 1);
        assert_int_equal(s1.claims - s0.claims, 3);
        assert_int_equal(v[0].rc, 0);
        assert_false(v[0].recorded);
        check_devices(v[0].devices);
        check_spec(f, UID1);
        assert_int_equal(v[1].rc, -EBUSY);
        assert_string_equal(v[1].err.msg,
                            "claim ns/c2 (" UID2 "): device gpu-4 is already prepared for claim "
                            "ns/c1 (" UID1 "): it is not shareable and this allocation has no "
                            "adminAccess");
        assert_int_equal(v[2].rc, -ENODEV);
        assert_string_equal(v[2].err.msg, "claim ns/c3 (" UID3 "): device gpu-9 is not "
                                          "published by this node (pool node1)");
        /* the repeated UID gets the first item's answer */
        assert_int_equal(v[3].rc, 0);
        assert_ptr_equal(v[3].devices, v[0].devices);
        assert_int_equal(f->src.calls, 3);
        spec_path(f, UID2, path, sizeof(path));
        assert_false(exists(path));
        /* on disk: c1 only */
        snprintf(cp, sizeof(cp), "%s/%s", f->data, KDEV_DRA_CP_FILE);
        assert_int_equal(kdev_dra_cp_load(&c, cp, &err), 0);
        assert_int_equal(kdev_dra_cp_count(&c), 1);
        check_devices(json_object_get(kdev_dra_cp_get(&c, UID1), "devices"));
        kdev_dra_cp_free(&c);
        /* again: answered from the checkpoint, nothing written */
        kdev_dra_plugin_stats(f->p, &s0);
        assert_int_equal(kdev_dra_prepare_many(f->p, v, 1), 0);
        kdev_dra_plugin_stats(f->p, &s1);
        assert_true(v[0].recorded);
        assert_int_equal(s1.checkpoint_writes - s0.checkpoint_writes, 0);
        assert_int_equal(s1.spec_writes - s0.spec_writes, 0);
}

/* A failed checkpoint save fails every new claim of the call, naming each,
 * and writes none of their specs; a claim already prepared is answered. */
static void test_prepare_many_save_fails(void **state)
{
        struct fix *f = *state;
        struct kdev_dra_prepare_item v[2] = {
                {.ns = "ns", .name = "c1", .uid = UID1},
                {.ns = "ns", .name = "c2", .uid = UID2},
        };
        char path[1024], cp[600], tmp[700];
        struct kdev_err err = {0};

        add_claim(f, "ns", "c2", UID2,
                  json_pack("[o]", result("gpu", "gpu.nvidia.com", "node1", "gpu-5")));
        add_claim(f, "ns", "c1", UID1,
                  json_pack("[o]", result("gpu", "gpu.nvidia.com", "node1", "gpu-4")));
        snprintf(cp, sizeof(cp), "%s/%s", f->data, KDEV_DRA_CP_FILE);
        mkdir(f->data, 0700);
        assert_int_equal(mkdir(cp, 0700), 0);
        assert_int_equal(kdev_dra_prepare_many(f->p, v, 2), 2);
        for (unsigned i = 0; i < 2; i++) {
                snprintf(tmp, sizeof(tmp), "claim ns/%s (%s): checkpoint: ", v[i].name,
                         v[i].uid);
                assert_int_equal(strncmp(v[i].err.msg, tmp, strlen(tmp)), 0);
                assert_true(v[i].rc < 0);
                spec_path(f, v[i].uid, path, sizeof(path));
                assert_false(exists(path));
        }
        assert_int_equal(kdev_dra_plugin_prepared(f->p), 0);
        assert_int_equal(rmdir(cp), 0);
        /* c1 prepared alone, then both in one call: c1 from the checkpoint */
        assert_int_equal(kdev_dra_prepare_claim(f->p, "ns", "c1", UID1, NULL, &err), 0);
        assert_int_equal(kdev_dra_prepare_many(f->p, v, 2), 0);
        assert_true(v[0].recorded);
        assert_false(v[1].recorded);
        assert_int_equal(kdev_dra_plugin_prepared(f->p), 2);
        /* the index of held devices follows unprepares: gpu-5 free again */
        assert_int_equal(kdev_dra_unprepare_claim(f->p, UID2, &err), 0);
        add_claim(f, "ns", "c3", UID3,
                  json_pack("[o]", result("gpu", "gpu.nvidia.com", "node1", "gpu-5")));
        assert_int_equal(kdev_dra_prepare_claim(f->p, "ns", "c3", UID3, NULL, &err), 0);
}

/* c1 (gpu-4 for request "gpu", gpu-5 for "pair/sub") with the
 * allocation's config list |cfg| (taken over). */
static void add_c1_config(struct fix *f, json_t *cfg)
{
        add_claim(f, "ns", "c1", UID1,
                  json_pack("[o,o]", result("gpu", "gpu.nvidia.com", "node1", "gpu-4"),
                            result("pair/sub", "gpu.nvidia.com", "node1", "gpu-5")));
        json_object_set_new(json_object_get(json_object_get(json_object_get(
                                    json_object_get(f->src.claims, "ns/c1"), "status"),
                                    "allocation"), "devices"),
                            "config", cfg);
}

/* One DeviceAllocationConfiguration: |requests| NULL for none. */
static json_t *cfg_entry(const char *source, json_t *requests, const char *driver,
                         json_t *params)
{
        json_t *e = json_pack("{s:s,s:{s:s,s:o}}", "source", source, "opaque", "driver", driver,
                              "parameters", params);

        if (requests)
                json_object_set_new(e, "requests", requests);
        return e;
}

static json_t *env_of(struct fix *f, const char *dev)
{
        char path[1024], name[128];
        struct kdev_cdi_spec *s = NULL;
        const struct kdev_cdi_device *d;
        json_t *env = json_array();

        spec_path(f, UID1, path, sizeof(path));
        assert_int_equal(kdev_cdi_spec_read(path, &s, NULL), 0);
        snprintf(name, sizeof(name), "%s-%s", UID1, dev);
        d = kdev_cdi_spec_find_device(s, name);
        assert_non_null(d);
        for (size_t i = 0; i < d->edits.n_env; i++)
                json_array_append_new(env, json_string(d->edits.env[i]));
        kdev_cdi_spec_free(s);
        return env;
}

static void expect_json(const json_t *got, json_t *want)
{
        if (!json_equal((json_t *)got, want)) {
                char *a = json_dumps(got, JSON_SORT_KEYS), *b = json_dumps(want, JSON_SORT_KEYS);

                fprintf(stderr, "got  %s\nwant %s\n", a, b);
                free(a);
                free(b);
                fail();
        }
        json_decref(want);
}

static void expect_env(struct fix *f, const char *dev, json_t *want)
{
        json_t *got = env_of(f, dev);

        expect_json(got, want);
        json_decref(got);
}

/* Class config first, then claim config, scanned from the end per result:
 * the claim's TimeSlicing for request "gpu" (gpu-4), the class's MPS
 * (empty requests, fits a whole GPU) for "pair/sub" (gpu-5); another
 * driver's entry is skipped. The MPS thread percentage reaches the CDI
 * device's env; the applied configs are on the records, so a restart with
 * the spec gone writes the same spec without the API server. */
static void test_claim_config(void **state)
{
        struct fix *f = *state;
        struct kdev_err err = {0};
        const json_t *devs = NULL;
        char path[1024];

        add_c1_config(f, json_pack(
                "[o,o,o,o]",
                cfg_entry("FromClaim", json_pack("[s]", "gpu"), "gpu.nvidia.com",
                          json_pack("{s:s,s:s,s:{s:s}}", "apiVersion",
                                    "resource.nvidia.com/v1beta1", "kind", "GpuConfig",
                                    "sharing", "strategy", "TimeSlicing")),
                cfg_entry("FromClass", NULL, "gpu.nvidia.com",
                          json_pack("{s:s,s:s,s:{s:s,s:{s:i,s:s,s:{s:s}}}}", "apiVersion",
                                    "resource.nvidia.com/v1beta1", "kind", "GpuConfig",
                                    "sharing", "strategy", "MPS", "mpsConfig",
                                    "defaultActiveThreadPercentage", 50,
                                    "defaultPinnedDeviceMemoryLimit", "2Gi",
                                    "defaultPerDevicePinnedMemoryLimit", "1", "1536Mi")),
                cfg_entry("FromClaim", NULL, "other.example.com", json_pack("{s:s}", "x", "y")),
                cfg_entry("FromClass", json_pack("[s]", "gpu"), "gpu.nvidia.com",
                          json_pack("{s:s,s:s,s:s}", "apiVersion", "kdev.io/v1alpha1", "kind",
                                    "ShareConfig", "memory", "10Gi"))));
        assert_int_equal(kdev_dra_prepare_claim(f->p, "ns", "c1", UID1, &devs, &err), 0);
        expect_json(json_object_get(json_array_get(devs, 0), "config"),
                    json_pack("{s:s,s:s,s:s,s:{s:{s:s,s:{s:s}}}}", "apiVersion",
                              "resource.nvidia.com/v1beta1", "kind", "GpuConfig", "source",
                              "FromClaim", "parameters", "sharing", "strategy", "TimeSlicing",
                              "timeSlicingConfig", "interval", "Default"));
        expect_json(json_object_get(json_array_get(devs, 1), "config"),
                    json_pack("{s:s,s:s,s:s,s:{s:{s:s,s:{s:i,s:s,s:{s:s}}}}}", "apiVersion",
                              "resource.nvidia.com/v1beta1", "kind", "GpuConfig", "source",
                              "FromClass", "parameters", "sharing", "strategy", "MPS",
                              "mpsConfig", "defaultActiveThreadPercentage", 50,
                              "defaultPinnedDeviceMemoryLimit", "2048M",
                              "defaultPerDevicePinnedMemoryLimit", "1", "1536M"));
        expect_env(f, "gpu-4", json_pack("[]"));
        expect_env(f, "gpu-5", json_pack("[s]", "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=50"));
        /* restart, spec gone: rebuilt from the checkpoint, no claim read */
        kdev_dra_plugin_free(f->p);
        new_plugin(f);
        spec_path(f, UID1, path, sizeof(path));
        assert_int_equal(unlink(path), 0);
        f->src.calls = 0;
        assert_int_equal(kdev_dra_prepare_claim(f->p, "ns", "c1", UID1, &devs, &err), 0);
        assert_int_equal(f->src.calls, 0);
        expect_env(f, "gpu-5", json_pack("[s]", "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=50"));
}

/* kdev's ShareConfig: memory in bytes, compute in percent, the policy. */
static void test_claim_config_share(void **state)
{
        struct fix *f = *state;
        struct kdev_err err = {0};
        const json_t *devs = NULL;

        add_c1_config(f, json_pack("[o]", cfg_entry("FromClaim", NULL, "gpu.nvidia.com",
                                                    json_pack("{s:s,s:s,s:s,s:s,s:s}",
                                                              "apiVersion", "kdev.io/v1alpha1",
                                                              "kind", "ShareConfig", "memory",
                                                              "10Gi", "compute", "25%",
                                                              "policy", "strict"))));
        assert_int_equal(kdev_dra_prepare_claim(f->p, "ns", "c1", UID1, &devs, &err), 0);
        for (size_t i = 0; i < 2; i++)
                expect_json(json_object_get(json_array_get(devs, i), "config"),
                            json_pack("{s:s,s:s,s:s,s:{s:I,s:i,s:s}}", "apiVersion",
                                      "kdev.io/v1alpha1", "kind", "ShareConfig", "source",
                                      "FromClaim", "parameters", "memory",
                                      (json_int_t)10737418240, "compute", 25, "policy",
                                      "strict"));
}

/* Each bad config fails the claim with its claim, request, entry and field,
 * and nothing is recorded or written. */
static void test_claim_config_errors(void **state)
{
        struct fix *f = *state;
        static const char *const gpu = "resource.nvidia.com/v1beta1";
        struct {
                json_t *entry;
                const char *msg;
        } cases[] = {
                {cfg_entry("FromClaim", NULL, "gpu.nvidia.com",
                           json_pack("{s:s,s:s,s:{s:s,s:s}}", "apiVersion", gpu, "kind",
                                     "GpuConfig", "sharing", "strategy", "MPS", "mpsConfg",
                                     "x")),
                 "request gpu: config 0 (FromClaim): parameters.sharing.mpsConfg: unknown "
                 "field"},
                {cfg_entry("FromClaim", NULL, "gpu.nvidia.com",
                           json_pack("{s:s,s:s}", "apiVersion", gpu, "kind", "VgpuConfig")),
                 "request gpu: config 0 (FromClaim): parameters: unknown kind VgpuConfig of "
                 "resource.nvidia.com/v1beta1 (known: resource.nvidia.com/v1beta1 GpuConfig, "
                 "MigDeviceConfig; kdev.io/v1alpha1 ShareConfig)"},
                {cfg_entry("FromClaim", NULL, "gpu.nvidia.com",
                           json_pack("{s:s,s:s,s:{s:s}}", "apiVersion", gpu, "kind",
                                     "GpuConfig", "sharing", "strategy", "Exclusive")),
                 "request gpu: config 0 (FromClaim): unknown GPU sharing strategy: Exclusive, "
                 "supported GPU sharing strategies: TimeSlicing, MPS"},
                {cfg_entry("FromClaim", NULL, "gpu.nvidia.com",
                           json_pack("{s:s,s:s,s:{s:s,s:{s:s}}}", "apiVersion", gpu, "kind",
                                     "GpuConfig", "sharing", "strategy", "TimeSlicing",
                                     "timeSlicingConfig", "interval", "Forever")),
                 "request gpu: config 0 (FromClaim): unknown time-slice interval: Forever, "
                 "supported time-slice intervals: Default, Short, Medium, Long"},
                {cfg_entry("FromClaim", NULL, "gpu.nvidia.com",
                           json_pack("{s:s,s:s,s:{s:s,s:{s:i}}}", "apiVersion", gpu, "kind",
                                     "GpuConfig", "sharing", "strategy", "MPS", "mpsConfig",
                                     "defaultActiveThreadPercentage", 101)),
                 "request gpu: config 0 (FromClaim): active thread percentage must not be "
                 "greater than 100"},
                {cfg_entry("FromClaim", NULL, "gpu.nvidia.com",
                           json_pack("{s:s,s:s,s:{s:s,s:{}}}", "apiVersion", gpu, "kind",
                                     "GpuConfig", "sharing", "strategy", "TimeSlicing",
                                     "mpsConfig")),
                 "request gpu: config 0 (FromClaim): cannot use MpsConfig with the "
                 "'TimeSlicing' strategy"},
                {cfg_entry("FromClaim", NULL, "gpu.nvidia.com",
                           json_pack("{s:s,s:s,s:{s:s,s:{s:{s:s}}}}", "apiVersion", gpu, "kind",
                                     "GpuConfig", "sharing", "strategy", "MPS", "mpsConfig",
                                     "defaultPerDevicePinnedMemoryLimit", "2", "1Gi")),
                 "request gpu: config 0 (FromClaim): invalid device: invalid device index: 2"},
                {cfg_entry("FromClaim", NULL, "gpu.nvidia.com",
                           json_pack("{s:s,s:s,s:{s:s,s:{s:s}}}", "apiVersion", gpu, "kind",
                                     "GpuConfig", "sharing", "strategy", "MPS", "mpsConfig",
                                     "defaultPinnedDeviceMemoryLimit", "512Ki")),
                 "request gpu: config 0 (FromClaim): invalid limit: default value set too "
                 "low: 512Ki"},
                {cfg_entry("FromClaim", json_pack("[s]", "gpu"), "gpu.nvidia.com",
                           json_pack("{s:s,s:s}", "apiVersion", gpu, "kind", "MigDeviceConfig")),
                 "request gpu: config 0 (FromClaim): cannot apply MigDeviceConfig to device "
                 "\"gpu-4\" of type \"gpu\""},
                {cfg_entry("FromClaim", NULL, "gpu.nvidia.com",
                           json_pack("{s:s,s:s,s:i}", "apiVersion", "kdev.io/v1alpha1", "kind",
                                     "ShareConfig", "compute", 0)),
                 "request gpu: config 0 (FromClaim): parameters.compute: must be a percentage "
                 "of the device, 1 to 100 (e.g. 25 or \"25%\"), got 0"},
                {cfg_entry("FromClaim", NULL, "gpu.nvidia.com",
                           json_pack("{s:s,s:s,s:s}", "apiVersion", "kdev.io/v1alpha1", "kind",
                                     "ShareConfig", "memory", "8192Pi")),
                 "request gpu: config 0 (FromClaim): parameters.memory: must be at most "
                 "9223372036854775807 bytes, got \"8192Pi\""},
                {cfg_entry("FromSomewhere", NULL, "gpu.nvidia.com", json_object()),
                 "config 0: invalid config source: FromSomewhere"},
        };

        for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
                struct kdev_err err = {0};
                char want[1024], path[1024];

                add_c1_config(f, json_pack("[o]", cases[i].entry));
                int rc = kdev_dra_prepare_claim(f->p, "ns", "c1", UID1, NULL, &err);

                if (rc != -EINVAL)
                        fprintf(stderr, "case %zu: rc %d: %s\n", i, rc, err.msg);
                assert_int_equal(rc, -EINVAL);
                snprintf(want, sizeof(want), "claim ns/c1 (" UID1 "): %s", cases[i].msg);
                assert_string_equal(err.msg, want);
                assert_int_equal(kdev_dra_plugin_prepared(f->p), 0);
                spec_path(f, UID1, path, sizeof(path));
                assert_false(exists(path));
        }
}

/* A crash between the checkpoint save and the spec write leaves a recorded
 * claim without a spec. After a restart Unprepare succeeds and forgets the
 * claim; a Prepare instead writes the spec from the record, without asking
 * the API server again. */
static void test_crash_before_spec(void **state)
{
        struct fix *f = *state;
        struct kdev_err err = {0};
        char path[1024];

        json_t *r2 = result("gpu", "gpu.nvidia.com", "node1", "gpu-5");

        /* c1 holds gpu-5 too: c2 is an admin-access claim of it (a device
         * is prepared for one claim at a time otherwise) */
        json_object_set_new(r2, "adminAccess", json_true());
        add_claim(f, "ns", "c2", UID2, json_pack("[o]", r2));
        assert_int_equal(kdev_dra_prepare_claim(f->p, "ns", "c1", UID1, NULL, &err), 0);
        assert_int_equal(kdev_dra_prepare_claim(f->p, "ns", "c2", UID2, NULL, &err), 0);
        assert_int_equal(f->src.calls, 2);
        spec_path(f, UID1, path, sizeof(path));
        assert_int_equal(unlink(path), 0);
        spec_path(f, UID2, path, sizeof(path));
        assert_int_equal(unlink(path), 0);
        kdev_dra_plugin_free(f->p);
        new_plugin(f);
        assert_null(kdev_dra_plugin_checkpoint_error(f->p));
        assert_int_equal(kdev_dra_plugin_prepared(f->p), 2);
        assert_int_equal(kdev_dra_unprepare_claim(f->p, UID1, &err), 0);
        assert_int_equal(kdev_dra_plugin_prepared(f->p), 1);
        spec_path(f, UID1, path, sizeof(path));
        assert_false(exists(path));
        json_object_clear(f->src.claims); /* the API server is not needed */
        assert_int_equal(kdev_dra_prepare_claim(f->p, "ns", "c2", UID2, NULL, &err), 0);
        assert_int_equal(f->src.calls, 2);
        spec_path(f, UID2, path, sizeof(path));
        assert_true(exists(path));
        kdev_dra_plugin_free(f->p);
        new_plugin(f);
        assert_int_equal(kdev_dra_plugin_prepared(f->p), 1);
        assert_int_equal(kdev_dra_unprepare_claim(f->p, UID2, &err), 0);
        assert_false(exists(path));
        assert_int_equal(kdev_dra_plugin_prepared(f->p), 0);
}

/* A claim whose fields have another JSON type than the API's: the error
 * names the field by its path and both types; nothing is prepared. */
static void test_claim_json_types(void **state)
{
        struct fix *f = *state;
        struct kdev_err err = {0};
        static const struct {
                const char *json, *msg;
        } cases[] = {
                {"{\"metadata\":{\"uid\":\"" UID2 "\"},\"status\":{\"allocation\":[]}}",
                 "claim ns/t: .status.allocation: expected an object, got an array"},
                {"{\"metadata\":[],\"status\":{}}",
                 "claim ns/t: .metadata: expected an object, got an array"},
                {"{\"metadata\":{\"uid\":7}}",
                 "claim ns/t: .metadata.uid: expected a string, got a number"},
                {"{\"metadata\":{\"uid\":\"" UID2 "\"},\"status\":\"x\"}",
                 "claim ns/t: .status: expected an object, got a string"},
                {"{\"metadata\":{\"uid\":\"" UID2 "\"},\"status\":{\"allocation\":"
                 "{\"devices\":{\"results\":{}}}}}",
                 "claim ns/t: .status.allocation.devices.results: expected an array, got an "
                 "object"},
                {"{\"metadata\":{\"uid\":\"" UID2 "\"},\"status\":{\"allocation\":"
                 "{\"devices\":{\"results\":[{\"driver\":\"gpu.nvidia.com\"},[]]}}}}",
                 "claim ns/t: .status.allocation.devices.results[1]: expected an object, got "
                 "an array"},
                {"{\"metadata\":{\"uid\":\"" UID2 "\"},\"status\":{\"allocation\":"
                 "{\"devices\":{\"results\":[{\"driver\":\"gpu.nvidia.com\",\"pool\":\"node1\","
                 "\"device\":[\"gpu-4\"]}]}}}}",
                 "claim ns/t: .status.allocation.devices.results[0].device: expected a string, "
                 "got an array"},
        };
        char path[1024];

        spec_path(f, UID2, path, sizeof(path));
        for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
                json_t *c = json_loads(cases[i].json, 0, NULL);

                assert_non_null(c);
                json_object_set_new(f->src.claims, "ns/t", c);
                assert_int_equal(kdev_dra_prepare_claim(f->p, "ns", "t", UID2, NULL, &err),
                                 -EPROTO);
                assert_string_equal(err.msg, cases[i].msg);
        }
        assert_false(exists(path));
        assert_int_equal(kdev_dra_plugin_prepared(f->p), 0);
}

static void test_prepare_after_unprepare(void **state)
{
        struct fix *f = *state;
        struct kdev_err err = {0};
        const json_t *devs = NULL;
        char path[1024];

        spec_path(f, UID1, path, sizeof(path));
        assert_int_equal(kdev_dra_prepare_claim(f->p, "ns", "c1", UID1, &devs, &err), 0);
        assert_int_equal(kdev_dra_unprepare_claim(f->p, UID1, &err), 0);
        /* claim still allocated: prepared again from the API server */
        assert_int_equal(kdev_dra_prepare_claim(f->p, "ns", "c1", UID1, &devs, &err), 0);
        assert_int_equal(f->src.calls, 2);
        check_devices(devs);
        assert_int_equal(kdev_dra_unprepare_claim(f->p, UID1, &err), 0);
        assert_false(exists(path));
        /* claim deleted meanwhile: a late Prepare fails and reserves nothing */
        json_object_del(f->src.claims, "ns/c1");
        assert_int_equal(kdev_dra_prepare_claim(f->p, "ns", "c1", UID1, &devs, &err), -ENOENT);
        assert_non_null(strstr(err.msg, "404"));
        assert_false(exists(path));
        assert_int_equal(kdev_dra_plugin_prepared(f->p), 0);
        /* claim replaced by one with a new UID: the old UID fails */
        add_claim(f, "ns", "c1", UID2,
                  json_pack("[o]", result("gpu", "gpu.nvidia.com", "node1", "gpu-4")));
        assert_int_equal(kdev_dra_prepare_claim(f->p, "ns", "c1", UID1, &devs, &err), -ESTALE);
        assert_non_null(strstr(err.msg, "claim got replaced"));
        assert_false(exists(path));
        assert_int_equal(kdev_dra_plugin_prepared(f->p), 0);
}

static void test_restart(void **state)
{
        struct fix *f = *state;
        struct kdev_err err = {0};
        const json_t *devs = NULL;
        char path[1024];

        assert_int_equal(kdev_dra_prepare_claim(f->p, "ns", "c1", UID1, &devs, &err), 0);
        kdev_dra_plugin_free(f->p);
        json_object_clear(f->src.claims); /* the API server is unreachable: not needed */
        new_plugin(f);
        assert_null(kdev_dra_plugin_checkpoint_error(f->p));
        assert_int_equal(kdev_dra_plugin_prepared(f->p), 1);
        assert_int_equal(kdev_dra_prepare_claim(f->p, "ns", "c1", UID1, &devs, &err), 0);
        assert_int_equal(f->src.calls, 1);
        check_devices(devs);
        check_spec(f, UID1);
        assert_int_equal(kdev_dra_unprepare_claim(f->p, UID1, &err), 0);
        spec_path(f, UID1, path, sizeof(path));
        assert_false(exists(path));
        kdev_dra_plugin_free(f->p);
        new_plugin(f);
        assert_int_equal(kdev_dra_plugin_prepared(f->p), 0);
}

static void test_cdi_wiped(void **state)
{
        struct fix *f = *state;
        struct kdev_err err = {0};
        const json_t *devs = NULL;
        char path[1024];
        FILE *fp;

        assert_int_equal(kdev_dra_prepare_claim(f->p, "ns", "c1", UID1, &devs, &err), 0);
        spec_path(f, UID1, path, sizeof(path));
        /* reboot wiped /var/run/cdi: the directory is gone */
        tmptree_remove(f->cdi);
        assert_int_equal(kdev_dra_prepare_claim(f->p, "ns", "c1", UID1, &devs, &err), 0);
        check_spec(f, UID1);
        /* a spec that lost a device node is rewritten too */
        fp = fopen(path, "w");
        assert_non_null(fp);
        fprintf(fp, "{\"cdiVersion\":\"0.5.0\",\"kind\":\"k8s.gpu.nvidia.com/claim\","
                    "\"devices\":[{\"name\":\"%s-gpu-4\",\"containerEdits\":{\"env\":[\"A=1\"]}}]}",
                UID1);
        fclose(fp);
        assert_int_equal(kdev_dra_prepare_claim(f->p, "ns", "c1", UID1, &devs, &err), 0);
        check_spec(f, UID1);
        assert_int_equal(f->src.calls, 1);
        /* after a restart too, and when the GPU is gone it fails, never succeeds */
        tmptree_remove(f->cdi);
        kdev_dra_plugin_free(f->p);
        f->set.n_gpus = 1; /* gpu-5 lost */
        new_plugin(f);
        assert_int_equal(kdev_dra_prepare_claim(f->p, "ns", "c1", UID1, &devs, &err), -ENODEV);
        assert_string_equal(err.msg, "claim ns/c1 (" UID1 "): device gpu-5 is not published by "
                                     "this node (pool node1)");
        assert_false(exists(path));
}

static void test_claim_errors(void **state)
{
        struct fix *f = *state;
        struct kdev_err err = {0};
        json_t *c;
        char path[1024];

        spec_path(f, UID2, path, sizeof(path));
        /* not allocated */
        add_claim(f, "ns", "c2", UID2, json_array());
        c = json_object_get(f->src.claims, "ns/c2");
        json_object_del(json_object_get(c, "status"), "allocation");
        assert_int_equal(kdev_dra_prepare_claim(f->p, "ns", "c2", UID2, NULL, &err), -ENODATA);
        assert_non_null(strstr(err.msg, "not allocated"));
        /* allocated, but nothing for this driver and pool */
        add_claim(f, "ns", "c2", UID2,
                  json_pack("[o,o]", result("gpu", "gpu.nvidia.com", "node2", "gpu-4"),
                            result("gpu", "other.example.com", "node1", "gpu-4")));
        assert_int_equal(kdev_dra_prepare_claim(f->p, "ns", "c2", UID2, NULL, &err), -ENODATA);
        assert_string_equal(err.msg, "claim ns/c2: no devices allocated by driver gpu.nvidia.com "
                                     "in pool node1");
        /* a device this node does not publish: said so, not "unhealthy" */
        static const char *const unknown[] = {
                "gpu-9", "gpu-4-mig-1g5gb-19-0" /* GPU not in MIG mode */,
                "gpu-4-mig-1g5gb-19", "gpu-4-mig-19-0-0" /* old kdev name */, "gpu-4x",
                "gpu-", "GPU-00000000", ""};
        for (size_t i = 0; i < sizeof(unknown) / sizeof(unknown[0]); i++) {
                char want[512];

                add_claim(f, "ns", "c2", UID2,
                          json_pack("[o]", result("gpu", "gpu.nvidia.com", "node1", unknown[i])));
                err = (struct kdev_err){0};
                if (!*unknown[i]) {
                        /* an empty device name is a malformed result */
                        assert_int_equal(kdev_dra_prepare_claim(f->p, "ns", "c2", UID2, NULL,
                                                                &err),
                                         -EINVAL);
                        continue;
                }
                assert_int_equal(kdev_dra_prepare_claim(f->p, "ns", "c2", UID2, NULL, &err),
                                 -ENODEV);
                snprintf(want, sizeof(want),
                         "claim ns/c2 (" UID2 "): device %s is not published by this node "
                         "(pool node1)",
                         unknown[i]);
                assert_string_equal(err.msg, want);
        }
        assert_false(exists(path));
        assert_int_equal(kdev_dra_plugin_prepared(f->p), 0);
        assert_int_equal(kdev_dra_prepare_claim(f->p, "ns", "c2", "", NULL, &err), -EINVAL);
}

/* GPU minor 5 in MIG mode with two MIG devices: GI 1 / CI 0 (3g.20gb, GI
 * profile id 9, placement 0: "gpu-5-mig-3g20gb-9-0") and GI 2 / CI 0
 * (2g.10gb, GI profile id 14, placement 4: "gpu-5-mig-2g10gb-14-4"). */
static void make_mig(struct fix *f)
{
        static struct kdev_mig_device migs[2];
        char path[600];

        memset(migs, 0, sizeof(migs));
        snprintf(migs[0].name, sizeof(migs[0].name), "NVIDIA A100-SXM4-40GB MIG 3g.20gb");
        snprintf(migs[1].name, sizeof(migs[1].name), "NVIDIA A100-SXM4-40GB MIG 2g.10gb");
        migs[0].gi_id = 1;
        migs[0].gi_profile.id = 9;
        migs[0].gi_placement.start = 0;
        snprintf(migs[0].uuid, sizeof(migs[0].uuid), "MIG-aaaa");
        migs[1].index = 1;
        migs[1].gi_id = 2;
        migs[1].gi_profile.id = 14;
        migs[1].gi_placement.start = 4;
        snprintf(migs[1].uuid, sizeof(migs[1].uuid), "MIG-bbbb");
        f->gpus[1].mig_current = NVML_DEVICE_MIG_ENABLE;
        f->gpus[1].migs = migs;
        f->gpus[1].n_migs = 2;
        sync_gpus(f);
        assert_int_equal(mkdir(f->proc, 0700), 0);
        snprintf(path, sizeof(path), "%s/driver", f->proc);
        assert_int_equal(mkdir(path, 0700), 0);
        snprintf(path, sizeof(path), "%s/driver/nvidia-caps", f->proc);
        assert_int_equal(mkdir(path, 0700), 0);
        snprintf(path, sizeof(path), "%s/driver/nvidia-caps/mig-minors", f->proc);
        write_file(path, "config 1\nmonitor 2\n"
                         "gpu4/gi1/access 3\ngpu5/gi1/access 30\ngpu5/gi1/ci0/access 31\n"
                         "gpu5/gi2/access 39\ngpu5/gi2/ci0/access 40\n");
}

static void test_mig(void **state)
{
        struct fix *f = *state;
        struct kdev_err err = {0};
        struct kdev_cdi_spec *s = NULL;
        const struct kdev_cdi_device *d;
        const json_t *devs = NULL;
        char path[1024], want[256], minors[600];

        make_mig(f);
        add_claim(f, "ns", "m", UID2,
                  json_pack("[o,o]",
                            result("a", "gpu.nvidia.com", "node1", "gpu-5-mig-3g20gb-9-0"),
                            result("b", "gpu.nvidia.com", "node1", "gpu-5-mig-2g10gb-14-4")));
        assert_int_equal(kdev_dra_prepare_claim(f->p, "ns", "m", UID2, &devs, &err), 0);
        assert_int_equal(json_array_size(devs), 2);
        assert_string_equal(json_string_value(json_array_get(
                                    json_object_get(json_array_get(devs, 1), "cdiDeviceIDs"), 0)),
                            "k8s.gpu.nvidia.com/claim=" UID2 "-gpu-5-mig-2g10gb-14-4");
        spec_path(f, UID2, path, sizeof(path));
        assert_int_equal(kdev_cdi_spec_read(path, &s, &err), 0);
        assert_int_equal(s->n_devices, 2);
        snprintf(want, sizeof(want), "%s-gpu-5-mig-3g20gb-9-0", UID2);
        d = kdev_cdi_spec_find_device(s, want);
        assert_non_null(d);
        assert_int_equal(d->edits.n_device_nodes, 3);
        assert_string_equal(d->edits.device_nodes[0].path, "/dev/nvidia5");
        assert_string_equal(d->edits.device_nodes[1].path, "/dev/nvidia-caps/nvidia-cap30");
        assert_string_equal(d->edits.device_nodes[2].path, "/dev/nvidia-caps/nvidia-cap31");
        snprintf(want, sizeof(want), "%s-gpu-5-mig-2g10gb-14-4", UID2);
        d = kdev_cdi_spec_find_device(s, want);
        assert_non_null(d);
        assert_int_equal(d->edits.n_device_nodes, 3);
        assert_string_equal(d->edits.device_nodes[0].path, "/dev/nvidia5");
        assert_string_equal(d->edits.device_nodes[1].path, "/dev/nvidia-caps/nvidia-cap39");
        assert_string_equal(d->edits.device_nodes[2].path, "/dev/nvidia-caps/nvidia-cap40");
        kdev_cdi_spec_free(s);
        assert_int_equal(kdev_dra_unprepare_claim(f->p, UID2, &err), 0);

        /* unknown placement, a GPU in MIG mode by its whole-GPU name, the
         * wrong profile text: not published */
        static const char *const unknown[] = {"gpu-5-mig-3g20gb-9-1", "gpu-5",
                                              "gpu-5-mig-3g40gb-9-0", "gpu-5-mig-3g.20gb-9-0"};
        for (size_t i = 0; i < sizeof(unknown) / sizeof(unknown[0]); i++) {
                add_claim(f, "ns", "m", UID2,
                          json_pack("[o]", result("a", "gpu.nvidia.com", "node1", unknown[i])));
                assert_int_equal(kdev_dra_prepare_claim(f->p, "ns", "m", UID2, NULL, &err),
                                 -ENODEV);
                snprintf(want, sizeof(want),
                         "claim ns/m (" UID2 "): device %s is not published by this node "
                         "(pool node1)",
                         unknown[i]);
                assert_string_equal(err.msg, want);
        }
        /* a faulted GPU (lost since discovery): unhealthy, not "not published" */
        f->gpus[1].fault = NVML_ERROR_GPU_IS_LOST;
        sync_gpus(f);
        add_claim(f, "ns", "m", UID2,
                  json_pack("[o]",
                            result("a", "gpu.nvidia.com", "node1", "gpu-5-mig-3g20gb-9-0")));
        assert_int_equal(kdev_dra_prepare_claim(f->p, "ns", "m", UID2, NULL, &err), -EIO);
        assert_string_equal(err.msg, "claim ns/m (" UID2 "): device gpu-5-mig-3g20gb-9-0 "
                                     "(GPU-00000001) is unhealthy: withdrawn from the "
                                     "ResourceSlice, not prepared");
        f->gpus[1].fault = NVML_SUCCESS;
        sync_gpus(f);
        /* capability line missing: fails closed, nothing left behind */
        snprintf(minors, sizeof(minors), "%s/driver/nvidia-caps/mig-minors", f->proc);
        write_file(minors, "gpu5/gi1/access 30\n");
        add_claim(f, "ns", "m", UID2,
                  json_pack("[o]",
                            result("a", "gpu.nvidia.com", "node1", "gpu-5-mig-3g20gb-9-0")));
        assert_int_equal(kdev_dra_prepare_claim(f->p, "ns", "m", UID2, NULL, &err), -ENOENT);
        assert_non_null(strstr(err.msg, "gpu5/mig/gi1/ci0/access"));
        assert_false(exists(path));
        assert_int_equal(kdev_dra_plugin_prepared(f->p), 0);
}

/* Configs on MIG devices: an empty-requests GpuConfig does not fit a MIG
 * device and is passed over, the MigDeviceConfig (MPS) for request "a"
 * applies to it; "b" gets the class's MigDeviceConfig; a MigDeviceConfig
 * has no timeSlicingConfig field. */
static void test_claim_config_mig(void **state)
{
        struct fix *f = *state;
        struct kdev_err err = {0};
        const json_t *devs = NULL;
        json_t *c;

        make_mig(f);
        add_claim(f, "ns", "m", UID2,
                  json_pack("[o,o]",
                            result("a", "gpu.nvidia.com", "node1", "gpu-5-mig-3g20gb-9-0"),
                            result("b", "gpu.nvidia.com", "node1", "gpu-5-mig-2g10gb-14-4")));
        c = json_object_get(json_object_get(json_object_get(f->src.claims, "ns/m"), "status"),
                            "allocation");
        json_object_set_new(
                json_object_get(c, "devices"), "config",
                json_pack("[o,o,o]",
                          cfg_entry("FromClass", NULL, "gpu.nvidia.com",
                                    json_pack("{s:s,s:s,s:{s:s}}", "apiVersion",
                                              "resource.nvidia.com/v1beta1", "kind",
                                              "MigDeviceConfig", "sharing", "strategy",
                                              "TimeSlicing")),
                          cfg_entry("FromClaim", json_pack("[s]", "a"), "gpu.nvidia.com",
                                    json_pack("{s:s,s:s,s:{s:s,s:{s:i}}}", "apiVersion",
                                              "resource.nvidia.com/v1beta1", "kind",
                                              "MigDeviceConfig", "sharing", "strategy", "MPS",
                                              "mpsConfig", "defaultActiveThreadPercentage", 30)),
                          cfg_entry("FromClaim", NULL, "gpu.nvidia.com",
                                    json_pack("{s:s,s:s,s:{s:s}}", "apiVersion",
                                              "resource.nvidia.com/v1beta1", "kind", "GpuConfig",
                                              "sharing", "strategy", "MPS"))));
        assert_int_equal(kdev_dra_prepare_claim(f->p, "ns", "m", UID2, &devs, &err), 0);
        expect_json(json_object_get(json_array_get(devs, 0), "config"),
                    json_pack("{s:s,s:s,s:s,s:{s:{s:s,s:{s:i}}}}", "apiVersion",
                              "resource.nvidia.com/v1beta1", "kind", "MigDeviceConfig", "source",
                              "FromClaim", "parameters", "sharing", "strategy", "MPS",
                              "mpsConfig", "defaultActiveThreadPercentage", 30));
        expect_json(json_object_get(json_array_get(devs, 1), "config"),
                    json_pack("{s:s,s:s,s:s,s:{s:{s:s}}}", "apiVersion",
                              "resource.nvidia.com/v1beta1", "kind", "MigDeviceConfig", "source",
                              "FromClass", "parameters", "sharing", "strategy", "TimeSlicing"));
        assert_int_equal(kdev_dra_unprepare_claim(f->p, UID2, &err), 0);
        json_object_set_new(
                json_object_get(c, "devices"), "config",
                json_pack("[o]", cfg_entry("FromClaim", NULL, "gpu.nvidia.com",
                                           json_pack("{s:s,s:s,s:{s:s,s:{}}}", "apiVersion",
                                                     "resource.nvidia.com/v1beta1", "kind",
                                                     "MigDeviceConfig", "sharing", "strategy",
                                                     "TimeSlicing", "timeSlicingConfig"))));
        assert_int_equal(kdev_dra_prepare_claim(f->p, "ns", "m", UID2, &devs, &err), -EINVAL);
        assert_string_equal(err.msg, "claim ns/m (" UID2 "): request a: config 0 (FromClaim): "
                                     "parameters.sharing.timeSlicingConfig: unknown field");
}

/* A device withdrawn as unhealthy is refused with a per-claim error naming
 * it; nothing is written or recorded; after recovery the claim prepares. A
 * claim prepared before the device went unhealthy keeps its answer. */
static void test_unhealthy_refused(void **state)
{
        struct fix *f = *state;
        struct kdev_err err = {0};
        const json_t *devs = NULL;
        char path[1024];
        const char *bad[] = {"GPU-00000001"};

        spec_path(f, UID1, path, sizeof(path));
        assert_int_equal(kdev_dra_plugin_set_unhealthy(f->p, bad, 1, &err), 0);
        assert_int_equal(kdev_dra_prepare_claim(f->p, "ns", "c1", UID1, &devs, &err), -EIO);
        assert_string_equal(err.msg, "claim ns/c1 (" UID1 "): device gpu-5 (GPU-00000001) is "
                                     "unhealthy: withdrawn from the ResourceSlice, not prepared");
        assert_false(exists(path));
        assert_int_equal(kdev_dra_plugin_prepared(f->p), 0);

        /* recovered: prepared */
        assert_int_equal(kdev_dra_plugin_set_unhealthy(f->p, NULL, 0, &err), 0);
        assert_int_equal(kdev_dra_prepare_claim(f->p, "ns", "c1", UID1, &devs, &err), 0);
        check_devices(devs);
        assert_true(exists(path));
        /* unhealthy after it was prepared: still answered from the checkpoint */
        assert_int_equal(kdev_dra_plugin_set_unhealthy(f->p, bad, 1, &err), 0);
        assert_int_equal(kdev_dra_prepare_claim(f->p, "ns", "c1", UID1, &devs, &err), 0);
        check_devices(devs);
        assert_int_equal(kdev_dra_unprepare_claim(f->p, UID1, &err), 0);

        /* MIG: a listed MIG device, and a listed parent covering its MIG devices */
        make_mig(f);
        add_claim(f, "ns", "m", UID2,
                  json_pack("[o]",
                            result("a", "gpu.nvidia.com", "node1", "gpu-5-mig-2g10gb-14-4")));
        const char *bad_mig[] = {"GPU-nope", "MIG-bbbb"};
        assert_int_equal(kdev_dra_plugin_set_unhealthy(f->p, bad_mig, 2, &err), 0);
        assert_int_equal(kdev_dra_prepare_claim(f->p, "ns", "m", UID2, NULL, &err), -EIO);
        assert_string_equal(err.msg, "claim ns/m (" UID2 "): device gpu-5-mig-2g10gb-14-4 "
                                     "(MIG-bbbb) is unhealthy: withdrawn from the ResourceSlice, "
                                     "not prepared");
        assert_int_equal(kdev_dra_plugin_set_unhealthy(f->p, bad, 1, &err), 0);
        assert_int_equal(kdev_dra_prepare_claim(f->p, "ns", "m", UID2, NULL, &err), -EIO);
        assert_string_equal(err.msg, "claim ns/m (" UID2 "): device gpu-5-mig-2g10gb-14-4 "
                                     "(MIG-bbbb) is unhealthy: withdrawn from the ResourceSlice, "
                                     "not prepared");
        assert_int_equal(kdev_dra_plugin_prepared(f->p), 0);
        const char *other[] = {"MIG-aaaa"};
        assert_int_equal(kdev_dra_plugin_set_unhealthy(f->p, other, 1, &err), 0);
        assert_int_equal(kdev_dra_prepare_claim(f->p, "ns", "m", UID2, NULL, &err), 0);
        assert_int_equal(kdev_dra_plugin_prepared(f->p), 1);
}

static void test_corrupt_checkpoint_at_start(void **state)
{
        struct fix *f = *state;
        struct kdev_err err = {0};
        char cp[600];
        FILE *fp;

        assert_int_equal(kdev_dra_prepare_claim(f->p, "ns", "c1", UID1, NULL, &err), 0);
        kdev_dra_plugin_free(f->p);
        snprintf(cp, sizeof(cp), "%s/%s", f->data, KDEV_DRA_CP_FILE);
        fp = fopen(cp, "w");
        assert_non_null(fp);
        fputs("garbage", fp);
        fclose(fp);
        new_plugin(f);
        assert_non_null(kdev_dra_plugin_checkpoint_error(f->p));
        assert_non_null(strstr(kdev_dra_plugin_checkpoint_error(f->p), "moved aside"));
        assert_int_equal(kdev_dra_plugin_prepared(f->p), 0);
        assert_false(exists(cp));
        /* unprepare of the lost claim still succeeds and cleans its spec */
        assert_int_equal(kdev_dra_unprepare_claim(f->p, UID1, &err), 0);
        /* and prepare re-verifies against the API server */
        assert_int_equal(kdev_dra_prepare_claim(f->p, "ns", "c1", UID1, NULL, &err), 0);
        assert_int_equal(f->src.calls, 2);
}

/* A checkpoint of a newer kdev: creation refused with the exact message,
 * the file untouched, nothing moved aside. */
static void test_newer_checkpoint_refused(void **state)
{
        struct fix *f = *state;
        struct kdev_err err = {0};
        struct kdev_dra_plugin *p = (void *)1;
        char cp[600], want[1024];
        static const char text[] = "{\"checksum\":\"fnv1a64:0123456789abcdef\",\"data\":{},"
                                   "\"version\":3}";
        struct kdev_dra_plugin_options o = {
                .pool = "node1",
                .data_dir = f->data,
                .cdi_dir = f->cdi,
                .gpus = &f->recs,
                .get_claim = claim_source_get,
                .get_claim_arg = &f->src,
        };

        assert_int_equal(kdev_dra_prepare_claim(f->p, "ns", "c1", UID1, NULL, &err), 0);
        kdev_dra_plugin_free(f->p);
        f->p = NULL;
        snprintf(cp, sizeof(cp), "%s/%s", f->data, KDEV_DRA_CP_FILE);
        write_file(cp, text);
        assert_int_equal(kdev_dra_plugin_new(&o, &p, &err), -ENOTSUP);
        assert_null(p);
        snprintf(want, sizeof(want),
                 "checkpoint %s was written by a newer kdev (version 3, this one reads 1 to "
                 "2); refusing to start so prepared claims are not forgotten",
                 cp);
        assert_string_equal(err.msg, want);
        FILE *fp = fopen(cp, "r");
        char back[256];
        size_t n;

        assert_non_null(fp);
        n = fread(back, 1, sizeof(back) - 1, fp);
        fclose(fp);
        back[n] = '\0';
        assert_string_equal(back, text);
        DIR *d = opendir(f->data);
        struct dirent *e;
        unsigned entries = 0;

        assert_non_null(d);
        while ((e = readdir(d)))
                if (e->d_name[0] != '.')
                        entries++;
        closedir(d);
        assert_int_equal(entries, 1); /* the checkpoint only */
        unlink(cp);
        new_plugin(f);
        assert_int_equal(kdev_dra_plugin_prepared(f->p), 0);
}

struct removed {
        char text[2048];
};

static void on_removed(void *arg, const char *path, int error)
{
        struct removed *r = arg;

        snprintf(r->text + strlen(r->text), sizeof(r->text) - strlen(r->text), "%s:%d\n", path,
                 error);
}

/* Stale temporary files of a killed atomic write are removed at start (and
 * reported), nothing else. */
static void test_remove_stale_temps(void **state)
{
        struct fix *f = *state;
        struct kdev_err err = {0};
        struct removed r = {{0}};
        char p[1024], want[4096];
        static const char *const cdi_keep[] = {
                "k8s.gpu.nvidia.com-claim_" UID2 ".json", /* a spec, not a temp */
                ".k8s.gpu.nvidia.com-claim_" UID2 ".json.abc",
                ".k8s.gpu.nvidia.com-gpu.json.Ab12Cd", /* another kind's spec */
                ".other.example.com-claim_" UID2 ".json.Ab12Cd",
                ".k8s.gpu.nvidia.com-claim_" UID2 ".yaml.Ab12Cd",
                "notes.txt",
        };

        /* nothing there yet: no directory at all */
        assert_int_equal(kdev_dra_plugin_remove_stale_temps(f->p, on_removed, &r, &err), 0);
        assert_string_equal(r.text, "");
        assert_int_equal(kdev_dra_prepare_claim(f->p, "ns", "c1", UID1, NULL, &err), 0);
        for (size_t i = 0; i < sizeof(cdi_keep) / sizeof(cdi_keep[0]); i++) {
                snprintf(p, sizeof(p), "%s/%s", f->cdi, cdi_keep[i]);
                write_file(p, "{}");
        }
        snprintf(p, sizeof(p), "%s/.k8s.gpu.nvidia.com-claim_" UID2 ".json.Q7xZ0p", f->cdi);
        write_file(p, "{\"cdiVersion\":");
        snprintf(p, sizeof(p), "%s/" KDEV_DRA_CP_FILE ".tmp.k3J9aa", f->data);
        write_file(p, "{\"version\":1,");
        snprintf(p, sizeof(p), "%s/" KDEV_DRA_CP_FILE ".bak", f->data);
        write_file(p, "keep");
        assert_int_equal(kdev_dra_plugin_remove_stale_temps(f->p, on_removed, &r, &err), 2);
        snprintf(want, sizeof(want),
                 "%s/.k8s.gpu.nvidia.com-claim_" UID2 ".json.Q7xZ0p:0\n"
                 "%s/" KDEV_DRA_CP_FILE ".tmp.k3J9aa:0\n",
                 f->cdi, f->data);
        assert_string_equal(r.text, want);
        for (size_t i = 0; i < sizeof(cdi_keep) / sizeof(cdi_keep[0]); i++) {
                snprintf(p, sizeof(p), "%s/%s", f->cdi, cdi_keep[i]);
                assert_true(exists(p));
        }
        snprintf(p, sizeof(p), "%s/" KDEV_DRA_CP_FILE ".bak", f->data);
        assert_true(exists(p));
        char path[1024];

        spec_path(f, UID1, path, sizeof(path));
        assert_true(exists(path)); /* the prepared claim's spec stays */
        snprintf(p, sizeof(p), "%s/" KDEV_DRA_CP_FILE, f->data);
        assert_true(exists(p));
        /* and the plugin still answers from its checkpoint */
        kdev_dra_plugin_free(f->p);
        new_plugin(f);
        assert_int_equal(kdev_dra_plugin_prepared(f->p), 1);
        r.text[0] = '\0';
        assert_int_equal(kdev_dra_plugin_remove_stale_temps(f->p, on_removed, &r, &err), 0);
        assert_string_equal(r.text, "");
}

static void test_options(void **state)
{
        struct kdev_dra_plugin_options o = {0};
        struct kdev_dra_plugin *p = (void *)1;
        struct kdev_err err = {0};

        (void)state;
        assert_int_equal(kdev_dra_plugin_new(&o, &p, &err), -EINVAL);
        assert_null(p);
}

int main(void)
{
        const struct CMUnitTest tests[] = {
                cmocka_unit_test_setup_teardown(test_prepare, setup, teardown),
                cmocka_unit_test_setup_teardown(test_idempotent, setup, teardown),
                cmocka_unit_test_setup_teardown(test_unprepare_only_recorded, setup, teardown),
                cmocka_unit_test_setup_teardown(test_claim_uid_rules, setup, teardown),
                cmocka_unit_test_setup_teardown(test_checkpoint_before_spec, setup, teardown),
                cmocka_unit_test_setup_teardown(test_crash_before_spec, setup, teardown),
                cmocka_unit_test_setup_teardown(test_prepare_many, setup, teardown),
                cmocka_unit_test_setup_teardown(test_claim_config, setup, teardown),
                cmocka_unit_test_setup_teardown(test_claim_config_share, setup, teardown),
                cmocka_unit_test_setup_teardown(test_claim_config_errors, setup, teardown),
                cmocka_unit_test_setup_teardown(test_claim_config_mig, setup, teardown),
                cmocka_unit_test_setup_teardown(test_prepare_many_save_fails, setup, teardown),
                cmocka_unit_test_setup_teardown(test_claim_json_types, setup, teardown),
                cmocka_unit_test_setup_teardown(test_prepare_after_unprepare, setup, teardown),
                cmocka_unit_test_setup_teardown(test_restart, setup, teardown),
                cmocka_unit_test_setup_teardown(test_cdi_wiped, setup, teardown),
                cmocka_unit_test_setup_teardown(test_claim_errors, setup, teardown),
                cmocka_unit_test_setup_teardown(test_mig, setup, teardown),
                cmocka_unit_test_setup_teardown(test_unhealthy_refused, setup, teardown),
                cmocka_unit_test_setup_teardown(test_corrupt_checkpoint_at_start, setup, teardown),
                cmocka_unit_test_setup_teardown(test_newer_checkpoint_refused, setup, teardown),
                cmocka_unit_test_setup_teardown(test_remove_stale_temps, setup, teardown),
                cmocka_unit_test(test_options),
        };

        return cmocka_run_group_tests(tests, NULL, NULL);
}
