"""Zero detection: is_zero and nonzero_pages.

Every scan variant (words, sse2, avx2) through one fixture, skipped where the
CPU lacks it: every length 0..600 at every offset 0..63 and sampled lengths
up to 4 MiB, with nonzero guard bytes around the scanned range (a read
outside it would see them), a nonzero byte first, last and at every place of
the short lengths, and buffers that end or start at an unmapped page.
Then the public calls: every buffer kind, read-only and strided ones, and
what they refuse.  Nothing is ever written.
"""

from __future__ import annotations

import array
import ctypes
import mmap
import random

import pytest
from capsules import Producer
from conftest import OnlyDLPack, numpy_dlpack, run_python

import clearpages as cp
from clearpages import _dispatch, _scan
from clearpages._native import ffi, lib

np = pytest.importorskip("numpy")

MiB = 1 << 20
GUARD = 0xA5


@pytest.fixture(params=_scan.VARIANTS)
def variant(request):
    """Every scan variant; skipped, with the reason, where this CPU or build
    lacks it."""
    name = request.param
    idx = _scan.VARIANTS.index(name)
    if not lib.cp_scan_built(idx):
        pytest.skip("%s is not in this build (a portable build scans with words)" % name)
    missing = _scan.requires(name) - cp.cpu().features
    if missing:
        pytest.skip("%s needs %s, which this CPU lacks (or CLEARPAGES_DISABLE masks)"
                    % (name, ", ".join(sorted(missing))))
    return idx


def _guarded(n_total):
    """A buffer of GUARD bytes and a cffi pointer to its first 64-byte boundary."""
    whole = np.full(n_total + 128, GUARD, dtype=np.uint8)
    base = whole.__array_interface__["data"][0]
    pad = -base % 64
    return whole, pad, ffi.cast("char *", base + pad)


def _short_lengths():
    return range(601)


def _long_lengths():
    """Lengths from 601 to 4 MiB: around each multiple of 32 and 256 up to
    4 KiB, then powers of two and their neighbours, and a few odd ones."""
    out = set()
    for m in range(608, 4097, 32):
        out.update((m - 1, m, m + 1))
    for k in range(12, 23):
        for d in (-257, -33, -1, 0, 1, 31, 255):
            out.add((1 << k) + d)
    out.update((4 * MiB, 3 * MiB + 12345, 999_999))
    return sorted(n for n in out if 601 <= n <= 4 * MiB)


