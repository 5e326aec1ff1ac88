"""The zero scan against the read ceiling, and checking first against clearing.

    python bench/scan_ceiling.py [--rounds N] [--size 256M]

1. `is_zero` of a resident, zero buffer (256 MiB by default, far past the L3)
   against a plain loop that ORs four AVX2 accumulators over it, compiled
   here with `cc -O3 -mavx2` (no early exit, no test in the loop: what
   reading the memory costs on one core).  The goal: at least 0.95 of it.
2. When checking first pays: on the same resident, already-zero buffer,
   `is_zero` against `clear` (reading costs more than streaming zeros over
   it); on a resident buffer with 1% of its 4 KiB pages dirty,
   `nonzero_pages` + `clear_pages` of those against `clear` of it all; and
   on a fresh `np.zeros` whose pages were never touched, where neither
   reads nor writes them.

Every case runs once per round, in turn (interleaved), so that a loaded
machine slows them alike; the figures are the medians of the per-round
ratios with their interquartile range beside.
"""

from __future__ import annotations

import argparse
import ctypes
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

import clearpages as cp
from clearpages.tools.lowlevel import format_size, parse_size
from clearpages.tools.output import cpu_line

_PLAIN_SRC = r"""
#include <immintrin.h>
#include <stddef.h>
/* Four accumulators, 128 bytes a step, one test at the end. */
int plain_or(const void *p, size_t n)
{
    const __m256i *v = (const __m256i *)p;
    __m256i a0 = _mm256_setzero_si256(), a1 = a0, a2 = a0, a3 = a0;
    for (size_t i = 0; i < n / 128; i++, v += 4) {
        a0 = _mm256_or_si256(a0, _mm256_loadu_si256(v));
        a1 = _mm256_or_si256(a1, _mm256_loadu_si256(v + 1));
        a2 = _mm256_or_si256(a2, _mm256_loadu_si256(v + 2));
        a3 = _mm256_or_si256(a3, _mm256_loadu_si256(v + 3));
    }
    __m256i a = _mm256_or_si256(_mm256_or_si256(a0, a1), _mm256_or_si256(a2, a3));
    return _mm256_testz_si256(a, a);
}
"""


def plain_loop():
    """The plain loop as a ctypes function, or None without a compiler or AVX2."""
    if "avx2" not in cp.cpu().features:
        return None
    d = tempfile.mkdtemp(prefix="clearpages-bench-")
    try:
        src, so = os.path.join(d, "plain.c"), os.path.join(d, "plain.so")
        with open(src, "w") as f:
            f.write(_PLAIN_SRC)
        subprocess.run([os.environ.get("CC", "cc"), "-O3", "-mavx2", "-shared", "-fPIC",
                        src, "-o", so], check=True, capture_output=True)
        fn = ctypes.CDLL(so).plain_or
    except (OSError, subprocess.CalledProcessError):
        return None
    finally:
        shutil.rmtree(d, ignore_errors=True)    # a loaded library needs no file
    fn.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    fn.restype = ctypes.c_int
    return fn


def once(fn) -> float:
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def ratio_line(name: str, ratios: list[float], goal: str = "") -> str:
    q = statistics.quantiles(ratios, n=4)
    return "%-44s %6.3f  (IQR %.3f-%.3f)%s" % (name, statistics.median(ratios), q[0], q[2],
                                                "  " + goal if goal else "")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--size", default="256M")
    args = ap.parse_args()
    n = parse_size(args.size)
    print("%s; %s; load average %.2f %.2f %.2f" % (cpu_line(cp.cpu()), format_size(n),
                                                    *os.getloadavg()))

    resident = np.zeros(n, np.uint8)
    resident.fill(0)                              # in memory, every page
    sparse = np.zeros(n, np.uint8)
    sparse.fill(0)
    rng = np.random.default_rng(5)
    dirty = np.sort(rng.choice(n // 4096, size=max(1, n // 4096 // 100), replace=False))
    plain = plain_loop()
    addr = resident.ctypes.data

    def check_then_clear() -> None:
        cp.clear_pages(sparse, cp.nonzero_pages(sparse))

    cases = {
        "is_zero": lambda: cp.is_zero(resident),
        "clear": lambda: cp.clear(resident),
        "nonzero_pages + clear_pages, 1% dirty": check_then_clear,
        "clear, 1% dirty": lambda: cp.clear(sparse),
    }
    if plain is not None:
        assert plain(addr, n) == 1
        cases["plain AVX2 loop"] = lambda: plain(addr, n)
    times: dict[str, list[float]] = {}
    for fn in cases.values():
        fn()
    for _ in range(args.rounds):
        for name, fn in cases.items():
            if "dirty" in name:
                sparse[dirty * 4096] = 1          # dirty again, untimed
            times.setdefault(name, []).append(once(fn))
    assert cp.is_zero(sparse)

    def per_round(a: str, b: str) -> list[float]:
        """b's time over a's, round by round."""
        return [y / x for x, y in zip(times[a], times[b])]

    print("\nresident memory, medians of the per-round ratios:")
    if plain is not None:
        print(ratio_line("is_zero speed / plain AVX2 loop's",
                         per_round("is_zero", "plain AVX2 loop"), "goal >= 0.95"))
    print(ratio_line("zero: is_zero time / clear time", per_round("clear", "is_zero")))
    print(ratio_line("1% dirty: check + clear_pages / clear",
                     per_round("clear, 1% dirty", "nonzero_pages + clear_pages, 1% dirty")))
    for name, ts in times.items():
        print("  %-40s %8.2f ms  %5.1f GB/s" % (name, statistics.median(ts) * 1e3,
                                                 n / statistics.median(ts) / 1e9))

    # Never touched: the scan reads no page and the clear writes none.
    fresh_scan, fresh_clear = [], []
    for _ in range(max(3, args.rounds // 3)):
        a = np.zeros(n, np.uint8)
        fresh_scan.append(once(lambda a=a: cp.is_zero(a)))
        fresh_clear.append(once(lambda a=a: cp.clear(a)))
        del a
    print("\nnever touched (a fresh np.zeros): is_zero %.3f ms, clear %.3f ms (medians)"
          % (statistics.median(fresh_scan) * 1e3, statistics.median(fresh_clear) * 1e3))
    return 0


if __name__ == "__main__":
    sys.exit(main())
