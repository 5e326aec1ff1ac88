"""Tensors in place: clear() of any object with __dlpack__ (CPU memory)."""

from __future__ import annotations

import ctypes
import sys

import pytest
from capsules import Producer, capsule_name
from conftest import ROOT, OnlyDLPack, numpy_dlpack, run_python

import clearpages as cp

np = pytest.importorskip("numpy")

KiB = 1 << 10

#: How clear() refuses a read-only numpy array: where numpy's versioned
#: export flags it, by that flag; where numpy refuses to export it (before
#: 2.1), with numpy's refusal.  Either way a TypeError, the array unchanged.
READ_ONLY_REFUSAL = (r"OnlyDLPack is read-only .its DLPack export says so"
                     if numpy_dlpack().read_only else
                     r"OnlyDLPack cannot be cleared in place: its DLPack export failed: "
                     r".+; it was left unchanged")


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
    asked = {"max_version": (1, 0), "copy": False}
    # A numpy that refuses the keywords (before 2.1) is asked again without.
    assert w.calls == ([asked] if numpy_dlpack().versioned else [asked, {}])


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
        with pytest.raises(TypeError, match=READ_ONLY_REFUSAL):
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
    try:
        a.__dlpack__()
    except (BufferError, TypeError) as e:                # bool before numpy 1.25
        pytest.skip("numpy %s exports no %s through DLPack: %s" % (np.__version__, dtype, e))
    cp.clear(OnlyDLPack(a[1:5, ::3]))
    assert not a[1:5, ::3].any() and a[0].all() and a[5].all() and a[1:5, 1::3].all()


def test_read_only_is_refused_and_unchanged():
    a = filled(64)
    a.flags.writeable = False
    with pytest.raises(TypeError, match=READ_ONLY_REFUSAL):
        cp.clear(OnlyDLPack(a))
    assert a.all()


def test_a_copy_is_refused_and_the_original_unchanged():
    if not numpy_dlpack().versioned:
        pytest.skip("numpy %s cannot export a copy (copy= came with DLPack 1.0 in numpy "
                    "2.1); a hand-made capsule flagged IS_COPIED is refused below"
                    % numpy_dlpack().version)
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
    for hint in (True, False):
        a[:] = 1
        cp.clear(OnlyDLPack(a), hot=hint)
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


def HandMade(buf, *, device=1, major=1, bits=8, lanes=1, flags=0):
    """A capsule of the bytes of a ctypes array, saying what the test wants."""
    n = len(buf) * 8 // (bits * lanes) if bits * lanes else 1
    return Producer(buf, (n,), (1,), device=device, version=(major, 0), bits=bits,
                    lanes=lanes, flags=flags, keep=True)


def test_the_capsule_is_taken_and_its_deleter_called_once():
    buf = (ctypes.c_uint8 * 64)(*range(1, 65))
    h = HandMade(buf)
    cp.clear(h)
    assert bytes(buf) == bytes(64) and h.deleted == 1
    assert capsule_name(h.capsule) == b"used_dltensor_versioned"


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


# ---- what a producer may hand over: stride 0 over a huge shape, NULL data ----
#
# Each runs in a fresh interpreter: a crash there fails the test, not the run.

_CHILD = """
import ctypes, sys
sys.path.insert(0, %r)
import clearpages as cp
from capsules import Producer
""" % str(ROOT / "tests")


def _child(code: str):
    r = run_python(_CHILD + code)
    assert r.returncode == 0, "the child died (%d): %s" % (r.returncode, r.stderr[-2000:])
    return r.stdout


