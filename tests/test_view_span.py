"""strided_view's bounds check: every element a view can address lies inside its tensor's
bytes, whatever the size of the strides (summed in C below 2**27 bytes a step, in Python
integers above: a span that overflows index_t never wraps into range)."""
import numpy as np
import pytest

import mshadow as ms
from mshadow import _core
from mshadow.shape import Shape


def _span_ok(t, shape, offset, strides):
    """numpy's oracle: the byte range the view reads, against the tensor's bytes."""
    if 0 in shape:
        return True
    lo = offset + sum((n - 1) * s for n, s in zip(shape, strides) if s < 0)
    hi = offset + sum((n - 1) * s for n, s in zip(shape, strides) if s >= 0)
    span = ((t.shape[0] - 1) * t.stride + t.shape[-1]) * t.itemsize
    return lo >= 0 and hi + t.itemsize <= span


@pytest.mark.parametrize("shape, offset, strides", [
    ((2, 3), 0, (12, 4)), ((2, 3), 4, (12, 4)), ((3, 4), 0, (16, 4)), ((4, 3), 0, (4, 16)),
    ((3,), 44, (-4,)), ((3,), 4, (-4,)), ((2, 2), 60, (-16, -4)), ((5, 0), 0, (1 << 40, 4)),
    ((2, 2), 0, (1 << 27, 4)), ((2, 2), 0, (1 << 62, 4)), ((3, 2), 0, (1 << 62, 4)),
    ((2, 2), 0, (-(1 << 62), 4)), ((2, 2), 8, (0, 0)), ((1, 1), 63 - 4 + 1, (0, 0)),
    ((1, 1), 60, (1 << 62, 1 << 62)),
])
def test_span_checked_at_every_stride_size(shape, offset, strides):
    t = ms.new_tensor((4, 4), dtype=np.float32, init=1)
    try:
        ok = _span_ok(t, shape, offset, strides)
    except OverflowError:
        ok = False
    if ok:
        v = _core.strided_view(t, shape, offset, strides)
        assert v.shape == Shape(shape) and v.strides == strides
    else:
        with pytest.raises((IndexError, OverflowError)):
            _core.strided_view(t, shape, offset, strides)


def test_a_span_that_overflows_index_t_is_refused_not_wrapped():
    # (2**62 * 3 wraps to 2**62 * 3 - 2**64 < 0 in int64: a C sum would see a small span)
    t = ms.new_tensor((4, 4), dtype=np.float32, init=1)
    with pytest.raises((IndexError, OverflowError)):
        _core.strided_view(t, (4, 1), 0, (1 << 62, 4))
    with pytest.raises((IndexError, OverflowError)):
        _core.strided_view(t, (5, 1), 0, ((1 << 62) + (1 << 61), 4))


def test_shape_takes_plain_ints_and_checks_everything_else():
    assert Shape(2, 3) == (2, 3) and type(Shape((2, 3))) is Shape
    assert Shape(np.int64(3), True) == (3, 1)
    assert all(type(d) is int for d in Shape(np.int64(3), True))
    with pytest.raises(ValueError, match="negative"):
        Shape(2, -1)
    with pytest.raises(ms.IntegerArgumentError, match="write 2"):
        Shape(2.0)
