#include "common/log.h"

#include <errno.h>
#include <jansson.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <stdlib.h>
#include <time.h>

static enum kdev_log_level g_min = KDEV_LOG_INFO;
static bool g_json;
static int (*g_now)(struct timespec *ts);

static const char *const level_names[] = {"debug", "info", "warn", "error"};

void kdev_log_setup(enum kdev_log_level min, bool json)
{
        g_min = min;
        g_json = json;
}

int kdev_log_level_parse(const char *text, enum kdev_log_level *out)
{
        for (int i = 0; i < 4; i++) {
                if (strcmp(text, level_names[i]) == 0) {
                        *out = (enum kdev_log_level)i;
                        return 0;
                }
        }
        return -EINVAL;
}

int kdev_log_format_parse(const char *text, bool *json)
{
        if (strcmp(text, "text") == 0)
                *json = false;
        else if (strcmp(text, "json") == 0)
                *json = true;
        else
                return -EINVAL;
        return 0;
}

void kdev_log_set_clock(int (*now)(struct timespec *ts))
{
        g_now = now;
}

bool kdev_log_enabled(enum kdev_log_level level)
{
        return level >= g_min;
}

static void put_json_string(FILE *f, const char *s)
{
        fputc('"', f);
        for (; *s; s++) {
                unsigned char c = (unsigned char)*s;
                if (c == '"' || c == '\\')
                        fprintf(f, "\\%c", c);
                else if (c == '\n')
                        fputs("\\n", f);
                else if (c == '\t')
                        fputs("\\t", f);
                else if (c == '\r')
                        fputs("\\r", f);
                else if (c < 0x20 || c == 0x7f)
                        fprintf(f, "\\u%04x", c);
                else
                        fputc(c, f);
        }
        fputc('"', f);
}

/* Bare when non-empty and free of blanks, '"', '=', '\\' and control
 * characters; otherwise a JSON string. */
static void put_text_value(FILE *f, const char *s)
{
        bool bare = *s != '\0';
        for (const char *p = s; bare && *p; p++) {
                unsigned char c = (unsigned char)*p;
                if (c <= ' ' || c == 0x7f || c == '"' || c == '=' || c == '\\')
                        bare = false;
        }
        if (bare)
                fputs(s, f);
        else
                put_json_string(f, s);
}

/* A typed key (KDEV_LOG_INT() and friends): KDEV_LOG_TAG, a type letter,
 * the key. Returns the type letter ('s' for a plain key) and sets |*name| to
 * the key as printed. */
static char key_type(const char *key, const char **name)
{
        if (key[0] == KDEV_LOG_TAG[0] && key[1]) {
                *name = key + 2;
                return key[1];
        }
        *name = key;
        return 's';
}

/* Whether |s| is a JSON number (RFC 8259 section 6):
 * -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)? */
static bool json_number(const char *s)
{
        const char *p = s;
        if (*p == '-')
                p++;
        if (*p == '0')
                p++;
        else if (*p >= '1' && *p <= '9')
                while (*p >= '0' && *p <= '9')
                        p++;
        else
                return false;
        if (*p == '.') {
                p++;
                if (!(*p >= '0' && *p <= '9'))
                        return false;
                while (*p >= '0' && *p <= '9')
                        p++;
        }
        if (*p == 'e' || *p == 'E') {
                p++;
                if (*p == '+' || *p == '-')
                        p++;
                if (!(*p >= '0' && *p <= '9'))
                        return false;
                while (*p >= '0' && *p <= '9')
                        p++;
        }
        return *p == '\0';
}

/* Writes value |v| of type |type| in a JSON line: numbers, booleans and JSON
 * texts bare when they are valid, anything else as a string. */
static void put_json_value(FILE *f, char type, const char *v)
{
        switch (type) {
        case 'i':
        case 'u':
        case 'n':
                if (json_number(v)) {
                        fputs(v, f);
                        return;
                }
                break;
        case 'b':
                if (strcmp(v, "true") == 0 || strcmp(v, "false") == 0) {
                        fputs(v, f);
                        return;
                }
                break;
        case 'j': {
                json_t *j = json_loads(v, JSON_DECODE_ANY, NULL);
                if (j) {
                        json_decref(j);
                        fputs(v, f);
                        return;
                }
                break;
        }
        default:
                break;
        }
        put_json_string(f, v);
}

/* Prints one line: |kv| holds |n| alternating keys (typed or plain) and
 * values (as text, never NULL). */
