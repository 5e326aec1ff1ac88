/*
 * auto that follows the workload: in a band of sizes where the temporal
 * and the streaming routine each win in turn (a buffer still in the cache
 * against one that is not; a buffer the program reads next against one it
 * does not), the caller times its own clears and this learner chooses
 * between the two, per size class and kind of buffer, from the observed
 * cost per byte: the clear's own time and what the program spent before
 * it cleared that kind of buffer again.
 *
 * A per-call path asks cp_adapt_choose(n, addr) for a ticket and runs the
 * arm it names (ticket & 1).  Unless the ticket has CP_ADAPT_UNTIMED, it
 * reads cp_adapt_now_ns() before and after the clear and hands both to
 * cp_adapt_record_span(n, ticket, start, end).  A negative ticket means
 * "not mine": run the static choice and record nothing.  Outside the band
 * that is one comparison and no lock; inside it, once an arm is settled,
 * most calls are untimed and take no lock either; the others a try-lock,
 * never a wait: a call that finds the learner busy gets the static choice.
 *
 * The learning is a pure function of the (n, addr, times) sequence, so
 * tests drive choose/record with synthetic times.
 */
#ifndef CLEARPAGES_ADAPT_H
#define CLEARPAGES_ADAPT_H

#include <stddef.h>
#include <stdint.h>

/* BEGIN CDEF */

enum {
    CP_ADAPT_TEMPORAL = 0,      /* ticket & 1: ordinary stores */
    CP_ADAPT_STREAMING = 1,     /* ticket & 1: non-temporal stores */
    CP_ADAPT_UNTIMED = 32,      /* ticket & this: run the arm; no clock, no record */
    CP_ADAPT_CLASSES = 64,      /* size class: floor(log2(n)) */
    CP_ADAPT_CONTEXTS = 2       /* 0: other buffers, 1: cleared again soon */
};

struct cp_adapt_params {
    size_t lo, hi;              /* the band: lo <= n < hi adapts; lo >= hi: off */
    size_t nt_min;              /* the static choice: streaming from nt_min */
    size_t reuse_bytes;         /* a buffer cleared again within this many bytes
                                   of band clears is "recent" (0: one context) */
    uint32_t explore_min;       /* calls between explorations at first */
    uint32_t explore_max;       /* the longest gap the doubling reaches */
    uint32_t budget_ppm;        /* expected cost of exploring, parts per million */
    uint32_t hysteresis_ppm;    /* the other arm must be this much faster */
    uint32_t recency_shift;     /* each sample weighs 1/2**shift */
    uint32_t stale_calls;       /* an arm unseen this long is re-measured, not averaged */
    uint32_t explore_burst;     /* calls per exploration, the last one timed (>= 2) */
    size_t sample_bytes;        /* once settled, one call in max(1, sample_bytes / n)
                                   is timed (with the call after it), more
                                   where clears are short; 0: every call */
    uint32_t use_factor;        /* the program's time between two clears of a kind
                                   counts up to this many times the clear's own */
};

/* What one (size class, context) has learned, for plan() and info. */
struct cp_adapt_stat {
    int arm;                    /* the arm exploited now */
    double ns_per_byte[2];      /* recency-weighted estimate per arm; 0: none */
    double transition_ns_per_byte[2];   /* first call after the other arm; 0: none */
    uint64_t samples[2];
    double use_ns_per_byte[2];  /* the program's time after a clear of the arm,
                                   until the next clear of this kind; 0: none */
    uint64_t calls, explorations, switches;
    uint64_t timed;             /* calls timed (the others ran untimed, settled) */
    uint32_t gap;               /* calls between explorations now */
    uint32_t period;            /* settled: one timed sample every `period` calls */
    uint32_t confirmed;         /* explorations in a row that kept the arm */
};

