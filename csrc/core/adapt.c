/*
 * The learner behind adaptive auto (see adapt.h for what it decides and
 * why).  Its parts, in the order of this file: the parameters; the address
 * table that tells a buffer's context; the untimed calls (the fast slot and
 * a settled context's quiet run); choosing (the recent buffers up to
 * recent_max without a clock, then the comparison's schedule or a settled
 * context's samples); the comparison's verdict; recording (a call's cost
 * is closed by the thread's next band clear); and what plan() and info
 * read back.
 *
 * Timing: clock_gettime(CLOCK_MONOTONIC) through the vDSO, with no TSC
 * calibration and no trust in an invariant TSC under a hypervisor or
 * across CPUs.  The numbers behind the constants are in docs/results.md.
 */
#include <math.h>
#include <pthread.h>
#include <string.h>
#include <time.h>

#include "clearpages.h"
#include "adapt.h"
#include "clock.h"
#include "inject.h"

enum {
    SEEN = 512,                 /* slots of the address table */
    GAP_FADE_SHIFT = 3,         /* a size class's most gap between calls fades by an
                                   eighth at each of its calls under the lock (silent) */
    STACK = 8,                  /* the latest distinct large buffers, remembered in
                                   order (is_recent) */
    STACK_DIVISOR = 64,         /* ... large: reuse_bytes / this or more */
    WINDOW = 7,                 /* clear times kept per role, for plan() and info */
    KEEP = 64,                  /* pairs a comparison keeps for its medians */
    PAIRS_CAP = 512,            /* the most pairs a comparison runs */
    CALLS_MIN = 64,             /* a comparison may run this many calls whatever the size */
    STREAM_PAIRS = 4,           /* the fewest pairs that can choose streaming */
    TEMPORAL_PAIRS = 4,         /* ... or end a comparison early on the temporal role */
    WATCH = 3,                  /* a settled role's latest samples, watched */
    PERIOD_MIN = 8,             /* settled: the shortest period, so that the samples
                                   the watch compares are apart (a preemption burst
                                   lasts a few calls of the largest sizes) */
    PERIOD_MAX = 512,           /* settled: the longest period from sample_bytes */
    STRETCH_MAX = 4096,         /* ... and from the short clears' own cost */
    RECHECK_CALLS = 512,        /* the shortest recheck gap: a recheck's few calls on
                                   the losing role cost at most ~2% of it */
    RECHECK_DOUBLINGS = 10,     /* the recheck gap doubles at most this often */
    ALARM_DOUBLINGS = 3,        /* the watch's bound doubles at most this often */
    EVEN_GAP = 4,               /* after a draw, compared again after this many times
                                   the calls its pairs ran */
    FAST_RUN = 1 << 16,         /* untimed calls handed to the fast slot at once */
    CLIP_EVERY = 8,             /* the bounds are found again every this many pairs */
    REF_PAIRS = 3,              /* pairs before any is judged disturbed or counted */
    EARLY_PAIRS = 2,            /* ... but this many, each won by streaming as the
                                   safe role by EARLY_FACTOR, end the comparison */
    FUTILE_PAIRS = 6,           /* counted pairs from which a comparison whose mean
                                   and median favour the safe role ends on it */
    FIRST_LIKELY = 16,          /* a context's first calls, untimed, where its safe role
                                   is likely right */
    CHECK_CALLS = 4,            /* a cached context's checks are at least this many
                                   calls apart ... */
    CHECK_CALLS_MAX = 4096,     /* ... and at most this many */
    FP_CALLS = CP_ADAPT_FP_CALLS,   /* a held size's class: its latest recent calls
                                       whose footprints presume it kept or not */
    FP_VOTE = CP_ADAPT_FP_VOTE,     /* ... presumed kept while at most this many of
                                       them were above crowd_most (held_kept) */
    FP_MASK = (1 << FP_CALLS) - 1,
    FP_SEEN = 1 << 16,
    HELD_YES = 1,
    HELD_NO = 2,
    REFILL_BLOCK = 8,           /* the longest temporal block of a recent buffer's
                                   comparison (refill_gain) */
    REFILL_HELD = 16,           /* a held buffer's */
    REFILL_WAIT = 48,           /* the calls a held buffer's checks wait out after
                                   it left the cache (its clear outside the window,
                                   or streamed): see await_refill */
    NEAR_DIVISOR = 8,           /* ... while it is cleared again with less than this
                                   fraction of it cleared between */
    FAR_CALLS = 2,              /* ... or with more before this many of its calls in
                                   a row */
    REFILL_SPAN = 8,            /* ... and, a held size's, goes on while its latest
                                   clear cost refill_gain less than the one this many
                                   calls before (watch_refill) ... */
    REFILL_MOST = 128,          /* ... up to this many calls */
    PROBE_FROM = 1,             /* a held buffer on streaming before anything is
                                   known: its calls from this one on ... */
    PROBES = 3                  /* ... this many, are timed (busy_program) */
};

/* The verdict is a t test on the counted pairs' ln(streaming / temporal)
 * cost, each clipped to CLIP median absolute deviations from the median of
 * the latest pairs.  It is looked at after every pair, so its bound for
 * streaming starts far above Student's 0.1% level and falls with the
 * pairs to T_STREAM; streaming must also cost less in m/2 + Z_SIGN *
 * sqrt(m) / 2 of the m pairs (a sign test), and by the margin at the
 * mean.  The temporal role needs less (T_TEMPORAL + T_TEMPORAL_FEW / m): it
 * is the safe side, and its early verdict ends what the comparison costs.  (How often two
 * equal roles pass, in docs/results.md.) */
#define CLIP 2.5
#define T_STREAM 2.8
#define T_FEW 14.0
#define Z_SIGN 2.0
#define T_TEMPORAL 2.0
#define T_TEMPORAL_FEW 6.0
/* The early verdict of a safe streaming role (a buffer not cleared lately
 * and larger than a quarter of the cache): where each of the first
 * EARLY_PAIRS pairs found ordinary stores this many times dearer, the rest
 * of the pairs would only pay that price again (a cold buffer of 16 MiB
 * cleared with ordinary stores costs ~2.1 times a streaming clear on the
 * Zen 5 guest, and leaves the next clears its dirty lines to write back).
 * Only there (and where streaming is the start role, early_streaming):
 * at such sizes a clear takes a millisecond or more, and the
 * program's noise hardly moves a pair; for smaller buffers two pairs, a
 * few microseconds each, can look 1.5x apart by chance (on generated
 * programs, walks of 24-256 KiB lost up to 0.3 of their best with the
 * early verdict on either safe role). */
#define EARLY_FACTOR 1.5
_Static_assert(EARLY_PAIRS < REF_PAIRS, "the early verdict comes before the reference pairs");
/* A span above DISTURBED times its role's typical one was disturbed: set
 * aside, not clipped (a preemption adds milliseconds to either role). */
#define DISTURBED 4.0
/* A settled role whose latest WATCH samples all moved the same way by more
 * than this factor, or CHANGE_DEVS of its spread in the comparison,
 * whichever is more, is compared again: the program changed. */
#define CHANGE_MIN 1.2
#define CHANGE_DEVS 4.0
/* What a timed pair of calls costs whatever the size besides its span
 * clock's two reads (four monotonic clock reads, the lock twice, the
 * books); where clears are short the settled period stretches so that the
 * pairs stay within SAMPLE_SHARE of the time. */
#define PAIR_NS 500.0
#define SAMPLE_SHARE 0.005
/* The CPU clock is a system call (0.55 us on a Zen 4 KVM guest, 1.1-1.4 us
 * on a Zen 3 one): read for every timed call of a comparison, it would
 * cost a 16 KiB clear several times its own time.  A span goes on it only
 * where a streaming clear of the call's size costs at least this many of
 * its reads (cpu_span_min); a shorter span is on the monotonic clock, where
 * a sleep or another process's time slice inside it is noise that both
 * roles of the paired comparison carry (and a comparison it leaves
 * undecided keeps the safe role). */
#define CPU_SPAN_READS 8.0
/* A cached context's checked clear is slow when it costs more than this
 * times a streaming clear (a cached buffer's ordinary-store clear costs
 * 0.6-0.8 times one on the Zen 4 guest, one evicted 1.2-3 times). */
#define CHECK_MARGIN (CP_ADAPT_CHECK_MARGIN_PCT / 100.0)
#define CHECK_VOTE CP_ADAPT_CHECK_VOTE    /* of the latest CHECK_KEEP checks, slow: out of
                                           the cache */
#define CHECK_KEEP CP_ADAPT_CHECK_KEEP
/* ... and a held one's (above recent_max, up to held_max) when it costs
 * more than 1.05 times a streaming clear: such a buffer stays in the cache
 * only where the machine leaves one program most of the L3, and where it
 * does not, its ordinary-store clear costs 1.1-1.2 times a streaming one
 * (the Zen 4 guest's profile at 16-32 MiB), and streaming wins.  Where it
 * stays (0.75-0.9 times streaming on a Zen 5 guest at 20-30 MiB), 1-11% of
 * its clears still cost more than 1.05 times streaming, in bursts (the
 * host's other tenants share the L3), so a held buffer is taken out of the
 * cache on 3 of its latest 5 checks, not 2 of 3.  A program that leaves
 * the buffer's lines dirty makes each clear dearer, in the cache too, as
 * it has either role write them back: "pad" at 16 MiB on the Zen 3 guest
 * clears it in 370-490 us on ordinary stores and 570-610 streamed, against
 * a reference of 392 (412 with the margin), and 750-900 us on ordinary
 * stores out of the cache; its checks took it out of the cache for a
 * second comparison in two of three traced runs of 66-300 calls.  So where
 * the comparison that found a held buffer kept timed none of its streaming
 * clears below the margin, a check is slow only above the geometric mean of
 * what its ordinary-store clears cost there in the cache (the window's
 * median) and out of it (the dearest: a temporal block's first call after a
 * streaming one), at most REFILL_FAR times the reference (a clear the
 * scheduler broke into is no bound): held_ref. */
#define HELD_MARGIN (CP_ADAPT_HELD_MARGIN_PCT / 100.0)
#define HELD_VOTE CP_ADAPT_HELD_VOTE
#define HELD_KEEP CP_ADAPT_HELD_KEEP
/* Before its size class was found kept (kept_class), a buffer above
 * recent_max has its comparison's temporal block end at the first clear
 * above this many times a streaming clear: the Zen 5 guest's refills at
 * 24-30 MiB cost at most 1.2x the streaming reference from their second
 * call on, and on the Zen 4 guest, which does not keep such a buffer, each
 * call of a longer block costs 1.5-3 streaming ones (1.6-3.4x from the
 * sixth call on at 27.5 MiB, mostly 1.9-2.4x). */
#define REFILL_FAR (CP_ADAPT_REFILL_FAR_PCT / 100.0)
/* A held buffer's first calls, streamed (its start role), where what the
 * program does after each clear takes BUSY_FACTOR times the clear or more
 * (the median of PROBES spans, each over the streaming clears' median):
 * the program is compared from then on, not after FIRST_LIKELY calls.
 * Waiting is what keeps a short phase from paying a comparison, whose
 * every pair costs the refill after its streaming block (2-4 times a
 * clear at first); where the program's own work is as long as the clear
 * and more, that refill is a smaller part of each pair, and a program
 * that reads the buffer after the clear is where ordinary stores win
 * most: "pad" (half of each 4 KiB row written, then the buffer summed) at
 * 16 MiB on the Zen 3 guest runs its clear and its work in 0.6 + 1.7 ms
 * streamed, 0.35-0.55 + 0.55-0.95 ms on ordinary stores; in a phase of 66
 * calls the first 17 ran streamed, and auto came to 0.75 of rep_stosb;
 * compared from the seventh call 0.83-0.88, from the fifth with the
 * probes for the first pair's streaming block 0.89 (start_comparison:
 * that pair runs only its temporal block, two streamed calls fewer).  A
 * clear-only program's span is its clear (1.0-1.1 times it): it waits as
 * before. */
#define BUSY_FACTOR 2.0
/* ... and where they take at most QUIET_FACTOR times the clear, the program
 * clears the buffer and leaves it (early_left). */
#define QUIET_FACTOR 1.25

/* Whose checks took a context out of the cache (ctx_state's evicted): a
 * buffer up to recent_max, or one of a held size.  recent_max a power of
 * two (32 MiB on the Intel guest) shares its size class with the held
 * sizes above it; a held buffer found out of the cache leaves a buffer of
 * recent_max in it, cached, out of the held one's comparison. */
enum { EVICTED_SMALL = 1, EVICTED_HELD = 2 };

struct role_state {
    double clear[WINDOW];       /* the clear alone, ns per byte, newest last */
    unsigned nclear;
    uint64_t timed;
    double cost;                /* ln ns per byte of whole cost, the latest comparison's
                                   median; valid when have_cost */
    int have_cost;
};

