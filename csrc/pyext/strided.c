/*
 * The bytes a strided layout covers, as few extents as they make.
 *
 * A layout (a shape, strides, an item size) names elements; what a clear
 * writes and a scan reads is the union of their bytes.  Elements may share
 * bytes: a stride of 0 (torch's expand, numpy's broadcast_to) repeats one
 * element, and strides smaller than what they step over (sliding windows)
 * overlap.  So the union is built, never a list of elements: a dimension of
 * stride 0 adds no bytes and is dropped, and a stride-0 tensor of 2**61
 * elements is the one element it stores.  Every size is overflow-checked,
 * and a layout that reaches beyond the address space is refused: its
 * producer describes memory that cannot exist.
 *
 * How: with negative strides flipped (the set of bytes is the same) and the
 * dimensions ordered by stride, the innermost ones that continue a
 * contiguous block merge into it (stride <= the block's length).  The rest
 * each repeat the pattern below them; where a stride is at least that
 * pattern's span, the copies are disjoint (an ordinary strided view) and
 * are listed by an odometer; where it is not, the copies interleave, and
 * the pattern of those dimensions is drawn on a bitmap of the span (one bit
 * per unit of the strides' greatest common divisor), shifted and OR-ed in
 * O(log n) steps per dimension, then read back as runs.
 *
 * No Python API: the caller maps a status to its exception.  The arrays of
 * the result come from PyMem_Malloc (the caller holds the GIL) and are
 * freed by strided_runs_free.
 */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fast.h"

/* No described byte lies at or above this address: user space on x86-64 is
 * below 2**47 (2**56 with five-level page tables). */
#define ADDRESS_LIMIT ((uint64_t)1 << 56)

struct dim {
    uint64_t n, stride;         /* n >= 2, stride >= 1, in bytes */
    uint64_t span;              /* of the pattern below this dimension */
    uint64_t idx;               /* the odometer's digit */
};

static int by_stride(const void *a, const void *b)
{
    uint64_t x = ((const struct dim *)a)->stride, y = ((const struct dim *)b)->stride;
    return (x > y) - (x < y);
}

static uint64_t gcd(uint64_t a, uint64_t b)
{
    while (b) {
        uint64_t t = a % b;
        a = b;
        b = t;
    }
    return a;
}

/* The most bytes of bookkeeping (run lists, bitmaps) one layout may take:
 * half the machine's memory.  More is refused at once as MemoryError rather
 * than asked of malloc, which may grant it lazily and leave the writes to
 * the OOM killer. */
static uint64_t bookkeeping_max(void)
{
    static uint64_t max;
    if (!max) {
        long pages = sysconf(_SC_PHYS_PAGES), size = sysconf(_SC_PAGESIZE);
        max = pages > 0 && size > 0 ? (uint64_t)pages * (uint64_t)size / 2 : (uint64_t)1 << 30;
    }
    return max;
}

/* bits |= bits << shift, over nwords words (bits shifted past the end are
 * dropped).  From the top down, so each word read is not yet written. */
static void or_shifted(uint64_t *bits, size_t nwords, uint64_t shift)
{
    uint64_t q = shift / 64, r = shift % 64;
    if (q >= nwords)
        return;
    for (size_t w = nwords - 1; w >= q; w--) {
        uint64_t v = bits[w - q] << r;
        if (r && w > q)
            v |= bits[w - q - 1] >> (64 - r);
        bits[w] |= v;
        if (w == 0)
            break;
    }
}

/* The union of n copies of the pattern, each `shift` bits past the last:
 * windows of 1, 2, 4, ... copies doubled, then the last window placed to
 * end at copy n - 1 (it overlaps the first, which is harmless). */
static void repeat(uint64_t *bits, size_t nwords, uint64_t n, uint64_t shift)
{
    uint64_t m = 1;
    while (m <= n / 2) {
        or_shifted(bits, nwords, m * shift);
        m *= 2;
    }
    if (m < n)
        or_shifted(bits, nwords, (n - m) * shift);
}

/* The runs of set bits among the first nbits of bits, each scaled by unit
 * bytes: counted when offs is NULL, else stored. */
