"""Adversarial review of the small staged run (_stages.pxi _is_small / _small_run, run_plan's
branch), the one-pass gather binding (_gather.pxi GatherArgs.bind) and ms.red.product.

A plan whose stages all feed a gather's source or a view, at most 4 a level and 6 levels deep,
each producer at most 4,096 elements, runs bound on the C stack; a larger stage, an index held
by a stage or a destination read under a stage leave it for the general executor or a
temporary. Each test puts numpy (or the same statement with the sources read in place) beside
that path and its neighbours: 4,096 vs 4,097 elements a stage, 4 vs 5 stages a level, 6 vs 7
levels, every saver, the destination read at every depth (itself, a second wrapper, a wrapper
one row off), pitched tensors, zero sizes, the small dtypes. Races and anything that may crash
run in a child Python, so a segfault fails the test instead of pytest.
"""
import os
import subprocess
import sys
import textwrap
import warnings

import numpy as np
import pytest

import mshadow as ms

PKG_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(ms.__file__)))
SAVERS = ("=", "+=", "-=", "*=", "/=")
SMALL_DTYPES = (np.float32, np.float64, np.float16, np.int8, np.uint8, np.int32, np.int64)


def _ids(d):
    return np.dtype(d).name


def run_child(code, timeout=120):
    """``code`` in a fresh Python beside the mshadow under test; its stdout. A crash (-11, -6)
    or a failed assert fails the caller."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [PKG_ROOT] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]))
    code = "import numpy as np, mshadow as ms, threading\n" + textwrap.dedent(code)
    proc = subprocess.run([sys.executable, "-X", "faulthandler", "-c", code],
                          capture_output=True, text=True, timeout=timeout, env=env, cwd=PKG_ROOT)
    assert proc.returncode == 0, (f"child exited with {proc.returncode}\n--- stdout\n"
                                  f"{proc.stdout[-2000:]}\n--- stderr\n{proc.stderr[-2000:]}")
    return proc.stdout


def ints(shape, dtype, seed=0, lo=-4, hi=5):
    """Small integers (quarters for floats): sums and products of a few stay exact."""
    v = np.random.default_rng(seed).integers(lo, hi, shape)
    if np.dtype(dtype).kind == "u":
        v = np.abs(v)
    return (v / 4).astype(dtype) if np.dtype(dtype).kind == "f" else v.astype(dtype)


def npad(a, p):
    return np.pad(a, [(0, 0)] * (a.ndim - 2) + [(p, p), (p, p)])


def npool(a, k, s, red):
    win = np.lib.stride_tricks.sliding_window_view(a, (k, k), axis=(-2, -1))[..., ::s, ::s, :, :]
    return red(win, axis=(-2, -1))


def assign(dst, saver, e):
    if saver == "=":
        dst[:] = e
    elif saver == "+=":
        dst += e
    elif saver == "-=":
        dst -= e
    elif saver == "*=":
        dst *= e
    else:
        dst /= e


def np_saver(saver, d, v):
    return {"=": lambda: v, "+=": lambda: d + v, "-=": lambda: d - v, "*=": lambda: d * v,
            "/=": lambda: d / v}[saver]().astype(d.dtype)


def run(e, dtype=np.float32, pad=False):
    d = ms.new_tensor(e.shape, 0, pad=pad, dtype=dtype)
    d[:] = e
    return d.numpy().copy()


def assert_same(got, want):
    assert got.shape == want.shape and got.dtype == want.dtype, (got.shape, want.shape)
    np.testing.assert_array_equal(got, want)


# ---- the limits: elements a stage, stages a level, levels ---------------------------------

# 4,096 elements: the largest small stage; 4,097 the smallest general one (both shapes 2-D,
# and one row of each)
STAGE_SHAPES = [(64, 64), (1, 4096), (4096, 1), (17, 241), (1, 4097), (4097, 1), (64, 65)]


@pytest.mark.parametrize("shape", STAGE_SHAPES, ids=str)
@pytest.mark.parametrize("dtype", [np.float32, np.int8, np.float16], ids=_ids)
@pytest.mark.parametrize("pad", [False, True], ids=["dense", "pitched"])
def test_pad_of_an_expression_around_4096_elements(shape, dtype, pad):
    a, b = ints(shape, dtype, 1), ints(shape, dtype, 2)
    A, B = ms.from_numpy(a), ms.from_numpy(b)
    e = ms.pad(A * 2 - B, 1) + ms.pad(B, 1)
    want = npad(a * np.asarray(2, dtype) - b, 1) + npad(b, 1)
    assert_same(run(e, dtype, pad), want.astype(dtype))


@pytest.mark.parametrize("levels", range(1, 9))
@pytest.mark.parametrize("shape", [(6, 6), (60, 60), (62, 65)], ids=str)
def test_levels_of_stages_around_six(levels, shape):
    # pad(pad(...pad(a * 2)...) * 1): one stage a level, levels around SMALL_DEPTH
    a = ints(shape, np.float32, levels)
    e, v = ms.from_numpy(a) * 2, a * 2
    for _ in range(levels):
        e, v = ms.pad(e, 1) * 1, npad(v, 1)
    assert_same(run(e + 1), v + 1)


@pytest.mark.parametrize("nstages", [1, 3, 4, 5, 6])
@pytest.mark.parametrize("shape", [(64, 64), (64, 65)], ids=str)
def test_stages_in_one_level_around_four(nstages, shape):
    srcs = [ints(shape, np.int32, k) for k in range(nstages)]
    e, v = 0, 0
    for k, s in enumerate(srcs):
        S = ms.from_numpy(s)
        e = ms.pad(S * (k + 1), 0) if k == 0 else e + ms.pad(S * (k + 1), 0)
        v = v + s * (k + 1)
    assert_same(run(e, np.int32), v.astype(np.int32))


@pytest.mark.parametrize("width", [4, 5])
@pytest.mark.parametrize("levels", [5, 6, 7])
def test_a_full_tree_at_the_limits_reading_the_destination_at_the_bottom(width, levels):
    # every level holds `width` stages; the destination is read only by the deepest one:
    # the small run must see it and go through a temporary (or fall back), never half-store
    shape = (8, 8)
    d0 = ints(shape, np.float64, 3)
    out = ms.from_numpy(d0.copy())

    def tree(depth):
        if depth == 0:
            return out * 1, d0.copy()
        e, v = tree(depth - 1)
        e, v = ms.pad(e, 0), v
        for k in range(1, width):
            leaf = ints(shape, np.float64, 10 * depth + k)
            e, v = e + ms.pad(ms.from_numpy(leaf) * 1, 0), v + leaf
        return e, v

    e, v = tree(levels)
    out[:] = e
    assert_same(out.numpy(), v)


# ---- every saver, the destination read at every depth -------------------------------------

DST_READS = ["top", "stage", "deep", "view", "second_wrapper", "shifted_wrapper", "gather_src"]


def _dst_case(where, out, D, dv, B, b0):
    """(expression, numpy value) reading the destination's memory through ``D``."""
    if where == "top":                      # at the very element written: no temporary
        return D * 2 + ms.pad(B * 1, 0), dv * 2 + b0
    if where in ("stage", "second_wrapper", "shifted_wrapper"):
        return ms.pad(D * 2, 0) + B, dv * 2 + b0
    if where == "deep":
        return (ms.pad(ms.pad(ms.pad(D * 1, 0) + 1, 0) * 2, 0) - B,
                (dv + 1) * 2 - b0)
    if where == "view":
        return ms.flip(ms.pad(D + 1, 0), 0) * B, np.flip(dv + 1, 0) * b0
    # read in place by a gather of the top plan, with a small stage beside it
    return ms.pool(ms.pad(D, 1), 3, 3, 1, 1, ms.red.sum) + ms.pad(B * 1, 0), \
        npool(npad(dv, 1), 3, 1, np.sum) + b0


