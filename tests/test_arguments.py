"""One rule for bad arguments, in every entry: a wrong type is a TypeError, a
wrong value of the right type a ValueError, and both say what is accepted.
One check and one message per argument, whichever entry takes it."""

from __future__ import annotations

import inspect

import pytest

import clearpages as cp
from clearpages import _fast, _units

BUF = 4096

# (what is called with the bad value, the words every refusal of it holds)
THREADS = "threads must be 'auto' or an int from 1 to %d" % _fast.MAX_THREADS
SIZE = "must be a byte count such as 4096, 64K, 64M or 1G"

ENTRIES_WITH_THREADS = {
    "clear": lambda t: cp.clear(bytearray(BUF), threads=t),
    "clear_many": lambda t: cp.clear_many([bytearray(BUF)], threads=t),
    "clear_pages": lambda t: cp.clear_pages(bytearray(BUF), [0], threads=t),
    "is_zero": lambda t: cp.is_zero(bytes(BUF), threads=t),
    "nonzero_pages": lambda t: cp.nonzero_pages(bytes(BUF), threads=t),
    "plan": lambda t: cp.plan(BUF, threads=t),
}


@pytest.mark.parametrize("entry", sorted(ENTRIES_WITH_THREADS))
@pytest.mark.parametrize("bad", ["2", 2.0, None, True, b"2", [2]], ids=repr)
def test_threads_of_another_type_is_a_type_error(entry, bad):
    with pytest.raises(TypeError) as e:
        ENTRIES_WITH_THREADS[entry](bad)
    assert str(e.value).startswith(THREADS), e.value


@pytest.mark.parametrize("entry", sorted(ENTRIES_WITH_THREADS))
@pytest.mark.parametrize("bad", [0, -1, _fast.MAX_THREADS + 1, 1 << 80])
def test_threads_out_of_range_is_a_value_error(entry, bad):
    with pytest.raises(ValueError) as e:
        ENTRIES_WITH_THREADS[entry](bad)
    assert str(e.value) == "%s, not %r" % (THREADS, bad)


@pytest.mark.parametrize("entry", sorted(ENTRIES_WITH_THREADS))
def test_threads_of_numpys_integer_types_are_ints(entry):
    """A count computed with numpy (np.int64) is an int to every entry, as a
    size is; its bool stays refused."""
    np = pytest.importorskip("numpy")
    for t in (np.int64(2), np.uint8(1), np.intp(_fast.MAX_THREADS)):
        ENTRIES_WITH_THREADS[entry](t)
    with pytest.raises(ValueError) as e:
        ENTRIES_WITH_THREADS[entry](np.int64(0))
    assert str(e.value) == "%s, not 0" % THREADS
    with pytest.raises(TypeError, match="threads must be"):
        ENTRIES_WITH_THREADS[entry](np.bool_(True))


def test_numpy_integers_clear_as_ints_do():
    np = pytest.importorskip("numpy")
    buf = bytearray(b"\x01" * (4 * BUF))
    cp.clear(buf, threads=np.int64(2), hot=(np.int64(BUF), np.uint16(2 * BUF)))
    assert not any(buf)
    buf[:] = b"\x01" * (4 * BUF)
    cp.clear_pages(buf, [1, 3], threads=np.int32(2))
    assert buf == b"\x01" * BUF + bytes(BUF) + b"\x01" * BUF + bytes(BUF)
    assert cp.plan(BUF, count=np.int64(4)) == cp.plan(BUF, count=4)
    assert cp.plan(BUF, hot=(np.int64(0), np.int64(BUF))) == cp.plan(BUF, hot=(0, BUF))


@pytest.mark.parametrize("call", [
    lambda v: cp.plan(v),
    lambda v: cp.Region(v),
    lambda v: cp.clear_pages(bytearray(BUF), [0], page_size=v),
    lambda v: cp.nonzero_pages(bytes(BUF), page_size=v),
], ids=["plan", "Region", "clear_pages", "nonzero_pages"])
def test_numpys_bool_is_no_size(call):
    """numpy's bool is no byte count, though numpy before 2.0 gives it an
    __index__ (1 for True): a TypeError, as Python's bool is."""
    np = pytest.importorskip("numpy")
    for v in (np.bool_(True), np.bool_(False)):
        with pytest.raises(TypeError, match="must be a byte count"):
            call(v)


