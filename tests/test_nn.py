"""mshadow.nn free functions (Softmax, SoftmaxGrad, AddTakeGrad, SortByKey, MapReduce*) vs numpy.

Every dtype where it applies, pitched and contiguous tensors, in-place use, every error path.
"""
import numpy as np
import pytest

import mshadow as ms
from mshadow import nn
from mshadow.errors import DeviceError, DTypeError, FreedTensorError, ShapeError
from mshadow.testing import ALL_DTYPES, FLOAT_DTYPES, SAVERS, compute_dtype, ref_apply

TOL = {np.dtype(np.float16): 2e-3, np.dtype(np.float32): 1e-6, np.dtype(np.float64): 1e-14}
_SAVER_OP = {"plusto": "plus", "minusto": "minus", "multo": "mul", "divto": "div"}


def tensor(values, pitched=True):
    values = np.asarray(values)
    t = ms.new_tensor(values.shape, 0, pad=pitched, dtype=values.dtype)
    t.numpy()[...] = values
    return t


def ref_softmax(e, axis):
    e = e.astype(np.float64)
    x = np.exp(e - e.max(axis=axis, keepdims=True))
    return x / x.sum(axis=axis, keepdims=True)


def read_only(a):
    a = np.array(a)
    a.flags.writeable = False
    return ms.from_numpy(a)


# ---- softmax ----------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=lambda d: d.name)
@pytest.mark.parametrize("shape", [(7,), (4, 7), (3, 5, 7)], ids=str)
@pytest.mark.parametrize("pitched", [False, True], ids=["contiguous", "pitched"])
def test_softmax_matches_numpy(dtype, shape, pitched):
    rng = np.random.default_rng(0)
    e = (rng.standard_normal(shape) * 4).astype(dtype)
    dst = tensor(np.zeros(shape, dtype), pitched)
    nn.softmax(dst, tensor(e, pitched))
    axis = 0 if len(shape) == 1 else 1
    np.testing.assert_allclose(dst.numpy().astype(np.float64), ref_softmax(e, axis),
                               rtol=4 * TOL[np.dtype(dtype)], atol=TOL[np.dtype(dtype)])


def test_softmax_in_place_and_large_values():
    e = np.array([[1000.0, 1001.0, 999.0], [-1000.0, -1000.0, -1000.0]], np.float32)
    t = tensor(e)
    nn.softmax(t, t)
    np.testing.assert_allclose(t.numpy(), ref_softmax(e, 1), rtol=1e-6)
    assert np.isfinite(t.numpy()).all()


def test_softmax_3d_is_over_axis_1():
    e = np.zeros((2, 3, 4), np.float32)
    e[:, 1, :] = 5                  # class 1 dominates on axis 1, not on the last axis
    d = ms.new_tensor(e.shape, 0)
    nn.Softmax(d, ms.from_numpy(e))
    np.testing.assert_allclose(d.numpy().sum(1), np.ones((2, 4)), rtol=1e-6)
    assert (d.numpy().argmax(1) == 1).all()


def test_softmax_empty_is_a_no_op():
    nn.softmax(ms.new_tensor((0, 3), 0), ms.new_tensor((0, 3), 0))
    nn.softmax(ms.new_tensor((2, 0), 0), ms.new_tensor((2, 0), 0))


