"""mshadow.cuda.launch: grids within the device's limits (any size, any limits), and kernels
launched with them cover their whole range on the host SIMT harness (grid-stride loops),
even when the limits cap the grid far below the range."""
import numpy as np
import pytest

import mshadow as ms
from mshadow import engine
from mshadow.cuda import launch
from mshadow.cuda.lower import REDUCE_BLOCK, emit, emit_reduce, emit_softmax

import cuda_host
from test_cuda_emit import needs_gxx

TINY = launch.Limits(max_grid_x=2, max_grid_y=3, max_block=64, sm_count=1)
SIZES = [(0, 0), (1, 1), (7, 3), (65536, 1), (10 ** 7, 10 ** 9), (2 ** 40, 5)]


def within(l, limits):
    (gx, gy, gz), (bx, by, bz) = l
    return (1 <= gx <= limits.max_grid_x and 1 <= gy <= limits.max_grid_y and gz == 1
            and 1 <= bx <= limits.max_block and by == bz == 1)


@pytest.mark.parametrize("limits", [launch.H100, TINY], ids=["h100", "tiny"])
def test_every_launch_is_within_the_limits(limits):
    for rows, cols in SIZES:
        assert within(launch.elementwise(rows, cols, limits), limits), (rows, cols)
        assert within(launch.reduction(rows, cols, limits), limits), (rows, cols)
        assert within(launch.softmax(rows, limits), limits)
        assert within(launch.flat(rows * cols, limits), limits)
        r = launch.reduction(rows, cols, limits)
        assert r.block[0] % 32 == 0 and r.block[0] <= REDUCE_BLOCK
    assert launch.softmax(5).block == (32, 1, 1)
    # mshadow's "too large launch parameter": 10**6 rows took a grid of 10**6 in y
    assert launch.elementwise(10 ** 6, 4).grid[1] <= 65535
    # at most ELEMENTWISE_WAVES waves of resident blocks; the stride loops walk the rest
    most = launch.H100.sm_count * launch.BLOCKS_PER_SM * launch.ELEMENTWISE_WAVES
    for rows, cols in [(1, 2 ** 27), (2 ** 17, 1024), (10 ** 6, 4), (3, 5)]:
        (gx, gy, _), (bx, _, _) = launch.elementwise(rows, cols)
        assert gx * gy <= most and gx * bx >= min(cols, most * bx) and gy <= rows
    assert launch.elementwise(1, 2 ** 27).grid == (most, 1, 1)


def test_reduce_geometry():
    assert launch.reduce_geometry((2, 3, 4), "with_axis", 1) == (8, 3, 2, 3, 4, 0)
    assert launch.reduce_geometry((2, 3, 4), "keepdim", 0) == (12, 2, 1, 2, 12, 0)
    assert launch.reduce_geometry((2, 3, 4), "except_dim", 2) == (4, 6, 6, 4, 1, 1)
    assert launch.reduce_geometry((5,), "except_dim", 0) == (5, 1, 1, 5, 1, 1)


@needs_gxx
def test_capped_grids_still_cover_the_range():
    rng = np.random.default_rng(0)
    x = ms.from_numpy(rng.standard_normal((37, 301)).astype(np.float32))
    dst = ms.new_tensor((37, 301))
    node, leaves, scalars, _, _ = engine._parts(dst, x * 2 + 1)
    k = emit(node, "f32", "saveto")
    r = launch.reduction(37, 301, TINY)
    kr = emit_reduce(ms.sum_rows(x).key, "f32", "saveto")
    ks = emit_softmax("f32")
    lib = cuda_host.build([k, kr, ks])
    l = launch.elementwise(37, 301, TINY)
    host = np.zeros((37, 301), np.float32)
    cuda_host.run(lib, k, host, leaves, scalars, grid=l.grid[:2], block=l.block[0])
    np.testing.assert_array_equal(host, x.numpy() * 2 + 1)
    out = np.zeros(301, np.float32)
    nout, nred, A, B, M, exc = launch.reduce_geometry((37, 301), "except_dim", 1)
    cuda_host.run(lib, kr, out, (x,), (), grid=r.grid[:2], block=r.block[0],
                  extra={"nout": nout, "nred": nred, "A": A, "B": B, "M": M, "except_dim": exc,
                         "src_cols": 301, "dst_cols": 301, "scale": 1.0})
    np.testing.assert_allclose(out, x.numpy().sum(0), rtol=1e-5, atol=1e-5)
    s = launch.softmax(37, TINY)
    sm = np.zeros((37, 301), np.float32)
    cuda_host.run(lib, ks, sm, (), (), grid=s.grid[:2], block=s.block[0],
                  extra={"src": x.numpy().ctypes.data, "src_pitch": x.stride})
    want = ms.new_tensor((37, 301))
    ms.nn.softmax(want, x)
    assert sm.tobytes() == want.numpy().tobytes()
