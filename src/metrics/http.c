/* Metrics HTTP endpoint on libmicrohttpd, driven by a libuv loop. See http.h. */
#include "metrics/http.h"

#include <arpa/inet.h>
#include <dlfcn.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <microhttpd.h>

#define METRICS_PATH "/metrics"
#define LISTEN_BACKLOG 64
/* Scrapers are few; see http.h for why these bound a noisy client. */
#define CONNECTION_LIMIT KDEV_METRICS_CONNECTION_LIMIT
#define PER_IP_LIMIT KDEV_METRICS_PER_IP_LIMIT
#define CONNECTION_TIMEOUT_S KDEV_METRICS_IDLE_TIMEOUT_S

/* libmicrohttpd, loaded on first use (see http.h): the functions used, typed
 * from microhttpd.h. Loaded once per process and kept. */
#define MHD_LIBRARY "libmicrohttpd.so.12"
static struct {
        void *handle;
        __typeof__(MHD_start_daemon) *start_daemon;
        __typeof__(MHD_stop_daemon) *stop_daemon;
        __typeof__(MHD_run) *run;
        __typeof__(MHD_get_timeout) *get_timeout;
        __typeof__(MHD_get_daemon_info) *get_daemon_info;
        __typeof__(MHD_create_response_from_buffer_with_free_callback) *create_response;
        __typeof__(MHD_add_response_header) *add_response_header;
        __typeof__(MHD_queue_response) *queue_response;
        __typeof__(MHD_destroy_response) *destroy_response;
} mhd;

static int mhd_load(struct kdev_err *err)
{
        if (mhd.handle)
                return 0;
        void *h = dlopen(MHD_LIBRARY, RTLD_LAZY | RTLD_LOCAL);
        if (!h)
                return kdev_err_set(err, ENOENT, "cannot load %s (Debian package libmicrohttpd12): "
                                    "%s", MHD_LIBRARY, dlerror());
        static const char *const names[] = {
                "MHD_start_daemon",     "MHD_stop_daemon",        "MHD_run",
                "MHD_get_timeout",      "MHD_get_daemon_info",
                "MHD_create_response_from_buffer_with_free_callback",
                "MHD_add_response_header", "MHD_queue_response", "MHD_destroy_response",
        };
        void *syms[sizeof(names) / sizeof(names[0])];
        for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
                syms[i] = dlsym(h, names[i]);
                if (!syms[i]) {
                        dlclose(h);
                        return kdev_err_set(err, ENOENT, "%s has no %s (version 0.9.71 or later "
                                            "needed)", MHD_LIBRARY, names[i]);
                }
        }
        /* POSIX: a dlsym() result converts to a function pointer. */
        memcpy(&mhd.start_daemon, &syms[0], sizeof(void *));
        memcpy(&mhd.stop_daemon, &syms[1], sizeof(void *));
        memcpy(&mhd.run, &syms[2], sizeof(void *));
        memcpy(&mhd.get_timeout, &syms[3], sizeof(void *));
        memcpy(&mhd.get_daemon_info, &syms[4], sizeof(void *));
        memcpy(&mhd.create_response, &syms[5], sizeof(void *));
        memcpy(&mhd.add_response_header, &syms[6], sizeof(void *));
        memcpy(&mhd.queue_response, &syms[7], sizeof(void *));
        memcpy(&mhd.destroy_response, &syms[8], sizeof(void *));
        mhd.handle = h;
        return 0;
}

struct kdev_metrics_http {
        uv_loop_t *loop;
        struct kdev_metrics *reg;
        struct MHD_Daemon *mhd;
        uv_poll_t poll;  /* MHD's epoll fd */
        uv_timer_t timer; /* MHD_get_timeout() */
        unsigned port;
        unsigned long requests;
        unsigned pending_closes;
        void (*done)(void *arg);
        void *done_arg;
};

/* Splits "HOST:PORT" (see kdev_metrics_parse_address) into |host| (256
 * bytes), *port and *bracketed, checking the syntax only: a bracketed HOST
 * must be an IPv6 address; another one an IPv4 address or a host name of
 * [A-Za-z0-9._-] (resolved later). Returns false when |text| is malformed. */
