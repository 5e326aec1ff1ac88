/*
 * is_zero and nonzero_pages: the native entries of the zero scan.
 *
 * The buffer is acquired for reading (strided views with their strides),
 * the scanner of core/scan.c that Python chose (set_scan) runs over it,
 * without the GIL for large buffers and in slices so that Ctrl-C is seen
 * between them, and nothing is written.  A strided view is read extent by
 * extent, as strided.c finds the bytes its elements cover: in rows where it
 * comes so, extents of up to SCAN_ROW_INLINE bytes ORed inline.
 */

#include <string.h>

#include "fast.h"

/* Scans of at least this many bytes release the GIL.  Below it the scan is
 * short and the release and reacquire would be a measurable part of it
 * (docs/results.md has the figures). */
#define SCAN_GIL_MIN (1u << 20)
/* Between two slices of a long scan the caller looks for signals (Ctrl-C):
 * a slice this long ends within tens of milliseconds from memory. */
#define SCAN_SLICE (256u << 20)

static struct scan {
    int variant;                    /* -1: not configured */
    int (*is_zero)(int, const void *, size_t, int);
    size_t (*nonzero_pages)(int, const void *, size_t, size_t, int64_t *, int);
} scan = {-1, NULL, NULL};

static PyObject *array_type;        /* array.array, imported on first use */

/* The threads of a scan whose threads= passed the gate (threads_value):
 * "auto" (0) is what a clear of n bytes would get. */
static int scan_threads(int v, size_t n)
{
    if (v != 0)
        return v;
    struct cp_decision d;
    decide(n, 1, AUTO, 0, 0, 0, &d);
    return d.threads;
}

/* threads= or page_size= in a form the gates decline: Python's checks
 * (the hook, _core._declined_scan) read it or refuse it with the package's
 * message, and call the entry again. */
static PyObject *scan_declined(const char *name, PyObject *buf, PyObject *page_size,
                               size_t psize, PyObject *threads)
{
    PyObject *ps = page_size_for_hook(page_size, psize);
    if (!ps)
        return NULL;
    PyObject *res = PyObject_CallFunction(hook_scan, "sOOO", name, buf, ps,
                                          threads ? threads : default_threads);
    Py_DECREF(ps);
    return res;
}

static int scan_ready(void)
{
    if (ensure_ready() < 0)
        return -1;
    if (scan.variant < 0) {
        PyErr_SetString(PyExc_RuntimeError, "clearpages._fast: no zero scan configured");
        return -1;
    }
    return 0;
}

/* Acquire buf for reading, with strides where it has them.  -1 with
 * TypeError for an object that is no buffer; a buffer that refuses to be
 * read (a closed Region or mmap, a released memoryview) says why itself. */
static int scan_acquire(PyObject *buf, Py_buffer *view, const char *fn)
{
    if (entry_get_buffer(buf, view, PyBUF_SIMPLE) == 0)
        return 0;
    if (!is_refusal())
        return -1;
    PyErr_Clear();
    /* Strides without a format: reading bytes needs none, and an exporter
     * may have none to state (numpy's datetime64). */
    if (entry_get_buffer(buf, view, PyBUF_STRIDES) == 0)
        return 0;
    if (!PyErr_ExceptionMatches(PyExc_TypeError))
        return -1;
    PyErr_Clear();
    PyErr_Format(PyExc_TypeError,
                 "clearpages.%s reads buffers (bytes, bytearray, memoryview, numpy "
                 "array, mmap, array.array, ctypes array, Region) and tensors with "
                 "__dlpack__ in CPU memory, not %s", fn, Py_TYPE(buf)->tp_name);
    return -1;
}

/* One contiguous extent, in slices, the GIL released for large ones. */
static int scan_extent(const char *p, size_t n, int threads)
{
    if (n < SCAN_GIL_MIN && threads == 1)
        return scan.is_zero(scan.variant, p, n, 1);
    size_t slice = SCAN_SLICE * (size_t)threads;
    for (size_t off = 0; off < n; off += slice) {
        size_t take = n - off < slice ? n - off : slice;
        int zero;
        Py_BEGIN_ALLOW_THREADS
        zero = scan.is_zero(scan.variant, p + off, take, threads);
        Py_END_ALLOW_THREADS
        if (!zero)
            return 0;
        if (off + take < n && PyErr_CheckSignals() < 0)
            return -1;
    }
    return 1;
}

