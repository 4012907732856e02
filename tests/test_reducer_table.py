"""A reducer is one row of readers.REDUCER_TABLE: MXNet's red::product, added as a row, works
everywhere a reducer is taken, against numpy's np.multiply.reduce.

float16 folds in float32 and is rounded once at the end, as ms.sum and every float16
computation do; integers wrap in their own type (np.multiply.reduce with dtype=int32).
Where a reducer needs a column the product row leaves empty (unpool's PartialGrad, the
arg form of mask=True) the call is refused with the accepted reducers named.
"""
import itertools

import numpy as np
import pytest

import mshadow as ms
from mshadow import nn

PROD_DTYPES = (np.float32, np.float64, np.int32, np.float16)
RTOL = {np.float32: 1e-4, np.float64: 1e-12, np.float16: 2e-3}


def values(shape, dtype, seed=0):
    """Nonzero values whose products stay in range: floats of magnitude 0.9..1.1 with either
    sign, integers in +-1..5 (their products wrap)."""
    rng = np.random.default_rng(seed)
    sign = rng.choice([-1, 1], size=shape)
    if np.dtype(dtype).kind == "i":
        return (sign * rng.integers(1, 6, size=shape)).astype(dtype)
    return (sign * rng.uniform(0.9, 1.1, size=shape)).astype(dtype)


def oracle(a, axes, keepdims=False):
    """np.multiply.reduce: integers in their own type (wrapping), floats in float64, then
    rounded once to the dtype."""
    if a.dtype.kind == "i":
        return np.multiply.reduce(a, axis=axes, dtype=a.dtype, keepdims=keepdims)
    wide = np.multiply.reduce(a.astype(np.float64), axis=axes, keepdims=keepdims)
    return np.asarray(wide).astype(a.dtype)


def check(got, want):
    assert got.dtype == want.dtype and got.shape == want.shape
    if want.dtype.kind == "i":
        np.testing.assert_array_equal(got, want)
    else:
        np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64),
                                   rtol=RTOL[want.dtype.type], atol=0)


def run(exp, shape, dtype):
    dst = ms.new_tensor(shape, 0, dtype=dtype)
    dst[:] = exp
    return dst.numpy().copy()


# the source as numpy reduces it in place (a tensor), and as an expression the fused
# reduction evaluates: rows of 130 are reduced in registers (reduce_prod per block, or
# accumulated with multo down a leading axis), rows of 16 a chunk at a time
SOURCES = {"tensor": lambda t: t, "expression": lambda t: t * 1}
SHAPES = [(3, 4, 130), (3, 4, 16)]


