"""Shared fixtures: one parametrization over every routine, guarded buffers,
and a way to change the CLEARPAGES_* configuration and put it back."""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import functools
import gc
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import NamedTuple

import pytest

# The suite must not depend on this user's calibration file: the default
# place to look (and to write) is an empty cache directory of its own.
# Set before clearpages is imported, since it reads the file at import.
# Removed when the run ends.
os.environ["XDG_CACHE_HOME"] = tempfile.mkdtemp(prefix="clearpages-test-cache-")

#: What SIGINT did when the run started, before clearpages was imported:
#: Python's KeyboardInterrupt, or nothing where the run was started in the
#: background of a shell, which starts it with SIGINT ignored.
SIGINT_AT_START = signal.getsignal(signal.SIGINT)

#: The first line of a child that is sent SIGINT: a child inherits an
#: ignored SIGINT from a run started in the background, and would never see
#: the signal its test sends.
CHILD_TAKES_SIGINT = "import signal; signal.signal(signal.SIGINT, signal.default_int_handler)\n"

import clearpages as cp  # noqa: E402 (after the environment and SIGINT_AT_START)
from clearpages import _dispatch, _native, _region  # noqa: E402

atexit.register(shutil.rmtree, os.environ["XDG_CACHE_HOME"], ignore_errors=True)

ROOT = Path(__file__).resolve().parent.parent

#: Guard bytes on each side of a cleared range, and the value they hold.
GUARD = 256
FILL = 0xA5


#: The assembly routines are built (False in a portable build, where the C
#: library's memset is the only routine: methods() == ("libc",)).
NATIVE = hasattr(_native.lib, "cp_clear_rep_stosb")

#: For a test whose subject is a native routine: skipped, with the reason, in
#: a portable build; it runs wherever the routines are built.
needs_native = pytest.mark.skipif(
    not NATIVE, reason="needs the assembly routines; this is a portable build "
    "(only the C library's memset)")


#: The CI job that builds the native code with AddressSanitizer and
#: UndefinedBehaviorSanitizer sets CLEARPAGES_TEST_SANITIZERS=1 (the ASan
#: runtime is preloaded into Python, LD_PRELOAD).  A test that fails there
#: only because of the sanitizer's own ways says which, with this mark.
SANITIZERS = os.environ.get("CLEARPAGES_TEST_SANITIZERS") == "1"


def not_under_sanitizers(reason: str):
    return pytest.mark.skipif(SANITIZERS, reason="under ASan: " + reason)


def pytest_configure(config):
    config.addinivalue_line("markers", "build: compiles the package or a C harness "
                            "(tens of seconds; deselect with -m 'not build')")
    config.addinivalue_line("markers", "auto_policy: tests what auto itself decides: run "
                            "without CLEARPAGES_METHOD and CLEARPAGES_NT_THRESHOLD")


#: The variables that replace auto's own choice; the rest of the suite runs
#: under them (the README suggests CLEARPAGES_METHOD=movnti python -m pytest).
FORCING = ("CLEARPAGES_METHOD", "CLEARPAGES_NT_THRESHOLD")


@pytest.fixture(autouse=True)
def _auto_policy(request):
    """A test marked auto_policy sees auto's own policy, whatever the suite
    runs under; the process's configuration comes back after it."""
    forced = [k for k in FORCING if k in os.environ]
    if not forced or request.node.get_closest_marker("auto_policy") is None:
        yield
        return
    cp.reload_config({k: v for k, v in os.environ.items() if k not in FORCING})
    try:
        yield
    finally:
        cp.reload_config()


def _missing(name: str) -> str | None:
    return _dispatch.state().missing(name)


@pytest.fixture(params=cp.ALL_METHODS)
def method(request):
    """Every routine the package knows; skipped where this machine lacks it
    (test_methods.py checks that those raise UnsupportedMethod instead)."""
    name = request.param
    if name not in cp.methods():
        pytest.skip("%s: %s" % (name, _missing(name)))
    return name


@pytest.fixture(params=("auto",) + cp.ALL_METHODS)
def any_method(request):
    """"auto" and every available routine."""
    name = request.param
    if name != "auto" and name not in cp.methods():
        pytest.skip("%s: %s" % (name, _missing(name)))
    return name


@pytest.fixture
def config():
    """reload_config(env) for the test, then back to the process environment."""
    yield cp.reload_config
    cp.reload_config()


def guarded(np, n: int, offset: int = 0, fill: int = FILL):
    """(whole, view): a numpy uint8 buffer filled with `fill` and the n-byte
    slice of it that starts `offset` bytes past a 64-byte boundary, with at
    least GUARD bytes before and after."""
    whole = np.full(n + offset + 2 * GUARD + 64, fill, dtype=np.uint8)
    base = whole.__array_interface__["data"][0]
    start = GUARD + (-(base + GUARD) % 64) + offset
    return whole, whole[start:start + n], start


