"""clear, clear_many and clear_pages: buffers in, one native call out.

The per-call path for a small buffer is kept lean (one ``from_buffer``, two
comparisons, one native call) so that ``clear`` beats ``ctypes.memset`` even
at 4 KiB.  Anything larger than one chunk, threaded, or made of many pieces
becomes a native *job* run in time slices without the GIL, so Ctrl-C stops it
between slices and other Python threads run meanwhile.
"""

from __future__ import annotations

import array
import ctypes
import dataclasses
import os
import platform
import time
from collections.abc import Iterable, Sequence
from typing import Any, cast

from . import _adapt, _calibration, _config, _cpu, _policy
from ._native import ffi, lib
from ._routines import ALL_METHODS, BY_NAME, ROUTINES

#: How long one native time slice may run before Python gets control back
#: (signal handlers, KeyboardInterrupt).  Ctrl-C is answered within a slice
#: plus one chunk.
SLICE_NS = 40_000_000

_from_buffer = ffi.from_buffer
# Positional arguments and a pre-parsed type: the keyword form of
# from_buffer costs more than the clear itself at 4 KiB.
_CHARS = ffi.typeof("char[]")
_ONE = 1

#: clear_many acquires the buffers in C where id() is an object's address.
_VIEWS_IN_C = platform.python_implementation() == "CPython" and hasattr(lib, "cp_views_acquire")


class UnsupportedMethod(RuntimeError):
    """The routine needs a CPU feature (or build) this machine lacks."""


class PageIndexError(IndexError, ValueError):
    """A page index outside the buffer (an IndexError and a ValueError)."""


class _State:
    """Everything read once: the CPU, the variables, the thresholds, the routines."""

    def __init__(self, env: dict[str, str] | None = None) -> None:
        raw_cpu = _cpu.probe()
        config = (_config.read(env, _cpu.FEATURE_NAMES) if env is not None
                  else _config.read_environ(_cpu.FEATURE_NAMES))
        self.config = config
        self.raw_cpu = raw_cpu
        self.cpu = raw_cpu.without(config.disable)
        self.built = frozenset(r.name for r in ROUTINES if hasattr(lib, r.symbol))
        self.methods = tuple(r.name for r in ROUTINES
                             if _policy.usable(r.name, self.cpu, self.built))
        self.direct = {name: getattr(lib, BY_NAME[name].symbol) for name in self.methods}
        self.pointer = {name: ffi.addressof(lib, BY_NAME[name].symbol)
                        for name in self.methods}
        # Jobs call a streaming routine's unfenced entry for every extent and
        # fence once per thread: a fence per 4 KiB page cost a third of the
        # throughput of scattered pages.
        self.job_pointer = {name: ffi.addressof(lib, BY_NAME[name].unfenced or
                                                BY_NAME[name].symbol)
                            for name in self.methods}
        self.job_fence = {name: int(bool(BY_NAME[name].unfenced)) for name in self.methods}
        th = _policy.default_thresholds(self.cpu, self.built)
        self.calibration = _calibration.load(self.cpu, self.methods, config.calibration, th)
        if self.calibration is not None:
            th = self.calibration.thresholds
        if config.nt_threshold is not None:
            th = _policy.with_nt_threshold(th, config.nt_threshold)
        th = _policy.with_adaptive_band(self.cpu, th)
        self.thresholds = th
        self.forced = config.method
        if self.forced is not None:
            self.check("CLEARPAGES_METHOD=%s" % self.forced, self.forced)
        self.set_adaptive(config.adapt)
        # The lean path: sizes below `fast_limit` bytes take one direct call.
        f = self.forced
        self.fast_limit = th.chunk
        self.fast_small = th.vector_max
        self.fast_nt = th.nt_min
        self.fast_names = (f or "libc", f or th.temporal, f or th.streaming)
        self.fn_small, self.fn_temporal, self.fn_nt = (self.direct[n] for n in self.fast_names)

    def set_adaptive(self, on: bool) -> None:
        """Whether auto adapts (the learner is configured by activate())."""
        th = self.thresholds
        self.adapt_on = bool(on) and _adapt.AVAILABLE
        active = (self.adapt_on and self.forced is None
                  and th.adapt_min < th.adapt_max)
        # Single auto clears of adapt_lo <= n < adapt_hi bytes are timed
        # (both 0 when not adapting: no size is in the band).
        self.adapt_lo, self.adapt_hi = (th.adapt_min, th.adapt_max) if active else (0, 0)

    def activate(self) -> None:
        """Make this the state the C fast path and the learner follow."""
        if hasattr(lib, "cp_fast_configure"):
            small, temporal, nt = (self.pointer[n] for n in self.fast_names)
            lib.cp_fast_configure(self.fast_limit, self.fast_small, self.fast_nt,
                                  small, temporal, nt)
        _adapt.configure(self.thresholds, self.adapt_lo < self.adapt_hi)

    def missing(self, name: str) -> str | None:
        """Why this machine cannot run the routine, or None if it can."""
        r = BY_NAME[name]
        if name not in self.built:
            return "%s is not in this build (a portable build has only libc)" % name
        for feat in sorted(r.requires):
            if feat in self.cpu.disabled:
                return "%s needs %s, masked by CLEARPAGES_DISABLE" % (name, feat)
            if feat in self.raw_cpu.os_disabled:
                return ("%s needs %s, which the CPU has but the OS has not enabled "
                        "(its register state is off in XCR0)" % (name, feat))
            if feat not in self.cpu.features:
                return "%s needs %s, which this CPU lacks" % (name, feat)
        return None

    def check(self, what: str, name: str) -> None:
        why = self.missing(name)
        if why is not None:
            raise UnsupportedMethod("%s: %s" % (what, why))


