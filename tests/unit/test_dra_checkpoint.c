/* DRA claim checkpoint: round trip, atomic file, corruption handling. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "common/file.h"
#include "dra/checkpoint.h"

struct fix {
        char dir[256];
        char path[512];
};

static int setup(void **state)
{
        struct fix *f = calloc(1, sizeof(*f));

        strcpy(f->dir, "/tmp/kdev-dra-cp-XXXXXX");
        assert_non_null(mkdtemp(f->dir));
        snprintf(f->path, sizeof(f->path), "%s/%s", f->dir, KDEV_DRA_CP_FILE);
        *state = f;
        return 0;
}

static int teardown(void **state)
{
        struct fix *f = *state;
        DIR *d = opendir(f->dir);
        struct dirent *e;
        char p[1024];

        while (d && (e = readdir(d))) {
                if (e->d_name[0] == '.' && (!e->d_name[1] || !strcmp(e->d_name, "..")))
                        continue;
                snprintf(p, sizeof(p), "%s/%s", f->dir, e->d_name);
                unlink(p);
        }
        if (d)
                closedir(d);
        rmdir(f->dir);
        free(f);
        return 0;
}

static size_t count_entries(const char *dir, const char *prefix)
{
        DIR *d = opendir(dir);
        struct dirent *e;
        size_t n = 0;

        while (d && (e = readdir(d)))
                if (!strncmp(e->d_name, prefix, strlen(prefix)))
                        n++;
        if (d)
                closedir(d);
        return n;
}

static json_t *one_device(const char *dev)
{
        return json_pack("[{s:[s],s:s,s:s,s:[s]}]", "requestNames", "gpu", "pool", "node1",
                         "device", dev, "cdiDeviceIDs", "k8s.gpu.nvidia.com/claim=u1-gpu-0");
}

static void write_text(const char *path, const char *text)
{
        FILE *fp = fopen(path, "w");

        assert_non_null(fp);
        fputs(text, fp);
        fclose(fp);
}

static void test_fnv(void **state)
{
        (void)state;
        /* published FNV-1a 64 test values */
        assert_true(kdev_dra_fnv1a64("", 0) == 0xcbf29ce484222325ULL);
        assert_true(kdev_dra_fnv1a64("a", 1) == 0xaf63dc4c8601ec8cULL);
        assert_true(kdev_dra_fnv1a64("foobar", 6) == 0x85944171f73967e8ULL);
}

static void test_missing_is_empty(void **state)
{
        struct fix *f = *state;
        struct kdev_dra_cp cp = {0};
        struct kdev_err err = {0};

        assert_int_equal(kdev_dra_cp_load(&cp, f->path, &err), 0);
        assert_int_equal(kdev_dra_cp_count(&cp), 0);
        kdev_dra_cp_free(&cp);
}

static void test_round_trip(void **state)
{
        struct fix *f = *state;
        struct kdev_dra_cp cp, back = {0};
        struct kdev_err err = {0};
        const json_t *rec;

        assert_int_equal(kdev_dra_cp_init(&cp), 0);
        assert_int_equal(kdev_dra_cp_put(&cp, "u1", "ns1", "claim1", one_device("gpu-0"), &err), 0);
        assert_int_equal(kdev_dra_cp_put(&cp, "u2", "ns2", "claim2", one_device("gpu-1"), &err), 0);
        assert_int_equal(kdev_dra_cp_save(&cp, f->path, &err), 0);
        assert_int_equal(count_entries(f->dir, KDEV_DRA_CP_FILE ".tmp"), 0);
        assert_int_equal(kdev_dra_cp_load(&back, f->path, &err), 0);
        assert_int_equal(kdev_dra_cp_count(&back), 2);
        assert_true(json_equal(cp.claims, back.claims));
        rec = kdev_dra_cp_get(&back, "u2");
        assert_non_null(rec);
        assert_string_equal(json_string_value(json_object_get(rec, "namespace")), "ns2");
        assert_string_equal(json_string_value(json_object_get(
                                    json_array_get(json_object_get(rec, "devices"), 0), "device")),
                            "gpu-1");
        assert_int_equal(kdev_dra_cp_remove(&back, "u2"), 1);
        assert_int_equal(kdev_dra_cp_remove(&back, "u2"), 0);
        assert_int_equal(kdev_dra_cp_save(&back, f->path, &err), 0);
        assert_int_equal(kdev_dra_cp_load(&cp, f->path, &err), 0);
        assert_int_equal(kdev_dra_cp_count(&cp), 1);
        assert_null(kdev_dra_cp_get(&cp, "u2"));
        assert_non_null(kdev_dra_cp_get(&cp, "u1"));
        kdev_dra_cp_free(&cp);
        kdev_dra_cp_free(&back);
}

