/*
 * Tensors in place through DLPack: clear(obj) of an object that has no
 * buffer but has __dlpack__ (a torch tensor, a JAX or CuPy host array...).
 *
 * The consumer's side of the protocol: ask for a versioned capsule
 * (__dlpack__(max_version=(1, 0), copy=False)), or an unversioned one from
 * a producer that takes no such keywords; take it (the capsule is renamed
 * used_*, so the producer's capsule destructor leaves the tensor to us);
 * clear the bytes the tensor's shape, strides and byte offset describe;
 * call the tensor's deleter once done.  The capsule and the tensor are held
 * while the GIL is released, so the memory outlives the clear.
 *
 * Refused, with the data unchanged: a tensor flagged read-only or copied
 * (clearing a copy would leave the object as it was), memory this CPU
 * cannot write (any device but the CPU and CUDA-pinned host memory), a
 * DLPack major version other than 1, elements that are not whole bytes, a
 * NULL data pointer for a tensor that is not empty, a layout that reaches
 * beyond the address space.  The bytes cleared are the union of the
 * elements' (strided.c): a stride-0 tensor costs what its storage does.
 *
 * torch tensors: torch's own __dlpack__ is Python code that costs several
 * times a 4 KiB clear, so an exact torch.Tensor or Parameter is exported
 * with the C function it ends in (torch._C._to_dlpack_versioned), after the
 * checks of it that matter on the CPU; one small enough to be cleared with
 * the GIL held throughout is read through DLPack's C exchange API
 * (type(t).__dlpack_c_exchange_api__, DLPack 1.2) without an export.  Every
 * torch tensor's version
 * counter is bumped after the write (torch._C._increment_version, what
 * torch.autograd.graph.increment_version calls), so autograd sees the
 * in-place change.  A write is taken or refused as torch's own in-place
 * operations (t.zero_()) take or refuse it: while grad mode is on, a leaf
 * that requires grad and a view of one are refused (the write could not be
 * recorded); an inference tensor is refused outside inference mode; a
 * tensor that requires grad and is neither (a result of autograd's graph)
 * is cleared by its own zero_(), which records the write in the graph, as
 * no write of ours could.
 */
#include <string.h>

#include "fast.h"

#include "dlpack_abi.h"

static const char *const device_names[] = {
    NULL, "CPU", "CUDA", "CUDA host", "OpenCL", NULL, NULL, "Vulkan", "Metal", "VPI",
    "ROCm", "ROCm host", "ExtDev", "CUDA managed", "oneAPI", "WebGPU", "Hexagon",
    "MAIA", "Trainium",
};

/* ---- what is looked up once ------------------------------------------------ */

static PyObject *s_dlpack, *s_requires_grad, *s_is_leaf, *s_base, *s_version,
    *s_is_inference, *s_zero, *dlpack_kwnames, *max_version;
/* torch, once it is imported: the tensor base type, the exporter, the
 * version bump, the grad mode and the inference mode. */
static PyObject *torch_base, *torch_tensor, *torch_parameter, *torch_export, *torch_bump,
    *torch_grad_enabled, *torch_inference_enabled, *torch_uint8;
static int torch_looked;
/* The C functions behind TensorBase's requires_grad, is_leaf, _base and
 * _version (getters) and is_inference (a method): called directly, they
 * cost a third of the attribute and method lookups. */
static PyObject *torch_descrs[5];
static PyGetSetDef *gs_requires_grad, *gs_is_leaf, *gs_base, *gs_version;
static PyMethodDef *m_is_inference;
static PyObject *empty_args;

/* The exchange API's entry that describes a tensor without an export
 * (dlpack_abi.h) for torch.Tensor and for Parameter, each looked up on its
 * own type as the API asks; NULL where torch has none. */
static dltensor_from_fn tensor_describe, parameter_describe;
static PyObject *exchange_capsules[2];

static PyGetSetDef *torch_getter(int i, const char *name)
{
    PyObject *d = PyDict_GetItemString(((PyTypeObject *)torch_base)->tp_dict, name);
    if (!d || !Py_IS_TYPE(d, &PyGetSetDescr_Type))
        return NULL;
    torch_descrs[i] = Py_NewRef(d);
    return ((PyGetSetDescrObject *)d)->d_getset;
}

