/*
 * Private to clearpages._fast: what its files share.  Each file does one
 * job: module.c (the module and its method table), args.c (the argument
 * forms taken), run.c (calling a routine, running a job), entries.c
 * (clear, clear_many, clear_pages), config.c (binding to
 * clearpages._native, configure, and decide: the policy's answer for a
 * size), dlpack.c (tensors through DLPack), region_type.c (RegionMemory),
 * scan.c (is_zero, nonzero_pages), strided.c (the bytes a strided layout
 * covers), pool_type.c (PoolCore, BlockMemory), pool_numpy.c (numpy's
 * allocator handler over a pool).
 * What runs is decided by the core's policy (core/policy.h) and nowhere
 * here.
 *
 * Everything declared here is hidden: the module exports PyInit__fast
 * alone.
 */
#ifndef CLEARPAGES_FAST_H
#define CLEARPAGES_FAST_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <pythread.h>

#include <stddef.h>
#include <stdint.h>

#include "api.h"

#pragma GCC visibility push(hidden)

#if PY_VERSION_HEX < 0x030A0000
/* As Python 3.10 defines it: any object pointer, cast as Py_INCREF casts. */
static inline PyObject *cp_new_ref(PyObject *o)
{
    Py_INCREF(o);
    return o;
}
#define Py_NewRef(o) cp_new_ref((PyObject *)(o))
#endif

#define MAX_ROUTINES 16

/* ---- what _native provides: its table of entry points (core/api.h) ------- */

extern const struct cp_api *native; /* imported by PyInit__fast */

/* ---- what Python configured (config.c) ------------------------------------- */

struct routine {
    PyObject *name;             /* interned str */
    cp_clear_fn fn;             /* NULL: not usable here (unbuilt, masked) */
    cp_clear_fn job_fn;         /* the unfenced entry for jobs, else fn */
    int fence;                  /* job_fn needs one sfence per thread */
    int temporal;
};

struct config {
    int ready;
    int n;
    struct routine r[MAX_ROUTINES];             /* the routine table's order */
    struct cp_policy policy;                    /* what "auto" follows */
    size_t gil_min;
    uint64_t slice_ns;
};

extern struct config config;

extern PyObject *s_auto;            /* "auto", interned */
extern PyObject *default_threads;   /* 1, the default thread count */
extern PyObject *hook_init;         /* () -> None: build the state, configure */
extern PyObject *hook_clear;        /* (buf, method, threads, hot, err) */
extern PyObject *hook_many;         /* (seq, method, threads, bad) */
extern PyObject *hook_pages;        /* (buf, pages, page_size, method, threads, err) */
extern PyObject *hook_scan;         /* (name, buf, page_size, threads): is_zero, nonzero_pages */
extern PyObject *hook_hot;          /* (hot, nbytes, strided) -> (start, stop), or raises */
extern PyObject *page_index_error;  /* clearpages.PageIndexError */
extern PyObject *debug_hook;        /* tests: called before every slice */

/* Configure through the Python hook if that has not happened yet. */
int ensure_ready(void);

/* The policy's decision for a call (core/policy.h): idx a routine or AUTO,
 * threads 1.. or 0 for "auto". */
static inline void decide(size_t nbytes, size_t count, int idx, int threads, int hot,
                          size_t hot_nbytes, struct cp_decision *d)
{
    native->policy_decide(&config.policy, nbytes, count, idx, threads, hot, hot_nbytes, d);
}

/* ---- args.c ------------------------------------------------------------------ */

enum { AUTO = CP_POLICY_AUTO, DECLINE = -2 };

/* Sizes above this are typing mistakes, not memory (2**56 bytes; Python's
 * clearpages._units.MAX_SIZE is this, read from the module). */
#define MAX_SIZE ((unsigned long long)1 << 56)
/* What clear_pages and nonzero_pages count in, but for a Region's pages. */
#define DEFAULT_PAGE_SIZE 4096u

int method_index(PyObject *m);
int threads_value(PyObject *t);
int normalized_method_threads(const char *fn, PyObject *method, PyObject *threads, int *idx,
                              int *nthreads);
size_t page_size_value(PyObject *ps, PyObject *buf);
PyObject *page_size_for_hook(PyObject *ps, size_t psize);
int is_refusal(void);
PyObject *take_refusal(void);

/* PyObject_GetBuffer for an entry's own use (the buffer it clears or
 * reads): a Region exported so counts it apart from its views, so that a
 * resize from another thread meanwhile can say a call holds it.
 * entry_acquiring: the object being acquired, NULL between calls (the GIL
 * orders them). */
