#include "common/log.h"

#include <errno.h>
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

void kdev_log(enum kdev_log_level level, const char *msg, ...)
{
        if (level < g_min || level > KDEV_LOG_ERROR)
                return;
        struct timespec ts;
        struct tm tm;
        char stamp[40];
        if (!g_now || g_now(&ts) < 0)
                clock_gettime(CLOCK_REALTIME, &ts);
        gmtime_r(&ts.tv_sec, &tm);
        size_t n = strftime(stamp, sizeof(stamp), "%Y-%m-%dT%H:%M:%S", &tm);
        snprintf(stamp + n, sizeof(stamp) - n, ".%03ldZ", ts.tv_nsec / 1000000);

        /* Build the line in memory so concurrent writers never interleave. */
        char *buf = NULL;
        size_t len = 0;
        FILE *f = open_memstream(&buf, &len);
        if (!f)
                return;
        va_list ap;
        va_start(ap, msg);
        if (g_json) {
                fprintf(f, "{\"ts\":\"%s\",\"level\":\"%s\",\"msg\":", stamp, level_names[level]);
                put_json_string(f, msg);
                for (const char *k = va_arg(ap, const char *); k; k = va_arg(ap, const char *)) {
                        const char *v = va_arg(ap, const char *);
                        fputc(',', f);
                        put_json_string(f, k);
                        fputc(':', f);
                        put_json_string(f, v ? v : "");
                }
                fputs("}\n", f);
        } else {
                fprintf(f, "ts=%s level=%s msg=", stamp, level_names[level]);
                put_json_string(f, msg);
                for (const char *k = va_arg(ap, const char *); k; k = va_arg(ap, const char *)) {
                        const char *v = va_arg(ap, const char *);
                        fprintf(f, " %s=", k);
                        put_text_value(f, v ? v : "");
                }
                fputc('\n', f);
        }
        va_end(ap);
        fclose(f);
        fwrite(buf, 1, len, stderr);
        fflush(stderr);
        free(buf);
}
