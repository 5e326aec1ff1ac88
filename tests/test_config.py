"""The CLEARPAGES_* variables: DISABLE masks features (every dispatch path on
one machine), METHOD forces a routine, NT_THRESHOLD moves the crossover, and
every bad value is an error that names the variable."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from conftest import NATIVE, ROOT, needs_native, run_python

import clearpages as cp
from clearpages import _config, _dispatch, _fast
from clearpages._routines import ROUTINES

MiB = 1 << 20


def has(feature: str) -> bool:
    return feature in _dispatch.state().raw_cpu.features


def test_reload_with_empty_env_is_the_default(config):
    if any(k in os.environ for k in _config.VARIABLES):
        pytest.skip("CLEARPAGES_* set in this environment")
    before = (cp.methods(), cp.thresholds(), cp.cpu())
    config({})
    assert (cp.methods(), cp.thresholds(), cp.cpu()) == before
    assert _dispatch.state().config.raw == ()


@pytest.mark.skipif(not has("sse2"), reason="needs SSE2 to mask it")
def test_disable_sse2_takes_movnti_and_the_sse2_scan_away(config):
    config({"CLEARPAGES_DISABLE": "sse2"})
    assert "sse2" in cp.cpu().disabled and "movnti" not in cp.methods()
    assert _dispatch.state().scan != "sse2"
    assert cp.plan(1 << 30).method != "movnti"
    with pytest.raises(cp.UnsupportedMethod,
                       match="movnti needs sse2, masked by CLEARPAGES_DISABLE"):
        cp.clear(bytearray(100), method="movnti")
    # Every streaming routine masked: memset at every size, saying why.
    config({"CLEARPAGES_DISABLE": "sse2,avx2,avx512f,clzero"})
    assert not {"movnti", "avx2_nt", "avx512_nt", "clzero"} & set(cp.methods())
    assert cp.plan(1 << 30).method == "libc"
    assert "CLEARPAGES_DISABLE masks" in cp.thresholds().reason("streaming")
    buf = bytearray(b"\1" * (3 * MiB + 5))
    cp.clear(buf)
    assert not any(buf)


@pytest.mark.skipif(not has("avx512f"), reason="needs AVX-512 to mask it")
def test_disable_avx512(config):
    config({"CLEARPAGES_DISABLE": "avx512f"})
    assert "avx512f" not in cp.cpu().features
    assert "avx512f" in cp.cpu().disabled
    assert "avx512_nt" not in cp.methods()
    assert cp.thresholds().streaming == ("avx2_nt" if has("avx2") else "movnti")
    assert cp.plan(1 << 30).method != "avx512_nt"
    with pytest.raises(cp.UnsupportedMethod, match="CLEARPAGES_DISABLE"):
        cp.clear(bytearray(100), method="avx512_nt")
    buf = bytearray(b"\1" * (3 * MiB + 5))
    cp.clear(buf)
    assert not any(buf)
    config()
    # Back to the process environment, which may mask AVX-512 itself.
    assert ("avx512_nt" in cp.methods()) == ("avx512f" not in cp.cpu().disabled)


@needs_native
def test_disable_every_vector_feature(config):
    config({"CLEARPAGES_DISABLE": " AVX512F , avx2,clzero ,"})
    assert not {"avx512f", "avx2", "clzero"} & cp.cpu().features
    assert cp.thresholds().streaming == "movnti"
    assert cp.plan(1 << 30, threads=2).method == "movnti"     # two: no long rule
    assert set(cp.methods()) == {"rep_stosb", "rep_stosq", "mov_loop", "movnti", "libc"}
    buf = bytearray(b"\1" * 40 * MiB)
    cp.clear(buf, threads=2)
    assert buf.count(0) == len(buf)


@pytest.mark.skipif(not has("erms"), reason="needs ERMS to mask it")
def test_disable_erms_turns_to_memset(config):
    config({"CLEARPAGES_DISABLE": "erms,fsrm"})
    th = cp.thresholds()
    assert th.temporal == "libc" and th.long == ""
    assert cp.plan(th.nt_min - 1).method == "libc"
    assert cp.plan(1 << 40, threads=1).method == th.streaming
    assert "rep_stosb" in cp.methods()      # still runnable, no longer chosen


@pytest.mark.parametrize("value", ["sse3", "avx512", "erms,nope", "avx-512f"])
def test_disable_unknown_feature_names_the_variable(config, value):
    before = cp.methods()
    with pytest.raises(ValueError, match="CLEARPAGES_DISABLE") as e:
        config({"CLEARPAGES_DISABLE": value})
    assert isinstance(e.value, _config.ConfigError)
    assert "avx512f" in str(e.value)        # lists the known names
    assert cp.methods() == before           # the old configuration stays


@needs_native
def test_method_forces_every_size(config):
    config({"CLEARPAGES_METHOD": "mov_loop"})
    for n in (0, 100, 4096, 1 * MiB, 1 << 30):
        p = cp.plan(n)
        assert p.method == "mov_loop" and "CLEARPAGES_METHOD" in p.reason
    for n in (0, 7, 5000, 3 * MiB, 33 * MiB + 1):
        buf = bytearray(b"\x09" * n)
        cp.clear(buf)
        assert buf.count(0) == n
    buf = bytearray(b"\x09" * 10000)
    cp.clear_pages(buf, [2, 0], page_size=1000)
    assert buf[:1000] == bytes(1000) and buf[2000:3000] == bytes(1000)
    assert buf[1000:2000] == b"\x09" * 1000 and buf[3000:] == b"\x09" * 7000


def test_method_auto_is_no_force(config):
    config({"CLEARPAGES_METHOD": " auto "})
    assert _dispatch.state().forced is None


@pytest.mark.parametrize("value", ["fast", "discard", "REP_STOSB", "rep-stosb"])
def test_method_bad_value_names_the_variable(config, value):
    with pytest.raises(ValueError, match="CLEARPAGES_METHOD"):
        config({"CLEARPAGES_METHOD": value})


def test_method_unavailable_names_the_variable(config):
    missing = [m for m in cp.ALL_METHODS if m not in cp.methods()]
    if not missing:
        missing = ["avx512_nt"]
        env = {"CLEARPAGES_DISABLE": "avx512f"}
    else:
        # What this process lacks stays lacking: keep its CLEARPAGES_DISABLE.
        env = {k: v for k, v in os.environ.items() if k == "CLEARPAGES_DISABLE"}
    env["CLEARPAGES_METHOD"] = missing[0]
    with pytest.raises(cp.UnsupportedMethod, match="CLEARPAGES_METHOD"):
        config(env)


@pytest.mark.parametrize("value, nbytes", [("4096", 4096), ("64K", 64 << 10), ("64k", 64 << 10),
                                           ("1M", MiB), ("2MiB", 2 * MiB), (" 3 m ", 3 * MiB),
                                           ("1G", 1 << 30), ("0", 0)])
def test_nt_threshold(config, value, nbytes):
    config({"CLEARPAGES_NT_THRESHOLD": value})
    th = cp.thresholds()
    assert th.nt_min == nbytes
    assert "CLEARPAGES_NT_THRESHOLD" in th.reason("nt_min")
    assert cp.plan(nbytes, threads=2).method == th.streaming     # two: no long rule
    if not NATIVE:
        # memset on both sides: the threshold is read but has nothing to move.
        assert th.streaming == "libc" and cp.plan(max(0, nbytes - 1)).method == "libc"
    elif nbytes:
        assert cp.plan(nbytes - 1).method != th.streaming


@pytest.mark.parametrize("value", ["abc", "-1", "1.5M", "1X", "12 34", "100000T", "M"])
def test_nt_threshold_bad_value_names_the_variable(config, value):
    with pytest.raises(ValueError, match="CLEARPAGES_NT_THRESHOLD"):
        config({"CLEARPAGES_NT_THRESHOLD": value})


def test_calibration_setting_is_read(config):
    config({"CLEARPAGES_CALIBRATION": "OFF"})
    assert _dispatch.state().config.calibration == "off"
    # A path that names no file is an error naming the variable, as for
    # every bad value; the state (and the configuration) stays as it was.
    with pytest.raises(cp.ConfigError, match=r"CLEARPAGES_CALIBRATION=/nonexistent/policy.json "
                                             "names no file.*calibrate.*=off"):
        config({"CLEARPAGES_CALIBRATION": "/nonexistent/policy.json"})
    assert _dispatch.state().config.calibration == "off"


def test_missing_calibration_file_is_an_error_at_first_use():
    r = run_python("import clearpages as cp\ncp.clear(bytearray(8))",
                   {"CLEARPAGES_CALIBRATION": "/nonexistent/policy.json"})
    assert r.returncode == 1
    # One clean line, as a bad variable at import: no frames, no private name.
    assert r.stderr.strip() == (
        "clearpages.ConfigError: CLEARPAGES_CALIBRATION=/nonexistent/policy.json names no "
        "file; write it with `python -m clearpages calibrate`, or set "
        "CLEARPAGES_CALIBRATION=off"), r.stderr


@pytest.mark.parametrize("name, hint", [("CLEARPAGES_METHD", "CLEARPAGES_METHOD"),
                                        ("CLEARPAGES_NT_THRESHOD", "CLEARPAGES_NT_THRESHOLD"),
                                        ("CLEARPAGES_COLOUR", None)])
def test_an_unknown_variable_is_named_in_a_warning(name, hint):
    """A misspelled variable would change nothing without a word: it is
    named once, at the program's own line, with the names that are read."""
    r = run_python("import warnings\nwarnings.simplefilter('always')\nimport clearpages as cp\n"
                   "cp.clear(bytearray(8))\ncp.reload_config()", {name: "movnti"})
    assert r.returncode == 0, r.stderr
    lines = [ln for ln in r.stderr.splitlines() if "ConfigWarning" in ln]
    assert len(lines) == 1, r.stderr
    assert lines[0].startswith("<string>:3: ConfigWarning: %s is not a clearpages variable, "
                               "so it is ignored" % name), lines
    assert ("did you mean %s?" % hint in lines[0]) if hint else "did you mean" not in lines[0]
    assert "clearpages reads CLEARPAGES_METHOD, CLEARPAGES_NT_THRESHOLD" in lines[0]


