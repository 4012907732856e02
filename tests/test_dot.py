"""dot, batch_dot, vector_dot, batch_gemm and the complex engine, with numpy as the oracle.

Integer products are compared exactly against numpy's wrapping matmul; float32/float64 use
small integer values (exact in any summation order) and random values (tolerance); float16
is compared with a tolerance against float32 arithmetic rounded once.
"""
import numpy as np
import pytest

import mshadow as ms
from mshadow.dtypes import ALL_DTYPES, FLOAT_DTYPES, INT_DTYPES
from mshadow.errors import DTypeError, FreedTensorError, ShapeError

SAVERS = ("saveto", "plusto", "minusto")
TRANS = [(False, False), (True, False), (False, True), (True, True)]


def _ids(dts):
    return [np.dtype(d).name for d in dts]


def _values(shape, dtype, rng, full=False):
    """Data for ``dtype``: the whole range for integers (to exercise wrap-around) when
    ``full``, else small integers that every dtype and summation order hold exactly."""
    dt = np.dtype(dtype)
    if full and dt.kind in "iu":
        info = np.iinfo(dt)
        return rng.integers(info.min, info.max, size=shape, endpoint=True, dtype=dt)
    lo = 0 if dt.kind == "u" else -3
    return rng.integers(lo, 4, size=shape).astype(dt)


def _tensor(a, pitched):
    """A tensor holding ``a``; pitched ones view a wider buffer so row stride > cols."""
    if not pitched or a.ndim < 2:
        return ms.from_numpy(a.copy()), a.copy()
    wide = np.full(a.shape[:-1] + (a.shape[-1] + 5,), 77, dtype=a.dtype)
    view = wide[..., :a.shape[-1]]
    view[...] = a
    t = ms.from_numpy(view)
    assert t.stride == a.shape[-1] + 5
    return t, wide


def _scale_cast(s, dtype):
    """The scale as numpy sees it: integers wrap into the dtype (alpha = -1 on uint8 is 255)."""
    dt = np.dtype(dtype)
    if dt.kind in "iu":
        return np.array(int(s) % (1 << 64), dtype=np.uint64).astype(dt)
    return dt.type(s)


def _reference(old, prod, alpha, saver, dtype):
    """old <saver> alpha * prod, computed as the engine does it (exact or float32 for f16)."""
    dt = np.dtype(dtype)
    if dt == np.float16:
        p = prod.astype(np.float32) * np.float32(alpha)
        o = old.astype(np.float32)
        r = {"saveto": p, "plusto": o + p, "minusto": o - p}[saver]
        return r.astype(np.float16)
    with np.errstate(over="ignore"):
        p = prod * _scale_cast(alpha, dt)
        return {"saveto": p, "plusto": old + p, "minusto": old - p}[saver].astype(dt)


def _matmul(x, y, dtype):
    dt = np.dtype(dtype)
    if dt == np.float16:
        return (x.astype(np.float32) @ y.astype(np.float32))
    return x @ y


def _assign(dst, value, saver):
    if saver == "saveto":
        dst[:] = value
    elif saver == "plusto":
        dst += value
    else:
        dst -= value


def _check(got, want, dtype):
    dt = np.dtype(dtype)
    if dt == np.float16:
        np.testing.assert_allclose(got.astype(np.float32), want.astype(np.float32),
                                   rtol=2e-3, atol=2e-3)
    else:
        np.testing.assert_array_equal(got, want)


# ---- gemm: transposes x savers x scales x pitch x dtypes ---------------------------------

@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=_ids(ALL_DTYPES))
@pytest.mark.parametrize("pitched", [False, True], ids=["contig", "pitched"])
@pytest.mark.parametrize("scale", ["one", "scaled", "neg"])
@pytest.mark.parametrize("saver", SAVERS)
@pytest.mark.parametrize("ta,tb", TRANS, ids=["NN", "TN", "NT", "TT"])
def test_gemm_matrix(dtype, pitched, scale, saver, ta, tb):
    rng = np.random.default_rng(7)
    m, k, n = 5, 7, 6
    full = np.dtype(dtype).kind in "iu"
    a_np = _values((k, m) if ta else (m, k), dtype, rng, full)
    b_np = _values((n, k) if tb else (k, n), dtype, rng, full)
    old = _values((m, n), dtype, rng, full)
    a, _ = _tensor(a_np, pitched)
    b, _ = _tensor(b_np, pitched)
    c, c_wide = _tensor(old, pitched)
    A = a.T if ta else a
    B = b.T if tb else b
    s = {"one": 1, "scaled": 0.5 if np.dtype(dtype).kind == "f" else 3, "neg": -1}[scale]
    if scale == "one":
        e = ms.dot(A, B)
    elif scale == "scaled":
        e = ms.dot(A, B) * s if saver != "plusto" else s * ms.dot(A, B)
    else:
        e = -ms.dot(A, B)
    # an integer scale is held as DType(s), as in mshadow: -1 for uint8 is 255
    held = s if np.dtype(dtype).kind != "u" else int(np.array(s).astype(dtype))
    assert isinstance(e, ms.DotExp) and e.shape == (m, n) and e.scale == held
    _assign(c, e, saver)
    prod = _matmul(a_np.T if ta else a_np, b_np.T if tb else b_np, dtype)
    _check(c.numpy(), _reference(old, prod, s, saver, dtype), dtype)
    if pitched:
        # the pad columns of the destination are never written
        assert (c_wide[:, n:] == 77).all()