def test_a_stride_0_tensor_of_2_61_elements_costs_its_one_element():
    """Its elements are all the same byte: every entry reads or writes that
    byte alone, in no more time or memory than its storage takes."""
    _child("""
buf = (ctypes.c_uint8 * 8)(*range(1, 9))
made = []
def t(shape, strides):
    p = Producer(buf, shape, strides, byte_offset=2)
    made.append(p)
    return p
for shape, strides in [((1 << 61,), (0,)), ((1 << 62, 1 << 62), (0, 0)),
                       ((3, 1 << 61), (0, 0)), ((1 << 59, 1), (0, 1)),
                       ((2,) * 62, (0,) * 62)]:
    assert cp.is_zero(t(shape, strides)) is False
    assert list(cp.nonzero_pages(t(shape, strides))) == [0]
    cp.clear(t(shape, strides))
    assert bytes(buf) == bytes([1, 2, 0, 4, 5, 6, 7, 8]), bytes(buf)
    assert cp.is_zero(t(shape, strides)) is True
    buf[2] = 3
    cp.clear_many([t(shape, strides), t(shape, strides)])
    assert bytes(buf) == bytes([1, 2, 0, 4, 5, 6, 7, 8]), bytes(buf)
    buf[2] = 3
assert [p.deleted for p in made] == [1] * len(made)
""")


def test_numpy_broadcast_of_2_61_elements_through_dlpack():
    pytest.importorskip("numpy")
    _child("""
import numpy as np
sys.path.insert(0, %r)
from conftest import OnlyDLPack
x = np.arange(1, 9, dtype=np.uint8)
big = np.lib.stride_tricks.as_strided(x[3:], (1 << 61,), (0,))
assert cp.is_zero(OnlyDLPack(big)) is False
cp.clear(OnlyDLPack(big))
assert x.tolist() == [1, 2, 3, 0, 5, 6, 7, 8], x
assert cp.is_zero(OnlyDLPack(big)) is True
""" % str(ROOT / "tests"))


def test_null_data_with_a_size_is_refused_and_an_empty_one_taken():
    """A NULL data pointer for 4 bytes: refused as torch refuses in-place
    writes to a tensor without memory (its ZeroTensors); a NULL pointer for
    no element is an empty tensor, cleared as ever."""
    _child("""
for version in [(1, 0), None]:
    for call in (cp.clear, cp.is_zero, cp.nonzero_pages, lambda t: cp.clear_many([t])):
        p = Producer(0, (4,), (1,), version=version)
        try:
            call(p)
        except TypeError as e:
            assert "ZeroTensors are immutable" in str(e) and "NULL" in str(e), e
        else:
            raise AssertionError("NULL data was taken by %r" % call)
        assert p.deleted == 1
    for shape in [(0,), (4, 0), (0, 1 << 62)]:
        p = Producer(0, shape, None, version=version)
        cp.clear(p)
        assert cp.is_zero(p) is True and list(cp.nonzero_pages(p)) == []
        cp.clear_many([p, p])
        assert p.deleted == p.exports == 5
""")


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
    with pytest.raises(TypeError, match=r"clear_many: buffer 1: .*" + READ_ONLY_REFUSAL):
        cp.clear_many([first, OnlyDLPack(_read_only(a))])
    with pytest.raises(TypeError, match=r"clear_many: buffer 2: .*" + READ_ONLY_REFUSAL):
        cp.clear_many([first, OnlyDLPack(a), OnlyDLPack(_read_only(a))])
    assert first == bytearray(b"\x05" * 64) and a.all()
    with pytest.raises(TypeError, match="buffer 1: the bytes object is read-only"):
        cp.clear_many([OnlyDLPack(a), bytes(8)])
    assert a.all()


def _read_only(a):
    r = a.copy()
    r.flags.writeable = False
    return r


