"""What ships: the typing stub covers the native module, the extension has a
non-executable stack and control-flow-enforcement notes, and the C and
assembly sources compile without a warning under -Wall -Wextra."""

from __future__ import annotations

import ast
import platform
import re
import shutil
import subprocess
import sysconfig
import sysconfig
from pathlib import Path

import pytest

import clearpages
from clearpages import _native
from clearpages._routines import ROUTINES

PKG = Path(clearpages.__file__).resolve().parent
ROOT = Path(__file__).resolve().parent.parent
SOURCES = sorted((ROOT / "csrc").glob("*.c")) + sorted((ROOT / "asm").glob("*.S"))

IS_X86_64 = platform.machine().lower() in ("x86_64", "amd64")
NATIVE_BUILD = hasattr(_native.lib, "cp_clear_rep_stosb")


def _stub_names() -> tuple[set[str], set[str]]:
    """(names declared on the stub's lib class, names declared on its FFI class)."""
    tree = ast.parse((PKG / "_native.pyi").read_text())
    found: dict[str, set[str]] = {}
    for node in tree.body:
        if isinstance(node, ast.ClassDef):
            names = set()
            for item in node.body:
                if isinstance(item, ast.FunctionDef):
                    names.add(item.name)
                elif isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name):
                    names.add(item.target.id)
            found[node.name] = names
    return found["_Lib"], found["FFI"]


def test_typing_files_ship_with_the_package():
    assert (PKG / "py.typed").is_file()
    assert (PKG / "_native.pyi").is_file()


def test_stub_declares_everything_the_native_module_has():
    lib_names, _ = _stub_names()
    missing = {n for n in dir(_native.lib) if not n.startswith("_")} - lib_names
    assert not missing, "add to clearpages/_native.pyi: %s" % ", ".join(sorted(missing))


def test_stub_declares_nothing_the_native_module_lacks():
    lib_names, _ = _stub_names()
    # A portable build lacks the assembly routines (and their variants); the
    # stub declares them all.
    portable_only_missing = {n for n in lib_names if n.startswith("cp_clear_")}
    possible = set(dir(_native.lib)) | {r.symbol for r in ROUTINES} | portable_only_missing
    extra = lib_names - possible
    assert not extra, "not in the native module: %s" % ", ".join(sorted(extra))


def test_stub_ffi_methods_exist():
    _, ffi_names = _stub_names()
    for name in ffi_names:
        assert hasattr(_native.ffi, name), name


# ---- the built extension --------------------------------------------------

needs_readelf = pytest.mark.skipif(shutil.which("readelf") is None,
                                   reason="readelf (binutils) is not installed")


def _readelf(*args: str) -> str:
    return subprocess.run(["readelf", "-W", *args], check=True, capture_output=True,
                          text=True).stdout


@needs_readelf
def test_extension_stack_is_not_executable():
    segments = _readelf("-l", _native.__file__)
    stack = [ln for ln in segments.splitlines() if "GNU_STACK" in ln]
    assert stack, "no PT_GNU_STACK: the loader would make the stack executable"
    flags = stack[0].split()[-2]
    assert "E" not in flags, stack[0]


def _toolchain_has_cet() -> bool:
    """Whether this toolchain's own start-up objects carry the IBT/SHSTK
    property: the linker marks the output only when every input has it."""
    gcc = shutil.which("gcc") or shutil.which("cc")
    if gcc is None:
        return False
    crti = subprocess.run([gcc, "-print-file-name=crti.o"], capture_output=True,
                          text=True).stdout.strip()
    if not crti or not Path(crti).is_file():
        return False
    notes = _readelf("-n", crti)
    return "IBT" in notes and "SHSTK" in notes


@needs_readelf
@pytest.mark.skipif(not (IS_X86_64 and NATIVE_BUILD), reason="CET notes are x86-64 only")
def test_extension_is_marked_ibt_and_shstk():
    if not _toolchain_has_cet():
        pytest.skip("this toolchain's crti.o has no IBT/SHSTK property, so no linked "
                    "object can carry it (the sources are checked below)")
    notes = _readelf("-n", _native.__file__)
    assert re.search(r"x86 feature:.*IBT", notes), notes
    assert re.search(r"x86 feature:.*SHSTK", notes), notes


# ---- the sources ------------------------------------------------------------

needs_sources = pytest.mark.skipif(
    not SOURCES or shutil.which("gcc") is None or not IS_X86_64,
    reason="needs the source tree (csrc/, asm/), gcc and an x86-64 machine")


@needs_readelf
@needs_sources
@pytest.mark.parametrize("source", SOURCES, ids=lambda p: "%s/%s" % (p.parent.name, p.name))
def test_source_compiles_cleanly_with_cet_and_noexec_stack(source, tmp_path):
    from clearpages import _ffi_build

    obj = tmp_path / (source.stem + ".o")
    cmd = (["gcc", "-c", "-fPIC", "-Werror", "-I", str(ROOT / "csrc"), "-I", str(ROOT / "asm"),
            "-I", sysconfig.get_paths()["include"]]
           + _ffi_build.COMPILE_ARGS + [str(source), "-o", str(obj)])
    done = subprocess.run(cmd, capture_output=True, text=True)
    assert done.returncode == 0 and not done.stderr, done.stderr
    notes = _readelf("-n", str(obj))
    assert "IBT" in notes and "SHSTK" in notes, notes
    sections = _readelf("-S", str(obj))
    stack = [ln for ln in sections.splitlines() if ".note.GNU-stack" in ln]
    assert stack, "no .note.GNU-stack section"
    # After the type: address, offset, size, entry size, [flags], link, info,
    # alignment.  An X among the flags asks for an executable stack.
    fields = stack[0].split("PROGBITS", 1)[1].split()
    assert "X" not in "".join(fields[4:-3]), stack[0]