/* The file is byte for byte jansson's canonical dump of the whole object
 * (JSON_COMPACT | JSON_SORT_KEYS), also when the saves reuse the claims'
 * texts of earlier saves and claims were replaced, removed and restored. */
static void test_cached_text_canonical(void **state)
{
        struct fix *f = *state;
        static const char *const uids[] = {"b-2", "a-10", "A-1", "a-9", "0x", "zz", "a-1"};
        struct kdev_dra_cp cp;
        struct kdev_err err = {0};
        char *text = NULL, *want, sum[64];
        json_t *root, *data, *rec;
        size_t len = 0;

        assert_int_equal(kdev_dra_cp_init(&cp), 0);
        for (unsigned round = 0; round < 3; round++) {
                for (size_t i = 0; i < sizeof(uids) / sizeof(uids[0]); i++) {
                        char dev[32];

                        snprintf(dev, sizeof(dev), "gpu-%zu", i + round);
                        if (round == 1 && i % 2)
                                continue; /* kept from the last save */
                        assert_int_equal(kdev_dra_cp_put(&cp, uids[i], "ns", "c", one_device(dev),
                                                         &err), 0);
                }
                if (round == 2) {
                        rec = json_incref((json_t *)kdev_dra_cp_get(&cp, "a-9"));
                        assert_int_equal(kdev_dra_cp_remove(&cp, "a-9"), 1);
                        assert_int_equal(kdev_dra_cp_remove(&cp, "zz"), 1);
                        assert_int_equal(kdev_dra_cp_restore(&cp, "a-9", rec), 0);
                        json_decref(rec);
                }
                assert_int_equal(kdev_dra_cp_save(&cp, f->path, &err), 0);
                data = json_pack("{s:O}", "claims", cp.claims);
                want = json_dumps(data, JSON_COMPACT | JSON_SORT_KEYS);
                snprintf(sum, sizeof(sum), "fnv1a64:%016llx",
                         (unsigned long long)kdev_dra_fnv1a64(want, strlen(want)));
                free(want);
                root = json_pack("{s:i,s:s,s:o}", "version", 1, "checksum", sum, "data", data);
                want = json_dumps(root, JSON_COMPACT | JSON_SORT_KEYS);
                assert_int_equal(kdev_file_read(f->path, NULL, 1 << 20, 0, &text, &len, NULL), 0);
                assert_string_equal(text, want);
                free(text);
                free(want);
                json_decref(root);
        }
        assert_int_equal(kdev_dra_cp_count(&cp), 6);
        kdev_dra_cp_free(&cp);
}

static void test_file_format(void **state)
{
        struct fix *f = *state;
        struct kdev_dra_cp cp;
        struct kdev_err err = {0};
        json_t *root;
        char *canon, want[64];

        assert_int_equal(kdev_dra_cp_init(&cp), 0);
        assert_int_equal(kdev_dra_cp_put(&cp, "u1", "ns1", "claim1", one_device("gpu-0"), &err), 0);
        assert_int_equal(kdev_dra_cp_save(&cp, f->path, &err), 0);
        root = json_load_file(f->path, 0, NULL);
        assert_non_null(root);
        assert_int_equal(json_integer_value(json_object_get(root, "version")), 1);
        canon = json_dumps(json_object_get(root, "data"), JSON_COMPACT | JSON_SORT_KEYS);
        snprintf(want, sizeof(want), "fnv1a64:%016llx",
                 (unsigned long long)kdev_dra_fnv1a64(canon, strlen(canon)));
        assert_string_equal(json_string_value(json_object_get(root, "checksum")), want);
        free(canon);
        json_decref(root);
        kdev_dra_cp_free(&cp);
}

static int saved_version(struct fix *f)
{
        json_t *root = json_load_file(f->path, 0, NULL);
        int v;

        assert_non_null(root);
        v = (int)json_integer_value(json_object_get(root, "version"));
        json_decref(root);
        return v;
}

/* The file is version 2 while a record holds a share, a MIG placement or
 * "migPending" (touched in place or put), version 1 otherwise; both load. */
