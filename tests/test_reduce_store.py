"""A reduction statement's short cuts: its result stored straight into the destination
(_core.store_array) and a tensor's merged rows read as a plain tensor (_core.reshaped_view),
each bit for bit the generic path (from_numpy + engine.assign; views.reshape) it replaces.
"""
import numpy as np
import pytest

import mshadow as ms
from mshadow import _core
from mshadow.errors import FreedTensorError, ShapeError


def _tensor(a, pad=False):
    t = ms.new_tensor(a.shape, pad=pad, dtype=a.dtype)
    t.numpy()[...] = a
    return t


def test_store_array_stores_only_what_saveto_would():
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    dst = ms.new_tensor((3, 4), pad=True, init=0)
    assert not dst.check_contiguous()
    assert _core.store_array(dst, a) is True
    np.testing.assert_array_equal(dst.numpy(), a)
    dst[:] = 0
    # anything else is left to the engine's assignment (nothing stored, False)
    ro_arr = np.zeros((3, 4), np.float32)
    ro_arr.flags.writeable = False
    freed = ms.new_tensor((3, 4))
    ms.free_space(freed)
    for t, v in [(dst, a.astype(np.float64)),              # another dtype
                 (dst, a[:, :3]),                          # another shape
                 (dst, np.asfortranarray(a)),              # not C-contiguous
                 (dst, a.tolist()),                        # not an array
                 (ms.from_numpy(ro_arr), a),               # read-only
                 (freed, a)]:                              # freed
        assert _core.store_array(t, v) is False
    assert not dst.numpy().any()
    # bytes it would read while writing them: the engine's alias rules decide
    d = ms.new_tensor((12,), init=1)
    view = d.numpy()
    assert _core.store_array(d, view[::-1].copy()) is True
    assert _core.store_array(d, view) is False
    assert _core.store_array(ms.new_tensor((0, 4)), np.zeros((0, 4), np.float32)) is True


def test_reshaped_view_shares_the_tensor_and_refuses_what_it_cannot_view():
    t = _tensor(np.arange(24, dtype=np.float32).reshape(2, 3, 4))
    v = _core.reshaped_view(t, (2, 12))
    assert v.shape == (2, 12) and type(v.shape) is ms.Shape and v.check_contiguous()
    assert v.dptr == t.dptr
    np.testing.assert_array_equal(v.numpy(), t.numpy().reshape(2, 12))
    v[:] = v * 2
    assert t.numpy()[1, 2, 3] == 46
    with pytest.raises(ShapeError):
        _core.reshaped_view(t, (5, 5))
    with pytest.raises(ShapeError):
        _core.reshaped_view(t, (-2, -12))
    with pytest.raises(ShapeError):
        _core.reshaped_view(ms.new_tensor((2, 3, 4), pad=True), (2, 12))
    ms.free_space(t)
    with pytest.raises(FreedTensorError):
        v.numpy()
