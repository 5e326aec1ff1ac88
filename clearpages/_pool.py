"""Pool: zeroed memory before it is asked for.

Fresh memory is zeroed by the kernel one page fault at a time, on the
program's critical path (about 10 GB/s where one core writes at 70).  A
Pool owns memory (Regions' mappings: 4 KiB, 2 MiB or 1 GiB pages) cut into
blocks, and a native thread zeroes the blocks the program gives back while
it works, with the routine ``auto`` runs over memory not used soon
(streaming stores, which leave the program's own data in the cache).  So
``acquire()`` hands out a zeroed, resident block at once.

The machinery is C (``csrc/core/pool.c``: the block states, the thread,
its pace; ``csrc/pyext/pool_type.c``: the block objects, acquire without
the GIL); this module checks arguments and puts numbers and failures into
messages.
"""

from __future__ import annotations

import errno
import math
import operator
import os
from dataclasses import dataclass
from typing import Any

from . import _dispatch, _units
from ._fast import BlockMemory, PoolCore
from ._native import lib
from ._region import FORK, PAGE_SIZES, Region, _hugetlb_error
from ._units import GiB, MiB, format_size as _fmt_size, parse_size as _parse_size

#: The default pace above the low-water mark, in bytes a second: about 3%
#: of what one core's streaming stores reach on a Zen 4 guest (70-80 GB/s)
#: and 7% of its memory bandwidth (29-34 GB/s), so a memory-bound program on
#: the other cores keeps most of its bandwidth, while the pool still refills
#: a 2 MiB block in 1 ms and a 1 GiB one in half a second.  Below the
#: low-water mark, or while a caller waits, the thread works flat out: the
#: program would wait otherwise.  docs/results.md has what a co-running loop
#: lost.
DEFAULT_MAX_RATE = 2 * GiB

#: max_rate="max": no limit (the C side's UINT64_MAX).
_NO_LIMIT = (1 << 64) - 1

#: Memory is mapped this much at a time (whole blocks, at least one) when
#: the pool grows: address space only, faulted in block by block.
GROW_BYTES = 64 * MiB

#: The thread zeroes this much between two looks at its pace (and at
#: close, and at a caller waiting).
STEP = 1 * MiB

#: reuse=: where a block given back is zeroed (core/pool.c, "reuse").
REUSE = {"auto": lib.CP_POOL_REUSE_AUTO, "hot": lib.CP_POOL_REUSE_HOT,
         "cold": lib.CP_POOL_REUSE_COLD}


def _one_of(value: Any, what: str, choices: dict[str, Any], meanings: str) -> None:
    """value must be one of the names of choices: a str (TypeError naming
    them) among them (ValueError saying what each means)."""
    if not isinstance(value, str):
        names = ["'%s'" % n for n in choices]
        raise TypeError("%s takes %s or %s, not %s" % (what, ", ".join(names[:-1]),
                                                       names[-1], type(value).__name__))
    if value not in choices:
        raise ValueError("%s must be %s, not %r" % (what, meanings, value))


def _is_int(v: Any) -> bool:
    return _units.as_int(v) is not None


def _size_arg(value: Any, what: str, minimum: int = 1) -> int:
    if not (_is_int(value) or isinstance(value, str)):
        raise TypeError("%s takes a byte count (an int, or a string such as '2M' or '1G'), "
                        "not %s" % (what, type(value).__name__))
    return _parse_size(value, what, minimum=minimum)


def _rate_arg(max_rate: Any) -> int:
    """max_rate in bytes a second for the C side."""
    if max_rate is None:
        return DEFAULT_MAX_RATE
    if isinstance(max_rate, str) and max_rate.strip().lower() == "max":
        return _NO_LIMIT
    if isinstance(max_rate, float) and not isinstance(max_rate, bool):
        if math.isinf(max_rate) and max_rate > 0:
            return _NO_LIMIT
        if not (max_rate >= 0) or max_rate != int(max_rate):
            raise ValueError("max_rate must be a whole number of bytes a second >= 0, "
                             "'max' or None, not %r" % (max_rate,))
        max_rate = int(max_rate)
    if not (_is_int(max_rate) or isinstance(max_rate, str)):
        raise TypeError("max_rate takes bytes a second (an int, or a string such as '2G'), "
                        "'max' (no limit), 0 (zero only below low_water) or None (the "
                        "default pace), not %s" % type(max_rate).__name__)
    return min(_parse_size(max_rate, "max_rate"), _NO_LIMIT - 1)