static void test_version_follows_records(void **state)
{
        struct fix *f = *state;
        struct kdev_dra_cp cp, back = {0};
        struct kdev_err err = {0};
        json_t *devs;

        assert_int_equal(kdev_dra_cp_init(&cp), 0);
        assert_int_equal(kdev_dra_cp_put(&cp, "u1", "ns", "c1", one_device("gpu-0"), &err), 0);
        assert_int_equal(kdev_dra_cp_save(&cp, f->path, &err), 0);
        assert_int_equal(saved_version(f), 1);
        devs = one_device("gpu-1");
        json_object_set_new(json_array_get(devs, 0), "share",
                            json_pack("{s:s,s:I,s:i}", "shareID", "s-1", "memory",
                                      (json_int_t)1 << 30, "compute", 25));
        assert_int_equal(kdev_dra_cp_put(&cp, "u2", "ns", "c2", devs, &err), 0);
        assert_int_equal(kdev_dra_cp_save(&cp, f->path, &err), 0);
        assert_int_equal(saved_version(f), 2);
        assert_int_equal(kdev_dra_cp_load(&back, f->path, &err), 0);
        assert_int_equal(kdev_dra_cp_count(&back), 2);
        kdev_dra_cp_free(&back);
        assert_int_equal(kdev_dra_cp_remove(&cp, "u2"), 1);
        assert_int_equal(kdev_dra_cp_save(&cp, f->path, &err), 0);
        assert_int_equal(saved_version(f), 1);
        /* changed in place and touched */
        json_object_set_new((json_t *)kdev_dra_cp_get(&cp, "u1"), "migPending", json_true());
        kdev_dra_cp_touch(&cp, "u1");
        assert_int_equal(kdev_dra_cp_save(&cp, f->path, &err), 0);
        assert_int_equal(saved_version(f), 2);
        json_object_del((json_t *)kdev_dra_cp_get(&cp, "u1"), "migPending");
        json_object_set_new(json_array_get(json_object_get(kdev_dra_cp_get(&cp, "u1"), "devices"),
                                           0),
                            "mig", json_pack("{s:s,s:i,s:i,s:i}", "gpu", "GPU-x", "profileId", 9,
                                             "start", 4, "size", 4));
        kdev_dra_cp_touch(&cp, "u1");
        assert_int_equal(kdev_dra_cp_save(&cp, f->path, &err), 0);
        assert_int_equal(saved_version(f), 2);
        assert_int_equal(kdev_dra_cp_load(&back, f->path, &err), 0);
        assert_int_equal(kdev_dra_cp_count(&back), 1);
        kdev_dra_cp_free(&back);
        kdev_dra_cp_free(&cp);
}

static void expect_corrupt(struct fix *f, const char *text, const char *msg_part)
{
        struct kdev_dra_cp cp = {0};
        struct kdev_err err = {0};

        write_text(f->path, text);
        assert_int_equal(kdev_dra_cp_load(&cp, f->path, &err), -EBADMSG);
        assert_int_equal(err.code, EBADMSG);
        assert_non_null(strstr(err.msg, "is corrupt"));
        assert_non_null(strstr(err.msg, msg_part));
        assert_non_null(strstr(err.msg, "moved aside to"));
        assert_int_equal(kdev_dra_cp_count(&cp), 0);
        assert_int_equal(access(f->path, F_OK), -1);
        assert_int_equal(count_entries(f->dir, KDEV_DRA_CP_FILE ".corrupt-"), 1);
        kdev_dra_cp_free(&cp);
        teardown((void **)&f);
}

/* Files kdev did not write (not regular) and oversized ones are neither read
 * nor moved aside: the plugin does not start. */
static void expect_refused(struct fix *f, int rc, const char *want)
{
        struct kdev_dra_cp cp = {0};
        struct kdev_err err = {0};
        struct stat before, after;

        assert_int_equal(lstat(f->path, &before), 0);
        assert_int_equal(kdev_dra_cp_load(&cp, f->path, &err), rc);
        assert_int_equal(err.code, -rc);
        assert_string_equal(err.msg, want);
        assert_int_equal(kdev_dra_cp_count(&cp), 0);
        assert_int_equal(lstat(f->path, &after), 0); /* left where it was */
        assert_int_equal(after.st_ino, before.st_ino);
        assert_int_equal(count_entries(f->dir, KDEV_DRA_CP_FILE ".corrupt-"), 0);
        kdev_dra_cp_free(&cp);
}

