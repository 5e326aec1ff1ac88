"""One call of `clear` on the buffers a numpy user has, against numpy's own.

Warm: each buffer cleared again and again (in the caches unless its size
says otherwise), the clear alone, nothing reading or writing it between
calls; `timeit`, the best of --repeat runs of --number calls (scaled down
for large views), us a call.  Rows: numpy arrays of other dtypes (float64
items are as wide as a pointer and are checked for references), Fortran
order and strided views (every other column, row, byte; the first bytes of
each row, as `a[:, :k]` takes them), `clear_many` of a
few buffers against a loop, and a method named by a string built at run
time against the literal.

    python bench/bench_layouts.py [--number 20000] [--repeat 5]
"""

from __future__ import annotations

import argparse
import sys
import timeit
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np

import clearpages as cp


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--number", type=int, default=20000)
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args(argv)

    def us(stmt: str, g: dict, scale: int = 1) -> float:
        n = max(20, args.number // scale)
        return min(timeit.repeat(stmt, globals=g, number=n, repeat=args.repeat)) / n * 1e6

    info = cp.cpu()
    print("clearpages %s on %s (family %s model %s); warm, the clear alone; us a call"
          % (cp.__version__ if hasattr(cp, "__version__") else "", info.brand or info.vendor,
             info.family, info.model))
    rows = []
    for name, make, scale in [
        ("uint8, 64 B", lambda: np.ones(64, np.uint8), 1),
        ("float64, 64 B", lambda: np.ones(8), 1),
        ("complex128, 64 B", lambda: np.ones(4, np.complex128), 1),
        ("float64, 4 KiB", lambda: np.ones(512), 1),
        ("64x64 float64, Fortran order", lambda: np.ones((64, 64), order="F"), 1),
        ("64x128 float64, every other column", lambda: np.ones((64, 128))[:, ::2], 1),
        ("64x128 float64, every other row", lambda: np.ones((64, 128))[::2], 1),
        ("256x64 float64, one column", lambda: np.ones((256, 64))[:, 3], 1),
        ("4096x128 float64, every other column", lambda: np.ones((4096, 128))[:, ::2], 64),
        ("4096x128 uint8, every 4th byte", lambda: np.ones((4096, 128), np.uint8)[:, ::4], 64),
        ("512x8x128 float64, every other of the last two axes",
         lambda: np.ones((512, 8, 128))[:, ::2, ::2], 64),
        ("2048x2048 float64, every other column (from memory)",
         lambda: np.ones((2048, 2048))[:, ::2], 2000),
        ("64x128 uint8, the first 64 B of each row",
         lambda: np.ones((64, 128), np.uint8)[:, :64], 1),
        ("256x1024 uint8, the first 512 B of each row",
         lambda: np.ones((256, 1024), np.uint8)[:, :512], 8),
        ("1024x2048 uint8, the first 1 KiB of each row",
         lambda: np.ones((1024, 2048), np.uint8)[:, :1024], 64),
        ("512x4096 uint8, the first 2 KiB of each row",
         lambda: np.ones((512, 4096), np.uint8)[:, :2048], 64),
        ("256x8192 uint8, the first 4 KiB of each row",
         lambda: np.ones((256, 8192), np.uint8)[:, :4096], 64),
        ("64x32768 uint8, the first 16 KiB of each row",
         lambda: np.ones((64, 32768), np.uint8)[:, :16384], 64),
    ]:
        g = {"cp": cp, "a": make()}
        rows.append((name, us("cp.clear(a)", g, scale), us("a.fill(0)", g, scale)))
    for k, size in ((4, 512), (16, 512), (64, 4096), (256, 4096)):
        g = {"cp": cp, "m": [bytearray(size) for _ in range(k)]}
        rows.append(("clear_many of %d x %d B (against a loop of clear)" % (k, size),
                     us("cp.clear_many(m)", g, k), us("[cp.clear(x) for x in m]", g, k)))
    b = bytearray(4096)
    built = "".join(["li", "bc"])
    rows.append(("4 KiB, method=str built at run time (against the literal)",
                 us("cp.clear(b, method=m)", {"cp": cp, "b": b, "m": built}),
                 us("cp.clear(b, method='libc')", {"cp": cp, "b": b})))
    width = max(len(r[0]) for r in rows)
    print("%-*s  %9s  %9s  %6s" % (width, "buffer", "clear", "other", "ratio"))
    for name, mine, theirs in rows:
        print("%-*s  %9.2f  %9.2f  %6.2f" % (width, name, mine, theirs, mine / theirs))
    print("other: numpy's a.fill(0) unless the row says what")
    return 0


if __name__ == "__main__":
    sys.exit(main())
