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

/* "HOST:PORT" / "[V6]:PORT" / ":PORT" (|n| bytes at |s|) into |t|. */
static bool split_hostport(const char *s, size_t n, struct kdev_top_target *t)
{
        const char *colon = NULL, *host = s;
        for (const char *p = s; p < s + n; p++)
                colon = *p == ':' ? p : colon;
        if (!colon)
                return false;
        size_t hlen = (size_t)(colon - s), plen = n - hlen - 1;
        if (hlen >= 2 && s[0] == '[' && s[hlen - 1] == ']')
                host++, hlen -= 2;
        else if (memchr(s, ':', hlen) || memchr(s, '[', hlen) || memchr(s, ']', hlen))
                return false;
        char *end = NULL;
        long port = plen && plen < 6 && isdigit((unsigned char)colon[1])
                            ? strtol(colon + 1, &end, 10) : 0;
        if (port < 1 || port > 65535 || end != colon + 1 + plen || hlen >= sizeof(t->host) ||
            (host != s && hlen == 0))
                return false;
        snprintf(t->port, sizeof(t->port), "%ld", port);
        if (hlen)
                snprintf(t->host, sizeof(t->host), "%.*s", (int)hlen, host);
        else
                snprintf(t->host, sizeof(t->host), "127.0.0.1");
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
        bool ok = strncmp(text, "http://", 7) == 0;
        const char *hp = ok ? text + 7 : "";
        size_t n = strcspn(hp, "/?#");
        const char *path = hp + n;
        ok = ok && n > 0 && !strchr(path, '#') && strlen(path) + 1 < sizeof(t->path) &&
             split_hostport(hp, n, t);
        for (const char *c = path; ok && *c; c++)
                ok = isgraph((unsigned char)*c);
        if (!ok)
                return kdev_err_set(err, EINVAL,
                                    "invalid --metrics-url \"%s\" (want http://HOST:PORT/PATH, "
                                    "e.g. http://127.0.0.1:9400/metrics)", text);
        snprintf(t->path, sizeof(t->path), "%s%s", *path == '/' ? "" : "/", path);
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
        struct pollfd p = {.fd = fd, .events = events};
        int rc = left > 0 ? poll(&p, 1, (int)left) : 0;
        return rc < 0 ? -errno : rc == 0 ? -ETIMEDOUT : 0;
}

static int dial(const struct kdev_top_target *t, int64_t deadline, struct kdev_err *err)
{
        struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM,
                                 .ai_flags = AI_NUMERICSERV}, *ai = NULL;
        int g = getaddrinfo(t->host, t->port, &hints, &ai);
        if (g != 0)
                return kdev_err_set(err, EHOSTUNREACH, "cannot reach kdev-plugin's metrics at %s: %s",
                                    t->addr, g == EAI_SYSTEM ? strerror(errno) : gai_strerror(g));
        int e = ECONNREFUSED;
        for (struct addrinfo *a = ai; a && e != EINTR; a = a->ai_next) {
                int fd = socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC,
                                a->ai_protocol);
                int rc = fd < 0 ? -errno : connect(fd, a->ai_addr, a->ai_addrlen) == 0 ? 0 : -errno;
                if (rc == -EINPROGRESS && (rc = wait_fd(fd, POLLOUT, deadline)) == 0) {
                        socklen_t l = sizeof(e);
                        rc = getsockopt(fd, SOL_SOCKET, SO_ERROR, &e, &l) < 0 ? -errno : -e;
                }
                if (rc == 0) {
                        freeaddrinfo(ai);
                        return fd;
                }
                if (fd >= 0)
                        close(fd);
                e = -rc;
        }
        freeaddrinfo(ai);
        if (e == EINTR)
                return kdev_err_set(err, EINTR, "interrupted");
        return kdev_err_set(err, e,
                            "cannot reach kdev-plugin's metrics at %s: %s (is kdev-plugin "
                            "running with --metrics-address?)", t->addr, strerror(e));
}

/* The value of header |name| in the header block |h| into |out|; false
 * when absent. */
static bool header(const char *h, const char *name, char out[64])
{
        size_t n = strlen(name);
        for (const char *l = strchr(h, '\n'); l; l = strchr(l + 1, '\n'))
                if (strncasecmp(l + 1, name, n) == 0 && l[n + 1] == ':') {
                        const char *v = l + n + 2 + strspn(l + n + 2, " \t");
                        snprintf(out, 64, "%.*s", (int)strcspn(v, "\r\n"), v);
                        return true;
                }
        return false;
}

