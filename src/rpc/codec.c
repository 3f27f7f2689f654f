/* gRPC wire helpers shared by the server and the client: status names,
 * grpc-message percent-encoding, grpc-timeout values, message framing and
 * prefixes with the checks both sides make on them, status trailers and
 * their parsing, the HTTP and HTTP/2 error to gRPC status mappings
 * (grpc/grpc doc/PROTOCOL-HTTP2.md, doc/statuscodes.md,
 * doc/http-grpc-status-mapping.md). */
#include "rpc/rpc_internal.h"

#include <ctype.h>
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

static const char *const status_names[] = {
        "OK",
        "CANCELLED",
        "UNKNOWN",
        "INVALID_ARGUMENT",
        "DEADLINE_EXCEEDED",
        "NOT_FOUND",
        "ALREADY_EXISTS",
        "PERMISSION_DENIED",
        "RESOURCE_EXHAUSTED",
        "FAILED_PRECONDITION",
        "ABORTED",
        "OUT_OF_RANGE",
        "UNIMPLEMENTED",
        "INTERNAL",
        "UNAVAILABLE",
        "DATA_LOSS",
        "UNAUTHENTICATED",
};

const char *kdev_rpc_status_name(int status)
{
        if (status < 0 || (size_t)status >= sizeof(status_names) / sizeof(status_names[0]))
                return "UNKNOWN";
        return status_names[status];
}

char *kdev_rpc_percent_encode(const char *in)
{
        static const char hex[] = "0123456789ABCDEF";
        if (!in)
                in = "";
        size_t n = 0;
        for (const unsigned char *p = (const unsigned char *)in; *p; p++)
                n += (*p < 0x20 || *p > 0x7e || *p == '%') ? 3 : 1;
        char *out = malloc(n + 1);
        if (!out)
                return NULL;
        char *o = out;
        for (const unsigned char *p = (const unsigned char *)in; *p; p++) {
                if (*p < 0x20 || *p > 0x7e || *p == '%') {
                        *o++ = '%';
                        *o++ = hex[*p >> 4];
                        *o++ = hex[*p & 0xf];
                } else {
                        *o++ = (char)*p;
                }
        }
        *o = '\0';
        return out;
}

static int hexval(char c)
{
        if (c >= '0' && c <= '9')
                return c - '0';
        if (c >= 'a' && c <= 'f')
                return c - 'a' + 10;
        if (c >= 'A' && c <= 'F')
                return c - 'A' + 10;
        return -1;
}

char *kdev_rpc_percent_decode(const char *in, size_t len)
{
        char *out = malloc(len + 1);
        if (!out)
                return NULL;
        size_t o = 0;
        for (size_t i = 0; i < len; i++) {
                if (in[i] == '%' && i + 2 < len && hexval(in[i + 1]) >= 0 &&
                    hexval(in[i + 2]) >= 0) {
                        out[o++] = (char)(hexval(in[i + 1]) << 4 | hexval(in[i + 2]));
                        i += 2;
                } else {
                        out[o++] = in[i];
                }
        }
        out[o] = '\0';
        return out;
}

int kdev_rpc__timeout_parse(const char *v, size_t len, uint64_t *ms)
{
        if (len < 2 || len > 9)
                return -EINVAL;
        uint64_t n = 0;
        for (size_t i = 0; i + 1 < len; i++) {
                if (v[i] < '0' || v[i] > '9')
                        return -EINVAL;
                n = n * 10 + (uint64_t)(v[i] - '0');
        }
        switch (v[len - 1]) {
        case 'H':
                *ms = n * 3600000u;
                break;
        case 'M':
                *ms = n * 60000u;
                break;
        case 'S':
                *ms = n * 1000u;
                break;
        case 'm':
                *ms = n;
                break;
        case 'u':
                *ms = (n + 999u) / 1000u;
                break;
        case 'n':
                *ms = (n + 999999u) / 1000000u;
                break;
        default:
                return -EINVAL;
        }
        return 0;
}

