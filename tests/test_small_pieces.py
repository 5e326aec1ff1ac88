"""Small pieces: a strided view of small elements (a column of a matrix,
every other byte), the rows of a 2-D slice, a DLPack tensor so laid out,
many short buffers.  Pieces shorter than PIECE_DIRECT on average (PIECE_FINE
whatever else) are cleared one by one as they come, on the calling thread
(csrc/pyext/run.c), without a list of them where a layout is walked: exact,
at no memory per element, stopping between slices as a job does, and
running what plan() names."""

from __future__ import annotations

import ctypes
import tracemalloc

import numpy as np
import pytest
from capsules import Producer

import clearpages as cp
from clearpages import _dispatch, _fast, _policy
from clearpages._native import lib

FINE = _policy.PIECE_FINE
DIRECT = _policy.PIECE_DIRECT


def test_the_bound_is_the_policys():
    assert FINE == lib.CP_POLICY_PIECE_FINE > 0
    p = cp.plan(64 * FINE, count=1024, threads="auto")
    assert (p.method, p.threads) == ("libc", 1)
    assert "one by one" in p.reason
    # At the bound, a job again: its routine and threads by the other rules.
    assert "one by one" not in cp.plan(1024 * FINE, count=1024).reason


# Element sizes on both sides of the bound, the inline store sizes among them.
ITEMS = (1, 2, 3, 4, 8, 16, 24, 32, 64, 100, FINE - 1, FINE, 2 * FINE + 8)


def _column(item, rows=301, gap=5, order="C"):
    """A matrix of 0xAB bytes and a view of its first `item` bytes per row
    (rows `item + gap` bytes apart)."""
    a = np.full((rows, item + gap), 0xAB, np.uint8, order=order)
    return a, a[:, :item]


@pytest.mark.parametrize("method", ["auto"] + sorted(cp.methods()))
@pytest.mark.parametrize("item", ITEMS)
def test_a_column_is_cleared_exactly(item, method):
    """Every byte of the view is zero, every other byte as it was."""
    a, v = _column(item)
    cp.clear(v, method=method)
    assert not v.any()
    assert (a[:, item:] == 0xAB).all()


