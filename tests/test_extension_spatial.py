"""Spatial extensions (pool, unpool, chpool, ch_unpool, unpack_patch2col, pack_col2patch):
numpy loop references written from mshadow's definitions, the reference's verified examples."""
import itertools

import numpy as np
import pytest

import mshadow as ms
from mshadow.op import reducer_names   # every row of readers.REDUCER_TABLE
from mshadow.testing import padded, tensor as T
from references import np_pad

RED = {"sum": ms.red.sum, "maximum": ms.red.maximum, "minimum": ms.red.minimum}
DTYPES = [np.float32, np.float64, np.float16, np.int32]



def run(e, shape, dtype):
    dst = ms.new_tensor(shape, dtype=dtype, pad=True)
    dst[:] = e
    return dst.numpy().copy()


def check(got, want, dtype):
    if dtype == np.float16:
        np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64),
                                   rtol=2e-3, atol=2e-2)
    elif np.dtype(dtype).kind == "f":
        np.testing.assert_allclose(got, want, rtol=1e-5 if dtype == np.float32 else 1e-12)
    else:
        np.testing.assert_array_equal(got, want)


def data(shape, dtype, seed=0, lo=-9, hi=10):
    """Small integers (exact in every dtype, with ties for max/min), as ``dtype``."""
    rng = np.random.default_rng(seed)
    if np.dtype(dtype).kind == "u":
        lo = 0
    return rng.integers(lo, hi, size=shape).astype(dtype)


def init_value(name, dtype):
    """SetInitValue as MXNet's red:: (-inf/+inf for floats, the type's limits for integers)."""
    if name == "sum":
        return 0
    if np.dtype(dtype).kind == "f":
        return -np.inf if name == "maximum" else np.inf
    info = np.iinfo(dtype)
    return info.min if name == "maximum" else info.max


def combine(name, acc, v):
    if name == "sum":
        return acc + v
    if np.isnan(acc) or np.isnan(v):
        return np.nan
    return max(acc, v) if name == "maximum" else min(acc, v)


def lead(a, k):
    """``a`` as (prod of the leading axes, last k axes)."""
    return a.reshape((-1,) + a.shape[a.ndim - k:])


# ---- numpy references ---------------------------------------------------------------------

