"""broadcast_multi_axes, transpose_indices, take_grad and Random.get_rand_int(tensor):
numpy is the oracle (np.broadcast_to, np.transpose of an arange, a loop adding rows in
increasing i, numpy's MT19937); bad input raises typed errors before anything is stored."""
import itertools

import numpy as np
import pytest

import mshadow as ms
from mshadow.testing import tensor as T, padded as _padded, evaluate as _eval

RNG = np.random.default_rng(5)
DTYPES = [np.float32, np.float64, np.float16, np.int32, np.uint8, np.int64, np.int8]


# ---- broadcast_multi_axes -----------------------------------------------------------------

@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape, axes, sizes", [
    ((1, 3, 1), (0, 2), (4, 5)),
    ((2, 1, 3, 1), (1, 3), (3, 2)),
    ((1, 1), (0, 1), (2, 3)),
    ((1, 4), (0,), (3,)),
    ((5, 1), (1,), (7,)),
    ((2, 3), (), ()),
    ((1, 2, 1, 3), (-4, -2), (2, 2)),
])
def test_broadcast_multi_axes_matches_numpy(dtype, shape, axes, sizes):
    a = (np.arange(int(np.prod(shape))) % 50).reshape(shape).astype(dtype)
    want_shape = list(shape)
    for ax, s in zip(axes, sizes):
        want_shape[ax] = s
    want = np.broadcast_to(a, want_shape)
    for src in (_padded(a), T(a)):
        e = ms.broadcast_multi_axes(src, axes, sizes)
        assert tuple(e.shape) == tuple(want_shape)
        np.testing.assert_array_equal(_eval(e), want)


def test_broadcast_multi_axes_of_expressions_and_views_fuses():
    x = RNG.uniform(-1, 1, (1, 4, 1)).astype(np.float32)
    y = RNG.uniform(-1, 1, (3, 4, 2)).astype(np.float32)
    tx, ty = T(x), T(y)
    e = ms.broadcast_multi_axes(ms.F(ms.op.relu, tx * 2 - 0.5), (0, 2), (3, 2)) + ty
    np.testing.assert_array_equal(_eval(e), np.maximum(x * 2 - 0.5, 0) + y)
    # a view of a view is one view: no temporary, the plan reads x in place
    plan = ms.plan_for(ms.new_tensor((3, 4, 2)), e).disassemble()
    assert "chain" in plan
    # over a transposed tensor and a flip
    m = RNG.uniform(-1, 1, (4, 1)).astype(np.float64)
    e = ms.broadcast_multi_axes(T(m).T, (0,), (3,))
    np.testing.assert_array_equal(_eval(e), np.broadcast_to(m.T, (3, 4)))
    e = ms.broadcast_multi_axes(ms.flip(T(m), 0), (1,), (2,))
    np.testing.assert_array_equal(_eval(e), np.broadcast_to(m[::-1], (4, 2)))
    # over a gather: reads its temporary
    idx = T(np.array([2, 0], np.int32))
    src = T(np.arange(3, dtype=np.float32).reshape(3, 1))
    e = ms.broadcast_multi_axes(ms.take(idx, src), (1,), (4,))
    np.testing.assert_array_equal(_eval(e), np.broadcast_to([[2.0], [0.0]], (2, 4)))


def test_broadcast_multi_axes_equals_broadcast_to():
    a = RNG.uniform(-1, 1, (1, 3, 1, 2)).astype(np.float32)
    e1 = ms.broadcast_multi_axes(T(a), (0, 2), (2, 5))
    e2 = ms.broadcast_to(T(a), (2, 3, 5, 2))
    np.testing.assert_array_equal(_eval(e1), _eval(e2))


