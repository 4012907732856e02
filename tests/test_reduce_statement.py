"""The compiled statement path of a reduction in registers (``y[:] = sum_rows(x)``:
_reduce.pxi reduce_fast running reduce.py's recipe) against reduce.py's own route (the
same bits, every saver and dtype), numpy (the values), and the errors reduce.py raises.

A statement the compiled path takes never enters reduce.py's engine: the tests that say so
replace ``reduce._eval`` with one that fails."""
import threading

import numpy as np
import pytest

import mshadow as ms
from mshadow import _core
from mshadow.errors import DTypeError, FreedTensorError, ShapeError
from mshadow.extension import reduce as red_mod

SAVERS = ("saveto", "plusto", "minusto", "multo", "divto")


@pytest.fixture
def no_engine(monkeypatch):
    """reduce.py's engine fails: a statement that completes ran on the compiled path."""
    def refuse(dst, exp, saver):
        raise AssertionError(f"reduce.py ran {exp!r} ({saver})")
    monkeypatch.setitem(ms.engine._complex_engines, "reduce", refuse)


def _tensor(a, pad=False):
    t = ms.new_tensor(a.shape, dtype=a.dtype, pad=pad)
    t.numpy()[...] = a
    return t


def _cases(rng, dtype):
    """(name, builder(tensors) -> ReduceExp, source values -> numpy reference)."""
    def src(shape):
        return (rng.standard_normal(shape) * 4).astype(dtype)
    yield "sum_rows", src((5, 17)), lambda x: ms.sum_rows(x), lambda v: v.sum(0)
    yield "sum_rows 1x1", src((1, 1)), lambda x: ms.sum_rows(x), lambda v: v.sum(0)
    yield "sum_rows of 300 rows", src((300, 7)), lambda x: ms.sum_rows(x * 2 - 1), \
        lambda v: (v * 2 - 1).sum(0)
    yield "sum_rows scaled", src((65, 33)), lambda x: ms.sum_rows(x) * 0.5, lambda v: v.sum(0) * 0.5
    yield "negated", src((9, 12)), lambda x: -ms.sum_rows(x * x), lambda v: -(v * v).sum(0)
    yield "keep last of 3-D", src((3, 4, 130)), lambda x: ms.sumall_except_dim(x, 2), \
        lambda v: v.sum((0, 1))
    yield "keep 1 of 4-D", src((2, 8, 4, 4)), lambda x: ms.sumall_except_dim(x, 1), \
        lambda v: v.sum((0, 2, 3))
    yield "keep 1 of an expression", src((3, 5, 6, 7)), \
        lambda x: ms.sumall_except_dim(ms.F(ms.op.relu, x * 2), 1), \
        lambda v: np.maximum(v * 2, 0).sum((0, 2, 3))
    yield "keep 0", src((6, 3, 5)), lambda x: ms.sumall_except_dim(x * 1, 0), \
        lambda v: v.sum((1, 2))
    yield "keep 2 of long rows", src((2, 3, 4, 140)), lambda x: ms.sumall_except_dim(x + 0, 2), \
        lambda v: v.sum((0, 1, 3))
    yield "with_axis 0", src((7, 3, 9)), lambda x: ms.reduce_with_axis(x * 1, 0, ms.red.sum), \
        lambda v: v.sum(0)
    yield "with_axis 1", src((4, 70, 9)), lambda x: ms.reduce_with_axis(x * 1, 1, ms.red.sum), \
        lambda v: v.sum(1)
    yield "with_axis last", src((6, 20)), lambda x: ms.reduce_with_axis(x * 3, 1, ms.red.sum), \
        lambda v: (v * 3).sum(1)
    yield "keepdim 1", src((4, 5, 6)), lambda x: ms.reduce_keepdim(x * 1, 1, ms.red.sum), \
        lambda v: v.sum(1, keepdims=True)
    yield "keepdim of 1-D", src((37,)), lambda x: ms.reduce_keepdim(x * 1, 0, ms.red.sum), \
        lambda v: v.sum(0, keepdims=True)


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16])
def test_the_compiled_path_gives_reduce_pys_bits_and_numpys_values(dtype, monkeypatch):
    rng = np.random.default_rng(0)
    for name, a, build, ref in _cases(rng, dtype):
        for saver in SAVERS:
            x = _tensor(a)
            exp = build(x)
            start = (rng.uniform(1, 2, exp.shape)).astype(dtype)
            fast, slow = _tensor(start), _tensor(start)
            assert _core.reduce_fast(fast, exp, saver, 1), name
            red_mod._eval(slow, exp, saver)                     # reduce.py's own route
            np.testing.assert_array_equal(fast.numpy(), slow.numpy(), err_msg=f"{name} {saver}")
            if saver == "saveto":
                want = ref(a.astype(np.float64))
                tol = {np.float16: 3e-3, np.float32: 1e-5, np.float64: 1e-12}[dtype]
                np.testing.assert_allclose(fast.numpy().astype(np.float64), want, rtol=tol,
                                           atol=tol * (np.abs(want).max() + 1), err_msg=name)


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16])
def test_nan_inf_and_signed_zeros_give_reduce_pys_bits(dtype):
    rng = np.random.default_rng(7)
    for name, a, build, _ in _cases(rng, dtype):
        flat = a.reshape(-1)
        flat[::7] = -0.0
        flat[3 % flat.size] = np.inf if flat.size > 5 else flat[3 % flat.size]
        flat[-2 % flat.size] = np.nan if flat.size > 9 else flat[-2 % flat.size]
        exp = build(_tensor(a))
        fast, slow = ms.new_tensor(exp.shape, dtype=dtype), ms.new_tensor(exp.shape, dtype=dtype)
        assert _core.reduce_fast(fast, exp, "saveto", 1), name
        with np.errstate(all="ignore"):
            red_mod._eval(slow, exp, "saveto")
        assert fast.numpy().tobytes() == slow.numpy().tobytes(), name