static PyMethodDef *torch_method(int i, const char *name)
{
    PyObject *d = PyDict_GetItemString(((PyTypeObject *)torch_base)->tp_dict, name);
    if (!d || !Py_IS_TYPE(d, &PyMethodDescr_Type))
        return NULL;
    int flags = ((PyMethodDescrObject *)d)->d_method->ml_flags;
    if (flags != METH_NOARGS && flags != (METH_VARARGS | METH_KEYWORDS))
        return NULL;
    torch_descrs[i] = Py_NewRef(d);
    return ((PyMethodDescrObject *)d)->d_method;
}

/* obj.name (a getter) or obj.name() (a method without arguments): through
 * the C function when it was found, else the ordinary lookup. */
static PyObject *torch_get(PyObject *obj, PyGetSetDef *gs, PyObject *name)
{
    return gs ? gs->get(obj, gs->closure) : PyObject_GetAttr(obj, name);
}

static PyObject *torch_call(PyObject *obj, PyMethodDef *m, PyObject *name)
{
    if (!m) {
        PyObject *argv[2] = {NULL, obj};
        return PyObject_VectorcallMethod(name, argv + 1, 1 | PY_VECTORCALL_ARGUMENTS_OFFSET,
                                         NULL);
    }
    if (m->ml_flags == METH_NOARGS)
        return m->ml_meth(obj, NULL);
    return ((PyCFunctionWithKeywords)(void (*)(void))m->ml_meth)(obj, empty_args, NULL);
}

/* What the version bump is given.  torch._C._increment_version takes an
 * iterable of tensors and asks it for an iterator: a tuple's is a new
 * object per call, where this one is its own iterator and yields its one
 * tensor once. */
typedef struct {
    PyObject_HEAD
    PyObject *tensor;
} OneTensor;

static PyObject *one_tensor_next(PyObject *self)
{
    PyObject *t = ((OneTensor *)self)->tensor;
    ((OneTensor *)self)->tensor = NULL;
    return t;                   /* NULL without an error: the end */
}

static void one_tensor_dealloc(PyObject *self)
{
    Py_XDECREF(((OneTensor *)self)->tensor);
    PyObject_Free(self);
}

static PyTypeObject OneTensorType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "clearpages._fast.OneTensor",
    .tp_basicsize = sizeof(OneTensor),
    .tp_dealloc = one_tensor_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_iter = PyObject_SelfIter,
    .tp_iternext = one_tensor_next,
};

/* torch_bump's C function where it is one that takes its argument alone
 * (METH_O): called directly, without the call protocol's dispatch. */
static PyCFunction bump_fn;

static int dlpack_init(void)
{
    if (s_dlpack)
        return 0;
    if (PyType_Ready(&OneTensorType) < 0)
        return -1;
    s_dlpack = PyUnicode_InternFromString("__dlpack__");
    s_requires_grad = PyUnicode_InternFromString("requires_grad");
    s_is_leaf = PyUnicode_InternFromString("is_leaf");
    s_base = PyUnicode_InternFromString("_base");
    s_version = PyUnicode_InternFromString("_version");
    s_is_inference = PyUnicode_InternFromString("is_inference");
    s_zero = PyUnicode_InternFromString("zero_");
    dlpack_kwnames = Py_BuildValue("(ss)", "max_version", "copy");
    max_version = Py_BuildValue("(ii)", 1, 0);
    if (!s_dlpack || !s_requires_grad || !s_is_leaf || !s_base || !s_version
        || !s_is_inference || !s_zero
        || !dlpack_kwnames || !max_version)
        return -1;
    return 0;
}

static PyObject *attr_or_null(PyObject *o, const char *name)
{
    PyObject *r = o ? PyObject_GetAttrString(o, name) : NULL;
    if (!r)
        PyErr_Clear();
    return r;
}

/* The exchange API's describing entry on type tp (held through its
 * capsule, slot i), or NULL: no such table, another major version, or no
 * such entry. */