static void test_not_regular_refused(void **state)
{
        struct fix *f = *state;
        char want[2048];

        assert_int_equal(mkfifo(f->path, 0600), 0);
        snprintf(want, sizeof(want),
                 "claim checkpoint %s: is not a regular file (a FIFO); refusing to start, it is "
                 "left alone", f->path);
        expect_refused(f, -EINVAL, want);
        unlink(f->path);

        assert_int_equal(symlink("/dev/zero", f->path), 0);
        snprintf(want, sizeof(want),
                 "claim checkpoint %s: is not a regular file (a character device); refusing to "
                 "start, it is left alone", f->path);
        expect_refused(f, -EINVAL, want);
        unlink(f->path);

        assert_int_equal(mkdir(f->path, 0700), 0);
        snprintf(want, sizeof(want),
                 "claim checkpoint %s: is not a regular file (a directory); refusing to start, "
                 "it is left alone", f->path);
        expect_refused(f, -EISDIR, want);
        rmdir(f->path);
}

static void test_oversized_refused(void **state)
{
        struct fix *f = *state;
        char want[2048];
        FILE *fp = fopen(f->path, "w");

        assert_non_null(fp);
        assert_int_equal(ftruncate(fileno(fp), KDEV_DRA_CP_FILE_MAX + 1), 0);
        fclose(fp);
        snprintf(want, sizeof(want),
                 "%s: the claim checkpoint is larger than 16777216 bytes; refusing to start, it "
                 "is left alone", f->path);
        expect_refused(f, -EFBIG, want);
}

/* A NUL byte is named with its offset (jansson would only say "Invalid or
 * incomplete multibyte or wide character"); the file is moved aside. */
static void test_corrupt_nul_byte(void **state)
{
        struct fix *f = *state;
        struct kdev_dra_cp cp = {0};
        struct kdev_err err = {0};
        char want[2048];
        FILE *fp = fopen(f->path, "w");

        assert_non_null(fp);
        fwrite("{\"version\":1\0}", 1, 14, fp);
        fclose(fp);
        assert_int_equal(kdev_dra_cp_load(&cp, f->path, &err), -EBADMSG);
        snprintf(want, sizeof(want),
                 "claim checkpoint %s is corrupt (contains a NUL byte at offset 12); moved aside "
                 "to %s.corrupt-", f->path, f->path);
        assert_memory_equal(err.msg, want, strlen(want));
        assert_int_equal(access(f->path, F_OK), -1);
        assert_int_equal(count_entries(f->dir, KDEV_DRA_CP_FILE ".corrupt-"), 1);
        kdev_dra_cp_free(&cp);
}

static void test_corrupt_json(void **state)
{
        struct fix *f = *state;

        expect_corrupt(f, "{\"version\":1,", "bad JSON");
        setup(state);
}

static void test_corrupt_checksum(void **state)
{
        struct fix *f = *state;
        struct kdev_dra_cp cp;
        struct kdev_err err = {0};
        char *text;

        assert_int_equal(kdev_dra_cp_init(&cp), 0);
        assert_int_equal(kdev_dra_cp_put(&cp, "u1", "ns1", "claim1", one_device("gpu-0"), &err), 0);
        assert_int_equal(kdev_dra_cp_save(&cp, f->path, &err), 0);
        kdev_dra_cp_free(&cp);
        /* flip the device name: still valid JSON and records, wrong checksum */
        FILE *fp = fopen(f->path, "r");
        char buf[4096];
        size_t n = fread(buf, 1, sizeof(buf) - 1, fp);

        fclose(fp);
        buf[n] = '\0';
        text = strstr(buf, "gpu-0\"");
        assert_non_null(text);
        text[4] = '1';
        expect_corrupt(f, buf, "checksum mismatch");
        setup(state);
}

static void test_corrupt_version(void **state)
{
        struct fix *f = *state;
        static const char *const bad[] = {
                "{\"version\":0,\"checksum\":\"x\",\"data\":{\"claims\":{}}}",
                "{\"version\":-3,\"checksum\":\"x\",\"data\":{\"claims\":{}}}",
                "{\"checksum\":\"x\",\"data\":{\"claims\":{}}}",
        };

        /* versions that are no integer >= 1: corrupt, moved aside as before */
        for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
                expect_corrupt(f, bad[i], "unsupported version (want 1 to 2)");
                setup(state);
                f = *state;
        }
}

/* A checkpoint of a newer kdev: refused with the exact message, the file
 * left exactly as it was, nothing moved aside. */
/* A value of another JSON type than the format's, at any depth: the file is
 * corrupt, the message names the value's path and both types. */
