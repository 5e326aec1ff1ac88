"""The standalone C harness for the assembly routines (tests/c/test_routines.c):
every length 0..600 at 64 alignments with guards, buffers ending at a
PROT_NONE page, callee-saved registers checked around each call."""

from __future__ import annotations

import platform
import shutil
import subprocess

import pytest

import clearpages as cp
from conftest import ROOT

pytestmark = [
    pytest.mark.build,
    pytest.mark.skipif(shutil.which("gcc") is None, reason="gcc is not installed"),
    pytest.mark.skipif(platform.machine().lower() not in ("x86_64", "amd64"),
                       reason="the routines are x86-64 assembly"),
]


@pytest.fixture(scope="module")
def harness(tmp_path_factory):
    exe = tmp_path_factory.mktemp("harness") / "test_routines"
    cmd = ["gcc", "-O2", "-Wall", "-Wextra", "-fcf-protection=full", "-I", str(ROOT / "asm"),
           str(ROOT / "tests/c/test_routines.c"), str(ROOT / "tests/c/clzero_emulated.S"),
           *sorted(str(p) for p in (ROOT / "asm").glob("*.S")), "-o", str(exe)]
    built = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert built.returncode == 0, built.stderr
    assert "warning" not in built.stderr, built.stderr
    return exe


def test_harness_passes(harness):
    run = subprocess.run([str(harness)], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stdout + run.stderr
    lines = run.stdout.splitlines()
    assert lines[-1].startswith("PASSED"), run.stdout
    status = {}
    for ln in lines[:-1]:
        word, name = ln.split()[:2]
        status[name] = word
    # Every routine this CPU can run was exercised; only those it lacks skipped.
    for name in cp.ALL_METHODS:
        if name == "libc":
            continue
        if name in cp.methods():
            assert status.get(name) == "ok", (name, run.stdout)
        elif cp.cpu().disabled.isdisjoint(next(r for r in cp.ROUTINES
                                                if r.name == name).requires):
            assert status.get(name) == "SKIP", (name, run.stdout)
    assert status.get("clzero(emulated)") == "ok"