_state = _State()
_state.activate()


def _fast_function() -> Any:
    """clear(buf) with default arguments, in C (csrc/pyfast.c): CPython only."""
    if platform.python_implementation() != "CPython" or not hasattr(lib, "cp_fast_function"):
        return None
    address = lib.cp_fast_function()
    return ctypes.cast(address, ctypes.py_object).value if address else None


#: f(buf) -> bool: True when it cleared buf, False when the general path must.
_fast_clear = _fast_function()


def reload_config(env: dict[str, str] | None = None) -> None:
    """Read the CLEARPAGES_* variables (and the calibration) again."""
    global _state
    state = _State(env)         # raises on a bad variable: nothing changes then
    state.activate()            # and forgets what adaptive auto had learned
    _state = state


def set_adaptive(on: bool) -> None:
    """Turn adaptive auto on or off for this process (until reload_config).

    Off, method="auto" runs the static choice that :func:`plan` describes,
    deterministically, as with CLEARPAGES_ADAPT=0.  Either way what was
    learned is forgotten.
    """
    st = _state
    st.set_adaptive(bool(on))
    st.activate()


def adaptive() -> bool:
    """True when auto adapts to this program's clears (CLEARPAGES_ADAPT,
    set_adaptive), a band of sizes exists and CLEARPAGES_METHOD forces nothing."""
    st = _state
    return st.adapt_lo < st.adapt_hi


# ---- buffers ------------------------------------------------------------


def _refuse(buf: Any, err: str) -> Any:
    """Explain why buf cannot be cleared as one extent; strided numpy arrays
    come back as their runs (addresses, lengths)."""
    try:
        mv = memoryview(buf)
    except TypeError:
        raise TypeError(
            "clearpages clears writable buffers (bytearray, memoryview, numpy array, "
            "mmap, array.array, ctypes array, Region), not %s" % type(buf).__name__
        ) from None
    with mv:
        if mv.readonly:
            raise TypeError("the %s is read-only; clearpages only clears writable "
                            "buffers and left it unchanged" % type(buf).__name__)
        if not mv.c_contiguous:
            # Fortran-ordered arrays too: from_buffer asks for C order.
            if type(buf).__module__.split(".")[0] == "numpy":
                return _numpy_runs(buf)
            raise ValueError(
                "the %s is not C-contiguous; pass a C-contiguous buffer or a numpy array "
                "(whose strided views clearpages clears run by run)" % type(buf).__name__)
    raise TypeError("cannot clear %s: %s" % (type(buf).__name__, err))


