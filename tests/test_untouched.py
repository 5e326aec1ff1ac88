"""Clears that leave never-touched memory alone.

A big, mostly untouched private anonymous buffer is cleared without making
it resident; every byte reads as zero afterwards.  What must still be
written is: a fully resident buffer, a private file mapping whose pages were
never touched (they hold the file's bytes), shared memory, a range
registered with userfaultfd, swapped-out pages; and a forked child checks
its own page tables, not its parent's.  Every public clear (clear,
clear_many, clear_pages, Region.clear) looks, and plan() says when.
"""

from __future__ import annotations

import ctypes
import mmap
import os
import tempfile

import pytest
from conftest import pages_permitting, run_python

import clearpages as cp
from clearpages import _dispatch, _policy, _region
from clearpages._native import ffi, lib

np = pytest.importorskip("numpy")

MiB = 1 << 20
GiB = 1 << 30
PAGE = mmap.PAGESIZE
MIN = _policy.UNTOUCHED_MIN

NOT_RUN, ALL_IN_USE, TRIMMED, NOTHING_TO_DROP, CANNOT = 0, 1, 2, 3, -1

pytestmark = pytest.mark.skipif(not os.path.exists("/proc/self/pagemap"),
                                reason="needs /proc/self/pagemap (Linux with /proc)")

libc = ctypes.CDLL(None, use_errno=True)
libc.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]


def resident() -> int:
    """Bytes of this process in memory (/proc/self/statm)."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * PAGE


def address(buf) -> int:
    return int(ffi.cast("uintptr_t", ffi.from_buffer("char[]", buf)))


def trim(buf):
    """(status, kept extents as (offset, length)) of cp_untouched_trim over buf."""
    c = ffi.from_buffer("char[]", buf)
    ext = ffi.new("struct cp_extent[1]", [(c, len(c))])
    out = ffi.new("struct cp_extent **")
    m = lib.cp_untouched_trim(ext, 1, out)
    status = lib.cp_untouched_last()
    if m == ffi.cast("size_t", -1):
        return status, None
    base = int(ffi.cast("uintptr_t", c))
    kept = [(int(ffi.cast("uintptr_t", out[0][i].addr)) - base, int(out[0][i].len))
            for i in range(m)]
    lib.cp_extents_free(out[0])
    return status, kept


def sparse(n: int, touched: int):
    """An n-byte np.zeros with `touched` pages written (nonzero), spread out."""
    a = np.zeros(n, dtype=np.uint8)
    where = (np.arange(touched) * (n // touched) + 12345) % n
    a[where] = 0xA5
    return a


@pytest.fixture(params=["pagemap_scan", "pagemap"])
def lookup(request):
    """Both ways of reading the page tables: the PAGEMAP_SCAN ioctl (Linux
    6.7+, where the kernel has it) and /proc/self/pagemap entry by entry."""
    lib.cp_untouched_use_pagemap(int(request.param == "pagemap"))
    yield request.param
    lib.cp_untouched_use_pagemap(0)


def test_a_mostly_untouched_gib_is_cleared_without_becoming_resident(lookup):
    a = sparse(GiB, 16)
    before = resident()
    cp.clear(a)
    grown = resident() - before
    assert grown <= 64 * MiB, grown
    assert lib.cp_untouched_last() == TRIMMED
    assert cp.is_zero(a) and not a.any()


def test_an_untouched_private_anonymous_mmap_too():
    m = mmap.mmap(-1, 256 * MiB, flags=mmap.MAP_PRIVATE)
    for off in range(0, len(m), 16 * MiB):
        m[off + 7] = 1
    before = resident()
    cp.clear(m)
    assert resident() - before <= 16 * MiB
    assert lib.cp_untouched_last() == TRIMMED
    assert cp.is_zero(m)
    m.close()


def test_a_fully_resident_buffer_is_cleared_exactly():
    a = np.full(MIN + 3 * PAGE + 5, 0x5A, dtype=np.uint8)
    whole = np.full(a.size + 2 * PAGE, 0x5A, dtype=np.uint8)
    inner = whole[PAGE:PAGE + a.size]
    cp.clear(inner)
    assert lib.cp_untouched_last() == ALL_IN_USE
    assert not inner.any()
    assert (whole[:PAGE] == 0x5A).all() and (whole[PAGE + a.size:] == 0x5A).all()


def test_pages_that_were_only_read_are_left_alone(lookup):
    """A read maps the shared zero page: it reads as zero, so it is skipped
    (where the kernel can say so); the contents are zero either way."""
    a = np.zeros(256 * MiB, dtype=np.uint8)
    assert cp.is_zero(a)            # reads every page
    a[::4 * MiB] = 1
    cp.clear(a)
    assert cp.is_zero(a)


def test_pages_handed_back_with_madvise_read_as_zero_and_are_skipped(lookup):
    m = mmap.mmap(-1, 64 * MiB, flags=mmap.MAP_PRIVATE)
    m.write(b"\x77" * len(m))
    base = address(m)
    assert libc.madvise(base + 8 * MiB, 48 * MiB, mmap.MADV_DONTNEED) == 0
    status, kept = trim(m)
    assert status == TRIMMED
    assert sum(n for _, n in kept) == 16 * MiB
    cp.clear(m)
    assert cp.is_zero(m)
    m.close()


def test_a_private_file_mapping_whose_pages_were_never_touched_is_cleared(lookup):
    """Its pages hold the file's bytes until written: never skipped."""
    with tempfile.TemporaryFile() as f:
        f.write(b"\x3c" * (MIN + 8 * PAGE))
        f.flush()
        with mmap.mmap(f.fileno(), 0, flags=mmap.MAP_PRIVATE,
                       prot=mmap.PROT_READ | mmap.PROT_WRITE) as m:
            status, kept = trim(m)
            assert kept is None and status == NOTHING_TO_DROP
            cp.clear(m)
            assert cp.is_zero(m)
        f.seek(0)
        assert f.read(16) == b"\x3c" * 16        # private: the file is unchanged


