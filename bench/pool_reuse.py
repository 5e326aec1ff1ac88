"""numpy arrays made, written and dropped in loops: plain ``np.zeros``
against ``np.zeros`` under ``zeroed_arrays(Pool(n, reuse=...))``, for each
of ``reuse="cold"`` (the thread zeroes every block given back), ``"auto"``
and ``"hot"`` (the releaser zeroes it at once, in the cache, for the next
acquire).

Each size has one pool per reuse, kept across the programs (in the order
given: "auto" sees each program after the one before, as a program that
changes would show it).  Each program runs --iters iterations per timed run
(default: about 100 MiB of arrays); a warm-up run each, then --rounds
interleaved rounds, the order turned each round.  Printed: the median us
per iteration, and each pool's ratio to plain (the median of the per-round
ratios, with their range), and which way "auto" ended on.

Programs (each iteration):
  page     np.zeros(n, uint8), a byte written a 4 KiB page, dropped
  whole    np.zeros, written whole (fill), dropped
  work     np.zeros, written whole, then a 4 MiB array summed, dropped
  several  four np.zeros alive at once, each written whole, all dropped
  half     np.zeros, its first half written, dropped
  random   np.zeros, n/64 bytes written at random places, dropped

Goal: "auto" never much slower than plain np.zeros (the allocator it
replaces), and near the better of "hot" and "cold".

    python bench/pool_reuse.py [--sizes 1M 4M 16M] [--programs page whole ...]
                               [--rounds 7] [--modes cold auto hot]
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

import clearpages as cp
from clearpages.tools.lowlevel import parse_size
from clearpages.tools.output import cpu_line

PROGRAMS = ("page", "whole", "work", "several", "half", "random")


def step_of(program: str, n: int, other: np.ndarray, idx: np.ndarray):
    def page() -> None:
        a = np.zeros(n, np.uint8)
        a[::4096] = 1
        del a

    def whole() -> None:
        a = np.zeros(n, np.uint8)
        a.fill(1)
        del a

    def work() -> None:
        a = np.zeros(n, np.uint8)
        a.fill(1)
        int(other.sum())
        del a

    def several() -> None:
        xs = [np.zeros(n, np.uint8) for _ in range(4)]
        for x in xs:
            x.fill(1)
        del xs

    def half() -> None:
        a = np.zeros(n, np.uint8)
        a[: n // 2] = 1
        del a

    def random() -> None:
        a = np.zeros(n, np.uint8)
        a[idx] = 1
        del a

    return {"page": page, "whole": whole, "work": work, "several": several,
            "half": half, "random": random}[program]


def timed(step, iters: int, pool: cp.Pool | None, n: int) -> float:
    """us an iteration, plain (pool None) or under zeroed_arrays(pool): a
    block the page size rounded up still takes arrays of n bytes."""
    t = time.perf_counter()
    if pool is None:
        for _ in range(iters):
            step()
    else:
        with cp.zeroed_arrays(pool, min_size=n):
            for _ in range(iters):
                step()
    return (time.perf_counter() - t) / iters * 1e6


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", nargs="+", default=["1M", "4M", "16M"])
    ap.add_argument("--programs", nargs="+", default=list(PROGRAMS), choices=PROGRAMS)
    ap.add_argument("--modes", nargs="+", default=["cold", "auto", "hot"],
                    choices=["cold", "auto", "hot"])
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--iters", type=int, default=0, help="iterations a timed run "
                    "(default: about 100 MiB of arrays, at least 8)")
    args = ap.parse_args()
    print(cpu_line(cp.cpu()))
    other = np.ones(4 << 20, np.uint8)
    rng = np.random.default_rng(5)
    for size in args.sizes:
        n = parse_size(size)
        iters = args.iters or max(8, (100 << 20) // n)
        pools = {m: cp.Pool(n, capacity=16 * n, reuse=m) for m in args.modes}
        idx = rng.integers(0, n, n // 64)
        for program in args.programs:
            step = step_of(program, n, other, idx)
            cands = ["plain"] + list(args.modes)
            res: dict[str, list[float]] = {c: [] for c in cands}
            for c in cands:
                timed(step, iters, pools.get(c), n)
            for r in range(args.rounds):
                k = r % len(cands)
                for c in cands[k:] + cands[:k]:
                    res[c].append(timed(step, iters, pools.get(c), n))
            line = "%8s %-8s plain %8.1f us" % (size, program, statistics.median(res["plain"]))
            for m in args.modes:
                ratios = [x / y for x, y in zip(res[m], res["plain"])]
                line += " | %s %8.1f (%.2f, %.2f-%.2f)" % (
                    m, statistics.median(res[m]), statistics.median(ratios), min(ratios),
                    max(ratios))
            if "auto" in pools:
                s = pools["auto"].stats()
                line += "  [auto: %s, %d trials]" % (s.reusing, s.reuse_trials)
            print(line, flush=True)
        for p in pools.values():
            p.close()


if __name__ == "__main__":
    main()