def test_the_builds_and_the_test_suites_variables_are_not_warned_about():
    r = run_python("import warnings\nwarnings.simplefilter('error')\nimport clearpages as cp\n"
                   "cp.clear(bytearray(8))",
                   {"CLEARPAGES_PORTABLE": "0", "CLEARPAGES_TEST_SEED": "1",
                    "CLEARPAGES_BENCH_SCALE": "0.5"})
    assert r.returncode == 0 and not r.stderr, r.stderr


LEAN_SIZES = (0, 1, 999, 1000, 2047, 2048, 4095, 4096, 65536, MiB, 8 * MiB)


def _routines_run(call, *args, **kw):
    """The routines a clearing call ran, in order (the native debug hook)."""
    ran = []

    def hook(where, routine, nbytes):
        if where in ("call", "slice") and (not ran or ran[-1] != routine):
            ran.append(routine)

    _fast._set_debug_hook(hook)
    try:
        call(*args, **kw)
    finally:
        _fast._set_debug_hook(None)
    return ran


def test_a_method_name_built_at_run_time_runs_that_method(config):
    """A method given as another str than the literal (read from a file or
    the environment, built by a join) runs the routine it names, each of
    them in turn, and again after a reload of the configuration (which
    makes new name objects); one that names nothing is refused."""
    buf = bytearray(b"x" * 8192)

    def built(name):
        return "".join(list(name))

    names = [m for m in cp.methods() if m != "libc"][:2] + ["libc"]
    for _ in range(2):
        for name in names + names[::-1]:
            b = built(name)
            assert b == name and b is not name
            buf[:] = b"x" * len(buf)
            assert _routines_run(cp.clear, buf, method=b) == [name]
            assert buf == bytearray(len(buf))
        config({})
    with pytest.raises(ValueError):
        cp.clear(buf, method=built("libcx"))
    buf[:] = b"x" * len(buf)
    cp.clear(buf, method=built("auto"))
    assert buf == bytearray(len(buf))