static void test_corrupt_json_types(void **state)
{
        struct fix *f = *state;
        static const struct {
                const char *data, *msg; /* data: NULL for the whole file in msg's place */
                const char *file;
        } cases[] = {
                {NULL, "top level: expected an object, got an array", "[2]"},
                {NULL, ".version: expected an integer, got a string",
                 "{\"version\":\"2\",\"checksum\":\"x\",\"data\":{\"claims\":{}}}"},
                {NULL, ".version: expected an integer, got a number",
                 "{\"version\":2.0,\"checksum\":\"x\",\"data\":{\"claims\":{}}}"},
                {NULL, ".data: expected an object, got an array",
                 "{\"version\":1,\"checksum\":\"x\",\"data\":[]}"},
                {NULL, ".data.claims: expected an object, got an array",
                 "{\"version\":1,\"checksum\":\"x\",\"data\":{\"claims\":[]}}"},
                {NULL, ".checksum: expected a string, got an array",
                 "{\"version\":1,\"checksum\":[],\"data\":{\"claims\":{}}}"},
                {"{\"claims\":{\"u1\":[]}}",
                 ".data.claims[\"u1\"]: expected an object, got an array", NULL},
                {"{\"claims\":{\"u1\":{\"namespace\":\"ns\",\"name\":\"c\",\"devices\":{}}}}",
                 ".data.claims[\"u1\"].devices: expected an array, got an object", NULL},
                {"{\"claims\":{\"u1\":{\"namespace\":\"ns\",\"name\":\"c\",\"devices\":[[]]}}}",
                 ".data.claims[\"u1\"].devices[0]: expected an object, got an array", NULL},
                {"{\"claims\":{\"u1\":{\"namespace\":\"ns\",\"name\":\"c\",\"devices\":[{\"pool\":"
                 "\"p\",\"device\":\"d\",\"requestNames\":[\"r\"],\"cdiDeviceIDs\":[{}]}]}}}",
                 ".data.claims[\"u1\"].devices[0].cdiDeviceIDs[0]: expected a string, got an "
                 "object", NULL},
        };

        for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
                struct kdev_dra_cp cp = {0};
                struct kdev_err err = {0};
                char text[1024], want[2048];

                if (cases[i].data) {
                        /* the checksum is over the canonical text: the records pass it */
                        json_t *d = json_loads(cases[i].data, 0, NULL);
                        char *canon = json_dumps(d, JSON_COMPACT | JSON_SORT_KEYS);

                        assert_non_null(canon);
                        snprintf(text, sizeof(text),
                                 "{\"version\":1,\"checksum\":\"fnv1a64:%016llx\",\"data\":%s}",
                                 (unsigned long long)kdev_dra_fnv1a64(canon, strlen(canon)),
                                 canon);
                        free(canon);
                        json_decref(d);
                } else
                        snprintf(text, sizeof(text), "%s", cases[i].file);
                write_text(f->path, text);
                assert_int_equal(kdev_dra_cp_load(&cp, f->path, &err), -EBADMSG);
                snprintf(want, sizeof(want),
                         "claim checkpoint %s is corrupt (%s); moved aside to %s.corrupt-",
                         f->path, cases[i].msg, f->path);
                assert_memory_equal(err.msg, want, strlen(want));
                assert_int_equal(kdev_dra_cp_count(&cp), 0);
                kdev_dra_cp_free(&cp);
                teardown(state);
                setup(state);
                f = *state;
        }
}

static void test_newer_version_refused(void **state)
{
        struct fix *f = *state;
        static const char *const newer[] = {
                "{\"checksum\":\"fnv1a64:0000000000000000\",\"data\":{},\"version\":3}",
                "{\"version\":17,\"data\":{\"claims\":{\"u\":{\"new\":true}}}}",
        };
        static const char *const ver[] = {"3", "17"};

        for (size_t i = 0; i < 2; i++) {
                struct kdev_dra_cp cp = {0};
                struct kdev_err err = {0};
                char want[1024], back[512];
                FILE *fp;
                size_t n;

                write_text(f->path, newer[i]);
                assert_int_equal(kdev_dra_cp_load(&cp, f->path, &err), -ENOTSUP);
                assert_int_equal(err.code, ENOTSUP);
                snprintf(want, sizeof(want),
                         "checkpoint %s was written by a newer kdev (version %s, this one reads "
                         "1 to 2); refusing to start so prepared claims are not forgotten",
                         f->path, ver[i]);
                assert_string_equal(err.msg, want);
                assert_int_equal(kdev_dra_cp_count(&cp), 0);
                fp = fopen(f->path, "r");
                assert_non_null(fp);
                n = fread(back, 1, sizeof(back) - 1, fp);
                fclose(fp);
                back[n] = '\0';
                assert_string_equal(back, newer[i]);
                assert_int_equal(count_entries(f->dir, KDEV_DRA_CP_FILE ".corrupt-"), 0);
                kdev_dra_cp_free(&cp);
        }
}

