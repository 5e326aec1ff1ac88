/*
 * Zero detection at memory speed.
 *
 * Most buffers that are not zero say so in their first, last or middle
 * byte, so those three are read first; a buffer that passes them is read
 * whole, with as few tests as possible: vector loads are OR'ed together a
 * 256-byte block at a time and the accumulated value is tested once per
 * block (a test and a branch per load would halve the speed in cache).
 * The unaligned head and tail are one unaligned load each, overlapping the
 * aligned blocks; every load lies inside the buffer, so a buffer that ends
 * at the end of a mapping never faults.  (The shape follows QEMU's
 * buffer_is_zero, which measured AVX-512 not worth its own variant: the
 * early checks decide most buffers, and memory bandwidth the rest.)
 *
 * Large buffers may be split between threads, which share a flag: the
 * first to see a nonzero byte stops the others within one block.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "clearpages.h"
#include "scan.h"

#if defined(__x86_64__) && !defined(CP_PORTABLE)
#include <immintrin.h>
#define CP_SCAN_VECTORS 1
#endif

/* Bytes a thread scans between two looks at the shared flag. */
#define SHARE_BLOCK (256u << 10)
/* A thread is worth starting for at least this much of a buffer. */
#define THREAD_MIN (4u << 20)

static const char *const names[CP_SCAN_COUNT] = {
    [CP_SCAN_WORDS] = "words",
    [CP_SCAN_SSE2] = "sse2",
    [CP_SCAN_AVX2] = "avx2",
};

const char *cp_scan_name(int variant)
{
    return variant >= 0 && variant < CP_SCAN_COUNT ? names[variant] : NULL;
}

uint64_t cp_scan_requires(int variant)
{
    switch (variant) {
    case CP_SCAN_SSE2:
        return 1ull << CP_FEAT_SSE2;
    case CP_SCAN_AVX2:
        return 1ull << CP_FEAT_AVX2;
    default:
        return 0;
    }
}

int cp_scan_built(int variant)
{
#ifdef CP_SCAN_VECTORS
    return variant >= 0 && variant < CP_SCAN_COUNT;
#else
    return variant == CP_SCAN_WORDS;
#endif
}

/* ---- the scanners: each takes len >= 8, the three bytes already seen ---- */

static inline uint64_t load64(const unsigned char *p)
{
    uint64_t v;
    memcpy(&v, p, 8);
    return v;
}

/* 8-byte loads: whole words from the start, then one ending at the end. */
static int zero_words(const unsigned char *p, size_t len)
{
    const unsigned char *end = p + len, *last = end - 8;
    uint64_t acc = load64(last);
    /* Four words per test: the test is what costs, not the load. */
    while (p + 32 <= last) {
        acc |= load64(p) | load64(p + 8) | load64(p + 16) | load64(p + 24);
        if (acc)
            return 0;
        p += 32;
    }
    for (; p < last; p += 8)
        acc |= load64(p);
    return acc == 0;
}

#ifdef CP_SCAN_VECTORS

/* 16-byte vectors.  Blocks: a = the first 16-byte boundary after the head
 * load, e = the start of the aligned vector holding the last byte.  The
 * aligned vectors [a, e) are OR'ed sixteen at a time (256 bytes, one test);
 * the fewer than sixteen left over are covered by the fifteen ending at e,
 * loaded first: they overlap the loop's, and lie inside the buffer when
 * len >= 256 (e >= end - 16, so e - 240 >= end - 256 >= p).  The unaligned
 * loads at p and end - 16 cover [p, a) and [e, end). */
