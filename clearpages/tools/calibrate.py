"""``python -m clearpages calibrate``: measure this machine, choose thresholds.

Every usable routine is timed at sizes from a few hundred bytes to past the
caches, interleaved, on warm buffers and on cold ones (``measure``).  The
thresholds are then chosen by one stated rule, ``RULE``: at each size a
routine's score is the worse of its two ratios to the best routine on warm
and on cold buffers (``profile.scores``), because only the program knows
which it has; the thresholds chosen maximise the sum of log scores over the
sizes measured, and at no size may their choice score lower than the
default's beyond the noise (a gain within the noise keeps the default).
Sizes where the two policies differ are measured a second time before the
result is kept.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, Optional, TypeVar

from .. import _core, _dispatch, _system
from .._native import lib
from .._policy import NEVER, Thresholds, decision, native_policy, plan
from .._routines import BY_NAME
from .._units import KiB, MiB, format_size
from . import measure as _measure
from .profile import scores

RULE = ("each threshold maximises the worse case: at every size, a routine scores "
        "min(warm GB/s / best warm, cold GB/s / best cold); calibrate keeps the "
        "thresholds with the highest total log score that score below the default's "
        "nowhere beyond the noise")

Cases = Mapping[str, Mapping[str, Any]]
"""{scenario: {name: _measure.Measurement}} at one size."""
Table = Mapping[int, Cases]
"""{size: {scenario: {name: _measure.Measurement}}}"""


def _scores(cases: Cases) -> dict[str, float]:
    """Each routine's score at one size (RULE): the package's one scoring
    function, _profile.scores, over the measured GB/s."""
    return scores({sc: {n: m.median for n, m in row.items()} for sc, row in cases.items()})


def _score(cases: Cases, name: str) -> float:
    return _scores(cases)[name]


class _Scored:
    """Each routine's score (RULE) and noise at each size, computed once."""

    def __init__(self, data: Table) -> None:
        self.score = {size: _scores(cases) for size, cases in data.items()}
        self.spread = {size: {n: max(row[n].rel_spread for row in cases.values())
                              for n in next(iter(cases.values()))}
                       for size, cases in data.items()}

    def judge(self, pick: Mapping[int, str], base: Mapping[int, str],
              floor: float) -> float | None:
        """Score of a policy against the default's (None: worse somewhere).

        pick and base map each size to the name chosen there.  The score sums
        log worse-case scores over sizes, counting a size at the default's
        score unless the candidate's gain there exceeds the noise."""
        total = 0.0
        for size, at_size in self.score.items():
            p, b = pick[size], base[size]
            mine, theirs = at_size[p], at_size[b]
            tol = max(floor, self.spread[size][p], self.spread[size][b])
            if mine < theirs * (1 - tol):
                return None
            total += math.log(max(1e-9, mine if mine > theirs * (1 + tol) else theirs))
        return total


def _distance(a: int, b: int) -> float:
    return abs(math.log2(max(a, 1)) - math.log2(max(b, 1)))


def _common(data: Table, methods: Sequence[str]) -> list[str]:
    return [m for m in methods
            if all(m in row for cases in data.values() for row in cases.values())]


T = TypeVar("T")
#: A candidate of a search: (what it is, its score or None where it scores
#: below the baseline somewhere, how many fields it changes, how far it
#: moves them).
Candidate = tuple[T, Optional[float], int, float]


def _best(candidates: Iterable[Candidate[T]]) -> T | None:
    """The best candidate by score, then the fewest changes, then the
    nearest to the baseline (the first seen of a tie); None when none
    qualifies."""
    best: tuple[tuple[float, int, float], T] | None = None
    for what, score, changed, distance in candidates:
        if score is None:
            continue
        key = (round(score, 9), -changed, -distance)
        if best is None or key > best[0]:
            best = (key, what)
    return None if best is None else best[1]


