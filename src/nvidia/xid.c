/* XID policy (xid.h). */
#include "nvidia/xid.h"

#include <ctype.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* One parsed list: "all" or a set of XIDs. */
struct xid_list {
        bool all;
        unsigned long long *ids;
        size_t n, cap;
};

static int list_add(struct xid_list *l, unsigned long long id)
{
        for (size_t i = 0; i < l->n; i++)
                if (l->ids[i] == id)
                        return 0;
        if (l->n == l->cap) {
                size_t cap = l->cap ? l->cap * 2 : 8;
                unsigned long long *p = realloc(l->ids, cap * sizeof(*p));
                if (!p)
                        return -ENOMEM;
                l->ids = p;
                l->cap = cap;
        }
        l->ids[l->n++] = id;
        return 0;
}

static bool list_has(const struct xid_list *l, unsigned long long id)
{
        for (size_t i = 0; i < l->n; i++)
                if (l->ids[i] == id)
                        return true;
        return false;
}

/* Go's strconv.ParseUint(s, 10, 64): one or more decimal digits, no sign,
 * value within 64 bits. */
static bool parse_u64(const char *s, size_t len, unsigned long long *out)
{
        if (len == 0)
                return false;
        unsigned long long v = 0;
        for (size_t i = 0; i < len; i++) {
                if (s[i] < '0' || s[i] > '9')
                        return false;
                unsigned d = (unsigned)(s[i] - '0');
                if (v > (UINT64_MAX - d) / 10)
                        return false;
                v = v * 10 + d;
        }
        *out = v;
        return true;
}

/* Splits |text| at commas (after lower-casing), trims each element. */
static int parse_list(const char *name, const char *text, struct xid_list *l,
                      kdev_xid_warn_fn warn, void *warn_arg)
{
        if (!text)
                return 0;
        const char *p = text;
        for (;;) {
                const char *end = strchr(p, ',');
                size_t len = end ? (size_t)(end - p) : strlen(p);
                const char *s = p;
                while (len > 0 && isspace((unsigned char)s[0])) {
                        s++;
                        len--;
                }
                while (len > 0 && isspace((unsigned char)s[len - 1]))
                        len--;
                char low[65];
                size_t shown = len < sizeof(low) - 1 ? len : sizeof(low) - 1;
                for (size_t i = 0; i < shown; i++)
                        low[i] = (char)tolower((unsigned char)s[i]);
                low[shown] = '\0';
                unsigned long long id;
                if (len == 0) {
                        /* empty element: skipped */
                } else if ((len == 3 && strcmp(low, "all") == 0) ||
                           (len == 4 && strcmp(low, "xids") == 0)) {
                        l->all = true;
                        return 0;   /* NVIDIA stops reading the list here */
                } else if (parse_u64(s, len, &id)) {
                        if (list_add(l, id) != 0)
                                return -ENOMEM;
                } else if (warn) {
                        char msg[160];
                        snprintf(msg, sizeof(msg), "%s: ignoring malformed XID value \"%s\"",
                                 name, low);
                        warn(warn_arg, msg);
                }
                if (!end)
                        return 0;
                p = end + 1;
        }
}

static int cmp_u64(const void *a, const void *b)
{
        unsigned long long x = *(const unsigned long long *)a;
        unsigned long long y = *(const unsigned long long *)b;
        return x < y ? -1 : x > y;
}

