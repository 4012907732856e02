"""Errors that teach: each common mistake raises a typed error (mshadow/errors.py) whose
message says what was wrong and what to write instead. Where the message spells out code,
the test runs that code and checks its result against numpy."""
import re
import warnings

import numpy as np
import pytest

import mshadow as ms
from mshadow.param import Parameter, ParamError, field, register


def _ab():
    a = ms.from_numpy(np.arange(12, dtype=np.float32).reshape(3, 4))
    b = ms.from_numpy(np.full((3, 4), 0.5, np.float32))
    return a, b


def _run_fix(message, env):
    """Run the fix a forgotten-[:] message spells out (out = ms.new_tensor(...); out[:] = y)."""
    fix = re.search(r"(out = ms\.new_tensor\(.*?\); out\[:\] = y)", message)
    assert fix, message
    exec(fix.group(1), env)
    return env["out"]


# ---- forgetting [:] ---------------------------------------------------------------------

@pytest.mark.parametrize("use, error", [
    (lambda y: y.numpy(), ms.MissingMethodError),
    (lambda y: y[0], ms.LazyExpressionError),
    (lambda y: float(y), ms.LazyExpressionError),
    (lambda y: np.asarray(y), ms.LazyExpressionError),
    (lambda y: y.tolist(), ms.MissingMethodError),
], ids=["y.numpy()", "y[0]", "float(y)", "np.asarray(y)", "y.tolist()"])
def test_forgotten_brackets_say_how_to_assign(use, error):
    a, b = _ab()
    y = a + b                                   # meant: y[:] = a + b
    with pytest.raises(error) as e:
        use(y)
    msg = str(e.value)
    assert "lazy expression" in msg and "[:]" in msg and "y[:] = a + b" in msg
    assert "plus(Tensor<f32>, Tensor<f32>)" in msg and "(3, 4)" in msg
    out = _run_fix(msg, {"ms": ms, "y": y})    # the fix, as written, gives a + b
    np.testing.assert_array_equal(out.numpy(), a.numpy() + b.numpy())


def test_forgotten_brackets_errors_keep_python_types():
    a, b = _ab()
    y = a + b
    assert not hasattr(y, "numpy")             # duck typing still sees no .numpy
    with pytest.raises(AttributeError):
        y.numpy()
    with pytest.raises(TypeError):
        y[0]
    with pytest.raises(TypeError):
        float(y)
    with pytest.raises(TypeError):
        int(y)
    with pytest.raises(ms.LazyExpressionError, match=r"\[:\]"):
        list(y)                                 # iteration goes through y[0]
    # a name that no tensor has stays Python's plain AttributeError
    with pytest.raises(AttributeError) as e:
        y.frobnicate
    assert type(e.value) is AttributeError and "'frobnicate'" in str(e.value)


# ---- numpy's method spellings -----------------------------------------------------------

def test_tensor_sum_names_ms_sum():
    a, _ = _ab()
    with pytest.raises(ms.MissingMethodError) as e:
        a.sum()
    msg = str(e.value)
    assert "ms.sum(t)" in msg and "np.sum(t)" in msg
    t = a
    assert eval("ms.sum(t)") == np.sum(a.numpy())
    assert not hasattr(a, "sum")


def test_tensor_reshape_names_ms_reshape():
    a, _ = _ab()
    with pytest.raises(ms.MissingMethodError) as e:
        a.reshape((4, 3))
    msg = str(e.value)
    assert "ms.reshape(t, shape)" in msg
    out = ms.new_tensor((4, 3))
    t, shape = a, (4, 3)
    exec("out[:] = ms.reshape(t, shape)", {"ms": ms, "out": out, "t": t, "shape": shape})
    np.testing.assert_array_equal(out.numpy(), a.numpy().reshape(4, 3))


def test_expression_sum_names_ms_sum():
    a, b = _ab()
    y = a * b
    with pytest.raises(ms.MissingMethodError, match=r"write ms\.sum\(y\)"):
        y.sum()
    assert ms.sum(y) == np.sum(a.numpy() * b.numpy())


