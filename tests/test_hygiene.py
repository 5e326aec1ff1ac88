"""The built extension is a well-behaved shared object: non-executable
stack, IBT/SHSTK marking where the toolchain allows it, no text
relocations, no writable-and-executable segment, nothing exported but the
module's entry point and the cp_* interface."""

from __future__ import annotations

import platform
import re
import shutil
import subprocess
import sysconfig

import pytest

from clearpages import _fast, _ffi_build, _native
from conftest import ROOT

pytestmark = pytest.mark.skipif(shutil.which("readelf") is None,
                                reason="readelf (binutils) is not installed")

SO = _native.__file__
#: Both extensions: the cffi module and the CPython entry beside it.
SOS = pytest.mark.parametrize("so", [_native.__file__, _fast.__file__],
                              ids=["_native", "_fast"])
IS_X86_64 = platform.machine().lower() in ("x86_64", "amd64")


def readelf(*args: str) -> str:
    return subprocess.run(["readelf", "-W", *args], check=True, capture_output=True,
                          text=True).stdout


def _segments(so=SO):
    rows = []
    for ln in readelf("-l", so).splitlines():
        parts = ln.split()
        if parts and parts[0] in ("LOAD", "GNU_STACK", "GNU_RELRO"):
            # Type Offset VirtAddr PhysAddr FileSiz MemSiz Flg... Align
            rows.append((parts[0], "".join(parts[6:-1])))
    return rows


@SOS
def test_stack_is_not_executable(so):
    stack = [flags for kind, flags in _segments(so) if kind == "GNU_STACK"]
    assert stack, "no PT_GNU_STACK: the loader would make the stack executable"
    assert "E" not in stack[0] and "W" in stack[0], stack


@SOS
def test_no_segment_is_writable_and_executable(so):
    loads = [flags for kind, flags in _segments(so) if kind == "LOAD"]
    assert loads
    for flags in loads:
        assert not ("W" in flags and "E" in flags), loads


@SOS
def test_no_text_relocations(so):
    dynamic = readelf("-d", so)
    assert "TEXTREL" not in dynamic
    assert not re.search(r"\(FLAGS\).*TEXTREL", dynamic)


@SOS
def test_exports_only_the_module_and_its_interface(so):
    if shutil.which("nm") is None:
        pytest.skip("nm (binutils) is not installed")
    out = subprocess.run(["nm", "-D", "--defined-only", so], capture_output=True,
                         text=True, check=True).stdout
    names = [ln.split()[-1] for ln in out.splitlines() if ln.strip()]
    stray = [n for n in names if not (n.startswith("PyInit_") or n.startswith("cp_")
                                      or n in ("_init", "_fini"))]
    assert not stray, stray


def _has_cet_note(path: str) -> bool:
    notes = readelf("-n", path)
    return bool(re.search(r"x86 feature:.*IBT", notes) and re.search(r"x86 feature:.*SHSTK", notes))


@pytest.mark.skipif(not IS_X86_64, reason="IBT/SHSTK are x86-64 properties")
@SOS
def test_extension_is_marked_ibt_and_shstk(so):
    """The linker marks the output only if every input object is marked; the
    native build links without the toolchain's crti/crtn (unmarked on many
    distributions), so the module itself must carry the property."""
    from clearpages._native import lib

    if not hasattr(lib, "cp_clear_rep_stosb"):
        pytest.skip("a portable build is linked with the toolchain's start files")
    assert _has_cet_note(so), readelf("-n", so)


@pytest.mark.build
@pytest.mark.skipif(not IS_X86_64 or shutil.which("gcc") is None,
                    reason="needs gcc on x86-64")
def test_package_objects_are_cet_clean(tmp_path):
    """Every source of the extension, linked alone (no start files), gives a
    shared object with the IBT/SHSTK property: nothing of ours drops it."""
    srcs = [str(ROOT / s) for s in _ffi_build.sources(False)]
    out = tmp_path / "objs.so"
    cmd = (["gcc", "-shared", "-fPIC", "-nostartfiles", "-I", str(ROOT / "csrc" / "core"),
            "-I", str(ROOT / "asm"), "-I", sysconfig.get_paths()["include"]]
           + _ffi_build.COMPILE_ARGS + srcs + ["-Wl,-z,noexecstack", "-o", str(out)])
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert _has_cet_note(str(out)), readelf("-n", str(out))
