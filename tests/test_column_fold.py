"""Reductions that keep the last axis (sum_rows, sumall_except_dim(e, last), reduce_keepdim /
reduce_with_axis over a leading axis) fold rows into accumulator rows: groups of
ROWS_PER_GROUP consecutive rows in order, in the compute type, then the groups by numpy
(docs/reduce_nn.md). Narrow rows are folded several a call (acc_<block>_<code>, plan_exec.h
ms_group_rows), wide ones a row a call, in the value's chain when the fold is an ordinary
saver's (sum: plusto). Every path must give the documented order's bits, for every reducer,
dtype, row width around the kernels' stretches, layout and thread count."""
import numpy as np
import pytest

import mshadow as ms
from mshadow import _core
from mshadow.extension.reduce import ROWS_PER_GROUP
from mshadow.readers import REDUCER_TABLE


def _fold(name, a, b):
    """The reducers' C folds (readers.REDUCER_TABLE), element-wise in numpy."""
    with np.errstate(all="ignore"):
        if name == "sum":
            return a + b
        if name == "product":
            return a * b
        if name == "maximum":    # (a == a && !(a >= b)) ? b : a: a NaN held sticks
            return np.where((a == a) & ~(a >= b), b, a)
        return np.where((a == a) & ~(a <= b), b, a)


def _init(name, dt):
    if name == "sum":
        return 0
    if name == "product":
        return 1
    if dt.kind == "f":
        return -np.inf if name == "maximum" else np.inf
    info = np.iinfo(dt)
    return info.min if name == "maximum" else info.max


def _documented(v, name, cdt):
    """Column fold of the 2-D ``v`` (already in the compute type) in the documented order."""
    ufunc = {"sum": np.add, "product": np.multiply, "maximum": np.maximum,
             "minimum": np.minimum}[name]
    lanes = name in ("sum", "product")
    wide = np.float64 if (lanes and cdt.kind == "f") else cdt
    groups = []
    for g in range(0, v.shape[0], ROWS_PER_GROUP):
        acc = np.full(v.shape[1], _init(name, cdt), cdt)
        for row in v[g:g + ROWS_PER_GROUP]:
            acc = _fold(name, acc, row).astype(cdt)
        groups.append(acc)
    with np.errstate(all="ignore"):
        return ufunc.reduce(np.stack(groups), axis=0, dtype=wide).astype(cdt)


def _values(rng, shape, dt):
    if dt.kind == "f":
        v = (rng.standard_normal(shape) * 100).astype(dt)
        flat = v.reshape(-1)
        flat[rng.integers(0, flat.size, 3)] = np.nan
        flat[rng.integers(0, flat.size, 3)] = 0.0
        flat[rng.integers(0, flat.size, 3)] = -0.0
        return v
    info = np.iinfo(dt)
    return rng.integers(info.min, info.max, shape, dtype=dt, endpoint=True)


REDUCERS = [r.name for r in REDUCER_TABLE]
# around the stretches of the fold (1, 4, 8, 16 lanes; 8 vectors) and the 4 KiB a call
WIDTHS = [1, 3, 15, 16, 17, 33, 64, 100, 129, 255, 513, 1025, 2100]


@pytest.mark.parametrize("name", REDUCERS)
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32, np.uint8, np.float16])
@pytest.mark.parametrize("width", WIDTHS)
def test_sum_rows_of_a_tensor_and_of_an_expression(name, dtype, width):
    rng = np.random.default_rng(width)
    dt = np.dtype(dtype)
    cdt = np.dtype(np.float32) if dt == np.float16 else dt
    rows = 150 if width < 1000 else 70
    a = _values(rng, (rows, width), dt)
    red = getattr(ms.red, name)
    A = ms.from_numpy(a)
    cases = [(ms.reduce_with_axis(A * 1, 0, red), a * dt.type(1)),
             (ms.reduce_except_dim(A * 1, 1, red), a * dt.type(1))]
    if name in ("sum", "product"):   # a tensor's own sum runs the fused pass (as x * 1)
        cases.append((ms.reduce_except_dim(A, 1, red), a))
    for e, v in cases:
        out = ms.new_tensor((width,), dtype=dt)
        out[:] = e
        want = _documented(v.astype(cdt), name, cdt).astype(dt)
        np.testing.assert_array_equal(out.numpy().view(np.uint8), want.view(np.uint8))


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("width", [8, 64, 500, 1030])
def test_threads_and_group_boundaries_keep_the_bits(threads, width):
    rng = np.random.default_rng(3)
    a = (rng.standard_normal((4 * ROWS_PER_GROUP + 37, width)) * 1e3).astype(np.float32)
    old = ms.get_num_threads()
    ms.set_num_threads(threads)
    try:
        out = ms.new_tensor((width,))
        out[:] = ms.sum_rows(ms.from_numpy(a) * 2 - 1)
    finally:
        ms.set_num_threads(old)
    v = a * np.float32(2) - np.float32(1)
    np.testing.assert_array_equal(out.numpy(), _documented(v, "sum", np.dtype(np.float32)))


