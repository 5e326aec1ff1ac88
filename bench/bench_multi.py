"""Scattered 4 KiB pages of a pool: clear_pages, clear_many, a Python loop, one contiguous clear.

1 GiB of randomly ordered 4 KiB pages (CLEARPAGES_BENCH_SCALE or
--bench-scale scales it), from a pool exactly that size (a permutation of
its pages) and from a pool twice that size (a random half).  Goals (bench/README.md):
clear_pages at least 0.8x one contiguous clear of the same number of bytes
and at least 5x a Python loop of per-page clear(memoryview slice);
clear_many over the same pages as separate memoryviews at least 2x the loop.

    python -m pytest bench/bench_multi.py -k quick
    CLEARPAGES_BENCH_SCALE=0.25 python -m pytest bench/bench_multi.py
"""

from __future__ import annotations

import array
import random

import _common
import pytest
from _common import GiB, MiB, cp, fmt_size, ratio

SUITE = "multi"
PAGE = 4096
FULL = _common.scaled(GiB, _common.env_scale())
QUICK = 64 * MiB
VARIANTS = ("contiguous", "clear_pages", "clear_many", "python_loop")
POOLS = ("permutation", "half_of_2x")


def _pages(total: int, pool: str, seed: int = 12345) -> tuple[int, list[int]]:
    """(pool bytes, page indices in random order)."""
    n = total // PAGE
    rng = random.Random(seed)
    if pool == "permutation":
        idx = list(range(n))
        rng.shuffle(idx)
        return total, idx
    return 2 * total, rng.sample(range(2 * n), n)


def _cases():
    for quick, total in ((True, QUICK), (False, FULL)):
        for pool in POOLS:
            for variant in VARIANTS:
                label = "%s-%s" % (fmt_size(total), pool)
                ident = "%s%s-%s" % ("quick-" if quick else "", label, variant)
                marks = [pytest.mark.benchmark(group="multi %s%s" % (
                    "quick " if quick else "", label))]
                if not quick:
                    marks += _common.slow_marks(total)
                yield pytest.param(total, pool, variant, quick, id=ident, marks=marks)


_state: dict = {}


@pytest.fixture(scope="module", autouse=True)
def _release_views():
    """Drop the per-page views at the end of the file, so the pool can be unmapped."""
    yield
    _state.clear()


def _pool(total: int, pool: str, buffers):
    """The pool buffer, the index array and the per-page views, built once."""
    key = (total, pool)
    if _state.get("key") != key:
        _state.clear()
        nbytes, idx = _pages(total, pool)
        buf = buffers.get(nbytes, "pool")
        _state.update(key=key, buf=buf, idx=idx, pages=array.array("q", idx),
                      views=[buf.view[i * PAGE:(i + 1) * PAGE] for i in idx])
    return _state["buf"], _state["idx"], _state["pages"], _state["views"]


@pytest.mark.parametrize("total,pool,variant,quick", list(_cases()))
def test_multi(benchmark, buffers, total, pool, variant, quick):
    buf, idx, pages, views = _pool(total, pool, buffers)
    mv = buf.view
    if variant == "contiguous":
        part = mv[:total]
        fn = lambda: cp.clear(part)
    elif variant == "clear_pages":
        fn = lambda: cp.clear_pages(mv, pages, page_size=PAGE)
    elif variant == "clear_many":
        fn = lambda: cp.clear_many(views)
    else:
        def fn():
            clear = cp.clear
            for i in idx:
                clear(mv[i * PAGE:(i + 1) * PAGE])
    # The Python loop takes ~1 s per GiB: fewer rounds keep the file short.
    rounds = 3 if variant == "python_loop" else (5 if quick else 4)
    _common.run_bench(benchmark, fn, suite=SUITE, label="%s %s" % (fmt_size(total), pool),
                      variant=variant, nbytes=total, total=total, rounds=rounds,
                      iterations=1)
    # Listed pages are zero (for the contiguous clear: its first and last page).
    check = (0, total // PAGE - 1) if variant == "contiguous" else (
        idx[0], idx[-1], idx[len(idx) // 2])
    for i in check:
        assert not any(mv[i * PAGE:(i + 1) * PAGE])


@_common.summary_of(SUITE)
def _summary(res):
    rows = []
    for label in sorted({lab for lab, _ in res}, key=lambda s: (len(s), s)):
        g = {v: r["gbps"] for (lab, v), r in res.items() if lab == label}
        pages, many = g.get("clear_pages"), g.get("clear_many")
        contig, loop = g.get("contiguous"), g.get("python_loop")
        goals = []
        if pages and contig:
            goals.append("pages/contig %s" % ("ok" if pages >= 0.8 * contig else "MISS"))
        if pages and loop:
            goals.append("pages/loop %s" % ("ok" if pages >= 5 * loop else "MISS"))
        if many and loop:
            goals.append("many/loop %s" % ("ok" if many >= 2 * loop else "MISS"))
        rows.append([label] + ["%.1f" % g[v] if v in g else "-" for v in VARIANTS]
                    + [ratio(pages, contig), ratio(pages, loop), ratio(many, loop),
                       ", ".join(goals)])
    text = _common.table(["pages (4 KiB, random order)"] + ["%s GB/s" % v for v in VARIANTS]
                         + ["pages/contig", "pages/loop", "many/loop", "goals"], rows)
    return ("multi: scattered 4 KiB pages (goals: clear_pages >= 0.8x contiguous and "
            ">= 5x the loop; clear_many >= 2x the loop)", text)
