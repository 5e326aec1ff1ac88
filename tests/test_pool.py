"""cp.Pool: blocks zeroed off the critical path.

What is promised: every block handed out reads zero, whatever the program
did to it before it came back; a block is given back once, never while a
view of it lives; the memory is never unmapped under a block; bad
arguments are TypeError or ValueError naming what is taken.  No timing:
the pool's speed is measured in bench/bench_pool.py.
"""

from __future__ import annotations

import ctypes
import gc
import pickle
import random
import sys
import threading
import time

import pytest
from capsules import FLAG_IS_COPIED, Taken
from conftest import numpy_dlpack, run_python

import clearpages as cp
from clearpages import _native
from clearpages._native import lib

KiB = 1 << 10
MiB = 1 << 20


def _fill(blk, value=0xA5):
    ctypes.memset(blk.address, value, blk.size)


def _eventually(cond, seconds=20.0):
    """Wait for the pool's thread (no timing is asserted: only that it
    happens at all within a generous bound)."""
    end = time.monotonic() + seconds
    while not cond():
        if time.monotonic() > end:
            return False
        time.sleep(0.002)
    return True


@pytest.fixture
def pool():
    p = cp.Pool("64K", page_size="4k")
    yield p
    p.__exit__(None, None, None)


# ---- blocks -----------------------------------------------------------------


def test_acquire_gives_a_zeroed_writable_block(pool):
    blk = pool.acquire()
    assert isinstance(blk, cp.Block)
    assert len(blk) == blk.size == pool.block_size == 64 * KiB
    assert cp.is_zero(blk)
    m = memoryview(blk)
    assert not m.readonly and m.nbytes == 64 * KiB and m.format == "B"
    m[0] = 1
    m[-1] = 2
    assert not cp.is_zero(blk)
    m.release()
    cp.clear(blk)
    assert cp.is_zero(blk)
    assert blk.pool is pool
    blk.release()
    assert blk.released


def test_block_with_numpy():
    np = pytest.importorskip("numpy")
    with cp.Pool("1M", page_size="4k") as pool:
        with pool.acquire() as blk:
            a = np.frombuffer(blk, dtype=np.float64)
            assert a.size == MiB // 8 and not a.any()
            a[:] = 1.5
            assert not blk.released
        assert blk.released              # the end of the with: given back ...
        assert pool.stats().out == 1     # ... when its last view goes
        assert a.sum() == 1.5 * a.size
        del a
        gc.collect()
        assert pool.stats().out == 0


def test_block_dlpack_with_numpy():
    np = pytest.importorskip("numpy")
    with cp.Pool("64K", page_size="4k") as pool:
        blk = pool.acquire()
        assert blk.__dlpack_device__() == (1, 0)
        from_dlpack = getattr(np, "from_dlpack", None) or np._from_dlpack  # 1.22's name
        t = from_dlpack(blk)
        assert t.dtype == np.uint8 and t.size == blk.size and not t.any()
        if numpy_dlpack().versioned:        # numpy before 2.1 imports DLPack read-only
            t[:] = 3
            assert memoryview(blk)[blk.size - 1] == 3
        assert blk.address == t.__array_interface__["data"][0]
        with pytest.raises(BufferError):
            blk.release()
        del t
        gc.collect()
        assert blk._exports == 0
        blk.release()


@pytest.mark.parametrize("versioned", [True, False])
@pytest.mark.parametrize("in_thread", [False, True])
def test_block_dlpack_without_numpy(monkeypatch, versioned, in_thread):
    """The block is its own DLPack producer (no numpy): a consumer made by
    hand takes the capsule, writes through the tensor and calls the deleter
    once, from another thread without the GIL too."""
    monkeypatch.setitem(sys.modules, "numpy", None)         # import numpy fails
    with cp.Pool("64K", page_size="4k") as pool:
        blk = pool.acquire()
        cap = blk.__dlpack__(max_version=(1, 0)) if versioned else blk.__dlpack__()
        taken = Taken(cap)
        assert taken.versioned == versioned
        t = taken.tensor
        assert t.data == blk.address and (t.device_type, t.device_id) == (1, 0)
        assert (t.code, t.bits, t.lanes) == (1, 8, 1) and t.byte_offset == 0
        assert taken.shape() == [blk.size] and taken.strides() == [1]
        if versioned:
            assert (taken.m.major, taken.m.minor) == (1, 0) and taken.m.flags == 0
        ctypes.memset(t.data + 100, 0x42, 1)
        assert memoryview(blk)[100] == 0x42
        assert blk._exports == 1
        with pytest.raises(BufferError, match="tensor"):
            blk.release()
        del cap                     # a taken capsule leaves the tensor to its taker
        gc.collect()
        assert blk._exports == 1
        taken.delete(in_thread=in_thread)
        assert blk._exports == 0    # once: a second call would take it below zero
        blk.release()
        assert pool.stats().out == 0


