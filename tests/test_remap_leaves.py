"""take, mat_choose_row_element and unpack_patch2col over an element-wise source read it per
element (gather.remap_leaves): ``take(i, f(a, b))`` is ``f(take(i, a), take(i, b))``, a
tensor leaf is read as it is, a view leaf in place through its strides (a 2-D ViewLeaf), any
other leaf through a temporary. Checked against numpy: structure, dtypes, laziness, savers,
aliasing of the destination, errors, nesting and threads."""
import types

import numpy as np
import pytest

import mshadow as ms
from mshadow import ir
from mshadow.lower.cpu import read_in_place
from mshadow.readers import READERS_BY_NAME

ViewLeaf = ms._core.ViewLeaf


def _rng(seed):
    return np.random.default_rng(seed)


def _data(shape, dtype, seed=0):
    """Values every dtype holds exactly, whose sums and doublings stay exact (quarters for
    floats, small integers for int32)."""
    v = _rng(seed).integers(-40, 40, shape)
    if np.dtype(dtype).kind == "f":
        return (v / 4).astype(dtype)
    return v.astype(dtype)


def _t(a):
    return ms.from_numpy(np.ascontiguousarray(a))


def _run(e, shape, dtype=np.float32):
    y = ms.new_tensor(shape, dtype=dtype)
    y[:] = e
    return y.numpy().copy()


def ref_im2col(img, ky, kx, sy, sx=None, dy=1, dx=None):
    sx = sy if sx is None else sx
    dx = dy if dx is None else dx
    C, H, W = img.shape[-3:]
    x = img.reshape(-1, C, H, W)
    N = x.shape[0]
    oh = (H - (dy * (ky - 1) + 1)) // sy + 1
    ow = (W - (dx * (kx - 1) + 1)) // sx + 1
    out = np.empty((C, ky, kx, N, oh, ow), img.dtype)
    for i in range(ky):
        for j in range(kx):
            win = x[:, :, i * dy:i * dy + sy * (oh - 1) + 1:sy,
                    j * dx:j * dx + sx * (ow - 1) + 1:sx]
            out[:, i, j] = win.transpose(1, 0, 2, 3)
    return out.reshape(C * ky * kx, N * oh * ow)


def _gathers(e):
    """Each gather of ``e``'s IR at its top (not under another gather), with what it reads:
    ``srcs`` the objects bound for its sources read in place (None for a staged source),
    ``tensors`` the tensors under them, ``deferred`` whether a source is staged."""
    out = []

    def walk(node, i):
        if type(node) is ir.Gather:
            g = types.SimpleNamespace(name=node.reader, srcs=[], tensors=[], deferred=False)
            j = i + 1
            for s in node.srcs:
                if read_in_place(READERS_BY_NAME[node.reader], s):
                    obj = e.leaves[j]
                    g.srcs.append(obj)
                    g.tensors.append(obj.src if isinstance(obj, ViewLeaf) else obj)
                else:
                    g.srcs.append(None)
                    g.tensors.append(None)
                    g.deferred = True
                j += len(ir.leaves(s))
            out.append(g)
            return j
        if type(node) in (ir.Leaf, ir.View):
            return i + len(ir.leaves(node))
        for c in node.children:
            i = walk(c, i)
        return i
    walk(e.key, 0)
    return out


def _leaves(e):
    """The gathers of an expression every leaf of which is a gather."""
    gathers = _gathers(e)
    assert gathers and not _reads_outside_gathers(e.key), e.key
    return gathers


def _reads_outside_gathers(node):
    if type(node) is ir.Gather:
        return False
    if type(node) in (ir.Leaf, ir.View, ir.ImplicitDot):
        return True
    return any(_reads_outside_gathers(c) for c in node.children)


# ---- 1. structure ------------------------------------------------------------------------

def test_tensor_leaves_are_read_directly_no_temporary():
    a, b = _data((5, 4), np.float32, 1), _data((5, 4), np.float32, 2)
    A, B = _t(a), _t(b)
    idx = _t(np.array([4, 0, 2, 2], np.int32))
    e = ms.take(idx, ms.F(ms.op.relu, A * 2 - B))
    leaves = _leaves(e)
    assert [lf.name for lf in leaves] == ["take", "take"]
    assert leaves[0].srcs[0] is A and leaves[1].srcs[0] is B
    assert leaves[0].srcs[1] is idx and leaves[1].srcs[1] is idx
    assert leaves[0].tensors[0] is A and leaves[1].tensors[0] is B
    assert all(not lf.deferred for lf in leaves)
    np.testing.assert_array_equal(_run(e, (4, 4)), np.maximum(a * 2 - b, 0)[[4, 0, 2, 2]])

    cidx = _t(np.array([3, 0, 1, 1, 2], np.int32))
    e = ms.mat_choose_row_element(ms.F(ms.op.relu, A * 2 - B), cidx)
    leaves = _leaves(e)
    assert [lf.name for lf in leaves] == ["choose_row", "choose_row"]
    assert leaves[0].srcs[0] is A and leaves[1].srcs[0] is B
    assert leaves[0].srcs[1] is cidx
    assert all(not lf.deferred for lf in leaves)
    np.testing.assert_array_equal(_run(e, (5,)),
                                  np.maximum(a * 2 - b, 0)[np.arange(5), [3, 0, 1, 1, 2]])

    x, z = _data((2, 3, 5, 6), np.float32, 3), _data((2, 3, 5, 6), np.float32, 4)
    X, Z = _t(x), _t(z)
    e = ms.unpack_patch2col(ms.F(ms.op.relu, X * 2 - Z), 3, 2, 1)
    leaves = _leaves(e)
    assert [lf.name for lf in leaves] == ["im2col", "im2col"]
    assert len(leaves[0].srcs) == 1 and leaves[0].srcs[0] is X and leaves[1].srcs[0] is Z
    assert all(not lf.deferred for lf in leaves)
    want = ref_im2col(np.maximum(x * 2 - z, 0), 3, 2, 1)
    np.testing.assert_array_equal(_run(e, want.shape), want)


