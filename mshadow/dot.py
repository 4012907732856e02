"""Matrix products: DotExp, BatchDotExp, dot, batch_dot, vector_dot, batch_gemm and their engine.

Owns mshadow's kComplex DotEngine: products stay lazy until assigned, then go to BLAS (mshadow._blas).
"""


import numpy as np

from . import _core, ir
import importlib
from .device import check_devices
from .engine import get_plan, register_complex
from .errors import DTypeError, ShapeError
from .expr import (ScaledExp, TransposeExp, scale_value, _CODE_BY_FLAG, _NP_BY_CODE,
                   _as_operand, describe, kComplex)
from .shape import Shape

Tensor = _core.Tensor

from .dtypes import INT_CODES as _INT_CODES

# saver -> (sign of alpha, beta): mshadow's Saver::AlphaBLAS / BetaBLAS (ir.SAVER_TABLE)
_BLAS_CONSTANTS = {s.name: s.blas for s in ir.SAVER_TABLE if s.blas is not None}


_blas_module = None


def _blas():
    """mshadow._blas, imported on the first product: it loads scipy.linalg (~0.2 s)."""
    global _blas_module
    if _blas_module is None:
        _blas_module = importlib.import_module("mshadow._blas")
        _core.cap_blas_threads()      # scipy's BLAS was not loaded when the cap was set
    return _blas_module


def _name(t, trans):
    return f"{'Tensor' if isinstance(t, Tensor) else type(t).__name__}{tuple(t.shape)}" + \
        (".T" if trans else "")


def _operand(x, where):
    """(tensor, transposed) for a Tensor, ``t.T`` or a numpy array, or (expression, False)
    for any other expression that is not kComplex; anything else is refused.

    mshadow's DotExp takes ``Tensor`` or ``Tensor.T()`` only. Here a 2-D product also takes
    a 2-D expression operand (``dot(w, unpack_patch2col(pad(x, 1), 3, 3, 1))``, cxxnet's
    convolution): the engine evaluates it a panel of columns at a time (_eval_expression).
    """
    x = _as_operand(x, where)
    if isinstance(x, Tensor):
        return x, False
    if isinstance(x, TransposeExp) and type(x.key) is ir.Leaf and len(x.leaves) == 1:
        return x.leaves[0], True
    if isinstance(x, _core.Exp) and x.exp_type != kComplex:
        return x, False
    raise TypeError(f"{where}: operands must be tensors, transposed tensors (t.T) or "
                    f"expressions, got the expression {describe(x.key)}; assign it to a "
                    f"tensor first")


def _is_expression(x):
    return not isinstance(x, Tensor)


def _scale_value(v, code, where):
    return scale_value(v, code, where, "product")


class _ProductExp(ScaledExp):
    """What DotExp and BatchDotExp share: operands, flags, and a scale that folds."""

    __slots__ = ("lhs", "rhs", "ltrans", "rtrans")
    _extra = ("lhs", "rhs", "ltrans", "rtrans", "scale")
    _what = "product"

    def __repr__(self):
        lhs, rhs = _name(self.lhs, self.ltrans), _name(self.rhs, self.rtrans)
        scale = "" if self.scale == 1 else f" * {self.scale!r}"
        return f"{type(self).__name__}({lhs}, {rhs}{scale}, shape={self.shape}, dtype={self.code})"


def _init(node, tag, lhs, ltrans, rhs, rtrans, shape, code):
    # an expression operand's structure is part of the node (ir.Product's lsrc, rsrc)
    node.key = ir.Product(tag, code, ltrans, rtrans, len(lhs.shape), len(rhs.shape),
                          lhs.key if _is_expression(lhs) else None,
                          rhs.key if _is_expression(rhs) else None)
    # the dims come from validated tensor shapes: skip Shape's per-dim checks (per-call path)
    node.shape = tuple.__new__(Shape, shape)
    node.code = code
    node.leaves = _leaves_of(lhs) + _leaves_of(rhs)
    node.scale = scale = 1 if code in _INT_CODES else 1.0
    node.scalars = (scale,)
    node.exp_type = kComplex
    node.lhs, node.rhs, node.ltrans, node.rtrans = lhs, rhs, ltrans, rtrans
    return node


def _leaves_of(x):
    return x.leaves if _is_expression(x) else (x,)


def _code_of(x):
    return x.code if _is_expression(x) else _CODE_BY_FLAG[x.type_flag]


def _common(a, b, where):
    ca, cb = _code_of(a), _code_of(b)
    if ca != cb:
        raise DTypeError(f"{where}: operands have different dtypes {np.dtype(_NP_BY_CODE[ca]).name} and "
                         f"{np.dtype(_NP_BY_CODE[cb]).name}; use ms.tcast to convert one of them")
    check_devices(where, None, _core.leaf_devices(_leaves_of(a) + _leaves_of(b)),
                  gpu_ok=True)   # (evaluated: _eval)
    return ca


