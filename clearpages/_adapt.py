"""Adaptive auto: the Python face of the learner in csrc/core/adapt.c.

In the band of sizes ``Thresholds.adapt_min <= n < adapt_max`` a single
clear with ``method="auto"`` asks the learner which store to use.  Per size
class (powers of two) and context (a buffer cleared within the last
last-level cache's worth of clears, or a large one whose distinct buffers
cleared since fit in it, or one whose thread's own clears since fit in it,
"recent"; or not, "other"), the learner
runs ordinary stores for a recent buffer small enough to be in the cache,
and streaming stores for a buffer as large as the cache or larger, untimed;
everything else starts on a safe role and is timed by paired comparison of
the two routines, counting the clear and what the program did until the
thread's next clear, and the other role takes over only where it won
decisively, or where ordinary stores, against streaming as the safe role,
are still ahead when the comparison runs out (see csrc/core/adapt.h for
the rules).

This module configures the learner from the thresholds, and puts what it
has learned into words for ``plan()`` and ``python -m clearpages info``:
the learner returns codes (why a context runs its routine, what started
its latest comparison), and the words are tables keyed by them.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from ._native import ffi, lib
from ._policy import Thresholds, _evidence
from ._routines import BY_NAME
from ._units import format_size

#: The learner's contexts, as plan() and info name them.
CONTEXTS = ("other buffers", "recent buffers")

#: What a context's safe role is, and why (cp_adapt_stat's safe).
SAFE = {
    lib.CP_ADAPT_TEMPORAL: "ordinary stores, which cannot lose much against memset",
    lib.CP_ADAPT_STREAMING: ("streaming: a buffer this large, not cleared lately, is not in the "
                             "cache, and ordinary stores would read it in first"),
}

#: What a context runs first where that is not its safe role (cp_adapt_stat's
#: start), and why; {recent_max} and {safe} as in :data:`LEARNED`.
START = {
    lib.CP_ADAPT_STREAMING: (
        "streaming: a buffer larger than {recent_max} does not stay in the cache even cleared "
        "back to back, unless its checks find it there, and ordinary stores would read it in "
        "first (where comparing decides nothing, {safe})"),
}

#: The pieces the reasons of a recent buffer taken as cached share.
_RECENT = ("cleared within the last {reuse} of clears (each large buffer cleared since "
           "counted once; only its own thread's clears where that thread cleared it last)")
#: A held buffer's checks, in the learner's own values (csrc/core/adapt.h).
_HELD_MARGIN = "%.2fx a streaming clear" % (lib.CP_ADAPT_HELD_MARGIN_PCT / 100)
_HELD_CHECKS = ("its clears, timed alone now and then, cost no more than %s in at least %d "
                "of the latest %d (where its comparison found the program leaves its lines "
                "dirty, streaming clears dearer too: no more than the geometric mean of its "
                "ordinary-store clears there in the cache and out of it, at most %.1fx)"
                % (_HELD_MARGIN, lib.CP_ADAPT_HELD_VOTE, lib.CP_ADAPT_HELD_KEEP,
                   lib.CP_ADAPT_REFILL_FAR_PCT / 100))

#: Why a context runs its routine (cp_adapt_stat's learned code), as a
#: reason; the fields come from :class:`Learned` and the learner's parameters.
LEARNED = {
    lib.CP_LEARNED_FIRST: "nothing compared yet: {start}",
    lib.CP_LEARNED_CACHED: (
        _RECENT + " and no larger than {recent_max}, so still "
        "in the cache: ordinary stores keep it there for the program, untimed (a clear now "
        "and then timed alone, to check)"),
    lib.CP_LEARNED_COMPARING: (
        "comparing the two routines in pairs ({pairs} so far); until one wins decisively, "
        "{safe}"),
    lib.CP_LEARNED_STREAMING: (
        "streaming cost this program less in {wins} of {pairs} pairs, {ratio:.2f}x the "
        "ordinary stores' cost at the median (the clear and the program's time until its "
        "next clear)"),
    lib.CP_LEARNED_TEMPORAL: (
        "ordinary stores cost this program less in {losses} of {pairs} pairs (streaming "
        "{ratio:.2f}x their cost at the median: the program uses what it cleared)"),
    lib.CP_LEARNED_EVEN: (
        "no decisive difference in {pairs} pairs (streaming {ratio:.2f}x at the median, "
        "within the noise): {safe}"),
    lib.CP_LEARNED_LARGE: (
        "{large} or larger (the last-level cache, {reuse}, or {large_factor}x {recent_max}, "
        "whichever is less: a guest may be shown a cache far larger than it can count on): "
        "never all in the cache, however recently cleared (it holds the program's other data "
        "too), and ordinary stores would keep only its tail there, so streaming, untimed"
        "{exact}"),
}

#: LEARNED's CP_LEARNED_CACHED for a class above recent_max: held as
#: cached once a comparison found the machine keeps it, and while its
#: checks find it in the cache (held_max).
HELD = (
    _RECENT + ", a comparison found this machine keeps a buffer of its size in the cache, "
    "and " + _HELD_CHECKS + ": in the cache "
    "here, although larger than {recent_max}, so ordinary stores keep it there for the "
    "program, untimed (3 checks that find it slower hand it to a comparison)")

#: LEARNED's CP_LEARNED_CACHED for a size above recent_max that no
#: comparison has found kept, nor not kept: presumed kept (kept_max).
_PRESUMED_CHECKS = ("its clears, timed alone now and then, cost no more than %.2fx a "
                    "streaming clear in at least %d of the latest %d (the first check "
                    "waiting out its refill after a clear outside the window, while "
                    "little else is cleared between, and for as long as its clears still "
                    "get a tenth cheaper over 8 calls)"
                    % (lib.CP_ADAPT_CHECK_MARGIN_PCT / 100, lib.CP_ADAPT_HELD_VOTE,
                       lib.CP_ADAPT_HELD_KEEP))
PRESUMED = (
    _RECENT + " and no larger than {kept_max}: {kept_why}, and ordinary stores lose "
    "little where it does not, so they run untimed while " + _PRESUMED_CHECKS + ", and while "
    "no more than %d of its size class's latest %d recent calls came with more than "
    "{crowd} cleared since the buffer's previous clear, its own size included (3 "
    "checks that find it slower hand it to a comparison, and one that finds it not kept "
    "among such calls ends this for its size)" % (lib.CP_ADAPT_FP_VOTE,
                                                  lib.CP_ADAPT_FP_CALLS))

#: PRESUMED's kept_why: near recent_max, or (window) up to three quarters of
#: a cache that keeps a buffer up to nearly its whole size.
KEPT_NEAR = ("near the static threshold, {recent_max}, the cache keeps such a buffer "
             "about as often as not")
KEPT_WHOLE = ("the {reuse} last-level cache keeps a buffer cleared again up to nearly its "
              "whole size, and one up to three quarters of it most of the time")

FP_VOTE = lib.CP_ADAPT_FP_VOTE

#: Why a size up to kept_max is not presumed kept.
CROWDED = ("not presumed kept: %%d of its size class's latest %d recent calls came with "
           "more than {crowd} cleared since the buffer's previous clear, its own size "
           "included (at most %d may)" % (lib.CP_ADAPT_FP_CALLS, lib.CP_ADAPT_FP_VOTE))

#: What started a context's latest comparison (cp_adapt_stat's trigger).
TRIGGER = {
    lib.CP_ADAPT_BY_START: "its first calls",
    lib.CP_ADAPT_BY_CHANGE: "a change in what its routine cost (the program changed)",
    lib.CP_ADAPT_BY_RECHECK: "a periodic recheck",
    lib.CP_ADAPT_BY_EVICTED: (
        "a recent buffer taken as cached cleared slower than streaming does: the program's "
        "other buffers, its reads or a sleep had emptied the cache"),
    lib.CP_ADAPT_BY_SIZE: (
        "two calls in a row, during a comparison, of sizes more than a quarter off the one it "
        "started on (the program moved to other sizes of the class): compared afresh"),
    lib.CP_ADAPT_BY_SILENCE: (
        "a call after a silence, while comparing or undecided: more of other clears since "
        "the previous call of its size class than %d times the window and than %d times "
        "the most between its latest calls (the program did something else meanwhile): "
        "compared afresh"
        % (lib.CP_ADAPT_SILENCE_FACTOR, lib.CP_ADAPT_SILENCE_FACTOR)),
}


@dataclasses.dataclass(frozen=True)
class Learned:
    """What one size class has learned in one context."""

    size_class: int
    context: int
    method: str
    """The routine adaptive auto runs there now."""
    learned: int
    """The learner's code for why (a key of :data:`LEARNED`)."""
    safe: int
    """The role it runs where nothing is decisive (a key of :data:`SAFE`)."""
    start: int
    """The role it runs before anything is known: :attr:`safe`, or a key of
    :data:`START`."""
    trigger: int
    """What started the latest comparison (a key of :data:`TRIGGER`)."""
    gbps: dict[str, float]
    """The clear alone, GB/s per routine (only those timed)."""
    cost: dict[str, float]
    """ns per KiB per routine of the clear and the program's time until its
    next clear of such a buffer, over the latest comparison's pairs."""
    pairs: int
    wins: int
    """Of the pairs, those where streaming cost less."""
    ratio: float
    """Their median streaming / ordinary-store cost (0: none yet)."""
    calls: int
    timed: int
    comparisons: int
    switches: int
    kept: int = 0
    """The size class above recent_max: 1 a comparison found it kept in the
    cache, -1 found it not kept, 0 neither."""
    kept_upto: int = 0
    """kept 1: the sizes held as cached, up to this many bytes (a quarter
    above the size the comparison ran on)."""
    crowded: int = -1
    """Of the size class's latest CP_ADAPT_FP_CALLS recent calls of a held
    size, those whose footprint (the size and the distinct bytes cleared
    since the buffer's previous clear) was above kept_max and recent_max
    together (a size presumed kept and a threshold's worth of others); -1:
    none yet."""

    @property
    def sizes(self) -> str:
        return "%s-%s" % (format_size(1 << self.size_class),
                          format_size(2 << self.size_class))

    def reason(self, reuse: int, recent_max: int) -> str:
        """Why it runs :attr:`method` (the reason table :data:`LEARNED`;
        :data:`HELD` for a cached class above recent_max)."""
        held = self.learned == lib.CP_LEARNED_CACHED and (1 << self.size_class) >= recent_max
        text = (HELD if self.kept > 0 else PRESUMED) if held else LEARNED[self.learned]
        params = _params()
        kept_max = params.kept_max
        if self.kept > 0 and held:
            text += " (sizes up to %s)" % format_size(self.kept_upto)
        elif (not held and self.context == lib.CP_ADAPT_RECENT and self.crowded > FP_VOTE
              and (1 << self.size_class) < kept_max and (2 << self.size_class) > recent_max):
            text += "; " + CROWDED % self.crowded
        sizes = {"reuse": format_size(reuse), "recent_max": format_size(recent_max)}
        kept_why = (KEPT_WHOLE if params.window_timed else KEPT_NEAR).format(**sizes)
        return text.format(
            safe=SAFE[self.safe], start=self.start_reason(recent_max), pairs=self.pairs,
            wins=self.wins, losses=self.pairs - self.wins, ratio=self.ratio,
            kept_why=kept_why, **sizes,
            kept_max=format_size(kept_max), large=format_size(large_min()),
            crowd=format_size(kept_max + params.recent_max),
            large_factor=LARGE_FACTOR, exact=exact_window(reuse, self.size_class))

    def start_reason(self, recent_max: int) -> str:
        """Why it runs :attr:`start` before anything is known."""
        if self.start == self.safe:
            return SAFE[self.safe]
        return START[self.start].format(recent_max=format_size(recent_max),
                                        safe=SAFE[self.safe])

    def sentence(self, reuse: int, recent_max: int) -> str:
        speeds = ", ".join("%s %.1f GB/s" % (name, g) for name, g in self.gbps.items())
        # A cached context is compared only after its checks found the
        # buffer out of the cache (and the comparison kept ordinary stores).
        started = "" if self.learned == lib.CP_LEARNED_FIRST or not self.comparisons else (
            "; compared %d time%s, the latest after %s" % (
                self.comparisons, "" if self.comparisons == 1 else "s", TRIGGER[self.trigger]))
        return ("%s: %s, %s (%s; %d calls, %d timed%s)"
                % (CONTEXTS[self.context], self.method, self.reason(reuse, recent_max),
                   "the clear alone: " + speeds if speeds else "not timed",
                   self.calls, self.timed, started))


