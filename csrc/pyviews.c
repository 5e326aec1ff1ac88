/* See pyviews.h.  Called through cffi, which has released the GIL. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdlib.h>

#include "clearpages.h"
#include "pyviews.h"

struct cp_views {
    size_t n;
    size_t total;
    Py_buffer v[];
};

struct cp_views *cp_views_acquire(uintptr_t seq_addr, size_t *bad)
{
    PyGILState_STATE gil = PyGILState_Ensure();
    PyObject *seq = (PyObject *)seq_addr;
    size_t n = (size_t)PySequence_Fast_GET_SIZE(seq);
    struct cp_views *views = malloc(sizeof(*views) + n * sizeof(Py_buffer));
    if (!views) {
        *bad = n;
        goto out;
    }
    views->n = n;
    views->total = 0;
    for (size_t i = 0; i < n; i++) {
        PyObject *item = PySequence_Fast_GET_ITEM(seq, (Py_ssize_t)i);
        if (PyObject_GetBuffer(item, &views->v[i], PyBUF_WRITABLE) < 0) {
            /* Python explains the refusal itself, item by item. */
            PyErr_Clear();
            *bad = i;
            while (i--)
                PyBuffer_Release(&views->v[i]);
            free(views);
            views = NULL;
            goto out;
        }
        views->total += (size_t)views->v[i].len;
    }
out:
    PyGILState_Release(gil);
    return views;
}

size_t cp_views_count(const struct cp_views *views)
{
    return views->n;
}

size_t cp_views_total(const struct cp_views *views)
{
    return views->total;
}

struct cp_job *cp_views_job(const struct cp_views *views)
{
    size_t n = views->n;
    char **addrs = malloc((n ? n : 1) * sizeof(*addrs));
    size_t *lens = malloc((n ? n : 1) * sizeof(*lens));
    struct cp_job *job = NULL;
    if (addrs && lens) {
        for (size_t i = 0; i < n; i++) {
            addrs[i] = views->v[i].buf;
            lens[i] = (size_t)views->v[i].len;
        }
        job = cp_job_new(addrs, lens, n);
    }
    free(addrs);
    free(lens);
    return job;
}

void cp_views_release(struct cp_views *views)
{
    if (!views)
        return;
    PyGILState_STATE gil = PyGILState_Ensure();
    for (size_t i = 0; i < views->n; i++)
        PyBuffer_Release(&views->v[i]);
    PyGILState_Release(gil);
    free(views);
}

int cp_int64_from_sequence(uintptr_t seq_addr, int64_t *out, size_t n, size_t *bad)
{
    PyGILState_STATE gil = PyGILState_Ensure();
    PyObject *seq = (PyObject *)seq_addr;
    int rc = 0;
    if ((size_t)PySequence_Fast_GET_SIZE(seq) != n) {
        rc = 3;
        goto out;
    }
    for (size_t i = 0; i < n; i++) {
        long long v = PyLong_AsLongLong(PySequence_Fast_GET_ITEM(seq, (Py_ssize_t)i));
        if (v == -1 && PyErr_Occurred()) {
            rc = PyErr_ExceptionMatches(PyExc_OverflowError) ? 2 : 1;
            PyErr_Clear();
            *bad = i;
            goto out;
        }
        out[i] = v;
    }
out:
    PyGILState_Release(gil);
    return rc;
}
