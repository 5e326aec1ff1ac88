/*
 * numpy's arrays from a pool: an allocator handler (numpy's "mem_handler"
 * capsules, numpy 1.22+) whose calloc and malloc hand out pool blocks for
 * requests from min_size up to the block size, and pass every other
 * request, and every one the pool cannot serve at once, to the handler
 * that was in place before.
 *
 * numpy is not needed to build this: the handler's layout is numpy's
 * public, versioned struct (PyDataMem_Handler, version 1), declared here,
 * and numpy's functions are found when the handler is made, in the table
 * of numpy's C API (the capsule _ARRAY_API), at the fixed places numpy's
 * own header __multiarray_api.h gives them.
 *
 * numpy keeps a reference to the handler's capsule in every array it
 * allocated, so the capsule holds the pool's core (and the handler before
 * it): an array that outlives the `with` block and the Pool object still
 * gives its block back when it goes, and the memory stays until then.
 * The handler's functions run with the GIL held, as numpy calls them, and
 * never wait: a pool with no block to give right away is a refusal.
 */
#include <string.h>

#include "fast.h"

typedef struct {
    void *ctx;
    void *(*malloc)(void *ctx, size_t size);
    void *(*calloc)(void *ctx, size_t nelem, size_t elsize);
    void *(*realloc)(void *ctx, void *ptr, size_t new_size);
    void (*free)(void *ctx, void *ptr, size_t size);
} np_allocator;

typedef struct {
    char name[127];
    uint8_t version;            /* 1 */
    np_allocator allocator;
} np_handler;

#define NP_HANDLER_CAPSULE "mem_handler"

/* Places in numpy's C API table (numpy/__multiarray_api.h, numpy 1.22 to 2.x). */
enum {
    NP_GET_FEATURE_VERSION = 211,   /* PyArray_GetNDArrayCFeatureVersion */
    NP_SET_HANDLER = 304,           /* PyDataMem_SetHandler */
    NP_GET_HANDLER = 305            /* PyDataMem_GetHandler */
};
#define NP_FEATURE_HANDLERS 0x0000000f  /* NPY_1_22_API_VERSION */

static void **np_api;

struct pool_handler {
    np_handler handler;         /* first: the capsule's pointer is the handler */
    struct cp_pool *core;
    size_t min_size, block_size;
    PyObject *prev_capsule;     /* the handler in place before (a reference) */
    np_handler *prev;
};

static int np_import(void)
{
    if (np_api)
        return 0;
    PyObject *m = PyImport_ImportModule("numpy._core._multiarray_umath");
    if (!m && PyErr_ExceptionMatches(PyExc_ImportError)) {
        PyErr_Clear();
        m = PyImport_ImportModule("numpy.core._multiarray_umath");
    }
    if (!m)
        return -1;
    PyObject *c = PyObject_GetAttrString(m, "_ARRAY_API");
    Py_DECREF(m);
    if (!c)
        return -1;
    void **api = PyCapsule_GetPointer(c, NULL);
    Py_DECREF(c);
    if (!api)
        return -1;
    unsigned int version = ((unsigned int (*)(void))api[NP_GET_FEATURE_VERSION])();
    if (version < NP_FEATURE_HANDLERS) {
        PyErr_Format(PyExc_RuntimeError, "numpy's allocator handlers need numpy 1.22 or "
                     "newer (this numpy's C API is version %#x)", version);
        return -1;
    }
    np_api = api;
    return 0;
}

/* A block for n bytes, or NULL (the request goes to the handler before). */
static void *take(struct pool_handler *h, size_t n)
{
    if (n < h->min_size || n > h->block_size)
        return NULL;
    uintptr_t addr;
    if (native->pool_take(h->core, CP_POOL_PREPARE, 0, 0, &addr) != 0)
        return NULL;
    return (void *)addr;
}

static void *h_malloc(void *ctx, size_t n)
{
    struct pool_handler *h = ctx;
    void *p = take(h, n);
    return p ? p : h->prev->allocator.malloc(h->prev->allocator.ctx, n);
}

