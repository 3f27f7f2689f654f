/* The metrics HTTP endpoint: libmicrohttpd (HTTP/1.x parsing, keep-alive,
 * timeouts) driven by the caller's libuv loop, with no thread of its own.
 *
 * MHD runs in its "external polling" mode with epoll (MHD_USE_EPOLL without
 * MHD_USE_INTERNAL_POLLING_THREAD): its epoll fd (MHD_DAEMON_INFO_EPOLL_FD)
 * is watched with a uv_poll, MHD_run() is called when it is readable, and a
 * uv_timer fires at MHD_get_timeout() for connection timeouts. So every
 * request is answered on the loop thread and the registry needs no lock.
 *
 * Requests:
 *   GET (or HEAD) /metrics  -> 200, Content-Type KDEV_METRICS_CONTENT_TYPE,
 *                              kdev_metrics_render() of the registry
 *   other methods /metrics  -> 405 with "Allow: GET, HEAD"
 *   any other path          -> 404
 *   a render that fails     -> 500
 * A query string is ignored (Prometheus sends none by default).
 *
 * Limits, so that one noisy or broken client cannot starve Prometheus: at most
 * KDEV_METRICS_CONNECTION_LIMIT connections in all and
 * KDEV_METRICS_PER_IP_LIMIT from one client address (MHD closes the ones over
 * it at once, so they do not sit in the listen backlog either); a connection
 * idle for KDEV_METRICS_IDLE_TIMEOUT_S seconds is closed (with a longer scrape
 * interval Prometheus simply opens a new connection per scrape).
 *
 * libmicrohttpd is loaded with dlopen("libmicrohttpd.so.12") when the first
 * server starts, not linked: Debian's build pulls in GnuTLS and 9 more shared
 * libraries whose loading alone costs ~3.2 MiB RSS (measured with an empty
 * program, 1.2 -> 4.4 MiB), against kdev-plugin's 4 MiB target, so with metrics
 * off none of it is mapped. The library stays loaded once used.
 */
#ifndef KDEV_METRICS_HTTP_H
#define KDEV_METRICS_HTTP_H

#include <stdbool.h>
#include <stddef.h>

#include <uv.h>

#include "common/err.h"
#include "common/export.h"
#include "metrics/metrics.h"

struct kdev_metrics_http;

/* Server limits (see the top of this file). */
#define KDEV_METRICS_CONNECTION_LIMIT 32
#define KDEV_METRICS_PER_IP_LIMIT 4
#define KDEV_METRICS_IDLE_TIMEOUT_S 10

/* What a metrics address looks like, for error messages:
 * "want " KDEV_METRICS_ADDRESS_FORM. */
#define KDEV_METRICS_ADDRESS_FORM \
        "HOST:PORT (e.g. 127.0.0.1:9400, [::1]:9400, :9400), with PORT 0..65535"

/* Whether |text| has the syntax kdev_metrics_parse_address() accepts
 * (HOST:PORT, see there), without resolving a host name (a host name is then
 * made of [A-Za-z0-9._-]), so that a bad value can be refused at option
 * parsing. NULL: false. */
KDEV_API bool kdev_metrics_address_valid(const char *text);

/* The --metrics-address check of both daemons' option parsing: true when
 * |address| is NULL or "" (metrics off) or valid (kdev_metrics_address_valid);
 * otherwise prints "<prog>: invalid --metrics-address \"<address>\": want "
 * KDEV_METRICS_ADDRESS_FORM (KDEV_METRICS_ADDRESS for the flag's name when
 * |from_env|: the value came from the environment) and a newline to stderr
 * and returns false (a usage error). */
KDEV_API bool kdev_metrics_address_flag_ok(const char *prog, const char *address, bool from_env);

/* Parses "HOST:PORT" into a socket address: HOST is an IPv4 address, an IPv6
 * address in brackets ("[::1]:9400"), or a host name resolved with
 * getaddrinfo (first result); an empty HOST (":9400") means every IPv4
 * address (0.0.0.0). PORT is 0..65535 (0: any free port). |addr| must have
 * room for a struct sockaddr_storage; *addrlen gets its length.
 * Returns 0, or -EINVAL with |err|: "metrics address \"<text>\": want "
 * KDEV_METRICS_ADDRESS_FORM, or "...: cannot resolve \"<host>\": <why>". */
KDEV_API int kdev_metrics_parse_address(const char *text, void *addr, unsigned *addrlen,
                                        struct kdev_err *err);

/* Listens on |address| ("HOST:PORT", see kdev_metrics_parse_address) and
 * serves |reg| (borrowed: must outlive the server) on |loop|. Only that
 * address is bound (no other interface). Returns the server, or NULL with
 * |err|: -EINVAL (bad address), the bind/listen errno ("cannot listen on
 * 127.0.0.1:9400: Address already in use"), -ENOENT when libmicrohttpd cannot
 * be loaded, -EIO when it fails to start, -ENOMEM. Stop with kdev_metrics_http_close(). */
KDEV_API struct kdev_metrics_http *kdev_metrics_http_start(uv_loop_t *loop, const char *address,
                                                           struct kdev_metrics *reg,
                                                           struct kdev_err *err);

/* The port actually bound (useful with port 0). */
KDEV_API unsigned kdev_metrics_http_port(const struct kdev_metrics_http *h);

/* Requests answered so far (any status). */
KDEV_API unsigned long kdev_metrics_http_requests(const struct kdev_metrics_http *h);

/* Stops listening, closes every connection, and frees |h| once libuv has
 * released its handles; then |done| (may be NULL) runs with |arg|. NULL-safe
 * (|done| is then called at once). */
KDEV_API void kdev_metrics_http_close(struct kdev_metrics_http *h, void (*done)(void *arg),
                                      void *arg);

#endif /* KDEV_METRICS_HTTP_H */
