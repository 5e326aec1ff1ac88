"""Shared pieces of the benchmark suite and the reproduction scripts.

Buffers and the bound clear calls are the package's measurement engine's
(clearpages/tools/measure.py): anonymous mmaps, 2 MiB-aligned and advised
MADV_HUGEPAGE (THP in madvise mode would otherwise give 4 KiB pages and the
clear would measure page faults), written once so that no timed clear pays for
faulting.

Results of pytest-benchmark runs are kept in RESULTS and each bench module
registers a summary (ratios against the goals) that conftest prints at the
end of the session.  The reproduction scripts use plain perf_counter timing so
they run without pytest.
"""

from __future__ import annotations

import ctypes
import datetime
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

try:
    import clearpages as cp
except ImportError:     # `python bench/x.py` from a checkout: sys.path[0] is bench/
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    import clearpages as cp

from clearpages.tools import measure as _measure
from clearpages.tools.lowlevel import format_size

try:
    import numpy as np
except ImportError:     # numpy is optional: numpy.fill rows are skipped
    np = None

KiB = 1 << 10
MiB = 1 << 20
GiB = 1 << 30
PMD = 2 * MiB
PUD = GiB


#: Cases with a working set at least this large are marked slow (run with --slow).
SLOW_BYTES = 512 * MiB


def slow_marks(nbytes: int) -> list:
    import pytest

    return [pytest.mark.slow] if nbytes >= SLOW_BYTES else []


def fmt_size(n: int) -> str:
    """The package's size formatter, without the space (labels and ids: 4KiB)."""
    return format_size(n, sep="")


def size_arg(text: str) -> int:
    """argparse type for sizes: 4096, 64K, 1G (binary units)."""
    from clearpages.tools.lowlevel import parse_size

    return parse_size(text)


def env_scale() -> float:
    """CLEARPAGES_BENCH_SCALE: multiplies the 1 GiB working sets (0.0625 = 64 MiB)."""
    raw = os.environ.get("CLEARPAGES_BENCH_SCALE", "1")
    try:
        scale = float(raw)
    except ValueError:
        raise SystemExit("CLEARPAGES_BENCH_SCALE must be a number, not %r" % raw) from None
    if not 0 < scale <= 16:
        raise SystemExit("CLEARPAGES_BENCH_SCALE must be in (0, 16], not %r" % raw)
    return scale


def scaled(nbytes: int, scale: float, align: int = PMD) -> int:
    return max(align, int(nbytes * scale) // align * align)


# ---- buffers and what to time: the package's measurement engine ----------

#: Prefaulted, 2 MiB-aligned, THP-advised anonymous memory: ``view``,
#: ``address``, ``ptr``, ``size``, ``numpy()`` (clearpages/tools/measure.py).
Buffer = _measure.Buffer


def clear_fn(name: str, buf: Buffer, *, direct: bool = False) -> Callable[[], None]:
    """A zero-argument callable clearing the whole of buf as the engine's
    candidate `name` does: a method (``clear(view, method=name)``, or the
    routine called once, no job and no policy, when ``direct``), "auto", or a
    competitor ("memset", "numpy.fill", "numpy[...]=0")."""
    fn, args, kw = _measure.candidates([name], direct=direct)[0].bind(buf, buf.size, 0)
    return lambda: fn(*args, **kw)


def direct_fn(name: str, buf: Buffer) -> Callable[[], None]:
    """The routine called once on the whole buffer, no job, no policy."""
    return clear_fn(name, buf, direct=True)


#: The non-temporal routines usable here, in the policy's order of preference.
streaming_methods = _measure.streaming_routines


# ---- page-at-a-time, natively -------------------------------------------

_LOOP_SRC = r"""
#include <stddef.h>
typedef void (*clear_fn)(void *, size_t);
/* The kernel's folio_zero_user before multi-page clearing: one call per page. */
void page_at_a_time(void *fn, char *dst, size_t len, size_t page)
{
    clear_fn f = (clear_fn)fn;
    for (size_t off = 0; off < len; off += page)
        f(dst + off, len - off < page ? len - off : page);
}
"""

_loop_lib: Any = None


def page_loop() -> Callable[[str, int, int, int], None] | None:
    """page_loop()(method, addr, nbytes, page): call the routine once per page
    from C, so the comparison with one call measures the routine, not Python.
    None where no C compiler is at hand."""
    global _loop_lib
    if _loop_lib is None:
        d = tempfile.mkdtemp(prefix="clearpages-bench-")
        src, so = os.path.join(d, "loop.c"), os.path.join(d, "loop.so")
        with open(src, "w") as f:
            f.write(_LOOP_SRC)
        cc = os.environ.get("CC", "cc")
        try:
            subprocess.run([cc, "-O2", "-shared", "-fPIC", src, "-o", so], check=True,
                           capture_output=True)
            lib = ctypes.CDLL(so)
        except (OSError, subprocess.CalledProcessError):
            _loop_lib = False
            return None
        finally:
            shutil.rmtree(d, ignore_errors=True)    # a loaded library needs no file
        lib.page_at_a_time.argtypes = [ctypes.c_void_p, ctypes.c_void_p,
                                       ctypes.c_size_t, ctypes.c_size_t]
        lib.page_at_a_time.restype = None
        _loop_lib = lib
    if _loop_lib is False:
        return None
    from clearpages.tools.lowlevel import ffi, state

    loop = _loop_lib.page_at_a_time

    def run(method: str, addr: int, nbytes: int, page: int) -> None:
        loop(int(ffi.cast("uintptr_t", state().pointer[method])), addr, nbytes, page)

    return run


# ---- timing for the scripts ---------------------------------------------


def time_it(fn: Callable[[], Any], rounds: int, warmup: int = 1) -> list[float]:
    """Seconds per call of fn, one sample per round."""
    for _ in range(warmup):
        fn()
    out = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t0)
    return out


