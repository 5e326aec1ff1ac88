"""hot=(start, stop): the neighbourhood the caller touches next stays in cache.

Clear a 1 GiB buffer (CLEARPAGES_BENCH_SCALE scales it; quick: 256 MiB, still
above the streaming threshold), then read the 1 MiB in its middle
(numpy's max over 8-byte words, or a bytes comparison without numpy).  Timed: the read
alone, after a clear with and without hot= (the clear is the untimed setup),
and the clear and the read together, so the cost of clearing the hot range
with ordinary stores shows as well.

    python -m pytest bench/bench_hot.py -k quick
"""

from __future__ import annotations

import _common
import pytest
from _common import GiB, MiB, cp, fmt_size, ratio

SUITE = "hot"
HOT = 1 * MiB
FULL = _common.scaled(GiB, _common.env_scale())
QUICK = 256 * MiB
VARIANTS = ("no_hot", "hot")
ZERO = bytes(HOT)


def _reader(buf: _common.Buffer, start: int):
    if _common.np is not None:
        # max over 8-byte words: every byte is read, at close to cache speed.
        words = buf.numpy()[start:start + HOT].view(_common.np.uint64)
        return lambda: int(words.max())
    part = buf.view[start:start + HOT]
    return lambda: 0 if part == ZERO else 1


def _cases():
    for quick, size in ((True, QUICK), (False, FULL)):
        for timed in ("read", "clear+read"):
            for variant in VARIANTS:
                ident = "%s%s-%s-%s" % ("quick-" if quick else "", fmt_size(size),
                                        timed.replace("+", "_"), variant)
                group = "hot %s%s: %s" % ("quick " if quick else "", fmt_size(size), timed)
                marks = [pytest.mark.benchmark(group=group)]
                if not quick:
                    marks += _common.slow_marks(size)
                yield pytest.param(size, timed, variant, quick, id=ident, marks=marks)


@pytest.mark.parametrize("size,timed,variant,quick", list(_cases()))
def test_hot(benchmark, buffers, size, timed, variant, quick):
    buf = buffers.get(size)
    start = size // 2 // MiB * MiB
    hot = (start, start + HOT) if variant == "hot" else None
    mv = buf.view
    read = _reader(buf, start)

    def clear():
        cp.clear(mv, hot=hot)

    rounds = 5 if quick else 8
    if timed == "read":
        rec = _common.run_bench(benchmark, read, suite=SUITE, label="%s read" % fmt_size(size),
                                variant=variant, nbytes=HOT, total=0, rounds=rounds,
                                setup=clear)
    else:
        def both():
            clear()
            return read()
        rec = _common.run_bench(benchmark, both, suite=SUITE,
                                label="%s clear+read" % fmt_size(size), variant=variant,
                                nbytes=size, total=0, rounds=rounds, iterations=1)
    assert read() == 0
    if rec is not None:
        benchmark.extra_info["hot_range"] = list(hot) if hot else None


@_common.summary_of(SUITE)
def _summary(res):
    rows = []
    for label in sorted({lab for lab, _ in res}):
        g = {v: r["median"] for (lab, v), r in res.items() if lab == label}
        no, yes = g.get("no_hot"), g.get("hot")
        rows.append([label, "%.1f" % (no * 1e6) if no else "-",
                     "%.1f" % (yes * 1e6) if yes else "-", ratio(no, yes)])
    return ("hot: median microseconds (read: the hot 1 MiB after the clear; "
            "clear+read: both; speedup = no_hot / hot)",
            _common.table(["case", "without hot us", "with hot us", "speedup"], rows))
