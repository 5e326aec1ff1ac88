/*
 * The learner of adaptive auto: in the band of sizes where ordinary stores
 * and streaming stores each win in turn, it chooses between the two for a
 * single clear, per size class and context.
 *
 * The context is the buffer's history, told by its address without a
 * clock: "recent" when it was cleared within the last reuse_bytes of band
 * clears (a last-level cache's worth), or, for a large buffer, when the
 * distinct buffers cleared since (the latest large ones counted once each,
 * the small clears one by one) and it fit in reuse_bytes; "other" when not.  A recent buffer
 * up to recent_max is in the cache, and ordinary stores keep it there for
 * the program; a buffer as large as reuse_bytes or larger never is (the
 * cache holds the program's other data too), and ordinary stores would
 * keep only its tail there, so it streams: neither needs a clock.  (With
 * window_timed, one of exactly reuse_bytes cleared again with little
 * between, an eighth of it at most, is recent and timed: a cache that
 * keeps a buffer up to nearly its whole size keeps much of this one after
 * ordinary stores, and a program that reads it next gains by that.)
 * Everything else is timed, because what decides it is what the program
 * does after the clear: a buffer read next wants ordinary stores even
 * where streaming clears it faster.  The first rule is checked: now
 * and then the clear of such a buffer is timed alone, and where it cost
 * more than a streaming clear does (stream_ns_per_byte, measured) in 2 of 3
 * checks, the buffer was not in the cache after all (the program's other
 * buffers, its reads or a sleep emptied it), and its context is timed
 * from then on like any other (a check refill_gain cheaper than the one
 * before is a buffer coming into the cache: not slow).  A recent buffer above recent_max and below
 * reuse_bytes (up to held_max) is held so too once a comparison of its
 * size class found the machine keeps such a buffer in the cache (its
 * ordinary-store clears, the buffer back in the cache, below 0.9x its
 * streaming ones), and on its own vote (3 of its latest 5 checks above
 * 1.05x a streaming clear, or, where that comparison's streaming clears
 * all cost more (the program leaves the buffer's lines dirty), above the
 * geometric mean of its ordinary-store clears in and out of the cache
 * there, at most 1.5x; its checks wait out the refill after a clear of it
 * outside the window, or after the comparison, while less than an eighth
 * of it is cleared between): how much of the cache one program keeps is
 * the machine's, and its neighbours'.  A class found kept holds sizes up
 * to a quarter above the one its comparison ran on (the class spans a
 * factor of two).  Up to kept_max (sizes near recent_max, kept about as
 * often as not; or, where the cache keeps a buffer up to nearly its whole
 * size, up to three quarters of it) it is held so from its first recent
 * call, presumed kept,
 * its checks slow only above 1.25x a streaming clear (as those of a
 * buffer up to recent_max) and its first five one call apart, while at
 * most 2 of its class's latest 8 recent calls had a footprint (the size
 * and the distinct bytes cleared since the buffer's previous clear) above
 * kept_max + recent_max, and until a comparison of its size class finds the machine
 * does not keep it among such footprints (a verdict among larger ones
 * leaves the size presumed kept once they are small again: the same
 * buffer cleared alone).  A class may hold both a buffer up to
 * recent_max and held sizes (recent_max a power of two): each kind has
 * its own checks, and a held buffer found out of the cache leaves the
 * other cached.
 *
 * Each context has a safe role, which runs before anything is known and
 * wherever the evidence is not decisive: ordinary stores (memset's) for a
 * buffer that may be in the cache; streaming for one not cleared lately and
 * larger than a quarter of reuse_bytes, which is not in the cache and too
 * large for ordinary stores to pay for reading it in.  A recent buffer
 * larger than recent_max that its checks found out of the cache (or
 * unchecked) starts on streaming, and falls back on ordinary stores; it is
 * compared after its first 16 calls, or after 4 where the program's work
 * after each clear took twice the clear (its calls 1-3 are timed, and are
 * the streaming block of the comparison's first pair); so does one not
 * cleared lately (nothing says it is in the cache), compared after its
 * context's first 16 calls.  The
 * other role is chosen only on decisive evidence, by paired comparison: the
 * two roles run in pairs of blocks of calls, the order of the two blocks
 * drawn at random for each pair, so that drift and the program's noisy work
 * land on both alike; a call's cost is the time from its start to the start
 * of the thread's next band clear (the clear and what the program did right
 * after it), on the thread's CPU clock where the configuration says so (a
 * sleep, a wait or another process's time slice is none of what a role
 * costs) and the call is at least cpu_span_min (the clock is a system
 * call: a shorter span is on the monotonic clock).  Streaming as the safe
 * role (a large buffer not cleared lately) also ends a comparison after
 * its first two pairs where ordinary stores
 * cost 1.5 times as much in both (their calls are the comparison's price);
 * so does streaming as the start role of a recent buffer above
 * recent_max, or ordinary stores as the safe role of a buffer not cleared
 * lately above recent_max, where each ordinary-store clear alone in the
 * window cost 1.5 times the streaming ones too (the machine does not keep
 * it).  A recent buffer above recent_max whose first temporal block did
 * not bring it back at all (its ordinary-store clears within 7% of each
 * other, the first after streaming included) at 1.5 times the streaming
 * ones ends on streaming after that one pair, where the pair found
 * streaming cheaper for the program too.  The
 * other way, that buffer's comparison ends on ordinary stores after two
 * pairs where both found streaming dearer and its ordinary-store clears
 * alone came back below 0.9 times the streaming ones (the machine keeps
 * it; each pair costs the refill after the streaming block).
 * Where ordinary stores are the safe role of a buffer not cleared lately
 * (a walk: each role one call at a time), the first pair is run and not
 * counted: its streaming call is the first after a long run of ordinary
 * stores, and pays for switching over (2-4x a streaming clear at 16 KiB
 * on a Zen 5 guest), once for a program that switches, not per call.
 * A comparison ends undecided, on the safe role, where its pairs run out
 * (or the calls they would run as planned: a temporal block that grows
 * with a refill does not make it longer)
 * or where after six the other role is behind at the mean and at the
 * median; it goes on after four times the calls it ran, from its pairs.
 * One exception: where streaming is the safe role and the pairs run out
 * with ordinary stores ahead at the mean and at the median, ordinary
 * stores take over (memset's own, which cannot lose to it; the program
 * uses what it clears, and its noise hid how much).
 * Once settled, a timed pair of calls now and then watches the role's
 * cost, and a change of it (the program changed) starts a comparison
 * again; so does a recheck, after a gap that doubles.  An early verdict's
 * one or two pairs are too few samples of that cost: its watch's first
 * three set it.
 *
 * A per-call path asks cp_adapt_choose(n, addr) for a ticket and runs the
 * role it names (ticket & CP_ADAPT_ROLE).  Unless the ticket has
 * CP_ADAPT_UNTIMED, it reads cp_adapt_now_ns() before and after the clear
 * and hands both to cp_adapt_record_span(n, ticket, start, end).  A
 * negative ticket means "not mine": run the static choice, record nothing.
 * Outside the band that is one comparison and no lock; the recent buffers
 * up to recent_max, the buffers of reuse_bytes and more and a settled
 * context's untimed calls take no lock either; the timed calls a
 * try-lock, never a wait: a call that finds the learner busy gets the
 * static choice.
 *
 * The learning is a pure function of the (n, addr, times) sequence and
 * the seed, so tests drive choose/record_span with synthetic times.
 */
