"""Extensions whose elements come from computed addresses (pad.h, take.h, choose.h, fill.h,
spatial_upsampling_nearest.h, one_hot.h, range.h, concat.h, mask.h, take_grad.h).

Each builds a GatherLeaf: its sources and named integer parameters for a reader of
mshadow/readers.py, whose generated kernel fills a block of a row at a time. Index tensors
are checked before anything is stored: an index out of range is an IndexError (mshadow
reads out of bounds), never a read outside the source. concat of two tensors is also an
assignment target, as in mshadow (``concat(a, b, 1)[:] = value`` splits value into a, b).
"""
import math
import numbers
import struct

import numpy as np

from .. import _core
from ..errors import DTypeError, IntegerArgumentError, ShapeError
from ..expr import _CODE_BY_FLAG, _NP_BY_CODE, _is_scalar, tcast
from ..shape import Shape, int_arg
from ..dtypes import as_dtype, type_flag
from .build import GatherExp, _code, gather
from .targets import Target, check_writable, checked_value, evaluate, whole_box, write_box
from .views import ViewExp, _source as _view_operand, _strided, _tensor, broadcast, \
    composes, slice_axis

Tensor = _core.Tensor


def _rows_view(src):
    """A tensor, view or transposed tensor/view ``src`` as a 2-D ViewLeaf (its rows: every
    leading axis, its columns: the last), read in place through its strides; None when the
    leading axes do not merge into one row stride (a flip of a leading axis, ...)."""
    if isinstance(src, Tensor):         # a tensor is read as it is
        return None
    d = _strided(src)
    if d is None or d[4] is not None:
        return None
    base, off, shape, st, _ = d
    if len(shape) < 2:                  # 1-D sources stay
        return None
    lead = [(n, s) for n, s in zip(shape[:-1], st[:-1]) if n != 1]
    for (n, s), (n2, s2) in zip(lead, lead[1:]):
        if s != n2 * s2:
            return None
    rows = math.prod(shape[:-1])
    return _core.strided_view(base, (rows, shape[-1]), off, (lead[-1][1] if lead else 0, st[-1]))


def remap_leaves(src, build):
    """``build(operand)``, a reader that reads one source element per output element at
    remapped coordinates (take, mat_choose_row_element, unpack_patch2col), over any source.

    An element-wise expression takes the remap on each of its leaves, as views do
    (``take(i, f(a, b))`` reads ``f(take(i, a), take(i, b))``): evaluated per element in
    the same pass, no temporary. A leaf that is a view is read in place through its strides;
    a gather or window leaf is evaluated into a temporary (views._tensor)."""
    def leaf(x):
        if isinstance(x, _core.TransposeExp) and _strided(x) is None and \
                len(x.shape) == 2 and composes(x.src):
            # .T of a 2-D element-wise tree is the tree of its leaves' .T
            return remap_leaves(_elementwise(x.src, lambda t: t.T), build)
        return build(x)
    return _elementwise(src, leaf)


def _elementwise(src, fn):
    """``src`` with ``fn`` applied to each leaf of its element-wise tree (operators, F,
    tcast); scalars stay."""
    if isinstance(src, _core.MapExp):
        return _core.make_map(src.op, tuple(a if _is_scalar(a) else _elementwise(a, fn)
                                            for a in src.args))
    if isinstance(src, _core.TypecastExp):
        return tcast(_NP_BY_CODE[src.code], _elementwise(src.src, fn))
    return fn(src)


def _operand(src, where, ndim=None):
    """A source of a reader that reads views (readers.Reader.views): a tensor, a view read
    in place as 2-D rows, or an expression the lowering stages."""
    return _rows_view(src) or _staged(_tensor(src, where, ndim))


def _staged(src):
    """``src`` as a source the lowering stages when it is a view no gather reads in place
    (a view of more than 2 axes whose rows do not merge, a 1-D view, a transposed tensor):
    the lowering reads a View source in place only as the 2-D ViewLeaf _rows_view makes."""
    if isinstance(src, (ViewExp, _core.TransposeExp)):
        return _core.make_map("identity", (src,))
    return src


def pad(src, py, px=None):
    """Zero padding of the last two axes: ``py`` rows above and below, ``px`` columns each side."""
    src = _tensor(src, "pad")
    py = int_arg(py, "pad", "py", lo=0)
    px = py if px is None else int_arg(px, "pad", "px", lo=0)
    if src.ndim < 2:
        raise ShapeError(f"pad needs at least 2 axes, got shape {src.shape}")
    if py < 0 or px < 0:
        raise ShapeError(f"pad: padding must be non-negative, got ({py}, {px})")
    H, W = src.shape[-2], src.shape[-1]
    shape = Shape(tuple(src.shape[:-2]) + (H + 2 * py, W + 2 * px))
    e = gather("pad", [src], shape, _code(src), H=H, W=W, py=py, px=px, oH=H + 2 * py,
               cls=PadExp)
    e.padded = (src, py, px)
    return e


