#include "common/wait.h"

int kdev_cond_init_monotonic(pthread_cond_t *cond)
{
        pthread_condattr_t ca;
        int r = pthread_condattr_init(&ca);
        if (r != 0)
                return r;
        r = pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
        if (r == 0)
                r = pthread_cond_init(cond, &ca);
        pthread_condattr_destroy(&ca);
        return r;
}

void kdev_deadline_after_ms(unsigned ms, struct timespec *ts)
{
        clock_gettime(CLOCK_MONOTONIC, ts);
        ts->tv_sec += ms / 1000;
        ts->tv_nsec += (long)(ms % 1000) * 1000000L;
        if (ts->tv_nsec >= 1000000000L) {
                ts->tv_sec++;
                ts->tv_nsec -= 1000000000L;
        }
}
