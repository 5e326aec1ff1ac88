/*
 * The entries: clear, clear_many, clear_extents and clear_pages, each in one
 * native call (arguments taken, buffers acquired, the work run, every
 * buffer released), and their _exact forms, called back by Python with
 * normalized arguments.
 */
#include <string.h>

#include "fast.h"

/* Each entry has two forms sharing one body: the public one, whose declined
 * arguments go to Python's hook to be explained or normalized, and the
 * _exact one that Python calls back with normalized arguments (declining
 * again there is a bug, not a refusal to explain). */
#define ENTRY_PAIR(name, body)                                                       \
    PyObject *name(PyObject *self, PyObject *const *args, Py_ssize_t nargs,          \
                   PyObject *kwnames)                                                \
    {                                                                                \
        (void)self;                                                                  \
        return body(args, nargs, kwnames, 0);                                        \
    }                                                                                \
    PyObject *name##_exact(PyObject *self, PyObject *const *args, Py_ssize_t nargs,  \
                           PyObject *kwnames)                                        \
    {                                                                                \
        (void)self;                                                                  \
        return body(args, nargs, kwnames, 1);                                        \
    }

/* The one tail of an entry that declined: its Python hook (hook_clear,
 * hook_many, hook_pages) explains the refusal, or normalizes the arguments
 * and calls the _exact form, where (strict) declining again is a bug.
 * args: the hook's n arguments, method and threads at method_at and the
 * next as given (NULL: not given, passed as "auto" and 1), other NULLs as
 * None. */
static PyObject *declined(int strict, PyObject *hook, PyObject **args, size_t n,
                          size_t method_at)
{
    if (strict) {
        PyErr_SetString(PyExc_SystemError, "clearpages: normalized arguments declined");
        return NULL;
    }
    if (!args[method_at])
        args[method_at] = s_auto;
    if (!args[method_at + 1])
        args[method_at + 1] = default_threads;
    for (size_t i = 0; i < n; i++)
        if (!args[i])
            args[i] = Py_None;
    return PyObject_Vectorcall(hook, args, n, NULL);
}

static const char *const clear_pos[] = {"buf"};

/* hot as (start, stop) within n bytes: 1, 0 when it is not a tuple of two
 * exact ints in range (Python normalizes or refuses it), -1 with an error
 * set. */
static int hot_range(PyObject *hot, size_t n, size_t *start, size_t *stop)
{
    if (!PyTuple_CheckExact(hot) || PyTuple_GET_SIZE(hot) != 2
        || !PyLong_CheckExact(PyTuple_GET_ITEM(hot, 0))
        || !PyLong_CheckExact(PyTuple_GET_ITEM(hot, 1)))
        return 0;
    Py_ssize_t a = PyLong_AsSsize_t(PyTuple_GET_ITEM(hot, 0));
    Py_ssize_t b = a == -1 && PyErr_Occurred() ? -1 : PyLong_AsSsize_t(PyTuple_GET_ITEM(hot, 1));
    if (PyErr_Occurred()) {
        if (!PyErr_ExceptionMatches(PyExc_OverflowError))
            return -1;
        PyErr_Clear();
        return 0;
    }
    if (a < 0 || a > b || (size_t)b > n)
        return 0;
    *start = (size_t)a;
    *stop = (size_t)b;
    return 1;
}

/* n tensors were written (wholly, or in part when the clear failed, rc <
 * 0): each one's version counter is bumped, so that autograd knows, and
 * those autograd records are cleared by their own zero_() (only when the
 * rest went well).  The clear's own error (KeyboardInterrupt) wins over a
 * bump's. */
static int views_written(struct dlpack_view *t, size_t n, int rc)
{
    /* The first error wins; each call after it runs with none pending. */
    int done = rc == 0;
    PyObject *type = NULL, *value = NULL, *tb = NULL;
    if (rc < 0)
        PyErr_Fetch(&type, &value, &tb);
    for (size_t i = 0; i < n; i++)
        if (dlpack_written(&t[i], done) < 0) {
            if (rc < 0) {
                PyErr_Clear();
            } else {
                rc = -1;
                PyErr_Fetch(&type, &value, &tb);
            }
        }
    if (type || value || tb)
        PyErr_Restore(type, value, tb);
    return rc;
}

/* clear() of a tensor taken through DLPack (dlpack.c); the view is
 * released here.  hot: NULL, True/False (the hint for the whole tensor) or
 * a (start, stop) pair, which needs a tensor that tiles its bytes. */
