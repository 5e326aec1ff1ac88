/*
 * Pools (pool.h): blocks zeroed by a native thread off the program's
 * critical path.
 *
 * One lock per pool orders every change of state.  Nobody holds it while
 * zeroing, faulting in or making a system call: a block being worked on
 * is "busy", known to the one thread that took it, and comes back under
 * the lock.  The ready, dirty and fresh blocks are three stacks of
 * indices, so taking and giving are a few instructions under the lock.
 *
 * The memory is mapped in chunks of whole blocks (region.c), found again
 * by address through a table sorted by address (a numpy array's free
 * hands back a pointer and nothing else).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "clearpages.h"
#include "clock.h"
#include "inject.h"
#include "pool.h"
#include "region.h"
#include "scan.h"

enum { FRESH = 0, READY = 1, DIRTY = 2, STACKS = 3, BUSY = 3, OUT = 4 };

/* What the thread is doing, for whoever might wake it. */
enum { AWAKE = 0, IDLE = 1, PACING = 2 };

/* What the thread does next. */
enum { NOTHING, ZERO, POPULATE, GROW };

/* A caller that finds no block ready raises the number the thread keeps
 * ready flat out by one, up to this much memory (at least one block); a
 * second without such a caller halves the rise.  So a program that takes
 * blocks faster than the pace, or than the thread is woken and scheduled,
 * soon finds them ready, and the pace holds for the rest. */
#define BOOST_MAX_BYTES (64u << 20)
#define BOOST_DECAY_NS 1000000000u

/* Reuse: where a block given back is zeroed.
 *
 * Cold, the thread's way: the block goes on the dirty stack, the thread
 * streams zeros over it, and the program's next acquire takes whatever
 * block is ready, out of the cache, so every line the program then writes
 * is read from memory first.  Hot: the releaser zeroes the block at once
 * with ordinary stores (zero_near), while the lines the program wrote are
 * still in the cache, and puts it on top of the ready stack, where the
 * next acquire takes it; what glibc's heap does with a freed chunk, which
 * the next calloc zeroes in the cache.  Hot puts the zeroing on the
 * program's path, where a plain allocator has it too; cold takes it off,
 * and pays where the program writes a small part of each block (the
 * thread zeroes the rest on another core meanwhile), but loses where it
 * writes most of it and takes the next soon.  On the Intel guest, numpy
 * arrays of 512 KiB-16 MiB under zeroed_arrays, made, written and dropped
 * in 36 loops (bench/pool_reuse.py, docs/results.md): cold 0.46-6.9 times
 * plain np.zeros, hot 0.22-1.09, and cold well below hot only where a 4-16
 * MiB array is written a byte a page or by half, or four 16 MiB arrays are
 * alive at once (16 MiB a byte a page:
 * 0.54 against 1.01).
 *
 * So with reuse AUTO a pool whose blocks are near_tried (below the
 * streaming threshold, and up to hot_max: blocks the cache can keep)
 * starts hot, the side that cannot lose much against a plain allocator,
 * and tries cold from time to time, timing the program as a whole: the
 * time from one release to the one TRIAL_RUN releases later, whatever the
 * program did between (with several blocks out at once, one block's
 * acquire-to-release time would count the other blocks' zeroing).  A
 * trial comes GAP_FIRST releases after the pool starts, then after
 * GAP_AFTER, four times that after each trial, up to GAP_MOST (back to
 * GAP_AFTER where the verdict changed), so that what the trials cost in
 * the dearer way is a few percent of a long program.  A trial times runs
 * of TRIAL_RUN releases, cold and hot in turn; between a cold run and the
 * hot one, hot releases go untimed until the thread has zeroed what the
 * cold run gave it (its work would slow the hot run and flatter the cold
 * one).  With EARLY_SAMPLES runs of each, a median above EARLY_FACTOR
 * times the other's settles at once (the rest would pay for the dearer
 * way again); with TRIAL_SAMPLES of each, the pool goes cold where the
 * median cold run is below REUSE_MARGIN times the median hot one (cold is
 * the gamble: the thread's work on the last blocks of each cold run is
 * timed in no run), hot otherwise, and hot where TRIAL_MOST releases
 * bring no verdict.
 *
 * Between trials, two signs bring one at once.  Settled hot, a hot zero of
 * a block zeroed hot before that costs more per byte than REUSE_OUT times
 * a streaming zero (the thread's or a caller's): the block was out of the
 * cache, where hot keeps nothing for the program (once until the next
 * verdict: hot may still win, the program's writes then finding some of
 * the block in the cache).  Settled cold, WATCH_STRAYS windows of
 * TRIAL_RUN releases in a row above WATCH_FACTOR times the cold runs' time
 * a release, or below it by as much: the program changed.  Until the
 * thread or a caller has zeroed a block with streaming stores (the
 * reference), blocks given back go cold. */
enum { TRIAL_RUN = 4, TRIAL_SAMPLES = 5, EARLY_SAMPLES = 3, TRIAL_MOST = 256,
       GAP_FIRST = 16, GAP_AFTER = 64, GAP_MOST = 4096, WATCH_STRAYS = 3 };
#define REUSE_MARGIN 0.9
#define REUSE_OUT 1.5
#define EARLY_FACTOR 1.5
#define WATCH_FACTOR 1.5

/* A trial's phases: a run of cold releases, hot releases until the thread
 * has zeroed what the cold run gave it (not timed), a run of hot ones. */
enum { T_NONE = 0, T_COLD, T_SETTLE, T_HOT };

/* Per block: zeroed hot at its release (ready), or taken so (out). */
struct use {
    int hot;
};

struct chunk {
    uintptr_t base;
    size_t nblocks;
    size_t first;               /* index of its first block */
};

struct cp_pool {
    struct cp_pool_config cfg;
    pthread_mutex_t lock;
    pthread_cond_t work;        /* the thread waits here */
    pthread_cond_t changed;     /* callers wait here */
    pthread_t thread;
    int thread_running;
    atomic_int refs;

