"""The measurement engine behind ``bench``, ``calibrate`` and machine
profiles (and bench/).

A clear's speed depends on whether the buffer is in the cache, so every
measurement names its *scenario*:

- ``warm``: the same buffer cleared back to back.  A sample is one untimed
  call (so the lines are in the cache whatever the previous candidate left)
  followed by ``calls`` timed calls of the same buffer.
- ``cold``: a different buffer each call.  The calls walk a pool much larger
  than the last-level cache (``cold_pool_size``), one slot after another and
  shared by all candidates, so the buffer a call clears was last touched a
  whole pool ago.

Every candidate at one size runs in one process, interleaved: each repeat
times every candidate once, in an order rotated from repeat to repeat, so
that a change in the machine's load or clock lands on all of them alike.
``calls`` is scaled so that a sample lasts about ``target_s``: a 4 KiB clear
is a loop of thousands of calls, a 256 MiB clear a single call.  Both
scenarios time the same loop over (function, arguments) pairs, so Python's
call overhead is the same in both and for every candidate.
"""

from __future__ import annotations

import ctypes
import dataclasses
import math
import mmap
import statistics
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from .. import _core, _dispatch, _fast, _policy
from .._native import ffi
from .._routines import BY_NAME

HUGE = 2 << 20

#: The competitors: what a Python user would write instead of clearpages.
#: ctypes.memset is the C library's memset behind ctypes' call; the C
#: library's memset without that is the routine libc.
MEMSET = "ctypes.memset"
NUMPY_FILL = "numpy.fill"
NUMPY_ASSIGN = "numpy[...]=0"
AUTO = "auto"
COMPETITORS = (MEMSET, NUMPY_FILL, NUMPY_ASSIGN)

#: Above this many times the largest cache, a warm-up call cannot change
#: the cache state the timed calls see, so it is skipped to save time.
NO_WARMUP_FACTOR = 4

WARM = "warm"
COLD = "cold"
SCENARIOS = (WARM, COLD)

#: The cold pool is at least this large, and at least COLD_POOL_FACTOR times
#: the last-level cache CPUID reports: a clear then finds its buffer evicted
#: even where the cache is bigger than it says (a host's L3 seen by a guest).
COLD_POOL_MIN = 512 << 20
COLD_POOL_FACTOR = 4

#: Cold is measured only where the pool holds this many buffers of the size:
#: with fewer, a clear would find its own recent lines.  Above it every clear
#: of a buffer that size is cold anyway, and warm measures that.
COLD_MIN_SLOTS = 4

#: Untimed calls adaptive ``auto`` makes at a size and scenario of its band
#: before it is timed there (its goal holds "after a few dozen calls").
ADAPT_WARMUP = 48


def have_numpy() -> bool:
    try:
        import numpy  # noqa: F401
    except ImportError:
        return False
    return True


