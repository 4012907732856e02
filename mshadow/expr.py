"""Lazy expressions: Exp classes, operator overloading, F, scalar, tcast, transpose.

Nothing here evaluates. Each expression records, as it is built, what an assignment needs:
its IR node (mshadow/ir.py: the structure, which keys the plan cache), shape and dtype
(ShapeCheck and TypeCheck happen here, before anything is stored), and its leaf tensors and
scalar values in binding order. The node classes, ``make_map`` and ``ScalarExp`` are
compiled (mshadow/_exp.pxi): building a node is on the per-assignment path.
"""
import numpy as np

from . import _core, ir
from .dtypes import CODE_BY_FLAG as _CODE_BY_FLAG, NP_BY_CODE as _NP_BY_CODE, INT_CODES
from .errors import OperatorError, ShapeError
from .ops_table import OPS_BY_NAME
from .shape import Shape

Tensor = _core.Tensor
Exp = _core.Exp
MapExp, UnaryMapExp, BinaryMapExp, TernaryMapExp = (_core.MapExp, _core.UnaryMapExp,
                                                    _core.BinaryMapExp, _core.TernaryMapExp)
TypecastExp, TransposeExp = _core.TypecastExp, _core.TransposeExp
make_map = _core.make_map
_scalar_value = _core._scalar_value_py

# expression type lattice (namespace expr::type)
kRValue, kMapper, kChainer, kComplex = 0, 1, 3, 7

ScalarExp = _core.ScalarExp
# the IR leaf of a tensor of each TypeFlag (kFloat32=0 ... kInt64=6)
_LEAF_KEY = tuple(ir.LEAF[c] for c in _CODE_BY_FLAG)
describe = ir.describe


def scalar(value, dtype=None):
    """``scalar<DType>(value)``: a constant operand, of ``dtype`` or the expression's."""
    return ScalarExp(value, dtype)


_INT_CODES = INT_CODES


scale_value = _core.scale_value
# a kComplex node whose scale `* s` folds (dot's alpha, a reduction's scale): compiled
ScaledExp = _core.ScaledExp


def _code_of_dtype(dtype):
    from .dtypes import type_flag
    return _CODE_BY_FLAG[type_flag(dtype)]


def _is_scalar(x):
    return isinstance(x, (int, float, np.number, ScalarExp)) and not isinstance(
        x, (complex, np.complexfloating))


def _parts(x):
    """(key, shape, code, leaves, scalars, exp_type) of a tensor or an expression."""
    if isinstance(x, Tensor):
        return _LEAF_KEY[x.type_flag], x.shape, _CODE_BY_FLAG[x.type_flag], (x,), (), kRValue
    return x.key, x.shape, x.code, x.leaves, x.scalars, x.exp_type


def _as_operand(x, where):
    if isinstance(x, (Tensor, Exp)):
        return x
    if isinstance(x, np.ndarray):
        return _core.from_numpy(x)
    raise TypeError(f"{where}: cannot use {type(x).__name__} {x!r} in an expression "
                    f"(expected a Tensor, an expression, a numpy array or a real scalar)")


def F(op, *args):
    """``F(op, a[, b[, c]])``: apply an operator (a name, an ms.op entry or a defined op)."""
    arity = getattr(op, "arity", None)
    if arity is None:                   # an operator by name
        if not isinstance(op, str) or op not in OPS_BY_NAME:
            raise OperatorError(_unknown_operator(op, len(args)))
        name, arity = op, OPS_BY_NAME[op].arity
    else:                               # an ms.op entry, or a defined operator
        name = op.name
    if len(args) != arity:
        raise TypeError(f"F: operator {name} takes {arity} argument(s), got {len(args)}")
    # a defined operator goes into the IR node itself (mshadow/op.py UserOp)
    return make_map(op if getattr(op, "user", False) else name, args)


# numpy ufuncs whose mshadow operator has another name
_UFUNC_OPS = {"add": "plus", "subtract": "minus", "multiply": "mul", "divide": "div",
              "true_divide": "div", "negative": "neg", "absolute": "abs", "fabs": "abs",
              "greater": "gt", "less": "lt", "greater_equal": "ge", "less_equal": "le",
              "equal": "eq", "not_equal": "ne", "fmax": "maximum", "fmin": "minimum"}