static dltensor_from_fn exchange_describe(int i, PyObject *tp)
{
    PyObject *cap = tp && PyType_Check(tp) ? attr_or_null(tp, "__dlpack_c_exchange_api__")
                                           : NULL;
    const DLPackExchangeAPI *api = NULL;
    if (cap && PyCapsule_IsValid(cap, "dlpack_exchange_api"))
        api = PyCapsule_GetPointer(cap, "dlpack_exchange_api");
    if (!api || api->header.version.major != 1 || api->header.version.minor < 2
        || !api->dltensor_from_py_object_no_sync) {
        Py_XDECREF(cap);
        return NULL;
    }
    exchange_capsules[i] = cap;
    return api->dltensor_from_py_object_no_sync;
}

/* Find torch's pieces once torch is imported (never imports it). */
static void torch_lookup(void)
{
    if (torch_looked)
        return;
    PyObject *mods = PyImport_GetModuleDict();
    PyObject *torch = mods ? PyDict_GetItemString(mods, "torch") : NULL;
    PyObject *c = torch ? PyDict_GetItemString(mods, "torch._C") : NULL;
    PyObject *nn = torch ? PyDict_GetItemString(mods, "torch.nn.parameter") : NULL;
    if (!torch || !c)
        return;                     /* not imported (yet): look again next time */
    torch_looked = 1;
    torch_base = attr_or_null(c, "TensorBase");
    torch_tensor = attr_or_null(torch, "Tensor");
    torch_parameter = attr_or_null(nn, "Parameter");
    torch_export = attr_or_null(c, "_to_dlpack_versioned");
    torch_bump = attr_or_null(c, "_increment_version");
    if (torch_bump && PyCFunction_Check(torch_bump)
        && PyCFunction_GET_FLAGS(torch_bump) == METH_O)
        bump_fn = PyCFunction_GET_FUNCTION(torch_bump);
    torch_grad_enabled = attr_or_null(c, "is_grad_enabled");
    torch_inference_enabled = attr_or_null(torch, "is_inference_mode_enabled");
    torch_uint8 = attr_or_null(torch, "uint8");
    if (torch_base && !PyType_Check(torch_base))
        Py_CLEAR(torch_base);
    empty_args = PyTuple_New(0);
    tensor_describe = exchange_describe(0, torch_tensor);
    parameter_describe = exchange_describe(1, torch_parameter);
    if (!torch_base || !empty_args)
        return;
    gs_requires_grad = torch_getter(0, "requires_grad");
    gs_is_leaf = torch_getter(1, "is_leaf");
    gs_base = torch_getter(2, "_base");
    m_is_inference = torch_method(3, "is_inference");
    gs_version = torch_getter(4, "_version");
}

static int is_torch(PyObject *obj)
{
    torch_lookup();
    PyTypeObject *tp = Py_TYPE(obj);
    return torch_base && (tp == (PyTypeObject *)torch_tensor
                          || PyObject_TypeCheck(obj, (PyTypeObject *)torch_base));
}

/* ---- taking the capsule ------------------------------------------------------ */

static const char *const used_versioned = "used_dltensor_versioned";
static const char *const used_legacy = "used_dltensor";

/* The truth of obj.name (a getter through gs where found): 1, 0, or -1. */
static int torch_flag(PyObject *obj, PyGetSetDef *gs, PyObject *name)
{
    PyObject *r = torch_get(obj, gs, name);
    if (!r)
        return -1;
    int on = PyObject_IsTrue(r);
    Py_DECREF(r);
    return on;
}

/* The truth of fn(), or `otherwise` where torch has no such function. */
static int torch_mode(PyObject *fn, int otherwise)
{
    if (!fn)
        return otherwise;
    PyObject *r = PyObject_CallNoArgs(fn);
    if (!r)
        return -1;
    int on = PyObject_IsTrue(r);
    Py_DECREF(r);
    return on;
}

enum { TORCH_WRITE = 0, TORCH_REFUSED = 1, TORCH_ZERO = 2 };

/* Whether torch's in-place operations may write obj now, and how:
 * TORCH_WRITE (ours), TORCH_ZERO (through its own zero_(), which autograd
 * records), TORCH_REFUSED (the error set, as t.zero_() would raise), -1. */
