"""The adaptive choice of auto (csrc/adapt.c), driven with synthetic times.

A simulated clear costs ``n * ns_per_byte[arm]`` nanoseconds, with a little
multiplicative noise and an occasional outlier (an interrupt, a page
fault), from a seeded generator: the learner sees the same (size, address,
elapsed) sequence a real program would, and every run is the same.

The costs are those measured on an AMD Zen 3 guest (issue table): warm,
ordinary stores ~52 GB/s and streaming ~35; cold, ~11.5 and ~34.  They are
only a scenario: nothing here depends on the machine the tests run on.
"""

from __future__ import annotations

import random
import threading

import pytest

from clearpages._native import ffi, lib

KiB = 1 << 10
MiB = 1 << 20

T, S = 0, 1     # arms: temporal, streaming
WARM = (1 / 52.0, 1 / 35.0)     # ns per byte (1 / GB/s)
COLD = (1 / 11.5, 1 / 34.0)
CLOSE = (1 / 34.0, 1 / 35.0)    # arms within 3%


@pytest.fixture
def learner():
    """The learner configured for a test, and put back afterwards."""
    saved = ffi.new("struct cp_adapt_params *")
    lib.cp_adapt_params(saved)

    def configure(lo=512 * KiB, hi=128 * MiB, nt_min=2 * MiB, reuse=32 * MiB, **kw):
        p = ffi.new("struct cp_adapt_params *")
        lib.cp_adapt_defaults(p)
        p.lo, p.hi, p.nt_min, p.reuse_bytes = lo, hi, nt_min, reuse
        for k, v in kw.items():
            setattr(p, k, v)
        lib.cp_adapt_configure(p)
        return p

    yield configure
    lib.cp_adapt_configure(saved)


class Sim:
    """Calls choose/record as a per-call path would, with synthetic times."""

    def __init__(self, seed: int = 1, noise: float = 0.03, outliers: float = 0.01):
        self.rng = random.Random(seed)
        self.noise = noise
        self.outliers = outliers
        self.arms: list[int] = []
        self.explored: list[bool] = []
        self.spent = 0.0        # ns the learner's choices cost
        self.best = 0.0         # ns the better arm would have cost
        self.static = 0

    def call(self, n: int, addr: int, cost: tuple[float, float], nt_min: int = 2 * MiB) -> int:
        ticket = lib.cp_adapt_choose(n, ffi.cast("void *", addr))
        arm = (S if n >= nt_min else T) if ticket < 0 else ticket & 1
        self.static += ticket < 0
        t = n * cost[arm] * (1 + self.rng.uniform(-self.noise, self.noise))
        if self.rng.random() < self.outliers:
            t *= 5
        lib.cp_adapt_record(n, ticket, int(t))
        self.arms.append(arm)
        self.explored.append(ticket >= 0 and bool(ticket & 4))
        self.spent += n * cost[arm]
        self.best += n * min(cost)
        return arm

    def warm(self, n: int, calls: int, cost=WARM, addr: int = 0x7F0000000000) -> None:
        for _ in range(calls):
            self.call(n, addr, cost)

    def cold(self, n: int, calls: int, cost=COLD, pool: int = 64) -> None:
        base = 0x7E0000000000
        for i in range(calls):
            self.call(n, base + (i % pool) * 2 * n, cost)

    def share(self, arm: int, start: int, stop: int | None = None) -> float:
        got = self.arms[start:stop]
        return got.count(arm) / len(got)


def speed_ratio(sim: Sim, start: int, cost, n: int) -> float:
    """Of the calls from start on: the best arm's time over the time spent."""
    spent = sum(n * cost[a] for a in sim.arms[start:])
    return n * min(cost) * len(sim.arms[start:]) / spent


@pytest.mark.parametrize("n", [1 * MiB, 8 * MiB])
def test_warm_loop_settles_on_temporal(learner, n):
    learner()
    sim = Sim()
    sim.warm(n, 2000)
    assert sim.share(T, 20) > 0.98
    assert speed_ratio(sim, 0, WARM, n) > 0.97


@pytest.mark.parametrize("n", [1 * MiB, 8 * MiB])
def test_cold_walk_settles_on_streaming(learner, n):
    learner()
    sim = Sim()
    sim.cold(n, 2000)
    assert sim.share(S, 20) > 0.98
    assert speed_ratio(sim, 0, COLD, n) > 0.97


@pytest.mark.parametrize("reuse", [32 * MiB, 0], ids=["by-address", "size-only"])
def test_follows_the_workload_back_and_forth(learner, reuse):
    """Warm, cold, warm, cold in one process: each phase is on the better
    arm within a few dozen calls.  Keyed by address, a return to a workload
    seen before is followed at once; keyed by size alone, a cold-to-warm
    change shows only through exploration, so it takes (ratio - 1) / budget
    calls at worst (here ~240)."""
    learner(reuse=reuse)
    sim = Sim(seed=7)
    n = 4 * MiB
    phase = 600
    for i in range(4):
        start = len(sim.arms)
        (sim.warm if i % 2 == 0 else sim.cold)(n, phase)
        want = T if i % 2 == 0 else S
        settle = 40 if reuse or want == S else 300
        assert sim.share(want, start + settle, start + phase) > 0.97, (i, reuse)
        if reuse:
            cost = WARM if want == T else COLD
            assert speed_ratio(sim, start, cost, n) > 0.9, i