#ifndef CLEARPAGES_ADAPT_H
#define CLEARPAGES_ADAPT_H

#include <stddef.h>
#include <stdint.h>

/* BEGIN CDEF */

enum {
    /* The roles: what ticket & CP_ADAPT_ROLE names. */
    CP_ADAPT_TEMPORAL = 0,      /* ordinary stores */
    CP_ADAPT_STREAMING = 1,     /* non-temporal stores */
    /* A ticket's fields. */
    CP_ADAPT_ROLE = 1,          /* ticket & this: the role */
    CP_ADAPT_CONTEXT_SHIFT = 1, /* ticket >> this & 1: the context */
    CP_ADAPT_SAMPLE = 4,        /* ticket & this: the time from this call to the next
                                   clear of its context is a sample of its role */
    CP_ADAPT_CHECK = 16,        /* ticket & this: the clear alone is timed, to check
                                   that a recent buffer taken as cached is (set only
                                   without CP_ADAPT_UNTIMED) */
    CP_ADAPT_UNTIMED = 32,      /* ticket & this: run the role; no clock, no record */
    CP_ADAPT_CLOSE = 64,        /* ticket & this: timed only to close the thread's span
                                   (its own clear noted nowhere) */
    CP_ADAPT_CLASS_SHIFT = 8,   /* ticket >> this: the size class */
    CP_ADAPT_CLASSES = 64,      /* size class: floor(log2(n)) */
    /* The contexts, as cp_adapt_stat takes them. */
    CP_ADAPT_OTHER = 0,         /* not cleared within the last reuse_bytes of clears */
    CP_ADAPT_RECENT = 1,        /* cleared within them */
    CP_ADAPT_CONTEXTS = 2,
    /* A buffer not cleared lately and larger than reuse_bytes / this starts
     * on streaming (its safe role). */
    CP_ADAPT_OTHER_DIVISOR = 4,
    /* A held buffer's checks (adapt.c, HELD_MARGIN and held_ref): slow
     * above this percentage of a streaming clear, or where its comparison
     * found its streaming clears dearer too, above the geometric mean of
     * its ordinary-store clears in and out of the cache, at most
     * CP_ADAPT_REFILL_FAR_PCT of one; HELD_VOTE of the latest HELD_KEEP
     * slow ones hand it to a comparison.  Exported so that plan() states
     * the values the learner runs by. */
    CP_ADAPT_HELD_MARGIN_PCT = 105,
    /* ... and a recent buffer's up to recent_max, or a held size presumed
     * kept (kept_max) before any comparison of its class: slow above this
     * percentage (adapt.c, CHECK_MARGIN). */
    CP_ADAPT_CHECK_MARGIN_PCT = 125,
    /* ... in this many of its latest CP_ADAPT_CHECK_KEEP checks (adapt.c,
     * CHECK_VOTE, CHECK_KEEP). */
    CP_ADAPT_CHECK_VOTE = 2,
    CP_ADAPT_CHECK_KEEP = 3,
    CP_ADAPT_REFILL_FAR_PCT = 150,
    CP_ADAPT_HELD_VOTE = 3,
    CP_ADAPT_HELD_KEEP = 5,
    /* A size presumed kept (kept_max) is held while at most CP_ADAPT_FP_VOTE
     * of its class's latest CP_ADAPT_FP_CALLS recent calls had a footprint
     * (its size and the distinct bytes cleared since the buffer's previous
     * clear) above kept_max + recent_max. */
    CP_ADAPT_FP_CALLS = 8,
    CP_ADAPT_FP_VOTE = 2,
    /* learned: why a context runs its role (cp_adapt_stat's learned; 0,
     * CP_LEARNED_NONE, is the policy's "the learner was not asked"). */
    CP_LEARNED_FIRST = 1,       /* nothing compared yet: the safe role */
    CP_LEARNED_CACHED = 2,      /* recent and up to recent_max (or held_max, while
                                   checked): in the cache, untimed */
    CP_LEARNED_COMPARING = 3,   /* a comparison is under way */
    CP_LEARNED_STREAMING = 4,   /* streaming cost less (decisively, where it is not
                                   the safe role) */
    CP_LEARNED_TEMPORAL = 5,    /* the temporal role cost less (likewise) */
    CP_LEARNED_EVEN = 6,        /* no decisive difference: the safe role */
    CP_LEARNED_LARGE = 7,       /* reuse_bytes or larger: never all in the cache,
                                   streaming, untimed (but see window_timed) */
    /* The span clock (cp_adapt_params' span_clock). */
    CP_ADAPT_SPAN_CALLER = 0,   /* the start_ns each call hands to record_span */
    CP_ADAPT_SPAN_CPU = 1,      /* the thread's CPU time, read by the learner as it
                                   hands out each timed ticket */
    /* What started a context's latest comparison (cp_adapt_stat's trigger). */
    CP_ADAPT_BY_START = 0,      /* the context's first calls */
    CP_ADAPT_BY_CHANGE = 1,     /* the settled role's cost moved */
    CP_ADAPT_BY_RECHECK = 2,    /* the recheck gap ran out */
    CP_ADAPT_BY_EVICTED = 3,    /* a recent buffer taken as cached cleared slower than
                                   streaming would: it was not in the cache */
    CP_ADAPT_BY_SIZE = 4,       /* two calls in a row, during a comparison, of sizes
                                   more than a quarter off the size it started on */
    CP_ADAPT_BY_SILENCE = 5,    /* a call of a context comparing or undecided after
                                   more of other clears since its size class's
                                   previous call than CP_ADAPT_SILENCE_FACTOR times
                                   the window and the most between its latest calls */
    CP_ADAPT_SILENCE_FACTOR = 4
};

