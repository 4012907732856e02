"""Matrix products: DotExp, BatchDotExp, dot, batch_dot, vector_dot, batch_gemm and their engine.

Owns mshadow's kComplex DotEngine: products stay lazy until assigned, then go to BLAS (mshadow._blas).
dot's forms and the construction of a product node are compiled (mshadow/_product.pxi), as
is the per-statement path of a product of tensors (_blas.assign_product); this module holds
the node classes, batch_dot's forms and the full evaluation with its errors.
"""


import numpy as np

from . import _core, ir
import importlib
from .device import check_devices
from .engine import get_plan, register_complex
from .errors import DTypeError, ShapeError
from .expr import scale_value, _CODE_BY_FLAG, _NP_BY_CODE, _as_operand, describe

Tensor = _core.Tensor

# saver -> (sign of alpha, beta): mshadow's Saver::AlphaBLAS / BetaBLAS (ir.SAVER_TABLE)
_BLAS_CONSTANTS = ir.SAVER_BLAS


_blas_module = None


def _blas():
    """mshadow._blas, imported on the first product: it loads scipy.linalg (~0.2 s)."""
    global _blas_module
    if _blas_module is None:
        _blas_module = importlib.import_module("mshadow._blas")
        for kind in ("dot", "batch_dot"):      # the compiled per-statement path
            _core.install_complex_fast(kind, _blas_module.assign_product)
        _core.cap_blas_threads()      # scipy's BLAS was not loaded when the cap was set
    return _blas_module


def _is_expression(x):
    return not isinstance(x, Tensor)


_name = _core.product_name       # an operand as messages name it
_common = _core.product_code     # TypeCheck and the device check of two operands


def _scale_value(v, code, where):
    return scale_value(v, code, where, "product")


class DotExp(_core.ProductExp):
    """``dot(lhs, rhs)``: a lazy matrix product (mshadow's DotExp, kComplex).

    ``ltrans``/``rtrans`` are the BLAS transpose flags actually used: a 1-D right operand
    is read as a column (``rtrans`` set), a 1-D left operand as a row, ``u.T`` as a column.
    """

    __slots__ = ()


class BatchDotExp(_core.ProductExp):
    """``batch_dot(lhs, rhs, transpose_left, transpose_right)``: one gemm per batch (kComplex)."""

    __slots__ = ()


# dot(a, b): its forms' shape rules and the node's construction are compiled (_product.pxi)
dot = _core.dot


def _batch_shapes(a, ta, b, tb, where):
    if len(a.shape) != 3 or len(b.shape) != 3:
        raise ShapeError(f"{where}: expects 3-D tensors (batch, rows, cols), got "
                         f"{tuple(a.shape)} and {tuple(b.shape)}")
    if a.shape[0] != b.shape[0]:
        raise ShapeError(f"BatchGEMM: batchsize must be equal. lhs {tuple(a.shape)}, "
                         f"rhs {tuple(b.shape)}")
    m, k = (a.shape[2], a.shape[1]) if ta else (a.shape[1], a.shape[2])
    k2, n = (b.shape[2], b.shape[1]) if tb else (b.shape[1], b.shape[2])
    if k != k2:
        raise ShapeError(f"BatchGEMM: matrix shape mismatch: lhs {tuple(a.shape)}"
                         f"{' (transposed)' if ta else ''} x rhs {tuple(b.shape)}"
                         f"{' (transposed)' if tb else ''} (inner sizes {k} and {k2})")
    return a.shape[0], m, n


def _tensor_arg(x, where, what):
    x = _as_operand(x, where)
    if not isinstance(x, Tensor):
        raise TypeError(f"{where}: {what} must be a tensor, got the expression {describe(x.key)}")
    return x


def batch_dot(lhs, rhs, transpose_left=False, transpose_right=False):
    """``batch_dot(a, b)``: ``dst[i] = op(a[i]) @ op(b[i])`` for 3-D tensors (lazy, kComplex).

    mshadow's ``batch_dot<tl, tr>`` compiles but has no engine since 2016 (link error);
    here it evaluates, one BLAS gemm per batch.
    """
    a = _tensor_arg(lhs, "batch_dot", "lhs")
    b = _tensor_arg(rhs, "batch_dot", "rhs")
    code = _common(a, b, "batch_dot")
    ta, tb = bool(transpose_left), bool(transpose_right)
    nbatch, m, n = _batch_shapes(a, ta, b, tb, "batch_dot")
    return _core.product_node("batch_dot", a, ta, b, tb, (nbatch, m, n), code)