def ref_pool(a, ky, kx, sy, sx, name, oshape=None):
    H, W = a.shape[-2:]
    oh, ow = oshape or ((H - ky) // sy + 1, (W - kx) // sx + 1)
    src = lead(a, 2).astype(np.float64 if a.dtype.kind == "f" else object)
    out = np.empty((src.shape[0], oh, ow), dtype=src.dtype)
    for n, py, px in itertools.product(range(src.shape[0]), range(oh), range(ow)):
        acc = init_value(name, a.dtype)
        for y in range(py * sy, min(py * sy + ky, H)):
            for x in range(px * sx, min(px * sx + kx, W)):
                acc = combine(name, acc, src[n, y, x])
        out[n, py, px] = acc
    return wrap(out, a.dtype).reshape(a.shape[:-2] + (oh, ow))


def wrap(out, dtype):
    """Integers wrap modulo the type's width, as mshadow's DType arithmetic does."""
    if np.dtype(dtype).kind == "f":
        return out.astype(dtype)
    bits = np.iinfo(dtype).bits
    f = np.vectorize(lambda v: (int(v) + (1 << (bits - 1))) % (1 << bits) - (1 << (bits - 1))
                     if np.dtype(dtype).kind == "i" else int(v) % (1 << bits), otypes=[object])
    return f(out).astype(dtype)


def ref_unpool(src, pooled, grad, ky, kx, sy, sx, name):
    """Scatter: each pooled window gives PartialGrad * grad to every pixel it covers."""
    H, W = src.shape[-2:]
    s, p, g = lead(src, 2), lead(pooled, 2), lead(grad, 2)
    out = np.zeros(s.shape, dtype=np.float64 if src.dtype.kind == "f" else object)
    for n, py, px in itertools.product(range(p.shape[0]), range(p.shape[1]), range(p.shape[2])):
        for y in range(py * sy, min(py * sy + ky, H)):
            for x in range(px * sx, min(px * sx + kx, W)):
                pg = 1 if name == "sum" or s[n, y, x] == p[n, py, px] else 0
                out[n, y, x] += pg * g[n, py, px].item()
    return wrap(out, src.dtype).reshape(src.shape)


def ref_chpool(a, nsize, name, stride=1, pad=None):
    pad = nsize // 2 if pad is None else pad
    C = a.shape[-3]
    oC = (C - nsize + 2 * pad + 1) // stride
    src = lead(a, 3).astype(np.float64 if a.dtype.kind == "f" else object)
    out = np.empty((src.shape[0], oC) + src.shape[2:], dtype=src.dtype)
    for n, c in itertools.product(range(src.shape[0]), range(oC)):
        acc = np.full(src.shape[2:], init_value(name, a.dtype), dtype=src.dtype)
        # quirk 11: the window is clipped by the output channel count (and by C)
        for cc in range(max(c * stride - pad, 0), min(c * stride - pad + nsize, oC, C)):
            acc = np.vectorize(lambda u, v: combine(name, u, v), otypes=[src.dtype])(acc, src[n, cc])
        out[n, c] = acc
    return wrap(out, a.dtype).reshape(a.shape[:-3] + (oC,) + a.shape[-2:])


def ref_ch_unpool(src, pooled, grad, nsize, name, stride=1, pad=None):
    pad = nsize // 2 if pad is None else pad
    C = src.shape[-3]
    s, p, g = lead(src, 3), lead(pooled, 3), lead(grad, 3)
    out = np.zeros(s.shape, dtype=np.float64 if src.dtype.kind == "f" else object)
    for n, cc in itertools.product(range(p.shape[0]), range(p.shape[1])):
        for c in range(max(cc * stride - pad, 0), min(cc * stride - pad + nsize, C)):
            for y, x in itertools.product(range(s.shape[2]), range(s.shape[3])):
                pg = 1 if name == "sum" or s[n, c, y, x] == p[n, cc, y, x] else 0
                out[n, c, y, x] += pg * g[n, cc, y, x].item()
    return wrap(out, src.dtype).reshape(src.shape)


def im2col_index(imshape, ky, kx, sy, sx, dy, dx):
    """(row, col) -> (n, c, y, x) of every im2col entry that reads the image."""
    C, H, W = imshape[-3:]
    N = int(np.prod(imshape[:-3]))
    oh, ow = (H - (dy * (ky - 1) + 1)) // sy + 1, (W - (dx * (kx - 1) + 1)) // sx + 1
    for c, i, j, n, oy, ox in itertools.product(range(C), range(ky), range(kx), range(N),
                                                range(oh), range(ow)):
        y, x = oy * sy + i * dy, ox * sx + j * dx
        if y < H and x < W:
            yield (c * ky + i) * kx + j, (n * oh + oy) * ow + ox, (n, c, y, x)


def ref_im2col(img, ky, kx, sy, sx, dy, dx):
    C, H, W = img.shape[-3:]
    N = int(np.prod(img.shape[:-3]))
    oh, ow = (H - (dy * (ky - 1) + 1)) // sy + 1, (W - (dx * (kx - 1) + 1)) // sx + 1
    out = np.zeros((C * ky * kx, N * oh * ow), dtype=img.dtype)
    src = lead(img, 3)
    for r, c, idx in im2col_index(img.shape, ky, kx, sy, sx, dy, dx):
        out[r, c] = src[idx]
    return out


def ref_col2im(mat, imshape, ky, kx, sy, sx, dy, dx):
    C, H, W = imshape[-3:]
    out = np.zeros((int(np.prod(imshape[:-3])), C, H, W),
                   dtype=np.float64 if mat.dtype.kind == "f" else object)
    for r, c, idx in im2col_index(imshape, ky, kx, sy, sx, dy, dx):
        out[idx] += mat[r, c].item()
    return wrap(out, mat.dtype).reshape(imshape)


# ---- verified examples (mshadow-reference.md) ---------------------------------------------

def test_verified_examples():
    img = T(np.arange(9, dtype=np.float32).reshape(1, 3, 3))
    cols = ms.new_tensor((4, 4))
    cols[:] = ms.unpack_patch2col(img, 2, 2, 1)
    back = run(ms.pack_col2patch(cols, (1, 3, 3), 2, 2, 1), (1, 3, 3), np.float32)
    np.testing.assert_array_equal(back.ravel(), [0, 2, 2, 6, 16, 10, 6, 14, 8])
    ch = T(np.arange(1, 5, dtype=np.float32).reshape(4, 1, 1))
    np.testing.assert_array_equal(run(ms.chpool(ch, 3, ms.red.sum), (4, 1, 1), np.float32)
                                  .ravel(), [3, 6, 9, 7])
    ones = T(np.ones((2, 2), np.float32))
    got = run(ms.unpool(ones, T(np.ones((1, 1), np.float32)), T(np.full((1, 1), 5, np.float32)),
                        2, 2, 2, 2, ms.red.maximum), (2, 2), np.float32)
    np.testing.assert_array_equal(got.ravel(), [5, 5, 5, 5])


# ---- pool / unpool --------------------------------------------------------------------------

POOL_CASES = [((5, 7), 2, 2, 2, 2), ((2, 6, 5), 3, 2, 1, 2), ((2, 1, 4, 9), 2, 3, 2, 3),
              ((3, 3), 3, 3, 1, 1)]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", list(RED))
@pytest.mark.parametrize("case", POOL_CASES)
def test_pool(dtype, name, case):
    shape, ky, kx, sy, sx = case
    a = data(shape, dtype)
    want = ref_pool(a, ky, kx, sy, sx, name)
    check(run(ms.pool(padded(a), ky, kx, sy, sx, RED[name]), want.shape, dtype), want, dtype)
    check(run(ms.pool(T(a), ky, kx, sy, sx, RED[name]), want.shape, dtype), want, dtype)


def test_pool_default_reducer_is_maximum():
    a = data((4, 6), np.float32)
    np.testing.assert_array_equal(run(ms.pool(T(a), 2, 2, 2, 2), (2, 3), np.float32),
                                  ref_pool(a, 2, 2, 2, 2, "maximum"))


@pytest.mark.parametrize("name", list(RED))
@pytest.mark.parametrize("dtype", [np.float32, np.int32, np.float16])
def test_pool_pshape_past_the_border_keeps_the_init_value(name, dtype):
    a = data((2, 4, 5), dtype)
    want = ref_pool(a, 2, 2, 2, 2, name, oshape=(3, 4))   # row 2 and column 3 are empty windows
    got = run(ms.pool(padded(a), 2, 2, 2, 2, RED[name], pshape=(3, 4)), (2, 3, 4), dtype)
    check(got, want, dtype)
    if np.dtype(dtype).kind == "f":
        assert got[0, 2, 0] == init_value(name, dtype)


@pytest.mark.parametrize("dtype", [np.uint8, np.int8, np.int64])
def test_pool_other_integer_types_and_wrapping_sums(dtype):
    a = data((3, 6, 6), dtype, lo=-100, hi=120)      # int8 / uint8 sums of 4 overflow
    for name in RED:
        want = ref_pool(a, 2, 2, 2, 2, name)
        np.testing.assert_array_equal(run(ms.pool(padded(a), 2, 2, 2, 2, RED[name]),
                                          want.shape, dtype), want)


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16])
def test_pool_nan_propagates_through_maximum_and_minimum(dtype):
    a = data((4, 4), dtype)
    a[1, 1] = np.nan
    for name in ("maximum", "minimum"):
        got = run(ms.pool(T(a), 2, 2, 2, 2, RED[name]), (2, 2), dtype)
        assert np.isnan(got[0, 0]) and not np.isnan(got[1:, :]).any() and not np.isnan(got[0, 1])


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", list(RED))
@pytest.mark.parametrize("case", POOL_CASES)
def test_unpool(dtype, name, case):
    shape, ky, kx, sy, sx = case
    a = data(shape, dtype, lo=-2, hi=3)              # many ties
    pooled = ref_pool(a, ky, kx, sy, sx, name)
    grad = data(pooled.shape, dtype, seed=1)
    want = ref_unpool(a, pooled, grad, ky, kx, sy, sx, name)
    e = ms.unpool(padded(a), padded(pooled), padded(grad), ky, kx, sy, sx, RED[name])
    check(run(e, a.shape, dtype), want, dtype)


@pytest.mark.parametrize("name", list(RED))
def test_pool_and_unpool_at_strides_whose_products_overflow(name):
    """A pshape lets windows start at any index times any stride: 2**62 * 2 or * 3 passes
    int64 and wrapped (a window past the image read rows from its start, or before it);
    each window past the image keeps the init value. unpool's (h + sy) / sy wrapped the same
    way at a stride near INDEX_MAX and dropped the gradient of every row past the first."""
    a = data((2, 1, 8, 8), np.float32, lo=-5, hi=6)
    big = 2 ** 62
    for ky, kx, sy, sx, oshape in ((2, 2, big, 2, (4, 4)), (2, 2, 2, big, (4, 4)),
                                   (3, 2, big, big, (4, 3))):
        want = ref_pool(a, ky, kx, sy, sx, name, oshape)
        got = run(ms.pool(T(a), ky, kx, sy, sx, RED[name], pshape=oshape), want.shape,
                  np.float32)
        np.testing.assert_array_equal(got, want, err_msg=f"{sy, sx}")
    s = 2 ** 63 - 1
    pooled = ref_pool(a, 3, 2, s, s, name)                    # one window: (1, 1)
    grad = data(pooled.shape, np.float32, seed=2)
    want = ref_unpool(a, pooled, grad, 3, 2, s, s, name)
    got = run(ms.unpool(T(a), T(pooled), T(grad), 3, 2, s, s, RED[name]), a.shape, np.float32)
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("name", list(RED))
def test_chpool_and_ch_unpool_at_pads_and_strides_past_int64(name):
    """chpool's output channel count (C - nsize + 2 pad + 1) // stride must be an index: a
    pad near 2**62 raised a bare OverflowError from the conversion, now a ShapeError that says
    so. ch_unpool's window range took (c + pad + stride) / stride, which wrapped at a stride
    or pad near INDEX_MAX and dropped gradients: each channel's pooled range is divided in
    unsigned arithmetic, against the loop reference."""
    a = data((2, 5, 2, 3), np.float32, lo=-3, hi=4)
    with pytest.raises(ms.ShapeError, match="chpool: .*channels"):
        ms.chpool(T(a), 3, RED[name], stride=1, pad=2 ** 62)
    big = 2 ** 63 - 1
    for stride, pad in ((big, 1), (1, big - 3), (big, big)):
        pooled = data((2, 3, 2, 3), np.float32, seed=4)
        grad = data((2, 3, 2, 3), np.float32, seed=5)
        want = ref_ch_unpool(a, pooled, grad, 3, name, stride, pad)
        got = run(ms.ch_unpool(T(a), T(pooled), T(grad), 3, RED[name], stride=stride, pad=pad),
                  a.shape, np.float32)
        np.testing.assert_array_equal(got, want, err_msg=f"stride={stride} pad={pad}")


