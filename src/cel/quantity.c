/* Kubernetes quantities and semantic versions for the CEL evaluator
 * (cel.h): apimachinery resource.ParseQuantity's grammar and exact
 * comparison, blang/semver's strict parser and precedence (the types
 * behind k8s.io/apiserver pkg/cel/quantity.go and semver.go). */
#include <errno.h>
#include <string.h>

#include "cel/cel_internal.h"

#define QMAX_DIGITS 36
#define QMAX_EXP 60

static const char QFORMAT[] =
        "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'";

static int is_digit(char c)
{
        return c >= '0' && c <= '9';
}

static void qnormalize(struct kdev_cel_quantity *q)
{
        if (q->mantissa == 0) {
                q->exponent = 0;
                return;
        }
        while (q->mantissa % 10 == 0) {
                q->mantissa /= 10;
                q->exponent++;
        }
}

/* |m| * 10^|k| with overflow check against 10^37; returns 0 or -ERANGE */
static int qscale(__int128 *m, int k)
{
        static const __int128 lim = (__int128)1000000000000000000LL * 10000000000000000000ULL; /* 1e37 */
        for (; k > 0; k--) {
                if (*m >= lim / 10 || *m <= -lim / 10)
                        return -ERANGE;
                *m *= 10;
        }
        return 0;
}

int kdev_cel_quantity_parse(const char *s, struct kdev_cel_quantity *q, struct kdev_err *err)
{
        const char *p = s ? s : "";
        bool neg = false;
        if (*p == '+' || *p == '-')
                neg = *p++ == '-';
        __int128 m = 0;
        int digits = 0, sig = 0, frac = 0, seen_dot = 0;
        for (; is_digit(*p) || *p == '.'; p++) {
                if (*p == '.') {
                        if (seen_dot++)
                                return kdev_err_set(err, EINVAL, "%s", QFORMAT);
                        continue;
                }
                digits++;
                if (seen_dot)
                        frac++;
                if (sig == 0 && *p == '0')
                        continue;
                if (++sig > QMAX_DIGITS)
                        return kdev_err_set(err, EINVAL, "quantity out of the range kdev supports");
                m = m * 10 + (*p - '0');
        }
        if (digits == 0)
                return kdev_err_set(err, EINVAL, "%s", QFORMAT);
        /* the suffix: [eEinumkKMGTP]*[-+]?[0-9]*, then one Kubernetes knows */
        const char *suf = p;
        while (*p && strchr("eEinumkKMGTP", *p))
                p++;
        if (*p == '+' || *p == '-')
                p++;
        while (is_digit(*p))
                p++;
        if (*p)
                return kdev_err_set(err, EINVAL, "%s", QFORMAT);
        static const struct {
                const char *s;
                int dec, bin;
        } sfx[] = {{"", 0, 0},   {"n", -9, 0}, {"u", -6, 0}, {"m", -3, 0}, {"k", 3, 0},
                   {"M", 6, 0},  {"G", 9, 0},  {"T", 12, 0}, {"P", 15, 0}, {"E", 18, 0},
                   {"Ki", 0, 1}, {"Mi", 0, 2}, {"Gi", 0, 3}, {"Ti", 0, 4}, {"Pi", 0, 5},
                   {"Ei", 0, 6}};
        int exp = -frac, bin = -1;
        for (size_t i = 0; i < sizeof(sfx) / sizeof(sfx[0]); i++)
                if (strcmp(suf, sfx[i].s) == 0) {
                        exp += sfx[i].dec;
                        bin = sfx[i].bin;
                        break;
                }
        if (bin < 0) {
                /* e<int> / E<int> */
                const char *e = suf;
                if (*e != 'e' && *e != 'E')
                        return kdev_err_set(err, EINVAL, "unable to parse quantity's suffix");
                e++;
                bool eneg = false;
                if (*e == '+' || *e == '-')
                        eneg = *e++ == '-';
                if (!is_digit(*e))
                        return kdev_err_set(err, EINVAL, "unable to parse quantity's suffix");
                int v = 0;
                for (; is_digit(*e); e++) {
                        v = v * 10 + (*e - '0');
                        if (v > 1000)
                                return kdev_err_set(err, EINVAL, "quantity out of the range kdev supports");
                }
                if (*e)
                        return kdev_err_set(err, EINVAL, "unable to parse quantity's suffix");
                exp += eneg ? -v : v;
                bin = 0;
        }
        for (int i = 0; i < bin; i++) {
                if (m > ((__int128)1 << 110))
                        return kdev_err_set(err, EINVAL, "quantity out of the range kdev supports");
                m *= 1024;
        }
        q->mantissa = neg ? -m : m;
        q->exponent = exp;
        qnormalize(q);
        if (q->exponent > QMAX_EXP || q->exponent < -QMAX_EXP)
                return kdev_err_set(err, EINVAL, "quantity out of the range kdev supports");
        return 0;
}