@pytest.mark.parametrize("dtype", PROD_DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("source", SOURCES)
@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("axis", [0, 1, 2])
@pytest.mark.parametrize("keepdim", [False, True], ids=["with_axis", "keepdim"])
def test_reduce_with_axis_and_keepdim(dtype, source, shape, axis, keepdim):
    a = values(shape, dtype)
    src = SOURCES[source](ms.from_numpy(a))
    fn = ms.reduce_keepdim if keepdim else ms.reduce_with_axis
    want = oracle(a, axis, keepdims=keepdim)
    check(run(fn(src, axis, ms.red.product), want.shape, dtype), want)


@pytest.mark.parametrize("dtype", PROD_DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("source", SOURCES)
@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("dimkeep", [0, 1, 2])
def test_reduce_except_dim(dtype, source, shape, dimkeep):
    a = values(shape, dtype)
    src = SOURCES[source](ms.from_numpy(a))
    want = oracle(a, tuple(k for k in range(3) if k != dimkeep))
    check(run(ms.reduce_except_dim(src, dimkeep, ms.red.product), want.shape, dtype), want)


@pytest.mark.parametrize("dtype", PROD_DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("axis", [0, 1, 2])
def test_nested_as_a_chainer(dtype, axis):
    # inside another expression reduce_with_axis is mshadow's chainer: the reduce_axis /
    # reduce_last reader folds each output element's values with the row's C fold
    a = values((3, 5, 7), dtype)
    exp = ms.reduce_with_axis(ms.from_numpy(a), axis, ms.red.product) + 0
    dst = ms.new_tensor(exp.shape, 0, dtype=dtype)
    assert "g_reduce_" in ms.plan_for(dst, exp).disassemble()
    check(run(exp, exp.shape, dtype), oracle(a, axis))


@pytest.mark.parametrize("dtype", PROD_DTYPES, ids=lambda d: np.dtype(d).name)
def test_map_reduce_keep_lowest_and_high_dim(dtype):
    a = values((6, 4, 5), dtype)
    dst = ms.new_tensor((5,), 0, dtype=dtype)
    nn.map_reduce_keep_lowest(dst, ms.from_numpy(a), reducer=ms.red.product)
    check(dst.numpy().copy(), oracle(a, (0, 1)))
    dst = ms.new_tensor((4,), 0, dtype=dtype)
    nn.map_reduce_keep_high_dim(dst, ms.from_numpy(a), 1, reducer=ms.red.product)
    check(dst.numpy().copy(), oracle(a, (0, 2)))


def _ref_pool(a, ky, kx, sy, sx):
    H, W = a.shape[-2:]
    oh, ow = (H - ky) // sy + 1, (W - kx) // sx + 1
    out = np.empty(a.shape[:-2] + (oh, ow), a.dtype)
    for py, px in itertools.product(range(oh), range(ow)):
        win = a[..., py * sy:py * sy + ky, px * sx:px * sx + kx]
        out[..., py, px] = oracle(win, (-2, -1))
    return out


@pytest.mark.parametrize("dtype", PROD_DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("window", [(2, 2, 2, 2), (3, 2, 1, 2)])
def test_pool(dtype, window):
    a = values((2, 3, 7, 8), dtype)
    want = _ref_pool(a, *window)
    check(run(ms.pool(ms.from_numpy(a), *window, ms.red.product), want.shape, dtype), want)
    # of an expression: a rows stage evaluates the windows' rows first
    check(run(ms.pool(ms.from_numpy(a) * 1, *window, ms.red.product), want.shape, dtype), want)


@pytest.mark.parametrize("dtype", PROD_DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("nsize", [1, 3])
def test_chpool(dtype, nsize):
    a = values((2, 5, 3, 4), dtype)
    pad, C = nsize // 2, a.shape[1]
    want = np.stack([oracle(a[:, max(c - pad, 0):min(c - pad + nsize, C)], 1)
                     for c in range(C)], axis=1)
    check(run(ms.chpool(ms.from_numpy(a), nsize, ms.red.product), want.shape, dtype), want)


# ---- float16 folds in float32, as its sum does ---------------------------------------------
def _half_running_product(vals):
    """The product of ``vals`` folded in float16, each step rounded to half."""
    acc = np.float16(1)
    with np.errstate(over="ignore"):
        for v in vals:
            acc = np.float16(acc * np.float16(v))
    return acc


def _overflows_half(shape):
    """Runs of eight 8s then eight 1/8s along the last axis: the product is exactly 1, but
    a float16 running product overflows at 8**6 > 65504."""
    a = np.resize(np.array([8.0] * 8 + [0.125] * 8, np.float16), shape)
    assert np.isinf(_half_running_product(a.reshape(-1, shape[-1])[0]))
    return a


@pytest.mark.parametrize("source", SOURCES)
@pytest.mark.parametrize("cols", [160, 16], ids=["registers", "chunk"])
def test_float16_product_folds_in_float32(source, cols):
    a = _overflows_half((3, cols))
    src = SOURCES[source](ms.from_numpy(a))
    want = np.multiply.reduce(a.astype(np.float32), axis=1).astype(np.float16)
    np.testing.assert_array_equal(want, [1, 1, 1])
    np.testing.assert_array_equal(run(ms.reduce_with_axis(src, 1, ms.red.product), (3,),
                                      np.float16), want)
    np.testing.assert_array_equal(run(ms.reduce_with_axis(src, 1, ms.red.product) + 0, (3,),
                                      np.float16), want)


def test_float16_pool_product_folds_in_float32():
    # 4x4 windows, two rows of 8s over two rows of 1/8s: row-major, 8**8 comes first
    a = np.repeat(np.array([8.0, 8.0, 0.125, 0.125], np.float16)[:, None], 16, 1)[None]
    assert np.isinf(_half_running_product(a[0, :, :4].ravel()))
    got = run(ms.pool(ms.from_numpy(a), 4, 4, 4, 4, ms.red.product), (1, 1, 4), np.float16)
    want = _ref_pool(a.astype(np.float32), 4, 4, 4, 4).astype(np.float16)
    np.testing.assert_array_equal(want, np.ones((1, 1, 4)))
    np.testing.assert_array_equal(got, want)


# ---- the init value: an empty product is 1 -------------------------------------------------
@pytest.mark.parametrize("dtype", PROD_DTYPES, ids=lambda d: np.dtype(d).name)
def test_empty_product_is_one(dtype):
    a = np.zeros((2, 0, 3), dtype)
    want = np.multiply.reduce(a, axis=1, keepdims=True)
    np.testing.assert_array_equal(run(ms.reduce_keepdim(ms.from_numpy(a), 1, ms.red.product),
                                      (2, 1, 3), dtype), want)
    want = np.multiply.reduce(a, axis=(1, 2))
    np.testing.assert_array_equal(run(ms.reduce_except_dim(ms.from_numpy(a), 0,
                                                           ms.red.product), (2,), dtype), want)


def test_integer_product_wraps_like_numpy():
    a = np.full((2, 40), 7, np.int32)     # 7**40 wraps many times over
    want = np.multiply.reduce(a, axis=1, dtype=np.int32)
    for src in (ms.from_numpy(a), ms.from_numpy(a) * 1):
        np.testing.assert_array_equal(run(ms.reduce_with_axis(src, 1, ms.red.product), (2,),
                                          np.int32), want)


def test_nan_propagates_and_zero_absorbs():
    a = np.ones((2, 200), np.float32)
    a[0, 50], a[1, 150] = np.nan, 0
    want = np.multiply.reduce(a, axis=1)
    for src in (ms.from_numpy(a), ms.from_numpy(a) * 1):
        got = run(ms.reduce_with_axis(src, 1, ms.red.product), (2,), np.float32)
        np.testing.assert_array_equal(got, want)
        assert np.isnan(got[0]) and got[1] == 0


# ---- where a reducer needs a column the product row leaves empty ----------------------------
GRAD_REDUCERS = "ms.red.sum, ms.red.maximum or ms.red.minimum"


def test_unpool_refuses_a_reducer_without_partial_grad():
    x = ms.from_numpy(np.ones((1, 4, 4), np.float32))
    p = ms.from_numpy(np.ones((1, 2, 2), np.float32))
    with pytest.raises(TypeError, match=f"unpool: reducer must be {GRAD_REDUCERS} .*PartialGrad"):
        ms.unpool(x, p, p, 2, 2, 2, 2, ms.red.product)
    with pytest.raises(TypeError, match=f"ch_unpool: reducer must be {GRAD_REDUCERS} "):
        ms.ch_unpool(ms.from_numpy(np.ones((1, 3, 2, 2), np.float32)),
                     ms.from_numpy(np.ones((1, 3, 2, 2), np.float32)),
                     ms.from_numpy(np.ones((1, 3, 2, 2), np.float32)), 3, ms.red.product)


def test_mask_refuses_a_reducer_without_an_arg_form():
    x = ms.from_numpy(np.ones((3, 4), np.float32))
    with pytest.raises(ValueError, match="needs ms.red.maximum or ms.red.minimum, got "
                                         "ms.red.product"):
        ms.reduce_with_axis(x, 1, ms.red.product, mask=True)


def test_pool_still_refuses_what_is_not_a_reducer():
    x = ms.from_numpy(np.ones((1, 4, 4), np.float32))
    with pytest.raises(TypeError, match="ms.red.sum, ms.red.maximum, ms.red.minimum or "
                                        "ms.red.product, got 'prod'"):
        ms.pool(x, 2, 2, 2, 2, "prod")
