"""Knowing what is already zero: is_zero, nonzero_pages, and a clear that
leaves never-touched memory alone, each against what numpy does.

Goals (a benchmark, never a timed test; the summary names the CPU):
- is_zero at least 6x numpy's ``a.any()`` at 64 KiB in cache, at least 1.6x
  at 256 MiB (out of cache), and under 5 us on 256 MiB whose first byte is
  nonzero;
- nonzero_pages on 1 GiB with 1% of its 4 KiB pages dirty at least 3x
  ``np.flatnonzero(a.reshape(-1, 4096).any(axis=1))``, with the same indices;
- a clear of a 1 GiB ``np.zeros`` with 16 pages touched at least 50x
  ``a.fill(0)``, resident memory grown by at most 64 MiB;
- on a fully resident buffer the look for untouched pages costs at most 2%
  of the clear at 64 MiB and at 1 GiB (clear with the look against clear
  without it, interleaved).

    python -m pytest bench/bench_scan.py -k quick      # 64 KiB and 256 MiB cases
    python -m pytest bench/bench_scan.py --slow        # and the 1 GiB ones
    python bench/scan_interleaved.py 9                   # the headline cases, interleaved
"""

from __future__ import annotations

import functools
import os
import statistics
import time

import _common
import pytest
from _common import GiB, KiB, MiB, cp, ratio

from clearpages.tools.lowlevel import UNTOUCHED_MIN, fast as _fast

np = pytest.importorskip("numpy")

SUITE = "scan"
PAGE = 4096


def resident() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * PAGE


_arrays: dict = {}


def _zeros(n: int, tag: str = "") -> np.ndarray:
    """A resident zero array of n bytes, kept for the cases of its size."""
    key = (n, tag)
    if key not in _arrays:
        for k in [k for k in _arrays if k[0] >= 64 * MiB]:
            del _arrays[k]
        a = np.zeros(n, dtype=np.uint8)
        a.fill(0)                   # resident: every page written
        _arrays[key] = a
    return _arrays[key]


@pytest.fixture(scope="module", autouse=True)
def _drop_arrays():
    yield
    _arrays.clear()


# ---- is_zero against a.any() -------------------------------------------------

SCANS = [("quick-64KiB-in-cache", 64 * KiB), ("quick-256MiB-from-memory", 256 * MiB)]


@pytest.mark.parametrize("variant", ["is_zero", "is_zero_threads_auto", "numpy_any"])
@pytest.mark.parametrize("label,n", SCANS, ids=[s[0] for s in SCANS])
def test_scan(benchmark, label, n, variant):
    benchmark.group = "scan %s" % label
    a = _zeros(n)
    # Called as they are (no lambda around them): at 64 KiB a Python frame
    # is a tenth of is_zero's time.
    fn = {"is_zero": functools.partial(cp.is_zero, a),
          "is_zero_threads_auto": functools.partial(cp.is_zero, a, threads="auto"),
          "numpy_any": a.any}[variant]
    assert fn() in (True, False, np.False_)
    _common.run_bench(benchmark, fn, suite=SUITE, label=label, variant=variant, nbytes=n,
                      total=max(n * 12, 2 * GiB if n < MiB else 0))


@pytest.mark.parametrize("variant", ["is_zero", "numpy_any"])
def test_scan_first_byte_nonzero(benchmark, variant):
    benchmark.group = "scan quick-256MiB-first-byte-nonzero"
    a = _zeros(256 * MiB, "dirty")
    a[0] = 1
    fn = functools.partial(cp.is_zero, a) if variant == "is_zero" else a.any
    _common.run_bench(benchmark, fn, suite=SUITE, label="256 MiB, first byte nonzero",
                      variant=variant, nbytes=0, total=0,
                      rounds=200 if variant == "is_zero" else 5,
                      iterations=100 if variant == "is_zero" else 1)


# ---- nonzero_pages against numpy ---------------------------------------------------

PAGES = [pytest.param(256 * MiB, id="quick-256MiB"),
         pytest.param(GiB, id="1GiB", marks=_common.slow_marks(GiB))]


