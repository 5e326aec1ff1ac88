"""Tensors from a producer made by hand (tests/capsules.py): devices,
versions, element sizes, flags, the deleter, and what a producer may hand
over (stride 0 over a huge shape, NULL data).  No numpy needed."""

from __future__ import annotations

import ctypes

import pytest
from capsules import FLAG_READ_ONLY, Producer, capsule_name
from conftest import run_child

import clearpages as cp

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


def test_an_object_without_dlpack_says_what_is_taken():
    with pytest.raises(TypeError, match="not object"):
        cp.clear(object())


# ---- what a producer may hand over: stride 0 over a huge shape, NULL data ----
#
# Each runs in a fresh interpreter: a crash there fails the test, not the run.

def test_a_stride_0_tensor_of_2_61_elements_costs_its_one_element():
    """Its elements are all the same byte: every entry reads or writes that
    byte alone, in no more time or memory than its storage takes."""
    run_child("""
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
    run_child("""
import numpy as np
from conftest import OnlyDLPack
x = np.arange(1, 9, dtype=np.uint8)
big = np.lib.stride_tricks.as_strided(x[3:], (1 << 61,), (0,))
assert cp.is_zero(OnlyDLPack(big)) is False
cp.clear(OnlyDLPack(big))
assert x.tolist() == [1, 2, 3, 0, 5, 6, 7, 8], x
assert cp.is_zero(OnlyDLPack(big)) is True
""")


def test_null_data_with_a_size_is_refused_and_an_empty_one_taken():
    """A NULL data pointer for 4 bytes: refused as torch refuses in-place
    writes to a tensor without memory (its ZeroTensors); a NULL pointer for
    no element is an empty tensor, cleared as ever."""
    run_child("""
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


def test_a_producer_that_dies_while_its_refusal_propagates_keeps_it():
    """A Producer made for one call, keeping its capsule, dies as the
    call's refusal propagates: the capsule's destructor (Python code) runs
    then, and the caller still sees the refusal, not a SystemError; a
    capsule never taken is ended by it once."""
    buf = (ctypes.c_uint8 * 16)(*range(1, 17))
    with pytest.raises(TypeError, match="read-only"):
        cp.clear(Producer(buf, (16,), flags=FLAG_READ_ONLY, keep=True))
    ended = []

    class Counted(Producer):
        def __del__(self):
            super().__del__()                   # ends the capsule it keeps
            ended.append((self.exports, self.deleted))

    with pytest.raises(TypeError, match="read-only"):
        cp.clear(Counted(buf, (16,), flags=FLAG_READ_ONLY, keep=True))
    assert ended == [(1, 1)]                    # taken, and released by the call

    def pending():
        c = Counted(buf, (16,), keep=True)
        c.__dlpack__()                          # kept, never taken
        raise ValueError("the pending one")

    with pytest.raises(ValueError, match="the pending one"):
        pending()
    assert ended == [(1, 1), (1, 1)]            # ended once, as the Producer died
    assert bytes(buf) == bytes(range(1, 17))
