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
 * The kind of buffer is told by its address: a table of the addresses of
 * recent band clears (hashed, one slot each) says whether this one was
 * cleared within the last reuse_bytes of them.  A hot scratch buffer and
 * the pages of a cold pool of the same size then learn apart, however
 * many pool pages come between two clears of the scratch buffer.
 *
 * What a clear costs a program is more than the clear: ordinary stores
 * leave the buffer in the cache for what the program does next, streaming
 * stores leave it in memory.  So a timed steady clear also opens a
 * *cycle*: the next clear of its size class and kind is timed too, and
 * the time from the end of the one to the start of the other (the
 * program's own work) is the arm's *use* cost, counted up to use_factor
 * times the clear itself (so that unrelated work between the clears cannot
 * outvote the clear: beyond that both arms are charged in proportion to
 * their clears).  Where both arms have a use cost the choice is by clear
 * plus use; a buffer cleared, then read, then cleared again gets ordinary
 * stores even where streaming clears it faster.
 *
 * Timing: clock_gettime(CLOCK_MONOTONIC) through the vDSO, ~30 ns a read on
 * a KVM guest (rdtsc ~17 ns), with no TSC calibration and no trust in an
 * invariant TSC under a hypervisor or across CPUs.  A 16 KiB clear lasts
 * ~0.3 us, so once a context is *settled* (its arm confirmed by an
 * exploration, no burst or refill under way) only one call in
 * max(1, sample_bytes / n) is timed (more where clears are so short that
 * a timed pair's own ~0.5 us would weigh more than SAMPLE_SHARE: at 16 KiB
 * one in ~2,600), with the call after it (which closes
 * its cycle); the calls between take neither the clock nor the lock, only
 * the address table and two counters.  Explorations are always timed.
 * Where those calls clear the buffer just cleared, back to back (a loop
 * over one buffer: the case where a clear is shortest and the lookup
 * weighs most, ~4 ns in ~200 ns at 16 KiB), they are handed out by the fast
 * word (adapt.h), which the binding reads inline: no call, no hash; the
 * next call that is anything else puts them into the books first
 * (flush_fast), as if each had been looked up.
 */
#include <math.h>
#include <pthread.h>
#include <string.h>
#include <time.h>

#include "clearpages.h"
#include "adapt.h"
#include "clock.h"
#include "inject.h"

enum { SEEN = 512, WINDOW = 7, EXPLORED_WINDOW = 3, PERIOD_MAX = 512, SAMPLE_GAP = 16,
       STRETCH_MAX = 4096 };

/* What a timed pair costs whatever the size: four clock reads through the
 * vDSO (~40-50 ns each on a KVM guest), the lock twice and the books; a
 * timed call measured ~250 ns more than an untimed one on a Zen 4 guest.
 * Where the clears are short the settled period stretches so that the
 * pairs stay within SAMPLE_SHARE of the time spent clearing: at 16 KiB
 * (~0.19 us a clear there) about 2,600 calls instead of 512.  0.1%, not
 * more: the inline path's own ~0.5% and the explorations share the 1% that
 * adaptation may cost a clear this short (at 0.25% the whole cost measured
 * 0.99-1.29% on a Zen 4 guest, at 0.1% 0.57-0.96%). */
#define PAIR_NS 500.0
#define SAMPLE_SHARE 0.001

/* A sample off its arm's estimate by more than this factor is checked again. */
#define SURPRISE 1.25
/* A burst call this much faster than the burst's best so far: the cache is
 * still filling, and the burst goes on until BURST_STALL calls in a row
 * are not (or BURST_MAX calls).  Measured on a Zen 3 guest, ordinary-store
 * clears of an 8 MiB buffer after streaming ones ran at 8, 9, 11, 11, 11,
 * 13, 18, 20, 27, 29, 27, 26, 37 GB/s; of a 1 MiB one at 10, 23, 29, 37. */
#define WARMING 1.05
/* The current arm's use cost moved by more than 1/USE_CHANGE of its whole
 * cost since the last confirmation: the program changed; explore again. */
#define USE_CHANGE 4.0
/* What one timed call may be off by whatever its length: two clock reads
 * through the vDSO on a guest, an interrupt (ns). */
#define JITTER_NS 50.0
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
    double use[WINDOW];         /* ns per byte the program spent after its clears */
    unsigned nuse;
    double use_est;             /* median of the latest; valid when nuse > 0 */
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
    uint64_t timed;
    uint32_t period;            /* one timed sample in this many calls, settled */
    uint32_t stretch;           /* the period in effect: longer where clears are short */
    double use_ref;             /* the current arm's use when last confirmed; < 0: none */
    /* Read and written without the lock (relaxed atomics): */
    uint32_t quiet_left;        /* untimed calls still to run on `cur` */
    uint32_t quiet_set;         /* quiet_left when the lock last set it */
    uint32_t quiet_ran;         /* untimed calls of the fast word not yet counted */
};

