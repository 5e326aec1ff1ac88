"""A fresh 1 GiB Region of hugetlb pages (page_size="1g"): what `is_zero`,
`clear` and `nonzero_pages` cost on it, and how many huge pages they take
from the pool.

Each round maps a new Region (nothing touched), times one call on it and
reads the pool's free pages before and after; then writes one byte of its
last huge page and times the calls again (they must find it).  A page never
touched reads as zero, and a call that reads or writes it faults in a whole
1 GiB page, zeroed by the kernel, taken from the reserved pool.

Needs free 1 GiB hugetlb pages (two); as root:
    echo 2 > /sys/kernel/mm/hugepages/hugepages-1048576kB/nr_hugepages
(and give them back after: echo 0 > ...).

    python bench/bench_untouched_hugetlb.py [--rounds 5] [--size 2G]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import clearpages as cp
from clearpages.tools.lowlevel import parse_size

GiB = 1 << 30
POOL = "/sys/kernel/mm/hugepages/hugepages-1048576kB/"


def pool(name: str) -> int | None:
    """A number of the 1 GiB hugetlb pool (None: no such pool here)."""
    try:
        with open(POOL + name) as f:
            return int(f.read())
    except OSError:
        return None


def free_pages() -> int:
    return pool("free_hugepages") or 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--size", default="2G")
    args = ap.parse_args(argv)
    size = parse_size(args.size)
    nr = pool("nr_hugepages")
    if nr is None:
        print("no 1 GiB hugetlb pages on this system")
        return 1
    need = -(-size // GiB)
    if free_pages() - (pool("resv_hugepages") or 0) < need:
        print("needs %d free 1 GiB hugetlb pages; as root: echo %d > %snr_hugepages"
              % (need, nr + need, POOL))
        return 1
    info = cp.cpu()
    print("a fresh %s Region of 1 GiB pages; %s; Python %s"
          % (args.size, info.brand or info.vendor, sys.version.split()[0]))
    calls = {
        "is_zero": lambda r: cp.is_zero(r),
        "clear": lambda r: cp.clear(r),
        "nonzero_pages": lambda r: cp.nonzero_pages(r, page_size=4096),
    }
    for name, call in calls.items():
        fresh, taken, found = [], [], []
        for _ in range(args.rounds):
            with cp.Region(size, page_size="1g") as r:
                before = free_pages()
                t0 = time.perf_counter()
                call(r)
                fresh.append(time.perf_counter() - t0)
                taken.append(before - free_pages())
                r.view()[size - 1] = 1          # the last page, written
                t0 = time.perf_counter()
                got = call(r)
                found.append(time.perf_counter() - t0)
                if name == "is_zero":
                    assert got is False
                elif name == "nonzero_pages":
                    assert list(got) == [(size - 1) // 4096]
        print("%-14s fresh: %8.3f ms (median of %d), pages taken %s; one page written: "
              "%8.3f ms" % (name, 1e3 * statistics.median(fresh), args.rounds,
                            sorted(set(taken)), 1e3 * statistics.median(found)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