def _count_arg(value: Any, what: str) -> int:
    if not _is_int(value):
        raise TypeError("%s takes a number of blocks (an int >= 0), not %s"
                        % (what, type(value).__name__))
    n = operator.index(value)
    if n < 0:
        raise ValueError("%s must be a number of blocks >= 0, not %d" % (what, n))
    return n


def _rate_text(rate: int) -> str:
    if rate >= _NO_LIMIT:
        return "flat out"
    if rate == 0:
        return "not at all"
    return "at most %.3g GB/s" % (rate / 1e9)


@dataclass(frozen=True)
class PoolStats:
    """What a Pool has done (``Pool.stats()``); bytes, counts and seconds."""

    block_size: int
    blocks: int                  #: mapped
    fresh: int                   #: mapped, never touched or trimmed: read zero, fault in
    ready: int                   #: zeroed and resident: what acquire hands out at once
    dirty: int                   #: given back, not yet zeroed
    busy: int                    #: being zeroed, faulted in or trimmed
    out: int                     #: the program's
    capacity: int | None         #: bytes at most, None: no bound
    #: blocks the thread keeps ready flat out now: low_water, raised by one
    #: for each acquire that found none ready (halved each second none does),
    #: at most the blocks the capacity holds
    ready_target: int
    acquires: int                #: blocks handed out
    acquires_ready: int          #: ... ready when asked for
    acquires_waited: int         #: ... not: zeroed or faulted in by the caller, or waited for
    wait_seconds: float          #: what those took, in all
    wait_max_seconds: float      #: the longest of them
    refused: int                 #: acquire_nowait's None, acquire's timeouts
    releases: int
    zeroed_bytes: int            #: by the pool's thread
    zero_seconds: float          #: its time spent zeroing (its sleeps not counted)
    paced_bytes: int             #: zeroed by the thread at max_rate
    paced_seconds: float         #: the wall time of those, sleeps included
    caller_zeroed_bytes: int     #: zeroed by callers that found no block ready
    populated_bytes: int         #: fresh blocks faulted in
    grows: int                   #: times the pool mapped more memory
    trimmed_bytes: int           #: handed back to the kernel by trim()
    checked: int                 #: blocks read back before leaving (debug)
    release_zeroed_bytes: int    #: zeroed at their release, for the next acquire (reuse)
    release_zero_seconds: float  #: the releasers' time spent on that
    reuse_trials: int            #: trials of the two ways of reuse="auto"
    #: reuse="auto" may zero these blocks at their release (below the
    #: streaming threshold and up to hot_max)
    reuse_tried: bool
    #: where a block given back is zeroed now: "hot" (at once, by the
    #: releaser, and handed out next) or "cold" (by the thread)
    reusing: str
    closed: bool
    forked: bool                 #: this process is a forked child of the pool's
    error: str | None            #: the thread's last failure (faulting in, growing)

    @property
    def zero_rate(self) -> float | None:
        """Bytes a second the thread zeroes while it works (None: no work yet)."""
        return self.zeroed_bytes / self.zero_seconds if self.zero_seconds else None

    @property
    def pace(self) -> float | None:
        """Bytes a second reached at max_rate, sleeps included (None: none paced)."""
        return self.paced_bytes / self.paced_seconds if self.paced_seconds else None