@pytest.mark.parametrize("saver", SAVERS)
@pytest.mark.parametrize("where", DST_READS)
@pytest.mark.parametrize("shape", [(6, 7), (64, 64), (65, 65)], ids=str)
@pytest.mark.parametrize("pad", [False, True], ids=["dense", "pitched"])
def test_destination_read_under_small_stages(saver, where, shape, pad):
    rng = np.random.default_rng(7)
    d0 = (rng.integers(1, 8, shape) / 4).astype(np.float64)
    b0 = (rng.integers(1, 8, shape) / 4).astype(np.float64)
    B = ms.from_numpy(b0)
    if where == "shifted_wrapper":          # dst = rows 0..H-1 of big, read: rows 1..H
        big = ms.new_tensor((shape[0] + 1, shape[1]), pad=pad, dtype=np.float64)
        bn = big.numpy()
        bn[:shape[0]] = d0
        bn[shape[0]] = 1.5
        out = big.slice(0, shape[0])
        D, dv = ms.from_numpy(bn[1:]), bn[1:].copy()
        del bn
    else:
        out = ms.new_tensor(shape, pad=pad, dtype=np.float64)
        out[:] = d0
        D = ms.from_numpy(out.numpy()) if where == "second_wrapper" else out
        dv = d0
    e, v = _dst_case(where, out, D, dv, B, b0)
    want = np_saver(saver, d0, v)
    assign(out, saver, e)
    np.testing.assert_allclose(out.numpy(), want, rtol=1e-12)


