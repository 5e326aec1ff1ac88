"""The calibration file: written, read back, and distrusted when it should be;
the choice of thresholds from measurements; a tiny real calibration."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import random
import warnings

import pytest

import clearpages as cp
from clearpages import _calibration as cal, _dispatch, _policy
from clearpages._policy import KiB, MiB
from clearpages._routines import BY_NAME
from clearpages.tools import calibrate as _calibrate, measure as _measure

STREAMING = [m for m in cp.methods() if not BY_NAME[m].temporal]


@pytest.fixture(autouse=True)
def private_cache(tmp_path, monkeypatch):
    """Never read or write the user's own cache directory."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    return tmp_path / "xdg"


@pytest.fixture
def here():
    st = _dispatch.state()
    return st.cpu, st.methods, _policy.default_thresholds(st.cpu, st.built)


@contextlib.contextmanager
def _no_warnings():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        yield


def _changed(default: _policy.Thresholds) -> _policy.Thresholds:
    """Thresholds that differ from the default in every field that can."""
    streaming = STREAMING[-1] if STREAMING else default.streaming
    return dataclasses.replace(default, vector_max=4 * KiB, nt_min=3 * MiB,
                               temporal="rep_stosq" if "rep_stosq" in cp.methods() else "libc",
                               streaming=streaming, thread_min=5 * MiB, max_threads=1,
                               why=tuple((k, "measured: test %s" % k) for k in cal.FIELDS))


def _write(path, **changes):
    data = json.loads(path.read_text())
    for key, value in changes.items():
        if key in cal.FIELDS:
            data["thresholds"][key] = value
        else:
            data[key] = value
    path.write_text(json.dumps(data))


def test_roundtrip(tmp_path, here):
    cpu, methods, default = here
    th = _changed(default)
    path = cal.save(tmp_path / "p.json", cpu, th)
    with _no_warnings():
        got = cal.load(cpu, methods, str(path), default)
    assert got is not None and got.path == path
    for k in cal.FIELDS:
        assert getattr(got.thresholds, k) == getattr(th, k), k
        assert got.thresholds.reason(k) == "measured: test %s" % k
    assert got.thresholds.source == "calibration: %s" % path
    assert got.thresholds.chunk == default.chunk


def test_default_path_is_in_xdg_cache_and_keyed_by_cpu(here, private_cache):
    cpu, methods, default = here
    path = cal.default_path(cpu)
    assert path.parent == private_cache / "clearpages"
    other = dataclasses.replace(cpu, model=cpu.model + 1)
    assert cal.default_path(other) != path
    with _no_warnings():
        assert cal.load(cpu, methods, None, default) is None      # none yet: silent
    cal.save(path, cpu, _changed(default))
    got = cal.load(cpu, methods, None, default)
    assert got is not None and got.path == path