@pytest.mark.parametrize("variant", ["nonzero_pages", "nonzero_pages_threads_auto", "numpy"])
@pytest.mark.parametrize("n", PAGES)
def test_dirty_pages(benchmark, n, variant):
    """nonzero_pages with its default threads=1, and with threads="auto" (the
    threads a clear of that size gets, which the summary names)."""
    benchmark.group = "dirty pages %s, 1%% of 4 KiB pages" % _common.fmt_size(n)
    a = _zeros(n, "pages")
    rng = np.random.default_rng(19)
    dirty = np.sort(rng.choice(n // PAGE, size=n // PAGE // 100, replace=False))
    a[dirty * PAGE + rng.integers(0, PAGE, size=dirty.size)] = 1
    if variant == "nonzero_pages":
        fn = lambda: cp.nonzero_pages(a)
    elif variant == "nonzero_pages_threads_auto":
        fn = lambda: cp.nonzero_pages(a, threads="auto")
    else:
        fn = lambda: np.flatnonzero(a.reshape(-1, PAGE).any(axis=1))
    assert np.array_equal(np.asarray(fn()), dirty)
    _common.run_bench(benchmark, fn, suite=SUITE, label="dirty pages %s" % _common.fmt_size(n),
                      variant=variant, nbytes=n, total=n * 6, rounds=6, iterations=1)


# ---- a clear of mostly untouched memory ------------------------------------------

SPARSE = [pytest.param(256 * MiB, id="quick-256MiB"),
          pytest.param(GiB, id="1GiB", marks=_common.slow_marks(GiB))]
_rss: dict = {}


@pytest.mark.parametrize("variant", ["clear", "numpy_fill"])
@pytest.mark.parametrize("n", SPARSE)
def test_sparse_clear(benchmark, n, variant):
    """A fresh np.zeros with 16 pages written, cleared once per round."""
    benchmark.group = "sparse clear %s, 16 pages touched" % _common.fmt_size(n)
    held: list = []

    def fresh():
        a = np.zeros(n, dtype=np.uint8)
        a[np.arange(16) * (n // 16) + 12345] = 0xA5
        return a

    def setup():
        held.clear()
        held.append(fresh())
        return (held[0],), {}

    def run(a):
        if variant == "clear":
            cp.clear(a)
        else:
            a.fill(0)

    benchmark.pedantic(run, setup=setup, rounds=3, warmup_rounds=0)
    assert cp.is_zero(held[0])
    held.clear()
    a = fresh()                     # once more, untimed, for the resident memory
    before = resident()
    run(a)
    grown = resident() - before
    del a
    st = getattr(benchmark, "stats", None)
    if st:
        label = "sparse clear %s" % _common.fmt_size(n)
        s = st.stats
        _common.RESULTS.setdefault(SUITE, {})[(label, variant)] = {
            "median": s.median, "min": s.min, "gbps": _common.gbps(n, s.median),
            "nbytes": n, "grown": grown}
        benchmark.extra_info.update({"resident growth MiB": round(grown / MiB, 1)})


# ---- the cost of looking, on resident memory --------------------------------------

LOOK = [pytest.param(64 * MiB, id="quick-64MiB"),
        pytest.param(GiB, id="1GiB", marks=_common.slow_marks(GiB))]


@pytest.mark.parametrize("n", LOOK)
def test_look_cost(benchmark, n):
    """clear() of a fully resident buffer with the look for untouched pages
    and without it, interleaved round by round (the order alternating), so
    that the machine's drift falls on both alike; the medians are compared.
    pytest-benchmark times the clear with the look."""
    benchmark.group = "look cost %s resident" % _common.fmt_size(n)
    a = _zeros(n, "look")
    times: dict[bool, list[int]] = {True: [], False: []}
    rounds = 200 if n < GiB else 30
    try:
        for r in range(rounds):
            for look in ((True, False) if r % 2 else (False, True)):
                _fast.set_untouched(UNTOUCHED_MIN if look else 0)
                t0 = time.perf_counter_ns()
                cp.clear(a)
                times[look].append(time.perf_counter_ns() - t0)
    finally:
        _fast.set_untouched(UNTOUCHED_MIN)
    benchmark.pedantic(cp.clear, args=(a,), rounds=5, iterations=1)
    label = "look %s" % _common.fmt_size(n)
    for look, xs in times.items():
        _common.RESULTS.setdefault(SUITE, {})[(label, "look" if look else "no_look")] = {
            "median": statistics.median(xs) / 1e9, "nbytes": n}
    benchmark.extra_info.update({
        "look median us": round(statistics.median(times[True]) / 1e3, 1),
        "no look median us": round(statistics.median(times[False]) / 1e3, 1)})


def _auto_threads(n: int) -> int:
    """The threads threads="auto" gives a scan of n bytes (as a clear of n)."""
    return _fast.decide(n, 1, "auto")[1]


@_common.summary_of(SUITE)
def _summary(res):
    def g(label, v, key="median"):
        r = res.get((label, v))
        return r[key] if r else None

    rows = []
    for label, n in SCANS:
        z, t, an = g(label, "is_zero"), g(label, "is_zero_threads_auto"), g(label, "numpy_any")
        goal = 6 if n < MiB else 1.6
        rows.append(["is_zero %s" % label.replace("quick-", ""),
                     "%.2f us" % (z * 1e6) if z else "-",
                     "%.2f us" % (an * 1e6) if an else "-", ratio(an, z),
                     ">= %gx: %s" % (goal, "ok" if z and an and an / z >= goal else "MISS"),
                     "threads=auto %s" % ratio(an, t)])
    fz = g("256 MiB, first byte nonzero", "is_zero")
    fa = g("256 MiB, first byte nonzero", "numpy_any")
    if fz:
        rows.append(["is_zero 256 MiB, first byte nonzero", "%.2f us" % (fz * 1e6),
                     "%.0f us" % (fa * 1e6) if fa else "-", ratio(fa, fz),
                     "< 5 us: %s" % ("ok" if fz < 5e-6 else "MISS"), ""])
    for label in sorted({lab for lab, _ in res if lab.startswith("dirty")}):
        z, nump = g(label, "nonzero_pages"), g(label, "numpy")
        t = g(label, "nonzero_pages_threads_auto")
        size = label[len("dirty pages "):]
        nt = _auto_threads(_common.size_arg(size))
        rows.append(["nonzero_pages %s, threads=1" % size,
                     "%.1f ms" % (z * 1e3) if z else "-",
                     "%.1f ms" % (nump * 1e3) if nump else "-", ratio(nump, z),
                     ">= 3x: %s" % ("ok" if z and nump and nump / z >= 3 else "MISS"), ""])
        rows.append(["nonzero_pages %s, threads=auto (%d)" % (size, nt),
                     "%.1f ms" % (t * 1e3) if t else "-",
                     "%.1f ms" % (nump * 1e3) if nump else "-", ratio(nump, t),
                     ">= 3x: %s" % ("ok" if t and nump and nump / t >= 3 else "MISS"),
                     "%d threads on %d CPUs" % (nt, os.cpu_count() or 0)])
    for label in sorted({lab for lab, _ in res if lab.startswith("sparse")}):
        c, f = g(label, "clear"), g(label, "numpy_fill")
        grown = (res.get((label, "clear")) or {}).get("grown")
        fgrown = (res.get((label, "numpy_fill")) or {}).get("grown")
        rows.append([label + ", 16 pages touched",
                     "%.2f ms" % (c * 1e3) if c else "-",
                     "%.0f ms" % (f * 1e3) if f else "-", ratio(f, c),
                     ">= 50x: %s" % ("ok" if c and f and f / c >= 50 else "MISS"),
                     "resident +%.0f MiB (fill: +%.0f MiB)" % (grown / MiB, (fgrown or 0) / MiB)
                     if grown is not None else ""])
    for label in sorted({lab for lab, _ in res if lab.startswith("look")}):
        lk, no = g(label, "look"), g(label, "no_look")
        if lk and no:
            rows.append(["clear %s resident, look / no look" % label[len("look "):],
                         "%.2f ms" % (lk * 1e3), "%.2f ms" % (no * 1e3),
                         "%+.1f%%" % ((lk / no - 1) * 100),
                         "<= 2%%: %s" % ("ok" if lk <= 1.02 * no else "MISS (or noise)"), ""])
    text = _common.table(["case", "clearpages", "numpy", "ratio", "goal", "note"], rows)
    return ("scan: is_zero, nonzero_pages and clears of untouched memory against numpy "
            "(medians)", text)
