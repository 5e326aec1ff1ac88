"""Tensors in place: clear() of any object with __dlpack__ (CPU memory)."""

from __future__ import annotations

import ctypes
import sys

import pytest
from conftest import OnlyDLPack

import clearpages as cp

np = pytest.importorskip("numpy")

KiB = 1 << 10


class OldDLPack(OnlyDLPack):
    """A producer from before DLPack 1.0: no keywords, unversioned capsules."""

    def __dlpack__(self):
        self.calls.append({})
        return self.a.__dlpack__()


def filled(shape, dtype=np.float32):
    return np.arange(1, int(np.prod(shape)) + 1).astype(dtype).reshape(shape)


def test_an_object_with_only_dlpack_is_cleared():
    a = filled(1000)
    w = OnlyDLPack(a)
    cp.clear(w)
    assert not a.any()
    assert w.calls == [{"max_version": (1, 0), "copy": False}]


@pytest.mark.parametrize("view", [
    pytest.param(lambda a: a[3:], id="offset"),
    pytest.param(lambda a: a[::2, 1:9], id="strided"),
    pytest.param(lambda a: a.T, id="transposed"),
    pytest.param(lambda a: a[::-1, ::-3], id="negative"),
    pytest.param(lambda a: a[2:3, 4:5], id="one-element"),
    pytest.param(lambda a: a[:, 5], id="column"),
    pytest.param(lambda a: a[4:4], id="empty"),
    pytest.param(lambda a: np.broadcast_to(a[0], (3, 10)), id="broadcast-readonly"),
])
def test_shape_strides_and_offset_are_honoured(view):
    a = filled((10, 10))
    v = view(a)
    expect = a.copy()
    if not v.flags.writeable:
        with pytest.raises(TypeError, match="read-only"):
            cp.clear(OnlyDLPack(v))
        assert (a == expect).all()
        return
    view(expect)[...] = 0
    cp.clear(OnlyDLPack(v))
    assert (a == expect).all()


@pytest.mark.parametrize("dtype", ["int8", "uint16", "float16", "float64", "complex128",
                                   "bool"])
def test_any_dtype_clears_by_its_item_size(dtype):
    a = np.ones((6, 8), dtype=dtype)
    cp.clear(OnlyDLPack(a[1:5, ::3]))
    assert not a[1:5, ::3].any() and a[0].all() and a[5].all() and a[1:5, 1::3].all()


def test_read_only_is_refused_and_unchanged():
    a = filled(64)
    a.flags.writeable = False
    with pytest.raises(TypeError, match=r"OnlyDLPack is read-only .its DLPack export says so"):
        cp.clear(OnlyDLPack(a))
    assert a.all()


def test_a_copy_is_refused_and_the_original_unchanged():
    a = filled(64)
    with pytest.raises(TypeError, match=r"exported a copy of its data.*IS_COPIED"):
        cp.clear(OnlyDLPack(a, copy=True))
    assert a.all()


def test_a_producer_without_the_keywords_gets_the_unversioned_call():
    a = filled((8, 8))
    w = OldDLPack(a[::2])
    cp.clear(w)
    assert not a[::2].any() and a[1::2].all()
    assert w.calls == [{}]
    ro = filled(8)
    ro.flags.writeable = False
    with pytest.raises(TypeError, match=r"cannot be cleared in place.*left unchanged"):
        cp.clear(OldDLPack(ro))          # numpy refuses to export it unversioned
    assert ro.all()


def test_the_export_is_released_once():
    a = filled(4096)
    before = sys.getrefcount(a)
    for _ in range(100):
        cp.clear(OnlyDLPack(a))
    a[0] = 1
    with pytest.raises(TypeError):
        cp.clear(OnlyDLPack(a, copy=True))
    assert sys.getrefcount(a) == before       # every deleter ran, none twice


