"""implicit_dot: the element-wise matrix product, fused into plans (numpy as the oracle)."""
import numpy as np
import pytest

import mshadow as ms

DTYPES = [np.float32, np.float64, np.int32, np.int64, np.int8, np.uint8]


def _operands(dtype, m=7, k=5, n=600, seed=0):
    rng = np.random.default_rng(seed)
    a = (rng.random((m, k)) * 4).astype(dtype)
    b = (rng.random((k, n)) * 4).astype(dtype)
    return a, b


def _ref(a, b):
    """Accumulate in k order in the operand dtype, as the kernel does (wraps for ints)."""
    out = np.zeros((a.shape[0], b.shape[1]), dtype=a.dtype)
    with np.errstate(over="ignore"):
        for k in range(a.shape[1]):
            out = (out + a[:, k:k + 1] * b[k:k + 1, :]).astype(a.dtype)
    return out


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("tl", [False, True])
@pytest.mark.parametrize("tr", [False, True])
def test_matches_numpy_for_every_transpose(dtype, tl, tr):
    a, b = _operands(dtype)
    ta = ms.from_numpy(np.ascontiguousarray(a.T)).T if tl else ms.from_numpy(a)
    tb = ms.from_numpy(np.ascontiguousarray(b.T)).T if tr else ms.from_numpy(b)
    dst = ms.new_tensor((7, 600), dtype=dtype, pad=True)
    dst[:] = ms.implicit_dot(ta, tb)
    np.testing.assert_array_equal(dst.numpy(), _ref(a, b))


@pytest.mark.parametrize("saver", ["saveto", "plusto", "minusto"])
def test_fused_with_other_operators(saver):
    a, b = _operands(np.float64)
    c = np.random.default_rng(1).random((7, 600))
    dst = ms.from_numpy(np.ones((7, 600)))
    e = ms.implicit_dot(ms.from_numpy(a), ms.from_numpy(b)) * 0.5 + ms.from_numpy(c)
    want = _ref(a, b) * 0.5 + c
    if saver == "saveto":
        dst[:] = e
    elif saver == "plusto":
        dst += e
        want = 1 + want
    else:
        dst -= e
        want = 1 - want
    np.testing.assert_allclose(dst.numpy(), want, rtol=1e-14)
    assert e.exp_type == ms.type.kChainer


def test_threads_and_blocks_agree():
    a, b = _operands(np.float32, m=300, k=9, n=1500)
    d1, d2 = ms.new_tensor((300, 1500)), ms.new_tensor((300, 1500))
    ms.set_num_threads(1)
    d1[:] = ms.implicit_dot(ms.from_numpy(a), ms.from_numpy(b))
    ms.set_num_threads(2)
    d2[:] = ms.implicit_dot(ms.from_numpy(a), ms.from_numpy(b))
    np.testing.assert_array_equal(d1.numpy(), d2.numpy())
    np.testing.assert_array_equal(d1.numpy(), _ref(a, b))


def test_destination_read_by_the_product_goes_through_a_temporary():
    s = np.arange(16, dtype=np.float64).reshape(4, 4)
    t = ms.from_numpy(s.copy())
    t[:] = ms.implicit_dot(t, t)
    np.testing.assert_array_equal(t.numpy(), s @ s)


def test_plan_shows_the_gemm_instruction():
    a, b = _operands(np.float32)
    dst = ms.new_tensor((7, 600))
    text = ms.plan_for(dst, ms.implicit_dot(ms.from_numpy(a), ms.from_numpy(b)) + 1).disassemble()
    assert "implicit_gemm_f32(L0, L1)" in text


def test_errors():
    a = ms.new_tensor((3, 4))
    with pytest.raises(ms.ShapeError, match=r"implicit_dot The matrix shape do  not match: lhs \(3,4\) and rhs \(3,4\)"):
        ms.implicit_dot(a, a)
    with pytest.raises(ms.DTypeError, match="different dtypes"):
        ms.implicit_dot(a, ms.new_tensor((4, 2), dtype=ms.float64))
    with pytest.raises(ms.DTypeError, match="float16"):
        h = ms.new_tensor((3, 3), dtype=ms.float16)
        ms.implicit_dot(h, h)
    with pytest.raises(TypeError, match="kComplex"):
        ms.implicit_dot(ms.dot(a, a.T), a)
    with pytest.raises(ms.ShapeError, match="must be 2-D"):
        ms.implicit_dot(ms.new_tensor((2, 3, 4)), a)
    u = ms.from_numpy(np.arange(12, dtype=np.float32).reshape(3, 4))
    v = ms.from_numpy(np.arange(8, dtype=np.float32).reshape(4, 2))
    t = ms.new_tensor((2, 3))                  # .T of implicit_dot reads it transposed
    t[:] = ms.implicit_dot(u, v).T
    np.testing.assert_array_equal(t.numpy(), (u.numpy() @ v.numpy()).T)
    dst = ms.new_tensor((3, 4), init=7)
    with pytest.raises(ms.ShapeError):
        dst[:] = ms.implicit_dot(a, a.T)     # (3,3) into (3,4)
    assert (dst.numpy() == 7).all()


def test_every_simd_level_gives_the_same_bits():
    info = ms.simd_info()
    levels = info["compiled"][:info["compiled"].index(info["detected"]) + 1]
    a, b = _operands(np.float64, m=9, k=33, n=700)
    results = []
    try:
        for level in levels:
            ms.set_simd_level(level)
            d = ms.new_tensor((9, 700), dtype=np.float64)
            d[:] = ms.implicit_dot(ms.from_numpy(a), ms.from_numpy(b))
            results.append(d.numpy().copy())
    finally:
        ms.set_simd_level(info["active"])
    for r in results:
        np.testing.assert_array_equal(r, _ref(a, b))
