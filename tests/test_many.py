"""clear_many (many buffers, one native call) and clear_pages (listed pages
of one buffer): pieces of every shape, overlap, refusals before any write."""

from __future__ import annotations

import array
import ctypes
import gc
import mmap
import random

import pytest
from conftest import FILL, guarded

import clearpages as cp
from clearpages import _fast

np = pytest.importorskip("numpy")
hypothesis = pytest.importorskip("hypothesis")
from hypothesis import given, settings, strategies as st  # noqa: E402

KiB, MiB = 1 << 10, 1 << 20


# ---- clear_many -------------------------------------------------------------

@pytest.mark.parametrize("bufs", [[], (), iter([]), (b for b in [])],
                         ids=["list", "tuple", "iter", "generator"])
def test_many_empty(bufs):
    cp.clear_many(bufs)
    cp.clear_many(bufs, method="libc", threads=3)


def test_many_zero_length_pieces():
    b = bytearray(b"\x07" * 100)
    mv = memoryview(b)
    cp.clear_many([bytearray(), mv[5:5], np.zeros(0), mv[99:99]])
    assert b == bytearray(b"\x07" * 100)
    cp.clear_many([mv[10:10], mv[20:30], bytearray()])
    assert b[:20] == b"\x07" * 20 and b[20:30] == bytes(10) and b[30:] == b"\x07" * 70


def test_many_overlapping_and_aliasing(any_method):
    whole, view, start = guarded(np, 10_000, 3)
    mv = memoryview(view)
    pieces = [mv[0:100], mv[50:200], mv[150:160], mv[0:100], mv[300:5000], mv[4999:5001],
              mv[5001:5001], mv[6000:9000], mv[6500:6600], mv[9000:10_000]]
    cp.clear_many(pieces, method=any_method)
    got = np.frombuffer(view, dtype=np.uint8)
    want = np.full(10_000, FILL, dtype=np.uint8)
    for lo, hi in ((0, 200), (300, 5001), (6000, 10_000)):
        want[lo:hi] = 0
    assert np.array_equal(got, want)
    assert (whole[:start] == FILL).all() and (whole[start + 10_000:] == FILL).all()


@pytest.mark.parametrize("threads", [1, 2, 3, "auto"])
def test_many_scattered_pieces_of_one_buffer(any_method, threads):
    """Random pieces (odd sizes, odd offsets, random order) of one guarded
    buffer: each cleared, every gap between them untouched."""
    rng = random.Random(1234)
    whole, view, start = guarded(np, 4 * MiB, 0)
    spans, pos = [], 0
    while True:
        pos += rng.randrange(1, 300)
        n = rng.choice([0, 1, 63, 64, 65, 4095, 4096, 4097, rng.randrange(1, 40_000)])
        if pos + n > len(view):
            break
        spans.append((pos, n))
        pos += n
    rng.shuffle(spans)
    mv = memoryview(view)
    cp.clear_many([mv[s:s + n] for s, n in spans], method=any_method, threads=threads)
    want = np.full(len(view), FILL, dtype=np.uint8)
    for s, n in spans:
        want[s:s + n] = 0
    assert np.array_equal(view, want)
    assert (whole[:start] == FILL).all() and (whole[start + len(view):] == FILL).all()


def test_many_mixed_types(tmp_path):
    ba = bytearray(b"\x01" * 5000)
    arr = np.arange(1, 100, dtype=np.float32)
    m = mmap.mmap(-1, 8192)
    m.write(b"\x02" * 8192)
    aa = array.array("i", range(1, 500))
    ct = (ctypes.c_double * 33)(*range(1, 34))
    fortran = np.asfortranarray(np.ones((7, 9)))
    host = bytearray(b"\x03" * 300)
    pieces = [ba, arr, m, aa, ct, fortran, memoryview(host)[100:200], memoryview(ba)]
    cp.clear_many(pieces)
    assert not any(ba) and not arr.any() and m[:] == bytes(8192)
    assert not any(aa) and list(ct) == [0.0] * 33 and not fortran.any()
    assert host == b"\x03" * 100 + bytes(100) + b"\x03" * 100
    del pieces
    m.close()