__attribute__((target("sse2")))
static int zero_sse2(const unsigned char *p, size_t len)
{
    const unsigned char *end = p + len;
    if (len < 32)
        return zero_words(p, len);
    __m128i acc = _mm_or_si128(_mm_loadu_si128((const __m128i *)p),
                               _mm_loadu_si128((const __m128i *)(end - 16)));
    const __m128i *a = (const __m128i *)(((uintptr_t)p + 16) & ~(uintptr_t)15);
    const __m128i *e = (const __m128i *)(((uintptr_t)end - 1) & ~(uintptr_t)15);
    const __m128i zero = _mm_setzero_si128();
    if (len < 256) {
        for (; a < e; a++)
            acc = _mm_or_si128(acc, *a);
        return _mm_movemask_epi8(_mm_cmpeq_epi8(acc, zero)) == 0xffff;
    }
    __m128i w = e[-1];
    for (int i = 2; i <= 15; i++)
        w = _mm_or_si128(w, e[-i]);
    acc = _mm_or_si128(acc, w);
    for (; a + 16 <= e; a += 16) {
        if (_mm_movemask_epi8(_mm_cmpeq_epi8(acc, zero)) != 0xffff)
            return 0;
        __m128i x = _mm_or_si128(_mm_or_si128(a[0], a[1]), _mm_or_si128(a[2], a[3]));
        __m128i y = _mm_or_si128(_mm_or_si128(a[4], a[5]), _mm_or_si128(a[6], a[7]));
        __m128i z = _mm_or_si128(_mm_or_si128(a[8], a[9]), _mm_or_si128(a[10], a[11]));
        __m128i t = _mm_or_si128(_mm_or_si128(a[12], a[13]), _mm_or_si128(a[14], a[15]));
        acc = _mm_or_si128(_mm_or_si128(x, y), _mm_or_si128(z, t));
    }
    return _mm_movemask_epi8(_mm_cmpeq_epi8(acc, zero)) == 0xffff;
}

/* 32-byte vectors, the same shape: eight aligned loads per 256-byte block;
 * the seven ending at e lie inside the buffer when len >= 256. */
__attribute__((target("avx2")))
static int zero_avx2(const unsigned char *p, size_t len)
{
    const unsigned char *end = p + len;
    if (len < 256)
        return zero_sse2(p, len);
    __m256i acc = _mm256_or_si256(_mm256_loadu_si256((const __m256i *)p),
                                  _mm256_loadu_si256((const __m256i *)(end - 32)));
    const __m256i *a = (const __m256i *)(((uintptr_t)p + 32) & ~(uintptr_t)31);
    const __m256i *e = (const __m256i *)(((uintptr_t)end - 1) & ~(uintptr_t)31);
    __m256i x = _mm256_or_si256(_mm256_or_si256(e[-1], e[-2]), _mm256_or_si256(e[-3], e[-4]));
    __m256i y = _mm256_or_si256(_mm256_or_si256(e[-5], e[-6]), e[-7]);
    acc = _mm256_or_si256(acc, _mm256_or_si256(x, y));
    const __m256i zero = _mm256_setzero_si256();
    for (; a + 8 <= e; a += 8) {
        /* vpcmpeqb + vpmovmskb pair better with the loads than vptest. */
        if ((unsigned)_mm256_movemask_epi8(_mm256_cmpeq_epi8(acc, zero)) != 0xffffffffu) {
            _mm256_zeroupper();
            return 0;
        }
        x = _mm256_or_si256(_mm256_or_si256(a[0], a[1]), _mm256_or_si256(a[2], a[3]));
        y = _mm256_or_si256(_mm256_or_si256(a[4], a[5]), _mm256_or_si256(a[6], a[7]));
        acc = _mm256_or_si256(x, y);
    }
    int r = _mm256_testz_si256(acc, acc);
    _mm256_zeroupper();
    return r;
}

/* nonzero_pages' inner loop: whole pages of a multiple of 256 bytes, one
 * OR-reduction per page (eight 32-byte loads per 256-byte block, OR'ed
 * into two accumulators) and one test per page, the index appended when it
 * is nonzero.  No per-page probe bytes, call or head and tail loads: on a
 * mostly zero buffer the loop is the loads alone, and runs at the speed
 * of a plain is_zero.  Returns how many indices it wrote. */
__attribute__((target("avx2")))
static size_t pages_avx2(const unsigned char *p, size_t pages, size_t page_size,
                         int64_t first, int64_t *out)
{
    size_t found = 0;
    for (size_t i = 0; i < pages; i++, p += page_size) {
        const __m256i *v = (const __m256i *)p, *stop = (const __m256i *)(p + page_size);
        __m256i x = _mm256_setzero_si256(), y = _mm256_setzero_si256();
        for (; v < stop; v += 8) {
            x = _mm256_or_si256(x, _mm256_or_si256(
                    _mm256_or_si256(_mm256_loadu_si256(v), _mm256_loadu_si256(v + 1)),
                    _mm256_or_si256(_mm256_loadu_si256(v + 2), _mm256_loadu_si256(v + 3))));
            y = _mm256_or_si256(y, _mm256_or_si256(
                    _mm256_or_si256(_mm256_loadu_si256(v + 4), _mm256_loadu_si256(v + 5)),
                    _mm256_or_si256(_mm256_loadu_si256(v + 6), _mm256_loadu_si256(v + 7))));
        }
        x = _mm256_or_si256(x, y);
        out[found] = first + (int64_t)i;
        found += !_mm256_testz_si256(x, x);
    }
    _mm256_zeroupper();
    return found;
}