static void *h_calloc(void *ctx, size_t nelem, size_t elsize)
{
    struct pool_handler *h = ctx;
    size_t n;
    void *p = __builtin_mul_overflow(nelem, elsize, &n) ? NULL : take(h, n);
    return p ? p : h->prev->allocator.calloc(h->prev->allocator.ctx, nelem, elsize);
}

static void h_free(void *ctx, void *p, size_t size)
{
    struct pool_handler *h = ctx;
    if (p && native->pool_owns(h->core, (uintptr_t)p))
        native->pool_give(h->core, (uintptr_t)p);
    else
        h->prev->allocator.free(h->prev->allocator.ctx, p, size);
}

static void *h_realloc(void *ctx, void *p, size_t n)
{
    struct pool_handler *h = ctx;
    if (!p || !native->pool_owns(h->core, (uintptr_t)p))
        return h->prev->allocator.realloc(h->prev->allocator.ctx, p, n);
    if (n && n <= h->block_size)
        return p;               /* it still fits its block */
    void *q = h->prev->allocator.malloc(h->prev->allocator.ctx, n ? n : 1);
    if (!q)
        return NULL;            /* the block stays the array's */
    memcpy(q, p, n < h->block_size ? n : h->block_size);
    native->pool_give(h->core, (uintptr_t)p);
    return q;
}

static void handler_free(PyObject *capsule)
{
    struct pool_handler *h = PyCapsule_GetPointer(capsule, NP_HANDLER_CAPSULE);
    if (!h)
        return;
    Py_XDECREF(h->prev_capsule);
    native->pool_unref(h->core);
    PyMem_RawFree(h);
}

/* pool_handler(pool, min_size) -> capsule: a handler over pool, with the
 * handler in place now (numpy's current one) for everything else. */
static PyObject *make_handler(PyObject *pool, size_t min_size)
{
    if (np_import() < 0)
        return NULL;
    struct cp_pool *core = pool_core_ref(pool);
    if (!core)
        return NULL;
    struct pool_handler *h = PyMem_RawCalloc(1, sizeof *h);
    if (!h) {
        native->pool_unref(core);
        return PyErr_NoMemory();
    }
    h->core = core;
    h->min_size = min_size;
    PyObject *bs = PyObject_GetAttrString(pool, "block_size");
    h->block_size = bs ? PyLong_AsSize_t(bs) : (size_t)-1;
    Py_XDECREF(bs);
    h->prev_capsule = ((PyObject * (*)(void))np_api[NP_GET_HANDLER])();
    if (h->block_size == (size_t)-1 || !h->prev_capsule
            || !(h->prev = PyCapsule_GetPointer(h->prev_capsule, NP_HANDLER_CAPSULE))) {
        Py_XDECREF(h->prev_capsule);
        native->pool_unref(core);
        PyMem_RawFree(h);
        return NULL;
    }
    snprintf(h->handler.name, sizeof h->handler.name, "clearpages_pool");
    h->handler.version = 1;
    h->handler.allocator = (np_allocator){h, h_malloc, h_calloc, h_realloc, h_free};
    PyObject *capsule = PyCapsule_New(h, NP_HANDLER_CAPSULE, handler_free);
    if (!capsule) {
        Py_DECREF(h->prev_capsule);
        native->pool_unref(core);
        PyMem_RawFree(h);
    }
    return capsule;
}

/* pool_handler(pool, min_size) -> capsule; numpy_set_handler(capsule or
 * None) -> the handler in place before (numpy's PyDataMem_SetHandler:
 * this context's, a context variable). */
PyObject *fast_pool_handler(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *pool;
    unsigned long long min_size;
    if (!PyArg_ParseTuple(args, "OK", &pool, &min_size))
        return NULL;
    return make_handler(pool, (size_t)min_size);
}

PyObject *fast_numpy_set_handler(PyObject *self, PyObject *capsule)
{
    (void)self;
    if (np_import() < 0)
        return NULL;
    if (capsule != Py_None && !PyCapsule_IsValid(capsule, NP_HANDLER_CAPSULE)) {
        PyErr_SetString(PyExc_TypeError, "numpy_set_handler takes a mem_handler capsule "
                        "or None");
        return NULL;
    }
    return ((PyObject * (*)(PyObject *))np_api[NP_SET_HANDLER])(
        capsule == Py_None ? NULL : capsule);
}
