/* CDI spec files: a GPU spec with one device per GPU plus "all", written
 * atomically (mode 0644, directories created), read back equal, replaced and
 * removed.
 *
 * With KDEV_CDI_SAMPLES_DIR set in the environment, this program instead
 * writes its sample specs into that directory and exits 0; the integration
 * test tests/integration/cdi_schema.py validates them against the JSON schema
 * tests/cdi/schema/cdi-spec.schema.json. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
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

#include "cdi/cdi.h"
#include "tmptree.h"

#define GPU_KIND "k8s.device-plugin.nvidia.com/gpu"

static void must(int rc, const struct kdev_err *e, const char *what)
{
        if (rc < 0)
                fail_msg("%s: %d %s", what, rc, e->msg);
}

/* An NVIDIA-like spec: spec-level control nodes, a hook and a library mount;
 * one device per GPU (named by UUID, or by index) holding its /dev/nvidiaN;
 * and "all" holding the union of the GPU devices' edits. */
static struct kdev_cdi_spec *gpu_spec(unsigned n_gpus, bool index_names)
{
        struct kdev_err e = { 0 };
        struct kdev_cdi_spec *s = kdev_cdi_spec_new(GPU_KIND, &e);
        if (!s)
                fail_msg("%s", e.msg);
        struct kdev_cdi_edits *se = kdev_cdi_spec_edits(s);
        static const char *const ctl[] = { "/dev/nvidiactl", "/dev/nvidia-uvm",
                                           "/dev/nvidia-uvm-tools" };
        for (size_t i = 0; i < 3; i++) {
                struct kdev_cdi_device_node n = { .path = (char *)ctl[i],
                                                  .host_path = (char *)ctl[i] };
                must(kdev_cdi_edits_add_device_node(se, &n, &e), &e, "ctl node");
        }
        must(kdev_cdi_edits_add_env(se, "NVIDIA_VISIBLE_DEVICES=void", &e), &e, "env");
        struct kdev_cdi_hook h = {
                .hook_name = "createContainer",
                .path = "/usr/bin/nvidia-cdi-hook",
                .args = (char *[]){ "nvidia-cdi-hook", "update-ldcache", "--folder",
                                    "/usr/lib/x86_64-linux-gnu" },
                .n_args = 4,
        };
        must(kdev_cdi_edits_add_hook(se, &h, &e), &e, "hook");
        struct kdev_cdi_mount m = {
                .host_path = "/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.550.54.15",
                .container_path = "/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.550.54.15",
                .options = (char *[]){ "ro", "nosuid", "nodev", "bind" },
                .n_options = 4,
        };
        must(kdev_cdi_edits_add_mount(se, &m, &e), &e, "mount");

        for (unsigned i = 0; i < n_gpus; i++) {
                char name[64], path[32];
                if (index_names)
                        snprintf(name, sizeof(name), "%u", i);
                else
                        snprintf(name, sizeof(name), "GPU-%08x-1111-2222-3333-44444444444%u",
                                 0xabc0u + i, i % 10);
                snprintf(path, sizeof(path), "/dev/nvidia%u", i);
                struct kdev_cdi_device *d = kdev_cdi_spec_add_device(s, name, &e);
                if (!d)
                        fail_msg("%s", e.msg);
                struct kdev_cdi_device_node n = { .path = path, .host_path = path, .type = "c",
                                                  .has_major = true, .major = 195,
                                                  .has_minor = true, .minor = i,
                                                  .permissions = "rw" };
                must(kdev_cdi_edits_add_device_node(kdev_cdi_device_edits(d), &n, &e), &e,
                     "gpu node");
        }
        struct kdev_cdi_device *all = kdev_cdi_spec_add_device(s, "all", &e);
        if (!all)
                fail_msg("%s", e.msg);
        for (unsigned i = 0; i < n_gpus; i++)
                must(kdev_cdi_edits_merge(kdev_cdi_device_edits(all), &s->devices[i]->edits, &e),
                     &e, "merge");
        return s;
}

static char *read_text(const char *path)
{
        FILE *f = fopen(path, "r");
        if (!f)
                return NULL;
        char *buf = NULL;
        size_t len = 0;
        FILE *mem = open_memstream(&buf, &len);
        char chunk[4096];
        size_t n;
        while ((n = fread(chunk, 1, sizeof(chunk), f)) > 0)
                fwrite(chunk, 1, n, mem);
        fclose(mem);
        fclose(f);
        return buf;
}

/* Number of entries in |dir| other than "." and ".."; the first name goes to |first|. */
static int count_entries(const char *dir, char *first, size_t size)
{
        DIR *d = opendir(dir);
        if (!d)
                return -1;
        int n = 0;
        struct dirent *de;
        while ((de = readdir(d))) {
                if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
                        continue;
                if (n++ == 0 && first)
                        snprintf(first, size, "%s", de->d_name);
        }
        closedir(d);
        return n;
}

