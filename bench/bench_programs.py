"""auto judged by whole programs: a clear, then what the program does with it.

Pad a batch, a scratch buffer, a page pool and a wipe, each warm (the same
buffer every step) and cold (a different buffer of a >= 512 MiB pool every
step), and a hot scratch buffer with cold pool pages in turn (the mixed
program); every candidate interleaved in one process (clearpages/tools/programs.py
says what each step does and how it is timed).  Prints auto's ratio to the
best candidate per workload, case and size, with the interquartile range of
the per-round ratio, and the goals table:

    python bench/bench_programs.py [--sizes 64K 1M] [--workloads pad pool]
                                   [--repeat 15] [--quick]

(the same as ``python -m clearpages bench --programs``).  Under pytest, one
case per workload and size (``-k programs``), the ratios in extra_info and
in the session's summary.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

import _common
import pytest

from clearpages.tools import measure as _measure, programs as _programs
from clearpages.tools.lowlevel import format_size


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", nargs="+", type=_common.size_arg)
    ap.add_argument("--workloads", nargs="+", choices=_programs.WORKLOADS)
    ap.add_argument("--repeat", type=int, default=15, help="rounds")
    ap.add_argument("--quick", action="store_true", help="three sizes, two mixed, 9 rounds")
    ap.add_argument("--no-mixed", action="store_true")
    a = ap.parse_args(argv)
    sizes = a.sizes or list(_programs.QUICK_SIZES if a.quick else _programs.SIZES)
    mixed = [] if a.no_mixed else [
        n for n in (_programs.QUICK_MIXED_SIZES if a.quick else _programs.MIXED_SIZES)
        if a.sizes is None or n in sizes]
    print(_common.machine_label())
    print()
    res = _programs.run(sizes, a.workloads or _programs.WORKLOADS, mixed_sizes=mixed,
                        rounds=9 if a.quick and a.repeat == 15 else a.repeat)
    _programs.report(res, sys.stdout)
    return 0


SUITE = "programs"
CASES = [(w, n) for w in _programs.WORKLOADS for n in _programs.SIZES
         if not (w == _programs.WIPE and n > _programs.WIPE_MAX)]


@pytest.fixture(scope="module")
def pool():
    if not _measure.have_numpy():
        pytest.skip("the programs need numpy")
    with _measure.Buffer(_measure.cold_pool_size()) as buf:
        yield buf


def _record(benchmark: Any, cell: _programs.Cell) -> None:
    key = (format_size(cell.size), cell.workload, cell.scenario)
    names = [n for n in (_programs.AUTO,) + _programs.HINTS if n in cell.times]
    rec: dict[str, Any] = {}
    for n in names:
        benchmark.extra_info["%s %s/best" % (cell.scenario, n)] = round(cell.ratio(n), 3)
        rec[n] = (cell.ratio(n), cell.spread(n), cell.verdict(n))
    benchmark.extra_info["%s best" % cell.scenario] = cell.best
    _common.RESULTS.setdefault(SUITE, {})[key] = rec


@pytest.mark.parametrize("workload,size", CASES,
                         ids=["%s-%s" % (w, format_size(n).replace(" ", "")) for w, n in CASES])
def test_programs(benchmark, pool, workload, size):
    """One workload at one size, warm and cold: the time is the whole
    measurement; extra_info and the summary hold auto's ratio to the best."""
    names = _programs.candidate_names()
    out: list[_programs.Cell] = []

    def program() -> None:
        out[:] = [_programs.measure_cell(pool, workload, sc, size, names, rounds=9)
                  for sc in _measure.SCENARIOS]
    benchmark.pedantic(program, rounds=1, iterations=1)
    for cell in out:
        _record(benchmark, cell)


@pytest.mark.parametrize("size", _programs.MIXED_SIZES,
                         ids=[format_size(n).replace(" ", "") for n in _programs.MIXED_SIZES])
def test_programs_mixed(benchmark, pool, size):
    out: list[_programs.Cell] = []

    def program() -> None:
        out[:] = [_programs.measure_mixed(pool, size, rounds=9)]
    benchmark.pedantic(program, rounds=1, iterations=1)
    _record(benchmark, out[0])


@_common.summary_of(SUITE)
def _summary(res: dict) -> tuple[str, str]:
    rows = []
    for (label, workload, scenario), rec in res.items():
        r, (q1, q3), v = rec[_programs.AUTO]
        hints = ["%.2f" % rec[w][0] if w in rec else "-" for w in _programs.HINTS]
        rows.append([workload, scenario, label, "%.2f" % r, "%.2f-%.2f" % (q1, q3), *hints, v])
    return ("programs: auto's ratio to the best candidate (goals: 0.9; cold, then used "
            "0.75; hot=True 0.95 when used; a median below the goal is a miss, a spread "
            "across it both ways 'unmeasured, retake')",
            _common.table(["workload", "case", "size", "auto/best", "IQR", "hot=True",
                           "hot=False", "verdict"], rows))


def test_programs_quick():
    """Smoke: one small size, few rounds, every workload and the mixed one."""
    if not _measure.have_numpy():
        pytest.skip("the programs need numpy")
    n = 64 * 1024
    res = _programs.run([n], mixed_sizes=[n], rounds=2, target_s=0.0002)
    assert len(res.cells) == 2 * len(_programs.WORKLOADS) and res.mixed
    assert all(c.ratio() > 0 for c in res.cells)


if __name__ == "__main__":
    raise SystemExit(main())