def _check_dst(dst, exp, where):
    if not isinstance(dst, Tensor):
        raise TypeError(f"{where}: destination must be a Tensor, got {type(dst).__name__}")
    if dst.type_flag != exp.lhs.type_flag:
        raise DTypeError(f"{where}: product of dtype {exp.lhs.dtype} into a tensor of dtype "
                         f"{dst.dtype}; use ms.tcast")
    check_devices(where, dst.device, (exp.lhs.device, exp.rhs.device), gpu_ok=True)


def _eval(dst, exp, saver):
    """The complex engine: ``dst <saver> exp`` for a DotExp or BatchDotExp (compiled: _blas.
    product; here the errors it leaves to this layer: each says what was wrong)."""
    sign_beta = _BLAS_CONSTANTS.get(saver)
    if sign_beta is None:
        row = ir.SAVER_BY_NAME.get(saver)
        sym = row.symbol if row is not None else saver
        forms = ", ".join(f"{s.symbol} ({s.name})" for s in ir.SAVER_TABLE if s.blas is not None)
        raise TypeError(f"dst {sym} {type(exp).__name__}: saver {saver} has no BLAS form; a matrix "
                        f"product can only be stored with {forms}. Assign it to a tensor first.")
    if _is_expression(exp.lhs) or _is_expression(exp.rhs):
        return _eval_expression(dst, exp, saver, sign_beta)
    if _blas().product(dst, exp, sign_beta, _core.get_num_threads()):
        return
    where = exp.key.kind
    _check_dst(dst, exp, where)
    if dst.shape != exp.shape:
        form = "dot-gemv" if len(exp.shape) == 1 and exp.shape[0] != 1 else "dot-gemm"
        if where == "batch_dot":
            form = "BatchGEMM"
        raise ShapeError(f"{form}: matrix shape mismatch: destination {tuple(dst.shape)}, "
                         f"{_name(exp.lhs, exp.ltrans)} x {_name(exp.rhs, exp.rtrans)} gives "
                         f"{tuple(exp.shape)}")
    if dst.device is not _core.cpu:          # cuBLAS (cuda/executor.py)
        from .cuda import executor
        return executor.assign_product(dst, exp, sign_beta)
    raise AssertionError(f"{where}: _blas.product refused a destination that passes every "
                         f"check here ({dst!r})")    # the two lists of checks disagree


# a panel of an expression operand: about 1 MiB, so the product reads it from cache (a
# (576, 25088) float32 im2col matrix multiplies at 60 GFLOP/s whole, at 95 in 448 columns)
_PANEL_BYTES = 1 << 20


def _eval_expression(dst, exp, saver, sign_beta):
    """``dst <saver> dot(a, b)`` where an operand is an expression. A right operand that
    does not read ``dst`` goes a panel of columns at a time (_core.open_panels, then one
    gemm a panel into the same columns of dst: _blas.gemm_panels); any other form is
    evaluated into a temporary on dst's device first, then multiplied as tensors."""
    a, b, code = exp.lhs, exp.rhs, exp.key.code
    if not isinstance(dst, Tensor):
        raise TypeError(f"dot: destination must be a Tensor, got {type(dst).__name__}")
    if _CODE_BY_FLAG[dst.type_flag] != code:
        raise DTypeError(f"dot: product of dtype {np.dtype(_NP_BY_CODE[code]).name} into a tensor of dtype "
                         f"{dst.dtype}; use ms.tcast")
    check_devices("dot", dst.device, _core.leaf_devices(exp.leaves), gpu_ok=True)
    if dst.shape != exp.shape:
        raise ShapeError(f"dot-gemm: matrix shape mismatch: destination {tuple(dst.shape)}, "
                         f"{_name(a, exp.ltrans)} x {_name(b, exp.rtrans)} gives "
                         f"{tuple(exp.shape)}")
    if dst.device is _core.cpu and not _is_expression(a) and not exp.rtrans:
        panels = open_panels(b, dst)
        if panels is not None:
            with panels:
                _blas().gemm_panels(dst, a, exp.ltrans, panels, sign_beta[0] * exp.scale,
                                    sign_beta[1], _core.get_num_threads())
            return
    a, b = (_temporary(x, dst.device) for x in (a, b))
    node = _core.product_node("dot", a, exp.ltrans, b, exp.rtrans, tuple(exp.shape), code)
    node.scale = exp.scale
    node.scalars = (exp.scale,)
    _eval(dst, node, saver)