static int setup(void **state)
{
        char *dir = strdup("/tmp/kdev-cdi-test.XXXXXX");
        if (!dir || !mkdtemp(dir))
                return -1;
        *state = dir;
        return 0;
}

static int teardown(void **state)
{
        tmptree_remove(*state);
        free(*state);
        return 0;
}

static void test_gpu_spec_roundtrip(void **state)
{
        const char *tmp = *state;
        struct kdev_err e = { 0 };
        struct kdev_cdi_spec *s = gpu_spec(8, false);

        /* "all" holds the union of the GPU nodes, in GPU order */
        const struct kdev_cdi_device *all = kdev_cdi_spec_find_device(s, "all");
        assert_non_null(all);
        assert_int_equal(all->edits.n_device_nodes, 8);
        for (unsigned i = 0; i < 8; i++) {
                char path[32];
                snprintf(path, sizeof(path), "/dev/nvidia%u", i);
                assert_string_equal(all->edits.device_nodes[i].path, path);
                assert_int_equal(all->edits.device_nodes[i].minor, i);
        }
        assert_int_equal(s->n_devices, 9);
        /* hostPath makes it 0.5.0 */
        assert_string_equal(kdev_cdi_spec_version(s), "0.5.0");

        char name[128], dir[512], path[700], qn[128];
        assert_int_equal(kdev_cdi_spec_file_name(s->kind, name, sizeof(name), &e), 37);
        assert_string_equal(name, "k8s.device-plugin.nvidia.com-gpu.json");
        assert_true(kdev_cdi_qualified_name(s->kind, s->devices[0]->name, qn, sizeof(qn), &e) > 0);
        assert_string_equal(qn, "k8s.device-plugin.nvidia.com/gpu="
                                "GPU-0000abc0-1111-2222-3333-444444444440");

        /* missing directories are created 0755 and the file is
         * 0644, whatever the umask */
        snprintf(dir, sizeof(dir), "%s/var/run/cdi", tmp);
        mode_t old = umask(027);
        int rc = kdev_cdi_spec_write(s, dir, name, &e);
        umask(old);
        must(rc, &e, "write");
        assert_int_equal(rc, 0);
        snprintf(path, sizeof(path), "%s/%s", dir, name);
        struct stat st;
        assert_int_equal(stat(path, &st), 0);
        assert_true(S_ISREG(st.st_mode));
        assert_int_equal(st.st_mode & 07777, 0644);
        assert_int_equal(stat(dir, &st), 0);
        assert_int_equal(st.st_mode & 07777, 0755); /* exactly: umask 027 has no say */
        char first[256] = "";
        assert_int_equal(count_entries(dir, first, sizeof(first)), 1); /* no temporary left */
        assert_string_equal(first, name);

        /* the file holds exactly the formatted text */
        char *want = NULL, *got = read_text(path);
        assert_true(kdev_cdi_spec_format(s, &want, &e) > 0);
        assert_non_null(got);
        assert_string_equal(got, want);
        free(want);
        free(got);

        /* read back equal */
        struct kdev_cdi_spec *back = NULL;
        rc = kdev_cdi_spec_read(path, &back, &e);
        must(rc, &e, "read");
        assert_true(kdev_cdi_spec_equal(s, back));
        assert_string_equal(back->min_version, "0.5.0");
        assert_int_equal(back->n_devices, 9);
        assert_string_equal(back->devices[8]->name, "all");
        assert_int_equal(back->devices[8]->edits.n_device_nodes, 8);
        assert_int_equal(back->edits.n_device_nodes, 3);
        assert_int_equal(back->edits.hooks[0].n_args, 4);
        assert_string_equal(back->edits.mounts[0].options[3], "bind");
        /* and one change makes them differ */
        assert_int_equal(kdev_cdi_edits_add_env(kdev_cdi_spec_edits(back), "X=1", &e), 0);
        assert_false(kdev_cdi_spec_equal(s, back));
        kdev_cdi_spec_free(back);
        kdev_cdi_spec_free(s);
}

static void test_index_names(void **state)
{
        const char *tmp = *state;
        struct kdev_err e = { 0 };
        struct kdev_cdi_spec *s = gpu_spec(4, true);
        must(kdev_cdi_spec_write(s, tmp, "idx.json", &e), &e, "write");
        char path[600];
        snprintf(path, sizeof(path), "%s/idx.json", tmp);
        struct kdev_cdi_spec *back = NULL;
        must(kdev_cdi_spec_read(path, &back, &e), &e, "read");
        assert_true(kdev_cdi_spec_equal(s, back));
        assert_string_equal(back->devices[3]->name, "3");
        kdev_cdi_spec_free(back);
        kdev_cdi_spec_free(s);
}

