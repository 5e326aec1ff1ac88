"""Region: private anonymous memory the package owns, resized at page-table speed.

A Region is itself a buffer (its native base type, ``_fast.RegionMemory``,
exports the memory and counts the exports in C): ``memoryview(region)``,
``numpy.frombuffer(region)`` and ``bytes(region)`` work on every supported
Python.  ``close``, ``resize`` and ``move`` refuse with ``BufferError`` while
any export lives (as ``mmap.resize`` does); every export holds a reference
to the Region, so the memory is unmapped only once the last one is gone.
No view can ever point at unmapped memory.  The end of a ``with`` block
closes the Region without refusing: memory a view still uses is let go
with that view, and the block's own exception is never replaced.

Moves and resizes go through ``mremap`` to destinations congruent with the
source modulo 1 GiB, so the kernel moves whole PUD (1 GiB) or PMD (2 MiB)
entries instead of copying 512 PTEs per 2 MiB.  A grow to less than 1 GiB
that cannot stay in place lets the kernel pick the place (one system call,
as ``mmap.resize``) and keeps only the congruence modulo 2 MiB that such a
region can use, moving once more where the kernel's place lacks it.
"""

from __future__ import annotations

import array
import errno
import operator
import os
import time
import warnings
from dataclasses import dataclass
from typing import Any, overload

from ._errors import HugePagesUnavailable
from ._fast import RegionMemory
from ._native import ffi, lib
from ._system import (
    address_space_limit as _address_space_limit,
    hugetlb_pages,
    memory_locked as _memory_locked,
    thp_mode as _thp_mode,
)
from ._units import (
    GiB,
    KiB,
    MiB,
    as_int as _as_int,
    format_size as _fmt_size,
    parse_size as _parse_size,
    short_repr as _short_repr,
    shown as _shown,
)

#: Page sizes by name: (bytes, kind).
PAGE_SIZES = {
    "4k": (4 * KiB, lib.CP_REGION_NORMAL),
    "2m": (2 * MiB, lib.CP_REGION_THP),
    "1g": (1 * GiB, lib.CP_REGION_HUGETLB),
}
_NAME_OF_BYTES = {b: n for n, (b, _) in PAGE_SIZES.items()}

#: Moves and resizes keep the address modulo this: the largest page-table
#: entry the kernel moves whole (a PUD on x86-64).
CONGRUENCE = 1 * GiB

#: move() targets: (residue modulo CONGRUENCE).  Each is aligned to its own
#: level and deliberately NOT to the next one, as in the kernel's
#: mremap_test, so a coincidental higher alignment never flatters a result.
ALIGNMENTS = {
    "pte": 4 * KiB,     # page-aligned, not 1 MiB-aligned (8 KiB: see move())
    "1m": 1 * MiB,      # 1 MiB-aligned, not 2 MiB-aligned
    "pmd": 2 * MiB,     # 2 MiB-aligned, not 1 GiB-aligned
    "pud": 0,           # 1 GiB-aligned
}

#: Populate in slices so Ctrl-C is answered between them.
_POPULATE_SLICE = 256 * MiB

#: populate(threads="auto") measures before it spreads the page faults: four
#: _PROBE-byte probes, on one thread, several, several and one, and the rest
#: on several only where the slower of their probes was at least
#: _SPREAD_GAIN faster than the quicker of one thread's: the kernel's fault
#: path does not scale everywhere (docs/results.md, "The measurements
#: behind the code's numbers").
_PROBE = 32 * MiB
_SPREAD_GAIN = 1.2
#: The most threads populate spreads over (a fault-bound kernel path gains
#: little from more).
_POPULATE_MAX_THREADS = 64

#: What the last populate(threads="auto") of each page size found:
#: {"threads": chosen, "tried": n, "one_gbps": ..., "spread_gbps": ...,
#: "speedup": spread / one}.  `python -m clearpages info` reports it.
POPULATE_FINDINGS: dict[str, dict[str, Any]] = {}


def _populate_threads_arg(threads: Any) -> int | str:
    if isinstance(threads, str) and threads.strip().lower() == "auto":
        return "auto"
    n = _as_int(threads)
    if n is None:
        raise TypeError("threads takes an int from 1 to %d (the most a populate spreads "
                        "its faults over) or 'auto' (measure, then spread only where that "
                        "pays), not %s" % (_POPULATE_MAX_THREADS, _shown(threads)))
    if not 1 <= n <= _POPULATE_MAX_THREADS:
        raise ValueError("threads must be from 1 to %d (the most a populate spreads its "
                         "faults over) or 'auto', not %d" % (_POPULATE_MAX_THREADS, n))
    return n



