"""clearpages.Region: mapping, views, lifetime, clearing, huge pages."""

from __future__ import annotations

import contextlib
import errno
import gc
import pickle
import sys
import threading

import pytest
from conftest import pages_permitting

import clearpages as cp
from clearpages import _region, _system
from clearpages._native import lib

KiB, MiB, GiB = 1 << 10, 1 << 20, 1 << 30


def mapped(address: int, size: int) -> bool:
    """True where any byte of [address, address + size) is mapped."""
    with open("/proc/self/maps") as f:
        for line in f:
            lo, hi = (int(x, 16) for x in line.split()[0].split("-"))
            if lo < address + size and hi > address:
                return True
    return False


def thp_mode() -> str | None:
    return _region._thp_mode()


# ---- making ---------------------------------------------------------------


def test_sizes_round_up_to_whole_pages():
    with cp.Region(1) as r:
        assert r.size == 4096 and len(r) == 4096
        assert r.page_size == 4096 and r.page_size_name == "4k"
        assert r.address % 4096 == 0
    with cp.Region(3 * MiB, page_size="2m") as r:
        assert r.size == 4 * MiB and r.page_size == 2 * MiB
        assert r.address % (2 * MiB) == 0


def test_large_regions_start_on_a_page_table_boundary():
    # so that later moves and resizes can go PMD (or PUD) entry by entry
    with cp.Region(4 * MiB) as r:
        assert r.address % (2 * MiB) == 0
    with cp.Region(GiB) as r:
        assert r.address % GiB == 0


def test_a_size_that_rounds_past_the_address_space_is_refused():
    """The native type rounds and checks a Region's size against the address
    space, in one place, for mapping and for resize alike."""
    r = cp.Region.__new__(cp.Region)
    assert r._map(8193, lib.CP_REGION_NORMAL, 12, 8192, GiB) == (errno.EOVERFLOW, 8193)
    assert r.closed
    assert r._map(5000, lib.CP_REGION_NORMAL, 12, 8192, GiB) == (0, 8192)
    try:
        assert r._size == 8192 and not r.closed
        with pytest.raises(ValueError, match="new_size 8193 rounds up to more than the "
                                             "address space"):
            r.resize(8193)
        with pytest.raises(ValueError, match="rounds up to more than"):
            r.resize("8193")        # the slow path, to the same check
        assert r._size == 8192
        r.resize(4097)
        assert r._size == 8192
    finally:
        r._close()


def test_page_size_in_bytes_is_accepted():
    with cp.Region(5000, page_size=4096) as r:
        assert r.page_size_name == "4k" and r.size == 8192


@pytest.mark.parametrize("size", [0, -1, -4096, 1 << 60, 2 ** 200, "lots", "-4K"])
def test_bad_sizes_are_value_errors(size):
    with pytest.raises(ValueError, match="size"):
        cp.Region(size)


@pytest.mark.parametrize("size", [1.5, 64.0, b"4096", None, True])
def test_sizes_of_another_type_are_type_errors(size):
    with pytest.raises(TypeError, match="size must be a byte count"):
        cp.Region(size)


@pytest.mark.parametrize("page_size", ["3m", "huge", 8192, 0, "1G2"])
def test_unknown_page_sizes_are_value_errors(page_size):
    with pytest.raises(ValueError, match="page_size"):
        cp.Region(4096, page_size=page_size)


@pytest.mark.parametrize("page_size", [None, True, 2.0, b"4k"])
def test_page_sizes_of_another_type_are_type_errors(page_size):
    with pytest.raises(TypeError, match="page_size must be '4k', '2m', '1g' or 'auto'"):
        cp.Region(4096, page_size=page_size)


@pytest.mark.parametrize("populate", ["no", "yes", 1, 0, None])
def test_populate_takes_true_or_false_as_lock_does(populate):
    # Checked before anything is mapped: 'no' is truthy, and faulted
    # everything in.
    with pytest.raises(TypeError, match="populate takes True or False"):
        cp.Region("64M", populate=populate)


def test_repr_says_size_address_and_page_size():
    r = cp.Region(2 * MiB)
    text = repr(r)
    assert "2 MiB" in text and hex(r.address) in text and "4k" in text
    r.close()
    assert "closed" in repr(r)