    size_t nblocks, room;       /* blocks mapped; room in the arrays */
    uintptr_t *addr;            /* each block's address */
    unsigned char *state;
    size_t *stack[STACKS];      /* fresh, ready, dirty: indices */
    size_t count[STACKS];       /* written under the lock, read by the thread without */
    struct chunk *chunks;       /* sorted by base */
    size_t nchunks, chunk_room;
    size_t out;
    size_t callers_busy;        /* blocks callers work on, and a caller's growing */
    int thread_busy;            /* the thread works on a block */
    int thread_asleep;          /* AWAKE, IDLE (nothing to do) or PACING (waiting for
                                   its pace): see wake_thread */
    int growing;
    int thread_failed;          /* the thread's last populate or grow failed:
                                   it leaves them until something changes */
    atomic_size_t waiters;
    atomic_uint_least64_t max_rate;
    atomic_size_t low_water;
    size_t boost;               /* added to low_water while callers find none ready */
    size_t boost_max;
    uint64_t last_miss;         /* when a caller last found none ready */
    atomic_int stop;
    int closed;                 /* 1 closed; 2 closed, memory kept until the last block */
    int unmapped;
    int forked;
    uint64_t pace_next;         /* the thread's next paced step starts no earlier */
    struct cp_pool_stats s;     /* the counters (the counts are filled in by cp_pool_stats) */

    /* Reuse (above). */
    struct use *use;            /* per block */
    int tracking;               /* reuse AUTO, and blocks small enough to try hot */
    int hot;                    /* settled: hot (also in s.reuse_hot) */
    int trial;                  /* T_*: the trial's phase */
    uint32_t trial_done;        /* ... its releases so far */
    uint32_t run_left;          /* ... releases left in its timed run */
    uint64_t run_start;         /* ... and the run's first release's time */
    uint32_t nsamp[2];          /* ... runs timed, cold [0] and hot [1] */
    double samp[2][TRIAL_SAMPLES];  /* ... ns a release in each */
    uint32_t settle_left;       /* settled: releases until the next trial */
    uint32_t gap;
    int out_seen;               /* settled hot: a hot zero found a block out of the cache */
    double ref;                 /* settled cold: ns a release in its trial's cold runs */
    uint32_t watch_left;        /* ... releases left in the watch's window */
    uint64_t watch_start;       /* ... and the window's first release's time */
    int strays;                 /* ... windows in a row above ref (> 0) or below it
                                   (< 0) by WATCH_FACTOR */
    uint64_t caller_zero_ns;    /* callers' time zeroing (s.caller_zeroed_bytes) */

    struct cp_pool *next, *prev;    /* every pool of the process, for fork */
};

/* ---- every pool of the process, for fork ------------------------------- */

static pthread_mutex_t pools_lock = PTHREAD_MUTEX_INITIALIZER;
static struct cp_pool *pools;
static pthread_once_t fork_once = PTHREAD_ONCE_INIT;

/* Fork with every pool's lock held, so the child's copy of each is
 * consistent; the child has none of the parent's threads, so there every
 * pool is a copy that hands nothing out. */
static void fork_prepare(void)
{
    pthread_mutex_lock(&pools_lock);
    for (struct cp_pool *p = pools; p; p = p->next)
        pthread_mutex_lock(&p->lock);
}

static void fork_parent(void)
{
    for (struct cp_pool *p = pools; p; p = p->next)
        pthread_mutex_unlock(&p->lock);
    pthread_mutex_unlock(&pools_lock);
}

static void fork_child(void)
{
    for (struct cp_pool *p = pools; p; p = p->next) {
        p->forked = 1;
        p->thread_running = 0;
        atomic_store(&p->waiters, 0);
        /* Waiters of the parent's threads are not here: new condition
         * variables, with no record of them (not destroyed first: glibc's
         * pthread_cond_destroy waits for waiters that will never wake). */
        memset(&p->work, 0, sizeof p->work);
        memset(&p->changed, 0, sizeof p->changed);
        pthread_condattr_t attr;
        pthread_condattr_init(&attr);
        pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
        pthread_cond_init(&p->work, &attr);
        pthread_cond_init(&p->changed, &attr);
        pthread_condattr_destroy(&attr);
        pthread_mutex_unlock(&p->lock);
    }
    pthread_mutex_unlock(&pools_lock);
}

static void register_fork(void)
{
    cp_at_fork(fork_prepare, fork_parent, fork_child);
}

/* ---- small helpers -------------------------------------------------------- */

static uint64_t now_ns(void)
{
    return cp_now_ns();
}

static void deadline_of(uint64_t ns, struct timespec *ts)
{
    ts->tv_sec = (time_t)(ns / 1000000000u);
    ts->tv_nsec = (long)(ns % 1000000000u);
}

static size_t load_count(struct cp_pool *p, int which)
{
    return __atomic_load_n(&p->count[which], __ATOMIC_RELAXED);
}

static void push(struct cp_pool *p, int which, size_t i)
{
    p->state[i] = (unsigned char)which;
    p->stack[which][p->count[which]] = i;
    __atomic_store_n(&p->count[which], p->count[which] + 1, __ATOMIC_RELAXED);
}

/* A block the thread made ready goes under a block zeroed hot at the
 * top of the ready stack, which the next acquire is to take while the
 * cache still holds it. */
static void push_ready(struct cp_pool *p, size_t i)
{
    push(p, READY, i);
    size_t n = p->count[READY];
    if (n >= 2 && p->use[p->stack[READY][n - 2]].hot) {
        p->stack[READY][n - 1] = p->stack[READY][n - 2];
        p->stack[READY][n - 2] = i;
    }
}