def test_view_leaves_are_read_in_place():
    a = _data((5, 4), np.float32, 5)
    at = _data((4, 5), np.float32, 6)
    bias = _data((4,), np.float32, 7)
    big = _data((7, 4), np.float32, 8)
    A, AT, Bias, Big = _t(a), _t(at), _t(bias), _t(big)
    idx = _t(np.array([1, 4, 0, 0, 3, 2], np.int32))
    e = ms.take(idx, ms.broadcast(Bias, (5, 4), 1) + ms.flip(A, 0) * 2 - AT.T
                + ms.slice_axis(Big, 0, 2, 7))
    leaves = _leaves(e)
    assert len(leaves) == 4
    for lf, under in zip(leaves, (Bias, A, AT, Big)):
        assert isinstance(lf.srcs[0], ViewLeaf), lf.srcs
        assert lf.srcs[0].src is under
        assert lf.tensors[0] is under
        assert not lf.deferred
    want = (bias[None, :] + a[::-1] * 2 - at.T + big[2:7])[[1, 4, 0, 0, 3, 2]]
    np.testing.assert_array_equal(_run(e, (6, 4)), want)

    cidx = _t(np.array([0, 3, 3, 1, 2], np.int32))
    e = ms.mat_choose_row_element(ms.flip(A, 1) - AT.T, cidx)
    leaves = _leaves(e)
    assert [lf.srcs[0].src for lf in leaves] == [A, AT]
    assert all(isinstance(lf.srcs[0], ViewLeaf) for lf in leaves)
    want = (a[:, ::-1] - at.T)[np.arange(5), [0, 3, 3, 1, 2]]
    np.testing.assert_array_equal(_run(e, (5,)), want)

    x = _data((2, 3, 6, 7), np.float32, 9)
    X = _t(x)
    e = ms.unpack_patch2col(ms.slice_axis(ms.flip(X, 3), 3, 0, 6) * 2 + ms.slice_axis(X, 3, 1, 7),
                            2, 3, 1, 2)
    leaves = _leaves(e)
    assert all(isinstance(lf.srcs[0], ViewLeaf) and lf.srcs[0].src is X for lf in leaves)
    want = ref_im2col(x[..., ::-1][..., :6] * 2 + x[..., 1:7], 2, 3, 1, 2)
    np.testing.assert_array_equal(_run(e, want.shape), want)


def test_transpose_of_an_elementwise_expression_goes_to_its_leaves():
    a, b = _data((4, 6), np.float64, 10), _data((4, 6), np.float64, 11)
    A, B = _t(a), _t(b)
    idx = _t(np.array([5, 0, 3], np.int32))
    e = ms.take(idx, (A * 2 - B).T)
    leaves = _leaves(e)
    assert [lf.srcs[0].src for lf in leaves] == [A, B]
    assert all(isinstance(lf.srcs[0], ViewLeaf) for lf in leaves)
    np.testing.assert_array_equal(_run(e, (3, 4), np.float64), (a * 2 - b).T[[5, 0, 3]])


def test_an_index_expression_keeps_one_gather_over_a_temporary():
    a, b = _data((5, 4), np.float32, 12), _data((5, 4), np.float32, 13)
    A, B = _t(a), _t(b)
    idx = _t(np.array([1.0, 0.0, 3.0], np.float32))
    e = ms.take(idx + 1, A * 2 - B)
    leaves = _leaves(e)
    assert len(leaves) == 1
    np.testing.assert_array_equal(_run(e, (3, 4)), (a * 2 - b)[[2, 1, 4]])


# ---- 2. values against numpy -------------------------------------------------------------

DTYPES = [np.float32, np.float64, np.float16, np.int32]
TAKE_CASES = [  # (src rows, cols, index)
    (5, 4, [4, 0, 2, 2, 1, 3]),
    (1, 7, [0, 0, 0]),            # one-row source
    (6, 1, [5, 1, 1, 0]),         # one column
    (3, 5, []),                   # empty index
    (9, 3, [8] * 5),              # every row the same
    (40, 33, list(_rng(1).integers(0, 40, 57))),
]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("case", range(len(TAKE_CASES)))
def test_take_values(dtype, case):
    K, C, index = TAKE_CASES[case]
    a, b = _data((K, C), dtype, case), _data((K, C), dtype, case + 100)
    bias = _data((C,), dtype, case + 200)
    A, B, Bias = _t(a), _t(b), _t(bias)
    idx = np.array(index, np.int32)
    I = _t(idx)
    want = np.maximum(a * 2 - b, 0)[idx]
    np.testing.assert_array_equal(_run(ms.take(I, ms.F(ms.op.relu, A * 2 - B)), (len(idx), C),
                                       dtype), want)
    e = ms.take(I, ms.flip(A, 0) + ms.broadcast(Bias, (K, C), 1) - ms.flip(B, 1))
    want = (a[::-1] + bias[None, :] - b[:, ::-1])[idx]
    np.testing.assert_array_equal(_run(e, (len(idx), C), dtype), want)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("case", range(len(TAKE_CASES)))
