/*
 * clearpages._fast: the CPython face of the native code.
 *
 * One entry per public call (clear, clear_many, clear_pages): arguments
 * parsed, buffers acquired with PyObject_GetBuffer, the routine chosen from
 * the routing that Python configured (configure()), the routine called or a
 * job built and run in time slices, and every buffer released, all inside
 * one C call.  Nothing is owned by Python between two native steps, so a
 * signal handler that raises cannot strand a buffer export or a job.  What
 * this code declines (an unknown method, a read-only or strided buffer, an
 * odd argument type) goes to a Python function registered with set_hooks(),
 * which explains the refusal with the package's messages or normalizes the
 * arguments and calls back in.
 *
 * The routines, jobs and region system calls live once in the cffi module
 * clearpages._native; this module resolves them from it with dlsym (the
 * module is already loaded: dlopen finds it, nothing is loaded twice), so
 * the assembly is assembled and linked once and no address passes through
 * Python.
 *
 * Also here: RegionMemory, the base type of clearpages.Region, which owns
 * one mapping, exports it as a buffer itself and counts the exports, so
 * resize/move/close can refuse while any is live.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <pythread.h>

#include <dlfcn.h>
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "adapt.h"
#include "clearpages.h"
#include "region.h"

#if PY_VERSION_HEX < 0x030A0000
static inline PyObject *Py_NewRef(PyObject *o)
{
    Py_INCREF(o);
    return o;
}
#endif

#define MAX_ROUTINES 16
#define SPLIT 4096u

/* ---- what _native provides ----------------------------------------------- */

static struct native {
    void *handle;
    const struct cp_routine_entry *routines;
    struct cp_job *(*job_new)(char *const *, const size_t *, size_t);
    struct cp_job *(*job_from_pages)(char *, size_t, const int64_t *, size_t,
                                     size_t, size_t *);
    int (*job_configure)(struct cp_job *, cp_clear_fn, size_t, int, int);
    int (*job_run)(struct cp_job *, uint64_t);
    size_t (*job_total)(const struct cp_job *);
    void (*job_free)(struct cp_job *);
    int (*region_map)(size_t, size_t, int, int, uintptr_t *);
    int (*region_unmap)(uintptr_t, size_t);
    int (*region_discard)(uintptr_t, size_t);
    int (*region_resize)(uintptr_t, size_t, size_t, int, int, size_t, uintptr_t *);
    int (*region_move_to)(uintptr_t, size_t, size_t, uintptr_t);
    int (*region_move_congruent)(uintptr_t, size_t, size_t, size_t, size_t,
                                 uintptr_t *);
    int (*job_error)(const struct cp_job *);          /* optional */
    /* Adaptive auto (csrc/adapt.h), optional: choose(n, addr) -> a ticket,
     * < 0 for the static choice, else ticket & 1 is the arm (1: streaming);
     * record(n, ticket, ns). */
    const struct cp_adapt_api *adapt;
} nat;

/* ---- the routing Python configured --------------------------------------- */

struct routine {
    PyObject *name;             /* interned str */
    cp_clear_fn fn;             /* NULL: not usable here (unbuilt, masked) */
    cp_clear_fn job_fn;         /* the unfenced entry for jobs, else fn */
    int fence;                  /* job_fn needs one sfence per thread */
    int temporal;
};

static struct config {
    int ready;
    int n;
    struct routine r[MAX_ROUTINES];
    int small, temporal, streaming, forced;   /* indices; forced -1: none */
    size_t vector_max, nt_min, chunk, thread_min, gil_min;
    int most_threads;
    uint64_t slice_ns;
    size_t adapt_lo, adapt_hi;                 /* lo >= hi, or no learner: off */
    int long_idx;                              /* -1: none */
    size_t long_min;
} cfg;

static PyObject *s_auto;            /* "auto", interned */
static PyObject *one;               /* 1, the default thread count */
static PyObject *default_page_size; /* 4096 */
static PyObject *hook_init;         /* () -> None: build the state, configure */
static PyObject *hook_clear;        /* (buf, method, threads, hot, err) */
static PyObject *hook_many;         /* (seq, method, threads, bad) */
static PyObject *hook_pages;        /* (buf, pages, page_size, method, threads, err) */
static PyObject *page_index_error;  /* clearpages.PageIndexError */
static PyObject *debug_hook;        /* tests: called before every slice */

/* The routine "auto" runs for nbytes in count pieces: the mirror of
 * clearpages._policy.Routing.pick, from the numbers it configured. */
static int route(size_t nbytes, size_t count, int threads)
{
    if (cfg.forced >= 0)
        return cfg.forced;
    if (nbytes >= cfg.nt_min) {
        if (cfg.long_idx >= 0 && threads == 1 && count && nbytes / count >= cfg.long_min)
            return cfg.long_idx;
        return cfg.streaming;
    }
    if ((count ? nbytes / count : 0) < cfg.vector_max)
        return cfg.small;
    return cfg.temporal;
}

static int auto_threads(size_t nbytes)
{
    size_t most = (size_t)cfg.most_threads, half = cfg.thread_min / 2;
    if (most <= 1 || nbytes < cfg.thread_min)
        return 1;
    size_t t = nbytes / (half ? half : 1);
    return (int)(t < 1 ? 1 : t > most ? most : t);
}

static size_t chunk_for(size_t nbytes, int threads)
{
    if (threads <= 1)
        return cfg.chunk;
    size_t share = (nbytes + 4 * (size_t)threads - 1) / (4 * (size_t)threads);
    share = (share + SPLIT - 1) / SPLIT * SPLIT;
    if (share > cfg.chunk)
        share = cfg.chunk;
    return share < SPLIT ? SPLIT : share;
}

static int ensure_ready(void)
{
    if (cfg.ready)
        return 0;
    if (!hook_init) {
        PyErr_SetString(PyExc_RuntimeError, "clearpages._fast is not configured");
        return -1;
    }
    PyObject *r = PyObject_CallNoArgs(hook_init);
    if (!r)
        return -1;
    Py_DECREF(r);
    if (!cfg.ready) {
        PyErr_SetString(PyExc_RuntimeError, "clearpages._fast is not configured");
        return -1;
    }
    return 0;
}

/* ---- argument forms this code takes; anything else is declined ---------- */

enum { AUTO = -1, DECLINE = -2 };

/* The routine index of a method name, AUTO, or DECLINE (not a str, unknown,
 * "discard", or a routine this machine cannot run). */
static int method_index(PyObject *m)
{
    if (!m || m == s_auto)
        return AUTO;
    for (int i = 0; i < cfg.n; i++)
        if (m == cfg.r[i].name)
            return cfg.r[i].fn ? i : DECLINE;
    if (!PyUnicode_Check(m))
        return DECLINE;
    if (PyUnicode_Compare(m, s_auto) == 0)
        return AUTO;
    for (int i = 0; i < cfg.n; i++)
        if (PyUnicode_Compare(m, cfg.r[i].name) == 0)
            return cfg.r[i].fn ? i : DECLINE;
    return DECLINE;
}

/* 1..CP_MAX_THREADS, 0 for "auto", DECLINE otherwise (bools and int
 * subclasses too: Python normalizes those). */
