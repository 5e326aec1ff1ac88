/*
 * The core's clocks in nanoseconds: CLOCK_MONOTONIC, read through the vDSO
 * (no system call), and the calling thread's CPU time (a system call where
 * the vDSO has none), which the learner's spans may be measured on.  A
 * header of its own so that whoever times (the learner, a job's time slices
 * and units) reads the same clocks without depending on another part of the
 * core for them.
 */
#ifndef CLEARPAGES_CLOCK_H
#define CLEARPAGES_CLOCK_H

#include <stdint.h>
#include <time.h>

static inline uint64_t cp_clock_ns(clockid_t id)
{
    struct timespec t;
    clock_gettime(id, &t);
    return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

static inline uint64_t cp_now_ns(void)
{
    return cp_clock_ns(CLOCK_MONOTONIC);
}

static inline uint64_t cp_thread_cpu_ns(void)
{
    return cp_clock_ns(CLOCK_THREAD_CPUTIME_ID);
}

#endif
