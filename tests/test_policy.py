"""The CPUID decoder and the policy, with synthetic CPUs built as CPUID
dumps: an Ice Lake-like Intel server, a Milan-like AMD (Zen 3), an old CPU
without ERMS or AVX2, and AVX-512 present but its state off in XCR0."""

from __future__ import annotations

import dataclasses
import os
import struct
from pathlib import Path

import pytest

import clearpages as cp
from clearpages import _core, _cpu, _policy
from clearpages._native import lib

KiB, MiB, GiB = 1 << 10, 1 << 20, 1 << 30
ALL = frozenset(cp.ALL_METHODS)

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
    raw = _core._state.raw_cpu
    if not raw.is_x86:
        pytest.skip("not an x86-64 build: no CPUID")
    again = _cpu.decode(_cpu.dump(), lib.cp_xgetbv0())
    assert again.features == raw.features
    assert again.os_disabled == raw.os_disabled
    assert (again.vendor, again.family, again.model, again.brand) == \
        (raw.vendor, raw.family, raw.model, raw.brand)
    assert raw.features - cp.cpu().features == _core._state.config.disable & raw.features


def test_this_machine_agrees_with_proc_cpuinfo():
    path = Path("/proc/cpuinfo")
    raw = _core._state.raw_cpu
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
    raw = _core._state.raw_cpu
    if not sysfs:
        pytest.skip("no /sys/devices/system/cpu/cpu0/cache")
    for key, size in sysfs.items():
        got = getattr(raw, key)
        assert got == size or any(key in note for note in raw.notes), (key, got, size)
    assert raw.cores == len(os.sched_getaffinity(0))


# ---- thresholds and decisions ---------------------------------------------

def plan_method(c, n, count=1, built=ALL):
    th = _policy.default_thresholds(c, built)
    return _policy.decide(c, th, n, count).method


def test_intel_ice_lake_policy():
    th = _policy.default_thresholds(ICE, ALL)
    assert (th.temporal, th.streaming) == ("rep_stosb", "avx512_nt")
    assert th.vector_max == 2 * KiB
    assert th.nt_min == 45 * MiB             # 3/4 of the 60 MiB L3
    assert plan_method(ICE, 0) == "libc"
    assert plan_method(ICE, 2047) == "libc"
    assert plan_method(ICE, 2048) == "rep_stosb"
    assert plan_method(ICE, 1 * MiB) == "rep_stosb"
    assert plan_method(ICE, 45 * MiB - 1) == "rep_stosb"
    assert plan_method(ICE, 45 * MiB) == "avx512_nt"
    assert plan_method(ICE, 1 * GiB) == "avx512_nt"
    # Chosen from the total: 1 GiB of 4 KiB pages streams, 64 x 1 KiB is memset.
    assert plan_method(ICE, 1 * GiB, 262144) == "avx512_nt"
    assert plan_method(ICE, 64 * KiB, 64) == "libc"
    assert plan_method(ICE, 64 * 4 * KiB, 64) == "rep_stosb"
    for field in ("vector_max", "nt_min", "temporal", "streaming"):
        assert th.reason(field) != th.source, field


def test_intel_without_zmm_state_streams_with_avx2():
    th = _policy.default_thresholds(ICE_NO_ZMM, ALL)
    assert th.streaming == "avx2_nt"
    assert not _policy.usable("avx512_nt", ICE_NO_ZMM, ALL)
    assert plan_method(ICE_NO_ZMM, 1 * GiB) == "avx2_nt"
    no_avx = _cpu.decode(ice_lake_leaves(), XCR0_SSE)
    assert plan_method(no_avx, 1 * GiB) == "movnti"
    assert plan_method(no_avx, 1 * MiB) == "rep_stosb"


def test_amd_milan_policy():
    th = _policy.default_thresholds(MILAN, ALL)
    assert (th.temporal, th.streaming) == ("rep_stosb", "avx2_nt")
    assert th.vector_max == 512 * KiB         # aocl-libmem: vector stores to L2
    assert th.nt_min == 32 * MiB              # non-temporal above L3
    assert plan_method(MILAN, 4 * KiB) == "libc"
    assert plan_method(MILAN, 512 * KiB - 1) == "libc"
    assert plan_method(MILAN, 512 * KiB) == "rep_stosb"
    assert plan_method(MILAN, 16 * MiB) == "rep_stosb"
    assert plan_method(MILAN, 32 * MiB) == "avx2_nt"
    assert plan_method(MILAN, 1 * GiB) == "avx2_nt"
    assert _policy.usable("clzero", MILAN, ALL) and not _policy.usable("avx512_nt", MILAN, ALL)


def test_old_cpu_policy():
    th = _policy.default_thresholds(OLD, ALL)
    assert (th.temporal, th.streaming) == ("libc", "movnti")
    assert th.nt_min == 6 * MiB * 3 // 4
    assert plan_method(OLD, 100) == "libc"
    assert plan_method(OLD, 64 * KiB) == "libc"
    assert plan_method(OLD, 4 * MiB) == "libc"
    assert plan_method(OLD, 1 * GiB) == "movnti"
    assert not _policy.usable("avx2_nt", OLD, ALL)


def test_erms_masked_falls_back_to_memset():
    c = ICE.without(frozenset({"erms"}))
    assert plan_method(c, 1 * MiB) == "libc"
    assert plan_method(c, 1 * GiB) == "avx512_nt"


