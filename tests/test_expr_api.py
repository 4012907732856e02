"""Deterministic tests of the expression API: exp_type, F, defined ops, savers, aliasing,
float16 and integer paths, containers, the plan cache, threads and freed/read-only tensors.
Bugs found here that are still open are xfail(strict=True) tests with a minimal reproducer."""
import warnings

import numpy as np
import pytest

import mshadow as ms
import mshadow.engine
from mshadow.testing import ALL_DTYPES, assert_exact, assert_ulp, c_idiv, simd_levels


pytestmark = pytest.mark.usefixtures("restore_engine_state")   # (conftest.py)


def T(a):
    return ms.from_numpy(np.ascontiguousarray(a))


def rng_array(shape, dtype=np.float32, lo=-4, hi=4, seed=0):
    return np.random.default_rng(seed).uniform(lo, hi, shape).astype(dtype)


# ---- exp_type and F ------------------------------------------------------------------------

def test_exp_type_values():
    a = ms.new_tensor((3, 4), 1.0)
    assert (ms.type.kRValue, ms.type.kMapper, ms.type.kChainer, ms.type.kComplex) == (0, 1, 3, 7)
    assert a.exp_type == ms.type.kRValue
    assert (a + 1).exp_type == ms.type.kMapper
    assert ms.F(ms.op.exp, a).exp_type == ms.type.kMapper
    assert a.T.exp_type == ms.type.kChainer
    assert (a.T + a.T).exp_type == ms.type.kChainer
    assert a.T.T is a


@pytest.mark.parametrize("arity,op,args,ref", [
    (1, ms.op.exp, (0,), np.exp),
    (2, ms.op.maximum, (0, 1), lambda a, b: np.where(a > b, a, b)),
    (3, ms.op.clip, (0, 1, 2), lambda a, b, c: np.where(a < b, b, np.where(a > c, c, a))),
])
def test_F_each_arity(arity, op, args, ref):
    xs = [rng_array((5, 7), seed=k) for k in range(3)]
    dst = ms.new_tensor((5, 7), 0.0)
    e = ms.F(op, *[T(xs[k]) for k in args])
    assert type(e).__name__ == ("UnaryMapExp", "BinaryMapExp", "TernaryMapExp")[arity - 1]
    dst[:] = e
    want = ref(*[xs[k] for k in args]).astype(np.float32)
    (assert_ulp if op is ms.op.exp else assert_exact)(dst.numpy(), want)


def test_F_with_names_and_scalars():
    x = rng_array((4, 6))
    dst = ms.new_tensor((4, 6))
    dst[:] = ms.F("clip", T(x), -1.0, 1.0)
    assert_exact(dst.numpy(), np.where(x < -1, np.float32(-1), np.where(x > 1, np.float32(1), x)))
    dst[:] = ms.op.minimum(T(x), 0.5)
    assert_exact(dst.numpy(), np.where(x < 0.5, x, np.float32(0.5)))


def test_user_defined_maximum():
    @ms.op.define
    def maximum(a, b):
        return ms.op.where(a > b, a, b)
    b, c = rng_array((6, 5), seed=1), rng_array((6, 5), seed=2)
    dst = ms.new_tensor((6, 5))
    dst[:] = T(b) * ms.F(maximum, T(c), T(b))
    assert_exact(dst.numpy(), b * np.where(c > b, c, b))


def test_defop_guide_example():
    """guide/defop.cpp: mat = F<maxoftwo>(F<addone>(mat) + 0.5f, mat2)."""
    @ms.op.define
    def maxoftwo(a, b):
        return ms.op.where(a > b, a, b)

    @ms.op.define
    def addone(a):
        return a + 1.0
    m = np.array([[1, 2, 3], [4, 5, 6]], np.float32)
    m2 = np.array([[3, 2, 9], [1, 8, 7]], np.float32)
    mat = T(m)
    mat[:] = ms.F(maxoftwo, ms.F(addone, mat) + 0.5, T(m2))
    assert mat.numpy().tolist() == [[3, 3.5, 9], [5.5, 8, 7.5]]


def test_defined_op_reading_a_computed_argument_twice():
    @ms.op.define
    def maxoftwo(a, b):
        return ms.op.where(a > b, a, b)
    x = np.array([1, 2, 3, 4, 5], np.float32)
    dst = ms.new_tensor((5,))
    dst[:] = ms.F(maxoftwo, T(x) + 1.0, 0.0)
    assert dst.numpy().tolist() == [2, 3, 4, 5, 6]


