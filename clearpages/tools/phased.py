"""Run phased programs (``generated``) with every candidate and judge auto.

Each program is timed whole, once per candidate per round, in one process:
in each round every candidate runs the program once, in an order rotated
from round to round, so that a change of the machine's load lands on all of
them.  Before each run the program's buffers are already allocated and
prefaulted, and the cache is put in the same state for every candidate (a
read of twice the last-level cache of the pool).  Each phase is timed on
its own within the run, so that besides the whole program there is the
*per-phase oracle*: for each phase the fastest fixed choice's time on it,
summed per round.  "Fastest" is told by the median over the other rounds
(``ProgramResult.fastest``), so that a round's noise does not pick the
best that round is compared with.

Candidates:

- ``auto``: the learner forgotten before each run (``_adapt.reset``), so
  it starts as a fresh process would;
- ``auto carried``: the learner as the runs before left it (in a program's
  first round, possibly the previous program's): judged on what it carries;
- ``auto static``: adaptation off during the run (``set_adaptive(False)``,
  what ``CLEARPAGES_ADAPT=0`` runs);
- the *fixed choices*: every usable routine through ``clear(view,
  method=name)`` (with ``quick``: the temporal and streaming roles and
  ``libc``), ``numpy.fill`` (``a.fill(0)`` on a numpy view) and
  ``ctypes.memset``;
- ``work only``: no clear at all, the program's own time (its work's share).

Every ratio is per round (a candidate's time over auto's in the same round)
and judged by the package's one rule, ``measure.judge_rounds``.  A figure
over many programs (their median, their 10th percentile) is taken round by
round, then judged the same way.  A generated program whose verdict
against a rival is in doubt after its rounds (``doubtful``: auto's or the
twin's against numpy.fill or ctypes.memset not pinned to one side of the
goal by the median's bounds, auto's ok or not) is retaken at once:
``RETAKE_ROUNDS`` rounds more, every candidate, again while it stays in
doubt, up to ``RETAKE_MOST`` rounds in all; its verdicts are over all of
them, and the figures over programs keep every program's first rounds.
A verdict near the goal is retaken whichever side of it the median fell
on: retaking only the misses would let noise turn some of them into
passes and none of the passes into misses.
"""

from __future__ import annotations

import collections
import ctypes
import dataclasses
import functools
import gc
import math
import random
import statistics
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from .. import _adapt, _core
from .._units import KiB, MiB, format_size
from . import generated as G, measure as _measure
from .programs import Slot, clearer

AUTO = "auto"
CARRIED = "auto carried"
STATIC = "auto static"
WORK_ONLY = "work only"
AUTOS = (AUTO, CARRIED, STATIC)
TWIN = "numpy.fill again"
"""numpy.fill once more, as a candidate of its own: two candidates running
identical code, whose ratio is what this run's noise alone does to a
verdict (printed beside the goals; in neither the oracle nor the best)."""
NOT_FIXED = AUTOS + (TWIN, WORK_ONLY)
"""The candidates that are not a fixed choice of routine."""

ORACLE = "the per-phase oracle"
ROLES_ORACLE = "the roles' per-phase oracle"
"""The same over the two routines auto chooses between only: what the
learner could reach (the rest of the gap is which temporal or streaming
routine, not which kind of stores)."""
BEST = "the best fixed choice"

#: The goals over generated programs (auto's ratio, per round).
GOAL_RIVAL = 0.95
"""In every program, against numpy.fill and against ctypes.memset."""
GOAL_MEDIAN = 0.97
"""The median over programs, against the per-phase oracle."""
GOAL_P10 = 0.90
"""The 10th percentile over programs, against the per-phase oracle."""
RIVALS = (_measure.NUMPY_FILL, _measure.MEMSET)
RIVAL_VERDICTS = tuple((AUTO, r) for r in RIVALS) + ((TWIN, _measure.NUMPY_FILL),)
"""The every-program verdicts a retake is for: auto's against each rival,
and the twin's against numpy.fill."""

ROUNDS = 5
QUICK_ROUNDS = 4
RETAKE_ROUNDS = 4
"""The rounds added at a time to a generated program whose verdict against
a rival is in doubt (see doubtful())."""
RETAKE_MOST = 23
"""The most rounds retakes bring a program to (from 3: five retakes of 4);
there the median decides, pinned or not (the median's 90% bounds are then
its 8th and 16th of 23 rounds)."""


def retake_most(rounds: int, retake: int) -> int:
    """The rounds a run of ``rounds`` rounds retakes ``retake`` at a time
    may bring a program to: RETAKE_MOST, or one retake where the rounds
    alone come near it; ``rounds`` where nothing is retaken."""
    return max(RETAKE_MOST, rounds + retake) if retake else rounds

SHORT_PHASE_S = 0.01
"""Phases shorter than this are left out of the tables of where auto loses
(kept in the JSON): a scheduler's tick or another process's burst is as
long as they are."""

FLUSH_MIN = 64 * MiB
"""Before each run the pool is read over twice the last-level cache, at
least this much: every candidate starts from the same cold cache."""


def candidate_names(quick: bool = False) -> list[str]:
    th = _core.thresholds()
    usable = _core.methods()
    if quick:
        routines = [m for m in dict.fromkeys((th.temporal, th.streaming, "libc"))
                    if m in usable]
    else:
        routines = list(usable)
    return list(AUTOS) + routines + list(RIVALS) + [TWIN, WORK_ONLY]


def fixed_names(names: Sequence[str]) -> list[str]:
    """The fixed choices among names: what the oracle and 'best' pick from."""
    return [n for n in names if n not in NOT_FIXED]


# ---- memory -------------------------------------------------------------------


def _make_slot(buf: _measure.Buffer, offset: int, n: int) -> Slot:
    u8 = buf.numpy()[offset:offset + n]
    whole = n - n % G.ROW
    rows = u8[:whole].reshape(-1, G.ROW) if whole else u8.reshape(1, -1)
    return Slot(buf.view[offset:offset + n], buf.address + offset, n, u8,
                u8[:n - n % 8].view("uint64"), rows)


def _drop(slots: Sequence[Slot]) -> None:
    for s in slots:
        s.mv.release()
        s.u8 = s.u64 = s.rows = None