@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=_ids(ALL_DTYPES))
@pytest.mark.parametrize("ta,tb", TRANS, ids=["NN", "TN", "NT", "TT"])
def test_gemm_larger_matches_numpy(dtype, ta, tb):
    # sizes past BLAS kernel blocking and the integer loop's threading threshold
    rng = np.random.default_rng(11)
    m, k, n = 67, 130, 45
    full = np.dtype(dtype).kind in "iu"
    a_np = _values((k, m) if ta else (m, k), dtype, rng, full)
    b_np = _values((n, k) if tb else (k, n), dtype, rng, full)
    a, b = ms.from_numpy(a_np), ms.from_numpy(b_np)
    c = ms.new_tensor((m, n), init=None, pad=True, dtype=dtype)
    c[:] = ms.dot(a.T if ta else a, b.T if tb else b)
    want = _matmul(a_np.T if ta else a_np, b_np.T if tb else b_np, dtype)
    _check(c.numpy(), want.astype(dtype), dtype)


@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["float32", "float64"])
@pytest.mark.parametrize("ta,tb", TRANS, ids=["NN", "TN", "NT", "TT"])
def test_gemm_random_floats(dtype, ta, tb):
    rng = np.random.default_rng(3)
    m, k, n = 40, 33, 29
    a_np = rng.standard_normal((k, m) if ta else (m, k)).astype(dtype)
    b_np = rng.standard_normal((n, k) if tb else (k, n)).astype(dtype)
    old = rng.standard_normal((m, n)).astype(dtype)
    a, b = ms.from_numpy(a_np), ms.from_numpy(b_np)
    c = ms.from_numpy(old.copy())
    c -= ms.dot(a.T if ta else a, b.T if tb else b) * 0.25
    want = old - 0.25 * ((a_np.T if ta else a_np) @ (b_np.T if tb else b_np))
    tol = 1e-5 if dtype == np.float32 else 1e-12
    np.testing.assert_allclose(c.numpy(), want, rtol=tol, atol=tol)


@pytest.mark.parametrize("saver", SAVERS)
def test_float16_random_values_with_tolerance(saver):
    rng = np.random.default_rng(5)
    a_np = rng.standard_normal((24, 50)).astype(np.float16)
    b_np = rng.standard_normal((50, 19)).astype(np.float16)
    old = rng.standard_normal((24, 19)).astype(np.float16)
    c = ms.from_numpy(old.copy())
    _assign(c, ms.dot(ms.from_numpy(a_np), ms.from_numpy(b_np)), saver)
    want = _reference(old, a_np.astype(np.float32) @ b_np.astype(np.float32), 1, saver,
                      np.float16)
    np.testing.assert_allclose(c.numpy().astype(np.float32), want.astype(np.float32),
                               rtol=1e-2, atol=1e-2)


@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=_ids(ALL_DTYPES))
def test_new_tensor_padded_operands(dtype):
    # pad=True rows are aligned to 64 bytes: 5 columns get a real pitch for every dtype
    rng = np.random.default_rng(2)
    a_np, b_np = _values((6, 5), dtype, rng), _values((5, 3), dtype, rng)
    a = ms.new_tensor((6, 5), init=None, pad=True, dtype=dtype)
    b = ms.new_tensor((5, 3), init=None, pad=True, dtype=dtype)
    c = ms.new_tensor((6, 3), init=None, pad=True, dtype=dtype)
    assert a.stride > 5
    a[:] = a_np
    b[:] = b_np
    c[:] = ms.dot(a, b)
    _check(c.numpy(), _matmul(a_np, b_np, dtype).astype(dtype), dtype)


def test_scale_folding_chains_accumulate():
    a = ms.from_numpy(np.eye(3, dtype=np.float32))
    e = 2 * ms.dot(a, a) * 3 * 0.5
    assert e.scale == 3.0
    assert (-e).scale == -3.0
    assert (-(-e)).scale == 3.0
    assert e.scalars == (3.0,)
    # building scaled nodes never changes the original
    d = ms.dot(a, a)
    d2 = d * 4
    assert d.scale == 1.0 and d2.scale == 4.0 and d2.lhs is d.lhs
    c = ms.new_tensor((3, 3))
    c[:] = ms.dot(a, a) * ms.scalar(2.0, np.float32)
    d = ms.new_tensor(c.shape, dtype=c.dtype)
    d[:] = ms.scalar(2.0, np.float32) * ms.dot(a, a)      # the scalar on the left folds too
    np.testing.assert_array_equal(d.numpy(), c.numpy())
    np.testing.assert_array_equal(c.numpy(), 2 * np.eye(3))
    c[:] = np.float32(3) * ms.dot(a, a) * np.int64(2)
    np.testing.assert_array_equal(c.numpy(), 6 * np.eye(3))