@pytest.mark.parametrize("item", (1, 4, 8, 48))
def test_strided_layouts_of_small_elements(item):
    """Reversed, every third row, three dimensions, overlapping windows
    (the layout walked extent by extent): the bytes covered are zero, as
    numpy's own write of zeros through the same view leaves them, and
    nothing else changed."""
    step = item + 3 if item > 3 else 5
    makes = [lambda b: b[::-1, ::2, :item],
             lambda b: b[::3, 1, item:2 * item],
             lambda b: b[5:50:4, :, ::-1][..., :item],
             lambda b: np.lib.stride_tricks.as_strided(b.reshape(-1)[7:], shape=(200, item),
                                                       strides=(step, 1)),
             lambda b: np.lib.stride_tricks.as_strided(b.reshape(-1)[3:], shape=(200, item),
                                                       strides=(max(item // 2, 1), 1))]
    for make in makes:
        base = np.full((60, 7, 3 * item), 0x5A, np.uint8)
        want = base.copy()
        make(want)[...] = 0
        cp.clear(make(base))
        assert (base == want).all()


def test_no_memory_per_element():
    """A column of a million 1-byte elements is cleared with no list of its
    extents (16 MiB of addresses and lengths before)."""
    a, v = _column(1, rows=1 << 20, gap=1)
    tracemalloc.start()
    try:
        cp.clear(v)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert not v.any() and (a[:, 1] == 0xAB).all()
    assert peak < 64 * 1024, peak


def _hook_raising_at_slice(log):
    def hook(where, routine, nbytes):
        log.append((where, routine, nbytes))
        if where == "slice":
            raise KeyboardInterrupt
    return hook


def test_a_signal_between_slices_stops_it():
    """The first slice's turn comes before any store: an exception there
    (as a signal handler raises) stops the clear with the view unchanged,
    and the hook names the routine plan() names."""
    a, v = _column(8, rows=4096)
    log = []
    _fast._set_debug_hook(_hook_raising_at_slice(log))
    try:
        with pytest.raises(KeyboardInterrupt):
            cp.clear(v)
        with pytest.raises(KeyboardInterrupt):
            cp.clear_many([bytearray(b"\1" * 8) for _ in range(3)])
    finally:
        _fast._set_debug_hook(None)
    assert (a == 0xAB).all()
    want = cp.plan(v.size, count=4096).method
    assert [r for w, r, _ in log if w == "slice"][:1] == [want]


def _slices_of_a_clear(monkeypatch, v):
    """The slices cp.clear(v) comes back to Python for, with no time to a
    slice (the config fixture restores the real one)."""
    monkeypatch.setattr(_dispatch, "SLICE_NS", 0)
    _dispatch.state().configure_native()
    log = []
    _fast._set_debug_hook(lambda where, routine, n: log.append(where))
    try:
        cp.clear(v)
    finally:
        _fast._set_debug_hook(None)
    return log.count("slice")


def test_it_comes_back_between_slices(config, monkeypatch):
    """With no time to a slice, the clear comes back to Python (the hook,
    signal handlers) every FINE_CHECK pieces; an exception there stops it
    with the pieces before cleared and the rest as they were."""
    rows = 1 << 20
    a, v = _column(1, rows=rows, gap=1)
    assert _slices_of_a_clear(monkeypatch, v) >= rows // 16384
    assert not v.any() and (a[:, 1] == 0xAB).all()

    a, v = _column(1, rows=rows, gap=1)
    seen = []

    def stop_at_the_third(where, routine, n):
        seen.append(where)
        if seen.count("slice") == 3:
            raise KeyboardInterrupt
    _fast._set_debug_hook(stop_at_the_third)
    try:
        with pytest.raises(KeyboardInterrupt):
            cp.clear(v)
    finally:
        _fast._set_debug_hook(None)
    done = int(np.argmax(v[:, 0] != 0))
    assert 0 < done < rows
    assert not v[:done].any() and (v[done:] == 0xAB).all() and (a[:, 1] == 0xAB).all()


def test_rows_up_to_the_direct_bound_go_one_by_one():
    """Pieces from PIECE_FINE up to PIECE_DIRECT on average: one by one on
    one thread, by the routine the policy chose (the rows of a 2-D slice;
    as a job they cost 1.4-2.7x numpy's fill at 512 B-4 KiB a row); from
    the bound, with threads asked for, or where the pages are looked at for
    untouched ones (a total of UNTOUCHED_MIN or more, with pieces above
    PIECE_FINE), a job."""
    assert FINE < DIRECT == lib.CP_POLICY_PIECE_DIRECT
    for piece in (FINE, 4096, DIRECT - 1):
        p = cp.plan(64 * piece, count=64)
        assert p.one_by_one and p.threads == 1, piece
        assert "called for each piece as it comes" in p.reason
    assert not cp.plan(64 * DIRECT, count=64).one_by_one
    assert not cp.plan(64 * 4096, count=64, threads=2).one_by_one
    big = cp.plan(_policy.UNTOUCHED_MIN, count=_policy.UNTOUCHED_MIN // 4096)
    assert big.one_by_one == (not big.skips_untouched)
    # Small pieces go one by one whatever the look.
    assert cp.plan(_policy.UNTOUCHED_MIN, count=_policy.UNTOUCHED_MIN // 64).one_by_one


@pytest.mark.parametrize("method", ["auto"] + sorted(cp.methods()))
@pytest.mark.parametrize("item", (FINE, FINE + 8, 2048, 4096 + 64, DIRECT - 64, DIRECT))
def test_the_rows_of_a_slice_are_cleared_exactly(item, method):
    """a[:, :k] for rows on both sides of PIECE_DIRECT, every routine (a
    streaming one fenced once at the end): the view zero, the rest of each
    row as it was."""
    a, v = _column(item, rows=37, gap=64)
    cp.clear(v, method=method)
    assert not v.any()
    assert (a[:, item:] == 0xAB).all()


def test_long_rows_come_back_every_few_megabytes(config, monkeypatch):
    """Rows of 8 KiB, one by one: with no time to a slice, the clear comes
    back to Python every FINE_CHECK pieces, a long piece counting as one a
    256 bytes (every 4 MiB), so that 12 MiB of them look at the signals
    three times and more, not once."""
    a, v = _column(8192, rows=1536, gap=64)
    assert cp.plan(v.size, count=1536).one_by_one
    assert _slices_of_a_clear(monkeypatch, v) >= 3
    assert not v.any() and (a[:, 8192:] == 0xAB).all()


def _refusal(call):
    with pytest.raises((TypeError, ValueError)) as e:
        call()
    return type(e.value), str(e.value)


@pytest.mark.parametrize("make", [
    lambda a: a[:, 3], lambda a: memoryview(a.reshape(-1))[3::8]],
    ids=["ndarray", "memoryview"])
def test_a_run_of_strided_views_asks_for_strides_first(make):
    """After strided views of a type, its next object is asked for its
    strides at once (the contiguous request a strided view refuses costs
    more than a small column's clear): each kind of buffer still gets what
    it got before the run, whether cleared or refused, and in the same
    words."""
    def fresh():
        base = np.full((16, 8), 7.0)
        return base, make(base)

    ro_base = np.full((16, 8), 7.0)
    ro = make(ro_base)
    if isinstance(ro, np.ndarray):
        ro.flags.writeable = False
    else:
        ro = ro.toreadonly()
    objects = np.full((16, 8), None, dtype=object)
    refused = [lambda: cp.clear(ro), lambda: cp.clear(objects[:, 3])]
    cp.clear(np.ones(4))                        # contiguous: no run
    cp.clear(memoryview(bytearray(8)).cast("d"))
    cold = [_refusal(r) for r in refused]
    for _ in range(3):                           # a run of strided ones
        base, v = fresh()
        cp.clear(v)
        assert not base[:, 3].any() and (base[:, :3] == 7).all() and (base[:, 4:] == 7).all()
    assert [_refusal(r) for r in refused] == cold
    assert (ro_base == 7).all() and (objects == None).all()  # noqa: E711
    for whole in (np.full((16, 8), 7.0), np.full((16, 8), 7.0, order="F")):
        cp.clear(whole if isinstance(make(whole), np.ndarray) else memoryview(whole))
        assert not whole.any()
    base, v = fresh()
    cp.clear(v)                                  # and strided again
    assert not base[:, 3].any() and (base[:, 4:] == 7).all()


def test_many_short_buffers_and_a_long_one():
    """clear_many of short pieces clears them one by one; with a long one
    among them, a job (which slices the long one) clears them all."""
    short = [bytearray(b"\1" * (k % 40 + 1)) for k in range(500)]
    cp.clear_many(short)
    assert all(not any(b) for b in short)
    mixed = short[:100] + [bytearray(b"\1" * (8 * DIRECT))]
    for b in mixed:
        b[:] = b"\1" * len(b)
    cp.clear_many(mixed)
    assert all(not any(b) for b in mixed)
    a, v = _column(3, rows=1000)
    cp.clear_many([v, bytearray(b"\1" * 9)])
    assert not v.any() and (a[:, 3:] == 0xAB).all()


def _tensor_column(item, rows):
    buf = (ctypes.c_uint8 * (rows * (item + 5)))()
    ctypes.memset(buf, 0xAB, len(buf))
    return buf, Producer(buf, (rows, item), (item + 5, 1))


@pytest.mark.parametrize("item", (1, 8, 100, 2 * FINE))
def test_a_dlpack_tensor_of_small_elements(item):
    """A tensor's layout is walked as a buffer's is; clear_many and is_zero
    take the list of its extents."""
    buf, t = _tensor_column(item, 257)
    assert not cp.is_zero(t)
    cp.clear(t)
    raw = np.frombuffer(buf, np.uint8).reshape(257, item + 5)
    assert not raw[:, :item].any() and (raw[:, item:] == 0xAB).all()
    assert cp.is_zero(t)
    raw[:, :item] = 1
    cp.clear_many([t, bytearray(4)])
    assert not raw[:, :item].any() and (raw[:, item:] == 0xAB).all()
    assert t.deleted == t.exports


def test_threads_asked_for_get_a_job():
    """threads=2 named for small pieces: the job, on two threads, as plan()
    says (the one-by-one clear runs on the calling thread only)."""
    assert cp.plan(4096, count=1024, threads=2).threads == 2
    a, v = _column(2, rows=1 << 16)
    cp.clear(v, threads=2)
    assert not v.any() and (a[:, 2:] == 0xAB).all()


def test_a_torch_column():
    """torch's strided view of one-byte elements: cleared in place, exactly,
    its version counter bumped."""
    torch = pytest.importorskip("torch", reason="torch is not installed (an optional extra)")
    a = torch.full((5000, 3), 7, dtype=torch.uint8)
    v = a[:, 1]
    version = v._version
    cp.clear(v)
    assert not v.any() and (a[:, 0] == 7).all() and (a[:, 2] == 7).all()
    assert v._version > version
