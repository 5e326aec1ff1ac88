"""Programs nobody wrote by hand: drawn from a seed, each a sequence of
phases (``bench --programs --generated N --seed S``), and the hand-written
cases as programs of the same form (``bench --programs --cases``).

A benchmark we wrote tests the programs we thought of.  A program drawn at
random tests the ones we did not: sizes that are not powers of two, phases
that change before a learner has settled, work between clears that is
noisy, other code in the same process clearing with explicit routines and
with other libraries' memsets, two threads clearing at once.  This module
only describes programs (plain data, the same for a seed on every machine of
the same last-level cache size); ``phased`` runs them and judges ``auto``.

A *program* is its own buffers (``buffers``, sizes in bytes), some other
memory it reads (``other``) and a buffer other code clears (``foreign``),
and a list of *phases*, run in order ``passes`` times.  A phase is
``calls`` steps in one *place*:

- ``one``: one of the program's buffers, every step (warm);
- ``walk``: the next page of a pool much larger than the last-level cache,
  every step (cold: a page was last touched a pool ago);
- ``several``: two to four buffers of different sizes, in turn or at random;
- ``hot+pool``: a hot buffer, then a pool page, every step;
- ``threads``: two threads, each clearing its own buffer, at once.

Each step is a clear by the candidate under test, then the phase's *work*
on what was cleared: ``none``; ``writes`` (8-byte words at random, then
their sum); ``pad`` (the head of each 4 KiB row, then a sum of the buffer);
``sum`` (a reduction over the buffer); ``read`` (a sum over other memory);
``sleep``; or ``mixed`` (one of those drawn per step).  The work's size is
``factor`` times the bytes cleared (nominally as long as the clear: from
nothing to 20x its time), varied per step by a lognormal of spread
``noise``.  Every ``foreign_every`` steps some other code clears the
foreign buffer (``clear(method=...)`` with the temporal or the streaming
routine, ``numpy.fill`` or ``ctypes.memset``): part of the program, the
same for every candidate.
"""

from __future__ import annotations

import dataclasses
import math
import random
from collections.abc import Sequence
from typing import Any

from .._units import KiB, MiB, format_size

ONE, WALK, SEVERAL, HOT_POOL, THREADS = "one", "walk", "several", "hot+pool", "threads"
PLACES = (ONE, WALK, SEVERAL, HOT_POOL, THREADS)
PLACE_WEIGHTS = (4, 4, 2, 2, 1)

NONE, WRITES, PAD, SUM, READ, SLEEP, MIXED = (
    "none", "writes", "pad", "sum", "read", "sleep", "mixed")
WORKS = (NONE, WRITES, PAD, SUM, READ, SLEEP, MIXED)
WORK_WEIGHTS = (4, 2, 2, 2, 1, 1, 2)
MIXED_OF = (WRITES, PAD, SUM, READ, SLEEP)
"""What a ``mixed`` step draws from."""

FOREIGN_TEMPORAL = "clear(method=temporal)"
FOREIGN_STREAMING = "clear(method=streaming)"
FOREIGN_NUMPY = "numpy.fill"
FOREIGN_MEMSET = "ctypes.memset"
FOREIGNS = (FOREIGN_TEMPORAL, FOREIGN_STREAMING, FOREIGN_NUMPY, FOREIGN_MEMSET)
"""Other code's clears; the routines are this machine's roles, so that a
program means the same on every CPU."""

ROW = 4 * KiB
"""pad's rows."""
MIN_SIZE = 4 * KiB
SIZE_OVER_L3 = 4
"""Sizes are drawn up to this many times the last-level cache ..."""
MAX_SIZE = 256 * MiB
"""... and never above this, so that a program stays small on a machine
with a very large cache."""
DEFAULT_L3 = 32 * MiB
"""The cache size programs are drawn for where the CPU reports none."""
CALLS = (50, 5000)
"""A phase's steps, drawn log-uniformly (fewer only where a phase of the
size would make the program longer than ``SECONDS``; never under 50)."""
MAX_FACTOR = 20.0
PHASES = (2, 6)
SECONDS = (0.2, 1.0)
"""A program's nominal time per run (``estimate_s``): drawn in this range;
a program shorter than its draw repeats its phases (``passes``)."""
MAX_PASSES = 50
PRIVATE_MAX = 768 * MiB
"""A program's own memory at most: its buffers, other memory and foreign
buffer (the pool is shared by every program)."""
OTHER = 64 * MiB
"""The other memory a program reads (``read`` work), where it reads any."""
FOREIGN_MAX = 8 * MiB

