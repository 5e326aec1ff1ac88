"""Failures made to happen: faults in worker threads, threads that cannot
start, moves that fail half way, kernels without MADV_POPULATE_WRITE, CPUs
without TOPOEXT.  Races that would need luck are made deterministic with
the native fault injection (csrc/core/inject.h): the Nth pass through a step
fails, or a foreign mapping appears where another thread could map one."""

from __future__ import annotations

import errno
import mmap
import os
import signal

import pytest
from conftest import not_under_sanitizers, run_python

import clearpages as cp
from clearpages import _dispatch
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


@not_under_sanitizers("its own SIGBUS handler reports the fault and exits 1, before "
                      "faulthandler sees it")
@pytest.mark.parametrize("worker_only", [True, False])
def test_worker_fault_is_reported_by_faulthandler(worker_only):
    """clear(mm, threads=2) of a file mapping truncated underneath: the
    process dies of SIGBUS (as a main-thread clear would), whichever thread
    faults first, and faulthandler says so.  A worker that blocked SIGBUS
    died silently."""
    reports = []
    for _ in range(1 if worker_only else 3):
        r = run_python("WORKER_ONLY = %r\n" % worker_only + _TRUNCATED, timeout=60)
        assert r.returncode == -signal.SIGBUS, (r.returncode, r.stdout, r.stderr)
        assert "clearing" in r.stdout and "survived" not in r.stdout
        reports.append(r.stderr)
        if "Fatal Python error" in r.stderr:
            break
    if worker_only:
        assert "Fatal Python error: Bus error" in reports[-1], reports
        assert "most recent call first" in reports[-1], reports
    else:
        # Both threads fault at once here: faulthandler reports the first but
        # has put the default action back before it writes, so the second
        # one's fault can cut the report short (or, rarely, before its first
        # word: hence a few tries).
        assert "Fatal Python error" in reports[-1], reports


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
        assert lib.cp_job_configure(job, _dispatch.state().job_pointer["libc"], 64 * KiB, 3, 0) == 0
        inject(lib.CP_INJECT_THREAD_START, 2, errno.EAGAIN)    # the second worker
        assert lib.cp_job_run(job, 10**9) == -1
        assert lib.cp_inject_fired(lib.CP_INJECT_THREAD_START) == 1
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


# ---- item: a failed move never takes or unmaps another thread's mapping ------

PIECE = 16 * KiB


def _free(address, size):
    """[address, address + size) is unmapped (checked by reserving it)."""
    if lib.cp_region_reserve_at(address, size) != 0:
        return False
    lib.cp_region_unmap(address, size)
    return True