class Block(BlockMemory):
    """One block of a Pool: zeroed when it was handed out, and itself a
    writable buffer (``memoryview(blk)``, ``numpy.frombuffer(blk)``,
    ``clearpages.clear(blk)``) and a DLPack tensor of uint8
    (``torch.from_dlpack(blk)``, ``numpy.from_dlpack(blk)``; no numpy needed).

    ``blk.release()`` (or ``pool.release(blk)``) gives it back; BufferError
    while a view of it lives (a memoryview, an array, a tensor from DLPack).
    As a context manager it is given back at the end of the block, or when
    its last view goes; dropped, it goes back too.
    """

    __slots__ = ()

    def __enter__(self) -> Block:
        if self.released:
            raise ValueError("the Block was released")
        return self

    def __exit__(self, kind: Any, value: Any, tb: Any) -> None:
        self._release_when_unused()

    def __reduce_ex__(self, protocol: Any) -> Any:
        raise TypeError("a Block is process memory and cannot be pickled; "
                        "pickle bytes(blk) instead")

    def __copy__(self) -> Any:
        raise TypeError("a Block is a pool's memory and cannot be copied; take bytes(blk), "
                        "or acquire another block and copy the bytes")

    def __deepcopy__(self, memo: Any) -> Any:
        return self.__copy__()

    def __repr__(self) -> str:
        state = " released" if self.released else ""
        return "<clearpages.Block %s at %#x%s>" % (_fmt_size(self.size), self.address, state)


