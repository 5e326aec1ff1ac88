"""Per-machine calibration: measured thresholds, kept in a policy file.

glibc, the kernel and aocl-libmem derive their crossovers from cache sizes
and never measure.  ``python -m clearpages calibrate`` measures them here:
every usable routine at sizes from a few hundred bytes to past the caches,
interleaved, then picks the thresholds that make ``auto`` fastest at the
sizes measured, under one rule: at no measured size may the calibrated
choice be slower than the default's beyond the noise, and a gain within the
noise keeps the default.  Sizes where the two policies differ are measured a
second time before the result is kept.

The file lives in ``$XDG_CACHE_HOME/clearpages/`` (``~/.cache/clearpages/``)
under a name derived from the CPU's identity, which it also records: a file
written on another CPU, in another format, or unreadable, is ignored with a
warning and never trusted.
"""

from __future__ import annotations

import dataclasses
import datetime
import hashlib
import json
import math
import os
import warnings
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from ._policy import KiB, MiB, Thresholds, choose_threads, decide, format_size
from ._routines import ALL_METHODS, BY_NAME

#: Bump when the file's meaning changes; older files are then ignored.
FORMAT = 1

NUMERIC = ("vector_max", "nt_min", "thread_min", "max_threads")
METHODS = ("temporal", "streaming")
FIELDS = ("vector_max", "temporal", "nt_min", "streaming", "thread_min", "max_threads")

_LIMIT = 1 << 62


class CalibrationWarning(UserWarning):
    """A calibration file was ignored (in whole or in part)."""


@dataclasses.dataclass(frozen=True)
class Calibration:
    """A policy file accepted for this CPU."""

    thresholds: Thresholds
    path: Path
    data: Mapping[str, Any] = dataclasses.field(default_factory=dict, repr=False)


# ---- where and for whom ---------------------------------------------------


def cache_dir(env: Mapping[str, str] | None = None) -> Path:
    """$XDG_CACHE_HOME/clearpages, or ~/.cache/clearpages (XDG base dirs:
    a relative XDG_CACHE_HOME is invalid and ignored)."""
    env = os.environ if env is None else env
    base = env.get("XDG_CACHE_HOME", "")
    root = Path(base) if base and os.path.isabs(base) else Path.home() / ".cache"
    return root / "clearpages"


def identity(cpu: Any) -> dict[str, Any]:
    """What a calibration is valid for.  Features are the CPU's own, before
    CLEARPAGES_DISABLE, so masking a feature does not orphan the file."""
    return {
        "vendor": cpu.vendor,
        "family": int(cpu.family),
        "model": int(cpu.model),
        "stepping": int(cpu.stepping),
        "brand": cpu.brand,
        "features": sorted(set(cpu.features) | set(cpu.disabled)),
        "l1d": int(cpu.l1d),
        "l2": int(cpu.l2),
        "l3": int(cpu.l3),
        "cores": int(cpu.cores),
    }


def default_path(cpu: Any, env: Mapping[str, str] | None = None) -> Path:
    ident = identity(cpu)
    digest = hashlib.sha256(json.dumps(ident, sort_keys=True).encode()).hexdigest()[:12]
    vendor = "".join(ch for ch in cpu.vendor if ch.isalnum()) or "cpu"
    return cache_dir(env) / ("policy-%s-%d-%d-%s.json"
                             % (vendor, cpu.family, cpu.model, digest))


def resolve(cpu: Any, setting: str | None) -> Path | None:
    """The file a CLEARPAGES_CALIBRATION setting names (None: the default)."""
    if setting == "off":
        return None
    if setting is None:
        return default_path(cpu)
    return Path(setting).expanduser()


# ---- reading ----------------------------------------------------------------


def _warn(path: Path, what: str) -> None:
    warnings.warn("clearpages: ignoring calibration file %s: %s" % (path, what),
                  CalibrationWarning, stacklevel=3)


