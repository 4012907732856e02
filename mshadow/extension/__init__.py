"""mshadow's extension expressions, one module a family (extension/*.h in the C++).

Views (broadcast, mirror, flip, swapaxis, transpose, crop, slice, slice_ex, reshape) are
strided leaves, gathers (pad, take, one_hot, range, concat, pool, im2col, ...) fill blocks
through a kernel and implicit_dot reads whole rows; the plan fuses them all with element-wise
operators. Reductions (sum_rows, sumall_except_dim, reduce_with_axis, ...) are kComplex,
evaluated by their own engine. See docs/architecture.md.
"""
from .gather import (ConcatExp, GatherExp, concat, mask, mat_choose_row_element,
                     mat_fill_row_element, one_hot_encode, pad, range, take, upsampling_nearest)
from .implicit_gemm import implicit_dot, ImplicitGEMMExp
from .reduce import (ReduceExp, reduce_except_dim, reduce_keepdim, reduce_with_axis,
                     sum_rows, sumall_except_dim)
from .spatial import ch_unpool, chpool, pack_col2patch, pool, unpack_patch2col, unpool
from .views import (ViewExp, broadcast, broadcast_keepdim, broadcast_scalar, broadcast_to,
                    broadcast_with_axis, crop, flip, mirror, repmat, reshape, slice_axis,
                    slice_ex, swapaxis, transpose_axes, view)

__all__ = ["implicit_dot", "ImplicitGEMMExp", "ViewExp", "broadcast", "broadcast_keepdim",
           "broadcast_scalar", "broadcast_to", "broadcast_with_axis", "crop", "flip", "mirror",
           "repmat", "reshape", "slice_axis", "slice_ex", "swapaxis", "transpose_axes", "view",
           "ConcatExp", "GatherExp", "concat", "mask", "mat_choose_row_element",
           "mat_fill_row_element", "one_hot_encode", "pad", "range", "take", "upsampling_nearest",
           "ReduceExp", "reduce_except_dim", "reduce_keepdim", "reduce_with_axis", "sum_rows",
           "sumall_except_dim", "ch_unpool", "chpool", "pack_col2patch", "pool",
           "unpack_patch2col", "unpool"]
