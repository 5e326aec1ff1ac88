"""Programs, not clears: a clear followed by what the program does with the
buffer, timed as one step (``bench --programs``, bench/bench_programs.py).

A clear is rarely the end.  Streaming stores leave what they write out of
the cache; ordinary stores leave it in, for whoever touches it next.  So
``auto`` is judged on whole steps of small programs:

- ``pad``: pad a batch: clear, write the first half of each 4 KiB row, then
  read the whole buffer (a sum), as a data loader and its model do;
- ``scratch``: a scratch buffer: clear, scattered writes (eight 8-byte words
  a page), then a reduction over it all;
- ``pool``: a page pool: clear at release, handed out much later (clear only);
- ``wipe``: wiping a secret: a small buffer that held a key, cleared (clear
  only; 16-256 KiB).

Each in two cases: ``warm`` (the same buffer step after step) and ``cold``
(each step takes the next buffer of a pool of at least 512 MiB and 4x the
last-level cache, so a buffer was last touched a pool ago).  ``pad`` and
``scratch`` are the "then used" cases, ``pool`` and ``wipe`` the
"clear only" ones.

The *mixed* program is a hot scratch buffer and cold pool pages of the same
size, cleared in turn: a step clears the scratch buffer, uses it as
``scratch`` does, then clears the next pool page.  auto is compared there
with the best *per-buffer* choice: every pair of (scratch routine, pool
routine) from the ordinary-store routine, the streaming routine and
numpy.fill.

Candidates: ``auto``; every routine through ``clear(view, method=name)``;
``numpy.fill``; ``ctypes.memset``; and auto with the program's hints,
``hot=True`` ("I will use all of this next") and ``hot=False`` ("not soon"),
which are shown beside auto but are never the best they are compared with.

Timing: in each round every candidate runs, in an order rotated from round
to round, some untimed steps (so that the buffer, and adaptive auto, are in
the state that candidate leaves them in) and then a block of timed steps
(at least ``MIN_BLOCK`` of each, however long a step: the steady state of a
program that repeats its step, not its first steps after another program);
a candidate's figure is the median of its blocks.  The best candidate
is the one with the lowest median; auto's *ratio* is the median over rounds
of the best candidate's block time over auto's block time in the same round
(a change of the machine's load lands on both), and its *spread* the
interquartile range of those per-round ratios.  The verdict is the package's
one rule (``measure.judge_rounds``): a median below the goal is a miss; a
spread that reaches past the goal as far as the median is from it, on both
sides, is "unmeasured, retake", never a pass, until enough rounds bound the
median itself on one side of the goal (``measure.median_bounds``).
"""

from __future__ import annotations

import ctypes
import dataclasses
import statistics
import time
from collections.abc import Callable, Sequence
from typing import Any

from .. import _core
from .._routines import BY_NAME
from .._units import KiB, MiB, format_size
from . import measure as _measure

PAD, SCRATCH, POOL, WIPE = "pad", "scratch", "pool", "wipe"
WORKLOADS = (PAD, SCRATCH, POOL, WIPE)
USED = frozenset((PAD, SCRATCH))
"""Workloads that use what they cleared; the others only clear."""
WIPE_MAX = 256 * KiB
"""A secret is small: wipe runs up to this size."""
ROW = 4 * KiB
"""pad's rows: half of each is written after the clear."""
SCATTER_PER_PAGE = 8
"""scratch's writes: this many 8-byte words per 4 KiB page, at random."""

MIN_BLOCK = 8
"""Steps per timed block, and untimed steps before it, at least, however
long a step: a block is the program's steady state, not the first steps
after the candidate before it left the buffer out of the cache (a 16 MiB
step lasts about a millisecond, so a 0.5 ms target alone gave one untimed
step and one timed step per round).  Adaptive auto also sees each round's
start as a long pause in the program (the other candidates' rounds), and
counts it, up to its cap, as what the program spent after a clear; with one
such pause in 16 steps the median of its latest samples passes it by, as it
does the rare long pause of a real program."""

SIZES = tuple(s * KiB for s in (16, 64, 256)) + tuple(s * MiB for s in (1, 4, 16, 64))
QUICK_SIZES = (64 * KiB, 1 * MiB, 16 * MiB)
MIXED_SIZES = (64 * KiB, 256 * KiB, 1 * MiB, 4 * MiB)
QUICK_MIXED_SIZES = (64 * KiB, 1 * MiB)