static bool split_address(const char *text, char *host, unsigned long *port, bool *bracketed)
{
        const char *colon, *port_text;
        size_t hlen;
        *bracketed = text[0] == '[';
        if (*bracketed) {
                const char *close = strchr(text, ']');
                if (!close || close[1] != ':')
                        return false;
                hlen = (size_t)(close - text - 1);
                if (hlen == 0 || hlen >= 256)
                        return false;
                memcpy(host, text + 1, hlen);
                port_text = close + 2;
        } else {
                colon = strrchr(text, ':');
                if (!colon || memchr(text, ':', (size_t)(colon - text)))
                        return false; /* no port, or an IPv6 address without brackets */
                hlen = (size_t)(colon - text);
                if (hlen >= 256)
                        return false;
                memcpy(host, text, hlen);
                port_text = colon + 1;
        }
        host[hlen] = '\0';
        size_t plen = strlen(port_text);
        if (plen == 0 || plen > 5 || strspn(port_text, "0123456789") != plen)
                return false;
        *port = strtoul(port_text, NULL, 10);
        if (*port > 65535)
                return false;
        struct in6_addr a6;
        if (*bracketed)
                return inet_pton(AF_INET6, host, &a6) == 1;
        return strspn(host, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-") ==
               hlen;
}

bool kdev_metrics_address_valid(const char *text)
{
        char host[256];
        unsigned long port;
        bool bracketed;
        return text && split_address(text, host, &port, &bracketed);
}

bool kdev_metrics_address_flag_ok(const char *prog, const char *address, bool from_env)
{
        if (!address || !*address || kdev_metrics_address_valid(address))
                return true;
        fprintf(stderr, "%s: invalid %s \"%s\": want " KDEV_METRICS_ADDRESS_FORM "\n", prog,
                from_env ? "KDEV_METRICS_ADDRESS" : "--metrics-address", address);
        return false;
}

int kdev_metrics_parse_address(const char *text, void *addr, unsigned *addrlen,
                               struct kdev_err *err)
{
        char host[256];
        unsigned long port;
        bool bracketed;
        if (!text)
                text = "";
        if (!split_address(text, host, &port, &bracketed))
                return kdev_err_set(err, EINVAL, "metrics address \"%s\": want "
                                    KDEV_METRICS_ADDRESS_FORM, text);
        size_t hlen = strlen(host);

        memset(addr, 0, sizeof(struct sockaddr_storage));
        struct sockaddr_in *in4 = addr;
        struct sockaddr_in6 *in6 = addr;
        if (hlen == 0) {
                in4->sin_family = AF_INET;
                in4->sin_addr.s_addr = htonl(INADDR_ANY);
                in4->sin_port = htons((uint16_t)port);
                *addrlen = sizeof(*in4);
                return 0;
        }
        if (!bracketed && inet_pton(AF_INET, host, &in4->sin_addr) == 1) {
                in4->sin_family = AF_INET;
                in4->sin_port = htons((uint16_t)port);
                *addrlen = sizeof(*in4);
                return 0;
        }
        if (bracketed && inet_pton(AF_INET6, host, &in6->sin6_addr) == 1) {
                in6->sin6_family = AF_INET6;
                in6->sin6_port = htons((uint16_t)port);
                *addrlen = sizeof(*in6);
                return 0;
        }
        struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM};
        struct addrinfo *res = NULL;
        int r = getaddrinfo(host, NULL, &hints, &res);
        if (r != 0 || !res)
                return kdev_err_set(err, EINVAL,
                                    "metrics address \"%s\": cannot resolve \"%s\": %s", text,
                                    host, r ? gai_strerror(r) : "no address");
        memcpy(addr, res->ai_addr, res->ai_addrlen);
        *addrlen = (unsigned)res->ai_addrlen;
        freeaddrinfo(res);
        if (in4->sin_family == AF_INET)
                in4->sin_port = htons((uint16_t)port);
        else
                in6->sin6_port = htons((uint16_t)port);
        return 0;
}