def _pieced_region(pieces=4):
    """A 4 KiB-page Region that moves piece by piece, as a grown hugetlb
    region does, with a known pattern."""
    r = cp.Region(pieces * PIECE)
    r._piece = lambda: PIECE
    with r.view() as v:
        v[:] = bytes(range(256)) * (len(v) // 256)
    return r


def _pattern_kept(r):
    with r.view() as v:
        return bytes(v) == bytes(range(256)) * (len(v) // 256)


def _far(address: int) -> int:
    """An address 64 GiB away, inside the 47-bit user address space whatever
    the layout (above, or below when the region sits near the top)."""
    return address + (1 << 36) if address + (2 << 36) < (1 << 47) else address - (1 << 36)


@pytest.mark.parametrize("how", ["move", "move_to"])
def test_failed_piecewise_move_puts_every_piece_back(inject, how):
    r = _pieced_region()
    before = r.address
    inject(lib.CP_INJECT_MOVE_PIECE, 3, errno.ENOMEM)      # two pieces moved, then a failure
    with pytest.raises(OSError):
        if how == "move":
            r.move("pte")
        else:
            r.move_to(_far(before))
    assert lib.cp_inject_fired(lib.CP_INJECT_MOVE_PIECE) == 1
    assert not r.closed and r.address == before and _pattern_kept(r)
    r.resize(8 * PIECE)                 # still a working region
    with r.view() as v:
        assert bytes(v[:4 * PIECE]) == bytes(range(256)) * (4 * PIECE // 256)
    r.close()


@pytest.mark.parametrize("how", ["move", "move_to"])
def test_piece_whose_place_was_taken_is_not_forced_back(inject, how):
    """While a piece was away another thread mapped into its old place: the
    rollback must not MREMAP_FIXED over that mapping, and the Region must
    not re-adopt a range it no longer owns: it is closed, with the reason."""
    r = _pieced_region()
    before, size = r.address, r.size
    inject(lib.CP_INJECT_MOVE_PIECE, 3, errno.ENOMEM)
    inject(lib.CP_INJECT_SQUAT_SOURCE, 2)   # the first piece's old place
    with pytest.raises(OSError, match="Region is closed"):
        if how == "move":
            r.move("pte")
        else:
            r.move_to(_far(before))
    squat = lib.cp_inject_squat()
    assert squat == before, (hex(squat), hex(before))
    # The foreign mapping is intact...
    assert bytes(ffi.buffer(ffi.cast("char *", squat), 4096)) == b"\x5a" * 4096
    # ...and nothing else of the old range is mapped: what came back was unmapped.
    assert _free(before + 4096, size - 4096)
    assert r.closed
    with pytest.raises(ValueError, match="could not put its memory back"):
        r.view()
    r.close()                   # closing a lost Region is allowed, and a no-op
    if how == "move_to":
        assert _free(_far(before), size)


def test_failed_rollback_is_checked(inject):
    r = _pieced_region()
    before, size = r.address, r.size
    inject(lib.CP_INJECT_MOVE_PIECE, 4, errno.ENOMEM)
    inject(lib.CP_INJECT_ROLLBACK, 2, errno.ENOMEM)
    with pytest.raises(OSError, match="Region is closed"):
        r.move("pud")
    assert r.closed and _free(before, size)


def test_failed_single_move_keeps_the_region(inject):
    r = cp.Region(64 * KiB)
    with r.view() as v:
        v[:] = b"\x33" * len(v)
    before = r.address
    inject(lib.CP_INJECT_MOVE_PIECE, 1, errno.ENOMEM)
    with pytest.raises(OSError):
        r.move("pmd")
    assert r.address == before and bytes(r.view()) == b"\x33" * (64 * KiB)
    r.close()


def test_signal_between_native_move_and_adoption():
    """An exception raised just after the native move returned (a signal
    handler's) leaves the Region owning wherever its memory is: the native
    type updates its address inside the call, so there is no window."""
    import signal

    r = cp.Region(64 * KiB)
    with r.view() as v:
        v[:] = b"\x44" * len(v)

    class Interrupt(Exception):
        pass

    def handler(signum, frame):
        raise Interrupt

    old = signal.signal(signal.SIGALRM, handler)
    hits = 0
    try:
        for i in range(300):
            try:
                signal.setitimer(signal.ITIMER_REAL, 1e-6 * (i % 50 + 1))
                for _ in range(20):
                    r.move("pmd" if i % 2 else "pte")
                signal.setitimer(signal.ITIMER_REAL, 0)
            except Interrupt:
                hits += 1
            assert bytes(r) == b"\x44" * (64 * KiB)     # the Region's address holds it
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
    assert r._exports == 0
    r.close()


# ---- hugetlb: growth without a hole, DONTFORK, populate without SIGBUS --------

HUGE = 2 * MiB
_POOL = "/sys/kernel/mm/hugepages/hugepages-2048kB/"


def _read(name):
    with open(_POOL + name) as f:
        return int(f.read())


@pytest.fixture
def huge_pages():
    """Four free 2 MiB hugetlb pages (the C functions take any hugetlb page
    size; the Region API uses 1 GiB ones), reserved as root and given back."""
    need = 4
    if not os.path.exists(_POOL):
        pytest.skip("no 2 MiB hugetlb pool here")
    original = _read("nr_hugepages")
    usable = _read("free_hugepages") - _read("resv_hugepages")
    if usable < need:
        if os.geteuid() != 0:
            pytest.skip("needs %d free 2 MiB hugetlb pages; as root: echo %d > %s"
                        % (need, original + need - usable, _POOL + "nr_hugepages"))
        with open(_POOL + "nr_hugepages", "w") as f:
            f.write(str(original + need - usable))
    try:
        if _read("free_hugepages") - _read("resv_hugepages") < need:
            pytest.skip("the kernel found too few free 2 MiB pages")
        yield
    finally:
        if _read("nr_hugepages") != original:
            with open(_POOL + "nr_hugepages", "w") as f:
                f.write(str(original))


def _huge_map(size):
    out = ffi.new("uintptr_t *")
    err = lib.cp_region_map(size, HUGE, lib.CP_REGION_HUGETLB, 21, out)
    if err:
        pytest.skip("2 MiB hugetlb pages taken meanwhile (%s)" % os.strerror(err))
    return out[0]


def _vmflags(address):
    with open("/proc/self/smaps") as f:
        inside = False
        for line in f:
            head = line.split(None, 1)[0]
            if "-" in head and not head.endswith(":"):
                lo, hi = (int(x, 16) for x in head.split("-"))
                inside = lo <= address < hi
            elif inside and head == "VmFlags:":
                return line.split()[1:]
    return None


def test_hugetlb_grow_failure_leaves_a_mapping_in_its_hole_alone(huge_pages, inject):
    """Growing a hugetlb region that cannot grow in place maps the new part
    over its own reservation; if that fails and another thread mapped into
    the range meanwhile, the error path must not unmap that mapping."""
    addr = _huge_map(HUGE)
    ffi.memmove(ffi.cast("char *", addr), b"\x77" * 64, 64)
    assert lib.cp_region_reserve_at(addr + HUGE, HUGE) == 0     # no growth in place
    try:
        inject(lib.CP_INJECT_GROW_MAP, 1, errno.ENOMEM)
        out = ffi.new("uintptr_t *")
        err = lib.cp_region_resize(addr, HUGE, 2 * HUGE, lib.CP_REGION_HUGETLB, 21,
                                   1 << 30, out)
        assert err == errno.ENOMEM
        squat = lib.cp_inject_squat()
        assert squat
        assert bytes(ffi.buffer(ffi.cast("char *", squat), 4096)) == b"\x5a" * 4096
        assert bytes(ffi.buffer(ffi.cast("char *", addr), 64)) == b"\x77" * 64
    finally:
        lib.cp_region_unmap(addr + HUGE, HUGE)
        lib.cp_region_unmap(addr, HUGE)


def test_hugetlb_grows_by_moving_and_is_not_inherited(huge_pages):
    addr = _huge_map(HUGE)
    out = ffi.new("uintptr_t *")
    try:
        ffi.memmove(ffi.cast("char *", addr), b"\x66" * 64, 64)
        assert "dc" in _vmflags(addr)       # MADV_DONTFORK: "do not copy"
        assert lib.cp_region_reserve_at(addr + HUGE, HUGE) == 0
        err = lib.cp_region_resize(addr, HUGE, 2 * HUGE, lib.CP_REGION_HUGETLB, 21,
                                   1 << 30, out)
        if err == errno.ENOMEM:
            pytest.skip("2 MiB hugetlb pages taken meanwhile")
        assert err == 0 and out[0] != addr
        new = out[0]
        assert bytes(ffi.buffer(ffi.cast("char *", new), 64)) == b"\x66" * 64
        assert "dc" in _vmflags(new) and "dc" in _vmflags(new + HUGE)
        pid = os.fork()
        if pid == 0:            # the child has no copy to write to
            os._exit(0 if _vmflags(new) is None else 1)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
    finally:
        lib.cp_region_unmap(addr + HUGE, HUGE)
        if out[0]:
            lib.cp_region_unmap(out[0], 2 * HUGE)
        else:
            lib.cp_region_unmap(addr, HUGE)


def test_populate_fallback_on_hugetlb(huge_pages, inject):
    addr = _huge_map(2 * HUGE)
    try:
        inject(lib.CP_INJECT_POPULATE, 1, errno.EINVAL)     # a kernel before 5.14
        assert lib.cp_region_populate(addr, 2 * HUGE, HUGE, lib.CP_REGION_HUGETLB) == 0
        assert lib.cp_inject_fired(lib.CP_INJECT_POPULATE) == 1
    finally:
        lib.cp_region_unmap(addr, 2 * HUGE)


def test_populate_fallback_without_pages_is_an_error_not_sigbus():
    """A hugetlb mapping whose pages the pool cannot give (MAP_NORESERVE, an
    empty pool): the fallback reports an error; a write would be SIGBUS."""
    code = r"""
import ctypes, errno, os
from clearpages._native import lib
libc = ctypes.CDLL(None, use_errno=True)
libc.mmap.restype = ctypes.c_void_p
libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int,
                      ctypes.c_int, ctypes.c_long]
MAP_PRIVATE, MAP_ANONYMOUS, MAP_NORESERVE, MAP_HUGETLB = 0x02, 0x20, 0x4000, 0x40000
free = int(open("/sys/kernel/mm/hugepages/hugepages-2048kB/free_hugepages").read())
size = (free + 2) * (2 << 20)
p = libc.mmap(None, size, 3, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_HUGETLB
              | (21 << 26), -1, 0)
if p in (None, ctypes.c_void_p(-1).value):
    print("skip: no hugetlb mapping:", os.strerror(ctypes.get_errno()))
    raise SystemExit(0)
lib.cp_inject_arm(lib.CP_INJECT_POPULATE, 1, errno.EINVAL)
err = lib.cp_region_populate(p, size, 2 << 20, lib.CP_REGION_HUGETLB)
print("err", err)
"""
    r = run_python(code, timeout=60)
    assert r.returncode == 0, (r.returncode, r.stdout, r.stderr)
    if r.stdout.startswith("skip"):
        pytest.skip(r.stdout.strip())
    assert r.stdout.split()[-1] != "0", r.stdout


def test_populate_fallback_touches_every_base_page(inject):
    """Where THP is refused a 2 MiB region has base pages: the fallback
    steps by 4 KiB, not by the region's page size."""
    with cp.Region(8 * MiB) as r:        # base pages: no MADV_HUGEPAGE
        inject(lib.CP_INJECT_POPULATE, 1, errno.EINVAL)
        assert lib.cp_region_populate(r.address, r.size, 2 * MiB, lib.CP_REGION_THP) == 0
        assert lib.cp_inject_fired(lib.CP_INJECT_POPULATE) == 1
        assert r.backing.rss == 8 * MiB


# ---- units sized by time, memory not yet faulted in by the chunk -------------

#: A spy routine takes at least this long a call (a busy wait after the
#: memset), so that what a job measures does not hang on this machine's
#: speed: three units of a job add up to more than the millisecond of work a
#: remembered speed needs, though no one unit lasts that long.
SPY_CALL_NS = 400_000


def _spy_routine(calls):
    """A routine that records the lengths it is given, and takes at least
    SPY_CALL_NS a call.  Its speed is unknown: a callback's address may be
    one an earlier test's routine had, so every remembered speed is
    forgotten first."""
    import ctypes
    import time

    lib.cp_job_forget_rates()

    @ffi.callback("void(void *, size_t)")
    def routine(dst, length):
        t0 = time.perf_counter_ns()
        calls.append(length)
        ctypes.memset(int(ffi.cast("uintptr_t", dst)), 0, length)
        while time.perf_counter_ns() - t0 < SPY_CALL_NS:
            pass
    return routine


def _spy_job(buf_ptr, n, unit):
    """A job over one extent whose routine records the lengths it is given."""
    calls = []
    routine = _spy_routine(calls)
    job = lib.cp_job_new(ffi.new("char *[]", [buf_ptr]), ffi.new("size_t[]", [n]), 1)
    assert lib.cp_job_configure(job, routine, unit, 1, 0) == 0
    return job, calls, routine


def _run_job(job):
    try:
        while True:
            rc = lib.cp_job_run(job, 10**10)        # a 10 s slice: no deadline in reach
            assert rc >= 0
            if rc == 1:
                return
    finally:
        lib.cp_job_free(job)


def test_a_long_warm_extent_reaches_the_routine_in_few_calls():
    n = 64 * MiB
    buf = bytearray(b"\x01") * n
    c = ffi.from_buffer(buf)
    job, calls, routine = _spy_job(ffi.cast("char *", c), n, 1 * MiB)
    _run_job(job)
    # Unknown speed: 1 MiB first, then growing (at most 8 times a step).
    assert calls[0] <= 1 * MiB and sum(calls) == n and len(calls) <= 6, calls
    assert max(calls) >= 16 * MiB, calls
    assert lib.cp_job_rate(routine) > 0
    # The speed is known now: the whole resident extent in one call.
    buf[:] = b"\x01" * n
    calls.clear()
    job = lib.cp_job_new(ffi.new("char *[]", [ffi.cast("char *", c)]),
                         ffi.new("size_t[]", [n]), 1)
    lib.cp_job_configure(job, routine, 1 * MiB, 1, 0)
    _run_job(job)
    assert calls == [n] and not any(buf[::4096]), calls
    del c


def test_memory_not_faulted_in_goes_a_chunk_at_a_time():
    """A fresh mapping clears 50-100 times slower than resident memory: a
    unit sized from a warm speed would overrun the slice by far."""
    n = 32 * MiB
    calls = []
    routine = _spy_routine(calls)

    warm = bytearray(n)
    cw = ffi.from_buffer(warm)
    job = lib.cp_job_new(ffi.new("char *[]", [ffi.cast("char *", cw)]),
                         ffi.new("size_t[]", [n]), 1)
    lib.cp_job_configure(job, routine, 1 * MiB, 1, 0)
    _run_job(job)
    assert lib.cp_job_rate(routine) > 0
    calls.clear()
    m = mmap.mmap(-1, n)            # nothing of it faulted in yet
    cm = ffi.from_buffer(m)
    job = lib.cp_job_new(ffi.new("char *[]", [ffi.cast("char *", cm)]),
                         ffi.new("size_t[]", [n]), 1)
    lib.cp_job_configure(job, routine, 1 * MiB, 1, 0)
    _run_job(job)
    assert sum(calls) == n and max(calls) <= 1 * MiB, calls[:8]
    del cw, cm
    m.close()


def test_a_speed_is_remembered_from_short_units_that_add_up():
    """Each unit of a job may end within a millisecond (a fast machine, a
    job of three units); their sum is a measurement all the same, and the
    next job must not start from the slow first unit again."""
    n = 16 * MiB
    buf = bytearray(n)
    c = ffi.from_buffer(buf)
    job, calls, routine = _spy_job(ffi.cast("char *", c), n, 1 * MiB)
    _run_job(job)
    assert len(calls) >= 3, calls
    assert lib.cp_job_rate(routine) > 0
    del c


_RATE_RIVAL = r"""
import time
from clearpages._native import ffi, lib
n = 8 << 20
buf = bytearray(n)
c = ffi.from_buffer(buf)

@ffi.callback("void(void *, size_t)")
def routine(dst, length):
    t0 = time.perf_counter_ns()
    ffi.memmove(dst, bytes(length), length)
    while time.perf_counter_ns() - t0 < 2_000_000:
        pass

lib.cp_inject_arm(lib.CP_INJECT_RATE_RIVAL, 1, 777)
job = lib.cp_job_new(ffi.new("char *[]", [ffi.cast("char *", c)]), ffi.new("size_t[]", [n]), 1)
lib.cp_job_configure(job, routine, n, 1, 0)
while lib.cp_job_run(job, 10**10) == 0:
    pass
lib.cp_job_free(job)
print(lib.cp_inject_fired(lib.CP_INJECT_RATE_RIVAL),
      lib.cp_inject_rival_rate(), lib.cp_job_rate(routine))
"""


def test_a_lost_race_for_a_speed_slot_leaves_the_winner_its_speed():
    """Two routines remembered for the first time at once find the same
    empty slot; the one that loses the claim must not have written its
    speed there (the winner's units would be sized from it)."""
    r = run_python(_RATE_RIVAL)
    assert r.returncode == 0, r.stderr
    fired, rival, mine = map(int, r.stdout.split())
    assert fired == 1
    assert rival == 777, "the rival's slot holds the loser's speed %d" % rival
    assert 0 < mine < 777 * 100, mine
