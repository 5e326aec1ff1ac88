/*
 * The argument forms the entries take; anything else is declined and goes
 * to the Python hooks, which explain or normalize it.
 */
#include <string.h>

#include "fast.h"

/* The routine index of a method name, AUTO, or DECLINE (not a str, unknown,
 * "discard", or a routine this machine cannot run). */
int method_index(PyObject *m)
{
    /* The latest name given as another str than the package's own (read
     * from a file or the environment, built by a join), and the package's
     * own it equals: held, so that the same object again is known by its
     * address.  Comparing the text with every name costs a 4 KiB clear's
     * own time (90 ns on the Zen 2 guest); a name reloaded since is no
     * longer the one held, and is compared again. */
    static PyObject *alias, *alias_of;
    if (!m)
        return AUTO;
    PyObject *given = m;
    if (m == alias)
        m = alias_of;
    if (m == s_auto)
        return AUTO;
    for (int i = 0; i < config.n; i++)
        if (m == config.r[i].name)
            return config.r[i].fn ? i : DECLINE;
    if (!PyUnicode_Check(m))
        return DECLINE;
    PyObject *own = NULL;
    int idx = DECLINE;
    if (PyUnicode_Compare(m, s_auto) == 0) {
        own = s_auto;
        idx = AUTO;
    }
    for (int i = 0; !own && i < config.n; i++)
        if (PyUnicode_Compare(m, config.r[i].name) == 0) {
            own = config.r[i].name;
            idx = config.r[i].fn ? i : DECLINE;
        }
    if (PyErr_Occurred())
        PyErr_Clear();
    if (own) {
        Py_INCREF(given);
        Py_INCREF(own);
        Py_XSETREF(alias, given);
        Py_XSETREF(alias_of, own);
    }
    return idx;
}

/* 1..CP_MAX_THREADS, 0 for "auto", DECLINE otherwise (bools and int
 * subclasses too: Python normalizes those). */
int threads_value(PyObject *t)
{
    if (!t)
        return 1;
    if (PyLong_CheckExact(t)) {
        int overflow;
        long v = PyLong_AsLongAndOverflow(t, &overflow);
        return !overflow && v >= 1 && v <= CP_MAX_THREADS ? (int)v : DECLINE;
    }
    if (PyUnicode_Check(t) && PyUnicode_CompareWithASCIIString(t, "auto") == 0)
        return 0;
    return DECLINE;
}

/* method and threads of an entry Python calls with normalized arguments
 * (decide, clear_extents, clear_strided), once the configuration is
 * there: 0 with *idx and *threads set, else -1 with an error set (a
 * ValueError naming fn is a bug: Python normalizes them). */
int normalized_method_threads(const char *fn, PyObject *method, PyObject *threads, int *idx,
                              int *nthreads)
{
    if (ensure_ready() < 0)
        return -1;
    *idx = method_index(method);
    *nthreads = threads_value(threads);
    if (*idx != DECLINE && *nthreads != DECLINE)
        return 0;
    PyErr_Format(PyExc_ValueError, "%s: not a usable method or thread count", fn);
    return -1;
}

/* page_size: not given (NULL or None) a Region's own page size, else
 * DEFAULT_PAGE_SIZE; an exact int from 1 to MAX_SIZE as it is; 0 otherwise
 * (other spellings, "2m" and the like, and bad values: Python reads or
 * refuses those).  The one gate of page_size, for clear_pages and
 * nonzero_pages. */
size_t page_size_value(PyObject *ps, PyObject *buf)
{
    if (!ps || ps == Py_None) {
        size_t own = region_page_size(buf);
        return own ? own : DEFAULT_PAGE_SIZE;
    }
    if (!PyLong_CheckExact(ps))
        return 0;
    int overflow;
    long long v = PyLong_AsLongLongAndOverflow(ps, &overflow);
    return !overflow && v >= 1 && (unsigned long long)v <= MAX_SIZE ? (size_t)v : 0;
}