struct ctx_state {
    int init;
    int role;                   /* the role settled on (while comparing: the one before) */
    int safe;                   /* the role where nothing is decisive */
    int start;                  /* the role before anything is known: the safe one, or
                                   streaming for a recent buffer above recent_max */
    int learned, trigger;           /* CP_LEARNED_*, CP_ADAPT_BY_* */
    int comparing;
    /* The comparison. */
    uint32_t block[2];          /* calls of each role in a row: 2 where the buffer
                                   keeps the state the other role left it in, else 1
                                   (the temporal role's: 3 and more, with refill) */
    int refill;                 /* the temporal block grows while the buffer comes
                                   back into the cache (refill_gain) */
    uint32_t len[2];            /* this pair's blocks */
    uint32_t pos;               /* this call's place in the pair, 0 .. len[0] +
                                   len[1] - 1 */
    int first;                  /* the role of the pair's first block */
    double fill[2];             /* this pair's ln cost per role so far */
    double least;               /* the cheapest ordinary-store clear alone, ns per byte,
                                   since the comparison started (0: none yet) */
    double most;                /* ... and the dearest: the first of a temporal block
                                   after a streaming one, the buffer out of the cache */
    /* Before the first comparison (busy_program). */
    float probe[PROBES];        /* ln(span / the clear alone) of the start role */
    unsigned nprobe;
    int busy;                   /* the program's work takes BUSY_FACTOR times the
                                   clear: compared now */
    int left_alone;             /* ... or at most QUIET_FACTOR times it: the program
                                   clears the buffer and leaves it (early_left) */
    unsigned have;              /* bit per role: fill holds it */
    int warmup;                 /* the comparison's first pair is still to complete:
                                   not counted (start_comparison) */
    uint32_t pairs;             /* pairs completed */
    uint32_t used, dropped;     /* of them: counted, set aside as disturbed */
    uint32_t wins;              /* of those counted, won by streaming */
    uint32_t pairs_max;         /* the most pairs of a comparison */
    uint32_t limit;             /* the pairs at which this comparison ends undecided */
    uint64_t until;             /* ... or the call (calls) at which it does */
    uint32_t fp_big, fp_all;    /* its ordinary-store calls: those whose footprint was
                                   above crowd_most, and all */
    size_t cmp_lo, cmp_hi;      /* the sizes it compares: a quarter about its first
                                   call's (0: none yet) */
    int outside;                /* the latest call's size was not among them */
    double sum, sumsq;          /* of the counted pairs' clipped ln ratios */
    double typical[2];          /* each role's median ln cost over the latest pairs */
    double clip_mid, clip_lim;  /* the clip of a ratio: mid +- lim */
    uint8_t ok[KEEP];           /* the latest pairs: 1 counted, 0 set aside */
    float lr[KEEP];             /* ln(streaming / temporal) of the latest pairs */
    float lc[2][KEEP];          /* ln cost per role of the latest pairs */
    /* Settled. */
    double ref, dev;            /* ln cost of the role at settling, and its spread */
    double watch[WATCH];
    unsigned nwatch;
    int rebase;                 /* settled on fewer than REF_PAIRS pairs: the watch's
                                   first WATCH samples set ref and dev */
    uint64_t since, recheck;    /* calls since settling; the next comparison at */
    uint32_t holds;             /* rechecks in a row that kept the role */
    uint32_t alarms;            /* changes seen in a row that kept the role: the
                                   watch's bound doubles for each */
    uint32_t period, stretch;
    int resting;                /* settled, its sample taken: an untimed run is under way */
    struct role_state roles[2];
    uint64_t calls, timed, comparisons, switches;
    /* The latest comparison's verdict, for plan() and info. */
    uint32_t last_pairs, last_dropped, last_wins;
    double last_ratio;
    /* Read and written without the lock (relaxed atomics): */
    /* The size class's, kept in its OTHER context's state, on the line of
     * the quiet run a walk of cold buffers reads anyway (silent): the byte
     * clock after the class's latest call, either context's (0: none), and
     * the most bytes of other clears between two of its latest calls. */
    uint64_t class_seen, class_gap;
    uint32_t quiet_left;        /* untimed calls still to run on `role` */
    uint32_t quiet_set;         /* quiet_left when the lock last set it */
    uint32_t quiet_ran;         /* untimed calls not yet counted in `calls` */
    uint32_t check_left;        /* cached: untimed calls before the next check */
    int refilling;              /* held: check_left waits out the refill after the
                                   buffer's clear outside the window (choose) */
    uint32_t far;               /* ... and its latest calls in a row with an eighth
                                   of it or more cleared between (cached_call) */
    uint32_t watched;           /* ... and a held size's calls timed in it and in its
                                   checks after it (watch_refill, check_clear) */
    /* Under the lock: */
    uint32_t checks;            /* cached: held sizes' checks since taken as cached
                                   (written under the lock, read without) */
    uint32_t held_hist;         /* ... and the latest of them (HELD_KEEP), as check_hist */
    uint32_t check_hist;        /* cached: the latest checks of sizes up to recent_max
                                   (CHECK_KEEP), a bit each, 1: slower than streaming */
    int evicted;                /* EVICTED_*: the checks found a recent buffer out of the cache:
                                   this context is timed, not taken as cached */
    uint32_t overruled;         /* comparisons that undid that, in a row: the checks
                                   rest 2^overruled recheck gaps after the latest */
    double held_ref;            /* held, found kept: a check slower than this, ns per
                                   byte, is slow where it is above the margin's
                                   (HELD_MARGIN; 0: none) */
    double check_prev[2];       /* cached: the latest check's ns per byte, of sizes up
                                   to recent_max [0] and held ones [1] (0: none yet) */
    double held_before;         /* ... and a held size's check before that one */
    float refill_seen[REFILL_SPAN]; /* its latest REFILL_SPAN timed calls in the wait and
                                   its checks after it, ns per byte, by watched %
                                   REFILL_SPAN (watch_refill, check_clear) */
};

struct seen {
    uintptr_t addr;
    uint64_t clock;             /* byte_clock when its last clear was chosen */
    uint64_t thread;            /* the number of the thread that chose it (its own_slot's id) */
    uint64_t own;               /* that thread's clock and lost_bytes then, added */
} __attribute__((aligned(32)));

/* A large buffer's latest clear, for the distinct bytes cleared since. */
struct stacked {
    uintptr_t addr;
    size_t n;
    uint64_t clock;             /* byte_clock after it */
    uint64_t large;             /* large_clock after it */
};

/* Written under `lock`; the band is also read without it (relaxed atomics). */
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static struct cp_adapt_params params;
/* cached_most: the largest recent buffer taken as cached, recent_max or
 * held_max (what choose() tests, one load). */
static size_t band_lo, band_hi, recent_most, cached_most;
/* large_from: the smallest large buffer (streaming, untimed): large_min,
 * at most reuse_bytes (0: none is large); large_recent_from: the same for a
 * recent buffer, which window_timed moves past the window where the
 * window is the bound (a recent buffer of exactly reuse_bytes is timed). */
static size_t large_from, large_recent_from;
/* Per size class above recent_most: 1 where this machine has shown it
 * keeps its recent buffers in the cache (settle, keeps_in_cache), -1 where
 * it has shown it does not, 0 not known; and kept_bound, what that verdict
 * holds for: kept, the sizes up to a quarter above the one found kept (a
 * class spans a factor of two: 79 MiB kept on the Intel guest did not
 * make 125 MiB so); not kept, 1 where most of its comparison's
 * ordinary-store calls had footprints above crowd_most (the same buffer
 * alone may yet be kept), else 0.
 * Its recent buffers are held as cached, up to cached_most, from their
 * first recent call where their size was found kept, or presumed kept
 * (held_kept); the others are timed like any buffer, starting on
 * streaming.  Set by comparisons, forgotten with the rest (relaxed
 * atomics, read without the lock). */
static int kept_class[CP_ADAPT_CLASSES];
static uint64_t kept_bound[CP_ADAPT_CLASSES];
/* Per size class: a bit for each of its latest FP_CALLS recent calls of a
 * held size, set where the footprint was above crowd_most, and FP_SEEN
 * once there was one (choose). */
static uint32_t fp_hist[CP_ADAPT_CLASSES];
/* ... and whether its latest was held as cached (HELD_YES, HELD_NO; 0:
 * none yet). */
static int held_was[CP_ADAPT_CLASSES];
static size_t kept_most;
/* The footprint above which a call counts against its size's presumption
 * (fp_hist): a size presumed kept and up to a threshold's worth of other
 * buffers.  At kept_most itself, any clear between put a buffer of that
 * size above it: on the Intel guest (kept_most 64 MiB) buffers of 60.6
 * MiB among 5 MiB ones, 64 MiB between 136 KiB pool pages, 59.4 MiB among
 * 13.1, 3.8 and 2.6 MiB ones were all kept (ordinary stores the best), and
 * ran at 0.64-0.79 of the best streamed. */
static size_t crowd_most;
static int enabled;
static uint32_t rng;
static struct ctx_state table[CP_ADAPT_CLASSES][CP_ADAPT_CONTEXTS];
static struct seen seen[SEEN];      /* relaxed atomics: read without the lock */
static uint64_t byte_clock;
/* Each thread's own band clears, beside the byte clock that counts every
 * thread's: a buffer this thread cleared last is also recent where the
 * bytes *it* cleared since fit the window.  Two threads on the Zen 2 guest
 * (an L3 of 16 MiB shared by both, says CPUID) each clearing a buffer of
 * 8.5 and 9.5 MiB over and over ran both on memset at 44-52 GB/s, in the
 * cache, and both streaming at 22: 18 MiB of clears between two of one
 * buffer, they were "other" by the byte clock, and streamed.  Where the
 * threads do share the cache and their buffers do not fit it together, a
 * buffer held as cached is checked (cached_call) and found out.
 *
 * A thread's clock is a slot of its own, found by its thread pointer (one
 * load, where a thread-local variable is a call into the C library here),
 * each slot a cache line of its own: clock counts the bytes its thread
 * chose, and the fast slot's calls it ran where it takes the slot back
 * itself.  A thread that finds its slot another's takes it with a new
 * number (id, never reused): the buffers the other cleared last are then
 * judged by every thread's clears, as before (two threads that share a
 * slot take it in turn, and neither has a clock of its own).  A thread
 * that ends leaves its slot, clock and all, to the next one given its
 * pointer: the two count as one thread. */
enum { OWN_SLOTS = 64 };
static struct own_slot {
    uintptr_t self;             /* the thread's pointer */
    uint64_t id, clock;
} __attribute__((aligned(64))) owns[OWN_SLOTS];
static uint64_t own_ids;
/* The bytes of fast-slot calls taken back by another thread than the one
 * the slot was handed to (fast_thread): that thread's own clock misses
 * them, so a buffer's own count since adds all of them since, every
 * thread's (more bytes since, never fewer). */
static uint64_t lost_bytes, fast_thread;
/* The latest STACK distinct large buffers cleared (stack_min or more), the
 * most recent first, and the bytes of all large clears (large_clock), under
 * stack_lock: is_recent's second opinion, by distinct bytes. */
static pthread_mutex_t stack_lock = PTHREAD_MUTEX_INITIALIZER;
static struct stacked stack[STACK];
static uint64_t large_clock;
static size_t stack_min;
/* A gap between two calls of a context shorter than this is never a
 * silence: CP_ADAPT_SILENCE_FACTOR times the window (silent). */
static uint64_t silence_floor;
/* The latest band call that was looked up in the address table. */
static struct {
    uintptr_t addr;
    size_t n;
    int ctx;
    uint64_t between;           /* the bytes of band clears since its previous clear
                                   (UINT64_MAX: not in the table) */
    uint64_t fp;                /* its footprint: n and the distinct bytes cleared
                                   since (on the stack), else between + n */
} last;
/* The fast slot (adapt.h) and the context whose calls it runs; 1 where
 * they were taken from the owner's check_left (a cached context's calls
 * up to its next check), which gets back what the slot did not run. */
struct cp_adapt_fast cp_adapt_fast_slot;
static struct ctx_state *fast_owner;
static int fast_checked;
/* The span a sample call opened on this thread, closed by this thread's
 * next band clear whatever its context: the clear and what the program did
 * right after it.  Per thread, since a span from one thread's clear to
 * another's is no program's time; `generation` tells a span opened before
 * the learner forgot everything. */
static __thread struct {
    int on, cls, ctx, role;
    int cpu;                    /* on the thread's CPU clock, else the caller's */
    size_t n;
    uint64_t start, generation;
} span;
static uint64_t generation;
/* Where the span clock is the thread's CPU time: whether this thread was
 * handed a timed ticket since its last record, and the CPU clock's reading
 * then, where the span it closes or may open is on that clock (0: not
 * read). */
static __thread struct {
    int handed;
    uint64_t cpu;
} span_mark;
/* What a read of the thread's CPU clock costs, measured when the learner
 * is configured with spans on it (0 without). */
static double cpu_read_ns;
/* Spans open on all threads: while none is, a call need not look at its
 * thread's (a thread-local read is a call into the C library here). */
static uint32_t spans_open;

#define LOAD(x) __atomic_load_n(&(x), __ATOMIC_RELAXED)
#define STORE(x, v) __atomic_store_n(&(x), (v), __ATOMIC_RELAXED)

/* This thread's slot of owns, taken where it was another's. */
static struct own_slot *own_slot(void)
{
    uintptr_t self;
#if defined(__x86_64__)
    __asm__("mov %%fs:0, %0" : "=r"(self));     /* the x86-64 TLS ABI's thread pointer */
#else
    self = (uintptr_t)pthread_self();
#endif
    struct own_slot *o = &owns[(uint64_t)self * 0x9E3779B97F4A7C15ull >> 58];
    if (LOAD(o->self) != self) {
        STORE(o->self, self);
        STORE(o->id, __atomic_add_fetch(&own_ids, 1, __ATOMIC_RELAXED));
        STORE(o->clock, 0);
    }
    return o;
}

/* ---- parameters -------------------------------------------------------- */

/* A fork copies the lock as it is: held by a thread the child does not
 * have (plan() reading the learner, another thread recording), it would
 * stay held there for good, and the child would hang in configure() or
 * never adapt.  So fork takes it first (every holder holds it for a few
 * loads and stores, never across a wait), and both sides let it go. */
static void fork_prepare(void)
{
    pthread_mutex_lock(&lock);
    pthread_mutex_lock(&stack_lock);
}

static void fork_parent(void)
{
    pthread_mutex_unlock(&stack_lock);
    pthread_mutex_unlock(&lock);
}

static void fork_child(void)
{
    pthread_mutex_init(&stack_lock, NULL);
    pthread_mutex_init(&lock, NULL);
}

__attribute__((constructor)) static void register_fork_handlers(void)
{
    cp_at_fork(fork_prepare, fork_parent, fork_child);
}

void cp_adapt_defaults(struct cp_adapt_params *p)
{
    memset(p, 0, sizeof *p);
    /* A comparison may take 2x a last-level cache's worth of clears (or 64
     * calls): what following a change of the program may take.  The
     * configuration sets it from the cache; this is for an unknown one. */
    p->decide_bytes = 64u << 20;
    /* Settled, a timed pair of calls every quarter of a last-level cache
     * of the context's clears: a change of what the program does after them
     * is seen within three pairs, well inside the 2x the cache that
     * following a change may take.  Compared again after 16 caches. */
    p->sample_bytes = 8u << 20;
    p->recheck_bytes = 512u << 20;
    /* 3%: a role barely ahead is not worth what it risks when the program
     * changes (a warm buffer streamed costs several times its clear). */
    p->margin_ppm = 30000;
    /* 10%: a recent buffer's ordinary-store clears after a streaming one
     * fall by 15-30% a call while it comes back into the cache, and by
     * less than 10% from one call to the next once it is (or never will). */
    p->refill_gain = 0.1;
    p->seed = 0x9E3779B9u;
}

