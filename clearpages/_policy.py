"""The policy's numbers and reasons: the thresholds, and why a plan is what it is.

The rules themselves (which routine for a size, how many threads, what unit
of work, the hot range's routine, when the learner is asked) are written
once, in C (``csrc/core/policy.c``): every call runs them, and
:func:`decision`, :func:`plan` and ``cp.plan()`` ask them.  This module
computes the numbers they read, from a CPU description, as a pure function
tested with synthetic CPUs (:func:`default_thresholds`,
:func:`native_policy`), and puts the answers into sentences
(:func:`explain`, from the decision's reason codes).  The thresholds are
named data with the reason beside them, computed from the caches (as
glibc's dl-cacheinfo.h does) unless a calibration file measured better ones.
"""

from __future__ import annotations

import dataclasses
from typing import Any, NamedTuple, Union

from ._cpu import CPU
from ._native import ffi, lib
from ._routines import BY_NAME, ROUTINES
from ._units import KiB, MiB, format_size

#: The unit of work while the speed of the memory is unknown: a job's first
#: unit per thread before this process has timed the routine, and the unit
#: for memory not yet faulted in, small enough that a cold one ends within a
#: slice's order (as Linux clears huge pages in 32 MiB chunks between
#: rescheduling points).  Otherwise units are sized by time.  Work of at most
#: one unit on one thread is a single direct call (Thresholds.chunk and
#: Plan.chunk keep the public name).
#: The figures: docs/results.md, "The measurements behind the code's numbers".
DEFAULT_UNIT = 32 * MiB

#: glibc's rep_stosb_threshold (2.32+): below 2 KiB the start-up cost of
#: rep stosb loses to vector stores, which memset uses.
GLIBC_REP_STOSB_THRESHOLD = 2 * KiB

#: Below this total, a second thread costs more (thread start, a second cold
#: core) than it gains.  Calibration measures it; this is the default.
DEFAULT_THREAD_MIN = 64 * MiB

#: Below this many bytes a clear keeps the GIL: so short a clear costs about
#: what giving the GIL up and taking it back does.  Larger clears release
#: it, so other Python threads run meanwhile.
GIL_RELEASE_MIN = 64 * KiB

#: Streaming routines in order of preference: the widest store first.
STREAMING_PREFERENCE = ("avx512_nt", "avx2_nt", "movnti")

#: A threshold no size reaches: plan() and clear() take at most 2**56 bytes
#: (_config.MAX_SIZE), calibration files at most 2**62, and
#: ``python -m clearpages info`` shows it as "never".
NEVER = 1 << 62

#: A clear of at least this many bytes first looks for pages never touched
#: (private anonymous memory that is neither present nor swapped, which
#: already reads as zero) and leaves them alone (csrc/core/untouched.c).
#: From here the look costs a resident buffer at most a few percent of its
#: clear; below it a clear of untouched memory costs little either way.
UNTOUCHED_MIN = 16 * MiB

#: Pieces shorter than this on average (a strided view of small elements,
#: many short buffers) get memset and are cleared one by one as they come, on
#: the calling thread, not as a job (csrc/core/policy.c states the rule;
#: run.c runs it).
PIECE_FINE = int(lib.CP_POLICY_PIECE_FINE)
#: Pieces shorter than this on average (the rows of a 2-D slice) are cleared
#: one by one too, by the routine the total chose, on one thread, where the
#: pages are not looked at for untouched ones.
PIECE_DIRECT = int(lib.CP_POLICY_PIECE_DIRECT)

Threads = Union[int, str]


