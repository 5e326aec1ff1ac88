"""What the command line shows, as data: ``info``, ``bench`` and machine
profiles.  ``cli`` parses arguments and prints; ``output`` renders."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from .. import __version__, _adapt, _calibration, _core, _cpu, _dispatch, _scan, _system
from .._routines import ALL_METHODS, ROUTINES
from .._units import format_size
from . import calibrate as _calibrate, measure as _measure, profile as _profile

#: What each feature is for, as `info` shows it.
FEATURE_USE = {
    "erms": "enhanced rep movsb/stosb: rep_stosb is fast",
    "fsrm": "fast short rep movsb",
    "fzrm": "fast zero-length rep movsb",
    "fsrs": "fast short rep stosb",
    "fsrc": "fast short rep cmpsb/scasb",
    "avx2": "avx2_nt (32-byte streaming stores); the avx2 zero scan",
    "avx512f": "avx512_nt (64-byte streaming stores)",
    "clflushopt": "optimized cache-line flush",
    "movdir64b": "64-byte direct stores",
    "clzero": "clzero (AMD: zero a cache line without reading it)",
    "osxsave": "the OS manages vector state (XGETBV is legal)",
    "sse2": "movnti (8-byte streaming stores); the sse2 zero scan",
    "hypervisor": "running under a hypervisor (guest cache sizes may be the host's)",
}

#: Reasons for the defaults the policy states without one.
DEFAULT_WHY = {
    "thread_min": "default: below it a second thread costs more (start-up, a cold core) "
                  "than it gains",
    "max_threads": "default: every CPU this process may run on",
    "chunk": "a job's first unit until it has timed the routine (later units end by "
             "the 40 ms slice deadline); Linux clears huge pages in 32 MiB chunks",
}

#: The thresholds ``info`` and ``bench`` report.
SHOWN = _calibration.FIELDS + ("chunk", "hot_max", "hot_max_other")

#: The name info's table shows where a field's public name is older (JSON
#: keeps the field's name).
LABEL = {"chunk": "unit"}

QUICK_SIZES = ("4K", "64K", "1M", "32M", "256M")
FULL_SIZES = ("4K", "16K", "64K", "256K", "1M", "4M", "16M", "64M", "256M", "1G")


def machine() -> dict[str, Any]:
    """Who measured: CPU identity, kernel, versions, date (for JSON and headers)."""
    return _system.machine(_calibration.identity(_core.cpu()))


def code() -> dict[str, Any]:
    """What ran, for a measurement resumed later to check it is the same:
    the version, a digest of the package's files (its Python and its built
    extensions), the thresholds auto decides by and the CLEARPAGES_
    variables set."""
    root = Path(__file__).resolve().parent.parent
    h = hashlib.sha256()
    for f in sorted(root.rglob("*")):
        if f.suffix in (".py", ".so") and "__pycache__" not in f.parts:
            h.update(str(f.relative_to(root)).encode() + b"\0" + f.read_bytes() + b"\0")
    th = json.loads(json.dumps(dataclasses.asdict(_core.thresholds()), default=str))
    return {"version": __version__, "digest": h.hexdigest()[:16], "thresholds": th,
            "environment": {k: v for k, v in sorted(os.environ.items())
                            if k.startswith("CLEARPAGES_")}}


def feature_status(name: str) -> str:
    st = _dispatch.state()
    if name in st.cpu.features:
        return "present"
    if name in st.cpu.disabled:
        return "disabled by CLEARPAGES_DISABLE"
    if name in st.raw_cpu.os_disabled:
        return "not enabled by the OS (XCR0)"
    return "missing"


def threshold_why(th: Any, key: str) -> str:
    why: str = th.reason(key)
    if why == "default" or key == "chunk":
        why = DEFAULT_WHY.get(key, why)
    return why


def pool_info() -> dict[str, Any]:
    """What a Pool's thread runs (the policy's routine for memory not used
    soon) and its default pace."""
    from .. import _fast, _pool

    return {"routine": _fast.decide(64 << 20, 1, 1, "auto", False)[0],
            "default_max_rate": _pool.DEFAULT_MAX_RATE, "step": _pool.STEP}


def populate_info() -> dict[str, Any]:
    """populate(threads="auto") measured now on a fresh region of the largest
    page size THP gives (what it found: POPULATE_FINDINGS)."""
    from .. import _region
    from .._system import thp_mode

    name = "2m" if thp_mode() not in (None, "never") else "4k"
    size = 4 * max(_region._PROBE, _region.PAGE_SIZES[name][0])
    with _region.Region(size, page_size=name, populate=True, threads="auto"):
        pass
    found = _region.POPULATE_FINDINGS.get(name)
    return {"page_size": name, "size": size, "found": found,
            "spread_gain": _region._SPREAD_GAIN}


def info_data() -> dict[str, Any]:
    st = _dispatch.state()
    cpu = st.cpu
    th = st.thresholds
    cal = st.calibration
    setting = st.config.calibration
    looked = _calibration.resolve(cpu, setting)
    from .. import _native

    return {
        "machine": machine(),
        "cpu": {
            "vendor": cpu.vendor, "brand": cpu.brand, "family": cpu.family,
            "model": cpu.model, "stepping": cpu.stepping, "cores": cpu.cores,
            "x86": cpu.is_x86, "notes": list(cpu.notes),
        },
        "caches": {"l1d": cpu.l1d, "l2": cpu.l2, "l3": cpu.l3,
                   "l3_sharing": cpu.l3_sharing},
        "features": {n: feature_status(n) for n in _cpu.FEATURE_NAMES},
        "methods": [{"name": r.name, "usable": r.name in st.methods,
                     "role": r.role, "kind": r.role,    # "kind": the old key, one release
                     "summary": r.summary, "why_not": st.missing(r.name)}
                    for r in ROUTINES],
        "thresholds": {
            "source": th.source,
            "values": {k: v for k, v in th.as_json().items() if k in SHOWN},
            "why": {k: threshold_why(th, k) for k in SHOWN},
        },
        "rule": _calibrate.RULE,
        "calibration": {
            "setting": setting,
            "in_use": str(cal.path) if cal is not None else None,
            "looked_for": str(looked) if looked is not None else None,
        },
        "environment": dict(st.config.raw),
        "forced_method": st.forced,
        "zero_scan": {"variant": st.scan, "usable": list(_scan.usable(cpu)),
                      "variants": {v: sorted(_scan.requires(v)) for v in _scan.VARIANTS}},
        "adaptive": _adapt.info(th, st.adapt_active, st.adapt_on, st.forced),
        "build": {"portable": st.built <= {"libc"}, "routines": sorted(st.built),
                  "extension": getattr(_native, "__file__", None)},
        "pool": pool_info(),
        "populate": populate_info(),
    }


#: The bench table's ratios are to the C library's memset as a routine
#: (libc, always usable), not to ctypes.memset, whose per-call cost of the
#: ctypes call would dominate them at small sizes.
RATIO_REFERENCE = "libc"


def cap_sizes(sizes: Sequence[int]) -> list[int]:
    """The sizes this machine's free memory can measure (at least the smallest)."""
    cap = _system.measurement_cap()
    return [s for s in sizes if s <= cap] or list(sizes[:1])


