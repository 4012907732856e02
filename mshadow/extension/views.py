"""Extensions that are strided views of a tensor (broadcast.h, broadcast_with_axis.h,
mirror.h, flip.h, swapaxis.h, transpose.h, crop.h, reshape.h, slice.h).

Each builds a ViewLeaf (a shape, a byte offset and one byte stride per axis, as numpy's
as_strided) and an expression node over it; the plan reads the view in place, so
``dst[:] = x + ms.broadcast(bias, x.shape, 1)`` is one fused pass and nothing is copied.
The source must be a tensor: assign an expression to a tensor first.
"""
from .. import _core
from ..errors import ShapeError
from ..expr import _CODE_BY_FLAG, kChainer, new_node
from ..shape import Shape, as_shape

Tensor = _core.Tensor


class ViewExp(_core.Exp):
    """An extension expression read as a strided view of ``src``."""

    __slots__ = ("src", "view")


def _tensor(src, where, ndim=None):
    if not isinstance(src, Tensor):
        raise TypeError(f"{where}: the source must be a tensor, got {type(src).__name__} "
                        f"(assign the expression to a tensor first)")
    if ndim is not None and src.ndim != ndim:
        raise ShapeError(f"{where}: the source must be {ndim}-D, got shape {src.shape}")
    return src


def view(src, shape, offset, strides):
    """The expression reading ``src`` as ``shape`` with byte ``strides`` from byte ``offset``."""
    leaf = _core.strided_view(src, shape, offset, strides)
    code = _CODE_BY_FLAG[src.type_flag]
    step = _core.view_step_kind(leaf.strides[-1], src.itemsize)
    node = new_node(ViewExp, ("V", code, step), leaf.shape, code, (leaf,), (), kChainer)
    node.src, node.view = src, leaf
    return node


def _axis(axis, nd, where):
    if not -nd <= axis < nd:
        raise ShapeError(f"{where}: axis {axis} out of range for {nd} dimensions")
    return axis % nd


# ---- broadcast.h ------------------------------------------------------------------------
def broadcast(src, shape, dimcast):
    """``broadcast<dimcast>(src, shape)``: the 1-D ``src`` repeated along every other axis."""
    src = _tensor(src, "broadcast", 1)
    shape = as_shape(shape)
    if not 0 <= dimcast < len(shape):
        raise ShapeError(f"broadcast: dimcast {dimcast} out of range for a {len(shape)}-D "
                         f"shape {shape}")
    if src.shape[0] != shape[dimcast]:
        raise ShapeError(f"broadcast, shape mismatch: source {src.shape} cannot fill axis "
                         f"{dimcast} of {shape}")
    strides = [0] * len(shape)
    strides[dimcast] = src.itemsize
    return view(src, shape, 0, strides)


def broadcast_scalar(src, shape):
    """Fill ``shape`` with the single element of a length-1 tensor."""
    src = _tensor(src, "broadcast_scalar", 1)
    if src.shape[0] != 1:
        raise ShapeError(f"broadcast_scalar, source need to be scalar expression: got shape "
                         f"{src.shape}")
    shape = as_shape(shape)
    return view(src, shape, 0, [0] * len(shape))


def repmat(src, nrow):
    """``nrow`` copies of the 1-D ``src`` as rows: ``broadcast(src, (nrow, len(src)), 1)``."""
    src = _tensor(src, "repmat", 1)
    return broadcast(src, Shape(nrow, src.shape[0]), 1)


# ---- broadcast_with_axis.h --------------------------------------------------------------
def broadcast_with_axis(src, axis, size):
    """Insert a new axis of ``size`` after ``axis`` (-1: a new leading axis)."""
    src = _tensor(src, "broadcast_with_axis")
    nd = src.ndim
    if not -1 <= axis < nd:
        raise ShapeError(f"broadcast_with_axis: axis {axis} out of range [-1, {nd - 1}]")
    st = list(_core.tensor_strides(src))
    shape = list(src.shape)
    shape.insert(axis + 1, size)
    st.insert(axis + 1, 0)
    return view(src, shape, 0, st)


def broadcast_keepdim(src, axis, size):
    """Expand the size-1 ``axis`` of ``src`` to ``size``."""
    src = _tensor(src, "broadcast_keepdim")
    axis = _axis(axis, src.ndim, "broadcast_keepdim")
    if src.shape[axis] != 1:
        raise ShapeError(f"broadcast_keepdim: axis {axis} of {src.shape} must have size 1")
    shape = list(src.shape)
    st = list(_core.tensor_strides(src))
    shape[axis], st[axis] = size, 0
    return view(src, shape, 0, st)


