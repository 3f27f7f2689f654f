/* DRA claim checkpoint: round trip, atomic file, corruption handling. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

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

        expect_corrupt(f, "{\"version\":2,\"checksum\":\"x\",\"data\":{\"claims\":{}}}",
                       "unsupported version");
        setup(state);
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

int main(void)
{
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_fnv),
                cmocka_unit_test_setup_teardown(test_missing_is_empty, setup, teardown),
                cmocka_unit_test_setup_teardown(test_round_trip, setup, teardown),
                cmocka_unit_test_setup_teardown(test_file_format, setup, teardown),
                cmocka_unit_test_setup_teardown(test_corrupt_json, setup, teardown),
                cmocka_unit_test_setup_teardown(test_corrupt_checksum, setup, teardown),
                cmocka_unit_test_setup_teardown(test_corrupt_version, setup, teardown),
                cmocka_unit_test_setup_teardown(test_corrupt_record, setup, teardown),
                cmocka_unit_test(test_put_rejects_bad_device),
                cmocka_unit_test_setup_teardown(test_save_fails_cleanly, setup, teardown),
        };

        return cmocka_run_group_tests(tests, NULL, NULL);
}