extern PyObject *entry_acquiring;
int entry_get_buffer(PyObject *obj, Py_buffer *view, int flags);

/* Buffers whose items hold references (numpy object arrays, structured
 * dtypes with object fields, a format with 'O') are never cleared: zeroing
 * them would drop every reference without releasing it (the objects leak,
 * the items read as None).  acquire_writable(obj, view, err, index) takes
 * the writable bytes of a buffer for clearing: 0 with *view held; 1 when
 * declined, *err the refusal's text for Python to explain; -1 with an
 * exception set (the TypeError of a buffer holding references among them).
 * index >= 0 names the piece of clear_many in the message.
 * check_references: -1 with that TypeError when obj's items (in any
 * buffer it exports) hold references, else 0. */
#define REFERENCES_REFUSAL \
    "the %s's items hold references (Python objects): zeroing them would drop " \
    "each reference without releasing it, so it was left unchanged; to reset an " \
    "object array, use a.fill(0)"

/* ... and a lone pointer (a ctypes pointer object, c_void_p, c_char_p),
 * whose bytes are the pointer, not what it points to. */
#define POINTER_REFUSAL \
    "the %s is a pointer: its buffer is the pointer itself, and clearing it would " \
    "set it to NULL, not clear what it points to, so it was left unchanged; pass " \
    "the object it points to (p.contents), or (ctypes.c_char * n).from_address(address)"

int acquire_writable(PyObject *obj, Py_buffer *view, PyObject **err, Py_ssize_t index);
/* acquire_writable, where a numpy.ndarray (or a subclass) or a memoryview
 * that is not one C-contiguous extent is taken as it is: *strided 1 with
 * *view as acquire_strided takes it. */
int acquire_writable_or_strided(PyObject *obj, Py_buffer *view, PyObject **err, int *strided);
/* A writable buffer with its shape and strides, its items checked: asked
 * with its format (PyBUF_RECORDS), or, where the exporter cannot state one
 * (numpy's datetime64), without, its items checked through the object.  0
 * with *view held, or -1 with the exporter's refusal (or the references'
 * TypeError) set. */
int acquire_strided(PyObject *obj, Py_buffer *view, Py_ssize_t index);
int check_references(PyObject *obj, Py_ssize_t index);
int refuse_references(PyObject *obj, Py_ssize_t index);
PyObject *fast_check_items(PyObject *, PyObject *);

/* The keyword names, interned once (PyInit__fast). */
extern const char *const kw_names[];
extern PyObject *kw_objects[4];

/* Keyword arguments of a vectorcall, by name. */
struct kw {
    const char *name;
    PyObject **slot;
};

/* The arguments of a vectorcall: npos positional-or-keyword ones named
 * posnames (the first nreq required; the others stay NULL when not given),
 * then the keyword-only kws. */
int parse_args(const char *fn, PyObject *const *args, Py_ssize_t nargs,
               PyObject *kwnames, int nreq, int npos, PyObject **pos,
               const char *const *posnames, struct kw *kws, int nkw);

/* ---- run.c ------------------------------------------------------------------- */

int call_debug_hook(const char *where, PyObject *routine, size_t n);
struct routine routine_take(int idx);
void routine_drop(struct routine *r);
int run_job(struct cp_job *job, int idx, int threads, size_t unit, size_t total);
int clear_extent(char *dst, size_t n, int idx, int threads);
int clear_with_hot(char *base, size_t n, size_t start, size_t stop, int idx, int threads);
int clear_whole(char *base, size_t n, int idx, int threads, int hint);
int clear_extents(char **addrs, size_t *lens, size_t n, size_t total, int idx, int threads);
struct strided_layout;
int clear_layout(struct strided_layout *s, size_t total, size_t count, int idx, int threads);
int run_decided(struct cp_job *job, size_t total, size_t count, int idx, int threads);
int clear_few_pages(char *base, size_t buflen, const int64_t *pages, size_t count,
                    size_t psize, int idx, int threads);

/* ---- the module's functions (entries.c, config.c) ------------------------------ */

PyObject *fast_clear(PyObject *, PyObject *const *, Py_ssize_t, PyObject *);
PyObject *fast_clear_exact(PyObject *, PyObject *const *, Py_ssize_t, PyObject *);
PyObject *fast_clear_many(PyObject *, PyObject *const *, Py_ssize_t, PyObject *);
PyObject *fast_clear_many_exact(PyObject *, PyObject *const *, Py_ssize_t, PyObject *);
PyObject *fast_clear_pages(PyObject *, PyObject *const *, Py_ssize_t, PyObject *);
PyObject *fast_clear_pages_exact(PyObject *, PyObject *const *, Py_ssize_t, PyObject *);
PyObject *fast_clear_extents(PyObject *, PyObject *const *, Py_ssize_t, PyObject *);
PyObject *fast_clear_strided(PyObject *, PyObject *const *, Py_ssize_t, PyObject *);
PyObject *fast_extents_of(PyObject *, PyObject *);

