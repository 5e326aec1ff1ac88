/*
 * RegionMemory, the base type of clearpages.Region: it owns one mapping,
 * exports it as a buffer itself and counts the exports, so resize, move and
 * close can refuse while any is live.  The system calls are _native's.
 */
#include <errno.h>
#include <limits.h>

#include "fast.h"

typedef struct {
    PyObject_HEAD
    uintptr_t address;
    size_t size;
    Py_ssize_t exports;
    Py_ssize_t entry_exports;   /* of those, held by a clearpages call (clear, is_zero...) */
    int mapped;
    int kind, shift;            /* as mapped: page = 1 << shift */
    size_t limit, modulus;      /* address space; resize keeps addr % modulus */
    /* Memory a close-when-released (the end of a `with` block) detached
     * while views of it lived: unmapped when the last export goes. */
    uintptr_t orphan;
    size_t orphan_size;
    int protect;                /* CP_PROTECT_* flags, reapplied after a move */
    uint64_t generation;        /* cp_fork_generation() when mapped */
    int forked_away;            /* closed because this process is a child that
                                   did not inherit the memory */
    PyThread_type_lock lock;
} RegionMemory;

/* A forked child does not inherit a hugetlb Region nor one made with
 * fork="drop" (MADV_DONTFORK): there the object reads as closed, with an
 * error that says why, and never unmaps, since the child may have mapped
 * something else at that address since.  Every look at `mapped` comes
 * after this (one call that loads a counter). */
static void region_settle(RegionMemory *self)
{
    if (!(self->mapped || self->orphan_size)
        || !(self->kind == CP_REGION_HUGETLB || (self->protect & CP_PROTECT_DONTFORK))
        || native->fork_generation() == self->generation)
        return;
    self->mapped = 0;
    self->address = 0;
    self->size = 0;
    self->orphan = 0;
    self->orphan_size = 0;
    self->forked_away = 1;
}

static const char *closed_text(const RegionMemory *self)
{
    return self->forked_away
        ? "the Region is closed: a forked child does not inherit a hugetlb Region or "
          "one made with fork='drop' (MADV_DONTFORK), so it reads as closed here"
        : "the Region is closed";
}

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
    region_settle(self);
    if (self->mapped && self->exports == 0)
        native->region_unmap(self->address, self->size);
    if (self->orphan_size && self->exports == 0)
        native->region_unmap(self->orphan, self->orphan_size);
    self->mapped = 0;
    if (self->lock)
        PyThread_free_lock(self->lock);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static int region_getbuffer(RegionMemory *self, Py_buffer *view, int flags)
{
    region_lock(self);
    region_settle(self);
    if (!self->mapped) {
        region_unlock(self);
        PyErr_SetString(PyExc_ValueError, closed_text(self));
        view->obj = NULL;
        return -1;
    }
    int rc = PyBuffer_FillInfo(view, (PyObject *)self, (void *)self->address,
                               (Py_ssize_t)self->size, 0, flags);
    if (rc == 0) {
        self->exports++;
        if (entry_acquiring == (PyObject *)self) {
            self->entry_exports++;
            view->internal = &self->entry_exports;     /* marks it for the release */
        }
    }
    region_unlock(self);
    return rc;
}

static void region_releasebuffer(RegionMemory *self, Py_buffer *view)
{
    if (view->internal == &self->entry_exports)
        self->entry_exports--;
    region_settle(self);
    if (--self->exports == 0 && self->orphan_size) {
        /* The last view of memory the Region let go: unmap it now, as
         * dropping the Region would (nothing can export it again). */
        uintptr_t addr = self->orphan;
        size_t size = self->orphan_size;
        self->orphan = 0;
        self->orphan_size = 0;
        native->region_unmap(addr, size);
    }
}

static PyBufferProcs region_as_buffer = {
    (getbufferproc)region_getbuffer,
    (releasebufferproc)region_releasebuffer,
};

/* Under the lock: ValueError if closed, BufferError if exported. */
static int region_check(RegionMemory *self, const char *what)
{
    region_settle(self);
    if (!self->mapped) {
        PyErr_SetString(PyExc_ValueError, closed_text(self));
        return -1;
    }
    Py_ssize_t n = self->exports - self->entry_exports;
    if (self->entry_exports > 0) {
        /* The caller holds no view: a call in another thread does. */
        PyErr_Format(PyExc_BufferError,
                     "cannot %s a Region while a clearpages call (clear, clear_many, "
                     "clear_pages, is_zero or nonzero_pages) is clearing or reading it; "
                     "%s it after that call returns%s",
                     what, what, n > 0 ? " and every memoryview, numpy array and tensor of it "
                     "is released" : "");
        return -1;
    }
    if (n > 0) {
        PyErr_Format(PyExc_BufferError,
                     "cannot %s a Region while %zd view%s of it exist%s "
                     "(release every memoryview, numpy array and tensor of it first)",
                     what, n, n == 1 ? "" : "s", n == 1 ? "s" : "");
        return -1;
    }
    return 0;
}