/* The defaults, with the band off (lo = hi = 0). */
void cp_adapt_defaults(struct cp_adapt_params *p);
/* Set the parameters and forget everything learned. */
void cp_adapt_configure(const struct cp_adapt_params *p);
void cp_adapt_params(struct cp_adapt_params *out);
/* Forget everything learned; keep the parameters. */
void cp_adapt_reset(void);
/* 0: every size is outside the band (the static choice), what was learned
 * is kept; 1: the configured band again.  configure() turns it on. */
void cp_adapt_enable(int on);

/* Ticket for clearing n bytes at addr: < 0 outside the band, when off, or
 * when busy (run the static choice, record nothing); else ticket & 1 is the
 * arm (CP_ADAPT_TEMPORAL or CP_ADAPT_STREAMING). */
int cp_adapt_choose(size_t n, const void *addr);
/* The clear of n bytes with that ticket ran from start_ns to end_ns
 * (cp_adapt_now_ns readings): its time, and where it closes one, the time
 * the program spent since the last clear of its size class and kind. */
void cp_adapt_record_span(size_t n, int ticket, uint64_t start_ns, uint64_t end_ns);
/* The same with the clear's time alone (no time between clears is learned). */
void cp_adapt_record(size_t n, int ticket, uint64_t elapsed_ns);
/* 1 when addr was cleared within the last reuse_bytes of clears the
 * learner saw (as the context of cp_adapt_choose), 0 when not, -1 when
 * adaptation is off; this clear of n bytes is remembered either way.  For
 * clears that do not ask for a ticket (hot=True) but tell the cache's
 * state by their history.  addr NULL: only asks, remembering nothing:
 * 0 when no buffer of n bytes can be recent (n > reuse_bytes), else 1. */
int cp_adapt_recent(const void *addr, size_t n);
/* CLOCK_MONOTONIC in ns (the vDSO: no system call): clock.h's cp_now_ns,
 * for callers outside the core (the binding's timed clears, tests). */
uint64_t cp_adapt_now_ns(void);

/* 1 and *out filled when the class and context have data; 0 otherwise. */
int cp_adapt_stat(int size_class, int context, struct cp_adapt_stat *out);

/* END CDEF */

/*
 * The settled path, inline where the calls are made.  Once the context of
 * the buffer cleared last is settled, the learner hands its next untimed
 * calls to this word: calls that clear the same n bytes at the same address
 * again, back to back, take the arm it holds with two compares, a load, a
 * decrement and a branch: no hash, no lock, no call.  Any other band call
 * goes through cp_adapt_choose, which first puts the untimed calls run so
 * far into the learner's books (the address table and the context's call
 * count, as if each had been looked up) and takes the word back.  Read and
 * written with relaxed atomics, without the lock; the calls that reach it
 * hold the GIL.
 */
struct cp_adapt_fast {
    uintptr_t addr;             /* the buffer's address; 0: no calls handed out */
    size_t n;                   /* its length */
    uint32_t left;              /* untimed calls still to run */
    uint32_t set;               /* left as the learner set it */
    int ticket;                 /* what each gets (CP_ADAPT_UNTIMED set) */
};

/* The learner's word (adapt.c); the binding reaches it through the API table. */
extern struct cp_adapt_fast cp_adapt_fast_word;

/* A ticket from the word, or -1: ask cp_adapt_choose.  Only for n in the
 * band (the caller has checked). */
static inline int cp_adapt_fast_take(struct cp_adapt_fast *f, size_t n, const void *addr)
{
    if (__atomic_load_n(&f->addr, __ATOMIC_RELAXED) != (uintptr_t)addr
        || __atomic_load_n(&f->n, __ATOMIC_RELAXED) != n)
        return -1;
    uint32_t left = __atomic_load_n(&f->left, __ATOMIC_RELAXED);
    if (!left)
        return -1;
    __atomic_store_n(&f->left, left - 1, __ATOMIC_RELAXED);
    return __atomic_load_n(&f->ticket, __ATOMIC_RELAXED);
}

#endif
