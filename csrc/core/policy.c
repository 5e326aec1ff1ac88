/*
 * The policy of "auto" (policy.h).  Each rule below is the only statement
 * of it; the numbers it reads, and the reasons for them, are computed in
 * clearpages/_policy.py.
 */
#include "clearpages.h"
#include "adapt.h"
#include "policy.h"

static int is_temporal(const struct cp_policy *p, int routine)
{
    return routine >= 0 && routine < 32 && (p->temporal_set >> routine & 1u);
}

/* The routine "auto" runs for nbytes in count pieces on threads threads,
 * and the rule that chose it (*why): streaming at or above nt_min (all
 * pieces together; the long routine instead for pieces of long_min or more
 * on one thread), memset up to vector_max a piece (as glibc's memset uses
 * its vector stores up to its rep_stosb_threshold), the temporal routine
 * between; memset for pieces under CP_POLICY_PIECE_FINE on average, whatever
 * their total; a forced one always. */
static int small_pieces(size_t nbytes, size_t count)
{
    return count > 1 && nbytes / count < CP_POLICY_PIECE_FINE;
}

static int route(const struct cp_policy *p, size_t nbytes, size_t count, int threads,
                 int *why)
{
    int r;
    if (p->forced >= 0) {
        *why = CP_WHY_FORCED;
        return p->forced;
    }
    if (small_pieces(nbytes, count)) {
        /* Each piece costs a routine's start; a streaming store of part of
         * a cache line costs more than it saves. */
        r = p->memset;
        *why = CP_WHY_SMALL_PIECES;
    } else if (nbytes >= p->nt_min) {
        int long_ = p->long_routine >= 0 && threads == 1 && nbytes / count >= p->long_min;
        r = long_ ? p->long_routine : p->streaming;
        *why = long_ ? CP_WHY_LONG : CP_WHY_STREAMING;
    } else if (cp_policy_memset_piece(p, nbytes / count)) {
        r = p->memset;
        *why = p->vector_max >= p->nt_min ? CP_WHY_MEMSET_BELOW_NT : CP_WHY_MEMSET;
    } else {
        r = p->temporal;
        *why = CP_WHY_TEMPORAL;
    }
    if (r == p->memset && p->memset == p->temporal && p->temporal == p->streaming)
        *why = CP_WHY_ONE_ROUTINE;      /* a portable build: memset at every size */
    return r;
}

/* threads="auto": one thread below thread_min, then one per half of it, at
 * most the cap (the thresholds', the CPUs this process may run on, and what
 * a job takes); threads given: those. */
static int threads_for(const struct cp_policy *p, size_t nbytes, int threads, int *why)
{
    if (threads != CP_POLICY_THREADS_AUTO) {
        *why = CP_THREADS_GIVEN;
        return threads;
    }
    int most = p->max_threads > 0 && p->max_threads < p->cores ? p->max_threads : p->cores;
    if (most > CP_MAX_THREADS)
        most = CP_MAX_THREADS;
    if (most <= 1 || nbytes < p->thread_min) {
        *why = CP_THREADS_ONE;
        return 1;
    }
    *why = CP_THREADS_BY_SIZE;
    size_t half = p->thread_min / 2;
    size_t t = nbytes / (half ? half : 1);
    return (int)(t < 1 ? 1 : t > (size_t)most ? (size_t)most : t);
}

/* Whatever the routine: a page never touched reads as zero already, and
 * writing it costs a fault and a page.  Below untouched_min a resident
 * buffer would pay the look's few microseconds for too little. */
static void untouched_for(const struct cp_policy *p, size_t work, struct cp_decision *out)
{
    out->skip_untouched = cp_policy_looks_untouched(p, work);
    out->untouched_why = !p->untouched_min ? CP_UNTOUCHED_NEVER
                       : out->skip_untouched ? CP_UNTOUCHED_LOOK : CP_UNTOUCHED_SMALL;
}

/* The unit of work: the configured one on one thread; smaller when threads
 * share the work, so that each gets several units and a slow thread does
 * not hold the rest; whole pages always. */
static size_t unit_for(const struct cp_policy *p, size_t nbytes, int threads)
{
    const size_t page = CP_POLICY_MIN_UNIT;
    size_t unit = cp_policy_unit_alone(p);
    if (threads <= 1)
        return unit;
    size_t share = (nbytes + 4 * (size_t)threads - 1) / (4 * (size_t)threads);
    share = (share + page - 1) / page * page;
    if (share > unit)
        share = unit;
    return share < page ? page : share;
}

/* hot=True of nbytes: does the buffer's history set the tail?  Only while
 * adapting (the learner keeps the history), and only where the two tails
 * differ for this size. */
static int history_matters(const struct cp_policy *p, size_t nbytes)
{
    return p->adapt_active && nbytes > p->hot_max_other && p->hot_max_other < p->hot_max;
}

/* Single clears on one thread in the band ask the learner while adaptation
 * is on; each other case says why not, the first that holds. */
static int learner_for(const struct cp_policy *p, size_t nbytes, size_t count, int method,
                       int threads, int hot)
{
    if (method != CP_POLICY_AUTO)
        return CP_LEARNER_METHOD;
    if (hot == CP_POLICY_HOT_ALL || hot == CP_POLICY_HOT_ALL_OTHER)
        return history_matters(p, nbytes) ? CP_LEARNER_HISTORY : CP_LEARNER_HINT;
    if (hot)
        return CP_LEARNER_HINT;
    /* A job's time is not one routine's. */
    if (count > 1 || threads > 1)
        return CP_LEARNER_JOB;
    if (p->forced >= 0)
        return CP_LEARNER_FORCED;
    if (p->adapt_min >= p->adapt_max)
        return CP_LEARNER_NO_BAND;
    if (!p->adapt_active)
        return CP_LEARNER_OFF;
    if (nbytes < p->adapt_min || nbytes >= p->adapt_max)
        return CP_LEARNER_OUTSIDE;
    return CP_LEARNER_ASKED;
}

