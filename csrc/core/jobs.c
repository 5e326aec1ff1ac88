/*
 * Jobs: clear many extents as one piece of work.
 *
 * The kernel's multi-page clearing gives the CPU the whole extent as its
 * size hint; scattered pages get the same treatment here by sorting them by
 * address and merging neighbours into runs (the order of zeroing does not
 * matter, the order of memory does).  The merged extents are then walked as
 * one byte range, handed out in units to native threads, with a deadline so
 * that a caller holding no GIL can come back to Python between time slices
 * (Ctrl-C) without losing its place, much like the kernel's rescheduling
 * points between 32 MiB chunks.
 */
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "clearpages.h"
#include "clock.h"
#include "inject.h"
#include "untouched.h"

/* Unit boundaries fall on this alignment in the address space, so threads
 * split work on page boundaries and streaming routines see aligned lines. */
#define SPLIT_ALIGN 4096u

struct item {           /* sort record: offset from a base, length */
    uint64_t key;
    uint64_t len;
};

struct cp_job {
    struct cp_extent *ext;
    size_t *cum;        /* cum[i]: position of extent i in the byte range */
    size_t n;
    size_t phase;       /* position of the first byte (its page offset) */
    size_t end;         /* phase + total */
    cp_clear_fn fn;
    size_t unit;        /* a thread's first unit while fn's speed is unknown */
    int threads;
    int fence;
    int error;          /* errno of a worker that could not start */
    uint64_t deadline;
    atomic_int stop;    /* set when a slice gives up (a thread did not start) */
    atomic_size_t next; /* the first position not yet handed out */
    atomic_size_t done;
};

/* ---- sort and merge ---------------------------------------------------- */

/* Up to this many items, an insertion sort: each radix pass zeroes and
 * sums 2048 counts, and keys of addresses far apart (buffers of their
 * own) take five passes, which made sorting most of a clear_many of 16
 * buffers of 512 bytes (Zen 2 guest: 39% of the call). */
#define SORT_INSERTION_MAX 128

/* LSD radix sort by key, 11-bit digits, skipping digits all keys share. */
static void sort_items(struct item *a, struct item *tmp, size_t n)
{
    if (n < 2)
        return;
    if (n <= SORT_INSERTION_MAX) {
        for (size_t i = 1; i < n; i++) {
            struct item x = a[i];
            size_t j = i;
            while (j > 0 && a[j - 1].key > x.key) {
                a[j] = a[j - 1];
                j--;
            }
            a[j] = x;
        }
        return;
    }
    uint64_t max = 0;
    for (size_t i = 0; i < n; i++)
        if (a[i].key > max)
            max = a[i].key;
    struct item *src = a, *dst = tmp;
    for (int shift = 0; shift < 64 && (max >> shift); shift += 11) {
        size_t count[2048] = {0};
        for (size_t i = 0; i < n; i++)
            count[(src[i].key >> shift) & 2047]++;
        if (count[(src[0].key >> shift) & 2047] == n)
            continue;   /* every key has this digit: nothing to move */
        size_t pos = 0;
        for (size_t d = 0; d < 2048; d++) {
            size_t c = count[d];
            count[d] = pos;
            pos += c;
        }
        for (size_t i = 0; i < n; i++)
            dst[count[(src[i].key >> shift) & 2047]++] = src[i];
        struct item *t = src;
        src = dst;
        dst = t;
    }
    if (src != a)
        memcpy(a, src, n * sizeof(*a));
}

/* The job over m sorted, disjoint extents (ext, of room for at least one);
 * takes ownership of ext, frees it on failure. */
