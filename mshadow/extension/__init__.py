"""mshadow's extension expressions, one module a family (extension/*.h in the C++).

Views (broadcast, mirror, flip, swapaxis, transpose, crop, slice, reshape) are strided
leaves and implicit_dot reads whole rows; the plan fuses them with everything else: see
docs/architecture.md.
"""
from .implicit_gemm import implicit_dot, ImplicitGEMMExp
from .views import (ViewExp, broadcast, broadcast_keepdim, broadcast_scalar, broadcast_to,
                    broadcast_with_axis, crop, flip, mirror, repmat, reshape, slice_axis,
                    swapaxis, transpose_axes, view)

__all__ = ["implicit_dot", "ImplicitGEMMExp", "ViewExp", "broadcast", "broadcast_keepdim",
           "broadcast_scalar", "broadcast_to", "broadcast_with_axis", "crop", "flip", "mirror",
           "repmat", "reshape", "slice_axis", "swapaxis", "transpose_axes", "view"]