/* ---- geometry: a Region's sizes and alignment, here alone ---------------- */

/* n bytes in whole pages of 1 << shift, into *out: 0, or EOVERFLOW where
 * that is more than the address space (limit). */
static int whole_pages(unsigned long long n, int shift, size_t limit, size_t *out)
{
    unsigned long long page = 1ull << shift;
    if (n > limit || n > ULLONG_MAX - page)
        return EOVERFLOW;
    unsigned long long r = (n + page - 1) / page * page;
    if (r > limit)
        return EOVERFLOW;
    *out = (size_t)r;
    return 0;
}

/* Where a new mapping of size bytes goes: at the largest page-table level
 * it fills (1 GiB, 2 MiB), so that later moves can go entry by entry at that
 * level (address space costs nothing); never below its page. */
static size_t table_alignment(size_t size, size_t page)
{
    size_t level = size >= ((size_t)1 << 30) ? (size_t)1 << 30
                 : size >= ((size_t)2 << 20) ? (size_t)2 << 20 : page;
    return level > page ? level : page;
}

/* _map(size, kind, page_shift, address_space, modulus) -> (errno, size):
 * size rounded up to whole pages and mapped, aligned by table_alignment;
 * EOVERFLOW where the rounded size is more than the address space. */
static PyObject *region_map(RegionMemory *self, PyObject *args)
{
    unsigned long long want, limit, modulus;
    int kind, shift;
    if (!PyArg_ParseTuple(args, "KiiKK", &want, &kind, &shift, &limit, &modulus))
        return NULL;
    if (shift < 12 || shift > 40 || !modulus) {
        PyErr_SetString(PyExc_ValueError, "_map: bad page shift or modulus");
        return NULL;
    }
    size_t size;
    if (whole_pages(want, shift, (size_t)limit, &size))
        return Py_BuildValue("(iK)", EOVERFLOW, want);
    size_t align = table_alignment(size, (size_t)1 << shift);
    region_lock(self);
    region_settle(self);
    if (self->mapped) {
        region_unlock(self);
        PyErr_SetString(PyExc_ValueError, "the Region is already mapped");
        return NULL;
    }
    uintptr_t out = 0;
    int err;
    Py_BEGIN_ALLOW_THREADS
    err = native->region_map(size, align, kind, shift, &out);
    Py_END_ALLOW_THREADS
    if (!err) {
        self->address = out;
        self->size = size;
        self->generation = native->fork_generation();
        self->forked_away = 0;
        self->mapped = 1;
        self->kind = kind;
        self->shift = shift;
        self->limit = (size_t)limit;
        self->modulus = (size_t)modulus;
    }
    region_unlock(self);
    return Py_BuildValue("(in)", err, (Py_ssize_t)size);
}