class Buffer:
    """An anonymous mapping, 2 MiB aligned, THP-advised and prefaulted.

    ``ptr`` (cffi ``char *``), ``address`` (int) and ``view`` (memoryview)
    all describe the same ``size`` bytes; ``numpy()`` is a uint8 array over
    them.  Use it as a context manager so the mapping is unmapped when done.
    """

    def __init__(self, size: int, *, huge: bool = True) -> None:
        if size < 1:
            raise ValueError("buffer size must be at least 1 byte, not %r" % (size,))
        self.size = size
        self._map = mmap.mmap(-1, size + HUGE, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
        base = ffi.from_buffer(self._map)
        start = int(ffi.cast("uintptr_t", base))
        self.offset = (-start) % HUGE
        self.huge = False
        if huge and hasattr(mmap, "MADV_HUGEPAGE") and size >= HUGE:
            try:
                self._map.madvise(mmap.MADV_HUGEPAGE)
                self.huge = True
            except OSError:
                pass        # THP off or not compiled in: 4 KiB pages then
        self._base = base
        self.ptr = ffi.cast("char *", base) + self.offset
        self.address = start + self.offset
        self.view = memoryview(self._map)[self.offset:self.offset + size]
        # Prefault: every page exists before anything is timed.
        ctypes.memset(self.address, 1, size)
        self._numpy: Any = None

    def numpy(self) -> Any:
        if self._numpy is None:
            import numpy as np

            self._numpy = np.frombuffer(self._map, dtype=np.uint8, count=self.size,
                                        offset=self.offset)
        return self._numpy

    def close(self) -> None:
        self._numpy = None
        self.view.release()
        del self.ptr
        ffi.release(self._base)
        self._map.close()

    def __enter__(self) -> Buffer:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


Bound = tuple[Callable[..., Any], tuple[Any, ...], dict[str, Any]]
"""(fn, args, kwargs): ``fn(*args, **kwargs)`` clears one buffer."""

_NO_KW: dict[str, Any] = {}


@dataclasses.dataclass(frozen=True)
class Candidate:
    """Something that clears a buffer: a routine, ``auto``, a competitor, or
    a routine run with threads."""

    name: str
    kind: str
    """'routine', 'auto', 'competitor' or 'threads'."""
    bind: Callable[[Buffer, int, int], Bound]
    """bind(buffer, size, offset) -> (fn, args, kwargs): the call clears
    buffer[offset:offset + size]."""


def _bind_routine(name: str) -> Callable[[Buffer, int, int], Bound]:
    def bind(buf: Buffer, size: int, offset: int = 0) -> Bound:
        return _dispatch.state().direct[name], (buf.ptr + offset, size), _NO_KW
    return bind


def _bind_method(name: str) -> Callable[[Buffer, int, int], Bound]:
    def bind(buf: Buffer, size: int, offset: int = 0) -> Bound:
        return _core.clear, (buf.view[offset:offset + size],), {"method": name}
    return bind


def _bind_auto(buf: Buffer, size: int, offset: int = 0) -> Bound:
    return _core.clear, (buf.view[offset:offset + size],), _NO_KW


def _bind_memset(buf: Buffer, size: int, offset: int = 0) -> Bound:
    return ctypes.memset, (buf.address + offset, 0, size), _NO_KW


def _bind_numpy_fill(buf: Buffer, size: int, offset: int = 0) -> Bound:
    return buf.numpy()[offset:offset + size].fill, (0,), _NO_KW


def _bind_numpy_assign(buf: Buffer, size: int, offset: int = 0) -> Bound:
    return buf.numpy()[offset:offset + size].__setitem__, (Ellipsis, 0), _NO_KW


def routine(name: str) -> Candidate:
    """A routine called directly: one cffi call, nothing of clearpages around it."""
    return Candidate(name, "routine", _bind_routine(name))


def method(name: str) -> Candidate:
    """``clearpages.clear(view, method=name)``: the routine as a user calls it,
    with the same per-call path (and jobs for long work) as ``auto``."""
    return Candidate(name, "method", _bind_method(name))


def threaded(name: str, threads: int) -> Candidate:
    """clear(method=name, threads=threads): the native job path."""
    def bind(buf: Buffer, size: int, offset: int = 0) -> Bound:
        return _core.clear, (buf.view[offset:offset + size],), {"method": name,
                                                                "threads": threads}
    return Candidate("%s x%d" % (name, threads), "threads", bind)


def auto() -> Candidate:
    return Candidate(AUTO, "auto", _bind_auto)


def competitor(name: str) -> Candidate:
    binds = {MEMSET: _bind_memset, NUMPY_FILL: _bind_numpy_fill,
             NUMPY_ASSIGN: _bind_numpy_assign}
    if name not in binds:
        raise ValueError("unknown competitor %r; known: %s" % (name, ", ".join(binds)))
    return Candidate(name, "competitor", binds[name])


def streaming_routines() -> list[str]:
    """The non-temporal routines usable here: the policy's order of
    preference, then the rest in the routine table's."""
    from .._policy import STREAMING_PREFERENCE

    usable = [m for m in _core.methods() if not BY_NAME[m].temporal]
    first = [m for m in STREAMING_PREFERENCE if m in usable]
    return first + [m for m in usable if m not in first]


def known_names() -> tuple[str, ...]:
    """Every name ``candidates`` accepts on this machine."""
    extra = COMPETITORS if have_numpy() else (MEMSET,)
    return (AUTO,) + _core.methods() + extra


def candidates(names: Iterable[str] | None = None, *,
               direct: bool = False) -> list[Candidate]:
    """Candidates by name (None: auto, every usable routine, every competitor
    available).  Routines run as ``clear(view, method=name)``, or called
    directly when ``direct``.  A routine this CPU cannot run raises
    UnsupportedMethod; an unknown name, or a numpy competitor without numpy,
    raises ValueError."""
    if names is None:
        names = known_names()
    out = []
    for name in names:
        if name == AUTO:
            out.append(auto())
        elif name in BY_NAME:
            _dispatch.state().check("method %r" % name, name)
            out.append(routine(name) if direct else method(name))
        elif name in COMPETITORS:
            if name != MEMSET and not have_numpy():
                raise ValueError("%s needs numpy, which is not installed" % name)
            out.append(competitor(name))
        else:
            raise ValueError("unknown method %r; use one of: %s"
                             % (name, ", ".join(known_names())))
    return out


@dataclasses.dataclass
class Measurement:
    """One candidate at one size: seconds per call, one entry per repeat."""

    name: str
    kind: str
    size: int
    calls: int
    """Timed calls per sample."""
    samples: list[float]
    scenario: str = WARM

    @property
    def median_s(self) -> float:
        return statistics.median(self.samples)

    def gbps(self, seconds: float) -> float:
        return self.size / seconds / 1e9 if seconds > 0 else math.inf

    @property
    def median(self) -> float:
        """GB/s (10**9 bytes per second) at the median time."""
        return self.gbps(self.median_s)

    @property
    def quartiles(self) -> tuple[float, float]:
        """(low, high) GB/s: the interquartile range of the samples."""
        s = sorted(self.samples)
        if len(s) < 2:
            return self.median, self.median
        q = statistics.quantiles(s, n=4, method="inclusive")
        return self.gbps(q[2]), self.gbps(q[0])

    @property
    def extremes(self) -> tuple[float, float]:
        """(slowest, fastest) GB/s."""
        return self.gbps(max(self.samples)), self.gbps(min(self.samples))

    @property
    def rel_spread(self) -> float:
        """The interquartile range as a fraction of the median."""
        lo, hi = self.quartiles
        med = self.median
        return (hi - lo) / med if med and math.isfinite(med) else 0.0

    def merge(self, other: Measurement) -> None:
        """Pool another round of samples of the same thing."""
        self.samples.extend(other.samples)

    def to_json(self) -> dict[str, Any]:
        lo, hi = self.quartiles
        slow, fast = self.extremes
        return {"name": self.name, "kind": self.kind, "size": self.size,
                "scenario": self.scenario,
                "gbps_median": self.median, "gbps_q1": lo, "gbps_q3": hi,
                "gbps_min": slow, "gbps_max": fast, "calls_per_sample": self.calls,
                "repeats": len(self.samples), "seconds_per_call": list(self.samples)}


def _time_seq(seq: Sequence[Bound]) -> float:
    """Seconds per call over the calls in seq, back to back.

    Every call in a sequence has the same shape, and the loop is chosen by
    it: ``fn(a)``, ``fn(a, method=m)`` and ``fn(*args)`` are written out,
    since splatting a dict of keywords costs more than a 4 KiB clear."""
    clock = time.perf_counter_ns
    _, args0, kw0 = seq[0]
    if len(args0) == 1 and not kw0:
        t0 = clock()
        for fn, (a,), _ in seq:
            fn(a)
    elif len(args0) == 1 and set(kw0) == {"method"}:
        m = kw0["method"]
        t0 = clock()
        for fn, (a,), _ in seq:
            fn(a, method=m)
    elif not kw0:
        t0 = clock()
        for fn, args, _ in seq:
            fn(*args)
    else:
        t0 = clock()
        for fn, args, kw in seq:
            fn(*args, **kw)
    return (clock() - t0) / 1e9 / len(seq)


def cold_pool_size(cpu: Any = None) -> int:
    """Bytes of the pool a cold measurement walks (see COLD_POOL_MIN)."""
    cpu = cpu if cpu is not None else _core.cpu()
    want = max(COLD_POOL_MIN, COLD_POOL_FACTOR * (cpu.last_cache or 0))
    return -(-want // HUGE) * HUGE


def cold_measurable(size: int, pool: int) -> bool:
    """Whether a pool of ``pool`` bytes can make a ``size``-byte clear cold."""
    return size * COLD_MIN_SLOTS <= pool


class _Walk:
    """The slots of a cold pool, handed out in order and shared by every
    candidate, so that each clear finds a buffer last touched a pool ago."""

    def __init__(self, pool: int, size: int) -> None:
        # Slots keep the alignment a buffer of this size would have on its own:
        # 2 MiB (a huge page) from 2 MiB up, else 4 KiB.
        align = HUGE if size >= HUGE else 4096
        self.stride = -(-size // align) * align
        self.slots = max(1, (pool - size) // self.stride + 1)
        self.next = 0

    def take(self, n: int) -> list[int]:
        out = [((self.next + i) % self.slots) * self.stride for i in range(n)]
        self.next = (self.next + n) % self.slots
        return out


def _sequence(c: Candidate, buf: Buffer, size: int, calls: int,
              walk: _Walk | None) -> list[Bound]:
    if walk is None:
        return [c.bind(buf, size, 0)] * calls
    return [c.bind(buf, size, off) for off in walk.take(calls)]


def measure_size(buf: Buffer, size: int, cands: Sequence[Candidate], *,
                 repeat: int = 7, target_s: float = 0.002, budget_s: float = 2.0,
                 min_repeat: int = 3, warmup: bool | None = None,
                 max_calls: int = 1_000_000, scenario: str = WARM,
                 tick: Callable[[], None] | None = None) -> dict[str, Measurement]:
    """Time every candidate at one size, interleaved; {name: Measurement}.

    scenario ``warm`` clears ``buf``'s first ``size`` bytes again and again;
    ``cold`` walks ``buf`` as the pool (it must hold COLD_MIN_SLOTS buffers of
    the size).  ``repeat`` samples each, fewer (not under ``min_repeat``)
    where that many would take longer than ``budget_s``.  ``tick`` is called
    after each repeat (progress).
    """
    if size > buf.size:
        raise ValueError("size %d is larger than the buffer (%d)" % (size, buf.size))
    if scenario not in SCENARIOS:
        raise ValueError("scenario must be one of %s, not %r" % (SCENARIOS, scenario))
    walk = None
    if scenario == COLD:
        if not cold_measurable(size, buf.size):
            raise ValueError("a cold %d-byte clear needs a pool of at least %d bytes, not %d"
                             % (size, size * COLD_MIN_SLOTS, buf.size))
        walk = _Walk(buf.size, size)
        warmup = False
    elif warmup is None:
        last = _core.cpu().last_cache
        warmup = not last or size <= NO_WARMUP_FACTOR * last
    # Adaptive auto is judged once it has seen the workload ("after a few
    # dozen calls"): in its band it first makes ADAPT_WARMUP untimed calls of
    # this size and scenario, as a program's loop would.
    if _policy.Decision(*_fast.decide(size)).adaptive:
        for c in cands:
            if c.kind == "auto":
                _time_seq(_sequence(c, buf, size, ADAPT_WARMUP, walk))
    calls = {}
    cost = 0.0
    for c in cands:
        per = _time_seq(_sequence(c, buf, size, 1, walk))
        n = 1
        while per * n < target_s / 8 and n < max_calls:
            n = min(max_calls, n * 8)
            per = _time_seq(_sequence(c, buf, size, n, walk))
        calls[c.name] = max(1, min(max_calls, int(target_s / per) if per > 0 else max_calls))
        cost += per * (calls[c.name] + (1 if warmup else 0))
    n = max(1, repeat)
    if cost * n > budget_s:
        n = max(min(min_repeat, n), int(budget_s / cost) if cost > 0 else n)
    results = {c.name: Measurement(c.name, c.kind, size, calls[c.name], [], scenario)
               for c in cands}
    order = list(cands)
    for r in range(n):
        shift = r % len(order)
        for c in order[shift:] + order[:shift]:
            seq = _sequence(c, buf, size, calls[c.name], walk)
            if warmup:
                fn, args, kw = seq[0]
                fn(*args, **kw)
            results[c.name].samples.append(_time_seq(seq))
            del seq
        if tick is not None:
            tick()
    return results


Cases = dict[str, dict[str, "Measurement"]]
"""{scenario: {candidate name: Measurement}} at one size."""


def measure(sizes: Sequence[int], cands: Sequence[Candidate], *, repeat: int = 7,
            target_s: float = 0.002, budget_s: float = 2.0,
            scenarios: Sequence[str] = SCENARIOS,
            progress: Callable[[int, int, int], None] | None = None,
            buffer: Buffer | None = None) -> list[Cases]:
    """measure_size for each size and scenario over one mapping: the cold
    pool (``cold_pool_size``), or the largest size if that is larger.  Cold
    is left out at sizes the pool cannot make cold (``cold_measurable``).

    progress(done, total, size) is called as repeats finish (total is an
    upper bound: repeats may be cut to fit the budget)."""
    if not sizes:
        return []
    for sc in scenarios:
        if sc not in SCENARIOS:
            raise ValueError("scenario must be one of %s, not %r" % (SCENARIOS, sc))
    own = buffer is None
    need = max(sizes)
    if COLD in scenarios:
        need = max(need, cold_pool_size())
    buf = buffer or Buffer(need)
    plan = [(size, sc) for size in sizes for sc in scenarios
            if sc == WARM or cold_measurable(size, buf.size)]
    total = len(plan) * max(1, repeat)
    done = [0]
    out: dict[int, Cases] = {size: {} for size in sizes}
    try:
        for size, sc in plan:
            def tick(size: int = size) -> None:
                done[0] += 1
                if progress is not None:
                    progress(done[0], total, size)
            start = done[0]
            out[size][sc] = measure_size(buf, size, cands, repeat=repeat, target_s=target_s,
                                         budget_s=budget_s, scenario=sc, tick=tick)
            # Repeats cut by the budget: count them as done for the bar.
            done[0] = start + max(1, repeat)
            if progress is not None:
                progress(done[0], total, size)
    finally:
        if own:
            buf.close()
    return [out[size] for size in sizes]


def differs(a: Measurement, b: Measurement, floor: float = 0.03) -> float:
    """The noise level for comparing a and b: the larger relative IQR,
    not under ``floor``."""
    return max(floor, a.rel_spread, b.rel_spread)


# ---- verdicts -----------------------------------------------------------------
#
# One rule judges every goal stated as a ratio measured round by round (the
# program benchmarks, generated and hand-written): the figure is the median
# over rounds of the per-round ratios, and the spread beside it their
# interquartile range.  The median decides; the spread only says when the
# rounds cannot tell the answer, and then the verdict says so instead of
# passing.  The rounds' spread does not narrow as rounds are added, so it
# alone would leave a noisy figure unmeasured forever: the verdict also
# bounds the median itself (median_bounds), which more rounds do narrow,
# and a median those bounds put on one side of the goal is judged, however
# wide the rounds.

OK = "ok"
MISS = "miss"
UNMEASURED = "unmeasured, retake"
OUTCOMES = (OK, MISS, UNMEASURED)

MIN_ROUNDS = 3
"""Fewer rounds have no spread to speak of: such a figure is unmeasured."""
SPREAD_FLOOR = 0.01
"""A median within this of the goal is told from it by a spread narrower
than this on either side (a tight measurement just below the goal is a miss,
not a retake)."""


MEDIAN_CONFIDENCE = 0.90
"""The confidence of each of median_bounds' bounds."""


def median_bounds(xs: Sequence[float],
                  confidence: float = MEDIAN_CONFIDENCE) -> tuple[float, float]:
    """Bounds on the median of what xs sample, whatever their distribution:
    the k-th smallest and the k-th largest of xs, k the largest count with
    P(Binomial(n, 1/2) < k) <= 1 - confidence, the chance that fewer than k
    of n rounds fall below the true median.  Each bound holds with at least
    ``confidence`` (both together with 2 * confidence - 1); with too few
    rounds for that (3 at 0.90) they are the smallest and the largest.
    Unlike the rounds' own quartiles, they close in as rounds are added
    (about as 1/sqrt(n))."""
    s = sorted(x for x in xs if math.isfinite(x))
    n = len(s)
    if not n:
        return math.nan, math.nan
    k, below = 0, 0.0
    while k < n:
        below += math.comb(n, k) / 2.0 ** n      # P(exactly k of n below)
        if below > 1.0 - confidence:
            break
        k += 1
    k = min(max(k, 1), (n + 1) // 2)
    return s[k - 1], s[n - k]


def quartiles(xs: Sequence[float]) -> tuple[float, float]:
    """(Q1, Q3) of xs, inclusive method; a lone value is both."""
    s = sorted(xs)
    if len(s) < 2:
        return (s[0], s[0]) if s else (0.0, 0.0)
    q = statistics.quantiles(s, n=4, method="inclusive")
    return q[0], q[2]


@dataclasses.dataclass(frozen=True)
class GoalVerdict:
    """A goal judged on per-round ratios: ``subject`` at ``ratio`` of
    ``reference`` (the median over ``rounds`` rounds), ``q1``-``q3`` the
    interquartile range of the rounds."""

    subject: str
    reference: str
    goal: float
    ratio: float
    q1: float
    q3: float
    rounds: int
    spread: str = "rounds"
    """What q1-q3 spans: the rounds, or for a figure over programs the
    programs resampled."""
    lo: float = math.nan
    hi: float = math.nan
    """Bounds on the median (median_bounds of the rounds); NaN where the
    figure has none (one over programs)."""

    @property
    def pinned(self) -> bool:
        """Whether the median's bounds put it on one side of the goal: more
        rounds would very likely leave the verdict as it is."""
        return math.isfinite(self.lo) and math.isfinite(self.hi) and \
            (self.lo >= self.goal or self.hi < self.goal)

    @property
    def in_doubt(self) -> bool:
        """Unmeasured, or not pinned: more rounds could turn the verdict."""
        return self.outcome == UNMEASURED or not self.pinned

    @property
    def outcome(self) -> str:
        """ok: the median at or above the goal; miss: below it; unmeasured
        where there are too few rounds, or where the rounds reach past the
        goal as far as the median is from it on both sides (the goal and its
        mirror image about the median both inside the interquartile range)
        and the median's bounds do not pin it to one side (see pinned)."""
        if self.rounds < MIN_ROUNDS or not math.isfinite(self.ratio):
            return UNMEASURED
        reach = max(abs(self.ratio - self.goal), SPREAD_FLOOR)
        if self.ratio - self.q1 > reach and self.q3 - self.ratio > reach \
                and not self.pinned:
            return UNMEASURED
        return OK if self.ratio >= self.goal else MISS

    @property
    def ok(self) -> bool:
        return self.outcome == OK

    def text(self) -> str:
        """'auto 0.93 of the per-phase oracle (goal 0.97; rounds 0.90-0.95): miss'."""
        return "%s %.2f of %s (goal %.2f; %s %.2f-%.2f): %s" % (
            self.subject, self.ratio, self.reference, self.goal, self.spread, self.q1,
            self.q3, self.outcome)

    def mark(self) -> str:
        """The outcome in a table cell: '' for ok, ' miss', ' ?' (unmeasured)."""
        return {OK: "", MISS: " miss", UNMEASURED: " ?"}[self.outcome]

    def to_json(self) -> dict[str, Any]:
        return {"subject": self.subject, "reference": self.reference, "goal": self.goal,
                "ratio": self.ratio, "q1": self.q1, "q3": self.q3, "rounds": self.rounds,
                "median_bounds": [self.lo, self.hi] if math.isfinite(self.lo) else None,
                "outcome": self.outcome}


def judge_rounds(ratios: Sequence[float], goal: float, subject: str = AUTO,
                 reference: str = "the best") -> GoalVerdict:
    """The package's verdict on a goal from per-round ratios (see GoalVerdict)."""
    xs = [x for x in ratios if math.isfinite(x)]
    ratio = statistics.median(xs) if xs else math.nan
    q1, q3 = quartiles(xs) if xs else (math.nan, math.nan)
    lo, hi = median_bounds(xs)
    return GoalVerdict(subject, reference, goal, ratio, q1, q3, len(xs), lo=lo, hi=hi)
