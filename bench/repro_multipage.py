"""Reproduction: "mm/folio_zero_user: add multi-page clearing".

Before that series the kernel zeroed a huge folio one 4 KiB page at a time
(clear_page in a loop); after it, it hands the CPU the whole extent, so
`rep stosb` sees the real length and the hardware can optimise the clear.
This script clears a region extent by extent, 2 MiB and 1 GiB extents (the
two huge-page sizes), each extent either page-at-a-time (one call per 4 KiB
page, looped in C so Python is not what is measured) or in one call, for
`rep stosb` and the widest streaming routine.  The series reported GB/s with
the relative stddev; so does this table.

    python bench/repro_multipage.py [--quick] [--region 1G] [--rounds N]
    python -m pytest bench/repro_multipage.py        # the quick table, in the summary
"""

from __future__ import annotations

import argparse
import sys

import _common
from _common import GiB, MiB, cp, fmt_size

PAGE = 4096
EXTENTS = (2 * MiB, GiB)


def _routines() -> list[str]:
    out = ["rep_stosb"] + _common.streaming_methods()[:1]
    return [m for m in out if m in cp.methods()]


def _job_loop(method: str, addr: int, nbytes: int, piece: int) -> None:
    """Fallback without a C compiler: a job whose first unit is the piece
    (later units are sized by time) calls the routine once per unit (plus
    a clock read per unit)."""
    from clearpages.tools.lowlevel import run_job

    run_job(addr, nbytes, method, piece)


def run(quick: bool = False, region: int | None = None, rounds: int | None = None) -> str:
    region = region or (256 * MiB if quick else 2 * GiB)
    rounds = rounds or (5 if quick else 10)
    loop = _common.page_loop()
    how = "4 KiB calls looped in C" if loop else "4 KiB job units (no C compiler found)"
    call = loop or _job_loop
    buf = _common.Buffer(region)
    rows = []
    try:
        for extent in EXTENTS:
            ext = min(extent, region)
            for method in _routines():
                page = _common.time_it(
                    lambda m=method: call(m, buf.address, region, PAGE), rounds)
                whole = _common.time_it(
                    lambda m=method, e=ext: call(m, buf.address, region, e), rounds)
                pm, ps = _common.mean_sd([_common.gbps(region, t) for t in page])
                wm, ws = _common.mean_sd([_common.gbps(region, t) for t in whole])
                rows.append([fmt_size(extent) + ("" if ext == extent else
                                                 " (as %s)" % fmt_size(ext)),
                             method, "%.1f ± %.1f%%" % (pm, 100 * ps / pm),
                             "%.1f ± %.1f%%" % (wm, 100 * ws / wm), "%.2fx" % (wm / pm)])
        assert not any(buf.view[:PAGE]) and not any(buf.view[region - PAGE:])
    finally:
        buf.close()
    head = ("multi-page clearing: %s region cleared extent by extent, %d rounds, "
            "GB/s ± relative stddev (page-at-a-time: %s)" % (fmt_size(region), rounds, how))
    return head + "\n" + _common.table(
        ["extent", "routine", "page-at-a-time", "one call per extent", "speedup"], rows)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="256 MiB region, 5 rounds")
    ap.add_argument("--region", type=_common.size_arg, help="region size (default 2G; 1G extents "
                    "need at least 1G)")
    ap.add_argument("--rounds", type=int)
    a = ap.parse_args(argv)
    print(_common.machine_label())
    print()
    print(run(a.quick, a.region, a.rounds))
    return 0



def test_repro_multipage_quick():
    text = run(quick=True, rounds=3)
    body = [row for row in text.splitlines() if row.startswith("| ") and "GB/s" not in row]
    assert len(body) == 1 + len(EXTENTS) * len(_routines())   # header + rows
    _common.TABLES.append(("repro_multipage (quick)", text))


if __name__ == "__main__":
    sys.exit(main())
