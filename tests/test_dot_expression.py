"""dot with an expression operand: ``dot(w, unpack_patch2col(pad(x, 1), 3, 3, 1))`` (cxxnet's
convolution) evaluates the right operand a panel of columns at a time and never holds the
whole column matrix; every other form goes through a temporary. numpy (float64) is the
oracle."""
import numpy as np
import pytest

import mshadow as ms
from mshadow import _core
from mshadow.errors import DTypeError, ShapeError
from references import np_im2col, np_pad

DT = [np.float32, np.float64]


def _tol(dtype):
    return dict(rtol=1e-4, atol=1e-4) if dtype == np.float32 else dict(rtol=1e-11, atol=1e-11)


def _conv_case(dtype, seed=0, N=4, C=16, H=23, W=23, K=8):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((N, C, H, W)).astype(dtype)
    w = rng.standard_normal((K, C * 9)).astype(dtype)
    col = np_im2col(np_pad(x.astype(np.float64), 1, 1), 3, 3, 1, 1, 1, 1)
    return x, w, col


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("dtype", DT)
def test_convolution_forward_in_panels(dtype, threads):
    """Several panels (the column matrix is 144 x 2116; a panel about 1 MiB), a pitched
    weight and destination, every saver with a BLAS form, a scale, and w.T."""
    x, w, col = _conv_case(dtype)
    X = ms.from_numpy(x)
    Wp = ms.new_tensor(w.shape, dtype=dtype, pad=True)
    Wp.numpy()[...] = w
    e = ms.unpack_patch2col(ms.pad(X, 1), 3, 3, 1)
    want = w.astype(np.float64) @ col
    old = ms.get_num_threads()
    ms.set_num_threads(threads)
    try:
        o = ms.new_tensor(want.shape, dtype=dtype, pad=True, init=3)
        assert o.stride != o.shape[1]
        o[:] = ms.dot(Wp, e)
        np.testing.assert_allclose(o.numpy(), want, **_tol(dtype))
        o[:] = 3
        o += ms.dot(Wp, e) * 2
        np.testing.assert_allclose(o.numpy(), 3 + 2 * want, **_tol(dtype))
        o -= ms.dot(Wp, e)
        np.testing.assert_allclose(o.numpy(), 3 + want, **_tol(dtype))
        WT = ms.from_numpy(np.ascontiguousarray(w.T))
        o[:] = ms.dot(WT.T, e)
        np.testing.assert_allclose(o.numpy(), want, **_tol(dtype))
    finally:
        ms.set_num_threads(old)


def test_the_column_matrix_never_exists():
    """The only scratch of the run is one panel (per thread): the arena keeps a block
    smaller than the column matrix (144 x 2116 float32, 1.2 MB here)."""
    x, w, col = _conv_case(np.float32)
    X, Wt = ms.from_numpy(x), ms.from_numpy(w)
    _core.release_scratch()
    o = ms.new_tensor((w.shape[0], col.shape[1]))
    old = ms.get_num_threads()
    ms.set_num_threads(1)         # (a panel per thread)
    try:
        o[:] = ms.dot(Wt, ms.unpack_patch2col(ms.pad(ms.F(ms.op.relu, X), 1), 3, 3, 1))
    finally:
        ms.set_num_threads(old)
    want = w.astype(np.float64) @ np_im2col(np_pad(np.maximum(x, 0).astype(np.float64), 1, 1),
                                            3, 3, 1, 1, 1, 1)
    np.testing.assert_allclose(o.numpy(), want, rtol=1e-4, atol=1e-4)
    held = _core.scratch_held()
    assert held and max(held) <= (1 << 20) + 4096 < col.size * 4, held


@pytest.mark.parametrize("dtype", DT)
def test_element_wise_and_gathered_operands(dtype):
    rng = np.random.default_rng(3)
    a = rng.standard_normal((5, 7)).astype(dtype)
    b = rng.standard_normal((7, 300)).astype(dtype)
    idx = rng.integers(0, 7, 7)
    A, B = ms.from_numpy(a), ms.from_numpy(b)
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    o = ms.new_tensor((5, 300), dtype=dtype)
    o[:] = ms.dot(A, B * 2 + 1)
    np.testing.assert_allclose(o.numpy(), a64 @ (b64 * 2 + 1), **_tol(dtype))
    o[:] = ms.dot(A, ms.take(ms.from_numpy(idx.astype(dtype)), B))
    np.testing.assert_allclose(o.numpy(), a64 @ b64[idx], **_tol(dtype))
    # a left operand, and both, go through temporaries
    o[:] = ms.dot(A * 2, B)
    np.testing.assert_allclose(o.numpy(), (a64 * 2) @ b64, **_tol(dtype))
    o[:] = ms.dot(ms.F(ms.op.relu, A), B - 1)
    np.testing.assert_allclose(o.numpy(), np.maximum(a64, 0) @ (b64 - 1), **_tol(dtype))


