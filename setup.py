"""Build glue: cffi compiles the native module; .S sources go through gcc.

distutils' Unix compiler only knows C-family suffixes, so the assembly
sources (preprocessed GNU as, ``.S``) are registered with it here: gcc
assembles them with the same flags as the C files.
"""

from setuptools import setup
from setuptools.command.build_ext import build_ext


class BuildExtWithAsm(build_ext):
    def build_extensions(self):
        if ".S" not in self.compiler.src_extensions:
            self.compiler.src_extensions.append(".S")
        super().build_extensions()


setup(
    cffi_modules=["clearpages/_ffi_build.py:ffi"],
    cmdclass={"build_ext": BuildExtWithAsm},
)