@pytest.mark.parametrize("kw", [{}, {"max_version": (1, 0)}])
def test_a_block_capsule_nobody_takes_lets_its_view_go(kw):
    with cp.Pool("64K", page_size="4k") as pool:
        blk = pool.acquire()
        cap = blk.__dlpack__(**kw)
        assert blk._exports == 1
        del cap
        gc.collect()
        assert blk._exports == 0
        blk.release()


def test_dlpack_exports_keep_no_reference():
    """Taken or not, versioned or not, each export lets its view of the block
    go once: the block's references and exports are as before."""
    with cp.Pool("64K", page_size="4k") as pool:
        blk = pool.acquire()
        before = sys.getrefcount(blk)
        for i in range(600):
            cap = blk.__dlpack__(max_version=(1, 0)) if i % 2 else blk.__dlpack__()
            if i % 3:
                Taken(cap).delete()
            del cap
        gc.collect()
        assert sys.getrefcount(blk) == before and blk._exports == 0
        blk.release()


def test_a_block_exported_in_a_with_block_goes_back_when_the_tensor_goes():
    with cp.Pool("64K", page_size="4k") as pool:
        with pool.acquire() as blk:
            taken = Taken(blk.__dlpack__(max_version=(1, 0)))
        assert blk.released and pool.stats().out == 1       # pending: the tensor lives
        taken.delete()
        assert pool.stats().out == 0


def test_block_dlpack_copy_and_refusals():
    with cp.Pool("64K", page_size="4k") as pool:
        blk = pool.acquire()
        memoryview(blk)[7] = 9
        taken = Taken(blk.__dlpack__(max_version=(1, 0), copy=True))
        assert taken.m.flags == FLAG_IS_COPIED and taken.tensor.data != blk.address
        assert ctypes.string_at(taken.tensor.data, 8) == b"\0" * 7 + b"\x09"
        assert blk._exports == 0            # a copy holds nothing of the block's
        taken.delete()
        cap = blk.__dlpack__(dl_device=(1, 0), copy=False, stream=None)
        del cap
        with pytest.raises(BufferError, match="CPU"):
            blk.__dlpack__(dl_device=(2, 0))
        with pytest.raises(ValueError, match="stream"):
            blk.__dlpack__(stream=1)
        with pytest.raises(TypeError, match="max_version"):
            blk.__dlpack__(max_version="1.0")
        with pytest.raises(TypeError):
            blk.__dlpack__(None)
        assert blk._exports == 0
        blk.release()
        with pytest.raises(ValueError, match="released"):
            blk.__dlpack__()


def test_block_into_torch_without_numpy():
    code = """
import sys
sys.modules["numpy"] = None
import torch, clearpages as cp
with cp.Pool("64K", page_size="4k") as pool:
    blk = pool.acquire()
    t = torch.from_dlpack(blk)
    assert t.dtype == torch.uint8 and t.numel() == blk.size and int(t.sum()) == 0
    t[:] = 5
    assert memoryview(blk)[blk.size - 1] == 5 and blk._exports == 1
    del t
    assert blk._exports == 0
    blk.release()
print("ok")
"""
    pytest.importorskip("torch")
    out = run_python(code)
    assert out.returncode == 0 and out.stdout.strip().endswith("ok"), out.stderr


def test_block_size_rounds_to_whole_pages():
    with cp.Pool(5000, page_size="4k") as pool:
        assert pool.block_size == 8192 and pool.page_size == 4096
        assert pool.page_size_name == "4k"
    with cp.Pool("3M", page_size="2m") as pool:
        assert pool.block_size == 4 * MiB and pool.page_size_name == "2m"


def test_release_forms(pool):
    blk = pool.acquire()
    pool.release(blk)
    assert blk.released
    blk.release()                       # again: nothing
    pool.release(blk)
    assert pool.stats().releases == 1
    with pytest.raises(ValueError, match="released"):
        memoryview(blk)
    with pytest.raises(ValueError, match="released"):
        with blk:
            pass
    with pytest.raises(TypeError, match="Block"):
        pool.release(bytearray(10))
    with cp.Pool("64K", page_size="4k") as other:
        b2 = other.acquire()
        with pytest.raises(ValueError, match="another Pool"):
            pool.release(b2)
        b2.release()