def test_softmax_errors():
    a = ms.new_tensor((2, 3), 0)
    with pytest.raises(ShapeError, match=r"Softmax: shape mismatch: dst \(2, 3\), energy "
                                         r"\(3, 2\)"):
        nn.softmax(a, ms.new_tensor((3, 2), 0))
    with pytest.raises(ShapeError, match=r"Softmax: dst must be 1-D or 2-D or 3-D, got shape "
                                         r"\(1, 2, 3, 4\)"):
        nn.softmax(ms.new_tensor((1, 2, 3, 4), 0), ms.new_tensor((1, 2, 3, 4), 0))
    with pytest.raises(DTypeError, match="floating-point dtype .* got int32"):
        nn.softmax(ms.new_tensor((2, 3), 0, dtype=np.int32),
                   ms.new_tensor((2, 3), 0, dtype=np.int32))
    with pytest.raises(DTypeError, match="dst has dtype float32 but energy has dtype float64"):
        nn.softmax(a, ms.new_tensor((2, 3), 0, dtype=np.float64))
    with pytest.raises(TypeError, match="energy must be a Tensor .* got list"):
        nn.softmax(a, [[1, 2, 3], [4, 5, 6]])
    with pytest.raises(ValueError, match="Softmax: dst is read-only"):
        nn.softmax(read_only(np.zeros((2, 3), np.float32)), a)
    with pytest.raises(DeviceError, match="Softmax: tensors of different devices"):
        nn.softmax(ms.Tensor((2, 3), device=ms.gpu), a)
    from mshadow import cuda
    if cuda.unavailable_reason() is not None:
        with pytest.raises(DeviceError, match="Softmax: dst: gpu tensors need the CUDA backend"):
            nn.softmax(ms.Tensor((2, 3), device=ms.gpu), ms.Tensor((2, 3), device=ms.gpu))
    gone = ms.new_tensor((2, 3), 0)
    ms.free_space(gone)
    with pytest.raises(FreedTensorError):
        nn.softmax(gone, a)


# ---- SoftmaxGrad / SmoothSoftmaxGrad ----------------------------------------------------
def ref_grad(src, label, ignore=None, alpha=None):
    """mshadow's loops, written out over numpy (label on axis 0, or (0, 2) for 3-D)."""
    d = src.astype(np.float64).copy()
    ncls = src.shape[1]
    lab = np.trunc(label.astype(np.float64)).astype(np.int64)
    for pos in np.ndindex(*lab.shape):
        k = lab[pos]
        sl = (pos[0], slice(None)) + tuple(pos[1:])
        if ignore is not None and k == int(ignore):
            d[sl] = 0
            continue
        if alpha is None:
            d[sl][k] -= 1
        else:
            share = float(np.float32(alpha) / np.float32(ncls - 1))
            row = d[sl] - share
            row[k] = src.astype(np.float64)[sl][k] - 1 + float(np.float32(alpha))
            d[sl] = row
    return d


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=lambda d: d.name)
@pytest.mark.parametrize("ndim", [2, 3])
@pytest.mark.parametrize("ignore", [None, -1, 2])
@pytest.mark.parametrize("label_dtype", [np.float32, np.int32], ids=["f32", "i32"])
def test_softmax_grad(dtype, ndim, ignore, label_dtype):
    rng = np.random.default_rng(2)
    shape = (4, 5) if ndim == 2 else (3, 5, 2)
    src = rng.random(shape).astype(dtype)
    lshape = (shape[0],) if ndim == 2 else (shape[0], shape[2])
    lab = rng.integers(0, 5, lshape)
    if ignore == -1:
        lab.flat[1] = -1
    lab = lab.astype(label_dtype)
    dst = tensor(np.full(shape, 9, dtype))
    nn.softmax_grad(dst, tensor(src), ms.from_numpy(lab), ignore)
    np.testing.assert_allclose(dst.numpy(), ref_grad(src, lab, ignore), atol=TOL[np.dtype(dtype)])
    sm = tensor(np.full(shape, 9, dtype), pitched=False)
    nn.smooth_softmax_grad(sm, tensor(src), ms.from_numpy(lab), 0.1, ignore)
    np.testing.assert_allclose(sm.numpy(), ref_grad(src, lab, ignore, 0.1),
                               atol=TOL[np.dtype(dtype)])


def test_softmax_grad_float_labels_truncate_and_in_place():
    src = np.array([[0.2, 0.3, 0.5], [0.1, 0.1, 0.8]], np.float32)
    t = tensor(src)
    nn.SoftmaxGrad(t, t, ms.from_numpy(np.array([1.9, 0.2], np.float32)))
    np.testing.assert_allclose(t.numpy(), [[0.2, -0.7, 0.5], [-0.9, 0.1, 0.8]], rtol=1e-6)


