"""Facts about the running system, read in one place: transparent huge
pages, the hugetlb pools, available and locked memory, the address space,
the kernel, the versions of what is installed.  (The CPU's caches are the
CPU description's, read by _cpu; what the kernel gave one Region, its
/proc/self/smaps entry, is read by the Region.)"""

from __future__ import annotations

import datetime
import functools
import platform
from typing import Any

THP_ENABLED = "/sys/kernel/mm/transparent_hugepage/enabled"
HUGETLB_DIR = "/sys/kernel/mm/hugepages/hugepages-%dkB"


def thp_mode() -> str | None:
    """'always', 'madvise' or 'never' (the bracketed word), None if unknown."""
    try:
        with open(THP_ENABLED) as f:
            text = f.read()
    except OSError:
        return None
    start = text.find("[")
    return text[start + 1:text.find("]", start)] if start >= 0 else None


def memory_total() -> int | None:
    """MemTotal from /proc/meminfo in bytes, None if unknown."""
    return _meminfo("MemTotal:")


def memory_available() -> int | None:
    """MemAvailable from /proc/meminfo in bytes, None if unknown."""
    return _meminfo("MemAvailable:")


def _meminfo(field: str) -> int | None:
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith(field):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


@functools.cache
def address_space_limit() -> int:
    """Bytes of user address space: 128 TiB, 64 PiB with 5-level paging."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags"):
                    return 1 << 56 if " la57" in line else 1 << 47
    except OSError:
        pass
    return 1 << 47


def memory_locked() -> int:
    """Bytes this process has locked in memory (VmLck), 0 if unknown."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmLck:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return 0


def _read_int(path: str) -> int | None:
    try:
        with open(path) as f:
            return int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def hugetlb_pages(page_bytes: int) -> dict[str, Any]:
    """The hugetlb pool of one page size: path, nr, free, reserved, surplus
    (None where the kernel or CPU has no pool of that size)."""
    d = HUGETLB_DIR % (page_bytes // 1024)
    info: dict[str, Any] = {"path": d + "/nr_hugepages"}
    for key, name in (("nr", "nr_hugepages"), ("free", "free_hugepages"),
                      ("reserved", "resv_hugepages"), ("surplus", "surplus_hugepages")):
        info[key] = _read_int(d + "/" + name)
    return info


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
