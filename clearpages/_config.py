"""The CLEARPAGES_* environment variables, read once when the package loads.

Like glibc's tunables they are read at start-up; unlike them, a bad value is
an error that names the variable, never silently ignored.
``clearpages.reload_config()`` reads them again.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping

from ._routines import ALL_METHODS
from ._units import MAX_SIZE, parse_size

VARIABLES = ("CLEARPAGES_METHOD", "CLEARPAGES_NT_THRESHOLD",
             "CLEARPAGES_CALIBRATION", "CLEARPAGES_DISABLE", "CLEARPAGES_ADAPT",
             "CLEARPAGES_POOL_DEBUG")

_ON = frozenset({"1", "on", "yes", "true"})
_OFF = frozenset({"0", "off", "no", "false"})

__all__ = ["MAX_SIZE", "Config", "ConfigError", "parse_size", "read", "read_environ"]


class ConfigError(ValueError):
    """A CLEARPAGES_* variable holds a value clearpages cannot use."""


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


def read(env: Mapping[str, str], feature_names: tuple[str, ...]) -> Config:
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
    adapt_text = env.get("CLEARPAGES_ADAPT", "").strip().lower()
    if adapt_text and adapt_text not in _ON | _OFF:
        raise ConfigError("CLEARPAGES_ADAPT=%r: use 0 (off: the static choice, "
                          "deterministic) or 1 (on, the default)" % env["CLEARPAGES_ADAPT"])
    debug_text = env.get("CLEARPAGES_POOL_DEBUG", "").strip().lower()
    if debug_text and debug_text not in _ON | _OFF:
        raise ConfigError("CLEARPAGES_POOL_DEBUG=%r: use 1 (every Pool reads each block "
                          "back before it leaves) or 0 (off, the default)"
                          % env["CLEARPAGES_POOL_DEBUG"])
    return Config(method, nt_threshold, calibration, names, adapt_text not in _OFF,
                  debug_text in _ON, raw)


def read_environ(feature_names: tuple[str, ...]) -> Config:
    return read(os.environ, feature_names)
