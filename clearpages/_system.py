"""Facts about the running system, read in one place: transparent huge
pages, available memory, the kernel, the versions of what is installed."""

from __future__ import annotations

import datetime
import platform
from typing import Any

THP_ENABLED = "/sys/kernel/mm/transparent_hugepage/enabled"


def thp_mode() -> str | None:
    """'always', 'madvise' or 'never' (the bracketed word), None if unknown."""
    try:
        with open(THP_ENABLED) as f:
            text = f.read()
    except OSError:
        return None
    start = text.find("[")
    return text[start + 1:text.find("]", start)] if start >= 0 else None


def memory_available() -> int | None:
    """MemAvailable from /proc/meminfo in bytes, None if unknown."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def measurement_cap() -> int:
    """The most a measurement maps: a quarter of the memory available now."""
    avail = memory_available()
    return avail // 4 if avail else 1 << 30


def kernel() -> str:
    return "%s %s %s" % (platform.system(), platform.release(), platform.machine())


def versions() -> dict[str, str | None]:
    """clearpages, Python, cffi, and the optional numpy and matplotlib."""
    import cffi

    from . import __version__

    out: dict[str, str | None] = {"clearpages": __version__,
                                  "python": platform.python_version(),
                                  "cffi": cffi.__version__}
    for mod in ("numpy", "matplotlib"):
        try:
            out[mod] = __import__(mod).__version__
        except ImportError:
            out[mod] = None
    return out


def machine(cpu_identity: dict[str, Any]) -> dict[str, Any]:
    """Who measured: CPU identity, kernel, THP, versions, date (JSON and headers)."""
    return {
        "cpu": cpu_identity,
        "kernel": kernel(),
        "thp": thp_mode() or "unknown",
        "versions": versions(),
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
    }