def open_panels(e, dst):
    """A _core.ColumnPanels of the 2-D expression ``e`` (a product's operand), about
    _PANEL_BYTES of columns a thread (BLAS splits each product among set_num_threads'
    threads); None where panels do not fit: ``e`` holds an untraced operator, reads
    ``dst`` (a panel would read columns already stored) or has a stage that goes by rows
    (every panel would evaluate it again)."""
    plan = get_plan(e.key, e.code, "saveto")
    if not isinstance(plan, _core.Plan) or _core.reads_tensor(e.leaves, dst):
        return None
    per_thread = max(64, _PANEL_BYTES // max(1, e.shape[0] * dst.itemsize) // 64 * 64)
    return _core.open_panels(plan, e.leaves, e.scalars, e.shape,
                             per_thread * _core.get_num_threads())


def _temporary(x, device):
    """An expression operand's values in a new tensor on ``device`` (a tensor as it is)."""
    if not _is_expression(x):
        return x
    t = _core.new_tensor(x.shape, 0, dtype=_NP_BY_CODE[x.code], device=device)
    t[:] = x
    return t


register_complex("dot", _eval)
register_complex("batch_dot", _eval)


def vector_dot(dst, lhs, rhs):
    """``VectorDot(dst, lhs, rhs)``: ``dst[0] = dot(lhs, rhs)`` for 1-D tensors (BLAS ?dot)."""
    dst = _tensor_arg(dst, "VectorDot", "dst")
    a = _tensor_arg(lhs, "VectorDot", "lhs")
    b = _tensor_arg(rhs, "VectorDot", "rhs")
    if len(dst.shape) != 1 or dst.shape[0] != 1:
        raise ShapeError(f"VectorDot: expect dst to be scalar, got shape {tuple(dst.shape)}")
    if len(a.shape) != 1 or len(b.shape) != 1 or a.shape[0] != b.shape[0]:
        raise ShapeError(f"VectorDot: Shape mismatch: lhs {tuple(a.shape)}, rhs {tuple(b.shape)}")
    exp = dot(a, b)
    _eval(dst, exp, "saveto")


def batch_gemm(dst, lhs, rhs, alpha, beta, transpose_left=False, transpose_right=False):
    """``BatchGEMM``: ``dst[i] = alpha * op(lhs[i]) @ op(rhs[i]) + beta * dst[i]``.

    Unlike mshadow, pitched (non-contiguous) tensors are accepted and no workspace is needed.
    """
    d = _tensor_arg(dst, "BatchGEMM", "dst")
    a = _tensor_arg(lhs, "BatchGEMM", "lhs")
    b = _tensor_arg(rhs, "BatchGEMM", "rhs")
    code = _common(a, b, "BatchGEMM")
    ta, tb = bool(transpose_left), bool(transpose_right)
    if len(d.shape) != 3:
        raise ShapeError(f"BatchGEMM: expects 3-D tensors (batch, rows, cols), got dst "
                         f"{tuple(d.shape)}")
    nbatch, m, n = _batch_shapes(a, ta, b, tb, "BatchGEMM")
    if d.shape[0] != nbatch:
        raise ShapeError(f"BatchGEMM: batchsize must be equal. dst {tuple(d.shape)}, "
                         f"lhs {tuple(a.shape)}")
    if (d.shape[1], d.shape[2]) != (m, n):
        raise ShapeError(f"BatchGEMM: matrix shape mismatch: dst {tuple(d.shape)}, lhs "
                         f"{tuple(a.shape)} x rhs {tuple(b.shape)} gives {(nbatch, m, n)}")
    exp = _core.product_node("batch_dot", a, ta, b, tb, (nbatch, m, n), code)
    _check_dst(d, exp, "BatchGEMM")
    alpha = _scale_value(alpha, code, "BatchGEMM alpha")
    beta = _scale_value(beta, code, "BatchGEMM beta")
    if d.device is not _core.cpu:            # cuBLAS (cuda/executor.py): alpha as the scale
        from .cuda import executor
        exp.scale = alpha
        return executor.assign_product(d, exp, (1, beta))
    _blas().batch_gemm(d, a, ta, b, tb, alpha, beta, _core.get_num_threads())


_core.install_layer(product_classes=(DotExp, BatchDotExp))