class DotExp(_ProductExp):
    """``dot(lhs, rhs)``: a lazy matrix product (mshadow's DotExp, kComplex).

    ``ltrans``/``rtrans`` are the BLAS transpose flags actually used: a 1-D right operand
    is read as a column (``rtrans`` set), a 1-D left operand as a row, ``u.T`` as a column.
    """

    __slots__ = ()


class BatchDotExp(_ProductExp):
    """``batch_dot(lhs, rhs, transpose_left, transpose_right)``: one gemm per batch (kComplex)."""

    __slots__ = ()


def dot(lhs, rhs):
    """``dot(a, b)``: the matrix product, evaluated by BLAS when assigned.

    Forms: 2-D[.T] x 2-D[.T] (gemm), 1-D x 2-D[.T] and 2-D[.T] x 1-D (gemv), 1-D x 1-D
    (inner product, shape (1,)), ``u.T`` x 1-D (outer product). Scale with ``* s``/``-``.
    """
    a, ta = _operand(lhs, "dot")
    b, tb = _operand(rhs, "dot")
    code = _common(a, b, "dot")
    na, nb = len(a.shape), len(b.shape)
    if (_is_expression(a) or _is_expression(b)) and not na == nb == 2:
        x = a if _is_expression(a) else b
        raise TypeError(f"dot: an expression operand ({describe(x.key)}) takes part in a 2-D "
                        f"product only, got {_name(a, ta)} x {_name(b, tb)}; assign it to a "
                        f"tensor first")
    if na > 2 or nb > 2:
        raise ShapeError(f"dot: operands must be 1-D or 2-D, got {_name(a, ta)} and "
                         f"{_name(b, tb)}; use batch_dot for 3-D batches")
    if na == 2 and nb == 2:
        m, k = (a.shape[1], a.shape[0]) if ta else (a.shape[0], a.shape[1])
        k2, n = (b.shape[1], b.shape[0]) if tb else (b.shape[0], b.shape[1])
        if k != k2:
            raise ShapeError(f"dot-gemm: matrix shape mismatch: {_name(a, ta)} x {_name(b, tb)} "
                             f"(inner sizes {k} and {k2})")
        return _init(DotExp.__new__(DotExp), "dot", a, ta, b, tb, (m, n), code)
    if na == 1 and nb == 2 and not ta:
        k = a.shape[0]
        k2, n = (b.shape[1], b.shape[0]) if tb else (b.shape[0], b.shape[1])
        if k != k2:
            raise ShapeError(f"dot-gemv: matrix shape mismatch: {_name(a, ta)} x {_name(b, tb)}")
        return _init(DotExp.__new__(DotExp), "dot", a, False, b, tb, (n,), code)
    if na == 2 and nb == 1 and not tb:
        m, k = (a.shape[1], a.shape[0]) if ta else (a.shape[0], a.shape[1])
        if k != b.shape[0]:
            raise ShapeError(f"dot-gemv: matrix shape mismatch: {_name(a, ta)} x {_name(b, tb)}")
        # the vector is a (1, k) row in memory: read it transposed, as a column
        return _init(DotExp.__new__(DotExp), "dot", a, ta, b, True, (m,), code)
    if na == 1 and nb == 1 and not ta and not tb:
        if a.shape[0] != b.shape[0]:
            raise ShapeError(f"VectorDot: Shape mismatch: {_name(a, ta)} x {_name(b, tb)}")
        return _init(DotExp.__new__(DotExp), "dot", a, False, b, True, (1,), code)
    if na == 1 and nb == 1 and ta and not tb:
        # outer product: (m, 1) x (1, n), a gemm with k = 1
        return _init(DotExp.__new__(DotExp), "dot", a, True, b, False,
                     (a.shape[0], b.shape[0]), code)
    raise TypeError(f"dot: unsupported operand form {_name(a, ta)} x {_name(b, tb)} (supported: "
                    f"2-D[.T] x 2-D[.T], 1-D x 2-D[.T], 2-D[.T] x 1-D, 1-D x 1-D, 1-D.T x 1-D)")


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
    return _init(BatchDotExp.__new__(BatchDotExp), "batch_dot", a, ta, b, tb, (nbatch, m, n), code)


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
    node = _init(DotExp.__new__(DotExp), "dot", a, exp.ltrans, b, exp.rtrans, exp.shape, code)
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
    exp = _init(BatchDotExp.__new__(BatchDotExp), "batch_dot", a, ta, b, tb, (nbatch, m, n), code)
    _check_dst(d, exp, "BatchGEMM")
    alpha = _scale_value(alpha, code, "BatchGEMM alpha")
    beta = _scale_value(beta, code, "BatchGEMM beta")
    if d.device is not _core.cpu:            # cuBLAS (cuda/executor.py): alpha as the scale
        from .cuda import executor
        exp.scale = alpha
        return executor.assign_product(d, exp, (1, beta))
    _blas().batch_gemm(d, a, ta, b, tb, alpha, beta, _core.get_num_threads())


_core.install_layer(dot=dot)
