"""zeroed_arrays(pool): numpy's np.zeros and np.empty from a Pool.

What is promised: inside the block, requests of min_size up to a block
take a block (zero), every other request is numpy's as before; arrays made
inside outlive the block and the Pool object; each array's block goes back
to the pool when the array goes; outside nothing changes.
"""

from __future__ import annotations

import gc
import threading

import pytest
from conftest import run_python

import clearpages as cp

np = pytest.importorskip("numpy")
if tuple(int(x) for x in np.__version__.split(".")[:2]) < (1, 22):
    pytest.skip("numpy's allocator handlers came with numpy 1.22", allow_module_level=True)

KiB = 1 << 10
MiB = 1 << 20
BLOCK = 1 * MiB


def _handler_name(a=None):
    try:
        from numpy._core.multiarray import get_handler_name
    except ImportError:             # numpy 1.x
        from numpy.core.multiarray import get_handler_name
    return get_handler_name(a) if a is not None else get_handler_name()


@pytest.fixture
def pool():
    with cp.Pool(BLOCK, page_size="4k", low_water=0) as p:
        yield p


def _from(pool, a) -> bool:
    return pool._owns(a.__array_interface__["data"][0])


def test_zeros_and_empty_of_a_block_come_from_the_pool(pool):
    before = _handler_name()
    with cp.zeroed_arrays(pool) as p:
        assert p is pool
        z = np.zeros(BLOCK // 8)
        e = np.empty(BLOCK, dtype=np.uint8)
        assert _from(pool, z) and _from(pool, e)
        assert _handler_name(z) == "clearpages_pool"
        assert not z.any() and not e.any()      # a pool block is zero, empty's too
        assert pool.stats().out == 2
        z[::512] = 1.0
        del z, e
        gc.collect()
        st = pool.stats()
        assert st.out == 0 and st.releases == 2
    assert _handler_name() == before


def test_other_sizes_are_numpys(pool):
    with cp.zeroed_arrays(pool):
        small = np.zeros(BLOCK // 8 - 1)
        large = np.zeros(BLOCK + 8, dtype=np.uint8)
        tiny = np.ones(3)
        for a in (small, large, tiny):
            assert not _from(pool, a)
        assert not small.any() and not large.any() and tiny.sum() == 3
        del small, large, tiny
    assert pool.stats().acquires == 0


def test_min_size_takes_smaller_arrays():
    with cp.Pool("2M", page_size="4k", low_water=0) as pool:
        with cp.zeroed_arrays(pool, min_size="1M"):
            a = np.zeros(3 * MiB // 2, dtype=np.uint8)
            b = np.zeros(MiB - 1, dtype=np.uint8)
            assert _from(pool, a) and not _from(pool, b)
            del a, b


def test_nothing_changes_outside(pool):
    with cp.zeroed_arrays(pool):
        pass
    a = np.zeros(BLOCK, dtype=np.uint8)
    assert not _from(pool, a)
    assert pool.stats().acquires == 0


def test_arrays_outlive_the_block_and_the_pool():
    pool = cp.Pool(BLOCK, page_size="4k")
    with cp.zeroed_arrays(pool):
        arrays = [np.zeros(BLOCK, dtype=np.uint8) for _ in range(3)]
    assert all(_from(pool, a) for a in arrays)
    pool.__exit__(None, None, None)             # closed: memory kept for the arrays
    assert pool.closed and pool.stats().out == 3
    addr = arrays[0].__array_interface__["data"][0]
    arrays.pop()
    gc.collect()
    assert pool.stats().out == 2
    del pool
    gc.collect()
    for i, a in enumerate(arrays):
        a[:] = i + 1                            # still mapped
        assert a.sum() == (i + 1) * BLOCK
    del a
    arrays.clear()
    gc.collect()
    # The memory went with the last array: the address may be anyone's now.
    assert addr


def test_every_arrays_memory_returns_to_the_pool(pool):
    with cp.zeroed_arrays(pool):
        for i in range(200):
            a = np.zeros(BLOCK // 8) if i % 2 else np.empty(BLOCK, dtype=np.uint8)
            assert _from(pool, a) and not a.any()
            a[::4096 // a.itemsize] = 1
            b = a.reshape(-1, 8)                # a view keeps the block ...
            del a
            assert pool.stats().out == 1
            del b                               # ... and its last reference gives it back
            assert pool.stats().out == 0
    st = pool.stats()
    assert st.acquires == st.releases == 200 and st.out == 0


def test_resize_moves_out_of_a_block_and_back_in(pool):
    with cp.zeroed_arrays(pool):
        a = np.zeros(BLOCK, dtype=np.uint8)
        a[:10] = 7
        a.resize(BLOCK // 2, refcheck=False)      # still fits its block
        assert _from(pool, a) and pool.stats().out == 1
        a.resize(2 * BLOCK, refcheck=False)       # too large for a block: numpy's memory
        assert not _from(pool, a)
        assert (a[:10] == 7).all() and not a[10:BLOCK // 2].any() and not a[BLOCK:].any()
        assert pool.stats().out == 0
        b = np.ones(100)
        b.resize(BLOCK // 8, refcheck=False)      # numpy's, and stays numpy's
        assert not _from(pool, b) and b[:100].sum() == 100
        del a, b


def test_np_resize_and_copies(pool):
    with cp.zeroed_arrays(pool):
        a = np.arange(BLOCK // 8, dtype=np.float64)
        assert _from(pool, a)                   # empty, then filled by arange
        r = np.resize(a, (BLOCK // 8,))
        c = a.copy()
        assert _from(pool, r) and _from(pool, c) and (c == a).all()
        del a, r, c
    assert pool.stats().out == 0


def test_a_full_pool_falls_back_to_numpy():
    with cp.Pool(BLOCK, page_size="4k", capacity=BLOCK, low_water=0) as pool:
        with cp.zeroed_arrays(pool):
            a = np.zeros(BLOCK, dtype=np.uint8)
            b = np.zeros(BLOCK, dtype=np.uint8)
            assert _from(pool, a) and not _from(pool, b) and not b.any()
            del a, b


def test_nested_pools_stack():
    with cp.Pool(BLOCK, page_size="4k", low_water=0) as p1, \
            cp.Pool(2 * BLOCK, page_size="4k", low_water=0) as p2:
        with cp.zeroed_arrays(p1):
            with cp.zeroed_arrays(p2):
                a = np.zeros(BLOCK, dtype=np.uint8)
                b = np.zeros(2 * BLOCK, dtype=np.uint8)
                assert _from(p1, a) and _from(p2, b)
            c = np.zeros(2 * BLOCK, dtype=np.uint8)
            assert not _from(p2, c)
            del a, b, c
        assert p1.stats().out == p2.stats().out == 0


def test_other_threads_keep_their_allocator(pool):
    seen = []
    with cp.zeroed_arrays(pool):
        t = threading.Thread(target=lambda: seen.append(
            _from(pool, np.zeros(BLOCK, dtype=np.uint8))))
        t.start()
        t.join()
    assert seen == [False]


def test_a_copied_context_carries_it_into_a_thread(pool):
    """A thread starts in a context of its own; the program's copy of its
    context, run in the thread, takes its blocks from the pool."""
    import contextvars

    seen = []
    with cp.zeroed_arrays(pool):
        ctx = contextvars.copy_context()
    t = threading.Thread(target=lambda: seen.append(
        ctx.run(lambda: _from(pool, np.zeros(BLOCK, dtype=np.uint8)))))
    t.start()
    t.join()
    assert seen == [True]
    assert pool.stats().out == 0


def test_threads_under_one_pool_each_get_zeroed_blocks():
    """Threads, each in zeroed_arrays of one small pool, allocating,
    dirtying and dropping blocks at once: every array starts zero, and
    every block comes back."""
    with cp.Pool(BLOCK, capacity=4 * BLOCK, page_size="4k") as p:
        bad = []

        def work(k: int) -> None:
            with cp.zeroed_arrays(p):
                for i in range(100):
                    a = np.zeros(BLOCK, dtype=np.uint8)
                    b = np.empty(BLOCK, dtype=np.uint8)
                    if a.any():
                        bad.append((k, i))
                    a[:] = k + 1
                    b[:] = 0xFF
                    del a, b

        threads = [threading.Thread(target=work, args=(k,)) for k in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        s = p.stats()
        assert bad == []
        assert s.out == 0 and s.acquires > 0


def test_bad_arguments(pool):
    with pytest.raises(TypeError, match=r"clearpages\.Pool"):
        cp.zeroed_arrays(42)
    with pytest.raises(ValueError, match="larger than the pool's blocks"):
        cp.zeroed_arrays(pool, min_size=2 * BLOCK)
    with pytest.raises(TypeError, match="byte count"):
        cp.zeroed_arrays(pool, min_size=1.5)
    z = cp.zeroed_arrays(pool)
    with z:
        with pytest.raises(RuntimeError, match="in use"):
            z.__enter__()
    closed = cp.Pool(BLOCK, page_size="4k")
    closed.close()
    with pytest.raises(ValueError, match="closed"):
        with cp.zeroed_arrays(closed):
            pass


def test_without_numpy_the_pool_works():
    code = ("import sys; sys.modules['numpy'] = None\n"
            "import clearpages as cp\n"
            "p = cp.Pool('64K', page_size='4k'); b = p.acquire(); print(cp.is_zero(b)); "
            "b.release()\n"
            "try:\n    cp.zeroed_arrays(p).__enter__()\n"
            "except ImportError as e:\n    print('needs numpy' in str(e))\n")
    r = run_python(code)
    assert r.returncode == 0 and r.stdout.split() == ["True", "True"], r.stderr


def test_forked_child_falls_back(pool):
    code = r"""
import os, numpy as np, clearpages as cp
pool = cp.Pool("1M", page_size="4k")
with cp.zeroed_arrays(pool):
    a = np.zeros(1 << 20, dtype=np.uint8)
    a[:3] = 5
    pid = os.fork()
    if pid == 0:
        b = np.zeros(1 << 20, dtype=np.uint8)       # the child's copy hands out nothing
        ok = not pool._owns(b.ctypes.data) and a[:3].sum() == 15
        del a, b                                     # the parent's block: let go here
        os._exit(0 if ok else 3)
    _, status = os.waitpid(pid, 0)
    print(os.waitstatus_to_exitcode(status), pool.stats().out)
    del a
print(pool.stats().out)
"""
    r = run_python(code, env={"PYTHONWARNINGS": "ignore::DeprecationWarning"})
    assert r.returncode == 0 and r.stdout.split() == ["0", "1", "0"], (r.stdout, r.stderr)
