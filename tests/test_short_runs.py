"""Runs shorter than a chain's unrolled width (8 vectors: 128 float32 on AVX-512) and the
gathers of a block emitted before its element-wise work.

A chain kernel takes the run left after its unrolled loop, or a whole short row (take's rows,
a short tensor, a pitched tensor's rows), step by step over its whole vectors and then the
elements after the last one (codegen_cpu._chain_short); a remap of an element-wise expression
reads all its gathers first, then one chain (lower.cpu.gathers_first). Values are checked
against numpy, exactly where the operations are exact, and bit for bit across every SIMD
level; no timing.
"""
import numpy as np
import pytest

import mshadow as ms
from mshadow.lower.cpu import GATHER_GROUP, GATHER_REGS_MAX
from mshadow.testing import assert_exact, simd_levels

LEVELS = simd_levels()
# rows shorter than, equal to and longer than one vector and than the unrolled width, for
# every compiled width (SSE2 4 / 2, AVX2 8 / 4, AVX-512 16 / 8 elements a vector)
LENGTHS = (1, 2, 3, 4, 5, 7, 8, 9, 15, 16, 17, 31, 32, 33, 63, 64, 65, 100, 127, 128, 129,
           255, 256, 257, 300, 511, 512, 513, 700)
FLOATS = (np.float16, np.float32, np.float64)
DTYPES = FLOATS + (np.int32, np.int64, np.uint8)


pytestmark = pytest.mark.usefixtures("restore_engine_state")   # (conftest.py)


def _data(shape, dtype, seed):
    """Quarters (floats) or small integers: a * 2 - b and relu of it are exact in every dtype."""
    v = np.random.default_rng(seed).integers(-40, 40, shape)
    if np.dtype(dtype).kind == "f":
        return (v / 4).astype(dtype)
    if np.dtype(dtype).kind == "u":
        return np.abs(v).astype(dtype) // 3
    return v.astype(dtype)


def _every_level(run):
    """run() at every SIMD level (one thread, so each row is one block); all bit-identical."""
    ms.set_num_threads(1)
    first = None
    for level in LEVELS:
        ms.set_simd_level(level)
        got = run()
        if first is None:
            first = got
        else:
            assert_exact(got, first, f"level {level} differs from {LEVELS[0]}")
    return first


def _relu_ref(a, b):
    c = a * np.asarray(2, a.dtype) - b
    return np.where(c > 0, c, np.zeros((), a.dtype)).astype(a.dtype)


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("cols", (1, 3, 4, 8, 15, 16, 17, 33, 64, 65, 100, 128, 129, 300))
def test_take_of_an_expression_per_row(dtype, cols):
    a, b = _data((37, cols), dtype, 1), _data((37, cols), dtype, 2)
    idx = np.random.default_rng(cols).integers(0, 37, 23)
    A, B = ms.from_numpy(a), ms.from_numpy(b)
    for itype in (np.int32, np.float32):
        I = ms.from_numpy(idx.astype(itype))
        out = ms.new_tensor((23, cols), dtype=dtype)

        def run():
            out[:] = ms.take(I, ms.F(ms.op.relu, A * 2 - B))
            return out.numpy().copy()
        assert_exact(_every_level(run), _relu_ref(a, b)[idx], f"take {np.dtype(dtype)} {cols}")


