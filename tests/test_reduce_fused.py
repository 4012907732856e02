"""ms.sum: a full reduction evaluated in the same pass as its expression, with the summation
order docs/reduce_nn.md documents (checked against an independent numpy transcription)."""
import numpy as np
import pytest

import mshadow as ms
from mshadow.testing import simd_levels
from test_reduce_rows import lanes_fold


def _documented_sum(values, contiguous, dtype):
    """The documented order: blocks of 4096 (one long row if contiguous, else per row), in a
    block element i to lane i % 16, lanes added pairwise; partials summed by numpy."""
    cc = np.float32 if dtype == np.float16 else dtype
    rows = values.reshape(1, -1) if contiguous else values.reshape(-1, values.shape[-1])
    parts = []
    with np.errstate(over="ignore"):
        for row in rows.astype(cc):
            for b0 in range(0, row.size, 4096):
                blk = row[b0:b0 + 4096]
                acc = np.zeros(16, cc)
                for i, v in enumerate(blk):
                    acc[i % 16] = cc(acc[i % 16] + v)
                w = 8
                while w:
                    acc[:w] = (acc[:w] + acc[w:2 * w]).astype(cc)
                    w //= 2
                parts.append(acc[0])
    parts = np.array(parts, dtype=cc)
    if np.dtype(dtype).kind in "iu":
        return np.sum(parts, dtype=dtype)
    return np.dtype(dtype).type(np.sum(parts, dtype=np.float64))


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16, np.int32, np.int8])
@pytest.mark.parametrize("pad", [False, True])
def test_sum_of_an_expression_follows_the_documented_order(dtype, pad):
    rng = np.random.default_rng(5)
    shape = (7, 1300)
    a = (rng.uniform(-3, 3, shape) if np.dtype(dtype).kind == "f"
         else rng.integers(-100, 100, shape)).astype(dtype)
    x = ms.new_tensor(shape, dtype=dtype, pad=pad)
    x.numpy()[...] = a
    got = ms.sum(x * x + 1)
    with np.errstate(over="ignore"):
        vals = a * a + np.asarray(1, dtype)        # float16: each operator yields a half
    want = _documented_sum(vals, not pad, dtype)
    assert got.dtype == np.dtype(dtype)
    assert got == want or (np.isnan(got) and np.isnan(want))


def test_same_bits_at_every_simd_level_and_thread_count():
    x = ms.from_numpy(np.random.default_rng(1).standard_normal(300_001).astype(np.float32))
    level, n = ms.simd_info()["active"], ms.get_num_threads()
    results = set()
    try:
        for lvl in simd_levels():
            for threads in (1, 2):
                ms.set_simd_level(lvl)
                ms.set_num_threads(threads)
                results.add(float(ms.sum(ms.F(ms.op.exp, x * 0.1) - x)))
    finally:
        ms.set_simd_level(level)
        ms.set_num_threads(n)
    assert len(results) == 1


def test_sum_of_tensors_views_and_transposes():
    a = np.arange(12, dtype=np.float64).reshape(3, 4)
    t = ms.from_numpy(a)
    assert ms.sum(t) == a.sum()
    assert ms.sum(t.T * 2) == (a.T * 2).sum()
    assert ms.sum(ms.flip(t, 0) - t) == 0
    assert ms.sum(ms.broadcast(ms.from_numpy(np.arange(4.0)), (5, 4), 1)) == 30
    assert ms.sum(np.ones((3, 3))) == 9


def test_integer_sums_wrap_like_cpp():
    a = np.full(1000, 100, dtype=np.int8)
    assert ms.sum(ms.from_numpy(a)) == np.sum(a, dtype=np.int8)   # 100000 mod 256, signed


def test_sum_is_one_pass_without_a_temporary():
    from mshadow.lower.cpu import compile_plan, disassemble
    from mshadow import ir
    key = ir.Map("mul", "f32", ir.LEAF["f32"], ir.LEAF["f32"])
    lines = disassemble(compile_plan(key, "f32", "sum")).splitlines()[1:]
    assert lines == ["dst = chain_sum_f32[L0 -> mul(_, L1)]"]   # no register between