def test_smooth_softmax_grad_one_class_and_in_place():
    t = tensor(np.array([[0.25], [0.75]], np.float64))
    nn.SmoothSoftmaxGrad(t, t, ms.from_numpy(np.array([0, 0], np.int64)), 0.5)
    np.testing.assert_allclose(t.numpy(), [[-0.25], [0.25]])


def test_softmax_grad_errors():
    dst, src = ms.new_tensor((2, 3), 0), ms.new_tensor((2, 3), 0)
    lab = ms.from_numpy(np.array([0, 3], np.float32))
    before = dst.numpy().copy()
    with pytest.raises(ValueError, match=r"SoftmaxGrad: label 3 at \(1,\) out of range \[0, 3\)"):
        nn.softmax_grad(dst, src, lab)
    with pytest.raises(ValueError, match="SmoothSoftmaxGrad: label -1 at"):
        nn.smooth_softmax_grad(dst, src, ms.from_numpy(np.array([0, -1])), 0.1)
    with pytest.raises(ValueError, match=r"label nan at \(0,\) is not finite"):
        nn.softmax_grad(dst, src, ms.from_numpy(np.array([np.nan, 0], np.float32)))
    with pytest.raises(ValueError, match="ignore_label inf is not finite"):
        nn.softmax_grad(dst, src, ms.from_numpy(np.array([0, 1])), float("inf"))
    with pytest.raises(TypeError, match="ignore_label must be a real number, got 'x'"):
        nn.softmax_grad(dst, src, ms.from_numpy(np.array([0, 1])), "x")
    with pytest.raises(TypeError, match="alpha must be a real number, got None"):
        nn.smooth_softmax_grad(dst, src, ms.from_numpy(np.array([0, 1])), None)
    with pytest.raises(ShapeError, match=r"label shape \(3,\) does not match dst \(2, 3\) "
                                         r"\(expected \(2,\)\)"):
        nn.softmax_grad(dst, src, ms.from_numpy(np.array([0, 1, 2])))
    with pytest.raises(ShapeError, match=r"label must be 2-D, got shape \(3,\)"):
        nn.softmax_grad(ms.new_tensor((3, 2, 2), 0), ms.new_tensor((3, 2, 2), 0),
                        ms.from_numpy(np.array([0, 1, 0])))
    with pytest.raises(ShapeError, match=r"SoftmaxGrad: shape mismatch: dst \(2, 3\), src"):
        nn.softmax_grad(dst, ms.new_tensor((2, 4), 0), lab)
    with pytest.raises(DTypeError, match="floating-point dtype"):
        nn.softmax_grad(ms.new_tensor((2, 3), 0, dtype=np.int8),
                        ms.new_tensor((2, 3), 0, dtype=np.int8), lab)
    with pytest.raises(ValueError, match="dst is read-only"):
        nn.softmax_grad(read_only(np.zeros((2, 3), np.float32)), src,
                        ms.from_numpy(np.array([0, 1])))
    np.testing.assert_array_equal(dst.numpy(), before)


# ---- AddTakeGrad, AddTakeGradLargeBatch, IndexFill --------------------------------------
@pytest.mark.parametrize("pitched", [False, True], ids=["contiguous", "pitched"])
def test_add_take_grad_clamps_and_accumulates(dtype, pitched):
    idx = np.array([-4, 1, 7, 1, 0, 2])
    src = (np.arange(18) % 7 + 1).reshape(6, 3).astype(dtype)
    d0 = np.ones((3, 3), dtype)
    dst = tensor(d0, pitched)
    nn.add_take_grad(dst, ms.from_numpy(idx), tensor(src, pitched))
    want = d0.astype(np.int64 if np.dtype(dtype).kind in "iu" else np.float64)
    np.add.at(want, np.clip(idx, 0, 2), src)
    np.testing.assert_array_equal(dst.numpy(), want.astype(dtype))


