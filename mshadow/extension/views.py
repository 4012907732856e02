"""Extensions that are strided views of a tensor (broadcast.h, broadcast_with_axis.h,
mirror.h, flip.h, swapaxis.h, transpose.h, crop.h, reshape.h, slice.h, slice_ex.h).

Each is an affine index map: from the source's shape and byte strides it gives the view's
shape, byte offset and strides (as numpy's as_strided). Maps compose, so a source may be a
tensor, another view, a transposed tensor, or any element-wise expression of those: a view
of an expression is the expression of the views of its leaves (``flip(a + b)`` reads as
``flip(a) + flip(b)``). The plan reads every view in place, so
``dst[:] = ms.broadcast(bias, x.shape, 1) * ms.flip(ms.F(relu, x), 0)`` is one fused pass
and nothing is copied or evaluated twice. A slice, box slice, flip or crop of a tensor is
also an assignment target, as in mshadow (``flip(t, 0)[:] = e``; extension/targets.py).
"""

import numpy as np

from .. import _core, ir
from ..device import cpu
from ..errors import ShapeError
from ..expr import _CODE_BY_FLAG, _NP_BY_CODE, _is_scalar, describe, kChainer, kComplex, \
    new_node, tcast
from ..shape import Shape, as_shape, int_arg
from ..expr import install_remap_transpose
from .build import gather
from .targets import Target, assign_view, box_of_view, compose_boxes, write_box

Tensor = _core.Tensor


class ViewExp(Target, _core.Exp):
    """An extension expression read as a strided view of ``src``; an assignment target
    (``v[:] = value``, extension/targets.py) when it is ``lvalue``: a slice, box slice,
    flip or crop of a tensor, of such a view, or of a concat that is a target (the view
    of its values is then a box of it)."""

    __slots__ = ("src", "view", "lvalue", "producer")

    def _assignable(self):
        return self.lvalue

    def _box(self):
        """The box of the producer (an assignable concat) this view selects."""
        v = self.view
        return box_of_view(tuple(self.src.shape), v.offset, v.strides, self.src.itemsize,
                           tuple(v.shape))

    def _save(self, value, saver):
        if self.producer is not None:
            self.producer._save_box(value, saver, self._box())
        else:
            assign_view(self.view, value, saver)

    def _write(self, value, saver, box):
        """``value`` into ``box`` (in this view's coordinates), checked already."""
        if self.producer is not None:
            self.producer._write(value, saver, compose_boxes(self._box(), box))
        else:
            write_box(self.src, self.view.offset, self.view.strides, value, saver, box)

    def _bases(self):
        return self.producer._bases() if self.producer is not None else [self.src]


def _lvalue(node, src):
    """Mark ``node`` (a view of ``src``) assignable when ``src`` is a tensor or such a view,
    or an assignable concat that the view selects a box of."""
    if isinstance(node, ViewExp):
        node.lvalue = isinstance(src, Tensor) or (isinstance(src, ViewExp) and src.lvalue) or (
            isinstance(src, Target) and src._assignable() and node.producer is not None
            and node._box() is not None)
    return node


def _source(src, where, ndim=None):
    """``src`` as an extension's operand: a tensor (numpy arrays are wrapped) or an expression."""
    if isinstance(src, np.ndarray):
        src = _core.from_numpy(src)
    src = _core.chained(src)       # a reduction nests as mshadow's chainer
    if not isinstance(src, (Tensor, _core.Exp)):
        raise TypeError(f"{where}: the source must be a tensor or an expression, got "
                        f"{type(src).__name__}")
    if isinstance(src, _core.Exp) and src.exp_type == kComplex:
        raise TypeError(f"{where}: a {describe(src.key)} expression (kComplex) cannot be an "
                        f"extension's source; assign it to a tensor first")
    if ndim is not None and len(src.shape) != ndim:
        raise ShapeError(f"{where}: the source must be {ndim}-D, got shape {src.shape}")
    return src


def _tensor(src, where, ndim=None):
    """The source of a gather or window extension (pad, take, pool, im2col, ...): a tensor,
    read in place, or an expression, which the gather's IR node holds and the lowering
    evaluates in a stage when the assignment runs (values are those at assignment time):
    band by band into scratch of the run where the reader has a bounds form, else whole
    (docs/architecture.md, "Stages"). Nothing is allocated here."""
    return _source(src, where, ndim)


