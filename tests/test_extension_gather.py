"""Gather extensions (pad, take, choose/fill row element, upsampling_nearest, one_hot_encode,
range, concat, mask): numpy is the oracle; indices are checked before any store."""
import numpy as np
import pytest

import mshadow as ms
from mshadow.testing import tensor as T, padded as _padded

DTYPES = [np.float32, np.float64, np.float16, np.int32, np.uint8, np.int64, np.int8]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(3, 4), (2, 3, 5)])
def test_pad(dtype, shape):
    a = (np.arange(int(np.prod(shape))) % 50).reshape(shape).astype(dtype)
    for py, px in [(1, 1), (2, 0), (0, 3)]:
        e = ms.pad(_padded(a), py, px)
        want = np.pad(a, [(0, 0)] * (len(shape) - 2) + [(py, py), (px, px)])
        dst = ms.new_tensor(want.shape, dtype=dtype, pad=True)
        dst[:] = e
        np.testing.assert_array_equal(dst.numpy(), want)
    dst = ms.new_tensor(want.shape, dtype=dtype)
    dst[:] = ms.pad(T(a), 0, 3) + ms.pad(T(a), 0, 3)       # fused with arithmetic
    np.testing.assert_array_equal(dst.numpy(), (want + want).astype(dtype))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("idx_dtype", [np.float32, np.int32, np.int64, np.uint8])
def test_take_and_choose_and_fill(dtype, idx_dtype):
    src = (np.arange(20) % 100).reshape(5, 4).astype(dtype)
    idx = np.array([4, 0, 2, 2, 1, 3], dtype=idx_dtype)
    dst = ms.new_tensor((6, 4), dtype=dtype, pad=True)
    dst[:] = ms.take(T(idx), _padded(src))
    np.testing.assert_array_equal(dst.numpy(), src[idx.astype(int)])
    cidx = np.array([3, 0, 1, 2, 0], dtype=idx_dtype)
    out = ms.new_tensor((5,), dtype=dtype)
    out[:] = ms.mat_choose_row_element(_padded(src), T(cidx))
    np.testing.assert_array_equal(out.numpy(), src[np.arange(5), cidx.astype(int)])
    val = np.array([7, 8, 9, 10, 11], dtype=dtype)
    full = ms.new_tensor((5, 4), dtype=dtype)
    full[:] = ms.mat_fill_row_element(_padded(src), T(val), T(cidx))
    want = src.copy()
    want[np.arange(5), cidx.astype(int)] = val
    np.testing.assert_array_equal(full.numpy(), want)


@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.float64, np.int8])
@pytest.mark.parametrize("cols", [1, 7, 64, 700])
def test_take_copies_rows_and_prefetches_within_the_index(dtype, cols):
    # take's kernel copies each row (memcpy) and prefetches the row of index[y + 8]: many
    # rows (the last 8 prefetch nothing), rows of a pitched source, rows wider than one
    # block and than the 1 KiB prefetch, the view (strided columns) loop, an expression
    rng = np.random.default_rng(cols)
    src = (rng.standard_normal((300, cols)) * 20).astype(dtype)
    if np.dtype(dtype).kind == "f":
        src[3, 0] = np.nan
    idx = rng.integers(0, 300, 5000).astype(np.int32)
    idx[-8:] = [299, 0, 299, 0, 299, 0, 299, 3]
    want = src[idx]
    for s in (T(src), _padded(src)):
        dst = ms.new_tensor((5000, cols), dtype=dtype)
        dst[:] = ms.take(T(idx), s)
        np.testing.assert_array_equal(dst.numpy(), want)
    dst = ms.new_tensor((5000, cols), dtype=dtype)
    dst[:] = ms.take(T(idx), ms.mirror(T(src)))            # a view read with its steps
    np.testing.assert_array_equal(dst.numpy(), want[:, ::-1])
    dst[:] = ms.take(T(idx), T(src) * 2 - T(src))          # read per element
    np.testing.assert_array_equal(dst.numpy(), (src * 2 - src)[idx])


def test_index_errors_are_raised_before_any_store():
    src = T(np.arange(6, dtype=np.float32).reshape(3, 2))
    idx = ms.from_numpy(np.array([0.0, 1.0], np.float32))
    e = ms.take(idx, src)
    idx.numpy()[1] = 7          # becomes out of range after the expression was built
    dst = ms.new_tensor((2, 2), init=-1)
    with pytest.raises(IndexError, match=r"take: index values must lie in \[0, 3\), got \[0.0, 7.0\]"):
        dst[:] = e
    assert (dst.numpy() == -1).all()
    with pytest.raises(IndexError, match="must lie in"):
        ms.take(T(np.array([-1], np.int32)), src)
    with pytest.raises(IndexError, match="must be finite"):
        ms.take(T(np.array([np.nan], np.float32)), src)
    with pytest.raises(IndexError):
        ms.mat_choose_row_element(src, T(np.array([0, 2, 0], np.int32)))


