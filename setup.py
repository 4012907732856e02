"""Build of the compiled core: one Cython extension with OpenMP where the compiler has it.

MSHADOW_NO_OPENMP=1 forces a single-threaded build; MSHADOW_DEBUG=1 builds without -O3.
Per-ISA kernels (SSE2 baseline, AVX2, AVX-512) are compiled inside the extension with
target pragmas and chosen at import, so no -march flag is needed here.
"""
import os
import platform
import shutil
import subprocess
import sys
import tempfile

import numpy as np
from Cython.Build import cythonize
from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext


def _compiler_accepts(cc, flags):
    """True if ``cc`` compiles and links a tiny OpenMP program with ``flags``."""
    src = "#include <omp.h>\nint main(void){return omp_get_max_threads() > 0 ? 0 : 1;}\n"
    with tempfile.TemporaryDirectory() as d:
        c = os.path.join(d, "t.c")
        with open(c, "w") as f:
            f.write(src)
        try:
            r = subprocess.run(cc + [c, "-o", os.path.join(d, "t")] + flags,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        except OSError:
            return False
        return r.returncode == 0


class BuildExt(build_ext):
    def build_extensions(self):
        cc = self.compiler.compiler_so[:1] if hasattr(self.compiler, "compiler_so") else None
        msvc = self.compiler.compiler_type == "msvc"
        for ext in self.extensions:
            if msvc:
                ext.extra_compile_args += ["/O2"]
                omp = ["/openmp"]
                use_omp = os.environ.get("MSHADOW_NO_OPENMP") != "1"
                if use_omp:
                    ext.extra_compile_args += omp
                continue
            if os.environ.get("MSHADOW_DEBUG") != "1":
                ext.extra_compile_args += ["-O3"]
            # -fwrapv: integer overflow wraps as in mshadow's C++ on every compiler we use;
            # -ffp-contract=off: no FMA contraction, so packet and plain paths agree bit for bit.
            ext.extra_compile_args += ["-fno-strict-aliasing", "-fwrapv", "-ffp-contract=off",
                                       "-Wno-unused-function", "-Wno-unused-variable"]
            if platform.machine().lower() in ("x86_64", "amd64", "i686", "i386"):
                ext.extra_compile_args += ["-msse2"]
            if os.environ.get("MSHADOW_NO_OPENMP") != "1" and cc and _compiler_accepts(cc, ["-fopenmp"]):
                ext.extra_compile_args += ["-fopenmp"]
                ext.extra_link_args += ["-fopenmp"]
            else:
                print("mshadow: building without OpenMP (single-threaded)", file=sys.stderr)
        super().build_extensions()


def _generate_kernels():
    """Write mshadow/include/mshadow/kernels_gen.h from the operator table."""
    import importlib.util
    here = os.path.dirname(os.path.abspath(__file__))
    pkg = os.path.join(here, "mshadow")
    sys.path.insert(0, pkg)
    try:
        spec = importlib.util.spec_from_file_location("codegen_cpu", os.path.join(pkg, "codegen_cpu.py"))
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        mod.write(os.path.join(pkg, "include", "mshadow", "kernels_gen.h"))
    finally:
        sys.path.remove(pkg)


_generate_kernels()

extensions = [
    Extension(
        "mshadow._core",
        sources=["mshadow/_core.pyx"],
        include_dirs=[np.get_include(), "mshadow/include"],
        define_macros=[("NPY_NO_DEPRECATED_API", "NPY_1_7_API_VERSION")],
    ),
    Extension(
        "mshadow._blas",
        sources=["mshadow/_blas.pyx"],
        include_dirs=[np.get_include(), "mshadow/include"],
        define_macros=[("NPY_NO_DEPRECATED_API", "NPY_1_7_API_VERSION")],
    ),
]

setup(
    ext_modules=cythonize(extensions, compiler_directives={"language_level": 3},
                          include_path=["mshadow"]),
    cmdclass={"build_ext": BuildExt},
)
