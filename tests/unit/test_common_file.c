/* kdev_file_read and kdev_file_write_atomic (src/common/file.h). */
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

#include "common/file.h"

static char dir[64];

static int setup(void **state)
{
        (void)state;
        strcpy(dir, "/tmp/kdev-file-XXXXXX");
        return mkdtemp(dir) ? 0 : -1;
}

static int teardown(void **state)
{
        (void)state;
        char cmd[128];
        snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
        return system(cmd) == 0 ? 0 : -1;
}

static int entries(const char *d)
{
        DIR *h = opendir(d);
        int n = 0;
        for (struct dirent *e; (e = readdir(h));)
                n += e->d_name[0] != '.' || (strcmp(e->d_name, ".") && strcmp(e->d_name, ".."));
        closedir(h);
        return n;
}

static void test_read(void **state)
{
        (void)state;
        char path[128], tmpl[160];
        struct kdev_err e = {0};
        char *text;
        size_t len;
        snprintf(path, sizeof(path), "%s/f", dir);
        snprintf(tmpl, sizeof(tmpl), "%s/.f.XXXXXX", dir);
        assert_int_equal(kdev_file_write_atomic(path, tmpl, "hello\n", 6, 0640, true, &e), 0);
        struct stat st;
        assert_int_equal(stat(path, &st), 0);
        assert_int_equal(st.st_mode & 0777, 0640);
        assert_int_equal(entries(dir), 1); /* no temporary file left */

        assert_int_equal(kdev_file_read(path, "test file", 6, 0, &text, &len, &e), 0);
        assert_int_equal(len, 6);
        assert_string_equal(text, "hello\n");
        free(text);

        /* one byte over the limit */
        char want[256];
        assert_int_equal(kdev_file_read(path, "test file", 5, 0, &text, &len, &e), -EFBIG);
        assert_null(text);
        snprintf(want, sizeof(want), "%s: the test file is larger than 5 bytes", path);
        assert_string_equal(e.msg, want);

        /* a directory, a missing file */
        assert_int_equal(kdev_file_read(dir, NULL, 100, 0, &text, &len, &e), -EISDIR);
        snprintf(want, sizeof(want), "%s: is not a regular file (a directory)", dir);
        assert_string_equal(e.msg, want);
        snprintf(path, sizeof(path), "%s/missing", dir);
        assert_int_equal(kdev_file_read(path, NULL, 100, 0, &text, &len, &e), -ENOENT);
        snprintf(want, sizeof(want), "%s: cannot read: No such file or directory", path);
        assert_string_equal(e.msg, want);
}

/* Each kind of file that is not a regular one is refused at once (a FIFO
 * without a writer would block a plain open), symbolic links are followed. */
static void test_not_regular(void **state)
{
        (void)state;
        char path[128], want[256];
        struct kdev_err e = {0};
        char *text = (char *)"x";
        size_t len = 1;
        snprintf(path, sizeof(path), "%s/fifo", dir);
        assert_int_equal(mkfifo(path, 0600), 0);
        assert_int_equal(kdev_file_read(path, "config file", 100, 0, &text, &len, &e), -EINVAL);
        assert_null(text);
        assert_int_equal(len, 0);
        snprintf(want, sizeof(want), "%s: is not a regular file (a FIFO)", path);
        assert_string_equal(e.msg, want);

        snprintf(path, sizeof(path), "%s/zero", dir);
        assert_int_equal(symlink("/dev/zero", path), 0);
        assert_int_equal(kdev_file_read(path, "config file", 100, 0, &text, &len, &e), -EINVAL);
        snprintf(want, sizeof(want), "%s: is not a regular file (a character device)", path);
        assert_string_equal(e.msg, want);

        /* a link to a directory */
        snprintf(path, sizeof(path), "%s/dirlink", dir);
        assert_int_equal(symlink(dir, path), 0);
        assert_int_equal(kdev_file_read(path, NULL, 100, 0, &text, &len, &e), -EISDIR);
        snprintf(want, sizeof(want), "%s: is not a regular file (a directory)", path);
        assert_string_equal(e.msg, want);

        /* a link to a regular file is read */
        char target[128];
        snprintf(target, sizeof(target), "%s/target", dir);
        FILE *f = fopen(target, "w");
        assert_non_null(f);
        fputs("linked", f);
        fclose(f);
        snprintf(path, sizeof(path), "%s/link", dir);
        assert_int_equal(symlink(target, path), 0);
        assert_int_equal(kdev_file_read(path, NULL, 100, KDEV_FILE_TEXT, &text, &len, &e), 0);
        assert_string_equal(text, "linked");
        assert_int_equal(len, 6);
        free(text);
}

/* The limit holds by st_size and while reading (procfs says st_size 0). */
/* The names both the reader's errors and kdevctl's socket check use. */
static void test_type_name(void **state)
{
        (void)state;
        assert_string_equal(kdev_file_type_name(S_IFSOCK | 0600), "a socket");
        assert_string_equal(kdev_file_type_name(S_IFDIR | 0755), "a directory");
        assert_string_equal(kdev_file_type_name(S_IFREG | 0644), "a regular file");
        assert_string_equal(kdev_file_type_name(S_IFIFO | 0600), "a FIFO");
        assert_string_equal(kdev_file_type_name(S_IFCHR | 0600), "a character device");
        assert_string_equal(kdev_file_type_name(S_IFBLK | 0600), "a block device");
        assert_string_equal(kdev_file_type_name(S_IFLNK | 0777), "a symbolic link");
        assert_string_equal(kdev_file_type_name(0), "an unknown kind of file");
}

