"""The build: which sources and declarations go in, when the portable
(memset-only) build is made, and that such a build works end to end."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import clearpages as cp
from clearpages import _ffi_build
from conftest import ROOT


@pytest.mark.parametrize("machine", ["x86_64", "AMD64", "x64"])
def test_x86_64_is_not_portable(machine):
    assert _ffi_build.is_portable(machine, {}) is False
    for off in ("", "0", "false", "no", " No "):
        assert _ffi_build.is_portable(machine, {"CLEARPAGES_PORTABLE": off}) is False


@pytest.mark.parametrize("machine", ["aarch64", "arm64", "ppc64le", "riscv64", "s390x",
                                     "i686", "x86", ""])
def test_other_machines_are_portable(machine):
    assert _ffi_build.is_portable(machine, {}) is True
    assert _ffi_build.is_portable(machine, {"CLEARPAGES_PORTABLE": "0"}) is True


@pytest.mark.parametrize("on", ["1", "true", "TRUE", "yes", " 1 "])
def test_portable_on_request(on):
    assert _ffi_build.is_portable("x86_64", {"CLEARPAGES_PORTABLE": on}) is True


@pytest.mark.parametrize("bad", ["2", "maybe", "on", "-1", "portable"])
def test_portable_bad_value_names_the_variable(bad):
    with pytest.raises(ValueError, match="CLEARPAGES_PORTABLE"):
        _ffi_build.is_portable("x86_64", {"CLEARPAGES_PORTABLE": bad})


def test_is_portable_reads_the_environment(monkeypatch):
    monkeypatch.setenv("CLEARPAGES_PORTABLE", "1")
    assert _ffi_build.is_portable("x86_64") is True
    monkeypatch.delenv("CLEARPAGES_PORTABLE")
    assert _ffi_build.is_portable("x86_64") is False


def test_routine_table_is_the_packages():
    assert tuple(r.name for r in _ffi_build.routines()) == cp.ALL_METHODS


def test_sources():
    full = _ffi_build.sources(False)
    portable = _ffi_build.sources(True)
    c_files = sorted(p.relative_to(ROOT).as_posix() for p in (ROOT / "csrc" / "core").glob("*.c"))
    assert portable == c_files
    assert {"csrc/core/libc.c", "csrc/core/jobs.c", "csrc/core/cpu.c"} <= set(portable)
    assert not any(s.startswith("csrc/pyext/") for s in full), "the binding is not in _native"
    assert not any(s.endswith(".S") for s in portable)
    asm = [r.source for r in cp.ROUTINES if r.source.startswith("asm/")]
    assert full == c_files + asm
    assert {"asm/%s.S" % m for m in cp.ALL_METHODS if m != "libc"} <= set(full)
    for s in full:
        assert (ROOT / s).is_file(), s


def test_cdef_text():
    full = _ffi_build.cdef_text(False)
    portable = _ffi_build.cdef_text(True)
    for r in cp.ROUTINES:
        assert "%s(void *dst, size_t len);" % r.symbol in full, r.symbol
    assert "cp_clear_libc" in portable
    for r in cp.ROUTINES:
        if r.source.startswith("asm/"):
            assert r.symbol + "(" not in portable, r.symbol
    for text in (full, portable):
        for name in ("cp_job_new", "cp_job_run", "cp_job_from_pages", "cp_cpu_decode",
                     "cp_cpuid_dump", "cp_feature_name", "CP_MAX_THREADS"):
            assert name in text, name
        # cffi's cdef takes no preprocessor lines.
        assert not [ln for ln in text.splitlines() if ln.lstrip().startswith("#")]
        assert "BEGIN CDEF" not in text and "END CDEF" not in text


def test_make_ffi_portable_declares_no_asm_routine():
    ffi = _ffi_build.make_ffi(portable=True, module="clearpages._native_portable_check")
    src = ffi._assigned_source
    module, preamble, source_ext, kwds = src[0], src[1], src[2], src[3]
    assert module == "clearpages._native_portable_check"
    assert ("CP_PORTABLE", "1") in kwds["define_macros"]
    assert not any(str(s).endswith(".S") for s in kwds["sources"])
    assert "-fcf-protection=full" not in kwds["extra_compile_args"]


# ---- a real portable build ----------------------------------------------

_BUILD = """
import runpy
from setuptools import Distribution
from setuptools.command.build_ext import build_ext
ns = runpy.run_path("clearpages/_ffi_build.py")
# The CPython extension beside the cffi module, as setup.py builds it.
cmd = build_ext(Distribution({"ext_modules": [ns["fast_extension"](portable=True)]}))
cmd.inplace = True
cmd.ensure_finalized()
cmd.run()
ffi = ns["make_ffi"](portable=True, module="clearpages._native")
print(ffi.compile(tmpdir=".", verbose=False))
"""

_USE = r"""
import sys
import clearpages as cp
from clearpages import _native
assert _native.__file__.startswith(sys.argv[1]), _native.__file__
assert cp.methods() == ("libc",), cp.methods()
assert not cp.cpu().is_x86
for n in (0, 1, 4095, 3 << 20, 40 << 20):
    b = bytearray(b"\x01" * n)
    cp.clear(b)
    assert b.count(0) == n
    b = bytearray(b"\x01" * n)
    cp.clear(b, threads=2, hot=(0, n // 2))
    assert b.count(0) == n
pieces = [bytearray(b"\x02" * 5000) for _ in range(10)]
cp.clear_many(pieces)
assert not any(any(p) for p in pieces)
pool = bytearray(b"\x03" * 40960)
cp.clear_pages(pool, [3, 1])
assert pool[4096:8192] == bytes(4096) and pool[12288:16384] == bytes(4096)
assert pool.count(0) == 8192
assert cp.plan(1 << 30).method == "libc" and cp.plan(100).method == "libc"
try:
    cp.clear(bytearray(10), method="rep_stosb")
except cp.UnsupportedMethod as e:
    assert "build" in str(e), e
else:
    raise AssertionError("rep_stosb ran in a portable build")
print("portable ok")
"""


@pytest.mark.build
def test_portable_build_works(tmp_path):
    if shutil.which(os.environ.get("CC", "gcc")) is None and shutil.which("cc") is None:
        pytest.skip("no C compiler")
    src = tmp_path / "src"
    shutil.copytree(ROOT / "clearpages", src / "clearpages",
                    ignore=shutil.ignore_patterns("*.so", "*.pyd", "__pycache__", "*.o", "*.c"))
    for d in ("csrc", "asm"):
        shutil.copytree(ROOT / d, src / d)
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("CLEARPAGES_") and k != "PYTHONPATH"}
    built = subprocess.run([sys.executable, "-c", _BUILD], cwd=src, env=env,
                           capture_output=True, text=True, timeout=120)
    assert built.returncode == 0, built.stderr[-3000:]
    so = Path(built.stdout.strip().splitlines()[-1])
    assert so.is_file() and so.parent.resolve() == (src / "clearpages").resolve(), so
    env["PYTHONPATH"] = str(src)
    used = subprocess.run([sys.executable, "-c", textwrap.dedent(_USE), str(src)],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert used.returncode == 0, used.stderr[-3000:]
    assert "portable ok" in used.stdout