def test_a_region_cannot_be_pickled():
    with cp.Region(4096) as r, pytest.raises(TypeError, match="pickle"):
        pickle.dumps(r)


# ---- views ----------------------------------------------------------------


def test_view_is_a_writable_flat_byte_view():
    with cp.Region(8192) as r:
        v = r.view()
        assert v.format == "B" and v.nbytes == 8192 and not v.readonly
        assert v.ndim == 1 and v.c_contiguous
        v[0] = 1
        v[-1] = 2
        assert r.view()[0] == 1 and r.view()[-1] == 2
        del v


def test_numpy_frombuffer_shares_the_memory():
    np = pytest.importorskip("numpy")
    with cp.Region(MiB) as r:
        a = np.frombuffer(r.view(), dtype=np.uint64)
        a[:] = np.arange(a.size, dtype=np.uint64)
        b = np.frombuffer(r.view(), dtype=np.uint64)
        assert (b == np.arange(b.size)).all()
        assert a.ctypes.data == r.address
        del a, b


def test_a_region_is_a_buffer():
    """On every supported Python, not only 3.12+ (__buffer__): the native
    base type exports the memory and counts the exports itself."""
    np = pytest.importorskip("numpy")
    with cp.Region(8192) as r:
        m = memoryview(r)
        assert (m.format, m.itemsize, m.nbytes, m.readonly) == ("B", 1, 8192, False)
        m[0] = 7
        assert r._exports == 1
        with pytest.raises(BufferError):
            r.close()
        with pytest.raises(BufferError, match="resize"):
            r.resize(16384)
        with pytest.raises(BufferError, match="move"):
            r.move("pte")
        m.release()
        a = np.frombuffer(r, dtype=np.uint8)
        assert a[0] == 7 and a.ctypes.data == r.address and a.flags.writeable
        del a
        assert bytes(r)[:2] == b"\x07\x00" and len(bytes(r)) == 8192
        assert r.view()[0] == 7
        cp.clear(r)
        cp.clear_many([r, r])
        assert not any(bytes(r))
        assert r._exports == 0
        r.resize(16384)         # nothing left exported


def test_region_needs_no_ctypes_array():
    import clearpages._region as region_module

    assert "ctypes" not in vars(region_module)
    r = cp.Region(4096)
    assert not hasattr(r, "_array")
    r.close()


def test_closed_region_is_no_buffer():
    r = cp.Region(4096)
    r.close()
    with pytest.raises(ValueError, match="closed"):
        memoryview(r)
    with pytest.raises(ValueError, match="closed"):
        cp.clear(r)


def test_new_pages_read_zero():
    with cp.Region(4 * MiB) as r:
        assert not any(r.view())


# ---- no dangling memory ---------------------------------------------------


def test_close_with_a_live_view_raises_buffer_error():
    r = cp.Region(8192)
    v = r.view()
    with pytest.raises(BufferError, match="view"):
        r.close()
    assert not r.closed
    v[0] = 5        # still mapped, still usable
    del v
    r.close()
    assert r.closed and r.size == 0


def test_slices_and_numpy_arrays_count_as_views():
    np = pytest.importorskip("numpy")
    r = cp.Region(8192)
    part = r.view()[4096:]
    with pytest.raises(BufferError):
        r.close()
    del part
    arr = np.frombuffer(r.view(), dtype=np.uint8)[100:200]
    with pytest.raises(BufferError):
        r.close()
    del arr
    r.close()


def test_a_released_view_does_not_block_close():
    r = cp.Region(4096)
    with r.view() as v:
        v[0] = 1
    r.close()


def test_a_native_clear_in_flight_holds_the_memory():
    # What clearpages.clear holds while the native call runs: closing from
    # another thread meanwhile must refuse, not unmap under the routine.
    from clearpages import _fast

    r = cp.Region(4096)
    seen = []

    def hook(where, routine, nbytes):
        assert r._exports == 1
        with pytest.raises(BufferError):
            r.close()
        seen.append(where)

    _fast._set_debug_hook(hook)
    try:
        cp.clear(r)
        cp.clear_many([r])
    finally:
        _fast._set_debug_hook(None)
    assert "call" in seen and "acquired" in seen
    assert r._exports == 0
    r.close()