def test_relative_xdg_cache_home_is_ignored(monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_CACHE_HOME", "relative/dir")
    monkeypatch.setenv("HOME", str(tmp_path))
    assert cal.cache_dir() == tmp_path / ".cache" / "clearpages"


def test_off_reads_nothing(here):
    cpu, methods, default = here
    cal.save(cal.default_path(cpu), cpu, _changed(default))
    assert cal.load(cpu, methods, "off", default) is None


def test_named_file_missing_is_an_error_naming_the_variable(tmp_path, here):
    cpu, methods, default = here
    missing = tmp_path / "nope.json"
    with pytest.raises(cp.ConfigError, match=r"CLEARPAGES_CALIBRATION=.*nope.json names no file"):
        cal.load(cpu, methods, str(missing), default)


def test_a_warning_about_the_file_points_at_the_callers_line(tmp_path, config):
    path = tmp_path / "bad.json"
    path.write_text("{not json")
    with pytest.warns(cal.CalibrationWarning) as got:
        config({"CLEARPAGES_CALIBRATION": str(path)})
    assert got[0].filename == __file__


@pytest.mark.parametrize("text,why", [
    ("{not json", "corrupt"),
    ("[1, 2]", "corrupt"),
    ("", "corrupt"),
])
def test_unparsable_file_is_ignored(tmp_path, here, text, why):
    cpu, methods, default = here
    path = tmp_path / "bad.json"
    path.write_text(text)
    with pytest.warns(cal.CalibrationWarning, match="bad.json.*%s" % why):
        assert cal.load(cpu, methods, str(path), default) is None


@pytest.mark.parametrize("changes,why", [
    ({"nt_min": -1}, "nt_min"),
    ({"vector_max": "2K"}, "vector_max"),
    ({"thread_min": True}, "thread_min"),
    ({"thread_min": 0}, "thread_min"),
    ({"max_threads": 1 << 70}, "max_threads"),
    ({"streaming": "warp_drive"}, "streaming names no routine"),
    ({"temporal": "movnti"}, "a streaming routine"),
    ({"thresholds": None}, "thresholds"),
])
def test_bad_values_are_never_trusted(tmp_path, here, changes, why):
    cpu, methods, default = here
    path = cal.save(tmp_path / "p.json", cpu, _changed(default))
    _write(path, **changes)
    with pytest.warns(cal.CalibrationWarning, match="p.json.*corrupt.*%s" % why):
        assert cal.load(cpu, methods, str(path), default) is None


def test_foreign_cpu_is_ignored(tmp_path, here):
    cpu, methods, default = here
    other = dataclasses.replace(cpu, model=cpu.model + 1, l3=cpu.l3 * 2 + 1)
    path = cal.save(tmp_path / "p.json", other, _changed(default))
    with pytest.warns(cal.CalibrationWarning, match="p.json.*another CPU.*model"):
        assert cal.load(cpu, methods, str(path), default) is None
    _write(path, cpu="someone else")
    with pytest.warns(cal.CalibrationWarning, match="another CPU"):
        assert cal.load(cpu, methods, str(path), default) is None


def test_stale_format_is_ignored(tmp_path, here):
    cpu, methods, default = here
    path = cal.save(tmp_path / "p.json", cpu, _changed(default))
    _write(path, format=cal.FORMAT - 1)
    with pytest.warns(cal.CalibrationWarning, match="p.json.*stale format"):
        assert cal.load(cpu, methods, str(path), default) is None
    _write(path, format=None)
    with pytest.warns(cal.CalibrationWarning, match="stale format"):
        assert cal.load(cpu, methods, str(path), default) is None


def test_routine_this_cpu_cannot_run_falls_back(tmp_path, here):
    cpu, _, default = here
    th = dataclasses.replace(default, streaming="clzero", temporal="rep_stosq", long="",
                             nt_min=3 * MiB, why=(("nt_min", "measured: x"),))
    path = cal.save(tmp_path / "p.json", cpu, th)
    methods = ("libc", "rep_stosq", default.streaming)
    with pytest.warns(cal.CalibrationWarning, match="p.json.*streaming=clzero"):
        got = cal.load(cpu, methods, str(path), default)
    assert got is not None
    assert got.thresholds.streaming == default.streaming
    assert got.thresholds.temporal == "rep_stosq"
    assert got.thresholds.nt_min == 3 * MiB


def test_identity_ignores_clearpages_disable(here):
    cpu = here[0]
    if not cpu.features:
        pytest.skip("this CPU reports no features to mask")
    masked = cpu.without(frozenset(sorted(cpu.features)[:1]))
    assert cal.identity(masked) == cal.identity(cpu)
    assert cal.default_path(masked) == cal.default_path(cpu)


# ---- through the package: CLEARPAGES_CALIBRATION and plan() -----------------


@pytest.mark.skipif(not STREAMING, reason="no streaming routine in this build")
def test_calibrated_threshold_changes_plan(tmp_path, here, config):
    cpu, _, default = here
    # The CPU as this process sees it: keep CLEARPAGES_DISABLE in effect.
    mask = {k: v for k, v in os.environ.items() if k == "CLEARPAGES_DISABLE"}
    # A size the default streams; the calibrated file moves the crossover
    # above it, so the plan turns temporal and says the threshold was measured.
    size = max(4 * default.nt_min, 64 * KiB)
    config({**mask, "CLEARPAGES_CALIBRATION": "off"})
    before = cp.plan(size, threads=1)
    assert before.method == default.streaming
    nt = 4 * size
    th = dataclasses.replace(default, nt_min=nt, why=(("nt_min", "measured: test"),))
    path = cal.save(tmp_path / "p.json", cpu, th)

    config({**mask, "CLEARPAGES_CALIBRATION": str(path)})
    assert cp.thresholds().source == "calibration: %s" % path
    assert cp.thresholds().nt_min == nt
    after = cp.plan(size, threads=1)
    assert after.method != before.method
    assert "measured: test" in " ".join(after.evidence)   # the reason's evidence
    assert _dispatch.state().calibration.path == path

    # The environment variable still has the last word on nt_min.
    config({**mask, "CLEARPAGES_CALIBRATION": str(path),
            "CLEARPAGES_NT_THRESHOLD": str(default.nt_min)})
    assert cp.plan(size, threads=1).method == before.method

    config({**mask, "CLEARPAGES_CALIBRATION": "off"})
    assert cp.thresholds().source == "default"
    assert cp.plan(size, threads=1).method == before.method


def test_default_file_is_picked_up_on_reload(here, config):
    cpu, _, default = here
    th = dataclasses.replace(default, thread_min=3 * MiB, why=(("thread_min", "measured: t"),))
    cal.save(cal.default_path(cpu), cpu, th)
    config({})
    assert cp.thresholds().thread_min == 3 * MiB
    assert cp.thresholds().source.startswith("calibration: ")


def test_disabled_feature_in_file_is_not_used(tmp_path, here, config):
    cpu, _, default = here
    if "avx512_nt" not in cp.methods():
        pytest.skip("needs avx512_nt on this machine to mask it")
    th = dataclasses.replace(default, streaming="avx512_nt")
    path = cal.save(tmp_path / "p.json", cpu, th)
    with pytest.warns(cal.CalibrationWarning, match="avx512_nt cannot run here"):
        config({"CLEARPAGES_CALIBRATION": str(path), "CLEARPAGES_DISABLE": "avx512f"})
    assert cp.thresholds().streaming != "avx512_nt"
    assert "avx512_nt" not in cp.methods()


def test_corrupt_default_file_warns_at_reload(here, config):
    cpu = here[0]
    path = cal.default_path(cpu)
    path.parent.mkdir(parents=True)
    path.write_text("{\"format\": 1, ")
    with pytest.warns(cal.CalibrationWarning, match="corrupt"):
        config({})
    assert cp.thresholds().source == "default"
    path.unlink()


# ---- choosing thresholds from measurements ------------------------------------


def _m(name: str, size: int, gbps: float, spread: float = 0.01,
       scenario: str = "warm") -> _measure.Measurement:
    t = size / (gbps * 1e9)
    return _measure.Measurement(name, "routine", size, 1,
                                [t * (1 - spread), t, t * (1 + spread)], scenario)


SIZES = [1 << k for k in range(9, 29)]     # 512 B .. 256 MiB


def _synthetic_cpu():
    return cp.CPU(vendor="GenuineIntel", family=6, model=1, brand="test",
                       features=frozenset({"erms", "avx2", "sse2", "avx512f"}),
                       l1d=32 * KiB, l2=1 * MiB, l3=32 * MiB, cores=4, is_x86=True)


METHODS = ("rep_stosb", "rep_stosq", "mov_loop", "movnti", "avx2_nt", "avx512_nt", "libc")
BUILT = frozenset(METHODS)


def _table(speed, scenarios=("warm", "cold")):
    """speed(method, size, scenario) -> GB/s, as calibrate measures it."""
    return {s: {sc: {m: _m(m, s, speed(m, s, sc), scenario=sc) for m in METHODS}
                for sc in scenarios} for s in SIZES}


def _score(cases, name):
    return min(row[name].median / max(x.median for x in row.values())
               for row in cases.values())


def test_select_finds_the_worse_case_crossover():
    """Temporal stores win warm by 1.5x, streaming stores win cold by 3x from
    256 KiB: the worse case moves the crossover there, whatever the default."""
    cpu = _synthetic_cpu()
    default = _policy.default_thresholds(cpu, BUILT)
    assert default.nt_min != 256 * KiB

    def speed(m, s, sc):
        if not BY_NAME[m].temporal:
            return 20.0 if m == "avx2_nt" else 18.0
        base = {"libc": 30.0, "rep_stosb": 30.0}.get(m, 20.0)
        if sc == "cold" and s >= 256 * KiB:
            return base / 4.5                     # 3x behind streaming
        return base if sc == "warm" else base * 0.9
    th = _calibrate.select_routines(cpu, default, _table(speed), METHODS)
    assert th.nt_min == 256 * KiB
    assert th.streaming == "avx2_nt"
    assert th.temporal in ("rep_stosb", "libc")


def test_select_warm_alone_would_choose_otherwise():
    """The same speeds measured warm only never stream: the cold case is what
    moves the crossover."""
    cpu = _synthetic_cpu()
    default = dataclasses.replace(_policy.default_thresholds(cpu, BUILT), nt_min=64 * MiB)

    def speed(m, s, sc):
        if not BY_NAME[m].temporal:
            return 20.0
        return 30.0 if sc == "warm" or s < 256 * KiB else 6.0
    both = _calibrate.select_routines(cpu, default, _table(speed), METHODS)
    warm = _calibrate.select_routines(cpu, default, _table(speed, ("warm",)), METHODS)
    assert both.nt_min <= 256 * KiB
    assert warm.nt_min > 128 * MiB


def test_select_keeps_default_within_noise():
    cpu = _synthetic_cpu()
    default = _policy.default_thresholds(cpu, BUILT)
    rnd = random.Random(5)
    th = _calibrate.select_routines(
        cpu, default, _table(lambda m, s, sc: 20.0 * (1 + rnd.uniform(-0.01, 0.01))), METHODS)
    for k in ("vector_max", "nt_min", "temporal", "streaming", "long", "long_min"):
        assert getattr(th, k) == getattr(default, k), k


@pytest.mark.parametrize("seed", range(20))
def test_selected_policy_never_loses_to_default(seed):
    cpu = _synthetic_cpu()
    default = _policy.default_thresholds(cpu, BUILT)
    rnd = random.Random(seed)
    table = _table(lambda m, s, sc: rnd.uniform(5, 40))
    th = _calibrate.select_routines(cpu, default, table, METHODS)
    for s, cases in table.items():
        mine = _policy.plan(cpu, th, s).method
        theirs = _policy.plan(cpu, default, s).method
        tol = max([0.03] + [row[n].rel_spread for row in cases.values() for n in (mine, theirs)])
        assert _score(cases, mine) >= _score(cases, theirs) * (1 - tol), s


def test_select_long_rule():
    """A temporal routine that beats streaming on very long extents gets the
    long rule from there; where it never does, no long rule."""
    cpu = dataclasses.replace(_synthetic_cpu(), vendor="AuthenticAMD")
    default = _policy.default_thresholds(cpu, BUILT)

    def speed(m, s, sc):
        if not BY_NAME[m].temporal:
            return 30.0
        if s >= 128 * MiB:
            return 33.0 if m == "rep_stosb" else 10.0
        return 40.0 if sc == "warm" else 8.0
    th = _calibrate.select_routines(cpu, default, _table(speed), METHODS)
    assert (th.long, th.long_min) == ("rep_stosb", 128 * MiB)
    assert _policy.plan(cpu, th, 256 * MiB).method == "rep_stosb"
    assert _policy.plan(cpu, th, 64 * MiB).method == th.streaming

    def never(m, s, sc):
        return 30.0 if not BY_NAME[m].temporal else (40.0 if sc == "warm" else 8.0)
    th = _calibrate.select_routines(cpu, default, _table(never), METHODS)
    assert th.long == "" or th.long_min > max(SIZES)


def test_select_threads():
    cpu = _synthetic_cpu()
    default = _policy.default_thresholds(cpu, BUILT)
    sizes = [4 * MiB, 16 * MiB, 64 * MiB, 256 * MiB]

    def table(gain):
        return {s: {str(c): _m(str(c), s, 10.0 * (gain(s) if c > 1 else 1))
                    for c in (1, 2, 4)} for s in sizes}

    th = _calibrate.select_threads(cpu, default,
                                   table(lambda s: 1.8 if s >= 16 * MiB else 0.7), (1, 2, 4))
    assert th.thread_min == 16 * MiB
    assert _policy.plan(cpu, th, 4 * MiB, threads="auto").threads == 1
    th = _calibrate.select_threads(cpu, default, table(lambda s: 0.6), (1, 2, 4))
    assert _policy.plan(cpu, th, 256 * MiB, threads="auto").threads == 1
    th = _calibrate.select_threads(cpu, default, table(lambda s: 1.0), (1, 2, 4))
    assert (th.thread_min, th.max_threads) == (default.thread_min, default.max_threads)


def test_grid_and_sizes(here):
    assert _calibrate.grid(1024, 8192) == [1024, 2048, 4096, 8192]
    assert _calibrate.grid(1024, 8192, halves=(2048, 4096)) == [1024, 2048, 3072, 4096, 8192]
    sizes, tsizes = _calibrate.plan_sizes(here[0], quick=True)
    assert sizes == sorted(sizes) and max(sizes) <= 256 * MiB
    assert tsizes == sorted(tsizes) and max(tsizes) == max(sizes)
    assert _calibrate.thread_counts(1) == [1]
    assert _calibrate.thread_counts(6) == [1, 2, 4, 6]


# ---- a real calibration, tiny -------------------------------------------------


def test_tiny_calibration_roundtrip(tmp_path, here):
    cpu, methods, default = here
    result = _calibrate.calibrate(sizes=[1 * KiB, 64 * KiB, 1 * MiB], thread_sizes=[1 * MiB],
                                  repeat=2, target_s=1e-4, budget_s=0.1)
    th = result.thresholds
    assert set(result.routines) == {1 * KiB, 64 * KiB, 1 * MiB}
    for k in cal.FIELDS:
        assert th.reason(k).startswith("measured"), (k, th.reason(k))
    rows = result.comparison(cpu)
    assert [r["size"] for r in rows if r["threads"] == 1] == [1 * KiB, 64 * KiB, 1 * MiB]
    for r in rows:
        assert r["calibrated_warm_gbps"] > 0 and r["default_warm_gbps"] > 0
        if r["threads"] == 1:
            assert r["calibrated_cold_gbps"] > 0 and r["default_cold_gbps"] > 0
            assert 0 < r["calibrated_score"] <= 1 and 0 < r["default_score"] <= 1
    for cases in result.routines.values():
        assert set(cases) == {"warm", "cold"}
    path = cal.save(tmp_path / "p.json", cpu, th, extra={"comparison": rows})
    with _no_warnings():
        got = cal.load(cpu, methods, str(path), default)
    assert got is not None
    assert {k: getattr(got.thresholds, k) for k in cal.FIELDS} == \
        {k: getattr(th, k) for k in cal.FIELDS}
