"""Reproduction: "Speed up mremap on large regions".

mremap moves whole page-table entries when source and destination share
their alignment: a PMD entry (2 MiB) instead of 512 PTEs, a PUD entry (1 GiB)
instead of 512 PMDs.  This moves a populated 1 GiB clearpages.Region to
fresh addresses that are only PTE (4 KiB), 1 MiB, PMD (2 MiB) or PUD (1 GiB)
congruent with it (Region.move) and reports ms per move, for 4 KiB and 2 MiB
(THP) pages, and 1 GiB hugetlb pages when reserved.

    python bench/repro_mremap.py [--quick] [--size 1G] [--rounds N]
    python -m pytest bench/repro_mremap.py           # the quick table, in the summary
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

import _common
from _common import GiB, cp, fmt_size

ALIGNMENTS = ("pte", "1m", "pmd", "pud")
PAGE_SIZES = ("4k", "2m", "1g")
MARK = 0x5A


def _region_class() -> Any:
    """clearpages.Region with .move, or None (with the reason printed)."""
    Region = getattr(cp, "Region", None)
    if Region is None or not hasattr(Region, "move"):
        return None
    return Region


def _one(Region: Any, size: int, page: str, alignment: str, rounds: int) -> str:
    try:
        r = Region(size, page_size=page, populate=True)
    except (OSError, MemoryError) as e:
        return "- (%s)" % type(e).__name__
    try:
        v = r.view()
        v[0] = v[size - 1] = MARK
        v.release()
        r.move(alignment)       # warm-up: the first move also finds a hole
        times = []
        for _ in range(rounds):
            t0 = time.perf_counter()
            r.move(alignment)
            times.append(time.perf_counter() - t0)
        v = r.view()
        moved_intact = v[0] == MARK and v[size - 1] == MARK
        v.release()
        if not moved_intact:
            raise AssertionError("the data did not move with the region")
    except ValueError:
        return "n/a"            # e.g. a 1 GiB-page region cannot be PMD-aligned
    finally:
        r.close()
    m, sd = _common.mean_sd([1e3 * t for t in times])
    return "%.3f ± %.3f" % (m, sd)


def run(quick: bool = False, size: int | None = None, rounds: int | None = None) -> str:
    size = size or GiB
    rounds = rounds or (5 if quick else 20)
    Region = _region_class()
    if Region is None:
        return ("repro_mremap: skipped: clearpages.Region with .move is not available "
                "in this build")
    rows = []
    for page in PAGE_SIZES if not quick else PAGE_SIZES[:2]:
        rows.append([page] + [_one(Region, size, page, a, rounds) for a in ALIGNMENTS])
    head = ("mremap: moving a populated %s Region, ms per move (mean ± sd over %d moves); "
            "columns: how the destination is congruent with the source" % (fmt_size(size),
                                                                          rounds))
    return head + "\n" + _common.table(["pages"] + ["%s-aligned" % a.upper() for a in
                                                    ALIGNMENTS], rows)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="4k and 2m pages, 5 moves each")
    ap.add_argument("--size", type=_common.size_arg, help="region size (default 1G)")
    ap.add_argument("--rounds", type=int)
    a = ap.parse_args(argv)
    print(_common.machine_label())
    print()
    print(run(a.quick, a.size, a.rounds))
    return 0



def test_repro_mremap_quick():
    import pytest

    if _region_class() is None:
        pytest.skip("clearpages.Region with .move is not available in this build")
    text = run(quick=True, rounds=3)
    body = [row for row in text.splitlines() if row.startswith("| ")]
    assert len(body) == 1 + 2
    _common.TABLES.append(("repro_mremap (quick)", text))


if __name__ == "__main__":
    sys.exit(main())
