"""The native entry (clearpages._fast): one C call per public call, which
owns every buffer it acquires from the first to the last instruction.

Callers that fight back: sequences changed by an item's __index__ or
__buffer__ while C walks them, signal handlers that raise between two
native steps, and exceptions that are not refusals (KeyboardInterrupt,
MemoryError) coming out of a buffer or an index.  Crash cases run in a
subprocess, so a regression shows as a failed test, not a dead runner."""

from __future__ import annotations

import array
import gc
import mmap
import re
import shutil
import signal
import subprocess
import sys
import textwrap
import typing

import pytest
from conftest import ROOT, SIGINT_AT_START, run_python

import clearpages as cp
from clearpages import _dispatch, _fast, _policy

np = pytest.importorskip("numpy")

KiB, MiB = 1 << 10, 1 << 20


def _run_isolated(code: str) -> str:
    done = run_python(textwrap.dedent(code), timeout=120)
    assert done.returncode == 0, "rc %d\n%s" % (done.returncode, done.stderr[-3000:])
    return done.stdout


# ---- sequences changed while C walks them -------------------------------------


def test_pages_list_emptied_by_an_items_index():
    """Evil.__index__ empties the list C is reading: no crash, the pages as
    they were when the call began are cleared."""
    out = _run_isolated("""
        import clearpages as cp
        pages = None
        class Evil:
            def __index__(self):
                pages.clear()
                return 0
        buf = bytearray(b"\\x01" * (64 * 4096))
        pages = [Evil()] + list(range(1, 60))
        cp.clear_pages(buf, pages)
        assert buf.count(0) == 60 * 4096, buf.count(0)
        assert pages == []
        pages = (Evil(),) + tuple(range(1, 3))
        print("ok")
    """)
    assert out.strip() == "ok"


def test_pages_list_grown_and_shrunk_by_index():
    out = _run_isolated("""
        import clearpages as cp
        import gc
        state = {}
        class Evil:
            def __index__(self):
                lst = state["pages"]
                del lst[1:]
                lst.extend(object() for _ in range(1000))
                gc.collect()
                return 1
        for _ in range(50):
            buf = bytearray(b"\\x01" * (8 * 4096))
            state["pages"] = pages = [0, Evil(), 2, 3]
            cp.clear_pages(buf, pages)
            assert buf[:4 * 4096] == bytes(4 * 4096) and buf.count(0) == 4 * 4096
        print("ok")
    """)
    assert out.strip() == "ok"


@pytest.mark.skipif(sys.version_info < (3, 12), reason="__buffer__ needs Python 3.12+")
def test_many_list_emptied_by_an_items_buffer():
    out = _run_isolated("""
        import gc
        import clearpages as cp
        bufs = None
        class Evil:
            def __init__(self):
                self.b = bytearray(b"\\x01" * 4096)
            def __buffer__(self, flags):
                bufs.clear()
                gc.collect()
                return memoryview(self.b)
        keep = [bytearray(b"\\x02" * 100) for _ in range(50)]
        for _ in range(20):
            bufs = [Evil()] + list(keep)
            first = bufs[0]
            cp.clear_many(bufs)
            assert not any(first.b) and not any(any(k) for k in keep)
        print("ok")
    """)
    assert out.strip() == "ok"


def test_many_generator_and_tuple_items_are_held():
    """Items that exist only in the iterable (a generator) live until the
    clear is done."""
    made = []

    def pieces():
        for _ in range(100):
            b = bytearray(b"\x03" * 1000)
            made.append(b)
            yield b

    cp.clear_many(pieces())
    assert len(made) == 100 and not any(any(b) for b in made)


# ---- signals between native steps: nothing is left exported ------------------


class Boom(Exception):
    pass


@pytest.mark.parametrize("where", ["acquired", "slice"])
def test_an_exception_between_steps_releases_every_export(where):
    """Deterministic form of a signal handler raising between two native
    steps: the hook raises right after every buffer is acquired, or before
    a slice of the job; every buffer is released all the same."""
    bufs = [bytearray(b"\x01" * 4096) for _ in range(2000)]
    m = mmap.mmap(-1, 4 * MiB)
    r = cp.Region(2 * MiB)

    def hook(w, routine, nbytes):
        if w == where:
            raise Boom(w)

    _fast._set_debug_hook(hook)
    try:
        with pytest.raises(Boom):
            cp.clear_many(bufs + [m, r])
        with pytest.raises(Boom):
            cp.clear_pages(m, list(range(0, 1024, 3)))
        with pytest.raises(Boom):
            cp.clear(r, threads=2)
        if where == "slice":
            with pytest.raises(Boom):
                cp.clear(bytearray(64 * MiB))
    finally:
        _fast._set_debug_hook(None)
    for b in bufs:
        b.extend(b"x")          # BufferError if an export were left
    m.resize(8 * MiB)
    m.close()
    r.resize(4 * MiB)
    r.close()


