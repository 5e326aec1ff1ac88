"""clear, clear_many and clear_pages: buffers in, one native call out.

Each public call is one function of the native extension ``clearpages._fast``:
it parses the arguments, acquires the buffers, asks the native policy
(csrc/core/policy.c, configured by the dispatch state) and clears, small buffers in one
direct call, larger or threaded work as a job run in time slices without the
GIL (Ctrl-C stops it between slices).  What it declines comes here: the
functions below explain refusals with the package's messages, clear strided
numpy arrays extent by extent, or normalize an argument (an int subclass for
threads, a list for hot=) and call back in.
"""

from __future__ import annotations

import array
import dataclasses
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any, Literal, Union

from . import _adapt, _cpu, _dispatch, _fast, _policy, _units
from ._errors import PageIndexError, UnsupportedMethod
from ._native import ffi, lib
from ._routines import ALL_METHODS

#: The names ``method=`` takes ("discard" only for a Region).
Method = Literal["auto", "rep_stosb", "rep_stosq", "mov_loop", "movnti", "avx2_nt",
                 "avx512_nt", "clzero", "libc", "discard"]
#: ``threads=``: an int from 1 to 256, or "auto".
Threads = Union[int, Literal["auto"]]

_CHARS = ffi.typeof("char[]")


def reload_config(env: dict[str, str] | None = None) -> None:
    """Read the CLEARPAGES_* variables (and the calibration) again: from
    the environment, or from env, a dict of them (values str, as the
    environment's are).

    Raises :class:`clearpages.ConfigError` (a ValueError) naming the variable
    when one holds a bad value; a CLEARPAGES_METHOD this machine cannot run
    is one too, and also a :class:`clearpages.UnsupportedMethod`.  A value
    that is not a str is a TypeError naming the variable.  On any error
    the configuration is unchanged."""
    _dispatch.reload(env)      # and forgets what adaptive auto had learned


def set_adaptive(on: bool) -> None:
    """Turn adaptive auto on or off for this process (until reload_config).

    Off, method="auto" runs the static choice that :func:`plan` describes,
    deterministically, as with CLEARPAGES_ADAPT=0.  What was learned is kept
    and used again when it is turned back on; reload_config forgets it.
    """
    if not isinstance(on, bool):
        raise TypeError("set_adaptive takes True or False, not %s" % _units.shown(on))
    _dispatch.set_adaptive(on)


def adaptive() -> bool:
    """True when auto adapts to this program's clears (CLEARPAGES_ADAPT,
    set_adaptive), a band of sizes exists and CLEARPAGES_METHOD forces nothing."""
    return _dispatch.state().adapt_active


# ---- the public calls (each one native function) --------------------------

if TYPE_CHECKING:
    def clear(buf: Any, *, method: Method = "auto", threads: Threads = 1,
              hot: tuple[int, int] | bool | None = None) -> None:
        """Zero every byte of a writable buffer, or of a tensor in CPU memory
        through DLPack (__dlpack__), in place.  Returns None.

        buf: a bytearray, memoryview, numpy array (strided views and memoryview
        slices with a step too, extent by extent), mmap, array.array, ctypes
        array, clearpages.Region or Block, or a tensor.  method: "auto" (the
        policy's choice; see clearpages.plan) or a name from clearpages.methods()
        ("discard" for a Region).  threads: an int
        from 1 to 256, or "auto".  hot: None (the default), True (all of it is
        used next: ordinary stores), False (not soon: streaming), or a
        (start, stop) pair of ints, 0 <= start <= stop <= the size in bytes: that
        range is cleared last with ordinary stores, so it is in cache when the
        caller touches it, the rest with streaming stores.  Any hot= needs a
        contiguous buffer or tensor (a strided one is a ValueError).

        Raises TypeError for a read-only buffer, one whose items hold references
        (object arrays), something that is no buffer or tensor, or an argument of
        the wrong type; ValueError for a wrong value (an unknown method, threads
        out of range, hot outside the buffer or on a strided buffer, a closed
        Region, a buffer whose items are reached through pointers);
        clearpages.UnsupportedMethod for a routine this machine cannot run.  A
        refused buffer is left unchanged."""

    def clear_many(bufs: Iterable[Any], *, method: Method = "auto",
                   threads: Threads = 1) -> None:
        """Zero many buffers (and tensors in CPU memory) in one native call.
        Returns None.

        bufs: an iterable of what clear() takes.  The routine is chosen from the
        total size, not each piece: a gigabyte of 4 KiB buffers is a gigabyte of
        work.  method: "auto" or a name from clearpages.methods() ("discard": all
        of them Regions), for every buffer.  threads: an int from 1 to 256, or
        "auto", for the whole call.  There is no hot=: clear the buffer to keep
        in cache with clear(buf, hot=...).

        Every buffer is checked before anything is written: a refusal (the
        errors of clear(), naming the item) leaves them all unchanged."""

    def clear_pages(buf: Any, pages: Any, page_size: int | str | None = None, *,
                    method: Method = "auto", threads: Threads = 1) -> None:
        """Zero the listed pages of one buffer: page i is bytes
        [i*page_size, (i+1)*page_size) of it (the last may be partial).  Returns
        None.

        buf: a writable buffer that is one extent (C- or Fortran-contiguous,
        its pages counted from its first byte in memory, as nonzero_pages counts
        them), a clearpages.Region, or a contiguous tensor.  pages: page indices
        as a list, tuple, range or other iterable of ints, an array.array or
        numpy integer array (1-D), or what nonzero_pages returns; repeated pages
        are cleared once.  page_size: an int or a size string such as "64K" or
        "2M" (None: 4096, or a Region's own page size).  method: "auto", a name
        from clearpages.methods(), or "discard" (a Region: its pages are handed
        back to the kernel).  threads: an int from 1 to 256, or "auto".

        The pages are merged into extents in C and cleared in one native call.
        An index outside the buffer raises clearpages.PageIndexError (an
        IndexError and a ValueError) before anything is written; a strided
        buffer is a ValueError; otherwise the errors of clear()."""
