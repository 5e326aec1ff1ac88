"""The program benchmark's engine (clearpages/tools/programs.py): its workloads
leave the buffer as a program would, its verdict marks a miss only beyond
the spread, and ``bench --programs`` runs end to end (tiny settings; no
timing is asserted)."""

from __future__ import annotations

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
    assert _programs.goal_for("pad", "warm", _programs.HOT) == _programs.GOAL_WORD
    assert _programs.case_name("wipe", "warm") == "warm, clear only"
    assert _programs.case_name("scratch", "cold") == "cold, then used"


def test_a_miss_only_beyond_the_spread():
    assert _programs.verdict(0.91, (0.80, 0.95), 0.9) == "ok"
    assert _programs.verdict(0.85, (0.80, 0.92), 0.9) == "noise"
    assert _programs.verdict(0.85, (0.80, 0.88), 0.9) == "MISS"


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
    assert c.verdict() == "MISS"


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
