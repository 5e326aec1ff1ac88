/*
 * Running: a routine called directly, or a job run in time slices with
 * the GIL released, signals checked between slices.
 */
#include <string.h>

#include "fast.h"

/* Tests see each step: hook(where, routine or None, nbytes), where is
 * "acquired" (every buffer held), "slice" (before each slice of a job) or
 * "call" (before a direct call).  One NULL test when no hook is set. */
int call_debug_hook(const char *where, PyObject *routine, size_t n)
{
    if (!debug_hook)
        return 0;
    PyObject *r = PyObject_CallFunction(debug_hook, "sOn", where,
                                        routine ? routine : Py_None, (Py_ssize_t)n);
    if (!r)
        return -1;
    Py_DECREF(r);
    return 0;
}

/* What a call runs is a copy of the configured routine taken when the call
 * chose it: a signal handler or another thread may reload the
 * configuration between two slices of a job (or within a hook, or while
 * the GIL is released), and the call goes on with the routines it started
 * with, never with an index into a table that has changed under it (a
 * masked routine's entry is NULL).  The copy holds its name while Python
 * code may run. */
struct routine routine_take(int idx)
{
    struct routine r = config.r[idx];
    Py_INCREF(r.name);
    return r;
}

void routine_drop(struct routine *r)
{
    Py_CLEAR(r->name);
}

/* Run a job to the end in slices; between slices, with the GIL, signal
 * handlers run and may raise (then the job stops: the caller frees it and
 * releases its buffers).  Small jobs keep the GIL. */
