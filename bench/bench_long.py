"""Long extents: one gigabyte through clearpages against one call of the same work.

On AMD Zen, rep stosb (and glibc's memset, which uses it) turns into
streaming stores only when it sees a long length; cut into 32 MiB pieces it
ran at 11-12 GB/s against ~27-32 in one call on a Zen 3 guest.  clearpages
sizes its units by time, so a long extent reaches the routine whole.  Goals:
``auto`` at least 0.95 of one ``ctypes.memset`` call over the whole buffer;
``clear(method="rep_stosb")`` and ``clear(method="libc")`` at least 0.9 of
the same routine called once, directly.  All candidates interleaved, the
order rotated each round, on one prefaulted THP-advised buffer; medians.

    python bench/bench_long.py [--size 1G] [--rounds 15]
"""

from __future__ import annotations

import argparse
import ctypes
import statistics
import time

import _common
from _common import GiB, cp

from clearpages.tools.lowlevel import state


def run(size: int = GiB, rounds: int = 15) -> tuple[str, dict[str, float]]:
    from clearpages.tools.lowlevel import ffi

    buf = _common.Buffer(size)
    view = buf.view
    direct = state().direct
    ptr = ffi.cast("char *", buf.address)
    cands = {
        "auto": lambda v=view: cp.clear(v),
        "memset (one call)": lambda: ctypes.memset(buf.address, 0, size),
    }
    for name in ("rep_stosb", "libc"):
        if name in cp.methods():
            cands["clear(method=%s)" % name] = (lambda n=name, v=view: cp.clear(v, method=n))
            cands["%s (one direct call)" % name] = (lambda n=name: direct[n](ptr, size))
    names = list(cands)
    times: dict[str, list[float]] = {n: [] for n in names}
    for r in range(rounds):
        order = names[r % len(names):] + names[:r % len(names)]
        for n in order:
            t0 = time.perf_counter()
            cands[n]()
            times[n].append(time.perf_counter() - t0)
    gbps = {n: size / statistics.median(t) / 1e9 for n, t in times.items()}
    cands.clear()
    buf.close()
    rows = [[n, "%.1f" % g] for n, g in gbps.items()]
    goals = [("auto / memset (one call)", gbps["auto"] / gbps["memset (one call)"], 0.95)]
    for name in ("rep_stosb", "libc"):
        key = "clear(method=%s)" % name
        if key in gbps:
            goals.append(("%s / one direct call" % key,
                          gbps[key] / gbps["%s (one direct call)" % name], 0.9))
    text = ("%s, median of %d rounds, interleaved; plan: %s\n" % (
        _common.fmt_size(size), rounds, cp.plan(size, threads=1))
        + _common.table(["candidate", "GB/s"], rows) + "\n\n"
        + _common.table(["ratio", "value", "goal", ""],
                        [[g, "%.2f" % v, ">= %.2f" % want, "ok" if v >= want else "MISSES"]
                         for g, v, want in goals]))
    return text, {g: v for g, v, _ in goals}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--size", type=_common.size_arg, default=GiB)
    ap.add_argument("--rounds", type=int, default=15)
    a = ap.parse_args(argv)
    print(_common.machine_label())
    print()
    print(run(a.size, a.rounds)[0])
    return 0


def test_long_quick():
    text, ratios = run(64 << 20, rounds=2)
    assert "auto / memset" in text
    assert all(v > 0 for v in ratios.values())


if __name__ == "__main__":
    raise SystemExit(main())