def _numpy_runs(a: Any) -> tuple[Any, Any, int]:
    """(addresses, lengths, nbytes) of the contiguous runs of a strided array."""
    import numpy as np

    # Innermost (smallest) strides last whatever the order, so that Fortran
    # order and transposes collapse into long runs: order does not matter.
    dims = sorted(((s, st) for s, st in zip(a.shape, a.strides) if s != 1),
                  key=lambda d: abs(d[1]), reverse=True)
    run = a.itemsize
    while dims and dims[-1][1] == run:
        run *= dims[-1][0]
        dims.pop()
    if a.size == 0:
        empty = np.zeros(0, dtype=np.uint64)
        return empty, empty, 0
    off = np.zeros(1, dtype=np.int64)
    for size, stride in dims:
        off = (off[:, None] + np.arange(size, dtype=np.int64) * stride).ravel()
    addrs = (off + a.__array_interface__["data"][0]).astype(np.uint64)
    lens = np.full(addrs.size, run, dtype=np.uint64)
    return addrs, lens, int(a.nbytes)


def _extent(buf: Any) -> tuple[Any, int, Any]:
    """(pointer, nbytes, runs): runs is None for one contiguous extent,
    else (addresses, lengths) of a strided buffer."""
    try:
        c = _from_buffer(_CHARS, buf, True)
        return c, len(c), None
    except (TypeError, BufferError, ValueError) as e:
        # The message, not the exception: its traceback would tie this frame
        # (and the callers' buffer exports) into a cycle only the GC frees.
        err = str(e)
    own = getattr(buf, "_clearpages_extent", None)
    if own is not None:
        ptr, n = own()
        return ptr, n, None
    addrs, lens, nbytes = _refuse(buf, err)
    return None, nbytes, (addrs, lens)


# ---- arguments ----------------------------------------------------------


def _check_method(method: str, region_ok: bool = False) -> None:
    if method == "auto" or method in ALL_METHODS:
        return
    if method == "discard":
        if region_ok:
            return
        raise ValueError("method 'discard' (madvise the pages away) applies only "
                         "to a clearpages.Region")
    raise ValueError("unknown method %r; use 'auto' or one of: %s%s"
                     % (method, ", ".join(ALL_METHODS),
                        " (or 'discard' for a Region)" if region_ok else ""))


def _check_threads(threads: Any) -> None:
    if threads == "auto" and isinstance(threads, str):
        return
    if isinstance(threads, bool) or not isinstance(threads, int) \
            or not 1 <= threads <= lib.CP_MAX_THREADS:
        raise ValueError("threads must be 'auto' or an int from 1 to %d, not %r"
                         % (lib.CP_MAX_THREADS, threads))


def _routine(method: str, nbytes: int, count: int, threads: Any) -> tuple[str, int, int]:
    """(routine name, threads, chunk) for this piece of work: the same choice
    as plan(), without building its reason on every call."""
    st = _state
    n_threads = (threads if threads != "auto" else
                 _policy.choose_threads(st.cpu, st.thresholds, nbytes))
    if method == "auto":
        name = st.forced or _policy.pick(st.thresholds, nbytes, count, n_threads)
    else:
        if method not in st.direct:
            st.check("method=%r" % method, method)
        name = method
    if n_threads == 1:
        return name, 1, st.thresholds.chunk
    return name, n_threads, _policy.chunk_for(st.thresholds, nbytes, n_threads)


# ---- running ------------------------------------------------------------


