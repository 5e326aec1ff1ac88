"""Warm or cold: ordinary against streaming stores when the buffer is, or is
not, still in the cache.

Between the L2 and the memory the winner depends less on the size than on
whether the lines are cached: cleared again right after it was written a
buffer is "warm" (ordinary stores hit the cache), cleared after other work
evicted it "cold" (streaming stores skip the read-for-ownership).  Routines
are called directly; before each cold clear a streaming clear of another
512 MiB buffer evicts this one.

    python bench/bench_warm_cold.py [--sizes 4M 8M 16M ...]
"""

from __future__ import annotations

import argparse
import functools
import mmap
import statistics
import time

import _common

from clearpages import _core
from clearpages._native import ffi, lib

EVICT = 512 << 20
NAMES = ("rep_stosb", "rep_stosq", "libc", "avx512_nt", "avx2_nt")
SIZES = ("4M", "8M", "16M", "24M", "32M", "48M", "64M")


def _median_gbps(n: int, fn, before=None, rounds: int = 9) -> float:
    times = []
    fn()
    for _ in range(rounds):
        if before is not None:
            before()
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return n / statistics.median(times) / 1e9


def run(sizes: list[int], rounds: int = 9) -> str:
    names = [m for m in NAMES if m in _core._state.direct]
    streaming = _core._state.thresholds.streaming
    evict_map = mmap.mmap(-1, EVICT)
    evict = functools.partial(_core._state.direct[streaming], ffi.from_buffer(evict_map), EVICT)
    rows = []
    for n in sizes:
        m = mmap.mmap(-1, n)
        m.madvise(mmap.MADV_HUGEPAGE)
        ptr = ffi.from_buffer(m)
        lib.cp_clear_libc(ptr, n)
        row: list[object] = [_common.fmt_size(n)]
        for name in names:
            clear = functools.partial(_core._state.direct[name], ptr, n)
            warm = _median_gbps(n, clear, rounds=rounds)
            cold = _median_gbps(n, clear, before=evict, rounds=rounds)
            row.append("%.1f / %.1f" % (warm, cold))
        rows.append(row)
        ptr = clear = None          # the exports go, so the maps can close
        m.close()
    evict = None
    evict_map.close()
    return ("GB/s, median of %d clears, warm / cold (cold: after a %s clear of another "
            "512 MiB buffer)\n" % (rounds, streaming)
            + _common.table(["size"] + ["%s warm / cold" % n for n in names], rows))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", nargs="+", type=_common.size_arg)
    ap.add_argument("--rounds", type=int, default=9)
    a = ap.parse_args(argv)
    print(_common.machine_label())
    print()
    print(run(a.sizes or [_common.size_arg(s) for s in SIZES], a.rounds))
    return 0


def test_warm_cold_quick():
    text = run([4 << 20], rounds=2)
    assert "4MiB" in text and "warm / cold" in text


if __name__ == "__main__":
    raise SystemExit(main())