static void forget(void)
{
    memset(table, 0, sizeof table);
    memset(kept_class, 0, sizeof kept_class);
    memset(kept_bound, 0, sizeof kept_bound);
    memset(fp_hist, 0, sizeof fp_hist);
    memset(held_was, 0, sizeof held_was);
    memset(seen, 0, sizeof seen);
    memset(&last, 0, sizeof last);
    STORE(cp_adapt_fast_slot.addr, 0);
    STORE(cp_adapt_fast_slot.left, 0);
    cp_adapt_fast_slot.set = 0;
    fast_owner = NULL;
    fast_checked = 0;
    byte_clock = 0;
    pthread_mutex_lock(&stack_lock);
    memset(stack, 0, sizeof stack);
    large_clock = 0;
    stack_min = params.reuse_bytes / STACK_DIVISOR ? params.reuse_bytes / STACK_DIVISOR : 1;
    STORE(silence_floor, (uint64_t)CP_ADAPT_SILENCE_FACTOR * params.reuse_bytes);
    pthread_mutex_unlock(&stack_lock);
    rng = params.seed ? params.seed : 1;
    STORE(generation, generation + 1);
    STORE(spans_open, 0);
}

static void flush_fast(void);
static double measure_cpu_read_ns(int span_clock);

/* Is the span of a call of n bytes on the CPU clock? */
static int cpu_span(size_t n)
{
    return LOAD(params.span_clock) == CP_ADAPT_SPAN_CPU && n >= LOAD(params.cpu_span_min);
}

/* What a timed pair of calls of n bytes costs: PAIR_NS, and two reads of
 * the CPU clock where their spans are on it. */
static double pair_ns(size_t n)
{
    return PAIR_NS + (cpu_span(n) ? 2.0 * cpu_read_ns : 0.0);
}

void cp_adapt_configure(const struct cp_adapt_params *p)
{
    pthread_mutex_lock(&lock);
    params = *p;
    if (!(params.stream_ns_per_byte > 0))
        params.check_bytes = 0;     /* nothing to check against */
    if (params.lo < 1)
        params.lo = 1;          /* log2 of 0 has no class */
    if (params.hi < params.lo)
        params.hi = params.lo;
    forget();
    enabled = 1;
    cpu_read_ns = measure_cpu_read_ns(params.span_clock);
    if (params.span_clock == CP_ADAPT_SPAN_CPU && !params.cpu_span_min)
        params.cpu_span_min = params.stream_ns_per_byte > 0
            ? (size_t)(CPU_SPAN_READS * cpu_read_ns / params.stream_ns_per_byte)
            : 1;
    size_t large = params.large_min && params.large_min < params.reuse_bytes
                   ? params.large_min : params.reuse_bytes;
    STORE(large_from, large);
    /* window_timed: a recent buffer the size of the window itself (cleared
     * again with little between: is_recent) is timed, where the window is
     * the bound.  A cache that keeps a buffer up to nearly its whole size
     * keeps much of this one after ordinary stores, and whether that pays
     * is the program's: timed, as a recent buffer above recent_max is.  On
     * a Zen 2 guest, L3 16 MiB, ordinary stores ran a warm 16 MiB buffer
     * that the program padded and summed after each clear 1.16x faster
     * than streaming did, which clears it alone 1.4x faster.  On a Zen 4
     * guest, L3 32 MiB, streaming was the faster in 27 of 32 phases with a
     * 32 MiB buffer, and the comparison's ordinary-store blocks cost 1.3-2x
     * each: not there.  (A recent buffer is never larger than the window.) */
    STORE(large_recent_from, large && params.window_timed && large == params.reuse_bytes
                             ? large + 1 : large);
    STORE(recent_most, params.reuse_bytes
                       ? (params.recent_max < large ? params.recent_max : large - 1) : 0);
    /* Held: only where the checks can undo it, and below the large sizes. */
    size_t held = params.held_max < large ? params.held_max : large - 1;
    STORE(cached_most, recent_most && params.check_bytes && held > recent_most ? held
                       : recent_most);
    STORE(kept_most, LOAD(cached_most) > recent_most
                     ? (params.kept_max < cached_most ? params.kept_max : cached_most) : 0);
    STORE(crowd_most, LOAD(kept_most) + recent_most);
    STORE(band_lo, params.lo);
    STORE(band_hi, params.hi);
    pthread_mutex_unlock(&lock);
}

void cp_adapt_enable(int on)
{
    pthread_mutex_lock(&lock);
    flush_fast();
    STORE(band_lo, on ? params.lo : 0);
    STORE(band_hi, on ? params.hi : 0);
    enabled = on != 0;
    pthread_mutex_unlock(&lock);
}

void cp_adapt_params(struct cp_adapt_params *out)
{
    pthread_mutex_lock(&lock);
    *out = params;
    pthread_mutex_unlock(&lock);
}

void cp_adapt_bounds(struct cp_adapt_bounds *out)
{
    pthread_mutex_lock(&lock);
    out->recent = LOAD(recent_most);
    out->cached = LOAD(cached_most);
    out->kept = LOAD(kept_most);
    out->crowd = LOAD(crowd_most);
    out->large = LOAD(large_from);
    out->large_recent = LOAD(large_recent_from);
    /* check_gap's test: check_bytes set, and n at least check_min. */
    out->check_from = params.check_bytes ? (params.check_min ? params.check_min : 1) : 0;
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

/* A read of the CPU clock, where spans are on it (else 0): a system call,
 * 0.1-1.4 us (a KVM guest's is the dearer), measured here. */
static double measure_cpu_read_ns(int span_clock)
{
    if (span_clock != CP_ADAPT_SPAN_CPU)
        return 0.0;
    enum { READS = 16 };
    uint64_t t0 = cp_now_ns();
    volatile uint64_t sink = 0;
    for (int i = 0; i < READS; i++)
        sink += cp_thread_cpu_ns();
    (void)sink;
    return (double)(cp_now_ns() - t0) / READS;
}

static int size_class(size_t n)
{
    return 63 - __builtin_clzll((unsigned long long)n);
}

static int ticket_of(int cls, int ctx, int role, int sample)
{
    return cls << CP_ADAPT_CLASS_SHIFT | ctx << CP_ADAPT_CONTEXT_SHIFT
           | (sample ? CP_ADAPT_SAMPLE : 0) | role;
}

/* ---- the address table: a buffer's context ----------------------------- */

static struct seen *slot_of(uintptr_t a)
{
    return &seen[(uint64_t)(a >> 6) * 0x9E3779B97F4A7C15ull >> 55];
}

/* A large buffer's clear (stack_min or more), on the stack of the latest
 * distinct ones: 1 when the distinct bytes cleared since its previous clear
 * and its own n come to no more than reuse.  The byte clock counts every
 * clear, so a buffer cleared again and again between two clears of this
 * one counts again and again, although the cache holds it once: two
 * buffers of 19 and 8 MiB cleared in random order, 27 MiB in a 32 MiB
 * cache, are both in it, while two clears of the 8 MiB one between two of
 * the 19 MiB one make 35 MiB on the clock.  The stack counts each large
 * buffer once; the smaller clears since (below stack_min, not on it) are
 * taken from the clocks, each clear counted, as before.  A buffer not on
 * the stack (STACK others since, or never) gets 0: the byte clock decides.
 * On the stack, *fp gets its footprint: those distinct bytes and n. */
static int stack_recent(uintptr_t a, size_t n, uint64_t before, size_t reuse,
                        uint64_t *fp)
{
    /* A try-lock: a call that finds the stack busy (another thread's clear
     * on it) is left off it, and the byte clock counts it like a small
     * clear, every time: more bytes since, never fewer. */
    if (pthread_mutex_trylock(&stack_lock))
        return 0;
    uint64_t large_before = large_clock;
    large_clock = large_before + n;
    size_t above = 0;
    int i = 0;
    while (i < STACK && stack[i].addr != a)
        above += stack[i++].n;
    int hit = 0;
    if (i < STACK) {
        /* (Lost updates of the byte clock by racing calls can leave it
         * behind an entry's: then nothing is known, and the clock decides.) */
        uint64_t all = before - stack[i].clock, large = large_before - stack[i].large;
        if (before >= stack[i].clock && all >= large) {
            *fp = (uint64_t)above + (all - large) + n;
            hit = all - large <= reuse && *fp <= reuse;
        }
    }
    for (int j = i < STACK ? i : STACK - 1; j > 0; j--)
        stack[j] = stack[j - 1];
    stack[0] = (struct stacked){a, n, before + n, large_before + n};
    pthread_mutex_unlock(&stack_lock);
    return hit;
}

/* 1 when addr was cleared within the last reuse_bytes of band clears
 * (this clear's own n included); remembers addr either way, in its slot of
 * the table (a clear of another address hashed there forgets it: a
 * mistaken "other" now and then, never a mistaken "recent").  Without the
 * lock: racing calls may lose an update, which costs one such mistake.  A
 * large buffer also counts as recent where the distinct bytes cleared since
 * its previous clear fit (stack_recent), and a buffer this thread cleared
 * last where the bytes this thread cleared since fit (own). */
static int is_recent(const void *addr, size_t n)
{
    uintptr_t a = (uintptr_t)addr;
    uint64_t before = LOAD(byte_clock), now = before + n;
    STORE(byte_clock, now);
    size_t reuse = LOAD(params.reuse_bytes);
    if (!reuse || !a)
        return 0;
    struct own_slot *o = own_slot();
    uint64_t me = LOAD(o->id), mine = LOAD(o->clock), lost = LOAD(lost_bytes);
    STORE(o->clock, mine + n);
    struct seen *e = slot_of(a);
    int known = LOAD(e->addr) == a;
    uint64_t between = known ? before - LOAD(e->clock) : UINT64_MAX;
    int hit = known && between + n <= reuse;
    uint64_t fp = known ? between + n : UINT64_MAX;
    if (n >= LOAD(stack_min) && stack_recent(a, n, before, reuse, &fp))
        hit = 1;
    if (known && LOAD(e->thread) == me && mine + lost >= LOAD(e->own)) {
        /* Cleared last by this thread: the bytes it cleared since (and
         * any fast-slot calls whose thread went uncounted). */
        uint64_t since = mine + lost - LOAD(e->own);
        if (since < between) {
            between = since;
            if (since + n < fp)
                fp = since + n;
            hit |= since + n <= reuse;
        }
    }
    /* window_timed: a buffer of exactly the window cleared again with
     * little between (an eighth of it at most, NEAR_DIVISOR) is recent
     * too, and timed: the cache keeps most of it after ordinary stores, as
     * where nothing is between.  On the Zen 2 guest (L3 16 MiB) a hot 16
     * MiB buffer between 6.6 KiB pool pages, summed after each clear,
     * streamed untimed for those 6.6 KiB over the window, while ordinary
     * stores ran its phase 1.32x faster. */
    if (!hit && known && n == reuse && LOAD(large_recent_from) > reuse
        && between <= n / NEAR_DIVISOR)
        hit = 1;
    STORE(e->addr, a);
    STORE(e->clock, now);
    STORE(e->thread, me);
    STORE(e->own, mine + n + lost);
    STORE(last.addr, a);
    STORE(last.n, n);
    STORE(last.ctx, hit);
    STORE(last.between, between);
    STORE(last.fp, fp);
    return hit;
}

/* ---- untimed calls: the fast slot and the quiet run --------------------- */

/* Notes k calls of class cls in fp_hist, each above crowd_most or not
 * (big); the class's first note stands for all FP_CALLS. */
static void fp_note(int cls, uint32_t k, int big)
{
    uint32_t hist = LOAD(fp_hist[cls]), bits = big ? FP_MASK : 0;
    if (k > FP_CALLS)
        k = FP_CALLS;
    hist = hist & FP_SEEN ? (hist << k | (bits >> (FP_CALLS - k))) & FP_MASK : bits;
    STORE(fp_hist[cls], hist | FP_SEEN);
}

/* Takes the fast slot back: its untimed calls so far enter the books as
 * is_recent and the context would have counted them one by one (they were
 * clears of one buffer back to back, right after the call that handed them
 * out, so each was "recent" and advanced the clock by n).  Without the lock:
 * the owner's count is added to when it next takes it (drain_quiet). */
static void flush_fast(void)
{
    struct cp_adapt_fast *f = &cp_adapt_fast_slot;
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
    if (owner && left && LOAD(fast_checked))
        __atomic_fetch_add(&owner->check_left, left, __ATOMIC_RELAXED);
    if (!ran || !a)
        return;
    size_t n = LOAD(f->n);
    uint64_t now = LOAD(byte_clock) + (uint64_t)ran * n;
    STORE(byte_clock, now);
    int cls = size_class(n);
    struct ctx_state *c = &table[cls][CP_ADAPT_OTHER];
    uint64_t seen = LOAD(c->class_seen);
    if (seen)                       /* its class's calls, not a silence (silent) */
        STORE(c->class_seen, seen + (uint64_t)ran * n);
    if (n > LOAD(recent_most) && n <= LOAD(cached_most) && LOAD(fp_hist[cls]) & FP_SEEN)
        fp_note(cls, ran, n > LOAD(crowd_most));  /* back to back: its own size */
    struct seen *e = slot_of(a);
    if (LOAD(e->addr) == a)
        STORE(e->clock, now);
    struct own_slot *o = own_slot();
    uint64_t me = LOAD(o->id);
    if (LOAD(fast_thread) == me) {
        uint64_t mine = LOAD(o->clock) + (uint64_t)ran * n;
        STORE(o->clock, mine);
        if (LOAD(e->addr) == a && LOAD(e->thread) == me)
            STORE(e->own, mine + LOAD(lost_bytes));
    } else {
        __atomic_fetch_add(&lost_bytes, (uint64_t)ran * n, __ATOMIC_RELAXED);
    }
    if (n >= LOAD(stack_min)) {
        /* The same buffer again: on the large clock too, and still on top
         * (busy: counted as small clears, and its entry older, as above). */
        if (!pthread_mutex_trylock(&stack_lock)) {
            large_clock += (uint64_t)ran * n;
            if (stack[0].addr == a)
                stack[0] = (struct stacked){a, n, now, large_clock};
            pthread_mutex_unlock(&stack_lock);
        }
    }
    if (owner)
        __atomic_fetch_add(&owner->quiet_ran, ran, __ATOMIC_RELAXED);
}

/* Hands the next `calls` clears of the buffer just looked up to the fast
 * word (checked: taken from s->check_left).  Under the lock. */
static void hand_fast(struct ctx_state *s, size_t n, int ticket, uint32_t calls,
                      int checked)
{
    struct cp_adapt_fast *f = &cp_adapt_fast_slot;
    uintptr_t a = LOAD(last.addr);
    flush_fast();
    fast_owner = s;
    STORE(fast_thread, LOAD(own_slot()->id));
    STORE(fast_checked, checked);
    STORE(f->n, n);
    STORE(f->ticket, ticket | CP_ADAPT_UNTIMED);
    STORE(f->set, calls);
    STORE(f->left, calls);
    STORE(f->addr, a);
}

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
    s->resting = 0;
    s->calls += ran;
    s->since += ran;
}

