"""Hostile callers: signals at unlucky moments, threads racing on Regions,
fork during threaded clears, sequences that change while they are read.

The promise under test: every public call completes or raises a Python
exception, with every buffer export released and nothing outside the
buffers changed; never a crash.  Each test runs CLEARPAGES_TEST_HOSTILE_ITERATIONS
iterations (default 30: a few seconds in all); run it long with e.g.

    CLEARPAGES_TEST_HOSTILE_ITERATIONS=2000 python -m pytest tests/test_hostile.py
"""

from __future__ import annotations

import mmap
import os
import random
import signal
import sys
import threading
import time

import pytest
from conftest import CHILD_TAKES_SIGINT, OnlyDLPack, run_python

import clearpages as cp
from clearpages import _dispatch

ITERATIONS = int(os.environ.get("CLEARPAGES_TEST_HOSTILE_ITERATIONS", "30"))
SEED = int(os.environ.get("CLEARPAGES_TEST_HOSTILE_SEED", str(int(time.time()))))

KiB = 1 << 10
MiB = 1 << 20
FILL = 0xA5
GUARD = 4096

#: Iterations run by this process, by test (printed in the summary).
COUNTS: dict[str, int] = {}


def _count(name: str) -> None:
    COUNTS[name] = COUNTS.get(name, 0) + 1


@pytest.fixture(autouse=True)
def _report_iterations(request):
    yield
    n = COUNTS.pop(request.node.name, 0)
    if n:
        sys.stderr.write("\n%s: %d iterations, %d interrupted (seed %d)\n"
                         % (request.node.name, n, COUNTS.pop("interrupted", 0), SEED))


# ---- signals ------------------------------------------------------------


class Alarm(Exception):
    pass


class _Armed:
    on = False


def _handler(signum, frame):
    if _Armed.on:
        raise Alarm


@pytest.fixture
def alarms(monkeypatch, config):
    """interrupt(delay, fn, *args, **kw): run fn with SIGALRM raising Alarm
    after delay seconds; True if it was interrupted.  Slices are short so that the
    signal often lands between them."""
    if threading.current_thread() is not threading.main_thread():
        pytest.skip("signals need the main thread")
    monkeypatch.setattr(_dispatch, "SLICE_NS", 200_000)
    _dispatch.state().configure_native()        # the config fixture restores it
    old = signal.signal(signal.SIGALRM, _handler)

    def interrupt(delay, fn, *args, **kw):
        try:
            _Armed.on = True
            signal.setitimer(signal.ITIMER_REAL, delay)
            try:
                fn(*args, **kw)
            finally:
                signal.setitimer(signal.ITIMER_REAL, 0)
                _Armed.on = False
        except Alarm:
            _count("interrupted")
            return True
        return False

    yield interrupt
    signal.setitimer(signal.ITIMER_REAL, 0)
    _Armed.on = False
    signal.signal(signal.SIGALRM, old)


def _methods(rng):
    return rng.choice(("auto",) + cp.methods())


def _guarded(n):
    """(whole, view): a bytearray of FILL with GUARD bytes on each side of
    the n-byte memoryview to clear."""
    whole = bytearray([FILL]) * (n + 2 * GUARD)
    return whole, memoryview(whole)[GUARD:GUARD + n]


def _check_guarded(whole, n):
    """Nothing outside the view changed; every export of whole released."""
    assert whole[:GUARD] == bytearray([FILL]) * GUARD, "written before the buffer"
    assert whole[GUARD + n:] == bytearray([FILL]) * GUARD, "written after the buffer"
    inside = whole[GUARD:GUARD + n]
    # A clear that was interrupted leaves whole units zero, the rest as it was.
    assert not inside.translate(None, bytes([0, FILL])), "a byte neither cleared nor kept"
    whole.extend(b"x")          # BufferError if an export leaked
    del whole[-1:]


def _delay(rng):
    # From "before the call gets anywhere" to "after a few slices".
    return rng.choice((1e-6, 2e-5, 1e-4, 5e-4, 2e-3)) * rng.uniform(0.5, 1.5)