extern const char configure_doc[];
PyObject *fast_configure(PyObject *, PyObject *, PyObject *);
PyObject *fast_set_hooks(PyObject *, PyObject *, PyObject *);
PyObject *fast_set_debug_hook(PyObject *, PyObject *);
PyObject *fast_decide(PyObject *, PyObject *);
PyObject *fast_settings(PyObject *, PyObject *);
PyObject *fast_set_untouched(PyObject *, PyObject *);

PyObject *fast_is_zero(PyObject *, PyObject *const *, Py_ssize_t, PyObject *);
PyObject *fast_nonzero_pages(PyObject *, PyObject *const *, Py_ssize_t, PyObject *);
PyObject *fast_set_scan(PyObject *, PyObject *);
int scan_variant(void);

/* ---- strided.c: the bytes a strided layout covers ------------------------------- */

/* The union of the elements' bytes: one extent [base, base + len) when
 * nextents is 0, else nextents extents addrs[i], lens[i] (ascending,
 * disjoint, none touching the next) of len bytes in all. */
struct strided_extents {
    char *base;
    size_t len;
    size_t nextents;
    char **addrs;
    size_t *lens;
};

enum {
    STRIDED_OK = 0,
    STRIDED_NEGATIVE = -1,      /* a negative extent in the shape */
    STRIDED_TOO_LARGE = -2,     /* bytes beyond the address space (or its arithmetic) */
    STRIDED_NO_MEMORY = -3,     /* the list of extents would not fit in memory */
    STRIDED_NULL = -4,          /* a NULL data pointer for some element */
};

/* The layout of ndim dimensions at data + offset: shape, strides in units
 * of `unit` bytes (NULL: C order), items of `item` bytes.  A shape with a 0
 * is empty (len 0) whatever the strides say.  STRIDED_OK with *out set
 * (free it with strided_extents_free), or a negative status with nothing
 * held.  Needs the GIL (PyMem). */
int strided_extents(const void *data, uint64_t offset, int ndim, const int64_t *shape,
                    const int64_t *strides, int64_t unit, uint64_t item,
                    struct strided_extents *out);
void strided_extents_free(struct strided_extents *r);
/* The same extents, in address order, handed to visit(ctx, addrs, lens, n)
 * a batch at a time as they are found, with no list of them all made (a
 * scan can stop at the first that answers): until visit returns nonzero,
 * which goes into *stopped (0: every extent was visited).  A status as
 * strided_extents's. */
typedef int (*strided_visit)(void *ctx, char *const *addrs, const size_t *lens, size_t n);
int strided_walk(const void *data, uint64_t offset, int ndim, const int64_t *shape,
                 const int64_t *strides, int64_t unit, uint64_t item, strided_visit visit,
                 void *ctx, int *stopped);
/* A layout kept to be walked more than once, or without the GIL (the walk
 * allocates nothing): new and free need the GIL.  *len: the bytes its
 * elements cover; *count: how many extents a walk hands out at most (the
 * copies of its pattern; touching ones are merged).  walk: as
 * strided_walk's, returning what visit stopped with (0: all visited);
 * extents: strided_extents's result from it. */
struct strided_layout;
int strided_layout_new(const void *data, uint64_t offset, int ndim, const int64_t *shape,
                       const int64_t *strides, int64_t unit, uint64_t item,
                       struct strided_layout **out, uint64_t *len, uint64_t *count);
int strided_layout_walk(struct strided_layout *s, strided_visit visit, void *ctx);
/* Where every extent has one length and they come in rows (a pattern of one
 * block, along at least one dimension): row(ctx, first, len, stride, n,
 * stride1, n1) for each plane of n1 rows stride1 apart, each row n extents
 * of len bytes, stride apart, none touching the next in its row, until it
 * returns nonzero (returned); -1 (nothing called) for a layout not so
 * made. */
typedef int (*strided_row)(void *ctx, char *first, size_t len, size_t stride, size_t n,
                           size_t stride1, size_t n1);
int strided_layout_rows(struct strided_layout *s, strided_row row, void *ctx);
/* Rows where the layout comes so (strided_layout_rows), else extent by
 * extent (strided_layout_walk): what either returned. */
int strided_layout_each(struct strided_layout *s, strided_row row, strided_visit visit,
                        void *ctx);