def test_every_short_length_at_every_offset(variant):
    """0..600 bytes at offsets 0..63 inside nonzero guard bytes: zero inside
    reads as zero; a nonzero first, last or middle byte is seen."""
    whole, pad, p = _guarded(601 + 64 + 64)
    scan = lib.cp_scan_is_zero
    for off in range(64):
        whole[pad + off:pad + off + 601] = 0
        for n in _short_lengths():
            whole[pad + off + n] = GUARD            # the byte after the range
            assert scan(variant, p + off, n, 1) == 1, (off, n)
            for pos in {0, n - 1, n // 2, (n * 7) // 11} if n else ():
                whole[pad + off + pos] = 1
                assert scan(variant, p + off, n, 1) == 0, (off, n, pos)
                whole[pad + off + pos] = 0
            whole[pad + off + n] = 0
        whole[:] = GUARD


def test_a_nonzero_byte_anywhere_in_short_lengths(variant):
    """Every position of every length up to 300 at three offsets (the head,
    the aligned blocks, the overlapping tail group)."""
    whole, pad, p = _guarded(300 + 64 + 64)
    scan = lib.cp_scan_is_zero
    for off in (0, 17, 63):
        for n in range(1, 301):
            base = pad + off
            whole[base:base + n] = 0
            for pos in range(n):
                whole[base + pos] = 0x80
                assert scan(variant, p + off, n, 1) == 0, (off, n, pos)
                whole[base + pos] = 0
            whole[:] = GUARD


def test_sampled_long_lengths_at_every_offset(variant):
    """Lengths from 601 bytes to 4 MiB at every offset 0..63: zero inside
    the guards, then one nonzero byte first, last and at a random place."""
    rng = random.Random(19)
    lengths = _long_lengths()
    whole, pad, p = _guarded(max(lengths) + 64)
    scan = lib.cp_scan_is_zero
    for n in lengths:
        for off in range(64) if n <= 8192 else rng.sample(range(64), 6):
            base = pad + off
            whole[base:base + n] = 0
            assert scan(variant, p + off, n, 1) == 1, (off, n)
            for pos in (0, n - 1, rng.randrange(n)):
                whole[base + pos] = 1
                assert scan(variant, p + off, n, 1) == 0, (off, n, pos)
                whole[base + pos] = 0
            whole[base:base + n] = GUARD


def test_every_byte_value_is_seen(variant):
    """A single set bit of any value, in the middle of the aligned blocks."""
    buf = bytearray(4096)
    c = ffi.from_buffer(buf)
    for bit in range(8):
        for pos in (1000, 1001, 2047, 4000):
            buf[pos] = 1 << bit
            assert lib.cp_scan_is_zero(variant, c, 4096, 1) == 0
            buf[pos] = 0


GUARD_PAGES = r"""
import ctypes, mmap, sys
from clearpages._native import ffi, lib
page = mmap.PAGESIZE
libc = ctypes.CDLL(None, use_errno=True)
libc.mprotect.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
m = mmap.mmap(-1, 4 * page)
base = ctypes.addressof(ctypes.c_char.from_buffer(m))
# pages 0 and 3 unmapped for reading: any read outside [1 page, 3 pages) faults
for p in (0, 3):
    assert libc.mprotect(base + p * page, page, 0) == 0, ctypes.get_errno()
start, end = base + page, base + 3 * page
v = VARIANT
lengths = list(range(0, 600)) + [page - 1, page, page + 1, 2 * page - 1, 2 * page]
for n in lengths:
    for off in range(64):
        if n + off > 2 * page:
            continue
        # ending exactly at the unmapped page, and starting right after one
        assert lib.cp_scan_is_zero(v, ffi.cast("char *", end - off - n), n, 1) == 1
        assert lib.cp_scan_is_zero(v, ffi.cast("char *", start + off), n, 1) == 1
out = ffi.new("int64_t[]", 8)
for ps in (1, 7, 64, 256, 768, page):
    assert lib.cp_scan_nonzero_pages(v, ffi.cast("char *", start), 2 * page, ps, out, 1) == 0
    for off in (1, 31, 255):
        # whole pages of the tight loop ending at the unmapped page, a partial one first
        assert lib.cp_scan_nonzero_pages(v, ffi.cast("char *", start + off), 2 * page - off,
                                         ps, out, 1) == 0
print("ok")
"""


def test_never_reads_outside_the_buffer(variant):
    """A buffer that ends where an unreadable page begins (or starts right
    after one): a read past either end would fault, so this runs in a child."""
    r = run_python(GUARD_PAGES.replace("VARIANT", str(variant)))
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr


@pytest.mark.parametrize("threads", [2, 3, 8])
def test_threads_find_a_nonzero_byte_anywhere(variant, threads):
    n = 24 * MiB + 4097
    a = np.zeros(n, dtype=np.uint8)
    c = ffi.cast("char *", a.ctypes.data)
    assert lib.cp_scan_is_zero(variant, c, n, threads) == 1
    for pos in (1, 4 * MiB - 1, 4 * MiB, 12 * MiB + 5, n - 2):
        a[pos] = 1
        assert lib.cp_scan_is_zero(variant, c, n, threads) == 0, pos
        a[pos] = 0


def test_nonzero_pages_matches_numpy(variant):
    rng = np.random.default_rng(19)
    for n, ps in ((0, 4096), (1, 4096), (4096 * 50 + 123, 4096), (10_000, 64),
                  (10_000, 7), (3 * 4096, 8192), (9 * MiB + 5, 4096)):
        a = np.zeros(n, dtype=np.uint8)
        if n:
            a[rng.integers(0, n, size=max(1, n // 5000))] = 1
            a[-1] = 2
        npages = -(-n // ps)
        padded = np.zeros(npages * ps, dtype=np.uint8)
        padded[:n] = a
        want = np.flatnonzero(padded.reshape(-1, ps).any(axis=1)) if n else []
        out = ffi.new("int64_t[]", max(npages, 1))
        for threads in (1, 3):
            k = lib.cp_scan_nonzero_pages(variant, ffi.cast("char *", a.ctypes.data), n, ps,
                                          out, threads)
            assert list(out[0:k]) == list(want), (n, ps, threads)


def test_whole_pages_of_the_tight_loop_at_every_offset(variant):
    """Page sizes that are multiples of 256 bytes take one tight loop over the
    whole pages (one test per page): every offset 0..63, a nonzero byte at
    every place of a page (sampled in larger pages), a partial last page,
    guard bytes around, and threads that split the pages."""
    rng = random.Random(19)
    for ps in (256, 512, 768, 4096, 8192):
        npages = 5
        places = range(ps) if ps <= 512 else sorted(set(rng.sample(range(ps), 64)) | {0, ps - 1})
        for tail in (0, 1, ps - 1):
            n = npages * ps + tail
            whole, pad, _ = _guarded(n + 64)
            base = whole.__array_interface__["data"][0] + pad
            total = npages + (tail != 0)
            out = ffi.new("int64_t[]", total)
            for off in range(64):
                whole[:] = GUARD
                buf = whole[pad + off:pad + off + n]
                buf[:] = 0
                c = ffi.cast("char *", base + off)
                assert lib.cp_scan_nonzero_pages(variant, c, n, ps, out, 1) == 0, (ps, n, off)
                for at in (places if off in (0, 1, 33) else (0, ps - 1, ps // 2)):
                    for page in (0, 3):
                        buf[page * ps + at] = 1
                        k = lib.cp_scan_nonzero_pages(variant, c, n, ps, out, 1)
                        assert list(out[0:k]) == [page], (ps, n, off, at, page)
                        buf[page * ps + at] = 0
                if tail:
                    buf[n - 1] = 1
                    k = lib.cp_scan_nonzero_pages(variant, c, n, ps, out, 1)
                    assert list(out[0:k]) == [npages], (ps, n, off)
                    buf[n - 1] = 0
                assert whole[pad + off - 1] == whole[pad + off + n] == GUARD


@pytest.mark.parametrize("threads", [2, 3, 8])
def test_nonzero_pages_with_threads_gives_the_same_indices(variant, threads):
    """Split between threads (shares of at least 4 MiB), on page sizes the
    tight loop takes and ones it does not, at an offset, with guard bytes."""
    rng = np.random.default_rng(threads)
    for ps, n in ((4096, 40 * MiB + 123), (256, 12 * MiB + 7), (65536, 33 * MiB), (1000, 9 * MiB)):
        whole, pad, _ = _guarded(n + 64)
        buf = whole[pad + 5:pad + 5 + n]
        buf[:] = 0
        buf[rng.integers(0, n, size=200)] = 1
        buf[[0, n - 1]] = 3
        npages = -(-n // ps)
        padded = np.zeros(npages * ps, dtype=np.uint8)
        padded[:n] = buf
        want = list(np.flatnonzero(padded.reshape(-1, ps).any(axis=1)))
        out = ffi.new("int64_t[]", npages)
        c = ffi.cast("char *", buf.ctypes.data)
        for t in (1, threads):
            k = lib.cp_scan_nonzero_pages(variant, c, n, ps, out, t)
            assert list(out[0:k]) == want, (ps, n, t)
        assert list(cp.nonzero_pages(buf, ps, threads=threads)) == want
        assert list(cp.nonzero_pages(buf, ps, threads="auto")) == want


# ---- the public calls --------------------------------------------------------


def test_the_best_variant_the_cpu_has_is_chosen_and_masking_steers_it(config):
    vectors = bool(lib.cp_scan_built(_scan.VARIANTS.index("avx2")))
    for disable in ("", "avx2", "avx2,sse2"):
        config({"CLEARPAGES_DISABLE": disable} if disable else {})
        feats = cp.cpu().features
        best = ("words" if not vectors else "avx2" if "avx2" in feats
                else "sse2" if "sse2" in feats else "words")
        assert _dispatch.state().scan == best, disable
        assert _scan.usable(cp.cpu())[-1] == best
    assert _dispatch.state().scan == "words"
    buf = bytearray(100_000)
    assert cp.is_zero(buf)
    buf[50_000] = 1
    assert not cp.is_zero(buf)
    assert list(cp.nonzero_pages(buf)) == [12]


def _kinds():
    """(name, make(data: bytes) -> buffer) for every kind of buffer."""
    def region(data):
        r = cp.Region(max(len(data), 4096))
        memoryview(r)[:len(data)] = data
        return memoryview(r)[:len(data)]

    def ro_mmap(data):
        m = mmap.mmap(-1, max(len(data), 1))
        m[:len(data)] = data
        return memoryview(m)[:len(data)].toreadonly()

    def ro_numpy(data):
        a = np.frombuffer(bytearray(data), dtype=np.uint8).copy()
        a.flags.writeable = False
        return a

    return [
        ("bytes", bytes),
        ("bytearray", bytearray),
        ("memoryview", lambda d: memoryview(bytearray(d))),
        ("readonly memoryview", lambda d: memoryview(bytes(d)).toreadonly()),
        ("mmap", lambda d: _mmap_of(d)),
        ("readonly mmap", ro_mmap),
        ("array.array", lambda d: array.array("B", d)),
        ("ctypes", lambda d: (ctypes.c_ubyte * len(d)).from_buffer_copy(d)),
        ("numpy", lambda d: np.frombuffer(bytearray(d), dtype=np.uint8)),
        ("readonly numpy", ro_numpy),
        ("numpy float64", lambda d: np.frombuffer(bytearray(d), dtype=np.float64)),
        ("region view", region),
    ]


def _mmap_of(data):
    m = mmap.mmap(-1, max(len(data), 1))
    m[:len(data)] = data
    return m if len(data) == len(m) else memoryview(m)[:len(data)]


@pytest.mark.parametrize("kind,make", _kinds(), ids=[k for k, _ in _kinds()])
def test_every_buffer_kind(kind, make):
    for n in (8, 4096, 3 * 4096 + 8, 2 * MiB):
        zero = make(bytes(n))
        assert cp.is_zero(zero) is True, (kind, n)
        assert len(cp.nonzero_pages(zero)) == 0
        data = bytearray(n)
        data[n - 8] = 1
        buf = make(bytes(data))
        assert cp.is_zero(buf) is False, (kind, n)
        assert list(cp.nonzero_pages(buf)) == [(n - 8) // 4096]
        assert bytes(memoryview(buf).cast("B")) == bytes(data)        # unchanged


def test_a_region_itself_and_threads():
    with cp.Region(8 * MiB) as r:
        assert cp.is_zero(r) and cp.is_zero(r, threads=2) and cp.is_zero(r, threads="auto")
        memoryview(r)[5 * MiB] = 3
        assert not cp.is_zero(r, threads=4)
        assert list(cp.nonzero_pages(r, threads=2)) == [5 * MiB // 4096]


def test_strided_views_are_read_correctly():
    rng = np.random.default_rng(5)
    a = np.zeros((64, 48, 5), dtype=np.int16)
    views = [a[::2], a[:, ::3], a[..., ::-1], a.T, a[::-3, 5:, 1:4], a.transpose(1, 0, 2)[::2],
             a[:, :, 2], a[10:10]]
    for v in views:
        assert cp.is_zero(v)
    for _ in range(200):
        a[:] = 0
        idx = tuple(int(rng.integers(0, s)) for s in a.shape)
        a[idx] = 1
        for v in views:
            assert cp.is_zero(v) == (not v.any()), (idx, v.strides)
    mv = memoryview(bytes(range(256)) * 4)[1::2]        # a strided memoryview
    assert not cp.is_zero(mv)
    assert cp.is_zero(memoryview(bytes(1000))[::7])


@pytest.mark.parametrize("item", [1, 2, 3, 4, 5, 7, 8, 9, 15, 16, 17, 24, 31, 63, 64, 65, 72])
def test_the_rows_of_a_strided_view_are_read_to_the_byte(item):
    """Rows of short extents are read inline, 8 bytes at a time (the last 8
    overlapping), longer ones by the scanner: a nonzero byte anywhere in the
    view is found, one just outside it (the rest of each row) is not."""
    rows = 5
    a = np.zeros((rows, item + 3), np.uint8)
    a[:, item:] = 0xFF
    v = a[:, :item]
    t = OnlyDLPack(v)               # a tensor's layout, read the same way
    assert cp.is_zero(v) and cp.is_zero(t)
    for r in range(rows):
        for k in range(item):
            a[r, k] = 1
            assert not cp.is_zero(v), (r, k)
            assert not cp.is_zero(t), (r, k)
            a[r, k] = 0
    assert cp.is_zero(v) and cp.is_zero(t)


def test_a_long_row_is_read_to_its_end():
    """A row longer than the inline scan's step (every other float32 of
    20000, one row of 10000 extents): a nonzero element at its end, or in
    a second plane, is found."""
    a = np.zeros(20000, np.float32)
    a[1::2] = 7
    assert cp.is_zero(a[::2])
    a[-2] = 1
    assert not cp.is_zero(a[::2])
    b = np.zeros((3, 9000, 2), np.uint16)
    b[..., 1] = 5
    assert cp.is_zero(b[..., 0])
    b[2, 8999, 0] = 1
    assert not cp.is_zero(b[..., 0])


def test_views_whose_elements_share_bytes_are_read_once():
    """A stride of 0 (broadcast_to) and windows that overlap (as_strided)
    name bytes many times: the scan reads the union of them, so a view of
    2**40 elements over 8 bytes answers at once, and a nonzero byte under
    any element is seen."""
    from numpy.lib.stride_tricks import as_strided

    base = np.zeros(8, dtype=np.uint8)
    huge = as_strided(base, shape=(1 << 20, 1 << 20, 8), strides=(0, 0, 1))
    assert cp.is_zero(huge)
    base[7] = 1
    assert not cp.is_zero(huge)
    a = np.zeros(4096, dtype=np.uint8)
    windows = as_strided(a, shape=(4096 - 63, 64), strides=(1, 1))    # every 64-byte window
    assert cp.is_zero(windows)
    for i in (0, 63, 2000, 4095):
        a[:] = 0
        a[i] = 5
        assert not cp.is_zero(windows), i
    sparse = as_strided(a, shape=(64, 3), strides=(64, 1))     # 3 bytes of each 64
    a[:] = 0
    a[5] = 1                                                    # between the elements
    assert cp.is_zero(sparse)
    a[64 * 9 + 2] = 1
    assert not cp.is_zero(sparse)


def test_random_layouts_are_read_as_their_elements():
    """Shapes and strides drawn at random over one base (overlapping,
    repeated, disjoint, negative, with more extents than the native walk
    hands on at once): is_zero is numpy's any() of the view, for a nonzero
    byte anywhere in the base; a tensor of the same layout through DLPack
    (its extents listed, not walked) reads as the view does."""
    from numpy.lib.stride_tricks import as_strided

    rng = np.random.default_rng(11)
    base = np.zeros(20000, dtype=np.uint8)
    for _ in range(300):
        ndim = int(rng.integers(1, 4))
        item = int(rng.choice([1, 2, 8]))
        shape = [int(rng.integers(1, 24)) for _ in range(ndim)]
        strides = [int(rng.choice([0, 1, item, 3 * item, 40, 256, -item, -40])) for _ in shape]
        lo = sum((n - 1) * s for n, s in zip(shape, strides) if s < 0)
        hi = sum((n - 1) * s for n, s in zip(shape, strides) if s > 0) + item
        start = -lo
        if start + hi > base.size:
            continue
        v = as_strided(base[start:].view(np.uint8), shape=shape + [item],
                       strides=strides + [1], writeable=False)
        t = OnlyDLPack(as_strided(base[start:], shape=shape + [item], strides=strides + [1]))
        base[:] = 0
        assert cp.is_zero(v) and cp.is_zero(t), (shape, strides, item)
        i = int(rng.integers(0, base.size))
        base[i] = 9
        assert cp.is_zero(v) == cp.is_zero(t) == (not v.any()), (shape, strides, item, i)
        # The last byte of extents around every 64th (where a batch of the
        # walk may end) and of the last one: each is seen.
        covered = np.zeros(base.size, dtype=np.int8)
        as_strided(covered[start:], shape=shape + [item], strides=strides + [1])[...] = 1
        ends = np.flatnonzero(np.diff(covered) == -1)
        ends = np.concatenate([ends, [base.size - 1]] if covered[-1] else [ends])
        for e in np.unique(np.r_[[j for j in range(len(ends)) if j % 64 in (0, 1, 62, 63)],
                                 len(ends) - 1]).astype(int):
            base[:] = 0
            base[ends[e]] = 1
            assert not cp.is_zero(v) and not cp.is_zero(t), (shape, strides, item, e)


def test_is_zero_is_a_bytes_test():
    """Every byte, not every value: -0.0 is a nonzero byte."""
    assert not cp.is_zero(np.array([0.0, -0.0]))
    assert cp.is_zero(np.zeros(3))


def test_nonzero_pages_feeds_clear_pages_and_numpy():
    a = np.zeros(300 * 4096 + 100, dtype=np.uint8)
    a[[5, 4096 * 7, 4096 * 7 + 9, 4096 * 299, a.size - 1]] = 1
    pages = cp.nonzero_pages(a)
    assert isinstance(pages, array.array) and pages.typecode == "q"
    assert list(pages) == [0, 7, 299, 300]
    view = np.frombuffer(pages, dtype=np.int64)
    assert np.shares_memory(view, np.asarray(pages))
    assert view.tolist() == [0, 7, 299, 300]
    cp.clear_pages(a, pages)
    assert cp.is_zero(a) and not a.any()
    b = np.zeros(1000, dtype=np.int32)
    b[999] = 7
    assert list(cp.nonzero_pages(b, 400)) == [9]
    assert list(cp.nonzero_pages(b, page_size=4000)) == [0]
    assert list(cp.nonzero_pages(b, "2k")) == list(cp.nonzero_pages(b, page_size=2048)) == [1]
    assert list(cp.nonzero_pages(b, None)) == [0]
    with pytest.raises(TypeError, match="multiple values"):
        cp.nonzero_pages(b, 4096, page_size=4096)


@pytest.mark.parametrize("make", [
    lambda: np.asfortranarray(np.ones((2, 4096), np.uint8)),
    lambda: np.full((3, 5000), 0x0101, np.uint16).T,           # a C array, transposed
    lambda: memoryview(np.asfortranarray(np.ones((4, 3000), np.uint8))),
], ids=["fortran", "transposed", "fortran-memoryview"])
def test_clear_pages_takes_one_extent_in_fortran_order_as_nonzero_pages_does(make):
    """Page i is bytes [i*page_size, (i+1)*page_size) of the memory, in the
    order nonzero_pages numbers them, whatever the array's index order."""
    a = make()
    raw = np.asarray(a).ravel(order="K").view(np.uint8)     # its bytes in memory order
    assert np.shares_memory(raw, np.asarray(a))
    pages = list(cp.nonzero_pages(a))
    assert pages == list(range(-(-raw.size // 4096)))
    cp.clear_pages(a, [1])
    assert not raw[4096:8192].any() and raw[:4096].all() and raw[8192:].all()
    assert list(cp.nonzero_pages(a)) == [p for p in pages if p != 1]
    cp.clear_pages(a, cp.nonzero_pages(a))
    assert cp.is_zero(a)


def test_clear_pages_refuses_what_nonzero_pages_refuses_saying_why():
    a = np.ones((8, 4096), np.uint8)[:, ::2]
    with pytest.raises(ValueError, match=r"C- or Fortran-contiguous buffer.*strided"):
        cp.nonzero_pages(a)
    with pytest.raises(ValueError, match=r"C- or Fortran-contiguous buffer.*strided"):
        cp.clear_pages(a, [0])
    with pytest.raises(ValueError, match=r"C- or Fortran-contiguous buffer.*strided"):
        cp.clear_pages(memoryview(bytearray(8192))[::2], [0])
    assert a.all()


def test_nonzero_pages_of_a_region_count_its_pages_as_clear_pages_does():
    with cp.Region(4 << 20, page_size="2m") as r:
        memoryview(r)[(2 << 20) + 5] = 1
        pages = cp.nonzero_pages(r)                 # the Region's page size, as clear_pages
        assert list(pages) == [1]
        assert list(cp.nonzero_pages(r, 4096)) == [512]
        cp.clear_pages(r, pages)
        assert cp.is_zero(r)


@pytest.mark.parametrize("bad", [0, -4096, 3, 4097, "4x", 2 ** 70])
def test_a_bad_page_size_is_a_value_error_naming_it(bad):
    with pytest.raises(ValueError, match="page_size"):
        cp.nonzero_pages(np.zeros(1000, dtype=np.int16), bad)


@pytest.mark.parametrize("bad", [4096.0, True, b"4096"])
def test_a_page_size_of_another_type_is_a_type_error_naming_it(bad):
    with pytest.raises(TypeError, match="page_size must be a byte count"):
        cp.nonzero_pages(np.zeros(1000, dtype=np.int16), bad)


def test_refusals():
    for obj in (3, "abc", None, [0, 0], object()):
        with pytest.raises(TypeError, match="reads buffers"):
            cp.is_zero(obj)
        with pytest.raises(TypeError, match="reads buffers"):
            cp.nonzero_pages(obj)
    for bad in (0, -1, 10 ** 6):
        with pytest.raises(ValueError, match="threads"):
            cp.is_zero(bytes(10), threads=bad)
        with pytest.raises(ValueError, match="threads"):
            cp.nonzero_pages(bytes(10), threads=bad)
    for bad in (True, 1.5, "many", None):
        with pytest.raises(TypeError, match="threads"):
            cp.is_zero(bytes(10), threads=bad)
        with pytest.raises(TypeError, match="threads"):
            cp.nonzero_pages(bytes(10), threads=bad)
    with pytest.raises(ValueError, match="contiguous"):
        cp.nonzero_pages(np.zeros((10, 10))[:, ::2])
    with pytest.raises(TypeError):
        cp.is_zero(bytes(10), method="auto")


def test_nothing_is_written():
    """A private read-only mapping of a file: a write would fault; the file
    is unchanged."""
    import tempfile
    with tempfile.TemporaryFile() as f:
        f.write(bytes(3 * 4096) + b"\x01")
        f.flush()
        with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as m:
            assert not cp.is_zero(m)
            assert cp.is_zero(memoryview(m)[:3 * 4096])
            assert list(cp.nonzero_pages(m)) == [3]
            assert cp.is_zero(memoryview(m)[:3 * 4096], threads=2)
        f.seek(0)
        assert f.read() == bytes(3 * 4096) + b"\x01"


def test_is_zero_reads_tensors_through_dlpack():
    a = np.zeros((300, 40), dtype=np.float32)
    assert cp.is_zero(OnlyDLPack(a))
    a[299, 39] = 1
    assert not cp.is_zero(OnlyDLPack(a))
    assert cp.is_zero(OnlyDLPack(a[:299]))               # a view: its own bytes only
    assert not cp.is_zero(OnlyDLPack(a[:, ::3][::-1]))   # strided extents
    assert cp.is_zero(OnlyDLPack(a[:, :39]))
    ro = np.zeros(5000, dtype=np.int64)
    ro.flags.writeable = False
    if numpy_dlpack().read_only:
        assert cp.is_zero(OnlyDLPack(ro), threads=2)    # read-only: read all the same
    else:
        # numpy before 2.1 refuses to export it: the refusal is passed on.
        with pytest.raises(TypeError, match=r"DLPack export failed: .+"):
            cp.is_zero(OnlyDLPack(ro))
        assert cp.is_zero(OnlyDLPack(ro.copy()), threads=2)
    assert cp.is_zero(OnlyDLPack(np.zeros(0)))
    with pytest.raises(TypeError, match="__dlpack__"):
        cp.is_zero(object())


def test_a_tensor_that_cannot_be_read_is_refused_as_a_read():
    """is_zero and nonzero_pages write nothing: their refusals say read, not
    clear, and nothing of leaving the tensor unchanged."""

    class Refuses:
        def __dlpack__(self, **kw):
            raise BufferError("not now")

    buf = (ctypes.c_uint8 * 64)(1)
    gpu = Producer(buf, (64,), device=2)
    for scan in (cp.is_zero, cp.nonzero_pages):
        with pytest.raises(TypeError, match=r"^the Refuses cannot be read: its DLPack export "
                           r"failed: not now$"):
            scan(Refuses())
        with pytest.raises(TypeError, match=r"^the Producer is on CUDA \(device 0\), not in "
                           r"memory this CPU can read; look at it on its device or at a CPU "
                           r"copy$"):
            scan(gpu)
    assert gpu.deleted == 2
    with pytest.raises(TypeError, match=r"^the Refuses cannot be cleared in place: its DLPack "
                       r"export failed: not now; it was left unchanged$"):
        cp.clear(Refuses())
    assert buf[0] == 1