static struct cp_job *job_from_extents(struct cp_extent *ext, size_t m)
{
    struct cp_job *job = calloc(1, sizeof(*job));
    size_t *cum = malloc((m + 1) * sizeof(*cum));
    if (!job || !cum) {
        free(job);
        free(cum);
        free(ext);
        return NULL;
    }
    job->phase = m ? (uintptr_t)ext[0].addr % SPLIT_ALIGN : 0;
    size_t pos = job->phase;
    for (size_t i = 0; i < m; i++) {
        cum[i] = pos;
        pos += ext[i].len;
    }
    cum[m] = pos;
    job->ext = ext;
    job->cum = cum;
    job->n = m;
    job->end = pos;
    job->threads = 1;
    job->unit = SPLIT_ALIGN;
    atomic_init(&job->next, job->phase);
    return job;
}

/* Build the job from items (base + key, len): sort, drop empties, merge
 * touching or overlapping ones.  Frees items. */
static struct cp_job *job_from_items(char *base, struct item *items, size_t n)
{
    struct item *tmp = malloc((n ? n : 1) * sizeof(*tmp));
    struct cp_extent *ext = malloc((n ? n : 1) * sizeof(*ext));
    if (!tmp || !ext) {
        free(tmp);
        free(ext);
        free(items);
        return NULL;
    }
    sort_items(items, tmp, n);
    free(tmp);

    size_t m = 0;
    uint64_t cur_start = 0, cur_end = 0;
    for (size_t i = 0; i < n; i++) {
        if (items[i].len == 0)
            continue;
        uint64_t s = items[i].key, e = items[i].key + items[i].len;
        if (m && s <= cur_end) {
            if (e > cur_end)
                cur_end = e;
            ext[m - 1].len = (size_t)(cur_end - cur_start);
            continue;
        }
        cur_start = s;
        cur_end = e;
        ext[m].addr = base + s;
        ext[m].len = (size_t)items[i].len;
        m++;
    }
    free(items);
    return job_from_extents(ext, m);
}

/* Pages of a pool usually cover a good part of it: then one bit per page
 * of the buffer is small, setting bits needs no sort, repeats vanish, and
 * runs of set bits are the merged extents, found a word at a time.  Used
 * while the bitmap is at most this many bytes per listed page (or 64 KiB). */
#define BITMAP_BYTES_PER_PAGE 16
#define BITMAP_BYTES_ANYWAY (64u << 10)

static size_t next_bit(const uint64_t *bm, size_t words, size_t from, int set)
{
    size_t w = from >> 6;
    if (w >= words)
        return words * 64;
    uint64_t flip = set ? 0 : ~0ull;
    uint64_t word = (bm[w] ^ flip) & (~0ull << (from & 63));
    while (!word) {
        if (++w == words)
            return words * 64;
        word = bm[w] ^ flip;
    }
    return w * 64 + (size_t)__builtin_ctzll(word);
}

static struct cp_job *job_from_bitmap(char *base, size_t buflen,
                                      const int64_t *pages, size_t n,
                                      size_t page_size, uint64_t npages)
{
    size_t words = (size_t)((npages + 63) / 64);
    uint64_t *bm = calloc(words ? words : 1, sizeof(*bm));
    struct cp_extent *ext = malloc((n ? n : 1) * sizeof(*ext));
    if (!bm || !ext) {
        free(bm);
        free(ext);
        return NULL;
    }
    for (size_t i = 0; i < n; i++)
        bm[pages[i] >> 6] |= 1ull << (pages[i] & 63);
    size_t m = 0;
    for (size_t p = next_bit(bm, words, 0, 1); p < npages;) {
        size_t end = next_bit(bm, words, p, 0);
        if (end > npages)
            end = (size_t)npages;
        uint64_t off = (uint64_t)p * page_size;
        uint64_t stop = (uint64_t)end * page_size;
        ext[m].addr = base + off;
        ext[m].len = (size_t)((stop < buflen ? stop : buflen) - off);
        m++;
        p = next_bit(bm, words, end, 1);
    }
    free(bm);
    return job_from_extents(ext, m);
}

