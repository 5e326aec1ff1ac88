/*
 * Running: a routine called directly, or a job run in time slices with
 * the GIL released, signals checked between slices.
 */
#include <string.h>

#include "fast.h"

/* Tests see each step: hook(where, routine or None, nbytes), where is
 * "acquired" (every buffer held), "slice" (before each slice of a job) or
 * "call" (before a direct call).  One NULL test when no hook is set. */
int call_debug_hook(const char *where, int idx, size_t n)
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
int run_job(struct cp_job *job, int idx, int threads, size_t chunk, size_t total)
{
    const struct routine *r = &cfg.r[idx];
    if (nat->job_configure(job, r->job_fn, chunk, threads, r->fence) != 0) {
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
            rc = nat->job_run(job, slice);
            Py_END_ALLOW_THREADS
        } else {
            rc = nat->job_run(job, slice);
        }
        if (rc == 1)
            return 0;
        if (rc < 0) {
            int err = nat->job_error(job);
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

/* The bytes of a job left to clear once the pages that read as zero
 * untouched are dropped from it (core/untouched.c), looked for without the
 * GIL: a fraction of a millisecond where it finds such pages, a few
 * microseconds where its sample shows none. */
size_t skip_untouched(struct cp_job *job, size_t total)
{
    size_t dropped;
    Py_BEGIN_ALLOW_THREADS
    dropped = nat->job_skip_untouched(job);
    Py_END_ALLOW_THREADS
    return total - dropped;
}

/* Clear n extents without their untouched pages, decided again for what is
 * left.  Returns 1 when nothing was dropped (the caller clears as usual),
 * else 0 or -1 (an error is set). */
static int clear_untouched_aside(char **addrs, size_t *lens, size_t n, size_t total,
                                 int idx, int threads)
{
    struct cp_job *job = nat->job_new(addrs, lens, n);
    if (!job) {
        PyErr_NoMemory();
        return -1;
    }
    size_t left = skip_untouched(job, total);
    int rc = 1;
    if (left < total) {
        struct cp_decision d;
        decide(left, nat->job_extents(job), idx, threads, 0, 0, &d);
        rc = left ? run_job(job, d.routine, d.threads, d.unit, left) : 0;
    }
    nat->job_free(job);
    return rc;
}

/* Clear one extent with routine idx (or "auto": idx AUTO) on threads
 * (0: "auto").  Where the policy says so (a single auto clear on one thread
 * in the adaptive band), the learner chooses the routine and the clear is
 * timed for it. */
int clear_extent(char *dst, size_t n, int idx, int threads)
{
    struct cp_decision d;
    decide(n, 1, idx, threads, 0, 0, &d);
    if (d.skip_untouched) {
        int rc = clear_untouched_aside(&dst, &n, 1, n, idx, threads);
        if (rc != 1)
            return rc;
    }
    idx = d.routine;
    int ticket = -1;
    if (d.adaptive) {
        ticket = nat->adapt_choose(n, dst);
        if (ticket >= 0)
            idx = d.arms[ticket & CP_ADAPT_STREAMING];
    }
    int timed = ticket >= 0 && !(ticket & CP_ADAPT_UNTIMED);
    uint64_t t0 = timed ? nat->adapt_now_ns() : 0;
    int rc;
    if (d.threads == 1 && n <= d.unit) {
        rc = call_routine(idx, dst, n);
    } else if (n == 0) {
        rc = 0;
    } else {
        struct cp_job *job = nat->job_new(&dst, &n, 1);
        if (!job) {
            PyErr_NoMemory();
            return -1;
        }
        rc = run_job(job, idx, d.threads, d.unit, n);
        nat->job_free(job);
    }
    if (timed && rc == 0)
        nat->adapt_record_span(n, ticket, t0, nat->adapt_now_ns());
    return rc;
}

static int clear_hot_decided(char *base, size_t n, size_t start, size_t stop,
                             const struct cp_decision *dp);

/* The job over [base, base + n) without [start, stop), cleared with the
 * policy's routine for the rest; then [start, stop) with the hot one
 * (ordinary stores, last, so it is in cache for the caller). */
int clear_with_hot(char *base, size_t n, size_t start, size_t stop, int idx, int threads)
{
    struct cp_decision d;
    decide(n, 1, idx, threads, CP_POLICY_HOT_RANGE, stop - start, &d);
    return clear_hot_decided(base, n, start, stop, &d);
}

/* What the program said of the whole buffer (CP_POLICY_HOT_ALL: all of it
 * is used next; CP_POLICY_NOT_SOON: none of it soon), as the policy
 * decides it. */
int clear_whole(char *base, size_t n, int idx, int threads, int word)
{
    struct cp_decision d;
    decide(n, 1, idx, threads, word, 0, &d);
    if (word == CP_POLICY_HOT_ALL)
        return clear_hot_decided(base, n, n - d.hot_nbytes, n, &d);
    return clear_extent(base, n, d.routine, d.threads);
}

static int clear_hot_decided(char *base, size_t n, size_t start, size_t stop,
                             const struct cp_decision *dp)
{
    struct cp_decision d = *dp;
    size_t cold_n = n - (stop - start);
    char *addrs[2] = {base, base + stop};
    size_t lens[2] = {start, n - stop};
    if (cold_n) {
        struct cp_job *job = nat->job_new(addrs, lens, 2);
        if (!job) {
            PyErr_NoMemory();
            return -1;
        }
        if (d.skip_untouched)
            cold_n = skip_untouched(job, cold_n);
        int rc = run_job(job, d.routine, d.threads, d.unit, cold_n);
        nat->job_free(job);
        if (rc < 0)
            return -1;
    }
    if (stop > start)
        return clear_extent(base + start, stop - start, d.hot_routine, 1);
    return 0;
}

/* Run a job over n extents, decided by their total as one piece of work. */
int clear_extents(char **addrs, size_t *lens, size_t n, size_t total, int idx, int threads)
{
    if (n == 0)
        return 0;
    struct cp_decision d;
    decide(total, n, idx, threads, 0, 0, &d);
    struct cp_job *job = nat->job_new(addrs, lens, n);
    if (!job) {
        PyErr_NoMemory();
        return -1;
    }
    if (d.skip_untouched) {
        size_t left = skip_untouched(job, total);
        if (left < total) {       /* decided again, for what is left */
            total = left;
            decide(total, nat->job_extents(job), idx, threads, 0, 0, &d);
        }
    }
    int rc = run_job(job, d.routine, d.threads, d.unit, total);
    nat->job_free(job);
    return rc;
}