def test_sum_errors():
    a = ms.new_tensor((2, 2), 1.0)
    with pytest.raises(TypeError, match="sum: a dot.*kComplex.*assign it to a tensor first"):
        ms.sum(ms.dot(a, a))
    with pytest.raises(TypeError, match="sum: expected a tensor or an expression, got str"):
        ms.sum("a")
    b = ms.new_tensor((2, 2), 1.0)
    ms.free_space(b)
    with pytest.raises(ms.FreedTensorError):
        ms.sum(b * 2)


def test_sum_with_an_untraceable_operator():
    @ms.op.define
    def branchy(v):
        return v if v > 0 else -v       # Python control flow: runs on numpy
    a = np.array([-1.0, 2.0, -3.0], np.float32)
    with pytest.warns(RuntimeWarning, match="could not be traced"):
        assert ms.sum(ms.F(branchy, ms.from_numpy(a))) == 6.0


# ---- reductions over axes, fused with their source ---------------------------------------

def _arrays(shape, dtype, seed):
    rng = np.random.default_rng(seed)
    if np.dtype(dtype).kind == "f":
        return [rng.uniform(-2, 2, shape).astype(dtype) for _ in range(2)]
    return [rng.integers(-100, 100, shape).astype(dtype) for _ in range(2)]


def _check(got, want, dtype):
    if np.dtype(dtype).kind in "iu":
        np.testing.assert_array_equal(got, want.astype(dtype))
    else:
        tol = 2e-2 if dtype == np.float16 else (1e-5 if dtype == np.float32 else 1e-12)
        np.testing.assert_allclose(got, want, rtol=tol, atol=tol * 10)


@pytest.fixture
def no_temporary(monkeypatch):
    """Fail if a reduction evaluates its expression source into a full-size temporary."""
    from mshadow.extension import reduce as red_mod

    def refuse(src):
        raise AssertionError(f"evaluated {src!r} into a temporary")
    monkeypatch.setattr(red_mod, "_array", refuse)


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16, np.int32])
@pytest.mark.parametrize("shape", [(7,), (300, 5), (5, 300), (3, 4, 5), (2, 3, 4, 70),
                                   (130, 1000), (1, 1), (4100, 3)])
def test_axis_sums_of_an_expression_are_fused(shape, dtype, no_temporary):
    a, b = _arrays(shape, dtype, 1)
    A, B = ms.from_numpy(a), ms.from_numpy(b)
    wide = np.float64 if np.dtype(dtype).kind == "f" else dtype
    prod = a.astype(wide) * b.astype(wide)
    if dtype == np.float16:   # half_t rounds every operator's result
        prod = (a * b).astype(np.float64)
    nd = len(shape)
    for d in range(nd):
        if nd == 1:
            continue
        out = ms.new_tensor((shape[d],), 0, dtype=dtype)
        out[:] = ms.sumall_except_dim(A * B, d)
        _check(out.numpy(), prod.sum(axis=tuple(k for k in range(nd) if k != d)), dtype)
    for ax in range(nd if nd > 1 else 0):
        out = ms.new_tensor(shape[:ax] + shape[ax + 1:], 0, dtype=dtype)
        out[:] = ms.reduce_with_axis(A * B, ax, ms.red.sum)
        _check(out.numpy(), prod.sum(axis=ax), dtype)
    keep = ms.new_tensor(shape[:-1] + (1,), 1, dtype=dtype)
    keep += ms.reduce_keepdim(A * B, nd - 1, ms.red.sum) * 2
    _check(keep.numpy(), 1 + 2 * prod.sum(axis=-1, keepdims=True), dtype)


