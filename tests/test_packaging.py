"""What ships: the typing files, a stub that covers the native module, and C
and assembly sources that compile without a warning under -Wall -Wextra.
(The linked extension's stack, W^X and CET notes: test_hygiene.py.)"""

from __future__ import annotations

import ast
import platform
import re
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

import clearpages
from clearpages import _native
from clearpages._routines import ROUTINES

PKG = Path(clearpages.__file__).resolve().parent
ROOT = Path(__file__).resolve().parent.parent
SOURCES = (sorted((ROOT / "csrc" / "core").glob("*.c"))
           + sorted((ROOT / "csrc" / "pyext").glob("*.c"))
           + sorted((ROOT / "asm").glob("*.S")))

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


def test_fast_stub_matches_the_extension():
    from clearpages import _fast

    tree = ast.parse((PKG / "_fast.pyi").read_text())
    names = {n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.ClassDef))}
    names |= {n.target.id for n in tree.body
              if isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name)}
    public = {n for n in dir(_fast) if not n.startswith("__")}
    assert public == names, public ^ names


def test_stub_ffi_methods_exist():
    _, ffi_names = _stub_names()
    for name in ffi_names:
        assert hasattr(_native.ffi, name), name


# ---- the sources ------------------------------------------------------------

needs_sources = pytest.mark.skipif(
    not SOURCES or shutil.which("gcc") is None or not IS_X86_64,
    reason="needs the source tree (csrc/, asm/), gcc and an x86-64 machine")


@needs_sources
@pytest.mark.parametrize("source", SOURCES, ids=lambda p: "%s/%s" % (p.parent.name, p.name))
def test_source_compiles_without_warnings(source, tmp_path):
    """The build's own flags (-Wall -Wextra) plus -Werror: a warning fails."""
    from clearpages import _ffi_build

    obj = tmp_path / (source.stem + ".o")
    cmd = (["gcc", "-c", "-fPIC", "-Werror", "-I", str(ROOT / "csrc" / "core"),
            "-I", str(ROOT / "csrc" / "pyext"), "-I", str(ROOT / "asm"),
            "-I", sysconfig.get_paths()["include"]]
           + _ffi_build.COMPILE_ARGS + [str(source), "-o", str(obj)])
    done = subprocess.run(cmd, capture_output=True, text=True)
    assert done.returncode == 0 and not done.stderr, done.stderr


def test_license_is_spdx():
    """PEP 639: the SPDX expression and license-files (the table form is
    deprecated by setuptools and stops building after 2027-02-18)."""
    text = (ROOT / "pyproject.toml").read_text()
    assert 'license = "MIT"' in text and 'license-files = ["LICENSE"]' in text
    assert "setuptools>=77" in text


@pytest.mark.build
def test_wheel_build_prints_no_deprecation_warning(tmp_path):
    import setuptools

    if int(setuptools.__version__.split(".")[0]) < 77:
        pytest.skip("setuptools %s predates the SPDX license field" % setuptools.__version__)
    src = tmp_path / "src"
    shutil.copytree(ROOT, src, ignore=shutil.ignore_patterns(
        "build", "dist", "*.so", "__pycache__", ".git", "*.egg-info", "_native.c"))
    done = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps",
                           "--no-build-isolation", "-w", str(tmp_path / "dist"), "-v", "."],
                          cwd=src, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    out = done.stdout + done.stderr
    bad = [ln for ln in out.splitlines() if "deprecat" in ln.lower()]
    assert not bad, bad
    wheels = list((tmp_path / "dist").glob("clearpages-*.whl"))
    assert wheels
    with zipfile.ZipFile(wheels[0]) as whl:
        names = set(whl.namelist())
    assert {"clearpages/__main__.py", "clearpages/tools/__init__.py",
            "clearpages/tools/cli.py", "clearpages/tools/measure.py"} <= names


@pytest.mark.build
def test_editable_install_is_a_path_type_checkers_follow(tmp_path):
    """pip install -e: the wheel's .pth holds a directory, not an import
    hook (mypy reads path entries and runs no hooks), and that directory
    holds the package with its typing files."""
    src = tmp_path / "src"
    shutil.copytree(ROOT, src, ignore=shutil.ignore_patterns(
        "build", "dist", "*.so", "__pycache__", ".git", "*.egg-info", "_native.c"))
    done = subprocess.run(
        [sys.executable, "-c", "import setuptools.build_meta as b, sys; "
         "print(b.build_editable(sys.argv[1]))", str(tmp_path / "dist")],
        cwd=src, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    wheel = tmp_path / "dist" / done.stdout.strip().splitlines()[-1]
    with zipfile.ZipFile(wheel) as z:
        pth = [n for n in z.namelist() if n.endswith(".pth")]
        assert pth, z.namelist()
        lines = [ln for n in pth for ln in z.read(n).decode().splitlines() if ln.strip()]
    assert lines and not [ln for ln in lines if ln.startswith("import")], lines
    pkg = [Path(ln) / "clearpages" for ln in lines if (Path(ln) / "clearpages").is_dir()]
    assert len(pkg) == 1, lines
    for name in ("__init__.py", "py.typed", "_fast.pyi", "_native.pyi", "tools/cli.py"):
        assert (pkg[0] / name).is_file(), name
    # Nothing of the checkout but the package is put on the path.
    assert not [p for p in pkg[0].parent.iterdir() if p.name not in ("clearpages",)]


def test_the_oldest_versions_admitted_are_tested():
    """The numpy floor the extras admit is the one the workflow's oldest leg
    installs, on the oldest Python the package admits, and the one the
    README says is tested: raising one without the others fails here."""
    workflow = ROOT / ".github" / "workflows" / "ci.yml"
    if not workflow.exists():
        pytest.skip("the workflow is not beside these tests (a wheel's test run)")
    text = (ROOT / "pyproject.toml").read_text()
    floors = set(re.findall(r'"numpy>=([0-9.]+)"', text))
    assert len(floors) == 1, floors
    numpy = floors.pop()
    python = re.search(r'requires-python = ">=([0-9.]+)"', text).group(1)
    legs = re.findall(r'- python: "%s"\s+numpy: "([0-9.]+)"' % re.escape(python),
                      workflow.read_text())
    assert legs, "no workflow leg with a numpy version on Python %s" % python
    release = lambda v: tuple(int(x) for x in (v + ".0.0").split(".")[:3])
    assert [release(v) for v in legs] == [release(numpy)], (legs, numpy)
    readme = (ROOT / "README.md").read_text()
    assert re.search(r"numpy %s(?![0-9.]*[0-9])" % re.escape(legs[0]), readme), legs[0]