struct cp_job *cp_job_new(char *const *addrs, const size_t *lens, size_t n)
{
    struct item *items = malloc((n ? n : 1) * sizeof(*items));
    if (!items)
        return NULL;
    uintptr_t base = UINTPTR_MAX;
    for (size_t i = 0; i < n; i++)
        if (lens[i] && (uintptr_t)addrs[i] < base)
            base = (uintptr_t)addrs[i];
    for (size_t i = 0; i < n; i++) {
        items[i].key = lens[i] ? (uintptr_t)addrs[i] - base : 0;
        items[i].len = lens[i];
    }
    return job_from_items((char *)(base == UINTPTR_MAX ? 0 : base), items, n);
}

struct cp_job *cp_job_from_pages(char *base, size_t buflen,
                                 const int64_t *pages, size_t n,
                                 size_t page_size, size_t *bad)
{
    if (page_size == 0) {
        *bad = 0;
        return NULL;
    }
    uint64_t npages = buflen / page_size + (buflen % page_size != 0);
    for (size_t i = 0; i < n; i++) {
        if (pages[i] < 0 || (uint64_t)pages[i] >= npages) {
            *bad = i;
            return NULL;
        }
    }
    if (npages / 8 <= BITMAP_BYTES_ANYWAY || npages / 8 / BITMAP_BYTES_PER_PAGE <= n) {
        struct cp_job *job = job_from_bitmap(base, buflen, pages, n, page_size, npages);
        if (!job)
            *bad = n;
        return job;
    }
    struct item *items = malloc((n ? n : 1) * sizeof(*items));
    if (!items) {
        *bad = n;
        return NULL;
    }
    for (size_t i = 0; i < n; i++) {
        uint64_t off = (uint64_t)pages[i] * page_size;
        items[i].key = off;
        items[i].len = buflen - off < page_size ? buflen - off : page_size;
    }
    struct cp_job *job = job_from_items(base, items, n);
    if (!job)
        *bad = n;
    return job;
}

size_t cp_job_skip_untouched(struct cp_job *job)
{
    struct cp_extent *kept = NULL;
    size_t m = cp_untouched_trim(job->ext, job->n, &kept);
    if (m == (size_t)-1)
        return 0;
    struct cp_job *trimmed = job_from_extents(kept, m);
    if (!trimmed)
        return 0;
    size_t before = cp_job_total(job);
    free(job->ext);
    free(job->cum);
    job->ext = trimmed->ext;
    job->cum = trimmed->cum;
    job->n = trimmed->n;
    job->phase = trimmed->phase;
    job->end = trimmed->end;
    atomic_store(&job->next, trimmed->phase);
    free(trimmed);
    return before - cp_job_total(job);
}

int cp_job_configure(struct cp_job *job, cp_clear_fn fn, size_t unit,
                     int threads, int fence)
{
    if (!fn || threads < 1 || threads > CP_MAX_THREADS)
        return -1;
    if (unit < SPLIT_ALIGN)
        unit = SPLIT_ALIGN;
    unit -= unit % SPLIT_ALIGN;
    job->fn = fn;
    job->unit = unit;
    job->threads = threads;
    job->fence = fence;
    return 0;
}

/* ---- how fast each routine runs ------------------------------------------ */

/* Units are sized by time, not bytes: a long extent must reach the routine
 * in one piece where it can (AMD's rep stosb streams only for long
 * lengths), yet each slice must end by its deadline.  Every job measures
 * its units; the last good measurement of a routine (bytes per microsecond
 * of one thread) sizes the first unit of the next job's slices. */
enum { RATE_SLOTS = 32 };
#define RATE_MIN_NS 1000000u   /* less measured work is not remembered: noise */

static struct {
    _Atomic(uintptr_t) fn;
    atomic_uint_least64_t bytes_per_us;
} rates[RATE_SLOTS];

