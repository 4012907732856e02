"""Python operators users expect on tensors and expressions: == and != build expressions
(as < and > do), **, abs(), @; numpy cannot silently read a lazy expression."""
import numpy as np
import pytest

import mshadow as ms


def _pair(dtype=np.float32):
    rng = np.random.default_rng(3)
    a = rng.integers(-3, 4, (5, 6)).astype(dtype)
    b = rng.integers(-3, 4, (5, 6)).astype(dtype)
    return a, b, ms.from_numpy(a.copy()), ms.from_numpy(b.copy())


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32])
def test_eq_and_ne_build_expressions(dtype):
    a, b, ta, tb = _pair(dtype)
    out = ms.new_tensor(a.shape, dtype=dtype)
    out[:] = ta == tb
    np.testing.assert_array_equal(out.numpy(), (a == b).astype(dtype))
    out[:] = (ta + 1) != tb
    np.testing.assert_array_equal(out.numpy(), ((a + 1) != b).astype(dtype))
    out[:] = ta == 2
    np.testing.assert_array_equal(out.numpy(), (a == 2).astype(dtype))


def test_tensors_stay_hashable_and_identity_containment_works():
    t = ms.new_tensor((2,))
    u = ms.new_tensor((2,))
    d = {t: 1, u: 2}
    assert d[t] == 1 and d[u] == 2
    assert t in [t]
    with pytest.raises(TypeError, match="truth value of a lazy expression"):
        bool(t == u)


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int64])
def test_pow_abs(dtype):
    a, b, ta, tb = _pair(dtype)
    b = np.abs(b)
    tb = ms.from_numpy(b.copy())
    out = ms.new_tensor(a.shape, dtype=dtype)
    out[:] = ta ** tb
    np.testing.assert_array_equal(out.numpy(), a ** b)
    out[:] = (ta + 1) ** 2
    np.testing.assert_array_equal(out.numpy(), (a + 1) ** np.asarray(2, dtype))
    out[:] = 2 ** tb
    np.testing.assert_array_equal(out.numpy(), np.asarray(2, dtype) ** b)
    out[:] = abs(ta - 1)
    np.testing.assert_array_equal(out.numpy(), np.abs(a - 1))
    out[:] = abs(ta)
    np.testing.assert_array_equal(out.numpy(), np.abs(a))


def test_matmul_is_dot():
    rng = np.random.default_rng(4)
    a = rng.standard_normal((6, 4)).astype(np.float32)
    b = rng.standard_normal((4, 5)).astype(np.float32)
    ta, tb = ms.from_numpy(a), ms.from_numpy(b)
    c = ms.new_tensor((6, 5))
    c[:] = ta @ tb
    np.testing.assert_allclose(c.numpy(), a @ b, rtol=1e-5, atol=1e-6)
    d = ms.new_tensor((4, 4))
    d[:] = ta.T @ ta
    np.testing.assert_allclose(d.numpy(), a.T @ a, rtol=1e-5, atol=1e-5)


def test_numpy_cannot_read_a_lazy_expression():
    a, b, ta, tb = _pair()
    with pytest.raises(TypeError, match=r"numpy.sum cannot read a lazy expression .*assign it "
                                        r"to a tensor first"):
        np.sum(ta * tb)
    with pytest.raises(TypeError, match="assign it to a tensor first"):
        np.asarray(ta + 1)


def test_numpy_functions_read_tensors_in_place():
    a, b, ta, tb = _pair()
    assert np.sum(ta) == a.sum()
    assert np.max(ta) == a.max() and np.mean(tb) == b.mean()
    np.testing.assert_array_equal(np.sum(ta, axis=0), a.sum(axis=0))
    np.testing.assert_array_equal(np.concatenate([ta, tb]), np.concatenate([a, b]))
    p = ms.new_tensor((3, 5), 2.0, pad=True)          # pitched rows
    assert np.sum(p) == 30.0
