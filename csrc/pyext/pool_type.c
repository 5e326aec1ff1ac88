/*
 * PoolCore and BlockMemory, the base types of clearpages.Pool and
 * clearpages.Block.  The pool itself (its blocks, their states, the thread
 * that zeroes them) is the core's (core/pool.h); here: a block handed out
 * as a Python object that is its buffer and counts its exports, so that it
 * is given back only once no view of it is left, and acquire, which waits
 * without the GIL in short slices and looks for signals between them.
 * What a failure means in words is the Python side's (_take_failed).
 */
#include <math.h>

#include "fast.h"

/* A blocking acquire looks for signals (Ctrl-C) this often. */
#define WAIT_SLICE_NS 5000000u

typedef struct {
    PyObject_HEAD
    struct cp_pool *core;       /* NULL until _open */
    size_t block_size;
    int debug;
    int inherited;              /* a forked child has a copy of the memory */
    uint64_t generation;        /* cp_fork_generation() at _open */
    PyTypeObject *block_type;   /* what acquire makes: a BlockMemory subtype */
    PyObject *routine;          /* the name of the routine the thread zeroes with */
} PoolCore;

typedef struct {
    PyObject_HEAD
    PoolCore *pool;
    uintptr_t addr;
    size_t size;
    Py_ssize_t exports;
    int released;               /* given back */
    int pending;                /* given back when the last view goes */
} BlockMemory;

static int forked_away(const PoolCore *pool)
{
    return !pool->inherited && native->fork_generation() != pool->generation;
}

struct cp_pool *pool_core_ref(PyObject *obj)
{
    if (!PyObject_TypeCheck(obj, &PoolCoreType)) {
        PyErr_Format(PyExc_TypeError, "expected a clearpages.Pool, not %.200s",
                     Py_TYPE(obj)->tp_name);
        return NULL;
    }
    PoolCore *pool = (PoolCore *)obj;
    if (!pool->core) {
        PyErr_SetString(PyExc_ValueError, "the Pool is not open");
        return NULL;
    }
    native->pool_retain(pool->core);
    return pool->core;
}

/* ---- PoolCore ---------------------------------------------------------- */

static PyObject *pool_new(PyTypeObject *type, PyObject *args, PyObject *kw)
{
    (void)args;
    (void)kw;
    return type->tp_alloc(type, 0);
}

