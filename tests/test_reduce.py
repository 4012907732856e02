"""Reductions (reduceto1d.h, reduce_with_axis.h) against numpy: every dtype, layout, saver, error.

Values are small integers so sums are exact in every dtype and the oracle is bit-exact.
"""
import numpy as np
import pytest

import mshadow as ms
from mshadow.errors import DeviceError, DTypeError, FreedTensorError, ShapeError
from mshadow.extension.reduce import ReduceExp
from mshadow.op import reducer_names   # every row of readers.REDUCER_TABLE
from mshadow.testing import ALL_DTYPES, FLOAT_DTYPES, SAVERS, compute_dtype, ref_apply

_SAVER_OP = {"plusto": "plus", "minusto": "minus", "multo": "mul", "divto": "div"}
_NP_RED = {"sum": np.sum, "maximum": np.max, "minimum": np.min}
REDUCERS = (ms.red.sum, ms.red.maximum, ms.red.minimum)


def tensor(values, pitched):
    """A tensor holding ``values``: pitched (padded rows, last axis odd) or contiguous."""
    values = np.asarray(values)
    t = ms.new_tensor(values.shape, 0, pad=pitched, dtype=values.dtype)
    t.numpy()[...] = values
    if pitched and values.ndim > 1:
        assert not t.check_contiguous()
    return t


def data(shape, dtype, lo=1):
    return (np.arange(int(np.prod(shape))) % 5 + lo).astype(dtype).reshape(shape)


def oracle(a, axes, name, dtype, keepdims=False):
    """The reduction in float64/int64, then one C-style conversion to ``dtype``."""
    wide = a.astype(np.float64 if np.dtype(dtype).kind == "f" else np.int64)
    return _NP_RED[name](wide, axis=axes, keepdims=keepdims).astype(dtype)


def saved(dst0, val, saver, dtype):
    if saver == "saveto":
        return val
    return ref_apply(_SAVER_OP[saver], [dst0, val], compute_dtype(dtype)).astype(dtype)


# ---- reduce_except_dim / sumall_except_dim / sum_rows -----------------------------------
@pytest.mark.parametrize("pitched", [False, True], ids=["contiguous", "pitched"])
@pytest.mark.parametrize("dimkeep", [0, 1, 2])
@pytest.mark.parametrize("red", REDUCERS, ids=lambda r: r.name)
def test_reduce_except_dim_every_dtype(dtype, pitched, dimkeep, red):
    a = data((2, 3, 5), dtype)
    src = tensor(a, pitched)
    dst = ms.new_tensor((a.shape[dimkeep],), 0, dtype=dtype)
    dst[:] = ms.reduce_except_dim(src, dimkeep, red)
    axes = tuple(k for k in range(3) if k != dimkeep)
    np.testing.assert_array_equal(dst.numpy(), oracle(a, axes, red.name, dtype))
    assert dst.numpy().dtype == dtype


@pytest.mark.parametrize("saver", SAVERS)
@pytest.mark.parametrize("scale", [1, 2, -3])
def test_sumall_except_dim_savers_and_scales(dtype, saver, scale):
    a = data((4, 3), dtype)
    src = tensor(a, True)
    dst0 = data((4,), dtype, lo=2)
    dst = tensor(dst0, False)
    exp = ms.sumall_except_dim(src, 0) * scale
    ms.engine.assign(dst, exp, saver)
    with np.errstate(over="ignore"):
        val = (oracle(a, (1,), "sum", np.int64 if np.dtype(dtype).kind in "iu" else np.float64)
               * scale).astype(dtype)
    np.testing.assert_array_equal(dst.numpy(), saved(dst0, val, saver, dtype))


def test_in_place_operators_pick_the_saver():
    a = data((3, 4), np.float32)
    src = tensor(a, True)
    dst = tensor(np.full(4, 10, np.float32), False)
    dst += ms.sum_rows(src)
    dst -= 2 * ms.sum_rows(src)
    np.testing.assert_array_equal(dst.numpy(), 10 - a.sum(0))
    dst *= ms.sum_rows(src)
    dst /= ms.sum_rows(src)
    np.testing.assert_allclose(dst.numpy(), 10 - a.sum(0))


