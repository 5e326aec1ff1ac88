"""Sizes: the binary units, and bytes to and from text (one helper for the package)."""

from __future__ import annotations

import re

KiB = 1 << 10
MiB = 1 << 20
GiB = 1 << 30

#: Sizes larger than this are typing mistakes, not memory (2**56 bytes).
MAX_SIZE = 1 << 56

_SIZE_RE = re.compile(r"^\s*(\d+)\s*([kmgt]?)(i?b)?\s*$", re.IGNORECASE)
_UNITS = {"": 1, "k": KiB, "m": MiB, "g": GiB, "t": 1 << 40}


def format_size(n: float) -> str:
    """1536 -> '1.5 KiB', 4096 -> '4 KiB', 12 -> '12 B'."""
    for unit, size in (("GiB", GiB), ("MiB", MiB), ("KiB", KiB)):
        if n >= size:
            value = n / size
            return ("%d %s" % (value, unit)) if value == int(value) else ("%.1f %s" % (value, unit))
    return "%d B" % n


def parse_size(text: str, what: str = "size") -> int:
    """'4096', '64K', '64M', '1G', '2GiB' -> bytes (binary units)."""
    m = _SIZE_RE.match(str(text))
    if not m:
        raise ValueError("%s must be a byte count such as 4096, 64K, 64M or 1G, not %r"
                         % (what, text))
    value = int(m.group(1)) * _UNITS[m.group(2).lower()]
    if value > MAX_SIZE:
        raise ValueError("%s %r is larger than any memory (at most 2**56 bytes)"
                         % (what, text))
    return value
