/* The metrics HTTP endpoint (src/metrics/http.h) on a libuv loop: GET/HEAD
 * /metrics, 404, 405, address parsing, binding only the given address, a
 * port in use, and a clean close. The client is a plain socket in a thread
 * while the test thread runs the loop (the server has no thread of its own). */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmocka.h>
#include <uv.h>

#include "metrics/http.h"
#include "metrics/metrics.h"

struct exchange {
        const char *bind_host; /* NULL: the kernel's choice */
        const char *host;
        unsigned port;
        const char *request;
        char response[65536];
        size_t len;
        int connect_errno;
        uv_async_t *wake;
        volatile bool done;
};

static void *client_main(void *arg)
{
        struct exchange *x = arg;
        struct sockaddr_in sin = {.sin_family = AF_INET, .sin_port = htons((uint16_t)x->port)};
        inet_pton(AF_INET, x->host, &sin.sin_addr);
        int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        struct timeval tv = {.tv_sec = 30};
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
        struct sockaddr_in src = {.sin_family = AF_INET};
        if (x->bind_host)
                inet_pton(AF_INET, x->bind_host, &src.sin_addr);
        if (x->bind_host && bind(fd, (struct sockaddr *)&src, sizeof(src)) != 0) {
                x->connect_errno = errno;
        } else if (connect(fd, (struct sockaddr *)&sin, sizeof(sin)) != 0) {
                x->connect_errno = errno;
        } else {
                size_t n = strlen(x->request);
                for (size_t off = 0; off < n;) {
                        ssize_t w = send(fd, x->request + off, n - off, MSG_NOSIGNAL);
                        if (w <= 0)
                                break;
                        off += (size_t)w;
                }
                /* Read until the server closes (the requests say Connection: close). */
                for (;;) {
                        ssize_t r = recv(fd, x->response + x->len,
                                         sizeof(x->response) - 1 - x->len, 0);
                        if (r <= 0)
                                break;
                        x->len += (size_t)r;
                }
        }
        x->response[x->len] = '\0';
        close(fd);
        x->done = true;
        uv_async_send(x->wake);
        return NULL;
}

static void on_wake(uv_async_t *a)
{
        (void)a;
}

/* Runs |request| against host:port while the loop serves; returns the raw
 * response in x (static storage, overwritten by the next call). */
static struct exchange *exchange_from(uv_loop_t *loop, const char *bind_host, const char *host,
                                      unsigned port, const char *request)
{
        static struct exchange x;
        memset(&x, 0, sizeof(x));
        x.bind_host = bind_host;
        uv_async_t wake;
        assert_int_equal(uv_async_init(loop, &wake, on_wake), 0);
        x.host = host;
        x.port = port;
        x.request = request;
        x.wake = &wake;
        pthread_t t;
        assert_int_equal(pthread_create(&t, NULL, client_main, &x), 0);
        while (!x.done)
                uv_run(loop, UV_RUN_ONCE);
        pthread_join(t, NULL);
        uv_close((uv_handle_t *)&wake, NULL);
        uv_run(loop, UV_RUN_NOWAIT);
        return &x;
}

static struct exchange *exchange(uv_loop_t *loop, const char *host, unsigned port,
                                 const char *request)
{
        return exchange_from(loop, NULL, host, port, request);
}

static const char *body_of(const char *response)
{
        const char *b = strstr(response, "\r\n\r\n");
        assert_non_null(b);
        return b + 4;
}

struct fixture {
        uv_loop_t loop;
        struct kdev_metrics *reg;
        struct kdev_metrics_http *http;
        unsigned port;
        bool closed;
};

static void on_closed(void *arg)
{
        ((struct fixture *)arg)->closed = true;
}

static int setup(void **state)
{
        struct fixture *f = calloc(1, sizeof(*f));
        assert_non_null(f);
        assert_int_equal(uv_loop_init(&f->loop), 0);
        f->reg = kdev_metrics_new();
        struct kdev_metric_family *c = kdev_metrics_add(f->reg, KDEV_METRIC_COUNTER, "t_total",
                                                        "T.", NULL, 0, NULL, 0, NULL);
        kdev_metric_add(kdev_metric_get(c, NULL), 3);
        struct kdev_err err = {0};
        f->http = kdev_metrics_http_start(&f->loop, "127.0.0.1:0", f->reg, &err);
        if (!f->http)
                fail_msg("%s", err.msg);
        f->port = kdev_metrics_http_port(f->http);
        assert_true(f->port > 0);
        *state = f;
        return 0;
}