@pytest.mark.parametrize("axes, sizes, match", [
    ((0, 2), (3,), r"ndim of axes and sizes must be equal"),
    ((0, 1, 2, 0), (1, 1, 1, 1), r"Number of broadcasting axes must be smaller than the source "
                                 r"ndim, number of axes=4 dimsrc=3"),
    ((3,), (2,), r"broadcast axis \(keepdim\) out of bound, all axes must be between 0 and 2, "
                 r"given axes\[0\] = 3\."),
    ((1,), (2,), r"Size of the dimension of the broadcasting axis must be 1, src_shape\[1\]=4\."),
    ((2, 0), (2, 2), r"The given axes must be in increasing order"),
    ((0, 0), (2, 2), r"The given axes must be in increasing order"),
    ((0,), (-1,), r"sizes must be >= 0"),
])
def test_broadcast_multi_axes_errors(axes, sizes, match):
    src = T(np.zeros((1, 4, 1), np.float32))
    with pytest.raises(ms.ShapeError, match=match):
        ms.broadcast_multi_axes(src, axes, sizes)


def test_broadcast_multi_axes_bad_source():
    with pytest.raises(TypeError, match="must be a tensor or an expression"):
        ms.broadcast_multi_axes([[1.0]], (0,), (2,))


# ---- transpose_indices --------------------------------------------------------------------

def _transpose_indices_ref(idx, src_shape, axes):
    """Where each flat index of an array of ``src_shape`` lands after np.transpose."""
    n = int(np.prod(src_shape))
    positions = np.transpose(np.arange(n).reshape(src_shape), axes).ravel()
    where = np.empty(n, np.int64)
    where[positions] = np.arange(n)
    return where[np.asarray(idx).astype(np.int64)]


@pytest.mark.parametrize("src_shape, axes", [
    ((2, 3, 4), (2, 0, 1)), ((2, 3, 4), (0, 1, 2)), ((2, 3, 4), (1, 0, 2)),
    ((5, 7), (1, 0)), ((6,), (0,)), ((2, 1, 3, 2), (3, 1, 0, 2)),
])
@pytest.mark.parametrize("dtype", [np.int64, np.int32, np.float32, np.float64])
def test_transpose_indices_matches_numpy(src_shape, axes, dtype):
    n = int(np.prod(src_shape))
    idx = RNG.permutation(n)[: min(n, 12)].reshape(-1, 1).repeat(2, axis=1).astype(dtype)
    e = ms.transpose_indices(_padded(idx), src_shape, axes)
    assert e.dtype == dtype and tuple(e.shape) == idx.shape
    got = _eval(e)
    np.testing.assert_array_equal(got, _transpose_indices_ref(idx, src_shape, axes).astype(dtype))
    # all of them, as a 1-D index
    every = np.arange(n).astype(dtype)
    np.testing.assert_array_equal(_eval(ms.transpose_indices(T(every), src_shape, axes)),
                                  _transpose_indices_ref(every, src_shape, axes).astype(dtype))


def test_transpose_indices_of_an_expression_and_truncation():
    # float indices are truncated (static_cast<index_t>), then mapped; the source fuses
    a = np.array([0.4, 1.9, 5.2, 23.99], np.float32)
    e = ms.transpose_indices(T(a) * 1 + 0, (2, 3, 4), (2, 0, 1)) * 2
    want = _transpose_indices_ref(np.trunc(a), (2, 3, 4), (2, 0, 1)) * 2
    np.testing.assert_array_equal(_eval(e), want.astype(np.float32))
    # the mshadow example: transpose of a (2, 4, 3) with axes (2, 0, 1) gives (3, 2, 4)
    src = np.arange(24).reshape(2, 4, 3)
    out = np.transpose(src, (2, 0, 1)).ravel()
    got = _eval(ms.transpose_indices(T(np.arange(24, dtype=np.int64)), (2, 4, 3), (2, 0, 1)))
    np.testing.assert_array_equal(out[got], np.arange(24))


