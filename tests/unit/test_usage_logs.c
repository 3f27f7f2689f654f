/* usage/usage.h kdev_usage_logs_*: pod UIDs and container IDs from the names
 * kubelet gives its log directories (<dir>/pods/<ns>_<pod>_<uid>,
 * <dir>/containers/<pod>_<ns>_<container>-<id>.log), on a fake tree. */
#include <errno.h>
#include <limits.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <unistd.h>

#include <cmocka.h>

#include "usage/usage.h"

#define UID1 "0f5c4ac8-8fd7-4a9c-9d63-4b1f1e2f3a4b"
#define UID2 "11111111-2222-3333-4444-555555555555"
#define CID1 "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa1"
#define CID2 "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb2"

static char root[64];

static void sh(const char *fmt, ...)
{
        char cmd[4096];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(cmd, sizeof(cmd), fmt, ap);
        va_end(ap);
        assert_int_equal(system(cmd), 0);
}

/* Sets the own (lstat) time of |rel| under root to |sec|. */
static void age(const char *rel, long sec)
{
        char p[PATH_MAX];
        snprintf(p, sizeof(p), "%s/%s", root, rel);
        struct timeval tv[2] = {{sec, 0}, {sec, 0}};
        assert_int_equal(lutimes(p, tv), 0);
}

static int setup(void **state)
{
        (void)state;
        strcpy(root, "/tmp/kdev-usage-logs-XXXXXX");
        assert_non_null(mkdtemp(root));
        return 0;
}

static int teardown(void **state)
{
        (void)state;
        sh("rm -rf %s", root);
        return 0;
}

static void test_names(void **state)
{
        (void)state;
        sh("mkdir -p %s/pods/ml_train-0_" UID1 " %s/pods/ml_web-7d9f_" UID2 " %s/containers", root,
           root, root);
        /* not pods: a file, a short UID, no namespace */
        sh("touch %s/pods/ml_file_" UID2 " && mkdir %s/pods/ml_x_123 %s/pods/_x_" UID1, root, root,
           root);
        sh("cd %s/containers && ln -s /dev/null train-0_ml_trainer-" CID1 ".log && "
           "ln -s /dev/null web-7d9f_ml_my-side-car-" CID2 ".log && "
           /* not containers: upper-case ID, short ID, no .log, a fourth '_' */
           "ln -s /dev/null a_ml_c-" "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA1.log && "
           "ln -s /dev/null a_ml_c-abc.log && ln -s /dev/null a_ml_c-" CID1 " && "
           "ln -s /dev/null a_ml_c_d-" CID1 ".log",
           root);
        struct kdev_usage_logs l;
        struct kdev_err err = {0};
        assert_int_equal(kdev_usage_logs_read(root, &l, &err), 0);
        assert_int_equal(l.n_pods, 2);
        assert_int_equal(l.n_containers, 2);
        assert_string_equal(kdev_usage_logs_pod_uid(&l, "ml", "train-0"), UID1);
        assert_string_equal(kdev_usage_logs_pod_uid(&l, "ml", "web-7d9f"), UID2);
        assert_null(kdev_usage_logs_pod_uid(&l, "other", "train-0"));
        assert_null(kdev_usage_logs_pod_uid(&l, "ml", "file"));
        assert_string_equal(kdev_usage_logs_container_id(&l, "ml", "train-0", "trainer"), CID1);
        /* a container name with dashes: the ID is after the last one */
        assert_string_equal(kdev_usage_logs_container_id(&l, "ml", "web-7d9f", "my-side-car"),
                            CID2);
        assert_null(kdev_usage_logs_container_id(&l, "ml", "train-0", "other"));
        assert_null(kdev_usage_logs_container_id(&l, "ml", "a", "c"));
        kdev_usage_logs_clear(&l);
        assert_int_equal(l.n_pods, 0);
        assert_null(l.pods);
}

static void test_newest_wins(void **state)
{
        (void)state;
        /* the pod made again under its name; the container restarted */
        sh("mkdir -p %s/pods/ml_train-0_" UID1 " %s/pods/ml_train-0_" UID2 " %s/containers", root,
           root, root);
        sh("cd %s/containers && ln -s /dev/null train-0_ml_trainer-" CID1 ".log && "
           "ln -s /dev/null train-0_ml_trainer-" CID2 ".log",
           root);
        age("pods/ml_train-0_" UID1, 2000000000);
        age("pods/ml_train-0_" UID2, 1000000000);
        age("containers/train-0_ml_trainer-" CID1 ".log", 1000000000);
        age("containers/train-0_ml_trainer-" CID2 ".log", 2000000000);
        struct kdev_usage_logs l;
        struct kdev_err err = {0};
        assert_int_equal(kdev_usage_logs_read(root, &l, &err), 0);
        assert_string_equal(kdev_usage_logs_pod_uid(&l, "ml", "train-0"), UID1);
        assert_string_equal(kdev_usage_logs_container_id(&l, "ml", "train-0", "trainer"), CID2);
        kdev_usage_logs_clear(&l);
}