def _check_values(th: Any) -> str | None:
    """Why the thresholds section is malformed, or None."""
    if not isinstance(th, dict):
        return "no 'thresholds' object"
    for key in NUMERIC:
        v = th.get(key)
        if isinstance(v, bool) or not isinstance(v, int) or not 0 <= v <= _LIMIT:
            return "%s must be an int from 0 to 2**62, not %r" % (key, v)
    for key in METHODS:
        v = th.get(key)
        if v not in ALL_METHODS:
            return "%s names no routine: %r" % (key, v)
    if not BY_NAME[th["temporal"]].temporal:
        return "temporal names %s, a streaming routine" % th["temporal"]
    if th["thread_min"] < 1:
        return "thread_min must be at least 1"
    return None


def load(cpu: Any, methods: Sequence[str], setting: str | None,
         default: Thresholds) -> Calibration | None:
    """The calibration for this CPU, or None.

    setting: None (the default file, silently absent if never written),
    "off", or a path (a warning if it cannot be used).  Whatever is wrong
    with a file is said in a warning and the file is not used; a routine the
    file names that this CPU cannot run (CLEARPAGES_DISABLE, a portable
    build) falls back to the default for that threshold alone.
    """
    path = resolve(cpu, setting)
    if path is None:
        return None
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        if setting is not None:
            _warn(path, "no such file (CLEARPAGES_CALIBRATION names it)")
        return None
    except (OSError, UnicodeDecodeError) as e:
        _warn(path, "unreadable (%s)" % e)
        return None
    try:
        data = json.loads(text)
    except ValueError as e:
        _warn(path, "corrupt: not JSON (%s)" % e)
        return None
    if not isinstance(data, dict):
        _warn(path, "corrupt: not a JSON object")
        return None
    if data.get("format") != FORMAT:
        _warn(path, "stale format %r (this clearpages reads format %d); "
                    "run `python -m clearpages calibrate` again" % (data.get("format"), FORMAT))
        return None
    ident = identity(cpu)
    theirs = data.get("cpu")
    if theirs != ident:
        if isinstance(theirs, dict):
            diff = [k for k in ident if theirs.get(k) != ident[k]]
            what = ", ".join("%s %r (here %r)" % (k, theirs.get(k), ident[k])
                             for k in diff[:3])
        else:
            what = "no CPU identity"
        _warn(path, "written for another CPU: %s" % what)
        return None
    th: Any = data.get("thresholds")
    bad = _check_values(th)
    if bad is not None:
        _warn(path, "corrupt: %s" % bad)
        return None
    why_in: Any = data.get("why") if isinstance(data.get("why"), dict) else {}
    values = {k: th[k] for k in FIELDS}
    why = dict(default.why)
    for key in FIELDS:
        if key in METHODS and values[key] not in methods:
            warnings.warn("clearpages: calibration file %s: %s=%s cannot run here "
                          "(CLEARPAGES_DISABLE or the build); the default %s is used"
                          % (path, key, values[key], getattr(default, key)),
                          CalibrationWarning, stacklevel=2)
            values[key] = getattr(default, key)
            continue
        reason = why_in.get(key)
        why[key] = (str(reason) if isinstance(reason, str) and reason.startswith("measured")
                    else "measured (%s)" % path.name)
    thresholds = dataclasses.replace(default, **values, source="calibration: %s" % path,
                                     why=tuple(why.items()))
    return Calibration(thresholds, path, data)


# ---- writing ----------------------------------------------------------------


def save(path: Path | str, cpu: Any, thresholds: Thresholds, *,
         extra: Mapping[str, Any] | None = None) -> Path:
    """Write the policy file atomically; returns its path."""
    from . import __version__

    path = Path(path).expanduser()
    path.parent.mkdir(parents=True, exist_ok=True)
    data: dict[str, Any] = {
        "format": FORMAT,
        "generator": "clearpages %s" % __version__,
        "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "cpu": identity(cpu),
        "thresholds": {k: getattr(thresholds, k) for k in FIELDS},
        "why": {k: thresholds.reason(k) for k in FIELDS},
    }
    data.update(extra or {})
    tmp = path.with_name(path.name + ".%d.tmp" % os.getpid())
    tmp.write_text(json.dumps(data, indent=2, sort_keys=False) + "\n", encoding="utf-8")
    os.replace(tmp, path)
    return path


