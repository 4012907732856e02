"""Block-wise numpy evaluation of an IR node, for operators that could not be traced.

Runs the expression on numpy views of blocks of rows (never a full-size temporary), with
the operator table's numpy references giving mshadow's semantics; single-threaded. A
visitor of mshadow/ir.py like the CPU lowering; it imports nothing above it (the engine
hands it the gathers' values).
"""
import numpy as np

from . import ir
from .lower.cpu import _COMPOSITES
from .dtypes import NP_BY_CODE as _NP_BY_CODE, CODE_BY_DTYPE, compute_code
from .ir import SAVERS as SAVER_OPS
from .ops_table import OPS_BY_NAME

BLOCK_ELEMS = 1 << 16


def _view2d(t, transposed):
    a = t.numpy()
    a = a.reshape(t.flat_to_2d().shape) if a.ndim != 2 else a
    return a.T if transposed else a


class _Eval(ir.Visitor):
    """The value of a node on rows ``rows`` of the destination, of the compute type."""

    def __init__(self, views, scalars, rows):
        self.views = views
        self.scalars = scalars
        self.rows = rows
        self.li = 0
        self.si = 0

    def _read(self, node, cc):
        v = self.views[self.li][self.rows]
        self.li += 1
        return v.astype(_NP_BY_CODE[compute_code(node.code)], copy=False)

    visit_Leaf = _read

    def visit_View(self, node, cc):     # the values were read whole: skip its scalars
        self.si += ir.scalar_count(node)
        return self._read(node, cc)

    visit_Gather = visit_View

    def visit_ImplicitDot(self, node, cc):   # summed in k order as the compiled kernel does
        a, b = self.views[self.li][self.rows], self.views[self.li + 1]
        self.li += 2
        self.si += ir.scalar_count(node)
        out = np.zeros((a.shape[0], b.shape[1]), dtype=a.dtype)
        with np.errstate(over="ignore"):
            for k in range(a.shape[1]):
                out = (out + a[:, k:k + 1] * b[k:k + 1, :]).astype(a.dtype)
        return out

    def visit_Scalar(self, node, cc):
        s = self.scalars[self.si]
        self.si += 1
        return np.asarray(s).astype(_NP_BY_CODE[cc])

    def visit_Cast(self, node, cc):
        src = self.visit(node.arg, compute_code(node.arg.code))
        out = src.astype(_NP_BY_CODE[node.code])
        return out.astype(_NP_BY_CODE[compute_code(node.code)], copy=False)

    def visit_Map(self, node, cc):
        c = compute_code(node.code)
        args = [self.visit(a, c) for a in node.args]
        res = apply(node.op, args, c)
        if node.code == "f16":   # every half_t operator's result is a half, as compiled
            res = res.astype(np.float16).astype(np.float32)
        return res


def apply(name, args, cc):
    """Operator ``name`` (a built-in's name, or a defined operator: mshadow/op.py UserOp,
    which the IR node holds) on arrays of compute type ``cc``."""
    dt = _NP_BY_CODE[cc]
    if not isinstance(name, str) and name.tree is None:   # an untraceable defined operator
        op = name
        op.warn_once()
        vals = [_Val(np.asarray(a, dtype=dt), cc) for a in args]
        if op.elementwise is None:
            try:   # numpy-vectorisable body (e.g. it calls numpy functions): one call a block
                res = op.fn(*vals)
                op.elementwise = False
            except (ValueError, TypeError):   # it branches on values: one call an element
                op.elementwise = True
        if op.elementwise:
            res = np.vectorize(lambda *xs: _unwrap(op.fn(*[_Val(np.asarray(x, dtype=dt), cc)
                                                           for x in xs]), dt),
                               otypes=[dt])(*args)
        else:
            res = op.fn(*vals)
        return _unwrap(res, dt)
    tree = name.tree if not isinstance(name, str) else _COMPOSITES.get(name)
    if tree is not None:
        return _expand(tree, args, cc)
    with np.errstate(all="ignore"):
        return np.asarray(OPS_BY_NAME[name].ref(*args)).astype(dt, copy=False)


def _unwrap(res, dt):
    if isinstance(res, _Val):
        res = res.v
    res = np.asarray(res)
    if res.dtype.kind not in "biuf":
        raise TypeError(f"a defined operator returned {res.dtype} values; expected numbers")
    with np.errstate(all="ignore"):
        return res.astype(dt, copy=False)


_UFUNC_OPS = {np.add: "plus", np.subtract: "minus", np.multiply: "mul", np.true_divide: "div",
              np.negative: "neg", np.absolute: "abs", np.power: "power", np.maximum: "maximum",
              np.minimum: "minimum", np.greater: "gt", np.less: "lt", np.greater_equal: "ge",
              np.less_equal: "le", np.equal: "eq", np.not_equal: "ne"}