def _run(job: Any, name: str, chunk: int, threads: int) -> None:
    if job == ffi.NULL:
        raise MemoryError("clearpages: no memory for the list of extents")
    try:
        st = _state
        if lib.cp_job_configure(job, st.job_pointer[name], chunk, threads,
                                st.job_fence[name]) != 0:
            raise ValueError("bad job configuration: %s, %d threads" % (name, threads))
        run = lib.cp_job_run
        rc = 0
        while rc == 0:
            rc = run(job, SLICE_NS)     # back in Python between slices: Ctrl-C lands here
        if rc < 0:
            _job_failed(job, threads)
    finally:
        lib.cp_job_free(job)


def _job_failed(job: Any, threads: int) -> None:
    err = lib.cp_job_error(job)
    if err:
        raise OSError(err, "clearpages: cannot start the %d worker thread%s asked for (%s); "
                      "the buffer is partly cleared" % (threads - 1, "" if threads == 2 else "s",
                                                        os.strerror(err)))
    raise RuntimeError("clearpages: the native job failed; the buffer is partly cleared")


def _clear_one(ptr: Any, n: int, name: str, threads: int, chunk: int) -> None:
    if threads == 1 and n <= chunk:
        _state.direct[name](ptr, n)
    else:
        _run(lib.cp_job_new(ffi.new("char *[]", [ptr]), ffi.new("size_t[]", [n]), 1),
             name, chunk, threads)


def _clear_runs(runs: tuple[Any, Any], name: str, threads: int, chunk: int) -> None:
    addrs, lens = runs
    if len(addrs) == 0:
        return
    _run(lib.cp_job_new(ffi.cast("char *const *", _from_buffer(addrs)),
                        ffi.cast("size_t *", _from_buffer(lens)), len(addrs)),
         name, chunk, threads)


def clear(buf: Any, *, method: str = "auto", threads: int | str = 1,
          hot: tuple[int, int] | None = None) -> None:
    """Zero every byte of a writable buffer.

    method: "auto" or a name from :func:`methods` ("discard" for a Region).
    threads: an int >= 1 or "auto".  hot: a (start, stop) byte range cleared
    last with ordinary stores, so it is in cache when the caller touches it;
    the rest is cleared with streaming stores.
    """
    # `is`, not ==: True and 1.0 equal 1 but are not a thread count.
    if threads is _ONE and hot is None:
        st = _state
        # An explicit method this machine runs takes the same lean path.
        fn = None if method == "auto" else st.direct.get(method)
        if fn is None and method == "auto" and _fast_clear is not None:
            # All of it in C; what C declines (too large, no writable
            # contiguous buffer) goes to the general path, which explains.
            if not _fast_clear(buf):
                _clear(buf, method, threads, hot)
            return
        if fn is not None or method == "auto":
            try:
                c = _from_buffer(_CHARS, buf, True)
            except (TypeError, BufferError, ValueError):
                pass
            else:
                n = len(c)
                if n <= st.fast_limit:
                    if fn is not None:
                        fn(c, n)
                    elif st.adapt_lo <= n < st.adapt_hi:
                        _clear_adaptive(st, c, n)
                    # The same order as _policy.decide, so plan() tells the
                    # truth even when CLEARPAGES_NT_THRESHOLD is below vector_max.
                    elif n >= st.fast_nt:
                        st.fn_nt(c, n)
                    elif n < st.fast_small:
                        st.fn_small(c, n)
                    else:
                        st.fn_temporal(c, n)
                    return
    _clear(buf, method, threads, hot)


def _clear_adaptive(st: _State, c: Any, n: int) -> None:
    """One timed clear in the adaptive band, on the lean path."""
    ticket = lib.cp_adapt_choose(n, c)
    if ticket < 0:
        fn = st.fn_nt if n >= st.fast_nt else st.fn_small if n < st.fast_small \
            else st.fn_temporal
        fn(c, n)
        return
    fn = st.fn_nt if ticket & 1 else st.fn_small if n < st.fast_small else st.fn_temporal
    t = time.perf_counter_ns()      # CLOCK_MONOTONIC, as in C
    fn(c, n)
    lib.cp_adapt_record(n, ticket, time.perf_counter_ns() - t)