def test_astype_names_tcast():
    a, _ = _ab()
    with pytest.raises(ms.MissingMethodError, match=r"ms\.tcast\(ms\.float64, t\)"):
        a.astype(np.float64)


# ---- F with something that is not an operator --------------------------------------------

def test_F_with_a_numpy_ufunc_names_the_ms_op():
    a, _ = _ab()
    x = a
    with pytest.raises(ms.OperatorError) as e:
        ms.F(np.exp, x)
    msg = str(e.value)
    assert isinstance(e.value, ValueError) and isinstance(e.value, TypeError)
    fix = re.search(r"write (ms\.F\(ms\.op\.exp, x\))", msg)
    assert fix, msg
    out = ms.new_tensor(x.shape)
    out[:] = eval(fix.group(1))
    np.testing.assert_allclose(out.numpy(), np.exp(a.numpy()), rtol=1e-6)
    with pytest.raises(ms.OperatorError, match=r"ms\.F\(ms\.op\.plus, x, y\)"):
        ms.F(np.add, x, x)


def test_F_with_a_ufunc_mshadow_lacks_says_how_to_define_it():
    x = ms.from_numpy(np.linspace(0, 3, 8, dtype=np.float32))
    with pytest.raises(ms.OperatorError, match=r"mshadow has no sin.*@ms\.op\.define.*"
                                               r"def sin\(a\): return np\.sin\(a\)"):
        ms.F(np.sin, x)

    # the definition the message gives works (np.sin cannot be traced: it runs on numpy)
    @ms.op.define
    def sin(a):
        return np.sin(a)
    out = ms.new_tensor(x.shape)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        out[:] = ms.F(sin, x)
    np.testing.assert_allclose(out.numpy(), np.sin(x.numpy()), rtol=1e-6)


def test_defined_bodies_still_trace_numpy_scalar_arithmetic():
    op = ms.op.define(lambda a: np.float32(2) * a + np.float64(1))
    assert op.tree is not None                   # traced, not the numpy fallback
    x = ms.from_numpy(np.arange(4, dtype=np.float32))
    out = ms.new_tensor((4,))
    out[:] = ms.F(op, x)
    np.testing.assert_array_equal(out.numpy(), 2 * np.arange(4) + 1)


def test_F_with_a_plain_function_names_define():
    def twice(a):
        return a * 2
    x, _ = _ab()
    with pytest.raises(ms.OperatorError, match=r"ms\.F\(ms\.op\.define\(twice\), x\)"):
        ms.F(twice, x)
    out = ms.new_tensor(x.shape)
    out[:] = ms.F(ms.op.define(twice), x)
    np.testing.assert_array_equal(out.numpy(), 2 * x.numpy())


# ---- concat -----------------------------------------------------------------------------

def test_concat_of_mismatched_dtypes_is_a_dtype_error_with_the_cast():
    a = ms.from_numpy(np.ones((2, 3), np.float32))
    b = ms.from_numpy(np.full((2, 3), 2.0))          # float64
    with pytest.raises(ms.DTypeError) as e:
        ms.concat(a, b, 0)
    msg = str(e.value)
    assert "float32 and float64" in msg
    fix = re.search(r"e\.g\. (ms\.concat\(.*\))$", msg).group(1)
    assert fix == "ms.concat(a, ms.tcast(ms.float32, b), 0)"
    out = ms.new_tensor((4, 3))
    out[:] = eval(fix)
    np.testing.assert_array_equal(out.numpy(), np.concatenate([a.numpy(), b.numpy()]))