def test_clear_many_of_a_tensor_and_a_strided_array_says_to_split_them():
    """A strided numpy array is cleared extent by extent from Python, which takes
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


@pytest.mark.parametrize("dtype", ["int8", "uint16", "float16", "float32", "int64",
                                   "complex128", "bool"])
def test_clear_pages_of_a_tensor(dtype):
    """Pages count bytes of page_size from the tensor's first byte, as for
    a buffer; whatever nonzero_pages finds, clear_pages clears."""
    a = np.zeros(30000 // np.dtype(dtype).itemsize, dtype)
    try:
        a.__dlpack__()
    except (BufferError, TypeError) as e:                # bool before numpy 1.25
        pytest.skip("numpy %s exports no %s through DLPack: %s" % (np.__version__, dtype, e))
    raw = a.view(np.uint8)
    raw[[0, 4096 * 2 + 7, len(raw) - 1]] = 1
    t = OnlyDLPack(a)
    pages = cp.nonzero_pages(t)
    assert list(pages) == [0, 2, (len(raw) - 1) // 4096]
    cp.clear_pages(t, pages)
    assert not raw.any()
    raw[:] = 1
    cp.clear_pages(OnlyDLPack(a), [1], page_size="1k")      # the words Python reads
    assert not raw[1024:2048].any() and raw[:1024].all() and raw[2048:].all()
    cp.clear_pages(OnlyDLPack(a), np.array([2], np.uint64), page_size=1000)
    assert not raw[2000:3000].any() and raw[3000:].all()
    with pytest.raises(cp.PageIndexError, match="outside the buffer"):
        cp.clear_pages(OnlyDLPack(a), [len(raw) // 4096 + 1])
    with pytest.raises(ValueError, match="contiguous tensor; this one is strided"):
        cp.clear_pages(OnlyDLPack(a[: len(a) // 10 * 10].reshape(-1, 10)[:, :5]), [0])
    with pytest.raises(TypeError, match=READ_ONLY_REFUSAL):
        cp.clear_pages(OnlyDLPack(_read_only(a)), [0])
    with pytest.raises(ValueError, match="unknown method"):
        cp.clear_pages(OnlyDLPack(a), [0], method="fast")
    assert raw[3000:].all()


def test_clear_pages_of_a_broadcast_tensor_is_its_storage():
    x = np.arange(1, 9, dtype=np.uint8)
    t = OnlyDLPack(np.lib.stride_tricks.as_strided(x, (1 << 40, 8), (0, 1)))
    assert list(cp.nonzero_pages(t, page_size=4)) == [0, 1]
    cp.clear_pages(t, [1], page_size=4)
    assert x.tolist() == [1, 2, 3, 4, 0, 0, 0, 0]


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


# torch's rules for an in-place write, each checked against t.zero_() on a
# twin of the same tensor: (make the tensor and the leaf behind it, the
# mode the write is made in).


def _leaf(torch, **kw):
    w = torch.ones(6, **kw)
    return w, w


def _parameter(torch):
    p = torch.nn.Parameter(torch.ones(6))
    return p, p


def _result(torch):
    w = torch.ones(6, requires_grad=True)
    return w * 2, w                     # not a leaf; requires grad


def _computed(torch):
    x = torch.ones(6)
    return x * 2, None                  # computed, no grad: a leaf to autograd


def _view_of_leaf(torch):
    w = torch.ones(6, requires_grad=True)
    return w[1:], w


def _view_of_result(torch):
    w = torch.ones(6, requires_grad=True)
    return (w * 2)[1:], w


def _inference(torch):
    with torch.inference_mode():
        return torch.ones(6), None


def _given_inference_data(torch):
    t, _ = _inference(torch)
    n = torch.ones(6)
    n.data = t                  # is_inference() now, but it keeps its version counter
    return n, None


TORCH_RULES = {
    "leaf without grad": (lambda torch: _leaf(torch), "grad"),
    "leaf with grad": (lambda torch: _leaf(torch, requires_grad=True), "grad"),
    "leaf with grad, no_grad": (lambda torch: _leaf(torch, requires_grad=True), "no_grad"),
    "parameter": (lambda torch: _parameter(torch), "grad"),
    "parameter, no_grad": (lambda torch: _parameter(torch), "no_grad"),
    "not a leaf, with grad": (_result, "grad"),
    "not a leaf, with grad, no_grad": (_result, "no_grad"),
    "computed without grad": (_computed, "grad"),
    "view of a leaf with grad": (_view_of_leaf, "grad"),
    "view of a leaf with grad, no_grad": (_view_of_leaf, "no_grad"),
    "view of a result with grad": (_view_of_result, "grad"),
    "inference tensor, outside": (_inference, "grad"),
    "inference tensor, inside": (_inference, "inference"),
}


def _mode(torch, name):
    import contextlib
    return {"grad": contextlib.nullcontext(), "no_grad": torch.no_grad(),
            "inference": torch.inference_mode()}[name]


@pytest.mark.parametrize("rule", TORCH_RULES)
def test_torch_rules_are_those_of_zero_(torch, rule):
    """cp.clear takes or refuses what t.zero_() takes or refuses; where it
    takes it, the values, the version counter and the gradients that
    follow are the same as after zero_()."""
    make, mode = TORCH_RULES[rule]
    outcome = []
    for write in (lambda t: t.zero_(), cp.clear):
        t, w = make(torch)
        try:
            before = t._version
        except RuntimeError:            # an inference tensor has no version counter
            before = None
        with _mode(torch, mode):
            try:
                write(t)
                err = None
            except (RuntimeError, TypeError) as e:
                err = e
        grad = None
        if err is None and w is not None and t.requires_grad:
            (t * torch.arange(t.numel())).sum().backward()
            grad = w.grad.tolist()
        values = t.detach().tolist()
        bumped = None if before is None else t._version - before
        outcome.append((err, values, bumped, grad))
    (theirs, *torch_state), (ours, *our_state) = outcome
    assert (theirs is None) == (ours is None), "t.zero_(): %r; cp.clear: %r" % (theirs, ours)
    if ours is not None:
        assert isinstance(ours, TypeError) and "left unchanged" in str(ours)
        assert "  " not in str(ours)                # one space between sentences
        assert our_state[0] == [1.0] * len(our_state[0])
    else:
        assert our_state == torch_state


def test_a_tensor_given_an_inference_tensors_data_is_taken_as_by_zero_(torch):
    """is_inference() says yes, but the tensor kept its version counter,
    and torch's in-place rule asks the counter: zero_() takes it, so
    cp.clear does.  (torch's version bump skips it; zero_() bumps it.)"""
    a, _ = _given_inference_data(torch)
    b, _ = _given_inference_data(torch)
    assert a.is_inference()
    a.zero_()
    cp.clear(b)
    assert a.tolist() == b.tolist() == [0.0] * 6


def test_a_tensor_that_requires_grad_says_what_to_do(torch):
    w = torch.ones(8, requires_grad=True)
    with pytest.raises(TypeError, match=r"a leaf that requires grad.*torch.no_grad.*t.detach"):
        cp.clear(w)
    with pytest.raises(TypeError, match=r"a view of a leaf that requires grad"):
        cp.clear(w[2:])
    with pytest.raises(TypeError, match=r"a leaf that requires grad"):
        cp.clear_many([bytearray(4), w])
    with torch.inference_mode():
        i = torch.ones(4)
    with pytest.raises(TypeError, match=r"inference tensor.*inside torch.inference_mode"):
        cp.clear(i)
    assert w.detach().all() and i.all()


def test_a_result_that_requires_grad_is_cleared_by_its_zero_(torch):
    """autograd records zero_() of a result in the graph (its gradient
    is then zero); in clear_many it runs after the others are written, so a
    refusal among them leaves it unchanged too."""
    w = torch.ones(4, requires_grad=True)
    y = w * 3
    buf = bytearray(b"\x01" * 8)
    with pytest.raises(TypeError, match="buffer 2"):
        cp.clear_many([y, buf, w])
    assert y.detach().all() and any(buf)
    cp.clear_many([y, buf])
    assert not y.detach().any() and not any(buf)
    assert y.grad_fn.name() == "ZeroBackward0"
    y.sum().backward()
    assert w.grad.tolist() == [0.0] * 4
    with pytest.raises(TypeError, match=r"not a leaf.*pages"):
        cp.clear_pages(w * 2, [0])


def test_version_counters_move_as_with_zero_(torch):
    base = torch.ones(4096, dtype=torch.float32)
    v = base._version
    cp.clear(base[10:20])                          # a view shares its base's counter
    assert base._version == v + 1
    cp.clear_many([base[:5], base[5:]])            # each tensor once
    assert base._version == v + 3
    d = base.detach()
    cp.clear(d)
    assert base._version == v + 4
    cp.clear_pages(base, [0])
    assert base._version == v + 5
    cp.clear_pages(base, [])                       # nothing written
    assert base._version == v + 5


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


def test_torch_expand_to_2_61_elements_and_a_zero_tensor(torch):
    """The two tensors that once crashed every entry: an expanded one
    element, and torch's ZeroTensor (no memory behind its 16 bytes)."""
    _child("""
import torch
one = torch.zeros(1, dtype=torch.uint8)
t = one.expand(1 << 61)
assert cp.is_zero(t) is True
one[0] = 7
assert cp.is_zero(t) is False and list(cp.nonzero_pages(t)) == [0]
cp.clear(t)
assert one.item() == 0
one[0] = 7
cp.clear_many([t, t])
assert one.item() == 0
z = torch._efficientzerotensor(4)
for call in (cp.clear, cp.is_zero, cp.nonzero_pages, lambda t: cp.clear_many([t])):
    try:
        call(z)
    except TypeError as e:
        assert "ZeroTensors are immutable" in str(e), e
    else:
        raise AssertionError("a ZeroTensor was taken by %r" % call)
try:
    z.zero_()
except RuntimeError as e:
    assert "ZeroTensors are immutable" in str(e), e       # torch's own words
""")


def test_torch_tensors_cp_cannot_write_are_refused(torch):
    m = torch.ones(4, device="meta")
    with pytest.raises(TypeError, match="cannot be cleared in place"):
        cp.clear(m)
    s = torch.ones(4).to_sparse()
    with pytest.raises(TypeError, match="cannot be cleared in place"):
        cp.clear(s)
    assert s.to_dense().all()


def _torch_dtypes(torch):
    """Every dtype torch makes a CPU tensor of, by name."""
    import warnings

    out = {}
    for name in dir(torch):
        d = getattr(torch, name)
        if isinstance(d, torch.dtype):
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")     # "experimental", "deprecated"
                    torch.zeros(2, dtype=d)
            except (RuntimeError, TypeError):
                continue                                # quantized: no plain tensor
            out[str(d).replace("torch.", "")] = d
    return out


def test_clear_pages_of_nonzero_pages_for_every_torch_dtype(torch):
    """The KV-cache case: find the pages in use, clear them, for a tensor of
    any dtype (the bits types, which DLPack cannot carry, as their bytes)."""
    dtypes = _torch_dtypes(torch)
    assert {"float32", "bfloat16", "float8_e4m3fn", "bits8", "complex64"} <= set(dtypes)
    for name, dtype in sorted(dtypes.items()):
        t = torch.zeros(20000 // torch.empty(0, dtype=dtype).element_size(), dtype=dtype)
        raw = t.view(torch.uint8)
        raw[[5, 3 * 4096, 4 * 4096 - 1]] = 1
        pages = cp.nonzero_pages(t)
        assert list(pages) == [0, 3], name
        v = t._version
        cp.clear_pages(t, pages)
        assert cp.is_zero(t) and not raw.any() and t._version == v + 1, name
        raw[7] = 1
        cp.clear(t)
        assert not raw.any(), name


def test_clear_pages_reads_the_tensor_after_the_page_indices(torch):
    """An index's __index__ may move the tensor's memory (resize_): the
    tensor is read after the indices, so the pages of its memory as it is
    then are cleared, never the memory it had before."""
    t = torch.ones(4096, dtype=torch.uint8)

    class Index:
        def __index__(self):
            t.resize_(1 << 16)          # a new storage; the old one is freed
            t.fill_(1)
            return 1

    cp.clear_pages(t, [Index()])
    assert not t[4096:8192].any() and t[:4096].all() and t[8192:].all()


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