/* page_size as a declining entry hands it to its Python hook: as given,
 * or (not given) the page size it stands for, so that Python keeps no
 * default of its own; None where there is none (is_zero).  A new
 * reference, NULL with an error set. */
PyObject *page_size_for_hook(PyObject *ps, size_t psize)
{
    if (ps && ps != Py_None)
        return Py_NewRef(ps);
    return psize ? PyLong_FromSize_t(psize) : Py_NewRef(Py_None);
}

PyObject *entry_acquiring;

int entry_get_buffer(PyObject *obj, Py_buffer *view, int flags)
{
    entry_acquiring = obj;
    int rc = PyObject_GetBuffer(obj, view, flags);
    entry_acquiring = NULL;
    return rc;
}

/* Errors that mean "this object has no usable writable buffer" (or "is not
 * an integer"): Python explains those.  Anything else (KeyboardInterrupt,
 * MemoryError, an exception from the object's own code) propagates. */
int is_refusal(void)
{
    return PyErr_ExceptionMatches(PyExc_TypeError)
        || PyErr_ExceptionMatches(PyExc_BufferError)
        || PyErr_ExceptionMatches(PyExc_ValueError);
}

/* Take the pending refusal as its message (a str), clearing it; NULL with
 * the error left set when it is not a refusal. */
PyObject *take_refusal(void)
{
    if (!is_refusal())
        return NULL;
    PyObject *type, *value, *tb;
    PyErr_Fetch(&type, &value, &tb);
    PyObject *msg = value ? PyObject_Str(value) : PyUnicode_FromString("");
    Py_XDECREF(type);
    Py_XDECREF(value);
    Py_XDECREF(tb);
    return msg;
}

const char *const kw_names[] = {"method", "threads", "hot", "page_size", NULL};
PyObject *kw_objects[4];

static PyObject *interned_kw(const char *name)
{
    for (int i = 0; kw_names[i]; i++)
        if (kw_names[i] == name)
            return kw_objects[i];
    return NULL;
}

/* The same for a positional parameter's name, which may be one of them
 * (page_size) spelled by another literal. */
static PyObject *interned_name(const char *name)
{
    for (int i = 0; kw_names[i]; i++)
        if (strcmp(kw_names[i], name) == 0)
            return kw_objects[i];
    return NULL;
}

int parse_args(const char *fn, PyObject *const *args, Py_ssize_t nargs,
               PyObject *kwnames, int nreq, int npos, PyObject **pos,
               const char *const *posnames, struct kw *kws, int nkw)
{
    if (nargs > npos) {
        if (nreq < npos)
            PyErr_Format(PyExc_TypeError, "%s() takes from %d to %d positional arguments "
                         "but %zd were given", fn, nreq, npos, nargs);
        else
            PyErr_Format(PyExc_TypeError, "%s() takes %d positional argument%s but %zd "
                         "were given", fn, npos, npos == 1 ? "" : "s", nargs);
        return -1;
    }
    for (Py_ssize_t i = 0; i < nargs; i++)
        pos[i] = args[i];
    Py_ssize_t nk = kwnames ? PyTuple_GET_SIZE(kwnames) : 0;
    for (Py_ssize_t k = 0; k < nk; k++) {
        PyObject *key = PyTuple_GET_ITEM(kwnames, k), *value = args[nargs + k];
        int found = 0;
        /* Keyword names at a call site are interned constants: the same
         * objects as ours, so a pointer test finds them. */
        for (int j = 0; j < nkw && !found; j++)
            if (key == interned_kw(kws[j].name)) {
                *kws[j].slot = value;
                found = 1;
            }
        for (int j = 0; j < nkw && !found; j++)
            if (PyUnicode_CompareWithASCIIString(key, kws[j].name) == 0) {
                *kws[j].slot = value;
                found = 1;
            }
        for (int j = 0; j < npos && !found; j++)
            if (key == interned_name(posnames[j])
                || PyUnicode_CompareWithASCIIString(key, posnames[j]) == 0) {
                if (pos[j]) {
                    PyErr_Format(PyExc_TypeError, "%s() got multiple values for argument '%s'",
                                 fn, posnames[j]);
                    return -1;
                }
                pos[j] = value;
                found = 1;
            }
        if (!found) {
            PyErr_Format(PyExc_TypeError, "%s() got an unexpected keyword argument '%U'",
                         fn, key);
            return -1;
        }
    }
    for (int j = 0; j < nreq; j++)
        if (!pos[j]) {
            PyErr_Format(PyExc_TypeError, "%s() missing required argument '%s'",
                         fn, posnames[j]);
            return -1;
        }
    return 0;
}