static PyObject *clear_tensor(struct dlpack_view *dv, int idx, int nthreads,
                              PyObject *hot)
{
    size_t start = 0, stop = 0;
    int hint = hot == Py_True ? CP_POLICY_HOT_ALL : hot == Py_False ? CP_POLICY_NOT_SOON : 0;
    if (hot && !hint && !dv->zero) {    /* torch's zero_() takes no hot range */
        int ok = dv->nextents ? 0 : hot_range(hot, dv->len, &start, &stop);
        if (ok == 0) {
            /* Python's check (_core._check_hot) refuses it with the message it
             * has for buffers, or gives the pair as two exact ints. */
            PyObject *pair = PyObject_CallFunction(hook_hot, "OnO", hot, (Py_ssize_t)dv->len,
                                                   dv->nextents ? Py_True : Py_False);
            ok = !pair ? -1 : hot_range(pair, dv->len, &start, &stop);
            if (ok == 0)
                PyErr_SetString(PyExc_SystemError, "clearpages: a normalized hot= declined");
            Py_XDECREF(pair);
        }
        if (ok <= 0) {
            dlpack_release(dv);
            return NULL;
        }
    }
    int rc = 0;
    if (debug_hook)
        rc = call_debug_hook("acquired", NULL, dv->len);
    if (rc == 0 && dv->len) {     /* an empty tensor's data may be NULL */
        if (dv->layout)
            rc = clear_layout(dv->layout, dv->len, dv->nextents, idx, nthreads);
        else if (dv->nextents)
            rc = clear_extents(dv->addrs, dv->lens, dv->nextents, dv->len, idx, nthreads);
        else if (hint)
            rc = clear_whole(dv->base, dv->len, idx, nthreads, hint);
        else if (hot)
            rc = clear_with_hot(dv->base, dv->len, start, stop, idx, nthreads);
        else
            rc = clear_extent(dv->base, dv->len, idx, nthreads);
    }
    /* Written, wholly or (interrupted) in part: autograd must know. */
    rc = views_written(dv, 1, rc);
    dlpack_release(dv);
    if (rc < 0)
        return NULL;
    Py_RETURN_NONE;
}

/* PyObject_CheckBuffer without the call: the per-call path of a buffer
 * (the common case) pays one load and a compare for tensors. */
static inline int has_buffer(PyObject *obj)
{
    PyBufferProcs *pb = Py_TYPE(obj)->tp_as_buffer;
    return pb != NULL && pb->bf_getbuffer != NULL;
}

/* A tensor (no buffer, but __dlpack__): 1 done (*res the result), 0 not a
 * tensor or declined (*err set for Python when declined), -1 error.  The
 * caller has found that buf exports no buffer. */
static int clear_if_tensor(PyObject *buf, PyObject *method, PyObject *threads, PyObject *hot,
                           PyObject **res, PyObject **err)
{
    int nthreads = threads_value(threads);
    if (nthreads == DECLINE)
        return 0;
    struct dlpack_view dv;
    /* Read without an export only where the GIL is kept throughout. */
    size_t direct_max = nthreads == 1 && (!hot || hot == Py_False) ? config.gil_min : 0;
    int got = dlpack_acquire(buf, &dv, direct_max);
    if (got <= 0)
        return got;
    if (dv.direct && dv.len >= config.gil_min) {
        /* The configuration was reloaded meanwhile (the producer's code
         * ran): export it after all. */
        dlpack_release(&dv);
        got = dlpack_acquire(buf, &dv, 0);
        if (got <= 0)
            return got;
    }
    /* After the producer's code, as for buffers (see do_clear). */
    int idx = method_index(method);
    if (idx == DECLINE) {
        dlpack_release(&dv);
        *err = PyUnicode_FromString("a tensor (DLPack)");
        return *err ? 0 : -1;
    }
    *res = clear_tensor(&dv, idx, nthreads, hot);
    return *res ? 1 : -1;
}

/* A strided buffer (acquire_writable_or_strided, acquire_strided: a numpy
 * array or a memoryview that is not one C-contiguous extent), released
 * here: Fortran order cleared as the one extent it is, a strided view
 * extent by extent, as clear_strided
 * clears one for Python. */
static PyObject *clear_strided_view(Py_buffer *v, int idx, int nthreads)
{
    int rc;
    if (PyBuffer_IsContiguous(v, 'A')) {
        rc = clear_extent(v->buf, (size_t)v->len, idx, nthreads);
    } else {
        struct strided_layout *s;
        uint64_t len, count;
        int status = strided_layout_new(v->buf, 0, v->ndim, (const int64_t *)v->shape,
                                        (const int64_t *)v->strides, 1, (uint64_t)v->itemsize,
                                        &s, &len, &count);
        rc = status < 0 ? buffer_layout_error("", status)
                        : clear_layout(s, (size_t)len, (size_t)count, idx, nthreads);
        strided_layout_free(s);
    }
    PyBuffer_Release(v);
    if (rc < 0)
        return NULL;
    Py_RETURN_NONE;
}

