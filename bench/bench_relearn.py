"""Whole programs that change under auto: does it follow, and does it ever
lose to the memset it replaces?

Each program is a sequence of phases; every candidate runs the whole
program in each round (the order rotated from round to round), and each
phase is timed.  Before auto's run the learner forgets everything
(``cp_adapt_reset``): every round is a program's first run, as in a new
process.  Programs:

- ``phases``: one buffer cleared ``--warm`` times (warm), then ``--walks``
  walks over a pool of buffers of the same size (cold), then the first
  buffer again (warm again); clear only.
- ``scatter``: the same three phases, each clear followed by writes to
  1/16 of the buffer's 8-byte words at random and a sum of the buffer.
- ``pad``: the same, each clear followed by writing the first half of every
  4 KiB row and a sum of the buffer.

A phase has at most ``--calls`` clears and at most ``--phase-bytes`` of
them (a cold phase: at least one walk where that allows).

Candidates: auto; the temporal and the streaming routine of the policy
through ``method=``; ``numpy.fill``; ``ctypes.memset``.  The figures are
medians over rounds of per-round ratios (a phase's time for the best
routine of that phase, or for numpy.fill, or for memset, over auto's), with
the lower and upper quartiles; the whole program is also set against the
best single candidate over the whole program.

Following a change: after the phase before, how soon auto reaches 0.9 of
the best routine of the new phase.  The budget is max(64 calls, clears
adding up to twice the last-level cache); each phase after the first is
timed in two parts, its first ``budget`` calls and the rest, and
"after the budget" is the best routine's time over auto's on the rest
(goal: 0.9; "-" where the phase is no longer than its budget).

    python bench/bench_relearn.py [--programs phases scatter pad] [--sizes 1M 4M]
                                  [--rounds 7] [--pool 512M]
"""

from __future__ import annotations

import argparse
import ctypes
import statistics
import sys
import time
from pathlib import Path
from typing import Any, Callable

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np

import clearpages as cp
from clearpages.tools.lowlevel import format_size, lib, parse_size
from clearpages.tools.measure import Buffer

KiB, MiB = 1 << 10, 1 << 20
AUTO, FILL, MEMSET = "auto", "numpy.fill", "ctypes.memset"
PROGRAMS = ("phases", "scatter", "pad")


def fmt(n: int) -> str:
    return format_size(n)


class Slot:
    def __init__(self, buf: Buffer, off: int, n: int) -> None:
        self.mv = buf.view[off:off + n]
        self.addr = buf.address + off
        self.n = n
        self.u8 = buf.numpy()[off:off + n]
        self.u64 = self.u8.view(np.uint64)
        self.rows = self.u8.reshape(-1, 4096) if n % 4096 == 0 else self.u8.reshape(1, -1)

    def release(self) -> None:
        self.mv.release()
        self.u8 = self.u64 = self.rows = None


def clearer(name: str, routines: tuple[str, str]) -> Callable[[Slot], Any]:
    clear = cp.clear
    if name == AUTO:
        return lambda s: clear(s.mv)
    if name == FILL:
        return lambda s: s.u8.fill(0)
    if name == MEMSET:
        memset = ctypes.memset
        return lambda s: memset(s.addr, 0, s.n)
    return lambda s: clear(s.mv, method=name)


