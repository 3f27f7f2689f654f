/* kdevctl shared CLI helpers (src/kubelet/cli.c): option parsing, value
 * parsing, grpc-go code names, tables, socket paths and the socket probe. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cmocka.h>

#include "kubelet/cli.h"

enum { O_OUT, O_TIMEOUT, O_FLAG };

static const struct kdev_cli_opt opts[] = {
        {"output", 'o', true, O_OUT},
        {"timeout", 0, true, O_TIMEOUT},
        {"container", 0, false, O_FLAG},
};

/* Records the callback sequence as text: "P:x O0:json F ..." */
struct rec {
        char buf[512];
        int fail_on; /* id that makes the callback fail, or -100 */
};

static int record(int id, const char *value, void *ud, struct kdev_err *err)
{
        struct rec *r = ud;
        size_t n = strlen(r->buf);
        if (id == r->fail_on)
                return kdev_err_set(err, EINVAL, "bad %s", value ? value : "(null)");
        if (id == KDEV_CLI_POSITIONAL)
                snprintf(r->buf + n, sizeof(r->buf) - n, "P:%s ", value);
        else if (value)
                snprintf(r->buf + n, sizeof(r->buf) - n, "O%d:%s ", id, value);
        else
                snprintf(r->buf + n, sizeof(r->buf) - n, "F%d ", id);
        return 0;
}

static int run_parse(struct rec *r, struct kdev_err *err, ...)
{
        char *argv[32];
        int argc = 0;
        va_list ap;
        va_start(ap, err);
        argv[argc++] = "cmd";
        for (char *a; (a = va_arg(ap, char *)) != NULL;)
                argv[argc++] = a;
        va_end(ap);
        argv[argc] = NULL;
        memset(r->buf, 0, sizeof(r->buf));
        kdev_err_clear(err);
        return kdev_cli_parse(argc, argv, opts, 3, record, r, err);
}

static void test_parse(void **state)
{
        (void)state;
        struct rec r = {.fail_on = -100};
        struct kdev_err err;
        assert_int_equal(run_parse(&r, &err, "sock", "-o", "json", "--timeout=5", "a",
                                   "--container", "b", "-ojson", "--output", "table", "-", NULL),
                         0);
        assert_string_equal(r.buf, "P:sock O0:json O1:5 P:a F2 P:b O0:json O0:table P:- ");
        /* "--" ends options; help after it is positional */
        assert_int_equal(run_parse(&r, &err, "x", "--", "--container", "-h", NULL), 0);
        assert_string_equal(r.buf, "P:x P:--container P:-h ");
        /* help anywhere wins, even after errors-to-be */
        assert_int_equal(run_parse(&r, &err, "--bogus", "--help", NULL), 1);
        assert_string_equal(r.buf, "");
        assert_int_equal(run_parse(&r, &err, "a", "-h", NULL), 1);

        assert_int_equal(run_parse(&r, &err, "--bogus", NULL), -EINVAL);
        assert_string_equal(err.msg, "unknown option --bogus");
        assert_int_equal(run_parse(&r, &err, "--bogus=1", NULL), -EINVAL);
        assert_string_equal(err.msg, "unknown option --bogus");
        assert_int_equal(run_parse(&r, &err, "-x", NULL), -EINVAL);
        assert_string_equal(err.msg, "unknown option -x");
        assert_int_equal(run_parse(&r, &err, "--timeout", NULL), -EINVAL);
        assert_string_equal(err.msg, "option --timeout needs a value");
        assert_int_equal(run_parse(&r, &err, "-o", NULL), -EINVAL);
        assert_string_equal(err.msg, "option --output needs a value");
        assert_int_equal(run_parse(&r, &err, "--container=1", NULL), -EINVAL);
        assert_string_equal(err.msg, "option --container takes no value");
        r.fail_on = O_TIMEOUT;
        assert_int_equal(run_parse(&r, &err, "a", "--timeout", "zz", "b", NULL), -EINVAL);
        assert_string_equal(err.msg, "bad zz");
        assert_string_equal(r.buf, "P:a ");
}