#: fork= values: what a forked child sees of the region.
FORK = {
    "keep": 0,                              # a copy-on-write copy, as of any memory
    "wipe": lib.CP_PROTECT_WIPEONFORK,      # zeros where the region is
    "drop": lib.CP_PROTECT_DONTFORK,        # nothing mapped there
}


def _protect_flags(lock: Any, dump: Any, fork: Any) -> int:
    for name, v in (("lock", lock), ("dump", dump)):
        if not isinstance(v, bool):
            raise TypeError("%s takes True or False, not %s" % (name, _shown(v)))
    if not isinstance(fork, str) or fork not in FORK:
        raise (ValueError if isinstance(fork, str) else TypeError)(
            "fork must be 'keep' (a child gets a copy), 'wipe' (a child reads zeros) or "
            "'drop' (nothing mapped in a child), not %s" % _short_repr(fork))
    return ((lib.CP_PROTECT_LOCK if lock else 0) | (0 if dump else lib.CP_PROTECT_NODUMP)
            | FORK[fork])


def _memlock_text() -> str:
    """This process's lock limit and what it has locked, in words."""
    import resource

    soft, _ = resource.getrlimit(resource.RLIMIT_MEMLOCK)
    limit = "unlimited" if soft == resource.RLIM_INFINITY else _fmt_size(soft)
    locked = _memory_locked()
    return "this process may lock %s (RLIMIT_MEMLOCK) and has %s locked" % (
        limit, _fmt_size(locked))


def _protect_error(err: int, failed: int, size: int, what: str = "a region of %s") -> OSError:
    """The error for a lock=, dump= or fork= the system refused."""
    region = what % _fmt_size(size)
    if failed == lib.CP_PROTECT_LOCK:
        msg = ("cannot lock %s in memory (mlock): %s; raise the limit (`ulimit -l` in the "
               "shell that starts Python, LimitMEMLOCK= for a systemd service, memlock in "
               "/etc/security/limits.conf) or lock less" % (region, _memlock_text()))
        if err == errno.EPERM:
            msg = "cannot lock %s in memory (mlock): not permitted; %s" % (
                region, _memlock_text())
    elif failed == lib.CP_PROTECT_WIPEONFORK:
        msg = ("cannot wipe %s in forked children: MADV_WIPEONFORK needs Linux 4.14 or "
               "newer; use fork='drop' (nothing mapped in a child)" % region)
    elif failed == lib.CP_PROTECT_DONTFORK:
        msg = "cannot keep %s out of forked children (MADV_DONTFORK)" % region
    else:
        msg = "cannot keep %s out of core dumps (MADV_DONTDUMP)" % region
    return OSError(err, "%s (%s)" % (msg, os.strerror(err)))


@dataclass(frozen=True)
class Backing:
    """What the kernel actually gave a region, from /proc/self/smaps (bytes).

    The kernel may merge a region's mapping with a neighbouring one of the
    same kind (another region, or anonymous memory the program mapped right
    beside it); smaps then describes the two as one.  The counts (rss,
    anon_huge_pages) are the region's own even so: for a mapping that
    extends past the region they come from the page tables over the
    region's range alone (PAGEMAP_SCAN, Linux 6.7+; on older kernels rss
    from the pagemap's present bits, which also count pages that map the
    zero page, and anon_huge_pages at most the mapping's and at most rss).  What describes
    a mapping (kernel_page_size, thp_eligible, vm_flags) is the shared
    mapping's, which the merge made the same as the region's.
    """

    rss: int                 #: resident: the region's pages that hold memory
    anon_huge_pages: int     #: of those, backed by transparent huge pages
    hugetlb: int             #: backed by hugetlb pages (never merged)
    kernel_page_size: int    #: largest KernelPageSize of its mappings
    thp_eligible: bool       #: THPeligible of every mapping
    mappings: int            #: how many kernel mappings (VMAs) it spans
    #: VmFlags every mapping has: "lo" locked, "dd" not dumped, "wf" wiped
    #: in a child, "dc" not in a child, "hg" huge-page advised, ...
    vm_flags: frozenset[str] = frozenset()
    #: of its mappings, how many extend past the region (merged with a neighbour)
    merged: int = 0

    @property
    def huge(self) -> int:
        """Bytes backed by huge pages of either kind."""
        return self.anon_huge_pages + self.hugetlb

    def __call__(self) -> Backing:
        # Region.backing was a method: r.backing() still gives the same.
        _was_a_method("backing")
        return self


