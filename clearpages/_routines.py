"""The routine table: the single source of truth for every clearing routine.

The build (``_ffi_build.py``) reads this file to know which assembly sources to
assemble and which symbols to declare; the Python layer derives
``ALL_METHODS``, the availability checks and the policy's candidates from it;
the tests parametrize over it and the README's method table is checked
against it.  Keep this module free of imports from the package: the build
loads it by path before the package exists.
"""

from __future__ import annotations

from typing import NamedTuple


class Routine(NamedTuple):
    name: str
    """The method name users pass as ``method=``."""
    symbol: str
    """The C symbol, ``void symbol(void *dst, size_t len)``."""
    requires: frozenset[str]
    """CPU features without which the routine would fault (SIGILL)."""
    temporal: bool
    """True: ordinary stores that leave the lines in cache.  False: streaming
    (non-temporal) stores that bypass the cache and skip the read-for-ownership."""
    source: str
    """``asm/<name>.S`` for hand-written routines, ``csrc`` for C ones."""
    summary: str
    unfenced: str = ""
    """Streaming routines: the entry without the closing sfence, which jobs
    call for each extent and fence once per thread at the end."""

    @property
    def role(self) -> str:
        """What the routine is for in the policy: "temporal" or "streaming"."""
        return "temporal" if self.temporal else "streaming"


def _asm(name: str, requires: tuple[str, ...], temporal: bool, summary: str) -> Routine:
    symbol = "cp_clear_" + name
    return Routine(name, symbol, frozenset(requires), temporal, "asm/%s.S" % name,
                   summary, "" if temporal else symbol + "_unfenced")


ROUTINES: tuple[Routine, ...] = (
    _asm("rep_stosb", (), True,
         "rep stosb: microcoded fast-string store; fastest temporal clear with ERMS/FSRM"),
    _asm("rep_stosq", (), True,
         "rep stosq: 8-byte string store, the pre-ERMS kernel clear_page_rep"),
    _asm("mov_loop", (), True,
         "unrolled 8-byte mov stores, the kernel's clear_page_orig shape"),
    _asm("movnti", ("sse2",), False,
         "movnti: 8-byte streaming stores (SSE2, every x86-64)"),
    _asm("avx2_nt", ("avx2",), False,
         "vmovntdq ymm: 32-byte streaming stores"),
    _asm("avx512_nt", ("avx512f",), False,
         "vmovntdq zmm: 64-byte streaming stores"),
    _asm("clzero", ("clzero",), False,
         "AMD clzero: zero a whole cache line without reading it"),
    Routine("libc", "cp_clear_libc", frozenset(), True, "csrc",
            "the C library's memset"),
)

BY_NAME: dict[str, Routine] = {r.name: r for r in ROUTINES}
ALL_METHODS: tuple[str, ...] = tuple(r.name for r in ROUTINES)