/* The same with 16-byte loads. */
__attribute__((target("sse2")))
static size_t pages_sse2(const unsigned char *p, size_t pages, size_t page_size,
                         int64_t first, int64_t *out)
{
    size_t found = 0;
    const __m128i zero = _mm_setzero_si128();
    for (size_t i = 0; i < pages; i++, p += page_size) {
        const __m128i *v = (const __m128i *)p, *stop = (const __m128i *)(p + page_size);
        __m128i x = zero, y = zero;
        for (; v < stop; v += 8) {
            x = _mm_or_si128(x, _mm_or_si128(
                    _mm_or_si128(_mm_loadu_si128(v), _mm_loadu_si128(v + 1)),
                    _mm_or_si128(_mm_loadu_si128(v + 2), _mm_loadu_si128(v + 3))));
            y = _mm_or_si128(y, _mm_or_si128(
                    _mm_or_si128(_mm_loadu_si128(v + 4), _mm_loadu_si128(v + 5)),
                    _mm_or_si128(_mm_loadu_si128(v + 6), _mm_loadu_si128(v + 7))));
        }
        x = _mm_or_si128(x, y);
        out[found] = first + (int64_t)i;
        found += _mm_movemask_epi8(_mm_cmpeq_epi8(x, zero)) != 0xffff;
    }
    return found;
}

#endif

/* The same with 8-byte loads (page_size a multiple of 32 here). */
static size_t pages_words(const unsigned char *p, size_t pages, size_t page_size,
                          int64_t first, int64_t *out)
{
    size_t found = 0;
    for (size_t i = 0; i < pages; i++, p += page_size) {
        uint64_t x = 0, y = 0;
        for (size_t off = 0; off < page_size; off += 32) {
            x |= load64(p + off) | load64(p + off + 8);
            y |= load64(p + off + 16) | load64(p + off + 24);
        }
        out[found] = first + (int64_t)i;
        found += (x | y) != 0;
    }
    return found;
}

typedef int (*zero_fn)(const unsigned char *, size_t);
typedef size_t (*pages_fn)(const unsigned char *, size_t, size_t, int64_t, int64_t *);

static pages_fn page_scanner(int variant)
{
#ifdef CP_SCAN_VECTORS
    if (variant == CP_SCAN_AVX2)
        return pages_avx2;
    if (variant == CP_SCAN_SSE2)
        return pages_sse2;
#endif
    (void)variant;
    return pages_words;
}

/* The page size the tight loops take: a multiple of their 256-byte block. */
#define PAGES_GRAIN 256u

static zero_fn scanner(int variant)
{
#ifdef CP_SCAN_VECTORS
    if (variant == CP_SCAN_AVX2)
        return zero_avx2;
    if (variant == CP_SCAN_SSE2)
        return zero_sse2;
#endif
    (void)variant;
    return zero_words;
}

/* The whole test for one piece: three bytes, then the scanner. */
static inline int zero_piece(zero_fn fn, const unsigned char *p, size_t len)
{
    if (len == 0)
        return 1;
    if (p[0] | p[len - 1] | p[len / 2])
        return 0;
    if (len <= 3)
        return 1;
    if (len < 8) {
        uint32_t a, b;
        memcpy(&a, p, 4);
        memcpy(&b, p + len - 4, 4);
        return (a | b) == 0;
    }
    return fn(p, len);
}

/* ---- threads ------------------------------------------------------------ */

struct share {
    zero_fn fn;
    pages_fn pages;             /* nonzero_pages: NULL for a page size the loops do not take */
    const unsigned char *p;
    size_t len;
    atomic_int *nonzero;        /* shared: set by whoever sees one */
    /* nonzero_pages: the first page index of this share and its output */
    size_t page_size;
    int64_t first_page;
    int64_t *out;               /* the whole output; a share writes from first_page */
    size_t found;
};

static void *scan_share(void *arg)
{
    struct share *s = arg;
    for (size_t off = 0; off < s->len; off += SHARE_BLOCK) {
        if (atomic_load_explicit(s->nonzero, memory_order_relaxed))
            return NULL;
        size_t n = s->len - off < SHARE_BLOCK ? s->len - off : SHARE_BLOCK;
        if (!zero_piece(s->fn, s->p + off, n)) {
            atomic_store_explicit(s->nonzero, 1, memory_order_relaxed);
            return NULL;
        }
    }
    return NULL;
}

