/* Quantity arithmetic of the allocator (sched_internal.h): exact sums,
 * differences and step rounding of Kubernetes quantities, and their text in
 * the format of the quantity they came from. */
#include <string.h>

#include "sched/objects.h"
#include "sched/sched_internal.h"

/* |q| scaled to exponent |e| (<= q->exponent); false on overflow. */
static bool at_exp(const struct kdev_cel_quantity *q, int32_t e, __int128 *m)
{
        static const __int128 lim = (__int128)1000000000000000000LL * 1000000000000000000LL; /* 1e36 */
        __int128 v = q->mantissa;
        for (int32_t k = q->exponent; k > e; k--) {
                if (v >= lim || v <= -lim)
                        return false;
                v *= 10;
        }
        *m = v;
        return true;
}

static int32_t min_exp(const struct kdev_cel_quantity *a, const struct kdev_cel_quantity *b)
{
        if (a->mantissa == 0)
                return b->exponent;
        if (b->mantissa == 0)
                return a->exponent;
        return a->exponent < b->exponent ? a->exponent : b->exponent;
}

bool kdev_sched__qadd(const struct kdev_cel_quantity *a, const struct kdev_cel_quantity *b,
                      int sign, struct kdev_cel_quantity *out)
{
        int32_t e = min_exp(a, b);
        __int128 x, y;
        if (!at_exp(a, e, &x) || !at_exp(b, e, &y))
                return false;
        out->mantissa = sign < 0 ? x - y : x + y;
        out->exponent = out->mantissa == 0 ? 0 : e;
        while (out->mantissa != 0 && out->mantissa % 10 == 0) {
                out->mantissa /= 10;
                out->exponent++;
        }
        return true;
}

bool kdev_sched__qround(const struct kdev_cel_quantity *req, const struct kdev_cel_quantity *min,
                        const struct kdev_cel_quantity *step, struct kdev_cel_quantity *out)
{
        if (kdev_cel_quantity_cmp(req, min) <= 0) {
                *out = *min;
                return true;
        }
        if (!step || step->mantissa <= 0) {
                *out = *req;
                return true;
        }
        struct kdev_cel_quantity diff;
        if (!kdev_sched__qadd(req, min, -1, &diff))
                return false;
        int32_t e = min_exp(&diff, step);
        __int128 d, s;
        if (!at_exp(&diff, e, &d) || !at_exp(step, e, &s))
                return false;
        __int128 n = (d + s - 1) / s;
        struct kdev_cel_quantity add = {.mantissa = n * s, .exponent = e};
        return kdev_sched__qadd(min, &add, 1, out);
}

bool kdev_sched__qmultiple(const struct kdev_cel_quantity *v, const struct kdev_cel_quantity *min,
                           const struct kdev_cel_quantity *step)
{
        struct kdev_cel_quantity diff;
        if (!kdev_sched__qadd(v, min, -1, &diff))
                return false;
        int32_t e = min_exp(&diff, step);
        __int128 d, s;
        if (!at_exp(&diff, e, &d) || !at_exp(step, e, &s) || s == 0)
                return false;
        return d % s == 0;
}

void kdev_sched__qformat(const struct kdev_cel_quantity *q, bool binary, char *buf, size_t size)
{
        struct kdev_qty t = {*q, binary ? KDEV_QTY_BINARY_SI : KDEV_QTY_DECIMAL_SI};
        kdev_qty_format(&t, buf, size);
}