/* The extents of [p, p + n) that hold memory in use, where the policy
 * would look for untouched pages in a clear of n bytes (core/untouched.c):
 * 1 and *kept, *m set (free with extents_free); 0 where it would not look
 * or the look cannot tell: read it all. */
static int touched_extents(const char *p, size_t n, struct cp_extent **kept, size_t *m)
{
    if (!cp_policy_looks_untouched(&config.policy, n))
        return 0;
    struct cp_extent whole = {(char *)p, n};
    Py_BEGIN_ALLOW_THREADS
    *m = native->untouched_trim(&whole, 1, kept);
    Py_END_ALLOW_THREADS
    return *m != (size_t)-1;
}

/* A contiguous buffer whose pages never touched are not read: they read
 * as zero.  Reading them would map the zero page into each, a fault per
 * 4 KiB page, slower than the scan itself (and fault in a whole page of a
 * hugetlb mapping).  Where the look may be made, the three bytes first
 * where their pages are in memory, so that a nonzero one still answers at
 * once. */
static int scan_contiguous(const char *p, size_t n, int threads)
{
    if (cp_policy_looks_untouched(&config.policy, n)) {
        const char *peek[3] = {p, p + n - 1, p + n / 2};
        for (int i = 0; i < 3; i++)
            if (native->untouched_peekable(peek[i]) && *peek[i])
                return 0;
    }
    struct cp_extent *kept;
    size_t m;
    if (!touched_extents(p, n, &kept, &m))
        return scan_extent(p, n, threads);
    int zero = 1;
    for (size_t i = 0; i < m && zero == 1; i++)
        zero = scan_extent(kept[i].addr, kept[i].len, threads);
    native->extents_free(kept);
    return zero;
}

/* The extents of a strided layout (strided.c: the union of its elements'
 * bytes, each byte once), read in turn until one holds a nonzero byte:
 * small ones directly on this thread, signals looked for between them
 * every SCAN_SLICE bytes.  A strided_visit, handed a batch at a time. */
struct extents_scan {
    int threads;
    size_t since;               /* bytes read since signals were last looked for */
    int zero;                   /* 1, 0 (a nonzero byte) or -1 (an error is set) */
};

/* bytes more read: past SCAN_SLICE of them, a look at the signals.  1: stop
 * (an error is set, w->zero -1). */
static int scan_read(struct extents_scan *w, size_t bytes)
{
    if ((w->since += bytes) < SCAN_SLICE)
        return 0;
    w->since = 0;
    if (PyErr_CheckSignals() < 0) {
        w->zero = -1;
        return 1;
    }
    return 0;
}

static int scan_some(void *ctx, char *const *addrs, const size_t *lens, size_t n)
{
    struct extents_scan *w = ctx;
    int (*is_zero)(int, const void *, size_t, int) = scan.is_zero;
    const int variant = scan.variant;
    for (size_t i = 0; i < n; i++) {
        int zero = lens[i] >= SCAN_GIL_MIN ? scan_extent(addrs[i], lens[i], w->threads)
                                           : is_zero(variant, addrs[i], lens[i], 1);
        if (zero <= 0) {
            w->zero = zero;
            return 1;
        }
        if (scan_read(w, lens[i]))
            return 1;
    }
    return 0;
}

/* The bytes of a short extent ORed together, read 8 at a time (the last
 * 8 overlapping the ones before where len is not a multiple), none
 * outside it. */
static inline __attribute__((always_inline)) uint64_t or_bytes(const char *p, size_t len)
{
    uint64_t acc = 0, x;
    if (len < 8) {
        for (size_t i = 0; i < len; i++)
            acc |= (unsigned char)p[i];
        return acc;
    }
    size_t i = 0;
    for (; i + 8 <= len; i += 8) {
        memcpy(&x, p + i, 8);
        acc |= x;
    }
    if (i < len) {
        memcpy(&x, p + len - 8, 8);
        acc |= x;
    }
    return acc;
}