static int run_job_with(struct cp_job *job, const struct routine *r, int threads, size_t unit,
                        size_t total)
{
    if (native->job_configure(job, r->job_fn, unit, threads, r->fence) != 0) {
        PyErr_Format(PyExc_ValueError, "bad job configuration: %U, %d threads",
                     r->name, threads);
        return -1;
    }
    uint64_t slice = config.slice_ns;
    int release = threads > 1 || total >= config.gil_min;
    for (;;) {
        if (call_debug_hook("slice", r->name, total) < 0)
            return -1;
        int rc;
        if (release) {
            Py_BEGIN_ALLOW_THREADS
            rc = native->job_run(job, slice);
            Py_END_ALLOW_THREADS
        } else {
            rc = native->job_run(job, slice);
        }
        if (rc == 1)
            return 0;
        if (rc < 0) {
            int err = native->job_error(job);
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

int run_job(struct cp_job *job, int idx, int threads, size_t unit, size_t total)
{
    struct routine r = routine_take(idx);
    int rc = run_job_with(job, &r, threads, unit, total);
    routine_drop(&r);
    return rc;
}

static inline void call_fn(cp_clear_fn fn, void *dst, size_t n)
{
    if (n >= config.gil_min) {
        Py_BEGIN_ALLOW_THREADS
        fn(dst, n);
        Py_END_ALLOW_THREADS
    } else {
        fn(dst, n);
    }
}

/* The hook, when set, runs Python code: fn was read before it. */
static int call_routine(const struct routine *r, void *dst, size_t n)
{
    cp_clear_fn fn = r->fn;
    if (debug_hook && call_debug_hook("call", r->name, n) < 0)
        return -1;
    call_fn(fn, dst, n);
    return 0;
}

/* A job over n extents (cp_job_new), or NULL with MemoryError set. */
static struct cp_job *new_job(char **addrs, size_t *lens, size_t n)
{
    struct cp_job *job = native->job_new(addrs, lens, n);
    if (!job)
        PyErr_NoMemory();
    return job;
}

static int clear_extent_with(char *dst, size_t n, const struct routine *r, int threads,
                             size_t unit)
{
    if (threads == 1 && n <= unit)
        return call_routine(r, dst, n);
    if (n == 0)
        return 0;
    struct cp_job *job = new_job(&dst, &n, 1);
    if (!job)
        return -1;
    int rc = run_job_with(job, r, threads, unit, n);
    native->job_free(job);
    return rc;
}

/* The bytes of a job left to clear once the pages that read as zero
 * untouched are dropped from it (core/untouched.c), looked for without the
 * GIL: a fraction of a millisecond where it finds such pages, a few
 * microseconds where its sample shows none. */
static size_t skip_untouched(struct cp_job *job, size_t total)
{
    size_t dropped;
    Py_BEGIN_ALLOW_THREADS
    dropped = native->job_skip_untouched(job);
    Py_END_ALLOW_THREADS
    return total - dropped;
}

/* Where *d says so, the job's untouched pages are dropped and what is left
 * is decided again (into *d: its size and pieces are the job's now).
 * Returns the bytes left. */
static size_t drop_untouched(struct cp_job *job, size_t total, int idx, int threads,
                             struct cp_decision *d)
{
    if (!d->skip_untouched)
        return total;
    size_t left = skip_untouched(job, total);
    if (left < total)
        decide(left, native->job_extents(job), idx, threads, 0, 0, d);
    return left;
}

/* Decide, drop the untouched pages, decide again, run: a job of total
 * bytes in count pieces, with routine idx (or AUTO) on threads (0:
 * "auto").  The job stays the caller's to free. */
int run_decided(struct cp_job *job, size_t total, size_t count, int idx, int threads)
{
    struct cp_decision d;
    decide(total, count, idx, threads, 0, 0, &d);
    total = drop_untouched(job, total, idx, threads, &d);
    return run_job(job, d.routine, d.threads, d.unit, total);
}

/* One extent the policy (*d) clears without its untouched pages: 1 when
 * there were none (the caller clears as it decided), else 0 or -1 (an
 * error is set) once what is left is cleared. */
static int clear_untouched_aside(char *dst, size_t n, int idx, int threads,
                                 const struct cp_decision *d)
{
    struct cp_job *job = new_job(&dst, &n, 1);
    if (!job)
        return -1;
    struct cp_decision left_d = *d;
    size_t left = drop_untouched(job, n, idx, threads, &left_d);
    int rc = left == n ? 1 : left ? run_job(job, left_d.routine, left_d.threads,
                                            left_d.unit, left) : 0;
    native->job_free(job);
    return rc;
}

/* Clear one extent with routine idx (or "auto": idx AUTO) on threads
 * (0: "auto").  Where the policy says so (a single auto clear on one thread
 * in the adaptive band), the learner chooses the routine and the clear is
 * timed for it. */
int clear_extent(char *dst, size_t n, int idx, int threads)
{
    /* A buffer cleared again back to back, whose next clears the learner
     * has handed out (the fast slot): its role's routine, without a whole
     * decision.  What the policy would decide is checked as it stands now
     * (set_untouched, set_adaptive and configure change it between calls);
     * a hook sees each step, so none is skipped while one is set. */
    int direct = idx == AUTO && threads == 1 && !debug_hook
                 && cp_policy_learner_direct_inline(&config.policy, n);
    if (direct) {
        int ticket = cp_adapt_fast_take(native->adapt_fast, n, dst);
        if (ticket >= 0) {
            /* (The slot's calls are untimed: nothing to record.) */
            call_fn(config.r[cp_policy_role(&config.policy, n,
                                            ticket & CP_ADAPT_STREAMING)].fn, dst, n);
            return 0;
        }
    }
    struct cp_decision d;
    decide(n, 1, idx, threads, 0, 0, &d);
    if (d.skip_untouched) {
        int rc = clear_untouched_aside(dst, n, idx, threads, &d);
        if (rc != 1)
            return rc;
        /* The GIL was let go meanwhile: decided again, from the table now. */
        decide(n, 1, idx, threads, 0, 0, &d);
        if (!config.r[d.routine].fn) {
            PyErr_Format(PyExc_ValueError, "clearpages: %U was taken away by a "
                         "reload_config() during the call", config.r[d.routine].name);
            return -1;
        }
    }
    idx = d.routine;
    int ticket = -1;
    if (d.adaptive) {
        /* (Where direct, the slot was looked at above, and nothing has
         * changed it since.) */
        ticket = direct ? -1 : cp_adapt_fast_take(native->adapt_fast, n, dst);
        if (ticket < 0)
            ticket = native->adapt_choose(n, dst);
        if (ticket >= 0)
            idx = d.roles[ticket & CP_ADAPT_STREAMING];
    }
    int timed = ticket >= 0 && !(ticket & CP_ADAPT_UNTIMED);
    uint64_t t0 = timed ? native->adapt_now_ns() : 0;
    int rc;
    if (d.threads == 1 && n <= d.unit && !debug_hook) {
        call_fn(config.r[idx].fn, dst, n);     /* the per-call path: no Python code first */
        rc = 0;
    } else {
        struct routine r = routine_take(idx);
        rc = clear_extent_with(dst, n, &r, d.threads, d.unit);
        routine_drop(&r);
    }
    if (timed && rc == 0)
        native->adapt_record_span(n, ticket, t0, native->adapt_now_ns());
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

/* The program's hint for the whole buffer (CP_POLICY_HOT_ALL: all of it
 * is used next; CP_POLICY_NOT_SOON: none of it soon), as the policy
 * decides it (hot=True: with the buffer's history, cp_policy_hot_all). */
int clear_whole(char *base, size_t n, int idx, int threads, int hint)
{
    struct cp_decision d;
    if (hint == CP_POLICY_HOT_ALL)
        hint = native->policy_hot_all(&config.policy, base, n);
    decide(n, 1, idx, threads, hint, 0, &d);
    if (hint == CP_POLICY_HOT_ALL || hint == CP_POLICY_HOT_ALL_OTHER)
        return clear_hot_decided(base, n, n - d.hot_nbytes, n, &d);
    return clear_extent(base, n, d.routine, d.threads);
}

/* Both routines are taken before the cold job runs: between its slices a
 * signal handler may reload the configuration. */
static int clear_hot_decided(char *base, size_t n, size_t start, size_t stop,
                             const struct cp_decision *dp)
{
    struct cp_decision d = *dp, hd;
    decide(stop - start, 1, d.hot_routine, 1, 0, 0, &hd);
    struct routine cold = routine_take(d.routine), hot = routine_take(d.hot_routine);
    size_t cold_n = n - (stop - start);
    char *addrs[2] = {base, base + stop};
    size_t lens[2] = {start, n - stop};
    int rc = 0;
    if (cold_n) {
        struct cp_job *job = new_job(addrs, lens, 2);
        if (!job) {
            rc = -1;
        } else {
            if (d.skip_untouched)
                cold_n = skip_untouched(job, cold_n);
            rc = run_job_with(job, &cold, d.threads, d.unit, cold_n);
            native->job_free(job);
        }
    }
    if (rc == 0 && stop > start)
        rc = clear_extent_with(base + start, stop - start, &hot, 1, hd.unit);
    routine_drop(&cold);
    routine_drop(&hot);
    return rc;
}

/* ---- small extents, cleared as they come ------------------------------------ */

/* Extents this short on average (a strided view of small elements: a
 * column of a matrix, every other byte; the rows of a 2-D slice; many
 * short buffers) are cleared one by one on the calling thread as they are
 * listed or walked, not as a job, where the policy says so
 * (cp_decision.one_by_one: under CP_POLICY_PIECE_DIRECT a piece, one
 * thread): a job's bookkeeping (a sorted copy of the list, a position per
 * extent, a unit loop around each routine call) costs tens of nanoseconds
 * an extent, more than the clear of an element, and a walked layout needs
 * no list at all.  The policy's memset runs inline (stores of a size the
 * compiler knows, for elements of 1-64 bytes in rows); a named routine is
 * called for each extent, fenced once at the end. */
/* Extents between looks at the clock, for the slice's end; an extent
 * longer than FINE_UNIT counts as one a FINE_UNIT (4 MiB between looks). */
#define FINE_CHECK 16384u
#define FINE_UNIT 256u
/* A list with an extent longer than this is a job however short the rest. */
#define FINE_LONG (4u * CP_POLICY_PIECE_DIRECT)

struct fine {
    cp_clear_fn fn;             /* NULL: memset, inline */
    struct routine r;           /* the routine decided, held */
    size_t total;
    PyThreadState *ts;          /* the GIL let go (NULL: held throughout) */
    uint64_t deadline;
    size_t since;               /* extents since the clock was read (FINE_UNIT) */
    int timed;                  /* it may come to FINE_CHECK: the slice's end is kept */
};

/* Between slices: the GIL taken back, the hook, the signal handlers (which
 * may raise: then the clear stops, -1). */
static int fine_pause(struct fine *f)
{
    if (f->ts)
        PyEval_RestoreThread(f->ts);
    int rc = call_debug_hook("slice", f->r.name, f->total) < 0 || PyErr_CheckSignals() < 0;
    if (f->ts)
        f->ts = PyEval_SaveThread();
    if (f->timed)
        f->deadline = native->adapt_now_ns() + config.slice_ns;
    return rc ? -1 : 0;
}

/* n more extents cleared (counted as fine_units do): past FINE_CHECK of
 * them, a look at the clock, and a pause where the slice is over.  1: stop
 * (an error is set). */
static int fine_tick(struct fine *f, size_t n)
{
    f->since += n;
    if (f->since < FINE_CHECK)
        return 0;
    f->since = 0;
    return native->adapt_now_ns() >= f->deadline && fine_pause(f) < 0;
}

/* What an extent of len bytes counts towards FINE_CHECK: 1, or one a
 * FINE_UNIT for a longer one (rows of 8 KiB look at the clock every 512). */
static size_t fine_units(size_t len)
{
    return len > FINE_UNIT ? len / FINE_UNIT : 1;
}

static int fine_visit(void *ctx, char *const *addrs, const size_t *lens, size_t n)
{
    struct fine *f = ctx;
    size_t units = 0;
    if (f->fn) {
        for (size_t i = 0; i < n; i++) {
            f->fn(addrs[i], lens[i]);
            units += fine_units(lens[i]);
        }
    } else {
        for (size_t i = 0; i < n; i++) {
            memset(addrs[i], 0, lens[i]);
            units += fine_units(lens[i]);
        }
    }
    return fine_tick(f, units);
}

/* A row of n extents of len bytes, stride apart: a loop of stores of a
 * size the compiler knows where len is one of the element sizes. */
#define ZERO_ROW(L)                                   \
    do {                                              \
        size_t t = 0;                                 \
        for (; t + 4 <= m; t += 4) {                  \
            memset(p + t * stride, 0, L);             \
            memset(p + (t + 1) * stride, 0, L);       \
            memset(p + (t + 2) * stride, 0, L);       \
            memset(p + (t + 3) * stride, 0, L);       \
        }                                             \
        for (; t < m; t++)                            \
            memset(p + t * stride, 0, L);             \
    } while (0)

static inline __attribute__((always_inline)) int
fine_row1(struct fine *f, char *p, size_t len, size_t stride, size_t n, size_t unit,
          size_t most)
{
    while (n) {
        size_t m = n < most ? n : most;
        if (f->fn) {
            for (size_t t = 0; t < m; t++)
                f->fn(p + t * stride, len);
        } else {
            switch (len) {
            case 1: ZERO_ROW(1); break;
            case 2: ZERO_ROW(2); break;
            case 4: ZERO_ROW(4); break;
            case 8: ZERO_ROW(8); break;
            case 16: ZERO_ROW(16); break;
            case 32: ZERO_ROW(32); break;
            case 64: ZERO_ROW(64); break;
            default: ZERO_ROW(len); break;
            }
        }
        p += m * stride;
        n -= m;
        if (fine_tick(f, m * unit))
            return 1;
    }
    return 0;
}

static int fine_row(void *ctx, char *p, size_t len, size_t stride, size_t n,
                    size_t stride1, size_t n1)
{
    size_t unit = fine_units(len);
    if (unit == 1) {
        /* (Short rows, the common case: inlined with the constants.) */
        for (size_t r = 0; r < n1; r++)
            if (fine_row1(ctx, p + r * stride1, len, stride, n, 1, FINE_CHECK))
                return 1;
        return 0;
    }
    size_t most = unit < FINE_CHECK ? FINE_CHECK / unit : 1;    /* extents between ticks */
    for (size_t r = 0; r < n1; r++)
        if (fine_row1(ctx, p + r * stride1, len, stride, n, unit, most))
            return 1;
    return 0;
}

static void fine_fence(void)
{
#if defined(__x86_64__) && !defined(CP_PORTABLE)
    __builtin_ia32_sfence();
#endif
}

/* Clear extents one by one with the routine decided (d->routine), by
 * walk(ctx, visit, fine) (n extents at most) or, walk NULL, from the list
 * (addrs, lens, n): total bytes in all.  The GIL is let go for a total of
 * gil_min or more; signals are looked at each slice.  0, or -1 with an
 * error set. */
typedef int (*fine_walk)(void *ctx, strided_visit visit, void *fine);

static int clear_fine(fine_walk walk, void *ctx, char **addrs, size_t *lens, size_t n,
                      size_t total, const struct cp_decision *d)
{
    struct fine f = {0};
    f.total = total;
    /* Fewer than FINE_CHECK extents in all (each long one counted as
     * fine_units does): no tick comes, and the clock is not read for the
     * slice's end (20 ns of a small column's 200). */
    f.timed = n + total / FINE_UNIT >= FINE_CHECK;
    f.r = routine_take(d->routine);
    f.fn = d->routine == config.policy.memset ? NULL : f.r.job_fn;
    int stopped = fine_pause(&f);       /* the hook's first "slice" */
    if (!stopped) {
        if (total >= config.gil_min)
            f.ts = PyEval_SaveThread();
        if (walk) {
            stopped = walk(ctx, fine_visit, &f);
        } else {
            for (size_t i = 0; i < n && !stopped; i += 4096)
                stopped = fine_visit(&f, addrs + i, lens + i, n - i < 4096 ? n - i : 4096);
        }
        if (f.fn && f.r.fence)
            fine_fence();
        if (f.ts)
            PyEval_RestoreThread(f.ts);
    }
    routine_drop(&f.r);
    return stopped ? -1 : 0;
}

/* A layout in rows where it comes so (most strided views), else extent by
 * extent. */
static int walk_layout(void *ctx, strided_visit visit, void *fine)
{
    return strided_layout_each(ctx, fine_row, visit, fine);
}

/* A layout's bytes (total of them, in at most count extents): one by one
 * where the policy says so, else as a job from their list. */
int clear_layout(struct strided_layout *s, size_t total, size_t count, int idx, int threads)
{
    if (total == 0)
        return 0;
    struct cp_decision d;
    decide(total, count, idx, threads, 0, 0, &d);
    if (d.one_by_one)
        return clear_fine(walk_layout, s, NULL, NULL, count, total, &d);
    struct strided_extents r;
    int status = strided_layout_extents(s, &r);
    if (status < 0)
        return buffer_layout_error("", status);
    int rc = r.nextents ? clear_extents(r.addrs, r.lens, r.nextents, r.len, idx, threads)
                        : clear_extents(&r.base, &r.len, 1, r.len, idx, threads);
    strided_extents_free(&r);
    return rc;
}

/* Run a job over n extents, decided by their total as one piece of work. */
int clear_extents(char **addrs, size_t *lens, size_t n, size_t total, int idx, int threads)
{
    if (n == 0)
        return 0;
    struct cp_decision d;
    decide(total, n, idx, threads, 0, 0, &d);
    if (d.one_by_one) {
        /* (Unless one is long: a job slices it, and streams it where the
         * policy says so.) */
        size_t i = 0;
        while (i < n && lens[i] <= FINE_LONG)
            i++;
        if (i == n)
            return clear_fine(NULL, NULL, addrs, lens, n, total, &d);
    }
    struct cp_job *job = new_job(addrs, lens, n);
    if (!job)
        return -1;
    int rc = run_decided(job, total, n, idx, threads);
    native->job_free(job);
    return rc;
}

/* clear_pages of a buffer of fewer than gil_min bytes in at most 64 pages,
 * cleared on one thread (as the policy decides for the pages listed): the
 * extents of those pages, each cleared by the decided routine in a direct
 * call.  A job's allocations, slices and clock reads cost more than the
 * clear of a 4 KiB page.  1: cleared; 0: not such a call, or an index out
 * of range (a job is built, and refuses it in its words), nothing written. */
int clear_few_pages(char *base, size_t buflen, const int64_t *pages, size_t count,
                    size_t psize, int idx, int threads)
{
    if (buflen >= config.gil_min || psize == 0)
        return 0;
    uint64_t npages = buflen / psize + (buflen % psize != 0);
    if (npages > 64)
        return 0;
    uint64_t set = 0;
    size_t total = 0;
    for (size_t i = 0; i < count; i++) {
        if (pages[i] < 0 || (uint64_t)pages[i] >= npages)
            return 0;
        uint64_t bit = (uint64_t)1 << pages[i];
        if (!(set & bit)) {
            size_t off = (size_t)pages[i] * psize;
            total += buflen - off < psize ? buflen - off : psize;   /* the last may be short */
            set |= bit;
        }
    }
    struct cp_decision d;
    decide(total, count, idx, threads, 0, 0, &d);
    cp_clear_fn fn = config.r[d.routine].fn;
    if (d.threads != 1 || d.skip_untouched || total > d.unit || !fn)
        return 0;
    while (set) {
        unsigned first = (unsigned)__builtin_ctzll(set);
        uint64_t rest = ~(set >> first);    /* the run ends at its first 0 */
        unsigned n = rest ? (unsigned)__builtin_ctzll(rest) : 64 - first;
        size_t off = first * psize, end = (size_t)(first + n) * psize;
        fn(base + off, (end < buflen ? end : buflen) - off);
        set &= n + first >= 64 ? 0 : ~(uint64_t)0 << (first + n);
    }
    return 1;
}