/* A context whose role needs no clock (cached_call). */
static int untimed_context(const struct ctx_state *s)
{
    return s->learned == CP_LEARNED_CACHED || s->learned == CP_LEARNED_LARGE;
}

static int settled(const struct ctx_state *s)
{
    return !s->comparing && s->learned != CP_LEARNED_FIRST && !untimed_context(s);
}

/* After a settled context's sample: its next calls run untimed, up to the
 * period (longer where clears are short) or the recheck, whichever comes
 * first.  Where they are the buffer just cleared, again, they go to the
 * fast slot; else the context counts them down itself, after the lookup. */
static void quiet_run(struct ctx_state *s, size_t n, int cls, int ctx)
{
    if (!settled(s) || !params.sample_bytes)
        return;
    drain_quiet(s);
    struct role_state *a = &s->roles[s->role];
    double call = a->nclear ? a->clear[a->nclear - 1] * (double)n : 0;
    double want = call > 0 ? pair_ns(n) / (SAMPLE_SHARE * call) : 0;
    s->stretch = want <= s->period ? s->period : want >= STRETCH_MAX ? STRETCH_MAX
                 : (uint32_t)want;
    uint32_t quiet = s->stretch - 2 < s->stretch ? s->stretch - 2 : 0;
    uint64_t due = s->recheck > s->since + 2 ? s->recheck - s->since - 2 : 0;
    if (due < quiet)
        quiet = (uint32_t)due;
    if (!quiet)
        return;
    size_t reuse = params.reuse_bytes;
    s->resting = 1;
    if (LOAD(last.addr) && LOAD(last.n) == n && LOAD(last.ctx) == ctx
        && ctx == (reuse && n <= reuse)) {
        hand_fast(s, n, ticket_of(cls, ctx, s->role, 0), quiet, 0);
        return;
    }
    s->quiet_set = quiet;
    STORE(s->quiet_left, quiet);
}

/* ---- choosing ----------------------------------------------------------- */

static int choose_locked(size_t n, int cls, int ctx, struct ctx_state *s, int closing,
                         int silent);
static int cached_call(size_t n, int cls, int ctx, struct ctx_state *s, int again,
                       int near, int closing, int role, int learned);
static uint32_t check_gap(size_t n);

/* Has this thread a span open, which its next band clear closes (so that
 * clear is timed, whatever it would have been)? */
static int span_open(void)
{
    return LOAD(spans_open) && span.on && span.generation == LOAD(generation);
}

int cp_adapt_recent(const void *addr, size_t n)
{
    if (!LOAD(band_hi))
        return -1;
    if (!addr) {
        size_t reuse = LOAD(params.reuse_bytes);
        return reuse && n <= reuse;
    }
    flush_fast();
    return is_recent(addr, n);
}

static int choose(size_t n, const void *addr);

int cp_adapt_choose(size_t n, const void *addr)
{
    if (n < LOAD(band_lo) || n >= LOAD(band_hi))
        return -1;
    int fast = cp_adapt_fast_take(&cp_adapt_fast_slot, n, addr);
    if (fast >= 0)
        return fast;
    int ticket = choose(n, addr);
    /* A timed call's span starts now, on the thread's CPU clock where the
     * span is long enough to pay for its read: a sleep, a wait or another
     * process's time slice between clears is none of what the role costs
     * the program, and only adds noise.  The span this call closes may be
     * on it too. */
    if (ticket >= 0 && !(ticket & CP_ADAPT_UNTIMED)
        && LOAD(params.span_clock) == CP_ADAPT_SPAN_CPU) {
        int open = span_open();
        /* (Not for a check alone: it times the clear, on the monotonic
         * clock, and opens no span.) */
        span_mark.handed = !(ticket & CP_ADAPT_CHECK && !open);
        span_mark.cpu = span_mark.handed && ((open && span.cpu)
                                              || (ticket & CP_ADAPT_SAMPLE && cpu_span(n)))
                        ? cp_thread_cpu_ns() : 0;
    }
    return ticket;
}

/* Whether a recent buffer of n bytes above recent_max is held as cached:
 * its size found kept (kept_bound), or presumed kept (up to kept_most)
 * while the footprints of its class's latest recent calls are mostly
 * within crowd_most (fp_small: a call's footprint is its size and the
 * distinct bytes cleared since its previous clear), and no comparison
 * found it not kept among such footprints.  A buffer presumed kept by its
 * size alone, among others that add up to more, was not: on the Intel
 * guest, buffers of 64 and 55 MiB cleared in random order with one of 22
 * MiB each cost 2.4x a streaming clear on ordinary stores (the 22 MiB one,
 * up to recent_max, is kept where the others stream).  The class's latest
 * calls, not this call's footprint alone, decide: a role that changed with each call's footprint
 * changed between clears of one buffer back to back, and each change
 * costs 2-4x a clear (ordinary stores read the buffer back in; streaming
 * stores write its dirty lines back first). */
static int fp_small(int cls)
{
    return __builtin_popcount(LOAD(fp_hist[cls]) & FP_MASK) <= FP_VOTE;
}

static int held_kept(size_t n, int cls)
{
    int kept = LOAD(kept_class[cls]);
    uint64_t bound = LOAD(kept_bound[cls]);
    size_t most = LOAD(kept_most);
    if (kept > 0)
        return n <= bound;
    return n <= most && fp_small(cls) && (kept == 0 || bound);
}

/* A held buffer's next check waits `calls` of its calls for its refill
 * (cached_call ends the wait early where much is cleared between).  After
 * it left the cache, REFILL_WAIT: a large buffer may come back only after
 * many flat calls.  On the Intel guest a 64 MiB buffer written to after
 * each clear cost 1.5-1.7 times a streaming clear per ordinary-store clear
 * (6.4-7.3 ms against 4.4) for its first 10-30 calls in six rounds of one
 * program, under 1% less a call, then came down to 0.6 times (2.5-3.0
 * ms) within 15-25 calls; in one round it was still flat at its 22nd
 * call, where a comparison took over.  A wait of 16
 * ended on those flat calls: its checks found the buffer slow and handed
 * it to a comparison, whose streaming blocks pushed it out again; the
 * phase of 136 calls ran at 0.66-0.92 of memset's time, settled on
 * streaming or comparing again and again.  In simulated programs
 * (bench/sim_held_wait.py), phases of 136-400 calls whose refill is flat
 * for 20-70 calls ran at 0.63-0.91 of memset's time with a wait of 16
 * (and so did one flat past a wait of 32), at 0.99 or better with 48.
 * What the wait costs where the
 * machine does not keep a size presumed kept (kept_max: the sizes its
 * cache was measured to keep) is 48 ordinary-store clears, never more
 * than memset's, once per size class: the comparison after them marks
 * the class not kept. */
static void await_refill(struct ctx_state *s, uint32_t calls)
{
    STORE(s->check_left, calls);
    STORE(s->refilling, 1);
    STORE(s->far, 0);
    STORE(s->watched, 0);
}

/* A held size presumed kept whose size no comparison has found kept (its
 * class not judged, or found not kept at a larger footprint): its checks
 * are a cached buffer's (CHECK_MARGIN), the first HELD_KEEP one call apart
 * (cached_call, check_clear). */
static int presumed_unjudged(size_t n, int cls)
{
    return n > LOAD(recent_most) && LOAD(kept_class[cls]) <= 0;
}

/* Whether this call comes after a silence of its size class: more bytes
 * of other clears since the class's previous call (either context's) than
 * CP_ADAPT_SILENCE_FACTOR times the window, and than that many times the
 * most between its latest calls.  The program did something else
 * meanwhile (a phase of other sizes), and what the class compared before
 * was another program's: a comparison under way starts afresh, and so
 * does one that ended undecided (choose_locked; a verdict holds, and a
 * cached or large context's calls only keep the clock).  On the Zen 2
 * guest a walk of 2.1 MiB pages written after each clear (undecided:
 * settled on ordinary stores) and, 1.7 GiB of other clears later, a walk
 * of 2.5 MiB pages each followed by reads of other memory (streaming cost
 * 0.66 of ordinary stores) waited for the recheck: 0.81 of streaming over
 * the second walk.  Per class, not per context: a buffer whose calls turn
 * from recent to not and back is no silence of either.  A class whose
 * calls come back after long gaps as a rule is judged by its own latest
 * gaps.  Without the lock (relaxed atomics): racing calls may lose an
 * update, which moves a gap by one call's bytes. */
static int silent(int cls, size_t n)
{
    struct ctx_state *c = &table[cls][CP_ADAPT_OTHER];
    uint64_t now = LOAD(byte_clock), was = LOAD(c->class_seen);
    STORE(c->class_seen, now);
    if (!was || now < was + n)
        return 0;
    uint64_t between = now - was - n, most = LOAD(c->class_gap);
    if (between <= most)
        return 0;
    /* The most, a silence too: a size whose calls come back after long
     * gaps as a rule compares afresh after the first alone.  (It fades by
     * an eighth at each call of the class under the lock: choose_locked.) */
    STORE(c->class_gap, between);
    return between > LOAD(silence_floor) && between > CP_ADAPT_SILENCE_FACTOR * most;
}

/* After a silence only a context comparing, or one that ended undecided,
 * compares afresh: a verdict holds, its samples still watching for a
 * change in what its role costs. */
static int afresh_after_silence(const struct ctx_state *s)
{
    int learned = LOAD(s->learned);
    return learned == CP_LEARNED_COMPARING || learned == CP_LEARNED_EVEN;
}

static int choose(size_t n, const void *addr)
{
    flush_fast();
    int again = LOAD(last.addr) == (uintptr_t)addr && LOAD(last.n) == n;
    int cls = size_class(n);
    int ctx = is_recent(addr, n);
    /* Cleared again with little cleared between (NEAR_DIVISOR): a wait for
     * its refill holds (cached_call). */
    int near = again || LOAD(last.between) <= n / NEAR_DIVISOR;
    struct ctx_state *s = &table[cls][ctx];
    int hush = silent(cls, n);      /* (every call's: its untimed ones too) */
    int closing = span_open();
    int evicted = LOAD(s->evicted);
    int held = 0;
    if (ctx && n > LOAD(recent_most) && n <= LOAD(cached_most)) {
        fp_note(cls, 1, LOAD(last.fp) > LOAD(crowd_most));
        held = !evicted && held_kept(n, cls);
        int was = LOAD(held_was[cls]);
        STORE(held_was[cls], held ? HELD_YES : HELD_NO);
        if (held && was == HELD_NO && LOAD(kept_class[cls]) <= 0) {
            /* Presumed kept again, after calls not held (streaming,
             * or compared): its checks start afresh, after the wait for
             * the refill of a buffer streaming pushed out. */
            STORE(s->held_hist, 0);
            STORE(s->checks, 0);
            await_refill(s, REFILL_WAIT);
        }
    }
    if (ctx && n <= LOAD(cached_most)
        && (n <= LOAD(recent_most) ? evicted != EVICTED_SMALL : held))
        return cached_call(n, cls, ctx, s, again, near, closing, CP_ADAPT_TEMPORAL,
                           CP_LEARNED_CACHED);
    if (!ctx && n > LOAD(recent_most) && n <= LOAD(cached_most) && held_kept(n, cls)) {
        /* A buffer of a held size not cleared lately is out of the cache,
         * and its next clears, recent, bring it back only bit by bit: on
         * the Zen 5 guest the ordinary-store clears after such a clear
         * (the L3 full of other dirty data) cost more than 1.05 times the
         * streaming reference for 2 calls at 24 MiB, 4 at 26 MiB, 7 at 28
         * MiB and 10-11 at 30 MiB, then settle at 0.8.  Its recent
         * context's next check waits REFILL_WAIT calls where it is cleared
         * again back to back (cached_call), so that the refill is not taken
         * for a buffer the cache does not keep (which the checks after it
         * still find). */
        struct ctx_state *r = &table[cls][1];
        if (LOAD(r->check_left) < REFILL_WAIT)
            await_refill(r, REFILL_WAIT);
    }
    size_t large = ctx ? LOAD(large_recent_from) : LOAD(large_from);
    if (large && n >= large)
        return cached_call(n, cls, ctx, s, again, near, closing, CP_ADAPT_STREAMING,
                           CP_LEARNED_LARGE);
    hush = hush && afresh_after_silence(s);
    uint32_t quiet = LOAD(s->quiet_left);
    if (quiet && !hush) {
        /* Settled: the role, untimed, no lock (timed only to close a span). */
        STORE(s->quiet_left, quiet - 1);
        int ticket = ticket_of(cls, ctx, LOAD(s->role), 0);
        return closing ? ticket | CP_ADAPT_CLOSE : ticket | CP_ADAPT_UNTIMED;
    }
    return choose_locked(n, cls, ctx, s, closing, hush);
}

/* What the size and the buffer's history tell without a clock, untimed: a
 * recent buffer up to recent_max is in the cache, so ordinary stores, which
 * keep it there for the program (CP_LEARNED_CACHED); a buffer as large as
 * the reuse window (the last-level cache) or larger, or than large_min, is
 * never all in it, however recently cleared (the cache holds the program's
 * other data too), and ordinary stores would keep no more than its tail
 * there, so streaming (CP_LEARNED_LARGE; but see window_timed,
 * large_recent_from).  Counted without the lock; the
 * lock only to note the context once and, for a buffer cleared again back
 * to back, to hand its next clears to the fast slot. */
