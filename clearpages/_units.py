"""Sizes: the binary units, and bytes to and from text (one helper for the package)."""

from __future__ import annotations

import operator
import re

from ._fast import MAX_SIZE as _MAX_SIZE

KiB = 1 << 10
MiB = 1 << 20
GiB = 1 << 30

#: Sizes larger than this are typing mistakes, not memory (2**56 bytes): the
#: native entries' bound, which take sizes and page sizes up to it as given.
MAX_SIZE: int = _MAX_SIZE

_SIZE_RE = re.compile(r"^\s*(\d+)\s*([kmgt]?)(i?b)?\s*$", re.IGNORECASE)
_UNITS = {"": 1, "k": KiB, "m": MiB, "g": GiB, "t": 1 << 40}


def format_size(n: float, sep: str = " ") -> str:
    """1536 -> '1.5 KiB', 4096 -> '4 KiB', 12 -> '12 B' (sep="": '4KiB', for
    labels and test ids)."""
    for unit, size in (("GiB", GiB), ("MiB", MiB), ("KiB", KiB)):
        if n >= size:
            value = n / size
            text = ("%d" % value) if value == int(value) else ("%.1f" % value)
            return text + sep + unit
    return "%d%sB" % (n, sep)


def parse_size(value: object, what: str = "size", minimum: int = 0) -> int:
    """Bytes from an int or from text: 4096, '4096', '64K', '2m', '1G', '2GiB'.

    The one reading of a size in the package: the Python API (plan, Region,
    Region.resize, clear_pages' page_size), the command line and the
    environment all take the same spellings and give the same message.
    Units are binary (K = 1024) and case does not matter; a trailing 'B'
    or 'iB' is allowed.  Another type (a float, bytes, None, a bool) is a
    TypeError, text that is no size or a size out of range a ValueError;
    both name `what` and show the spellings."""
    if isinstance(value, int) and not isinstance(value, bool):
        n = int(value)
    elif isinstance(value, str):
        m = _SIZE_RE.match(value)
        n = int(m.group(1)) * _UNITS[m.group(2).lower()] if m else -1
        if n < 0:
            raise ValueError(_spellings(what, value))
    else:
        got = as_int(value)     # numpy's integers; no bool, numpy's before 2.0 included
        if got is None:
            raise TypeError(_spellings(what, value))
        n = got
    if n > MAX_SIZE:
        raise ValueError("%s %r is larger than any memory (at most 2**%d bytes)"
                         % (what, value, MAX_SIZE.bit_length() - 1))
    if n < minimum:
        raise ValueError("%s must be at least %s, not %r"
                         % (what, {0: "0", 1: "1 byte"}.get(minimum, format_size(minimum)),
                            value))
    return n


def _spellings(what: str, value: object) -> str:
    text = short_repr(value) if isinstance(value, (int, str)) and not isinstance(value, bool) \
        else shown(value)
    return ("%s must be a byte count such as 4096, 64K, 64M or 1G (an int or a string), "
            "not %s" % (what, text))


def as_int(value: object) -> int | None:
    """An integer argument (a count, a number of threads): an int or any
    integer type (numpy's, through ``__index__``) as an int; None for
    anything else, a bool included (True is no count)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return int(value)
    if getattr(getattr(value, "dtype", None), "kind", None) == "b":
        return None         # numpy's bool, an integer to numpy before 2.0
    try:
        return operator.index(value)  # type: ignore[arg-type]
    except TypeError:
        return None


def short_repr(value: object, limit: int = 60) -> str:
    """repr(value) cut to about limit characters: a message that quotes a
    wrong argument stays one line, whatever was passed (a whole array)."""
    try:
        text = repr(value)
    except Exception:
        text = "<%s object>" % type(value).__name__
    text = " ".join(text.split())
    return text if len(text) <= limit else text[:limit - 3] + "..."


def shown(value: object) -> str:
    """A wrong argument in a message: its value (cut short) and its type."""
    if value is None:
        return "None"
    return "%s (type %s)" % (short_repr(value), type(value).__name__)
