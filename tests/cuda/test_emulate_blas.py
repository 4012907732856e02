"""The emulated BlasHandle (mshadow/cuda/emulate.py) against numpy: cuBLAS's column-major gemm,
gemv, dot and strided batched gemm, every transpose, alpha and beta (beta = 0 never reads C),
padded leading dimensions, negative increments, and operands outside live memory refused."""
import itertools

import numpy as np
import pytest

import mshadow as ms
from mshadow.cuda import emulate
from mshadow.cuda.emulate import BlasHandle, Memory, Stream
from mshadow.errors import CudaError

FLOATS = [np.float32, np.float64]
TOL = {np.float32: dict(rtol=2e-5, atol=2e-5), np.float64: dict(rtol=1e-12, atol=1e-12)}


@pytest.fixture
def blas():
    h = BlasHandle()
    yield h
    h.close()


def put(a, ld=None, fill=np.nan):
    """A column-major copy of matrix ``a`` in new emulated memory, columns ``ld`` elements
    apart (the padding between them NaN: a routine that reads it shows it)."""
    rows, cols = a.shape
    ld = ld or rows
    cm = np.full((cols, ld), fill, a.dtype)
    cm[:, :rows] = a.T
    m = Memory(cm.nbytes)
    m.copy_from_host(cm)
    return m


def get(m, rows, cols, dtype, ld=None):
    """Matrix ``rows`` x ``cols`` read back from column-major memory."""
    cm = np.empty((cols, ld or rows), dtype)
    m.copy_to_host(cm)
    return cm[:, :rows].T


def vec(x, inc, fill=np.nan):
    """Vector ``x`` stored ``inc`` elements apart (BLAS: from the far end when inc < 0)."""
    n, step = len(x), abs(inc)
    buf = np.full((n - 1) * step + 1, fill, x.dtype)
    buf[::step] = x if inc > 0 else x[::-1]
    m = Memory(buf.nbytes)
    m.copy_from_host(buf)
    return m, buf


def unvec(m, buf, n, inc):
    out = np.empty_like(buf)
    m.copy_to_host(out)
    got = out[::abs(inc)][:n]
    return got if inc > 0 else got[::-1]


@pytest.mark.parametrize("dt", FLOATS, ids=["S", "D"])
@pytest.mark.parametrize("transa, transb", list(itertools.product([False, True], repeat=2)))
@pytest.mark.parametrize("alpha, beta", [(1.0, 0.0), (-0.5, 2.0), (0.0, 1.5), (2.0, 1.0)])
def test_gemm_every_transpose_alpha_beta(blas, dt, transa, transb, alpha, beta):
    rng = np.random.default_rng(7)
    m, n, k = 5, 3, 7
    A = rng.standard_normal((k, m) if transa else (m, k)).astype(dt)
    B = rng.standard_normal((n, k) if transb else (k, n)).astype(dt)
    C0 = rng.standard_normal((m, n)).astype(dt)
    lda, ldb, ldc = A.shape[0] + 2, B.shape[0] + 1, m + 3          # padded columns
    dA, dB, dC = put(A, lda), put(B, ldb), put(C0, ldc)
    blas.gemm(dt, transa, transb, m, n, k, alpha, dA, lda, dB, ldb, beta, dC, ldc)
    opA, opB = (A.T if transa else A), (B.T if transb else B)
    want = alpha * (opA.astype(np.float64) @ opB) + beta * C0
    np.testing.assert_allclose(get(dC, m, n, dt, ldc), want, **TOL[dt])
    pad = np.empty((n, ldc), dt)
    dC.copy_to_host(pad)
    assert np.isnan(pad[:, m:]).all()                                # the padding untouched


@pytest.mark.parametrize("dt", FLOATS, ids=["S", "D"])
def test_beta_zero_ignores_nans_in_c_and_alpha_zero_reads_no_operand(blas, dt):
    A, B = np.ones((2, 3), dt), np.ones((3, 4), dt)
    dC = put(np.full((2, 4), np.nan, dt))
    blas.gemm(dt, False, False, 2, 4, 3, 1.0, put(A), 2, put(B), 3, 0.0, dC, 2)
    assert (get(dC, 2, 4, dt) == 3).all()
    dC2 = put(np.full((2, 4), np.nan, dt))
    blas.gemm(dt, False, False, 2, 4, 3, 0.0, 0, 2, 0, 3, 0.0, dC2, 2)   # A, B never read
    assert (get(dC2, 2, 4, dt) == 0).all()
    blas.gemm(dt, False, False, 2, 4, 0, 1.0, 0, 2, 0, 1, 2.0, dC, 2)    # k = 0: C = beta C
    assert (get(dC, 2, 4, dt) == 6).all()
    blas.gemm(dt, False, False, 0, 4, 3, 1.0, 0, 1, 0, 3, 1.0, 0, 1)     # m = 0: nothing