def test_signals_during_clear(alarms):
    rng = random.Random(SEED)
    for _ in range(ITERATIONS):
        n = rng.choice((4 * KiB + 3, 1 * MiB, 12 * MiB + 4097))
        whole, view = _guarded(n)
        threads = rng.choice((1, 2, 3, "auto"))
        method = _methods(rng)
        hot = rng.choice((None, (0, min(n, 8192))))
        alarms(_delay(rng), cp.clear, view, method=method, threads=threads, hot=hot)
        view.release()
        _check_guarded(whole, n)
        _count("test_signals_during_clear")


def test_signals_during_clear_many(alarms):
    rng = random.Random(SEED + 1)
    for _ in range(ITERATIONS):
        small = [bytearray([FILL]) * rng.randrange(1, 9000) for _ in range(rng.choice((10, 3000)))]
        n = rng.choice((1 * MiB, 24 * MiB))
        whole, view = _guarded(n)
        bufs = small + [view]
        rng.shuffle(bufs)
        threads = rng.choice((1, 2, "auto"))
        method = rng.choice(("auto",) + cp.methods())
        alarms(_delay(rng), cp.clear_many, bufs, method=method, threads=threads)
        del bufs
        view.release()
        _check_guarded(whole, n)
        for b in small:
            assert not b.translate(None, bytes([0, FILL]))
            b.extend(b"x")
        _count("test_signals_during_clear_many")