def test_garbage_collected_region_keeps_memory_for_its_views():
    r = cp.Region(8192)
    address = r.address
    v = r.view()
    del r
    gc.collect()
    v[0] = 9            # never a crash: the view keeps the mapping
    assert v[0] == 9 and mapped(address, 8192)
    del v
    gc.collect()
    assert not mapped(address, 8192)


def test_a_view_that_outlives_the_with_block_keeps_the_memory_until_it_goes():
    np = pytest.importorskip("numpy")
    with cp.Region(2 * MiB) as r:
        address = r.address
        a = np.frombuffer(r, dtype=np.uint32)
        a[:] = 7
    # The block's end closed the Region (no BufferError) ...
    assert r.closed and r.size == 0
    with pytest.raises(ValueError, match="closed"):
        r.view()
    with pytest.raises(ValueError, match="closed"):
        cp.clear(r)
    # ... and the array still works on the memory, which goes with it,
    # though the Region object itself lives on.
    assert (a == 7).all() and mapped(address, 2 * MiB)
    a[0] = 1
    del a
    gc.collect()
    assert not mapped(address, 2 * MiB)
    r.close()               # closing again is allowed


def test_the_blocks_own_exception_propagates_unchanged_past_a_live_view():
    np = pytest.importorskip("numpy")
    keep = []
    with pytest.raises(KeyError) as got:
        with cp.Region(4096) as r:
            keep.append(np.frombuffer(r, dtype=np.uint8))
            raise KeyError("mine")
    assert got.value.args == ("mine",)
    assert got.value.__context__ is None and got.value.__cause__ is None
    assert r.closed and keep[0][0] == 0


def test_an_explicit_close_still_refuses_a_live_view_inside_the_block():
    with cp.Region(4096) as r:
        v = r.view()
        with pytest.raises(BufferError, match="close"):
            r.close()
        assert not r.closed
    assert r.closed
    v[0] = 3
    v.release()


def test_garbage_collected_region_is_unmapped():
    r = cp.Region(MiB)
    address = r.address
    del r
    gc.collect()
    assert not mapped(address, MiB)


def test_closed_region_refuses_everything_but_close():
    r = cp.Region(4096)
    r.close()
    r.close()           # twice is fine
    for call in (r.view, lambda: r.address, lambda: r.resize(8192),
                 lambda: r.move("pmd"), r.populate, lambda: r.backing,
                 lambda: r.huge_pages, lambda: len(r), lambda: cp.clear(r),
                 lambda: cp.clear_many([r]), lambda: cp.is_zero(r),
                 lambda: r.clear(method="discard")):
        with pytest.raises(ValueError, match="closed"):
            call()


def test_context_manager_closes():
    with cp.Region(4096) as r:
        address = r.address
    assert r.closed and not mapped(address, 4096)


def test_view_from_another_thread_during_close_never_dangles():
    # Views are made under the region's lock: a view exists before close
    # (BufferError) or after it (ValueError), never across the unmapping.
    for _ in range(20):
        r = cp.Region(64 * KiB)
        got = []

        def take(r=r, got=got):
            try:
                got.append(r.view())
            except ValueError:
                got.append(None)

        t = threading.Thread(target=take)
        t.start()
        try:
            r.close()
        except BufferError:
            pass
        t.join()
        if got[0] is not None:
            got[0][0] = 1           # mapped: close must have refused
            assert not r.closed
            got.clear()
            r.close()


# ---- clearing -------------------------------------------------------------


def test_clear_accepts_a_region():
    with cp.Region(3 * MiB) as r:
        r.view()[:] = b"\xaa" * r.size
        cp.clear(r)
        assert not any(r.view())


def test_clear_many_accepts_regions_among_other_buffers():
    with cp.Region(64 * KiB) as a, cp.Region(2 * MiB, page_size="2m") as b:
        other = bytearray(b"\x01" * 100)
        a.view()[:] = b"\x02" * a.size
        b.view()[:] = b"\x03" * b.size
        cp.clear_many([a, other, b])
        assert not any(a.view()) and not any(b.view()) and not any(other)