/* ---- buffers whose items hold references ------------------------------------- */

/* 1 when a buffer format (PEP 3118, struct syntax) has an item that is a
 * Python object reference ('O'): numpy object arrays, structured dtypes
 * with an object field.  Field names sit between colons and are skipped.
 * A plain "B" costs two loads. */
static int format_holds_references(const char *f)
{
    if (!f)
        return 0;
    for (; *f; f++) {
        if (*f == 'O')
            return 1;
        if (*f == ':') {
            f = strchr(f + 1, ':');
            if (!f)
                return 0;
        }
    }
    return 0;
}

/* An exporter that cannot state a format (numpy's datetime64) holds no
 * references if it says so itself: numpy's dtype.hasobject. */
static int object_holds_references(PyObject *obj)
{
    PyObject *dtype = PyObject_GetAttrString(obj, "dtype");
    if (!dtype) {
        PyErr_Clear();
        return 0;
    }
    PyObject *has = PyObject_GetAttrString(dtype, "hasobject");
    Py_DECREF(dtype);
    if (!has) {
        PyErr_Clear();
        return 0;
    }
    int r = PyObject_IsTrue(has);
    Py_DECREF(has);
    return r;
}

/* 1 when a buffer is one pointer and no array of them (0 dimensions, a
 * PEP 3118 pointer format: '&' before the pointee's, or a void, char or
 * wchar_t pointer): a ctypes pointer object, c_void_p, c_char_p.  Its
 * bytes are the pointer itself; whoever clears ctypes.pointer(x) means x. */
static int lone_pointer(const Py_buffer *view)
{
    const char *f = view->format;
    if (view->ndim != 0 || !f)
        return 0;
    if (*f == '<' || *f == '>' || *f == '@' || *f == '=' || *f == '!')
        f++;
    return *f == '&' || ((*f == 'P' || *f == 'z' || *f == 'Z') && !f[1]);
}

/* The TypeError of a refused buffer: why (a format with one %s, the
 * type's name), after the piece of clear_many where index >= 0.  -1. */
static int refuse(PyObject *obj, Py_ssize_t index, const char *why)
{
    PyObject *msg = PyUnicode_FromFormat(why, Py_TYPE(obj)->tp_name);
    if (msg) {
        if (index >= 0)
            PyErr_Format(PyExc_TypeError, "clear_many: buffer %zd: %U", index, msg);
        else
            PyErr_SetObject(PyExc_TypeError, msg);
        Py_DECREF(msg);
    }
    return -1;
}

/* A buffer's format (and dimensions) refused for clearing: its items hold
 * references, or it is a lone pointer.  -1 with the TypeError that says
 * so, else 0. */
static int refuse_format(PyObject *obj, const Py_buffer *view, Py_ssize_t index)
{
    if (format_holds_references(view->format))
        return refuse_references(obj, index);
    if (lone_pointer(view))
        return refuse(obj, index, POINTER_REFUSAL);
    return 0;
}

int refuse_references(PyObject *obj, Py_ssize_t index)
{
    return refuse(obj, index, REFERENCES_REFUSAL);
}

/* numpy.ndarray, where numpy is imported (never imported here): held once
 * found.  An exception pending is kept as it was. */