def test_a_pitched_source_and_a_pitched_destination():
    # (a TensorContainer's own sum once took numpy's order, not x * 1's: other bits)
    rng = np.random.default_rng(4)
    a = rng.standard_normal((200, 40)).astype(np.float32)
    P = ms.TensorContainer((200, 40), pad=True)      # rows further apart than 40 elements
    P[:] = ms.from_numpy(a)
    assert P.stride > 40
    out = ms.TensorContainer((3, 40), pad=True)
    row = out[1]
    row[:] = ms.sum_rows(P)
    np.testing.assert_array_equal(row.numpy(), _documented(a, "sum", np.dtype(np.float32)))
    row[:] = ms.sum_rows(P * 1)
    np.testing.assert_array_equal(row.numpy(), _documented(a, "sum", np.dtype(np.float32)))


def test_rows_of_a_middle_axis_fold_one_at_a_time():
    # reduce over axis 0 of (A, B, M, cols) with M > 1: a group's rows are M apart, one a call
    # (rows of at least REGISTER_ROW_MIN; narrower ones chunk)
    rng = np.random.default_rng(5)
    a = rng.standard_normal((90, 3, 130)).astype(np.float32)
    out = ms.new_tensor((3, 130))
    out[:] = ms.reduce_with_axis(ms.from_numpy(a) * 1, 0, ms.red.sum)
    want = np.stack([_documented(a[:, k], "sum", np.dtype(np.float32)) for k in range(3)])
    np.testing.assert_array_equal(out.numpy(), want)


def test_narrow_rows_take_the_rows_fold_and_wide_ones_the_chain():
    A = ms.from_numpy(np.ones((300, 64), np.float32))
    W = ms.from_numpy(np.ones((300, 2048), np.float32))
    narrow = ms.plan_for(ms.new_tensor((64,)), ms.sum_rows(A * 2)).disassemble()
    wide = ms.plan_for(ms.new_tensor((2048,)), ms.sum_rows(W * 2)).disassemble()
    assert "acc_sum_f32(dst" in narrow and "sumto" in narrow
    assert "plus(dst, _)" in wide and "plusto" in wide
    # a tensor's rows (its sum runs as identity(x)'s) are folded straight from it
    plain = ms.plan_for(ms.new_tensor((64,)),
                        ms.sum_rows(_core.make_map("identity", (A,)))).disassemble()
    assert "dst = acc_sum_f32(dst, L0)" in plain and "0 registers" in plain


def test_narrow_rows_a_middle_axis_apart_are_chunked():
    # a group's rows M > 1 apart take a call each: narrow ones chunk instead (a call a row of
    # 14 elements made reduce_with_axis of (64, 32, 14, 14) over axis 0 9x slower)
    e = ms.reduce_with_axis(ms.from_numpy(np.ones((64, 32, 14, 14), np.float32)) * 2, 0,
                            ms.red.sum)
    assert "stage 0: chunk" in ms.plan_for(ms.new_tensor((32, 14, 14)), e).disassemble()
    e = ms.reduce_with_axis(ms.from_numpy(np.ones((64, 1, 14), np.float32)) * 2, 0,
                            ms.red.sum)
    assert "acc_sum_f32(dst" in ms.plan_for(ms.new_tensor((1, 14)), e).disassemble()