def test_mshadow_verified_examples():
    # reference §1b: C = dot(A, A.T()) * 0.5f -> 1.5 ; C -= dot(A, A.T()) -> -1.5 (A = ones(1,3))
    a = ms.new_tensor((1, 3), init=1)
    c = ms.new_tensor((1, 1), init=0)
    c[:] = ms.dot(a, a.T) * 0.5
    assert c.numpy()[0, 0] == 1.5
    c[:] = 0
    c -= ms.dot(a, a.T)
    assert c.numpy()[0, 0] == -3.0
    # gemv: b = (1, 10, 100), W = [[0,1],[2,3],[4,5]] -> (420, 531)
    b = ms.from_numpy(np.array([1, 10, 100], dtype=np.float32))
    w = ms.from_numpy(np.arange(6, dtype=np.float32).reshape(3, 2))
    y = ms.new_tensor((2,))
    y[:] = ms.dot(b, w)
    np.testing.assert_array_equal(y.numpy(), [420, 531])


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=_ids(FLOAT_DTYPES))
def test_saveto_ignores_nan_in_destination(dtype):
    # '=' is beta = 0: BLAS must not read the old values (NaN * 0 would poison them)
    a_np = np.arange(12, dtype=dtype).reshape(3, 4)
    for lhs, rhs, shape in ((a_np, a_np.T.copy(), (3, 3)), (a_np[0], a_np.T.copy(), (3,)),
                            (a_np, a_np[0].copy(), (3,)), (a_np[0], a_np[1].copy(), (1,))):
        c = ms.new_tensor(shape, init=np.nan, dtype=dtype)
        c[:] = ms.dot(ms.from_numpy(np.ascontiguousarray(lhs)), ms.from_numpy(rhs))
        want = np.atleast_1d(np.asarray(lhs, np.float64) @ np.asarray(rhs, np.float64))
        np.testing.assert_array_equal(c.numpy(), want.astype(dtype))


# ---- gemv, inner and outer products ------------------------------------------------------

@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=_ids(ALL_DTYPES))
@pytest.mark.parametrize("saver", SAVERS)
@pytest.mark.parametrize("trans", [False, True], ids=["N", "T"])
@pytest.mark.parametrize("pitched", [False, True], ids=["contig", "pitched"])
def test_gemv_row_vector_times_matrix(dtype, saver, trans, pitched):
    rng = np.random.default_rng(13)
    full = np.dtype(dtype).kind in "iu"
    k, n = 9, 7
    x_np = _values((k,), dtype, rng, full)
    w_np = _values((n, k) if trans else (k, n), dtype, rng, full)
    old = _values((n,), dtype, rng, full)
    w, _ = _tensor(w_np, pitched)
    y = ms.from_numpy(old.copy())
    e = ms.dot(ms.from_numpy(x_np), w.T if trans else w) * 2
    assert e.shape == (n,)
    _assign(y, e, saver)
    prod = _matmul(x_np[None, :], w_np.T if trans else w_np, dtype)[0]
    _check(y.numpy(), _reference(old, prod, 2, saver, dtype), dtype)


@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=_ids(ALL_DTYPES))
@pytest.mark.parametrize("saver", SAVERS)
@pytest.mark.parametrize("trans", [False, True], ids=["N", "T"])
@pytest.mark.parametrize("pitched", [False, True], ids=["contig", "pitched"])
def test_gemv_matrix_times_vector(dtype, saver, trans, pitched):
    rng = np.random.default_rng(17)
    full = np.dtype(dtype).kind in "iu"
    m, k = 8, 11
    w_np = _values((k, m) if trans else (m, k), dtype, rng, full)
    x_np = _values((k,), dtype, rng, full)
    old = _values((m,), dtype, rng, full)
    w, _ = _tensor(w_np, pitched)
    y = ms.from_numpy(old.copy())
    e = -ms.dot(w.T if trans else w, ms.from_numpy(x_np))
    assert e.shape == (m,)
    _assign(y, e, saver)
    prod = _matmul(w_np.T if trans else w_np, x_np[:, None], dtype)[:, 0]
    _check(y.numpy(), _reference(old, prod, -1, saver, dtype), dtype)