# Nominal costs, for sizing the work and estimating a program's time; from
# numpy and clearpages on a Zen 4 guest, rounded.  Machine-independent on
# purpose: a seed draws the same program everywhere, and the run measures
# the real times (the 'work only' candidate gives the work's own share).
CLEAR_BYTES_PER_S = 30e9
SUM_BYTES_PER_S = 15e9
"""numpy's sum of uint64 words (the buffer, or a pad's rows)."""
READ_BYTES_PER_S = 10e9
"""numpy's sum over other memory, mostly out of the cache."""
WRITE_S = 8e-9
"""One 8-byte word written at a random index, and read back."""
CALL_S = 1e-6
"""One Python-level call around a clear or a piece of work."""
SLEEP_MIN_S = 100e-6
"""A sleep is at least this long (shorter ones sleep this long, that much
less often): a sleep's own latency is tens of microseconds."""
WRITES_MAX = 1 << 20
"""Words a writes step writes at most."""


@dataclasses.dataclass(frozen=True)
class Phase:
    """``calls`` steps in one place; sizes are in the Program."""

    place: str
    calls: int
    buffers: tuple[int, ...] = ()
    """Indices into Program.buffers: one for one and hot+pool, two for
    threads, two to four for several."""
    page: int = 0
    """The pool page's size (walk, hot+pool)."""
    work: str = NONE
    factor: float = 0.0
    """The work's bytes per step, as a multiple of the step's cleared bytes."""
    noise: float = 0.0
    """The spread (sigma) of the lognormal each step's work is scaled by."""
    random_order: bool = False
    """several: the buffers at random, not in turn."""
    foreign: str = ""
    foreign_every: int = 0
    label: str = ""
    """The phase's name in reports (the hand-written cases: 'warm', 'cold', ...)."""
    goal: float | None = None
    """auto's goal against the phase's best fixed choice (hand-written cases)."""
    seed: int = 0
    """For the per-step draws (noise, indices, order) at run time."""
    words: int = 0
    """writes: 8-byte words per step; 0: from factor."""
    head: int = 0
    """pad: bytes written at the head of each row; 0: from factor."""


@dataclasses.dataclass(frozen=True)
class Program:
    name: str
    buffers: tuple[int, ...]
    phases: tuple[Phase, ...]
    passes: int = 1
    other: int = 0
    foreign: int = 0
    seed: int | None = None
    index: int | None = None

    def private_bytes(self) -> int:
        """The program's own memory: buffers, other memory, foreign buffer."""
        return sum(self.buffers) + self.other + self.foreign

    def sizes(self, phase: Phase) -> tuple[int, ...]:
        """The bytes each clear of a step clears, in step order."""
        own = tuple(self.buffers[i] for i in phase.buffers)
        if phase.place == WALK:
            return (phase.page,)
        if phase.place == HOT_POOL:
            return own + (phase.page,)
        return own

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Program:
        phases = tuple(Phase(**{**p, "buffers": tuple(p["buffers"])}) for p in d["phases"])
        return cls(**{**d, "buffers": tuple(d["buffers"]), "phases": phases})


def phase_bytes(program: Program, phase: Phase) -> float:
    """Bytes a step of the phase clears, on average (threads: both)."""
    sizes = program.sizes(phase)
    if phase.place == SEVERAL:
        return sum(sizes) / len(sizes)
    return float(sum(sizes))


def clear_s(n: float) -> float:
    """A clear's nominal seconds."""
    return n / CLEAR_BYTES_PER_S + CALL_S