def test_unpool_sum_is_the_adjoint_of_pool():
    rng = np.random.default_rng(3)
    x = rng.standard_normal((2, 7, 8))
    g = rng.standard_normal((2, 3, 2))
    px = run(ms.pool(T(x), 3, 3, 2, 3, ms.red.sum), g.shape, np.float64)
    ux = run(ms.unpool(T(x), T(px), T(g), 3, 3, 2, 3, ms.red.sum), x.shape, np.float64)
    np.testing.assert_allclose(np.sum(px * g), np.sum(x * ux), rtol=1e-12)


def test_fused_with_arithmetic():
    a = data((2, 6, 6), np.float32)
    b = data((2, 3, 3), np.float32, seed=2)
    want = ref_pool(a, 2, 2, 2, 2, "maximum") * 2 + b
    got = run(ms.pool(padded(a), 2, 2, 2, 2, ms.red.maximum) * 2 + T(b), b.shape, np.float32)
    np.testing.assert_array_equal(got, want)
    plan = ms.plan_for(ms.new_tensor(b.shape), ms.pool(T(a), 2, 2, 2, 2) * 2 + T(b))
    assert "g_pool_f32" in plan.disassemble()
    dst = T(b.copy())
    dst[:] = dst - ms.pool(T(a), 2, 2, 2, 2, ms.red.sum) / 4      # reads its destination too
    np.testing.assert_allclose(dst.numpy(), b - ref_pool(a, 2, 2, 2, 2, "sum") / 4, rtol=1e-6)
    # two gathers in one expression, and a saver
    dst = T(np.ones((4, 9), np.float32))
    img = data((1, 4, 4), np.float32)
    dst += ms.unpack_patch2col(T(img), 2, 2, 1) * ms.unpack_patch2col(T(img), 2, 2, 1)
    np.testing.assert_array_equal(dst.numpy(), 1 + ref_im2col(img, 2, 2, 1, 1, 1, 1) ** 2)


@pytest.mark.parametrize("threads", [1, 2])
def test_threads(threads):
    old = ms.get_num_threads()
    ms.set_num_threads(threads)
    try:
        rng = np.random.default_rng(4)
        a = rng.standard_normal((4, 4, 130, 130)).astype(np.float32)  # 67600 outputs: 2 blocks
        got = run(ms.pool(padded(a), 2, 2, 2, 2, ms.red.maximum) + 1, (4, 4, 65, 65), np.float32)
        want = a.reshape(4, 4, 65, 2, 65, 2).max(axis=(3, 5)) + 1
        np.testing.assert_array_equal(got, want)
        ug = run(ms.unpool(T(a), T(want - 1), T(np.ones_like(want)), 2, 2, 2, 2), a.shape,
                 np.float32)
        np.testing.assert_array_equal(ug, (a == np.repeat(np.repeat(want - 1, 2, 2), 2, 3)))
        img = rng.standard_normal((2, 3, 40, 40)).astype(np.float32)
        cols = run(ms.unpack_patch2col(padded(img), 3, 3, 1), (27, 2 * 38 * 38), np.float32)
        taps = [img[:, :, i:i + 38, j:j + 38] for i in range(3) for j in range(3)]
        want_cols = np.stack(taps, 1).transpose(2, 1, 0, 3, 4).reshape(27, -1)
        np.testing.assert_array_equal(cols, want_cols)
    finally:
        ms.set_num_threads(old)


# ---- chpool / ch_unpool ---------------------------------------------------------------------