def test_sum_rows_of_nested_extensions_is_fused(no_temporary):
    rng = np.random.default_rng(3)
    x = rng.standard_normal((4, 3, 16, 16)).astype(np.float32)
    X = ms.from_numpy(x)
    out = ms.new_tensor((3,), 0)
    out[:] = ms.sumall_except_dim(ms.pool(X * 1, 2, 2, 2, 2), 1)
    pooled = x.reshape(4, 3, 8, 2, 8, 2).max(axis=(3, 5))
    np.testing.assert_allclose(out.numpy(), pooled.sum(axis=(0, 2, 3)), rtol=1e-5)
    m = ms.from_numpy(rng.standard_normal((64, 33)).astype(np.float32))
    cols = ms.new_tensor((33,), 0)
    cols[:] = ms.sum_rows(ms.F(ms.op.relu, ms.flip(m, 0) * 2))
    np.testing.assert_allclose(cols.numpy(), np.maximum(m.numpy() * 2, 0).sum(0), rtol=1e-5)


def test_axis_sums_do_not_depend_on_the_thread_count():
    rng = np.random.default_rng(4)
    a = rng.standard_normal((3000, 257)).astype(np.float32)
    A = ms.from_numpy(a)
    results = []
    old = ms.get_num_threads()
    try:
        for n in (1, 2, 3):
            ms.set_num_threads(n)
            r0, r1 = ms.new_tensor((257,), 0), ms.new_tensor((3000,), 0)
            r0[:] = ms.sum_rows(A * A)
            r1[:] = ms.reduce_with_axis(A * A, 1, ms.red.sum)
            results.append((r0.numpy().tobytes(), r1.numpy().tobytes()))
    finally:
        ms.set_num_threads(old)
    assert results[0] == results[1] == results[2]


def test_column_sum_order_is_the_documented_one():
    # rows of at least REGISTER_ROW_MIN: groups of ROWS_PER_GROUP rows added in order in
    # float32, the groups in float64
    from mshadow.extension.reduce import ROWS_PER_GROUP as R
    from mshadow.lower.cpu import REGISTER_ROW_MIN as W
    rng = np.random.default_rng(6)
    a = (rng.standard_normal((300, W + 3)) * 1e3).astype(np.float32)
    want = np.zeros(W + 3, np.float64)
    for g in range(0, 300, R):
        acc = np.zeros(W + 3, np.float32)
        for row in a[g:g + R] * np.float32(1):
            acc = (acc + row).astype(np.float32)
        want += acc
    out = ms.new_tensor((W + 3,), 0)
    e = ms.sum_rows(ms.from_numpy(a) * 1)
    assert "acc_sum_f32(dst" in ms.plan_for(out, e).disassemble()   # folded where computed
    out[:] = e
    np.testing.assert_array_equal(out.numpy(), want.astype(np.float32))