def test_add_take_grad_float_index_and_aliased_source():
    t = tensor(np.arange(6, dtype=np.float32).reshape(3, 2))
    nn.AddTakeGrad(t, ms.from_numpy(np.array([2.7, -0.5, 9.0], np.float32)), t)
    # src is read as it was before any add: dst[2] += r0 + r2, dst[0] += r1
    np.testing.assert_array_equal(t.numpy(), [[2, 4], [2, 3], [8, 11]])


def test_add_take_grad_large_batch(dtype):
    src = (np.arange(12) % 9 + 1).reshape(4, 3).astype(dtype)
    sorted_ = np.array([0, 0, 2, 3, 3])
    index = np.array([3, 1, 0, 2, 2])
    dst = tensor(np.zeros((4, 3), dtype))
    nn.AddTakeGradLargeBatch(dst, ms.from_numpy(sorted_), ms.from_numpy(index), tensor(src))
    want = np.zeros((4, 3), np.float64)
    for s, i in zip(sorted_, index):
        want[s] += src[i]
    np.testing.assert_array_equal(dst.numpy(), want.astype(dtype))


def test_index_fill_last_write_wins(dtype):
    src = np.arange(12).reshape(4, 3).astype(dtype)
    dst = tensor(np.full((3, 3), 50, dtype))
    nn.IndexFill(dst, ms.from_numpy(np.array([2, 0, 2, 2], np.int32)), tensor(src, False))
    np.testing.assert_array_equal(dst.numpy(), np.array([src[1], [50] * 3, src[3]], dtype))


def test_scatter_errors():
    dst, src = ms.new_tensor((3, 2), 0), ms.new_tensor((2, 2), 1)
    with pytest.raises(IndexError, match=r"IndexFill: index 3 at \(1,\) out of range \[0, 3\)"):
        nn.index_fill(dst, ms.from_numpy(np.array([0, 3])), src)
    with pytest.raises(IndexError, match=r"AddTakeGradLargeBatch: sorted -1 at \(0,\)"):
        nn.add_take_grad_large_batch(dst, ms.from_numpy(np.array([-1, 0])),
                                     ms.from_numpy(np.array([0, 1])), src)
    with pytest.raises(IndexError, match=r"AddTakeGradLargeBatch: index 2 at \(1,\) out of "
                                         r"range \[0, 2\)"):
        nn.add_take_grad_large_batch(dst, ms.from_numpy(np.array([0, 0])),
                                     ms.from_numpy(np.array([0, 2])), src)
    with pytest.raises(ShapeError, match="sorted length 1 and index length 2 differ"):
        nn.add_take_grad_large_batch(dst, ms.from_numpy(np.array([0])),
                                     ms.from_numpy(np.array([0, 1])), src)
    with pytest.raises(ShapeError, match=r"AddTakeGrad: index length 3 does not match src rows "
                                         r"\(2, 2\)"):
        nn.add_take_grad(dst, ms.from_numpy(np.array([0, 1, 2])), src)
    with pytest.raises(ShapeError, match=r"dst \(3, 2\) and src \(2, 3\) must have the same "
                                         r"number of columns"):
        nn.add_take_grad(dst, ms.from_numpy(np.array([0, 1])), ms.new_tensor((2, 3), 0))
    with pytest.raises(ShapeError, match=r"dst \(0, 2\) has no rows"):
        nn.add_take_grad(ms.new_tensor((0, 2), 0), ms.from_numpy(np.array([0, 1])), src)
    with pytest.raises(ShapeError, match=r"index must be 1-D, got shape \(2, 1\)"):
        nn.add_take_grad(dst, ms.from_numpy(np.zeros((2, 1), np.int32)), src)
    with pytest.raises(DTypeError, match="dst has dtype float32 but src has dtype int32"):
        nn.index_fill(dst, ms.from_numpy(np.array([0, 1])), ms.new_tensor((2, 2), 0, dtype=np.int32))
    with pytest.raises(ValueError, match=r"index nan at \(0,\) is not finite"):
        nn.add_take_grad(dst, ms.from_numpy(np.array([np.nan, 1.0])), src)
    with pytest.raises(ValueError, match="AddTakeGrad: dst is read-only"):
        nn.add_take_grad(read_only(np.zeros((3, 2), np.float32)),
                         ms.from_numpy(np.array([0, 1])), src)
    np.testing.assert_array_equal(dst.numpy(), np.zeros((3, 2)))