@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=_ids(ALL_DTYPES))
@pytest.mark.parametrize("saver", SAVERS)
def test_inner_product_and_vector_dot(dtype, saver):
    rng = np.random.default_rng(19)
    full = np.dtype(dtype).kind in "iu"
    u_np, v_np = _values((37,), dtype, rng, full), _values((37,), dtype, rng, full)
    old = _values((1,), dtype, rng, full)
    u, v = ms.from_numpy(u_np), ms.from_numpy(v_np)
    r = ms.from_numpy(old.copy())
    e = ms.dot(u, v)
    assert e.shape == (1,)
    _assign(r, e, saver)
    prod = _matmul(u_np[None, :], v_np[:, None], dtype)[0]
    _check(r.numpy(), _reference(old, prod, 1, saver, dtype), dtype)
    d = ms.new_tensor((1,), init=5, dtype=dtype)
    ms.vector_dot(d, u, v)
    _check(d.numpy(), _reference(old, prod, 1, "saveto", dtype), dtype)


@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=_ids(ALL_DTYPES))
@pytest.mark.parametrize("saver", SAVERS)
def test_outer_product_overwrites_with_saveto(dtype, saver):
    # mshadow's `dst = dot(u.T(), v)` calls ger and adds to dst; here '=' overwrites
    u_np = np.array([1, 2, 3], dtype=dtype)
    v_np = np.array([1, 2], dtype=dtype)
    u, v = ms.from_numpy(u_np), ms.from_numpy(v_np)
    dst = ms.new_tensor((3, 2), init=5, dtype=dtype)
    _assign(dst, ms.dot(u.T, v), saver)
    outer = np.outer(u_np, v_np).astype(dtype)
    want = {"saveto": outer, "plusto": 5 + outer, "minusto": 5 - outer}[saver]
    _check(dst.numpy(), want.astype(dtype), dtype)


@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=_ids(ALL_DTYPES))
def test_outer_product_as_rank1_gemm_overwrites(dtype):
    # the same k = 1 product through 2-D operands: mshadow's reference case
    # (dst pre-filled with 5 gives 6,15,105 / 7,25,205 under mshadow's bug)
    u = ms.from_numpy(np.array([[1], [2]], dtype=dtype))
    v = ms.from_numpy(np.array([[1, 10, 100]], dtype=dtype))
    dst = ms.new_tensor((2, 3), init=5, dtype=dtype)
    dst[:] = ms.dot(u, v)
    want = np.array([[1, 10, 100], [2, 20, 200]]).astype(dtype)
    _check(dst.numpy(), want, dtype)
    dst += ms.dot(u, v)
    _check(dst.numpy(), (2 * want.astype(np.int64)).astype(dtype), dtype)


# ---- batch_dot and batch_gemm ------------------------------------------------------------

@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=_ids(ALL_DTYPES))
@pytest.mark.parametrize("saver", SAVERS)
@pytest.mark.parametrize("tl,tr", TRANS, ids=["NN", "TN", "NT", "TT"])
@pytest.mark.parametrize("pitched", [False, True], ids=["contig", "pitched"])
def test_batch_dot(dtype, saver, tl, tr, pitched):
    rng = np.random.default_rng(23)
    full = np.dtype(dtype).kind in "iu"
    nb, m, k, n = 3, 4, 6, 5
    a_np = _values((nb, k, m) if tl else (nb, m, k), dtype, rng, full)
    b_np = _values((nb, n, k) if tr else (nb, k, n), dtype, rng, full)
    old = _values((nb, m, n), dtype, rng, full)
    a, _ = _tensor(a_np, pitched)
    b, _ = _tensor(b_np, pitched)
    c, c_wide = _tensor(old, pitched)
    e = ms.batch_dot(a, b, transpose_left=tl, transpose_right=tr) * 3
    assert isinstance(e, ms.BatchDotExp) and e.shape == (nb, m, n)
    _assign(c, e, saver)
    at = a_np.transpose(0, 2, 1) if tl else a_np
    bt = b_np.transpose(0, 2, 1) if tr else b_np
    prod = _matmul(at, bt, dtype)
    _check(c.numpy(), _reference(old, prod, 3, saver, dtype), dtype)
    if pitched:
        assert (c_wide[..., n:] == 77).all()


@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=_ids(ALL_DTYPES))
@pytest.mark.parametrize("tl,tr", TRANS, ids=["NN", "TN", "NT", "TT"])
def test_batch_gemm_alpha_beta(dtype, tl, tr):
    rng = np.random.default_rng(29)
    nb, m, k, n = 2, 2, 3, 2       # mshadow's verified case: a=(2,2,3) b=(2,3,2)
    a_np = _values((nb, k, m) if tl else (nb, m, k), dtype, rng)
    b_np = _values((nb, n, k) if tr else (nb, k, n), dtype, rng)
    old = _values((nb, m, n), dtype, rng)
    c = ms.from_numpy(old.copy())
    is_int = np.dtype(dtype).kind in "iu"
    alpha, beta = (2, 3) if is_int else (0.5, 2.0)
    ms.batch_gemm(c, ms.from_numpy(a_np), ms.from_numpy(b_np), alpha, beta,
                  transpose_left=tl, transpose_right=tr)
    at = a_np.transpose(0, 2, 1) if tl else a_np
    bt = b_np.transpose(0, 2, 1) if tr else b_np
    if np.dtype(dtype) == np.float16:
        want = (alpha * (at.astype(np.float32) @ bt.astype(np.float32))
                + beta * old.astype(np.float32)).astype(np.float16)
    else:
        with np.errstate(over="ignore"):
            want = (_scale_cast(alpha, dtype) * (at @ bt) + _scale_cast(beta, dtype) * old)
    _check(c.numpy(), want.astype(dtype), dtype)