def test_many_strided_numpy_pieces(any_method):
    a = np.arange(1, 201, dtype=np.int64).reshape(10, 20)
    b = np.arange(1, 1001, dtype=np.uint8).reshape(50, 20)
    c = np.asfortranarray(np.arange(1, 61, dtype=np.float64).reshape(6, 10))
    wa, wb, wc = a.copy(), b.copy(), c.copy()
    wa[:, ::3] = 0
    wb[::-2, 1:5] = 0
    wc[1:, :] = 0
    cp.clear_many([a[:, ::3], b[::-2, 1:5], c[1:, :], bytearray(10)], method=any_method)
    assert np.array_equal(a, wa) and np.array_equal(b, wb) and np.array_equal(c, wc)


RO = [
    pytest.param(lambda: b"\x05" * 64, id="bytes"),
    pytest.param(lambda: memoryview(bytearray(b"\x05" * 64)).toreadonly(), id="readonly_mv"),
    pytest.param(lambda: _ro_numpy(), id="numpy_readonly"),
    pytest.param(lambda: "a string", id="str"),
    pytest.param(lambda: 42, id="int"),
    pytest.param(lambda: memoryview(bytearray(b"\x05" * 64)).toreadonly()[::2],
                 id="readonly_strided_mv"),
]


def _ro_numpy():
    a = np.full(64, 5, dtype=np.uint8)
    a.flags.writeable = False
    return a