def test_release_refused_while_viewed(pool):
    blk = pool.acquire()
    m = memoryview(blk)
    with pytest.raises(BufferError, match="1 view"):
        blk.release()
    with pytest.raises(BufferError):
        pool.release(blk)
    assert not blk.released
    m.release()
    blk.release()
    assert pool.stats().out == 0


def test_a_dropped_block_goes_back(pool):
    pool.acquire()
    gc.collect()
    st = pool.stats()
    assert st.out == 0 and st.releases == 1


def test_block_cannot_be_made_or_pickled(pool):
    with pytest.raises(TypeError, match="acquire"):
        cp.Block()
    blk = pool.acquire()
    with pytest.raises(TypeError, match="pickle"):
        pickle.dumps(blk)
    with pytest.raises(TypeError, match="pickle"):
        pickle.dumps(pool)
    assert "64 KiB" in repr(blk)
    blk.release()
    assert "released" in repr(blk)


# ---- never a block that is not zero -------------------------------------------


@pytest.mark.parametrize("debug, reuse", [(False, "auto"), (True, "auto"), (False, "hot"),
                                          (False, "cold")])
def test_every_block_reads_zero_while_releases_race(debug, reuse):
    """10,000 blocks handed out, each checked, while three threads acquire,
    scribble over and release blocks of the same small pool, so that blocks
    go round between the program, the thread, callers zeroing them and
    releases zeroing them (reuse)."""
    np = pytest.importorskip("numpy")
    total, workers = 10_000, 3
    with cp.Pool("16K", page_size="4k", capacity="256K", debug=debug, reuse=reuse) as pool:
        done = threading.Event()
        errors = []

        def churn(seed):
            rng = random.Random(seed)
            try:
                while not done.is_set():
                    held = [pool.acquire() for _ in range(rng.randrange(1, 4))]
                    for b in held:
                        ctypes.memset(b.address, rng.randrange(1, 256), b.size)
                    for b in held:
                        b.release()
            except BaseException as e:          # pragma: no cover - reported below
                errors.append(e)

        threads = [threading.Thread(target=churn, args=(i,)) for i in range(workers)]
        for t in threads:
            t.start()
        try:
            for i in range(total):
                blk = pool.acquire()
                a = np.frombuffer(blk, dtype=np.uint64)
                assert not a.any(), "block %d: byte %d is not zero" % (
                    i, int(np.flatnonzero(a)[0]) * 8)
                a[i % a.size] = i + 1
                del a
                blk.release()
        finally:
            done.set()
            for t in threads:
                t.join()
        assert not errors, errors
        st = pool.stats()
        assert st.blocks <= 16 and st.out == 0
        assert st.acquires == st.releases >= total
        assert st.blocks == st.fresh + st.ready + st.dirty + st.busy + st.out
        if debug:
            assert st.checked == st.acquires


def test_debug_finds_a_block_written_after_release():
    """A pointer kept past release() writes into a ready block: debug reads
    it back before it leaves and refuses it; the block is zeroed again."""
    with cp.Pool("64K", page_size="4k", capacity="64K", debug=True) as pool:
        blk = pool.acquire()
        addr = blk.address
        blk.release()
        assert _eventually(lambda: pool.stats().ready == 1)
        ctypes.memset(addr + 100, 7, 1)
        with pytest.raises(RuntimeError, match="not zero"):
            pool.acquire()
        blk = pool.acquire()            # zeroed again since
        assert cp.is_zero(blk)
        blk.release()


def test_callers_zero_when_the_thread_may_not():
    """max_rate=0 and low_water=0: the thread zeroes nothing, so a block
    given back stays dirty and the next acquire zeroes it itself."""
    with cp.Pool("64K", page_size="4k", capacity="64K", max_rate=0, low_water=0) as pool:
        assert pool.acquire_nowait() is None    # nothing made ready
        blk = pool.acquire()                    # faulted in by the caller
        _fill(blk)
        blk.release()
        time.sleep(0.01)
        st = pool.stats()
        assert st.dirty == 1 and st.zeroed_bytes == 0 and st.populated_bytes == 64 * KiB
        assert pool.acquire_nowait() is None
        blk = pool.acquire()
        assert cp.is_zero(blk)
        st = pool.stats()
        assert st.caller_zeroed_bytes == 64 * KiB and st.acquires_waited == 2
        blk.release()


