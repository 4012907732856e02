"""Runs reading a transposed tensor go in tiles (plan_exec.h ms_run_tile): each transposed
leaf's elements of a tile are copied into the thread's scratch, then the tile's rows run
reading the copy. Against numpy, at shapes that cross the tiles' edges both ways, every
dtype, pitched sources and destinations, row views, two threads, savers, the same leaf
twice, a cast, and a destination that is the transposed source itself."""
import numpy as np
import pytest

import mshadow as ms

# (elements >= 4096: a tiled run) edges of the 256-column blocks and the tile's rows
SHAPES = [(64, 64), (67, 300), (300, 67), (257, 513), (2, 4096), (4096, 2), (33, 1000),
          (4096, 100), (131, 129), (5, 4096), (7, 1031)]   # (narrow rows: taller tiles; bands
                                                          # of rows not a multiple of 4 or 2)
DTYPES = [np.float16, np.float32, np.float64, np.int32, np.int8, np.uint8]


def _tensor(a, pad=False):
    t = ms.new_tensor(a.shape, dtype=a.dtype, pad=pad)
    t.numpy()[...] = a
    return t


def _values(rng, shape, dtype):
    if np.dtype(dtype).kind == "f":
        return rng.standard_normal(shape).astype(dtype)
    return rng.integers(0, 50, shape).astype(dtype)


@pytest.fixture(params=[1, 2], ids=["1thread", "2threads"])
def threads(request):
    old = ms.get_num_threads()
    ms.set_num_threads(request.param)
    yield request.param
    ms.set_num_threads(old)


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("dtype", DTYPES)
def test_a_transposed_leaf_plus_a_tensor(shape, dtype, threads):
    rng = np.random.default_rng(shape[0] * 7 + shape[1])
    cv = _values(rng, shape[::-1], dtype)
    bv = _values(rng, shape, dtype)
    c, b = _tensor(cv, pad=True), _tensor(bv)
    a = ms.new_tensor(shape, dtype=dtype, pad=True)
    a[:] = c.T + b
    assert np.array_equal(a.numpy(), cv.T + bv)
    a += c.T
    assert np.array_equal(a.numpy(), cv.T + bv + cv.T)


@pytest.mark.parametrize("shape", [(67, 300), (257, 513), (2, 4096)])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_expressions_of_several_transposed_leaves(shape, dtype, threads):
    rng = np.random.default_rng(1)
    xv = rng.standard_normal(shape[::-1]).astype(dtype)
    yv = rng.standard_normal(shape[::-1]).astype(dtype)
    bv = rng.standard_normal(shape).astype(dtype)
    x, y, b = _tensor(xv), _tensor(yv, pad=True), _tensor(bv)
    a = ms.new_tensor(shape, dtype=dtype)
    a[:] = x.T * x.T - y.T * 2 + b
    np.testing.assert_array_equal(a.numpy(), xv.T * xv.T - yv.T * 2 + bv)
    a[:] = ms.F(ms.op.exp, x.T) * 0.5 + y.T
    ref = a.numpy().copy()
    # the same statement without tiles: one row a run (rows = 1) gives the same bits
    for r in range(shape[0]):
        row = ms.new_tensor((1, shape[1]), dtype=dtype)
        row[:] = ms.F(ms.op.exp, _tensor(np.ascontiguousarray(xv[:, r:r + 1]))).T * 0.5 \
            + _tensor(np.ascontiguousarray(yv[:, r:r + 1])).T
        assert row.numpy().tobytes() == ref[r:r + 1].tobytes()


def test_a_cast_of_a_transposed_half_tensor():
    rng = np.random.default_rng(2)
    hv = rng.standard_normal((300, 67)).astype(np.float16)
    h = _tensor(hv)
    a = ms.new_tensor((67, 300), dtype=np.float32)
    a[:] = ms.tcast(np.float32, h.T) * 2
    np.testing.assert_array_equal(a.numpy(), hv.T.astype(np.float32) * 2)


def test_a_row_view_destination():
    rng = np.random.default_rng(3)
    cv = rng.standard_normal((300, 40)).astype(np.float32)
    big = ms.new_tensor((50, 300), dtype=np.float32, init=7)
    c = _tensor(cv)
    view = big[5:45]
    view[:] = c.T + 1
    got = big.numpy()
    np.testing.assert_array_equal(got[5:45], cv.T + 1)
    assert (got[:5] == 7).all() and (got[45:] == 7).all()


@pytest.mark.parametrize("n", [64, 100, 300])
def test_the_destination_is_the_transposed_source(n, threads):
    rng = np.random.default_rng(n)
    av = rng.standard_normal((n, n)).astype(np.float32)
    a = _tensor(av)
    a[:] = a.T
    np.testing.assert_array_equal(a.numpy(), av.T)
    a[:] = a.T + a
    np.testing.assert_array_equal(a.numpy(), av + av.T)


