"""The policy: which routine, how many threads, what chunk, and why.

Everything here is a pure function of a CPU description, the size of the work
and the thresholds, so it is tested with synthetic CPUs.  The thresholds are
named data with the reason beside them, computed from the caches (as glibc's
dl-cacheinfo.h does) unless a calibration file measured better ones.
"""

from __future__ import annotations

import dataclasses
from typing import Union

from ._cpu import CPU
from ._routines import BY_NAME

KiB = 1 << 10
MiB = 1 << 20
GiB = 1 << 30

#: The unit of work while the speed of the memory is unknown: a job's first
#: unit per thread when this process has not yet timed the routine, and the
#: unit for memory not yet faulted in (which clears 50-100 times slower).
#: Otherwise units are sized by time, to end by the slice deadline, so a long
#: extent reaches the routine in as few calls as the slice allows (rep stosb
#: on AMD streams only for long lengths).  Work of at most one chunk on one
#: thread is a single direct call.  Linux clears huge pages in 32 MiB chunks
#: between rescheduling points: cold, 32 MiB is ~80 ms at 0.4 GB/s.
DEFAULT_CHUNK = 32 * MiB

#: glibc's rep_stosb_threshold (2.32+): below 2 KiB the start-up cost of
#: rep stosb loses to vector stores, which memset uses.
GLIBC_REP_STOSB_THRESHOLD = 2 * KiB

#: Below this total, a second thread costs more (thread start, a second cold
#: core) than it gains.  Calibration measures it; this is the default.
DEFAULT_THREAD_MIN = 64 * MiB

#: Streaming routines in order of preference: the widest store first
#: (measured on Zen 4 at 1 GiB: AVX-512 79 GB/s, AVX2 ~, rep stosb 73).
STREAMING_PREFERENCE = ("avx512_nt", "avx2_nt", "movnti")

#: A threshold no size reaches: plan() and clear() take at most 2**56 bytes
#: (_config.MAX_SIZE), calibration files at most 2**62, and
#: ``python -m clearpages info`` shows it as "never".
NEVER = 1 << 62

Threads = Union[int, str]


@dataclasses.dataclass(frozen=True)
class Thresholds:
    """The numbers ``auto`` decides by, each with where it came from."""

    vector_max: int
    """Below this many bytes per piece: the C library's memset (vector stores)."""
    nt_min: int
    """At or above this many bytes in all: the streaming routine."""
    temporal: str
    """The routine between vector_max and nt_min."""
    streaming: str
    """The non-temporal routine at or above nt_min."""
    chunk: int = DEFAULT_CHUNK
    thread_min: int = DEFAULT_THREAD_MIN
    max_threads: int = 0
    """0: as many as the process may run on."""
    source: str = "default"
    """'default', 'calibration: <path>' or 'CLEARPAGES_NT_THRESHOLD'."""
    adapt_min: int = 0
    """Single clears of adapt_min <= n < adapt_max bytes: adaptive auto times them
    and learns which of temporal and streaming wins (0, 0: no such band)."""
    adapt_max: int = 0
    why: tuple[tuple[str, str], ...] = ()
    """(field, reason) for each threshold, shown by ``python -m clearpages info``."""

    def reason(self, field: str) -> str:
        return dict(self.why).get(field, self.source)


@dataclasses.dataclass(frozen=True)
class Plan:
    """What ``method="auto"`` does for a piece of work."""

    method: str
    threads: int
    chunk: int
    reason: str
    nbytes: int = 0
    count: int = 1
    learned: str = ""
    """What adaptive auto has learned for this size and why it may run the
    other routine (empty from decide(), which describes the static choice)."""

    def __str__(self) -> str:
        return "%s, %d thread%s, %s chunks: %s" % (
            self.method, self.threads, "" if self.threads == 1 else "s",
            format_size(self.chunk), self.reason)


def format_size(n: float) -> str:
    for unit, size in (("GiB", GiB), ("MiB", MiB), ("KiB", KiB)):
        if n >= size:
            value = n / size
            return ("%d %s" % (value, unit)) if value == int(value) else ("%.1f %s" % (value, unit))
    return "%d B" % n


def usable(name: str, cpu: CPU, built: frozenset[str]) -> bool:
    """Can this CPU (after masking) run the routine, and was it built?"""
    r = BY_NAME[name]
    return name in built and r.requires <= cpu.features