static void emit(enum kdev_log_level level, const char *msg, const char *const *kv, size_t n)
{
        struct timespec ts;
        struct tm tm;
        char stamp[40];
        if (!g_now || g_now(&ts) < 0)
                clock_gettime(CLOCK_REALTIME, &ts);
        gmtime_r(&ts.tv_sec, &tm);
        size_t sl = strftime(stamp, sizeof(stamp), "%Y-%m-%dT%H:%M:%S", &tm);
        snprintf(stamp + sl, sizeof(stamp) - sl, ".%03ldZ", ts.tv_nsec / 1000000);

        /* Build the line in memory so concurrent writers never interleave. */
        char *buf = NULL;
        size_t len = 0;
        FILE *f = open_memstream(&buf, &len);
        if (!f)
                return;
        if (g_json) {
                fprintf(f, "{\"ts\":\"%s\",\"level\":\"%s\",\"msg\":", stamp, level_names[level]);
                put_json_string(f, msg);
                for (size_t i = 0; i + 1 < n; i += 2) {
                        const char *name;
                        char type = key_type(kv[i], &name);
                        fputc(',', f);
                        put_json_string(f, name);
                        fputc(':', f);
                        put_json_value(f, type, kv[i + 1]);
                }
                fputs("}\n", f);
        } else {
                fprintf(f, "ts=%s level=%s msg=", stamp, level_names[level]);
                put_json_string(f, msg);
                for (size_t i = 0; i + 1 < n; i += 2) {
                        const char *name;
                        key_type(kv[i], &name);
                        fprintf(f, " %s=", name);
                        put_text_value(f, kv[i + 1]);
                }
                fputc('\n', f);
        }
        fclose(f);
        fwrite(buf, 1, len, stderr);
        fflush(stderr);
        free(buf);
}

#define MAX_PAIRS 32

/* Text of the typed values of one call (KDEV_LOG_INT(), _UINT(), _BOOL()). */
struct typed_text {
        char s[MAX_PAIRS][24];
};

/* Collects the pairs of |ap| into |kv| (at most MAX_PAIRS; more are read
 * and dropped), the integers and booleans formatted into |tt|. Returns the
 * number of strings. A NULL value is "" (for KDEV_LOG_JSON(): "null"). */
static size_t collect(va_list ap, const char **kv, struct typed_text *tt)
{
        size_t n = 0;
        for (const char *k = va_arg(ap, const char *); k; k = va_arg(ap, const char *)) {
                const char *name;
                char type = key_type(k, &name);
                (void)name;
                char *buf = n < 2 * MAX_PAIRS ? tt->s[n / 2] : NULL;
                const char *v;
                if (type == 'i') {
                        long long x = va_arg(ap, long long);
                        if (buf)
                                snprintf(buf, sizeof(tt->s[0]), "%lld", x);
                        v = buf;
                } else if (type == 'u') {
                        unsigned long long x = va_arg(ap, unsigned long long);
                        if (buf)
                                snprintf(buf, sizeof(tt->s[0]), "%llu", x);
                        v = buf;
                } else if (type == 'b') {
                        v = va_arg(ap, int) ? "true" : "false";
                } else {
                        v = va_arg(ap, const char *);
                        if (!v)
                                v = type == 'j' ? "null" : "";
                }
                if (n < 2 * MAX_PAIRS) {
                        kv[n++] = k;
                        kv[n++] = v;
                }
        }
        return n;
}

void kdev_log(enum kdev_log_level level, const char *msg, ...)
{
        if (level < g_min || level > KDEV_LOG_ERROR)
                return;
        const char *kv[2 * MAX_PAIRS];
        struct typed_text tt;
        va_list ap;
        va_start(ap, msg);
        size_t n = collect(ap, kv, &tt);
        va_end(ap);
        emit(level, msg, kv, n);
}

/* --- limiter ---------------------------------------------------------------- */

struct limit_entry {
        enum kdev_log_level level;
        char **strs;          /* msg, then the pairs */
        size_t n;             /* strings in strs */
        uint64_t start;       /* window opened, kdev_log_now_ms() */
        unsigned long long counted;
};

struct kdev_log_limiter {
        pthread_mutex_t mu;
        uint64_t window;
        struct limit_entry e[KDEV_LOG_LIMITER_KEYS];
        size_t n;
};