def test_statements_run_on_the_compiled_path_from_the_first(no_engine):
    rng = np.random.default_rng(1)
    a = rng.standard_normal((40, 24)).astype(np.float32)
    x, y = _tensor(a), ms.new_tensor((24,))
    for _ in range(3):
        y[:] = ms.sum_rows(x * 2)
        np.testing.assert_allclose(y.numpy(), (a * 2).sum(0), rtol=1e-5)
    y += ms.sum_rows(x)
    np.testing.assert_allclose(y.numpy(), (a * 2).sum(0) + a.sum(0), rtol=1e-5, atol=1e-5)
    z = ms.new_tensor((5,))
    b = rng.standard_normal((3, 5, 2, 2)).astype(np.float32)
    z[:] = ms.sumall_except_dim(_tensor(b), 1)
    np.testing.assert_allclose(z.numpy(), b.sum((0, 2, 3)), rtol=1e-5, atol=1e-6)


def test_pitched_and_view_destinations_and_sources():
    rng = np.random.default_rng(2)
    a = rng.standard_normal((6, 9, 10)).astype(np.float32)
    x = _tensor(a, pad=True)                       # pitched source
    big = ms.new_tensor((10, 1, 10), pad=True)     # pitched destination, a view of it
    big.numpy()[...] = 7
    dst = big[2:8]
    assert dst.stride > 10
    assert _core.reduce_fast(dst, ms.reduce_keepdim(x * 1, 1, ms.red.sum), "saveto", 1)
    np.testing.assert_allclose(dst.numpy(), a.sum(1, keepdims=True), rtol=1e-5, atol=1e-5)
    assert (big.numpy()[:2] == 7).all() and (big.numpy()[8:] == 7).all()
    # a pitched tensor's sum over all axes but 1 is not read as merged rows: reduce.py
    y = ms.new_tensor((9,))
    y[:] = ms.sumall_except_dim(x, 1)
    np.testing.assert_allclose(y.numpy(), a.sum((0, 2)), rtol=1e-5, atol=1e-5)


def test_a_destination_that_is_part_of_the_source():
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    x = _tensor(a)
    row = x[0]
    row[:] = ms.sum_rows(x)                      # reads every row before row 0 is written
    np.testing.assert_array_equal(x.numpy()[0], a.sum(0))
    np.testing.assert_array_equal(x.numpy()[1:], a[1:])