def test_batch_gemm_pitched():
    rng = np.random.default_rng(31)
    a_np, b_np = rng.standard_normal((4, 5, 6)), rng.standard_normal((4, 6, 3))
    a, _ = _tensor(a_np, True)
    b, _ = _tensor(b_np, True)
    c, _ = _tensor(np.ones((4, 5, 3)), True)
    ms.batch_gemm(c, a, b, 1.0, 1.0)
    np.testing.assert_allclose(c.numpy(), a_np @ b_np + 1, rtol=1e-12)


def test_batch_dot_large_matches_numpy():
    rng = np.random.default_rng(37)
    a_np = rng.standard_normal((16, 64, 48)).astype(np.float32)
    b_np = rng.standard_normal((16, 64, 40)).astype(np.float32)
    c = ms.new_tensor((16, 48, 40), pad=True)
    c[:] = ms.batch_dot(ms.from_numpy(a_np), ms.from_numpy(b_np), True, False)
    np.testing.assert_allclose(c.numpy(), a_np.transpose(0, 2, 1) @ b_np, rtol=1e-4, atol=1e-4)


# ---- aliasing ----------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16, np.int32],
                         ids=["float32", "float64", "float16", "int32"])
@pytest.mark.parametrize("saver", SAVERS)
def test_destination_is_an_operand(dtype, saver):
    rng = np.random.default_rng(41)
    a_np = _values((6, 6), dtype, rng)
    b_np = _values((6, 6), dtype, rng)
    cases = [
        (lambda a, b: ms.dot(a, b), a_np @ b_np),
        (lambda a, b: ms.dot(b, a), b_np @ a_np),
        (lambda a, b: ms.dot(a, a), a_np @ a_np),
        (lambda a, b: ms.dot(a.T, a), a_np.T @ a_np),
        (lambda a, b: ms.dot(b, a.T), b_np @ a_np.T),
    ]
    for build, prod in cases:
        a, b = ms.from_numpy(a_np.copy()), ms.from_numpy(b_np.copy())
        _assign(a, build(a, b), saver)
        # small integer values: the product is exact in every dtype, float16 included
        _check(a.numpy(), _reference(a_np, prod, 1, saver, dtype), dtype)


def test_destination_overlaps_operand_partially():
    # dst = rows 2..5 of a buffer whose rows 0..5 are the left operand
    base = np.arange(48, dtype=np.float64).reshape(8, 6) % 7
    t = ms.from_numpy(base.copy())
    a = t.slice(0, 6)
    w = ms.from_numpy((np.arange(36, dtype=np.float64).reshape(6, 6) % 5))
    dst = t.slice(2, 8)
    dst[:] = ms.dot(a, w)
    want = base.copy()
    want[2:8] = base[0:6] @ w.numpy()
    np.testing.assert_array_equal(t.numpy(), want)


def test_gemv_destination_is_the_vector():
    x_np = np.array([1.0, 2.0, 3.0])
    w_np = np.arange(9.0).reshape(3, 3)
    x = ms.from_numpy(x_np.copy())
    x[:] = ms.dot(x, ms.from_numpy(w_np))
    np.testing.assert_array_equal(x.numpy(), x_np @ w_np)
    x = ms.from_numpy(x_np.copy())
    x += ms.dot(ms.from_numpy(w_np), x)
    np.testing.assert_array_equal(x.numpy(), x_np + w_np @ x_np)


def test_batch_dot_destination_is_an_operand():
    rng = np.random.default_rng(43)
    a_np, b_np = _values((3, 4, 4), np.float64, rng), _values((3, 4, 4), np.float64, rng)
    a, b = ms.from_numpy(a_np.copy()), ms.from_numpy(b_np.copy())
    a += ms.batch_dot(a, b)
    np.testing.assert_array_equal(a.numpy(), a_np + a_np @ b_np)
    b[:] = ms.batch_dot(ms.from_numpy(a_np), b, False, True)
    np.testing.assert_array_equal(b.numpy(), a_np @ b_np.transpose(0, 2, 1))


# ---- sizes, threads, containers ----------------------------------------------------------

@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=_ids(ALL_DTYPES))
def test_empty_inner_dimension(dtype):
    a = ms.new_tensor((3, 0), dtype=dtype)
    b = ms.new_tensor((0, 2), dtype=dtype)
    c = ms.new_tensor((3, 2), init=4, dtype=dtype)
    c += ms.dot(a, b)
    assert (c.numpy() == 4).all()
    c[:] = ms.dot(a, b)
    assert (c.numpy() == 0).all()
    z = ms.new_tensor((0, 2), dtype=dtype)
    z[:] = ms.dot(ms.new_tensor((0, 4), dtype=dtype), ms.new_tensor((4, 2), dtype=dtype))
    assert z.shape == (0, 2)


