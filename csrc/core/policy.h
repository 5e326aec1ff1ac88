/*
 * The policy of "auto": every per-call decision in one place and one
 * language.  Which routine runs, on how many threads, in what unit of work,
 * which routine a hot range gets, whether the learner (adapt.h) is asked
 * and between which two routines, and whether the pages never touched are
 * looked for first (untouched.h).
 *
 * A pure function of a struct cp_policy (the numbers Python computes once
 * from the CPU description, the calibration and the CLEARPAGES_* variables)
 * and the call's size.  clearpages._fast runs it on every call with the
 * policy it was configured with; plan() asks _fast the same question, and
 * the calibration and the tests ask it about synthetic CPUs through cffi.
 * Routines are indices into the routine table (clearpages/_routines.py).
 */
#ifndef CLEARPAGES_POLICY_H
#define CLEARPAGES_POLICY_H

#include <stddef.h>
#include <stdint.h>

/* BEGIN CDEF */

enum {
    CP_POLICY_AUTO = -1,        /* method: "auto" */
    CP_POLICY_NONE = -1,        /* no such routine (forced, long, hot) */
    CP_POLICY_THREADS_AUTO = 0, /* threads: "auto" */
    CP_POLICY_MIN_UNIT = 4096,  /* the smallest unit of work: a page */
    /* hot: what the program said of the buffer */
    CP_POLICY_HOT_NONE = 0,     /* nothing: auto */
    CP_POLICY_HOT_RANGE = 1,    /* hot=(start, stop): hot_nbytes cleared last, hot */
    CP_POLICY_HOT_ALL = 2,      /* hot=True: all of it is used next */
    CP_POLICY_NOT_SOON = 3,     /* hot=False: none of it is used soon */
    CP_POLICY_HOT_ALL_OTHER = 4 /* hot=True of a buffer not cleared lately (the
                                   learner's "other" buffers): probably cold */
};

struct cp_policy {
    int memset;                 /* the memset role: below vector_max a piece (libc) */
    int temporal;               /* from vector_max to nt_min: ordinary stores */
    int streaming;              /* from nt_min in all: non-temporal stores */
    int long_routine;           /* from long_min a piece on one thread above nt_min */
    int forced;                 /* CLEARPAGES_METHOD, for every size */
    uint32_t temporal_set;      /* bit i: routine i uses ordinary stores */
    size_t vector_max, nt_min, long_min;
    size_t unit;                /* the unit of work on one thread (see DEFAULT_UNIT) */
    size_t thread_min;          /* threads="auto": one thread below this */
    int max_threads;            /* the thresholds' cap, 0: none */
    int cores;                  /* CPUs this process may run on */
    size_t adapt_min, adapt_max;    /* the adaptive band: single auto clears of
                                       adapt_min <= n < adapt_max ask the learner */
    size_t hot_max;             /* hot=True: at most this tail is cleared hot */
    size_t hot_max_other;       /* ... of a buffer not cleared lately */
    size_t untouched_min;       /* work of this much looks for untouched pages; 0: never */
};

struct cp_decision {
    int routine;                /* what runs (with a hot range: the rest) */
    int threads;
    size_t unit;                /* one direct call up to this on one thread */
    int hot_routine;            /* the hot range's routine, CP_POLICY_NONE without one */
    size_t hot_nbytes;          /* the hot range's length (hot=True: the tail's) */
    int adaptive;               /* 1: the learner chooses and the clear is timed */
    int roles[2];               /* each role's routine, for the learner: [CP_ADAPT_TEMPORAL],
                                   [CP_ADAPT_STREAMING] */
    int skip_untouched;         /* 1: the pages never touched are dropped first */
};

/* The decision for nbytes in count pieces (count 0: as 1).  method: a
 * routine index or CP_POLICY_AUTO; threads: 1..CP_MAX_THREADS or
 * CP_POLICY_THREADS_AUTO; hot: CP_POLICY_HOT_RANGE when hot_nbytes of the
 * nbytes are a hot range (one buffer), cleared last with ordinary stores;
 * CP_POLICY_HOT_ALL (the range is the tail, all of it up to hot_max),
 * CP_POLICY_HOT_ALL_OTHER (the same up to hot_max_other) or
 * CP_POLICY_NOT_SOON (streaming over all of it, never learned) when the
 * program said so of the whole buffer. */
void cp_policy_decide(const struct cp_policy *p, size_t nbytes, size_t count,
                      int method, int threads, int hot, size_t hot_nbytes,
                      struct cp_decision *out);

/* END CDEF */

#endif