static int teardown(void **state)
{
        struct fixture *f = *state;
        if (f->http) {
                kdev_metrics_http_close(f->http, on_closed, f);
                uv_run(&f->loop, UV_RUN_DEFAULT);
                assert_true(f->closed);
        }
        assert_int_equal(uv_loop_close(&f->loop), 0); /* every handle released */
        kdev_metrics_free(f->reg);
        free(f);
        return 0;
}

static void test_get_metrics(void **state)
{
        struct fixture *f = *state;
        struct exchange *x = exchange(&f->loop, "127.0.0.1", f->port,
                                      "GET /metrics HTTP/1.1\r\nHost: t\r\n"
                                      "Connection: close\r\n\r\n");
        assert_int_equal(x->connect_errno, 0);
        assert_true(strncmp(x->response, "HTTP/1.1 200 OK\r\n", 17) == 0);
        assert_non_null(strstr(x->response,
                               "\r\nContent-Type: text/plain; version=0.0.4; charset=utf-8\r\n"));
        const char *want = "# HELP t_total T.\n# TYPE t_total counter\nt_total 3\n";
        char cl[64];
        snprintf(cl, sizeof(cl), "\r\nContent-Length: %zu\r\n", strlen(want));
        assert_non_null(strstr(x->response, cl));
        assert_string_equal(body_of(x->response), want);
        /* a query string does not matter */
        x = exchange(&f->loop, "127.0.0.1", f->port,
                     "GET /metrics?x=1 HTTP/1.0\r\n\r\n");
        assert_true(strncmp(x->response, "HTTP/1.0 200 OK\r\n", 17) == 0 ||
                    strncmp(x->response, "HTTP/1.1 200 OK\r\n", 17) == 0);
        assert_string_equal(body_of(x->response), want);
        assert_int_equal(kdev_metrics_http_requests(f->http), 2);
}

static void test_head_metrics(void **state)
{
        struct fixture *f = *state;
        struct exchange *x = exchange(&f->loop, "127.0.0.1", f->port,
                                      "HEAD /metrics HTTP/1.1\r\nHost: t\r\n"
                                      "Connection: close\r\n\r\n");
        assert_true(strncmp(x->response, "HTTP/1.1 200 OK\r\n", 17) == 0);
        assert_string_equal(body_of(x->response), "");
}

static void test_not_found(void **state)
{
        struct fixture *f = *state;
        const char *paths[] = {"/", "/metrics/", "/metricsx", "/other"};
        for (size_t i = 0; i < sizeof(paths) / sizeof(paths[0]); i++) {
                char req[128];
                snprintf(req, sizeof(req),
                         "GET %s HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n", paths[i]);
                struct exchange *x = exchange(&f->loop, "127.0.0.1", f->port, req);
                if (strncmp(x->response, "HTTP/1.1 404 Not Found\r\n", 24) != 0)
                        fail_msg("%s: %s", paths[i], x->response);
                assert_string_equal(body_of(x->response),
                                    "404 page not found: the metrics are at /metrics\n");
        }
}

static void test_method_not_allowed(void **state)
{
        struct fixture *f = *state;
        const char *methods[] = {"POST", "PUT", "DELETE"};
        for (size_t i = 0; i < sizeof(methods) / sizeof(methods[0]); i++) {
                char req[160];
                snprintf(req, sizeof(req), "%s /metrics HTTP/1.1\r\nHost: t\r\n"
                         "Content-Length: 3\r\nConnection: close\r\n\r\nabc", methods[i]);
                struct exchange *x = exchange(&f->loop, "127.0.0.1", f->port, req);
                if (strncmp(x->response, "HTTP/1.1 405 Method Not Allowed\r\n", 33) != 0)
                        fail_msg("%s: %s", methods[i], x->response);
                assert_non_null(strstr(x->response, "\r\nAllow: GET, HEAD\r\n"));
                assert_string_equal(body_of(x->response), "405 method not allowed\n");
        }
}

static void test_bad_request_is_answered_by_mhd(void **state)
{
        struct fixture *f = *state;
        /* A header line without a colon: libmicrohttpd answers 400 itself,
         * the handler never runs. */
        struct exchange *x = exchange(&f->loop, "127.0.0.1", f->port,
                                      "GET /metrics HTTP/1.1\r\nHost: t\r\nno colon here\r\n"
                                      "Connection: close\r\n\r\n");
        if (strncmp(x->response, "HTTP/1.1 400 ", 13) != 0)
                fail_msg("%s", x->response);
        assert_int_equal(kdev_metrics_http_requests(f->http), 0);
}

