"""Gathers and windows (pad, take, concat, pool, im2col, ...) over expressions, as in
mshadow: ``pool(F<relu>(x * 2), ...)``. The expression is evaluated when the assignment runs
(lazily), into a temporary the gather reads (docs/architecture.md: the rule for temporaries)."""
import numpy as np
import pytest

import mshadow as ms

RNG = np.random.default_rng(11)


def test_pool_of_an_expression_nested_in_arithmetic():
    x = RNG.uniform(-1, 1, (2, 3, 8, 8)).astype(np.float32)
    tx = ms.from_numpy(x)
    y = ms.TensorContainer((2, 3, 4, 4))
    y[:] = ms.pool(ms.F(ms.op.relu, tx * 2), 2, 2, 2, 2) * 2 + 1
    want = np.maximum(x * 2, 0).reshape(2, 3, 4, 2, 4, 2).max(axis=(3, 5)) * 2 + 1
    np.testing.assert_array_equal(y.numpy(), want)


def test_mshadow_nesting_example():
    # nhidden = F<relu>(reshape(pool<red::maximum>(x * 2, 2, 2, 2, 2), shape)) * 2
    x = RNG.uniform(-1, 1, (2, 1, 4, 4)).astype(np.float32)
    tx = ms.from_numpy(x)
    out = ms.new_tensor((2, 4))
    out[:] = ms.F(ms.op.relu, ms.reshape(ms.pool(tx * 2, 2, 2, 2, 2, ms.red.maximum),
                                         (2, 4))) * 2
    pooled = (x * 2).reshape(2, 1, 2, 2, 2, 2).max(axis=(3, 5))
    np.testing.assert_array_equal(out.numpy(), np.maximum(pooled.reshape(2, 4), 0) * 2)


def test_im2col_of_an_expression_matches_materialising_it():
    img = RNG.uniform(-1, 1, (3, 6, 6)).astype(np.float64)
    t = ms.from_numpy(img)
    first = ms.new_tensor((3, 6, 6), dtype=np.float64)
    first[:] = ms.F(ms.op.exp, t) - 1
    a = ms.TensorContainer((27, 16), dtype=np.float64)
    b = ms.TensorContainer((27, 16), dtype=np.float64)
    a[:] = ms.unpack_patch2col(ms.F(ms.op.exp, t) - 1, 3, 3, 1)
    b[:] = ms.unpack_patch2col(first, 3, 3, 1)
    np.testing.assert_array_equal(a.numpy(), b.numpy())


@pytest.mark.parametrize("saver", ["saveto", "plusto", "minusto"])
def test_take_pad_concat_over_expressions(saver):
    m = RNG.uniform(-2, 2, (4, 5)).astype(np.float32)
    tm = ms.from_numpy(m)
    idx = ms.from_numpy(np.array([2.0, 0.0, 1.0], np.float32))
    cases = [
        (ms.take(idx + 1, tm * 3 - 1), (m * 3 - 1)[[3, 1, 2]]),
        (ms.pad(ms.F(ms.op.relu, tm), 1), np.pad(np.maximum(m, 0), 1)),
        (ms.concat(tm + 1, ms.flip(tm, 0), 0), np.concatenate([m + 1, m[::-1]], 0)),
    ]
    for e, want in cases:
        d0 = RNG.uniform(-1, 1, want.shape).astype(np.float32)
        dst = ms.from_numpy(d0.copy())
        if saver == "saveto":
            dst[:] = e
            expect = want
        elif saver == "plusto":
            dst += e
            expect = d0 + want
        else:
            dst -= e
            expect = d0 - want
        np.testing.assert_array_equal(dst.numpy(), expect)


def test_the_source_is_evaluated_when_the_assignment_runs():
    x = np.ones((1, 4, 4), np.float32)
    tx = ms.from_numpy(x)
    e = ms.pool(tx + 1, 2, 2, 2, 2)       # built now ...
    x[...] = 5                            # ... evaluated later: sees 5 + 1
    out = ms.new_tensor((1, 2, 2))
    out[:] = e
    np.testing.assert_array_equal(out.numpy(), np.full((1, 2, 2), 6, np.float32))
    x[...] = 7
    out[:] = e                            # and again, fresh
    np.testing.assert_array_equal(out.numpy(), np.full((1, 2, 2), 8, np.float32))


def test_a_source_expression_that_reads_the_destination():
    m = RNG.uniform(-2, 2, (4, 5)).astype(np.float32)
    t = ms.from_numpy(m.copy())
    t[:] = ms.take(ms.from_numpy(np.array([3.0, 2.0, 1.0, 0.0], np.float32)), t * 2)
    np.testing.assert_array_equal(t.numpy(), (m * 2)[::-1])


def test_index_expressions_are_checked_when_evaluated():
    m = ms.new_tensor((4, 5), 1.0)
    idx = ms.from_numpy(np.array([0.0, 1.0], np.float32))
    e = ms.take(idx + 3, m)               # built fine: the index is not read yet
    out = ms.new_tensor((2, 5), 9.0)
    with pytest.raises(IndexError, match=r"take: index values must lie in \[0, 4\), got \[3.0, 4.0\]"):
        out[:] = e
    np.testing.assert_array_equal(out.numpy(), np.full((2, 5), 9.0, np.float32))  # untouched


def test_kcomplex_sources_are_refused():
    a = ms.new_tensor((2, 2), 1.0)
    with pytest.raises(TypeError, match="pad: a dot.*kComplex.*assign it to a tensor first"):
        ms.pad(ms.dot(a, a), 1)


def test_views_and_transposes_over_gathers():
    m = RNG.uniform(-2, 2, (4, 5)).astype(np.float32)
    tm = ms.from_numpy(m)
    idx = ms.from_numpy(np.array([2.0, 0.0, 1.0], np.float32))
    out = ms.new_tensor((5, 3))
    out[:] = ms.take(idx, tm * 2).T + 1
    np.testing.assert_array_equal(out.numpy(), (m * 2)[[2, 0, 1]].T + 1)
    out2 = ms.new_tensor((3, 5))
    out2[:] = ms.flip(ms.take(idx, tm) + tm[0:3], 1)
    np.testing.assert_array_equal(out2.numpy(), (m[[2, 0, 1]] + m[0:3])[:, ::-1])


def test_views_of_views_of_a_gather_still_evaluate_it():
    m = RNG.uniform(-2, 2, (3, 4)).astype(np.float32)
    tm = ms.from_numpy(m)
    idx = ms.from_numpy(np.array([1.0, 2.0], np.float32))
    out = ms.new_tensor((2, 4))
    out[:] = ms.take(idx, tm).T.T                     # found by the random trees
    np.testing.assert_array_equal(out.numpy(), m[[1, 2]])
    out[:] = ms.flip(ms.mirror(ms.flip(ms.take(idx, tm * 2), 0)), 0)
    np.testing.assert_array_equal(out.numpy(), (m * 2)[[1, 2]][:, ::-1])
