"""implicit_dot (implicit_gemm.h): a matrix product evaluated element by element.

Unlike ``dot`` (kComplex, handed to BLAS), it is a kChainer, so it nests inside fused
expressions: ``dst[:] = ms.implicit_dot(a, b.T) + c`` is one pass with no temporary.
"""
from .. import _core, ir
from ..errors import DTypeError, ShapeError
from ..expr import _CODE_BY_FLAG, kChainer, new_node
from ..shape import Shape

Tensor = _core.Tensor


class ImplicitGEMMExp(_core.Exp):
    """``implicit_dot(lhs, rhs)``: element (y, x) is ``sum_k lhs[y][k] * rhs[k][x]``."""

    __slots__ = ("lhs", "rhs")


def _leaf(x, side):
    """A 2-D tensor, or the transpose of one, as (key, tensor, rows, cols) in read order."""
    if isinstance(x, Tensor):
        t, transposed = x, False
    elif isinstance(x, _core.TransposeExp) and type(x.key) is ir.Leaf:
        t, transposed = x.leaves[0], True
    else:
        raise TypeError(f"implicit_dot: the {side} operand must be a 2-D tensor or its .T, "
                        f"got {type(x).__name__}")
    if t.ndim != 2:
        raise ShapeError(f"implicit_dot: the {side} operand must be 2-D, got shape {t.shape}")
    rows, cols = (t.shape[1], t.shape[0]) if transposed else (t.shape[0], t.shape[1])
    return (ir.Leaf(_CODE_BY_FLAG[t.type_flag], transposed), t, rows, cols)


def implicit_dot(lhs, rhs):
    """The (m, n) product of an (m, k) and a (k, n) operand, as an element-wise expression."""
    lk, lt, m, k = _leaf(lhs, "left")
    rk, rt, k2, n = _leaf(rhs, "right")
    if k != k2:
        raise ShapeError(f"implicit_dot The matrix shape do  not match: lhs ({m},{k}) and "
                         f"rhs ({k2},{n})")
    if lt.dtype != rt.dtype:
        raise DTypeError(f"implicit_dot: operands have different dtypes {lt.dtype} and "
                         f"{rt.dtype}; use ms.tcast on a copy")
    code = lk[1]
    if code == "f16":
        raise DTypeError("implicit_dot does not take float16 operands (no half accumulator); "
                         "copy them to float32 first")
    node = new_node(ImplicitGEMMExp, ir.ImplicitDot(code, lk, rk), Shape(m, n), code, (lt, rt), (), kChainer)
    node.lhs, node.rhs = lhs, rhs
    return node
