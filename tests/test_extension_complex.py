"""The complex.h family on an interleaved (re, im) last axis: numpy's complex64/complex128
arithmetic on the same memory viewed as complex is the oracle (bit-exact where the formula
is numpy's, within a few ulps for division, whose formula is mshadow's, and bit-exact against
mshadow's formula written out in numpy); shapes and dtypes are checked with mshadow's
messages."""
import numpy as np
import pytest

import mshadow as ms
from mshadow.testing import tensor as T, padded as _padded, evaluate as _eval

RNG = np.random.default_rng(17)
FLOATS = [np.float32, np.float64]
CPLX = {np.float32: np.complex64, np.float64: np.complex128}
SHAPES = [(6,), (3, 4), (2, 3, 8), (5, 1030)]      # (5, 1030): rows longer than one block


def _reals(shape, dtype, lo=-3.0, hi=3.0):
    return RNG.uniform(lo, hi, shape).astype(dtype)


def _as_complex(a):
    return np.ascontiguousarray(a).view(CPLX[a.dtype.type])


def _as_reals(z):
    return np.ascontiguousarray(z).view(z.real.dtype)


def _half(shape):
    return shape[:-1] + (shape[-1] // 2,)


# ---- products -----------------------------------------------------------------------------

def _mshadow_mul(ar, ai, br, bi):
    """mshadow's op::complex::mul, operation for operation, in the operands' dtype."""
    return ar * br - ai * bi, ar * bi + br * ai


def _parts(a):
    return a[..., 0::2], a[..., 1::2]


def _mul_ref(a, b):
    """complex_mul_cc of two interleaved arrays by mshadow's formula."""
    return _interleave(*_mshadow_mul(*_parts(a), *_parts(b)))


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("shape", SHAPES)
def test_mul_cc_cr_rc_match_numpy(dtype, shape):
    a, b = _reals(shape, dtype), _reals(shape, dtype)
    r = _reals(_half(shape), dtype)
    za, zb = _as_complex(a), _as_complex(b)
    zero = np.zeros_like(r)
    eps = np.finfo(dtype).eps
    cases = [
        (ms.complex_mul_cc(_padded(a), T(b)), za * zb, _parts(a) + _parts(b)),
        (ms.complex_mul_cr(T(a), _padded(r)), za * r.astype(za.dtype), _parts(a) + (r, zero)),
        (ms.complex_mul_rc(_padded(r), T(b)), r.astype(zb.dtype) * zb, (r, zero) + _parts(b)),
    ]
    for e, want, parts in cases:
        assert e.shape == ms.Shape(*shape) and e.dtype == dtype
        got = _eval(e)
        # numpy's complex loops may fuse a multiply-add: equal to an ulp or so
        np.testing.assert_allclose(got, _as_reals(want), rtol=4 * eps, atol=4 * eps)
        # mshadow's formula, written out in numpy in the same dtype: bit-exact
        np.testing.assert_array_equal(got, _interleave(*_mshadow_mul(*parts)))


# ---- quotients ----------------------------------------------------------------------------

def _mshadow_div(ar, ai, br, bi):
    """mshadow's op::complex::div, operation for operation, in the operands' dtype."""
    den = br * br + bi * bi
    return (ar * br + ai * bi) / den, (br * ai - ar * bi) / den


def _interleave(re, im):
    out = np.empty(re.shape[:-1] + (2 * re.shape[-1],), re.dtype)
    out[..., 0::2], out[..., 1::2] = re, im
    return out


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("shape", SHAPES)
def test_div_cc_cr_rc_match_numpy(dtype, shape):
    a, b = _reals(shape, dtype), _reals(shape, dtype, 0.5, 3.0)
    r, rb = _reals(_half(shape), dtype), _reals(_half(shape), dtype, 0.5, 3.0)
    za, zb = _as_complex(a), _as_complex(b)
    zero = np.zeros_like(r)
    eps = np.finfo(dtype).eps
    cases = [
        (ms.complex_div_cc(_padded(a), T(b)), za / zb, _parts(a) + _parts(b)),
        (ms.complex_div_cr(T(a), _padded(rb)), za / rb.astype(za.dtype), _parts(a) + (rb, zero)),
        (ms.complex_div_rc(_padded(r), T(b)), r.astype(zb.dtype) / zb, (r, zero) + _parts(b)),
    ]
    for e, want, parts in cases:
        got = _eval(e)
        # numpy's division (Smith's algorithm) rounds differently: close, not equal
        np.testing.assert_allclose(got, _as_reals(want), rtol=8 * eps, atol=8 * eps)
        # mshadow's formula, written out in numpy in the same dtype: bit-exact
        np.testing.assert_array_equal(got, _interleave(*_mshadow_div(*parts)))


def test_div_uses_mshadows_unscaled_formula():
    # |b|^2 overflows float32 although a / b = 1e-30 is representable: numpy scales, mshadow
    # does not, so the quotient is 0 (finite / inf), as in the C++
    a = np.array([1.0, 1.0], np.float32)
    b = np.array([1e30, 1e30], np.float32)
    want = _as_reals(_as_complex(a) / _as_complex(b))
    np.testing.assert_allclose(want, [1e-30, 0.0], rtol=1e-6, atol=0)          # numpy
    np.testing.assert_array_equal(_eval(ms.complex_div_cc(T(a), T(b))), [0.0, 0.0])
    # division by zero: (x*0 + y*0) / 0 -> NaN, as in mshadow
    got = _eval(ms.complex_div_cc(T(np.array([1.0, 2.0])), T(np.array([0.0, 0.0]))))
    assert np.isnan(got).all()


def test_real_operand_has_an_explicit_zero_imaginary_part():
    # mshadow computes ai * 0 for a real rhs: an infinite imaginary part gives NaN
    a = np.array([2.0, np.inf], np.float64)
    got = _eval(ms.complex_mul_cr(T(a), T(np.array([3.0]))))
    assert got[0] != got[0] and got[1] == np.inf       # re = 2*3 - inf*0 = NaN
    got = _eval(ms.complex_mul_rc(T(np.array([3.0])), T(a)))
    assert got[0] != got[0] and got[1] == np.inf


# ---- one operand --------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("shape", SHAPES)
def test_unary_ops_match_numpy(dtype, shape):
    a = _reals(shape, dtype)
    r = _reals(_half(shape), dtype)
    z = _as_complex(a)
    for src in (_padded(a), T(a)):
        np.testing.assert_array_equal(_eval(ms.conj(src)), _as_reals(np.conj(z)))
        np.testing.assert_array_equal(_eval(ms.complex_exchange(src)),
                                      _interleave(z.imag, z.real))
        np.testing.assert_array_equal(_eval(ms.complex_toreal(src)), z.real)
        np.testing.assert_array_equal(_eval(ms.complex_abs_square(src)),
                                      z.real * z.real + z.imag * z.imag)
        np.testing.assert_array_equal(_eval(ms.complex_sum_real_imag(src)), z.real + z.imag)
    np.testing.assert_array_equal(_eval(ms.complex_pad_imag(_padded(r))),
                                  _as_reals(r.astype(z.dtype)))
    np.testing.assert_allclose(_eval(ms.complex_abs_square(T(a))), np.abs(z) ** 2,
                               rtol=4 * np.finfo(dtype).eps)
    assert ms.complex_toreal(T(a)).shape == ms.Shape(*_half(shape))
    assert ms.complex_pad_imag(T(r)).shape == ms.Shape(*shape)


def test_conj_negates_zero_and_pad_imag_accepts_odd_lengths():
    a = np.array([1.0, 0.0, -2.0, -0.0], np.float64)
    got = _eval(ms.conj(T(a)))
    np.testing.assert_array_equal(got, [1.0, -0.0, -2.0, 0.0])
    assert np.signbit(got[1]) and not np.signbit(got[3])
    # mshadow demands an even last axis of pad_imag's *real* input (quirk 12); here any
    r = np.array([[1.0, 2.0, 3.0]], np.float32)
    np.testing.assert_array_equal(_eval(ms.complex_pad_imag(T(r))),
                                  [[1.0, 0.0, 2.0, 0.0, 3.0, 0.0]])


# ---- composition --------------------------------------------------------------------------

def test_complex_ops_compose_with_expressions_and_views():
    a, b = _reals((3, 8), np.float32), _reals((3, 8), np.float32)
    ta, tb = T(a), T(b)
    za = _as_complex(a)
    # sources that are expressions and views; the result inside arithmetic
    e = ms.complex_mul_cc(ta * 2, ms.flip(tb, 0)) + 1
    np.testing.assert_array_equal(_eval(e), _mul_ref(a * 2, b[::-1]) + 1)
    # nested: |a * conj(a)| = |a|^2 on the real part, 0 imaginary
    e = ms.complex_toreal(ms.complex_mul_cc(ta, ms.conj(ta)))
    np.testing.assert_allclose(_eval(e), np.abs(za) ** 2, rtol=1e-6)
    e = ms.complex_abs_square(ms.complex_pad_imag(ms.complex_toreal(ta)))
    np.testing.assert_array_equal(_eval(e), za.real * za.real)
    # toreal is a view: of an element-wise expression it reads the leaves in place
    e = ms.complex_toreal(ms.F(ms.op.relu, ta - 0.5))
    np.testing.assert_array_equal(_eval(e), np.maximum(a - 0.5, 0)[:, 0::2])
    assert "g_cx" not in ms.plan_for(ms.new_tensor((3, 4)), e).disassemble()
    assert "g_cx_mul_cc_f32" in ms.plan_for(ms.new_tensor((3, 8)),
                                            ms.complex_mul_cc(ta, tb)).disassemble()
    # the destination may be a source (the plan goes through a temporary)
    t = ms.from_numpy(a.copy())
    t[:] = ms.complex_mul_cc(t, t)
    np.testing.assert_array_equal(t.numpy(), _mul_ref(a, a))
    t = ms.from_numpy(a.copy())
    t += ms.complex_exchange(t)
    np.testing.assert_array_equal(t.numpy(), a + _interleave(za.imag, za.real))


def test_complex_ops_on_threads():
    a, b = _reals((64, 1024), np.float64), _reals((64, 1024), np.float64)
    want = _mul_ref(a, b)
    old = ms.get_num_threads()
    for threads in (1, 2):
        ms.set_num_threads(threads)
        try:
            np.testing.assert_array_equal(_eval(ms.complex_mul_cc(T(a), T(b))), want)
        finally:
            ms.set_num_threads(old)


# ---- errors -------------------------------------------------------------------------------

def test_binary_shape_errors_use_mshadows_messages():
    c4, c6 = T(np.zeros((2, 4), np.float32)), T(np.zeros((2, 6), np.float32))
    with pytest.raises(ms.ShapeError, match=r"ComplexBinaryMapExp \(CC\): Shapes of operands "
                                            r"are not the same\."):
        ms.complex_mul_cc(c4, c6)
    odd = T(np.zeros((2, 3), np.float32))
    with pytest.raises(ms.ShapeError, match=r"ComplexBinaryMapExp \(CC\): Shape of the last "
                                            r"dimension is not even\. We must have real part "
                                            r"\+ imaginary part\."):
        ms.complex_div_cc(odd, odd)
    r3 = T(np.zeros((2, 3), np.float32))
    with pytest.raises(ms.ShapeError, match=r"ComplexBinaryMapExp \(CR\): Shapes of operands "
                                            r"do not match\."):
        ms.complex_mul_cr(c4, r3)
    with pytest.raises(ms.ShapeError, match=r"ComplexBinaryMapExp \(CR\): Shapes of operands "
                                            r"are not the same\."):
        ms.complex_div_cr(c4, T(np.zeros((3, 2), np.float32)))
    with pytest.raises(ms.ShapeError, match=r"ComplexBinaryMapExp \(RC\): Shapes of operands "
                                            r"do not match\."):
        ms.complex_mul_rc(c4, c4)
    with pytest.raises(ms.ShapeError, match=r"ComplexBinaryMapExp \(RC\): Shapes of operands "
                                            r"are not the same\."):
        ms.complex_div_rc(T(np.zeros((2,), np.float32)), c4)


def test_unary_odd_last_axis_errors():
    odd = T(np.zeros((2, 5), np.float64))
    for f in (ms.conj, ms.complex_exchange, ms.complex_toreal, ms.complex_abs_square,
              ms.complex_sum_real_imag):
        with pytest.raises(ms.ShapeError, match=r"ComplexUnitaryExp: Shape of the last "
                                                r"dimension is not even\. We must have real "
                                                r"\+ imaginary\."):
            f(odd)
    with pytest.raises(ms.ShapeError, match="not even"):
        ms.conj(ms.flip(odd, 0) * 2)                   # expressions are checked alike


@pytest.mark.parametrize("dtype", [np.float16, np.int32, np.int64, np.uint8, np.int8])
def test_dtype_errors(dtype):
    x = T(np.zeros((2, 4), dtype))
    f = T(np.zeros((2, 4), np.float32))
    for fn in (ms.conj, ms.complex_exchange, ms.complex_pad_imag, ms.complex_toreal,
               ms.complex_abs_square, ms.complex_sum_real_imag):
        with pytest.raises(ms.DTypeError, match="float32 or float64"):
            fn(x)
    with pytest.raises(ms.DTypeError, match="float32 or float64"):
        ms.complex_mul_cc(x, f)
    with pytest.raises(ms.DTypeError, match="float32 or float64"):
        ms.complex_div_rc(T(np.zeros((2, 2), np.float32)), x)


def test_mixed_float_dtypes_and_bad_sources():
    with pytest.raises(ms.DTypeError, match="dtypes float32 and float64"):
        ms.complex_mul_cc(T(np.zeros(4, np.float32)), T(np.zeros(4, np.float64)))
    with pytest.raises(TypeError, match="must be a tensor or an expression"):
        ms.complex_mul_cc([1.0, 2.0], T(np.zeros(2, np.float32)))
    with pytest.raises(TypeError, match="must be a tensor or an expression"):
        ms.conj(2.0)
    a = T(np.zeros((2, 2), np.float32))
    with pytest.raises(TypeError, match="kComplex"):
        ms.conj(ms.dot(a, a))