def test_untraceable_op_warns_once():
    @ms.op.define
    def halve_big(a):
        if a > 2:        # Python control flow on the input: cannot be traced
            return a / 2
        return a
    x = np.array([[1, 3, 5], [2, 8, -1]], np.float32)
    dst = ms.new_tensor((2, 3))
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        dst[:] = ms.F(halve_big, T(x)) + 1.0
        dst2 = ms.new_tensor((2, 3))
        dst2[:] = ms.F(halve_big, T(x))
    runtime = [m for m in w if issubclass(m.category, RuntimeWarning)]
    assert len(runtime) == 1 and "halve_big" in str(runtime[0].message)
    assert_exact(dst.numpy(), np.where(x > 2, x / 2, x) + np.float32(1))
    assert_exact(dst2.numpy(), np.where(x > 2, x / 2, x))


# ---- savers, scalars, the expressions ----------------------------------------------

@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_sgd_update(dtype):
    w0, g = rng_array((37, 19), dtype, seed=3), rng_array((37, 19), dtype, seed=4)
    eta, lam = 0.1, 0.01
    w = ms.new_tensor(w0.shape, pad=True, dtype=dtype)
    w.numpy()[...] = w0
    w[:] = -eta * (T(g) + lam * w)
    d = np.dtype(dtype).type
    assert_exact(w.numpy(), d(-eta) * (g + d(lam) * w0))


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32])
def test_fused_multiply_add_inplace(dtype):
    a0 = rng_array((50, 33), dtype, -9, 9, 5)
    b, c, d = (rng_array((50, 33), dtype, -9, 9, k) for k in (6, 7, 8))
    a = T(a0.copy())
    a += T(b) * T(c) + T(d)
    assert_exact(a.numpy(), (a0 + (b * c + d)).astype(dtype))


@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=lambda d: d.name)
def test_scalar_assignment_every_dtype(dtype):
    dst = ms.new_tensor((3, 5), 0, pad=True, dtype=dtype)
    dst[:] = 3.0
    assert_exact(dst.numpy(), np.full((3, 5), 3, dtype))
    dst[...] = ms.scalar(7)
    assert_exact(dst.numpy(), np.full((3, 5), 7, dtype))
    dst += 2
    dst *= 3
    dst -= 1
    assert_exact(dst.numpy(), np.full((3, 5), 26, dtype))
    dst /= 2
    assert_exact(dst.numpy(), np.full((3, 5), 13, dtype))


def test_ellipsis_assignment_of_expression():
    x = rng_array((4, 4))
    dst = ms.new_tensor((4, 4))
    dst[...] = ms.F(ms.op.exp, T(x))
    assert_ulp(dst.numpy(), np.exp(x))


# ---- aliasing --------------------------------------------------------------------------------

@pytest.mark.parametrize("pad", [False, True])
def test_transpose_into_itself(pad):
    a0 = np.arange(49, dtype=np.float32).reshape(7, 7)
    a = ms.new_tensor((7, 7), pad=pad)
    a.numpy()[...] = a0
    a[:] = a.T
    assert_exact(a.numpy(), a0.T.copy())
    a += a.T
    assert_exact(a.numpy(), a0.T + a0)


def test_overlapping_slices_of_one_tensor():
    base = np.arange(40, dtype=np.float64).reshape(10, 4)
    t = ms.new_tensor((10, 4), pad=True, dtype=np.float64)
    t.numpy()[...] = base
    t.slice(1, 9)[:] = t.slice(0, 8) * 2 + t.slice(2, 10)
    want = base.copy()
    want[1:9] = base[0:8] * 2 + base[2:10]
    assert_exact(t.numpy(), want)


def test_large_aliasing_threaded():
    n = 300
    a0 = rng_array((n, n), seed=9)
    a = T(a0.copy())
    ms.set_num_threads(2)
    a[:] = a.T * 2.0 + a
    assert_exact(a.numpy(), a0.T * np.float32(2) + a0)


# ---- float16 and integer paths --------------------------------------------------------------

def test_float16_computes_in_float32_and_rounds_each_operator():
    # mshadow's half_t (and numpy): every operator computes in float and yields a half
    x = (np.arange(-20, 20, dtype=np.float16) / np.float16(8))
    y = np.linspace(-3, 3, 40).astype(np.float16)
    dst = ms.new_tensor((40,), dtype=np.float16)
    dst[:] = T(x) * T(y) + T(x) / 3.0
    want = x * y + x / np.float16(3.0)
    assert_exact(dst.numpy(), want)