#: The goals, by case: auto's ratio to the best candidate.
GOAL = 0.9
GOAL_COLD_USED = 0.75
"""cold, then used: nothing in a clear's own time tells it from clear-only."""
GOAL_HINT = 0.95
"""auto with hot=True, in both used cases."""

AUTO = "auto"
HOT = "auto hot=True"
NOT_SOON = "auto hot=False"
HINTS = (HOT, NOT_SOON)


def case_name(workload: str, scenario: str) -> str:
    """'warm, then used', 'cold, clear only', ...: the four cases of the goals."""
    return "%s, %s" % (scenario, "then used" if workload in USED else "clear only")


def goal_for(workload: str, scenario: str, name: str = AUTO) -> float:
    """auto's goal in a case (hot=False has none: it is shown, not judged)."""
    if name == HOT:
        return GOAL_HINT
    if workload in USED and scenario == _measure.COLD:
        return GOAL_COLD_USED
    return GOAL


@dataclasses.dataclass
class Slot:
    """One buffer of a program: the views each candidate and use needs,
    made once, so that a step pays for none of them."""

    mv: memoryview
    addr: int
    n: int
    u8: Any
    u64: Any
    rows: Any


def _slot(buf: _measure.Buffer, offset: int, n: int) -> Slot:
    u8 = buf.numpy()[offset:offset + n]
    rows = u8.reshape(-1, ROW) if n % ROW == 0 and n >= ROW else u8.reshape(1, -1)
    return Slot(buf.view[offset:offset + n], buf.address + offset, n, u8,
                u8.view("uint64"), rows)


Clear = Callable[[Slot], Any]


def clearer(name: str) -> Clear:
    """The clear of one candidate, as a function of the slot."""
    clear = _core.clear
    if name == AUTO:
        return lambda s: clear(s.mv)
    if name == HOT:
        return lambda s: clear(s.mv, hot=True)
    if name == NOT_SOON:
        return lambda s: clear(s.mv, hot=False)
    if name == _measure.NUMPY_FILL:
        return lambda s: s.u8.fill(0)
    if name == _measure.MEMSET:
        memset = ctypes.memset
        return lambda s: memset(s.addr, 0, s.n)
    if name in BY_NAME:
        return lambda s: clear(s.mv, method=name)  # type: ignore[arg-type]
    raise ValueError("unknown candidate %r" % (name,))


def hints_available() -> bool:
    """Does clear() take hot=True / hot=False (the whole-buffer hints)?"""
    try:
        _core.clear(bytearray(16), hot=True)
        return True
    except (TypeError, ValueError):
        return False