def user(program: str, n: int) -> Callable[[Slot], Any] | None:
    if program == "phases":
        return None
    if program == "scatter":
        idx = np.random.default_rng(15).integers(0, n // 8, max(1, n // 8 // 16))

        def scatter(s: Slot) -> Any:
            s.u64[idx] = 7
            return s.u64.sum()
        return scatter
    if program == "pad":
        half = min(4096, n) // 2

        def pad(s: Slot) -> Any:
            s.rows[:, :half] = 1
            return s.u64.sum()
        return pad
    raise ValueError(program)


#: The clock: the thread's CPU time, so that a phase the scheduler took the
#: CPU from (other work on a shared machine) is not charged for the wait;
#: --wall uses the wall clock.
CLOCK = [time.thread_time_ns]


def run_phase(clear: Callable[[Slot], Any], use: Callable[[Slot], Any] | None,
              slots: list[Slot], split: int = 0) -> tuple[float, float]:
    """(seconds of the phase, seconds of its calls from ``split`` on)."""
    clock = CLOCK[0]
    head, tail = slots[:split], slots[split:]
    t = clock()
    if use is None:
        for s in head:
            clear(s)
        m = clock()
        for s in tail:
            clear(s)
    else:
        for s in head:
            clear(s)
            use(s)
        m = clock()
        for s in tail:
            clear(s)
            use(s)
    end = clock()
    return (end - t) / 1e9, (end - m) / 1e9


#: After a change, auto is judged from this many calls on, or from the call
#: where its clears add up to BUDGET_L3 times the last-level cache, whichever
#: is later; at least GOAL_FOLLOW of the best routine from there.
BUDGET_CALLS = 64
BUDGET_L3 = 2
GOAL_FOLLOW = 0.9


def budget(n: int) -> int:
    """Calls a change may take, for n-byte clears."""
    l3 = cp.cpu().last_cache or 32 * MiB
    return max(BUDGET_CALLS, -(-BUDGET_L3 * l3 // n))


def program_cells(program: str, n: int, names: list[str], routines: tuple[str, str],
                  pool: Buffer, warm: Buffer, rounds: int, warm_calls: int, walks: int,
                  max_calls: int, phase_bytes: int) -> dict[str, Any]:
    slots = pool.size // n
    pool_slots = [Slot(pool, i * n, n) for i in range(slots)]
    w = Slot(warm, 0, n)
    calls = max(1, min(max_calls, phase_bytes // n))
    warm_n = min(warm_calls, calls) if program == "phases" else calls
    cold_n = min(max(slots, calls), walks * slots) if program == "phases" else calls
    cursor = [0]

    def cold_slots(k: int) -> list[Slot]:
        out = [pool_slots[(cursor[0] + i) % slots] for i in range(k)]
        cursor[0] = (cursor[0] + k) % slots
        return out
    phases = ("warm", "cold", "warm again")
    use = user(program, n)
    times: dict[str, dict[str, list[float]]] = {p: {k: [] for k in names} for p in phases}
    # after the budget, in the phases that follow a change
    later: dict[str, dict[str, list[float]]] = {p: {k: [] for k in names} for p in phases[1:]}
    b = budget(n)
    try:
        for r in range(rounds):
            order = names[r % len(names):] + names[:r % len(names)]
            for name in order:
                clear = clearer(name, routines)
                if name == AUTO:
                    lib.cp_adapt_reset()
                w.u8.fill(1)            # the program's data, just written
                times["warm"][name].append(run_phase(clear, use, [w] * warm_n)[0])
                for p, seq in (("cold", cold_slots(cold_n)), ("warm again", [w] * warm_n)):
                    whole, rest = run_phase(clear, use, seq, b)
                    times[p][name].append(whole)
                    later[p][name].append(rest)
    finally:
        for s in pool_slots:
            s.release()
        w.release()
    return {"times": times, "later": later, "calls": (warm_n, cold_n, warm_n), "budget": b}


def ratios(t: dict[str, list[float]], ref: list[str]) -> tuple[list[float], str]:
    """Per round: the best reference's (by median) time over auto's."""
    best = min(ref, key=lambda k: statistics.median(t[k]))
    return [b / a for b, a in zip(t[best], t[AUTO])], best


def q(xs: list[float]) -> str:
    if len(xs) < 2:
        return "%.2f" % xs[0]
    qs = statistics.quantiles(xs, n=4, method="inclusive")
    return "%.2f [%.2f-%.2f]" % (statistics.median(xs), qs[0], qs[2])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--programs", nargs="+", default=list(PROGRAMS), choices=PROGRAMS)
    ap.add_argument("--sizes", nargs="+", default=["16K", "256K", "1M", "4M", "16M"])
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--pool", default="512M")
    ap.add_argument("--warm", type=int, default=250, help="warm calls (phases)")
    ap.add_argument("--walks", type=int, default=3, help="cold pool walks (phases)")
    ap.add_argument("--calls", type=int, default=4000, help="most calls in a phase")
    ap.add_argument("--phase-bytes", default="2G", help="most bytes cleared in a phase")
    ap.add_argument("--wall", action="store_true", help="time by the wall clock")
    a = ap.parse_args(argv)
    if a.wall:
        CLOCK[0] = time.perf_counter_ns
    th = cp.thresholds()
    routines = (th.temporal, th.streaming)
    names = [AUTO, th.temporal, th.streaming, FILL, MEMSET]
    refs = [th.temporal, th.streaming, FILL, MEMSET]
    sizes = [parse_size(s) for s in a.sizes]
    pool_bytes = parse_size(a.pool)
    import os
    print("load average %.1f %.1f %.1f; adaptive: %s; band %s-%s"
          % (*os.getloadavg(), cp.adaptive(), fmt(th.adapt_min), fmt(th.adapt_max)))
    head = "%-8s %-6s %-10s %6s  %-20s %-10s %-20s %-20s %-22s" % (
        "program", "size", "phase", "calls", "auto/best phase", "best", "auto/numpy.fill",
        "auto/memset", "after the budget")
    print(head)
    follow: list[tuple[str, float]] = []
    with Buffer(pool_bytes) as pool, Buffer(max(sizes)) as warm:
        for program in a.programs:
            for n in sizes:
                got = program_cells(program, n, names, routines, pool, warm, a.rounds,
                                    a.warm, a.walks, a.calls, parse_size(a.phase_bytes))
                whole = {k: [sum(got["times"][p][k][r] for p in got["times"])
                             for r in range(a.rounds)] for k in names}
                for i, (p, t) in enumerate(got["times"].items()):
                    rs, best = ratios(t, refs)
                    fill = [f / x for f, x in zip(t[FILL], t[AUTO])]
                    mem = [f / x for f, x in zip(t[MEMSET], t[AUTO])]
                    after = "-"
                    if p in got["later"] and got["calls"][i] > got["budget"]:
                        late = got["later"][p]
                        # the best routine of the phase's rest, by its own median
                        rest, _ = ratios(late, refs)
                        m = statistics.median(rest)
                        after = "%s %s" % (q(rest), "ok" if m >= GOAL_FOLLOW else "miss")
                        follow.append(("%s %s %s" % (program, fmt(n), p), m))
                    print("%-8s %-6s %-10s %6d  %-20s %-10s %-20s %-20s %-22s" % (
                        program, fmt(n), p, got["calls"][i], q(rs), best, q(fill), q(mem),
                        after))
                rs, best = ratios(whole, refs)
                fill = [f / x for f, x in zip(whole[FILL], whole[AUTO])]
                mem = [f / x for f, x in zip(whole[MEMSET], whole[AUTO])]
                print("%-8s %-6s %-10s %6s  %-20s %-10s %-20s %-20s" % (
                    program, fmt(n), "whole", "", q(rs), best, q(fill), q(mem)))
                sys.stdout.flush()
    if follow:
        missed = [(c, m) for c, m in follow if m < GOAL_FOLLOW]
        print("after a change, %.1f of the best routine within max(%d calls, clears of %dx "
              "the L3): %d of %d phases; worst %s %.2f" % (
                  GOAL_FOLLOW, BUDGET_CALLS, BUDGET_L3, len(follow) - len(missed),
                  len(follow), *min(follow, key=lambda x: x[1])))
    return 0


def test_relearn_quick(capsys):
    """Smoke: every program at one small size, two rounds, short phases."""
    if not cp.adaptive():
        import pytest
        pytest.skip("adaptive auto is off in this build or configuration")
    assert main(["--sizes", "64K", "--rounds", "2", "--calls", "60", "--pool", "16M",
                 "--warm", "60", "--walks", "1"]) == 0
    out = capsys.readouterr().out
    for program in PROGRAMS:
        assert "%s" % program in out and "whole" in out


if __name__ == "__main__":
    raise SystemExit(main())
