"""A reduction statement's short cuts: its result stored straight into the destination
(_core.store_array) and a tensor's merged rows read as a plain tensor (_core.reshaped_view),
each bit for bit the generic path (from_numpy + engine.assign; views.reshape) it replaces.
"""
import numpy as np
import pytest

import mshadow as ms
from mshadow import _core
from mshadow.errors import DTypeError, FreedTensorError, ShapeError
from mshadow.extension import reduce as reduce_mod
from mshadow.testing import SAVERS

pytestmark = pytest.mark.usefixtures("restore_engine_state")

DTYPES = [np.float16, np.float32, np.float64, np.int32]


def _values(shape, dtype, rng):
    """Values that exercise each dtype: large int32 (sums wrap), floats with a NaN, an inf,
    signed zeros and float16 sums past 65504 in some columns."""
    if np.dtype(dtype).kind == "i":
        return rng.integers(-2**31, 2**31 - 1, shape, dtype=np.int64).astype(dtype)
    a = rng.standard_normal(shape) * (3e3 if dtype == np.float16 else 1e3)
    flat = a.reshape(-1)
    flat[::97] = -0.0
    flat[5 % flat.size], flat[11 % flat.size] = np.nan, np.inf
    return a.astype(dtype)


def _tensor(a, pad=False):
    t = ms.new_tensor(a.shape, pad=pad, dtype=a.dtype)
    t.numpy()[...] = a
    return t


# (name, source shape, result shape, statement(dst, x)); the first three go through the
# merged rows when the last axis is short
CASES = {
    "sumall_tensor": ((1, 64, 2, 128), (64,), lambda x: ms.sumall_except_dim(x, 1)),
    "sumall_tensor_merged": ((2, 16, 8, 32), (16,), lambda x: ms.sumall_except_dim(x, 1)),
    "sumall_expr_merged": ((2, 16, 8, 32), (16,), lambda x: ms.sumall_except_dim(x * 2 - x, 1)),
    "sumall_cast_merged": ((3, 5, 4, 6), (5,),
                           lambda x: ms.sumall_except_dim(ms.tcast(x.dtype, x * 1), 1)),
    "reduce_except_max_merged": ((2, 16, 8, 32), (16,),
                                 lambda x: ms.reduce_except_dim(x * 2, 1, ms.red.maximum)),
    "sum_rows": ((64, 256), (256,), lambda x: ms.sum_rows(x)),
    "keepdim_tensor": ((8, 16, 32), (8, 1, 32), lambda x: ms.reduce_keepdim(x, 1, ms.red.sum)),
    "keepdim_expr": ((8, 4, 256), (8, 1, 256), lambda x: ms.reduce_keepdim(x * 2, 1, ms.red.sum)),
    "with_axis_max": ((8, 16, 32), (8, 16), lambda x: ms.reduce_with_axis(x, 2, ms.red.maximum)),
    "with_axis_expr_last": ((8, 4, 256), (8, 4), lambda x: ms.reduce_with_axis(x + x, 2, ms.red.sum)),
    "with_axis_chunked": ((8, 16, 32), (8, 16), lambda x: ms.reduce_with_axis(x * 2, 2, ms.red.sum)),
}


def _generic(monkeypatch):
    """The generic paths: every store through from_numpy + engine.assign, every merge by
    views.reshape."""
    monkeypatch.setattr(_core, "store_array", lambda dst, a: False)
    monkeypatch.setattr(reduce_mod, "_merged_map", lambda src, shape, merged: None)


