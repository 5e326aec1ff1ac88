"""Per-machine calibration: the policy file that holds measured thresholds.

glibc, the kernel and aocl-libmem derive their crossovers from cache sizes
and never measure.  ``python -m clearpages calibrate`` measures them here
(``tools/calibrate.py``); this module reads and writes what it found.

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
import os
import warnings
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ._config import ConfigError, warn
from ._policy import Thresholds
from ._routines import ALL_METHODS, BY_NAME

#: Bump when the file's meaning changes; older files are then ignored.
#: 2: chosen by the worse of warm and cold; long_min and long added.
FORMAT = 2

NUMERIC = ("vector_max", "nt_min", "long_min", "thread_min", "max_threads")
METHODS = ("temporal", "streaming")
FIELDS = ("vector_max", "temporal", "nt_min", "streaming", "long_min", "long",
          "thread_min", "max_threads")

_LIMIT = 1 << 62


class MissingCalibration(ConfigError):
    """CLEARPAGES_CALIBRATION names a file that does not exist."""


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
    # Attributed to the call that built the state, in the caller's program.
    warn("clearpages: ignoring calibration file %s: %s" % (path, what), CalibrationWarning)


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
    if th.get("long") != "" and th.get("long") not in ALL_METHODS:
        return "long names no routine: %r" % (th.get("long"),)
    if th["thread_min"] < 1:
        return "thread_min must be at least 1"
    return None


def load(cpu: Any, methods: Sequence[str], setting: str | None,
         default: Thresholds) -> Calibration | None:
    """The calibration for this CPU, or None.

    setting: None (the default file, silently absent if never written),
    "off", or a path (MissingCalibration, a ConfigError, where it names
    no file).  Whatever is wrong with a file that exists is said in a
    warning and the file is not used; a routine the
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
            raise MissingCalibration(
                "CLEARPAGES_CALIBRATION=%s names no file; write it with `python -m "
                "clearpages calibrate`, or set CLEARPAGES_CALIBRATION=off" % setting) from None
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
        if (key in METHODS or (key == "long" and values[key])) and values[key] not in methods:
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