static int threads_value(PyObject *t)
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

/* Errors that mean "this object has no usable writable buffer" (or "is not
 * an integer"): Python explains those.  Anything else (KeyboardInterrupt,
 * MemoryError, an exception from the object's own code) propagates. */
static int is_refusal(void)
{
    return PyErr_ExceptionMatches(PyExc_TypeError)
        || PyErr_ExceptionMatches(PyExc_BufferError)
        || PyErr_ExceptionMatches(PyExc_ValueError);
}

/* Take the pending refusal as its message (a str), clearing it; NULL with
 * the error left set when it is not a refusal. */
static PyObject *take_refusal(void)
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

/* The keyword names, interned once (PyInit__fast). */
static const char *const kw_names[] = {"method", "threads", "hot", "page_size", NULL};
static PyObject *kw_objects[4];

static PyObject *interned_kw(const char *name)
{
    for (int i = 0; kw_names[i]; i++)
        if (kw_names[i] == name)
            return kw_objects[i];
    return NULL;
}

/* Keyword arguments of a vectorcall, by name. */
struct kw {
    const char *name;
    PyObject **slot;
};

static int parse(const char *fn, PyObject *const *args, Py_ssize_t nargs,
                 PyObject *kwnames, int npos, PyObject **pos, const char *const *posnames,
                 struct kw *kws, int nkw)
{
    if (nargs > npos) {
        PyErr_Format(PyExc_TypeError, "%s() takes %d positional argument%s but %zd were given",
                     fn, npos, npos == 1 ? "" : "s", nargs);
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
            if (PyUnicode_CompareWithASCIIString(key, posnames[j]) == 0) {
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
    for (int j = 0; j < npos; j++)
        if (!pos[j]) {
            PyErr_Format(PyExc_TypeError, "%s() missing required argument '%s'",
                         fn, posnames[j]);
            return -1;
        }
    return 0;
}

/* ---- running ------------------------------------------------------------- */

/* Tests see each step: hook(where, routine or None, nbytes), where is
 * "acquired" (every buffer held), "slice" (before each slice of a job) or
 * "call" (before a direct call).  One NULL test when no hook is set. */
static int call_debug_hook(const char *where, int idx, size_t n)
{
    if (!debug_hook)
        return 0;
    PyObject *r = PyObject_CallFunction(debug_hook, "sOn", where,
                                        idx >= 0 ? cfg.r[idx].name : Py_None, (Py_ssize_t)n);
    if (!r)
        return -1;
    Py_DECREF(r);
    return 0;
}

/* Run a job to the end in slices; between slices, with the GIL, signal
 * handlers run and may raise (then the job stops: the caller frees it and
 * releases its buffers).  Small jobs keep the GIL. */
static int run_job(struct cp_job *job, int idx, int threads, size_t chunk, size_t total)
{
    const struct routine *r = &cfg.r[idx];
    if (nat.job_configure(job, r->job_fn, chunk, threads, r->fence) != 0) {
        PyErr_Format(PyExc_ValueError, "bad job configuration: %U, %d threads",
                     r->name, threads);
        return -1;
    }
    uint64_t slice = cfg.slice_ns;
    int release = threads > 1 || total >= cfg.gil_min;
    for (;;) {
        if (call_debug_hook("slice", idx, total) < 0)
            return -1;
        int rc;
        if (release) {
            Py_BEGIN_ALLOW_THREADS
            rc = nat.job_run(job, slice);
            Py_END_ALLOW_THREADS
        } else {
            rc = nat.job_run(job, slice);
        }
        if (rc == 1)
            return 0;
        if (rc < 0) {
            int err = nat.job_error ? nat.job_error(job) : 0;
            if (err) {
                PyObject *e = PyObject_CallFunction(
                    PyExc_OSError, "iN", err, PyUnicode_FromFormat(
                        "clearpages: cannot start the worker threads asked for (%s); "
                        "the buffer is partly cleared", strerror(err)));
                if (e) {
                    PyErr_SetObject(PyExc_OSError, e);
                    Py_DECREF(e);
                }
            } else {
                PyErr_SetString(PyExc_RuntimeError, "clearpages: the native job failed; "
                                "the buffer is partly cleared");
            }
            return -1;
        }
        if (PyErr_CheckSignals() < 0)
            return -1;
    }
}

static int call_routine(int idx, void *dst, size_t n)
{
    cp_clear_fn fn = cfg.r[idx].fn;
    if (debug_hook && call_debug_hook("call", idx, n) < 0)
        return -1;
    if (n >= cfg.gil_min) {
        Py_BEGIN_ALLOW_THREADS
        fn(dst, n);
        Py_END_ALLOW_THREADS
    } else {
        fn(dst, n);
    }
    return 0;
}

/* Clear one extent with routine idx (or "auto": idx AUTO) on threads
 * (0: "auto").  In the adaptive band a single-threaded auto clear asks the
 * learner for the routine and reports its time. */
static int clear_extent(char *dst, size_t n, int idx, int threads)
{
    if (threads == 0)
        threads = auto_threads(n);
    int ticket = -1;
    if (idx == AUTO) {
        idx = route(n, 1, threads);
        if (threads == 1 && n >= cfg.adapt_lo && n < cfg.adapt_hi && cfg.forced < 0) {
            ticket = nat.adapt->choose(n, dst);
            if (ticket >= 0)
                idx = ticket & CP_ADAPT_STREAMING ? cfg.streaming
                    : n < cfg.vector_max ? cfg.small : cfg.temporal;
        }
    }
    uint64_t t0 = ticket >= 0 ? nat.adapt->now_ns() : 0;
    int rc;
    if (threads == 1 && n <= cfg.chunk) {
        rc = call_routine(idx, dst, n);
    } else if (n == 0) {
        rc = 0;
    } else {
        struct cp_job *job = nat.job_new(&dst, &n, 1);
        if (!job) {
            PyErr_NoMemory();
            return -1;
        }
        rc = run_job(job, idx, threads, chunk_for(n, threads), n);
        nat.job_free(job);
    }
    if (ticket >= 0 && rc == 0)
        nat.adapt->record(n, ticket, nat.adapt->now_ns() - t0);
    return rc;
}

/* The job over [base, base + n) without [start, stop), cleared with the
 * cold routine; then [start, stop) with the hot one (ordinary stores, last,
 * so it is in cache for the caller). */
static int clear_with_hot(char *base, size_t n, size_t start, size_t stop, int idx,
                          int threads)
{
    int cold, hot;
    if (cfg.forced >= 0) {
        cold = hot = cfg.forced;
    } else if (idx == AUTO) {
        /* The mirror of clearpages._policy.Routing.hot. */
        cold = cfg.streaming;
        hot = route(stop - start, 1, 1);
        if (hot == cfg.streaming && !cfg.r[hot].temporal)
            hot = cfg.temporal;
    } else {
        cold = idx;
        hot = cfg.r[idx].temporal ? idx : cfg.temporal;
    }
    size_t cold_n = n - (stop - start);
    if (threads == 0)
        threads = auto_threads(cold_n);
    char *addrs[2] = {base, base + stop};
    size_t lens[2] = {start, n - stop};
    if (cold_n) {
        struct cp_job *job = nat.job_new(addrs, lens, 2);
        if (!job) {
            PyErr_NoMemory();
            return -1;
        }
        int rc = run_job(job, cold, threads, chunk_for(cold_n, threads), cold_n);
        nat.job_free(job);
        if (rc < 0)
            return -1;
    }
    if (stop > start) {
        if (stop - start <= cfg.chunk)
            return call_routine(hot, base + start, stop - start);
        return clear_extent(base + start, stop - start, hot, 1);
    }
    return 0;
}

/* ---- clear ---------------------------------------------------------------- */

static const char *const clear_pos[] = {"buf"};

/* strict: called back from Python with normalized arguments, so declining
 * again would be a bug, not a refusal to explain. */
static PyObject *do_clear(PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames,
                          int strict)
{
    PyObject *buf = NULL, *method = NULL, *threads = NULL, *hot = NULL;
    struct kw kws[] = {{kw_names[0], &method}, {kw_names[1], &threads}, {kw_names[2], &hot}};
    if (parse("clear", args, nargs, kwnames, 1, &buf, clear_pos, kws, 3) < 0)
        return NULL;
    if (ensure_ready() < 0)
        return NULL;
    if (hot == Py_None)
        hot = NULL;
    int idx = method_index(method);
    int nthreads = threads_value(threads);
    Py_buffer view;
    PyObject *err = NULL;
    if (PyObject_GetBuffer(buf, &view, PyBUF_WRITABLE) < 0) {
        err = take_refusal();
        if (!err)
            return NULL;
        goto decline;
    }
    if (idx == DECLINE || nthreads == DECLINE)
        goto release_decline;
    size_t n = (size_t)view.len;
    char *base = view.buf;
    int rc;
    if (debug_hook && call_debug_hook("acquired", -1, n) < 0) {
        PyBuffer_Release(&view);
        return NULL;
    }
    if (!hot) {
        rc = clear_extent(base, n, idx, nthreads);
    } else {
        Py_ssize_t start, stop;
        if (!PyTuple_CheckExact(hot) || PyTuple_GET_SIZE(hot) != 2
            || !PyLong_CheckExact(PyTuple_GET_ITEM(hot, 0))
            || !PyLong_CheckExact(PyTuple_GET_ITEM(hot, 1)))
            goto release_decline;
        start = PyLong_AsSsize_t(PyTuple_GET_ITEM(hot, 0));
        stop = start == -1 && PyErr_Occurred() ? -1
             : PyLong_AsSsize_t(PyTuple_GET_ITEM(hot, 1));
        if (PyErr_Occurred()) {
            if (!PyErr_ExceptionMatches(PyExc_OverflowError)) {
                PyBuffer_Release(&view);
                return NULL;
            }
            PyErr_Clear();
            goto release_decline;
        }
        if (start < 0 || start > stop || (size_t)stop > n)
            goto release_decline;
        rc = clear_with_hot(base, n, (size_t)start, (size_t)stop, idx, nthreads);
    }
    PyBuffer_Release(&view);
    if (rc < 0)
        return NULL;
    Py_RETURN_NONE;

release_decline:
    PyBuffer_Release(&view);
decline:
    if (strict) {
        Py_XDECREF(err);
        PyErr_SetString(PyExc_SystemError, "clearpages: normalized arguments declined");
        return NULL;
    }
    PyObject *res = PyObject_CallFunctionObjArgs(
        hook_clear, buf, method ? method : s_auto, threads ? threads : one,
        hot ? hot : Py_None, err ? err : Py_None, NULL);
    Py_XDECREF(err);
    return res;
}

static PyObject *fast_clear(PyObject *self, PyObject *const *args, Py_ssize_t nargs,
                            PyObject *kwnames)
{
    (void)self;
    return do_clear(args, nargs, kwnames, 0);
}

static PyObject *fast_clear_exact(PyObject *self, PyObject *const *args, Py_ssize_t nargs,
                                  PyObject *kwnames)
{
    (void)self;
    return do_clear(args, nargs, kwnames, 1);
}

/* ---- many buffers ----------------------------------------------------------- */

struct views {
    Py_buffer *v;
    Py_ssize_t n;       /* acquired so far */
};

static void views_release(struct views *vs)
{
    for (Py_ssize_t i = 0; i < vs->n; i++)
        PyBuffer_Release(&vs->v[i]);
    PyMem_Free(vs->v);
    vs->v = NULL;
    vs->n = 0;
}

/* Run a job over n extents (routing by their total, as one piece of work). */
static int clear_extents(char **addrs, size_t *lens, size_t n, size_t total, int idx,
                         int threads)
{
    if (n == 0)
        return 0;
    if (threads == 0)
        threads = auto_threads(total);
    if (idx == AUTO)
        idx = route(total, n, threads);
    struct cp_job *job = nat.job_new(addrs, lens, n);
    if (!job) {
        PyErr_NoMemory();
        return -1;
    }
    int rc = run_job(job, idx, threads, chunk_for(total, threads), total);
    nat.job_free(job);
    return rc;
}

static const char *const many_pos[] = {"bufs"};

static PyObject *do_clear_many(PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames,
                               int strict)
{
    PyObject *bufs = NULL, *method = NULL, *threads = NULL;
    struct kw kws[] = {{kw_names[0], &method}, {kw_names[1], &threads}};
    if (parse("clear_many", args, nargs, kwnames, 1, &bufs, many_pos, kws, 2) < 0)
        return NULL;
    if (ensure_ready() < 0)
        return NULL;
    /* Our own tuple of the items (strong references): an item's __buffer__
     * or __index__ may change the caller's list while we walk it. */
    PyObject *seq = PySequence_Tuple(bufs);
    if (!seq)
        return NULL;
    int idx = method_index(method), nthreads = threads_value(threads);
    PyObject *bad = NULL, *res = NULL;
    struct views vs = {NULL, 0};
    if (idx == DECLINE || nthreads == DECLINE)
        goto decline;
    Py_ssize_t n = PyTuple_GET_SIZE(seq);
    vs.v = PyMem_Malloc((size_t)(n ? n : 1) * sizeof(Py_buffer));
    char **addrs = PyMem_Malloc((size_t)(n ? n : 1) * sizeof(char *));
    size_t *lens = PyMem_Malloc((size_t)(n ? n : 1) * sizeof(size_t));
    if (!vs.v || !addrs || !lens) {
        PyErr_NoMemory();
        goto fail;
    }
    size_t total = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (PyObject_GetBuffer(PyTuple_GET_ITEM(seq, i), &vs.v[i], PyBUF_WRITABLE) < 0) {
            PyObject *msg = take_refusal();
            if (!msg)
                goto fail;
            bad = Py_BuildValue("(nN)", i, msg);
            if (!bad)
                goto fail;
            PyMem_Free(addrs);
            PyMem_Free(lens);
            views_release(&vs);
            goto decline;
        }
        vs.n = i + 1;
        addrs[i] = vs.v[i].buf;
        lens[i] = (size_t)vs.v[i].len;
        total += lens[i];
    }
    if (call_debug_hook("acquired", -1, total) == 0
        && clear_extents(addrs, lens, (size_t)n, total, idx, nthreads) == 0)
        res = Py_NewRef(Py_None);
fail:
    PyMem_Free(addrs);
    PyMem_Free(lens);
    views_release(&vs);
    Py_DECREF(seq);
    return res;

decline:
    if (strict) {
        PyErr_SetString(PyExc_SystemError, "clearpages: normalized arguments declined");
    } else {
        res = PyObject_CallFunctionObjArgs(
            hook_many, seq, method ? method : s_auto, threads ? threads : one,
            bad ? bad : Py_None, NULL);
    }
    Py_XDECREF(bad);
    Py_DECREF(seq);
    return res;
}

static PyObject *fast_clear_many(PyObject *self, PyObject *const *args, Py_ssize_t nargs,
                                 PyObject *kwnames)
{
    (void)self;
    return do_clear_many(args, nargs, kwnames, 0);
}

static PyObject *fast_clear_many_exact(PyObject *self, PyObject *const *args,
                                       Py_ssize_t nargs, PyObject *kwnames)
{
    (void)self;
    return do_clear_many(args, nargs, kwnames, 1);
}

/* clear_runs(addrs, lens, *, method, threads): extents given as two
 * buffers of uint64 (a strided array's runs); the caller keeps their
 * memory alive.  Arguments are normalized by Python. */
static const char *const runs_pos[] = {"addrs", "lens"};

static PyObject *fast_clear_runs(PyObject *self, PyObject *const *args, Py_ssize_t nargs,
                                 PyObject *kwnames)
{
    (void)self;
    PyObject *pos[2] = {NULL, NULL}, *method = NULL, *threads = NULL;
    struct kw kws[] = {{kw_names[0], &method}, {kw_names[1], &threads}};
    if (parse("clear_runs", args, nargs, kwnames, 2, pos, runs_pos, kws, 2) < 0)
        return NULL;
    if (ensure_ready() < 0)
        return NULL;
    int idx = method_index(method), nthreads = threads_value(threads);
    if (idx == DECLINE || nthreads == DECLINE) {
        PyErr_SetString(PyExc_ValueError, "clear_runs: bad method or threads");
        return NULL;
    }
    Py_buffer a, l;
    if (PyObject_GetBuffer(pos[0], &a, PyBUF_C_CONTIGUOUS) < 0)
        return NULL;
    if (PyObject_GetBuffer(pos[1], &l, PyBUF_C_CONTIGUOUS) < 0) {
        PyBuffer_Release(&a);
        return NULL;
    }
    PyObject *res = NULL;
    if (a.len != l.len || a.len % 8) {
        PyErr_SetString(PyExc_ValueError, "clear_runs: two uint64 buffers of one length");
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

static const char *const pages_pos[] = {"buf", "pages"};

static PyObject *do_clear_pages(PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames,
                                int strict)
{
    PyObject *pos[2] = {NULL, NULL}, *page_size = NULL, *method = NULL, *threads = NULL;
    struct kw kws[] = {{kw_names[3], &page_size}, {kw_names[0], &method},
                       {kw_names[1], &threads}};
    if (parse("clear_pages", args, nargs, kwnames, 2, pos, pages_pos, kws, 3) < 0)
        return NULL;
    if (ensure_ready() < 0)
        return NULL;
    PyObject *buf = pos[0], *pages = pos[1];
    int idx = method_index(method), nthreads = threads_value(threads);
    size_t psize = 4096;
    if (page_size) {
        int overflow = 0;
        long long v = PyLong_CheckExact(page_size)
            ? PyLong_AsLongLongAndOverflow(page_size, &overflow) : -1;
        if (overflow || v < 1 || v > (1ll << 56))
            idx = DECLINE;
        else
            psize = (size_t)v;
    }
    Py_buffer view, pv;
    int have_pv = 0;
    PyObject *err = NULL, *res = NULL, *snapshot = NULL;
    int64_t *owned = NULL;
    if (PyObject_GetBuffer(buf, &view, PyBUF_WRITABLE) < 0) {
        err = take_refusal();
        if (!err)
            return NULL;
        goto decline;
    }
    if (idx == DECLINE || nthreads == DECLINE)
        goto release_decline;
    const int64_t *list;
    Py_ssize_t count;
    if (PyList_CheckExact(pages) || PyTuple_CheckExact(pages)) {
        /* Our own tuple: an item's __index__ may change the caller's list. */
        snapshot = PySequence_Tuple(pages);
        if (!snapshot)
            goto fail;
        owned = indices_from_sequence(snapshot, &count);
        if (!owned)
            goto fail;
        list = owned;
    } else if (PyObject_CheckBuffer(pages)) {
        if (PyObject_GetBuffer(pages, &pv, PyBUF_FORMAT | PyBUF_C_CONTIGUOUS) < 0) {
            if (!is_refusal())
                goto fail;
            PyErr_Clear();
            goto release_decline;
        }
        have_pv = 1;
        if (!is_int64_format(&pv) || pv.len % 8)
            goto release_decline;
        list = pv.buf;
        count = pv.len / 8;
    } else {
        goto release_decline;       /* Python reads other iterables */
    }
    if (count == 0) {
        res = Py_NewRef(Py_None);
        goto fail;
    }
    size_t bad = 0;
    struct cp_job *job = nat.job_from_pages(view.buf, (size_t)view.len, list, (size_t)count,
                                            psize, &bad);
    if (!job) {
        if (bad >= (size_t)count) {
            PyErr_NoMemory();
        } else {
            size_t n = (size_t)view.len, np = n / psize + (n % psize != 0);
            PyErr_Format(page_index_error,
                         "page index %lld (position %zu) is outside the buffer: it has "
                         "%zu page%s of %zu bytes, so indices run from 0 to %lld",
                         (long long)list[bad], bad, np, np == 1 ? "" : "s", psize,
                         (long long)np - 1);
        }
        goto fail;
    }
    size_t total = nat.job_total(job);
    int t = nthreads == 0 ? auto_threads(total) : nthreads;
    int routine = idx == AUTO ? route(total, (size_t)count, t) : idx;
    if (call_debug_hook("acquired", -1, total) == 0
        && run_job(job, routine, t, chunk_for(total, t), total) == 0)
        res = Py_NewRef(Py_None);
    nat.job_free(job);
fail:
    if (have_pv)
        PyBuffer_Release(&pv);
    PyMem_Free(owned);
    Py_XDECREF(snapshot);
    PyBuffer_Release(&view);
    return res;

release_decline:
    if (have_pv)
        PyBuffer_Release(&pv);
    PyMem_Free(owned);
    Py_XDECREF(snapshot);
    PyBuffer_Release(&view);
decline:
    if (strict) {
        Py_XDECREF(err);
        PyErr_SetString(PyExc_SystemError, "clearpages: normalized arguments declined");
        return NULL;
    }
    res = PyObject_CallFunctionObjArgs(
        hook_pages, buf, pages, page_size ? page_size : default_page_size, method ? method : s_auto,
        threads ? threads : one, err ? err : Py_None, NULL);
    Py_XDECREF(err);
    return res;
}

static PyObject *fast_clear_pages(PyObject *self, PyObject *const *args, Py_ssize_t nargs,
                                  PyObject *kwnames)
{
    (void)self;
    return do_clear_pages(args, nargs, kwnames, 0);
}

static PyObject *fast_clear_pages_exact(PyObject *self, PyObject *const *args,
                                        Py_ssize_t nargs, PyObject *kwnames)
{
    (void)self;
    return do_clear_pages(args, nargs, kwnames, 1);
}

/* ---- configuration -------------------------------------------------------------- */

static void *need(const char *name)
{
    void *p = dlsym(nat.handle, name);
    if (!p)
        PyErr_Format(PyExc_ImportError, "clearpages._native lacks %s", name);
    return p;
}

static int bind(const char *path)
{
    if (nat.handle)
        return 0;
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        PyErr_Format(PyExc_ImportError, "cannot open %s: %s", path, dlerror());
        return -1;
    }
    nat.handle = h;
#define NEED(field, name) if (!(*(void **)&nat.field = need(name))) goto fail
    NEED(job_new, "cp_job_new");
    NEED(job_from_pages, "cp_job_from_pages");
    NEED(job_configure, "cp_job_configure");
    NEED(job_run, "cp_job_run");
    NEED(job_total, "cp_job_total");
    NEED(job_free, "cp_job_free");
    NEED(region_map, "cp_region_map");
    NEED(region_unmap, "cp_region_unmap");
    NEED(region_discard, "cp_region_discard");
    NEED(region_resize, "cp_region_resize");
    NEED(region_move_to, "cp_region_move_to");
    NEED(region_move_congruent, "cp_region_move_congruent");
    NEED(routines, "cp_routine_table");
#undef NEED
    *(void **)&nat.job_error = dlsym(h, "cp_job_error");
    const struct cp_adapt_api *(*adapt_api)(void);
    *(void **)&adapt_api = dlsym(h, "cp_adapt_api");
    nat.adapt = adapt_api ? adapt_api() : NULL;
    return 0;
fail:
    memset(&nat, 0, sizeof(nat));
    return -1;
}

static int routine_index(PyObject *name, int n, const char *what)
{
    for (int i = 0; i < n; i++)
        if (PyUnicode_Compare(name, cfg.r[i].name) == 0)
            return i;
    if (!PyErr_Occurred())
        PyErr_Format(PyExc_ValueError, "configure: %s names no routine", what);
    return -1;
}

PyDoc_STRVAR(configure_doc,
"configure(native_path, routines, small, temporal, streaming, forced, vector_max,\n"
"          nt_min, chunk, thread_min, most_threads, gil_min, slice_ns,\n"
"          adapt_lo=0, adapt_hi=0, long=None, long_min=2**64-1)\n"
"--\n\n"
"Set the routing the entries follow (from clearpages._policy.Routing).\n"
"routines: ((name, fence, temporal, usable), ...) in the routine table's\n"
"order; usable ones are looked up in the cp_routine_table of the module at\n"
"native_path.  forced: a routine name or None.  adapt_lo <= n < adapt_hi:\n"
"the band where a single-threaded \"auto\" clear asks the learner of\n"
"csrc/adapt.c and reports its time (off when empty).  long: the routine for\n"
"pieces of long_min bytes or more on one thread above nt_min.");

static PyObject *fast_configure(PyObject *self, PyObject *args, PyObject *kw)
{
    (void)self;
    static char *names[] = {"native_path", "routines", "small", "temporal", "streaming",
                            "forced", "vector_max", "nt_min", "chunk", "thread_min",
                            "most_threads", "gil_min", "slice_ns", "adapt_lo", "adapt_hi",
                            "long", "long_min", NULL};
    const char *path;
    PyObject *routines, *small, *temporal, *streaming, *forced;
    unsigned long long vector_max, nt_min, chunk, thread_min, gil_min, slice_ns;
    unsigned long long adapt_lo = 0, adapt_hi = 0, long_min = ~0ull;
    PyObject *long_name = Py_None;
    int most;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "sO!UUUOKKKKiKK|KKOK", names, &path,
                                     &PyTuple_Type, &routines, &small, &temporal, &streaming,
                                     &forced, &vector_max, &nt_min, &chunk, &thread_min,
                                     &most, &gil_min, &slice_ns, &adapt_lo, &adapt_hi,
                                     &long_name, &long_min))
        return NULL;
    if (bind(path) < 0)
        return NULL;
    Py_ssize_t n = PyTuple_GET_SIZE(routines);
    if (n < 1 || n > MAX_ROUTINES) {
        PyErr_SetString(PyExc_ValueError, "configure: 1 to 16 routines");
        return NULL;
    }
    struct routine r[MAX_ROUTINES];
    memset(r, 0, sizeof(r));
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *name;
        int fence, temp, usable;
        if (!PyArg_ParseTuple(PyTuple_GET_ITEM(routines, i), "Uppp", &name, &fence, &temp,
                              &usable))
            goto fail;
        Py_INCREF(name);
        PyUnicode_InternInPlace(&name);
        r[i].name = name;
        r[i].temporal = temp;
        r[i].fence = fence;
        if (usable) {
            const struct cp_routine_entry *e = nat.routines;
            while (e->name && PyUnicode_CompareWithASCIIString(name, e->name) != 0)
                e++;
            if (!e->name) {
                PyErr_Format(PyExc_ValueError, "configure: %U is not in the native module",
                             name);
                goto fail;
            }
            r[i].fn = e->fn;
            r[i].job_fn = e->job_fn;
        }
    }
    /* The new table replaces the old one whole, with the GIL held: a call
     * in progress copied what it runs. */
    struct config old = cfg;
    for (Py_ssize_t i = 0; i < n; i++)
        cfg.r[i] = r[i];
    cfg.n = (int)n;
    int s = routine_index(small, cfg.n, "small"), t = routine_index(temporal, cfg.n, "temporal");
    int st = routine_index(streaming, cfg.n, "streaming");
    int f = forced == Py_None ? -1 : routine_index(forced, cfg.n, "forced");
    int lg = long_name == Py_None ? -1 : routine_index(long_name, cfg.n, "long");
    if (s < 0 || t < 0 || st < 0 || (forced != Py_None && f < 0)
        || (long_name != Py_None && lg < 0)
        || !cfg.r[s].fn || !cfg.r[t].fn || !cfg.r[st].fn || (f >= 0 && !cfg.r[f].fn)
        || (lg >= 0 && !cfg.r[lg].fn)) {
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_ValueError, "configure: a chosen routine is not usable");
        cfg = old;
        goto fail;
    }
    for (int i = 0; i < old.n; i++)
        Py_XDECREF(old.r[i].name);
    cfg.small = s;
    cfg.temporal = t;
    cfg.streaming = st;
    cfg.forced = f;
    cfg.vector_max = (size_t)vector_max;
    cfg.nt_min = (size_t)nt_min;
    cfg.chunk = (size_t)(chunk < SPLIT ? SPLIT : chunk);
    cfg.thread_min = (size_t)thread_min;
    cfg.most_threads = most;
    cfg.gil_min = (size_t)gil_min;
    cfg.slice_ns = slice_ns;
    cfg.long_idx = lg;
    cfg.long_min = (size_t)long_min;
    /* An empty band (lo >= hi) is off: no size is in it. */
    cfg.adapt_lo = nat.adapt ? (size_t)adapt_lo : 0;
    cfg.adapt_hi = nat.adapt ? (size_t)adapt_hi : 0;
    cfg.ready = 1;
    Py_RETURN_NONE;