_FREE_RACE = """
import threading, time
import mshadow as ms
from mshadow.errors import FreedTensorError
for r in range(10):
    c = ms.new_tensor((1024, 2048), init=1.0)
    b = ms.new_tensor((2048, 1024), init=2.0)
    a = ms.new_tensor((2048, 1024), init=-7.0)
    go = threading.Event()
    def run():
        go.set()
        for _ in range(4):
            try:
                a[:] = c.T + b            # a tiled run, the GIL released
            except FreedTensorError:
                pass
    th = threading.Thread(target=run); th.start()
    go.wait(); time.sleep(0.001 * (r % 4))
    ms.free_space(c)                      # waits for the run (its memory is pinned)
    th.join()
    v = a.numpy()
    assert ((v == 3.0) | (v == -7.0)).all() and (v[0] == v[0, 0]).all()
print("ok")
"""


def test_free_space_of_the_transposed_source_while_a_tiled_run_reads_it():
    import os
    import subprocess
    import sys
    root = os.path.dirname(os.path.dirname(ms.__file__))
    proc = subprocess.run([sys.executable, "-X", "faulthandler", "-c", _FREE_RACE],
                          capture_output=True, text=True, timeout=300, cwd=root)
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr[-3000:]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("shape", [(300, 67), (257, 513), (33, 1000), (9, 4096)])
def test_every_simd_level_packs_the_same_tiles(dtype, shape):
    # the pack of a tile: 8 x 8 / 4 x 4 blocks in AVX registers at avx2 and above (transpose.h),
    # 4 x 4 / 2 x 2 in SSE2 registers, element by element at plain; a pitched source (its
    # row pitch past its width) and a view starting at an odd column. Every level gives
    # numpy's values.
    rng = np.random.default_rng(shape[0])
    wide = rng.standard_normal((shape[1], shape[0] + 3)).astype(dtype)
    b = rng.standard_normal(shape).astype(dtype)
    sources = {"pitched": _tensor(wide[:, :shape[0]], pad=True),
               "odd view": ms.slice_axis(_tensor(wide), 1, 1, shape[0] + 1)}
    wants = {"pitched": wide[:, :shape[0]].T + b, "odd view": wide[:, 1:shape[0] + 1].T + b}
    old = ms.simd_info()["active"]
    try:
        for level in ms.simd_info()["compiled"]:
            try:
                ms.set_simd_level(level)
            except ValueError:       # above this CPU's
                continue
            for name, c in sources.items():
                a = ms.new_tensor(shape, dtype=dtype)
                a[:] = c.T + _tensor(b)
                assert np.array_equal(a.numpy(), wants[name]), (level, name)
    finally:
        ms.set_simd_level(old)


def _several_chains(x, y, b):
    """Statements of several instructions, with registers (1 or 2) and without."""
    F, op = ms.F, ms.op
    return [(x * 2 + 1) * (b * 3 - 1),
            F(op.exp, x) * F(op.tanh, b) + (y - b) / (b * b + 1),
            x * F(op.exp, b * 0.5 + y),
            x + y * b - x * 3]


@pytest.mark.parametrize("shape", [(67, 300), (257, 513), (33, 1000), (300, 67)])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_a_tiles_rows_in_one_call_give_an_untiled_runs_bits(shape, dtype, threads):
    """A tile's rows go through each instruction together (plan_exec.h ms_tile_rows), as
    many as the registers hold (2 rows of 256 columns with registers; the whole tile
    without): the same bits as the statement over tensors holding the transposes (no
    tiles), and numpy's values."""
    rng = np.random.default_rng(shape[0] + shape[1])
    xv = rng.standard_normal(shape[::-1]).astype(dtype)
    yv = rng.standard_normal(shape[::-1]).astype(dtype)
    bv = rng.standard_normal(shape).astype(dtype)
    x, y, b = _tensor(xv, pad=True), _tensor(yv), _tensor(bv, pad=True)
    xt, yt = _tensor(np.ascontiguousarray(xv.T)), _tensor(np.ascontiguousarray(yv.T))
    f = {"exp": np.exp, "tanh": np.tanh}
    want = [(xv.T * 2 + 1) * (bv * 3 - 1),
            f["exp"](xv.T) * f["tanh"](bv) + (yv.T - bv) / (bv * bv + 1),
            xv.T * f["exp"](bv * 0.5 + yv.T),
            xv.T + yv.T * bv - xv.T * 3]
    tol = dict(rtol=1e-5, atol=1e-5) if dtype == np.float32 else dict(rtol=1e-12, atol=1e-12)
    for k, (tiled, plain) in enumerate(zip(_several_chains(x.T, y.T, b),
                                           _several_chains(xt, yt, b))):
        a = ms.new_tensor(shape, dtype=dtype, pad=True, init=np.nan)
        r = ms.new_tensor(shape, dtype=dtype, init=np.nan)
        a[:] = tiled
        r[:] = plain
        np.testing.assert_allclose(a.numpy(), want[k], **tol)
        assert a.numpy().tobytes() == r.numpy().tobytes(), k
