"""Warm or cold: ordinary against streaming stores when the buffer is, or is
not, still in the cache, with auto beside them.

Between a few KiB and a few times the L3 the winner depends less on the
size than on whether the lines are cached: cleared again right after it was
written a buffer is "warm" (ordinary stores hit the cache), cleared after
other work evicted it "cold" (streaming stores skip the read-for-ownership).
The measurement is the package's own (``clearpages.tools.measure``: warm = the
same buffer back to back, cold = a different buffer each call walking a pool
much larger than the L3), the routines called directly, auto as
``clearpages.clear(view)``.  The last column is each routine's score, the
worse of its two ratios to the best routine of each case: what ``auto`` is
judged by.

    python bench/bench_warm_cold.py [--sizes 1M 4M 16M ...] [--repeat N]
"""

from __future__ import annotations

import argparse

import _common

import clearpages as cp
from clearpages.tools import measure as _measure, profile as _profile
from clearpages.tools.lowlevel import format_size

SIZES = ("64K", "1M", "4M", "8M", "16M", "32M", "64M")


def run(sizes: list[int], repeat: int = 7, target_s: float = 0.002) -> str:
    names = list(cp.methods())
    cands = [_measure.routine(n) for n in names] + [_measure.auto()]
    rows = []
    for size, cases in zip(sizes, _measure.measure(sizes, cands, repeat=repeat,
                                                   target_s=target_s, budget_s=3.0)):
        med = {sc: {n: m.median for n, m in row.items()} for sc, row in cases.items()}
        auto = _profile.judge(med, _measure.AUTO)
        score = _profile.scores({sc: {n: v for n, v in row.items() if n != _measure.AUTO}
                                 for sc, row in med.items()})
        for n in names + [_measure.AUTO]:
            rows.append([format_size(size) if n == names[0] else "", n,
                         " / ".join("%.1f" % med[sc][n] for sc in _measure.SCENARIOS
                                    if sc in med),
                         "%.2f" % (auto.score if n == _measure.AUTO else score[n])
                         if (auto.score if n == _measure.AUTO else score.get(n)) is not None
                         else "-"])
    return ("GB/s (median of %d), warm / cold; score = min(warm/best warm, cold/best cold)\n"
            % repeat + _common.table(["size", "method", "warm / cold GB/s", "score"], rows))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", nargs="+", type=_common.size_arg)
    ap.add_argument("--repeat", type=int, default=7)
    a = ap.parse_args(argv)
    print(_common.machine_label())
    print()
    print(run(a.sizes or [_common.size_arg(s) for s in SIZES], a.repeat))
    return 0


def test_warm_cold_quick():
    text = run([1 << 20], repeat=2, target_s=0.0005)
    assert "1 MiB" in text and "warm / cold" in text and "auto" in text


if __name__ == "__main__":
    raise SystemExit(main())
