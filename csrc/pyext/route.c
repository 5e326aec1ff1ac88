/*
 * The routing "auto" follows, from the numbers Python configured: which
 * routine, how many threads, what unit of work per job step.
 */
#include "fast.h"

/* The routine "auto" runs for nbytes in count pieces: the mirror of
 * clearpages._policy.Routing.pick, from the numbers it configured. */
int route(size_t nbytes, size_t count, int threads)
{
    if (cfg.forced >= 0)
        return cfg.forced;
    if (nbytes >= cfg.nt_min) {
        if (cfg.long_idx >= 0 && threads == 1 && count && nbytes / count >= cfg.long_min)
            return cfg.long_idx;
        return cfg.streaming;
    }
    if ((count ? nbytes / count : 0) < cfg.vector_max)
        return cfg.small;
    return cfg.temporal;
}

/* threads="auto": one thread below thread_min, then one per half of it,
 * up to the CPUs Python counted and never more than a job takes (a
 * machine may have more CPUs than CP_MAX_THREADS). */
int auto_threads(size_t nbytes)
{
    size_t most = (size_t)cfg.most_threads, half = cfg.thread_min / 2;
    if (most > CP_MAX_THREADS)
        most = CP_MAX_THREADS;
    if (most <= 1 || nbytes < cfg.thread_min)
        return 1;
    size_t t = nbytes / (half ? half : 1);
    return (int)(t < 1 ? 1 : t > most ? most : t);
}

size_t chunk_for(size_t nbytes, int threads)
{
    if (threads <= 1)
        return cfg.chunk;
    size_t share = (nbytes + 4 * (size_t)threads - 1) / (4 * (size_t)threads);
    share = (share + SPLIT - 1) / SPLIT * SPLIT;
    if (share > cfg.chunk)
        share = cfg.chunk;
    return share < SPLIT ? SPLIT : share;
}

/* The routines of a clear with a hot range of hot_nbytes: the rest (cold)
 * and the hot range, which gets ordinary stores (the mirror of
 * clearpages._policy.Routing.hot).  idx: a routine index or AUTO. */
void hot_routes(int idx, size_t hot_nbytes, int *cold, int *hot)
{
    if (cfg.forced >= 0) {
        *cold = *hot = cfg.forced;
    } else if (idx == AUTO) {
        *cold = cfg.streaming;
        *hot = route(hot_nbytes, 1, 1);
        if (*hot == cfg.streaming && !cfg.r[*hot].temporal)
            *hot = cfg.temporal;
    } else {
        *cold = idx;
        *hot = cfg.r[idx].temporal ? idx : cfg.temporal;
    }
}