class _Bytes(int):
    """A count of bytes that a call gives back as it is: Region.huge_pages
    was a method, and r.huge_pages() still works."""

    def __call__(self) -> int:
        _was_a_method("huge_pages")
        return int(self)


def _was_a_method(name: str) -> None:
    warnings.warn("Region.%s is a property, like size and page_size: drop the ()" % name,
                  DeprecationWarning, stacklevel=3)


def _hugetlb_error(size: int, page_bytes: int, err: int,
                   what: str = "a region of %s") -> HugePagesUnavailable:
    pool = hugetlb_pages(page_bytes)
    need = size // page_bytes
    page = _fmt_size(page_bytes)
    if pool["nr"] is None:
        msg = ("%s hugetlb pages are not available on this system (no %s): the CPU or "
               "kernel lacks them; use page_size='2m' or '4k'"
               % (page, pool["path"].rsplit("/", 1)[0]))
    else:
        usable = max(0, (pool["free"] or 0) - (pool["reserved"] or 0))
        # The pool's size that serves this request beside what is taken
        # now: for the sysfs file and the boot line alike.
        total = pool["nr"] + need - usable
        msg = (what + " needs %d hugetlb page%s of %s, but only %d of %d %s free "
               "and unreserved; reserve more as root with `echo %d > %s` (or boot with "
               "hugepagesz=%s hugepages=%d)") % (
                  _fmt_size(size), need, "" if need == 1 else "s", page, usable,
                  pool["nr"], "is" if usable == 1 else "are",
                  total, pool["path"],
                  page.replace(" GiB", "G").replace(" MiB", "M"), total)
    return HugePagesUnavailable(err, "%s (%s)" % (msg, os.strerror(err)))


def _check_size(size: Any, what: str = "size") -> int:
    n = _parse_size(size, what, minimum=1)
    if n > _address_space_limit():
        raise ValueError("%s %d is larger than the address space (%s)"
                         % (what, n, _fmt_size(_address_space_limit())))
    return n


