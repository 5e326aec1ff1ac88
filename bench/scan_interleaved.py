"""is_zero and nonzero_pages against numpy, interleaved in one process
(each round runs every case once, in turn; medians over the rounds), so
that a loaded machine slows every case alike.

    python bench/scan_interleaved.py [ROUNDS]

- 64 KiB in cache: is_zero(a) and a.any(), each timed by timeit as the best
  of 5 runs of 2,000 calls (no Python frame around the call);
- 256 MiB from memory (resident, 8x the L3 of the machine these goals were
  set on): is_zero with threads=1 and threads="auto", a.any();
- 1 GiB resident with 1% of its 4 KiB pages dirty: nonzero_pages with
  threads=1 and "auto", np.flatnonzero(a.reshape(-1, 4096).any(axis=1)),
  the same indices checked first;
- the same 1% written into 1 GiB of private anonymous memory with 4 KiB
  pages (an mmap, no huge pages): the other pages were never written.  The
  first numpy scan maps the zero page into each of them (timed apart, once);
  the rounds then time both with those mappings in place, where
  nonzero_pages still reads only the pages in use (the kernel's page tables
  say which) and pays for reading /proc/self/smaps.
"""

from __future__ import annotations

import mmap
import statistics
import sys
import time
import timeit

import numpy as np

import clearpages as cp
from clearpages.tools.lowlevel import fast as _fast

PAGE = 4096


def once(fn) -> float:
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def main() -> None:
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 9
    small = np.zeros(64 << 10, np.uint8)
    big = np.zeros(256 << 20, np.uint8)
    big.fill(0)
    n = 1 << 30
    pages = np.zeros(n, np.uint8)
    pages.fill(0)
    rng = np.random.default_rng(19)
    dirty = np.sort(rng.choice(n // PAGE, size=n // PAGE // 100, replace=False))
    pages[dirty * PAGE + rng.integers(0, PAGE, size=dirty.size)] = 1
    for t in (1, "auto"):
        assert np.array_equal(np.asarray(cp.nonzero_pages(pages, threads=t)), dirty)
    sparse_map = mmap.mmap(-1, n, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    sparse = np.frombuffer(sparse_map, np.uint8)
    sparse[dirty * PAGE + rng.integers(0, PAGE, size=dirty.size)] = 1
    fresh = once(lambda: cp.nonzero_pages(sparse))
    assert np.array_equal(np.asarray(cp.nonzero_pages(sparse)), dirty)
    first_numpy = once(lambda: np.flatnonzero(sparse.reshape(-1, PAGE).any(axis=1)))
    g = {"iz": cp.is_zero, "a": small}

    def per_call(stmt: str) -> float:
        return min(timeit.repeat(stmt, globals=g, number=2000, repeat=5)) / 2000

    def pages_numpy() -> None:
        np.flatnonzero(pages.reshape(-1, PAGE).any(axis=1))

    cases = {
        "is_zero 64KiB": lambda: per_call("iz(a)"),
        "a.any() 64KiB": lambda: per_call("a.any()"),
        "is_zero 256MiB": lambda: once(lambda: cp.is_zero(big)),
        "is_zero 256MiB threads=auto": lambda: once(lambda: cp.is_zero(big, threads="auto")),
        "a.any() 256MiB": lambda: once(big.any),
        "nonzero_pages 1GiB": lambda: once(lambda: cp.nonzero_pages(pages)),
        "nonzero_pages 1GiB threads=auto":
            lambda: once(lambda: cp.nonzero_pages(pages, threads="auto")),
        "numpy pages 1GiB": lambda: once(pages_numpy),
        "nonzero_pages 1GiB sparse": lambda: once(lambda: cp.nonzero_pages(sparse)),
        "numpy pages 1GiB sparse":
            lambda: once(lambda: np.flatnonzero(sparse.reshape(-1, PAGE).any(axis=1))),
    }
    got: dict[str, list[float]] = {k: [] for k in cases}
    for _ in range(rounds):
        for k, fn in cases.items():
            got[k].append(fn())
    med = {k: statistics.median(v) for k, v in got.items()}
    auto = {m: _fast.decide(m, 1, "auto")[1] for m in (256 << 20, n)}
    print("rounds %d; threads=auto is %d threads at 256 MiB and %d at 1 GiB" % (
        rounds, auto[256 << 20], auto[n]))
    for k, v in med.items():
        print("%-34s %10.3f %s" % (k, v * (1e6 if "64KiB" in k else 1e3),
                                   "us" if "64KiB" in k else "ms"))
    print("is_zero 64KiB: %.2fx a.any()" % (med["a.any() 64KiB"] / med["is_zero 64KiB"]))
    print("is_zero 256MiB: %.2fx a.any() (threads=auto %.2fx)" % (
        med["a.any() 256MiB"] / med["is_zero 256MiB"],
        med["a.any() 256MiB"] / med["is_zero 256MiB threads=auto"]))
    print("nonzero_pages 1GiB: %.2fx numpy (threads=auto %.2fx); %.1f GB/s" % (
        med["numpy pages 1GiB"] / med["nonzero_pages 1GiB"],
        med["numpy pages 1GiB"] / med["nonzero_pages 1GiB threads=auto"],
        n / med["nonzero_pages 1GiB"] / 1e9))
    print("nonzero_pages 1GiB sparse: %.2fx numpy; before any numpy scan %.2f ms, numpy's "
          "first scan %.1f ms (%.0fx)" % (
              med["numpy pages 1GiB sparse"] / med["nonzero_pages 1GiB sparse"],
              fresh * 1e3, first_numpy * 1e3, first_numpy / fresh))


if __name__ == "__main__":
    main()