def test_tcast_to_float16():
    x = np.array([1.0, 2.0, 1000.5, -3.25], np.float32)
    dst = ms.new_tensor((4,), dtype=np.float16)
    dst[:] = ms.tcast(np.float16, T(x))
    assert_exact(dst.numpy(), x.astype(np.float16))


def test_float_only_op_on_computed_integers():
    a = np.arange(8, dtype=np.int32)
    dst = ms.new_tensor((8,), dtype=np.int32)
    dst[:] = ms.F(ms.op.sqrt, T(a) * T(a))
    assert dst.numpy().tolist() == list(range(8))


def test_widening_tcast_of_computed_value():
    x = np.arange(0, 120, 7, dtype=np.uint8)
    dst = ms.new_tensor(x.shape, dtype=np.int64)
    dst[:] = ms.tcast(np.int64, T(x) + T(x))
    assert_exact(dst.numpy(), (x + x).astype(np.int64))


def test_sigmoid_softplus_on_integers_compute_in_float():
    a = np.array([-3, -1, 0, 1, 2, 3, 40], np.int32)
    dst = ms.new_tensor(a.shape, dtype=np.int32)
    dst[:] = ms.F(ms.op.softplus, T(a))
    assert dst.numpy().tolist() == np.trunc(np.log1p(np.exp(a.astype(float)))).astype(int).tolist()
    dst[:] = ms.F(ms.op.sigmoid, T(a))
    assert dst.numpy().tolist() == np.trunc(1 / (1 + np.exp(-a.astype(float)))).astype(int).tolist()


def test_abs_negative_zero_same_at_every_level():
    x = T(np.array([-0.0, 0.0, -1.5] * 100, np.float32))
    for level in simd_levels():
        ms.set_simd_level(level)
        d = ms.new_tensor((300,))
        d[:] = ms.F(ms.op.abs, x)
        assert not np.signbit(d.numpy()).any(), level


@pytest.mark.parametrize("dtype", [np.int8, np.int32, np.int64, np.uint8])
def test_integer_division_by_zero_is_zero_with_warning(dtype):
    a = np.array([7, 0, 5, 100], dtype)
    b = np.array([2, 0, 0, 3], dtype)
    dst = ms.new_tensor((4,), dtype=dtype)
    with pytest.warns(RuntimeWarning, match="integer division by zero"):
        dst[:] = T(a) / T(b)
    assert dst.numpy().tolist() == [3, 0, 0, 33]
    with pytest.warns(RuntimeWarning, match="division by zero"):
        dst /= 0
    assert dst.numpy().tolist() == [0, 0, 0, 0]


@pytest.mark.parametrize("dtype", [np.int8, np.int32, np.int64])
def test_int_min_divided_by_minus_one_wraps(dtype):
    info = np.iinfo(dtype)
    a = np.array([info.min, info.min, -7, info.max], dtype)
    b = np.array([-1, 1, -1, -1], dtype)
    dst = ms.new_tensor((4,), dtype=dtype)
    dst[:] = T(a) / T(b)
    assert dst.numpy().tolist() == [info.min, info.min, 7, -info.max]
    assert_exact(dst.numpy(), c_idiv(a, b))


def test_integer_overflow_wraps():
    a = np.array([127, -128, 100], np.int8)
    dst = ms.new_tensor((3,), dtype=np.int8)
    dst[:] = T(a) + T(a) * ms.scalar(2, np.int8)
    with np.errstate(all="ignore"):
        assert_exact(dst.numpy(), (a + a * np.int8(2)).astype(np.int8))


def test_numpy_scalar_on_the_left_builds_an_expression():
    t = ms.new_tensor((3,), 1, dtype=np.int32)
    assert isinstance(np.int32(2) * t, ms.Exp)
    assert isinstance(np.ones(3, np.int32) + t, ms.Exp)   # arrays defer too


def test_tensor_comparisons_build_expressions():
    t = T(np.array([-1, 0, 2], np.float32))
    dst = ms.new_tensor((3,))
    dst[:] = ms.where(t > 0, t, 0.5 * t)
    assert dst.numpy().tolist() == [-0.5, 0, 2]
    dst[:] = (t <= 0) + (t >= 2) + (t < -0.5)
    assert dst.numpy().tolist() == [2, 1, 1]
    dst[:] = (t == 0) + (t != 2) * 2                 # == and != build expressions too
    assert dst.numpy().tolist() == [2, 3, 0]


