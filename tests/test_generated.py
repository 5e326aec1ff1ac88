"""The program generator (clearpages/tools/generated.py) and the engine that
runs its programs (tools/phased.py): a seed draws the same programs, within
the stated ranges and bounds; the oracle and the goals over programs are
computed as documented, on synthetic times; a tiny run completes.  No timing
is asserted."""

from __future__ import annotations

import collections
import io
import json
import math
import re

import pytest

from clearpages.tools import generated as G, measure, phased
from clearpages.tools.cli import main

L3 = 32 << 20
SEEDS = range(300)


@pytest.fixture(scope="module")
def corpus() -> list[G.Program]:
    return [G.generate(s % 7, s, L3) for s in SEEDS]


def test_a_seed_draws_the_same_program():
    for i in range(20):
        assert G.generate(11, i, L3) == G.generate(11, i, L3)
    assert G.generate(11, 0, L3) != G.generate(12, 0, L3)
    assert G.generate(11, 0, L3) != G.generate(11, 1, L3)
    # the cache size scales the sizes, not the rest of the draw
    a, b = G.generate(11, 3, L3), G.generate(11, 3, 8 << 20)
    assert [p.place for p in a.phases] == [p.place for p in b.phases]


def test_a_program_survives_json():
    p = G.generate(3, 4, L3)
    assert G.Program.from_json(json.loads(json.dumps(p.to_json()))) == p


def test_sizes_and_lengths_within_their_ranges(corpus):
    lo, hi = G.size_range(L3)
    assert (lo, hi) == (4096, 4 * L3)
    sizes = [n for p in corpus for ph in p.phases for n in p.sizes(ph)]
    assert min(sizes) >= lo and max(sizes) <= hi
    assert all(n % 64 == 0 for n in sizes)
    # not only powers of two, and both ends of the range are reached
    assert sum(n & (n - 1) != 0 for n in sizes) > len(sizes) / 2
    assert min(sizes) < 16 * 1024 and max(sizes) > L3
    calls = [ph.calls for p in corpus for ph in p.phases]
    assert min(calls) >= G.CALLS[0] and max(calls) <= G.CALLS[1]
    assert min(calls) < 100 and max(calls) > 4000
    factors = [ph.factor for p in corpus for ph in p.phases]
    assert min(factors) == 0 and max(factors) <= G.MAX_FACTOR and max(factors) > 10
    small = G.size_range(4 << 20)
    assert small[1] == 16 << 20
    assert G.size_range(1 << 30)[1] == G.MAX_SIZE


def test_every_kind_appears(corpus):
    phases = [ph for p in corpus for ph in p.phases]
    assert {ph.place for ph in phases} == set(G.PLACES)
    assert {ph.work for ph in phases} == set(G.WORKS)
    assert {ph.foreign for ph in phases} == set(G.FOREIGNS) | {""}
    assert {ph.noise for ph in phases} >= {0.0, 1.0}
    several = [len(ph.buffers) for ph in phases if ph.place == G.SEVERAL]
    assert min(several) == 2 and max(several) == 4
    assert all(len(ph.buffers) == 2 for ph in phases if ph.place == G.THREADS)
    for p in corpus:
        for ph in p.phases:
            if ph.place == G.SEVERAL:
                sizes = p.sizes(ph)
                assert len(set(sizes)) > 1 or len(p.buffers) == 1
    # a program's buffer comes back in a later phase ("warm again")
    assert any(len({ph.buffers for ph in p.phases if ph.place == G.ONE})
               < sum(ph.place == G.ONE for ph in p.phases) for p in corpus)
    assert collections.Counter(len(p.phases) for p in corpus).keys() >= {2, 6}


