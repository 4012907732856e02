"""implicit_dot (implicit_gemm.h): a matrix product evaluated element by element.

Unlike ``dot`` (kComplex, handed to BLAS), it is a kChainer, so it nests inside fused
expressions: ``dst[:] = ms.implicit_dot(a, b.T) + c`` is one pass with no temporary.
Its operands are any 2-D expressions, as in mshadow: a tensor or its .T is read in place,
so is a strided view of one (flip, slice, broadcast, ...); any other expression is a view
of its values, which the lowering evaluates whole into scratch before the product runs.

Summation order: element (y, x) adds lhs(y, k) * rhs(k, x) for k = 0, 1, ... in order, in
the operands' type, one product at a time (mshadow's ImplicitGEMMExp::Eval), so it can
differ from dot (BLAS, blocked) in the last bits.
"""
import numpy as np

from .. import _core, ir
from ..errors import DTypeError, ShapeError
from ..expr import _CODE_BY_FLAG, kChainer, kComplex, new_node
from ..shape import Shape
from .views import _strided, producer_handle, view

Tensor = _core.Tensor


class ImplicitGEMMExp(_core.Exp):
    """``implicit_dot(lhs, rhs)``: element (y, x) is ``sum_k lhs[y][k] * rhs[k][x]``."""

    __slots__ = ("lhs", "rhs")


def _operand(x, side):
    """An operand as (key, leaves, scalars, code, rows, cols): a 2-D tensor or its .T (a
    Leaf), a strided 2-D view (a View read in place), or any other 2-D expression (a View
    of its values: the lowering stages them)."""
    if not isinstance(x, (Tensor, _core.Exp)):
        raise TypeError(f"implicit_dot: the {side} operand must be a tensor or an expression, "
                        f"got {type(x).__name__}")
    x = _core.chained(x)
    if isinstance(x, _core.Exp) and x.exp_type == kComplex:
        raise TypeError(f"implicit_dot: the {side} operand is a kComplex expression "
                        f"({ir.describe(x.key)}); assign it to a tensor first")
    if len(x.shape) != 2:
        raise ShapeError(f"implicit_dot: the {side} operand must be 2-D, got shape {x.shape}")
    rows, cols = x.shape
    if isinstance(x, Tensor):
        return ir.Leaf(_CODE_BY_FLAG[x.type_flag], False), (x,), (), _CODE_BY_FLAG[x.type_flag], \
            rows, cols
    if isinstance(x, _core.TransposeExp) and type(x.key) is ir.Leaf:
        return x.key, x.leaves, (), x.code, rows, cols
    d = _strided(x)
    if d is not None:
        base, off, shape, st, producer = d
        v = view(base, shape, off, st, producer)
    else:
        handle = producer_handle(x)
        v = view(handle, x.shape, 0, _core.tensor_strides(handle), x)
    return v.key, v.leaves, v.scalars, v.code, rows, cols


def implicit_dot(lhs, rhs):
    """The (m, n) product of an (m, k) and a (k, n) operand, as an element-wise expression."""
    if isinstance(lhs, np.ndarray):
        lhs = _core.from_numpy(lhs)
    if isinstance(rhs, np.ndarray):
        rhs = _core.from_numpy(rhs)
    lk, ll, ls, code, m, k = _operand(lhs, "left")
    rk, rl, rs, rcode, k2, n = _operand(rhs, "right")
    if k != k2:
        raise ShapeError(f"implicit_dot The matrix shape do  not match: lhs ({m},{k}) and "
                         f"rhs ({k2},{n})")
    if code != rcode:
        raise DTypeError(f"implicit_dot: operands have different dtypes {lhs.dtype} and "
                         f"{rhs.dtype}; use ms.tcast")
    if code == "f16":
        raise DTypeError("implicit_dot does not take float16 operands (no half accumulator); "
                         "copy them to float32 first")
    node = new_node(ImplicitGEMMExp, ir.ImplicitDot(code, lk, rk), Shape(m, n), code,
                    ll + rl, ls + rs, kChainer)
    node.lhs, node.rhs = lhs, rhs
    return node