static __attribute__((noinline)) int cached_call(size_t n, int cls, int ctx,
                                                 struct ctx_state *s, int again,
                                                 int near, int closing, int role,
                                                 int learned)
{
    int ticket = ticket_of(cls, ctx, role, 0);
    /* A load and a store, not a locked add: the calls hold the GIL, and a
     * count lost to a race is one call not counted. */
    STORE(s->quiet_ran, LOAD(s->quiet_ran) + 1);
    /* A recent buffer's clear is checked now and then (see check_clear):
     * check_left counts the calls down to the next check, this one
     * included, and a buffer cleared again back to back hands them to the
     * fast slot. */
    uint32_t gap = learned == CP_LEARNED_CACHED ? check_gap(n) : 0;
    if (gap && presumed_unjudged(n, cls) && LOAD(s->checks) < HELD_KEEP)
        /* A size presumed kept, not compared yet: its first HELD_KEEP
         * checks come one call apart (after the wait for its refill), so
         * that a buffer the machine does not keep costs 3 calls, not 9-12
         * (a 64 MiB buffer between clears of 64 MiB pool pages, 2.4x a
         * streaming clear on the Intel guest, in a phase of 50 calls). */
        gap = 1;
    int check = 0, watch = 0;
    if (gap) {
        uint32_t left = LOAD(s->check_left);
        /* The wait for a refill holds only while the buffer is cleared
         * again with little cleared between (near): where other clears of
         * an eighth of it or more came before FAR_CALLS of its calls in a
         * row, what the cache kept of it is what the checks are for.  One
         * such call alone is no sign: the byte clock counts every clear,
         * and another thread's loop over a small buffer (140 clears of 0.1
         * MiB, at most 0.1 MiB of the cache) can land all its clears
         * between two of a 64 MiB buffer's; on the Intel guest the wait
         * then ended at that buffer's third call, and its checks took the
         * refill (2.3x a streaming clear, flat for its first 6 calls) for
         * a buffer out of the cache and handed it to a comparison. */
        if (LOAD(s->refilling)) {
            uint32_t far = near ? 0 : LOAD(s->far) + 1;
            STORE(s->far, far);
            if (far >= FAR_CALLS || !left) {
                STORE(s->refilling, 0);
                left = 0;
            }
        }
        check = !left;
        STORE(s->check_left, (check ? gap : left) - 1);
        /* A held size's calls in the wait are timed (watch_refill): its
         * clears take a millisecond or more, two clock reads nothing. */
        watch = !check && n > LOAD(recent_most) && LOAD(s->refilling);
    }
    if ((again || !LOAD(s->init)) && pthread_mutex_trylock(&lock) == 0) {
        if (!s->init) {
            s->init = 1;
            s->role = s->safe = s->start = role;
            s->learned = learned;
        }
        uint32_t run = watch ? 0 : gap ? LOAD(s->check_left) : FAST_RUN;
        run = run < FAST_RUN ? run : FAST_RUN;
        if (again && enabled && !closing && run) {
            hand_fast(s, n, ticket | CP_ADAPT_UNTIMED, run, gap != 0);
            if (gap)
                STORE(s->check_left, LOAD(s->check_left) - run);
        }
        pthread_mutex_unlock(&lock);
    }
    if (check || watch)
        return ticket | CP_ADAPT_CHECK;
    /* Timed only to close this thread's span. */
    return closing ? ticket | CP_ADAPT_CLOSE : ticket | CP_ADAPT_UNTIMED;
}

/* A pair of blocks of the comparison, its first block's role given: each
 * block as long as its role's (the temporal one may grow, choose_locked). */
static void open_pair(struct ctx_state *s, int first)
{
    s->first = first;
    s->len[0] = s->block[0];
    s->len[1] = s->block[1];
}

/* The calls between two checks of a cached context's clears of n bytes:
 * one per check_bytes of them, CHECK_CALLS .. CHECK_CALLS_MAX apart (0: no
 * checks, for a buffer below check_min, or with no stream_ns_per_byte to
 * check against).  A check is two monotonic clock reads and the lock,
 * ~0.1 us, against the 10 us or more an L2's worth of clear takes. */
static uint32_t check_gap(size_t n)
{
    size_t every = LOAD(params.check_bytes);
    if (!every || n < LOAD(params.check_min))
        return 0;
    size_t gap = every / n;
    return gap < CHECK_CALLS ? CHECK_CALLS : gap > CHECK_CALLS_MAX ? CHECK_CALLS_MAX
           : (uint32_t)gap;
}

static uint32_t draw(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 17;
    rng ^= rng << 5;
    return rng;
}

static void start_comparison(struct ctx_state *s, int trigger)
{
    /* A recheck after a draw goes on from the draw's pairs: nothing said
     * the program changed, and the evidence adds up (the bound for
     * streaming counts every pair, so it stays as strict). */
    int resume = trigger == CP_ADAPT_BY_RECHECK && s->learned == CP_LEARNED_EVEN;
    s->comparing = 1;
    s->trigger = trigger;
    s->learned = CP_LEARNED_COMPARING;
    s->pos = 0;
    s->have = 0;
    s->least = s->most = 0;
    s->cmp_lo = s->cmp_hi = 0;
    s->outside = 0;
    s->fp_big = s->fp_all = 0;
    if (!resume) {
        s->pairs = s->used = s->dropped = s->wins = 0;
        s->sum = s->sumsq = 0;
    }
    /* A walk on ordinary stores (blocks of one call): the first streaming
     * clear after them pays for the switch, the store and prefetch streams
     * the ordinary stores left running.  Timed in a walk of 16 KiB buffers
     * on a Zen 5 guest: 1.1-1.9 us against 0.5 for the next ones, and on
     * that first pair alone the comparison ended on ordinary stores in
     * about half of fresh runs, although streaming costs the walk 0.6-0.8
     * of them.  A program that switches pays it once; the pair is run and
     * not counted (a recheck's too: it follows a run of one role).  A
     * block of two leaves the switch out of its sample already, and a
     * clear of a buffer large enough to stream safely (milliseconds), or
     * to start on streaming (above recent_max), does not notice it. */
    s->warmup = s->safe == CP_ADAPT_TEMPORAL && s->block[CP_ADAPT_STREAMING] == 1
                && s->start == CP_ADAPT_TEMPORAL;
    if (trigger == CP_ADAPT_BY_START && s->busy && !s->warmup) {
        /* A held buffer's probes ran its start role in a row, the latest
         * one's span sampled (busy_program): they are the first pair's
         * block of that role, its other block still to run. */
        open_pair(s, s->start);
        s->pos = s->len[s->start];
        s->have = 1u << s->start;
    }
    s->limit = s->pairs + s->pairs_max;
    /* ... and its calls, as many as its pairs as planned would run: where
     * the temporal blocks grow (a refill of 10-16 calls, each pair's), the
     * pairs run out later, and a comparison of twelve such pairs cost the
     * whole phase of a program (the Intel guest's 53 MiB buffer). */
    s->until = s->calls + (uint64_t)s->pairs_max * (s->block[0] + s->block[1]);
    s->comparisons++;
}

/* The role a context falls back on wherever the evidence is not decisive:
 * ordinary stores, as memset, for anything that may be in the cache;
 * streaming for a buffer not cleared lately and larger than a quarter of
 * the reuse window (the last-level cache), too large for ordinary stores
 * to pay for reading it in, where memset itself streams or is outrun
 * 2-3x.  (Read without the lock by a call that finds the learner busy.) */
static int safe_role(size_t n, int ctx)
{
    size_t most = LOAD(params.reuse_bytes) / CP_ADAPT_OTHER_DIVISOR;
    return !ctx && most && n > most ? CP_ADAPT_STREAMING : CP_ADAPT_TEMPORAL;
}

/* The role a context runs before anything is known: the safe one, but
 * streaming for a recent buffer larger than recent_max (the CPU's static
 * streaming threshold, at most half the cache), which does not stay in the
 * cache even cleared back to back (up to held_max, until a comparison
 * found the machine keeps one of its size: kept_class; and the role a
 * held buffer's comparison starts on once its checks found it out).  The
 * machine profiles clear one twice that size back to back 1.1-3x faster
 * streamed (Zen 3, Zen 4, Emerald Rapids guests); on the Zen 4 guest (L3
 * 32 MiB) streaming ran 65 of 75 phases of generated programs (three
 * seeds) with a recent 16-32 MiB buffer faster than ordinary stores did,
 * 1.3-1.6x at each seed's geometric mean.  It lost the rest by up to 0.7x, to programs that write
 * into the buffer next, so ordinary stores stay the safe role: they need
 * less evidence, and hold where there is none.  On a Zen 5 guest (L3 32
 * MiB) ordinary stores won 28 of 34 such phases of a generated corpus:
 * the comparison's clears tell the two machines apart (kept_class).
 * Streaming first costs a machine that keeps the buffer ~1.25x a call
 * until it is found kept; ordinary stores first would cost one that does
 * not keep it 1.5-3x a call until its checks found it out.  So too for
 * a buffer above recent_max not cleared lately (ordinary stores its safe
 * role below a quarter of the window): nothing says it is in the cache,
 * and where the L3 reported is far larger than what the machine keeps,
 * its first clear on ordinary stores cost 2.4-2.6x a streaming one (the
 * Intel guest, L3 480 MiB reported: 46-117 MiB buffers, the first call
 * of each size class, and a walk's every ordinary-store call). */
static int start_role(size_t n, int ctx)
{
    size_t most = LOAD(recent_most);
    return most && n > most ? CP_ADAPT_STREAMING : safe_role(n, ctx);
}

int cp_adapt_roles(size_t n, int context)
{
    /* (Both read the parameters without the lock, as a busy call does.) */
    int ctx = context != CP_ADAPT_OTHER;
    return safe_role(n, ctx) | start_role(n, ctx) << 1;
}

/* A recent buffer of a held size: above recent_max, up to held_max (under
 * the lock). */
static int held_size(size_t n, int ctx)
{
    return ctx && n > params.recent_max && n <= cached_most;
}

/* ... for the context s itself. */
static int held_here(const struct ctx_state *s, size_t n)
{
    return held_size(n, (int)(s - table[size_class(n)]));
}

static void init_context(struct ctx_state *s, size_t n, int ctx)
{
    s->init = 1;
    s->safe = safe_role(n, ctx);
    s->start = start_role(n, ctx);
    s->role = s->start;
    s->learned = CP_LEARNED_FIRST;
    s->nprobe = 0;
    s->busy = s->left_alone = 0;
    s->held_ref = 0;
    /* A recent buffer is the one the last role left in or out of the cache,
     * so each role runs two calls in a row and the second is its sample:
     * an ordinary-store clear right after a streaming one reads the buffer
     * in from memory, and a streaming clear right after an ordinary one
     * writes the dirty lines it finds back first (1.5-2x its own cost at
     * 16 MiB on the Zen 4 guest); neither happens while one role runs. */
    s->block[CP_ADAPT_TEMPORAL] = s->block[CP_ADAPT_STREAMING] = ctx ? 2 : 1;
    /* ... but ordinary stores may find a buffer that streaming pushed out
     * of the cache back in it only bit by bit: on the Zen 4 guest (L2 1
     * MiB) its ordinary-store clears after a streaming one cost 2.8, 2.1,
     * 1.5, 1.2, 1.05 times what they settle at, at 8 MiB; a call sooner at
     * 6 MiB, three later at 13 MiB; at 20 MiB, which does not stay in the
     * cache, 1.5 times streaming's from the first call on.  A block of
     * two would take the second call's cost for the role's, and make the
     * temporal role 1.5x dearer than it is where the program keeps the
     * buffer in the cache.  So with refill_gain the temporal block runs
     * three calls, and one more while the latest clear cost refill_gain
     * less than the one before (choose_locked), up to REFILL_BLOCK (a held
     * buffer's: REFILL_HELD, see choose_locked); a
     * buffer that does not come back costs one call more than before.
     * The streaming role's second call is already its own cost. */
    s->refill = ctx && params.refill_gain > 0;
    if (s->refill)
        s->block[CP_ADAPT_TEMPORAL] = 3;
    size_t most = params.decide_bytes / n;
    if (most < CALLS_MIN)
        most = CALLS_MIN;
    most /= s->block[0] + s->block[1];
    s->pairs_max = most > PAIRS_CAP ? PAIRS_CAP : most < STREAM_PAIRS ? STREAM_PAIRS
                   : (uint32_t)most;
    size_t period = params.sample_bytes / n;
    s->period = period < PERIOD_MIN ? PERIOD_MIN : period > PERIOD_MAX ? PERIOD_MAX
                : (uint32_t)period;
}

/* The rest of choose: a timed call, under the lock.  Apart, so that the
 * untimed path above stays a leaf with nothing to save. */