/* ---- requests ------------------------------------------------------------ */

static enum MHD_Result reply(struct MHD_Connection *c, unsigned status, const char *type,
                             char *body, size_t len, bool allow)
{
        struct MHD_Response *r = mhd.create_response(len, body, free);
        if (!r) {
                free(body);
                return MHD_NO; /* MHD closes the connection */
        }
        mhd.add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, type);
        if (allow)
                mhd.add_response_header(r, MHD_HTTP_HEADER_ALLOW, "GET, HEAD");
        enum MHD_Result ret = mhd.queue_response(c, status, r);
        mhd.destroy_response(r);
        return ret;
}

static enum MHD_Result reply_text(struct MHD_Connection *c, unsigned status, const char *text,
                                  bool allow)
{
        char *body = strdup(text);
        if (!body)
                return MHD_NO;
        return reply(c, status, "text/plain; charset=utf-8", body, strlen(body), allow);
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url,
                                  const char *method, const char *version,
                                  const char *upload_data, size_t *upload_data_size,
                                  void **req_cls)
{
        struct kdev_metrics_http *h = cls;
        (void)version;
        (void)upload_data;
        (void)upload_data_size;
        (void)req_cls;
        h->requests++;
        if (strcmp(url, METRICS_PATH) != 0)
                return reply_text(c, MHD_HTTP_NOT_FOUND, "404 page not found: the metrics are "
                                  "at " METRICS_PATH "\n", false);
        if (strcmp(method, MHD_HTTP_METHOD_GET) != 0 && strcmp(method, MHD_HTTP_METHOD_HEAD) != 0)
                return reply_text(c, MHD_HTTP_METHOD_NOT_ALLOWED, "405 method not allowed\n",
                                  true);
        char *body = NULL;
        size_t len = 0;
        struct kdev_err err = {0};
        if (kdev_metrics_render(h->reg, &body, &len, &err) < 0)
                return reply_text(c, MHD_HTTP_INTERNAL_SERVER_ERROR, "500 cannot render the "
                                  "metrics\n", false);
        return reply(c, MHD_HTTP_OK, KDEV_METRICS_CONTENT_TYPE, body, len, false);
}

/* ---- loop integration ---------------------------------------------------- */

static void run_mhd(struct kdev_metrics_http *h);

static void on_timer(uv_timer_t *t)
{
        run_mhd(t->data);
}

static void on_poll(uv_poll_t *p, int status, int events)
{
        (void)status; /* an error on the epoll fd: let MHD find out */
        (void)events;
        run_mhd(p->data);
}

/* Lets MHD accept, read, answer and time out, then arms the timer for its
 * next deadline (0 when it has buffered work left). */
static void run_mhd(struct kdev_metrics_http *h)
{
        mhd.run(h->mhd);
        MHD_UNSIGNED_LONG_LONG ms = 0;
        if (mhd.get_timeout(h->mhd, &ms) == MHD_YES)
                uv_timer_start(&h->timer, on_timer, (uint64_t)ms, 0);
        else
                uv_timer_stop(&h->timer);
}

/* Creates, binds and listens on the socket for |addr|: only that address. */
static int listen_socket(const struct sockaddr *addr, socklen_t len, const char *text,
                         struct kdev_err *err)
{
        int fd = socket(addr->sa_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
        if (fd < 0)
                return kdev_err_set(err, errno, "cannot listen on %s: socket: %s", text,
                                    strerror(errno));
        int one = 1;
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
        if (addr->sa_family == AF_INET6)
                setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof(one));
        if (bind(fd, addr, len) != 0 || listen(fd, LISTEN_BACKLOG) != 0) {
                int e = errno;
                close(fd);
                return kdev_err_set(err, e, "cannot listen on %s: %s", text, strerror(e));
        }
        return fd;
}