def _strided(src):
    """(tensor, byte offset, shape, byte strides, producer or None) when ``src`` reads one
    tensor's memory through an affine map (a tensor, a view, a transposed tensor or view),
    else None. With a producer (an expression a view reads the values of), the tensor is
    a handle with no memory, laid out densely: the lowering stages the producer."""
    if isinstance(src, Tensor):
        return src, 0, tuple(src.shape), _core.tensor_strides(src), None
    if isinstance(src, ViewExp):
        v = src.view
        return src.src, v.offset, tuple(v.shape), v.strides, src.producer
    if isinstance(src, _core.TransposeExp):
        inner = _strided(src.src)
        if inner is not None:
            base, off, shape, st, producer = inner
            if len(shape) == 1:          # a 1-D tensor's .T is the (n, 1) column
                shape, st = (1,) + shape, (0,) + tuple(st)
            return base, off, (shape[1], shape[0]), (st[1], st[0]), producer
    return None


def _compose(src, where, index_map):
    """``src`` read through ``index_map(shape, strides) -> (shape, offset, strides)``.

    A strided source composes into one view of its tensor; an element-wise expression
    takes the map on each of its leaves, recursively (scalars stay scalars)."""
    d = _strided(src)
    if d is not None:
        base, off, shape, st, producer = d
        nshape, noff, nst = index_map(Shape(shape), tuple(st))
        return view(base, nshape, off + noff, nst, producer)
    if isinstance(src, _core.MapExp):
        return _core.make_map(src.op, tuple(a if _is_scalar(a) else _compose(a, where, index_map)
                                            for a in src.args))
    if isinstance(src, _core.TypecastExp):
        return tcast(_NP_BY_CODE[src.code], _compose(src.src, where, index_map))
    if isinstance(src, _core.TransposeExp):   # of an expression: transpose, then the map
        return _compose(src.src, where,
                        lambda shape, st: index_map(Shape(shape[1], shape[0]), (st[1], st[0]))
                        if len(shape) == 2 else _no_transpose(shape))
    # a gather, window or implicit_dot: no index map to compose with, so the view reads
    # the values the lowering stages, laid out as a dense tensor (a handle, no memory here)
    src = _source(src, where)
    return _compose_producer(producer_handle(src), src, index_map)


def producer_handle(src):
    """A dense handle (no memory) laid out as ``src``'s values, which a lowering stages, on
    the device they will be on: the operands' (a device check of the statement reads the
    handle too, and a cpu handle over gpu operands read as mixed devices)."""
    on = [d for d in _core.leaf_devices(src.leaves if isinstance(src, _core.Exp) else (src,))
          if d is not cpu]
    return Tensor(src.shape, dtype=src.dtype, device=on[0] if on else cpu)


def _compose_producer(handle, src, index_map):
    nshape, noff, nst = index_map(Shape(src.shape), _core.tensor_strides(handle))
    return view(handle, nshape, noff, nst, src)


def composes(src):
    """Whether ``_compose`` reads ``src`` in place: tensors, views with no deferred
    temporary, and element-wise expressions, casts and transposes of those."""
    if isinstance(src, Tensor) or _is_scalar(src):
        return True
    if isinstance(src, ViewExp):
        return src.producer is None
    if isinstance(src, _core.MapExp):
        return all(composes(a) for a in src.args)
    if isinstance(src, (_core.TypecastExp, _core.TransposeExp)):
        return composes(src.src)
    return False


def _no_transpose(shape):
    raise ShapeError(f"transpose needs a 2-D expression, got shape {shape}")


def view(src, shape, offset, strides, producer=None):
    """The expression reading ``src`` as ``shape`` with byte ``strides`` from byte ``offset``;
    with ``producer``, ``src`` is a handle laid out densely for that expression's values."""
    leaf = _core.strided_view(src, shape, offset, strides, producer is not None)
    code = _CODE_BY_FLAG[src.type_flag]
    step = _core.view_step_kind(leaf.strides[-1], src.itemsize)
    if producer is None:
        node = new_node(ViewExp, ir.View(code, step), leaf.shape, code, (leaf,), (), kChainer)
    else:
        node = new_node(ViewExp, ir.View(code, step, producer.key), leaf.shape, code,
                        (leaf,) + producer.leaves, producer.scalars, kChainer)
    node.src, node.view, node.lvalue, node.producer = src, leaf, False, producer
    return node


