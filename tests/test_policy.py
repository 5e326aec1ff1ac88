"""The policy, a pure function of a CPU description and the work, with the
synthetic CPUs of test_cpu.py: glibc's and aocl-libmem's anchors where they
apply, and only routines the CPU can run."""

from __future__ import annotations

import dataclasses

import pytest
from test_cpu import ICE, ICE_NO_ZMM, MILAN, OLD, XCR0_AVX512, XCR0_SSE, ice_lake_leaves

import clearpages as cp
from clearpages import _config, _cpu, _dispatch, _fast, _policy
from clearpages._native import ffi, lib

KiB, MiB, GiB = 1 << 10, 1 << 20, 1 << 30
ALL = frozenset(cp.ALL_METHODS)


# ---- thresholds and decisions ---------------------------------------------

def plan_method(c, n, count=1, built=ALL):
    th = _policy.default_thresholds(c, built)
    return _policy.plan(c, th, n, count).method


def test_intel_ice_lake_policy():
    th = _policy.default_thresholds(ICE, ALL)
    assert (th.temporal, th.streaming) == ("rep_stosb", "avx512_nt")
    assert th.vector_max == 2 * KiB
    assert th.nt_min == 16 * ICE.l2 == 20 * MiB     # 16 L2s, below half the 60 MiB L3
    assert th.long == "" and th.long_min == _policy.NEVER    # Intel: never rep stosb long
    assert plan_method(ICE, 0) == "libc"
    assert plan_method(ICE, 2048) == "libc"         # as glibc: vector stores up to 2 KiB
    assert plan_method(ICE, 2049) == "rep_stosb"
    assert plan_method(ICE, th.nt_min - 1) == "rep_stosb"
    assert plan_method(ICE, th.nt_min) == "avx512_nt"
    assert plan_method(ICE, 1 * GiB) == "avx512_nt"
    assert plan_method(ICE, 64 * GiB) == "avx512_nt"
    # Chosen from the total: 1 GiB of 4 KiB pages streams, 16 x 1 KiB is memset,
    # 16 x 2 KiB too (up to vector_max), 16 x 4 KiB rep stosb, 8192 x 4 KiB
    # (32 MiB in all) streams.
    assert plan_method(ICE, 1 * GiB, 262144) == "avx512_nt"
    assert plan_method(ICE, 16 * KiB, 16) == "libc"
    assert plan_method(ICE, 16 * 2 * KiB, 16) == "libc"
    assert plan_method(ICE, 16 * 4 * KiB, 16) == "rep_stosb"
    assert plan_method(ICE, 1024 * 4 * KiB, 1024) == "rep_stosb"
    assert plan_method(ICE, 8192 * 4 * KiB, 8192) == "avx512_nt"
    for field in ("vector_max", "nt_min", "temporal", "streaming", "long", "long_min"):
        assert th.reason(field) != th.source, field


def test_intel_without_zmm_state_streams_with_avx2():
    th = _policy.default_thresholds(ICE_NO_ZMM, ALL)
    assert th.streaming == "avx2_nt"
    assert not _policy.usable("avx512_nt", ICE_NO_ZMM, ALL)
    assert plan_method(ICE_NO_ZMM, 1 * GiB) == "avx2_nt"
    no_avx = _cpu.decode(ice_lake_leaves(), XCR0_SSE)
    assert plan_method(no_avx, 1 * GiB) == "movnti"
    assert plan_method(no_avx, 8 * KiB) == "rep_stosb"


#: Synthetic descriptions of the machines in the profile corpus and beyond.
ZEN3_GUEST = _cpu.CPU(vendor="AuthenticAMD", family=25, model=1, brand="AMD EPYC",
                      features=frozenset({"erms", "fsrm", "avx2", "clzero", "sse2",
                                          "osxsave", "hypervisor"}),
                      l1d=32 * KiB, l2=512 * KiB, l3=32 * MiB, cores=2, is_x86=True)
ZEN4 = _cpu.CPU(vendor="AuthenticAMD", family=25, model=0x11, brand="AMD EPYC 9654",
                features=frozenset({"erms", "fsrm", "avx2", "avx512f", "clzero", "sse2",
                                    "osxsave"}),
                l1d=32 * KiB, l2=1 * MiB, l3=32 * MiB, cores=192, is_x86=True)
