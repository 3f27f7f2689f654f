/* Helpers shared by the fit and quota checks of src/sched. */
#ifndef KDEV_SCHED_SCHED_INTERNAL_H
#define KDEV_SCHED_SCHED_INTERNAL_H

#include <stdarg.h>

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
