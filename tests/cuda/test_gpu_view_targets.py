"""Assignment targets (slice_axis, slice_ex, flip, mirror, crop, concat, chained) of gpu
tensors: every saver, values of every kind (scalars, tensors, expressions, gathers, the
target's own elements in place and elsewhere, products and reductions), the dtypes, pitched
and offset bases; the oracle is the same statement on cpu tensors (the CPU's bits: the value
is the CPU's per-operator result, stored through the view with the saver)."""
import numpy as np
import pytest

import mshadow as ms

from gpu_testing import gpu_device, gpu_from, host, store  # noqa: F401  (gpu_device: autouse)

SHAPE = (3, 4, 6)
SAVERS = ("=", "+=", "-=", "*=", "/=")
TARGETS = {
    "slice_axis0": lambda t: ms.slice_axis(t, 0, 1, 3),
    "slice_axis1": lambda t: ms.slice_axis(t, 1, 1, 4),
    "slice_axis-1": lambda t: ms.slice_axis(t, -1, 2, 5),
    "slice_ex": lambda t: ms.slice_ex(t, (1, 0, 2), (3, 2, 5)),
    "flip0": lambda t: ms.flip(t, 0),
    "mirror": lambda t: ms.mirror(t),
    "crop_at": lambda t: ms.crop(t, (3, 2), 1, 4),
    "slice_of_mirror": lambda t: ms.slice_axis(ms.mirror(t), 1, 0, 2),
    "flip_of_flip": lambda t: ms.flip(ms.flip(t, 2), 0),
}


def _pair(x, layout):
    """(cpu tensor, gpu tensor) holding ``x``: contiguous, pitched, or element 1 of a padded
    tensor one rank up (an offset and a pitch)."""
    if layout == "subtensor":
        c = ms.new_tensor((2,) + x.shape, dtype=x.dtype, pad=True)[1]
        g = ms.new_tensor((2,) + x.shape, dtype=x.dtype, device=ms.gpu, pad=True)[1]
        c[:] = ms.from_numpy(x.copy())
        ms.copy(g, c)
        return c, g
    c = ms.new_tensor(x.shape, dtype=x.dtype, pad=layout == "pitched")
    c[:] = ms.from_numpy(x.copy())
    return c, gpu_from(x, pad=layout == "pitched")


def _values(kind, target, t, vshape, dtype, on):
    """The value of ``kind`` for the target ``target(t)`` of a tensor on device ``on``."""
    v = (np.arange(int(np.prod(vshape))) % 5 + 1).astype(dtype).reshape(vshape)
    src = gpu_from(v) if on == "gpu" else ms.from_numpy(v.copy())
    return {"scalar": lambda: 3,
            "tensor": lambda: src,
            "expression": lambda: src * 2 + 1,
            "gather": lambda: ms.flip(src, len(vshape) - 1) + 1,
            "itself": lambda: target(t) * 2 + 1,
            "itself flipped": lambda: ms.flip(target(t), 0) + 1}[kind]()


@pytest.mark.parametrize("layout", ["contiguous", "pitched", "subtensor"])
@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.int32, np.uint8],
                         ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("name", sorted(TARGETS))
def test_every_target_saver_and_value_as_on_the_cpu(name, dtype, layout):
    target = TARGETS[name]
    x = (np.arange(int(np.prod(SHAPE))) % 13 + 1).astype(dtype).reshape(SHAPE)
    for saver in SAVERS:
        for kind in ("scalar", "tensor", "expression", "gather", "itself", "itself flipped"):
            c, g = _pair(x, layout)
            vshape = tuple(target(c).shape)
            store(target(c), _values(kind, target, c, vshape, dtype, "cpu"), saver)
            store(target(g), _values(kind, target, g, vshape, dtype, "gpu"), saver)
            assert host(g).tobytes() == host(c).tobytes(), f"{name} {saver} {kind}"