def _clear(buf: Any, method: str, threads: Any, hot: Any) -> None:
    _check_method(method, region_ok=True)
    _check_threads(threads)
    if method == "discard":
        discard: Any = getattr(buf, "_clearpages_discard", None)
        if discard is None:
            _check_method(method)       # raises: discard is for Regions
        if hot is not None:
            raise ValueError("hot= does not apply to method 'discard'")
        discard()
        return
    ptr, n, runs = _extent(buf)
    if runs is not None:
        if hot is not None:
            raise ValueError("hot= needs a contiguous buffer; this one is strided")
        name, n_threads, chunk = _routine(method, n, len(runs[0]) or 1, threads)
        _clear_runs(runs, name, n_threads, chunk)
        return
    if hot is None:
        name, n_threads, chunk = _routine(method, n, 1, threads)
        st = _state
        if method == "auto" and n_threads == 1 and st.adapt_lo <= n < st.adapt_hi:
            ticket = lib.cp_adapt_choose(n, ptr)
            if ticket >= 0:
                name = _adapt.arms(st.thresholds, n)[ticket & 1]
                t = time.perf_counter_ns()
                _clear_one(ptr, n, name, 1, chunk)
                lib.cp_adapt_record(n, ticket, time.perf_counter_ns() - t)
                return
        _clear_one(ptr, n, name, n_threads, chunk)
        return
    start, stop = _check_hot(hot, n)
    st = _state
    cold = n - (stop - start)
    if method == "auto":
        cold_name = st.forced or st.thresholds.streaming
        hot_name = st.forced or _policy.decide(
            st.cpu, st.thresholds, stop - start).method
        if hot_name == st.thresholds.streaming and not BY_NAME[hot_name].temporal:
            hot_name = st.thresholds.temporal
    else:
        st.check("method=%r" % method, method)
        cold_name = method
        hot_name = method if BY_NAME[method].temporal else st.thresholds.temporal
    _, n_threads, chunk = _routine(cold_name, cold, 2, threads)
    base = ffi.cast("char *", ptr)
    pieces = [(base, start), (base + stop, n - stop)]
    _run(lib.cp_job_new(ffi.new("char *[]", [p for p, _ in pieces]),
                        ffi.new("size_t[]", [m for _, m in pieces]), 2),
         cold_name, chunk, n_threads)
    _clear_one(base + start, stop - start, hot_name, 1, max(chunk, stop - start))


def _check_hot(hot: Any, n: int) -> tuple[int, int]:
    try:
        start, stop = hot
        ok = all(isinstance(v, int) and not isinstance(v, bool) for v in (start, stop))
    except (TypeError, ValueError):
        ok = False
    if not ok or not 0 <= start <= stop <= n:
        raise ValueError("hot must be a (start, stop) pair of ints with "
                         "0 <= start <= stop <= %d (the buffer's size), not %r" % (n, hot))
    return start, stop


