"""Reductions over narrow rows: several rows a block in registers (plan_exec.h
ms_rows_per_block), each row still reduced alone into its own partial (a call a row)."""
import numpy as np
import pytest

import mshadow as ms


@pytest.mark.parametrize("shape", [(200, 1), (256, 1), (256, 2), (100, 3), (128, 49), (7, 64)])
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32])
def test_each_narrow_row_its_own_sum(shape, dtype):
    rng = np.random.default_rng(shape[0] + shape[1])
    v = rng.integers(-50, 50, shape).astype(dtype)       # sums exact in every order
    x = ms.from_numpy(v)
    y = ms.new_tensor((shape[0],), dtype=dtype)
    y[:] = ms.reduce_with_axis(x * 1, 1, ms.red.sum)
    assert np.array_equal(y.numpy(), v.sum(1, dtype=dtype))
    k = ms.new_tensor((shape[0], 1), dtype=dtype)
    k[:] = ms.reduce_keepdim(x + 0, 1, ms.red.sum)
    assert np.array_equal(k.numpy(), v.sum(1, keepdims=True, dtype=dtype))


# ---- a sum over all axes but one whose trailing axes are narrow (reduce.py _fold_shape):
# the leading axes accumulated as rows of (A, B * C), then each kept index's C values
from mshadow.extension import reduce as red_mod  # noqa: E402

FOLD_SHAPES = [((8, 16, 7, 7), 1), ((32, 64, 2, 2), 1), ((3, 5, 4, 9), 2), ((1, 6, 7, 7), 1),
               ((4, 3, 1), 1), ((70, 9, 3), 1), ((2, 130, 127), 1)]
TOL = {np.float16: 2e-3, np.float32: 1e-5, np.float64: 1e-12}


def _tensor(a, pad=False):
    t = ms.new_tensor(a.shape, dtype=a.dtype, pad=pad)
    t.numpy()[...] = a
    return t


@pytest.mark.parametrize("shape, axis", FOLD_SHAPES)
@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
def test_sum_except_dim_over_narrow_trailing_axes(shape, axis, dtype):
    rng = np.random.default_rng(sum(shape) + axis)
    v = rng.standard_normal(shape).astype(dtype)
    x = _tensor(v)
    others = tuple(k for k in range(len(shape)) if k != axis)
    for exp, ref in [(ms.sumall_except_dim(x, axis), v.astype(np.float64)),
                     (ms.sumall_except_dim(x * 2 + 1, axis), v.astype(np.float64) * 2 + 1)]:
        rc = red_mod.fast_recipe(exp)
        C = int(np.prod(shape[axis + 1:]))
        assert rc is not None and not rc.by_rows and rc.partial == (shape[axis], C)
        y = ms.new_tensor((shape[axis],), dtype=dtype)
        y[:] = exp
        want = ref.sum(others)
        bound = TOL[dtype] * (np.abs(ref).sum(others) + 1)
        assert np.all(np.abs(y.numpy() - want) <= bound), (y.numpy(), want)
        z = ms.new_tensor((shape[axis],), dtype=dtype)
        red_mod._eval(z, exp, "saveto")            # reduce.py's route: the same recipe
        assert z.numpy().tobytes() == y.numpy().tobytes()


def test_pitched_sources_and_savers_keep_their_values():
    rng = np.random.default_rng(9)
    v = rng.standard_normal((6, 5, 3, 4)).astype(np.float32)
    x = _tensor(v, pad=True)                      # not contiguous: no fold, the same sums
    y = ms.new_tensor((5,), dtype=np.float32, init=1)
    y += ms.sumall_except_dim(x * 1, 1)
    np.testing.assert_allclose(y.numpy(), 1 + v.astype(np.float64).sum((0, 2, 3)), rtol=1e-5)
    y *= ms.sumall_except_dim(_tensor(v), 1) * 0.5
    np.testing.assert_allclose(y.numpy(), (1 + v.astype(np.float64).sum((0, 2, 3)))
                               * v.astype(np.float64).sum((0, 2, 3)) * 0.5, rtol=1e-4)


def test_integer_and_maximum_reductions_stay_exact():
    rng = np.random.default_rng(4)
    v = rng.integers(-9, 9, (7, 5, 3, 3)).astype(np.int32)
    y = ms.new_tensor((5,), dtype=np.int32)
    y[:] = ms.sumall_except_dim(_tensor(v) * 1, 1)
    assert np.array_equal(y.numpy(), v.sum((0, 2, 3), dtype=np.int32))
    f = rng.standard_normal((7, 5, 3, 3)).astype(np.float32)
    m = ms.new_tensor((5,), dtype=np.float32)
    m[:] = ms.reduce_except_dim(_tensor(f) * 1, 1, ms.red.maximum)
    assert np.array_equal(m.numpy(), f.max((0, 2, 3)))


def test_the_fold_adds_in_its_documented_order():
    # (A, B, C) = (130, 7, 40) float32 read as 130 rows of 280: rows added in order in
    # float32 in groups of 64 (ROWS_PER_GROUP), the groups added in float64, then each
    # kept index's 40 values added in order in float64, cast to float32
    rng = np.random.default_rng(16)
    a = (rng.standard_normal((130, 7, 40)) * 1e3).astype(np.float32)
    rows = (a * np.float32(2) - np.float32(1)).reshape(130, 280)
    tot = np.zeros(280, np.float64)
    for g in range(0, 130, red_mod.ROWS_PER_GROUP):
        acc = np.zeros(280, np.float32)
        for r in rows[g:g + red_mod.ROWS_PER_GROUP]:
            acc = (acc + r).astype(np.float32)
        tot = tot + acc
    want = np.zeros(7, np.float64)
    for q in range(40):
        want = want + tot.reshape(7, 40)[:, q]
    y = ms.new_tensor((7,), dtype=np.float32)
    y[:] = ms.sumall_except_dim(_tensor(a) * 2 - 1, 1)
    np.testing.assert_array_equal(y.numpy(), want.astype(np.float32))