def reuse_bytes(th: Thresholds) -> int:
    """A buffer cleared again within this many bytes of clears is "recent":
    the last-level cache, which the band's top is four times."""
    return max(th.adapt_max // 4, th.adapt_min)


#: What the learner's numbers are, as multiples of the reuse window (the
#: last-level cache): a recent buffer up to _policy.recent_threshold, at
#: most half the window, is in the cache without a clock
#: (half the L3, at most 16 L2s: on the Zen 4 guest ordinary stores win a
#: 16 MiB buffer cleared back to back, 0.22 against 0.29 ms a clear, and
#: 2-5x where the program uses it; on a Zen 3 guest with a 32 MiB L3 they
#: still won at 8 MiB, 1.9x, and lost at 16 MiB, 0.35x: 16 of its 512 KiB
#: L2s), and a larger one below the window is held so once a comparison
#: of its size found this machine keeps such a buffer there, and while its
#: checks, strict, find it there (where a program keeps it in the cache is
#: the machine's: a Zen 5 guest did at 16-31 MiB, a Zen 4 guest mostly did
#: not); a comparison may take twice its worth of clears (or 64 calls),
#: what following a change may take, before it falls back to the temporal
#: role; a settled context times a pair
#: of calls every quarter of it (three pairs see a change) and is compared
#: again after sixteen times it, the gap doubling while the role holds.
RECENT_MAX_DIVISOR = 2
#: A recent buffer above recent_max and up to this many times it (at most
#: half the window) is held as cached from its first call, as a size class
#: found kept is, until a comparison of its class finds otherwise: at the
#: static threshold the cache keeps such a buffer about as often as not (on
#: a Zen 3 guest, L2 512 KiB, ordinary stores cleared one of 8.8-14 MiB back
#: to back as fast as streaming did, or up to 1.4x faster, and 1.5x faster
#: with random writes after each clear; the Intel guest kept 32 MiB and not
#: 48), its checks find one that is not within about 60 calls (48 wait out
#: the refill after its first clear: a large buffer may come back only
#: after tens of flat calls, see adapt.c's await_refill), and comparing
#: costs such a buffer a refill of several milliseconds per pair.
KEPT_FACTOR = 1.5
#: ... at most half the window, or this fraction of it where the cache
#: keeps a buffer up to nearly its whole size (window, :func:`configure`):
#: there recent_max, half the L3, is well below what it keeps.
KEPT_WHOLE_NUM, KEPT_WHOLE_DEN = 3, 4
#: ... and up to this many times it where the last-level cache reported is
#: more than LARGE_FACTOR times recent_max (a guest shown the host's whole
#: cache, whose static threshold comes from the CPU model): the Intel guest
#: (family 6 model 167, 480 MiB reported, recent_max 32 MiB) kept a 53 MiB
#: buffer cleared among three small ones, its ordinary-store clears coming
#: back in 5-14 calls, and ran the program 1.2-1.3x faster on them than
#: streamed (the program's work after each clear found the buffer in the
#: cache); compared, every pair paid that refill, and the comparison
#: streamed.  In 9 of the 11 phases of a 40-program corpus that ran below
#: 0.9 of their best there, a recent buffer of 32-69 MiB was cleared and
#: the best was ordinary stores.  At 70 MiB the refill took 10-25 calls; at
#: 100 MiB the buffer never came back (2.4x a streaming clear).  Measured
#: quietly there, one buffer cleared back to back with ordinary stores
#: after streaming (bench_refill.py, alone and with random writes after
#: each clear), twice 45 minutes apart: back below the streaming cost
#: within 3-6 calls at 48 MiB, 5-12 at 64, 7-24 at 72 MiB (once not in 32
#: with the writes), settling at 0.7-0.9 of it; at 81 MiB mostly not
#: within 32 calls; at 96-127 MiB never (1.3-2.3x).  In the 200-program
#: run there every phase of one held buffer of 64-72 MiB ran faster on
#: ordinary stores (0.52-0.98 of streaming, 14 phases), and the comparison
#: of those above 64 MiB cost auto down to 0.6 of the phase's best and
#: 0.73 of `numpy.fill`; from 72 to 86 MiB either role won (0.83-1.63).
#: So up to the largest size it keeps alone.
KEPT_FACTOR_SHOWN = 2.25
#: A buffer of this many times recent_max or more is large, as one the size
#: of the reuse window is: streaming, untimed, however recently cleared.
#: It binds only where the last-level cache reported is more than this many
#: times the static threshold: a guest shown the host's whole cache (a 300
#: or 480 MiB L3 on two vCPUs).  On such an Intel guest (family 6 model 167,
#: 480 MiB reported, recent_max 32 MiB) a buffer cleared back to back with
#: ordinary stores cost 2.2-2.4x a streaming clear at 100 and 130 MiB from
#: the first call to the fortieth, and each comparison the learner ran on
#: first meeting such a size (16 calls streamed, then pairs with a
#: three-call temporal block) cost 0.8-0.9 of streaming in phases of 50-130
#: calls; the Emerald Rapids guest lost 1.7x at 48 MiB.  At 40 MiB that
#: guest kept the buffer (a refill of 5 calls), at 53 and 70 MiB only after
#: 10-37 calls of refill.  On the AMD guests measured (recent_max a quarter
#: or half of a 32 MiB L3) the window binds first.
LARGE_FACTOR = 4
DECIDE_FACTOR = 2
SAMPLE_DIVISOR = 4
RECHECK_FACTOR = 16

#: A recent buffer taken as cached, from an L2's worth up, has its clear
#: timed once per this fraction of the reuse window of its context's clears
#: (at 1 MiB once per 8 calls, from 2 MiB every fourth), against what a
#: streaming clear costs (:func:`stream_cost`): one that costs more was not
#: in the cache.
CHECK_DIVISOR = 4

#: The streaming clear behind stream_cost: a buffer of this many bytes,
#: cleared STREAM_WARMUP times and then STREAM_RUNS times timed.
STREAM_PROBE = 2 << 20
STREAM_WARMUP = 2
STREAM_RUNS = 5

_stream_costs: dict[str, float] = {}


def stream_cost(name: str) -> float:
    """ns per byte of a streaming clear with routine ``name`` here: the
    median of STREAM_RUNS clears of a STREAM_PROBE buffer (~0.2 ms, once per
    process and routine; 0.0 where it is not a streaming routine with a
    native entry).  What a buffer out of the cache costs whatever its store:
    ordinary stores that cost more than this did not find the buffer in the
    cache."""
    if name not in _stream_costs:
        fn = getattr(lib, "cp_clear_" + name, None)
        cost = 0.0
        if fn is not None and name in BY_NAME and not BY_NAME[name].temporal:
            buf = ffi.new("char[]", STREAM_PROBE)
            times = []
            for i in range(STREAM_WARMUP + STREAM_RUNS):
                t0 = lib.cp_adapt_now_ns()
                fn(buf, STREAM_PROBE)
                if i >= STREAM_WARMUP:
                    times.append(lib.cp_adapt_now_ns() - t0)
            cost = sorted(times)[len(times) // 2] / STREAM_PROBE
        _stream_costs[name] = cost
    return _stream_costs[name]


def configure(th: Thresholds, usable: bool, enabled: bool, recent: int = 0,
              l2: int = 0, window: bool = False) -> None:
    """Set the learner's band from th (empty when not usable: a forced
    method) and forget all; then turn it on or off (:func:`enable`).
    recent: the largest recent buffer taken as in the cache
    (_policy.recent_threshold: half the L3, at most 16 L2s), at most half the
    reuse window; 0: a quarter of it.  l2: the L2's size, from which such a
    buffer's clears are checked (0: a sixteenth of recent).  window: a
    recent buffer of exactly the reuse window is timed, not streamed
    untimed (_policy.keeps_whole_l3: a cache that keeps a buffer up to
    nearly its whole size)."""
    p = ffi.new("struct cp_adapt_params *")
    lib.cp_adapt_defaults(p)
    if usable and th.adapt_min < th.adapt_max:
        reuse = reuse_bytes(th)
        p.lo, p.hi = th.adapt_min, th.adapt_max
        p.reuse_bytes = reuse
        half = reuse // RECENT_MAX_DIVISOR
        p.recent_max = min(recent, half) if recent else half // 2
        p.held_max = reuse - 1
        p.large_min = min(reuse, LARGE_FACTOR * p.recent_max)
        kept = KEPT_FACTOR if p.large_min == reuse else KEPT_FACTOR_SHOWN
        top = reuse * KEPT_WHOLE_NUM // KEPT_WHOLE_DEN if window else half
        p.kept_max = min(int(p.recent_max * kept), top)
        p.decide_bytes = DECIDE_FACTOR * reuse
        p.sample_bytes = reuse // SAMPLE_DIVISOR
        p.recheck_bytes = RECHECK_FACTOR * reuse
        p.stream_ns_per_byte = stream_cost(th.streaming)
        p.check_bytes = reuse // CHECK_DIVISOR
        p.check_min = l2 or p.recent_max // 16
        p.window_timed = int(window)
        # A call's span on its thread's CPU clock: a sleep, a wait or another
        # process's time slice is none of what a role costs the program.
        p.span_clock = lib.CP_ADAPT_SPAN_CPU
    lib.cp_adapt_configure(p)
    enable(enabled)


def reset() -> None:
    """Forget everything learned, keep the band and the switch: auto starts
    again as a fresh process does (the program benchmarks, before each run)."""
    lib.cp_adapt_reset()


def enable(on: bool) -> None:
    """Adapt (True) or run the static choice (False), keeping what was learned."""
    lib.cp_adapt_enable(int(bool(on)))


def roles(nbytes: int) -> tuple[str, str]:
    """(temporal, streaming): the routines the learner chooses between for
    nbytes, as the native policy says."""
    from . import _fast

    return _fast.decide(nbytes)[5]


def learned(size_class: int, names: tuple[str, str] | None = None) -> list[Learned]:
    """What the learner holds for one size class, context by context (names:
    its two routines, else asked of the native policy)."""
    out = []
    st = ffi.new("struct cp_adapt_stat *")
    for ctx in range(len(CONTEXTS)):
        if not lib.cp_adapt_stat(size_class, ctx, st):
            continue
        if names is None:
            names = roles(1 << size_class)
        gbps = {names[a]: 1.0 / st.clear_ns_per_byte[a]
                for a in (0, 1) if st.clear_ns_per_byte[a] > 0}
        cost = {names[a]: st.cost_ns_per_byte[a] * 1024 for a in (0, 1)
                if st.cost_ns_per_byte[a] > 0}
        out.append(Learned(size_class, ctx, names[st.role], int(st.learned), int(st.safe),
                           int(st.start), int(st.trigger), gbps, cost, int(st.pairs), int(st.wins),
                           float(st.ratio),
                           int(st.calls), int(st.timed), int(st.comparisons),
                           int(st.switches), int(st.kept), int(st.kept_upto),
                           int(st.crowded)))
    return out


def learned_all(th: Thresholds) -> list[Learned]:
    """Everything learned, size class by size class, in the band (none when
    the band is empty)."""
    lo = th.adapt_min.bit_length() - 1
    hi = (th.adapt_max - 1).bit_length() - 1
    return [x for c in range(lo, hi + 1) for x in learned(c)]


def _params() -> Any:
    """The learner's parameters as configured."""
    p = ffi.new("struct cp_adapt_params *")
    lib.cp_adapt_params(p)
    return p


def recent_max() -> int:
    """A recent buffer up to this size is in the cache: ordinary stores,
    untimed (as the learner is configured)."""
    return int(_params().recent_max)


def exact_window(reuse: int, size_class: int = -1) -> str:
    """The exception to "large": where the learner is configured so
    (window_timed) and the window is the bound, a recent buffer of exactly
    its size (cleared again with at most an eighth of it between) is timed;
    words for the reasons, empty elsewhere, and for a size class
    (size_class >= 0) that does not hold that size."""
    if not _params().window_timed or large_min() != reuse:
        return ""
    if size_class >= 0 and not (1 << size_class) <= reuse < (2 << size_class):
        return ""
    return ("; one of exactly %s cleared again with at most an eighth of it cleared between "
            "is timed instead: the cache keeps much of it after ordinary stores, and a "
            "program that reads it next gains by that" % format_size(reuse))


def large_min() -> int:
    """A buffer of this size or more streams untimed, however recently
    cleared (as the learner is configured; 0: none)."""
    p = _params()
    return int(p.large_min if 0 < p.large_min < p.reuse_bytes else p.reuse_bytes)


#: plan()'s ``learned`` where the policy did not ask the learner, by the
#: decision's reason code (the others, a method named, a hint, a job, are
#: _policy.LEARNER_REASONS).
NOT_ASKED = {
    lib.CP_LEARNER_FORCED: "not adaptive: CLEARPAGES_METHOD forces {forced}",
    lib.CP_LEARNER_NO_BAND: "not adaptive: {no_band}",
    lib.CP_LEARNER_OFF: ("adaptation is off (CLEARPAGES_ADAPT=0 or set_adaptive(False)): "
                         "the static choice above, always"),
    lib.CP_LEARNER_OUTSIDE: "outside the adaptive band {band}: the static choice above, untimed",
}


@dataclasses.dataclass(frozen=True)
class Bounds:
    """The sizes the learner's rules turn on, as cp_adapt_configure derives
    them from its parameters (cp_adapt_bounds; adapt.c's recent_most,
    cached_most, kept_most, large_from, large_recent_from)."""

    reuse: int
    """A buffer cleared again within this many bytes of clears is recent
    (0: none is; none larger than it ever is)."""
    recent: int
    """A recent buffer up to this size is in the cache: ordinary stores,
    untimed (recent_max, below large)."""
    cached: int
    """... and one above recent, up to this size, while held as cached
    (held_max, below large; recent: none is held, where nothing checks)."""
    kept: int
    """... from its first recent call, presumed kept, up to this size
    (kept_max, at most cached; 0: none)."""
    crowd: int
    """A presumed size's footprint above this counts against it."""
    large: int
    """A buffer of this size or more streams untimed (0: none does)."""
    large_recent: int
    """... a recent one (window_timed: past the window, whose own size is
    timed)."""
    check_from: int
    """A recent buffer taken as cached has its clear checked from this size
    (0: never)."""
    other: int
    """A buffer not cleared lately and larger than this has streaming as its
    safe role (reuse / CP_ADAPT_OTHER_DIVISOR)."""


def bounds() -> Bounds:
    """The learner's :class:`Bounds` as configured."""
    out = ffi.new("struct cp_adapt_bounds *")
    lib.cp_adapt_bounds(out)
    reuse = int(_params().reuse_bytes)
    return Bounds(reuse=reuse, recent=int(out.recent), cached=int(out.cached),
                  kept=int(out.kept), crowd=int(out.crowd), large=int(out.large),
                  large_recent=int(out.large_recent), check_from=int(out.check_from),
                  other=reuse // lib.CP_ADAPT_OTHER_DIVISOR)


def _roles(n: int, recent: bool) -> tuple[int, int]:
    """(safe, start): the roles a context of n-byte clears runs where nothing
    is decisive and before anything is known (adapt.c's safe_role and
    start_role)."""
    both = lib.cp_adapt_roles(n, lib.CP_ADAPT_RECENT if recent else lib.CP_ADAPT_OTHER)
    return both & 1, both >> 1 & 1


def _large_why(n: int, b: Bounds, sizes: dict[str, str]) -> str:
    """rules()'s words for why a buffer of n bytes is large: the window, or
    large_min below it."""
    if b.large < b.reuse:
        return ("{large} or larger ({large_factor}x {recent_max}, less than the {reuse} "
                "last-level cache reported: a guest may be shown a cache far larger than it "
                "can count on)").format(**sizes)
    return ("as large as the {reuse} last-level cache" if n == b.reuse else
            "larger than the {reuse} last-level cache").format(**sizes)


def _timed(n: int, recent: bool, names: tuple[str, str], sizes: dict[str, str],
           first: str | None = None) -> str:
    """rules()'s words for a buffer of n bytes whose clears are timed (the
    context recent or not): its start role, its safe role, and what takes
    over (first: why it starts on a role other than its safe one; None:
    the learner's reason, "": none said)."""
    safe, start = _roles(n, recent)
    other = names[1 - safe]
    if safe == lib.CP_ADAPT_STREAMING:
        why = ("larger than {other}, it is not in the cache, and ordinary stores would read "
               "it in first").format(**sizes)
    else:
        why = "ordinary stores, which cannot lose much against memset"
    if start == safe:
        text = ("runs %s, its safe routine (%s), unless timing it against the program's "
                "next clear says %s costs decisively less" % (names[safe], why, other))
        if safe == lib.CP_ADAPT_STREAMING:
            text += (", or is still ahead at the mean and at the median when the comparison "
                     "runs out")
        return text
    if first is None:
        first = ("larger than {recent_max}, it may not stay in the cache even cleared back "
                 "to back" if recent else
                 "larger than {recent_max}, and nothing says it is in the cache")
    first = " (%s)" % first.format(**sizes) if first else ""
    return ("starts on %s%s, and timing it against the program's next clear decides: %s "
            "stays only where it costs decisively less, else %s, its safe routine (%s)"
            % (names[start], first, names[start], names[safe], why))


def rules(n: int, names: tuple[str, str]) -> str:
    """The learner's rules for a single clear of n bytes in the band, as
    configured, in words: only those that can apply to n, for a buffer
    cleared lately and for one not (names: the (temporal, streaming)
    routines): adapt.c's choose() by the learner's :class:`Bounds`, and the
    roles it starts on and falls back on there."""
    b = bounds()
    t, s = names
    params = _params()
    sizes = {"size": format_size(n), "reuse": format_size(b.reuse),
             "recent_max": format_size(b.recent), "large": format_size(b.large),
             "other": format_size(b.other), "large_factor": str(LARGE_FACTOR),
             "eighth": format_size(n // 8), "crowd": format_size(b.crowd)}
    a_buffer = "a buffer of %s" % sizes["size"]
    lately = "cleared within the last {reuse} of clears".format(**sizes)
    if b.large and n >= b.large:
        text = ("%s is %s: never all in the cache, however recently cleared (it holds the "
                "program's other data too), and ordinary stores would keep only its tail "
                "there, so %s, untimed" % (a_buffer, _large_why(n, b, sizes), s))
        if n < b.large_recent:
            text += ("; except one cleared again with at most an eighth of it ({eighth}) "
                     "cleared between: the cache keeps much of that one after ordinary "
                     "stores, and a program that reads it next gains by that, so that one is "
                     "timed: it ".format(**sizes) + _timed(n, True, names, sizes, ""))
        return text
    if not b.reuse:
        return a_buffer + " " + _timed(n, False, names, sizes)
    if n <= b.recent:
        text = ("%s %s is no larger than %s, so in the cache: %s, untimed, keeps it there "
                "for the program" % (a_buffer, lately, sizes["recent_max"], t))
        if b.check_from and n >= b.check_from:
            text += (" (its clear is timed alone now and then: where %d of the latest %d "
                     "cost more than %.2fx a streaming clear, it was not in the cache after "
                     "all, and the two are compared: then %s runs untimed again unless %s "
                     "costs decisively less)"
                     % (lib.CP_ADAPT_CHECK_VOTE, lib.CP_ADAPT_CHECK_KEEP,
                        lib.CP_ADAPT_CHECK_MARGIN_PCT / 100, t, s))
    elif n <= b.cached:
        if b.kept and n <= b.kept:
            kept_why = (KEPT_WHOLE if params.window_timed else KEPT_NEAR).format(**sizes)
            text = ("%s %s is held as cached from its first such call, presumed kept (%s): "
                    "%s, untimed, while its clears, timed alone now and then, cost no more "
                    "than %.2fx a streaming clear in at least %d of the latest %d and no more "
                    "than %d of its size class's latest %d recent calls came with more than "
                    "%s cleared since the buffer's previous clear (its own size included), "
                    "until a comparison of its size class tells whether this machine keeps "
                    "such a buffer in the cache (found kept, the sizes up to a quarter above "
                    "the one compared stay held while their checks cost no more than %s)"
                    % (a_buffer, lately, kept_why, t, lib.CP_ADAPT_CHECK_MARGIN_PCT / 100,
                       lib.CP_ADAPT_HELD_VOTE, lib.CP_ADAPT_HELD_KEEP, lib.CP_ADAPT_FP_VOTE,
                       lib.CP_ADAPT_FP_CALLS, sizes["crowd"], _HELD_MARGIN))
        else:
            text = ("%s %s is held as cached once a comparison of its size class found this "
                    "machine keeps such a buffer in the cache (the sizes up to a quarter above "
                    "the one compared): %s, untimed, while %s"
                    % (a_buffer, lately, t, _HELD_CHECKS))
        text += "; otherwise it is timed: it " + _timed(n, True, names, sizes)
    else:
        text = "%s %s is timed: it %s" % (a_buffer, lately, _timed(n, True, names, sizes))
    return text + "; one not cleared lately " + _timed(n, False, names, sizes)


def describe(th: Thresholds, d: Any, nbytes: int, forced: Any) -> str:
    """plan()'s ``learned`` for a single clear: what adaptation does at nbytes
    (d: the native policy's decision, a _policy.Decision), and why (the
    rules that can apply to nbytes, :func:`rules`), then what its size
    class has learned."""
    band = "%s-%s" % (format_size(th.adapt_min), format_size(th.adapt_max))
    if d.adapt_why != lib.CP_LEARNER_ASKED:
        return NOT_ASKED[d.adapt_why].format(forced=forced, no_band=th.reason("adapt"),
                                             band=band)
    size_class = nbytes.bit_length() - 1
    got = learned(size_class, d.roles)
    reuse, small = reuse_bytes(th), recent_max()
    head = "in the adaptive band %s: %s" % (band, rules(nbytes, d.roles))
    sizes = "%s-%s" % (format_size(1 << size_class), format_size(2 << size_class))
    if not got:
        return head + "; nothing learned yet for its size class, %s" % sizes
    return (head + "; learned so far for its size class, %s: " % sizes
            + "; ".join(x.sentence(reuse, small) for x in got))


#: plan(hot=True)'s ``learned`` where the buffer's history sets its hot
#: tail, by whether a buffer of its size can be recent at all (the
#: learner's answer, cp_adapt_recent with no address).
HISTORY = {
    True: ("hot=True is the program's word; the buffer's history sets how much stays hot: "
           "the last {tail} as planned when it was cleared within the last {reuse} of "
           "clears, else the last {other} (hot_max_other: probably cold)"),
    False: ("hot=True is the program's word; the buffer's history sets how much stays hot: "
            "the last {other} (hot_max_other), as one of {size} is never cleared again within "
            "{reuse} of clears and probably not in the cache"),
}


def describe_hot(th: Thresholds, nbytes: int) -> tuple[str, tuple[str, ...]]:
    """plan(hot=True)'s ``learned`` and the evidence it cites, where the
    policy says the buffer's history sets its hot tail (hot_max, or
    hot_max_other for one not cleared lately)."""
    can_be_recent = lib.cp_adapt_recent(ffi.NULL, nbytes) == 1
    words = HISTORY[can_be_recent].format(
        tail=format_size(min(nbytes, th.hot_max)), reuse=format_size(reuse_bytes(th)),
        other=format_size(min(th.hot_max_other, th.hot_max)), size=format_size(nbytes))
    return words, _evidence(th, "hot_max_other")


def info(th: Thresholds, active: bool, adapt_on: bool, forced: Any) -> dict[str, Any]:
    """What ``info --json`` shows: the band, the switch (active and adapt_on:
    the dispatch state's adapt_active and adapt_on), and what was learned
    (each context's entry under "context"; "kind", its first name, is kept
    beside it for one release)."""
    reuse, small = reuse_bytes(th), recent_max()
    learned_rows = []
    for x in (learned_all(th) if active else []):
        row = dataclasses.asdict(x)
        row.update(sizes=x.sizes, context=CONTEXTS[x.context], kind=CONTEXTS[x.context],
                   reason=x.reason(reuse, small))
        learned_rows.append(row)
    off = None if active else (
        "CLEARPAGES_METHOD forces %s" % forced if forced is not None else
        "CLEARPAGES_ADAPT=0 or set_adaptive(False)" if not adapt_on else th.reason("adapt"))
    return {
        "on": active,
        "band": [th.adapt_min, th.adapt_max],
        "recent": [reuse, small],
        "why": th.reason("adapt"),
        "off_because": off,
        "learned": learned_rows,
    }


def info_lines(data: dict[str, Any]) -> list[str]:
    """``info``'s section, from :func:`info`'s dictionary."""
    lo, hi = data["band"]
    if not data["on"]:
        return ["off: %s" % data["off_because"]]
    lines = ["on, for single clears of %s to %s (%s); CLEARPAGES_ADAPT=0 or "
             "cp.set_adaptive(False) turns it off" % (format_size(lo), format_size(hi),
                                                       data["why"])]
    if not data["learned"]:
        lines.append("nothing learned yet in this process")
    for x in data["learned"]:
        speeds = ", ".join("%s %.1f GB/s" % kv for kv in x["gbps"].items())
        lines.append("%-16s %-15s %-9s %s (%s; %d calls, %d timed, %d comparison%s)"
                     % (x["sizes"], x["context"], x["method"], x["reason"],
                        "the clear alone: " + speeds if speeds else "not timed",
                        x["calls"], x["timed"], x["comparisons"],
                        "" if x["comparisons"] == 1 else "s"))
    return lines
