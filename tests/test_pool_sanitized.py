"""The pool's core (csrc/core/pool.c) under AddressSanitizer and
UndefinedBehaviorSanitizer: tests/c/test_pool_reuse.c, threads churning
blocks of a pool that grows under them, with each way of reuse.  A bad
access, a leak or undefined behaviour fails the run."""

from __future__ import annotations

import os
import platform
import shutil
import subprocess

import pytest
from conftest import ROOT

from clearpages._native import lib

pytestmark = [
    pytest.mark.build,
    pytest.mark.skipif(shutil.which("gcc") is None, reason="gcc is not installed"),
    pytest.mark.skipif(platform.system() != "Linux", reason="the pool is Linux's"),
]

CORE = ("pool.c", "region.c", "scan.c", "inject.c", "fork.c", "jobs.c", "untouched.c",
        "adapt.c", "policy.c", "cpu.c")


@pytest.fixture(scope="module")
def harness(tmp_path_factory):
    exe = tmp_path_factory.mktemp("pool_asan") / "test_pool_reuse"
    cmd = ["gcc", "-O1", "-g", "-fsanitize=address,undefined", "-fno-omit-frame-pointer",
           "-fno-sanitize-recover=all", "-pthread", "-I", str(ROOT / "csrc/core"),
           "-I", str(ROOT / "asm"), str(ROOT / "tests/c/test_pool_reuse.c"),
           *(str(ROOT / "csrc/core" / f) for f in CORE), "-lm", "-o", str(exe)]
    built = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    if built.returncode and "asan" in built.stderr.lower():
        pytest.skip("gcc here has no AddressSanitizer runtime: " + built.stderr[-300:])
    assert built.returncode == 0, built.stderr
    return exe


@pytest.mark.parametrize("reuse", ["auto", "cold", "hot"])
def test_the_pool_under_the_sanitizers(harness, reuse):
    code = {"auto": lib.CP_POOL_REUSE_AUTO, "cold": lib.CP_POOL_REUSE_COLD,
            "hot": lib.CP_POOL_REUSE_HOT}[reuse]
    env = dict(os.environ, ASAN_OPTIONS="detect_leaks=1:halt_on_error=1",
               UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1")
    run = subprocess.run([str(harness), str(code)], capture_output=True, text=True,
                         timeout=600, env=env)
    assert run.returncode == 0, run.stdout + run.stderr[-4000:]
    words = run.stdout.split()
    got = dict(zip(words[::2], (int(w) for w in words[1::2])))
    assert got["acquires"] > 0 and got["grows"] >= 2
    if reuse == "cold":
        assert got["release_zeroed"] == 0 and got["trials"] == 0
    elif reuse == "hot":
        assert got["release_zeroed"] == got["acquires"]
    else:
        assert got["release_zeroed"] > 0 and got["trials"] >= 1
