"""The CPU description the policy works from.

The native probe reads CPUID once (``csrc/core/cpu.c``); this module turns it into
an immutable :class:`CPU`, fills cache sizes the CPUID walk could not give
from ``/sys/devices/system/cpu/cpu0/cache``, and applies
``CLEARPAGES_DISABLE`` so that every dispatch path can be exercised on one
machine (as glibc's ``glibc.cpu.hwcaps`` tunable does).
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import Any

from ._native import ffi, lib

FEATURE_NAMES: tuple[str, ...] = tuple(
    ffi.string(lib.cp_feature_name(i)).decode() for i in range(lib.CP_FEAT_COUNT)
)

SYSFS_CACHE = Path("/sys/devices/system/cpu/cpu0/cache")


@dataclasses.dataclass(frozen=True)
class CPU:
    """What clearpages knows about the processor it runs on."""

    vendor: str = "unknown"
    family: int = 0
    model: int = 0
    stepping: int = 0
    brand: str = ""
    features: frozenset[str] = frozenset()
    """Usable features, lower case: the OS state check and CLEARPAGES_DISABLE applied."""
    l1d: int = 0
    l2: int = 0
    l3: int = 0
    """Cache sizes in bytes (0: unknown)."""
    l3_sharing: int = 1
    """Logical CPUs sharing the L3."""
    cores: int = 1
    """Logical CPUs this process may run on."""
    is_x86: bool = False
    disabled: frozenset[str] = frozenset()
    """Features present but masked by CLEARPAGES_DISABLE."""
    os_disabled: frozenset[str] = frozenset()
    """Features the CPU has but the OS did not enable (XCR0)."""
    notes: tuple[str, ...] = ()
    """Where the description departs from CPUID (sysfs fill-ins)."""

    @property
    def is_amd(self) -> bool:
        return self.vendor in ("AuthenticAMD", "HygonGenuine")

    @property
    def is_intel(self) -> bool:
        return self.vendor == "GenuineIntel"

    @property
    def last_cache(self) -> int:
        """The largest cache this CPU reports (bytes)."""
        return self.l3 or self.l2 or self.l1d

    def without(self, names: frozenset[str]) -> CPU:
        """This CPU with the named features treated as absent."""
        gone = self.features & names
        return dataclasses.replace(self, features=self.features - gone,
                                   disabled=self.disabled | gone)


def _bits_to_names(bits: int) -> frozenset[str]:
    return frozenset(n for i, n in enumerate(FEATURE_NAMES) if bits >> i & 1)


def _sysfs_caches() -> dict[str, int]:
    """{'l1d': bytes, 'l2': ..., 'l3': ...} from sysfs; empty where absent."""
    found: dict[str, int] = {}
    try:
        indexes = sorted(SYSFS_CACHE.glob("index*"))
    except OSError:
        return found
    for index in indexes:
        try:
            level = int((index / "level").read_text())
            kind = (index / "type").read_text().strip()
            size_text = (index / "size").read_text().strip()
        except (OSError, ValueError):
            continue
        if kind == "Instruction" or not size_text:
            continue
        mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(size_text[-1], 1)
        try:
            size = int(size_text.rstrip("KMG")) * mult
        except ValueError:
            continue
        key = {1: "l1d", 2: "l2", 3: "l3"}.get(level)
        if key:
            found[key] = size
    return found


def _cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def from_info(info: Any, *, sysfs: dict[str, int] | None = None, cores: int = 1) -> CPU:
    """A CPU from a native ``struct cp_cpu_info`` (probed or decoded)."""
    caches = {"l1d": int(info.l1d), "l2": int(info.l2), "l3": int(info.l3)}
    notes = []
    for key, size in (sysfs or {}).items():
        if caches[key] == 0:
            caches[key] = size
            notes.append("%s size from sysfs (CPUID gave none)" % key)
        elif caches[key] != size:
            notes.append("%s: CPUID says %d bytes, sysfs %d; CPUID kept"
                         % (key, caches[key], size))
    features = _bits_to_names(info.features)
    raw = _bits_to_names(info.raw_features)
    return CPU(
        vendor=ffi.string(info.vendor).decode("ascii", "replace"),
        family=int(info.family),
        model=int(info.model),
        stepping=int(info.stepping),
        brand=ffi.string(info.brand).decode("ascii", "replace").strip(),
        features=features,
        os_disabled=raw - features,
        l1d=caches["l1d"],
        l2=caches["l2"],
        l3=caches["l3"],
        l3_sharing=max(1, int(info.l3_sharing)),
        cores=cores,
        is_x86=bool(info.is_x86),
        notes=tuple(notes),
    )


def decode(leaves: list[tuple[int, int, int, int, int, int]], xcr0: int) -> CPU:
    """Describe a CPU from a CPUID dump: (leaf, subleaf, eax, ebx, ecx, edx) rows.

    The same decoder as the live probe; tests give it synthetic CPUs.
    """
    arr = ffi.new("struct cp_cpuid_leaf[]", [tuple(row) for row in leaves])
    info = ffi.new("struct cp_cpu_info *")
    lib.cp_cpu_decode(arr, len(leaves), xcr0, info)
    return from_info(info)


def dump() -> list[tuple[int, int, int, int, int, int]]:
    """This CPU's raw CPUID leaves, as :func:`decode` takes them."""
    arr = ffi.new("struct cp_cpuid_leaf[64]")
    n = lib.cp_cpuid_dump(arr, 64)
    return [(a.leaf, a.subleaf, a.eax, a.ebx, a.ecx, a.edx) for a in arr[0:n]]


def probe(*, caches: bool = True) -> CPU:
    """This machine's CPU, before CLEARPAGES_DISABLE.  caches=False: CPUID
    alone, without sysfs's cache sizes or the CPUs this process may run on
    (what the features take, at import)."""
    info = ffi.new("struct cp_cpu_info *")
    lib.cp_cpu_probe(info)
    if not caches:
        return from_info(info)
    return from_info(info, sysfs=_sysfs_caches(), cores=_cores())