int kdev_cel_quantity_cmp(const struct kdev_cel_quantity *a, const struct kdev_cel_quantity *b)
{
        int sa = (a->mantissa > 0) - (a->mantissa < 0), sb = (b->mantissa > 0) - (b->mantissa < 0);
        if (sa != sb)
                return sa < sb ? -1 : 1;
        if (sa == 0)
                return 0;
        __int128 ma = a->mantissa, mb = b->mantissa;
        if (sa < 0) {
                ma = -ma;
                mb = -mb;
        }
        int r;
        if (a->exponent > b->exponent)
                r = qscale(&ma, a->exponent - b->exponent) < 0 ? 1 : (ma > mb) - (ma < mb);
        else
                r = qscale(&mb, b->exponent - a->exponent) < 0 ? -1 : (ma > mb) - (ma < mb);
        return sa < 0 ? -r : r;
}

int kdev_cel__quantity_add(const struct kdev_cel_quantity *a, const struct kdev_cel_quantity *b,
                           int sign, struct kdev_cel_quantity *out)
{
        __int128 ma = a->mantissa, mb = sign < 0 ? -b->mantissa : b->mantissa;
        int e = a->exponent < b->exponent ? a->exponent : b->exponent;
        if (qscale(&ma, a->exponent - e) < 0 || qscale(&mb, b->exponent - e) < 0)
                return -ERANGE;
        out->mantissa = ma + mb;
        out->exponent = e;
        qnormalize(out);
        return 0;
}

int kdev_cel__quantity_int(const struct kdev_cel_quantity *q, int64_t *out)
{
        if (q->exponent < 0)
                return -ERANGE; /* normalized: a negative exponent is a fraction */
        __int128 m = q->mantissa;
        if (qscale(&m, q->exponent) < 0 || m > INT64_MAX || m < INT64_MIN)
                return -ERANGE;
        *out = (int64_t)m;
        return 0;
}

double kdev_cel__quantity_float(const struct kdev_cel_quantity *q)
{
        double v = (double)q->mantissa;
        double p = 1;
        for (int i = 0; i < (q->exponent < 0 ? -q->exponent : q->exponent); i++)
                p *= 10;
        return q->exponent < 0 ? v / p : v * p;
}

size_t kdev_cel__quantity_format(const struct kdev_cel_quantity *q, char *buf, size_t size)
{
        char digits[64];
        size_t n = 0;
        __int128 m = q->mantissa < 0 ? -q->mantissa : q->mantissa;
        do {
                digits[n++] = (char)('0' + (int)(m % 10));
                m /= 10;
        } while (m && n < sizeof(digits));
        char out[256];
        size_t o = 0;
        if (q->mantissa < 0)
                out[o++] = '-';
        int e = q->exponent;
        if (e >= 0) {
                while (n)
                        out[o++] = digits[--n];
                for (int i = 0; i < e && o < sizeof(out) - 1; i++)
                        out[o++] = '0';
        } else {
                size_t fr = (size_t)-e;
                if (n <= fr) {
                        out[o++] = '0';
                        out[o++] = '.';
                        for (size_t i = n; i < fr; i++)
                                out[o++] = '0';
                        while (n)
                                out[o++] = digits[--n];
                } else {
                        while (n > fr)
                                out[o++] = digits[--n];
                        out[o++] = '.';
                        while (n)
                                out[o++] = digits[--n];
                }
        }
        out[o] = 0;
        if (size) {
                size_t c = o < size - 1 ? o : size - 1;
                memcpy(buf, out, c);
                buf[c] = 0;
        }
        return o;
}

/* --- semver ---------------------------------------------------------- */

static bool only(const char *s, size_t n, const char *set)
{
        for (size_t i = 0; i < n; i++)
                if (!strchr(set, s[i]) || !s[i])
                        return false;
        return true;
}

#define NUMS "0123456789"
#define ALNUM "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ-"

static int semver_num(const char *s, size_t n, const char *what, const char *What, uint64_t *out,
                      struct kdev_err *err)
{
        if (n == 0 || !only(s, n, NUMS))
                return kdev_err_set(err, EINVAL, "Invalid character(s) found in %s number \"%.*s\"", what,
                                    (int)n, s);
        if (n > 1 && s[0] == '0')
                return kdev_err_set(err, EINVAL, "%s number must not contain leading zeroes \"%.*s\"", What,
                                    (int)n, s);
        uint64_t v = 0;
        for (size_t i = 0; i < n; i++) {
                if (v > (UINT64_MAX - 9) / 10)
                        return kdev_err_set(err, EINVAL, "strconv.ParseUint: parsing \"%.*s\": value out of range",
                                            (int)n, s);
                v = v * 10 + (uint64_t)(s[i] - '0');
        }
        *out = v;
        return 0;
}

