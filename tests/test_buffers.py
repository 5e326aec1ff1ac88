"""Every kind of writable buffer is cleared (and only it); every read-only
one is refused with TypeError and left exactly as it was.

One case per distinct path, not a cross product: every contiguous buffer,
whatever its provider or numpy dtype, reaches the native entry as one
extent, so each kind is cleared empty, small (a direct call, the GIL kept),
large (the GIL released, streaming stores) and by a job whose work is big
enough for a second thread to start; strided and Fortran-ordered numpy
arrays reach it as extents, so the extent computation gets the views and
orders, and the extents path each way of calling.  Which routine runs for
which size is test_methods.py's and test_policy.py's."""

from __future__ import annotations

import array
import ctypes
import mmap

import pytest

import clearpages as cp

np = pytest.importorskip("numpy")

#: Ways to call clear: the lean path (auto), an explicit temporal and an
#: explicit streaming routine, and native threads (a job).
CALLS = [
    pytest.param({}, id="auto"),
    pytest.param({"method": "rep_stosb"}, id="rep_stosb"),
    pytest.param({"method": "movnti"}, id="movnti"),
    pytest.param({"threads": 2}, id="threads2"),
]

#: Work a job shares between two threads: more than one page a thread (a
#: job starts no more threads than pages), and above the GIL threshold.
THREADED = 200_003

#: The sizes a buffer kind is cleared at: empty, small (one direct call,
#: the GIL kept), large (the GIL released, streaming under auto); and the
#: same large size by a job on two threads.
KIND_CASES = [
    pytest.param(0, {}, id="empty"),
    pytest.param(255, {}, id="small"),
    pytest.param(THREADED, {}, id="large"),
    pytest.param(THREADED, {"threads": 2}, id="large-threads2"),
]


def _call_ok(kw):
    m = kw.get("method")
    if m is not None and m not in cp.methods():
        pytest.skip("%s is not available here" % m)


def _pattern(n: int) -> bytes:
    return bytes((i * 7 + 1) % 255 + 1 for i in range(n))      # never zero


# ---- contiguous buffers of every kind -----------------------------------

def _bytearray(n):
    b = bytearray(_pattern(n))
    return b, b, lambda: bytes(b) == bytes(n)


def _memoryview(n):
    b = bytearray(_pattern(n))
    return memoryview(b), b, lambda: bytes(b) == bytes(n)


def _mv_slice(n):
    b = bytearray(_pattern(n + 100))
    before = bytes(b)
    return (memoryview(b)[37:37 + n], b,
            lambda: b[:37] == before[:37] and b[37 + n:] == before[37 + n:]
            and not any(b[37:37 + n]))


def _mv_cast(n):
    n = max(n, 1)
    b = bytearray(_pattern(n * 8))
    mv = memoryview(b).cast("d").cast("B").cast("i", shape=[2, n])
    return mv, b, lambda: not any(b)


def _mmap_anon(n):
    m = mmap.mmap(-1, max(n, 1))
    m.write(_pattern(max(n, 1)))
    return m, m, lambda: m[:] == bytes(max(n, 1)) if n else True


def _mmap_file(n, tmp_path, access=mmap.ACCESS_WRITE):
    p = tmp_path / "data.bin"
    p.write_bytes(_pattern(n + 4096))
    f = open(p, "r+b")
    m = mmap.mmap(f.fileno(), 0, access=access)
    f.close()
    mv = memoryview(m)[4096:4096 + n] if access == mmap.ACCESS_WRITE else m

    def check():
        if access == mmap.ACCESS_WRITE:
            ok = m[4096:4096 + n] == bytes(n) and m[:4096] == _pattern(n + 4096)[:4096]
            m.flush()
            return ok and p.read_bytes()[4096:] == bytes(n)
        return m[:] == bytes(n + 4096) and p.read_bytes() == _pattern(n + 4096)
    return mv, m, check


