/*
 * The learner behind adaptive auto (see adapt.h).
 *
 * Per size class (floor(log2(n))) and context (was this address cleared
 * within the last reuse_bytes of band clears?), two arms: temporal and
 * streaming, each with a cost in ns per byte.  The arm exploited follows
 * the median of its last seven samples (three slow clears in a row, as
 * after other work evicted the buffer, do not count) in an exponential
 * average weighing each new value
 * 1/2**recency_shift; the arm explored, sampled rarely, is the median of
 * its last three samples itself, so an estimate from an older workload
 * never outvotes fresh samples.
 *
 * The arm exploited is switched when the other's estimate is lower by more
 * than the hysteresis; the arm left behind then starts afresh.  The other
 * arm is explored once every `gap` calls.  After each exploration that
 * confirms the current arm the gap doubles and is never shorter than the
 * exploration's cost (in calls of the current arm) / budget, both up to
 * explore_max: one exploration every gap calls then costs at most `budget`
 * of the time spent, unless one exploration costs more than
 * explore_max * budget calls (5 at the defaults; ~5-7 measured).  An
 * exploration far off its arm's estimate (SURPRISE) is repeated after
 * explore_min calls before it counts: an outlier then costs one more
 * exploration, and a changed arm is seen two samples later, not one gap.
 * A switch puts the gap back to explore_min.
 *
 * The routine run last on a buffer decides its cache state: streaming
 * stores leave it out of the cache, so the first ordinary-store clear after
 * them is a cold one even in a loop over one buffer.  So an exploration is
 * a burst of at least explore_burst calls, longer while the calls still
 * get faster (the cache still filling, up to BURST_MAX),
 * of which only the last is timed as the arm's steady cost, and a call whose arm differs from the previous call's
 * in its context is a *transition*: its time goes to the arm's transition
 * estimate, not to its steady cost; nor do the clears after it that still
 * get faster (back on the current arm after an exploration).  The cost of one
 * exploration is then the burst's steady excess plus both transitions, and
 * that is what the gap is sized by.
 *
 * The context is what lets one process follow a workload that changes
 * between warm and cold: a buffer cleared again soon is probably still in
 * the cache, one not seen for a cache's worth of clears probably is not.
 * Each context learns its own arm, so a switch of workload is a switch of
 * context, followed at once, and exploration can stay rare in both.
 *
 * Timing: clock_gettime(CLOCK_MONOTONIC) through the vDSO, ~30 ns a read on
 * a KVM guest (rdtsc ~17 ns), against >= 5 us for a clear at the band's
 * lower end (an L2's worth at <= 100 GB/s): under 1.5% for the two reads,
 * with no TSC calibration and no trust in an invariant TSC under a
 * hypervisor or across CPUs.
 */
#include <pthread.h>
#include <string.h>
#include <time.h>

#include "clearpages.h"
#include "adapt.h"
#include "inject.h"

enum { RING = 16, WINDOW = 7, EXPLORED_WINDOW = 3 };

/* A sample off its arm's estimate by more than this factor is checked again. */
#define SURPRISE 1.25
/* A burst call this much faster than the burst's best so far: the cache is
 * still filling, and the burst goes on until BURST_STALL calls in a row
 * are not (or BURST_MAX calls).  Measured on a Zen 3 guest, ordinary-store
 * clears of an 8 MiB buffer after streaming ones ran at 8, 9, 11, 11, 11,
 * 13, 18, 20, 27, 29, 27, 26, 37 GB/s; of a 1 MiB one at 10, 23, 29, 37. */
#define WARMING 1.05
enum { BURST_MAX = 16, BURST_STALL = 3, AMORTIZE = 128 };

struct arm_state {
    double est;                 /* ns per byte; valid when samples > 0 */
    double win[WINDOW];         /* the latest samples, newest last */
    unsigned nwin;
    uint64_t samples;
    uint64_t last;              /* the context's call count at the last sample */
    int restart;                /* the next sample starts the estimate afresh */
    double trans;               /* ns per byte of its first call after the other arm */
    uint64_t ntrans;
};