def test_choose_row_values(dtype, case):
    K, C, _ = TAKE_CASES[case]
    a, b = _data((K, C), dtype, case), _data((K, C), dtype, case + 100)
    A, B = _t(a), _t(b)
    idx = _rng(case).integers(0, C, K).astype(np.int32)
    I = _t(idx)
    rows = np.arange(K)
    e = ms.mat_choose_row_element(ms.F(ms.op.relu, A * 2 - B), I)
    np.testing.assert_array_equal(_run(e, (K,), dtype), np.maximum(a * 2 - b, 0)[rows, idx])
    e = ms.mat_choose_row_element(ms.flip(A, 0) - ms.flip(B, 1) + A, I)
    np.testing.assert_array_equal(_run(e, (K,), dtype), (a[::-1] - b[:, ::-1] + a)[rows, idx])


IM2COL_CASES = [  # (image shape, (ky, kx, sy, sx, dy, dx))
    ((1, 3, 3), (2, 2, 1, 1, 1, 1)),
    ((2, 2, 5, 6), (3, 2, 1, 2, 1, 1)),
    ((2, 7, 7), (3, 3, 2, 2, 1, 1)),
    ((1, 2, 7, 8), (2, 3, 1, 2, 2, 3)),
    ((3, 1, 4, 1), (2, 1, 1, 1, 1, 1)),     # one column
    ((1, 1, 1, 5), (1, 5, 1, 1, 1, 1)),     # one row
    ((2, 3, 2, 4, 5), (2, 2, 1, 1, 1, 1)),  # 5-D
]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("case", range(len(IM2COL_CASES)))
def test_im2col_values(dtype, case):
    shape, (ky, kx, sy, sx, dy, dx) = IM2COL_CASES[case]
    x, z = _data(shape, dtype, case), _data(shape, dtype, case + 50)
    X, Z = _t(x), _t(z)
    e = ms.unpack_patch2col(ms.F(ms.op.relu, X * 2 - Z), ky, kx, sy, sx, dy, dx)
    want = ref_im2col(np.maximum(x * 2 - z, 0), ky, kx, sy, sx, dy, dx)
    np.testing.assert_array_equal(_run(e, want.shape, dtype), want)
    e = ms.unpack_patch2col(ms.flip(X, len(shape) - 1) - Z, ky, kx, sy, sx, dy, dx)
    want = ref_im2col(x[..., ::-1] - z, ky, kx, sy, sx, dy, dx)
    np.testing.assert_array_equal(_run(e, want.shape, dtype), want)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_random_floats_and_transcendental_ops(dtype):
    rng = _rng(21)
    a = rng.standard_normal((30, 17)).astype(dtype)
    b = rng.standard_normal((30, 17)).astype(dtype)
    A, B = _t(a), _t(b)
    idx = rng.integers(0, 30, 45).astype(np.int32)
    I = _t(idx)
    got = _run(ms.take(I, A * B + a.dtype.type(0.5) - B / A), (45, 17), dtype)
    np.testing.assert_array_equal(got, (a * b + dtype(0.5) - b / a)[idx])
    got = _run(ms.take(I, ms.F(ms.op.exp, A) - ms.F(ms.op.tanh, B.T.T)), (45, 17), dtype)
    np.testing.assert_allclose(got, (np.exp(a) - np.tanh(b))[idx], rtol=1e-6, atol=1e-6)
    cidx = rng.integers(0, 17, 30).astype(np.int32)
    got = _run(ms.mat_choose_row_element(ms.F(ms.op.tanh, A) * B, _t(cidx)), (30,), dtype)
    np.testing.assert_allclose(got, (np.tanh(a) * b)[np.arange(30), cidx], rtol=1e-6)


def test_float_index_tensors_truncate_toward_zero():
    a = _data((4, 3), np.float64, 30)
    A = _t(a)
    fidx = np.array([2.9, 0.99, 3.5, 1.0, 0.0], np.float32)
    got = _run(ms.take(_t(fidx), A * 2 + A), (5, 3), np.float64)
    np.testing.assert_array_equal(got, (a * 2 + a)[[2, 0, 3, 1, 0]])
    cidx = np.array([2.7, 0.2, 1.999, 1.0], np.float64)
    got = _run(ms.mat_choose_row_element(ms.flip(A, 0) - A, _t(cidx)), (4,), np.float64)
    np.testing.assert_array_equal(got, (a[::-1] - a)[np.arange(4), [2, 0, 1, 1]])


def test_tcast_mixes_dtypes_per_leaf():
    rng = _rng(31)
    a32 = rng.standard_normal((6, 5)).astype(np.float32)
    b64 = rng.standard_normal((6, 5))
    A32, B64 = _t(a32), _t(b64)
    idx = np.array([5, 2, 2, 0], np.int32)
    I = _t(idx)
    got = _run(ms.take(I, ms.tcast(np.float64, A32) + B64), (4, 5), np.float64)
    np.testing.assert_array_equal(got, (a32.astype(np.float64) + b64)[idx])
    got = _run(ms.take(I, ms.tcast(np.float32, B64 * 2) - A32), (4, 5), np.float32)
    np.testing.assert_array_equal(got, ((b64 * 2).astype(np.float32) - a32)[idx])
    e = ms.take(I, ms.tcast(np.float64, ms.flip(A32, 1)) * B64.T.T)
    assert isinstance(_leaves(e)[0].srcs[0], ViewLeaf)
    got = _run(e, (4, 5), np.float64)
    np.testing.assert_array_equal(got, (a32[:, ::-1].astype(np.float64) * b64)[idx])
    i32 = _data((6, 5), np.int32, 32)
    cidx = np.array([0, 4, 1, 3, 2, 2], np.int32)
    got = _run(ms.mat_choose_row_element(ms.tcast(np.float32, _t(i32)) * 0.5 + A32, _t(cidx)),
               (6,), np.float32)
    np.testing.assert_array_equal(got, (i32.astype(np.float32) * np.float32(0.5) + a32)
                                  [np.arange(6), cidx])
    x16 = _data((2, 2, 4, 4), np.float16, 33)
    x64 = _data((2, 2, 4, 4), np.float64, 34)
    got = _run(ms.unpack_patch2col(ms.tcast(np.float64, _t(x16)) - _t(x64), 2, 2, 1),
               (8, 18), np.float64)
    np.testing.assert_array_equal(got, ref_im2col(x16.astype(np.float64) - x64, 2, 2, 1))