class PadExp(GatherExp):
    """``pad(src, py, px)``. It keeps what it pads: a reader that zero-fills outside its
    source anyway (im2col) reads ``src`` itself with the padding folded into its indices,
    with no stage for the padded image."""

    __slots__ = ("padded",)   # (src, py, px)


def take(index, src):
    """``take(index, src)``: rows of the 2-D ``src`` picked by the 1-D ``index``. An
    element-wise ``src`` is read per element (remap_leaves)."""
    src = _view_operand(src, "take", 2)
    index = _view_operand(index, "take", 1)
    K, shape = src.shape[0], Shape(index.shape[0], src.shape[1])
    return _remap_by_index(index, src, "take", lambda i, s: _take(i, s, K, shape))


def _remap_by_index(index, src, where, build):
    """``build(index, operand)`` of a remap read through ``index``, over any ``src``
    (remap_leaves). An index expression is evaluated once, into a temporary that one
    gather reads (checked when it runs), so the source is then read through that one
    gather too."""
    if not isinstance(index, Tensor):
        return build(_staged(_tensor(index, where, 1)), src)
    return remap_leaves(src, lambda s: build(index, s))


def _take(index, src, K, shape):
    src = _operand(src, "take", 2)
    return gather("take", [src, index], shape, _code(src), index=(1, K), K=K, N=shape[0])


def mat_choose_row_element(src, index):
    """``out[i] = src[i][index[i]]`` (a 1-D result). An element-wise ``src`` is read per
    element (remap_leaves)."""
    src = _view_operand(src, "mat_choose_row_element", 2)
    index = _view_operand(index, "mat_choose_row_element", 1)
    if index.shape[0] != src.shape[0]:
        raise ShapeError(f"mat_choose_row_element: index {index.shape} must have one entry per "
                         f"row of {src.shape}")
    cols = src.shape[1]
    return _remap_by_index(index, src, "mat_choose_row_element",
                           lambda i, s: _choose_row(i, s, cols))


def _choose_row(index, src, cols):
    src = _operand(src, "mat_choose_row_element", 2)
    return gather("choose_row", [src, index], Shape(src.shape[0]), _code(src),
                  index=(1, cols), cols=cols)


def mat_fill_row_element(src, val, index):
    """A copy of ``src`` with ``src[i][index[i]] = val[i]``."""
    src = _tensor(src, "mat_fill_row_element", 2)
    val = _tensor(val, "mat_fill_row_element", 1)
    index = _staged(_tensor(index, "mat_fill_row_element", 1))
    if not index.shape[0] == val.shape[0] == src.shape[0]:
        raise ShapeError(f"mat_fill_row_element: src {src.shape}, val {val.shape} and index "
                         f"{index.shape} must agree on the number of rows")
    if val.dtype != src.dtype:
        raise DTypeError(f"mat_fill_row_element: val has dtype {val.dtype}, src {src.dtype}")
    return gather("fill_row", [src, index, val], src.shape, _code(src),
                  index=(1, src.shape[1]), cols=src.shape[1])


def upsampling_nearest(src, scale):
    """Nearest-neighbour upsampling of the last two axes by an integer ``scale``."""
    src = _tensor(src, "upsampling_nearest")
    scale = int_arg(scale, "upsampling_nearest", "scale")
    if src.ndim < 2 or scale < 1:
        raise ShapeError(f"upsampling_nearest needs >= 2 axes and scale >= 1, got {src.shape}, "
                         f"{scale}")
    H, W = src.shape[-2], src.shape[-1]
    shape = Shape(tuple(src.shape[:-2]) + (H * scale, W * scale))
    return gather("upsample", [src], shape, _code(src), H=H, scale=scale, oH=H * scale)


def one_hot_encode(index, num_choices, dtype=None):
    """An (n, num_choices) matrix of 0/1 with a 1 at ``index[i]`` (mshadow fixes float32)."""
    index = _staged(_tensor(index, "one_hot_encode", 1))
    dt = as_dtype("float32" if dtype is None else dtype)
    code = _CODE_BY_FLAG[type_flag(dt)]
    return gather("one_hot", [index], Shape(index.shape[0], num_choices), code,
                  index=(0, num_choices), num_choices=num_choices)