/* The cycle opened by the last timed steady clear: closed by the next band
 * clear, whatever its size and kind, which is timed for it. */
struct cycle {
    int on, cls, ctx, arm, mine;
    size_t n;
    uint64_t end;               /* when that clear ended (ns) */
    double x;                   /* its ns per byte */
};

struct seen {
    uintptr_t addr;
    uint64_t clock;             /* byte_clock when its last clear was chosen */
};

/* Written under `lock`; the band is also read without it (relaxed atomics). */
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static struct cp_adapt_params params;
static size_t band_lo, band_hi;
static int enabled;
static struct ctx_state table[CP_ADAPT_CLASSES][CP_ADAPT_CONTEXTS];
static struct seen seen[SEEN];      /* relaxed atomics: read without the lock */
static struct cycle cycle;          /* .on is also read without the lock */
static uint64_t byte_clock;
/* The latest band call that was looked up in the address table. */
static struct {
    uintptr_t addr;
    size_t n;
    int ctx;
} last;
/* The settled path's word (adapt.h) and the context whose calls it runs. */
struct cp_adapt_fast cp_adapt_fast_word;
static struct ctx_state *fast_owner;

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

__attribute__((constructor)) static void register_fork_handlers(void)
{
    cp_at_fork(fork_prepare, fork_parent, fork_child);
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
    /* Settled, a timed pair every 4 MiB of clears: at 16 KiB one pair in
     * 256 calls (four clock reads and the lock twice, ~0.2-0.3 us, against
     * ~80 us of clears), from 4 MiB up every call (~0.06 us in >= 40 us). */
    p->sample_bytes = 8u << 20;
    /* The program's time after a clear counts up to 32 clears' worth: on a
     * Zen 4 guest a cold 16 KiB buffer cleared, half written and summed
     * spends ~14x its streaming clear (0.26 us) in the rest of the step
     * when streamed, ~3x its ordinary-store clear (0.75 us) otherwise; at
     * 64 KiB-4 MiB 2-8x.  Unrelated work beyond that is charged to both
     * arms in proportion to their clears. */
    p->use_factor = 32;
}

static void forget(void)
{
    memset(table, 0, sizeof table);
    memset(seen, 0, sizeof seen);
    memset(&cycle, 0, sizeof cycle);
    memset(&last, 0, sizeof last);
    __atomic_store_n(&cp_adapt_fast_word.addr, 0, __ATOMIC_RELAXED);
    __atomic_store_n(&cp_adapt_fast_word.left, 0, __ATOMIC_RELAXED);
    cp_adapt_fast_word.set = 0;
    fast_owner = NULL;
    byte_clock = 0;
}

static void flush_fast(void);

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
    flush_fast();
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
    return cp_now_ns();
}

static int size_class(size_t n)
{
    return 63 - __builtin_clzll((unsigned long long)n);
}

#define LOAD(x) __atomic_load_n(&(x), __ATOMIC_RELAXED)
#define STORE(x, v) __atomic_store_n(&(x), (v), __ATOMIC_RELAXED)

static struct seen *slot_of(uintptr_t a)
{
    return &seen[(uint64_t)(a >> 6) * 0x9E3779B97F4A7C15ull >> 55];
}

/* 1 when addr was cleared within the last reuse_bytes of band clears
 * (this clear's own n included); remembers addr either way, in its slot of
 * the table (a clear of another address hashed there forgets it: a
 * mistaken "other" now and then, never a mistaken "recent").  Without the
 * lock: racing calls may lose an update, which costs one such mistake. */
static int is_recent(const void *addr, size_t n)
{
    uintptr_t a = (uintptr_t)addr;
    uint64_t before = LOAD(byte_clock), now = before + n;
    STORE(byte_clock, now);
    size_t reuse = LOAD(params.reuse_bytes);
    if (!reuse || !a)
        return 0;
    struct seen *e = slot_of(a);
    int hit = LOAD(e->addr) == a && before - LOAD(e->clock) + n <= reuse;
    STORE(e->addr, a);
    STORE(e->clock, now);
    STORE(last.addr, a);
    STORE(last.n, n);
    STORE(last.ctx, hit);
    return hit;
}