@pytest.mark.parametrize("dt", FLOATS, ids=["S", "D"])
@pytest.mark.parametrize("trans", [False, True])
@pytest.mark.parametrize("incx, incy", [(1, 1), (2, 3), (-1, 1), (3, -2)])
def test_gemv_transposes_and_increments(blas, dt, trans, incx, incy):
    rng = np.random.default_rng(3)
    m, n, alpha, beta = 6, 4, 1.5, -0.5
    A = rng.standard_normal((m, n)).astype(dt)
    x = rng.standard_normal(m if trans else n).astype(dt)
    y0 = rng.standard_normal(n if trans else m).astype(dt)
    (dx, _), (dy, ybuf) = vec(x, incx), vec(y0, incy)
    blas.gemv(dt, trans, m, n, alpha, put(A, m + 1), m + 1, dx, incx, beta, dy, incy)
    want = alpha * ((A.T if trans else A).astype(np.float64) @ x) + beta * y0
    np.testing.assert_allclose(unvec(dy, ybuf, len(y0), incy), want, **TOL[dt])


@pytest.mark.parametrize("dt", FLOATS, ids=["S", "D"])
@pytest.mark.parametrize("incx, incy", [(1, 1), (2, -3), (-1, -1), (0, 1)])
def test_dot(blas, dt, incx, incy):
    rng = np.random.default_rng(4)
    x, y = rng.standard_normal(9).astype(dt), rng.standard_normal(9).astype(dt)
    if incx == 0:
        x[:] = x[0]                       # a stride of 0 reads one element n times
    dx, _ = vec(x[:1] if incx == 0 else x, incx or 1)
    dy, _ = vec(y, incy)
    got = blas.dot(dt, 9, dx, incx, dy, incy)
    assert isinstance(got, float)
    np.testing.assert_allclose(got, float(x.astype(np.float64) @ y), **TOL[dt])
    assert blas.dot(dt, 0, dx, 1, dy, 1) == 0.0


@pytest.mark.parametrize("dt", FLOATS, ids=["S", "D"])
@pytest.mark.parametrize("transa, transb", [(False, False), (True, False), (False, True)])
def test_gemm_strided_batched(blas, dt, transa, transb):
    rng = np.random.default_rng(5)
    m, n, k, batch = 4, 3, 5, 3
    As = rng.standard_normal((batch,) + ((k, m) if transa else (m, k))).astype(dt)
    Bs = rng.standard_normal((batch,) + ((n, k) if transb else (k, n))).astype(dt)
    C0 = rng.standard_normal((batch, m, n)).astype(dt)
    lda, ldb, ldc = As.shape[1], Bs.shape[1], m
    # each batch's matrix apart by more than its size (the gaps NaN), B shared (stride 0)
    sa, sc = As.shape[1] * As.shape[2] + 3, m * n + 5

    def stack(ms, stride):
        buf = np.full(stride * len(ms), np.nan, dt)
        for i, a in enumerate(ms):
            buf[i * stride:i * stride + a.size] = a.T.ravel()
        mem = Memory(buf.nbytes)
        mem.copy_from_host(buf)
        return mem, buf
    (dA, _), (dC, cbuf) = stack(As, sa), stack(C0, sc)
    dB = put(Bs[0])
    blas.gemm_strided_batched(dt, transa, transb, m, n, k, 0.5, dA, lda, sa, dB, ldb, 0, 2.0,
                              dC, ldc, sc, batch)
    out = np.empty_like(cbuf)
    dC.copy_to_host(out)
    for i in range(batch):
        opA = As[i].T if transa else As[i]
        opB = Bs[0].T if transb else Bs[0]
        want = 0.5 * (opA.astype(np.float64) @ opB) + 2.0 * C0[i]
        got = out[i * sc:i * sc + m * n].reshape(n, m).T
        np.testing.assert_allclose(got, want, **TOL[dt])
        assert i == batch - 1 or np.isnan(out[i * sc + m * n:(i + 1) * sc]).all()


