"""The ordinary-store routines against each other, from the L2 up: which one
the learner's temporal role should run.

For each size: one buffer cleared back to back (``warm``, clear only); the
same with 1/16 of its 8-byte words written at random after each clear
(``used``, what a program that fills what it cleared does); and a walk
over a pool of such buffers, a new one each call (``cold``).  Each round
times every method once, in a fresh order each round; a method's figure is
the median over rounds of its time against the first method's in the same
round (above 1: faster than the first), with the interquartile range of
those ratios beside it.  Clear and writes are timed together.

    python bench/bench_temporal.py [--methods rep_stosb rep_stosq libc]
        [--sizes 512K 1M 2M 4M 8M 12M 16M 24M] [--rounds 9] [--pool 512M]

Needs numpy (the random writes).
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time

from _common import cp, machine_label

from clearpages.tools.lowlevel import format_size, parse_size

CASES = ("warm", "used", "cold")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--methods", nargs="+", default=["rep_stosb", "rep_stosq", "libc"])
    ap.add_argument("--sizes", nargs="+", default=["512K", "1M", "2M", "4M", "8M", "12M",
                                                   "16M", "24M"])
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--pool", default="512M", help="the cold walk's pool")
    ap.add_argument("--bytes", default="64M", help="bytes cleared per method per round")
    args = ap.parse_args(argv)
    import numpy as np

    sizes = [parse_size(s) for s in args.sizes]
    per_round = parse_size(args.bytes)
    pool = np.ones(parse_size(args.pool), np.uint8)   # written: no timed page faults
    rng = np.random.default_rng(1)

    def run(method: str, n: int, case: str, calls: int) -> float:
        if case == "cold":
            k = len(pool) // n
            t0 = time.perf_counter()
            for i in range(calls):
                cp.clear(pool[(i % k) * n:(i % k + 1) * n], method=method)
            return time.perf_counter() - t0
        buf, words, idx = bufs[n]
        t0 = time.perf_counter()
        for _ in range(calls):
            cp.clear(buf, method=method)
            if case == "used":
                words[idx] = 1
        return time.perf_counter() - t0

    bufs = {}
    for n in sizes:
        b = np.ones(n, np.uint8)
        w = b[:n - n % 8].view(np.uint64)     # whole words; the tail is left alone
        bufs[n] = (b, w, rng.integers(0, w.size, w.size // 16))
    base = args.methods[0]
    print(machine_label())
    print("each figure: the median over %d rounds of its time against %s's in the "
          "round (above 1: faster), interquartile range in brackets" % (args.rounds, base))
    for n in sizes:
        for case in CASES:
            if case == "cold" and len(pool) < 4 * n:
                continue
            calls = max(4, per_round // n)
            times: dict[str, list[float]] = {m: [] for m in args.methods}
            for _ in range(args.rounds):
                order = list(args.methods)
                random.shuffle(order)
                for m in order:
                    times[m].append(run(m, n, case, calls))
            cells = []
            for m in args.methods[1:]:
                r = sorted(a / b for a, b in zip(times[base], times[m]))
                q = len(r) // 4
                cells.append("%s %.3f [%.3f-%.3f]" % (m, statistics.median(r), r[q],
                                                       r[-1 - q]))
            print("%7s %-4s %s %5.1f GB/s | %s" % (
                format_size(n), case, base, n * calls / statistics.median(times[base]) / 1e9,
                " | ".join(cells)), flush=True)
    return 0



def test_temporal_quick(capsys):
    import pytest

    pytest.importorskip("numpy")
    assert main(["--sizes", "1M", "--rounds", "2", "--pool", "8M", "--bytes", "4M"]) == 0
    out = capsys.readouterr().out
    assert "1 MiB warm" in out and "1 MiB cold" in out and "rep_stosq" in out


if __name__ == "__main__":
    sys.exit(main())
