"""Spatial extensions: pool/unpool, chpool/ch_unpool, unpack_patch2col (im2col), pack_col2patch.
Each is a gather over a reader of mshadow/readers.py; shapes are checked here. The readers'
parameters go in their rows' order (positional: a keyword dict cost a third of pool's build)."""

from .. import _core, readers
from .._core import Exp, Tensor
from ..expr import kComplex
from ..errors import DTypeError, ShapeError
from ..op import _Reducer, red, reducer_names
from ..shape import INDEX_MAX, as_shape, int_arg
from .gather import PadExp, _code, _operand, gather, remap_leaves
from .views import _source as _operand_of, _tensor

_REDUCER_ID = readers.REDUCER_IDS


def _accepted(where):
    """ms.red's reducers that the reader named ``where`` takes: a row of
    readers.REDUCER_TABLE that fills the column it needs (unpool's PartialGrad:
    Reader.red_needs), by object, to their ids."""
    need = readers.READERS_BY_NAME[where].red_needs
    return {getattr(red, r.name): r.id for r in readers.REDUCER_TABLE
            if not need or getattr(r, need) is not None}


_ACCEPTED = {where: _accepted(where) for where in ("pool", "unpool", "chpool", "ch_unpool")}
_POOL_IDS = _ACCEPTED["pool"]
_pool_node = _core.pool_node


def _reducer(reducer, where):
    """The id of ``reducer`` for the reader named ``where`` (_accepted)."""
    accepted = _ACCEPTED[where]
    rid = accepted.get(reducer)
    if rid is not None:
        return rid
    ok = [r.name for r in accepted]        # another _Reducer object of an accepted name
    if not isinstance(reducer, _Reducer) or reducer.name not in ok:
        why = (f" (the reducers with a PartialGrad, which {where} multiplies the gradient by)"
               if len(ok) < len(_REDUCER_ID) else "")
        raise TypeError(f"{where}: reducer must be {reducer_names(ok)}{why}, got {reducer!r}")
    return _REDUCER_ID[reducer.name]


def _positive(where, names, *values):
    """Kernel sizes, strides and dilations (named by ``names``, space-separated): integers
    >= 1 (mshadow divides by them). Positional: a keyword dict cost half of pool's checks."""
    for v in values:
        if type(v) is not int or not 1 <= v <= INDEX_MAX:
            break
    else:
        return values
    out = []
    for name, v in zip(names.split(), values):
        v = int_arg(v, where, name)     # an integer below 2**63
        if v < 1:
            raise ShapeError(f"{where}: {name} must be >= 1, got {v}")
        out.append(v)
    return out


def _source(src, where, min_ndim):
    if not ((type(src) is Tensor or (isinstance(src, Exp) and src.exp_type != kComplex))
            and len(src.shape) >= min_ndim):    # what the fast test passes, _tensor returns
        src = _min_ndim(_tensor(src, where), where, min_ndim)
    return src


def _min_ndim(src, where, min_ndim):
    if len(src.shape) < min_ndim:
        raise ShapeError(f"{where}: the source must have at least {min_ndim} axes, got shape "
                         f"{src.shape}")
    return src


def _same_dtype(where, *tensors):
    if len({t.dtype for t in tensors}) != 1:
        raise DTypeError(f"{where}: data_src, data_pooled and grad_pooled must share one dtype, "
                         f"got {', '.join(str(t.dtype) for t in tensors)}")


# ---- spatial_pool.h / spatial_unpool.h ----------------------------------------------------

def pool(src, ky, kx, sy, sx, reducer=red.maximum, pshape=None):
    """``pool<Reducer>(src, [pshape,] ky, kx, sy, sx)`` over the last two axes.

    The output is ``(H - ky) // sy + 1`` by ``(W - kx) // sx + 1`` unless ``pshape`` gives
    it; windows are clipped at the border and start from the reducer's init value.
    """
    if pshape is None:      # the common case, checked and built compiled (_core.pool_node)
        r = _POOL_IDS.get(reducer)
        if r is not None:
            node = _pool_node(src, ky, kx, sy, sx, r)
            if node is not None:
                return node
    r = _reducer(reducer, "pool")
    src = _source(src, "pool", 2)
    ky, kx, sy, sx = _positive("pool", "ky kx sy sx", ky, kx, sy, sx)
    H, W = src.shape[-2], src.shape[-1]
    if not (W >= kx and H >= ky):
        raise ShapeError("PoolingExp: kernel must be smaller than image")
    if pshape is None:
        oh, ow = (H - ky) // sy + 1, (W - kx) // sx + 1
    else:
        pshape = tuple(as_shape(pshape))
        if len(pshape) != 2:
            raise ShapeError(f"pool: pshape must have 2 entries, got {pshape}")
        oh, ow = pshape
    return gather("pool", (src,), src.shape[:-2] + (oh, ow), _code(src),
                  (r, H, W, ky, kx, sy, sx, oh))