def test_sigalrm_raising_during_clear_many():
    """The reported case: a SIGALRM handler raises while clear_many of many
    bytearrays runs; afterwards every bytearray resizes and a Region closes."""
    out = _run_isolated("""
        import signal
        import clearpages as cp
        class Alarm(Exception):
            pass
        def handler(signum, frame):
            raise Alarm()
        signal.signal(signal.SIGALRM, handler)
        hits = 0
        r = cp.Region(1 << 21)
        bufs = [bytearray(64) for _ in range(300_000)] + [r]
        for delay in (1e-4, 3e-4, 1e-3, 3e-3, 1e-2, 3e-2):
            for _ in range(3):
                try:
                    signal.setitimer(signal.ITIMER_REAL, delay)
                    cp.clear_many(bufs)
                    cp.clear_many(bufs, threads=2)
                    signal.setitimer(signal.ITIMER_REAL, 0)
                except Alarm:
                    hits += 1
        for b in bufs[:-1]:
            b.extend(b"x")
        r.close()
        print("ok", hits)
    """)
    assert out.startswith("ok"), out


# ---- errors that are not refusals propagate -----------------------------------


class Interrupting:
    def __init__(self, exc):
        self.exc = exc

    def __index__(self):
        raise self.exc


@pytest.mark.parametrize("exc", [KeyboardInterrupt, MemoryError, RuntimeError])
def test_index_errors_are_not_swallowed(exc):
    buf = bytearray(b"\x01" * 8192)
    with pytest.raises(exc):
        cp.clear_pages(buf, [0, Interrupting(exc())])
    with pytest.raises(exc):
        cp.clear_pages(buf, (Interrupting(exc()),))
    assert buf == bytearray(b"\x01" * 8192)      # nothing written


@pytest.mark.skipif(sys.version_info < (3, 12), reason="__buffer__ needs Python 3.12+")
@pytest.mark.parametrize("exc", [KeyboardInterrupt, MemoryError, RuntimeError])
def test_buffer_errors_are_not_swallowed(exc):
    class Raising:
        def __buffer__(self, flags):
            raise exc()

    good = bytearray(b"\x01" * 100)
    for call in (lambda: cp.clear(Raising()), lambda: cp.clear_many([good, Raising()]),
                 lambda: cp.clear_pages(Raising(), [0])):
        with pytest.raises(exc):
            call()
    assert good == bytearray(b"\x01" * 100)
    good.extend(b"x")


def test_refusals_still_explain():
    for bad in (b"read-only", object(), memoryview(bytearray(10)).toreadonly()):
        with pytest.raises(TypeError):
            cp.clear(bad)
        with pytest.raises(TypeError, match="buffer 1"):
            cp.clear_many([bytearray(1), bad])


# ---- the one native path: every method, every form ----------------------------