static void test_values(void **state)
{
        (void)state;
        struct kdev_err err;
        enum kdev_cli_output o = KDEV_CLI_OUTPUT_TABLE;
        assert_int_equal(kdev_cli_parse_output("json", &o, &err), 0);
        assert_int_equal(o, KDEV_CLI_OUTPUT_JSON);
        assert_int_equal(kdev_cli_parse_output("table", &o, &err), 0);
        assert_int_equal(o, KDEV_CLI_OUTPUT_TABLE);
        assert_int_equal(kdev_cli_parse_output("yaml", &o, &err), -EINVAL);
        assert_string_equal(err.msg, "invalid output format \"yaml\" (want table or json)");

        uint64_t ms = 99;
        assert_int_equal(kdev_cli_parse_timeout("10", &ms, &err), 0);
        assert_int_equal(ms, 10000);
        assert_int_equal(kdev_cli_parse_timeout("0.25", &ms, &err), 0);
        assert_int_equal(ms, 250);
        assert_int_equal(kdev_cli_parse_timeout("0.0001", &ms, &err), 0);
        assert_int_equal(ms, 1);
        assert_int_equal(kdev_cli_parse_timeout("0", &ms, &err), 0);
        assert_int_equal(ms, 0);
        static const char *const bad[] = {"", "-1", "abc", "1s", " 1", "nan", "inf", "31536001"};
        for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
                char want[160];
                assert_int_equal(kdev_cli_parse_timeout(bad[i], &ms, &err), -EINVAL);
                snprintf(want, sizeof(want),
                         "invalid --timeout \"%s\" (want seconds such as 2 or 0.5, from 0 to "
                         "31536000; 0 = none)", bad[i]);
                assert_string_equal(err.msg, want);
        }
        assert_int_equal(kdev_cli_parse_seconds("0.5", "--hold", "forever", &ms, &err), 0);
        assert_int_equal(ms, 500);
        assert_int_equal(kdev_cli_parse_seconds("31536000", "--hold", NULL, &ms, &err), 0);
        assert_int_equal(ms, 31536000000ull);
        assert_int_equal(kdev_cli_parse_seconds("1.0005", "--hold", NULL, &ms, &err), 0);
        assert_int_equal(ms, 1001);
        assert_int_equal(kdev_cli_parse_seconds(".5x", "--hold", "forever", &ms, &err), -EINVAL);
        assert_string_equal(err.msg, "invalid --hold \".5x\" (want seconds such as 2 or 0.5, from 0 "
                                     "to 31536000; 0 = forever)");
        assert_int_equal(kdev_cli_parse_seconds("-0.5", "--dial-timeout", NULL, &ms, &err),
                         -EINVAL);
        assert_string_equal(err.msg, "invalid --dial-timeout \"-0.5\" (want seconds such as 2 or "
                                     "0.5, from 0 to 31536000)");

        long long v;
        assert_int_equal(kdev_cli_parse_int("42", "--size", 1, 100, &v, &err), 0);
        assert_int_equal(v, 42);
        assert_int_equal(kdev_cli_parse_int("0", "--size", 1, 100, &v, &err), -EINVAL);
        assert_string_equal(err.msg, "invalid --size \"0\" (want an integer from 1 to 100)");
        assert_int_equal(kdev_cli_parse_int("5x", "--size", 1, 100, &v, &err), -EINVAL);
        assert_int_equal(kdev_cli_parse_int("99999999999999999999", "--size", 1, 100, &v, &err),
                         -EINVAL);

        struct kdev_cli_strv sv = {0};
        assert_int_equal(kdev_cli_strv_add_list(&sv, "a,b", "--available", &err), 0);
        assert_int_equal(kdev_cli_strv_add_list(&sv, "c", "--available", &err), 0);
        assert_int_equal(sv.n, 3);
        char *j = kdev_cli_strv_join(sv.v, sv.n, ", ");
        assert_string_equal(j, "a, b, c");
        free(j);
        assert_int_equal(kdev_cli_strv_add_list(&sv, "d,,e", "--available", &err), -EINVAL);
        assert_string_equal(err.msg, "empty device ID in --available \"d,,e\"");
        assert_int_equal(kdev_cli_strv_add_list(&sv, "", "--available", &err), -EINVAL);
        assert_int_equal(kdev_cli_strv_add_list(&sv, "f,", "--available", &err), -EINVAL);
        kdev_cli_strv_clear(&sv);
        assert_int_equal(sv.n, 0);
        assert_null(sv.v);
        j = kdev_cli_strv_join(NULL, 0, ",");
        assert_string_equal(j, "");
        free(j);
}

static char *capture_table(const struct kdev_cli_table *t, const char *indent)
{
        char *buf = NULL;
        size_t len = 0;
        FILE *f = open_memstream(&buf, &len);
        assert_non_null(f);
        kdev_cli_table_print(t, f, indent);
        fclose(f);
        return buf;
}

static void test_table(void **state)
{
        (void)state;
        struct kdev_cli_table *t = kdev_cli_table_new(3, "ID", "HEALTH", "NUMA");
        assert_non_null(t);
        assert_int_equal(kdev_cli_table_rows(t), 0);
        assert_int_equal(kdev_cli_table_add(t, "gpu-10", "Healthy", "0,1"), 0);
        assert_int_equal(kdev_cli_table_add(t, "µ✓", NULL, ""), 0);
        const char *row[] = {"x", "Unhealthy", "1"};
        assert_int_equal(kdev_cli_table_add_v(t, row), 0);
        assert_int_equal(kdev_cli_table_rows(t), 3);
        char *s = capture_table(t, NULL);
        assert_string_equal(s, "ID       HEALTH      NUMA\n"
                               "gpu-10   Healthy     0,1\n"
                               "µ✓       -\n"
                               "x        Unhealthy   1\n");
        free(s);
        s = capture_table(t, "  ");
        assert_string_equal(s, "  ID       HEALTH      NUMA\n"
                               "  gpu-10   Healthy     0,1\n"
                               "  µ✓       -\n"
                               "  x        Unhealthy   1\n");
        free(s);
        kdev_cli_table_free(t);
        kdev_cli_table_free(NULL);
        assert_null(kdev_cli_table_new(0));
}

