"""Lazy evaluation: step 1 of the expression-template tutorial, guide/exp-template/exp_lazy.cpp.

``B + C`` does not add anything: it returns a small object remembering its two operands, and the
assignment ``A[:] = ...`` runs the one loop that writes A. No temporary vector for B + C.
C++ overloads ``operator=``; Python cannot, so the assignment is ``__setitem__`` on ``A[:]``,
which is also how mshadow's Tensor spells it. ``--mshadow`` runs the same with mshadow tensors.
Run: python examples/guide/exp_lazy.py [--mshadow]
"""
import sys

import numpy as np


class BinaryAddExp:
    """The expression: it holds its operands and computes nothing."""

    def __init__(self, lhs, rhs):
        self.lhs, self.rhs = lhs, rhs


class Vec:
    """A handle over memory the caller owns (no allocation, no copy)."""

    def __init__(self, dptr, length):
        self.dptr, self.len = dptr, length

    def __add__(self, rhs):          # no evaluation happens here
        return BinaryAddExp(self, rhs)

    def __setitem__(self, key, src):  # here is where evaluation happens
        for i in range(self.len):
            self.dptr[i] = src.lhs.dptr[i] + src.rhs.dptr[i]


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
    # run expression
    A[:] = B + C
    for i in range(n):
        print("%d:%f==%f+%f" % (i, sa[i], sb[i], sc[i]))


if __name__ == "__main__":
    main(sys.argv[1:])