static int torch_refuses(PyObject *obj)
{
    int requires = torch_flag(obj, gs_requires_grad, s_requires_grad);
    if (requires < 0)
        return -1;
    if (!requires) {
        /* An inference tensor has no version counter for autograd to read
         * outside inference mode: torch writes one only inside.  Reading
         * the counter is torch's own test (a tensor given an inference
         * tensor's data keeps its counter, and zero_() takes it), and as a
         * getter it costs a third of is_inference(), which parses its
         * arguments. */
        PyObject *version = torch_get(obj, gs_version, s_version);
        if (version) {
            Py_DECREF(version);
            return TORCH_WRITE;
        }
        PyErr_Clear();
        PyObject *r = torch_call(obj, m_is_inference, s_is_inference);
        int inference = r ? PyObject_IsTrue(r) : -1;
        Py_XDECREF(r);
        if (inference <= 0)
            return inference;
        int inside = torch_mode(torch_inference_enabled, 1);
        if (inside != 0)
            return inside < 0 ? -1 : TORCH_WRITE;
        PyErr_Format(PyExc_TypeError,
                     "the %s is an inference tensor (made under torch.inference_mode()), "
                     "and torch writes one in place only in inference mode (\"Inplace "
                     "update to inference tensor outside InferenceMode is not allowed\"). "
                     "Clear it inside torch.inference_mode(), or clear a clone; it was left "
                     "unchanged", Py_TYPE(obj)->tp_name);
        return TORCH_REFUSED;
    }
    int enabled = torch_mode(torch_grad_enabled, 0);
    if (enabled <= 0)
        return enabled;
    int leaf = torch_flag(obj, gs_is_leaf, s_is_leaf);
    if (leaf < 0)
        return -1;
    const char *what = leaf ? "a leaf" : NULL;
    if (!leaf) {
        PyObject *base = torch_get(obj, gs_base, s_base);
        if (!base)
            return -1;
        int of_leaf = base != Py_None ? torch_flag(base, gs_is_leaf, s_is_leaf) : 0;
        Py_DECREF(base);
        if (of_leaf < 0)
            return -1;
        if (!of_leaf)
            return TORCH_ZERO;          /* autograd records t.zero_() */
        what = "a view of a leaf";
    }
    PyErr_Format(PyExc_TypeError,
                 "the %s is %s that requires grad, and autograd cannot record a write "
                 "that clearpages makes: torch refuses t.zero_() on it too, outside "
                 "torch.no_grad(). Clear it inside torch.no_grad(), or clear t.detach(), "
                 "which shares its memory; it was left unchanged", Py_TYPE(obj)->tp_name, what);
    return TORCH_REFUSED;
}

/* The bytes of a tensor in C order without gaps (each stride the product
 * of the extents inside it; dimensions of extent 1 aside): 1 with *len
 * set, 0 for any other layout, an empty one among them. */
static int c_order_len(const DLTensor *t, size_t item, size_t *len)
{
    uint64_t n = 1;
    for (int32_t d = t->ndim - 1; d >= 0; d--) {
        int64_t extent = t->shape[d];
        if (extent <= 0 || (extent != 1 && t->strides && t->strides[d] != (int64_t)n)
            || __builtin_mul_overflow(n, (uint64_t)extent, &n))
            return 0;
    }
    return !__builtin_mul_overflow(n, (uint64_t)item, len);
}

/* An exact torch tensor in C order in CPU memory, smaller than direct_max
 * bytes and not empty, described by torch's exchange API without an
 * export (a fifth of its cost).  Only for a clear that keeps the GIL
 * throughout (direct_max is the size below which it does): the
 * description holds only while no Python code runs, and no other thread
 * can resize or free the storage meanwhile.  Anything else is exported.
 * 1: v->base and v->len set; 0: export it. */