static void test_listens_on_given_address_only(void **state)
{
        struct fixture *f = *state;
        /* 127.0.0.2 is loopback too: a wildcard bind would accept it. */
        struct exchange *x = exchange(&f->loop, "127.0.0.2", f->port,
                                      "GET /metrics HTTP/1.0\r\n\r\n");
        assert_int_equal(x->connect_errno, ECONNREFUSED);
}

static void test_port_in_use(void **state)
{
        struct fixture *f = *state;
        char addr[64];
        snprintf(addr, sizeof(addr), "127.0.0.1:%u", f->port);
        struct kdev_err err = {0};
        struct kdev_metrics_http *h2 = kdev_metrics_http_start(&f->loop, addr, f->reg, &err);
        assert_null(h2);
        assert_int_equal(err.code, EADDRINUSE);
        char want[128];
        snprintf(want, sizeof(want), "cannot listen on %s: Address already in use", addr);
        assert_string_equal(err.msg, want);
        assert_null(kdev_metrics_http_start(&f->loop, "127.0.0.1", f->reg, &err));
        assert_int_equal(err.code, EINVAL);
        assert_string_equal(err.msg, "metrics address \"127.0.0.1\": want HOST:PORT (e.g. "
                                     "127.0.0.1:9400, [::1]:9400, :9400), with PORT 0..65535");
}

static void test_parse_address(void **state)
{
        (void)state;
        struct sockaddr_storage ss;
        unsigned len = 0;
        struct kdev_err err = {0};
        struct sockaddr_in *in4 = (struct sockaddr_in *)&ss;
        struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)&ss;

        assert_int_equal(kdev_metrics_parse_address("127.0.0.1:9400", &ss, &len, &err), 0);
        assert_int_equal(in4->sin_family, AF_INET);
        assert_int_equal(ntohs(in4->sin_port), 9400);
        assert_int_equal(ntohl(in4->sin_addr.s_addr), INADDR_LOOPBACK);
        assert_int_equal(len, sizeof(struct sockaddr_in));

        assert_int_equal(kdev_metrics_parse_address(":80", &ss, &len, &err), 0);
        assert_int_equal(in4->sin_family, AF_INET);
        assert_int_equal(ntohl(in4->sin_addr.s_addr), INADDR_ANY);
        assert_int_equal(ntohs(in4->sin_port), 80);

        assert_int_equal(kdev_metrics_parse_address("[::1]:65535", &ss, &len, &err), 0);
        assert_int_equal(in6->sin6_family, AF_INET6);
        assert_int_equal(ntohs(in6->sin6_port), 65535);
        assert_memory_equal(&in6->sin6_addr, &in6addr_loopback, sizeof(in6addr_loopback));
        assert_int_equal(len, sizeof(struct sockaddr_in6));

        assert_int_equal(kdev_metrics_parse_address("localhost:0", &ss, &len, &err), 0);
        assert_true(in4->sin_family == AF_INET || in4->sin_family == AF_INET6);

        const char *bad[] = {"", "9400", "127.0.0.1", "127.0.0.1:", "127.0.0.1:65536",
                             "127.0.0.1:-1", "127.0.0.1:94a0", "::1:9400", "[::1]9400",
                             "[]:9400", "[127.0.0.1]:9400", "127.0.0.1:123456", "http://x:1",
                             "[::1]", ":abc", "[foo]:1", "x/y:1"};
        for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
                err = (struct kdev_err){0};
                if (kdev_metrics_parse_address(bad[i], &ss, &len, &err) != -EINVAL)
                        fail_msg("\"%s\" accepted", bad[i]);
                char want[256];
                snprintf(want, sizeof(want), "metrics address \"%s\": want HOST:PORT (e.g. "
                         "127.0.0.1:9400, [::1]:9400, :9400), with PORT 0..65535", bad[i]);
                assert_string_equal(err.msg, want);
        }
}

/* One client address holding more idle connections than the whole server
 * allows (KDEV_METRICS_CONNECTION_LIMIT) cannot starve a scraper from another
 * address: MHD keeps KDEV_METRICS_PER_IP_LIMIT of them and closes the rest at
 * once. Without the per-IP limit the scrape below waits in the listen backlog
 * and its 30 s receive timeout fails the test. */
