/* API server requests over libcurl's easy interface: retries, backoff, errors
 * (see kube.h). */
#include "kube/kube.h"

#include <ctype.h>
#include <errno.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "common/file.h"
#include "common/json.h"
#include "common/version.h"
#include "kube/kube_internal.h"
#include "kube/libcurl_internal.h"

struct buf {
        char *data;
        size_t len, cap;
        bool too_big;
        /* a watch (kdev_kube_watch): each complete line is handed to on_line
         * and dropped; the buffer holds the partial line only */
        int (*on_line)(struct buf *b, const char *line, size_t len);
        kdev_kube_watch_fn fn;
        void *fn_arg;
        /* a watch: its transfer, for the status of the answer */
        const struct kdev_curl_api *lc;
        CURL *curl;
        bool ended;     /* the callback asked to end the watch */
        bool bad_line;  /* a line that is not a JSON object */
};

struct kdev_kube {
        struct kdev_kube_config cfg; /* deep copy */
        char version[16];
        char api_version[48];
        char *user_agent;
        unsigned attempts, backoff_ms, backoff_max_ms, timeout_ms, connect_timeout_ms;
        unsigned conflict_retries, token_reload_ms;
        uint64_t token_read_at; /* monotonic ms */
        const struct kdev_curl_api *lc; /* libcurl (libcurl_internal.h) */
        CURL *curl;
        char errbuf[CURL_ERROR_SIZE];
        long last_status;
        unsigned last_attempts;
        long retry_after; /* seconds from the last response, 0 if none */
        char location[512]; /* Location of the last response, "" if none */
        bool got_header;   /* the last response's header callback ran (status line) */
        atomic_bool aborted; /* kdev_kube_abort: any thread */
};

