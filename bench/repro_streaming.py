"""Reproduction: "mm: clear 1G pages with streaming stores on x86".

That series mlock'ed a large region backed by 1 GiB pages and compared the
time to clear it with `rep stosb` (the kernel's clear_page) against
non-temporal stores (movnti), in ms per GiB.  Here: a region of 4 GiB
(quick: 1 GiB) backed by 1 GiB hugetlb pages when clearpages.Region can have
them, else 2 MiB transparent huge pages, populated first, then cleared by
every temporal and streaming routine and by "auto".

1 GiB pages must be reserved beforehand (as root:
echo N > /sys/kernel/mm/hugepages/hugepages-1048576kB/nr_hugepages);
--reserve-1g does that for the run and gives them back afterwards.

    python bench/repro_streaming.py [--quick] [--size 4G] [--rounds N] [--reserve-1g]
    python -m pytest bench/repro_streaming.py        # the quick table, in the summary
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from collections.abc import Iterator
from typing import Any

import _common
from _common import GiB, cp, fmt_size

NR_1G = "/sys/kernel/mm/hugepages/hugepages-1048576kB/nr_hugepages"
ORDER = ("rep_stosb", "rep_stosq", "mov_loop", "libc", "movnti", "avx2_nt", "avx512_nt",
         "clzero", "auto")


@contextlib.contextmanager
def reserved_1g(count: int, wanted: bool) -> Iterator[None]:
    """Raise the 1 GiB page pool by count for the block, then restore it."""
    if not wanted:
        yield
        return
    try:
        with open(NR_1G) as f:
            before = int(f.read())
        with open(NR_1G, "w") as f:
            f.write(str(before + count))
    except (OSError, ValueError) as e:
        print("could not reserve 1 GiB pages (%s); using what is there" % e, file=sys.stderr)
        yield
        return
    try:
        yield
    finally:
        with open(NR_1G, "w") as f:
            f.write(str(before))


def _region(size: int) -> tuple[Any, Any, str]:
    """(object to clear, closer, what backs it)."""
    Region = getattr(cp, "Region", None)
    if Region is not None:
        for page, what in (("1g", "1 GiB hugetlb pages"), ("2m", "2 MiB THP (Region)")):
            try:
                r = Region(size, page_size=page, populate=True)
            except (OSError, MemoryError, ValueError):
                continue
            return r, r.close, what
    buf = _common.Buffer(size)
    return buf.view, buf.close, "2 MiB THP (mmap + MADV_HUGEPAGE)" + (
        "" if Region is not None else "; clearpages.Region not available")


def run(quick: bool = False, size: int | None = None, rounds: int | None = None,
        reserve: bool = False) -> str:
    size = size or (GiB if quick else 4 * GiB)
    rounds = rounds or (3 if quick else 8)
    gib = size / GiB
    from clearpages.tools.lowlevel import BY_NAME

    methods = [m for m in ORDER if m == "auto" or m in cp.methods()]
    rows = []
    with reserved_1g(-(-size // GiB), reserve):
        target, close, what = _region(size)
        try:
            base = None
            for m in methods:
                kw = {} if m == "auto" else {"method": m}
                ts = _common.time_it(lambda kw=kw: cp.clear(target, **kw), rounds)
                ms, sd = _common.mean_sd([1e3 * t / gib for t in ts])
                base = base or ms
                kind = ("-" if m == "auto" else
                        "temporal" if BY_NAME[m].temporal else "streaming")
                if m == "auto":
                    kind = cp.plan(size, threads=1).method
                rows.append([m, kind, "%.1f ± %.1f" % (ms, sd), "%.1f" % (GiB / ms / 1e6),
                             "%.2fx" % (base / ms)])
        finally:
            close()
    head = ("streaming stores: %s backed by %s, populated, %d rounds; ms per GiB "
            "(mean ± sd), speedup against rep_stosb" % (fmt_size(size), what, rounds))
    return head + "\n" + _common.table(["routine", "kind", "ms/GiB", "GB/s", "vs rep_stosb"],
                                       rows)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="1 GiB, 3 rounds")
    ap.add_argument("--size", type=_common.size_arg, help="region size (default 4G)")
    ap.add_argument("--rounds", type=int)
    ap.add_argument("--reserve-1g", action="store_true",
                    help="as root, reserve the 1 GiB pages for the run and give them back")
    a = ap.parse_args(argv)
    print(_common.machine_label())
    print()
    print(run(a.quick, a.size, a.rounds, a.reserve_1g))
    return 0



def test_repro_streaming_quick():
    # 256 MiB under pytest: the smoke run stays short; the script does the real size.
    text = run(quick=True, size=256 << 20, rounds=2,
               reserve=os.environ.get("CLEARPAGES_BENCH_RESERVE_1G") == "1")
    body = [row for row in text.splitlines() if row.startswith("| ")]
    assert len(body) == 1 + len([m for m in ORDER if m == "auto" or m in cp.methods()])
    _common.TABLES.append(("repro_streaming (quick)", text))


if __name__ == "__main__":
    sys.exit(main())
