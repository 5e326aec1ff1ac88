"""The package's layout is its dependency graph: the library (clearpages/)
never imports the measuring tools (clearpages/tools/), bench/ reaches the
package through public names only, and the C files of csrc/core call one
another without a circle."""

from __future__ import annotations

import ast
import platform
import shutil
import subprocess
from pathlib import Path

import pytest
from conftest import ROOT, run_python

import clearpages

PKG = Path(clearpages.__file__).resolve().parent
# python -m clearpages runs the command line: the one library file that may.
ENTRY = {"__main__.py"}


def _imports(path: Path, package: str) -> set[str]:
    """The absolute names of the modules a source file imports."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                parts = package.split(".")
                base = ".".join(parts[:len(parts) - node.level + 1])
                mod = base + ("." + node.module if node.module else "")
            else:
                mod = node.module or ""
            out.add(mod)
            # `from . import tools` names a module too
            out.update("%s.%s" % (mod, alias.name) for alias in node.names)
    return out


def _is_tool(name: str) -> bool:
    return name == "clearpages.tools" or name.startswith("clearpages.tools.")


LIBRARY = sorted(p for p in PKG.glob("*.py") if p.name not in ENTRY)


@pytest.mark.parametrize("path", LIBRARY, ids=lambda p: p.name)
def test_library_module_imports_no_tool(path):
    tools = sorted(n for n in _imports(path, "clearpages") if _is_tool(n))
    assert not tools, "%s imports %s" % (path.name, ", ".join(tools))


def test_the_checks_see_a_tool_import(tmp_path):
    """The static check would catch each way of writing the import."""
    for line in ("from .tools import cli", "from . import tools", "import clearpages.tools.cli",
                 "from clearpages.tools.measure import Buffer", "from .tools.cli import main"):
        src = tmp_path / "m.py"
        src.write_text("def f():\n    %s\n" % line)
        assert any(_is_tool(n) for n in _imports(src, "clearpages")), line


def test_tools_are_a_subpackage():
    """No tool module is left beside the library's (a tool imports the
    library, so it would be one import away from being loaded by it)."""
    tools = {p.stem for p in (PKG / "tools").glob("*.py")}
    assert {"cli", "measure", "calibrate", "profile", "programs", "report", "output"} <= tools
    flat = {p.stem.lstrip("_") for p in PKG.glob("*.py")}
    assert not (flat & (tools - {"__init__"})), flat & tools


def test_using_the_library_loads_no_tool():
    r = run_python(
        "import sys, clearpages as cp\n"
        "b = bytearray(b'x' * 8192)\n"
        "cp.clear(b)\n"
        "assert cp.is_zero(b) and cp.plan(4096).method\n"
        "with cp.Region(4096) as r:\n"
        "    cp.clear(r)\n"
        "cp.nonzero_pages(b)\n"
        "loaded = sorted(m for m in sys.modules if m.startswith('clearpages.tools'))\n"
        "print('tools loaded:', loaded)\n")
    assert r.returncode == 0, r.stderr
    assert "tools loaded: []" in r.stdout, r.stdout


def test_python_m_clearpages_runs_the_command_line():
    r = run_python("import runpy, sys\n"
                   "sys.argv = ['clearpages', '--help']\n"
                   "runpy.run_module('clearpages', run_name='__main__')\n")
    assert r.returncode == 0 and "python -m clearpages" in r.stdout, r.stderr


BENCH = sorted((ROOT / "bench").glob("*.py"))


@pytest.mark.skipif(not BENCH, reason="bench/ is not beside these tests")
@pytest.mark.parametrize("path", BENCH, ids=lambda p: p.name)
def test_bench_imports_public_names_only(path):
    private = sorted(n for n in _imports(path, "bench")
                     if n.startswith("clearpages.") and any(
                         part.startswith("_") for part in n.split(".")[1:]))
    assert not private, "%s imports %s" % (path.name, ", ".join(private))


CORE = sorted((ROOT / "csrc" / "core").glob("*.c"))
# Elsewhere the core builds as the portable build does (no CPUID, no asm).
PORTABLE = [] if platform.machine().lower() in ("x86_64", "amd64") else ["-DCP_PORTABLE=1"]


def _symbols(obj: Path) -> tuple[set[str], set[str]]:
    """(defined, undefined) global symbols of an object file."""
    out = subprocess.run(["nm", str(obj)], capture_output=True, text=True, check=True).stdout
    defined, undefined = set(), set()
    for line in out.splitlines():
        f = line.split()
        if len(f) == 3 and f[1] in "TDBRC":
            defined.add(f[2])
        elif len(f) == 2 and f[0] == "U":
            undefined.add(f[1])
    return defined, undefined


def _circles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Each file that can reach itself, with one path back to it."""
    found = []
    for start in sorted(edges):
        stack, seen = [(start, [start])], set()
        while stack:
            node, path = stack.pop()
            for nxt in sorted(edges[node]):
                if nxt == start:
                    found.append(path + [start])
                    stack = []
                    break
                if nxt not in seen:
                    seen.add(nxt)
                    stack.append((nxt, path + [nxt]))
    return found


def test_circle_finder_finds_one():
    assert _circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}})[0] == ["a", "b", "c", "a"]
    assert _circles({"a": {"b"}, "b": set(), "c": {"a", "b"}}) == []


@pytest.mark.skipif(not CORE or shutil.which("gcc") is None or shutil.which("nm") is None,
                    reason="needs the source tree (csrc/core), gcc and nm")
def test_core_files_call_each_other_without_a_circle(tmp_path):
    """A file of csrc/core that calls into another is above it; a circle
    (once adapt.c -> inject.c -> jobs.c -> adapt.c, for a clock) would
    leave no order in which the core could be read or split."""
    syms = {}
    for src in CORE:
        obj = tmp_path / (src.stem + ".o")
        subprocess.run(["gcc", "-c", "-fPIC", "-O2", "-pthread", *PORTABLE,
                        "-I", str(ROOT / "csrc" / "core"), "-I", str(ROOT / "asm"),
                        str(src), "-o", str(obj)], check=True, capture_output=True)
        syms[src.name] = _symbols(obj)
    edges = {a: {b for b in syms if b != a and syms[a][1] & syms[b][0]} for a in syms}
    assert edges["jobs.c"], "the check saw no call between files"
    assert not _circles(edges), _circles(edges)
