/* kdev_dir_create and kdev_dir_create_all (src/common/dir.h): the modes of
 * the directories kdev creates do not follow the umask. */
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

#include "common/dir.h"

static char dir[64];

static int setup(void **state)
{
        (void)state;
        strcpy(dir, "/tmp/kdev-dir-XXXXXX");
        return mkdtemp(dir) ? 0 : -1;
}

static int teardown(void **state)
{
        (void)state;
        char cmd[200];
        snprintf(cmd, sizeof(cmd), "chmod -R u+rwx %s; rm -rf %s", dir, dir);
        return system(cmd) == 0 ? 0 : -1;
}

static unsigned mode_of(const char *path)
{
        struct stat st;
        assert_int_equal(lstat(path, &st), 0);
        assert_true(S_ISDIR(st.st_mode));
        return (unsigned)(st.st_mode & 07777);
}

static void test_create_exact_mode(void **state)
{
        (void)state;
        static const mode_t umasks[] = {0, 022, 077, 0777};
        static const mode_t modes[] = {KDEV_DIR_MODE_PLUGIN, KDEV_DIR_MODE_CDI,
                                       KDEV_DIR_MODE_PRIVATE};
        struct kdev_err e = {0};
        char path[128];
        for (size_t u = 0; u < sizeof(umasks) / sizeof(umasks[0]); u++) {
                for (size_t m = 0; m < sizeof(modes) / sizeof(modes[0]); m++) {
                        snprintf(path, sizeof(path), "%s/d%zu-%zu", dir, u, m);
                        mode_t old = umask(umasks[u]);
                        int r = kdev_dir_create(path, modes[m], "test directory", &e);
                        umask(old);
                        assert_int_equal(r, 1);
                        assert_int_equal(mode_of(path), modes[m]);
                        /* again: it exists, 0, mode untouched */
                        assert_int_equal(chmod(path, 0711), 0);
                        assert_int_equal(kdev_dir_create(path, modes[m], NULL, &e), 0);
                        assert_int_equal(mode_of(path), 0711);
                }
        }
}

static void test_create_all(void **state)
{
        (void)state;
        struct kdev_err e = {0};
        char path[160], part[160];
        snprintf(path, sizeof(path), "%s/a/b//c/", dir);
        mode_t old = umask(0);
        assert_int_equal(kdev_dir_create_all(path, 0700, "test directory", &e), 3);
        umask(old);
        snprintf(part, sizeof(part), "%s/a", dir);
        assert_int_equal(mode_of(part), 0700);
        snprintf(part, sizeof(part), "%s/a/b", dir);
        assert_int_equal(mode_of(part), 0700);
        snprintf(part, sizeof(part), "%s/a/b/c", dir);
        assert_int_equal(mode_of(part), 0700);
        /* existing components keep their mode; only the new one is made */
        assert_int_equal(chmod(part, 0755), 0);
        snprintf(path, sizeof(path), "%s/a/b/c/d", dir);
        old = umask(0777);
        assert_int_equal(kdev_dir_create_all(path, 0750, NULL, &e), 1);
        umask(old);
        assert_int_equal(mode_of(part), 0755);
        assert_int_equal(mode_of(path), 0750);
        assert_int_equal(kdev_dir_create_all(path, 0750, NULL, &e), 0);
}

static void test_errors(void **state)
{
        (void)state;
        struct kdev_err e = {0};
        char file[128], below[160], want[400];
        snprintf(file, sizeof(file), "%s/plain", dir);
        FILE *f = fopen(file, "w");
        assert_non_null(f);
        fclose(f);
        snprintf(below, sizeof(below), "%s/sub/more", file);
        assert_int_equal(kdev_dir_create_all(below, 0750, "CDI spec directory", &e), -ENOTDIR);
        snprintf(want, sizeof(want), "cannot create CDI spec directory %s/sub: Not a directory",
                 file);
        assert_string_equal(e.msg, want);
        /* an existing non-directory last component is the caller's to check */
        assert_int_equal(kdev_dir_create_all(file, 0750, NULL, &e), 0);
        assert_int_equal(kdev_dir_create_all("", 0750, NULL, &e), -EINVAL);
        assert_string_equal(e.msg, "cannot create directory: empty path");
        if (geteuid() != 0) { /* root ignores directory permissions */
                char ro[128], in[160];
                snprintf(ro, sizeof(ro), "%s/ro", dir);
                assert_int_equal(mkdir(ro, 0500), 0);
                snprintf(in, sizeof(in), "%s/x", ro);
                assert_int_equal(kdev_dir_create(in, 0700, NULL, &e), -EACCES);
                snprintf(want, sizeof(want), "cannot create directory %s: Permission denied", in);
                assert_string_equal(e.msg, want);
        }
}

int main(void)
{
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_create_exact_mode),
                cmocka_unit_test(test_create_all),
                cmocka_unit_test(test_errors),
        };
        return cmocka_run_group_tests(tests, setup, teardown);
}
