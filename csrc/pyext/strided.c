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
 * O(log n) steps per dimension, then read back as extents.
 *
 * No Python API: the caller maps a status to its exception.  The arrays of
 * the result come from PyMem_Malloc (the caller holds the GIL) and are
 * freed by strided_extents_free.
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
 * offset 0, spanning `span` bytes: its extents (offsets from the pattern's
 * start, lengths), from a bitmap.  0 or STRIDED_NO_MEMORY. */
static int interleaved(const struct dim *dims, int count, uint64_t block, uint64_t span,
                       uint64_t **offs, uint64_t **lens, size_t *nextents)
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
    *nextents = k;
    return 0;
}

void strided_extents_free(struct strided_extents *r)
{
    PyMem_Free(r->addrs);
    PyMem_Free(r->lens);
    r->addrs = NULL;
    r->lens = NULL;
    r->nextents = 0;
}

/* A layout made ready to walk: the extents are the `inner` ones (offs, lens)
 * of one pattern, repeated by an odometer over dims[outer..k) from start;
 * or, with k == outer and the pattern one block, one extent. */
struct layout {
    uint64_t start;             /* the lowest byte any element covers */
    uint64_t len;               /* 0: no element */
    struct dim few[16], *dims;
    int k, outer;
    size_t inner;
    uint64_t *offs, *lens;      /* the pattern's extents */
    uint64_t one_off, block;    /* the pattern of one block (offs, lens point here) */
    uint64_t count;             /* copies of the pattern's extents in all */
};

static void layout_free(struct layout *L)
{
    if (L->offs != &L->one_off) {
        PyMem_Free(L->offs);
        PyMem_Free(L->lens);
    }
    if (L->dims != L->few)
        PyMem_Free(L->dims);
    L->dims = L->few;
    L->offs = &L->one_off;
}

/* Flip, order and merge the dimensions (see the top of this file); a
 * negative status on failure, with nothing held (layout_free is harmless
 * then too). */
static int layout_of(const void *data, uint64_t offset, int ndim, const int64_t *shape,
                     const int64_t *strides, int64_t unit, uint64_t item, struct layout *L)
{
    memset(L, 0, sizeof *L);
    L->dims = L->few;
    L->offs = &L->one_off;
    L->lens = &L->block;
    int empty = 0;
    for (int i = 0; i < ndim; i++) {
        if (shape[i] < 0)
            return STRIDED_NEGATIVE;
        empty |= shape[i] == 0;
    }
    uint64_t start;
    int wraps = __builtin_add_overflow((uint64_t)(uintptr_t)data, offset, &start);
    L->start = start;
    if (empty)
        return STRIDED_OK;              /* no element: nothing is touched */
    if (!data)
        return STRIDED_NULL;            /* refused before any work its shape asks */
    if (wraps)
        return STRIDED_TOO_LARGE;
    if (item == 0 || item >= ADDRESS_LIMIT)
        return STRIDED_TOO_LARGE;

    struct dim *dims = ndim <= 16 ? L->few : PyMem_Malloc((size_t)ndim * sizeof *dims);
    if (!dims)
        return STRIDED_NO_MEMORY;
    L->dims = dims;
    int status = STRIDED_TOO_LARGE, k = 0;
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
                goto fail;
        } else {
            s = c_order;
            if (__builtin_mul_overflow(c_order, n, &c_order))
                goto fail;
            if (n == 1)
                continue;
        }
        uint64_t mag = s < 0 ? (uint64_t)0 - (uint64_t)s : (uint64_t)s, reach;
        if (__builtin_mul_overflow(mag, (uint64_t)(n - 1), &reach) || reach >= ADDRESS_LIMIT)
            goto fail;
        if (s < 0)
            below += reach;             /* both below 2**56: no overflow */
        if (below >= ADDRESS_LIMIT)
            goto fail;
        dims[k] = (struct dim){(uint64_t)n, mag, 0, 0};
        k++;
    }
    if (start < below || start - below >= ADDRESS_LIMIT)
        goto fail;
    start -= below;
    qsort(dims, (size_t)k, sizeof *dims, by_stride);

    /* The innermost dimensions that continue one block. */
    uint64_t block = item;
    int i = 0;
    for (; i < k && dims[i].stride <= block; i++) {
        block += dims[i].stride * (dims[i].n - 1);
        if (block >= ADDRESS_LIMIT)
            goto fail;
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
            goto fail;
    }
    if (start + span > ADDRESS_LIMIT)
        goto fail;
    L->start = start;
    L->block = block;
    L->k = L->outer = k;
    L->inner = 1;
    L->count = 1;
    if (i == k) {                       /* one extent */
        L->block = L->len = span;
        return STRIDED_OK;
    }
    /* The pattern that repeats: the block, or the interleaved dimensions. */
    if (last >= i) {
        uint64_t inner_span = dims[last].span + dims[last].stride * (dims[last].n - 1);
        status = interleaved(dims + i, last + 1 - i, block, inner_span, &L->offs, &L->lens,
                             &L->inner);
        if (status < 0)
            goto fail;
    }
    /* Copies of it along the outer dimensions, each disjoint. */
    L->outer = last >= i ? last + 1 : i;
    L->count = L->inner;
    uint64_t copies = 1, per = 0;
    for (size_t r = 0; r < L->inner; r++)
        per += L->lens[r];
    for (int j = L->outer; j < k; j++)
        if (__builtin_mul_overflow(L->count, dims[j].n, &L->count)
            || __builtin_mul_overflow(copies, dims[j].n, &copies))
            goto no_memory;
    L->len = per * copies;              /* disjoint copies: below 2**56 */
    return STRIDED_OK;

