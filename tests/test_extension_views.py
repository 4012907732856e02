"""View extensions (broadcast, mirror, flip, swapaxis, transpose, crop, slice, reshape):
strided leaves read in place through row maps, fused with everything else; numpy is the oracle."""
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
    assert "L0:f32@view(zero step)" in text and "chain_f32" in text
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
    with pytest.raises(TypeError, match="flip: a dot.*kComplex"):
        ms.flip(ms.dot(ms.new_tensor((2, 2)), ms.new_tensor((2, 2))), 0)
    with pytest.raises(ms.ShapeError, match="broadcast_scalar, source need to be scalar expression"):
        ms.broadcast_scalar(src, (2, 2))
    with pytest.raises(ms.DTypeError, match="different dtypes"):
        ms.new_tensor((2, 3)) + ms.broadcast(_src(3, np.float64), (2, 3), 1)
    with pytest.raises(ms.ShapeError, match="Shapes of operands are not the same"):
        ms.new_tensor((2, 3)) + ms.broadcast(src, (3, 3), 1)
    with pytest.raises(TypeError, match="transpose: a kComplex expression"):
        ms.dot(ms.new_tensor((2, 2)), ms.new_tensor((2, 2))).T
    with pytest.raises(TypeError, match="mirror: a dot.*kComplex.*assign it to a tensor first"):
        ms.mirror(ms.dot(ms.new_tensor((2, 2)), ms.new_tensor((2, 2))))
    dst = ms.new_tensor((2, 3), init=7)
    c = ms.TensorContainer((3,), init=1)
    e = ms.broadcast(c, (2, 3), 1)
    c.resize((4,))                       # the source changed under the expression
    with pytest.raises(ms.ShapeError, match=r"changed from shape \(3,\)"):
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


VIEWS = [
    ("flip0", lambda t: ms.flip(t, 0), lambda a: a[::-1]),
    ("flip1", lambda t: ms.flip(t, 1), lambda a: a[:, ::-1]),
    ("swapaxis", lambda t: ms.swapaxis(t, 2, 0), lambda a: np.swapaxes(a, 2, 0)),
    ("swap_last", lambda t: ms.swapaxis(t, 2, 1), lambda a: np.swapaxes(a, 2, 1)),
    ("transpose", lambda t: ms.transpose_axes(t, (1, 2, 0)), lambda a: np.transpose(a, (1, 2, 0))),
    ("crop_center", lambda t: ms.crop(t, (2, 3)), lambda a: a[:, 0:2, 1:4]),   # floor((3-2)/2) = 0
    ("crop_at", lambda t: ms.crop(t, (2, 2), 0, 3), lambda a: a[:, 0:2, 3:5]),
    ("slice1", lambda t: ms.slice_axis(t, 1, 1, 3), lambda a: a[:, 1:3]),
    ("slice_last", lambda t: ms.slice_axis(t, 2, 2, 5), lambda a: a[:, :, 2:5]),
    ("reshape", lambda t: ms.reshape(t, (5, 3, 2)), lambda a: a.reshape(5, 3, 2)),
    ("with_axis", lambda t: ms.broadcast_with_axis(t, 0, 2), lambda a: np.repeat(a[:, None], 2, 1)),
    ("with_axis_lead", lambda t: ms.broadcast_with_axis(t, -1, 2), lambda a: np.stack([a, a])),
    ("with_axis_last", lambda t: ms.broadcast_with_axis(t, 2, 3), lambda a: np.repeat(a[..., None], 3, -1)),
]


@pytest.mark.parametrize("name,make,ref", VIEWS, ids=[v[0] for v in VIEWS])
@pytest.mark.parametrize("pad", [False, True])
@pytest.mark.parametrize("dtype", [np.float32, np.int64, np.float16])
def test_views_match_numpy(name, make, ref, pad, dtype):
    a = np.arange(30).reshape(2, 3, 5).astype(dtype)
    src = ms.new_tensor((2, 3, 5), dtype=dtype, pad=pad)
    src.numpy()[...] = a
    e = make(src)   # a pitched reshape re-cuts rows through the readers table
    want = ref(a)
    assert e.shape == want.shape and e.exp_type == ms.type.kChainer
    dst = ms.new_tensor(want.shape, dtype=dtype, pad=True)
    dst[:] = e * 2 + 1
    np.testing.assert_array_equal(dst.numpy(), (want * 2 + 1).astype(dtype))


