"""Build the native module ``clearpages._native`` (cffi, API mode, out of line).

setup.py names ``clearpages/_ffi_build.py:ffi`` in ``cffi_modules``.  The
routine table (``_routines.py``) says which ``asm/<name>.S`` files to assemble
and which ``cp_clear_<name>`` symbols to declare; every ``csrc/core/*.h`` gives
its declarations between ``BEGIN CDEF`` and ``END CDEF``.

The C sources are two layers: ``csrc/core/`` (the routines' callers, jobs,
the learner, regions, CPU identification; no Python API), built into this
cffi module, and ``csrc/pyext/`` (the CPython binding: argument forms,
routing, running, configuration, the Region type), built into
``clearpages._fast`` by :func:`fast_extension`.

A portable build (only the C library's memset) is made when the target is not
x86-64 or when ``CLEARPAGES_PORTABLE=1`` is set at build time.
"""

from __future__ import annotations

import os
import platform
import runpy
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from cffi import FFI

ROOT = Path(__file__).resolve().parent.parent
CSRC = ROOT / "csrc" / "core"
PYEXT = ROOT / "csrc" / "pyext"
ASM = ROOT / "asm"

_X86_64_MACHINES = frozenset({"x86_64", "amd64", "x64"})

# -fcf-protection marks the objects IBT/SHSTK compatible (the .S files get the
# same note from <cet.h>); --noexecstack keeps the extension's stack
# non-executable even if a source forgets its .note.GNU-stack.
COMPILE_ARGS = ["-O2", "-Wall", "-Wextra", "-fcf-protection=full",
                "-Wa,--noexecstack", "-pthread"]
PORTABLE_COMPILE_ARGS = ["-O2", "-Wall", "-Wextra", "-pthread"]
LINK_ARGS = ["-pthread", "-Wl,-z,noexecstack"]
# The linker marks the module IBT/SHSTK compatible only if every input is;
# Debian's crti.o/crtn.o (the _init/_fini fragments, whose _init has no
# endbr64) are not.  An extension module needs neither: ld.so runs its
# init_array, not DT_INIT, and nothing here registers C++ destructors.
NATIVE_LINK_ARGS = LINK_ARGS + ["-nostartfiles"]


def routines() -> Any:
    """The routine table, loaded by path: the package is not importable yet."""
    return runpy.run_path(str(Path(__file__).with_name("_routines.py")))["ROUTINES"]


def is_portable(machine: str | None = None, env: Mapping[str, str] | None = None) -> bool:
    """True when only the portable (memset) build can or should be made."""
    machine = (machine if machine is not None else platform.machine()).lower()
    env = os.environ if env is None else env
    flag = env.get("CLEARPAGES_PORTABLE", "").strip().lower()
    if flag not in ("", "0", "1", "true", "false", "yes", "no"):
        raise ValueError("CLEARPAGES_PORTABLE must be 0 or 1, not %r" % flag)
    return flag in ("1", "true", "yes") or machine not in _X86_64_MACHINES


def asm_routines(portable: bool) -> list[Any]:
    """The table entries assembled from asm/ (none in a portable build)."""
    return [] if portable else [r for r in routines() if r.source.startswith("asm/")]


def sources(portable: bool) -> list[str]:
    """Every C and assembly source of the module, relative to the root."""
    c_files = sorted(p.relative_to(ROOT).as_posix() for p in CSRC.glob("*.c"))
    return c_files + [r.source for r in asm_routines(portable)]


def cdef_text(portable: bool) -> str:
    """The declarations handed to ffi.cdef()."""
    parts = []
    for header in sorted(CSRC.glob("*.h")):
        text = header.read_text()
        if "BEGIN CDEF" not in text:
            continue
        body = text.split("/* BEGIN CDEF */", 1)[1].split("/* END CDEF */", 1)[0]
        parts.append(body)
    parts.append(_routine_declarations(portable))
    return "\n".join(parts)


def _routine_declarations(portable: bool) -> str:
    return "".join("void %s(void *dst, size_t len);\n" % sym
                   for r in asm_routines(portable)
                   for sym in (r.symbol, r.unfenced) if sym)


def routine_rows(portable: bool) -> str:
    """C source of ``CP_API_ROUTINE_ROWS``: one ``{fn, job_fn}`` per row of the
    routine table, in its order (``{0, 0}`` for a routine this build lacks),
    for the table of entry points clearpages._fast imports
    (csrc/core/api.h); the routines themselves stay hidden symbols."""
    built = {r.name for r in asm_routines(portable)} | {
        r.name for r in routines() if r.source == "csrc"}
    rows = ", ".join("{%s, %s}" % (r.symbol, r.unfenced or r.symbol) if r.name in built
                     else "{0, 0}" for r in routines())
    return "\n#define CP_API_ROUTINE_ROWS %s\n" % rows


def make_ffi(portable: bool | None = None, module: str = "clearpages._native") -> FFI:
    if portable is None:
        portable = is_portable()
    ffi = FFI()
    ffi.cdef(cdef_text(portable))
    includes = "".join('#include "%s"\n' % h.name for h in sorted(CSRC.glob("*.h")))
    defines = [("CP_PORTABLE", "1")] if portable else []
    # Sources are given relative to the root: setup.py runs from there, and
    # absolute paths would put the objects' full paths into the build tree.
    ffi.set_source(
        module,
        includes + _routine_declarations(portable) + routine_rows(portable)
        + '#include "native_export.h"\n',
        sources=[str(ROOT / s) if os.getcwd() != str(ROOT) else s
                 for s in sources(portable)],
        include_dirs=[str(CSRC), str(PYEXT), str(ASM)],
        define_macros=defines,
        extra_compile_args=PORTABLE_COMPILE_ARGS if portable else COMPILE_ARGS,
        extra_link_args=LINK_ARGS if portable else NATIVE_LINK_ARGS,
        # The CPython API is used here only to export the table of entry
        # points (csrc/pyext/native_export.h); the module keeps the
        # interpreter-specific name all the same.
        py_limited_api=False,
    )
    return ffi


def fast_sources() -> list[str]:
    """The sources of the CPython extension (argument forms, buffers, the
    Region type): csrc/pyext/*.c, relative to the root."""
    return sorted(p.relative_to(ROOT).as_posix() for p in PYEXT.glob("*.c"))


def fast_extension(portable: bool | None = None) -> Any:
    """The setuptools Extension ``clearpages._fast``.  It holds no routine:
    it imports the table of entry points that ``_native`` exports in a
    capsule (csrc/core/api.h), so the assembly is linked once, into
    ``_native``."""
    from setuptools import Extension

    if portable is None:
        portable = is_portable()
    return Extension(
        "clearpages._fast",
        sources=fast_sources(),
        include_dirs=["csrc/core", "csrc/pyext"],
        define_macros=[("CP_PORTABLE", "1")] if portable else [],
        extra_compile_args=PORTABLE_COMPILE_ARGS if portable else COMPILE_ARGS,
        extra_link_args=LINK_ARGS if portable else NATIVE_LINK_ARGS,
    )


ffi = make_ffi()

if __name__ == "__main__":
    ffi.compile(verbose=True)