static void pool_dealloc(PoolCore *self)
{
    /* No block object is left (each holds a reference); the memory of
     * numpy's arrays holds the core, which keeps it until the last goes. */
    if (self->core) {
        struct cp_pool *core = self->core;
        self->core = NULL;
        Py_BEGIN_ALLOW_THREADS
        native->pool_close(core, 1);
        native->pool_unref(core);
        Py_END_ALLOW_THREADS
    }
    Py_CLEAR(self->block_type);
    Py_CLEAR(self->routine);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* _open(block_size, page_size, kind, huge_shift, max_blocks, grow_blocks,
 * low_water, max_rate, step, protect, debug, block_type, reuse) -> errno */
static PyObject *pool_open(PoolCore *self, PyObject *args)
{
    struct cp_pool_config c = {0};
    unsigned long long block_size, page_size, max_blocks, grow_blocks, low_water, max_rate,
        step;
    int kind, shift, protect, debug, reuse;
    PyObject *block_type;
    if (!PyArg_ParseTuple(args, "KKiiKKKKKiiO!i", &block_size, &page_size, &kind, &shift,
                          &max_blocks, &grow_blocks, &low_water, &max_rate, &step, &protect,
                          &debug, &PyType_Type, &block_type, &reuse))
        return NULL;
    if (self->core) {
        PyErr_SetString(PyExc_ValueError, "the Pool is already open");
        return NULL;
    }
    if (!PyType_IsSubtype((PyTypeObject *)block_type, &BlockMemoryType)) {
        PyErr_SetString(PyExc_TypeError, "_open: block_type must derive from BlockMemory");
        return NULL;
    }
    if (ensure_ready() < 0)
        return NULL;
    int variant = scan_variant();
    if (variant < 0)
        return NULL;
    /* The routine the policy runs over memory not used soon (hot=False):
     * streaming stores, unless CLEARPAGES_METHOD forces one. */
    struct cp_decision d;
    decide((size_t)block_size, 1, AUTO, 1, CP_POLICY_NOT_SOON, 0, &d);
    /* ... and what clear(hot=True) runs over a whole block, for a block
     * zeroed at its release and taken next (reuse; core/pool.c): ordinary
     * stores, where the block is no longer than hot_max.  reuse="auto"
     * tries that only where a plain clear of a block takes ordinary stores
     * too (below the streaming threshold): a larger block is not the
     * cache's to keep, and zeroing it at its release costs twice a
     * streaming zero on the program's path (64 MiB on the Intel guest, a
     * write a page in a tight loop: 7.1 ms a block against 0.7).
     * reuse="hot" over a longer block: the pool's routine. */
    struct cp_decision h, plain;
    decide((size_t)block_size, 1, AUTO, 1,
           native->policy_hot_all(&config.policy, NULL, (size_t)block_size), 0, &h);
    decide((size_t)block_size, 1, AUTO, 1, CP_POLICY_HOT_NONE, 0, &plain);
    int near = h.hot_why == CP_HOT_PART_WHOLE ? h.hot_routine : -1;
    int ordinary = plain.why == CP_WHY_TEMPORAL || plain.why == CP_WHY_MEMSET
        || plain.why == CP_WHY_MEMSET_BELOW_NT;
    if (near < 0 && reuse == CP_POOL_REUSE_HOT)
        near = d.routine;
    if (d.routine < 0 || d.routine >= config.n || !config.r[d.routine].fn
        || near >= config.n || (near >= 0 && !config.r[near].fn)) {
        PyErr_SetString(PyExc_RuntimeError, "clearpages: the policy named no usable routine");
        return NULL;
    }
    c.block_size = (size_t)block_size;
    c.page_size = (size_t)page_size;
    c.kind = kind;
    c.huge_shift = shift;
    c.max_blocks = (size_t)max_blocks;
    c.grow_blocks = (size_t)grow_blocks;
    c.low_water = (size_t)low_water;
    c.max_rate = (uint64_t)max_rate;
    c.step = (size_t)step;
    c.zero = config.r[d.routine].fn;
    c.zero_near = near >= 0 ? config.r[near].fn : NULL;
    c.near_tried = near >= 0 && ordinary;
    c.reuse = reuse;
    c.protect = protect;
    c.debug = debug;
    c.scan_variant = variant;
    struct cp_pool *core = NULL;
    int err = native->pool_new(&c, &core);
    if (err)
        return PyLong_FromLong(err);
    self->core = core;
    self->block_size = c.block_size;
    self->debug = debug;
    self->inherited = kind != CP_REGION_HUGETLB && !(protect & CP_PROTECT_DONTFORK);
    self->generation = native->fork_generation();
    Py_INCREF(block_type);
    self->block_type = (PyTypeObject *)block_type;
    self->routine = Py_NewRef(config.r[d.routine].name);
    return PyLong_FromLong(0);
}

static PyObject *new_block(PoolCore *self, uintptr_t addr)
{
    BlockMemory *b = (BlockMemory *)self->block_type->tp_alloc(self->block_type, 0);
    if (!b) {
        native->pool_give(self->core, addr);
        return NULL;
    }
    Py_INCREF(self);
    b->pool = self;
    b->addr = addr;
    b->size = self->block_size;
    return (PyObject *)b;
}

/* The Python side raises the error that says what err means. */
static PyObject *take_failed(PoolCore *self, int err, double seconds)
{
    return PyObject_CallMethod((PyObject *)self, "_take_failed", "id", err, seconds);
}

static PyObject *not_open(void)
{
    PyErr_SetString(PyExc_ValueError, "the Pool is not open");
    return NULL;
}

/* A block, waiting at most seconds (inf: as long as it takes).  A ready
 * one is taken with the GIL held; otherwise the caller zeroes or faults
 * in one itself, or waits, without the GIL, in slices between which
 * signal handlers run (and may raise: Ctrl-C). */
static PyObject *acquire_for(PoolCore *self, double seconds)
{
    if (!self->core)
        return not_open();
    uintptr_t addr;
    int err;
    if (!self->debug) {
        err = native->pool_take(self->core, CP_POOL_READY_ONLY | CP_POOL_WILL_RETRY, 0, 0, &addr);
        if (!err)
            return new_block(self, addr);
        if (err != EAGAIN)
            return take_failed(self, err, seconds);
    }
    uint64_t asked = native->adapt_now_ns();
    uint64_t deadline = isinf(seconds) || seconds * 1e9 >= (double)(UINT64_MAX - asked)
        ? UINT64_MAX : asked + (uint64_t)(seconds * 1e9);
    for (;;) {
        uint64_t now = native->adapt_now_ns();
        uint64_t left = deadline > now ? deadline - now : 0;
        uint64_t slice = left < WAIT_SLICE_NS ? left : WAIT_SLICE_NS;
        int last = left <= WAIT_SLICE_NS;
        struct cp_pool *core = self->core;
        Py_BEGIN_ALLOW_THREADS
        err = native->pool_take(core, CP_POOL_PREPARE | CP_POOL_WAIT
                             | (last ? 0 : CP_POOL_WILL_RETRY), asked, slice, &addr);
        Py_END_ALLOW_THREADS
        if (!err)
            return new_block(self, addr);
        if (err != EAGAIN || last)
            return take_failed(self, err, seconds);
        if (PyErr_CheckSignals() < 0)
            return NULL;
    }
}

static const char *const acquire_kw = "timeout";

/* acquire(*, timeout=None): the call without a timeout is taken here; any
 * other goes to the Python side's _acquire_slow, which checks it. */
static PyObject *pool_acquire(PoolCore *self, PyObject *const *args, Py_ssize_t nargs,
                              PyObject *kwnames)
{
    Py_ssize_t nkw = kwnames ? PyTuple_GET_SIZE(kwnames) : 0;
    if (nargs == 0 && (nkw == 0 || (nkw == 1 && args[0] == Py_None
            && PyUnicode_CompareWithASCIIString(PyTuple_GET_ITEM(kwnames, 0), acquire_kw) == 0)))
        return acquire_for(self, INFINITY);
    PyObject *slow = PyObject_GetAttrString((PyObject *)self, "_acquire_slow");
    if (!slow)
        return NULL;
    PyObject *r = PyObject_Vectorcall(slow, args, (size_t)nargs, kwnames);
    Py_DECREF(slow);
    return r;
}

static PyObject *pool_acquire_for(PoolCore *self, PyObject *arg)
{
    double seconds = PyFloat_AsDouble(arg);
    if (seconds == -1.0 && PyErr_Occurred())
        return NULL;
    if (!(seconds >= 0)) {
        PyErr_SetString(PyExc_ValueError, "_acquire_for: seconds >= 0");
        return NULL;
    }
    return acquire_for(self, seconds);
}

static PyObject *pool_acquire_nowait(PoolCore *self, PyObject *unused)
{
    (void)unused;
    if (!self->core)
        return not_open();
    uintptr_t addr;
    int err;
    if (!self->debug) {
        err = native->pool_take(self->core, CP_POOL_READY_ONLY, 0, 0, &addr);
    } else {
        struct cp_pool *core = self->core;
        Py_BEGIN_ALLOW_THREADS
        err = native->pool_take(core, CP_POOL_READY_ONLY, 0, 0, &addr);
        Py_END_ALLOW_THREADS
    }
    if (!err)
        return new_block(self, addr);
    if (err == EAGAIN)
        Py_RETURN_NONE;
    return take_failed(self, err, 0.0);
}

/* Give b back now, or (when_released) once its last view goes.  -1 with
 * BufferError where views of it live and !when_released. */
static int block_give(BlockMemory *b, int when_released)
{
    if (b->released || b->pending)
        return 0;
    if (b->exports > 0) {
        if (when_released) {
            b->pending = 1;
            return 0;
        }
        Py_ssize_t n = b->exports;
        PyErr_Format(PyExc_BufferError,
                     "cannot release a Block while %zd view%s of it exist%s (release "
                     "every memoryview, numpy array and tensor of it first, or leave its with "
                     "block, which releases it when the last view goes)",
                     n, n == 1 ? "" : "s", n == 1 ? "s" : "");
        return -1;
    }
    b->released = 1;
    int err = native->pool_give(b->pool->core, b->addr);
    if (err) {
        PyErr_Format(PyExc_SystemError, "clearpages: the pool did not take its block "
                     "back (errno %d)", err);
        return -1;
    }
    return 0;
}

static PyObject *pool_release(PoolCore *self, PyObject *blk)
{
    if (!PyObject_TypeCheck(blk, &BlockMemoryType)) {
        PyErr_Format(PyExc_TypeError, "release takes a Block that this Pool's acquire "
                     "returned, not %.200s", Py_TYPE(blk)->tp_name);
        return NULL;
    }
    if (((BlockMemory *)blk)->pool != self) {
        PyErr_SetString(PyExc_ValueError, "the Block belongs to another Pool: release it "
                        "there, or call blk.release()");
        return NULL;
    }
    if (block_give((BlockMemory *)blk, 0) < 0)
        return NULL;
    Py_RETURN_NONE;
}

/* _close(when_released) -> errno (EBUSY: blocks out, nothing changed). */
static PyObject *pool_close(PoolCore *self, PyObject *arg)
{
    int when_released = PyObject_IsTrue(arg);
    if (when_released < 0)
        return NULL;
    if (!self->core)
        return PyLong_FromLong(0);
    struct cp_pool *core = self->core;
    int err;
    Py_BEGIN_ALLOW_THREADS
    err = native->pool_close(core, when_released);
    Py_END_ALLOW_THREADS
    return PyLong_FromLong(err);
}

/* _trim() -> (errno, bytes handed back) */
static PyObject *pool_trim(PoolCore *self, PyObject *unused)
{
    (void)unused;
    if (!self->core)
        return not_open();
    struct cp_pool *core = self->core;
    uint64_t bytes = 0;
    int err;
    Py_BEGIN_ALLOW_THREADS
    err = native->pool_trim(core, &bytes);
    Py_END_ALLOW_THREADS
    return Py_BuildValue("(iK)", err, (unsigned long long)bytes);
}

static PyObject *pool_set_pace(PoolCore *self, PyObject *args)
{
    unsigned long long rate, low_water;
    if (!PyArg_ParseTuple(args, "KK", &rate, &low_water))
        return NULL;
    if (!self->core)
        return not_open();
    native->pool_set_pace(self->core, (uint64_t)rate, (size_t)low_water);
    Py_RETURN_NONE;
}

static PyObject *pool_owns(PoolCore *self, PyObject *arg)
{
    uintptr_t addr = (uintptr_t)PyLong_AsSize_t(arg);
    if (addr == (uintptr_t)-1 && PyErr_Occurred())
        return NULL;
    return PyBool_FromLong(self->core && native->pool_owns(self->core, addr));
}

static PyObject *pool_stats(PoolCore *self, PyObject *unused)
{
    (void)unused;
    if (!self->core)
        return not_open();
    struct cp_pool_stats s;
    native->pool_stats(self->core, &s);
#define N(x) (Py_ssize_t)(x)
#define K(x) (unsigned long long)(x)
    return Py_BuildValue(
        "{s:n,s:n,s:n,s:n,s:n,s:n,s:n,s:n,s:K,s:K,s:K,s:K,s:K,s:K,s:K,s:K,s:K,s:K,s:K,s:K,"
        "s:K,s:K,s:K,s:K,s:K,s:K,s:K,s:i,s:i,s:i,s:i,s:i}",
        "blocks", N(s.blocks), "fresh", N(s.fresh), "ready", N(s.ready), "dirty",
        N(s.dirty), "busy", N(s.busy), "out", N(s.out), "max_blocks", N(s.max_blocks),
        "ready_target", N(s.ready_target),
        "acquires", K(s.acquires), "acquires_ready", K(s.acquires_ready),
        "acquires_waited", K(s.acquires_waited), "wait_ns", K(s.wait_ns),
        "wait_max_ns", K(s.wait_max_ns), "refused", K(s.refused), "releases",
        K(s.releases), "zeroed_bytes", K(s.zeroed_bytes), "zero_ns", K(s.zero_ns),
        "paced_bytes", K(s.paced_bytes), "paced_ns", K(s.paced_ns),
        "caller_zeroed_bytes", K(s.caller_zeroed_bytes), "populated_bytes",
        K(s.populated_bytes), "grows", K(s.grows), "trimmed_bytes", K(s.trimmed_bytes),
        "checked", K(s.checked), "release_zeroed_bytes", K(s.release_zeroed_bytes),
        "release_zero_ns", K(s.release_zero_ns), "reuse_trials", K(s.reuse_trials),
        "reuse_hot", s.reuse_hot, "reuse_tried", s.reuse_tried, "closed", s.closed,
        "forked", s.forked, "error", s.error);
#undef N
#undef K
}

static PyObject *pool_get_block_size(PoolCore *self, void *closure)
{
    (void)closure;
    return PyLong_FromSize_t(self->block_size);
}

static PyObject *pool_get_routine(PoolCore *self, void *closure)
{
    (void)closure;
    return Py_NewRef(self->routine ? self->routine : Py_None);
}

static PyMethodDef pool_methods[] = {
    {"acquire", (PyCFunction)(void (*)(void))pool_acquire, METH_FASTCALL | METH_KEYWORDS,
     "acquire(*, timeout=None) -> Block\n--\n\n"
     "A zeroed, resident block: one made ready by the pool's thread at once;\n"
     "else the caller zeroes a released block or faults in a fresh one itself,\n"
     "or waits (timeout: seconds, None for as long as it takes; TimeoutError\n"
     "after it).  Ctrl-C interrupts the wait."},
    {"_acquire_for", (PyCFunction)pool_acquire_for, METH_O,
     "_acquire_for(seconds): acquire, waiting at most seconds (a float >= 0, inf)."},
    {"acquire_nowait", (PyCFunction)pool_acquire_nowait, METH_NOARGS,
     "acquire_nowait() -> Block or None\n--\n\n"
     "A block the pool's thread has made ready, or None when none is: never\n"
     "zeroes, faults in or waits."},
    {"release", (PyCFunction)pool_release, METH_O,
     "release(blk)\n--\n\n"
     "Give a block back (blk.release() does the same); the pool zeroes it\n"
     "before it leaves again.  BufferError while views of it exist."},
    {"_close", (PyCFunction)pool_close, METH_O,
     "_close(when_released) -> errno: EBUSY while blocks are out (unless\n"
     "when_released: the memory then goes with the last block)."},
    {"_trim", (PyCFunction)pool_trim, METH_NOARGS,
     "_trim() -> (errno, bytes): hand the idle blocks back to the kernel."},
    {"_set_pace", (PyCFunction)pool_set_pace, METH_VARARGS,
     "_set_pace(max_rate, low_water): bytes a second above the low-water mark\n"
     "(0: none, 2**64-1: no limit), and blocks kept ready flat out."},
    {"_owns", (PyCFunction)pool_owns, METH_O,
     "_owns(address) -> bool: the address lies in the pool's memory."},
    {"_stats", (PyCFunction)pool_stats, METH_NOARGS,
     "_stats() -> dict: the core's counters (core/pool.h, struct cp_pool_stats)."},
    {"_open", (PyCFunction)pool_open, METH_VARARGS,
     "_open(block_size, page_size, kind, huge_shift, max_blocks, grow_blocks,\n"
     "low_water, max_rate, step, protect, debug, block_type) -> errno: start the\n"
     "pool and its thread (once)."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef pool_getset[] = {
    {"block_size", (getter)pool_get_block_size, NULL, "bytes in a block", NULL},
    {"routine", (getter)pool_get_routine, NULL,
     "the routine the pool's thread zeroes with (the policy's for memory not used soon)",
     NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

PyTypeObject PoolCoreType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "clearpages._fast.PoolCore",
    .tp_basicsize = sizeof(PoolCore),
    .tp_dealloc = (destructor)pool_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE,
    .tp_doc = "Blocks zeroed by a native thread: the core under clearpages.Pool.",
    .tp_methods = pool_methods,
    .tp_getset = pool_getset,
    .tp_new = pool_new,
};

/* ---- BlockMemory --------------------------------------------------------- */

static PyObject *block_new(PyTypeObject *type, PyObject *args, PyObject *kw)
{
    (void)type;
    (void)args;
    (void)kw;
    PyErr_SetString(PyExc_TypeError, "a Block comes from Pool.acquire()");
    return NULL;
}

static void block_dealloc(BlockMemory *self)
{
    /* A view holds a reference, so none is left: give the block back. */
    if (self->pool && !self->released) {
        self->pending = 0;
        if (block_give(self, 0) < 0)
            PyErr_WriteUnraisable((PyObject *)self);
    }
    Py_CLEAR(self->pool);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static const char *block_gone(const BlockMemory *self)
{
    if (self->released || self->pending)
        return "the Block was released";
    if (forked_away(self->pool))
        return "the Block's memory is not in this forked child: the Pool was made with "
               "fork='drop' or hugetlb pages (MADV_DONTFORK)";
    return NULL;
}

static int block_getbuffer(BlockMemory *self, Py_buffer *view, int flags)
{
    const char *gone = block_gone(self);
    if (gone) {
        PyErr_SetString(PyExc_ValueError, gone);
        view->obj = NULL;
        return -1;
    }
    int rc = PyBuffer_FillInfo(view, (PyObject *)self, (void *)self->addr,
                               (Py_ssize_t)self->size, 0, flags);
    if (rc == 0)
        self->exports++;
    return rc;
}

static void block_releasebuffer(BlockMemory *self, Py_buffer *view)
{
    (void)view;
    if (--self->exports == 0 && self->pending) {
        self->pending = 0;
        if (block_give(self, 0) < 0)
            PyErr_WriteUnraisable((PyObject *)self);
    }
}

static PyBufferProcs block_as_buffer = {
    (getbufferproc)block_getbuffer,
    (releasebufferproc)block_releasebuffer,
};

static PyObject *block_release(BlockMemory *self, PyObject *unused)
{
    (void)unused;
    if (block_give(self, 0) < 0)
        return NULL;
    Py_RETURN_NONE;
}

static PyObject *block_release_when_unused(BlockMemory *self, PyObject *unused)
{
    (void)unused;
    if (block_give(self, 1) < 0)
        return NULL;
    Py_RETURN_NONE;
}

static Py_ssize_t block_length(BlockMemory *self)
{
    return (Py_ssize_t)self->size;
}

static PyObject *block_get_address(BlockMemory *self, void *closure)
{
    (void)closure;
    return PyLong_FromSize_t(self->addr);
}

static PyObject *block_get_size(BlockMemory *self, void *closure)
{
    (void)closure;
    return PyLong_FromSize_t(self->size);
}

static PyObject *block_get_released(BlockMemory *self, void *closure)
{
    (void)closure;
    return PyBool_FromLong(self->released || self->pending);
}

static PyObject *block_get_pool(BlockMemory *self, void *closure)
{
    (void)closure;
    return Py_NewRef((PyObject *)self->pool);
}

static PyObject *block_get_exports(BlockMemory *self, void *closure)
{
    (void)closure;
    return PyLong_FromSsize_t(self->exports);
}

static PyMethodDef block_methods[] = {
    {"release", (PyCFunction)block_release, METH_NOARGS,
     "release()\n--\n\n"
     "Give the block back to its pool (once; again does nothing).  BufferError\n"
     "while views of it exist."},
    {"_release_when_unused", (PyCFunction)block_release_when_unused, METH_NOARGS,
     "_release_when_unused(): given back now, or when its last view goes."},
    DLPACK_EXPORT_METHODS("while it lives the block is not given back."),
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef block_getset[] = {
    {"address", (getter)block_get_address, NULL, "start address of the block", NULL},
    {"size", (getter)block_get_size, NULL, "bytes", NULL},
    {"released", (getter)block_get_released, NULL, "True once given back", NULL},
    {"pool", (getter)block_get_pool, NULL, "the Pool it came from", NULL},
    {"_exports", (getter)block_get_exports, NULL, "live buffer exports", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PySequenceMethods block_as_sequence = {
    .sq_length = (lenfunc)block_length,
};

PyTypeObject BlockMemoryType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "clearpages._fast.BlockMemory",
    .tp_basicsize = sizeof(BlockMemory),
    .tp_dealloc = (destructor)block_dealloc,
    .tp_as_buffer = &block_as_buffer,
    .tp_as_sequence = &block_as_sequence,
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE,
    .tp_doc = "One block of a pool, itself a writable buffer.",
    .tp_methods = block_methods,
    .tp_getset = block_getset,
    .tp_new = block_new,
};