class Region(RegionMemory):
    """Private anonymous memory: ``Region(size, *, page_size="4k", populate=False)``.

    size: bytes, an int or a string such as "64M" or "1G" (as everywhere
    in the package).
    page_size: "4k" (base pages), "2m" (2 MiB-aligned, MADV_HUGEPAGE: the
    kernel backs it with transparent huge pages where it can), "1g" (hugetlb
    1 GiB pages, which must be reserved in advance), "auto" (the largest of
    those the size fills and the system can give), or the size in bytes.
    The size rounds up to a whole number of pages.  populate=True faults
    every page in now (MADV_POPULATE_WRITE), so first touches cost nothing.

    For secrets: lock=True locks the pages in memory as they are touched
    (never written to swap; RLIMIT_MEMLOCK applies), dump=False leaves
    them out of core dumps, fork= says what a forked child sees: "keep"
    (a copy-on-write copy), "wipe" (zeros) or "drop" (nothing mapped).
    They hold across resize and move.

    ``view()`` gives a writable memoryview (numpy.frombuffer works on it);
    while any view lives, close/resize/move raise BufferError.
    ``clearpages.clear(region)`` and ``clear_many([...])`` take it directly.
    """

    def __init__(self, size: int | str, *, page_size: str | int = "4k",
                 populate: bool = False, lock: bool = False, dump: bool = True,
                 fork: str = "keep", threads: int | str = 1) -> None:
        size = _check_size(size)
        if not isinstance(populate, bool):
            raise TypeError("populate takes True or False, not %s" % _shown(populate))
        threads = _populate_threads_arg(threads)
        name = self._page_size_name(page_size, size)
        flags = _protect_flags(lock, dump, fork)
        if name == "auto":
            name = self._auto(size)
            if name == "1g":
                try:
                    self._map_pages(size, name)
                except HugePagesUnavailable:
                    # Taken between the look at the pool and the mapping.
                    name = "2m" if _thp_mode() not in (None, "never") else "4k"
        if self.closed:
            self._map_pages(size, name)
        #: What the region keeps from swap, core dumps and children.
        self.lock, self.dump, self.fork = lock, dump, fork
        if self._kind == lib.CP_REGION_HUGETLB:
            # Never mapped in a child already (MADV_DONTFORK, see _map);
            # MADV_WIPEONFORK does not apply to hugetlb memory.
            flags &= ~lib.CP_PROTECT_WIPEONFORK
            self.fork = "drop"
        self._flags = flags
        if flags:
            err, failed = self._protect(flags)
            if err:
                mapped = self._size
                self._close()
                raise _protect_error(err, failed, mapped)
        if populate:
            self.populate(threads=threads)

    # ---- making -------------------------------------------------------

    @staticmethod
    def _page_size_name(page_size: Any, size: int) -> str:
        if isinstance(page_size, str) and page_size.strip().lower() == "auto":
            return "auto"
        try:
            n = _parse_size(page_size, "page_size")
        except ValueError:
            n = -1
        except TypeError:
            n = -2
        if n in _NAME_OF_BYTES:
            return _NAME_OF_BYTES[n]
        raise (TypeError if n == -2 else ValueError)(
            "page_size must be '4k', '2m', '1g' or 'auto' (any spelling of 4 KiB, 2 MiB or "
            "1 GiB: 4096, '2M', '1GiB'), not %s" % _short_repr(page_size))

    @staticmethod
    def _auto(size: int) -> str:
        if size >= GiB:
            pool = hugetlb_pages(GiB)
            need = -(-size // GiB)
            if (pool["free"] or 0) - (pool["reserved"] or 0) >= need:
                return "1g"
        if size >= 2 * MiB and _thp_mode() not in (None, "never"):
            return "2m"
        return "4k"

    def _map_pages(self, size: int, name: str) -> None:
        page, kind = PAGE_SIZES[name]
        # Rounded up to whole pages and placed by the native type (its geometry).
        err, size = self._map(size, kind, page.bit_length() - 1, _address_space_limit(),
                              CONGRUENCE)
        if err == errno.EOVERFLOW:
            raise ValueError("size %d rounds up to more than the address space" % size)
        if err:
            if kind == lib.CP_REGION_HUGETLB and err in (errno.ENOMEM, errno.EINVAL):
                raise _hugetlb_error(size, page, err)
            if err == errno.ENOMEM:
                raise MemoryError("cannot map a region of %s with %s pages: %s"
                                  % (_fmt_size(size), name, os.strerror(err)))
            raise OSError(err, "mmap of a %s region failed: %s"
                          % (_fmt_size(size), os.strerror(err)))
        self._page_name = name
        self._page = page
        self._kind = kind

    # ---- state --------------------------------------------------------

    @property
    def address(self) -> int:
        """Start address of the memory (changes on resize and move)."""
        self._check_open()
        return self._address

    @property
    def size(self) -> int:
        """Bytes, a whole number of pages (0 once closed)."""
        return self._size

    def __len__(self) -> int:
        self._check_open()
        return self._size

    def __bool__(self) -> bool:
        # Not len(): a closed Region is false, as it was, rather than an error.
        return not self.closed

    @property
    def page_size(self) -> int:
        """Bytes per page asked for: 4096, 2 MiB or 1 GiB.  For "2m" the
        kernel may still use base pages somewhere: see backing."""
        return self._page

    @property
    def page_size_name(self) -> str:
        """"4k", "2m" or "1g" (what "auto" chose)."""
        return self._page_name

    def _check_open(self) -> None:
        if self.closed:
            lost = getattr(self, "_lost", None)
            if self._forked_away:
                lost = ("a forked child does not inherit a hugetlb Region or one made "
                        "with fork='drop' (MADV_DONTFORK), so it reads as closed here")
            raise ValueError("the Region is closed" + (": " + lost if lost else ""))

    def _lost_check(self, what: str, err: int) -> int:
        """A move that could not put the memory back (CP_REGION_LOST) has
        left the Region closed (the native type owns nothing any more):
        raise, naming the cause.  Otherwise err."""
        if err & lib.CP_REGION_UNPROTECTED:
            # Done, but the new memory lacks lock=, dump= or fork=: again,
            # to learn which (or to find it passes now).
            err, failed = self._protect(self._flags)
            if err:
                raise _protect_error(err, failed, self._size,
                                     "the region, %%s after the %s," % what)
            return 0
        if err & lib.CP_REGION_LOST:
            err &= ~lib.CP_REGION_LOST
            self._lost = ("a failed %s could not put its memory back (%s): another "
                          "mapping took part of its old address range meanwhile, so the "
                          "memory was unmapped" % (what, os.strerror(err)))
            raise OSError(err, "the Region is closed: %s" % self._lost)
        return err

    # ---- buffers ------------------------------------------------------

    @overload
    def view(self) -> memoryview: ...
    @overload
    def view(self, dtype: Any) -> Any: ...

    def view(self, dtype: Any = None) -> Any:
        """A writable, flat memoryview of unsigned bytes over the region
        (the same as ``memoryview(region)``); with a dtype, a writable numpy
        array of it over the whole region (``numpy.frombuffer(region,
        dtype)``; without numpy, a format string such as "f" gives
        ``memoryview(region).cast("f")``).  Either is a view: while it
        lives, close, resize and move raise BufferError."""
        self._check_open()
        if dtype is None:
            return memoryview(self)
        try:
            import numpy
        except ImportError:
            if isinstance(dtype, str):
                # Any struct format: typeshed lists the literal ones only.
                return memoryview(self).cast(dtype)  # type: ignore[call-overload]
            raise TypeError("Region.view(%r) needs numpy; without it, pass a struct "
                            "format such as 'f' or 'q'" % (dtype,)) from None
        region: Any = self      # a buffer, which numpy's stubs do not list
        return numpy.frombuffer(region, dtype=dtype)

    def _clearpages_discard(self) -> None:
        self.discard()

    def _clearpages_discard_pages(self, pages: Any, page_size: Any) -> None:
        self.discard_pages(pages, page_size)

    # ---- work ---------------------------------------------------------

    def clear(self, **kw: Any) -> None:
        """clearpages.clear(self, **kw); method="discard" madvises the pages away."""
        from ._core import clear

        clear(self, **kw)

    def discard(self, start: int = 0, stop: int | None = None) -> None:
        """Zero [start, stop) of the region (the whole region by default) by
        handing its pages back (MADV_DONTNEED): the kernel supplies zero
        pages on the next touch.  Correct because the memory is private and
        anonymous.  start and stop must be multiples of the region's page
        size (stop may also be the size); ValueError otherwise.  hugetlb
        and locked (lock=True) regions are cleared in place instead: a
        discarded hugetlb page returns to the shared pool and its refault
        could then fail with SIGBUS, and the kernel does not discard locked
        pages."""
        self._check_open()
        size, page = self._size, self._page
        if start == 0 and stop is None:
            self._discard_all()
            return
        lo, hi = self._range(start, size if stop is None else stop)
        if lo == hi:
            return
        self._discard_pages_of(array.array("q", range(lo // page, -(-hi // page))), page)

    def _clears_in_place(self) -> bool:
        # A discarded hugetlb page returns to the shared pool (its refault
        # could then fail with SIGBUS); the kernel refuses MADV_DONTNEED on
        # locked memory.
        return self._kind == lib.CP_REGION_HUGETLB or self.lock

    def _discard_all(self) -> None:
        if self._clears_in_place():
            from ._core import clear

            clear(self)
            return
        err = self._discard()
        if err:
            raise OSError(err, "madvise(MADV_DONTNEED): %s" % os.strerror(err))

    def _range(self, start: Any, stop: Any) -> tuple[int, int]:
        size, page = self._size, self._page
        ok = all(isinstance(v, int) and not isinstance(v, bool) for v in (start, stop))
        if not ok or not 0 <= start <= stop <= size:
            raise (ValueError if ok else TypeError)(
                "discard takes 0 <= start <= stop <= %d (the region's size) in ints, "
                "not (%r, %r)" % (size, start, stop))
        for name, v in (("start", start), ("stop", stop)):
            if v % page and v != size:
                raise ValueError(
                    "discard hands back whole pages: %s=%d is not a multiple of the "
                    "region's page size (%s); round it to %d or %d"
                    % (name, v, _fmt_size(page), v // page * page, -(-v // page) * page))
        return int(start), int(stop)

    def discard_pages(self, pages: Any, page_size: Any = None) -> None:
        """Discard the listed pages (page i is [i*page_size, (i+1)*page_size));
        what ``clear_pages(region, pages, method="discard")`` does.
        page_size defaults to the region's and must be a multiple of it:
        a huge page is handed back whole or not at all."""
        from ._core import _page_indices

        self._check_open()
        if page_size is None:
            page_size = self._page
        page_size = _parse_size(page_size, "page_size", minimum=1)
        if page_size % self._page:
            raise ValueError(
                "page_size %s is not a multiple of this region's page size (%s): the "
                "kernel hands back a %s page whole or not at all; use page_size=%d or "
                "a multiple" % (_fmt_size(page_size), _fmt_size(self._page),
                                _fmt_size(self._page), self._page))
        self._discard_pages_of(_page_indices(pages), page_size)

    def _discard_pages_of(self, idx: Any, page_size: int) -> None:
        if self._clears_in_place():
            from ._core import clear_pages

            clear_pages(self, idx, page_size=page_size)
            return
        from ._core import PageIndexError
        from ._native import ffi

        # Held (an export) while the GIL is released, so a resize or close
        # from another thread is refused meanwhile.
        hold = memoryview(self)
        try:
            n = len(idx)
            bad = ffi.new("size_t *")
            err = lib.cp_region_discard_pages(
                self._address, self._size, ffi.from_buffer("int64_t[]", idx), n,
                page_size, bad)
        finally:
            hold.release()
        if err == errno.EINVAL and bad[0] < n:
            count = -(-self._size // page_size)
            raise PageIndexError(
                "page index %d (position %d) is outside the region: it has %d page%s of "
                "%d bytes, so indices run from 0 to %d"
                % (idx[bad[0]], bad[0], count, "" if count == 1 else "s", page_size,
                   count - 1))
        if err:
            raise OSError(err, "madvise(MADV_DONTNEED): %s" % os.strerror(err))

    def populate(self, threads: int | str = 1) -> None:
        """Fault in every page now, writable (contents are kept).  threads:
        spread the faults over that many threads, each on its own part; "auto"
        measures one thread against several on the first pages and spreads
        the rest only where that was faster (POPULATE_FINDINGS says what it
        found)."""
        self._check_open()
        t = _populate_threads_arg(threads)
        # Hold the memory (an export) while the GIL is released in each
        # slice, so a resize or close from another thread is refused.
        hold = memoryview(self)
        address, size = self._address, self._size
        try:
            start = 0
            if isinstance(t, str):
                t, start = self._probe_populate(address, size)
            for off in range(start, size, _POPULATE_SLICE):
                n = min(_POPULATE_SLICE, size - off)
                err = lib.cp_region_populate_threads(address + off, n, self._page, self._kind,
                                                     t)
                if err:
                    if self._kind == lib.CP_REGION_HUGETLB:
                        raise _hugetlb_error(size, self._page, err)
                    if err == errno.ENOMEM:
                        raise MemoryError("cannot populate %s: out of memory"
                                          % _fmt_size(size))
                    raise OSError(err, "populating the region failed: %s"
                                  % os.strerror(err))
        finally:
            hold.release()

    def _probe_populate(self, address: int, size: int) -> tuple[int, int]:
        """threads="auto": (threads for the rest, bytes faulted in already).
        Four probes in turn, one thread, several, several, one; several
        threads are used for the rest only where the slower of their probes
        beat the quicker of one thread's by _SPREAD_GAIN: a stall in either
        (the kernel compacting memory for the first huge pages, another
        program) keeps one thread, which is never slower than itself.  The
        region must hold four probes, else one thread (too little to gain)."""
        probe = max(_PROBE, self._page)
        tried = min(len(os.sched_getaffinity(0)), 4)
        if tried < 2 or size < 4 * probe:
            return 1, 0
        clock = time.perf_counter
        took: dict[int, list[float]] = {1: [], tried: []}
        for i, n in enumerate((1, tried, tried, 1)):
            t0 = clock()
            err = lib.cp_region_populate_threads(address + i * probe, probe, self._page,
                                                 self._kind, n)
            if err:
                return 1, 0     # the slices report it
            took[n].append(max(clock() - t0, 1e-9))
        one, spread = probe / min(took[1]), probe / max(took[tried])
        chosen = tried if spread >= one * _SPREAD_GAIN else 1
        POPULATE_FINDINGS[self._page_name] = {
            "threads": chosen, "tried": tried, "one_gbps": one / 1e9,
            "spread_gbps": spread / 1e9, "speedup": spread / one, "probe": probe}
        return chosen, 4 * probe

    @property
    def backing(self) -> Backing:
        """What the kernel gave, summed over the region's mappings in
        /proc/self/smaps (read anew at each look); a mapping shared with a
        neighbour counts only the region's own pages (see Backing)."""
        self._check_open()
        start, end = self._address, self._address + self._size
        fields = {"Rss": 0, "AnonHugePages": 0, "Private_Hugetlb": 0,
                  "Shared_Hugetlb": 0, "KernelPageSize": 0}
        eligible, mappings, merged = True, 0, 0
        flags: frozenset[str] | None = None
        here: dict[str, int] | None = None      # the mapping being read, if it is ours
        shared: list[tuple[int, int, dict[str, int]]] = []

        with open("/proc/self/smaps") as f:
            for line in f:
                head = line.split(None, 1)[0] if line.strip() else ""
                if "-" in head and not head.endswith(":"):
                    lo, hi = (int(x, 16) for x in head.split("-"))
                    here = None
                    if lo < end and hi > start:
                        mappings += 1
                        here = fields
                        if lo < start or hi > end:
                            here = dict.fromkeys(fields, 0)
                            shared.append((max(lo, start), min(hi, end), here))
                    continue
                if here is None:
                    continue
                key = head[:-1]
                if key in here:
                    kb = int(line.split()[1]) * KiB
                    here[key] = max(here[key], kb) if key == "KernelPageSize" \
                        else here[key] + kb
                elif key == "THPeligible":
                    eligible = eligible and line.split()[1] == "1"
                elif key == "VmFlags":
                    got = frozenset(line.split()[1:])
                    flags = got if flags is None else flags & got
        for lo, hi, part in shared:
            merged += 1
            fields["KernelPageSize"] = max(fields["KernelPageSize"], part["KernelPageSize"])
            fields["Private_Hugetlb"] += part["Private_Hugetlb"]
            fields["Shared_Hugetlb"] += part["Shared_Hugetlb"]
            rss, huge = self._own_pages(lo, hi, part)
            fields["Rss"] += rss
            fields["AnonHugePages"] += huge
        return Backing(rss=fields["Rss"], anon_huge_pages=fields["AnonHugePages"],
                       hugetlb=fields["Private_Hugetlb"] + fields["Shared_Hugetlb"],
                       kernel_page_size=fields["KernelPageSize"],
                       thp_eligible=eligible and mappings > 0, mappings=mappings,
                       vm_flags=flags or frozenset(), merged=merged)

    @staticmethod
    def _own_pages(lo: int, hi: int, whole: dict[str, int]) -> tuple[int, int]:
        """rss and anon_huge_pages of [lo, hi), part of a mapping whose smaps
        totals (whole) cover its neighbour too."""
        if whole["Private_Hugetlb"] or whole["Shared_Hugetlb"]:
            return 0, 0             # hugetlb: smaps counts no Rss for it either
        out = ffi.new("uint64_t[2]")
        exact = ffi.new("int *")
        err = lib.cp_pages_resident(lo, hi - lo, out, out + 1, exact)
        if err:
            raise OSError(err, "cannot count the resident pages of a region's mapping "
                          "shared with a neighbour: %s" % os.strerror(err))
        rss, huge = int(out[0]), int(out[1])
        if not exact[0]:
            huge = min(whole["AnonHugePages"], rss)
        return rss, huge

    @property
    def huge_pages(self) -> _Bytes:
        """Bytes of the region the kernel backs with huge pages right now."""
        return _Bytes(self.backing.huge)

    # ---- moving -------------------------------------------------------

    def _piece(self) -> int:
        # A hugetlb region that grew is several mappings; mremap takes one
        # at a time, so hugetlb regions move page by page (each a PUD entry).
        return self._page if self._kind == lib.CP_REGION_HUGETLB else 0

    # resize(new_size) is the native type's: an exact int within the
    # address space goes straight to the system calls; anything else comes
    # to _resize_slow, and a failure to _resize_failed, which explain.

    def _resize_slow(self, new_size: Any) -> None:
        new_size = _check_size(new_size, "new_size")
        self._check_open()
        self._resize(new_size)

    def _resize_failed(self, err: int, new_size: int) -> None:
        if err == errno.EOVERFLOW:
            raise ValueError("new_size %d rounds up to more than the address space"
                             % new_size)
        err = self._lost_check("resize", err)
        if not err:
            return
        if self.lock and err in (errno.EAGAIN, errno.ENOMEM, errno.EPERM):
            raise _protect_error(err, lib.CP_PROTECT_LOCK, new_size,
                                 "the locked region grown to %s")
        if self._kind == lib.CP_REGION_HUGETLB and err == errno.ENOMEM:
            raise _hugetlb_error(new_size - self._size, self._page, err,
                                 "growing the region by %s")
        if err == errno.ENOMEM:
            raise MemoryError("cannot grow the region to %s: %s"
                              % (_fmt_size(new_size), os.strerror(err)))
        raise OSError(err, "resizing the region failed: %s" % os.strerror(err))

    def move(self, alignment: str) -> int:
        """Move the region to a fresh address with the given alignment:
        "pte" (4 KiB, not 1 MiB), "1m" (1 MiB, not 2 MiB), "pmd" (2 MiB, not
        1 GiB) or "pud" (1 GiB).  Returns the new address.  A "pte" move
        also lands on an address that differs from the current one modulo
        2 MiB, so the kernel can move nothing but PTEs (the "misaligned"
        case of the kernel's mremap_test); the others keep the address
        modulo 2 MiB as the name says.  For tests and
        benchmarks of page-table moves.  A region keeps its page alignment:
        a "2m" region moves only to "pmd" or "pud", a "1g" one to "pud"."""
        if not isinstance(alignment, str) or alignment not in ALIGNMENTS:
            raise (ValueError if isinstance(alignment, str) else TypeError)(
                "alignment must be one of %s, not %s"
                % (", ".join(map(repr, ALIGNMENTS)), _short_repr(alignment)))
        residue = ALIGNMENTS[alignment]
        if alignment == "pte" and self._address % (2 * MiB) == residue:
            # Congruent addresses share their PMD boundaries, and the kernel
            # moves the whole PMDs between them; a PTE move is one that
            # cannot, so it goes where the address modulo 2 MiB differs.
            residue += 4 * KiB
        if residue % self._page:
            raise ValueError("a region of %s pages cannot be %s-aligned"
                             % (self._page_name, alignment))
        err = self._lost_check("move", self._move_congruent(self._piece(), CONGRUENCE, residue))
        if err:
            raise OSError(err, "moving the region failed: %s" % os.strerror(err))
        return self._address

    def move_to(self, address: int) -> None:
        """Move the region to exactly `address`, which must be a multiple of
        the page size, free, and not overlap the region: ValueError for the
        first two faults of the caller, FileExistsError where something is
        mapped there."""
        try:
            dst = operator.index(address)
        except TypeError:
            raise TypeError("address must be an int, not %s" % _shown(address)) from None
        self._check_open()
        if dst <= 0:
            raise ValueError("address must be a positive multiple of the page size (%s), "
                             "not %d" % (_fmt_size(self._page), dst))
        if dst % self._page:
            raise ValueError("address %#x is not a multiple of the page size (%s)"
                             % (dst, _fmt_size(self._page)))
        if dst + self._size > _address_space_limit():
            raise ValueError("address %#x + size is past the address space" % dst)
        if dst < self._address + self._size and self._address < dst + self._size:
            raise ValueError("cannot move the region onto itself: [%#x, %#x) overlaps "
                             "[%#x, %#x)" % (dst, dst + self._size, self._address,
                                             self._address + self._size))
        err = self._lost_check("move", self._move_to(self._piece(), dst))
        if err == errno.EEXIST:
            raise FileExistsError(err, "cannot move the region to %#x: something is "
                                  "mapped in [%#x, %#x)" % (dst, dst, dst + self._size))
        if err:
            raise OSError(err, "moving the region failed: %s" % os.strerror(err))

    # ---- lifetime -----------------------------------------------------

    def close(self) -> None:
        """Unmap the memory.  BufferError while views exist (an explicit
        close is a claim that nothing uses the memory any more, so a live
        view is reported); closing twice is allowed.  The end of a ``with``
        block differs: see __exit__."""
        self._close()

    def __enter__(self) -> Region:
        self._check_open()
        return self

    def __exit__(self, kind: Any, value: Any, tb: Any) -> None:
        """Close the Region; a view that outlives the block (a numpy array
        made from it) keeps the memory until the view goes, as when a
        Region is dropped.  Never raises BufferError, and never replaces an
        exception raised in the block."""
        try:
            self._close_when_released()
        except Exception:
            if kind is None:
                raise

    def __reduce_ex__(self, protocol: Any) -> Any:
        raise TypeError("a Region is process memory and cannot be pickled; "
                        "pickle bytes(region) instead")

    def __copy__(self) -> Any:
        raise TypeError("a Region is process memory and cannot be copied; make another "
                        "Region and copy the bytes (new.view()[:] = region.view()), or "
                        "take bytes(region)")

    def __deepcopy__(self, memo: Any) -> Any:
        return self.__copy__()

    def __repr__(self) -> str:
        name = getattr(self, "_page_name", "?")
        if self.closed:
            return "<clearpages.Region closed page_size=%s>" % name
        return ("<clearpages.Region %s at %#x page_size=%s>"
                % (_fmt_size(self._size), self._address, name))