struct ctx_state {
    int init;
    int cur;
    struct arm_state arm[2];
    uint64_t calls, explorations, switches;
    uint32_t since, gap, confirmed;
    int rechecked;              /* the last exploration was a quick re-check */
    int prev;                   /* the arm of the last call; -1 none yet */
    uint32_t burst_left;        /* exploration calls still to run */
    uint32_t burst_len;         /* calls in the current (or last) exploration */
    double burst_x;             /* the burst's fastest call so far, ns per byte */
    uint32_t burst_stall;       /* calls since the burst last got faster */
    int ramp_on;                /* back on the current arm, still refilling */
    uint32_t ramp_len, ramp_stall;
    double ramp_x;
};

struct recent {
    uintptr_t addr;
    uint64_t clock;             /* byte_clock when its last clear was chosen */
};

/* Written under `lock`; the band is also read without it (relaxed atomics). */
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static struct cp_adapt_params params;
static size_t band_lo, band_hi;
static int enabled;
static struct ctx_state table[CP_ADAPT_CLASSES][CP_ADAPT_CONTEXTS];
static struct recent ring[RING];
static unsigned ring_next;
static uint64_t byte_clock;

/* A fork copies the lock as it is: held by a thread the child does not
 * have (plan() reading the learner, another thread recording), it would
 * stay held there for good, and the child would hang in configure() or
 * never adapt.  So fork takes it first (every holder holds it for a few
 * loads and stores, never across a wait), and both sides let it go. */
static void fork_prepare(void)
{
    pthread_mutex_lock(&lock);
}

static void fork_parent(void)
{
    pthread_mutex_unlock(&lock);
}

static void fork_child(void)
{
    pthread_mutex_init(&lock, NULL);
}

#ifdef __GLIBC__
/* glibc's pthread_atfork is a static stub that passes the module's
 * __dso_handle, which comes from crtbegin; the native module is linked
 * without start files (_ffi_build.py says why), so register the way the
 * stub does, with no handle (nothing unloads an extension module). */
extern int __register_atfork(void (*prepare)(void), void (*parent)(void),
                             void (*child)(void), void *dso_handle);
#define register_atfork(prepare, parent, child) \
    __register_atfork(prepare, parent, child, NULL)
#else
#define register_atfork pthread_atfork
#endif

__attribute__((constructor)) static void register_fork_handlers(void)
{
    register_atfork(fork_prepare, fork_parent, fork_child);
}

void cp_adapt_defaults(struct cp_adapt_params *p)
{
    memset(p, 0, sizeof *p);
    p->explore_min = 4;
    /* The longest gap: a wrong estimate (a noisy exploration) holds for at
     * most this many calls.  An exploration that refills the cache costs
     * ~5-7 calls' worth on a Zen 3 guest, so this still keeps its expected
     * cost near 1%. */
    p->explore_max = 512;
    p->budget_ppm = 10000;      /* 1%: half the 2% bound, for estimation error */
    p->hysteresis_ppm = 50000;  /* 5%: above the spread of repeated clears */
    /* 1/8: a change of workload shows in ~5 calls; the two or three slow
     * clears after other work evicted the buffer do not flip the choice. */
    p->recency_shift = 3;
    p->stale_calls = 32;
    /* Calls per exploration at least, the last one timed: on a Zen 3 guest
     * a 4 MiB buffer cleared with ordinary stores after streaming ones ran
     * at ~9, ~20, then ~30 GB/s in three calls in a row. */
    p->explore_burst = 4;
}

static void forget(void)
{
    memset(table, 0, sizeof table);
    memset(ring, 0, sizeof ring);
    ring_next = 0;
    byte_clock = 0;
}

void cp_adapt_configure(const struct cp_adapt_params *p)
{
    pthread_mutex_lock(&lock);
    params = *p;
    if (params.explore_min < 1)
        params.explore_min = 1;
    if (params.explore_max < params.explore_min)
        params.explore_max = params.explore_min;
    if (params.lo < 1)
        params.lo = 1;          /* log2 of 0 has no class */
    if (params.hi < params.lo)
        params.hi = params.lo;
    if (params.recency_shift > 16)
        params.recency_shift = 16;
    if (params.explore_burst < 2)
        params.explore_burst = 2;   /* the first call of a burst is a transition */
    if (params.explore_burst > 16)
        params.explore_burst = 16;
    forget();
    enabled = 1;
    __atomic_store_n(&band_lo, params.lo, __ATOMIC_RELAXED);
    __atomic_store_n(&band_hi, params.hi, __ATOMIC_RELAXED);
    pthread_mutex_unlock(&lock);
}

