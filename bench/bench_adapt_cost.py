"""What adaptation costs a warm clear of one buffer: the goal "the learner's
timing costs at most 1% at 16 KiB".

One buffer, warm, cleared back to back by ``cp.clear`` with adaptation on
and off (``cp.set_adaptive``), in blocks of calls that alternate between
the two in one process (the order of each pair swapped from pair to pair),
so that a change of the machine's load lands on both alike.  The learner
keeps what it learned while paused, so the "on" blocks see it settled, as a
program that clears one buffer in a loop does: its sampled timing, its
explorations and its per-call lookup are all inside them.  At sizes where
the learner picks another routine than the static choice the ratio also
holds the routines' difference; the script prints both choices.

``--cold POOL`` walks a pool instead (512M: much larger than the L3): each
call clears the next slice of the pool, last touched a whole pool ago, so
the learner's lookup of an address it has not seen lately is inside every
call, and the clear of cold memory leaves no room to hide it.

``--method NAME`` adds a third block to each round, ``clear(b,
method=NAME)``: what a user comparing auto with the routine it runs sees
(on / NAME), where "off" is the static policy's path.

The timing loop is ``timeit``'s own (a bytecode loop calling the bound
``clear(b)``): no lambda, no ctypes; its clock is the thread's CPU time, so
that a block the scheduler took the CPU from in the middle (the others'
work on a shared machine) is not charged for the wait.  Printed: the median time per call in
each mode, the median and interquartile range of the per-pair ratio
(on / off), and the ratio of the total times (which holds every exploration
at its weight).

    python bench/bench_adapt_cost.py [--size 16K] [--pairs 401] [--number 5000] [--repeat 1]
                                     [--cold 512M] [--method libc]
"""

from __future__ import annotations

import argparse
import mmap
import statistics
import sys
import time
import timeit
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import clearpages as cp
from clearpages.tools.lowlevel import parse_size


def quartiles(xs: list[float]) -> tuple[float, float]:
    q = statistics.quantiles(xs, n=4)
    return q[0], q[2]


Block = Callable[[int, "str | None"], float]


def alternate(block: Block, pairs: int, number: int,
              method: str | None = None) -> dict[str, float]:
    """Blocks of `number` calls (block(number, method): ns a call) with
    adaptation on and off in turn, and where a method is named a block of
    clear(method=...) beside them; the order turned from round to round."""
    kinds = ["on", "off"] + (["method"] if method else [])
    times: dict[str, list[float]] = {k: [] for k in kinds}
    for i in range(pairs):
        turn = i % len(kinds)
        for kind in (kinds[turn:] + kinds[:turn])[::1 if i % 2 else -1]:
            cp.set_adaptive(kind != "off")
            times[kind].append(block(number, method if kind == "method" else None))
    cp.set_adaptive(True)
    ratios = [a / b for a, b in zip(times["on"], times["off"])]
    q1, q3 = quartiles(ratios)
    out = {"on": statistics.median(times["on"]), "off": statistics.median(times["off"]),
           "ratio": statistics.median(ratios), "q1": q1, "q3": q3,
           "total": sum(times["on"]) / sum(times["off"])}
    if method:
        vs = [a / b for a, b in zip(times["on"], times["method"])]
        out["method"] = statistics.median(times["method"])
        out["vs"] = statistics.median(vs)
        out["vs_q1"], out["vs_q3"] = quartiles(vs)
    return out


def run(n: int, pairs: int, number: int, method: str | None = None) -> dict[str, float]:
    b = bytearray(n)
    timer = timeit.Timer("clear(b)", timer=time.thread_time,
                          globals={"clear": cp.clear, "b": b})
    named = timeit.Timer("clear(b, method=m)", timer=time.thread_time,
                         globals={"clear": cp.clear, "b": b, "m": method})
    cp.set_adaptive(True)
    timer.timeit(number=200000)         # the learner settles on this buffer

    def block(calls: int, m: str | None) -> float:
        t = named if m else timer
        t.timeit(number=1000)           # back in the cache, the mode's path warm
        return t.timeit(number=calls) / calls * 1e9
    return alternate(block, pairs, number, method)


def run_cold(n: int, pool: int, pairs: int, number: int,
             method: str | None = None) -> dict[str, float]:
    """run's figures for a walk of a pool: each call the next n-byte slice."""
    m = mmap.mmap(-1, pool)
    whole = memoryview(m)
    whole[:] = b"\1" * pool            # resident, and dirty, before any timing
    stride = -(-n // 4096) * 4096
    slots = max(1, (pool - n) // stride + 1)
    at = 0

    def block(calls: int, m: str | None) -> float:
        nonlocal at
        views = [whole[((at + i) % slots) * stride:][:n] for i in range(calls)]
        at = (at + calls) % slots
        clear = cp.clear
        if m:
            t0 = time.thread_time_ns()
            for v in views:
                clear(v, method=m)
        else:
            t0 = time.thread_time_ns()
            for v in views:
                clear(v)
        return (time.thread_time_ns() - t0) / calls
    cp.set_adaptive(True)
    block(4 * slots, None)              # the learner settles on the walk
    try:
        return alternate(block, pairs, number, method)
    finally:
        whole.release()
        m.close()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--size", default="16K")
    ap.add_argument("--pairs", type=int, default=401)
    ap.add_argument("--number", type=int, default=5000)
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--cold", metavar="POOL", help="walk a pool of this size (512M) instead "
                    "of clearing one buffer")
    ap.add_argument("--method", help="a third block: clear(method=METHOD)")
    args = ap.parse_args(argv)
    n = parse_size(args.size)
    info = cp.cpu()
    cp.set_adaptive(False)
    static = cp.plan(n, threads=1).method
    cp.set_adaptive(True)
    pool = parse_size(args.cold) if args.cold else 0
    what = ("cold %s clears walking a %s pool" % (args.size, args.cold) if pool
            else "warm %s clears of one buffer" % args.size)
    print("adaptation's cost, %s, clear only; %s; Python %s"
          % (what, info.brand or info.vendor, sys.version.split()[0]))
    print("%d pairs of %d-call blocks, interleaved; static choice %s"
          % (args.pairs, args.number, static))
    for _ in range(args.repeat):
        r = (run_cold(n, pool, args.pairs, args.number, args.method) if pool
             else run(n, args.pairs, args.number, args.method))
        print("on %.1f ns, off %.1f ns per call (medians); on/off %.4f [%.4f-%.4f], "
              "total %.4f; learner runs %s"
              % (r["on"], r["off"], r["ratio"], r["q1"], r["q3"], r["total"],
                 cp.plan(n, threads=1).method))
        if args.method:
            print("%s %.1f ns per call (median); on/%s %.4f [%.4f-%.4f]"
                  % (args.method, r["method"], args.method, r["vs"], r["vs_q1"], r["vs_q3"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