def test_an_operand_that_reads_the_destination():
    """``o[:] = dot(w, o + 1)``: every panel would read columns of o already stored; the
    operand goes through a temporary instead."""
    rng = np.random.default_rng(4)
    w, o0 = rng.standard_normal((64, 64)), rng.standard_normal((64, 64))
    o = ms.from_numpy(o0.copy())
    o[:] = ms.dot(ms.from_numpy(w), o + 1)
    np.testing.assert_allclose(o.numpy(), w @ (o0 + 1), rtol=1e-11, atol=1e-11)


def test_a_bad_index_stores_nothing():
    a = ms.from_numpy(np.ones((3, 4), np.float32))
    b = ms.from_numpy(np.ones((4, 5), np.float32))
    o = ms.new_tensor((3, 5), init=7)
    with pytest.raises(IndexError):
        o[:] = ms.dot(a, ms.take(ms.from_numpy(np.array([0, 1, 9, 2], np.float32)), b))
    np.testing.assert_array_equal(o.numpy(), 7)


def test_errors_name_what_was_wrong():
    a = ms.new_tensor((3, 4))
    b = ms.new_tensor((4, 5))
    v = ms.new_tensor((4,))
    with pytest.raises(TypeError, match="2-D product only.*assign it to a tensor first"):
        ms.dot(v + 1, b)
    with pytest.raises(TypeError, match="2-D product only"):
        ms.dot(a, v * 2)
    with pytest.raises(DTypeError, match="float64 and float32"):
        ms.dot(ms.new_tensor((3, 4), dtype=np.float64) * 2, b)
    with pytest.raises(ShapeError, match="dot-gemm: matrix shape mismatch"):
        ms.dot(a, a * 2)
    o = ms.new_tensor((3, 6))
    with pytest.raises(ShapeError, match=r"destination \(3, 6\)"):
        o[:] = ms.dot(a, b * 2)
    with pytest.raises(DTypeError, match="into a tensor of dtype float64"):
        ms.new_tensor((3, 5), dtype=np.float64)[:] = ms.dot(a, b * 2)
    with pytest.raises(TypeError, match="no BLAS form"):
        o2 = ms.new_tensor((3, 5))
        o2 *= ms.dot(a, b * 2)


def test_set_num_threads_caps_the_blas_dot_loads_later():
    """The BLAS dot multiplies with (scipy's) is loaded on the first product; a cap set
    before that reaches it too (threadpoolctl sees loaded libraries only)."""
    pytest.importorskip("threadpoolctl")
    import os
    import subprocess
    import sys
    import tempfile
    # the child imports the mshadow this process imported (cwd: not a source checkout,
    # whose unbuilt mshadow/ would shadow an install)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        p for p in (os.path.dirname(os.path.dirname(ms.__file__)),
                    os.environ.get("PYTHONPATH")) if p))
    code = ("import mshadow as ms, threadpoolctl\n"
            "ms.set_num_threads(1)\n"
            "o = ms.new_tensor((2, 2)); o[:] = ms.dot(ms.new_tensor((2, 2)), ms.new_tensor((2, 2)))\n"
            "print(sorted({i['num_threads'] for i in threadpoolctl.threadpool_info() "
            "if i['user_api'] == 'blas'}))\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                       timeout=120, cwd=tempfile.gettempdir())
    assert r.returncode == 0, r.stderr
    out = r.stdout
    assert out.strip() == "[1]", out


def test_an_operand_with_a_rows_stage_is_evaluated_once():
    """pool of an expression stages it by rows: panels would evaluate those rows again for
    every panel, so the operand goes through a temporary (open_panels says None)."""
    from mshadow.dot import open_panels
    rng = np.random.default_rng(7)
    x = rng.standard_normal((40, 3000)).astype(np.float32)
    w = rng.standard_normal((6, 40)).astype(np.float32)
    e = ms.pool(ms.F(ms.op.relu, ms.from_numpy(x)), 1, 2, 1, 2)     # (40, 1500), rows stage
    o = ms.new_tensor((6, 1500))
    assert open_panels(e, o) is None
    assert open_panels(ms.from_numpy(x) * 2, o) is not None
    o[:] = ms.dot(ms.from_numpy(w), e)
    want = w.astype(np.float64) @ np.maximum(x, 0).reshape(40, 1500, 2).max(-1)
    np.testing.assert_allclose(o.numpy(), want, rtol=1e-4, atol=1e-4)


def test_an_index_gone_bad_after_building_stores_nothing():
    """The index a gather of the operand reads is checked when the run binds, before the
    first panel is stored."""
    a = ms.from_numpy(np.ones((3, 4), np.float32))
    b = ms.from_numpy(np.ones((4, 5000), np.float32))
    idx = ms.from_numpy(np.array([0, 1, 3, 2], np.float32))
    e = ms.take(idx, b)
    idx.numpy()[2] = 9
    o = ms.new_tensor((3, 5000), init=7)
    with pytest.raises(IndexError):
        o[:] = ms.dot(a, e)
    np.testing.assert_array_equal(o.numpy(), 7)