def judge_goals(cases: _measure.Cases, near_l3: bool,
                rivals: Sequence[str]) -> tuple[Any, list[_measure.GoalVerdict]]:
    """auto at one size judged by the package's one rule
    (``measure.judge_rounds``): the median verdict of the table
    (``profile.judge``), and for each of its goals the verdict on the
    figures of each repeat (the candidates of a repeat run back to back, so
    a change of the machine's load lands on all of them alike)."""
    medians = {sc: {n: m.median for n, m in row.items()} for sc, row in cases.items()}
    v = _profile.judge(medians, _measure.AUTO, near_l3=near_l3, rivals=rivals)
    rounds = min(len(m.samples) for row in cases.values() for m in row.values())
    figures: list[list[float]] = [[] for _ in v.goals()]
    for r in range(rounds):
        table = {sc: {n: m.gbps(m.samples[r]) for n, m in row.items()}
                 for sc, row in cases.items()}
        here = _profile.judge(table, _measure.AUTO, near_l3=near_l3, rivals=rivals)
        every = _profile.scores(table, against=ALL_METHODS)
        # The median verdict's goals, against its best routine, in this repeat.
        for k, (key, _, _, _) in enumerate(v.goals()):
            if key == "best":
                fig = (here.score or 0.0) / every[v.best] if every.get(v.best) else math.nan
            elif key == "rival":
                fig = (here.score or 0.0) / here.memset_score if here.memset_score else math.nan
            else:
                fig = here.near_l3_ratio if here.near_l3_ratio is not None else math.nan
            figures[k].append(fig)
    return v, [_measure.judge_rounds(figs, least, _measure.AUTO, ref)
               for (_, ref, _, least), figs in zip(v.goals(), figures)]


def deciding(verdicts: Sequence[_measure.GoalVerdict]) -> _measure.GoalVerdict | None:
    """The verdict that decides a row: a goal missed, else one the rounds
    cannot tell, else the nearest one met."""
    for outcome in (_measure.MISS, _measure.UNMEASURED, _measure.OK):
        hit = [v for v in verdicts if v.outcome == outcome]
        if hit:
            return min(hit, key=lambda v: v.ratio / v.goal if v.goal else v.ratio)
    return None