no_memory:
    status = STRIDED_NO_MEMORY;
fail:
    layout_free(L);
    return status;
}

/* The extents of a ready layout, in address order and those that touch
 * merged, handed to visit(ctx, addrs, lens, n) in batches of up to
 * WALK_BATCH (one call per extent would cost a scan of small extents a
 * third of its time), until it returns nonzero (returned). */
#define WALK_BATCH 256

/* The odometer over the outer dimensions above the innermost one, from
 * the innermost: *at moves to the next copy's offset; 0 past the last. */
static int odometer_next_from(struct layout *L, int from, uint64_t *at)
{
    for (int j = from; j < L->k; j++) {
        struct dim *d = &L->dims[j];
        *at += d->stride;
        if (++d->idx < d->n)
            return 1;
        *at -= d->stride * d->n;
        d->idx = 0;
    }
    return 0;
}

static int odometer_next(struct layout *L, uint64_t *at)
{
    return odometer_next_from(L, L->outer + 1, at);
}

static int layout_walk(struct layout *L, strided_visit visit, void *ctx)
{
    if (!L->len)
        return 0;
    const uint64_t start = L->start, *offs = L->offs, *lens = L->lens;
    const size_t inner = L->inner;
    struct dim *dims = L->dims;
    const int k = L->k, outer = L->outer;
    /* The innermost outer dimension is a plain loop (most extents come
     * from it); the ones above it an odometer. */
    const uint64_t n0 = outer < k ? dims[outer].n : 1, s0 = outer < k ? dims[outer].stride : 0;
    char *addrs[WALK_BATCH];
    size_t sizes[WALK_BATCH], m = 0;
    uint64_t at = 0, end = 0;           /* end: where the last extent ends */
    int rc;
    for (;;) {
        uint64_t copy = start + at;
        for (uint64_t t = 0; t < n0; t++, copy += s0) {
            for (size_t r = 0; r < inner; r++) {
                /* (Read once: a store to sizes[] could be to lens[] as far
                 * as the compiler knows.) */
                const uint64_t a = copy + offs[r], len = lens[r];
                if (m && end == a) {
                    sizes[m - 1] += len;        /* touches the last: one extent */
                } else {
                    if (m == WALK_BATCH) {
                        /* the last may still grow: it opens the next batch */
                        if ((rc = visit(ctx, addrs, sizes, m - 1)))
                            return rc;
                        addrs[0] = addrs[m - 1];
                        sizes[0] = sizes[m - 1];
                        m = 1;
                    }
                    addrs[m] = (char *)(uintptr_t)a;
                    sizes[m++] = len;
                }
                end = a + len;
            }
        }
        if (!odometer_next(L, &at))
            break;
    }
    return visit(ctx, addrs, sizes, m);
}

int strided_walk(const void *data, uint64_t offset, int ndim, const int64_t *shape,
                 const int64_t *strides, int64_t unit, uint64_t item, strided_visit visit,
                 void *ctx, int *stopped)
{
    struct layout L;
    int status = layout_of(data, offset, ndim, shape, strides, unit, item, &L);
    if (status < 0)
        return status;
    *stopped = layout_walk(&L, visit, ctx);
    layout_free(&L);
    return STRIDED_OK;
}