@pytest.mark.parametrize("call", [
    lambda v: cp.clear(bytearray(BUF), threads=v),
    lambda v: cp.clear_many([bytearray(BUF)], threads=v),
    lambda v: cp.is_zero(bytes(BUF), threads=v),
    lambda v: cp.clear(bytearray(BUF), method=v),
    lambda v: cp.clear(bytearray(BUF), hot=v),
    lambda v: cp.plan(v),
    lambda v: cp.plan(BUF, count=v),
    lambda v: cp.set_adaptive(v),
])
@pytest.mark.parametrize("big", [list(range(100000)), "x" * 100000], ids=["list", "str"])
def test_a_large_wrong_argument_is_quoted_short(call, big):
    """A whole array or a long list passed by mistake: the TypeError or
    ValueError says what is accepted in a line, not the object's every item
    (an array once compared element-wise raised numpy's own 'truth value is
    ambiguous' instead)."""
    with pytest.raises((TypeError, ValueError)) as e:
        call(big)
    assert len(str(e.value)) < 400 and "\n" not in str(e.value), str(e.value)[:500]
    assert "..." in str(e.value)


def test_an_array_for_threads_or_method_is_a_type_error():
    np = pytest.importorskip("numpy")
    arr = np.zeros(1000)
    for entry in ENTRIES_WITH_THREADS.values():
        with pytest.raises(TypeError, match="threads must be"):
            entry(arr)
    with pytest.raises(TypeError, match="method must be a str"):
        cp.clear(bytearray(BUF), method=arr)
    with pytest.raises(TypeError, match="method must be a str"):
        cp.clear_many([bytearray(BUF)], method=arr)


ENTRIES_WITH_PAGE_SIZE = {
    "clear_pages": lambda p: cp.clear_pages(bytearray(BUF), [0], page_size=p),
    "clear_pages, positional": lambda p: cp.clear_pages(bytearray(BUF), [0], p),
    "nonzero_pages": lambda p: cp.nonzero_pages(bytes(BUF), page_size=p),
    "nonzero_pages, positional": lambda p: cp.nonzero_pages(bytes(BUF), p),
}


@pytest.mark.parametrize("entry", sorted(ENTRIES_WITH_PAGE_SIZE))
@pytest.mark.parametrize("bad", [4096.0, b"4096", True], ids=repr)
def test_page_size_of_another_type_is_a_type_error(entry, bad):
    with pytest.raises(TypeError) as e:
        ENTRIES_WITH_PAGE_SIZE[entry](bad)
    assert str(e.value) == _units._spellings("page_size", bad)


@pytest.mark.parametrize("entry", sorted(ENTRIES_WITH_PAGE_SIZE))
@pytest.mark.parametrize("bad, words", [
    (0, "page_size must be at least 1 byte, not 0"),
    (-4096, "page_size must be at least 1 byte, not -4096"),
    ("4q", "page_size " + SIZE),
    # One bound for every size: the entries took up to 2**56 here and any
    # size there.
    (1 << 57, "page_size %d is larger than any memory (at most 2**56 bytes)" % (1 << 57)),
])
def test_page_size_out_of_range_is_a_value_error_said_once(entry, bad, words):
    with pytest.raises(ValueError) as e:
        ENTRIES_WITH_PAGE_SIZE[entry](bad)
    assert str(e.value).startswith(words), e.value


def test_the_largest_page_size_is_taken_by_both():
    big = _units.MAX_SIZE
    assert big == 1 << 56 == _fast.MAX_SIZE
    assert list(cp.nonzero_pages(b"\x01" * 10, big)) == [0]
    buf = bytearray(b"\x01" * 10)
    cp.clear_pages(buf, [0], page_size=big)
    assert not any(buf)


@pytest.mark.parametrize("bad, kind", [
    (None, TypeError), (3, TypeError), (b"libc", TypeError), ("nope", ValueError),
    ("LIBC", ValueError)], ids=repr)
def test_method(bad, kind):
    for call in (lambda: cp.clear(bytearray(BUF), method=bad),
                 lambda: cp.clear_many([bytearray(BUF)], method=bad),
                 lambda: cp.clear_pages(bytearray(BUF), [0], method=bad)):
        with pytest.raises(kind) as e:
            call()
        assert "'auto' or one of: rep_stosb" in str(e.value)


@pytest.mark.parametrize("bad, kind", [
    ("yes", TypeError), (1, TypeError), ((0.0, 2), TypeError), ((0, 1, 2), TypeError),
    ((0, BUF + 1), ValueError), ((2, 1), ValueError)], ids=repr)
def test_hot(bad, kind):
    for call in (lambda: cp.clear(bytearray(BUF), hot=bad),
                 lambda: cp.plan(BUF, hot=bad)):
        with pytest.raises(kind) as e:
            call()
        assert str(e.value).startswith("hot must be True (all of it is used next), False "
                                       "(not soon), or a (start, stop) pair of ints"), e.value