/* strict: called back from Python with normalized arguments, so declining
 * again would be a bug, not a refusal to explain. */
static PyObject *do_clear(PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames,
                          int strict)
{
    PyObject *buf = NULL, *method = NULL, *threads = NULL, *hot = NULL;
    struct kw kws[] = {{kw_names[0], &method}, {kw_names[1], &threads}, {kw_names[2], &hot}};
    if (parse_args("clear", args, nargs, kwnames, 1, 1, &buf, clear_pos, kws, 3) < 0)
        return NULL;
    if (ensure_ready() < 0)
        return NULL;
    if (hot == Py_None)
        hot = NULL;
    Py_buffer view;
    PyObject *err = NULL, *res = NULL;
    int got;
    /* Buffers first: a tensor is looked for only where there is none. */
    if (__builtin_expect(!has_buffer(buf), 0)) {
        got = clear_if_tensor(buf, method, threads, hot, &res, &err);
        if (got != 0)
            return res;
        if (err)
            goto decline;
    }
    int strided = 0;
    got = hot ? acquire_writable(buf, &view, &err, -1)
              : acquire_writable_or_strided(buf, &view, &err, &strided);
    if (got < 0)
        return NULL;
    if (got > 0)
        goto decline;
    if (strided) {
        /* The method looked up after the array's own code (see below). */
        int idx = method_index(method), nthreads = threads_value(threads);
        if (idx != DECLINE && nthreads != DECLINE)
            return clear_strided_view(&view, idx, nthreads);
        /* An argument Python explains or normalizes: as a strided array
         * declined (Python clears it through clear_strided). */
        PyBuffer_Release(&view);
        err = PyUnicode_FromString("not C-contiguous");
        if (!err)
            return NULL;
        goto decline;
    }
    size_t n = (size_t)view.len;
    char *base = view.buf;
    int rc;
    if (debug_hook && call_debug_hook("acquired", NULL, n) < 0) {
        PyBuffer_Release(&view);
        return NULL;
    }
    /* The method is looked up only now, after the last Python code before
     * the work (a __buffer__ method, a hook) has run: that code may have
     * reloaded the configuration, and an index found before could name a
     * routine it has since taken away. */
    int idx = method_index(method);
    int nthreads = threads_value(threads);
    if (idx == DECLINE || nthreads == DECLINE)
        goto release_decline;
    if (!hot) {
        rc = clear_extent(base, n, idx, nthreads);
    } else if (hot == Py_True || hot == Py_False) {
        /* The program's hint for the whole buffer: all of it used next, or
         * none of it soon. */
        rc = clear_whole(base, n, idx, nthreads,
                         hot == Py_True ? CP_POLICY_HOT_ALL : CP_POLICY_NOT_SOON);
    } else {
        size_t start, stop;
        int ok = hot_range(hot, n, &start, &stop);
        if (ok < 0) {
            PyBuffer_Release(&view);
            return NULL;
        }
        if (ok == 0)
            goto release_decline;
        rc = clear_with_hot(base, n, start, stop, idx, nthreads);
    }
    PyBuffer_Release(&view);
    if (rc < 0)
        return NULL;
    Py_RETURN_NONE;

release_decline:
    PyBuffer_Release(&view);
decline: {
    PyObject *hook_args[] = {buf, method, threads, hot, err};
    res = declined(strict, hook_clear, hook_args, 5, 1);
    Py_XDECREF(err);
    return res;
}
}

ENTRY_PAIR(fast_clear, do_clear)

/* ---- many buffers ----------------------------------------------------------- */

/* What clear_many holds while it clears: the buffers' views and the
 * tensors' DLPack views, and the extents of them all (a strided tensor
 * gives one per run, so they grow as they are added). */
struct views {
    Py_buffer *v;
    Py_ssize_t n;       /* acquired so far */
    struct dlpack_view *t;
    Py_ssize_t nt;      /* tensors acquired so far */
    char **addrs;
    size_t *lens;
    size_t m, cap;      /* extents so far, room for */
};

static void views_release(struct views *vs)
{
    for (Py_ssize_t i = 0; i < vs->n; i++)
        PyBuffer_Release(&vs->v[i]);
    for (Py_ssize_t i = 0; i < vs->nt; i++)
        dlpack_release(&vs->t[i]);
    PyMem_Free(vs->v);
    PyMem_Free(vs->t);
    PyMem_Free(vs->addrs);
    PyMem_Free(vs->lens);
    memset(vs, 0, sizeof *vs);
}