static size_t pop(struct cp_pool *p, int which)
{
    size_t n = p->count[which] - 1;
    __atomic_store_n(&p->count[which], n, __ATOMIC_RELAXED);
    size_t i = p->stack[which][n];
    p->state[i] = BUSY;
    return i;
}

static size_t low_water(struct cp_pool *p)
{
    return atomic_load_explicit(&p->low_water, memory_order_relaxed);
}

/* The blocks the thread keeps ready flat out: low_water and its rise,
 * never more than the pool may hold (a target it could never meet would
 * keep it flat out for good). */
static size_t ready_target(struct cp_pool *p)
{
    size_t t = low_water(p) + __atomic_load_n(&p->boost, __ATOMIC_RELAXED);
    return p->cfg.max_blocks && t > p->cfg.max_blocks ? p->cfg.max_blocks : t;
}

/* The thread (or a waiting caller) wants work done now, not at the pace:
 * someone waits, or fewer blocks are ready than low_water and its rise. */
static int in_demand(struct cp_pool *p)
{
    return atomic_load_explicit(&p->waiters, memory_order_relaxed) > 0
        || load_count(p, READY) < ready_target(p);
}

static int may_grow(const struct cp_pool *p);

/* What the thread does next (lock held): zero a block given back (at the
 * pace, unless in demand; not at all at max_rate 0 unless in demand), or
 * below low_water fault in a fresh block or map more. */
static int next_task(struct cp_pool *p)
{
    int need = p->count[READY] < low_water(p) && !p->thread_failed;
    if (p->count[DIRTY] && (atomic_load(&p->max_rate) || in_demand(p)))
        return ZERO;
    if (need && p->count[FRESH])
        return POPULATE;
    if (need && may_grow(p) && !p->closed)
        return GROW;
    return NOTHING;
}

/* Wake the thread only where that changes what it does: a signal costs a
 * system call on the caller's path.  An idle thread is woken where it has
 * work now; a pacing one where the work cannot wait for its next look (a
 * caller waits, or fewer than low_water are ready): a rise of the mark
 * alone it notices at its next step. */
static int thread_wanted(struct cp_pool *p)
{
    return (p->thread_asleep == IDLE && next_task(p) != NOTHING)
        || (p->thread_asleep == PACING
            && (atomic_load_explicit(&p->waiters, memory_order_relaxed) > 0
                || p->count[READY] < low_water(p)));
}

static void wake_thread(struct cp_pool *p)
{
    if (thread_wanted(p))
        pthread_cond_signal(&p->work);
}

/* Wake it whatever it does (its pace changed, blocks changed state under it). */
static void nudge_thread(struct cp_pool *p)
{
    if (p->thread_asleep)
        pthread_cond_signal(&p->work);
}

/* A caller found no block ready (lock held).  At max_rate 0 the program
 * asked for blocks zeroed only when needed: no rise then; nor past
 * boost_max, or past what the capacity holds (the rise would only build up
 * and take longer to decay). */
static void missed(struct cp_pool *p, uint64_t now)
{
    if (p->boost < p->boost_max && atomic_load(&p->max_rate)
        && (!p->cfg.max_blocks || low_water(p) + p->boost < p->cfg.max_blocks))
        __atomic_store_n(&p->boost, p->boost + 1, __ATOMIC_RELAXED);
    p->last_miss = now;
}

/* The rise of the mark decays while no caller misses (lock held). */
static void settle_boost(struct cp_pool *p)
{
    if (!p->boost)
        return;
    uint64_t now = now_ns();
    if (now - p->last_miss >= BOOST_DECAY_NS) {
        __atomic_store_n(&p->boost, p->boost / 2, __ATOMIC_RELAXED);
        p->last_miss = now;
    }
}

static void wake_waiters(struct cp_pool *p)
{
    if (atomic_load_explicit(&p->waiters, memory_order_relaxed))
        pthread_cond_broadcast(&p->changed);
}

static int may_grow(const struct cp_pool *p)
{
    return !p->growing && (!p->cfg.max_blocks || p->nblocks < p->cfg.max_blocks);
}

/* The chunk holding addr, or NULL. */
static const struct chunk *chunk_of(const struct cp_pool *p, uintptr_t addr)
{
    size_t lo = 0, hi = p->nchunks;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        const struct chunk *c = &p->chunks[mid];
        if (addr < c->base)
            hi = mid;
        else if (addr - c->base >= c->nblocks * p->cfg.block_size)
            lo = mid + 1;
        else
            return c;
    }
    return NULL;
}

static void unmap_all(struct cp_pool *p)
{
    if (p->unmapped)
        return;
    for (size_t i = 0; i < p->nchunks; i++)
        cp_region_unmap(p->chunks[i].base, p->chunks[i].nblocks * p->cfg.block_size);
    p->unmapped = 1;
}

/* A closed pool lets its memory go with its last block. */
static void settle_closed(struct cp_pool *p)
{
    if (p->closed && !p->out && !p->callers_busy && !p->thread_busy && !p->growing
            && !p->forked)
        unmap_all(p);
}

/* ---- growing ---------------------------------------------------------- */

static int make_room(struct cp_pool *p, size_t more)
{
    size_t need = p->nblocks + more;
    if (need > p->room) {
        size_t room = p->room ? p->room : 16;
        while (room < need)
            room *= 2;
        uintptr_t *addr = realloc(p->addr, room * sizeof *addr);
        if (addr)
            p->addr = addr;
        unsigned char *state = realloc(p->state, room);
        if (state)
            p->state = state;
        struct use *use = realloc(p->use, room * sizeof *use);
        if (use) {
            memset(use + p->room, 0, (room - p->room) * sizeof *use);
            p->use = use;
        }
        int ok = addr && state && use;
        for (int k = 0; k < STACKS && ok; k++) {
            size_t *s = realloc(p->stack[k], room * sizeof *s);
            if (s)
                p->stack[k] = s;
            ok = s != NULL;
        }
        if (!ok)
            return ENOMEM;
        p->room = room;
    }
    if (p->nchunks == p->chunk_room) {
        size_t room = p->chunk_room ? 2 * p->chunk_room : 8;
        struct chunk *c = realloc(p->chunks, room * sizeof *c);
        if (!c)
            return ENOMEM;
        p->chunks = c;
        p->chunk_room = room;
    }
    return 0;
}