@dataclasses.dataclass(frozen=True)
class Thresholds:
    """The numbers ``auto`` decides by, each with where it came from."""

    vector_max: int
    """Up to this many bytes per piece: the C library's memset (vector stores)."""
    nt_min: int
    """At or above this many bytes in all: the streaming routine."""
    temporal: str
    """The routine between vector_max and nt_min."""
    streaming: str
    """The non-temporal routine at or above nt_min."""
    long_min: int = NEVER
    """At or above this many bytes a piece, on one thread: ``long``."""
    long: str = ""
    """The routine for very long extents ('' = streaming)."""
    chunk: int = DEFAULT_UNIT
    """The unit of work (see ``unit``): the public field keeps its first name."""
    thread_min: int = DEFAULT_THREAD_MIN
    max_threads: int = 0
    """0: as many as the process may run on."""
    source: str = "default"
    """'default', 'calibration: <path>' or 'CLEARPAGES_NT_THRESHOLD'."""
    adapt_min: int = 0
    """Single clears of adapt_min <= n < adapt_max bytes: adaptive auto times them
    and learns which of temporal and streaming wins (0, 0: no such band)."""
    adapt_max: int = 0
    hot_max: int = NEVER
    """clear(buf, hot=True) clears at most the last hot_max bytes with ordinary
    stores, the rest with the streaming routine."""
    hot_max_other: int = NEVER
    """The same for a buffer adaptive auto has not seen cleared lately (at
    most hot_max)."""
    why: tuple[tuple[str, str], ...] = ()
    """(field, reason) for each threshold, shown by ``python -m clearpages info``."""

    @property
    def unit(self) -> int:
        """The unit of work, the same number as ``chunk``."""
        return self.chunk

    def as_json(self) -> dict[str, Any]:
        """The fields as JSON values, with None (null) for "no such limit":
        a size no clear reaches (NEVER), no routine for long extents ('')
        and no cap on threads (max_threads 0); ``why`` as an object."""
        out: dict[str, Any] = {}
        for f in dataclasses.fields(self):
            v = getattr(self, f.name)
            if f.name == "why":
                v = dict(v)
            elif (isinstance(v, int) and v >= NEVER) or (f.name == "long" and not v) \
                    or (f.name == "max_threads" and v == 0):
                v = None
            out[f.name] = v
        out["unit"] = self.chunk
        return out

    def reason(self, field: str) -> str:
        """Why the named threshold is where it is, in one sentence
        (``info`` shows these): its own reason where one was given, else
        where the thresholds came from (``source``).  field: a field of
        these thresholds ("nt_min", "vector_max", "streaming", ...; "unit"
        for ``chunk``) or "adapt" (the adaptive band, adapt_min..adapt_max).
        Any other name is a KeyError that lists the known ones."""
        names = self.reason_names()
        if field not in names:
            raise KeyError("no threshold is called %r; the known ones: %s"
                           % (field, ", ".join(names)))
        why = dict(self.why)
        return why.get(field) or why.get("chunk" if field == "unit" else "", self.source)

    def reason_names(self) -> tuple[str, ...]:
        """The names :meth:`reason` takes."""
        fields = tuple(f.name for f in dataclasses.fields(self) if f.name not in ("why",))
        extra = ("unit", "adapt") + tuple(k for k, _ in self.why)
        return fields + tuple(dict.fromkeys(k for k in extra if k not in fields))


@dataclasses.dataclass(frozen=True)
class Plan:
    """What ``method="auto"`` does for a piece of work."""

    method: str
    threads: int
    chunk: int
    """Bytes: up to this much on one thread is one direct call; a job's first
    unit per thread while the routine's speed is not yet measured, and its
    unit over memory not yet faulted in.  Other units are sized by time."""
    reason: str
    nbytes: int = 0
    count: int = 1
    hot_method: str | None = None
    """With hot=: the routine of the hot range (cleared last)."""
    learned: str = ""
    """What adaptive auto has learned for this size and why it may run the
    other routine (empty from _policy.plan(), which describes the static choice)."""
    evidence: tuple[str, ...] = ()
    """Why each threshold the reason names is where it is ("nt_min 16 MiB:
    half the 32 MiB last-level cache: ..."), one line a threshold."""
    skips_untouched: bool = False
    """The clear first looks for pages never touched and leaves them alone
    (see UNTOUCHED_MIN); ``untouched`` says why or why not."""
    untouched: str = ""
    one_by_one: bool = False
    """The pieces are cleared one by one as they come, on the calling thread
    (under PIECE_DIRECT a piece on average), not as a job in time slices."""

    @property
    def unit(self) -> int:
        """The unit of work, the same number as ``chunk`` (the public field
        keeps its first name)."""
        return self.chunk

    def __str__(self) -> str:
        return "%s, %d thread%s, %s first unit: %s" % (
            self.method, self.threads, "" if self.threads == 1 else "s",
            format_size(self.chunk), self.reason)


def usable(name: str, cpu: CPU, built: frozenset[str]) -> bool:
    """Can this CPU (after masking) run the routine, and was it built?"""
    r = BY_NAME[name]
    return name in built and r.requires <= cpu.features