static void test_size_limit(void **state)
{
        (void)state;
        char path[128], want[256];
        struct kdev_err e = {0};
        char *text;
        size_t len;
        snprintf(path, sizeof(path), "%s/big", dir);
        FILE *f = fopen(path, "w");
        assert_non_null(f);
        for (int i = 0; i < 1025; i++)
                fputs("0123456789", f);
        fclose(f);
        assert_int_equal(kdev_file_read(path, "claim checkpoint", 10249, 0, &text, &len, &e),
                         -EFBIG);
        snprintf(want, sizeof(want), "%s: the claim checkpoint is larger than 10249 bytes",
                 path);
        assert_string_equal(e.msg, want);
        assert_int_equal(kdev_file_read(path, "claim checkpoint", 10250, 0, &text, &len, &e), 0);
        assert_int_equal(len, 10250);
        free(text);

        /* /proc/self/maps: st_size 0, more than 16 bytes */
        struct stat st;
        assert_int_equal(stat("/proc/self/maps", &st), 0);
        assert_int_equal(st.st_size, 0);
        assert_int_equal(kdev_file_read("/proc/self/maps", "MIG minors file", 16, 0, &text, &len,
                                        &e),
                         -EFBIG);
        assert_string_equal(e.msg, "/proc/self/maps: the MIG minors file is larger than 16 bytes");
        assert_int_equal(kdev_file_read("/proc/self/maps", NULL, 1 << 20, 0, &text, &len, &e), 0);
        assert_true(len > 16);
        free(text);
}

/* KDEV_FILE_TEXT: a NUL byte is named with its offset; without it the bytes
 * are returned. */
static void test_nul_byte(void **state)
{
        (void)state;
        char path[128], want[256];
        struct kdev_err e = {0};
        char *text;
        size_t len;
        snprintf(path, sizeof(path), "%s/nul", dir);
        FILE *f = fopen(path, "w");
        assert_non_null(f);
        fwrite("{\"a\":\0\"b\"}\0", 1, 10, f);
        fclose(f);
        assert_int_equal(kdev_file_read(path, NULL, 100, KDEV_FILE_TEXT, &text, &len, &e),
                         -EILSEQ);
        assert_null(text);
        snprintf(want, sizeof(want), "%s: contains a NUL byte at offset 5", path);
        assert_string_equal(e.msg, want);
        assert_int_equal(kdev_file_read(path, NULL, 100, 0, &text, &len, &e), 0);
        assert_int_equal(len, 10);
        assert_memory_equal(text, "{\"a\":\0\"b\"}\0", 11);
        free(text);
}

static void test_write_errors(void **state)
{
        (void)state;
        char path[128], tmpl[160], want[256];
        struct kdev_err e = {0};
        /* the directory is missing: named with the target, never the temp */
        snprintf(path, sizeof(path), "%s/no/f", dir);
        snprintf(tmpl, sizeof(tmpl), "%s/no/.f.XXXXXX", dir);
        assert_int_equal(kdev_file_write_atomic(path, tmpl, "x", 1, 0644, true, &e), -ENOENT);
        snprintf(want, sizeof(want), "%s/no/f: cannot create a file in directory %s/no: "
                 "No such file or directory", dir, dir);
        assert_string_equal(e.msg, want);
        /* the target is a directory: the rename fails, the temp is removed */
        snprintf(path, sizeof(path), "%s/sub", dir);
        assert_int_equal(mkdir(path, 0755), 0);
        snprintf(tmpl, sizeof(tmpl), "%s/.sub.XXXXXX", dir);
        int before = entries(dir);
        assert_int_equal(kdev_file_write_atomic(path, tmpl, "x", 1, 0644, false, &e), -EISDIR);
        snprintf(want, sizeof(want), "%s/sub: Is a directory", dir);
        assert_string_equal(e.msg, want);
        assert_int_equal(entries(dir), before);
        /* replacing keeps one file with the new content */
        snprintf(path, sizeof(path), "%s/g", dir);
        snprintf(tmpl, sizeof(tmpl), "%s/.g.XXXXXX", dir);
        assert_int_equal(kdev_file_write_atomic(path, tmpl, "one", 3, 0644, true, &e), 0);
        assert_int_equal(kdev_file_write_atomic(path, tmpl, "two!", 4, 0644, true, &e), 0);
        char *text;
        size_t len;
        assert_int_equal(kdev_file_read(path, NULL, 100, 0, &text, &len, &e), 0);
        assert_string_equal(text, "two!");
        free(text);
}

int main(void)
{
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_read),
                cmocka_unit_test(test_not_regular),
                cmocka_unit_test(test_type_name),
                cmocka_unit_test(test_size_limit),
                cmocka_unit_test(test_nul_byte),
                cmocka_unit_test(test_write_errors),
        };
        return cmocka_run_group_tests(tests, setup, teardown);
}