@pytest.mark.parametrize("call", [
    lambda v: cp.Region(v), lambda v: cp.plan(v), lambda v: cp.Region(BUF).resize(v)])
@pytest.mark.parametrize("bad, kind", [
    (64.0, TypeError), (b"4096", TypeError), (None, TypeError), (True, TypeError),
    ("64Q", ValueError), (-1, ValueError)], ids=repr)
def test_sizes(call, bad, kind):
    with pytest.raises(kind, match=SIZE if bad != -1 else "at least"):
        call(bad)


def test_count_of_plan():
    with pytest.raises(TypeError, match=r"count must be an int >= 1, not 2\.0"):
        cp.plan(BUF, count=2.0)
    with pytest.raises(ValueError, match="count must be an int >= 1, not 0"):
        cp.plan(BUF, count=0)


@pytest.mark.parametrize("bad, kind", [(1, TypeError), (None, TypeError),
                                       ("copy", ValueError)], ids=repr)
def test_region_fork(bad, kind):
    with pytest.raises(kind, match="fork must be 'keep'"):
        cp.Region(BUF, fork=bad)


# ---- a closed Region ---------------------------------------------------------

@pytest.mark.parametrize("call", [
    cp.clear, cp.is_zero, cp.nonzero_pages, lambda r: cp.clear_pages(r, [0]),
    lambda r: cp.clear_many([r]), lambda r: r.view()], ids=[
    "clear", "is_zero", "nonzero_pages", "clear_pages", "clear_many", "view"])
def test_a_closed_region_says_it_is_closed(call):
    r = cp.Region(BUF)
    r.close()
    with pytest.raises(ValueError, match="the Region is closed"):
        call(r)


@pytest.mark.parametrize("scan", [cp.is_zero, cp.nonzero_pages])
def test_a_buffer_that_refuses_says_why_itself(scan):
    import mmap

    m = mmap.mmap(-1, BUF)
    m.close()
    with pytest.raises(ValueError, match="closed"):
        scan(m)
    v = memoryview(bytes(BUF))
    v.release()
    with pytest.raises(ValueError, match="released"):
        scan(v)


# ---- signatures --------------------------------------------------------------

@pytest.mark.parametrize("name", ["clear", "clear_many", "clear_pages", "is_zero",
                                  "nonzero_pages"])
def test_every_entry_has_a_signature(name):
    fn = getattr(cp, name)
    sig = inspect.signature(fn)
    assert "buf" in sig.parameters or "bufs" in sig.parameters
    assert "--" not in (fn.__doc__ or "").splitlines()[0:1]


def test_page_size_is_taken_the_same_way_by_both_page_calls():
    for fn in (cp.clear_pages, cp.nonzero_pages):
        p = inspect.signature(fn).parameters["page_size"]
        assert p.kind is inspect.Parameter.POSITIONAL_OR_KEYWORD and p.default is None
    with pytest.raises(TypeError, match="multiple values for argument 'page_size'"):
        cp.clear_pages(bytearray(BUF), [0], 4096, page_size=4096)
    with pytest.raises(TypeError, match="takes from 2 to 3 positional arguments"):
        cp.clear_pages(bytearray(BUF), [0], 4096, "auto")


def test_the_package_shows_its_public_names_alone():
    """Its names and its subpackages (clearpages.tools, once imported)."""
    import types

    shown = [n for n in dir(cp)
             if not n.startswith("_") and not isinstance(getattr(cp, n), types.ModuleType)]
    assert sorted(shown) == sorted(cp.__all__)


def test_a_tensors_hot_has_the_buffers_check_and_words():
    """A tensor (DLPack) takes hot= through the same check as a buffer: the
    same TypeError and ValueError, and int subclasses as ints."""
    import enum

    np = pytest.importorskip("numpy")
    from conftest import OnlyDLPack

    class At(enum.IntEnum):
        start = 0
        stop = 64

    a = np.ones(BUF, dtype=np.uint8)
    for hot, kind in (("yes", TypeError), ((0.0, 2), TypeError), ((0, BUF + 1), ValueError)):
        with pytest.raises(kind) as e:
            cp.clear(OnlyDLPack(a), hot=hot)
        with pytest.raises(kind) as same:
            cp.clear(bytearray(BUF), hot=hot)
        assert str(e.value) == str(same.value)
    assert a.all()
    cp.clear(OnlyDLPack(a), hot=(At.start, At.stop))
    assert not a.any()
    with pytest.raises(ValueError, match="hot= needs a contiguous buffer; this one is strided"):
        cp.clear(OnlyDLPack(np.ones((8, 8), dtype=np.uint8)[::2]), hot=(0, 8))