int kdev_cel_semver_parse(const char *s, size_t len, struct kdev_cel_semver *v, struct kdev_err *err)
{
        if (len == 0)
                return kdev_err_set(err, EINVAL, "Version string empty");
        const char *d1 = memchr(s, '.', len);
        const char *d2 = d1 ? memchr(d1 + 1, '.', len - (size_t)(d1 + 1 - s)) : NULL;
        if (!d2)
                return kdev_err_set(err, EINVAL, "No Major.Minor.Patch elements found");
        int rc = semver_num(s, (size_t)(d1 - s), "major", "Major", &v->major, err);
        if (rc == 0)
                rc = semver_num(d1 + 1, (size_t)(d2 - d1 - 1), "minor", "Minor", &v->minor, err);
        if (rc < 0)
                return rc;
        const char *p = d2 + 1, *end = s + len;
        const char *plus = memchr(p, '+', (size_t)(end - p));
        if (plus) {
                /* build metadata: dot-separated non-empty [0-9A-Za-z-] */
                const char *b = plus + 1;
                for (;;) {
                        const char *dot = memchr(b, '.', (size_t)(end - b));
                        size_t n = (size_t)((dot ? dot : end) - b);
                        if (n == 0)
                                return kdev_err_set(err, EINVAL, "Build meta data is empty");
                        if (!only(b, n, ALNUM))
                                return kdev_err_set(err, EINVAL,
                                                    "Invalid character(s) found in build meta data \"%.*s\"",
                                                    (int)n, b);
                        if (!dot)
                                break;
                        b = dot + 1;
                }
                end = plus;
        }
        const char *dash = memchr(p, '-', (size_t)(end - p));
        v->pre = NULL;
        v->pre_len = 0;
        if (dash) {
                const char *b = dash + 1;
                for (;;) {
                        const char *dot = memchr(b, '.', (size_t)(end - b));
                        size_t n = (size_t)((dot ? dot : end) - b);
                        if (n == 0)
                                return kdev_err_set(err, EINVAL, "Prerelease is empty");
                        if (only(b, n, NUMS)) {
                                if (n > 1 && b[0] == '0')
                                        return kdev_err_set(
                                                err, EINVAL,
                                                "Prerelease version must not contain leading zeroes \"%.*s\"",
                                                (int)n, b);
                        } else if (!only(b, n, ALNUM)) {
                                return kdev_err_set(err, EINVAL,
                                                    "Invalid character(s) found in prerelease \"%.*s\"", (int)n, b);
                        }
                        if (!dot)
                                break;
                        b = dot + 1;
                }
                v->pre = dash + 1;
                v->pre_len = (size_t)(end - v->pre);
                end = dash;
        }
        return semver_num(p, (size_t)(end - p), "patch", "Patch", &v->patch, err);
}

static int cmp_u(uint64_t a, uint64_t b)
{
        return (a > b) - (a < b);
}

int kdev_cel_semver_cmp(const struct kdev_cel_semver *a, const struct kdev_cel_semver *b)
{
        int r = cmp_u(a->major, b->major);
        if (!r)
                r = cmp_u(a->minor, b->minor);
        if (!r)
                r = cmp_u(a->patch, b->patch);
        if (r)
                return r;
        if (!a->pre_len || !b->pre_len)
                return (a->pre_len == 0) - (b->pre_len == 0);
        const char *pa = a->pre, *ea = a->pre + a->pre_len, *pb = b->pre, *eb = b->pre + b->pre_len;
        for (;;) {
                if (pa >= ea || pb >= eb)
                        return (pa < ea) - (pb < eb);
                const char *da = memchr(pa, '.', (size_t)(ea - pa)), *db = memchr(pb, '.', (size_t)(eb - pb));
                size_t na = (size_t)((da ? da : ea) - pa), nb = (size_t)((db ? db : eb) - pb);
                bool numa = only(pa, na, NUMS), numb = only(pb, nb, NUMS);
                if (numa && numb)
                        r = na != nb ? (na > nb ? 1 : -1) : memcmp(pa, pb, na);
                else if (numa != numb)
                        r = numa ? -1 : 1;
                else {
                        r = memcmp(pa, pb, na < nb ? na : nb);
                        if (!r)
                                r = (na > nb) - (na < nb);
                }
                if (r)
                        return r > 0 ? 1 : -1;
                pa += na + 1;
                pb += nb + 1;
        }
}