#: The temporal / streaming crossover of the static choice (adaptation off,
#: a process's first calls, and every clear the learner is not asked about:
#: clear_many, clear_pages, threads).  It knows nothing of a buffer's
#: history, so it takes the choice that cannot lose much against memset in
#: either case: ordinary stores up to what the cache may still hold of a
#: buffer cleared again, as memset itself uses them; streaming from there.
#: Streaming a warm buffer below that costs up to 2.8x in the clear alone and
#: 2-5x when the program reads it next; a cold one cleared with ordinary
#: stores costs what memset costs (1.5-3x streaming's clear, which adaptive
#: auto learns).  What the cache holds: a last-level cache of at most
#: NT_MIN_WHOLE_L3 and NT_MIN_OWN_L2S L2s (a Zen 2 core complex's, 16 MiB
#: over 512 KiB L2s) kept such a buffer up to nearly its whole size on the
#: guest measured (warm, the clear alone: 8 MiB at 2.8x streaming's speed,
#: 12 MiB at 1.6x, 14 MiB at 0.92x): ordinary stores up to the L3.  Larger
#: ones kept half (Zen 4 and Zen 5 guests, 32 MiB over 1 MiB L2s: 16 MiB at
#: 0.93x and 1.2x streaming's speed) or less, where the L3 is shared by
#: more cores than one buffer can count on (a server's, reported whole to a
#: guest; the Zen 3 guests' 32 MiB over 512 KiB L2s kept no 16 MiB buffer):
#: half the L3, at most NT_MIN_L2_FACTOR L2s.  The profiles in profiles/ replay this
#: (tests/test_replay.py).
#: The figures: docs/results.md, "The measurements behind the code's numbers".
NT_MIN_WHOLE_L3 = 16 * MiB
NT_MIN_OWN_L2S = 32
NT_MIN_L3_DIVISOR = 2
NT_MIN_L2_FACTOR = 16
NT_MIN_UNKNOWN = 4 * MiB
"""Where no cache size is known: half of 8 MiB, the last-level cache the
adaptive band assumes then."""

#: hot=True, "I will use all of this next": ordinary stores for what can stay
#: in the cache beside the program's other data, half the last-level cache,
#: cleared last; streaming stores for the head before it, which the
#: program's reads would find evicted anyway.
#: The figures: docs/results.md, "The measurements behind the code's numbers".
HOT_WHOLE_L3_DIVISOR = 2
HOT_WHOLE_UNKNOWN_L3 = 4 * MiB

#: hot=True of a buffer the learner has not seen cleared within the last
#: last-level cache's worth of clears (the learner's "other" buffers): it is
#: probably not in the cache, and an ordinary-store clear reads each of its
#: lines from memory before it writes them, so a smaller tail is worth it:
#: a quarter of the last-level cache.  Without adaptation nothing is known
#: of a buffer's history, and hot_max holds for all.
#: The figures: docs/results.md, "The measurements behind the code's numbers".
HOT_OTHER_L3_DIVISOR = 4

#: On AMD before Zen 4 with ERMS, rep stosb switches to streaming stores by
#: itself for very long lengths and then beats the vector streaming stores;
#: only where each piece is that long (the microcode sees one extent).  On
#: Zen 4 the vector streaming stores stay ahead at every length; on Zen 5
#: the two tie.
#: The figures: docs/results.md, "The measurements behind the code's numbers".
LONG_REP_STOSB_L3_FACTOR = 16

#: Zen 4's models in family 0x19 (Genoa, Raphael, Phoenix, Bergamo and
#: Siena); the rest of the family is Zen 3.
ZEN4_MODELS = ((0x10, 0x1F), (0x60, 0x7F), (0xA0, 0xAF))


def long_rep_stosb(cpu: CPU) -> bool:
    """Does rep stosb beat the vector streaming stores on long extents here?
    AMD before Zen 4, where it was measured (Zen 3); not Zen 4 (measured:
    the vector stores lead), nor Zen 5 (measured: a tie), nor what comes
    after (unmeasured: the vector stores, as elsewhere)."""
    if not cpu.is_amd or cpu.family > 0x19:
        return False
    return cpu.family < 0x19 or not any(lo <= cpu.model <= hi for lo, hi in ZEN4_MODELS)


def _kept(cpu: CPU) -> tuple[int, str]:
    """Half the last-level cache, at most NT_MIN_L2_FACTOR L2s, and why."""
    if not cpu.last_cache:
        return NT_MIN_UNKNOWN, ("cache sizes unknown: %s, half of an 8 MiB last-level "
                                "cache" % format_size(NT_MIN_UNKNOWN))
    half = cpu.last_cache // NT_MIN_L3_DIVISOR
    most = NT_MIN_L2_FACTOR * cpu.l2 if cpu.l2 and cpu.l2 < cpu.last_cache else 0
    if most and most < half:
        return most, ("%d L2s (%dx %s), below half the %s last-level cache, which is shared "
                      "by more cores than one buffer can count on: below it ordinary stores, "
                      "as memset, which lose nothing on a buffer still in the cache; from it "
                      "streaming" % (NT_MIN_L2_FACTOR, NT_MIN_L2_FACTOR, format_size(cpu.l2),
                                     format_size(cpu.last_cache)))
    return half, ("half the %s last-level cache: below it a buffer cleared again may still "
                  "be in the cache, and ordinary stores, as memset, lose nothing there; from "
                  "it streaming, which wins warm as well as cold" % format_size(cpu.last_cache))