def _axis(axis, nd, where):
    axis = int_arg(axis, where, "axis")
    if not -nd <= axis < nd:
        raise ShapeError(f"{where}: axis {axis} out of range for {nd} dimensions")
    return axis % nd


# ---- broadcast.h ------------------------------------------------------------------------
def broadcast(src, shape, dimcast):
    """``broadcast<dimcast>(src, shape)``: the 1-D ``src`` repeated along every other axis."""
    src = _source(src, "broadcast", 1)
    shape = as_shape(shape)
    if not 0 <= dimcast < len(shape):
        raise ShapeError(f"broadcast: dimcast {dimcast} out of range for a {len(shape)}-D "
                         f"shape {shape}")
    if src.shape[0] != shape[dimcast]:
        raise ShapeError(f"broadcast, shape mismatch: source {src.shape} cannot fill axis "
                         f"{dimcast} of {shape}")

    def index_map(sshape, st):
        strides = [0] * len(shape)
        strides[dimcast] = st[0]
        return shape, 0, strides
    return _compose(src, "broadcast", index_map)


def broadcast_scalar(src, shape):
    """Fill ``shape`` with the single element of a length-1 tensor."""
    src = _source(src, "broadcast_scalar", 1)
    if src.shape[0] != 1:
        raise ShapeError(f"broadcast_scalar, source need to be scalar expression: got shape "
                         f"{src.shape}")
    shape = as_shape(shape)
    return _compose(src, "broadcast_scalar", lambda sshape, st: (shape, 0, [0] * len(shape)))


def repmat(src, nrow):
    """``nrow`` copies of the 1-D ``src`` as rows: ``broadcast(src, (nrow, len(src)), 1)``."""
    src = _source(src, "repmat", 1)
    return broadcast(src, Shape(nrow, src.shape[0]), 1)


# ---- broadcast_with_axis.h --------------------------------------------------------------
def broadcast_with_axis(src, axis, size):
    """Insert a new axis of ``size`` after ``axis`` (-1: a new leading axis)."""
    src = _source(src, "broadcast_with_axis")
    nd = len(src.shape)
    if not -1 <= axis < nd:
        raise ShapeError(f"broadcast_with_axis: axis {axis} out of range [-1, {nd - 1}]")

    def index_map(sshape, st):
        shape, st = list(sshape), list(st)
        shape.insert(axis + 1, size)
        st.insert(axis + 1, 0)
        return shape, 0, st
    return _compose(src, "broadcast_with_axis", index_map)


def broadcast_keepdim(src, axis, size):
    """Expand the size-1 ``axis`` of ``src`` to ``size``."""
    src = _source(src, "broadcast_keepdim")
    axis = _axis(axis, len(src.shape), "broadcast_keepdim")
    if src.shape[axis] != 1:
        raise ShapeError(f"broadcast_keepdim: axis {axis} of {src.shape} must have size 1")

    def index_map(sshape, st):
        shape, st = list(sshape), list(st)
        shape[axis], st[axis] = size, 0
        return shape, 0, st
    return _compose(src, "broadcast_keepdim", index_map)


def broadcast_to(src, shape):
    """numpy-style broadcast to a shape of the same rank (mismatching axes must be 1)."""
    src = _source(src, "broadcast_to")
    shape = as_shape(shape)
    if len(shape) != len(src.shape) or any(s != t and s != 1 for s, t in zip(src.shape, shape)):
        raise ShapeError(f"broadcasting axis must have size 1, received shape={src.shape} "
                         f"target_shape={shape}")
    return _compose(src, "broadcast_to", lambda sshape, st: (
        shape, 0, [0 if s != t else d for s, t, d in zip(sshape, shape, st)]))


# ---- mirror.h, flip.h -------------------------------------------------------------------
def flip(src, dim):
    """``src`` reversed along ``dim``."""
    src = _source(src, "flip")
    dim = _axis(dim, len(src.shape), "flip")

    def index_map(shape, st):
        st = list(st)
        offset = (shape[dim] - 1) * st[dim] if shape[dim] else 0
        st[dim] = -st[dim]
        return shape, offset, st
    return _lvalue(_compose(src, "flip", index_map), src)