static __attribute__((noinline)) int choose_locked(size_t n, int cls, int ctx,
                                                   struct ctx_state *s, int closing,
                                                   int silent)
{
    if (pthread_mutex_trylock(&lock) != 0) {
        /* Another thread is choosing: the role this context runs (its start
         * role before anything is known), untimed; not the static choice,
         * which knows nothing of the buffer's history. */
        int role = LOAD(s->init) ? LOAD(s->role) : start_role(n, ctx);
        return ticket_of(cls, ctx, role, 0) | CP_ADAPT_UNTIMED;
    }
    if (!enabled || n < params.lo || n >= params.hi) {  /* changed meanwhile */
        pthread_mutex_unlock(&lock);
        return -1;
    }
    if (!s->init)
        init_context(s, n, ctx);
    if (untimed_context(s)) {
        /* A class that straddles recent_max or the reuse window: its sizes
         * on the timed side are timed, from their own first calls. */
        init_context(s, n, ctx);
        STORE(s->quiet_ran, 0);
    }
    drain_quiet(s);
    s->calls++;
    s->since++;
    struct ctx_state *c = &table[cls][CP_ADAPT_OTHER];
    uint64_t gap = LOAD(c->class_gap);
    STORE(c->class_gap, gap - (gap >> GAP_FADE_SHIFT));
    int ticket;
    int likely = ctx || s->start == CP_ADAPT_STREAMING;
    if (s->learned == CP_LEARNED_FIRST && !s->busy
        && s->calls <= (likely ? FIRST_LIKELY : 1)) {
        /* The context's first calls: the start role.  Where it is likely
         * right (a recent buffer, probably in the cache, or above
         * recent_max too large to stay there; a large one not cleared
         * lately, which is not in it), comparing costs more than it is
         * likely to find, and is left to a buffer cleared again and again;
         * comparing on a recent buffer costs more than either role besides
         * (each role's first call finds it as the other left it).  A held
         * buffer's few probes are timed (busy_program): here it is one not
         * held as cached, on streaming, its start role. */
        int probe = held_size(n, ctx)
                    && s->calls >= PROBE_FROM && s->calls < PROBE_FROM + PROBES;
        ticket = ticket_of(cls, ctx, s->start, probe);
        if (!probe)
            ticket |= CP_ADAPT_UNTIMED;
    } else {
        if (s->learned == CP_LEARNED_FIRST)
            start_comparison(s, CP_ADAPT_BY_START);
        else if (silent && afresh_after_silence(s))     /* (again, under the lock) */
            start_comparison(s, CP_ADAPT_BY_SILENCE);
        else if (!s->comparing && s->since >= s->recheck)
            start_comparison(s, CP_ADAPT_BY_RECHECK);
        if (s->comparing && s->cmp_hi && (n < s->cmp_lo || n > s->cmp_hi)) {
            /* A size class spans a factor of two, and a program that
             * moved to other sizes of it (79 MiB, then 101 and 125 MiB on
             * the Intel guest) is another program: its pairs are not the
             * old ones'.  Two calls in a row off the sizes compared start
             * the comparison afresh (one alone is a buffer among others),
             * once: a program that keeps moving between sizes of the class
             * is compared on all of them. */
            if (s->outside++ && s->trigger != CP_ADAPT_BY_SIZE)
                start_comparison(s, CP_ADAPT_BY_SIZE);
        } else {
            s->outside = 0;
        }
        if (s->comparing && !s->cmp_hi) {
            s->cmp_lo = n - n / 5;
            s->cmp_hi = n + n / 4;
        }
        if (s->comparing) {
            /* Pairs of blocks, each pair's order drawn: drift and the
             * program's own rhythm land on both roles alike. */
            if (s->pos == 0)
                open_pair(s, (int)(draw() & 1));
            int t = CP_ADAPT_TEMPORAL;
            uint32_t t_last = (s->first == t ? 0 : s->len[!t]) + s->len[t] - 1;
            int held = held_size(n, ctx);
            uint32_t longest = held ? REFILL_HELD : REFILL_BLOCK;
            if (s->refill && s->pos == t_last && s->len[t] < longest) {
                /* The temporal block's last call as planned: one more
                 * while the buffer is still coming back into the cache:
                 * its latest clear cost refill_gain less than the one
                 * before, or, held, still more than a streaming clear but
                 * less than the block's first (at 28-30 MiB the refill
                 * runs 7-11 calls, some hardly faster than the one before;
                 * a buffer that does not come back, as dear from the
                 * block's first call on, grows it only by its noise; before
                 * its size was found kept or presumed kept, not past a
                 * clear REFILL_FAR off). */
                const struct role_state *a = &s->roles[t];
                unsigned k = a->nclear, done = s->len[t] - 1;
                double now = k ? a->clear[k - 1] : 0.0;
                double stream = params.stream_ns_per_byte;
                if ((k >= 2 && now < (1.0 - params.refill_gain) * a->clear[k - 2])
                    || (held && k && now > HELD_MARGIN * stream
                        && now < a->clear[done < k ? k - done : 0]
                        && (held_kept(n, cls) || now <= REFILL_FAR * stream)))
                    s->len[t]++;
            }
            uint32_t head = s->len[s->first], both = head + s->len[!s->first];
            int role = s->pos < head ? s->first : !s->first;
            int sample = s->pos == head - 1 || s->pos == both - 1;
            s->pos = (s->pos + 1) % both;
            ticket = ticket_of(cls, ctx, role, sample);
        } else {
            /* Settled, its untimed run over: a sample, whose span this
             * thread's next band clear closes. */
            ticket = ticket_of(cls, ctx, s->role, 1);
        }
    }
    pthread_mutex_unlock(&lock);
    return closing ? ticket & ~CP_ADAPT_UNTIMED : ticket;
}

/* ---- the comparison's verdict ------------------------------------------ */

/* The median of k floats (the lower middle when k is even). */
static double median_of(const float *w, unsigned k)
{
    float v[KEEP];
    memcpy(v, w, k * sizeof v[0]);
    for (unsigned i = 1; i < k; i++)
        for (unsigned j = i; j > 0 && v[j - 1] > v[j]; j--) {
            float t = v[j]; v[j] = v[j - 1]; v[j - 1] = t;
        }
    return k ? v[(k - 1) / 2] : 0.0;
}

/* The cheapest clear alone in a role's window (0: none). */
static double clear_least(const struct role_state *a)
{
    double least = a->nclear ? a->clear[0] : 0.0;
    for (unsigned i = 1; i < a->nclear; i++)
        least = a->clear[i] < least ? a->clear[i] : least;
    return least;
}

static double clear_median(const struct role_state *a)
{
    double v[WINDOW];
    unsigned k = a->nclear;
    memcpy(v, a->clear, k * sizeof v[0]);
    for (unsigned i = 1; i < k; i++)
        for (unsigned j = i; j > 0 && v[j - 1] > v[j]; j--) {
            double t = v[j]; v[j] = v[j - 1]; v[j - 1] = t;
        }
    return k ? v[(k - 1) / 2] : 0.0;
}

/* The cheapest ordinary-store clear alone, in the window or since the
 * comparison started, over the median streaming one in the window (0
 * where either role has none).  Since the comparison started: whether
 * the window's latest temporal calls include the buffer back in the cache
 * depends on the order of the last pairs' blocks (a refill of 16 calls
 * reaches it only where a pair's temporal block follows the one before). */
static double clear_gap(const struct ctx_state *s)
{
    const struct role_state *t = &s->roles[CP_ADAPT_TEMPORAL];
    double stream = clear_median(&s->roles[CP_ADAPT_STREAMING]);
    if (!t->nclear || stream <= 0)
        return 0.0;
    double least = clear_least(t);
    if (s->least > 0 && s->least < least)
        least = s->least;
    return least / stream;
}

/* Whether the comparison's clears found the buffer in the cache: the
 * cheapest of the ordinary-store clears in the window (each temporal block
 * ends once the buffer came back, refill_gain) below KEEP_MARGIN times the
 * median streaming one (both timed now, on this buffer, so neither the
 * streaming reference's age nor the machine's memory bandwidth of the
 * moment tells: at 24-30 MiB the Zen 5 guest's came to 0.8x; the Zen 4
 * guest's, cleared back to back, stayed 1.3-1.4x at 24 MiB, 1.6x at 20,
 * 1.8-1.9x at 28-31, and came to 1.0-1.3x at 16 MiB, recent_max there). */
#define KEEP_MARGIN 0.9
static int keeps_in_cache(const struct ctx_state *s)
{
    double gap = clear_gap(s);
    return gap > 0 && gap < KEEP_MARGIN;
}

/* A settled recent context taken as cached: untimed, its next check after
 * `wait` calls (a wait for a refill set while it was compared is over). */
static void take_as_cached(struct ctx_state *s, uint64_t wait)
{
    s->learned = CP_LEARNED_CACHED;
    s->check_hist = s->held_hist = 0;
    s->check_prev[0] = s->check_prev[1] = s->held_before = 0;
    STORE(s->checks, 0);
    STORE(s->check_left, wait < UINT32_MAX ? (uint32_t)wait : UINT32_MAX);
    STORE(s->refilling, 0);
    STORE(s->evicted, 0);
}

/* The median absolute deviation of v[0..m) about mid (m at most KEEP). */
_Static_assert(WATCH <= KEEP, "the watch's samples fit spread_about");
static double spread_about(const float *v, unsigned m, double mid)
{
    float d[KEEP] = {0};
    for (unsigned i = 0; i < m; i++)
        d[i] = (float)fabs(v[i] - mid);
    return median_of(d, m);
}

static void settle(struct ctx_state *s, int role, int learned, size_t n)
{
    /* The latest pairs counted: each role's median cost, the ratio's, and
     * the settled role's spread (median absolute deviation), which the
     * watch measures a change against. */
    unsigned k = s->pairs < KEEP ? s->pairs : KEEP, m = 0;
    float c[2][KEEP] = {{0}}, r[KEEP] = {0};
    for (unsigned i = 0; i < k; i++)
        if (s->ok[i] || s->pairs < REF_PAIRS) {
            c[0][m] = s->lc[0][i];
            c[1][m] = s->lc[1][i];
            r[m++] = s->lr[i];
        }
    for (int i = 0; i < 2; i++) {
        s->roles[i].have_cost = m > 0;
        s->roles[i].cost = median_of(c[i], m);
    }
    s->ref = s->roles[role].cost;
    s->dev = spread_about(c[role], m, s->ref);
    s->last_pairs = s->used;
    s->last_dropped = s->dropped;
    s->last_wins = s->wins;
    s->last_ratio = m ? exp(median_of(r, m)) : 0.0;
    int kept = role == s->role;
    if (!kept)
        s->switches++;
    if (s->trigger == CP_ADAPT_BY_RECHECK && kept && s->holds < RECHECK_DOUBLINGS)
        s->holds++;
    if (s->trigger == CP_ADAPT_BY_CHANGE && kept && s->alarms < ALARM_DOUBLINGS)
        s->alarms++;
    if (!kept)
        s->holds = s->alarms = 0;
    s->role = role;
    s->learned = learned;
    s->comparing = 0;
    s->nwatch = 0;
    s->rebase = s->pairs < REF_PAIRS;
    s->since = 0;
    /* The recheck gap: recheck_bytes of this context's clears, doubled for
     * each recheck in a row that kept the role.  After a draw, a few times
     * the calls its pairs ran (the recheck goes on from them): what it
     * could not tell apart may differ by what it costs to keep comparing,
     * and the noise may pass.  A draw after a few pairs (the other role
     * not ahead at the mean and median of six) is looked at again a few
     * dozen calls later, not after four times the longest comparison
     * (4,096 calls at 16 KiB): at small sizes a few pairs are noisy, and
     * each recheck that finds the same adds a pair or two at most. */
    s->recheck = UINT64_MAX;
    if (params.recheck_bytes) {
        uint64_t calls = params.recheck_bytes / n;
        if (calls < RECHECK_CALLS)
            calls = RECHECK_CALLS;
        if (learned == CP_LEARNED_EVEN)
            calls = (uint64_t)EVEN_GAP * (s->block[0] + s->block[1]) * s->pairs;
        s->recheck = calls << s->holds;
    }
    /* A recent buffer above recent_max: held as cached (kept) where this
     * comparison found the machine keeps it in the cache, and not where it
     * found it does not (whatever the program does after the clear). */
    int cls = size_class(n);
    if (held_size(n, (int)(s - table[cls]))) {
        if (!keeps_in_cache(s)) {
            /* Timed from now on, on the role settled, as any context: the
             * evicted path below would take it as cached again.  Not
             * evicted: a buffer of the class up to recent_max (32 MiB, where
             * that is recent_max, shares the class of 32-64 MiB) is cached
             * again, and its own checks watch it; the held sizes are not
             * kept. */
            STORE(kept_bound[cls], 2 * s->fp_big > s->fp_all);
            STORE(kept_class[cls], -1);
            STORE(s->evicted, 0);
            s->overruled = 0;
            return;
        }
        if (role == CP_ADAPT_TEMPORAL) {
            STORE(kept_bound[cls], n + n / 4);
            STORE(kept_class[cls], 1);
            double kept = clear_median(&s->roles[CP_ADAPT_TEMPORAL]);
            double stream = params.stream_ns_per_byte;
            s->held_ref = 0;
            if (clear_least(&s->roles[CP_ADAPT_STREAMING]) > HELD_MARGIN * stream
                && kept > 0 && s->most > kept) {
                s->held_ref = sqrt(kept * s->most);
                if (s->held_ref > REFILL_FAR * stream)
                    s->held_ref = REFILL_FAR * stream;
            }
            if (!s->evicted) {
                /* Its first check waits out the refill after the
                 * comparison's latest streaming block, whatever is cleared
                 * between (the Intel guest's 53 MiB buffer, cleared among
                 * three small ones, came back in 8-10 calls; checked every
                 * fourth call from the first, it was taken out of the
                 * cache again, and compared again, at once). */
                uint32_t gap = check_gap(n);
                take_as_cached(s, 0);
                await_refill(s, gap > REFILL_WAIT ? gap : REFILL_WAIT);
                return;
            }
        }
    }
    /* A recent buffer found out of the cache (check_clear) that the
     * comparison kept on ordinary stores (the program uses what it clears,
     * or the checks were wrong): taken as cached again, untimed, and
     * checked again only after a recheck's gap, which doubles each time
     * this happens in a row (a check cannot tell this from a buffer out
     * of the cache and left alone, only a comparison can). */
    if (s->evicted) {
        if (role == CP_ADAPT_TEMPORAL) {
            uint64_t rest = params.recheck_bytes / n;
            rest = (rest < RECHECK_CALLS ? RECHECK_CALLS : rest) << s->overruled;
            if (s->overruled < RECHECK_DOUBLINGS)
                s->overruled++;
            /* The rest is the next check's wait now: a wait for a refill
             * set while it was compared (the buffer left the window) is
             * over, or the next clear after another buffer's would cut the
             * rest to nothing and check it at once. */
            take_as_cached(s, rest);
        } else {
            s->overruled = 0;
        }
    }
}

/* The ln(streaming / temporal) of the latest k pairs that count, into v;
 * returns how many. */
static unsigned counted(const struct ctx_state *s, unsigned k, float *v)
{
    unsigned m = 0;
    for (unsigned i = 0; i < k; i++)
        if (s->ok[i])
            v[m++] = s->lr[i];
    return m;
}

/* Their median, over the latest KEEP. */
static double counted_median(const struct ctx_state *s)
{
    float v[KEEP];
    return median_of(v, counted(s, s->pairs < KEEP ? s->pairs : KEEP, v));
}

/* Has the comparison run out of pairs, or of calls? */
static int spent(const struct ctx_state *s)
{
    return s->pairs >= s->limit || s->calls >= s->until;
}

/* One pair is complete: does it decide?  The role other than the safe one
 * needs decisive evidence; the safe one less, and it holds where the pairs
 * run out undecided. */