def select_routines(cpu: Any, default: Thresholds, data: Table,
                    methods: Sequence[str], floor: float = 0.03) -> Thresholds:
    """The thresholds (vector_max, temporal, nt_min, streaming, then long_min
    and long) that do best on the measurements by RULE without scoring below
    the default anywhere."""
    sizes = sorted(data)
    usable = _common(data, methods)
    temporals = [m for m in usable if BY_NAME[m].temporal] or [default.temporal]
    streamings = [m for m in usable if not BY_NAME[m].temporal] or [default.streaming]
    vmaxes = sorted({default.vector_max} | {s for s in sizes if s <= 1 * MiB})
    ntmins = sorted({default.nt_min} | {s for s in sizes if s >= 4 * KiB})
    # plan() is asked once per (vector_max, nt_min) with two routines of
    # the table standing for the roles (neither is memset, the third role);
    # which routine fills each role is then a lookup.  The long rule is
    # chosen afterwards, on top of the best of these, so the first stage
    # compares against the default without its long rule.
    tags = ("rep_stosq", "movnti")
    no_long = dataclasses.replace(default, long_min=NEVER, long="")
    base = {s: plan(cpu, no_long, s).method for s in sizes}
    scored = _Scored(data)
    roles = {(v, n): {s: plan(cpu, dataclasses.replace(
        no_long, vector_max=v, nt_min=n, temporal=tags[0], streaming=tags[1]), s).method
        for s in sizes} for v in vmaxes for n in ntmins}
    def routine_candidates() -> Iterator[Candidate[tuple[str, str, int, int]]]:
        for t in temporals:
            for st in streamings:
                fill = {tags[0]: t, tags[1]: st}
                for (v, n), role in roles.items():
                    pick = {s: fill.get(r, r) for s, r in role.items()}
                    yield ((t, st, v, n), scored.judge(pick, base, floor),
                           (t != default.temporal) + (st != default.streaming)
                           + (v != default.vector_max) + (n != default.nt_min),
                           _distance(v, default.vector_max) + _distance(n, default.nt_min))

    best = _best(routine_candidates())
    assert best is not None     # the default itself always qualifies
    t, st, v, n = best
    chosen = dataclasses.replace(default, vector_max=v, temporal=t, nt_min=n, streaming=st)

    # long: one routine for very long single extents, from a size up.
    base = {s: plan(cpu, default, s).method for s in sizes}
    longs = [("", NEVER)] + [(m, s) for m in temporals for s in sizes if s >= n]
    if default.long:
        longs.append((default.long, default.long_min))
    best_long = _best(
        (cand, scored.judge({s: plan(cpu, cand, s).method for s in sizes}, base, floor),
         (cand.long != default.long) + (cand.long_min != default.long_min),
         _distance(cand.long_min, default.long_min))
        for cand in (dataclasses.replace(chosen, long=name, long_min=lmin)
                     for name, lmin in longs))
    # None: the first stage's choice loses to the default's long rule
    # somewhere and no long rule makes up for it; keep the default.
    return best_long if best_long is not None else default


def select_threads(cpu: Any, th: Thresholds, data: Mapping[int, Mapping[str, Any]],
                   counts: Sequence[int], floor: float = 0.03) -> Thresholds:
    """thread_min and max_threads from {size: {count: Measurement}} data
    (keys are str(count); one scenario), never worse than th's own at any size."""
    counts = sorted(counts)

    def measured(c: int) -> str:
        return str(max(k for k in counts if k <= c))

    sizes = sorted(data)
    table = {s: {_measure.WARM: data[s]} for s in sizes}

    def chooser(t: Thresholds) -> dict[int, str]:
        return {s: measured(plan(cpu, t, s, threads="auto").threads) for s in sizes}

    base = chooser(th)
    scored = _Scored(table)
    best = _best(
        (cand, scored.judge(chooser(cand), base, floor),
         (cand.thread_min != th.thread_min) + (cand.max_threads != th.max_threads),
         _distance(cand.thread_min, th.thread_min))
        for cand in (dataclasses.replace(th, thread_min=tmin, max_threads=most)
                     for most in sorted({th.max_threads, 1} | set(counts))
                     for tmin in sorted({th.thread_min} | set(sizes))))
    assert best is not None     # th itself always qualifies
    return best