def unpool(data_src, data_pooled, grad_pooled, ky, kx, sy, sx, reducer=red.maximum):
    """``unpool<Reducer>(data_src, data_pooled, grad_pooled, ky, kx, sy, sx)``: the gradient
    of pool, shaped like ``data_src``; every tied maximum (minimum) gets the gradient."""
    r = _reducer(reducer, "unpool")
    data_src = _source(data_src, "unpool", 2)
    data_pooled = _source(data_pooled, "unpool", 2)
    grad_pooled = _source(grad_pooled, "unpool", 2)
    _same_dtype("unpool", data_src, data_pooled, grad_pooled)
    ky, kx, sy, sx = _positive("unpool", "ky kx sy sx", ky, kx, sy, sx)
    if tuple(grad_pooled.shape) != tuple(data_pooled.shape):
        raise ShapeError("UnPoolingExp: pooled shape mismatch")
    if (data_pooled.ndim != data_src.ndim
            or tuple(data_pooled.shape[:-2]) != tuple(data_src.shape[:-2])):
        raise ShapeError("UnPoolingExp: pool and src shape mismatch")
    pH, pW = data_pooled.shape[-2], data_pooled.shape[-1]
    return gather("unpool", (data_src, data_pooled, grad_pooled), data_src.shape,
                  _code(data_src), (r, data_src.shape[-2], ky, kx, sy, sx, pH, pW))


# ---- channel_pool.h / channel_unpool.h ----------------------------------------------------

def _channel_params(where, nsize, stride, pad, odd_check):
    nsize, stride = _positive(where, "nsize stride", nsize, stride)
    if pad is None:
        if odd_check and nsize % 2 != 1:
            raise ShapeError("chpool: if no pad is specified, local size must be odd")
        pad = nsize // 2
    pad = int_arg(pad, where, "pad")
    if pad < 0:
        raise ShapeError(f"{where}: pad must be >= 0, got {pad}")
    return nsize, stride, pad


def chpool(src, nsize, reducer, stride=1, pad=None):
    """``chpool<Reducer>(src, nsize[, stride, pad])``: reduce over neighbouring channels (axis -3).

    Without ``pad`` it is ``nsize // 2`` and ``nsize`` must be odd. Output channels are
    ``(C - nsize + 2 * pad + 1) // stride``; the window ``[c*stride - pad, +nsize)`` is
    clipped to the output channel count (mshadow's quirk 11) and to C.
    """
    r = _reducer(reducer, "chpool")
    src = _source(src, "chpool", 3)
    nsize, stride, pad = _channel_params("chpool", nsize, stride, pad, True)
    C, H = src.shape[-3], src.shape[-2]
    if C < nsize:
        raise ShapeError("chpool: local size must be smaller than nchannels")
    if C - nsize + 2 * pad + 1 > INDEX_MAX:   # (its windows' channel arithmetic then fits)
        raise ShapeError(f"chpool: pad = {pad} gives more output channels than an index "
                         f"holds (C - nsize + 2 * pad + 1 = {C - nsize + 2 * pad + 1} > 2**63 - 1)")
    oC = (C - nsize + 2 * pad + 1) // stride
    shape = tuple(src.shape[:-3]) + (oC,) + tuple(src.shape[-2:])
    return gather("chpool", (src,), shape, _code(src), (r, C, oC, H, nsize, stride, pad))


def ch_unpool(data_src, data_pooled, grad_pooled, nsize, reducer, stride=1, pad=None):
    """``ch_unpool<Reducer>(data_src, data_pooled, grad_pooled, nsize[, stride, pad])``: the
    gradient of chpool, shaped like ``data_src`` (``pad`` defaults to ``nsize // 2``)."""
    r = _reducer(reducer, "ch_unpool")
    data_src = _source(data_src, "ch_unpool", 3)
    data_pooled = _source(data_pooled, "ch_unpool", 3)
    grad_pooled = _source(grad_pooled, "ch_unpool", 3)
    _same_dtype("ch_unpool", data_src, data_pooled, grad_pooled)
    nsize, stride, pad = _channel_params("ch_unpool", nsize, stride, pad, False)
    if tuple(grad_pooled.shape) != tuple(data_pooled.shape):
        raise ShapeError("ChannelUnPoolingExp: data and grad shape mismatch")
    ps, ss = tuple(data_pooled.shape), tuple(data_src.shape)
    for k in range(-len(ss), 0):
        if k == -3:
            continue
        if len(ps) != len(ss) or ps[k] != ss[k]:
            raise ShapeError(f"ChannelUnPoolingExp: pooled tensor and src tensor shape mismatch"
                             f"{ps[k] if len(ps) == len(ss) else ps} vs "
                             f"{ss[k] if len(ps) == len(ss) else ss}")
    C, H = ss[-3], ss[-2]
    return gather("ch_unpool", (data_src, data_pooled, grad_pooled), data_src.shape,
                  _code(data_src), (r, C, ps[-3], H, nsize, stride, pad))