static void test_replace_atomically(void **state)
{
        const char *tmp = *state;
        struct kdev_err e = { 0 };
        char path[600];
        snprintf(path, sizeof(path), "%s/spec.json", tmp);
        struct kdev_cdi_spec *a = gpu_spec(2, false), *b = gpu_spec(3, false);
        must(kdev_cdi_spec_write(a, tmp, "spec.json", &e), &e, "write a");
        struct stat st_a, st_b;
        assert_int_equal(stat(path, &st_a), 0);
        must(kdev_cdi_spec_write(b, tmp, "spec.json", &e), &e, "write b");
        assert_int_equal(stat(path, &st_b), 0);
        /* renamed over, not rewritten in place: readers see old or new */
        assert_true(st_a.st_ino != st_b.st_ino);
        assert_int_equal(count_entries(tmp, NULL, 0), 1);
        struct kdev_cdi_spec *back = NULL;
        must(kdev_cdi_spec_read(path, &back, &e), &e, "read");
        assert_true(kdev_cdi_spec_equal(b, back));
        kdev_cdi_spec_free(back);

        /* a spec that fails validation leaves the old file untouched */
        struct kdev_cdi_spec *bad = kdev_cdi_spec_new("vendor.com/x", &e);
        assert_non_null(bad);
        assert_int_equal(kdev_cdi_spec_write(bad, tmp, "spec.json", &e), -EINVAL);
        assert_string_equal(e.msg, "CDI spec \"vendor.com/x\": no devices");
        struct stat st_c;
        assert_int_equal(stat(path, &st_c), 0);
        assert_true(st_c.st_ino == st_b.st_ino);
        assert_int_equal(count_entries(tmp, NULL, 0), 1);
        kdev_cdi_spec_free(bad);
        kdev_cdi_spec_free(a);
        kdev_cdi_spec_free(b);
}

static void test_write_errors(void **state)
{
        const char *tmp = *state;
        struct kdev_err e = { 0 };
        struct kdev_cdi_spec *s = gpu_spec(1, false);
        static const char *const bad_names[] = { "", "a/b.json", ".hidden.json", "x.yaml",
                                                 ".json", "spec" };
        for (size_t i = 0; i < sizeof(bad_names) / sizeof(bad_names[0]); i++)
                assert_int_equal(kdev_cdi_spec_write(s, tmp, bad_names[i], &e), -EINVAL);
        assert_int_equal(kdev_cdi_spec_write(s, tmp, "x.yaml", &e), -EINVAL);
        assert_string_equal(e.msg, "CDI spec file name \"x.yaml\": must end in \".json\"");
        assert_int_equal(kdev_cdi_spec_write(s, "", "a.json", &e), -EINVAL);

        /* the directory is a regular file */
        char file[600], below[700];
        snprintf(file, sizeof(file), "%s/plain", tmp);
        FILE *f = fopen(file, "w");
        assert_non_null(f);
        fclose(f);
        assert_int_equal(kdev_cdi_spec_write(s, file, "a.json", &e), -ENOTDIR);
        char want[800];
        snprintf(want, sizeof(want), "CDI spec directory \"%s\": not a directory", file);
        assert_string_equal(e.msg, want);
        snprintf(below, sizeof(below), "%s/sub", file);
        assert_int_equal(kdev_cdi_spec_write(s, below, "a.json", &e), -ENOTDIR);
        assert_int_equal(count_entries(tmp, NULL, 0), 1);
        kdev_cdi_spec_free(s);
}

static void test_remove(void **state)
{
        const char *tmp = *state;
        struct kdev_err e = { 0 };
        struct kdev_cdi_spec *s = gpu_spec(1, false);
        must(kdev_cdi_spec_write(s, tmp, "gone.json", &e), &e, "write");
        assert_int_equal(count_entries(tmp, NULL, 0), 1);
        assert_int_equal(kdev_cdi_spec_remove(tmp, "gone.json", &e), 1);
        assert_int_equal(count_entries(tmp, NULL, 0), 0);
        assert_int_equal(kdev_cdi_spec_remove(tmp, "gone.json", &e), 0);
        assert_int_equal(kdev_cdi_spec_remove(tmp, "../gone.json", &e), -EINVAL);
        kdev_cdi_spec_free(s);
}

static void write_text(const char *path, const char *text)
{
        FILE *f = fopen(path, "w");
        assert_non_null(f);
        fputs(text, f);
        fclose(f);
}