@pytest.mark.parametrize("src_shape, axes, text", [
    ((2, 3, 4), (0, 2, 2), "(0,2,2)"), ((2, 3, 4), (0, 1), "(0,1)"),
    ((2, 3, 4), (0, 1, 3), "(0,1,3)"), ((6,), (1,), "(1,)"), ((2, 3), (-1, 0), "(-1,0)")])
def test_transpose_indices_invalid_axes(src_shape, axes, text):
    with pytest.raises(ms.ShapeError) as info:
        ms.transpose_indices(T(np.zeros(3, np.int64)), src_shape, axes)
    assert str(info.value) == (f"Invalid axes input! All elements of axes must be between 0 and "
                               f"{len(src_shape)}, find axes={text}")


def test_transpose_indices_empty_source_shape():
    with pytest.raises(ms.ShapeError, match=r"src_shape \(2,0,3\) has no elements"):
        ms.transpose_indices(T(np.zeros(3, np.int64)), (2, 0, 3), (1, 0, 2))
    e = ms.transpose_indices(T(np.zeros(0, np.int64)), (2, 0, 3), (1, 0, 2))
    assert _eval(e).shape == (0,)                      # no index, nothing to map
    with pytest.raises(ms.ShapeError, match="non-negative"):
        ms.transpose_indices(T(np.zeros(3, np.int64)), (2, -1), (1, 0))
    with pytest.raises(TypeError, match="must be a tensor or an expression"):
        ms.transpose_indices([0, 1], (2,), (0,))


# ---- take_grad ----------------------------------------------------------------------------

