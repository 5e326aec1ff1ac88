"""python -m clearpages: info, plan, bench, calibrate, through a subprocess
and through main(argv) in this process (tiny sizes and repeats only)."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys

import pytest
from conftest import ROOT

import clearpages as cp
from clearpages import _calibration
from clearpages._routines import BY_NAME
from clearpages.tools.cli import main
from clearpages.tools.output import Progress

TINY = ["--repeat", "2", "--target-ms", "0.05", "--budget-s", "0.2", "--quiet"]


@pytest.fixture(autouse=True)
def private_cache(tmp_path, monkeypatch):
    """Never read or write the user's own cache directory."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    return tmp_path / "xdg"


def run_cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    full = {k: v for k, v in os.environ.items() if not k.startswith("CLEARPAGES_")}
    full["PYTHONPATH"] = os.pathsep.join([str(ROOT)] + [
        p for p in full.get("PYTHONPATH", "").split(os.pathsep) if p])
    full.update(env or {})
    return subprocess.run([sys.executable, "-m", "clearpages", *args], env=full,
                          capture_output=True, text=True, timeout=120)


def call(*args: str) -> tuple[int, str]:
    out = io.StringIO()
    rc = main(list(args), out=out)
    return rc, out.getvalue()


# ---- info ---------------------------------------------------------------------


def test_info_subprocess():
    r = run_cli("info")
    assert r.returncode == 0, r.stderr
    cpu = cp.cpu()
    for text in (cpu.vendor, "L1d", "L2", "L3", "thresholds (source: default)",
                 "nt_min", "hot_max_other", "no CLEARPAGES_* variables set", "extension"):
        assert text in r.stdout, text
    for name in cp.ALL_METHODS:
        assert name in r.stdout


def test_info_json_reports_disable_and_environment():
    present = sorted(cp.cpu().features - {"hypervisor", "osxsave"})
    if not present:
        pytest.skip("no CPU feature to mask on this machine")
    feat = present[0]
    r = run_cli("info", "--json", env={"CLEARPAGES_DISABLE": feat,
                                       "CLEARPAGES_CALIBRATION": "off"})
    assert r.returncode == 0, r.stderr
    data = json.loads(r.stdout)
    assert data["features"][feat] == "disabled by CLEARPAGES_DISABLE"
    assert data["environment"] == {"CLEARPAGES_DISABLE": feat, "CLEARPAGES_CALIBRATION": "off"}
    assert data["calibration"]["setting"] == "off"
    assert {m["name"] for m in data["methods"]} == set(cp.ALL_METHODS)
    assert all(m["role"] == m["kind"] == BY_NAME[m["name"]].role for m in data["methods"])
    needs = [m for m in data["methods"] if feat in BY_NAME[m["name"]].requires]
    for m in needs:
        assert not m["usable"] and "CLEARPAGES_DISABLE" in m["why_not"]
    assert data["thresholds"]["source"] == "default"
    assert data["machine"]["cpu"]["model"] == cp.cpu().model


def test_json_says_no_limit_with_null(tmp_path):
    """A limit no size reaches, no routine for long extents and no cap on
    threads are null in every JSON the command line writes, not 2**62, ''
    and 0; thresholds().as_json() says the same."""
    th = cp.thresholds()
    assert th.as_json()["max_threads"] is None or th.max_threads > 0
    none = {k for k, v in th.as_json().items() if v is None}
    assert (th.long_min >= 1 << 62) == ("long_min" in none)
    assert (th.long == "") == ("long" in none)
    assert none, "this machine has every limit: nothing to check"
    rc, out = call("info", "--json")
    values = json.loads(out)["thresholds"]["values"]
    assert none & set(values) <= {k for k, v in values.items() if v is None}
    assert not [v for v in values.values() if isinstance(v, int) and v >= 1 << 62]
    rc, out = call("bench", "--sizes", "8K", "--methods", "libc", *TINY, "--json", "-")
    values = json.loads(out)["thresholds"]["values"]
    assert none & set(values) <= {k for k, v in values.items() if v is None}
    path, js = tmp_path / "p.json", tmp_path / "c.json"
    rc, _ = call("calibrate", "--output", str(path), *CAL_TINY, "--json", str(js))
    assert rc == 0
    data = json.loads(js.read_text())
    assert data["wrote"] == str(path) and data["comparison"]
    for key in ("default", "calibrated"):
        assert not [v for v in data[key].values() if isinstance(v, int) and v >= 1 << 62]
        assert data[key]["max_threads"] is None or data[key]["max_threads"] > 0