# ---- reuse: where a block given back is zeroed ----------------------------------


def _tried(size):
    """Whether reuse='auto' tries hot for blocks of size on this machine
    (below the streaming threshold and up to hot_max), as the pool says."""
    with cp.Pool(size, page_size="4k", capacity=size) as pool:
        tried = pool.stats().reuse_tried
    th = cp.thresholds()
    assert tried == (size < th.nt_min and size <= th.hot_max)
    return tried


def test_reuse_hot_zeroes_a_block_at_its_release_and_hands_it_out_next():
    with cp.Pool("64K", page_size="4k", capacity="256K", reuse="hot") as pool:
        assert pool.reuse == "hot" and pool.stats().reusing == "hot"
        assert "zeroed at once by release()" in pool.describe()
        blk = pool.acquire()
        addr = blk.address
        _fill(blk)
        blk.release()
        st = pool.stats()
        assert st.release_zeroed_bytes == 64 * KiB and st.release_zero_seconds > 0
        assert st.dirty == 0 and st.ready >= 1 and st.reuse_trials == 0
        again = pool.acquire_nowait()
        assert again is not None and again.address == addr and cp.is_zero(again)
        again.release()


def test_reuse_cold_leaves_every_block_to_the_thread():
    with cp.Pool("64K", page_size="4k", capacity="64K", max_rate=0, low_water=0,
                 reuse="cold") as pool:
        assert pool.stats().reusing == "cold"
        assert "waits for the thread (reuse='cold')" in pool.describe()
        for _ in range(40):
            blk = pool.acquire()
            assert cp.is_zero(blk)
            _fill(blk)
            blk.release()
            assert pool.stats().dirty == 1
        st = pool.stats()
        assert st.release_zeroed_bytes == 0 and st.reuse_trials == 0
        assert st.caller_zeroed_bytes == 39 * 64 * KiB


def test_reuse_auto_goes_hot_once_a_streaming_zero_is_measured():
    """The first block given back waits for a streaming zero (here the
    caller's, the thread zeroing nothing at max_rate 0), the reference a
    hot zero is judged by; blocks after it are zeroed at their release."""
    if not _tried(64 * KiB):
        pytest.skip("this machine's thresholds leave 64 KiB blocks out of reuse='auto' "
                    "(nt_min %d, hot_max %d)" % (cp.thresholds().nt_min,
                                                  cp.thresholds().hot_max))
    with cp.Pool("64K", page_size="4k", capacity="64K", max_rate=0, low_water=0) as pool:
        assert pool.reuse == "auto" and pool.stats().reusing == "hot"
        assert "whichever short trials" in pool.describe()
        blk = pool.acquire()
        _fill(blk)
        blk.release()
        st = pool.stats()
        assert st.dirty == 1 and st.release_zeroed_bytes == 0
        blk = pool.acquire()                    # zeroed by the caller: the reference
        assert cp.is_zero(blk)
        _fill(blk)
        blk.release()
        st = pool.stats()
        assert st.dirty == 0 and st.ready == 1 and st.release_zeroed_bytes == 64 * KiB


def test_reuse_auto_tries_cold_from_time_to_time_and_every_block_is_zero():
    if not _tried(64 * KiB):
        pytest.skip("this machine's thresholds leave 64 KiB blocks out of reuse='auto'")
    with cp.Pool("64K", page_size="4k", capacity="512K", max_rate="max") as pool:
        for i in range(400):
            held = [pool.acquire() for _ in range(1 + i % 3)]
            for b in held:
                assert cp.is_zero(b)
                _fill(b, 1 + i % 255)
            for b in held:
                b.release()
        st = pool.stats()
        assert st.reuse_trials >= 1 and st.release_zeroed_bytes > 0
        assert st.reusing in ("hot", "cold")
        assert st.acquires == st.releases


def test_reuse_auto_leaves_blocks_from_the_streaming_threshold_to_the_thread():
    code = ("import ctypes, clearpages as cp\n"
            "p = cp.Pool('64K', page_size='4k', capacity='256K', max_rate='max')\n"
            "for _ in range(100):\n"
            "    b = p.acquire(); ctypes.memset(b.address, 1, b.size); b.release()\n"
            "s = p.stats(); print(s.release_zeroed_bytes, s.reuse_trials)\n"
            "print(p.describe()); p.close()")
    r = run_python(code, env={"CLEARPAGES_NT_THRESHOLD": "64K"})
    assert r.returncode == 0, r.stderr
    first, text = r.stdout.split("\n", 1)
    assert first.split() == ["0", "0"]
    assert "below the streaming threshold, no routine forced" in text