VIEWS_2D = {   # name -> (build from (A (5,4), AT (4,5), BIG (8,6), BIAS (4,), COL (5,)), numpy)
    "broadcast_row": (lambda A, AT, BIG, BIAS, COL: ms.broadcast(BIAS, (5, 4), 1),
                      lambda a, at, big, bias, col: np.broadcast_to(bias, (5, 4))),
    "broadcast_col": (lambda A, AT, BIG, BIAS, COL: ms.broadcast(COL, (5, 4), 0),
                      lambda a, at, big, bias, col: np.broadcast_to(col[:, None], (5, 4))),
    "broadcast_to": (lambda A, AT, BIG, BIAS, COL: ms.broadcast_to(ms.reshape(BIAS, (1, 4)),
                                                                    (5, 4)),
                     lambda a, at, big, bias, col: np.broadcast_to(bias, (5, 4))),
    "flip0": (lambda A, AT, BIG, BIAS, COL: ms.flip(A, 0), lambda a, at, big, bias, col: a[::-1]),
    "flip1": (lambda A, AT, BIG, BIAS, COL: ms.flip(A, 1),
              lambda a, at, big, bias, col: a[:, ::-1]),
    "T": (lambda A, AT, BIG, BIAS, COL: AT.T, lambda a, at, big, bias, col: at.T),
    "swapaxis": (lambda A, AT, BIG, BIAS, COL: ms.swapaxis(AT, 0, 1),
                 lambda a, at, big, bias, col: at.T),
    "transpose_axes": (lambda A, AT, BIG, BIAS, COL: ms.transpose_axes(AT, (1, 0)),
                       lambda a, at, big, bias, col: at.T),
    "slice_rows": (lambda A, AT, BIG, BIAS, COL: ms.slice_axis(ms.slice_axis(BIG, 0, 2, 7), 1,
                                                               1, 5),
                   lambda a, at, big, bias, col: big[2:7, 1:5]),
    "crop": (lambda A, AT, BIG, BIAS, COL: ms.crop(BIG, (5, 4), 1, 2),
             lambda a, at, big, bias, col: big[1:6, 2:6]),
    "reshape": (lambda A, AT, BIG, BIAS, COL: ms.reshape(AT, (5, 4)),
                lambda a, at, big, bias, col: at.reshape(5, 4)),
    "flip_of_T": (lambda A, AT, BIG, BIAS, COL: ms.flip(AT.T, 1),
                  lambda a, at, big, bias, col: at.T[:, ::-1]),
}


@pytest.mark.parametrize("name", sorted(VIEWS_2D))
@pytest.mark.parametrize("dtype", [np.float32, np.int32])
def test_every_view_kind_as_a_leaf(name, dtype):
    build, ref = VIEWS_2D[name]
    arrays = [_data(s, dtype, k) for k, s in enumerate([(5, 4), (4, 5), (8, 6), (4,), (5,)])]
    tensors = [_t(x) for x in arrays]
    v = ref(*arrays)
    a = arrays[0]
    A = tensors[0]
    idx = np.array([4, 4, 0, 3, 1, 2, 0], np.int32)
    got = _run(ms.take(_t(idx), build(*tensors) * 2 - A), (7, 4), dtype)
    np.testing.assert_array_equal(got, (v * 2 - a)[idx])
    cidx = np.array([3, 0, 1, 2, 3], np.int32)
    got = _run(ms.mat_choose_row_element(A + build(*tensors), _t(cidx)), (5,), dtype)
    np.testing.assert_array_equal(got, (a + v)[np.arange(5), cidx])


# ---- 3. laziness -------------------------------------------------------------------------

def test_sources_are_read_when_the_assignment_runs():
    a, b = _data((5, 4), np.float32, 40), _data((5, 4), np.float32, 41)
    A, B = _t(a.copy()), _t(b)
    idx = np.array([3, 1, 1, 4], np.int32)
    I = _t(idx)
    e1 = ms.take(I, ms.F(ms.op.relu, A * 2 - B))
    e2 = ms.take(I, ms.flip(A, 0) + B)
    e3 = ms.mat_choose_row_element(A.T.T * 2 + ms.flip(A, 1), _t(np.array([0, 3, 2, 1, 0],
                                                                           np.int32)))
    x = _data((2, 2, 4, 5), np.float32, 42)
    X = _t(x.copy())
    e4 = ms.unpack_patch2col(ms.flip(X, 3) + X, 2, 2, 1)
    new = _data((5, 4), np.float32, 43)
    A[:] = _t(new)
    X[:] = 1.5
    np.testing.assert_array_equal(_run(e1, (4, 4)), np.maximum(new * 2 - b, 0)[idx])
    np.testing.assert_array_equal(_run(e2, (4, 4)), (new[::-1] + b)[idx])
    np.testing.assert_array_equal(_run(e3, (5,)),
                                  (new * 2 + new[:, ::-1])[np.arange(5), [0, 3, 2, 1, 0]])
    np.testing.assert_array_equal(_run(e4, (8, 24)), np.full((8, 24), 3.0, np.float32))
    I[:] = _t(np.array([0, 0, 2, 2], np.int32))      # the index too
    np.testing.assert_array_equal(_run(e2, (4, 4)), (new[::-1] + b)[[0, 0, 2, 2]])