def keeps_whole_l3(cpu: CPU) -> bool:
    """Whether the L3 is small enough to keep a buffer cleared again up to
    nearly its whole size (at most NT_MIN_WHOLE_L3 and NT_MIN_OWN_L2S L2s):
    the static threshold is the whole L3 there, and adaptive auto times a
    recent buffer of exactly the L3's size (the learner's window_timed)."""
    return bool(cpu.l3 and cpu.l2 and cpu.l3 <= min(NT_MIN_WHOLE_L3, NT_MIN_OWN_L2S * cpu.l2))


def _nt_min(cpu: CPU) -> tuple[int, str]:
    if keeps_whole_l3(cpu):
        return cpu.l3, ("the %s L3, at most %s and %d L2s: a cache that small kept a buffer "
                        "cleared again up to nearly its whole size, where streaming is slower "
                        "than memset; below it ordinary stores, as memset, which lose nothing "
                        "there; from it streaming, which wins warm as well as cold"
                        % (format_size(cpu.l3), format_size(NT_MIN_WHOLE_L3), NT_MIN_OWN_L2S))
    return _kept(cpu)


def recent_threshold(cpu: CPU) -> int:
    """The largest buffer cleared lately that adaptive auto takes as in the
    cache without a clock: half the last-level cache, at most
    NT_MIN_L2_FACTOR L2s.  Below the static threshold where that is the
    whole L3: the learner checks a larger buffer's clears instead of
    presuming it kept (a held size), and times whether the program uses
    it."""
    return _kept(cpu)[0]


def default_thresholds(cpu: CPU, built: frozenset[str]) -> Thresholds:
    """Thresholds from the CPU's features and cache sizes, never measured.

    Each rule names its evidence: the machine profiles in the repository's
    ``profiles/`` corpus, which tests/test_replay.py replays this policy
    against."""
    why = []
    streaming = next((m for m in STREAMING_PREFERENCE if usable(m, cpu, built)), None)
    if streaming is None:
        # A portable build: memset is all there is.  (Or CLEARPAGES_DISABLE
        # masks every feature a streaming routine needs, sse2 among them:
        # memset then, as in a portable build.)
        if built <= {"libc"}:
            none, only = ("no streaming routine in this build",
                          "memset is the only routine in this build")
        else:
            none = ("no streaming routine: CLEARPAGES_DISABLE masks every feature one "
                    "needs (%s)" % ", ".join(sorted(cpu.disabled)))
            only = "memset, as in a portable build: %s" % none
        return Thresholds(vector_max=NEVER, nt_min=NEVER, temporal="libc",
                          streaming="libc",
                          why=(("streaming", none),
                               ("vector_max", only), ("nt_min", only), ("temporal", only)))
    why.append(("streaming", "%s: the widest streaming store this CPU has" % streaming))

    long_min, long = NEVER, ""
    if "erms" in cpu.features and usable("rep_stosb", cpu, built):
        temporal = "rep_stosb"
        # glibc's rep_stosb_threshold, on AMD too (measured: docs/results.md).
        vector_max = GLIBC_REP_STOSB_THRESHOLD
        why.append(("vector_max", "glibc's rep_stosb_threshold, 2 KiB: its memset keeps "
                    "to vector stores up to it, rep stosb above"))
        why.append(("temporal", "rep_stosb: ERMS%s makes it the fastest temporal store"
                    % ("/FSRM" if "fsrm" in cpu.features else "")))
        if long_rep_stosb(cpu) and cpu.last_cache:
            long_min, long = LONG_REP_STOSB_L3_FACTOR * cpu.last_cache, "rep_stosb"
            why.append(("long_min", "%dx the %s L3: AMD's rep stosb streams by itself over "
                        "long extents and beats %s there (measured on Zen 3)"
                        % (LONG_REP_STOSB_L3_FACTOR, format_size(cpu.last_cache), streaming)))
            why.append(("long", "rep_stosb in one call per extent on AMD before Zen 4 "
                        "(see long_min)"))
    else:
        temporal = "libc"
        vector_max = NEVER
        why.append(("temporal", "libc memset: no ERMS, so rep stosb is slow to start"))
        why.append(("vector_max", "no ERMS: memset's vector stores up to the streaming threshold"))
    if not long:
        why.append(("long", "none: the streaming routine at every length"))
        why.append(("long_min", "never: no routine beats %s on long extents here%s" % (
            streaming, " (Zen 4 and later: rep stosb 0.89 of it at 512 MiB-1 GiB on Zen 4, "
            "0.96-1.00 on Zen 5)" if cpu.is_amd and "erms" in cpu.features else "")))
    nt_min, nt_why = _nt_min(cpu)
    why.append(("nt_min", nt_why))
    if cpu.last_cache:
        hot_max = cpu.last_cache // HOT_WHOLE_L3_DIVISOR
        why.append(("hot_max", "half the %s last-level cache: what a program's next "
                    "reads can still find there" % format_size(cpu.last_cache)))
        hot_other = cpu.last_cache // HOT_OTHER_L3_DIVISOR
        why.append(("hot_max_other", "a quarter of the %s last-level cache, for a buffer not "
                    "cleared within the last %s of clears: probably cold, and an ordinary-store "
                    "clear reads each line in first (measured on a Zen 4 guest: 0.97-1.0 of the "
                    "best cold at 16-128 MiB, 0.91-0.98 with hot_max)"
                    % (format_size(cpu.last_cache), format_size(cpu.last_cache))))
    else:
        hot_max = HOT_WHOLE_UNKNOWN_L3
        why.append(("hot_max", "last-level cache unknown: %s" % format_size(hot_max)))
        hot_other = hot_max // (HOT_OTHER_L3_DIVISOR // HOT_WHOLE_L3_DIVISOR)
        why.append(("hot_max_other", "last-level cache unknown: %s" % format_size(hot_other)))
    return Thresholds(vector_max=vector_max, nt_min=nt_min, temporal=temporal,
                      streaming=streaming, long_min=long_min, long=long, hot_max=hot_max,
                      hot_max_other=hot_other, why=tuple(why))