static void test_read_errors(void **state)
{
        const char *tmp = *state;
        struct kdev_err e = { 0 };
        struct kdev_cdi_spec *s = (struct kdev_cdi_spec *)1;
        char path[600], want[900];

        snprintf(path, sizeof(path), "%s/none.json", tmp);
        assert_int_equal(kdev_cdi_spec_read(path, &s, &e), -ENOENT);
        assert_null(s);
        snprintf(want, sizeof(want), "%s: cannot read: No such file or directory", path);
        assert_string_equal(e.msg, want);

        snprintf(path, sizeof(path), "%s/a.yaml", tmp);
        assert_int_equal(kdev_cdi_spec_read(path, &s, &e), -EOPNOTSUPP);

        snprintf(path, sizeof(path), "%s/broken.json", tmp);
        write_text(path, "{\"cdiVersion\": \"0.3.0\",\n  \"kind\": }");
        assert_int_equal(kdev_cdi_spec_read(path, &s, &e), -EINVAL);
        snprintf(want, sizeof(want), "%s:2:11: ", path);
        assert_memory_equal(e.msg, want, strlen(want));

        write_text(path, "{\"cdiVersion\":\"0.3.0\",\"cdiVersion\":\"0.3.0\"}");
        assert_int_equal(kdev_cdi_spec_read(path, &s, &e), -EINVAL);
        assert_non_null(strstr(e.msg, "duplicate object key"));

        write_text(path, "{\"cdiVersion\":\"0.3.0\",\"kind\":\"v.com/c\",\"devices\":[{\"name\":"
                         "\"d\",\"containerEdits\":{\"env\":[\"A=1\"],\"devices\":[]}}]}");
        assert_int_equal(kdev_cdi_spec_read(path, &s, &e), -EINVAL);
        snprintf(want, sizeof(want), "%s: devices[0].containerEdits: unknown field \"devices\"",
                 path);
        assert_string_equal(e.msg, want);
        assert_null(s);
}

/* Sample specs for the schema test. */
static int write_samples(const char *dir)
{
        struct kdev_err e = { 0 };
        struct kdev_cdi_spec *s[3] = { gpu_spec(8, false), gpu_spec(2, true), NULL };
        s[2] = kdev_cdi_spec_new("vendor.com/all.fields", &e);
        if (!s[2])
                return 1;
        int bad = 0;
        bad |= kdev_cdi_spec_set_annotation(s[2], "vendor.com/note", "x", &e);
        struct kdev_cdi_device *d = kdev_cdi_spec_add_device(s[2], "dev:0", &e);
        if (!d)
                return 1;
        struct kdev_cdi_edits *de = kdev_cdi_device_edits(d);
        bad |= kdev_cdi_device_set_annotation(d, "k", "v", &e);
        struct kdev_cdi_device_node n = { .path = "/dev/x", .host_path = "/dev/y", .type = "b",
                                          .has_major = true, .major = 8, .has_minor = true,
                                          .minor = 1, .has_file_mode = true, .file_mode = 0660,
                                          .permissions = "none", .has_uid = true, .uid = 1,
                                          .has_gid = true, .gid = 2 };
        bad |= kdev_cdi_edits_add_device_node(de, &n, &e);
        struct kdev_cdi_mount m = { .host_path = "/h", .container_path = "/c",
                                    .options = (char *[]){ "rbind" }, .n_options = 1,
                                    .type = "none" };
        bad |= kdev_cdi_edits_add_mount(de, &m, &e);
        struct kdev_cdi_hook h = { .hook_name = "poststop", .path = "/bin/true",
                                   .env = (char *[]){ "A=" }, .n_env = 1, .has_timeout = true,
                                   .timeout = 1 };
        bad |= kdev_cdi_edits_add_hook(de, &h, &e);
        bad |= kdev_cdi_edits_add_additional_gid(de, 4294967295u, &e);
        bad |= kdev_cdi_edits_add_net_device(de, "eth0", "net0", &e);
        static const char *const names[] = { "gpu-uuid.json", "gpu-index.json",
                                             "all-fields.json" };
        int rc = 0;
        if (bad) {
                fprintf(stderr, "building all-fields: %s\n", e.msg);
                rc = 1;
        }
        for (size_t i = 0; i < 3; i++) {
                if (kdev_cdi_spec_write(s[i], dir, names[i], &e) < 0) {
                        fprintf(stderr, "%s: %s\n", names[i], e.msg);
                        rc = 1;
                }
                kdev_cdi_spec_free(s[i]);
        }
        return rc;
}

int main(void)
{
        const char *samples = getenv("KDEV_CDI_SAMPLES_DIR");
        if (samples && samples[0])
                return write_samples(samples);
        const struct CMUnitTest tests[] = {
                cmocka_unit_test_setup_teardown(test_gpu_spec_roundtrip, setup, teardown),
                cmocka_unit_test_setup_teardown(test_index_names, setup, teardown),
                cmocka_unit_test_setup_teardown(test_replace_atomically, setup, teardown),
                cmocka_unit_test_setup_teardown(test_write_errors, setup, teardown),
                cmocka_unit_test_setup_teardown(test_remove, setup, teardown),
                cmocka_unit_test_setup_teardown(test_read_errors, setup, teardown),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