@pytest.mark.parametrize("form", ["with_axis_last"])   # (except_dim folds: test_reduce_narrow)
def test_short_rows_are_reduced_in_chunks_in_the_documented_order(form, monkeypatch):
    # more than REGISTER_ROWS_FEW rows shorter than REGISTER_ROW_MIN, the last axis summed:
    # a chunk stage evaluates the source a chunk at a time (CHUNK_ELEMS elements of whole
    # slabs), and each chunk's rows are folded alone by the block kernel (the lanes order)
    from mshadow.extension import reduce as red_mod
    monkeypatch.setattr(red_mod, "CHUNK_ELEMS", 40 * 7 * 11)
    rng = np.random.default_rng(16)
    a = (rng.standard_normal((60, 7, 40)) * 1e3).astype(np.float32)
    v = a * np.float32(2) - np.float32(1)
    A = ms.from_numpy(a)
    e = A * 2 - 1
    f32 = np.float32
    if form == "sum_rows":
        m, mv = ms.reshape(e, (420, 40)), v.reshape(420, 40)
        red, chunks, axis = ms.sum_rows(m), [mv[i:i + 77] for i in range(0, 420, 77)], 0
    elif form == "except_dim":       # keep axis 1: chunks of 11 along axis 0
        red, chunks, axis = ms.sumall_except_dim(e, 1), [v[i:i + 11] for i in range(0, 60, 11)], (0, 2)
    elif form == "with_axis_last":
        red, chunks, axis = (ms.reduce_with_axis(e, 2, ms.red.sum),
                             [v[i:i + 11] for i in range(0, 60, 11)], 2)
    else:
        red, chunks, axis = (ms.reduce_with_axis(e, 0, ms.red.sum),
                             [v[i:i + 11] for i in range(0, 60, 11)], 0)
    out = ms.new_tensor(red.shape)
    dis = ms.plan_for(out, red).disassemble()
    assert "stage 0: chunk" in dis and "the block kernel reduce_sum_f32" in dis, dis
    out[:] = red
    if axis == 2:      # the chunks hold whole rows: each row folded alone
        want = np.concatenate([lanes_fold(c.reshape(-1, 40), np.add, 0).reshape(c.shape[:2])
                               for c in chunks])
    else:
        want = np.add.reduce(chunks[0], axis=axis, dtype=f32)
        for c in chunks[1:]:
            want = (want + np.add.reduce(c, axis=axis, dtype=f32)).astype(f32)
    np.testing.assert_array_equal(out.numpy(), want)
    np.testing.assert_allclose(out.numpy(), v.astype(np.float64).sum(axis=axis) if
                               form != "sum_rows" else v.reshape(420, 40).sum(0, dtype=np.float64),
                               rtol=1e-5, atol=1e-2)


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16, np.int32, np.uint8])
@pytest.mark.parametrize("shape", [(300, 5), (5, 300), (3, 4, 5), (2, 3, 4, 70), (130, 1000),
                                   (1, 1), (4100, 3)])
def test_maximum_and_minimum_of_an_expression_are_fused(shape, dtype, no_temporary):
    # NaN propagates (MXNet's red::maximum, numpy's np.maximum), also through the fused
    # column accumulators and the per-block partials
    rng = np.random.default_rng(8)
    if np.dtype(dtype).kind == "f":
        a = (rng.standard_normal(shape) * 50).astype(dtype)
        if a.size > 3:
            a.flat[rng.integers(0, a.size)] = np.nan
    else:
        a = rng.integers(0 if dtype == np.uint8 else -100, 100, shape).astype(dtype)
    e = ms.from_numpy(a) * 1
    nd = len(shape)
    for red, uf in ((ms.red.maximum, np.maximum), (ms.red.minimum, np.minimum)):
        for ax in range(nd):
            out = ms.new_tensor(shape[:ax] + shape[ax + 1:], 0, dtype=dtype)
            out[:] = ms.reduce_with_axis(e, ax, red)
            np.testing.assert_array_equal(out.numpy(), uf.reduce(a, axis=ax))
            out = ms.new_tensor((shape[ax],), 0, dtype=dtype)
            out[:] = ms.reduce_except_dim(e, ax, red)
            np.testing.assert_array_equal(
                out.numpy(), uf.reduce(a, axis=tuple(k for k in range(nd) if k != ax)))


def test_softmax_of_an_expression_in_fused_passes(no_temporary):
    # the row maximum and the row sum of exp(x - max) are both fused with their expressions
    rng = np.random.default_rng(9)
    x = (rng.standard_normal((64, 1000)) * 4).astype(np.float32)
    X = ms.from_numpy(x)
    m, s = ms.new_tensor((64,)), ms.new_tensor((64,))
    m[:] = ms.reduce_with_axis(X * 2, 1, ms.red.maximum)
    shifted = ms.F(ms.op.exp, X * 2 - ms.broadcast(m, X.shape, 0))
    s[:] = ms.reduce_with_axis(shifted, 1, ms.red.sum)
    y = ms.new_tensor(X.shape)
    y[:] = shifted / ms.broadcast(s, X.shape, 0)
    z = x.astype(np.float64) * 2
    want = np.exp(z - z.max(1, keepdims=True))
    want /= want.sum(1, keepdims=True)
    np.testing.assert_allclose(y.numpy(), want, rtol=2e-5, atol=1e-7)