EMR_GUEST = _cpu.CPU(vendor="GenuineIntel", family=6, model=207,
                     brand="Intel(R) Xeon(R) Processor",
                     features=frozenset({"erms", "fsrm", "fzrm", "fsrs", "avx2", "avx512f",
                                         "sse2", "osxsave", "hypervisor"}),
                     l1d=48 * KiB, l2=2 * MiB, l3=300 * MiB, cores=2, is_x86=True)


def test_amd_zen3_guest_policy():
    th = _policy.default_thresholds(ZEN3_GUEST, ALL)
    assert (th.temporal, th.streaming) == ("rep_stosb", "avx2_nt")
    assert th.vector_max == 2 * KiB
    assert th.nt_min == 8 * MiB               # 16 L2s, below half the 32 MiB L3
    assert (th.long, th.long_min) == ("rep_stosb", 512 * MiB)
    assert plan_method(ZEN3_GUEST, 1 * KiB) == "libc"
    assert plan_method(ZEN3_GUEST, 4 * KiB) == "rep_stosb"
    assert plan_method(ZEN3_GUEST, 8 * MiB - 1) == "rep_stosb"
    assert plan_method(ZEN3_GUEST, 8 * MiB) == "avx2_nt"
    assert plan_method(ZEN3_GUEST, 512 * MiB - 1) == "avx2_nt"
    assert plan_method(ZEN3_GUEST, 512 * MiB) == "rep_stosb"
    assert plan_method(ZEN3_GUEST, 1 * GiB) == "rep_stosb"
    # The long rule needs one long extent on one thread: scattered pages and
    # threads stream with the vector routine.
    assert plan_method(ZEN3_GUEST, 1 * GiB, 262144) == "avx2_nt"
    th2 = _policy.plan(ZEN3_GUEST, th, 1 * GiB, threads=2)
    assert th2.method == "avx2_nt"
    assert "long" not in th.reason("nt_min")
    assert _policy.usable("clzero", ZEN3_GUEST, ALL)


def test_amd_zen4_policy():
    th = _policy.default_thresholds(ZEN4, ALL)
    assert (th.temporal, th.streaming) == ("rep_stosb", "avx512_nt")
    assert th.nt_min == 16 * MiB              # half the 32 MiB L3
    # Zen 4's vector streaming stores stay ahead of rep stosb at every length
    assert (th.long, th.long_min) == ("", _policy.NEVER)
    assert "Zen 4" in th.reason("long_min")
    assert plan_method(ZEN4, 16 * KiB) == "rep_stosb"
    assert plan_method(ZEN4, 1 * MiB) == "rep_stosb"
    assert plan_method(ZEN4, 16 * MiB - 1) == "rep_stosb"
    assert plan_method(ZEN4, 16 * MiB) == "avx512_nt"
    assert plan_method(ZEN4, 4 * GiB) == "avx512_nt"


@pytest.mark.parametrize("family, model, long", [
    (0x17, 0x31, True),     # Zen 2: before Zen 4, as Zen 3
    (0x19, 0x01, True),     # Zen 3 (Milan)
    (0x19, 0x21, True),     # Zen 3 (Vermeer)
    (0x19, 0x44, True),     # Zen 3+ (Rembrandt)
    (0x19, 0x11, False),    # Zen 4 (Genoa)
    (0x19, 0x61, False),    # Zen 4 (Raphael)
    (0x19, 0x74, False),    # Zen 4 (Phoenix)
    (0x19, 0xA0, False),    # Zen 4c (Bergamo)
    (0x1A, 0x02, False),    # Zen 5: not measured, the vector stores as elsewhere
])
def test_the_long_rep_stosb_rule_is_amd_before_zen4(family, model, long):
    cpu = dataclasses.replace(ZEN4, family=family, model=model)
    assert _policy.long_rep_stosb(cpu) is long
    th = _policy.default_thresholds(cpu, ALL)
    assert (th.long == "rep_stosb") is long
    assert not _policy.long_rep_stosb(dataclasses.replace(EMR_GUEST, family=family))


