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

        assert_int_equal(kdev_file_read(path, 6, &text, &len, &e), 0);
        assert_int_equal(len, 6);
        assert_string_equal(text, "hello\n");
        free(text);

        /* one byte over the limit */
        char want[256];
        assert_int_equal(kdev_file_read(path, 5, &text, &len, &e), -EFBIG);
        assert_null(text);
        snprintf(want, sizeof(want), "%s: the file is larger than 5 bytes", path);
        assert_string_equal(e.msg, want);

        /* a directory, a missing file */
        assert_int_equal(kdev_file_read(dir, 100, &text, &len, &e), -EISDIR);
        snprintf(want, sizeof(want), "%s: cannot read: Is a directory", dir);
        assert_string_equal(e.msg, want);
        snprintf(path, sizeof(path), "%s/missing", dir);
        assert_int_equal(kdev_file_read(path, 100, &text, &len, &e), -ENOENT);
        snprintf(want, sizeof(want), "%s: cannot read: No such file or directory", path);
        assert_string_equal(e.msg, want);
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
        assert_int_equal(kdev_file_read(path, 100, &text, &len, &e), 0);
        assert_string_equal(text, "two!");
        free(text);
}

int main(void)
{
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_read),
                cmocka_unit_test(test_write_errors),
        };
        return cmocka_run_group_tests(tests, setup, teardown);
}