# ---- 4. savers ---------------------------------------------------------------------------

SAVERS = ["=", "+=", "-=", "*=", "/="]


def _save(y, e, saver):
    if saver == "=":
        y[:] = e
    elif saver == "+=":
        y += e
    elif saver == "-=":
        y -= e
    elif saver == "*=":
        y *= e
    else:
        y /= e


def _ref_save(y0, want, saver):
    return {"=": lambda: want, "+=": lambda: y0 + want, "-=": lambda: y0 - want,
            "*=": lambda: y0 * want, "/=": lambda: y0 / want}[saver]()


@pytest.mark.parametrize("saver", SAVERS)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_every_saver(saver, dtype):
    rng = _rng(50)
    a = rng.uniform(1, 2, (6, 5)).astype(dtype)
    b = rng.uniform(0, 0.5, (6, 5)).astype(dtype)
    A, B = _t(a), _t(b)
    idx = np.array([5, 0, 0, 3, 2, 1, 4], np.int32)
    cases = [
        (ms.take(_t(idx), A * 2 - B), (a * 2 - b)[idx]),
        (ms.take(_t(idx), ms.flip(A, 1) + B.T.T), (a[:, ::-1] + b)[idx]),
        (ms.mat_choose_row_element(ms.flip(A, 0) - B, _t(np.array([4, 0, 1, 2, 3, 4], np.int32))),
         (a[::-1] - b)[np.arange(6), [4, 0, 1, 2, 3, 4]]),
    ]
    x = rng.uniform(1, 2, (2, 2, 5, 5)).astype(dtype)
    X = _t(x)
    cases.append((ms.unpack_patch2col(X * 2 + ms.flip(X, 3), 2, 2, 1),
                  ref_im2col(x * 2 + x[..., ::-1], 2, 2, 1)))
    for e, want in cases:
        y0 = rng.uniform(1, 2, want.shape).astype(dtype)
        y = _t(y0.copy())
        _save(y, e, saver)
        np.testing.assert_array_equal(y.numpy(), _ref_save(y0, want, saver))


# ---- 5. aliasing of the destination ------------------------------------------------------

def test_take_of_the_destination_with_a_permutation():
    d = _data((6, 5), np.float32, 60)
    perm = np.array([3, 5, 0, 1, 4, 2], np.int32)
    D = _t(d.copy())
    D[:] = ms.take(_t(perm), D * 2 + 1)
    np.testing.assert_array_equal(D.numpy(), (d * 2 + 1)[perm])
    D = _t(d.copy())
    D[:] = ms.take(_t(perm), ms.flip(D, 0) - D)
    np.testing.assert_array_equal(D.numpy(), (d[::-1] - d)[perm])
    D = _t(d.copy())
    D += ms.take(_t(perm), ms.flip(D, 1) * 2)
    np.testing.assert_array_equal(D.numpy(), d + (d[:, ::-1] * 2)[perm])
    sq = _data((5, 5), np.float64, 61)
    S = _t(sq.copy())
    S[:] = ms.take(_t(perm[perm < 5]), S.T + S)
    np.testing.assert_array_equal(S.numpy(), (sq.T + sq)[perm[perm < 5]])


def test_choose_row_into_a_row_of_its_source():
    m = _data((6, 6), np.float32, 62)
    M = _t(m.copy())
    z = M[0]                                   # a tensor over the first row of M
    idx = np.array([0, 0, 0, 0, 0, 0], np.int32)
    # out[i] = M[idx[i]][5 - i]: row 0 is written while later entries still read it
    z[:] = ms.mat_choose_row_element(ms.flip(M.T, 0) * 2 + 1, _t(idx))
    want = m.copy()
    want[0] = (m.T[::-1] * 2 + 1)[np.arange(6), idx]
    np.testing.assert_array_equal(M.numpy(), want)
    M = _t(m.copy())
    z = M[0]
    idx2 = np.array([0, 3, 0, 5, 0, 0], np.int32)
    z[:] = ms.mat_choose_row_element(ms.flip(M.T, 0) - M, _t(idx2))
    want = m.copy()
    want[0] = (m.T[::-1] - m)[np.arange(6), idx2]
    np.testing.assert_array_equal(M.numpy(), want)


def test_im2col_of_a_reshape_of_its_destination():
    N, C, H, W = 2, 3, 4, 5
    cols0 = _data((C, N * H * W), np.float32, 63)
    cols = _t(cols0.copy())
    cols[:] = ms.unpack_patch2col(ms.flip(ms.reshape(cols, (N, C, H, W)), 3) * 2 + 1, 1, 1, 1)
    img = cols0.reshape(N, C, H, W)
    np.testing.assert_array_equal(cols.numpy(), ref_im2col(img[..., ::-1] * 2 + 1, 1, 1, 1))


# ---- 6. errors ---------------------------------------------------------------------------

