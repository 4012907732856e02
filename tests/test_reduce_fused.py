"""ms.sum: a full reduction evaluated in the same pass as its expression, with the summation
order docs/reduce_nn.md documents (checked against an independent numpy transcription)."""
import numpy as np
import pytest

import mshadow as ms
from mshadow.testing import simd_levels


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
    assert lines == ["r0 = mul_f32(L0, L1)", "dst = reduce_sum_f32(r0)"]


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