static uint64_t rate_get(cp_clear_fn fn)
{
    for (int i = 0; i < RATE_SLOTS; i++) {
        uintptr_t f = atomic_load_explicit(&rates[i].fn, memory_order_acquire);
        if (f == (uintptr_t)fn)
            return atomic_load_explicit(&rates[i].bytes_per_us, memory_order_relaxed);
        if (f == 0)
            break;
    }
    return 0;
}

/* A slot is claimed by its routine before its speed is written: a thread
 * that loses the claim to another routine has written nothing there, and
 * the winner's slot holds the winner's speed (or 0, "not yet", until its
 * store lands). */
static void rate_put(cp_clear_fn fn, uint64_t bytes_per_us)
{
    for (int i = 0; i < RATE_SLOTS; i++) {
        uintptr_t f = atomic_load_explicit(&rates[i].fn, memory_order_acquire);
        if (f == 0) {
            uint64_t rival = (uint64_t)cp_inject_hit(CP_INJECT_RATE_RIVAL);
            if (rival)
                rate_put(cp_inject_rival, rival);
            uintptr_t empty = 0;
            f = atomic_compare_exchange_strong(&rates[i].fn, &empty, (uintptr_t)fn)
                ? (uintptr_t)fn : empty;
        }
        if (f == (uintptr_t)fn) {
            atomic_store_explicit(&rates[i].bytes_per_us, bytes_per_us, memory_order_relaxed);
            return;
        }
    }
}

void cp_job_forget_rates(void)
{
    for (int i = 0; i < RATE_SLOTS; i++)
        atomic_store(&rates[i].bytes_per_us, 0);
}

uint64_t cp_job_rate(cp_clear_fn fn)
{
    return rate_get(fn);
}

/* inject.h's accessor lives with the speeds it reads, so that inject.c
 * calls into no other part of the core. */
uint64_t cp_inject_rival_rate(void)
{
    return cp_job_rate(cp_inject_rival);
}

/* Bytes that take ns nanoseconds at bytes_per_us (saturating). */
static size_t bytes_in(uint64_t bytes_per_us, uint64_t ns)
{
    double b = (double)bytes_per_us * ((double)ns / 1000.0);
    return b >= (double)(SIZE_MAX / 2) ? SIZE_MAX / 2 : (size_t)b;
}

/* ---- running ------------------------------------------------------------ */

/* Clear positions [lo, hi) of the byte range. */
static void clear_range(struct cp_job *job, size_t lo, size_t hi)
{
    size_t a = 0, b = job->n;       /* last i with cum[i] <= lo */
    while (b - a > 1) {
        size_t mid = a + (b - a) / 2;
        if (job->cum[mid] <= lo)
            a = mid;
        else
            b = mid;
    }
    for (size_t i = a; lo < hi && i < job->n; i++) {
        size_t off = lo - job->cum[i];
        size_t take = job->ext[i].len - off;
        if (take > hi - lo)
            take = hi - lo;
        job->fn(job->ext[i].addr + off, take);
        lo += take;
    }
}

static void fence(void)
{
#if defined(__x86_64__) && !defined(CP_PORTABLE)
    __builtin_ia32_sfence();
#endif
}

/* The address of position pos of the byte range (pos < end). */
static char *address_of(const struct cp_job *job, size_t pos)
{
    size_t a = 0, b = job->n;
    while (b - a > 1) {
        size_t mid = a + (b - a) / 2;
        if (job->cum[mid] <= pos)
            a = mid;
        else
            b = mid;
    }
    return job->ext[a].addr + (pos - job->cum[a]);
}

/* Memory the kernel has not yet given a page clears 50-100 times slower
 * than resident memory (a fault per page; docs/results.md has the
 * figures): a unit sized by time from a warm measurement would overrun its
 * slice by seconds there.  So a unit longer than job->unit is first
 * sampled with mincore(), one page per RESIDENT_STRIDE; where any sample is
 * not resident it stays at job->unit.  Where mincore cannot say (not a
 * mapping it knows), assume cold. */
