"""The CPUID decoder, with synthetic CPUs built as CPUID dumps (an Ice
Lake-like Intel server, a Milan-like AMD (Zen 3), an old CPU without ERMS or
AVX2, AVX-512 present but its state off in XCR0), and this machine's probe
against the dump, /proc/cpuinfo and sysfs.  test_policy.py uses the same
synthetic CPUs."""

from __future__ import annotations

import os
import struct
from pathlib import Path

import pytest

import clearpages as cp
from clearpages import _cpu, _dispatch
from clearpages._native import lib

KiB, MiB, GiB = 1 << 10, 1 << 20, 1 << 30

# XCR0 state components: x87 | SSE | AVX | opmask | ZMM_Hi256 | Hi16_ZMM.
XCR0_SSE = 0x3
XCR0_AVX = 0x7
XCR0_AVX512 = 0xE7


# ---- building CPUID dumps ----------------------------------------------

def _regs(text: str) -> list[int]:
    data = text.encode().ljust(4 * (-(-len(text) // 4)), b"\0")
    return list(struct.unpack("<%dI" % (len(data) // 4), data))


def _vendor(name: str, max_leaf: int):
    b, d, c = _regs(name)           # the vendor string is EBX, EDX, ECX
    return (0, 0, max_leaf, b, c, d)


def _signature(family: int, model: int, stepping: int) -> int:
    base_family = min(family, 0xF)
    ext_family = family - 0xF if family >= 0xF else 0
    return (ext_family << 20) | ((model >> 4) << 16) | (base_family << 8) \
        | ((model & 0xF) << 4) | stepping


def _brand(text: str):
    regs = _regs(text.ljust(48, "\0")[:48])
    return [(0x80000002 + i, 0, *regs[4 * i:4 * i + 4]) for i in range(3)]


def _cache(leaf: int, sub: int, kind: int, level: int, size: int, ways: int,
           sharing: int = 1, line: int = 64):
    """A deterministic cache leaf (4 or 0x8000001D): kind 1 data, 2 instruction,
    3 unified; size = ways * partitions(1) * line * sets."""
    sets = size // (ways * line)
    assert sets * ways * line == size
    eax = kind | (level << 5) | ((sharing - 1) << 14)
    ebx = (ways - 1) << 22 | (line - 1)
    return (leaf, sub, eax, ebx, sets - 1, 0)


def _bits(*positions: int) -> int:
    v = 0
    for p in positions:
        v |= 1 << p
    return v


SSE2 = 26           # leaf 1 EDX
OSXSAVE = 27        # leaf 1 ECX
AVX2, ERMS, AVX512F, CLFLUSHOPT = 5, 9, 16, 23      # leaf 7.0 EBX
FSRM = 4            # leaf 7.0 EDX
TOPOEXT = 22        # leaf 0x80000001 ECX (AMD)
MOVDIR64B = 28      # leaf 7.0 ECX
FZRM, FSRS, FSRC = 10, 11, 12                       # leaf 7.1 EAX


def ice_lake_leaves(osxsave: bool = True):
    """Xeon Platinum 8380-like: 40 cores, 48 KiB L1d, 1.25 MiB L2, 60 MiB L3."""
    return [
        _vendor("GenuineIntel", 0x1B),
        (1, 0, _signature(6, 0x6A, 6), 0, _bits(OSXSAVE) if osxsave else 0, _bits(SSE2)),
        _cache(4, 0, 1, 1, 48 * KiB, 12, 2),
        _cache(4, 1, 2, 1, 32 * KiB, 8, 2),
        _cache(4, 2, 3, 2, 1280 * KiB, 20, 2),
        _cache(4, 3, 3, 3, 60 * MiB, 12, 80),
        (4, 4, 0, 0, 0, 0),
        (7, 0, 0, _bits(AVX2, ERMS, AVX512F, CLFLUSHOPT), 0, _bits(FSRM)),
        (7, 1, 0, 0, 0, 0),
        (0x80000000, 0, 0x80000008, 0, 0, 0),
        *_brand("Intel(R) Xeon(R) Platinum 8380 CPU @ 2.30GHz"),
        (0x80000008, 0, 0x3030, 0, 0, 0),
    ]


def milan_leaves():
    """EPYC 7763-like (Zen 3): 32 KiB L1d, 512 KiB L2, 32 MiB L3 per CCX."""
    return [
        _vendor("AuthenticAMD", 0x10),
        (1, 0, _signature(0x19, 0x01, 1), 0, _bits(OSXSAVE), _bits(SSE2)),
        # Leaf 4 is reserved on AMD: garbage there must not be read.
        _cache(4, 0, 3, 3, 1 * MiB, 16),
        (7, 0, 0, _bits(AVX2, ERMS, CLFLUSHOPT), 0, _bits(FSRM)),
        (0x80000000, 0, 0x80000023, *_regs("AuthcAMDenti")),
        *_brand("AMD EPYC 7763 64-Core Processor"),
        (0x80000001, 0, 0, 0, _bits(TOPOEXT), 0),
        # The legacy leaves (what a CPU without TOPOEXT has), deliberately
        # different so a test sees which were read.
        (0x80000005, 0, 0, 0, 64 << 24, 0),               # 64 KiB L1d
        (0x80000006, 0, 0, 0, 1024 << 16, 16 << 18),      # 1 MiB L2, 8 MiB L3
        (0x80000008, 0, 0x3030, _bits(0), 0, 0),          # CLZERO
        _cache(0x8000001D, 0, 1, 1, 32 * KiB, 8, 2),
        _cache(0x8000001D, 1, 2, 1, 32 * KiB, 8, 2),
        _cache(0x8000001D, 2, 3, 2, 512 * KiB, 8, 2),
        _cache(0x8000001D, 3, 3, 3, 32 * MiB, 16, 16),
        (0x8000001D, 4, 0, 0, 0, 0),
    ]


def old_leaves():
    """Core 2 Quad-like (Penryn): no leaf 7 at all, no XSAVE, L2 as last cache."""
    return [
        _vendor("GenuineIntel", 0xD),
        (1, 0, _signature(6, 0x17, 10), 0, 0, _bits(SSE2)),
        _cache(4, 0, 1, 1, 32 * KiB, 8, 1),
        _cache(4, 1, 2, 1, 32 * KiB, 8, 1),
        _cache(4, 2, 3, 2, 6 * MiB, 24, 2),
        (4, 3, 0, 0, 0, 0),
        (0x80000000, 0, 0x80000008, 0, 0, 0),
        (0x80000008, 0, 0x3024, 0, 0, 0),
    ]


def no_topoext_leaves():
    """The same CPU with TOPOEXT clear (older AMD parts, some hypervisors):
    leaf 0x8000001D is not defined then and holds garbage here."""
    rows = [r for r in milan_leaves() if r[0] not in (0x80000001, 0x8000001D)]
    return rows + [(0x80000001, 0, 0, 0, 0, 0),
                   _cache(0x8000001D, 0, 1, 1, 4 * KiB, 1, 1),
                   _cache(0x8000001D, 1, 3, 3, 999 * MiB, 1, 1),
                   (0x8000001D, 2, 0, 0, 0, 0)]


ICE = _cpu.decode(ice_lake_leaves(), XCR0_AVX512)
MILAN = _cpu.decode(milan_leaves(), XCR0_AVX)
OLD = _cpu.decode(old_leaves(), 0)
ICE_NO_ZMM = _cpu.decode(ice_lake_leaves(), XCR0_AVX)       # opmask/zmm state off


# ---- decoding -------------------------------------------------------------

def test_decode_ice_lake():
    c = ICE
    assert (c.vendor, c.family, c.model, c.stepping) == ("GenuineIntel", 6, 0x6A, 6)
    assert c.brand == "Intel(R) Xeon(R) Platinum 8380 CPU @ 2.30GHz"
    assert c.is_intel and not c.is_amd and c.is_x86
    assert c.features == {"sse2", "osxsave", "avx2", "erms", "avx512f", "clflushopt", "fsrm"}
    assert not c.os_disabled
    assert (c.l1d, c.l2, c.l3) == (48 * KiB, 1280 * KiB, 60 * MiB)
    assert c.l3_sharing == 80 and c.last_cache == 60 * MiB


def test_decode_milan():
    c = MILAN
    assert (c.vendor, c.family, c.model, c.stepping) == ("AuthenticAMD", 0x19, 0x01, 1)
    assert c.brand == "AMD EPYC 7763 64-Core Processor"
    assert c.is_amd and not c.is_intel
    assert c.features == {"sse2", "osxsave", "avx2", "erms", "clflushopt", "fsrm", "clzero"}
    assert "avx512f" not in c.features
    # From 0x8000001D; the bogus leaf-4 row is ignored on AMD.
    assert (c.l1d, c.l2, c.l3) == (32 * KiB, 512 * KiB, 32 * MiB)
    assert c.l3_sharing == 16


def test_decode_amd_without_topoext_reads_the_legacy_leaves():
    c = _cpu.decode(no_topoext_leaves(), XCR0_AVX)
    assert (c.l1d, c.l2, c.l3) == (64 * KiB, 1 * MiB, 8 * MiB)
    assert c.features == MILAN.features


def test_dump_reads_0x8000001d_only_with_topoext():
    rows = _cpu.dump()
    ext1 = [r for r in rows if r[0] == 0x80000001]
    has_walk = any(r[0] == 0x8000001D for r in rows)
    if not ext1:
        assert not has_walk
        return
    assert has_walk == bool((ext1[0][4] >> TOPOEXT) & 1)


def test_decode_old_cpu():
    c = OLD
    assert (c.family, c.model, c.stepping) == (6, 0x17, 10)
    assert c.features == {"sse2"}
    assert c.brand == ""
    assert (c.l1d, c.l2, c.l3) == (32 * KiB, 6 * MiB, 0)
    assert c.last_cache == 6 * MiB


@pytest.mark.parametrize("xcr0, usable, off", [
    (XCR0_AVX512, {"avx2", "avx512f"}, set()),
    (XCR0_AVX, {"avx2"}, {"avx512f"}),
    (XCR0_AVX | 0x20, {"avx2"}, {"avx512f"}),       # opmask without the zmm state
    (XCR0_SSE, set(), {"avx2", "avx512f"}),
    (0, set(), {"avx2", "avx512f"}),
])
def test_xcr0_gates_vector_features(xcr0, usable, off):
    c = _cpu.decode(ice_lake_leaves(), xcr0)
    assert c.features & {"avx2", "avx512f"} == usable
    assert c.os_disabled == off


def test_xcr0_ignored_without_osxsave():
    """XGETBV is not legal without OSXSAVE: whatever XCR0 says, no AVX."""
    c = _cpu.decode(ice_lake_leaves(osxsave=False), XCR0_AVX512)
    assert not c.features & {"avx2", "avx512f", "osxsave"}
    assert c.os_disabled == {"avx2", "avx512f"}


def test_decode_leaf7_subleaf1_and_ecx_bits():
    leaves = ice_lake_leaves()
    leaves = [r if r[:2] != (7, 0) else (7, 0, 1, r[3], _bits(MOVDIR64B), r[5]) for r in leaves]
    leaves = [r if r[:2] != (7, 1) else (7, 1, _bits(FZRM, FSRS, FSRC), 0, 0, 0) for r in leaves]
    c = _cpu.decode(leaves, XCR0_AVX512)
    assert {"movdir64b", "fzrm", "fsrs", "fsrc"} <= c.features


def test_decode_empty_dump():
    c = _cpu.decode([], 0)
    assert c.vendor == "unknown" and not c.is_x86 and not c.features
    assert (c.l1d, c.l2, c.l3) == (0, 0, 0)


def test_feature_names_match_spec():
    assert set(_cpu.FEATURE_NAMES) >= {"erms", "fsrm", "fzrm", "fsrs", "avx2", "avx512f",
                                       "clzero", "movdir64b", "clflushopt"}
    assert len(set(_cpu.FEATURE_NAMES)) == len(_cpu.FEATURE_NAMES)


def test_without_masks_features():
    c = ICE.without(frozenset({"avx512f", "clzero"}))
    assert "avx512f" not in c.features and c.disabled == {"avx512f"}
    assert c.l3 == ICE.l3


# ---- this machine -------------------------------------------------------

def test_this_machine_decodes_like_the_probe():
    raw = _dispatch.state().raw_cpu
    if not raw.is_x86:
        pytest.skip("not an x86-64 build: no CPUID")
    again = _cpu.decode(_cpu.dump(), lib.cp_xgetbv0())
    assert again.features == raw.features
    assert again.os_disabled == raw.os_disabled
    assert (again.vendor, again.family, again.model, again.brand) == \
        (raw.vendor, raw.family, raw.model, raw.brand)
    assert raw.features - cp.cpu().features == _dispatch.state().config.disable & raw.features


def test_this_machine_agrees_with_proc_cpuinfo():
    path = Path("/proc/cpuinfo")
    raw = _dispatch.state().raw_cpu
    if not raw.is_x86 or not path.exists():
        pytest.skip("needs an x86-64 build and /proc/cpuinfo")
    flags = set()
    for line in path.read_text().splitlines():
        if line.startswith("flags"):
            flags = set(line.split(":", 1)[1].split())
            break
    if not flags:
        pytest.skip("/proc/cpuinfo has no flags line")
    # The kernel hides AVX/AVX-512 when XSAVE does not cover their state,
    # as the decoder does.
    for name in ("erms", "fsrm", "avx2", "avx512f", "clflushopt", "clzero", "sse2",
                 "movdir64b"):
        assert (name in raw.features) == (name in flags), name


def test_this_machine_caches_match_sysfs():
    sysfs = _cpu._sysfs_caches()
    raw = _dispatch.state().raw_cpu
    if not sysfs:
        pytest.skip("no /sys/devices/system/cpu/cpu0/cache")
    for key, size in sysfs.items():
        got = getattr(raw, key)
        assert got == size or any(key in note for note in raw.notes), (key, got, size)
    assert raw.cores == len(os.sched_getaffinity(0))