fail:
    for (Py_ssize_t i = 0; i < n; i++)
        Py_XDECREF(r[i].name);
    return NULL;
}

static PyObject *fast_set_hooks(PyObject *self, PyObject *args, PyObject *kw)
{
    (void)self;
    static char *names[] = {"init", "clear", "many", "pages", "page_index_error", NULL};
    PyObject *a, *b, *c, *d, *e;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "OOOOO", names, &a, &b, &c, &d, &e))
        return NULL;
    Py_XSETREF(hook_init, Py_NewRef(a));
    Py_XSETREF(hook_clear, Py_NewRef(b));
    Py_XSETREF(hook_many, Py_NewRef(c));
    Py_XSETREF(hook_pages, Py_NewRef(d));
    Py_XSETREF(page_index_error, Py_NewRef(e));
    Py_RETURN_NONE;
}

static PyObject *fast_set_debug_hook(PyObject *self, PyObject *hook)
{
    (void)self;
    Py_XSETREF(debug_hook, hook == Py_None ? NULL : Py_NewRef(hook));
    Py_RETURN_NONE;
}

/* route(nbytes, count=1, threads=1) -> routine name: what "auto" runs
 * (tests compare it with the Python routing). */
static PyObject *fast_route(PyObject *self, PyObject *args)
{
    (void)self;
    unsigned long long n, count = 1;
    int threads = 1;
    if (!PyArg_ParseTuple(args, "K|Ki", &n, &count, &threads))
        return NULL;
    if (ensure_ready() < 0)
        return NULL;
    return Py_NewRef(cfg.r[route((size_t)n, (size_t)count, threads)].name);
}