/* Takes the fast word back: its untimed calls so far enter the books as
 * is_recent and the context would have counted them one by one (they were
 * clears of one buffer back to back, right after the call that handed them
 * out, so each was "recent" and advanced the clock by n).  Without the lock:
 * the owner's count is added to when it next takes it (drain_quiet). */
static void flush_fast(void)
{
    struct cp_adapt_fast *f = &cp_adapt_fast_word;
    uint32_t set = LOAD(f->set);
    if (!set)
        return;
    uintptr_t a = LOAD(f->addr);
    STORE(f->addr, 0);
    uint32_t left = LOAD(f->left);
    STORE(f->left, 0);
    STORE(f->set, 0);
    uint32_t ran = set > left ? set - left : 0;
    struct ctx_state *owner = LOAD(fast_owner);
    if (!ran || !a)
        return;
    uint64_t now = LOAD(byte_clock) + (uint64_t)ran * LOAD(f->n);
    STORE(byte_clock, now);
    struct seen *e = slot_of(a);
    if (LOAD(e->addr) == a)
        STORE(e->clock, now);
    if (owner)
        __atomic_fetch_add(&owner->quiet_ran, ran, __ATOMIC_RELAXED);
}

static int ticket_of(int cls, int kind, int explore, int ctx, int arm)
{
    return cls << 6 | kind << 3 | explore << 2 | ctx << 1 | arm;
}

/* Settled: the current arm confirmed by an exploration, no burst, refill
 * or cycle under way, and the next exploration more than a timed pair
 * away.  Then the next period - 2 calls run untimed. */
static int is_settled(const struct ctx_state *s);

/* Counts the untimed calls run since quiet_left was set, and ends the run. */
static void drain_quiet(struct ctx_state *s)
{
    if (fast_owner == s)
        flush_fast();
    uint32_t left = LOAD(s->quiet_left);
    uint32_t ran = s->quiet_set > left ? s->quiet_set - left : 0;
    ran += __atomic_exchange_n(&s->quiet_ran, 0, __ATOMIC_RELAXED);
    STORE(s->quiet_left, 0);
    s->quiet_set = 0;
    s->calls += ran;
    s->since += ran;
}

/* Settled: the next calls of this context run untimed.  Where they are
 * the buffer just cleared, again (its next clear back to back falls in
 * this same context, and no cycle waits for it), they are handed to the
 * fast word; else the context counts them down itself, after the lookup. */
static void maybe_quiet(struct ctx_state *s, size_t n, int cls, int ctx)
{
    if (!is_settled(s))
        return;
    double call = s->arm[s->cur].est * (double)n;
    double want = call > 0 ? PAIR_NS / (SAMPLE_SHARE * call) : 0;
    s->stretch = want <= s->period ? s->period : want >= STRETCH_MAX ? STRETCH_MAX
                 : (uint32_t)want;
    uint32_t quiet = s->stretch - 2;
    uint32_t due = s->gap > s->since + 2 ? s->gap - s->since - 2 : 0;
    if (due < quiet)
        quiet = due;
    if (!quiet)
        return;
    size_t reuse = params.reuse_bytes;
    uintptr_t a = LOAD(last.addr);
    if (a && LOAD(last.n) == n && LOAD(last.ctx) == ctx
        && ctx == (reuse && n <= reuse) && !LOAD(cycle.on)) {
        struct cp_adapt_fast *f = &cp_adapt_fast_word;
        flush_fast();
        fast_owner = s;
        STORE(f->n, n);
        STORE(f->ticket, ticket_of(cls, 0, 0, ctx, s->cur) | CP_ADAPT_UNTIMED);
        STORE(f->set, quiet);
        STORE(f->left, quiet);
        STORE(f->addr, a);
        return;
    }
    s->quiet_set = quiet;
    STORE(s->quiet_left, s->quiet_set);
}

static int choose_locked(size_t n, int cls, int ctx, struct ctx_state *s);

int cp_adapt_recent(const void *addr, size_t n)
{
    if (!__atomic_load_n(&band_hi, __ATOMIC_RELAXED))
        return -1;
    if (!addr) {
        size_t reuse = LOAD(params.reuse_bytes);
        return reuse && n <= reuse;
    }
    flush_fast();
    return is_recent(addr, n);
}

int cp_adapt_choose(size_t n, const void *addr)
{
    if (n < __atomic_load_n(&band_lo, __ATOMIC_RELAXED) ||
        n >= __atomic_load_n(&band_hi, __ATOMIC_RELAXED))
        return -1;
    int fast = cp_adapt_fast_take(&cp_adapt_fast_word, n, addr);
    if (fast >= 0)
        return fast;
    flush_fast();
    int cls = size_class(n);
    int ctx = is_recent(addr, n);
    struct ctx_state *s = &table[cls][ctx];
    uint32_t quiet = LOAD(s->quiet_left);
    if (quiet && !LOAD(cycle.on)) {
        /* Settled: the current arm, untimed, no lock. */
        STORE(s->quiet_left, quiet - 1);
        return ticket_of(cls, 0, 0, ctx, LOAD(s->cur)) | CP_ADAPT_UNTIMED;
    }
    return choose_locked(n, cls, ctx, s);
}