/* kdev_usage_logs_refresh: the names kept while neither directory changes
 * (a directory's mtime older than 2 s), read again when one does, and read
 * again every time while a directory's mtime is younger than 2 s. */
static void test_refresh(void **state)
{
        (void)state;
        sh("mkdir -p %s/pods/ml_train-0_" UID1 " %s/containers", root, root);
        age("pods", 1000000000);
        age("containers", 1000000000);
        struct kdev_usage_logs l = {0};
        struct kdev_err err = {0};
        assert_int_equal(kdev_usage_logs_refresh(root, &l, &err), 0);
        assert_string_equal(kdev_usage_logs_pod_uid(&l, "ml", "train-0"), UID1);
        assert_true(l.reusable);
        /* unchanged: kept (the pointer of the entry itself stays) */
        const char *uid = kdev_usage_logs_pod_uid(&l, "ml", "train-0");
        assert_int_equal(kdev_usage_logs_refresh(root, &l, &err), 1);
        assert_ptr_equal(kdev_usage_logs_pod_uid(&l, "ml", "train-0"), uid);
        /* a container started: containers/ changed, read again; its mtime
         * is young, so the next call reads again too */
        sh("cd %s/containers && ln -s /dev/null train-0_ml_trainer-" CID1 ".log", root);
        assert_int_equal(kdev_usage_logs_refresh(root, &l, &err), 0);
        assert_string_equal(kdev_usage_logs_container_id(&l, "ml", "train-0", "trainer"), CID1);
        assert_false(l.reusable);
        assert_int_equal(kdev_usage_logs_refresh(root, &l, &err), 0);
        age("containers", 1000000001);
        assert_int_equal(kdev_usage_logs_refresh(root, &l, &err), 0);
        assert_int_equal(kdev_usage_logs_refresh(root, &l, &err), 1);
        /* pods/ removed: read again (no pods), and a missing one stays reusable */
        sh("rm -rf %s/pods", root);
        assert_int_equal(kdev_usage_logs_refresh(root, &l, &err), 0);
        assert_int_equal(l.n_pods, 0);
        assert_int_equal(l.n_containers, 1);
        assert_int_equal(kdev_usage_logs_refresh(root, &l, &err), 1);
        kdev_usage_logs_clear(&l);
}

static void test_missing_and_bad(void **state)
{
        (void)state;
        struct kdev_usage_logs l;
        struct kdev_err err = {0};
        /* no directories: no entries, no error (a node without pods yet) */
        assert_int_equal(kdev_usage_logs_read(root, &l, &err), 0);
        assert_int_equal(l.n_pods + l.n_containers, 0);
        kdev_usage_logs_clear(&l);
        /* pods is a file */
        sh("touch %s/pods", root);
        assert_int_equal(kdev_usage_logs_read(root, &l, &err), -ENOTDIR);
        char want[256];
        snprintf(want, sizeof(want), "%s/pods: cannot read: Not a directory", root);
        assert_string_equal(err.msg, want);
        kdev_usage_logs_clear(&l);
        /* a symbolic link to a directory is not followed */
        sh("rm %s/pods && mkdir -p %s/elsewhere/ml_p_" UID1 " && ln -s %s/elsewhere %s/pods", root,
           root, root, root);
        assert_int_equal(kdev_usage_logs_read(root, &l, &err), -ELOOP);
        snprintf(want, sizeof(want), "%s/pods: cannot read: a symbolic link, not followed", root);
        assert_string_equal(err.msg, want);
        assert_int_equal(l.n_pods, 0);
        kdev_usage_logs_clear(&l);
        kdev_usage_logs_clear(NULL);
}

int main(void)
{
        const struct CMUnitTest tests[] = {
                cmocka_unit_test_setup_teardown(test_names, setup, teardown),
                cmocka_unit_test_setup_teardown(test_newest_wins, setup, teardown),
                cmocka_unit_test_setup_teardown(test_missing_and_bad, setup, teardown),
                cmocka_unit_test_setup_teardown(test_refresh, setup, teardown),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