def test_sum_rows_is_sumall_except_dim_1():
    a = data((6, 7), np.float64)
    src = tensor(a, True)
    out = ms.new_tensor((7,), 0, dtype=np.float64)
    out[:] = ms.sum_rows(src)
    np.testing.assert_array_equal(out.numpy(), a.sum(0))
    assert ms.sum_rows(src).key[:5] == ms.sumall_except_dim(src, 1).key[:5]


def test_float16_accumulates_in_float32():
    # 4096 ones: a float16 running sum sticks at 2048; accumulating in float32 does not
    a = np.ones((4096, 2), np.float16)
    out = ms.new_tensor((2,), 0, dtype=np.float16)
    out[:] = ms.sum_rows(ms.from_numpy(a))
    np.testing.assert_array_equal(out.numpy(), [4096, 4096])
    out[:] = ms.sum_rows(ms.from_numpy(a)) * 0.5
    np.testing.assert_array_equal(out.numpy(), [2048, 2048])


def test_float16_random_within_tolerance():
    rng = np.random.default_rng(0)
    a = rng.standard_normal((50, 9)).astype(np.float16)
    out = ms.new_tensor((50,), 0, dtype=np.float16)
    out[:] = ms.sumall_except_dim(tensor(a, True), 0)
    np.testing.assert_allclose(out.numpy().astype(np.float32),
                               a.astype(np.float64).sum(1), rtol=2e-3, atol=2e-3)


def test_integer_sum_wraps_like_c():
    a = np.full((3, 2), 100, np.int8)
    out = ms.new_tensor((2,), 0, dtype=np.int8)
    out[:] = ms.sum_rows(ms.from_numpy(a))
    np.testing.assert_array_equal(out.numpy(), np.array([300, 300]).astype(np.int8))


def test_scales_fold_and_negation_wraps_for_unsigned():
    a = data((2, 3), np.uint8)
    src = ms.from_numpy(a)
    exp = 2 * ms.sum_rows(src) * 3
    assert isinstance(exp, ReduceExp) and exp.scale == 6
    out = ms.new_tensor((3,), 0, dtype=np.uint8)
    out[:] = -ms.sum_rows(src)
    np.testing.assert_array_equal(out.numpy(), (-a.sum(0).astype(np.int64)).astype(np.uint8))
    out[:] = ms.scalar(2) * ms.sum_rows(src)
    np.testing.assert_array_equal(out.numpy(), 2 * a.sum(0))


def test_one_dimensional_source_keeps_axis_0():
    a = data((5,), np.int32)
    out = ms.new_tensor((5,), 0, dtype=np.int32)
    out[:] = ms.sumall_except_dim(ms.from_numpy(a), 0) * 2
    np.testing.assert_array_equal(out.numpy(), 2 * a)


def test_negative_dimkeep_counts_from_the_end():
    a = data((2, 3, 4), np.float32)
    out = ms.new_tensor((3,), 0)
    out[:] = ms.sumall_except_dim(ms.from_numpy(a), -2)
    np.testing.assert_array_equal(out.numpy(), a.sum((0, 2)))


# ---- sources: views, transposes, expressions, dot ---------------------------------------
def test_view_source_read_in_place():
    a = data((2, 3, 4), np.float32)
    t = tensor(a, True)
    out = ms.new_tensor((4,), 0)
    out[:] = ms.sumall_except_dim(ms.transpose_axes(t, (2, 0, 1)), 0)
    np.testing.assert_array_equal(out.numpy(), a.sum((0, 1)))
    v = ms.new_tensor((3,), 0)
    v.numpy()[:] = [1, 2, 3]
    out5 = ms.new_tensor((5,), 0)
    out5[:] = ms.sum_rows(ms.broadcast(v, (3, 5), 0))
    np.testing.assert_array_equal(out5.numpy(), np.full(5, 6))