#define RESIDENT_STRIDE (4u << 20)

static int resident(const struct cp_job *job, size_t lo, size_t hi)
{
    for (size_t pos = lo; pos < hi; pos += RESIDENT_STRIDE) {
        uintptr_t a = (uintptr_t)address_of(job, pos);
        unsigned char vec = 0;
        if (mincore((void *)(a - a % SPLIT_ALIGN), 1, &vec) != 0 || !(vec & 1))
            return 0;
    }
    return 1;
}

/* Take the next unit of about `want` bytes: [lo, hi), ending on a
 * SPLIT_ALIGN boundary of the byte range (or at its end).  With several
 * threads no unit is more than a thread's share of what is left, so they
 * finish together; one thread takes the rest of the job in one unit where
 * it is at most a quarter more than `want` (a long extent in one call).
 * 0 when nothing is left. */
static int grab(struct cp_job *job, size_t want, size_t *lo, size_t *hi)
{
    size_t cur = atomic_load(&job->next);
    for (;;) {
        if (cur >= job->end || atomic_load_explicit(&job->stop, memory_order_relaxed))
            return 0;
        size_t left = job->end - cur, w = want;
        if (job->threads > 1) {
            size_t share = left / (size_t)job->threads + 1;
            if (w > share)
                w = share;
        } else if (w >= left - left / 5) {
            w = left;
        }
        if (w > left)
            w = left;
        if (w > job->unit && !resident(job, cur, cur + w))
            w = job->unit;
        size_t stop = cur + w;
        if (stop < job->end)
            stop -= stop % SPLIT_ALIGN;
        if (stop <= cur)
            stop = cur - cur % SPLIT_ALIGN + SPLIT_ALIGN;
        if (stop > job->end)
            stop = job->end;
        if (atomic_compare_exchange_weak(&job->next, &cur, stop)) {
            *lo = cur;
            *hi = stop;
            return 1;
        }
    }
}

/* Clear units until the job is done or the deadline has passed.  Units are
 * sized by time: the first from the speed last measured for the routine
 * (job->unit bytes while none is known), each later one from the speed of
 * the one before, to end at the deadline; a unit is at most 8 times the one
 * before it, so one lucky measurement cannot commit a thread to a long
 * run, and memory not yet faulted in is cleared job->unit at a time.
 * The speed remembered for the next job is that of the units since the
 * last one remembered, once they add up to RATE_MIN_NS: on a fast machine
 * no single unit of a job may last that long (1, 8, then 55 MiB of a 64 MiB
 * extent), and a speed never remembered would start every job from
 * job->unit again, never handing the routine a long extent in one call. */
static void run_units(struct cp_job *job)
{
    uint64_t rate = rate_get(job->fn);
    uint64_t t0 = cp_now_ns();
    size_t want = rate && job->deadline > t0 ? bytes_in(rate, job->deadline - t0) : job->unit;
    size_t lo, hi;
    uint64_t sum_bytes = 0, sum_ns = 0;

    while (grab(job, want, &lo, &hi)) {
        clear_range(job, lo, hi);
        atomic_fetch_add(&job->done, hi - lo);
        uint64_t t1 = cp_now_ns(), dt = t1 > t0 ? t1 - t0 : 1;
        uint64_t r = (uint64_t)((double)(hi - lo) * 1000.0 / (double)dt);
        if (r == 0)
            r = 1;
        sum_bytes += hi - lo;
        sum_ns += dt;
        if (sum_ns >= RATE_MIN_NS) {
            uint64_t avg = (uint64_t)((double)sum_bytes * 1000.0 / (double)sum_ns);
            rate_put(job->fn, avg ? avg : 1);
            sum_bytes = sum_ns = 0;
        }
        if (t1 >= job->deadline)
            break;
        want = bytes_in(r, job->deadline - t1);
        if (want / 8 > hi - lo)
            want = (hi - lo) * 8;
        t0 = t1;
    }
    /* Streaming stores are weakly ordered: make them visible before this
     * thread reports its units done. */
    if (job->fence)
        fence();
}