/* Room for k more extents. */
static int views_reserve(struct views *vs, size_t k)
{
    if (vs->m + k <= vs->cap)
        return 0;
    size_t cap = vs->cap * 2 > vs->m + k ? vs->cap * 2 : vs->m + k;
    char **a = PyMem_Realloc(vs->addrs, cap * sizeof *a);
    if (a)
        vs->addrs = a;
    size_t *l = a ? PyMem_Realloc(vs->lens, cap * sizeof *l) : NULL;
    if (l)
        vs->lens = l;
    if (!a || !l) {
        PyErr_NoMemory();
        return -1;
    }
    vs->cap = cap;
    return 0;
}


/* The refusal of tensor i of clear_many, with its place in the list. */
static void prefix_index(Py_ssize_t i)
{
    PyObject *type, *value, *tb;
    PyErr_Fetch(&type, &value, &tb);
    PyErr_NormalizeException(&type, &value, &tb);
    if (type && PyErr_GivenExceptionMatches(type, PyExc_TypeError)) {
        PyErr_Format(type, "clear_many: buffer %zd: %S", i, value ? value : Py_None);
        Py_XDECREF(type);
        Py_XDECREF(value);
        Py_XDECREF(tb);
        return;
    }
    PyErr_Restore(type, value, tb);
}

static const char *const many_pos[] = {"bufs"};

static PyObject *do_clear_many(PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames,
                               int strict)
{
    PyObject *bufs = NULL, *method = NULL, *threads = NULL;
    struct kw kws[] = {{kw_names[0], &method}, {kw_names[1], &threads}};
    if (parse_args("clear_many", args, nargs, kwnames, 1, 1, &bufs, many_pos, kws, 2) < 0)
        return NULL;
    if (ensure_ready() < 0)
        return NULL;
    /* Our own tuple of the items (strong references): an item's __buffer__
     * or __index__ may change the caller's list while we walk it. */
    PyObject *seq = PySequence_Tuple(bufs);
    if (!seq) {
        /* Not iterable at all (None, an int): say what clear_many takes. */
        if (PyErr_ExceptionMatches(PyExc_TypeError) && !Py_TYPE(bufs)->tp_iter
            && !PySequence_Check(bufs)) {
            PyErr_Clear();
            PyErr_Format(PyExc_TypeError,
                         "clear_many takes an iterable of buffers (a list or tuple of "
                         "bytearrays, numpy arrays, Regions, tensors, ...), not %.200s; to "
                         "clear one buffer, call clear(buf)", Py_TYPE(bufs)->tp_name);
        }
        return NULL;
    }
    int idx = AUTO, nthreads = threads_value(threads);
    PyObject *bad = NULL, *res = NULL;
    struct views vs;
    memset(&vs, 0, sizeof vs);
    if (method_index(method) == DECLINE || nthreads == DECLINE)
        goto decline;
    Py_ssize_t n = PyTuple_GET_SIZE(seq);
    vs.v = PyMem_Malloc((size_t)(n ? n : 1) * sizeof(Py_buffer));
    if (!vs.v || views_reserve(&vs, (size_t)(n ? n : 1)) < 0) {
        PyErr_NoMemory();
        goto fail;
    }
    size_t total = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *item = PyTuple_GET_ITEM(seq, i), *msg;
        if (__builtin_expect(!has_buffer(item), 0)) {
            /* A tensor (no buffer, but __dlpack__): its extents, exported
             * for the whole call (the GIL may be let go). */
            if (!vs.t && !(vs.t = PyMem_Malloc((size_t)n * sizeof *vs.t))) {
                PyErr_NoMemory();
                goto fail;
            }
            int got = dlpack_acquire(item, &vs.t[vs.nt], 0);
            if (got < 0) {
                prefix_index(i);
                goto fail;
            }
            if (got > 0) {
                struct dlpack_view *dv = &vs.t[vs.nt++];
                if (dlpack_list_extents(dv) < 0)
                    goto fail;
                size_t k = dv->nextents ? dv->nextents : 1;
                if (views_reserve(&vs, k) < 0)
                    goto fail;
                for (size_t r = 0; r < k; r++) {
                    vs.addrs[vs.m] = dv->nextents ? dv->addrs[r] : dv->base;
                    vs.lens[vs.m++] = dv->nextents ? dv->lens[r] : dv->len;
                }
                total += dv->len;
                continue;
            }
            /* no __dlpack__ either: the refusal below */
        }
        int got = acquire_writable(item, &vs.v[vs.n], &msg, i);
        if (got < 0)
            goto fail;
        if (got > 0) {
            /* Python says why, or clears it run by run (a strided array). */
            bad = Py_BuildValue("(nN)", i, msg);
            if (!bad)
                goto fail;
            views_release(&vs);
            goto decline;
        }
        if (views_reserve(&vs, 1) < 0) {
            PyBuffer_Release(&vs.v[vs.n]);
            goto fail;
        }
        vs.addrs[vs.m] = vs.v[vs.n].buf;
        vs.lens[vs.m++] = (size_t)vs.v[vs.n].len;
        total += (size_t)vs.v[vs.n].len;
        vs.n++;
    }
    if (call_debug_hook("acquired", NULL, total) < 0)
        goto fail;
    /* Again, after the items' __buffer__ methods and the hook (see clear). */
    idx = method_index(method);
    if (idx == DECLINE) {
        views_release(&vs);
        goto decline;
    }
    int rc = clear_extents(vs.addrs, vs.lens, vs.m, total, idx, nthreads);
    if (views_written(vs.t, (size_t)vs.nt, rc) == 0)
        res = Py_NewRef(Py_None);