def test_transposed_tensor_source():
    a = data((3, 4), np.float64)
    out = ms.new_tensor((3,), 0, dtype=np.float64)
    out[:] = ms.sum_rows(tensor(a, True).T)
    np.testing.assert_array_equal(out.numpy(), a.sum(1))
    col = ms.new_tensor((1,), 0, dtype=np.float64)
    col[:] = ms.sum_rows(ms.from_numpy(a[0].copy()).T)   # 1-D .T is the (4, 1) column
    np.testing.assert_array_equal(col.numpy(), [a[0].sum()])


def test_elementwise_and_dot_sources_are_evaluated_first():
    a = data((3, 4), np.float32)
    t = tensor(a, True)
    out = ms.new_tensor((4,), 0)
    out[:] = ms.sum_rows(t * 2 + 1)
    np.testing.assert_array_equal(out.numpy(), (a * 2 + 1).sum(0))
    sq = ms.new_tensor((4,), 0)
    sq[:] = ms.sum_rows(ms.dot(t.T, t))
    np.testing.assert_allclose(sq.numpy(), (a.T @ a).sum(0))
    nested = ms.new_tensor((4,), 0)
    nested[:] = ms.sumall_except_dim(ms.reduce_keepdim(t, 0, ms.red.maximum), 1)
    np.testing.assert_array_equal(nested.numpy(), a.max(0))


def test_numpy_array_source():
    a = data((3, 4), np.int64)
    out = ms.new_tensor((4,), 0, dtype=np.int64)
    out[:] = ms.reduce_except_dim(a, 1, ms.red.minimum)
    np.testing.assert_array_equal(out.numpy(), a.min(0))


def test_destination_inside_the_source():
    a = data((3, 3), np.float32)
    t = tensor(a, True)
    t[0] = ms.sum_rows(t)          # row 0 is read and written: the result is computed first
    np.testing.assert_array_equal(t.numpy()[0], a.sum(0))


# ---- empty sources ----------------------------------------------------------------------
def test_keep_lowest_over_no_rows_is_an_error():
    t = ms.new_tensor((0, 3), 0)
    with pytest.raises(ShapeError, match="can not reduce over empty tensor"):
        ms.sum_rows(t)
    with pytest.raises(ShapeError, match="can not reduce over empty tensor"):
        ms.reduce_except_dim(ms.new_tensor((2, 0, 3), 0), 2, ms.red.maximum)


@pytest.mark.parametrize("red,want", [(ms.red.sum, 0), (ms.red.maximum, -np.inf),
                                      (ms.red.minimum, np.inf)], ids=lambda x: str(x))
def test_keep_high_dim_over_nothing_gives_the_init_value(red, want):
    out = ms.new_tensor((3,), 7)
    out[:] = ms.reduce_except_dim(ms.new_tensor((3, 0), 0), 0, red)
    np.testing.assert_array_equal(out.numpy(), np.full(3, want, np.float32))
    iout = ms.new_tensor((3,), 7, dtype=np.int8)
    iout[:] = ms.reduce_except_dim(ms.new_tensor((3, 0), 0, dtype=np.int8), 0, red)
    iwant = {"sum": 0, "maximum": -128, "minimum": 127}[red.name]
    np.testing.assert_array_equal(iout.numpy(), np.full(3, iwant, np.int8))


# ---- NaN --------------------------------------------------------------------------------
@pytest.mark.parametrize("red", [ms.red.maximum, ms.red.minimum], ids=lambda r: r.name)
@pytest.mark.parametrize("pos", [0, 2])
def test_maximum_minimum_propagate_nan(red, pos):
    # MXNet's red::maximum/minimum: a NaN anywhere (first or later) gives NaN
    a = np.array([[1.0, 5.0, 2.0], [3.0, 4.0, 0.0]], np.float32)
    a[0, pos] = np.nan
    out = ms.new_tensor((2,), 0)
    out[:] = ms.reduce_except_dim(ms.from_numpy(a), 0, red)
    assert np.isnan(out.numpy()[0]) and not np.isnan(out.numpy()[1])
    col = ms.new_tensor((3,), 0)
    col[:] = ms.reduce_with_axis(ms.from_numpy(a), 0, red)
    assert np.isnan(col.numpy()[pos]) and np.isnan(col.numpy()).sum() == 1