struct cp_adapt_params {
    size_t lo, hi;              /* the band: lo <= n < hi adapts; lo >= hi: off */
    size_t reuse_bytes;         /* a buffer cleared again within this many bytes of
                                   band clears is recent (0: none is) */
    size_t recent_max;          /* a recent buffer of at most this many bytes takes
                                   the temporal role untimed (0: none) */
    size_t held_max;            /* ... and one above recent_max, of at most this many
                                   (and fewer than reuse_bytes), too, once a comparison
                                   found its size class kept in the cache, and while
                                   its checks find its ordinary-store clear no dearer
                                   than a streaming one (0: none; needs the checks) */
    size_t kept_max;            /* ... and one of at most this many (up to held_max)
                                   from its first recent call, unless a comparison
                                   found its size class not kept: near recent_max a
                                   buffer is as likely kept as not (and up to three
                                   quarters of a cache that keeps one up to nearly its
                                   whole size, more likely), and ordinary
                                   stores, as memset, lose little where it is not,
                                   until its checks find it out (0: none) */
    size_t large_min;           /* a buffer of at least this many bytes is large:
                                   streaming, untimed, however recently cleared, as one
                                   of reuse_bytes or more is (0 or above reuse_bytes:
                                   reuse_bytes; see window_timed); the sizes held
                                   as cached end below it */
    size_t decide_bytes;        /* a comparison ends undecided after max(64 calls,
                                   this many bytes of its clears) */
    size_t sample_bytes;        /* settled: one timed pair of calls per this many
                                   bytes of the context's clears (0: every call) */
    size_t recheck_bytes;       /* settled: compared again after this many bytes of
                                   its clears, the gap doubling while it holds (0: never) */
    uint32_t margin_ppm;        /* streaming must cost this much less at the median */
    uint32_t seed;              /* of the draws that order each pair */
    int span_clock;             /* CP_ADAPT_SPAN_*: what a call's span is measured on */
    size_t cpu_span_min;        /* with CP_ADAPT_SPAN_CPU: the spans of calls this large
                                   or larger are on the CPU clock, the shorter ones on
                                   the caller's (0: set at configure, where a streaming
                                   clear costs CPU_SPAN_READS reads of the CPU clock) */
    double stream_ns_per_byte;  /* what a streaming clear costs, measured: a recent
                                   buffer taken as cached whose ordinary-store clear
                                   costs more, in 2 of 3 checks, is timed instead
                                   (0: never checked) */
    size_t check_bytes;         /* such a buffer's clear is checked once per this many
                                   bytes of its context's clears (at most every
                                   fourth call, at least every 4096th) */
    size_t check_min;           /* ... if it has at least this many bytes (an L2's
                                   worth: a smaller one out of the cache costs little
                                   to read in, and its clear alone is too short to
                                   time against streaming) */
    double refill_gain;         /* a recent buffer's comparison runs the temporal role
                                   three calls in a row, and one more while the latest
                                   cost this fraction less than the one before: the
                                   buffer is still coming back into the cache (at most
                                   eight; 0: two calls, as the streaming role) */
    int window_timed;           /* 1: a buffer of exactly reuse_bytes cleared again
                                   with at most an eighth of it between (recent), where
                                   large_min does not bind below it, is timed, not
                                   large: a machine whose cache keeps a buffer up to
                                   nearly its whole size (0: large, as a larger one) */
};