/* decide(nbytes, count=1, threads=1, method="auto") -> (routine, threads,
 * chunk): what a call over nbytes in count pieces runs (tests hold it
 * against plan()). */
static PyObject *fast_decide(PyObject *self, PyObject *args)
{
    (void)self;
    unsigned long long n, count = 1;
    PyObject *threads = NULL, *method = NULL;
    if (!PyArg_ParseTuple(args, "K|KOO", &n, &count, &threads, &method))
        return NULL;
    if (ensure_ready() < 0)
        return NULL;
    int idx = method_index(method), t = threads_value(threads);
    if (idx == DECLINE || t == DECLINE) {
        PyErr_SetString(PyExc_ValueError, "decide: not a usable method or thread count");
        return NULL;
    }
    if (t == 0)
        t = auto_threads((size_t)n);
    if (idx == AUTO)
        idx = route((size_t)n, (size_t)count, t);
    return Py_BuildValue("(Oin)", cfg.r[idx].name, t, (Py_ssize_t)chunk_for((size_t)n, t));
}

static PyObject *fast_hot_route(PyObject *self, PyObject *args)
{
    (void)self;
    unsigned long long hot_n;
    PyObject *method;
    if (!PyArg_ParseTuple(args, "KO", &hot_n, &method))
        return NULL;
    if (ensure_ready() < 0)
        return NULL;
    int idx = method_index(method);
    if (idx == DECLINE) {
        PyErr_SetString(PyExc_ValueError, "hot_route: not a usable method");
        return NULL;
    }
    int cold, hot;
    if (cfg.forced >= 0) {
        cold = hot = cfg.forced;
    } else if (idx == AUTO) {
        cold = cfg.streaming;
        hot = route((size_t)hot_n, 1, 1);
        if (hot == cfg.streaming && !cfg.r[hot].temporal)
            hot = cfg.temporal;
    } else {
        cold = idx;
        hot = cfg.r[idx].temporal ? idx : cfg.temporal;
    }
    return Py_BuildValue("(OO)", cfg.r[cold].name, cfg.r[hot].name);
}

