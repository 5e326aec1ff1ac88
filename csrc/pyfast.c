/* See pyfast.h. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "adapt.h"
#include "clearpages.h"
#include "pyfast.h"

struct fast_config {
    size_t limit, small, nt;
    cp_clear_fn small_fn, temporal_fn, nt_fn;
};

/* Read and written only with the GIL held. */
static struct fast_config config;

void cp_fast_configure(size_t limit, size_t small, size_t nt,
                       cp_clear_fn small_fn, cp_clear_fn temporal_fn,
                       cp_clear_fn nt_fn)
{
    PyGILState_STATE gil = PyGILState_Ensure();
    config.limit = limit;
    config.small = small;
    config.nt = nt;
    config.small_fn = small_fn;
    config.temporal_fn = temporal_fn;
    config.nt_fn = nt_fn;
    PyGILState_Release(gil);
}

static int route(const struct fast_config *c, size_t n)
{
    if (!c->small_fn || n > c->limit)
        return -1;
    return n >= c->nt ? 2 : n < c->small ? 0 : 1;
}

int cp_fast_route(size_t n)
{
    PyGILState_STATE gil = PyGILState_Ensure();
    struct fast_config c = config;
    PyGILState_Release(gil);
    return route(&c, n);
}

static PyObject *fast_clear(PyObject *self, PyObject *buf)
{
    (void)self;
    Py_buffer view;
    if (PyObject_GetBuffer(buf, &view, PyBUF_WRITABLE) < 0) {
        PyErr_Clear();
        Py_RETURN_FALSE;
    }
    size_t n = (size_t)view.len;
    struct fast_config c = config;
    int r = route(&c, n);
    if (r < 0) {
        PyBuffer_Release(&view);
        Py_RETURN_FALSE;
    }
    cp_clear_fn fn = r == 2 ? c.nt_fn : r == 0 ? c.small_fn : c.temporal_fn;
    void *dst = view.buf;
    /* In the adaptive band the learner chooses, and the clear is timed. */
    int ticket = cp_adapt_choose(n, dst);
    if (ticket >= 0)
        fn = ticket & CP_ADAPT_STREAMING ? c.nt_fn : n < c.small ? c.small_fn : c.temporal_fn;
    Py_BEGIN_ALLOW_THREADS      /* clearing never holds the GIL */
    if (ticket < 0) {
        fn(dst, n);
    } else {
        uint64_t t = cp_adapt_now_ns();
        fn(dst, n);
        cp_adapt_record(n, ticket, cp_adapt_now_ns() - t);
    }
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&view);
    Py_RETURN_TRUE;
}

static PyMethodDef fast_def = {
    "fast_clear", fast_clear, METH_O,
    "fast_clear(buf) -> bool: clear a writable contiguous buffer no larger "
    "than the configured limit; False (nothing written) otherwise.",
};

uintptr_t cp_fast_function(void)
{
    static PyObject *fn;        /* one reference, kept for the process */
    PyGILState_STATE gil = PyGILState_Ensure();
    if (!fn) {
        fn = PyCFunction_New(&fast_def, NULL);
        if (!fn)
            PyErr_Clear();      /* 0: the caller keeps its own path */
    }
    PyGILState_Release(gil);
    return (uintptr_t)fn;
}