def test_errors_are_reduce_pys():
    x = _tensor(np.ones((4, 3), np.float32))
    frozen = np.zeros(3, np.float32)
    frozen.flags.writeable = False
    ro = ms.from_numpy(frozen)
    assert ro.readonly
    with pytest.raises(DTypeError, match="tcast"):
        ms.new_tensor((3,), dtype=np.float64)[:] = ms.sum_rows(x)
    with pytest.raises(ShapeError, match="length 3"):
        ms.new_tensor((4,))[:] = ms.sum_rows(x)
    assert not _core.reduce_fast(ms.new_tensor((3,)), ms.sum_rows(x), "bogus", 1)
    with pytest.raises(ValueError, match="saver must be"):
        ms.engine.assign(ms.new_tensor((3,)), ms.sum_rows(x), "bogus")
    with pytest.raises(ValueError, match="read-only"):
        ro[:] = ms.sum_rows(x)
    dst = ms.new_tensor((3,))
    ms.free_space(dst)
    with pytest.raises(FreedTensorError):
        dst[:] = ms.sum_rows(x)
    src = ms.new_tensor((4, 3))
    e = ms.sum_rows(src * 2)
    ms.free_space(src)
    y = ms.new_tensor((3,), 5)
    with pytest.raises(FreedTensorError):
        y[:] = e
    assert (y.numpy() == 5).all()                # nothing stored


def test_what_the_compiled_path_leaves_to_reduce_py():
    x = _tensor(np.arange(600, dtype=np.float32).reshape(300, 2))
    i = _tensor(np.arange(12, dtype=np.int32).reshape(4, 3))
    y2, y3 = ms.new_tensor((300,)), ms.new_tensor((3,), dtype=np.int32)
    assert not _core.reduce_fast(y2, ms.sumall_except_dim(x * 1, 0), "saveto", 1)  # chunks
    assert not _core.reduce_fast(y3, ms.sum_rows(i * 1), "saveto", 1)             # integers
    assert not _core.reduce_fast(ms.new_tensor((300,)),
                                 ms.reduce_with_axis(x * 1, 1, ms.red.maximum, mask=True),
                                 "saveto", 1)
    assert not _core.reduce_fast(ms.new_tensor((2,)),
                                 ms.reduce_with_axis(x, 0, ms.red.maximum), "saveto", 1)  # numpy's
    y3[:] = ms.sum_rows(i * 1)
    np.testing.assert_array_equal(y3.numpy(), np.arange(12).reshape(4, 3).sum(0))


def test_a_cleared_or_tiny_plan_cache_is_followed():
    rng = np.random.default_rng(3)
    a = rng.standard_normal((8, 5)).astype(np.float32)
    x, y = _tensor(a), ms.new_tensor((5,))
    _, _, size, _ = _core.plan_cache_counts()
    try:
        _core.set_plan_cache_size(1)
        for k in range(6):
            y[:] = ms.sum_rows(x * float(k + 1))
            if k % 2:
                _core.clear_plan_cache()
            else:                                # another structure evicts the recipe's plan
                ms.new_tensor((5,))[:] = x[0] * float(k) + 1
            np.testing.assert_allclose(y.numpy(), (a * (k + 1)).sum(0), rtol=1e-5, atol=1e-6)
    finally:
        _core.set_plan_cache_size(size)


