/*
 * Our memory given out as a tensor: __dlpack__ and __dlpack_device__ of
 * the types that own memory (BlockMemory under clearpages.Block,
 * RegionMemory under clearpages.Region), the producer's side of DLPack
 * (dlpack.c is the consumer's).  No numpy needed: torch.from_dlpack(blk)
 * takes it directly.
 *
 * The tensor is a 1-D array of uint8 over the object's whole buffer, which
 * the export holds (PyObject_GetBuffer) until the consumer calls the
 * deleter.  So an export is a view like any other: while it lives a Block
 * is not given back (release() raises BufferError; leaving its with block
 * gives it back when the last view goes) and a Region is neither closed
 * nor moved.  The deleter runs once, from whatever thread the consumer
 * frees the tensor on: it takes the GIL to let the view go.
 *
 * __dlpack__(*, stream=None, max_version=None, dl_device=None, copy=None):
 * a versioned capsule ("dltensor_versioned", DLPack 1.0) where max_version
 * allows one, else an unversioned one ("dltensor"); copy=True hands out a
 * copy flagged as one, in memory of its own; a read-only buffer can be
 * exported only versioned (the unversioned form cannot say read-only).
 */
#include <stdlib.h>
#include <string.h>

#include "dlpack_abi.h"
#include "fast.h"

/* One export: the managed tensor first (its address is what the deleter
 * gets), its shape and strides, and what it holds. */
struct exported {
    union {
        DLManagedTensorVersioned versioned;
        DLManagedTensor legacy;
    } m;
    int64_t shape, stride;
    Py_buffer view;             /* view.obj NULL: a copy, nothing held */
    void *copy;
};

static const char versioned_name[] = "dltensor_versioned", legacy_name[] = "dltensor";

static void let_go(struct exported *e)
{
    /* After the interpreter is gone the view cannot be let go; its memory
     * went with the process's objects. */
    if (e->view.obj && Py_IsInitialized()) {
        PyGILState_STATE g = PyGILState_Ensure();
        PyBuffer_Release(&e->view);
        PyGILState_Release(g);
    }
    free(e->copy);
    free(e);
}

static void delete_versioned(DLManagedTensorVersioned *m)
{
    let_go((struct exported *)m);
}

static void delete_legacy(DLManagedTensor *m)
{
    let_go((struct exported *)m);
}

/* A capsule no consumer took (its name is still ours) ends its tensor. */
static void capsule_gone(PyObject *cap)
{
    PyObject *type, *value, *tb;
    PyErr_Fetch(&type, &value, &tb);
    if (PyCapsule_IsValid(cap, versioned_name)) {
        DLManagedTensorVersioned *m = PyCapsule_GetPointer(cap, versioned_name);
        m->deleter(m);
    } else if (PyCapsule_IsValid(cap, legacy_name)) {
        DLManagedTensor *m = PyCapsule_GetPointer(cap, legacy_name);
        m->deleter(m);
    }
    PyErr_Restore(type, value, tb);
}

/* max_version: None (unversioned) or a (major, minor) pair.  1 versioned,
 * 0 unversioned, -1 error. */
static int wants_versioned(PyObject *max_version)
{
    if (max_version == Py_None)
        return 0;
    if (!PyTuple_Check(max_version) || PyTuple_GET_SIZE(max_version) != 2) {
        PyErr_Format(PyExc_TypeError, "max_version takes a (major, minor) tuple or None, "
                     "not %.200s", Py_TYPE(max_version)->tp_name);
        return -1;
    }
    long major = PyLong_AsLong(PyTuple_GET_ITEM(max_version, 0));
    if (major == -1 && PyErr_Occurred())
        return -1;
    return major >= 1;
}

/* dl_device: None or (kDLCPU, 0), the memory's own. */
static int device_ok(PyObject *dl_device)
{
    if (dl_device == Py_None)
        return 0;
    int type = -1, id = -1;
    if (PyTuple_Check(dl_device) && PyTuple_GET_SIZE(dl_device) == 2) {
        type = (int)PyLong_AsLong(PyTuple_GET_ITEM(dl_device, 0));
        id = (int)PyLong_AsLong(PyTuple_GET_ITEM(dl_device, 1));
        if (PyErr_Occurred())
            return -1;
    }
    if (type == kDLCPU && id == 0)
        return 0;
    PyErr_Format(PyExc_BufferError, "the memory is on the CPU (device (1, 0)) and is "
                 "exported there only, not to %R", dl_device);
    return -1;
}

PyObject *dlpack_export(PyObject *self, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"stream", "max_version", "dl_device", "copy", NULL};
    PyObject *stream = Py_None, *max_version = Py_None, *dl_device = Py_None,
        *copy_arg = Py_None;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "|$OOOO:__dlpack__", kwlist, &stream,
                                     &max_version, &dl_device, &copy_arg))
        return NULL;
    if (stream != Py_None) {
        PyErr_SetString(PyExc_ValueError, "stream must be None: the memory is on the CPU, "
                        "where there are no streams");
        return NULL;
    }
    int versioned = wants_versioned(max_version);
    if (versioned < 0 || device_ok(dl_device) < 0)
        return NULL;
    int copy = copy_arg == Py_None ? 0 : PyObject_IsTrue(copy_arg);
    if (copy < 0)
        return NULL;

    struct exported *e = calloc(1, sizeof *e);
    if (!e)
        return PyErr_NoMemory();
    if (PyObject_GetBuffer(self, &e->view, PyBUF_SIMPLE) < 0) {
        free(e);
        return NULL;
    }
    if (e->view.readonly && !versioned && !copy) {
        PyBuffer_Release(&e->view);
        free(e);
        PyErr_SetString(PyExc_BufferError, "a read-only buffer is exported only as a "
                        "versioned DLPack tensor (max_version=(1, 0)), which can say so");
        return NULL;
    }
    void *data = e->view.buf;
    if (copy) {
        e->copy = malloc(e->view.len ? (size_t)e->view.len : 1);
        if (!e->copy) {
            PyBuffer_Release(&e->view);
            free(e);
            return PyErr_NoMemory();
        }
        memcpy(e->copy, e->view.buf, (size_t)e->view.len);
        data = e->copy;
    }
    e->shape = e->view.len;
    e->stride = 1;
    DLTensor t = {
        .data = data,
        .device = {kDLCPU, 0},
        .ndim = 1,
        .dtype = {1 /* kDLUInt */, 8, 1},
        .shape = &e->shape,
        .strides = &e->stride,
        .byte_offset = 0,
    };
    uint64_t flags = copy ? DLPACK_FLAG_BITMASK_IS_COPIED
                          : e->view.readonly ? DLPACK_FLAG_BITMASK_READ_ONLY : 0;
    if (copy)
        PyBuffer_Release(&e->view);     /* the copy holds nothing of ours */

    PyObject *cap;
    if (versioned) {
        e->m.versioned = (DLManagedTensorVersioned){
            .version = {1, 0}, .manager_ctx = e, .deleter = delete_versioned,
            .flags = flags, .dl_tensor = t};
        cap = PyCapsule_New(&e->m.versioned, versioned_name, capsule_gone);
    } else {
        e->m.legacy = (DLManagedTensor){.dl_tensor = t, .manager_ctx = e,
                                        .deleter = delete_legacy};
        cap = PyCapsule_New(&e->m.legacy, legacy_name, capsule_gone);
    }
    if (!cap)
        let_go(e);
    return cap;
}

PyObject *dlpack_device(PyObject *self, PyObject *unused)
{
    (void)self;
    (void)unused;
    return Py_BuildValue("(ii)", kDLCPU, 0);
}