static int torch_direct(PyObject *obj, struct dlpack_view *v, size_t direct_max)
{
    PyTypeObject *tp = Py_TYPE(obj);
    dltensor_from_fn describe = tp == (PyTypeObject *)torch_tensor ? tensor_describe
                                : tp == (PyTypeObject *)torch_parameter ? parameter_describe
                                : NULL;
    DLTensor t;
    if (!direct_max || !describe)
        return 0;
    if (describe(obj, &t) < 0) {
        PyErr_Clear();          /* the export says what is wrong, if anything */
        return 0;
    }
    size_t bits = (size_t)t.dtype.bits * (t.dtype.lanes ? t.dtype.lanes : 1), len;
    if (t.device.device_type != kDLCPU || bits == 0 || bits % 8 || t.ndim < 0
        || t.byte_offset || !c_order_len(&t, bits / 8, &len) || len >= direct_max || !t.data)
        return 0;               /* the export takes it, or refuses it in its words */
    v->base = t.data;
    v->len = len;
    return 1;
}

/* The capsule obj exports: torch's exporter for an exact torch tensor,
 * else __dlpack__ with the keywords, else without (older producers). */
static PyObject *export_capsule(PyObject *obj, int torch)
{
    PyTypeObject *tp = Py_TYPE(obj);
    if (torch && torch_export
        && (tp == (PyTypeObject *)torch_tensor || tp == (PyTypeObject *)torch_parameter))
        return PyObject_CallOneArg(torch_export, obj);
    PyObject *target = obj, *detached = NULL;
    if (torch) {
        /* torch's __dlpack__ refuses a tensor that requires grad even under
         * no_grad, where its in-place operations are allowed: export the
         * detached tensor, which shares memory and version counter. */
        PyObject *rg = PyObject_GetAttr(obj, s_requires_grad);
        int requires = rg ? PyObject_IsTrue(rg) : -1;
        Py_XDECREF(rg);
        if (requires < 0)
            return NULL;
        if (requires) {
            detached = PyObject_CallMethod(obj, "detach", NULL);
            if (!detached)
                return NULL;
            target = detached;
        }
    }
    /* argv[0] is the slot PY_VECTORCALL_ARGUMENTS_OFFSET lets the call use. */
    PyObject *argv[4] = {NULL, target, max_version, Py_False};
    PyObject *cap = PyObject_VectorcallMethod(s_dlpack, argv + 1,
                                              1 | PY_VECTORCALL_ARGUMENTS_OFFSET,
                                              dlpack_kwnames);
    if (!cap && PyErr_ExceptionMatches(PyExc_TypeError)) {
        /* A producer from before DLPack 1.0 takes no keywords. */
        PyErr_Clear();
        cap = PyObject_VectorcallMethod(s_dlpack, argv + 1,
                                        1 | PY_VECTORCALL_ARGUMENTS_OFFSET, NULL);
    }
    Py_XDECREF(detached);
    return cap;
}

/* A torch tensor whose dtype DLPack cannot carry (torch's bits types): its
 * bytes, exported as the uint8 view of them (t.view(torch.uint8), the same
 * memory and version counter), where torch makes one.  NULL with the
 * export's first error otherwise. */
static PyObject *export_bytes(PyObject *obj)
{
    PyObject *type, *value, *tb;
    PyErr_Fetch(&type, &value, &tb);
    PyObject *view = PyObject_CallMethod(obj, "view", "O", torch_uint8);
    PyObject *cap = view ? export_capsule(view, 1) : NULL;
    Py_XDECREF(view);
    if (cap) {
        Py_XDECREF(type);
        Py_XDECREF(value);
        Py_XDECREF(tb);
        return cap;
    }
    PyErr_Clear();
    PyErr_Restore(type, value, tb);
    return NULL;
}

static void set_refusal(PyObject *obj, const char *fmt, const char *what)
{
    PyErr_Format(PyExc_TypeError, fmt, Py_TYPE(obj)->tp_name, what);
}

/* The view takes the extents' arrays (freed by dlpack_release). */
static void view_take_extents(struct dlpack_view *v, const struct strided_extents *r)
{
    v->base = r->base;
    v->len = r->len;
    v->addrs = r->addrs;
    v->lens = r->lens;
    v->nextents = r->nextents;
}

/* The bytes the tensor covers (strided.c): one extent, or a list of them.
 * Elements that share bytes (stride 0, overlapping strides) are covered
 * once, so a tensor costs what its storage does whatever its shape says. */