def test_arguments_work_as_for_buffers():
    a = filled(64 * KiB)
    cp.clear(OnlyDLPack(a), threads=2)        # GIL released: the export is held
    assert not a.any()
    a[:] = 1
    cp.clear(OnlyDLPack(a), hot=[0, 4096])
    assert not a.any()
    for word in (True, False):
        a[:] = 1
        cp.clear(OnlyDLPack(a), hot=word)
        assert not a.any()
    a[:] = 1
    for m in cp.methods():
        cp.clear(OnlyDLPack(a[: 1000]), method=m)
        assert not a[:1000].any()
        a[:1000] = 1
    with pytest.raises(ValueError, match="unknown method"):
        cp.clear(OnlyDLPack(a), method="fast")
    with pytest.raises(ValueError, match="threads"):
        cp.clear(OnlyDLPack(a), threads=0)
    with pytest.raises(ValueError, match=r"hot must be True .* pair of ints with 0 <= start"):
        cp.clear(OnlyDLPack(a), hot=(0, 1 << 40))
    with pytest.raises(ValueError, match="hot= needs a contiguous buffer"):
        cp.clear(OnlyDLPack(filled((8, 8))[::2]), hot=(0, 8))
    assert a.all()
    missing = [m for m in cp.ALL_METHODS if m not in cp.methods()]
    if missing:
        with pytest.raises(cp.UnsupportedMethod):
            cp.clear(OnlyDLPack(a), method=missing[0])


# ---- capsules made by hand: devices, versions, element sizes, the deleter ----


class DLTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device_type", ctypes.c_int32),
                ("device_id", ctypes.c_int32), ("ndim", ctypes.c_int32),
                ("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16),
                ("shape", ctypes.POINTER(ctypes.c_int64)),
                ("strides", ctypes.POINTER(ctypes.c_int64)), ("byte_offset", ctypes.c_uint64)]


class Versioned(ctypes.Structure):
    pass


DELETER = ctypes.CFUNCTYPE(None, ctypes.POINTER(Versioned))
Versioned._fields_ = [("major", ctypes.c_uint32), ("minor", ctypes.c_uint32),
                      ("manager_ctx", ctypes.c_void_p), ("deleter", DELETER),
                      ("flags", ctypes.c_uint64), ("dl_tensor", DLTensor)]

_new_capsule = ctypes.pythonapi.PyCapsule_New
_new_capsule.restype = ctypes.py_object
_new_capsule.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
_capsule_name = ctypes.pythonapi.PyCapsule_GetName
_capsule_name.restype = ctypes.c_char_p
_capsule_name.argtypes = [ctypes.py_object]


