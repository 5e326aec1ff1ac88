/*
 * The configuration Python gives (configure, set_hooks), and decide: what
 * the configured policy does for a size, which plan() reports.
 */
#include <string.h>

#include "fast.h"

const struct cp_api *native;
struct config config;

PyObject *hook_init, *hook_clear, *hook_many, *hook_pages, *hook_scan, *hook_hot;
PyObject *page_index_error;
PyObject *debug_hook;

int ensure_ready(void)
{
    if (config.ready)
        return 0;
    if (!hook_init) {
        PyErr_SetString(PyExc_RuntimeError, "clearpages._fast is not configured");
        return -1;
    }
    PyObject *r = PyObject_CallNoArgs(hook_init);
    if (!r)
        return -1;
    Py_DECREF(r);
    if (!config.ready) {
        PyErr_SetString(PyExc_RuntimeError, "clearpages._fast is not configured");
        return -1;
    }
    return 0;
}

const char configure_doc[] =
"configure(routines, policy, gil_min, slice_ns)\n"
"--\n\n"
"Set what the entries follow.  routines: ((name, fence, temporal, usable),\n"
"...) in the routine table's order; usable ones are taken from the table\n"
"of entry points clearpages._native exports.  policy: the bytes of a\n"
"struct cp_policy (csrc/core/policy.h), its routines indices into that\n"
"table.  gil_min: clears of fewer bytes keep the GIL.  slice_ns: how long\n"
"a job runs between two checks for signals.";

/* A routine the policy may run: in the table and usable here (or none). */
static int usable_or_none(int idx, int may_be_none)
{
    if (idx == CP_POLICY_NONE && may_be_none)
        return 1;
    return idx >= 0 && idx < config.n && config.r[idx].fn;
}

PyObject *fast_configure(PyObject *self, PyObject *args, PyObject *kw)
{
    (void)self;
    static char *names[] = {"routines", "policy", "gil_min", "slice_ns", NULL};
    PyObject *routines;
    Py_buffer pol;
    unsigned long long gil_min, slice_ns;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O!y*KK", names, &PyTuple_Type,
                                     &routines, &pol, &gil_min, &slice_ns))
        return NULL;
    struct cp_policy policy;
    int ok = pol.len == (Py_ssize_t)sizeof(policy);
    if (ok)
        memcpy(&policy, pol.buf, sizeof(policy));
    PyBuffer_Release(&pol);
    if (!ok) {
        PyErr_Format(PyExc_ValueError, "configure: policy must be %zu bytes (struct cp_policy)",
                     sizeof(policy));
        return NULL;
    }
    Py_ssize_t n = PyTuple_GET_SIZE(routines);
    if (n < 1 || n > MAX_ROUTINES || n > CP_API_ROUTINES) {
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
            if (!native->routines[i].fn) {
                PyErr_Format(PyExc_ValueError, "configure: %U is not in the native module",
                             name);
                goto fail;
            }
            r[i].fn = native->routines[i].fn;
            r[i].job_fn = native->routines[i].job_fn;
        }
    }
    /* The new table replaces the old one whole, with the GIL held: a call
     * in progress copied what it runs. */
    struct config old = config;
    for (Py_ssize_t i = 0; i < n; i++)
        config.r[i] = r[i];
    config.n = (int)n;
    if (!usable_or_none(policy.memset, 0) || !usable_or_none(policy.temporal, 0)
        || !usable_or_none(policy.streaming, 0) || !usable_or_none(policy.forced, 1)
        || !usable_or_none(policy.long_routine, 1)) {
        PyErr_SetString(PyExc_ValueError, "configure: a routine of the policy is not usable");
        config = old;
        goto fail;
    }
    for (int i = 0; i < old.n; i++)
        Py_XDECREF(old.r[i].name);
    config.policy = policy;
    config.gil_min = (size_t)gil_min;
    config.slice_ns = slice_ns;
    config.ready = 1;
    Py_RETURN_NONE;
fail:
    for (Py_ssize_t i = 0; i < n; i++)
        Py_XDECREF(r[i].name);
    return NULL;
}

PyObject *fast_set_hooks(PyObject *self, PyObject *args, PyObject *kw)
{
    (void)self;
    static char *names[] = {"init", "clear", "many", "pages", "scan", "hot",
                            "page_index_error", NULL};
    PyObject *a, *b, *c, *d, *e, *f, *g;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "OOOOOOO", names, &a, &b, &c, &d, &e, &f, &g))
        return NULL;
    Py_XSETREF(hook_init, Py_NewRef(a));
    Py_XSETREF(hook_clear, Py_NewRef(b));
    Py_XSETREF(hook_many, Py_NewRef(c));
    Py_XSETREF(hook_pages, Py_NewRef(d));
    Py_XSETREF(hook_scan, Py_NewRef(e));
    Py_XSETREF(hook_hot, Py_NewRef(f));
    Py_XSETREF(page_index_error, Py_NewRef(g));
    Py_RETURN_NONE;
}

