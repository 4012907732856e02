"""``ms.op``: the operator library, user-defined operators, and the sv / red / type names.

Every built-in operator comes from ops_table.OPS. ``@ms.op.define`` traces a Python
function once with symbolic scalars into a composite the plan inlines like a built-in;
a body that cannot be traced (Python control flow on its inputs) runs on numpy views of
each block instead (mshadow/fallback.py), with a one-time warning.

A defined operator is a UserOp, and the IR's Map nodes hold it (not a name): an expression,
and a cached plan, keep the operator they use alive, and nothing else does. There is no
registry to grow: a deleted operator, and its closure, go when the last expression or
plan using it does (mshadow/engine.py's plan cache is bounded).
"""
import inspect
import itertools
import operator
import warnings

import numpy as np

from . import expr as _expr
from .ir import SAVER_TABLE, SAVERS
from .readers import REDUCER_TABLE
from .ops_table import OPS

__all__ = ["Op", "define", "TraceError"]


class TraceError(TypeError):
    """The body of a defined operator used its inputs in a way a trace cannot follow."""


class Sym:
    """A symbolic scalar: records the operations an operator body applies to its inputs."""

    __slots__ = ("tree",)

    def __init__(self, tree):
        self.tree = tree

    def _bin(self, name, other, swap=False):
        o = _sym_tree(other)
        return Sym((name, o, self.tree) if swap else (name, self.tree, o))

    def __add__(self, o): return self._bin("plus", o)
    def __radd__(self, o): return self._bin("plus", o, True)
    def __sub__(self, o): return self._bin("minus", o)
    def __rsub__(self, o): return self._bin("minus", o, True)
    def __mul__(self, o): return self._bin("mul", o)
    def __rmul__(self, o): return self._bin("mul", o, True)
    def __truediv__(self, o): return self._bin("div", o)
    def __rtruediv__(self, o): return self._bin("div", o, True)
    def __pow__(self, o): return self._bin("power", o)
    def __rpow__(self, o): return self._bin("power", o, True)
    def __gt__(self, o): return self._bin("gt", o)
    def __lt__(self, o): return self._bin("lt", o)
    def __ge__(self, o): return self._bin("ge", o)
    def __le__(self, o): return self._bin("le", o)
    def __eq__(self, o): return self._bin("eq", o)
    def __ne__(self, o): return self._bin("ne", o)
    def __neg__(self): return Sym(("neg", self.tree))
    def __pos__(self): return self
    def __abs__(self): return Sym(("abs", self.tree))
    __hash__ = None

    def __array_ufunc__(self, ufunc, method, *args, **kwargs):
        # numpy's arithmetic on a symbol (np.float32(2) * a) is Python's operator, as
        # numpy's object loop made it; any other ufunc (np.sin(a)) cannot be traced, so
        # the operator runs on numpy per block (fallback.py)
        fn = _UFUNC_OPERATORS.get(ufunc.__name__)
        if method != "__call__" or kwargs or fn is None:
            raise TraceError(f"numpy.{ufunc.__name__} is not an mshadow operator")
        return fn(*[x.item() if isinstance(x, np.generic) else x for x in args])

    def __bool__(self):
        raise TraceError("an operator body branched on its input (if/and/or/min/max on a "
                         "value); use ms.where(cond, a, b) to trace it")

    def __float__(self):
        raise TraceError("an operator body converted its input to a Python number")

    __int__ = __index__ = __float__


_UFUNC_OPERATORS = {"add": operator.add, "subtract": operator.sub, "multiply": operator.mul,
                    "true_divide": operator.truediv, "divide": operator.truediv,
                    "power": operator.pow, "negative": operator.neg,
                    "positive": operator.pos, "absolute": operator.abs,
                    "greater": operator.gt, "less": operator.lt, "greater_equal": operator.ge,
                    "less_equal": operator.le, "equal": operator.eq,
                    "not_equal": operator.ne}


def _sym_tree(x):
    if isinstance(x, Sym):
        return x.tree
    if isinstance(x, (int, float)) and not isinstance(x, bool):
        return float(x)
    raise TraceError(f"an operator body used {type(x).__name__} {x!r}; only its inputs, "
                     f"numbers, ms.where and ms.op operators can be traced")


class Op:
    """An operator usable in ``F``; called directly it applies F (or traces, on symbols)."""

    def __init__(self, name, arity, doc=""):
        self.name = name
        self.arity = arity
        self.__doc__ = doc

    def __call__(self, *args):
        if any(isinstance(a, Sym) for a in args):
            return Sym((self.name,) + tuple(_sym_tree(a) for a in args))
        return _expr.F(self, *args)

    def __repr__(self):
        return f"<mshadow op {self.name}/{self.arity}>"