void cp_policy_decide(const struct cp_policy *p, size_t nbytes, size_t count,
                      int method, int threads, int hot, size_t hot_nbytes,
                      struct cp_decision *out)
{
    if (count == 0)
        count = 1;
    /* The learner's two routines for this size: what the static policy
     * runs below nt_min, and the streaming one. */
    out->roles[CP_ADAPT_TEMPORAL] = cp_policy_role(p, nbytes, CP_ADAPT_TEMPORAL);
    out->roles[CP_ADAPT_STREAMING] = cp_policy_role(p, nbytes, CP_ADAPT_STREAMING);
    out->hot_routine = CP_POLICY_NONE;
    out->hot_nbytes = 0;
    out->hot_why = CP_HOT_PART_NONE;
    out->learned = CP_LEARNED_NONE;
    out->one_by_one = 0;
    if (hot == CP_POLICY_NOT_SOON) {
        /* Not used soon: the routine of a hot= clear's rest, over it all. */
        out->routine = p->forced >= 0 ? p->forced
                     : method == CP_POLICY_AUTO ? p->streaming : method;
        out->why = p->forced >= 0 ? CP_WHY_FORCED
                 : method == CP_POLICY_AUTO ? CP_WHY_NOT_SOON : CP_WHY_METHOD;
        out->threads = threads_for(p, nbytes, threads, &out->threads_why);
        out->unit = unit_for(p, nbytes, out->threads);
        untouched_for(p, nbytes, out);
    } else if (hot) {
        if (hot == CP_POLICY_HOT_ALL || hot == CP_POLICY_HOT_ALL_OTHER) {
            /* All of it is used next: what can stay in the cache beside the
             * program's other data (hot_max) is the hot range, at the end,
             * so that it is cleared last; the head before it streams.  A
             * buffer not cleared lately is probably not in the cache: its
             * ordinary-store clear reads each line in from memory first, so
             * less of it is worth that (hot_max_other). */
            size_t most = hot == CP_POLICY_HOT_ALL ? p->hot_max : p->hot_max_other;
            hot_nbytes = nbytes < most ? nbytes : most;
            out->hot_why = nbytes <= most ? CP_HOT_PART_WHOLE
                         : most < p->hot_max ? CP_HOT_PART_OTHER : CP_HOT_PART_TAIL;
        } else {
            out->hot_why = CP_HOT_PART_RANGE;
        }
        out->hot_nbytes = hot_nbytes;
        /* The rest streams (it is not read again soon); the hot range gets
         * ordinary stores, so it is in cache when the caller touches it. */
        size_t cold = nbytes - hot_nbytes;
        if (p->forced >= 0) {
            out->routine = out->hot_routine = p->forced;
            out->why = CP_WHY_FORCED;
        } else if (method == CP_POLICY_AUTO) {
            int unused;
            out->routine = p->streaming;
            int h = route(p, hot_nbytes, 1, 1, &unused);
            out->hot_routine = h == p->streaming && !is_temporal(p, h) ? p->temporal : h;
            out->why = CP_WHY_HOT;
        } else {
            out->routine = method;
            out->hot_routine = is_temporal(p, method) ? method : p->temporal;
            out->why = CP_WHY_METHOD;
        }
        out->threads = threads_for(p, cold, threads, &out->threads_why);
        out->unit = unit_for(p, cold, out->threads);
        /* With a hot range: the rest must be that large. */
        untouched_for(p, cold, out);
    } else {
        out->threads = threads_for(p, nbytes, threads, &out->threads_why);
        if (threads == CP_POLICY_THREADS_AUTO && small_pieces(nbytes, count)) {
            out->threads = 1;           /* cleared as they come, on the calling thread */
            out->threads_why = CP_THREADS_SMALL_PIECES;
        }
        if (method == CP_POLICY_AUTO) {
            out->routine = route(p, nbytes, count, out->threads, &out->why);
        } else {
            out->routine = method;
            out->why = CP_WHY_METHOD;
        }
        out->unit = unit_for(p, nbytes, out->threads);
        untouched_for(p, nbytes, out);
        /* Pieces cleared one by one as they come, whoever chose the routine:
         * a job's bookkeeping (a sorted copy of the list, a position per
         * extent, its slices' clock reads) costs 10-20 ns an extent and a
         * few hundred a call, more than a small piece's clear, and made the
         * rows of a 2-D slice (`a[:, :k]`, 512 B-4 KiB a row) cost 1.4-2.7
         * times numpy's fill on the Intel guest.  Up to PIECE_DIRECT a piece
         * on average, where the pages are not looked at for untouched ones
         * (the job's); small pieces whatever the look. */
        out->one_by_one = out->threads == 1 && count > 1
                          && (small_pieces(nbytes, count)
                              || (nbytes / count < CP_POLICY_PIECE_DIRECT
                                  && !out->skip_untouched));
    }
    out->adapt_why = learner_for(p, nbytes, count, method, out->threads, hot);
    out->adaptive = out->adapt_why == CP_LEARNER_ASKED;
}

int cp_policy_hot_all(const struct cp_policy *p, const void *addr, size_t nbytes)
{
    if (!history_matters(p, nbytes))
        return CP_POLICY_HOT_ALL;
    return cp_adapt_recent(addr, nbytes) == 0 ? CP_POLICY_HOT_ALL_OTHER : CP_POLICY_HOT_ALL;
}

int cp_policy_learner_direct(const struct cp_policy *p, size_t nbytes)
{
    return cp_policy_learner_direct_inline(p, nbytes);
}