def clear_many(bufs: Iterable[Any], *, method: str = "auto",
               threads: int | str = 1) -> None:
    """Zero many buffers in one native call.

    The routine is chosen from the total size, not each piece: a gigabyte of
    4 KiB buffers is a gigabyte of work.  Every buffer is checked before
    anything is written.
    """
    _check_method(method)
    _check_threads(threads)
    seq = cast("Sequence[Any]", bufs if type(bufs) in (list, tuple) else list(bufs))
    if _VIEWS_IN_C:
        # Every buffer acquired in C, under the GIL, in one call.
        bad = ffi.new("size_t *")
        views = lib.cp_views_acquire(id(seq), bad)
        if views != ffi.NULL:
            try:
                count = lib.cp_views_count(views)
                if count == 0:
                    return
                total = lib.cp_views_total(views)
                name, n_threads, chunk = _routine(method, total, count, threads)
                _run(lib.cp_views_job(views), name, chunk, n_threads)
            finally:
                lib.cp_views_release(views)
            return
        if bad[0] >= len(seq):
            raise MemoryError("clearpages: no memory for %d buffer views" % len(seq))
        cds = None      # one has no writable contiguous buffer: the slow path says which
    else:
        try:
            cds = [_from_buffer(_CHARS, b, True) for b in seq]
        except (TypeError, BufferError, ValueError):
            cds = None  # outside the handler: no traceback holding the exports
    if cds is None:
        addrs, lens, _keep = _many_slow(seq)   # _keep: exports held until done
        total = sum(lens)
        if not lens:
            return
        name, n_threads, chunk = _routine(method, total, len(lens), threads)
        # A named array: a temporary inside ffi.cast() would be freed
        # before cp_job_new reads it.
        c_addrs = ffi.new("uintptr_t[]", addrs)
        _run(lib.cp_job_new(ffi.cast("char *const *", c_addrs),
                            ffi.new("size_t[]", lens), len(lens)),
             name, chunk, n_threads)
        return
    if not cds:
        return
    lens = list(map(len, cds))
    total = sum(lens)
    name, n_threads, chunk = _routine(method, total, len(cds), threads)
    _run(lib.cp_job_new(ffi.new("char *[]", cds), ffi.new("size_t[]", lens), len(cds)),
         name, chunk, n_threads)


def _many_slow(bufs: Sequence[Any]) -> tuple[list[int], list[int], list[Any]]:
    """Addresses and lengths of every piece, Regions and strided arrays too,
    and the buffer exports that must outlive the clear (they stop a resize or
    close in another thread); raises (before anything is written) on the
    first unusable buffer."""
    addrs: list[int] = []
    lens: list[int] = []
    keep: list[Any] = []
    for i, b in enumerate(bufs):
        try:
            ptr, n, runs = _extent(b)
        except (TypeError, ValueError) as e:
            del keep[:]     # the traceback keeps this frame: let the exports go
            raise type(e)("clear_many: buffer %d: %s" % (i, e)) from None
        keep.append(ptr)
        if runs is None:
            addrs.append(int(ffi.cast("uintptr_t", ptr)))
            lens.append(n)
        else:
            addrs.extend(int(a) for a in runs[0])
            lens.extend(int(m) for m in runs[1])
    return addrs, lens, keep


_INT_CODES = frozenset("bBhHiIlLqQ")
_ZERO_INDEX = (0,)


def _page_indices(pages: Any) -> Any:
    """pages as a contiguous int64 buffer (an array.array or numpy array)."""
    if isinstance(pages, array.array):
        if pages.typecode not in _INT_CODES:
            raise TypeError("pages must hold integers, not array.array(%r)" % pages.typecode)
        if pages.typecode == "q":
            return pages
    elif type(pages).__module__.split(".")[0] == "numpy" and hasattr(pages, "dtype"):
        import numpy as np

        if pages.dtype.kind not in "iu":
            raise TypeError("pages must be an integer array, not dtype %s" % pages.dtype)
        if pages.dtype.kind == "u" and pages.size and int(pages.max()) > (1 << 63) - 1:
            raise PageIndexError("page index %d is past the end of any buffer"
                                 % int(pages.max()))
        return np.ascontiguousarray(pages.reshape(-1), dtype=np.int64)
    if _VIEWS_IN_C and type(pages) in (list, tuple):
        # Read in C, one PyLong_AsLongLong an item: a quarter of the time
        # array.array takes for a long list.
        out = array.array("q", _ZERO_INDEX) * len(pages)
        bad = ffi.new("size_t *")
        dest = ffi.cast("int64_t *", _from_buffer(out))
        rc = lib.cp_int64_from_sequence(id(pages), dest, len(out), bad)
        del dest
        if rc == 0:
            return out
        if rc == 1:
            raise TypeError("pages must be a sequence or buffer of integer page indices; "
                            "item %d is %s" % (bad[0], type(pages[bad[0]]).__name__))
        if rc == 2:
            raise PageIndexError("page index %d (position %d) is outside any buffer "
                                 "(beyond the 64-bit range)" % (pages[bad[0]], bad[0]))
        # rc == 3: the list changed meanwhile; read it the slow way.
    try:
        return array.array("q", pages)
    except OverflowError:
        raise PageIndexError("a page index is outside any buffer "
                             "(beyond the 64-bit range)") from None
    except TypeError as e:
        raise TypeError("pages must be a sequence or buffer of integer page indices: %s"
                        % e) from None


