/* Internals of src/sched: the structured allocator's quantity arithmetic
 * (allocator.h) and the helpers shared by the fit and quota checks. */
#ifndef KDEV_SCHED_SCHED_INTERNAL_H
#define KDEV_SCHED_SCHED_INTERNAL_H

#include <stdarg.h>

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cel/cel.h"

/* *|out| = |a| + |b| (|sign| > 0) or |a| - |b|; false on overflow. */
bool kdev_sched__qadd(const struct kdev_cel_quantity *a, const struct kdev_cel_quantity *b,
                      int sign, struct kdev_cel_quantity *out);

/* Kubernetes' rounding of a capacity request up a validRange
 * (consumable_capacity.go): below |min| -> |min|; with |step| (may be NULL)
 * min + ceil((req - min) / step) * step. false on overflow. */
bool kdev_sched__qround(const struct kdev_cel_quantity *req, const struct kdev_cel_quantity *min,
                        const struct kdev_cel_quantity *step, struct kdev_cel_quantity *out);

/* Whether |v| - |min| is a whole multiple of |step|. */
bool kdev_sched__qmultiple(const struct kdev_cel_quantity *v, const struct kdev_cel_quantity *min,
                           const struct kdev_cel_quantity *step);

/* |q| as quantity text in Kubernetes' canonical form (objects.h
 * kdev_qty_format), BinarySI when |binary|, else DecimalSI. */
void kdev_sched__qformat(const struct kdev_cel_quantity *q, bool binary, char *buf, size_t size);


#include <jansson.h>

/* Appends the formatted field error to |errors|; returns -EINVAL. */
int kdev_sched_field_error(json_t *errors, const char *fmt, ...)
        __attribute__((format(printf, 2, 3)));

/* The keys of |obj| sorted bytewise, as a new array of strings. */
json_t *kdev_sched_sorted_keys(const json_t *obj);

/* `KIND "NAME" is invalid: ERR` or `... is invalid: [ERR, ERR]` (malloc'ed;
 * NULL without memory), the API server's answer to an invalid object. */
char *kdev_sched_invalid_message(const char *kind, const json_t *obj, const json_t *errors);

#endif /* KDEV_SCHED_SCHED_INTERNAL_H */