def mirror(src):
    """``src`` with its last axis reversed."""
    return flip(_source(src, "mirror"), -1)


# ---- swapaxis.h, transpose.h ------------------------------------------------------------
def transpose_axes(src, axes):
    """numpy's transpose: ``out.shape[i] = src.shape[axes[i]]``."""
    src = _source(src, "transpose")
    axes = tuple(int(a) for a in axes)
    if sorted(axes) != list(range(len(src.shape))):
        raise ShapeError(f"Invalid axes input! axes={axes} for a {len(src.shape)}-D tensor")
    return _compose(src, "transpose", lambda shape, st: (
        [shape[a] for a in axes], 0, [st[a] for a in axes]))


def swapaxis(src, a1, a2):
    """``swapaxis<a1, a2>(src)``: axes a1 and a2 exchanged."""
    src = _source(src, "swapaxis")
    nd = len(src.shape)
    a1, a2 = _axis(a1, nd, "swapaxis"), _axis(a2, nd, "swapaxis")
    axes = list(range(nd))
    axes[a1], axes[a2] = axes[a2], axes[a1]
    return transpose_axes(src, axes)


# ---- crop.h, slice.h --------------------------------------------------------------------
def crop(src, oshape, start_h=None, start_w=None):
    """The (h, w) window of the last two axes at (start_h, start_w), centred by default."""
    src = _source(src, "crop")
    if len(src.shape) < 2:
        raise ShapeError(f"crop needs at least 2 axes, got shape {src.shape}")
    h, w = as_shape(oshape)
    H, W = src.shape[-2], src.shape[-1]
    sh = (H - h) // 2 if start_h is None else int_arg(start_h, "crop", "start_h")
    sw = (W - w) // 2 if start_w is None else int_arg(start_w, "crop", "start_w")
    if not (0 <= sh and sh + h <= H and 0 <= sw and sw + w <= W):
        raise ShapeError(f"crop: window ({h},{w}) at ({sh},{sw}) does not fit in ({H},{W})")
    return _lvalue(_compose(src, "crop", lambda shape, st: (
        list(shape[:-2]) + [h, w], sh * st[-2] + sw * st[-1], st)), src)


def slice_axis(src, axis, begin, end):
    """``slice<sdim>(src, begin, end)``: indices [begin, end) of one axis."""
    src = _source(src, "slice")
    axis = _axis(axis, len(src.shape), "slice")
    begin = int_arg(begin, "slice_axis", "begin")
    end = int_arg(end, "slice_axis", "end")
    if not 0 <= begin <= end <= src.shape[axis]:
        raise ShapeError(f"The slice went out of range: [{begin}, {end}) of axis {axis} with "
                         f"size {src.shape[axis]}")

    def index_map(sshape, st):
        shape = list(sshape)
        shape[axis] = end - begin
        return shape, begin * st[axis], st
    return _lvalue(_compose(src, "slice", index_map), src)


def slice_ex(src, begin, end):
    """mshadow's box ``slice(src, begin, end)`` (slice_ex.h): indices [begin[k], end[k]) of
    every axis k. mshadow checks nothing; here each range must lie in its axis."""
    src = _source(src, "slice_ex")
    nd = len(src.shape)
    begin = tuple(int_arg(b, "slice_ex", f"begin[{k}]") for k, b in enumerate(begin))
    end = tuple(int_arg(e, "slice_ex", f"end[{k}]") for k, e in enumerate(end))
    if len(begin) != nd or len(end) != nd:
        raise ShapeError(f"slice_ex: begin {begin} and end {end} need one entry per axis of "
                         f"the {nd}-D source {src.shape}")
    for k, (b, e, n) in enumerate(zip(begin, end, src.shape)):
        if not 0 <= b <= e <= n:
            raise ShapeError(f"The slice went out of range: [{b}, {e}) of axis {k} with size {n}")

    def index_map(sshape, st):
        return ([e - b for b, e in zip(begin, end)], sum(b * s for b, s in zip(begin, st)), st)
    return _lvalue(_compose(src, "slice_ex", index_map), src)