static void test_socket_path_and_probe(void **state)
{
        (void)state;
        char *p = kdev_cli_socket_path("vendor.sock");
        assert_string_equal(p, "/var/lib/kubelet/device-plugins/vendor.sock");
        free(p);
        p = kdev_cli_socket_path("./vendor.sock");
        assert_string_equal(p, "./vendor.sock");
        free(p);
        p = kdev_cli_socket_path("/run/x.sock");
        assert_string_equal(p, "/run/x.sock");
        free(p);

        char dir[] = "/tmp/kdev-cli-XXXXXX";
        assert_non_null(mkdtemp(dir));
        char path[64];
        snprintf(path, sizeof(path), "%s/p.sock", dir);
        int e = -1;
        assert_int_equal(kdev_cli_probe_socket(path, &e), KDEV_CLI_SOCK_DEAD);
        assert_int_equal(e, ENOENT);

        struct sockaddr_un sa = {.sun_family = AF_UNIX};
        snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", path);
        int fd = socket(AF_UNIX, SOCK_STREAM, 0);
        assert_true(fd >= 0);
        assert_int_equal(bind(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
        /* bound but not listening: a stale socket file */
        assert_int_equal(kdev_cli_probe_socket(path, &e), KDEV_CLI_SOCK_DEAD);
        assert_int_equal(e, ECONNREFUSED);
        assert_int_equal(listen(fd, 4), 0);
        assert_int_equal(kdev_cli_probe_socket(path, &e), KDEV_CLI_SOCK_LIVE);
        assert_int_equal(e, 0);
        assert_int_equal(kdev_cli_probe_socket(path, NULL), KDEV_CLI_SOCK_LIVE);
        close(fd);
        /* closed listener: the file stays, nobody listens */
        assert_int_equal(kdev_cli_probe_socket(path, &e), KDEV_CLI_SOCK_DEAD);
        assert_int_equal(e, ECONNREFUSED);

        /* a bare name that exists in the current directory is used as is */
        char cwd[512];
        assert_non_null(getcwd(cwd, sizeof(cwd)));
        assert_int_equal(chdir(dir), 0);
        p = kdev_cli_socket_path("p.sock");
        assert_string_equal(p, "p.sock");
        free(p);
        assert_int_equal(chdir(cwd), 0);
        unlink(path);

        /* kdev_cli_check_socket: before dialling, what the path is */
        struct kdev_err err = {0};
        assert_int_equal(kdev_cli_check_socket(path, &err), -ENOENT);
        char want[160];
        snprintf(want, sizeof(want), "no such socket %s", path);
        assert_string_equal(err.msg, want);
        assert_int_equal(kdev_cli_check_socket(dir, &err), -ENOTSOCK);
        snprintf(want, sizeof(want), "%s is not a socket (it is a directory)", dir);
        assert_string_equal(err.msg, want);
        FILE *f = fopen(path, "w");
        assert_non_null(f);
        fclose(f);
        assert_int_equal(kdev_cli_check_socket(path, &err), -ENOTSOCK);
        snprintf(want, sizeof(want), "%s is not a socket (it is a regular file)", path);
        assert_string_equal(err.msg, want);
        unlink(path);
        fd = socket(AF_UNIX, SOCK_STREAM, 0);
        assert_true(fd >= 0);
        assert_int_equal(bind(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
        assert_int_equal(kdev_cli_check_socket(path, &err), 0); /* listening or not */
        close(fd);
        char lnk[80];
        snprintf(lnk, sizeof(lnk), "%s/l.sock", dir);
        assert_int_equal(symlink(path, lnk), 0);
        assert_int_equal(kdev_cli_check_socket(lnk, &err), 0);
        unlink(path);
        assert_int_equal(kdev_cli_check_socket(lnk, &err), -ENOENT); /* dangling */
        snprintf(want, sizeof(want), "no such socket %s", lnk);
        assert_string_equal(err.msg, want);
        unlink(lnk);
        assert_int_equal(kdev_cli_check_socket("/dev/null", &err), -ENOTSOCK);
        assert_string_equal(err.msg, "/dev/null is not a socket (it is a character device)");
        snprintf(want, sizeof(want), "%s/x/y.sock", "/dev/null");
        assert_int_equal(kdev_cli_check_socket(want, &err), -ENOTDIR);
        assert_string_equal(err.msg, "/dev/null/x/y.sock: Not a directory");
        rmdir(dir);

        char longp[200];
        memset(longp, 'a', sizeof(longp) - 1);
        longp[0] = '/';
        longp[sizeof(longp) - 1] = '\0';
        assert_int_equal(kdev_cli_probe_socket(longp, &e), KDEV_CLI_SOCK_ERROR);
        assert_int_equal(e, ENAMETOOLONG);
}

int main(void)
{
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_parse),
                cmocka_unit_test(test_values),
                cmocka_unit_test(test_table),
                cmocka_unit_test(test_socket_path_and_probe),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