static PyTypeObject *numpy_ndarray(void)
{
    static PyTypeObject *type;
    if (type)
        return type;
    PyObject *et, *ev, *tb;
    PyErr_Fetch(&et, &ev, &tb);
    PyObject *name = PyUnicode_FromString("numpy");
    PyObject *np = name ? PyImport_GetModule(name) : NULL;
    Py_XDECREF(name);
    PyObject *t = np ? PyObject_GetAttrString(np, "ndarray") : NULL;
    Py_XDECREF(np);
    if (t && PyType_Check(t))
        type = (PyTypeObject *)t;
    else
        Py_XDECREF(t);
    PyErr_Clear();
    PyErr_Restore(et, ev, tb);
    return type;
}

static int acquire(PyObject *obj, Py_buffer *view, PyObject **err, Py_ssize_t index,
                   int *strided);

int acquire_writable(PyObject *obj, Py_buffer *view, PyObject **err, Py_ssize_t index)
{
    return acquire(obj, view, err, index, NULL);
}

int acquire_writable_or_strided(PyObject *obj, Py_buffer *view, PyObject **err, int *strided)
{
    *strided = 0;
    return acquire(obj, view, err, -1, strided);
}

/* A buffer taken with its format: 0, still held, where its items hold no
 * references and it is no lone pointer; else -1, released, with the
 * TypeError that says why (refuse_format). */
static int held_unless_references(PyObject *obj, Py_buffer *view, Py_ssize_t index)
{
    if (refuse_format(obj, view, index) == 0)
        return 0;
    PyBuffer_Release(view);
    return -1;
}

/* An item that holds a reference is at least a pointer wide: the bytes of
 * a bytearray, an mmap, a Region or a uint8 array (the per-call path) are
 * taken without asking the exporter for a format (numpy spends ~20 ns a
 * call building one); wider items are asked with it too, at once where the
 * type's latest objects had them. */
static int acquire(PyObject *obj, Py_buffer *view, PyObject **err, Py_ssize_t index,
                   int *strided)
{
    /* The type whose latest objects had items as wide as a pointer, which
     * may be references, and how many of them in a row: from the second,
     * its next object is asked for its format at once.  Asking a second
     * time cost a float64 array's clear 85 ns (numpy, Zen 2 guest), a third
     * of a small one; asking every buffer at once cost a uint8 array's 22
     * ns (numpy builds the format string), and asking at once after one
     * wide object cost a program that alternates the two more than it
     * saved.  Only which request comes first depends on it: wide items are
     * always checked. */
    static PyTypeObject *wide_type;
    static int wide_run;
    /* The same for strided views: the type (numpy's ndarray, memoryview)
     * whose latest objects were strided, from the second in a row: its
     * next object is asked for its strides at once.  The contiguous request
     * a strided view refuses cost a column of a small matrix 170 ns, the
     * refusal's exception made and cleared (a column of 16 float64: 285 ns
     * against numpy's fill's 114, Intel guest). */
    static PyTypeObject *strided_type;
    static int strided_run;
    *err = NULL;
    if (strided && Py_TYPE(obj) == strided_type && strided_run >= 2) {
        if (acquire_strided(obj, view, index) == 0) {
            *strided = !PyBuffer_IsContiguous(view, 'C');
            if (!*strided)
                strided_run = 0;    /* contiguous after all: as usual next time */
            return 0;
        }
        if (!is_refusal())
            return -1;
        PyErr_Clear();          /* as below */
    }
    if (Py_TYPE(obj) == wide_type && wide_run >= 2) {
        if (entry_get_buffer(obj, view, PyBUF_WRITABLE | PyBUF_FORMAT) == 0) {
            if (view->itemsize < (Py_ssize_t)sizeof(PyObject *)) {
                wide_run = 0;
                return 0;
            }
            return held_unless_references(obj, view, index);
        }
        if (!is_refusal())
            return -1;
        PyErr_Clear();      /* no format to state (numpy's datetime64): as below */
    }
    if (entry_get_buffer(obj, view, PyBUF_WRITABLE) == 0) {
        if (Py_TYPE(obj) == strided_type)
            strided_run = 0;
        if (__builtin_expect(view->itemsize < (Py_ssize_t)sizeof(PyObject *), 1)) {
            if (Py_TYPE(obj) == wide_type)
                wide_run = 0;
            return 0;
        }
        wide_run = Py_TYPE(obj) == wide_type ? wide_run + 1 : 1;
        wide_type = Py_TYPE(obj);
        /* Wider items: the same buffer again, with its format. */
        PyBuffer_Release(view);
        if (entry_get_buffer(obj, view, PyBUF_WRITABLE | PyBUF_FORMAT) == 0)
            return held_unless_references(obj, view, index);
        if (!is_refusal())
            return -1;
        PyErr_Clear();          /* no format to state (numpy's datetime64) */
        if (check_references(obj, index) < 0)
            return -1;
        if (entry_get_buffer(obj, view, PyBUF_WRITABLE) == 0)
            return 0;
    }
    if (!is_refusal())
        return -1;
    PyTypeObject *nd;
    if (strided && (PyMemoryView_Check(obj)
                    || ((nd = numpy_ndarray()) && PyObject_TypeCheck(obj, nd)))) {
        /* A numpy array in Fortran order, a strided view of one or a strided
         * memoryview, taken as it is: through Python's explanation of the
         * refusal, a small one cost 4-5 us, 3-5x numpy's own fill (Zen 2
         * guest).  (Another exporter's strided buffer comes back from
         * Python, to fast_clear_strided.) */
        PyErr_Clear();
        if (acquire_strided(obj, view, index) == 0) {
            strided_run = Py_TYPE(obj) == strided_type ? strided_run + 1 : 1;
            strided_type = Py_TYPE(obj);
            *strided = 1;
            return 0;
        }
        if (!is_refusal())
            return -1;
    }
    /* Declined (strided, read-only, not a buffer): Python clears a strided
     * numpy array run by run, so its items are checked here first. */
    *err = take_refusal();
    if (!*err)
        return -1;
    if (check_references(obj, index) < 0) {
        Py_CLEAR(*err);
        return -1;
    }
    return 1;
}