# ---- reshape.h --------------------------------------------------------------------------
def reshape(src, shape):
    """Row-major reinterpretation as ``shape`` (sizes must match).

    A view where the source's strides allow it (numpy's rule): any contiguous source, and a
    pitched or strided one that keeps the axes whose elements are not evenly spaced. Where
    they do not (the rows of a pitched tensor re-cut), each such tensor is read through the
    readers table's ``reshape`` (element f of the source in row-major order, no copy); an
    element-wise expression takes the reshape on each of its leaves."""
    src = _source(src, "reshape")
    shape = as_shape(shape)
    if shape.size() != Shape(src.shape).size():
        raise ShapeError(f"reshape size must match: {src.shape} ({Shape(src.shape).size()} "
                         f"elements) to {shape} ({shape.size()} elements)")

    def index_map(sshape, st):
        nst = _nocopy_strides(tuple(sshape), tuple(st), tuple(shape))
        if nst is None:
            raise _NeedsGather()
        return shape, 0, nst
    try:
        return _compose(src, "reshape", index_map)
    except _NeedsGather:
        return _reshape_by_reader(src, shape)


class _NeedsGather(Exception):
    """No strides read the source in row-major order as the new shape."""


def _reshape_by_reader(src, shape):
    if isinstance(src, _core.MapExp):
        return _core.make_map(src.op, tuple(a if _is_scalar(a) else reshape(a, shape)
                                            for a in src.args))
    if isinstance(src, _core.TypecastExp):
        return tcast(_NP_BY_CODE[src.code], reshape(src.src, shape))
    src = _tensor(src, "reshape")   # a tensor, or an expression the lowering stages
    code = src.code if isinstance(src, _core.Exp) else _CODE_BY_FLAG[src.type_flag]
    return gather("reshape", [src], shape, code, ocols=shape[-1], scols=src.shape[-1])


def _nocopy_strides(old, ost, new):
    """The strides that read the elements of (old, ost) in row-major order as shape ``new``,
    or None if no strides can (numpy's _attempt_nocopy_reshape)."""
    if 0 in old or 0 in new:
        st, acc = [0] * len(new), 1
        for k in range(len(new) - 1, -1, -1):
            st[k] = acc
            acc *= max(new[k], 1)
        return st
    dims = [(n, s) for n, s in zip(old, ost) if n != 1]
    od, os_ = [n for n, _ in dims], [s for _, s in dims]
    nst = [0] * len(new)
    oi, ni = 0, 0
    while ni < len(new) and oi < len(od):
        np_, op_ = new[ni], od[oi]
        nj, oj = ni + 1, oi + 1
        while np_ != op_:
            if np_ < op_:
                np_ *= new[nj]
                nj += 1
            else:
                op_ *= od[oj]
                oj += 1
        for ok in range(oi, oj - 1):      # the merged old axes must be evenly spaced
            if os_[ok] != od[ok + 1] * os_[ok + 1]:
                return None
        nst[nj - 1] = os_[oj - 1]
        for nk in range(nj - 1, ni, -1):
            nst[nk - 1] = nst[nk] * new[nk]
        ni, oi = nj, oj
    last = nst[ni - 1] if ni else 0
    for nk in range(ni, len(new)):        # trailing size-1 axes
        nst[nk] = last
    return nst


# ---- broadcast_with_axis.h: broadcast_multi_axes; transpose.h: transpose_indices --------
import operator as _operator  # noqa: E402  (appended section: kept beside its users)


