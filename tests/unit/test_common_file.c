/* kdev_file_read, kdev_file_write_atomic and the state file guard
 * (src/common/file.h). */
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
#include <sys/syscall.h>

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

/* fsync as kdev_common calls it: counted, then the system call (the
 * executable's definition comes before libc's for the static library). */
static int fsyncs;
int fsync(int fd)
{
        fsyncs++;
        return (int)syscall(SYS_fsync, fd);
}

/* KDEV_FILE_NO_FSYNC: the same atomic replacement, without either fsync. */
static void test_write_no_fsync(void **state)
{
        (void)state;
        char path[128], tmpl[160];
        struct kdev_err e = {0};
        snprintf(path, sizeof(path), "%s/n", dir);
        snprintf(tmpl, sizeof(tmpl), "%s/.n.XXXXXX", dir);
        int before = entries(dir);
        fsyncs = 0;
        assert_int_equal(kdev_file_write_atomic(path, tmpl, "one\n", 4, 0644, true, &e), 0);
        assert_int_equal(fsyncs, 2); /* the file, then the directory */
        fsyncs = 0;
        assert_int_equal(kdev_file_write_atomic_flags(path, tmpl, "two\n", 4, 0444,
                                                      KDEV_FILE_NO_FSYNC, &e),
                         0);
        assert_int_equal(fsyncs, 0);
        struct stat st;
        assert_int_equal(stat(path, &st), 0);
        assert_int_equal(st.st_mode & 0777, 0444);
        char *text;
        size_t len;
        assert_int_equal(kdev_file_read(path, NULL, 100, 0, &text, &len, &e), 0);
        assert_string_equal(text, "two\n");
        free(text);
        assert_int_equal(entries(dir), before + 1); /* no temporary file left */
        assert_int_equal(unlink(path), 0);
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

static char *slurp(const char *path)
{
        char *text = NULL;
        size_t len;
        assert_int_equal(kdev_file_read(path, NULL, 1 << 20, 0, &text, &len, NULL), 0);
        return text;
}

static void put(const char *path, const char *text)
{
        FILE *f = fopen(path, "w"); /* in place: same inode */
        assert_non_null(f);
        fputs(text, f);
        assert_int_equal(fclose(f), 0);
}

/* The one aside file of |name| in |dir| ("." + name + ".foreign-<digits>"),
 * into |out|; fails unless there is exactly one. */
static void one_aside(const char *name, char *out, size_t size)
{
        char prefix[128];
        int n = 0;
        snprintf(prefix, sizeof(prefix), ".%s.foreign-", name);
        DIR *h = opendir(dir);
        for (struct dirent *e; (e = readdir(h));) {
                if (strncmp(e->d_name, prefix, strlen(prefix)))
                        continue;
                const char *t = e->d_name + strlen(prefix);
                assert_true(*t);
                for (; *t; t++)
                        assert_true((*t >= '0' && *t <= '9') || *t == '-');
                snprintf(out, size, "%s/%s", dir, e->d_name);
                n++;
        }
        closedir(h);
        assert_int_equal(n, 1);
}

/* kdev_file_write_guarded / kdev_file_guard_check: kdev's own file is
 * replaced silently (also after a touch or chmod); a file edited, replaced
 * or re-linked by someone else is moved aside with its content, a
 * directory in the way is left alone, a vanished file is rebuilt. */
static void test_guard(void **state)
{
        (void)state;
        struct kdev_file_guard g = {0};
        struct kdev_err e = {0};
        char path[128], tmpl[160], aside[4096], want[4200], link_to[160];
        struct stat st;
        snprintf(path, sizeof(path), "%s/state", dir);
        snprintf(tmpl, sizeof(tmpl), "%s/.state.XXXXXX", dir);
        /* unknown to the guard (a previous kdev wrote it): taken as kdev's */
        put(path, "from before\n");
        assert_int_equal(kdev_file_write_guarded(&g, path, tmpl, "one\n", 4, 0600, true, aside,
                                                 sizeof(aside), &e), 0);
        assert_string_equal(aside, "");
        /* kdev's: replaced without a word */
        assert_int_equal(kdev_file_write_guarded(&g, path, tmpl, "two\n", 4, 0600, true, aside,
                                                 sizeof(aside), &e), 0);
        /* touched and chmod'ed, same bytes: still kdev's */
        assert_int_equal(chmod(path, 0644), 0);
        assert_int_equal(kdev_file_guard_check(&g, path, aside, sizeof(aside), &e), 0);
        assert_int_equal(kdev_file_write_guarded(&g, path, tmpl, "three\n", 6, 0600, true,
                                                 aside, sizeof(aside), &e), 0);
        assert_string_equal(aside, "");
        /* edited in place, same size: moved aside, rebuilt */
        put(path, "THREE\n");
        assert_int_equal(kdev_file_write_guarded(&g, path, tmpl, "four\n", 5, 0600, true,
                                                 aside, sizeof(aside), &e), 1);
        one_aside("state", want, sizeof(want));
        assert_string_equal(aside, want);
        char *t = slurp(aside);
        assert_string_equal(t, "THREE\n");
        free(t);
        t = slurp(path);
        assert_string_equal(t, "four\n");
        free(t);
        assert_int_equal(stat(path, &st), 0);
        assert_int_equal(st.st_mode & 07777, 0600);
        assert_int_equal(unlink(aside), 0);
        /* replaced by a symbolic link: the link itself is moved aside */
        snprintf(link_to, sizeof(link_to), "%s/elsewhere", dir);
        put(link_to, "x");
        assert_int_equal(unlink(path), 0);
        assert_int_equal(symlink(link_to, path), 0);
        assert_int_equal(kdev_file_write_guarded(&g, path, tmpl, "six\n", 4, 0600, true, aside,
                                                 sizeof(aside), &e), 1);
        one_aside("state", want, sizeof(want));
        assert_string_equal(aside, want);
        assert_int_equal(lstat(aside, &st), 0);
        assert_true(S_ISLNK(st.st_mode));
        t = slurp(link_to);
        assert_string_equal(t, "x"); /* the link's target untouched */
        free(t);
        assert_int_equal(unlink(aside), 0);
        assert_int_equal(unlink(link_to), 0);
        /* a directory where the file was: left alone, nothing written */
        assert_int_equal(unlink(path), 0);
        assert_int_equal(kdev_file_write_guarded(&g, path, tmpl, "seven\n", 6, 0600, true,
                                                 aside, sizeof(aside), &e), 0);
        assert_int_equal(unlink(path), 0);
        assert_int_equal(mkdir(path, 0700), 0);
        assert_int_equal(kdev_file_write_guarded(&g, path, tmpl, "eight\n", 6, 0600, true,
                                                 aside, sizeof(aside), &e), -EISDIR);
        snprintf(want, sizeof(want), "%s: is not a regular file (a directory); left alone", path);
        assert_string_equal(e.msg, want);
        assert_int_equal(rmdir(path), 0);
        /* vanished: rebuilt, nothing moved */
        assert_int_equal(kdev_file_write_guarded(&g, path, tmpl, "nine\n", 5, 0600, true, aside,
                                                 sizeof(aside), &e), 0);
        assert_string_equal(aside, "");
        /* two foreign copies within one second: the second gets "-1" */
        put(path, "ten?\n");
        assert_int_equal(kdev_file_guard_check(&g, path, aside, sizeof(aside), &e), 1);
        char first[4096];
        snprintf(first, sizeof(first), "%s", aside);
        assert_int_equal(kdev_file_write_guarded(&g, path, tmpl, "ten\n", 4, 0600, true, aside,
                                                 sizeof(aside), &e), 0);
        put(path, "eleven?\n");
        assert_int_equal(kdev_file_write_guarded(&g, path, tmpl, "eleven\n", 7, 0600, true,
                                                 aside, sizeof(aside), &e), 1);
        if (strlen(aside) == strlen(first) + 2) { /* the same second */
                snprintf(want, sizeof(want), "%s-1", first);
                assert_string_equal(aside, want);
        }
        t = slurp(first);
        assert_string_equal(t, "ten?\n");
        free(t);
        t = slurp(aside);
        assert_string_equal(t, "eleven?\n");
        free(t);
        unlink(first);
        unlink(aside);
        /* forgotten: the next write takes the file as kdev's */
        put(path, "edited\n");
        kdev_file_guard_forget(&g, path);
        assert_int_equal(kdev_file_guard_check(&g, path, aside, sizeof(aside), &e), 0);
        assert_int_equal(kdev_file_guard_check(NULL, path, aside, sizeof(aside), &e), 0);
        unlink(path);
        kdev_file_guard_clear(&g);
        assert_int_equal(g.n, 0);
        /* FNV-1a 64 of "a" (the FNV authors' test vector) */
        assert_true(kdev_fnv1a64("a", 1) == 0xaf63dc4c8601ec8cull);
        assert_true(kdev_fnv1a64("", 0) == 0xcbf29ce484222325ull);
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
                cmocka_unit_test(test_write_no_fsync),
                cmocka_unit_test(test_guard),
        };
        return cmocka_run_group_tests(tests, setup, teardown);
}