/* Map more blocks (fresh).  Called and returns with the lock held; drops
 * it for the system calls. */
static int grow(struct cp_pool *p)
{
    size_t n = p->cfg.grow_blocks ? p->cfg.grow_blocks : 1;
    if (p->cfg.max_blocks && n > p->cfg.max_blocks - p->nblocks)
        n = p->cfg.max_blocks - p->nblocks;
    size_t bs = p->cfg.block_size, size = n * bs;
    p->growing = 1;
    pthread_mutex_unlock(&p->lock);

    uintptr_t base = 0;
    int err = cp_inject_hit(CP_INJECT_POOL_GROW);
    if (!err)
        err = cp_region_map(size, p->cfg.page_size, p->cfg.kind, p->cfg.huge_shift, &base);
    if (!err && p->cfg.protect) {
        int failed;
        err = cp_region_protect(base, size, p->cfg.protect, &failed);
        if (err)
            cp_region_unmap(base, size);
    }

    pthread_mutex_lock(&p->lock);
    p->growing = 0;
    if (!err && (err = make_room(p, n)) != 0)
        cp_region_unmap(base, size);
    if (!err) {
        size_t at = p->nchunks;
        while (at > 0 && p->chunks[at - 1].base > base)
            at--;
        memmove(&p->chunks[at + 1], &p->chunks[at], (p->nchunks - at) * sizeof *p->chunks);
        p->chunks[at] = (struct chunk){base, n, p->nblocks};
        p->nchunks++;
        /* Pushed last first, so the lowest address is taken first. */
        for (size_t k = n; k-- > 0;) {
            p->addr[p->nblocks + k] = base + k * bs;
            push(p, FRESH, p->nblocks + k);
        }
        p->nblocks += n;
        p->s.grows++;
    }
    wake_waiters(p);
    return err;
}

/* ---- the thread ---------------------------------------------------------- */

/* Sleep until the paced step may start, or demand, or stop.  Lock held. */
static void pace_wait(struct cp_pool *p)
{
    struct timespec ts;
    deadline_of(p->pace_next, &ts);
    uint64_t rate = atomic_load(&p->max_rate);
    p->thread_asleep = PACING;
    while (!atomic_load(&p->stop) && !in_demand(p) && now_ns() < p->pace_next
           && atomic_load(&p->max_rate) == rate)
        if (pthread_cond_timedwait(&p->work, &p->lock, &ts) == ETIMEDOUT)
            break;
    p->thread_asleep = AWAKE;
    if (atomic_load(&p->max_rate) != rate)
        p->pace_next = 0;       /* a new pace starts now */
}

/* Zero block i in steps; at the pace unless in demand.  Called without the
 * lock; returns with it held. */
static void thread_zero(struct cp_pool *p, size_t i)
{
    const size_t bs = p->cfg.block_size, step = p->cfg.step ? p->cfg.step : bs;
    char *base = (char *)p->addr[i];
    uint64_t busy = 0, paced_bytes = 0, paced_ns = 0;
    size_t off = 0;
    pthread_mutex_unlock(&p->lock);
    while (off < bs && !atomic_load(&p->stop)) {
        size_t n = bs - off < step ? bs - off : step;
        uint64_t rate = atomic_load_explicit(&p->max_rate, memory_order_relaxed);
        int paced = rate && rate != UINT64_MAX && !in_demand(p);
        uint64_t t0 = now_ns();
        p->cfg.zero(base + off, n);
        uint64_t t1 = now_ns();
        busy += t1 - t0;
        off += n;
        if (!paced)
            continue;
        /* The pace: this step's bytes take n / rate seconds, counted from
         * when the last paced step was due (no credit saved up while idle). */
        if (p->pace_next < t0)
            p->pace_next = t0;
        p->pace_next += (uint64_t)((double)n * 1e9 / (double)rate);
        pthread_mutex_lock(&p->lock);
        pace_wait(p);
        pthread_mutex_unlock(&p->lock);
        paced_bytes += n;
        paced_ns += now_ns() - t0;
    }
    pthread_mutex_lock(&p->lock);
    p->s.zeroed_bytes += off;
    p->s.zero_ns += busy;
    p->s.paced_bytes += paced_bytes;
    p->s.paced_ns += paced_ns;
    if (off == bs)
        push_ready(p, i);
    else
        push(p, DIRTY, i);
}

static void *pool_thread(void *arg)
{
    struct cp_pool *p = arg;
    /* The thread runs at the program's own priority: as SCHED_BATCH (which a
     * wakeup never lets preempt anything) it waited a millisecond or more
     * for a CPU on a busy 2-CPU guest, where the program took the next block
     * 100 us later (docs/results.md).  What it may cost the program's other
     * work is bounded by the pace, not by the scheduler. */
    pthread_mutex_lock(&p->lock);
    while (!atomic_load(&p->stop)) {
        settle_boost(p);
        int task = next_task(p);
        if (task == ZERO) {
            p->thread_busy = 1;
            thread_zero(p, pop(p, DIRTY));
            p->thread_busy = 0;
            wake_waiters(p);
            settle_closed(p);
        } else if (task == POPULATE) {
            size_t i = pop(p, FRESH);
            p->thread_busy = 1;
            pthread_mutex_unlock(&p->lock);
            int err = cp_region_populate(p->addr[i], p->cfg.block_size, p->cfg.page_size,
                                         p->cfg.kind);
            pthread_mutex_lock(&p->lock);
            p->thread_busy = 0;
            if (err) {
                p->thread_failed = 1;
                p->s.error = err;
                push(p, FRESH, i);
            } else {
                p->s.populated_bytes += p->cfg.block_size;
                push_ready(p, i);
            }
            wake_waiters(p);
            settle_closed(p);
        } else if (task == GROW) {
            int err = grow(p);
            if (err) {
                p->thread_failed = 1;
                p->s.error = err;
            }
        } else {
            p->thread_asleep = IDLE;
            pthread_cond_wait(&p->work, &p->lock);
            p->thread_asleep = AWAKE;
        }
    }
    pthread_mutex_unlock(&p->lock);
    return NULL;
}