def test_mask_points_at_the_first_nan():
    a = np.array([[1.0, np.nan, 9.0, np.nan]], np.float32)
    out = ms.new_tensor((1,), 0)
    out[:] = ms.reduce_with_axis(ms.from_numpy(a), 1, ms.red.maximum, mask=True)
    assert out.numpy()[0] == 1
    out[:] = ms.reduce_with_axis(ms.from_numpy(a), 1, ms.red.minimum, mask=True)
    assert out.numpy()[0] == 1


# ---- reduce_with_axis / reduce_keepdim --------------------------------------------------
def test_reference_example_argmax_3_7_7_1():
    src = ms.from_numpy(np.array([[3, 7, 7, 1]], np.float32))
    out = ms.new_tensor((1,), -1)
    out[:] = ms.reduce_with_axis(src, 1, ms.red.maximum, mask=True)
    assert out.numpy()[0] == 1          # first occurrence of the tie wins


@pytest.mark.parametrize("pitched", [False, True], ids=["contiguous", "pitched"])
@pytest.mark.parametrize("axis", [0, 1, 2])
@pytest.mark.parametrize("red", REDUCERS, ids=lambda r: r.name)
def test_reduce_with_axis_every_dtype(dtype, pitched, axis, red):
    a = data((3, 4, 5), dtype)
    src = tensor(a, pitched)
    want = oracle(a, axis, red.name, dtype)
    out = ms.new_tensor(want.shape, 0, dtype=dtype)
    out[:] = ms.reduce_with_axis(src, axis, red)
    np.testing.assert_array_equal(out.numpy(), want)
    kd = ms.new_tensor(oracle(a, axis, red.name, dtype, True).shape, 0, dtype=dtype)
    kd[:] = ms.reduce_keepdim(src, axis, red) * 2
    with np.errstate(over="ignore"):
        want2 = (oracle(a, axis, red.name, dtype, True).astype(compute_dtype(dtype)) * 2)
    np.testing.assert_array_equal(kd.numpy(), want2.astype(dtype))


@pytest.mark.parametrize("axis", [0, 1, -1])
def test_mask_is_the_index_as_the_dtype(dtype, axis):
    rng = np.random.default_rng(1)
    a = rng.integers(0, 4, (4, 6)).astype(dtype)     # many ties
    src = tensor(a, True)
    for red, fn in ((ms.red.maximum, np.argmax), (ms.red.minimum, np.argmin)):
        want = fn(a, axis=axis).astype(dtype)
        out = ms.new_tensor(want.shape, 0, dtype=dtype)
        out[:] = ms.reduce_with_axis(src, axis, red, mask=True)
        np.testing.assert_array_equal(out.numpy(), want)
        kd = ms.new_tensor(fn(a, axis=axis, keepdims=True).shape, 0, dtype=dtype)
        kd[:] = ms.reduce_keepdim(src, axis, red, True)
        np.testing.assert_array_equal(kd.numpy(), fn(a, axis=axis, keepdims=True).astype(dtype))


def test_mask_over_an_empty_axis_is_zero():
    out = ms.new_tensor((3,), 5)
    out[:] = ms.reduce_with_axis(ms.new_tensor((3, 0), 0), 1, ms.red.maximum, mask=True)
    np.testing.assert_array_equal(out.numpy(), [0, 0, 0])


def test_reduce_with_axis_savers(dtype):
    a = data((3, 4), dtype)
    for saver in SAVERS:
        dst0 = data((4,), dtype, lo=2)
        dst = tensor(dst0, False)
        ms.engine.assign(dst, ms.reduce_with_axis(ms.from_numpy(a), 0, ms.red.maximum), saver)
        np.testing.assert_array_equal(dst.numpy(),
                                      saved(dst0, a.max(0).astype(dtype), saver, dtype))