int kdev_xid_policy_parse(const char *disable, const char *enable, struct kdev_xid_policy *out,
                          kdev_xid_warn_fn warn, void *warn_arg, struct kdev_err *err)
{
        struct xid_list d = { 0 }, e = { 0 };
        static const unsigned long long defaults[] = KDEV_XID_DEFAULT_IGNORED;
        memset(out, 0, sizeof(*out));
        int rc = parse_list(KDEV_XID_ENV_DISABLE, disable, &d, warn, warn_arg);
        if (rc == 0)
                rc = parse_list(KDEV_XID_ENV_ENABLE, enable, &e, warn, warn_arg);
        if (rc != 0)
                goto fail;
        if (d.all && !e.all) {
                out->disabled = true;
        } else if (e.all) {
                out->monitor_all = true;
        } else {
                struct xid_list ign = { 0 };
                for (size_t i = 0; rc == 0 && i < KDEV_XID_N_DEFAULT_IGNORED; i++)
                        if (!list_has(&e, defaults[i]))
                                rc = list_add(&ign, defaults[i]);
                for (size_t i = 0; rc == 0 && i < d.n; i++)
                        if (!list_has(&e, d.ids[i]))
                                rc = list_add(&ign, d.ids[i]);
                if (rc != 0) {
                        free(ign.ids);
                        goto fail;
                }
                if (ign.n > 0)
                        qsort(ign.ids, ign.n, sizeof(*ign.ids), cmp_u64);
                out->ignored = ign.ids;
                out->n_ignored = ign.n;
        }
        free(d.ids);
        free(e.ids);
        return 0;
fail:
        free(d.ids);
        free(e.ids);
        memset(out, 0, sizeof(*out));
        return kdev_err_set(err, ENOMEM, "XID policy: out of memory");
}

int kdev_xid_policy_from_env(struct kdev_xid_policy *out, kdev_xid_warn_fn warn, void *warn_arg,
                             struct kdev_err *err)
{
        return kdev_xid_policy_parse(getenv(KDEV_XID_ENV_DISABLE), getenv(KDEV_XID_ENV_ENABLE),
                                     out, warn, warn_arg, err);
}

int kdev_xid_policy_copy(struct kdev_xid_policy *dst, const struct kdev_xid_policy *src,
                         struct kdev_err *err)
{
        *dst = *src;
        dst->ignored = NULL;
        if (src->n_ignored > 0) {
                dst->ignored = malloc(src->n_ignored * sizeof(*dst->ignored));
                if (!dst->ignored) {
                        memset(dst, 0, sizeof(*dst));
                        return kdev_err_set(err, ENOMEM, "XID policy: out of memory");
                }
                memcpy(dst->ignored, src->ignored, src->n_ignored * sizeof(*dst->ignored));
        }
        return 0;
}

void kdev_xid_policy_clear(struct kdev_xid_policy *p)
{
        if (!p)
                return;
        free(p->ignored);
        memset(p, 0, sizeof(*p));
}

bool kdev_xid_is_critical(const struct kdev_xid_policy *p, unsigned long long xid)
{
        if (p->disabled)
                return false;
        if (p->monitor_all || p->n_ignored == 0)
                return true;
        return !bsearch(&xid, p->ignored, p->n_ignored, sizeof(*p->ignored), cmp_u64);
}

/* Copies |text| (|n| bytes) into |buf|, truncated with "..." when it does not
 * fit; returns the length written. */
static size_t put_cut(char *buf, size_t size, const char *text, size_t n, bool cut)
{
        if (!cut && n < size) {
                memcpy(buf, text, n);
                buf[n] = '\0';
                return n;
        }
        if (size <= 4) {
                memset(buf, '.', size - 1);
                buf[size - 1] = '\0';
                return size - 1;
        }
        size_t keep = size - 4 < n ? size - 4 : n;
        memcpy(buf, text, keep);
        memcpy(buf + keep, "...", 4);
        return keep + 3;
}

size_t kdev_xid_policy_describe(const struct kdev_xid_policy *p, char *buf, size_t size)
{
        if (size == 0)
                return 0;
        if (p->disabled || p->monitor_all) {
                const char *t = p->disabled ? "health checks disabled" : "all XIDs critical";
                return put_cut(buf, size, t, strlen(t), false);
        }
        char tmp[4096];
        size_t n = (size_t)snprintf(tmp, sizeof(tmp), "ignored XIDs: %s",
                                    p->n_ignored ? "" : "none");
        bool cut = false;
        for (size_t i = 0; i < p->n_ignored && !cut; i++) {
                int w = snprintf(tmp + n, sizeof(tmp) - n, "%s%llu", i ? "," : "", p->ignored[i]);
                if (w < 0 || (size_t)w >= sizeof(tmp) - n)
                        cut = true;
                else
                        n += (size_t)w;
        }
        return put_cut(buf, size, tmp, n, cut);
}