/* What one (size class, context) has learned, for plan() and info. */
struct cp_adapt_stat {
    int role;                   /* the role settled on (while comparing: the one before) */
    int learned;                /* CP_LEARNED_*: why that role */
    int safe;                   /* the role it runs where nothing is decisive */
    int start;                  /* the role it runs before anything is known */
    int trigger;                /* CP_ADAPT_BY_*: what started the latest comparison */
    double clear_ns_per_byte[2];    /* the clear alone, median of the latest; 0: none */
    double cost_ns_per_byte[2];     /* the clear and the program's time until the next
                                       clear of the context, median over the latest
                                       comparison's pairs; 0: none */
    uint32_t pairs;             /* pairs counted in the latest (or current) comparison */
    uint32_t wins;              /* of them, those streaming cost less in */
    uint32_t dropped;           /* pairs set aside as disturbed (a preemption) */
    double ratio;               /* their median streaming / temporal cost; 0: none */
    uint64_t calls, timed, comparisons, switches;
    uint32_t period;            /* settled: a timed pair every `period` calls */
    int kept;                   /* the size class: 1 found kept in the cache, -1 found
                                   not kept (above recent_max), 0 not known */
    size_t kept_upto;           /* kept 1: the sizes held, up to this many bytes */
    int crowded;                /* of the class's latest CP_ADAPT_FP_CALLS recent calls
                                   of a held size, those whose footprint was above
                                   kept_max + recent_max; -1: none seen */
};