@pytest.mark.parametrize("cost, name", [(WARM, "warm"), (COLD, "cold"), (CLOSE, "close")])
def test_exploration_stays_within_its_bound(learner, cost, name):
    """Over 10,000 calls the time lost to exploring is under 2% once settled,
    and explorations grow rarer as the evidence grows."""
    learner()
    sim = Sim(seed=3)
    n = 2 * MiB
    sim.warm(n, 10_000, cost=cost)
    settled = 200
    assert speed_ratio(sim, settled, cost, n) > 0.98, name
    assert speed_ratio(sim, 0, cost, n) > 0.97, name
    if name != "close":     # near-equal arms: exploring is nearly free
        early = sum(sim.explored[:1000])
        late = sum(sim.explored[-1000:])
        assert late < early, (early, late)


def test_no_flapping_on_noise(learner):
    """Arms 3% apart and noise of +-10% with 2% outliers: the choice settles
    rather than following every sample."""
    learner()
    sim = Sim(seed=11, noise=0.10, outliers=0.02)
    sim.warm(1 * MiB, 5000, cost=CLOSE)
    st = ffi.new("struct cp_adapt_stat *")
    assert lib.cp_adapt_stat(20, 1, st) == 1
    assert st.switches < 50
    assert speed_ratio(sim, 0, CLOSE, 1 * MiB) > 0.97


def test_outside_the_band_is_static_and_unrecorded(learner):
    learner(lo=1 * MiB, hi=8 * MiB)
    for n in (0, 1, 4 * KiB, MiB - 1, 8 * MiB, 1 << 30):
        assert lib.cp_adapt_choose(n, ffi.NULL) == -1, n
    assert lib.cp_adapt_choose(MiB, ffi.NULL) >= 0
    assert lib.cp_adapt_choose(8 * MiB - 1, ffi.NULL) >= 0


def test_off_is_static_for_every_size(learner):
    learner(lo=0, hi=0)
    for shift in range(0, 40):
        for n in (1 << shift, (1 << shift) + 1):
            assert lib.cp_adapt_choose(n, ffi.cast("void *", 4096)) == -1


def test_first_call_is_the_static_choice(learner):
    learner(nt_min=2 * MiB)
    assert lib.cp_adapt_choose(1 * MiB, ffi.NULL) & 1 == T
    assert lib.cp_adapt_choose(4 * MiB, ffi.NULL) & 1 == S


def test_reset_forgets(learner):
    learner()
    sim = Sim()
    sim.warm(8 * MiB, 100)
    st = ffi.new("struct cp_adapt_stat *")
    assert lib.cp_adapt_stat(23, 1, st) == 1 and st.arm == T
    lib.cp_adapt_reset()
    assert lib.cp_adapt_stat(23, 1, st) == 0
    assert lib.cp_adapt_choose(8 * MiB, ffi.NULL) & 1 == S      # static again
    assert lib.cp_adapt_stat(-1, 0, st) == 0 and lib.cp_adapt_stat(64, 0, st) == 0


def test_size_classes_learn_apart(learner):
    learner()
    sim = Sim()
    for _ in range(300):
        sim.call(1 * MiB, 0x10000000, WARM)
        sim.call(16 * MiB, 0x20000000, (1 / 20.0, 1 / 30.0))    # streaming wins
    st = ffi.new("struct cp_adapt_stat *")
    assert lib.cp_adapt_stat(20, 1, st) == 1 and st.arm == T
    assert lib.cp_adapt_stat(24, 1, st) == 1 and st.arm == S


def test_recent_means_within_reuse_bytes(learner):
    """A pool larger than reuse_bytes walked in turn is not "recent"."""
    learner(reuse=32 * MiB)
    n = 16 * MiB
    for i in range(8):      # 4 buffers of 16 MiB: 64 MiB between reuses
        ticket = lib.cp_adapt_choose(n, ffi.cast("void *", 0x1000000 * (1 + i % 4)))
        assert ticket >> 1 & 1 == 0
    ticket = lib.cp_adapt_choose(n, ffi.cast("void *", 0x1000000 * 4))
    assert ticket >> 1 & 1 == 1     # cleared again right away


def test_api_table_is_the_functions():
    api = lib.cp_adapt_api()
    a = lib.cp_adapt_now_ns()
    assert api.now_ns() >= a
    saved = ffi.new("struct cp_adapt_params *")
    lib.cp_adapt_params(saved)
    try:
        p = ffi.new("struct cp_adapt_params *")
        lib.cp_adapt_defaults(p)
        p.lo, p.hi = MiB, 2 * MiB
        lib.cp_adapt_configure(p)
        assert api.choose(4 * KiB, ffi.NULL) == -1
        ticket = api.choose(MiB, ffi.NULL)
        assert ticket >= 0
        api.record(MiB, ticket, 20_000)
        st = ffi.new("struct cp_adapt_stat *")
        assert lib.cp_adapt_stat(20, 0, st) == 1 and st.samples[ticket & 1] == 1
    finally:
        lib.cp_adapt_configure(saved)


def test_threads_never_wait_and_never_break_it(learner):
    learner()
    errors = []

    def work(seed):
        try:
            sim = Sim(seed=seed)
            sim.warm(2 * MiB, 2000, addr=0x100000 * (seed + 1))
        except Exception as e:      # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    st = ffi.new("struct cp_adapt_stat *")
    assert lib.cp_adapt_stat(21, 1, st) == 1
    assert st.arm == T