def bench_data(sizes: Sequence[int], names: Sequence[str] | None = None, *,
               repeat: int = 7, target_s: float = 0.002, budget_s: float = 3.0,
               scenarios: Sequence[str] = _measure.SCENARIOS, direct: bool = False,
               progress: Callable[[int, int, str], None] | None = None) -> dict[str, Any]:
    """Measure; the dict that ``bench --json`` writes (also the table and plot).

    Each result is one candidate at one size in one scenario.  Routines run
    as ``clear(view, method=name)``, with the per-call path ``auto`` has too,
    unless ``direct`` (one cffi call each, as profiles do).  ``best`` marks
    the fastest candidate of its (size, scenario), ``plan`` the routine auto
    plans, ``score`` the candidate's worse ratio to the best over the
    scenarios measured at that size (the rule calibrate decides by).  Each
    entry of ``goals`` judges auto at one size as the replay judges a
    profile (``profile.judge``): its score against the best routine's, and
    against memset's and numpy.fill's."""
    if names is None:
        names = list(_measure.known_names())
    else:
        names = list(dict.fromkeys(names))
        if RATIO_REFERENCE not in names:
            names.append(RATIO_REFERENCE)       # the reference for the ratio
    cands = _measure.candidates(names, direct=direct)

    def tick(done: int, total: int, size: int) -> None:
        if progress is not None:
            progress(done, total, format_size(size))

    sizes = sorted(set(sizes))
    rows = _measure.measure(sizes, cands, repeat=repeat, target_s=target_s,
                            budget_s=budget_s, scenarios=scenarios, progress=tick)
    results = []
    goals = []
    cpu = _core.cpu()
    for size, cases in zip(sizes, rows):
        if _measure.AUTO in names and any(n in _core.methods() for n in names):
            v, verdicts = judge_goals(
                cases, near_l3=bool(cpu.l3) and cpu.l3 <= size <= 4 * cpu.l3,
                rivals=[n for n in _measure.COMPETITORS if n in names])
            top = deciding(verdicts)
            outcome = top.outcome if top else _measure.OK
            goals.append({"size": size, "auto_score": v.score, "best": v.best,
                          "best_score": v.best_score, "rival_score": v.memset_score,
                          "near_l3_ratio": v.near_l3_ratio, "ok": outcome == _measure.OK,
                          "outcome": outcome,
                          "verdict": top.text() if top else v.text(),
                          "verdicts": [x.to_json() for x in verdicts]})
        planned = _core.plan(size, threads=1).method
        medians = {sc: {n: m.median for n, m in row.items()} for sc, row in cases.items()}
        # One rule for both tables: every row, auto and the competitors too,
        # scored against the best routine of each case, as the goals are.
        score = _profile.scores(medians, against=ALL_METHODS)
        for row in cases.values():
            best = max(row.values(), key=lambda m: m.median).name
            ref = row[RATIO_REFERENCE].median
            for m in row.values():
                d = m.to_json()
                d["ratio_to_libc"] = m.median / ref if ref else None
                d["plan"] = m.name == planned
                d["best"] = m.name == best
                d["score"] = score.get(m.name)
                results.append(d)
    th = _core.thresholds()
    return {
        "machine": machine(),
        "thresholds": {"source": th.source,
                       "values": {k: v for k, v in th.as_json().items()
                                  if k in _calibration.FIELDS}},
        "rule": _calibrate.RULE,
        "settings": {"repeat": repeat, "target_s": target_s, "budget_s": budget_s,
                     "sizes": sizes, "names": names, "scenarios": list(scenarios),
                     "routines": "called directly" if direct else "clear(view, method=name)",
                     "cold_pool": _measure.cold_pool_size()},
        "results": results,
        "goals": goals,
    }


def profile_data(sizes: Sequence[int] | None = None, *, repeat: int = 7,
                 target_s: float = 0.002, budget_s: float = 3.0,
                 progress: Callable[[int, int, str], None] | None = None
                 ) -> dict[str, Any]:
    """This machine's profile (``bench --profile``): every routine, called
    directly, warm and cold, at ``sizes`` (default ``profile.SIZES``)."""
    def tick(done: int, total: int, size: int) -> None:
        if progress is not None:
            progress(done, total, format_size(size))

    return _profile.record(cap_sizes(sorted(set(sizes or _profile.SIZES))), repeat=repeat,
                           target_s=target_s, budget_s=budget_s, progress=tick)
