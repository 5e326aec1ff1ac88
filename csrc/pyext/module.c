/*
 * clearpages._fast: the CPython face of the native code.
 *
 * One entry per public call (clear, clear_many, clear_pages): arguments
 * parsed, buffers acquired with PyObject_GetBuffer, the routine chosen from
 * core's policy (core/policy.c, configured once by Python), the routine called or a
 * job built and run in time slices, and every buffer released, all inside
 * one C call.  Nothing is owned by Python between two native steps, so a
 * signal handler that raises cannot strand a buffer export or a job.  What
 * this code declines (an unknown method, a read-only or strided buffer, an
 * odd argument type) goes to a Python function registered with set_hooks(),
 * which explains the refusal with the package's messages or normalizes the
 * arguments and calls back in.
 *
 * The routines, jobs, policy and region system calls live once in the cffi
 * module clearpages._native, which exports one table of them in a capsule
 * (core/api.h); this module imports it once, here, so the assembly is
 * assembled and linked once and no address passes through Python.
 *
 * Objects with no buffer but __dlpack__ (tensors) are taken through DLPack
 * by dlpack.c, in the same call.
 *
 * Also here: RegionMemory, the base type of clearpages.Region, which owns
 * one mapping, exports it as a buffer itself and counts the exports, so
 * resize/move/close can refuse while any is live; PoolCore and
 * BlockMemory, under clearpages.Pool and its blocks (pool_type.c), and
 * numpy's allocator handler over a pool (pool_numpy.c).
 *
 * This file is the module and its method table; fast.h says which file
 * does which job.
 */
#include "fast.h"

PyObject *s_auto, *default_threads;

#define FASTCALL_KW (METH_FASTCALL | METH_KEYWORDS)