class _Val:
    """A block (or one element) inside an untraceable operator body. Its arithmetic is the
    compiled kernels': integers wrap, integer division truncates and x / 0 is 0, results keep
    the compute type. Other numpy functions see the plain array."""

    __slots__ = ("v", "cc")

    def __init__(self, v, cc):
        self.v = v
        self.cc = cc

    def __array__(self, dtype=None, copy=None):
        return self.v if dtype is None else self.v.astype(dtype)

    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        plain = [x.v if isinstance(x, _Val) else x for x in inputs]
        name = _UFUNC_OPS.get(ufunc)
        if method != "__call__" or kwargs or name is None:
            return getattr(ufunc, method)(*plain, **kwargs)
        dt = _NP_BY_CODE[self.cc]
        return _Val(apply(name, [np.asarray(x).astype(dt) for x in plain], self.cc), self.cc)

    def __bool__(self):
        return bool(self.v)

    def __float__(self):
        return float(self.v)

    def __int__(self):
        return int(self.v)

    def __index__(self):
        return int(self.v)

    def __getattr__(self, name):   # .shape, .dtype, .sum() ...
        return getattr(self.v, name)

    def __neg__(self): return np.negative(self)
    def __abs__(self): return np.absolute(self)
    def __pos__(self): return self
    def __add__(self, o): return np.add(self, o)
    def __radd__(self, o): return np.add(o, self)
    def __sub__(self, o): return np.subtract(self, o)
    def __rsub__(self, o): return np.subtract(o, self)
    def __mul__(self, o): return np.multiply(self, o)
    def __rmul__(self, o): return np.multiply(o, self)
    def __truediv__(self, o): return np.true_divide(self, o)
    def __rtruediv__(self, o): return np.true_divide(o, self)
    __floordiv__ = __truediv__    # the kernels' integer division truncates, as C does
    __rfloordiv__ = __rtruediv__
    def __pow__(self, o): return np.power(self, o)
    def __rpow__(self, o): return np.power(o, self)
    def __gt__(self, o): return np.greater(self, o)
    def __lt__(self, o): return np.less(self, o)
    def __ge__(self, o): return np.greater_equal(self, o)
    def __le__(self, o): return np.less_equal(self, o)
    def __eq__(self, o): return np.equal(self, o)
    def __ne__(self, o): return np.not_equal(self, o)
    __hash__ = None


def _expand(tree, args, cc):
    if isinstance(tree, str):
        return args["abc".index(tree)]
    if isinstance(tree, float):
        return np.asarray(tree).astype(_NP_BY_CODE[cc])
    return apply(tree[0], [_expand(t, args, cc) for t in tree[1:]], cc)


def evaluate(node, leaves, scalars, dst, saver, materialized):
    """``dst <saver> node`` with numpy, a block of rows at a time.
    ``materialized(node, leaves, scalars, shape)`` gives the values of a Gather, or of a View
    of an expression, as a tensor (the engine runs its plan, or this fallback)."""
    out = _view2d(dst, False)
    views = []
    for sub, lv, sc in _reads(node, leaves, scalars):
        v = _leaf_view(sub, lv, sc, dst, materialized)
        if np.shares_memory(v, out) and not (v.__array_interface__ == out.__array_interface__):
            v = v.copy()   # read elsewhere than written: never see half-written rows
        views.append(v)
    cc = compute_code(CODE_BY_DTYPE[dst.dtype])
    rows, cols = out.shape
    step = max(1, BLOCK_ELEMS // max(cols, 1))
    for r0 in range(0, rows, step):
        sl = slice(r0, min(rows, r0 + step))
        val = _Eval(views, scalars, sl).visit(node, cc)
        sop = SAVER_OPS[saver]
        if sop is not None:
            val = apply(sop, [out[sl].astype(_NP_BY_CODE[cc]), val], cc)
        out[sl] = np.broadcast_to(val, out[sl].shape)


def _reads(node, leaves, scalars):
    """(node, its leaves, its scalars) for each node read as one array, in binding order:
    a Leaf, a View, a Gather (with everything below it), an implicit_dot's operands."""
    out = []

    def walk(n, li, si):
        t = type(n)
        if t is ir.Scalar:
            return li, si + 1
        if t is ir.Leaf or t is ir.View or t is ir.Gather:
            nl, ns = len(ir.leaves(n)), ir.scalar_count(n)
            out.append((n, leaves[li:li + nl], scalars[si:si + ns]))
            return li + nl, si + ns
        if t is ir.ImplicitDot:        # each operand read whole, as a 2-D array
            for opd in (n.lhs, n.rhs):
                nl, ns = len(ir.leaves(opd)), ir.scalar_count(opd)
                out.append((("operand", opd), leaves[li:li + nl], scalars[si:si + ns]))
                li, si = li + nl, si + ns
            return li, si
        for c in n.children:
            li, si = walk(c, li, si)
        return li, si
    walk(node, 0, 0)
    return out


def _leaf_view(leaf, lv, sc, dst, materialized):
    """The leaf as a 2-D numpy array in the destination's (rows, cols) geometry (an
    implicit_dot operand, ("operand", node), in its own)."""
    if type(leaf) is tuple:
        node = leaf[1]
        if type(node) is ir.Leaf:
            return _view2d(lv[0], node.transposed)
        if node.src is not None:
            return materialized(node, lv, sc, lv[0].shape).numpy()
        return lv[0].numpy()
    if type(leaf) is ir.Leaf:
        return _view2d(lv[0], leaf.transposed)
    rows, cols = dst.flat_to_2d().shape
    if type(leaf) is ir.Gather or leaf.src is not None:   # values in a temporary (slow anyway)
        return materialized(leaf, lv, sc, lv[0].shape).numpy().reshape(rows, cols)
    return lv[0].numpy().reshape(rows, cols)   # a strided view: may copy (slow anyway)