def test_index_out_of_range_raises_before_any_store():
    a, b = _data((4, 3), np.float32, 70), _data((4, 3), np.float32, 71)
    A, B = _t(a), _t(b)
    with pytest.raises(IndexError):
        ms.take(_t(np.array([0, 4], np.int32)), A * 2 + ms.flip(B, 0))
    with pytest.raises(IndexError):
        ms.take(_t(np.array([-1, 0], np.int32)), A * 2 + B)
    with pytest.raises(IndexError):
        ms.mat_choose_row_element(ms.flip(A, 1) + B, _t(np.array([0, 1, 3, 2], np.int32)))
    idx = _t(np.array([0, 1, 2], np.int32))
    e = ms.take(idx, A * 2 + ms.flip(B, 0))
    cidx = _t(np.array([0, 1, 2, 2], np.int32))
    c = ms.mat_choose_row_element(ms.flip(A, 1) + B, cidx)
    idx.numpy()[2] = 4                     # out of range after the expression was built
    cidx.numpy()[1] = 3
    for expr, shape in ((e, (3, 3)), (c, (4,))):
        y0 = _rng(72).standard_normal(shape).astype(np.float32)
        for saver in SAVERS:
            y = _t(y0.copy())
            with pytest.raises(IndexError):
                _save(y, expr, saver)
            np.testing.assert_array_equal(y.numpy(), y0)


@pytest.mark.parametrize("kind", ["take", "choose", "im2col"])
def test_a_freed_tensor_under_a_view_leaf(kind):
    a = _data((4, 4), np.float32, 73)
    A = ms.new_tensor((4, 4))
    A.numpy()[...] = a
    B = _t(a + 1)
    if kind == "take":
        e = ms.take(_t(np.array([1, 0], np.int32)), ms.flip(A, 0) + B)
    elif kind == "choose":
        e = ms.mat_choose_row_element(A.T + B, _t(np.array([1, 0, 3, 2], np.int32)))
    else:
        X = ms.new_tensor((1, 2, 4, 4))
        A = X
        e = ms.unpack_patch2col(ms.flip(X, 3) + 1, 2, 2, 1)
    assert any(isinstance(s, ViewLeaf) and s.src is A for lf in _gathers(e) for s in lf.srcs)
    y0 = np.full(e.shape, 5, np.float32)
    y = _t(y0.copy())
    ms.free_space(A)
    with pytest.raises(ms.FreedTensorError):
        y[:] = e
    np.testing.assert_array_equal(y.numpy(), y0)


@pytest.mark.parametrize("under_view", [False, True])
def test_a_container_resized_after_the_expression_was_built(under_view):
    c = ms.TensorContainer((4, 3))
    c.numpy()[...] = _data((4, 3), np.float32, 74)
    B = _t(_data((4, 3), np.float32, 75))
    src = (ms.flip(c, 1) if under_view else c) * 2 + B
    cases = [ms.take(_t(np.array([3, 0], np.int32)), src),
             ms.mat_choose_row_element(src, _t(np.array([0, 2, 1, 1], np.int32)))]
    img = ms.TensorContainer((1, 2, 4, 4))
    img.numpy()[...] = _data((1, 2, 4, 4), np.float32, 76)
    cases.append(ms.unpack_patch2col((ms.flip(img, 3) if under_view else img) + 1, 2, 2, 1))
    c.resize((5, 3))
    img.resize((1, 2, 5, 5))
    for e in cases:
        y0 = np.full(e.shape, 7, np.float32)
        y = _t(y0.copy())
        with pytest.raises(ms.ShapeError):
            y[:] = e
        np.testing.assert_array_equal(y.numpy(), y0)


# ---- 7. nesting --------------------------------------------------------------------------

def test_take_over_pad_and_pool_leaves():
    a = _data((4, 5), np.float32, 80)
    b = _data((6, 7), np.float32, 81)
    A, B = _t(a), _t(b)
    idx = np.array([5, 0, 2, 2], np.int32)
    e = ms.take(_t(idx), ms.pad(A * 2, 1) + ms.flip(B, 1))
    lf = _leaves(e)
    assert not isinstance(lf[0].srcs[0], ViewLeaf) and lf[0].srcs[0] is not A
    want = (np.pad(a * 2, 1) + b[:, ::-1])[idx]
    np.testing.assert_array_equal(_run(e, (4, 7)), want)
    big = _data((8, 10), np.float32, 82)
    e = ms.take(_t(np.array([3, 0, 1], np.int32)), ms.pool(_t(big) + 1, 2, 2, 2, 2) - 1)
    pooled = (big + 1).reshape(4, 2, 5, 2).max(axis=(1, 3))
    np.testing.assert_array_equal(_run(e, (3, 5)), (pooled - 1)[[3, 0, 1]])
    cidx = np.array([4, 0, 2, 2], np.int32)
    e = ms.mat_choose_row_element(ms.pool(_t(big), 2, 2, 2, 2) * 2 + ms.pool(_t(big), 2, 2, 2, 2),
                                  _t(cidx))
    pb = big.reshape(4, 2, 5, 2).max(axis=(1, 3))
    np.testing.assert_array_equal(_run(e, (4,)), (pb * 2 + pb)[np.arange(4), cidx])


def test_im2col_of_5d_and_3d_expressions():
    x5 = _data((2, 2, 3, 5, 6), np.float64, 83)
    y5 = _data((2, 2, 3, 5, 6), np.float64, 84)
    e = ms.unpack_patch2col(ms.F(ms.op.relu, _t(x5)) - _t(y5) * 2, 2, 3, 1, 2, 2, 1)
    want = ref_im2col(np.maximum(x5, 0) - y5 * 2, 2, 3, 1, 2, 2, 1)
    np.testing.assert_array_equal(_run(e, want.shape, np.float64), want)
    x3 = _data((3, 6, 6), np.float64, 85)
    e = ms.unpack_patch2col(ms.flip(_t(x3), 2) * _t(x3) + 1, 3, 3, 2)
    want = ref_im2col(x3[..., ::-1] * x3 + 1, 3, 3, 2)
    np.testing.assert_array_equal(_run(e, want.shape, np.float64), want)


