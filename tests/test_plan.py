"""The plan compiler (pure): fused chains, register use, composites, savers."""
import numpy as np
import pytest

import mshadow as ms
from mshadow import ir
from mshadow.lower.cpu import compile_plan, disassemble

F32 = ir.Leaf("f32", False)
F32T = ir.Leaf("f32", True)
S = ir.SCALAR


def M(op, *args, code="f32"):
    return ir.Map(op, code, *args)


def listing(key, saver="saveto", dst="f32"):
    return disassemble(compile_plan(key, dst, saver)).splitlines()[1:]


def test_e1_is_one_fused_pass():
    # w[:] = -eta * (g + lam * w)
    key = M("mul", S, M("plus", F32, M("mul", S, F32)))
    assert listing(key) == ["dst = chain_f32[s1 -> mul(_, L1) -> plus(L0, _) -> mul(s0, _)]"]
    assert compile_plan(key, "f32", "saveto").nreg == 0   # no scratch: one pass over whole rows


def test_e2_folds_the_saver_into_the_chain():
    # a += b * c + d
    key = M("plus", M("mul", F32, F32), F32)
    assert listing(key, "plusto") == ["dst = chain_f32[L0 -> mul(_, L1) -> plus(_, L2) -> plus(dst, _)]"]


def test_transposed_leaves_break_chains_and_transcendentals_fuse():
    key = M("plus", M("mul", F32T, S), F32)
    text = "\n".join(listing(key))
    assert "chain" not in text and "mul_f32(L0, s0)" in text
    key = M("mul", M("exp", F32), S)
    assert listing(key) == ["dst = chain_f32[L0 -> exp(_) -> mul(_, s0)]"]
    key = M("power", M("tanh", F32), F32)       # no packet form for power: not fused
    assert listing(key) == ["r0 = tanh_f32(L0)", "dst = power_f32(r0, L1)"]


def test_long_chains_split_at_eight_operands():
    key = F32
    for _ in range(12):
        key = M("plus", key, F32)
    lines = listing(key)
    assert len(lines) == 2 and all("chain_f32" in l for l in lines)


def test_a_value_read_twice_is_not_fused_away():
    # maxoftwo(x + 1, 0) reads its computed first argument twice
    @ms.op.define
    def maxoftwo(a, b):
        return ms.op.where(a > b, a, b)

    x = ms.from_numpy(np.array([-3.0, 0.5, 2.0], np.float32))
    dst = ms.new_tensor((3,))
    dst[:] = ms.F(maxoftwo, x + 1.0, 0.0) * 2
    assert dst.numpy().tolist() == [0.0, 3.0, 6.0]


@pytest.mark.parametrize("level", ms.simd_info()["compiled"])
def test_chains_agree_with_numpy_at_every_simd_level(level):
    if ms.simd_info()["compiled"].index(level) > ms.simd_info()["compiled"].index(ms.simd_info()["detected"]):
        pytest.skip("CPU lacks this level")
    rng = np.random.default_rng(3)
    n = 1000 + 13   # a tail after the unrolled vectors
    a, b, c = (rng.random(n).astype(np.float64) + 0.5 for _ in range(3))
    ta, tb, tc = map(ms.from_numpy, (a, b, c))
    dst = ms.from_numpy(np.ones(n))
    before = ms.simd_info()["active"]
    ms.set_simd_level(level)
    try:
        dst[:] = ms.F(ms.op.relu, 2.0 - ta / tb) * tc - ms.F(ms.op.sqrt, ta) + 1.5
        dst -= ms.F(ms.op.maximum, ta, tb) * 0.25
    finally:
        ms.set_simd_level(before)
    with np.errstate(all="ignore"):
        want = np.where(2.0 - a / b > 0, 2.0 - a / b, 0) * c - np.sqrt(a) + 1.5
    want = want - np.where(a > b, a, b) * 0.25
    np.testing.assert_array_equal(dst.numpy(), want)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_chain_tails_at_every_simd_level(dtype):
    # a chain runs 8 vectors at a time; with a vmath step, then the last whole vectors one at
    # a time and the last partial vector from zero-padded copies (without, the plain loops):
    # every n past two 8-vector AVX-512 float32 iterations, stored, summed and in place, the
    # same bits at every level
    info = ms.simd_info()
    levels = [lv for lv in info["compiled"]
              if info["compiled"].index(lv) <= info["compiled"].index(info["detected"])]
    rng = np.random.default_rng(5)
    inputs = [tuple(rng.uniform(-2, 2, n).astype(dtype) for _ in range(2)) for n in range(1, 290)]

    def run(a, b):
        ta, tb = ms.from_numpy(a.copy()), ms.from_numpy(b)
        dst, d2 = ms.new_tensor(a.shape, dtype=dtype), ms.new_tensor(a.shape, dtype=dtype)
        dst[:] = ms.F(ms.op.tanh, ta) * 0.5 + tb
        s = ms.sum(ms.F(ms.op.exp, ta * 0.1) - tb)
        d2[:] = 2.0 - ta / tb
        ta[:] = ms.F(ms.op.exp, ta) * 0.5        # in place: the tail reads before it writes
        return dst.numpy().copy(), np.array(s), d2.numpy().copy(), ta.numpy().copy()

    got = {}
    try:
        for lv in levels:
            ms.set_simd_level(lv)
            got[lv] = [run(a, b) for a, b in inputs]
    finally:
        ms.set_simd_level(info["active"])
    for (a, b), (y, s, d2, e) in zip(inputs, got[levels[0]]):
        np.testing.assert_array_equal(d2, dtype(2.0) - a / b)
        np.testing.assert_allclose(y, np.tanh(a) * 0.5 + b, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(s, np.sum(np.exp(a * 0.1) - b), rtol=1e-4, atol=1e-5)
        np.testing.assert_allclose(e, np.exp(a) * 0.5, rtol=1e-5)
    for lv in levels[1:]:
        for (a, _), p, q in zip(inputs, got[levels[0]], got[lv]):
            for k, (u, v) in enumerate(zip(p, q)):
                assert np.array_equal(u, v), (lv, a.size, k, u, v)


def test_composite_arguments_stay_live():
    key = M("sigmoid", M("plus", F32, S))
    lines = listing(key)
    # the plus result is read by the sigmoid body once: fused; constants are scalar slots
    assert lines == ["dst = chain_f32[L0 -> plus(_, s0) -> neg(_) -> exp(_) -> plus(s2, _) -> div(s1, _)]"]
    prog = compile_plan(key, "f32", "saveto")
    assert sorted(prog.const_values.values()) == [1.0, 1.0]