/* Collecting: the extents into the arrays of a struct strided_extents. */
static int collect(void *ctx, char *const *addrs, const size_t *lens, size_t n)
{
    struct strided_extents *out = ctx;
    memcpy(out->addrs + out->nextents, addrs, n * sizeof *addrs);
    memcpy(out->lens + out->nextents, lens, n * sizeof *lens);
    out->nextents += n;
    return 0;
}

/* The extents of a ready layout into *out (out->base and out->len set). */
static int collect_layout(struct layout *L, struct strided_extents *out)
{
    int status = STRIDED_OK;
    out->base = (char *)(uintptr_t)L->start;
    out->len = L->len;
    if (L->outer == L->k && L->inner == 1)  /* one extent */
        return STRIDED_OK;
    if (L->count > bookkeeping_max() / (sizeof(char *) + sizeof(size_t))) {
        status = STRIDED_NO_MEMORY;
    } else {
        out->addrs = PyMem_Malloc((size_t)L->count * sizeof(char *));
        out->lens = PyMem_Malloc((size_t)L->count * sizeof(size_t));
        if (!out->addrs || !out->lens)
            status = STRIDED_NO_MEMORY;
        else
            layout_walk(L, collect, out);
    }
    if (status < 0) {
        strided_extents_free(out);
        out->len = 0;
        return status;
    }
    if (out->nextents == 1) {              /* it all touched: one extent */
        out->base = out->addrs[0];
        strided_extents_free(out);
    }
    return STRIDED_OK;
}

int strided_extents(const void *data, uint64_t offset, int ndim, const int64_t *shape,
                    const int64_t *strides, int64_t unit, uint64_t item,
                    struct strided_extents *out)
{
    memset(out, 0, sizeof *out);
    struct layout L;
    int status = layout_of(data, offset, ndim, shape, strides, unit, item, &L);
    out->base = (char *)(uintptr_t)L.start;
    if (status < 0)
        return status;
    status = collect_layout(&L, out);
    layout_free(&L);
    return status;
}

/* ---- a layout kept, to be walked later (without the GIL) ---------------------- */

struct strided_layout {
    struct layout L;            /* points into itself: never moved */
};

int strided_layout_new(const void *data, uint64_t offset, int ndim, const int64_t *shape,
                       const int64_t *strides, int64_t unit, uint64_t item,
                       struct strided_layout **out, uint64_t *len, uint64_t *count)
{
    *out = NULL;
    struct strided_layout *s = PyMem_Malloc(sizeof *s);
    if (!s)
        return STRIDED_NO_MEMORY;
    int status = layout_of(data, offset, ndim, shape, strides, unit, item, &s->L);
    if (status < 0) {
        PyMem_Free(s);
        return status;
    }
    *out = s;
    *len = s->L.len;
    *count = s->L.len ? s->L.count : 0;
    return STRIDED_OK;
}

int strided_layout_walk(struct strided_layout *s, strided_visit visit, void *ctx)
{
    return layout_walk(&s->L, visit, ctx);
}

int strided_layout_rows(struct strided_layout *s, strided_row row, void *ctx)
{
    struct layout *L = &s->L;
    if (!L->len || L->inner != 1 || L->outer >= L->k)
        return -1;
    /* inner == 1: the pattern is the block, and copies of it along the
     * innermost outer dimension never touch (layout_of merged any whose
     * stride does not pass the block into it). */
    const uint64_t n0 = L->dims[L->outer].n, s0 = L->dims[L->outer].stride;
    /* The dimension above the rows as the caller's loop too: a call for
     * each row of 64 float64 cost a fifth of their stores. */
    const int two = L->outer + 1 < L->k;
    const uint64_t n1 = two ? L->dims[L->outer + 1].n : 1;
    const uint64_t s1 = two ? L->dims[L->outer + 1].stride : 0;
    uint64_t at = 0;
    int rc;
    do {
        if ((rc = row(ctx, (char *)(uintptr_t)(L->start + at), L->block, s0, n0, s1, n1)))
            return rc;
    } while (odometer_next_from(L, L->outer + 1 + two, &at));
    return 0;
}

int strided_layout_each(struct strided_layout *s, strided_row row, strided_visit visit,
                        void *ctx)
{
    int rc = strided_layout_rows(s, row, ctx);
    return rc == -1 ? strided_layout_walk(s, visit, ctx) : rc;
}

int strided_layout_extents(struct strided_layout *s, struct strided_extents *out)
{
    memset(out, 0, sizeof *out);
    return collect_layout(&s->L, out);
}

void strided_layout_free(struct strided_layout *s)
{
    if (s) {
        layout_free(&s->L);
        PyMem_Free(s);
    }
}