#: Floor of the adaptive band: a page.  A cold page streamed costs 0.5-0.8
#: of its ordinary-store clear (walks of 4-14 KiB buffers on a Zen 3 guest,
#: clear only), and the learner's spans at these sizes are on the monotonic
#: clock (csrc/core/adapt.c, CPU_SPAN_READS), whose reads cost less than a
#: tenth of such a clear.  Below a page, what either choice could gain is
#: the order of the call itself.
ADAPT_FLOOR = 4 * KiB


def with_adaptive_band(cpu: CPU, th: Thresholds) -> Thresholds:
    """th with the band of sizes where adaptive auto chooses by measurement.

    The rule: from a page to 4x the last-level cache, wherever the temporal
    and the streaming routine trade places (a buffer used again at once
    wants ordinary stores, a pool of cold pages left alone wants streaming
    ones, and only the program's own clears tell which it has).  Above a
    few times the last-level cache no buffer can still be cached, so the
    static policy stands.  Timing costs what sampling leaves of it
    (csrc/core/adapt.h).  An unknown last-level cache counts as 8 MiB.
    The figures: docs/results.md, "The measurements behind the code's numbers".
    """
    if th.temporal == th.streaming:
        return dataclasses.replace(th, adapt_min=0, adapt_max=0, why=th.why + (
            ("adapt", "nothing to choose: %s is the only routine" % th.temporal),))
    lo = ADAPT_FLOOR
    last = cpu.last_cache or 8 * MiB
    hi = max(lo, 4 * last)
    return dataclasses.replace(th, adapt_min=lo, adapt_max=hi, why=th.why + (
        ("adapt", "from %s to 4x the %s last-level cache: where buffers used next and "
         "buffers left alone want different stores" % (format_size(lo),
                                                        format_size(last))),))


def with_nt_threshold(th: Thresholds, nt_min: int) -> Thresholds:
    why = tuple((k, v) for k, v in th.why if k != "nt_min")
    return dataclasses.replace(th, nt_min=nt_min, source=th.source,
                               why=why + (("nt_min", "CLEARPAGES_NT_THRESHOLD"),))


#: Each routine's index in the routine table: how the native policy names it.
INDEX = {r.name: i for i, r in enumerate(ROUTINES)}