@pytest.mark.parametrize("dtype", DTYPES)
def test_upsampling_nearest(dtype):
    a = np.arange(24).reshape(2, 3, 4).astype(dtype)
    dst = ms.new_tensor((2, 9, 12), dtype=dtype)
    dst[:] = ms.upsampling_nearest(_padded(a), 3)
    np.testing.assert_array_equal(dst.numpy(), a.repeat(3, axis=1).repeat(3, axis=2))


@pytest.mark.parametrize("dtype", DTYPES)
def test_one_hot_encode(dtype):
    idx = T(np.array([0, 2, 1, 1], np.float32))
    dst = ms.new_tensor((4, 3), dtype=dtype)
    dst[:] = ms.one_hot_encode(idx, 3, dtype=dtype)
    np.testing.assert_array_equal(dst.numpy(), np.eye(3, dtype=dtype)[[0, 2, 1, 1]])
    assert ms.one_hot_encode(idx, 3).dtype == np.float32     # mshadow's default_real_t


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32, np.int64])
def test_range(dtype):
    cases = [((0, 6, 2, 2), [0, 0, 2, 2, 4, 4]),            # the reference's verified case
             ((5, 0, -2, 1), [5, 3, 1]), ((1, 4, 1, 3), [1, 1, 1, 2, 2, 2, 3, 3, 3])]
    for args, want in cases:
        e = ms.range(*args, dtype=dtype)
        dst = ms.new_tensor(e.shape, dtype=dtype)
        dst[:] = e * 2
        np.testing.assert_array_equal(dst.numpy(), 2 * np.array(want, dtype=dtype))
    dst = ms.new_tensor((4,))
    dst[:] = ms.range(0.5, 2.5, 0.5)
    np.testing.assert_array_equal(dst.numpy(), [0.5, 1.0, 1.5, 2.0])
    with pytest.raises(ValueError, match="RangeExp does not support step=0, received 0"):
        ms.range(0, 3, 0)
    with pytest.raises(ValueError, match="start must be < stop"):
        ms.range(3, 0, 1)
    with pytest.raises(ValueError, match="repeat > 0"):
        ms.range(0, 3, 1, 0)


@pytest.mark.parametrize("dim", [0, 1, 2])
@pytest.mark.parametrize("dtype", [np.float32, np.int64, np.float16])
def test_concat_any_rank_and_axis(dim, dtype):
    a = np.arange(24).reshape(2, 3, 4).astype(dtype)
    bshape = [2, 3, 4]
    bshape[dim] = 2
    b = (100 + np.arange(int(np.prod(bshape)))).reshape(bshape).astype(dtype)
    want = np.concatenate([a, b], axis=dim)
    dst = ms.new_tensor(want.shape, dtype=dtype, pad=True)
    dst[:] = ms.concat(_padded(a), T(b), dim)
    np.testing.assert_array_equal(dst.numpy(), want)
    with pytest.raises(ms.ShapeError, match="ConcatExp: shape mismatch"):
        ms.concat(T(a), T(a[:, :2, :2]), dim)


def test_mask():
    src = np.arange(12, dtype=np.float32).reshape(3, 4)
    m = np.array([1, 0, 2], np.float32)
    dst = ms.new_tensor((3, 4))
    dst[:] = ms.mask(T(m), T(src))
    np.testing.assert_array_equal(dst.numpy(), src * m[:, None])


def test_gathers_of_the_destination_and_threads():
    a = np.arange(20, dtype=np.float64).reshape(4, 5)
    t = ms.from_numpy(a.copy())
    t[:] = ms.take(T(np.array([3, 2, 1, 0], np.int32)), t)   # reads rows it writes
    np.testing.assert_array_equal(t.numpy(), a[::-1])
    big = np.random.default_rng(0).random((300, 400))
    d1 = ms.new_tensor((302, 404), dtype=np.float64)
    for threads in (1, 2):
        ms.set_num_threads(threads)
        d1[:] = ms.pad(T(big), 1, 2) * 3
        np.testing.assert_array_equal(d1.numpy(), np.pad(big, [(1, 1), (2, 2)]) * 3)
    ms.set_num_threads(2)


def test_untraceable_operator_over_a_gather(recwarn):
    @ms.op.define
    def neg_small(x):
        return x if x > 2 else -x

    a = np.arange(6, dtype=np.float64).reshape(2, 3)
    dst = ms.new_tensor((4, 5), dtype=np.float64)
    dst[:] = ms.F(neg_small, ms.pad(T(a), 1))
    p = np.pad(a, 1)
    np.testing.assert_array_equal(dst.numpy(), np.where(p > 2, p, -p))


def test_only_gather_kernels_can_drive_a_gather():
    # an element-wise kernel given an ms_gather would read garbage pointers: refused up front
    with pytest.raises(ValueError, match="unknown gather kernel 'plus_f32'"):
        ms._core.gather_args("plus_f32", (), (), (3,))