static int tensor_extents(PyObject *obj, const DLTensor *t, struct dlpack_view *v)
{
    size_t bits = (size_t)t->dtype.bits * (t->dtype.lanes ? t->dtype.lanes : 1);
    if (bits == 0 || bits % 8) {
        PyErr_Format(PyExc_TypeError,
                     "cannot clear the %s: its elements are %zu bits, not whole bytes",
                     Py_TYPE(obj)->tp_name, bits);
        return -1;
    }
    v->itemsize = bits / 8;
    if (t->ndim < 0) {
        PyErr_Format(PyExc_TypeError, "cannot clear the %s: %d dimensions",
                     Py_TYPE(obj)->tp_name, (int)t->ndim);
        return -1;
    }
    struct strided_layout *s;
    uint64_t len, count;
    int status = strided_layout_new(t->data, t->byte_offset, t->ndim, t->shape, t->strides,
                                    (int64_t)v->itemsize, v->itemsize, &s, &len, &count);
    struct strided_extents r = {0};
    struct cp_decision d;
    if (status == STRIDED_OK)
        decide((size_t)len, (size_t)count, AUTO, 1, 0, 0, &d);
    if (status == STRIDED_OK && d.one_by_one) {
        /* Small extents, which a clear takes one by one as the layout is
         * walked: listed only if a caller asks (dlpack_list_extents). */
        v->base = NULL;
        v->len = (size_t)len;
        v->nextents = (size_t)count;
        v->layout = s;
        return 0;
    }
    if (status == STRIDED_OK)
        status = strided_layout_extents(s, &r);
    strided_layout_free(s);
    switch (status) {
    case STRIDED_OK:
        break;
    case STRIDED_NEGATIVE:
        PyErr_Format(PyExc_TypeError, "cannot clear the %s: a negative shape",
                     Py_TYPE(obj)->tp_name);
        return -1;
    case STRIDED_NULL:
        /* torch's words for its own tensors without memory (ZeroTensors). */
        PyErr_Format(PyExc_TypeError,
                     "the %s has no memory behind it (its DLPack data pointer is NULL, and "
                     "its shape is not empty): ZeroTensors are immutable. Please use the "
                     "materialized zero tensor obtained using .clone() if you want a mutable "
                     "tensor", Py_TYPE(obj)->tp_name);
        return -1;
    case STRIDED_TOO_LARGE:
        PyErr_Format(PyExc_ValueError, "cannot clear the %s: its shape, strides and byte "
                     "offset describe memory beyond the address space; it was left unchanged",
                     Py_TYPE(obj)->tp_name);
        return -1;
    default:
        PyErr_Format(PyExc_MemoryError, "cannot clear the %s: the list of its extents "
                     "would not fit in memory", Py_TYPE(obj)->tp_name);
        return -1;
    }
    view_take_extents(v, &r);
    return 0;
}

/* Empty, field by field: gcc clears the whole struct with a rep stos,
 * whose start-up alone is a few percent of a 4 KiB clear. */
static inline void dlpack_view_init(struct dlpack_view *v)
{
    v->capsule = NULL;
    v->versioned = NULL;
    v->legacy = NULL;
    v->bump = NULL;
    v->zero = NULL;
    v->direct = 0;
    v->base = NULL;
    v->len = 0;
    v->itemsize = 0;
    v->addrs = NULL;
    v->lens = NULL;
    v->nextents = 0;
    v->layout = NULL;
}

/* reading: for is_zero, which writes nothing, so a read-only tensor, a
 * copy, and a torch tensor that requires grad are all taken. */