static size_t bit_runs(const uint64_t *bits, uint64_t nbits, uint64_t unit, uint64_t *offs,
                       uint64_t *lens)
{
    size_t k = 0;
    uint64_t i = 0;
    while (i < nbits) {
        /* the next set bit from i */
        uint64_t w = i / 64, word = bits[w] & (~(uint64_t)0 << (i % 64));
        while (!word && ++w * 64 < nbits)
            word = bits[w];
        if (!word)
            break;
        uint64_t start = w * 64 + (uint64_t)__builtin_ctzll(word);
        if (start >= nbits)
            break;
        /* the next clear bit from start */
        w = start / 64;
        word = ~bits[w] & (~(uint64_t)0 << (start % 64));
        while (!word && ++w * 64 < nbits)
            word = ~bits[w];
        uint64_t stop = word ? w * 64 + (uint64_t)__builtin_ctzll(word) : nbits;
        if (stop > nbits)
            stop = nbits;
        if (offs) {
            offs[k] = start * unit;
            lens[k] = (stop - start) * unit;
        }
        k++;
        i = stop;
    }
    return k;
}

/* The pattern of dims[0..count) over a first block of `block` bytes at
 * offset 0, spanning `span` bytes: its runs (offsets from the pattern's
 * start, lengths), from a bitmap.  0 or STRIDED_NO_MEMORY. */
static int interleaved(const struct dim *dims, int count, uint64_t block, uint64_t span,
                       uint64_t **offs, uint64_t **lens, size_t *nruns)
{
    uint64_t unit = block;
    for (int j = 0; j < count; j++)
        unit = gcd(unit, dims[j].stride);
    uint64_t nbits = span / unit, nwords = nbits / 64 + 1;
    if (nwords > bookkeeping_max() / 8)
        return STRIDED_NO_MEMORY;
    uint64_t *bits = PyMem_Calloc((size_t)nwords, 8);
    if (!bits)
        return STRIDED_NO_MEMORY;
    uint64_t first = block / unit;       /* bits [0, first): the first block */
    for (uint64_t w = 0; w < first / 64; w++)
        bits[w] = ~(uint64_t)0;
    if (first % 64)
        bits[first / 64] |= ((uint64_t)1 << (first % 64)) - 1;
    for (int j = 0; j < count; j++)
        repeat(bits, (size_t)nwords, dims[j].n, dims[j].stride / unit);
    size_t k = bit_runs(bits, nbits, unit, NULL, NULL);
    *offs = PyMem_Malloc(k * sizeof **offs);
    *lens = PyMem_Malloc(k * sizeof **lens);
    if (!*offs || !*lens) {
        PyMem_Free(bits);
        return STRIDED_NO_MEMORY;
    }
    bit_runs(bits, nbits, unit, *offs, *lens);
    PyMem_Free(bits);
    *nruns = k;
    return 0;
}

void strided_runs_free(struct strided_runs *r)
{
    PyMem_Free(r->addrs);
    PyMem_Free(r->lens);
    r->addrs = NULL;
    r->lens = NULL;
    r->nruns = 0;
}

int strided_runs(const void *data, uint64_t offset, int ndim, const int64_t *shape,
                 const int64_t *strides, int64_t unit, uint64_t item,
                 struct strided_runs *out)
{
    memset(out, 0, sizeof *out);
    int empty = 0;
    for (int i = 0; i < ndim; i++) {
        if (shape[i] < 0)
            return STRIDED_NEGATIVE;
        empty |= shape[i] == 0;
    }
    uint64_t start;
    int wraps = __builtin_add_overflow((uint64_t)(uintptr_t)data, offset, &start);
    out->base = (char *)(uintptr_t)start;
    if (empty)
        return STRIDED_OK;              /* no element: nothing is touched */
    if (!data)
        return STRIDED_NULL;            /* refused before any work its shape asks */
    if (wraps)
        return STRIDED_TOO_LARGE;
    if (item == 0 || item >= ADDRESS_LIMIT)
        return STRIDED_TOO_LARGE;