else:
    clear = _fast.clear
    clear_many = _fast.clear_many
    clear_pages = _fast.clear_pages


# ---- what the native entry declines ---------------------------------------


def _refuse(buf: Any, err: str) -> int:
    """Explain why buf cannot be cleared as one extent; for a writable
    strided buffer (a numpy array in Fortran order or a view, a memoryview
    slice with a step), which the native side clears extent by extent, its
    nbytes."""
    try:
        mv = memoryview(buf)
    except TypeError:
        raise TypeError(
            "clearpages clears writable buffers (bytearray, memoryview, numpy array, "
            "mmap, array.array, ctypes array, Region), not %s" % type(buf).__name__
        ) from None
    except (BufferError, ValueError):
        # No format to state (numpy's datetime64): the array's own flags.
        flags = getattr(buf, "flags", None)
        if flags is None or not hasattr(buf, "nbytes"):
            raise
        if not flags.writeable:
            raise TypeError("the %s object is read-only; clearpages only clears writable "
                            "buffers and left it unchanged" % type(buf).__name__) from None
        return int(buf.nbytes)
    with mv:
        if mv.readonly:
            raise TypeError("the %s object is read-only; clearpages only clears writable "
                            "buffers and left it unchanged" % type(buf).__name__)
        if not mv.c_contiguous:
            # Fortran-ordered arrays too: a writable buffer is asked in C order.
            if mv.suboffsets:
                raise ValueError(
                    "the %s's items are reached through pointers (suboffsets); clearpages "
                    "clears buffers whose items lie at strides from one address"
                    % type(buf).__name__)
            return int(mv.nbytes)
    raise TypeError("cannot clear %s: %s" % (type(buf).__name__, err))


def _is_buffer(obj: Any) -> bool:
    """Whether obj offers the buffer protocol at all (numpy arrays do, and
    have __dlpack__ too: theirs is the buffer path)."""
    try:
        memoryview(obj).release()
    except TypeError:
        return False
    except (BufferError, ValueError):
        pass
    return True


def _check_method(method: Any, region_ok: bool = False) -> str:
    if isinstance(method, str):
        if method == "auto" or method in ALL_METHODS:
            return str(method)
        if method == "discard":
            if region_ok:
                return "discard"
            raise ValueError("method 'discard' (madvise the pages away) applies only "
                             "to a clearpages.Region")
    accepted = "'auto' or one of: %s%s" % (", ".join(ALL_METHODS),
                                           " (or 'discard' for a Region)" if region_ok else "")
    if not isinstance(method, str):
        raise TypeError("method must be a str, %s, not %s" % (accepted, _units.shown(method)))
    raise ValueError("unknown method %s; use %s" % (_units.short_repr(method), accepted))