fail:
    views_release(&vs);
    Py_DECREF(seq);
    return res;

decline: {
    PyObject *hook_args[] = {seq, method, threads, bad};
    res = declined(strict, hook_many, hook_args, 4, 1);
}
    Py_XDECREF(bad);
    Py_DECREF(seq);
    return res;
}

ENTRY_PAIR(fast_clear_many, do_clear_many)

/* clear_extents(addrs, lens, *, method, threads): extents given as two
 * buffers of uint64 (a strided array's extents); the caller keeps their
 * memory alive.  Arguments are normalized by Python. */
static const char *const extents_pos[] = {"addrs", "lens"};

PyObject *fast_clear_extents(PyObject *self, PyObject *const *args, Py_ssize_t nargs,
                             PyObject *kwnames)
{
    (void)self;
    PyObject *pos[2] = {NULL, NULL}, *method = NULL, *threads = NULL;
    struct kw kws[] = {{kw_names[0], &method}, {kw_names[1], &threads}};
    if (parse_args("clear_extents", args, nargs, kwnames, 2, 2, pos, extents_pos, kws, 2) < 0)
        return NULL;
    int idx, nthreads;
    if (normalized_method_threads("clear_extents", method, threads, &idx, &nthreads) < 0)
        return NULL;
    Py_buffer a, l;
    if (PyObject_GetBuffer(pos[0], &a, PyBUF_C_CONTIGUOUS) < 0)
        return NULL;
    if (PyObject_GetBuffer(pos[1], &l, PyBUF_C_CONTIGUOUS) < 0) {
        PyBuffer_Release(&a);
        return NULL;
    }
    PyObject *res = NULL;
    if (a.len != l.len || a.len % 8) {
        PyErr_SetString(PyExc_ValueError, "clear_extents: two uint64 buffers of one length");
    } else {
        size_t n = (size_t)a.len / 8, total = 0;
        for (size_t i = 0; i < n; i++)
            total += ((size_t *)l.buf)[i];
        if (clear_extents(a.buf, l.buf, n, total, idx, nthreads) == 0)
            res = Py_NewRef(Py_None);
    }
    PyBuffer_Release(&a);
    PyBuffer_Release(&l);
    return res;
}

/* The error of a buffer whose layout strided.c refused (status < 0), its
 * message after prefix: -1.  Only MemoryError is ours; the rest no working
 * exporter describes. */
int buffer_layout_error(const char *prefix, int status)
{
    if (status == STRIDED_NO_MEMORY)
        PyErr_NoMemory();
    else
        PyErr_Format(PyExc_ValueError, "%sthe buffer's shape and strides describe %s", prefix,
                     status == STRIDED_NULL ? "elements at a NULL pointer"
                     : status == STRIDED_NEGATIVE ? "a negative number of elements"
                     : "memory beyond the address space");
    return -1;
}

/* The extents a writable strided buffer's elements cover (strided.c),
 * with the buffer held in *v: 0 (release *v and free *r after the clear),
 * or -1 with an error set and nothing held. */
static int strided_buffer(PyObject *buf, Py_buffer *v, struct strided_extents *r)
{
    if (acquire_strided(buf, v, -1) < 0)
        return -1;
    _Static_assert(sizeof(Py_ssize_t) == sizeof(int64_t), "buffer shapes are int64");
    int status = strided_extents(v->buf, 0, v->ndim, (const int64_t *)v->shape,
                                 (const int64_t *)v->strides, 1, (uint64_t)v->itemsize, r);
    if (status == STRIDED_OK)
        return 0;
    PyBuffer_Release(v);
    return buffer_layout_error("", status);
}

/* clear_strided(buf, *, method, threads): a writable strided buffer (a
 * strided array or memoryview Python sent here), its extents one by one as the
 * layout is walked where they are small, else in one job; the buffer held
 * throughout.  Arguments are normalized by Python. */
static const char *const strided_pos[] = {"buf"};