@pytest.mark.parametrize("width", [100, 300, 400, 512, 513, 1024])
def test_the_rows_a_call_rule_picks_the_fold_or_the_chain(width):
    from mshadow.extension.reduce import GROUP_BYTES, GROUP_ROWS_MIN, rows_a_call
    nr = rows_a_call((300, width), 0, np.dtype(np.float32))
    fit = min(ROWS_PER_GROUP, GROUP_BYTES // (4 * width))
    assert nr == (fit if fit >= GROUP_ROWS_MIN else 1)
    dis = ms.plan_for(ms.new_tensor((width,)),
                      ms.sum_rows(ms.from_numpy(np.ones((300, width), np.float32)) * 2)).disassemble()
    assert ("sumto" in dis) == (nr > 1) and ("plusto" in dis) == (nr == 1)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("shape", [(1, 1, 1, 5), (1, 1, 64, 1024), (2, 3, 7, 33), (3, 1, 2, 1)])
def test_the_groups_add_in_order_in_float64(dtype, shape):
    # _core.add_groups (fused_reduce's last step for float sums): group 0, then each next
    # group added in float64, column by column; values where the order changes the sum
    rng = np.random.default_rng(sum(shape))
    acc = (rng.standard_normal(shape) * 10.0 ** rng.integers(-8, 9, shape)).astype(dtype)
    flat = acc.reshape(-1)
    flat[rng.integers(0, flat.size, 2)] = np.inf
    flat[rng.integers(0, flat.size, 2)] = np.nan
    want = acc[:, :, 0, :].astype(np.float64)
    for g in range(1, shape[2]):
        want = want + acc[:, :, g, :].astype(np.float64)
    got = _core.add_groups(acc)
    assert got.dtype == np.float64 and got.shape == shape[:2] + shape[3:]
    np.testing.assert_array_equal(got.view(np.uint64), want.view(np.uint64))
    with np.errstate(invalid="ignore"):   # (the numpy step it replaced: the same bits)
        np.testing.assert_array_equal(got, np.add.reduce(acc, axis=2, dtype=np.float64))


def test_add_groups_refuses_what_it_cannot_add():
    for bad in (np.zeros((2, 3, 4), np.float32), np.zeros((1, 1, 2, 3), np.int32),
                np.zeros((1, 1, 0, 3), np.float32), np.zeros((1, 1, 4, 6), np.float32)[..., ::2],
                [[[[1.0]]]]):
        with pytest.raises(ValueError, match="add_groups"):
            _core.add_groups(bad)


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
# rows chosen so a call's last rows number 1, 2, 3 and 4 (the kernel peels the first and
# the last row of a call, nr >= 2), at widths around its stretches
@pytest.mark.parametrize("rows, width", [(301, 600), (70, 1024), (150, 2100), (17, 4099),
                                         (2, 1031), (3, 1024), (67, 777), (131, 1100)])
def test_wide_rows_of_a_tensor_fold_several_a_call(threads, dtype, rows, width):
    # a tensor's rows wider than GROUP_BYTES / GROUP_ROWS_MIN are read in place, several a call
    # (reduce.WIDE_ROWS_A_CALL), an expression's a row a call in its chain: both the
    # documented order's bits, a pitched tensor's too, at any row count
    from mshadow.extension.reduce import WIDE_ROWS_A_CALL, rows_a_call
    dt = np.dtype(dtype)
    assert rows_a_call((rows, width), 0, dt, in_place=True) == WIDE_ROWS_A_CALL
    assert rows_a_call((rows, width), 0, dt) == 1
    rng = np.random.default_rng(rows + width)
    a = _values(rng, (rows, width), dt)
    P = ms.TensorContainer((rows, width), pad=True, dtype=dt)
    P[:] = ms.from_numpy(a)
    tensors = [ms.from_numpy(a), P]
    plain = ms.plan_for(ms.new_tensor((width,), dtype=dt),
                        ms.sum_rows(_core.make_map("identity", (tensors[0],)))).disassemble()
    assert "acc_sum_" in plain and "sumto" in plain and "0 registers" in plain
    old = ms.get_num_threads()
    ms.set_num_threads(threads)
    try:
        for T in tensors + [tensors[0] * 1]:
            out = ms.new_tensor((width,), dtype=dt)
            out[:] = ms.sum_rows(T)
            np.testing.assert_array_equal(out.numpy().view(np.uint8),
                                          _documented(a, "sum", dt).view(np.uint8))
    finally:
        ms.set_num_threads(old)
