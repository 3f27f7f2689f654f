/* The Prometheus text format reader. See promtext.h. The input is copied
 * once; names are terminated and label values unescaped in place (an
 * unescaped value is never longer than its quoted form). */
#include "kubelet/promtext.h"

#include <errno.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct parser {
        struct kdev_prom_text *t;
        size_t cap_samples, cap_labels;
        unsigned line;
        struct kdev_err *err;
};

static int bad(struct parser *p, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static int bad(struct parser *p, const char *fmt, ...)
{
        char msg[512];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(msg, sizeof(msg), fmt, ap);
        va_end(ap);
        return kdev_err_set(p->err, EINVAL, "line %u: %s", p->line, msg);
}

static bool is_blank(char c)
{
        return c == ' ' || c == '\t';
}

static bool is_name_start(char c, bool colon)
{
        return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || (colon && c == ':');
}

static bool is_name_char(char c, bool colon)
{
        return is_name_start(c, colon) || (c >= '0' && c <= '9');
}

static char *skip_blanks(char *s)
{
        while (is_blank(*s))
                s++;
        return s;
}

/* A printable form of the character at |s| for messages. */
static const char *show(char c, char buf[8])
{
        if (c == '\0')
                return "end of line";
        if ((unsigned char)c < 0x20 || (unsigned char)c >= 0x7f)
                snprintf(buf, 8, "\\x%02x", (unsigned char)c);
        else
                snprintf(buf, 8, "'%c'", c);
        return buf;
}

static int grow(void **v, size_t *cap, size_t need, size_t size)
{
        if (need <= *cap)
                return 0;
        size_t n = *cap ? *cap * 2 : 64;
        void *nv = realloc(*v, n * size);
        if (!nv)
                return -ENOMEM;
        *v = nv;
        *cap = n;
        return 0;
}

/* Reads the quoted value at |s| (after the opening quote) in place; sets
 * |*end| past the closing quote. */
static int label_value(struct parser *p, const char *label, char *s, char **end)
{
        char *w = s;
        for (;;) {
                char c = *s++;
                if (c == '\0')
                        return bad(p, "label %s: unterminated value (no closing \")", label);
                if (c == '"')
                        break;
                if (c == '\\') {
                        char e = *s++, b[8];
                        if (e == '\\' || e == '"')
                                c = e;
                        else if (e == 'n')
                                c = '\n';
                        else if (e == '\0')
                                return bad(p, "label %s: unterminated value (no closing \")",
                                           label);
                        else
                                return bad(p, "label %s: invalid escape: backslash before %s "
                                           "(want \\\\, \\\" or \\n)", label, show(e, b));
                }
                *w++ = c;
        }
        *w = '\0';
        *end = s;
        return 0;
}

static int labels(struct parser *p, const char *metric, char *s, size_t label0, char **end)
{
        struct kdev_prom_text *t = p->t;
        char b[8];
        for (;;) {
                s = skip_blanks(s);
                if (*s == '}')
                        break;
                if (!is_name_start(*s, false))
                        return bad(p, "%s: expected a label name or '}', found %s", metric,
                                   show(*s, b));
                char *name = s;
                while (is_name_char(*s, false))
                        s++;
                char *name_end = s;
                s = skip_blanks(s);
                if (*s != '=')
                        return bad(p, "%s: expected '=' after a label name, found %s", metric,
                                   show(*s, b));
                *name_end = '\0';
                s = skip_blanks(s + 1);
                if (*s != '"')
                        return bad(p, "label %s: expected a quoted value, found %s", name,
                                   show(*s, b));
                for (size_t i = label0; i < t->n_labels; i++)
                        if (strcmp(t->labels[i].name, name) == 0)
                                return bad(p, "%s: label %s given twice", metric, name);
                char *value = s + 1;
                int rc = label_value(p, name, value, &s);
                if (rc < 0)
                        return rc;
                if (grow((void **)&t->labels, &p->cap_labels, t->n_labels + 1,
                         sizeof(*t->labels)) < 0)
                        return kdev_err_set(p->err, ENOMEM, "out of memory");
                t->labels[t->n_labels++] = (struct kdev_prom_label){name, value};
                s = skip_blanks(s);
                if (*s == ',') {
                        s++;
                        continue;
                }
                if (*s != '}')
                        return bad(p, "label %s: expected ',' or '}' after the value, found %s",
                                   name, show(*s, b));
                break;
        }
        *end = s + 1;
        return 0;
}

/* One line, NUL-terminated in place. */
static int sample_line(struct parser *p, char *s)
{
        struct kdev_prom_text *t = p->t;
        char b[8];
        s = skip_blanks(s);
        if (*s == '\0' || *s == '#')
                return 0;
        if (!is_name_start(*s, true))
                return bad(p, "expected a metric name, found %s", show(*s, b));
        char *name = s;
        while (is_name_char(*s, true))
                s++;
        size_t label0 = t->n_labels;
        char c = *s;
        *s++ = '\0';
        if (c == '{') {
                int rc = labels(p, name, s, label0, &s);
                if (rc < 0)
                        return rc;
        } else if (c == '\0') {
                return bad(p, "%s: no value", name);
        } else if (!is_blank(c)) {
                return bad(p, "%s: unexpected %s after the metric name", name, show(c, b));
        }
        s = skip_blanks(s);
        char *tok = s;
        while (*s && !is_blank(*s))
                s++;
        if (s == tok)
                return bad(p, "%s: no value", name);
        char *tok_end = s;
        s = skip_blanks(s);
        *tok_end = '\0';
        char *end;
        double v = strtod(tok, &end);
        if (*end || (unsigned char)*tok <= ' ')
                return bad(p, "%s: invalid value \"%.40s\"", name, tok);
        if (*s) { /* the timestamp: an integer, ignored */
                char *ts = s + (*s == '-');
                while (*s && !is_blank(*s))
                        s++;
                bool digits = ts < s;
                for (char *q = ts; q < s; q++)
                        digits = digits && *q >= '0' && *q <= '9';
                if (!digits)
                        return bad(p, "%s: invalid timestamp \"%.*s\"", name,
                                   (int)(s - ts < 40 ? s - ts : 40), ts);
                s = skip_blanks(s);
                if (*s)
                        return bad(p, "%s: unexpected text after the timestamp", name);
        }
        if (grow((void **)&t->samples, &p->cap_samples, t->n_samples + 1, sizeof(*t->samples)) < 0)
                return kdev_err_set(p->err, ENOMEM, "out of memory");
        t->samples[t->n_samples++] = (struct kdev_prom_sample){
                name, label0, t->n_labels - label0, v, p->line};
        return 0;
}

int kdev_prom_parse(const char *text, size_t len, struct kdev_prom_text *out,
                    struct kdev_err *err)
{
        memset(out, 0, sizeof(*out));
        struct parser p = {.t = out, .err = err};
        if (!(out->buf = malloc(len + 1)))
                return kdev_err_set(err, ENOMEM, "out of memory");
        memcpy(out->buf, text, len);
        out->buf[len] = '\0';
        int rc = 0;
        for (size_t pos = 0; rc == 0 && pos < len;) {
                p.line++;
                char *line = out->buf + pos;
                char *nl = memchr(line, '\n', len - pos);
                size_t n = nl ? (size_t)(nl - line) : len - pos;
                if (n > KDEV_PROM_MAX_LINE)
                        rc = bad(&p, "longer than %d bytes", KDEV_PROM_MAX_LINE);
                else if (!nl)
                        rc = bad(&p, "truncated (the text does not end with a newline)");
                else if (memchr(line, '\0', n))
                        rc = bad(&p, "NUL byte");
                else {
                        *nl = '\0';
                        rc = sample_line(&p, line);
                }
                pos += n + 1;
        }
        if (rc < 0)
                kdev_prom_text_clear(out);
        return rc;
}

const char *kdev_prom_label(const struct kdev_prom_text *t, const struct kdev_prom_sample *s,
                            const char *name)
{
        for (size_t i = 0; i < s->n_labels; i++)
                if (strcmp(t->labels[s->label0 + i].name, name) == 0)
                        return t->labels[s->label0 + i].value;
        return NULL;
}

void kdev_prom_text_clear(struct kdev_prom_text *t)
{
        if (!t)
                return;
        free(t->buf);
        free(t->samples);
        free(t->labels);
        memset(t, 0, sizeof(*t));
}