@pytest.mark.parametrize("method", cp.ALL_METHODS)
def test_region_clear_with_every_method(method):
    if method not in cp.methods():
        pytest.skip("%s does not run on this CPU" % method)
    with cp.Region(MiB) as r:
        r.view()[:] = b"\x55" * r.size
        r.clear(method=method)
        assert not any(r.view())


def test_discard_hands_the_pages_back_and_they_read_zero():
    with cp.Region(4 * MiB, populate=True) as r:
        r.view()[:] = b"\x77" * r.size
        assert r.backing.rss == r.size
        r.clear(method="discard")
        assert r.backing.rss == 0
        assert not any(r.view())


def test_discard_is_only_for_regions():
    with pytest.raises(ValueError, match="Region"):
        cp.clear(bytearray(10), method="discard")


def test_populate_faults_every_page_and_keeps_contents():
    with cp.Region(8 * MiB, populate=True) as r:
        assert r.backing.rss == r.size
    with cp.Region(8 * MiB) as r:
        assert r.backing.rss == 0
        r.view()[12345] = 42
        r.populate()
        assert r.backing.rss == r.size and r.view()[12345] == 42


# ---- transparent huge pages ----------------------------------------------


@pytest.mark.skipif(thp_mode() in (None, "never"),
                    reason="transparent huge pages are disabled (%s)" % _system.THP_ENABLED)
def test_2m_region_is_backed_by_transparent_huge_pages():
    with cp.Region(16 * MiB, page_size="2m", populate=True) as r:
        b = r.backing
        assert b.thp_eligible
        # The kernel may fall back to base pages for some of it when memory
        # is fragmented, but not for all of it.
        assert b.anon_huge_pages > 0 and r.huge_pages == b.anon_huge_pages


def test_4k_region_is_not_advised_huge():
    if thp_mode() == "always":
        pytest.skip("THP 'always' backs any region with huge pages")
    with cp.Region(16 * MiB, populate=True) as r:
        assert r.backing.anon_huge_pages == 0


def test_auto_picks_by_size():
    with cp.Region(100 * KiB, page_size="auto") as r:
        assert r.page_size_name == "4k"
    with cp.Region(8 * MiB, page_size="auto") as r:
        want = "4k" if thp_mode() in (None, "never") else "2m"
        assert r.page_size_name == want


# ---- hugetlb (1 GiB pages) ------------------------------------------------


def test_1g_region_is_hugetlb_backed(gigantic_pages):
    with pages_permitting(), cp.Region(GiB, page_size="1g", populate=True) as r:
        assert r.address % GiB == 0 and r.page_size == GiB
        b = r.backing
        assert b.hugetlb == GiB and b.kernel_page_size == GiB
        r.view()[-1] = 1
        cp.clear(r)
        assert r.view()[-1] == 0


def test_1g_sizes_round_up_to_whole_pages(gigantic_pages):
    with pages_permitting(), cp.Region(GiB + 1, page_size="1g") as r:
        assert r.size == 2 * GiB


def test_auto_takes_1g_pages_when_free(gigantic_pages):
    with cp.Region(GiB, page_size="auto") as r:
        assert r.page_size_name == "1g"


def test_1g_discard_zeroes_without_giving_pages_up(gigantic_pages):
    with pages_permitting(), cp.Region(GiB, page_size="1g", populate=True) as r:
        r.view()[:4096] = b"\x11" * 4096
        r.clear(method="discard")
        assert not any(r.view()[:4096])
        assert r.backing.hugetlb == GiB