def default_thresholds(cpu: CPU, built: frozenset[str]) -> Thresholds:
    """Thresholds from the CPU's features and cache sizes, never measured."""
    why = []
    streaming = next((m for m in STREAMING_PREFERENCE if usable(m, cpu, built)), None)
    last = cpu.last_cache
    if streaming is None:
        # A portable build: memset is all there is.
        only = "memset is the only routine in this build"
        return Thresholds(vector_max=NEVER, nt_min=NEVER, temporal="libc",
                          streaming="libc",
                          why=(("streaming", "no streaming routine in this build"),
                               ("vector_max", only), ("nt_min", only), ("temporal", only)))
    why.append(("streaming", "%s: the widest streaming store this CPU has" % streaming))

    if "erms" in cpu.features and usable("rep_stosb", cpu, built):
        temporal = "rep_stosb"
        if cpu.is_amd and cpu.l2:
            # AMD aocl-libmem: vector stores up to L2, rep stosb up to L3.
            # glibc 2.40 stopped using rep stosb on AMD altogether; measured
            # on Zen 4 it still wins between L2 and L3.
            vector_max = cpu.l2
            why.append(("vector_max", "the %s L2 (AMD aocl-libmem: vector stores to L2)"
                        % format_size(cpu.l2)))
        else:
            vector_max = GLIBC_REP_STOSB_THRESHOLD
            why.append(("vector_max", "glibc's rep_stosb_threshold, 2 KiB"))
        why.append(("temporal", "rep_stosb: ERMS%s makes it the fastest temporal store"
                    % ("/FSRM" if "fsrm" in cpu.features else "")))
    else:
        temporal = "libc"
        vector_max = NEVER
        why.append(("temporal", "libc memset: no ERMS, so rep stosb is slow to start"))
        why.append(("vector_max", "no ERMS: memset's vector stores up to the streaming threshold"))

    if last:
        # A guest may see the host's whole L3 in CPUID, shared with tenants
        # it cannot see; that shows as more L3 per visible core than any
        # real part has (they have at most a few times their L2).  Measured
        # in a 2-vCPU guest of a 300 MiB-L3 host: streaming stores already
        # won from ~2-4x the L2.  Calibration replaces this guess.
        per_core = last // max(1, cpu.cores)
        if "hypervisor" in cpu.features and cpu.l2 and per_core > 16 * cpu.l2:
            nt_min = 4 * cpu.l2
            why.append(("nt_min", "4x the %s L2: under a hypervisor the %s L3 is the "
                        "host's, shared with unseen guests" % (format_size(cpu.l2),
                                                               format_size(last))))
        elif cpu.is_amd:
            # aocl-libmem streams above the L3 (of one CCX, which is what
            # 0x8000001D describes); rep stosb there turns non-temporal
            # around the same size anyway.
            nt_min = last
            why.append(("nt_min", "the %s L3 (AMD aocl-libmem: non-temporal above L3)"
                        % format_size(last)))
        else:
            # glibc: non-temporal above 3/4 of the shared cache; asmlib uses
            # half the largest cache.  On Intel rep stosb never streams by
            # itself, so the switch must be made here.
            nt_min = last * 3 // 4
            why.append(("nt_min", "3/4 of the %s last-level cache (glibc's share)"
                        % format_size(last)))
    else:
        nt_min = 8 * MiB
        why.append(("nt_min", "cache size unknown: 8 MiB"))
    return Thresholds(vector_max=vector_max, nt_min=nt_min, temporal=temporal,
                      streaming=streaming, why=tuple(why))


#: Floor of the adaptive band: two clock reads (~60 ns) stay under 1% of a clear.
ADAPT_FLOOR = 64 * KiB


def with_adaptive_band(cpu: CPU, th: Thresholds) -> Thresholds:
    """th with the band of sizes where adaptive auto chooses by measurement.

    The rule: from the L2 to 4x the last-level cache.  Evidence (AMD Zen 3
    guest, L2 512 KiB, L3 32 MiB; GB/s of the routines called directly): at
    1 MiB and 8 MiB a buffer cleared again at once takes ordinary stores at
    ~52/47 and streaming ones at ~35/34, while a buffer not cleared for a
    while takes them at ~11/10 against ~34: no threshold wins both, only the
    program's own clears tell.  Below the L2 a clear lasts a few
    microseconds and the two clock reads would start to show; above a few
    times the last-level cache no buffer can still be cached, so streaming
    (or whatever the static policy says) stands.  Unknown caches count as
    256 KiB and 8 MiB.
    """
    if th.temporal == th.streaming:
        return dataclasses.replace(th, adapt_min=0, adapt_max=0, why=th.why + (
            ("adapt", "nothing to choose: %s is the only routine" % th.temporal),))
    lo = max(ADAPT_FLOOR, cpu.l2 or 256 * KiB)
    last = cpu.last_cache or 8 * MiB
    hi = max(lo, 4 * last)
    return dataclasses.replace(th, adapt_min=lo, adapt_max=hi, why=th.why + (
        ("adapt", "from the %s L2 to 4x the %s last-level cache: where warm and cold "
         "buffers want different stores" % (format_size(cpu.l2 or 256 * KiB),
                                             format_size(last))),))