def broadcast_multi_axes(src, axes, sizes):
    """Expand the size-1 ``axes`` of ``src`` (increasing; negative ones count from the end)
    to ``sizes``: mshadow's ``broadcast_multi_axes`` (BroadcastWithMultiAxesExp)."""
    src = _source(src, "broadcast_multi_axes")
    nd = len(src.shape)
    axes = [_operator.index(a) for a in axes]
    sizes = [_operator.index(s) for s in sizes]
    if len(axes) != len(sizes):
        raise ShapeError(f"ndim of axes and sizes must be equal: axes={tuple(axes)}, "
                         f"sizes={tuple(sizes)}")
    if len(axes) > nd:
        raise ShapeError(f"Number of broadcasting axes must be smaller than the source ndim, "
                         f"number of axes={len(axes)} dimsrc={nd}")
    for i, a in enumerate(axes):
        if not -nd <= a < nd:
            raise ShapeError(f"broadcast axis (keepdim) out of bound, all axes must be between "
                             f"0 and {nd - 1}, given axes[{i}] = {a}.")
        axes[i] = a % nd
        if src.shape[axes[i]] != 1:
            raise ShapeError(f"Size of the dimension of the broadcasting axis must be 1, "
                             f"src_shape[{axes[i]}]={src.shape[axes[i]]}.")
        if i and not axes[i - 1] < axes[i]:
            raise ShapeError(f"The given axes must be in increasing order, got {tuple(axes)}.")
        if sizes[i] < 0:
            raise ShapeError(f"broadcast_multi_axes: sizes must be >= 0, got {tuple(sizes)}")

    def index_map(sshape, st):
        shape, st = list(sshape), list(st)
        for a, s in zip(axes, sizes):
            shape[a], st[a] = s, 0
        return shape, 0, st
    return _compose(src, "broadcast_multi_axes", index_map)


def _cpp_tuple(values):
    """A sequence printed as mshadow prints a Shape: ``(1,2,3)``, ``(3,)``."""
    return "(" + ",".join(str(v) for v in values) + ("," if len(values) == 1 else "") + ")"


def transpose_indices(src, src_shape, axes):
    """The flat indices into ``transpose_axes(x, axes)`` of the elements at flat indices
    ``src`` of an ``x`` of shape ``src_shape``: mshadow's ``transpose_indices``.

    Not a view: it maps index *values* (each truncated to an integer, as mshadow's
    ``static_cast<index_t>``), so it is the element-wise expression
    ``sum_k (i / S_k % n_k) * D_k`` of ``src`` in 64-bit integers (S_k: the source's row-major
    strides, D_k: the transposed array's), cast back to ``src``'s dtype. It fuses like any
    expression and ``src`` may be any expression. Values outside [0, size) wrap as the
    formula does (the outermost axis modulo its size), as in mshadow.
    """
    src = _source(src, "transpose_indices")
    src_shape = tuple(_operator.index(s) for s in src_shape)
    axes = tuple(_operator.index(a) for a in axes)
    nd = len(src_shape)
    if len(axes) != nd or sorted(axes) != list(range(nd)):
        raise ShapeError(f"Invalid axes input! All elements of axes must be between 0 and {nd}, "
                         f"find axes={_cpp_tuple(axes)}")
    if any(s < 0 for s in src_shape):
        raise ShapeError(f"transpose_indices: src_shape must be non-negative, got {src_shape}")
    if 0 in src_shape and Shape(src.shape).size():
        # mshadow divides by the empty axis (a crash); no index into it exists anyway
        raise ShapeError(f"transpose_indices: src_shape {_cpp_tuple(src_shape)} has no "
                         f"elements, so no index {tuple(src.shape)} into it is valid")
    dst_shape = [src_shape[a] for a in axes]
    dst_stride = [1] * nd
    for i in range(nd - 2, -1, -1):
        dst_stride[i] = dst_stride[i + 1] * dst_shape[i + 1]
    src_in_dst = [0] * nd
    for i, a in enumerate(axes):
        src_in_dst[a] = dst_stride[i]
    code = _CODE_BY_FLAG[src.type_flag] if isinstance(src, Tensor) else src.code
    i64 = _NP_BY_CODE["i64"]
    idx = src if code == "i64" else tcast(i64, src)
    out, inner = None, 1               # inner: the row-major stride of axis k in the source
    for k in range(nd - 1, -1, -1):
        q = idx if inner == 1 else idx / inner
        term = q - (idx / (inner * src_shape[k])) * src_shape[k]     # (i / S_k) % n_k in C
        if src_in_dst[k] != 1:
            term = term * src_in_dst[k]
        out = term if out is None else out + term
        inner *= src_shape[k]
    if out is None:                    # a 0-D source shape: every index maps to 0
        out = idx * 0
    return out if code == "i64" else tcast(_NP_BY_CODE[code], out)


install_remap_transpose(lambda exp: transpose_axes(exp, (1, 0)))