def test_1g_resize_grows_in_whole_pages_and_keeps_contents(gigantic_pages):
    with pages_permitting(), cp.Region(GiB, page_size="1g") as r:
        v = r.view()
        v[:3], v[-3:] = b"abc", b"xyz"
        del v
        blocker = r.address + GiB
        in_place = lib.cp_region_reserve_at(blocker, 4096) == 0
        try:
            old = r.address
            with pages_permitting():
                r.resize(GiB + 1)
            assert r.size == 2 * GiB and r.address % GiB == 0
            if in_place:
                assert r.address != old
            v = r.view()
            assert bytes(v[:3]) == b"abc" and bytes(v[GiB - 3:GiB]) == b"xyz"
            assert not any(v[GiB:GiB + 4096])
            del v
            r.move("pud")       # a grown hugetlb region is two mappings
            assert bytes(r.view()[GiB - 3:GiB]) == b"xyz"
            r.resize(GiB)
            assert r.size == GiB and bytes(r.view()[:3]) == b"abc"
        finally:
            if in_place:
                lib.cp_region_unmap(blocker, 4096)


def test_1g_move_only_to_pud_alignment(gigantic_pages):
    with pages_permitting(), cp.Region(GiB, page_size="1g") as r:
        for alignment in ("pte", "1m", "pmd"):
            with pytest.raises(ValueError, match="1g"):
                r.move(alignment)
        with pytest.raises(ValueError, match="multiple"):
            r.move_to(r.address + 3 * GiB + 2 * MiB)


def test_the_reservation_said_serves_the_request_beside_the_pages_taken(monkeypatch):
    """Three 1 GiB pages, two held by regions: growing one by 3 GiB needs a
    pool of five, on the sysfs line and the boot line alike."""
    path = "/sys/kernel/mm/hugepages/hugepages-1048576kB/nr_hugepages"
    monkeypatch.setattr(_region, "hugetlb_pages", lambda page: {
        "path": path, "nr": 3, "free": 1, "reserved": 0, "surplus": 0})
    text = str(_region._hugetlb_error(3 * GiB, GiB, errno.ENOMEM,
                                      "growing the region by %s"))
    assert "needs 3 hugetlb pages of 1 GiB, but only 1 of 3 is free" in text
    assert "`echo 5 > %s`" % path in text and "hugepagesz=1G hugepages=5" in text


def test_unavailable_hugetlb_pages_say_how_to_reserve_them():
    pool = _region.hugetlb_pages(GiB)
    usable = max(0, (pool["free"] or 0) - (pool["reserved"] or 0))
    want = (usable + 1) * GiB       # more than there is: nothing gets allocated
    with pytest.raises(_region.HugePagesUnavailable) as info:
        cp.Region(want, page_size="1g")
    assert isinstance(info.value, OSError)
    text = str(info.value)
    if pool["nr"] is None:
        assert "not available" in text
    else:
        assert "nr_hugepages" in text and pool["path"] in text
        assert "%d of %d" % (usable, pool["nr"]) in text
        assert "needs %d hugetlb page" % (usable + 1) in text


# ---- discarding pages and ranges ------------------------------------------


def _filled(size, page_size="4k"):
    r = cp.Region(size, page_size=page_size, populate=True)
    r.view()[:] = b"\x5a" * r.size
    return r