PyObject *fast_clear_strided(PyObject *self, PyObject *const *args, Py_ssize_t nargs,
                             PyObject *kwnames)
{
    (void)self;
    PyObject *buf = NULL, *method = NULL, *threads = NULL;
    struct kw kws[] = {{kw_names[0], &method}, {kw_names[1], &threads}};
    if (parse_args("clear_strided", args, nargs, kwnames, 1, 1, &buf, strided_pos, kws, 2) < 0)
        return NULL;
    int idx, nthreads;
    if (normalized_method_threads("clear_strided", method, threads, &idx, &nthreads) < 0)
        return NULL;
    Py_buffer v;
    if (acquire_strided(buf, &v, -1) < 0)
        return NULL;
    return clear_strided_view(&v, idx, nthreads);
}

/* extents_of(buf) -> (addrs, lens): strided_buffer's extents as two bytes
 * objects of native uint64 each, ascending (clear_many's slow path joins
 * them with its other pieces for clear_extents). */
PyObject *fast_extents_of(PyObject *self, PyObject *buf)
{
    (void)self;
    Py_buffer v;
    struct strided_extents r;
    if (strided_buffer(buf, &v, &r) < 0)
        return NULL;
    PyBuffer_Release(&v);
    size_t n = r.nextents ? r.nextents : r.len != 0;
    PyObject *a = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)(n * 8));
    PyObject *l = a ? PyBytes_FromStringAndSize(NULL, (Py_ssize_t)(n * 8)) : NULL;
    if (l) {
        uint64_t *ap = (uint64_t *)PyBytes_AS_STRING(a), *lp = (uint64_t *)PyBytes_AS_STRING(l);
        for (size_t i = 0; i < n; i++) {
            ap[i] = (uint64_t)(uintptr_t)(r.nextents ? r.addrs[i] : r.base);
            lp[i] = r.nextents ? r.lens[i] : r.len;
        }
    }
    strided_extents_free(&r);
    if (!l) {
        Py_XDECREF(a);
        return NULL;
    }
    return Py_BuildValue("(NN)", a, l);
}

/* ---- pages ------------------------------------------------------------------ */

/* Page indices from a list or tuple, each as array.array('q') reads it (an
 * int or an object with __index__).  Returns a PyMem buffer, or NULL with an
 * exception set: TypeError or PageIndexError naming the position, or
 * whatever an item's __index__ raised. */
static int64_t *indices_from_sequence(PyObject *tuple, Py_ssize_t *count)
{
    Py_ssize_t n = PyTuple_GET_SIZE(tuple);
    int64_t *out = PyMem_Malloc((size_t)(n ? n : 1) * sizeof(int64_t));
    if (!out) {
        PyErr_NoMemory();
        return NULL;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *item = PyTuple_GET_ITEM(tuple, i);
        PyObject *num = PyNumber_Index(item);
        if (!num) {
            if (PyErr_ExceptionMatches(PyExc_TypeError)) {
                PyErr_Clear();
                PyErr_Format(PyExc_TypeError,
                             "pages must be a sequence or buffer of integer page indices; "
                             "item %zd is %s", i, Py_TYPE(item)->tp_name);
            }
            PyMem_Free(out);
            return NULL;
        }
        int overflow;
        long long v = PyLong_AsLongLongAndOverflow(num, &overflow);
        if (overflow) {
            PyErr_Format(page_index_error,
                         "page index %S (position %zd) is outside any buffer "
                         "(beyond the 64-bit range)", num, i);
            Py_DECREF(num);
            PyMem_Free(out);
            return NULL;
        }
        Py_DECREF(num);
        out[i] = v;
    }
    *count = n;
    return out;
}

static int is_int64_format(const Py_buffer *v)
{
    const char *f = v->format ? v->format : "B";
    if (*f == '@' || *f == '=' || *f == '<')
        f++;
    return v->itemsize == 8 && (strcmp(f, "q") == 0 || strcmp(f, "l") == 0);
}

static const char *const pages_pos[] = {"buf", "pages", "page_size"};

#define FEW_PAGES 8

/* The page indices clear_pages was given, held while it runs. */
struct page_list {
    PyObject *snapshot;         /* our tuple of a list or tuple */
    int64_t *owned;             /* its indices */
    Py_buffer pv;               /* or an int64 buffer's */
    int have_pv;
    int64_t few[FEW_PAGES];     /* or a short list's of exact ints */
    const int64_t *list;
    Py_ssize_t count;
};

/* Empty.  Field by field: pv and few are read only once they are filled,
 * and clearing the whole struct (a rep stos) was a tenth of a 4 KiB
 * clear_pages. */
static inline void page_list_init(struct page_list *pl)
{
    pl->snapshot = NULL;
    pl->owned = NULL;
    pl->have_pv = 0;
    pl->list = NULL;
    pl->count = 0;
}

/* A list or tuple of at most FEW_PAGES exact ints, read in place into few:
 * no item's code runs (so none can change the list meanwhile), nothing is
 * allocated.  0 for anything else (no error set). */
