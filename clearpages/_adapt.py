"""Adaptive auto: the Python face of the learner in csrc/core/adapt.c.

In the band of sizes ``Thresholds.adapt_min <= n < adapt_max`` a single
clear with ``method="auto"`` asks the learner which store to use and, unless
the learner has settled and this call is not one of its samples, is timed
(two clock reads) and reports its start and end.  The learner keeps, per size
class (powers of two) and per kind of buffer ("cleared again soon" or
"other"), the time per byte of the ordinary-store and the streaming routine
and of what the program did after each until its next clear, and exploits
the one that costs less (see csrc/core/adapt.c for the rules and their
bounds).

This module configures the learner from the thresholds, and reads back
what it has learned for ``plan()`` and ``python -m clearpages info``.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from ._native import ffi, lib
from ._policy import Thresholds, _evidence
from ._units import format_size

#: The learner's contexts, as plan() and info name them.
CONTEXTS = ("other buffers", "buffers cleared again soon")


@dataclasses.dataclass(frozen=True)
class Learned:
    """What one size class has learned in one context."""

    size_class: int
    context: int
    method: str
    """The routine adaptive auto runs there now."""
    gbps: dict[str, float]
    """Recency-weighted GB/s per routine (only those measured)."""
    samples: dict[str, int]
    calls: int
    explorations: int
    switches: int
    after: dict[str, float] = dataclasses.field(default_factory=dict)
    """ns per KiB the program spent after a clear of each routine, until its
    next clear (only those measured)."""
    timed: int = 0

    @property
    def sizes(self) -> str:
        return "%s-%s" % (format_size(1 << self.size_class),
                          format_size(2 << self.size_class))

    def sentence(self) -> str:
        speeds = ", ".join("%s %.1f GB/s" % (name, g) for name, g in self.gbps.items())
        after = ", ".join("%s %.1f ns/KiB" % kv for kv in self.after.items())
        return ("%s: %s (%s%s; %d calls, %d timed, %d explored, %d switch%s)"
                % (CONTEXTS[self.context], self.method, speeds or "not timed yet",
                   "; the program after it: " + after if after else "",
                   self.calls, self.timed, self.explorations, self.switches,
                   "" if self.switches == 1 else "es"))


def reuse_bytes(th: Thresholds) -> int:
    """A buffer cleared again within this many bytes of clears is "cleared
    again soon" (a quarter of the band's top: the last-level cache)."""
    return max(th.adapt_max // 4, th.adapt_min)


def configure(th: Thresholds, usable: bool, enabled: bool) -> None:
    """Set the learner's band from th (empty when not usable: a forced
    method) and forget all; then turn it on or off (:func:`enable`)."""
    p = ffi.new("struct cp_adapt_params *")
    lib.cp_adapt_defaults(p)
    if usable and th.adapt_min < th.adapt_max:
        p.lo, p.hi = th.adapt_min, th.adapt_max
        p.nt_min = th.nt_min
        # "Cleared again soon": within a last-level cache's worth of band
        # clears, 4x the band's floor when no larger figure is known.
        p.reuse_bytes = reuse_bytes(th)
    lib.cp_adapt_configure(p)
    enable(enabled)


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
        gbps = {names[a]: 1.0 / st.ns_per_byte[a]
                for a in (0, 1) if st.samples[a] and st.ns_per_byte[a] > 0}
        after = {names[a]: st.use_ns_per_byte[a] * 1024 for a in (0, 1)
                 if st.use_ns_per_byte[a] > 0}
        out.append(Learned(size_class, ctx, names[st.arm], gbps,
                           {names[a]: int(st.samples[a]) for a in (0, 1)},
                           int(st.calls), int(st.explorations), int(st.switches),
                           after, int(st.timed)))
    return out


def learned_all(th: Thresholds) -> list[Learned]:
    """Everything learned, size class by size class, in the band."""
    if th.adapt_min >= th.adapt_max:
        return []
    lo = th.adapt_min.bit_length() - 1
    hi = (th.adapt_max - 1).bit_length() - 1
    return [x for c in range(lo, hi + 1) for x in learned(c)]


def describe(th: Thresholds, d: Any, nbytes: int, enabled: bool, forced: Any) -> str:
    """plan()'s ``learned`` for a single clear: what adaptation does at nbytes
    (d: the native policy's decision, a _policy.Decision), and why."""
    if d.adaptive:
        t, s = d.roles
        size_class = nbytes.bit_length() - 1
        got = learned(size_class, d.roles)
        head = ("in the adaptive band %s-%s: single clears are timed (a sample of them "
                "once settled) and run %s or %s, whichever cost this program less in its "
                "own clears of %s-%s and what it did after them"
                % (format_size(th.adapt_min), format_size(th.adapt_max), t, s,
                   format_size(1 << size_class), format_size(2 << size_class)))
        if not got:
            return head + "; nothing learned yet, so the choice above until then"
        return head + "; " + "; ".join(x.sentence() for x in got)
    if forced is not None:
        return "not adaptive: CLEARPAGES_METHOD forces %s" % forced
    if th.adapt_min >= th.adapt_max:
        return "not adaptive: %s" % th.reason("adapt")
    band = "%s-%s" % (format_size(th.adapt_min), format_size(th.adapt_max))
    if not enabled:
        return "adaptation is off (CLEARPAGES_ADAPT=0 or set_adaptive(False)): " \
               "the static choice above, always"
    return "outside the adaptive band %s: the static choice above, untimed" % band


def describe_hot(th: Thresholds, nbytes: int) -> tuple[str, tuple[str, ...]] | None:
    """plan(hot=True)'s ``learned`` and the evidence it cites, while adapting:
    the learner's history of a buffer sets its hot tail (hot_max, or
    hot_max_other for one not cleared lately).  None where both tails
    cover nbytes alike."""
    other, reuse = min(th.hot_max_other, th.hot_max), reuse_bytes(th)
    if other >= min(nbytes, th.hot_max):
        return None
    size = format_size
    words = ("hot=True is the program's word; the buffer's history sets how much "
             "stays hot: " + (
                 "the last %s as planned when it was cleared within the last %s of "
                 "clears, else the last %s (hot_max_other: probably cold)"
                 % (size(min(nbytes, th.hot_max)), size(reuse), size(other))
                 if nbytes <= reuse else
                 "the last %s (hot_max_other), as one of %s is never cleared again "
                 "within %s of clears and probably not in the cache"
                 % (size(other), size(nbytes), size(reuse))))
    return words, _evidence(th, "hot_max_other")


def info(th: Thresholds, enabled: bool, forced: Any) -> dict[str, Any]:
    """What ``info --json`` shows: the band, the switch, and what was learned."""
    active = enabled and forced is None and th.adapt_min < th.adapt_max
    return {
        "on": active,
        "band": [th.adapt_min, th.adapt_max],
        "why": th.reason("adapt"),
        "off_because": None if active else (
            "CLEARPAGES_METHOD forces %s" % forced if forced is not None else
            "CLEARPAGES_ADAPT=0 or set_adaptive(False)" if not enabled else
            th.reason("adapt")),
        "learned": [dataclasses.asdict(x) | {"sizes": x.sizes, "kind": CONTEXTS[x.context]}
                    for x in (learned_all(th) if active else [])],
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
        lines.append("%-16s %-27s %-9s (%s; %d calls, %d explored, %d switch%s)"
                     % (x["sizes"], x["kind"], x["method"], speeds or "not timed yet",
                        x["calls"], x["explorations"], x["switches"],
                        "" if x["switches"] == 1 else "es"))
    return lines
