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

/* The routine "auto" runs for nbytes in count pieces on threads threads:
 * streaming at or above nt_min (all pieces together; the long routine
 * instead for pieces of long_min or more on one thread), memset below
 * vector_max a piece, the temporal routine between; a forced one always. */
static int route(const struct cp_policy *p, size_t nbytes, size_t count, int threads)
{
    if (p->forced >= 0)
        return p->forced;
    if (nbytes >= p->nt_min) {
        if (p->long_routine >= 0 && threads == 1 && nbytes / count >= p->long_min)
            return p->long_routine;
        return p->streaming;
    }
    return nbytes / count < p->vector_max ? p->memset : p->temporal;
}

/* threads="auto": one thread below thread_min, then one per half of it, at
 * most the cap (the thresholds', the CPUs this process may run on, and what
 * a job takes). */
static int auto_threads(const struct cp_policy *p, size_t nbytes)
{
    int most = p->max_threads > 0 && p->max_threads < p->cores ? p->max_threads : p->cores;
    if (most > CP_MAX_THREADS)
        most = CP_MAX_THREADS;
    if (most <= 1 || nbytes < p->thread_min)
        return 1;
    size_t half = p->thread_min / 2;
    size_t t = nbytes / (half ? half : 1);
    return (int)(t < 1 ? 1 : t > (size_t)most ? (size_t)most : t);
}

/* The unit of work: the configured one on one thread; smaller when threads
 * share the work, so that each gets several units and a slow thread does
 * not hold the rest; whole pages always. */
static size_t unit_for(const struct cp_policy *p, size_t nbytes, int threads)
{
    const size_t page = CP_POLICY_MIN_UNIT;
    size_t unit = p->unit < page ? page : p->unit;
    if (threads <= 1)
        return unit;
    size_t share = (nbytes + 4 * (size_t)threads - 1) / (4 * (size_t)threads);
    share = (share + page - 1) / page * page;
    if (share > unit)
        share = unit;
    return share < page ? page : share;
}

void cp_policy_decide(const struct cp_policy *p, size_t nbytes, size_t count,
                      int method, int threads, int hot, size_t hot_nbytes,
                      struct cp_decision *out)
{
    if (count == 0)
        count = 1;
    /* The learner's two routines for this size: what the static policy
     * runs below nt_min, and the streaming one. */
    out->roles[CP_ADAPT_TEMPORAL] = nbytes < p->vector_max ? p->memset : p->temporal;
    out->roles[CP_ADAPT_STREAMING] = p->streaming;
    out->adaptive = 0;
    out->hot_routine = CP_POLICY_NONE;
    out->hot_nbytes = 0;
    /* Whatever the routine: a page never touched reads as zero already, and
     * writing it costs a fault and a page.  Below untouched_min a resident
     * buffer would pay the look's few microseconds for too little.  (With a
     * hot range: the rest must be that large, below.) */
    out->skip_untouched = p->untouched_min && nbytes >= p->untouched_min;
    if (hot == CP_POLICY_NOT_SOON) {
        /* Not used soon: the routine of a hot= clear's rest, over it all. */
        out->routine = p->forced >= 0 ? p->forced
                     : method == CP_POLICY_AUTO ? p->streaming : method;
        out->threads = threads == CP_POLICY_THREADS_AUTO ? auto_threads(p, nbytes) : threads;
        out->unit = unit_for(p, nbytes, out->threads);
        return;
    }
    if (hot == CP_POLICY_HOT_ALL || hot == CP_POLICY_HOT_ALL_OTHER) {
        /* All of it is used next: what can stay in the cache beside the
         * program's other data (hot_max) is the hot range, at the end, so
         * that it is cleared last; the head before it streams.  A buffer
         * not cleared lately is probably not in the cache: its ordinary-
         * store clear reads each line in from memory first, so less of it
         * is worth that (hot_max_other). */
        size_t most = hot == CP_POLICY_HOT_ALL ? p->hot_max : p->hot_max_other;
        hot_nbytes = nbytes < most ? nbytes : most;
    }
    if (hot) {
        out->hot_nbytes = hot_nbytes;
        /* The rest streams (it is not read again soon); the hot range gets
         * ordinary stores, so it is in cache when the caller touches it. */
        size_t cold = nbytes - hot_nbytes;
        if (p->forced >= 0) {
            out->routine = out->hot_routine = p->forced;
        } else if (method == CP_POLICY_AUTO) {
            out->routine = p->streaming;
            int h = route(p, hot_nbytes, 1, 1);
            out->hot_routine = h == p->streaming && !is_temporal(p, h) ? p->temporal : h;
        } else {
            out->routine = method;
            out->hot_routine = is_temporal(p, method) ? method : p->temporal;
        }
        out->threads = threads == CP_POLICY_THREADS_AUTO ? auto_threads(p, cold) : threads;
        out->unit = unit_for(p, cold, out->threads);
        out->skip_untouched = p->untouched_min && cold >= p->untouched_min;
        return;
    }
    out->threads = threads == CP_POLICY_THREADS_AUTO ? auto_threads(p, nbytes) : threads;
    out->routine = method == CP_POLICY_AUTO ? route(p, nbytes, count, out->threads) : method;
    out->unit = unit_for(p, nbytes, out->threads);
    /* Only single clears on one thread are timed: a job's time is not one
     * routine's. */
    out->adaptive = method == CP_POLICY_AUTO && p->forced < 0 && count == 1
        && out->threads == 1 && nbytes >= p->adapt_min && nbytes < p->adapt_max;
}