def test_reduce_keepdim_of_one_dimensional_source():
    out = ms.new_tensor((1,), 0, dtype=np.int32)
    out[:] = ms.reduce_keepdim(ms.from_numpy(np.array([4, 9, 2], np.int32)), 0, ms.red.maximum)
    assert out.numpy()[0] == 9


# ---- errors -----------------------------------------------------------------------------
def test_destination_must_be_1d_of_the_kept_length():
    src = ms.new_tensor((3, 4), 1)
    with pytest.raises(ShapeError, match=r"sum_rows: the result is 1-D of length 4 .* got "
                                         r"shape \(3,\)"):
        ms.new_tensor((3,), 0)[:] = ms.sum_rows(src)
    with pytest.raises(ShapeError, match=r"got shape \(1, 4\)"):
        ms.new_tensor((1, 4), 0)[:] = ms.sum_rows(src)
    with pytest.raises(ShapeError, match=r"result shape \(4,\) does not match the destination "
                                         r"shape \(3,\)"):
        ms.new_tensor((3,), 0)[:] = ms.reduce_with_axis(src, 0, ms.red.sum)


def test_nothing_is_written_on_error():
    src = ms.new_tensor((3, 4), 1)
    dst = ms.new_tensor((3,), 5)
    with pytest.raises(ShapeError):
        dst[:] = ms.sum_rows(src)
    with pytest.raises(DTypeError, match="reduction of dtype float64 into a tensor of dtype "
                                         "float32; use ms.tcast"):
        dst[:] = ms.sumall_except_dim(ms.new_tensor((3, 2), 1, dtype=np.float64), 0)
    np.testing.assert_array_equal(dst.numpy(), [5, 5, 5])


def test_bad_axes_and_reducers():
    src = ms.new_tensor((3, 4), 1)
    with pytest.raises(ShapeError, match=r"sumall_except_dim<2>: dimkeep 2 out of range for a "
                                         r"2-D expression"):
        ms.sumall_except_dim(src, 2)
    with pytest.raises(TypeError, match="dimkeep must be an integer, got 1.5"):
        ms.sumall_except_dim(src, 1.5)
    with pytest.raises(ShapeError, match=r"reduce axis out of bound: axis 2 for a 2-D"):
        ms.reduce_with_axis(src, 2, ms.red.sum)
    with pytest.raises(ShapeError, match="axis -3 out of range"):
        ms.reduce_keepdim(src, -3, ms.red.sum)
    with pytest.raises(TypeError, match=f"reducer must be {reducer_names()}, got 'sum'"):
        ms.reduce_except_dim(src, 0, "sum")
    with pytest.raises(ValueError, match="mask=True .* needs ms.red.maximum or ms.red.minimum"):
        ms.reduce_with_axis(src, 0, ms.red.sum, mask=True)
    with pytest.raises(ShapeError, match="1-D source would reduce to a 0-D result"):
        ms.reduce_with_axis(ms.new_tensor((3,), 1), 0, ms.red.sum)
    with pytest.raises(ShapeError, match=r"sum_rows: expects a 2-D expression, got shape "
                                         r"\(2, 3, 4\)"):
        ms.sum_rows(ms.new_tensor((2, 3, 4), 1))
    with pytest.raises(TypeError, match="cannot reduce float 3.0"):
        ms.sum_rows(3.0)


