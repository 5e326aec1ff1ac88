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

#include "adapt.h"

/* BEGIN CDEF */

enum {
    CP_POLICY_AUTO = -1,        /* method: "auto" */
    CP_POLICY_NONE = -1,        /* no such routine (forced, long, hot) */
    CP_POLICY_THREADS_AUTO = 0, /* threads: "auto" */
    CP_POLICY_MIN_UNIT = 4096,  /* the smallest unit of work: a page */
    CP_POLICY_PIECE_FINE = 512,  /* pieces shorter on average get memset, on one
                                   thread (a strided view of small elements) */
    CP_POLICY_PIECE_DIRECT = 65536, /* pieces shorter on average, on one thread, are
                                   cleared one by one as they come, not as a job
                                   (the rows of a 2-D slice, many short buffers) */
    /* hot: what the program said of the buffer */
    CP_POLICY_HOT_NONE = 0,     /* nothing: auto */
    CP_POLICY_HOT_RANGE = 1,    /* hot=(start, stop): hot_nbytes cleared last, hot */
    CP_POLICY_HOT_ALL = 2,      /* hot=True: all of it is used next */
    CP_POLICY_NOT_SOON = 3,     /* hot=False: none of it is used soon */
    CP_POLICY_HOT_ALL_OTHER = 4 /* hot=True of a buffer not cleared lately (the
                                   learner's "other" buffers): probably cold */
};

struct cp_policy {
    int memset;                 /* the memset role: up to vector_max a piece (libc) */
    int temporal;               /* above vector_max, below nt_min: ordinary stores */
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
    int adapt_active;           /* 1: adaptive auto is on (the dispatch state's
                                   adapt_active); 0: the static choice */
    size_t hot_max;             /* hot=True: at most this tail is cleared hot */
    size_t hot_max_other;       /* ... of a buffer not cleared lately */
    size_t untouched_min;       /* work of this much looks for untouched pages; 0: never */
};

/* Reason codes: which rule of cp_policy_decide made each part of a
 * decision, so that what is shown (plan(), info) reads the rule that
 * fired rather than working it out again.  Python maps each code to a
 * sentence (clearpages/_policy.py, the reason tables). */