def _check_threads(threads: Any) -> Threads:
    if isinstance(threads, str) and threads == "auto":
        return "auto"
    n = _units.as_int(threads)
    if n is None:
        raise TypeError("threads must be 'auto' or an int from 1 to %d, not %s"
                        % (_fast.MAX_THREADS, _units.shown(threads)))
    if not 1 <= n <= _fast.MAX_THREADS:
        raise ValueError("threads must be 'auto' or an int from 1 to %d, not %r"
                         % (_fast.MAX_THREADS, n))
    return n


def _check_runnable(method: str) -> None:
    if method != "auto":
        _dispatch.state().check("method=%r" % method, method)


_HOT_STRIDED = "hot= needs a contiguous buffer; this one is strided"


def _check_hot(hot: Any, n: int, strided: bool = False) -> tuple[int, int] | bool:
    """hot= for a buffer of n bytes: True, False, or (start, stop) as two
    integers (ints or numpy's); a range needs a contiguous buffer (strided: it is not).
    The native entry asks this for a tensor's hot= it does not take."""
    if hot is True or hot is False:
        return hot
    start = stop = None
    if not isinstance(hot, (str, bytes)):
        try:
            first, second = hot
        except (TypeError, ValueError):
            pass
        else:
            start, stop = _units.as_int(first), _units.as_int(second)
    if start is None or stop is None:
        raise TypeError(_hot_accepted(n) + _units.shown(hot))
    if strided:
        raise ValueError(_HOT_STRIDED)
    if not 0 <= start <= stop <= n:
        raise ValueError(_hot_accepted(n) + _units.short_repr(hot))
    return start, stop


def _hot_accepted(n: int) -> str:
    return ("hot must be True (all of it is used next), False (not soon), or a (start, stop) "
            "pair of ints with 0 <= start <= stop <= %d (the buffer's size), not " % n)


def _declined_clear(buf: Any, method: Any, threads: Any, hot: Any, err: str | None) -> None:
    """clear() of what the native entry declined: err is the buffer's
    refusal, or None when an argument was the reason."""
    method = _check_method(method, region_ok=True)
    threads = _check_threads(threads)
    if method == "discard":
        discard: Any = _discarder(buf, "_clearpages_discard", threads)
        if hot is not None:
            raise ValueError("hot= does not apply to method 'discard'")
        discard()
        return
    if err is not None and hasattr(type(buf), "__dlpack__") and not _is_buffer(buf):
        # A tensor (DLPack): the native entry takes it with these arguments.
        _check_runnable(method)
        _fast.clear_exact(buf, method=method, threads=threads, hot=hot)
        return
    if err is not None:
        nbytes = _refuse(buf, err)      # raises unless writable and strided
        if hot is not None:
            # Strided arrays are cleared extent by extent, with no hot= hint.
            _check_hot(hot, nbytes, strided=True)
            raise ValueError(_HOT_STRIDED)
        _check_runnable(method)
        _fast.clear_strided(buf, method=method, threads=threads)
        return
    if hot is not None:
        with memoryview(buf) as mv:
            n = mv.nbytes
        hot = _check_hot(hot, n)
    _check_runnable(method)
    _fast.clear_exact(buf, method=method, threads=threads, hot=hot)


def _discarder(buf: Any, hook: str, threads: Any, where: str = "") -> Any:
    """The Region's discard call for method="discard"; ValueError for anything
    but a Region, or for threads other than 1 (the kernel does the work)."""
    fn = getattr(buf, hook, None)
    if fn is None:
        raise ValueError("%smethod 'discard' (madvise the pages away) applies only to a "
                         "clearpages.Region, not %s" % (where, type(buf).__name__))
    if threads != 1:
        raise ValueError("threads=%r does not apply to method 'discard': the kernel "
                         "hands the pages back in one system call per run; leave "
                         "threads at 1" % (threads,))
    return fn


def _declined_many(seq: tuple[Any, ...], method: Any, threads: Any,
                   bad: tuple[int, str] | None) -> None:
    """clear_many() of what the native entry declined: bad is (index, refusal)
    of the first buffer it could not take, or None for an argument."""
    method = _check_method(method, region_ok=True)
    threads = _check_threads(threads)
    if method == "discard":
        calls = [_discarder(b, "_clearpages_discard", threads, "clear_many: buffer %d: " % i)
                 for i, b in enumerate(seq)]
        for call in calls:
            call()
        return
    if bad is None:
        _check_runnable(method)
        _fast.clear_many_exact(seq, method=method, threads=threads)
        return
    i = bad[0]
    if isinstance(seq[i], int):
        raise TypeError("clear_many takes an iterable of buffers, and item %d is an int: "
                        "to clear one buffer, call clear(buf)" % i)
    exports: list[Any] = []     # held until the clear is done, released whatever happens
    try:
        addrs, lens = _many_slow(seq, exports)
        _check_runnable(method)
        _fast.clear_extents(addrs, lens, method=method, threads=threads)
    finally:
        # A traceback (Ctrl-C, a refusal) keeps these frames and their
        # locals alive: release each export now, not when they are freed.
        for c in exports:
            ffi.release(c)


