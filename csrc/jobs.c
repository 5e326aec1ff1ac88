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
#include <time.h>

#include "clearpages.h"

/* Unit boundaries fall on this alignment in the address space, so threads
 * split work on page boundaries and streaming routines see aligned lines. */
#define SPLIT_ALIGN 4096u

struct extent {
    char *addr;
    size_t len;
};

struct item {           /* sort record: offset from a base, length */
    uint64_t key;
    uint64_t len;
};

struct cp_job {
    struct extent *ext;
    size_t *cum;        /* cum[i]: position of extent i in the byte range */
    size_t n;
    size_t phase;       /* position of the first byte (its page offset) */
    size_t end;         /* phase + total */
    cp_clear_fn fn;
    size_t unit;
    size_t nunits;
    int threads;
    int fence;
    uint64_t deadline;
    atomic_size_t next_unit;
    atomic_size_t done;
};

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* ---- sort and merge ---------------------------------------------------- */

/* LSD radix sort by key, 11-bit digits, skipping digits all keys share. */
static void sort_items(struct item *a, struct item *tmp, size_t n)
{
    if (n < 2)
        return;
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
static struct cp_job *job_from_extents(struct extent *ext, size_t m)
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
    return job;
}

/* Build the job from items (base + key, len): sort, drop empties, merge
 * touching or overlapping ones.  Frees items. */
static struct cp_job *job_from_items(char *base, struct item *items, size_t n)
{
    struct item *tmp = malloc((n ? n : 1) * sizeof(*tmp));
    struct extent *ext = malloc((n ? n : 1) * sizeof(*ext));
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
    struct extent *ext = malloc((n ? n : 1) * sizeof(*ext));
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
    job->nunits = (job->end + unit - 1) / unit;   /* phase < unit */
    return 0;
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

static void run_units(struct cp_job *job)
{
    for (;;) {
        size_t u = atomic_fetch_add(&job->next_unit, 1);
        if (u >= job->nunits)
            break;
        size_t lo = u * job->unit, hi = lo + job->unit;
        if (lo < job->phase)
            lo = job->phase;
        if (hi > job->end)
            hi = job->end;
        clear_range(job, lo, hi);
        atomic_fetch_add(&job->done, hi - lo);
        if (now_ns() >= job->deadline)
            break;
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

int cp_job_run(struct cp_job *job, uint64_t budget_ns)
{
    if (!job->fn)
        return -1;
    if (atomic_load(&job->next_unit) >= job->nunits)
        return 1;
    job->deadline = now_ns() + budget_ns;

    size_t left = job->nunits - atomic_load(&job->next_unit);
    int extra = job->threads - 1;
    if ((size_t)extra > left - 1)
        extra = (int)(left - 1);
    pthread_t tids[CP_MAX_THREADS];
    int started = 0;
    if (extra > 0) {
        /* Signals stay with the caller's thread, which Python watches. */
        sigset_t all, old;
        sigfillset(&all);
        pthread_sigmask(SIG_BLOCK, &all, &old);
        for (; started < extra; started++)
            if (pthread_create(&tids[started], NULL, worker, job) != 0)
                break;      /* run with the threads we have */
        pthread_sigmask(SIG_SETMASK, &old, NULL);
    }
    run_units(job);
    for (int i = 0; i < started; i++)
        pthread_join(tids[i], NULL);
    return atomic_load(&job->next_unit) >= job->nunits;
}

size_t cp_job_total(const struct cp_job *job)
{
    return job->end - job->phase;
}

size_t cp_job_done(const struct cp_job *job)
{
    return atomic_load(&((struct cp_job *)job)->done);
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