def native_policy(cpu: CPU, th: Thresholds, forced: str | None = None,
                  adapt: bool = False) -> Any:
    """The ``struct cp_policy`` (csrc/core/policy.h) for these thresholds: the
    numbers the native rules read.  adapt: whether adaptive auto is on (the
    dispatch state's ``adapt_active``); off, no size asks the learner."""
    p = ffi.new("struct cp_policy *")
    p.memset = INDEX["libc"]
    p.temporal = INDEX[th.temporal]
    p.streaming = INDEX[th.streaming]
    p.long_routine = INDEX[th.long] if th.long else lib.CP_POLICY_NONE
    p.forced = INDEX[forced] if forced is not None else lib.CP_POLICY_NONE
    p.temporal_set = sum(1 << i for i, r in enumerate(ROUTINES) if r.temporal)
    p.vector_max = min(th.vector_max, NEVER)
    p.nt_min = min(th.nt_min, NEVER)
    p.long_min = min(th.long_min, NEVER)
    p.unit = min(th.chunk, NEVER)
    p.thread_min = min(th.thread_min, NEVER)
    p.max_threads = th.max_threads
    p.cores = cpu.cores
    p.adapt_min, p.adapt_max = th.adapt_min, th.adapt_max
    p.adapt_active = int(bool(adapt))
    p.hot_max = min(th.hot_max, NEVER)
    p.hot_max_other = min(th.hot_max_other, th.hot_max, NEVER)
    p.untouched_min = UNTOUCHED_MIN
    return p


class Decision(NamedTuple):
    """What the native policy decided for one call, and the reason codes of
    the rules that decided it (``CP_WHY_*`` and the rest, csrc/core/policy.h)."""

    method: str
    threads: int
    unit: int
    hot_method: str | None
    adaptive: bool
    """The learner chooses between the two roles' routines and the clear is timed."""
    roles: tuple[str, str]
    """The learner's (temporal, streaming) routines for this size."""
    hot_nbytes: int = 0
    """The hot range's length (with hot=True: the tail cleared hot)."""
    skip_untouched: bool = False
    """The pages never touched are looked for and left alone first."""
    why: int = 0
    """Which rule chose the routine: a ``CP_WHY_*`` code (ROUTE_REASONS)."""
    hot_why: int = 0
    """How long the hot part is: a ``CP_HOT_PART_*`` code (HOT_REASONS)."""
    threads_why: int = 0
    """``CP_THREADS_*``: the caller's number, or how "auto" counted."""
    adapt_why: int = 0
    """``CP_LEARNER_*``: whether the learner is asked, and if not, why."""
    untouched_why: int = 0
    """``CP_UNTOUCHED_*``: whether untouched pages are looked for, and why."""
    learned: int = 0
    """The learner's own reason code for the role it runs (CP_LEARNED_NONE
    from the policy)."""
    one_by_one: bool = False
    """Pieces under PIECE_DIRECT on average, on one thread, their pages not
    looked at for untouched ones (under PIECE_FINE: whatever the look):
    cleared one by one as they come, not as a job."""


def hot_hint(hot: int | bool | None) -> tuple[int, int]:
    """(the native policy's hint, the range's length) for what decide and
    plan take: None, True, False or a hot range's length."""
    if hot is None:
        return lib.CP_POLICY_HOT_NONE, 0
    if hot is True:
        return lib.CP_POLICY_HOT_ALL, 0
    if hot is False:
        return lib.CP_POLICY_NOT_SOON, 0
    return lib.CP_POLICY_HOT_RANGE, int(hot)


def decision(policy: Any, nbytes: int, count: int = 1, threads: Threads = 1,
             method: str = "auto", hot_nbytes: int | bool | None = None) -> Decision:
    """The native rules' answer for a policy built by :func:`native_policy`
    (plan() asks clearpages._fast the same question about the policy it was
    configured with).  hot_nbytes: a hot range's length, or True / False,
    the whole-buffer hints (True: of a buffer cleared lately, the learner's
    history is not asked)."""
    out = ffi.new("struct cp_decision *")
    hint, hot_n = hot_hint(hot_nbytes)
    lib.cp_policy_decide(policy, nbytes, count,
                         lib.CP_POLICY_AUTO if method == "auto" else INDEX[method],
                         lib.CP_POLICY_THREADS_AUTO if threads == "auto" else int(threads),
                         hint, hot_n, out)
    return Decision(ROUTINES[out.routine].name, int(out.threads), int(out.unit),
                    ROUTINES[out.hot_routine].name if out.hot_routine >= 0 else None,
                    bool(out.adaptive),
                    (ROUTINES[out.roles[0]].name, ROUTINES[out.roles[1]].name),
                    int(out.hot_nbytes), bool(out.skip_untouched), int(out.why),
                    int(out.hot_why), int(out.threads_why), int(out.adapt_why),
                    int(out.untouched_why), int(out.learned), bool(out.one_by_one))