# ---- the small run against the same statement with its sources read in place ---------------

def _readers(H, W):
    return {
        "pool_max": (lambda X: ms.pool(X, 2, 2, 2, 2, ms.red.maximum), 1),
        "pool_product": (lambda X: ms.pool(X, 2, 2, 2, 2, ms.red.product), 1),
        "unpool": (lambda X, P, G: ms.unpool(X, P, G, 2, 2, 2, 2, ms.red.maximum), 3),
        "chpool_sum": (lambda X: ms.chpool(ms.reshape(X, (1, 2, H, W)), 1, ms.red.sum), 1),
        "upsampling": (lambda X: ms.upsampling_nearest(X, 2), 1),
        "crop": (lambda X: ms.crop(X, (H - 2, W - 2), 1, 1), 1),
        "mirror": (lambda X: ms.mirror(X), 1),
        "reduce_keepdim": (lambda X: ms.reduce_keepdim(X, 1, ms.red.sum) * 1, 1),
        "concat": (lambda X, Y: ms.concat(X, Y, 1), 2),
    }


@pytest.mark.parametrize("reader", sorted(_readers(4, 4)))
@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.int8, np.uint8, np.int64], ids=_ids)
@pytest.mark.parametrize("HW", [(4, 6), (32, 32), (32, 34)], ids=str)
def test_staged_sources_match_sources_read_in_place(reader, dtype, HW):
    H, W = HW
    f, nsrc = _readers(H, W)[reader]
    srcs = [ints((2, H, W), dtype, k, 0, 5) for k in range(nsrc)]
    if reader == "unpool":
        srcs[1] = run(ms.pool(ms.from_numpy(srcs[0]), 2, 2, 2, 2), dtype)
        srcs[2] = ints(srcs[1].shape, dtype, 9, 0, 5)
    T = [ms.from_numpy(s) for s in srcs]
    want = run(f(*T), dtype)
    for pad in (False, True):
        assert_same(run(f(*[t * 1 for t in T]), dtype, pad), want)
        # two levels deep
        assert_same(run(f(*[ms.pad(ms.pad(t * 1, 0) * 1, 0) for t in T]), dtype, pad), want)


@pytest.mark.parametrize("shape", [(1, 1), (3, 5), (62, 62), (64, 64), (1, 4096), (17, 241)],
                         ids=str)