def clear_pages(buf: Any, pages: Any, *, page_size: int = 4096, method: str = "auto",
                threads: int | str = 1) -> None:
    """Zero the listed pages of one buffer: page i is buf[i*page_size:(i+1)*page_size].

    The list is sorted and merged into runs in C and cleared in one native
    call; repeated pages are cleared once; an index outside the buffer
    raises :class:`PageIndexError` before anything is written.
    """
    _check_method(method)
    _check_threads(threads)
    if isinstance(page_size, bool) or not isinstance(page_size, int) \
            or not 1 <= page_size <= _config.MAX_SIZE:
        raise ValueError("page_size must be a positive int (bytes), not %r" % (page_size,))
    ptr, n, runs = _extent(buf)
    if runs is not None:
        raise ValueError("clear_pages needs a contiguous buffer; this one is strided")
    idx = _page_indices(pages)
    count = len(idx)
    if count == 0:
        return
    bad = ffi.new("size_t *")
    job = lib.cp_job_from_pages(ffi.cast("char *", ptr), n,
                                ffi.cast("const int64_t *", _from_buffer(idx)),
                                count, page_size, bad)
    if job == ffi.NULL:
        if bad[0] >= count:
            raise MemoryError("clearpages: no memory for the page list")
        npages = -(-n // page_size)
        raise PageIndexError(
            "page index %d (position %d) is outside the buffer: it has %d page%s of %d "
            "bytes, so indices run from 0 to %d" % (idx[bad[0]], bad[0], npages,
                                                    "" if npages == 1 else "s",
                                                    page_size, npages - 1))
    total = lib.cp_job_total(job)
    try:
        name, n_threads, chunk = _routine(method, total, count, threads)
    except BaseException:
        lib.cp_job_free(job)
        raise
    _run(job, name, chunk, n_threads)


def methods() -> tuple[str, ...]:
    """The routines this CPU and OS can run (after CLEARPAGES_DISABLE)."""
    return _state.methods


def cpu() -> _cpu.CPU:
    """This machine's CPU as clearpages sees it (CLEARPAGES_DISABLE applied)."""
    return _state.cpu


def thresholds() -> _policy.Thresholds:
    """The thresholds ``auto`` decides by on this machine."""
    return _state.thresholds


def plan(nbytes: int, *, count: int = 1, threads: int | str = "auto") -> _policy.Plan:
    """What method="auto" would do for nbytes in count pieces."""
    if isinstance(nbytes, bool) or not isinstance(nbytes, int) \
            or not 0 <= nbytes <= _config.MAX_SIZE:
        raise ValueError("nbytes must be an int from 0 to 2**56, not %r" % (nbytes,))
    if isinstance(count, bool) or not isinstance(count, int) or count < 1:
        raise ValueError("count must be an int >= 1, not %r" % (count,))
    _check_threads(threads)
    st = _state
    p = _policy.decide(st.cpu, st.thresholds, nbytes, count,
                       threads=threads, forced=st.forced)
    if count == 1 and p.threads == 1:
        learned = _adapt.describe(st.thresholds, nbytes, st.adapt_on, st.forced)
    else:
        learned = "not adaptive: only single clears on one thread are timed"
    return dataclasses.replace(p, learned=learned)