def _resident(r):
    """Indices of the region's 4 KiB pages that are resident (mincore)."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    n = r.size // 4096
    vec = (ctypes.c_ubyte * n)()
    assert libc.mincore(ctypes.c_void_p(r.address), ctypes.c_size_t(r.size), vec) == 0
    return [i for i in range(n) if vec[i] & 1]


def _zero_pages(r, page):
    v = r.view()
    try:
        return [i for i in range(r.size // page) if not any(v[i * page:(i + 1) * page])]
    finally:
        v.release()


def test_clear_pages_discards_the_listed_pages_of_a_region():
    with _filled(16 * 4096) as r:
        cp.clear_pages(r, [1, 7, 8, 9, 3, 7], method="discard")
        assert _resident(r) == [0, 2, 4, 5, 6, 10, 11, 12, 13, 14, 15]   # handed back
        assert _zero_pages(r, 4096) == [1, 3, 7, 8, 9]


def test_clear_pages_on_a_region_defaults_to_its_page_size():
    if thp_mode() in (None, "never"):
        pytest.skip("transparent huge pages are off")
    with _filled(8 * MiB, "2m") as r:
        cp.clear_pages(r, [2], method="discard")
        assert _zero_pages(r, 2 * MiB) == [2]
        r.view()[:] = b"\x01" * r.size
        cp.clear_pages(r, [0, 3])                 # in place, 2 MiB pages too
        assert _zero_pages(r, 2 * MiB) == [0, 3]


def test_discard_pages_smaller_than_a_huge_page_is_an_error_that_says_so():
    with _filled(4 * MiB, "2m") as r:
        with pytest.raises(ValueError, match="not a multiple of this region's page size "
                                             r"\(2 MiB\).*whole or not at all"):
            cp.clear_pages(r, [0], page_size=4096, method="discard")
        assert not _zero_pages(r, 4096)


def test_discard_pages_checks_every_index_before_it_discards_any():
    with _filled(4 * 4096) as r:
        with pytest.raises(cp.PageIndexError, match=r"page index 4 .position 1. is outside"):
            cp.clear_pages(r, [0, 4], method="discard")
        with pytest.raises(cp.PageIndexError):
            cp.clear_pages(r, [-1], method="discard")
        assert _zero_pages(r, 4096) == []


def test_region_discard_takes_a_page_aligned_range():
    with _filled(8 * 4096) as r:
        r.discard(2 * 4096, 5 * 4096)
        assert _zero_pages(r, 4096) == [2, 3, 4]
        r.discard(7 * 4096)                       # to the end
        assert _zero_pages(r, 4096) == [2, 3, 4, 7]
        r.discard(0, 0)
        with pytest.raises(ValueError, match=r"start=100 is not a multiple of the "
                                             "region's page size.*0 or 4096"):
            r.discard(100, 4096)
        with pytest.raises(ValueError, match="0 <= start <= stop <= 32768"):
            r.discard(0, 40 * 4096)
        assert _zero_pages(r, 4096) == [2, 3, 4, 7]
        r.discard()
        assert len(_zero_pages(r, 4096)) == 8


def test_clear_many_discards_regions():
    with _filled(4 * 4096) as a, _filled(2 * 4096) as b:
        cp.clear_many([a, b], method="discard")
        assert _resident(a) == [] and _resident(b) == []
        assert not any(a.view()) and not any(b.view())
    with _filled(4096) as a:
        with pytest.raises(ValueError, match=r"buffer 1: method 'discard'.*Region, not "
                                             "bytearray"):
            cp.clear_many([a, bytearray(b"x")], method="discard")
        assert any(a.view())                       # nothing discarded


@pytest.mark.parametrize("threads", [2, "auto"])
def test_discard_refuses_threads(threads):
    with _filled(4 * 4096) as r:
        for call in (lambda: r.clear(method="discard", threads=threads),
                     lambda: cp.clear_pages(r, [0], method="discard", threads=threads),
                     lambda: cp.clear_many([r], method="discard", threads=threads)):
            with pytest.raises(ValueError, match="does not apply to method 'discard'"):
                call()
        assert not _zero_pages(r, 4096)


def test_discard_pages_of_other_buffers_is_refused():
    with pytest.raises(ValueError, match=r"only to a clearpages.Region"):
        cp.clear_pages(bytearray(8192), [0], method="discard")


# ---- a forked child and memory it does not inherit -----------------------------

_FORK_CHILD = r"""
import ctypes, gc, os, warnings
warnings.simplefilter("ignore", DeprecationWarning)
import clearpages as cp

if KIND == "drop":
    r = cp.Region(1 << 20, fork="drop")
else:
    r = cp.Region(1 << 30, page_size="1g")
cp.clear(r)
addr = r.address
libc = ctypes.CDLL(None, use_errno=True)
libc.mmap.restype = ctypes.c_void_p
libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int,
                      ctypes.c_int, ctypes.c_long]
pid = os.fork()
if pid == 0:
    seen = [r.closed, r._address, r.size]
    for use in (lambda: cp.clear(r), lambda: memoryview(r), lambda: r.view(),
                lambda: cp.clear_many([r]), lambda: r.resize(2 * (1 << 20))):
        try:
            use()
            seen.append("ran")
        except ValueError as e:
            seen.append("fork" in str(e))
    # The child maps memory of its own where the region was: the Region's
    # close, and its end, must leave it alone.
    p = libc.mmap(addr, 4096, 3, 0x22 | 0x100000, -1, 0)     # MAP_FIXED_NOREPLACE
    mine = p == addr
    if mine:
        ctypes.memset(p, 0x5A, 4096)
    r.close()
    del r
    gc.collect()
    kept = (not mine) or ctypes.string_at(addr, 4096) == b"\x5a" * 4096
    print(seen, mine, kept, flush=True)
    os._exit(0)
