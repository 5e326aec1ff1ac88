"""Back into the cache: what ordinary stores cost, call by call, on a buffer
that a streaming clear has just pushed out, and what streaming stores cost
on one that ordinary stores have just left dirty.

The learner compares the two routines on a recent buffer in blocks of
calls, each block's last call its sample; this measures how long such a
block must be.  For each size, one buffer, ``--rounds`` times: ``--calls``
clears with the policy's temporal routine in a row after one with its
streaming routine, then as many with the streaming routine; each clear
timed alone (monotonic clock), the median over rounds of each call's time
in ns per byte.  A temporal column that falls for several calls is a cache
filling back bit by bit: the comparison's temporal block must run until
it stops falling (``refill_gain`` in the learner).

With ``--dirty SIZE``, each round first writes SIZE of other memory (the
L3 full of other dirty data, as a program's own work leaves it): the
refill of a buffer near the L3's size is slower then.  With ``--writes``,
after each clear (untimed) the program writes into the buffer: a random
1/64 of its 8-byte words (numpy), as a generated program's "writes" work.
The learner's streaming reference (what its checks compare an
ordinary-store clear with) is printed beside the table.

``--held CALLS`` measures what the learner makes of it: per size, one
buffer cleared CALLS times back to back with ``auto`` (a fresh learner,
the buffer out of the cache at its first call), against the policy's
temporal and streaming routines called the same way, ``--runs`` runs of
the three in a fresh order each; auto's speed against each is the median
of the runs' ratios.  And, for auto, how many runs compared the two
routines and how many ended on streaming.  ``--numpy``: the buffer a
numpy array of its own (``np.ones``, the C library's memory), as a
program's, not the engine's 2 MiB-aligned mapping.

    python bench/bench_refill.py [--sizes 1536K 4M 8M 16M 24M] [--calls 8] [--rounds 15]
    python bench/bench_refill.py --sizes 24M 26M 28M 30M --calls 16 --dirty 256M
    python bench/bench_refill.py --sizes 48M 64M 72M 81M 96M 127M --calls 32 --rounds 3 --writes
    python bench/bench_refill.py --sizes 26M 28M 30M --held 415 --runs 10 --dirty 256M
    python bench/bench_refill.py --sizes 16M --held 250 --runs 10 --numpy
"""

from __future__ import annotations

import argparse
import ctypes
import functools
import random
import statistics
import time
from collections.abc import Iterator
from typing import Callable

import _common
from _common import Buffer, MiB, cp, fmt_size, np

from clearpages.tools.lowlevel import adapt

SIZES = ("1536K", "3M", "6M", "8M", "12M", "16M", "24M")


def _buffers(sizes: list[int], dirty: int) -> Iterator[tuple[int, Buffer, Callable[[], object]]]:
    """(size, a buffer of it, a call that writes `dirty` bytes of other
    memory with ordinary stores: the L3 full of other dirty data; a no-op
    for 0) for each size, each buffer closed once the caller moves on."""
    other = Buffer(dirty) if dirty else None
    write_other: Callable[[], object] = (
        (lambda: ctypes.memset(other.address, 1, other.size)) if other else (lambda: None))
    try:
        for size in sizes:
            buf = Buffer(size)
            try:
                yield size, buf, write_other
            finally:
                buf.close()
    finally:
        if other is not None:
            other.close()


def reference() -> str:
    th = cp.thresholds()
    ref = adapt.stream_cost(th.streaming)
    return ("the learner's streaming reference in this process: %.4f ns per byte (%s, a %s "
            "buffer)" % (ref, th.streaming, fmt_size(adapt.STREAM_PROBE))) if ref else ""


