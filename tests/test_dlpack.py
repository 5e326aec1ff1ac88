"""Tensors in place: clear() of any object with __dlpack__ (CPU memory)."""

from __future__ import annotations

import sys

import pytest
from conftest import OnlyDLPack, numpy_dlpack

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
