/* kdev_rpc_server_listen_unix (src/rpc/rpc.h): the socket file is 0600
 * whatever the umask, and a connection succeeds once it listens. */
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

#include "rpc/rpc.h"

static char dir[64];

static int setup(void **state)
{
        (void)state;
        strcpy(dir, "/tmp/kdev-sockmode-XXXXXX");
        return mkdtemp(dir) ? 0 : -1;
}

static int teardown(void **state)
{
        (void)state;
        char cmd[128];
        snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
        return system(cmd) == 0 ? 0 : -1;
}

static void closed(void *arg)
{
        *(bool *)arg = true;
}

static void test_socket_mode_ignores_umask(void **state)
{
        (void)state;
        static const mode_t umasks[] = {0, 002, 022, 077, 0177, 0777};
        assert_int_equal(KDEV_RPC_SOCKET_MODE, 0600);
        for (size_t i = 0; i < sizeof(umasks) / sizeof(umasks[0]); i++) {
                uv_loop_t loop;
                assert_int_equal(uv_loop_init(&loop), 0);
                struct kdev_rpc_server *srv = kdev_rpc_server_new(&loop, NULL);
                assert_non_null(srv);
                char path[128];
                snprintf(path, sizeof(path), "%s/s%zu.sock", dir, i);
                struct kdev_err err = {0};
                mode_t old = umask(umasks[i]);
                int rc = kdev_rpc_server_listen_unix(srv, path, &err);
                umask(old);
                assert_int_equal(rc, 0);
                struct stat st;
                assert_int_equal(lstat(path, &st), 0);
                assert_true(S_ISSOCK(st.st_mode));
                assert_int_equal(st.st_mode & 07777, 0600);
                /* it listens: the owner can connect */
                int fd = socket(AF_UNIX, SOCK_STREAM, 0);
                struct sockaddr_un sa = {.sun_family = AF_UNIX};
                memcpy(sa.sun_path, path, strlen(path) + 1); /* < 100 bytes */
                assert_int_equal(connect(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
                close(fd);
                bool done = false;
                kdev_rpc_server_close(srv, closed, &done);
                while (!done)
                        uv_run(&loop, UV_RUN_ONCE);
                uv_run(&loop, UV_RUN_DEFAULT);
                assert_int_equal(uv_loop_close(&loop), 0);
                unlink(path);
        }
}

int main(void)
{
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_socket_mode_ignores_umask),
        };
        return cmocka_run_group_tests(tests, setup, teardown);
}
