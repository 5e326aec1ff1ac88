"""Per-call cost of clearing a tensor in place: cp.clear(t) of a torch
tensor (DLPack, in the native entry) against t.zero_(), and of a numpy
array against a.fill(0), with a numpy array behind an object that offers
only __dlpack__ (the protocol's general path) beside them.

Every case runs round by round, interleaved, on the same warm 4 KiB (by
default) buffer, timed by the thread's CPU time (time another process
holds the CPU does not count); the best round of each is kept (the least
disturbed on a shared machine), the median beside it, both less the empty
loop's cost.  Clear-only and warm: the cost of the call, not of memory.
The ratios to t.zero_() are each round's own (both timed in it): their
median, quartiles and extremes.

--parts adds, as rows of their own, the torch calls a clear is made of
(from Python, so each carries an attribute lookup's cost, the baseline
row's) and the exports it avoids: t.__dlpack__() and the C function it
ends in.

    python bench/bench_dlpack.py [--size 4K] [--rounds 200] [--number 2000] [--parts]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import clearpages as cp
from clearpages.tools.lowlevel import parse_size


class OnlyDLPack:
    """An array that offers nothing but DLPack (no buffer protocol)."""

    def __init__(self, a):
        self.a = a

    def __dlpack__(self, **kw):
        return self.a.__dlpack__(**kw)

    def __dlpack_device__(self):
        return self.a.__dlpack_device__()


def ns_per_call(fn, number: int) -> float:
    """CPU time of this thread per call: on a shared machine, time another
    process held the CPU does not count."""
    t0 = time.thread_time_ns()
    for _ in range(number):
        fn()
    return (time.thread_time_ns() - t0) / number


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--size", default="4K")
    ap.add_argument("--rounds", type=int, default=200)
    ap.add_argument("--number", type=int, default=2000)
    ap.add_argument("--parts", action="store_true",
                    help="time the torch calls a clear makes, and the exports it avoids")
    args = ap.parse_args(argv)
    n, k = parse_size(args.size), args.number
    clear = cp.clear
    cases = {"nothing": lambda: None}
    try:
        import numpy as np
    except ImportError:
        np = None
    if np is not None:
        a = np.ones(n // 4, dtype=np.float32)
        wrapped = OnlyDLPack(a)
        cases["a.fill(0)"] = lambda: a.fill(0)
        cases["cp.clear(a)"] = lambda: clear(a)
        cases["cp.clear(__dlpack__ only)"] = lambda: clear(wrapped)
    try:
        import torch
    except ImportError:
        torch = None
        print("torch is not installed: only the numpy rows (pip install "
              "'torch==2.13.0+cpu' for the torch ones)")
    if torch is not None:
        t = torch.ones(n // 4, dtype=torch.float32)
        h = torch.ones(n // 2, dtype=torch.bfloat16)
        cases["t.zero_()"] = lambda: t.zero_()
        cases["cp.clear(t)"] = lambda: clear(t)
        cases["h.zero_() bfloat16"] = lambda: h.zero_()
        cases["cp.clear(h) bfloat16"] = lambda: clear(h)
        cases["t.numpy() + cp.clear"] = lambda: clear(t.numpy())
        every = cp.nonzero_pages(torch.ones(n // 4))     # every page of t
        first = [0]
        u = torch.ones(n, dtype=torch.uint8)
        cases["cp.clear_pages(t, pages)"] = lambda: cp.clear_pages(t, every)
        cases["cp.clear_pages(t, [0])"] = lambda: cp.clear_pages(t, first)
        cases["u.zero_() uint8"] = lambda: u.zero_()
        cases["cp.clear(u) uint8"] = lambda: clear(u)
        cases["cp.clear_pages(u, [0]) uint8"] = lambda: cp.clear_pages(u, first)
        if args.parts:
            bump, export, one = torch._C._increment_version, torch._C._to_dlpack_versioned, (t,)
            cases["  (1).real, the baseline"] = lambda: (1).real
            cases["  t.requires_grad"] = lambda: t.requires_grad
            cases["  t._version"] = lambda: t._version
            cases["  _increment_version((t,))"] = lambda: bump(one)
            cases["  t.is_contiguous()"] = lambda: t.is_contiguous()
            cases["  t.data_ptr()"] = lambda: t.data_ptr()
            cases["  _to_dlpack_versioned(t)"] = lambda: export(t)
            cases["  t.__dlpack__()"] = lambda: t.__dlpack__()
    got: dict[str, list[float]] = {name: [] for name in cases}
    for _ in range(args.rounds):
        for name, fn in cases.items():
            got[name].append(ns_per_call(fn, k))
    base = min(got.pop("nothing"))
    info = cp.cpu()
    print("per call at %s, warm, clear-only: ns, best / median of %d rounds of %d calls, "
          "less the empty loop's %.0f ns" % (args.size, args.rounds, k, base))
    print("%s; Python %s%s%s" % (info.brand or info.vendor, sys.version.split()[0],
                                 ", numpy %s" % np.__version__ if np is not None else "",
                                 ", torch %s" % torch.__version__ if torch is not None else ""))
    for name, xs in got.items():
        print("  %-30s %6.0f / %6.0f" % (name, min(xs) - base, statistics.median(xs) - base))
    if torch is not None:
        print("against zero_() of the same tensor, each round's own ratio: median "
              "[quartiles] (best, worst); the goal is at most 1")
        for name, zero in (("cp.clear(t)", "t.zero_()"),
                           ("cp.clear_pages(t, pages)", "t.zero_()"),
                           ("cp.clear_pages(t, [0])", "t.zero_()"),
                           ("cp.clear(u) uint8", "u.zero_() uint8"),
                           ("cp.clear_pages(u, [0]) uint8", "u.zero_() uint8")):
            ratios = sorted((x - base) / (z - base) for x, z in zip(got[name], got[zero]))
            q = statistics.quantiles(ratios, n=4) if len(ratios) > 1 else ratios * 3
            print("  %-30s %.2fx [%.2f-%.2f] (%.2f, %.2f)" % (
                name, statistics.median(ratios), q[0], q[2], ratios[0], ratios[-1]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