def plan(cpu: CPU, th: Thresholds, nbytes: int, count: int = 1, *,
         threads: Threads = 1, forced: str | None = None,
         hot: tuple[int, int] | bool | None = None) -> Plan:
    """The plan for clearing nbytes in count pieces with these thresholds (a
    synthetic CPU's, a calibration candidate's): the native rules' decision,
    explained.

    hot: a (start, stop) range of the nbytes to leave cache-hot; the plan's
    method is then the routine of the rest, hot_method that of the range.
    True: all of it is used next; False: not soon."""
    d = decision(native_policy(cpu, th, forced), nbytes, count, threads,
                 hot_nbytes=hot if hot is None or isinstance(hot, bool) else hot[1] - hot[0])
    return explain(th, d, nbytes, count, forced=forced)


def _evidence(th: Thresholds, *fields: str) -> tuple[str, ...]:
    """Why each threshold a reason names is where it is, one line each."""
    out = []
    for f in fields:
        shown, why = _shown(th, f), th.reason(f)
        out.append("%s: %s" % (f, why) if why.startswith(shown + ":")
                   else "%s %s: %s" % (f, shown, why))
    return tuple(out)


def _shown(th: Thresholds, field: str) -> str:
    """A threshold as ``info`` shows it: a size, or "never" for a size no
    clear reaches (NEVER), never the sentinel's number."""
    v = getattr(th, field)
    if isinstance(v, int) and not isinstance(v, bool):
        return format_size(v) if v < NEVER else "never"
    return str(v)


# ---- the reason tables: a decision's codes -> sentences ---------------------
#
# Each rule is stated once, in csrc/core/policy.c, which says which rule
# fired (the decision's reason codes).  These tables put each code into
# a sentence with the figures of the call filled in, and the
# thresholds it names, whose evidence goes beside it (Plan.evidence).

_TAIL = ("hot=True says all of it is used next, so {method} clears the first {rest} and "
         "{hot_method} the last {hot}, last, so that the %s of {hot} is in the cache for "
         "the program's next reads")

#: The decision's ``why``, keyed by (why, hot_why) where a hot part changes
#: the sentence, else by why alone: (sentence, thresholds it names).
ROUTE_REASONS: dict[Any, tuple[str, tuple[str, ...]]] = {
    lib.CP_WHY_FORCED: ("CLEARPAGES_METHOD forces {forced}", ()),
    (lib.CP_WHY_FORCED, lib.CP_HOT_PART_RANGE): (
        "CLEARPAGES_METHOD forces {forced} for both parts", ()),
    lib.CP_WHY_METHOD: ("method={method} names the routine", ()),
    lib.CP_WHY_ONE_ROUTINE: (
        "{what} is cleared by libc, the C library's memset, at every size", ("temporal",)),
    lib.CP_WHY_LONG: (
        "{what} is at least the long_min of {long_min} a piece on one thread, so {method} "
        "clears it in one call per extent", ("long_min",)),
    lib.CP_WHY_STREAMING: (
        "{what} is at least the streaming threshold of {nt_min}, so {method}: streaming "
        "stores write each line without reading it in first and keep the cache for other "
        "data",
        ("nt_min", "streaming")),
    lib.CP_WHY_MEMSET_BELOW_NT: (
        "{what} is below the streaming threshold of {nt_min}, with no vector_max below it, "
        "so libc, the C library's memset", ("nt_min", "vector_max")),
    lib.CP_WHY_MEMSET: (
        "{what} is at most the vector_max of {vector_max}{a_piece}, so libc: memset's "
        "vector stores start fastest", ("vector_max",)),
    lib.CP_WHY_TEMPORAL: (
        "{what} is below the streaming threshold of {nt_min}, so {method} clears it with "
        "ordinary stores", ("nt_min", "temporal")),
    lib.CP_WHY_NOT_SOON: (
        "hot=False says it is not used soon, so {method} streams all {size} and is never "
        "learned: streaming stores leave the cache to the program's other data", ()),
    (lib.CP_WHY_HOT, lib.CP_HOT_PART_RANGE): (
        "{method} streams the {rest} outside the hot range, which is not read again soon, "
        "then {hot_method} clears the {hot} hot range last with ordinary stores that leave "
        "it in the cache", ()),
    (lib.CP_WHY_HOT, lib.CP_HOT_PART_WHOLE): (
        "hot=True says all of it is used next, so {hot_method} clears all {size} with "
        "ordinary stores that leave it in the cache for the program's next reads, as it is "
        "at most the {hot_max} hot_max", ()),
    lib.CP_WHY_SMALL_PIECES: (
        "{what} is under {piece_fine} a piece on average, so libc, the C library's memset, "
        "clears the pieces one by one as they come: each piece costs a routine's start, and "
        "a streaming store of part of a cache line costs more than it saves", ()),
    (lib.CP_WHY_HOT, lib.CP_HOT_PART_TAIL): (_TAIL % "hot_max", ()),
    (lib.CP_WHY_HOT, lib.CP_HOT_PART_OTHER): (_TAIL % "hot_max_other", ()),
}

