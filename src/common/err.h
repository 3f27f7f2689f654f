/* kdev error contract.
 *
 * Fallible functions return 0 (or a non-negative count) on success and a
 * negative errno-style code on failure; constructors return NULL. When a
 * function fails it fills the caller-provided |err| (which may be NULL) with a
 * human-readable message; callers add context with kdev_err_wrap() as the
 * error travels up ("loading config: file.yaml:3:5: ..."). Library code never
 * logs and never exits.
 */
#ifndef KDEV_COMMON_ERR_H
#define KDEV_COMMON_ERR_H

#include <stddef.h>

#include "common/export.h"

#define KDEV_ERR_MSG_MAX 1024

struct kdev_err {
        int code;                      /* positive errno value, 0 when unset */
        char msg[KDEV_ERR_MSG_MAX];    /* NUL-terminated message */
};

/* Sets |err| (may be NULL) to |code| (a positive errno) and the printf-style
 * message. Returns -code, so callers can `return kdev_err_set(...)`. */
KDEV_API int kdev_err_set(struct kdev_err *err, int code, const char *fmt, ...)
        __attribute__((format(printf, 3, 4)));

/* Prefixes the message in |err| (may be NULL) with the formatted context and
 * ": ". Returns -err->code (or -EIO when |err| is NULL or unset). */
KDEV_API int kdev_err_wrap(struct kdev_err *err, const char *fmt, ...)
        __attribute__((format(printf, 2, 3)));

/* Clears |err| (may be NULL). */
KDEV_API void kdev_err_clear(struct kdev_err *err);

#endif /* KDEV_COMMON_ERR_H */
