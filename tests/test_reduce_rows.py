"""The last axis of narrow rows, each row folded alone by the reducer's block kernel
(_core.reduce_rows): a tensor's rows where they are, an expression's a chunk at a time.

Oracles: the documented lanes order written in numpy (element i of a row into lane i % 16
from the init, lanes combined pairwise l + w, w = 8, 4, 2, 1), numpy's maximum / minimum,
and the registers schedule's route through the executor (rows of 200, an expression),
which folds each row with the same block order.
"""
import threading

import numpy as np
import pytest

import mshadow as ms
from mshadow import _core
from mshadow.testing import simd_levels

pytestmark = pytest.mark.usefixtures("restore_engine_state")

LANES = 16


def lanes_fold(a, op, init):
    """The documented order of a lanes fold of each row of 2-D ``a`` (its own dtype)."""
    rows, n = a.shape
    k = -(-n // LANES)
    pad = np.full((rows, k * LANES), init, dtype=a.dtype)
    pad[:, :n] = a
    acc = np.full((rows, LANES), init, dtype=a.dtype)
    with np.errstate(all="ignore"):
        for j in range(k):       # lane l: its elements in order, from the init
            acc = op(acc, pad[:, j * LANES:(j + 1) * LANES])
        w = LANES // 2
        while w:
            acc = np.concatenate([op(acc[:, :w], acc[:, w:2 * w]), acc[:, 2 * w:]], axis=1)
            w //= 2
    return acc[:, 0]


def tensor_of(a, pitched=False):
    t = ms.new_tensor(a.shape, dtype=a.dtype, pad=pitched)
    t.numpy()[...] = a
    return t


def row_sums(src, shape, dtype, reducer=None):
    out = ms.new_tensor(shape[:-1], dtype=dtype)
    out[:] = ms.reduce_with_axis(src, len(shape) - 1, reducer or ms.red.sum)
    return out.numpy().copy()


def data(shape, dtype, seed=0):
    rng = np.random.default_rng(seed)
    if np.dtype(dtype).kind == "f":
        return (rng.standard_normal(shape) * 100).astype(dtype)
    return rng.integers(-100, 100, size=shape).astype(dtype)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("width", [1, 3, 7, 15, 16, 17, 49, 100, 127, 200, 4096])
@pytest.mark.parametrize("pitched", [False, True])
def test_tensor_rows_take_the_lanes_order(dtype, width, pitched):
    a = data((300, width), dtype)
    got = row_sums(tensor_of(a, pitched), a.shape, dtype)
    np.testing.assert_array_equal(got, lanes_fold(a, np.add, 0))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("width", [3, 49, 100])
def test_expression_rows_take_the_same_order(dtype, width):
    """An expression of narrow rows goes by chunks (5000 rows: several), each row folded by
    the same kernel: x * 2 and a materialised x * 2 agree bit for bit."""
    a = data((5000, width), dtype, seed=1)
    got = row_sums(tensor_of(a) * 2, a.shape, dtype)
    np.testing.assert_array_equal(got, lanes_fold(a * dtype(2), np.add, 0))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_tensor_and_registers_route_agree(dtype):
    """Rows of 200 of an expression go in registers (the executor, a block a row): a tensor's
    rows, folded alone, give the same bits."""
    a = data((700, 200), dtype, seed=2)
    t = tensor_of(a)
    np.testing.assert_array_equal(row_sums(t, a.shape, dtype), row_sums(t * 1, a.shape, dtype))


def test_product_pads_with_one():
    a = (1 + data((64, 21), np.float64, seed=3) / 1000).astype(np.float64)
    got = row_sums(tensor_of(a), a.shape, np.float64, ms.red.product)
    np.testing.assert_array_equal(got, lanes_fold(a, np.multiply, 1))


@pytest.mark.parametrize("dtype", [np.int32, np.int64])
def test_integer_sums_wrap(dtype):
    a = data((257, 33), dtype, seed=4)
    a[0, :] = np.iinfo(dtype).max         # wraps, as C does
    got = row_sums(tensor_of(a), a.shape, dtype)
    with np.errstate(over="ignore"):
        np.testing.assert_array_equal(got, a.sum(axis=1, dtype=dtype))


def test_negative_zero_rows_sum_to_positive_zero():
    """The lanes start at +0 (the padding folds +0 into them): a row of -0.0 sums to +0.0,
    as in the registers schedule."""
    a = np.full((20, 5), -0.0, np.float32)
    got = row_sums(tensor_of(a), a.shape, np.float32)
    assert not np.signbit(got).any()
    assert not np.signbit(row_sums(tensor_of(a) * 1, a.shape, np.float32)).any()


@pytest.mark.parametrize("reducer", ["maximum", "minimum"])
@pytest.mark.parametrize("width", [5, 49, 300])
def test_extremes_against_numpy(reducer, width):
    a = data((400, width), np.float32, seed=5)
    a[3, width // 2] = np.nan           # a NaN row stays NaN
    got = row_sums(tensor_of(a), a.shape, np.float32, getattr(ms.red, reducer))
    np.testing.assert_array_equal(got, getattr(np, reducer).reduce(a, axis=1))
    assert np.isnan(got[3])


def test_leading_axes_views_and_keepdim():
    a = data((6, 7, 9, 11), np.float32, seed=6)
    t = tensor_of(a)
    out = ms.new_tensor((6, 7, 9, 1))
    out[:] = ms.reduce_keepdim(t, 3, ms.red.sum)
    want = lanes_fold(a.reshape(-1, 11), np.add, 0).reshape(6, 7, 9, 1)
    np.testing.assert_array_equal(out.numpy(), want)
    # a view of rows (a slice of the leading axis) reads its own rows
    m = data((50, 13), np.float64, seed=7)
    v = tensor_of(m, pitched=True)[10:40]
    np.testing.assert_array_equal(row_sums(v, (30, 13), np.float64), lanes_fold(m[10:40], np.add, 0))
    # sumall_except_dim of a 2-D tensor keeping axis 0 sums its rows
    s = ms.new_tensor((50,), dtype=np.float64)
    s[:] = ms.sumall_except_dim(tensor_of(m), 0)
    np.testing.assert_array_equal(s.numpy(), lanes_fold(m, np.add, 0))


def test_savers_and_scale():
    a = data((100, 9), np.float32, seed=8)
    out = tensor_of(np.ones(100, np.float32))
    out += ms.reduce_with_axis(tensor_of(a), 1, ms.red.sum) * 0.5
    want = np.float32(1) + lanes_fold(a, np.add, 0) * np.float32(0.5)
    np.testing.assert_array_equal(out.numpy(), want)


def test_float16_keeps_numpys_route():
    a = data((64, 10), np.float16, seed=9)
    got = row_sums(tensor_of(a), a.shape, np.float16)
    np.testing.assert_array_equal(got, a.sum(axis=1, dtype=np.float32).astype(np.float16))


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("level", simd_levels())
def test_levels_and_threads_keep_the_bits(threads, level):
    a = data((40000, 23), np.float32, seed=10)     # enough rows for threads
    ms.set_num_threads(threads)
    ms.set_simd_level(level)
    np.testing.assert_array_equal(row_sums(tensor_of(a), a.shape, np.float32),
                                  lanes_fold(a, np.add, 0))


def test_reduce_rows_rejects_bad_arguments():
    a = np.zeros((4, 3), np.float32)
    with pytest.raises(ValueError, match="not a reducer's block kernel"):
        _core.reduce_rows("chain_f32", a, np.empty(4, np.float32))
    with pytest.raises(ValueError, match="not a reducer's block kernel"):
        _core.reduce_rows("reduce_sum_c64", a, np.empty(4, np.float32))
    with pytest.raises(ValueError, match="out must be"):
        _core.reduce_rows("reduce_sum_f32", a, np.empty(4, np.float64))
    with pytest.raises(ValueError, match="4 rows into 3"):
        _core.reduce_rows("reduce_sum_f32", a, np.empty(3, np.float32))
    with pytest.raises(ValueError, match="2-D float32"):
        _core.reduce_rows("reduce_sum_f32", a.astype(np.float64), np.empty(4, np.float32))
    with pytest.raises(ValueError, match="2-D float32"):
        _core.reduce_rows("reduce_sum_f32", a.ravel(), np.empty(4, np.float32))


def test_free_space_from_another_thread_while_rows_reduce():
    """The tensor is pinned while its rows are read without the GIL: the statement either
    completes with the right values or fails whole with FreedTensorError."""
    a = data((200000, 7), np.float32, seed=11)
    want = lanes_fold(a, np.add, 0)
    for _ in range(5):
        t = tensor_of(a)
        out = ms.new_tensor((a.shape[0],))
        err = []

        def run():
            try:
                out[:] = ms.reduce_with_axis(t, 1, ms.red.sum)
            except ms.FreedTensorError as e:
                err.append(e)

        th = threading.Thread(target=run)
        th.start()
        ms.free_space(t)
        th.join()
        if not err:
            np.testing.assert_array_equal(out.numpy(), want)