def test_signals_during_clear_many_with_tensors(alarms):
    np = pytest.importorskip("numpy")
    rng = random.Random(SEED + 3)
    for _ in range(ITERATIONS):
        n = rng.choice((1 * MiB, 12 * MiB))
        whole = np.full(n + 2 * GUARD, FILL, np.uint8)
        inner = whole[GUARD:GUARD + n]
        views = [inner[: n // 2], inner[n // 2:].reshape(-1, 64)[:, :32]]
        small = [bytearray([FILL]) * rng.randrange(1, 9000) for _ in range(rng.choice((3, 300)))]
        refs = [sys.getrefcount(v) for v in views]
        bufs = [OnlyDLPack(v) for v in views] + small
        rng.shuffle(bufs)
        alarms(_delay(rng), cp.clear_many, bufs, method=_methods(rng),
               threads=rng.choice((1, 2, "auto")))
        del bufs
        assert [sys.getrefcount(v) for v in views] == refs, "a DLPack export leaked"
        assert (whole[:GUARD] == FILL).all() and (whole[GUARD + n:] == FILL).all()
        rest = inner[n // 2:].reshape(-1, 64)
        assert (rest[:, 32:] == FILL).all(), "written beside the strided tensor"
        assert np.isin(inner, (0, FILL)).all()
        for b in small:
            assert not b.translate(None, bytes([0, FILL]))
            b.extend(b"x")          # BufferError if an export leaked
        _count("test_signals_during_clear_many_with_tensors")


def test_signals_during_clear_pages(alarms):
    rng = random.Random(SEED + 2)
    for _ in range(ITERATIONS):
        npages = rng.choice((64, 6000))
        n = npages * 4096 - rng.randrange(0, 4096)
        whole, view = _guarded(n)
        pages = rng.sample(range(npages), rng.randrange(1, npages + 1))
        if rng.random() < 0.3:
            import array

            pages = array.array("q", pages)
        threads = rng.choice((1, 2, "auto"))
        method = _methods(rng)
        alarms(_delay(rng), cp.clear_pages, view, pages, method=method, threads=threads)
        view.release()
        _check_guarded(whole, n)
        # Pages not listed are untouched.
        listed = set(pages)
        for p in rng.sample(range(npages), min(npages, 32)):
            if p not in listed:
                assert whole[GUARD + p * 4096:GUARD + min(n, (p + 1) * 4096)] == \
                    bytearray([FILL]) * (min(n, (p + 1) * 4096) - p * 4096)
        _count("test_signals_during_clear_pages")


def _pattern(n, seed):
    return (bytes(range(seed % 251, 256)) + bytes(range(256))) * (n // 256 + 2)


def _sentinels(count=4):
    """Third-party mappings (not the package's) with known contents."""
    out = []
    for i in range(count):
        m = mmap.mmap(-1, 64 * KiB)
        m.write(bytes([0x30 + i]) * len(m))
        out.append(m)
    return out


def _check_sentinels(sentinels):
    for i, m in enumerate(sentinels):
        assert m[:] == bytes([0x30 + i]) * len(m), "a foreign mapping was changed"


def test_signals_during_region_resize_move_close(alarms):
    rng = random.Random(SEED + 3)
    sentinels = _sentinels()
    r = cp.Region(64 * KiB)
    seed = 1
    r.view()[:] = _pattern(r.size, seed)[:r.size]
    known = r.size          # bytes known to hold the pattern
    for _ in range(ITERATIONS * 5):
        op = rng.choice(("resize", "resize", "move", "move_to", "close", "clear"))
        size_before = r.size
        kw: dict = {}
        if op == "resize":
            call, args = r.resize, (rng.choice((16 * KiB, 64 * KiB, 1 * MiB, 5 * MiB + 4096)),)
        elif op == "move":
            call, args = r.move, (rng.choice(("pte", "1m", "pmd", "pud")),)
        elif op == "move_to":
            dst = (r.address + (1 << 36) + rng.randrange(0, 1 << 20) * 4096) % (1 << 46)
            call, args = r.move_to, (max(dst, 1 << 32),)
        elif op == "clear":
            call, args, kw = cp.clear, (r,), {"threads": rng.choice((1, 2))}
        else:
            call, args = r.close, ()
        try:
            alarms(_delay(rng), call, *args, **kw)
        except FileExistsError:
            pass
        _check_sentinels(sentinels)
        if r.closed:
            r.close()           # allowed, and a no-op
            r = cp.Region(rng.choice((64 * KiB, 2 * MiB)))
            seed += 1
            r.view()[:] = _pattern(r.size, seed)[:r.size]
            known = r.size
        else:
            with r.view() as v:
                if op == "clear":
                    known = 0       # partly cleared: no pattern to check
                keep = min(known, r.size, size_before)
                assert bytes(v[:keep]) == _pattern(r.size, seed)[:keep], op
                if r.size > size_before:
                    # The grown part reads zero (unless a clear made it so anyway).
                    assert not any(v[size_before:size_before + 4096])
                known = keep
        _count("test_signals_during_region_resize_move_close")
    r.close()
    _check_sentinels(sentinels)


# ---- threads racing on Regions -------------------------------------------


def test_two_threads_race_on_regions():
    """Two threads resize, move, clear and close the same Regions while a
    third party maps, fills and checks memory of its own: nothing but the
    Regions' own mappings is ever touched."""
    rng0 = random.Random(SEED + 4)
    regions = [cp.Region(rng0.choice((64 * KiB, 1 * MiB))) for _ in range(4)]
    pool_lock = threading.Lock()
    stop = threading.Event()
    errors: list[BaseException] = []
    sentinels = _sentinels(8)
    done = [0]

    def third_party():
        rng = random.Random(SEED + 5)
        mine: list[tuple[mmap.mmap, int]] = []
        try:
            while not stop.is_set():
                if len(mine) < 32:
                    m = mmap.mmap(-1, rng.choice((4 * KiB, 64 * KiB, 2 * MiB)))
                    v = rng.randrange(1, 256)
                    m.write(bytes([v]) * len(m))
                    mine.append((m, v))
                else:
                    m, v = mine.pop(rng.randrange(len(mine)))
                    assert m[:] == bytes([v]) * len(m), "a third party's mapping changed"
                    m.close()
            for m, v in mine:
                assert m[:] == bytes([v]) * len(m), "a third party's mapping changed"
                m.close()
        except BaseException as e:      # pragma: no cover - reported below
            errors.append(e)

    def worker(k):
        rng = random.Random(SEED + 10 + k)
        try:
            for _ in range(ITERATIONS * 4):
                i = rng.randrange(len(regions))
                with pool_lock:
                    r = regions[i]
                op = rng.choice(("resize", "move", "clear", "clear_many", "close", "view"))
                try:
                    if op == "resize":
                        r.resize(rng.choice((16 * KiB, 64 * KiB, 1 * MiB, 3 * MiB)))
                    elif op == "move":
                        r.move(rng.choice(("pte", "1m", "pmd", "pud")))
                    elif op == "clear":
                        cp.clear(r, threads=rng.choice((1, 2)))
                    elif op == "clear_many":
                        cp.clear_many([r, bytearray(100)], threads=rng.choice((1, 2)))
                    elif op == "view":
                        with r.view() as v:
                            v[:4096] = b"\x11" * 4096
                            assert v[4095] in (0x11, 0)     # the other thread may clear
                    else:
                        r.close()
                        with pool_lock:
                            if regions[i] is r:
                                regions[i] = cp.Region(rng.choice((64 * KiB, 1 * MiB)))
                except BufferError:
                    pass        # the other thread holds a view or a clear
                except ValueError as e:
                    assert "closed" in str(e), e
                done[0] += 1
        except BaseException as e:      # pragma: no cover - reported below
            errors.append(e)

    party = threading.Thread(target=third_party)
    workers = [threading.Thread(target=worker, args=(k,)) for k in range(2)]
    party.start()
    for t in workers:
        t.start()
    for t in workers:
        t.join()
    stop.set()
    party.join()
    assert not errors, errors
    _check_sentinels(sentinels)
    for r in regions:
        r.close()
    COUNTS["test_two_threads_race_on_regions"] = done[0]


# ---- fork -------------------------------------------------------------------


def _wait(pid, timeout=30.0):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        got, status = os.waitpid(pid, os.WNOHANG)
        if got:
            return os.waitstatus_to_exitcode(status)
        time.sleep(0.005)
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    raise AssertionError("the forked child hung")


def _child_work():
    try:
        b = bytearray(b"\x01") * (3 * MiB)
        cp.clear(b, threads=2)
        cp.clear_pages(b, [0, 5, 9], threads=2)
        ok = not any(b)
    except BaseException:
        ok = False
    os._exit(0 if ok else 1)


# The subject is a fork while another thread is inside a threaded clear (its
# job's workers running, the learner and the speed table in use): Python
# 3.12+ warns of exactly that ("multi-threaded, use of fork() may lead to
# deadlocks in the child").  The child only clears and calls os._exit, and
# the fork after the thread is joined is from a single-threaded point.
@pytest.mark.filterwarnings("ignore:This process .* is multi-threaded:DeprecationWarning")
def test_fork_during_and_after_threaded_clears():
    big = bytearray(b"\x02") * (48 * MiB)
    stop = threading.Event()
    rounds = [0]
    errors: list[BaseException] = []

    def clearing():
        try:
            while not stop.is_set():
                big[::4096] = b"\x02" * len(big[::4096])
                cp.clear(big, threads=2, method="libc")
                assert not any(big[::4096])
                rounds[0] += 1
        except BaseException as e:      # pragma: no cover - reported below
            errors.append(e)

    t = threading.Thread(target=clearing)
    t.start()
    try:
        for _ in range(max(3, ITERATIONS // 3)):
            pid = os.fork()
            if pid == 0:
                _child_work()
            assert _wait(pid) == 0
            _count("test_fork_during_and_after_threaded_clears")
            time.sleep(0.001)
    finally:
        stop.set()
        t.join()
    assert not errors, errors
    assert rounds[0] >= 1
    # After: no job in flight.
    pid = os.fork()
    if pid == 0:
        _child_work()
    assert _wait(pid) == 0


# ---- sequences that change while they are read -----------------------------

_EVIL_INDEX = r"""
import clearpages as cp
class Evil:
    def __init__(self, pages):
        self.pages = pages
    def __index__(self):
        self.pages.clear()
        return 0
for _ in range(20):
    pages = []
    pages += [Evil(pages)] + list(range(1, 60))
    buf = bytearray(b"\x01") * (64 * 4096)
    try:
        cp.clear_pages(buf, pages)
    except (TypeError, ValueError, IndexError, RuntimeError):
        pass
    buf.extend(b"x")
print("ok")
"""

_EVIL_BUFFER = r"""
import clearpages as cp
class Evil:
    def __init__(self, bufs):
        self.bufs = bufs
        self.mem = bytearray(4096)
    def __buffer__(self, flags):
        self.bufs.clear()
        return memoryview(self.mem)
for _ in range(20):
    bufs = []
    bufs += [Evil(bufs)] + [bytearray(4096) for _ in range(60)]
    try:
        cp.clear_many(bufs)
    except (TypeError, ValueError, BufferError, RuntimeError):
        pass
print("ok")
"""


def test_pages_list_emptied_by_index():
    r = run_python(_EVIL_INDEX, timeout=60)
    assert r.returncode == 0 and r.stdout.strip() == "ok", (r.returncode, r.stderr[-2000:])


@pytest.mark.skipif(sys.version_info < (3, 12), reason="__buffer__ needs Python 3.12+")
def test_buffer_list_emptied_by_buffer():
    r = run_python(_EVIL_BUFFER, timeout=60)
    assert r.returncode == 0 and r.stdout.strip() == "ok", (r.returncode, r.stderr[-2000:])


# ---- pools: signals during a blocking acquire, fork, exit with the thread busy -----


def test_signals_during_blocking_acquire(alarms):
    """A pool whose only block is out: acquire() waits, until another thread
    gives the block back or a signal handler raises, whichever comes first.
    Either way no block is lost or handed out twice."""
    rng = random.Random(SEED + 7)
    with cp.Pool("64K", page_size="4k", capacity="64K") as pool:
        for _ in range(ITERATIONS):
            held = pool.acquire()
            with memoryview(held) as m:
                m[0:4] = b"\x01\x02\x03\x04"
            timer = threading.Timer(rng.choice((0.0005, 0.002, 0.01)), held.release)
            timer.start()
            got = []
            # The signal may also land after the block was taken, even after
            # it was appended: whatever was got is zero and goes back.
            interrupted = alarms(_delay(rng) * 5, lambda got=got: got.append(pool.acquire()))
            assert interrupted or got
            for b in got:
                assert cp.is_zero(b)
                b.release()
            timer.join()
            assert held.released
            st = pool.stats()
            assert st.out == 0 and st.acquires == st.releases
            _count("test_signals_during_blocking_acquire")


_POOL_CTRL_C = r"""
import os, signal, threading, time
import clearpages as cp
pool = cp.Pool("64K", page_size="4k", capacity="64K")
held = pool.acquire()
threading.Timer(0.05, os.kill, (os.getpid(), signal.SIGINT)).start()
t = time.monotonic()
try:
    pool.acquire()
    print("not interrupted")
except KeyboardInterrupt:
    print("interrupted", pool.stats().out)
held.release()
blk = pool.acquire(timeout=5)
print("after", cp.is_zero(blk))
"""


def test_ctrl_c_interrupts_a_blocking_acquire():
    r = run_python(CHILD_TAKES_SIGINT + _POOL_CTRL_C, timeout=60)
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.split() == ["interrupted", "1", "after", "True"], r.stdout


_POOL_FORK = r"""
import os, sys, time
import clearpages as cp
fork = sys.argv[1]
pool = cp.Pool("1M", page_size="4k", capacity="64M", fork=fork, max_rate="64M", low_water=0,
               reuse="cold")       # the blocks given back are the thread's to zero
kept = pool.acquire()
memoryview(kept)[:5] = b"hello"
busy = [pool.acquire() for _ in range(8)]
for b in busy:                      # the thread is zeroing these, slowly, as we fork
    memoryview(b)[:] = b"\x07" * len(b)
    b.release()
for _ in range(3):
    pid = os.fork()
    if pid == 0:
        ok = True
        for take in (pool.acquire, pool.acquire_nowait):
            try:
                take()
                ok = False
            except ValueError as e:
                ok = ok and "parent" in str(e)
        ok = ok and pool.stats().forked
        try:
            data = bytes(memoryview(kept)[:5])
            ok = ok and data == (b"hello" if fork == "keep" else b"\0" * 5)
        except ValueError as e:
            ok = ok and fork == "drop" and "forked child" in str(e)
        kept.release()
        os._exit(0 if ok else 3)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0, status
assert bytes(memoryview(kept)[:5]) == b"hello"
kept.release()
pool.set_pace(max_rate="max")
blocks = [pool.acquire(timeout=30) for _ in range(9)]
assert all(cp.is_zero(b) for b in blocks)
for b in blocks:
    b.release()
print("ok", pool.stats().forked)
"""


@pytest.mark.parametrize("fork", ["keep", "wipe", "drop"])
def test_fork_with_a_pool(fork):
    """The child has no pool thread and its copy of the Pool hands out
    nothing; blocks it holds are copies (keep), zeros (wipe) or not mapped
    (refused, drop).  The parent's pool goes on, forked while its thread
    was zeroing."""
    r = run_python("import sys; sys.argv = ['x', %r]\n" % fork + _POOL_FORK, timeout=120,
                   env={"PYTHONWARNINGS": "ignore::DeprecationWarning"})
    assert r.returncode == 0 and r.stdout.split() == ["ok", "False"], (
        r.returncode, r.stdout, r.stderr[-2000:])


_POOL_EXIT = r"""
import os, sys
import clearpages as cp
how = sys.argv[1]
# reuse="cold": every block given back is the thread's to zero
pool = cp.Pool("8M", page_size="4k", max_rate="16M", low_water=0, reuse="cold")
blocks = [pool.acquire() for _ in range(16)]
for b in blocks:
    memoryview(b)[:] = b"\x05" * len(b)
    b.release()
kept = pool.acquire()               # a block out as the interpreter goes
cycle = [pool, kept]
cycle.append(cycle)
assert pool.stats().dirty > 0       # 120 MiB at 16 MB/s: seconds of work left
print("exiting", flush=True)
if how == "os._exit":
    os._exit(0)
if how == "exception":
    raise SystemExit(0)
"""


@pytest.mark.parametrize("how", ["end", "exception", "os._exit"])
def test_exit_with_the_pool_thread_busy(how):
    r = run_python("import sys; sys.argv = ['x', %r]\n" % how + _POOL_EXIT, timeout=60)
    assert r.returncode == 0 and r.stdout.strip() == "exiting", (r.returncode, r.stderr[-2000:])
    assert not r.stderr.strip(), r.stderr[-2000:]


def _close_race_round(rng: random.Random) -> None:
    pool = cp.Pool("64K", page_size="4k", capacity="256K")
    held = [pool.acquire() for _ in range(4)]
    errors: list[BaseException] = []
    got: list = []

    def waiter():
        try:
            got.append(pool.acquire(timeout=10))
        except ValueError as e:
            if "closed" not in str(e):
                errors.append(e)
        except BaseException as e:      # pragma: no cover - reported below
            errors.append(e)

    def releaser():
        time.sleep(rng.choice((0, 0.0005, 0.002)))
        for b in held[:2]:
            with memoryview(b) as m:
                m[:] = b"\x33" * len(m)
            b.release()

    threads = [threading.Thread(target=waiter) for _ in range(3)]
    threads.append(threading.Thread(target=releaser))
    for t in threads:
        t.start()
    time.sleep(rng.choice((0, 0.001, 0.003)))
    pool.__exit__(None, None, None)
    for t in threads:
        t.join()
    assert not errors, errors
    assert pool.closed
    for b in got + held[2:]:
        with memoryview(b) as m:        # still the block's memory
            m[:8] = b"\x01" * 8
        b.release()
    assert pool.stats().out == 0
    assert not pool._owns(held[3].address)      # unmapped with the last block


def test_close_races_waiting_acquires_and_releases():
    """The end of a with block while threads wait in acquire() and another
    gives blocks back: every waiter gets a block or the ValueError of a
    closed pool, the blocks still out stay usable, and the memory goes with
    the last of them."""
    rng = random.Random(SEED + 8)
    for _ in range(ITERATIONS):
        _close_race_round(rng)
        _count("test_close_races_waiting_acquires_and_releases")