/* m extents of L bytes from q, stride apart, ORed into acc (L a constant
 * the compiler knows, or len). */
#define OR_ROW(L)                                     \
    do {                                              \
        for (size_t t = 0; t < m; t++)                \
            acc |= or_bytes(q + t * stride, L);       \
    } while (0)
/* Extents read inline between two looks at the answer (and, every
 * SCAN_SLICE bytes, at the signals). */
#define SCAN_ROW_STEP 4096u

/* Extents up to this long are read inline, row by row (a column of a
 * matrix: one call of the scanner per element cost 6 ns each, 6-8x numpy's
 * any(), Intel guest); longer ones go to the scanner one by one. */
#define SCAN_ROW_INLINE 64u

static int scan_row(void *ctx, char *p, size_t len, size_t stride, size_t n,
                    size_t stride1, size_t n1)
{
    struct extents_scan *w = ctx;
    if (len > SCAN_ROW_INLINE) {
        char *addrs[64];
        size_t lens[64];
        for (size_t r = 0; r < n1; r++) {
            char *row = p + r * stride1;
            for (size_t t = 0; t < n; ) {
                size_t m = n - t < 64 ? n - t : 64;
                for (size_t k = 0; k < m; k++) {
                    addrs[k] = row + (t + k) * stride;
                    lens[k] = len;
                }
                if (scan_some(w, addrs, lens, m))
                    return 1;
                t += m;
            }
        }
        return 0;
    }
    for (size_t r = 0; r < n1; r++, p += stride1) {
        for (size_t t0 = 0; t0 < n; t0 += SCAN_ROW_STEP) {
            const char *q = p + t0 * stride;
            size_t m = n - t0 < SCAN_ROW_STEP ? n - t0 : SCAN_ROW_STEP;
            uint64_t acc = 0;
            switch (len) {
            case 1: OR_ROW(1); break;
            case 2: OR_ROW(2); break;
            case 4: OR_ROW(4); break;
            case 8: OR_ROW(8); break;
            case 16: OR_ROW(16); break;
            default: OR_ROW(len); break;
            }
            if (acc) {
                w->zero = 0;
                return 1;
            }
            if (scan_read(w, m * len))
                return 1;
        }
    }
    return 0;
}

static int scan_strided(const Py_buffer *v, int threads)
{
    struct extents_scan w = {threads, 0, 1};
    _Static_assert(sizeof(Py_ssize_t) == sizeof(int64_t), "buffer shapes are int64");
    struct strided_layout *s;
    uint64_t len, count;
    int status = strided_layout_new(v->buf, 0, v->ndim, (const int64_t *)v->shape,
                                    (const int64_t *)v->strides, 1, (uint64_t)v->itemsize,
                                    &s, &len, &count);
    if (status < 0)
        return buffer_layout_error("is_zero: ", status);
    strided_layout_each(s, scan_row, scan_some, &w);
    strided_layout_free(s);
    return w.zero;
}

/* An object with no buffer (the TypeError of scan_acquire pending): a
 * tensor through DLPack (dlpack.c, read-only ones too): 1 and *dv held;
 * else -1, with the pending TypeError where it has no __dlpack__ either,
 * or the tensor's refusal. */
static int acquire_tensor(PyObject *buf, struct dlpack_view *dv)
{
    PyObject *type, *value, *tb;
    PyErr_Fetch(&type, &value, &tb);
    int got = dlpack_acquire_read(buf, dv);
    if (got == 0) {
        PyErr_Restore(type, value, tb);
        return -1;
    }
    Py_XDECREF(type);
    Py_XDECREF(value);
    Py_XDECREF(tb);
    return got;
}

