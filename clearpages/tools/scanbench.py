"""The scan section of ``python -m clearpages bench``: is_zero against numpy,
and against clearing the same buffer.

At each size, ``is_zero`` and numpy's ``a.any()`` (the usual way to ask
"is it all zero?") read the same zero buffer, and ``clear`` writes it, so
that the table says whether checking first pays, interleaved round by round:
warm (the same buffer again and again, in cache where it fits) and cold (a
different buffer each call, walking a pool larger than the last-level
cache, the measuring engine's cold pool).  Then the early exit: the largest
size with its first byte nonzero.  A sample times enough calls to last
``target_s``; the table shows the median of the samples.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence
from typing import Any, TextIO

from .. import _core, _scan
from .._units import format_size
from . import measure as _measure

SCENARIOS = (_measure.WARM, _measure.COLD)


def _per_call(fn: Callable[[int], Any], calls: int) -> float:
    t0 = time.perf_counter_ns()
    for i in range(calls):
        fn(i)
    return (time.perf_counter_ns() - t0) / 1e9 / calls


def _calls_for(fn: Callable[[int], Any], target_s: float) -> int:
    n = 1
    while n < 1_000_000:
        per = _per_call(fn, n)
        if per * n >= target_s / 8:
            return max(1, int(target_s / per)) if per > 0 else n
        n *= 8
    return n


def measure(sizes: Sequence[int], *, repeat: int = 9, target_s: float = 0.002,
            progress: Callable[[int, int, str], None] | None = None) -> dict[str, Any]:
    """{"rows": [...], "early_exit": {...} or None, "numpy": bool, "scan": variant}."""
    np = _numpy()
    from .._dispatch import state

    pool_bytes = max(max(sizes), _measure.cold_pool_size())
    pool = _measure.Buffer(pool_bytes)
    _core.clear(pool.view)          # resident (written when made), now zero
    held: dict[str, Any] = {}       # every view of the pool, let go before it closes
    held["raw"] = raw = pool.numpy() if np is not None else None
    rows = []
    steps = len(sizes) * len(SCENARIOS)
    done = 0
    try:
        for size in sorted(sizes):
            for sc in SCENARIOS:
                done += 1
                if progress is not None:
                    progress(done, steps, format_size(size))
                if sc == _measure.COLD and not _measure.cold_measurable(size, pool_bytes):
                    continue
                slots = 1 if sc == _measure.WARM else pool_bytes // size
                held["views"] = views = [pool.view[i * size:(i + 1) * size]
                                         for i in range(min(slots, 4096))]
                held["arrays"] = arrays = ([raw[i * size:(i + 1) * size]
                                            for i in range(len(views))]
                                           if raw is not None else None)
                k = len(views)
                held["cands"] = cands = {
                    "is_zero": lambda i, v=views, k=k: _scan.is_zero(v[i % k]),
                    "clear": lambda i, v=views, k=k: _core.clear(v[i % k])}
                if arrays is not None:
                    cands["numpy a.any()"] = lambda i, a=arrays, k=k: a[i % k].any()
                calls = {n: _calls_for(f, target_s) for n, f in cands.items()}
                samples: dict[str, list[float]] = {n: [] for n in cands}
                names = list(cands)
                for r in range(repeat):
                    for n in names[r % len(names):] + names[:r % len(names)]:
                        samples[n].append(_per_call(cands[n], calls[n]))
                med = {n: statistics.median(xs) for n, xs in samples.items()}
                rows.append({"size": size, "scenario": sc,
                             "is_zero_gbps": size / med["is_zero"] / 1e9,
                             "clear_gbps": size / med["clear"] / 1e9,
                             "over_clear": med["clear"] / med["is_zero"],
                             "numpy_gbps": (size / med["numpy a.any()"] / 1e9
                                            if "numpy a.any()" in med else None),
                             "ratio": (med["numpy a.any()"] / med["is_zero"]
                                       if "numpy a.any()" in med else None)})
        a = None
        big = max(sizes)
        pool.view[0] = 1
        z = [_per_call(lambda i: _scan.is_zero(pool.view[:big]), 1000) for _ in range(repeat)]
        early = {"size": big, "is_zero_s": statistics.median(z)}
        if raw is not None:
            a = raw[:big]
            early["numpy_s"] = statistics.median(_per_call(lambda i: a.any(), 1)  # type: ignore[union-attr]
                                                 for _ in range(3))
        pool.view[0] = 0
    finally:
        held.clear()
        views = arrays = cands = raw = a = None  # type: ignore[assignment]
        pool.close()
    return {"rows": rows, "early_exit": early, "numpy": np is not None,
            "scan": state().scan, "cold_pool": pool_bytes}


def _numpy() -> Any:
    try:
        import numpy
    except ImportError:
        return None
    return numpy


def report(data: dict[str, Any], out: TextIO) -> None:
    from .output import say, table

    print(file=out)
    say("zero scan (%s): is_zero against numpy's a.any() on a zero buffer, and against "
        "clear of the same buffer (auto), GB/s at the median; warm: the same buffer "
        "again and again; cold: a different buffer each call, walking a %s pool. "
        "is_zero / clear below 1: checking a buffer that is already zero costs more than "
        "clearing it" % (data["scan"], format_size(data["cold_pool"])), out)
    if not data["numpy"]:
        say("(numpy is not installed: is_zero alone; pip install numpy to compare)", out)
    head = ("size", "case", "is_zero GB/s", "a.any() GB/s", "is_zero / a.any()",
            "clear GB/s", "is_zero / clear")
    rows = [(format_size(r["size"]), r["scenario"], "%.1f" % r["is_zero_gbps"],
             "%.1f" % r["numpy_gbps"] if r["numpy_gbps"] else "-",
             "%.2fx" % r["ratio"] if r["ratio"] else "-",
             "%.1f" % r["clear_gbps"], "%.2fx" % r["over_clear"]) for r in data["rows"]]
    table(rows, head, out, right=(2, 3, 4, 5, 6))
    e = data["early_exit"]
    if e:
        line = "early exit: %s whose first byte is nonzero: is_zero %.2f us" % (
            format_size(e["size"]), e["is_zero_s"] * 1e6)
        if "numpy_s" in e:
            line += ", a.any() %.0f us" % (e["numpy_s"] * 1e6)
        say(line, out)