static int few_exact_indices(PyObject *seq, int64_t *few, Py_ssize_t *count)
{
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    if (n > FEW_PAGES)
        return 0;
    PyObject **items = PySequence_Fast_ITEMS(seq);
    for (Py_ssize_t i = 0; i < n; i++) {
        int overflow;
        if (!PyLong_CheckExact(items[i]))
            return 0;
        few[i] = PyLong_AsLongLongAndOverflow(items[i], &overflow);
        if (overflow)
            return 0;           /* the general path names it */
    }
    *count = n;
    return 1;
}

/* 1: taken (release with page_list_release); 0: a form Python normalizes
 * (declined); -1 with an error set (an item's, or ours naming it). */
static int page_list_take(PyObject *pages, struct page_list *pl)
{
    page_list_init(pl);
    if (PyList_CheckExact(pages) || PyTuple_CheckExact(pages)) {
        if (few_exact_indices(pages, pl->few, &pl->count)) {
            pl->list = pl->few;
            return 1;
        }
        /* Our own tuple: an item's __index__ may change the caller's list. */
        pl->snapshot = PySequence_Tuple(pages);
        if (!pl->snapshot)
            return -1;
        pl->owned = indices_from_sequence(pl->snapshot, &pl->count);
        pl->list = pl->owned;
        return pl->owned ? 1 : -1;
    }
    if (!PyObject_CheckBuffer(pages))
        return 0;                   /* Python reads other iterables */
    if (PyObject_GetBuffer(pages, &pl->pv, PyBUF_FORMAT | PyBUF_C_CONTIGUOUS) < 0) {
        if (!is_refusal())
            return -1;
        PyErr_Clear();
        return 0;
    }
    pl->have_pv = 1;
    if (!is_int64_format(&pl->pv) || pl->pv.len % 8 || pl->pv.ndim > 1)   /* Python refuses 2-D */
        return 0;
    pl->list = pl->pv.buf;
    pl->count = pl->pv.len / 8;
    return 1;
}

static void page_list_release(struct page_list *pl)
{
    if (pl->have_pv)
        PyBuffer_Release(&pl->pv);
    PyMem_Free(pl->owned);
    Py_XDECREF(pl->snapshot);
    page_list_init(pl);
}

/* The tensor clear_pages clears: 1 with *dv held (a contiguous tensor),
 * 0 when buf is no tensor, -1 with an error set.  Read without an export
 * where the GIL is kept throughout (one thread, a tensor below gil_min:
 * the clear then runs with the GIL, and the pages were read before). */
static int pages_tensor(PyObject *buf, struct dlpack_view *dv, int nthreads)
{
    size_t direct_max = nthreads == 1 ? config.gil_min : 0;
    int got = dlpack_acquire(buf, dv, direct_max);
    if (got > 0 && dv->direct && dv->len >= config.gil_min) {
        dlpack_release(dv);         /* reconfigured meanwhile: exported after all */
        got = dlpack_acquire(buf, dv, 0);
    }
    if (got <= 0)
        return got;
    if (dv->nextents) {
        PyErr_SetString(PyExc_ValueError,
                        "clear_pages needs a contiguous tensor; this one is strided");
    } else if (dv->zero) {
        PyErr_Format(PyExc_TypeError,
                     "the %s requires grad and is not a leaf: autograd records t.zero_() of "
                     "all of it, but no write of some of its pages. Clear its pages inside "
                     "torch.no_grad(), or through t.detach(); it was left unchanged",
                     Py_TYPE(buf)->tp_name);
    } else {
        return 1;
    }
    dlpack_release(dv);
    return -1;
}

/* A writable buffer declined as a simple one (acquire_writable, whose
 * check of its items has passed) that is still one extent: C- or
 * Fortran-contiguous, as nonzero_pages takes it, its pages numbered from
 * its first byte in memory.  0 with *view held; 1 when it is not (or is
 * refused again); -1 with an error set. */
static int acquire_one_extent(PyObject *buf, Py_buffer *view)
{
    if (entry_get_buffer(buf, view, PyBUF_WRITABLE | PyBUF_ANY_CONTIGUOUS) == 0) {
        if (PyBuffer_IsContiguous(view, 'A'))
            return 0;
        PyBuffer_Release(view);
        return 1;
    }
    if (!is_refusal())
        return -1;
    PyErr_Clear();
    return 1;
}

