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

    python bench/bench_refill.py [--sizes 1536K 4M 8M 16M 24M] [--calls 8] [--rounds 15]
"""

from __future__ import annotations

import argparse
import statistics
import time

import _common
from _common import Buffer, MiB, cp, fmt_size

SIZES = ("1536K", "3M", "6M", "8M", "12M", "16M", "24M")


def run(sizes: list[int], calls: int = 8, rounds: int = 15) -> str:
    th = cp.thresholds()
    temporal, streaming = th.temporal, th.streaming
    if streaming not in cp.methods():
        return "no streaming routine usable here (%s)" % streaming
    rows = []
    for size in sizes:
        buf = Buffer(size)
        try:
            t_fn = _common.direct_fn(temporal, buf)
            s_fn = _common.direct_fn(streaming, buf)
            after_s: list[list[float]] = [[] for _ in range(calls)]
            after_t: list[list[float]] = [[] for _ in range(calls)]
            for _ in range(rounds):
                for fn, out in ((t_fn, after_s), (s_fn, after_t)):
                    for k in range(calls):
                        t0 = time.perf_counter_ns()
                        fn()
                        out[k].append((time.perf_counter_ns() - t0) / size)
            for name, col in ((temporal + " after " + streaming, after_s),
                              (streaming + " after " + temporal, after_t)):
                med = [statistics.median(c) for c in col]
                rows.append([fmt_size(size) if col is after_s else "", name]
                            + ["%.4f" % m for m in med])
        finally:
            buf.close()
    head = ["size", "calls in a row"] + [str(k + 1) for k in range(calls)]
    return ("ns per byte, each call of a run of %d, median of %d rounds (one buffer per size)\n"
            % (calls, rounds) + _common.table(head, rows))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", nargs="+", type=_common.size_arg)
    ap.add_argument("--calls", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=15)
    a = ap.parse_args(argv)
    print(_common.machine_label())
    print()
    print(run(a.sizes or [_common.size_arg(s) for s in SIZES], a.calls, a.rounds))
    return 0


def test_refill_quick():
    text = run([2 * MiB], calls=3, rounds=2)
    assert ("2MiB" in text and "after" in text) or "no streaming routine" in text


if __name__ == "__main__":
    raise SystemExit(main())