@pytest.mark.parametrize("dtype", INT_DTYPES, ids=_ids(INT_DTYPES))
def test_integer_loop_threads_agree(dtype):
    rng = np.random.default_rng(47)
    a_np = _values((64, 70), dtype, rng, full=True)
    b_np = _values((70, 33), dtype, rng, full=True)
    a, b = ms.from_numpy(a_np), ms.from_numpy(b_np)
    old = ms.get_num_threads()
    try:
        results = []
        for nt in (1, 2):
            ms.set_num_threads(nt)
            c = ms.new_tensor((64, 33), dtype=dtype)
            c[:] = ms.dot(a, b.T.T)
            results.append(c.numpy().copy())
    finally:
        ms.set_num_threads(old)
    np.testing.assert_array_equal(results[0], a_np @ b_np)
    np.testing.assert_array_equal(results[1], a_np @ b_np)


def test_container_destination_of_another_shape_is_refused():
    # mshadow checks the shapes: only a container assigned a container resizes
    a = ms.from_numpy(np.ones((3, 4), dtype=np.float32))
    b = ms.from_numpy(np.ones((4, 2), dtype=np.float32))
    c = ms.TensorContainer((1, 1), init=7.0)
    with pytest.raises(ms.ShapeError):
        c[:] = ms.dot(a, b)
    assert c.shape == (1, 1) and c.numpy()[0, 0] == 7.0
    c.resize((3, 2))
    c[:] = ms.dot(a, b)
    np.testing.assert_array_equal(c.numpy(), np.full((3, 2), 4.0))


def test_numpy_operands_are_viewed():
    a_np = np.arange(6.0).reshape(2, 3)
    c = ms.new_tensor((2, 2), dtype=np.float64)
    c[:] = ms.dot(a_np, a_np.T.copy())
    np.testing.assert_array_equal(c.numpy(), a_np @ a_np.T)


# ---- errors ------------------------------------------------------------------------------

def _mats(dtype=np.float32):
    a = ms.new_tensor((3, 4), init=1, dtype=dtype)
    b = ms.new_tensor((4, 5), init=1, dtype=dtype)
    return a, b


@pytest.mark.parametrize("op,saver", [("*=", "multo"), ("/=", "divto")])
def test_multo_divto_refused_before_any_store(op, saver):
    a, b = _mats()
    c = ms.new_tensor((3, 5), init=2)
    with pytest.raises(TypeError, match=rf"{saver} has no BLAS form") as ei:
        if op == "*=":
            c *= ms.dot(a, b)
        else:
            c /= ms.dot(a, b)
    assert op in str(ei.value)
    assert (c.numpy() == 2).all()
    with pytest.raises(TypeError, match="no BLAS form"):
        c3 = ms.new_tensor((1, 3, 5))
        c3 *= ms.batch_dot(ms.new_tensor((1, 3, 4)), ms.new_tensor((1, 4, 5)))


def test_dot_cannot_be_nested():
    a, b = _mats()
    c = ms.new_tensor((3, 5))
    with pytest.raises(TypeError, match="cannot be nested"):
        ms.dot(a, b) + c
    with pytest.raises(TypeError, match="cannot be nested"):
        ms.dot(a, b) * c
    with pytest.raises(TypeError, match="cannot be nested"):
        c * ms.dot(a, b)
    with pytest.raises(TypeError, match="cannot be nested"):
        ms.dot(a, b) / 2
    with pytest.raises(TypeError):
        ms.dot(a, b).T
    with pytest.raises(TypeError, match="assign it to a tensor first"):
        ms.dot(ms.new_tensor((4,)) + 1, b)     # (a 2-D product takes expressions)
    with pytest.raises(TypeError, match="tensor"):
        ms.batch_dot(ms.new_tensor((1, 2, 2)) * 2, ms.new_tensor((1, 2, 2)))


def test_shape_errors_name_the_shapes():
    a, b = _mats()
    with pytest.raises(ShapeError, match=r"dot-gemm: matrix shape mismatch.*\(3, 4\).*\(3, 4\)"):
        ms.dot(a, a)
    with pytest.raises(ShapeError, match="dot-gemm: matrix shape mismatch"):
        ms.dot(a.T, b)
    with pytest.raises(ShapeError, match=r"dot-gemm: matrix shape mismatch: destination \(3, 4\)"):
        c = ms.new_tensor((3, 4))
        c[:] = ms.dot(a, b)
    v3 = ms.new_tensor((3,))
    v4 = ms.new_tensor((4,))
    with pytest.raises(ShapeError, match=r"dot-gemv: matrix shape mismatch.*\(4,\).*\(3, 4\)"):
        ms.dot(v4, a)
    with pytest.raises(ShapeError, match="dot-gemv: matrix shape mismatch"):
        ms.dot(a, v3)
    with pytest.raises(ShapeError, match=r"dot-gemv: matrix shape mismatch: destination \(3,\)"):
        v3[:] = ms.dot(v3, a)
    with pytest.raises(ShapeError, match="VectorDot: Shape mismatch"):
        ms.dot(v3, v4)
    with pytest.raises(ShapeError, match="batch_dot"):
        ms.dot(ms.new_tensor((2, 3, 4)), b)


