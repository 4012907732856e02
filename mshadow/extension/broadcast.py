"""broadcast, broadcast_scalar, repmat (broadcast.h): a 1-D tensor repeated over a shape.

Each is a leaf the plan reads with a row map, not a copy: ``dst[:] = x + ms.broadcast(
bias, x.shape, 1)`` is one fused pass, the bias read once per group of rows.
"""
from .. import _core
from ..errors import ShapeError
from ..expr import _CODE_BY_FLAG, kChainer, new_node
from ..shape import Shape, as_shape

Tensor = _core.Tensor


class BroadcastExp(_core.Exp):
    """``broadcast<dimcast>(src, shape)``: element at index i of axis ``dimcast`` is src[i]."""

    __slots__ = ("src", "dimcast")


def _source(src, where):
    if not isinstance(src, Tensor):
        raise TypeError(f"{where}: the source must be a 1-D tensor, got {type(src).__name__}")
    if src.ndim != 1:
        raise ShapeError(f"{where}: the source must be 1-D, got shape {src.shape}")
    return src


def broadcast(src, shape, dimcast):
    """Repeat the 1-D ``src`` (length ``shape[dimcast]``) along every other axis of ``shape``."""
    src = _source(src, "broadcast")
    shape = as_shape(shape)
    nd = len(shape)
    if not 0 <= dimcast < nd:
        raise ShapeError(f"broadcast: dimcast {dimcast} out of range for a {nd}-D shape {shape}")
    if src.shape[0] != shape[dimcast]:
        raise ShapeError(f"broadcast, shape mismatch: source {src.shape} cannot fill axis "
                         f"{dimcast} of {shape}")
    code = _CODE_BY_FLAG[src.type_flag]
    key = ("B", code, "x") if dimcast == nd - 1 else ("B", code, "y", dimcast)
    node = new_node(BroadcastExp, key, shape, code, (src,), (), kChainer)
    node.src, node.dimcast = src, dimcast
    return node


def broadcast_scalar(src, shape):
    """Fill ``shape`` with the single element of a length-1 tensor."""
    src = _source(src, "broadcast_scalar")
    if src.shape[0] != 1:
        raise ShapeError(f"broadcast_scalar, source need to be scalar expression: got shape "
                         f"{src.shape}")
    shape = as_shape(shape)
    code = _CODE_BY_FLAG[src.type_flag]
    node = new_node(BroadcastExp, ("B", code, "s"), shape, code, (src,), (), kChainer)
    node.src, node.dimcast = src, None
    return node


def repmat(src, nrow):
    """``nrow`` copies of the 1-D ``src`` as rows: ``broadcast(src, (nrow, len(src)), 1)``."""
    src = _source(src, "repmat")
    return broadcast(src, Shape(nrow, src.shape[0]), 1)