/* Checks the answer |buf| (|n| bytes, NUL-terminated): status 200, a whole
 * body, no chunks; moves the body to the start of |buf|. */
static int answer(const struct kdev_top_target *t, char *buf, size_t n, size_t *len,
                  struct kdev_err *err)
{
        char *end = strstr(buf, "\r\n\r\n"), v[64], status[128];
        size_t sep = 4, sl = strcspn(buf, "\r\n");
        if (!end && (end = strstr(buf, "\n\n")))
                sep = 2;
        if (n == 0)
                return kdev_err_set(err, EPROTO, "kdev-plugin's metrics at %s: empty answer",
                                    t->addr);
        if (!end || strncmp(buf, "HTTP/1.", 7) != 0 || sl < 12 || buf[8] != ' ')
                return kdev_err_set(err, EPROTO, "kdev-plugin's metrics at %s: not an HTTP answer",
                                    t->addr);
        snprintf(status, sizeof(status), "%.*s", (int)(sl < 127 ? sl : 127), buf);
        for (char *c = status; *c; c++)
                *c = isprint((unsigned char)*c) ? *c : '?';
        *end = '\0';
        if (strncmp(buf + 9, "200", 3) != 0 || isdigit((unsigned char)buf[12]))
                return kdev_err_set(err, EPROTO, "kdev-plugin's metrics at %s answered \"%s\"",
                                    t->addr, status);
        if (header(buf, "Transfer-Encoding", v) && strcasecmp(v, "identity") != 0)
                return kdev_err_set(err, EPROTO, "kdev-plugin's metrics at %s: Transfer-Encoding "
                                    "%s refused (an HTTP/1.0 request was sent)", t->addr, v);
        size_t off = (size_t)(end - buf) + sep, body = n - off;
        char *e;
        if (header(buf, "Content-Length", v) && (strtoull(v, &e, 10) != body || *e || !*v))
                return kdev_err_set(err, EPROTO, "kdev-plugin's metrics at %s: answer truncated "
                                    "(%zu of %s bytes)", t->addr, body, v);
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
        int fd = dial(t, deadline, err), rc = 0;
        if (fd < 0)
                return fd;
        char req[1600], *buf = NULL;
        int rl = snprintf(req, sizeof(req),
                          "GET %s HTTP/1.0\r\nHost: %s\r\nUser-Agent: kdevctl/%s\r\n"
                          "Accept: text/plain;version=0.0.4\r\nConnection: close\r\n\r\n",
                          t->path, t->addr, KDEV_VERSION);
        for (int off = 0; rc == 0 && off < rl;) {
                ssize_t w = send(fd, req + off, (size_t)(rl - off), MSG_NOSIGNAL);
                off += w > 0 ? (int)w : 0;
                rc = w >= 0 ? 0 : errno == EAGAIN ? wait_fd(fd, POLLOUT, deadline) : -errno;
        }
        size_t n = 0, cap = 0;
        for (ssize_t r = 1; rc == 0 && r != 0;) {
                char *nb = cap - n > 65536 ? buf : realloc(buf, cap = cap ? cap * 2 : 131072);
                if (!nb) {
                        rc = -ENOMEM;
                        break;
                }
                buf = nb;
                r = recv(fd, buf + n, cap - n - 1, 0);
                n += r > 0 ? (size_t)r : 0;
                rc = n > KDEV_TOP_MAX_ANSWER ? -EFBIG
                     : r >= 0                ? 0
                     : errno == EAGAIN       ? wait_fd(fd, POLLIN, deadline)
                                             : -errno;
        }
        close(fd);
        if (rc == 0) {
                buf[n] = '\0';
                rc = answer(t, buf, n, len, err);
        } else if (rc == -ETIMEDOUT) {
                kdev_err_set(err, ETIMEDOUT, "kdev-plugin's metrics at %s: no complete answer "
                             "within %.3g s", t->addr, timeout_ms / 1000.0);
        } else if (rc == -EFBIG) {
                kdev_err_set(err, EFBIG, "kdev-plugin's metrics at %s: answer larger than %u MiB",
                             t->addr, KDEV_TOP_MAX_ANSWER / (1024 * 1024));
        } else if (rc == -EINTR) {
                kdev_err_set(err, EINTR, "interrupted");
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