def test_programs_are_bounded_in_memory_and_time(corpus):
    for p in corpus:
        assert p.private_bytes() <= G.PRIVATE_MAX
        assert all(i < len(p.buffers) for ph in p.phases for i in ph.buffers)
        assert G.estimate_s(p) <= G.SECONDS[1] * 1.5
        assert 1 <= p.passes <= G.MAX_PASSES
    est = sorted(G.estimate_s(p) for p in corpus)
    assert est[len(est) // 2] >= G.SECONDS[0]


def test_work_is_sized_from_the_factor():
    ph = G.Phase(G.ONE, 100, (0,), work=G.SUM, factor=2.0)
    n = 1 << 20
    w = G.step_work(ph, n)
    assert w.seconds == pytest.approx(2 * G.clear_s(n))
    assert w.cost_s(G.SUM, n) == pytest.approx(w.seconds + G.CALL_S, rel=0.01)
    none = G.Phase(G.ONE, 100, (0,))
    prog = G.Program("p", (n,), (none,))
    assert G.estimate_s(prog) == pytest.approx(100 * G.clear_s(n))
    assert G.estimate_s(G.Program("p", (n,), (ph,))) > 2.5 * G.estimate_s(prog)


def test_the_hand_written_cases():
    pool = 512 << 20
    wc = G.warm_cold(1 << 20, pool)
    assert [p.label for p in wc.phases] == ["warm", "cold", "warm again"]
    assert wc.phases[0].calls == wc.phases[2].calls == G.WARM_CALLS
    # three walks over the pool's 512 pages of 1 MiB
    assert wc.phases[1].calls == 3 * 512 and wc.phases[1].page == 1 << 20
    for kind in (G.WRITES, G.PAD):
        u = G.used(kind, 16 * 1024)
        assert [p.goal for p in u.phases] == [G.GOAL_CELL, G.GOAL_COLD_USED]
        assert [p.place for p in u.phases] == [G.ONE, G.WALK]
        assert all(p.calls <= G.USED_CALLS for p in u.phases)
    # 1/16 of the 8-byte words; half of each row
    assert G.step_work(G.used(G.WRITES, 1 << 20).phases[0], 1 << 20).words == (1 << 20) // 128
    assert G.step_work(G.used(G.PAD, 1 << 20).phases[0], 1 << 20).head == G.ROW // 2
    names = [p.name for p in G.cases(pool=pool)]
    assert len(names) == len(set(names)) == len(G.WARM_COLD_SIZES) + 2 * len(G.USED_SIZES)
    with pytest.raises(ValueError, match="unknown case"):
        G.cases(["nope"], pool=pool)


# ---- the engine's arithmetic, on synthetic times ----------------------------------


def _result(times: dict[str, list[list[float]]], phases: int = 2) -> phased.ProgramResult:
    prog = G.Program("t", (4096,), tuple(G.Phase(G.ONE, 50, (0,)) for _ in range(phases)))
    fixed = phased.fixed_names(list(times))
    return phased.ProgramResult(prog, times, fixed)


def test_the_oracle_takes_each_phases_fastest():
    # a is fastest on phase 0, b on phase 1; auto as fast as the oracle
    r = _result({"auto": [[1.0, 1.0]] * 5, "a": [[1.0, 3.0]] * 5, "b": [[3.0, 1.0]] * 5})
    assert r.reference(phased.ORACLE) == [2.0] * 5
    assert r.ratios("auto", phased.ORACLE) == [1.0] * 5
    assert r.ratios("auto", phased.BEST) == [2.0] * 5
    assert r.phase_best(0) == "a" and r.phase_best(1) == "b"
    assert r.judge("auto", phased.ORACLE, 0.97).outcome == measure.OK
    assert r.phase_ratios("a", 1) == [pytest.approx(1 / 3)] * 5


def test_the_roles_oracle_picks_between_the_two_roles_alone():
    times = {"auto": [[2.0, 2.0]] * 3, "t": [[1.0, 3.0]] * 3, "s": [[3.0, 2.0]] * 3,
             "other": [[0.5, 0.5]] * 3}
    r = _result(times)
    r.roles = ("t", "s")
    assert r.reference(phased.ROLES_ORACLE) == [3.0] * 3
    assert r.reference(phased.ORACLE) == [1.0] * 3


def test_a_rounds_own_noise_does_not_pick_its_best():
    # a's median over all rounds (0.9) beats b's (1.0) by its three lucky
    # rounds; each round's best is told by the other rounds: without its own
    # lucky round, a's median is 1.05 in rounds 0-2, so b is their best there
    a = [[0.9], [0.9], [0.9], [1.2], [1.2]]
    b = [[1.0]] * 5
    r = _result({"auto": [[1.0]] * 5, "a": a, "b": b}, phases=1)
    assert r.phase_best(0) == "a"
    assert r.reference(phased.ORACLE) == [1.0, 1.0, 1.0, 1.2, 1.2]
    assert r.reference(phased.BEST) == [1.0, 1.0, 1.0, 1.2, 1.2]


def test_goals_over_programs():
    good = _result({"auto": [[1.0, 1.0]] * 5, "a": [[1.0, 1.0]] * 5,
                    "numpy.fill": [[1.0, 1.0]] * 5, "ctypes.memset": [[2.0, 2.0]] * 5})
    bad = _result({"auto": [[2.0, 2.0]] * 5, "a": [[1.0, 1.0]] * 5,
                   "numpy.fill": [[1.5, 1.5]] * 5, "ctypes.memset": [[3.0, 3.0]] * 5})
    g = phased.goals([good, good, bad])
    fill, memset = g.rivals
    assert fill.outcome == measure.MISS and fill.count(measure.MISS) == 1
    assert fill.worst()[1].ratio == pytest.approx(0.75)
    assert memset.outcome == measure.OK
    assert g.median.ratio == pytest.approx(1.0) and g.median.outcome == measure.OK
    # the 10th percentile of (1, 1, 0.5), per round
    assert g.p10.ratio == pytest.approx(0.6) and g.p10.outcome == measure.MISS
    assert phased.percentile([1, 2, 3, 4, 5], 0.5) == 3
    assert phased.percentile([], 0.5) != phased.percentile([], 0.5)     # nan


def test_a_quantile_over_programs_takes_each_programs_median():
    """One slow round in each program, a different round in each: every
    program's ratio (its median over rounds) is 1.0, and so is the 10th
    percentile over them; each round's own 10th percentile would hold that
    round's slow program, and put it at 0.5."""
    rs = []
    for slow in range(5):
        auto = [[1.0, 1.0] if r != slow else [2.0, 2.0] for r in range(5)]
        rs += [_result({"auto": auto, "a": [[1.0, 1.0]] * 5}) for _ in range(2)]
    g = phased.goals(rs, rivals=())
    assert all(r.judge("auto", phased.ORACLE, 0.9).ratio == 1.0 for r in rs)
    assert g.p10.ratio == pytest.approx(1.0) and g.p10.outcome == measure.OK
    assert g.p10.spread == "programs resampled" and "programs resampled" in g.p10.text()
    # a retake's rounds (more in some programs than in others) do not count
    more = _result({"auto": [[0.5, 0.5]] * 3 + [[1.0, 1.0]] * 4, "a": [[1.0, 1.0]] * 7})
    lone = _result({"auto": [[0.5, 0.5]] * 3, "a": [[1.0, 1.0]] * 3})
    assert phased.goals([more, lone], rivals=()).median.ratio == pytest.approx(2.0)
    # the spread: how the quantile moves as the programs are drawn again
    spread = [_result({"auto": [[1.0 / x, 1.0 / x]] * 3, "a": [[1.0, 1.0]] * 3})
              for x in (0.6, 0.7, 0.8, 0.9, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0)]
    v = phased.goals(spread, rivals=()).p10
    assert v.ratio == pytest.approx(0.69)
    assert 0.6 <= v.q1 < v.q3 < 1.0 and v.q1 <= v.ratio <= v.q3


def test_the_twin_measures_the_runs_own_noise():
    """numpy.fill timed twice is judged against itself by the rules auto is
    judged by, and is a choice of neither the oracle nor the best."""
    same = _result({"auto": [[1.0, 1.0]] * 5, "a": [[1.0, 1.0]] * 5,
                    "numpy.fill": [[1.0, 1.0]] * 5, phased.TWIN: [[1.0, 1.0]] * 5})
    slow = _result({"auto": [[1.0, 1.0]] * 5, "a": [[1.0, 1.0]] * 5,
                    "numpy.fill": [[1.0, 1.0]] * 5, phased.TWIN: [[1.25, 1.25]] * 5})
    assert phased.TWIN not in same.fixed and same.fixed == ["a", "numpy.fill"]
    # faster than everything, the twin still is not the oracle
    fast = _result({"auto": [[1.0, 1.0]] * 5, "numpy.fill": [[1.0, 1.0]] * 5,
                    phased.TWIN: [[0.5, 0.5]] * 5})
    assert fast.reference(phased.ORACLE) == [2.0] * 5
    g = phased.noise([same, same, slow])
    assert g is not None and g.name == phased.TWIN
    (every,) = g.rivals
    assert every.ref == "numpy.fill" and every.count(measure.MISS) == 1
    assert every.worst()[1].ratio == pytest.approx(0.8)
    assert g.median.ratio == pytest.approx(1.0) and g.median.outcome == measure.OK
    assert g.p10.ratio == pytest.approx(0.84) and g.p10.outcome == measure.MISS
    assert phased.noise([_result({"auto": [[1.0, 1.0]] * 5, "numpy.fill": [[1.0, 1.0]] * 5})]) \
        is None
    assert phased.TWIN in phased.candidate_names() and phased.TWIN in phased.candidate_names(True)


def test_a_program_in_doubt_is_one_whose_verdict_against_a_rival_is_not_pinned():
    even = {"auto": [[1.0, 1.0]] * 5, "a": [[1.0, 1.0]] * 5,
            "numpy.fill": [[1.0, 1.0]] * 5, "ctypes.memset": [[1.0, 1.0]] * 5,
            phased.TWIN: [[1.0, 1.0]] * 5}
    assert not phased.doubtful(_result(even))
    # auto slower than either rival, or the twin slower than numpy.fill, in
    # some rounds and not in others: a median either side of the goal
    for name, ref in [("auto", "numpy.fill"), ("auto", "ctypes.memset"),
                      (phased.TWIN, "numpy.fill")]:
        times = dict(even, **{name: [[1.1, 1.1]] * 3 + [[1.0, 1.0]] * 2})
        assert phased.doubtful(_result(times)), (name, ref)
        # slower in every round by as much: a miss the rounds pin, decided
        times = dict(even, **{name: [[1.1, 1.1]] * 5})
        v = _result(times).judge(name, ref, phased.GOAL_RIVAL)
        assert v.outcome == measure.MISS and v.pinned
        assert not phased.doubtful(_result(times)), (name, ref)
    # slower than the oracle only: not a rival's verdict
    assert not phased.doubtful(_result(dict(even, a=[[0.5, 0.5]] * 5)))
    # rounds on both sides of the goal: unmeasured, in doubt too
    spread = [[x, x] for x in (0.7, 0.8, 1.0, 1.2, 1.3)]
    assert phased.doubtful(_result(dict(even, auto=spread)))
    # too few rounds to judge
    assert phased.doubtful(_result({k: v[:2] for k, v in even.items()}))
    # a median above the goal that the rounds do not pin there is in doubt as
    # much as one below it: auto's rounds 0.93-1.03 of numpy.fill, median 0.98
    near = [[1 / x, 1 / x] for x in (0.93, 0.96, 0.98, 1.0, 1.03)]
    v = _result(dict(even, auto=near)).judge("auto", "numpy.fill", phased.GOAL_RIVAL)
    assert v.outcome == measure.OK and not v.pinned
    assert phased.doubtful(_result(dict(even, auto=near)))
    # the same spread over many rounds pins the median: no longer in doubt
    assert not phased.doubtful(_result(dict({k: v * 8 for k, v in even.items()},
                                            auto=near * 8)))
    # the twin, which judges nothing, is retaken only below the goal: the
    # same rounds as auto's above are no doubt of its
    twin = _result(dict(even, **{phased.TWIN: near}))
    assert not twin.judge(phased.TWIN, "numpy.fill", phased.GOAL_RIVAL).pinned
    assert not phased.doubtful(twin)


def test_a_case_in_doubt_is_one_whose_phase_cell_is_not_pinned():
    # auto as fast as the phase's best in every round: pinned, ok
    even = {"auto": [[1.0, 1.0]] * 5, "a": [[1.0, 1.0]] * 5}
    assert not phased.cells_doubtful(_result(even))
    # phase 1 at 0.89 of the best in 3 rounds, 1.00 in 2: a miss by its
    # median whose bounds hold the goal (0.90), in doubt
    near = dict(even, auto=[[1.0, 1.0 / 0.89]] * 3 + [[1.0, 1.0]] * 2)
    v = _result(near).judge_phase("auto", 1)
    assert v.outcome == measure.MISS and not v.pinned
    assert phased.cells_doubtful(_result(near))
    # ... and its mirror, 1.00 in 3 rounds and 0.89 in 2: ok, in doubt all the same
    mirror = dict(even, auto=[[1.0, 1.0]] * 3 + [[1.0, 1.0 / 0.89]] * 2)
    assert _result(mirror).judge_phase("auto", 1).outcome == measure.OK
    assert phased.cells_doubtful(_result(mirror))
    # at 0.8 in every round: a miss the rounds pin, decided
    far = dict(even, auto=[[1.0, 1.25]] * 5)
    assert _result(far).judge_phase("auto", 1).pinned
    assert not phased.cells_doubtful(_result(far))


def test_the_cases_are_retaken_as_generated_programs_are(monkeypatch, capsys):
    seen = {}

    def run(programs, names, **kw):
        seen.update(kw, programs=programs)
        return []
    monkeypatch.setattr(phased, "run", run)
    assert main(["bench", "--programs", "--cases", "--sizes", "16K", "--retake", "2",
                 "--quiet"]) == 0
    assert "--cases" in capsys.readouterr().out
    assert seen["retake"] == 2 and seen["retake_most"] == phased.RETAKE_MOST
    # a case (no seed) is judged by its cells, a generated program by its rivals
    case = seen["programs"][0]
    assert case.seed is None
    even = {"auto": [[1.0] * len(case.phases)] * 5, "a": [[1.0] * len(case.phases)] * 5}
    res = phased.ProgramResult(case, even, ["a"])
    assert seen["doubtful"](res) is False
    res = phased.ProgramResult(case, dict(even, auto=[[1.0] * len(case.phases)] * 3
                                          + [[1.12] * len(case.phases)] * 2), ["a"])
    assert seen["doubtful"](res) is True


def test_a_retake_adds_rounds_to_the_programs_in_doubt():
    pytest.importorskip("numpy")            # the program benchmark's programs use it
    progs = [G.Program("p%d" % i, (8192,), (G.Phase(G.ONE, 3, (0,)),)) for i in range(2)]
    names = ["auto", "libc", "numpy.fill"]
    asked = []

    def doubtful(r):
        asked.append((r.program.name, r.rounds, r.retaken))
        return r.program.name == "p1"
    shown = []
    res = phased.run(progs, names, rounds=2, pool_bytes=1 << 20, retake=3,
                     doubtful=doubtful, progress=lambda *a: shown.append(a))
    assert asked == [("p0", 2, 0), ("p1", 2, 0)]
    # the retake's rounds are counted in the progress as they become known
    assert len(shown) == 2 + 2 + 3 and shown[-1][0] == shown[-1][1]
    assert [w for _, _, w in shown].count("p1 (2/2), retaken: round 3 of 3") == 1
    assert [(r.rounds, r.retaken) for r in res] == [(2, 0), (5, 3)]
    assert all(len(v) == 5 for v in res[1].times.values())
    assert all(len(v) == 5 for v in res[1].other.values())
    first = res[1].first()
    assert (first.rounds, first.retaken) == (2, 0)
    assert first.times == {k: v[:2] for k, v in res[1].times.items()}
    assert res[0].first() is res[0]
    back = phased.from_json(json.loads(json.dumps(phased.to_json(res, {}))))
    assert [r.retaken for r in back] == [0, 3]
    # retaken again while in doubt, up to retake_most rounds in all
    asked.clear()
    res = phased.run(progs[1:], names, rounds=2, pool_bytes=1 << 20, retake=2,
                     doubtful=doubtful, retake_most=7)
    assert asked == [("p1", 2, 0), ("p1", 4, 2), ("p1", 6, 4)]
    assert [(r.rounds, r.retaken) for r in res] == [(7, 5)]
    assert all(len(v) == 7 for v in res[0].times.values())
    # and no more once it is out of doubt
    asked.clear()
    res = phased.run(progs[1:], names, rounds=2, pool_bytes=1 << 20, retake=2,
                     doubtful=lambda r: doubtful(r) and r.rounds < 4, retake_most=9)
    assert asked == [("p1", 2, 0), ("p1", 4, 2)] and res[0].rounds == 4
    # no retake asked for: nothing asked, nothing added
    asked.clear()
    res = phased.run(progs, names, rounds=1, pool_bytes=1 << 20, doubtful=doubtful)
    assert asked == [] and [r.rounds for r in res] == [1, 1]


def test_size_bands_and_use_bands():
    l2, l3 = 1 << 20, 32 << 20
    assert phased.size_band(4096, l2, l3) == "<16K"
    assert phased.size_band(64 << 10, l2, l3) == "<L2/8"
    assert phased.size_band(512 << 10, l2, l3) == "<L2"
    assert phased.size_band(4 << 20, l2, l3) == "<L3/4"
    assert phased.size_band(16 << 20, l2, l3) == "<L3"
    assert phased.size_band(64 << 20, l2, l3) == ">=L3"
    assert phased.use_band(None) == "?" and phased.use_band(0.0) == "none"
    assert phased.use_band(0.5) == "<1x" and phased.use_band(math.inf) == ">=5x"


# ---- running ----------------------------------------------------------------------


def test_every_place_and_work_runs_and_clears():
    """One tiny program of every place and work, every kind of candidate."""
    np = pytest.importorskip("numpy")
    n = 8192
    phases = tuple(G.Phase(place, 3, buffers, page, work, 1.0, 0.5, True,
                           G.FOREIGNS[i % len(G.FOREIGNS)], 2, seed=i)
                   for i, (place, buffers, page, work) in enumerate([
                       (G.ONE, (0,), 0, G.WRITES), (G.WALK, (), n, G.PAD),
                       (G.SEVERAL, (0, 1), 0, G.SUM), (G.HOT_POOL, (1,), n, G.READ),
                       (G.THREADS, (0, 1), 0, G.SLEEP), (G.ONE, (1,), 0, G.MIXED)]))
    prog = G.Program("tiny", (n, 2 * n), phases, 2, other=64 << 10, foreign=4096)
    names = ["auto", "auto carried", "auto static", "libc", "numpy.fill",
             "ctypes.memset", "work only"]
    seen = []
    res = phased.run([prog], names, rounds=1, pool_bytes=1 << 20,
                     done=lambda so_far: seen.append(len(so_far)))
    assert seen == [1]
    assert set(res[0].times) == set(res[0].other) == set(names)
    assert res[0].clock == phased.CPU and len(res[0].roles) == 2
    assert all(len(t) == 1 and len(t[0]) == len(phases) and min(t[0]) > 0
               for t in res[0].other.values())
    back = phased.from_json(json.loads(json.dumps(phased.to_json(res, {}))))[0]
    assert (back.times, back.other, back.roles, back.clock) == (
        res[0].times, res[0].other, res[0].roles, res[0].clock)
    with pytest.raises(ValueError, match="clock"):
        phased.run([prog], names, rounds=1, pool_bytes=1 << 20, clock="sundial")
    assert all(len(t) == 1 and len(t[0]) == len(phases) and min(t[0]) > 0
               for t in res[0].times.values())
    assert res[0].fixed == ["libc", "numpy.fill", "ctypes.memset"]
    # a cleared buffer read as zero after each kind of clear
    pool = phased.Pool(1 << 20, L3)
    try:
        run = phased.Running(G.Program("z", (n,), (G.Phase(G.ONE, 1, (0,)),)), pool)
        for name in names[:-1]:
            run.slots[0].u8[:] = 1
            phased.run_once(run, phased.candidate(name))
            assert not run.slots[0].u8.any(), name
        run.close()
    finally:
        pool.close()
    assert np is not None


def test_the_command_line_runs_a_tiny_corpus(tmp_path, capsys, monkeypatch):
    pytest.importorskip("numpy")            # the program benchmark's programs use it
    monkeypatch.setattr(phased, "RETAKE_MOST", 3)
    out = tmp_path / "g.json"
    rc = main(["bench", "--programs", "--generated", "2", "--seed", "5", "--rounds", "1",
               "--quick", "--quiet", "--sizes", "4K", "16K", "--target-ms", "20",
               "--retake", "1", "--json", str(out)])
    text = capsys.readouterr().out
    assert rc == 0
    assert "--generated 2 --seed 5" in text and "L3" in text
    assert "per-phase oracle" in text and "numpy.fill" in text
    assert re.search(r"CPU\s+time", text)
    data = json.loads(out.read_text())
    assert data["settings"]["seed"] == 5 and len(data["programs"]) == 2
    again = phased.from_json(data)
    assert [r.program for r in again] == G.corpus(5, 2, sizes=(4096, 16384),
                                                  seconds=(0.004, 0.02))
    assert data["settings"]["clock"] == "cpu"
    buf = io.StringIO()
    phased.report_generated(again, buf)
    assert max(len(line) for line in buf.getvalue().splitlines()) <= 80
    assert "phases where auto does worst" in buf.getvalue()
    assert "the run's own noise" in buf.getvalue() and phased.TWIN in buf.getvalue()
    assert data["goals"]["noise"]["name"] == phased.TWIN
    # one round, then two, are too few to judge: every program is in doubt
    # and retaken, one round at a time, up to RETAKE_MOST rounds
    assert "--retake 1" in text and data["settings"]["retake"] == 1
    assert data["settings"]["retake_most"] == 3
    assert [r.retaken for r in again] == [2, 2] and [r.rounds for r in again] == [3, 3]
    assert "retaken: 2 of 2 programs" in buf.getvalue()
    assert "(3 rounds: 2)" in " ".join(buf.getvalue().split())


def test_the_json_is_kept_as_each_program_ends(tmp_path, monkeypatch):
    pytest.importorskip("numpy")            # the program benchmark's programs use it
    out = tmp_path / "g.json"
    written = []
    real = phased.run

    def run(*a, **kw):
        def done(so_far):
            kw["done"](so_far)
            written.append(len(json.loads(out.read_text())["programs"]))
        return real(*a, **{**kw, "done": done})
    monkeypatch.setattr(phased, "run", run)
    assert main(["bench", "--programs", "--generated", "2", "--seed", "5", "--rounds", "1",
                 "--quick", "--quiet", "--retake", "0", "--sizes", "4K", "--target-ms", "5",
                 "--clock", "wall", "--json", str(out)]) == 0
    assert written == [1, 2]
    assert json.loads(out.read_text())["settings"]["clock"] == "wall"


def test_the_seed_is_drawn_and_printed(capsys):
    pytest.importorskip("numpy")            # the program benchmark's programs use it
    rc = main(["bench", "--programs", "--generated", "1", "--rounds", "1", "--quick",
               "--quiet", "--retake", "0", "--sizes", "4K", "--target-ms", "5"])
    assert rc == 0
    assert " --seed " in capsys.readouterr().out


@pytest.mark.parametrize("argv", [
    ["bench", "--generated", "3"],
    ["bench", "--programs", "--seed", "3"],
    ["bench", "--programs", "--generated", "0"],
    ["bench", "--programs", "--generated", "2", "--seed", "-1"],
    ["bench", "--programs", "--generated", "2", "--methods", "libc"],
    ["bench", "--programs", "--retake", "2"],
    ["bench", "--retake", "2"],
    ["bench", "--programs", "--generated", "2", "--retake", "-1"],
    ["bench", "--resume", "run.json"],
    ["bench", "--programs", "--resume", "run.json", "--seed", "3"],
    ["bench", "--programs", "--resume", "run.json", "--rounds", "3"],
    ["bench", "--programs", "--resume", "run.json", "--json", "other.json"],
    ["bench", "--programs", "--resume", "missing.json"],
])
def test_flags_that_do_not_go_together_are_refused(argv, capsys):
    assert main(argv) == 2
    assert "error" in capsys.readouterr().err


TINY = ["bench", "--programs", "--generated", "3", "--seed", "5", "--rounds", "1", "--quick",
        "--quiet", "--retake", "0", "--sizes", "4K", "16K", "--target-ms", "5"]


def _stopped_after_one(tmp_path):
    """A tiny run's JSON as a run stopped after its first program leaves it."""
    out = tmp_path / "run.json"
    assert main(TINY + ["--json", str(out)]) == 0
    data = json.loads(out.read_text())
    whole = data["programs"]
    data["programs"] = whole[:1]
    del data["goals"]
    out.write_text(json.dumps(data))
    return out, data, whole


def test_a_stopped_run_resumes_where_it_stopped(tmp_path, monkeypatch, capsys):
    pytest.importorskip("numpy")            # the program benchmark's programs use it
    out, data, whole = _stopped_after_one(tmp_path)
    ran = []
    real = phased.run

    def run(programs, *a, **kw):
        ran.append([p.name for p in programs])
        return real(programs, *a, **kw)
    monkeypatch.setattr(phased, "run", run)
    capsys.readouterr()
    assert main(["bench", "--programs", "--resume", str(out), "--quiet"]) == 0
    text = capsys.readouterr().out
    assert "resumed: 1 programs kept" in text and "per-phase oracle" in text
    # only the programs it had not finished ran, and the file holds all three
    assert ran == [[p["program"]["name"] for p in whole[1:]]]
    back = json.loads(out.read_text())
    assert [p["program"] for p in back["programs"]] == [p["program"] for p in whole]
    assert back["programs"][0]["times"] == data["programs"][0]["times"]
    assert back["settings"]["resumed"][0]["kept"] == 1
    assert back["settings"]["command"] == data["settings"]["command"]
    assert back["goals"]["auto"]["rivals"]
    # a finished run resumes to its verdict, running nothing
    ran.clear()
    assert main(["bench", "--programs", "--resume", str(out), "--quiet"]) == 0
    assert ran == [[]] and len(json.loads(out.read_text())["programs"]) == 3


@pytest.mark.parametrize("change, says", [
    (lambda d: d["settings"]["code"].update(digest="0" * 16), "the code"),
    (lambda d: d["settings"]["code"]["environment"].update(CLEARPAGES_ADAPT="0"), "the code"),
    (lambda d: d["machine"]["cpu"].update(model=d["machine"]["cpu"]["model"] + 1), "the CPU"),
    (lambda d: d["settings"].update(cold_pool=d["settings"]["cold_pool"] * 2), "cold pool"),
    (lambda d: d["programs"][0]["program"]["phases"][0].update(calls=7), "does not draw"),
    (lambda d: d["settings"].pop("drawn"), "cannot be resumed"),
])
def test_a_run_measured_otherwise_is_not_resumed(tmp_path, capsys, change, says):
    pytest.importorskip("numpy")            # the program benchmark's programs use it
    out, data, _ = _stopped_after_one(tmp_path)
    change(data)
    out.write_text(json.dumps(data))
    capsys.readouterr()
    assert main(["bench", "--programs", "--resume", str(out), "--quiet"]) == 2
    assert says in capsys.readouterr().err
    # the file is left as it was
    assert json.loads(out.read_text()) == data


@pytest.mark.parametrize("extra", [[], ["--seed", "3", "--cases"],
                                   ["--seed", "3", "--json", "x.json"]])
def test_the_replay_of_some_programs_asks_for_their_seed_alone(extra, tmp_path):
    """bench/bench_generated.py --only I ...: programs of a given seed, in
    one process; without --seed, or with --cases or --json, it refuses
    (exit status 2, a line saying why) before it measures anything."""
    import pathlib
    import subprocess
    import sys

    script = pathlib.Path(__file__).resolve().parent.parent / "bench" / "bench_generated.py"
    r = subprocess.run([sys.executable, str(script), "--only", "3"] + extra,
                       capture_output=True, text=True, cwd=tmp_path, timeout=120)
    assert r.returncode == 2, r.stderr
    assert "--only replays programs of a given --seed" in r.stderr
