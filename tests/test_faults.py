"""Failures made to happen: faults in worker threads, threads that cannot
start, moves that fail half way, kernels without MADV_POPULATE_WRITE, CPUs
without TOPOEXT.  Races that would need luck are made deterministic with
the native fault injection (csrc/inject.h): the Nth pass through a step
fails, or a foreign mapping appears where another thread could map one."""

from __future__ import annotations

import errno
import signal

import pytest
from conftest import run_python

import clearpages as cp
from clearpages import _core
from clearpages._native import ffi, lib

KiB = 1 << 10
MiB = 1 << 20


@pytest.fixture
def inject():
    """inject(site, nth, err): arm one injection site for this test."""
    def arm(site, nth=1, err=errno.EAGAIN):
        lib.cp_inject_arm(site, nth, err)
    yield arm
    squat = lib.cp_inject_squat()
    lib.cp_inject_arm(lib.CP_INJECT_NONE, 0, 0)
    if squat:
        lib.cp_region_unmap(squat, 4096)


# ---- item: a fault in a worker thread is reported like any other --------------

_TRUNCATED = r"""
import faulthandler, mmap, sys, tempfile
import clearpages as cp
from clearpages._native import lib
faulthandler.enable()
f = tempfile.TemporaryFile()
n = 64 << 20
f.truncate(n)
mm = mmap.mmap(f.fileno(), n)
f.truncate(0)           # the file shrinks under the mapping: every page faults
print("clearing", flush=True)
if WORKER_ONLY:         # the first slice's work all goes to the worker
    lib.cp_inject_arm(lib.CP_INJECT_CALLER_IDLE, 1, 1)
cp.clear(mm, method="libc", threads=2)
print("survived", flush=True)
"""


@pytest.mark.parametrize("worker_only", [True, False])
def test_worker_fault_is_reported_by_faulthandler(worker_only):
    """clear(mm, threads=2) of a file mapping truncated underneath: the
    process dies of SIGBUS (as a main-thread clear would), whichever thread
    faults first, and faulthandler says so.  A worker that blocked SIGBUS
    died silently."""
    r = run_python("WORKER_ONLY = %r\n" % worker_only + _TRUNCATED, timeout=60)
    assert r.returncode == -signal.SIGBUS, (r.returncode, r.stdout, r.stderr)
    assert "clearing" in r.stdout and "survived" not in r.stdout
    assert "Fatal Python error: Bus error" in r.stderr, r.stderr


# ---- item: a thread that cannot start is an error, not a silent "done" --------

def _job(n):
    buf = bytearray(b"\x01" * n)
    c = ffi.from_buffer(buf)
    job = lib.cp_job_new(ffi.new("char *[]", [ffi.cast("char *", c)]),
                         ffi.new("size_t[]", [n]), 1)
    assert job != ffi.NULL
    return buf, c, job


def test_job_run_returns_minus_one_when_a_thread_cannot_start(inject):
    _buf, _c, job = _job(4 * MiB)   # the buffer and its export outlive the job
    try:
        assert lib.cp_job_configure(job, _core._state.job_pointer["libc"], 64 * KiB, 3, 0) == 0
        inject(lib.CP_INJECT_THREAD_START, 2, errno.EAGAIN)    # the second worker
        assert lib.cp_job_run(job, 10**9) == -1
        assert lib.cp_inject_fired() == 1
        assert lib.cp_job_error(job) == errno.EAGAIN
        assert lib.cp_job_run(job, 10**9) == -1                # and stays failed
    finally:
        lib.cp_job_free(job)


@pytest.mark.parametrize("call", ["clear", "clear_many", "clear_pages"])
def test_thread_start_failure_raises(inject, call):
    n = 8 * MiB
    buf = bytearray(b"\x01" * n)
    inject(lib.CP_INJECT_THREAD_START, 1, errno.EAGAIN)
    try:
        if call == "clear":
            cp.clear(buf, threads=2)
        elif call == "clear_many":
            cp.clear_many([buf, bytearray(4096)], threads=4)
        else:
            cp.clear_pages(buf, list(range(n // 4096)), threads=2)
    except OSError as e:
        assert e.errno == errno.EAGAIN
        assert "worker thread" in str(e) and "partly cleared" in str(e)
    else:
        pytest.fail("no error")
    buf.extend(b"x")        # no export left behind
    # Disarmed (it fires once): the same call now completes.
    cp.clear(buf, threads=2)
    assert not any(buf)


def test_threads_start_under_a_tight_address_space_limit():
    """Workers have small stacks: eight of them start where eight 8 MiB
    default stacks would not fit under RLIMIT_AS."""
    code = r"""
import resource
import clearpages as cp
buf = bytearray(b"\x01" * (256 << 20))
cp.clear(bytearray(4096))
with open("/proc/self/status") as f:
    vm = [int(l.split()[1]) * 1024 for l in f if l.startswith("VmSize:")][0]
resource.setrlimit(resource.RLIMIT_AS, (vm + (24 << 20), resource.RLIM_INFINITY))
# The limit is tight: fewer than eight threads with default stacks fit.
import threading
ev = threading.Event()
ts = []
try:
    for _ in range(8):
        t = threading.Thread(target=ev.wait)
        t.start()
        ts.append(t)
except RuntimeError:
    pass
ev.set()
for t in ts:
    t.join()
assert len(ts) < 8, len(ts)
cp.clear(buf, method="libc", threads=8)
assert not any(buf[::4096]) and buf[-1] == 0
print("ok")
"""
    r = run_python(code, timeout=60)
    assert r.returncode == 0 and r.stdout.strip() == "ok", (r.stdout, r.stderr)