static void test_corrupt_record(void **state)
{
        struct fix *f = *state;
        json_t *data = json_pack("{s:{s:{s:s,s:s,s:[{s:s}]}}}", "claims", "u1", "namespace", "n",
                                 "name", "c", "devices", "pool", "p");
        char *canon = json_dumps(data, JSON_COMPACT | JSON_SORT_KEYS), text[1024];

        snprintf(text, sizeof(text), "{\"version\":1,\"checksum\":\"fnv1a64:%016llx\",\"data\":%s}",
                 (unsigned long long)kdev_dra_fnv1a64(canon, strlen(canon)), canon);
        free(canon);
        json_decref(data);
        expect_corrupt(f, text, "\"device\" missing");
        setup(state);
}

static void test_put_rejects_bad_device(void **state)
{
        struct kdev_dra_cp cp;
        struct kdev_err err = {0};

        (void)state;
        assert_int_equal(kdev_dra_cp_init(&cp), 0);
        assert_int_equal(kdev_dra_cp_put(&cp, "u1", "n", "c", json_pack("[{s:s}]", "pool", "p"),
                                         &err),
                         -EINVAL);
        assert_int_equal(kdev_dra_cp_count(&cp), 0);
        kdev_dra_cp_free(&cp);
}

static void test_save_fails_cleanly(void **state)
{
        struct fix *f = *state;
        struct kdev_dra_cp cp;
        struct kdev_err err = {0};
        char path[600];

        assert_int_equal(kdev_dra_cp_init(&cp), 0);
        /* a directory in place of the target: rename fails, no temp left */
        snprintf(path, sizeof(path), "%s/target", f->dir);
        assert_int_equal(mkdir(path, 0700), 0);
        char inner[700];

        snprintf(inner, sizeof(inner), "%s/x", path);
        write_text(inner, "x");
        assert_true(kdev_dra_cp_save(&cp, path, &err) < 0);
        assert_int_equal(count_entries(f->dir, "target.tmp"), 0);
        unlink(inner);
        rmdir(path);
        kdev_dra_cp_free(&cp);
}

static bool has_entry(const char *dir, const char *name)
{
        char p[1024];

        snprintf(p, sizeof(p), "%s/%s", dir, name);
        return access(p, F_OK) == 0;
}

/* Moved-aside copies are capped: the newest KDEV_DRA_CP_KEEP_CORRUPT stay
 * (by seconds, then counter), other files are never touched; a name taken
 * in the same second gets a counter instead of replacing that copy. */