def _unknown_operator(op, nargs):
    """F's message for ``op`` that is not an operator: what to write instead."""
    known = ", ".join(sorted(n for n in OPS_BY_NAME if n.isidentifier()))
    args = ", ".join("xyz"[:nargs]) or "x"
    if isinstance(op, np.ufunc):
        mine = _UFUNC_OPS.get(op.__name__, op.__name__)
        if mine in OPS_BY_NAME:
            return (f"F: unknown operator {op!r}: numpy's ufuncs are not mshadow operators "
                    f"(mshadow compiles its own); write ms.F(ms.op.{mine}, {args}) instead of "
                    f"ms.F(np.{op.__name__}, {args})")
        return (f"F: unknown operator {op!r}: numpy's ufuncs are not mshadow operators, and "
                f"mshadow has no {op.__name__}. Define one: `@ms.op.define` above "
                f"`def {op.__name__}(a): return np.{op.__name__}(a)`, then "
                f"ms.F({op.__name__}, {args}) (it runs on numpy block by block). mshadow's "
                f"operators are ms.op.{{{known}}}")
    if callable(op):
        fname = getattr(op, "__name__", "")
        fname = fname if fname.isidentifier() else "fn"
        return (f"F: unknown operator {op!r}: a plain Python function is not an operator; "
                f"make it one with ms.op.define, which traces it once into a compiled "
                f"operator: ms.F(ms.op.define({fname}), {args}), or `@ms.op.define` above "
                f"its def")
    return (f"F: unknown operator {op!r}; write one of ms.op.{{{known}}} (or its name as a "
            f"string), or define one with @ms.op.define")


def where(cond, a, b):
    """``cond != 0 ? a : b`` element-wise."""
    return make_map("where", (cond, a, b))


def tcast(dtype, exp):
    """``tcast<DType>(exp)``: convert element-wise (C conversion: floats truncate toward 0)."""
    code = _code_of_dtype(dtype)
    if _is_scalar(exp):
        v = exp.value if isinstance(exp, ScalarExp) else exp
        return ScalarExp(np.asarray(v).astype(_NP_BY_CODE[code]).item(), np.dtype(_NP_BY_CODE[code]))
    exp = _core.chained(_as_operand(exp, "tcast"))
    k, s, c, lv, sc, et = _parts(exp)
    if et == kComplex:
        raise TypeError("tcast: a kComplex expression cannot be nested; assign it first")
    node = new_node(TypecastExp, ir.Cast(code, k), s, code, lv, sc, et | kMapper)
    node.src = exp
    return node


def new_node(cls, key, shape, code, leaves, scalars, exp_type):
    """An expression node of class ``cls`` with everything the engine reads."""
    node = cls()
    node.key = key
    node.shape = shape
    node.code = code
    node.leaves = leaves
    node.scalars = scalars
    node.exp_type = exp_type
    return node


def transpose(exp):
    """``exp.T`` of a 2-D expression: element (y, x) reads (x, y); ``T.T`` is the original.

    A 1-D tensor of length n is a (1, n) row, so its ``.T`` is the (n, 1) column (mshadow's
    ``Tensor<1>.T()``, used for the outer product ``dot(u.T, v)``).
    """
    exp = _core.chained(_as_operand(exp, "transpose"))
    if isinstance(exp, TransposeExp):   # (e.T).T is e
        return exp.src
    k, s, c, lv, sc, et = _parts(exp)
    if len(s) == 1 and isinstance(exp, Tensor):
        s = Shape(1, s[0])
    if len(s) != 2:
        raise ShapeError(f"transpose needs a 2-D expression (or a 1-D tensor), got shape {s}")
    if et == kComplex:
        raise TypeError("transpose: a kComplex expression cannot be transposed lazily")
    if ir.holds_remap(k):   # one more index map: views compose it (extension/views.py)
        return _remap_transpose(exp)
    fk = ir.transposed(k)
    if type(fk) is ir.Leaf and not fk.transposed:
        return lv[0]   # (t.T).T is t
    node = new_node(TransposeExp, fk, Shape(s[1], s[0]), c, lv, sc, et | kChainer)
    node.src = exp
    return node


def _remap_transpose(exp):
    raise TypeError(f"transpose of {describe(exp.key)} needs mshadow.extension (import mshadow)")


def install_remap_transpose(fn):
    """The transpose of an expression holding a remap (an index map the views compose):
    installed by mshadow/extension/views.py, the layer above this one."""
    global _remap_transpose
    _remap_transpose = fn


_core.install_layer(transpose=transpose)
