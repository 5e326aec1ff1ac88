"""The exceptions of the public API, in one place.

ConfigError (a bad CLEARPAGES_* value) is defined with the reading of the
environment, in _config, which everything else imports first, and comes
from here too; MissingCalibration (_calibration) and the command line's
UsageError (tools.cli) are ConfigError and an internal signal of one module."""

from __future__ import annotations

import sys
from types import TracebackType
from typing import Any

from ._config import ConfigError


class UnsupportedMethod(RuntimeError):
    """The routine needs a CPU feature (or build) this machine lacks."""


class ForcedMethodUnsupported(ConfigError, UnsupportedMethod):
    """CLEARPAGES_METHOD names a routine this machine cannot run: a bad
    variable (ConfigError, a ValueError) and a routine the CPU or build
    lacks (UnsupportedMethod), so either name catches it."""


class PageIndexError(IndexError, ValueError):
    """A page index outside the buffer (an IndexError and a ValueError)."""


class HugePagesUnavailable(OSError):
    """hugetlb pages of the requested size cannot be had (errno ENOMEM)."""


def print_alone_if_uncaught(err: BaseException) -> None:
    """Have err, should nothing catch it, printed as its one line of message.

    A bad CLEARPAGES_* variable stops ``import clearpages``; its message
    says all there is to say (the variable, its value, what is allowed), so
    the frames of the package that read it would only bury it.  Any other
    exception reaches the hook that was there before."""
    previous = sys.excepthook

    def hook(kind: type[BaseException], value: BaseException,
             tb: TracebackType | None) -> Any:
        if value is not err:
            return previous(kind, value, tb)
        # By its public name (a missing calibration file is a ConfigError too).
        name = "ConfigError" if isinstance(value, ConfigError) else kind.__name__
        print("clearpages.%s: %s" % (name, value), file=sys.stderr)
        return None

    sys.excepthook = hook


__all__ = ["ConfigError", "ForcedMethodUnsupported", "HugePagesUnavailable", "PageIndexError",
           "UnsupportedMethod", "print_alone_if_uncaught"]