static PyMethodDef module_methods[] = {
    {"clear", (PyCFunction)(void (*)(void))fast_clear, FASTCALL_KW,
     "clear(buf, *, method=\"auto\", threads=1, hot=None)\n"
     "--\n"
     "\n"
     "Zero every byte of a writable buffer, or of a tensor in CPU memory\n"
     "through DLPack (__dlpack__), in place.  Returns None.\n"
     "\n"
     "buf: a bytearray, memoryview, numpy array (strided views and memoryview\n"
     "slices with a step too, extent by extent), mmap, array.array, ctypes\n"
     "array, clearpages.Region or Block, or a tensor.  method: \"auto\" (the\n"
     "policy's choice; see clearpages.plan) or a name from clearpages.methods()\n"
     "(\"discard\" for a Region).  threads: an int\n"
     "from 1 to 256, or \"auto\".  hot: None (the default), True (all of it is\n"
     "used next: ordinary stores), False (not soon: streaming), or a\n"
     "(start, stop) pair of ints, 0 <= start <= stop <= the size in bytes: that\n"
     "range is cleared last with ordinary stores, so it is in cache when the\n"
     "caller touches it, the rest with streaming stores.  Any hot= needs a\n"
     "contiguous buffer or tensor (a strided one is a ValueError).\n"
     "\n"
     "Raises TypeError for a read-only buffer, one whose items hold references\n"
     "(object arrays), something that is no buffer or tensor, or an argument of\n"
     "the wrong type; ValueError for a wrong value (an unknown method, threads\n"
     "out of range, hot outside the buffer or on a strided buffer, a closed\n"
     "Region, a buffer whose items are reached through pointers);\n"
     "clearpages.UnsupportedMethod for a routine this machine cannot run.  A\n"
     "refused buffer is left unchanged."},
    {"clear_many", (PyCFunction)(void (*)(void))fast_clear_many, FASTCALL_KW,
     "clear_many(bufs, *, method=\"auto\", threads=1)\n"
     "--\n"
     "\n"
     "Zero many buffers (and tensors in CPU memory) in one native call.\n"
     "Returns None.\n"
     "\n"
     "bufs: an iterable of what clear() takes.  The routine is chosen from the\n"
     "total size, not each piece: a gigabyte of 4 KiB buffers is a gigabyte of\n"
     "work.  method: \"auto\" or a name from clearpages.methods() (\"discard\": all\n"
     "of them Regions), for every buffer.  threads: an int from 1 to 256, or\n"
     "\"auto\", for the whole call.  There is no hot=: clear the buffer to keep\n"
     "in cache with clear(buf, hot=...).\n"
     "\n"
     "Every buffer is checked before anything is written: a refusal (the\n"
     "errors of clear(), naming the item) leaves them all unchanged."},
    {"clear_pages", (PyCFunction)(void (*)(void))fast_clear_pages, FASTCALL_KW,
     "clear_pages(buf, pages, page_size=None, *, method=\"auto\", threads=1)\n"
     "--\n"
     "\n"
     "Zero the listed pages of one buffer: page i is bytes\n"
     "[i*page_size, (i+1)*page_size) of it (the last may be partial).  Returns\n"
     "None.\n"
     "\n"
     "buf: a writable buffer that is one extent (C- or Fortran-contiguous,\n"
     "its pages counted from its first byte in memory, as nonzero_pages counts\n"
     "them), a clearpages.Region, or a contiguous tensor.  pages: page indices\n"
     "as a list, tuple, range or other iterable of ints, an array.array or\n"
     "numpy integer array (1-D), or what nonzero_pages returns; repeated pages\n"
     "are cleared once.  page_size: an int or a size string such as \"64K\" or\n"
     "\"2M\" (None: 4096, or a Region's own page size).  method: \"auto\", a name\n"
     "from clearpages.methods(), or \"discard\" (a Region: its pages are handed\n"
     "back to the kernel).  threads: an int from 1 to 256, or \"auto\".\n"
     "\n"
     "The pages are merged into extents in C and cleared in one native call.\n"
     "An index outside the buffer raises clearpages.PageIndexError (an\n"
     "IndexError and a ValueError) before anything is written; a strided\n"
     "buffer is a ValueError; otherwise the errors of clear()."},
    {"clear_exact", (PyCFunction)(void (*)(void))fast_clear_exact, FASTCALL_KW,
     "clear with normalized arguments (from the Python side); never declines."},
    {"clear_many_exact", (PyCFunction)(void (*)(void))fast_clear_many_exact, FASTCALL_KW,
     "clear_many with normalized arguments; never declines."},
    {"clear_pages_exact", (PyCFunction)(void (*)(void))fast_clear_pages_exact, FASTCALL_KW,
     "clear_pages with normalized arguments; never declines."},
    {"clear_extents", (PyCFunction)(void (*)(void))fast_clear_extents, FASTCALL_KW,
     "clear_extents(addrs, lens, *, method, threads): extents of a strided buffer."},
    {"clear_strided", (PyCFunction)(void (*)(void))fast_clear_strided, FASTCALL_KW,
     "clear_strided(buf, *, method, threads): a writable strided buffer, extent by\n"
     "extent in one job (normalized arguments)."},
    {"extents_of", fast_extents_of, METH_O,
     "extents_of(buf) -> (addrs, lens): the extents a writable strided buffer's\n"
     "elements cover, as two bytes objects of native uint64, for clear_extents."},
    {"check_items", fast_check_items, METH_VARARGS,
     "check_items(obj, index=-1): TypeError if obj's items hold references\n"
     "(Python objects), which clearpages never clears."},
    {"configure", (PyCFunction)(void (*)(void))fast_configure, METH_VARARGS | METH_KEYWORDS,
     configure_doc},
    {"set_hooks", (PyCFunction)(void (*)(void))fast_set_hooks, METH_VARARGS | METH_KEYWORDS,
     "set_hooks(init, clear, many, pages, scan, hot, page_index_error): the Python side."},
    {"_set_debug_hook", (PyCFunction)fast_set_debug_hook, METH_O,
     "_set_debug_hook(f or None): f(where, routine, nbytes) is called with the\n"
     "buffers held: 'acquired', before every job slice ('slice') and direct\n"
     "call ('call'); tests watch and inject failures with it."},
    {"decide", fast_decide, METH_VARARGS,
     "decide(nbytes, count=1, threads=1, method='auto', hot=None) -> (routine,\n"
     "threads, unit, hot routine, adaptive, (temporal role, streaming role),\n"
     "hot range's length, skip_untouched, why, hot_why, threads_why, adapt_why,\n"
     "untouched_why, learned): what a call runs, from the policy every call\n"
     "follows, and the reason codes of the rules that chose it (core/policy.h).\n"
     "hot: None, True (all of it used next), False (not soon) or the hot range's\n"
     "length."},
    {"settings", fast_settings, METH_NOARGS, "The numbers configured (None before)."},
    {"set_untouched", fast_set_untouched, METH_O,
     "set_untouched(min_bytes): until the next configure(), clears of at least\n"
     "min_bytes leave never-touched private anonymous pages alone (the\n"
     "configured policy's untouched_min; 0: never look); for benchmarks."},
    {"is_zero", (PyCFunction)(void (*)(void))fast_is_zero, FASTCALL_KW,
     "is_zero(buf, *, threads=1)\n"
     "--\n"
     "\n"
     "True when every byte of a readable buffer (or a tensor in CPU memory) is\n"
     "zero (a bool).  Reads nothing more than it must: the first, last and\n"
     "middle bytes first, then the rest until a nonzero byte is seen; writes\n"
     "nothing.  Read-only and strided buffers are fine.\n"
     "\n"
     "threads: an int from 1 to 256, or \"auto\" (the threads a clear of that\n"
     "size gets); 1 by default.  Spreading a scan helps only where a core is\n"
     "idle."},
    {"nonzero_pages", (PyCFunction)(void (*)(void))fast_nonzero_pages, FASTCALL_KW,
     "nonzero_pages(buf, page_size=None, *, threads=1)\n--\n\n"
     "The indices of the pages of a contiguous buffer that hold a nonzero\n"
     "byte (page i is buf[i*page_size:(i+1)*page_size], the last may be\n"
     "partial), ascending, as an array.array('q') that clear_pages and numpy\n"
     "take as it is.  page_size counts pages as clear_pages does: 4096, or a\n"
     "Region's own."},
    {"set_scan", fast_set_scan, METH_O, "set_scan(variant): the zero scan the entries use."},
    {"pool_handler", fast_pool_handler, METH_VARARGS,
     "pool_handler(pool, min_size) -> capsule: a numpy allocator handler whose calloc\n"
     "and malloc of min_size bytes up to a block take the pool's blocks, over numpy's\n"
     "handler in place now, which gets every other request."},
    {"numpy_set_handler", fast_numpy_set_handler, METH_O,
     "numpy_set_handler(capsule or None) -> the handler in place before (numpy's\n"
     "PyDataMem_SetHandler: a context variable; None: numpy's default)."},
    {NULL, NULL, 0, NULL},
};