class HandMade:
    """A producer whose capsule says what the test wants."""

    def __init__(self, buf, *, device=1, major=1, bits=8, lanes=1, flags=0):
        self.buf = buf
        self.deleted = 0
        self.shape = (ctypes.c_int64 * 1)(len(buf) * 8 // (bits * lanes) if bits * lanes else 1)
        self.strides = (ctypes.c_int64 * 1)(1)
        self.keep = DELETER(self._delete)
        self.m = Versioned(major, 0, None, self.keep, flags, DLTensor(
            ctypes.addressof(buf), device, 0, 1, 1, bits, lanes, self.shape, self.strides, 0))
        self.capsule = None

    def _delete(self, _):
        self.deleted += 1

    def __dlpack__(self, **kw):
        self.capsule = _new_capsule(ctypes.addressof(self.m), b"dltensor_versioned", None)
        return self.capsule


def test_the_capsule_is_taken_and_its_deleter_called_once():
    buf = (ctypes.c_uint8 * 64)(*range(1, 65))
    h = HandMade(buf)
    cp.clear(h)
    assert bytes(buf) == bytes(64) and h.deleted == 1
    assert _capsule_name(h.capsule) == b"used_dltensor_versioned"


@pytest.mark.parametrize("kw, match", [
    ({"device": 2}, "on CUDA .device 0., not in memory this CPU can write"),
    ({"device": 10}, "on ROCm"),
    ({"device": 99}, "on an unknown device"),
    ({"major": 2}, "exports DLPack 2.0, and this clearpages reads DLPack 1.x"),
    ({"bits": 4}, "elements are 4 bits, not whole bytes"),
    ({"flags": 1}, "read-only"),
    ({"flags": 2}, "a copy"),
])
def test_what_cannot_be_cleared_is_refused_unchanged_and_released(kw, match):
    buf = (ctypes.c_uint8 * 64)(*range(1, 65))
    h = HandMade(buf, **kw)
    with pytest.raises(TypeError, match=match):
        cp.clear(h)
    assert bytes(buf) == bytes(range(1, 65)) and h.deleted == 1


def test_cuda_host_memory_is_cleared():
    buf = (ctypes.c_uint8 * 64)(*range(1, 65))
    cp.clear(HandMade(buf, device=3))
    assert bytes(buf) == bytes(64)


def test_a_vector_dtype_clears_bits_times_lanes():
    buf = (ctypes.c_uint8 * 64)(*range(1, 65))
    h = HandMade(buf, bits=16, lanes=4)            # 8 elements of 8 bytes
    cp.clear(h)
    assert bytes(buf) == bytes(64)


def test_an_object_without_dlpack_says_what_is_taken():
    with pytest.raises(TypeError, match="not object"):
        cp.clear(object())


# ---- clear_many and nonzero_pages take tensors too ------------------------------


def test_clear_many_takes_tensors_beside_buffers():
    """Tensors (contiguous or strided) and buffers in one call: every byte
    of each, and nothing beside them."""
    a, b = filled(1000), filled((16, 12))
    outside = filled((16, 12))
    whole = np.full(4096 + 64, 7, np.uint8)
    buf = whole[32:-32]
    cp.clear_many([OnlyDLPack(a), buf, OnlyDLPack(b[::2, 3:9]), bytearray(b"\x01" * 9)])
    assert not a.any() and not buf.any()
    assert (whole[:32] == 7).all() and (whole[-32:] == 7).all()
    expect = outside.copy()
    expect[::2, 3:9] = 0
    assert (b == expect).all()


def test_clear_many_refuses_a_tensor_with_its_index_and_writes_nothing():
    a = filled(64)
    first = bytearray(b"\x05" * 64)
    with pytest.raises(TypeError, match=r"clear_many: buffer 1: .*read-only"):
        cp.clear_many([first, OnlyDLPack(_read_only(a))])
    with pytest.raises(TypeError, match=r"clear_many: buffer 2: .*read-only"):
        cp.clear_many([first, OnlyDLPack(a), OnlyDLPack(_read_only(a))])
    assert first == bytearray(b"\x05" * 64) and a.all()
    with pytest.raises(TypeError, match="buffer 1: the bytes is read-only"):
        cp.clear_many([OnlyDLPack(a), bytes(8)])
    assert a.all()


def _read_only(a):
    r = a.copy()
    r.flags.writeable = False
    return r


def test_clear_many_of_a_tensor_and_a_strided_array_says_to_split_them():
    """A strided numpy array is cleared run by run from Python, which takes
    no tensors: the call says so, and nothing is written."""
    a, s = filled(64), filled((8, 8))
    with pytest.raises(TypeError, match=r"buffer 0 is a tensor.*buffer 1 is strided"):
        cp.clear_many([OnlyDLPack(a), s[:, ::2]])
    assert a.all() and s.all()
    cp.clear_many([OnlyDLPack(a)])
    cp.clear_many([s[:, ::2]])
    assert not a.any() and not s[:, ::2].any() and s[:, 1::2].all()


def test_clear_many_releases_every_export_once():
    bufs = [(ctypes.c_uint8 * 64)(*range(1, 65)) for _ in range(3)]
    made = [HandMade(b) for b in bufs]
    cp.clear_many(made)
    assert all(bytes(b) == bytes(64) for b in bufs) and [h.deleted for h in made] == [1] * 3
    bufs = [(ctypes.c_uint8 * 64)(*range(1, 65)) for _ in range(3)]
    made = [HandMade(bufs[0]), HandMade(bufs[1], device=2), HandMade(bufs[2])]
    with pytest.raises(TypeError, match=r"clear_many: buffer 1: .*CUDA"):
        cp.clear_many(made)
    assert all(bytes(b) == bytes(range(1, 65)) for b in bufs)
    assert [h.deleted for h in made] == [1, 1, 0]     # the third was never asked


def test_nonzero_pages_of_a_tensor():
    a = np.zeros(20000, np.float32)
    a[[5, 3000, 3001, 19999]] = 1
    before = a.copy()
    t = OnlyDLPack(a)
    want = np.flatnonzero(a.view(np.uint8).reshape(-1)[:len(a) * 4].astype(bool))
    got = np.asarray(cp.nonzero_pages(t))
    assert got.tolist() == sorted({int(i) // 4096 for i in want})
    assert list(cp.nonzero_pages(OnlyDLPack(a), page_size=8)) == list(cp.nonzero_pages(a, 8))
    with pytest.raises(ValueError, match=r"multiple of the item size \(4 bytes\)"):
        cp.nonzero_pages(t, page_size=6)
    with pytest.raises(ValueError, match="contiguous tensor; this one is strided"):
        cp.nonzero_pages(OnlyDLPack(a.reshape(100, 200)[:, :10]))
    assert (a == before).all()      # read, never written


# ---- torch, when it is installed ------------------------------------------------


@pytest.fixture(scope="module")
def torch():
    return pytest.importorskip("torch", reason="torch is not installed "
                               "(pip install 'torch==2.13.0+cpu' runs these)")


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "int64", "bool", "complex64"])
@pytest.mark.parametrize("n", [1024, 1 << 18])       # kept GIL; released (exported)
def test_torch_tensor_is_cleared_in_place_and_autograd_is_told(torch, dtype, n):
    t = torch.ones(n, dtype=getattr(torch, dtype))
    v = t._version
    ptr = t.data_ptr()
    cp.clear(t)
    assert not t.any() and t.data_ptr() == ptr
    assert t._version > v


@pytest.mark.parametrize("view", [
    pytest.param(lambda t: t[3:], id="offset"),
    pytest.param(lambda t: t[::2, 1:9], id="strided"),
    pytest.param(lambda t: t.T, id="transposed"),
    pytest.param(lambda t: t[:, 5], id="column"),
])
def test_torch_views_are_honoured(torch, view):
    t = torch.arange(1, 101, dtype=torch.bfloat16).reshape(10, 10)
    expect = t.clone()
    view(expect).zero_()
    cp.clear(view(t))
    assert torch.equal(t, expect)


def test_a_tensor_that_requires_grad_follows_torch(torch):
    w = torch.ones(8, requires_grad=True)
    with pytest.raises(TypeError, match=r"requires grad.*torch.no_grad.*t.detach"):
        cp.clear(w)
    assert w.detach().all()
    with pytest.raises(RuntimeError, match="leaf"):
        w.zero_()                                  # torch's own rule, the same
    with torch.no_grad():
        cp.clear(w)
    assert not w.detach().any() and w.requires_grad
    y = torch.ones(4, requires_grad=True) * 2      # not a leaf: refused as well
    with pytest.raises(TypeError, match="requires grad"):
        cp.clear(y)


def test_autograd_sees_the_write(torch):
    x = torch.ones(4)
    w = torch.ones(4, requires_grad=True)
    y = (x * w).sum()                             # x is saved for w's gradient
    cp.clear(x)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        y.backward()
    d = torch.ones(4, requires_grad=True)
    cp.clear(d.detach())                           # shares the version counter
    assert d._version == 1


def test_parameters_subclasses_and_inference_tensors(torch):
    p = torch.nn.Parameter(torch.ones(16))
    with torch.no_grad():
        cp.clear(p)
    assert not p.detach().any()

    class Sub(torch.Tensor):
        pass

    s = torch.ones(16).as_subclass(Sub)
    cp.clear(s)
    assert not s.any()
    with torch.inference_mode():
        i = torch.ones(16)
    cp.clear(i)
    assert not i.any()


def test_torch_tensors_cp_cannot_write_are_refused(torch):
    m = torch.ones(4, device="meta")
    with pytest.raises(TypeError, match="cannot be cleared in place"):
        cp.clear(m)
    s = torch.ones(4).to_sparse()
    with pytest.raises(TypeError, match="cannot be cleared in place"):
        cp.clear(s)
    assert s.to_dense().all()


def test_torch_tensors_in_clear_many_and_nonzero_pages(torch):
    x = torch.ones(64, 64)
    y = torch.ones(3000, dtype=torch.int16)
    v = x._version
    cp.clear_many([x[:, :5], y, bytearray(3)])
    assert not x[:, :5].any() and x[:, 5:].all() and not y.any()
    assert x._version == v + 1
    y[2048] = 1
    assert list(cp.nonzero_pages(y)) == [1]



def test_clear_many_with_a_producer_that_reloads_and_empties_the_list():
    """A tensor's __dlpack__ runs Python code: it may reload the
    configuration and change the caller's list; the call clears what the
    list held when it was made, with a routine that exists after it."""
    a, b = filled(512), filled(512)
    items: list = []

    class Meddler(OnlyDLPack):
        def __dlpack__(self, **kw):
            cp.reload_config()
            items.clear()
            return super().__dlpack__(**kw)

    items.extend([Meddler(a), OnlyDLPack(b), bytearray(b"\x02" * 100)])
    keep = items[2]
    cp.clear_many(items, method=cp.methods()[0])
    assert not a.any() and not b.any() and not any(keep)
