/*
 * Fault injection for the tests: make the Nth pass through a named step
 * fail (or misbehave) so that races and rare errors run deterministically.
 *
 * Off unless a test arms it; the cost when off is one relaxed atomic load
 * on paths that already make a system call (thread start, mmap, mremap).
 * Process-wide; each site fires once per arming.
 */
#ifndef CLEARPAGES_INJECT_H
#define CLEARPAGES_INJECT_H

#include <stddef.h>
#include <stdint.h>

/* BEGIN CDEF */

enum {
    CP_INJECT_NONE = 0,
    CP_INJECT_THREAD_START = 1,   /* pthread_create of a job's worker fails */
    CP_INJECT_MOVE_PIECE = 2,     /* a piece of a piecewise move fails */
    CP_INJECT_ROLLBACK = 3,       /* moving a piece back after a failure fails */
    CP_INJECT_SQUAT_SOURCE = 4,   /* before a piece moves back, a foreign
                                     mapping takes its place (cp_inject_squat) */
    CP_INJECT_GROW_MAP = 5,       /* mapping the grown part of a hugetlb
                                     region fails, leaving a hole that a
                                     foreign mapping takes (cp_inject_squat) */
    CP_INJECT_POPULATE = 6,       /* MADV_POPULATE_WRITE says EINVAL (old kernel) */
    CP_INJECT_CALLER_IDLE = 7,    /* a job's calling thread leaves the slice's
                                     work to the workers */
    CP_INJECT_RATE_RIVAL = 8,     /* as a routine's speed is first remembered,
                                     another thread remembers the speed of
                                     a rival routine (err bytes per us)
                                     first, in the slot it found empty */
    CP_INJECT_ADAPT_HOLD = 9,     /* cp_adapt_stat holds the learner's lock
                                     for err milliseconds */
    CP_INJECT_POOL_THREAD = 10,   /* a pool's thread cannot be started */
    CP_INJECT_POOL_GROW = 11      /* mapping more memory for a pool fails */
};

/* Arm site: its nth pass from now (1 = the next) fails with error err
 * (an errno value).  arm(CP_INJECT_NONE, 0, 0) disarms every site. */
void cp_inject_arm(int site, long nth, int err);
/* How many times site has fired since it was armed (0 or 1). */
long cp_inject_fired(int site);
/* The foreign mapping a SQUAT site made (address, 0 if none): one 4 KiB
 * page filled with 0x5A, left mapped for the test to check and unmap. */
uintptr_t cp_inject_squat(void);
/* The speed remembered for RATE_RIVAL's routine (cp_job_rate of it). */
uint64_t cp_inject_rival_rate(void);

/* END CDEF */

/* For the C sources: the error to fail with at this pass, or 0. */
int cp_inject_hit(int site);
/* Map the squatter page at addr (MAP_FIXED_NOREPLACE) and remember it. */
void cp_inject_do_squat(uintptr_t addr);
/* The routine whose speed RATE_RIVAL remembers (clears like memset). */
void cp_inject_rival(void *dst, size_t n);

#endif
