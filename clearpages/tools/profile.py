"""Machine profiles: every routine's speed at every size, warm and cold.

A profile is what ``python -m clearpages bench --profile FILE`` writes: the
CPU's identity and GB/s for each (size, scenario, routine), the routines
called directly (no job, no Python path of clearpages around them).
The repository keeps a corpus of them (``profiles/``), one per machine
measured, and the default policy is *replayed* against each: its thresholds
come from the profile's CPU, and its choice at each size is judged against
the measured table.

A routine's *score* at a size is the worse of its two ratios to the best
routine of each scenario: ``min(warm / best warm, cold / best cold)``; the
best static choice is the one with the highest score (the rule ``calibrate``
decides by, and measured auto is judged by).  The default policy's static
choice is judged by the rule it is made by (``judge(static=True)``): it
knows nothing of a buffer's history, so it must not lose much against
memset in either scenario (LOSE_MOST), and it must be near the best routine
in at least one of them (a choice beaten in both is no choice).
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import platform
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from .._cpu import CPU
from .._policy import Thresholds, default_thresholds, plan
from .._routines import ALL_METHODS
from .._units import format_size

SCHEMA = "machine-profile/1"

#: Sizes a profile measures: 4 KiB to 1 GiB, every power of two.
SIZES: tuple[int, ...] = tuple(1 << b for b in range(12, 31))

#: The goals the replay judges by (the first of bench/README.md's "The goals").
WITHIN_BEST = 0.9
"""auto's score at least this fraction of the best static choice's."""
OVER_MEMSET_NEAR_L3 = 1.2
"""At 1-4x the L3, auto at least this many times memset, in each scenario;
where no routine is (the C library's memset streams there itself), at least
what the best routine reaches."""
LOSE_MOST = 0.9
"""The static choice at least this fraction of memset's speed in each
scenario."""
NOISE = 0.05
"""How far two medians of the same thing differ between runs (two profiles
of one CPU disagree by this much at a size, and near ties swap places): a
choice within this of the goal is within the evidence's noise of it."""

METHOD_TEXT = (
    "GB/s = 1e9 bytes/s, median of {repeat} interleaved rounds. Each routine is called "
    "directly (one native call per buffer, no job, no Python per-call path) on "
    "2 MiB-aligned, prefaulted, THP-advised memory. warm: the same buffer cleared back "
    "to back. cold: a different buffer each call, walking a {pool} pool, so each was "
    "last touched a whole pool ago (sizes up to a quarter of the pool; above, every "
    "clear is cold and only warm is recorded).")

Table = Mapping[int, Mapping[str, Mapping[str, float]]]
"""{size: {scenario: {routine: GB/s}}}"""


# ---- judging ------------------------------------------------------------------


def scores(cases: Mapping[str, Mapping[str, float]],
           against: Iterable[str] | None = None) -> dict[str, float]:
    """{name: worse ratio to the best of each scenario} for the names
    measured in every scenario of ``cases`` ({scenario: {name: GB/s}}).
    against: the names the best is taken from (the routines, when auto and
    the competitors are columns too); None: all of them."""
    names = set.intersection(*(set(row) for row in cases.values())) if cases else set()
    among = None if against is None else set(against)
    best = {sc: max([v for n, v in row.items() if among is None or n in among]
                    or row.values()) for sc, row in cases.items()}
    return {n: min(cases[sc][n] / best[sc] if best[sc] > 0 else 0.0 for sc in cases)
            for n in sorted(names)}


def best_static(cases: Mapping[str, Mapping[str, float]]) -> tuple[str, float]:
    """(routine, score) of the best static choice at one size."""
    s = scores(cases)
    name = max(s, key=lambda n: (s[n], n))
    return name, s[name]


# ---- profiles -----------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Profile:
    """One machine's measured table."""

    name: str
    cpu: CPU
    table: Table
    method: str
    data: Mapping[str, Any] = dataclasses.field(default_factory=dict, repr=False)

    @property
    def label(self) -> str:
        c = self.cpu
        return "%s (%s family %d model %d), L2 %s, L3 %s, %d CPUs%s" % (
            c.brand or c.vendor, c.vendor, c.family, c.model, format_size(c.l2),
            format_size(c.l3), c.cores, ", guest" if "hypervisor" in c.features else "")


def cpu_from_identity(ident: Mapping[str, Any]) -> CPU:
    """The CPU a profile (or calibration file) was recorded on."""
    return CPU(vendor=str(ident["vendor"]), family=int(ident["family"]),
               model=int(ident["model"]), stepping=int(ident.get("stepping", 0)),
               brand=str(ident.get("brand", "")),
               features=frozenset(str(f) for f in ident["features"]),
               l1d=int(ident.get("l1d", 0)), l2=int(ident.get("l2", 0)),
               l3=int(ident.get("l3", 0)), cores=int(ident.get("cores", 1)), is_x86=True)


def from_json(data: Mapping[str, Any], name: str = "") -> Profile:
    """A Profile from its JSON form; ValueError says what is wrong."""
    if data.get("schema") != SCHEMA:
        raise ValueError("%s: not a %s file (schema %r)" % (name, SCHEMA, data.get("schema")))
    try:
        cpu = cpu_from_identity(data["cpu"])
        table: dict[int, dict[str, dict[str, float]]] = {}
        for row in data["results"]:
            size, sc = int(row["size"]), str(row["scenario"])
            gbps = {str(k): float(v) for k, v in row["gbps"].items()}
            unknown = set(gbps) - set(ALL_METHODS)
            if unknown or sc not in ("warm", "cold") or size < 1 or not gbps:
                raise ValueError("bad row %r" % (row,))
            table.setdefault(size, {})[sc] = gbps
        method = str(data["method"])
    except (KeyError, TypeError, AttributeError) as e:
        raise ValueError("%s: malformed profile: %s" % (name, e)) from None
    return Profile(name=name, cpu=cpu, table=table, method=method, data=data)


def load(path: str | Path) -> Profile:
    p = Path(path)
    with open(p) as f:
        return from_json(json.load(f), p.stem)


def to_json(cpu_ident: Mapping[str, Any], table: Table, method: str,
            extra: Mapping[str, Any] | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {"schema": SCHEMA, "cpu": dict(cpu_ident)}
    out.update(extra or {})
    out["method"] = method
    out["results"] = [{"size": size, "scenario": sc,
                       "gbps": {k: round(v, 2) for k, v in table[size][sc].items()}}
                      for size in sorted(table) for sc in ("warm", "cold")
                      if sc in table[size]]
    return out


# ---- replay -------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Verdict:
    """The default policy's choice at one size of a profile, judged."""

    size: int
    choice: str
    score: float | None
    """None: the profile did not measure the chosen routine."""
    best: str
    best_score: float
    memset_score: float | None
    near_l3_ratio: float | None
    """At 1-4x the L3: the choice's GB/s over memset's, the worse scenario."""
    near_l3_best: float | None = None
    """The same for the routine with the highest such ratio: what the goal
    can ask for where it is below OVER_MEMSET_NEAR_L3."""
    static: bool = False
    """Judged as the static choice: memset_ratio and best_in_one, not the
    score, decide."""
    memset_ratio: float | None = None
    """The choice's GB/s over memset's, the worse scenario."""
    best_in_one: float | None = None
    """The choice's GB/s over the best routine's, the better scenario."""

    @property
    def ok(self) -> bool:
        return self.ok_within(NOISE)

    def ok_within(self, noise: float) -> bool:
        """Met with an allowance of ``noise`` (a fraction) for measurement noise."""
        if self.score is None:
            return True
        slack = 1 - noise
        if self.static:
            if self.best_in_one is not None and self.best_in_one < WITHIN_BEST * slack:
                return False
            if self.memset_ratio is not None and self.memset_ratio < LOSE_MOST * slack:
                return False
        else:
            if self.score < WITHIN_BEST * self.best_score * slack:
                return False
            if self.memset_score is not None and self.score < self.memset_score * slack:
                return False
        if self.near_l3_ratio is None:
            return True
        goal = OVER_MEMSET_NEAR_L3
        if self.near_l3_best is not None:
            goal = min(goal, self.near_l3_best)
        return self.near_l3_ratio >= goal * slack

    def goals(self) -> list[tuple[str, str, float, float]]:
        """(goal, reference, figure, least) for each goal this verdict
        tests: its key ("best", "rival", "near_l3"), what the choice is
        measured against, its figure, and the least figure that meets it."""
        if self.score is None:
            return []
        if self.static:
            out = [("best", "the best routine in its better scenario", self.best_in_one
                    if self.best_in_one is not None else 1.0, WITHIN_BEST)]
            if self.memset_ratio is not None:
                out.append(("rival", "memset in its worse scenario", self.memset_ratio,
                            LOSE_MOST))
        else:
            out = [("best", "the best routine's score (%s)" % self.best,
                    self.score / self.best_score, WITHIN_BEST)]
            if self.memset_score is not None:
                out.append(("rival", "the rival score", self.score / self.memset_score, 1.0))
        if self.near_l3_ratio is not None:
            goal = OVER_MEMSET_NEAR_L3
            if self.near_l3_best is not None:
                goal = min(goal, self.near_l3_best)
            out.append(("near_l3", "libc at 1-4x the L3", self.near_l3_ratio, goal))
        return out

    def text(self) -> str:
        """The verdict in the words of the package's rule (measure.OK or
        MISS; a profile holds medians alone, so NOISE stands for the
        spread), naming the goal that decided it: a goal missed, else the
        nearest one met ("auto 0.81 of the best routine's score (avx2_nt)
        (goal 0.90): miss")."""
        judged = [(fig >= goal * (1 - NOISE), ref, fig, goal)
                  for _, ref, fig, goal in self.goals()]
        if not judged:
            return "%s not measured in this profile" % self.choice
        met, ref, fig, goal = min(judged, key=lambda j: (j[0], j[2] / j[3]))
        return "%s %.2f of %s (goal %.2f): %s" % (
            self.choice, fig, ref, goal,
            "miss" if not met else "ok" if fig >= goal else "ok, within the %.0f%% noise"
            % (100 * NOISE))

    def why(self) -> str:
        if self.score is None:
            return "%s not measured in this profile" % self.choice
        parts = ["%s scores %.2f, best %s %.2f" % (self.choice, self.score, self.best,
                                                   self.best_score)]
        if self.memset_score is not None:
            parts.append("memset %.2f" % self.memset_score)
        if self.static and self.best_in_one is not None:
            parts.append("%.2f of the best routine in its better scenario" % self.best_in_one)
        if self.static and self.memset_ratio is not None:
            parts.append("%.2fx memset in its worse" % self.memset_ratio)
        if self.near_l3_ratio is not None:
            parts.append("%.2fx memset near the L3" % self.near_l3_ratio)
            if self.near_l3_best is not None and self.near_l3_best < OVER_MEMSET_NEAR_L3:
                parts.append("no routine above %.2fx (memset streams there)" % self.near_l3_best)
        return ", ".join(parts)


def judge(cases: Mapping[str, Mapping[str, float]], choice: str, *,
          near_l3: bool = False, rivals: Sequence[str] = (), static: bool = False) -> Verdict:
    """The choice at one size of a table ({scenario: {name: GB/s}}), judged
    against the routines in it.  ``choice`` and ``rivals`` may be extra
    columns (auto, ctypes.memset, numpy.fill): they are scored against the
    best *routine* of each scenario but never count as a static choice.
    ``memset_score`` is the best of the rivals' scores: the code auto
    replaces, which it must never lose to (libc, a routine of the package's
    own, counts among the routines, whose best auto must reach 0.90 of).
    Without rivals (a profile holds routines alone) it is libc's, the C
    library's memset standing in for them.  static:
    judged as the default policy's static choice (see the module's
    docstring)."""
    routines = {sc: {n: v for n, v in row.items() if n in ALL_METHODS}
                for sc, row in cases.items()}
    every = scores(cases, against=ALL_METHODS)

    def score(name: str) -> float | None:
        return every.get(name)

    best, best_score = best_static(routines)
    refs = [x for x in (score(n) for n in (rivals or ("libc",))) if x is not None]
    near = near_best = None
    if near_l3 and score(choice) is not None and "libc" in routines[next(iter(cases))]:
        def over_memset(name: str) -> float:
            return min(cases[sc][name] / cases[sc]["libc"] for sc in cases)
        near = over_memset(choice)
        rows = set.intersection(*(set(row) for row in routines.values()))
        near_best = max(over_memset(n) for n in rows)
    memset_ratio = best_in_one = None
    if static and score(choice) is not None:
        best_in_one = max(cases[sc][choice] / max(routines[sc].values()) for sc in cases)
        if all("libc" in routines[sc] for sc in cases):
            memset_ratio = min(cases[sc][choice] / cases[sc]["libc"] for sc in cases)
    return Verdict(size=0, choice=choice, score=score(choice), best=best,
                   best_score=best_score, memset_score=max(refs) if refs else None,
                   near_l3_ratio=near, near_l3_best=near_best, static=static,
                   memset_ratio=memset_ratio, best_in_one=best_in_one)


def replay(profile: Profile, policy: Callable[[CPU], Thresholds] | None = None
           ) -> list[Verdict]:
    """Judge a policy's static choice (default: the default thresholds of
    the profile's CPU, every routine built) at every size of the profile."""
    cpu = profile.cpu
    th = policy(cpu) if policy else default_thresholds(cpu, frozenset(ALL_METHODS))
    out = []
    for size in sorted(profile.table):
        choice = plan(cpu, th, size).method
        v = judge(profile.table[size], choice, static=True,
                  near_l3=bool(cpu.l3) and cpu.l3 <= size <= 4 * cpu.l3)
        out.append(dataclasses.replace(v, size=size))
    return out


def corpus(directory: str | Path) -> list[Profile]:
    """Every profile in a directory, by file name."""
    return [load(p) for p in sorted(Path(directory).glob("*.json"))]


# ---- recording ----------------------------------------------------------------


def record(sizes: Sequence[int] = SIZES, names: Sequence[str] | None = None, *,
           repeat: int = 7, target_s: float = 0.002, budget_s: float = 3.0,
           progress: Callable[[int, int, int], None] | None = None) -> dict[str, Any]:
    """Measure this machine: the JSON form of its profile."""
    from .. import _calibration, _core
    from . import measure as _measure

    names = list(names) if names is not None else list(_core.methods())
    cands = [_measure.routine(n) for n in names]
    rows = _measure.measure(sorted(set(sizes)), cands, repeat=repeat, target_s=target_s,
                            budget_s=budget_s, progress=progress)
    table = {size: {sc: {n: m.median for n, m in row.items()} for sc, row in cases.items()}
             for size, cases in zip(sorted(set(sizes)), rows)}
    cpu = _core.cpu()
    # measure() walks one mapping: the cold pool, or the largest size if larger.
    pool = max(_measure.cold_pool_size(cpu), max(sizes))
    extra = {"kernel": "%s %s" % (platform.system(), platform.release()),
             "recorded": datetime.date.today().isoformat()}
    return to_json(_calibration.identity(cpu), table,
                   METHOD_TEXT.format(repeat=repeat, pool=format_size(pool)), extra)