# ---- SortByKey, VectorizedSort ----------------------------------------------------------
@pytest.mark.parametrize("ascend", [True, False])
def test_sort_by_key_is_stable(dtype, ascend):
    keys = np.array([3, 1, 3, 2, 1, 0, 2], dtype)
    vals = np.arange(7, dtype=np.float64)
    k, v = ms.from_numpy(keys.copy()), ms.new_tensor((7,), 0, dtype=np.float64)
    v.numpy()[:] = vals
    nn.SortByKey(k, v, ascend)
    # the oracle: Python's sort is stable in both directions
    order = sorted(range(7), key=lambda i: keys[i], reverse=not ascend)
    if not ascend:   # reverse=True keeps equal keys in their original order too
        assert order == sorted(range(7), key=lambda i: -float(keys[i]))
    np.testing.assert_array_equal(k.numpy(), keys[order])
    np.testing.assert_array_equal(v.numpy(), vals[order])


def test_sort_by_key_nan_keys():
    keys = np.array([2.0, np.nan, 1.0, np.nan], np.float32)
    k, v = ms.from_numpy(keys.copy()), ms.from_numpy(np.arange(4, dtype=np.int32))
    nn.sort_by_key(k, v)
    np.testing.assert_array_equal(v.numpy(), [2, 0, 1, 3])
    k, v = ms.from_numpy(keys.copy()), ms.from_numpy(np.arange(4, dtype=np.int32))
    nn.sort_by_key(k, v, is_ascend=False)
    np.testing.assert_array_equal(v.numpy(), [1, 3, 0, 2])


def test_vectorized_sort(dtype):
    vals = np.array([5, 1, 3, 9, 2, 2, 7], dtype)
    segs = np.array([0, 0, 1, 1, 1, 2, 2], np.int32)
    v, s = ms.from_numpy(vals.copy()), ms.from_numpy(segs.copy())
    nn.VectorizedSort(v, s)
    np.testing.assert_array_equal(v.numpy(), np.array([1, 5, 2, 3, 9, 2, 7], dtype))
    np.testing.assert_array_equal(s.numpy(), segs)


def test_sort_errors():
    with pytest.raises(ShapeError, match="^The sizes of key/value are not equal! keys_size: 3 "
                                         "values_size: 2$"):
        nn.sort_by_key(ms.new_tensor((3,), 0), ms.new_tensor((2,), 0))
    with pytest.raises(ShapeError, match=r"SortByKey: keys must be 1-D, got shape \(2, 2\)"):
        nn.sort_by_key(ms.new_tensor((2, 2), 0), ms.new_tensor((4,), 0))
    k = ms.from_numpy(np.array([2.0, 1.0], np.float32))
    with pytest.raises(ValueError, match="SortByKey: values is read-only"):
        nn.sort_by_key(k, read_only([1.0, 2.0]))
    np.testing.assert_array_equal(k.numpy(), [2, 1])       # keys untouched
    with pytest.raises(ShapeError, match="The sizes of key/value are not equal"):
        nn.vectorized_sort(ms.new_tensor((3,), 0), ms.new_tensor((4,), 0))


# ---- MapReduceKeepLowest / MapReduceKeepHighDim -----------------------------------------
def saved(dst0, val, saver, dtype):
    if saver == "saveto":
        return val
    return ref_apply(_SAVER_OP[saver], [dst0, val], compute_dtype(dtype)).astype(dtype)


@pytest.mark.parametrize("saver", SAVERS)
def test_map_reduce_keep_lowest(dtype, saver):
    a = (np.arange(24) % 4 + 1).reshape(2, 3, 4).astype(dtype)
    dst0 = np.full(4, 3, dtype)
    dst = ms.from_numpy(dst0.copy())
    nn.MapReduceKeepLowest(dst, tensor(a), saver, ms.red.maximum, 2)
    val = (a.max((0, 1)).astype(compute_dtype(dtype)) * 2).astype(dtype)
    np.testing.assert_array_equal(dst.numpy(), saved(dst0, val, saver, dtype))