# ---- choosing thresholds from measurements ---------------------------------

Table = Mapping[int, Mapping[str, Any]]
"""{size: {name: _measure.Measurement}}"""


def _noise(a: Any, b: Any, floor: float) -> float:
    spread: float = max(floor, a.rel_spread, b.rel_spread)
    return spread


def _judge(data: Table, pick: Mapping[int, str], base: Mapping[int, str],
           floor: float) -> float | None:
    """Score of a policy against the default's (None: slower somewhere).

    pick and base map each size to the name chosen there.  The score sums
    log GB/s over sizes, counting a size at the default's speed unless the
    candidate's gain there exceeds the noise."""
    score = 0.0
    for size, row in data.items():
        mine, theirs = row[pick[size]], row[base[size]]
        tol = _noise(mine, theirs, floor)
        v, d = mine.median, theirs.median
        if v < d * (1 - tol):
            return None
        score += math.log(v if v > d * (1 + tol) else d)
    return score


def _distance(a: int, b: int) -> float:
    return abs(math.log2(max(a, 1)) - math.log2(max(b, 1)))


def select_routines(cpu: Any, default: Thresholds, data: Table,
                    methods: Sequence[str], floor: float = 0.03) -> Thresholds:
    """The thresholds (vector_max, temporal, nt_min, streaming) that do best
    on the measurements without losing to the default anywhere."""
    sizes = sorted(data)
    usable = [m for m in methods if all(m in data[s] for s in sizes)]
    temporals = [m for m in usable if BY_NAME[m].temporal] or [default.temporal]
    streamings = [m for m in usable if not BY_NAME[m].temporal] or [default.streaming]
    vmaxes = sorted({default.vector_max} | {s for s in sizes if s <= 1 * MiB})
    ntmins = sorted({default.nt_min} | {s for s in sizes if s >= 64 * KiB})

    # decide() is asked once per (vector_max, nt_min) with placeholder
    # routine names; which routine fills each role is then a lookup.
    tags = ("\0temporal", "\0streaming")
    roles = {(v, n): {s: decide(cpu, dataclasses.replace(
        default, vector_max=v, nt_min=n, temporal=tags[0], streaming=tags[1]), s).method
        for s in sizes} for v in vmaxes for n in ntmins}
    base = {s: decide(cpu, default, s).method for s in sizes}
    best: tuple[Any, ...] | None = None
    for t in temporals:
        for st in streamings:
            fill = {tags[0]: t, tags[1]: st}
            for (v, n), role in roles.items():
                pick = {s: fill.get(r, r) for s, r in role.items()}
                score = _judge(data, pick, base, floor)
                if score is None:
                    continue
                changed = ((t != default.temporal) + (st != default.streaming)
                           + (v != default.vector_max) + (n != default.nt_min))
                key = (round(score, 9), -changed,
                       -_distance(v, default.vector_max) - _distance(n, default.nt_min))
                if best is None or key > best[0]:
                    best = (key, (t, st, v, n))
    assert best is not None     # the default itself always qualifies
    t, st, v, n = best[1]
    return dataclasses.replace(default, vector_max=v, temporal=t, nt_min=n, streaming=st)


def select_threads(cpu: Any, th: Thresholds, data: Table, counts: Sequence[int],
                   floor: float = 0.03) -> Thresholds:
    """thread_min and max_threads from {size: {count: Measurement}} data
    (keys are str(count)), never worse than th's own at any size."""
    counts = sorted(counts)

    def measured(c: int) -> str:
        return str(max(k for k in counts if k <= c))

    sizes = sorted(data)

    def chooser(t: Thresholds) -> dict[int, str]:
        return {s: measured(choose_threads(cpu, t, s)) for s in sizes}

    base = chooser(th)
    best: tuple[tuple[Any, ...], Thresholds] | None = None
    for most in sorted({th.max_threads, 1} | set(counts)):
        for tmin in sorted({th.thread_min} | set(sizes)):
            cand = dataclasses.replace(th, thread_min=tmin, max_threads=most)
            score = _judge(data, chooser(cand), base, floor)
            if score is None:
                continue
            changed = (tmin != th.thread_min) + (most != th.max_threads)
            key = (round(score, 9), -changed, -_distance(tmin, th.thread_min))
            if best is None or key > best[0]:
                best = (key, cand)
    assert best is not None
    return best[1]


