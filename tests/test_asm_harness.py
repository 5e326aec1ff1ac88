"""The standalone C harness for the assembly routines (tests/c/test_routines.c):
every length 0..600 at 64 alignments with guards, buffers ending at a
PROT_NONE page, callee-saved registers checked around each call."""

from __future__ import annotations

import platform
import shutil
import subprocess
from pathlib import Path

import pytest

import clearpages as cp
from clearpages import _dispatch
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
    assert status.get("clzero(emulated)") == "ok"
    # Every routine this CPU and OS can run was exercised, and only those
    # skipped that need a feature it lacks.  Judged from the CPU, not from
    # methods(): the harness assembles asm/ itself, so a portable build of
    # the package (or CLEARPAGES_DISABLE) does not change what it runs.
    features = _cpu_features()
    for r in cp.ROUTINES:
        if r.name == "libc":
            continue
        want = "ok" if r.requires <= features else "SKIP"
        assert status.get(r.name) == want, (r.name, run.stdout)


def _cpu_features() -> frozenset[str]:
    """The OS-enabled features: the package's CPUID probe, or, in a portable
    build (which has none), the kernel's flags, which the probe agrees with
    (test_cpu.py checks that)."""
    raw = _dispatch.state().raw_cpu
    if raw.is_x86:
        return raw.features
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        text = ""
    for line in text.splitlines():
        if line.startswith("flags"):
            return frozenset(line.split(":", 1)[1].split())
    pytest.skip("a portable build has no CPUID probe and /proc/cpuinfo no flags: "
                "which routines this CPU runs is unknown")
