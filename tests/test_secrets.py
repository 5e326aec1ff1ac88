"""Regions for secrets: kept out of swap, core dumps and forked children."""

from __future__ import annotations

import errno
import os
import shutil
import textwrap

import pytest
from conftest import run_python

import clearpages as cp
from clearpages import _region
from clearpages._native import lib

KiB, MiB = 1 << 10, 1 << 20


def vm_flags(r: cp.Region) -> frozenset[str]:
    return r.backing.vm_flags


def test_default_regions_are_ordinary_memory():
    with cp.Region(64 * KiB) as r:
        assert (r.lock, r.dump, r.fork) == (False, True, "keep")
        assert not vm_flags(r) & {"lo", "dd", "wf", "dc"}


@pytest.mark.parametrize("kw, flags", [
    ({"lock": True}, {"lo"}),
    ({"dump": False}, {"dd"}),
    ({"fork": "wipe"}, {"wf"}),
    ({"fork": "drop"}, {"dc"}),
    ({"lock": True, "dump": False, "fork": "wipe"}, {"lo", "dd", "wf"}),
])
def test_options_reach_the_kernel_and_survive_resize_and_move(kw, flags):
    with cp.Region(64 * KiB, **kw) as r:
        assert flags <= vm_flags(r)
        r.resize(8 * MiB)                 # grows, in place or moved
        assert flags <= vm_flags(r)
        r.move("pmd")
        assert flags <= vm_flags(r)
        r.resize(4 * KiB)
        assert flags <= vm_flags(r)


def test_a_locked_region_is_cleared_in_place_by_discard():
    with cp.Region(16 * KiB, lock=True) as r:
        r.view()[:] = b"\x42" * r.size
        r.clear(method="discard")
        assert not any(r.view())
        r.view()[:] = b"\x42" * r.size
        cp.clear_pages(r, [1, 3], method="discard")
        v = r.view()
        assert not any(v[4096:8192]) and not any(v[12288:]) and all(v[:4096])
        v.release()


_FORK = """
import os, signal, clearpages as cp
r = cp.Region(4096, fork=%r)
r.view()[:6] = b"secret"
pid = os.fork()
if pid == 0:
    try:
        data = bytes(r.view()[:6])
    except ValueError as e:     # nothing mapped there: the Region reads as closed
        data = b"closed" if "fork" in str(e) else str(e).encode()
    os.write(1, data)
    os._exit(0)
_, status = os.waitpid(pid, 0)
print()
print("signal" if os.WIFSIGNALED(status) else "exit", os.WTERMSIG(status)
      if os.WIFSIGNALED(status) else os.WEXITSTATUS(status))
"""


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
@pytest.mark.parametrize("fork, child_reads, ends", [
    ("keep", "secret", "exit 0"),
    ("wipe", "\0" * 6, "exit 0"),
    ("drop", "closed", "exit 0"),         # nothing mapped there: closed, never SIGSEGV
])
def test_what_a_forked_child_sees(fork, child_reads, ends):
    r = run_python(_FORK % fork)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.split("\n")
    assert lines[0] == child_reads and lines[1] == ends


@pytest.mark.parametrize("kw, kind, match", [
    ({"lock": 1}, TypeError, "lock takes True or False"),
    ({"dump": "no"}, TypeError, "dump takes True or False"),
    ({"fork": "copy"}, ValueError, "fork must be 'keep'.*'wipe'.*'drop'"),
    ({"fork": None}, TypeError, "fork must be"),
])
def test_bad_options_are_refused(kw, kind, match):
    with pytest.raises(kind, match=match):
        cp.Region(4096, **kw)


def test_a_refused_lock_says_the_limit_and_how_to_raise_it():
    e = _region._protect_error(errno.ENOMEM, lib.CP_PROTECT_LOCK, 64 * MiB)
    text = str(e)
    assert e.errno == errno.ENOMEM
    assert "cannot lock a region of 64 MiB in memory" in text
    assert "RLIMIT_MEMLOCK" in text and "ulimit -l" in text and "limits.conf" in text


_LIMITED = """
import resource, clearpages as cp
resource.setrlimit(resource.RLIMIT_MEMLOCK, (64 << 10, 64 << 10))
try:
    cp.Region(1 << 20, lock=True)
except OSError as e:
    print(e)
with cp.Region(32 << 10, lock=True) as r:
    try:
        r.resize(1 << 20)
    except OSError as e:
        print(e)
    print(r.size)
"""


def test_the_systems_lock_limit_is_an_error_with_the_fix():
    code = textwrap.dedent(_LIMITED)
    if os.geteuid() == 0:
        # root locks past any limit (CAP_IPC_LOCK): drop the capability.
        setpriv = shutil.which("setpriv")
        if setpriv is None:
            pytest.skip("running as root, and no setpriv to drop CAP_IPC_LOCK")
        r = run_python("import subprocess, sys; sys.exit(subprocess.call([%r, "
                       "'--inh-caps=-ipc_lock', '--bounding-set=-ipc_lock', sys.executable, "
                       "'-c', %r]))" % (setpriv, code))
    else:
        r = run_python(code)
    if "Operation not permitted" in r.stderr and "setpriv" in r.stderr:
        pytest.skip("setpriv cannot drop capabilities here: %s" % r.stderr.strip())
    assert r.returncode == 0, r.stderr
    out = r.stdout.splitlines()
    assert "cannot lock a region of 1 MiB in memory" in out[0]
    assert "may lock 64 KiB (RLIMIT_MEMLOCK)" in out[0] and "ulimit -l" in out[0]
    assert "the locked region grown to 1 MiB" in out[1] and "RLIMIT_MEMLOCK" in out[1]
    assert out[2] == str(32 << 10)        # the failed grow left it as it was


def test_every_option_is_in_the_signature():
    import inspect

    params = inspect.signature(cp.Region).parameters
    assert {"lock", "dump", "fork"} <= set(params)
    assert params["fork"].default == "keep" and params["dump"].default is True