static void judge(struct ctx_state *s, size_t n)
{
    unsigned m = s->used;
    int safe = s->safe, other = !safe;
    if (spent(s) && m < TEMPORAL_PAIRS) {
        settle(s, safe, CP_LEARNED_EVEN, n);
        return;
    }
    if (m < TEMPORAL_PAIRS)
        return;
    /* The pairs are ln(streaming / temporal): their sign turned so that
     * below zero is the other role costing less. */
    double sign = safe == CP_ADAPT_TEMPORAL ? 1.0 : -1.0;
    double mean = s->sum / m, var = (s->sumsq - s->sum * mean) / (m - 1);
    double se = sqrt(var > 0 ? var / m : 0) + 1e-9;
    double t = sign * mean / se;
    unsigned wins = safe == CP_ADAPT_TEMPORAL ? s->wins : m - s->wins;
    if (m >= STREAM_PAIRS && t < -(T_STREAM + T_FEW / m)
        && wins >= m / 2.0 + Z_SIGN * sqrt((double)m) / 2.0
        && sign * mean < log(1.0 - params.margin_ppm * 1e-6))
        settle(s, other, other == CP_ADAPT_STREAMING ? CP_LEARNED_STREAMING
                                                     : CP_LEARNED_TEMPORAL, n);
    else if (t > T_TEMPORAL + T_TEMPORAL_FEW / m)
        settle(s, safe, safe == CP_ADAPT_STREAMING ? CP_LEARNED_STREAMING
                                                   : CP_LEARNED_TEMPORAL, n);
    else if (spent(s) && safe == CP_ADAPT_STREAMING && mean > 0
             && counted_median(s) > 0)
        /* Out of pairs with ordinary stores ahead at the mean and at the
         * median where streaming is the safe role (a buffer not cleared
         * lately, above a quarter of the cache): the program uses what it
         * clears, and the noise of its work hid how much.  Ordinary stores
         * are what memset does, so they cannot lose to it; the safe role
         * that streams can, by 1.5-2x (a cold walk of 8 MiB pages written
         * and summed after each clear, undecided after 28 pairs with 19
         * won by ordinary stores on the Zen 4 guest). */
        settle(s, other, CP_LEARNED_TEMPORAL, n);
    else if (spent(s)
             || (m >= FUTILE_PAIRS && t >= 0 && sign * counted_median(s) >= 0))
        /* Out of pairs, or the other role not even ahead at the mean nor
         * at the median after enough of them: each of its calls may cost
         * several times the safe role's (a cold buffer cleared with
         * ordinary stores, a streamed one the program reads), and in noise
         * that hides a difference the rest of the pairs would mostly
         * confirm the safe role at that price.  Ahead at the median, it
         * goes on: a pair or two far off (a streaming clear that paid for
         * the switch from ordinary stores, an interrupt) can hold the mean
         * of six back where most pairs favour it (a walk of 40 KiB
         * buffers on a Zen 5 guest: 3 of 6 pairs won, the median ratio
         * 0.95, the mean against it, where streaming costs the walk 0.55
         * of ordinary stores).  The recheck goes on from these pairs. */
        settle(s, safe, CP_LEARNED_EVEN, n);
}

/* The bounds a pair is judged by, from the latest k pairs: each role's
 * median cost (a span far above it was disturbed: a preemption, an
 * interrupt) and the clip of the ratio (median +- CLIP median absolute
 * deviations of the pairs kept).  Sorting is the dearest step here, so
 * from 16 pairs on it is done every CLIP_EVERY pairs. */
static void refresh_bounds(struct ctx_state *s, unsigned k)
{
    for (int r = 0; r < 2; r++)
        s->typical[r] = median_of(s->lc[r], k);
    float v[KEEP];
    unsigned m = counted(s, k, v);
    s->clip_mid = median_of(v, m);
    for (unsigned j = 0; j < m; j++)
        v[j] = (float)fabs(v[j] - s->clip_mid);
    s->clip_lim = CLIP * median_of(v, m) + 0.01;
}

/* Counts pair i, unless one of its spans was disturbed: then it is set
 * aside, as no evidence either way (a preemption only ever adds time, and
 * lands on either role by chance). */
static void count_pair(struct ctx_state *s, unsigned i)
{
    double far = log(DISTURBED);
    s->ok[i] = s->lc[0][i] <= s->typical[0] + far && s->lc[1][i] <= s->typical[1] + far;
    if (!s->ok[i]) {
        s->dropped++;
        return;
    }
    double r = s->lr[i], lo = s->clip_mid - s->clip_lim, hi = s->clip_mid + s->clip_lim;
    double c = r < lo ? lo : r > hi ? hi : r;
    s->used++;
    s->wins += r < 0;
    s->sum += c;
    s->sumsq += c * c;
}

/* Has the comparison run exactly `pairs` pairs, each of whose
 * sign * ln(streaming / temporal) is above `above`? */
static int early_pairs(const struct ctx_state *s, unsigned pairs, double sign, double above)
{
    if (s->pairs != pairs)
        return 0;
    for (unsigned i = 0; i < pairs; i++)
        if (!(sign * s->lr[i] > above))
            return 0;
    return 1;
}

/* The early verdict: did each of this comparison's first EARLY_PAIRS
 * pairs find ordinary stores EARLY_FACTOR times dearer, where streaming is
 * the safe role?  Where it is the start role only (a recent buffer above
 * recent_max, 16 MiB or more wherever the L3 is 32 MiB or more: clears of
 * a millisecond and more, as the large cold buffers'), every
 * ordinary-store clear alone (in the window, and since the comparison
 * started) must have cost EARLY_FACTOR times the streaming ones too: the program's noisy work can make two
 * pairs look apart, and a clear alone has none of it.  On the Zen 4 guest,
 * which does not keep such a buffer, the cheapest ordinary-store clear of
 * such a comparison cost 1.6x a streaming one at 20 MiB and 1.8-1.9x at
 * 28-31 MiB (those end early; at 24 MiB 1.3-1.4x, at 16 MiB 1.0-1.3x: they
 * run in full), where the comparison ran 4-6 pairs, 20-30 calls, half of
 * them that dear, for each such size class in each process; on the Zen 5
 * guest, which keeps one, 0.8x; and a program that uses the buffer next
 * makes the ordinary stores' pairs cheaper: neither ends early.  So too
 * where ordinary stores are the safe role above recent_max (a buffer not
 * cleared lately, below a quarter of the window: a walk of 59 MiB pages on
 * the Intel guest, L3 480 MiB reported, each ordinary-store clear 2.4x a
 * streaming one, ran four pairs and the uncounted first at that price, a
 * tenth of a phase of 100 calls). */
static int early_streaming(const struct ctx_state *s, size_t n)
{
    return early_pairs(s, EARLY_PAIRS, -1.0, log(EARLY_FACTOR))
           && (s->safe == CP_ADAPT_STREAMING
               || ((s->start == CP_ADAPT_STREAMING || n > params.recent_max)
                   && clear_gap(s) > EARLY_FACTOR));
}

/* The early verdict after one pair: a recent buffer of a held size whose
 * first temporal block did not bring it back at all (its cheapest
 * ordinary-store clear within FLAT of its dearest, the first after
 * streaming pushed it out) and cost EARLY_FACTOR times the streaming
 * clears alone, where the pair found streaming cheaper for the program
 * too (a program that reads what it cleared has the block's tail in the
 * cache on ordinary stores: its span says whether that paid).  A machine
 * that keeps the buffer has it back within a block (the Zen 5 guest's
 * refills at 24-30 MiB: at most 1.2x a streaming clear from the second
 * call on), and one that
 * brings it back slowly still shows it (the Zen 3 guest's at 16 MiB: 3x a
 * streaming clear falling to 1.15-1.7x over 16 calls, some 5% a call,
 * more than FLAT over a block of three); a block as dear as its first
 * call is a buffer the machine does not keep, whatever the program does
 * next, and each further pair pays that block again: 2.2-2.5x a streaming
 * clear at 46-117 MiB on the Intel guest (L3 480 MiB reported), five to
 * seven such calls in a second pair, a tenth of a phase of 50-100 calls. */
#define FLAT 0.93
static int early_flat(const struct ctx_state *s, size_t n)
{
    return early_pairs(s, 1, -1.0, 0.0)
           && held_here(s, n)
           && s->least > FLAT * s->most && clear_gap(s) > EARLY_FACTOR;
}

/* The early verdict the other way: a recent buffer of a held size, its
 * start role streaming (a guess), whose ordinary-store clears alone came
 * back into the cache (keeps_in_cache) and each of whose first EARLY_PAIRS
 * pairs found streaming dearer to the program.  At such sizes every pair
 * costs a refill: the temporal block's calls while the buffer comes back
 * into the cache after the streaming block pushed it out, 2-4 times a
 * streaming clear at first and 5-10 calls long at 8.8-13 MiB on the Zen 3
 * guest, milliseconds a pair; where two pairs found the buffer kept and
 * the program better off for it, two more would only pay that again.  So
 * too where the ordinary-store clears alone did not come back (only part of
 * the buffer kept, or none), if each pair found streaming DEARER times
 * dearer to the program, which uses what it cleared: on the Intel guest a
 * 64 MiB buffer that two threads cleared and wrote to came back to 1.25x a
 * streaming clear, not below it, and each of four pairs found streaming
 * 1.29-1.77x dearer to the program (after the checks found the buffer
 * slow); the two more pairs the verdict needed paid the refill of 15-20
 * calls after a streaming block twice more, in a phase of 104 calls.
 * Ordinary stores are the safe role there, what memset does. */
#define DEARER 1.25
static int early_kept(const struct ctx_state *s, size_t n)
{
    return s->safe == CP_ADAPT_TEMPORAL && held_here(s, n)
           && early_pairs(s, EARLY_PAIRS, 1.0, keeps_in_cache(s) ? 0.0 : log(DEARER));
}

/* The early verdict the other way from early_kept, for a program that
 * clears the buffer and leaves it (its probes' spans within QUIET_FACTOR
 * of the clear alone, busy_program): a recent buffer of a held size, its
 * start role streaming, whose ordinary-store clears did not come back into
 * the cache (the cheapest of them, the refill run, above LEFT_GAP times the
 * median streaming one), and each of whose pairs so far (one or two, fewer
 * than REF_PAIRS) found streaming cheaper: where the program's time is its
 * clear, the clears alone decide, and each further pair pays another
 * refill.  A 16 MiB buffer cleared back to back and left on the Zen 3
 * guest: its ordinary-store clears after a streaming block cost 1.0-1.3 ms
 * (3x a streaming one) and came down to 420-600 us in 16 calls, 1.15-1.7x
 * a streaming clear (340-395 us); the comparison ran 3-12 pairs and auto
 * came to 0.86-0.87 of avx2_nt in a phase of 250 calls, 0.89-0.92 with
 * this verdict (medians of 60-120 runs).  A program that reads or writes
 * the buffer next is where ordinary stores win by the most: the verdict
 * after two pairs lost there without the probes' gate (used 16-20 MiB
 * buffers of generated programs, Zen 3 guest).  (early_streaming asks
 * EARLY_FACTOR of both, as the Zen 4 guest's 16-24 MiB, 1.0-1.4x, ran in
 * full.)  A verdict on a block or two of ordinary stores holds only where
 * the latest block ran until the buffer stopped coming back: its latest
 * clear not the cheapest of the window (a block that ended while its
 * clears still fell, at the cap or by noise, says nothing of where they
 * end). */
#define LEFT_GAP 1.1
static int refill_over(const struct role_state *a)
{
    unsigned k = a->nclear;
    return k >= 2 && a->clear[k - 1] > clear_least(a);
}

static int early_left(const struct ctx_state *s, size_t n)
{
    return s->left_alone && s->start == CP_ADAPT_STREAMING
           && early_pairs(s, s->pairs, -1.0, 0.0)
           && held_here(s, n) && clear_gap(s) > LEFT_GAP
           && refill_over(&s->roles[CP_ADAPT_TEMPORAL]);
}

/* A probe of a held buffer's first calls (BUSY_FACTOR): its span against
 * the median of its role's clears alone so far. */
static void busy_program(struct ctx_state *s, int role, double x)
{
    double clear = clear_median(&s->roles[role]);
    if (s->nprobe >= PROBES || !(clear > 0))
        return;
    s->probe[s->nprobe++] = (float)(x - log(clear));
    s->fill[role] = x;          /* the comparison's first sample (start_comparison) */
    if (s->nprobe == PROBES) {
        double mid = median_of(s->probe, PROBES);
        s->busy = mid > log(BUSY_FACTOR);
        s->left_alone = mid < log(QUIET_FACTOR);
    }
}

/* A sample of role's cost (ln ns per byte) from a closed span. */
static void sample(struct ctx_state *s, int role, double x, size_t n)
{
    if (s->learned == CP_LEARNED_FIRST) {
        busy_program(s, role, x);
        return;
    }
    if (s->comparing) {
        s->fill[role] = x;
        s->have |= 1u << role;
        if (s->have != 3)
            return;
        s->have = 0;
        if (s->warmup) {
            s->warmup = 0;
            return;
        }
        unsigned i = s->pairs % KEEP;
        s->lr[i] = (float)(s->fill[CP_ADAPT_STREAMING] - s->fill[CP_ADAPT_TEMPORAL]);
        s->lc[0][i] = (float)s->fill[0];
        s->lc[1][i] = (float)s->fill[1];
        s->ok[i] = 1;
        s->pairs++;
        if (s->pairs < REF_PAIRS) {
            /* Too few to tell a disturbed pair yet, but they may be
             * decisive enough (counted then, each won by streaming). */
            if (early_streaming(s, n) || early_flat(s, n) || early_left(s, n)) {
                s->used = s->wins = s->pairs;
                settle(s, CP_ADAPT_STREAMING, CP_LEARNED_STREAMING, n);
            } else if (early_kept(s, n)) {
                s->used = s->pairs;
                s->wins = 0;
                settle(s, CP_ADAPT_TEMPORAL, CP_LEARNED_TEMPORAL, n);
            }
            return;
        }
        unsigned k = s->pairs < KEEP ? s->pairs : KEEP;
        if (s->pairs <= 16 || s->pairs % CLIP_EVERY == 0)
            refresh_bounds(s, k);
        if (s->pairs == REF_PAIRS) {
            for (unsigned j = 0; j < REF_PAIRS; j++)
                count_pair(s, j);
        } else {
            count_pair(s, i);
        }
        judge(s, n);
        return;
    }
    if (role != s->role)
        return;
    if (s->nwatch == WATCH) {
        memmove(s->watch, s->watch + 1, (WATCH - 1) * sizeof s->watch[0]);
        s->nwatch--;
    }
    s->watch[s->nwatch++] = x;
    if (s->nwatch < WATCH)
        return;
    if (s->rebase) {
        /* An early verdict's one or two pairs are one or two samples of
         * the role's cost: a program whose work after each clear varies
         * (a "mixed" one, 91 MiB on the Intel guest) would find them
         * "moved" at its next three and pay a comparison again.  The
         * watch's first samples are the role's cost as it runs. */
        float v[WATCH];
        for (unsigned i = 0; i < WATCH; i++)
            v[i] = (float)s->watch[i];
        s->ref = median_of(v, WATCH);
        double dev = spread_about(v, WATCH, s->ref);
        s->dev = dev > s->dev ? dev : s->dev;
        s->rebase = 0;
        return;
    }
    /* Moved: the latest WATCH samples all beyond the bound on one side (a
     * disturbed sample or two in a row are not a change). */
    double bound = CHANGE_DEVS * s->dev;
    if (bound < log(CHANGE_MIN))
        bound = log(CHANGE_MIN);
    bound *= 1u << s->alarms;
    int up = 0, down = 0;
    for (unsigned i = 0; i < WATCH; i++) {
        up += s->watch[i] - s->ref > bound;
        down += s->watch[i] - s->ref < -bound;
    }
    if (up == WATCH || down == WATCH)
        start_comparison(s, CP_ADAPT_BY_CHANGE);
}