static uint64_t now_ms(void)
{
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

uint64_t kdev_kube_now_ms(void)
{
        return now_ms();
}

/* The cancellation bound to this thread (kdev_kube_cancel_scope). */
static _Thread_local const struct kdev_kube_cancel *tl_cancel;

void kdev_kube_cancel_init(struct kdev_kube_cancel *c, uint64_t deadline_ms)
{
        atomic_init(&c->cancelled, false);
        c->deadline_ms = deadline_ms;
}

void kdev_kube_cancel_fire(struct kdev_kube_cancel *c)
{
        atomic_store(&c->cancelled, true);
}

static bool past_deadline(const struct kdev_kube_cancel *c)
{
        return c && c->deadline_ms && now_ms() >= c->deadline_ms;
}

static bool cancel_fired(const struct kdev_kube_cancel *c)
{
        return c && atomic_load((atomic_bool *)&c->cancelled);
}

bool kdev_kube_cancel_done(const struct kdev_kube_cancel *c)
{
        return cancel_fired(c) || past_deadline(c);
}

const struct kdev_kube_cancel *kdev_kube_cancel_scope(const struct kdev_kube_cancel *c)
{
        const struct kdev_kube_cancel *prev = tl_cancel;
        tl_cancel = c;
        return prev;
}

/* Whether the request running on this thread must stop now. */
static bool must_stop(const struct kdev_kube *k)
{
        return atomic_load((atomic_bool *)&k->aborted) || kdev_kube_cancel_done(tl_cancel);
}

/* Sleeps |ms| in slices of at most 50 ms, returning early once |k| is aborted
 * or this thread's work cancelled. */
static void sleep_ms(struct kdev_kube *k, unsigned ms)
{
        while (ms > 0 && !must_stop(k)) {
                unsigned step = ms < 50 ? ms : 50;
                struct timespec ts = {.tv_sec = 0, .tv_nsec = (long)step * 1000000L};
                while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
                        ;
                ms -= step;
        }
}

void kdev_kube_abort(struct kdev_kube *k)
{
        if (k)
                atomic_store(&k->aborted, true);
}

/* libcurl progress callback: non-zero aborts the transfer. */
static int on_progress(void *arg, curl_off_t dltotal, curl_off_t dlnow, curl_off_t ultotal,
                       curl_off_t ulnow)
{
        struct kdev_kube *k = arg;
        (void)dltotal;
        (void)dlnow;
        (void)ultotal;
        (void)ulnow;
        return must_stop(k) ? 1 : 0;
}

static int dup_mem(char **dst, size_t *dst_len, const char *src, size_t len)
{
        *dst = NULL;
        if (dst_len)
                *dst_len = 0;
        if (!src)
                return 0;
        *dst = malloc(len + 1);
        if (!*dst)
                return -ENOMEM;
        memcpy(*dst, src, len);
        (*dst)[len] = '\0';
        if (dst_len)
                *dst_len = len;
        return 0;
}

static int copy_config(struct kdev_kube_config *d, const struct kdev_kube_config *s)
{
        memset(d, 0, sizeof(*d));
        if (dup_mem(&d->server, NULL, s->server, s->server ? strlen(s->server) : 0) < 0 ||
            dup_mem(&d->token, NULL, s->token, s->token ? strlen(s->token) : 0) < 0 ||
            dup_mem(&d->token_file, NULL, s->token_file,
                    s->token_file ? strlen(s->token_file) : 0) < 0 ||
            dup_mem(&d->ca_pem, &d->ca_len, s->ca_pem, s->ca_len) < 0 ||
            dup_mem(&d->cert_pem, &d->cert_len, s->cert_pem, s->cert_len) < 0 ||
            dup_mem(&d->key_pem, &d->key_len, s->key_pem, s->key_len) < 0 ||
            dup_mem(&d->namespace, NULL, s->namespace,
                    s->namespace ? strlen(s->namespace) : 0) < 0 ||
            dup_mem(&d->context, NULL, s->context, s->context ? strlen(s->context) : 0) < 0)
                return -ENOMEM;
        d->insecure = s->insecure;
        return 0;
}

struct kdev_kube *kdev_kube_new(const struct kdev_kube_config *cfg,
                                const struct kdev_kube_opts *opts, struct kdev_err *err)
{
        static const struct kdev_kube_opts none;
        if (!opts)
                opts = &none;
        if (!cfg || !cfg->server) {
                kdev_err_set(err, EINVAL, "API server client: no server configured");
                return NULL;
        }
        const char *version = opts->version ? opts->version : "v1";
        if (strcmp(version, "v1") != 0 && strcmp(version, "v1beta1") != 0) {
                kdev_err_set(err, EINVAL,
                             "API server client: resource.k8s.io version \"%s\" is not "
                             "supported (v1 or v1beta1)",
                             version);
                return NULL;
        }
        /* libcurl is loaded with the first client (libcurl_internal.h) */
        const struct kdev_curl_api *lc = kdev_curl_load(err);
        if (!lc)
                return NULL;
        struct kdev_kube *k = calloc(1, sizeof(*k));
        if (!k) {
                kdev_err_set(err, ENOMEM, "out of memory");
                return NULL;
        }
        atomic_init(&k->aborted, false);
        k->lc = lc;
        snprintf(k->version, sizeof(k->version), "%s", version);
        snprintf(k->api_version, sizeof(k->api_version), "resource.k8s.io/%s", version);
        k->attempts = opts->attempts ? opts->attempts : 5;
        k->backoff_ms = opts->backoff_ms ? opts->backoff_ms : 200;
        k->backoff_max_ms = opts->backoff_max_ms ? opts->backoff_max_ms : 5000;
        k->timeout_ms = opts->timeout_ms ? opts->timeout_ms : 30000;
        k->connect_timeout_ms = opts->connect_timeout_ms ? opts->connect_timeout_ms : 10000;
        k->conflict_retries = opts->conflict_retries ? opts->conflict_retries : 5;
        k->token_reload_ms = opts->token_reload_ms ? opts->token_reload_ms : 60000;
        k->token_read_at = now_ms();
        if (copy_config(&k->cfg, cfg) < 0 ||
            !(k->user_agent = strdup(opts->user_agent ? opts->user_agent
                                                      : "kdev/" KDEV_VERSION))) {
                kdev_err_set(err, ENOMEM, "out of memory");
                kdev_kube_free(k);
                return NULL;
        }
        k->curl = lc->easy_init();
        if (!k->curl) {
                kdev_err_set(err, ENOMEM, "API server client: curl_easy_init failed");
                kdev_kube_free(k);
                return NULL;
        }
        return k;
}

void kdev_kube_free(struct kdev_kube *k)
{
        if (!k)
                return;
        if (k->curl)
                k->lc->easy_cleanup(k->curl);
        kdev_kube_config_free(&k->cfg);
        free(k->user_agent);
        free(k);
}

const char *kdev_kube_version(const struct kdev_kube *k)
{
        return k->version;
}

const char *kdev_kube_api_version(const struct kdev_kube *k)
{
        return k->api_version;
}

long kdev_kube_last_status(const struct kdev_kube *k)
{
        return k->last_status;
}

unsigned kdev_kube_last_attempts(const struct kdev_kube *k)
{
        return k->last_attempts;
}

unsigned kdev_kube_conflict_retries(const struct kdev_kube *k)
{
        return k->conflict_retries;
}

unsigned kdev_kube_backoff_ms(const struct kdev_kube *k, unsigned attempt, long retry_after_s)
{
        uint64_t d = k->backoff_ms;
        for (unsigned i = 1; i < attempt && d < k->backoff_max_ms; i++)
                d *= 2;
        if (retry_after_s > 0 && (uint64_t)retry_after_s * 1000u > d)
                d = (uint64_t)retry_after_s * 1000u;
        if (d > k->backoff_max_ms)
                d = k->backoff_max_ms;
        return (unsigned)d;
}

/* Re-reads the token file when token_reload_ms have passed (bound service
 * account tokens rotate; client-go re-reads its token file every minute). A
 * failed read keeps the old token. */
static void reload_token(struct kdev_kube *k)
{
        if (!k->cfg.token_file || now_ms() - k->token_read_at < k->token_reload_ms)
                return;
        k->token_read_at = now_ms();
        char *tok = NULL;
        size_t n = 0;
        if (kdev_file_read(k->cfg.token_file, "token file", KDEV_KUBE_TOKEN_FILE_MAX,
                           KDEV_FILE_TEXT, &tok, &n, NULL) < 0)
                return;
        while (n > 0 && isspace((unsigned char)tok[n - 1]))
                tok[--n] = '\0';
        char *s = tok;
        while (isspace((unsigned char)*s))
                s++;
        bool ok = *s != '\0';
        for (const unsigned char *p = (const unsigned char *)s; ok && *p; p++)
                if (*p < 0x20 || *p == 0x7f)
                        ok = false;
        char *nt = ok ? strdup(s) : NULL;
        explicit_bzero(tok, n);
        free(tok);
        if (!nt)
                return;
        if (k->cfg.token) {
                explicit_bzero(k->cfg.token, strlen(k->cfg.token));
                free(k->cfg.token);
        }
        k->cfg.token = nt;
}

static size_t on_body(char *ptr, size_t size, size_t nmemb, void *arg)
{
        struct buf *b = arg;
        size_t n = size * nmemb;
        if (b->len + n > KDEV_KUBE_BODY_MAX) {
                b->too_big = true;
                return 0;
        }
        if (b->len + n + 1 > b->cap) {
                size_t cap = b->cap ? b->cap : 4096;
                while (cap < b->len + n + 1)
                        cap *= 2;
                char *nd = realloc(b->data, cap);
                if (!nd)
                        return 0;
                b->data = nd;
                b->cap = cap;
        }
        memcpy(b->data + b->len, ptr, n);
        b->len += n;
        b->data[b->len] = '\0';
        long st = 0;
        if (b->on_line)
                b->lc->easy_getinfo(b->curl, CURLINFO_RESPONSE_CODE, &st);
        if (b->on_line && st >= 200 && st < 300) { /* an error's Status is kept whole */
                size_t start = 0;
                for (size_t i = 0; i < b->len; i++) {
                        if (b->data[i] != '\n')
                                continue;
                        if (i > start && b->on_line(b, b->data + start, i - start) != 0)
                                return 0; /* ends the transfer (CURLE_WRITE_ERROR) */
                        start = i + 1;
                }
                memmove(b->data, b->data + start, b->len - start);
                b->len -= start;
                b->data[b->len] = '\0';
        }
        return n;
}

static int watch_line(struct buf *b, const char *line, size_t len)
{
        json_error_t je;
        json_t *ev = json_loadb(line, len, 0, &je);
        if (!ev || !json_is_object(ev)) {
                json_decref(ev);
                b->bad_line = true;
                return 1;
        }
        int r = b->fn(b->fn_arg, ev);
        json_decref(ev);
        if (r != 0)
                b->ended = true;
        return r;
}

static size_t on_header(char *ptr, size_t size, size_t nmemb, void *arg)
{
        struct kdev_kube *k = arg;
        size_t n = size * nmemb;
        static const char name[] = "retry-after:", loc[] = "location:";
        k->got_header = true;
        if (n > sizeof(loc) - 1 && strncasecmp(ptr, loc, sizeof(loc) - 1) == 0) {
                const char *v = ptr + sizeof(loc) - 1, *end = ptr + n;
                while (v < end && (*v == ' ' || *v == '\t'))
                        v++;
                while (end > v && (end[-1] == '\r' || end[-1] == '\n' || end[-1] == ' '))
                        end--;
                size_t vl = (size_t)(end - v);
                if (vl >= sizeof(k->location))
                        vl = sizeof(k->location) - 1;
                /* shown in messages: control characters as '?' */
                for (size_t i = 0; i < vl; i++)
                        k->location[i] = (unsigned char)v[i] < 0x20 || v[i] == 0x7f ? '?' : v[i];
                k->location[vl] = '\0';
        }
        if (n > sizeof(name) - 1 && strncasecmp(ptr, name, sizeof(name) - 1) == 0) {
                char v[32];
                size_t vl = n - (sizeof(name) - 1);
                if (vl >= sizeof(v))
                        vl = sizeof(v) - 1;
                memcpy(v, ptr + sizeof(name) - 1, vl);
                v[vl] = '\0';
                char *end;
                long s = strtol(v, &end, 10);
                if (end != v && s > 0)
                        k->retry_after = s;
        }
        return n;
}

/* libcurl's code for a response header line over CURL_MAX_HTTP_HEADER. */
static bool header_too_large(CURLcode c)
{
#if LIBCURL_VERSION_NUM >= 0x080600
        if (c == CURLE_TOO_LARGE)
                return true;
#endif
        return c == CURLE_OUT_OF_MEMORY;
}

static bool retryable_status(long st)
{
        return st == 429 || st == 500 || st == 502 || st == 503 || st == 504;
}

static bool retryable_curl(CURLcode c)
{
        switch (c) {
        case CURLE_COULDNT_CONNECT:
        case CURLE_COULDNT_RESOLVE_HOST:
        case CURLE_OPERATION_TIMEDOUT:
        case CURLE_GOT_NOTHING:
        case CURLE_SEND_ERROR:
        case CURLE_RECV_ERROR:
        case CURLE_PARTIAL_FILE:
        case CURLE_SSL_CONNECT_ERROR:
                return true;
        default:
                return false;
        }
}

int kdev_kube_curl_errno(int code)
{
        switch ((CURLcode)code) {
        case CURLE_COULDNT_CONNECT:
                return ECONNREFUSED;
        case CURLE_COULDNT_RESOLVE_HOST:
                return EHOSTUNREACH;
        case CURLE_OPERATION_TIMEDOUT:
                return ETIMEDOUT;
        case CURLE_GOT_NOTHING:
        case CURLE_SEND_ERROR:
        case CURLE_RECV_ERROR:
        case CURLE_PARTIAL_FILE:
                return ECONNRESET;
        case CURLE_PEER_FAILED_VERIFICATION:
                return EKEYREJECTED;
        case CURLE_SSL_CONNECT_ERROR:
        case CURLE_SSL_CERTPROBLEM:
        case CURLE_SSL_CACERT_BADFILE:
        case CURLE_SSL_CIPHER:
                return EPROTO;
        case CURLE_OUT_OF_MEMORY:
                return ENOMEM;
        case CURLE_WRITE_ERROR:
                return EFBIG;
        default:
                return EIO;
        }
}

int kdev_kube_status_errno(long status, const char *reason)
{
        switch (status) {
        case 400:
        case 422:
                return EINVAL;
        case 401:
                return EACCES;
        case 403:
                return EPERM;
        case 404:
                return ENOENT;
        case 405:
                return EOPNOTSUPP;
        case 409:
                return reason && strcmp(reason, "AlreadyExists") == 0 ? EEXIST : ESTALE;
        case 410:
                return ESTALE;
        default:
                return retryable_status(status) ? EAGAIN : EPROTO;
        }
}

const char *kdev_kube_status_text(long status)
{
        switch (status) {
        case 300: return "Multiple Choices";
        case 301: return "Moved Permanently";
        case 302: return "Found";
        case 303: return "See Other";
        case 304: return "Not Modified";
        case 307: return "Temporary Redirect";
        case 308: return "Permanent Redirect";
        case 400: return "Bad Request";
        case 401: return "Unauthorized";
        case 403: return "Forbidden";
        case 404: return "Not Found";
        case 405: return "Method Not Allowed";
        case 409: return "Conflict";
        case 410: return "Gone";
        case 422: return "Unprocessable Entity";
        case 429: return "Too Many Requests";
        case 500: return "Internal Server Error";
        case 502: return "Bad Gateway";
        case 503: return "Service Unavailable";
        case 504: return "Gateway Timeout";
        default: return "";
        }
}

/* Message for a non-2xx answer: the Status message (and reason) when the body
 * is a Status, else the start of the body with control characters removed. */
static void status_message(const struct buf *b, char *msg, size_t size, char *reason,
                           size_t rsize)
{
        msg[0] = '\0';
        reason[0] = '\0';
        if (!b->data || b->len == 0)
                return;
        json_t *j = json_loadb(b->data, b->len, 0, NULL);
        if (j && json_is_object(j)) {
                const char *m = json_string_value(json_object_get(j, "message"));
                const char *r = json_string_value(json_object_get(j, "reason"));
                if (m)
                        snprintf(msg, size, "%s", m);
                if (r)
                        snprintf(reason, rsize, "%s", r);
        }
        json_decref(j);
        if (msg[0])
                return;
        size_t n = 0;
        for (size_t i = 0; i < b->len && n + 1 < size && n < 200; i++) {
                unsigned char c = (unsigned char)b->data[i];
                msg[n++] = (c < 0x20 || c == 0x7f) ? ' ' : (char)c;
        }
        msg[n] = '\0';
}

/* " (after N attempts)", and ", stopped by the deadline" when |deadline|. */
static void append_attempts(struct kdev_err *err, unsigned attempt, bool deadline)
{
        if (!err || (attempt <= 1 && !deadline))
                return;
        size_t l = strlen(err->msg);
        if (attempt <= 1)
                snprintf(err->msg + l, sizeof(err->msg) - l, " (stopped by the deadline)");
        else
                snprintf(err->msg + l, sizeof(err->msg) - l, " (after %u attempts%s)", attempt,
                         deadline ? ", stopped by the deadline" : "");
}

/* Whether a retry after |backoff| ms would start past this thread's deadline
 * (or the work was cancelled meanwhile). */
static bool no_time_for(unsigned backoff)
{
        return tl_cancel && tl_cancel->deadline_ms &&
               now_ms() + backoff >= tl_cancel->deadline_ms;
}

/* One try. Returns the CURLcode; *status gets the HTTP status (0: none). */
static CURLcode perform(struct kdev_kube *k, const char *method, const char *url,
                        const char *body, size_t body_len, struct buf *resp, long *status)
{
        const struct kdev_curl_api *lc = k->lc;
        CURL *c = k->curl;
        lc->easy_reset(c);
        struct curl_slist *hdrs = NULL, *t;
        char auth[16400];
        CURLcode rc = CURLE_OUT_OF_MEMORY;
        k->errbuf[0] = '\0';
        k->retry_after = 0;
        k->location[0] = '\0';
        k->got_header = false;
        *status = 0;
        if (!(t = lc->slist_append(hdrs, "Accept: application/json")))
                goto out;
        hdrs = t;
        if (body) {
                if (!(t = lc->slist_append(hdrs, "Content-Type: application/json")))
                        goto out;
                hdrs = t;
        }
        if (k->cfg.token) {
                snprintf(auth, sizeof(auth), "Authorization: Bearer %s", k->cfg.token);
                t = lc->slist_append(hdrs, auth);
                explicit_bzero(auth, sizeof(auth));
                if (!t)
                        goto out;
                hdrs = t;
        }
        lc->easy_setopt(c, CURLOPT_URL, url);
        lc->easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http,https");
        lc->easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
        lc->easy_setopt(c, CURLOPT_ERRORBUFFER, k->errbuf);
        lc->easy_setopt(c, CURLOPT_USERAGENT, k->user_agent);
        lc->easy_setopt(c, CURLOPT_HTTPHEADER, hdrs);
        uint64_t timeout = k->timeout_ms;
        if (tl_cancel && tl_cancel->deadline_ms) {
                uint64_t now = now_ms();
                uint64_t left = tl_cancel->deadline_ms > now ? tl_cancel->deadline_ms - now : 1;
                if (left < timeout)
                        timeout = left;
        }
        lc->easy_setopt(c, CURLOPT_TIMEOUT_MS, (long)timeout);
        lc->easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS, (long)k->connect_timeout_ms);
        lc->easy_setopt(c, CURLOPT_WRITEFUNCTION, on_body);
        lc->easy_setopt(c, CURLOPT_WRITEDATA, resp);
        lc->easy_setopt(c, CURLOPT_HEADERFUNCTION, on_header);
        lc->easy_setopt(c, CURLOPT_HEADERDATA, k);
        lc->easy_setopt(c, CURLOPT_NOPROGRESS, 0L);
        lc->easy_setopt(c, CURLOPT_XFERINFOFUNCTION, on_progress);
        lc->easy_setopt(c, CURLOPT_XFERINFODATA, k);
        if (strcmp(method, "GET") == 0) {
                lc->easy_setopt(c, CURLOPT_HTTPGET, 1L);
        } else {
                lc->easy_setopt(c, CURLOPT_CUSTOMREQUEST, method);
                if (body) {
                        lc->easy_setopt(c, CURLOPT_POSTFIELDS, body);
                        lc->easy_setopt(c, CURLOPT_POSTFIELDSIZE_LARGE,
                                        (curl_off_t)body_len);
                }
        }
        if (k->cfg.ca_pem) {
                struct curl_blob blob = {.data = k->cfg.ca_pem, .len = k->cfg.ca_len,
                                         .flags = CURL_BLOB_NOCOPY};
                lc->easy_setopt(c, CURLOPT_CAINFO_BLOB, &blob);
        }
        if (k->cfg.cert_pem && k->cfg.key_pem) {
                struct curl_blob cert = {.data = k->cfg.cert_pem, .len = k->cfg.cert_len,
                                         .flags = CURL_BLOB_NOCOPY};
                struct curl_blob key = {.data = k->cfg.key_pem, .len = k->cfg.key_len,
                                        .flags = CURL_BLOB_NOCOPY};
                lc->easy_setopt(c, CURLOPT_SSLCERT_BLOB, &cert);
                lc->easy_setopt(c, CURLOPT_SSLCERTTYPE, "PEM");
                lc->easy_setopt(c, CURLOPT_SSLKEY_BLOB, &key);
                lc->easy_setopt(c, CURLOPT_SSLKEYTYPE, "PEM");
        }
        if (k->cfg.insecure) {
                lc->easy_setopt(c, CURLOPT_SSL_VERIFYPEER, 0L);
                lc->easy_setopt(c, CURLOPT_SSL_VERIFYHOST, 0L);
        }
        rc = lc->easy_perform(c);
        if (rc == CURLE_OK || rc == CURLE_WRITE_ERROR)
                lc->easy_getinfo(c, CURLINFO_RESPONSE_CODE, status);
out:
        lc->slist_free_all(hdrs);
        return rc;
}