def test_shared_memory_is_never_skipped():
    with tempfile.TemporaryFile() as f:
        f.truncate(MIN + PAGE)
        with mmap.mmap(f.fileno(), 0) as m:       # shared file mapping
            m[-1] = 9
            assert trim(m)[1] is None
            cp.clear(m)
            assert cp.is_zero(m)
        f.seek(0)
        assert f.read() == bytes(MIN + PAGE)
    with mmap.mmap(-1, MIN + PAGE) as m:          # shared anonymous
        m[5] = 1
        assert trim(m)[1] is None
        cp.clear(m)
        assert cp.is_zero(m)
    fd = os.memfd_create("cp-test") if hasattr(os, "memfd_create") else None
    if fd is not None:
        os.ftruncate(fd, MIN)
        os.pwrite(fd, b"\x11" * 100, MIN - 100)
        with mmap.mmap(fd, MIN, flags=mmap.MAP_PRIVATE) as m:
            assert trim(m)[1] is None
            cp.clear(m)
            assert cp.is_zero(m)
        os.close(fd)


UFFD = r"""
import ctypes, mmap, os, struct, fcntl, sys
from clearpages._native import ffi, lib
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
fd = libc.syscall(323, os.O_CLOEXEC | os.O_NONBLOCK)        # userfaultfd
if fd < 0:
    print("skip: userfaultfd: %s" % os.strerror(ctypes.get_errno())); sys.exit(0)
api = bytearray(struct.pack("QQQ", 0xAA, 0, 0))
try:
    fcntl.ioctl(fd, 0xc018aa3f, api)                            # UFFDIO_API
except OSError as e:
    print("skip: UFFDIO_API: %s" % e); sys.exit(0)
n = 64 << 20
m = mmap.mmap(-1, n, flags=mmap.MAP_PRIVATE)
c = ffi.from_buffer("char[]", m)
base = int(ffi.cast("uintptr_t", c))
def status():
    ext = ffi.new("struct cp_extent[1]", [(c, n)])
    out = ffi.new("struct cp_extent **")
    lib.cp_untouched_trim(ext, 1, out)
    return lib.cp_untouched_last()
assert status() == 2, status()                 # unregistered: untouched pages dropped
reg = bytearray(struct.pack("QQQQ", base, n, 1, 0))            # MODE_MISSING
try:
    fcntl.ioctl(fd, 0xc020aa00, reg)                            # UFFDIO_REGISTER
except OSError as e:
    print("skip: UFFDIO_REGISTER: %s" % e); sys.exit(0)
print("registered", status())                  # a handler would supply the bytes: kept
"""


