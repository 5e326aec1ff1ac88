/*
 * The one clock of the core: CLOCK_MONOTONIC in nanoseconds, read through
 * the vDSO (no system call).  A header of its own so that whoever times
 * (the learner, a job's time slices and units) reads the same clock without
 * depending on another part of the core for it.
 */
#ifndef CLEARPAGES_CLOCK_H
#define CLEARPAGES_CLOCK_H

#include <stdint.h>
#include <time.h>

static inline uint64_t cp_now_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

#endif