def test_a_step_on_its_own_start_reads_the_register_with_the_same_bits():
    """x * x binds x twice; the chain squares the register instead of loading x again.
    It must give the bits of x * y with y a copy of x, for sums and stores, at every SIMD
    level, with specials, through a foreign wrapper of the same memory, and must not be
    taken for a step whose operand merely overlaps (x[1:] * x[:-1])."""
    rng = np.random.default_rng(11)
    a = rng.standard_normal(10_007).astype(np.float32)
    a[:6] = [np.inf, -np.inf, np.nan, -0.0, 3e38, 1e-40]
    x, y = ms.from_numpy(a), ms.from_numpy(a.copy())
    x2 = ms.from_numpy(a)                       # another Tensor over x's memory
    level = ms.simd_info()["active"]
    try:
        for lvl in simd_levels():
            ms.set_simd_level(lvl)
            with np.errstate(all="ignore"):
                want_sum = ms.sum(x * y + 1.5)
                for got in (ms.sum(x * x + 1.5), ms.sum(x * x2 + 1.5)):
                    assert np.array_equal(got, want_sum, equal_nan=True)
                out, ref = ms.TensorContainer(a.shape), ms.TensorContainer(a.shape)
                out[:] = x * x2 - 2.0
                ref[:] = x * y - 2.0
                np.testing.assert_array_equal(out.numpy(), ref.numpy())
                np.testing.assert_array_equal(ref.numpy(), a * a - np.float32(2))
                s = ms.TensorContainer((a.size - 1,))
                s[:] = x[1:] * x[:-1]
                np.testing.assert_array_equal(s.numpy(), a[1:] * a[:-1])
                d = ms.TensorContainer(a.shape)
                d[:] = x - x                       # not a square: inf - inf is nan
                np.testing.assert_array_equal(d.numpy(), a - a)
    finally:
        ms.set_simd_level(level)


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16, np.int32])
@pytest.mark.parametrize("shape", [(300, 50, 40), (7, 1000), (2, 3, 4, 5), (5000, 3),
                                   (1, 7000), (6,)])
def test_arg_reductions_of_an_expression_run_in_chunks(shape, dtype, no_temporary,
                                                       monkeypatch):
    from mshadow.extension import reduce as red_mod
    monkeypatch.setattr(red_mod, "CHUNK_ELEMS", 999)    # many chunks, ragged last one
    a, b = _arrays(shape, dtype, 11)
    if np.dtype(dtype).kind == "f":
        a.flat[::37] = np.nan          # a NaN is the extreme, its first occurrence wins
        a.flat[5::41] = a.flat[4::41][:len(a.flat[5::41])]   # ties: the first index wins
    A, B = ms.from_numpy(a), ms.from_numpy(b)
    for axis in range(len(shape)):
        for red, arg in ((ms.red.maximum, np.argmax), (ms.red.minimum, np.argmin)):
            for keep in (False, True):
                if not keep and len(shape) == 1:
                    continue
                f = ms.reduce_keepdim if keep else ms.reduce_with_axis
                if dtype == np.float16 and shape[axis] - 1 > 2048:
                    # float16 holds every index only up to 2048: an error, not a rounded index
                    with pytest.raises(ms.DTypeError, match="only up to 2048"):
                        f(A * 2 - B, axis, red, True)
                    continue
                e = f(A * 2 - B, axis, red, True)
                y = ms.new_tensor(e.shape, dtype=dtype)
                y[:] = e
                want = arg(a * 2 - b, axis=axis, keepdims=keep)
                np.testing.assert_array_equal(y.numpy(), want.astype(dtype))


