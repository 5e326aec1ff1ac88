"""The pool section of ``python -m clearpages bench --pool``.

Four measurements, each side by side in one process, rounds interleaved:

1. acquire latency: ``Pool.acquire()`` of a 2 MiB block with 100 us of
   work (a busy loop that touches no memory) between acquires, while the
   pool's thread keeps up: percentiles of the call's own time.
2. time to a zeroed, resident buffer: a loop of get a buffer, write one
   byte of every 4 KiB page, let it go, with ``work_s`` of busy work before
   each (0: a tight loop).  Against ``np.zeros`` + touch, ``torch.zeros``
   + touch where torch is installed, ``Region(populate=True)`` + touch, and
   ``np.zeros`` under ``zeroed_arrays`` + touch.  The pool's row times the
   acquire and the writes; "acquire" alone is the time to zeroed memory.
3. a co-running memory-bound loop (a copy of 64 MiB arrays in another
   process, pinned to another CPU) timed in phases: the pool idle, the pool
   zeroing at its default pace, and flat out; its slowdown, and the pace
   the pool reached.
4. (in 2) numpy's own allocator against ``zeroed_arrays``.
5. ``Region(populate=True, threads=...)``: one thread, two, and "auto".

The load average before and after each is part of its result: the
machine's other work shows in every figure.

numpy is needed (the touches); torch is optional.
"""

from __future__ import annotations

import contextlib
import mmap
import os
import random
import statistics
import struct
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from typing import Any, TextIO

from .._pool import DEFAULT_MAX_RATE, Pool
from .._region import Region
from .._units import MiB, format_size
from .._zeroed_arrays import zeroed_arrays

PAGE = 4096


def spin(seconds: float) -> None:
    """Busy work that touches no memory: the program between requests."""
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def _percentile(xs: list[float], q: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, int(q * len(s)))]


def _load() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def latency(block: int = 2 * MiB, work_s: float = 100e-6, n: int = 3000,
            page_size: str = "auto") -> dict[str, Any]:
    """Percentiles of acquire() in microseconds, of every call and of the
    calls that found a block ready (the pool kept up), and the pool's
    counters."""
    clock = time.perf_counter_ns
    pairs = [(clock(), clock()) for _ in range(1000)]
    overhead = min(b - a for a, b in pairs)
    samples: list[float] = []
    ready: list[float] = []
    load0 = _load()
    with Pool(block, page_size=page_size) as pool:
        for _ in range(50):                     # the first blocks are faulted in
            pool.acquire().release()
            spin(work_s)
        before = pool.stats()
        was = before.acquires_ready
        for _ in range(n):
            t0 = clock()
            blk = pool.acquire()
            t1 = clock()
            took = (t1 - t0) / 1e3
            samples.append(took)
            now = pool._stats()["acquires_ready"]   # within the work, untimed
            if now != was:
                ready.append(took)
            was = now
            spin(work_s - (clock() - t1) / 1e9)
            blk.release()
        st = pool.stats()
    return {
        "block": block, "work_us": work_s * 1e6, "n": n, "page_size": pool.page_size_name,
        "p50_us": _percentile(samples, 0.5), "p90_us": _percentile(samples, 0.9),
        "p99_us": _percentile(samples, 0.99), "max_us": max(samples),
        "ready_p50_us": _percentile(ready, 0.5) if ready else None,
        "ready_p99_us": _percentile(ready, 0.99) if ready else None,
        "clock_us": max(0, overhead) / 1e3,
        "ready_share": (st.acquires_ready - before.acquires_ready) / n,
        "ready_target": st.ready_target, "load": [load0, _load()],
    }


def _numpy() -> Any:
    import numpy as np

    return np


def _torch() -> Any:
    import importlib

    try:
        return importlib.import_module("torch")
    except ImportError:
        return None