/* is_zero of an object with no buffer: a tensor, else the TypeError. */
static PyObject *is_zero_tensor(PyObject *buf, int threads)
{
    struct dlpack_view dv;
    if (acquire_tensor(buf, &dv) < 0)
        return NULL;
    struct extents_scan w = {scan_threads(threads, dv.len), 0, 1};
    int zero;
    if (dv.layout) {
        /* Small extents not listed: read as a strided buffer's are. */
        strided_layout_each(dv.layout, scan_row, scan_some, &w);
        zero = w.zero;
    } else {
        if (dv.nextents)
            scan_some(&w, dv.addrs, dv.lens, dv.nextents);
        zero = dv.nextents ? w.zero : scan_extent(dv.base, dv.len, w.threads);
    }
    dlpack_release(&dv);
    if (zero < 0)
        return NULL;
    return PyBool_FromLong(zero);
}

static const char *const is_zero_pos[] = {"buf"};

PyObject *fast_is_zero(PyObject *self, PyObject *const *args, Py_ssize_t nargs,
                              PyObject *kwnames)
{
    (void)self;
    PyObject *buf = NULL, *threads = NULL;
    struct kw kws[] = {{kw_names[1], &threads}};
    if (parse_args("is_zero", args, nargs, kwnames, 1, 1, &buf, is_zero_pos, kws, 1) < 0)
        return NULL;
    if (scan_ready() < 0)
        return NULL;
    int tv = threads_value(threads);
    if (tv == DECLINE)
        return scan_declined("is_zero", buf, NULL, 0, threads);
    Py_buffer view;
    if (scan_acquire(buf, &view, "is_zero") < 0)
        return PyErr_ExceptionMatches(PyExc_TypeError) ? is_zero_tensor(buf, tv) : NULL;
    int t = scan_threads(tv, (size_t)view.len);
    int zero = view.strides && !PyBuffer_IsContiguous(&view, 'A')
             ? scan_strided(&view, t) : scan_contiguous(view.buf, (size_t)view.len, t);
    PyBuffer_Release(&view);
    if (zero < 0)
        return NULL;
    return PyBool_FromLong(zero);
}

/* Append to out (at *found) the nonzero pages among pages [first, end) of
 * the n bytes at base, in slices of whole pages so that Ctrl-C is seen
 * between them.  -1 when a signal handler raised. */
static int scan_pages(const char *base, size_t n, size_t psize, size_t first, size_t end,
                      int t, int64_t *out, size_t *found)
{
    size_t slice_pages = SCAN_SLICE * (size_t)t / psize;
    if (slice_pages == 0)
        slice_pages = 1;
    for (; first < end; first += slice_pages) {
        size_t stop = first + slice_pages < end ? first + slice_pages : end;
        size_t lo = first * psize, hi = stop * psize < n ? stop * psize : n;
        size_t k;
        if (hi - lo >= SCAN_GIL_MIN || t > 1) {
            Py_BEGIN_ALLOW_THREADS
            k = scan.nonzero_pages(scan.variant, base + lo, hi - lo, psize, out + *found, t);
            Py_END_ALLOW_THREADS
        } else {
            k = scan.nonzero_pages(scan.variant, base + lo, hi - lo, psize, out + *found, t);
        }
        for (size_t i = 0; i < k; i++)
            out[*found + i] += (int64_t)first;
        *found += k;
        if (stop < end && PyErr_CheckSignals() < 0)
            return -1;
    }
    return 0;
}

/* The nonzero pages of a contiguous buffer: where the look for untouched
 * pages is made, only the pages that hold some of the memory in use are
 * read (the others are zero). */
static int nonzero_pages_touched(const char *base, size_t n, size_t psize, int t,
                                 int64_t *out, size_t *found)
{
    struct cp_extent *kept;
    size_t m;
    if (!touched_extents(base, n, &kept, &m))
        return scan_pages(base, n, psize, 0, n / psize + (n % psize != 0), t, out, found);
    int rc = 0;
    size_t next = 0;            /* the first page not yet read */
    for (size_t i = 0; i < m && rc == 0; i++) {
        size_t lo = (size_t)(kept[i].addr - base), hi = lo + kept[i].len;
        size_t first = lo / psize, end = (hi + psize - 1) / psize;
        if (first < next)
            first = next;
        if (first < end)
            rc = scan_pages(base, n, psize, first, end, t, out, found);
        next = end > next ? end : next;
    }
    native->extents_free(kept);
    return rc;
}

