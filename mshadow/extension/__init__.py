"""mshadow's extension expressions, one module a family (extension/*.h in the C++).

Views (broadcast, mirror, flip, swapaxis, transpose, crop, slice, slice_ex, reshape) are
strided leaves, gathers (pad, take, take_grad, one_hot, range, concat, pool, im2col, the
complex.h family, ...) fill blocks through a reader kernel and implicit_dot reads whole rows;
the plan fuses them all with element-wise operators. Reductions (sum_rows, sumall_except_dim,
reduce_with_axis, ...) assigned whole run in their own fused engine; reduce_with_axis and
reduce_keepdim also nest anywhere, as mshadow's chainers. See docs/architecture.md.
"""
from .complex import (complex_abs_square, complex_div_cc, complex_div_cr, complex_div_rc,
                      complex_exchange, complex_mul_cc, complex_mul_cr, complex_mul_rc,
                      complex_pad_imag, complex_sum_real_imag, complex_toreal, conj)
from .gather import (ConcatExp, GatherExp, concat, mask, mat_choose_row_element,
                     mat_fill_row_element, one_hot_encode, pad, range, take, take_grad,
                     upsampling_nearest)
from .implicit_gemm import implicit_dot, ImplicitGEMMExp
from .reduce import (ReduceExp, reduce_except_dim, reduce_keepdim, reduce_with_axis,
                     sum_rows, sumall_except_dim)
from .spatial import ch_unpool, chpool, pack_col2patch, pool, unpack_patch2col, unpool
from .views import (ViewExp, broadcast, broadcast_keepdim, broadcast_multi_axes,
                    broadcast_scalar, broadcast_to, broadcast_with_axis, crop, flip, mirror,
                    repmat, reshape, slice_axis, slice_ex, swapaxis, transpose_axes,
                    transpose_indices, view)

__all__ = ["implicit_dot", "ImplicitGEMMExp", "ViewExp", "broadcast", "broadcast_keepdim",
           "broadcast_scalar", "broadcast_to", "broadcast_with_axis", "crop", "flip", "mirror",
           "repmat", "reshape", "slice_axis", "slice_ex", "swapaxis", "transpose_axes", "view",
           "ConcatExp", "GatherExp", "concat", "mask", "mat_choose_row_element",
           "mat_fill_row_element", "one_hot_encode", "pad", "range", "take", "upsampling_nearest",
           "ReduceExp", "reduce_except_dim", "reduce_keepdim", "reduce_with_axis", "sum_rows",
           "sumall_except_dim", "ch_unpool", "chpool", "pack_col2patch", "pool",
           "unpack_patch2col", "unpool",
           "broadcast_multi_axes", "transpose_indices", "take_grad",
           "complex_mul_cc", "complex_mul_cr", "complex_mul_rc", "complex_div_cc",
           "complex_div_cr", "complex_div_rc", "conj", "complex_exchange", "complex_pad_imag",
           "complex_toreal", "complex_abs_square", "complex_sum_real_imag"]
