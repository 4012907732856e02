"""mirror (mirror.h): the last axis reversed, read in place with a negative step."""
from .. import _core
from ..errors import ShapeError
from ..expr import _CODE_BY_FLAG, kChainer, new_node

Tensor = _core.Tensor


class MirrorExp(_core.Exp):
    """``mirror(src)``: element (..., x) is src[..., W - 1 - x]."""

    __slots__ = ("src",)


def mirror(src):
    if not isinstance(src, Tensor):
        raise TypeError(f"mirror: the source must be a tensor, got {type(src).__name__} "
                        f"(assign an expression to a tensor first)")
    if src.ndim < 1:
        raise ShapeError("mirror needs at least one axis")
    code = _CODE_BY_FLAG[src.type_flag]
    node = new_node(MirrorExp, ("R", code), src.shape, code, (src,), (), kChainer)
    node.src = src
    return node