def test_arg_reduction_of_a_banded_window_reads_only_chunks(no_temporary, monkeypatch):
    from mshadow.extension import reduce as red_mod
    monkeypatch.setattr(red_mod, "CHUNK_ELEMS", 5000)
    x = np.random.default_rng(12).standard_normal((6, 4, 40, 30)).astype(np.float32)
    X = ms.from_numpy(x)
    e = ms.reduce_with_axis(ms.pool(X * 2, 2, 2, 2, 2, ms.red.sum), 1, ms.red.maximum, True)
    y = ms.new_tensor(e.shape)
    y[:] = e
    p = (x.astype(np.float64) * 2).reshape(6, 4, 20, 2, 15, 2).sum((3, 5))
    np.testing.assert_array_equal(y.numpy(), np.argmax(p, axis=1).astype(np.float32))


def test_a_chunked_reduction_uses_the_arena_and_may_store_into_its_source():
    from mshadow import _core
    rng = np.random.default_rng(17)
    a = rng.standard_normal((5000, 1)).astype(np.float32)
    x = ms.from_numpy(a.copy())
    _core.release_scratch()
    x[:] = ms.reduce_keepdim(x * 2 + x, 1, ms.red.sum)       # dst is the source's leaf
    np.testing.assert_array_equal(x.numpy(), a * 2 + a)
    assert max(_core.scratch_held()) >= 5000 * 4              # the chunk's scratch came back
    b = rng.standard_normal((64, 9, 50)).astype(np.float32)
    y = ms.from_numpy(b.copy())
    s = ms.new_tensor((9,))
    s[:] = ms.sumall_except_dim(ms.F(ms.op.relu, y) - y, 1)
    want = (np.maximum(b, 0) - b).astype(np.float64).sum((0, 2))
    np.testing.assert_allclose(s.numpy(), want, rtol=1e-5)


@pytest.mark.parametrize("pad", [False, True], ids=["dense", "pitched"])
def test_except_dim_merges_the_summed_rows_of_dense_leaves(pad):
    # sumall_except_dim(e, 1) of (5, 6, 9, 40): rows of 40 are too short for registers, but
    # over contiguous leaves the axes after the kept one are one row of 360, reduced in
    # registers in the documented order (one block: element i in lane i % 16, lanes added
    # pairwise in float32; the rows of each kept index added in float64); over a pitched
    # leaf the rows cannot merge and the source goes by chunks (numpy's order)
    rng = np.random.default_rng(21)
    a = (rng.standard_normal((5, 6, 9, 40)) * 1e3).astype(np.float32)
    x = ms.new_tensor(a.shape, pad=pad)
    x.numpy()[...] = a
    c = ms.TensorContainer(a.shape, pad=pad)              # a container leaf: the same plan
    c.numpy()[...] = a
    e = ms.sumall_except_dim(x * 2 - 1, 1)
    out = ms.new_tensor((6,))
    dis = ms.plan_for(out, e).disassemble()
    assert ms.plan_for(out, ms.sumall_except_dim(c * 2 - 1, 1)).disassemble() == dis
    out[:] = e
    v = a * np.float32(2) - np.float32(1)
    if pad:
        assert "stage 0: chunk" in dis, dis
        np.testing.assert_allclose(out.numpy(), v.astype(np.float64).sum((0, 2, 3)),
                                   rtol=1e-5, atol=1e-2)
        return
    assert "chain_sum_f32" in dis and "chunk" not in dis, dis
    rows = np.zeros((5, 6, 368), np.float32)      # 360 then zeros: lanes 8-15 add nothing
    rows[..., :360] = v.reshape(5, 6, 360)
    lanes = np.cumsum(rows.reshape(5, 6, 23, 16), axis=2, dtype=np.float32)[:, :, -1]
    w = 8
    while w:
        lanes[..., :w] = lanes[..., :w] + lanes[..., w:2 * w]
        w //= 2
    want = lanes[..., 0].astype(np.float64).sum(0).astype(np.float32)
    np.testing.assert_array_equal(out.numpy(), want)


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16, np.int32])
@pytest.mark.parametrize("pad", [False, True])
def test_sum_except_dim_of_a_tensor_gives_its_expressions_bits(dtype, pad):
    """sumall_except_dim / sum_rows of a tensor run the fused pass an expression of it runs:
    x and x * 1 give the same bits (as mshadow's one code path does), for every kept axis,
    close to numpy's float64 sum."""
    rng = np.random.default_rng(11)
    shape = (5, 6, 7, 300)
    a = (rng.uniform(-3, 3, shape) if np.dtype(dtype).kind == "f"
         else rng.integers(-100, 100, shape)).astype(dtype)
    x = ms.new_tensor(shape, dtype=dtype, pad=pad)
    x.numpy()[...] = a
    for keep in range(4):
        want = a.astype(np.float64).sum(tuple(k for k in range(4) if k != keep))
        got, via = (ms.new_tensor((shape[keep],), dtype=dtype) for _ in range(2))
        got[:] = ms.sumall_except_dim(x, keep)
        via[:] = ms.sumall_except_dim(x * 1, keep)
        assert got.numpy().tobytes() == via.numpy().tobytes(), keep
        np.testing.assert_allclose(got.numpy().astype(np.float64), want,
                                   rtol=2e-2 if dtype == np.float16 else 1e-5, atol=1e-3)
    m = x.numpy().reshape(-1, 300)
    t = ms.new_tensor(m.shape, dtype=dtype, pad=pad)
    t.numpy()[...] = m
    got, via = (ms.new_tensor((300,), dtype=dtype) for _ in range(2))
    got[:] = ms.sum_rows(t)
    via[:] = ms.sum_rows(t * 1)
    assert got.numpy().tobytes() == via.numpy().tobytes()