/* op: 0 resize, 1 move_congruent, 2 move_to. */
static PyObject *region_relocate(RegionMemory *self, int op, const char *what,
                                 unsigned long long a, unsigned long long b,
                                 unsigned long long c, unsigned long long d)
{
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
        err = native->region_resize(addr, size, new_size, (int)b, (int)c, (size_t)d, &out);
    } else if (op == 1) {
        err = native->region_move_congruent(addr, size, (size_t)a, (size_t)b, (size_t)c, &out);
    } else {
        out = (uintptr_t)b;
        err = native->region_move_to(addr, size, (size_t)a, out);
    }
    if (!err && self->protect) {
        /* mremap carries the flags with the mapping; a hugetlb region that
         * grew has new mappings, which get them here. */
        int failed;
        int perr = native->region_protect(out, new_size, self->protect, &failed);
        if (perr)
            err = perr | CP_REGION_UNPROTECTED;
    }
    Py_END_ALLOW_THREADS
    if (!err || (err & CP_REGION_UNPROTECTED)) {
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

/* Resize to v bytes, rounded up to whole pages, keeping the address modulo
 * the modulus it was mapped with; an errno (EOVERFLOW: the rounded size is
 * more than the address space) goes to the subclass's _resize_failed,
 * which says what failed (the messages live in Python). */
static PyObject *resize_to(RegionMemory *self, unsigned long long v)
{
    size_t n = 0;
    long err = whole_pages(v, self->shift, self->limit, &n);
    if (!err) {
        PyObject *r = region_relocate(self, 0, "resize", n, (unsigned)self->kind,
                                      (unsigned)self->shift, self->modulus);
        if (!r)
            return NULL;
        err = PyLong_AsLong(r);
        Py_DECREF(r);
        if (err == 0)
            Py_RETURN_NONE;
    }
    return PyObject_CallMethod((PyObject *)self, "_resize_failed", "ln", err,
                               (Py_ssize_t)(err == EOVERFLOW ? v : n));
}

/* _resize(new_size): resize_to, for the subclass's _resize_slow once it
 * has made new_size an int of at least 1 and found the Region open. */
static PyObject *region_resize(RegionMemory *self, PyObject *arg)
{
    unsigned long long v = PyLong_AsUnsignedLongLong(arg);
    if (v == (unsigned long long)-1 && PyErr_Occurred())
        return NULL;
    return resize_to(self, v);
}

/* resize(new_size): an exact int within the address space goes to the
 * system calls from here; anything else to the subclass's _resize_slow. */
static PyObject *region_resize_public(RegionMemory *self, PyObject *arg)
{
    region_settle(self);
    if (PyLong_CheckExact(arg) && self->mapped) {
        int overflow;
        long long v = PyLong_AsLongLongAndOverflow(arg, &overflow);
        if (!overflow && v > 0 && (unsigned long long)v <= self->limit)
            return resize_to(self, (unsigned long long)v);
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

/* Bound to _native and locked with the memory mapped: 1 (the caller
 * unlocks).  Closed: 0 and not locked.  -1: an error (the ValueError of a
 * closed Region unless closed_ok). */
static int region_lock_mapped(RegionMemory *self, int closed_ok)
{
    region_lock(self);
    region_settle(self);
    if (self->mapped)
        return 1;
    region_unlock(self);
    if (closed_ok)
        return 0;
    PyErr_SetString(PyExc_ValueError, closed_text(self));
    return -1;
}

static PyObject *region_discard(RegionMemory *self, PyObject *unused)
{
    (void)unused;
    if (region_lock_mapped(self, 0) < 0)
        return NULL;
    int err;
    uintptr_t addr = self->address;
    size_t size = self->size;
    Py_BEGIN_ALLOW_THREADS
    err = native->region_discard(addr, size);
    Py_END_ALLOW_THREADS
    region_unlock(self);
    return PyLong_FromLong(err);
}

/* close() (when_released 0): BufferError while exported.  The end of a
 * `with` block (when_released 1): never BufferError; while views live the
 * memory is detached, so the Region is closed at once and the memory goes
 * with the last view.  Closing twice is allowed. */
static PyObject *region_close_mapping(RegionMemory *self, int when_released)
{
    int rc = region_lock_mapped(self, 1);
    if (rc <= 0)
        return rc < 0 ? NULL : Py_NewRef(Py_None);
    if (!when_released && region_check(self, "close") < 0) {
        region_unlock(self);
        return NULL;
    }
    uintptr_t addr = self->address;
    size_t size = self->size;
    self->mapped = 0;
    self->address = 0;
    self->size = 0;
    if (self->exports > 0) {
        self->orphan = addr;
        self->orphan_size = size;
    } else {
        Py_BEGIN_ALLOW_THREADS
        native->region_unmap(addr, size);
        Py_END_ALLOW_THREADS
    }
    region_unlock(self);
    Py_RETURN_NONE;
}

static PyObject *region_close(RegionMemory *self, PyObject *unused)
{
    (void)unused;
    return region_close_mapping(self, 0);
}

static PyObject *region_close_when_released(RegionMemory *self, PyObject *unused)
{
    (void)unused;
    return region_close_mapping(self, 1);
}

/* _protect(flags) -> (errno, flag that failed): apply CP_PROTECT_* flags
 * now and after every move and resize. */
static PyObject *region_protect(RegionMemory *self, PyObject *arg)
{
    int flags = (int)PyLong_AsLong(arg);
    if ((flags == -1 && PyErr_Occurred()) || region_lock_mapped(self, 0) < 0)
        return NULL;
    uintptr_t addr = self->address;
    size_t size = self->size;
    int err, failed = 0;
    Py_BEGIN_ALLOW_THREADS
    err = native->region_protect(addr, size, flags, &failed);
    Py_END_ALLOW_THREADS
    if (!err)
        self->protect |= flags;
    region_unlock(self);
    return Py_BuildValue("(ii)", err, failed);
}

size_t region_page_size(PyObject *buf)
{
    /* Without a buffer it is no RegionMemory: a tensor asks no MRO walk. */
    PyBufferProcs *pb = Py_TYPE(buf)->tp_as_buffer;
    if (!pb || !pb->bf_getbuffer || !PyObject_TypeCheck(buf, &RegionMemoryType))
        return 0;
    region_settle((RegionMemory *)buf);
    if (!((RegionMemory *)buf)->mapped)
        return 0;
    return (size_t)1 << ((RegionMemory *)buf)->shift;
}

static PyObject *region_get_address(RegionMemory *self, void *closure)
{
    (void)closure;
    region_settle(self);
    return PyLong_FromSize_t(self->mapped ? self->address : 0);
}

static PyObject *region_get_size(RegionMemory *self, void *closure)
{
    (void)closure;
    region_settle(self);
    return PyLong_FromSize_t(self->mapped ? self->size : 0);
}

static PyObject *region_get_exports(RegionMemory *self, void *closure)
{
    (void)closure;
    return PyLong_FromSsize_t(self->exports);
}

static PyObject *region_get_forked_away(RegionMemory *self, void *closure)
{
    (void)closure;
    region_settle(self);
    return PyBool_FromLong(self->forked_away);
}

static PyObject *region_get_closed(RegionMemory *self, void *closure)
{
    (void)closure;
    region_settle(self);
    return PyBool_FromLong(!self->mapped);
}

static PyMethodDef region_methods[] = {
    {"_map", (PyCFunction)region_map, METH_VARARGS,
     "_map(size, kind, page_shift, address_space, modulus) -> (errno, size): map\n"
     "size bytes rounded up to whole pages (once), at the largest page-table level\n"
     "the size fills; EOVERFLOW where they are more than the address space.\n"
     "resize() keeps the address modulo modulus."},
    {"resize", (PyCFunction)region_resize_public, METH_O,
     "resize(new_size)\n--\n\n"
     "Grow or shrink to new_size (rounded up to whole pages).\n\n"
     "In place where the address space allows; otherwise moved by mremap to an\n"
     "address congruent with the current one modulo 1 GiB, so the kernel moves\n"
     "PUD/PMD entries and copies nothing.  Contents are kept (up to the smaller\n"
     "size), the grown part reads zero, page size and huge-page advice are kept.\n"
     "BufferError while views exist; on any failure the region is as it was."},
    {"_resize", (PyCFunction)region_resize, METH_O,
     "_resize(new_size): resize() of an int >= 1 (rounded up to whole pages); an errno\n"
     "goes to _resize_failed(errno, size)."},
    {"_move_congruent", (PyCFunction)region_move_congruent, METH_VARARGS,
     "_move_congruent(piece, modulus, residue) -> errno (BufferError while exported)."},
    {"_move_to", (PyCFunction)region_move_to, METH_VARARGS,
     "_move_to(piece, address) -> errno (BufferError while exported)."},
    {"_discard", (PyCFunction)region_discard, METH_NOARGS,
     "_discard() -> errno: MADV_DONTNEED over the memory."},
    DLPACK_EXPORT_METHODS("while it lives the region is neither closed nor moved (BufferError)."),
    {"_protect", (PyCFunction)region_protect, METH_O,
     "_protect(flags) -> (errno, failed flag): CP_PROTECT_* over the memory, now and\n"
     "after every move and resize."},
    {"_close_when_released", (PyCFunction)region_close_when_released, METH_NOARGS,
     "_close_when_released(): closed now; the memory is unmapped now, or when the\n"
     "last view of it is released."},
    {"_close", (PyCFunction)region_close, METH_NOARGS,
     "_close(): unmap (BufferError while exported; twice is allowed)."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef region_getset[] = {
    {"_address", (getter)region_get_address, NULL, "start address (0 when closed)", NULL},
    {"_size", (getter)region_get_size, NULL, "bytes (0 when closed)", NULL},
    {"_exports", (getter)region_get_exports, NULL, "live buffer exports", NULL},
    {"closed", (getter)region_get_closed, NULL, "True once closed (or never mapped)", NULL},
    {"_forked_away", (getter)region_get_forked_away, NULL,
     "True in a forked child that did not inherit the memory (it reads as closed)", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

PyTypeObject RegionMemoryType = {
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
