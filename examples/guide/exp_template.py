"""Expression templates, step 2 of mshadow's tutorial (guide/exp-template/exp_template.cpp).

Every expression can ``eval(i)`` its i-th element, so ``B + C + C`` nests: the outer add asks the
inner add, which asks the vectors. The assignment is one loop over ``src.eval(i)``. In C++ the
nesting lives in the type (``BinaryAddExp<BinaryAddExp<Vec, Vec>, Vec>``) and the compiler
inlines it into one loop; in mshadow for Python the tree is compiled once per structure into a
fused SIMD pass. ``--mshadow`` runs the same with mshadow tensors.
Run: python examples/guide/exp_template.py [--mshadow]
"""
import sys

import numpy as np


class Exp:
    """Every expression derives from Exp, so ``+`` works for any two of them."""

    def __add__(self, rhs):
        return BinaryAddExp(self, rhs)


class BinaryAddExp(Exp):
    def __init__(self, lhs, rhs):
        self.lhs, self.rhs = lhs, rhs

    def eval(self, i):           # evaluate this expression at position i
        return self.lhs.eval(i) + self.rhs.eval(i)


class Vec(Exp):
    def __init__(self, dptr, length):
        self.dptr, self.len = dptr, length

    def __setitem__(self, key, src):   # here is where evaluation happens
        for i in range(self.len):
            self.dptr[i] = src.eval(i)

    def eval(self, i):
        return self.dptr[i]


def main(argv=()):
    n = 3
    sa = np.array([1, 2, 3], dtype=np.float32)
    sb = np.array([2, 3, 4], dtype=np.float32)
    sc = np.array([3, 4, 5], dtype=np.float32)
    if "--mshadow" in argv:
        import mshadow as ms
        A, B, C = ms.from_numpy(sa), ms.from_numpy(sb), ms.from_numpy(sc)
    else:
        A, B, C = Vec(sa, n), Vec(sb, n), Vec(sc, n)
    # run expression, this expression is longer :)
    A[:] = B + C + C
    for i in range(n):
        print("%d:%f==%f+%f+%f" % (i, sa[i], sb[i], sc[i], sc[i]))


if __name__ == "__main__":
    main(sys.argv[1:])