int acquire_strided(PyObject *obj, Py_buffer *view, Py_ssize_t index)
{
    if (entry_get_buffer(obj, view, PyBUF_RECORDS) == 0)
        return view->itemsize >= (Py_ssize_t)sizeof(PyObject *)
                   ? held_unless_references(obj, view, index) : 0;
    if (!is_refusal())
        return -1;
    /* No format to state (numpy's datetime64), or no writable buffer at
     * all: asked again without the format; where that is refused too, the
     * first refusal stands. */
    PyObject *et, *ev, *tb;
    PyErr_Fetch(&et, &ev, &tb);
    int got = entry_get_buffer(obj, view, PyBUF_STRIDES | PyBUF_WRITABLE);
    if (got < 0 && is_refusal()) {
        PyErr_Clear();
        PyErr_Restore(et, ev, tb);
        return -1;
    }
    Py_XDECREF(et);
    Py_XDECREF(ev);
    Py_XDECREF(tb);
    if (got < 0)
        return -1;
    if (check_references(obj, index) < 0) {
        PyBuffer_Release(view);
        return -1;
    }
    return 0;
}

/* Any buffer obj exports, strided or read-only, with its format; where it
 * cannot state one (numpy's datetime64), what obj says of itself. */
int check_references(PyObject *obj, Py_ssize_t index)
{
    Py_buffer v;
    if (PyObject_GetBuffer(obj, &v, PyBUF_RECORDS_RO) < 0) {
        if (!is_refusal())
            return -1;
        PyErr_Clear();
        int has = object_holds_references(obj);
        return has < 0 ? -1 : has ? refuse_references(obj, index) : 0;
    }
    int r = refuse_format(obj, &v, index);
    PyBuffer_Release(&v);
    return r;
}

/* check_items(obj, index=-1): raise the refusal if obj's items hold
 * references (the Python path of clear_many asks for each piece). */
PyObject *fast_check_items(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *obj;
    Py_ssize_t index = -1;
    if (!PyArg_ParseTuple(args, "O|n", &obj, &index))
        return NULL;
    if (check_references(obj, index) < 0)
        return NULL;
    Py_RETURN_NONE;
}