class Pool(PoolCore):
    """``Pool(block_size, *, capacity=None, page_size="auto", max_rate=None,
    reuse="auto")``:
    memory cut into blocks that a native thread zeroes off the critical path.

    block_size: bytes (an int or a string such as "2M"), rounded up to whole
    pages.  capacity: the most memory the blocks may take (bytes, at least
    one block; None: no bound); the pool maps memory as it is needed.
    page_size: "4k", "2m" (transparent huge pages), "1g" (hugetlb, reserved
    in advance) or "auto" (the largest a block fills that the system gives),
    as for Region.

    The thread keeps ``low_water`` blocks (default 1) ready, working flat
    out while fewer are or while a caller waits; above that it zeroes what
    the program gives back at ``max_rate`` bytes a second (None: the
    default pace, DEFAULT_MAX_RATE; 0: not at all, so blocks are zeroed
    only when needed; "max": no limit), so that a program on the other
    cores loses little of its memory bandwidth.  A program that takes
    blocks faster than that pace would zero them itself, on its critical
    path and with the same bandwidth: so (max_rate not 0) each acquire that
    finds no block ready raises the number the thread zeroes ready flat out
    by one, up to 64 MiB of blocks and never past the capacity, and each
    second without such an acquire halves the rise (``stats().ready_target``).

    reuse: where a block given back is zeroed.  "cold": by the thread, with
    streaming stores (the program's own data stays in the cache; the next
    acquire takes whatever block is ready, out of the cache).  "hot": at
    once, by release() (or the array's free), with ordinary stores while
    the lines the program wrote are still in the cache, and handed out by
    the next acquire: that pays where the program writes most of each block
    and takes the next soon (as glibc's heap recycles a freed chunk for the
    next calloc), and costs release() the zeroing.  "auto" (default): hot
    for blocks below the streaming threshold (``thresholds().nt_min``, no
    routine forced) and up to ``thresholds().hot_max``, what the cache
    keeps for the program (a larger block always waits for the thread),
    with short trials of cold now and then that time the program as a
    whole (runs of releases each way, in turn); cold where it is 10%
    faster.  Until the pool has timed one streaming zero, blocks given back
    wait for the thread.  ``stats().reusing`` says which way holds now,
    ``stats().reuse_tried`` whether "auto" tries hot for these blocks.

    fork: what a forked child sees (the child has no pool thread and its
    copy of the Pool hands out nothing): "keep" (default: blocks it holds
    stay usable copies), "wipe" (they read as zeros) or "drop" (nothing is
    mapped there).  debug: read every block back (the zero scan) before it
    leaves; None follows CLEARPAGES_POOL_DEBUG.

    ``acquire()`` returns a zeroed, resident Block; ``with Pool(...) as
    pool:`` closes it at the end (memory a block still uses goes with the
    last block); ``close()`` refuses with BufferError while blocks are out.
    """

    #: max_rate=None: bytes a second above the low-water mark.
    DEFAULT_MAX_RATE = DEFAULT_MAX_RATE

    def __init__(self, block_size: int | str, *, capacity: int | str | None = None,
                 page_size: str | int = "auto", max_rate: int | str | float | None = None,
                 low_water: int = 1, fork: str = "keep", debug: bool | None = None,
                 reuse: str = "auto") -> None:
        size = _size_arg(block_size, "block_size")
        if not (isinstance(page_size, str) or _is_int(page_size)):
            raise TypeError("page_size takes '4k', '2m', '1g' or 'auto' (or the bytes: "
                            "4096, '2M', '1G'), not %s" % type(page_size).__name__)
        name = Region._page_size_name(page_size, size)
        if name == "auto":
            name = Region._auto(size)
        page, kind = PAGE_SIZES[name]
        size = -(-size // page) * page
        cap = None if capacity is None else _size_arg(capacity, "capacity")
        if cap is not None and cap < size:
            raise ValueError("capacity %s is less than one block (%s with %s pages); "
                             "give at least %d, or None for no bound"
                             % (_fmt_size(cap), _fmt_size(size), name, size))
        rate = _rate_arg(max_rate)
        low = _count_arg(low_water, "low_water")
        _one_of(fork, "fork", FORK, "'keep' (a child's blocks are copies), 'wipe' (they "
                "read as zeros) or 'drop' (nothing mapped in a child)")
        _one_of(reuse, "reuse", REUSE, "'auto' (the pool times which pays), 'hot' (a block "
                "given back is zeroed at once, in the cache, and handed out next) or "
                "'cold' (the thread zeroes it)")
        if debug is None:
            debug = _dispatch.state().config.pool_debug
        elif not isinstance(debug, bool):
            raise TypeError("debug takes True, False or None (CLEARPAGES_POOL_DEBUG), "
                            "not %s" % _units.shown(debug))
        max_blocks = 0 if cap is None else cap // size
        grow = max(1, GROW_BYTES // size)
        if max_blocks:
            grow = min(grow, max_blocks)
        protect = FORK[fork]
        if kind == lib.CP_REGION_HUGETLB:
            protect &= ~lib.CP_PROTECT_WIPEONFORK      # hugetlb is never in a child
            fork = "drop"
        #: What the pool was made with.
        self.page_size_name, self.page_size, self.fork = name, page, fork
        self.capacity, self.max_rate, self.low_water = cap, rate, low
        self.debug, self.reuse = debug, reuse
        err = self._open(size, page, kind, page.bit_length() - 1, max_blocks, grow, low, rate,
                         min(STEP, size), protect, int(debug), Block, REUSE[reuse])
        if err:
            raise OSError(err, "cannot start the pool's thread: %s" % os.strerror(err))

    # ---- blocks --------------------------------------------------------

    # acquire(*, timeout=None), acquire_nowait() and release(blk) are the
    # native type's; a timeout comes here to be checked, and a failure to
    # _take_failed, which says what it means.

    def _acquire_slow(self, *args: Any, **kw: Any) -> Block:
        if args:
            raise TypeError("acquire takes no positional arguments (timeout= is a "
                            "keyword), got %d" % len(args))
        unknown = set(kw) - {"timeout"}
        if unknown:
            raise TypeError("acquire got an unexpected keyword argument %r; it takes "
                            "timeout= (seconds, or None)" % sorted(unknown)[0])
        timeout = kw.get("timeout")
        if timeout is None:
            blk: Block = self.acquire()
            return blk
        if not isinstance(timeout, (int, float)) or isinstance(timeout, bool):
            try:
                if isinstance(timeout, bool):
                    raise TypeError
                timeout = float(operator.index(timeout))
            except TypeError:
                raise TypeError("timeout takes seconds (an int or a float >= 0) or None "
                                "(wait as long as it takes), not %s"
                                % type(timeout).__name__) from None
        if not (timeout >= 0):
            raise ValueError("timeout must be seconds >= 0 or None, not %r" % (timeout,))
        result: Block = self._acquire_for(float(timeout))
        return result

    def _take_failed(self, err: int, seconds: float) -> Any:
        if err == errno.EAGAIN:
            st = self.stats()
            raise TimeoutError(
                errno.ETIMEDOUT, "no block became free within %g s: %d of %d blocks are out%s"
                % (seconds, st.out, st.blocks,
                   " and the pool is at its capacity (%s)" % _fmt_size(self.capacity)
                   if self.capacity is not None and st.blocks * self.block_size
                   + self.block_size > self.capacity else ""))
        if err == errno.ECANCELED:
            raise ValueError("the Pool is closed")
        if err == errno.ECHILD:
            raise ValueError("this Pool belongs to the parent process: a forked child has "
                             "no pool thread, and its copy hands out no blocks; make a new "
                             "Pool in the child")
        if err == errno.EIO:
            raise RuntimeError(
                "a block of the pool was not zero as it was about to leave (debug read it "
                "back): something wrote to it after it was released (a view or pointer kept "
                "past release()), or clearpages has a bug; the block goes back to be "
                "zeroed again")
        if self.page_size_name == "1g" and err in (errno.ENOMEM, errno.EFAULT, errno.EINVAL):
            raise _hugetlb_error(self.block_size, self.page_size, err, "a pool block of %s")
        if err == errno.ENOMEM:
            raise MemoryError("cannot map or fault in a pool block of %s: out of memory"
                              % _fmt_size(self.block_size))
        raise OSError(err, "the pool could not prepare a block: %s" % os.strerror(err))

    # ---- the pool ------------------------------------------------------

    def stats(self) -> PoolStats:
        """The pool's counters now."""
        s = self._stats()
        ns = 1e-9
        return PoolStats(
            block_size=self.block_size, blocks=s["blocks"], fresh=s["fresh"],
            ready=s["ready"], dirty=s["dirty"], busy=s["busy"], out=s["out"],
            capacity=self.capacity, ready_target=s["ready_target"], acquires=s["acquires"],
            acquires_ready=s["acquires_ready"], acquires_waited=s["acquires_waited"],
            wait_seconds=s["wait_ns"] * ns, wait_max_seconds=s["wait_max_ns"] * ns,
            refused=s["refused"], releases=s["releases"], zeroed_bytes=s["zeroed_bytes"],
            zero_seconds=s["zero_ns"] * ns, paced_bytes=s["paced_bytes"],
            paced_seconds=s["paced_ns"] * ns, caller_zeroed_bytes=s["caller_zeroed_bytes"],
            populated_bytes=s["populated_bytes"], grows=s["grows"],
            trimmed_bytes=s["trimmed_bytes"], checked=s["checked"],
            release_zeroed_bytes=s["release_zeroed_bytes"],
            release_zero_seconds=s["release_zero_ns"] * ns, reuse_trials=s["reuse_trials"],
            reuse_tried=bool(s["reuse_tried"]),
            reusing="hot" if s["reuse_hot"] else "cold", closed=bool(s["closed"]),
            forked=bool(s["forked"]), error=os.strerror(s["error"]) if s["error"] else None)

    def set_pace(self, *, max_rate: int | str | float | None = None,
                 low_water: int | None = None) -> None:
        """Change the pace: max_rate as in Pool() (None: the default pace) and
        low_water (None: as it is)."""
        rate = _rate_arg(max_rate)
        low = self.low_water if low_water is None else _count_arg(low_water, "low_water")
        self._set_pace(rate, low)
        self.max_rate, self.low_water = rate, low

    def trim(self) -> int:
        """Hand the idle blocks (ready, and given back but not yet zeroed)
        back to the kernel (MADV_DONTNEED); they read as zero and are faulted
        in again when needed.  Returns the bytes handed back.  The thread
        then makes low_water blocks ready again: set low_water=0 first to
        keep the memory away."""
        err, done = self._trim()
        if err:
            raise OSError(err, "the kernel did not take the pool's idle blocks back "
                          "(madvise(MADV_DONTNEED): %s); %s were" % (os.strerror(err),
                                                                     _fmt_size(done)))
        return int(done)

    def describe(self, *, low_water: int | None = None) -> str:
        """What the pool does, in one sentence (low_water: say it for that
        low-water mark instead of the pool's own)."""
        low = self.low_water if low_water is None else low_water
        cap = ("up to %d (%s)" % (self.capacity // self.block_size, _fmt_size(self.capacity))
               if self.capacity is not None else "as many as asked for")
        rise = ("" if self.max_rate == 0 else
                " (one more for each acquire that finds none ready, halved each second "
                "none does)")
        return ("blocks of %s on %s pages, %s; zeroed by the pool's thread with %s (the "
                "routine for memory not used soon), flat out while fewer than %d %s "
                "ready%s or a caller waits, %s otherwise; fresh blocks are faulted in by "
                "the thread one at a time (MADV_POPULATE_WRITE) while fewer than %d %s ready"
                "; %s"
                % (_fmt_size(self.block_size), self.page_size_name, cap, self.routine,
                   low, "is" if low == 1 else "are", rise, _rate_text(self.max_rate),
                   low, "is" if low == 1 else "are", self._reuse_text()))

    def _reuse_text(self) -> str:
        if self.reuse == "cold":
            return "a block given back waits for the thread (reuse='cold')"
        if self.reuse == "hot":
            return ("a block given back is zeroed at once by release(), with ordinary "
                    "stores, and handed out next (reuse='hot')")
        s = self._stats()
        if not s["reuse_tried"]:
            return ("a block given back waits for the thread: reuse='auto' zeroes a block "
                    "at its release only where a plain clear of it takes ordinary stores "
                    "(below the streaming threshold, no routine forced) and the cache can "
                    "keep it (up to hot_max)")
        return ("a block given back waits for the thread, or is zeroed at once by "
                "release(), with ordinary stores, and handed out next, whichever short "
                "trials from time to time find the program faster with (now: "
                "%s)" % ("at once" if s["reuse_hot"] else "the thread"))

    @property
    def closed(self) -> bool:
        """True once closed."""
        return self._stats()["closed"] != 0

    def close(self) -> None:
        """Stop the thread and unmap the memory.  BufferError while blocks
        are out (an explicit close claims that nothing uses the memory any
        more); closing twice is allowed."""
        if self._close(False) == errno.EBUSY:
            n = self._stats()["out"]
            raise BufferError("cannot close a Pool while %d block%s of it %s out (release "
                              "them, and drop numpy arrays made under zeroed_arrays, first; "
                              "or leave its with block, which lets the memory go with the "
                              "last block)" % (n, "" if n == 1 else "s",
                                               "is" if n == 1 else "are"))

    def __enter__(self) -> Pool:
        return self

    def __exit__(self, kind: Any, value: Any, tb: Any) -> None:
        """Close; memory a block still uses goes with the last block."""
        self._close(True)

    def __reduce_ex__(self, protocol: Any) -> Any:
        raise TypeError("a Pool is process memory and a thread, and cannot be pickled")

    def __copy__(self) -> Any:
        raise TypeError("a Pool is process memory and a thread, and cannot be copied; "
                        "make another Pool")

    def __deepcopy__(self, memo: Any) -> Any:
        return self.__copy__()

    def __repr__(self) -> str:
        s = self._stats()
        if s["closed"]:
            return "<clearpages.Pool closed block_size=%s>" % _fmt_size(self.block_size)
        return ("<clearpages.Pool block_size=%s page_size=%s blocks=%d ready=%d out=%d>"
                % (_fmt_size(self.block_size), self.page_size_name, s["blocks"], s["ready"],
                   s["out"]))


__all__ = ["DEFAULT_MAX_RATE", "Block", "Pool", "PoolStats"]
