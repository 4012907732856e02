"""The examples run and print what the C++ programs they port print.

The expected outputs of mshadow's guide programs are worked out from their C++ sources
(guide/basic.cpp, defop.cpp, basic_stream.cu, exp-template/*.cpp), printf("%.2f ") trailing
spaces included; the notes beside each say where the values come from.
"""
import os
import re
import runpy
import subprocess
import sys

import numpy as np
import pytest

from mshadow.testing import child_env

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
GUIDE = os.path.join(ROOT, "examples", "guide")


def run_example(monkeypatch, capsys, path, *args):
    """Run an example as ``python path args`` in this process; return what it printed."""
    monkeypatch.setattr(sys, "argv", [path, *args])
    runpy.run_path(path, run_name="__main__")
    return capsys.readouterr().out


def rows(*lines):
    return "".join(line + " \n" for line in lines)


def fill(value, n):
    return " ".join([f"{value:.2f}"] * n)


BASIC = (
    # mat = Tensor<cpu, 1>(data, Shape1(10)).FlatTo2D() is (1, 10); mat[0][1] = 1, then
    # mat += (mat + 10) / 10 + 2 makes every value 1.1 * v + 3
    "1 X 10 matrix\n" + rows("3.00 4.10 " + fill(3, 8))
    # lhs = rhs = 1 of shape (2, 3): every dot product is 3
    + "vdot=3.000000\n" + rows("3.00 3.00", "3.00 3.00") + "\n"
    + rows("0.00 1.00 2.00", "3.00 4.00 5.00") + "\n"
    # index = [1, 2]: lhs[0][1], lhs[1][2]
    + rows("1.00 5.00")
    # -100 everywhere but the chosen elements, minus lhs, printed on one line
    + rows("-100.00 0.00 -102.00 -103.00 -104.00 0.00")
    + rows("0.00 1.00 0.00", "0.00 0.00 1.00") + "\n"
    # take rows 8, 0, 1 of weight[i][j] = i
    + rows(fill(8, 5), fill(0, 5), fill(1, 5)) + "\n\n"
    # take_grad puts them back: rows 0, 1, 8 hold 0, 1, 8, the rest 0
    + rows(*[fill(i if i in (1, 8) else 0, 5) for i in range(10)])
    + "upsampling\n"
    + rows(*[fill(1, 3) + " " + fill(2, 3)] * 3, *[fill(3, 3) + " " + fill(4, 3)] * 3)
    # 3x3 sum pooling of the upsampled image: 9 * [1, 2, 3, 4]
    + rows("9.00 18.00", "27.00 36.00")
    # mask(src, ones): row i scaled by src[i] = i
    + "mask\n" + rows(*[fill(i, 8) for i in range(6)]))

GUIDE_OUTPUT = {
    "basic.py": BASIC,
    # max(mat + 1 + 0.5, 0) with mat[0][0] = -2 and zeros elsewhere
    "defop.py": rows("0.00 1.50 1.50", "1.50 1.50 1.50"),
    # dot of rows of ones with rows of twos, 5 long
    "basic_stream.py": rows("10.00 10.00", "10.00 10.00"),
    # A = B + C with B = [2, 3, 4], C = [3, 4, 5]
    "exp_lazy.py": "0:5.000000==2.000000+3.000000\n1:7.000000==3.000000+4.000000\n"
                   "2:9.000000==4.000000+5.000000\n",
    "exp_template.py": "0:8.000000==2.000000+3.000000+3.000000\n"
                       "1:11.000000==3.000000+4.000000+4.000000\n"
                       "2:14.000000==4.000000+5.000000+5.000000\n",
    # A = B * max(C, B) = B * C
    "exp_template_op.py": "0:6.000000 == 2.000000 * max(3.000000, 2.000000)\n"
                          "1:12.000000 == 3.000000 * max(4.000000, 3.000000)\n"
                          "2:20.000000 == 4.000000 * max(5.000000, 4.000000)\n",
}


@pytest.mark.parametrize("name", sorted(GUIDE_OUTPUT))
def test_guide_prints_what_cpp_prints(monkeypatch, capsys, name):
    assert run_example(monkeypatch, capsys, os.path.join(GUIDE, name)) == GUIDE_OUTPUT[name]


@pytest.mark.parametrize("name", ["exp_lazy.py", "exp_template.py", "exp_template_op.py"])
def test_exp_template_tutorial_with_mshadow(monkeypatch, capsys, name):
    # the toy classes and mshadow's own expressions compute the same values
    out = run_example(monkeypatch, capsys, os.path.join(GUIDE, name), "--mshadow")
    assert out == GUIDE_OUTPUT[name]


def test_defop_plan_listing(monkeypatch, capsys):
    out = run_example(monkeypatch, capsys, os.path.join(GUIDE, "defop.py"), "--plan")
    assert out.startswith(GUIDE_OUTPUT["defop.py"])
    assert "where_f32" in out          # the user's maxoftwo compiled into the plan


def test_basic_demo_command():
    # the README's demo command, run as a user would
    env = child_env()
    out = subprocess.run([sys.executable, os.path.join(ROOT, "examples", "basic.py")],
                         capture_output=True, text=True, check=True, cwd=ROOT, env=env).stdout
    # mat[i][j] = i*2 + j, then mat += (mat + 10) / 10 + 2, i.e. 1.1 * v + 3
    want = "\n".join(" ".join(f"{1.1 * (2 * i + j) + 3:.2f}" for j in range(2)) for i in range(5))
    assert want in out
    assert "stride 16 elements" in out                   # 64-byte aligned rows
    assert "0.95 0.95 0.95" in out                        # one SGD step: 1 - 0.1*(0.5 + 0.01)
    assert "dst = chain_f32[" in out                      # the fused plan listing
    assert "after free_space: tensor memory was released" in out


def test_readme_taste_runs():
    text = open(os.path.join(ROOT, "README.md")).read()
    code = re.findall(r"```python\n(.*?)```", text, re.S)[0]
    env = {}
    exec(compile(code, "README.md", "exec"), env)
    y, x = env["y"], env["x"]
    want = np.maximum(x.numpy() + np.arange(8, dtype=np.float32)[None, :, None, None], 0)
    np.testing.assert_array_equal(y.numpy(), want)
