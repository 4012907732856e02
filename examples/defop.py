"""User-defined operators: mshadow's guide/defop.cpp in Python.

In C++ an operator is a struct with a static Map; here it is a Python function decorated
with @ms.op.define, traced once and compiled into the plan like a built-in.
Run: python examples/defop.py
"""
import numpy as np

import mshadow as ms


@ms.op.define
def addone(a):
    return a + 1


@ms.op.define
def maxoftwo(a, b):
    return ms.op.where(a > b, a, b)


def main():
    mat = ms.new_tensor((2, 3), init=0.0)
    mat2 = ms.new_tensor((2, 3), init=0.0)
    mat.numpy()[...] = np.arange(6).reshape(2, 3)
    mat2.numpy()[...] = [[3, 3, 3], [1, 10, 1]]
    mat[:] = ms.F(maxoftwo, ms.F(addone, mat) + 0.5, mat2)
    for row in mat.numpy():
        print(" ".join(f"{v:.1f}" for v in row))
    print(ms.plan_for(mat, ms.F(maxoftwo, ms.F(addone, mat) + 0.5, mat2)).disassemble())


if __name__ == "__main__":
    main()