def test_concat_of_mismatched_axes_names_the_axis_and_the_fix():
    a = ms.from_numpy(np.ones((3, 4), np.float32))
    b = ms.from_numpy(np.zeros((3, 5), np.float32))
    with pytest.raises(ms.ShapeError) as e:
        ms.concat(a, b, 0)
    msg = str(e.value)
    assert "axis 1 differs (4 vs 5)" in msg
    fix = re.search(r"write (ms\.concat\(a, b, 1\))", msg).group(1)
    out = ms.new_tensor((3, 9))
    out[:] = eval(fix)
    np.testing.assert_array_equal(out.numpy(), np.concatenate([a.numpy(), b.numpy()], 1))
    with pytest.raises(ms.ShapeError, match="a has 2 axes and b has 1"):
        ms.concat(a, ms.new_tensor((4,)), 0)
    with pytest.raises(ms.ShapeError, match=r"axis 2 is out of range .* write an axis in 0\.\.1"):
        ms.concat(a, a, 2)


# ---- integers: huge strides, infinite ranges, float bounds -----------------------------

@pytest.mark.parametrize("build, where", [
    (lambda x: ms.pool(x, 2, 2, 2**63, 2**63), "pool: sy"),
    (lambda x: ms.chpool(x, 1, ms.red.sum, stride=2**63), "chpool: stride"),
    (lambda x: ms.unpack_patch2col(x, 2, 2, 2**63), "unpack_patch2col: sy"),
    (lambda x: ms.pad(x, 2**63), "pad: py"),
])
def test_a_stride_of_2_to_the_63_is_a_shape_error_with_the_range(build, where):
    x = ms.new_tensor((1, 2, 8, 8), init=1.0)
    with pytest.raises(ms.ShapeError) as e:
        build(x)
    assert str(e.value).startswith(f"{where} = 9223372036854775808 is out of range")
    assert "to 2**63 - 1" in str(e.value)


def test_a_tblob_stride_of_2_to_the_63_is_a_shape_error():
    t = ms.new_tensor((3, 4))
    with pytest.raises(ms.ShapeError, match=r"TBlob: stride = 9223372036854775808 is out of "
                                            r"range: write an integer from 0 to \d+"):
        ms.TBlob(t.dptr, (3, 4), ms.cpu.kDevMask, ms.kFloat32, stride=2**63)


@pytest.mark.parametrize("args, what", [((0, float("inf")), "stop = inf"),
                                        ((float("-inf"), 0), "start = -inf"),
                                        ((0, 10, float("nan")), "step = nan")])
def test_an_infinite_range_says_the_length_must_be_finite(args, what):
    with pytest.raises(ms.ShapeError) as e:
        ms.range(*args)
    assert what in str(e.value) and "is not finite" in str(e.value)
    assert "write a finite" in str(e.value)


def test_an_integer_range_that_overflows_its_dtype_is_refused():
    with pytest.raises(ms.ShapeError, match=r"the last value 9223372036854775808 does not fit "
                                            r"int64"):
        ms.range(0, 2**64, 2**63, dtype=ms.int64)
    with pytest.raises(ms.ShapeError, match=r"does not fit uint8.*or dtype=ms\.int64"):
        ms.range(0, 300, dtype=ms.uint8)
    r = ms.new_tensor((256,), dtype=ms.uint8)    # the largest that fits, exact
    r[:] = ms.range(0, 256, dtype=ms.uint8)
    np.testing.assert_array_equal(r.numpy(), np.arange(256))


@pytest.mark.parametrize("build, fix", [
    (lambda t: ms.slice_axis(t, 0, 0.5, 2), "slice_axis: begin must be an integer, got 0.5 "
                                            "(float); write an int such as 0"),
    (lambda t: ms.slice_axis(t, 0, 0, 2.0), "slice_axis: end must be an integer, got 2.0 "
                                            "(float); write 2"),
    (lambda t: ms.slice_ex(t, (0, 0.5), (2, 3)), "slice_ex: begin[1] must be an integer"),
    (lambda t: ms.crop(t, (2, 2), 1.5, 0), "crop: start_h must be an integer, got 1.5"),
    (lambda t: t[0:2.0], "tensor slice t[0:2.0]: slice bounds must be integers, got 2.0 "
                         "(float); write t[0:2]"),
    (lambda t: t.slice(0, 1.5), "slice end must be an int, got 1.5 (float); write an int "
                                "such as 1 or 2"),
    (lambda t: ms.pool(ms.new_tensor((1, 1, 4, 4)), 2, 2, 1.5, 2),
     "pool: sy must be an integer, got 1.5 (float)"),
])
def test_float_bounds_are_integer_argument_errors(build, fix):
    t = ms.from_numpy(np.arange(12, dtype=np.float32).reshape(3, 4))
    with pytest.raises(ms.IntegerArgumentError) as e:
        build(t)
    assert isinstance(e.value, TypeError)
    assert str(e.value).startswith(fix), str(e.value)