class Pool:
    """The pool walks take their pages from, shared by every program and
    candidate; one cursor, so a page was last touched a pool ago."""

    def __init__(self, size: int, l3: int) -> None:
        self.buf = _measure.Buffer(size)
        self.size = size
        self.flush_bytes = min(size, max(FLUSH_MIN, 2 * l3)) // 8 * 8
        self.cursor = 0
        self._slots: dict[int, tuple[int, list[Slot | None]]] = {}
        self._u64 = self.buf.numpy()[:size - size % 8].view("uint64")

    def take(self, n: int, k: int) -> list[Slot]:
        """The next k pages of n bytes from the cursor (their views made the
        first time each is taken, never while a phase is timed)."""
        if n not in self._slots:
            stride, pages = G.pool_geometry(self.size, n)
            self._slots[n] = (stride, [None] * pages)
        stride, slots = self._slots[n]
        first = -(-self.cursor // stride) % len(slots)
        out = []
        for i in range(k):
            j = (first + i) % len(slots)
            s = slots[j]
            if s is None:
                s = slots[j] = _make_slot(self.buf, j * stride, n)
            out.append(s)
        self.cursor = ((first + k) % len(slots)) * stride
        return out

    def flush(self) -> None:
        """Read flush_bytes of the pool from the cursor (then cold for all)."""
        words = self.flush_bytes // 8
        start = (self.cursor // 8) % max(1, len(self._u64) - words + 1)
        self._u64[start:start + words].sum()
        self.cursor = (start + words) * 8 % self.size

    def release(self) -> None:
        """Forget the pages of each size (a program's sizes are its own)."""
        for _, slots in self._slots.values():
            _drop([s for s in slots if s is not None])
        self._slots.clear()

    def close(self) -> None:
        self.release()
        self._u64 = None
        self.buf.close()


# ---- a program, ready to run ------------------------------------------------------

Clear = Callable[[Slot], Any]
Work = Callable[[Slot, int], Any]


def _multipliers(rng: Any, calls: int, sigma: float) -> list[float]:
    """Per step: exp(sigma Z - sigma^2 / 2), mean 1."""
    if sigma <= 0:
        return [1.0] * calls
    return [float(x) for x in rng.lognormal(-sigma * sigma / 2, sigma, calls)]


class _WorkMaker:
    """The work of one phase on buffers of each size, drawn once from the
    phase's seed (the same steps for every candidate)."""

    def __init__(self, program: G.Program, ph: G.Phase, other: Any) -> None:
        import numpy as np

        self.ph = ph
        rng = np.random.default_rng([ph.seed, 2024])
        self.mult = _multipliers(rng, ph.calls, ph.noise)
        self.u = [float(x) for x in rng.random(ph.calls)]
        kinds = rng.integers(0, len(G.MIXED_OF), ph.calls)
        self.kinds = [G.MIXED_OF[int(k)] for k in kinds] if ph.work == G.MIXED else None
        self.rng = rng
        self.other = other
        self.other_cursor = [0]
        self.by_size: dict[int, Work] = {}

    def for_size(self, n: int) -> Work | None:
        if self.ph.work == G.NONE:
            return None
        if n not in self.by_size:
            self.by_size[n] = self._make(n)
        return self.by_size[n]

    def _make(self, n: int) -> Work:
        import numpy as np

        ph, mult, u = self.ph, self.mult, self.u
        w = G.step_work(ph, n)
        words = max(1, n // 8)
        # writes: a window of a long enough array of random word indices
        counts = [max(1, min(words, G.WRITES_MAX, int(w.words * m))) for m in mult]
        idx = np.random.default_rng([ph.seed, n]).integers(0, words, 2 * max(counts))
        starts = [int(x * (len(idx) - c)) for x, c in zip(u, counts)]
        row = min(n, G.ROW)
        heads = [max(8, min(row, int(w.head * m) // 8 * 8)) for m in mult]
        sums = [max(1, int(w.sum_words * m)) for m in mult]
        reads = [max(1, int(w.read_words * m)) for m in mult]
        other = self.other
        ocur = self.other_cursor
        # sleeps shorter than SLEEP_MIN_S sleep that long, that much less often
        sleeps = []
        for m, x in zip(mult, u):
            t = w.seconds * m
            sleeps.append(t if t >= G.SLEEP_MIN_S else
                          G.SLEEP_MIN_S if x < t / G.SLEEP_MIN_S else 0.0)
        sleep = time.sleep

        def writes(s: Slot, i: int) -> Any:
            sel = idx[starts[i]:starts[i] + counts[i]]
            s.u64[sel] = 7
            return s.u64[sel].sum()

        def pad(s: Slot, i: int) -> Any:
            s.rows[:, :heads[i]] = 1
            return s.u64.sum()

        def total(s: Slot, i: int) -> Any:
            full, rest = divmod(sums[i], words)
            for _ in range(full):
                s.u64.sum()
            return s.u64[:rest].sum()

        def read(s: Slot, i: int) -> None:
            k = reads[i]
            have = len(other)
            while k > 0:
                c = ocur[0]
                take = min(k, have - c)
                other[c:c + take].sum()
                k -= take
                ocur[0] = (c + take) % have

        def nap(s: Slot, i: int) -> None:
            if sleeps[i]:
                sleep(sleeps[i])

        table = {G.WRITES: writes, G.PAD: pad, G.SUM: total, G.READ: read, G.SLEEP: nap}
        if self.kinds is None:
            return table[ph.work]
        picks = [table[k] for k in self.kinds]

        def mixed(s: Slot, i: int) -> Any:
            return picks[i](s, i)
        return mixed


class Running:
    """A program's memory, allocated and prefaulted once, and its phases
    ready to run with any candidate's clear."""

    def __init__(self, program: G.Program, pool: Pool) -> None:
        self.program = program
        self.pool = pool
        self.bufs = [_measure.Buffer(n) for n in program.buffers]
        self.slots = [_make_slot(b, 0, n) for b, n in zip(self.bufs, program.buffers)]
        self.other_buf = _measure.Buffer(program.other) if program.other else None
        other = (self.other_buf.numpy()[:program.other // 8 * 8].view("uint64")
                 if self.other_buf else None)
        self.foreign_buf = _measure.Buffer(program.foreign) if program.foreign else None
        self.foreign_slot = (_make_slot(self.foreign_buf, 0, program.foreign)
                             if self.foreign_buf else None)
        self.work = [_WorkMaker(program, ph, other) for ph in program.phases]
        self.orders: list[list[int]] = []
        import numpy as np

        for ph in program.phases:
            k = len(ph.buffers)
            if ph.place == G.SEVERAL and ph.random_order:
                order = np.random.default_rng([ph.seed, 7]).integers(0, k, ph.calls)
                self.orders.append([int(x) for x in order])
            else:
                self.orders.append([i % max(k, 1) for i in range(ph.calls)])

    def foreign(self, ph: G.Phase) -> Callable[[], Any] | None:
        if not ph.foreign or self.foreign_slot is None:
            return None
        s = self.foreign_slot
        if ph.foreign == G.FOREIGN_NUMPY:
            return lambda: s.u8.fill(0)
        if ph.foreign == G.FOREIGN_MEMSET:
            memset = ctypes.memset
            return lambda: memset(s.addr, 0, s.n)
        th = _core.thresholds()
        name = th.temporal if ph.foreign == G.FOREIGN_TEMPORAL else th.streaming
        clear = _core.clear
        return lambda: clear(s.mv, method=name)  # type: ignore[arg-type]

    def run(self, clear: Clear | None) -> tuple[list[float], list[float]]:
        """(elapsed, CPU) seconds per phase, summed over the program's passes."""
        wall = [0.0] * len(self.program.phases)
        cpu = [0.0] * len(wall)
        for _ in range(self.program.passes):
            for k in range(len(wall)):
                w, c = self._phase(k, clear)
                wall[k] += w
                cpu[k] += c
        return wall, cpu

    def _phase(self, k: int, clear: Clear | None) -> tuple[float, float]:
        """(elapsed, CPU) seconds of phase k: the CPU time is the running
        thread's, which a preemption by another process does not lengthen."""
        ph = self.program.phases[k]
        wm = self.work[k]
        foreign = self.foreign(ph)
        every = max(1, ph.foreign_every)
        clock = time.perf_counter_ns
        cpu = time.thread_time_ns
        if clear is None:
            def clear(s: Slot) -> None:
                return None
        if ph.place == G.THREADS:
            return self._threads(ph, wm, clear, foreign, every)
        if ph.place == G.HOT_POOL:
            hot = self.slots[ph.buffers[0]]
            work = wm.for_size(hot.n)
            pages = self.pool.take(ph.page, ph.calls)
            c0, t0 = cpu(), clock()
            for i, p in enumerate(pages):
                clear(hot)
                if work is not None:
                    work(hot, i)
                clear(p)
                if foreign is not None and i % every == 0:
                    foreign()
            return (clock() - t0) / 1e9, (cpu() - c0) / 1e9
        if ph.place == G.WALK:
            seq = self.pool.take(ph.page, ph.calls)
            work = wm.for_size(ph.page)
            works = None
        else:
            own = [self.slots[b] for b in ph.buffers]
            seq = [own[j] for j in self.orders[k]]
            made = {s.n: wm.for_size(s.n) for s in own}
            works = made if len(made) > 1 else None
            work = next(iter(made.values()))
        if work is None and foreign is None:
            c0, t0 = cpu(), clock()
            for s in seq:
                clear(s)
            return (clock() - t0) / 1e9, (cpu() - c0) / 1e9
        c0, t0 = cpu(), clock()
        for i, s in enumerate(seq):
            clear(s)
            w = work if works is None else works[s.n]
            if w is not None:
                w(s, i)
            if foreign is not None and i % every == 0:
                foreign()
        return (clock() - t0) / 1e9, (cpu() - c0) / 1e9

    def _threads(self, ph: G.Phase, wm: _WorkMaker, clear: Clear,
                 foreign: Callable[[], Any] | None, every: int) -> tuple[float, float]:
        """Both threads from the same start; the CPU time is the longer
        thread's own."""
        a, b = (self.slots[i] for i in ph.buffers)
        go = threading.Barrier(3)
        spent = [0, 0]

        def body(s: Slot, lead: bool) -> None:
            work = wm.for_size(s.n)
            go.wait()
            c0 = time.thread_time_ns()
            for i in range(ph.calls):
                clear(s)
                if work is not None:
                    work(s, i)
                if lead and foreign is not None and i % every == 0:
                    foreign()
            spent[lead] = time.thread_time_ns() - c0

        threads = [threading.Thread(target=body, args=(a, True)),
                   threading.Thread(target=body, args=(b, False))]
        for t in threads:
            t.start()
        t0 = time.perf_counter_ns()
        go.wait()
        for t in threads:
            t.join()
        return (time.perf_counter_ns() - t0) / 1e9, max(spent) / 1e9

    def close(self) -> None:
        _drop(self.slots)
        if self.foreign_slot is not None:
            _drop([self.foreign_slot])
        self.work = []
        for b in self.bufs + [x for x in (self.other_buf, self.foreign_buf) if x]:
            b.close()
        self.bufs = []
        self.pool.release()


# ---- candidates -------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Candidate:
    name: str
    clear: Clear | None
    before: Callable[[], None] | None = None
    after: Callable[[], None] | None = None


def candidate(name: str) -> Candidate:
    if name == AUTO:
        return Candidate(name, clearer(AUTO), before=_adapt.reset)
    if name == CARRIED:
        return Candidate(name, clearer(AUTO))
    if name == STATIC:
        was = [True]

        def off() -> None:
            was[0] = _core.adaptive()
            _core.set_adaptive(False)

        def back() -> None:
            _core.set_adaptive(was[0])
        return Candidate(name, clearer(AUTO), before=off, after=back)
    if name == WORK_ONLY:
        return Candidate(name, None)
    if name == TWIN:
        return Candidate(name, clearer(_measure.NUMPY_FILL))
    return Candidate(name, clearer(name))


def run_once(running: Running, cand: Candidate) -> tuple[list[float], list[float]]:
    """One run of the program with cand, from the same cache state as any:
    (elapsed, CPU) seconds per phase."""
    if cand.before is not None:
        cand.before()
    running.pool.flush()
    gc.disable()
    try:
        return running.run(cand.clear)
    finally:
        gc.enable()
        if cand.after is not None:
            cand.after()


# ---- results ----------------------------------------------------------------------


CPU, WALL = "cpu", "wall"
CLOCKS = (CPU, WALL)
"""What a phase's time is: the CPU time of the thread that ran it (the
longer of two threads), or the elapsed time.  CPU time leaves out the time
the process was preempted (on a shared machine, spikes of tens of ms land on
phases of a few ms) and the time it slept (a sleep still lets other
processes evict the cache, which stays in the figure)."""


@dataclasses.dataclass
class ProgramResult:
    """One program: seconds per phase, per round, per candidate, by the
    clock judged on (``times``) and by the other one (``other``)."""

    program: G.Program
    times: dict[str, list[list[float]]]
    fixed: list[str]
    wall_s: float = 0.0
    clock: str = CPU
    other: dict[str, list[list[float]]] = dataclasses.field(default_factory=dict)
    roles: tuple[str, ...] = ()
    """The two routines auto chooses between (temporal, streaming)."""
    retaken: int = 0
    """Rounds added after the first ones found a verdict in doubt (the last
    ``retaken`` of ``rounds``)."""

    @property
    def rounds(self) -> int:
        return min(len(v) for v in self.times.values()) if self.times else 0

    def first(self) -> ProgramResult:
        """The result as it stood before the retake (its first rounds)."""
        if not self.retaken:
            return self
        keep = self.rounds - self.retaken
        return dataclasses.replace(
            self, times={k: v[:keep] for k, v in self.times.items()},
            other={k: v[:keep] for k, v in self.other.items()}, retaken=0)

    def totals(self, name: str) -> list[float]:
        return [sum(r) for r in self.times[name]]

    def phase(self, name: str, k: int) -> list[float]:
        return [r[k] for r in self.times[name]]

    def _phase_of(self, name: str, *, k: int) -> list[float]:
        return self.phase(name, k)

    def phase_best(self, k: int) -> str:
        """The fixed choice fastest on phase k (median over rounds)."""
        return min(self.fixed, key=lambda n: statistics.median(self.phase(n, k)))

    def best(self) -> str:
        """The fixed choice fastest on the whole program."""
        return min(self.fixed, key=lambda n: statistics.median(self.totals(n)))

    def fastest(self, series: Callable[[str], list[float]],
                among: Sequence[str] | None = None) -> list[float]:
        """Per round r: the time in round r of the fixed choice whose median
        over the *other* rounds is lowest (over all of them when there is
        one round).  So a round's own noise never picks the best it is
        compared with: a minimum over many near-tied candidates, taken on
        the rounds it then scores, would flatter the best by the noise."""
        names = [n for n in (among or self.fixed) if n in self.times]
        data = {n: series(n) for n in names}
        out = []
        for r in range(self.rounds):
            def others(n: str, r: int = r) -> float:
                xs = [x for i, x in enumerate(data[n]) if i != r] or data[n]
                return statistics.median(xs)
            out.append(data[min(names, key=others)][r])
        return out

    def reference(self, ref: str) -> list[float]:
        """Per round: the oracle's, the best fixed choice's or a candidate's time."""
        if ref in (ORACLE, ROLES_ORACLE):
            among = self.roles if ref == ROLES_ORACLE and self.roles else None
            per_phase = [self.fastest(functools.partial(self._phase_of, k=k), among)
                         for k in range(len(self.program.phases))]
            return [sum(p[r] for p in per_phase) for r in range(self.rounds)]
        if ref == BEST:
            return self.fastest(self.totals)
        return self.totals(ref)

    def ratios(self, name: str, ref: str) -> list[float]:
        """Per round: ref's time over name's (1.0: as fast; above: faster)."""
        return [a / b if b > 0 else math.nan
                for a, b in zip(self.reference(ref), self.totals(name))]

    def phase_ratios(self, name: str, k: int) -> list[float]:
        """Per round: phase k's best fixed choice's time over name's."""
        best = self.fastest(functools.partial(self._phase_of, k=k))
        return [a / b if b > 0 else math.nan for a, b in zip(best, self.phase(name, k))]

    def judge(self, name: str, ref: str, goal: float) -> _measure.GoalVerdict:
        return _measure.judge_rounds(self.ratios(name, ref), goal, name, ref)

    def judge_phase(self, name: str, k: int) -> _measure.GoalVerdict:
        ph = self.program.phases[k]
        return _measure.judge_rounds(self.phase_ratios(name, k), ph.goal or G.GOAL_CELL,
                                     name, "the phase's best (%s)" % self.phase_best(k))

    def work_share(self, k: int) -> float | None:
        """The work's time over the clears' on phase k (from 'work only'
        against the phase's best fixed choice), or None where not measured."""
        if WORK_ONLY not in self.times:
            return None
        work = statistics.median(self.phase(WORK_ONLY, k))
        best = statistics.median(self.phase(self.phase_best(k), k))
        return work / (best - work) if best > work > 0 else math.inf if work > 0 else 0.0

    def to_json(self) -> dict[str, Any]:
        return {"program": self.program.to_json(), "describe": G.describe(self.program),
                "clock": self.clock, "times": self.times, "other_clock": self.other,
                "fixed": self.fixed, "roles": list(self.roles), "wall_s": self.wall_s,
                "retaken": self.retaken}


# ---- running many -----------------------------------------------------------------


PACE_GUESS = 1.9
"""Seconds a run takes per nominal second of its programs (setup, the cache
flush before each run, clears and work slower than the nominal 30 GB/s),
for the estimate printed before a run starts: measured on an Intel Xeon
guest (family 6 model 167), 200 generated programs, 3 rounds: median 1.9
per program, 1.4-2.6 from the 10th to the 90th percentile (1.3 had
promised 2 h 18 min of a run whose phases alone, retakes included, took
4 h 27 min).  A retake adds rounds to the programs in doubt on top."""


def run(programs: Sequence[G.Program], names: Sequence[str], *, rounds: int = ROUNDS,
        pool_bytes: int | None = None, clock: str = CPU,
        progress: Callable[[int, int, str], None] | None = None,
        done: Callable[[list[ProgramResult]], None] | None = None,
        make: Callable[[str], Candidate] | None = None, retake: int = 0,
        doubtful: Callable[[ProgramResult], bool] | None = None,
        retake_most: int | None = None) -> list[ProgramResult]:
    """Every program, every candidate, ``rounds`` interleaved rounds, judged
    on ``clock`` (CPU or WALL).
    done(results so far) is called after each program (a long run keeps
    what it measured if it is stopped); make(name): the candidate of a name
    (default: ``candidate``).  A program that doubtful(its result) finds in
    doubt after its rounds runs ``retake`` rounds more, every candidate, at
    once (its memory still in place), and again while doubtful finds it in
    doubt and it has fewer than ``retake_most`` rounds (default: rounds +
    retake, one retake); it is judged over all of them."""
    if not _measure.have_numpy():
        raise ValueError("the program benchmark needs numpy (its programs use it)")
    if clock not in CLOCKS:
        raise ValueError("clock must be one of %s, not %r" % (", ".join(CLOCKS), clock))
    cands = [(make or candidate)(n) for n in names]
    th = _core.thresholds()
    roles = (th.temporal, th.streaming)
    l3 = _core.cpu().last_cache or G.DEFAULT_L3
    size = pool_bytes or _measure.cold_pool_size()
    biggest = max([n for p in programs for ph in p.phases for n in p.sizes(ph)
                   if ph.place in (G.WALK, G.HOT_POOL)] or [0])
    size = max(size, biggest * _measure.COLD_MIN_SLOTS)
    # Progress counts nominal milliseconds, so that its time left weighs a
    # long program as long.
    nominal = [max(1, round(G.estimate_s(p) * 1000)) * len(cands) for p in programs]
    total = sum(nominal) * rounds
    done_ms = 0
    out = []
    pool = Pool(size, l3)
    try:
        for i, prog in enumerate(programs):
            running = Running(prog, pool)
            start = time.monotonic()
            times: dict[str, list[list[float]]] = {c.name: [] for c in cands}
            other: dict[str, list[list[float]]] = {c.name: [] for c in cands}
            res = ProgramResult(prog, times, fixed_names(names), 0.0, clock, other, roles)
            try:
                gc.collect()
                for r in range(rounds):
                    _one_round(running, cands, r, clock, times, other)
                    done_ms += nominal[i]
                    if progress is not None:
                        progress(done_ms, total, "%s (%d/%d)" % (prog.name, i + 1,
                                                                 len(programs)))
                most = rounds + retake if retake_most is None else retake_most
                while (retake and doubtful is not None and rounds + res.retaken < most
                       and doubtful(res)):
                    more = min(retake, most - rounds - res.retaken)
                    res.retaken += more
                    total += nominal[i] * more      # the time left counts what is known
                    for r in range(rounds + res.retaken - more, rounds + res.retaken):
                        _one_round(running, cands, r, clock, times, other)
                        done_ms += nominal[i]
                        if progress is not None:
                            progress(done_ms, total, "%s (%d/%d), retaken: round %d of %d" % (
                                prog.name, i + 1, len(programs), r - rounds + 1,
                                res.retaken))
            finally:
                running.close()
            res.wall_s = time.monotonic() - start
            out.append(res)
            if done is not None:
                done(out)
    finally:
        pool.close()
    return out


def _one_round(running: Running, cands: Sequence[Candidate], r: int, clock: str,
               times: dict[str, list[list[float]]],
               other: dict[str, list[list[float]]]) -> None:
    """Round r of a program: every candidate once, the order turned by r
    (a change of the machine's load lands on all of them alike)."""
    shift = r % len(cands)
    for c in list(cands[shift:]) + list(cands[:shift]):
        wall, cpu = run_once(running, c)
        times[c.name].append(cpu if clock == CPU else wall)
        other[c.name].append(wall if clock == CPU else cpu)


# ---- judging many -----------------------------------------------------------------


def percentile(xs: Sequence[float], q: float) -> float:
    """The q-quantile (0..1) of xs, linear between order statistics."""
    s = sorted(x for x in xs if math.isfinite(x))
    if not s:
        return math.nan
    pos = q * (len(s) - 1)
    lo = math.floor(pos)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)


RESAMPLES = 400
"""Resamples of the programs behind the spread of a figure over programs."""


def over_programs(results: Sequence[ProgramResult], name: str, ref: str, q: float,
                  goal: float, what: str) -> _measure.GoalVerdict:
    """The q-quantile over programs of name's ratio to ref, each program's
    ratio its verdict's (the median over its rounds), and as its spread the
    interquartile range of the same quantile over RESAMPLES resamples of
    the programs (drawn with replacement, a fixed seed): how firmly these
    programs pin it.  Each program counts its first rounds only (as many
    as the fewest any has): a retake adds rounds to the programs found in
    doubt alone, and would lift the low end by their second chance.

    Not the quantile of each round's ratios, judged over the rounds: one
    round's ratio of a program carries that round's noise whole, and the
    low tail over programs collects it (numpy.fill timed twice, 3 rounds,
    100 generated programs on a Zen 4 guest: a 10th percentile of 0.87
    that way, 0.95 of the programs' medians)."""
    rounds = min((r.rounds for r in results), default=0)
    each = [_median(res.ratios(name, ref)[:rounds]) for res in results]
    rng = random.Random(0)
    again = [percentile(rng.choices(each, k=len(each)), q) for _ in range(RESAMPLES)] \
        if each else []
    q1, q3 = _measure.quartiles(again)
    return _measure.GoalVerdict(name, "%s, %s" % (ref, what), goal, percentile(each, q),
                                q1, q3, rounds, "programs resampled")


@dataclasses.dataclass
class EveryProgram:
    """A goal that holds in every program: each program's verdict."""

    name: str
    ref: str
    goal: float
    verdicts: list[tuple[str, _measure.GoalVerdict]]

    def count(self, outcome: str) -> int:
        return sum(v.outcome == outcome for _, v in self.verdicts)

    @property
    def outcome(self) -> str:
        if self.count(_measure.MISS):
            return _measure.MISS
        if self.count(_measure.UNMEASURED):
            return _measure.UNMEASURED
        return _measure.OK

    def worst(self) -> tuple[str, _measure.GoalVerdict] | None:
        return min(self.verdicts, key=lambda x: x[1].ratio, default=None)

    def text(self) -> str:
        return "%s >= %.2f of %s in every program: %d ok, %d miss, %d unmeasured: %s" % (
            self.name, self.goal, self.ref, self.count(_measure.OK),
            self.count(_measure.MISS), self.count(_measure.UNMEASURED), self.outcome)

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "reference": self.ref, "goal": self.goal,
                "outcome": self.outcome,
                "programs": {p: v.to_json() for p, v in self.verdicts}}


def every_program(results: Sequence[ProgramResult], name: str, ref: str,
                  goal: float) -> EveryProgram:
    return EveryProgram(name, ref, goal, [(r.program.name, r.judge(name, ref, goal))
                                          for r in results])


@dataclasses.dataclass
class Goals:
    """The goals over generated programs, for one candidate (auto, or the
    static default)."""

    name: str
    rivals: list[EveryProgram]
    median: _measure.GoalVerdict
    p10: _measure.GoalVerdict

    @property
    def outcomes(self) -> list[str]:
        return [g.outcome for g in self.rivals] + [self.median.outcome, self.p10.outcome]

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "rivals": [g.to_json() for g in self.rivals],
                "median": self.median.to_json(), "p10": self.p10.to_json()}


def goals(results: Sequence[ProgramResult], name: str = AUTO,
          rivals: Sequence[str] = RIVALS, ref: str = ORACLE) -> Goals:
    """name judged by the goals: against each of rivals in every program,
    and the median and 10th percentile over programs of its ratio to ref."""
    return Goals(name, [every_program(results, name, r, GOAL_RIVAL) for r in rivals
                        if r in results[0].times],
                 over_programs(results, name, ref, 0.5, GOAL_MEDIAN, "median over programs"),
                 over_programs(results, name, ref, 0.1, GOAL_P10,
                               "10th percentile over programs"))


def doubtful(result: ProgramResult) -> bool:
    """Whether a generated program's verdict against a rival is in doubt:
    auto's against numpy.fill or ctypes.memset unmeasured or not pinned
    (the median's bounds hold the goal), whether its median is above the
    goal or below; or the twin's against numpy.fill (TWIN) not ok and not
    pinned.  The twin is retaken where it would count as a miss or
    unmeasured, as auto was before its retakes were made even-handed: its
    line then understates the run's noise, if anything, which leaves auto
    no shortfall to put down to noise that noise did not show; retaking it
    on either side too cost a program of 220 s a round 8 rounds more (on
    the Intel guest) for a verdict that judges nothing."""
    for name, ref in RIVAL_VERDICTS:
        if name in result.times and ref in result.times:
            v = result.judge(name, ref, GOAL_RIVAL)
            if v.in_doubt and (name != TWIN or not v.ok):
                return True
    return False


def cells_doubtful(result: ProgramResult) -> bool:
    """Whether a hand-written case is in doubt: a phase cell's verdict (auto
    against the phase's best fixed choice, judge_phase) unmeasured or not
    pinned, whichever side of its goal the median is on: retaken as a
    generated program is (doubtful), so that a cell's verdict is its
    median's, not its first rounds' noise."""
    return any(result.judge_phase(AUTO, k).in_doubt
               for k in range(len(result.program.phases)))


def noise(results: Sequence[ProgramResult]) -> Goals | None:
    """What this run's noise alone does to the goals: the twin (TWIN)
    judged against numpy.fill, which runs identical code, by the rules auto
    is judged by (every program, the median and the 10th percentile over
    programs); None where the run has no twin."""
    if not results or not {TWIN, _measure.NUMPY_FILL} <= set(results[0].times):
        return None
    fill = _measure.NUMPY_FILL
    return goals(results, TWIN, rivals=(fill,), ref=fill)


# ---- where auto loses ------------------------------------------------------------


def size_band(n: float, l2: int, l3: int) -> str:
    """Bands against the caches: where the choice between stores changes."""
    bands = [(16 * KiB, "<16K"), (l2 // 8 or 128 * KiB, "<L2/8"), (l2 or MiB, "<L2"),
             (l3 // 4 or 8 * MiB, "<L3/4"), (l3 or 32 * MiB, "<L3")]
    for top, label in bands:
        if n < top:
            return label
    return ">=L3"


def use_band(share: float | None) -> str:
    """The work's measured time against the clears'."""
    if share is None:
        return "?"
    if share < 0.05:
        return "none"
    if share < 1:
        return "<1x"
    if share < 5:
        return "1-5x"
    return ">=5x"


@dataclasses.dataclass
class PhaseRow:
    program: str
    index: int
    place: str
    work: str
    size: float
    band: str
    use: str
    calls: int
    ratio: float
    """auto's median per-round ratio to the phase's best fixed choice."""
    best: str
    weight: float
    """The phase's share of the program's best time."""
    seconds: float
    """The phase's best fixed choice's median time."""
    position: str
    """'first' (the program's first phase), 'changed' (a phase after another)."""
    length: str
    """The phase's steps, banded."""
    like: str
    """The fixed choice whose median time on the phase is nearest auto's:
    what auto ran like."""
    carried: float
    """auto carried's median ratio (the learner kept from the runs before)."""
    static: float
    """auto static's median ratio (adaptation off)."""


def length_band(calls: int) -> str:
    return "<200" if calls < 200 else "200-999" if calls < 1000 else ">=1000"


LENGTHS = ("<200", "200-999", ">=1000")


def phase_rows(results: Sequence[ProgramResult], name: str = AUTO) -> list[PhaseRow]:
    cpu = _core.cpu()
    rows = []
    for res in results:
        prog = res.program
        best_total = statistics.median(res.reference(ORACLE)) or 1.0
        for k, ph in enumerate(prog.phases):
            n = G.phase_bytes(prog, ph)
            best = res.phase_best(k)
            mine = statistics.median(res.phase(name, k))
            like = min(res.fixed, key=lambda f: abs(
                math.log(statistics.median(res.phase(f, k)) / mine)) if mine > 0 else 0.0)

            def ratio(who: str, k: int = k, res: ProgramResult = res) -> float:
                return _median(res.phase_ratios(who, k)) if who in res.times else math.nan
            rows.append(PhaseRow(
                prog.name, k, ph.place, ph.work, n, size_band(n, cpu.l2, cpu.l3),
                use_band(res.work_share(k)), ph.calls, ratio(name), best,
                statistics.median(res.phase(best, k)) / best_total,
                statistics.median(res.phase(best, k)),
                "first" if k == 0 and prog.passes == 1 else "changed",
                length_band(ph.calls * prog.passes), like, ratio(CARRIED), ratio(STATIC)))
    return rows


def losses_by(rows: Sequence[PhaseRow], key: Callable[[PhaseRow], str],
              order: Sequence[str] = ()) -> list[list[str]]:
    """Per group: phases, auto's median ratio, its 10th percentile, the
    share of phases below 0.9, the worst, and the fixed choice best most often."""
    groups: dict[str, list[PhaseRow]] = {}
    for r in rows:
        groups.setdefault(key(r), []).append(r)
    keys = [k for k in order if k in groups] + sorted(k for k in groups if k not in order)
    out = []
    for k in keys:
        g = groups[k]
        rs = [r.ratio for r in g]
        bests = statistics.mode([r.best for r in g])
        out.append([k, str(len(g)), "%.2f" % statistics.median(rs),
                    "%.2f" % percentile(rs, 0.1),
                    "%d%%" % round(100 * sum(x < 0.9 for x in rs) / len(rs)),
                    "%.2f" % min(rs), bests])
    return out


# ---- reports -------------------------------------------------------------------


def _table(head: Sequence[str], rows: Sequence[Sequence[str]], out: Any,
           optional: Sequence[int] = ()) -> None:
    from . import output

    output.table(rows, head, out, optional=optional)


def _say(text: str, out: Any, indent: str = "", hang: str = "  ") -> None:
    from . import output

    output.say(text, out, indent=indent, hang=hang)


def _fmt_ratio(v: _measure.GoalVerdict) -> tuple[str, str, str]:
    """(figure, rounds, outcome) of a verdict, for a table."""
    return "%.2f" % v.ratio, "%.2f-%.2f" % (v.q1, v.q3), v.outcome


def _median(xs: Sequence[float]) -> float:
    ys = [x for x in xs if math.isfinite(x)]
    return statistics.median(ys) if ys else math.nan


def report_cases(results: Sequence[ProgramResult], out: Any) -> dict[str, int]:
    """The hand-written cases: every phase cell, auto against the phase's
    best fixed choice; returns the count of each outcome."""
    _say("auto's ratio to the phase's best fixed choice (its time over auto's, per "
         "round; 1.00 is as fast), the median and the interquartile range of the "
         "rounds; goals: every cell 0.90, cold then used 0.75.  carried: the learner "
         "kept from the runs before; static: adaptation off.", out)
    head = ["program", "phase", "auto", "rounds", "verdict", "best", "carried",
            "static", "/numpy", "/memset"]
    rows = []
    counts = dict.fromkeys(_measure.OUTCOMES, 0)
    misses = []
    for res in results:
        for k, ph in enumerate(res.program.phases):
            v = res.judge_phase(AUTO, k)
            counts[v.outcome] += 1
            if v.outcome != _measure.OK:
                misses.append("%s, %s: %s" % (res.program.name, ph.label, v.text()))

            def other(name: str, k: int = k, res: ProgramResult = res) -> str:
                return ("%.2f" % _median(res.phase_ratios(name, k))
                        if name in res.times else "-")

            def rival(name: str, k: int = k, res: ProgramResult = res) -> str:
                if name not in res.times:
                    return "-"
                return "%.2f" % _median([a / b for a, b in zip(res.phase(name, k),
                                                               res.phase(AUTO, k))])
            fig, spread, outcome = _fmt_ratio(v)
            rows.append([res.program.name, ph.label or ph.place, fig, spread, outcome,
                         res.phase_best(k), other(CARRIED), other(STATIC),
                         rival(_measure.NUMPY_FILL), rival(_measure.MEMSET)])
    _table(head, rows, out, optional=(9, 8, 7, 6, 5))
    print(file=out)
    _say("cells: %d ok, %d miss, %d unmeasured (retake)" % (
        counts[_measure.OK], counts[_measure.MISS], counts[_measure.UNMEASURED]), out)
    retaken = [r for r in results if r.retaken]
    if retaken:
        _say("retaken (a cell's median not pinned to one side of its goal by its bounds "
             "after the first rounds): %s; the cells above are judged over all their "
             "rounds" % ", ".join("%s (%d rounds)" % (r.program.name, r.rounds)
                                  for r in retaken), out)
    for m in misses:
        _say(m, out, indent="  ", hang="    ")
    return counts


def _goal_lines(g: Goals, out: Any) -> None:
    for e in g.rivals:
        _say(e.text(), out, indent="  ", hang="    ")
        worst = e.worst()
        if worst is not None and worst[1].outcome != _measure.OK:
            _say("worst, %s: %s" % (worst[0], worst[1].text()), out,
                 indent="    ", hang="      ")
    for v in (g.median, g.p10):
        _say(v.text(), out, indent="  ", hang="    ")


def _retake_lines(results: Sequence[ProgramResult], out: Any) -> None:
    """Which programs the retakes ran again, and what they did to their
    verdicts against the rivals."""
    retaken = [r for r in results if r.retaken]
    if not retaken:
        return
    print(file=out)
    first = retaken[0].rounds - retaken[0].retaken
    ends = collections.Counter(r.rounds for r in retaken)
    _say("retaken: %d of %d programs, in doubt after their first %d rounds (a verdict "
         "against numpy.fill or ctypes.memset whose median's bounds hold the goal: auto's "
         "on either side of it, the twin's below it), ran rounds more, every candidate, "
         "while in doubt, and are judged over all of them (%s); the median and the 10th "
         "percentile over programs take every program's first %d rounds:" % (
             len(retaken), len(results), first,
             ", ".join("%d rounds: %d" % kv for kv in sorted(ends.items())), first), out)
    rows = []
    for name, ref in RIVAL_VERDICTS:
        if name not in results[0].times or ref not in results[0].times:
            continue
        before = [r.first().judge(name, ref, GOAL_RIVAL).outcome for r in retaken]
        after = [r.judge(name, ref, GOAL_RIVAL).outcome for r in retaken]
        rows.append(["%s / %s" % (name, ref)]
                    + [str(before.count(o)) for o in _measure.OUTCOMES]
                    + [str(after.count(o)) for o in _measure.OUTCOMES])
    _table(["the retaken", "before: ok", "miss", "unmeasured", "after: ok", "miss",
            "unmeasured"], rows, out)


def report_generated(results: Sequence[ProgramResult], out: Any,
                     worst: int = 12) -> dict[str, Goals]:
    """The goals over generated programs, where auto loses, the worst
    programs; returns the goals judged (auto and the static default) and,
    under "noise", what identical code scores by them (see noise())."""
    if not results:
        return {}
    judged = {name: goals(results, name) for name in (AUTO, STATIC)
              if name in results[0].times}
    _retake_lines(results, out)
    for name, g in judged.items():
        print(file=out)
        _say({AUTO: "goals, auto (the learner forgotten before each run, as in a fresh "
                    "process):",
              STATIC: "the same goals, auto static (adaptation off, as "
                      "CLEARPAGES_ADAPT=0 runs):"}[name], out)
        _goal_lines(g, out)
    twin = noise(results)
    if twin is not None:
        judged["noise"] = twin
        print(file=out)
        _say("the run's own noise: numpy.fill timed twice, as two candidates running "
             "identical code, judged by the same rules (where auto falls short by no more "
             "than this, the noise of the run decides the verdict, not the choice):", out)
        _goal_lines(twin, out)
    print(file=out)
    _say("figures without a goal, medians over programs of the median over rounds:", out)
    rows = []
    for name in (AUTO, CARRIED, STATIC):
        if name not in results[0].times:
            continue
        per = [[_median(r.ratios(name, ref)) for r in results]
               for ref in (ORACLE, ROLES_ORACLE, BEST, _measure.NUMPY_FILL, _measure.MEMSET)]
        rows.append([name] + ["%.2f (%.2f)" % (_median(xs), percentile(xs, 0.1))
                              for xs in per])
    _table(["candidate", "/oracle", "/roles", "/best", "/numpy", "/memset"], rows, out)
    _say("each: median over programs (10th percentile); /X: X's time over the "
         "candidate's; oracle: the fastest fixed choice of each phase, summed; roles: the "
         "same over the temporal and the streaming routine alone (what auto chooses "
         "between); best: the fastest fixed choice of the whole program", out)
    prows = phase_rows(results)
    kept = [r for r in prows if r.seconds >= SHORT_PHASE_S]
    print(file=out)
    _say("where auto loses: its median ratio to the phase's best fixed choice over %d "
         "phases (%d shorter than %d ms left out: noise of the machine, not of the "
         "choice, decides them), by size against the caches, place, work, the work's "
         "measured time against the clears', steps in the phase, and whether it follows "
         "another phase" % (len(kept), len(prows) - len(kept), SHORT_PHASE_S * 1000), out)
    head = ["", "phases", "median", "p10", "<0.9", "worst", "best most often"]
    for label, key, order in (
            ("size", lambda r: r.band, ("<16K", "<L2/8", "<L2", "<L3/4", "<L3", ">=L3")),
            ("place", lambda r: r.place, G.PLACES),
            ("work", lambda r: r.work, G.WORKS),
            ("use", lambda r: r.use, ("none", "<1x", "1-5x", ">=5x")),
            ("steps", lambda r: r.length, LENGTHS),
            ("phase", lambda r: r.position, ("first", "changed"))):
        rows = losses_by(kept, key, order)
        print(file=out)
        _table([label] + head[1:], rows, out, optional=(6,))
    print(file=out)
    _say("the %d phases where auto does worst (like: the fixed choice auto's time is "
         "nearest; carried, static: their ratios on the phase):" % min(worst, len(kept)),
         out)
    rows = []
    by_name = {x.program.name: x for x in results}
    for pr in sorted(kept, key=lambda r: r.ratio)[:worst]:
        ph = by_name[pr.program].program.phases[pr.index]
        sizes = "+".join(format_size(n, "") for n in by_name[pr.program].program.sizes(ph))
        rows.append(["%s/%d" % (pr.program, pr.index), "%.2f" % pr.ratio, pr.best, pr.like,
                     "%.2f" % pr.carried, "%.2f" % pr.static,
                     "%s %s x%d %s%s" % (pr.place, sizes, pr.calls, pr.work,
                                         " %.1f" % ph.factor if ph.factor else "")])
    _table(["phase", "auto", "best", "like", "carried", "static", "what"], rows, out,
           optional=(5, 4))
    print(file=out)
    ranked = sorted(results, key=lambda r: _median(r.ratios(AUTO, ORACLE)))[:worst]
    _say("the %d programs where auto does worst against the oracle (replay one: "
         "--generated N --seed S, the program g<S>.<index>):" % len(ranked), out)
    rows = []
    for r in ranked:
        rows.append([r.program.name, "%.2f" % _median(r.ratios(AUTO, ORACLE)),
                     "%.2f" % _median(r.ratios(AUTO, _measure.NUMPY_FILL))
                     if _measure.NUMPY_FILL in r.times else "-",
                     "%.2f" % _median(r.ratios(AUTO, _measure.MEMSET))
                     if _measure.MEMSET in r.times else "-",
                     G.describe(r.program)])
    _table(["program", "/oracle", "/numpy", "/memset", "phases"], rows, out)
    return judged


def from_json(data: dict[str, Any]) -> list[ProgramResult]:
    """The results of a run, from what ``to_json`` wrote (``--json``)."""
    return [ProgramResult(G.Program.from_json(p["program"]), p["times"], p["fixed"],
                          p.get("wall_s", 0.0), p.get("clock", WALL), p.get("other_clock", {}),
                          tuple(p.get("roles", ())), p.get("retaken", 0))
            for p in data["programs"]]


def to_json(results: Sequence[ProgramResult], settings: dict[str, Any],
            judged: dict[str, Goals] | None = None) -> dict[str, Any]:
    from . import report

    return {"machine": report.machine(), "settings": settings,
            "goals": {k: g.to_json() for k, g in (judged or {}).items()},
            "phases": [dataclasses.asdict(r) for r in phase_rows(results)]
            if results and AUTO in results[0].times else [],
            "programs": [r.to_json() for r in results]}