static int acquire(PyObject *obj, struct dlpack_view *v, size_t direct_max, int reading)
{
    dlpack_view_init(v);
    if (dlpack_init() < 0)
        return -1;
    int torch = is_torch(obj);
    if (reading)
        direct_max = 0;
    if (!torch) {
        PyObject *m = PyObject_GetAttr((PyObject *)Py_TYPE(obj), s_dlpack);
        if (!m) {
            PyErr_Clear();
            return 0;               /* not a DLPack producer */
        }
        Py_DECREF(m);
    } else {
        int how = reading ? TORCH_WRITE : torch_refuses(obj);
        if (how == TORCH_ZERO) {
            v->zero = Py_NewRef(obj);   /* nothing of ours to write: len 0 */
            return 1;
        }
        if (how != TORCH_WRITE)
            return -1;
        if (torch_direct(obj, v, direct_max)) {
            v->bump = Py_NewRef(obj);
            v->direct = 1;
            return 1;
        }
    }
    PyObject *cap = export_capsule(obj, torch);
    if (!cap && torch && torch_uint8)
        cap = export_bytes(obj);
    if (!cap) {
        /* The producer's refusal (torch says RuntimeError) as ours. */
        if (PyErr_ExceptionMatches(PyExc_BufferError)
            || PyErr_ExceptionMatches(PyExc_ValueError)
            || PyErr_ExceptionMatches(PyExc_TypeError)
            || PyErr_ExceptionMatches(PyExc_RuntimeError)) {
            PyObject *type, *value, *tb;
            PyErr_Fetch(&type, &value, &tb);
            PyErr_Format(PyExc_TypeError, "the %s cannot be %s: its DLPack export failed: "
                         "%S%s", Py_TYPE(obj)->tp_name, reading ? "read" : "cleared in place",
                         value ? value : Py_None, reading ? "" : "; it was left unchanged");
            Py_XDECREF(type);
            Py_XDECREF(value);
            Py_XDECREF(tb);
        }
        return -1;
    }
    const DLTensor *t;
    if (PyCapsule_IsValid(cap, "dltensor_versioned")) {
        DLManagedTensorVersioned *m = PyCapsule_GetPointer(cap, "dltensor_versioned");
        if (PyCapsule_SetName(cap, used_versioned) < 0)
            goto fail;
        v->versioned = m;
        if (m->version.major != 1) {
            PyErr_Format(PyExc_TypeError, "cannot clear the %s: it exports DLPack %u.%u, "
                         "and this clearpages reads DLPack 1.x", Py_TYPE(obj)->tp_name,
                         m->version.major, m->version.minor);
            goto fail;
        }
        if (!reading && (m->flags & DLPACK_FLAG_BITMASK_READ_ONLY)) {
            set_refusal(obj, "the %s is read-only (its DLPack export says so); clearpages "
                        "only clears writable memory and left it unchanged%s", "");
            goto fail;
        }
        if (!reading && (m->flags & DLPACK_FLAG_BITMASK_IS_COPIED)) {
            set_refusal(obj, "the %s exported a copy of its data (DLPack's IS_COPIED "
                        "flag), and clearing a copy would leave it unchanged%s", "");
            goto fail;
        }
        t = &m->dl_tensor;
    } else if (PyCapsule_IsValid(cap, "dltensor")) {
        DLManagedTensor *m = PyCapsule_GetPointer(cap, "dltensor");
        if (PyCapsule_SetName(cap, used_legacy) < 0)
            goto fail;
        v->legacy = m;
        t = &m->dl_tensor;
    } else {
        PyErr_Format(PyExc_TypeError, "cannot clear the %s: its __dlpack__ returned %s, "
                     "not a DLPack capsule", Py_TYPE(obj)->tp_name, Py_TYPE(cap)->tp_name);
        /* Its destructor may run Python code: the error waits aside. */
        PyObject *type, *value, *tb;
        PyErr_Fetch(&type, &value, &tb);
        Py_DECREF(cap);
        PyErr_Restore(type, value, tb);
        return -1;
    }
    v->capsule = cap;
    int dev = t->device.device_type;
    if (dev != kDLCPU && dev != kDLCUDAHost) {
        const char *name = dev > 0 && dev < (int)(sizeof device_names / sizeof *device_names)
                           && device_names[dev] ? device_names[dev] : "an unknown device";
        if (reading)
            PyErr_Format(PyExc_TypeError, "the %s is on %s (device %d), not in memory this "
                         "CPU can read; look at it on its device or at a CPU copy",
                         Py_TYPE(obj)->tp_name, name, (int)t->device.device_id);
        else
            PyErr_Format(PyExc_TypeError, "the %s is on %s (device %d), not in memory this "
                         "CPU can write; clear it on its device (for torch: t.zero_()) or on a "
                         "CPU copy; it was left unchanged", Py_TYPE(obj)->tp_name, name,
                         (int)t->device.device_id);
        goto release;
    }
    if (tensor_extents(obj, t, v) < 0)
        goto release;
    if (torch && !reading) {
        Py_INCREF(obj);
        v->bump = obj;
    }
    return 1;

fail:
    v->capsule = cap;
release:
    dlpack_release(v);
    return -1;
}