static void *worker(void *arg)
{
    run_units(arg);
    return NULL;
}

/* Workers run a leaf routine and a little C: a small stack is plenty, and
 * keeps many threads cheap under RLIMIT_AS. */
#define WORKER_STACK (64u << 10)

/* Asynchronous signals (SIGINT, SIGALRM, ...) stay with the caller's
 * thread, which Python watches.  A fault in a worker (SIGSEGV, SIGBUS: a
 * file mapping truncated underneath) must reach the process's handlers as
 * it would on the caller's thread (faulthandler reports it); a blocked
 * synchronous fault kills the process without a word. */
void cp_block_async_signals(sigset_t *old)
{
    sigset_t mask;
    sigfillset(&mask);
    sigdelset(&mask, SIGSEGV);
    sigdelset(&mask, SIGBUS);
    sigdelset(&mask, SIGILL);
    sigdelset(&mask, SIGFPE);
    sigdelset(&mask, SIGTRAP);
    sigdelset(&mask, SIGSYS);
    pthread_sigmask(SIG_BLOCK, &mask, old);
}

static int start_workers(struct cp_job *job, pthread_t *tids, int extra, int *started)
{
    pthread_attr_t attr;
    int have_attr = pthread_attr_init(&attr) == 0;
    if (have_attr) {
        size_t stack = WORKER_STACK;
        long min = sysconf(_SC_THREAD_STACK_MIN);
        if (min > 0 && (size_t)min > stack)
            stack = (size_t)min;
        pthread_attr_setstacksize(&attr, stack);
    }
    sigset_t old;
    cp_block_async_signals(&old);
    int err = 0;
    for (*started = 0; *started < extra; (*started)++) {
        err = cp_inject_hit(CP_INJECT_THREAD_START);
        if (!err)
            err = pthread_create(&tids[*started], have_attr ? &attr : NULL, worker, job);
        if (err)
            break;
    }
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (have_attr)
        pthread_attr_destroy(&attr);
    return err;
}

int cp_job_run(struct cp_job *job, uint64_t budget_ns)
{
    if (!job->fn || job->error)
        return -1;
    size_t next = atomic_load(&job->next);
    if (next >= job->end)
        return 1;
    uint64_t start = cp_now_ns();
    job->deadline = start + budget_ns < start ? UINT64_MAX : start + budget_ns;

    /* No more threads than pages left to share. */
    size_t pages = (job->end - next + SPLIT_ALIGN - 1) / SPLIT_ALIGN;
    int extra = job->threads - 1;
    if ((size_t)extra > pages - 1)
        extra = (int)(pages - 1);
    pthread_t tids[CP_MAX_THREADS];
    int started = 0;
    if (extra > 0) {
        int err = start_workers(job, tids, extra, &started);
        if (err) {
            /* Report it: running with fewer threads than asked, silently,
             * is how a limit (RLIMIT_NPROC, RLIMIT_AS) goes unnoticed. */
            job->error = err;
            atomic_store(&job->stop, 1);
        }
    }
    if (!job->error && !(started && cp_inject_hit(CP_INJECT_CALLER_IDLE)))
        run_units(job);
    for (int i = 0; i < started; i++)
        pthread_join(tids[i], NULL);
    if (job->error)
        return -1;
    return atomic_load(&job->next) >= job->end;
}

int cp_job_error(const struct cp_job *job)
{
    return job->error;
}

size_t cp_job_total(const struct cp_job *job)
{
    return job->end - job->phase;
}

size_t cp_job_extents(const struct cp_job *job)
{
    return job->n;
}

void cp_job_free(struct cp_job *job)
{
    if (!job)
        return;
    free(job->ext);
    free(job->cum);
    free(job);
}
