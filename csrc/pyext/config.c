/*
 * Binding to clearpages._native (its routines, jobs and region calls,
 * resolved with dlsym from the loaded module), the configuration Python
 * gives (configure, set_hooks) and the queries of the configured routing
 * (route, decide, hot_route, settings).
 */
#include <dlfcn.h>
#include <string.h>

#include "fast.h"

struct native nat;
struct config cfg;

PyObject *hook_init, *hook_clear, *hook_many, *hook_pages, *page_index_error;
PyObject *debug_hook;

int ensure_ready(void)
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

static void *need(const char *name)
{
    void *p = dlsym(nat.handle, name);
    if (!p)
        PyErr_Format(PyExc_ImportError, "clearpages._native lacks %s", name);
    return p;
}

static int bind_native(const char *path)
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
    NEED(region_protect, "cp_region_protect");
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

const char configure_doc[] =
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
"pieces of long_min bytes or more on one thread above nt_min.";

PyObject *fast_configure(PyObject *self, PyObject *args, PyObject *kw)
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
    if (bind_native(path) < 0)
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

PyObject *fast_set_hooks(PyObject *self, PyObject *args, PyObject *kw)
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

PyObject *fast_set_debug_hook(PyObject *self, PyObject *hook)
{
    (void)self;
    Py_XSETREF(debug_hook, hook == Py_None ? NULL : Py_NewRef(hook));
    Py_RETURN_NONE;
}

/* route(nbytes, count=1, threads=1) -> routine name: what "auto" runs
 * (tests compare it with the Python routing). */
PyObject *fast_route(PyObject *self, PyObject *args)
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
PyObject *fast_decide(PyObject *self, PyObject *args)
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

PyObject *fast_hot_route(PyObject *self, PyObject *args)
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
    hot_routes(idx, (size_t)hot_n, &cold, &hot);
    return Py_BuildValue("(OO)", cfg.r[cold].name, cfg.r[hot].name);
}

PyObject *fast_settings(PyObject *self, PyObject *unused)
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