@pytest.mark.parametrize("saver", SAVERS)
@pytest.mark.parametrize("dimkeep", [0, 1])
def test_map_reduce_keep_high_dim(dtype, saver, dimkeep):
    a = (np.arange(24) % 3 + 1).reshape(2, 3, 4).astype(dtype)
    dst0 = np.full(a.shape[dimkeep], 2, dtype)
    dst = ms.from_numpy(dst0.copy())
    nn.MapReduceKeepHighDim(dst, tensor(a), dimkeep, saver, ms.red.sum, -1)
    axes = tuple(k for k in range(3) if k != dimkeep)
    with np.errstate(over="ignore"):
        val = (-a.astype(np.int64 if np.dtype(dtype).kind in "iu" else np.float64)
               .sum(axes)).astype(dtype)
    np.testing.assert_array_equal(dst.numpy(), saved(dst0, val, saver, dtype))


def test_map_reduce_of_an_expression_and_defaults():
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    dst = ms.new_tensor((3,), 0)
    nn.map_reduce_keep_lowest(dst, ms.from_numpy(a) * 2)
    np.testing.assert_array_equal(dst.numpy(), (a * 2).sum(0))
    d2 = ms.new_tensor((2,), 0)
    nn.map_reduce_keep_high_dim(d2, ms.from_numpy(a), 0, reducer=ms.red.minimum)
    np.testing.assert_array_equal(d2.numpy(), a.min(1))


def test_map_reduce_errors():
    a = ms.new_tensor((2, 3), 1)
    dst = ms.new_tensor((3,), 5)
    with pytest.raises(ShapeError, match="^MapReduceKeepLowest::reduction dimension do not "
                                         "match: dst length 2"):
        nn.map_reduce_keep_lowest(ms.new_tensor((2,), 0), a)
    with pytest.raises(ShapeError, match="MapReduceKeepLowest: can not reduce over empty "
                                         "tensor"):
        nn.map_reduce_keep_lowest(dst, ms.new_tensor((0, 3), 0))
    with pytest.raises(ShapeError, match="^MapReduceKeepHighDim::reduction dimension do not "
                                         "match: dst length 3"):
        nn.map_reduce_keep_high_dim(dst, a, 0)
    with pytest.raises(ShapeError, match="dimkeep 1 must be an axis before the last"):
        nn.map_reduce_keep_high_dim(dst, a, 1)
    with pytest.raises(TypeError, match="dimkeep must be an integer, got '0'"):
        nn.map_reduce_keep_high_dim(dst, a, "0")
    with pytest.raises(ShapeError, match=r"dst must be 1-D, got shape \(3, 1\)"):
        nn.map_reduce_keep_lowest(ms.new_tensor((3, 1), 0), a)
    with pytest.raises(TypeError, match="dst must be a Tensor, got ndarray"):
        nn.map_reduce_keep_lowest(np.zeros(3, np.float32), a)
    with pytest.raises(ValueError, match="saver must be one of saveto, .* got 'assign'"):
        nn.map_reduce_keep_lowest(dst, a, "assign")
    with pytest.raises(TypeError, match="reducer must be ms.red.sum"):
        nn.map_reduce_keep_lowest(dst, a, ms.sv.saveto, np.add)
    with pytest.raises(DTypeError, match="reduction of dtype float32 into a tensor of dtype "
                                         "int32"):
        nn.map_reduce_keep_lowest(ms.new_tensor((3,), 0, dtype=np.int32), a)
    with pytest.raises(DTypeError, match="scale 1.5 is not representable in int32"):
        nn.map_reduce_keep_lowest(ms.new_tensor((3,), 0, dtype=np.int32),
                                  ms.new_tensor((2, 3), 1, dtype=np.int32), scale=1.5)
    with pytest.raises(ValueError, match="MapReduceKeepLowest: assignment destination is "
                                         "read-only"):
        nn.map_reduce_keep_lowest(read_only(np.zeros(3, np.float32)), a)
    np.testing.assert_array_equal(dst.numpy(), [5, 5, 5])