def gbps(nbytes: int, seconds: float) -> float:
    return nbytes / seconds / 1e9


def mean_sd(xs: list[float]) -> tuple[float, float]:
    return statistics.fmean(xs), (statistics.stdev(xs) if len(xs) > 1 else 0.0)


# ---- presentation -------------------------------------------------------


def machine_label() -> str:
    """CPU, kernel, date: printed above every table."""
    from clearpages.tools.lowlevel import memory_total

    c = cp.cpu()
    model = c.brand
    total = memory_total()
    mem = ", %d GiB RAM" % round(total / GiB) if total else ""
    caches = ", ".join("%s %s" % (k, fmt_size(v)) for k, v in
                       (("L1d", c.l1d), ("L2", c.l2), ("L3", c.l3)) if v)
    return ("machine: %s (%s family %d model %d), %d cores, %s%s\n"
            "kernel:  %s %s, Python %s\ndate:    %s" % (
                model, c.vendor, c.family, c.model, c.cores or os.cpu_count() or 0,
                caches, mem, platform.system(), platform.release(),
                platform.python_version(),
                datetime.datetime.now().astimezone().strftime("%Y-%m-%d %H:%M %Z")))


def table(header: list[str], rows: list[list[Any]]) -> str:
    """A plain-text table, right-aligned numbers, as Markdown so that
    docs/results.md can take it verbatim."""
    cells = [[str(c) for c in header]] + [[str(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]
    def line(r: list[str]) -> str:
        return "| " + " | ".join(c.rjust(w) if i else c.ljust(w)
                                 for i, (c, w) in enumerate(zip(r, widths))) + " |"
    sep = "|" + "|".join("-" * (w + 1) + ":" if i else "-" * (w + 2)
                         for i, w in enumerate(widths)) + "|"
    return "\n".join([line(cells[0]), sep] + [line(r) for r in cells[1:]])


# ---- pytest-benchmark results -------------------------------------------

#: RESULTS[suite][(label, variant)] = {"median": s, "stddev": s, "nbytes": n, "gbps": x}
RESULTS: dict[str, dict[tuple[str, str], dict[str, float]]] = {}

#: Summaries registered by the bench modules: callables returning
#: (title, text) or None when they have nothing to say.
SUMMARIES: list[Callable[[], tuple[str, str] | None]] = []

#: Tables printed by reproduction tests run under pytest.
TABLES: list[tuple[str, str]] = []


def summary(fn: Callable[[], tuple[str, str] | None]) -> Callable[[], tuple[str, str] | None]:
    SUMMARIES.append(fn)
    return fn


def summary_of(suite: str) -> Callable[[Callable[[dict], Any]], Callable[[dict], Any]]:
    """Register fn(results) as a summary of one suite; it runs only when the
    suite measured something."""
    def register(fn: Callable[[dict], Any]) -> Callable[[dict], Any]:
        def run() -> Any:
            res = RESULTS.get(suite)
            return fn(res) if res else None
        SUMMARIES.append(run)
        return fn
    return register


def plan_rounds(nbytes: int, total: int, round_bytes: int = 4 * MiB,
                min_rounds: int = 3, max_rounds: int = 200) -> tuple[int, int]:
    """(rounds, iterations): small sizes loop many calls per round so the
    timer's resolution does not matter; every case clears about `total`."""
    iterations = max(1, min(4096, round_bytes // max(1, nbytes)))
    rounds = max(min_rounds, min(max_rounds, total // (nbytes * iterations)))
    return rounds, iterations


def run_bench(benchmark: Any, fn: Callable[[], Any], *, suite: str, label: str,
              variant: str, nbytes: int, total: int, rounds: int | None = None,
              iterations: int | None = None, setup: Callable[[], Any] | None = None,
              ) -> dict[str, float] | None:
    """Time fn with pytest-benchmark's pedantic mode, store GB/s in
    extra_info and in RESULTS; returns the record (None when disabled)."""
    r, it = plan_rounds(nbytes, total)
    rounds = rounds or r
    iterations = iterations or it
    if setup is not None:
        iterations = 1
        benchmark.pedantic(fn, setup=setup, rounds=rounds, warmup_rounds=1)
    else:
        benchmark.pedantic(fn, rounds=rounds, iterations=iterations, warmup_rounds=1)
    st = getattr(benchmark, "stats", None)
    if not st:
        return None         # --benchmark-disable: ran once, nothing timed
    s = st.stats
    rec = {"median": s.median, "stddev": s.stddev, "min": s.min, "nbytes": nbytes,
           "gbps": gbps(nbytes, s.median) if nbytes else 0.0}
    benchmark.extra_info.update({"bytes": nbytes, "GB/s": round(rec["gbps"], 3),
                                 "GB/s best": round(gbps(nbytes, s.min), 3) if nbytes else 0,
                                 "variant": variant, "size": label})
    RESULTS.setdefault(suite, {})[(label, variant)] = rec
    return rec


def ratio(a: float | None, b: float | None) -> str:
    return "%.2f" % (a / b) if a and b else "-"