uint64_t kdev_log_now_ms(void)
{
        struct timespec ts;
        if (!g_now || g_now(&ts) < 0)
                clock_gettime(CLOCK_MONOTONIC, &ts);
        return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

struct kdev_log_limiter *kdev_log_limiter_new(uint64_t window_ms)
{
        struct kdev_log_limiter *l = calloc(1, sizeof(*l));
        if (!l)
                return NULL;
        pthread_mutex_init(&l->mu, NULL);
        l->window = window_ms ? window_ms : KDEV_LOG_REPEAT_WINDOW_MS;
        return l;
}

static void entry_clear(struct limit_entry *e)
{
        for (size_t i = 0; i < e->n; i++)
                free(e->strs[i]);
        free(e->strs);
        memset(e, 0, sizeof(*e));
}

/* Prints the repeat line of |e| for the window up to |now|. */
static void emit_repeat(const struct limit_entry *e, uint64_t now)
{
        char msg[1024], n[24], secs[40];
        uint64_t el = now > e->start ? now - e->start : 0;
        const char *kv[2 * MAX_PAIRS + 2];
        size_t k = 0;

        if (el % 1000 == 0)
                snprintf(secs, sizeof(secs), "%llu", (unsigned long long)(el / 1000));
        else
                snprintf(secs, sizeof(secs), "%llu.%03llu", (unsigned long long)(el / 1000),
                         (unsigned long long)(el % 1000));
        snprintf(msg, sizeof(msg), "%s, repeated %llu times in the last %s s", e->strs[0],
                 e->counted, secs);
        snprintf(n, sizeof(n), "%llu", e->counted);
        for (size_t i = 1; i < e->n; i++)
                kv[k++] = e->strs[i];
        kv[k++] = KDEV_LOG_TAG "u" "repeated";
        kv[k++] = n;
        if (e->level >= g_min)
                emit(e->level, msg, kv, k);
}

/* Ends the window of entry |i| at |now|: a repeat line when something was
 * counted (and a new window), else the entry is dropped. Returns whether it
 * is still there. */
static bool end_window(struct kdev_log_limiter *l, size_t i, uint64_t now)
{
        struct limit_entry *e = &l->e[i];
        if (e->counted > 0) {
                emit_repeat(e, now);
                e->counted = 0;
                e->start = now;
                return true;
        }
        entry_clear(e);
        l->e[i] = l->e[--l->n];
        memset(&l->e[l->n], 0, sizeof(l->e[l->n]));
        return false;
}

uint64_t kdev_log_limiter_flush(struct kdev_log_limiter *l, bool all)
{
        uint64_t next = 0;
        if (!l)
                return 0;
        pthread_mutex_lock(&l->mu);
        uint64_t now = kdev_log_now_ms();
        for (size_t i = 0; i < l->n;) {
                struct limit_entry *e = &l->e[i];
                if ((all || now - e->start >= l->window) && !end_window(l, i, now))
                        continue; /* slot i now holds another entry */
                if (!all) {
                        uint64_t left = l->e[i].start + l->window - now;
                        if (next == 0 || left < next)
                                next = left;
                }
                i++;
        }
        if (all) {
                /* windows reopened by the repeat lines are dropped at once */
                while (l->n > 0)
                        entry_clear(&l->e[--l->n]);
        }
        pthread_mutex_unlock(&l->mu);
        return next ? next : (l->n ? 1 : 0);
}

void kdev_log_limiter_free(struct kdev_log_limiter *l)
{
        if (!l)
                return;
        kdev_log_limiter_flush(l, true);
        pthread_mutex_destroy(&l->mu);
        free(l);
}

static bool same(const struct limit_entry *e, enum kdev_log_level level, const char *msg,
                 const char *const *kv, size_t n)
{
        if (e->level != level || e->n != n + 1 || strcmp(e->strs[0], msg) != 0)
                return false;
        for (size_t i = 0; i < n; i++)
                if (strcmp(e->strs[i + 1], kv[i]) != 0)
                        return false;
        return true;
}

bool kdev_log_limited(struct kdev_log_limiter *l, unsigned count, enum kdev_log_level level,
                      const char *msg, ...)
{
        if (level < g_min || level > KDEV_LOG_ERROR)
                return false;
        const char *kv[2 * MAX_PAIRS];
        struct typed_text tt;
        va_list ap;
        va_start(ap, msg);
        size_t n = collect(ap, kv, &tt);
        va_end(ap);
        if (count == 0)
                count = 1;
        if (!l) {
                emit(level, msg, kv, n);
                return true;
        }
        pthread_mutex_lock(&l->mu);
        uint64_t now = kdev_log_now_ms();
        size_t i;
        for (i = 0; i < l->n; i++)
                if (same(&l->e[i], level, msg, kv, n))
                        break;
        if (i < l->n && now - l->e[i].start >= l->window && !end_window(l, i, now))
                i = l->n; /* forgotten: printed again below */
        if (i < l->n) {
                l->e[i].counted += count;
                pthread_mutex_unlock(&l->mu);
                return false;
        }
        /* a new event: printed; tracked when there is room (expired windows
         * make room first) */
        for (size_t j = 0; l->n == KDEV_LOG_LIMITER_KEYS && j < l->n;) {
                if (now - l->e[j].start >= l->window && !end_window(l, j, now))
                        continue;
                j++;
        }
        emit(level, msg, kv, n);
        if (l->n < KDEV_LOG_LIMITER_KEYS) {
                struct limit_entry *e = &l->e[l->n];
                e->strs = calloc(n + 1, sizeof(*e->strs));
                bool ok = e->strs != NULL;
                for (size_t k = 0; ok && k <= n; k++) {
                        e->strs[k] = strdup(k == 0 ? msg : kv[k - 1]);
                        ok = e->strs[k] != NULL;
                        e->n = k + 1;
                }
                if (ok) {
                        e->level = level;
                        e->start = now;
                        e->counted = count - 1;
                        l->n++;
                } else {
                        entry_clear(e); /* out of memory: not tracked */
                }
        }
        pthread_mutex_unlock(&l->mu);
        return true;
}