def _array(code):
    def make(n):
        a = array.array(code, [(i % 100) + 1 for i in range(max(n // 4, 1))])
        return a, a, lambda: all(v == 0 for v in a)
    return make


def _ctypes(ctype):
    def make(n):
        count = max(n // ctypes.sizeof(ctype), 1)
        a = (ctype * count)()
        ctypes.memset(a, 0x5A, ctypes.sizeof(a))
        return a, a, lambda: bytes(memoryview(a).cast("B")) == bytes(ctypes.sizeof(a))
    return make


class _S(ctypes.Structure):
    _fields_ = [("a", ctypes.c_int), ("b", ctypes.c_double * 40), ("c", ctypes.c_char * 13)]


def _ctypes_struct(n):
    s = _S()
    ctypes.memset(ctypes.byref(s), 0x33, ctypes.sizeof(s))
    return s, s, lambda: bytes(memoryview(s).cast("B")) == bytes(ctypes.sizeof(s))


#: One of each provider of the buffer protocol (array.array and ctypes
#: arrays of other item types export the same way).
KINDS = {
    "bytearray": _bytearray,
    "memoryview": _memoryview,
    "memoryview_slice": _mv_slice,
    "memoryview_cast_2d": _mv_cast,
    "mmap_anonymous": _mmap_anon,
    "array_d": _array("d"),
    "ctypes_int": _ctypes(ctypes.c_int),
    "ctypes_structure": _ctypes_struct,
}


@pytest.mark.parametrize("n, kw", KIND_CASES)
@pytest.mark.parametrize("kind", sorted(KINDS))
def test_buffer_kinds(kind, n, kw):
    _call_ok(kw)
    obj, _keep, check = KINDS[kind](n)
    cp.clear(obj, **kw)
    assert check()


@pytest.mark.parametrize("kw", [pytest.param({}, id="auto"),
                                pytest.param({"threads": 2}, id="threads2")])
@pytest.mark.parametrize("access", [mmap.ACCESS_WRITE, mmap.ACCESS_COPY])
def test_mmap_file(tmp_path, access, kw):
    _call_ok(kw)
    n = 3 * 4096 + 5
    obj, m, check = _mmap_file(n, tmp_path, access)
    cp.clear(obj, **kw)
    if access == mmap.ACCESS_COPY:
        # Copy-on-write: the mapping is cleared, the file is not.
        assert m[:] == bytes(len(m))
        assert (tmp_path / "data.bin").read_bytes() == _pattern(n + 4096)
    else:
        assert check()
    del obj
    m.close()


# ---- numpy: dtypes, shapes, orders, strided views -----------------------

#: A plain dtype, and ones whose buffer format is not a number (a record,
#: bytes): the bytes are cleared all the same.
DTYPES = [np.float64, np.dtype([("a", np.int8), ("b", np.float64)]), np.dtype("S3")]


def _raw(a):
    """The bytes of a contiguous array (either order), as a uint8 view."""
    return a.reshape(-1, order="A").view(np.uint8)


def _filled(shape, dtype, order="C"):
    a = np.zeros(shape, dtype=dtype, order=order)
    _raw(a)[:] = 0x7B
    return a


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("shape", [(0,), (7,), (3, 5, 7), (64, 1, 33)])
@pytest.mark.parametrize("order", ["C", "F"])
def test_numpy_contiguous(dtype, shape, order):
    """C order is one extent; Fortran order (of more than one dimension that
    is not 1) is asked in C order, declined, and cleared as extents."""
    a = _filled(shape, dtype, order)
    cp.clear(a)
    assert not _raw(a).any()


@pytest.mark.parametrize("kw", CALLS)
@pytest.mark.parametrize("order", ["C", "F"])
def test_numpy_contiguous_large(order, kw):
    """Each way of calling, on an array large enough for a job to start its
    second thread: one extent (C order) or long extents (F order)."""
    _call_ok(kw)
    a = _filled((THREADED // 24 + 1, 3), np.float64, order)
    cp.clear(a, **kw)
    assert not _raw(a).any()


VIEWS = {
    "every_other": lambda a: a[::2],
    "reversed": lambda a: a[::-1],
    "cols_step3": lambda a: a[:, ::3],
    "inner_box": lambda a: a[1:-1, 2:-2],
    "transpose": lambda a: a.T,
    "transposed_slice": lambda a: a.T[::2, 1:],
    "negative_2d": lambda a: a[::-2, ::-3],
    "column": lambda a: a[:, 4],
    "empty_slice": lambda a: a[3:3, ::2],
    "3d_mixed": lambda a: a.reshape(6, 5, 14)[1:, ::2, ::-4],
    "field_of_record": None,
}


@pytest.mark.parametrize("view", sorted(VIEWS))
@pytest.mark.parametrize("dtype", [np.uint8, np.complex128], ids=str)
@pytest.mark.parametrize("order", ["C", "F"])
def test_numpy_strided_views_clear_only_their_elements(view, dtype, order):
    """A strided view is cleared element by element and every element
    outside it keeps its value (checked against numpy doing the same); the
    smallest and largest item size, both orders of the base."""
    kw: dict = {}
    if view == "field_of_record":
        base = np.zeros(40, dtype=[("a", np.int32), ("b", dtype), ("c", np.int16)])
        base.view(np.uint8)[:] = 0x41
        want = base.copy()
        want["b"] = 0
        cp.clear(base["b"], **kw)
        assert base.tobytes() == want.tobytes()
        return
    base = np.arange(1, 30 * 14 + 1).astype(dtype).reshape(30, 14)
    base = np.asarray(base, order=order)
    want = base.copy(order="K")
    v = VIEWS[view](base)
    VIEWS[view](want)[...] = 0
    cp.clear(v, **kw)
    assert np.array_equal(base, want), view
    assert not np.asarray(v).astype(bool).any() if v.size else True


@pytest.mark.parametrize("kw", CALLS)
def test_strided_extents_each_way_of_calling(kw):
    """The extents of a strided view reach the native extents entry with the
    method and threads asked: a view of more pages than two threads share."""
    _call_ok(kw)
    base = np.arange(1, 600 * 128 + 1, dtype=np.float64).reshape(600, 128)
    want = base.copy()
    want[::2, 1:] = 0
    cp.clear(base[::2, 1:], **kw)
    assert np.array_equal(base, want)


def test_random_layouts_clear_their_elements_and_nothing_else():
    """Shapes and strides drawn at random over one base (overlapping,
    repeated, disjoint, negative, with more extents than the native walk
    hands on at once): clear and clear_many write exactly the bytes numpy
    writes for v[...] = 0, and no byte of the base outside them."""
    from numpy.lib.stride_tricks import as_strided

    rng = np.random.default_rng(5)
    base = np.empty(20000, dtype=np.uint8)
    want = np.empty_like(base)
    tried = 0
    while tried < 200:
        ndim = int(rng.integers(1, 4))
        item = int(rng.choice([1, 2, 8]))
        shape = [int(rng.integers(1, 24)) for _ in range(ndim)]
        strides = [int(rng.choice([0, 1, item, 3 * item, 40, 256, -item, -40, -300]))
                   for _ in shape]
        lo = sum((n - 1) * s for n, s in zip(shape, strides) if s < 0)
        hi = sum((n - 1) * s for n, s in zip(shape, strides) if s > 0) + item
        if hi - lo > base.size - 128:
            continue
        tried += 1
        start = 64 - lo
        for many in (False, True):
            base[:] = rng.integers(1, 256, base.size, dtype=np.uint8)
            want[:] = base
            v = as_strided(base[start:], shape=shape + [item], strides=strides + [1])
            as_strided(want[start:], shape=shape + [item], strides=strides + [1])[...] = 0
            if many:
                cp.clear_many([bytearray(3), v])
            else:
                cp.clear(v)
            assert np.array_equal(base, want), (shape, strides, item, many)


def test_a_broadcast_of_2_56_elements_clears_its_8_bytes():
    """A view whose elements share bytes (stride 0) costs what its bytes do,
    never its element count: clear and clear_many write the 8 bytes under
    2**56 elements, and not the bytes beside them."""
    from numpy.lib.stride_tricks import as_strided

    for call in (cp.clear, lambda v: cp.clear_many([bytearray(2), v])):
        base = np.full(24, 7, dtype=np.uint8)
        call(as_strided(base[8:], shape=(1 << 28, 1 << 28, 8), strides=(0, 0, 1)))
        assert base.tolist() == [7] * 8 + [0] * 8 + [7] * 8


def test_fortran_and_strided_numpy_arrays_are_cleared_without_python():
    """A numpy array in Fortran order, or a strided view of one, a
    subclass's too, is cleared by the native entry itself (Python's
    explanation of a refusal cost a small one 4-5 us): the Python hook is
    not called; hot=, or an argument Python explains, still go through it,
    and are still refused."""
    from clearpages import _core, _fast

    seen = []

    def hook(*args):
        seen.append(type(args[0]).__name__)
        return _core._declined_clear(*args)

    def install(clear):
        _fast.set_hooks(init=_core._dispatch.init_native, clear=clear,
                        many=_core._declined_many, pages=_core._declined_pages,
                        scan=_core._declined_scan, hot=_core._check_hot,
                        page_index_error=cp.PageIndexError)

    class Sub(np.ndarray):
        pass

    install(hook)
    try:
        for a in (np.ones((6, 9), order="F"), np.ones((6, 9))[:, ::2],
                  np.ones((6, 9), np.uint8)[::2, 1:], np.ones(40)[::-3]):
            cp.clear(a)
            assert not a.any()
        assert seen == []
        sub = np.ones((6, 9)).view(Sub)
        for a in (sub[:, ::2], np.asfortranarray(sub)):
            cp.clear(a)
            assert not a.any()
        assert seen == [] and sub[:, 1::2].all()
        with pytest.raises(ValueError, match="strided"):
            cp.clear(np.ones((6, 9))[:, ::2], hot=(0, 8))
        with pytest.raises(ValueError, match="unknown method"):
            cp.clear(np.ones((6, 9))[:, ::2], method="fast")
        assert seen == ["ndarray", "ndarray"]
        # Through Python (hot=), a subclass is a numpy array too.
        with pytest.raises(ValueError, match="strided"):
            cp.clear(sub[:, ::2], hot=(0, 8))
    finally:
        install(_core._declined_clear)


def test_strided_numpy_refuses_hot():
    a = np.ones((10, 10))
    with pytest.raises(ValueError, match="strided"):
        cp.clear(a[:, ::2], hot=(0, 8))
    assert a.all()


@pytest.mark.parametrize("kw", [pytest.param({}, id="auto"),
                                pytest.param({"threads": 2}, id="threads2"),
                                pytest.param({"method": "libc"}, id="libc"),
                                pytest.param({"method": "movnti"}, id="movnti")])
@pytest.mark.parametrize("step", [2, 3, -1, -2, 4097])
def test_a_memoryview_with_a_step_clears_its_items_alone(kw, step):
    """A memoryview slice with a step (a strided buffer of another exporter
    than numpy) is cleared item by item: its items zero, every byte between
    and around them as it was."""
    _call_ok(kw)
    n = 3 * 4097 + 11
    b = bytearray(_pattern(n))
    want = bytearray(b)
    for i in range(1, n - 1)[::step]:
        want[i] = 0
    cp.clear(memoryview(b)[1:-1][::step], **kw)
    assert b == want
    b = bytearray(_pattern(n))
    cp.clear_many([bytearray(5), memoryview(b)[1:-1][::step]], **kw)
    assert b == want


def test_a_two_dimensional_memoryview_with_a_step():
    b = bytearray(_pattern(24 * 8))
    want = np.frombuffer(b, dtype=np.uint64).reshape(4, 6).copy()
    want[:, ::2] = 0
    mv = memoryview(np.frombuffer(b, dtype=np.uint64).reshape(4, 6)[:, ::2])
    assert type(mv) is memoryview and not mv.contiguous
    cp.clear(mv, method=np.str_("rep_stosb") if "rep_stosb" in cp.methods() else "libc")
    assert np.array_equal(np.frombuffer(b, dtype=np.uint64).reshape(4, 6), want)


def test_a_read_only_or_hot_memoryview_with_a_step_is_refused_untouched():
    b = bytearray(_pattern(100))
    with pytest.raises(TypeError, match="read-only"):
        cp.clear(memoryview(bytes(b))[::2])
    with pytest.raises(TypeError, match="read-only"):
        cp.clear(memoryview(b).toreadonly()[::2])
    with pytest.raises(ValueError, match="strided"):
        cp.clear(memoryview(b)[::2], hot=(0, 4))
    with pytest.raises(TypeError, match="read-only"):
        cp.clear_many([bytearray(5), memoryview(b).toreadonly()[::3]])
    assert b == bytearray(_pattern(100))


@pytest.mark.parametrize("layout", ["strided", "fortran"])
def test_datetime64_arrays_strided_or_fortran_are_cleared(layout):
    """numpy cannot state a datetime64 array's format in a buffer: a strided
    or Fortran-ordered one is asked for its strides without it (it raised
    numpy's 'cannot include dtype' ValueError), for a clear and a scan."""
    a = np.arange(1, 25, dtype=np.int64).astype("datetime64[s]").reshape(4, 6)
    if layout == "fortran":
        a = np.asfortranarray(a)
        view, want = a, np.zeros((4, 6), dtype=np.int64)
    else:
        view = a[:, ::2]
        want = np.arange(1, 25, dtype=np.int64).reshape(4, 6)
        want[:, ::2] = 0
    assert not cp.is_zero(view)
    cp.clear(view)
    assert np.array_equal(a.astype(np.int64), want)
    assert cp.is_zero(view)
    a2 = np.arange(1, 25, dtype=np.int64).astype("datetime64[s]").reshape(4, 6)
    cp.clear_many([a2[:, ::2], bytearray(3)])
    assert not a2.astype(np.int64)[:, ::2].any() and a2.astype(np.int64)[:, 1::2].all()
    # An argument the native entry hands to Python (a numpy integer): the
    # same clear from there.
    a3 = np.arange(1, 25, dtype=np.int64).astype("datetime64[s]").reshape(4, 6)
    cp.clear(np.asfortranarray(a3) if layout == "fortran" else a3[:, ::2],
             threads=np.int64(2))
    if layout == "strided":
        assert np.array_equal(a3.astype(np.int64), want)
    a3.flags.writeable = False
    with pytest.raises(TypeError, match="read-only"):
        cp.clear(a3[:, ::2], threads=np.int64(2))


def test_fortran_memoryview_without_numpy_object():
    """A Fortran-ordered buffer that is not a numpy array: cleared or a
    ValueError that says so; never a wrong clear."""
    a = _filled((6, 7), np.int32, "F")
    mv = memoryview(a)
    assert not mv.c_contiguous and mv.f_contiguous
    try:
        cp.clear(mv)
    except ValueError as e:
        assert "contiguous" in str(e)
        assert (_raw(a) == 0x7B).all()
    else:
        assert not a.any()


# ---- read-only buffers --------------------------------------------------

def _ro_bytes():
    b = _pattern(5000)
    return b, lambda: b == _pattern(5000)


def _ro_mv_bytes():
    b = _pattern(5000)
    return memoryview(b), lambda: b == _pattern(5000)


def _ro_mv_toreadonly():
    b = bytearray(_pattern(5000))
    return memoryview(b).toreadonly(), lambda: b == bytearray(_pattern(5000))


def _ro_mv_toreadonly_slice():
    b = bytearray(_pattern(5000))
    return memoryview(b).toreadonly()[10:4000], lambda: b == bytearray(_pattern(5000))


def _ro_numpy():
    a = np.arange(1, 1001, dtype=np.int64)
    a.flags.writeable = False
    return a, lambda: np.array_equal(a, np.arange(1, 1001))


def _ro_numpy_strided():
    a = np.arange(1, 1001, dtype=np.int64).reshape(10, 100)
    a.flags.writeable = False
    return a[:, ::3], lambda: np.array_equal(a, np.arange(1, 1001).reshape(10, 100))


def _ro_numpy_fortran():
    a = np.asfortranarray(np.arange(1, 1001, dtype=np.int64).reshape(10, 100))
    a.flags.writeable = False
    return a, lambda: np.array_equal(a, np.arange(1, 1001).reshape(10, 100))


def _ro_numpy_frombuffer_bytes():
    b = _pattern(4096)
    return np.frombuffer(b, dtype=np.uint8), lambda: b == _pattern(4096)


def _ro_mmap_prot_read():
    m = mmap.mmap(-1, 8192, prot=mmap.PROT_READ)
    return m, lambda: m[:] == bytes(8192)


RO_KINDS = {
    "bytes": _ro_bytes,
    "memoryview_of_bytes": _ro_mv_bytes,
    "memoryview_toreadonly": _ro_mv_toreadonly,
    "memoryview_toreadonly_slice": _ro_mv_toreadonly_slice,
    "numpy_not_writeable": _ro_numpy,
    "numpy_not_writeable_strided": _ro_numpy_strided,
    "numpy_not_writeable_fortran": _ro_numpy_fortran,
    "numpy_frombuffer_bytes": _ro_numpy_frombuffer_bytes,
    "mmap_prot_read": _ro_mmap_prot_read,
}

#: The buffer is asked for before the method, threads or hot= are looked
#: at: one plain call, one that the entry normalizes (a hot range).
RO_CALLS = [pytest.param({}, id="auto"), pytest.param({"hot": (0, 16)}, id="hot")]


@pytest.mark.parametrize("kw", RO_CALLS)
@pytest.mark.parametrize("kind", sorted(RO_KINDS))
def test_read_only_is_refused_unchanged(kind, kw):
    _call_ok(kw)
    kw = dict(kw)
    obj, unchanged = RO_KINDS[kind]()
    with pytest.raises(TypeError):
        cp.clear(obj, **kw)
    assert unchanged()
    kw.pop("hot", None)
    writable = bytearray(b"\x01" * 9000)
    with pytest.raises(TypeError):
        cp.clear_many([writable, obj], **kw)
    assert unchanged()
    assert writable == bytearray(b"\x01" * 9000)
    with pytest.raises(TypeError):
        cp.clear_pages(obj, [0], page_size=16, **kw)
    assert unchanged()


@pytest.mark.parametrize("kw", RO_CALLS)
def test_mmap_access_read_is_refused_unchanged(tmp_path, kw):
    _call_ok(kw)
    p = tmp_path / "ro.bin"
    p.write_bytes(_pattern(8192))
    with open(p, "rb") as f:
        m = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    with pytest.raises(TypeError, match="read-only"):
        cp.clear(m, **kw)
    assert m[:] == _pattern(8192)
    m.close()
    assert p.read_bytes() == _pattern(8192)


@pytest.mark.parametrize("obj", [b"", "text", 12, None, [1, 2, 3], 3.5, object()],
                         ids=["empty_bytes", "str", "int", "None", "list", "float", "object"])
def test_not_a_writable_buffer_is_a_type_error(obj):
    with pytest.raises(TypeError):
        cp.clear(obj)
    with pytest.raises(TypeError):
        cp.clear(obj, method="libc", threads=2)
    with pytest.raises(TypeError):
        cp.clear_many([bytearray(4), obj])


def test_error_message_names_the_type():
    with pytest.raises(TypeError, match="read-only") as e:
        cp.clear(b"abc")
    assert "bytes" in str(e.value)
    with pytest.raises(TypeError, match="str"):
        cp.clear("abc")


@pytest.mark.parametrize("view", ["strided", "fortran", "transpose"])
def test_no_reference_cycle_keeps_the_array(view):
    """A cleared strided or Fortran array is freed as soon as the caller
    drops it, without waiting for the garbage collector."""
    import gc
    import weakref

    gc.disable()
    try:
        base = np.ones((200, 300))
        if view == "strided":
            v = base[:, ::2]
        elif view == "fortran":
            v = np.asfortranarray(base)
        else:
            v = base.T
        ref = weakref.ref(base)
        cp.clear(v)
        cp.clear(v, method="libc", threads=2)
        del v, base
        assert ref() is None
    finally:
        gc.enable()


# ---- items that hold references ------------------------------------------------

def _holding(kind):
    """(buffer, the objects its items refer to) for one kind of buffer whose
    items are Python object references."""
    objs = [object(), "abc", 1.5]
    if kind == "object":
        return np.array(objs, dtype=object), objs
    if kind == "object_2d_strided":
        a = np.empty((3, 4), dtype=object)
        a[:] = objs[0]
        return a[:, ::2], objs[:1]
    if kind == "structured":
        a = np.zeros(3, dtype=[("x", "f8"), ("obj", "O")])
        a["obj"] = objs
        return a, objs
    if kind == "subarray":
        a = np.empty(2, dtype=[("pair", "O", (2,))])
        a["pair"] = objs[0]
        return a, objs[:1]
    if kind == "ctypes_py_object":      # a buffer format 'O' without numpy
        a = (ctypes.py_object * 3)(*objs)
        return a, objs
    raise AssertionError(kind)


HOLDING = ["object", "object_2d_strided", "structured", "subarray", "ctypes_py_object"]


REFUSING_CALLS = ["clear", "clear_hot", "clear_many", "clear_many_after_strided", "clear_pages"]


def _refused_call(call, buf):
    """Each entry that writes, given buf: alone, with hot=, second of a
    clear_many (after a plain buffer, or after a strided one: the Python
    path), and clear_pages."""
    return {
        "clear": lambda: cp.clear(buf),
        "clear_hot": lambda: cp.clear(buf, hot=(0, 8)),
        "clear_many": lambda: cp.clear_many([bytearray(8), buf]),
        "clear_many_after_strided": lambda: cp.clear_many([np.ones(8)[::2], buf]),
        "clear_pages": lambda: cp.clear_pages(buf, [0], page_size=8),
    }[call]


@pytest.mark.parametrize("kind", HOLDING)
@pytest.mark.parametrize("call", REFUSING_CALLS)
def test_items_holding_references_are_refused_unchanged(kind, call):
    """Zeroing object references turns the items into NULLs (None to numpy)
    and leaks every object for good: a TypeError that names the fix, and
    the buffer and the objects' reference counts unchanged."""
    import sys

    buf, objs = _holding(kind)
    before = [sys.getrefcount(o) for o in objs]
    snapshot = bytes(memoryview(buf).cast("B")) if memoryview(buf).c_contiguous else None
    with pytest.raises(TypeError, match=r"hold references.*a\.fill\(0\)"):
        _refused_call(call, buf)()
    if snapshot is not None:
        assert bytes(memoryview(buf).cast("B")) == snapshot
    assert [sys.getrefcount(o) for o in objs] == before
    if kind != "ctypes_py_object":
        assert all(x is not None for x in buf.ravel()) if buf.dtype == object else True


def _lone_pointer(kind):
    """A lone pointer of each kind ctypes makes, and what it points to
    (None where it holds an address or a string of its own)."""
    target = (ctypes.c_int * 4)(1, 2, 3, 4)
    if kind == "pointer":
        return ctypes.pointer(ctypes.c_int(7)), None
    if kind == "pointer_to_array":
        return ctypes.pointer(target), target
    if kind == "c_void_p":
        return ctypes.c_void_p(ctypes.addressof(target)), target
    if kind == "c_char_p":
        return ctypes.c_char_p(b"abc"), None
    if kind == "c_wchar_p":
        return ctypes.c_wchar_p("abc"), None
    raise AssertionError(kind)


@pytest.mark.parametrize("kind", ["pointer", "pointer_to_array", "c_void_p", "c_char_p",
                                  "c_wchar_p"])
@pytest.mark.parametrize("call", REFUSING_CALLS)
def test_a_lone_pointer_is_refused_unchanged(kind, call):
    """A ctypes pointer object's buffer is the pointer: clearing it would
    set it to NULL, where whoever wrote cp.clear(ctypes.pointer(x)) meant
    x.  A TypeError that names the way, and the pointer and what it points
    to unchanged."""
    p, target = _lone_pointer(kind)
    before = bytes(memoryview(p).cast("B"))
    target_before = bytes(target) if target is not None else None
    with pytest.raises(TypeError, match=r"is a pointer: .*NULL.*p\.contents"):
        _refused_call(call, p)()
    assert bytes(memoryview(p).cast("B")) == before
    assert before != bytes(len(before))
    if target is not None:
        assert bytes(target) == target_before


def test_pointers_in_arrays_and_structures_are_still_cleared():
    """An array of pointers, a structure with a pointer field, and what a
    pointer points to (p.contents) are buffers of their own: cleared, and
    a pointer may be read (is_zero)."""
    x = ctypes.c_int(5)
    arr = (ctypes.POINTER(ctypes.c_int) * 3)(*(ctypes.pointer(x) for _ in range(3)))
    cp.clear(arr)
    assert not any(arr)

    class WithPointer(ctypes.Structure):
        _fields_ = [("p", ctypes.POINTER(ctypes.c_int)), ("n", ctypes.c_int)]
    s = WithPointer(ctypes.pointer(x), 3)
    cp.clear(s)
    assert not s.p and s.n == 0
    target = (ctypes.c_int * 4)(1, 2, 3, 4)
    p = ctypes.pointer(target)
    assert not cp.is_zero(p)
    cp.clear(p.contents)
    assert list(target) == [0] * 4 and p        # the pointer still points there
    cp.clear((ctypes.c_char * 8).from_address(ctypes.addressof(target)))
    assert bytes(target) == bytes(16)


@pytest.mark.parametrize("kind", ["object", "structured", "subarray"])
def test_references_are_refused_after_a_run_of_wide_arrays(kind):
    """After arrays of wide items in a row (float64: the binding then asks
    the next array of that type for its format at once), an array of
    references is still refused, and narrow and format-less arrays between
    them are still cleared."""
    import sys

    for _ in range(3):
        f = np.ones(4)
        cp.clear(f)
        assert not f.any()
    buf, objs = _holding(kind)
    before = [sys.getrefcount(o) for o in objs]
    with pytest.raises(TypeError, match=r"hold references"):
        cp.clear(buf)
    assert [sys.getrefcount(o) for o in objs] == before
    for a in (np.ones(4), np.ones(4), np.ones(3, "M8[s]"), np.ones(4), np.ones(4),
              np.ones(5, np.uint8), np.ones(4)):
        cp.clear(a)
        assert (a.view(np.uint8) == 0).all()
    with pytest.raises(TypeError, match=r"hold references"):
        cp.clear(_holding(kind)[0])


def test_dtypes_without_references_are_still_cleared():
    """numpy cannot state a buffer format for datetime64: such an array
    holds no references and is cleared; a field named O is just a name."""
    for a in (np.ones(3, "M8[s]"), np.ones(3, dtype=[("O", "f8"), ("b", "i4")])):
        cp.clear(a)
        assert not memoryview(a).cast("B").tobytes().strip(b"\0") if a.dtype.kind != "M" \
            else (a.view("i8") == 0).all()