size_t kdev_rpc__timeout_format(uint64_t ms, char *buf, size_t size)
{
        static const struct {
                uint64_t div;
                char unit;
        } units[] = { { 1, 'm' }, { 1000, 'S' }, { 60000, 'M' }, { 3600000, 'H' } };
        const uint64_t max = 99999999u;
        uint64_t v = 0;
        char unit = 'H';
        for (size_t i = 0; i < sizeof(units) / sizeof(units[0]); i++) {
                v = ms / units[i].div + (ms % units[i].div ? 1 : 0);
                unit = units[i].unit;
                if (v <= max)
                        break;
        }
        if (v > max)
                v = max;
        int n = snprintf(buf, size, "%llu%c", (unsigned long long)v, unit);
        return n < 0 ? 0 : (size_t)n;
}

void kdev_rpc__put_prefix(uint8_t *p, uint32_t len)
{
        p[0] = 0;
        p[1] = (uint8_t)(len >> 24);
        p[2] = (uint8_t)(len >> 16);
        p[3] = (uint8_t)(len >> 8);
        p[4] = (uint8_t)len;
}

uint8_t *kdev_rpc__frame(const uint8_t *msg, size_t len)
{
        uint8_t *f = malloc(KDEV_RPC_PREFIX_LEN + len);
        if (!f)
                return NULL;
        kdev_rpc__put_prefix(f, (uint32_t)len);
        if (msg && len)
                memcpy(f + KDEV_RPC_PREFIX_LEN, msg, len);
        return f;
}

void kdev_rpc__send_too_large(char *buf, size_t size, size_t len, size_t max)
{
        snprintf(buf, size, "trying to send message larger than max (%zu vs. %zu)", len, max);
}

bool kdev_rpc__body_take(uint8_t *dst, size_t *got, size_t want, const uint8_t **d, size_t *n)
{
        size_t take = want - *got;
        if (take > *n)
                take = *n;
        if (take) {
                memcpy(dst + *got, *d, take);
                *got += take;
                *d += take;
                *n -= take;
        }
        return *got == want;
}

bool kdev_rpc__prefix_take(uint8_t prefix[KDEV_RPC_PREFIX_LEN], size_t *got, const uint8_t **d,
                           size_t *n, uint8_t *flags, uint32_t *len)
{
        if (!kdev_rpc__body_take(prefix, got, KDEV_RPC_PREFIX_LEN, d, n))
                return false;
        *flags = prefix[0];
        *len = (uint32_t)prefix[1] << 24 | (uint32_t)prefix[2] << 16 | (uint32_t)prefix[3] << 8 |
               prefix[4];
        return true;
}

bool kdev_rpc__content_type_ok(const char *v, size_t len, bool *is_grpc)
{
        static const char base[] = "application/grpc";
        const size_t blen = sizeof(base) - 1;
        *is_grpc = false;
        if (len < blen || strncasecmp(v, base, blen) != 0)
                return false;
        if (len == blen) {
                *is_grpc = true;
                return true;
        }
        if (v[blen] != '+' && v[blen] != ';')
                return false; /* "application/grpcfoo" is not gRPC */
        *is_grpc = true;
        size_t rest = len - blen;
        const char *r = v + blen;
        if (r[0] == ';')
                return true;
        size_t sub = 1;
        while (sub < rest && r[sub] != ';')
                sub++;
        return sub == 6 && strncasecmp(r, "+proto", 6) == 0;
}

int kdev_rpc__prefix_check(uint8_t flags, uint32_t len, size_t max_recv, bool response, char *msg,
                           size_t size)
{
        if (flags == 1) {
                snprintf(msg, size, "compressed messages are not supported");
                return KDEV_RPC_UNIMPLEMENTED;
        }
        if (flags != 0) {
                snprintf(msg, size, "invalid message flags%s", response ? " in response" : "");
                return KDEV_RPC_INTERNAL;
        }
        if (len > max_recv) {
                snprintf(msg, size, "received message larger than max (%u vs. %zu)", len,
                         max_recv);
                return KDEV_RPC_RESOURCE_EXHAUSTED;
        }
        return KDEV_RPC_OK;
}

