"""Small clears, warm and cold: auto against the static choice's two
routines and ``numpy.fill`` at a few KiB, where a page walked cold wants
streaming stores and a buffer cleared back to back wants ordinary ones.

Per size and case, every candidate clears 2,000 buffers a round through
the same call (``cp.clear(view, method=...)``; ``numpy.fill`` as
``view.fill(0)``), the candidates interleaved round by round in one
process.  Warm: one buffer, cleared again and again.  Cold: a walk over a
pool several times the last-level cache (prefaulted), each call the next
buffer, each round going on where the last one stopped.  Printed: each
candidate's median ns a call, and auto's ratio to the best candidate and
to ``numpy.fill`` as the median of the per-round ratios, with their range.
The clears are not used afterwards (the generated programs judge that).

    python bench/bench_small_walk.py [--sizes 4K 6K 8K 12K 14K] [--rounds 9]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import clearpages as cp
from clearpages.tools.lowlevel import format_size, parse_size

CALLS = 2000


def run(n: int, warm: bool, rounds: int, pool_bytes: int, np) -> dict[str, list[float]]:
    th = cp.thresholds()
    cands = {"auto": None, th.temporal: th.temporal, th.streaming: th.streaming,
             "numpy.fill": "fill"}
    stride = -(-n // 4096) * 4096
    if warm:
        buf = np.ones(n, dtype=np.uint8)
        views = [buf] * CALLS
        count = CALLS
    else:
        pool = np.ones(pool_bytes, dtype=np.uint8)       # prefaulted
        count = pool_bytes // stride
        views = [pool[i * stride:i * stride + n] for i in range(count)]
    clear = cp.clear
    times: dict[str, list[float]] = {c: [] for c in cands}
    pos = 0
    for _ in range(rounds):
        for name, how in cands.items():
            seq = views[pos:pos + CALLS] if not warm else views
            pos = 0 if warm else (pos + CALLS) % (count - CALLS)
            t0 = time.perf_counter_ns()
            if how == "fill":
                for v in seq:
                    v.fill(0)
            elif how is None:
                for v in seq:
                    clear(v)
            else:
                for v in seq:
                    clear(v, method=how)
            times[name].append((time.perf_counter_ns() - t0) / CALLS)
    return times


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", nargs="+", default=["4K", "6K", "8K", "12K", "14K"])
    ap.add_argument("--rounds", type=int, default=9)
    a = ap.parse_args(argv)
    try:
        import numpy as np
    except ImportError:
        print("bench_small_walk needs numpy (pip install numpy)", file=sys.stderr)
        return 2
    info = cp.cpu()
    l3 = info.last_cache or 32 << 20
    pool_bytes = min(max(8 * l3, 256 << 20), 2 << 30)
    th = cp.thresholds()
    print("%s; band %s-%s; pool %s; %d rounds of %d calls"
          % (info.brand or info.vendor, format_size(th.adapt_min), format_size(th.adapt_max),
             format_size(pool_bytes), a.rounds, CALLS))
    print("%-7s %-5s %s  %s  %s" % ("size", "case", "ns a call (median)",
                                    "auto/best [range]", "auto/numpy.fill [range]"))
    for s in a.sizes:
        n = parse_size(s)
        for warm in (True, False):
            t = run(n, warm, a.rounds, pool_bytes, np)
            med = {c: statistics.median(v) for c, v in t.items()}
            per_round = [min(t[c][r] for c in t) / t["auto"][r] for r in range(a.rounds)]
            vs_fill = [t["numpy.fill"][r] / t["auto"][r] for r in range(a.rounds)]
            print("%-7s %-5s %s  %.2f [%.2f-%.2f]  %.2f [%.2f-%.2f]" % (
                format_size(n), "warm" if warm else "cold",
                " ".join("%s %.0f" % (c, v) for c, v in med.items()),
                statistics.median(per_round), min(per_round), max(per_round),
                statistics.median(vs_fill), min(vs_fill), max(vs_fill)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
