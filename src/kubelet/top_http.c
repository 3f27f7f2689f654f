/* kdevctl top: the metrics address and one HTTP/1.0 GET over plain
 * sockets. See top.h. */
#include <ctype.h>
#include <errno.h>
#include <netdb.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "common/version.h"
#include "kubelet/top.h"

static bool port_ok(const char *s)
{
        size_t n = strlen(s);
        if (n == 0 || n > 5 || strspn(s, "0123456789") != n)
                return false;
        long v = strtol(s, NULL, 10);
        return v >= 1 && v <= 65535;
}

/* "HOST:PORT" / "[V6]:PORT" / ":PORT" of length |n| at |s| into |t|. */
static bool split_hostport(const char *s, size_t n, struct kdev_top_target *t)
{
        const char *colon, *host = s;
        size_t hlen;
        if (n && s[0] == '[') {
                const char *close = memchr(s, ']', n);
                if (!close || close + 1 >= s + n || close[1] != ':')
                        return false;
                host = s + 1;
                hlen = (size_t)(close - host);
                colon = close + 1;
                if (hlen == 0)
                        return false;
        } else {
                colon = NULL;
                for (size_t i = 0; i < n; i++)
                        if (s[i] == ':')
                                colon = s + i;
                if (!colon || memchr(s, ':', (size_t)(colon - s)))
                        return false;
                hlen = (size_t)(colon - s);
        }
        size_t plen = (size_t)(s + n - colon - 1);
        if (hlen >= sizeof(t->host) || plen >= sizeof(t->port))
                return false;
        memcpy(t->port, colon + 1, plen);
        t->port[plen] = '\0';
        if (!port_ok(t->port))
                return false;
        if (hlen == 0)
                snprintf(t->host, sizeof(t->host), "127.0.0.1");
        else
                snprintf(t->host, sizeof(t->host), "%.*s", (int)hlen, host);
        for (const char *c = t->host; *c; c++)
                if (!isgraph((unsigned char)*c) || *c == '/' || *c == '@')
                        return false;
        snprintf(t->addr, sizeof(t->addr), strchr(t->host, ':') ? "[%s]:%s" : "%s:%s", t->host,
                 t->port);
        return true;
}

int kdev_top_parse_address(const char *text, struct kdev_top_target *t, struct kdev_err *err)
{
        memset(t, 0, sizeof(*t));
        if (!split_hostport(text, strlen(text), t))
                return kdev_err_set(err, EINVAL,
                                    "invalid --metrics-address \"%s\" (want HOST:PORT, e.g. "
                                    "127.0.0.1:9400 or [::1]:9400)", text);
        snprintf(t->path, sizeof(t->path), "/metrics");
        return 0;
}

int kdev_top_parse_url(const char *text, struct kdev_top_target *t, struct kdev_err *err)
{
        memset(t, 0, sizeof(*t));
        const char *rest = strncmp(text, "http://", 7) == 0 ? text + 7 : NULL;
        size_t n = rest ? strcspn(rest, "/?#") : 0;
        const char *path = rest ? rest + n : "";
        bool ok = rest && n > 0 && strlen(path) < sizeof(t->path) && !strchr(path, '#');
        for (const char *c = path; ok && *c; c++)
                ok = isgraph((unsigned char)*c);
        if (ok) {
                /* no port: 80 */
                char hp[300];
                const char *last = rest + n - 1;
                bool has_port = memchr(rest, ':', n) && *last != ']';
                if (has_port)
                        ok = split_hostport(rest, n, t);
                else if (n + 3 < sizeof(hp)) {
                        snprintf(hp, sizeof(hp), "%.*s:80", (int)n, rest);
                        ok = split_hostport(hp, n + 3, t);
                } else
                        ok = false;
        }
        if (!ok)
                return kdev_err_set(err, EINVAL,
                                    "invalid --metrics-url \"%s\" (want http://HOST:PORT/PATH, "
                                    "e.g. http://127.0.0.1:9400/metrics)", text);
        snprintf(t->path, sizeof(t->path), "%s", *path == '/' ? path : "/");
        if (*path == '?')
                snprintf(t->path, sizeof(t->path), "/%s", path);
        return 0;
}