def test_row_major_product_is_the_column_major_one_of_the_transposes(blas):
    # the form tests/test_cuda_loader.py uses on a real GPU: C = A B row-major
    rng = np.random.default_rng(1)
    a, b = rng.standard_normal((5, 7)), rng.standard_normal((7, 3))
    da, db, c = Memory(a.nbytes), Memory(b.nbytes), Memory(5 * 3 * 8)
    da.copy_from_host(a)
    db.copy_from_host(b)
    blas.gemm(np.float64, False, False, 3, 5, 7, 1.0, db, 3, da, 7, 0.0, c, 3)
    got = np.empty((5, 3))
    c.copy_to_host(got)
    np.testing.assert_allclose(got, a @ b, rtol=1e-12)


def test_bad_arguments_fail_as_cublas_does(blas):
    A = put(np.ones((3, 3), np.float32))
    with pytest.raises(ms.DTypeError, match="float32 or float64"):
        blas.dot(np.int32, 1, A, 1, A, 1)
    for call, why in [
            (lambda: blas.gemm(np.float32, False, False, 3, 3, 3, 1, A, 2, A, 3, 0, A, 3),
             "lda = 2"),
            (lambda: blas.gemm(np.float32, True, False, 3, 3, -1, 1, A, 3, A, 3, 0, A, 3),
             "m, n, k = 3, 3, -1"),
            (lambda: blas.gemv(np.float32, False, 3, 3, 1, A, 3, A, 0, 0, A, 1),
             "incx, incy = 0, 1"),
            (lambda: blas.gemm_strided_batched(np.float32, False, False, 1, 1, 1, 1, A, 1, 0,
                                               A, 1, 0, 0, A, 1, 0, -1), "batch = -1")]:
        with pytest.raises(CudaError, match=f"CUBLAS_STATUS_INVALID_VALUE .* \\[7\\]: {why}"):
            call()


def test_operands_outside_live_memory_are_refused_before_any_store(blas):
    a = np.arange(6, dtype=np.float64).reshape(2, 3)
    dA, dC = put(a), put(np.full((2, 2), 5.0))
    with pytest.raises(CudaError, match="cublasDgemm failed: CUBLAS_STATUS_EXECUTION_FAILED"
                                        ".*not inside one live Memory") as info:
        blas.gemm(np.float64, False, True, 2, 2, 3, 1.0, dA, 2, dA, 4, 0.0, dC, 2)  # B: ldb 4
    assert info.value.status == 13 and (get(dC, 2, 2, np.float64) == 5).all()
    with pytest.raises(CudaError, match="not aligned to 8 bytes"):
        blas.dot(np.float64, 2, dA.address + 4, 1, dA, 1)
    dA.free()
    with pytest.raises(CudaError, match="a freed Memory"):
        blas.gemv(np.float64, False, 2, 3, 1.0, dA, 2, dC, 1, 0.0, dC, 1)
    with pytest.raises(CudaError, match="not inside one live Memory"):
        blas.dot(np.float64, 2, np.ones(2).ctypes.data, 1, dC, 1)     # a host address


def test_streams_and_closing(blas):
    s = Stream()
    blas.set_stream(s)
    x = put(np.ones((4, 1), np.float32))
    assert blas.dot(np.float32, 4, x, 1, x, 1) == 4.0
    s.close()
    with pytest.raises(CudaError, match="the stream was closed"):
        blas.dot(np.float32, 4, x, 1, x, 1)
    blas.set_stream(None)
    blas.close()
    with pytest.raises(CudaError, match="CUBLAS_STATUS_NOT_INITIALIZED .*handle was closed"):
        blas.dot(np.float32, 4, x, 1, x, 1)
    assert emulate.BlasHandle().device == 0


def test_a_batch_out_of_range_fails_before_any_batch_is_stored(blas):
    # three batches of C asked for, room for two: the first two stay as they were
    c0 = np.full(8, 5.0)
    dC, dA = Memory(c0.nbytes), put(np.ones((2, 2)))
    dC.copy_from_host(c0)
    with pytest.raises(CudaError, match="not inside one live Memory"):
        blas.gemm_strided_batched(np.float64, False, False, 2, 2, 2, 1.0, dA, 2, 0, dA, 2, 0,
                                  0.0, dC, 2, 4, 3)
    got = np.empty(8)
    dC.copy_to_host(got)
    assert (got == 5).all()
