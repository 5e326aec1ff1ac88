"""Zeroed memory before it is asked for: cp.Pool against fresh memory.

Goals (a benchmark, never a timed test; the summary names the CPU):
- ``Pool.acquire()`` of a 2 MiB block while the pool keeps up (100 us of
  work between acquires): p50 under 0.5 us, p99 under 2 us;
- a zeroed, resident 1 GiB with 40 ms of work between requests: acquire at
  least 50x faster than ``np.zeros`` + a write to every page; in a tight
  loop of acquire, write every page, release, at least 5x faster than
  ``np.zeros`` + touch and than ``torch.zeros``;
- under ``zeroed_arrays``, ``np.zeros`` + touch with 40 ms of work between:
  at least 5x numpy's own allocator;
- at the default pace a co-running memory-bound loop on the other core
  loses at most 5% (the pace reached is reported).

    python -m pytest bench/bench_pool.py -k quick     # 64 MiB and the latency
    python -m pytest bench/bench_pool.py --slow       # and 1 GiB
    python -m clearpages bench --pool                 # the same as tables, interleaved
"""

from __future__ import annotations

import time

import _common
import pytest
from _common import GiB, MiB, cp

from clearpages.tools import poolbench

np = pytest.importorskip("numpy")

SUITE = "pool"
PAGE = 4096


def _touch(buf) -> None:
    a = np.frombuffer(buf, dtype=np.uint8)
    a[::PAGE] = 1


@pytest.mark.parametrize("label", ["quick"])
def test_acquire_latency(benchmark, label):
    """acquire() of a 2 MiB block, 100 us of busy work between (setup)."""
    with cp.Pool(2 * MiB) as pool:
        held = []

        def setup():
            while held:
                held.pop().release()
            poolbench.spin(100e-6)

        def take():
            held.append(pool.acquire())

        for _ in range(20):
            setup()
            take()
        benchmark.pedantic(take, setup=setup, rounds=2000, warmup_rounds=10)
        setup()
        st = pool.stats()
    s = getattr(benchmark, "stats", None)
    if s:
        times = sorted(s.stats.data)
        rec = {"p50_us": times[len(times) // 2] * 1e6,
               "p99_us": times[int(0.99 * len(times))] * 1e6,
               "ready": st.acquires_ready / max(1, st.acquires)}
        benchmark.extra_info.update(rec)
        _common.RESULTS.setdefault(SUITE, {})["latency"] = rec


def _cases(size):
    return [pytest.param(size, work, id="%s-%s" % (_common.fmt_size(size), name),
                         marks=_common.slow_marks(size))
            for work, name in ((0.0, "tight"), (0.040, "work40ms"))]


@pytest.mark.parametrize("size, work", _cases(64 * MiB) + _cases(GiB))
@pytest.mark.parametrize("how", ["pool", "np.zeros", "zeroed_arrays", "torch.zeros",
                                 "Region"])
def test_time_to_zeroed(benchmark, size, work, how):
    """One round: get a zeroed buffer, write a byte of every page, let it go
    (work: busy time before each round, in setup, untimed)."""
    rounds = 5 if size >= GiB else 9
    if how == "torch.zeros":
        torch = pytest.importorskip("torch")

        def run():
            t = torch.zeros(size, dtype=torch.uint8)
            t[::PAGE] = 1
            del t
        return _timed(benchmark, run, work, rounds, size, how)
    if how == "np.zeros":
        def run():
            _touch(np.zeros(size, dtype=np.uint8))
        return _timed(benchmark, run, work, rounds, size, how)
    if how == "Region":
        def run():
            with cp.Region(size, page_size="auto", populate=True) as r:
                _touch(r)
        return _timed(benchmark, run, work, rounds, size, how)
    with cp.Pool(size) as pool:
        if how == "pool":
            def run():
                with pool.acquire() as blk:
                    _touch(blk)
        else:
            def run():
                with cp.zeroed_arrays(pool):
                    a = np.zeros(size, dtype=np.uint8)
                a[::PAGE] = 1
                del a
        run()                       # the pool's first block is faulted in
        _timed(benchmark, run, work, rounds, size, how)


def _timed(benchmark, run, work, rounds, size, how):
    benchmark.pedantic(run, setup=lambda: poolbench.spin(work), rounds=rounds,
                       warmup_rounds=1)
    s = getattr(benchmark, "stats", None)
    if s:
        key = (_common.fmt_size(size), "tight" if not work else "40 ms")
        _common.RESULTS.setdefault(SUITE, {}).setdefault(key, {})[how] = s.stats.median


def test_co_runner(benchmark):
    """The slowdown of a memory-bound loop on another CPU while the pool zeroes
    (idle, default pace, flat out); a table, not a time."""
    res = poolbench.co_runner(phase_s=0.5, rounds=8)
    if "skipped" in res:
        pytest.skip(res["skipped"])
    benchmark.pedantic(time.perf_counter, rounds=1)
    for name, row in res["rows"].items():
        benchmark.extra_info[name] = {"slowdown": round(row["slowdown"], 4),
                                      "pace GB/s": round(row["pace_bytes_s"] / 1e9, 3)}
    _common.RESULTS.setdefault(SUITE, {})["co_runner"] = res["rows"]


@_common.summary_of(SUITE)
def _summary(res):
    lines = []
    lat = res.get("latency")
    if lat:
        lines.append("acquire 2 MiB, 100 us of work between: p50 %.2f us, p99 %.2f us "
                     "(goals 0.5, 2; %.0f%% were ready)"
                     % (lat["p50_us"], lat["p99_us"], 100 * lat["ready"]))
    for key, rows in res.items():
        if not isinstance(key, tuple) or "np.zeros" not in rows:
            continue
        base = rows["np.zeros"]
        lines.append("%s, %s: %s" % (key[0], key[1], ", ".join(
            "%s %.1fx" % (how, base / t) for how, t in sorted(rows.items()) if t)))
    co = res.get("co_runner")
    if co:
        lines.append("co-running loop: " + ", ".join(
            "%s %.1f%% (pace %.2f GB/s)" % (name, 100 * row["slowdown"],
                                           row["pace_bytes_s"] / 1e9)
            for name, row in co.items()))
    if not lines:
        return None
    return ("pool (%s; goals: tight 5x, 40 ms 50x np.zeros + touch, co-runner <= 5%%)"
            % _common.machine_label(), "\n".join(lines))