@pytest.mark.parametrize("n", [0, 1, 4096, 64 * KiB - 1, 64 * KiB, 3 * MiB + 3])
def test_every_form_clears(any_method, n):
    for kw in ({}, {"method": any_method}, {"method": any_method, "threads": 2},
               {"method": any_method, "threads": "auto"},
               {"method": any_method, "hot": (0, n // 2)}):
        b = bytearray(b"\x01" * n)
        cp.clear(b, **kw)
        assert b.count(0) == n, kw


def test_arguments_that_are_normalized():
    """Forms the native parser leaves to Python, which normalizes and calls back."""
    class IntSub(int):
        pass

    class StrSub(str):
        pass

    b = bytearray(b"\x01" * 10000)
    cp.clear(b, threads=IntSub(2))
    cp.clear(b, hot=[0, 100])
    cp.clear(b, method=StrSub("libc"))
    cp.clear_many([b], threads=IntSub(2))
    cp.clear_pages(b, range(2), page_size=IntSub(4096))
    cp.clear_pages(b, array.array("i", [0, 1]))
    cp.clear_pages(b, np.array([1, 0], dtype=np.uint16))
    cp.clear_pages(b, np.array([[0], [1]])[:, 0])
    assert not any(b)


def test_keyword_and_positional_errors_are_type_errors():
    b = bytearray(10)
    with pytest.raises(TypeError, match="unexpected keyword"):
        cp.clear(b, methd="libc")
    with pytest.raises(TypeError, match="positional"):
        cp.clear(b, "libc")
    with pytest.raises(TypeError, match="missing"):
        cp.clear()
    with pytest.raises(TypeError, match="multiple"):
        cp.clear(b, buf=b)
    cp.clear(buf=b)
    cp.clear_pages(buf=b, pages=[0], page_size=5)


def test_small_clears_keep_the_gil_large_ones_release_it():
    """The threshold is the policy's named one, within the few-microsecond
    range (64-256 KiB)."""
    assert 64 * KiB <= _policy.GIL_RELEASE_MIN <= 256 * KiB
    cp.clear(bytearray(1))
    assert _fast.settings()["gil_min"] == _policy.GIL_RELEASE_MIN


def test_adaptation_switch_is_the_states(config):
    """The native policy adapts exactly when the state's adapt_active says
    so, in the thresholds' band; CLEARPAGES_ADAPT=0 turns it off there too,
    and no size is then timed."""
    config({})
    st, s = _dispatch.state(), _fast.settings()
    th = st.thresholds
    assert (s["adapt_min"], s["adapt_max"]) == (th.adapt_min, th.adapt_max)
    assert s["adapt"] == st.adapt_active == (th.adapt_min < th.adapt_max)
    if st.adapt_active:
        assert _fast.decide(th.adapt_min)[4] is True
    config({"CLEARPAGES_ADAPT": "0"})
    st, s = _dispatch.state(), _fast.settings()
    assert s["adapt"] == 0 and st.adapt_active is False
    assert not any(_fast.decide(n)[4] for n in (th.adapt_min, th.adapt_max - 1, 1 << 20))


# ---- the public API's types and exceptions --------------------------------------


def test_every_exception_is_exported():
    assert issubclass(cp.ConfigError, ValueError)
    assert issubclass(cp.UnsupportedMethod, RuntimeError)
    assert issubclass(cp.PageIndexError, IndexError)
    assert issubclass(cp.HugePagesUnavailable, OSError)
    for name in ("ConfigError", "UnsupportedMethod", "PageIndexError", "HugePagesUnavailable"):
        assert name in cp.__all__
    with pytest.raises(cp.ConfigError, match="CLEARPAGES_METHOD"):
        cp.reload_config({"CLEARPAGES_METHOD": "nope"})
    cp.reload_config()


def test_method_literal_is_the_routine_table():
    assert set(typing.get_args(cp.Method)) == {"auto", "discard", *cp.ALL_METHODS}
    assert "auto" in typing.get_args(typing.get_args(cp.Threads)[1])


def test_the_state_has_one_owner():
    st = _dispatch.state()
    assert st is _dispatch.state()
    cp.reload_config({"CLEARPAGES_NT_THRESHOLD": "4096"})
    try:
        assert _dispatch.state() is not st
        assert _fast.decide(4096)[0] == cp.thresholds().streaming
    finally:
        cp.reload_config()


def test_no_leftover_exports_under_gc_pressure():
    gc.collect()
    b = bytearray(4096)
    for _ in range(1000):
        cp.clear(b)
        cp.clear_many([b, b])
        cp.clear_pages(b, [0])
    b.extend(b"x")


def test_signal_module_is_untouched():
    assert signal.getsignal(signal.SIGINT) is SIGINT_AT_START


# ---- the one bridge between the native modules -------------------------------------


def test_native_exports_one_table_that_fast_imports():
    """_native exports its entry points once, in a capsule; _fast imports that
    and looks nothing up by name (no dlopen, no dlsym)."""
    from clearpages import _native

    assert type(_native._C_API).__name__ == "PyCapsule"
    assert '"clearpages._native._C_API"' in repr(_native._C_API)
    nm = shutil.which("nm")
    if nm is None:
        pytest.skip("no nm to read the extension's symbols")
    out = subprocess.run([nm, "-D", "--undefined-only", _fast.__file__],
                         capture_output=True, text=True, check=True).stdout
    assert not {"dlopen", "dlsym"} & {line.split()[-1].split("@")[0]
                                      for line in out.splitlines() if line.strip()}


# ---- a reload while a call is under way ----------------------------------------
#
# A signal handler or another thread may call reload_config() whenever Python
# code runs inside a call: between two slices of a job, in an item's
# __index__ or __buffer__.  A routine masked by that reload has a NULL entry
# in the new table; a call must run only routines it chose after the last
# such Python code (or copied before it), never an index into a table that
# changed under it.

def _maskable(names) -> tuple[str, str] | None:
    """(routine, the features to mask to take it away) for the first of names
    that needs a feature, or None."""
    from clearpages._routines import BY_NAME

    for name in names:
        if name in cp.methods() and BY_NAME[name].requires:
            return name, ",".join(sorted(BY_NAME[name].requires))
    return None


_RELOAD_DURING_COLD_JOB = r"""
import faulthandler
faulthandler.enable()
import clearpages as cp
from clearpages import _fast
name, mask = %r, %r
cp.reload_config({"CLEARPAGES_METHOD": name})     # auto runs name, for the hot range too
n = 16 << 20
p = cp.plan(n, hot=(n - 8192, n))
assert p.method == p.hot_method == name, p
calls = []

def hook(where, routine, nbytes):
    if where == "slice" and not calls:      # as a signal handler would, between slices
        calls.append(routine)
        cp.reload_config({"CLEARPAGES_DISABLE": mask})

buf = bytearray(b"\x01") * n
_fast._set_debug_hook(hook)
cp.clear(buf, hot=(n - 8192, n))
_fast._set_debug_hook(None)
assert calls == [name] and not any(buf[::4096]) and not any(buf[-8192:]), calls
print("ok")
"""


def test_hot_routine_taken_away_during_the_cold_job_is_not_called():
    """clear(hot=) chose the hot routine before the cold job (with
    CLEARPAGES_METHOD, the forced routine for both); a reload during the
    job that masks it must not leave the call with a NULL routine: the call
    finishes with the routines it started with."""
    m = _maskable(cp.methods())
    if m is None:
        pytest.skip("no routine here needs a CPU feature that a mask can take away")
    assert _run_isolated(_RELOAD_DURING_COLD_JOB % m).split() == ["ok"]


class _Reloading:
    """An index whose __index__ reloads the configuration with a mask."""

    def __init__(self, value, mask):
        self.value, self.mask = value, mask

    def __index__(self):
        cp.reload_config({"CLEARPAGES_DISABLE": self.mask})
        return self.value


def test_pages_method_is_chosen_after_the_items_index(config):
    """clear_pages(method=X) with an item whose __index__ takes X away: the
    call looks the method up after the items are read, and says X is not
    available now (not 'bad job configuration', never X's NULL entry)."""
    m = _maskable(cp.methods())
    if m is None:
        pytest.skip("no routine here needs a CPU feature that a mask can take away")
    name, mask = m
    buf = bytearray(b"\x01" * 16384)
    with pytest.raises(cp.UnsupportedMethod, match="CLEARPAGES_DISABLE"):
        cp.clear_pages(buf, [0, _Reloading(2, mask)], method=name)
    assert buf == bytearray(b"\x01" * 16384)


_RELOAD_ONCE_ACQUIRED = r"""
import faulthandler
faulthandler.enable()
import clearpages as cp
from clearpages import _fast
mask, name, call = %r, %r, %r

def hook(where, routine, nbytes):
    # Python code after the buffers are held: what a __buffer__ method of
    # Python 3.12+ is, on any version.
    if where == "acquired":
        cp.reload_config({"CLEARPAGES_DISABLE": mask})

buf = bytearray(b"\x01" * 8192)
_fast._set_debug_hook(hook)
try:
    if call == "clear":
        cp.clear(buf, method=name)
    elif call == "many":
        cp.clear_many([buf, bytearray(10)], method=name)
    else:
        cp.clear_pages(buf, [1], method=name)
except cp.UnsupportedMethod as e:
    print("refused" if "CLEARPAGES_DISABLE" in str(e) else e)
else:
    print("ran")
"""


@pytest.mark.parametrize("call", ["clear", "many", "pages"])
def test_method_is_chosen_after_the_last_python_code_before_the_work(call):
    m = _maskable(cp.methods())
    if m is None:
        pytest.skip("no routine here needs a CPU feature that a mask can take away")
    name, mask = m
    out = _run_isolated(_RELOAD_ONCE_ACQUIRED % (mask, name, call))
    assert out.split() == ["refused"], out


@pytest.mark.skipif(sys.version_info < (3, 12), reason="__buffer__ needs Python 3.12+")
def test_a_buffer_method_that_reloads_is_followed(config):
    m = _maskable(cp.methods())
    if m is None:
        pytest.skip("no routine here needs a CPU feature that a mask can take away")
    name, mask = m
    inner = bytearray(b"\x01" * 8192)

    class Reloading:
        def __buffer__(self, flags):
            cp.reload_config({"CLEARPAGES_DISABLE": mask})
            return memoryview(inner)

    for call in (lambda: cp.clear(Reloading(), method=name),
                 lambda: cp.clear_many([Reloading()], method=name)):
        config()
        with pytest.raises(cp.UnsupportedMethod, match="CLEARPAGES_DISABLE"):
            call()
    assert inner == bytearray(b"\x01" * 8192)


# ---- subinterpreters -------------------------------------------------------------

_SUBINTERPRETER = r"""
import os, sys
import clearpages as cp
inside = '''
try:
    import clearpages
except ImportError as e:
    print("refused:", e, flush=True)
else:
    print("imported", flush=True)
'''
how = HOW
if how == "testcapi":
    import _testcapi
    _testcapi.run_in_subinterp(inside)
else:
    try:
        import _interpreters as interpreters
    except ImportError:
        import _xxsubinterpreters as interpreters
    interp = interpreters.create()
    try:
        interpreters.run_string(interp, inside)
    finally:
        interpreters.destroy(interp)
sys.stdout.flush()
# The main interpreter's declined calls still explain themselves.
for call in (lambda: cp.clear(b"abc"), lambda: cp.clear_many([bytearray(1), b"x"]),
             lambda: cp.clear_pages(b"abc", [0])):
    try:
        call()
    except TypeError as e:
        print("TypeError", "read-only" in str(e))
    except Exception as e:
        print(type(e).__name__, e)
b = bytearray(b"x" * 10)
cp.clear(b)
print("cleared", not any(b))
"""


def _subinterpreter_ways() -> list:
    ways = []
    try:
        import _testcapi

        if hasattr(_testcapi, "run_in_subinterp"):
            ways.append("testcapi")
    except ImportError:
        pass
    for name in ("_interpreters", "_xxsubinterpreters"):
        try:
            __import__(name)
        except ImportError:
            continue
        ways.append("interpreters")
        break
    return ways or [pytest.param("none", marks=pytest.mark.skip(
        reason="this Python has neither _testcapi.run_in_subinterp nor _interpreters"))]


@pytest.mark.parametrize("how", _subinterpreter_ways())
def test_a_subinterpreter_is_refused_and_the_main_interpreter_is_unharmed(how):
    """The native state is one per process: a subinterpreter (mod_wsgi
    style, or an isolated one) that imports clearpages gets an ImportError
    that says why, and the main interpreter's calls, declined ones
    included, work as before (they used to run the subinterpreter's dead
    hooks: NameError: name 'isinstance' is not defined)."""
    out = _run_isolated("HOW = %r\n" % how + _SUBINTERPRETER).splitlines()
    assert out[0].startswith("refused: ") and "subinterpreter" in out[0], out
    assert out[1:] == ["TypeError True"] * 3 + ["cleared True"], out


def test_the_public_signatures_agree():
    """clear, clear_many and clear_pages are written in three places: the
    native docstrings (what inspect and help() show), the typing stubs in
    _core.py and _fast.pyi.  One set of names, kinds and defaults."""
    import ast
    import inspect
    from pathlib import Path

    import clearpages._core as core

    def from_stub(path, name):
        tree = ast.parse(Path(path).read_text())
        fn = next(n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == name)
        a = fn.args
        pos = [x.arg for x in a.args]
        kw = {x.arg: ast.literal_eval(d) for x, d in zip(a.kwonlyargs, a.kw_defaults)}
        return pos, kw

    for name in ("clear", "clear_many", "clear_pages"):
        sig = inspect.signature(getattr(_fast, name))
        pos = [p.name for p in sig.parameters.values() if p.kind is p.POSITIONAL_OR_KEYWORD]
        kw = {p.name: p.default for p in sig.parameters.values() if p.kind is p.KEYWORD_ONLY}
        for stub in (core.__file__, Path(_fast.__file__).with_name("_fast.pyi")):
            assert from_stub(stub, name) == (pos, kw), (name, stub)


def test_each_function_is_registered_once():
    """A second entry of a name in a method table hides the first: its
    docstring (help()) would be the dead one."""
    for path in sorted((ROOT / "csrc" / "pyext").glob("*.c")):
        for table in re.findall(r"PyMethodDef \w+\[\] = \{(.*?)\n\};", path.read_text(), re.S):
            names = re.findall(r'^\s*\{"(\w+)",', table, re.M)
            assert len(names) == len(set(names)), (path.name, sorted(
                n for n in set(names) if names.count(n) > 1))
    assert "until the next configure()" in _fast.set_untouched.__doc__
