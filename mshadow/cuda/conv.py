"""conv2d and its two gradients on gpu tensors: cxxnet's GPU convolution layer, chunk by chunk.

Design:
    nn.conv2d / conv2d_grad_weight / conv2d_grad_data check every argument as for the CPU,
    then hand gpu tensors here. A chunk of images at a time (its column matrix at most
    COLUMN_BYTES, and at least one image), on the destination's stream:
    * forward: cols = unpack_patch2col(pad(data[chunk])) by the expression path (the im2col
      kernel emitted from the IR), then out[chunk] = alpha weight @ cols[:, image] + beta out
      for every image of the chunk as one cuBLAS gemmStridedBatched, the weight read with a
      batch stride of 0;
    * grad-weight: the same columns and the chunk's gradient with its first two axes
      swapped, (K, nb * oh * ow), then dweight += that @ cols^T, one gemm a chunk (beta only
      on the first chunk: the saver's);
    * grad-data: cols[:, image] = weight^T @ grad[n] for the chunk as one gemmStridedBatched,
      then dx[chunk] <saver> crop(pack_col2patch(cols)) by the expression path (col2im).
    Row-major C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T: every gemm is called with
    its operands swapped and each row pitch as its leading dimension (executor.assign_product).
    A source sharing memory with the destination is read from a gpu copy made first, and a
    data expression is evaluated into a gpu tensor first (so it can be sliced by image), so
    no store can change what a later chunk reads. The products are cuBLAS's: equal to the
    CPU's to rounding, not bit for bit.
    Never: reads device memory from the host; imports the CPU lowering.
"""
from .. import _core
from ..engine import assign
from ..extension import crop, pack_col2patch, pad, reshape, swapaxis, unpack_patch2col
from . import streams
from .executor import check_blas_dtype, readable, temporary

COLUMN_BYTES = 64 << 20    # a chunk's column matrix at most (cxxnet's nstep, in bytes)


def _chunks(nimg, image_bytes):
    """(first image, images) of each chunk: as many images as COLUMN_BYTES holds, one at
    least."""
    step = max(1, COLUMN_BYTES // max(image_bytes, 1))
    return [(n0, min(step, nimg - n0)) for n0 in range(0, nimg, step)]


def _columns(data, n0, nb, kh, kw, py, px, stride, like):
    """The column matrix (C*kh*kw, nb*oh*ow) of images [n0, n0 + nb) of ``data``."""
    x = data.slice(n0, n0 + nb)
    cols = unpack_patch2col(pad(x, py, px) if py or px else x, kh, kw, stride)
    tmp = temporary(tuple(cols.shape), like.dtype, like.stream)
    tmp[:] = cols
    return tmp


def _no_products(dst, ckk, P, beta):
    """Whether a convolution has no products (a dimension 0, which cuBLAS would refuse as a
    leading dimension): then dst <saver> 0, so saveto zeroes it and the others leave it."""
    if ckk and P and dst.size:
        return False
    if beta == 0 and dst.size:
        dst[:] = 0
    return True


def _geometry(weight_like, ohw):
    K, C, kh, kw = weight_like.shape
    return K, C * kh * kw, ohw[0] * ohw[1]


def conv2d(out, data, weight, py, px, stride, ohw, sign_beta):
    """``out = sign conv(data, weight) + beta out`` (nn.conv2d checked every argument)."""
    where = "conv2d"
    check_blas_dtype(where, out)
    data, weight = readable(data, out), readable(weight, out)
    K, ckk, P = _geometry(weight, ohw)
    if _no_products(out, ckk, P, sign_beta[1]):
        return
    h = streams.blas(out.stream, where)
    size = out.itemsize
    for n0, nb in _chunks(out.shape[0], ckk * P * size):
        cols = _columns(data, n0, nb, weight.shape[2], weight.shape[3], py, px, stride, out)
        dst = out.slice(n0, n0 + nb)
        pinned = _core.pin_allocations((dst, weight, cols))
        try:
            h.gemm_strided_batched(out.dtype, False, False, P, K, ckk, sign_beta[0],
                                   _core.data_address(cols), cols.stride, P,
                                   _core.data_address(weight), ckk, 0, sign_beta[1],
                                   _core.data_address(dst), P, K * P, nb)
        finally:
            _core.unpin_allocations(pinned)


def conv2d_grad_weight(dweight, data, grad, py, px, stride, ohw, sign_beta):
    """``dweight = sign sum_n grad[n] @ cols_n^T + beta dweight``: a gemm a chunk, over
    the chunk's gradient with its first two axes swapped (K, nb * P), as cxxnet's layer
    does (``swapaxis<1,0>(grad.Slice(...))``): one product of depth nb * P, not nb of P."""
    where = "conv2d_grad_weight"
    check_blas_dtype(where, dweight)
    data, grad = readable(data, dweight), readable(grad, dweight)
    K, ckk, P = _geometry(dweight, ohw)
    N = grad.shape[0]
    if _no_products(dweight, ckk * N, P, sign_beta[1]):     # an empty sum is 0
        return
    h = streams.blas(dweight.stream, where)
    beta = sign_beta[1]
    for n0, nb in _chunks(N, (ckk + K) * P * dweight.itemsize):
        cols = _columns(data, n0, nb, dweight.shape[2], dweight.shape[3], py, px, stride,
                        dweight)
        g = temporary((K, nb * P), dweight.dtype, dweight.stream)
        g[:] = reshape(swapaxis(grad.slice(n0, n0 + nb), 1, 0), (K, nb * P))
        pinned = _core.pin_allocations((dweight, g, cols))
        try:
            h.gemm(dweight.dtype, True, False, ckk, K, nb * P, sign_beta[0],
                   _core.data_address(cols), cols.stride, _core.data_address(g), g.stride,
                   beta, _core.data_address(dweight), ckk)
            beta = 1
        finally:
            _core.unpin_allocations(pinned)


def conv2d_grad_data(dx, grad, weight, py, px, stride, ohw, saver):
    """``dx <saver> crop(col2im(weight^T @ grad[n]))`` (nn.conv2d_grad_data checked every
    argument; dx shares no memory with grad or weight)."""
    where = "conv2d_grad_data"
    check_blas_dtype(where, dx)
    N, C, H, W = dx.shape
    K, ckk, P = _geometry(weight, ohw)
    kh, kw = weight.shape[2], weight.shape[3]
    if _no_products(dx, ckk, P, 0 if saver == "saveto" else 1):
        return
    h = streams.blas(dx.stream, where)
    for n0, nb in _chunks(N, ckk * P * dx.itemsize):
        cols = temporary((ckk, nb * P), dx.dtype, dx.stream)
        pinned = _core.pin_allocations((cols, grad, weight))
        try:
            h.gemm_strided_batched(dx.dtype, False, True, P, ckk, K, 1.0,
                                   _core.data_address(grad) + n0 * K * P * grad.itemsize,
                                   P, K * P, _core.data_address(weight), ckk, 0, 0.0,
                                   _core.data_address(cols), cols.stride, P, nb)
        finally:
            _core.unpin_allocations(pinned)
        image = pack_col2patch(cols, (nb, C, H + 2 * py, W + 2 * px), kh, kw, stride)
        if py or px:
            image = crop(image, (H, W), py, px)
        assign(dx.slice(n0, n0 + nb), image, saver)
