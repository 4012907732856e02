"""Operators in expression templates: step 3 of the tutorial, exp-template/exp_template_op.cpp.

A binary expression carries its operator, an object with a static ``map(a, b)``; ``F(op, a, b)``
builds one for any operator, ``*`` is ``F(mul, ...)``, and a user adds an operator by writing
another ``map``. mshadow for Python spells it ``ms.F(op, a, b)`` with ``@ms.op.define`` for the
user's operator, traced and compiled like the built-ins. ``--mshadow`` runs that version.
Run: python examples/guide/exp_template_op.py [--mshadow]
"""
import sys

import numpy as np


class Exp:
    def __mul__(self, rhs):
        return F(mul, self, rhs)


class mul:                       # noqa: N801  the C++ operator struct's name
    @staticmethod
    def map(a, b):
        return a * b


class BinaryMapExp(Exp):
    def __init__(self, op, lhs, rhs):
        self.op, self.lhs, self.rhs = op, lhs, rhs

    def eval(self, i):
        return self.op.map(self.lhs.eval(i), self.rhs.eval(i))


class Vec(Exp):
    def __init__(self, dptr, length):
        self.dptr, self.len = dptr, length

    def __setitem__(self, key, src):   # here is where evaluation happens
        for i in range(self.len):
            self.dptr[i] = src.eval(i)

    def eval(self, i):
        return self.dptr[i]


def F(op, lhs, rhs):             # noqa: N802  mshadow's name
    """The binary expression of any operator: works for any two expressions."""
    return BinaryMapExp(op, lhs, rhs)


class maximum:                   # noqa: N801  user defined operation
    @staticmethod
    def map(a, b):
        return a if a > b else b


def main(argv=()):
    n = 3
    sa = np.array([1, 2, 3], dtype=np.float32)
    sb = np.array([2, 3, 4], dtype=np.float32)
    sc = np.array([3, 4, 5], dtype=np.float32)
    if "--mshadow" in argv:
        import mshadow as ms

        @ms.op.define
        def ms_maximum(a, b):
            return ms.op.where(a > b, a, b)

        A, B, C = ms.from_numpy(sa), ms.from_numpy(sb), ms.from_numpy(sc)
        A[:] = B * ms.F(ms_maximum, C, B)
    else:
        A, B, C = Vec(sa, n), Vec(sb, n), Vec(sc, n)
        A[:] = B * F(maximum, C, B)
    for i in range(n):
        print("%d:%f == %f * max(%f, %f)" % (i, sa[i], sb[i], sc[i], sb[i]))


if __name__ == "__main__":
    main(sys.argv[1:])