def test_intel_guest_with_host_sized_l3():
    """CPUID shows the host's 300 MiB L3 to a 2-vCPU guest: a last-level
    cache of more than 32 L2s is a server's, and the streaming threshold
    stops at 16 L2s (the profile: ordinary stores won warm at 32 MiB and
    lost 1.7x at 48 MiB)."""
    th = _policy.default_thresholds(EMR_GUEST, ALL)
    assert th.nt_min == 16 * EMR_GUEST.l2 == 32 * MiB
    assert "16 L2s" in th.reason("nt_min")
    assert th.long == ""
    bare = dataclasses.replace(EMR_GUEST, features=EMR_GUEST.features - {"hypervisor"})
    assert _policy.default_thresholds(bare, ALL).nt_min == th.nt_min
    assert plan_method(EMR_GUEST, 4 * MiB) == "rep_stosb"
    for n in (32 * MiB, 64 * MiB, 1 * GiB):
        assert plan_method(EMR_GUEST, n) == "avx512_nt"


def test_amd_milan_from_cpuid():
    th = _policy.default_thresholds(MILAN, ALL)
    assert (th.temporal, th.streaming) == ("rep_stosb", "avx2_nt")
    assert th.nt_min == 16 * MILAN.l2 == 8 * MiB
    assert th.long == "rep_stosb" and th.long_min == 16 * MILAN.l3
    assert _policy.usable("clzero", MILAN, ALL) and not _policy.usable("avx512_nt", MILAN, ALL)


def test_old_cpu_policy():
    th = _policy.default_thresholds(OLD, ALL)
    assert (th.temporal, th.streaming) == ("libc", "movnti")
    assert th.vector_max == _policy.NEVER and th.long == ""
    assert th.nt_min == OLD.last_cache // 2      # no L3: half the L2
    assert plan_method(OLD, 100) == "libc"
    assert plan_method(OLD, th.nt_min - 1) == "libc"
    assert plan_method(OLD, th.nt_min) == "movnti"
    assert plan_method(OLD, 1 * GiB) == "movnti"
    assert not _policy.usable("avx2_nt", OLD, ALL)