/* The rest of choose: a timed call, under the lock.  Apart, so that the
 * untimed path above stays a leaf with nothing to save. */
static __attribute__((noinline)) int choose_locked(size_t n, int cls, int ctx,
                                                   struct ctx_state *s)
{
    if (pthread_mutex_trylock(&lock) != 0)
        return -1;              /* another thread is choosing: static, unrecorded */
    if (!enabled || n < params.lo || n >= params.hi) {  /* changed meanwhile */
        pthread_mutex_unlock(&lock);
        return -1;
    }
    if (!s->init) {
        s->init = 1;
        /* Before anything is learned: a buffer cleared again soon is
         * probably still in the cache, and ordinary stores keep it there
         * (the programs measured want them at every size where a buffer
         * can be recent, 0.86-1.0 against streaming's 0.2-0.76); any
         * other starts from the static choice. */
        s->cur = ctx || n < params.nt_min ? CP_ADAPT_TEMPORAL : CP_ADAPT_STREAMING;
        s->gap = params.explore_min;
        s->prev = -1;
        s->use_ref = -1;
        size_t period = params.sample_bytes / n;
        s->period = period < 1 ? 1 : period > PERIOD_MAX ? PERIOD_MAX : (uint32_t)period;
    }
    drain_quiet(s);
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
    return ticket_of(cls, kind, explore, ctx, arm);
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

/* The program's time after a clear of the arm, ns per byte (already
 * capped): the median of the latest, as the clear's own estimate is. */
static void observe_use(struct arm_state *a, double u, int exploited)
{
    if (a->nuse == WINDOW) {
        memmove(a->use, a->use + 1, (WINDOW - 1) * sizeof a->use[0]);
        a->nuse--;
    }
    a->use[a->nuse++] = u;
    a->use_est = median(a->use, a->nuse, exploited ? WINDOW : EXPLORED_WINDOW);
}

/* The cycle, if one is open, closes at `start` (this call's start): the
 * program's time from the end of the last timed steady clear to the next
 * band clear is that clear's arm's use cost.  Returns 1 when one closed. */
static int close_cycle(uint64_t start)
{
    if (!cycle.on)
        return 0;
    STORE(cycle.on, 0);
    if (start < cycle.end)
        return 1;               /* clocks of two CPUs disagree: no sample */
    struct ctx_state *s = &table[cycle.cls][cycle.ctx];
    if (!s->init)
        return 1;
    double u = (double)(start - cycle.end) / (double)cycle.n;
    double cap = params.use_factor * cycle.x;
    struct arm_state *a = &s->arm[cycle.arm];
    observe_use(a, u < cap ? u : cap, cycle.mine);
    double moved = fabs(a->use_est - s->use_ref);
    if (cycle.mine && cycle.arm == s->cur && s->use_ref >= 0 && a->nuse >= EXPLORED_WINDOW
        && moved * USE_CHANGE > a->est + s->use_ref
        && moved * (double)cycle.n > USE_CHANGE * JITTER_NS) {
        /* What the program does after the clear changed (a pool's pages
         * now padded and read, or no longer): the other arm's use is
         * measured again, soon, before the two are compared whole. */
        s->arm[!cycle.arm].nuse = 0;
        s->use_ref = -1;
        s->confirmed = 0;
        if (s->gap > s->since + params.explore_min)
            s->gap = s->since + params.explore_min;
        drain_quiet(s);
    }
    return 1;
}

/* Settled (see maybe_quiet), whatever the cycle. */
static int is_settled(const struct ctx_state *s)
{
    int cur = s->cur;
    return s->period > 2 && !s->burst_left && !s->ramp_on && !s->rechecked
           && s->confirmed && s->arm[cur].samples >= WINDOW && s->arm[!cur].samples;
}

static void record(size_t n, int ticket, uint64_t start_ns, uint64_t end_ns, int span)
{
    if (ticket < 0 || n == 0 || ticket & CP_ADAPT_UNTIMED)
        return;
    int cls = ticket >> 6, kind = ticket >> 3 & 3, explored = ticket >> 2 & 1;
    int ctx = ticket >> 1 & 1, arm = ticket & 1;
    if (cls >= CP_ADAPT_CLASSES || pthread_mutex_trylock(&lock) != 0)
        return;
    struct ctx_state *s = &table[cls][ctx];
    if (!s->init) {             /* reset between choose and record */
        pthread_mutex_unlock(&lock);
        return;
    }
    s->timed++;
    int closer = span ? close_cycle(start_ns) : (STORE(cycle.on, 0), 0);
    uint64_t elapsed_ns = end_ns - start_ns;
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
    int mine = arm == s->cur;
    int surprise = observe(&s->arm[arm], s->calls, x, mine);
    int cur = s->cur, other = !cur;
    if (s->arm[cur].samples && s->arm[other].samples) {
        /* Whole cost: the clear and, where both arms have one, the use. */
        int whole = s->arm[cur].nuse && s->arm[other].nuse;
        double c = s->arm[cur].est + (whole ? s->arm[cur].use_est : 0);
        double o = s->arm[other].est + (whole ? s->arm[other].use_est : 0);
        /* The hysteresis, and the jitter of one timed call (the clock, an
         * interrupt) on top of it, which a short clear feels the most: at
         * 16 KiB, ~0.2 us of clear and ~0.3 us of loop between two, the
         * jitter alone is 10%. */
        double h = 1.0 + params.hysteresis_ppm * 1e-6 + JITTER_NS / ((double)n * (c > 0 ? c : 1));
        /* Switch when the other arm is faster by the hysteresis, the
         * current arm's latest clears agree (the slow clears right after
         * other work evicted the buffer pass, and the lagging average
         * alone must not switch), and the gain over AMORTIZE calls pays
         * for refilling the cache on the way (the first clears of an
         * ordinary-store arm after streaming ones). */
        struct arm_state *ca = &s->arm[cur], *oa = &s->arm[other];
        double recent = ca->nwin ? median(ca->win, ca->nwin, 3) + (whole ? ca->use_est : 0) : c;
        double into = oa->ntrans ? oa->trans : o;
        double refill = into > o ? (s->burst_len > 1 ? s->burst_len - 1 : 1) * (into - o) / 2 : 0;
        if (o * h < c && (arm != cur || recent > o * h) && (c - o) * AMORTIZE > refill) {
            /* The arm left behind is measured afresh when next explored:
             * the samples that made it look worse (a burst of interrupts,
             * or the workload before a change) do not hold it back. */
            s->arm[cur].restart = 1;
            s->arm[cur].nuse = 0;
            s->use_ref = -1;
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
            s->use_ref = ca->nuse ? ca->use_est : -1;
            uint64_t gap = (uint64_t)params.explore_min << s->confirmed;
            /* Where timing is sampled the longest gap grows with the
             * period, so that it stays about as many bytes of clears: an
             * exploration's timed calls cost what the sampling saves. */
            uint64_t most = (uint64_t)params.explore_max
                            * (s->period > SAMPLE_GAP ? s->period / SAMPLE_GAP : 1);
            if (gap > most)
                gap = most;
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
                gap = need < (double)most ? (uint64_t)need + 1 : most;
            s->gap = (uint32_t)gap;
        }
    }
    /* A steady sample opens a cycle, unless it closed one and the context
     * is settled: then the next calls run untimed. */
    if (span && !(closer && is_settled(s))) {
        cycle = (struct cycle){0, cls, ctx, arm, mine, n, end_ns, x};
        STORE(cycle.on, 1);
    }
    maybe_quiet(s, n, cls, ctx);
    pthread_mutex_unlock(&lock);
}

void cp_adapt_record_span(size_t n, int ticket, uint64_t start_ns, uint64_t end_ns)
{
    record(n, ticket, start_ns, end_ns >= start_ns ? end_ns : start_ns, 1);
}

void cp_adapt_record(size_t n, int ticket, uint64_t elapsed_ns)
{
    record(n, ticket, 0, elapsed_ns, 0);
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
        out->calls = s->calls + (s->quiet_set - LOAD(s->quiet_left)) + LOAD(s->quiet_ran);
        if (fast_owner == s)
            out->calls += LOAD(cp_adapt_fast_word.set) - LOAD(cp_adapt_fast_word.left);
        out->explorations = s->explorations;
        out->switches = s->switches;
        out->gap = s->gap;
        out->timed = s->timed;
        out->period = s->stretch > s->period ? s->stretch : s->period;
        out->confirmed = s->confirmed;
        for (int i = 0; i < 2; i++)
            out->use_ns_per_byte[i] = s->arm[i].nuse ? s->arm[i].use_est : 0.0;
    }
    pthread_mutex_unlock(&lock);
    return have;
}