CH_CASES = [((5, 2, 3), 3, 1, None), ((2, 5, 2, 2), 5, 1, None), ((2, 6, 1, 3), 3, 2, 1),
            ((4, 2, 2), 2, 1, 0), ((3, 1, 2), 2, 1, 3)]   # last: pad makes oC > C


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", list(RED))
@pytest.mark.parametrize("case", CH_CASES)
def test_chpool(dtype, name, case):
    shape, nsize, stride, pad = case
    a = data(shape, dtype)
    want = ref_chpool(a, nsize, name, stride, pad)
    e = ms.chpool(padded(a), nsize, RED[name]) if pad is None else \
        ms.chpool(padded(a), nsize, RED[name], stride, pad)
    check(run(e, want.shape, dtype), want, dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", list(RED))
@pytest.mark.parametrize("case", CH_CASES)
def test_ch_unpool(dtype, name, case):
    shape, nsize, stride, pad = case
    a = data(shape if len(shape) == 4 else (1,) + shape, dtype, lo=-2, hi=3)
    pooled = ref_chpool(a, nsize, name, stride, pad)
    grad = data(pooled.shape, dtype, seed=1)
    want = ref_ch_unpool(a, pooled, grad, nsize, name, stride, pad)
    args = () if pad is None else (stride, pad)
    e = ms.ch_unpool(padded(a), padded(pooled), padded(grad), nsize, RED[name], *args)
    check(run(e, a.shape, dtype), want, dtype)


def test_ch_unpool_sum_is_the_adjoint_of_chpool():
    rng = np.random.default_rng(5)
    x = rng.standard_normal((2, 6, 3, 4))
    g = rng.standard_normal((2, 6, 3, 4))
    px = run(ms.chpool(T(x), 5, ms.red.sum), g.shape, np.float64)
    ux = run(ms.ch_unpool(T(x), T(px), T(g), 5, ms.red.sum), x.shape, np.float64)
    np.testing.assert_allclose(np.sum(px * g), np.sum(x * ux), rtol=1e-12)


# ---- unpack_patch2col / pack_col2patch ------------------------------------------------------

PATCH_CASES = [((1, 3, 3), (2, 2, 1, 1, 1, 1)), ((2, 2, 5, 6), (3, 2, 1, 2, 1, 1)),
               ((2, 7, 7), (3, 3, 2, 2, 1, 1)), ((1, 2, 7, 8), (2, 3, 1, 2, 2, 3)),
               ((3, 1, 9, 9), (3, 2, 2, 1, 3, 2)), ((2, 1, 2, 4, 4), (2, 2, 2, 2, 1, 1))]


@pytest.mark.parametrize("dtype", DTYPES + [np.uint8, np.int8, np.int64])
@pytest.mark.parametrize("case", PATCH_CASES)
def test_unpack_patch2col(dtype, case):
    shape, (ky, kx, sy, sx, dy, dx) = case
    img = data(shape, dtype)
    want = ref_im2col(img, ky, kx, sy, sx, dy, dx)
    got = run(ms.unpack_patch2col(padded(img), ky, kx, sy, sx, dy, dx), want.shape, dtype)
    np.testing.assert_array_equal(got, want)
    if sx == sy and dx == dy:     # the 5-argument form
        got = run(ms.unpack_patch2col(T(img), ky, kx, sy, dy=dy), want.shape, dtype)
        np.testing.assert_array_equal(got, want)


PAD_CASES = [(1, 1), (2, 1), (0, 3), (5, 4)]   # last: rows and columns of zeros only


@pytest.mark.parametrize("dtype", DTYPES + [np.int8])
@pytest.mark.parametrize("case", PATCH_CASES)
def test_unpack_patch2col_of_pad_reads_the_unpadded_source(dtype, case):
    """im2col of pad(x) folds the padding into its indices: x itself is read, as a pitched
    tensor, a strided view or a staged expression, and the result is numpy's im2col of
    numpy's pad (the zeros of both, never f(0) of an expression)."""
    shape, (ky, kx, sy, sx, dy, dx) = case
    img = data(shape, dtype)
    neg = np.iinfo(dtype).min if np.dtype(dtype).kind == "i" else -np.inf
    for py, px in PAD_CASES:
        want = ref_im2col(np_pad(img, py, px), ky, kx, sy, sx, dy, dx)
        wide = np.concatenate([img, img], axis=-1)
        sources = {"pitched": padded(img),
                   "view": ms.slice_axis(T(wide), len(shape) - 1, 0, shape[-1])}
        for name, x in sources.items():
            got = run(ms.unpack_patch2col(ms.pad(x, py, px), ky, kx, sy, sx, dy, dx),
                      want.shape, dtype)
            np.testing.assert_array_equal(got, want, err_msg=f"{name} pad {py, px}")
        # an expression that is not 0 at 0: the padding stays 0, not max(0 + 0, neg)
        e = ms.pad(ms.F(ms.op.maximum, padded(img) + 0, neg), py, px)
        got = run(ms.unpack_patch2col(e, ky, kx, sy, sx, dy, dx), want.shape, dtype)
        np.testing.assert_array_equal(got, want, err_msg=f"expression pad {py, px}")


def test_unpack_patch2col_of_pad_has_no_stage_for_the_padded_image():
    """The padded image is never evaluated: im2col(pad(x)) reads x (no stage), and
    im2col(pad(F(relu, x))) stages the relu alone (one stage, not a pad stage over it)."""
    x = ms.from_numpy(np.arange(2 * 3 * 8 * 8, dtype=np.float32).reshape(2, 3, 8, 8) - 200)
    y = ms.new_tensor((27, 2 * 64))
    plain = ms.plan_for(y, ms.unpack_patch2col(ms.pad(x, 1), 3, 3, 1)).disassemble()
    assert "stage" not in plain and "pad" not in plain, plain
    nested = ms.plan_for(y, ms.unpack_patch2col(ms.pad(ms.F(ms.op.relu, x), 1), 3, 3, 1))
    text = nested.disassemble()
    assert text.count("stage") == 1 and "pad" not in text and "relu" in text, text
    y[:] = ms.unpack_patch2col(ms.pad(ms.F(ms.op.relu, x), 1), 3, 3, 1)
    np.testing.assert_array_equal(
        y.numpy(), ref_im2col(np_pad(np.maximum(x.numpy(), 0), 1, 1), 3, 3, 1, 1, 1, 1))


@pytest.mark.parametrize("threads", [1, 2])
def test_unpack_patch2col_of_padded_expression_in_bands(threads):
    """Large enough to run in column bands (each band stages its images' rows of the
    expression): every band's padding and halo right."""
    rng = np.random.default_rng(11)
    img = rng.standard_normal((3, 16, 30, 31)).astype(np.float32)
    old = ms.get_num_threads()
    ms.set_num_threads(threads)
    try:
        e = ms.unpack_patch2col(ms.pad(ms.F(ms.op.relu, T(img) * 2), 2, 1), 3, 3, 1, 2, 1, 1)
        want = ref_im2col(np_pad(np.maximum(img * 2, 0), 2, 1), 3, 3, 1, 2, 1, 1)
        np.testing.assert_array_equal(run(e, want.shape, np.float32), want)
    finally:
        ms.set_num_threads(old)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("width, stride", [(511, 1), (1023, 1), (510, 1), (1021, 2)])
def test_im2col_block_that_starts_deep_in_the_right_padding(dtype, width, stride):
    """A block of columns that starts two or more columns into the right padding (width 511,
    pad 2: ow 513, the block at column 512 starts at ox 512, one past the last image column
    + 1) is zeros only: its kernel once also stored a zero before its output, into the end of
    the register before it (b * 2 lost its last element of the block in float64)."""
    rng = np.random.default_rng(width)
    img = rng.standard_normal((1, 2, 3, width)).astype(dtype)
    col = ref_im2col(np_pad(img, 2, 2), 3, 3, stride, stride, 1, 1)
    b = rng.standard_normal(col.shape).astype(dtype)
    for make, want in [
            (lambda c: c, col),
            (lambda c: T(b) * 2 + c, b * 2 + col),
            (lambda c: c + T(b) * 2, col + b * 2),
            (lambda c: ms.F(ms.op.relu, T(b) * 2) * c, np.maximum(b * 2, 0) * col)]:
        e = make(ms.unpack_patch2col(ms.pad(T(img), 2), 3, 3, stride, stride))
        np.testing.assert_array_equal(run(e, want.shape, dtype), want)


@pytest.mark.parametrize("dtype", DTYPES + [np.int8])
@pytest.mark.parametrize("case", PATCH_CASES)
def test_pack_col2patch(dtype, case):
    shape, (ky, kx, sy, sx, dy, dx) = case
    rows, cols = ref_im2col(np.zeros(shape), ky, kx, sy, sx, dy, dx).shape
    mat = data((rows, cols), dtype, lo=-60, hi=60)
    want = ref_col2im(mat, shape, ky, kx, sy, sx, dy, dx)
    got = run(ms.pack_col2patch(padded(mat), shape, ky, kx, sy, sx, dy, dx), shape, dtype)
    check(got, want, dtype)


def test_pack_col2patch_is_the_adjoint_of_unpack_patch2col():
    rng = np.random.default_rng(6)
    shape, ky, kx, sy, sx, dy, dx = (2, 3, 9, 8), 3, 2, 2, 1, 2, 3
    x = rng.standard_normal(shape)
    ux = run(ms.unpack_patch2col(T(x), ky, kx, sy, sx, dy, dx),
             ref_im2col(x, ky, kx, sy, sx, dy, dx).shape, np.float64)
    m = rng.standard_normal(ux.shape)
    pm = run(ms.pack_col2patch(T(m), shape, ky, kx, sy, sx, dy, dx), shape, np.float64)
    np.testing.assert_allclose(np.sum(ux * m), np.sum(x * pm), rtol=1e-12)


def test_convolution_through_im2col_and_dot():
    """guide/neuralnet/convnet: conv = dot(weight, unpack_patch2col(img)), then max-pool."""
    rng = np.random.default_rng(7)
    img = rng.standard_normal((2, 3, 8, 8)).astype(np.float64)
    w = rng.standard_normal((4, 3 * 3 * 3))
    cols = ms.new_tensor((27, 2 * 36), dtype=np.float64)
    cols[:] = ms.unpack_patch2col(T(img), 3, 3, 1)
    out = ms.new_tensor((4, 72), dtype=np.float64)
    out[:] = ms.dot(T(w), cols)
    conv = np.zeros((4, 2, 6, 6))
    for o, n, y, x in itertools.product(range(4), range(2), range(6), range(6)):
        conv[o, n, y, x] = np.sum(w[o].reshape(3, 3, 3) * img[n, :, y:y + 3, x:x + 3])
    np.testing.assert_allclose(out.numpy().reshape(4, 2, 6, 6), conv, rtol=1e-10)
    out4 = ms.new_tensor((4, 2, 6, 6), dtype=np.float64)
    out4[:] = ms.reshape(out, (4, 2, 6, 6))
    pooled = run(ms.pool(out4, 2, 2, 2, 2), (4, 2, 3, 3), np.float64)
    np.testing.assert_allclose(pooled, conv.reshape(4, 2, 3, 2, 3, 2).max(axis=(3, 5)),
                               rtol=1e-10)


# ---- errors -------------------------------------------------------------------------------

def _errors():
    f = np.float32
    x2, x3, x4 = T(np.zeros((4, 4), f)), T(np.zeros((3, 4, 4), f)), T(np.zeros((1, 3, 4, 4), f))
    p22, p33 = T(np.zeros((2, 2), f)), T(np.zeros((3, 3), f))
    return [
        (lambda: ms.pool(ms.dot(x2, x2), 2, 2, 2, 2), TypeError,
         "pool: a dot.*kComplex.*assign it to a tensor first"),
        (lambda: ms.pool(T(np.zeros(4, f)), 2, 2, 2, 2), ms.ShapeError, "at least 2 axes"),
        (lambda: ms.pool(x2, 5, 2, 1, 1), ms.ShapeError,
         "PoolingExp: kernel must be smaller than image"),
        (lambda: ms.pool(x2, 2, 5, 1, 1), ms.ShapeError,
         "PoolingExp: kernel must be smaller than image"),
        (lambda: ms.pool(x2, 2, 2, 0, 1), ms.ShapeError, "pool: sy must be >= 1, got 0"),
        (lambda: ms.pool(x2, 0, 2, 1, 1), ms.ShapeError, "pool: ky must be >= 1, got 0"),
        (lambda: ms.pool(x2, 2, 2, 1, 1, "max"), TypeError,
         f"pool: reducer must be {reducer_names()}, got 'max'"),
        (lambda: ms.pool(x2, 2, 2, 1, 1, pshape=(1, 2, 3)), ms.ShapeError,
         r"pool: pshape must have 2 entries, got \(1, 2, 3\)"),
        (lambda: ms.unpool(x2, p22, p33, 2, 2, 2, 2), ms.ShapeError,
         "UnPoolingExp: pooled shape mismatch"),
        (lambda: ms.unpool(x3, p22, p22, 2, 2, 2, 2), ms.ShapeError,
         "UnPoolingExp: pool and src shape mismatch"),
        (lambda: ms.unpool(x2, p22, T(np.zeros((2, 2), np.float64)), 2, 2, 2, 2), ms.DTypeError,
         "unpool: data_src, data_pooled and grad_pooled must share one dtype, got float32, "
         "float32, float64"),
        (lambda: ms.unpool(x2, ms.dot(p22, p22), p22, 2, 2, 2, 2), TypeError,
         "unpool: a dot.*kComplex.*assign it to a tensor first"),
        (lambda: ms.unpool(x2, p22, p22, 2, 2, 2, 2, ms.red), TypeError, "unpool: reducer"),
        (lambda: ms.chpool(x2, 3, ms.red.sum), ms.ShapeError,
         r"chpool: the source must have at least 3 axes, got shape \(4,4\)"),
        (lambda: ms.chpool(x3, 2, ms.red.sum), ms.ShapeError,
         "chpool: if no pad is specified, local size must be odd"),
        (lambda: ms.chpool(x3, 5, ms.red.sum), ms.ShapeError,
         "chpool: local size must be smaller than nchannels"),
        (lambda: ms.chpool(x3, 3, ms.red.sum, 0, 1), ms.ShapeError,
         "chpool: stride must be >= 1, got 0"),
        (lambda: ms.chpool(x3, 3, ms.red.sum, 1, -1), ms.ShapeError,
         "chpool: pad must be >= 0, got -1"),
        (lambda: ms.chpool(x3, 3, None), TypeError, "chpool: reducer"),
        (lambda: ms.ch_unpool(x4, x4, T(np.zeros((1, 2, 4, 4), f)), 3, ms.red.sum), ms.ShapeError,
         "ChannelUnPoolingExp: data and grad shape mismatch"),
        (lambda: ms.ch_unpool(x4, T(np.zeros((1, 3, 4, 5), f)), T(np.zeros((1, 3, 4, 5), f)), 3,
                              ms.red.sum), ms.ShapeError,
         "ChannelUnPoolingExp: pooled tensor and src tensor shape mismatch5 vs 4"),
        (lambda: ms.ch_unpool(x4, x3, x3, 3, ms.red.sum), ms.ShapeError,
         "ChannelUnPoolingExp: pooled tensor and src tensor shape mismatch"),
        (lambda: ms.ch_unpool(x4, x4, "x", 3, ms.red.sum), TypeError,
         "ch_unpool: the source must be a tensor or an expression, got str"),
        (lambda: ms.unpack_patch2col(x2, 2, 2, 1), ms.ShapeError,
         "unpack_patch2col: the source must have at least 3 axes"),
        (lambda: ms.unpack_patch2col(x3, 5, 2, 1), ms.ShapeError,
         "UnpackPatchToCol:image shape smaller than patch size"),
        (lambda: ms.unpack_patch2col(x3, 3, 3, 1, 1, 2), ms.ShapeError,     # dilated: 5 > 4
         "UnpackPatchToCol:image shape smaller than patch size"),
        (lambda: ms.unpack_patch2col(x3, 2, 2, 1, 1, 0), ms.ShapeError,
         "unpack_patch2col: dy must be >= 1, got 0"),
        (lambda: ms.pack_col2patch(x3, (3, 4, 4), 2, 2, 1), ms.ShapeError,
         r"pack_col2patch: the source must be 2-D, got shape \(3,4,4\)"),
        (lambda: ms.pack_col2patch(x2, (4, 4), 2, 2, 1), ms.ShapeError,
         "pack_col2patch: imshape must have at least 3 axes"),
        (lambda: ms.pack_col2patch(x2, (1, 4, 4), 5, 2, 1), ms.ShapeError,
         "PackColToPatch:image shape smaller than patch size"),
        (lambda: ms.pack_col2patch(x2, (1, 4, 4), 2, 2, 1), ms.ShapeError,
         r"PackColToPatchExp: src.size\(1\) mismatch"),
        (lambda: ms.pack_col2patch(T(np.zeros((3, 9), f)), (1, 4, 4), 2, 2, 1), ms.ShapeError,
         r"PackColToPatchExp: src.size\(0\) mismatch"),
        (lambda: ms.pack_col2patch(ms.dot(x2, x2), (1, 4, 4), 2, 2, 1), TypeError,
         "pack_col2patch: a dot.*kComplex"),
    ]


@pytest.mark.parametrize("k", range(len(_errors())))
def test_errors(k):
    fn, exc, msg = _errors()[k]
    with pytest.raises(exc, match=msg):
        fn()


def test_gather_takes_parameters_in_row_order_or_by_name():
    """extension/build.gather: a reader's parameters as a tuple in its row's order (what the
    spatial constructors pass) build the node the names build; a tuple of the wrong length,
    or a tuple and names together, is a TypeError naming the row's parameters."""
    from mshadow.extension.build import gather
    x = T(np.arange(2 * 5 * 5, dtype=np.float32).reshape(2, 5, 5))
    by_order = gather("pool", (x,), (2, 2, 2), "f32", (ms.readers.REDUCER_IDS["sum"],
                                                       5, 5, 2, 2, 2, 2, 2))
    by_name = gather("pool", (x,), (2, 2, 2), "f32", red=ms.readers.REDUCER_IDS["sum"], H=5,
                     W=5, ky=2, kx=2, sy=2, sx=2, oH=2)
    a, b = ms.new_tensor((2, 2, 2)), ms.new_tensor((2, 2, 2))
    a[:] = by_order
    b[:] = by_name
    want = x.numpy()[:, :4, :4].reshape(2, 2, 2, 2, 2).sum(axis=(2, 4))
    np.testing.assert_array_equal(a.numpy(), want)
    np.testing.assert_array_equal(b.numpy(), want)
    with pytest.raises(TypeError, match=r"reader pool takes the parameters \('red', 'H'"):
        gather("pool", (x,), (2, 2, 2), "f32", (0, 5, 5))
    with pytest.raises(TypeError, match=r"in order or by name, got .* and \['H'\]"):
        gather("pool", (x,), (2, 2, 2), "f32", (0, 5, 5, 2, 2, 2, 2, 2), H=5)


def _fold_in_order(a, ky, kx, sy, sx, name, oshape):
    """pool in the storage type, each window folded in mshadow's order (its rows, then its
    columns) with readers.REDUCER_TABLE's folds: bit for bit what the kernel computes for
    float32, float64 and integers. Vectorized over the outputs; a clipped window skips its
    positions outside the image."""
    H, W = a.shape[-2:]
    oh, ow = oshape
    dt = a.dtype
    acc = np.full(a.shape[:-2] + (oh, ow), init_value(name, dt), dtype=dt)
    py, px = np.arange(oh)[:, None], np.arange(ow)[None, :]
    with np.errstate(over="ignore", invalid="ignore"):
        for i in range(ky):
            for j in range(kx):
                y, x = py * sy + i, px * sx + j
                inside = (py * sy < H) & (y < H) & (px * sx < W) & (x < W)
                v = a[..., np.minimum(y, H - 1), np.minimum(x, W - 1)]
                if name == "sum":
                    new = acc + v
                elif dt.kind == "f":     # (a == a && !(a >= b)) ? b : a, and its minimum
                    keep = (acc != acc) | ((acc >= v) if name == "maximum" else (acc <= v))
                    new = np.where(keep, acc, v)
                else:
                    new = np.maximum(acc, v) if name == "maximum" else np.minimum(acc, v)
                acc = np.where(inside, new, acc)
    return acc


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32, np.uint8])
@pytest.mark.parametrize("name", list(RED))
@pytest.mark.parametrize("k, s", [(2, 2), (3, 2), (3, 1), (2, 3), (1, 1), (5, 4)])
def test_pool_wide_rows_bit_for_bit(dtype, name, k, s):
    """Rows of many outputs (several 64-output tiles of the inner windows, blocks starting
    past column 0, a partial last tile) and windows past the border (pshape), NaNs among
    the floats: every output equals the in-order fold, bit for bit."""
    rng = np.random.default_rng(k * 10 + s)
    H, W = 2 * k + 3, 700 * s + k + 5
    a = data((2, 3, H, W), dtype, seed=k + s)
    if np.dtype(dtype).kind == "f":
        a = (a + rng.random(a.shape)).astype(dtype)          # sums that round
        a.reshape(-1)[rng.choice(a.size, 40, replace=False)] = np.nan
    natural = ((H - k) // s + 1, (W - k) // s + 1)
    for oshape in (natural, (natural[0] + 2, natural[1] + 3)):
        want = _fold_in_order(a, k, k, s, s, name, oshape)
        for src in (T(a), padded(a)):
            got = run(ms.pool(src, k, k, s, s, RED[name], pshape=oshape), want.shape, dtype)
            np.testing.assert_array_equal(got.view(f"u{a.itemsize}"),
                                          want.view(f"u{a.itemsize}"))



@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32])
@pytest.mark.parametrize("name", ["maximum", "minimum", "sum"])
@pytest.mark.parametrize("k, s", [(2, 2), (3, 1), (3, 2)])
def test_pool_narrow_rows_bit_for_bit(dtype, name, k, s):
    """Rows of 1 to 17 whole windows: the element loop, the selecting folds' loops with no
    branch (2-7 windows), the vectorized tiles (8 or more), with windows past the border.
    Two NaNs of different payloads in one window (the first one a selecting fold holds must
    stick; which payload a sum of two keeps is the compiler's operand order, not checked),
    +0 and -0 ties and infinities: every output equals the in-order fold, bit for bit."""
    rng = np.random.default_rng(k * 10 + s)
    for m in range(1, 18):
        W = (m - 1) * s + k
        a = data((3, 2, k + 2 * s, W), dtype, seed=m)
        if np.dtype(dtype).kind == "f":
            a = (a + rng.random(a.shape)).astype(dtype)
            flat = a.reshape(-1)
            flat[rng.choice(a.size, 6, replace=False)] = np.inf
            flat[rng.choice(a.size, 6, replace=False)] = -np.inf
            flat[rng.choice(a.size, 6, replace=False)] = 0.0
            flat[rng.choice(a.size, 6, replace=False)] = -0.0
            bits = flat.view(f"u{a.itemsize}")
            quiet = int(np.array(np.nan, dtype).view(f"u{a.itemsize}"))   # (numpy 1.x: no uint64 | int)
            for payload, at in ((1, 0), (2, 1)) if name != "sum" else ():
                bits[at] = quiet | payload
                bits[rng.integers(a.size)] = quiet | payload
        natural = ((a.shape[2] - k) // s + 1, m)
        for oshape in (natural, (natural[0] + 1, m + 2)):
            want = _fold_in_order(a, k, k, s, s, name, oshape)
            got = run(ms.pool(T(a), k, k, s, s, RED[name], pshape=oshape), want.shape, dtype)
            np.testing.assert_array_equal(got.view(f"u{a.itemsize}"),
                                          want.view(f"u{a.itemsize}"), err_msg=f"m={m}")


@pytest.mark.usefixtures("restore_engine_state")
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16, np.uint8, np.int8,
                                   np.int32, np.int64])