@pytest.mark.parametrize("view", ["flip0", "flip2", "slice_h", "crop", "broadcast_to"])
def test_im2col_of_views_whose_leading_axes_do_not_merge(view):
    x = _data((2, 3, 6, 7), np.float32, 86)
    X = _t(x)
    v, ref = {
        "flip0": (lambda: ms.flip(X, 0), x[::-1]),
        "flip2": (lambda: ms.flip(X, 2), x[:, :, ::-1]),
        "slice_h": (lambda: ms.slice_axis(X, 2, 1, 5), x[:, :, 1:5]),
        "crop": (lambda: ms.crop(X, (4, 5), 1, 2), x[:, :, 1:5, 2:7]),
        "broadcast_to": (lambda: ms.broadcast_to(ms.slice_axis(X, 0, 0, 1), (2, 3, 6, 7)),
                         np.broadcast_to(x[:1], x.shape)),
    }[view]
    e = ms.unpack_patch2col(v() * 2, 2, 2, 1)
    want = ref_im2col(ref * 2, 2, 2, 1)
    np.testing.assert_array_equal(_run(e, want.shape), want)
    X.numpy()[...] = 0.5                  # a temporary is evaluated when the assignment runs
    np.testing.assert_array_equal(_run(e, want.shape), np.ones(want.shape, np.float32))


def test_two_and_three_levels_deep():
    rng = _rng(87)
    a = rng.standard_normal((7, 4))
    A = _t(a)
    i = np.array([2, 0, 1, 1, 4], np.int32)
    j = np.array([6, 3, 0, 5, 5], np.int32)
    I, J = _t(i), _t(j)
    got = _run(ms.take(I, ms.F(ms.op.exp, ms.take(J, A) - 1)), (5, 4), np.float64)
    np.testing.assert_allclose(got, np.exp(a[j] - 1)[i], rtol=1e-6)
    k = np.array([4, 4, 0], np.int32)
    got = _run(ms.take(_t(k), ms.take(I, ms.take(J, ms.flip(A, 1)) * 2 + 1) - A[0:5]),
               (3, 4), np.float64)
    np.testing.assert_array_equal(got, ((a[:, ::-1][j] * 2 + 1)[i] - a[0:5])[k])
    cidx = np.array([3, 0, 1, 2, 2], np.int32)
    got = _run(ms.mat_choose_row_element(ms.take(J, A.T.T * 2) + 1, _t(cidx)), (5,), np.float64)
    np.testing.assert_array_equal(got, (a[j] * 2 + 1)[np.arange(5), cidx])
    x = rng.standard_normal((2, 2, 5, 5))
    X = _t(x)
    e = ms.unpack_patch2col(ms.pad(ms.F(ms.op.relu, X), 1) + 1, 3, 3, 1)
    want = ref_im2col(np.pad(np.maximum(x, 0), ((0, 0), (0, 0), (1, 1), (1, 1))) + 1, 3, 3, 1)
    np.testing.assert_array_equal(_run(e, want.shape, np.float64), want)
    cols = ms.unpack_patch2col(ms.flip(X, 3) - X, 2, 2, 1)
    got = _run(ms.take(_t(np.array([7, 0, 3], np.int32)), cols * 2 + cols), (3, 32), np.float64)
    c = ref_im2col(x[..., ::-1] - x, 2, 2, 1)
    np.testing.assert_array_equal(got, (c * 2 + c)[[7, 0, 3]])


# ---- 8. threads --------------------------------------------------------------------------

def test_two_threads_equal_one_bit_for_bit():
    rng = _rng(90)
    a = rng.standard_normal((4000, 300)).astype(np.float32)
    b = rng.standard_normal((4000, 300)).astype(np.float32)
    A, B = _t(a), _t(b)
    idx = rng.integers(0, 4000, 4000).astype(np.int32)
    cidx = rng.integers(0, 300, 4000).astype(np.int32)
    x = rng.standard_normal((4, 8, 40, 40)).astype(np.float32)
    X = _t(x)
    exprs = [
        (ms.take(_t(idx), ms.F(ms.op.tanh, A) * 2 - ms.flip(B, 0)), (4000, 300)),
        (ms.mat_choose_row_element(A * B + ms.flip(A, 1), _t(cidx)), (4000,)),
        (ms.unpack_patch2col(ms.F(ms.op.relu, X) - ms.flip(X, 3), 3, 3, 1), (72, 4 * 38 * 38)),
    ]
    old = ms.get_num_threads()
    results = []
    try:
        for n in (1, 2):
            ms.set_num_threads(n)
            results.append([_run(e, s) for e, s in exprs])
    finally:
        ms.set_num_threads(old)
    for r1, r2 in zip(*results):
        assert r1.tobytes() == r2.tobytes()
    np.testing.assert_allclose(results[0][0], (np.tanh(a) * 2 - b[::-1])[idx], rtol=1e-6,
                               atol=1e-6)
    np.testing.assert_array_equal(results[0][1], (a * b + a[:, ::-1])[np.arange(4000), cidx])
    np.testing.assert_array_equal(results[0][2],
                                  ref_im2col(np.maximum(x, 0) - x[..., ::-1], 3, 3, 1))


# ---- more: index aliasing, n-ary and user-defined operators, small integer dtypes -----------

def test_an_index_that_is_a_row_of_the_destination():
    m = np.array([[3, 0, 2, 1], [1, 1, 1, 1], [0, 3, 3, 2], [2, 2, 0, 0]], np.int32)
    M = _t(m.copy())
    M[:] = ms.take(M[0], M * 1 + 0)          # row 0, the index, is written first
    np.testing.assert_array_equal(M.numpy(), m[m[0]])
    M = _t(m.copy())
    M[:] = ms.take(M[0], ms.flip(M, 1) + M)
    np.testing.assert_array_equal(M.numpy(), (m[:, ::-1] + m)[m[0]])
    M = _t(m.copy())
    z = M[0]
    z[:] = ms.mat_choose_row_element(ms.flip(M, 0) * 1, M[0])
    want = m.copy()
    want[0] = m[::-1][np.arange(4), m[0]]
    np.testing.assert_array_equal(M.numpy(), want)