def test_info_in_process_lists_every_feature_with_status():
    from clearpages.tools.report import info_data

    rc, out = call("info")
    assert rc == 0
    lines = out.splitlines()
    for name, status in info_data()["features"].items():
        assert any(line.split()[:1] == [name] and status in line for line in lines), name


# ---- plan ---------------------------------------------------------------------


@pytest.mark.parametrize("text,size", [("4096", 4096), ("64K", 64 << 10),
                                       ("64M", 64 << 20), ("1G", 1 << 30)])
def test_plan_sizes(text, size):
    rc, out = call("plan", text)
    assert rc == 0
    p = cp.plan(size)
    assert "method    %s" % p.method in out
    assert "threads   %d" % p.threads in out
    assert p.reason in " ".join(out.split())      # wrapped to 100 columns
    assert "(%d bytes)" % size in out


@pytest.mark.auto_policy
def test_plan_count_threads_json():
    rc, out = call("plan", "64K", "--count", "16", "--threads", "1", "--json")
    assert rc == 0
    data = json.loads(out)
    p = cp.plan(64 << 10, count=16, threads=1)
    assert (data["method"], data["threads"], data["count"]) == (p.method, 1, 16)
    assert "pieces" in data["reason"]
    # The unit under its name, and under its first name for readers of old output.
    assert data["unit"] == data["chunk"] == p.unit == p.chunk
    assert cp.thresholds().unit == cp.thresholds().chunk
    # The routine's role, and under its first key.
    assert data["role"] == data["kind"] == BY_NAME[p.method].role
    assert data["role"] in ("temporal", "streaming")


@pytest.mark.parametrize("args,message", [
    (["plan", "64Q"], "byte count"),
    (["plan", "-5"], ""),
    (["plan", "1G", "--count", "0"], "at least 1"),
    (["plan", "1G", "--threads", "none"], "threads"),
    (["plan", "%dT" % (1 << 20)], "larger than any memory"),
    (["plan"], "SIZE"),
    ([], "COMMAND"),
    (["frobnicate"], "invalid choice"),
])
def test_plan_bad_input_exits_2(args, message, capsys):
    rc, _ = call(*args)
    assert rc == 2
    assert message in capsys.readouterr().err


def test_plan_bad_size_subprocess():
    r = run_cli("plan", "lots")
    assert r.returncode == 2
    assert "4096, 64K, 64M or 1G" in r.stderr
    assert "Traceback" not in r.stderr


# ---- bench --------------------------------------------------------------------


def test_bench_table_and_json(tmp_path):
    out_json = tmp_path / "b.json"
    rc, out = call("bench", "--sizes", "4K,64K", *TINY, "--json", str(out_json), "--wide")
    assert rc == 0
    for text in ("warm GB/s", "cold GB/s", "x libc", "score", cp.cpu().vendor,
                 "zero scan", "is_zero GB/s", "early exit"):
        assert text in out, text
    data = json.loads(out_json.read_text())
    scan = data["scan"]
    assert {(r["size"], r["scenario"]) for r in scan["rows"]} == {
        (s, sc) for s in (4096, 65536) for sc in ("warm", "cold")}
    assert all(r["is_zero_gbps"] > 0 for r in scan["rows"])
    assert scan["early_exit"]["size"] == 65536 and scan["scan"] == cp._dispatch.state().scan
    assert data["settings"]["sizes"] == [4096, 65536]
    assert data["settings"]["scenarios"] == ["warm", "cold"]
    assert "worse" in data["rule"]
    cases: dict = {}
    for r in data["results"]:
        cases.setdefault((r["size"], r["scenario"]), []).append(r)
        assert r["gbps_median"] > 0 and r["gbps_q1"] <= r["gbps_q3"]
        assert r["gbps_min"] <= r["gbps_median"] <= r["gbps_max"]
        assert r["repeats"] >= 1 and len(r["seconds_per_call"]) == r["repeats"]
        assert r["score"] > 0           # above 1: faster than every routine
    assert set(cases) == {(s, sc) for s in (4096, 65536) for sc in ("warm", "cold")}
    for (size, _sc), rows in cases.items():
        names = {r["name"] for r in rows}
        assert {"auto", "ctypes.memset"} | set(cp.methods()) <= names
        assert sum(r["best"] for r in rows) == 1
        assert [r["name"] for r in rows if r["plan"]] == [cp.plan(size, threads=1).method]
        libc = next(r for r in rows if r["name"] == "libc")
        assert libc["ratio_to_libc"] == pytest.approx(1.0)
        # The score is the worse of the candidate's two ratios to each case's
        # best routine, for every row (auto and the competitors too).
        for r in rows:
            ratios = []
            for sc2 in ("warm", "cold"):
                row = cases[(size, sc2)]
                mine = next(x for x in row if x["name"] == r["name"])["gbps_median"]
                ratios.append(mine / max(x["gbps_median"] for x in row
                                         if x["name"] in cp.ALL_METHODS))
            assert r["score"] == pytest.approx(min(ratios))
    assert data["machine"]["cpu"]["vendor"] == cp.cpu().vendor
    assert data["settings"]["routines"] == "clear(view, method=name)"
    assert [g["size"] for g in data["goals"]] == [4096, 65536]
    for g in data["goals"]:
        auto = [r for r in data["results"] if r["size"] == g["size"] and r["name"] == "auto"]
        assert g["auto_score"] == pytest.approx(min(
            r["gbps_median"] / max(x["gbps_median"] for x in data["results"]
                                   if x["size"] == g["size"] and x["scenario"] == r["scenario"]
                                   and x["name"] in cp.ALL_METHODS) for r in auto))
        assert g["best"] in cp.methods() and isinstance(g["ok"], bool)
        # The package's one rule, judged on each repeat's figure: the verdict
        # names the goal that decided it, the figure and the rounds' spread.
        assert g["outcome"] in ("ok", "miss", "unmeasured, retake")
        assert g["verdict"].startswith("auto ") and g["verdict"].endswith(g["outcome"])
        assert "goal" in g["verdict"] and "rounds" in g["verdict"]
        assert {v["outcome"] for v in g["verdicts"]} <= {"ok", "miss", "unmeasured, retake"}
    assert "auto judged by its worse case" in out