int dlpack_producer(PyObject *obj)
{
    if (dlpack_init() < 0) {
        PyErr_Clear();
        return 0;
    }
    PyTypeObject *tp = Py_TYPE(obj);
    if (tp == (PyTypeObject *)torch_tensor || tp == (PyTypeObject *)torch_parameter)
        return 1;               /* found before: no lookup per call */
    PyObject *m = PyObject_GetAttr((PyObject *)tp, s_dlpack);
    if (!m) {
        PyErr_Clear();
        return 0;
    }
    Py_DECREF(m);
    return 1;
}

int dlpack_acquire(PyObject *obj, struct dlpack_view *v, size_t direct_max)
{
    return acquire(obj, v, direct_max, 0);
}

int dlpack_acquire_read(PyObject *obj, struct dlpack_view *v)
{
    return acquire(obj, v, 0, 1);
}

int dlpack_written(struct dlpack_view *v, int done)
{
    if (v->zero) {
        if (!done)
            return 0;
        PyObject *argv[1] = {v->zero};
        PyObject *r = PyObject_VectorcallMethod(s_zero, argv,
                                                1 | PY_VECTORCALL_ARGUMENTS_OFFSET, NULL);
        Py_XDECREF(r);
        return r ? 0 : -1;
    }
    if (!v->bump || !torch_bump)
        return 0;
    /* One iterator, reused while no one else holds it (a call in another
     * thread meanwhile, should torch let the GIL go, makes its own). */
    static OneTensor *spare;
    OneTensor *it = spare;
    if (it && Py_REFCNT(it) == 1) {
        Py_INCREF(it);
    } else {
        it = PyObject_New(OneTensor, &OneTensorType);
        if (!it)
            return -1;
        it->tensor = NULL;
        Py_XDECREF(spare);
        spare = (OneTensor *)Py_NewRef(it);
    }
    Py_XSETREF(it->tensor, Py_NewRef(v->bump));
    PyObject *r = bump_fn ? bump_fn(PyCFunction_GET_SELF(torch_bump), (PyObject *)it)
                          : PyObject_CallOneArg(torch_bump, (PyObject *)it);
    Py_CLEAR(it->tensor);       /* hold no tensor between calls */
    Py_DECREF(it);
    Py_XDECREF(r);
    return r ? 0 : -1;
}

void dlpack_release(struct dlpack_view *v)
{
    strided_layout_free(v->layout);
    v->layout = NULL;
    if (!v->capsule && !v->addrs && !v->lens) {     /* read without an export */
        Py_CLEAR(v->bump);
        Py_CLEAR(v->zero);
        return;
    }
    /* The deleter and the capsule's destructor may run Python code (the
     * producer's), so keep any pending exception across them. */
    PyObject *type, *value, *tb;
    PyErr_Fetch(&type, &value, &tb);
    if (v->versioned && v->versioned->deleter)
        v->versioned->deleter(v->versioned);
    else if (v->legacy && v->legacy->deleter)
        v->legacy->deleter(v->legacy);
    v->versioned = NULL;
    v->legacy = NULL;
    Py_CLEAR(v->capsule);
    Py_CLEAR(v->bump);
    PyErr_Restore(type, value, tb);
    PyMem_Free(v->addrs);
    PyMem_Free(v->lens);
    v->addrs = NULL;
    v->lens = NULL;
}

int dlpack_list_extents(struct dlpack_view *v)
{
    if (!v->layout)
        return 0;
    struct strided_extents r;
    int status = strided_layout_extents(v->layout, &r);
    strided_layout_free(v->layout);
    v->layout = NULL;
    if (status < 0) {
        v->nextents = 0;
        v->len = 0;
        return buffer_layout_error("", status);
    }
    view_take_extents(v, &r);
    return 0;
}