def test_dtype_errors():
    a, _ = _mats()
    b64 = ms.new_tensor((4, 5), dtype=np.float64)
    with pytest.raises(DTypeError, match="different dtypes float32 and float64"):
        ms.dot(a, b64)
    with pytest.raises(DTypeError, match="float32 into a tensor of dtype float64"):
        c = ms.new_tensor((3, 5), dtype=np.float64)
        c[:] = ms.dot(a, ms.new_tensor((4, 5)))
    ai = ms.new_tensor((3, 4), dtype=np.int32)
    bi = ms.new_tensor((4, 5), dtype=np.int32)
    with pytest.raises(DTypeError, match="not representable in int32"):
        ms.dot(ai, bi) * 0.5
    assert (ms.dot(ai, bi) * 2.0).scale == 2 and isinstance((ms.dot(ai, bi) * 2.0).scale, int)
    with pytest.raises(DTypeError, match="scalar of dtype float64"):
        ms.dot(a, ms.new_tensor((4, 5))) * ms.scalar(2, np.float64)
    with pytest.raises(TypeError, match="real scalar"):
        ms.dot(a, ms.new_tensor((4, 5))) * np.complex64(1j)
    with pytest.raises(DTypeError):
        ms.batch_dot(ms.new_tensor((1, 2, 2)), ms.new_tensor((1, 2, 2), dtype=np.int8))


def test_read_only_destination_is_untouched():
    a, b = _mats()
    arr = np.full((3, 5), 9.0, dtype=np.float32)
    arr.flags.writeable = False
    c = ms.from_numpy(arr)
    with pytest.raises(ValueError, match="read-only"):
        c[:] = ms.dot(a, b)
    assert (arr == 9).all()


def test_freed_tensors_raise():
    a, b = _mats()
    c = ms.new_tensor((3, 5))
    e = ms.dot(a, b)
    ms.free_space(a)
    with pytest.raises(FreedTensorError):
        c[:] = e
    x = ms.new_tensor((1, 3, 4))
    ms.free_space(x)
    with pytest.raises(FreedTensorError):
        ms.batch_gemm(ms.new_tensor((1, 3, 5)), x, ms.new_tensor((1, 4, 5)), 1.0, 0.0)
    d = ms.new_tensor((3, 5))
    ms.free_space(d)
    with pytest.raises(FreedTensorError):
        d[:] = ms.dot(ms.new_tensor((3, 4)), ms.new_tensor((4, 5)))


def test_unsupported_forms():
    a, _ = _mats()
    u = ms.new_tensor((3,))
    ut = u.T          # a 1-D tensor's .T is the (n, 1) column
    with pytest.raises(TypeError, match="unsupported operand form"):
        ms.dot(ut, a)
    with pytest.raises(TypeError, match="unsupported operand form"):
        ms.dot(u, ut)


def test_vector_dot_errors():
    u, v = ms.new_tensor((3,)), ms.new_tensor((3,))
    with pytest.raises(ShapeError, match="VectorDot: expect dst to be scalar"):
        ms.vector_dot(ms.new_tensor((2,)), u, v)
    with pytest.raises(ShapeError, match="VectorDot: Shape mismatch"):
        ms.vector_dot(ms.new_tensor((1,)), u, ms.new_tensor((4,)))
    with pytest.raises(ShapeError, match="VectorDot: Shape mismatch"):
        ms.vector_dot(ms.new_tensor((1,)), ms.new_tensor((3, 1)), v)


def test_batch_errors():
    a, b = ms.new_tensor((2, 2, 3)), ms.new_tensor((2, 3, 2))
    with pytest.raises(ShapeError, match="BatchGEMM: batchsize must be equal."):
        ms.batch_dot(a, ms.new_tensor((3, 3, 2)))
    with pytest.raises(ShapeError, match="BatchGEMM: matrix shape mismatch"):
        ms.batch_dot(a, b, transpose_left=True)
    with pytest.raises(ShapeError, match="3-D"):
        ms.batch_dot(ms.new_tensor((2, 3)), b)
    with pytest.raises(ShapeError, match="BatchGEMM: matrix shape mismatch"):
        c = ms.new_tensor((2, 3, 3))
        c[:] = ms.batch_dot(a, b)
    with pytest.raises(ShapeError, match="BatchGEMM: batchsize must be equal."):
        ms.batch_gemm(ms.new_tensor((3, 2, 2)), a, b, 1.0, 0.0)
    with pytest.raises(ShapeError, match="BatchGEMM: matrix shape mismatch"):
        ms.batch_gemm(ms.new_tensor((2, 2, 3)), a, b, 1.0, 0.0)
    with pytest.raises(ShapeError, match="BatchGEMM: matrix shape mismatch"):
        ms.batch_gemm(ms.new_tensor((2, 2, 2)), a, b, 1.0, 0.0, transpose_right=True)
    with pytest.raises(DTypeError, match="not representable"):
        ai, bi = ms.new_tensor((2, 2, 3), dtype=np.int32), ms.new_tensor((2, 3, 2), dtype=np.int32)
        ms.batch_gemm(ms.new_tensor((2, 2, 2), dtype=np.int32), ai, bi, 0.5, 0.0)


