"""User-defined operators: mshadow's guide/defop.cpp in Python.

In C++ an operator is a struct with a static Map; here it is a Python function decorated
with @ms.op.define, traced once and compiled into the plan like a built-in. Prints what the
C++ prints; ``--plan`` also prints the compiled program of the assignment.
Run: python examples/guide/defop.py [--plan]
"""
import sys

import mshadow as ms


@ms.op.define
def addone(a):
    return a + 1


@ms.op.define
def maxoftwo(a, b):
    # Python's `if a > b` cannot be traced; where() is the branch-free form of the C++ Map.
    return ms.op.where(a > b, a, b)


def main(argv=()):
    stream = ms.new_stream(ms.cpu)
    # NewTensor<cpu>(shape, 0.0f, stream_) in the C++ turns the stream pointer into pad=true
    mat = ms.new_tensor((2, 3), 0.0, pad=True, stream=stream)
    mat2 = ms.new_tensor((2, 3), 0.0, pad=True, stream=stream)

    mat[0][0] = -2.0
    mat[:] = ms.F(maxoftwo, ms.F(addone, mat) + 0.5, mat2)

    for i in range(mat.size(0)):
        for j in range(mat.size(1)):
            print("%.2f " % mat[i][j], end="")
        print()
    if "--plan" in argv:
        print(ms.plan_for(mat, ms.F(maxoftwo, ms.F(addone, mat) + 0.5, mat2)).disassemble())
    ms.free_space(mat)
    ms.free_space(mat2)
    ms.delete_stream(stream)


if __name__ == "__main__":
    main(sys.argv[1:])