def test_a_range_registered_with_userfaultfd_is_never_skipped():
    r = run_python(UFFD)
    if r.stdout.startswith("skip") or "Operation not permitted" in r.stderr:
        pytest.skip(r.stdout.strip() or "userfaultfd is not permitted here")
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["registered", str(NOTHING_TO_DROP)]


def _swap_on() -> bool:
    try:
        with open("/proc/swaps") as f:
            return len(f.read().splitlines()) > 1
    except OSError:
        return False


@pytest.mark.skipif(not _swap_on(), reason="no swap device here to page memory out to")
def test_swapped_out_pages_are_cleared():
    m = mmap.mmap(-1, MIN + 64 * PAGE, flags=mmap.MAP_PRIVATE)
    m.write(b"\x42" * len(m))
    base = address(m)
    if libc.madvise(base, len(m), 21) != 0:              # MADV_PAGEOUT
        pytest.skip("MADV_PAGEOUT: %s" % os.strerror(ctypes.get_errno()))
    cp.clear(m)
    assert cp.is_zero(m)
    m.close()


FORK = r"""
import os, numpy as np, clearpages as cp
a = np.zeros(256 << 20, dtype=np.uint8)
a[5] = 1
cp.clear(a)                       # the parent looks (and keeps its own view of /proc)
pid = os.fork()
if pid == 0:
    a[::4096] = 3                 # the child writes pages the parent never touched
    cp.clear(a)
    os._exit(0 if cp.is_zero(a) else 1)
_, st = os.waitpid(pid, 0)
print(os.waitstatus_to_exitcode(st), int(cp.is_zero(a)))
"""


def test_a_forked_child_reads_its_own_page_tables():
    r = run_python(FORK)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["0", "1"]


