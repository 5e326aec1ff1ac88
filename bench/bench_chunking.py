"""What the chunked job path costs against one direct call of the routine.

clear(buf, method=X) on a buffer larger than one chunk goes through a native
job (32 MiB units between deadline checks, back in Python every ~40 ms for
Ctrl-C); the baseline calls clearpages.tools.lowlevel.lib.cp_clear_X(ptr, n) once.
Goal (issue 3): under 2% cost.  A second table sweeps the unit size through
the job API directly (what "measure and choose" the chunk rests on).

    python -m pytest bench/bench_chunking.py -k quick
    python -m pytest bench/bench_chunking.py --slow
"""

from __future__ import annotations

import _common
import pytest
from _common import GiB, MiB, cp, fmt_size

SUITE = "chunking"
UNITS_SUITE = "chunk units"
FULL = _common.scaled(GiB, _common.env_scale())
QUICK = 256 * MiB


def _methods() -> list[str]:
    """The temporal routine auto uses and the widest streaming one."""
    th = cp.thresholds()
    out = [th.temporal] + _common.streaming_methods()[:1]
    return [m for m in dict.fromkeys(out) if m in cp.methods()]


def _cases():
    for quick, size in ((True, QUICK), (False, FULL)):
        for method in _methods():
            for path in ("direct", "chunked"):
                marks = [pytest.mark.benchmark(group="chunking %s%s %s" % (
                    "quick " if quick else "", fmt_size(size), method))]
                if not quick:
                    marks += _common.slow_marks(size)
                ident = "%s%s-%s-%s" % ("quick-" if quick else "", fmt_size(size), method, path)
                yield pytest.param(size, method, path, quick, id=ident, marks=marks)


@pytest.mark.parametrize("size,method,path,quick", list(_cases()))
def test_chunking(benchmark, buffers, size, method, path, quick):
    buf = buffers.get(size)
    mv = buf.view
    if path == "direct":
        fn = _common.direct_fn(method, buf)
    else:
        fn = lambda: cp.clear(mv, method=method)
    rounds = 8 if quick else 10
    _common.run_bench(benchmark, fn, suite=SUITE, label="%s %s" % (fmt_size(size), method),
                      variant=path, nbytes=size, total=0, rounds=rounds, iterations=1)
    assert mv[0] == 0 and mv[size - 1] == 0


UNITS = (2 * MiB, 8 * MiB, 32 * MiB, 128 * MiB)


@pytest.mark.parametrize("unit", [pytest.param(u, id=fmt_size(u), marks=_common.slow_marks(FULL))
                                  for u in UNITS])
@pytest.mark.benchmark(group="chunk unit sweep")
def test_unit(benchmark, buffers, unit):
    from clearpages.tools.lowlevel import run_job, state

    size = FULL
    buf = buffers.get(size)
    method = _common.streaming_methods()[0] if _common.streaming_methods() else "libc"

    def fn():
        # The job machinery itself, with a unit no public call takes.
        run_job(buf.address, size, method, unit)

    _common.run_bench(benchmark, fn, suite=UNITS_SUITE, label=fmt_size(unit), variant=method,
                      nbytes=size, total=0, rounds=6, iterations=1)
    assert buf.view[0] == 0 and buf.view[size - 1] == 0
    assert state().direct[method] is not None


@_common.summary_of(SUITE)
def _summary(res):
    rows = []
    for label in sorted({lab for lab, _ in res}, key=lambda s: (len(s), s)):
        d, c = res.get((label, "direct")), res.get((label, "chunked"))
        if not (d and c):
            continue
        cost = c["median"] / d["median"] - 1
        rows.append([label, "%.1f" % d["gbps"], "%.1f" % c["gbps"], "%+.1f%%" % (100 * cost),
                     "ok" if cost < 0.02 else "MISS"])
    units = _common.RESULTS.get(UNITS_SUITE, {})
    text = _common.table(["size, routine", "one call GB/s", "chunked GB/s", "cost", "goal"],
                         rows)
    unit_rows = [[lab, v, "%.1f" % r["gbps"]] for u in UNITS
                 for (lab, v), r in units.items() if lab == fmt_size(u)]
    if unit_rows:
        text += ("\n\nunit sweep, %s through the job API:\n" % fmt_size(FULL)
                 + _common.table(["unit", "routine", "GB/s"], unit_rows))
    return ("chunking: the job path vs one direct call, median (goal: cost under 2%)", text)