def _counting(monkeypatch):
    """store_array and _merged_map as they are, counting the times each took its short cut."""
    counts = {"store": 0, "merge": 0}
    store, merge = _core.store_array, reduce_mod._merged_map

    def counted_store(dst, a):
        done = store(dst, a)
        counts["store"] += bool(done)
        return done

    def counted_merge(src, shape, merged):
        m = merge(src, shape, merged)
        counts["merge"] += m is not None
        return m

    monkeypatch.setattr(_core, "store_array", counted_store)
    monkeypatch.setattr(reduce_mod, "_merged_map", counted_merge)
    return counts


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("saver", SAVERS)
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("case", sorted(CASES))
def test_short_cuts_give_the_generic_paths_bits(case, dtype, saver, threads, monkeypatch):
    if dtype == np.int32 and "max" not in case and saver == "divto":
        pytest.skip("an integer divto by a wrapped sum may divide by zero")
    shape, out_shape, build = CASES[case]
    ms.set_num_threads(threads)
    rng = np.random.default_rng(hash((case, np.dtype(dtype).name)) % 2**32)
    a = _values(shape, dtype, rng)
    d0 = _values(out_shape, dtype, rng)
    if np.dtype(dtype).kind == "i":
        d0 |= 1                          # an odd start: divto and multo stay defined
    pad = len(out_shape) > 1             # a pitched destination where there are rows
    results = []
    for route in ("fast", "generic"):
        with monkeypatch.context() as m:
            counts = _counting(m) if route == "fast" else _generic(m)
            x, dst = _tensor(a), _tensor(d0, pad=pad)
            with np.errstate(all="ignore"):
                ms.engine.assign(dst, build(x), saver)
            results.append(dst.numpy().tobytes())
            if route == "fast":
                # the short cuts were taken: a test of them that could not fail is none
                assert counts["store"] == (saver == "saveto"), counts
                assert (counts["merge"] > 0) == ("merged" in case), counts
    assert results[0] == results[1]


def test_a_destination_that_is_its_source_reads_it_whole_first(monkeypatch):
    rng = np.random.default_rng(3)
    a = _values((1, 300), np.float32, rng)
    b = _values((5, 300), np.float32, rng)
    got = []
    for route in ("fast", "generic"):
        with monkeypatch.context() as m:
            counts = _counting(m) if route == "fast" else _generic(m)
            x, y = _tensor(a), _tensor(b)
            # (engine.assign: reduce.py's route; test_reduce_statement.py has the compiled one's)
            ms.engine.assign(x, ms.reduce_keepdim(x, 0, ms.red.sum), "saveto")   # its own source
            ms.engine.assign(y[2], ms.sum_rows(y), "saveto")                    # a row of it
            got.append((x.numpy().tobytes(), y.numpy().tobytes()))
            if route == "fast":
                assert counts["store"] == 2
    assert got[0] == got[1]
    np.testing.assert_array_equal(np.frombuffer(got[1][0], np.float32), a.reshape(-1))
    want = b.astype(np.float64).sum(0)
    np.testing.assert_allclose(np.frombuffer(got[0][1], np.float32).reshape(5, 300)[2],
                               want, rtol=1e-5)


def test_errors_come_before_anything_is_written():
    x = _tensor(np.ones((1, 64, 2, 128), np.float32))
    e = ms.sumall_except_dim(x, 1)
    ro_arr = np.zeros(64, np.float32)
    ro_arr.flags.writeable = False
    ro = ms.from_numpy(ro_arr)
    with pytest.raises(ValueError, match="read-only"):
        ro[:] = e
    assert not ro_arr.any()
    with pytest.raises(DTypeError):
        ms.new_tensor((64,), dtype=np.float64)[:] = e
    short = ms.new_tensor((63,), init=7)
    with pytest.raises(ShapeError):
        short[:] = e
    assert (short.numpy() == 7).all()
    freed = ms.new_tensor((64,))
    ms.free_space(freed)
    with pytest.raises(FreedTensorError):
        freed[:] = e
    y = ms.new_tensor((1, 64, 8, 32))
    merged = [ms.sumall_except_dim(y, 1), ms.sumall_except_dim(y * 2, 1)]
    ms.free_space(x)
    ms.free_space(y)
    out = ms.new_tensor((64,), init=7)
    for exp in [e] + merged:                                 # a freed source, merged or not
        with pytest.raises(FreedTensorError):
            out[:] = exp
    assert (out.numpy() == 7).all()


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
