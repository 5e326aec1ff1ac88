"""The program benchmark's engine (clearpages/tools/programs.py): its workloads
leave the buffer as a program would, its verdict (the package's one rule,
measure.judge_rounds) marks a median below the goal a miss and a spread
across it both ways unmeasured, and ``bench --programs`` runs end to end
(tiny settings; no timing is asserted)."""

from __future__ import annotations

import math
import random
import statistics

import pytest

from clearpages.tools import measure as _measure, programs as _programs
from clearpages.tools.cli import main

np = pytest.importorskip("numpy")


def _after_step(workload: str, n: int) -> dict[str, bool]:
    """Run one step of workload with memset; what the buffer holds after."""
    with _measure.Buffer(n) as buf:
        place = _programs.Place(buf, n, _measure.WARM)
        s = place.take(1)[0]
        _programs._step(workload, _programs.clearer("libc"), n)(s)
        rows = s.u8.reshape(-1, _programs.ROW)
        got = {"prefix_written": bool((rows[:, :_programs.ROW // 2] == 1).all()),
               "rest_zero": not rows[:, _programs.ROW // 2:].any(),
               "all_zero": not s.u8.any(),
               "scattered": 0 < int(np.count_nonzero(s.u64))
               <= n // 4096 * _programs.SCATTER_PER_PAGE}
        del rows, s
        place.close()
    return got


@pytest.mark.parametrize("workload", _programs.WORKLOADS)
def test_each_workload_clears_and_uses_the_buffer(workload):
    got = _after_step(workload, 64 * 1024)
    if workload == _programs.PAD:
        assert got["prefix_written"] and got["rest_zero"]
    elif workload == _programs.SCRATCH:
        assert got["scattered"]
    else:
        assert got["all_zero"]      # pool and wipe end with the clear


@pytest.mark.parametrize("name", ["auto", "numpy.fill", "ctypes.memset", "libc"])
def test_every_kind_of_candidate_clears(name):
    n = 16 * 1024
    with _measure.Buffer(n) as buf:
        place = _programs.Place(buf, n, _measure.WARM)
        s = place.take(1)[0]
        _programs.clearer(name)(s)
        zero = not s.u8.any()
        del s
        place.close()
    assert zero


def test_unknown_names_are_refused():
    with pytest.raises(ValueError, match="unknown candidate"):
        _programs.clearer("nope")
    with pytest.raises(ValueError, match="unknown workload"):
        _programs.use("nope", 4096)


def test_goals_by_case():
    assert _programs.goal_for("pad", "cold") == _programs.GOAL_COLD_USED
    assert _programs.goal_for("pool", "cold") == _programs.GOAL
    assert _programs.goal_for("scratch", "warm") == _programs.GOAL
    assert _programs.goal_for("pad", "warm", _programs.HOT) == _programs.GOAL_HINT
    assert _programs.case_name("wipe", "warm") == "warm, clear only"
    assert _programs.case_name("scratch", "cold") == "cold, then used"


def test_a_median_below_the_goal_is_a_miss():
    judge = _measure.judge_rounds
    assert judge([0.91, 0.92, 0.90, 0.93, 0.91], 0.9).outcome == _measure.OK
    # most rounds short, the upper quartile above the goal: a miss all the same
    v = judge([0.80, 0.84, 0.85, 0.85, 0.95, 0.96, 0.97], 0.9)
    assert v.ratio == pytest.approx(0.85) and v.q3 >= 0.9
    assert v.outcome == _measure.MISS
    v = judge([0.80, 0.84, 0.93, 0.85, 0.86], 0.9)
    assert v.text() == "auto 0.85 of the best (goal 0.90; rounds 0.84-0.86): miss"


def test_a_spread_across_the_goal_both_ways_is_unmeasured():
    judge = _measure.judge_rounds
    # median 0.96, goal 0.97: the rounds reach 0.90 and 0.99, past the goal
    # and past its mirror image 0.95
    v = judge([0.90, 0.91, 0.96, 0.99, 0.99], 0.97, reference="the per-phase oracle")
    assert v.outcome == _measure.UNMEASURED and not v.ok
    assert v.text().endswith("unmeasured, retake")
    # the same median with the spread below it only: a miss
    assert judge([0.90, 0.91, 0.96, 0.965, 0.965], 0.97).outcome == _measure.MISS
    # above the goal, wide both ways: unmeasured too, not a pass
    assert judge([0.70, 0.80, 0.98, 1.10, 1.20], 0.97).outcome == _measure.UNMEASURED
    # above the goal, a long tail below only: the median decides
    assert judge([0.70, 0.80, 0.99, 0.995, 0.995], 0.97).outcome == _measure.OK
    # a tight measurement just below the goal is told from it
    assert judge([0.966, 0.965, 0.964, 0.965], 0.97).outcome == _measure.MISS
    # too few rounds to have a spread
    assert judge([1.5, 1.5], 0.9).outcome == _measure.UNMEASURED
    assert judge([], 0.9).outcome == _measure.UNMEASURED


def test_the_medians_bounds_close_in_as_rounds_are_added():
    bounds = _measure.median_bounds
    # 3 rounds: too few for 90% on either side; their extremes
    assert bounds([3.0, 1.0, 2.0]) == (1.0, 3.0)
    # 10 rounds: P(Binomial(10, 1/2) < 3) = 56/1024 <= 0.10 < P(< 4) = 176/1024
    assert bounds(list(range(10))) == (2, 7)
    assert bounds(list(range(7))) == (1, 5) and bounds(list(range(40))) == (15, 24)
    assert bounds([2.0]) == (2.0, 2.0)
    assert all(math.isnan(x) for x in bounds([]))
    # the rounds' order and non-finite rounds do not matter
    assert bounds([5, 1, 4, 2, 3, math.nan, 0, 6, 9, 8, 7]) == (2, 7)
    # the bounds hold at their confidence: over many draws of 15 rounds from
    # a known distribution, each misses the true median at most ~10% of the time
    rng = random.Random(7)
    low = high = 0
    for _ in range(2000):
        lo, hi = bounds([rng.gauss(1.0, 0.1) for _ in range(15)])
        low += lo > 1.0
        high += hi < 1.0
    assert low < 0.12 * 2000 and high < 0.12 * 2000


def _spread(n: int, centre: float, sd: float) -> list[float]:
    """n rounds spread as evenly as a normal distribution's quantiles."""
    q = statistics.NormalDist(centre, sd)
    return [q.inv_cdf((i + 0.5) / n) for i in range(n)]


def test_more_rounds_settle_a_spread_across_the_goal():
    judge = _measure.judge_rounds
    # median 0.955, goal 0.97: 5 rounds 0.90-1.01, unmeasured
    v = judge(_spread(5, 0.955, 0.045), 0.97)
    assert v.outcome == _measure.UNMEASURED and not v.pinned
    assert v.lo < 0.90 and v.hi > 1.0
    # 40 rounds as wide: the interquartile range still holds the goal and its
    # mirror, but the median's bounds (15th and 25th of 40) are below the goal
    v = judge(_spread(40, 0.955, 0.045), 0.97)
    assert v.q1 < 0.94 and v.q3 > 0.97
    assert v.hi < 0.97 and v.pinned and v.outcome == _measure.MISS
    # and above it: ok
    assert judge(_spread(5, 0.985, 0.045), 0.97).outcome == _measure.UNMEASURED
    v = judge(_spread(40, 0.985, 0.045), 0.97)
    assert v.lo >= 0.97 and v.pinned and v.outcome == _measure.OK
    assert v.to_json()["median_bounds"] == [v.lo, v.hi]


def _cell(times: dict[str, list[float]]) -> _programs.Cell:
    return _programs.Cell("pad", "warm", 4096, times, [n for n in times if n != "auto"])


def test_ratio_and_spread_from_synthetic_times():
    c = _cell({"auto": [2.0, 2.0, 4.0, 2.0], "a": [1.0, 1.0, 1.0, 1.0],
               "b": [3.0, 0.5, 3.0, 3.0]})
    assert c.best == "a"
    # per round: the best candidate's (by median) block over auto's
    assert c.round_ratios() == pytest.approx([0.5, 0.5, 0.25, 0.5])
    assert c.ratio() == pytest.approx(0.5)
    q1, q3 = c.spread()
    assert q1 <= c.ratio() <= q3
    assert c.verdict() == _measure.MISS


def test_bench_programs_end_to_end(capsys):
    rc = main(["bench", "--programs", "--sizes", "16K", "--repeat", "2",
               "--target-ms", "0.05", "--quiet"])
    out = capsys.readouterr().out
    assert rc == 0
    for w in _programs.WORKLOADS:
        assert w in out
    assert "goals:" in out and "warm, then used" in out
    assert "L3" in out          # the caches are named beside the figures


def test_bench_programs_refuses_other_selections(capsys):
    assert main(["bench", "--programs", "--methods", "libc"]) == 2
    assert "--programs" in capsys.readouterr().err
