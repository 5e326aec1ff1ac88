"""What a first try gets wrong gets a message that says what to do instead."""

from __future__ import annotations

import array

import pytest

import clearpages as cp


@pytest.mark.parametrize("buf", [bytearray(b"\x01" * 10), memoryview(bytearray(b"\x01" * 4)),
                                 array.array("B", [1, 2])])
def test_clear_many_of_one_buffer_says_clear_is_for_one(buf):
    with pytest.raises(TypeError, match=r"clear_many takes an iterable of buffers, and item 0 "
                                        r"is an int: to clear one buffer, call clear\(buf\)"):
        cp.clear_many(buf)
    assert all(bytes(buf))


@pytest.mark.parametrize("value", ["no", "", 0, 1, None, "False"])
def test_set_adaptive_takes_a_bool_only(value):
    before = cp.adaptive()
    with pytest.raises(TypeError, match="set_adaptive takes True or False"):
        cp.set_adaptive(value)
    assert cp.adaptive() == before


def test_clear_pages_refuses_a_2d_index_array():
    np = pytest.importorskip("numpy")
    pool = bytearray(b"\x01" * 4 * 4096)
    for pages in (np.array([[0, 1]], dtype=np.int64), np.array([[0], [1]], dtype=np.int16),
                  memoryview(array.array("q", [0, 1])).cast("B").cast("q", (1, 2))):
        with pytest.raises(ValueError, match="pages must be a 1-D sequence of page indices, "
                                             "not a 2-D array"):
            cp.clear_pages(pool, pages)
    assert all(pool)