static PyObject *fast_settings(PyObject *self, PyObject *unused)
{
    (void)self;
    (void)unused;
    if (!cfg.ready)
        Py_RETURN_NONE;
    return Py_BuildValue("{s:K,s:K,s:K,s:K,s:i,s:i,s:K,s:K}",
                         "vector_max", (unsigned long long)cfg.vector_max,
                         "nt_min", (unsigned long long)cfg.nt_min,
                         "chunk", (unsigned long long)cfg.chunk,
                         "gil_min", (unsigned long long)cfg.gil_min,
                         "adapt", cfg.adapt_lo < cfg.adapt_hi,
                         "most_threads", cfg.most_threads,
                         "adapt_lo", (unsigned long long)cfg.adapt_lo,
                         "adapt_hi", (unsigned long long)cfg.adapt_hi);
}

/* ---- RegionMemory ------------------------------------------------------------ */

typedef struct {
    PyObject_HEAD
    uintptr_t address;
    size_t size;
    Py_ssize_t exports;
    int mapped;
    int kind, shift;            /* as mapped: page = 1 << shift */
    size_t limit, modulus;      /* address space; resize keeps addr % modulus */
    PyThread_type_lock lock;
} RegionMemory;

/* The lock orders the calls that change or export the mapping; system calls
 * run under it without the GIL, so waiting for it must not hold the GIL. */
