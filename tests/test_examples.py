"""The main demo runs and prints what mshadow's guide/basic.cpp prints for its part."""
import os
import subprocess
import sys

import mshadow

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# The examples import the mshadow these tests imported: an install, or an in-place build that
# is not on the child's sys.path (which starts with examples/) otherwise.
ENV = dict(os.environ, PYTHONPATH=os.pathsep.join(
    p for p in (os.path.dirname(os.path.dirname(mshadow.__file__)), os.environ.get("PYTHONPATH"))
    if p))


def test_basic_demo():
    out = subprocess.run([sys.executable, os.path.join(ROOT, "examples", "basic.py")],
                         capture_output=True, text=True, check=True, cwd=ROOT, env=ENV).stdout
    # guide/basic.cpp: mat[i][j] = i*2 + j, then mat += (mat + 10) / 10 + 2
    assert "3.00 4.10\n5.20 6.30\n7.40 8.50\n9.60 10.70\n11.80 12.90" in out
    assert "stride 16 elements" in out                   # 64-byte aligned rows
    assert "0.95 0.95 0.95" in out                        # one SGD step: 1 - 0.1*(0.5 + 0.01)
    assert "dst = chain_f32[" in out                      # the fused plan listing
    assert "after free_space: tensor memory was released" in out


def test_readme_taste_runs():
    import re
    text = open(os.path.join(ROOT, "README.md")).read()
    code = re.findall(r"```python\n(.*?)```", text, re.S)[0]
    env = {}
    exec(compile(code, "README.md", "exec"), env)
    import numpy as np
    y, x = env["y"], env["x"]
    want = np.maximum(x.numpy() + np.arange(8, dtype=np.float32)[None, :, None, None], 0)
    np.testing.assert_array_equal(y.numpy(), want)


def test_defop_demo():
    out = subprocess.run([sys.executable, os.path.join(ROOT, "examples", "defop.py")],
                         capture_output=True, text=True, check=True, cwd=ROOT, env=ENV).stdout
    # max(mat + 1 + 0.5, mat2) with mat = 0..5, mat2 = [[3,3,3],[1,10,1]]
    assert out.startswith("3.0 3.0 3.5\n4.5 10.0 6.5\n")


def test_neuralnet_demo_learns():
    sys.path.insert(0, os.path.join(ROOT, "examples"))
    try:
        import neuralnet
    finally:
        sys.path.pop(0)
    errs = neuralnet.train(epochs=2, verbose=False)
    assert errs[-1] < 0.15          # four separable clusters: chance would be 0.75