# ---- the C++ spellings ------------------------------------------------------------------
def test_cpp_alias_table():
    for cpp, py in [("Softmax", "softmax"), ("SoftmaxGrad", "softmax_grad"),
                    ("SmoothSoftmaxGrad", "smooth_softmax_grad"), ("AddTakeGrad", "add_take_grad"),
                    ("AddTakeGradLargeBatch", "add_take_grad_large_batch"),
                    ("IndexFill", "index_fill"), ("SortByKey", "sort_by_key"),
                    ("VectorizedSort", "vectorized_sort"),
                    ("MapReduceKeepLowest", "map_reduce_keep_lowest"),
                    ("MapReduceKeepHighDim", "map_reduce_keep_high_dim")]:
        assert getattr(nn, cpp) is getattr(nn, py), cpp
        assert cpp in nn.__all__ and py in nn.__all__
    assert ms.softmax is nn.softmax and ms.softmax_grad is nn.softmax_grad


# ---- softmax: the compiled row kernel (float32 / float64 rows) ----------------------------
def _softmax_in_lanes(e):
    """The kernel's result, bit for bit, built from independent pieces: each row's maximum,
    exp(e - max) by ms.op.exp (the same vmath exp), summed with element i in lane i % 16
    in order and the 16 lanes added pairwise, then each value divided by that sum."""
    e2 = np.atleast_2d(e)
    m = e2.max(axis=1, keepdims=True)
    t = ms.new_tensor(e2.shape, dtype=e2.dtype)
    t[:] = ms.F(ms.op.exp, ms.from_numpy(np.ascontiguousarray(e2 - m)))
    t = t.numpy()
    n = e2.shape[1]
    padded = np.zeros((e2.shape[0], -(-n // 16) * 16), e2.dtype)
    padded[:, :n] = t
    lanes = padded.reshape(e2.shape[0], -1, 16)
    tot = np.zeros((e2.shape[0], 16), e2.dtype)
    for k in range(lanes.shape[1]):
        tot = tot + lanes[:, k]
    for w in (8, 4, 2, 1):
        tot[:, :w] = tot[:, :w] + tot[:, w:2 * w]
    return (t / tot[:, :1]).reshape(e.shape)


@pytest.mark.usefixtures("restore_engine_state")
@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["f32", "f64"])
def test_softmax_rows_bit_for_bit_at_every_width_level_and_thread_count(dtype):
    from mshadow.testing import simd_levels
    rng = np.random.default_rng(1)
    for cols in list(range(1, 41)) + [63, 64, 65, 1000, 1037]:
        e = (rng.standard_normal((5, cols)) * 6).astype(dtype)
        want = _softmax_in_lanes(e)
        np.testing.assert_allclose(want, ref_softmax(e, 1), rtol=4 * TOL[np.dtype(dtype)],
                                   atol=TOL[np.dtype(dtype)])
        for level in simd_levels():
            ms.set_simd_level(level)
            for threads, pitched in ((1, False), (2, True)):
                ms.set_num_threads(threads)
                dst = tensor(np.zeros_like(e), pitched)
                nn.softmax(dst, tensor(e, pitched))
                assert dst.numpy().tobytes() == want.tobytes(), (cols, level, threads)
                t = tensor(e, pitched)                   # in place
                nn.softmax(t, t)
                assert t.numpy().tobytes() == want.tobytes(), (cols, level, "in place")
    e = (rng.standard_normal(37) * 6).astype(dtype)      # 1-D: one row
    d = tensor(np.zeros_like(e))
    nn.softmax(d, tensor(e))
    assert d.numpy().tobytes() == _softmax_in_lanes(e).tobytes()


@pytest.mark.usefixtures("restore_engine_state")
@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["f32", "f64"])
def test_softmax_division_bit_for_bit_where_values_underflow(dtype):
    """The vector levels divide by multiplying with 1 / sum and one fused correction where
    nothing can underflow, and divide elsewhere: rows whose exp values run down through
    the subnormals to 0 (a vector mixing both), rows of one value, and sums just under and
    over the ranges the correction takes all give the division's bits."""
    from mshadow.testing import simd_levels
    rng = np.random.default_rng(7)
    big = 100 if dtype == np.float32 else 740
    rows = [np.linspace(0, -1.1 * big, 67), np.concatenate([np.zeros(40), np.full(27, -big)]),
            rng.uniform(-big, 0, 67), np.zeros(67), rng.standard_normal(67) * 3,
            np.where(np.arange(67) % 5 == 0, 0.0, -0.7 * big)]
    e = np.array(rows, dtype)
    want = _softmax_in_lanes(e)
    assert (want[0] == 0).any() and ((want[0] > 0) & (want[0] < np.finfo(dtype).tiny)).any()
    for level in simd_levels():
        ms.set_simd_level(level)
        dst = tensor(np.zeros_like(e))
        nn.softmax(dst, tensor(e))
        assert dst.numpy().tobytes() == want.tobytes(), level


@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["f32", "f64"])
def test_softmax_rows_with_nan_and_infinities_as_numpy(dtype):
    e = np.array([[1, 2, np.nan, 3] * 5, [1, np.inf, 2, 3] * 5, [-np.inf] * 20,
                  [np.nan] + [1] * 19, [-np.inf, 0, -np.inf, 1] * 5], dtype)
    dst = tensor(np.zeros_like(e))
    with np.errstate(invalid="ignore"):
        want = ref_softmax(e, 1)
    nn.softmax(dst, tensor(e))
    np.testing.assert_allclose(dst.numpy(), want, rtol=4 * TOL[np.dtype(dtype)])


