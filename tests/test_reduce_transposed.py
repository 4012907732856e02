"""A reduction over the leading axis of an expression of transposed tensors
(``sum_rows(a.T * w.T)``): reduce.py's recipe reads the tensors' own rows (the reduced
columns of the .T are the rows of the tensors) instead of accumulating rows of the .T, a
column of each tensor an element at a time. Against numpy (the values, every float dtype,
pitched and odd shapes), reduce.py's route (the same bits as the statement), and the
recipe's structure."""
import numpy as np
import pytest

import mshadow as ms
from mshadow.extension import reduce as red_mod

SHAPES = [(3, 5), (1, 9), (9, 1), (64, 64), (130, 33), (7, 1024), (1024, 7)]
TOL = {np.float16: 3e-3, np.float32: 1e-5, np.float64: 1e-12}


def _tensor(a, pad=False):
    t = ms.new_tensor(a.shape, dtype=a.dtype, pad=pad)
    t.numpy()[...] = a
    return t


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("pad", [False, True])
def test_sum_over_the_rows_of_a_transposed_expression(shape, dtype, pad):
    rng = np.random.default_rng(sum(shape))
    av = rng.standard_normal(shape).astype(dtype)
    wv = rng.standard_normal(shape).astype(dtype)
    a, w = _tensor(av, pad), _tensor(wv, pad)
    exp = ms.sum_rows(a.T * w.T + 1)
    rc = red_mod.fast_recipe(exp)
    assert rc is not None and rc.by_rows and tuple(rc.shape) == shape   # the tensors' rows
    y = ms.new_tensor((shape[0],), dtype=dtype)
    y[:] = exp
    want = (av.astype(np.float64) * wv + 1).sum(1)
    scale = np.abs(av.astype(np.float64) * wv).sum(1) + shape[1]
    assert np.all(np.abs(y.numpy() - want) <= TOL[dtype] * scale + TOL[dtype])
    # reduce.py's route runs the same recipe: the same bits
    z = ms.new_tensor((shape[0],), dtype=dtype)
    red_mod._eval(z, exp, "saveto")
    assert z.numpy().tobytes() == y.numpy().tobytes()


@pytest.mark.parametrize("shape", [(5, 8), (33, 1000)])
def test_keepdim_maximum_and_savers_of_a_transposed_expression(shape):
    rng = np.random.default_rng(3)
    av = rng.standard_normal(shape).astype(np.float32)
    a = _tensor(av)
    y = ms.new_tensor((1, shape[0]), dtype=np.float32, init=2)
    y[:] = ms.reduce_keepdim(a.T * 2, 0, ms.red.sum)
    np.testing.assert_allclose(y.numpy(), (av.astype(np.float64) * 2).sum(1)[None], rtol=1e-5,
                               atol=1e-4)
    m = ms.new_tensor((shape[0],), dtype=np.float32)
    m[:] = ms.reduce_with_axis(a.T * 1, 0, ms.red.maximum)
    assert np.array_equal(m.numpy(), av.max(1))
    s = ms.new_tensor((shape[0],), dtype=np.float32, init=1)
    s += ms.sum_rows(ms.F(ms.op.exp, a.T))
    np.testing.assert_allclose(s.numpy(), 1 + np.exp(av.astype(np.float64)).sum(1), rtol=1e-5)


def test_mixed_leaves_keep_the_accumulation():
    # a.T + b: a read transposed, b not: no one set of rows holds the reduced columns
    rng = np.random.default_rng(5)
    av = rng.standard_normal((6, 6)).astype(np.float32)
    bv = rng.standard_normal((6, 6)).astype(np.float32)
    a, b = _tensor(av), _tensor(bv)
    exp = ms.sum_rows(a.T + b)
    rc = red_mod.fast_recipe(exp)
    assert rc is not None and not rc.by_rows
    y = ms.new_tensor((6,), dtype=np.float32)
    y[:] = exp
    np.testing.assert_allclose(y.numpy(), (av.T + bv).sum(0), rtol=1e-5, atol=1e-5)