static PyObject *do_clear_pages(PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames,
                                int strict)
{
    PyObject *pos[3] = {NULL, NULL, NULL}, *method = NULL, *threads = NULL;
    struct kw kws[] = {{kw_names[0], &method}, {kw_names[1], &threads}};
    if (parse_args("clear_pages", args, nargs, kwnames, 2, 3, pos, pages_pos, kws, 2) < 0)
        return NULL;
    if (ensure_ready() < 0)
        return NULL;
    PyObject *buf = pos[0], *pages = pos[1], *page_size = pos[2];
    int idx = method_index(method) == DECLINE ? DECLINE : AUTO;
    int nthreads = threads_value(threads);
    size_t psize = page_size_value(page_size, buf);
    if (!psize)
        idx = DECLINE;
    Py_buffer view;
    struct dlpack_view dv;
    struct page_list pl;
    page_list_init(&pl);
    enum { NOTHING, BUFFER, TENSOR } held = NOTHING;
    PyObject *err = NULL, *res = NULL;
    /* decline: an argument, a buffer's refusal (err) or a form of pages
     * that Python explains or normalizes, then calls the _exact form. */
    int got, decline = 0, args_ok = idx != DECLINE && nthreads != DECLINE;
    if (args_ok && !has_buffer(buf) && dlpack_producer(buf)) {
        /* A tensor: its pages counted from the first byte it covers.  The
         * indices first: their __index__ may run any code, and none may
         * run between a read without an export and the write. */
        got = page_list_take(pages, &pl);
        decline = got == 0;
        if (got <= 0)
            goto release;
        got = pages_tensor(buf, &dv, nthreads);
        if (got < 0)
            goto release;
        if (got > 0) {
            held = TENSOR;
            view.buf = dv.base;     /* all a tensor's view is read for */
            view.len = (Py_ssize_t)dv.len;
        }
    }
    if (held == NOTHING) {
        got = acquire_writable(buf, &view, &err, -1);
        if (got > 0 && (got = acquire_one_extent(buf, &view)) == 0)
            Py_CLEAR(err);
        decline = got > 0;
        if (got != 0)
            goto release;
        held = BUFFER;
    }
    decline = !args_ok;
    if (decline)
        goto release;
    if (!pl.list) {
        got = page_list_take(pages, &pl);
        decline = got == 0;
        if (got <= 0)
            goto release;
    }
    if (pl.count == 0) {
        res = Py_NewRef(Py_None);
        goto release;
    }
    int rc;
    if (!debug_hook) {
        /* No Python code runs from here to the write, so the method is
         * looked up now (see below); a few pages of a small buffer are
         * cleared without a job. */
        idx = method_index(method);
        if (idx == DECLINE) {
            decline = 1;
            goto release;
        }
        if (clear_few_pages(view.buf, (size_t)view.len, pl.list, (size_t)pl.count, psize, idx,
                            nthreads)) {
            rc = 0;
            goto written;
        }
    }
    size_t bad = 0;
    struct cp_job *job = native->job_from_pages(view.buf, (size_t)view.len, pl.list,
                                            (size_t)pl.count, psize, &bad);
    if (!job) {
        if (bad >= (size_t)pl.count) {
            PyErr_NoMemory();
        } else {
            size_t n = (size_t)view.len, np = n / psize + (n % psize != 0);
            if (np == 0)
                PyErr_Format(page_index_error,
                             "page index %lld (position %zu) is outside the buffer: it is "
                             "empty, so it has no pages", (long long)pl.list[bad], bad);
            else
                PyErr_Format(page_index_error,
                             "page index %lld (position %zu) is outside the buffer: it has "
                             "%zu page%s of %zu bytes, so indices run from 0 to %lld",
                             (long long)pl.list[bad], bad, np, np == 1 ? "" : "s", psize,
                             (long long)np - 1);
        }
        goto release;
    }
    size_t total = native->job_total(job);
    if (call_debug_hook("acquired", NULL, total) < 0) {
        native->job_free(job);
        goto release;
    }
    /* Only now, after the items' __index__, a __buffer__ and the hook have
     * run (see clear). */
    idx = method_index(method);
    if (idx == DECLINE) {
        native->job_free(job);
        decline = 1;
        goto release;
    }
    rc = run_decided(job, total, (size_t)pl.count, idx, nthreads);
    native->job_free(job);
written:
    if (held == TENSOR)
        rc = views_written(&dv, 1, rc);
    if (rc == 0)
        res = Py_NewRef(Py_None);
release:
    page_list_release(&pl);
    if (held == TENSOR)
        dlpack_release(&dv);
    else if (held == BUFFER)
        PyBuffer_Release(&view);
    if (decline) {
        PyObject *ps = page_size_for_hook(page_size, psize);
        PyObject *hook_args[] = {buf, pages, ps, method, threads, err};
        if (ps)
            res = declined(strict, hook_pages, hook_args, 6, 3);
        Py_XDECREF(ps);
    }
    Py_XDECREF(err);
    return res;
}

ENTRY_PAIR(fast_clear_pages, do_clear_pages)