@contextlib.contextmanager
def _candidates(size: int) -> Iterator[dict[str, Callable[[], float]]]:
    """name -> one round: get a zeroed buffer, write a byte of every page,
    let it go; returns the seconds to the zeroed buffer (before the writes)
    and the whole round's are timed by the caller."""
    np = _numpy()
    torch = _torch()
    clock = time.perf_counter

    def timed(get: Callable[[], Any], done: Callable[[Any], None]) -> Callable[[], float]:
        """One round: get a buffer (timed), write a byte of every page
        (an array or tensor directly, anything else through numpy), hand
        it back with done."""
        def round_() -> float:
            t0 = clock()
            obj = get()
            t1 = clock()
            a = obj if isinstance(obj, np.ndarray) or (
                torch is not None and isinstance(obj, torch.Tensor)) else \
                np.frombuffer(obj, dtype=np.uint8)
            a[::PAGE] = 1
            del a
            done(obj)
            return t1 - t0
        return round_

    def drop(obj: Any) -> None:
        pass

    with Pool(size, page_size="auto") as pool:
        def handler_zeros() -> Any:
            with zeroed_arrays(pool):
                return np.zeros(size, dtype=np.uint8)

        rounds: dict[str, Callable[[], float]] = {
            "pool": timed(pool.acquire, lambda blk: blk.release()),
            "np.zeros": timed(lambda: np.zeros(size, dtype=np.uint8), drop),
            "np.zeros, zeroed_arrays": timed(handler_zeros, drop),
            "Region populate": timed(
                lambda: Region(size, page_size="auto", populate=True), lambda r: r.close())}
        if torch is not None:
            rounds["torch.zeros"] = timed(lambda: torch.zeros(size, dtype=torch.uint8), drop)
        yield rounds


def time_to_zeroed(size: int, work_s: float, rounds: int = 7,
                   seed: int = 0) -> dict[str, Any]:
    """Median seconds per round (get + touch), to the zeroed buffer, and to
    zeroed, resident memory (np.zeros: its whole round, since its touches
    are what fault it in), per candidate; rounds interleaved in a shuffled
    order."""
    rng = random.Random(seed)
    whole: dict[str, list[float]] = {}
    first: dict[str, list[float]] = {}
    load0 = _load()
    with _candidates(size) as cands:
        for fn in cands.values():                 # once each, untimed: fault in the pool
            fn()
        for _ in range(rounds):
            order = list(cands.items())
            rng.shuffle(order)
            for name, fn in order:
                spin(work_s)
                t0 = time.perf_counter()
                to_zero = fn()
                whole.setdefault(name, []).append(time.perf_counter() - t0)
                first.setdefault(name, []).append(to_zero)
    rows = {}
    base = statistics.median(whole["np.zeros"])
    for name in whole:
        w, z = statistics.median(whole[name]), statistics.median(first[name])
        resident = w if name == "np.zeros" else z
        rows[name] = {"round_s": w, "to_zeroed_s": z, "resident_s": resident,
                      "round_min_s": min(whole[name]), "round_max_s": max(whole[name]),
                      "speedup": base / w if w else None,
                      "resident_speedup": base / resident if resident else None,
                      "rounds_s": whole[name], "to_zeroed_rounds_s": first[name]}
    return {"size": size, "work_s": work_s, "rounds": rounds, "rows": rows,
            "load": [load0, _load()]}


def populate(size: int, rounds: int = 5, seed: int = 0) -> dict[str, Any]:
    """Region(size, populate=True, threads=...) for threads 1, 2 and "auto",
    on 4 KiB and 2 MiB pages, rounds interleaved in a shuffled order: median
    seconds, and what auto chose."""
    from .. import _region
    from .._system import thp_mode

    rng = random.Random(seed)
    load0 = _load()
    pages = ["4k"] + (["2m"] if thp_mode() not in (None, "never") else [])
    out: dict[str, Any] = {"size": size, "rounds": rounds, "pages": {}}
    for page in pages:
        times: dict[str, list[float]] = {}
        chose: list[int] = []
        for _ in range(rounds):
            order: list[int | str] = [1, 2, "auto"]
            rng.shuffle(order)
            for threads in order:
                t0 = time.perf_counter()
                r = Region(size, page_size=page, populate=True, threads=threads)
                times.setdefault(str(threads), []).append(time.perf_counter() - t0)
                r.close()
                if threads == "auto":
                    found = _region.POPULATE_FINDINGS.get(page)
                    chose.append(found["threads"] if found else 1)
        one = statistics.median(times["1"])
        out["pages"][page] = {
            name: {"median_s": statistics.median(t), "min_s": min(t), "max_s": max(t),
                   "vs_one": one / statistics.median(t)} for name, t in times.items()}
        out["pages"][page]["auto_chose"] = chose
    out["load"] = [load0, _load()]
    return out


