/* Timed waits of kdev's helper threads (the NVML event thread, the Node
 * watch of per-node configs): condition variables on CLOCK_MONOTONIC, so a
 * change of the wall clock neither cuts a wait short nor stretches it. */
#ifndef KDEV_COMMON_WAIT_H
#define KDEV_COMMON_WAIT_H

#include <pthread.h>
#include <time.h>

#include "common/export.h"

/* Initialises |cond| (caller-owned, destroyed with pthread_cond_destroy())
 * to time its waits on CLOCK_MONOTONIC. Returns 0 or the positive error of
 * pthread_cond_init() (EAGAIN, ENOMEM). */
KDEV_API int kdev_cond_init_monotonic(pthread_cond_t *cond);

/* |*ts| := CLOCK_MONOTONIC now + |ms| milliseconds, normalised
 * (0 <= tv_nsec < 1e9): the absolute deadline pthread_cond_timedwait()
 * takes for a condition variable from kdev_cond_init_monotonic(). */
KDEV_API void kdev_deadline_after_ms(unsigned ms, struct timespec *ts);

#endif /* KDEV_COMMON_WAIT_H */
