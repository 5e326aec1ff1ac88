"""Every routine: every small length at every alignment, large misaligned
buffers, random lengths and offsets (hypothesis), and the refusals for
routines this machine cannot run (never SIGILL)."""

from __future__ import annotations

import json
import os

import pytest
from conftest import FILL, check_guarded, guarded, run_python

import clearpages as cp
from clearpages import _dispatch

np = pytest.importorskip("numpy")
hypothesis = pytest.importorskip("hypothesis")
from hypothesis import given, settings, strategies as st  # noqa: E402

MiB = 1 << 20

#: Free bytes between two cleared slots of the length/alignment matrix: a
#: routine that strays up to this far outside its range is caught.
GAP = 192


def _matrix_layout():
    """Starts (as offsets from a 64-byte boundary) and lengths for every
    length 0..600 at every alignment 0..63, slots apart by at least GAP."""
    starts, lens = [], []
    pos = GAP
    for n in range(601):
        slot = -(-(64 + n + GAP) // 64) * 64
        for align in range(64):
            starts.append(pos + align)
            lens.append(n)
            pos += slot
    return np.array(starts, dtype=np.int64), np.array(lens, dtype=np.int64), pos + GAP


STARTS, LENS, MATRIX_SIZE = _matrix_layout()


def _expected(base_pad: int):
    d = np.zeros(MATRIX_SIZE + 65, dtype=np.int32)
    np.add.at(d, STARTS + base_pad, 1)
    np.add.at(d, STARTS + base_pad + LENS, -1)
    inside = np.cumsum(d)[:MATRIX_SIZE + 64] > 0
    return np.where(inside, 0, FILL).astype(np.uint8)


def test_every_length_at_every_alignment(any_method):
    """Lengths 0..600 at all 64 alignments, guard bytes on both sides: the
    slots share one buffer and are checked in one comparison."""
    whole = np.full(MATRIX_SIZE + 64, FILL, dtype=np.uint8)
    base = whole.__array_interface__["data"][0]
    pad = -base % 64            # slot offsets are relative to a 64-byte boundary
    mv = memoryview(whole)
    clear = cp.clear
    for s, n in zip((STARTS + pad).tolist(), LENS.tolist()):
        clear(mv[s:s + n], method=any_method)
    got = whole
    want = _expected(pad)
    if not np.array_equal(got, want):
        bad = int(np.flatnonzero(got != want)[0])
        slot = max(0, int(np.searchsorted(STARTS + pad, bad, side="right")) - 1)
        pytest.fail("%s: byte %d wrong (0x%02x, want 0x%02x) near the slot of length %d "
                    "at alignment %d" % (any_method, bad, got[bad], want[bad],
                                         LENS[slot], (STARTS[slot]) % 64))


@pytest.mark.parametrize("n, offset", [(200 * MiB + 4099, 61), (24 * MiB + 37, 1)])
def test_large_misaligned(any_method, n, offset):
    """Hundreds of MiB at an odd address (chunked job) and tens of MiB (one
    direct call), nothing written outside."""
    whole, view, start = guarded(np, n, offset)
    cp.clear(view, method=any_method)
    check_guarded(np, whole, start, n)


@settings(max_examples=150, deadline=None)
@given(method=st.sampled_from(("auto",) + cp.methods()),
       n=st.one_of(st.integers(0, 256), st.integers(0, 70_000)),
       offset=st.integers(0, 4160),
       threads=st.sampled_from((1, 1, 1, 2, 3, "auto")))
def test_property_inside_zero_outside_untouched(method, n, offset, threads):
    whole, view, start = guarded(np, n, offset)
    cp.clear(memoryview(view), method=method, threads=threads)
    check_guarded(np, whole, start, n)


def test_methods_are_a_subset_in_table_order():
    got = cp.methods()
    assert isinstance(got, tuple) and "libc" in got
    assert set(got) <= set(cp.ALL_METHODS)
    assert list(got) == [m for m in cp.ALL_METHODS if m in got]
    assert cp.ALL_METHODS == tuple(r.name for r in cp.ROUTINES)
    assert set(cp.ALL_METHODS) == {"rep_stosb", "rep_stosq", "mov_loop", "movnti",
                                   "avx2_nt", "avx512_nt", "clzero", "libc"}


def test_methods_follow_features():
    feats = cp.cpu().features
    for r in cp.ROUTINES:
        if r.name in _dispatch.state().built:
            assert (r.name in cp.methods()) == (r.requires <= feats), r.name


def test_unknown_method_is_a_value_error_listing_names():
    buf = bytearray(b"x" * 100)
    for bad in ("fast", "REP_STOSB", "", "discard"):
        with pytest.raises(ValueError) as e:
            cp.clear(buf, method=bad)
        if bad != "discard":
            for name in cp.ALL_METHODS:
                assert name in str(e.value)
        with pytest.raises(ValueError):
            cp.clear_many([buf], method=bad)
        with pytest.raises(ValueError):
            cp.clear_pages(buf, [0], method=bad)
    assert buf == bytearray(b"x" * 100)


# The refusal is checked in a fresh interpreter: if it ever failed, the
# routine would run and could kill the process with SIGILL.
_UNAVAILABLE = r"""
import json, clearpages as cp
out = {}
buf = bytearray(b"x" * 8192)
for name in cp.ALL_METHODS:
    if name in cp.methods():
        continue
    res = []
    for call in (lambda: cp.clear(buf, method=name),
                 lambda: cp.clear(buf, method=name, threads=2),
                 lambda: cp.clear(buf, method=name, hot=(0, 100)),
                 lambda: cp.clear_many([buf, bytearray(10)], method=name),
                 lambda: cp.clear_pages(buf, [1], method=name)):
        try:
            call()
            res.append("ran")
        except cp.UnsupportedMethod as e:
            res.append(str(e))
    out[name] = res
out["__untouched__"] = buf == bytearray(b"x" * 8192)
out["__methods__"] = list(cp.methods())
print(json.dumps(out))
"""


def _unavailable(env=None):
    r = run_python(_UNAVAILABLE, env)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def test_unavailable_methods_raise_unsupported():
    # The child lacks what this process lacks: the same CLEARPAGES_DISABLE.
    out = _unavailable({k: v for k, v in os.environ.items() if k == "CLEARPAGES_DISABLE"})
    assert out.pop("__untouched__") is True
    out.pop("__methods__")
    assert set(out) == set(cp.ALL_METHODS) - set(cp.methods())
    for name, results in out.items():
        feature = "".join(sorted(cp.ROUTINES[cp.ALL_METHODS.index(name)].requires))
        # A portable build lacks the routine itself, whatever the CPU has.
        why = feature if name in _dispatch.state().built else "not in this build"
        for msg in results:
            assert msg != "ran", name
            assert name in msg and why in msg, msg


def test_disabled_features_make_methods_unsupported():
    out = _unavailable({"CLEARPAGES_DISABLE": "avx512f,avx2,clzero"})
    assert out.pop("__untouched__") is True
    left = out.pop("__methods__")
    assert not {"avx512_nt", "avx2_nt", "clzero"} & set(left)
    for name, feature in (("avx512_nt", "avx512f"), ("avx2_nt", "avx2")):
        for msg in out[name]:
            if name not in _dispatch.state().built:
                assert "not in this build" in msg, msg
                continue
            assert feature in msg, msg
            if feature in cp.cpu().features:
                assert "CLEARPAGES_DISABLE" in msg, msg