static void test_corrupt_copies_capped(void **state)
{
        struct fix *f = *state;
        struct kdev_dra_cp cp = {0};
        struct kdev_err err = {0};
        long long now = (long long)time(NULL);
        char name[256], want[2048], aside[600];
        static const char *const old[] = {
                KDEV_DRA_CP_FILE ".corrupt-100", KDEV_DRA_CP_FILE ".corrupt-200",
                KDEV_DRA_CP_FILE ".corrupt-200-1", KDEV_DRA_CP_FILE ".corrupt-300",
                KDEV_DRA_CP_FILE ".corrupt-50",
        };
        static const char *const others[] = {
                KDEV_DRA_CP_FILE ".corrupt-x", KDEV_DRA_CP_FILE ".corrupt-",
                KDEV_DRA_CP_FILE ".corrupt-1-", "other.json.corrupt-1", KDEV_DRA_CP_FILE,
        };
        char p[600];

        assert_int_equal(KDEV_DRA_CP_KEEP_CORRUPT, 5);
        for (size_t i = 0; i < 5; i++) {
                snprintf(p, sizeof(p), "%s/%s", f->dir, old[i]);
                write_text(p, "old");
        }
        for (size_t i = 0; i < 4; i++) {
                snprintf(p, sizeof(p), "%s/%s", f->dir, others[i]);
                write_text(p, "other");
        }
        /* this second (and the next two) already taken: a counter is added */
        for (long long t = now; t < now + 3; t++) {
                snprintf(p, sizeof(p), "%s/" KDEV_DRA_CP_FILE ".corrupt-%lld", f->dir, t);
                write_text(p, "same second");
        }
        write_text(f->path, "garbage");
        assert_int_equal(kdev_dra_cp_load(&cp, f->path, &err), -EBADMSG);
        /* the new copy is "<path>.corrupt-<t>-1" for the t of the load */
        const char *at = strstr(err.msg, "moved aside to ");
        assert_non_null(at);
        at += strlen("moved aside to ");
        snprintf(aside, sizeof(aside), "%.*s", (int)strcspn(at, " "), at);
        char prefix[600], *end;

        snprintf(prefix, sizeof(prefix), "%s/" KDEV_DRA_CP_FILE ".corrupt-", f->dir);
        assert_int_equal(strncmp(aside, prefix, strlen(prefix)), 0);
        long long t = strtoll(aside + strlen(prefix), &end, 10);
        assert_string_equal(end, "-1");
        assert_true(t >= now && t < now + 3);
        /* 8 copies before + 1 new: the 5 newest stay */
        snprintf(want, sizeof(want),
                 "claim checkpoint %s is corrupt (bad JSON at line 1 column 7: '[' or '{' "
                 "expected near 'garbage'); moved aside to %s (4 older copies removed, the "
                 "newest 5 kept), starting with no prepared claims",
                 f->path, aside);
        assert_string_equal(err.msg, want);
        assert_int_equal(count_entries(f->dir, KDEV_DRA_CP_FILE ".corrupt-"), 5 + 3);
        assert_true(access(aside, F_OK) == 0);
        for (long long u = now; u < now + 3; u++) {
                snprintf(name, sizeof(name), KDEV_DRA_CP_FILE ".corrupt-%lld", u);
                assert_true(has_entry(f->dir, name));
        }
        /* the 5th newest: 300 when t is the newest second; else t's "-1"
         * copy is older than (t+1) and (t+2) but still among the 5 */
        assert_true(has_entry(f->dir, KDEV_DRA_CP_FILE ".corrupt-300"));
        for (size_t i = 0; i < 5; i++)
                if (strcmp(old[i], KDEV_DRA_CP_FILE ".corrupt-300") != 0)
                        assert_false(has_entry(f->dir, old[i]));
        for (size_t i = 0; i < 4; i++)
                assert_true(has_entry(f->dir, others[i]));
        kdev_dra_cp_free(&cp);
}

/* Stale temporary files of atomic writes: exactly the mkstemp names of the
 * given pattern, regular files only, each reported. */
struct removed_log {
        char text[4096];
};

static void log_removed(void *arg, const char *path, int error)
{
        struct removed_log *l = arg;
        const char *base = strrchr(path, '/');

        snprintf(l->text + strlen(l->text), sizeof(l->text) - strlen(l->text), "%s%s:%d",
                 l->text[0] ? " " : "", base ? base + 1 : path, error);
}

