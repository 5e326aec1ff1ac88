"""The learner on synthetic programs: a held buffer whose refill starts late.

A fresh learner (the test suite's configuration: a 32 MiB window, recent_max
8 MiB, sizes up to 12 MiB presumed kept) and one buffer of 10 MiB cleared
back to back, on the synthetic clock of ``tests/test_adapt.py`` (no memory is
touched: each call's cost is the model's).  What an ordinary-store clear
costs, in streaming clears, k being such clears since the latest streaming
one (a streaming clear pushes the buffer out of the cache):

- ``late L``: about 1.55 (0.5% less a call) for L calls, then 7% less a
  call down to 0.65: a buffer the machine keeps but brings back only after
  L flat calls (the Intel guest's 64 MiB buffer: L of 18-45);
- ``flat F``: F always: a size presumed kept that the machine does not keep.

Each program runs 50, 136 and 400 calls, with no work after a clear and with
work of 0.25 streaming clears after an ordinary-store clear and 0.5 after a
streaming one (which left the buffer out of the cache).  Printed per model:
the median and the least over 12 seeds of all-ordinary-stores time (what
memset costs) over auto's, and of the better fixed role's time over auto's.

    PYTHONPATH=. python bench/sim_held_wait.py [--seeds 12]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
from typing import Callable

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))

import test_adapt as A

from clearpages.tools.lowlevel import ffi, lib

Model = Callable[[int, int], float]
N = 10 * A.MiB


def late(flat_calls: int, top: float = 1.55) -> Model:
    def f(i: int, k: int) -> float:
        if not i:
            return 1.0
        if k < flat_calls:
            return float(top * 0.995 ** k)
        return float(max(0.65, top * 0.995 ** flat_calls * 0.93 ** (k - flat_calls)))
    return f


def flat(top: float) -> Model:
    return lambda i, k: top if i else 1.0


def fixed(f: Model, calls: int, use: tuple[float, float], role: int) -> float:
    """One role throughout: its time on the model (the first call, the
    buffer not recent yet, costs a streaming clear either way)."""
    sc = N * A.WARM[A.S]
    total = 0.0
    for i in range(calls):
        x = f(i, i - 1) if role == A.T and i else 1.0
        total += x * sc + use[role == A.S] * sc + 200
    return total


def configure() -> None:
    p = ffi.new("struct cp_adapt_params *")
    lib.cp_adapt_defaults(p)
    reuse = 32 * A.MiB
    p.lo, p.hi, p.reuse_bytes = 16 * A.KiB, 128 * A.MiB, reuse
    p.recent_max, p.decide_bytes = reuse // 4, 2 * reuse
    p.sample_bytes, p.recheck_bytes = reuse // 4, 16 * reuse
    p.stream_ns_per_byte = A.WARM[A.S]
    p.check_bytes, p.check_min = 8 * A.MiB, 1 * A.MiB
    p.held_max, p.kept_max = 32 * A.MiB, 12 * A.MiB
    lib.cp_adapt_configure(p)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seeds", type=int, default=12)
    a = ap.parse_args()
    saved = ffi.new("struct cp_adapt_params *")
    lib.cp_adapt_params(saved)
    configure()
    models = [("late %d" % n, late(n)) for n in (10, 20, 30, 45, 70)]
    models += [("flat %.1f" % x, flat(x)) for x in (1.3, 1.6, 2.2)]
    sc = N * A.WARM[A.S]
    print("%-11s %5s %-9s  %-22s %-22s" % ("work", "calls", "model", "memset/auto med (min)",
                                           "best fixed/auto med (min)"))
    try:
        for use in ((0.0, 0.0), (0.25, 0.5)):
            for calls in (50, 136, 400):
                for name, f in models:
                    of_memset, of_best = [], []
                    for seed in range(a.seeds):
                        prog = A.held_run(N, seed, calls, f, taught=False,
                                          use=(use[0] * sc, use[1] * sc))
                        t = fixed(f, calls, use, A.T)
                        s = fixed(f, calls, use, A.S)
                        of_memset.append(t / prog.spent)
                        of_best.append(min(t, s) / prog.spent)
                    print("%-11s %5d %-9s  %.3f (%.3f)          %.3f (%.3f)" % (
                        "%.2g/%.2g" % use, calls, name, statistics.median(of_memset),
                        min(of_memset), statistics.median(of_best), min(of_best)))
    finally:
        lib.cp_adapt_configure(saved)
    return 0


if __name__ == "__main__":
    sys.exit(main())