_FREE_RACE = """
import sys, threading, time
import numpy as np
import mshadow as ms
from mshadow.errors import FreedTensorError
what = sys.argv[1]
for r in range(12):
    src = ms.new_tensor((2048, 4096), init=1.0)
    dst = ms.new_tensor((2048, 4096), init=-7.0)
    go = threading.Event()
    errs = []
    def run():
        go.set()
        for _ in range(3):
            try:
                ms.copy(dst, src) if what == "copy" else ms.nn.softmax(dst, src)
            except FreedTensorError as e:
                errs.append(e)
    th = threading.Thread(target=run); th.start()
    go.wait(); time.sleep(0.002 * (r % 4))
    ms.free_space(src)
    th.join()
print("ok")
"""


@pytest.mark.parametrize("what", ["copy", "softmax"])
def test_free_space_while_copy_or_softmax_runs_without_the_gil(what):
    # copy ran its memmove with no GIL and nothing pinned: a free_space from another thread
    # unmapped the bytes under it (SIGSEGV); both pin now, and the free waits for the run
    import subprocess
    import sys
    root = __import__("os").path.dirname(__import__("os").path.dirname(ms.__file__))
    proc = subprocess.run([sys.executable, "-X", "faulthandler", "-c", _FREE_RACE, what],
                          capture_output=True, text=True, timeout=300, cwd=root)
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr[-3000:]


@pytest.mark.parametrize("shift", [1, -1, 2])
def test_softmax_of_rows_shifted_against_dst_in_one_buffer(shift):
    # the compiled row kernel (d36423f) read energy rows it had already overwritten when dst
    # and energy were views of one buffer a row or two apart (0.26 off); numpy's passes
    # read a snapshot, and the kernel leaves that case to them
    rng = np.random.default_rng(4)
    buf = rng.standard_normal((8, 5)).astype(np.float32)
    e_rows = slice(0, 6) if shift > 0 else slice(2, 8)
    d_rows = slice(shift, 6 + shift) if shift > 0 else slice(2 + shift, 8 + shift)
    want = ref_softmax(buf[e_rows].copy(), 1)
    nn.softmax(ms.from_numpy(buf[d_rows]), ms.from_numpy(buf[e_rows]))
    np.testing.assert_allclose(buf[d_rows], want, rtol=1e-6, atol=1e-7)