size_t kdev_rpc__status_nv(nghttp2_nv *nv, char code[16], int status, const char *enc_msg)
{
        /* "%d" by hand: snprintf costs more than the rest of the trailers */
        char tmp[12];
        size_t n = 0, o = 0;
        unsigned int u = status < 0 ? 0u - (unsigned int)status : (unsigned int)status;
        do {
                tmp[n++] = (char)('0' + u % 10);
                u /= 10;
        } while (u);
        if (status < 0)
                code[o++] = '-';
        while (n)
                code[o++] = tmp[--n];
        code[o] = '\0';
        nv[0] = (nghttp2_nv)KDEV_RPC_NV("grpc-status", code);
        if (!enc_msg || !enc_msg[0])
                return 1;
        nv[1] = (nghttp2_nv)KDEV_RPC_NV("grpc-message", enc_msg);
        return 2;
}

int kdev_rpc__parse_uint(const uint8_t *v, size_t len, int max)
{
        if (len == 0 || len > 9)
                return -1;
        int n = 0;
        for (size_t i = 0; i < len; i++) {
                if (v[i] < '0' || v[i] > '9')
                        return -1;
                n = n * 10 + (v[i] - '0');
        }
        return n > max ? -1 : n;
}

int kdev_rpc__status_parse(const uint8_t *v, size_t len)
{
        int st = kdev_rpc__parse_uint(v, len, 1000000);
        return st < 0 ? KDEV_RPC_UNKNOWN : st;
}

int kdev_rpc__status_from_http(int http)
{
        switch (http) {
        case 400:
                return KDEV_RPC_INTERNAL;
        case 401:
                return KDEV_RPC_UNAUTHENTICATED;
        case 403:
                return KDEV_RPC_PERMISSION_DENIED;
        case 404:
                return KDEV_RPC_UNIMPLEMENTED;
        case 429:
        case 502:
        case 503:
        case 504:
                return KDEV_RPC_UNAVAILABLE;
        default:
                return KDEV_RPC_UNKNOWN;
        }
}

int kdev_rpc__status_from_h2(uint32_t error_code)
{
        switch (error_code) {
        case NGHTTP2_REFUSED_STREAM:
                return KDEV_RPC_UNAVAILABLE;
        case NGHTTP2_CANCEL:
                return KDEV_RPC_CANCELLED;
        case NGHTTP2_ENHANCE_YOUR_CALM:
                return KDEV_RPC_RESOURCE_EXHAUSTED;
        case NGHTTP2_INADEQUATE_SECURITY:
                return KDEV_RPC_PERMISSION_DENIED;
        default:
                return KDEV_RPC_INTERNAL;
        }
}

const char *kdev_rpc_code_name(int status, char *buf, size_t size)
{
        if (size == 0)
                return buf;
        if (status < 0 || status > 16) {
                snprintf(buf, size, "Code(%d)", status);
                return buf;
        }
        if (status == KDEV_RPC_OK) {
                snprintf(buf, size, "OK");
                return buf;
        }
        if (status == KDEV_RPC_CANCELLED) { /* grpc-go spells it with one L */
                snprintf(buf, size, "Canceled");
                return buf;
        }
        const char *up = kdev_rpc_status_name(status);
        size_t n = 0;
        bool start = true;
        for (const char *c = up; *c && n + 1 < size; c++) {
                if (*c == '_') {
                        start = true;
                        continue;
                }
                buf[n++] = start ? *c : (char)tolower((unsigned char)*c);
                start = false;
        }
        buf[n] = '\0';
        return buf;
}