int kdev_kube_request(struct kdev_kube *k, const char *method, const char *path,
                      const json_t *body, json_t **out, struct kdev_err *err)
{
        if (out)
                *out = NULL;
        k->last_status = 0;
        k->last_attempts = 0;
        if (!path || path[0] != '/')
                return kdev_err_set(err, EINVAL, "%s %s: the path must start with '/'", method,
                                    path ? path : "(null)");
        char *payload = NULL;
        size_t payload_len = 0;
        if (body) {
                payload = json_dumps(body, JSON_COMPACT);
                if (!payload)
                        return kdev_err_set(err, ENOMEM, "%s %s: cannot serialise the body",
                                            method, path);
                payload_len = strlen(payload);
        }
        char *url = NULL;
        if (asprintf(&url, "%s%s", k->cfg.server, path) < 0) {
                free(payload);
                return kdev_err_set(err, ENOMEM, "out of memory");
        }
        struct buf resp = {0};
        int rc = 0;
        for (unsigned attempt = 1;; attempt++) {
                if (atomic_load(&k->aborted) || cancel_fired(tl_cancel)) {
                        rc = kdev_err_set(err, ECANCELED, "%s %s: cancelled", method, path);
                        break;
                }
                if (past_deadline(tl_cancel)) {
                        rc = kdev_err_set(err, ETIMEDOUT, "%s %s: deadline exceeded", method,
                                          path);
                        break;
                }
                reload_token(k);
                resp.len = 0;
                resp.too_big = false;
                if (resp.data)
                        resp.data[0] = '\0';
                long status = 0;
                CURLcode cc = perform(k, method, url, payload, payload_len, &resp, &status);
                k->last_attempts = attempt;
                k->last_status = status;
                bool again = attempt < k->attempts;
                bool late = false; /* the deadline stops the retries */
                if (cc == CURLE_ABORTED_BY_CALLBACK &&
                    (atomic_load(&k->aborted) || cancel_fired(tl_cancel))) {
                        rc = kdev_err_set(err, ECANCELED, "%s %s: cancelled", method, path);
                        break;
                }
                if (cc == CURLE_ABORTED_BY_CALLBACK && past_deadline(tl_cancel)) {
                        rc = kdev_err_set(err, ETIMEDOUT, "%s %s: deadline exceeded", method,
                                          path);
                        break;
                }
                if (cc != CURLE_OK) {
                        if (resp.too_big) {
                                rc = kdev_err_set(err, EFBIG,
                                                  "%s %s: the response is larger than %d bytes",
                                                  method, path, KDEV_KUBE_BODY_MAX);
                                break;
                        }
                        if (again && retryable_curl(cc)) {
                                unsigned b = kdev_kube_backoff_ms(k, attempt, 0);
                                late = no_time_for(b) || past_deadline(tl_cancel);
                                if (!late) {
                                        sleep_ms(k, b);
                                        continue;
                                }
                        }
                        if (cc == CURLE_OPERATION_TIMEDOUT && past_deadline(tl_cancel))
                                late = true;
                        if (header_too_large(cc) && k->got_header && resp.len == 0 &&
                            !k->errbuf[0]) {
                                /* libcurl's answer to a header line over
                                 * CURL_MAX_HTTP_HEADER (7.x: CURLE_OUT_OF_MEMORY
                                 * with no message; 8.6+: CURLE_TOO_LARGE) */
                                rc = kdev_err_set(err, EPROTO,
                                                  "%s %s: a response header from %s exceeds "
                                                  "%d KiB (curl's limit; libcurl says "
                                                  "\"%s\")",
                                                  method, url, k->cfg.server,
                                                  CURL_MAX_HTTP_HEADER / 1024,
                                                  k->lc->easy_strerror(cc));
                                break;
                        }
                        rc = kdev_err_set(err, kdev_kube_curl_errno((int)cc), "%s %s: %s%s%s",
                                          method, url, k->lc->easy_strerror(cc),
                                          k->errbuf[0] ? ": " : "", k->errbuf);
                        append_attempts(err, attempt, late);
                        break;
                }
                if (status >= 200 && status < 300) {
                        if (!out)
                                break;
                        json_error_t je;
                        json_t *j = resp.len ? json_loadb(resp.data, resp.len, 0, &je) : NULL;
                        if (!j) {
                                rc = kdev_err_set(err, EPROTO,
                                                  "%s %s: %ld: the response is not a JSON "
                                                  "object",
                                                  method, path, status);
                                break;
                        }
                        rc = kdev_json_expect(j, JSON_OBJECT, err, "%s %s: %ld: response body",
                                              method, path, status);
                        if (rc < 0) {
                                json_decref(j);
                                break;
                        }
                        *out = j;
                        break;
                }
                if (again && retryable_status(status)) {
                        unsigned b = kdev_kube_backoff_ms(k, attempt, k->retry_after);
                        late = no_time_for(b);
                        if (!late) {
                                sleep_ms(k, b);
                                continue;
                        }
                }
                if (status >= 300 && status < 400) {
                        /* redirects are not followed (CURLOPT_FOLLOWLOCATION
                         * off): a token must not travel to another host */
                        const char *text = kdev_kube_status_text(status);
                        if (k->location[0])
                                rc = kdev_err_set(err, EPROTO,
                                                  "%s %s: %ld%s%s: redirect to %s not followed "
                                                  "(kdev does not follow redirects; point the "
                                                  "server at the API server itself)",
                                                  method, url, status, text[0] ? " " : "", text,
                                                  k->location);
                        else
                                rc = kdev_err_set(err, EPROTO,
                                                  "%s %s: %ld%s%s: redirect without a Location "
                                                  "header, not followed",
                                                  method, url, status, text[0] ? " " : "", text);
                        append_attempts(err, attempt, late);
                        break;
                }
                char msg[600], reason[64];
                status_message(&resp, msg, sizeof(msg), reason, sizeof(reason));
                const char *text = kdev_kube_status_text(status);
                /* credentials problems name the server, like connection errors */
                bool auth = status == 401 || status == 403;
                rc = kdev_err_set(err, kdev_kube_status_errno(status, reason), "%s %s: %ld%s%s%s%s",
                                  method, auth ? url : path, status, text[0] ? " " : "", text,
                                  msg[0] ? ": " : "", msg);
                append_attempts(err, attempt, late);
                break;
        }
        free(resp.data);
        free(url);
        free(payload);
        return rc;
}