_CORUNNER = r"""
import mmap, os, struct, sys, numpy as np
cpu, path = int(sys.argv[1]), sys.argv[2]
if cpu >= 0:
    os.sched_setaffinity(0, {cpu})
f = open(path, "r+b")
m = mmap.mmap(f.fileno(), 8)
a = np.ones(64 << 20, dtype=np.uint8)
b = np.empty_like(a)
n = 0
while True:
    np.copyto(b, a)
    n += 1
    m[:8] = struct.pack("q", n)
"""


def co_runner(block: int = 8 * MiB, phase_s: float = 1.0, rounds: int = 3) -> dict[str, Any]:
    """A memory-bound loop in another process, on another CPU: its copies a
    second with the pool idle, at its default pace and flat out."""
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2:
        return {"skipped": "needs two CPUs (one for the program and its pool, one for "
                           "the co-running loop)"}
    mine, other = cpus[0], cpus[1]
    load = [_load()]
    old_affinity = os.sched_getaffinity(0)
    with tempfile.NamedTemporaryFile() as counter:
        counter.write(b"\0" * 8)
        counter.flush()
        m = mmap.mmap(counter.fileno(), 8)
        proc = subprocess.Popen([sys.executable, "-c", _CORUNNER, str(other), counter.name])
        os.sched_setaffinity(0, {mine})
        try:
            def count() -> int:
                value: int = struct.unpack("q", m[:8])[0]
                return value

            deadline = time.monotonic() + 30
            while count() < 3 and time.monotonic() < deadline:
                time.sleep(0.01)
            phases: dict[str, dict[str, list[float]]] = {}
            # reuse="cold": every block given back is the thread's to zero,
            # at the pace under test (hot, the releaser here would zero it).
            with Pool(block, page_size="auto", capacity=64 * block, low_water=0,
                      max_rate=0, reuse="cold") as pool:
                held = [pool.acquire() for _ in range(64)]     # faulted in, then dirty
                for b in held:
                    b.release()
                del held
                paces: dict[str, int | str] = {"idle": 0, "default": DEFAULT_MAX_RATE,
                                               "flat out": "max"}
                for _ in range(rounds):
                    for name, pace in paces.items():
                        pool.set_pace(max_rate=pace)
                        st0, c0, t0 = pool.stats(), count(), time.monotonic()
                        end = t0 + phase_s
                        while time.monotonic() < end:
                            blk = pool.acquire_nowait()     # ready: back to be zeroed again
                            if blk is None:
                                time.sleep(0.0005)
                            else:
                                blk.release()
                        st1, c1, t1 = pool.stats(), count(), time.monotonic()
                        p = phases.setdefault(name, {"rate": [], "pace": []})
                        p["rate"].append((c1 - c0) / (t1 - t0))
                        p["pace"].append((st1.zeroed_bytes - st0.zeroed_bytes) / (t1 - t0))
            load.append(_load())
        finally:
            proc.kill()
            proc.wait()
            os.sched_setaffinity(0, old_affinity)
            m.close()
    rows: dict[str, Any] = {}
    for name, p in phases.items():
        rate = statistics.median(p["rate"])
        # Each round's phase against the same round's idle phase, so that
        # the machine's other work, which drifts, weighs on both alike.
        paired = sorted(1 - r / i for r, i in zip(p["rate"], phases["idle"]["rate"]) if i)
        rows[name] = {"copies_per_s": rate, "slowdown": statistics.median(paired)
                      if paired else None,
                      "slowdown_range": [paired[0], paired[-1]] if paired else None,
                      "pace_bytes_s": statistics.median(p["pace"]),
                      "rates": p["rate"]}
    return {"block": block, "phase_s": phase_s, "rounds": rounds, "rows": rows,
            "default_max_rate": DEFAULT_MAX_RATE, "cpus": [mine, other], "load": load}


def measure(sizes: list[int], *, quick: bool = False,
            progress: Callable[[int, int, str], None] | None = None) -> dict[str, Any]:
    steps = 3 + 2 * len(sizes)
    done = 0

    def step(what: str) -> None:
        nonlocal done
        if progress:
            progress(done, steps, what)
        done += 1

    step("acquire latency")
    data: dict[str, Any] = {"latency": latency(n=1000 if quick else 3000)}
    data["to_zeroed"] = []
    for size in sizes:
        for work in (0.0, 0.040):
            step("%s, %s" % (format_size(size), "tight" if not work else "40 ms of work"))
            data["to_zeroed"].append(time_to_zeroed(size, work, rounds=3 if quick else 7))
    step("populate with threads")
    data["populate"] = populate(max(sizes), rounds=2 if quick else 5)
    step("co-running loop")
    data["co_runner"] = co_runner(phase_s=0.25 if quick else 0.5, rounds=3 if quick else 8)
    if progress:
        progress(steps, steps, "")
    return data