/* The bounds cp_adapt_configure derives from the parameters, which
 * choose() runs by: plan() states the rules that apply to a size by them. */
struct cp_adapt_bounds {
    size_t recent;              /* a recent buffer up to this size takes the temporal
                                   role untimed (recent_max, below large; 0: none) */
    size_t cached;              /* ... and one above recent up to this size, while held
                                   as cached (held_max, below large; recent: none) */
    size_t kept;                /* ... from its first recent call, presumed kept, up to
                                   this size (kept_max, at most cached; 0: none) */
    size_t crowd;               /* a presumed size's footprint above this counts
                                   against it (kept + recent) */
    size_t large;               /* a buffer of this size or more streams untimed
                                   (large_min, at most reuse_bytes; 0: none) */
    size_t large_recent;        /* ... a recent one (window_timed: past the window,
                                   whose own size is timed) */
    size_t check_from;          /* a recent buffer taken as cached has its clear
                                   checked from this size (0: never) */
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
 * when busy (run the static choice, record nothing); else its fields say
 * the role and whether to time the call. */
int cp_adapt_choose(size_t n, const void *addr);
/* The clear of n bytes with that ticket ran from start_ns to end_ns
 * (cp_adapt_now_ns readings). */
void cp_adapt_record_span(size_t n, int ticket, uint64_t start_ns, uint64_t end_ns);
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
/* The bounds as configured. */
void cp_adapt_bounds(struct cp_adapt_bounds *out);
/* The roles a context (CP_ADAPT_OTHER, CP_ADAPT_RECENT) of n-byte clears
 * runs where nothing is decisive and before anything is known, as
 * configured: safe | start << 1. */
int cp_adapt_roles(size_t n, int context);

/* END CDEF */

/*
 * The untimed path, inline where the calls are made.  The learner hands
 * its next untimed calls to this word when they clear the buffer just
 * cleared, again, back to back (a recent buffer up to recent_max, or a
 * settled context between its samples): those take the role it holds with
 * two compares, a load, a decrement and a branch: no hash, no lock, no
 * call.  Any other band call goes through cp_adapt_choose, which first
 * puts the calls run so far into the learner's books (the address table
 * and the context's call count, as if each had been looked up) and takes
 * the word back.  Read and written with relaxed atomics, without the lock;
 * the calls that reach it hold the GIL.
 */
struct cp_adapt_fast {
    uintptr_t addr;             /* the buffer's address; 0: no calls handed out */
    size_t n;                   /* its length */
    uint32_t left;              /* untimed calls still to run */
    uint32_t set;               /* left as the learner set it */
    int ticket;                 /* what each gets (CP_ADAPT_UNTIMED set) */
};

/* The learner's word (adapt.c); the binding reaches it through the API table. */
extern struct cp_adapt_fast cp_adapt_fast_slot;

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