@pytest.mark.parametrize("position", [0, 2, 5])
@pytest.mark.parametrize("make_bad", RO)
@pytest.mark.parametrize("with_strided", [False, True])
def test_many_refuses_before_writing_anything(make_bad, position, with_strided):
    """One unusable piece among writable ones: TypeError and not one byte of
    the others written."""
    good = [bytearray(b"\x09" * n) for n in (10, 5000, 40 * MiB // 8, 3)]
    strided_base = np.arange(1, 101, dtype=np.int32)
    if with_strided:
        good.append(strided_base[::2])
    bad = make_bad()
    pieces = list(good)
    pieces.insert(min(position, len(pieces)), bad)
    with pytest.raises((TypeError, ValueError)) as e:
        cp.clear_many(pieces, threads=2)
    assert "buffer %d" % min(position, len(good)) in str(e.value) or \
        isinstance(e.value, TypeError)
    for g in good[:4]:
        assert g == bytearray(b"\x09" * len(g))
    assert np.array_equal(strided_base, np.arange(1, 101))


def test_many_chunked_total(method):
    """More than one 32 MiB chunk in all, from 4 KiB-and-a-bit pieces."""
    whole, view, start = guarded(np, 40 * MiB, 5)
    mv = memoryview(view)
    step = 4096 + 64
    pieces = [mv[i:i + 4096 + 7] for i in range(0, len(view) - step, step)]
    cp.clear_many(pieces, method=method)
    ends = np.arange(0, len(view) - step, step)
    got = np.frombuffer(view, dtype=np.uint8).reshape(-1)
    # Every piece zero, every gap FILL: check by pattern on the strided layout.
    body = got[:len(ends) * step].reshape(len(ends), step)
    assert not body[:, :4103].any()
    assert (body[:, 4103:] == FILL).all()
    assert (got[len(ends) * step:] == FILL).all()
    assert (whole[:start] == FILL).all() and (whole[start + len(view):] == FILL).all()


def test_many_bad_arguments():
    b = bytearray(b"\x01" * 10)
    for threads in (0, -1, 1000):
        with pytest.raises(ValueError, match="threads"):
            cp.clear_many([b], threads=threads)
    for threads in (True, 1.5, "many", None):
        with pytest.raises(TypeError, match="threads"):
            cp.clear_many([b], threads=threads)
    with pytest.raises(ValueError, match="rep_stosb"):
        cp.clear_many([b], method="nope")
    with pytest.raises(TypeError):
        cp.clear_many(None)
    with pytest.raises(TypeError):
        cp.clear_many(b)         # a buffer, not a list of buffers: its items are ints
    assert b == bytearray(b"\x01" * 10)


@pytest.mark.parametrize("with_strided", [False, True])
def test_many_holds_the_buffers_while_clearing(with_strided):
    """While the native job runs (without the GIL) no other thread may
    resize a bytearray or close an mmap out from under it."""
    ba = bytearray(b"\x01" * 100_000)
    m = mmap.mmap(-1, 4096)
    results = []

    def during():
        for attempt in (lambda: ba.extend(b"x" * 10_000_000), m.close):
            try:
                attempt()
                results.append("allowed")
            except BufferError:
                results.append("refused")

    def hook(where, routine, nbytes):
        if where == "slice" and not results:
            during()

    pieces = [ba, m] + ([np.ones(10)[::2]] if with_strided else [])
    _fast._set_debug_hook(hook)
    try:
        cp.clear_many(pieces)
    finally:
        _fast._set_debug_hook(None)
    assert results[:2] == ["refused", "refused"]
    assert len(ba) == 100_000 and not any(ba)
    del pieces
    m.close()


@pytest.mark.parametrize("bad", [None, b"read-only"])
def test_many_lets_go_of_the_buffers_at_once(bad):
    """After clear_many returns (or refuses), no export is left behind for
    the garbage collector: an mmap closes and a bytearray resizes at once."""
    gc.disable()
    try:
        m = mmap.mmap(-1, 4096)
        ba = bytearray(100)
        pieces = [ba, m, np.ones((8, 8), order="F"), np.ones(10)[::2]]
        if bad is None:
            cp.clear_many(pieces)
        else:
            with pytest.raises(TypeError):
                cp.clear_many(pieces + [bad])
        del pieces
        ba.extend(b"x" * 1000)
        m.close()
    finally:
        gc.enable()


@pytest.mark.parametrize("bad_last", [False, True])
def test_many_interrupted_lets_go_of_the_buffers_though_the_traceback_lives(bad_last):
    """Ctrl-C in a clear_many that holds a strided array (the pieces are
    gathered in Python): the KeyboardInterrupt's traceback keeps the frames
    alive, and with them anything a local still refers to; the buffers'
    exports must be let go all the same, or `with Region(...)` turns the
    Ctrl-C into a BufferError and the mapping stays.  The same when a
    refused buffer ends the gathering."""
    def hook(where, routine, nbytes):
        if where == "slice":
            raise KeyboardInterrupt

    region = cp.Region(1 << 20)
    m = mmap.mmap(-1, 4096)
    pieces = [region, m, np.ones(10)[::2]]
    _fast._set_debug_hook(hook)
    try:
        if bad_last:
            with pytest.raises(TypeError) as caught:
                cp.clear_many(pieces + [b"read-only"])
        else:
            with pytest.raises(KeyboardInterrupt) as caught:
                cp.clear_many(pieces, threads=2)
    finally:
        _fast._set_debug_hook(None)
    assert caught.tb is not None        # the traceback, and its frames, live on
    region.close()
    m.close()
    del caught


# ---- clear_pages ------------------------------------------------------------

def _pool(npages, page_size=4096, tail=0):
    """A numpy pool whose page i holds the byte (i % 250) + 1."""
    n = npages * page_size + tail
    a = np.empty(n, dtype=np.uint8)
    full = np.repeat((np.arange(npages + 1) % 250 + 1).astype(np.uint8), page_size)
    a[:] = full[:n]
    return a


def _want(npages, pages, page_size=4096, tail=0):
    w = _pool(npages, page_size, tail)
    for p in pages:
        w[p * page_size:(p + 1) * page_size] = 0
    return w


INDEX_FORMS = [
    pytest.param(list, id="list"),
    pytest.param(tuple, id="tuple"),
    *[pytest.param(lambda p, c=c: array.array(c, p), id="array_" + c) for c in "bBhHiIlLqQ"],
    *[pytest.param(lambda p, d=d: np.array(p, dtype=d), id="numpy_" + d)
      for d in ("int8", "uint8", "int16", "uint16", "int32", "uint32", "int64", "uint64")],
    pytest.param(lambda p: np.array(p, dtype=np.int64)[::-1][::-1], id="numpy_view"),
    pytest.param(lambda p: np.repeat(np.array(p, dtype=np.int32), 2)[::2], id="numpy_strided"),
]


@pytest.mark.parametrize("form", INDEX_FORMS)
def test_pages_index_forms(form):
    pages = [5, 0, 17, 5, 3, 31, 2, 2]      # unsorted, repeated, first and last
    buf = _pool(32)
    cp.clear_pages(buf, form(pages))
    assert np.array_equal(buf, _want(32, pages))


def test_pages_from_range_and_generator():
    buf = _pool(20)
    cp.clear_pages(buf, range(0, 20, 3))
    cp.clear_pages(buf, (i for i in (19, 1)))
    assert np.array_equal(buf, _want(20, list(range(0, 20, 3)) + [19, 1]))


@pytest.mark.parametrize("page_size", [1, 7, 512, 4096, 4099, 65536, 2 * MiB])
@pytest.mark.parametrize("tail", ["none", "one_byte", "part"])
def test_pages_sizes_and_partial_last_page(page_size, tail):
    if page_size == 1 and tail != "none":
        pytest.skip("a 1-byte page has no partial page")
    tail = {"none": 0, "one_byte": 1, "part": page_size * 2 // 3}[tail]
    npages = max(3, min(40, (8 * MiB) // page_size))
    buf = _pool(npages, page_size, tail)
    last = npages if tail else npages - 1       # index of the partial page
    pages = [last, 0, npages // 2, last]
    cp.clear_pages(buf, pages, page_size=page_size)
    assert np.array_equal(buf, _want(npages, pages, page_size, tail))
    with pytest.raises(cp.PageIndexError):
        cp.clear_pages(buf, [last + 1], page_size=page_size)


@pytest.mark.parametrize("threads", [1, 2, 3, "auto"])
def test_pages_every_method(any_method, threads):
    rng = random.Random(7)
    npages = 3000
    pages = rng.sample(range(npages), 1500) + rng.choices(range(npages), k=100)
    buf = _pool(npages, tail=100)
    cp.clear_pages(buf, np.array(pages), method=any_method, threads=threads)
    assert np.array_equal(buf, _want(npages, pages, tail=100))


def test_pages_chunked(method):
    """More than a 32 MiB chunk of pages, in random order, guarded."""
    npages = 9 * 1024 + 1                      # 36 MiB and a page
    whole, view, start = guarded(np, npages * 4096, 64)
    view[:] = 0xEE
    rng = np.random.default_rng(3)
    pages = rng.permutation(npages)[: npages - 3]
    cp.clear_pages(view, pages, method=method)
    rows = view.reshape(npages, 4096)
    kept = sorted(set(range(npages)) - set(pages.tolist()))
    assert len(kept) == 3 and (rows[kept] == 0xEE).all()
    rows[kept] = 0
    assert not view.any()
    assert (whole[:start] == FILL).all() and (whole[start + len(view):] == FILL).all()


def test_pages_empty_list():
    buf = _pool(4)
    for empty in ([], (), array.array("q"), np.zeros(0, dtype=np.int64)):
        cp.clear_pages(buf, empty)
    assert np.array_equal(buf, _pool(4))


@pytest.mark.parametrize("pages", [[0, 1, 4], [4], [-1], [0, -5], [1, 2, 1 << 40],
                                   [2 ** 63 - 1], [2 ** 63], [2 ** 64 + 1], [-(2 ** 70)]])
@pytest.mark.parametrize("form", ["list", "numpy", "array"])
def test_pages_out_of_range_writes_nothing(pages, form):
    buf = _pool(4)
    if form == "numpy":
        try:
            idx = np.array(pages)
        except OverflowError:
            pytest.skip("numpy cannot hold %r" % pages)
        if idx.dtype.kind not in "iu":
            pytest.skip("numpy made %s of %r" % (idx.dtype, pages))
    elif form == "array":
        if any(p < 0 for p in pages) or max(pages) >= 2 ** 64:
            pytest.skip("array('Q') cannot hold %r" % pages)
        idx = array.array("Q", pages)
    else:
        idx = pages
    with pytest.raises(cp.PageIndexError) as e:
        cp.clear_pages(buf, idx)
    assert isinstance(e.value, IndexError) and isinstance(e.value, ValueError)
    assert np.array_equal(buf, _pool(4))


def test_pages_error_says_the_valid_range():
    buf = bytearray(4096 * 3 + 10)
    with pytest.raises(cp.PageIndexError, match="0 to 3"):
        cp.clear_pages(buf, [1, 4])
    with pytest.raises(cp.PageIndexError):
        cp.clear_pages(bytearray(), [0])


@pytest.mark.parametrize("pages", [[1.0], [0, 1.5], array.array("d", [1.0]),
                                   array.array("f", [0.0]), np.array([1.0]),
                                   np.array([True]), ["1"], [None], [[1]], 5, None])
def test_pages_non_integer_is_a_type_error(pages):
    buf = _pool(4)
    with pytest.raises(TypeError):
        cp.clear_pages(buf, pages)
    assert np.array_equal(buf, _pool(4))


@pytest.mark.parametrize("page_size, kind", [
    (0, ValueError), (-1, ValueError), (-4096, ValueError), ("4q", ValueError),
    ("-4k", ValueError), (1 << 60, ValueError), (True, TypeError), (1.5, TypeError)])
def test_pages_bad_page_size(page_size, kind):
    buf = _pool(4)
    with pytest.raises(kind, match="page_size"):
        cp.clear_pages(buf, [0], page_size=page_size)
    assert np.array_equal(buf, _pool(4))


def test_pages_bad_buffer_and_arguments():
    a = np.ones((64, 128), dtype=np.uint8)
    with pytest.raises(ValueError, match="contiguous"):
        cp.clear_pages(a[:, ::2], [0], page_size=64)
    with pytest.raises(ValueError, match="threads"):
        cp.clear_pages(a, [0], threads=0)
    with pytest.raises(ValueError, match="method"):
        cp.clear_pages(a, [0], method="fast")
    assert a.all()
    cp.clear_pages(a, [1], page_size=128)           # 2-D contiguous: bytes in order
    assert not a[1].any() and a[0].all() and a[2:].all()


# ---- properties -------------------------------------------------------------

@settings(max_examples=60, deadline=None)
@given(npages=st.integers(1, 300), page_size=st.sampled_from([1, 64, 100, 4096, 5000]),
       tail_frac=st.floats(0, 0.99), data=st.data(),
       method=st.sampled_from(("auto",) + cp.methods()), threads=st.sampled_from((1, 2, "auto")))
def test_property_pages(npages, page_size, tail_frac, data, method, threads):
    tail = int(page_size * tail_frac)
    total_pages = npages + (1 if tail else 0)
    pages = data.draw(st.lists(st.integers(0, total_pages - 1), max_size=400))
    buf = _pool(npages, page_size, tail)
    cp.clear_pages(buf, pages, page_size=page_size, method=method, threads=threads)
    assert np.array_equal(buf, _want(npages, pages, page_size, tail))


@settings(max_examples=60, deadline=None)
@given(spans=st.lists(st.tuples(st.integers(0, 20_000), st.integers(0, 5_000)), max_size=60),
       method=st.sampled_from(("auto",) + cp.methods()), threads=st.sampled_from((1, 2, 3)))
def test_property_many(spans, method, threads):
    """Any pieces of one guarded buffer, overlapping or not: their union is
    zero, everything else untouched."""
    whole, view, start = guarded(np, 25_000, 7)
    mv = memoryview(view)
    cp.clear_many([mv[s:s + n] for s, n in spans], method=method, threads=threads)
    want = np.full(25_000, FILL, dtype=np.uint8)
    for s, n in spans:
        want[s:s + n] = 0
    assert np.array_equal(view, want)
    assert (whole[:start] == FILL).all() and (whole[start + 25_000:] == FILL).all()


@pytest.mark.parametrize("count", [2, 127, 128, 129, 300, 3000])
def test_many_pieces_in_any_order_both_sorts(count):
    """Pieces given in random order, repeated and overlapping, as few as
    the insertion sort takes (up to 128) and as many as the radix sort
    does: their union is zero, everything else untouched."""
    import random

    rng = random.Random(count)
    whole, view, start = guarded(np, 40_000, 5)
    mv = memoryview(view)
    spans = [(rng.randrange(0, 39_000), rng.randrange(0, 300)) for _ in range(count)]
    spans += spans[: count // 4]
    rng.shuffle(spans)
    cp.clear_many([mv[s:s + n] for s, n in spans])
    want = np.full(40_000, FILL, dtype=np.uint8)
    for s, n in spans:
        want[s:s + n] = 0
    assert np.array_equal(view, want)
    assert (whole[:start] == FILL).all() and (whole[start + 40_000:] == FILL).all()


@settings(max_examples=40, deadline=None)
@given(npages=st.integers(600_000, 1_500_000), data=st.data(),
       threads=st.sampled_from((1, 2)))
def test_property_pages_sparse_in_a_large_buffer(npages, data, threads):
    """Few pages of many (1-byte pages, so the buffer stays small): the list
    is sorted and merged rather than marked in a bitmap of every page; the
    result is the same."""
    pages = data.draw(st.lists(st.integers(0, npages - 1), max_size=40))
    buf = np.full(npages, FILL, dtype=np.uint8)
    cp.clear_pages(buf, pages, page_size=1, threads=threads)
    want = np.full(npages, FILL, dtype=np.uint8)
    want[np.array(pages, dtype=np.int64)] = 0
    assert np.array_equal(buf, want)


@settings(max_examples=150, deadline=None)
@given(npages=st.integers(1, 66), page_size=st.sampled_from([1, 7, 64, 1000, 4096]),
       tail=st.integers(0, 6), offset=st.integers(0, 63), data=st.data(),
       form=st.sampled_from([list, tuple, lambda p: array.array("q", p)]),
       method=st.sampled_from(("auto",) + cp.methods()))
def test_property_few_pages_of_a_small_buffer(npages, page_size, tail, offset, data, form,
                                              method):
    """Up to 64 pages of a buffer below the size that releases the GIL are
    cleared by direct calls, without a job; 65 and more by a job.  Either
    way: pages listed in any order, repeated, adjacent or not, a short last
    page, at any alignment; nothing outside them written."""
    tail = min(tail, page_size - 1)
    n = npages * page_size + tail
    count = npages + (1 if tail else 0)
    pages = data.draw(st.lists(st.integers(0, count - 1), min_size=1, max_size=10))
    whole, view, start = guarded(np, n, offset)
    view[:] = np.arange(n) % 251 + 1
    want = view.copy()
    for p in pages:
        want[p * page_size:(p + 1) * page_size] = 0
    cp.clear_pages(view, form(pages), page_size=page_size, method=method)
    assert np.array_equal(view, want)
    assert (whole[:start] == FILL).all() and (whole[start + n:] == FILL).all()


@pytest.mark.parametrize("pages", [[0, 64], [-1], [3, 1 << 40], [0, (1 << 63) - 1]])
def test_few_pages_out_of_range_write_nothing(pages):
    """An index past the end among a few exact ints: the PageIndexError of
    any list, nothing written."""
    buf = bytearray(b"\x05" * 4 * 64)
    with pytest.raises(cp.PageIndexError, match="position %d" % (len(pages) - 1)):
        cp.clear_pages(buf, pages, page_size=4)
    assert buf == bytearray(b"\x05" * 4 * 64)


def test_pages_both_paths_agree():
    """The same list through the bitmap (dense) and the sort (sparse) paths."""
    rng = random.Random(7)
    npages = 1 << 20                      # 1-byte pages: a 128 KiB bitmap
    dense = [rng.randrange(npages) for _ in range(200_000)]
    sparse = dense[:50]
    for pages in (dense, sparse, sparse + sparse[::-1], [npages - 1, 0, npages - 1]):
        buf = np.full(npages, FILL, dtype=np.uint8)
        cp.clear_pages(buf, pages, page_size=1)
        want = np.full(npages, FILL, dtype=np.uint8)
        want[np.array(pages, dtype=np.int64)] = 0
        assert np.array_equal(buf, want)


@pytest.mark.parametrize("container", [list, tuple])
def test_pages_list_items_read_like_array(container):
    """A list or tuple is read in C; it takes what array.array('q') takes
    (ints, bools, objects with __index__) and refuses the rest the same way."""
    buf = np.full(8 * 16, FILL, dtype=np.uint8)
    cp.clear_pages(buf, container([np.int64(3), True, 5]), page_size=16)
    want = np.full(8 * 16, FILL, dtype=np.uint8)
    for p in (3, 1, 5):
        want[p * 16:(p + 1) * 16] = 0
    assert np.array_equal(buf, want)
    with pytest.raises(TypeError, match="item 1 is str"):
        cp.clear_pages(buf, container([0, "1"]), page_size=16)
    with pytest.raises(cp.PageIndexError, match="position 1"):
        cp.clear_pages(buf, container([0, -(1 << 70)]), page_size=16)
    assert np.array_equal(buf, want)     # the refusals wrote nothing
