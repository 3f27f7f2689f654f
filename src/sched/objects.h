/* Kubernetes objects read from files, and the quantities in them, for the
 * offline control-plane checks (sched/fit.h, sched/quota.h).
 *
 * Objects are jansson values: a file holds JSON or YAML (one or more YAML
 * documents), each document an object or a List whose `items` are objects.
 * Quantities follow apimachinery's resource.Quantity: parsed exactly (the
 * CEL module's parser, cel/cel.h), printed in Kubernetes' canonical form
 * (Quantity.String()).
 */
#ifndef KDEV_SCHED_OBJECTS_H
#define KDEV_SCHED_OBJECTS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "cel/cel.h"
#include "common/err.h"
#include "common/export.h"

/* The format a quantity prints in, chosen from how it was written
 * (apimachinery: a binary suffix Ki..Ei is BinarySI, an exponent e<n> is
 * DecimalExponent, anything else DecimalSI). */
enum kdev_qty_format {
        KDEV_QTY_DECIMAL_SI = 0,
        KDEV_QTY_BINARY_SI,
        KDEV_QTY_DECIMAL_EXPONENT,
};

/* An exact quantity: q.mantissa * 10^q.exponent, rounded up to nano units
 * as Kubernetes rounds at parse, and its print format. */
struct kdev_qty {
        struct kdev_cel_quantity q;
        enum kdev_qty_format format;
};

/* Longest text kdev_qty_format() writes, with the NUL. */
#define KDEV_QTY_TEXT_MAX 64

/* Reads the quantity |v| (a JSON string such as "2" or "500m", or a JSON
 * number) into *|out|. Returns 0, or -EINVAL with |err| set to the parser's
 * message (cel/cel.h kdev_cel_quantity_parse) or "must be a quantity (a
 * string or a number), not <type>". |v| stays the caller's. */
KDEV_API int kdev_qty_from_json(const json_t *v, struct kdev_qty *out, struct kdev_err *err);

/* The quantity of the integer |n|, DecimalSI (resource.NewQuantity). */
KDEV_API struct kdev_qty kdev_qty_int(int64_t n);

/* Writes |q| into |buf| (|size| bytes, KDEV_QTY_TEXT_MAX is always enough)
 * in Kubernetes' canonical form (Quantity.String(): "0", "2", "500m", "1k",
 * "4Gi", "1e3"): trailing zeros folded into the largest suffix whose
 * exponent is a multiple of 3 (DecimalSI, n u m k M G T P E) or of 10
 * (BinarySI, for whole values of magnitude >= 1024, else DecimalSI).
 * Returns |buf|. */
KDEV_API char *kdev_qty_format(const struct kdev_qty *q, char *buf, size_t size);

/* The integer value of |q| rounded up (Quantity.Value()) into *|value|, and
 * whether its milli-value (rounded up, Quantity.MilliValue()) is a multiple
 * of 1000, the test Kubernetes' validation makes for integer resources
 * (IsIntegerResourceName: `must be an integer`). Returns 0, or -ERANGE when
 * the value does not fit an int64 (Kubernetes would saturate). */
KDEV_API int kdev_qty_value(const struct kdev_qty *q, int64_t *value, bool *integer);

/* Compares two quantities: -1, 0 or 1 (Quantity.Cmp). */
KDEV_API int kdev_qty_cmp(const struct kdev_qty *a, const struct kdev_qty *b);

/* *|a| += *|b| (Quantity.Add): the sum keeps |a|'s format unless |a| is
 * zero. Returns 0 or -ERANGE past kdev's range (36 digits). */
KDEV_API int kdev_qty_add(struct kdev_qty *a, const struct kdev_qty *b);

/* Reads the objects of the |len| bytes |text| (JSON, or YAML with one or
 * more documents; |name| names it in errors) into a new JSON array *|out|
 * (the caller's, json_decref): each document is an object, or a List
 * (`items`) whose objects are appended in order. YAML scalars become JSON
 * values as a YAML 1.2 core schema reads them (plain null ~ true false,
 * integers; everything else, quoted or not, a string), so `nvidia.com/gpu: 2`
 * and `"2"` are the same quantity. Returns 0, or -EINVAL with |err| set to
 * "NAME:LINE:COLUMN: <syntax error>", "NAME: document N is not an object",
 * "NAME: document N: items[I] is not an object" or "NAME: document N:
 * unsupported YAML (a non-scalar key, nesting deeper than 64 or more than
 * 1000000 values)" (aliases count each time they are expanded). */
KDEV_API int kdev_objects_parse(const char *text, size_t len, const char *name, json_t **out,
                                struct kdev_err *err);

/* kdev_objects_parse() on the file |path| (at most 16 MiB). Returns its
 * errors, or the file reader's (common/file.h) naming |path|. */
KDEV_API int kdev_objects_load(const char *path, json_t **out, struct kdev_err *err);

/* kdev_objects_load() on each of the |n| files |paths|, in order, into one
 * new array *|out| (the caller's). Returns 0 or the first file's error. */
KDEV_API int kdev_objects_load_all(char *const *paths, size_t n, json_t **out,
                                   struct kdev_err *err);

/* "NAMESPACE/NAME" of the object |obj| (metadata.namespace, "default" when
 * unset; metadata.name, "" when unset) into |buf|. Returns |buf|. */
KDEV_API char *kdev_object_ref(const json_t *obj, char *buf, size_t size);

#endif /* KDEV_SCHED_OBJECTS_H */