/* The table of entry points clearpages._native exports (core/api.h). */
static int import_native(void)
{
    /* Imported by name first: the package may be importing this module
     * before it has the attribute _native (PyCapsule_Import looks there). */
    PyObject *mod = PyImport_ImportModule("clearpages._native");
    if (!mod)
        return -1;
    Py_DECREF(mod);
    const struct cp_api *api = PyCapsule_Import(CP_API_CAPSULE, 0);
    if (!api)
        return -1;
    if (api->version != CP_API_VERSION || api->size != sizeof(struct cp_api)) {
        PyErr_Format(PyExc_ImportError,
                     "clearpages._native exports entry points version %u (%u bytes), "
                     "clearpages._fast needs version %u (%zu bytes): rebuild the package",
                     api->version, api->size, CP_API_VERSION, sizeof(struct cp_api));
        return -1;
    }
    native = api;
    return 0;
}

/* One interpreter only.  The routing, the learner, the Python hooks the
 * entries call back and the buffers' Python explanations are process-wide;
 * a subinterpreter importing the package would put its own functions in
 * the hooks, and once it ended every declined call of the main interpreter
 * would run functions of a dead interpreter.  So the module is multi-phase
 * (its exec runs in every interpreter that imports it: a single-phase
 * module's dictionary is copied into a subinterpreter without running any
 * of its code) and refuses, before touching anything, in any interpreter
 * but the main one; 3.12+ also declares it, so that an isolated
 * subinterpreter refuses it before loading it. */
static int module_exec(PyObject *m)
{
    if (PyInterpreterState_Get() != PyInterpreterState_Main()) {
        PyErr_SetString(PyExc_ImportError,
                        "clearpages cannot be imported in a subinterpreter: its native "
                        "state (the configured routines, the learner, its Python hooks) "
                        "is one per process and belongs to the main interpreter; import "
                        "it there");
        return -1;
    }
    if (!native && import_native() < 0)
        return -1;
    if (!s_auto) {              /* once per process (a module may be imported again) */
        for (int i = 0; kw_names[i]; i++)
            if (!(kw_objects[i] = PyUnicode_InternFromString(kw_names[i])))
                return -1;
        default_threads = PyLong_FromLong(1);
        if (!default_threads || PyType_Ready(&RegionMemoryType) < 0
                || PyType_Ready(&PoolCoreType) < 0 || PyType_Ready(&BlockMemoryType) < 0)
            return -1;
        if (!(s_auto = PyUnicode_InternFromString("auto")))
            return -1;
    }
    Py_INCREF(&RegionMemoryType);
    if (PyModule_AddObject(m, "RegionMemory", (PyObject *)&RegionMemoryType) < 0) {
        Py_DECREF(&RegionMemoryType);
        return -1;
    }
    PyTypeObject *types[] = {&PoolCoreType, &BlockMemoryType};
    const char *names[] = {"PoolCore", "BlockMemory"};
    for (int i = 0; i < 2; i++) {
        Py_INCREF(types[i]);
        if (PyModule_AddObject(m, names[i], (PyObject *)types[i]) < 0) {
            Py_DECREF(types[i]);
            return -1;
        }
    }
    if (PyModule_AddIntConstant(m, "MAX_THREADS", CP_MAX_THREADS) < 0)
        return -1;
    PyObject *max_size = PyLong_FromUnsignedLongLong(MAX_SIZE);
    if (!max_size || PyModule_AddObject(m, "MAX_SIZE", max_size) < 0) {
        Py_XDECREF(max_size);
        return -1;
    }
    return 0;
}

static PyModuleDef_Slot module_slots[] = {
    {Py_mod_exec, (void *)module_exec},
#if PY_VERSION_HEX >= 0x030C0000
    {Py_mod_multiple_interpreters, Py_MOD_MULTIPLE_INTERPRETERS_NOT_SUPPORTED},
#endif
    {0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, "clearpages._fast",
    "clear, clear_many and clear_pages in one native call each, and the\n"
    "buffer type under clearpages.Region.", 0, module_methods,
    module_slots, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__fast(void)
{
    return PyModuleDef_Init(&module_def);
}
