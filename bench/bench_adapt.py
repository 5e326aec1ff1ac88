"""Adaptive auto against the workload: warm, then cold, then warm again.

One process, three phases, at each size (1, 4, 8, 16 MiB by default):

- warm: the same buffer cleared back to back;
- cold: a different buffer each call, walking a pool much larger than the
  last-level cache (1 GiB by default, prefaulted, THP-advised);
- warm again: the first buffer again, to see adaptation follow back.

In each phase and size every candidate runs in rounds, interleaved: a block
of untimed calls (so the buffer is in the state that candidate leaves it in)
and then a block of timed calls, one after another, as a program's loop
would; the figure is the median block over the rounds.  ``auto`` runs right
after the ordinary-store routines: it learns from every call, untimed ones
too, and in a warm loop nobody else streams over its buffer.  Candidates: ``auto``
(adaptive, through ``cp.clear``), ``auto`` with adaptation paused
(``cp.set_adaptive(False)``, the static choice, also through ``cp.clear``),
and every routine called directly.  The learner keeps what it learned from
phase to phase, as in a real program; the "1st block" column is ``auto``'s
first timed block of the phase, while it may still be learning.

A second table times the per-call path outside the band (4 KiB, 1 GiB):
``auto`` with adaptation on against off.

    python bench/bench_adapt.py [--sizes 1M 4M 8M 16M] [--pool 1G] [--rounds 7]
                                [--no-address]

--no-address keys the learner on the size alone (no "cleared again soon"
context), to compare the two designs.
"""

from __future__ import annotations

import argparse
import functools
import statistics
import time
from typing import Any, Callable

import _common
import pytest

import clearpages as cp
from clearpages.tools.lowlevel import BY_NAME, ffi, lib, state

SIZES = ("1M", "4M", "8M", "16M")
WARMUP = 10         # untimed calls before each timed block
BLOCK = 100         # timed calls per block


def _gbps(n: int, calls: int, ns: int) -> float:
    return n * calls / ns


def _block(call: Callable[[], None], calls: int) -> int:
    t = time.perf_counter_ns()
    for _ in range(calls):
        call()
    return time.perf_counter_ns() - t


class Walk:
    """Targets for one size: one buffer (warm) or the slots of a pool (cold)."""

    def __init__(self, pool: _common.Buffer, warm: _common.Buffer, n: int) -> None:
        self.n = n
        self.slots = pool.size // n
        self.pool_mv = [pool.view[i * n:(i + 1) * n] for i in range(self.slots)]
        self.pool_ptr = [ffi.cast("char *", pool.address + i * n) for i in range(self.slots)]
        self.warm_mv = warm.view[:n]
        self.warm_ptr = ffi.cast("char *", warm.address)
        self.cursor = 0

    def next_slot(self) -> int:
        i = self.cursor
        self.cursor = (i + 1) % self.slots
        return i

    def caller(self, name: str, cold: bool) -> Callable[[], None]:
        """One call of candidate `name` on the next target."""
        clear = cp.clear
        n = self.n
        if name in ("auto", "auto (static)"):
            if not cold:
                mv = self.warm_mv
                return lambda: clear(mv)
            mvs, nxt = self.pool_mv, self.next_slot
            return lambda: clear(mvs[nxt()])
        fn = state().direct[name]
        if not cold:
            ptr = self.warm_ptr
            return lambda: fn(ptr, n)
        ptrs, nxt = self.pool_ptr, self.next_slot
        return lambda: fn(ptrs[nxt()], n)

    def close(self) -> None:
        for mv in self.pool_mv:
            mv.release()
        self.warm_mv.release()


def _measure(walk: Walk, names: list[str], cold: bool, rounds: int) -> dict[str, Any]:
    """Median block GB/s per candidate, and auto's first block."""
    n = walk.n
    got: dict[str, list[float]] = {k: [] for k in names}
    for _ in range(rounds):
        for name in names:
            cp.set_adaptive(name == "auto")
            call = walk.caller(name, cold)
            _block(call, WARMUP)
            got[name].append(_gbps(n, BLOCK, _block(call, BLOCK)))
    cp.set_adaptive(True)
    out: dict[str, Any] = {k: statistics.median(v) for k, v in got.items()}
    out["first"] = got["auto"][0]
    return out


PHASES = ("warm", "cold", "warm again")