int kdev_kube_watch(struct kdev_kube *k, const char *path, unsigned timeout_s,
                    kdev_kube_watch_fn fn, void *arg, struct kdev_err *err)
{
        k->last_status = 0;
        k->last_attempts = 1;
        if (!path || path[0] != '/')
                return kdev_err_set(err, EINVAL, "GET %s: the path must start with '/'",
                                    path ? path : "(null)");
        if (atomic_load(&k->aborted) || cancel_fired(tl_cancel))
                return kdev_err_set(err, ECANCELED, "GET %s: cancelled", path);
        char *url = NULL;
        if (asprintf(&url, "%s%s", k->cfg.server, path) < 0)
                return kdev_err_set(err, ENOMEM, "out of memory");
        reload_token(k);
        struct buf resp = {.on_line = watch_line, .fn = fn, .fn_arg = arg, .lc = k->lc,
                           .curl = k->curl};
        long status = 0;
        /* the server ends the stream after timeoutSeconds: allow for it */
        unsigned saved = k->timeout_ms;
        k->timeout_ms = (timeout_s + 30) * 1000u;
        CURLcode cc = perform(k, "GET", url, NULL, 0, &resp, &status);
        k->timeout_ms = saved;
        k->last_status = status;
        int rc = 0;
        if (resp.ended) {
                rc = 0;
        } else if (cc == CURLE_ABORTED_BY_CALLBACK || atomic_load(&k->aborted)) {
                rc = kdev_err_set(err, ECANCELED, "GET %s: cancelled", path);
        } else if (resp.bad_line) {
                rc = kdev_err_set(err, EPROTO, "GET %s: %ld: a watch event is not a JSON object",
                                  path, status);
        } else if (cc != CURLE_OK) {
                if (resp.too_big)
                        rc = kdev_err_set(err, EFBIG, "GET %s: a watch event is larger than %d bytes",
                                          path, KDEV_KUBE_BODY_MAX);
                else
                        rc = kdev_err_set(err, kdev_kube_curl_errno((int)cc), "GET %s: %s%s%s", url,
                                          k->lc->easy_strerror(cc), k->errbuf[0] ? ": " : "",
                                          k->errbuf);
        } else if (status < 200 || status >= 300) {
                /* the error body is one JSON object (a Status), maybe not
                 * ended by a newline: it is what the buffer still holds */
                struct buf b = {.data = resp.data, .len = resp.len};
                char msg[600], reason[64];
                status_message(&b, msg, sizeof(msg), reason, sizeof(reason));
                const char *text = kdev_kube_status_text(status);
                rc = kdev_err_set(err, kdev_kube_status_errno(status, reason), "GET %s: %ld%s%s%s%s",
                                  path, status, text[0] ? " " : "", text, msg[0] ? ": " : "", msg);
        } else if (resp.len > 0 && watch_line(&resp, resp.data, resp.len) != 0 && resp.bad_line) {
                rc = kdev_err_set(err, EPROTO, "GET %s: %ld: a watch event is not a JSON object",
                                  path, status);
        }
        free(resp.data);
        free(url);
        return rc;
}
