"""Every method, ctypes.memset, numpy.fill and "auto" at 4 KiB .. 1 GiB.

Goals (bench/README.md): auto at least 0.95 of the best routine at every
size, never slower than ctypes.memset (4 KiB included), and at least 1.2x
ctypes.memset at 1-4x the L3 size.  The L3 reported here is 300 MiB, so 1-4x
is 300 MiB-1.2 GiB: the 512 MiB and 1 GiB cases (marked slow) are the ones
that test it.

    python -m pytest bench/bench_methods.py -k quick
    python -m pytest bench/bench_methods.py --slow --benchmark-json=methods.json
"""

from __future__ import annotations

import os

import _common
import pytest
from _common import GiB, KiB, MiB, cp, fmt_size, ratio

from clearpages.tools import measure as _measure

SUITE = "methods"
SIZES = (4 * KiB, 64 * KiB, 1 * MiB, 8 * MiB, 32 * MiB, 64 * MiB, 128 * MiB,
         512 * MiB, 1 * GiB)
QUICK = (4 * KiB, 1 * MiB, 64 * MiB)
BASELINES = (_measure.MEMSET, _measure.NUMPY_FILL)
#: "direct:X" calls the routine itself (no argument checks, no policy): the
#: routine's own speed, which "best" is taken from; "X" is clear(method="X").
DIRECT = tuple("direct:%s" % m for m in cp.methods())
VARIANTS = ("auto",) + tuple(cp.methods()) + DIRECT + BASELINES

#: Bytes cleared per case (spread over rounds): enough for a stable median,
#: little enough that the whole file runs in a couple of minutes.
TOTAL = int(os.environ.get("CLEARPAGES_BENCH_TOTAL", 2 * GiB))
QUICK_TOTAL = 256 * MiB


def _cases():
    for i, size in enumerate(SIZES, 1):
        for variant in VARIANTS:
            quick = size in QUICK
            # Numbered so that pytest-benchmark's name-sorted groups come by size.
            marks = [pytest.mark.benchmark(group="methods %d: %s" % (i, fmt_size(size)))]
            marks += _common.slow_marks(size)
            ident = "%s%s-%s" % ("quick-" if quick else "", fmt_size(size), variant)
            yield pytest.param(size, variant, quick, marks=marks, id=ident)


@pytest.mark.parametrize("size,variant,quick", list(_cases()))
def test_clear(benchmark, buffers, size, variant, quick):
    if variant == "numpy.fill" and _common.np is None:
        pytest.skip("numpy is not installed")
    buf = buffers.get(size)
    if variant.startswith("direct:"):
        fn = _common.direct_fn(variant[len("direct:"):], buf)
    else:
        fn = _common.clear_fn(variant, buf)
    rec = _common.run_bench(benchmark, fn, suite=SUITE, label=fmt_size(size),
                            variant=variant, nbytes=size,
                            total=QUICK_TOTAL if quick else TOTAL)
    if rec is not None and variant == "auto":
        benchmark.extra_info["plan"] = cp.plan(size, threads=1).method
    # The clear happened (a wrong pointer or length would leave bytes).
    assert buf.view[0] == 0 and buf.view[size - 1] == 0 and buf.view[size // 2] == 0


@_common.summary_of(SUITE)
def _summary(res):
    l3 = cp.cpu().l3
    rows = []
    for size in SIZES:
        label = fmt_size(size)
        got = {v: r["gbps"] for (lab, v), r in res.items() if lab == label}
        if "auto" not in got:
            continue
        routines = {v: g for v, g in got.items() if v in DIRECT}
        best = max(routines, key=routines.get) if routines else None
        called = {v: g for v, g in got.items() if v in cp.methods()}
        best_called = max(called, key=called.get) if called else None
        auto, memset = got["auto"], got.get(_measure.MEMSET)
        in_l3_band = bool(l3) and l3 <= size <= 4 * l3
        goals = []
        if best:
            goals.append("best" if auto >= 0.95 * routines[best] else "MISS best")
        if memset:
            need = 1.2 if in_l3_band else 1.0
            goals.append(("memset" if auto >= need * memset else "MISS memset")
                         + (" x1.2" if in_l3_band else ""))
        rows.append([label, best[len("direct:"):] if best else "-",
                     "%.1f" % routines[best] if best else "-",
                     "%s %.1f" % (best_called, called[best_called]) if best_called else "-",
                     "%.1f" % auto, ratio(auto, routines.get(best)),
                     "%.1f" % memset if memset else "-", ratio(auto, memset),
                     "%.1f" % got["numpy.fill"] if "numpy.fill" in got else "-",
                     cp.plan(size, threads=1).method, ", ".join(goals)])
    if not rows:
        return None
    text = _common.table(
        ["size", "best routine", "direct GB/s", "best clear(method=)", "auto GB/s",
         "auto/best", "memset GB/s", "auto/memset", "numpy.fill GB/s", "auto plan", "goals"], rows)
    note = ("best: the fastest routine called directly; goals: auto/best >= 0.95 at "
            "every size; auto/memset >= 1.0, and >= 1.2 at 1-4x L3 (%s-%s here)"
            % (fmt_size(l3), fmt_size(4 * l3)) if l3 else "")
    return "methods: median GB/s per size, one process (%s)" % note, text