def _load_text(load: list[list[float]]) -> str:
    return "load average %s before, %s after" % tuple(
        " ".join("%.2f" % x for x in one) for one in load)


def report(data: dict[str, Any], out: TextIO) -> None:
    from .output import say

    lat = data["latency"]
    print(file=out)
    say("Pool.acquire() of a %s block (%s pages), %d us of work between, %d calls (%s):"
        % (format_size(lat["block"]), lat["page_size"], lat["work_us"], lat["n"],
           _load_text(lat["load"])), out)
    say("  every call: p50 %.2f us   p90 %.2f us   p99 %.2f us   max %.1f us"
        % (lat["p50_us"], lat["p90_us"], lat["p99_us"], lat["max_us"]), out, hang="    ")
    if lat["ready_p50_us"] is not None:
        say("  the %.1f%% that found a block ready: p50 %.2f us   p99 %.2f us   (the "
            "thread kept %d ready flat out at the end)"
            % (100 * lat["ready_share"], lat["ready_p50_us"], lat["ready_p99_us"],
               lat["ready_target"]), out, hang="    ")
    for res in data["to_zeroed"]:
        work = ("a tight loop" if not res["work_s"]
                else "%d ms of work before each" % (res["work_s"] * 1e3))
        print(file=out)
        say("A zeroed, resident %s, then a write to every page (%s; median of %d; %s):"
            % (format_size(res["size"]), work, res["rounds"], _load_text(res["load"])), out)
        print("  %-24s %11s %9s %11s %9s" % ("", "to resident", "vs numpy", "with writes",
                                              "vs numpy"), file=out)
        for name, row in res["rows"].items():
            print("  %-24s %8.3f ms %8.1fx %8.2f ms %8.1fx"
                  % (name, row["resident_s"] * 1e3, row["resident_speedup"],
                     row["round_s"] * 1e3, row["speedup"]), file=out)
        say("  (numpy: np.zeros + a write to every page, which is what makes it "
            "resident; to resident: the call that gives zeroed, resident memory)", out,
            hang="   ")
    pop = data.get("populate")
    if pop:
        print(file=out)
        say("Region(%s, populate=True, threads=...), median of %d, interleaved (%s):"
            % (format_size(pop["size"]), pop["rounds"], _load_text(pop["load"])), out)
        for page, rows in pop["pages"].items():
            say("  %s pages: %s; auto chose %s" % (page, ", ".join(
                "threads=%s %.1f ms (%.2fx one)" % (name, rows[name]["median_s"] * 1e3,
                                                    rows[name]["vs_one"])
                for name in ("1", "2", "auto")),
                " ".join(str(n) for n in rows["auto_chose"])), out, hang="    ")
    co = data["co_runner"]
    if "skipped" in co:
        print(file=out)
        say("Co-running loop: skipped (%s)" % co["skipped"], out)
        return
    print(file=out)
    say("A memory-bound loop (64 MiB copies) on CPU %d while the pool zeroes %s blocks "
        "on CPU %d (%s):" % (co["cpus"][1], format_size(co["block"]), co["cpus"][0],
                             _load_text(co["load"])), out)
    for name, row in co["rows"].items():
        lo, hi = row["slowdown_range"] or (0.0, 0.0)
        print("  %-9s %6.1f copies/s  loss %5.1f%% (rounds %+.0f%% to %+.0f%%)  %5.2f GB/s"
              % (name, row["copies_per_s"], 100 * (row["slowdown"] or 0), 100 * lo,
                 100 * hi, row["pace_bytes_s"] / 1e9), file=out)
    say("  (loss: the median over rounds of each phase's copies against the same "
        "round's idle phase, %d rounds of %.2g s phases; GB/s: the pool's pace, what it "
        "zeroed a second)" % (co["rounds"], co["phase_s"]), out, hang="   ")


__all__ = ["co_runner", "latency", "measure", "populate", "report", "spin",
           "time_to_zeroed"]
