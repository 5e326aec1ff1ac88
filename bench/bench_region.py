"""Region benchmarks: fault-in vs clearing, page-table moves, resize vs mmap.resize.

Three tables, after the kernel series they reproduce:

1. populate: kernel fault-in (MADV_POPULATE_WRITE) throughput of a region
   with 4 KiB, 2 MiB (THP) and 1 GiB (hugetlb) pages, beside clearing the
   same, already populated, region from user space (clearpages.clear) -- the
   shape of the multi-page clearing series' demand-fault table.
2. move: time to move a populated region (1 GiB) whose source and
   destination are both PTE-, PMD- or PUD-aligned (mremap_test's time
   comparison; HAVE_MOVE_PMD / HAVE_MOVE_PUD).
3. resize: a populated 1 GiB region grown to 2 GiB by Region.resize, by
   mmap.resize of the same kind of memory (private anonymous,
   MADV_HUGEPAGE), and by copying (bytearray, numpy).  Something is mapped
   right after the region in the "must move" rows, as in a busy address
   space; the "in place" rows show the case where the kernel can extend.
4. fresh resize: the same growth of a region made and populated just
   before (the first resize of its life, where per-object bookkeeping
   shows), against mmap.resize of a fresh, equally populated mapping and
   against the system calls alone (cp_region_resize called from C through
   cffi on a fresh mapping), at 1 GiB and at 16-64 MiB.

Run as a script for the tables:
    python bench/bench_region.py [--size 1G] [--rounds 5]
or under pytest-benchmark:
    python -m pytest bench/bench_region.py      (CLEARPAGES_BENCH_SIZE=1G)

1 GiB pages need a free hugetlb page; as root the script reserves one and
gives it back.  Peak memory is about 3x the size (the copy rows).
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import gc
import mmap
import os
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import clearpages as cp
from clearpages.tools.lowlevel import format_size, hugetlb_pages, lib, parse_size, thp_mode

KiB, MiB, GiB = 1 << 10, 1 << 20, 1 << 30
PAGE = 4 * KiB

SIZE = parse_size(os.environ.get("CLEARPAGES_BENCH_SIZE", "1G"), "CLEARPAGES_BENCH_SIZE")


def fmt_size(n: int) -> str:
    return format_size(n)


# ---- helpers ---------------------------------------------------------------


@contextlib.contextmanager
def gigantic_pages(n: int) -> Iterator[str | None]:
    """Yields None when n free 1 GiB hugetlb pages are at hand (reserved as
    root if need be, and given back), else the reason they are not."""
    pool = hugetlb_pages(GiB)
    if pool["nr"] is None:
        yield "no 1 GiB hugetlb pool on this system"
        return
    usable = pool["free"] - pool["reserved"]
    if usable >= n:
        yield None
        return
    if os.geteuid() != 0:
        yield "needs %d free 1 GiB hugetlb page(s): echo N > %s as root" % (n, pool["path"])
        return
    original = pool["nr"]
    try:
        with open(pool["path"], "w") as f:
            f.write("%d\n" % (original + n - usable))
        now = hugetlb_pages(GiB)
        yield None if now["free"] - now["reserved"] >= n else \
            "the kernel could not allocate %d 1 GiB page(s)" % n
    finally:
        gc.collect()
        with open(pool["path"], "w") as f:
            f.write("%d\n" % original)


class Blocker:
    """A page reserved at an address, so that a mapping ending there cannot
    grow in place.  Nothing when address is None."""

    def __init__(self, address: int | None) -> None:
        self.address = address
        self.owned = address is not None and lib.cp_region_reserve_at(address, PAGE) == 0

    def close(self) -> None:
        if self.owned:
            lib.cp_region_unmap(self.address, PAGE)
            self.owned = False


def mmap_address(m: mmap.mmap) -> int:
    c = ctypes.c_char.from_buffer(m)
    try:
        return ctypes.addressof(c)
    finally:
        del c


def timed(fn: Callable[[], Any]) -> float:
    t0 = time.perf_counter_ns()
    fn()
    return (time.perf_counter_ns() - t0) / 1e9


# ---- 1. populate vs clear ---------------------------------------------------


def populate_case(size: int, page_size: str) -> dict[str, Any]:
    """Seconds to populate a fresh region and to clear it once populated."""
    r = cp.Region(size, page_size=page_size)
    n = r.size
    try:
        t_populate = timed(r.populate)
        b = r.backing
        cp.clear(r)                         # warm: a second pass is steady state
        t_clear = min(timed(lambda: cp.clear(r)) for _ in range(2))
    finally:
        r.close()
    return {"populate_s": t_populate, "clear_s": t_clear, "huge": b.huge, "size": n}


def table_populate(size: int) -> list[tuple[str, ...]]:
    rows = []
    for page_size in ("4k", "2m", "1g"):
        with gigantic_pages(-(-size // GiB)) if page_size == "1g" else \
                contextlib.nullcontext() as why:
            if why:
                rows.append((page_size, "-", "-", "-", "-", "skipped: " + why))
                continue
            c = populate_case(size, page_size)
        n = c["size"]       # 1 GiB pages round small sizes up
        rows.append((page_size, fmt_size(n), "%.2f" % (n / c["populate_s"] / 1e9),
                     "%.2f" % (n / c["clear_s"] / 1e9),
                     "%.1fx" % (c["populate_s"] / c["clear_s"]),
                     "%s of %s" % (fmt_size(c["huge"]) if c["huge"] else "0", fmt_size(n))))
    return rows


# ---- 2. moves ----------------------------------------------------------------


def move_times(size: int, alignment: str, rounds: int, page_size: str = "4k") -> list[float]:
    """Seconds per move of a populated region, source and destination both
    `alignment`-aligned (and not to the next level; for "pte" also not
    congruent modulo 2 MiB, so no PMD can move whole)."""
    r = cp.Region(size, page_size=page_size, populate=True)
    try:
        r.move(alignment)
        return [timed(lambda: r.move(alignment)) for _ in range(rounds)]
    finally:
        r.close()


def table_move(size: int, rounds: int) -> tuple[list[tuple[str, ...]], dict[str, float]]:
    rows, best = [], {}
    for alignment in ("pte", "pmd", "pud"):
        t = move_times(size, alignment, rounds)
        best[alignment] = min(t)
        rows.append((alignment.upper(), "%.3f" % (min(t) * 1e3),
                     "%.3f" % (statistics.median(t) * 1e3)))
    for alignment in ("pte", "pmd", "pud"):
        rows[[r[0] for r in rows].index(alignment.upper())] += (
            "%.0fx" % (best["pte"] / best[alignment]),)
    return rows, best


# ---- 3. resize ----------------------------------------------------------------


def region_resize_times(size: int, rounds: int, page_size: str, must_move: bool) -> list[float]:
    r = cp.Region(size, page_size=page_size, populate=True)
    out = []
    try:
        for _ in range(rounds):
            blocker = Blocker(r.address + size if must_move else None)
            try:
                out.append(timed(lambda: r.resize(2 * size)))
            finally:
                blocker.close()
            r.resize(size)
    finally:
        r.close()
    return out


def mmap_resize_times(size: int, rounds: int, must_move: bool) -> list[float]:
    m = mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE)
    out = []
    try:
        m.madvise(mmap.MADV_HUGEPAGE)
        cp.clear(m)                         # populate
        for _ in range(rounds):
            blocker = Blocker(mmap_address(m) + size if must_move else None)
            try:
                out.append(timed(lambda: m.resize(2 * size)))
            finally:
                blocker.close()
            m.resize(size)
    finally:
        m.close()
    return out


def _bytearray_growth(size: int) -> float:
    old = bytearray(size)
    cp.clear(old)                       # populate
    zeros = bytearray(size)
    return timed(lambda: old.extend(zeros))


def bytearray_growth_times(size: int, rounds: int) -> list[float]:
    return [_bytearray_growth(size) for _ in range(rounds)]


def _numpy_growth(np: Any, size: int) -> float:
    a = np.ones(size, dtype=np.uint8)

    def grow() -> None:
        b = np.zeros(2 * size, dtype=np.uint8)
        b[:size] = a

    return timed(grow)


def numpy_growth_times(size: int, rounds: int) -> list[float] | None:
    try:
        import numpy as np
    except ImportError:
        return None
    return [_numpy_growth(np, size) for _ in range(rounds)]


def table_resize(size: int, rounds: int) -> tuple[list[tuple[str, ...]], dict[str, float]]:
    cases: list[tuple[str, list[float] | None]] = [
        ("Region.resize 2m, must move", region_resize_times(size, rounds, "2m", True)),
        ("Region.resize 4k, must move", region_resize_times(size, rounds, "4k", True)),
        ("mmap.resize (THP advised), must move", mmap_resize_times(size, rounds, True)),
        ("Region.resize 2m, in place", region_resize_times(size, rounds, "2m", False)),
        ("mmap.resize (THP advised), in place", mmap_resize_times(size, rounds, False)),
        ("bytearray.extend (copy)", bytearray_growth_times(size, min(rounds, 2))),
        ("numpy new array + copy", numpy_growth_times(size, min(rounds, 2))),
    ]
    best = {name: min(t) for name, t in cases if t}
    ref = best["mmap.resize (THP advised), must move"]
    rows = []
    for name, t in cases:
        if not t:
            rows.append((name, "-", "-", "numpy not installed"))
            continue
        rows.append((name, "%.3f" % (min(t) * 1e3), "%.3f" % (statistics.median(t) * 1e3),
                     "%.1fx" % (ref / min(t))))
    return rows, best


# ---- 4. fresh resize --------------------------------------------------------------


def _ffi():
    from clearpages.tools.lowlevel import ffi

    return ffi


def fresh_region_resize(size: int) -> float:
    """Region.resize of a Region made and populated just before; must move."""
    r = cp.Region(size, page_size="2m", populate=True)
    blocker = Blocker(r.address + r.size)
    try:
        return timed(lambda: r.resize(2 * size))
    finally:
        blocker.close()
        r.close()


def fresh_mmap_resize(size: int) -> float:
    """mmap.resize of a fresh private mapping, THP advised and populated."""
    m = mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE)
    try:
        m.madvise(mmap.MADV_HUGEPAGE)
        cp.clear(m)
        blocker = Blocker(mmap_address(m) + size)
        try:
            return timed(lambda: m.resize(2 * size))
        finally:
            blocker.close()
    finally:
        m.close()


def fresh_syscalls(size: int) -> float:
    """The same move with nothing but the system calls: cp_region_map and
    populate, then cp_region_resize timed as one cffi call."""
    ffi = _ffi()
    out = ffi.new("uintptr_t *")
    align = GiB if size >= GiB else 2 * MiB
    assert lib.cp_region_map(size, align, lib.CP_REGION_THP, 21, out) == 0
    addr = out[0]
    assert lib.cp_region_populate(addr, size, 2 * MiB, lib.CP_REGION_THP) == 0
    blocker = Blocker(addr + size)
    new = ffi.new("uintptr_t *")
    resize = lib.cp_region_resize
    try:
        t0 = time.perf_counter_ns()
        err = resize(addr, size, 2 * size, lib.CP_REGION_THP, 21, GiB, new)
        t = (time.perf_counter_ns() - t0) / 1e9
        assert err == 0, err
    finally:
        blocker.close()
    lib.cp_region_unmap(new[0], 2 * size)
    return t


def table_fresh(sizes: list[int], rounds: int) -> tuple[list[tuple[str, ...]], dict]:
    rows, got = [], {}
    for size in sizes:
        t = {"region": [], "mmap": [], "sys": []}
        for _ in range(rounds):         # interleaved, so drift hits all three
            t["region"].append(fresh_region_resize(size))
            t["mmap"].append(fresh_mmap_resize(size))
            t["sys"].append(fresh_syscalls(size))
        med = {k: statistics.median(v) for k, v in t.items()}
        got[size] = med
        rows.append((fmt_size(size), "%.3f" % (med["region"] * 1e3),
                     "%.3f" % (med["mmap"] * 1e3), "%.3f" % (med["sys"] * 1e3),
                     "%.1fx" % (med["mmap"] / med["region"]),
                     "%.2fx" % (med["region"] / med["sys"])))
    return rows, got


# ---- script ---------------------------------------------------------------------


def print_table(title: str, head: tuple[str, ...], rows: list[tuple[str, ...]]) -> None:
    widths = [max(len(str(x)) for x in col) for col in zip(head, *rows)]
    print("\n" + title)
    for i, row in enumerate([head] + rows):
        print("  ".join(str(x).rjust(w) if j else str(x).ljust(w)
                        for j, (x, w) in enumerate(zip(row, widths))))
        if i == 0:
            print("  ".join("-" * w for w in widths))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--size", default=fmt_size(SIZE).replace(" ", "").replace("iB", ""),
                    help="region size (default: CLEARPAGES_BENCH_SIZE or 1G)")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--only", choices=("populate", "move", "resize", "fresh"))
    args = ap.parse_args(argv)
    size = parse_size(args.size)
    info = cp.cpu()
    print("clearpages Region benchmarks: %s, %s, Linux %s, THP %s; size %s, best of %d"
          % (info.brand or info.vendor, "Python %d.%d" % sys.version_info[:2],
             os.uname().release, thp_mode(), fmt_size(size), args.rounds))
    if args.only in (None, "populate"):
        print_table("1. kernel fault-in (populate) vs user-space clear of the same region",
                    ("pages", "size", "populate GB/s", "clear GB/s", "clear faster by",
                     "in huge pages"),
                    table_populate(size))
    if args.only in (None, "move"):
        rows, best = table_move(size, args.rounds)
        print_table("2. move a populated %s region (4 KiB pages), source and "
                    "destination equally aligned" % fmt_size(size),
                    ("alignment", "best ms", "median ms", "vs PTE"), rows)
        print("PUD vs PTE: %.0fx (goal >= 10x)" % (best["pte"] / best["pud"]))
    if args.only in (None, "resize"):
        rows, best = table_resize(size, args.rounds)
        print_table("3. grow a populated %s region to %s" % (fmt_size(size), fmt_size(2 * size)),
                    ("how", "best ms", "median ms", "vs mmap.resize (must move)"), rows)
        print("Region.resize vs mmap.resize, must move: %.1fx (goal >= 3x)"
              % (best["mmap.resize (THP advised), must move"]
                 / best["Region.resize 2m, must move"]))
    if args.only in (None, "fresh"):
        sizes = sorted({16 * MiB, 64 * MiB, size})
        rows, got = table_fresh(sizes, max(args.rounds, 5))
        print_table("4. grow a freshly made and populated region to twice its size "
                    "(2m pages, must move; medians of %d)" % max(args.rounds, 5),
                    ("size", "Region.resize ms", "mmap.resize ms", "syscalls ms",
                     "mmap / Region", "Region / syscalls"), rows)
        big = got[size]
        print("at %s: Region.resize %.1fx faster than mmap.resize (goal >= 3x), "
              "%.2fx the system calls' time (goal <= 1.5x)"
              % (fmt_size(size), big["mmap"] / big["region"], big["region"] / big["sys"]))
    return 0


# ---- pytest-benchmark ---------------------------------------------------------------


def _pedantic(benchmark: Any, setup: Callable[[], Any], run: Callable[[Any], Any],
              teardown: Callable[[Any], Any], rounds: int = 5) -> None:
    state: dict[str, Any] = {}

    def _setup() -> tuple[tuple, dict]:
        state.pop("obj", None)      # free the last round's memory first
        state["obj"] = setup()
        return (), {}

    def _run() -> None:
        run(state["obj"])

    try:
        benchmark.pedantic(_run, setup=_setup, rounds=rounds, iterations=1)
    finally:
        if "obj" in state:
            teardown(state["obj"])


def _throughput(benchmark: Any, r_size: int) -> None:
    if benchmark.stats:         # None under --benchmark-disable
        benchmark.extra_info["GB/s"] = round(r_size / benchmark.stats["min"] / 1e9, 2)


try:
    import pytest
except ImportError:     # the script needs no pytest
    pytest = None

if pytest is not None:

    @pytest.mark.parametrize("page_size", ["4k", "2m", "1g"])
    def test_populate(benchmark, page_size):
        with gigantic_pages(-(-SIZE // GiB)) if page_size == "1g" else \
                contextlib.nullcontext() as why:
            if why:
                pytest.skip(why)
            regions: list[cp.Region] = []

            def setup() -> cp.Region:
                for r in regions:
                    r.close()
                regions[:] = [cp.Region(SIZE, page_size=page_size)]
                return regions[0]

            _pedantic(benchmark, setup, lambda r: r.populate(), lambda r: r.close(), rounds=3)
            _throughput(benchmark, r_size=SIZE if page_size != "1g" else -(-SIZE // GiB) * GiB)

    @pytest.mark.parametrize("page_size", ["4k", "2m"])
    def test_clear_populated(benchmark, page_size):
        with cp.Region(SIZE, page_size=page_size, populate=True) as r:
            benchmark.pedantic(cp.clear, args=(r,), rounds=3, iterations=1)
            _throughput(benchmark, r_size=SIZE if page_size != "1g" else -(-SIZE // GiB) * GiB)

    @pytest.mark.parametrize("alignment", ["pte", "pmd", "pud"])
    def test_move(benchmark, alignment):
        with cp.Region(SIZE, populate=True) as r:
            r.move(alignment)
            benchmark.pedantic(r.move, args=(alignment,), rounds=5, iterations=1)
            assert r.address % GiB in {"pte": (PAGE, 2 * PAGE), "pmd": (2 * MiB,),
                                        "pud": (0,)}[alignment]

    @pytest.mark.parametrize("must_move", [True, False], ids=["must-move", "in-place"])
    def test_region_resize(benchmark, must_move):
        r = cp.Region(SIZE, page_size="2m", populate=True)
        blockers: list[Blocker] = []

        def setup() -> cp.Region:
            for b in blockers:
                b.close()
            r.resize(SIZE)
            blockers[:] = [Blocker(r.address + SIZE if must_move else None)]
            return r

        def teardown(_: Any) -> None:
            for b in blockers:
                b.close()
            r.close()

        _pedantic(benchmark, setup, lambda reg: reg.resize(2 * SIZE), teardown)

    @pytest.mark.parametrize("must_move", [True, False], ids=["must-move", "in-place"])
    def test_mmap_resize(benchmark, must_move):
        m = mmap.mmap(-1, SIZE, flags=mmap.MAP_PRIVATE)
        m.madvise(mmap.MADV_HUGEPAGE)
        cp.clear(m)
        blockers: list[Blocker] = []

        def setup() -> mmap.mmap:
            for b in blockers:
                b.close()
            m.resize(SIZE)
            blockers[:] = [Blocker(mmap_address(m) + SIZE if must_move else None)]
            return m

        def teardown(_: Any) -> None:
            for b in blockers:
                b.close()
            m.close()

        _pedantic(benchmark, setup, lambda mm: mm.resize(2 * SIZE), teardown)

    @pytest.mark.parametrize("what", ["region", "mmap", "syscalls"])
    def test_fresh_resize(benchmark, what):
        fn = {"region": fresh_region_resize, "mmap": fresh_mmap_resize,
              "syscalls": fresh_syscalls}[what]
        times = [fn(SIZE) for _ in range(5)]
        benchmark.extra_info["median_ms"] = round(statistics.median(times) * 1e3, 4)
        benchmark.pedantic(lambda: None, rounds=1, iterations=1)

    def test_bytearray_growth(benchmark):
        zeros = bytearray(SIZE)

        def setup() -> bytearray:
            old = bytearray(SIZE)
            cp.clear(old)
            return old

        _pedantic(benchmark, setup, lambda old: old.extend(zeros), lambda old: None, rounds=2)


if __name__ == "__main__":
    sys.exit(main())