def _take_grad_ref(idx, src, input_dim, acc_dtype):
    out = np.zeros((input_dim, src.shape[1]), acc_dtype)
    for i, k in enumerate(np.asarray(idx).astype(np.int64)):
        out[k] = (out[k] + src[i].astype(acc_dtype)).astype(acc_dtype)   # increasing i
    return out.astype(src.dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("idx_dtype", [np.float32, np.int32, np.int64, np.uint8])
def test_take_grad_matches_a_loop(dtype, idx_dtype):
    src = (np.arange(42) % 23 - 7).reshape(7, 6).astype(dtype)
    idx = np.array([3, 0, 3, 1, 3, 0, 4], idx_dtype)
    acc = {np.float16: np.float32}.get(dtype, dtype)
    want = _take_grad_ref(idx, src, 6, acc)
    got = _eval(ms.take_grad(T(idx), _padded(src), 6))
    np.testing.assert_array_equal(got, want)
    assert (got[[2, 5]] == 0).all()                    # rows no index names are zero


def test_take_grad_sums_in_increasing_i_in_the_storage_type():
    # 1 + 1e8 - 1e8 in float32 depends on the order: increasing i gives 0, not 1
    src = np.array([[1.0], [1e8], [-1e8]], np.float32)
    got = _eval(ms.take_grad(T(np.array([0, 0, 0], np.int32)), T(src), 1))
    assert got[0, 0] == np.float32(np.float32(1.0) + np.float32(1e8)) + np.float32(-1e8)
    # integer sums wrap like the type
    src = np.array([[100], [100], [-50]], np.int8)
    got = _eval(ms.take_grad(T(np.zeros(3, np.int64)), T(src), 2))
    assert got.tolist() == [[np.int8(100 + 100 - 50 - 256)], [0]]


def test_take_grad_inverts_take_and_fuses():
    rng = np.random.default_rng(1)
    K, N, C = 9, 40, 700                      # C > 512: several blocks a row
    idx = rng.integers(0, K, N).astype(np.int32)
    g = rng.uniform(-1, 1, (N, C))
    want = _take_grad_ref(idx, g, K, np.float64)
    e = ms.take_grad(T(idx), T(g), K)
    assert e.dtype == np.float64 and tuple(e.shape) == (K, C)
    np.testing.assert_array_equal(_eval(e), want)
    w = rng.uniform(-1, 1, (K, C))
    dst = ms.from_numpy(w.copy())
    dst -= ms.take_grad(T(idx), T(g), K) * 0.5           # the embedding update
    np.testing.assert_array_equal(dst.numpy(), w - want * 0.5)
    old = ms.get_num_threads()
    for threads in (1, 2):
        ms.set_num_threads(threads)
        try:
            big_idx = rng.integers(0, 300, 200).astype(np.int64)
            big = rng.uniform(-1, 1, (200, 300))
            np.testing.assert_array_equal(_eval(ms.take_grad(T(big_idx), T(big), 300)),
                                          _take_grad_ref(big_idx, big, 300, np.float64))
        finally:
            ms.set_num_threads(old)


def test_take_grad_of_expressions():
    g = RNG.uniform(-1, 1, (5, 3)).astype(np.float32)
    idx = np.array([1.0, 0.0, 1.0, 2.0, 0.0], np.float32)
    e = ms.take_grad(T(idx) * 1, ms.F(ms.op.relu, T(g) * 2), 3) + 1
    want = _take_grad_ref(idx, np.maximum(g * 2, 0), 3, np.float32) + 1
    np.testing.assert_array_equal(_eval(e), want)
    # the index expression is range-checked at assignment time, before any store
    e = ms.take_grad(T(idx) * 2, T(g), 3)
    dst = ms.new_tensor((3, 3), init=-1)
    with pytest.raises(IndexError, match=r"take_grad: index values must lie in \[0, 3\)"):
        dst[:] = e
    assert (dst.numpy() == -1).all()


def test_take_grad_index_errors_before_any_store():
    src = T(np.ones((3, 2), np.float32))
    idx = ms.from_numpy(np.array([0, 1, 2], np.int32))
    e = ms.take_grad(idx, src, 3)
    idx.numpy()[2] = 3                        # out of range after the expression was built
    dst = ms.new_tensor((3, 2), init=-1)
    with pytest.raises(IndexError, match=r"take_grad: index values must lie in \[0, 3\), "
                                         r"got \[0, 3\]"):
        dst[:] = e
    assert (dst.numpy() == -1).all()
    with pytest.raises(IndexError, match="must lie in"):
        ms.take_grad(T(np.array([-1, 0, 0], np.int64)), src, 3)
    with pytest.raises(IndexError, match="must be finite"):
        ms.take_grad(T(np.array([np.nan, 0, 0], np.float32)), src, 3)
    with pytest.raises(IndexError, match="must lie in"):
        ms.take_grad(T(np.array([0, 0, 0], np.int32)), src, 0)


def test_take_grad_shape_errors():
    src = T(np.ones((3, 2), np.float32))
    with pytest.raises(ms.ShapeError, match="one entry per row"):
        ms.take_grad(T(np.zeros(2, np.int32)), src, 4)
    with pytest.raises(ms.ShapeError, match="must be 1-D"):
        ms.take_grad(T(np.zeros((3, 1), np.int32)), src, 4)
    with pytest.raises(ms.ShapeError, match="must be 2-D"):
        ms.take_grad(T(np.zeros(3, np.int32)), T(np.ones(3, np.float32)), 4)
    with pytest.raises(ms.ShapeError, match="input_dim must be >= 0"):
        ms.take_grad(T(np.zeros(3, np.int32)), src, -1)
    with pytest.raises(TypeError):
        ms.take_grad(T(np.zeros(3, np.int32)), src, 2.5)
    # an empty index gives zeros; input_dim 0 an empty result
    out = _eval(ms.take_grad(T(np.zeros(0, np.int32)), T(np.ones((0, 2), np.float32)), 3))
    np.testing.assert_array_equal(out, np.zeros((3, 2), np.float32))
    assert ms.take_grad(T(np.zeros(0, np.int32)), T(np.ones((0, 2), np.float32)), 0).shape \
        == ms.Shape(0, 2)


# ---- Random.get_rand_int(tensor) ----------------------------------------------------------

def _raw(seed, n):
    r = ms.Random(seed=seed)
    return np.array([r.get_rand_int() for _ in range(n)], np.uint64)


@pytest.mark.parametrize("dtype", [np.int64, np.int32])
def test_get_rand_int_fills_with_the_scalar_sequence(dtype):
    want = _raw(5489, 30)
    assert int(want[0]) == 3499211612                 # std::mt19937's first draw for 5489
    t = ms.new_tensor((30,), init=0, dtype=dtype)
    r = ms.Random(seed=5489)
    assert r.get_rand_int(t) is t
    got = t.numpy()
    if dtype == np.int64:
        np.testing.assert_array_equal(got, want.astype(np.int64))
    else:
        np.testing.assert_array_equal(got.view(np.uint32), want.astype(np.uint32))
        assert (got < 0).any()                        # the top bit reads as the sign
    # the sequence goes on: scalar draws after a fill, as after 30 scalar draws
    assert r.get_rand_int() == int(_raw(5489, 31)[-1])


def test_get_rand_int_pitched_and_numpy_targets_and_determinism():
    want = _raw(7, 7 * 5)
    backing = np.full((7, 8), -99, np.int64)
    padded = ms.from_numpy(backing[:, :5])
    assert padded.stride == 8
    ms.Random(seed=7).GetRandInt(padded)              # the C++ spelling
    np.testing.assert_array_equal(backing[:, :5].ravel(), want.astype(np.int64))
    assert (backing[:, 5:] == -99).all()              # padding untouched
    u = np.zeros(35, np.uint32)                       # C++'s Tensor<cpu, 1, unsigned>
    assert ms.Random(seed=7).get_rand_int(u) is u
    np.testing.assert_array_equal(u, want.astype(np.uint32))
    a = np.zeros((5, 7), np.int64)
    ms.Random(seed=7).get_rand_int(a)
    np.testing.assert_array_equal(a.ravel(), want.astype(np.int64))
    # deterministic per seed, shared with the samplers' stream
    r1, r2 = ms.Random(seed=3), ms.Random(seed=3)
    t1, t2 = ms.new_tensor((4,), dtype=np.int64), ms.new_tensor((4,), dtype=np.int64)
    r1.get_rand_int(t1)
    r2.get_rand_int(t2)
    np.testing.assert_array_equal(t1.numpy(), t2.numpy())
    f1, f2 = ms.new_tensor((3,)), ms.new_tensor((3,))
    r1.sample_uniform(f1)
    r2.sample_uniform(f2)
    np.testing.assert_array_equal(f1.numpy(), f2.numpy())
    r1.seed(3)
    r1.get_rand_int(t1)
    np.testing.assert_array_equal(t1.numpy(), t2.numpy())
    # a Random of any dtype fills integer tensors (the C++ method takes unsigned always)
    t = ms.new_tensor((2,), dtype=np.int64)
    ms.Random(seed=1, dtype=np.float64).get_rand_int(t)
    np.testing.assert_array_equal(t.numpy(), _raw(1, 2).astype(np.int64))


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16, np.uint8, np.int8])
def test_get_rand_int_rejects_other_dtypes(dtype):
    t = ms.new_tensor((3,), init=0, dtype=dtype)
    with pytest.raises(ms.DTypeError, match="GetRandInt: .* int32 or int64"):
        ms.Random().get_rand_int(t)
    assert (t.numpy() == 0).all()


def test_get_rand_int_rejects_read_only_and_non_tensors():
    a = np.zeros(3, np.uint32)
    a.flags.writeable = False
    with pytest.raises(ValueError, match="read-only"):
        ms.Random().get_rand_int(a)
    b = np.zeros(3, np.int64)
    b.flags.writeable = False
    with pytest.raises(ValueError, match="read-only"):
        ms.Random().get_rand_int(b)
    with pytest.raises(TypeError, match="expected a tensor or a numpy array"):
        ms.Random().get_rand_int([0, 0])