PyObject *fast_set_debug_hook(PyObject *self, PyObject *hook)
{
    (void)self;
    Py_XSETREF(debug_hook, hook == Py_None ? NULL : Py_NewRef(hook));
    Py_RETURN_NONE;
}

/* decide(nbytes, count=1, threads=1, method="auto", hot=None) -> (routine,
 * threads, unit, hot routine or None, adaptive, (temporal role, streaming
 * role), hot range's length, skip_untouched, why, hot_why, threads_why,
 * adapt_why, untouched_why, learned, one_by_one): what a call over nbytes in count
 * pieces runs and the rules that chose it (the reason codes of
 * core/policy.h), from the policy every call follows; hot: None, True,
 * False or the hot range's length.  plan() reports it. */
PyObject *fast_decide(PyObject *self, PyObject *args)
{
    (void)self;
    unsigned long long n, count = 1;
    PyObject *threads = NULL, *method = NULL, *hot = Py_None;
    if (!PyArg_ParseTuple(args, "K|KOOO", &n, &count, &threads, &method, &hot))
        return NULL;
    int idx, t;
    if (normalized_method_threads("decide", method, threads, &idx, &t) < 0)
        return NULL;
    unsigned long long hot_n = 0;
    int hint = hot == Py_None ? CP_POLICY_HOT_NONE : hot == Py_True ? CP_POLICY_HOT_ALL
             : hot == Py_False ? CP_POLICY_NOT_SOON : CP_POLICY_HOT_RANGE;
    if ((hint == CP_POLICY_HOT_ALL || hint == CP_POLICY_NOT_SOON) && count != 1) {
        PyErr_SetString(PyExc_ValueError, "decide: hot= applies to one buffer");
        return NULL;
    }
    if (hint == CP_POLICY_HOT_RANGE) {
        hot_n = PyLong_AsUnsignedLongLong(hot);
        if (PyErr_Occurred())
            return NULL;
        if (hot_n > n || count != 1) {
            PyErr_SetString(PyExc_ValueError, "decide: a hot range lies in one buffer");
            return NULL;
        }
    }
    if (hint == CP_POLICY_HOT_ALL)
        hint = native->policy_hot_all(&config.policy, NULL, (size_t)n);
    struct cp_decision d;
    decide((size_t)n, (size_t)count, idx, t, hint, (size_t)hot_n, &d);
    return Py_BuildValue("(OinOO(OO)nOiiiiiiO)", config.r[d.routine].name, d.threads,
                         (Py_ssize_t)d.unit,
                         d.hot_routine >= 0 ? config.r[d.hot_routine].name : Py_None,
                         d.adaptive ? Py_True : Py_False,
                         config.r[d.roles[CP_ADAPT_TEMPORAL]].name,
                         config.r[d.roles[CP_ADAPT_STREAMING]].name, (Py_ssize_t)d.hot_nbytes,
                         d.skip_untouched ? Py_True : Py_False, d.why, d.hot_why,
                         d.threads_why, d.adapt_why, d.untouched_why, d.learned,
                         d.one_by_one ? Py_True : Py_False);
}

PyObject *fast_settings(PyObject *self, PyObject *unused)
{
    (void)self;
    (void)unused;
    if (!config.ready)
        Py_RETURN_NONE;
    const struct cp_policy *p = &config.policy;
    return Py_BuildValue("{s:K,s:K,s:K,s:K,s:K,s:i,s:K,s:K,s:K}",
                         "vector_max", (unsigned long long)p->vector_max,
                         "nt_min", (unsigned long long)p->nt_min,
                         "unit", (unsigned long long)p->unit,
                         "gil_min", (unsigned long long)config.gil_min,
                         "slice_ns", (unsigned long long)config.slice_ns,
                         "adapt", p->adapt_active,
                         "adapt_min", (unsigned long long)p->adapt_min,
                         "adapt_max", (unsigned long long)p->adapt_max,
                         "untouched_min", (unsigned long long)p->untouched_min);
}

/* set_untouched(min_bytes): the configured policy's untouched_min (0: never
 * look), until the next configure(); benchmarks measure the look's cost
 * on resident memory with it. */
PyObject *fast_set_untouched(PyObject *self, PyObject *arg)
{
    (void)self;
    unsigned long long v = PyLong_AsUnsignedLongLong(arg);
    if (v == (unsigned long long)-1 && PyErr_Occurred())
        return NULL;
    if (ensure_ready() < 0)
        return NULL;
    config.policy.untouched_min = (size_t)v;
    Py_RETURN_NONE;
}