/* ---- recording ---------------------------------------------------------- */

/* A clear's ns per byte from its clock readings. */
static double per_byte(uint64_t start_ns, uint64_t end_ns, size_t n)
{
    return (double)(end_ns >= start_ns ? end_ns - start_ns : 0) / (double)n;
}

/* The clear alone, for plan() and info. */
static void note_clear(struct role_state *a, uint64_t start_ns, uint64_t end_ns, size_t n)
{
    if (a->nclear == WINDOW) {
        memmove(a->clear, a->clear + 1, (WINDOW - 1) * sizeof a->clear[0]);
        a->nclear--;
    }
    a->clear[a->nclear++] = per_byte(start_ns, end_ns, n);
    a->timed++;
}

/* This call closes the span this thread's last sample call opened: that
 * clear and what the program did right after it, up to this band clear,
 * is a sample of the sample call's role in its context.  A settled
 * context, its sample taken, runs untimed for a while. */
static void close_span(uint64_t start_ns)
{
    if (!span_open())
        return;
    span.on = 0;
    STORE(spans_open, spans_open - 1);
    struct ctx_state *o = &table[span.cls][span.ctx];
    if (!o->init || start_ns <= span.start)
        return;
    sample(o, span.role, log((double)(start_ns - span.start) / (double)span.n), span.n);
    if (settled(o))
        quiet_run(o, span.n, span.cls, span.ctx);
}

static void open_span(int cls, int ctx, int role, size_t n, uint64_t start_ns, int cpu)
{
    span.on = 1;
    span.cpu = cpu;
    span.cls = cls;
    span.ctx = ctx;
    span.role = role;
    span.n = n;
    span.start = start_ns;
    span.generation = LOAD(generation);
    STORE(spans_open, spans_open + 1);
    flush_fast();               /* this thread's next band clear is timed */
}

/* A check's cost into its kind's history (check_prev; a held size's: and
 * the one before, held_before), which the next check is weighed against. */
static void note_check(struct ctx_state *s, int held, double x)
{
    if (held)
        s->held_before = s->check_prev[1];
    s->check_prev[held] = x;
}

/* A held size's clear in the wait for its refill (cached_call): the wait
 * goes on, a call at a time, while the clear costs refill_gain less than
 * the one REFILL_SPAN calls before, up to REFILL_MOST calls.  A large
 * buffer comes back as slowly as it likes: on the Intel guest, two
 * threads, one clearing a 64 MiB buffer and writing to it after each
 * clear, the other a 4.6 KiB one, the large one's clears cost 7.8, 6.7,
 * 6.6 ... 5.3 ms over the 16 calls of the wait, 5.1, 5.0, 4.8 ms at the
 * three checks that found it slow (a streaming clear: 3.6 ms), and
 * 3.3-3.5 ms once back, 20-40 calls later; the comparison those checks
 * started paid that refill again after each of its streaming blocks, and
 * the phase ran at 0.66-0.74 of memset's time.  A
 * buffer out of the cache costs the same within its noise from call to
 * call, and its wait ends after the usual 16.  The checks after the wait
 * weigh their first against these calls (check_prev, held_before). */
static void watch_refill(struct ctx_state *s, double x)
{
    uint32_t k = LOAD(s->watched);
    float *seen = &s->refill_seen[k % REFILL_SPAN];
    int falling = k >= REFILL_SPAN && x < (1.0 - params.refill_gain) * *seen;
    *seen = (float)x;
    STORE(s->watched, k + 1);
    note_check(s, 1, x);
    if (falling && k < REFILL_MOST && LOAD(s->check_left) == 0)
        STORE(s->check_left, 1);
}

/* A check of a cached context's clear (cached_call): ordinary stores that
 * cost more than a streaming clear does (stream_ns_per_byte) did not find
 * the buffer in the cache.  In CHECK_VOTE of its latest CHECK_KEEP checks
 * (a held buffer's: HELD_VOTE of HELD_KEEP, against HELD_MARGIN): the
 * context is timed from now on, starting with a comparison. */
static void check_clear(size_t n, int cls, int ctx, uint64_t start_ns, uint64_t end_ns)
{
    if (pthread_mutex_trylock(&lock) != 0)
        return;
    struct ctx_state *s = &table[cls][ctx];
    int held = n > params.recent_max;
    /* A held buffer is checked whatever its context learned from the
     * calls not held (footprints above crowd_most, or found not kept at
     * a larger one): the checks are all that watch its held calls. */
    if (s->init && (s->learned == CP_LEARNED_CACHED || (held && !s->comparing))
        && !s->evicted) {
        double x = per_byte(start_ns, end_ns, n);
        if (held && LOAD(s->refilling)) {
            watch_refill(s, x);
            pthread_mutex_unlock(&lock);
            return;
        }
        /* A held size presumed kept, no comparison of its class yet, is
         * checked as a recent buffer up to recent_max is: its ordinary-store
         * clears in the cache cost 0.9-1.1x a streaming one from call to
         * call on the Intel guest at 53 MiB, and at HELD_MARGIN 3 of 5 of
         * them were taken for a buffer out of the cache in 2 of 3 runs,
         * its comparison then paying a refill of 10-16 calls per pair; one
         * the machine does not keep costs 1.5-3x (the Zen 4 guest at 20-31
         * MiB, the Intel guest at 100 MiB). */
        double margin = held && !presumed_unjudged(n, cls) ? HELD_MARGIN : CHECK_MARGIN;
        uint32_t keep = (1u << (held ? HELD_KEEP : CHECK_KEEP)) - 1;
        double slow = margin * params.stream_ns_per_byte;
        if (held && s->held_ref > slow)
            slow = s->held_ref;
        /* Each kind its own history: a class may hold both (recent_max a
         * power of two), and one's slow checks are not the other's. */
        uint32_t *hist = held ? &s->held_hist : &s->check_hist;
        if (held)
            STORE(s->checks, s->checks + 1);
        /* A slow check that cost refill_gain less than the one before is
         * a buffer coming into the cache, not one out of it: a 25.1 MiB
         * buffer padded after each clear, on the Intel guest, cleared in
         * 2.6, 2.2, 1.9, 1.7, 1.5, 1.2 ms, then 0.8-0.9 from its ninth
         * call (streaming: 1.1-1.2); its checks at 2.2 and 1.4 ms took it
         * out of the cache, and the comparison's every temporal block paid
         * that refill again: 0.60 of memset in a phase of 76 calls.  A
         * buffer out of the cache costs its checks about the same each
         * time.  A held size's, against the dearer of its latest two
         * checks: its first checks come one call apart, and a large buffer
         * comes back more slowly than refill_gain a call (on the Intel
         * guest, at 72 MiB cleared back to back, 0.081, 0.075, 0.071,
         * 0.065, 0.060, 0.056 ns per byte on its 16th to 21st calls,
         * 0.037 from its 26th; a streaming clear 0.041): each of
         * those checks would count slow and hand it to a comparison,
         * whose streaming blocks push it out again.  Two calls that cost
         * refill_gain less, together, are a buffer coming back; a buffer
         * out of the cache stays within its noise of the same cost. */
        double prev = s->check_prev[held];
        double than = held && s->held_before > prev ? s->held_before : prev;
        int falling = than > 0 && x < (1.0 - params.refill_gain) * than;
        /* ... or, a held size's, half refill_gain below its timed call
         * REFILL_SPAN before (the wait's calls, then its checks): a large
         * buffer may come back at 1% a call for 20-30 calls before it
         * speeds up, under refill_gain even over eight.  On the Intel
         * guest a 68 MiB buffer with mixed work after each clear: 0.104,
         * 0.098 ... 0.094 ns per byte from the wait's 6th call to its
         * first checks (3 of 5 slow against the dearer of the two before,
         * so a comparison, whose streaming blocks pushed it out again),
         * 0.043 from its 33rd call where nothing intervened (streaming:
         * 0.059); the phase of 129 calls ran 1.2-1.4x either routine
         * alone.  A buffer out of the cache costs the same within its
         * noise eight calls apart. */
        if (held) {
            uint32_t k = LOAD(s->watched);
            float *seen = &s->refill_seen[k % REFILL_SPAN];
            falling |= k >= REFILL_SPAN && x < (1.0 - params.refill_gain / 2) * *seen;
            *seen = (float)x;
            STORE(s->watched, k + 1);
        }
        note_check(s, held, x);
        *hist = (*hist << 1 | (x > slow && !falling)) & keep;
        if (__builtin_popcount(*hist) >= (held ? HELD_VOTE : CHECK_VOTE)) {
            drain_quiet(s);
            init_context(s, n, ctx);
            STORE(s->evicted, held ? EVICTED_HELD : EVICTED_SMALL);
            start_comparison(s, CP_ADAPT_BY_EVICTED);
        }
    }
    pthread_mutex_unlock(&lock);
}

void cp_adapt_record_span(size_t n, int ticket, uint64_t start_ns, uint64_t end_ns)
{
    if (ticket < 0 || n == 0 || ticket & CP_ADAPT_UNTIMED)
        return;
    int cls = ticket >> CP_ADAPT_CLASS_SHIFT, ctx = ticket >> CP_ADAPT_CONTEXT_SHIFT & 1;
    int role = ticket & CP_ADAPT_ROLE;
    if (cls >= CP_ADAPT_CLASSES)
        return;
    if (ticket & CP_ADAPT_CHECK)
        check_clear(n, cls, ctx, start_ns, end_ns);
    /* The span's end (and the next one's start): this call's start on
     * each span's clock. */
    uint64_t end = start_ns, at = start_ns;
    int cpu = 0, can_open = 1;
    if (LOAD(params.span_clock) == CP_ADAPT_SPAN_CPU) {
        if (!span_mark.handed)
            return;             /* no timed ticket handed out on this thread */
        span_mark.handed = 0;
        if (span_open() && span.cpu)
            end = span_mark.cpu;    /* 0 where it was not read: no sample */
        cpu = cpu_span(n);
        if (cpu) {
            at = span_mark.cpu;
            can_open = at != 0;     /* not read: opens none */
        }
    }
    if (pthread_mutex_trylock(&lock) != 0)
        return;
    struct ctx_state *s = &table[cls][ctx];
    if (!s->init) {             /* reset between choose and record */
        pthread_mutex_unlock(&lock);
        return;
    }
    if (!untimed_context(s) && !(ticket & (CP_ADAPT_CLOSE | CP_ADAPT_CHECK))) {
        /* (Else a check, or timed only to close a span: a cached buffer's
         * clear, or a settled role's untimed one, is not the context's to
         * note, where a class holds both a buffer up to recent_max, cached,
         * and a held size compared.) */
        s->timed++;
        note_clear(&s->roles[role], start_ns, end_ns, n);
        const struct role_state *a = &s->roles[role];
        double x = a->clear[a->nclear - 1];
        if (s->comparing && role == CP_ADAPT_TEMPORAL) {
            if (!(s->least > 0) || x < s->least)
                s->least = x;
            if (x > s->most)
                s->most = x;
            s->fp_big += LOAD(last.fp) > crowd_most;
            s->fp_all++;
        }
    }
    int was_comparing = s->comparing;
    close_span(end);
    /* A sample call opens a span, unless its comparison just ended or its
     * settled context just took its sample. */
    if (ticket & CP_ADAPT_SAMPLE && was_comparing == s->comparing
        && (s->comparing || (settled(s) && !s->resting) || s->learned == CP_LEARNED_FIRST)
        && can_open)
        open_span(cls, ctx, role, n, at, cpu);
    pthread_mutex_unlock(&lock);
}

/* ---- what plan() and info read ------------------------------------------ */

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
        memset(out, 0, sizeof *out);
        out->role = s->role;
        out->safe = s->safe;
        out->start = s->start;
        out->learned = s->learned;
        out->trigger = s->trigger;
        for (int i = 0; i < 2; i++) {
            out->clear_ns_per_byte[i] = clear_median(&s->roles[i]);
            out->cost_ns_per_byte[i] = s->roles[i].have_cost ? exp(s->roles[i].cost) : 0.0;
        }
        out->pairs = s->comparing ? s->used : s->last_pairs;
        out->dropped = s->comparing ? s->dropped : s->last_dropped;
        out->wins = s->comparing ? s->wins : s->last_wins;
        out->ratio = s->comparing ? 0.0 : s->last_ratio;
        out->calls = s->calls + (s->quiet_set - LOAD(s->quiet_left)) + LOAD(s->quiet_ran);
        if (fast_owner == s)
            out->calls += LOAD(cp_adapt_fast_slot.set) - LOAD(cp_adapt_fast_slot.left);
        out->timed = s->timed;
        out->comparisons = s->comparisons;
        out->switches = s->switches;
        out->period = s->stretch > s->period ? s->stretch : s->period;
        out->kept = LOAD(kept_class[size_class]);
        out->kept_upto = out->kept > 0 ? (size_t)LOAD(kept_bound[size_class]) : 0;
        uint32_t hist = LOAD(fp_hist[size_class]);
        out->crowded = hist & FP_SEEN ? __builtin_popcount(hist & FP_MASK) : -1;
    }
    pthread_mutex_unlock(&lock);
    return have;
}