    struct dim few[16], *dims = ndim <= 16 ? few : PyMem_Malloc((size_t)ndim * sizeof *dims);
    if (!dims)
        return STRIDED_NO_MEMORY;
    int status = STRIDED_TOO_LARGE, k = 0;
    uint64_t *offs = NULL, *lens = NULL;
    /* Dimensions that add bytes: more than one element and a stride. */
    uint64_t below = 0;                 /* how far negative strides reach down */
    int64_t c_order = (int64_t)item;    /* the stride of C order (strides NULL) */
    for (int i = ndim - 1; i >= 0; i--) {
        int64_t n = shape[i], s;
        if (strides) {
            /* A dimension of one element, or of stride 0, adds no bytes
             * whatever its stride says. */
            if (n == 1 || strides[i] == 0)
                continue;
            if (__builtin_mul_overflow(strides[i], unit, &s))
                goto done;
        } else {
            s = c_order;
            if (__builtin_mul_overflow(c_order, n, &c_order))
                goto done;
            if (n == 1)
                continue;
        }
        uint64_t mag = s < 0 ? (uint64_t)0 - (uint64_t)s : (uint64_t)s, reach;
        if (__builtin_mul_overflow(mag, (uint64_t)(n - 1), &reach) || reach >= ADDRESS_LIMIT)
            goto done;
        if (s < 0)
            below += reach;             /* both below 2**56: no overflow */
        if (below >= ADDRESS_LIMIT)
            goto done;
        dims[k] = (struct dim){(uint64_t)n, mag, 0, 0};
        k++;
    }
    if (start < below || start - below >= ADDRESS_LIMIT)
        goto done;
    start -= below;
    qsort(dims, (size_t)k, sizeof *dims, by_stride);

    /* The innermost dimensions that continue one block. */
    uint64_t block = item;
    int i = 0;
    for (; i < k && dims[i].stride <= block; i++) {
        block += dims[i].stride * (dims[i].n - 1);
        if (block >= ADDRESS_LIMIT)
            goto done;
    }
    /* The spans above it; the last dimension whose copies interleave. */
    uint64_t span = block;
    int last = i - 1;
    for (int j = i; j < k; j++) {
        dims[j].span = span;
        if (dims[j].stride < span)
            last = j;
        span += dims[j].stride * (dims[j].n - 1);
        if (span >= ADDRESS_LIMIT)
            goto done;
    }
    if (start + span > ADDRESS_LIMIT)
        goto done;
    if (i == k) {                       /* one extent */
        out->base = (char *)(uintptr_t)start;
        out->len = span;
        status = STRIDED_OK;
        goto done;
    }
    /* The pattern that repeats: the block, or the interleaved dimensions. */
    size_t inner = 1;
    uint64_t inner_span = block, one_off = 0;
    if (last >= i) {
        inner_span = dims[last].span + dims[last].stride * (dims[last].n - 1);
        status = interleaved(dims + i, last + 1 - i, block, inner_span, &offs, &lens, &inner);
        if (status < 0)
            goto done;
        status = STRIDED_TOO_LARGE;
    } else {
        offs = &one_off;
        lens = &block;
    }
    /* Copies of it along the outer dimensions, each disjoint: the runs. */
    int outer = last >= i ? last + 1 : i;
    uint64_t count = inner;
    for (int j = outer; j < k; j++)
        if (__builtin_mul_overflow(count, dims[j].n, &count))
            goto no_memory;
    if (count > bookkeeping_max() / (sizeof(char *) + sizeof(size_t)))
        goto no_memory;
    out->addrs = PyMem_Malloc((size_t)count * sizeof(char *));
    out->lens = PyMem_Malloc((size_t)count * sizeof(size_t));
    if (!out->addrs || !out->lens)
        goto no_memory;
    uint64_t at = 0;
    size_t m = 0;
    for (;;) {
        for (size_t r = 0; r < inner; r++) {
            uint64_t a = start + at + offs[r];
            if (m && (uint64_t)(uintptr_t)out->addrs[m - 1] + out->lens[m - 1] == a) {
                out->lens[m - 1] += lens[r];        /* touches the last: one run */
            } else {
                out->addrs[m] = (char *)(uintptr_t)a;
                out->lens[m++] = lens[r];
            }
            out->len += lens[r];
        }
        int j = outer;                  /* the odometer, innermost first */
        for (; j < k; j++) {
            at += dims[j].stride;
            if (++dims[j].idx < dims[j].n)
                break;
            at -= dims[j].stride * dims[j].n;
            dims[j].idx = 0;
        }
        if (j == k)
            break;
    }
    out->nruns = m;
    if (m == 1) {                       /* it all touched: one extent */
        out->base = out->addrs[0];
        strided_runs_free(out);
    }
    status = STRIDED_OK;
    goto done;

no_memory:
    strided_runs_free(out);
    status = STRIDED_NO_MEMORY;
done:
    if (offs != &one_off) {
        PyMem_Free(offs);
        PyMem_Free(lens);
    }
    if (dims != few)
        PyMem_Free(dims);
    if (status < 0)
        out->len = 0;
    return status;
}