def test_reduce_to_1d_cannot_be_nested_in_elementwise_expressions():
    # sum_rows / sumall_except_dim are kComplex in mshadow (ReduceTo1DExp): assign them first
    src = ms.new_tensor((3, 4), 1)
    v = ms.new_tensor((4,), 1)
    for bad in (lambda: ms.sum_rows(src) + v, lambda: v * ms.sum_rows(src)):
        with pytest.raises(TypeError, match="cannot be nested"):
            bad()


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32])
@pytest.mark.parametrize("axis", [0, 1, 2])
@pytest.mark.parametrize("reducer", ["sum", "maximum", "minimum", "argmax", "argmin"])
def test_reduce_with_axis_nests_as_a_chainer(dtype, axis, reducer):
    # mshadow's reduce_with_axis / reduce_keepdim are chainers: they nest in element-wise
    # expressions, extensions and views (a reader per output element, in mshadow's order)
    rng = np.random.default_rng(axis)
    x0 = rng.integers(-20, 20, (5, 6, 7)).astype(dtype)
    x = ms.from_numpy(x0)
    red = {"sum": ms.red.sum, "maximum": ms.red.maximum, "minimum": ms.red.minimum,
           "argmax": ms.red.maximum, "argmin": ms.red.minimum}[reducer]
    mask = reducer.startswith("arg")
    ref = {"sum": np.sum, "maximum": np.max, "minimum": np.min, "argmax": np.argmax,
           "argmin": np.argmin}[reducer](x0, axis=axis).astype(dtype)
    e = ms.reduce_with_axis(x * 1, axis, red, mask) / 2 + 1
    y = ms.new_tensor(ref.shape, dtype=dtype)
    y[:] = e
    want = (ref / 2 + 1) if np.dtype(dtype).kind == "f" else np.trunc(ref / 2) + 1   # C division
    np.testing.assert_array_equal(y.numpy(), want.astype(dtype))
    k = ms.reduce_keepdim(x, axis, red, mask)
    b = ms.new_tensor(x0.shape, dtype=dtype)
    b[:] = x - ms.broadcast_keepdim(k, axis, x0.shape[axis])
    np.testing.assert_array_equal(b.numpy(), x0 - np.expand_dims(ref, axis))


def test_bad_scales():
    fsrc = ms.new_tensor((3, 4), 1)
    isrc = ms.new_tensor((3, 4), 1, dtype=np.int32)
    with pytest.raises(DTypeError, match="scale 0.5 is not representable in int32"):
        ms.sum_rows(isrc) * 0.5
    with pytest.raises(DTypeError, match="scalar of dtype float64 scales a reduction of dtype "
                                         "float32"):
        ms.sum_rows(fsrc) * ms.scalar(2, np.float64)
    with pytest.raises(TypeError, match="real scalar, got True"):
        ms.sum_rows(fsrc)._scaled(True)
    with pytest.raises(TypeError, match="real scalar, got 1j"):
        ms.sum_rows(fsrc)._scaled(1j)


def test_read_only_freed_and_gpu_destinations():
    src = ms.new_tensor((3, 4), 1)
    ro = np.zeros(4, np.float32)
    ro.flags.writeable = False
    with pytest.raises(ValueError, match="read-only"):
        ms.from_numpy(ro)[:] = ms.sum_rows(src)
    dst = ms.new_tensor((4,), 0)
    ms.free_space(dst)
    with pytest.raises(FreedTensorError):
        dst[:] = ms.sum_rows(src)
    gone = ms.new_tensor((3, 4), 1)
    exp = ms.sum_rows(gone)
    ms.free_space(gone)
    with pytest.raises(FreedTensorError):
        ms.new_tensor((4,), 0)[:] = exp
    gsrc = ms.Tensor((3, 4), device=ms.gpu)      # a handle only: never allocated
    with pytest.raises(DeviceError, match=r"tensors of different devices \(the destination on cpu, operands on gpu\)"):
        ms.new_tensor((4,), 0)[:] = ms.sum_rows(gsrc)


def test_repr_and_fields():
    e = -ms.reduce_keepdim(ms.new_tensor((2, 3), 0), 1, ms.red.minimum, mask=True)
    assert e.exp_type == ms.type.kComplex and e.shape == (2, 1) and e.code == "f32"
    assert "reduce_keepdim<red::minimum, true>" in repr(e) and "* -1.0" in repr(e)


def test_plan_for_a_kcomplex_expression_says_what_evaluates_it():
    x = ms.new_tensor((3, 4), 1)
    with pytest.raises(TypeError, match="kComplex: its own engine"):
        ms.plan_for(ms.new_tensor((4,)), ms.sum_rows(x))