_, status = os.waitpid(pid, 0)
print(os.waitstatus_to_exitcode(status))
r.view()[:3] = b"abc"               # the parent's Region is untouched by it all
cp.clear(r)
assert not any(r.view()[:3])
r.close()
"""


def _fork_child(kind: str) -> list[str]:
    from conftest import run_python

    done = run_python("KIND = %r\n" % kind + _FORK_CHILD, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout.splitlines()


def _check_fork_child(lines: list[str]) -> None:
    assert lines[-1] == "0", "the child died (%s): %s" % (lines[-1], lines)
    seen, mine, kept = lines[0].rsplit(" ", 2)
    assert seen == "[True, 0, 0, True, True, True, True, True]", seen
    assert mine == "True", "the child could not map a page of its own there"
    assert kept == "True", "the child's close unmapped memory it had mapped there since"


def test_a_dropped_region_reads_as_closed_in_a_forked_child():
    """fork='drop' (MADV_DONTFORK): the child has nothing mapped there.  Its
    Region must read as closed with an error that says why (not SIGSEGV on
    use), and its close must never unmap what the child mapped there since."""
    _check_fork_child(_fork_child("drop"))


def test_a_1g_region_reads_as_closed_in_a_forked_child(gigantic_pages):
    lines = _fork_child("1g")
    if lines and "HugePagesUnavailable" in "".join(lines):
        pytest.skip("1 GiB pages taken by someone else meanwhile")
    _check_fork_child(lines)


def test_backing_and_huge_pages_are_properties_that_old_calls_still_read():
    with cp.Region(64 * KiB, populate=True) as r:
        assert isinstance(r.backing, _region.Backing) and r.backing.rss >= r.size
        assert r.huge_pages == r.backing.huge and r.huge_pages + 0 == r.backing.huge
        # They were methods: a call still gives the same, and says so.
        with pytest.warns(DeprecationWarning, match="backing is a property"):
            assert r.backing() == r.backing
        with pytest.warns(DeprecationWarning, match="huge_pages is a property"):
            assert r.huge_pages() == r.huge_pages
            assert type(r.huge_pages()) is int


@contextlib.contextmanager
def merged_neighbour(r: cp.Region):
    """One page of anonymous memory mapped right beside r with r's own flags
    and written, so that the kernel may merge it into r's mapping; skips
    where there is no room beside r or the kernel keeps the two apart."""
    import ctypes
    import mmap as _mmap

    libc = ctypes.CDLL(None, use_errno=True)
    libc.mmap.restype = ctypes.c_void_p
    libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int,
                          ctypes.c_int, ctypes.c_long]
    fixed_noreplace = 0x100000
    page = None
    for want in (r.address + r.size, r.address - 4096):
        got = libc.mmap(want, 4096, _mmap.PROT_READ | _mmap.PROT_WRITE,
                        _mmap.MAP_PRIVATE | _mmap.MAP_ANONYMOUS | fixed_noreplace, -1, 0)
        if got == want:
            page = want
            break
        if got not in (None, ctypes.c_void_p(-1).value):
            lib.cp_region_unmap(got, 4096)      # an old kernel took it as a hint
    if page is None:
        pytest.skip("no free page beside the region to map a neighbour into")
    try:
        if "hg" in r.backing.vm_flags:
            libc.madvise(ctypes.c_void_p(page), ctypes.c_size_t(4096), 14)  # MADV_HUGEPAGE
        ctypes.memset(page, 0x33, 4096)
        with open("/proc/self/maps") as f:
            spans = [tuple(int(x, 16) for x in line.split()[0].split("-")) for line in f]
        if not any(lo <= min(page, r.address) and hi >= max(page + 4096, r.address + r.size)
                   for lo, hi in spans):
            pytest.skip("the kernel did not merge the neighbour into the region's mapping")
        yield page
    finally:
        lib.cp_region_unmap(page, 4096)


@pytest.mark.parametrize("size, page_size", [(3 * 4096, "4k"), (2 * MiB, "4k"),
                                             (2 * MiB, "2m")])
def test_backing_counts_only_the_region_when_its_mapping_is_shared(size, page_size):
    """The kernel merges a region's mapping with an anonymous neighbour of
    the same kind; smaps then counts the neighbour's pages in the one
    mapping's Rss.  The region's backing counts its own pages alone."""
    with cp.Region(size, page_size=page_size) as r, merged_neighbour(r):
        b = r.backing
        assert b.merged == 1 and b.mappings == 1
        assert b.rss == 0 and b.anon_huge_pages == 0
        r.view()[0] = 1
        r.view()[r.size - 1] = 1
        b = r.backing
        if page_size == "2m":
            assert b.rss == r.size or b.rss == 2 * 4096   # a huge page, or the fallback
            assert b.anon_huge_pages in (0, r.size) and b.anon_huge_pages <= b.rss
        else:
            assert b.rss == (4096 if r.size == 4096 else 2 * 4096)
            assert b.anon_huge_pages == 0
        r.populate()
        assert r.backing.rss == r.size
        r.clear(method="discard")
        assert r.backing.rss == 0


def test_backing_of_a_shared_mapping_reads_no_page_that_maps_the_zero_page():
    with cp.Region(4 * 4096) as r, merged_neighbour(r):
        assert r.view()[4096] == 0          # a read fault maps the shared zero page
        r.view()[0] = 1
        assert r.backing.rss == 4096


def test_backing_of_a_shared_mapping_on_a_kernel_without_pagemap_scan():
    """Before Linux 6.7: rss from the pagemap's present bits, anon_huge_pages
    bounded by it."""
    with cp.Region(3 * 4096) as r, merged_neighbour(r):
        r.view()[0] = 1
        lib.cp_untouched_use_pagemap(1)
        try:
            b = r.backing
        finally:
            lib.cp_untouched_use_pagemap(0)
        assert b.rss == 4096 and b.anon_huge_pages == 0 and b.merged == 1


def test_a_region_is_a_dlpack_tensor_that_holds_it_like_a_view():
    from capsules import Taken

    with cp.Region(64 * KiB) as r:
        assert r.__dlpack_device__() == (1, 0)
        taken = Taken(r.__dlpack__(max_version=(1, 0)))
        assert taken.tensor.data == r.address and taken.shape() == [r.size]
        for act in (r.close, lambda: r.resize(128 * KiB)):
            with pytest.raises(BufferError, match="tensor"):
                act()
        taken.delete()
        r.resize(128 * KiB)
        np = pytest.importorskip("numpy")
        from_dlpack = getattr(np, "from_dlpack", None) or np._from_dlpack
        a = from_dlpack(r)
        assert a.size == r.size and a.__array_interface__["data"][0] == r.address
        del a


def test_view_takes_a_dtype_as_numpy_users_expect():
    np = pytest.importorskip("numpy")
    with cp.Region(8 * KiB) as r:
        a = r.view(np.float32)
        assert a.dtype == np.float32 and a.size == 2 * KiB and a.flags.writeable
        a[:] = 1.0
        assert not cp.is_zero(r)
        with pytest.raises(BufferError):
            r.resize(16 * KiB)
        del a
        assert r.view("q").dtype == np.int64
        assert r.view().format == "B"


def test_view_of_a_format_without_numpy_is_a_cast_memoryview(monkeypatch):
    monkeypatch.setitem(sys.modules, "numpy", None)     # import numpy fails
    with cp.Region(8 * KiB) as r:
        v = r.view("q")
        assert v.format == "q" and len(v) == KiB
        v.release()
        with pytest.raises(TypeError, match="needs numpy"):
            r.view(float)


def test_len_of_a_closed_region_is_an_error_and_it_is_false():
    r = cp.Region(4096)
    assert len(r) == 4096 and r
    r.close()
    with pytest.raises(ValueError, match="the Region is closed"):
        len(r)
    assert not r and r.size == 0