# ---- unpack_patch2col.h / pack_col2patch.h ------------------------------------------------

def _patch_params(where, ky, kx, sy, sx, dy, dx):
    sx = sy if sx is None else sx
    dx = dy if dx is None else dx
    return _positive(where, "ky kx sy sx dy dx", ky, kx, sy, sx, dy, dx)


def _out_extent(size, k, s, d):
    # the dilated patch spans d*(k-1)+1 pixels (mshadow writes k*d-1, the same for d <= 2)
    return (size - (d * (k - 1) + 1)) // s + 1


def unpack_patch2col(img, ky, kx, sy, sx=None, dy=1, dx=None):
    """im2col of a ``(..., C, H, W)`` image: a ``(C*ky*kx, N*oh*ow)`` matrix whose row
    ``(c*ky + i)*kx + j`` and column ``(n*oh + oy)*ow + ox`` hold
    ``img(n, c, oy*sy + i*dy, ox*sx + j*dx)``; ``oh = (H - (dy*(ky-1)+1)) // sy + 1``."""
    img = _min_ndim(_operand_of(img, "unpack_patch2col"), "unpack_patch2col", 3)
    ndim = len(img.shape)
    ky, kx, sy, sx, dy, dx = _patch_params("unpack_patch2col", ky, kx, sy, sx, dy, dx)
    C, H, W = img.shape[-3], img.shape[-2], img.shape[-1]
    if not (W >= dx * (kx - 1) + 1 and H >= dy * (ky - 1) + 1):
        raise ShapeError("UnpackPatchToCol:image shape smaller than patch size")
    N = as_shape(img.shape).prod_shape(0, ndim - 3)
    oh, ow = _out_extent(H, ky, sy, dy), _out_extent(W, kx, sx, dx)
    # every window lies inside the image (oh, ow above), so im2col is a pure remap: an
    # element-wise source is read per element through its leaves (gather.remap_leaves)
    def im2col(leaf):
        py = px = 0
        if isinstance(leaf, PadExp):    # its zeros are im2col's zeros outside the image
            leaf, py, px = leaf.padded
        leaf = _operand(leaf, "unpack_patch2col")
        return gather("im2col", (leaf,), (C * ky * kx, N * oh * ow), _code(leaf),
                      (C, H - 2 * py, W - 2 * px, ky, kx, sy, sx, dy, dx, oh, ow, py, px))
    return remap_leaves(img, im2col)


def pack_col2patch(mat, imshape, ky, kx, sy, sx=None, dy=1, dx=None):
    """col2im: an image of ``imshape`` where each pixel is the sum of every entry of the
    ``(C*ky*kx, N*oh*ow)`` matrix ``mat`` that unpack_patch2col would read from it."""
    mat = _source(mat, "pack_col2patch", 2)
    if mat.ndim != 2:
        raise ShapeError(f"pack_col2patch: the source must be 2-D, got shape {mat.shape}")
    imshape = tuple(as_shape(imshape))
    if len(imshape) < 3:
        raise ShapeError(f"pack_col2patch: imshape must have at least 3 axes, got {imshape}")
    ky, kx, sy, sx, dy, dx = _patch_params("pack_col2patch", ky, kx, sy, sx, dy, dx)
    C, H, W = imshape[-3:]
    if not (W >= dx * (kx - 1) + 1 and H >= dy * (ky - 1) + 1):
        raise ShapeError("PackColToPatch:image shape smaller than patch size")
    N = as_shape(imshape).prod_shape(0, len(imshape) - 3)
    oh, ow = _out_extent(H, ky, sy, dy), _out_extent(W, kx, sx, dx)
    if mat.shape[1] != oh * ow * N:
        raise ShapeError("PackColToPatchExp: src.size(1) mismatch")
    if mat.shape[0] != ky * kx * C:
        raise ShapeError("PackColToPatchExp: src.size(0) mismatch")
    return gather("col2im", (mat,), imshape, _code(mat), (C, H, ky, kx, sy, sx, dy, dx, oh, ow))
