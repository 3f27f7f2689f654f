/* The clock and the sort of the benchmarks' medians (bench_cel, bench_sched). */
#ifndef KDEV_BENCH_CLOCK_H
#define KDEV_BENCH_CLOCK_H

#include <time.h>

/* CLOCK_MONOTONIC in nanoseconds. */
static inline double now_ns(void)
{
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

/* qsort comparator of doubles, ascending. */
static inline int dbl_cmp(const void *pa, const void *pb)
{
        double a = *(const double *)pa, b = *(const double *)pb;
        return a < b ? -1 : a > b;
}

#endif /* KDEV_BENCH_CLOCK_H */