def test_threads_reduce_and_free_at_once():
    rng = np.random.default_rng(4)
    a = rng.standard_normal((64, 33)).astype(np.float32)
    want = a.sum(0) * 2
    errors = []

    def reduce_own():
        x, y = _tensor(a), ms.new_tensor((33,))
        for _ in range(300):
            y[:] = ms.sum_rows(x * 2)
            if not np.allclose(y.numpy(), want, rtol=1e-5, atol=1e-5):
                errors.append(y.numpy().copy())

    def reduce_freed():
        for _ in range(200):
            x, y = _tensor(a), ms.new_tensor((33,))
            e = ms.sum_rows(x * 2)
            t = threading.Thread(target=ms.free_space, args=(x,))
            t.start()
            try:
                y[:] = e
            except FreedTensorError:
                pass
            else:
                if not np.allclose(y.numpy(), want, rtol=1e-5, atol=1e-5):
                    errors.append("freed source gave wrong values")
            t.join()

    threads = [threading.Thread(target=f) for f in (reduce_own, reduce_own, reduce_freed)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors


@pytest.mark.parametrize("pair", [(np.float32, np.float32), (np.float32, np.float16),
                                  (np.float64, np.float64)])
def test_finish_values_rounds_as_numpy(pair):
    cdt, dtype = pair
    rng = np.random.default_rng(5)
    v = np.concatenate([rng.standard_normal(500) * 10.0 ** rng.integers(-12, 8, 500),
                        [0.0, -0.0, np.inf, -np.inf, np.nan, 65504.0, 65520.0, 1e-8, 6e-8,
                         3e-5, 2 ** -24, 2 ** -25, 3 * 2 ** -26]])
    for scale in (1.0, 0.5, -1.0, 1 / 3):
        got = _core.finish_values(v, cdt, scale, dtype)
        with np.errstate(over="ignore", invalid="ignore"):
            want = v.astype(cdt)
            if scale != 1:
                want = want * np.asarray(scale).astype(cdt)
            want = want.astype(dtype)
        assert got.dtype == np.dtype(dtype) and got.flags.c_contiguous
        np.testing.assert_array_equal(got.view(f"u{got.itemsize}"),
                                      want.view(f"u{want.itemsize}"))


def test_few_short_rows_are_reduced_in_registers():
    # at most REGISTER_ROWS_FEW rows go in registers whatever their length (lower.cpu)
    from mshadow.lower.cpu import REGISTER_ROWS_FEW
    for rows, schedule in ((REGISTER_ROWS_FEW, "registers"), (REGISTER_ROWS_FEW + 2, "chunk")):
        a = np.random.default_rng(6).standard_normal((2, rows // 2, 5)).astype(np.float32)
        # (over the last axis: a sum over all axes but 1 folds its rows, _fold_shape)
        exp = ms.reduce_with_axis(_tensor(a) * 2, 2, ms.red.sum)
        dis = ms.plan_for(ms.new_tensor(exp.shape), exp).disassemble()
        assert ("stage 0: chunk" in dis) == (schedule == "chunk"), dis
        y = ms.new_tensor(exp.shape)
        y[:] = exp
        np.testing.assert_allclose(y.numpy(), (a * 2).sum(2), rtol=1e-5, atol=1e-5)


def test_random_reductions_match_reduce_pys_route_and_numpy():
    # random shapes (long rows too), dtypes, pitches, sources, forms, scales and savers:
    # the statement (compiled where it takes it) against reduce.py's route, bit for bit,
    # and against numpy in float64
    rng = np.random.default_rng(11)
    srcs = [(lambda t: t, lambda v: v), (lambda t: t * 2, lambda v: v * 2),
            (lambda t: ms.F(ms.op.relu, t - 1), lambda v: np.maximum(v - 1, 0)),
            (lambda t: t * t + 1, lambda v: v * v + 1)]
    took = 0
    for case in range(300):
        nd = int(rng.integers(1, 5))
        shape = tuple(int(v) for v in rng.integers(1, 9, nd))
        if rng.random() < 0.2:
            shape = shape[:-1] + (int(rng.integers(120, 300)),)
        dtype = (np.float32, np.float64, np.float16)[case % 3]
        a = (rng.standard_normal(shape) * 3).astype(dtype)
        x = _tensor(a, pad=nd > 1 and bool(rng.integers(0, 2)))
        build, ref = srcs[int(rng.integers(0, 4))]
        v = ref(a.astype(np.float64))
        ax = int(rng.integers(0, nd))
        form = int(rng.integers(0, 3)) if nd > 1 else 2
        if form == 0:
            e, want = ms.sumall_except_dim(build(x), ax), v.sum(tuple(k for k in range(nd) if k != ax))
        elif form == 1:
            e, want = ms.reduce_with_axis(build(x), ax, ms.red.sum), v.sum(ax)
        else:
            e, want = ms.reduce_keepdim(build(x), ax, ms.red.sum), v.sum(ax, keepdims=True)
        scale = (1, 0.5, -2.0)[int(rng.integers(0, 3))]
        if scale != 1:
            e, want = e * scale, want * scale
        saver = ("saveto", "plusto", "minusto")[int(rng.integers(0, 3))]
        d0 = rng.uniform(-1, 1, e.shape).astype(dtype)
        dst, other = _tensor(d0, pad=bool(rng.integers(0, 2))), _tensor(d0)
        if _core.reduce_fast(dst, e, saver, 1):
            took += 1
        else:
            ms.engine.assign(dst, e, saver)
        with np.errstate(all="ignore"):
            red_mod._eval(other, e, saver)
        what = f"{shape} {np.dtype(dtype).name} form {form} axis {ax} {saver}"
        assert dst.numpy().tobytes() == other.numpy().tobytes(), what
        full = {"saveto": want, "plusto": d0 + want, "minusto": d0 - want}[saver]
        if dtype == np.float16 and np.abs(full).max() > 6e4:
            continue                                  # float16 overflows to inf, as it should
        tol = {np.float16: 2e-2, np.float32: 1e-4, np.float64: 1e-10}[dtype]
        np.testing.assert_allclose(dst.numpy().astype(np.float64), full, rtol=tol,
                                   atol=tol * 4 * (np.abs(full).max() + 1), err_msg=what)
    assert took > 150                                 # most went the compiled way
