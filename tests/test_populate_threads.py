"""Region populate spread over threads: every page faulted in, contents kept,
each thread on its own part; threads="auto" measures before it spreads.
No timing is asserted: the speed is measured in bench/bench_region.py."""

from __future__ import annotations

import ctypes
import os

import pytest

import clearpages as cp
from clearpages import _region
from clearpages._native import lib

MiB = 1 << 20


@pytest.mark.parametrize("threads", [1, 2, 3, 7, "auto"])
def test_every_page_faulted_in_contents_kept(threads):
    size = 5 * MiB + 3 * 4096                       # pages that do not split evenly
    with cp.Region(size, page_size="4k") as r:
        for off in (0, 4096 * 5, size - 1):
            ctypes.memset(r.address + off, 0x5A, 1)
        r.populate(threads=threads)
        assert r.backing.rss == size
        v = r.view()
        assert v[0] == v[4096 * 5] == v[size - 1] == 0x5A
        assert sum(v[1:4096 * 5]) == 0
        v.release()


def test_made_populated_with_threads():
    with cp.Region("8M", page_size="4k", populate=True, threads=2) as r:
        assert r.backing.rss == 8 * MiB


def test_more_threads_than_pages():
    with cp.Region(3 * 4096, page_size="4k") as r:
        assert lib.cp_region_populate_threads(r.address, r.size, 4096, r._kind, 64) == 0
        assert r.backing.rss == 3 * 4096


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="one CPU: nothing to spread over")
def test_auto_measures_and_says_what_it_found():
    _region.POPULATE_FINDINGS.pop("4k", None)
    size = 4 * _region._PROBE
    with cp.Region(size, page_size="4k", populate=True, threads="auto") as r:
        assert r.backing.rss == size
    found = _region.POPULATE_FINDINGS["4k"]
    assert found["tried"] >= 2 and found["threads"] in (1, found["tried"])
    assert found["one_gbps"] > 0 and found["spread_gbps"] > 0
    # The rule it applied, on its own figures: spread only where that paid.
    assert (found["threads"] > 1) == (found["speedup"] >= _region._SPREAD_GAIN)


def test_auto_on_a_small_region_keeps_one_thread():
    _region.POPULATE_FINDINGS.pop("4k", None)
    with cp.Region("1M", page_size="4k", populate=True, threads="auto") as r:
        assert r.backing.rss == MiB
    assert "4k" not in _region.POPULATE_FINDINGS


@pytest.mark.parametrize("threads, kind, words", [
    ("two", TypeError, r"an int from 1 to 64 \(the most a populate spreads its faults "
                       r"over\) or 'auto'"),
    (1.0, TypeError, "an int from 1 to 64"),
    (True, TypeError, "an int"),
    (None, TypeError, "an int"),
    (0, ValueError, "from 1 to 64"),
    (65, ValueError, "from 1 to 64"),
])
def test_bad_threads(threads, kind, words):
    with pytest.raises(kind, match=words):
        cp.Region("1M", populate=True, threads=threads)
    with cp.Region("1M") as r:
        with pytest.raises(kind, match=words):
            r.populate(threads=threads)