int strided_layout_extents(struct strided_layout *s, struct strided_extents *out);
void strided_layout_free(struct strided_layout *s);
/* entries.c: the error of a buffer whose layout those refused (status < 0),
 * its message after prefix: -1. */
int buffer_layout_error(const char *prefix, int status);

/* ---- dlpack.c: tensors through DLPack ------------------------------------------------ */

/* What clear() of a DLPack producer holds while it clears: the capsule and
 * the managed tensor (released by dlpack_release, which calls its deleter),
 * the extent [base, base + len) or, for a tensor that does not tile its
 * bytes, nextents extents (addrs[i], lens[i]) totalling len.  dlpack_view_init
 * (dlpack.c) sets each field by name: a new field is set there too. */
struct dlpack_view {
    PyObject *capsule;
    struct DLManagedTensorVersioned *versioned;
    struct DLManagedTensor *legacy;
    PyObject *bump;             /* a torch tensor whose version counter to bump */
    PyObject *zero;             /* a torch tensor that autograd must see written: cleared
                                 * by its own zero_() after the others (len 0 here) */
    int direct;                 /* read without an export: keep the GIL */
    char *base;
    size_t len;
    size_t itemsize;            /* bytes an element (0 where not read: a direct view) */
    char **addrs;
    size_t *lens;
    size_t nextents;            /* 0: one extent [base, base + len) */
    struct strided_layout *layout;  /* small extents not listed yet (addrs NULL;
                                     * nextents: at most this many) */
};

/* 1: acquired (call dlpack_release); 0: obj has no __dlpack__ (no error);
 * -1: refused or failed, with the exception set and nothing held.
 * direct_max: the size below which the clear keeps the GIL throughout (0:
 * it may not), where a torch tensor may be read without an export. */
int dlpack_acquire(PyObject *obj, struct dlpack_view *v, size_t direct_max);
/* Whether obj's type has __dlpack__ (no error set either way). */
int dlpack_producer(PyObject *obj);
/* The same for reading (is_zero): read-only tensors and copies taken too. */
int dlpack_acquire_read(PyObject *obj, struct dlpack_view *v);
/* After the write (done: it all went well; else it stopped part way): bump
 * a torch tensor's version counter, or call the zero_() of one that
 * autograd records. */
int dlpack_written(struct dlpack_view *v, int done);
void dlpack_release(struct dlpack_view *v);
/* The list of a view's extents where its layout was kept instead (small
 * extents: clear() walks the layout, clear_many and is_zero want the list):
 * 0, or -1 with an error set. */
int dlpack_list_extents(struct dlpack_view *v);

/* ---- dlpack_export.c: our memory as a tensor ------------------------------------- */

/* __dlpack__(*, stream=None, max_version=None, dl_device=None, copy=None) and
 * __dlpack_device__() of a type with a buffer: a 1-D uint8 tensor over the
 * buffer, which the export holds as a view until its deleter runs. */
PyObject *dlpack_export(PyObject *self, PyObject *args, PyObject *kw);
PyObject *dlpack_device(PyObject *self, PyObject *unused);
/* Their entries in a type's method table; what says what a live export holds. */
#define DLPACK_EXPORT_METHODS(what)                                                   \
    {"__dlpack__", (PyCFunction)(void (*)(void))dlpack_export,                        \
     METH_VARARGS | METH_KEYWORDS,                                                    \
     "__dlpack__(*, stream=None, max_version=None, dl_device=None, copy=None)\n--\n\n" \
     "A DLPack tensor (1-D, uint8) of the memory, a view: " what},                      \
    {"__dlpack_device__", (PyCFunction)dlpack_device, METH_NOARGS,                    \
     "__dlpack_device__() -> (1, 0): the CPU."}

/* ---- region_type.c --------------------------------------------------------------- */

extern PyTypeObject RegionMemoryType;

/* A mapped Region's page size in bytes; 0 for anything else. */
size_t region_page_size(PyObject *buf);

/* ---- pool_type.c: PoolCore and BlockMemory, under clearpages.Pool ------------------ */

extern PyTypeObject PoolCoreType;
extern PyTypeObject BlockMemoryType;

/* The pool core of a PoolCore (a new reference: cp_pool_unref it), NULL
 * with ValueError when it is closed or not open. */
struct cp_pool *pool_core_ref(PyObject *pool);

/* ---- pool_numpy.c: numpy's arrays from a pool (an allocator handler) ------------- */

PyObject *fast_pool_handler(PyObject *, PyObject *);
PyObject *fast_numpy_set_handler(PyObject *, PyObject *);

#pragma GCC visibility pop

#endif
