"""broadcast, broadcast_scalar, repmat and mirror: leaves read through row maps, fused."""
import numpy as np
import pytest

import mshadow as ms

DTYPES = [np.float32, np.float64, np.float16, np.int32, np.uint8, np.int64]


def _src(n, dtype, start=1):
    return ms.from_numpy(np.arange(start, start + n).astype(dtype))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(7,), (3, 5), (2, 3, 4), (2, 3, 2, 5)])
def test_broadcast_every_axis_matches_numpy(dtype, shape):
    x = np.arange(int(np.prod(shape))).reshape(shape).astype(dtype)
    for axis in range(len(shape)):
        src = _src(shape[axis], dtype)
        dst = ms.new_tensor(shape, dtype=dtype, pad=True)
        dst[:] = ms.from_numpy(x) + ms.broadcast(src, shape, axis)
        view = [None] * len(shape)
        view[axis] = slice(None)
        want = (x + src.numpy()[tuple(view)]).astype(dtype)
        np.testing.assert_array_equal(dst.numpy(), want)


def test_conv_bias_over_channels_is_one_fused_pass():
    # the NCHW bias add of mshadow's convnet guide: out += broadcast<1>(bias, out.shape)
    out = ms.from_numpy(np.ones((4, 8, 6, 6), np.float32))
    bias = _src(8, np.float32)
    e = ms.broadcast(bias, out.shape, 1)
    text = ms.plan_for(out, e * 2, "plusto").disassemble()
    assert "L0:f32@bcast_y(1)" in text and "chain_f32" in text
    out += e * 2
    want = 1 + 2 * np.arange(1, 9, dtype=np.float32)[None, :, None, None]
    np.testing.assert_array_equal(out.numpy(), np.broadcast_to(want, out.shape))


@pytest.mark.parametrize("threads", [1, 2])
def test_large_broadcast_with_threads(threads):
    ms.set_num_threads(threads)
    try:
        shape = (64, 33, 70)
        x = np.random.default_rng(0).random(shape)
        b = np.random.default_rng(1).random(33)
        dst = ms.new_tensor(shape, dtype=np.float64)
        dst[:] = ms.from_numpy(x) * ms.broadcast(ms.from_numpy(b), shape, 1) - 0.5
        np.testing.assert_array_equal(dst.numpy(), x * b[None, :, None] - 0.5)
    finally:
        ms.set_num_threads(2)


def test_repmat_and_broadcast_scalar():
    v = _src(4, np.float32)
    dst = ms.new_tensor((3, 4))
    dst[:] = ms.repmat(v, 3)
    np.testing.assert_array_equal(dst.numpy(), np.tile(np.arange(1, 5, dtype=np.float32), (3, 1)))
    dst[:] = ms.broadcast_scalar(ms.from_numpy(np.array([2.5], np.float32)), (3, 4)) * 2
    assert (dst.numpy() == 5).all()


@pytest.mark.parametrize("dtype", DTYPES)
def test_mirror_reverses_the_last_axis(dtype):
    x = np.arange(24).reshape(2, 3, 4).astype(dtype)
    dst = ms.new_tensor((2, 3, 4), dtype=dtype, pad=True)
    dst[:] = ms.mirror(ms.from_numpy(x))
    np.testing.assert_array_equal(dst.numpy(), x[..., ::-1])


def test_mirror_in_place_goes_through_a_temporary():
    x = np.arange(12, dtype=np.float64).reshape(3, 4)
    t = ms.from_numpy(x.copy())
    t[:] = ms.mirror(t) + t
    np.testing.assert_array_equal(t.numpy(), x[:, ::-1] + x)


def test_errors():
    src = _src(3, np.float32)
    with pytest.raises(ms.ShapeError, match=r"broadcast, shape mismatch: source \(3,\) cannot fill axis 0 of \(4,3\)"):
        ms.broadcast(src, (4, 3), 0)
    with pytest.raises(ms.ShapeError, match="dimcast 2 out of range"):
        ms.broadcast(src, (4, 3), 2)
    with pytest.raises(ms.ShapeError, match="must be 1-D"):
        ms.broadcast(ms.new_tensor((3, 1)), (3, 3), 0)
    with pytest.raises(TypeError, match="must be a 1-D tensor"):
        ms.broadcast(src + 1, (3,), 0)
    with pytest.raises(ms.ShapeError, match="broadcast_scalar, source need to be scalar expression"):
        ms.broadcast_scalar(src, (2, 2))
    with pytest.raises(ms.DTypeError, match="different dtypes"):
        ms.new_tensor((2, 3)) + ms.broadcast(_src(3, np.float64), (2, 3), 1)
    with pytest.raises(ms.ShapeError, match="Shapes of operands are not the same"):
        ms.new_tensor((2, 3)) + ms.broadcast(src, (3, 3), 1)
    with pytest.raises(TypeError, match="transpose of an expression holding"):
        ms.repmat(src, 2).T
    with pytest.raises(TypeError, match="mirror: the source must be a tensor"):
        ms.mirror(src * 2)
    dst = ms.new_tensor((2, 3), init=7)
    c = ms.TensorContainer((3,), init=1)
    e = ms.broadcast(c, (2, 3), 1)
    c.resize((4,))                       # the source changed under the expression
    with pytest.raises(ms.ShapeError, match="broadcast, shape mismatch"):
        dst[:] = e
    assert (dst.numpy() == 7).all()


def test_untraceable_operator_with_extension_leaves(recwarn):
    @ms.op.define
    def flip_small(x):
        if x > 3:
            return x
        return -x

    x = np.arange(24, dtype=np.float64).reshape(2, 3, 4)
    b = np.array([10.0, 20.0, 30.0])
    dst = ms.new_tensor((2, 3, 4), dtype=np.float64)
    dst[:] = (ms.F(flip_small, ms.from_numpy(x)) + ms.broadcast(ms.from_numpy(b), (2, 3, 4), 1)
              + ms.mirror(ms.from_numpy(x)))
    want = np.where(x > 3, x, -x) + b[None, :, None] + x[..., ::-1]
    np.testing.assert_array_equal(dst.numpy(), want)
    assert any("could not be traced" in str(w.message) for w in recwarn)