@pytest.mark.parametrize("method", [None, "libc", "movnti"])
@pytest.mark.parametrize("nt", [None, "0", "1000", "2048", "4096", "1M"])
def test_what_runs_is_what_plan_says(config, nt, method):
    """plan() and the clearing functions ask one policy (csrc/core/policy.c):
    the routine each call runs, seen from inside the call, is the one
    plan() names, for single buffers, many pieces and a hot range, under
    every threshold and a forced method.  (The learner is off: it may run
    the other routine in its band, which test_adapt.py covers.)"""
    env = {"CLEARPAGES_ADAPT": "0"} if nt is None else {
        "CLEARPAGES_ADAPT": "0", "CLEARPAGES_NT_THRESHOLD": nt}
    if method is not None:
        if method not in cp.methods():
            pytest.skip("%s is not available here" % method)
        env["CLEARPAGES_METHOD"] = method
    config(env)
    for n in LEAN_SIZES:
        buf = bytearray(b"\x01" * n)
        assert _routines_run(cp.clear, buf) == [cp.plan(n).method], n
        assert buf.count(0) == n
        for count in (2, 3):
            pieces = [bytearray(b"\x01" * (n // count)) for _ in range(count)]
            total = sum(map(len, pieces))
            want = [cp.plan(total, count=count).method]
            assert _routines_run(cp.clear_many, pieces) == want, (n, count)
    for hot_n in LEAN_SIZES:
        n = max(hot_n, 1) * 2
        p = cp.plan(n, hot=(0, hot_n))
        want = [p.method, p.hot_method] if hot_n else [p.method]
        if p.method == p.hot_method:
            want = [p.method]
        assert _routines_run(cp.clear, bytearray(n), hot=(0, hot_n)) == want, hot_n


def test_state_is_built_on_first_use():
    """Importing clearpages reads no file and probes nothing: the state is
    built by the first call that needs it."""
    code = ("import clearpages as cp, clearpages._dispatch as d; "
            "print(d.built()); print(d.built())")
    done = run_python(code)
    assert done.stdout.split() == ["False", "False"], done.stderr
    done = run_python("import clearpages as cp, clearpages._dispatch as d; "
                      "b = bytearray(9); cp.clear(b); print(d.built())")
    assert done.stdout.split() == ["True"], done.stderr


def test_parse_size():
    assert _config.parse_size("2GiB") == 2 << 30
    assert _config.parse_size("5kb") == 5 << 10
    assert _config.parse_size("1T") == 1 << 40
    with pytest.raises(ValueError, match="what"):
        _config.parse_size("x", "what")
    with pytest.raises(ValueError, match="2\\*\\*56"):
        _config.parse_size(str((1 << 56) + 1))


# ---- at import time, in a fresh interpreter ---------------------------------

_SHOW = ("import clearpages as cp; print(','.join(cp.methods())); "
         "print(cp.plan(1 << 30, threads=2).method)")


def test_environment_is_read_at_import():
    r = run_python(_SHOW, {"CLEARPAGES_DISABLE": "avx512f,avx2",
                           "CLEARPAGES_NT_THRESHOLD": "64M"})
    assert r.returncode == 0, r.stderr
    methods, big = r.stdout.split()
    assert "avx512_nt" not in methods.split(",") and "avx2_nt" not in methods.split(",")
    assert big == ("movnti" if NATIVE else "libc")
    r = run_python(_SHOW, {"CLEARPAGES_METHOD": "rep_stosq"})
    if NATIVE:
        assert r.returncode == 0, r.stderr
        assert r.stdout.split()[1] == "rep_stosq"
    else:
        # A forced routine the build lacks fails the import, naming the variable.
        assert r.returncode != 0
        assert "ConfigError: CLEARPAGES_METHOD=rep_stosq" in r.stderr, r.stderr
        assert "not in this build" in r.stderr, r.stderr


def _lacking() -> str:
    """A routine this machine itself cannot run (its CPU, OS or build,
    whatever CLEARPAGES_DISABLE says), or a skip."""
    st = _dispatch.state()
    for name in cp.ALL_METHODS:
        if _dispatch._missing(name, st.raw_cpu, frozenset(), st.built) is not None:
            return name
    pytest.skip("this machine runs every routine, so none can be forced that it lacks")


def test_forced_method_this_cpu_lacks_stops_the_import_with_one_line():
    r = run_python("import clearpages", {"CLEARPAGES_METHOD": _lacking()})
    assert r.returncode != 0
    assert r.stderr.startswith("clearpages.ConfigError: CLEARPAGES_METHOD="), r.stderr
    assert r.stderr.strip().count("\n") == 0, r.stderr


def test_forced_method_this_cpu_lacks_is_a_config_error_and_unsupported(config):
    name = _lacking()
    before = cp.methods()
    with pytest.raises(cp.ConfigError, match="CLEARPAGES_METHOD=%s" % name) as e:
        config({"CLEARPAGES_METHOD": name})
    assert isinstance(e.value, cp.UnsupportedMethod)
    assert cp.methods() == before       # the configuration is unchanged


def test_forced_method_masked_by_disable_is_a_config_error(config):
    routine = next((r for r in ROUTINES if r.requires
                    and r.requires <= _dispatch.state().raw_cpu.features), None)
    if routine is None:
        pytest.skip("this CPU has no feature a routine needs, so none can be masked")
    with pytest.raises(cp.ConfigError, match="masked by CLEARPAGES_DISABLE"):
        config({"CLEARPAGES_METHOD": routine.name,
                "CLEARPAGES_DISABLE": ",".join(sorted(routine.requires))})


def test_info_and_methods_never_die_for_a_forced_method_the_cpu_lacks():
    """Set after the import (the state is built on first use): one line of
    message, no frames, for methods() and for the command line's info."""
    name = _lacking()
    r = run_python("import os, clearpages as cp\nos.environ['CLEARPAGES_METHOD'] = %r\n"
                   "cp.methods()" % name)
    assert r.returncode != 0
    assert r.stderr.startswith("clearpages.ConfigError: CLEARPAGES_METHOD="), r.stderr
    assert r.stderr.strip().count("\n") == 0, r.stderr
    r = subprocess.run([sys.executable, "-m", "clearpages", "info"], cwd=ROOT,
                       capture_output=True, text=True, timeout=120,
                       env=dict(os.environ, CLEARPAGES_METHOD=name))
    assert r.returncode != 0 and "Traceback" not in r.stderr, r.stderr
    assert r.stderr.strip().count("\n") == 0 and "CLEARPAGES_METHOD" in r.stderr, r.stderr


@pytest.mark.parametrize("var", _config.VARIABLES)
def test_a_value_that_is_not_a_str_is_a_type_error_naming_the_variable(config, var):
    with pytest.raises(TypeError, match=var):
        config({var: 0})


@pytest.mark.parametrize("var", ["CLEARPAGES_ADAPT", "CLEARPAGES_POOL_DEBUG"])
@pytest.mark.parametrize("value", ["yes", "no", "on", "off", "true", "false", "00"])
def test_switches_take_0_or_1_only(config, var, value):
    with pytest.raises(cp.ConfigError, match="%s=.*use (0|1)" % var):
        config({var: value})
    config({var: " 0 "})
    config({var: "1"})


@pytest.mark.parametrize("var, value", [("CLEARPAGES_DISABLE", "bogus"),
                                        ("CLEARPAGES_ADAPT", "bogus"),
                                        ("CLEARPAGES_METHOD", "bogus"),
                                        ("CLEARPAGES_NT_THRESHOLD", "bogus")])
def test_bad_environment_at_import_names_the_variable(var, value):
    r = run_python("import clearpages", {var: value})
    assert r.returncode != 0
    assert var in r.stderr and "bogus" in r.stderr
    # One line: the message says it all; no frames of the package's own code.
    assert r.stderr.strip().count("\n") == 0, r.stderr
    assert r.stderr.startswith("clearpages.ConfigError: ")
    assert "Traceback" not in r.stderr and "Segmentation" not in r.stderr


def test_bad_environment_caught_by_the_program_is_a_config_error():
    r = run_python("import sys\ntry:\n    import clearpages\nexcept ValueError as e:\n"
                   "    print(type(e).__name__, e)\nraise KeyError('mine')",
                   {"CLEARPAGES_METHOD": "bogus"})
    assert r.stdout.startswith("ConfigError CLEARPAGES_METHOD='bogus'")
    assert "Traceback" in r.stderr and "KeyError: 'mine'" in r.stderr   # others: as ever


def test_a_test_run_leaves_no_cache_directory_behind(tmp_path):
    """The suite points XDG_CACHE_HOME at a directory of its own (so that no
    user's calibration file is read or written), and removes it at the end."""
    from conftest import ROOT, run_python
    r = run_python("import sys, pytest; sys.exit(pytest.main(['-q', '-p', 'no:cacheprovider', "
                   "%r]))" % str(ROOT / "tests" / "test_sizes.py::test_plan_takes_a_size_as_text"),
                   env={"TMPDIR": str(tmp_path)}, cwd=str(ROOT))
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    assert not list(tmp_path.glob("clearpages-test-cache-*"))


def test_the_tests_of_autos_own_choice_hold_under_a_forced_method():
    """The README suggests CLEARPAGES_METHOD=movnti python -m pytest: the
    tests of what auto itself decides (marked auto_policy) see auto's own
    policy whatever the suite runs under."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("CLEARPAGES_")}
    env.update(CLEARPAGES_METHOD="movnti", CLEARPAGES_NT_THRESHOLD="64M",
               PYTHONPATH=os.pathsep.join([str(ROOT)] + [
                   p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]))
    files = [str(f) for f in sorted((ROOT / "tests").glob("test_*.py"))
             if f.name != "test_config.py" and "mark.auto_policy" in f.read_text()]
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                           "-m", "auto_policy", "-k", "not 1073741824 and not 67108864",
                           *files], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    assert " passed" in done.stdout and " deselected" in done.stdout