def test_reshape_of_pitched_regroups_leading_axes_only():
    src = ms.new_tensor((2, 3, 4), pad=True)
    src.numpy()[...] = np.arange(24).reshape(2, 3, 4)
    dst = ms.new_tensor((6, 4))
    dst[:] = ms.reshape(src, (6, 4))
    np.testing.assert_array_equal(dst.numpy(), np.arange(24).reshape(6, 4))
    with pytest.raises(ms.ShapeError, match="reshape size must match"):
        ms.reshape(src, (5, 5))


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int8, np.float16])
def test_reshape_of_pitched_that_changes_the_last_axis(dtype):
    a = np.arange(2 * 3 * 7).reshape(2, 3, 7).astype(dtype)
    src = ms.new_tensor(a.shape, dtype=dtype, pad=True)
    src.numpy()[...] = a
    assert src.stride != 7          # pitched rows: no strides describe the new rows
    for shape in [(6, 7 // 7 * 7), (7, 6), (42,), (3, 14), (2, 21), (21, 2)]:
        dst = ms.new_tensor(shape, dtype=dtype, pad=True)
        dst[:] = ms.reshape(src, shape) * 2 + 1
        np.testing.assert_array_equal(dst.numpy(), (a.reshape(shape) * 2 + 1).astype(dtype))
    # an element-wise expression takes the reshape on each leaf (no temporary of its size)
    e = ms.reshape(ms.F(ms.op.relu, src - 3) * src, (7, 6))
    assert "reshape" in ms.plan_for(ms.new_tensor((7, 6), dtype=dtype), e).disassemble()
    dst = ms.new_tensor((7, 6), dtype=dtype)
    dst[:] = e
    want = (np.maximum(a.astype(np.float64) - 3, 0) * a).astype(dtype).reshape(7, 6)
    np.testing.assert_array_equal(dst.numpy(), want)
    # long rows cross many blocks and source rows
    big = np.arange(3 * 1031, dtype=np.float32).reshape(3, 1031)
    bsrc = ms.new_tensor(big.shape, pad=True)
    bsrc.numpy()[...] = big
    out = ms.new_tensor((1031, 3))
    out[:] = ms.reshape(bsrc, (1031, 3))
    np.testing.assert_array_equal(out.numpy(), big.reshape(1031, 3))


def test_broadcast_keepdim_and_to():
    a = np.arange(3, dtype=np.float64).reshape(3, 1)
    t = ms.from_numpy(a)
    dst = ms.new_tensor((3, 4), dtype=np.float64)
    dst[:] = ms.broadcast_keepdim(t, 1, 4)
    np.testing.assert_array_equal(dst.numpy(), np.broadcast_to(a, (3, 4)))
    dst[:] = ms.broadcast_to(t, (3, 4)) + 1
    np.testing.assert_array_equal(dst.numpy(), np.broadcast_to(a, (3, 4)) + 1)
    with pytest.raises(ms.ShapeError, match=r"broadcasting axis must have size 1, received shape=\(3,1\) target_shape=\(2,4\)"):
        ms.broadcast_to(t, (2, 4))
    with pytest.raises(ms.ShapeError, match="must have size 1"):
        ms.broadcast_keepdim(t, 0, 4)


def test_view_errors_and_freed_sources():
    t = ms.new_tensor((2, 3, 4))
    with pytest.raises(ms.ShapeError, match="Invalid axes input"):
        ms.transpose_axes(t, (0, 0, 1))
    with pytest.raises(ms.ShapeError, match="The slice went out of range"):
        ms.slice_axis(t, 1, 2, 5)
    with pytest.raises(ms.ShapeError, match="does not fit"):
        ms.crop(t, (4, 3))
    with pytest.raises(ms.ShapeError, match="axis 3 out of range"):
        ms.flip(t, 3)
    with pytest.raises(IndexError, match="fall outside the source"):
        ms._core.strided_view(t, (2, 3, 5), 0, (48, 16, 4))
    e = ms.flip(t, 0)
    dst = ms.new_tensor((2, 3, 4), init=3)
    ms.free_space(t)
    with pytest.raises(ms.FreedTensorError):
        dst[:] = e
    assert (dst.numpy() == 3).all()


def test_views_of_the_destination_go_through_a_temporary():
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    t = ms.from_numpy(a.copy())
    t[:] = ms.flip(t, 0) + ms.mirror(t)
    np.testing.assert_array_equal(t.numpy(), a[::-1] + a[:, ::-1])
    s = ms.from_numpy(np.arange(16, dtype=np.float64).reshape(4, 4))
    s[:] = ms.swapaxis(s, 0, 1)
    np.testing.assert_array_equal(s.numpy(), np.arange(16).reshape(4, 4).T)