def use(workload: str, n: int, seed: int = 15) -> Callable[[Slot], Any]:
    """What the program does with a cleared slot of n bytes."""
    if workload == PAD:
        half = min(ROW, n) // 2

        def pad(s: Slot) -> Any:
            s.rows[:, :half] = 1
            return s.u64.sum()
        return pad
    if workload == SCRATCH:
        import numpy as np

        words = n // 8
        count = max(1, n // 4096 * SCATTER_PER_PAGE)
        idx = np.random.default_rng(seed).integers(0, words, count)

        def scratch(s: Slot) -> Any:
            s.u64[idx] = 7
            return s.u64.sum()
        return scratch
    if workload == WIPE:
        secret = bytes(range(64))

        def wipe(s: Slot) -> None:
            s.mv[:64] = secret
        return wipe
    if workload == POOL:
        return lambda s: None
    raise ValueError("unknown workload %r; known: %s" % (workload, ", ".join(WORKLOADS)))


def candidate_names(hints: bool = True) -> list[str]:
    """auto, every usable routine, numpy.fill, memset (and the hints)."""
    names = [AUTO] + list(_core.methods()) + [_measure.NUMPY_FILL, _measure.MEMSET]
    if hints and hints_available():
        names[1:1] = list(HINTS)
    return names


def _step(workload: str, clear: Clear, n: int) -> Callable[[Slot], None]:
    u = use(workload, n)
    if workload == POOL:
        return clear

    def step(s: Slot) -> None:
        if workload == WIPE:
            u(s)
            clear(s)
        else:
            clear(s)
            u(s)
    return step


@dataclasses.dataclass
class Cell:
    """One (workload, scenario, size): seconds per step per candidate and
    round, and auto's ratios."""

    workload: str
    scenario: str
    size: int
    times: dict[str, list[float]]
    reference: list[str]
    """The candidates 'best' is chosen among (not auto and its hints)."""

    def median(self, name: str) -> float:
        return statistics.median(self.times[name])

    @property
    def best(self) -> str:
        return min(self.reference, key=self.median)

    def ratio(self, name: str = AUTO) -> float:
        """The median over rounds of the best candidate's block time over
        name's block time in the same round: 1.0 is as fast."""
        return statistics.median(self.round_ratios(name))

    def round_ratios(self, name: str = AUTO) -> list[float]:
        """Per round: the best candidate's block (best by median) over name's."""
        best = self.times[self.best]
        return [b / t for b, t in zip(best, self.times[name])]

    def spread(self, name: str = AUTO) -> tuple[float, float]:
        """(Q1, Q3) of the per-round ratios."""
        return _measure.quartiles(self.round_ratios(name))

    def judge(self, name: str = AUTO) -> _measure.GoalVerdict:
        """name's ratio to the best candidate, judged against its goal."""
        return _measure.judge_rounds(self.round_ratios(name),
                                     goal_for(self.workload, self.scenario, name), name,
                                     "the best (%s)" % self.best)

    def verdict(self, name: str = AUTO) -> str:
        """'ok', 'miss' or 'unmeasured, retake' (_measure.GoalVerdict.outcome)."""
        return self.judge(name).outcome

    @property
    def case(self) -> str:
        return case_name(self.workload, self.scenario)


def _time_block(step: Callable[[Slot], None], slots: Sequence[Slot]) -> float:
    clock = time.perf_counter_ns
    t0 = clock()
    for s in slots:
        step(s)
    return (clock() - t0) / 1e9 / len(slots)


class Place:
    """Where a program's steps land: one slot (warm) or the slots of a pool,
    walked in order and shared by every candidate (cold)."""

    def __init__(self, buf: _measure.Buffer, size: int, scenario: str,
                 warm_offset: int = 0) -> None:
        self.scenario = scenario
        if scenario == _measure.WARM:
            self.slots = [_slot(buf, warm_offset, size)]
            self.walk = None
        else:
            self.walk = _measure._Walk(buf.size, size)
            self.slots = [_slot(buf, i * self.walk.stride, size)
                          for i in range(self.walk.slots)]

    def take(self, k: int) -> list[Slot]:
        if self.walk is None:
            return self.slots * k
        return [self.slots[i // self.walk.stride] for i in self.walk.take(k)]

    def close(self) -> None:
        for s in self.slots:
            s.mv.release()
            s.u8 = s.u64 = s.rows = None    # the mapping can be closed now
        self.slots = []


def _measure_steps(steps: dict[str, Callable[..., None]], take: Callable[[int], list[Any]],
                   rounds: int, target_s: float, learn: int) -> dict[str, list[float]]:
    """Interleaved rounds of (untimed steps, timed block) per candidate."""
    names = list(steps)
    # auto learns from its own clears, as a program's loop would let it
    for name in names:
        if name.startswith(AUTO):
            for s in take(learn):
                steps[name](s)
    probe = min(_time_block(steps[n], take(1)) for n in names[:3])
    k = max(MIN_BLOCK, min(100_000, int(target_s / max(probe, 1e-9))))
    untimed = min(k, 16)
    times: dict[str, list[float]] = {n: [] for n in names}
    for r in range(rounds):
        shift = r % len(names)
        for name in names[shift:] + names[:shift]:
            step = steps[name]
            for s in take(untimed):
                step(s)
            times[name].append(_time_block(step, take(k)))
    return times


def measure_cell(buf: _measure.Buffer, workload: str, scenario: str, size: int,
                 names: Sequence[str], *, rounds: int = 15, target_s: float = 0.0005,
                 learn: int = _measure.ADAPT_WARMUP) -> Cell:
    place = Place(buf, size, scenario)
    try:
        steps = {n: _step(workload, clearer(n), size) for n in names}
        times = _measure_steps(steps, place.take, rounds, target_s, learn)
    finally:
        place.close()
    ref = [n for n in names if not n.startswith(AUTO)]
    return Cell(workload, scenario, size, times, ref)


def mixed_pairs() -> list[tuple[str, str]]:
    """(scratch buffer's, pool page's) candidates of the best per-buffer choice."""
    th = _core.thresholds()
    each = list(dict.fromkeys([th.temporal, th.streaming, _measure.NUMPY_FILL]))
    return [(a, b) for a in each for b in each]


def pair_name(a: str, b: str) -> str:
    return "%s + %s" % (a, b)


def measure_mixed(buf: _measure.Buffer, size: int, *, rounds: int = 15,
                  target_s: float = 0.0005, learn: int = _measure.ADAPT_WARMUP) -> Cell:
    """The hot scratch buffer and cold pool pages of one size, in turn."""
    hot_buf = _measure.Buffer(size)
    pool = Place(buf, size, _measure.COLD)
    hot = Place(hot_buf, size, _measure.WARM)
    u = use(SCRATCH, size)

    def step_of(a: Clear, b: Clear) -> Callable[[tuple[Slot, Slot]], None]:
        def step(pair: tuple[Slot, Slot]) -> None:
            h, p = pair
            a(h)
            u(h)
            b(p)
        return step

    steps = {AUTO: step_of(clearer(AUTO), clearer(AUTO))}
    for a, b in mixed_pairs():
        steps[pair_name(a, b)] = step_of(clearer(a), clearer(b))
    h0 = hot.slots[0]

    def take(k: int) -> list[tuple[Slot, Slot]]:
        return [(h0, p) for p in pool.take(k)]
    try:
        times = _measure_steps(steps, take, rounds, target_s, learn)
    finally:
        pool.close()
        hot.close()
        hot_buf.close()
    return Cell("mixed", "hot + cold", size, times, [n for n in times if n != AUTO])


@dataclasses.dataclass
class Result:
    cells: list[Cell]
    mixed: list[Cell]
    settings: dict[str, Any]


def run(sizes: Sequence[int] = SIZES, workloads: Sequence[str] = WORKLOADS, *,
        scenarios: Sequence[str] = _measure.SCENARIOS, mixed_sizes: Sequence[int] = MIXED_SIZES,
        rounds: int = 15, target_s: float = 0.0005, names: Sequence[str] | None = None,
        progress: Callable[[int, int, str], None] | None = None) -> Result:
    """Every workload, scenario and size, then the mixed program."""
    if not _measure.have_numpy():
        raise ValueError("the program benchmark needs numpy (its programs use it)")
    names = list(names) if names is not None else candidate_names()
    plan = [(w, sc, n) for w in workloads for n in sorted(sizes) for sc in scenarios
            if not (w == WIPE and n > WIPE_MAX)]
    plan_mixed = sorted(mixed_sizes)
    total = len(plan) + len(plan_mixed)
    pool_bytes = max(_measure.cold_pool_size(), max(list(sizes) + list(plan_mixed) or [0]))
    cells, mixed = [], []
    with _measure.Buffer(pool_bytes) as buf:
        for i, (w, sc, n) in enumerate(plan):
            if sc == _measure.COLD and not _measure.cold_measurable(n, buf.size):
                continue
            cells.append(measure_cell(buf, w, sc, n, names, rounds=rounds, target_s=target_s))
            if progress is not None:
                progress(i + 1, total, "%s %s %s" % (w, sc, format_size(n)))
        for j, n in enumerate(plan_mixed):
            mixed.append(measure_mixed(buf, n, rounds=rounds, target_s=target_s))
            if progress is not None:
                progress(len(plan) + j + 1, total, "mixed %s" % format_size(n))
    return Result(cells, mixed, {"rounds": rounds, "target_s": target_s,
                                 "cold_pool": pool_bytes, "names": names})


# ---- presentation -------------------------------------------------------


def _fmt(cell: Cell, name: str = AUTO) -> str:
    if name not in cell.times:
        return "-"
    q1, q3 = cell.spread(name)
    if name == NOT_SOON or (name == HOT and cell.workload not in USED):
        # no goal: what the hint costs a program that does not mean it
        return "%.2f [%.2f-%.2f]" % (cell.ratio(name), q1, q3)
    return "%.2f [%.2f-%.2f]%s" % (cell.ratio(name), q1, q3, cell.judge(name).mark())


def table_rows(res: Result) -> tuple[list[str], list[list[str]]]:
    """One row per workload and size: auto (and the hints) warm and cold."""
    hints = [w for w in HINTS if res.cells and w in res.cells[0].times]
    head = ["workload", "size"]
    for sc in _measure.SCENARIOS:
        head += ["%s auto" % sc] + ["%s %s" % (sc, w.split(" ", 1)[1]) for w in hints] + \
                ["%s best" % sc]
    by = {(c.workload, c.size, c.scenario): c for c in res.cells}
    rows = []
    for (w, n) in dict.fromkeys((c.workload, c.size) for c in res.cells):
        row = [w, format_size(n)]
        for sc in _measure.SCENARIOS:
            c = by.get((w, n, sc))
            if c is None:
                row += ["-"] * (2 + len(hints))
                continue
            row += [_fmt(c)] + [_fmt(c, x) for x in hints] + [c.best]
        rows.append(row)
    return head, rows


def mixed_rows(res: Result) -> tuple[list[str], list[list[str]]]:
    head = ["size", "auto / best pair", "best pair (scratch + pool)", "always temporal",
            "always streaming"]
    th = _core.thresholds()
    rows = []
    for c in res.mixed:
        t, s = pair_name(th.temporal, th.temporal), pair_name(th.streaming, th.streaming)
        rows.append([format_size(c.size), _fmt(c), c.best,
                     "%.2f" % c.ratio(t) if t in c.times else "-",
                     "%.2f" % c.ratio(s) if s in c.times else "-"])
    return head, rows


def goal_rows(res: Result) -> tuple[list[str], list[list[str]], list[str]]:
    """By case and size: auto's worst workload, its verdict; and what to do."""
    cases = ("warm, then used", "cold, then used", "warm, clear only", "cold, clear only")
    sizes = sorted({c.size for c in res.cells})
    head = ["case (goal)"] + [format_size(n) for n in sizes]
    rows, advice = [], []
    noisy = missed = False
    for case in cases:
        sc, _ = case.split(", ", 1)
        goal = GOAL_COLD_USED if case == "cold, then used" else GOAL
        row = ["%s (%.2f)" % (case, goal)]
        for n in sizes:
            cs = [c for c in res.cells if c.size == n and c.case == case]
            if not cs:
                row.append("-")
                continue
            worst = min(cs, key=lambda c: c.ratio())
            v = worst.judge()
            noisy |= v.outcome == _measure.UNMEASURED
            missed |= v.outcome == _measure.MISS
            row.append("%.2f%s" % (v.ratio, v.mark()))
        rows.append(row)
    if any(HOT in c.times for c in res.cells):
        for sc in _measure.SCENARIOS:
            row = ["%s, then used, hot=True (%.2f)" % (sc, GOAL_HINT)]
            for n in sizes:
                cs = [c for c in res.cells if c.size == n and c.scenario == sc
                      and c.workload in USED and HOT in c.times]
                if not cs:
                    row.append("-")
                    continue
                worst = min(cs, key=lambda c: c.ratio(HOT))
                v = worst.judge(HOT)
                noisy |= v.outcome == _measure.UNMEASURED
                missed |= v.outcome == _measure.MISS
                row.append("%.2f%s" % (v.ratio, v.mark()))
            rows.append(row)
    for c in res.mixed:
        outcome = c.verdict()
        noisy |= outcome == _measure.UNMEASURED
        missed |= outcome == _measure.MISS and 64 * KiB <= c.size <= 4 * MiB
    if noisy:
        advice.append("?: unmeasured, retake: the rounds reach past the goal as far as "
                      "their median is from it, on both sides, and are too few to bound "
                      "the median on one side (or there were fewer than %d), so they "
                      "cannot tell; not a pass; rerun with more rounds (--repeat) on a "
                      "quieter machine" % _measure.MIN_ROUNDS)
    if missed:
        advice.append("miss: the median of the rounds is below the goal; run "
                      "`python -m clearpages "
                      "calibrate` (auto then starts from this machine's crossovers) and "
                      "bench again; if it stays, report it with this table")
    if not noisy and not missed:
        advice.append("every goal met")
    return head, rows, advice


def report(res: Result, out: Any) -> None:
    from .output import say, table

    say("auto's ratio to the best candidate (best time / auto's time; 1.00 is as fast), "
        "[interquartile range of the per-round ratio]; median of %d interleaved rounds; "
        "cold: a different buffer each step, walking a %s pool"
        % (res.settings["rounds"], format_size(res.settings["cold_pool"])), out)
    head, rows = table_rows(res)
    # Where the terminal is narrow the hints' columns go first (the goals
    # below judge hot=True), then the best candidates' names.
    hints = [i for i, h in enumerate(head) if "hot=" in h]
    best = [i for i, h in enumerate(head) if h.endswith(" best")]
    table(rows, head, out, optional=hints + best)
    if res.mixed:
        print(file=out)
        say("mixed: a hot scratch buffer (cleared, written, summed) and a cold pool page "
            "of the same size cleared in turn; auto against the best per-buffer pair", out)
        head, rows = mixed_rows(res)
        table(rows, head, out, optional=(3, 4))
    head, rows, advice = goal_rows(res)
    print(file=out)
    say("goals: auto's worst workload per case and size (the goal in brackets)", out)
    table(rows, head, out)
    for a in advice:
        say(a, out)
