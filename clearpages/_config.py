"""The CLEARPAGES_* environment variables, read once when the package loads.

Like glibc's tunables they are read at start-up; unlike them, a bad value is
an error that names the variable, never silently ignored.
``clearpages.reload_config()`` reads them again.
"""

from __future__ import annotations

import dataclasses
import difflib
import os
import sys
import warnings
from collections.abc import Mapping
from types import FrameType

from ._routines import ALL_METHODS
from ._units import MAX_SIZE, parse_size

VARIABLES = ("CLEARPAGES_METHOD", "CLEARPAGES_NT_THRESHOLD",
             "CLEARPAGES_CALIBRATION", "CLEARPAGES_DISABLE", "CLEARPAGES_ADAPT",
             "CLEARPAGES_POOL_DEBUG")
#: Read by the build, not by the package.
BUILD_VARIABLES = ("CLEARPAGES_PORTABLE",)
#: The repository's own test suite and benchmarks read these.
OTHER_PREFIXES = ("CLEARPAGES_TEST_", "CLEARPAGES_BENCH_")


__all__ = ["MAX_SIZE", "Config", "ConfigError", "ConfigWarning", "parse_size", "read",
           "read_environ", "warn"]


class ConfigError(ValueError):
    """A CLEARPAGES_* variable holds a value clearpages cannot use."""


class ConfigWarning(UserWarning):
    """A CLEARPAGES_* name that clearpages does not read (a misspelling)."""


def warn(message: str, category: type[Warning]) -> None:
    """warnings.warn, attributed to the caller's first frame outside the
    package (the line of the program that imported or first used it), not
    to the package's own code or the import machinery."""
    package = os.path.dirname(os.path.abspath(__file__))
    level = 2
    frame: FrameType | None = sys._getframe(1)
    while frame is not None:
        name = frame.f_code.co_filename
        if "importlib" in name and "_bootstrap" in name:
            pass                # warnings.warn skips these itself, uncounted
        elif os.path.dirname(os.path.abspath(name)) == package:
            level += 1
        else:
            break
        frame = frame.f_back
    warnings.warn(message, category, stacklevel=level)


_warned: set[str] = set()


def _unknown_names(env: Mapping[str, str]) -> None:
    """Warn once about each CLEARPAGES_* name that nothing reads: a
    misspelled variable would otherwise be ignored without a word."""
    known = VARIABLES + BUILD_VARIABLES
    for name in sorted(env):
        if (not name.startswith("CLEARPAGES_") or name in known or name in _warned
                or name.startswith(OTHER_PREFIXES)):
            continue
        _warned.add(name)
        # Compared without the shared prefix, which would make any two alike.
        near = difflib.get_close_matches(name[11:], [k[11:] for k in known], n=1)
        warn("%s is not a clearpages variable, so it is ignored%s; clearpages reads %s"
             % (name, " (did you mean CLEARPAGES_%s?)" % near[0] if near else "",
                ", ".join(VARIABLES)), ConfigWarning)


@dataclasses.dataclass(frozen=True)
class Config:
    method: str | None = None
    nt_threshold: int | None = None
    calibration: str | None = None
    """None: the default file in the cache directory; 'off'; or a path."""
    disable: frozenset[str] = frozenset()
    adapt: bool = True
    """False: CLEARPAGES_ADAPT=0, auto never adapts to the program's clears."""
    pool_debug: bool = False
    """True: CLEARPAGES_POOL_DEBUG=1, every Pool reads each block back (the
    zero scan) before it leaves, unless made with debug=False."""
    raw: tuple[tuple[str, str], ...] = ()
    """The variables that were set, as (name, value), for ``info``."""


def _switch(env: Mapping[str, str], name: str, default: bool, use: str) -> bool:
    """A variable that is 0 or 1 (surrounding blanks ignored; unset or empty:
    the default); anything else is a ConfigError that says what to use."""
    text = env.get(name, "").strip()
    if not text:
        return default
    if text not in ("0", "1"):
        raise ConfigError("%s=%r: use %s" % (name, env[name], use))
    return text == "1"


def read(env: Mapping[str, str], feature_names: tuple[str, ...]) -> Config:
    for name in VARIABLES:
        if name in env and not isinstance(env[name], str):
            raise TypeError("%s must be a str, as in the environment, not %s (%r)"
                            % (name, type(env[name]).__name__, env[name]))
    _unknown_names(env)
    raw = tuple((k, env[k]) for k in VARIABLES if k in env)
    method = env.get("CLEARPAGES_METHOD", "").strip() or None
    if method is not None and method != "auto" and method not in ALL_METHODS:
        raise ConfigError("CLEARPAGES_METHOD=%r is not a method; use one of: auto, %s"
                          % (method, ", ".join(ALL_METHODS)))
    if method == "auto":
        method = None

    nt = env.get("CLEARPAGES_NT_THRESHOLD", "").strip()
    nt_threshold = None
    if nt:
        try:
            nt_threshold = parse_size(nt, "CLEARPAGES_NT_THRESHOLD")
        except ValueError as e:
            raise ConfigError(str(e)) from None

    calibration = env.get("CLEARPAGES_CALIBRATION", "").strip() or None
    if calibration is not None and calibration.lower() == "off":
        calibration = "off"

    disable_text = env.get("CLEARPAGES_DISABLE", "")
    names = frozenset(n.strip().lower() for n in disable_text.split(",") if n.strip())
    unknown = names - set(feature_names)
    if unknown:
        raise ConfigError("CLEARPAGES_DISABLE names unknown features %s; known: %s"
                          % (", ".join(sorted(unknown)), ", ".join(feature_names)))
    adapt = _switch(env, "CLEARPAGES_ADAPT", True,
                    "0 (off: the static choice, deterministic) or 1 (on, the default)")
    pool_debug = _switch(env, "CLEARPAGES_POOL_DEBUG", False,
                         "1 (every Pool reads each block back before it leaves) or 0 "
                         "(off, the default)")
    return Config(method, nt_threshold, calibration, names, adapt, pool_debug, raw)


def read_environ(feature_names: tuple[str, ...]) -> Config:
    return read(os.environ, feature_names)