def run(sizes: list[int], pool_bytes: int, rounds: int, by_address: bool = True,
        phases: tuple[str, ...] = PHASES) -> tuple[str, list[dict[str, Any]]]:
    if not cp.adaptive():
        raise SystemExit("adaptive auto is off here (CLEARPAGES_ADAPT=0, "
                         "CLEARPAGES_METHOD or a portable build): nothing to measure")
    if not by_address:
        p = ffi.new("struct cp_adapt_params *")
        lib.cp_adapt_params(p)
        p.reuse_bytes = 0
        lib.cp_adapt_configure(p)
    th = cp.thresholds()
    temporal = [m for m in cp.methods() if BY_NAME[m].temporal]
    streaming = [m for m in cp.methods() if not BY_NAME[m].temporal]
    # auto runs right after the ordinary-store routines, so in the warm
    # phases its block finds the buffer cached, as in a program's own loop;
    # the routines called directly each have their untimed calls for that.
    names = streaming + ["auto (static)"] + temporal + ["auto"]
    pool = _common.Buffer(pool_bytes)
    warm = _common.Buffer(max(sizes))
    walks = {n: Walk(pool, warm, n) for n in sizes}
    rows: list[list[Any]] = []
    data: list[dict[str, Any]] = []
    try:
        for phase in phases:
            for n in sizes:
                m = _measure(walks[n], names, phase == "cold", rounds)
                bt = max(temporal, key=lambda k: m[k])
                bs = max(streaming, key=lambda k: m[k])
                best = max(m[bt], m[bs])
                inband = th.adapt_min <= n < th.adapt_max
                rows.append([phase, _common.fmt_size(n) + ("" if inband else " (out)"),
                             "%.1f" % m["auto"], "%.1f" % m["auto (static)"],
                             "%.1f (%s)" % (m[bt], bt), "%.1f (%s)" % (m[bs], bs),
                             "%.2f" % (m["auto"] / best), "%.2f" % (m["auto (static)"] / best),
                             "%.2f" % (m["first"] / best)])
                data.append({"phase": phase, "size": n, "best": best, **m})
    finally:
        for w in walks.values():
            w.close()
        warm.close()
        pool.close()
        if not by_address:
            cp.reload_config()
    text = ("GB/s, median of %d interleaved blocks of %d calls (each after %d untimed); "
            "cold: a different buffer each call, walking a %s pool; learner keyed by %s\n"
            % (rounds, BLOCK, WARMUP, _common.fmt_size(pool_bytes),
               "size and address" if by_address else "size only")
            + _common.table(["phase", "size", "auto", "auto static", "best temporal",
                             "best streaming", "auto/best", "static/best",
                             "1st block/best"], rows))
    return text, data


def outside(rounds: int = 9, big: int = 1 << 30) -> str:
    """auto with adaptation on against off, per call, outside the band."""
    rows = []
    for n, calls in ((4096, 20000), (big, 2)):
        buf = _common.Buffer(n)
        call = functools.partial(cp.clear, buf.view)
        times: dict[bool, list[float]] = {True: [], False: []}
        for r in range(rounds):
            for on in ((True, False) if r % 2 == 0 else (False, True)):
                cp.set_adaptive(on)
                call()
                times[on].append(_block(call, calls) / calls)
        cp.set_adaptive(True)
        on_ns, off_ns = statistics.median(times[True]), statistics.median(times[False])
        shown = [("%.3f us" % (v / 1e3)) if n < (1 << 20) else ("%.2f ms" % (v / 1e6))
                 for v in (on_ns, off_ns)]
        rows.append([_common.fmt_size(n), *shown, "%.3f" % (on_ns / off_ns)])
        buf.close()
    return ("Outside the band: cp.clear(buf) per call, median of %d interleaved rounds\n"
            % rounds + _common.table(["size", "adaptive on", "adaptive off", "on/off time"], rows))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", nargs="+", type=_common.size_arg)
    ap.add_argument("--pool", type=_common.size_arg, default=1 << 30)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--no-address", action="store_true")
    ap.add_argument("--no-outside", action="store_true")
    a = ap.parse_args(argv)
    sizes = a.sizes or [_common.size_arg(s) for s in SIZES]
    th = cp.thresholds()
    print(_common.machine_label())
    print("adaptive band %s-%s (%s)" % (_common.fmt_size(th.adapt_min),
                                       _common.fmt_size(th.adapt_max), th.reason("adapt")))
    print()
    text, _ = run(sizes, a.pool, a.rounds, by_address=not a.no_address)
    print(text)
    if not a.no_outside:
        print()
        print(outside())
    return 0


SUITE = "adaptive auto"


@pytest.mark.parametrize("size", [_common.size_arg(s) for s in SIZES], ids=list(SIZES))
def test_adapt_phases(benchmark, size):
    """The three phases at one size, in one process, as pytest-benchmark
    cases: the time is the whole program (three phases of interleaved
    blocks); extra_info and the summary hold auto's ratio to the best routine
    of each phase, the figure the goal is stated in."""
    if not cp.adaptive():
        pytest.skip("adaptive auto is off in this build or configuration")
    out: dict[str, Any] = {}

    def program() -> None:
        out["data"] = run([size], 1 << 30, rounds=3)[1]
    benchmark.pedantic(program, rounds=1, iterations=1)
    for d in out["data"]:
        ratio = d["auto"] / d["best"]
        benchmark.extra_info["%s auto/best" % d["phase"]] = round(ratio, 3)
        _common.RESULTS.setdefault(SUITE, {})[(_common.fmt_size(size), d["phase"])] = {
            "ratio": ratio, "static": d["auto (static)"] / d["best"]}


@_common.summary_of(SUITE)
def _summary(res: dict) -> tuple[str, str]:
    rows = []
    for (label, phase), r in sorted(res.items(), key=lambda kv: (PHASES.index(kv[0][1]),
                                                                  _common.size_arg(kv[0][0]))):
        rows.append([phase, label, "%.2f" % r["ratio"], "%.2f" % r["static"],
                     "ok" if r["ratio"] >= 0.9 else "MISS"])
    return ("adaptive auto: warm, cold, warm again (goal: auto >= 0.9 of the best routine "
            "of the phase)", _common.table(["phase", "size", "auto/best", "static/best",
                                            "goal"], rows))


def test_adapt_quick():
    if not cp.adaptive():
        import pytest
        pytest.skip("adaptive auto is off in this build or configuration")
    n = cp.thresholds().adapt_min
    text, data = run([n], 16 * n, rounds=2)
    assert "warm again" in text and len(data) == 3
    assert all(d["auto"] > 0 for d in data)


if __name__ == "__main__":
    raise SystemExit(main())