static void region_lock(RegionMemory *self)
{
    if (!PyThread_acquire_lock(self->lock, NOWAIT_LOCK)) {
        Py_BEGIN_ALLOW_THREADS
        PyThread_acquire_lock(self->lock, WAIT_LOCK);
        Py_END_ALLOW_THREADS
    }
}

static void region_unlock(RegionMemory *self)
{
    PyThread_release_lock(self->lock);
}

static PyObject *region_new(PyTypeObject *type, PyObject *args, PyObject *kw)
{
    (void)args;
    (void)kw;
    RegionMemory *self = (RegionMemory *)type->tp_alloc(type, 0);
    if (!self)
        return NULL;
    self->lock = PyThread_allocate_lock();
    if (!self->lock) {
        Py_DECREF(self);
        return PyErr_NoMemory();
    }
    return (PyObject *)self;
}

static void region_dealloc(RegionMemory *self)
{
    /* A live export holds a reference to us, so none is left here. */
    if (self->mapped && self->exports == 0 && nat.region_unmap)
        nat.region_unmap(self->address, self->size);
    self->mapped = 0;
    if (self->lock)
        PyThread_free_lock(self->lock);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static int region_getbuffer(RegionMemory *self, Py_buffer *view, int flags)
{
    region_lock(self);
    if (!self->mapped) {
        region_unlock(self);
        PyErr_SetString(PyExc_ValueError, "the Region is closed");
        view->obj = NULL;
        return -1;
    }
    int rc = PyBuffer_FillInfo(view, (PyObject *)self, (void *)self->address,
                               (Py_ssize_t)self->size, 0, flags);
    if (rc == 0)
        self->exports++;
    region_unlock(self);
    return rc;
}

static void region_releasebuffer(RegionMemory *self, Py_buffer *view)
{
    (void)view;
    self->exports--;
}

static PyBufferProcs region_as_buffer = {
    (getbufferproc)region_getbuffer,
    (releasebufferproc)region_releasebuffer,
};

/* Under the lock: ValueError if closed, BufferError if exported. */
static int region_check(RegionMemory *self, const char *what)
{
    if (!self->mapped) {
        PyErr_SetString(PyExc_ValueError, "the Region is closed");
        return -1;
    }
    if (self->exports > 0) {
        Py_ssize_t n = self->exports;
        PyErr_Format(PyExc_BufferError,
                     "cannot %s a Region while %zd view%s of it exist%s "
                     "(release every memoryview and numpy array of it first)",
                     what, n, n == 1 ? "" : "s", n == 1 ? "s" : "");
        return -1;
    }
    return 0;
}

static int region_bound(void)
{
    if (nat.handle)
        return 0;
    return ensure_ready();
}

static PyObject *region_map(RegionMemory *self, PyObject *args)
{
    unsigned long long size, align, limit, modulus;
    int kind, shift;
    if (!PyArg_ParseTuple(args, "KKiiKK", &size, &align, &kind, &shift, &limit, &modulus)
        || region_bound() < 0)
        return NULL;
    if (shift < 12 || shift > 40 || !modulus) {
        PyErr_SetString(PyExc_ValueError, "_map: bad page shift or modulus");
        return NULL;
    }
    region_lock(self);
    if (self->mapped) {
        region_unlock(self);
        PyErr_SetString(PyExc_ValueError, "the Region is already mapped");
        return NULL;
    }
    uintptr_t out = 0;
    int err;
    Py_BEGIN_ALLOW_THREADS
    err = nat.region_map((size_t)size, (size_t)align, kind, shift, &out);
    Py_END_ALLOW_THREADS
    if (!err) {
        self->address = out;
        self->size = (size_t)size;
        self->mapped = 1;
        self->kind = kind;
        self->shift = shift;
        self->limit = (size_t)limit;
        self->modulus = (size_t)modulus;
    }
    region_unlock(self);
    return PyLong_FromLong(err);
}

/* op: 0 resize, 1 move_congruent, 2 move_to. */
static PyObject *region_relocate(RegionMemory *self, int op, const char *what,
                                 unsigned long long a, unsigned long long b,
                                 unsigned long long c, unsigned long long d)
{
    if (region_bound() < 0)
        return NULL;
    region_lock(self);
    if (region_check(self, what) < 0) {
        region_unlock(self);
        return NULL;
    }
    uintptr_t addr = self->address, out = addr;
    size_t size = self->size, new_size = size;
    int err;
    Py_BEGIN_ALLOW_THREADS
    if (op == 0) {
        new_size = (size_t)a;
        err = nat.region_resize(addr, size, new_size, (int)b, (int)c, (size_t)d, &out);
    } else if (op == 1) {
        err = nat.region_move_congruent(addr, size, (size_t)a, (size_t)b, (size_t)c, &out);
    } else {
        out = (uintptr_t)b;
        err = nat.region_move_to(addr, size, (size_t)a, out);
    }
    Py_END_ALLOW_THREADS
    if (!err) {
        self->address = out;
        self->size = new_size;
    } else if (err & CP_REGION_LOST) {
        /* The memory could not be put back and is unmapped: own nothing. */
        self->mapped = 0;
        self->address = 0;
        self->size = 0;
    }                       /* else the mapping is where it was */
    region_unlock(self);
    return PyLong_FromLong(err);
}

static PyObject *region_resize(RegionMemory *self, PyObject *args)
{
    unsigned long long new_size, modulus;
    int kind, shift;
    if (!PyArg_ParseTuple(args, "KiiK", &new_size, &kind, &shift, &modulus))
        return NULL;
    return region_relocate(self, 0, "resize", new_size, (unsigned)kind, (unsigned)shift,
                           modulus);
}

/* resize(new_size): an exact int within the address space goes to the
 * system calls from here; anything else to the subclass's _resize_slow,
 * and an errno to its _resize_failed (the messages live in Python). */
static PyObject *region_resize_public(RegionMemory *self, PyObject *arg)
{
    if (PyLong_CheckExact(arg) && self->mapped) {
        int overflow;
        long long v = PyLong_AsLongLongAndOverflow(arg, &overflow);
        size_t page = (size_t)1 << self->shift;
        if (!overflow && v > 0 && (unsigned long long)v <= self->limit) {
            size_t n = ((size_t)v + page - 1) / page * page;
            if (n <= self->limit) {
                PyObject *r = region_relocate(self, 0, "resize", n, (unsigned)self->kind,
                                              (unsigned)self->shift, self->modulus);
                if (!r)
                    return NULL;
                long err = PyLong_AsLong(r);
                Py_DECREF(r);
                if (err == 0)
                    Py_RETURN_NONE;
                return PyObject_CallMethod((PyObject *)self, "_resize_failed", "ln", err,
                                           (Py_ssize_t)n);
            }
        }
    }
    return PyObject_CallMethod((PyObject *)self, "_resize_slow", "O", arg);
}

static PyObject *region_move_congruent(RegionMemory *self, PyObject *args)
{
    unsigned long long piece, modulus, residue;
    if (!PyArg_ParseTuple(args, "KKK", &piece, &modulus, &residue))
        return NULL;
    return region_relocate(self, 1, "move", piece, modulus, residue, 0);
}

static PyObject *region_move_to(RegionMemory *self, PyObject *args)
{
    unsigned long long piece, dst;
    if (!PyArg_ParseTuple(args, "KK", &piece, &dst))
        return NULL;
    return region_relocate(self, 2, "move", piece, dst, 0, 0);
}

static PyObject *region_discard(RegionMemory *self, PyObject *unused)
{
    (void)unused;
    if (region_bound() < 0)
        return NULL;
    region_lock(self);
    if (!self->mapped) {
        region_unlock(self);
        PyErr_SetString(PyExc_ValueError, "the Region is closed");
        return NULL;
    }
    int err;
    uintptr_t addr = self->address;
    size_t size = self->size;
    Py_BEGIN_ALLOW_THREADS
    err = nat.region_discard(addr, size);
    Py_END_ALLOW_THREADS
    region_unlock(self);
    return PyLong_FromLong(err);
}

static PyObject *region_close(RegionMemory *self, PyObject *unused)
{
    (void)unused;
    if (region_bound() < 0)
        return NULL;
    region_lock(self);
    if (!self->mapped) {
        region_unlock(self);
        Py_RETURN_NONE;         /* closing twice is allowed */
    }
    if (region_check(self, "close") < 0) {
        region_unlock(self);
        return NULL;
    }
    uintptr_t addr = self->address;
    size_t size = self->size;
    self->mapped = 0;
    self->address = 0;
    self->size = 0;
    Py_BEGIN_ALLOW_THREADS
    nat.region_unmap(addr, size);
    Py_END_ALLOW_THREADS
    region_unlock(self);
    Py_RETURN_NONE;
}

static PyObject *region_get_address(RegionMemory *self, void *closure)
{
    (void)closure;
    return PyLong_FromSize_t(self->mapped ? self->address : 0);
}

static PyObject *region_get_size(RegionMemory *self, void *closure)
{
    (void)closure;
    return PyLong_FromSize_t(self->mapped ? self->size : 0);
}

static PyObject *region_get_exports(RegionMemory *self, void *closure)
{
    (void)closure;
    return PyLong_FromSsize_t(self->exports);
}

static PyObject *region_get_closed(RegionMemory *self, void *closure)
{
    (void)closure;
    return PyBool_FromLong(!self->mapped);
}

static PyMethodDef region_methods[] = {
    {"_map", (PyCFunction)region_map, METH_VARARGS,
     "_map(size, align, kind, page_shift, address_space, modulus) -> errno: map the\n"
     "memory (once); resize() keeps the address modulo modulus."},
    {"resize", (PyCFunction)region_resize_public, METH_O,
     "resize(new_size)\n--\n\n"
     "Grow or shrink to new_size (rounded up to whole pages).\n\n"
     "In place where the address space allows; otherwise moved by mremap to an\n"
     "address congruent with the current one modulo 1 GiB, so the kernel moves\n"
     "PUD/PMD entries and copies nothing.  Contents are kept (up to the smaller\n"
     "size), the grown part reads zero, page size and huge-page advice are kept.\n"
     "BufferError while views exist; on any failure the region is as it was."},
    {"_resize", (PyCFunction)region_resize, METH_VARARGS,
     "_resize(new_size, kind, huge_shift, modulus) -> errno (BufferError while exported)."},
    {"_move_congruent", (PyCFunction)region_move_congruent, METH_VARARGS,
     "_move_congruent(piece, modulus, residue) -> errno (BufferError while exported)."},
    {"_move_to", (PyCFunction)region_move_to, METH_VARARGS,
     "_move_to(piece, address) -> errno (BufferError while exported)."},
    {"_discard", (PyCFunction)region_discard, METH_NOARGS,
     "_discard() -> errno: MADV_DONTNEED over the memory."},
    {"_close", (PyCFunction)region_close, METH_NOARGS,
     "_close(): unmap (BufferError while exported; twice is allowed)."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef region_getset[] = {
    {"_address", (getter)region_get_address, NULL, "start address (0 when closed)", NULL},
    {"_size", (getter)region_get_size, NULL, "bytes (0 when closed)", NULL},
    {"_exports", (getter)region_get_exports, NULL, "live buffer exports", NULL},
    {"closed", (getter)region_get_closed, NULL, "True once closed (or never mapped)", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject RegionMemoryType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "clearpages._fast.RegionMemory",
    .tp_basicsize = sizeof(RegionMemory),
    .tp_dealloc = (destructor)region_dealloc,
    .tp_as_buffer = &region_as_buffer,
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE,
    .tp_doc = "Private anonymous memory owned by one object, which is its buffer.",
    .tp_methods = region_methods,
    .tp_getset = region_getset,
    .tp_new = region_new,
};

/* ---- module ------------------------------------------------------------------ */

#define FASTCALL_KW (METH_FASTCALL | METH_KEYWORDS)

static PyMethodDef module_methods[] = {
    {"clear", (PyCFunction)(void (*)(void))fast_clear, FASTCALL_KW,
     "clear(buf, *, method=\"auto\", threads=1, hot=None)\n--\n\n"
     "Zero every byte of a writable buffer.\n\n"
     "method: \"auto\" or a name from clearpages.methods() (\"discard\" for a\n"
     "Region).  threads: an int >= 1 or \"auto\".  hot: a (start, stop) byte\n"
     "range cleared last with ordinary stores, so it is in cache when the\n"
     "caller touches it; the rest is cleared with streaming stores."},
    {"clear_many", (PyCFunction)(void (*)(void))fast_clear_many, FASTCALL_KW,
     "clear_many(bufs, *, method=\"auto\", threads=1)\n--\n\n"
     "Zero many buffers in one native call.\n\n"
     "The routine is chosen from the total size, not each piece: a gigabyte of\n"
     "4 KiB buffers is a gigabyte of work.  Every buffer is checked before\n"
     "anything is written."},
    {"clear_pages", (PyCFunction)(void (*)(void))fast_clear_pages, FASTCALL_KW,
     "clear_pages(buf, pages, *, page_size=4096, method=\"auto\", threads=1)\n--\n\n"
     "Zero the listed pages of one buffer: page i is\n"
     "buf[i*page_size:(i+1)*page_size].\n\n"
     "The pages are merged into runs in C and cleared in one native call;\n"
     "repeated pages are cleared once; an index outside the buffer raises\n"
     "PageIndexError before anything is written."},
    {"clear_exact", (PyCFunction)(void (*)(void))fast_clear_exact, FASTCALL_KW,
     "clear with normalized arguments (from the Python side); never declines."},
    {"clear_many_exact", (PyCFunction)(void (*)(void))fast_clear_many_exact, FASTCALL_KW,
     "clear_many with normalized arguments; never declines."},
    {"clear_pages_exact", (PyCFunction)(void (*)(void))fast_clear_pages_exact, FASTCALL_KW,
     "clear_pages with normalized arguments; never declines."},
    {"clear_runs", (PyCFunction)(void (*)(void))fast_clear_runs, FASTCALL_KW,
     "clear_runs(addrs, lens, *, method, threads): extents of a strided buffer."},
    {"configure", (PyCFunction)(void (*)(void))fast_configure, METH_VARARGS | METH_KEYWORDS,
     configure_doc},
    {"set_hooks", (PyCFunction)(void (*)(void))fast_set_hooks, METH_VARARGS | METH_KEYWORDS,
     "set_hooks(init, clear, many, pages, page_index_error): the Python side."},
    {"_set_debug_hook", fast_set_debug_hook, METH_O,
     "_set_debug_hook(f or None): f(where, routine, nbytes) is called with the\n"
     "buffers held: 'acquired', before every job slice ('slice') and direct\n"
     "call ('call'); tests watch and inject failures with it."},
    {"decide", fast_decide, METH_VARARGS,
     "decide(nbytes, count=1, threads=1, method='auto') -> (routine, threads, chunk)."},
    {"route", fast_route, METH_VARARGS,
     "route(nbytes, count=1, threads=1) -> what \"auto\" runs."},
    {"hot_route", fast_hot_route, METH_VARARGS,
     "hot_route(hot_nbytes, method) -> (cold routine, hot routine)."},
    {"settings", fast_settings, METH_NOARGS, "The numbers configured (None before)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, "clearpages._fast",
    "clear, clear_many and clear_pages in one native call each, and the\n"
    "buffer type under clearpages.Region.", -1, module_methods,
    NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__fast(void)
{
    s_auto = PyUnicode_InternFromString("auto");
    for (int i = 0; kw_names[i]; i++)
        if (!(kw_objects[i] = PyUnicode_InternFromString(kw_names[i])))
            return NULL;
    one = PyLong_FromLong(1);
    default_page_size = PyLong_FromLong(4096);
    if (!s_auto || !one || !default_page_size || PyType_Ready(&RegionMemoryType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&module_def);
    if (!m)
        return NULL;
    Py_INCREF(&RegionMemoryType);
    if (PyModule_AddObject(m, "RegionMemory", (PyObject *)&RegionMemoryType) < 0
        || PyModule_AddIntConstant(m, "MAX_THREADS", CP_MAX_THREADS) < 0) {
        Py_DECREF(&RegionMemoryType);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