@pytest.mark.parametrize("dtype", FLOATS, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("n", LENGTHS)
def test_short_tensors_exact(dtype, n):
    """A 1-D tensor is one row: the whole statement is one short run."""
    a, b, c = (_data(n, dtype, s) for s in (3, 4, 5))
    A, B, C = map(ms.from_numpy, (a, b, c))
    y = ms.new_tensor((n,), dtype=dtype)

    def run():
        y[:] = ms.F(ms.op.relu, A * 2 - B) * C + 0.5
        y[:] += ms.F(ms.op.maximum, A, C) - B * 0.25   # the saver's step in the chain too
        return y.numpy().copy()
    got = _every_level(run)
    if dtype is np.float16:   # every operator rounds to half: emulate in float32
        f = np.float32
        a, b, c = a.astype(f), b.astype(f), c.astype(f)
        h = lambda v: v.astype(np.float16).astype(f)   # noqa: E731
        want = h(h(h(h(_relu_ref(a, b)) * c) + f(0.5)))
        want = h(want + h(h(np.maximum(a, c)) - h(b * f(0.25))))
        want = want.astype(np.float16)
    else:
        want = (_relu_ref(a, b) * c + dtype(0.5))
        want = want + (np.maximum(a, c) - b * dtype(0.25))
    assert_exact(got, want.astype(dtype))


@pytest.mark.parametrize("dtype", (np.float32, np.float64), ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("n", (3, 16, 17, 64, 100, 129, 513))
def test_short_runs_of_every_step(dtype, n):
    """Every chain step (scalar and tensor operands, either side, the transcendentals) on a
    short run gives the same bits at every level, and numpy's values."""
    rng = np.random.default_rng(n)
    a = (rng.random(n) + 0.5).astype(dtype)
    b = (rng.random(n) + 0.5).astype(dtype)
    A, B = ms.from_numpy(a), ms.from_numpy(b)
    y = ms.new_tensor((n,), dtype=dtype)
    F, op = ms.F, ms.op
    exact = [
        (lambda: (A + B) * 2.0 - B / A, lambda: (a + b) * dtype(2) - b / a),
        (lambda: 3.0 / (2.0 - A) + F(op.minimum, B, A) * (1.0 - B),
         lambda: dtype(3) / (dtype(2) - a) + np.minimum(b, a) * (dtype(1) - b)),
        (lambda: F(op.sqrt, A * A) + F(op.abs, -B) + F(op.square, B),
         lambda: np.sqrt(a * a) + np.abs(-b) + b * b),
        (lambda: F(op.relu, A - 1.0) - F(op.maximum, B, 1.0),
         lambda: np.maximum(a - dtype(1), dtype(0)) - np.maximum(b, dtype(1))),
    ]
    for e, ref in exact:
        def run():
            y[:] = e()
            return y.numpy().copy()
        with np.errstate(all="ignore"):
            assert_exact(_every_level(run), ref().astype(dtype))
    approx = [
        (lambda: F(op.exp, A - 1.0) * 0.5, lambda: np.exp(a - dtype(1)) * dtype(0.5)),
        (lambda: F(op.log, A) + F(op.log1p, B), lambda: np.log(a) + np.log1p(b)),
        (lambda: F(op.tanh, A - B), lambda: np.tanh(a - b)),
    ]
    for e, ref in approx:
        def run():
            y[:] = e()
            return y.numpy().copy()
        got = _every_level(run)
        eps = np.finfo(dtype).eps   # log(a) + log1p(b) cancels: a bound on the terms' scale
        np.testing.assert_allclose(got, ref().astype(dtype), rtol=8 * eps, atol=16 * eps)


def _lane_sum(v):
    """ms.sum's order for one block: element i to lane i % 16 in order, lanes added pairwise."""
    lanes = [np.cumsum(v[k::16], dtype=v.dtype)[-1] if len(v[k::16]) else v.dtype.type(0)
             for k in range(16)]
    w = 8
    while w:
        for k in range(w):
            lanes[k] = v.dtype.type(lanes[k] + lanes[k + w])
        w //= 2
    return lanes[0]


@pytest.mark.parametrize("dtype", (np.float32, np.float64), ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("n", (5, 16, 17, 40, 64, 100, 127, 128, 129, 200, 1000, 4096))
def test_sum_of_a_short_run_keeps_the_lane_order(dtype, n):
    """A summing chain adds the short run's elements into the same lanes, in element order."""
    rng = np.random.default_rng(n)
    a, b = (rng.random(n) - 0.3).astype(dtype), (rng.random(n) + 0.1).astype(dtype)
    A, B = ms.from_numpy(a), ms.from_numpy(b)
    got = _every_level(lambda: np.asarray(ms.sum(A * 3.0 - B)))
    assert_exact(got, np.asarray(_lane_sum(a * dtype(3) - b)))


@pytest.mark.parametrize("cols", (7, 16, 50, 64, 130))
def test_pitched_rows(cols):
    """A column slice of a wider tensor (a view read in place): every row is a block."""
    a = _data((9, cols + 5), np.float32, 7)
    b = _data((9, cols), np.float32, 8)
    A = ms.slice_axis(ms.from_numpy(a), 1, 2, 2 + cols)
    B = ms.from_numpy(b)
    y = ms.new_tensor((9, cols))

    def run():
        y[:] = ms.F(ms.op.relu, A * 2 - B) + 1.0
        return y.numpy().copy()
    assert_exact(_every_level(run), _relu_ref(a[:, 2:2 + cols], b) + np.float32(1))


def _listing(e, dst):
    return ms.plan_for(dst, e).disassemble().splitlines()[1:]


def test_take_of_an_expression_gathers_first_then_one_chain():
    a = ms.from_numpy(_data((50, 64), np.float32, 1))
    b = ms.from_numpy(_data((50, 64), np.float32, 2))
    out = ms.new_tensor((20, 64))
    for itype in (np.int32, np.float32):
        I = ms.from_numpy(np.arange(20).astype(itype))
        lines = _listing(ms.take(I, ms.F(ms.op.relu, a * 2 - b)), out)
        assert lines == ["r0 = g_take_f32(L0)", "r1 = g_take_f32(L3)",
                         "dst = chain_f32[r0 -> mul(_, s0) -> minus(_, r1) -> relu(_)]"]
    lines = _listing(ms.take(I, ms.F(ms.op.exp, a) * 0.5 + ms.F(ms.op.tanh, b)), out)
    assert lines == ["r0 = g_take_f32(L0)", "r1 = g_take_f32(L3)",
                     "r0 = chain_f32[r0 -> exp(_) -> mul(_, s0)]",
                     "dst = chain_f32[r1 -> tanh(_) -> plus(r0, _)]"]


def test_gathers_first_keeps_values_with_casts_and_reuse():
    """float16 (casts between the steps), a value read twice (a composite), a plusto saver:
    moving the gathers renames registers and the values do not change."""
    rng = np.random.default_rng(4)
    for dtype in (np.float16, np.float32, np.float64):
        a, b, c = (_data((30, 20), dtype, s) for s in (1, 2, 3))
        A, B, C = map(ms.from_numpy, (a, b, c))
        idx = rng.integers(0, 30, 11)
        I = ms.from_numpy(idx.astype(np.int32))
        out = ms.new_tensor((11, 20), dtype=dtype)
        out[:] = ms.from_numpy(_data((11, 20), dtype, 9))
        start = out.numpy().copy()
        e = ms.F(ms.op.sigmoid, A * 0.25) * B + ms.F(ms.op.relu, C - A)
        out += ms.take(I, e)
        f = np.float32 if dtype is np.float16 else dtype
        af, bf, cf = a.astype(f), b.astype(f), c.astype(f)
        ref = (1 / (1 + np.exp(-(af * f(0.25))))) * bf + np.maximum(cf - af, 0)
        want = start.astype(f) + ref[idx]
        tol = 1e-2 if dtype is np.float16 else 1e-5
        np.testing.assert_allclose(out.numpy().astype(np.float64), want, rtol=tol, atol=tol)


def test_gathers_first_moves_many_gathers_in_groups():
    """More gathers than a group: each group goes up to its first gather, and a chain joins
    each group's values."""
    n = GATHER_GROUP + 4
    ts = [ms.from_numpy(_data((10, 8), np.float32, s)) for s in range(n)]
    e = ts[0] * 1.0
    for t in ts[1:]:
        e = e + t
    I = ms.from_numpy(np.array([3, 1, 4], np.int32))
    out = ms.new_tensor((3, 8))
    prog = ms.plan_for(out, ms.take(I, e)).program
    kinds = [i.kernel[1][:6] if i.kernel[0] == "k" else "chain" for i in prog.instrs]
    assert kinds == ["g_take"] * GATHER_GROUP + ["chain"] + ["g_take"] * 4 + ["chain"]
    assert prog.nreg <= GATHER_REGS_MAX
    out[:] = ms.take(I, e)
    want = ts[0].numpy()[[3, 1, 4]] * np.float32(1)
    for t in ts[1:]:
        want = want + t.numpy()[[3, 1, 4]]
    assert_exact(out.numpy(), want)
    # a few gathers: all first, one chain
    e = ts[0] * 2.0 + ts[1] - ts[2]
    lines = _listing(ms.take(I, e), out)
    assert [l.split(" = ")[1][:6] for l in lines] == ["g_take"] * 3 + ["chain_"]