def temporal_for(th: Thresholds, nbytes: int) -> str:
    """The ordinary-store routine the static policy runs for nbytes below nt_min."""
    return "libc" if nbytes < th.vector_max else th.temporal


def with_nt_threshold(th: Thresholds, nt_min: int) -> Thresholds:
    why = tuple((k, v) for k, v in th.why if k != "nt_min")
    return dataclasses.replace(th, nt_min=nt_min, source=th.source,
                               why=why + (("nt_min", "CLEARPAGES_NT_THRESHOLD"),))


def _round_up(n: int, to: int) -> int:
    return -(-n // to) * to


def choose_threads(cpu: CPU, th: Thresholds, nbytes: int) -> int:
    """threads="auto": one thread below thread_min, then one per half of it."""
    most = min(th.max_threads or cpu.cores, cpu.cores)
    if most <= 1 or nbytes < th.thread_min:
        return 1
    return max(1, min(most, nbytes // max(1, th.thread_min // 2)))


def pick(th: Thresholds, nbytes: int, count: int = 1) -> str:
    """The routine decide() chooses, without building its reason (per call)."""
    if nbytes >= th.nt_min:
        return th.streaming
    if (nbytes // count if count else 0) < th.vector_max:
        return "libc"
    return th.temporal


def chunk_for(th: Thresholds, nbytes: int, n_threads: int) -> int:
    """The first unit of work (see DEFAULT_CHUNK): th.chunk, smaller when
    threads share the work so that each gets several units and a slow thread
    does not hold the rest."""
    if n_threads <= 1:
        return th.chunk
    return max(4 * KiB, min(th.chunk, _round_up(-(-nbytes // (4 * n_threads)), 4 * KiB)))


def decide(cpu: CPU, th: Thresholds, nbytes: int, count: int = 1, *,
           threads: Threads = 1, forced: str | None = None) -> Plan:
    """The plan for clearing nbytes in count pieces.  Pure."""
    what = format_size(nbytes) if count == 1 else (
        "%s in %d pieces" % (format_size(nbytes), count))
    method = forced or pick(th, nbytes, count)
    if forced is not None:
        method, reason = forced, "CLEARPAGES_METHOD forces %s" % forced
    elif th.streaming == th.temporal == "libc":
        # A portable build: memset on both sides of every threshold.
        reason = "%s: %s" % (what, th.reason("temporal"))
    elif method == th.streaming and nbytes >= th.nt_min:
        reason = ("%s is at least the streaming threshold %s (%s): non-temporal "
                  "stores skip the read-for-ownership and keep the cache for other data"
                  % (what, format_size(th.nt_min), th.reason("nt_min")))
    elif method == "libc" and th.vector_max >= NEVER and nbytes < th.nt_min:
        reason = "%s is below the streaming threshold %s: memset (%s)" % (
            what, format_size(th.nt_min), th.reason("vector_max"))
    elif method == "libc" and nbytes < th.nt_min:
        reason = ("%s is below %s%s (%s): memset's vector stores start fastest"
                  % (what, format_size(th.vector_max), " a piece" if count > 1 else "",
                     th.reason("vector_max")))
    else:
        reason = ("%s fits the cache (streaming from %s): ordinary stores, %s"
                  % (what, format_size(th.nt_min), th.reason("temporal")))
    if count > 1:
        reason += "; chosen from the total, as one piece of work"
    n_threads = choose_threads(cpu, th, nbytes) if threads == "auto" else int(threads)
    chunk = chunk_for(th, nbytes, n_threads)
    if n_threads > 1:
        if threads == "auto":
            reason += "; %d threads from %s (thread threshold %s)" % (
                n_threads, format_size(th.thread_min), th.reason("thread_min"))
    return Plan(method=method, threads=n_threads, chunk=chunk, reason=reason,
                nbytes=nbytes, count=count)
