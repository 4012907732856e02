"""Regression tests: float16 rounding, the fallback's integer semantics, clear errors, and
the BLAS thread cap. Each failed before its fix."""
import json
import warnings

import numpy as np
import pytest

import mshadow as ms
from mshadow.param import Parameter, field, ParamError


# ---- float16 holds only what a half can hold ------------------------------------------
def test_float16_expression_rounds_each_operator():
    h = ms.new_tensor((4,), 0.1, dtype=np.float16)
    out = ms.new_tensor((4,), dtype=np.float32)
    out[:] = ms.tcast(np.float32, h * h)
    hn = np.full(4, 0.1, dtype=np.float16)
    want = (hn * hn).astype(np.float32)          # numpy: the product is a half
    np.testing.assert_array_equal(out.numpy(), want)
    assert out.numpy()[0] == np.float32(0.0099945068359375)


def test_float64_to_float16_rounds_once():
    v = 1 + 2.0 ** -11 + 2.0 ** -40                # a tie through float32, above it in float64
    d = ms.new_tensor((3,), v, dtype=np.float64)
    h = ms.new_tensor((3,), dtype=np.float16)
    h[:] = ms.tcast(np.float16, d)
    assert h.numpy()[0] == np.float16(v) == np.float16(1.001)


def test_float64_to_float16_matches_numpy_everywhere():
    rng = np.random.default_rng(1)
    x = np.concatenate([rng.standard_normal(5000) * 10.0 ** rng.integers(-9, 6, 5000),
                        [0.0, -0.0, np.inf, -np.inf, np.nan, 65504.0, 65520.0, 65519.99,
                         2.0 ** -24, 2.0 ** -25, 2.0 ** -25 * 1.0000001, 6.1e-5, -2.0 ** -14]])
    d = ms.from_numpy(x)
    h = ms.new_tensor(x.shape, dtype=np.float16)
    h[:] = ms.tcast(np.float16, d)
    with np.errstate(over="ignore"):
        want = x.astype(np.float16)
    got = h.numpy()
    assert np.array_equal(got.view(np.uint16)[~np.isnan(want)], want.view(np.uint16)[~np.isnan(want)])
    assert np.isnan(got[np.isnan(want)]).all()


# ---- the numpy fallback keeps the compiled integer semantics ---------------------------
def _untraceable_add():
    @ms.op.define
    def branchy(a, b):
        if a > b:          # Python control flow: cannot be traced, runs on numpy
            return a + b
        return a + b
    return branchy


def _untraceable_div():
    @ms.op.define
    def branchy_div(a, b):
        if a > 1000:
            return a
        return a / b
    return branchy_div


def test_fallback_int8_overflow_wraps_like_compiled():
    a = ms.from_numpy(np.array([100, 120, -128, 5], dtype=np.int8))
    b = ms.from_numpy(np.array([100, 120, -1, 5], dtype=np.int8))
    out = ms.new_tensor((4,), dtype=np.int8)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        out[:] = ms.F(_untraceable_add(), a, b)
    compiled = ms.new_tensor((4,), dtype=np.int8)
    compiled[:] = a + b
    np.testing.assert_array_equal(out.numpy(), compiled.numpy())
    np.testing.assert_array_equal(out.numpy(), np.array([-56, -16, 127, 10], dtype=np.int8))


def test_fallback_integer_division_by_zero_gives_zero():
    a = ms.from_numpy(np.array([7, -7, 9, 3], dtype=np.int32))
    b = ms.from_numpy(np.array([0, 2, 0, -2], dtype=np.int32))
    out = ms.new_tensor((4,), dtype=np.int32)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        out[:] = ms.F(_untraceable_div(), a, b)
    np.testing.assert_array_equal(out.numpy(), np.array([0, -3, 0, -1], dtype=np.int32))


# ---- clear, typed errors ---------------------------------------------------------------
def test_take_index_inf_is_index_error():
    src = ms.new_tensor((4, 3), 1.0)
    idx = ms.from_numpy(np.array([0.0, np.inf], dtype=np.float32))
    out = ms.new_tensor((2, 3))
    with pytest.raises(IndexError, match="take: index values must be finite"):
        out[:] = ms.take(idx, src)


def test_new_tensor_init_string_is_type_error():
    with pytest.raises(TypeError, match="new_tensor: init must be a real number"):
        ms.new_tensor((2, 2), init="x")
    with pytest.raises(TypeError, match="TensorContainer: init must be a real number"):
        ms.TensorContainer((2, 2), init="x")


def test_int_tensor_init_nan_is_value_error():
    with pytest.raises(ValueError, match=r"new_tensor: init=nan cannot be stored in a int32"):
        ms.new_tensor((2, 2), init=float("nan"), dtype=np.int32)
    c = ms.TensorContainer((2,), dtype=np.int64)
    with pytest.raises(ValueError, match="TensorContainer.resize: init=inf"):
        c.resize((3,), init=float("inf"))


def test_set_num_threads_huge_is_value_error():
    n = ms.get_num_threads()
    with pytest.raises(ValueError, match=r"set_num_threads: expected 1 <= n <= 1024, got 10{12}"):
        ms.set_num_threads(10 ** 12)
    with pytest.raises(TypeError, match="set_num_threads: n must be an int"):
        ms.set_num_threads(2.5)
    assert ms.get_num_threads() == n


def test_set_num_threads_caps_the_blas_pool():
    threadpoolctl = pytest.importorskip("threadpoolctl")
    ms.dot  # noqa: B018 - the BLAS module loads on the first product
    a = ms.new_tensor((8, 8), 1.0)
    c = ms.new_tensor((8, 8))
    c[:] = ms.dot(a, a)
    n = ms.get_num_threads()
    try:
        ms.set_num_threads(1)
        blas = [p for p in threadpoolctl.threadpool_info() if p["user_api"] == "blas"]
        if not blas:
            pytest.skip("no BLAS pool that threadpoolctl can see")
        assert all(p["num_threads"] == 1 for p in blas)
    finally:
        ms.set_num_threads(n)


class _P(Parameter):
    size = field(int).set_default(1).describe("a size")


def test_parameter_init_with_int_is_type_error():
    with pytest.raises(TypeError, match=r"Parameter.init: expected a dict or \(key, value\) pairs, got int"):
        _P().init(42)
    with pytest.raises(TypeError, match="Parameter.init: expected"):
        _P().init([1, 2])


def test_defined_operator_returning_a_string_is_type_error():
    with pytest.raises(TypeError, match="define: operator says returned str"):
        @ms.op.define
        def says(a):
            return "hello"


@pytest.mark.parametrize("text", ["{not json", '{"size": ' + "9" * 5000 + "}",
                                  "[" * 10000 + "]" * 10000],
                         ids=["malformed", "5000-digit-number", "10000-deep"])
def test_load_json_bad_input_is_param_error(text):
    with pytest.raises(ParamError, match="_P.load_json: not valid parameter JSON"):
        _P.load_json(text)


def test_load_json_still_loads():
    p = _P.load_json(json.dumps({"size": "7"}))
    assert p.size == 7
