"""Zero detection: is_zero and nonzero_pages, and the scan they use.

The scanners live in ``csrc/core/scan.c``, one per instruction-set variant; the
native side says which CPU features each one needs (``cp_scan_requires``),
and :func:`choose` takes the best one the CPU has after ``CLEARPAGES_DISABLE``,
so every variant can be run on one machine by masking the others.  The
public calls are native entries of ``clearpages._fast``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ._cpu import CPU, FEATURE_NAMES
from ._native import ffi, lib

#: Every scan variant of the native module, in its order of preference
#: (worst first).
VARIANTS: tuple[str, ...] = tuple(ffi.string(lib.cp_scan_name(i)).decode()
                                  for i in range(lib.CP_SCAN_COUNT))


def requires(variant: str) -> frozenset[str]:
    """The CPU features the variant needs."""
    bits = lib.cp_scan_requires(VARIANTS.index(variant))
    return frozenset(n for i, n in enumerate(FEATURE_NAMES) if bits >> i & 1)


def usable(cpu: CPU) -> tuple[str, ...]:
    """The variants this build has and this CPU (as masked) can run."""
    return tuple(v for i, v in enumerate(VARIANTS)
                 if lib.cp_scan_built(i) and requires(v) <= cpu.features)


def choose(cpu: CPU) -> str:
    """The variant is_zero and nonzero_pages use on this CPU: the best usable."""
    return usable(cpu)[-1]


def variant_index(variant: str) -> int:
    return VARIANTS.index(variant)


def scan_with(variant: str, buf: Any, threads: int = 1) -> bool:
    """is_zero of a contiguous buffer with the named variant (tests and
    benchmarks compare the variants with it); the caller checks the CPU."""
    c = ffi.from_buffer("char[]", buf)
    return bool(lib.cp_scan_is_zero(VARIANTS.index(variant), c, len(c), threads))


if TYPE_CHECKING:
    import array

    def is_zero(buf: Any, *, threads: int | str = 1) -> bool:
        """True when every byte of a readable buffer (or a tensor in CPU memory) is
        zero (a bool).  Reads nothing more than it must: the first, last and
        middle bytes first, then the rest until a nonzero byte is seen; writes
        nothing.  Read-only and strided buffers are fine.

        threads: an int from 1 to 256, or "auto" (the threads a clear of that
        size gets); 1 by default.  Spreading a scan helps only where a core is
        idle."""

    def nonzero_pages(buf: Any, page_size: int | str | None = None, *,
                      threads: int | str = 1) -> array.array[int]:
        """Indices of the pages of buf that hold a nonzero byte (page_size:
        4096, or a Region's own page size, as clear_pages counts pages).
        threads=1 by default, as is_zero and clear; "auto" takes the threads
        a clear of that size gets."""
else:
    from . import _fast

    is_zero = _fast.is_zero
    nonzero_pages = _fast.nonzero_pages