def test_the_slice_a_float_bound_message_suggests_works():
    t = ms.from_numpy(np.arange(12, dtype=np.float32).reshape(3, 4))
    with pytest.raises(ms.IntegerArgumentError) as e:
        t[0:2.0]
    fix = re.search(r"write (t\[0:2\])$", str(e.value)).group(1)
    np.testing.assert_array_equal(eval(fix).numpy(), t.numpy()[0:2])


# ---- Parameter: a 5,001-digit integer --------------------------------------------------

@register
class _DigitsParam(Parameter):
    n = field(int).describe("A count.")


@pytest.mark.parametrize("digits", [11, 4301, 5001])
def test_a_huge_integer_string_is_a_param_error_with_the_range(digits):
    p = _DigitsParam()
    with pytest.raises(ParamError) as e:
        p.init({"n": "1" * digits})
    msg = str(e.value)
    assert e.value.key == "n" and e.value.value == "1" * digits
    assert msg.startswith("Invalid Parameter format for n expect int but value='")  # dmlc's
    assert msg.endswith(f"n: the number ({digits} digits) does not fit a 32-bit signed "
                        f"integer; write one from -2147483648 to 2147483647")
    assert len(msg) < 300                       # a 5,001-digit value is not echoed whole
    p.init({"n": "2147483647"})                 # the largest it names is accepted
    assert p.n == 2147483647


def test_leading_zeros_do_not_count_as_digits():
    p = _DigitsParam()
    p.init({"n": "0" * 5000 + "42"})
    assert p.n == 42


# ---- arg-max into a dtype too small for the index ---------------------------------------

@pytest.mark.parametrize("dtype, n, top", [(np.uint8, 300, 255), (np.int8, 200, 127),
                                           (np.float16, 3000, 2048)])
def test_an_argmax_whose_index_does_not_fit_the_dtype_is_an_error(dtype, n, top):
    data = np.random.default_rng(0).integers(0, 100, (2, n)).astype(dtype)
    data[0, n - 1] = 120                        # the maximum at the last index
    x = ms.from_numpy(data)
    with pytest.raises(ms.DTypeError) as e:
        ms.reduce_with_axis(x, 1, ms.red.maximum, mask=True)
    msg = str(e.value)
    assert f"goes up to {n - 1}" in msg and f"only up to {top}" in msg
    fix = re.search(r"reduce a wider copy of the source: (ms\.reduce_with_axis\(.*?\)), "
                    r"assigned to an int32 tensor", msg).group(1)
    out = ms.new_tensor((2,), dtype=ms.int32)
    out[:] = eval(fix)                          # the fix, as written
    np.testing.assert_array_equal(out.numpy(), np.argmax(data, axis=1))
    assert out.numpy()[0] == n - 1              # not wrapped (uint8 gave 299 -> 43)
    with pytest.raises(ms.DTypeError, match=r"ms\.reduce_keepdim\(ms\.tcast"):
        ms.reduce_keepdim(x, 1, ms.red.minimum, mask=True)


def test_an_argmax_whose_index_fits_is_exact():
    data = np.zeros((2, 256), np.uint8)
    data[:, 255] = 9
    out = ms.new_tensor((2,), dtype=ms.uint8)
    out[:] = ms.reduce_with_axis(ms.from_numpy(data), 1, ms.red.maximum, mask=True)
    np.testing.assert_array_equal(out.numpy(), [255, 255])
