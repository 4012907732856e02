"""What a Cython kernel pays per call before any work: typed memoryview vs raw pointer.

Builds benchmarks/_call_overhead.pyx into a temporary directory (needs Cython and a C
compiler) and times each entry from Python with timeit, best of --repeat runs of --number
calls. The figure quoted in docs/architecture.md comes from here.

    python benchmarks/bench_cython_call.py [--number 200000] [--repeat 7] [--runs 1]
"""
import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import timeit

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

try:
    import mshadow as ms
except ImportError:   # from a checkout, not installed
    sys.path.insert(0, ROOT)
    import mshadow as ms
import numpy as np

SETUP = """
import mshadow
from Cython.Build import cythonize
from setuptools import Extension, setup
setup(ext_modules=cythonize([Extension("_call_overhead", ["_call_overhead.pyx"],
                                       include_dirs=[mshadow.get_include()])],
                            compiler_directives={"language_level": 3}))
"""


def build(d):
    shutil.copy(os.path.join(HERE, "_call_overhead.pyx"), d)
    with open(os.path.join(d, "setup.py"), "w") as f:
        f.write(SETUP)
    pkg_root = os.path.dirname(os.path.dirname(os.path.abspath(ms.__file__)))
    env = dict(os.environ, PYTHONPATH=pkg_root + os.pathsep + os.environ.get("PYTHONPATH", ""))
    subprocess.run([sys.executable, "setup.py", "build_ext", "--inplace"], cwd=d, env=env,
                   check=True, stdout=subprocess.DEVNULL)
    sys.path.insert(0, d)
    import _call_overhead
    return _call_overhead


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--number", type=int, default=200000)
    ap.add_argument("--repeat", type=int, default=7)
    ap.add_argument("--runs", type=int, default=1, help="passes; each figure keeps its best")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        k = build(d)
        padded = ms.new_tensor((64, 60), pad=True)
        compact = ms.new_tensor((64, 60))
        arr = np.zeros((64, 60), np.float32)
        cases = [
            ("def f(object x), no work (baseline)", k.f_object, compact),
            ("def f(Tensor x): cimport mshadow pointer", k.f_pointer, padded),
            ("def f(float[:, :] x) <- padded Tensor", k.f_memoryview, padded),
            ("def f(float[:, :] x) <- numpy array", k.f_memoryview, arr),
            ("def f(float[:, ::1] x) <- Tensor pad=False", k.f_memoryview_c, compact),
            ("def f(float[:, ::1] x) <- numpy array", k.f_memoryview_c, arr),
        ]
        print(f"# {args.runs} passes of {args.repeat} x {args.number} calls, best run; ns per "
              f"call (and above the baseline)")
        best = [float("inf")] * len(cases)
        for _ in range(args.runs):   # passes, so a burst of other load spoils one, not all
            for i, (name, fn, x) in enumerate(cases):
                fn(x)
                ns = min(timeit.Timer("fn(x)", globals={"fn": fn, "x": x})
                         .repeat(repeat=args.repeat, number=args.number)) / args.number * 1e9
                best[i] = min(best[i], ns)
        for (name, _, _), ns in zip(cases, best):
            print(f"{name:45s} {ns:7.1f} ns  (+{ns - best[0]:6.1f})")


if __name__ == "__main__":
    main()