static int start_thread(struct cp_pool *p)
{
    sigset_t old;
    cp_block_async_signals(&old);
    int err = cp_inject_hit(CP_INJECT_POOL_THREAD);
    if (!err)
        err = pthread_create(&p->thread, NULL, pool_thread, p);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    p->thread_running = !err;
    return err;
}

/* Stop and join the thread.  Lock held on entry and on return. */
static void stop_thread(struct cp_pool *p)
{
    if (!p->thread_running)
        return;
    atomic_store(&p->stop, 1);
    pthread_cond_broadcast(&p->work);
    p->thread_running = 0;
    pthread_mutex_unlock(&p->lock);
    pthread_join(p->thread, NULL);
    pthread_mutex_lock(&p->lock);
}

/* ---- the calls -------------------------------------------------------------- */

int cp_pool_new(const struct cp_pool_config *config, struct cp_pool **out)
{
    const struct cp_pool_config *c = config;
    if (!c->zero || !c->block_size || !c->page_size || c->block_size % c->page_size
        || c->reuse < CP_POOL_REUSE_AUTO || c->reuse > CP_POOL_REUSE_HOT)
        return EINVAL;
    struct cp_pool *p = calloc(1, sizeof *p);
    if (!p)
        return ENOMEM;
    p->cfg = *c;
    atomic_init(&p->refs, 1);
    atomic_init(&p->max_rate, c->max_rate);
    atomic_init(&p->low_water, c->low_water);
    p->boost_max = BOOST_MAX_BYTES / c->block_size ? BOOST_MAX_BYTES / c->block_size : 1;
    p->tracking = c->reuse == CP_POOL_REUSE_AUTO && c->zero_near
        && c->near_tried;
    p->settle_left = GAP_FIRST;
    p->gap = GAP_AFTER;
    p->s.reuse_hot = p->hot = (c->reuse == CP_POOL_REUSE_HOT && c->zero_near) || p->tracking;
    p->s.reuse_tried = p->tracking;
    pthread_condattr_t attr;
    pthread_condattr_init(&attr);
    pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
    /* The lock is held for a few instructions at a time: a caller that finds
     * it taken spins a little before it sleeps, rather than pay two system
     * calls (its sleep, and the holder's wake) on its way to a block. */
    pthread_mutexattr_t lock_attr;
    pthread_mutexattr_init(&lock_attr);
    pthread_mutexattr_settype(&lock_attr, PTHREAD_MUTEX_ADAPTIVE_NP);
    pthread_mutex_init(&p->lock, &lock_attr);
    pthread_mutexattr_destroy(&lock_attr);
    pthread_cond_init(&p->work, &attr);
    pthread_cond_init(&p->changed, &attr);
    pthread_condattr_destroy(&attr);

    pthread_once(&fork_once, register_fork);
    pthread_mutex_lock(&pools_lock);
    int err = start_thread(p);
    if (!err) {
        p->next = pools;
        if (pools)
            pools->prev = p;
        pools = p;
    }
    pthread_mutex_unlock(&pools_lock);
    if (err) {
        pthread_cond_destroy(&p->work);
        pthread_cond_destroy(&p->changed);
        pthread_mutex_destroy(&p->lock);
        free(p);
        return err;
    }
    *out = p;
    return 0;
}

void cp_pool_retain(struct cp_pool *p)
{
    atomic_fetch_add(&p->refs, 1);
}

void cp_pool_unref(struct cp_pool *p)
{
    if (atomic_fetch_sub(&p->refs, 1) != 1)
        return;
    pthread_mutex_lock(&pools_lock);
    if (p->prev)
        p->prev->next = p->next;
    else
        pools = p->next;
    if (p->next)
        p->next->prev = p->prev;
    pthread_mutex_unlock(&pools_lock);

    pthread_mutex_lock(&p->lock);
    p->closed = 1;
    stop_thread(p);
    /* Nothing refers to the memory any more.  A forked child unmaps its
     * copy only where it has one (not hugetlb, not fork="drop"), since
     * elsewhere the addresses may be the child's own mappings by now. */
    if (!p->forked || !(p->cfg.kind == CP_REGION_HUGETLB
                        || (p->cfg.protect & CP_PROTECT_DONTFORK)))
        unmap_all(p);
    pthread_mutex_unlock(&p->lock);
    pthread_cond_destroy(&p->work);
    pthread_cond_destroy(&p->changed);
    pthread_mutex_destroy(&p->lock);
    free(p->addr);
    free(p->state);
    free(p->use);
    for (int k = 0; k < STACKS; k++)
        free(p->stack[k]);
    free(p->chunks);
    free(p);
}

/* Block i (busy, the caller's) leaves: read back first with debug.  Lock
 * held on entry and on return. */