def _fold_in_order(row, name):
    """MXNet's red::maximum / minimum over ``row`` in element order (a NaN held sticks, a
    NaN value is taken; a tie keeps the value held): bit for bit what the kernels give."""
    res = row.dtype.type(-np.inf if name == "maximum" else np.inf)
    for v in row:
        keep = res != res or (res >= v if name == "maximum" else res <= v)
        res = res if keep else v
    return res


@pytest.mark.usefixtures("restore_engine_state")
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("name", ["maximum", "minimum"])
def test_extreme_of_expression_rows_bit_for_bit(dtype, name):
    """Rows reduced over their last axis in one block (the 'registers' schedule, rows of at
    least REGISTER_ROW_MIN): the vectorised extreme where no NaN and no zero extreme is in
    play, the in-order fold where one is (two NaN payloads, +0 against -0 in either order,
    only infinities), at lengths around the vector widths."""
    from mshadow.lower.cpu import REGISTER_ROW_MIN
    rng = np.random.default_rng(3)
    bits = f"u{np.dtype(dtype).itemsize}"
    quiet = int(np.array(np.nan, dtype).view(bits))   # (numpy 1.x: no uint64 | int)
    for n in sorted({REGISTER_ROW_MIN + k for k in (0, 1, 15, 63, 64, 65)} | {1000, 4096}):
        rows = [rng.standard_normal(n), np.zeros(n), -np.zeros(n),
                np.where(np.arange(n) % 2 == 0, 0.0, -0.0), np.where(np.arange(n) % 3, -0.0, 0.0),
                np.full(n, -np.inf), np.full(n, np.inf), rng.standard_normal(n) - 50]
        a = np.array(rows, dtype)
        if n > 3:
            a[1, n // 2] = -3.0 if name == "maximum" else 3.0
            nan = a[0].copy()
            v = nan.view(bits)
            v[n // 3] = quiet | 1
            v[n - 1] = quiet | 2
            a = np.vstack([a, nan[None]])
        want = np.array([_fold_in_order(r, name) for r in a], dtype)
        x = ms.new_tensor(a.shape, dtype=dtype)
        x.numpy()[...] = a
        for lvl in simd_levels():
            ms.set_simd_level(lvl)
            got = ms.new_tensor((a.shape[0],), dtype=dtype)
            got[:] = ms.reduce_except_dim(x * 1, 0, getattr(ms.red, name))
            assert got.numpy().view(bits).tobytes() == want.view(bits).tobytes(), (n, lvl)
