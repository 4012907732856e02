"""Every error path of the expression engine: exception type, message text, and the
destination left exactly as it was."""
import numpy as np
import pytest

import mshadow as ms


def T(a):
    return ms.from_numpy(np.ascontiguousarray(a))


@pytest.fixture
def dst():
    d = ms.new_tensor((2, 3), 0, dtype=np.float32)
    d.numpy()[...] = np.arange(6).reshape(2, 3)
    return d


def unchanged(d):
    assert d.numpy().tolist() == [[0, 1, 2], [3, 4, 5]]


def test_shape_mismatch_between_operands_names_both(dst):
    with pytest.raises(ms.ShapeError, match=r"Shape1=\(2,3\), Shape2=\(3,2\)"):
        dst[:] = ms.new_tensor((2, 3)) + ms.new_tensor((3, 2))
    unchanged(dst)


def test_shape_mismatch_with_target_names_both(dst):
    with pytest.raises(ms.ShapeError, match=r"eshape: \(3,2\) dshape:\(2,3\)"):
        dst[:] = ms.new_tensor((3, 2)) * 2.0
    with pytest.raises(ValueError, match="not consistent with target"):   # ShapeError is a ValueError
        dst += ms.new_tensor((4,))
    unchanged(dst)


def test_mixed_dtypes_without_tcast(dst):
    with pytest.raises(ms.DTypeError, match="different dtypes float32 and float64; use ms.tcast"):
        dst[:] = ms.new_tensor((2, 3)) + ms.new_tensor((2, 3), dtype=np.float64)
    with pytest.raises(TypeError, match="use ms.tcast"):
        dst[:] = ms.new_tensor((2, 3), dtype=np.int32) * 2
    unchanged(dst)


def test_scalar_not_representable_in_int():
    d = ms.new_tensor((3,), 1, dtype=np.int32)
    with pytest.raises(ms.DTypeError, match=r"scalar 2\.5 is not representable in int32"):
        d[:] = ms.new_tensor((3,), dtype=np.int32) * 2.5
    with pytest.raises(ms.DTypeError, match=r"2\.5 is not representable in int32"):
        d[:] = 2.5
    assert d.numpy().tolist() == [1, 1, 1]


def test_scalar_out_of_range():
    d = ms.new_tensor((3,), 1, dtype=np.uint8)
    with pytest.raises(OverflowError, match=r"scalar 300 out of bounds for uint8 \[0, 255\]"):
        d[:] = ms.new_tensor((3,), dtype=np.uint8) + 300
    with pytest.raises(OverflowError, match=r"-1 out of bounds for uint8"):
        d += -1
    assert d.numpy().tolist() == [1, 1, 1]


@pytest.mark.parametrize("op,args", [(ms.op.exp, 2), (ms.op.plus, 1), (ms.op.clip, 2),
                                     ("maximum", 3)])
def test_F_wrong_arity(op, args):
    name = getattr(op, "name", op)
    with pytest.raises(TypeError, match=f"operator {name} takes .* argument\\(s\\), got {args}"):
        ms.F(op, *[ms.new_tensor((2,))] * args)


def test_F_unknown_operator():
    with pytest.raises(ValueError, match="F: unknown operator 'frobnicate'"):
        ms.F("frobnicate", ms.new_tensor((2,)))


def test_transpose_of_3d():
    with pytest.raises(ms.ShapeError, match=r"transpose needs a 2-D expression .*got shape \(2,3,4\)"):
        ms.new_tensor((2, 3, 4)).T
    with pytest.raises(ms.ShapeError, match="transpose needs a 2-D expression"):
        (ms.new_tensor((2, 3, 4)) + 1).T


def test_transpose_of_1d_tensor_is_a_column_but_1d_expressions_refuse():
    u = ms.from_numpy(np.array([1.0, 2.0, 3.0], np.float32))
    assert u.T.shape == (3, 1)           # mshadow's Tensor<1>.T(): the row as a column
    col = ms.new_tensor((3, 1))
    col[:] = u.T * 2
    assert col.numpy().ravel().tolist() == [2, 4, 6]
    with pytest.raises(ms.ShapeError, match=r"got shape \(3,\)"):
        (u + 1).T


@pytest.mark.parametrize("value", ["abc", [1, 2, 3], None, object(), 1 + 2j])
def test_assigning_an_unsupported_object(dst, value):
    with pytest.raises(TypeError, match="cannot assign"):
        dst[:] = value
    unchanged(dst)


def test_unsupported_object_inside_an_expression(dst):
    with pytest.raises(TypeError, match="cannot use str 'x' in an expression"):
        ms.new_tensor((2, 3)) + "x"
    unchanged(dst)


def test_bool_of_an_expression():
    e = ms.new_tensor((2,)) + 1
    with pytest.raises(TypeError, match="truth value of a lazy expression is undefined"):
        bool(e)
    with pytest.raises(TypeError, match="truth value"):
        if e > 0:
            pass


@pytest.mark.parametrize("n", [0, -1])
def test_set_num_threads_invalid(n):
    with pytest.raises(ValueError, match=f"expected 1 <= n <= 1024, got {n}"):
        ms.set_num_threads(n)


def test_set_simd_level_bogus():
    with pytest.raises(ValueError, match="unknown SIMD level 'bogus'"):
        ms.set_simd_level("bogus")


def test_freed_operand_leaves_destination_unchanged(dst):
    t = ms.new_tensor((2, 3), 1.0)
    ms.free_space(t)
    with pytest.raises(ms.FreedTensorError, match="released by free_space"):
        dst[:] = ms.new_tensor((2, 3), 9.0) + t * 2
    with pytest.raises(ms.FreedTensorError):
        dst += ms.F(ms.op.exp, t)
    unchanged(dst)


def test_readonly_destination(dst):
    a = np.zeros((2, 3), np.float32)
    a.flags.writeable = False
    with pytest.raises(ValueError, match="read-only"):
        ms.from_numpy(a)[:] = dst * 2
    assert not a.any()


def test_scalar_dtype_mismatch(dst):
    with pytest.raises(ms.DTypeError, match="scalar of dtype float64 meets an expression of dtype float32"):
        dst[:] = ms.new_tensor((2, 3)) + ms.scalar(1.0, np.float64)
    with pytest.raises(ms.DTypeError, match="Assignment: scalar of dtype int32"):
        dst[:] = ms.scalar(1, np.int32)
    unchanged(dst)


def test_gpu_tensor_in_a_cpu_expression_is_a_device_error():
    g = ms.Tensor((3,), device=ms.gpu)      # a handle only: never allocated
    c = ms.new_tensor((3,), init=1)
    with pytest.raises(ms.DeviceError, match=r"plus: operands on different devices \(cpu and gpu\)"):
        c + g
    with pytest.raises(ms.DeviceError, match=r"mul: operands on different devices \(gpu and cpu\)"):
        ms.F(ms.op.mul, g, c)
    with pytest.raises(ms.DeviceError, match=r"Assignment: tensors of different devices \(the destination on cpu, operands on gpu\)"):
        c[:] = g
    assert (c.numpy() == 1).all()