def _writer(buf: Buffer) -> Callable[[], object]:
    """Random 8-byte writes to 1/64 of buf's words (a fixed seed)."""
    words = buf.numpy()[: buf.size // 8 * 8].view(np.uint64)
    rng = np.random.default_rng(1)
    count = max(1, words.size // 64)

    def write() -> None:
        words[rng.integers(0, words.size, count)] = 1
    return write


def run(sizes: list[int], calls: int = 8, rounds: int = 15, dirty: int = 0,
        writes: bool = False) -> str:
    th = cp.thresholds()
    temporal, streaming = th.temporal, th.streaming
    if streaming not in cp.methods():
        return "no streaming routine usable here (%s)" % streaming
    if writes and np is None:
        return "--writes needs numpy"
    rows = []
    for size, buf, write_other in _buffers(sizes, dirty):
        t_fn = _common.direct_fn(temporal, buf)
        s_fn = _common.direct_fn(streaming, buf)
        after = _writer(buf) if writes else (lambda: None)
        after_s: list[list[float]] = [[] for _ in range(calls)]
        after_t: list[list[float]] = [[] for _ in range(calls)]
        for _ in range(rounds):
            write_other()
            s_fn()
            for fn, out in ((t_fn, after_s), (s_fn, after_t)):
                for k in range(calls):
                    t0 = time.perf_counter_ns()
                    fn()
                    out[k].append((time.perf_counter_ns() - t0) / size)
                    after()
        del after                       # it holds a view of buf
        for name, col in ((temporal + " after " + streaming, after_s),
                          (streaming + " after " + temporal, after_t)):
            med = [statistics.median(c) for c in col]
            rows.append([fmt_size(size) if col is after_s else "", name]
                        + ["%.4f" % m for m in med])
    head = ["size", "calls in a row"] + [str(k + 1) for k in range(calls)]
    return ("ns per byte, each call of a run of %d, median of %d rounds (one buffer per size%s%s)"
            "\n%s\n" % (calls, rounds, ", %s of other memory written first" % fmt_size(dirty)
                         if dirty else "",
                         ", 1/64 of its words written at random after each clear"
                         if writes else "", reference())
            + _common.table(head, rows))


def held(sizes: list[int], calls: int = 415, runs: int = 10, dirty: int = 0,
         numpy: bool = False) -> str:
    """One buffer per size cleared `calls` times back to back: auto (a fresh
    learner each run) against the temporal and the streaming routine, each
    run all three in a fresh order; what auto's checks did.  numpy: the
    buffer a numpy array of its own (np.ones), as a program's, not the
    engine's 2 MiB-aligned mapping."""
    th = cp.thresholds()
    if not cp.adaptive():
        return "adaptive auto is off here (CLEARPAGES_ADAPT=0 or no band)"
    rows = []
    rng = random.Random(1)
    for size, buf, write_other in _buffers(sizes, dirty):
        names = ("auto", th.temporal, th.streaming)
        if numpy:
            arr = np.ones(size, np.uint8)
            fns = {m: functools.partial(cp.clear, arr, method=m) for m in names}
        else:
            fns = {m: _common.clear_fn(m, buf) for m in names}
        times: dict[str, list[float]] = {k: [] for k in fns}
        out = streamed = 0
        for _ in range(runs):
            order = list(fns)
            rng.shuffle(order)
            for name in order:
                fn = fns[name]
                adapt.reset()
                write_other()
                t0 = time.perf_counter()
                for _ in range(calls):
                    fn()
                times[name].append(time.perf_counter() - t0)
                if name == "auto":
                    got = [x for x in adapt.learned(size.bit_length() - 1) if x.context == 1]
                    out += bool(got and got[0].comparisons)
                    streamed += bool(got and got[0].method == th.streaming)
        del fn
        fns.clear()                     # they hold views of buf

        def speed(name: str, times: dict[str, list[float]] = times) -> str:
            r = sorted(t / a for t, a in zip(times[name], times["auto"]))
            q = len(r) // 4
            return "%.2f [%.2f-%.2f]" % (statistics.median(r), r[q], r[-1 - q])
        rows.append([fmt_size(size)]
                    + ["%.1f" % (statistics.median(times[k]) * 1e3) for k in times]
                    + [speed(th.temporal), speed(th.streaming),
                       "%d of %d" % (out, runs), "%d of %d" % (streamed, runs)])
    head = (["size"] + ["%s ms" % k for k in (("auto", th.temporal, th.streaming))]
            + ["auto speed (x %s)" % k for k in (th.temporal, th.streaming)]
            + ["compared", "ended streaming"])
    return ("one buffer%s cleared %d times back to back, %d runs, the three in a fresh order "
            "each run%s; times: medians; speed: the median and interquartile range of the "
            "runs' ratios\n%s\n"
            % (" (a numpy array)" if numpy else "", calls, runs,
               ", %s of other memory written before each run" % fmt_size(dirty)
               if dirty else "", reference())
            + _common.table(head, rows))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", nargs="+", type=_common.size_arg)
    ap.add_argument("--calls", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--dirty", type=_common.size_arg, default=0,
                    help="other memory to write before each round or run (default 0)")
    ap.add_argument("--writes", action="store_true",
                    help="after each clear, write a random 1/64 of the buffer's words")
    ap.add_argument("--held", type=int, default=0, metavar="CALLS",
                    help="instead: auto on one buffer cleared CALLS times back to back")
    ap.add_argument("--runs", type=int, default=10, help="--held: runs per candidate")
    ap.add_argument("--numpy", action="store_true",
                    help="--held: the buffer a numpy array of its own (np.ones), not the "
                    "engine's 2 MiB-aligned mapping")
    a = ap.parse_args(argv)
    sizes = a.sizes or [_common.size_arg(s) for s in SIZES]
    print(_common.machine_label())
    print()
    if a.held:
        print(held(sizes, a.held, a.runs, a.dirty, a.numpy))
    else:
        print(run(sizes, a.calls, a.rounds, a.dirty, a.writes))
    return 0


def test_refill_quick():
    text = run([2 * MiB], calls=3, rounds=2, dirty=4 * MiB)
    assert ("2MiB" in text and "after" in text) or "no streaming routine" in text


def test_refill_writes_quick():
    text = run([2 * MiB], calls=3, rounds=2, writes=True)
    assert ("2MiB" in text and "written at random" in text) or "no streaming" in text \
        or "needs numpy" in text


def test_held_quick():
    text = held([4 * MiB], calls=20, runs=2, dirty=4 * MiB)
    assert ("4MiB" in text and "ended streaming" in text) or "adaptive auto is off" in text
    if np is not None:
        text = held([4 * MiB], calls=20, runs=2, numpy=True)
        assert "numpy array" in text or "adaptive auto is off" in text


if __name__ == "__main__":
    raise SystemExit(main())