@pytest.mark.parametrize("reuse", ["hot", "auto"])
def test_numpy_arrays_from_a_pool_reused_hot_read_zero(reuse):
    np = pytest.importorskip("numpy")
    with cp.Pool("256K", page_size="4k", capacity="1M", reuse=reuse) as pool:
        with cp.zeroed_arrays(pool):
            for i in range(300):
                a = np.zeros(256 * KiB, np.uint8)
                assert not a.any()
                a[: (i * 4096) % a.size + 1] = 1 + i % 200
                del a
        st = pool.stats()
        assert st.acquires == st.releases >= 300 and st.out == 0
        if reuse == "hot" or _tried(256 * KiB):
            assert st.release_zeroed_bytes > 0


def test_the_thread_zeroes_what_comes_back():
    # reuse="cold": every block given back is the thread's to zero
    with cp.Pool("64K", page_size="4k", capacity="128K", max_rate="max",
                 reuse="cold") as pool:
        assert _eventually(lambda: pool.stats().ready >= 1)
        a, b = pool.acquire(), pool.acquire()
        _fill(a)
        _fill(b)
        a.release()
        b.release()
        assert _eventually(lambda: pool.stats().ready == 2)
        st = pool.stats()
        assert st.zeroed_bytes >= 128 * KiB and st.dirty == 0
        for _ in range(2):
            blk = pool.acquire_nowait()
            assert blk is not None and cp.is_zero(blk)
            blk.release()