static int leave(struct cp_pool *p, size_t i, uint64_t t0, uintptr_t *addr)
{
    if (p->cfg.debug) {
        p->callers_busy++;
        pthread_mutex_unlock(&p->lock);
        int zero = cp_scan_is_zero(p->cfg.scan_variant, (const void *)p->addr[i],
                                   p->cfg.block_size, 1);
        pthread_mutex_lock(&p->lock);
        p->callers_busy--;
        p->s.checked++;
        if (!zero) {
            push(p, DIRTY, i);
            wake_thread(p);
            return EIO;
        }
    }
    p->state[i] = OUT;
    p->out++;
    p->s.acquires++;
    if (t0) {
        uint64_t now = now_ns(), waited = now - t0;
        missed(p, now);
        p->s.acquires_waited++;
        p->s.wait_ns += waited;
        if (waited > p->s.wait_max_ns)
            p->s.wait_max_ns = waited;
    } else {
        p->s.acquires_ready++;
    }
    *addr = p->addr[i];
    return 0;
}

/* How long a caller waits for the block the thread works on before it
 * faults in a fresh one (or maps more) itself: twice what a block takes
 * the thread at the speed it has shown, from 20 us to 100 ms.  On a busy
 * machine the thread may get no CPU for a while; the caller is not held up
 * much longer than its own work would take. */
static uint64_t patience_ns(const struct cp_pool *p)
{
    double bs = (double)p->cfg.block_size;
    double ns = p->s.zeroed_bytes ? bs * (double)p->s.zero_ns / (double)p->s.zeroed_bytes
                                  : bs / 8.0;   /* 8 GB/s until it has shown its speed */
    ns *= 2;
    return ns < 20e3 ? 20000u : ns > 100e6 ? 100000000u : (uint64_t)ns;
}

/* The caller prepares block i itself (zeroes it, or faults it in). */
static int prepare(struct cp_pool *p, size_t i, int fresh)
{
    p->callers_busy++;
    pthread_mutex_unlock(&p->lock);
    int err = 0;
    uint64_t t = 0;
    if (fresh) {
        err = cp_region_populate(p->addr[i], p->cfg.block_size, p->cfg.page_size,
                                 p->cfg.kind);
    } else {
        t = now_ns();
        p->cfg.zero((void *)p->addr[i], p->cfg.block_size);
        t = now_ns() - t;
    }
    pthread_mutex_lock(&p->lock);
    p->callers_busy--;
    p->caller_zero_ns += t;
    if (err) {
        push(p, FRESH, i);
        return err;
    }
    if (fresh)
        p->s.populated_bytes += p->cfg.block_size;
    else
        p->s.caller_zeroed_bytes += p->cfg.block_size;
    return 0;
}

int cp_pool_take(struct cp_pool *p, int flags, uint64_t asked_ns, uint64_t wait_ns,
                 uintptr_t *addr)
{
    uint64_t t0 = asked_ns, deadline = 0, start = 0;
    int err = 0, wake = 0;
    pthread_mutex_lock(&p->lock);
    for (;;) {
        if (p->forked) {
            err = ECHILD;
            break;
        }
        if (p->closed) {
            err = ECANCELED;
            break;
        }
        if (p->count[READY]) {
            err = leave(p, pop(p, READY), t0, addr);
            wake = thread_wanted(p);
            break;
        }
        if (!t0)
            t0 = now_ns();
        if (flags & CP_POOL_PREPARE) {
            /* Dirty: zeroing it here is the quickest way to a block.  A
             * block the thread works on is ready sooner than a fresh one
             * is faulted in, so a caller that may wait waits for it, for a
             * while (patience_ns). */
            int fresh = 0, patient = p->thread_busy && (flags & CP_POOL_WAIT)
                && now_ns() < t0 + patience_ns(p);
            size_t i = 0;
            if (p->count[DIRTY]) {
                i = pop(p, DIRTY);
            } else if (!patient && p->count[FRESH]) {
                i = pop(p, FRESH);
                fresh = 1;
            } else if (!patient && may_grow(p)) {
                p->callers_busy++;
                err = grow(p);
                p->callers_busy--;
                if (err)
                    break;
                p->thread_failed = 0;
                continue;
            } else {
                goto wait;
            }
            if ((err = prepare(p, i, fresh)) == 0)
                err = leave(p, i, t0, addr);
            break;
        }
wait:
        if (!(flags & CP_POOL_WAIT)) {
            if ((flags & CP_POOL_PREPARE) && p->growing) {
                /* Memory is being mapped (a system call, no faults): a caller
                 * that may not wait still waits for that. */
                struct timespec ts;
                deadline_of(now_ns() + 100000000u, &ts);
                atomic_fetch_add(&p->waiters, 1);
                pthread_cond_timedwait(&p->changed, &p->lock, &ts);
                atomic_fetch_sub(&p->waiters, 1);
                continue;
            }
            err = EAGAIN;
            break;
        }
        uint64_t t = now_ns();
        if (!start) {
            start = t;
            deadline = t + wait_ns < t ? UINT64_MAX : t + wait_ns;
        }
        if (t >= deadline) {
            err = EAGAIN;
            break;
        }
        struct timespec ts;
        uint64_t until = deadline;
        if ((flags & CP_POOL_PREPARE) && p->thread_busy && t0 + patience_ns(p) < until
                && (p->count[FRESH] || may_grow(p)))
            until = t0 + patience_ns(p);
        deadline_of(until, &ts);
        atomic_fetch_add(&p->waiters, 1);
        wake_thread(p);
        pthread_cond_timedwait(&p->changed, &p->lock, &ts);
        atomic_fetch_sub(&p->waiters, 1);
    }
    if (err == EAGAIN && !(flags & CP_POOL_WILL_RETRY))
        p->s.refused++;
    settle_closed(p);
    pthread_mutex_unlock(&p->lock);
    /* After the unlock, so that the thread, woken, does not sleep again on
     * the lock the caller still holds.  It waits for the signal where it was
     * seen waiting, and a signal it no longer needs is harmless. */
    if (wake)
        pthread_cond_signal(&p->work);
    return err;
}

/* ---- reuse (above) ------------------------------------------------------ */