void cp_adapt_enable(int on)
{
    pthread_mutex_lock(&lock);
    __atomic_store_n(&band_lo, on ? params.lo : 0, __ATOMIC_RELAXED);
    __atomic_store_n(&band_hi, on ? params.hi : 0, __ATOMIC_RELAXED);
    enabled = on != 0;
    pthread_mutex_unlock(&lock);
}

void cp_adapt_params(struct cp_adapt_params *out)
{
    pthread_mutex_lock(&lock);
    *out = params;
    pthread_mutex_unlock(&lock);
}

void cp_adapt_reset(void)
{
    pthread_mutex_lock(&lock);
    forget();
    pthread_mutex_unlock(&lock);
}

uint64_t cp_adapt_now_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

static int size_class(size_t n)
{
    return 63 - __builtin_clzll((unsigned long long)n);
}

/* 1 when addr was cleared within the last reuse_bytes of band clears
 * (this clear's own n included); remembers addr either way. */
static int is_recent(const void *addr, size_t n)
{
    uintptr_t a = (uintptr_t)addr;
    uint64_t before = byte_clock;
    byte_clock += n;
    if (!params.reuse_bytes || !a)
        return 0;
    for (unsigned i = 0; i < RING; i++) {
        if (ring[i].addr == a) {
            int hit = before - ring[i].clock + n <= params.reuse_bytes;
            ring[i].clock = byte_clock;
            return hit;
        }
    }
    ring[ring_next].addr = a;
    ring[ring_next].clock = byte_clock;
    ring_next = (ring_next + 1) % RING;
    return 0;
}

int cp_adapt_choose(size_t n, const void *addr)
{
    if (n < __atomic_load_n(&band_lo, __ATOMIC_RELAXED) ||
        n >= __atomic_load_n(&band_hi, __ATOMIC_RELAXED))
        return -1;
    if (pthread_mutex_trylock(&lock) != 0)
        return -1;              /* another thread is choosing: static, unrecorded */
    if (!enabled || n < params.lo || n >= params.hi) {  /* changed meanwhile */
        pthread_mutex_unlock(&lock);
        return -1;
    }
    int cls = size_class(n);
    int ctx = is_recent(addr, n);
    struct ctx_state *s = &table[cls][ctx];
    if (!s->init) {
        s->init = 1;
        s->cur = n >= params.nt_min ? CP_ADAPT_STREAMING : CP_ADAPT_TEMPORAL;
        s->gap = params.explore_min;
        s->prev = -1;
    }
    s->calls++;
    int other = !s->cur, explore;
    if (s->burst_left) {
        s->burst_left--;        /* the rest of an exploration */
        explore = 1;
    } else {
        if (s->arm[s->cur].samples < params.explore_burst)
            explore = 0;        /* the static choice is measured first */
        else if (!s->arm[other].samples)
            explore = 1;        /* then the other arm */
        else
            explore = s->since >= s->gap;
        if (explore) {
            s->since = 0;
            s->explorations++;
            s->burst_left = params.explore_burst - 1;
            s->burst_len = params.explore_burst;
            s->burst_x = 0;
            s->burst_stall = 0;
        } else {
            s->since++;
        }
    }
    int arm = explore ? other : s->cur;
    /* 1: the first call after the other arm, or the context's first call
     * (start-up costs); 2: still warming up inside a burst; 0: a steady
     * sample of the arm. */
    int kind = s->prev != arm ? 1 : explore && s->burst_left ? 2 : !explore && s->ramp_on ? 2 : 0;
    if (s->prev != arm && !explore) {
        /* Back on the current arm (or starting): its first clears refill
         * the cache and are not its steady cost either. */
        s->ramp_on = 1;
        s->ramp_len = 0;
        s->ramp_x = 0;
        s->ramp_stall = 0;
    }
    s->prev = arm;
    pthread_mutex_unlock(&lock);
    return cls << 5 | kind << 3 | explore << 2 | ctx << 1 | arm;
}