# ---- explaining ---------------------------------------------------------------


def _at(data: Table, size: int, name: str) -> str:
    return "%.1f" % data[size][name].median


def explain(cpu: Any, default: Thresholds, th: Thresholds, data: Table,
            tdata: Table) -> Thresholds:
    """th with a 'measured ...' reason for every field."""
    sizes = sorted(data)
    why: dict[str, str] = {}
    same = "measured: no gain beyond the noise over the default (%s), kept"

    # The temporal routine: where it is used, its speed against the others.
    mid = [s for s in sizes if th.vector_max <= s < th.nt_min]
    if mid:
        s = mid[len(mid) // 2]
        others = sorted((n for n in data[s] if BY_NAME[n].temporal and n != th.temporal),
                        key=lambda n: -data[s][n].median)[:2]
        why["temporal"] = ("measured: %s %s GB/s at %s (%s); %s" % (
            th.temporal, _at(data, s, th.temporal), format_size(s),
            ", ".join("%s %s" % (n, _at(data, s, n)) for n in others),
            "beats the default %s beyond the noise" % default.temporal
            if th.temporal != default.temporal else "the default, not beaten beyond the noise"))
    else:
        why["temporal"] = same % default.temporal

    if th.vector_max != default.vector_max:
        below = [s for s in sizes if s < th.vector_max]
        at = min(s for s in sizes if s >= th.vector_max)
        text = "measured: %s beats memset from %s (%s vs %s GB/s)" % (
            th.temporal, format_size(at), _at(data, at, th.temporal), _at(data, at, "libc"))
        if below:
            s = below[-1]
            text += ", memset wins or ties below (%s: %s vs %s)" % (
                format_size(s), _at(data, s, "libc"), _at(data, s, th.temporal))
        why["vector_max"] = text
    else:
        why["vector_max"] = same % format_size(default.vector_max)

    streams = [s for s in sizes if s >= th.nt_min]
    temps = [s for s in sizes if th.vector_max <= s < th.nt_min]
    if th.nt_min != default.nt_min or th.streaming != default.streaming:
        parts = []
        if streams:
            s = streams[0]
            parts.append("%s beats %s from %s (%s vs %s GB/s)" % (
                th.streaming, th.temporal, format_size(s), _at(data, s, th.streaming),
                _at(data, s, th.temporal)))
        if temps:
            s = temps[-1]
            parts.append("not at %s (%s vs %s)" % (
                format_size(s), _at(data, s, th.streaming), _at(data, s, th.temporal)))
        why["nt_min"] = "measured: " + (", ".join(parts) or "streaming above the sizes measured")
    else:
        why["nt_min"] = same % format_size(default.nt_min)
    if streams:
        s = streams[-1]
        others = sorted((n for n in data[s] if not BY_NAME[n].temporal and n != th.streaming),
                        key=lambda n: -data[s][n].median)[:2]
        why["streaming"] = "measured: %s %s GB/s at %s (%s); %s" % (
            th.streaming, _at(data, s, th.streaming), format_size(s),
            ", ".join("%s %s" % (n, _at(data, s, n)) for n in others),
            "beats the default %s beyond the noise" % default.streaming
            if th.streaming != default.streaming else "the default, not beaten beyond the noise")
    else:
        why["streaming"] = same % default.streaming

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
    routines: dict[int, dict[str, Any]]
    """{size: {routine: Measurement}}"""
    threads: dict[int, dict[str, Any]]
    """{size: {str(thread count): Measurement}}"""
    path: Path | None = None

    def comparison(self, cpu: Any) -> list[dict[str, Any]]:
        """Per measured size: the default's choice and the calibrated one."""
        rows = []
        for size in sorted(self.routines):
            d = decide(cpu, self.default, size).method
            c = decide(cpu, self.thresholds, size).method
            row = self.routines[size]
            rows.append({"size": size, "threads": 1, "default": d, "calibrated": c,
                         "default_gbps": row[d].median, "calibrated_gbps": row[c].median})
        for size in sorted(self.threads):
            dn = choose_threads(cpu, self.default, size)
            cn = choose_threads(cpu, self.thresholds, size)
            row = self.threads[size]
            counts = sorted(int(k) for k in row)

            def near(n: int, counts: list[int] = counts) -> str:
                return str(max(k for k in counts if k <= n))
            rows.append({"size": size, "threads": "auto", "default": "%d thread%s" % (
                dn, "" if dn == 1 else "s"), "calibrated": "%d thread%s" % (
                cn, "" if cn == 1 else "s"), "default_gbps": row[near(dn)].median,
                "calibrated_gbps": row[near(cn)].median})
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


def _memory_cap() -> int:
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024 // 4
    except (OSError, ValueError, IndexError):
        pass
    return 1 << 30


def plan_sizes(cpu: Any, quick: bool) -> tuple[list[int], list[int]]:
    """(routine sizes, thread sizes) to measure on this CPU."""
    last = cpu.last_cache or 32 * MiB
    top = 256 * MiB if quick else max(1 << 30, 1 << (2 * last - 1).bit_length())
    top = min(top, 1 << (_memory_cap().bit_length() - 1), 4 << 30)
    if quick:
        sizes = grid(512, top)
    else:
        sizes = grid(256, top, halves=(max(cpu.l2 // 2, 64 * KiB), 2 * last))
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
    """Measure this machine and choose thresholds.  Nothing is written.

    sizes / thread_sizes / repeat / target_s / budget_s override the plan
    (tests use tiny ones); progress(stage, done, total) reports.
    """
    from . import _core, _measure, _policy

    st = _core._state
    cpu = st.cpu
    default = _policy.default_thresholds(cpu, st.built)
    auto_sizes, auto_tsizes = plan_sizes(cpu, quick)
    sizes = sorted(set(sizes if sizes is not None else auto_sizes))
    tsizes = sorted(set(thread_sizes if thread_sizes is not None else auto_tsizes))
    repeat = repeat or (7 if quick else 11)
    target_s = target_s or (0.001 if quick else 0.002)
    budget_s = budget_s or (1.0 if quick else 3.0)
    floor = 0.05 if quick else 0.03
    methods = list(st.methods)
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

    routines: dict[int, dict[str, Any]] = {}
    threads: dict[int, dict[str, Any]] = {}
    with _measure.Buffer(top) as buf:
        for size in sizes:
            report("routines at %s" % format_size(size))
            routines[size] = _measure.measure_size(buf, size, cands, repeat=repeat,
                                                   target_s=target_s, budget_s=budget_s)
            done += 1
        th = select_routines(cpu, default, routines, methods, floor) if sizes else default
        if verify:
            again = [s for s in sizes
                     if decide(cpu, th, s).method != decide(cpu, default, s).method]
            for size in again:
                report("checking %s" % format_size(size))
                pair = {decide(cpu, th, size).method, decide(cpu, default, size).method}
                more = _measure.measure_size(buf, size, [_measure.routine(m) for m in pair],
                                             repeat=repeat, target_s=target_s,
                                             budget_s=budget_s)
                for name, m in more.items():
                    routines[size][name].merge(m)
            if again:
                th = select_routines(cpu, default, routines, methods, floor)

        for size in tsizes:
            report("threads at %s" % format_size(size))
            name = decide(cpu, th, size).method
            got = _measure.measure_size(
                buf, size, [_measure.threaded(name, c) for c in counts], repeat=repeat,
                target_s=target_s, budget_s=budget_s)
            threads[size] = {str(c): got["%s x%d" % (name, c)] for c in counts}
            done += 1
        if tsizes:
            th = select_threads(cpu, th, threads, counts, floor)
    report("done")
    th = explain(cpu, default, th, routines, threads)
    return Result(default=default, thresholds=th, routines=routines, threads=threads)