@pytest.mark.parametrize("saver", SAVERS)
@pytest.mark.parametrize("dim", [0, 1, 2])
def test_concat_target(dim, saver):
    sa, sb = [2, 3, 4], [2, 3, 4]
    sb[dim] = 3 if dim else 1
    xa = (np.arange(24) % 7 + 1).astype(np.float32).reshape(sa)
    xb = (np.arange(int(np.prod(sb))) % 5 + 2).astype(np.float32).reshape(sb)
    (ca, ga), (cb, gb) = _pair(xa, "pitched"), _pair(xb, "contiguous")
    full = np.concatenate([xa, xb], dim).shape
    v = (np.arange(int(np.prod(full))) % 4 + 1).astype(np.float32).reshape(full)
    store(ms.concat(ca, cb, dim), ms.from_numpy(v) * 3 - ms.concat(ca, cb, dim), saver)
    store(ms.concat(ga, gb, dim), gpu_from(v) * 3 - ms.concat(ga, gb, dim), saver)
    for c, g in ((ca, ga), (cb, gb)):
        assert g.to_numpy().tobytes() == c.numpy().tobytes()


def test_concat_of_pitched_slices_read_by_the_value():
    """concat of two pitched row slices of one gpu tensor, the value an expression of that
    tensor: whether the value reads a part is asked of device memory (it raised DeviceError:
    the overlap test asked numpy for host views of the pitched gpu tensors)."""
    x = (np.arange(1200) % 7 + 1).astype(np.float32).reshape(4, 3, 100)
    c, g = _pair(x, "pitched")
    assert g.stride != 100                              # pitched rows on the device too
    for t in (c, g):
        ms.concat(t.slice(0, 2), t.slice(2, 4), 0)[:] = ms.flip(t, 0) * 2
    assert g.to_numpy().tobytes() == c.numpy().tobytes()
    np.testing.assert_array_equal(c.numpy(), x[::-1] * 2)


def test_products_and_reductions_into_views():
    """kComplex values (dot, sum_rows) evaluated by their own engines, then stored through
    the view: cuBLAS's products equal the CPU's to rounding."""
    rng = np.random.default_rng(5)
    a, b = rng.random((3, 4)), rng.random((4, 5))
    x = rng.random((5, 5))
    c, g = _pair(x, "pitched")
    for t, on in ((c, ms.from_numpy), (g, gpu_from)):
        ms.slice_axis(t, 0, 1, 4)[:] = ms.dot(on(a), on(b))
        ms.mirror(ms.slice_axis(t, 0, 1, 4))[:] += ms.dot(on(a), on(b))
    np.testing.assert_allclose(g.to_numpy(), c.numpy(), rtol=1e-13)
    want = x.copy()
    want[1:4] = a @ b
    want[1:4, ::-1] += a @ b
    np.testing.assert_allclose(g.to_numpy(), want, rtol=1e-13)
    v = rng.random(6)
    cv, gv = _pair(v, "contiguous")
    ms.flip(ms.slice_axis(cv, 0, 1, 6), 0)[:] -= ms.sum_rows(ms.from_numpy(b))
    ms.flip(ms.slice_axis(gv, 0, 1, 6), 0)[:] -= ms.sum_rows(gpu_from(b))
    np.testing.assert_allclose(gv.to_numpy(), cv.numpy(), rtol=1e-13)


def test_errors_store_nothing_and_empty_targets():
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    g = gpu_from(x)
    with pytest.raises(ms.ShapeError):
        ms.slice_axis(g, 1, 1, 3)[:] = gpu_from(np.ones((3, 3), np.float32))
    with pytest.raises(ms.DeviceError, match="cpu"):
        ms.slice_axis(g, 1, 1, 3)[:] = ms.from_numpy(np.ones((3, 2), np.float32))
    with pytest.raises(IndexError):
        ms.slice_axis(g, 1, 0, 2)[:] = ms.take(gpu_from(np.array([0, 9], np.float32)),
                                              gpu_from(np.ones((2, 3), np.float32)))
    np.testing.assert_array_equal(g.to_numpy(), x)
    ms.slice_axis(g, 1, 2, 2)[:] = 5                  # no elements: nothing to store
    np.testing.assert_array_equal(g.to_numpy(), x)
    ms.free_space(g)
    with pytest.raises(ms.FreedTensorError):
        ms.slice_axis(g, 1, 0, 2)[:] = 1