struct kdev_metrics_http *kdev_metrics_http_start(uv_loop_t *loop, const char *address,
                                                  struct kdev_metrics *reg, struct kdev_err *err)
{
        struct sockaddr_storage ss;
        unsigned sslen = 0;
        if (kdev_metrics_parse_address(address, &ss, &sslen, err) < 0)
                return NULL;
        if (mhd_load(err) < 0) {
                kdev_err_wrap(err, "cannot listen on %s", address);
                return NULL;
        }
        int fd = listen_socket((struct sockaddr *)&ss, sslen, address, err);
        if (fd < 0)
                return NULL;
        struct kdev_metrics_http *h = calloc(1, sizeof(*h));
        if (!h) {
                close(fd);
                kdev_err_set(err, ENOMEM, "out of memory");
                return NULL;
        }
        h->loop = loop;
        h->reg = reg;
        struct sockaddr_storage bound;
        socklen_t blen = sizeof(bound);
        if (getsockname(fd, (struct sockaddr *)&bound, &blen) == 0)
                h->port = ntohs(bound.ss_family == AF_INET6
                                        ? ((struct sockaddr_in6 *)&bound)->sin6_port
                                        : ((struct sockaddr_in *)&bound)->sin_port);
        /* No internal thread: MHD_run() from the loop; no error log (library
         * code does not log). MHD owns |fd| from here on. */
        h->mhd = mhd.start_daemon(MHD_USE_EPOLL, 0, NULL, NULL, on_request, h,
                                  MHD_OPTION_LISTEN_SOCKET, (MHD_socket)fd,
                                  MHD_OPTION_CONNECTION_LIMIT, (unsigned)CONNECTION_LIMIT,
                                  MHD_OPTION_PER_IP_CONNECTION_LIMIT, (unsigned)PER_IP_LIMIT,
                                  MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)CONNECTION_TIMEOUT_S,
                                  MHD_OPTION_END);
        if (!h->mhd) {
                /* not closed here: libmicrohttpd closes a socket handed over
                 * with MHD_OPTION_LISTEN_SOCKET on its failure paths, and a
                 * second close could hit an fd reused meanwhile */
                free(h);
                kdev_err_set(err, EIO, "cannot listen on %s: libmicrohttpd failed to start",
                             address);
                return NULL;
        }
        const union MHD_DaemonInfo *info = mhd.get_daemon_info(h->mhd, MHD_DAEMON_INFO_EPOLL_FD);
        int r = info ? uv_poll_init(loop, &h->poll, info->epoll_fd) : UV_EINVAL;
        if (r < 0) {
                mhd.stop_daemon(h->mhd);
                free(h);
                kdev_err_set(err, -r, "cannot listen on %s: polling libmicrohttpd: %s", address,
                             uv_strerror(r));
                return NULL;
        }
        uv_timer_init(loop, &h->timer);
        h->poll.data = h->timer.data = h;
        uv_poll_start(&h->poll, UV_READABLE, on_poll);
        run_mhd(h);
        return h;
}

unsigned kdev_metrics_http_port(const struct kdev_metrics_http *h)
{
        return h->port;
}

unsigned long kdev_metrics_http_requests(const struct kdev_metrics_http *h)
{
        return h->requests;
}

static void on_closed(uv_handle_t *handle)
{
        struct kdev_metrics_http *h = handle->data;
        if (--h->pending_closes > 0)
                return;
        void (*done)(void *) = h->done;
        void *arg = h->done_arg;
        free(h);
        if (done)
                done(arg);
}

void kdev_metrics_http_close(struct kdev_metrics_http *h, void (*done)(void *arg), void *arg)
{
        if (!h) {
                if (done)
                        done(arg);
                return;
        }
        h->done = done;
        h->done_arg = arg;
        /* uv_poll_stop removes the epoll fd from the loop at once, so MHD may
         * close it right after. */
        uv_poll_stop(&h->poll);
        h->pending_closes = 2;
        uv_close((uv_handle_t *)&h->poll, on_closed);
        uv_close((uv_handle_t *)&h->timer, on_closed);
        mhd.stop_daemon(h->mhd); /* closes the connections, the listen socket and epoll fd */
        h->mhd = NULL;
}