static int64_t now_ms(void)
{
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Waits for |events| on |fd| until |deadline|: 0, -ETIMEDOUT or -errno. */
static int wait_fd(int fd, short events, int64_t deadline)
{
        int64_t left = deadline - now_ms();
        if (left <= 0)
                return -ETIMEDOUT;
        struct pollfd p = {.fd = fd, .events = events};
        int rc = poll(&p, 1, (int)left);
        if (rc < 0)
                return -errno;
        return rc == 0 ? -ETIMEDOUT : 0;
}

static int dial(const struct kdev_top_target *t, int64_t deadline, int *fd_out,
                struct kdev_err *err)
{
        struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM,
                                 .ai_flags = AI_NUMERICSERV}, *ai = NULL;
        int g = getaddrinfo(t->host, t->port, &hints, &ai);
        if (g != 0)
                return kdev_err_set(err, g == EAI_SYSTEM ? errno : EHOSTUNREACH,
                                    "cannot reach kdev-plugin's metrics at %s: %s", t->addr,
                                    gai_strerror(g));
        int e = ECONNREFUSED;
        for (struct addrinfo *a = ai; a; a = a->ai_next) {
                int fd = socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC,
                                a->ai_protocol);
                if (fd < 0) {
                        e = errno;
                        continue;
                }
                int rc = connect(fd, a->ai_addr, a->ai_addrlen) == 0 ? 0 : -errno;
                if (rc == -EINPROGRESS && (rc = wait_fd(fd, POLLOUT, deadline)) == 0) {
                        socklen_t l = sizeof(e);
                        if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &e, &l) < 0)
                                e = errno;
                        rc = -e;
                }
                if (rc == 0) {
                        freeaddrinfo(ai);
                        *fd_out = fd;
                        return 0;
                }
                close(fd);
                e = -rc;
                if (e == EINTR)
                        break;
        }
        freeaddrinfo(ai);
        if (e == EINTR)
                return kdev_err_set(err, EINTR, "interrupted");
        return kdev_err_set(err, e,
                            "cannot reach kdev-plugin's metrics at %s: %s (is kdev-plugin "
                            "running with --metrics-address?)", t->addr, strerror(e));
}

/* The value of header |name| in the header block |h| (lines after the
 * status line), copied into |out|; false when absent. */
static bool header(const char *h, const char *name, char *out, size_t size)
{
        size_t n = strlen(name);
        for (const char *l = strchr(h, '\n'); l; l = strchr(l, '\n')) {
                l++;
                if (strncasecmp(l, name, n) == 0 && l[n] == ':') {
                        const char *v = l + n + 1;
                        v += strspn(v, " \t");
                        size_t vl = strcspn(v, "\r\n");
                        snprintf(out, size, "%.*s", (int)vl, v);
                        return true;
                }
        }
        return false;
}

/* Splits the answer |buf| (|n| bytes, NUL-terminated) into status, headers
 * and body; moves the body to the start of |buf|. */
static int answer(const struct kdev_top_target *t, char *buf, size_t n, size_t *len,
                  struct kdev_err *err)
{
        char *end = strstr(buf, "\r\n\r\n");
        size_t sep = 4;
        if (!end && (end = strstr(buf, "\n\n")))
                sep = 2;
        size_t sl = strcspn(buf, "\r\n");
        if (!end || strncmp(buf, "HTTP/1.", 7) != 0 || sl < 12 || buf[8] != ' ')
                return kdev_err_set(err, EPROTO, "kdev-plugin's metrics at %s: not an HTTP answer",
                                    t->addr);
        char status[128];
        snprintf(status, sizeof(status), "%.*s", (int)(sl < 127 ? sl : 127), buf);
        for (char *c = status; *c; c++)
                if (!isprint((unsigned char)*c))
                        *c = '?';
        *end = '\0';
        if (strncmp(buf + 9, "200", 3) != 0 || (buf[12] != ' ' && buf[12] != '\r' && buf[12]))
                return kdev_err_set(err, EPROTO, "kdev-plugin's metrics at %s answered \"%s\"",
                                    t->addr, status);
        char v[64];
        if (header(buf, "Transfer-Encoding", v, sizeof(v)) && strcasecmp(v, "identity") != 0)
                return kdev_err_set(err, EPROTO,
                                    "kdev-plugin's metrics at %s: Transfer-Encoding %s refused "
                                    "(an HTTP/1.0 request was sent)", t->addr, v);
        if (header(buf, "Content-Encoding", v, sizeof(v)) && strcasecmp(v, "identity") != 0)
                return kdev_err_set(err, EPROTO,
                                    "kdev-plugin's metrics at %s: Content-Encoding %s refused",
                                    t->addr, v);
        size_t off = (size_t)(end - buf) + sep, body = n - off;
        if (header(buf, "Content-Length", v, sizeof(v))) {
                char *e;
                unsigned long long want = strtoull(v, &e, 10);
                if (*e || !*v || want != body)
                        return kdev_err_set(err, EPROTO,
                                            "kdev-plugin's metrics at %s: answer truncated (%zu "
                                            "of %s bytes)", t->addr, body, v);
        }
        memmove(buf, buf + off, body + 1);
        *len = body;
        return 0;
}