@dataclasses.dataclass(frozen=True)
class StepWork:
    """A step's work on a buffer of n bytes, before its noise: what each
    kind does (a mixed step does one of them)."""

    seconds: float
    """Nominal: factor times the clear's own time."""
    words: int
    """writes: words written at random, then read back and summed."""
    head: int
    """pad: bytes written at the head of each 4 KiB row (the buffer is then summed)."""
    sum_words: int
    """sum: words of the buffer summed (past its end: again from its start)."""
    read_words: int
    """read: words of the other memory summed."""

    def cost_s(self, kind: str, n: int) -> float:
        """The nominal seconds of one kind of this work."""
        if kind == WRITES:
            return self.words * WRITE_S + CALL_S
        if kind == PAD:
            rows = max(1, n // ROW)
            return (rows * self.head / SUM_BYTES_PER_S + n / SUM_BYTES_PER_S + 2 * CALL_S)
        if kind == SUM:
            return self.sum_words * 8 / SUM_BYTES_PER_S + CALL_S
        if kind == READ:
            return self.read_words * 8 / READ_BYTES_PER_S + CALL_S
        if kind == SLEEP:
            return self.seconds + CALL_S
        return 0.0


def step_work(phase: Phase, n: int) -> StepWork:
    """The work after clearing n bytes in the phase (sized from factor, or
    phase.words for writes)."""
    s = phase.factor * clear_s(n)
    row = min(n, ROW)
    pad_s = max(0.0, s - n / SUM_BYTES_PER_S)
    head = phase.head or int(pad_s * SUM_BYTES_PER_S / max(1, n // ROW)) // 8 * 8
    words = phase.words or int(s / WRITE_S)
    return StepWork(s, max(1, min(n // 8, WRITES_MAX, words)), max(8, min(row, head)),
                    max(1, int(s * SUM_BYTES_PER_S / 8)),
                    max(1, int(s * READ_BYTES_PER_S / 8)))


def _work_s(phase: Phase, n: int) -> float:
    if phase.work == NONE:
        return 0.0
    w = step_work(phase, n)
    if phase.work == MIXED:
        return sum(w.cost_s(k, n) for k in MIXED_OF) / len(MIXED_OF)
    return w.cost_s(phase.work, n)


def step_s(program: Program, phase: Phase) -> float:
    """A step's nominal seconds: its clears and the work after them."""
    sizes = program.sizes(phase)
    if phase.place == SEVERAL:
        return sum(clear_s(n) + _work_s(phase, n) for n in sizes) / len(sizes)
    if phase.place == THREADS:          # two at once: the longer of the two
        return max(clear_s(n) + _work_s(phase, n) for n in sizes)
    return sum(clear_s(n) for n in sizes) + _work_s(phase, sizes[0])


def estimate_s(program: Program) -> float:
    """The program's nominal seconds per run (see CLEAR_BYTES_PER_S)."""
    total = 0.0
    for ph in program.phases:
        step = step_s(program, ph)
        if ph.foreign_every:
            step += clear_s(program.foreign) / ph.foreign_every
        total += ph.calls * step
    return total * program.passes


def size_range(l3: int) -> tuple[int, int]:
    """(smallest, largest) size drawn for a last-level cache of l3 bytes."""
    return MIN_SIZE, max(MIN_SIZE, min(MAX_SIZE, SIZE_OVER_L3 * (l3 or DEFAULT_L3)))


def _draw_size(r: random.Random, lo: int, hi: int) -> int:
    """Log-uniform in [lo, hi]: a power of two one time in five, else a
    multiple of 64 bytes (a cache line) or of 4 KiB."""
    if hi <= lo:
        return lo
    n = lo * (hi / lo) ** r.random()
    shape = r.random()
    if shape < 0.2:
        n = 1 << round(math.log2(n))
    else:
        align = 4096 if shape < 0.5 else 64
        n = round(n / align) * align
    return max(lo, min(hi, int(n)))


def _draw_calls(r: random.Random) -> int:
    lo, hi = CALLS
    calls: float = lo * (hi / lo) ** r.random()
    return round(calls)


def program_name(seed: int, index: int) -> str:
    return "g%d.%d" % (seed, index)


def generate(seed: int, index: int, l3: int = DEFAULT_L3, *,
             sizes: tuple[int, int] | None = None,
             seconds: tuple[float, float] = SECONDS) -> Program:
    """Program ``index`` of the corpus of ``seed``, for a last-level cache of
    ``l3`` bytes: the same program for the same three numbers, anywhere.
    sizes: (smallest, largest) instead of ``size_range(l3)``; seconds: the
    range of the program's nominal time instead of SECONDS."""
    # A string seed is hashed (sha512) the same way by every Python 3.
    r = random.Random("clearpages-programs:%d:%d" % (seed, index))
    lo, hi = sizes or size_range(l3)
    lo = max(64, lo // 64 * 64)
    hi = max(lo, hi)
    buffers: list[int] = []

    def new_buffer(cap: int = hi) -> int:
        room = PRIVATE_MAX - OTHER - FOREIGN_MAX - sum(buffers)
        top = min(cap, room)
        if top < lo:                    # out of memory for the program: reuse one
            return r.randrange(len(buffers))
        buffers.append(_draw_size(r, lo, top))
        return len(buffers) - 1

    def draw_buffer() -> int:
        if buffers and r.random() < 0.35:
            return r.randrange(len(buffers))      # this buffer again, later
        return new_buffer()

    phases = []
    for _ in range(r.randint(*PHASES)):
        place = r.choices(PLACES, PLACE_WEIGHTS)[0]
        idx: tuple[int, ...] = ()
        page = 0
        if place == ONE:
            idx = (draw_buffer(),)
        elif place == WALK:
            page = _draw_size(r, lo, hi)
        elif place == SEVERAL:
            idx = tuple(dict.fromkeys(new_buffer() for _ in range(r.randint(2, 4))))
            if len(idx) < 2:
                idx = (idx[0], new_buffer(max(lo, buffers[idx[0]] // 2)))
        elif place == HOT_POOL:
            idx = (draw_buffer(),)
            page = buffers[idx[0]] if r.random() < 0.5 else _draw_size(r, lo, hi)
        else:
            idx = (new_buffer(), new_buffer())
        work = r.choices(WORKS, WORK_WEIGHTS)[0]
        factor = 0.0 if work == NONE else 0.05 * (MAX_FACTOR / 0.05) ** r.random()
        foreign, every = "", 0
        if r.random() < 0.3:
            foreign, every = r.choice(FOREIGNS), r.choice((1, 2, 4, 16))
        phases.append(Phase(place, _draw_calls(r), idx, page, work, round(factor, 3),
                            r.choice((0.0, 0.25, 0.5, 1.0)) if work != NONE else 0.0,
                            random_order=r.random() < 0.5, foreign=foreign,
                            foreign_every=every, seed=r.getrandbits(32)))
    reads = any(p.work in (READ, MIXED) for p in phases)
    foreign_size = _draw_size(r, lo, FOREIGN_MAX) if any(p.foreign for p in phases) else 0
    prog = Program(program_name(seed, index), tuple(buffers), tuple(phases), 1,
                   OTHER if reads else 0, foreign_size, seed, index)
    return _fit(prog, r.uniform(*seconds), seconds[1])


def _fit(prog: Program, target_s: float, top: float) -> Program:
    """Shorten a program longer than top seconds (less work, then fewer
    steps, then fewer phases), or repeat one shorter than target_s."""
    while estimate_s(prog) > top:
        costs = [estimate_s(dataclasses.replace(prog, phases=(p,))) for p in prog.phases]
        k = max(range(len(costs)), key=costs.__getitem__)
        p = prog.phases[k]
        if p.factor > 0.25:
            p = dataclasses.replace(p, factor=round(p.factor / 2, 3))
        elif p.calls > CALLS[0]:
            p = dataclasses.replace(p, calls=max(CALLS[0], p.calls // 2))
        elif len(prog.phases) > 1:
            prog = dataclasses.replace(prog, phases=prog.phases[:k] + prog.phases[k + 1:])
            continue
        else:
            break
        prog = dataclasses.replace(prog, phases=prog.phases[:k] + (p,) + prog.phases[k + 1:])
    once = estimate_s(prog)
    passes = max(1, min(MAX_PASSES, int(top / once), round(target_s / once))) if once else 1
    return dataclasses.replace(prog, passes=passes)


def corpus(seed: int, count: int, l3: int = DEFAULT_L3, **kw: Any) -> list[Program]:
    """Programs 0 .. count - 1 of seed (keywords: those of ``generate``)."""
    return [generate(seed, i, l3, **kw) for i in range(count)]


def describe(program: Program) -> str:
    """One line: the phases, e.g. 'one 1.5 MiB x200 sum | walk 64 KiB x1200'."""
    parts = []
    for ph in program.phases:
        sizes = "+".join(format_size(n, "") for n in program.sizes(ph))
        text = "%s %s x%d" % (ph.place, sizes, ph.calls)
        if ph.work != NONE:
            text += " %s" % ph.work
        parts.append(text)
    return " | ".join(parts) + (" (x%d)" % program.passes if program.passes > 1 else "")


# ---- the hand-written cases -------------------------------------------------------

#: The warm/cold/warm-again program: phases of this many steps warm, and
#: this many walks of the pool cold.
WARM_CALLS = 250
COLD_WALKS = 3
WARM_COLD_SIZES = (1 * MiB, 4 * MiB, 8 * MiB, 16 * MiB)

#: The clear-then-use programs: phases of at most this many steps, sized
#: to about USED_PHASE_S each.
USED_CALLS = 4000
USED_PHASE_S = 0.15
USED_SIZES = tuple(s * KiB for s in (16, 64, 256)) + tuple(s * MiB for s in (1, 4, 16, 64))
GOAL_CELL = 0.9
GOAL_COLD_USED = 0.75
"""Cold, then used: nothing in a clear's own time tells it from clear-only."""
CASES = ("warm-cold", "writes", "pad")


def warm_cold(n: int, pool: int) -> Program:
    """One buffer of n bytes cleared WARM_CALLS times, then COLD_WALKS walks
    over a pool of n-byte pages, then the buffer again."""
    walk = COLD_WALKS * pool_geometry(pool, n)[1]
    phases = (Phase(ONE, WARM_CALLS, (0,), label="warm", goal=GOAL_CELL),
              Phase(WALK, walk, (), n, label="cold", goal=GOAL_CELL),
              Phase(ONE, WARM_CALLS, (0,), label="warm again", goal=GOAL_CELL))
    return Program("warm-cold %s" % format_size(n, ""), (n,), phases)


def used(kind: str, n: int) -> Program:
    """Clear, then use, on one buffer and then on a pool walk: ``writes``
    writes 1/16 of the buffer's 8-byte words at random and sums them; ``pad``
    writes the first half of each 4 KiB row and sums the buffer."""
    if kind == WRITES:
        ph = Phase(ONE, 1, (0,), work=WRITES, words=max(1, n // 8 // 16), seed=16)
    elif kind == PAD:
        ph = Phase(ONE, 1, (0,), work=PAD, head=ROW // 2, seed=16)
    else:
        raise ValueError("unknown use %r; known: %s, %s" % (kind, WRITES, PAD))
    probe = Program("", (n,), (ph,))
    calls = max(CALLS[0] // 2, min(USED_CALLS, int(USED_PHASE_S / estimate_s(probe))))
    phases = (dataclasses.replace(ph, calls=calls, label="warm, then used", goal=GOAL_CELL),
              dataclasses.replace(ph, place=WALK, buffers=(), page=n, calls=calls,
                                  label="cold, then used", goal=GOAL_COLD_USED))
    return Program("%s %s" % (kind, format_size(n, "")), (n,), phases)


def cases(names: Sequence[str] = CASES, sizes: Sequence[int] | None = None, *,
          pool: int) -> list[Program]:
    """The hand-written programs (sizes: those of each case by default)."""
    out = []
    for name in names:
        if name == "warm-cold":
            out += [warm_cold(n, pool) for n in (sizes or WARM_COLD_SIZES)]
        elif name in (WRITES, PAD):
            out += [used(name, n) for n in (sizes or USED_SIZES)]
        else:
            raise ValueError("unknown case %r; known: %s" % (name, ", ".join(CASES)))
    return out


MAX_SLOTS = 32768
"""A walk visits at most this many pages of the pool, spread over all of
it (small pages are then apart, each still last touched a pool ago)."""


def pool_geometry(pool: int, n: int) -> tuple[int, int]:
    """(stride, pages) of a walk of n-byte pages over a pool of pool bytes:
    pages aligned as a buffer of the size would be on its own (2 MiB, a huge
    page, from 2 MiB up, else 4 KiB), at most MAX_SLOTS of them."""
    align = 2 * MiB if n >= 2 * MiB else 4 * KiB
    stride = -(-n // align) * align
    stride = max(stride, -(-(pool // MAX_SLOTS) // align) * align)
    return stride, max(1, (pool - n) // stride + 1)