def test_unknown_caches_stream_from_8_mib():
    leaves = [r for r in ice_lake_leaves() if r[0] != 4]
    c = _cpu.decode(leaves, XCR0_AVX512)
    assert c.last_cache == 0
    th = _policy.default_thresholds(c, ALL)
    assert th.nt_min == 8 * MiB
    assert plan_method(c, 8 * MiB - 1) == "rep_stosb"
    assert plan_method(c, 8 * MiB) == "avx512_nt"


@pytest.mark.parametrize("c", [ICE, MILAN, OLD], ids=["ice", "milan", "old"])
def test_portable_build_is_memset_everywhere(c):
    built = frozenset({"libc"})
    for n in (0, 100, 1 * MiB, 1 * GiB, 1 << 40):
        assert plan_method(c, n, built=built) == "libc"


@pytest.mark.parametrize("c", [ICE, MILAN, OLD, ICE_NO_ZMM], ids=["ice", "milan", "old", "nozmm"])
def test_decisions_only_name_usable_routines(c):
    th = _policy.default_thresholds(c, ALL)
    for n in [0, 1, 2047, 2048, 4096, 1 * MiB, 8 * MiB, 40 * MiB, 64 * MiB, 1 * GiB, 1 << 40]:
        for count in (1, 7, 4096):
            p = _policy.decide(c, th, n, count)
            assert _policy.usable(p.method, c, ALL), (n, count, p)
            assert p.reason and "%" not in p.reason
            assert p.threads == 1 and p.chunk == th.chunk and p.nbytes == n


def test_forced_method_wins():
    th = _policy.default_thresholds(ICE, ALL)
    p = _policy.decide(ICE, th, 1 * GiB, forced="mov_loop")
    assert p.method == "mov_loop" and "CLEARPAGES_METHOD" in p.reason


def test_with_nt_threshold_moves_the_crossover():
    th = _policy.with_nt_threshold(_policy.default_thresholds(ICE, ALL), 1 * MiB)
    assert _policy.decide(ICE, th, 1 * MiB - 1).method == "rep_stosb"
    assert _policy.decide(ICE, th, 1 * MiB).method == "avx512_nt"
    assert "CLEARPAGES_NT_THRESHOLD" in th.reason("nt_min")


def test_threads_auto():
    many = dataclasses.replace(ICE, cores=16)
    th = _policy.default_thresholds(many, ALL)
    assert _policy.choose_threads(many, th, 1 * MiB) == 1
    assert _policy.choose_threads(many, th, th.thread_min - 1) == 1
    big = _policy.choose_threads(many, th, 1 * GiB)
    assert 2 <= big <= 16
    assert _policy.choose_threads(ICE, th, 1 * GiB) == 1       # one core
    capped = dataclasses.replace(th, max_threads=2)
    assert _policy.choose_threads(many, capped, 1 * GiB) == 2
    p = _policy.decide(many, th, 1 * GiB, threads="auto")
    assert p.threads == big and "threads" in p.reason
    assert p.chunk % (4 * KiB) == 0 and 4 * KiB <= p.chunk <= th.chunk
    # Several units per thread, so a slow thread does not hold the rest.
    assert -(-1 * GiB // p.chunk) >= 4 * p.threads


def test_explicit_threads_split_small_work_in_pages():
    th = _policy.default_thresholds(ICE, ALL)
    for n, t in [(10_000, 2), (1 * MiB + 3, 3), (0, 4)]:
        p = _policy.decide(ICE, th, n, threads=t)
        assert p.threads == t
        assert p.chunk % (4 * KiB) == 0 and p.chunk >= 4 * KiB


def test_plan_str_and_format_size():
    p = _policy.decide(ICE, _policy.default_thresholds(ICE, ALL), 1 * GiB)
    assert "avx512_nt" in str(p) and "32 MiB" in str(p)
    assert _policy.format_size(1536) == "1.5 KiB"
    assert _policy.format_size(12) == "12 B"
    assert _policy.format_size(3 * GiB) == "3 GiB"


# ---- plan() on this machine -------------------------------------------------

def test_plan_on_this_machine():
    th = cp.thresholds()
    for n in (0, 1, 4096, 1 * MiB, th.nt_min - 1, th.nt_min, 1 * GiB):
        p = cp.plan(n)
        assert p.method in cp.methods()
        assert p.nbytes == n and isinstance(p.reason, str) and p.reason
    assert cp.plan(1 * GiB).method == th.streaming
    assert cp.plan(4 * MiB, count=1024).count == 1024


@pytest.mark.parametrize("bad", [-1, 1 << 57, 1.5, True, "4096", None, 2 ** 64])
def test_plan_bad_sizes(bad):
    with pytest.raises(ValueError, match="nbytes"):
        cp.plan(bad)


@pytest.mark.parametrize("bad", [0, -3, True, 2.0])
def test_plan_bad_count(bad):
    with pytest.raises(ValueError, match="count"):
        cp.plan(4096, count=bad)


@pytest.mark.parametrize("bad", [0, -1, True, 1.5, 1000, "two", None])
def test_plan_bad_threads(bad):
    with pytest.raises(ValueError, match="threads"):
        cp.plan(4096, threads=bad)