def _many_slow(bufs: Sequence[Any], exports: list[Any]) -> tuple[Any, Any]:
    """Addresses and lengths of every piece, strided arrays extent by extent;
    the buffer exports that must outlive the clear (they stop a resize or
    close in another thread) go into exports, for the caller to release.
    Raises (before anything is written) on the first unusable buffer."""
    addrs = array.array("Q")
    lens = array.array("Q")
    tensors: list[int] = []
    strided = -1
    for i, b in enumerate(bufs):
        if _is_tensor(b):
            tensors.append(i)
            continue
        _fast.check_items(b, i)     # items that hold references are never cleared
        try:
            c = ffi.from_buffer(_CHARS, b, True)
        except (TypeError, BufferError, ValueError) as e:
            err = str(e)
        else:
            exports.append(c)
            addrs.append(int(ffi.cast("uintptr_t", c)))
            lens.append(len(c))
            continue
        try:
            _refuse(b, err)
        except (TypeError, ValueError) as e:
            raise type(e)("clear_many: buffer %d: %s" % (i, e)) from None
        extent_addrs, extent_lens = _fast.extents_of(b)
        addrs.frombytes(extent_addrs)
        lens.frombytes(extent_lens)
        strided = i
    if tensors:
        # The native entry takes tensors, and hands a call here only for
        # a buffer it clears extent by extent from Python.
        raise TypeError("clear_many: buffer %d is a tensor, which one call takes only "
                        "beside buffers it can take whole, and %s: clear the tensors in a "
                        "clear_many of their own" % (tensors[0], (
                            "buffer %d is strided (cleared extent by extent)" % strided
                            if strided >= 0 else "another buffer here is not")))
    return addrs, lens


def _is_tensor(b: Any) -> bool:
    """A DLPack producer without a buffer (a torch tensor, from Python)."""
    if not hasattr(type(b), "__dlpack__"):
        return False
    try:
        memoryview(b).release()
    except TypeError:
        return True
    except (BufferError, ValueError):
        pass                # a buffer memoryview cannot describe (numpy's datetime64)
    return False


_INT_CODES = frozenset("bBhHiIlLqQ")


def _check_1d(ndim: int) -> None:
    if ndim != 1:
        raise ValueError("pages must be a 1-D sequence of page indices, not a %d-D "
                         "array; pass pages.ravel() if you mean every index in it" % ndim)


def _page_indices(pages: Any) -> Any:
    """pages as a contiguous int64 buffer (an array.array or numpy array)."""
    if isinstance(pages, array.array):
        if pages.typecode not in _INT_CODES:
            raise TypeError("pages must hold integers, not array.array(%r)" % pages.typecode)
        if pages.typecode == "Q" and pages and max(pages) > (1 << 63) - 1:
            raise PageIndexError("page index %d is outside any buffer (beyond the 64-bit "
                                 "range)" % max(pages))
        return array.array("q", pages)
    if type(pages).__module__.split(".")[0] == "numpy" and hasattr(pages, "dtype"):
        import numpy as np

        _check_1d(pages.ndim)
        if pages.dtype.kind not in "iu":
            raise TypeError("pages must be an integer array, not dtype %s" % pages.dtype)
        if pages.dtype.kind == "u" and pages.size and int(pages.max()) > (1 << 63) - 1:
            raise PageIndexError("page index %d is outside any buffer (beyond the 64-bit "
                                 "range)" % int(pages.max()))
        return np.ascontiguousarray(pages, dtype=np.int64)
    if isinstance(pages, memoryview):
        _check_1d(pages.ndim)
    try:
        return array.array("q", pages)
    except OverflowError:
        raise PageIndexError("a page index is outside any buffer "
                             "(beyond the 64-bit range)") from None
    except TypeError as e:
        raise TypeError("pages must be a sequence or buffer of integer page indices: %s"
                        % e) from None


