"""Per-call cost at 4 KiB: the goals "auto at most 1.1x numpy.fill" and
"every explicit method, and the keyword form method='auto', at most 1.2x
auto".

An explicit method and auto differ in two ways: the per-call path and,
unless auto happens to run that routine, the routine itself (at 4 KiB a
streaming store costs several times a rep stosb).  So each explicit method
is set against auto running the same routine (CLEARPAGES_METHOD forces it),
round by round, interleaved; the best round of each is kept (the least
disturbed on a shared machine), with the median beside it.

    python bench/bench_percall.py [--size 4K] [--rounds 25]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import timeit
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import clearpages as cp
from clearpages.tools.lowlevel import parse_size


def ns_per_call(fn, number: int) -> float:
    return timeit.timeit(fn, number=number) / number * 1e9


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--size", default="4K")
    ap.add_argument("--rounds", type=int, default=25)
    ap.add_argument("--number", type=int, default=20000)
    args = ap.parse_args(argv)
    n, k = parse_size(args.size), args.number
    try:
        import numpy as np
    except ImportError:
        np = None
    b = bytearray(n)
    clear = cp.clear
    cases = {"nothing": lambda: None, "auto": lambda: clear(b),
             "method='auto'": lambda: clear(b, method="auto")}
    if np is not None:
        a = np.zeros(n, dtype=np.uint8)
        cases["numpy.fill"] = lambda: a.fill(0)
    got: dict[str, list[float]] = {name: [] for name in cases}
    pairs: dict[str, tuple[list[float], list[float]]] = {m: ([], []) for m in cp.methods()}
    for _ in range(args.rounds):
        for name, fn in cases.items():
            got[name].append(ns_per_call(fn, k))
        for m, (explicit, forced) in pairs.items():
            explicit.append(ns_per_call(lambda m=m: clear(b, method=m), k))
            cp.reload_config({"CLEARPAGES_METHOD": m})
            forced.append(ns_per_call(lambda: clear(b), k))
            cp.reload_config()
    base = min(got["nothing"])      # the timing loop and the lambda's call

    def cost(xs: list[float]) -> tuple[float, float]:
        return min(xs) - base, statistics.median(xs) - base

    info = cp.cpu()
    print("per call at %s, ns (best / median of %d rounds of %d calls, less the empty "
          "lambda's %.0f ns); %s, Python %s"
          % (args.size, args.rounds, k, base, info.brand or info.vendor,
             sys.version.split()[0]))
    auto, auto_med = cost(got["auto"])
    print("auto runs %s here" % cp.plan(n, threads=1).method)
    if "numpy.fill" in got:
        nf, nf_med = cost(got["numpy.fill"])
        print("auto %.0f / %.0f, numpy.fill %.0f / %.0f: auto = %.2fx numpy.fill (goal <= 1.1x)"
              % (auto, auto_med, nf, nf_med, auto / nf))
    kw, kw_med = cost(got["method='auto'"])
    print("method='auto' %.0f / %.0f: %.2fx auto (goal <= 1.2x)" % (kw, kw_med, kw / auto))
    print("%-10s %14s %14s %7s" % ("method", "method=NAME", "auto forced", "ratio"))
    worst = 0.0
    for m, (explicit, forced) in pairs.items():
        e, e_med = cost(explicit)
        f, f_med = cost(forced)
        worst = max(worst, e / f)
        print("%-10s %6.0f / %5.0f %6.0f / %5.0f %6.2fx" % (m, e, e_med, f, f_med, e / f))
    print("worst explicit method / auto with the same routine: %.2fx (goal <= 1.2x)" % worst)
    return 0


if __name__ == "__main__":
    sys.exit(main())