static void *pages_share(void *arg)
{
    struct share *s = arg;
    size_t found = 0, off = 0;
    int64_t page = s->first_page;
    if (s->pages) {
        size_t whole = s->len / s->page_size;
        found = s->pages(s->p, whole, s->page_size, page, s->out + s->first_page);
        off = whole * s->page_size;
        page += (int64_t)whole;
    }
    for (; off < s->len; off += s->page_size, page++) {
        size_t n = s->len - off < s->page_size ? s->len - off : s->page_size;
        if (!zero_piece(s->fn, s->p + off, n))
            s->out[s->first_page + (int64_t)found++] = page;
    }
    s->found = found;
    return NULL;
}

/* Run work over `threads` shares of [p, p + len) cut on multiples of
 * `grain` bytes; shares[0] runs on the calling thread, as does any share
 * whose thread did not start.  Returns how many shares were used. */
static int run_shares(struct share *shares, int threads, const unsigned char *p, size_t len,
                      size_t grain, void *(*work)(void *))
{
    size_t units = (len + grain - 1) / grain;
    if ((size_t)threads > units)
        threads = (int)units;
    if (threads < 1)
        threads = 1;
    pthread_t tids[CP_MAX_THREADS];
    int started[CP_MAX_THREADS];
    size_t unit = 0;
    for (int i = 0; i < threads; i++) {
        size_t take = units / (size_t)threads + ((size_t)i < units % (size_t)threads);
        size_t lo = unit * grain, hi = (unit + take) * grain;
        if (hi > len)
            hi = len;
        shares[i].p = p + lo;
        shares[i].len = hi - lo;
        shares[i].first_page = (int64_t)unit;
        unit += take;
    }
    for (int i = 1; i < threads; i++)
        started[i] = pthread_create(&tids[i], NULL, work, &shares[i]) == 0;
    work(&shares[0]);
    for (int i = 1; i < threads; i++) {
        if (started[i])
            pthread_join(tids[i], NULL);
        else
            work(&shares[i]);
    }
    return threads;
}

static int clamp_threads(int threads, size_t len)
{
    size_t most = len / THREAD_MIN;
    if (threads > CP_MAX_THREADS)
        threads = CP_MAX_THREADS;
    if ((size_t)threads > most)
        threads = (int)most;
    return threads < 1 ? 1 : threads;
}

/* ---- the calls ------------------------------------------------------------ */

int cp_scan_is_zero(int variant, const void *buf, size_t len, int threads)
{
    const unsigned char *p = buf;
    zero_fn fn = scanner(variant);
    if (len == 0)
        return 1;
    if (p[0] | p[len - 1] | p[len / 2])
        return 0;
    threads = clamp_threads(threads, len);
    if (threads == 1)
        return zero_piece(fn, p, len);
    atomic_int nonzero;
    atomic_init(&nonzero, 0);
    struct share shares[CP_MAX_THREADS];
    for (int i = 0; i < threads; i++)
        shares[i] = (struct share){.fn = fn, .nonzero = &nonzero};
    run_shares(shares, threads, p, len, SHARE_BLOCK, scan_share);
    return !atomic_load(&nonzero);
}

size_t cp_scan_nonzero_pages(int variant, const void *buf, size_t len,
                             size_t page_size, int64_t *out, int threads)
{
    const unsigned char *p = buf;
    zero_fn fn = scanner(variant);
    if (len == 0 || page_size == 0)
        return 0;
    threads = clamp_threads(threads, len);
    struct share shares[CP_MAX_THREADS];
    for (int i = 0; i < threads; i++)
        shares[i] = (struct share){.fn = fn, .page_size = page_size, .out = out,
                                   .pages = page_size % PAGES_GRAIN ? NULL : page_scanner(variant)};
    int used = run_shares(shares, threads, p, len, page_size, pages_share);
    /* Share i wrote at out + its first page; close the gaps. */
    size_t n = 0;
    for (int i = 0; i < used; i++) {
        size_t first = (size_t)shares[i].first_page;
        if (n != first && shares[i].found)
            memmove(out + n, out + first, shares[i].found * sizeof(*out));
        n += shares[i].found;
    }
    return n;
}
