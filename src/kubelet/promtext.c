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

#define LETTERS "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ_"
#define DIGITS "0123456789"

struct parser {
        struct kdev_prom_text *t;
        size_t cap_samples, cap_labels;
        unsigned line;
        struct kdev_err *err;
        char shown[16];
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

/* |c| for a message: 'x', \x01 or "end of line". */
static const char *show(struct parser *p, char c)
{
        unsigned char u = (unsigned char)c;
        if (c == '\0')
                return "end of line";
        snprintf(p->shown, sizeof(p->shown), u < 0x20 || u >= 0x7f ? "\\x%02x" : "'%c'", u);
        return p->shown;
}

static char *skip_blanks(char *s)
{
        return s + strspn(s, " \t");
}

/* Makes room for one more element of |size| in |*v| (|n| used, |*cap|). */
static int room(void *v, size_t n, size_t *cap, size_t size)
{
        void **arr = v, *nv;
        if (n < *cap)
                return 0;
        if (!(nv = realloc(*arr, (*cap ? *cap * 2 : 64) * size)))
                return -ENOMEM;
        *arr = nv;
        *cap = *cap ? *cap * 2 : 64;
        return 0;
}

/* Reads the quoted value at |s| (after the opening quote) in place; sets
 * |*end| past the closing quote. */
static int label_value(struct parser *p, const char *label, char *s, char **end)
{
        char *w = s;
        for (char c; (c = *s++) != '"'; *w++ = c) {
                if (c == '\\') {
                        char e = *s++;
                        c = e == 'n' ? '\n' : e;
                        if (e != '\\' && e != '"' && e != 'n' && e != '\0')
                                return bad(p, "label %s: invalid escape: backslash before %s "
                                           "(want \\\\, \\\" or \\n)", label, show(p, e));
                }
                if (c == '\0')
                        return bad(p, "label %s: unterminated value (no closing \")", label);
        }
        *w = '\0';
        *end = s;
        return 0;
}

static int labels(struct parser *p, const char *metric, char *s, size_t label0, char **end)
{
        struct kdev_prom_text *t = p->t;
        for (s = skip_blanks(s); *s != '}'; s = skip_blanks(s)) {
                if (!*s || !strchr(LETTERS, *s))
                        return bad(p, "%s: expected a label name or '}', found %s", metric,
                                   show(p, *s));
                char *name = s, *name_end = s + strspn(s, LETTERS DIGITS);
                s = skip_blanks(name_end);
                if (*s != '=')
                        return bad(p, "%s: expected '=' after a label name, found %s", metric,
                                   show(p, *s));
                *name_end = '\0';
                s = skip_blanks(s + 1);
                if (*s != '"')
                        return bad(p, "label %s: expected a quoted value, found %s", name,
                                   show(p, *s));
                for (size_t i = label0; i < t->n_labels; i++)
                        if (strcmp(t->labels[i].name, name) == 0)
                                return bad(p, "%s: label %s given twice", metric, name);
                char *value = s + 1;
                int rc = label_value(p, name, value, &s);
                if (rc < 0)
                        return rc;
                if (room(&t->labels, t->n_labels, &p->cap_labels, sizeof(*t->labels)) < 0)
                        return kdev_err_set(p->err, ENOMEM, "out of memory");
                t->labels[t->n_labels++] = (struct kdev_prom_label){name, value};
                s = skip_blanks(s);
                if (*s == '}')
                        break;
                if (*s++ != ',')
                        return bad(p, "label %s: expected ',' or '}' after the value, found %s",
                                   name, show(p, s[-1]));
        }
        *end = s + 1;
        return 0;
}

/* One line, NUL-terminated in place. */
static int sample_line(struct parser *p, char *s)
{
        struct kdev_prom_text *t = p->t;
        s = skip_blanks(s);
        if (*s == '\0' || *s == '#')
                return 0;
        if (!strchr(LETTERS ":", *s))
                return bad(p, "expected a metric name, found %s", show(p, *s));
        char *name = s;
        s += strspn(s, LETTERS DIGITS ":");
        size_t label0 = t->n_labels;
        char c = *s;
        *s++ = '\0';
        if (c == '\0')
                return bad(p, "%s: no value", name);
        if (c == '{') {
                int rc = labels(p, name, s, label0, &s);
                if (rc < 0)
                        return rc;
        } else if (c != ' ' && c != '\t') {
                return bad(p, "%s: unexpected %s after the metric name", name, show(p, c));
        }
        char *tok = skip_blanks(s), *tok_end = tok + strcspn(tok, " \t"), *end;
        if (tok == tok_end)
                return bad(p, "%s: no value", name);
        s = skip_blanks(tok_end);
        *tok_end = '\0';
        double v = strtod(tok, &end);
        if (*end || (unsigned char)*tok <= ' ')
                return bad(p, "%s: invalid value \"%.40s\"", name, tok);
        if (*s) { /* the timestamp: an integer, ignored */
                char *ts = s + (*s == '-');
                size_t n = strcspn(ts, " \t");
                if (n == 0 || strspn(ts, DIGITS) != n)
                        return bad(p, "%s: invalid timestamp \"%.*s\"", name, (int)(n < 40 ? n : 40),
                                   ts);
                if (*skip_blanks(ts + n))
                        return bad(p, "%s: unexpected text after the timestamp", name);
        }
        if (room(&t->samples, t->n_samples, &p->cap_samples, sizeof(*t->samples)) < 0)
                return kdev_err_set(p->err, ENOMEM, "out of memory");
        t->samples[t->n_samples++] =
                (struct kdev_prom_sample){name, label0, t->n_labels - label0, v, p->line};
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
                char *line = out->buf + pos, *nl = memchr(line, '\n', len - pos);
                size_t n = nl ? (size_t)(nl - line) : len - pos;
                if (n > KDEV_PROM_MAX_LINE)
                        rc = bad(&p, "longer than %d bytes", KDEV_PROM_MAX_LINE);
                else if (!nl)
                        rc = bad(&p, "truncated (the text does not end with a newline)");
                else if (memchr(line, '\0', n))
                        rc = bad(&p, "NUL byte");
                else
                        *nl = '\0', rc = sample_line(&p, line);
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
