"""Build the example kernels next to this file: ``python setup.py build_ext --inplace``.

mshadow must be importable (installed, or its checkout on PYTHONPATH): Cython finds
``mshadow/__init__.pxd`` on sys.path and the C headers at ``mshadow.get_include()``.
"""
import mshadow
from Cython.Build import cythonize
from setuptools import Extension, setup

setup(
    name="mshadow-cython-example",
    ext_modules=cythonize(
        [Extension("mshadow_kernels", ["mshadow_kernels.pyx"],
                   include_dirs=[mshadow.get_include()])],
        compiler_directives={"language_level": 3}),
)