def test_nt_min_is_a_small_l3_whole_else_half_the_l3_or_16_l2s():
    """An L3 of at most 16 MiB and 32 L2s is kept nearly whole (a Zen 2
    guest's 16 MiB over 512 KiB L2s): the streaming threshold is the L3;
    a larger one, or one of more L2s, half of it, at most 16 L2s."""
    for l2, l3, want in ((512 * KiB, 16 * MiB, 16 * MiB), (512 * KiB, 8 * MiB, 8 * MiB),
                         (2 * MiB, 8 * MiB, 8 * MiB), (256 * KiB, 16 * MiB, 4 * MiB),
                         (512 * KiB, 32 * MiB, 8 * MiB), (1 * MiB, 32 * MiB, 16 * MiB),
                         (1 * MiB, 96 * MiB, 16 * MiB), (256 * KiB, 256 * MiB, 4 * MiB)):
        c = dataclasses.replace(ZEN3_GUEST, l2=l2, l3=l3)
        th = _policy.default_thresholds(c, ALL)
        assert th.nt_min == want, (l2, l3)
        assert th.nt_min == (l3 if l3 <= min(16 * MiB, 32 * l2) else min(l3 // 2, 16 * l2))
        # ... where adaptive auto also times a recent buffer of the L3's size
        assert _policy.keeps_whole_l3(c) == (want == l3)
        assert plan_method(c, want - 1) == th.temporal
        assert plan_method(c, want) == th.streaming
    # the learner's recent threshold stays half the L3 (at most 16 L2s)
    zen2 = dataclasses.replace(ZEN3_GUEST, l2=512 * KiB, l3=16 * MiB)
    assert _policy.recent_threshold(zen2) == 8 * MiB
    assert "at most 16 MiB and 32 L2s" in _policy.default_thresholds(zen2, ALL).reason("nt_min")


def test_avx512_present_but_disabled_by_the_os():
    th = _policy.default_thresholds(ICE_NO_ZMM, ALL)
    assert "avx512f" in ICE_NO_ZMM.os_disabled
    for n in (0, 4 * KiB, 1 * MiB, 1 * GiB):
        for count in (1, 64):
            assert _policy.plan(ICE_NO_ZMM, th, n, count).method != "avx512_nt"


def test_erms_masked_falls_back_to_memset():
    c = ICE.without(frozenset({"erms"}))
    assert plan_method(c, 8 * KiB) == "libc"
    assert plan_method(c, 1 * GiB) == "avx512_nt"
    z = ZEN3_GUEST.without(frozenset({"erms"}))
    th = _policy.default_thresholds(z, ALL)
    assert th.long == "" and plan_method(z, 1 * GiB) == "avx2_nt"


def test_thresholds_reason_takes_known_names_and_refuses_others():
    th = _policy.default_thresholds(ICE, ALL)
    assert th.reason.__doc__ and "KeyError" in th.reason.__doc__
    for name in th.reason_names():
        assert isinstance(th.reason(name), str) and th.reason(name), name
    assert th.reason("unit") == th.reason("chunk")
    for bad in ("bogus", "nt-min", ""):
        with pytest.raises(KeyError, match=r"nt_min.*vector_max|vector_max.*nt_min"):
            th.reason(bad)


def test_evidence_says_never_for_a_threshold_no_clear_reaches():
    """Without ERMS vector_max is NEVER: the evidence says "never", as info
    does, not the sentinel's number."""
    c = ICE.without(frozenset({"erms"}))
    th = _policy.default_thresholds(c, ALL)
    assert th.vector_max >= _policy.NEVER
    p = _policy.plan(c, th, 4 * KiB)
    line = next(e for e in p.evidence if e.startswith("vector_max"))
    assert line.startswith("vector_max never: "), line
    assert str(_policy.NEVER) not in " ".join(p.evidence + (p.reason,))


def test_unknown_caches():
    leaves = [r for r in ice_lake_leaves() if r[0] != 4]
    c = _cpu.decode(leaves, XCR0_AVX512)
    assert c.last_cache == 0
    th = _policy.default_thresholds(c, ALL)
    assert th.nt_min == _policy.NT_MIN_UNKNOWN
    assert plan_method(c, th.nt_min - 1) == "rep_stosb"
    assert plan_method(c, th.nt_min) == "avx512_nt"
    amd = dataclasses.replace(ZEN3_GUEST, l2=0, l3=0, l1d=0)
    assert _policy.default_thresholds(amd, ALL).long == ""


@pytest.mark.parametrize("c", [ICE, MILAN, OLD, ZEN3_GUEST, ZEN4, EMR_GUEST],
                         ids=["ice", "milan", "old", "zen3", "zen4", "emr"])
def test_portable_build_is_memset_everywhere(c):
    built = frozenset({"libc"})
    for n in (0, 100, 1 * MiB, 1 * GiB, 1 << 40):
        assert plan_method(c, n, built=built) == "libc"


@pytest.mark.parametrize("c", [ICE, MILAN, OLD, ICE_NO_ZMM, ZEN3_GUEST, ZEN4, EMR_GUEST],
                         ids=["ice", "milan", "old", "nozmm", "zen3", "zen4", "emr"])
def test_decisions_only_name_usable_routines(c):
    th = _policy.default_thresholds(c, ALL)
    for n in [0, 1, 2047, 2048, 2049, 4096, 1 * MiB, 8 * MiB, 40 * MiB, 64 * MiB, 1 * GiB, 1 << 40]:
        for count in (1, 7, 4096):
            p = _policy.plan(c, th, n, count)
            assert _policy.usable(p.method, c, ALL), (n, count, p)
            assert p.reason and "%" not in p.reason
            assert p.threads == 1 and p.chunk == th.chunk and p.nbytes == n


def test_forced_method_wins():
    th = _policy.default_thresholds(ICE, ALL)
    p = _policy.plan(ICE, th, 1 * GiB, forced="mov_loop")
    assert p.method == "mov_loop" and "CLEARPAGES_METHOD" in p.reason


def test_with_nt_threshold_moves_the_crossover():
    th = _policy.with_nt_threshold(_policy.default_thresholds(ICE, ALL), 1 * MiB)
    assert th.nt_min == 1 * MiB
    assert _policy.plan(ICE, th, 1 * MiB - 1).method == "rep_stosb"
    assert _policy.plan(ICE, th, 1 * MiB).method == "avx512_nt"
    assert "CLEARPAGES_NT_THRESHOLD" in th.reason("nt_min")


def _auto_threads(cpu, th, n):
    return _policy.plan(cpu, th, n, threads="auto").threads


def test_threads_auto():
    many = dataclasses.replace(ICE, cores=16)
    th = _policy.default_thresholds(many, ALL)
    assert _auto_threads(many, th, 1 * MiB) == 1
    assert _auto_threads(many, th, th.thread_min - 1) == 1
    big = _auto_threads(many, th, 1 * GiB)
    assert 2 <= big <= 16
    assert _auto_threads(ICE, th, 1 * GiB) == 1       # one core
    capped = dataclasses.replace(th, max_threads=2)
    assert _auto_threads(many, capped, 1 * GiB) == 2
    # At most what a job takes, however many CPUs there are.
    huge = dataclasses.replace(ICE, cores=100_000)
    assert _auto_threads(huge, th, _config.MAX_SIZE) == _fast.MAX_THREADS
    assert _auto_threads(huge, dataclasses.replace(th, max_threads=300),
                         _config.MAX_SIZE) == _fast.MAX_THREADS
    p = _policy.plan(many, th, 1 * GiB, threads="auto")
    assert p.threads == big and "threads" in p.reason
    assert p.chunk % (4 * KiB) == 0 and 4 * KiB <= p.chunk <= th.chunk
    # Several units per thread, so a slow thread does not hold the rest.
    assert -(-1 * GiB // p.chunk) >= 4 * p.threads


def test_auto_threads_never_exceed_what_a_job_takes():
    huge = dataclasses.replace(ICE, cores=512)
    th = _policy.default_thresholds(huge, ALL)
    assert _policy.plan(huge, th, 10 * GiB, threads="auto").threads == _fast.MAX_THREADS


def test_explicit_threads_split_small_work_in_pages():
    th = _policy.default_thresholds(ICE, ALL)
    for n, t in [(10_000, 2), (1 * MiB + 3, 3), (0, 4)]:
        p = _policy.plan(ICE, th, n, threads=t)
        assert p.threads == t
        assert p.chunk % (4 * KiB) == 0 and p.chunk >= 4 * KiB


def test_plan_str_and_format_size():
    p = _policy.plan(ICE, _policy.default_thresholds(ICE, ALL), 1 * GiB)
    assert "avx512_nt" in str(p) and "32 MiB" in str(p)
    assert _policy.format_size(1536) == "1.5 KiB"
    assert _policy.format_size(12) == "12 B"
    assert _policy.format_size(3 * GiB) == "3 GiB"


# ---- plan() on this machine -------------------------------------------------

def test_plan_on_this_machine():
    th = cp.thresholds()
    for n in (0, 1, 4096, 1 * MiB, th.nt_min - 1, th.nt_min, 1 * GiB, _config.MAX_SIZE):
        if n > _config.MAX_SIZE:
            # A threshold of _policy.NEVER (a portable build): no size reaches it.
            assert n + 1 >= _policy.NEVER, th
            continue
        p = cp.plan(n)
        assert p.method in cp.methods()
        assert p.nbytes == n and isinstance(p.reason, str) and p.reason
    # No long rule on two threads; CLEARPAGES_METHOD, where the suite runs
    # under it, forces every choice.
    forced = _dispatch.state().forced
    assert cp.plan(1 * GiB, threads=2).method == (forced or th.streaming)
    assert cp.plan(4 * MiB, count=1024).count == 1024


@pytest.mark.parametrize("bad, kind", [
    (-1, ValueError), (1 << 57, ValueError), ("4096x", ValueError), (2 ** 64, ValueError),
    (1.5, TypeError), (True, TypeError), (None, TypeError)])
def test_plan_bad_sizes(bad, kind):
    with pytest.raises(kind, match="nbytes"):
        cp.plan(bad)


@pytest.mark.parametrize("bad, kind", [(0, ValueError), (-3, ValueError), (True, TypeError),
                                       (2.0, TypeError)])
def test_plan_bad_count(bad, kind):
    with pytest.raises(kind, match="count"):
        cp.plan(4096, count=bad)


@pytest.mark.parametrize("bad, kind", [(0, ValueError), (-1, ValueError), (1000, ValueError),
                                       (True, TypeError), (1.5, TypeError), ("two", TypeError),
                                       (None, TypeError)])
def test_plan_bad_threads(bad, kind):
    with pytest.raises(kind, match="threads"):
        cp.plan(4096, threads=bad)


def _routine_by_rule(th, forced, n, count, threads):
    """The routing rule, stated here apart from csrc/core/policy.c so that a
    change to either shows: a forced routine always; streaming from nt_min
    in all (the long routine for pieces of long_min on one thread); memset
    up to vector_max a piece; the temporal routine between; memset for
    pieces under PIECE_FINE on average, whatever their total."""
    if forced is not None:
        return forced
    if count > 1 and n // count < _policy.PIECE_FINE:
        return "libc"
    if n >= th.nt_min:
        return th.long if th.long and threads == 1 and n // count >= th.long_min \
            else th.streaming
    return "libc" if n // count <= th.vector_max else th.temporal


def _threads_by_rule(th, cores, n, threads, count=1):
    """threads="auto": one below thread_min, then one per half of it, up to
    the cap (max_threads, the CPUs, a job's 256); one for pieces under
    PIECE_FINE on average."""
    if threads != "auto":
        return threads
    if count > 1 and n // count < _policy.PIECE_FINE:
        return 1
    cap = min(th.max_threads or cores, cores, _fast.MAX_THREADS)
    return 1 if cap <= 1 or n < th.thread_min else min(n // (th.thread_min // 2), cap)


@pytest.mark.parametrize("env", [{}, {"CLEARPAGES_NT_THRESHOLD": "1000"},
                                 {"CLEARPAGES_NT_THRESHOLD": "64M"},
                                 {"CLEARPAGES_DISABLE": "erms,avx512f"},
                                 {"CLEARPAGES_METHOD": "rep_stosq"}])
def test_plan_follows_the_rules(config, env):
    """plan() (what every call runs: test_config checks that clear() runs
    it) routes, counts threads and sizes units by the rules, for every size
    next to a threshold, piece count and thread setting, with the
    configured thresholds; plan's defaults are clear()'s."""
    if env.get("CLEARPAGES_METHOD", "libc") not in _dispatch.state().built:
        pytest.skip("CLEARPAGES_METHOD=%s: %s" % (env["CLEARPAGES_METHOD"],
                                                    _dispatch.state().missing(env["CLEARPAGES_METHOD"])))
    config(env)
    st = _dispatch.state()
    th = st.thresholds
    edges = [th.vector_max, th.nt_min, th.thread_min, th.long_min, 2 * th.thread_min]
    sizes = {0, 1, 4096, 1 * MiB, 1 * GiB, 5 * GiB + 3} | {
        e + d for e in edges for d in (-1, 0, 1) if e < _policy.NEVER}
    for n in sorted(x for x in sizes if 0 <= x <= _config.MAX_SIZE):
        assert cp.plan(n) == cp.plan(n, count=1, threads=1)
        for count in (1, 3, 4096):
            for threads in (1, 2, 7, "auto"):
                p = cp.plan(n, count=count, threads=threads)
                want = _threads_by_rule(th, st.cpu.cores, n, threads, count)
                assert p.threads == want, (n, count, threads, p)
                assert p.method == _routine_by_rule(th, st.forced, n, count, want), \
                    (n, count, threads, p)
                unit = th.unit if want == 1 else min(th.unit, max(
                    4 * KiB, -(-n // (4 * want)) + 4 * KiB - 1 & ~(4 * KiB - 1)))
                assert p.chunk == unit, (n, count, threads, p)


def test_whole_buffer_hints():
    """hot=True: ordinary stores over all of it up to half the L3, then a hot
    tail that long after a streamed head; hot=False: streaming over all of
    it, at every size, never learned."""
    th = _policy.with_adaptive_band(ZEN4, _policy.default_thresholds(ZEN4, ALL))
    assert th.hot_max == 16 * MiB
    for n in (16 * KiB, 1 * MiB, 16 * MiB):
        p = _policy.plan(ZEN4, th, n, hot=True)
        assert p.method == p.hot_method == th.temporal, n
        assert "hot=True" in p.reason
    p = _policy.plan(ZEN4, th, 64 * MiB, hot=True)
    assert (p.method, p.hot_method) == (th.streaming, th.temporal)
    assert "last 16 MiB" in p.reason
    for n in (4 * KiB, 64 * KiB, 1 * GiB):
        p = _policy.plan(ZEN4, th, n, hot=False)
        assert p.method == th.streaming and p.hot_method is None, n
    d = _policy.decision(_policy.native_policy(ZEN4, th, adapt=True),
                         64 * KiB, hot_nbytes=False)
    assert not d.adaptive
    assert _policy.plan(ZEN4, th, 1 * MiB, hot=False, forced="libc").method == "libc"


def test_hot_true_of_a_buffer_not_cleared_lately_keeps_a_quarter_of_the_l3():
    """CP_POLICY_HOT_ALL_OTHER (hot=True of a buffer the learner has not
    seen cleared lately): the tail is hot_max_other, a quarter of the L3;
    a buffer that short is still cleared all hot."""
    th = _policy.with_adaptive_band(ZEN4, _policy.default_thresholds(ZEN4, ALL))
    assert th.hot_max_other == 8 * MiB and "quarter" in th.reason("hot_max_other")
    policy = _policy.native_policy(ZEN4, th, adapt=True)
    out = ffi.new("struct cp_decision *")
    for n, tail in ((4 * MiB, 4 * MiB), (16 * MiB, 8 * MiB), (64 * MiB, 8 * MiB)):
        lib.cp_policy_decide(policy, n, 1, lib.CP_POLICY_AUTO, 1,
                             lib.CP_POLICY_HOT_ALL_OTHER, 0, out)
        assert out.hot_nbytes == tail, n
        assert _policy.ROUTINES[out.hot_routine].name == th.temporal
        assert _policy.ROUTINES[out.routine].name == th.streaming
        lib.cp_policy_decide(policy, n, 1, lib.CP_POLICY_AUTO, 1, lib.CP_POLICY_HOT_ALL, 0, out)
        assert out.hot_nbytes == min(n, th.hot_max), n
    # never longer than hot_max, whatever the thresholds say
    small = dataclasses.replace(th, hot_max=2 * MiB, hot_max_other=4 * MiB)
    assert _policy.native_policy(ZEN4, small).hot_max_other == 2 * MiB


@pytest.mark.parametrize("cpu", [ZEN3_GUEST, ZEN4, EMR_GUEST], ids=["zen3", "zen4", "emr"])
def test_the_learner_s_direct_calls_are_exactly_the_decisions_that_lead_there(cpu):
    """A buffer the learner handed its next clears to runs its role's
    routine without a whole decision (csrc/pyext/run.c), where
    cp_policy_learner_direct says the decision would have asked the
    learner and then made one direct call: held here against the decisions
    themselves, for every size around each edge of every rule it stands
    for, with adaptation on and off, a forced routine, no band, untouched
    pages looked for from small sizes and a small unit."""
    th = _policy.with_adaptive_band(cpu, _policy.default_thresholds(cpu, ALL))
    assert th.adapt_min < th.adapt_max
    policies = []
    for adapt in (True, False):
        for forced in (None, th.temporal):
            policies.append(_policy.native_policy(cpu, th, forced, adapt=adapt))
    for untouched in (0, 1, th.adapt_min + 4096, th.chunk):
        p = _policy.native_policy(cpu, th, adapt=True)
        p.untouched_min = untouched
        policies.append(p)
    for unit in (0, 4096, th.adapt_min, 2 * th.adapt_min):
        p = _policy.native_policy(cpu, th, adapt=True)
        p.unit = unit
        policies.append(p)
    none = _policy.native_policy(cpu, th, adapt=True)
    none.adapt_max = none.adapt_min
    policies.append(none)
    edges = {0, 1, 4096, th.vector_max, th.nt_min, th.adapt_min, th.adapt_max, th.chunk,
             th.thread_min, 64 * MiB}
    sizes = sorted({max(0, e + d) for e in edges if e < _policy.NEVER for d in (-1, 0, 1)})
    out = ffi.new("struct cp_decision *")
    seen = set()
    for p in policies:
        for n in sizes:
            lib.cp_policy_decide(p, n, 1, lib.CP_POLICY_AUTO, 1, lib.CP_POLICY_HOT_NONE, 0,
                                 out)
            want = bool(out.adaptive) and out.threads == 1 and not out.skip_untouched \
                and n <= out.unit
            assert bool(lib.cp_policy_learner_direct(p, n)) == want, (n, p.unit,
                                                                       p.untouched_min)
            seen.add(want)
    assert seen == {True, False}