def test_binary_ternary_and_user_defined_operators(recwarn):
    a = (np.arange(20, dtype=np.float64).reshape(5, 4) - 8) / 4
    b = np.cos(np.arange(20)).reshape(5, 4)
    A, B = _t(a), _t(b)
    i = np.array([4, 1, 1, 0], np.int32)
    I = _t(i)
    got = _run(ms.take(I, ms.F(ms.op.maximum, A, ms.flip(B, 0))), (4, 4), np.float64)
    np.testing.assert_array_equal(got, np.maximum(a, b[::-1])[i])
    got = _run(ms.take(I, ms.F(ms.op.where, ms.flip(A, 1), A, B.T.T)), (4, 4), np.float64)
    np.testing.assert_array_equal(got, np.where(a[:, ::-1] != 0, a, b)[i])
    got = _run(ms.take(I, ms.F(ms.op.gt, A, ms.flip(B, 0))), (4, 4), np.float64)
    np.testing.assert_array_equal(got, (a > b[::-1]).astype(np.float64)[i])

    @ms.op.define
    def cube_or_neg(x):
        return x * x * x if x > 0 else -x

    got = _run(ms.take(I, ms.F(cube_or_neg, ms.flip(A, 1)) + B), (4, 4), np.float64)
    f = a[:, ::-1]
    np.testing.assert_array_equal(got, (np.where(f > 0, f * f * f, -f) + b)[i])


@pytest.mark.parametrize("dtype", [np.int64, np.uint8, np.int8])
def test_small_integer_dtypes_through_views(dtype):
    b = (np.arange(30) % 7).reshape(5, 6).astype(dtype)
    B = _t(b)
    i = np.array([4, 0, 4, 2], np.int32)
    got = _run(ms.take(_t(i), ms.flip(B, 1) + B.T.T * 2), (4, 6), dtype)
    np.testing.assert_array_equal(got, (b[:, ::-1] + b * 2)[i])
    c = np.array([5, 0, 3, 3, 1], np.int32)
    got = _run(ms.mat_choose_row_element(ms.flip(B, 0) + 1, _t(c)), (5,), dtype)
    np.testing.assert_array_equal(got, (b[::-1] + 1)[np.arange(5), c])
    x = (np.arange(2 * 2 * 4 * 5) % 9).reshape(2, 2, 4, 5).astype(dtype)
    got = _run(ms.unpack_patch2col(ms.flip(_t(x), 3) + 3, 2, 2, 1), (8, 24), dtype)
    np.testing.assert_array_equal(got, ref_im2col(x[..., ::-1] + 3, 2, 2, 1))


def test_a_freed_index_tensor():
    A = _t(_data((5, 4), np.float32, 95))
    J = ms.new_tensor((3,), dtype=np.int32)
    e = ms.take(J, ms.flip(A, 0) * 2)
    ms.free_space(J)
    y = ms.new_tensor((3, 4), init=3)
    with pytest.raises(ms.FreedTensorError):
        y[:] = e
    assert (y.numpy() == 3).all()


def test_a_transpose_inside_the_tree_goes_to_its_leaves():
    # regression: .T of an expression nested in the tree (not at its root) is read through
    # views of its leaves, not evaluated into a temporary
    rng = np.random.default_rng(21)
    a = rng.standard_normal((6, 5)).astype(np.float32)
    b = rng.standard_normal((5, 6)).astype(np.float32)
    A, B = ms.from_numpy(a), ms.from_numpy(b)
    idx = ms.from_numpy(np.array([3, 0, 5, 5], np.int32))
    e = ms.take(idx, A + (B * 2).T)
    srcs = [lf.srcs[0] for lf in _gathers(e)]
    assert srcs[0] is A
    assert isinstance(srcs[1], ms._core.ViewLeaf) and srcs[1].src is B
    y = ms.new_tensor((4, 5))
    y[:] = e
    np.testing.assert_array_equal(y.numpy(), (a + (b * 2).T)[[3, 0, 5, 5]])


@pytest.mark.parametrize("view", ["flip", "slice", "broadcast", "transpose"])
def test_take_grad_reads_a_view_source_in_place(view):
    rng = np.random.default_rng(31)
    a = rng.standard_normal((7, 40)).astype(np.float32)
    at = np.ascontiguousarray(a.T)
    A, AT = ms.from_numpy(a), ms.from_numpy(at)
    idx = np.array([2, 0, 2, 4, 1, 0, 2], np.float32)
    src, ref = {"flip": (ms.flip(A, 0), a[::-1]), "slice": (ms.slice_axis(A, 1, 3, 23), a[:, 3:23]),
                "broadcast": (ms.broadcast(A[0], (7, 40), 1), np.tile(a[0], (7, 1))),
                "transpose": (AT.T, a)}[view]
    e = ms.take_grad(ms.from_numpy(idx), src, 5)
    assert isinstance(_gathers(e)[0].srcs[0], ms._core.ViewLeaf)
    y = ms.new_tensor(e.shape)
    y[:] = e
    want = np.zeros(e.shape, np.float32)
    for i, k in enumerate(idx.astype(int)):      # in increasing i, as mshadow sums
        want[k] += ref[i]
    np.testing.assert_array_equal(y.numpy(), want)
