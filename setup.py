"""Build glue: cffi compiles the native module; .S sources go through gcc.

distutils' Unix compiler only knows C-family suffixes, so the assembly
sources (preprocessed GNU as, ``.S``) are registered with it here: gcc
assembles them with the same flags as the C files.
"""

import runpy

from setuptools import setup
from setuptools.command.build_ext import build_ext


class BuildExtWithAsm(build_ext):
    def build_extensions(self):
        if ".S" not in self.compiler.src_extensions:
            self.compiler.src_extensions.append(".S")
        super().build_extensions()


# The cffi module holds the routines, jobs and region calls; _fast, a plain
# CPython extension, is the per-call entry and the Region buffer type.
_build = runpy.run_path("clearpages/_ffi_build.py")

setup(
    cffi_modules=["clearpages/_ffi_build.py:ffi"],
    ext_modules=[_build["fast_extension"]()],
    cmdclass={"build_ext": BuildExtWithAsm},
    # pip install -e: a link tree of the package (build/__editable__.*) on a
    # plain path entry, not setuptools' default import hook, which type
    # checkers cannot follow (mypy saw no clearpages at all, every type Any).
    # The link tree exposes clearpages alone, not the checkout's tests/ or
    # setup.py; a new module needs the install run again.
    # --config-settings editable_mode=compat overrides it.
    options={"editable_wheel": {"mode": "strict"}},
)
