"""numpy references of mshadow's extensions shared by the test modules (the oracle)."""
import numpy as np

F32, F64, I32 = np.dtype(np.float32), np.dtype(np.float64), np.dtype(np.int32)
MANT = {F32: 24, F64: 53}                  # integers up to 2**MANT are exact
EPS = {F32: 2.0 ** -23, F64: 2.0 ** -52}   # one ulp at 1 (twice the unit roundoff)


def _max(v):
    return float(np.max(np.abs(v))) if np.size(v) else 0.0


def np_pad(a, py, px):
    return np.pad(a, [(0, 0)] * (a.ndim - 2) + [(py, py), (px, px)])


def np_upsample(a, s):
    return np.repeat(np.repeat(a, s, axis=-2), s, axis=-1)


def _out_extent(size, k, s, d):
    return (size - (d * (k - 1) + 1)) // s + 1


def np_im2col(img, ky, kx, sy, sx, dy, dx):
    """unpack_patch2col: row (c*ky + i)*kx + j, column (n*oh + oy)*ow + ox holds
    img[n, c, oy*sy + i*dy, ox*sx + j*dx]."""
    C, H, W = img.shape[-3:]
    im = img.reshape((-1, C, H, W))
    oh, ow = _out_extent(H, ky, sy, dy), _out_extent(W, kx, sx, dx)
    out = np.zeros((C * ky * kx, im.shape[0] * oh * ow), img.dtype)
    for c in range(C):
        for i in range(ky):
            for j in range(kx):
                taps = im[:, c, i * dy:i * dy + sy * (oh - 1) + 1:sy,
                          j * dx:j * dx + sx * (ow - 1) + 1:sx]
                out[(c * ky + i) * kx + j] = taps.reshape(-1)
    return out


def np_col2im(mat, imshape, ky, kx, sy, sx, dy, dx):
    """pack_col2patch: each pixel sums every entry of ``mat`` that im2col reads from it."""
    C, H, W = imshape[-3:]
    oh, ow = _out_extent(H, ky, sy, dy), _out_extent(W, kx, sx, dx)
    n = int(np.prod(imshape[:-3], dtype=np.int64))
    out = np.zeros((n, C, H, W), mat.dtype)
    for c in range(C):
        for i in range(ky):
            for j in range(kx):
                out[:, c, i * dy:i * dy + sy * (oh - 1) + 1:sy,
                    j * dx:j * dx + sx * (ow - 1) + 1:sx] += \
                    mat[(c * ky + i) * kx + j].reshape(n, oh, ow)
    return out.reshape(imshape)


class Node:
    """An mshadow operand ``e`` (tensor, expression or scalar) with its oracle ``v``
    (float64 for float dtypes, the dtype for integers), a bound ``err`` on |e - v| and a
    readable ``desc``."""

    __slots__ = ("e", "v", "err", "desc", "dt")

    def __init__(self, e, v, err, desc, dt):
        self.e, self.v, self.err, self.desc, self.dt = e, v, float(err), desc, dt

    @property
    def m(self):
        return _max(self.v)

    @property
    def shape(self):
        return tuple(np.shape(self.v))