def broadcast_to(src, shape):
    """numpy-style broadcast to a shape of the same rank (mismatching axes must be 1)."""
    src = _tensor(src, "broadcast_to")
    shape = as_shape(shape)
    if len(shape) != src.ndim or any(s != t and s != 1 for s, t in zip(src.shape, shape)):
        raise ShapeError(f"broadcasting axis must have size 1, received shape={src.shape} "
                         f"target_shape={shape}")
    st = [0 if s != t else d for s, t, d in zip(src.shape, shape, _core.tensor_strides(src))]
    return view(src, shape, 0, st)


# ---- mirror.h, flip.h -------------------------------------------------------------------
def flip(src, dim):
    """``src`` reversed along ``dim``."""
    src = _tensor(src, "flip")
    dim = _axis(dim, src.ndim, "flip")
    st = list(_core.tensor_strides(src))
    offset = (src.shape[dim] - 1) * st[dim] if src.shape[dim] else 0
    st[dim] = -st[dim]
    return view(src, src.shape, offset, st)


def mirror(src):
    """``src`` with its last axis reversed."""
    return flip(_tensor(src, "mirror"), -1)


# ---- swapaxis.h, transpose.h ------------------------------------------------------------
def transpose_axes(src, axes):
    """numpy's transpose: ``out.shape[i] = src.shape[axes[i]]``."""
    src = _tensor(src, "transpose")
    axes = tuple(int(a) for a in axes)
    if sorted(axes) != list(range(src.ndim)):
        raise ShapeError(f"Invalid axes input! axes={axes} for a {src.ndim}-D tensor")
    st = _core.tensor_strides(src)
    return view(src, [src.shape[a] for a in axes], 0, [st[a] for a in axes])


def swapaxis(src, a1, a2):
    """``swapaxis<a1, a2>(src)``: axes a1 and a2 exchanged."""
    src = _tensor(src, "swapaxis")
    a1, a2 = _axis(a1, src.ndim, "swapaxis"), _axis(a2, src.ndim, "swapaxis")
    axes = list(range(src.ndim))
    axes[a1], axes[a2] = axes[a2], axes[a1]
    return transpose_axes(src, axes)


# ---- crop.h, slice.h --------------------------------------------------------------------
def crop(src, oshape, start_h=None, start_w=None):
    """The (h, w) window of the last two axes at (start_h, start_w), centred by default."""
    src = _tensor(src, "crop")
    if src.ndim < 2:
        raise ShapeError(f"crop needs at least 2 axes, got shape {src.shape}")
    h, w = as_shape(oshape)
    H, W = src.shape[-2], src.shape[-1]
    sh = (H - h) // 2 if start_h is None else start_h
    sw = (W - w) // 2 if start_w is None else start_w
    if not (0 <= sh and sh + h <= H and 0 <= sw and sw + w <= W):
        raise ShapeError(f"crop: window ({h},{w}) at ({sh},{sw}) does not fit in ({H},{W})")
    st = _core.tensor_strides(src)
    shape = list(src.shape[:-2]) + [h, w]
    return view(src, shape, sh * st[-2] + sw * st[-1], st)


def slice_axis(src, axis, begin, end):
    """``slice<sdim>(src, begin, end)``: indices [begin, end) of one axis."""
    src = _tensor(src, "slice")
    axis = _axis(axis, src.ndim, "slice")
    if not 0 <= begin <= end <= src.shape[axis]:
        raise ShapeError(f"The slice went out of range: [{begin}, {end}) of axis {axis} with "
                         f"size {src.shape[axis]}")
    st = _core.tensor_strides(src)
    shape = list(src.shape)
    shape[axis] = end - begin
    return view(src, shape, begin * st[axis], st)


# ---- reshape.h --------------------------------------------------------------------------
def reshape(src, shape):
    """Row-major reinterpretation as ``shape`` (sizes must match)."""
    src = _tensor(src, "reshape")
    shape = as_shape(shape)
    if shape.size() != src.shape.size():
        raise ShapeError(f"reshape size must match: {src.shape} ({src.shape.size()} elements) "
                         f"to {shape} ({shape.size()} elements)")
    if not src.check_contiguous() and len(shape) >= 1 and shape[-1] != src.shape[-1]:
        raise ShapeError(f"reshape of a pitched tensor (shape {src.shape}, stride {src.stride}) "
                         f"must keep its last axis; copy it to a contiguous tensor first")
    if src.check_contiguous():
        st = [src.itemsize] * len(shape)
        for k in range(len(shape) - 2, -1, -1):
            st[k] = st[k + 1] * shape[k + 1]
    else:   # pitched: the rows stay rows, the leading axes regroup
        st = [src.itemsize] * len(shape)
        if len(shape) >= 2:
            st[-2] = src.stride * src.itemsize
            for k in range(len(shape) - 3, -1, -1):
                st[k] = st[k + 1] * shape[k + 1]
    return view(src, shape, 0, st)