static const char *const pages_scan_pos[] = {"buf", "page_size"};

PyObject *fast_nonzero_pages(PyObject *self, PyObject *const *args, Py_ssize_t nargs,
                             PyObject *kwnames)
{
    (void)self;
    PyObject *pos[2] = {NULL, NULL}, *threads = NULL;
    struct kw kws[] = {{kw_names[1], &threads}};
    if (parse_args("nonzero_pages", args, nargs, kwnames, 1, 2, pos, pages_scan_pos,
                   kws, 1) < 0)
        return NULL;
    if (scan_ready() < 0)
        return NULL;
    int tv = threads_value(threads);
    size_t psize = page_size_value(pos[1], pos[0]);
    if (tv == DECLINE || !psize)
        return scan_declined("nonzero_pages", pos[0], pos[1], psize, threads);
    Py_buffer view;
    struct dlpack_view dv;
    int tensor = 0;
    if (scan_acquire(pos[0], &view, "nonzero_pages") < 0) {
        if (!PyErr_ExceptionMatches(PyExc_TypeError))
            return NULL;
        if (acquire_tensor(pos[0], &dv) < 0)
            return NULL;
        tensor = 1;
        memset(&view, 0, sizeof view);
        view.buf = dv.base;
        view.len = (Py_ssize_t)dv.len;
        view.itemsize = (Py_ssize_t)(dv.itemsize ? dv.itemsize : 1);
    }
    PyObject *res = NULL;
    int64_t *out = NULL;
    if (psize % (size_t)view.itemsize) {
        PyErr_Format(PyExc_ValueError,
                     "page_size must be a multiple of the item size (%zd byte%s), not %zu",
                     view.itemsize, view.itemsize == 1 ? "" : "s", psize);
        goto done;
    }
    if (tensor ? dv.nextents != 0 : view.strides && !PyBuffer_IsContiguous(&view, 'A')) {
        PyErr_Format(PyExc_ValueError, "nonzero_pages needs a %s; this one is strided",
                     tensor ? "contiguous tensor" : "C- or Fortran-contiguous buffer");
        goto done;
    }
    size_t n = (size_t)view.len;
    size_t npages = n / psize + (n % psize != 0);
    int t = scan_threads(tv, n);
    out = PyMem_Malloc((npages ? npages : 1) * sizeof(*out));
    if (!out) {
        PyErr_NoMemory();
        goto done;
    }
    size_t found = 0;
    if (nonzero_pages_touched(view.buf, n, psize, t, out, &found) < 0)
        goto done;
    if (!array_type) {
        PyObject *mod = PyImport_ImportModule("array");
        if (!mod)
            goto done;
        array_type = PyObject_GetAttrString(mod, "array");
        Py_DECREF(mod);
        if (!array_type)
            goto done;
    }
    res = PyObject_CallFunction(array_type, "sy#", "q", (const char *)out,
                                (Py_ssize_t)(found * sizeof(*out)));
done:
    PyMem_Free(out);
    if (tensor)
        dlpack_release(&dv);
    else
        PyBuffer_Release(&view);
    return res;
}

/* set_scan(variant): the scanner the entries call (cp_scan_*'s variant
 * number, chosen by clearpages._scan from the masked CPU features). */
PyObject *fast_set_scan(PyObject *self, PyObject *arg)
{
    (void)self;
    int v = (int)PyLong_AsLong(arg);
    if (v == -1 && PyErr_Occurred())
        return NULL;
    scan.is_zero = native->scan_is_zero;
    scan.nonzero_pages = native->scan_nonzero_pages;
    scan.variant = v;
    Py_RETURN_NONE;
}

/* The configured zero scan's variant (a pool's debug check reads blocks
 * back with it); -1 with an exception set before configuration. */
int scan_variant(void)
{
    return scan_ready() < 0 ? -1 : scan.variant;
}