#: The thresholds that set the hot part's length (``hot_why``).
HOT_EVIDENCE: dict[int, tuple[str, ...]] = {
    lib.CP_HOT_PART_NONE: (),
    lib.CP_HOT_PART_RANGE: (),
    lib.CP_HOT_PART_WHOLE: ("hot_max",),
    lib.CP_HOT_PART_TAIL: ("hot_max",),
    lib.CP_HOT_PART_OTHER: ("hot_max", "hot_max_other"),
}

#: What "auto" threads add to the sentence (``threads_why``).
THREADS_REASONS: dict[int, tuple[str, tuple[str, ...]]] = {
    lib.CP_THREADS_GIVEN: ("", ()),
    lib.CP_THREADS_ONE: ("", ()),
    lib.CP_THREADS_BY_SIZE: (", on {threads} threads from the thread_min of {thread_min}",
                             ("thread_min",)),
    lib.CP_THREADS_SMALL_PIECES: (", on the calling thread", ()),
}

#: Whether the pages never touched are looked for (``untouched_why``).
UNTOUCHED_REASONS: dict[int, str] = {
    lib.CP_UNTOUCHED_LOOK: "pages never touched (private anonymous memory neither present "
                           "nor swapped) are left alone: they already read as zero",
    lib.CP_UNTOUCHED_SMALL: "untouched pages are looked for from {untouched_min} of work; "
                            "{work} is less",
    lib.CP_UNTOUCHED_NEVER: "untouched pages are not looked for (set_untouched(0))",
}


#: plan()'s ``learned`` where the policy alone says why the learner is not
#: asked (``adapt_why``); the learner's own sentences are _adapt's.
LEARNER_REASONS: dict[int, str] = {
    lib.CP_LEARNER_METHOD: "not adaptive: a routine was named",
    lib.CP_LEARNER_HINT: "not adaptive: hot= is the program's hint, never overridden",
    lib.CP_LEARNER_JOB: "not adaptive: only single clears on one thread are timed",
}


def explain(th: Thresholds, d: Decision, nbytes: int, count: int = 1, *,
            forced: str | None = None) -> Plan:
    """The Plan of a decision: its figures, the reason in one plain sentence
    (the rule that fired, from the decision's reason codes, with the
    numbers), and the evidence for each threshold the reason names
    (``Plan.evidence``, where the measurements are quoted)."""
    size = format_size
    rest = nbytes - d.hot_nbytes
    figures = {
        "what": size(nbytes) if count == 1 else "%s in %d pieces" % (size(nbytes), count),
        "size": size(nbytes), "rest": size(rest), "hot": size(d.hot_nbytes),
        "method": d.method, "hot_method": d.hot_method, "forced": forced,
        "threads": d.threads, "a_piece": " a piece" if count > 1 else "",
        "work": size(rest), "untouched_min": size(UNTOUCHED_MIN),
        "piece_fine": size(PIECE_FINE), "piece_direct": size(PIECE_DIRECT),
    }
    figures.update((f, size(getattr(th, f))) for f in (
        "nt_min", "vector_max", "long_min", "thread_min", "hot_max"))
    sentence, fields = ROUTE_REASONS.get((d.why, d.hot_why)) or ROUTE_REASONS[d.why]
    more, thread_fields = THREADS_REASONS[d.threads_why]
    reason = sentence + (", chosen from the total as one piece of work"
                         if count > 1 and d.why != lib.CP_WHY_SMALL_PIECES else "")
    if d.one_by_one and d.why != lib.CP_WHY_SMALL_PIECES:
        reason += (", and called for each piece as it comes: under {piece_direct} a piece, "
                   "a job's bookkeeping costs more than it saves")
    reason = (reason + more).format(**figures)
    method, threads = d.method, d.threads
    if d.why == lib.CP_WHY_HOT and d.hot_why == lib.CP_HOT_PART_WHOLE:
        # Nothing is left to stream: the hot routine clears it all, on one thread.
        method, threads = d.hot_method or d.method, 1
    return Plan(method=method, threads=threads, chunk=d.unit, reason=reason, nbytes=nbytes,
                count=count, hot_method=d.hot_method,
                evidence=_evidence(th, *(HOT_EVIDENCE[d.hot_why] + fields + thread_fields)),
                skips_untouched=d.skip_untouched,
                untouched=UNTOUCHED_REASONS[d.untouched_why].format(**figures),
                one_by_one=d.one_by_one)