static void test_idle_connections_from_one_address_do_not_starve_others(void **state)
{
        struct fixture *f = *state;
        enum { N_IDLE = KDEV_METRICS_CONNECTION_LIMIT + 8 };
        int idle[N_IDLE];
        struct sockaddr_in sin = {.sin_family = AF_INET, .sin_port = htons((uint16_t)f->port)};
        inet_pton(AF_INET, "127.0.0.1", &sin.sin_addr);
        for (int i = 0; i < N_IDLE; i++) {
                idle[i] = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
                assert_true(idle[i] >= 0);
                /* bound to 127.0.0.1 as source, connected, never a byte sent */
                struct sockaddr_in src = {.sin_family = AF_INET};
                inet_pton(AF_INET, "127.0.0.1", &src.sin_addr);
                assert_int_equal(bind(idle[i], (struct sockaddr *)&src, sizeof(src)), 0);
                assert_int_equal(connect(idle[i], (struct sockaddr *)&sin, sizeof(sin)), 0);
        }
        /* let MHD accept them all (and drop the ones over the limit) */
        for (int i = 0; i < 20; i++)
                uv_run(&f->loop, UV_RUN_NOWAIT);
        struct exchange *x = exchange_from(&f->loop, "127.0.0.2", "127.0.0.1", f->port,
                                           "GET /metrics HTTP/1.1\r\nHost: x\r\n"
                                           "Connection: close\r\n\r\n");
        assert_int_equal(x->connect_errno, 0);
        assert_true(strncmp(x->response, "HTTP/1.1 200 OK\r\n", 17) == 0);
        const char *body = body_of(x->response);
        assert_true(strncmp(body, "# HELP", 6) == 0);
        assert_string_equal(body, "# HELP t_total T.\n# TYPE t_total counter\nt_total 3\n");
        /* of the idle ones, exactly KDEV_METRICS_PER_IP_LIMIT are still open:
         * the others read EOF (closed by the server) */
        int open_ = 0;
        for (int i = 0; i < N_IDLE; i++) {
                struct timeval tv = {.tv_usec = 1000};
                setsockopt(idle[i], SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
                char c;
                ssize_t r = recv(idle[i], &c, 1, 0);
                open_ += r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK);
                close(idle[i]);
        }
        assert_int_equal(open_, KDEV_METRICS_PER_IP_LIMIT);
}

static void test_address_valid(void **state)
{
        (void)state;
        const char *good[] = {"127.0.0.1:9400", "[::1]:9400", ":9400", "0.0.0.0:0",
                              "localhost:9400", "node-1.example.com:65535", "[fe80::1]:1"};
        for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
                if (!kdev_metrics_address_valid(good[i]))
                        fail_msg("\"%s\" refused", good[i]);
        }
        const char *bad[] = {"127.0.0.1", "::1:9400", "127.0.0.1:99999", ":abc",
                             "http://x:1", "[::1]", "", "[foo]:1", "a b:1", "x/y:1",
                             "[127.0.0.1]:9400", "127.0.0.1:"};
        for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
                if (kdev_metrics_address_valid(bad[i]))
                        fail_msg("\"%s\" accepted", bad[i]);
        }
        assert_false(kdev_metrics_address_valid(NULL));
}

static void test_close_null(void **state)
{
        (void)state;
        struct fixture f = {0};
        kdev_metrics_http_close(NULL, on_closed, &f); /* |done| at once */
        assert_true(f.closed);
        kdev_metrics_http_close(NULL, NULL, NULL);
}

int main(void)
{
        const struct CMUnitTest tests[] = {
                cmocka_unit_test_setup_teardown(test_get_metrics, setup, teardown),
                cmocka_unit_test_setup_teardown(test_head_metrics, setup, teardown),
                cmocka_unit_test_setup_teardown(test_not_found, setup, teardown),
                cmocka_unit_test_setup_teardown(test_method_not_allowed, setup, teardown),
                cmocka_unit_test_setup_teardown(test_bad_request_is_answered_by_mhd, setup,
                                                teardown),
                cmocka_unit_test_setup_teardown(test_listens_on_given_address_only, setup,
                                                teardown),
                cmocka_unit_test_setup_teardown(test_port_in_use, setup, teardown),
                cmocka_unit_test_setup_teardown(
                        test_idle_connections_from_one_address_do_not_starve_others, setup,
                        teardown),
                cmocka_unit_test(test_parse_address),
                cmocka_unit_test(test_address_valid),
                cmocka_unit_test(test_close_null),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
