/* libFuzzer target: the HTTP/2 + gRPC server input path (src/rpc/server.c
 * and conn.c over nghttp2). The input is the byte stream a client sends on
 * one connection, connection preface included. Each run hands one end of a
 * socketpair to the server (kdev_rpc__server_adopt_fd), writes the input into
 * the other end while driving the server's loop in-process and reading
 * whatever it answers, then shuts down the write side.
 *
 * Methods: /kdev.Fuzz/Unary echoes the request, /kdev.Fuzz/Stream (server
 * streaming) sends it twice and stays open, /kdev.Fuzz/Fail ends with
 * INVALID_ARGUMENT and the request's text as grpc-message, /kdev.Fuzz/Later
 * answers on the next loop round (or is cancelled first). Small message
 * limits and receive budgets let inputs reach the RESOURCE_EXHAUSTED paths.
 *
 * Oracle beyond sanitizers and leaks: once the client's side is shut down
 * and everything the server writes is read, the server must drop the
 * connection and every call within a few seconds. */
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <uv.h>

#include "rpc/rpc.h"
#include "rpc/rpc_internal.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static uv_loop_t loop;
static struct kdev_rpc_server *srv;

#define LATER_MAX 8
static struct kdev_rpc_call *later[LATER_MAX];

static void on_unary(struct kdev_rpc_call *call, const uint8_t *req, size_t len, void *ud)
{
        (void)ud;
        kdev_rpc_call_reply(call, req, len);
}

static void on_stream_cancel(struct kdev_rpc_call *call, void *ud)
{
        (void)call;
        (void)ud;
}

static void on_stream(struct kdev_rpc_call *call, const uint8_t *req, size_t len, void *ud)
{
        (void)ud;
        kdev_rpc_call_on_cancel(call, on_stream_cancel, NULL);
        if (kdev_rpc_call_send(call, req, len) == -ECANCELED)
                return;
        if (kdev_rpc_call_send(call, req, len) == -ECANCELED)
                return;
        if (len % 2 == 1)
                kdev_rpc_call_finish(call, KDEV_RPC_OK, NULL);
}

static void on_fail(struct kdev_rpc_call *call, const uint8_t *req, size_t len, void *ud)
{
        char msg[128];
        (void)ud;
        size_t n = len < sizeof(msg) - 1 ? len : sizeof(msg) - 1;
        memcpy(msg, req, n);
        msg[n] = '\0';
        kdev_rpc_call_finish(call, KDEV_RPC_INVALID_ARGUMENT, msg);
}

static void on_later_cancel(struct kdev_rpc_call *call, void *ud)
{
        (void)call;
        later[(uintptr_t)ud] = NULL;
}

static void on_later(struct kdev_rpc_call *call, const uint8_t *req, size_t len, void *ud)
{
        (void)req;
        (void)ud;
        for (uintptr_t i = 0; i < LATER_MAX; i++) {
                if (!later[i]) {
                        later[i] = call;
                        kdev_rpc_call_on_cancel(call, on_later_cancel, (void *)i);
                        return;
                }
        }
        kdev_rpc_call_finish(call, KDEV_RPC_RESOURCE_EXHAUSTED, len ? "busy" : NULL);
}

static void answer_later(void)
{
        for (size_t i = 0; i < LATER_MAX; i++) {
                struct kdev_rpc_call *call = later[i];
                if (!call)
                        continue;
                later[i] = NULL;
                kdev_rpc_call_reply(call, (const uint8_t *)"later", 5);
        }
}

static void setup(void)
{
        signal(SIGPIPE, SIG_IGN);
        if (uv_loop_init(&loop) < 0)
                abort();
        struct kdev_rpc_server_options opts = {
                .max_recv_message = 4096,
                .max_send_message = 4096,
                .conn_recv_budget = 16384,
                .server_recv_budget = 32768,
        };
        srv = kdev_rpc_server_new(&loop, &opts);
        if (!srv || kdev_rpc_server_add_method(srv, "/kdev.Fuzz/Unary", false, on_unary, NULL) ||
            kdev_rpc_server_add_method(srv, "/kdev.Fuzz/Stream", true, on_stream, NULL) ||
            kdev_rpc_server_add_method(srv, "/kdev.Fuzz/Fail", false, on_fail, NULL) ||
            kdev_rpc_server_add_method(srv, "/kdev.Fuzz/Later", false, on_later, NULL))
                abort();
}

/* Reads and discards what the server wrote. Returns false at EOF/error. */
static bool drain(int fd)
{
        char buf[65536];
        for (;;) {
                ssize_t n = read(fd, buf, sizeof(buf));
                if (n > 0)
                        continue;
                if (n < 0 && (errno == EAGAIN || errno == EINTR))
                        return true;
                return false;
        }
}

static double now_s(void)
{
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* One loop round: run what is ready, answer deferred calls, read the
 * server's output, and wait briefly for the socket when nothing was ready. */
static void round_trip(int fd)
{
        uv_run(&loop, UV_RUN_NOWAIT);
        answer_later();
        drain(fd);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
        if (!srv)
                setup();
        int sv[2];
        if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sv) < 0)
                abort();
        if (kdev_rpc__server_adopt_fd(srv, sv[0]) < 0)
                abort();
        size_t off = 0;
        while (off < size) {
                ssize_t n = write(sv[1], data + off, size - off);
                if (n > 0)
                        off += (size_t)n;
                else if (n < 0 && errno != EAGAIN && errno != EINTR)
                        break; /* the server closed: the rest cannot be delivered */
                round_trip(sv[1]);
        }
        shutdown(sv[1], SHUT_WR);
        double deadline = now_s() + 5.0;
        while (kdev_rpc__server_connections(srv) > 0) {
                round_trip(sv[1]);
                if (kdev_rpc__server_connections(srv) == 0)
                        break;
                if (now_s() > deadline) {
                        fprintf(stderr, "connection still open 5 s after the client's EOF "
                                        "(%zu calls)\n", kdev_rpc_server_open_calls(srv));
                        abort();
                }
                struct pollfd p = { .fd = sv[1], .events = POLLIN };
                (void)poll(&p, 1, 1);
        }
        close(sv[1]);
        if (kdev_rpc_server_open_calls(srv) != 0 || kdev_rpc__server_request_bytes(srv) != 0) {
                fprintf(stderr, "%zu calls, %zu request bytes left after the connection closed\n",
                        kdev_rpc_server_open_calls(srv), kdev_rpc__server_request_bytes(srv));
                abort();
        }
        return 0;
}