for _row in OPS:
    globals()[_row.name] = Op(_row.name, _row.arity,
                              f"mshadow operator {_row.name}: {_row.c or _row.composite}")
    __all__.append(_row.name)


class UserOp(Op):
    """A defined operator. ``tree`` is its traced body (a composite the plan inlines), or
    None when the body could not be traced: it then runs per block with numpy (``fn``)."""

    user = True   # F puts the operator itself into the IR node (expr.F)

    def __init__(self, name, arity, fn, tree, reason=""):
        super().__init__(name, arity, fn.__doc__ or "")
        self.fn = fn
        self.tree = tree
        self.reason = reason
        self.warned = False
        self.elementwise = None   # untraced: learnt on first use, does the body need scalar calls?

    def __call__(self, *args):
        if any(isinstance(a, Sym) for a in args):   # traced into another body: itself, not a name
            return Sym((self,) + tuple(_sym_tree(a) for a in args))
        return _expr.F(self, *args)

    def __str__(self):
        return self.name

    def warn_once(self):
        """Warn, once per operator, that it runs on numpy (mshadow/fallback.py)."""
        if not self.warned:
            self.warned = True
            warnings.warn(f"operator {self.name[5:].rpartition('.')[0]} could not be traced "
                          f"({self.reason}); it runs on numpy views of each block on the CPU, "
                          f"single-threaded", RuntimeWarning, stacklevel=5)


# Serial numbers of defined operators: two operators of one Python name read apart in
# listings and messages (an IR node holds the operator itself, so nothing looks names up).
_serial = itertools.count(1)


def define(fn=None, *, name=None):
    """Decorator: turn ``def op(a[, b[, c]]): ...`` into an operator usable in ``F``."""
    if fn is None:
        return lambda f: define(f, name=name)
    params = [p for p in inspect.signature(fn).parameters.values()
              if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    arity = len(params)
    if not 1 <= arity <= 3:
        raise TypeError(f"define: an operator takes 1 to 3 arguments, {fn.__name__} takes {arity}")
    base = name or fn.__name__
    uname = f"user.{base}.{next(_serial)}"
    try:
        out = fn(*[Sym(v) for v in "abc"[:arity]])
    except TraceError as e:
        out, tree = None, e
    else:
        if out is None or isinstance(out, (str, bytes, bool)):
            raise TypeError(f"define: operator {base} returned {type(out).__name__} {out!r:.40}; "
                            f"its body must return an expression of its inputs or a number")
        try:
            tree = _sym_tree(out)
        except TraceError as e:
            tree = e
    if isinstance(tree, TraceError):
        return UserOp(uname, arity, fn, None, str(tree))
    return UserOp(uname, arity, fn, tree)


class _Savers:
    """``ms.sv``: the savers an assignment can use (saveto is ``=``, plusto ``+=``, ...):
    one attribute per row of ir.SAVER_TABLE, its value the saver's name."""

    def __init__(self):
        self.__dict__.update((s.name, s.name) for s in SAVER_TABLE)

    def __dir__(self):
        return list(SAVERS)


class _Reducer:
    def __init__(self, name, combine, init):
        self.name = name
        self.combine = combine
        self.init = init

    def __repr__(self):
        return f"<mshadow reducer {self.name}>"


def reducer_names(names=None):
    """The reducers ``names`` (default: every row of readers.REDUCER_TABLE) as ``ms.red.<name>``,
    joined by commas and a last "or", for messages."""
    names = [f"ms.red.{n}" for n in (names or [r.name for r in REDUCER_TABLE])]
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " or " + names[-1]


class _Reducers:
    """``ms.red``: reducers for reductions and pooling (sum, maximum, minimum, product):
    one attribute per row of readers.REDUCER_TABLE."""

    def __init__(self):
        self.__dict__.update((r.name, _Reducer(r.name, r.combine, r.init))
                             for r in REDUCER_TABLE)

    def __dir__(self):
        return [r.name for r in REDUCER_TABLE]


class _Types:
    """``ms.type``: the expression type lattice."""
    kRValue, kMapper, kChainer, kComplex = _expr.kRValue, _expr.kMapper, _expr.kChainer, _expr.kComplex


sv = _Savers()
red = _Reducers()
types = _Types()   # exported as ms.type