def _check_page_size(page_size: Any) -> int:
    return _units.parse_size(page_size, "page_size", minimum=1)


def _declined_pages(buf: Any, pages: Any, page_size: Any, method: Any, threads: Any,
                    err: str | None) -> None:
    """clear_pages() of what the native entry declined (page_size as given,
    or when not given the page size it stands for)."""
    method = _check_method(method, region_ok=True)
    threads = _check_threads(threads)
    if method == "discard":
        _discarder(buf, "_clearpages_discard_pages", threads)(pages, page_size)
        return
    page_size = _check_page_size(page_size)
    if err is not None and not _is_tensor(buf):
        _refuse(buf, err)           # not a buffer, read-only, closed: its own message
        raise ValueError("clear_pages needs a C- or Fortran-contiguous buffer (one extent, "
                         "whose pages nonzero_pages numbers); this one is strided")
    idx = _page_indices(pages)
    _check_runnable(method)
    _fast.clear_pages_exact(buf, idx, page_size=int(page_size), method=method,
                            threads=threads)


def _declined_scan(name: str, buf: Any, page_size: Any, threads: Any) -> Any:
    """is_zero() or nonzero_pages() whose threads= or page_size= the native
    entry declined (page_size as given, or the page size it stands for)."""
    threads = _check_threads(threads)
    if name == "is_zero":
        return _fast.is_zero(buf, threads=threads)
    return _fast.nonzero_pages(buf, _check_page_size(page_size), threads=threads)


_fast.set_hooks(init=_dispatch.init_native, clear=_declined_clear, many=_declined_many,
                pages=_declined_pages, scan=_declined_scan, hot=_check_hot,
                page_index_error=PageIndexError)


# ---- what the state says ----------------------------------------------------


def methods() -> tuple[str, ...]:
    """The routines this CPU and OS can run (after CLEARPAGES_DISABLE)."""
    return _dispatch.state().methods


def cpu() -> _cpu.CPU:
    """This machine's CPU as clearpages sees it (CLEARPAGES_DISABLE applied)."""
    return _dispatch.state().cpu


def thresholds() -> _policy.Thresholds:
    """The thresholds ``auto`` decides by on this machine."""
    return _dispatch.state().thresholds


def plan(nbytes: int | str, *, count: int = 1, threads: Threads = 1,
         hot: tuple[int, int] | bool | None = None) -> _policy.Plan:
    """What method="auto" does for nbytes (an int or a size such as "1G") in
    count pieces, with the same defaults as clear() (with hot=: the routine
    of the rest, and of the hot range in ``.hot_method``).  The native
    policy that every call follows answers; this adds the reasons, and what
    adaptive auto has learned.

    count: the number of pieces the nbytes are split into (as clear_many
    and clear_pages see their total); more pieces than bytes describes
    clear_many of empty pieces."""
    nbytes = _units.parse_size(nbytes, "nbytes")
    n = _units.as_int(count)
    if n is None:
        raise TypeError("count must be an int >= 1, not %s" % _units.shown(count))
    if n < 1:
        raise ValueError("count must be an int >= 1, not %r" % (n,))
    count = n
    threads = _check_threads(threads)
    if hot is not None:
        if count != 1:
            raise ValueError("hot= applies to one buffer (count=1)")
        hot = _check_hot(hot, nbytes)
    st = _dispatch.state()
    d = _policy.Decision(*_fast.decide(nbytes, count, threads, "auto",
                                       hot if hot is None or isinstance(hot, bool)
                                       else hot[1] - hot[0]))
    p = _policy.explain(st.thresholds, d, nbytes, count, forced=st.forced)
    learned = _policy.LEARNER_REASONS.get(d.adapt_why)
    history = _adapt.describe_hot(st.thresholds, nbytes) if (
        d.adapt_why == lib.CP_LEARNER_HISTORY) else None
    if history is not None:
        learned, evidence = history
        p = dataclasses.replace(p, evidence=p.evidence + tuple(
            e for e in evidence if e not in p.evidence))
    elif learned is None:
        learned = _adapt.describe(st.thresholds, d, nbytes, st.forced)
    return dataclasses.replace(p, learned=learned)


__all__ = ["Method", "PageIndexError", "Threads", "UnsupportedMethod", "adaptive", "clear",
           "clear_many", "clear_pages", "cpu", "methods", "plan", "reload_config",
           "set_adaptive", "thresholds"]