/* The median of the last k of n samples (the lower middle when k is even:
 * timing noise only ever adds). */
static double median(const double *w, unsigned n, unsigned k)
{
    double v[WINDOW];
    if (k > n)
        k = n;
    memcpy(v, w + n - k, k * sizeof v[0]);
    for (unsigned i = 1; i < k; i++)
        for (unsigned j = i; j > 0 && v[j - 1] > v[j]; j--) {
            double t = v[j]; v[j] = v[j - 1]; v[j - 1] = t;
        }
    return v[(k - 1) / 2];
}

/* Adds sample x to the arm; returns 1 when it is "surprising": far from
 * what the arm's estimate said (or the estimate starts from it alone). */
static int observe(struct arm_state *a, uint64_t now, double x, int exploited)
{
    double before = a->est;
    int fresh = !a->samples || a->restart;
    int sparse = !exploited || now - a->last > params.stale_calls;
    if (fresh) {
        a->restart = 0;
        a->nwin = 0;
    }
    if (a->nwin == WINDOW) {
        memmove(a->win, a->win + 1, (WINDOW - 1) * sizeof a->win[0]);
        a->nwin--;
    }
    a->win[a->nwin++] = x;
    double m = median(a->win, a->nwin, exploited ? WINDOW : EXPLORED_WINDOW);
    if (fresh || sparse)
        a->est = m;     /* an old average would outvote the new samples */
    else
        a->est += (m - a->est) / (double)(1u << params.recency_shift);
    a->samples++;
    a->last = now;
    return fresh || x > before * SURPRISE || x * SURPRISE < before;
}