def test_every_clear_looks():
    n = 128 * MiB
    a = sparse(n, 8)
    cp.clear_pages(a, np.arange(n // PAGE))
    assert lib.cp_untouched_last() == TRIMMED and cp.is_zero(a)

    bufs = [sparse(32 * MiB, 2) for _ in range(3)]
    cp.clear_many(bufs)
    assert lib.cp_untouched_last() == TRIMMED and all(cp.is_zero(b) for b in bufs)

    b = sparse(n, 8)
    cp.clear(b, hot=(0, PAGE))
    assert lib.cp_untouched_last() == TRIMMED and cp.is_zero(b)
    untouched = np.zeros(n, dtype=np.uint8)         # every page of the rest dropped
    cp.clear(untouched, hot=(0, PAGE))
    cp.clear(untouched, hot=False)
    cp.clear(untouched, hot=True)
    assert cp.is_zero(untouched)

    c = sparse(n, 8)
    cp.clear(c, threads=2, method="rep_stosb" if "rep_stosb" in cp.methods() else "libc")
    assert lib.cp_untouched_last() == TRIMMED and cp.is_zero(c)

    with cp.Region(n) as r:
        v = memoryview(r)
        v[::16 * MiB] = b"\x01" * 8
        del v
        before = resident()
        r.clear()
        assert lib.cp_untouched_last() == TRIMMED
        assert resident() - before <= 8 * MiB
        assert cp.is_zero(r)


def test_small_clears_do_not_look_and_plan_says_so():
    a = np.ones(MIN - PAGE, dtype=np.uint8)
    lib.cp_untouched_trim(ffi.new("struct cp_extent[1]", [(ffi.NULL, 0)]), 1,
                          ffi.new("struct cp_extent **"))        # status: -1
    cp.clear(a)
    assert lib.cp_untouched_last() == CANNOT and not a.any()    # not looked at again
    assert not cp.plan(MIN - 1).skips_untouched
    assert "less" in cp.plan(MIN - 1).untouched
    p = cp.plan(MIN)
    assert p.skips_untouched and "never touched" in p.untouched
    assert cp.plan(MIN, count=4).skips_untouched     # nbytes is the total, as clear_many counts


def test_an_odd_extent_list_keeps_every_byte_outside_untouched_pages(lookup):
    """Unaligned extents over a partly touched mapping: what is kept covers
    every touched page's part of each extent, and nothing outside them."""
    m = mmap.mmap(-1, 9000 * PAGE, flags=mmap.MAP_PRIVATE)
    touched = [0, 1, 2, 100, 4095, 4096, 8000]
    for p in touched:
        m[p * PAGE + 1] = 1
    c = ffi.from_buffer("char[]", m)
    pieces = [(1000, 3 * PAGE), (99 * PAGE + 17, 5 * PAGE), (4090 * PAGE + 3, 20 * PAGE),
              (7000 * PAGE, 2000 * PAGE - 1)]
    ext = ffi.new("struct cp_extent[]", [(c + o, n) for o, n in pieces])
    out = ffi.new("struct cp_extent **")
    k = lib.cp_untouched_trim(ext, len(pieces), out)
    assert lib.cp_untouched_last() == TRIMMED
    base = int(ffi.cast("uintptr_t", c))
    kept = [(int(ffi.cast("uintptr_t", out[0][i].addr)) - base, int(out[0][i].len))
            for i in range(k)]
    lib.cp_extents_free(out[0])
    want = []
    for o, n in pieces:
        for p in touched:
            lo, hi = max(o, p * PAGE), min(o + n, (p + 1) * PAGE)
            if lo < hi:
                want.append((lo, hi - lo))
    merged = []
    for lo, n in sorted(want):
        if merged and merged[-1][0] + merged[-1][1] == lo:
            merged[-1] = (merged[-1][0], merged[-1][1] + n)
        else:
            merged.append((lo, n))
    assert kept == merged
    ffi.release(c)
    m.close()


def test_the_policy_decides_when_to_look():
    """One rule (core/policy.c): work of UNTOUCHED_MIN bytes or more, whatever
    the method and threads; with a hot range, the rest must be that large."""
    st = _dispatch.state()
    pol = _policy.native_policy(st.cpu, st.thresholds)
    for n, want in ((MIN - 1, False), (MIN, True), (GiB, True), (0, False)):
        assert _policy.decision(pol, n).skip_untouched is want
        assert _policy.decision(pol, n, 4, threads="auto").skip_untouched is want
        assert _policy.decision(pol, n, method="libc").skip_untouched is want
    assert not _policy.decision(pol, MIN + 10, hot_nbytes=11).skip_untouched
    assert _policy.decision(pol, MIN + 10, hot_nbytes=10).skip_untouched
    assert cp.plan(MIN + 10, hot=(0, 11)).skips_untouched is False


def test_is_zero_does_not_read_pages_never_touched():
    """A fresh private mapping of 4 KiB pages: is_zero reads only the touched
    pages (reading the others would fault the zero page into each), and the
    answer is the same."""
    m = mmap.mmap(-1, 256 * MiB, flags=mmap.MAP_PRIVATE)
    for off in range(PAGE, len(m), 32 * MiB):
        m[off + 5] = 0                  # touched, still zero
    assert cp.is_zero(m)
    assert lib.cp_untouched_last() == TRIMMED
    m[100 * MiB + 77] = 1               # a touched page that is not zero
    assert not cp.is_zero(m)
    m[100 * MiB + 77] = 0
    m[-1] = 1                           # the last byte: answered before the look
    lib.cp_untouched_trim(ffi.new("struct cp_extent[1]", [(ffi.NULL, 0)]), 1,
                          ffi.new("struct cp_extent **"))
    assert not cp.is_zero(m)
    assert lib.cp_untouched_last() == CANNOT            # no look was needed
    m.close()
    with tempfile.TemporaryFile() as f:                 # a file's pages are read
        f.truncate(MIN + PAGE)
        f.seek(MIN // 2)
        f.write(b"\x01")
        f.flush()
        with mmap.mmap(f.fileno(), 0, flags=mmap.MAP_PRIVATE) as fm:
            assert not cp.is_zero(fm)


@pytest.mark.parametrize("page_size", [4096, 1000, 6000, 3 * MiB + 8, 64])
def test_nonzero_pages_reads_only_touched_pages(lookup, page_size):
    m = mmap.mmap(-1, 64 * MiB, flags=mmap.MAP_PRIVATE)
    for off in (5, PAGE - 1, PAGE, 3 * MiB - 1, 3 * MiB, 40 * MiB + 123, len(m) - 1):
        m[off] = 1
    for off in range(8 * MiB, 9 * MiB, 997):          # touched, zero
        m[off] = 0
    got = list(cp.nonzero_pages(m, page_size))
    assert lib.cp_untouched_last() == TRIMMED
    a = np.frombuffer(m, dtype=np.uint8)
    pad = np.zeros(-(-a.size // page_size) * page_size, dtype=np.uint8)
    pad[:a.size] = a
    assert got == np.flatnonzero(pad.reshape(-1, page_size).any(axis=1)).tolist()
    del a
    m.close()


FORK_WHILE_CLEARING = r"""
import os, threading, numpy as np, clearpages as cp
stop = False
def loop():
    b = np.zeros(32 << 20, dtype=np.uint8)
    while not stop:
        b[::8 << 20] = 1
        cp.clear(b)                     # looks for untouched pages, again and again
t = threading.Thread(target=loop)
t.start()
codes = []
for _ in range(20):
    pid = os.fork()
    if pid == 0:
        a = np.zeros(64 << 20, dtype=np.uint8)
        a[::16 << 20] = 1
        cp.clear(a)                     # the child's own look: nothing held from the parent
        os._exit(0 if cp.is_zero(a) else 1)
    codes.append(os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]))
stop = True
t.join()
print(codes.count(0))
"""


def test_fork_while_another_thread_looks():
    r = run_python(FORK_WHILE_CLEARING, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["20"]


# ---- hugetlb (1 GiB pages) ------------------------------------------------


def test_an_untouched_1g_region_is_neither_cleared_nor_read(lookup, gigantic_pages):
    """A private anonymous hugetlb mapping (a 1g Region) reads as zero where
    no huge page backs it, as ordinary anonymous memory does: clear,
    is_zero and nonzero_pages leave those pages alone, so none is taken
    from the pool (a read would fault in a whole huge page, zeroed by the
    kernel); a page written is still found and cleared."""
    def free() -> int:
        return int(_region.hugetlb_pages(GiB)["free"])
    with pages_permitting(), cp.Region(2 * GiB, page_size="1g") as r:
        before = free()
        assert cp.is_zero(r)            # its first bytes not peeked at either
        assert len(cp.nonzero_pages(r, page_size=PAGE)) == 0
        assert free() == before
        cp.clear(r)
        assert lib.cp_untouched_last() == TRIMMED
        assert free() == before and r.backing.rss == 0
        r.view()[GiB + 5] = 7           # the second huge page only
        assert free() == before - 1
        assert not cp.is_zero(r)
        assert list(cp.nonzero_pages(r, page_size=PAGE)) == [GiB // PAGE]
        cp.clear(r)
        assert lib.cp_untouched_last() == TRIMMED
        assert r.view()[GiB + 5] == 0 and cp.is_zero(r)
        assert free() == before - 1


def test_a_hugetlb_file_mapped_private_is_never_skipped(gigantic_pages):
    """A hugetlb file (a memfd) mapped private: the pages this mapping has
    not touched hold the file's bytes, so they are read and cleared.  (In a
    child: a hugetlb fault with the pool empty is SIGBUS.)"""
    if not hasattr(os, "MFD_HUGE_1GB"):
        pytest.skip("os.memfd_create has no MFD_HUGE_1GB here")
    out = run_python(
        "import mmap, os\nimport clearpages as cp\nGiB = 1 << 30\n"
        "fd = os.memfd_create('cp-test', os.MFD_HUGETLB | os.MFD_HUGE_1GB)\n"
        "os.ftruncate(fd, GiB)\n"
        "shared = mmap.mmap(fd, GiB, flags=mmap.MAP_SHARED)\n"
        "shared[GiB // 2] = 9\n"
        "private = mmap.mmap(fd, GiB, flags=mmap.MAP_PRIVATE)\n"
        "print(cp.is_zero(private), private[GiB // 2])\n"
        "cp.clear(private)\n"
        "print(cp.is_zero(private), private[GiB // 2], shared[GiB // 2])\n")
    assert out.stdout.split() == ["False", "9", "True", "0", "9"], out.stderr[-2000:]