def test_bench_one_scenario(tmp_path):
    out_json = tmp_path / "b.json"
    rc, _ = call("bench", "--sizes", "8K", "--methods", "libc", "--scenario", "warm",
                 "--direct", *TINY, "--json", str(out_json))
    assert rc == 0
    data = json.loads(out_json.read_text())
    assert {r["scenario"] for r in data["results"]} == {"warm"}
    assert data["settings"]["routines"] == "called directly"
    assert {r["kind"] for r in data["results"] if r["name"] == "libc"} == {"routine"}
    assert data["goals"] == []            # no auto measured, nothing to judge


def test_bench_scan_alone(tmp_path):
    rc, out = call("bench", "--scan", "--sizes", "64K", *TINY, "--wide")
    assert rc == 0
    assert "zero scan" in out and "is_zero" in out and "early exit: 64 KiB" in out
    # Beside a clear of the same buffer: whether checking first pays.
    assert "clear GB/s" in out and "is_zero / clear" in out
    rc, js = call("bench", "--scan", "--sizes", "64K", *TINY, "--json", "-")
    for row in json.loads(js)["rows"]:
        assert row["clear_gbps"] > 0
        assert row["over_clear"] == pytest.approx(row["is_zero_gbps"] / row["clear_gbps"])
    assert "x libc" not in out                      # no clear table
    rc, _ = call("bench", "--scan", "--methods", "libc", *TINY)
    assert rc == 2


def test_bench_profile_writes_a_profile_and_replays_it(tmp_path):
    from clearpages.tools import profile as _profile

    path = tmp_path / "here.json"
    rc, out = call("bench", "--profile", str(path), "--sizes", "4K,64K", *TINY)
    assert rc == 0
    prof = _profile.load(path)
    assert prof.data["schema"] == _profile.SCHEMA and "cold" in prof.method
    assert sorted(prof.table) == [4096, 65536]
    for cases in prof.table.values():
        assert set(cases) == {"warm", "cold"}
        for row in cases.values():
            assert set(row) == set(cp.methods())
    assert prof.cpu.vendor == cp.cpu().vendor and prof.cpu.l2 == cp.cpu().l2
    assert "replayed against" in out and "wrote" in out
    rc, _ = call("bench", "--profile", str(path), "--methods", "libc", *TINY)
    assert rc == 2


def test_bench_methods_filter_adds_the_ratio_reference(tmp_path):
    out_json = tmp_path / "b.json"
    rc, _ = call("bench", "--sizes", "8K", "--methods", "ctypes.memset", "auto", *TINY,
                 "--json", str(out_json))
    assert rc == 0
    names = {r["name"] for r in json.loads(out_json.read_text())["results"]}
    assert names == {"ctypes.memset", "auto", "libc"}


def test_bench_numpy_competitors(tmp_path):
    pytest.importorskip("numpy")
    out_json = tmp_path / "b.json"
    rc, _ = call("bench", "--sizes", "4K", "--methods", "numpy.fill,numpy[...]=0",
                 *TINY, "--json", str(out_json))
    assert rc == 0
    names = {r["name"] for r in json.loads(out_json.read_text())["results"]}
    assert {"numpy.fill", "numpy[...]=0"} <= names


