"""Every exception the package raises of its own, in one place."""

from __future__ import annotations

from ._config import ConfigError


class UnsupportedMethod(RuntimeError):
    """The routine needs a CPU feature (or build) this machine lacks."""


class PageIndexError(IndexError, ValueError):
    """A page index outside the buffer (an IndexError and a ValueError)."""


__all__ = ["ConfigError", "PageIndexError", "UnsupportedMethod"]