def check_guarded(np, whole, start: int, n: int, fill: int = FILL) -> None:
    """The n bytes at start are zero and every other byte still holds fill."""
    inside = whole[start:start + n]
    if inside.any():
        bad = int(np.flatnonzero(inside)[0])
        raise AssertionError("byte %d of %d not cleared (0x%02x)" % (bad, n, inside[bad]))
    for name, part, at in (("before", whole[:start], 0), ("after", whole[start + n:], start + n)):
        if (part != fill).any():
            bad = int(np.flatnonzero(part != fill)[0])
            raise AssertionError("byte written %s the buffer: offset %d holds 0x%02x"
                                 % (name, at + bad - start, part[bad]))


class NumpyDLPack(NamedTuple):
    """What this numpy's arrays can say through DLPack, asked of numpy itself.

    numpy 2.1 and later take __dlpack__(max_version=(1, 0), copy=...) and
    hand out versioned capsules, which flag a read-only array as such.
    Earlier ones take no such keywords and hand out unversioned capsules
    only, which cannot say read-only, so they refuse to export a read-only
    array at all."""

    versioned: bool     # max_version=(1, 0) is taken: versioned capsules, copy=
    read_only: bool     # a read-only array exports, flagged read-only
    version: str


@functools.cache
def numpy_dlpack() -> NumpyDLPack:
    import numpy as np

    a = np.zeros(1)
    is_capsule = ctypes.pythonapi.PyCapsule_IsValid
    is_capsule.restype = ctypes.c_int
    is_capsule.argtypes = [ctypes.py_object, ctypes.c_char_p]

    def versioned_export() -> bool:
        """numpy hands out a versioned capsule of a, as a is now."""
        try:
            cap = a.__dlpack__(max_version=(1, 0))
        except (TypeError, BufferError):
            return False
        return bool(is_capsule(cap, b"dltensor_versioned"))

    versioned = versioned_export()
    a.flags.writeable = False
    return NumpyDLPack(versioned, versioned and versioned_export(), np.__version__)


class OnlyDLPack:
    """A numpy array behind nothing but __dlpack__ (no buffer protocol): a
    tensor, as clearpages sees one.  force: keywords its export always gets;
    calls: the keywords each export was asked with."""

    def __init__(self, a, **force):
        self.a = a
        self.force = force
        self.calls = []

    def __dlpack__(self, **kw):
        self.calls.append(kw)
        return self.a.__dlpack__(**{**kw, **self.force})

    def __dlpack_device__(self):
        return self.a.__dlpack_device__()


def run_python(code: str, env: dict[str, str] | None = None, timeout: float = 60,
               **kw) -> subprocess.CompletedProcess:
    """Run code in a fresh interpreter with this checkout first on the path."""
    full_env = dict(os.environ)
    for k in list(full_env):
        if k.startswith("CLEARPAGES_"):
            del full_env[k]
    full_env["PYTHONPATH"] = os.pathsep.join(
        [str(ROOT)] + [p for p in full_env.get("PYTHONPATH", "").split(os.pathsep) if p])
    full_env.update(env or {})
    return subprocess.run([sys.executable, "-c", code], env=full_env, capture_output=True,
                          text=True, timeout=timeout, **kw)


def run_child(code: str) -> str:
    """Run code in a fresh interpreter, with ctypes, sys, clearpages as cp,
    the tests' capsules (Producer) and conftest importable, so that a crash
    fails the test, not the run; its stdout."""
    r = run_python("import ctypes, sys\nsys.path.insert(0, %r)\nimport clearpages as cp\n"
                   "from capsules import Producer\n" % str(ROOT / "tests") + code)
    assert r.returncode == 0, "the child died (%d): %s" % (r.returncode, r.stderr[-2000:])
    return r.stdout


# ---- hugetlb (1 GiB pages) ------------------------------------------------


GiB = 1 << 30


def _write_int(path: str, value: int) -> None:
    with open(path, "w") as f:
        f.write("%d\n" % value)


@pytest.fixture(scope="module")
def gigantic_pages():
    """Two free 1 GiB hugetlb pages: reserved as root when needed and given
    back afterwards; skipped with the reason otherwise."""
    need = 2
    pool = _region.hugetlb_pages(GiB)
    if pool["nr"] is None:
        pytest.skip("no 1 GiB hugetlb pool here (CPU without pdpe1gb or kernel without it)")
    usable = pool["free"] - pool["reserved"]
    if usable >= need:
        yield pool
        return
    if os.geteuid() != 0:
        pytest.skip("needs %d free 1 GiB hugetlb pages; as root: echo %d > %s"
                    % (need, pool["nr"] + need - usable, pool["path"]))
    original = pool["nr"]
    try:
        _write_int(pool["path"], original + need - usable)
        now = _region.hugetlb_pages(GiB)
        if now["free"] - now["reserved"] < need:
            pytest.skip("the kernel found only %d free 1 GiB page(s) (memory fragmented)"
                        % (now["free"] - now["reserved"]))
        yield now
    finally:
        gc.collect()
        _write_int(pool["path"], original)


@contextlib.contextmanager
def pages_permitting():
    """Another process may take the free pages between the fixture's look
    and our mapping: that is a skip, not a failure."""
    try:
        yield
    except _region.HugePagesUnavailable as e:
        pytest.skip("1 GiB pages taken by someone else meanwhile: %s" % e)