int kdev_top_http_get(const struct kdev_top_target *t, int timeout_ms, char **body,
                      size_t *len, struct kdev_err *err)
{
        *body = NULL;
        *len = 0;
        int64_t deadline = now_ms() + timeout_ms;
        int fd = -1;
        int rc = dial(t, deadline, &fd, err);
        if (rc < 0)
                return rc;
        char req[1600];
        int rl = snprintf(req, sizeof(req),
                          "GET %s HTTP/1.0\r\nHost: %s\r\nUser-Agent: kdevctl/%s\r\n"
                          "Accept: text/plain;version=0.0.4\r\nConnection: close\r\n\r\n",
                          t->path, t->addr, KDEV_VERSION);
        char *buf = NULL;
        size_t n = 0, cap = 0;
        for (int off = 0; rc == 0 && off < rl;) {
                ssize_t w = send(fd, req + off, (size_t)(rl - off), MSG_NOSIGNAL);
                if (w >= 0)
                        off += (int)w;
                else if (errno == EAGAIN)
                        rc = wait_fd(fd, POLLOUT, deadline);
                else
                        rc = -errno;
        }
        while (rc == 0) {
                if (cap - n < 65536 + 1) {
                        size_t nc = cap ? cap * 2 : 65536 * 2;
                        char *nb = realloc(buf, nc);
                        if (!nb) {
                                rc = -ENOMEM;
                                break;
                        }
                        buf = nb;
                        cap = nc;
                }
                ssize_t r = recv(fd, buf + n, cap - n - 1, 0);
                if (r > 0) {
                        n += (size_t)r;
                        if (n > KDEV_TOP_MAX_ANSWER) {
                                rc = -EFBIG;
                                break;
                        }
                } else if (r == 0) {
                        break;
                } else if (errno == EAGAIN) {
                        rc = wait_fd(fd, POLLIN, deadline);
                } else {
                        rc = -errno;
                }
        }
        close(fd);
        if (rc == 0 && n == 0)
                rc = -EPROTO;
        if (rc == 0) {
                buf[n] = '\0';
                rc = answer(t, buf, n, len, err);
        } else if (rc == -EINTR) {
                kdev_err_set(err, EINTR, "interrupted");
        } else if (rc == -ETIMEDOUT) {
                kdev_err_set(err, ETIMEDOUT,
                             "kdev-plugin's metrics at %s: no complete answer within %.3g s",
                             t->addr, timeout_ms / 1000.0);
        } else if (rc == -EFBIG) {
                kdev_err_set(err, EFBIG, "kdev-plugin's metrics at %s: answer larger than %u MiB",
                             t->addr, KDEV_TOP_MAX_ANSWER / (1024 * 1024));
        } else if (rc == -EPROTO) {
                kdev_err_set(err, EPROTO, "kdev-plugin's metrics at %s: empty answer", t->addr);
        } else {
                kdev_err_set(err, -rc, "kdev-plugin's metrics at %s: %s", t->addr,
                             rc == -ENOMEM ? "out of memory" : strerror(-rc));
        }
        if (rc < 0) {
                free(buf);
                return rc;
        }
        *body = buf;
        return 0;
}