@pytest.mark.parametrize("view", ["transpose", "flip", "slice_rows", "slice_cols", "swapaxis"])
def test_views_of_small_stages(shape, view):
    H, W = shape
    a = ints(shape, np.float32, 5)
    P, p = ms.pad(ms.from_numpy(a) * 2, 1), npad(a * 2, 1)
    e, v = {
        "transpose": (lambda: (ms.transpose(P), p.T)),
        "flip": (lambda: (ms.flip(P, 1), np.flip(p, 1))),
        "slice_rows": (lambda: (ms.slice_axis(P, 0, 1, H + 1), p[1:H + 1])),
        "slice_cols": (lambda: (ms.slice_axis(P, 1, 2, W + 2), p[:, 2:W + 2])),
        "swapaxis": (lambda: (ms.swapaxis(ms.reshape(P, (1, H + 2, W + 2)), 0, 2),
                              np.swapaxes(p[None], 0, 2))),
    }[view]()
    for pad in (False, True):
        assert_same(run(e - 1, pad=pad), v - 1)


@pytest.mark.parametrize("dtype", [np.float16, np.int8, np.uint8, np.int64], ids=_ids)
@pytest.mark.parametrize("shape", [(3, 5), (64, 64), (64, 65)], ids=str)
def test_a_stage_of_another_dtype_than_its_consumer(dtype, shape):
    a = (np.arange(np.prod(shape)).reshape(shape) % 200 - 100).astype(np.float32) / 2
    if np.dtype(dtype).kind == "u":
        a = np.abs(a)
    A = ms.from_numpy(a)
    e = ms.tcast(np.float32, ms.pad(ms.tcast(dtype, A * 1), 1)) + ms.pad(A, 1)
    want = npad(a.astype(dtype).astype(np.float32), 1) + npad(a, 1)
    assert_same(run(e, pad=True), want)


@pytest.mark.parametrize("HW", [(5, 3), (64, 64), (70, 64)], ids=str)
def test_a_1d_value_vector_stage(HW):
    # mat_fill_row_element's values (1-D, one element a "row") as a small stage
    H, W = HW
    a = ints(HW, np.float32, 1)
    v = np.arange(H, dtype=np.float32) + 100
    idx = (np.arange(H) * 7) % W
    want = a * 2
    want[np.arange(H), idx] = v * 3
    e = ms.mat_fill_row_element(ms.from_numpy(a) * 2, ms.from_numpy(v) * 3,
                                ms.from_numpy(idx.astype(np.int32)))
    assert_same(run(e), want)


@pytest.mark.parametrize("shape", [(0, 5), (3, 0), (0, 0), (2, 0, 4)], ids=str)
def test_zero_size_sources_under_stages(shape):
    a = np.zeros(shape, np.float32)
    A = ms.from_numpy(a)
    # padding an empty image gives a frame of zeros (+1)
    assert_same(run(ms.pad(ms.pad(A * 2, 1) * 1, 1) + 1), npad(npad(a, 1), 1) + 1)
    assert_same(run(ms.flip(ms.pad(A * 2, 0), len(shape) - 2) + 1), a + 1)


# ---- indices: held by a stage, read in place under one, out of range ----------------------

def _index_cases(I, A):
    return {
        "index_stage": lambda: ms.take(I + 0, A * 2),
        "index_in_place_under_a_stage": lambda: ms.pad(ms.take(I, ms.pad(A * 2, 0)), 0) + 1,
        "index_in_place_at_the_top": lambda: ms.take(I, ms.pad(A * 2, 0)) - 1,
    }


@pytest.mark.parametrize("case", sorted(_index_cases(None, None)))
@pytest.mark.parametrize("itype", [np.int32, np.int64, np.float32], ids=_ids)
def test_take_indices_through_small_stages(case, itype):
    a = np.arange(24, dtype=np.float32).reshape(6, 4)
    idx = np.array([5, 0, 3, 3], itype)
    e = _index_cases(ms.from_numpy(idx), ms.from_numpy(a))[case]()
    want = {"index_stage": (a * 2)[idx.astype(int)],
            "index_in_place_under_a_stage": (a * 2)[idx.astype(int)] + 1,
            "index_in_place_at_the_top": (a * 2)[idx.astype(int)] - 1}[case]
    assert_same(run(e), want)


