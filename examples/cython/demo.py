"""Run the kernels of mshadow_kernels.pyx on mshadow tensors.

``python examples/cython/demo.py`` builds them first if they are not built yet (the same as
``python setup.py build_ext --inplace`` in this directory; that needs Cython and setuptools).
"""
import os
import subprocess
import sys

import numpy as np

import mshadow as ms

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
try:
    import mshadow_kernels as k
except ImportError:
    import importlib.util
    missing = [m for m in ("Cython", "setuptools") if importlib.util.find_spec(m) is None]
    if missing:
        sys.exit(f"building the example kernels needs {' and '.join(missing)}: "
                 f"python -m pip install Cython setuptools")
    print("building mshadow_kernels (python setup.py build_ext --inplace) ...", flush=True)
    subprocess.run([sys.executable, "setup.py", "build_ext", "--inplace", "-q"], cwd=HERE,
                   check=True)
    import mshadow_kernels as k

x = ms.new_tensor((3, 5), pad=True)       # padded rows: stride 16 elements
y = ms.new_tensor((3, 5), init=1.0, pad=True)
x.numpy()[...] = np.arange(15, dtype=np.float32).reshape(3, 5)
k.saxpy(2.0, x, y)                        # y = 2 * x + 1, through cimport mshadow
print(y.numpy())
print(k.row_sums(y))                      # a float[:, :] memoryview takes the padded tensor
try:
    k.scale_rows(y, 0.5)                  # float[:, ::1] refuses padded rows
except BufferError as e:
    print("BufferError:", e)
z = ms.new_tensor((3, 5), init=4.0)       # pad=False: contiguous
k.scale_rows(z, 0.5)
print(z.numpy()[0])