def test_the_blocks_kept_ready_never_exceed_the_capacity():
    """Threads that outnumber the blocks miss often; each miss raises the
    number kept ready flat out, but never past what the capacity holds (a
    target above it could never be met, and kept the thread flat out)."""
    with cp.Pool("64K", page_size="4k", capacity="256K", low_water=1) as pool:
        limit = pool.capacity // pool.block_size
        seen = []

        def work():
            for _ in range(60):
                with pool.acquire() as blk:
                    memoryview(blk)[0] = 1
                    time.sleep(0.001)           # held a while: the others miss
                seen.append(pool.stats().ready_target)

        threads = [threading.Thread(target=work) for _ in range(6)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        st = pool.stats()
        assert st.acquires_waited > limit        # enough misses to have gone past it
        assert max(seen + [st.ready_target]) <= limit, (max(seen), limit)


def test_paced_zeroing_is_reported():
    # Blocks made ready first, so that no acquire finds none ready (which
    # would raise the number kept ready flat out).
    with cp.Pool("1M", page_size="4k", capacity="2M", max_rate="256M",
                 low_water=2, reuse="cold") as pool:
        assert _eventually(lambda: pool.stats().ready == 2)
        blocks = [pool.acquire() for _ in range(2)]
        pool.set_pace(max_rate="256M", low_water=0)
        assert pool.stats().ready_target == 0 and pool.stats().acquires_waited == 0
        for b in blocks:
            _fill(b)
            b.release()
        assert _eventually(lambda: pool.stats().ready == 2)
        st = pool.stats()
        assert st.paced_bytes == 2 * MiB and st.paced_seconds > 0
        assert st.pace is not None and st.zero_rate is not None


def test_callers_that_find_none_ready_raise_the_blocks_kept_ready():
    """A program that takes blocks faster than the pace: each acquire that
    finds none ready raises the number the thread zeroes ready flat out, so
    blocks given back are zeroed at once, not at the pace; a second without
    such an acquire halves the rise.  At max_rate=0 nothing rises."""
    with cp.Pool("64K", page_size="4k", capacity="256K", max_rate=16, reuse="cold",
                 low_water=0) as pool:
        held = [pool.acquire() for _ in range(3)]      # none ready: each waits
        st = pool.stats()
        assert st.acquires_waited == 3 and st.ready_target == 3
        for b in held:
            _fill(b)
            b.release()
        # At 16 bytes a second the pace alone would take over an hour.
        assert _eventually(lambda: pool.stats().ready == 3)
        assert pool.stats().paced_bytes == 0
        time.sleep(1.1)
        assert pool.stats().ready_target < 3
        pool.set_pace(max_rate=0, low_water=0)
        assert pool.stats().ready_target == 0
        held = [pool.acquire() for _ in range(4)]
        assert pool.stats().ready_target == 0
        for b in held:
            b.release()


def test_a_new_pace_applies_at_once():
    """A thread asleep at a pace of a few bytes a second takes a new pace
    at once, not when the old one would have let it go on."""
    with cp.Pool("2M", page_size="4k", capacity="2M", max_rate=16, low_water=1,
                 reuse="cold") as pool:
        assert _eventually(lambda: pool.stats().ready == 1)
        blk = pool.acquire()                    # ready: the mark does not rise
        pool.set_pace(max_rate=16, low_water=0)
        _fill(blk)
        blk.release()
        time.sleep(0.01)
        assert pool.stats().ready == 0
        pool.set_pace(max_rate="max")
        assert _eventually(lambda: pool.stats().ready == 1)


def test_low_water_blocks_are_kept_ready():
    with cp.Pool("64K", page_size="4k", low_water=3) as pool:
        assert _eventually(lambda: pool.stats().ready == 3)
        held = [pool.acquire() for _ in range(3)]
        assert _eventually(lambda: pool.stats().ready == 3)
        st = pool.stats()
        assert st.out == 3 and st.populated_bytes >= 6 * 64 * KiB
        for b in held:
            b.release()
        pool.set_pace(low_water=0)
        assert pool.low_water == 0


# ---- capacity, growth, waiting ------------------------------------------------


def test_capacity_bounds_the_blocks():
    with cp.Pool("64K", page_size="4k", capacity="200K") as pool:
        held = [pool.acquire() for _ in range(3)]
        assert pool.acquire_nowait() is None
        with pytest.raises(TimeoutError, match="3 of 3 blocks are out"):
            pool.acquire(timeout=0.01)
        with pytest.raises(TimeoutError):
            pool.acquire(timeout=0)
        st = pool.stats()
        assert st.blocks == 3 and st.refused == 3 and st.capacity == 200 * KiB
        for b in held:
            b.release()


def test_pool_grows_on_demand():
    with cp.Pool("32M", page_size="4k", low_water=0) as pool:
        held = [pool.acquire() for _ in range(4)]   # 64 MiB a chunk: two chunks
        st = pool.stats()
        assert st.blocks == 4 and st.grows == 2 and st.out == 4
        addrs = {b.address for b in held}
        assert len(addrs) == 4
        for b in held:
            assert pool._owns(b.address) and pool._owns(b.address + b.size - 1)
            b.release()
        assert not pool._owns(id(pool))


def test_a_waiting_acquire_gets_the_block_released_meanwhile():
    with cp.Pool("64K", page_size="4k", capacity="64K") as pool:
        blk = pool.acquire()
        _fill(blk)
        got = []
        t = threading.Thread(target=lambda: got.append(pool.acquire(timeout=30)))
        t.start()
        time.sleep(0.02)
        assert not got
        blk.release()
        t.join()
        assert got and cp.is_zero(got[0])
        assert pool.stats().acquires_waited >= 1
        got[0].release()


def test_trim_hands_idle_blocks_back():
    with cp.Pool("1M", page_size="4k", capacity="4M", low_water=0, max_rate="max") as pool:
        held = [pool.acquire() for _ in range(4)]
        for b in held:
            _fill(b)
        held[0].release()
        held[1].release()
        assert _eventually(lambda: pool.stats().dirty == 0)
        assert pool.trim() == 2 * MiB
        st = pool.stats()
        assert st.fresh == 2 and st.ready == 0 and st.trimmed_bytes == 2 * MiB
        blk = pool.acquire()
        assert cp.is_zero(blk)
        for b in held[2:] + [blk]:
            b.release()


# ---- closing ----------------------------------------------------------------------


def test_close_refuses_while_blocks_are_out():
    pool = cp.Pool("64K", page_size="4k")
    blk = pool.acquire()
    with pytest.raises(BufferError, match="1 block of it is out"):
        pool.close()
    assert not pool.closed
    blk.release()
    pool.close()
    pool.close()                        # twice is allowed
    assert pool.closed
    with pytest.raises(ValueError, match="closed"):
        pool.acquire()
    with pytest.raises(ValueError, match="closed"):
        pool.acquire_nowait()
    assert "closed" in repr(pool)


def test_the_end_of_a_with_keeps_memory_until_the_last_block():
    with cp.Pool("64K", page_size="4k") as pool:
        blk = pool.acquire()
        m = memoryview(blk)
    assert pool.closed
    m[:] = b"\x01" * len(m)             # still the block's memory
    assert pool._owns(blk.address)
    m.release()
    blk.release()
    assert not pool._owns(blk.address)  # unmapped with the last block


def test_blocks_outlive_the_pool_object():
    pool = cp.Pool("64K", page_size="4k")
    blk = pool.acquire()
    del pool
    gc.collect()
    m = memoryview(blk)
    m[:4] = b"abcd"
    assert bytes(m[:4]) == b"abcd"
    m.release()
    blk.release()


# ---- arguments ----------------------------------------------------------------------


@pytest.mark.parametrize("args, kw, kind, words", [
    ((1.5,), {}, TypeError, "byte count"),
    ((None,), {}, TypeError, "byte count"),
    ((0,), {}, ValueError, "at least 1 byte"),
    (("lots",), {}, ValueError, "64M"),
    ((-4096,), {}, ValueError, "at least"),
    (("64K",), {"capacity": 1.0}, TypeError, "capacity takes a byte count"),
    (("64K",), {"capacity": "32K"}, ValueError, "less than one block"),
    (("64K",), {"page_size": "3k"}, ValueError, "'4k', '2m', '1g' or 'auto'"),
    (("64K",), {"page_size": 4.0}, TypeError, "page_size takes"),
    (("64K",), {"max_rate": -1}, ValueError, "at least"),
    (("64K",), {"max_rate": "fast"}, ValueError, "64M"),
    (("64K",), {"max_rate": [1]}, TypeError, "bytes a second"),
    (("64K",), {"max_rate": True}, TypeError, "bytes a second"),
    (("64K",), {"max_rate": float("nan")}, ValueError, "bytes a second"),
    (("64K",), {"max_rate": 1.5}, ValueError, "whole number of bytes a second"),
    (("64K",), {"low_water": -1}, ValueError, ">= 0"),
    (("64K",), {"low_water": 1.5}, TypeError, "number of blocks"),
    (("64K",), {"fork": "share"}, ValueError, "'keep'"),
    (("64K",), {"fork": 1}, TypeError, "'keep', 'wipe' or 'drop'"),
    (("64K",), {"debug": 1}, TypeError, "True, False or None"),
    (("64K",), {"reuse": "warm"}, ValueError, "'auto'.*'hot'.*'cold'"),
    (("64K",), {"reuse": True}, TypeError, "'auto', 'hot' or 'cold'"),
])
def test_bad_arguments(args, kw, kind, words):
    with pytest.raises(kind, match=words):
        cp.Pool(*args, page_size=kw.pop("page_size", "4k"), **kw)


def test_bad_acquire_arguments(pool):
    with pytest.raises(TypeError, match="seconds"):
        pool.acquire(timeout="1")
    with pytest.raises(TypeError, match="seconds"):
        pool.acquire(timeout=True)
    with pytest.raises(ValueError, match=">= 0"):
        pool.acquire(timeout=-1)
    with pytest.raises(ValueError, match=">= 0"):
        pool.acquire(timeout=float("nan"))
    with pytest.raises(TypeError, match="positional"):
        pool.acquire(1)
    with pytest.raises(TypeError, match="timeout="):
        pool.acquire(wait=1)
    blk = pool.acquire(timeout=5)
    blk2 = pool.acquire(timeout=None)
    blk.release()
    blk2.release()


def test_max_rate_forms():
    for value, rate in ((None, cp.Pool.DEFAULT_MAX_RATE), ("max", (1 << 64) - 1),
                        (float("inf"), (1 << 64) - 1), (0, 0), ("1G", 1 << 30),
                        (5e8, 500_000_000), (500_000_000, 500_000_000)):
        with cp.Pool("64K", page_size="4k", max_rate=value) as pool:
            assert pool.max_rate == rate
            assert "zeroed by the pool's thread with %s" % pool.routine in pool.describe()


def test_the_routine_is_the_policys_for_memory_not_used_soon(pool):
    assert pool.routine == cp._fast.decide(pool.block_size, 1, 1, "auto", False)[0]


def test_pool_debug_variable():
    code = ("import clearpages as cp; p = cp.Pool('64K', page_size='4k'); b = p.acquire(); "
            "print(p.debug, p.stats().checked); b.release(); p.close()")
    r = run_python(code, env={"CLEARPAGES_POOL_DEBUG": "1"})
    assert r.returncode == 0 and r.stdout.split() == ["True", "1"], r.stderr
    r = run_python("import clearpages", env={"CLEARPAGES_POOL_DEBUG": "maybe"})
    assert r.returncode != 0 and "CLEARPAGES_POOL_DEBUG" in r.stderr


# ---- failures ------------------------------------------------------------------------


@pytest.fixture
def inject():
    yield lambda site, nth, err: lib.cp_inject_arm(site, nth, err)
    lib.cp_inject_arm(lib.CP_INJECT_NONE, 0, 0)


def test_thread_that_cannot_start(inject):
    inject(lib.CP_INJECT_POOL_THREAD, 1, 11)       # EAGAIN
    with pytest.raises(OSError, match="thread"):
        cp.Pool("64K", page_size="4k")


def test_memory_that_cannot_be_mapped(inject):
    with cp.Pool("64K", page_size="4k", low_water=0) as pool:
        inject(lib.CP_INJECT_POOL_GROW, 1, 12)     # ENOMEM
        with pytest.raises(MemoryError, match="64 KiB"):
            pool.acquire()
        blk = pool.acquire()                        # the next grow works
        assert cp.is_zero(blk)
        blk.release()


def test_the_thread_reports_its_failure(inject):
    inject(lib.CP_INJECT_POOL_GROW, 1, 12)
    with cp.Pool("64K", page_size="4k") as pool:
        assert _eventually(lambda: pool.stats().error is not None)
        assert "memory" in pool.stats().error.lower()
        blk = pool.acquire()
        blk.release()


def test_hugetlb_pool_or_a_clear_error():
    from clearpages._system import hugetlb_pages

    pages = hugetlb_pages(1 << 30)
    if (pages["free"] or 0) - (pages["reserved"] or 0) < 1:
        with pytest.raises(cp.HugePagesUnavailable, match="hugetlb"):
            with cp.Pool("1G", page_size="1g", low_water=0) as pool:
                pool.acquire()
        return
    with cp.Pool("1G", page_size="1g", low_water=0) as pool:   # pragma: no cover
        blk = pool.acquire()
        assert blk.size == 1 << 30 and pool.fork == "drop"
        blk.release()


def test_native_api_has_the_pool():
    assert _native.lib.CP_POOL_PREPARE and _native.lib.CP_POOL_WAIT


# ---- the bench section's own code (not its figures) ----------------------------------


def test_bench_pool_section_runs():
    pytest.importorskip("numpy")
    from clearpages.tools import poolbench

    res = poolbench.time_to_zeroed(4 * MiB, 0.0, rounds=1)
    assert {"pool", "np.zeros", "np.zeros, zeroed_arrays", "Region populate"} <= set(res["rows"])
    assert all(row["round_s"] > 0 for row in res["rows"].values())
    lat = poolbench.latency(block=64 * KiB, work_s=0, n=50, page_size="4k")
    assert lat["p50_us"] <= lat["p99_us"] <= lat["max_us"] and 0 <= lat["ready_share"] <= 1


def test_bench_pool_refuses_other_options():
    r = run_python("import sys; from clearpages.tools import cli; "
                   "sys.exit(cli.main(['bench', '--pool', '--methods', 'libc']))")
    assert r.returncode != 0 and "--pool" in r.stderr, r.stderr


def test_plan_describes_a_pool():
    r = run_python("import sys; from clearpages.tools import cli; "
                   "sys.exit(cli.main(['plan', '3M', '--pool']))")
    assert r.returncode == 0, r.stderr
    assert r.stdout.endswith("\n") and not r.stdout.endswith("\n\n"), repr(r.stdout[-40:])
    text = " ".join(r.stdout.split())
    assert "blocks of 4 MiB" in text or "blocks of 3 MiB" in text, text
    assert "fewer than 1 is ready" in text and "thread" in text
    # what it zeroes with, its pace, its rise, how fresh blocks are faulted in
    assert "for memory not used soon" in text and "GB/s otherwise" in text
    assert "each acquire that finds none ready" in text and "MADV_POPULATE_WRITE" in text
    r = run_python("import sys; from clearpages.tools import cli; "
                   "sys.exit(cli.main(['plan', '64K', '--pool', '--json']))")
    import json

    assert r.stdout.endswith("}\n"), repr(r.stdout[-40:])
    facts = json.loads(r.stdout)
    # The child has none of this process's CLEARPAGES_* variables (run_python).
    assert facts["block_size"] == 64 * KiB and facts["routine"] in cp.ALL_METHODS
    assert facts["low_water"] == 1 and facts["reason"]