@pytest.mark.parametrize("name,message", [("warp", "unknown method"),
                                          ("clzero", "clzero")])
def test_bench_bad_method_exits_2(name, message, capsys):
    if name in cp.methods():
        pytest.skip("%s runs here" % name)
    rc, _ = call("bench", "--sizes", "4K", "--methods", name, *TINY)
    assert rc == 2
    assert message in capsys.readouterr().err


def test_bench_plot_without_matplotlib(monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "matplotlib", None)   # import raises ImportError
    rc, out = call("bench", "--sizes", "4K", *TINY, "--plot", "x.png")
    assert rc == 2
    assert "matplotlib" in capsys.readouterr().err
    assert out == ""          # refused before measuring anything


def test_bench_plot(tmp_path):
    pytest.importorskip("matplotlib")
    png = tmp_path / "b.png"
    rc, _ = call("bench", "--sizes", "4K,64K", "--methods", "libc", *TINY,
                 "--plot", str(png))
    assert rc == 0
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_bench_subprocess_progress_on_stderr():
    r = run_cli("bench", "--sizes", "4K", "--methods", "libc", "--repeat", "2",
                "--target-ms", "0.05", "--budget-s", "0.2")
    assert r.returncode == 0, r.stderr
    assert "libc" in r.stdout and "bench: 4 KiB" in r.stderr
    assert "bench:" not in r.stdout


class _Clock:
    def __init__(self):
        self.t = 100.0

    def __call__(self):
        return self.t


class _Tty(io.StringIO):
    def isatty(self):
        return True


def test_progress_lines_and_bar():
    s = io.StringIO()
    p = Progress("x", stream=s, clock=_Clock())
    p(1, 4, "a")
    p(2, 4, "a")
    p(3, 4, "b")
    assert s.getvalue() == "x: a (1/4)\nx: b (3/4)\n"
    t = _Tty()
    p = Progress("x", stream=t, clock=_Clock())
    p(2, 4, "a")
    p.close()
    assert "[" in t.getvalue() and " 50%" in t.getvalue()


def test_progress_says_the_time_left(monkeypatch):
    """Once a step is done and a second has passed: the time so far scaled
    by the steps left, in the bar and in the plain lines."""
    monkeypatch.setenv("COLUMNS", "80")
    clock = _Clock()
    t = _Tty()
    p = Progress("programs", stream=t, clock=clock)
    p(0, 10, "warm 16 KiB")
    assert "left" not in t.getvalue()
    clock.t += 30
    p(2, 10, "warm 64 KiB")
    last = t.getvalue().split("\r")[-1]
    assert "~2 min 0 s left" in last and " 20%" in last and "warm 64 KiB" in last
    assert len(last.replace("\x1b[K", "")) <= 80
    s = io.StringIO()
    p = Progress("calibrate", stream=s, clock=clock)
    clock.t += 5
    p(1, 3, "4 KiB")
    assert s.getvalue() == "calibrate: 4 KiB (1/3, ~10 s left)\n"


def test_durations_in_words():
    from clearpages.tools.output import duration

    assert [duration(x) for x in (0.4, 45, 125, 900, 3 * 3600 + 60 * 7)] == [
        "0 s", "45 s", "2 min 5 s", "15 min", "3 h 7 min"]


def test_every_run_longer_than_a_few_seconds_says_its_duration_in_help(capsys):
    for args in (["bench", "--help"], ["calibrate", "--help"]):
        assert main(args) == 0
        text = " ".join(capsys.readouterr().out.split())
        assert "minute" in text, text
    assert main(["bench", "--help"]) == 0
    text = " ".join(capsys.readouterr().out.split())
    for option in ("--quick", "--programs", "--profile", "--scan", "--pool"):
        part = text.split(option, 1)[1].split(" --", 1)[0]
        assert "minute" in part or " s " in part or "seconds" in part, (option, part)


def test_a_spread_that_wide_is_never_a_pass():
    """auto at 0.24 of its goal's reference with the repeats spread over 300%
    (the quick bench once called that '~ (within noise)'): a miss; with the
    goal inside the spread on both sides, unmeasured; never ok."""
    from clearpages.tools import measure, report

    wild = measure.judge_rounds([0.02, 0.1, 0.24, 0.9, 1.4], 0.9, "auto", "the best")
    assert wild.outcome == "miss" and "0.24" in wild.text() and "goal 0.90" in wild.text()
    around = measure.judge_rounds([0.3, 0.6, 0.92, 1.2, 1.5], 0.9, "auto", "the best")
    assert around.outcome == "unmeasured, retake"
    met = measure.judge_rounds([1.0, 1.01, 1.02], 0.9)
    assert report.deciding([met, around]) is around
    assert report.deciding([met, around, wild]) is wild