def test_device_checks_come_first():
    cpu_a = ms.new_tensor((3, 4))
    gpu_b = ms.Tensor((4, 5), device=ms.gpu)      # a handle only: never allocated
    gpu_a = ms.Tensor((3, 4), device=ms.gpu)
    with pytest.raises(ms.DeviceError, match="different devices"):
        ms.dot(cpu_a, gpu_b)
    with pytest.raises(ms.DeviceError, match="CUDA backend"):
        c = ms.Tensor((3, 5), device=ms.gpu)
        c[:] = ms.dot(gpu_a, gpu_b)


def test_what_the_compiled_product_path_refuses_raises_the_layers_errors():
    """_blas.product stores only into a CPU tensor of the product's dtype and shape; every
    other destination gets dot.py's error, and nothing is written."""
    a, b = _mats()
    c64 = ms.new_tensor((3, 5), init=7, dtype=np.float64)
    with pytest.raises(DTypeError, match="product of dtype float32 into a tensor of dtype float64"):
        c64[:] = ms.dot(a, b)
    np.testing.assert_array_equal(c64.numpy(), 7)
    with pytest.raises(TypeError, match="destination must be a Tensor"):
        ms.engine.assign(np.zeros((3, 5), np.float32), ms.dot(a, b), "saveto")
    out = ms.new_tensor((2, 3, 3), init=7)
    with pytest.raises(ShapeError, match=r"BatchGEMM: matrix shape mismatch: destination \(2, 3, 3\)"):
        out[:] = ms.batch_dot(ms.new_tensor((2, 3, 4)), ms.new_tensor((2, 4, 5)))
    np.testing.assert_array_equal(out.numpy(), 7)
    c = ms.new_tensor((3, 5))
    c[:] = ms.dot(a, b) * 2                                 # and the path itself
    np.testing.assert_allclose(c.numpy(), 2 * a.numpy() @ b.numpy(), rtol=1e-6)


def test_a_product_of_tensors_takes_the_compiled_statement_path(monkeypatch):
    """`c[:] = dot(a, b)` of tensors runs from the core's entry for its kind
    (_blas.assign_product), not through engine.assign; what that entry refuses (a saver
    with no BLAS form, an expression operand) still reaches dot._eval and its errors."""
    a, b = _mats()
    c = ms.new_tensor((3, 5))
    c[:] = ms.dot(a, b)                 # the first product loads _blas and installs the entry
    calls = []
    full = ms.engine._complex_engines["dot"]
    monkeypatch.setitem(ms.engine._complex_engines, "dot",
                        lambda *args: (calls.append(args[2]), full(*args)))
    for saver, sign, beta in (("saveto", 1, 0), ("plusto", 1, 1), ("minusto", -1, 1)):
        old = c.numpy().copy()
        _assign(c, ms.dot(a, b) * 3, saver)
        np.testing.assert_allclose(c.numpy(), sign * 3 * (a.numpy() @ b.numpy()) + beta * old,
                                   rtol=1e-5)
    assert calls == []
    with pytest.raises(TypeError, match="has no BLAS form"):
        c *= ms.dot(a, b)
    assert calls == ["multo"]
    c[:] = ms.dot(a * 1, b)
    assert calls == ["multo", "saveto"]
    np.testing.assert_allclose(c.numpy(), a.numpy() @ b.numpy(), rtol=1e-5)


@pytest.mark.parametrize("dtype", [np.int64, np.int32, np.uint8])
def test_an_integer_product_holds_an_integer_scale(dtype):
    # the scale of a product node is a Python int for integer dtypes: a float 1.0 made
    # `* 3` wrap through float arithmetic (int64: 0.0)
    a = ms.from_numpy(np.arange(4, dtype=dtype).reshape(2, 2))
    e = ms.dot(a, a)
    assert type(e.scale) is int and e.scale == 1 and e.scalars == (1,)
    assert type((e * 3).scale) is int and (e * 3).scale == 3
    c = ms.new_tensor((2, 2), dtype=dtype)
    c[:] = e * 3
    np.testing.assert_array_equal(c.numpy(), (3 * (a.numpy() @ a.numpy())).astype(dtype))
