/* libcurl loaded on first use (kube/libcurl_internal.h): nothing maps it
 * before the first client; the first kdev_kube_new loads it, once, from any
 * number of threads at a time; a missing library or one without libcurl's
 * symbols fails the constructor with a message naming it, and so does every
 * later client. The load happens once per process, so each case runs in a
 * child process of its own and reports what it saw through a pipe. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "kube/kube.h"
#include "kube/libcurl_internal.h"

/* What a child saw, written to the parent as one struct. */
struct report {
        bool mapped_before;   /* libcurl in /proc/self/maps before the first client */
        bool mapped_after;    /* ... after the clients */
        bool loaded;          /* kdev_curl_loaded() != NULL at the end */
        int created;          /* clients created */
        int codes[2];         /* err.code of the first two failed constructors */
        char msgs[2][KDEV_ERR_MSG_MAX];
};

static bool libcurl_mapped(void)
{
        FILE *f = fopen("/proc/self/maps", "r");
        if (!f)
                return true; /* fails the "not mapped" expectations */
        char line[4096];
        bool found = false;
        while (fgets(line, sizeof(line), f))
                if (strstr(line, "/libcurl.so.") || strstr(line, "/libcurl-"))
                        found = true;
        fclose(f);
        return found;
}

static struct kdev_kube *new_client(struct kdev_err *err)
{
        struct kdev_kube_config cfg = {.server = "http://127.0.0.1:1"};
        return kdev_kube_new(&cfg, NULL, err);
}

/* Runs |fn| in a child with libcurl looked up as |library| (NULL: the
 * default) and returns its report. */
static struct report run_child(const char *library, void (*fn)(struct report *r))
{
        int fds[2];
        assert_int_equal(pipe(fds), 0);
        pid_t pid = fork();
        assert_true(pid >= 0);
        if (pid == 0) {
                close(fds[0]);
                struct report r = {0};
                kdev_curl_set_library(library);
                r.mapped_before = libcurl_mapped();
                fn(&r);
                r.mapped_after = libcurl_mapped();
                r.loaded = kdev_curl_loaded() != NULL;
                ssize_t n = write(fds[1], &r, sizeof(r));
                _exit(n == (ssize_t)sizeof(r) ? 0 : 1);
        }
        close(fds[1]);
        struct report r;
        size_t got = 0;
        while (got < sizeof(r)) {
                ssize_t n = read(fds[0], (char *)&r + got, sizeof(r) - got);
                if (n <= 0)
                        break;
                got += (size_t)n;
        }
        close(fds[0]);
        int status = 0;
        assert_int_equal(waitpid(pid, &status, 0), pid);
        assert_true(WIFEXITED(status));
        assert_int_equal(WEXITSTATUS(status), 0);
        assert_int_equal(got, sizeof(r));
        return r;
}

/* Two constructors in a row; the failures' errors in the report. */
static void two_clients(struct report *r)
{
        for (int i = 0; i < 2; i++) {
                struct kdev_err err = {0};
                struct kdev_kube *k = new_client(&err);
                if (k) {
                        r->created++;
                        kdev_kube_free(k);
                        continue;
                }
                r->codes[i] = err.code;
                snprintf(r->msgs[i], sizeof(r->msgs[i]), "%s", err.msg);
        }
}

#define THREADS 8

static pthread_barrier_t barrier;

static void *thread_client(void *arg)
{
        struct kdev_err err = {0};
        pthread_barrier_wait(&barrier);
        struct kdev_kube *k = new_client(&err);
        *(const void **)arg = kdev_curl_loaded();
        kdev_kube_free(k);
        return k ? (void *)1 : NULL;
}

/* THREADS clients created at the same moment (the DRA daemon's thread
 * pool): each gets a client, and all see the same table. */
static void concurrent_clients(struct report *r)
{
        pthread_t t[THREADS];
        const void *tables[THREADS] = {0};
        pthread_barrier_init(&barrier, NULL, THREADS);
        for (int i = 0; i < THREADS; i++)
                if (pthread_create(&t[i], NULL, thread_client, &tables[i]) != 0)
                        return;
        for (int i = 0; i < THREADS; i++) {
                void *ok = NULL;
                pthread_join(t[i], &ok);
                if (ok && tables[i] && tables[i] == tables[0])
                        r->created++;
        }
        pthread_barrier_destroy(&barrier);
        kdev_kube_global_cleanup();
}

static void test_loaded_by_the_first_client(void **state)
{
        (void)state;
        struct report r = run_child(NULL, two_clients);
        assert_false(r.mapped_before);
        assert_int_equal(r.created, 2);
        assert_true(r.mapped_after);
        assert_true(r.loaded);
}

static void test_no_client_no_libcurl(void **state)
{
        (void)state;
        /* this process creates its clients in children only, and a config
         * error stops before the load: nothing is mapped here */
        assert_false(libcurl_mapped());
        struct kdev_err err = {0};
        struct kdev_kube_config none = {0};
        assert_null(kdev_kube_new(&none, NULL, &err));
        assert_int_equal(err.code, EINVAL);
        assert_string_equal(err.msg, "API server client: no server configured");
        assert_false(libcurl_mapped());
        assert_null(kdev_curl_loaded());
        kdev_kube_global_cleanup(); /* nothing loaded: a no-op */
        assert_false(libcurl_mapped());
}

static void test_concurrent_first_clients(void **state)
{
        (void)state;
        struct report r = run_child(NULL, concurrent_clients);
        assert_false(r.mapped_before);
        assert_int_equal(r.created, THREADS);
        assert_true(r.mapped_after);
        assert_true(r.loaded);
}

static void test_missing_library(void **state)
{
        (void)state;
        struct report r = run_child("libkdev-no-such-curl.so.4", two_clients);
        assert_int_equal(r.created, 0);
        assert_false(r.loaded);
        assert_false(r.mapped_after);
        const char *want = "cannot load libkdev-no-such-curl.so.4: libkdev-no-such-curl.so.4: "
                           "cannot open shared object file: No such file or directory";
        for (int i = 0; i < 2; i++) { /* the second client gets the same answer */
                assert_int_equal(r.codes[i], ENOENT);
                assert_string_equal(r.msgs[i], want);
        }
}

static void test_library_without_libcurl_symbols(void **state)
{
        (void)state;
        /* jansson: loadable (the tests link it) but no curl_* */
        struct report r = run_child("libjansson.so.4", two_clients);
        assert_int_equal(r.created, 0);
        assert_false(r.loaded);
        assert_false(r.mapped_after);
        const char *prefix = "libjansson.so.4 has no curl_global_init: ";
        const char *suffix = ": undefined symbol: curl_global_init";
        for (int i = 0; i < 2; i++) {
                assert_int_equal(r.codes[i], ENOSYS);
                size_t n = strlen(r.msgs[i]);
                assert_int_equal(strncmp(r.msgs[i], prefix, strlen(prefix)), 0);
                assert_true(n > strlen(prefix) + strlen(suffix));
                assert_string_equal(r.msgs[i] + n - strlen(suffix), suffix);
        }
        assert_string_equal(r.msgs[0], r.msgs[1]);
}

int main(void)
{
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_loaded_by_the_first_client),
                cmocka_unit_test(test_no_client_no_libcurl),
                cmocka_unit_test(test_concurrent_first_clients),
                cmocka_unit_test(test_missing_library),
                cmocka_unit_test(test_library_without_libcurl_symbols),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