@pytest.mark.parametrize("case", sorted(_index_cases(None, None)))
@pytest.mark.parametrize("bad", [[1, 6, 0, 2], [-1, 0, 2, 2], [0, 1, 2, 1 << 40]], ids=str)
@pytest.mark.parametrize("saver", SAVERS)
def test_out_of_range_indices_store_nothing(case, bad, saver):
    a = np.arange(24, dtype=np.float32).reshape(6, 4)
    I = ms.from_numpy(np.array(bad, np.int64))
    out = ms.new_tensor((4, 4), init=-7.0)
    with pytest.raises(IndexError, match=r"index values must lie in \[0, 6\)"):
        assign(out, saver, _index_cases(I, ms.from_numpy(a))[case]())
    assert (out.numpy() == -7).all()


# ---- integer division by zero: one warning, after the store --------------------------------

@pytest.mark.parametrize("shape", [(8, 8), (64, 64), (65, 65)], ids=str)
@pytest.mark.parametrize("where", ["stage", "deep", "top", "reads_dst"])
@pytest.mark.parametrize("saver", ["=", "+="])
def test_integer_division_by_zero_under_small_stages_warns_once(shape, where, saver):
    a = (np.arange(np.prod(shape)).reshape(shape) % 5).astype(np.int32)
    b = (np.arange(np.prod(shape)).reshape(shape) % 3).astype(np.int32)
    A, B = ms.from_numpy(a), ms.from_numpy(b)
    q = np.where(b != 0, a // np.where(b != 0, b, 1), 0).astype(np.int32)   # C truncation:
    out = ms.new_tensor(shape, init=2, dtype=np.int32)                        # a, b >= 0
    e, v = {"stage": (lambda: (ms.pad(A / B, 0) + 1, q + 1)),
            "deep": (lambda: (ms.pad(ms.pad(A / B, 0) * 1, 0) + ms.pad(A / B, 0), 2 * q)),
            "top": (lambda: (ms.pad(A * 1, 0) + A / B, a + q)),
            "reads_dst": (lambda: (ms.pad(out * 1, 0) + ms.pad(A / B, 0), 2 + q))}[where]()
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        assign(out, saver, e)
    assert [str(x.message) for x in w] == ["integer division by zero (the result is 0 there)"]
    assert_same(out.numpy(), np_saver(saver, np.full(shape, 2, np.int32), v))


# ---- ms.red.product against np.multiply.reduce ---------------------------------------------

def prod_oracle(a, axis):
    """Integers wrap in their own type; floats fold wide (float16 in float32 at least) and
    are rounded once."""
    with np.errstate(all="ignore"):
        if a.dtype.kind in "iu":
            return np.multiply.reduce(a, axis=axis, dtype=a.dtype)
        return np.asarray(np.multiply.reduce(a.astype(np.float64), axis=axis)).astype(a.dtype)


def _special(shape, dtype, seed):
    rng = np.random.default_rng(seed)
    if np.dtype(dtype).kind == "f":
        pool = [-2, -1, -0.5, -0.0, 0.0, 0.5, 1, 2, np.inf, -np.inf, np.nan]
        return rng.choice(np.array(pool, dtype), shape)
    lo = 0 if np.dtype(dtype).kind == "u" else -100
    a = rng.integers(lo, 100, shape).astype(dtype)
    return a * np.asarray(10 ** 6, dtype) if dtype == np.int64 else a


def assert_same_floats(got, want):
    assert got.shape == want.shape and got.dtype == want.dtype
    np.testing.assert_array_equal(got, want)
    if want.dtype.kind == "f":            # -0.0 stays -0.0 (1 * -0.0), NaN's sign is free
        m = ~np.isnan(want)
        np.testing.assert_array_equal(np.signbit(got[m]), np.signbit(want[m]))


# (numpy's own RuntimeWarnings from a tensor source: test_product_of_a_tensor_warns_as_...)
NUMPY_WARNINGS = pytest.mark.filterwarnings("ignore:(invalid value|overflow) encountered")


@NUMPY_WARNINGS
@pytest.mark.parametrize("dtype", SMALL_DTYPES, ids=_ids)
@pytest.mark.parametrize("shape", [(3, 5, 7), (2, 3, 130), (4, 1), (1, 300), (2, 0, 3)], ids=str)
def test_product_against_numpy_with_specials_and_wrapping(dtype, shape):
    a = _special(shape, dtype, sum(shape))
    A = ms.from_numpy(a)
    for axis in range(len(shape)):
        want = prod_oracle(a, axis)
        for src in (A, A * 1):
            assert_same_floats(run(ms.reduce_with_axis(src, axis, ms.red.product), dtype), want)
            # nested as a chainer (g_reduce_*), under a small stage
            e = ms.reduce_with_axis(src, axis, ms.red.product) * 1
            assert_same_floats(run(e, dtype), want)


@NUMPY_WARNINGS
@pytest.mark.parametrize("dtype", SMALL_DTYPES, ids=_ids)
def test_pool_and_chpool_product_against_numpy(dtype):
    a = _special((2, 3, 6, 8), dtype, 4)
    A = ms.from_numpy(a)
    w = a.reshape(2, 3, 3, 2, 4, 2).transpose(0, 1, 2, 4, 3, 5).reshape(2, 3, 3, 4, 4)
    want = prod_oracle(w, -1)
    wantc = np.stack([prod_oracle(a[:, max(c - 1, 0):c + 2], 1) for c in range(3)], 1)
    for src in (A, A * 1, ms.pad(A * 1, 0)):
        assert_same_floats(run(ms.pool(src, 2, 2, 2, 2, ms.red.product), dtype), want)
        assert_same_floats(run(ms.chpool(src, 3, ms.red.product), dtype), wantc)


@NUMPY_WARNINGS
def test_float16_product_overflows_to_inf_only_at_the_end():
    a = np.array([[300, 300, 1 / 300], [300, 300, 300], [-300, 300, 1]], np.float16)
    with np.errstate(over="ignore"):
        want = np.multiply.reduce(a.astype(np.float32), axis=1).astype(np.float16)
    assert np.isfinite(want[0]) and np.isposinf(want[1]) and np.isneginf(want[2])
    for src in (ms.from_numpy(a), ms.from_numpy(a) * 1):
        assert_same_floats(run(ms.reduce_with_axis(src, 1, ms.red.product), np.float16), want)
        assert_same_floats(run(ms.reduce_with_axis(src, 1, ms.red.product) * 1, np.float16),
                           want)


@pytest.mark.parametrize("case", ["float16_overflow", "zero_times_inf"])
def test_product_of_a_tensor_warns_as_the_product_of_an_expression(case):
    """Regression: numpy's reduce and cast of a tensor source ran outside np.errstate, so
    its RuntimeWarnings reached the caller where the C fold (and C++ mshadow) say nothing."""
    a = (np.array([[300, 300], [2, 3]], np.float16) if case == "float16_overflow"
         else np.array([[0, np.inf], [2, 3]], np.float32))
    got = {}
    for name, src in (("expression", ms.from_numpy(a) * 1), ("tensor", ms.from_numpy(a))):
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            v = run(ms.reduce_with_axis(src, 1, ms.red.product), a.dtype)
        got[name] = [str(x.message) for x in w]
        assert np.array_equal(v, prod_oracle(a, 1), equal_nan=True)
    assert got["expression"] == []
    assert got["tensor"] == got["expression"]


# ---- gather sources checked at bind time ---------------------------------------------------

@pytest.mark.parametrize("shape", [(1, 8, 8), (1, 64, 64), (1, 64, 66)], ids=str)
def test_a_freed_or_reshaped_in_place_gather_source_raises_and_stores_nothing(shape):
    c = ms.TensorContainer(shape)
    c[:] = ints(shape, np.float32, 1)
    B = ms.from_numpy(ints((1,) + tuple(s - 1 for s in shape[1:]), np.float32, 2))
    e = ms.pool(c, 2, 2, 1, 1, ms.red.sum) + ms.pad(B * 1, 0)     # c read in place
    out = ms.new_tensor(e.shape, init=-7.0)
    c.resize((1,) + tuple(s + 1 for s in shape[1:]))
    with pytest.raises(ms.ShapeError, match="a source of .* changed from shape"):
        out[:] = e
    ms.free_space(c)
    with pytest.raises(ms.FreedTensorError):
        out[:] = e
    assert (out.numpy() == -7).all()


# ---- threads ---------------------------------------------------------------------------------

def test_races_on_small_runs_with_a_large_output():
    # a 64 x 64 stage (small) under a 1024 x 1024 output: the run releases the GIL; another
    # thread frees a source, resizes the destination container, or runs the same expression
    out = run_child("""
        x0 = (np.arange(64 * 64).reshape(64, 64) % 7).astype(np.float32)
        ref = np.maximum(x0 * 2, 0).repeat(16, 0).repeat(16, 1)

        def race(assign, racer):
            res, unexpected = [None, None], []
            def call(k, fn, ok):
                try:
                    fn()
                except ok as ex:
                    res[k] = ex
                except BaseException as ex:
                    unexpected.append(repr(ex))
            ts = [threading.Thread(target=call, args=(0, assign, ms.MShadowError)),
                  threading.Thread(target=call, args=(1, racer, (ms.MShadowError, BufferError)))]
            for t in ts: t.start()
            for t in ts: t.join()
            assert not unexpected, unexpected
            return res[0]

        for r in range(15):
            s = ms.new_tensor((64, 64)); s[:] = x0
            dst = ms.new_tensor((1024, 1024), init=-7.0)
            e = ms.upsampling_nearest(ms.F(ms.op.relu, ms.pad(s * 2, 0)), 16)
            def assign(): dst[:] = e
            err = race(assign, lambda: ms.free_space(s))
            got = dst.numpy()
            if err is None:
                assert np.array_equal(got, ref), r
            else:
                assert (got == -7).all(), (r, int((got != -7).sum()))
        x = ms.from_numpy(x0)
        e = ms.upsampling_nearest(ms.F(ms.op.relu, ms.pad(x * 2, 0)), 16)
        for r in range(15):
            c = ms.TensorContainer((1024, 1024))
            def assign(): c[:] = e
            err = race(assign, lambda: c.resize((1500, 1500)))
            if err is None and tuple(c.shape) != (1500, 1500):
                assert np.array_equal(c.numpy(), ref), r
        outs, bad = [ms.new_tensor((1024, 1024)) for _ in range(4)], []
        def work(o):
            try:
                for _ in range(10):
                    o[:] = e
                    if not np.array_equal(o.numpy(), ref):
                        bad.append("wrong values")
            except BaseException as ex:
                bad.append(repr(ex))
        ts = [threading.Thread(target=work, args=(o,)) for o in outs]
        for t in ts: t.start()
        for t in ts: t.join()
        assert not bad, bad[:3]
        print("ok")
    """)
    assert out.strip() == "ok"


# ---- the bug: a small run that gives up writes through the destination it saw first --------

_FALLBACK_CHILD = """
    def addr(t):
        x = t.numpy()
        p = x.__array_interface__["data"][0]
        del x
        return p

    bad = []
    for r in range(10):
        a = np.full((32, 32), 2.0, np.float32)
        big = np.ones((128, 128), np.float32)
        I = ms.from_numpy(np.arange(32, dtype=np.float32))   # a float index: its range check
        c = ms.TensorContainer((32, 32))                    # calls np.isfinite (Python code)
        old = addr(c)
        # {trigger}
        e = {expr}
        n, real, victims = [0], np.isfinite, []

        def hook(x, *args, **kw):
            n[0] += 1
            if n[0] == 2:     # the small run binds stage 0: meanwhile another thread
                c.release()   # reallocates the destination container (deferred: pinned)
                c.resize((32, 32), init=5.0)
            elif n[0] == 3:   # the general run binds: memory of dst's size is allocated
                victims.extend(ms.new_tensor((32, 32), init=-1.0) for _ in range(3))
            return real(x, *args, **kw)

        np.isfinite = hook
        try:
            c[:] = e
        finally:
            np.isfinite = real
        for v in victims:
            if not (v.numpy() == -1).all():
                bad.append((r, "an unrelated tensor overwritten", addr(v) == old))
    assert not bad, bad[:3]
    print("ok")
"""
_FALLBACKS = {
    # stage 1 (16,384 elements) is too large: SMALL_NOT after stage 0 ran
    "larger_stage": ("stage 0 small (its take checks I), stage 1 too large",
                     "(ms.pad(ms.take(I, ms.pad(ms.from_numpy(a) * 1, 0)) * 1, 0) + "
                     "ms.pool(ms.from_numpy(big) * 1, 4, 4, 4, 4, ms.red.sum))"),
    # stage 1 is take's index: SMALL_NOT after stage 0 ran
    "index_stage": ("stage 0 small (its take checks I), stage 1 an index",
                    "ms.take(ms.from_numpy(np.arange(32, dtype=np.int32)[::-1].copy()) + 0, "
                    "ms.pad(ms.take(I, ms.pad(ms.from_numpy(a) * 1, 0)) * 1, 0))"),
}


@pytest.mark.parametrize("fallback", sorted(_FALLBACKS))
def test_a_small_run_that_falls_back_keeps_the_destination_it_bound(fallback):
    """Regression: run_plan unpinned the destination after a small run gave way to the
    general one, which then stored through the address taken before; a release/resize of
    the container meanwhile (while an index check ran Python code) made that a write after
    free. The pin now lasts the whole run."""
    trigger, expr = _FALLBACKS[fallback]
    out = run_child(_FALLBACK_CHILD.replace("{trigger}", trigger).replace("{expr}", expr))
    assert out.strip() == "ok"


def test_the_destination_reallocated_while_the_general_run_binds_is_kept_pinned():
    # the same reallocation while the general executor binds (stage 0 is larger than 4,096
    # elements, so the small run gives up before it binds anything that runs Python code):
    # the run finishes on the memory it bound, freed after it; the container shows its new
    # memory untouched and nothing else is written
    out = run_child("""
        for r in range(10):
            a = np.full((32, 32), 2.0, np.float32)
            big = np.ones((128, 128), np.float32)
            I = ms.from_numpy(np.arange(32, dtype=np.float32))
            c = ms.TensorContainer((32, 32))
            e = (ms.pool(ms.from_numpy(big) * 1, 4, 4, 4, 4, ms.red.sum)
                 + ms.pad(ms.take(I, ms.pad(ms.from_numpy(a) * 1, 0)) * 1, 0))
            n, real = [0], np.isfinite

            def hook(x, *args, **kw):
                n[0] += 1
                if n[0] == 2:     # the general run binds stage 1's take
                    c.release()
                    c.resize((32, 32), init=5.0)
                return real(x, *args, **kw)

            np.isfinite = hook
            try:
                c[:] = e
            finally:
                np.isfinite = real
            assert n[0] == 2, n[0]
            assert (c.numpy() == 5).all()
            victims = [ms.new_tensor((32, 32), init=-1.0) for _ in range(3)]
            assert all((v.numpy() == -1).all() for v in victims)
            c[:] = e                                  # and the next run is right
            assert np.array_equal(c.numpy(), np.full((32, 32), 18.0, np.float32))
        print("ok")
    """)
    assert out.strip() == "ok"
