"""The library's inner handles that benchmarks time directly, under public
names: the native module (``ffi``, ``lib``), the per-call extension
(``fast``), the dispatch state, the learner's view (``adapt``: what it
learned, its streaming reference, forgetting), the routine table, the unit
helpers.

bench/ and the repro scripts time the routines themselves and the job
machinery beside the public calls; they take those handles from here, so
that the library's private modules can change shape with only this file
following them.
"""

from __future__ import annotations

from .. import _adapt as adapt, _fast as fast
from .._dispatch import SLICE_NS, state
from .._native import ffi, lib
from .._policy import UNTOUCHED_MIN
from .._routines import BY_NAME
from .._system import hugetlb_pages, memory_total, thp_mode
from .._units import format_size, parse_size

__all__ = [
    "BY_NAME",
    "SLICE_NS",
    "UNTOUCHED_MIN",
    "adapt",
    "fast",
    "ffi",
    "format_size",
    "hugetlb_pages",
    "lib",
    "memory_total",
    "parse_size",
    "run_job",
    "state",
    "thp_mode",
]


def run_job(address: int, nbytes: int, method: str, unit: int, threads: int = 1) -> None:
    """Clear nbytes at address with one native job of routine method: its
    first unit of work is unit bytes, later ones are sized by time, run in
    the library's time slices until done (the job machinery alone, with a
    unit no public call takes)."""
    job = lib.cp_job_new(ffi.new("char *[]", [ffi.cast("char *", address)]),
                         ffi.new("size_t[]", [nbytes]), 1)
    if job == ffi.NULL:
        raise MemoryError("cp_job_new")
    try:
        if lib.cp_job_configure(job, state().pointer[method], unit, threads, 0) != 0:
            raise ValueError("cp_job_configure refused %s, unit %d, %d thread(s)"
                             % (method, unit, threads))
        while (done := lib.cp_job_run(job, SLICE_NS)) == 0:
            pass
        if done < 0:
            raise OSError(lib.cp_job_error(job), "cp_job_run")
    finally:
        lib.cp_job_free(job)