void cp_adapt_record(size_t n, int ticket, uint64_t elapsed_ns)
{
    if (ticket < 0 || n == 0)
        return;
    int cls = ticket >> 5, kind = ticket >> 3 & 3, explored = ticket >> 2 & 1;
    int ctx = ticket >> 1 & 1, arm = ticket & 1;
    if (cls >= CP_ADAPT_CLASSES || pthread_mutex_trylock(&lock) != 0)
        return;
    struct ctx_state *s = &table[cls][ctx];
    if (!s->init) {             /* reset between choose and record */
        pthread_mutex_unlock(&lock);
        return;
    }
    double x = (double)elapsed_ns / (double)n;
    if (explored && arm != s->cur) {
        /* A burst goes on while its clears still get faster (the cache
         * is still filling), up to BURST_MAX calls. */
        if (s->burst_x == 0 || x * WARMING < s->burst_x) {
            s->burst_x = x;     /* a new best by WARMING: still filling */
            s->burst_stall = 0;
        } else {
            s->burst_stall++;
        }
        if (kind == 0 && s->burst_stall < BURST_STALL && s->burst_len < BURST_MAX) {
            s->burst_left++;
            s->burst_len++;
            kind = 2;
        }
    }
    if (!explored && kind && s->ramp_on) {
        s->ramp_len++;
        if (s->ramp_x == 0 || x * WARMING < s->ramp_x) {
            s->ramp_x = x;
            s->ramp_stall = 0;
        } else {
            s->ramp_stall++;
        }
        if (s->ramp_stall >= BURST_STALL || s->ramp_len >= BURST_MAX) {
            s->ramp_on = 0;
            if (kind == 2)
                kind = 0;       /* refilled: steady from here */
        }
    }
    if (kind) {
        struct arm_state *a = &s->arm[arm];
        if (kind == 1) {
            a->trans = a->ntrans ? a->trans + (x - a->trans) / 4.0 : x;
            a->ntrans++;
        }
        pthread_mutex_unlock(&lock);
        return;
    }
    int surprise = observe(&s->arm[arm], s->calls, x, arm == s->cur);
    int cur = s->cur, other = !cur;
    if (s->arm[cur].samples && s->arm[other].samples) {
        double c = s->arm[cur].est, o = s->arm[other].est;
        double h = 1.0 + params.hysteresis_ppm * 1e-6;
        /* Switch when the other arm is faster by the hysteresis, the
         * current arm's latest clears agree (the slow clears right after
         * other work evicted the buffer pass, and the lagging average
         * alone must not switch), and the gain over AMORTIZE calls pays
         * for refilling the cache on the way (the first clears of an
         * ordinary-store arm after streaming ones). */
        struct arm_state *ca = &s->arm[cur], *oa = &s->arm[other];
        double recent = ca->nwin ? median(ca->win, ca->nwin, 3) : c;
        double into = oa->ntrans ? oa->trans : o;
        double refill = into > o ? (s->burst_len > 1 ? s->burst_len - 1 : 1) * (into - o) / 2 : 0;
        if (o * h < c && (arm != cur || recent > o * h) && (c - o) * AMORTIZE > refill) {
            /* The arm left behind is measured afresh when next explored:
             * the samples that made it look worse (a burst of interrupts,
             * or the workload before a change) do not hold it back. */
            s->arm[cur].restart = 1;
            s->cur = other;
            s->switches++;
            s->confirmed = 0;
            s->rechecked = 0;
            s->gap = params.explore_min;
            s->since = 0;
            s->burst_left = 0;
        } else if (!explored || arm != other || s->burst_left) {
            /* exploiting, or in the middle of a burst: nothing to decide */
        } else if (surprise && !s->rechecked) {
            /* One sample far from the estimate is an outlier or a change
             * of workload: look again soon, before trusting either. */
            s->rechecked = 1;
            s->gap = params.explore_min;
        } else {
            s->rechecked = 0;
            if (s->confirmed < 31)
                s->confirmed++;
            uint64_t gap = (uint64_t)params.explore_min << s->confirmed;
            if (gap > params.explore_max)
                gap = params.explore_max;
            /* One exploration: into the other arm (the burst's warm-up
             * calls counted as costly as the first), its steady call, and
             * back (as many calls to refill the cache as the burst took);
             * each counted by its excess over a call of the current arm. */
            double into = s->arm[other].ntrans ? s->arm[other].trans : o;
            double back = s->arm[cur].ntrans ? s->arm[cur].trans : c;
            if (into < o)
                into = o;
            double extra = (s->burst_len - 1) * (into - c) + (o - c)
                           + (s->burst_len - 1) * (back - c);   /* refilling, back */
            double budget = params.budget_ppm ? params.budget_ppm * 1e-6 : 1e-6;
            double need = c > 0 && extra > 0 ? extra / c / budget : 0.0;
            if (need > (double)gap)
                gap = need < (double)params.explore_max ? (uint64_t)need + 1
                                                        : params.explore_max;
            s->gap = (uint32_t)gap;
        }
    }
    pthread_mutex_unlock(&lock);
}

int cp_adapt_stat(int size_class, int context, struct cp_adapt_stat *out)
{
    if (size_class < 0 || size_class >= CP_ADAPT_CLASSES ||
        context < 0 || context >= CP_ADAPT_CONTEXTS)
        return 0;
    pthread_mutex_lock(&lock);
    int hold_ms = cp_inject_hit(CP_INJECT_ADAPT_HOLD);
    if (hold_ms) {
        struct timespec t = {hold_ms / 1000, (long)(hold_ms % 1000) * 1000000};
        nanosleep(&t, NULL);
    }
    const struct ctx_state *s = &table[size_class][context];
    int have = s->init;
    if (have) {
        out->arm = s->cur;
        for (int i = 0; i < 2; i++) {
            out->ns_per_byte[i] = s->arm[i].samples ? s->arm[i].est : 0.0;
            out->samples[i] = s->arm[i].samples;
            out->transition_ns_per_byte[i] = s->arm[i].ntrans ? s->arm[i].trans : 0.0;
        }
        out->calls = s->calls;
        out->explorations = s->explorations;
        out->switches = s->switches;
        out->gap = s->gap;
    }
    pthread_mutex_unlock(&lock);
    return have;
}

static const struct cp_adapt_api api = {
    cp_adapt_choose, cp_adapt_record, cp_adapt_now_ns,
};

const struct cp_adapt_api *cp_adapt_api(void)
{
    return &api;
}