# ---- the reasons -------------------------------------------------------------


def _at(cases: Cases, name: str) -> str:
    return "/".join("%.1f" % cases[sc][name].median for sc in _measure.SCENARIOS
                    if sc in cases)


def _scen(cases: Cases) -> str:
    return "/".join(sc for sc in _measure.SCENARIOS if sc in cases)


def with_reasons(cpu: Any, default: Thresholds, th: Thresholds, data: Table,
                 tdata: Mapping[int, Mapping[str, Any]]) -> Thresholds:
    """th with a 'measured ...' reason for every field (GB/s warm/cold)."""
    sizes = sorted(data)
    why: dict[str, str] = {}
    same = "measured: no gain beyond the noise over the default (%s), kept"

    def routine_why(at: list[int], name: str, default_name: str, temporal: bool) -> str:
        """The routine chosen for a role (temporal or streaming), its speed at
        a size where it is used (the middle of `at` for the temporal role, the
        largest for the streaming one) against the two next best of its kind."""
        if not at:
            return same % default_name
        s = at[len(at) // 2] if temporal else at[-1]
        alt = sorted((n for n in data[s][_measure.WARM]
                      if BY_NAME[n].temporal == temporal and n != name),
                     key=lambda n: -_score(data[s], n))[:2]
        return "measured: %s %s GB/s %s at %s (%s); %s" % (
            name, _at(data[s], name), _scen(data[s]), format_size(s),
            ", ".join("%s %s" % (n, _at(data[s], n)) for n in alt),
            "beats the default %s beyond the noise" % default_name
            if name != default_name else "the default, not beaten beyond the noise")

    # Which rule the policy follows at each size measured, as it says.
    policy = native_policy(cpu, th)
    rule = {s: decision(policy, s).why for s in sizes}
    temps = [s for s in sizes if rule[s] == lib.CP_WHY_TEMPORAL]
    streams = [s for s in sizes if rule[s] in (lib.CP_WHY_STREAMING, lib.CP_WHY_LONG)]
    why["temporal"] = routine_why(temps, th.temporal, default.temporal, True)

    if th.vector_max != default.vector_max:
        at = temps[0] if temps else None
        why["vector_max"] = ("measured: %s scores above memset from %s (%s vs %s GB/s %s)"
                             % (th.temporal, format_size(at or th.vector_max),
                                _at(data[at], th.temporal), _at(data[at], "libc"),
                                _scen(data[at])) if at is not None and "libc" in
                             data[at][_measure.WARM] else "measured")
    else:
        why["vector_max"] = same % format_size(default.vector_max)

    if th.nt_min != default.nt_min or th.streaming != default.streaming:
        parts = []
        if streams:
            s = streams[0]
            parts.append("%s scores above %s from %s (%s vs %s GB/s %s)" % (
                th.streaming, th.temporal, format_size(s), _at(data[s], th.streaming),
                _at(data[s], th.temporal), _scen(data[s])))
        if temps:
            s = temps[-1]
            parts.append("not at %s (%s vs %s)" % (
                format_size(s), _at(data[s], th.streaming), _at(data[s], th.temporal)))
        why["nt_min"] = "measured: " + (", ".join(parts) or "streaming above the sizes measured")
    else:
        why["nt_min"] = same % format_size(default.nt_min)
    why["streaming"] = routine_why(streams, th.streaming, default.streaming, False)

    if (th.long, th.long_min) == (default.long, default.long_min):
        why["long_min"] = why["long"] = same % (
            "%s from %s" % (default.long, format_size(default.long_min))
            if default.long else "none")
    elif th.long:
        at = min(s for s in sizes if rule[s] == lib.CP_WHY_LONG)
        why["long_min"] = why["long"] = "measured: %s %s vs %s %s GB/s at %s" % (
            th.long, _at(data[at], th.long), th.streaming, _at(data[at], th.streaming),
            format_size(at))
    else:
        why["long_min"] = why["long"] = "measured: no routine beats %s on long extents" % (
            th.streaming)

    if not tdata:
        why["thread_min"] = why["max_threads"] = \
            "measured: one CPU for this process, no threads to try"
    else:
        big = max(tdata)
        row = tdata[big]
        speeds = ", ".join("%s thread%s %.1f" % (k, "" if k == "1" else "s", row[k].median)
                           for k in sorted(row, key=int))
        if (th.thread_min, th.max_threads) == (default.thread_min, default.max_threads):
            why["thread_min"] = why["max_threads"] = (
                "measured: no gain beyond the noise over the default; at %s: %s GB/s"
                % (format_size(big), speeds))
        else:
            why["thread_min"] = "measured: threads pay from %s; at %s: %s GB/s" % (
                format_size(th.thread_min), format_size(big), speeds)
            why["max_threads"] = ("measured: more than one thread never paid; at %s: %s GB/s"
                                  % (format_size(big), speeds) if th.max_threads == 1 else
                                  "measured: at %s: %s GB/s" % (format_size(big), speeds))
    return dataclasses.replace(th, source="calibration", why=tuple(why.items()))


# ---- measuring ----------------------------------------------------------------


@dataclasses.dataclass
class Result:
    """What calibrate() found."""

    default: Thresholds
    thresholds: Thresholds
    routines: dict[int, dict[str, dict[str, Any]]]
    """{size: {scenario: {routine: Measurement}}}"""
    threads: dict[int, dict[str, Any]]
    """{size: {str(thread count): Measurement}}"""
    path: Path | None = None

    def comparison(self, cpu: Any) -> list[dict[str, Any]]:
        """Per measured size: the default's choice and the calibrated one,
        GB/s in each scenario and the worse-case score (RULE)."""
        rows = []
        for size in sorted(self.routines):
            d = plan(cpu, self.default, size).method
            c = plan(cpu, self.thresholds, size).method
            cases = self.routines[size]
            row: dict[str, Any] = {"size": size, "threads": 1, "default": d, "calibrated": c,
                                   "default_score": _score(cases, d),
                                   "calibrated_score": _score(cases, c)}
            for sc, ms in cases.items():
                row["default_%s_gbps" % sc] = ms[d].median
                row["calibrated_%s_gbps" % sc] = ms[c].median
            rows.append(row)
        for size in sorted(self.threads):
            dn = plan(cpu, self.default, size, threads="auto").threads
            cn = plan(cpu, self.thresholds, size, threads="auto").threads
            trow = self.threads[size]
            counts = sorted(int(k) for k in trow)

            def near(n: int, counts: list[int] = counts) -> str:
                return str(max(k for k in counts if k <= n))
            rows.append({"size": size, "threads": "auto", "default": "%d thread%s" % (
                dn, "" if dn == 1 else "s"), "calibrated": "%d thread%s" % (
                cn, "" if cn == 1 else "s"), "default_warm_gbps": trow[near(dn)].median,
                "calibrated_warm_gbps": trow[near(cn)].median})
        return rows


def grid(lo: int, hi: int, *, halves: tuple[int, int] | None = None) -> list[int]:
    """Powers of two from lo to hi, plus 1.5x steps inside halves=(a, b)."""
    out = []
    s = lo
    while s <= hi:
        out.append(s)
        if halves and halves[0] <= s < halves[1] and s * 3 // 2 <= hi:
            out.append(s * 3 // 2)
        s *= 2
    return out


def plan_sizes(cpu: Any, quick: bool) -> tuple[list[int], list[int]]:
    """(routine sizes, thread sizes) to measure on this CPU."""
    last = cpu.last_cache or 32 * MiB
    top = 256 * MiB if quick else max(1 << 30, 1 << (2 * last - 1).bit_length())
    top = min(top, 1 << (_system.measurement_cap().bit_length() - 1), 4 << 30)
    if quick:
        sizes = grid(1 * KiB, top)
    else:
        sizes = grid(512, top, halves=(4 * KiB, max(cpu.l2, 64 * KiB)))
    tsizes = grid(4 * MiB if quick else 2 * MiB, top)
    if quick:
        tsizes = tsizes[::2] if len(tsizes) > 4 else tsizes
        if tsizes[-1] != top:
            tsizes.append(top)
    return sizes, tsizes


def thread_counts(cores: int) -> list[int]:
    counts = {1}
    c = 2
    while c < cores:
        counts.add(c)
        c *= 2
    if cores > 1:
        counts.add(cores)
    return sorted(counts)


def calibrate(*, quick: bool = False, sizes: Sequence[int] | None = None,
              thread_sizes: Sequence[int] | None = None, repeat: int | None = None,
              target_s: float | None = None, budget_s: float | None = None,
              verify: bool = True,
              progress: Callable[[str, int, int], None] | None = None) -> Result:
    """Measure this machine and choose thresholds by RULE.  Nothing is written.

    sizes / thread_sizes / repeat / target_s / budget_s override the plan
    (tests use tiny ones); progress(stage, done, total) reports.
    """
    from .. import _policy

    cpu = _core.cpu()
    built = _dispatch.state().built
    methods = list(_core.methods())
    default = _policy.default_thresholds(cpu, built)
    auto_sizes, auto_tsizes = plan_sizes(cpu, quick)
    sizes = sorted(set(sizes if sizes is not None else auto_sizes))
    tsizes = sorted(set(thread_sizes if thread_sizes is not None else auto_tsizes))
    repeat = repeat or (7 if quick else 11)
    target_s = target_s or (0.001 if quick else 0.002)
    budget_s = budget_s or (1.0 if quick else 3.0)
    floor = 0.05 if quick else 0.03
    counts = thread_counts(cpu.cores) if cpu.cores > 1 else []
    if not counts:
        tsizes = []

    cands = [_measure.routine(m) for m in methods]
    top = max(sizes + tsizes) if sizes or tsizes else 4096
    total = len(sizes) + len(tsizes)
    done = 0

    def report(stage: str) -> None:
        if progress is not None:
            progress(stage, done, total)

    def cases(buf: _measure.Buffer, size: int, cs: Sequence[_measure.Candidate]
              ) -> dict[str, dict[str, Any]]:
        out = {}
        for sc in _measure.SCENARIOS:
            if sc == _measure.WARM or _measure.cold_measurable(size, buf.size):
                out[sc] = _measure.measure_size(buf, size, cs, repeat=repeat,
                                                target_s=target_s, budget_s=budget_s,
                                                scenario=sc)
        return out

    routines: dict[int, dict[str, dict[str, Any]]] = {}
    threads: dict[int, dict[str, Any]] = {}
    with _measure.Buffer(max(top, _measure.cold_pool_size(cpu))) as buf:
        for size in sizes:
            report("routines at %s" % format_size(size))
            routines[size] = cases(buf, size, cands)
            done += 1
        th = select_routines(cpu, default, routines, methods, floor) if sizes else default
        if verify:
            again = [s for s in sizes
                     if plan(cpu, th, s).method != plan(cpu, default, s).method]
            for size in again:
                report("checking %s" % format_size(size))
                pair = {plan(cpu, th, size).method, plan(cpu, default, size).method}
                more = cases(buf, size, [_measure.routine(m) for m in pair])
                for sc, row in more.items():
                    for name, m in row.items():
                        routines[size][sc][name].merge(m)
            if again:
                th = select_routines(cpu, default, routines, methods, floor)

        for size in tsizes:
            report("threads at %s" % format_size(size))
            name = plan(cpu, th, size).method
            got = _measure.measure_size(
                buf, size, [_measure.threaded(name, c) for c in counts], repeat=repeat,
                target_s=target_s, budget_s=budget_s)
            threads[size] = {str(c): got["%s x%d" % (name, c)] for c in counts}
            done += 1
        if tsizes:
            th = select_threads(cpu, th, threads, counts, floor)
    report("done")
    th = with_reasons(cpu, default, th, routines, threads)
    return Result(default=default, thresholds=th, routines=routines, threads=threads)
