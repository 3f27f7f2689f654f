#include "common/err.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

int kdev_err_set(struct kdev_err *err, int code, const char *fmt, ...)
{
        if (code < 0)
                code = -code;
        if (code == 0)
                code = EIO;
        if (err) {
                va_list ap;
                va_start(ap, fmt);
                vsnprintf(err->msg, sizeof(err->msg), fmt, ap);
                va_end(ap);
                err->code = code;
        }
        return -code;
}

int kdev_err_wrap(struct kdev_err *err, const char *fmt, ...)
{
        if (!err)
                return -EIO;
        char old[KDEV_ERR_MSG_MAX];
        va_list ap;
        memcpy(old, err->msg, sizeof(old));
        va_start(ap, fmt);
        int n = vsnprintf(err->msg, sizeof(err->msg), fmt, ap);
        va_end(ap);
        if (n >= 0 && (size_t)n < sizeof(err->msg)) {
                size_t used = (size_t)n;
                size_t room = sizeof(err->msg) - used;
                size_t olen = strnlen(old, sizeof(old) - 1);
                if (room > 2) {
                        memcpy(err->msg + used, ": ", 2);
                        used += 2;
                        room -= 2;
                        if (olen >= room)
                                olen = room - 1;
                        memcpy(err->msg + used, old, olen);
                        err->msg[used + olen] = '\0';
                }
        }
        if (err->code == 0)
                err->code = EIO;
        return -err->code;
}

void kdev_err_clear(struct kdev_err *err)
{
        if (err) {
                err->code = 0;
                err->msg[0] = '\0';
        }
}