static void test_remove_temps(void **state)
{
        struct fix *f = *state;
        struct kdev_err err = {0};
        struct removed_log log = {{0}};
        char p[600], q[1024];
        static const char *const keep[] = {
                KDEV_DRA_CP_FILE,
                KDEV_DRA_CP_FILE ".tmp.AbC12",     /* 5 characters */
                KDEV_DRA_CP_FILE ".tmp.AbC1234",   /* 7 */
                KDEV_DRA_CP_FILE ".tmp.Ab-123",    /* not a letter or digit */
                KDEV_DRA_CP_FILE ".tmp.x.AbC123",  /* something between */
                "x" KDEV_DRA_CP_FILE ".tmp.AbC123",
                KDEV_DRA_CP_FILE ".corrupt-1",
        };

        for (size_t i = 0; i < sizeof(keep) / sizeof(keep[0]); i++) {
                snprintf(p, sizeof(p), "%s/%s", f->dir, keep[i]);
                write_text(p, "x");
        }
        snprintf(p, sizeof(p), "%s/" KDEV_DRA_CP_FILE ".tmp.Zz9aQ0", f->dir);
        write_text(p, "{\"version\":1");
        snprintf(p, sizeof(p), "%s/" KDEV_DRA_CP_FILE ".tmp.Dir123", f->dir);
        assert_int_equal(mkdir(p, 0700), 0);
        snprintf(q, sizeof(q), "%s/" KDEV_DRA_CP_FILE ".tmp.Lnk123", f->dir);
        assert_int_equal(symlink(f->path, q), 0);

        assert_int_equal(kdev_dra_cp_remove_temps(f->path, log_removed, &log, &err), 1);
        assert_string_equal(log.text, KDEV_DRA_CP_FILE ".tmp.Zz9aQ0:0");
        for (size_t i = 0; i < sizeof(keep) / sizeof(keep[0]); i++)
                assert_true(has_entry(f->dir, keep[i]));
        assert_true(has_entry(f->dir, KDEV_DRA_CP_FILE ".tmp.Dir123"));
        struct stat st;
        assert_int_equal(lstat(q, &st), 0);
        assert_true(S_ISLNK(st.st_mode));
        assert_int_equal(rmdir(p), 0);
        /* again: nothing left to remove */
        log.text[0] = '\0';
        assert_int_equal(kdev_dra_cp_remove_temps(f->path, log_removed, &log, &err), 0);
        assert_string_equal(log.text, "");

        /* the infix form: "<prefix><one or more characters><infix>XXXXXX" */
        static const char *const cdi_keep[] = {
                ".k8s.gpu.nvidia.com-claim_.json.Q1w2E3", /* nothing between */
                "k8s.gpu.nvidia.com-claim_u1.json",
                ".k8s.gpu.nvidia.com-claim_u1.json.Q1w2E",
                ".k8s.gpu.nvidia.com-claim_u1.jsonxQ1w2E3",
                ".example.com-claim_u1.json.Q1w2E3",
        };
        for (size_t i = 0; i < sizeof(cdi_keep) / sizeof(cdi_keep[0]); i++) {
                snprintf(p, sizeof(p), "%s/%s", f->dir, cdi_keep[i]);
                write_text(p, "x");
        }
        snprintf(p, sizeof(p), "%s/.k8s.gpu.nvidia.com-claim_u1.json.Q1w2E3", f->dir);
        write_text(p, "{");
        snprintf(p, sizeof(p), "%s/.k8s.gpu.nvidia.com-claim_u_2.json.000000", f->dir);
        write_text(p, "{");
        assert_int_equal(kdev_dra_remove_temps(f->dir, ".k8s.gpu.nvidia.com-claim_", ".json.",
                                               NULL, NULL, &err),
                         2);
        assert_false(has_entry(f->dir, ".k8s.gpu.nvidia.com-claim_u1.json.Q1w2E3"));
        assert_false(has_entry(f->dir, ".k8s.gpu.nvidia.com-claim_u_2.json.000000"));
        for (size_t i = 0; i < sizeof(cdi_keep) / sizeof(cdi_keep[0]); i++)
                assert_true(has_entry(f->dir, cdi_keep[i]));

        /* a missing directory: nothing to do; an unreadable path: an error */
        snprintf(p, sizeof(p), "%s/none", f->dir);
        assert_int_equal(kdev_dra_remove_temps(p, "a", NULL, NULL, NULL, &err), 0);
        snprintf(p, sizeof(p), "%s/" KDEV_DRA_CP_FILE, f->dir);
        err = (struct kdev_err){0};
        assert_int_equal(kdev_dra_remove_temps(p, "a", NULL, NULL, NULL, &err), -ENOTDIR);
        snprintf(q, sizeof(q), "open %s: %s", p, strerror(ENOTDIR));
        assert_string_equal(err.msg, q);
}

int main(void)
{
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_fnv),
                cmocka_unit_test_setup_teardown(test_missing_is_empty, setup, teardown),
                cmocka_unit_test_setup_teardown(test_round_trip, setup, teardown),
                cmocka_unit_test_setup_teardown(test_cached_text_canonical, setup, teardown),
                cmocka_unit_test_setup_teardown(test_file_format, setup, teardown),
                cmocka_unit_test_setup_teardown(test_version_follows_records, setup, teardown),
                cmocka_unit_test_setup_teardown(test_corrupt_json, setup, teardown),
                cmocka_unit_test_setup_teardown(test_not_regular_refused, setup, teardown),
                cmocka_unit_test_setup_teardown(test_oversized_refused, setup, teardown),
                cmocka_unit_test_setup_teardown(test_corrupt_nul_byte, setup, teardown),
                cmocka_unit_test_setup_teardown(test_corrupt_checksum, setup, teardown),
                cmocka_unit_test_setup_teardown(test_corrupt_version, setup, teardown),
                cmocka_unit_test_setup_teardown(test_corrupt_json_types, setup, teardown),
                cmocka_unit_test_setup_teardown(test_newer_version_refused, setup, teardown),
                cmocka_unit_test_setup_teardown(test_corrupt_copies_capped, setup, teardown),
                cmocka_unit_test_setup_teardown(test_remove_temps, setup, teardown),
                cmocka_unit_test_setup_teardown(test_corrupt_record, setup, teardown),
                cmocka_unit_test(test_put_rejects_bad_device),
                cmocka_unit_test_setup_teardown(test_save_fails_cleanly, setup, teardown),
        };

        return cmocka_run_group_tests(tests, NULL, NULL);
}