def test_F_accepts_op_where():
    c = T(np.array([1, 0, 1], np.float32))
    a = T(np.array([1, 2, 3], np.float32))
    dst = ms.new_tensor((3,))
    dst[:] = ms.F(ms.op.where, c, a, -a)
    assert dst.numpy().tolist() == [1, -2, 3]


# ---- containers, plans, threads, large tensors ----------------------------------------------

def test_container_takes_no_expression_of_another_shape():
    # mshadow: "Assignment: Shape of Tensors are not consistent with target"; nothing stored
    c = ms.TensorContainer((2, 2), init=1.0)
    x = rng_array((5, 7))
    with pytest.raises(ms.ShapeError, match="Shape of Tensors are not consistent with target"):
        c[:] = T(x) * 2.0
    assert c.shape == ms.Shape(2, 2) and (c.numpy() == 1.0).all()
    c.resize((5, 7))
    c[:] = T(x) * 2.0
    assert_exact(c.numpy(), x * np.float32(2))


def test_plan_cache_compiles_each_structure_once():
    x, y = rng_array((3, 9)), rng_array((3, 9), seed=1)
    dst = ms.new_tensor((3, 9))

    def exp_(s):
        return ms.F(ms.op.tanh, T(x)) * s + T(y) / 7.25   # an unusual structure
    dst[:] = exp_(1.5)
    n = len(ms.engine._plans)
    for s in (2.5, -1.0, 3.0):
        dst[:] = exp_(s)
        other = ms.new_tensor((11, 4))
        other[:] = ms.F(ms.op.tanh, ms.new_tensor((11, 4), 1.0)) * s + ms.new_tensor((11, 4)) / 7.25
    assert len(ms.engine._plans) == n
    dst += exp_(1.0)                        # another saver is another plan
    assert len(ms.engine._plans) == n + 1


def test_disassemble_text():
    a, b = ms.new_tensor((4, 4), 1.0), ms.new_tensor((4, 4), 2.0)
    dst = ms.new_tensor((4, 4))
    text = ms.plan_for(dst, a * b + ms.F(ms.op.exp, b)).disassemble()
    lines = text.splitlines()
    assert lines[0].startswith("# dst f32 saveto; leaves L0:f32, L1:f32, L2:f32")
    assert lines[1:] == ["r0 = mul_f32(L0, L1)", "dst = chain_f32[L2 -> exp(_) -> plus(r0, _)]"]
    t2 = ms.plan_for(dst, a.T * 2.0, "plusto").disassemble()
    assert "L0:f32.T" in t2 and "plusto" in t2


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32, np.float16])
def test_threads_1_and_2_identical_on_large_tensors(dtype):
    n = 3 * 32768 + 17
    x = rng_array((n,), dtype, 0.5, 3, 11)
    y = rng_array((n,), dtype, 0.5, 3, 12)
    outs = []
    for threads in (1, 2):
        ms.set_num_threads(threads)
        d = ms.new_tensor((n,), dtype=dtype)
        d[:] = T(x) * T(y) + T(x) - T(y) * 2
        outs.append(d.numpy().copy())
    assert_exact(outs[0], outs[1])
    want = x * y + x - y * np.asarray(2, dtype)   # float16: every operator yields a half
    assert_exact(outs[1], want)


def test_large_pitched_threaded():
    x = rng_array((400, 333), seed=13)
    d = ms.new_tensor((400, 333), pad=True)
    ms.set_num_threads(2)
    d[:] = ms.F(ms.op.maximum, T(x), 0.0) - T(x) * 0.5
    assert_exact(d.numpy(), np.where(x > 0, x, np.float32(0)) - x * np.float32(0.5))


# ---- freed and read-only tensors -------------------------------------------------------------

def test_freed_leaf_raises_before_any_store():
    t = ms.new_tensor((4,), 1.0)
    live = ms.new_tensor((4,), 2.0)
    ms.free_space(t)
    d = ms.new_tensor((4,), 5.0)
    with pytest.raises(ms.FreedTensorError, match="released by free_space"):
        d[:] = live + t
    assert d.numpy().tolist() == [5.0] * 4


def test_readonly_destination_is_refused():
    a = np.ones((3, 3), np.float32)
    a.flags.writeable = False
    ro = ms.from_numpy(a)
    with pytest.raises(ValueError, match="read-only"):
        ro[:] = ms.new_tensor((3, 3), 2.0) * 2
    with pytest.raises(ValueError, match="read-only"):
        ro += 1.0
    assert_exact(a, np.ones((3, 3), np.float32))