def range(start, stop, step=1, repeat=1, dtype=None):
    """``start + (i / repeat) * step`` for i in [0, length): mshadow's range<DType>."""
    dt = as_dtype("float32" if dtype is None else dtype)
    for what, v in (("start", start), ("stop", stop), ("step", step)):
        if not isinstance(v, numbers.Real):
            raise IntegerArgumentError(f"range: {what} must be a real number, got {v!r} "
                                       f"({type(v).__name__})")
        if not math.isfinite(v):
            raise ShapeError(f"range({start}, {stop}, {step}): {what} = {v} is not finite, so "
                             f"the length (stop - start) / step is not a number of elements; "
                             f"write a finite {what}, e.g. ms.range(0, n)")
    repeat = int_arg(repeat, "range", "repeat")
    if step == 0:
        raise ShapeError("RangeExp does not support step=0, received 0")
    if repeat <= 0:
        raise ShapeError(f"RangeExp only supports repeat > 0, received {repeat}")
    if step > 0 and not start < stop:
        raise ShapeError(f"RangeExp does not support (start, stop, step) = ({start}, {stop}, "
                         f"{step}): start must be < stop for a positive step")
    if step < 0 and not start > stop:
        raise ShapeError(f"RangeExp does not support (start, stop, step) = ({start}, {stop}, "
                         f"{step}): start must be > stop for a negative step")
    # mshadow's float formula; for integers the count is the same but exact (mshadow's integer
    # formula is wrong for negative steps, quirk 10)
    n = repeat * int(math.ceil((stop - start) / step))
    if dt.kind in "iu":   # every value must be one of the dtype's (no silent wrap)
        info = np.iinfo(dt)
        last = start + (n // repeat - 1) * step
        for what, v in (("start", start), ("last value", last)):
            if not info.min <= v <= info.max:
                raise ShapeError(f"range({start}, {stop}, {step}, dtype={dt.name}): the {what} "
                                 f"{v} does not fit {dt.name} [{info.min}, {info.max}]; write "
                                 f"a smaller start, stop or step"
                                 + ("" if dt == np.int64 else ", or dtype=ms.int64"))
    code = _CODE_BY_FLAG[type_flag(dt)]
    bits = [struct.unpack("<q", struct.pack("<d", float(v)))[0] for v in (start, step)]
    return gather("range", [], Shape(n), code, repeat=repeat, start_bits=bits[0],
                  step_bits=bits[1])


class ConcatExp(GatherExp):
    """``concat<dim>(a, b)``; of two lvalues (tensors, lvalue views, concats of those) it is
    an assignment target, as in mshadow: ``concat(a, b, dim)[:] = value`` stores the first
    ``a.shape[dim]`` of ``value`` along ``dim`` into ``a`` and the rest into ``b``
    (extension/targets.py: a box of the concat is split between its parts)."""

    __slots__ = ("parts", "dim")

    def _assignable(self):
        return self.parts is not None

    def _save(self, value, saver):
        self._save_box(value, saver, whole_box(self.shape))

    def _save_box(self, value, saver, box):
        """``value`` (of the box's shape) into ``box`` of this concat, with a tensor
        destination's checks, every one before the first store."""
        bases = self._bases()
        value, node, leaves, _ = checked_value(value, bases[0], tuple(n for _, _, n in box))
        for t in bases:
            check_writable(t)
        self._check_parts()
        # each part reads the value through slice_axis: a value that does not compose into
        # views (a gather, dot, ...) or that reads a part (written before another) is
        # evaluated first
        if not _is_scalar(value) and (node is None or not composes(value) or any(
                _core.reads_tensor(leaves, t) for t in bases)):
            value = evaluate(value, tuple(n for _, _, n in box), bases[0].dtype,
                             bases[0].device)
        self._write(value, saver, box)

    def _write(self, value, saver, box):
        """``value`` into ``box``, checked already: the part of the box in ``a`` and the
        part in ``b`` along the concat's axis, each with its share of the value."""
        d = self.dim
        na = self.parts[0].shape[d]
        start, step, n = box[d]
        if step > 0:    # box elements [0, k) lie in a, the rest in b
            k = max(0, min(n, na - start))
            shares = ((0, (start, 1, k)), (1, (start + k - na, 1, n - k)))
        else:           # box elements [0, k) lie in b (reversed), the rest in a
            k = max(0, min(n, start - na + 1))
            shares = ((1, (start - na, -1, k)), (0, (start - k, -1, n - k)))
        lo = 0
        for part, axis_box in shares:     # in the box's order along the axis
            m = axis_box[2]
            if m > 0:
                sub = value if _is_scalar(value) else slice_axis(value, d, lo, lo + m)
                sub_box = box[:d] + (axis_box,) + box[d + 1:]
                p = self.parts[part]
                if isinstance(p, Tensor):
                    write_box(p, 0, _core.tensor_strides(p), sub, saver, sub_box)
                else:
                    p._write(sub, saver, sub_box)
            lo += m

    def _bases(self):
        return [t for p in self.parts for t in ([p] if isinstance(p, Tensor) else p._bases())]

    def _check_parts(self):
        """Tensor parts unchanged since the expression was built (views check their own)."""
        for p in self.parts:
            if isinstance(p, ConcatExp):
                p._check_parts()
        self.args.check_sources(tuple(p if isinstance(p, Tensor) else None for p in self.parts))


def _concat_error(a, b, dim):
    """Why a and b cannot be joined along dim, and what to write instead."""
    nd = len(a.shape)
    dim = int_arg(dim, "concat", "dim")
    if len(b.shape) != nd:
        raise ShapeError(f"ConcatExp: shape mismatch: {a.shape} and {b.shape}: a has {nd} "
                         f"axes and b has {len(b.shape)}; both operands need the same number "
                         f"of axes (ms.reshape one of them)")
    if not 0 <= dim < nd:
        raise ShapeError(f"ConcatExp: axis {dim} is out of range for {nd}-D operands; write "
                         f"an axis in 0..{nd - 1}")
    if a.dtype != b.dtype:
        raise DTypeError(f"ConcatExp: the operands' dtypes differ: {a.dtype} and {b.dtype} "
                         f"(shapes {a.shape} and {b.shape}); cast one to the other's, e.g. "
                         f"ms.concat(a, ms.tcast(ms.{a.dtype}, b), {dim})")
    diff = [k for k in builtins_range(nd) if k != dim and a.shape[k] != b.shape[k]]
    msg = (f"ConcatExp: shape mismatch: {a.shape} and {b.shape} along axis {dim}: every "
           f"axis but {dim} must agree, and axis {diff[0]} differs "
           f"({a.shape[diff[0]]} vs {b.shape[diff[0]]})")
    if len(diff) == 1 and a.shape[dim] == b.shape[dim]:
        msg += f"; to join them along axis {diff[0]}, write ms.concat(a, b, {diff[0]})"
    raise ShapeError(msg)


def concat(a, b, dim):
    """``concat<dim>(a, b)``: a and b joined along ``dim`` (any rank; mshadow only 4-D).
    Of two tensors, an assignment target (``concat(a, b, dim)[:] = value``)."""
    a = _view_operand(a, "concat")
    b = _view_operand(b, "concat")
    dim = int_arg(dim, "concat", "dim")
    parts = (a, b) if all(isinstance(p, Tensor) or (isinstance(p, Target) and p._assignable())
                          for p in (a, b)) else None
    nd = len(a.shape)
    if len(b.shape) != nd or not 0 <= dim < nd or a.dtype != b.dtype or any(
            a.shape[k] != b.shape[k] for k in builtins_range(nd) if k != dim):
        _concat_error(a, b, dim)
    shape = list(a.shape)
    shape[dim] += b.shape[dim]
    if dim == nd - 1:
        params = dict(split=a.shape[-1], along_columns=1, ra=0, rb=0)
    else:   # rows of a and b alternate in groups of prod(shape[dim:-1]) rows
        params = dict(split=0, along_columns=0, ra=math.prod(a.shape[dim:nd - 1]),
                      rb=math.prod(b.shape[dim:nd - 1]))
    # views are read in place; an expression part band by band (readers.py src_rows)
    a, b = _operand(a, "concat"), _operand(b, "concat")
    node = gather("concat", [a, b], shape, _code(a), cls=ConcatExp, **params)
    node.parts, node.dim = parts, dim
    return node


def take_grad(index, src, input_dim):
    """``take_grad(index, src, input_dim)``: the gradient of ``take``, an
    (input_dim, src.shape[1]) matrix whose row k is the sum, in increasing i, of the rows
    ``src[i]`` with ``index[i] == k``. An index outside [0, input_dim) is an IndexError
    (mshadow drops it silently)."""
    index = _staged(_tensor(index, "take_grad", 1))
    src = _operand(_view_operand(src, "take_grad", 2), "take_grad", 2)   # a view in place
    input_dim = int_arg(input_dim, "take_grad", "input_dim")
    if input_dim < 0:
        raise ShapeError(f"take_grad: input_dim must be >= 0, got {input_dim}")
    if index.shape[0] != src.shape[0]:
        raise ShapeError(f"take_grad: index {index.shape} must have one entry per row of src "
                         f"{src.shape}")
    return gather("take_grad", [src, index], Shape(input_dim, src.shape[1]), _code(src),
                  index=(1, input_dim), N=src.shape[0], K=input_dim)


def mask(index, src):
    """``out[y][x] = src[y][x] * index[y]``: a strided view, no gather needed (so both may
    be expressions, read in the same pass)."""
    index = _view_operand(index, "mask", 1)
    src = _view_operand(src, "mask", 2)
    return src * broadcast(index, src.shape, 0)


import builtins as _builtins  # noqa: E402  (this module defines its own range)
builtins_range = _builtins.range