enum {
    /* why: what chose the routine */
    CP_WHY_FORCED = 1,          /* CLEARPAGES_METHOD (forced), for every size */
    CP_WHY_METHOD,              /* the caller named the routine */
    CP_WHY_ONE_ROUTINE,         /* memset, temporal and streaming are one routine */
    CP_WHY_LONG,                /* from nt_min, long_min a piece on one thread */
    CP_WHY_STREAMING,           /* from nt_min in all */
    CP_WHY_MEMSET,              /* up to vector_max a piece */
    CP_WHY_MEMSET_BELOW_NT,     /* below nt_min, with vector_max no lower */
    CP_WHY_TEMPORAL,            /* above vector_max a piece, below nt_min */
    CP_WHY_NOT_SOON,            /* hot=False: the streaming routine over all of it */
    CP_WHY_HOT,                 /* a hot part: the rest streams, the hot part is
                                   cleared last with ordinary stores */
    CP_WHY_SMALL_PIECES,        /* pieces under CP_POLICY_PIECE_FINE on average:
                                   memset, one by one as they come */
    /* hot_why: how long the hot part is */
    CP_HOT_PART_NONE = 0,       /* no hot part */
    CP_HOT_PART_RANGE = 1,      /* hot=(start, stop): the program's range */
    CP_HOT_PART_WHOLE,          /* hot=True, all of it: no longer than the tail's limit */
    CP_HOT_PART_TAIL,           /* hot=True: the last hot_max bytes */
    CP_HOT_PART_OTHER,          /* hot=True of a buffer not cleared lately: the
                                   last hot_max_other bytes */
    /* threads_why */
    CP_THREADS_GIVEN = 0,       /* the caller's number */
    CP_THREADS_ONE = 1,         /* "auto": one (below thread_min, or one CPU) */
    CP_THREADS_BY_SIZE,         /* "auto": one per half thread_min, up to the cap */
    CP_THREADS_SMALL_PIECES,    /* "auto": one, the pieces being small */
    /* adapt_why: whether the learner is asked, and if not, why */
    CP_LEARNER_ASKED = 1,       /* adaptive: it chooses a role, the clear is timed */
    CP_LEARNER_METHOD,          /* a routine was named */
    CP_LEARNER_HINT,            /* a hot= hint, never overridden */
    CP_LEARNER_HISTORY,         /* hot=True: the buffer's history (cp_policy_hot_all)
                                   sets the tail's length */
    CP_LEARNER_JOB,             /* several pieces or threads: only single clears on
                                   one thread are timed */
    CP_LEARNER_FORCED,          /* CLEARPAGES_METHOD */
    CP_LEARNER_NO_BAND,         /* no adaptive band (one routine: nothing to choose) */
    CP_LEARNER_OFF,             /* adaptation is off (adapt_active 0) */
    CP_LEARNER_OUTSIDE,         /* outside the adaptive band */
    /* untouched_why */
    CP_UNTOUCHED_LOOK = 1,      /* the work is at least untouched_min */
    CP_UNTOUCHED_SMALL,         /* less work than untouched_min */
    CP_UNTOUCHED_NEVER,         /* untouched_min 0: never looked for */
    /* learned: the learner's own reason for the role it runs; the policy
     * leaves CP_LEARNED_NONE, the learner's API fills it (adapt.h). */
    CP_LEARNED_NONE = 0
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
    /* Why, one reason code each: CP_WHY_*, CP_HOT_PART_*, CP_THREADS_*,
     * CP_LEARNER_*, CP_UNTOUCHED_* (above). */
    int why, hot_why, threads_why, adapt_why, untouched_why;
    int learned;                /* the learner's, CP_LEARNED_NONE from the policy */
    int one_by_one;             /* 1: more than one piece, under
                                   CP_POLICY_PIECE_DIRECT on average, on one thread,
                                   no look for untouched pages (under
                                   CP_POLICY_PIECE_FINE: whatever the look): cleared
                                   one by one as they come, not as a job */
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

/* hot=True of nbytes at addr: which hint to decide it with.
 * CP_POLICY_HOT_ALL_OTHER where the two tails differ for this size and the
 * learner has not seen the buffer cleared lately (it is probably not in
 * the cache; the learner remembers this clear); else CP_POLICY_HOT_ALL.
 * addr NULL (plan()): by the size alone, the answer for a buffer cleared
 * just before, where one of that size can be cleared again soon. */
int cp_policy_hot_all(const struct cp_policy *p, const void *addr, size_t nbytes);

/* 1 when cp_policy_decide would send a single auto clear of nbytes on one
 * thread (threads=1, no hot= hint) to the learner and then to one direct
 * call of the routine: adaptive, no look for untouched pages, no longer
 * than the unit.  The binding asks cp_policy_learner_direct_inline (below);
 * this is the same rule, exported for the tests, which hold it against
 * the decisions. */
int cp_policy_learner_direct(const struct cp_policy *p, size_t nbytes);

/* END CDEF */

/* Whether work of nbytes looks for untouched pages first: the rule behind
 * a decision's skip_untouched, inline for the scans (is_zero,
 * nonzero_pages), which ask it of every call, where a whole decision
 * would cost a tenth of a small one. */
static inline int cp_policy_looks_untouched(const struct cp_policy *p, size_t nbytes)
{
    return p->untouched_min && nbytes >= p->untouched_min;
}

/* Whether a piece of piece bytes goes to memset: up to vector_max, as
 * glibc's memset keeps to vector stores up to its rep_stosb_threshold. */
static inline int cp_policy_memset_piece(const struct cp_policy *p, size_t piece)
{
    return piece <= p->vector_max;
}

/* The routine of one of the learner's roles (CP_ADAPT_TEMPORAL,
 * CP_ADAPT_STREAMING) for nbytes: what the static policy runs below
 * vector_max and below, else the temporal routine; the streaming one. */
static inline int cp_policy_role(const struct cp_policy *p, size_t nbytes, int role)
{
    return role == CP_ADAPT_STREAMING ? p->streaming
           : cp_policy_memset_piece(p, nbytes) ? p->memset : p->temporal;
}

/* The unit of work on one thread: the configured one, a page at least. */
static inline size_t cp_policy_unit_alone(const struct cp_policy *p)
{
    return p->unit < CP_POLICY_MIN_UNIT ? CP_POLICY_MIN_UNIT : p->unit;
}

/* cp_policy_learner_direct, inline: the binding asks it before every
 * single auto clear, so that a buffer the learner handed its next clears
 * to (cp_adapt_fast_take) runs its role's routine without a whole
 * decision, which costs more than the rest of the call's native work.
 * The conjunction of the rules of cp_policy_decide that lead there, for
 * one piece on one given thread without a hint: learner_for's
 * CP_LEARNER_ASKED, untouched_for's no look, unit_for's one unit. */
static inline int cp_policy_learner_direct_inline(const struct cp_policy *p, size_t nbytes)
{
    return p->forced < 0 && p->adapt_active && p->adapt_min < p->adapt_max
           && nbytes >= p->adapt_min && nbytes < p->adapt_max
           && !cp_policy_looks_untouched(p, nbytes) && nbytes <= cp_policy_unit_alone(p);
}

#endif