def test_the_replay_names_the_goal_a_size_missed():
    """auto can be the best routine and still miss a goal the table does not
    show (1.2x memset near the L3): the verdict names it, with the figure."""
    from clearpages.tools import profile

    v = profile.Verdict(size=64 << 20, choice="avx2_nt", score=1.0, best="avx2_nt",
                        best_score=1.0, memset_score=0.9, near_l3_ratio=1.05,
                        near_l3_best=1.3)
    assert not v.ok
    assert v.text() == "avx2_nt 1.05 of libc at 1-4x the L3 (goal 1.20): miss"
    ok = profile.Verdict(size=4096, choice="rep_stosb", score=0.88, best="mov_loop",
                         best_score=1.0, memset_score=0.8, near_l3_ratio=None)
    assert ok.ok and ok.text().endswith("(goal 0.90): ok, within the 5% noise")


def test_the_console_script_names_itself_in_its_usage(monkeypatch, capsys):
    monkeypatch.setattr(sys, "argv", ["/usr/local/bin/clearpages"])
    assert main(["plan"]) == 2
    assert capsys.readouterr().err.startswith("usage: clearpages plan")
    monkeypatch.setattr(sys, "argv", ["/x/clearpages/__main__.py"])
    assert main(["plan"]) == 2
    assert capsys.readouterr().err.startswith("usage: python -m clearpages plan")
    r = run_cli("plan")             # python -m clearpages, whatever argv[0] says
    assert r.returncode == 2 and r.stderr.startswith("usage: python -m clearpages plan")


# ---- calibrate ----------------------------------------------------------------


CAL_TINY = ["--sizes", "1K,64K,1M", "--thread-sizes", "1M", *TINY]


def test_calibrate_writes_file_auto_reads(tmp_path, config):
    path = tmp_path / "policy.json"
    rc, out = call("calibrate", "--output", str(path), *CAL_TINY)
    assert rc == 0
    assert "wrote %s" % path in out
    assert "threshold" in out and "default" in out and "calibrated" in out
    data = json.loads(path.read_text())
    assert data["format"] == _calibration.FORMAT
    assert data["cpu"] == _calibration.identity(cp.cpu())
    assert [r["size"] for r in data["comparison"] if r["threads"] == 1] == [1024, 65536, 1 << 20]
    config({"CLEARPAGES_CALIBRATION": str(path)})
    assert cp.thresholds().source == "calibration: %s" % path
    for k in _calibration.FIELDS:
        assert getattr(cp.thresholds(), k) == data["thresholds"][k]


def test_calibrate_default_location_subprocess(private_cache):
    r = run_cli("calibrate", *CAL_TINY, env={"XDG_CACHE_HOME": str(private_cache)})
    assert r.returncode == 0, r.stderr
    files = list((private_cache / "clearpages").glob("policy-*.json"))
    assert len(files) == 1
    assert "wrote %s" % files[0] in r.stdout
    r = run_cli("plan", "1M", env={"XDG_CACHE_HOME": str(private_cache)})
    assert r.returncode == 0, r.stderr
    assert "thresholds from: calibration: %s" % files[0] in r.stdout
    r = run_cli("info", env={"XDG_CACHE_HOME": str(private_cache)})
    assert "in use: %s" % files[0] in r.stdout and "measured" in r.stdout


def test_console_script_entry_point():
    from clearpages.tools import cli

    assert callable(cli.main)
    text = (ROOT / "pyproject.toml").read_text()
    assert 'clearpages = "clearpages.tools.cli:main"' in text
    assert '"clearpages.tools"' in text      # the subpackage goes into the wheel


def test_calibrate_writes_the_file_calibration_names(tmp_path):
    """CLEARPAGES_CALIBRATION naming a file not yet written is an error for
    every command but calibrate, which writes it there."""
    path = tmp_path / "mine.json"
    env = {"CLEARPAGES_CALIBRATION": str(path)}
    r = run_cli("info", env=env)
    assert r.returncode == 2 and "CLEARPAGES_CALIBRATION=%s names no file" % path in r.stderr
    r = run_cli("calibrate", *CAL_TINY, env=env)
    assert r.returncode == 0, r.stderr
    assert "wrote %s" % path in r.stdout and path.exists()
    r = run_cli("plan", "4K", env=env)
    assert "thresholds from: calibration: %s" % path in r.stdout