@pytest.mark.parametrize("name", ["maximum", "minimum"])
def test_pool_small_rows_bit_for_bit(dtype, name):
    """Rows of 1 to 7 whole windows over a dense source: the call's rows run by the pool
    kernel's small-rows tile (16-byte vectors of 2 to 16 lanes, a row's image and window row
    counted on, window columns folded in pairs; 2x2 at stride 2 with constant loops), for
    tensors, pitched tensors and an expression, windows of 1 to 4 rows and columns at
    strides 1 to 3, from an image's first row and (two threads over 2,000 images) from rows
    within one. Two NaNs of different payloads in one window (the first must stick), +0 / -0
    ties and infinities: every output equals the in-order fold, bit for bit; a pshape past
    the border takes the generic tile, with the same bits."""
    rng = np.random.default_rng(3)
    isz = np.dtype(dtype).itemsize
    for ky, kx, sy, sx in ((2, 2, 2, 2), (1, 1, 1, 1), (3, 3, 2, 2), (2, 3, 1, 3),
                           (3, 1, 2, 1), (4, 4, 4, 4), (2, 2, 1, 2), (3, 2, 3, 2)):
        for m in range(1, 8):
            oh = 1 + m % 3
            H, W = (oh - 1) * sy + ky + m % 2, (m - 1) * sx + kx + (sx - 1) * (m % 2)
            a = data((3, 5, H, W), dtype, seed=m)
            if np.dtype(dtype).kind == "f":
                flat = a.reshape(-1)
                for v, count in ((np.inf, 3), (-np.inf, 3), (0.0, 6), (-0.0, 6)):
                    flat[rng.choice(a.size, count, replace=False)] = v
                bits = flat.view(f"u{isz}")
                quiet = int(np.array(np.nan, dtype).view(f"u{isz}"))
                bits[0], bits[1] = quiet | 1, quiet | 2          # one window, two payloads
                bits[rng.integers(a.size)] = quiet | 3
            natural = ((H - ky) // sy + 1, (W - kx) // sx + 1)
            assert natural[1] == m
            for oshape in (natural, (natural[0] + 1, m + 1)):
                want = _fold_in_order(a, ky, kx, sy, sx, name, oshape)
                for src in (T(a), padded(a), T(a) * 1):
                    got = run(ms.pool(src, ky, kx, sy, sx, RED[name], pshape=oshape),
                              want.shape, dtype)
                    np.testing.assert_array_equal(
                        got.view(f"u{isz}"), want.view(f"u{isz}"),
                        err_msg=f"{ky}x{kx} s{sy},{sx} m={m} oshape={oshape}")
    a = data((2000, 3, 8, 8), dtype, seed=1)        # calls that start inside an image
    want = _fold_in_order(a, 2, 2, 2, 2, name, (4, 4))
    ms.set_num_threads(2)
    got = run(ms.pool(T(a), 2, 2, 2, 2, RED[name]), want.shape, dtype)
    np.testing.assert_array_equal(got.view(f"u{isz}"), want.view(f"u{isz}"))



def _im2col_fancy(img, ky, kx, sy, sx, dy, dx):
    """unpack_patch2col by numpy indexing: row (c*ky + i)*kx + j, column (n*oh + oy)*ow + ox
    holds img[n, c, oy*sy + i*dy, ox*sx + j*dx]."""
    N, C, H, W = img.shape
    oh, ow = (H - (dy * (ky - 1) + 1)) // sy + 1, (W - (dx * (kx - 1) + 1)) // sx + 1
    c, i, j, n, oy, ox = np.ix_(range(C), range(ky), range(kx), range(N), range(oh), range(ow))
    return img[n, c, oy * sy + i * dy, ox * sx + j * dx].reshape(C * ky * kx, N * oh * ow)


def _col2im_in_order(mat, imshape, ky, kx, sy, sx, dy, dx):
    """pack_col2patch with each pixel's taps added in the kernel's order (a, then b, both
    descending) from 0 in the storage type: bit for bit what the kernel computes."""
    N, C, H, W = imshape
    oh, ow = (H - (dy * (ky - 1) + 1)) // sy + 1, (W - (dx * (kx - 1) + 1)) // sx + 1
    n, c, h, w = np.ix_(range(N), range(C), range(H), range(W))
    acc = np.zeros(imshape, mat.dtype)
    for a in range(ky - 1, -1, -1):
        for b in range(kx - 1, -1, -1):
            ty, tx = h - a * dy, w - b * dx
            ok = (ty >= 0) & (ty % sy == 0) & (ty // sy < oh) & (tx >= 0) & (tx % sx == 0) \
                & (tx // sx < ow)
            row = (c * ky + a) * kx + b
            col = (n * oh + np.clip(ty // sy, 0, oh - 1)) * ow + np.clip(tx // sx, 0, ow - 1)
            acc = np.where(ok, acc + mat[row, col], acc)
    return acc


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32])
@pytest.mark.parametrize("k, s, d", [(3, 1, 1), (3, 2, 1), (2, 3, 1), (3, 1, 2), (1, 1, 1),
                                     (5, 2, 2)])
def test_im2col_and_col2im_wide_rows_bit_for_bit(dtype, k, s, d):
    """Rows wider than a block (blocks from past column 0), runs that cross image rows and
    images, tiles of col2im: im2col equals numpy's indexing, col2im the in-order tap sum,
    bit for bit; contiguous and pitched sources."""
    rng = np.random.default_rng(k * 100 + s * 10 + d)
    img = data((2, 3, 2 * k * d + 5, 530 + 40 * s + k * d), dtype, seed=k + s + d)
    want = _im2col_fancy(img, k, k, s, s, d, d)
    for src in (T(img), padded(img)):
        got = run(ms.unpack_patch2col(src, k, k, s, s, d, d), want.shape, dtype)
        np.testing.assert_array_equal(got, want)
    mat = data(want.shape, dtype, seed=7)
    if np.dtype(dtype).kind == "f":
        mat = (mat + rng.random(mat.shape)).astype(dtype)       # sums that round
    want2 = _col2im_in_order(mat, img.shape, k, k, s, s, d, d)
    for src in (T(mat), padded(mat)):
        got = run(ms.pack_col2patch(src, img.shape, k, k, s, s, d, d), img.shape, dtype)
        assert got.tobytes() == want2.tobytes()


@pytest.mark.parametrize("src_kind", ["tensor", "expr"])
@pytest.mark.parametrize("shape, k, s", [((1, 2, 8, 8), (2, 2), (2, 2)), ((5, 7), (3, 2), (1, 3)),
                                         ((2, 3, 9, 4), (9, 4), (5, 1)),
                                         ((3, 6, 6), (1, 1), (7, 7))])
@pytest.mark.parametrize("name", list(RED))
def test_pool_compiled_path_builds_the_python_paths_node(src_kind, shape, k, s, name):
    """_core.pool_node (pool's common case, compiled) builds the node the checked Python
    path builds: pshape spelled out at its default takes that path. Same IR node, shape,
    parameters and leaves; and both evaluate to the numpy fold."""
    x = T(np.random.default_rng(1).uniform(-2, 2, shape).astype(np.float32))
    src = x if src_kind == "tensor" else ms.F(ms.op.relu, x * 2)
    (ky, kx), (sy, sx) = k, s
    oshape = ((shape[-2] - ky) // sy + 1, (shape[-1] - kx) // sx + 1)
    fast = ms.pool(src, ky, kx, sy, sx, RED[name])
    slow = ms.pool(src, ky, kx, sy, sx, RED[name], pshape=oshape)
    assert ms._core.pool_node(src, ky, kx, sy, sx, ms.readers.REDUCER_IDS[name]) is not None
    assert fast.key == slow.key and type(fast) is type(slow)
    assert fast.shape == slow.shape == shape[:-2] + oshape and type(fast.shape) is ms.Shape
    assert fast.args.params == slow.args.params and fast.args is fast.leaves[0]
    assert fast.leaves[1:] == slow.leaves[1:] and fast.scalars == slow.scalars
    a = x.numpy() if src_kind == "tensor" else np.maximum(x.numpy() * 2, 0)
    want = _fold_in_order(a, ky, kx, sy, sx, name, oshape)
    np.testing.assert_array_equal(run(fast, fast.shape, np.float32), want)
    np.testing.assert_array_equal(run(slow, slow.shape, np.float32), want)


def test_pool_compiled_path_leaves_every_other_case_to_the_checks():
    """pool_node returns None (nothing built) wherever its fast checks fail, and pool's
    Python checks then take the case: numpy integers are accepted, bools, floats, sizes
    past the image, zero or huge strides and sources of too few axes get their errors."""
    x = T(np.zeros((2, 5, 5), np.float32))
    red = ms.readers.REDUCER_IDS["maximum"]
    for args in [(np.int64(2), 2, 2, 2), (True, 2, 2, 2), (2.0, 2, 2, 2), (6, 2, 2, 2),
                 (2, 2, 0, 2), (2, 2, 2, 2 ** 70), (2, 2, -1, 1)]:
        assert ms._core.pool_node(x, *args, red) is None
    assert ms._core.pool_node(T(np.zeros(5, np.float32)), 1, 1, 1, 1, red) is None
    assert ms._core.pool_node(ms.sum_rows(T(np.zeros((3, 4), np.float32))), 1, 1, 1, 1,
                              red) is None
    assert ms.pool(x, np.int64(2), 2, 2, 2).shape == (2, 2, 2)
    with pytest.raises(ms.ShapeError, match="PoolingExp: kernel must be smaller than image"):
        ms.pool(x, 6, 2, 2, 2)
    with pytest.raises(ms.ShapeError, match="pool: sy must be >= 1, got 0"):
        ms.pool(x, 2, 2, 0, 2)
    with pytest.raises(ms.ShapeError, match="pool: the source must have at least 2 axes"):
        ms.pool(T(np.zeros(5, np.float32)), 1, 1, 1, 1)
    with pytest.raises(ms.IntegerArgumentError, match="pool: sx must be an integer, got 2.0"):
        ms.pool(x, 2, 2, 2, 2.0)
    with pytest.raises(ms.ShapeError, match=r"pool: sx = 1180591620717411303424 is out of"):
        ms.pool(x, 2, 2, 2, 2 ** 70)
    assert ms.pool(x, 2, 2, 2, True).shape == (2, 2, 4)     # operator.index(True) == 1


@pytest.mark.usefixtures("restore_engine_state")
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_pool_stride_two_tiles_bit_for_bit_at_every_level(dtype):
    """Stride-2 windows over a dense row take, at AVX-512, a tile that first gathers each
    window column's elements with a two-register permute (masked loads at the row's end),
    then folds them with the reducer row's own fold: the in-order fold's bits at every
    level, for rows of 8 to 70 windows (16-lane blocks cut short, a second 64-output tile),
    1 to 4 window columns, every reducer, NaN payloads, signed zeros and infinities; from a
    dense tensor, a pitched one and an expression (x * 1: a strided source takes the
    generic tiles)."""
    from mshadow.testing import simd_levels
    rng = np.random.default_rng(7)
    names = ["maximum", "minimum", "sum", "product"]
    reds = dict(RED, product=ms.red.product)
    for m in (8, 9, 15, 16, 17, 31, 33, 63, 64, 65, 70):
        for k in (1, 2, 3, 4):
            W = (m - 1) * 2 + k
            a = (rng.random((2, 3, k + 2, W)) + 0.5).astype(dtype)
            flat = a.reshape(-1)
            flat[rng.choice(a.size, 4, replace=False)] = np.inf
            flat[rng.choice(a.size, 4, replace=False)] = -0.0
            flat[rng.choice(a.size, 4, replace=False)] = 0.0
            bits = flat.view(f"u{a.itemsize}")
            quiet = int(np.array(np.nan, dtype).view(f"u{a.itemsize}"))
            bits[rng.integers(a.size)] = quiet | 1
            bits[rng.integers(a.size)] = quiet | 2
            oshape = ((a.shape[2] - k) // 2 + 1, m)
            for name in names:
                if name == "product":   # products of 4+ values of [0.5, 1.5): no overflow
                    want = np.empty(a.shape[:2] + oshape, dtype)
                    for oy in range(oshape[0]):
                        for ox in range(m):
                            acc = np.ones(a.shape[:2], dtype)
                            for i in range(k):
                                for j in range(k):
                                    with np.errstate(invalid="ignore"):   # inf * 0
                                        acc = (acc * a[:, :, oy * 2 + i, ox * 2 + j]).astype(dtype)
                            want[:, :, oy, ox] = acc
                else:
                    want = _fold_in_order(a, k, k, 2, 2, name, oshape)
                for level in simd_levels():
                    ms.set_simd_level(level)
                    for src in (T(a), padded(a), T(a) * 1):
                        got = run(ms.pool(src, k, k, 2, 2, reds[name], pshape=oshape),
                                  want.shape, dtype)
                        if name in ("sum", "product"):   # a NaN's payload: the compiler's
                            np.testing.assert_array_equal(got, want)   # operand order
                        else:
                            np.testing.assert_array_equal(
                                got.view(f"u{a.itemsize}"), want.view(f"u{a.itemsize}"),
                                err_msg=f"m={m} k={k} {name} {level}")