static int by_value(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median_of(const double *xs, uint32_t n)
{
    double v[TRIAL_SAMPLES];
    memcpy(v, xs, n * sizeof *v);
    qsort(v, n, sizeof *v, by_value);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

/* Settle on hot or cold (lock held); the next trial after the gap
 * (multiplied by four, or back to GAP_AFTER where the verdict changed). */
static void settle(struct cp_pool *p, int hot)
{
    p->ref = !hot && p->nsamp[0] ? median_of(p->samp[0], p->nsamp[0]) : 0;
    p->strays = 0;
    p->watch_left = 0;
    p->out_seen = 0;
    if (hot != p->hot)
        p->gap = GAP_AFTER;
    p->hot = p->s.reuse_hot = hot;
    p->trial = T_NONE;
    p->settle_left = p->gap;
    p->gap = p->gap * 4 > GAP_MOST ? GAP_MOST : p->gap * 4;
}

/* The trial's verdict once its runs say enough (lock held): 1 where it
 * settled. */
static int verdict(struct cp_pool *p)
{
    uint32_t nc = p->nsamp[0], nh = p->nsamp[1];
    if (nc < EARLY_SAMPLES || nh < EARLY_SAMPLES)
        return 0;
    double c = median_of(p->samp[0], nc), h = median_of(p->samp[1], nh);
    if (c > EARLY_FACTOR * h || h > EARLY_FACTOR * c)
        settle(p, c > h);       /* the rest would pay for the dearer way again */
    else if (nc >= TRIAL_SAMPLES && nh >= TRIAL_SAMPLES)
        settle(p, !(c < REUSE_MARGIN * h));
    else
        return 0;
    return 1;
}

/* A timed run starts with this release (lock held); its way. */
static int run_from(struct cp_pool *p, int phase, uint64_t now)
{
    p->trial = phase;
    p->run_start = now;
    p->run_left = TRIAL_RUN;
    return phase == T_HOT;
}

/* This release in the trial (lock held): whether it is zeroed hot. */
static int trial_step(struct cp_pool *p, uint64_t now)
{
    if (++p->trial_done > TRIAL_MOST) {
        settle(p, 1);           /* no verdict: the safe side */
        return 1;
    }
    if (p->trial == T_SETTLE) {
        /* Hot, untimed, until the thread has zeroed what the cold run
         * gave it: its work would land on the hot run's time. */
        if (p->thread_busy || p->count[DIRTY])
            return 1;
        return run_from(p, T_HOT, now);
    }
    if (--p->run_left > 0)
        return p->trial == T_HOT;
    int k = p->trial == T_HOT;
    p->samp[k][p->nsamp[k] < TRIAL_SAMPLES ? p->nsamp[k]++ : TRIAL_SAMPLES - 1] =
        (double)(now - p->run_start) / TRIAL_RUN;
    if (verdict(p))
        return p->hot;
    if (k)
        return run_from(p, T_COLD, now);
    p->trial = T_SETTLE;
    return trial_step(p, now);
}

/* Settled cold, the watch (lock held): windows of TRIAL_RUN releases,
 * WATCH_STRAYS in a row above WATCH_FACTOR times the cold runs' time a
 * release, or below it by as much: the program changed, a trial now. */
static void watch(struct cp_pool *p, uint64_t now)
{
    if (p->ref <= 0)
        return;
    if (!p->watch_left) {
        p->watch_start = now;
        p->watch_left = TRIAL_RUN;
        return;
    }
    if (--p->watch_left > 0)
        return;
    double x = (double)(now - p->watch_start) / TRIAL_RUN;
    int way = x > WATCH_FACTOR * p->ref ? 1 : x * WATCH_FACTOR < p->ref ? -1 : 0;
    p->strays = way && (p->strays == 0 || (p->strays > 0) == (way > 0)) ? p->strays + way : 0;
    if (p->strays >= WATCH_STRAYS || p->strays <= -WATCH_STRAYS) {
        p->settle_left = 1;
        p->gap = GAP_AFTER;
    }
    p->watch_start = now;
    p->watch_left = TRIAL_RUN;
}

/* The streaming zero's ns per byte, the thread's and callers' (0: none yet). */
static double stream_ns(const struct cp_pool *p)
{
    uint64_t bytes = p->s.zeroed_bytes + p->s.caller_zeroed_bytes;
    return bytes ? (double)(p->s.zero_ns + p->caller_zero_ns) / (double)bytes : 0;
}

/* A block comes back (lock held): whether it is zeroed hot. */
static int reuse_hot(struct cp_pool *p)
{
    if (p->cfg.reuse == CP_POOL_REUSE_HOT)
        return p->hot;
    if (!p->tracking || stream_ns(p) <= 0)
        return 0;               /* a streaming zero first: the reference */
    uint64_t now = now_ns();
    if (p->trial)
        return trial_step(p, now);
    if (!p->hot)
        watch(p, now);
    if (p->settle_left && --p->settle_left)
        return p->hot;
    p->trial_done = 0;
    p->nsamp[0] = p->nsamp[1] = 0;
    p->s.reuse_trials++;
    if (p->hot)
        return run_from(p, T_COLD, now);
    p->trial = T_SETTLE;
    return trial_step(p, now);
}

/* A hot zero of block i took ns (lock held).  Settled hot, where the
 * block had been zeroed hot before (its lines the cache's, if hot keeps
 * them there), a zero dearer per byte than REUSE_OUT times a streaming one
 * found it out of the cache: a trial at once (once until the next
 * verdict).  A block the thread zeroed was streamed out of the cache: its
 * first hot zero reads in what the program did not write, and says
 * nothing of the next. */
static void hot_zeroed(struct cp_pool *p, size_t i, int was_hot, uint64_t ns)
{
    double bs = (double)p->cfg.block_size, ref = stream_ns(p);
    p->use[i].hot = 1;
    p->s.release_zeroed_bytes += p->cfg.block_size;
    p->s.release_zero_ns += ns;
    if (p->tracking && p->hot && !p->trial && !p->out_seen && was_hot && ref > 0
            && (double)ns / bs > REUSE_OUT * ref) {
        p->out_seen = 1;
        p->settle_left = 1;
    }
}

int cp_pool_give(struct cp_pool *p, uintptr_t addr)
{
    pthread_mutex_lock(&p->lock);
    const struct chunk *c = p->unmapped ? NULL : chunk_of(p, addr);
    size_t i = 0;
    int err = 0, wake = 0;
    if (!c || (addr - c->base) % p->cfg.block_size) {
        err = EINVAL;
    } else {
        i = c->first + (addr - c->base) / p->cfg.block_size;
        if (p->state[i] != OUT)
            err = EINVAL;
    }
    if (!err) {
        p->out--;
        p->s.releases++;
        if (p->forked) {
            /* The child's copy: nothing zeroes it here. */
            p->state[i] = BUSY;
        } else if (!p->closed && reuse_hot(p)) {
            /* Hot: zeroed here, on top of the ready stack for the next
             * acquire.  Busy meanwhile, and counted as a caller's work, so
             * that a close waits for it. */
            int was_hot = p->use[i].hot;   /* under the lock: grow() moves the array */
            p->state[i] = BUSY;
            p->callers_busy++;
            pthread_mutex_unlock(&p->lock);
            uint64_t t = now_ns();
            p->cfg.zero_near((void *)addr, p->cfg.block_size);
            uint64_t ns = now_ns() - t;
            pthread_mutex_lock(&p->lock);
            p->callers_busy--;
            hot_zeroed(p, i, was_hot, ns);
            push(p, READY, i);
            wake_waiters(p);
            settle_closed(p);
        } else {
            p->use[i].hot = 0;
            push(p, DIRTY, i);
            p->thread_failed = 0;
            wake = thread_wanted(p);
            wake_waiters(p);
            settle_closed(p);
        }
    }
    pthread_mutex_unlock(&p->lock);
    if (wake)
        pthread_cond_signal(&p->work);      /* after the unlock, as in cp_pool_take */
    return err;
}

int cp_pool_owns(struct cp_pool *p, uintptr_t addr)
{
    pthread_mutex_lock(&p->lock);
    int owns = !p->unmapped && chunk_of(p, addr) != NULL;
    pthread_mutex_unlock(&p->lock);
    return owns;
}

int cp_pool_close(struct cp_pool *p, int when_released)
{
    pthread_mutex_lock(&p->lock);
    if (p->closed) {
        pthread_mutex_unlock(&p->lock);
        return 0;
    }
    if (!when_released && !p->forked && (p->out || p->callers_busy)) {
        pthread_mutex_unlock(&p->lock);
        return EBUSY;
    }
    p->closed = p->out || p->callers_busy ? 2 : 1;
    pthread_cond_broadcast(&p->changed);
    stop_thread(p);
    settle_closed(p);
    pthread_mutex_unlock(&p->lock);
    return 0;
}

int cp_pool_trim(struct cp_pool *p, uint64_t *bytes)
{
    *bytes = 0;
    pthread_mutex_lock(&p->lock);
    if (p->closed || p->forked) {
        pthread_mutex_unlock(&p->lock);
        return 0;
    }
    size_t n = p->count[READY] + p->count[DIRTY];
    size_t *idle = n ? malloc(n * sizeof *idle) : NULL;
    unsigned char *was = n ? malloc(n) : NULL;
    if (n && (!idle || !was)) {
        free(idle);
        free(was);
        pthread_mutex_unlock(&p->lock);
        return ENOMEM;
    }
    size_t k = 0;
    for (int which = READY; which <= DIRTY; which++)
        while (p->count[which]) {
            was[k] = (unsigned char)which;
            idle[k++] = pop(p, which);
        }
    p->callers_busy++;
    pthread_mutex_unlock(&p->lock);
    int err = 0;
    size_t done = 0;
    for (; done < n && !err; done++)
        err = cp_region_discard(p->addr[idle[done]], p->cfg.block_size);
    if (err)
        done--;
    pthread_mutex_lock(&p->lock);
    p->callers_busy--;
    for (size_t j = 0; j < n; j++) {
        if (j < done)
            p->use[idle[j]].hot = 0;    /* handed back: no longer zeroed hot */
        push(p, j < done ? FRESH : was[j], idle[j]);
    }
    p->s.trimmed_bytes += (uint64_t)done * p->cfg.block_size;
    p->thread_failed = 0;
    nudge_thread(p);
    wake_waiters(p);
    settle_closed(p);
    pthread_mutex_unlock(&p->lock);
    free(idle);
    free(was);
    *bytes = (uint64_t)done * p->cfg.block_size;
    return err;
}

void cp_pool_set_pace(struct cp_pool *p, uint64_t max_rate, size_t low_water)
{
    pthread_mutex_lock(&p->lock);
    atomic_store(&p->max_rate, max_rate);
    atomic_store(&p->low_water, low_water);
    if (!max_rate)
        __atomic_store_n(&p->boost, 0, __ATOMIC_RELAXED);
    p->thread_failed = 0;
    nudge_thread(p);
    pthread_mutex_unlock(&p->lock);
}

void cp_pool_stats(struct cp_pool *p, struct cp_pool_stats *out)
{
    pthread_mutex_lock(&p->lock);
    settle_boost(p);
    *out = p->s;
    out->blocks = p->nblocks;
    out->fresh = p->count[FRESH];
    out->ready = p->count[READY];
    out->dirty = p->count[DIRTY];
    out->out = p->out;
    out->busy = p->nblocks - p->out - p->count[FRESH] - p->count[READY] - p->count[DIRTY];
    out->max_blocks = p->cfg.max_blocks;
    out->ready_target = ready_target(p);
    out->closed = p->closed;
    out->forked = p->forked;
    pthread_mutex_unlock(&p->lock);
}
